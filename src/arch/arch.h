/*
 * arch.h — internal: one descriptor per model family (docs/MODELS.md). A
 * descriptor holds what differs between families and nothing else:
 *
 *   config.json   model_type, the keys the family reads beyond the common
 *                 ones (with their ranges), Hugging Face's defaults of its
 *                 config class, the values it refuses
 *   tensor names  a printf format per tensor role (llama.cpp's per-arch
 *                 table): "%lld" the layer, then "%lld" the expert; NULL when
 *                 the family has no such tensor (Mixtral has no q_norm)
 *   structure     the kinds its layers are built of (plan.h): attention,
 *                 rotary, feed-forward, router, activation, tensor options
 *   make-model    its presets and config.json / generation_config.json
 *
 * What is common to every family lives in arch.c's role table: where a
 * tensor occurs (model, every layer, dense or MoE layers, each expert), its
 * shape in config symbols, how it may be stored (SEMANTICS §6) and how TP
 * splits it (SEMANTICS §8). The loader, the quant description, the forward,
 * the sharding, make-model, quantize and inspect read names and structure
 * from here and spell none themselves.
 *
 * Adding a family: one src/arch/<family>.c defining a moe8_arch_desc, its
 * entry in arch.c's list and in moe8_arch, tests and docs/MODELS.md; a kind
 * it needs that no family had yet is one file of its own beside the others.
 */
#ifndef MOE8_ARCH_H
#define MOE8_ARCH_H

#include <stddef.h>
#include <stdint.h>

/* cJSON stays out of the files that include this one: the readers take it by name */
struct cJSON;

#include "arch/plan.h"
#include "core/public.h"

/* ======================================================================== */
/* Tensor roles (in the loader's binding order)                             */
/* ======================================================================== */

typedef enum {
    /* model */
    MOE8_R_EMBED,          /* model.embed_tokens [V][H] */
    MOE8_R_FINAL_NORM,     /* model.norm [H] */
    MOE8_R_LM_HEAD,        /* lm_head [V][H] (absent when tied) */
    /* every layer */
    MOE8_R_ATTN_NORM,      /* input_layernorm [H] */
    MOE8_R_FFN_NORM,       /* post_attention_layernorm [H] */
    MOE8_R_Q_NORM,         /* [D] (qwen3_moe); [NH*D] over the whole projection (minimax_m2) */
    MOE8_R_K_NORM,         /* [D]; [NKV*D] */
    MOE8_R_Q,              /* [NH*D][H] (+ bias [NH*D] when config qkv_bias) */
    MOE8_R_K,              /* [NKV*D][H] */
    MOE8_R_V,              /* [NKV*D][H] */
    /* multi-head latent attention (deepseek; docs/MODELS.md), beside MOE8_R_Q or instead of it */
    MOE8_R_Q_A,            /* q_a_proj [QL][H] (q_lora_rank > 0) */
    MOE8_R_Q_A_NORM,       /* q_a_layernorm [QL] (eps 1e-6) */
    MOE8_R_Q_B,            /* q_b_proj [NH*D][QL] */
    MOE8_R_KV_A,           /* kv_a_proj_with_mqa [L+R][H] */
    MOE8_R_KV_A_NORM,      /* kv_a_layernorm [L] (eps 1e-6) */
    MOE8_R_KV_B,           /* kv_b_proj [NH*(DN+DV)][L] */
    MOE8_R_O,              /* [H][NH*DV] (DV = D outside MLA) */
    /* MoE layers */
    MOE8_R_ROUTER,         /* [E][H] */
    MOE8_R_EXP_GATE,       /* per expert [I][H] */
    MOE8_R_EXP_UP,         /* per expert [I][H] */
    MOE8_R_EXP_DOWN,       /* per expert [H][I] */
    MOE8_R_SHEXP_GATE,     /* shared expert [S][H] */
    MOE8_R_SHEXP_UP,       /* [S][H] */
    MOE8_R_SHEXP_DOWN,     /* [H][S] */
    MOE8_R_SHEXP_SCORE,    /* shared_expert_gate [1][H] */
    /* dense layers */
    MOE8_R_MLP_GATE,       /* [F][H] */
    MOE8_R_MLP_UP,         /* [F][H] */
    MOE8_R_MLP_DOWN,       /* [H][F] */
    /* Gated DeltaNet layers (hybrid families; NK key heads of dk, NV value heads of dv,
     * C = 2 NK dk + NV dv; SEMANTICS §7h): */
    MOE8_R_GDN_QKVZ,       /* in_proj_qkvz [2 NK dk + 2 NV dv][H], grouped by key head:
                            * [q dk, k dk, v (NV/NK) dv, z (NV/NK) dv] (qwen3_next) */
    MOE8_R_GDN_BA,         /* in_proj_ba [2 NV][H] grouped: [b (NV/NK), a (NV/NK)] */
    MOE8_R_GDN_QKV,        /* in_proj_qkv [C][H] flat [q, k, v] (qwen3_5_moe) */
    MOE8_R_GDN_Z,          /* in_proj_z [NV dv][H] */
    MOE8_R_GDN_B,          /* in_proj_b [NV][H] */
    MOE8_R_GDN_A,          /* in_proj_a [NV][H] */
    MOE8_R_GDN_CONV,       /* conv1d.weight [C][1][K] (3-D: bound by the loader itself) */
    MOE8_R_GDN_A_LOG,      /* A_log [NV] (the format is the whole name: no ".weight") */
    MOE8_R_GDN_DT_BIAS,    /* dt_bias [NV] (likewise) */
    MOE8_R_GDN_NORM,       /* norm.weight [dv], plain (not zero-centred) */
    MOE8_R_GDN_OUT,        /* out_proj [H][NV dv] */
    /* attention sinks (gpt_oss): one learned logit per head, the format the whole name */
    MOE8_R_SINKS,          /* self_attn.sinks [NH] float, split with the heads */
    MOE8_R_COUNT
} moe8_role;

