/*
 * fixture_model.h — header-only generator of tiny synthetic model folders in
 * ModelSlim layout, for tests: Qwen3-MoE by default, Qwen2-MoE, Mixtral,
 * DeepSeek-V2/V3, GLM-4.5 or MiniMax-M2 with o.arch (tensor names and
 * config.json keys as Hugging Face spells them for each family, written here
 * independently of src/arch). Include after test.h.
 *
 *   fx_opts o = fx_default_opts();       // H 64, 2 layers, 4/2 heads, D 16,
 *   o.quant = 1;                         // E 4, top-2, I 32, F 96, vocab 256
 *   fx_write_model(dir, &o);             // 0 on success
 *
 * Writes config.json, generation_config.json (optional), model.safetensors or
 * two shards + model.safetensors.index.json, and quant_model_description.json
 * (quantized models, or float ones with o.float_desc). Tensor names follow
 * SEMANTICS §6. Storage per option:
 *   quant 0: every linear float (o.float_dtype: BF16 or F32)
 *   quant 1: q/k/v/o (and dense MLP) W8A8 static: weight I8 [out][in],
 *            input_scale [1] F32, input_offset [1] (I8 when deq_i64, else
 *            float_dtype), deq_scale [out] (I64 bit pattern or F32),
 *            quant_bias [out] I32, weight_scale/weight_offset [out] F32;
 *            experts W8A8_DYNAMIC: weight I8, weight_scale and weight_offset
 *            [N] or [N][1] (scale_2d) in o.scale_dtype.
 *   lm_head_w8a8: lm_head W8A8_DYNAMIC like the experts (either quant).
 *   w4a8_layers (quant 1, bit l: layer l): the layer's routed experts
 *            W4A8_DYNAMIC as msModelSlim writes them (SEMANTICS §4b, written
 *            here from that description): codes in [-8, 7], weight I8
 *            [N/2][K] with W[2j][k] in the low nibble of byte [j][k] and
 *            W[2j+1][k] in the high one; weight_scale and weight_offset (0)
 *            F32 [N][1]; scale_bias F32 8 sum_k W S as [N][1] (gate/up) or
 *            per 16 K chunks [N][16] (down); float_expert_layers: the
 *            layer's routed experts FLOAT (a recipe's mixed layers).
 * Families (o.arch):
 *   FX_QWEN3 (0)  q_norm/k_norm, no biases, mlp.experts.N.{gate,up,down}_proj
 *   FX_QWEN2 (1)  no q/k norm; q/k/v biases: float `.bias` [out] (quant 0), or
 *                 folded into quant_bias (quant 1; the float `.bias` is also
 *                 written with o.bias_tensor, to be ignored); a shared expert
 *                 mlp.shared_expert.{gate,up,down}_proj of width shared_inter
 *                 (FLOAT, or W8A8_DYNAMIC like the experts) and its gate
 *                 mlp.shared_expert_gate [1][H]; norm_topk_prob = !no_renorm
 *   FX_MIXTRAL (2) no q/k norm, no biases, block_sparse_moe.gate and
 *                 block_sparse_moe.experts.N.{w1,w3,w2} (gate, up, down), every
 *                 layer MoE (dense_layer ignored), eps 1e-5, always renormalized
 *   FX_DEEPSEEK_V2 (3), FX_DEEPSEEK_V3 (4)  multi-head latent attention as
 *                 DeepSeek's modeling code names it: self_attn.q_proj [NH*(dn+dr)][H]
 *                 (o.q_lora 0), else q_a_proj [QL][H], q_a_layernorm [QL], q_b_proj
 *                 [NH*(dn+dr)][QL]; kv_a_proj_with_mqa [L+dr][H], kv_a_layernorm [L],
 *                 kv_b_proj [NH*(dn+dv)][L], o_proj [H][NH*dv]; dense MLPs in layers
 *                 l < first_dense or l % moe_freq != 0; MoE layers mlp.gate [E][H],
 *                 mlp.experts.N.*, mlp.shared_experts.* of width n_shared*moe_inter
 *                 (ungated) and, V3, mlp.gate.e_score_correction_bias [E] F32 in
 *                 [0, e_bias_max). config.json: HF's DeepseekV2/V3 keys (topk_method
 *                 greedy / group_limited_greedy (V2), noaux_tc (V3); scoring softmax /
 *                 sigmoid; rope_scaling yarn with o.yarn). quant 1: q_proj / q_a / q_b /
 *                 kv_a / o_proj and dense MLPs W8A8 static, kv_b_proj FLOAT (W8A8
 *                 static with o.kvb_w8a8: its quant_bias = -input_offset * sum_i Wq,
 *                 which cancels the input offset), routed and shared experts
 *                 W8A8_DYNAMIC. n_kv_heads and head_dim are ignored.
 *   FX_GLM4_MOE (5) Glm4MoeForCausalLM as zai-org's GLM-4.5 / 4.6 / 4.7 checkpoints
 *                 lay it out: q/k/v/o_proj, q/k/v `.bias` [out] unless o.no_attn_bias
 *                 (float `.bias` written as FX_QWEN2's: quant 0, or quant 1 with
 *                 o.bias_tensor), self_attn.q_norm/k_norm [D] unless o.no_qk_norm;
 *                 the MLP / MoE block under DeepSeek-V3's names (dense mlp.*_proj in
 *                 layers l < first_dense, mlp.gate.weight, mlp.gate.e_score_correction_bias
 *                 [E] F32, mlp.experts.N.*, mlp.shared_experts.* of n_shared * moe_inter);
 *                 config.json: partial_rotary_factor (o.partial_rotary, 0.5), use_qk_norm,
 *                 attention_bias, n_group / topk_group, routed_scaling_factor,
 *                 norm_topk_prob, n_routed_experts, n_shared_experts,
 *                 first_k_dense_replace, num_nextn_predict_layers (o.n_mtp, 1),
 *                 rms_norm_eps (o.rms_eps, 1e-5), rope_theta (o.theta, 1e6).
 *   FX_MINIMAX_M2 (6) MiniMaxM2ForCausalLM as MiniMaxAI's checkpoints lay it out:
 *                 q/k/v/o_proj without biases, self_attn.q_norm [NH*D] and k_norm
 *                 [NKV*D] (over the whole projection), block_sparse_moe.gate.weight,
 *                 block_sparse_moe.e_score_correction_bias [E] F32,
 *                 block_sparse_moe.experts.N.{w1,w3,w2}, every layer MoE, no shared
 *                 expert; config.json: rotary_dim (o.rotary_dim, head_dim / 2),
 *                 use_qk_norm, scoring_func sigmoid, use_routing_bias, num_local_experts,
 *                 intermediate_size = moe_inter, num_mtp_modules (o.n_mtp, 1),
 *                 mtp_transformer_layers 1, rms_norm_eps 1e-6, rope_theta 5e6.
 *   Both write their multi-token-prediction layers, which inference skips, as
 *   model.layers.{n_layers + i}.* for i < o.n_mtp: a whole MoE decoder layer
 *   (quantized as the others) and eh_proj [H][2H], enorm, hnorm,
 *   shared_head.norm (GLM also embed_tokens and shared_head.head [V][H]),
 *   FLOAT. quant 1: attention and GLM's dense MLPs W8A8 static, routed and
 *   shared experts W8A8_DYNAMIC, router, norms and correction bias FLOAT.
 *   down_float (quant 1): every expert's down_proj (routed and shared) FLOAT.
 *   FX_QWEN3_NEXT (7), FX_QWEN3_5_MOE (8) the hybrid Gated DeltaNet families:
 *                 fixture_hybrid.h (names, layouts, msModelSlim's W8A8 recipe);
 *                 start from fx_hybrid_opts(arch).
 * Values are deterministic: each tensor's from (seed, its original name), so
 * a hook changing one tensor leaves the others unchanged.
 *
 * Defects: o.tensor_hook sees every tensor before it is written and may
 * rename it (edit name), omit it (omit = 1), change values (fx_set) or dtype
 * and shape (fx_retype). o.json_hook may edit each JSON file's object before
 * it is written ("config.json", "quant_model_description.json",
 * "generation_config.json", "model.safetensors.index.json"). For bad JSON
 * text or missing files, overwrite or unlink after fx_write_model.
 */
#ifndef MOE8_FIXTURE_MODEL_H
#define MOE8_FIXTURE_MODEL_H

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe8.h"

typedef struct {
    char name[160];
    char orig_name[160];      /* name before the hook (keys of the description) */
    moe8_dtype dtype;
    int n_dims;
    int64_t shape[4];
    void *data;               /* [n_bytes], owned */
    size_t n_bytes;
    int omit;                 /* set by a hook: leave the tensor out */
    const char *quant;        /* "FLOAT", "W8A8", "W8A8_DYNAMIC", "W4A8_DYNAMIC" in the description */
} fx_tensor;

