/*
 * model.h — internal view of a loaded model (moe8_model), for the code that
 * builds on it: expert packing (moe_build.c), the prepared weights
 * (weights.c) and, through them, the forward pass (model/).
 *
 * Every tensor pointer points into the safetensors handle `st` (memory-mapped,
 * read-only) and has been checked by moe8_model_load against the config and
 * the layer's resolved quant type: names present, dtypes and shapes below,
 * scale/offset values sane. Code using these may rely on that and need not
 * re-check. Nothing is packed, converted or computed at load.
 *
 * Shapes are [out][in] as stored (checkpoint layout), with
 *   H = hidden_size, V = vocab_size, D = head_dim, NH = num_attention_heads,
 *   NKV = num_key_value_heads, E = num_experts, I = moe_intermediate_size,
 *   F = intermediate_size (dense MLP), S = shared_expert_intermediate_size;
 *   MLA: QL = q_lora_rank, L = kv_lora_rank, R = qk_rope_head_dim, DN =
 *   qk_nope_head_dim, DV = v_head_dim, D = DN + R.
 * Names come from the family's descriptor (src/arch).
 */
#ifndef MOE8_MODEL_H
#define MOE8_MODEL_H

#include <pthread.h>
#include <string.h>

#include "arch/arch.h"
#include "core/core.h"
#include "arch/quant_desc.h"
#include "core/public.h"

/* Most threads a caller may ask for (model, context and quantize params):
 * larger counts are refused with MOE8_ERR_INVALID_ARG, 0 means the default. */
#define MOE8_MAX_THREADS 4096

/* Largest |activation code x weight code| of a W8A8 static linear: codes in
 * [-128, 127] on both sides. Its int32 accumulator reaches at most this times
 * n_in plus |quant_bias|, which the loader keeps <= INT32_MAX. */
#define MOE8_W8A8_MAX_PRODUCT 16384

/* One linear map y = x @ weight^T, in any storage. */
typedef struct {
    moe8_quant_type quant;            /* FLOAT, W8A8 (static linear), W8A8_DYNAMIC (experts,
                                       * lm_head) or W4A8_DYNAMIC (experts) */
    int64_t n_out, n_in;
    const moe8_tensor *weight;        /* [n_out][n_in]: BF16/F16/F32 if FLOAT, else I8;
                                       * W4A8_DYNAMIC: [n_out/2][n_in] I8, channel 2j in the
                                       * low nibble of row j, 2j+1 in the high (SEMANTICS §4b) */
    /* W8A8 static (SEMANTICS §5); NULL otherwise: */
    const moe8_tensor *input_scale;   /* [1] F32/F16/BF16, finite, > 0 */
    const moe8_tensor *input_offset;  /* [1] I8 or integer-valued F32/F16/BF16 */
    const moe8_tensor *deq_scale;     /* [n_out] I64 (fp32 bits in the low 32, high word 0
                                       * or their sign extension) or F32; finite, > 0 */
    const moe8_tensor *quant_bias;    /* [n_out] I32, |b| + MOE8_W8A8_MAX_PRODUCT * n_in
                                       * <= INT32_MAX (the int32 accumulator cannot wrap) */
    float in_scale;                   /* input_scale, decoded */
    int32_t in_offset;                /* input_offset, decoded, in [-128, 127] */
    /* W8A8_DYNAMIC: scale required, offset optional. W8A8: both optional
     * and unused at run time. NULL when absent. */
    const moe8_tensor *weight_scale;  /* [n_out] or [n_out][1]: F32/BF16/F16, finite */
    const moe8_tensor *weight_offset; /* same shape as weight_scale; integer values in [-128, 127] */
    int nonzero_offset;               /* 1 if weight_offset holds a non-zero value */
    /* FLOAT q/k/v of families with qkv_bias: y = x @ W^T + bias; NULL otherwise
     * (a W8A8 linear's bias is folded into quant_bias, SEMANTICS §5): */
    const moe8_tensor *bias;          /* [n_out] F32/BF16/F16 */
    const moe8_tensor *scale_bias;    /* W4A8_DYNAMIC: [n_out], [n_out][1] or [n_out][16]
                                       * float, or NULL; checked at packing, unused */
} moe8_linear;

