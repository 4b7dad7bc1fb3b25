/*
 * moe8_moe.h — the MoE layer on its own (SEMANTICS §1-§4): routing, dispatch, quantized
 * experts and combine over caller-provided weights.
 *
 * Experimental: for embedding the layer in another engine and for its tests and
 * benchmarks; fields are appended, and a call may change with the kernel layer.
 */
#ifndef MOE8_API_MOE_H
#define MOE8_API_MOE_H

#include "moe8.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================== */
/* MoE layer (SEMANTICS §1-§4)                                                    */
/* ======================================================================== */

/* Router scoring (SEMANTICS §2). Append-only. */
typedef enum {
    MOE8_SCORING_SOFTMAX = 0,
    MOE8_SCORING_SIGMOID = 1,
} moe8_scoring;

/* Group score of the grouped top-k. Append-only. */
typedef enum {
    MOE8_GROUP_SCORE_MAX = 0,       /* max of the group's experts (the reference) */
    MOE8_GROUP_SCORE_TOP2_SUM = 1,  /* sum of its 2 best (DeepSeek-V3) */
} moe8_group_score;

/* Custom routing: raw logits [n_tokens][n_expert] -> ids and weights
 * [n_tokens][top_k]. Its result is used as returned (moe8 neither renormalizes
 * nor scales it; `renormalize` is passed so the callback can honour it), after
 * checking ids are in [0, n_expert), distinct within a token, and weights are
 * finite. A non-zero return is passed on to the caller. */
typedef moe8_status (*moe8_routing_fn)(void *user, const float *logits, int n_tokens,
                                       int n_expert, int top_k, int renormalize, int32_t *ids,
                                       float *weights, moe8_error *err);

/* Initialise with moe8_router_params_default(); fields are only ever appended. */
typedef struct {
    int top_k;                          /* K, 1..E (default 0: must be set) */
    int renormalize;                    /* w /= sum(w) over the K selected */
    moe8_scoring scoring;               /* default softmax */
    int use_grouped_topk;               /* grouped path (below) */
    int num_expert_group;               /* G: divides E */
    int topk_group;                     /* groups kept, 1..G */
    moe8_group_score group_score;       /* default max */
    const float *e_score_correction_bias; /* [E] or NULL: grouped path only (select on
                                           * s + bias, weights from s); copied by
                                           * moe8_moe_layer_create */
    float routed_scaling_factor;        /* multiplies the weights after renormalize (1.0) */
    moe8_routing_fn custom;             /* replaces the built-in paths when set */
    void *custom_user;
} moe8_router_params;
moe8_router_params moe8_router_params_default(void);

/* Expert selection for n_tokens tokens: logits [T][E] -> ids [T][K] (int32)
 * and weights [T][K] (fp32). Slot j of a token is its j-th expert in
 * descending score order; ties go to the lower id. Scores are ranked exactly:
 * on the plain path by logit (softmax and sigmoid are increasing), so two
 * different logits whose fp32 scores round equal still rank by logit. Experts
 * of dropped groups are never selected; weights summing to 0 stay 0. Thread
 * safe (allocates a small scratch on the grouped path). */
moe8_status moe8_select_experts(const float *logits, int n_tokens, int n_expert,
                                const moe8_router_params *p, int32_t *ids, float *weights,
                                moe8_error *err);

/* One expert weight in checkpoint layout [out][in]. Quantized: data int8
 * (MOE8_DT_I8), scale [out] F32/BF16/F16, offset [out] (F32/BF16/F16/I8/I32,
 * integer values in [-128, 127], W ~ scale * (data + offset)) or NULL. Float:
 * data F32/BF16/F16, scale and offset unused. W4A8_DYNAMIC: data is
 * msModelSlim's packed int4, I8 [out/2][in], byte [j][k] holding W[2j][k] in
 * its low nibble and W[2j+1][k] in its high one, two's complement (out even). */
typedef struct {
    const void *data;
    moe8_dtype dtype;
    const void *scale;
    moe8_dtype scale_dtype;
    const void *offset;
    moe8_dtype offset_dtype;
    const void *bias;               /* [out] F32/BF16/F16 added after the product (gpt_oss's
                                     * experts), or NULL; copied by create */
    moe8_dtype bias_dtype;
} moe8_moe_weight;

/* gate [I][H], up [I][H], down [H][I] of one expert. */
typedef struct {
    moe8_moe_weight gate, up, down;
} moe8_moe_expert;

/* Everything a MoE layer is built from. Initialise with
 * moe8_moe_layer_desc_default(); fields are only ever appended. */