/* Where a role occurs. */
typedef enum {
    MOE8_SCOPE_MODEL,      /* once */
    MOE8_SCOPE_LAYER,      /* every layer */
    MOE8_SCOPE_MOE,        /* MoE layers */
    MOE8_SCOPE_EXPERT,     /* each expert of MoE layers */
    MOE8_SCOPE_DENSE,      /* dense layers */
} moe8_scope;

/* How it may be stored (SEMANTICS §6). */
typedef enum {
    MOE8_KIND_NORM,        /* float vector; FLOAT only */
    MOE8_KIND_FLOAT,       /* float matrix never quantized: embedding, router, shared gate */
    MOE8_KIND_LINEAR,      /* FLOAT or W8A8 static: attention, dense MLP */
    MOE8_KIND_EXPERT,      /* FLOAT or W8A8_DYNAMIC: routed experts */
    MOE8_KIND_SHARED,      /* FLOAT, W8A8 or W8A8_DYNAMIC: the shared expert */
    MOE8_KIND_LM_HEAD,     /* FLOAT or W8A8_DYNAMIC */
    MOE8_KIND_ABSORBED,    /* FLOAT or W8A8 static, run as its dequantized float weight
                            * (kv_b_proj, absorbed into MLA attention); quantize keeps it FLOAT */
} moe8_kind;

/* How tensor parallelism splits it (SEMANTICS §8). */
typedef enum {
    MOE8_SPLIT_NONE,       /* replicated */
    MOE8_SPLIT_ROWS,       /* column-parallel: output rows of the rank's heads / slice */
    MOE8_SPLIT_COLS,       /* row-parallel: input columns; a W8A8 quant_bias on rank 0 only */
    MOE8_SPLIT_VOCAB,      /* lm_head: vocabulary rows in chunks of ceil(V/N) */
} moe8_split;

