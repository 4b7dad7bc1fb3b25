/*
 * plan.h — internal: what a decoder layer is built of, as kinds (issue 34;
 * docs/MODELS.md). A family's descriptor (arch.h) declares its kinds in a
 * moe8_family_kinds; moe8_plan_layer resolves that declaration against a
 * config.json into one moe8_layer_plan per layer: the kind of each part and
 * the numbers it runs with. The loader, the forward, the sharding, the
 * quantizer, make-model and inspect read the plan, not flags or family ids.
 *
 *   attention    GQA (q/k/v/o, MOE8_R_Q/K/V/O) or MLA (multi-head latent,
 *                src/model/mla.c), with options: q/k RMSNorm per head or over
 *                the whole projection (minimax_m2; under TP its mean of
 *                squares sums over the ranks), q/k/v biases, a sigmoid output
 *                gate (q_proj per head [query D, gate D]: qwen3_next,
 *                qwen3_5_moe), an o bias, attention sinks (a learned logit
 *                per head in each softmax's denominator), a sliding window on
 *                the layers layer_types marks (gpt_oss; model/attn_sink.c).
 *                Hybrid families (gdn_layers) make every layer Gated
 *                DeltaNet linear attention (MOE8_ATTN_GDN, model/attn_gdn.c)
 *                except the full-attention ones that layer_types or
 *                full_attention_interval name
 *   norms        RMSNorm x w, or zero-centred x (1 + w) (MOE8_NORM_ZERO_CENTRED:
 *                the layer norms, q/k norms and the final norm; not the Gated
 *                DeltaNet output norm)
 *   rotary       none, halves (NEOX, rotate_half) or interleaved pairs; over
 *                the whole head, a count of leading dims (rotary_dim, MLA's
 *                qk_rope_head_dim) or a fraction (partial_rotary_factor);
 *                YaRN's frequencies and scales (arch/rope.c)
 *   feed-forward dense SwiGLU MLP, MoE, or MoE plus a shared expert (summed,
 *                or gated by sigmoid(h . shared_expert_gate))
 *   router       softmax or sigmoid scores, an e_score_correction_bias for
 *                the selection, grouped top-k (groups ranked by their best or
 *                the sum of their two best), renormalization and scaling
 *                (both, or DeepSeek-V2's one-or-the-other); a router bias
 *                added to the logits (gpt_oss: softmax over the top-k logits
 *                is softmax then renormalization)
 *   activation   SwiGLU, or clamped SwiGLU (gate <= limit, |up| <= limit,
 *                (up + 1) gate sigmoid(alpha gate)) with expert biases
 *   tensors      the descriptor's name formats (arch.h); stacked expert
 *                tensors (gate_up_proj [E][2I][H], down_proj [E][H][I]: FLOAT,
 *                each expert sliced out at load); gpt_oss's stacked
 *                experts ([E][H][2I] gate/up interleaved, [E][I][H], or
 *                MXFP4 blocks; load/experts_gptoss.c); skipped: the
 *                tensors of the layers at and past num_hidden_layers (MTP
 *                modules), when the family declares them
 *
 * A family built from existing kinds is one descriptor file and a line in
 * arch.c's list.
 */
#ifndef MOE8_PLAN_H
#define MOE8_PLAN_H

#include <stdint.h>

#include "core/public.h"

/* ---- the kinds ----------------------------------------------------------- */

typedef enum {
    MOE8_ATTN_GQA,                 /* grouped-query attention over q/k/v/o */
    MOE8_ATTN_MLA,                 /* multi-head latent attention (deepseek) */
    MOE8_ATTN_GDN,                 /* Gated DeltaNet linear attention (a hybrid family's
                                    * linear layers; model/attn_gdn.c) */
} moe8_attn_kind;

/* Attention options (a descriptor's attn_opts, a plan's attn_opts). */
#define MOE8_ATTN_QK_NORM_HEAD  0x01u /* RMSNorm of each q / k head (q_norm, k_norm [D]) */
#define MOE8_ATTN_QK_NORM_WHOLE 0x02u /* RMSNorm over the whole q / k projection before the head
                                       * split (q_norm [NH*D], k_norm [NKV*D]: minimax_m2) */
