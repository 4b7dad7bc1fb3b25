/*
 * weights.h — internal (load/): the prepared weights, what the forward pass
 * (model/forward.h) reads — a loaded model's tensors packed, sliced and
 * converted once (weights.c) — and their lifetime: the model holds them, one
 * set per float_experts setting, built by the first context that needs them
 * (or moe8_model_prepare), shared read-only by its contexts, freed with the
 * last reference.
 *
 * Shapes are [rows][cols], outermost first; H is the hidden size, D the head
 * dim (model.h names the rest).
 */
#ifndef MOE8_WEIGHTS_H
#define MOE8_WEIGHTS_H

#include <stddef.h>

#include "kernels/kernels.h"
#include "load/model.h"
#include "load/proj.h"
#include "core/public.h"

/* One decoder layer, ready to run. */
typedef struct {
    moe8_layer_plan plan;          /* its kinds (arch/plan.h): the forward dispatches on them */
    float *attn_norm, *ffn_norm;   /* [H] fp32 (owned; tiny) */
    float *q_norm, *k_norm;        /* [D]; over the whole projection (plan.attn_opts): this
                                    * rank's [NH*D] and [NKV*D] slices */
    moe8_proj q, k, v, o;          /* [NH*D][H], [NKV*D][H] x2, [H][NH*D] */
    float *sinks;                  /* [NH] this rank's heads' attention sinks (gpt_oss), or NULL */
    int is_moe;
    moe8_moe_layer *moe;           /* MoE layers: this rank's part */
    int ws_layer;                  /* MoE layers: first layer of the same shape, whose
                                    * workspace this one uses */
    moe8_proj gate, up, down;      /* dense layers: [F][H] x2, [H][F] (this rank's F slice) */
    int has_shared;                /* MoE layer with a shared expert (qwen2_moe): */
    moe8_proj sh_gate, sh_up, sh_down; /* [S][H] x2, [H][S] (this rank's S slice) */
    moe8_proj sh_score;            /* shared_expert_gate [1][H], FLOAT; n == 0: ungated
                                    * (deepseek's shared experts) */
    /* multi-head latent attention (moe8_weights.mla); q above is q_proj when QL == 0: */
    moe8_proj q_a, q_b, kv_a;      /* [QL][H], [NH*D][QL] (local heads), [C][H] */
    float *q_a_norm, *kv_a_norm;   /* [QL], [L] */
    void *uk;                      /* [NH][L][DN] of uk_dt: kv_b_proj's k_nope rows of each
                                    * local head, transposed (q_nope -> latent) */
    void *uv;                      /* [NH][DV][L] of uk_dt: its v rows (latent -> v) */
    moe8_dtype uk_dt;              /* kv_b_proj's dtype when FLOAT, F32 when W8A8 (dequantized) */
    float *uv_bias;                /* [NH*DV] a W8A8 kv_b_proj's folded bias on v, or NULL */
    /* Gated DeltaNet (plan.attn MOE8_ATTN_GDN; moe8_weights.gdn_* the widths): */
    moe8_proj gdn_in;              /* in_proj_qkvz [2NKdk+2NVdv][H] grouped, or in_proj_qkv [C][H] */
    moe8_proj gdn_z;               /* in_proj_z [NVdv][H] (n == 0 when grouped) */
    moe8_proj gdn_ba;              /* in_proj_ba [2NV][H] grouped, or in_proj_b [NV][H]; FLOAT */
    moe8_proj gdn_a;               /* in_proj_a [NV][H] (n == 0 when grouped); FLOAT */
    moe8_proj gdn_out;             /* out_proj [H][NVdv] */
    float *gdn_conv;               /* [K][C] fp32: conv1d.weight [C][1][K] transposed */
    float *gdn_a_log, *gdn_dt_bias;/* [NV] fp32 */
    float *gdn_norm;               /* [dv] fp32 (plain weight) */
    int gdn_slot;                  /* its index among the Gated DeltaNet layers (state slot) */
    void *gdn_own;                 /* TP, flat in_proj_qkv: this rank's rows gathered (owned) */
    moe8_tensor gdn_own_t;         /*   and their tensor, which gdn_in reads */
    int kv_layer;                  /* its layer of the KV cache (-1: a Gated DeltaNet layer) */
} moe8_fwd_layer;