/* Dimensions, in config symbols. */
typedef enum {
    MOE8_DIM_NONE,         /* second dimension of a vector */
    MOE8_DIM_ONE,
    MOE8_DIM_H,            /* hidden_size */
    MOE8_DIM_V,            /* vocab_size */
    MOE8_DIM_D,            /* head_dim */
    MOE8_DIM_QD,           /* num_attention_heads x head_dim */
    MOE8_DIM_KD,           /* num_key_value_heads x head_dim */
    MOE8_DIM_E,            /* num_experts */
    MOE8_DIM_I,            /* moe_intermediate_size (per expert) */
    MOE8_DIM_F,            /* intermediate_size (dense MLP) */
    MOE8_DIM_S,            /* shared_expert_intermediate_size */
    MOE8_DIM_OD,           /* num_attention_heads x v_head_dim (o_proj's input) */
    MOE8_DIM_QL,           /* q_lora_rank */
    MOE8_DIM_KVL,          /* kv_lora_rank */
    MOE8_DIM_KVA,          /* kv_lora_rank + qk_rope_head_dim */
    MOE8_DIM_KVB,          /* num_attention_heads x (qk_nope_head_dim + v_head_dim) */
    MOE8_DIM_QN,           /* q_norm: head_dim, or num_attention_heads x head_dim when the
                            * family's q/k norm is over the whole projection (plan.h) */
    MOE8_DIM_KN,           /* k_norm: head_dim, or num_key_value_heads x head_dim */
    MOE8_DIM_QG,           /* q_proj rows: num_attention_heads x head_dim, twice that with
                            * the output gate (plan.h MOE8_ATTN_OUT_GATE) */
    MOE8_DIM_GQKVZ,        /* Gated DeltaNet: 2 NK dk + 2 NV dv */
    MOE8_DIM_GBA,          /* 2 NV */
    MOE8_DIM_GC,           /* C = 2 NK dk + NV dv (the conv's channels) */
    MOE8_DIM_GZ,           /* NV dv */
    MOE8_DIM_GNV,          /* NV */
    MOE8_DIM_GDV,          /* dv */
    MOE8_DIM_NH,           /* num_attention_heads (attention sinks) */
} moe8_dim;

typedef struct {
    const char *what;      /* short name for messages ("q_proj") */
    moe8_scope scope;
    moe8_kind kind;
    moe8_split split;
    moe8_dim out, in;      /* shape [out][in], or [out] when in is MOE8_DIM_NONE */
} moe8_role_info;

const moe8_role_info *moe8_role_of(moe8_role r);
/* Value of a dimension symbol for config c. */
int64_t moe8_dim_of(const moe8_config *c, moe8_dim d);

/* ======================================================================== */
/* Config fields                                                             */
/* ======================================================================== */

/* What only some families have, in moe8_config.family (opaque in the public
 * header: read there with moe8_config_get_int / _num by these names). */
typedef struct {
    int64_t shared_expert_intermediate_size; /* qwen2_moe: width S of the shared expert;
                                   * 0 = no shared expert (the other families) */
    int qkv_bias;                 /* q/k/v projections carry a bias (qwen2_moe: default 1) */
    /* DeepSeek-V2/V3 (docs/MODELS.md); 0 for the other families except
     * v_head_dim (= head_dim) and routed_scaling_factor / moe_layer_freq (1): */
    int64_t kv_lora_rank;         /* > 0: multi-head latent attention; the latent width L */
    int64_t q_lora_rank;          /* 0 (null): q_proj; else q_a_proj -> q_a_layernorm -> q_b_proj */
    int64_t qk_nope_head_dim;     /* MLA: per-head q/k width without rotary */
    int64_t qk_rope_head_dim;     /* MLA: rotary width R (one k_pe shared by all heads);
                                   * head_dim = qk_nope_head_dim + qk_rope_head_dim */
    int64_t v_head_dim;           /* per-head value width (= head_dim outside MLA) */
    int64_t n_shared_experts;     /* deepseek: shared_experts of width n x moe_intermediate_size
                                   * (shared_expert_intermediate_size), ungated */
    int64_t first_k_dense_replace;/* deepseek: layers [0, k) have a dense MLP */
    int64_t moe_layer_freq;       /* deepseek: MoE layers are l >= k with l % freq == 0 */
    int64_t n_group, topk_group;  /* grouped routing: experts in n_group groups, the best
                                   * topk_group kept (V2 group_limited_greedy, V3 always) */
    int topk_grouped;             /* route through the groups (n_group, topk_group) */
    int group_top2;               /* a group's score: sum of its two best (V3), else its best (V2) */
    int scoring_sigmoid;          /* router scores sigmoid (V3) instead of softmax */
    int e_score_bias;             /* mlp.gate.e_score_correction_bias [E] (V3): selection only */
    double routed_scaling_factor; /* top-k weights x this after renormalization */
    int rope_interleave;          /* rotary on pairs (2i, 2i+1) (deepseek), else halves (NEOX) */
    double yarn_factor;           /* rope_scaling {"type": "yarn"} (deepseek); 0 = none */
    double yarn_beta_fast, yarn_beta_slow, yarn_mscale, yarn_mscale_all_dim;
    int64_t yarn_original_max_position_embeddings;
    /* glm4_moe: */
    double partial_rotary_factor; /* rotary on the first head_dim x this dims; 0: the whole head */
    int qk_norm;                  /* use_qk_norm: per-head q/k RMSNorm when the family's kinds
                                   * leave it to the config */
    int64_t num_nextn_predict_layers; /* MTP layers after the decoder's, skipped at load
                                   * (minimax_m2: num_mtp_modules) */
    /* minimax_m2: */
    int64_t rotary_dim;           /* rotary on the first rotary_dim dims of each head; 0: by
                                   * partial_rotary_factor or the whole head */
    /* hybrid linear attention (qwen3_next, qwen3_5_moe): */
    int64_t linear_num_key_heads, linear_num_value_heads; /* NK, NV (a multiple of NK) */
    int64_t linear_key_head_dim, linear_value_head_dim;   /* dk, dv */
    int64_t linear_conv_kernel_dim;                       /* K */
    int64_t full_attention_interval; /* layer l is full attention iff (l + 1) % this == 0,
                                   * unless layer_types says */
    int n_layer_types;            /* entries of config.json's layer_types (0: none) */
    int attn_output_gate;         /* q_proj carries the sigmoid output gate (hybrids: 1) */
    uint64_t full_layers[MOE8_MAX_LAYERS / 64]; /* layer_types: bit l set for full_attention */
    /* gpt_oss: */
    int64_t sliding_window;       /* positions a sliding layer attends to (itself included) */
    uint64_t sliding_layers[MOE8_MAX_LAYERS / 64]; /* layer_types: bit l set for
                                   * sliding_attention */
    double swiglu_limit;          /* clamped SwiGLU: gate <= limit, |up| <= limit */
    double swiglu_alpha;          /* gate x sigmoid(alpha x gate) (1.702, fixed by the modeling code) */
    int yarn_no_truncate;         /* YaRN's correction range left unrounded (rope_scaling
                                   * truncate false: gpt_oss); 0: floored / ceiled */
} moe8_family_cfg;

