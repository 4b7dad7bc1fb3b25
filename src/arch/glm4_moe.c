/*
 * glm4_moe.c — the GLM-4.5 / 4.6 / 4.7 family (GLM-4.5-Air, GLM-4.5,
 * GLM-4.6, GLM-4.7): Hugging Face's Glm4MoeConfig / modeling_glm4_moe
 * (Glm4MoeForCausalLM). Built from existing kinds (plan.h):
 *
 *   attention   GQA; q/k/v biases when attention_bias (o_proj has none);
 *               per-head q/k RMSNorm (q_norm, k_norm [head_dim]) when
 *               use_qk_norm; rotary on halves (rotate_half) over the first
 *               head_dim x partial_rotary_factor dims (0.5), the rest of
 *               each head passed through
 *   MoE         mlp.gate [E][H] and mlp.gate.e_score_correction_bias [E];
 *               sigmoid scores, selection on score + bias within the
 *               topk_group best of n_group groups (a group's score: the sum
 *               of its two best), weights the unbiased scores, renormalized
 *               when norm_topk_prob, x routed_scaling_factor (DeepSeek-V3's
 *               router); mlp.experts.N.{gate,up,down}_proj; shared experts
 *               mlp.shared_experts.{gate,up,down}_proj of width
 *               n_shared_experts x moe_intermediate_size, added ungated
 *   layers      dense mlp.{gate,up,down}_proj of intermediate_size below
 *               first_k_dense_replace, MoE from there
 *   MTP         the num_nextn_predict_layers multi-token-prediction layers
 *               (model.layers.{num_hidden_layers}...) a checkpoint carries are
 *               not read (MOE8_TENSORS_SKIP_MTP)
 *   config      defaults of Glm4MoeConfig (vocab 151552, hidden 4096,
 *               intermediate 10944, moe_intermediate 1408, 46 layers, 96
 *               heads, 8 kv heads, partial_rotary_factor 0.5, eps 1e-5, theta
 *               10000, max positions 131072, top-8 of 128, n_group 1,
 *               topk_group 1, norm_topk_prob true, routed_scaling_factor 1,
 *               1 shared expert, first_k_dense_replace 1, use_qk_norm false,
 *               attention_bias false); refused: rope_scaling (config.c)
 *
 * make-model presets: tiny (every feature: biases, q/k norm, 4 groups keep
 * 2, scaling 2.5) and slice (GLM-4.5-Air's shapes, 4 layers).
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "arch/arch.h"
#include "core/core.h"

#define GLM_VOCAB 151552
#define GLM_EOS 151329  /* <|endoftext|> (also pad) */
#define GLM_USER 151336 /* <|user|> */
#define GLM_OBS 151338  /* <|observation|> */

static const moe8_cfg_int fields[] = {
    {"intermediate_size", 1, MOE8_CAP_WIDTH, offsetof(moe8_config, intermediate_size)},
    {"moe_intermediate_size", 1, MOE8_CAP_WIDTH, offsetof(moe8_config, moe_intermediate_size)},
    {"n_routed_experts", 0, MOE8_CAP_EXPERTS, offsetof(moe8_config, num_experts)},
    {"n_shared_experts", 0, 64, MOE8_FAM_OFFSET(n_shared_experts)},
    {"first_k_dense_replace", 0, MOE8_MAX_LAYERS, MOE8_FAM_OFFSET(first_k_dense_replace)},
    {"n_group", 1, MOE8_CAP_EXPERTS, MOE8_FAM_OFFSET(n_group)},
    {"topk_group", 1, MOE8_CAP_EXPERTS, MOE8_FAM_OFFSET(topk_group)},
    {"num_nextn_predict_layers", 0, 16, MOE8_FAM_OFFSET(num_nextn_predict_layers)},
};

/* The routing every GLM-4.5 checkpoint uses (noaux_tc with top-2 group sums). */
static void glm_routing(moe8_family_cfg *fc) {
    fc->scoring_sigmoid = 1;
    fc->e_score_bias = 1;
    fc->topk_grouped = 1;
    fc->group_top2 = 1;
    fc->moe_layer_freq = 1;
}

static void defaults(moe8_config *c) {
    moe8_family_cfg *fc = MOE8_FAM(c);
    c->vocab_size = GLM_VOCAB;
    c->hidden_size = 4096;
    c->intermediate_size = 10944;
    c->moe_intermediate_size = 1408;
    c->num_hidden_layers = 46;
    c->num_attention_heads = 96;
    c->num_key_value_heads = 8;
    c->num_experts = 128;
    c->num_experts_per_tok = 8;
    c->norm_topk_prob = 1;
    c->max_position_embeddings = 131072;
    c->rms_norm_eps = 1e-5;
    c->rope_theta = 10000.0;
    fc->partial_rotary_factor = 0.5;
    fc->n_group = 1;
    fc->topk_group = 1;
    fc->n_shared_experts = 1;
    fc->first_k_dense_replace = 1;
    fc->routed_scaling_factor = 1.0;
    glm_routing(fc);
}

