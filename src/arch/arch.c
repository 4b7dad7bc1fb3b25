/*
 * arch.c — what every family shares: the role table (where each tensor
 * occurs, its shape, storage kind and TP split), the list of families, and
 * tensor names built from or parsed against a descriptor's formats (arch.h).
 *
 * Names: a descriptor's format holds 0 ("lm_head"), 1 (layer) or 2 (layer,
 * expert) "%lld". Parsing tries every role of the family with sscanf on its
 * format and then rebuilds the name from the numbers it read, so only the
 * canonical spelling matches (sscanf alone would take " 3", "+3" or "03").
 *
 * Does not: read config.json (config.c), check tensors (load/model.c).
 */
#include <stdio.h>
#include <string.h>

#include "arch/arch.h"

/* ======================================================================== */
/* Roles                                                                     */
/* ======================================================================== */

static const moe8_role_info roles[MOE8_R_COUNT] = {
    [MOE8_R_EMBED] = {"embed_tokens", MOE8_SCOPE_MODEL, MOE8_KIND_FLOAT, MOE8_SPLIT_NONE,
                      MOE8_DIM_V, MOE8_DIM_H},
    [MOE8_R_FINAL_NORM] = {"norm", MOE8_SCOPE_MODEL, MOE8_KIND_NORM, MOE8_SPLIT_NONE, MOE8_DIM_H,
                           MOE8_DIM_NONE},
    [MOE8_R_LM_HEAD] = {"lm_head", MOE8_SCOPE_MODEL, MOE8_KIND_LM_HEAD, MOE8_SPLIT_VOCAB,
                        MOE8_DIM_V, MOE8_DIM_H},
    [MOE8_R_ATTN_NORM] = {"input_layernorm", MOE8_SCOPE_LAYER, MOE8_KIND_NORM, MOE8_SPLIT_NONE,
                          MOE8_DIM_H, MOE8_DIM_NONE},
    [MOE8_R_FFN_NORM] = {"post_attention_layernorm", MOE8_SCOPE_LAYER, MOE8_KIND_NORM,
                         MOE8_SPLIT_NONE, MOE8_DIM_H, MOE8_DIM_NONE},
    /* per head: replicated; over the whole projection: TP ranks read their heads' slice */
    [MOE8_R_Q_NORM] = {"q_norm", MOE8_SCOPE_LAYER, MOE8_KIND_NORM, MOE8_SPLIT_NONE, MOE8_DIM_QN,
                       MOE8_DIM_NONE},
    [MOE8_R_K_NORM] = {"k_norm", MOE8_SCOPE_LAYER, MOE8_KIND_NORM, MOE8_SPLIT_NONE, MOE8_DIM_KN,
                       MOE8_DIM_NONE},
    [MOE8_R_Q] = {"q_proj", MOE8_SCOPE_LAYER, MOE8_KIND_LINEAR, MOE8_SPLIT_ROWS, MOE8_DIM_QG,
                  MOE8_DIM_H},
    [MOE8_R_K] = {"k_proj", MOE8_SCOPE_LAYER, MOE8_KIND_LINEAR, MOE8_SPLIT_ROWS, MOE8_DIM_KD,
                  MOE8_DIM_H},
    [MOE8_R_V] = {"v_proj", MOE8_SCOPE_LAYER, MOE8_KIND_LINEAR, MOE8_SPLIT_ROWS, MOE8_DIM_KD,
                  MOE8_DIM_H},
    [MOE8_R_Q_A] = {"q_a_proj", MOE8_SCOPE_LAYER, MOE8_KIND_LINEAR, MOE8_SPLIT_NONE, MOE8_DIM_QL,
                    MOE8_DIM_H},
    [MOE8_R_Q_A_NORM] = {"q_a_layernorm", MOE8_SCOPE_LAYER, MOE8_KIND_NORM, MOE8_SPLIT_NONE,
                         MOE8_DIM_QL, MOE8_DIM_NONE},
    [MOE8_R_Q_B] = {"q_b_proj", MOE8_SCOPE_LAYER, MOE8_KIND_LINEAR, MOE8_SPLIT_ROWS, MOE8_DIM_QD,
                    MOE8_DIM_QL},
    [MOE8_R_KV_A] = {"kv_a_proj_with_mqa", MOE8_SCOPE_LAYER, MOE8_KIND_LINEAR, MOE8_SPLIT_NONE,
                     MOE8_DIM_KVA, MOE8_DIM_H},
    [MOE8_R_KV_A_NORM] = {"kv_a_layernorm", MOE8_SCOPE_LAYER, MOE8_KIND_NORM, MOE8_SPLIT_NONE,
                          MOE8_DIM_KVL, MOE8_DIM_NONE},
    [MOE8_R_KV_B] = {"kv_b_proj", MOE8_SCOPE_LAYER, MOE8_KIND_ABSORBED, MOE8_SPLIT_ROWS,
                     MOE8_DIM_KVB, MOE8_DIM_KVL},
    [MOE8_R_O] = {"o_proj", MOE8_SCOPE_LAYER, MOE8_KIND_LINEAR, MOE8_SPLIT_COLS, MOE8_DIM_H,
                  MOE8_DIM_OD},
    [MOE8_R_ROUTER] = {"router", MOE8_SCOPE_MOE, MOE8_KIND_FLOAT, MOE8_SPLIT_NONE, MOE8_DIM_E,
                       MOE8_DIM_H},
    [MOE8_R_EXP_GATE] = {"expert gate_proj", MOE8_SCOPE_EXPERT, MOE8_KIND_EXPERT,
                         MOE8_SPLIT_ROWS, MOE8_DIM_I, MOE8_DIM_H},
    [MOE8_R_EXP_UP] = {"expert up_proj", MOE8_SCOPE_EXPERT, MOE8_KIND_EXPERT, MOE8_SPLIT_ROWS,
                       MOE8_DIM_I, MOE8_DIM_H},
    [MOE8_R_EXP_DOWN] = {"expert down_proj", MOE8_SCOPE_EXPERT, MOE8_KIND_EXPERT,
                         MOE8_SPLIT_COLS, MOE8_DIM_H, MOE8_DIM_I},
    [MOE8_R_SHEXP_GATE] = {"shared expert gate_proj", MOE8_SCOPE_MOE, MOE8_KIND_SHARED,
                           MOE8_SPLIT_ROWS, MOE8_DIM_S, MOE8_DIM_H},
    [MOE8_R_SHEXP_UP] = {"shared expert up_proj", MOE8_SCOPE_MOE, MOE8_KIND_SHARED,
                         MOE8_SPLIT_ROWS, MOE8_DIM_S, MOE8_DIM_H},
    [MOE8_R_SHEXP_DOWN] = {"shared expert down_proj", MOE8_SCOPE_MOE, MOE8_KIND_SHARED,
                           MOE8_SPLIT_COLS, MOE8_DIM_H, MOE8_DIM_S},
    [MOE8_R_SHEXP_SCORE] = {"shared_expert_gate", MOE8_SCOPE_MOE, MOE8_KIND_FLOAT,
                            MOE8_SPLIT_NONE, MOE8_DIM_ONE, MOE8_DIM_H},
    [MOE8_R_MLP_GATE] = {"gate_proj", MOE8_SCOPE_DENSE, MOE8_KIND_LINEAR, MOE8_SPLIT_ROWS,
                         MOE8_DIM_F, MOE8_DIM_H},
    [MOE8_R_MLP_UP] = {"up_proj", MOE8_SCOPE_DENSE, MOE8_KIND_LINEAR, MOE8_SPLIT_ROWS,
                       MOE8_DIM_F, MOE8_DIM_H},
    [MOE8_R_MLP_DOWN] = {"down_proj", MOE8_SCOPE_DENSE, MOE8_KIND_LINEAR, MOE8_SPLIT_COLS,
                         MOE8_DIM_H, MOE8_DIM_F},
    /* Gated DeltaNet layers (moe8_arch_in_layer: only those); not split (TP refuses them) */
    [MOE8_R_GDN_QKVZ] = {"in_proj_qkvz", MOE8_SCOPE_LAYER, MOE8_KIND_LINEAR, MOE8_SPLIT_NONE,
                         MOE8_DIM_GQKVZ, MOE8_DIM_H},
    [MOE8_R_GDN_BA] = {"in_proj_ba", MOE8_SCOPE_LAYER, MOE8_KIND_FLOAT, MOE8_SPLIT_NONE,
                       MOE8_DIM_GBA, MOE8_DIM_H},
    [MOE8_R_GDN_QKV] = {"in_proj_qkv", MOE8_SCOPE_LAYER, MOE8_KIND_LINEAR, MOE8_SPLIT_NONE,
                        MOE8_DIM_GC, MOE8_DIM_H},
    [MOE8_R_GDN_Z] = {"in_proj_z", MOE8_SCOPE_LAYER, MOE8_KIND_LINEAR, MOE8_SPLIT_NONE,
                      MOE8_DIM_GZ, MOE8_DIM_H},
    [MOE8_R_GDN_B] = {"in_proj_b", MOE8_SCOPE_LAYER, MOE8_KIND_FLOAT, MOE8_SPLIT_NONE,
                      MOE8_DIM_GNV, MOE8_DIM_H},
    [MOE8_R_GDN_A] = {"in_proj_a", MOE8_SCOPE_LAYER, MOE8_KIND_FLOAT, MOE8_SPLIT_NONE,
                      MOE8_DIM_GNV, MOE8_DIM_H},
    [MOE8_R_GDN_CONV] = {"conv1d", MOE8_SCOPE_LAYER, MOE8_KIND_NORM, MOE8_SPLIT_NONE,
                         MOE8_DIM_GC, MOE8_DIM_NONE},
    [MOE8_R_GDN_A_LOG] = {"A_log", MOE8_SCOPE_LAYER, MOE8_KIND_NORM, MOE8_SPLIT_NONE,
                          MOE8_DIM_GNV, MOE8_DIM_NONE},
    [MOE8_R_GDN_DT_BIAS] = {"dt_bias", MOE8_SCOPE_LAYER, MOE8_KIND_NORM, MOE8_SPLIT_NONE,
                            MOE8_DIM_GNV, MOE8_DIM_NONE},
    [MOE8_R_GDN_NORM] = {"linear_attn.norm", MOE8_SCOPE_LAYER, MOE8_KIND_NORM, MOE8_SPLIT_NONE,
                         MOE8_DIM_GDV, MOE8_DIM_NONE},
    [MOE8_R_GDN_OUT] = {"out_proj", MOE8_SCOPE_LAYER, MOE8_KIND_LINEAR, MOE8_SPLIT_NONE,
                        MOE8_DIM_H, MOE8_DIM_GZ},
    [MOE8_R_SINKS] = {"sinks", MOE8_SCOPE_LAYER, MOE8_KIND_NORM, MOE8_SPLIT_ROWS, MOE8_DIM_NH,
                      MOE8_DIM_NONE},
};