/* The family block of a config (const-preserving). */
#define MOE8_FAM(c)                                                                     \
    _Generic((c), const moe8_config *: (const moe8_family_cfg *)(const void *)(c)->family.bytes, \
             moe8_config *: (moe8_family_cfg *)(void *)(c)->family.bytes)
/* Offset of family field f in moe8_config (for moe8_cfg_int.offset). */
#define MOE8_FAM_OFFSET(f) (offsetof(moe8_config, family) + offsetof(moe8_family_cfg, f))

/* An integer field: key, range, and where it goes in moe8_config. */
typedef struct {
    const char *key;
    int64_t lo, hi;
    size_t offset;         /* offsetof(moe8_config, ...) of an int64_t */
} moe8_cfg_int;

/* Readers for family code (config.c): absent or null keeps the default. */
moe8_status moe8_cfg_read_int(const struct cJSON *root, const char *label, const moe8_cfg_int *f,
                              moe8_config *c, moe8_error *err);
moe8_status moe8_cfg_read_bool(const struct cJSON *root, const char *label, const char *key, int *v,
                               moe8_error *err);
/* A positive finite number: absent or null keeps *v. */
moe8_status moe8_cfg_read_pos_double(const struct cJSON *root, const char *label, const char *key,
                                     double *v, moe8_error *err);
/* Refuse `key` when it is present and true (`what` names the feature). */
moe8_status moe8_cfg_refuse_true(const struct cJSON *root, const char *label, const char *key,
                                 moe8_error *err);
/* The grouped routing relations of c (deepseek, glm4_moe), when topk_grouped:
 * n_group divides the experts, topk_group in [1, n_group], top-k within the
 * kept groups, two experts per group for the top-2 group score. */
moe8_status moe8_cfg_check_groups(const char *label, const moe8_config *c, moe8_error *err);
/* Refuse `key` when it is present and not null. */
moe8_status moe8_cfg_refuse_non_null(const struct cJSON *root, const char *label, const char *key,
                                     moe8_error *err);

/* Caps on dimensions: generous next to real models (Qwen3-235B: H 4096,
 * 94 layers, E 128), low enough that vocab x hidden, E x I x H x layers and
 * the KV cache size fit in int64 with room to spare. */
#define MOE8_CAP_VOCAB (INT64_C(1) << 24)
#define MOE8_CAP_HIDDEN (INT64_C(1) << 16)
#define MOE8_CAP_WIDTH (INT64_C(1) << 20) /* intermediate sizes */
#define MOE8_CAP_HEADS INT64_C(1024)
#define MOE8_CAP_HEAD_DIM INT64_C(1024)
#define MOE8_CAP_EXPERTS INT64_C(4096)
#define MOE8_CAP_POSITIONS (INT64_C(1) << 24)
#define MOE8_CAP_ATTN_WIDTH (INT64_C(1) << 18) /* heads x head_dim */