typedef struct {
    int64_t hidden, n_layers, n_heads, n_kv_heads, head_dim;
    int64_t n_experts, top_k, moe_inter, inter, vocab;
    int quant;                /* 0 float; 1 W8A8 attention/dense + W8A8_DYNAMIC experts */
    moe8_dtype float_dtype;   /* BF16 or F32 (F16 works too) */
    moe8_dtype scale_dtype;   /* expert weight_scale/weight_offset: F32, BF16 or F16 */
    int scale_2d;             /* expert scales/offsets stored [N][1] instead of [N] */
    int deq_i64;              /* deq_scale I64 (fp32 bits) instead of F32 */
    int n_shards;             /* 1 or 2 */
    int dense_layer;          /* a layer listed in mlp_only_layers, -1 for none */
    int tie;                  /* tie_word_embeddings (no lm_head.weight written) */
    int lm_head_w8a8;         /* lm_head W8A8_DYNAMIC: weight I8 [V][H], weight_scale and
                               * weight_offset as the experts' (scale_dtype, scale_2d,
                               * nonzero_offsets); a description is written */
    int nonzero_offsets;      /* expert weight_offset values in [-2, 2] instead of 0 */
    unsigned w4a8_layers;     /* quant 1: bit l set: layer l's routed experts W4A8_DYNAMIC */
    unsigned float_expert_layers; /* quant 1: bit l set: layer l's routed experts FLOAT */
    int qkv_same_input;       /* q/k/v share input_scale/offset (else they differ) */
    int float_desc;           /* write an all-FLOAT description for a float model */
    int generation_config;    /* write generation_config.json (eos [2, 7]) */
    int arch;                 /* FX_QWEN3, FX_QWEN2, FX_MIXTRAL, ... FX_MINIMAX_M2 */
    int64_t shared_inter;     /* FX_QWEN2: shared expert width (default 48) */
    int no_renorm;            /* qwen families: norm_topk_prob false */
    int down_float;           /* quant 1: every expert down_proj FLOAT (routed and shared) */
    int bias_tensor;          /* quant 1, FX_QWEN2: also write the (folded) float q/k/v .bias */
    /* FX_DEEPSEEK_V2 / FX_DEEPSEEK_V3 (multi-head latent attention): */
    int64_t kv_lora;          /* kv_lora_rank L (32) */
    int64_t q_lora;           /* q_lora_rank QL; 0: null, q_proj (default 0) */
    int64_t qk_nope, qk_rope, v_head; /* dn 16, dr 8, dv 16 */
    int64_t n_shared;         /* n_shared_experts (1): shared width n_shared * moe_inter */
    int64_t first_dense;      /* first_k_dense_replace (1) */
    int64_t moe_freq;         /* moe_layer_freq (1) */
    int group_limited;        /* V2: topk_method group_limited_greedy (else greedy) */
    int64_t n_group, topk_group; /* 4, 2 (V3 and V2 group_limited_greedy) */
    double routed_scale;      /* routed_scaling_factor (1.5) */
    double ds_eps;            /* rms_norm_eps (1e-6); q_a/kv_a_layernorm stay 1e-6 */
    double ds_theta;          /* rope_theta (10000) */
    int yarn;                 /* rope_scaling {"type": "yarn", ...} with the values below */
    double yarn_factor, yarn_beta_fast, yarn_beta_slow, yarn_mscale, yarn_mscale_all_dim;
    int64_t yarn_orig_max;    /* original_max_position_embeddings */
    int rope_halves;          /* V3: "rope_interleave": false (rotate_half on halves) */
    int kvb_w8a8;             /* quant 1: kv_b_proj W8A8 static (else FLOAT) */
    int kvb_bias;             /* with kvb_w8a8: quant_bias also holds a folded bias (codes of
                               * 2000 x ((row % 5) - 2)) beyond the input offset's term */
    double e_bias_max;        /* V3: e_score_correction_bias uniform in [0, this) (0.1) */
    double latent_scale;      /* scales q_a_proj and kv_a_proj_with_mqa's latent rows (1):
                               * small, the sub-norms' eps matters */
    /* FX_GLM4_MOE / FX_MINIMAX_M2 (also n_shared, first_dense, n_group, topk_group,
     * routed_scale, no_renorm, e_bias_max, bias_tensor, down_float above): */
    double partial_rotary;    /* GLM: partial_rotary_factor (0.5); rotary dims int(D * this) */
    int64_t rotary_dim;       /* MiniMax: rotary_dim (0: head_dim / 2) */
    int no_qk_norm;           /* GLM: use_qk_norm false (default true, GLM-4.5's) */
    int no_attn_bias;         /* GLM: attention_bias false (default true) */
    int64_t n_mtp;            /* GLM num_nextn_predict_layers / MiniMax num_mtp_modules (1):
                               * the MTP layers model.layers.{n_layers + i}.* written, to skip */
    double rms_eps;           /* rms_norm_eps (0: GLM 1e-5, MiniMax 1e-6) */
    double theta;             /* rope_theta (0: GLM 1e6, MiniMax 5e6, hybrid 1e7) */
    /* FX_QWEN3_NEXT / FX_QWEN3_5_MOE (fixture_hybrid.h; fx_hybrid_opts sets their defaults;
     * also shared_inter, n_mtp, rms_eps, theta, partial_rotary (0.25 there), dense_layer
     * and no_renorm (Qwen3-Next), down_float above): */
    int64_t lin_k_heads, lin_v_heads; /* linear_num_key_heads / _value_heads (2, 4) */
    int64_t lin_k_dim, lin_v_dim;     /* linear_key_head_dim / _value_head_dim (8, 12) */
    int64_t conv_kernel;      /* linear_conv_kernel_dim (4) */
    int64_t full_interval;    /* full_attention_interval (4): layer l full iff (l + 1) % it == 0 */
    int layer_types;          /* config.json: 0 full_attention_interval, 1 the layer_types list,
                               * 2 both */
    int split_experts;        /* Qwen3.5 float: experts.N.*_proj instead of the fused 3-D
                               * experts.gate_up_proj / down_proj (same values) */
    int no_vision;            /* Qwen3.5: no vision-tower tensors */
    int a_log_float_dtype;    /* A_log in float_dtype instead of F32 */
    uint64_t seed;
    void (*tensor_hook)(void *user, fx_tensor *t);
    void (*json_hook)(void *user, const char *file, cJSON *root);
    void *user;
} fx_opts;

static inline fx_opts fx_default_opts(void) {
    fx_opts o;
    memset(&o, 0, sizeof o);
    o.hidden = 64;
    o.n_layers = 2;
    o.n_heads = 4;
    o.n_kv_heads = 2;
    o.head_dim = 16;
    o.n_experts = 4;
    o.top_k = 2;
    o.moe_inter = 32;
    o.inter = 96;
    o.vocab = 256;
    o.float_dtype = MOE8_DT_BF16;
    o.scale_dtype = MOE8_DT_F32;
    o.n_shards = 1;
    o.dense_layer = -1;
    o.qkv_same_input = 1;
    o.shared_inter = 48;
    o.seed = 1234;
    o.kv_lora = 32;
    o.qk_nope = 16;
    o.qk_rope = 8;
    o.v_head = 16;
    o.n_shared = 1;
    o.first_dense = 1;
    o.moe_freq = 1;
    o.n_group = 4;
    o.topk_group = 2;
    o.routed_scale = 1.5;
    o.ds_eps = 1e-6;
    o.ds_theta = 10000.0;
    o.yarn_factor = 4.0;
    o.yarn_beta_fast = 8.0;
    o.yarn_beta_slow = 1.0;
    o.yarn_mscale = 1.0;
    o.yarn_mscale_all_dim = 0.8;
    o.yarn_orig_max = 512;
    o.e_bias_max = 0.1;
    o.latent_scale = 1.0;
    o.partial_rotary = 0.5;
    o.n_mtp = 1;
    o.lin_k_heads = 2;
    o.lin_v_heads = 4;
    o.lin_k_dim = 8;
    o.lin_v_dim = 12;
    o.conv_kernel = 4;
    o.full_interval = 4;
    return o;
}

enum { FX_QWEN3 = 0, FX_QWEN2 = 1, FX_MIXTRAL = 2, FX_DEEPSEEK_V2 = 3, FX_DEEPSEEK_V3 = 4,
       FX_GLM4_MOE = 5, FX_MINIMAX_M2 = 6, FX_QWEN3_NEXT = 7, FX_QWEN3_5_MOE = 8 };