const moe8_role_info *moe8_role_of(moe8_role r) {
    return (unsigned)r < MOE8_R_COUNT ? &roles[r] : NULL;
}

int64_t moe8_dim_of(const moe8_config *c, moe8_dim d) {
    const moe8_family_cfg *fc = MOE8_FAM(c);
    switch (d) {
    case MOE8_DIM_NONE: return 0;
    case MOE8_DIM_ONE: return 1;
    case MOE8_DIM_H: return c->hidden_size;
    case MOE8_DIM_V: return c->vocab_size;
    case MOE8_DIM_D: return c->head_dim;
    case MOE8_DIM_QD: return c->num_attention_heads * c->head_dim;
    case MOE8_DIM_KD: return c->num_key_value_heads * c->head_dim;
    case MOE8_DIM_E: return c->num_experts;
    case MOE8_DIM_I: return c->moe_intermediate_size;
    case MOE8_DIM_F: return c->intermediate_size;
    case MOE8_DIM_S: return fc->shared_expert_intermediate_size;
    case MOE8_DIM_OD: return c->num_attention_heads * fc->v_head_dim;
    case MOE8_DIM_QL: return fc->q_lora_rank;
    case MOE8_DIM_KVL: return fc->kv_lora_rank;
    case MOE8_DIM_KVA: return fc->kv_lora_rank + fc->qk_rope_head_dim;
    case MOE8_DIM_KVB: return c->num_attention_heads * (fc->qk_nope_head_dim + fc->v_head_dim);
    case MOE8_DIM_QG: {
        const moe8_arch_desc *a = moe8_arch_get(c->arch);
        const int gate = a && (a->kinds.attn_opts & MOE8_ATTN_OUT_GATE) && fc->attn_output_gate;
        return (gate ? 2 : 1) * c->num_attention_heads * c->head_dim;
    }
    case MOE8_DIM_GQKVZ:
        return 2 * fc->linear_num_key_heads * fc->linear_key_head_dim +
               2 * fc->linear_num_value_heads * fc->linear_value_head_dim;
    case MOE8_DIM_GBA: return 2 * fc->linear_num_value_heads;
    case MOE8_DIM_GC:
        return 2 * fc->linear_num_key_heads * fc->linear_key_head_dim +
               fc->linear_num_value_heads * fc->linear_value_head_dim;
    case MOE8_DIM_GZ: return fc->linear_num_value_heads * fc->linear_value_head_dim;
    case MOE8_DIM_GNV: return fc->linear_num_value_heads;
    case MOE8_DIM_GDV: return fc->linear_value_head_dim;
    case MOE8_DIM_NH: return c->num_attention_heads;
    case MOE8_DIM_QN:
    case MOE8_DIM_KN: {
        const moe8_arch_desc *a = moe8_arch_get(c->arch);
        if (!a || !(a->kinds.attn_opts & MOE8_ATTN_QK_NORM_WHOLE)) return c->head_dim;
        return (d == MOE8_DIM_QN ? c->num_attention_heads : c->num_key_value_heads) * c->head_dim;
    }
    }
    return 0;
}