/* ======================================================================== */
/* The descriptor                                                            */
/* ======================================================================== */

typedef struct {
    moe8_arch id;
    const char *model_type;            /* config.json "model_type" */
    const char *hf_class;              /* "architectures" entry make-model writes */
    const char *moe_block;             /* MoE module of a layer ("model.layers.%lld.mlp"),
                                        * names the layer in errors */
    const char *names[MOE8_R_COUNT];   /* module name formats ("<name>.weight" etc.) */
    const char *router_bias;           /* the e_score_correction_bias tensor's name format
                                        * (minimax_m2: on the MoE block); NULL: the router's
                                        * "<router>.e_score_correction_bias" (deepseek_v3) */
    moe8_family_kinds kinds;           /* what its layers are built of (plan.h) */
    const char *stacked_gate_up;       /* MOE8_TENSORS_STACKED_EXPERTS: gate_up_proj [E][2I][H]
                                        * ("%lld" the layer), and down_proj [E][H][I] */
    const char *stacked_down;
    const char *config_nest;           /* the text model's settings under this key of
                                        * config.json ("text_config"); NULL: at the top */
    const char *skip_prefix;           /* tensors under it are not read (a vision tower),
                                        * said once in the log; NULL: none */
    int yarn;                          /* reads rope_scaling (YaRN) itself beside the MLA
                                        * families (gpt_oss) */
    /* config.json: integer keys beyond the common ones (config.c), Hugging
     * Face's defaults, then the family's own checks (booleans, refusals,
     * relations), called after every integer key was read. */
    const moe8_cfg_int *fields;
    int n_fields;
    void (*defaults)(moe8_config *c);
    moe8_status (*check)(const struct cJSON *root, const char *label, moe8_config *c, moe8_error *err);
    /* Derived fields and relations after every key was read (NULL: none). */
    moe8_status (*finish)(const char *label, moe8_config *c, moe8_error *err);
    /* make-model: a preset's config (its num_hidden_layers is the default the
     * caller's layer count replaces; a caller's smaller vocab folds the ids),
     * then the JSON files. */
    moe8_status (*preset)(moe8_preset p, moe8_config *c, moe8_error *err);
    struct cJSON *(*config_json)(const moe8_config *c, moe8_dtype dt);
    struct cJSON *(*generation_json)(const moe8_config *c);
} moe8_arch_desc;

/* The descriptor of a family (never NULL for a valid id; NULL otherwise). */
const moe8_arch_desc *moe8_arch_get(moe8_arch id);
/* The descriptor whose model_type is `s`, or NULL. */
const moe8_arch_desc *moe8_arch_find(const char *model_type);
/* "qwen3_moe, qwen2_moe, mixtral" */
const char *moe8_arch_list(void);

/* The name of layer l's e_score_correction_bias (the descriptor's router_bias,
 * else "<router>.e_score_correction_bias") into buf[n]: 0, or -1 when it
 * does not fit or the family has no router. */
int moe8_arch_router_bias_name(const moe8_arch_desc *a, int64_t l, char *buf, size_t n);

/* 1 if the family has tensors of role r. */
static inline int moe8_arch_has(const moe8_arch_desc *a, moe8_role r) {
    return a->names[r] != NULL;
}

/* Module name of role r at (layer, expert) into buf[n] ("model.layers.3.self_attn.q_proj");
 * with `suffix` non-NULL, "<module>.<suffix>". Returns 0, or -1 when the
 * family has no such role or the name does not fit. */
int moe8_arch_tensor_name(const moe8_arch_desc *a, moe8_role r, int64_t layer, int64_t expert,
                          const char *suffix, char *buf, size_t n);

/* Parse a tensor name "<module>.<suffix>" of any role of the family: 0 and
 * role, layer, expert (-1 where the role has none) and the suffix ("weight",
 * "bias", "weight_scale", ...) inside `name`; -1 if no role matches. Only the
 * canonical spelling matches ("model.layers.03" does not), layer and expert
 * are not checked against a config. */
int moe8_arch_parse(const moe8_arch_desc *a, const char *name, moe8_role *role, int64_t *layer,
                    int64_t *expert, const char **suffix);