/* Qwen3-Next or Qwen3.5-MoE: Gated DeltaNet layers beside gated full attention. */
static inline int fx_hybrid(const fx_opts *o) {
    return o->arch == FX_QWEN3_NEXT || o->arch == FX_QWEN3_5_MOE;
}

/* GLM-4.5 (glm4_moe) or MiniMax-M2 (minimax_m2): GQA with partial rotary. */
static inline int fx_glm_mm(const fx_opts *o) {
    return o->arch == FX_GLM4_MOE || o->arch == FX_MINIMAX_M2;
}
/* Their rms_norm_eps, rope_theta and rotary dimension count. */
static inline double fx_eps(const fx_opts *o) {
    return o->rms_eps > 0 ? o->rms_eps : o->arch == FX_GLM4_MOE ? 1e-5 : 1e-6;
}
static inline double fx_theta(const fx_opts *o) {
    return o->theta > 0 ? o->theta : o->arch == FX_GLM4_MOE ? 1e6 : fx_hybrid(o) ? 1e7 : 5e6;
}
static inline int64_t fx_rot_dim(const fx_opts *o) {
    if (o->arch == FX_GLM4_MOE || fx_hybrid(o)) return (int64_t)((double)o->head_dim * o->partial_rotary);
    return o->rotary_dim > 0 ? o->rotary_dim : o->head_dim / 2;
}

static inline int fx_deepseek(const fx_opts *o) {
    return o->arch == FX_DEEPSEEK_V2 || o->arch == FX_DEEPSEEK_V3;
}

/* The family's MoE module inside a layer and its expert projections
 * (0 gate, 1 up, 2 down). */
static inline const char *fx_moe_block(const fx_opts *o) {
    return o->arch == FX_MIXTRAL || o->arch == FX_MINIMAX_M2 ? "block_sparse_moe" : "mlp";
}
static inline const char *fx_expert_proj(const fx_opts *o, int i) {
    static const char *const qwen[3] = {"gate_proj", "up_proj", "down_proj"};
    static const char *const mixtral[3] = {"w1", "w3", "w2"};
    return o->arch == FX_MIXTRAL || o->arch == FX_MINIMAX_M2 ? mixtral[i] : qwen[i];
}
/* 1 if layer l has a dense MLP. */
static inline int fx_dense(const fx_opts *o, int64_t l) {
    if (fx_deepseek(o))
        return o->n_experts == 0 || l < o->first_dense || l % (o->moe_freq > 0 ? o->moe_freq : 1) != 0;
    if (o->arch == FX_GLM4_MOE) return o->n_experts == 0 || l < o->first_dense;
    if (o->arch == FX_MINIMAX_M2) return o->n_experts == 0;
    return o->n_experts == 0 || (o->arch != FX_MIXTRAL && l == o->dense_layer);
}

/* ------------------------------------------------------------------------ */
/* Element access in any dtype                                               */
/* ------------------------------------------------------------------------ */

static inline void fx_set(fx_tensor *t, int64_t i, double v) {
    unsigned char *p = (unsigned char *)t->data + (size_t)i * moe8_dtype_size(t->dtype);
    union { float f; double d; uint16_t h; int8_t i8; int16_t i16; int32_t i32; int64_t i64; } u;
    size_t sz = moe8_dtype_size(t->dtype);
    switch (t->dtype) {
    case MOE8_DT_F32: u.f = (float)v; break;
    case MOE8_DT_F64: u.d = v; break;
    case MOE8_DT_BF16: u.h = moe8_f32_to_bf16((float)v); break;
    case MOE8_DT_F16: u.h = moe8_f32_to_f16((float)v); break;
    case MOE8_DT_I8: u.i8 = (int8_t)v; break;
    case MOE8_DT_I16: u.i16 = (int16_t)v; break;
    case MOE8_DT_I32: u.i32 = (int32_t)v; break;
    case MOE8_DT_I64: u.i64 = (int64_t)v; break;
    default: memset(&u, 0, sizeof u); break;
    }
    memcpy(p, &u, sz);
}

static inline double fx_get(const fx_tensor *t, int64_t i) {
    const unsigned char *p = (const unsigned char *)t->data + (size_t)i * moe8_dtype_size(t->dtype);
    union { float f; double d; uint16_t h; int8_t i8; int16_t i16; int32_t i32; int64_t i64; } u;
    memcpy(&u, p, moe8_dtype_size(t->dtype));
    switch (t->dtype) {
    case MOE8_DT_F32: return u.f;
    case MOE8_DT_F64: return u.d;
    case MOE8_DT_BF16: return moe8_bf16_to_f32(u.h);
    case MOE8_DT_F16: return moe8_f16_to_f32(u.h);
    case MOE8_DT_I8: return u.i8;
    case MOE8_DT_I16: return u.i16;
    case MOE8_DT_I32: return u.i32;
    case MOE8_DT_I64: return (double)u.i64;
    default: return 0;
    }
}

static inline int64_t fx_numel(const fx_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->n_dims; i++) n *= t->shape[i];
    return n;
}

/* Change dtype and shape, keeping the values (as doubles) of the elements
 * that still fit; new elements are 0. */
static inline void fx_retype(fx_tensor *t, moe8_dtype dt, int n_dims, const int64_t *shape) {
    fx_tensor old = *t;
    int64_t n_old = fx_numel(&old), n;
    t->dtype = dt;
    t->n_dims = n_dims;
    for (int i = 0; i < n_dims; i++) t->shape[i] = shape[i];
    n = fx_numel(t);
    t->n_bytes = (size_t)n * moe8_dtype_size(dt);
    t->data = calloc(t->n_bytes ? t->n_bytes : 1, 1);
    for (int64_t i = 0; i < n && i < n_old; i++) fx_set(t, i, fx_get(&old, i));
    free(old.data);
}

/* ------------------------------------------------------------------------ */
/* Tensor list                                                               */
/* ------------------------------------------------------------------------ */

typedef struct {
    fx_tensor *t;
    int n, cap;
    const fx_opts *o;
    test_rng rng;             /* reseeded per tensor */
} fx_list;

static inline uint64_t fx_hash(const char *s, uint64_t seed) {
    uint64_t h = 1469598103934665603ULL ^ seed;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h | 1;
}