/* ======================================================================== */
/* Families                                                                  */
/* ======================================================================== */

static const moe8_arch_desc *const families[] = {
    [MOE8_ARCH_QWEN3_MOE] = &moe8_arch_qwen3_moe,
    [MOE8_ARCH_QWEN2_MOE] = &moe8_arch_qwen2_moe,
    [MOE8_ARCH_MIXTRAL] = &moe8_arch_mixtral,
    [MOE8_ARCH_DEEPSEEK_V2] = &moe8_arch_deepseek_v2,
    [MOE8_ARCH_DEEPSEEK_V3] = &moe8_arch_deepseek_v3,
    [MOE8_ARCH_GLM4_MOE] = &moe8_arch_glm4_moe,
    [MOE8_ARCH_MINIMAX_M2] = &moe8_arch_minimax_m2,
    [MOE8_ARCH_QWEN3_NEXT] = &moe8_arch_qwen3_next,
    [MOE8_ARCH_QWEN3_5_MOE] = &moe8_arch_qwen3_5_moe,
    [MOE8_ARCH_GPT_OSS] = &moe8_arch_gpt_oss,
};
#define N_FAMILIES (sizeof families / sizeof families[0])

const moe8_arch_desc *moe8_arch_get(moe8_arch id) {
    return (unsigned)id < N_FAMILIES ? families[id] : NULL;
}