/* Everything the forward pass reads, built once per model and float_experts
 * setting and shared read-only by its contexts (the model holds them:
 * moe8_weights_acquire). Under TP/EP (model.h shard) it holds this
 * rank's share: n_head/n_kv are the local heads, F_max the local width, and
 * o_proj, dense down and the MoE output are partial sums all-reduced over
 * `comm` (NULL with one rank: no call at all). */
typedef struct moe8_weights {
    const moe8_model *model;
    const moe8_kernels *kt;        /* the kernel table the int8 weights (linears, experts,
                                    * the packed cache) were packed for: the forward runs
                                    * with it, and each GEMM checks it reads their layout */
    struct moe8_comm *comm;        /* NULL: single process */
    int H, n_layer, n_head, n_kv, D, V, F_max; /* F_max: widest dense MLP or shared expert
                                    * (this rank's slice), 0 if none */
    int has_shared;                /* some layer has a shared expert */
    int has_dynamic;               /* some dense-path linear is W8A8_DYNAMIC or W4A8_DYNAMIC */
    int E, K;
    float eps;
    /* attention geometry: the cache holds kv_planes x n_kv x C values per position and layer */
    int mla;                       /* multi-head latent attention (deepseek) */
    int kv_planes, C;              /* 2 and D; MLA: 1 and L + R */
    int L, R, DN, DV, QL;          /* MLA widths (DV = D outside MLA) */
    int rope_dim;                  /* rotary width R of each head (the layers' plan.rope_dim) */
    int out_gate;                  /* some layer's q_proj carries the output gate (q rows
                                    * [NH][2][D]) */
    /* Gated DeltaNet layers (hybrid families): how many, NK, NV (this rank's under TP),
     * dk, dv, conv K, and whether the projections are grouped by key head
     * (in_proj_qkvz / in_proj_ba) */
    int n_gdn, gdn_nk, gdn_nv, gdn_dk, gdn_dv, gdn_k, gdn_grouped;
    int n_kv_layers;               /* layers with KV cache rows (all but the DeltaNet ones) */
    float attn_scale;              /* softmax scale */
    const void *embed;             /* [V][H] in place */
    moe8_dtype embed_dt;
    moe8_proj lm_head;             /* [V][H] FLOAT in place (embed when tied) or W8A8_DYNAMIC
                                    * packed; under TP rows [v_begin, v_begin + v_count) only */
    int v_chunk;                   /* TP: vocab rows per rank (ceil(V / ranks)); 0: whole vocab */
    int v_begin, v_count;          /* TP: this rank's lm_head rows */
    int n_ranks;                   /* 1 without TP/EP */
    float *final_norm;             /* [H] */
    moe8_fwd_layer *layers;        /* [n_layer] */
    int float_experts;             /* W8A8 experts run dequantized */
    size_t owned_bytes;            /* packed weights and vectors */
    struct moe8_pcache *cache;     /* the packed cache the int8 weights are mapped from (or
                                    * were written to); NULL: none */
} moe8_weights;


/* Build the prepared weights of m for the table in use (moe8_kernels_get):
 * mapped from its packed cache, or packed into a new cache section by
 * section and then mapped, or packed in memory (weights.c). */
moe8_status moe8_weights_build(const moe8_model *m, int float_experts, int n_threads,
                               moe8_weights **out, moe8_error *err);
void moe8_weights_free(moe8_weights *w);

/* The model's prepared weights for float_experts (0 or 1), built on first
 * use under the model's lock (a caller arriving meanwhile waits for that one
 * build), with one reference taken for the caller. */
moe8_status moe8_weights_acquire(moe8_model *m, int float_experts, int n_threads,
                                 const moe8_weights **out, moe8_error *err);
/* Drop a reference moe8_weights_acquire gave (w NULL: none); the last one
 * frees the weights. */
void moe8_weights_release(moe8_model *m, const moe8_weights *w);

#endif