/* Append a tensor of zeros; the caller fills it. */
static inline fx_tensor *fx_add(fx_list *L, const char *name, moe8_dtype dt, int n_dims, int64_t d0,
                                int64_t d1, const char *quant) {
    fx_tensor *t;
    if (L->n == L->cap) {
        L->cap = L->cap ? 2 * L->cap : 64;
        L->t = (fx_tensor *)realloc(L->t, (size_t)L->cap * sizeof *L->t);
    }
    t = &L->t[L->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    snprintf(t->orig_name, sizeof t->orig_name, "%s", name);
    t->dtype = dt;
    t->n_dims = n_dims;
    t->shape[0] = d0;
    t->shape[1] = d1;
    t->n_bytes = (size_t)fx_numel(t) * moe8_dtype_size(dt);
    t->data = calloc(t->n_bytes ? t->n_bytes : 1, 1);
    t->quant = quant;
    L->rng.s = fx_hash(name, L->o->seed);
    return t;
}

/* Float tensor: normal(0, 1) * scale + shift. */
static inline void fx_add_float(fx_list *L, const char *name, int n_dims, int64_t d0, int64_t d1,
                                double scale, double shift) {
    fx_tensor *t = fx_add(L, name, L->o->float_dtype, n_dims, d0, d1, "FLOAT");
    for (int64_t i = 0; i < fx_numel(t); i++) fx_set(t, i, test_rng_normal(&L->rng) * scale + shift);
}

static inline void fx_add_i8(fx_list *L, const char *name, int64_t d0, int64_t d1, const char *quant) {
    fx_tensor *t = fx_add(L, name, MOE8_DT_I8, 2, d0, d1, quant);
    for (int64_t i = 0; i < fx_numel(t); i++)
        fx_set(t, i, (double)(int)(test_rng_u64(&L->rng) % 255) - 127);
}

/* Code W[i][j] of a W4A8_DYNAMIC weight t ([n/2][k], two's complement
 * nibbles: row i / 2, low nibble for even i). */
static inline int fx_w4_code(const fx_tensor *t, int64_t i, int64_t j) {
    const uint8_t b = ((const uint8_t *)t->data)[(i / 2) * t->shape[1] + j];
    const int v = i % 2 ? b >> 4 : b & 15;
    return v >= 8 ? v - 16 : v;
}

/* msModelSlim's W4A8_DYNAMIC linear (see the header): down_proj (w2) gets
 * the [N][16] scale_bias, the others [N][1]. */
static inline void fx_add_w4a8(fx_list *L, const char *prefix, int64_t n_out, int64_t n_in) {
    const char *q = "W4A8_DYNAMIC";
    const int down = strstr(prefix, "down_proj") || strstr(prefix, ".w2");
    const int64_t nc = down ? 16 : 1;
    char n[160];
    fx_tensor *w, *s, *b;
    snprintf(n, sizeof n, "%s.weight", prefix);
    w = fx_add(L, n, MOE8_DT_I8, 2, n_out / 2, n_in, q);
    for (int64_t j = 0; j < n_out / 2; j++)
        for (int64_t k = 0; k < n_in; k++) {
            const int lo = (int)(test_rng_u64(&L->rng) % 16) - 8, hi = (int)(test_rng_u64(&L->rng) % 16) - 8;
            ((uint8_t *)w->data)[j * n_in + k] = (uint8_t)((lo & 15) | (hi & 15) << 4);
        }
    snprintf(n, sizeof n, "%s.weight_scale", prefix);
    s = fx_add(L, n, MOE8_DT_F32, 2, n_out, 1, q);
    for (int64_t i = 0; i < n_out; i++)
        fx_set(s, i, (0.5 + test_rng_uniform(&L->rng)) / (7.0 * sqrt((double)n_in)));
    snprintf(n, sizeof n, "%s.weight_offset", prefix);
    fx_add(L, n, MOE8_DT_F32, 2, n_out, 1, q);
    snprintf(n, sizeof n, "%s.scale_bias", prefix);
    b = fx_add(L, n, MOE8_DT_F32, 2, n_out, nc, q);
    w = &L->t[L->n - 4]; /* realloc may have moved them */
    s = &L->t[L->n - 3];
    for (int64_t i = 0; i < n_out; i++)
        for (int64_t c = 0; c < nc; c++) {
            double sum = 0;
            for (int64_t k = c * n_in / nc; k < (c + 1) * n_in / nc; k++) sum += fx_w4_code(w, i, k);
            fx_set(b, i * nc + c, 8.0 * sum * fx_get(s, i));
        }
}

/* A linear "<prefix>.*" of quant type q ("FLOAT", "W8A8", "W8A8_DYNAMIC",
 * "W4A8_DYNAMIC"). */
static inline void fx_add_linear(fx_list *L, const char *prefix, const char *q, int64_t n_out,
                                 int64_t n_in, double in_scale, double in_offset) {
    const fx_opts *o = L->o;
    char n[160];
    fx_tensor *t;
    snprintf(n, sizeof n, "%s.weight", prefix);
    if (!strcmp(q, "FLOAT")) {
        fx_add_float(L, n, 2, n_out, n_in, 1.0 / sqrt((double)n_in), 0.0);
        return;
    }
    if (!strcmp(q, "W4A8_DYNAMIC")) {
        fx_add_w4a8(L, prefix, n_out, n_in);
        return;
    }
    fx_add_i8(L, n, n_out, n_in, q);
    if (!strcmp(q, "W8A8_DYNAMIC")) {
        int nd = o->scale_2d ? 2 : 1;
        snprintf(n, sizeof n, "%s.weight_scale", prefix);
        t = fx_add(L, n, o->scale_dtype, nd, n_out, 1, q);
        for (int64_t i = 0; i < n_out; i++)
            fx_set(t, i, (0.5 + test_rng_uniform(&L->rng)) / (127.0 * sqrt((double)n_in)));
        snprintf(n, sizeof n, "%s.weight_offset", prefix);
        t = fx_add(L, n, o->scale_dtype, nd, n_out, 1, q);
        for (int64_t i = 0; o->nonzero_offsets && i < n_out; i++)
            fx_set(t, i, (double)(int)(test_rng_u64(&L->rng) % 5) - 2);
        return;
    }
    /* W8A8 static */
    snprintf(n, sizeof n, "%s.input_scale", prefix);
    fx_set(fx_add(L, n, MOE8_DT_F32, 1, 1, 0, q), 0, in_scale);
    snprintf(n, sizeof n, "%s.input_offset", prefix);
    fx_set(fx_add(L, n, o->deq_i64 ? MOE8_DT_I8 : o->float_dtype, 1, 1, 0, q), 0, in_offset);
    snprintf(n, sizeof n, "%s.weight_scale", prefix);
    t = fx_add(L, n, MOE8_DT_F32, 1, n_out, 0, q);
    for (int64_t i = 0; i < n_out; i++)
        fx_set(t, i, (0.5 + test_rng_uniform(&L->rng)) / (127.0 * sqrt((double)n_in)));
    {
        fx_tensor *ws;
        snprintf(n, sizeof n, "%s.weight_offset", prefix);
        fx_add(L, n, MOE8_DT_F32, 1, n_out, 0, q);
        snprintf(n, sizeof n, "%s.deq_scale", prefix);
        t = fx_add(L, n, o->deq_i64 ? MOE8_DT_I64 : MOE8_DT_F32, 1, n_out, 0, q);
        ws = &L->t[L->n - 3]; /* realloc may have moved it */
        for (int64_t i = 0; i < n_out; i++) {
            float d = (float)fx_get(ws, i) * (float)in_scale; /* fp32, as ModelSlim */
            if (o->deq_i64) {
                uint32_t bits;
                int64_t v;
                memcpy(&bits, &d, 4);
                v = (int64_t)(int32_t)bits; /* ModelSlim: int32 bits sign-extended */
                memcpy((char *)t->data + 8 * i, &v, 8);
            } else {
                fx_set(t, i, d);
            }
        }
    }
    snprintf(n, sizeof n, "%s.quant_bias", prefix);
    t = fx_add(L, n, MOE8_DT_I32, 1, n_out, 0, q);
    for (int64_t i = 0; i < n_out; i++) fx_set(t, i, (double)(int)(test_rng_u64(&L->rng) % 2001) - 1000);
}

/* q/k/v bias "<prefix>.bias" [n_out] of FX_QWEN2, N(0, 0.1²). */
static inline void fx_add_bias(fx_list *L, const char *prefix, int64_t n_out) {
    char n[160];
    snprintf(n, sizeof n, "%.150s.bias", prefix);
    fx_add_float(L, n, 1, n_out, 0, 0.1, 0.0);
}

/* Multiply a float tensor's elements [from, to) by f. */
static inline void fx_scale(fx_tensor *t, int64_t from, int64_t to, double f) {
    for (int64_t i = from; i < to; i++) fx_set(t, i, fx_get(t, i) * f);
}

/* DeepSeek's multi-head latent attention of layer l. */
static inline void fx_add_mla(fx_list *L, int64_t l) {
    const fx_opts *o = L->o;
    const char *lin = o->quant ? "W8A8" : "FLOAT";
    const int64_t H = o->hidden, NH = o->n_heads, qd = o->qk_nope + o->qk_rope;
    const int64_t KL = o->kv_lora, QL = o->q_lora;
    /* q (or q_a) and kv_a read the same input: one scale/offset unless told otherwise */
    const double qs = o->qkv_same_input ? 0.03 : 0.025, qo = o->qkv_same_input ? 3.0 : 1.0;
    const double ks = 0.03, ko = o->qkv_same_input ? 3.0 : -1.0;
    char n[160];
    if (QL > 0) {
        snprintf(n, sizeof n, "model.layers.%lld.self_attn.q_a_proj", (long long)l);
        fx_add_linear(L, n, lin, QL, H, qs, qo);
        if (!o->quant && o->latent_scale != 1.0)
            fx_scale(&L->t[L->n - 1], 0, QL * H, o->latent_scale);
        snprintf(n, sizeof n, "model.layers.%lld.self_attn.q_a_layernorm.weight", (long long)l);
        fx_add_float(L, n, 1, QL, 0, 0.1, 1.0);
        snprintf(n, sizeof n, "model.layers.%lld.self_attn.q_b_proj", (long long)l);
        fx_add_linear(L, n, lin, NH * qd, QL, 0.03, 2.0);
    } else {
        snprintf(n, sizeof n, "model.layers.%lld.self_attn.q_proj", (long long)l);
        fx_add_linear(L, n, lin, NH * qd, H, qs, qo);
    }
    snprintf(n, sizeof n, "model.layers.%lld.self_attn.kv_a_proj_with_mqa", (long long)l);
    fx_add_linear(L, n, lin, KL + o->qk_rope, H, ks, ko);
    if (!o->quant && o->latent_scale != 1.0) fx_scale(&L->t[L->n - 1], 0, KL * H, o->latent_scale);
    snprintf(n, sizeof n, "model.layers.%lld.self_attn.kv_a_layernorm.weight", (long long)l);
    fx_add_float(L, n, 1, KL, 0, 0.1, 1.0);
    snprintf(n, sizeof n, "model.layers.%lld.self_attn.kv_b_proj", (long long)l);
    if (o->quant && o->kvb_w8a8) {
        const int64_t rows = NH * (o->qk_nope + o->v_head);
        const double off = 1.0;
        fx_tensor *w, *qb;
        fx_add_linear(L, n, "W8A8", rows, KL, 0.03, off);
        w = &L->t[L->n - 7];   /* weight, input_scale, input_offset, weight_scale,
                                * weight_offset, deq_scale, quant_bias */
        qb = &L->t[L->n - 1];
        for (int64_t j = 0; j < rows; j++) {
            int64_t sum = 0;
            for (int64_t i = 0; i < KL; i++) sum += (int64_t)fx_get(w, j * KL + i);
            fx_set(qb, j, -off * (double)sum + (o->kvb_bias ? 2000.0 * (double)(j % 5 - 2) : 0.0));
        }
    } else {
        fx_add_linear(L, n, "FLOAT", NH * (o->qk_nope + o->v_head), KL, 0, 0);
    }
    snprintf(n, sizeof n, "model.layers.%lld.self_attn.o_proj", (long long)l);
    fx_add_linear(L, n, lin, H, NH * o->v_head, 0.035, 2.0);
}

/* DeepSeek's dense MLP or MoE block (router, experts, shared experts,
 * V3's e_score_correction_bias) of layer l. */
static inline void fx_add_mlp_deepseek(fx_list *L, int64_t l) {
    const fx_opts *o = L->o;
    const char *lin = o->quant ? "W8A8" : "FLOAT", *ex = o->quant ? "W8A8_DYNAMIC" : "FLOAT";
    const char *exd = o->quant && !o->down_float ? "W8A8_DYNAMIC" : "FLOAT";
    const int64_t H = o->hidden, S = o->n_shared * o->moe_inter;
    static const char *const proj[3] = {"gate_proj", "up_proj", "down_proj"};
    char n[160];
    if (fx_dense(o, l)) {
        snprintf(n, sizeof n, "model.layers.%lld.mlp.gate_proj", (long long)l);
        fx_add_linear(L, n, lin, o->inter, H, 0.04, 0.0);
        snprintf(n, sizeof n, "model.layers.%lld.mlp.up_proj", (long long)l);
        fx_add_linear(L, n, lin, o->inter, H, 0.04, 0.0);
        snprintf(n, sizeof n, "model.layers.%lld.mlp.down_proj", (long long)l);
        fx_add_linear(L, n, lin, H, o->inter, 0.05, -1.0);
        return;
    }
    snprintf(n, sizeof n, "model.layers.%lld.mlp.gate.weight", (long long)l);
    fx_add_float(L, n, 2, o->n_experts, H, 1.0 / sqrt((double)H), 0.0);
    if (o->arch == FX_DEEPSEEK_V3 || o->arch == FX_GLM4_MOE) {
        fx_tensor *t;
        snprintf(n, sizeof n, "model.layers.%lld.mlp.gate.e_score_correction_bias", (long long)l);
        t = fx_add(L, n, MOE8_DT_F32, 1, o->n_experts, 0, "FLOAT");
        for (int64_t e = 0; e < o->n_experts; e++) fx_set(t, e, o->e_bias_max * test_rng_uniform(&L->rng));
    }
    for (int64_t e = 0; e < o->n_experts; e++)
        for (int i = 0; i < 3; i++) {
            snprintf(n, sizeof n, "model.layers.%lld.mlp.experts.%lld.%s", (long long)l, (long long)e, proj[i]);
            if (i < 2) fx_add_linear(L, n, ex, o->moe_inter, H, 0, 0);
            else fx_add_linear(L, n, exd, H, o->moe_inter, 0, 0);
        }
    if (o->n_shared <= 0) return;
    for (int i = 0; i < 3; i++) {
        snprintf(n, sizeof n, "model.layers.%lld.mlp.shared_experts.%s", (long long)l, proj[i]);
        if (i < 2) fx_add_linear(L, n, ex, S, H, 0, 0);
        else fx_add_linear(L, n, exd, H, S, 0, 0);
    }
}

static inline void fx_add_layer(fx_list *L, int64_t l) {
    const fx_opts *o = L->o;
    const char *lin = o->quant ? "W8A8" : "FLOAT", *ex = o->quant ? "W8A8_DYNAMIC" : "FLOAT";
    const char *exd = o->quant && !o->down_float ? "W8A8_DYNAMIC" : "FLOAT";
    const char *rex = ex, *rexd = exd; /* the routed experts' */
    if (o->quant && l < 32 && (o->w4a8_layers >> l & 1)) rex = rexd = "W4A8_DYNAMIC";
    if (o->quant && l < 32 && (o->float_expert_layers >> l & 1)) rex = rexd = "FLOAT";
    const char *moe = fx_moe_block(o);
    static const char *qkvo[] = {"q_proj", "k_proj", "v_proj", "o_proj"};
    int64_t H = o->hidden, qd = o->n_heads * o->head_dim, kvd = o->n_kv_heads * o->head_dim;
    int64_t outs[4] = {qd, kvd, kvd, H}, ins[4] = {H, H, H, qd};
    char n[160];
    snprintf(n, sizeof n, "model.layers.%lld.input_layernorm.weight", (long long)l);
    fx_add_float(L, n, 1, H, 0, 0.1, 1.0);
    snprintf(n, sizeof n, "model.layers.%lld.post_attention_layernorm.weight", (long long)l);
    fx_add_float(L, n, 1, H, 0, 0.1, 1.0);
    if (fx_deepseek(o)) {
        fx_add_mla(L, l);
        fx_add_mlp_deepseek(L, l);
        return;
    }
    if (o->arch == FX_QWEN3 || (o->arch == FX_GLM4_MOE && !o->no_qk_norm) || o->arch == FX_MINIMAX_M2) {
        const int whole = o->arch == FX_MINIMAX_M2; /* over the whole projection */
        snprintf(n, sizeof n, "model.layers.%lld.self_attn.q_norm.weight", (long long)l);
        fx_add_float(L, n, 1, whole ? qd : o->head_dim, 0, 0.1, 1.0);
        snprintf(n, sizeof n, "model.layers.%lld.self_attn.k_norm.weight", (long long)l);
        fx_add_float(L, n, 1, whole ? kvd : o->head_dim, 0, 0.1, 1.0);
    }
    for (int i = 0; i < 4; i++) {
        double s = o->qkv_same_input && i < 3 ? 0.03 : 0.02 + 0.005 * i;
        double off = o->qkv_same_input && i < 3 ? 3.0 : (double)(i - 1);
        snprintf(n, sizeof n, "model.layers.%lld.self_attn.%s", (long long)l, qkvo[i]);
        fx_add_linear(L, n, lin, outs[i], ins[i], s, off);
        if ((o->arch == FX_QWEN2 || (o->arch == FX_GLM4_MOE && !o->no_attn_bias)) && i < 3 &&
            (!o->quant || o->bias_tensor))
            fx_add_bias(L, n, outs[i]);
    }
    if (o->arch == FX_GLM4_MOE) { /* DeepSeek-V3's MLP / MoE block, names and all */
        fx_add_mlp_deepseek(L, l);
        return;
    }
    if (fx_dense(o, l)) {
        snprintf(n, sizeof n, "model.layers.%lld.mlp.gate_proj", (long long)l);
        fx_add_linear(L, n, lin, o->inter, H, 0.04, 0.0);
        snprintf(n, sizeof n, "model.layers.%lld.mlp.up_proj", (long long)l);
        fx_add_linear(L, n, lin, o->inter, H, 0.04, 0.0);
        snprintf(n, sizeof n, "model.layers.%lld.mlp.down_proj", (long long)l);
        fx_add_linear(L, n, lin, H, o->inter, 0.05, -1.0);
        return;
    }
    snprintf(n, sizeof n, "model.layers.%lld.%s.gate.weight", (long long)l, moe);
    fx_add_float(L, n, 2, o->n_experts, H, 1.0 / sqrt((double)H), 0.0);
    if (o->arch == FX_MINIMAX_M2) { /* a buffer of the MoE block, not of its gate */
        fx_tensor *t;
        snprintf(n, sizeof n, "model.layers.%lld.block_sparse_moe.e_score_correction_bias", (long long)l);
        t = fx_add(L, n, MOE8_DT_F32, 1, o->n_experts, 0, "FLOAT");
        for (int64_t e = 0; e < o->n_experts; e++) fx_set(t, e, o->e_bias_max * test_rng_uniform(&L->rng));
    }
    for (int64_t e = 0; e < o->n_experts; e++) {
        snprintf(n, sizeof n, "model.layers.%lld.%s.experts.%lld.%s", (long long)l, moe, (long long)e,
                 fx_expert_proj(o, 0));
        fx_add_linear(L, n, rex, o->moe_inter, H, 0, 0);
        snprintf(n, sizeof n, "model.layers.%lld.%s.experts.%lld.%s", (long long)l, moe, (long long)e,
                 fx_expert_proj(o, 1));
        fx_add_linear(L, n, rex, o->moe_inter, H, 0, 0);
        snprintf(n, sizeof n, "model.layers.%lld.%s.experts.%lld.%s", (long long)l, moe, (long long)e,
                 fx_expert_proj(o, 2));
        fx_add_linear(L, n, rexd, H, o->moe_inter, 0, 0);
    }
    if (o->arch != FX_QWEN2) return;
    snprintf(n, sizeof n, "model.layers.%lld.mlp.shared_expert.gate_proj", (long long)l);
    fx_add_linear(L, n, ex, o->shared_inter, H, 0, 0);
    snprintf(n, sizeof n, "model.layers.%lld.mlp.shared_expert.up_proj", (long long)l);
    fx_add_linear(L, n, ex, o->shared_inter, H, 0, 0);
    snprintf(n, sizeof n, "model.layers.%lld.mlp.shared_expert.down_proj", (long long)l);
    fx_add_linear(L, n, exd, H, o->shared_inter, 0, 0);
    snprintf(n, sizeof n, "model.layers.%lld.mlp.shared_expert_gate.weight", (long long)l);
    fx_add_float(L, n, 2, 1, H, 1.0 / sqrt((double)H), 0.0);
}

/* The multi-token-prediction layers inference skips: GLM's
 * num_nextn_predict_layers and MiniMax-M2's num_mtp_modules, each
 * model.layers.{n_layers + i}.* holding a whole decoder layer (MoE) and
 * DeepSeek-V3's MTP module tensors: eh_proj [H][2H], enorm, hnorm,
 * shared_head.norm; GLM also embed_tokens and shared_head.head [V][H].
 * Float, or the decoder layer quantized as the others (the description
 * lists them all). */
static inline void fx_add_mtp(fx_list *L) {
    const fx_opts *o = L->o;
    const int64_t H = o->hidden;
    char n[160];
    for (int64_t i = 0; fx_glm_mm(o) && i < o->n_mtp; i++) {
        const long long m = (long long)(o->n_layers + i);
        fx_add_layer(L, m);
        snprintf(n, sizeof n, "model.layers.%lld.eh_proj.weight", m);
        fx_add_float(L, n, 2, H, 2 * H, 1.0 / sqrt(2.0 * (double)H), 0.0);
        snprintf(n, sizeof n, "model.layers.%lld.enorm.weight", m);
        fx_add_float(L, n, 1, H, 0, 0.1, 1.0);
        snprintf(n, sizeof n, "model.layers.%lld.hnorm.weight", m);
        fx_add_float(L, n, 1, H, 0, 0.1, 1.0);
        snprintf(n, sizeof n, "model.layers.%lld.shared_head.norm.weight", m);
        fx_add_float(L, n, 1, H, 0, 0.1, 1.0);
        if (o->arch != FX_GLM4_MOE) continue;
        snprintf(n, sizeof n, "model.layers.%lld.embed_tokens.weight", m);
        fx_add_float(L, n, 2, o->vocab, H, 1.0, 0.0);
        snprintf(n, sizeof n, "model.layers.%lld.shared_head.head.weight", m);
        fx_add_float(L, n, 2, o->vocab, H, 1.0 / sqrt((double)H), 0.0);
    }
}

#include "fixture_hybrid.h"

static inline void fx_build(fx_list *L) {
    const fx_opts *o = L->o;
    if (fx_hybrid(o)) {
        fx_build_hybrid(L);
        return;
    }
    fx_add_float(L, "model.embed_tokens.weight", 2, o->vocab, o->hidden, 1.0, 0.0);
    for (int64_t l = 0; l < o->n_layers; l++) fx_add_layer(L, l);
    fx_add_mtp(L);
    fx_add_float(L, "model.norm.weight", 1, o->hidden, 0, 0.1, 1.0);
    if (!o->tie && o->lm_head_w8a8) fx_add_linear(L, "lm_head", "W8A8_DYNAMIC", o->vocab, o->hidden, 0, 0);
    else if (!o->tie) fx_add_float(L, "lm_head.weight", 2, o->vocab, o->hidden, 1.0 / sqrt((double)o->hidden), 0);
}

static inline void fx_list_free(fx_list *L) {
    for (int i = 0; i < L->n; i++) free(L->t[i].data);
    free(L->t);
}

/* ------------------------------------------------------------------------ */
/* Writing                                                                   */
/* ------------------------------------------------------------------------ */

static inline int fx_write_json(const char *dir, const char *file, cJSON *root, const fx_opts *o) {
    char path[4096 + 128], *text;
    int rc = 0;
    if (o->json_hook) o->json_hook(o->user, file, root);
    text = cJSON_Print(root);
    snprintf(path, sizeof path, "%s/%s", dir, file);
    test_write_file(path, text, strlen(text));
    free(text);
    cJSON_Delete(root);
    return rc;
}

/* Write tensors [from, to) of the list (non-omitted) into one file. */
static inline int fx_write_st(const char *path, fx_list *L, int from, int to) {
    moe8_st_writer *w = NULL;
    moe8_error e;
    int rc = -1;
    if (moe8_st_writer_open(path, &w, &e) != MOE8_OK) goto done;
    for (int i = from; i < to; i++)
        if (!L->t[i].omit &&
            moe8_st_writer_declare(w, L->t[i].name, L->t[i].dtype, L->t[i].n_dims, L->t[i].shape, &e) != MOE8_OK)
            goto done;
    for (int i = from; i < to; i++)
        if (!L->t[i].omit &&
            moe8_st_writer_write(w, L->t[i].name, L->t[i].data, L->t[i].n_bytes, &e) != MOE8_OK)
            goto done;
    if (moe8_st_writer_finish(w, &e) != MOE8_OK) goto done;
    rc = 0;
done:
    if (rc) fprintf(stderr, "fixture: writing %s: %s\n", path, e.message);
    moe8_st_writer_free(w);
    return rc;
}

/* The keys every family's fixture config.json ends with. */
static inline cJSON *fx_config_tail(cJSON *c, const fx_opts *o) {
    cJSON_AddNumberToObject(c, "rope_theta", 1000000.0);
    cJSON_AddNullToObject(c, "rope_scaling");
    cJSON_AddBoolToObject(c, "tie_word_embeddings", o->tie);
    cJSON_AddNumberToObject(c, "bos_token_id", 1);
    cJSON_AddNumberToObject(c, "eos_token_id", 2);
    cJSON_AddStringToObject(c, "hidden_act", "silu");
    cJSON_AddStringToObject(c, "torch_dtype", o->float_dtype == MOE8_DT_F32 ? "float32" : "bfloat16");
    return c;
}

/* config.json of FX_QWEN2 and FX_MIXTRAL with their families' keys. */
static inline cJSON *fx_config_json_family(const fx_opts *o) {
    static const char *const type[3] = {"qwen3_moe", "qwen2_moe", "mixtral"};
    static const char *const cls[3] = {"Qwen3MoeForCausalLM", "Qwen2MoeForCausalLM",
                                       "MixtralForCausalLM"};
    cJSON *c = cJSON_CreateObject();
    cJSON_AddItemToObject(c, "architectures", cJSON_CreateString(cls[o->arch]));
    cJSON_AddStringToObject(c, "model_type", type[o->arch]);
    cJSON_AddNumberToObject(c, "vocab_size", (double)o->vocab);
    cJSON_AddNumberToObject(c, "hidden_size", (double)o->hidden);
    cJSON_AddNumberToObject(c, "num_hidden_layers", (double)o->n_layers);
    cJSON_AddNumberToObject(c, "num_attention_heads", (double)o->n_heads);
    cJSON_AddNumberToObject(c, "num_key_value_heads", (double)o->n_kv_heads);
    if (o->arch == FX_QWEN3 || o->head_dim != o->hidden / o->n_heads)
        cJSON_AddNumberToObject(c, "head_dim", (double)o->head_dim);
    cJSON_AddNumberToObject(c, "num_experts_per_tok", (double)o->top_k);
    if (o->arch == FX_MIXTRAL) {
        cJSON_AddNumberToObject(c, "intermediate_size", (double)o->moe_inter);
        cJSON_AddNumberToObject(c, "num_local_experts", (double)o->n_experts);
        cJSON_AddNullToObject(c, "sliding_window");
        cJSON_AddNumberToObject(c, "rms_norm_eps", 1e-5);
    } else {
        cJSON_AddNumberToObject(c, "intermediate_size", (double)o->inter);
        cJSON_AddNumberToObject(c, "moe_intermediate_size", (double)o->moe_inter);
        cJSON_AddNumberToObject(c, "num_experts", (double)o->n_experts);
        cJSON_AddBoolToObject(c, "norm_topk_prob", !o->no_renorm);
        cJSON_AddNumberToObject(c, "decoder_sparse_step", 1);
        cJSON *mlp_only = cJSON_AddArrayToObject(c, "mlp_only_layers");
        if (o->dense_layer >= 0)
            cJSON_AddItemToArray(mlp_only, cJSON_CreateNumber((double)o->dense_layer));
        cJSON_AddNumberToObject(c, "rms_norm_eps", 1e-6);
    }
    if (o->arch == FX_QWEN2) {
        cJSON_AddNumberToObject(c, "shared_expert_intermediate_size", (double)o->shared_inter);
        cJSON_AddBoolToObject(c, "use_sliding_window", 0);
        cJSON_AddNumberToObject(c, "sliding_window", 4096);
    }
    cJSON_AddNumberToObject(c, "max_position_embeddings", 4096);
    return fx_config_tail(c, o);
}

/* config.json of FX_DEEPSEEK_V2 / FX_DEEPSEEK_V3 with the keys of
 * DeepSeek's configuration_deepseek.py. */
static inline cJSON *fx_config_json_deepseek(const fx_opts *o) {
    const int v3 = o->arch == FX_DEEPSEEK_V3;
    cJSON *c = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(c, "architectures");
    cJSON_AddItemToArray(a, cJSON_CreateString(v3 ? "DeepseekV3ForCausalLM" : "DeepseekV2ForCausalLM"));
    cJSON_AddStringToObject(c, "model_type", v3 ? "deepseek_v3" : "deepseek_v2");
    cJSON_AddNumberToObject(c, "vocab_size", (double)o->vocab);
    cJSON_AddNumberToObject(c, "hidden_size", (double)o->hidden);
    cJSON_AddNumberToObject(c, "intermediate_size", (double)o->inter);
    cJSON_AddNumberToObject(c, "moe_intermediate_size", (double)o->moe_inter);
    cJSON_AddNumberToObject(c, "num_hidden_layers", (double)o->n_layers);
    cJSON_AddNumberToObject(c, "num_attention_heads", (double)o->n_heads);
    cJSON_AddNumberToObject(c, "num_key_value_heads", (double)o->n_heads);
    cJSON_AddNumberToObject(c, "n_shared_experts", (double)o->n_shared);
    cJSON_AddNumberToObject(c, "n_routed_experts", (double)o->n_experts);
    cJSON_AddNumberToObject(c, "num_experts_per_tok", (double)o->top_k);
    cJSON_AddNumberToObject(c, "routed_scaling_factor", o->routed_scale);
    cJSON_AddStringToObject(c, "topk_method", v3 ? "noaux_tc"
                                                  : o->group_limited ? "group_limited_greedy" : "greedy");
    cJSON_AddNumberToObject(c, "n_group", v3 || o->group_limited ? (double)o->n_group : 1);
    cJSON_AddNumberToObject(c, "topk_group", v3 || o->group_limited ? (double)o->topk_group : 1);
    cJSON_AddStringToObject(c, "scoring_func", v3 ? "sigmoid" : "softmax");
    cJSON_AddBoolToObject(c, "norm_topk_prob", !o->no_renorm);
    cJSON_AddNumberToObject(c, "first_k_dense_replace", (double)o->first_dense);
    cJSON_AddNumberToObject(c, "moe_layer_freq", (double)o->moe_freq);
    cJSON_AddNumberToObject(c, "kv_lora_rank", (double)o->kv_lora);
    if (o->q_lora > 0) cJSON_AddNumberToObject(c, "q_lora_rank", (double)o->q_lora);
    else cJSON_AddNullToObject(c, "q_lora_rank");
    cJSON_AddNumberToObject(c, "qk_nope_head_dim", (double)o->qk_nope);
    cJSON_AddNumberToObject(c, "qk_rope_head_dim", (double)o->qk_rope);
    cJSON_AddNumberToObject(c, "v_head_dim", (double)o->v_head);
    cJSON_AddNumberToObject(c, "rms_norm_eps", o->ds_eps);
    cJSON_AddBoolToObject(c, "attention_bias", 0);
    cJSON_AddNumberToObject(c, "max_position_embeddings",
                            o->yarn ? (double)o->yarn_orig_max * o->yarn_factor : 4096);
    fx_config_tail(c, o);
    cJSON_ReplaceItemInObject(c, "rope_theta", cJSON_CreateNumber(o->ds_theta));
    if (v3) cJSON_AddBoolToObject(c, "rope_interleave", !o->rope_halves);
    if (o->yarn) {
        cJSON *r = cJSON_CreateObject();
        cJSON_AddStringToObject(r, "type", "yarn");
        cJSON_AddNumberToObject(r, "factor", o->yarn_factor);
        cJSON_AddNumberToObject(r, "original_max_position_embeddings", (double)o->yarn_orig_max);
        cJSON_AddNumberToObject(r, "beta_fast", o->yarn_beta_fast);
        cJSON_AddNumberToObject(r, "beta_slow", o->yarn_beta_slow);
        cJSON_AddNumberToObject(r, "mscale", o->yarn_mscale);
        cJSON_AddNumberToObject(r, "mscale_all_dim", o->yarn_mscale_all_dim);
        cJSON_ReplaceItemInObject(c, "rope_scaling", r);
    }
    return c;
}

/* config.json of FX_GLM4_MOE with the keys of GLM-4.5's released
 * config.json (transformers' Glm4MoeConfig). */
static inline cJSON *fx_config_json_glm(const fx_opts *o) {
    cJSON *c = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(c, "architectures");
    cJSON_AddItemToArray(a, cJSON_CreateString("Glm4MoeForCausalLM"));
    cJSON_AddStringToObject(c, "model_type", "glm4_moe");
    cJSON_AddBoolToObject(c, "attention_bias", !o->no_attn_bias);
    cJSON_AddNumberToObject(c, "attention_dropout", 0.0);
    cJSON_AddNumberToObject(c, "head_dim", (double)o->head_dim);
    cJSON_AddNumberToObject(c, "hidden_size", (double)o->hidden);
    cJSON_AddNumberToObject(c, "partial_rotary_factor", o->partial_rotary);
    cJSON_AddNumberToObject(c, "intermediate_size", (double)o->inter);
    cJSON_AddNumberToObject(c, "max_position_embeddings", 131072);
    cJSON_AddNumberToObject(c, "moe_intermediate_size", (double)o->moe_inter);
    cJSON_AddBoolToObject(c, "norm_topk_prob", !o->no_renorm);
    cJSON_AddNumberToObject(c, "num_attention_heads", (double)o->n_heads);
    cJSON_AddNumberToObject(c, "n_group", (double)o->n_group);
    cJSON_AddNumberToObject(c, "topk_group", (double)o->topk_group);
    cJSON_AddNumberToObject(c, "n_routed_experts", (double)o->n_experts);
    cJSON_AddNumberToObject(c, "n_shared_experts", (double)o->n_shared);
    cJSON_AddNumberToObject(c, "routed_scaling_factor", o->routed_scale);
    cJSON_AddNumberToObject(c, "num_experts_per_tok", (double)o->top_k);
    cJSON_AddNumberToObject(c, "first_k_dense_replace", (double)o->first_dense);
    cJSON_AddNumberToObject(c, "num_hidden_layers", (double)o->n_layers);
    cJSON_AddNumberToObject(c, "num_key_value_heads", (double)o->n_kv_heads);
    cJSON_AddNumberToObject(c, "rms_norm_eps", fx_eps(o));
    cJSON_AddNumberToObject(c, "num_nextn_predict_layers", (double)o->n_mtp);
    cJSON_AddBoolToObject(c, "use_qk_norm", !o->no_qk_norm);
    cJSON_AddNumberToObject(c, "vocab_size", (double)o->vocab);
    fx_config_tail(c, o);
    cJSON_ReplaceItemInObject(c, "rope_theta", cJSON_CreateNumber(fx_theta(o)));
    return c;
}

/* config.json of FX_MINIMAX_M2 with the keys of MiniMax-M2's released
 * config.json (vLLM's minimax_m2.py reads rotary_dim, use_routing_bias,
 * scoring_func, num_mtp_modules; transformers' MiniMaxM2Config the rest). */
static inline cJSON *fx_config_json_minimax(const fx_opts *o) {
    cJSON *c = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(c, "architectures");
    cJSON_AddItemToArray(a, cJSON_CreateString("MiniMaxM2ForCausalLM"));
    cJSON_AddStringToObject(c, "model_type", "minimax_m2");
    a = cJSON_AddArrayToObject(c, "attn_type_list");
    for (int64_t l = 0; l < o->n_layers; l++) cJSON_AddItemToArray(a, cJSON_CreateNumber(1));
    cJSON_AddNumberToObject(c, "head_dim", (double)o->head_dim);
    cJSON_AddNumberToObject(c, "hidden_size", (double)o->hidden);
    cJSON_AddNumberToObject(c, "intermediate_size", (double)o->moe_inter);
    cJSON_AddNumberToObject(c, "max_position_embeddings", 196608);
    cJSON_AddNumberToObject(c, "mtp_transformer_layers", 1);
    cJSON_AddNumberToObject(c, "num_attention_heads", (double)o->n_heads);
    cJSON_AddNumberToObject(c, "num_experts_per_tok", (double)o->top_k);
    cJSON_AddNumberToObject(c, "num_hidden_layers", (double)o->n_layers);
    cJSON_AddNumberToObject(c, "num_key_value_heads", (double)o->n_kv_heads);
    cJSON_AddNumberToObject(c, "num_local_experts", (double)o->n_experts);
    cJSON_AddNumberToObject(c, "num_mtp_modules", (double)o->n_mtp);
    cJSON_AddBoolToObject(c, "output_router_logits", 0);
    cJSON_AddStringToObject(c, "qk_norm_type", "per_layer");
    cJSON_AddNumberToObject(c, "rms_norm_eps", fx_eps(o));
    cJSON_AddNumberToObject(c, "rotary_dim", (double)fx_rot_dim(o));
    cJSON_AddNumberToObject(c, "router_aux_loss_coef", 0.001);
    cJSON_AddNumberToObject(c, "router_jitter_noise", 0.0);
    cJSON_AddStringToObject(c, "scoring_func", "sigmoid");
    cJSON_AddNumberToObject(c, "shared_intermediate_size", 0);
    cJSON_AddNullToObject(c, "sliding_window");
    cJSON_AddBoolToObject(c, "use_mtp", o->n_mtp > 0);
    cJSON_AddBoolToObject(c, "use_qk_norm", 1);
    cJSON_AddBoolToObject(c, "use_routing_bias", 1);
    cJSON_AddNumberToObject(c, "vocab_size", (double)o->vocab);
    fx_config_tail(c, o);
    cJSON_ReplaceItemInObject(c, "rope_theta", cJSON_CreateNumber(fx_theta(o)));
    return c;
}

static inline cJSON *fx_config_json(const fx_opts *o) {
    cJSON *c;
    if (o->arch == FX_GLM4_MOE) return fx_config_json_glm(o);
    if (o->arch == FX_MINIMAX_M2) return fx_config_json_minimax(o);
    if (o->arch == FX_QWEN3_NEXT) return fx_config_json_qwen3_next(o);
    if (o->arch == FX_QWEN3_5_MOE) return fx_config_json_qwen3_5(o);
    if (fx_deepseek(o)) return fx_config_json_deepseek(o);
    if (o->arch != FX_QWEN3) return fx_config_json_family(o);
    c = cJSON_CreateObject();
    cJSON_AddItemToObject(c, "architectures", cJSON_CreateString("Qwen3MoeForCausalLM"));
    cJSON_AddStringToObject(c, "model_type", "qwen3_moe");
    cJSON_AddNumberToObject(c, "vocab_size", (double)o->vocab);
    cJSON_AddNumberToObject(c, "hidden_size", (double)o->hidden);
    cJSON_AddNumberToObject(c, "intermediate_size", (double)o->inter);
    cJSON_AddNumberToObject(c, "moe_intermediate_size", (double)o->moe_inter);
    cJSON_AddNumberToObject(c, "num_hidden_layers", (double)o->n_layers);
    cJSON_AddNumberToObject(c, "num_attention_heads", (double)o->n_heads);
    cJSON_AddNumberToObject(c, "num_key_value_heads", (double)o->n_kv_heads);
    cJSON_AddNumberToObject(c, "head_dim", (double)o->head_dim);
    cJSON_AddNumberToObject(c, "num_experts", (double)o->n_experts);
    cJSON_AddNumberToObject(c, "num_experts_per_tok", (double)o->top_k);
    cJSON_AddBoolToObject(c, "norm_topk_prob", 1);
    cJSON_AddNumberToObject(c, "decoder_sparse_step", 1);
    cJSON *mlp_only = cJSON_AddArrayToObject(c, "mlp_only_layers");
    if (o->dense_layer >= 0) cJSON_AddItemToArray(mlp_only, cJSON_CreateNumber((double)o->dense_layer));
    cJSON_AddNumberToObject(c, "max_position_embeddings", 4096);
    cJSON_AddNumberToObject(c, "rms_norm_eps", 1e-6);
    return fx_config_tail(c, o);
}

static inline cJSON *fx_desc_json(const fx_list *L) {
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "model_quant_type", L->o->quant ? "W8A8_DYNAMIC" : "FLOAT");
    cJSON_AddStringToObject(d, "version", "1.0.0");
    for (int i = 0; i < L->n; i++) cJSON_AddStringToObject(d, L->t[i].orig_name, L->t[i].quant);
    return d;
}