/* One expert of a MoE layer. */
typedef struct {
    moe8_linear gate;                 /* [I][H] */
    moe8_linear up;                   /* [I][H] */
    moe8_linear down;                 /* [H][I] */
} moe8_expert;

/* One decoder layer. */
typedef struct {
    moe8_layer_plan plan;             /* what the layer is built of (arch/plan.h) */
    moe8_layer_info info;             /* is_moe and resolved quant types */
    int info_stacked;                 /* experts bound as views of stacked tensors */
    const moe8_tensor *attn_norm;     /* input_layernorm [H] */
    const moe8_tensor *ffn_norm;      /* post_attention_layernorm [H] */
    const moe8_tensor *q_norm;        /* [D]; NULL for families without q/k norm */
    const moe8_tensor *k_norm;        /* [D] */
    moe8_linear q;                    /* [NH*D][H] */
    moe8_linear k;                    /* [NKV*D][H] */
    moe8_linear v;                    /* [NKV*D][H] */
    moe8_linear o;                    /* [H][NH*D] */
    int qkv_input_differ;             /* W8A8: q/k/v input_scale/offset not all equal (SEMANTICS §5) */
    /* multi-head latent attention (info.mla; q above is q_proj when q_lora_rank is 0): */
    moe8_linear q_a;                  /* [QL][H] (q_lora_rank > 0) */
    const moe8_tensor *q_a_norm;      /* [QL] */
    moe8_linear q_b;                  /* [NH*D][QL] */
    moe8_linear kv_a;                 /* [L+R][H] */
    const moe8_tensor *kv_a_norm;     /* [L] */
    moe8_linear kv_b;                 /* [NH*(DN+DV)][L] */
    /* MoE layers (info.is_moe): */
    const moe8_tensor *router;        /* mlp.gate [E][H], float */
    const moe8_tensor *router_bias;   /* e_score_correction_bias [E], float (deepseek_v3), or NULL */
    const moe8_tensor *router_lbias;  /* the router's own bias [E] added to its logits (gpt_oss),
                                       * float, or NULL */
    const moe8_tensor *sinks;         /* self_attn.sinks [NH] float (gpt_oss), or NULL */
    moe8_expert *experts;             /* [E], into moe8_model.expert_store */
    /* the shared expert of a MoE layer (info.has_shared): */
    moe8_linear sh_gate;              /* [S][H] */
    moe8_linear sh_up;                /* [S][H] */
    moe8_linear sh_down;              /* [H][S] */
    const moe8_tensor *sh_score;      /* shared_expert_gate [1][H], float */
    /* dense layers (!info.is_moe): */
    moe8_linear mlp_gate;             /* [F][H] */
    moe8_linear mlp_up;               /* [F][H] */
    moe8_linear mlp_down;             /* [H][F] */
    /* Gated DeltaNet layers (info.gdn; no q/k/v/o, q_norm, k_norm; arch.h MOE8_R_GDN_*): */
    moe8_linear gdn_in;               /* in_proj_qkvz [2NKdk+2NVdv][H] (grouped) or
                                       * in_proj_qkv [C][H] (flat) */
    moe8_linear gdn_z;                /* in_proj_z [NVdv][H] (flat families) */
    moe8_linear gdn_out;              /* out_proj [H][NVdv] */
    const moe8_tensor *gdn_ba;        /* in_proj_ba [2NV][H] grouped, float */
    const moe8_tensor *gdn_b, *gdn_a; /* in_proj_b, in_proj_a [NV][H], float */
    const moe8_tensor *gdn_conv;      /* conv1d.weight [C][1][K], float */
    const moe8_tensor *gdn_a_log;     /* A_log [NV], float */
    const moe8_tensor *gdn_dt_bias;   /* dt_bias [NV], float */
    const moe8_tensor *gdn_norm;      /* norm.weight [dv], float */
} moe8_layer;