/* 1 if layer l of c is a MoE layer (SEMANTICS §7): num_experts > 0 and, by
 * the family's layer rule (plan.h): MOE8_LAYERS_SPARSE_STEP, l not in
 * mlp_only_layers and (l + 1) % decoder_sparse_step == 0;
 * MOE8_LAYERS_FIRST_K_DENSE, l >= first_k_dense_replace and
 * l % moe_layer_freq == 0; MOE8_LAYERS_ALL_MOE, every layer.
 * moe8_config_is_moe_layer is this. */
int moe8_arch_is_moe_layer(const moe8_config *c, int64_t layer);

/* 1 if layer l of c is a Gated DeltaNet layer (a hybrid family's, plan.h
 * gdn_layers): not named "full_attention" by layer_types, or, without it,
 * (l + 1) % full_attention_interval != 0. */
int moe8_arch_is_gdn_layer(const moe8_config *c, int64_t layer);
/* layer_types (config.c), from a descriptor's check: each entry `marked` or
 * `other`, bit l of bits[] set where layer l's is `marked`; n_layer_types
 * counted. The hybrid families read ("full_attention", "linear_attention")
 * into full_layers, gpt_oss ("sliding_attention", "full_attention") into
 * sliding_layers. Then, from a hybrid's finish, the Gated DeltaNet widths
 * (linear_* keys, read from its fields table) and the layer pattern checked. */
moe8_status moe8_cfg_read_layer_types(const struct cJSON *root, const char *label, moe8_config *c,
                                      const char *marked, const char *other, uint64_t *bits,
                                      moe8_error *err);
moe8_status moe8_cfg_check_gdn(const char *label, const moe8_config *c, moe8_error *err);
/* The integer keys of the hybrid families' tables (the Gated DeltaNet widths and the
 * layer pattern, checked by moe8_cfg_check_gdn). */
#define MOE8_GDN_FIELDS                                                                  \
    {"linear_num_key_heads", 1, 1 << 16, MOE8_FAM_OFFSET(linear_num_key_heads)},        \
    {"linear_num_value_heads", 1, 1 << 16, MOE8_FAM_OFFSET(linear_num_value_heads)},    \
    {"linear_key_head_dim", 1, MOE8_CAP_HEAD_DIM, MOE8_FAM_OFFSET(linear_key_head_dim)}, \
    {"linear_value_head_dim", 1, MOE8_CAP_HEAD_DIM, MOE8_FAM_OFFSET(linear_value_head_dim)}, \
    {"linear_conv_kernel_dim", 1, 256, MOE8_FAM_OFFSET(linear_conv_kernel_dim)},        \
    {"full_attention_interval", 1, MOE8_MAX_LAYERS, MOE8_FAM_OFFSET(full_attention_interval)}

/* What the KV cache holds per position and layer: `planes` (2: K and V; 1:
 * the MLA row [normed latent (L), rotated k_pe (R)], read as K and as V)
 * x `heads` x `dim` values. Whole model (TP ranks hold their kv heads). */
typedef struct {
    int64_t planes, heads, dim;
} moe8_kv_shape;
moe8_kv_shape moe8_arch_kv_shape(const moe8_config *c);
/* Layers with a KV cache: all but a hybrid's Gated DeltaNet layers. */
int64_t moe8_arch_kv_layers(const moe8_config *c);

/* The rotary geometry of c (rope.c): width R of the rotary table (head_dim,
 * or qk_rope_head_dim with MLA); the frequency of each of its R/2 pairs,
 * theta^(-2i/R), blended by YaRN when rope_scaling is set (the ramp between
 * the correction dims of beta_fast / beta_slow, interpolated frequencies /
 * factor outside it), into freq[R/2], returning the scale of cos and sin
 * (YaRN's mscale(factor, mscale) / mscale(factor, mscale_all_dim), else 1);
 * the softmax scale of attention: 1/sqrt(head_dim), times mscale(factor,
 * mscale_all_dim)^2 with YaRN and a non-zero mscale_all_dim (DeepSeek).
 * All in double. */
int moe8_rope_dim(const moe8_config *c);
double moe8_rope_freqs(const moe8_config *c, double *freq);
float moe8_attn_scale(const moe8_config *c);

/* The fields every family derives the same way once its own are known:
 * v_head_dim = head_dim outside MLA, routed_scaling_factor 1 and
 * moe_layer_freq 1 when unset (config parsing and make-model). */