const moe8_arch_desc *moe8_arch_find(const char *model_type) {
    for (size_t i = 0; model_type && i < N_FAMILIES; i++)
        if (families[i] && !strcmp(families[i]->model_type, model_type)) return families[i];
    return NULL;
}

const char *moe8_arch_list(void) {
    static char list[256];
    if (!list[0]) {
        size_t u = 0;
        for (size_t i = 0; i < N_FAMILIES && u < sizeof list; i++)
            u += (size_t)snprintf(list + u, sizeof list - u, "%s%s", i ? ", " : "",
                                  families[i]->model_type);
    }
    return list;
}

const char *moe8_arch_name(moe8_arch a) {
    const moe8_arch_desc *d = moe8_arch_get(a);
    return d ? d->model_type : "?";
}

int moe8_arch_get_info(moe8_arch a, moe8_arch_info *out) {
    const moe8_arch_desc *d = moe8_arch_get(a);
    if (!d || !out) return -1;
    out->model_type = d->model_type;
    out->hf_class = d->hf_class;
    out->qk_norm = (d->kinds.attn_opts & MOE8_ATTN_QK_NORM_HEAD) != 0;
    out->shared_expert = d->kinds.moe == MOE8_FFN_MOE_SHARED;
    out->sparse_step = d->kinds.layers == MOE8_LAYERS_SPARSE_STEP;
    out->always_renorm = d->kinds.renorm == MOE8_RENORM_ALWAYS;
    out->mla = d->kinds.attn == MOE8_ATTN_MLA;
    out->first_k_dense = d->kinds.layers == MOE8_LAYERS_FIRST_K_DENSE;
    out->shared_gate = d->kinds.moe == MOE8_FFN_MOE_SHARED &&
                       d->kinds.shared_gate == MOE8_SHARED_SIGMOID_GATE;
    out->qk_norm_whole = (d->kinds.attn_opts & MOE8_ATTN_QK_NORM_WHOLE) != 0;
    out->qk_norm_config = !out->qk_norm && !out->qk_norm_whole && d->kinds.attn == MOE8_ATTN_GQA &&
                          moe8_arch_has(d, MOE8_R_Q_NORM);
    out->sinks = (d->kinds.attn_opts & MOE8_ATTN_SINKS) != 0;
    out->router_bias = d->kinds.router_bias;
    out->swiglu_clamped = d->kinds.act == MOE8_ACT_SWIGLU_CLAMPED;
    return 0;
}