struct moe8_model {
    char *dir;                        /* the folder as given */
    moe8_config cfg;                  /* eos ids: config.json + generation_config.json */
    const moe8_arch_desc *arch;       /* the family's descriptor */
    moe8_model_params params;
    moe8_st *st;                      /* owns the mapped tensors */
    int has_quant_desc;               /* quant_model_description.json was present */
    const moe8_tensor *embed;         /* model.embed_tokens.weight [V][H] float */
    const moe8_tensor *final_norm;    /* model.norm.weight [H] */
    moe8_linear lm_head;              /* [V][H]: lm_head.weight FLOAT or W8A8_DYNAMIC (int8,
                                       * per-row scale); weight == embed (FLOAT) when tied */
    moe8_layer *layers;               /* [num_hidden_layers] */
    moe8_expert *expert_store;        /* [n_moe_layers * E] */
    moe8_tensor *stacked;             /* stacked experts (arch.h stacked_gate_up): [n_moe_layers
                                       * * E * 3] views of each expert's gate, up and down
                                       * rows inside the stacked tensors; NULL: none */
    struct moe8_gptoss_layer *gptoss; /* [num_hidden_layers] gpt_oss experts written out at
                                       * load (experts_gptoss.c); NULL: none */
    moe8_dist_shard shard;            /* this rank's share (SEMANTICS §8); all of it without a dist */
    int refs;                         /* 1 for the caller + 1 per context (atomic) */
    /* The prepared weights (load/weights.h), one set per float_experts
     * setting: built by the first moe8_weights_acquire, shared by the
     * model's contexts, freed by the last moe8_weights_release. */
    struct {
        struct moe8_weights *w;       /* NULL until built, and after the last release */
        int refs;                     /* contexts using w, + 1 while pinned */
        int pinned;                   /* moe8_model_prepare holds a reference (dropped
                                       * when the model is destroyed) */
    } prepared[2];
    pthread_mutex_t prep_lock;        /* guards prepared[]; held during a build, so one
                                       * set is built once however many ask at once */
};

/* 1 when m's lm_head is float and is packed to int8 at load (params.lm_head_int8,
 * SEMANTICS §6d): the weights build quantizes it (moe8_proj_init_int8), the
 * packed cache stores it, in a file of its own. */
static inline int moe8_model_lm_head_int8(const moe8_model *m) {
    return m->params.lm_head_int8 && m->lm_head.quant == MOE8_QUANT_FLOAT;
}

/* Contexts hold a reference so the model outlives them whatever the order of
 * the frees; the last unref frees it. */
void moe8_model_ref(moe8_model *m);
void moe8_model_unref(moe8_model *m);
/* Drop the references moe8_model_prepare took (load/weights.c); at destruction. */
void moe8_model_release_prepared(moe8_model *m);

/* Element i of a numeric tensor as fp32 (no range check on i: callers index
 * within n_elements). I64 is read as an integer, not a bit pattern. */
static inline float moe8_tensor_f32_at(const moe8_tensor *t, int64_t i) {
    const unsigned char *p = (const unsigned char *)t->data;
    size_t sz = moe8_dtype_size(t->dtype);
    union { uint16_t u16; int16_t i16; uint32_t u32; int32_t i32; int64_t i64; float f; double d; } v;
    memcpy(&v, p + (size_t)i * sz, sz);
    switch (t->dtype) {
    case MOE8_DT_F32: return v.f;
    case MOE8_DT_F64: return (float)v.d;
    case MOE8_DT_F16: return moe8_f16_to_f32(v.u16);
    case MOE8_DT_BF16: return moe8_bf16_to_f32(v.u16);
    case MOE8_DT_I8: return (float)(int8_t)p[i];
    case MOE8_DT_U8: return (float)p[i];
    case MOE8_DT_I16: return (float)v.i16;
    case MOE8_DT_I32: return (float)v.i32;
    case MOE8_DT_I64: return (float)v.i64;
    default: return 0.0f;
    }
}