/* Shards: the first half of the tensors, then the rest. */
static inline int fx_write_shards(const char *dir, fx_list *L) {
    char path[4096 + 128], file[2][64];
    int cut = L->n / 2;
    uint64_t total = 0;
    cJSON *idx = cJSON_CreateObject(), *meta = cJSON_AddObjectToObject(idx, "metadata");
    cJSON *map = cJSON_AddObjectToObject(idx, "weight_map");
    for (int s = 0; s < 2; s++) {
        snprintf(file[s], sizeof file[s], "model-%05d-of-00002.safetensors", s + 1);
        snprintf(path, sizeof path, "%s/%s", dir, file[s]);
        if (fx_write_st(path, L, s ? cut : 0, s ? L->n : cut) != 0) {
            cJSON_Delete(idx);
            return -1;
        }
    }
    for (int i = 0; i < L->n; i++) {
        if (L->t[i].omit) continue;
        total += L->t[i].n_bytes;
        cJSON_AddStringToObject(map, L->t[i].name, file[i >= cut]);
    }
    cJSON_AddNumberToObject(meta, "total_size", (double)total);
    return fx_write_json(dir, "model.safetensors.index.json", idx, L->o);
}

/* Write the whole folder `dir` (must exist, ideally empty). 0 on success. */
static inline int fx_write_model(const char *dir, const fx_opts *o) {
    fx_list L;
    char path[4096 + 128];
    int rc;
    memset(&L, 0, sizeof L);
    L.o = o;
    fx_build(&L);
    for (int i = 0; o->tensor_hook && i < L.n; i++) o->tensor_hook(o->user, &L.t[i]);
    if (o->n_shards == 2) {
        rc = fx_write_shards(dir, &L);
    } else {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        rc = fx_write_st(path, &L, 0, L.n);
    }
    if (rc == 0) rc = fx_write_json(dir, "config.json", fx_config_json(o), o);
    if (rc == 0 && (o->quant || o->float_desc || o->lm_head_w8a8))
        rc = fx_write_json(dir, "quant_model_description.json", fx_desc_json(&L), o);
    if (rc == 0 && o->generation_config) {
        cJSON *g = cJSON_CreateObject(), *eos = cJSON_AddArrayToObject(g, "eos_token_id");
        cJSON_AddNumberToObject(g, "bos_token_id", 1);
        cJSON_AddItemToArray(eos, cJSON_CreateNumber(2));
        cJSON_AddItemToArray(eos, cJSON_CreateNumber(7));
        cJSON_AddBoolToObject(g, "do_sample", 1);
        rc = fx_write_json(dir, "generation_config.json", g, o);
    }
    fx_list_free(&L);
    return rc;
}

#ifdef MOE8_TEST_H
/* A fixture folder in the test's scratch space (test_tmpdir(name)), with the
 * real Qwen3 tokenizer files copied in when asked. The returned path stays
 * valid for the next 7 calls. */
static inline const char *fx_test_model(const char *name, fx_opts *o, int with_tokenizer) {
    static char dirs[8][4096];
    static int next;
    char *dir = dirs[next++ % 8], cmd[9000];
    snprintf(dir, 4096, "%s", test_tmpdir(name));
    if (fx_write_model(dir, o) != 0) exit(2);
    if (with_tokenizer) {
        snprintf(cmd, sizeof cmd, "cp '%s/tokenizer.json' '%s/tokenizer_config.json' '%s/'",
                 MOE8_TOKENIZER_DIR, MOE8_TOKENIZER_DIR, dir);
        if (system(cmd) != 0) exit(2);
    }
    return dir;
}
#endif

#endif