/* ======================================================================== */
/* Names                                                                     */
/* ======================================================================== */

/* "%lld" specifiers of a format (0, 1 or 2). */
static int n_indices(const char *fmt) {
    int k = 0;
    for (const char *p = fmt; (p = strstr(p, "%lld")); p += 4) k++;
    return k;
}

int moe8_arch_tensor_name(const moe8_arch_desc *a, moe8_role r, int64_t layer, int64_t expert,
                          const char *suffix, char *buf, size_t n) {
    const char *fmt = (unsigned)r < MOE8_R_COUNT ? a->names[r] : NULL;
    int len;
    if (!fmt || !n) return -1;
    len = snprintf(buf, n, fmt, (long long)layer, (long long)expert);
    if (len < 0 || (size_t)len >= n) return -1;
    if (suffix && (size_t)snprintf(buf + len, n - (size_t)len, ".%s", suffix) >= n - (size_t)len)
        return -1;
    return 0;
}

int moe8_arch_router_bias_name(const moe8_arch_desc *a, int64_t l, char *buf, size_t n) {
    int len;
    if (!a->router_bias)
        return moe8_arch_tensor_name(a, MOE8_R_ROUTER, l, -1, "e_score_correction_bias", buf, n);
    len = snprintf(buf, n, a->router_bias, (long long)l);
    return len < 0 || (size_t)len >= n ? -1 : 0;
}

int moe8_arch_parse(const moe8_arch_desc *a, const char *name, moe8_role *role, int64_t *layer,
                    int64_t *expert, const char **suffix) {
    for (int r = 0; r < MOE8_R_COUNT; r++) {
        const char *fmt = a->names[r];
        char f[200], canon[256];
        long long l = -1, e = -1;
        int end = -1, k;
        if (!fmt || snprintf(f, sizeof f, "%s%%n", fmt) >= (int)sizeof f) continue;
        k = n_indices(fmt);
        if (k == 0) sscanf(name, f, &end);
        else if (k == 1) sscanf(name, f, &l, &end);
        else sscanf(name, f, &l, &e, &end);
        if (end <= 0 || name[end] != '.' || !name[end + 1]) continue;
        if (snprintf(canon, sizeof canon, fmt, l, e) != end || memcmp(canon, name, (size_t)end))
            continue;
        *role = (moe8_role)r;
        *layer = k >= 1 ? (int64_t)l : -1;
        *expert = k >= 2 ? (int64_t)e : -1;
        *suffix = name + end + 1;
        return 0;
    }
    return -1;
}

/* ======================================================================== */
/* Layer structure                                                           */
/* ======================================================================== */

int moe8_arch_is_gdn_layer(const moe8_config *c, int64_t l) {
    const moe8_family_cfg *fc = MOE8_FAM(c);
    const moe8_arch_desc *a = moe8_arch_get(c ? c->arch : MOE8_ARCH_COUNT);
    if (!a || !a->kinds.gdn_layers || l < 0 || l >= c->num_hidden_layers) return 0;
    if (fc->n_layer_types > 0) return !((fc->full_layers[l / 64] >> (l % 64)) & 1u);
    return fc->full_attention_interval > 0 && (l + 1) % fc->full_attention_interval != 0;
}

int moe8_arch_is_sliding_layer(const moe8_config *c, int64_t l) {
    const moe8_family_cfg *fc = MOE8_FAM(c);
    const moe8_arch_desc *a = moe8_arch_get(c ? c->arch : MOE8_ARCH_COUNT);
    if (!a || !(a->kinds.attn_opts & MOE8_ATTN_SLIDING) || l < 0 || l >= c->num_hidden_layers)
        return 0;
    return fc->sliding_window > 0 && ((fc->sliding_layers[l / 64] >> (l % 64)) & 1u);
}