/* deq_scale element i: an I64 holding fp32 bits in its low 32 bits, or F32.
 * The loader checked the high word (moe8_deq_scale_high_ok) and the value. */
static inline float moe8_deq_scale_at(const moe8_tensor *t, int64_t i) {
    if (t->dtype == MOE8_DT_I64) {
        int64_t x;
        uint32_t lo;
        float f;
        memcpy(&x, (const char *)t->data + (size_t)i * 8, 8);
        lo = (uint32_t)((uint64_t)x & 0xffffffffu);
        memcpy(&f, &lo, 4);
        return f;
    }
    return moe8_tensor_f32_at(t, i);
}

/* An I64 deq_scale element's high 32 bits are 0 or the sign extension of
 * its low 32 bits (ModelSlim sign-extends the int32 view of the fp32 bits). */
static inline int moe8_deq_scale_high_ok(int64_t x) {
    uint32_t hi = (uint32_t)((uint64_t)x >> 32), lo = (uint32_t)((uint64_t)x & 0xffffffffu);
    return hi == 0 || (hi == 0xffffffffu && (lo & 0x80000000u));
}

/* The fingerprint of m's folder (fingerprint.c): [0] config.json, [1]
 * quant_model_description.json, [2] model.safetensors.index.json and every
 * loaded safetensors file's name, size and header (and mtime when with_mtime);
 * absent files hash as "absent". Fails only when a header cannot be read. */
moe8_status moe8_model_fingerprint(const moe8_model *m, int with_mtime, uint64_t fp[3],
                                   moe8_error *err);

/* Collective end of moe8_model_load with a dist of more than one rank: `m` is
 * the loaded model (NULL when loading failed, `local` then says why). Agrees
 * on the outcome, then checks the split and compares the folder fingerprints
 * (without times). Fills m->shard. */
moe8_status moe8_model_load_check(moe8_dist *d, moe8_model *m, moe8_status local,
                                  moe8_error *err);

struct moe8_pcache;
/* moe8_moe_layer_from_model with the model's packed cache (cache.h; NULL: none; moe_build.c):
 * the packed experts are taken from it, or handed to it, as one region. */
moe8_status moe8_moe_layer_from_model_cached(const moe8_model *m, int64_t layer,
                                             const moe8_moe_part *part, struct moe8_pcache *pc,
                                             moe8_moe_layer **out, moe8_error *err);

/* gpt_oss (experts_gptoss.c): layer l's stacked experts with their biases:
 * float ones written out per expert and bound FLOAT, MXFP4 ones bound
 * W8A8_DYNAMIC and converted when the layer is built (nothing when the
 * folder has per-expert names); freed with the model. */
moe8_status moe8_gptoss_bind_experts(moe8_model *m, int64_t l, moe8_layer *ly, moe8_error *err);
void moe8_gptoss_free(moe8_model *m);
/* 1 if layer l's experts are MXFP4 (bound W8A8_DYNAMIC, without int8 tensors). */
int moe8_gptoss_is_mxfp4(const moe8_model *m, int64_t l);
/* Experts [first, last) of MXFP4 layer l into ex[e] (moe8_moe.h): per-row
 * int8 with fp32 scales, or (as_float) the exact decoded fp32, in *block
 * (moe8_alloc_aligned; the caller frees it, or hands a float one to the layer). */
moe8_status moe8_gptoss_experts(const moe8_model *m, int64_t l, int first, int last, int as_float,
                                moe8_moe_expert *ex, void **block, moe8_error *err);
/* The same experts when the packed cache holds them (int8 packed, and
 * `scales`: per expert [gate I][up I][down H] fp32 row scales, experts
 * [first, last) in order, as moe8_gptoss_experts makes them): ex[e] gets
 * those scales and int8 data that is never read (zeros, in *block: the
 * caller frees it). Nothing is decoded. */
moe8_status moe8_gptoss_experts_cached(const moe8_model *m, int64_t l, int first, int last,
                                       const float *scales, moe8_moe_expert *ex, void **block,
                                       moe8_error *err);

#endif