static moe8_status check(const cJSON *root, const char *label, moe8_config *c, moe8_error *err) {
    moe8_family_cfg *fc = MOE8_FAM(c);
    moe8_status st;
    if ((st = moe8_cfg_read_bool(root, label, "attention_bias", &fc->qkv_bias, err)) ||
        (st = moe8_cfg_read_bool(root, label, "use_qk_norm", &fc->qk_norm, err)) ||
        (st = moe8_cfg_read_bool(root, label, "norm_topk_prob", &c->norm_topk_prob, err)) ||
        (st = moe8_cfg_read_pos_double(root, label, "routed_scaling_factor",
                                       &fc->routed_scaling_factor, err)) ||
        (st = moe8_cfg_read_pos_double(root, label, "partial_rotary_factor",
                                       &fc->partial_rotary_factor, err)))
        return st;
    if (fc->partial_rotary_factor > 1)
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': partial_rotary_factor %g above 1", label,
                         fc->partial_rotary_factor);
    return MOE8_OK;
}

/* After every integer key: the shared width, the groups (the rotary width:
 * config.c, once head_dim is known). */
static moe8_status finish(const char *label, moe8_config *c, moe8_error *err) {
    moe8_family_cfg *fc = MOE8_FAM(c);
    fc->shared_expert_intermediate_size = fc->n_shared_experts * c->moe_intermediate_size;
    if (fc->shared_expert_intermediate_size > MOE8_CAP_WIDTH)
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': n_shared_experts x moe_intermediate_size "
                         "(%lld x %lld) too large", label, (long long)fc->n_shared_experts,
                         (long long)c->moe_intermediate_size);
    return moe8_cfg_check_groups(label, c, err);
}

/* ---- make-model ---------------------------------------------------------- */

static moe8_status preset(moe8_preset p, moe8_config *c, moe8_error *err) {
    moe8_family_cfg *fc = MOE8_FAM(c);
    if (p == MOE8_PRESET_TINY) {
        c->hidden_size = 256;
        c->num_attention_heads = 8;
        c->num_key_value_heads = 2;
        c->head_dim = 32;
        c->num_experts = 16;
        c->num_experts_per_tok = 4;
        c->moe_intermediate_size = 64;
        c->intermediate_size = 512;
        fc->n_group = 4;
        fc->topk_group = 2;
        fc->routed_scaling_factor = 2.5;
        fc->qkv_bias = 1;
        fc->qk_norm = 1;
        c->rope_theta = 10000.0;
    } else if (p == MOE8_PRESET_SLICE) { /* GLM-4.5-Air */
        c->hidden_size = 4096;
        c->num_attention_heads = 96;
        c->num_key_value_heads = 8;
        c->head_dim = 128;
        c->num_experts = 128;
        c->num_experts_per_tok = 8;
        c->moe_intermediate_size = 1408;
        c->intermediate_size = 10944;
        fc->n_group = 1;
        fc->topk_group = 1;
        fc->routed_scaling_factor = 1.0;
        fc->qkv_bias = 1;
        fc->qk_norm = 0;
        c->rope_theta = 1e6;
    } else {
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "make-model: glm4_moe has the presets tiny "
                         "and slice (%d given)", (int)p);
    }
    c->num_hidden_layers = 4;
    c->vocab_size = GLM_VOCAB;
    c->norm_topk_prob = 1;
    c->max_position_embeddings = 131072;
    c->rms_norm_eps = 1e-5;
    c->tie_word_embeddings = 0;
    c->bos_token_id = -1;
    c->n_eos_ids = 3;
    c->eos_token_ids[0] = GLM_EOS;
    c->eos_token_ids[1] = GLM_USER;
    c->eos_token_ids[2] = GLM_OBS;
    fc->partial_rotary_factor = 0.5;
    fc->n_shared_experts = 1;
    fc->shared_expert_intermediate_size = c->moe_intermediate_size;
    fc->first_k_dense_replace = 1;
    fc->num_nextn_predict_layers = 1; /* written after the decoder's layers, skipped at load */
    glm_routing(fc);
    return MOE8_OK;
}