#define MOE8_ATTN_QKV_BIAS      0x04u /* q/k/v biases (the config's qkv_bias may switch them on) */
#define MOE8_ATTN_O_BIAS        0x08u /* an o_proj bias (the config's attention_bias false
                                       * switches it off with q/k/v's) */
#define MOE8_ATTN_OUT_GATE      0x10u /* x sigmoid(gate) before o_proj, the gate the second
                                       * half of each head's q_proj rows (the config's
                                       * attn_output_gate false switches it off) */
#define MOE8_ATTN_SINKS         0x20u /* attention sinks: self_attn.sinks [NH] join each
                                       * softmax's denominator */
#define MOE8_ATTN_SLIDING       0x40u /* a sliding window by layer pattern: of a layer's
                                       * plan only on its sliding layers (plan.window) */

/* Norm options (a descriptor's norm). */
#define MOE8_NORM_ZERO_CENTRED  0x01u /* x / rms(x) * (1 + w) (Qwen3NextRMSNorm): layer, q/k
                                       * and final norms (loaded as 1 + w) */

typedef enum {
    MOE8_ROPE_HALVES,              /* rotate_half: (i, i + R/2) (NEOX) */
    MOE8_ROPE_PAIRS,               /* interleaved (2i, 2i + 1); the config's rope_interleave
                                    * false turns it into halves (deepseek_v3) */
    MOE8_ROPE_NONE,                /* no rotary embedding (not supported yet) */
} moe8_rope_kind;

/* Which layers are MoE (SEMANTICS §7). */
typedef enum {
    MOE8_LAYERS_ALL_MOE,           /* every layer (mixtral) */
    MOE8_LAYERS_SPARSE_STEP,       /* decoder_sparse_step / mlp_only_layers (qwen) */
    MOE8_LAYERS_FIRST_K_DENSE,     /* first_k_dense_replace / moe_layer_freq (deepseek) */
} moe8_layer_rule;

typedef enum {
    MOE8_FFN_DENSE,                /* SwiGLU MLP of intermediate_size */
    MOE8_FFN_MOE,                  /* routed experts */
    MOE8_FFN_MOE_SHARED,           /* routed experts plus a shared expert */
} moe8_ffn_kind;

typedef enum {
    MOE8_SHARED_SUM,               /* added as is (deepseek's shared experts) */
    MOE8_SHARED_SIGMOID_GATE,      /* x sigmoid(h . shared_expert_gate) (qwen2_moe) */
} moe8_shared_gate;

/* How top-k weights are renormalized and scaled. */
typedef enum {
    MOE8_RENORM_CONFIG,            /* norm_topk_prob, then x routed_scaling_factor */
    MOE8_RENORM_ALWAYS,            /* always (mixtral: norm_topk_prob is not a key) */
    MOE8_RENORM_OR_SCALE,          /* DeepSeek-V2's MoEGate: renormalized when norm_topk_prob
                                    * and top-k > 1, else x routed_scaling_factor */
} moe8_renorm_rule;

typedef enum {
    MOE8_ACT_SWIGLU,               /* silu(gate) * up */
    MOE8_ACT_SWIGLU_CLAMPED,       /* gate <= limit, |up| <= limit, (up + 1) gate
                                    * sigmoid(alpha gate), with expert biases (gpt_oss) */
} moe8_act_kind;

/* Options of a family's tensors. */
#define MOE8_TENSORS_STACKED_EXPERTS 0x1u /* [E, ...] expert tensors (the descriptor's
                                           * stacked names), FLOAT, when the checkpoint
                                           * has them; else the per-expert names */
#define MOE8_TENSORS_SKIP_MTP        0x2u /* layers >= num_hidden_layers (multi-token
                                           * prediction modules) are skipped at load */