void moe8_arch_fill_derived(moe8_config *c);

/* 1 if role r occurs in layer l of c (model roles: 1): the family has it, the
 * layer is of its scope, and the config uses it (MLA: q_proj without
 * q_lora_rank, q_a_proj / q_a_layernorm / q_b_proj with it; shared expert
 * roles with a shared width). */
int moe8_arch_in_layer(const moe8_arch_desc *a, const moe8_config *c, moe8_role r, int64_t l);

/* ======================================================================== */
/* Families                                                                  */
/* ======================================================================== */

/* Hugging Face's names the families share, for a descriptor's .names: the
 * decoder skeleton (embedding, norms, lm_head, q_proj, o_proj), the k/v of
 * multi-head attention, and the "mlp." MoE block and dense MLP of the Qwen
 * and DeepSeek families (Mixtral's block is block_sparse_moe). */
#define MOE8_NAMES_DECODER                                                        \
    [MOE8_R_EMBED] = "model.embed_tokens", [MOE8_R_FINAL_NORM] = "model.norm",   \
    [MOE8_R_LM_HEAD] = "lm_head",                                                 \
    [MOE8_R_ATTN_NORM] = "model.layers.%lld.input_layernorm",                    \
    [MOE8_R_FFN_NORM] = "model.layers.%lld.post_attention_layernorm",            \
    [MOE8_R_Q] = "model.layers.%lld.self_attn.q_proj",                           \
    [MOE8_R_O] = "model.layers.%lld.self_attn.o_proj"
#define MOE8_NAMES_KV                                                             \
    [MOE8_R_K] = "model.layers.%lld.self_attn.k_proj",                           \
    [MOE8_R_V] = "model.layers.%lld.self_attn.v_proj"
#define MOE8_NAMES_MLP                                                            \
    [MOE8_R_ROUTER] = "model.layers.%lld.mlp.gate",                              \
    [MOE8_R_EXP_GATE] = "model.layers.%lld.mlp.experts.%lld.gate_proj",          \
    [MOE8_R_EXP_UP] = "model.layers.%lld.mlp.experts.%lld.up_proj",              \
    [MOE8_R_EXP_DOWN] = "model.layers.%lld.mlp.experts.%lld.down_proj",          \
    [MOE8_R_MLP_GATE] = "model.layers.%lld.mlp.gate_proj",                       \
    [MOE8_R_MLP_UP] = "model.layers.%lld.mlp.up_proj",                           \
    [MOE8_R_MLP_DOWN] = "model.layers.%lld.mlp.down_proj"

extern const moe8_arch_desc moe8_arch_qwen3_moe;
extern const moe8_arch_desc moe8_arch_qwen2_moe;
extern const moe8_arch_desc moe8_arch_mixtral;
extern const moe8_arch_desc moe8_arch_deepseek_v2;
extern const moe8_arch_desc moe8_arch_deepseek_v3;
extern const moe8_arch_desc moe8_arch_glm4_moe;
extern const moe8_arch_desc moe8_arch_minimax_m2;
/* The hybrids' shared make-model widths (tiny, slice; the caller sets vocab and
 * experts) and text config.json keys (qwen3_next.c). */
moe8_status moe8_hybrid_preset(moe8_preset p, moe8_config *c, const char *family,
                               moe8_error *err);
void moe8_hybrid_text_json(struct cJSON *j, const moe8_config *c);
/* The defaults qwen3_next and qwen3_5_moe share (qwen3_next.c). */
void moe8_hybrid_defaults(moe8_config *c);
extern const moe8_arch_desc moe8_arch_qwen3_next;
extern const moe8_arch_desc moe8_arch_qwen3_5_moe;
extern const moe8_arch_desc moe8_arch_gpt_oss;
/* rope_scaling: null, or YaRN {"type" | "rope_type": "yarn", factor,
 * original_max_position_embeddings, beta_fast, beta_slow, mscale,
 * mscale_all_dim, truncate} (deepseek.c; the modeling code's defaults 4096,
 * 32, 1, 1, 0, true). */
moe8_status moe8_cfg_read_yarn(const struct cJSON *root, const char *label, moe8_config *c,
                               moe8_error *err);
/* 1 if layer l of c attends through a sliding window (gpt_oss layer_types). */
int moe8_arch_is_sliding_layer(const moe8_config *c, int64_t layer);

#endif