typedef struct {
    const char *name;               /* names the layer in errors ("model.layers.3.mlp") */
    int n_expert;                   /* E (global) */
    int hidden;                     /* H */
    int intermediate;               /* I of the checkpoint (whole) */
    int i_begin, i_end;             /* TP slice of I, [i_begin, i_end); 0,0 = whole:
                                     * gate/up rows and down columns of the slice,
                                     * down scales/offsets whole */
    int expert_first, expert_last;  /* EP: local experts [first, last); 0,0 = all */
    moe8_quant_type quant;          /* MOE8_QUANT_W8A8_DYNAMIC, MOE8_QUANT_W4A8_DYNAMIC or
                                     * MOE8_QUANT_FLOAT */
    const moe8_moe_expert *experts; /* [E] by global id; only local entries are read */
    const void *router;             /* [E][H] router weight (F32/BF16/F16) or NULL */
    moe8_dtype router_dtype;
    moe8_router_params router_params;
    int n_threads;                  /* forward threads; 0 = omp_get_max_threads() */
    int down_float;                 /* with quant W8A8_DYNAMIC: gate/up are int8 but every
                                     * down is a float weight (data F32/BF16/F16 [H][I]),
                                     * fed the float A (no second quantization) */
    /* Called once per local quantized expert (global id) as soon as its int8
     * weights are packed, from the packing thread (several at once), so the
     * caller can give back their source pages then rather than after the
     * whole layer (moe8_moe_layer_from_model does). NULL: not called. */
    void (*on_packed)(void *user, int expert);
    void *on_packed_user;
    /* Where packed int8 experts may come from and go to (a model's packed
     * cache sets these; NULL: packed into memory the layer owns): take gives
     * `bytes` bytes already packed in the kernel table's layout, read-only and
     * outliving the layer, or NULL to pack them; put is handed the bytes just
     * packed. */
    const void *(*packed_take)(void *user, size_t bytes);
    void (*packed_put)(void *user, const void *p, size_t bytes);
    void *packed_user;
    /* gpt_oss: a bias [E] added to the router logits computed from `router`
     * (copied; NULL: none), and the clamped SwiGLU (act_limit > 0): gate <=
     * limit, -limit <= up <= limit, A = (up + 1) gate sigmoid(act_alpha gate),
     * gate and up with their biases (moe8_moe_weight.bias) */
    const float *router_bias;
    float act_limit, act_alpha;
} moe8_moe_layer_desc;
moe8_moe_layer_desc moe8_moe_layer_desc_default(void);

/* Built layer: quantized experts are repacked into memory the layer owns (the
 * source arrays may be freed after create); float experts and the router
 * weight are used in place, in their stored dtype, and must outlive the
 * layer. A layer is read-only after create: share it between threads and
 * workspaces freely. */
typedef struct moe8_moe_layer moe8_moe_layer;
/* Scratch of forward, sized once; belongs to one caller at a time. */
typedef struct moe8_moe_workspace moe8_moe_workspace;

moe8_status moe8_moe_layer_create(const moe8_moe_layer_desc *desc, moe8_moe_layer **out,
                                  moe8_error *err);
void moe8_moe_layer_free(moe8_moe_layer *layer);

typedef struct {
    int n_expert, hidden;
    int intermediate;               /* local I (the TP slice) */
    int i_begin;
    int expert_first, expert_last;
    int top_k;
    moe8_quant_type quant;
    size_t packed_bytes;            /* memory owned for packed weights, scales, offsets */
} moe8_moe_layer_info;
void moe8_moe_layer_get_info(const moe8_moe_layer *layer, moe8_moe_layer_info *out);

/* 1 when a workspace made for one layer serves the other: same shape
 * (E, H, local I, local experts, quant and down_float, top_k, router
 * present, threads). */
int moe8_moe_layer_same_shape(const moe8_moe_layer *a, const moe8_moe_layer *b);

/* Workspace for up to max_tokens tokens per forward, run with n_threads
 * OpenMP threads (0 = the layer's setting). It serves `layer` and every
 * layer of the same shape (moe8_moe_layer_same_shape); forward checks it. */
moe8_status moe8_moe_workspace_create(const moe8_moe_layer *layer, int max_tokens,
                                      int n_threads, moe8_moe_workspace **out, moe8_error *err);
void moe8_moe_workspace_free(moe8_moe_workspace *ws);

/* out [T][H] = MoE(h [T][H]) (written, not accumulated). router_logits
 * [T][E], or NULL to compute them from the router weight. Under EP/TP `out`
 * is this part's partial sum (sum it across parts). Never allocates; the
 * result is bit-identical for any thread count. */
moe8_status moe8_moe_layer_forward(const moe8_moe_layer *layer, moe8_moe_workspace *ws,
                                   const float *h, int n_tokens, const float *router_logits,
                                   float *out, moe8_error *err);

/* Routing of the last forward: ids and weights [n_tokens][top_k] (valid until
 * the next forward on ws). */
void moe8_moe_workspace_routing(const moe8_moe_workspace *ws, int *n_tokens,
                                const int32_t **ids, const float **weights);

/* The part of a model's MoE layer one process builds (SEMANTICS §8). */
typedef struct {
    int i_begin, i_end;             /* TP slice of I; 0,0 = whole */
    int expert_first, expert_last;  /* EP range; 0,0 = all experts */
    int n_threads;                  /* 0 = the model's n_threads */
    int dequantize;                 /* W8A8_DYNAMIC experts: dequantize the part to fp32,
                                     * W = S*(Wq + O), owned by the layer, and run it as
                                     * FLOAT experts (a comparison aid: 4x the memory) */
} moe8_moe_part;

/* Build MoE layer `layer` of a loaded model: router weight (mlp.gate, or the
 * family's name for it) in place, routing from config.json (top_k =
 * num_experts_per_tok, renormalize = norm_topk_prob, always for Mixtral,
 * softmax), experts as the layer stores them: W8A8_DYNAMIC repacked, after
 * which the mapped pages of the local experts' int8 tensors are released
 * (SEMANTICS §6b), or FLOAT used in place; a FLOAT down_proj beside
 * W8A8_DYNAMIC gate/up is used in place too (moe8_moe_layer_desc.down_float).
 * `part` may be NULL (the whole layer). The model must outlive the layer. */
moe8_status moe8_moe_layer_from_model(const moe8_model *m, int64_t layer,
                                      const moe8_moe_part *part, moe8_moe_layer **out,
                                      moe8_error *err);

#ifdef __cplusplus
}
#endif

#endif /* MOE8_API_MOE_H */