#define MOE8_TENSORS_GPTOSS_EXPERTS  0x4u /* gpt_oss's stacked experts: gate_up_proj
                                           * [E][H][2I] (gate, up interleaved) and down_proj
                                           * [E][I][H] with biases, or their MXFP4 _blocks /
                                           * _scales [E][rows][cols/32][16], [E][rows][cols/32];
                                           * else the per-expert names (a quantized folder) */

/* ---- a family's declaration (moe8_arch_desc.kinds) ----------------------- */

typedef struct {
    moe8_attn_kind attn;           /* of every layer (a hybrid's full-attention layers) */
    unsigned attn_opts;            /* MOE8_ATTN_* every such layer has */
    int gdn_layers;                /* hybrid: Gated DeltaNet layers except the full-attention
                                    * ones (layer_types / full_attention_interval) */
    unsigned norm;                 /* MOE8_NORM_* */
    moe8_rope_kind rope;
    moe8_layer_rule layers;
    moe8_ffn_kind moe;             /* what a MoE layer is: MOE8_FFN_MOE or _MOE_SHARED (the
                                    * shared expert where the config gives it a width) */
    moe8_shared_gate shared_gate;
    int sigmoid_router;            /* 0: per the config (deepseek_v3's scoring_sigmoid) */
    moe8_renorm_rule renorm;
    moe8_act_kind act;
    int router_bias;               /* the router has a bias (mlp.router.bias [E]: gpt_oss) */
    unsigned tensors;              /* MOE8_TENSORS_* */
} moe8_family_kinds;

/* ---- a resolved layer ----------------------------------------------------- */

typedef struct {
    /* attention */
    moe8_attn_kind attn;
    unsigned attn_opts;            /* MOE8_ATTN_* of this layer (0 for MOE8_ATTN_GDN) */
    int norm_zc;                   /* zero-centred RMSNorms (MOE8_NORM_ZERO_CENTRED) */
    /* rotary */
    moe8_rope_kind rope;
    int rope_dim;                  /* rotated dims R of each head (<= head_dim; MLA:
                                    * qk_rope_head_dim) */
    int yarn;                      /* YaRN frequencies and scales */
    int64_t window;                /* MOE8_ATTN_SLIDING: positions attended (itself
                                    * included); 0: every earlier position */
    /* feed-forward */
    moe8_ffn_kind ffn;
    moe8_shared_gate shared_gate;  /* MOE8_FFN_MOE_SHARED */
    int64_t width;                 /* DENSE: intermediate_size; MOE_SHARED: the shared width */
    /* router (MoE layers) */
    int sigmoid;                   /* scores: sigmoid, else softmax */
    int correction_bias;           /* e_score_correction_bias [E] for the selection */
    int grouped;                   /* grouped top-k over n_group groups, topk_group kept */
    int64_t n_group, topk_group;
    int group_top2;                /* a group's score: the sum of its two best, else its best */
    int renorm;                    /* top-k weights renormalized */
    double scale;                  /* then x this */
    int router_bias;               /* a bias [E] added to the router logits (gpt_oss) */
    /* expert activation */
    moe8_act_kind act;
    double limit, alpha;           /* MOE8_ACT_SWIGLU_CLAMPED */
} moe8_layer_plan;

/* The plan of layer l of c (0 <= l < num_hidden_layers); a pure function of
 * the config and its family's declaration: cheap, no allocation. */
void moe8_plan_layer(const moe8_config *c, int64_t l, moe8_layer_plan *out);

/* MOE8_OK, or MOE8_ERR_UNSUPPORTED naming the first kind or option of c's
 * family that moe8 declares but does not run yet ("'<label>': <family>: q/k
 * RMSNorm over the whole projection not supported yet"). */
moe8_status moe8_plan_check(const moe8_config *c, const char *label, moe8_error *err);

/* "GQA", "MLA", "GDN"; "halves", "pairs", "none"; "dense", "MoE", "MoE + shared" */
const char *moe8_attn_kind_name(moe8_attn_kind k);
const char *moe8_rope_kind_name(moe8_rope_kind k);
const char *moe8_ffn_kind_name(moe8_ffn_kind k);

#endif
