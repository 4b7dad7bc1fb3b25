/*
 * forward.h — internal: the forward pass of every family (SEMANTICS §5, §7),
 * the prepared weights it reads and the context it runs in.
 *
 *   linear.h     FLOAT and W8A8 linear layers (moe8_proj; linear.c)
 *   attention.h  RMSNorm, RoPE, KV writes, causal GQA flash attention (attention.c)
 *   forward.c    prepared weights (moe8_weights) and the per-layer loop
 *   context.c    contexts (KV cache, scratch), batches
 *
 * Shapes are [rows][cols], outermost first; T is the number of tokens of one
 * forward call, H the hidden size, D the head dim.
 */
#ifndef MOE8_FORWARD_H
#define MOE8_FORWARD_H

#include <stdint.h>

#include "kernels/kernels.h"
#include "model/attention.h"
#include "model/linear.h"
#include "model/model.h"
#include "core/public.h"

/* ======================================================================== */
/* forward.c                                                                 */
/* ======================================================================== */

/* One decoder layer, ready to run. */
typedef struct {
    float *attn_norm, *ffn_norm;   /* [H] fp32 (owned; tiny) */
    float *q_norm, *k_norm;        /* [D] */
    moe8_proj q, k, v, o;          /* [NH*D][H], [NKV*D][H] x2, [H][NH*D] */
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
} moe8_fwd_layer;

/* Everything the forward pass reads, built once per model and shared
 * read-only by its contexts. Under TP/EP (model.h shard) it holds this
 * rank's share: n_head/n_kv are the local heads, F_max the local width, and
 * o_proj, dense down and the MoE output are partial sums all-reduced over
 * `comm` (NULL with one rank: no call at all). */
typedef struct moe8_weights {
    const moe8_model *model;
    struct moe8_comm *comm;        /* NULL: single process */
    int H, n_layer, n_head, n_kv, D, V, F_max; /* F_max: widest dense MLP or shared expert
                                    * (this rank's slice), 0 if none */
    int has_shared;                /* some layer has a shared expert */
    int has_dynamic;               /* some dense-path linear is W8A8_DYNAMIC */
    int E, K;
    float eps;
    /* attention geometry: the cache holds kv_planes x n_kv x C values per position and layer */
    int mla;                       /* multi-head latent attention (deepseek) */
    int kv_planes, C;              /* 2 and D; MLA: 1 and L + R */
    int L, R, DN, DV, QL;          /* MLA widths (DV = D outside MLA) */
    int rope_interleave;           /* MLA: rotary on pairs (2i, 2i+1), else on halves */
    int rope_dim;                  /* rotary width: pairs (2i, 2i+1) with MLA, halves (NEOX) else */
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

moe8_status moe8_weights_build(const moe8_model *m, int float_experts, int n_threads,
                               moe8_weights **out, moe8_error *err);
void moe8_weights_free(moe8_weights *w);

/* Calibration hook (convert/calib.c): sees the input x[n_rows][n_cols] of the
 * linears of layer `layer` at `site` (0 q/k/v or MLA's q_proj / q_a_proj /
 * kv_a_proj_with_mqa, 1 o_proj, 2 dense gate/up, 3 dense down, 4 MLA's
 * q_b_proj). Unset (NULL) in normal use: one test per call site. */
typedef void (*moe8_observe_fn)(void *user, int layer, int site, const float *x, int n_rows,
                                int n_cols);

/* Scratch of one context, for up to n_batch tokens and n_out logits rows. */
typedef struct {
    int n_batch, n_out, ldq;
    float *x, *h, *q, *k, *v, *att, *tmp;  /* [B][H], [B][H], [B][NH*D], [B][NKV*D] x2, [B][NH*D], [B][H] */
    float *mlp;                            /* [B][2F] (dense layers) */
    int8_t *xq;                            /* [B][ldq] W8A8 codes */
    float *ones;                           /* [B] */
    int32_t *ones_i;                       /* [B] */
    float *attn_work;                      /* [n_threads][attn_work_floats] */
    size_t attn_work_floats;               /* moe8_attention_work_floats */
    int32_t *attn_tiles;                   /* [2][B] query tiles */
    moe8_moe_workspace **moe_ws;           /* [n_layer]: set for layers with ws_layer == itself */
    float *logits;                         /* [n_out][V] */
    float *lm_part, *lm_all;               /* TP: [n_out][v_chunk], [ranks][n_out][v_chunk] */
    float *lm_sx;                          /* W8A8_DYNAMIC lm_head: [n_out] row scales */
    int32_t *lm_xsum;                      /*   and [n_out] code sums (codes in xq) */
    float *dyn_sx;                         /* W8A8_DYNAMIC linears (shared expert): [B] row */
    int32_t *dyn_xsum;                     /*   scales and [B] code sums (codes in xq) */
    float *sh_out, *sh_score;              /* shared expert: [B][H] output, [B] gate logit */
    float *qa, *kva, *qc, *attv;           /* MLA: [B][QL], [B][C], [B][NH*C], [B][NH*DV];
                                            * att is then [B][NH*C] */
    void *block;
    moe8_observe_fn observe;               /* NULL unless calibrating */
    void *observe_user;
    long majflt;                           /* the process's major faults at the last forward */
} moe8_fwd_scratch;

/* One forward over T tokens (already validated, their blocks reserved):
 * token[T], seq[T], pos[T]; K/V of every token are written into the cache at
 * (seq, pos) first. Logits of the rows out_idx[n_out] go to s->logits. Never
 * allocates. */
moe8_status moe8_forward(const moe8_weights *w, moe8_fwd_scratch *s, const moe8_kv_view *kv,
                         int64_t n_ctx, const float *rope, const int32_t *token,
                         const int32_t *seq, const int32_t *pos, int T, const int32_t *out_idx,
                         int n_out, int n_threads, moe8_error *err);

/* Set (or clear, fn NULL) the calibration hook of a context (context.c). */
void moe8_context_set_observer(moe8_context *ctx, moe8_observe_fn fn, void *user);

#endif