/* Roles of a Gated DeltaNet layer, and those of attention it lacks. */
static int gdn_role(moe8_role r) { return r >= MOE8_R_GDN_QKVZ && r <= MOE8_R_GDN_OUT; }
static int attn_role(moe8_role r) {
    return (r >= MOE8_R_Q_NORM && r <= MOE8_R_O) || r == MOE8_R_SINKS;
}

int moe8_arch_is_moe_layer(const moe8_config *c, int64_t layer) {
    const moe8_family_cfg *fc = MOE8_FAM(c);
    const moe8_arch_desc *a = moe8_arch_get(c ? c->arch : MOE8_ARCH_COUNT);
    if (!c || !a || layer < 0 || layer >= c->num_hidden_layers || c->num_experts <= 0) return 0;
    /* a hand-made config may leave the frequency 0 */
    if (a->kinds.layers == MOE8_LAYERS_FIRST_K_DENSE)
        return layer >= fc->first_k_dense_replace &&
               layer % (fc->moe_layer_freq > 0 ? fc->moe_layer_freq : 1) == 0;
    if (a->kinds.layers == MOE8_LAYERS_ALL_MOE) return 1;
    for (int i = 0; i < c->n_mlp_only_layers; i++)
        if (c->mlp_only_layers[i] == layer) return 0;
    return (layer + 1) % c->decoder_sparse_step == 0;
}

moe8_kv_shape moe8_arch_kv_shape(const moe8_config *c) {
    const moe8_family_cfg *fc = MOE8_FAM(c);
    moe8_kv_shape k = {2, c->num_key_value_heads, c->head_dim};
    if (fc->kv_lora_rank > 0) {
        k.planes = 1;
        k.heads = 1;
        k.dim = fc->kv_lora_rank + fc->qk_rope_head_dim;
    }
    return k;
}

int64_t moe8_arch_kv_layers(const moe8_config *c) {
    int64_t n = 0;
    for (int64_t l = 0; l < c->num_hidden_layers; l++) n += !moe8_arch_is_gdn_layer(c, l);
    return n;
}

void moe8_arch_fill_derived(moe8_config *c) {
    moe8_family_cfg *fc = MOE8_FAM(c);
    if (!fc->kv_lora_rank) fc->v_head_dim = c->head_dim;
    if (!(fc->routed_scaling_factor > 0)) fc->routed_scaling_factor = 1.0;
    if (fc->moe_layer_freq < 1) fc->moe_layer_freq = 1;
}

int moe8_arch_in_layer(const moe8_arch_desc *a, const moe8_config *c, moe8_role r, int64_t l) {
    const moe8_family_cfg *fc = MOE8_FAM(c);
    const moe8_role_info *ri = moe8_role_of(r);
    if (!ri || !moe8_arch_has(a, r)) return 0;
    if (ri->scope == MOE8_SCOPE_LAYER && (gdn_role(r) || attn_role(r)) &&
        gdn_role(r) != moe8_arch_is_gdn_layer(c, l))
        return 0;
    if (a->kinds.attn == MOE8_ATTN_MLA) {
        if (r == MOE8_R_Q && fc->q_lora_rank > 0) return 0;
        if ((r == MOE8_R_Q_A || r == MOE8_R_Q_A_NORM || r == MOE8_R_Q_B) && fc->q_lora_rank <= 0)
            return 0;
    }
    if ((r == MOE8_R_Q_NORM || r == MOE8_R_K_NORM) &&
        !(a->kinds.attn_opts & (MOE8_ATTN_QK_NORM_HEAD | MOE8_ATTN_QK_NORM_WHOLE)) && !fc->qk_norm)
        return 0; /* glm4_moe without use_qk_norm */
    if ((r == MOE8_R_SHEXP_GATE || r == MOE8_R_SHEXP_UP || r == MOE8_R_SHEXP_DOWN ||
         r == MOE8_R_SHEXP_SCORE) && fc->shared_expert_intermediate_size <= 0)
        return 0;
    switch (ri->scope) {
    case MOE8_SCOPE_MODEL: return 1;
    case MOE8_SCOPE_LAYER: return 1;
    case MOE8_SCOPE_MOE:
    case MOE8_SCOPE_EXPERT: return moe8_arch_is_moe_layer(c, l);
    case MOE8_SCOPE_DENSE: return !moe8_arch_is_moe_layer(c, l);
    }
    return 0;
}