/* config.json as GLM-4.5-Air's (keys in its order). */
static cJSON *config_json(const moe8_config *c, moe8_dtype dt) {
    const moe8_family_cfg *fc = MOE8_FAM(c);
    cJSON *j = cJSON_CreateObject(), *arr;
    if (!j) return NULL;
    arr = cJSON_AddArrayToObject(j, "architectures");
    cJSON_AddItemToArray(arr, cJSON_CreateString("Glm4MoeForCausalLM"));
    cJSON_AddBoolToObject(j, "attention_bias", fc->qkv_bias);
    cJSON_AddNumberToObject(j, "attention_dropout", 0);
    cJSON_AddNumberToObject(j, "pad_token_id", (double)c->eos_token_ids[0]);
    arr = cJSON_AddArrayToObject(j, "eos_token_id");
    for (int i = 0; i < c->n_eos_ids; i++)
        cJSON_AddItemToArray(arr, cJSON_CreateNumber((double)c->eos_token_ids[i]));
    cJSON_AddNumberToObject(j, "head_dim", (double)c->head_dim);
    cJSON_AddStringToObject(j, "hidden_act", "silu");
    cJSON_AddNumberToObject(j, "hidden_size", (double)c->hidden_size);
    cJSON_AddNumberToObject(j, "partial_rotary_factor", fc->partial_rotary_factor);
    cJSON_AddNumberToObject(j, "initializer_range", 0.02);
    cJSON_AddNumberToObject(j, "intermediate_size", (double)c->intermediate_size);
    cJSON_AddNumberToObject(j, "max_position_embeddings", (double)c->max_position_embeddings);
    cJSON_AddStringToObject(j, "model_type", "glm4_moe");
    cJSON_AddNumberToObject(j, "moe_intermediate_size", (double)c->moe_intermediate_size);
    cJSON_AddBoolToObject(j, "norm_topk_prob", c->norm_topk_prob);
    cJSON_AddNumberToObject(j, "num_attention_heads", (double)c->num_attention_heads);
    cJSON_AddNumberToObject(j, "n_group", (double)fc->n_group);
    cJSON_AddNumberToObject(j, "topk_group", (double)fc->topk_group);
    cJSON_AddNumberToObject(j, "n_routed_experts", (double)c->num_experts);
    cJSON_AddNumberToObject(j, "n_shared_experts", (double)fc->n_shared_experts);
    cJSON_AddNumberToObject(j, "routed_scaling_factor", fc->routed_scaling_factor);
    cJSON_AddNumberToObject(j, "num_experts_per_tok", (double)c->num_experts_per_tok);
    cJSON_AddNumberToObject(j, "first_k_dense_replace", (double)fc->first_k_dense_replace);
    cJSON_AddNumberToObject(j, "num_hidden_layers", (double)c->num_hidden_layers);
    cJSON_AddNumberToObject(j, "num_key_value_heads", (double)c->num_key_value_heads);
    cJSON_AddNumberToObject(j, "rms_norm_eps", c->rms_norm_eps);
    cJSON_AddNullToObject(j, "rope_scaling");
    cJSON_AddNumberToObject(j, "rope_theta", c->rope_theta);
    cJSON_AddNumberToObject(j, "num_nextn_predict_layers", (double)fc->num_nextn_predict_layers);
    cJSON_AddBoolToObject(j, "tie_word_embeddings", c->tie_word_embeddings);
    cJSON_AddStringToObject(j, "torch_dtype", dt == MOE8_DT_F32 ? "float32" : "bfloat16");
    cJSON_AddBoolToObject(j, "use_cache", 1);
    cJSON_AddBoolToObject(j, "use_qk_norm", fc->qk_norm);
    cJSON_AddNumberToObject(j, "vocab_size", (double)c->vocab_size);
    return j;
}

/* generation_config.json: the stop ids and pad of config.json. */
static cJSON *generation_json(const moe8_config *c) {
    cJSON *j = cJSON_CreateObject(), *eos;
    if (!j) return NULL;
    eos = cJSON_AddArrayToObject(j, "eos_token_id");
    for (int i = 0; i < c->n_eos_ids; i++)
        cJSON_AddItemToArray(eos, cJSON_CreateNumber((double)c->eos_token_ids[i]));
    cJSON_AddNumberToObject(j, "pad_token_id", (double)c->eos_token_ids[0]);
    return j;
}

const moe8_arch_desc moe8_arch_glm4_moe = {
    .id = MOE8_ARCH_GLM4_MOE,
    .model_type = "glm4_moe",
    .hf_class = "Glm4MoeForCausalLM",
    .moe_block = "model.layers.%lld.mlp",
    .names =
        {
            MOE8_NAMES_DECODER,
            MOE8_NAMES_KV,
            MOE8_NAMES_MLP,
            [MOE8_R_Q_NORM] = "model.layers.%lld.self_attn.q_norm",
            [MOE8_R_K_NORM] = "model.layers.%lld.self_attn.k_norm",
            [MOE8_R_SHEXP_GATE] = "model.layers.%lld.mlp.shared_experts.gate_proj",
            [MOE8_R_SHEXP_UP] = "model.layers.%lld.mlp.shared_experts.up_proj",
            [MOE8_R_SHEXP_DOWN] = "model.layers.%lld.mlp.shared_experts.down_proj",
        },
    .kinds =
        {
            .attn = MOE8_ATTN_GQA,            /* biases and q/k norm: the config's */
            .rope = MOE8_ROPE_HALVES,         /* partial: partial_rotary_factor */
            .layers = MOE8_LAYERS_FIRST_K_DENSE,
            .moe = MOE8_FFN_MOE_SHARED,
            .shared_gate = MOE8_SHARED_SUM,
            .sigmoid_router = 1,
            .renorm = MOE8_RENORM_CONFIG,
            .act = MOE8_ACT_SWIGLU,
            .tensors = MOE8_TENSORS_SKIP_MTP,
        },
    .fields = fields,
    .n_fields = (int)(sizeof fields / sizeof fields[0]),
    .defaults = defaults,
    .check = check,
    .finish = finish,
    .preset = preset,
    .config_json = config_json,
    .generation_json = generation_json,
};
