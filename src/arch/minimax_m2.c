/*
 * minimax_m2.c — the MiniMax-M2 family (MiniMax-M2, MiniMax-M2.5 and their
 * W8A8 checkpoints): Hugging Face's MiniMaxM2Config / modeling_minimax_m2
 * (MiniMaxM2ForCausalLM), vLLM's minimax_m2.py for the routing. Built from
 * the existing kinds (plan.h) and the whole-projection q/k norm:
 *
 *   attention   GQA without biases; q/k RMSNorm over the WHOLE projection
 *               before the head split (self_attn.q_norm [NH*D], k_norm
 *               [NKV*D]; MOE8_ATTN_QK_NORM_WHOLE: under TP the mean of
 *               squares sums over the ranks); rotary on halves (rotate_half)
 *               over the first rotary_dim dims of each head (64 of 128), the
 *               rest passed through
 *   MoE         every layer; block_sparse_moe.gate [E][H] and the block's
 *               e_score_correction_bias [E] (a buffer of the block, not of
 *               its gate); sigmoid scores, the top-k of score + bias, the
 *               weights the unbiased scores renormalized, not scaled (vLLM:
 *               grouped top-k with one group, renormalize, factor 1);
 *               block_sparse_moe.experts.N.{w1, w3, w2} = gate, up, down of
 *               width intermediate_size; no shared expert
 *   MTP         the num_mtp_modules multi-token-prediction modules
 *               (model.layers.{num_hidden_layers + i}.*) are not read
 *   config      MiniMaxM2Config's defaults (vocab 200064, hidden 3072,
 *               intermediate 1536, 62 layers, 48 heads of 128, 8 kv heads,
 *               eps 1e-6, theta 5e6, max positions 196608, top-8 of 256, bos
 *               200034, eos 200020, untied); rotary_dim absent: by
 *               partial_rotary_factor (vLLM's rotary_dim / head_dim) or the
 *               whole head, both given: they must agree; refused:
 *               scoring_func other than sigmoid, use_qk_norm false, a
 *               linear-attention layer in attn_type_list (0, as MiniMax-M1's),
 *               a shared expert (shared_intermediate_size), sliding_window,
 *               rope_scaling (config.c)
 *
 * make-model presets: tiny (H 256, 8/2 heads of 32, rotary 16, E 16 top-4,
 * 4 layers) and slice (MiniMax-M2's shapes, 2 layers: 7.2 GB of bf16 experts
 * per layer, ~17 GB with the embedding and lm_head, as GLM-4.5-Air's 4).
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "arch/arch.h"
#include "core/core.h"

#define MM_VOCAB 200064
#define MM_BOS 200034 /* ]~!b[ */
#define MM_EOS 200020 /* [e~[ */

static const moe8_cfg_int fields[] = {
    {"intermediate_size", 1, MOE8_CAP_WIDTH, offsetof(moe8_config, moe_intermediate_size)},
    {"num_local_experts", 1, MOE8_CAP_EXPERTS, offsetof(moe8_config, num_experts)},
    {"rotary_dim", 1, MOE8_CAP_HEAD_DIM, MOE8_FAM_OFFSET(rotary_dim)},
    {"num_mtp_modules", 0, 16, MOE8_FAM_OFFSET(num_nextn_predict_layers)},
};

/* The routing of every MiniMax-M2 checkpoint: sigmoid, the correction bias
 * for the selection, one group (vLLM's use_grouped_topk with
 * num_expert_group 1), factor 1. */
static void mm_routing(moe8_family_cfg *fc) {
    fc->scoring_sigmoid = 1;
    fc->e_score_bias = 1;
    fc->topk_grouped = 1;
    fc->n_group = 1;
    fc->topk_group = 1;
    fc->routed_scaling_factor = 1.0;
}

static void defaults(moe8_config *c) {
    c->vocab_size = MM_VOCAB;
    c->hidden_size = 3072;
    c->moe_intermediate_size = 1536;
    c->num_hidden_layers = 62;
    c->num_attention_heads = 48;
    c->num_key_value_heads = 8;
    c->head_dim = 128;
    c->num_experts = 256;
    c->num_experts_per_tok = 8;
    c->norm_topk_prob = 1; /* always renormalized */
    c->max_position_embeddings = 196608;
    c->rms_norm_eps = 1e-6;
    c->rope_theta = 5e6;
    c->bos_token_id = MM_BOS;
    c->n_eos_ids = 1;
    c->eos_token_ids[0] = MM_EOS;
    mm_routing(MOE8_FAM(c));
}

/* attn_type_list: 1 (softmax attention) for every layer. */
static moe8_status check_attn_types(const cJSON *root, const char *label, moe8_error *err) {
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(root, "attn_type_list"), *it;
    int i = 0;
    if (!list || cJSON_IsNull(list)) return MOE8_OK;
    if (!cJSON_IsArray(list))
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': attn_type_list: expected an array",
                         label);
    cJSON_ArrayForEach(it, list) {
        if (!cJSON_IsNumber(it) || it->valuedouble != 1)
            return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1, "'%s': attn_type_list[%d]: only "
                             "softmax attention (1) is supported (linear attention layers are "
                             "MiniMax-M1's)", label, i);
        i++;
    }
    return MOE8_OK;
}

static moe8_status check(const cJSON *root, const char *label, moe8_config *c, moe8_error *err) {
    moe8_family_cfg *fc = MOE8_FAM(c);
    const cJSON *sf = cJSON_GetObjectItemCaseSensitive(root, "scoring_func");
    const cJSON *kv = cJSON_GetObjectItemCaseSensitive(root, "num_key_value_heads");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(root, "shared_intermediate_size");
    int qk_norm = 1, bias = 1;
    moe8_status st;
    if (kv && cJSON_IsNull(kv)) c->num_key_value_heads = 0; /* = num_attention_heads */
    if (sf && !cJSON_IsNull(sf) && (!cJSON_IsString(sf) || strcmp(sf->valuestring, "sigmoid")))
        return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1, "'%s': scoring_func %s not supported "
                         "(MiniMax-M2 routes by sigmoid)", label,
                         cJSON_IsString(sf) ? sf->valuestring : "(not a string)");
    if (sh && !cJSON_IsNull(sh) && (!cJSON_IsNumber(sh) || sh->valuedouble != 0))
        return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1, "'%s': shared_intermediate_size: a "
                         "shared expert not supported for minimax_m2", label);
    if ((st = moe8_cfg_read_bool(root, label, "use_qk_norm", &qk_norm, err)) ||
        (st = moe8_cfg_read_bool(root, label, "use_routing_bias", &bias, err)) ||
        (st = moe8_cfg_read_pos_double(root, label, "partial_rotary_factor",
                                       &fc->partial_rotary_factor, err)) ||
        (st = moe8_cfg_refuse_non_null(root, label, "sliding_window", err)) ||
        (st = check_attn_types(root, label, err)))
        return st;
    if (!qk_norm)
        return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1, "'%s': use_qk_norm false not supported "
                         "(MiniMax-M2's q/k norms are part of its attention)", label);
    fc->e_score_bias = bias;
    if (fc->partial_rotary_factor > 1)
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': partial_rotary_factor %g above 1", label,
                         fc->partial_rotary_factor);
    return MOE8_OK;
}

/* rotary_dim and partial_rotary_factor, when both are given, name the same width. */
static moe8_status finish(const char *label, moe8_config *c, moe8_error *err) {
    const moe8_family_cfg *fc = MOE8_FAM(c);
    if (fc->rotary_dim > 0 && fc->partial_rotary_factor > 0 && c->head_dim > 0 &&
        (double)fc->rotary_dim != (double)c->head_dim * fc->partial_rotary_factor)
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': rotary_dim %lld disagrees with "
                         "head_dim (%lld) x partial_rotary_factor (%g)", label,
                         (long long)fc->rotary_dim, (long long)c->head_dim,
                         fc->partial_rotary_factor);
    return MOE8_OK;
}

/* ---- make-model ---------------------------------------------------------- */

static moe8_status preset(moe8_preset p, moe8_config *c, moe8_error *err) {
    moe8_family_cfg *fc = MOE8_FAM(c);
    defaults(c);
    if (p == MOE8_PRESET_TINY) {
        c->hidden_size = 256;
        c->num_attention_heads = 8;
        c->num_key_value_heads = 2;
        c->head_dim = 32;
        c->num_experts = 16;
        c->num_experts_per_tok = 4;
        c->moe_intermediate_size = 64;
        fc->rotary_dim = 16;
    } else if (p == MOE8_PRESET_SLICE) { /* MiniMax-M2 */
        fc->rotary_dim = 64;
        c->num_hidden_layers = 2;
    } else {
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "make-model: minimax_m2 has the presets "
                         "tiny and slice (%d given)", (int)p);
    }
    if (p == MOE8_PRESET_TINY) c->num_hidden_layers = 4;
    c->tie_word_embeddings = 0;
    fc->num_nextn_predict_layers = 1; /* written after the decoder's layers, skipped at load */
    return MOE8_OK;
}

/* config.json as MiniMax-M2's (keys in its order). */
static cJSON *config_json(const moe8_config *c, moe8_dtype dt) {
    const moe8_family_cfg *fc = MOE8_FAM(c);
    cJSON *j = cJSON_CreateObject(), *arr;
    if (!j) return NULL;
    arr = cJSON_AddArrayToObject(j, "architectures");
    cJSON_AddItemToArray(arr, cJSON_CreateString("MiniMaxM2ForCausalLM"));
    arr = cJSON_AddArrayToObject(j, "attn_type_list");
    for (int64_t l = 0; l < c->num_hidden_layers; l++)
        cJSON_AddItemToArray(arr, cJSON_CreateNumber(1));
    cJSON_AddNumberToObject(j, "bos_token_id", (double)c->bos_token_id);
    cJSON_AddNumberToObject(j, "eos_token_id", (double)c->eos_token_ids[0]);
    cJSON_AddNumberToObject(j, "head_dim", (double)c->head_dim);
    cJSON_AddStringToObject(j, "hidden_act", "silu");
    cJSON_AddNumberToObject(j, "hidden_size", (double)c->hidden_size);
    cJSON_AddNumberToObject(j, "intermediate_size", (double)c->moe_intermediate_size);
    cJSON_AddNumberToObject(j, "max_position_embeddings", (double)c->max_position_embeddings);
    cJSON_AddStringToObject(j, "model_type", "minimax_m2");
    cJSON_AddNumberToObject(j, "mtp_transformer_layers", 1);
    cJSON_AddNumberToObject(j, "num_attention_heads", (double)c->num_attention_heads);
    cJSON_AddNumberToObject(j, "num_experts_per_tok", (double)c->num_experts_per_tok);
    cJSON_AddNumberToObject(j, "num_hidden_layers", (double)c->num_hidden_layers);
    cJSON_AddNumberToObject(j, "num_key_value_heads", (double)c->num_key_value_heads);
    cJSON_AddNumberToObject(j, "num_local_experts", (double)c->num_experts);
    cJSON_AddNumberToObject(j, "num_mtp_modules", (double)fc->num_nextn_predict_layers);
    cJSON_AddBoolToObject(j, "output_router_logits", 0);
    cJSON_AddStringToObject(j, "qk_norm_type", "per_layer");
    cJSON_AddNumberToObject(j, "rms_norm_eps", c->rms_norm_eps);
    cJSON_AddNumberToObject(j, "rope_theta", c->rope_theta);
    cJSON_AddNumberToObject(j, "rotary_dim", (double)fc->rotary_dim);
    cJSON_AddNumberToObject(j, "router_aux_loss_coef", 0.001);
    cJSON_AddNumberToObject(j, "router_jitter_noise", 0.0);
    cJSON_AddStringToObject(j, "scoring_func", "sigmoid");
    cJSON_AddNumberToObject(j, "shared_intermediate_size", 0);
    cJSON_AddNullToObject(j, "sliding_window");
    cJSON_AddBoolToObject(j, "tie_word_embeddings", c->tie_word_embeddings);
    cJSON_AddStringToObject(j, "torch_dtype", dt == MOE8_DT_F32 ? "float32" : "bfloat16");
    cJSON_AddBoolToObject(j, "use_cache", 1);
    cJSON_AddBoolToObject(j, "use_mtp", fc->num_nextn_predict_layers > 0);
    cJSON_AddBoolToObject(j, "use_qk_norm", 1);
    cJSON_AddBoolToObject(j, "use_routing_bias", fc->e_score_bias);
    cJSON_AddNumberToObject(j, "vocab_size", (double)c->vocab_size);
    return j;
}

static cJSON *generation_json(const moe8_config *c) {
    cJSON *j = cJSON_CreateObject();
    if (!j) return NULL;
    cJSON_AddNumberToObject(j, "bos_token_id", (double)c->bos_token_id);
    cJSON_AddNumberToObject(j, "eos_token_id", (double)c->eos_token_ids[0]);
    return j;
}

const moe8_arch_desc moe8_arch_minimax_m2 = {
    .id = MOE8_ARCH_MINIMAX_M2,
    .model_type = "minimax_m2",
    .hf_class = "MiniMaxM2ForCausalLM",
    .moe_block = "model.layers.%lld.block_sparse_moe",
    .names =
        {
            MOE8_NAMES_DECODER,
            MOE8_NAMES_KV,
            [MOE8_R_Q_NORM] = "model.layers.%lld.self_attn.q_norm",
            [MOE8_R_K_NORM] = "model.layers.%lld.self_attn.k_norm",
            [MOE8_R_ROUTER] = "model.layers.%lld.block_sparse_moe.gate",
            [MOE8_R_EXP_GATE] = "model.layers.%lld.block_sparse_moe.experts.%lld.w1",
            [MOE8_R_EXP_UP] = "model.layers.%lld.block_sparse_moe.experts.%lld.w3",
            [MOE8_R_EXP_DOWN] = "model.layers.%lld.block_sparse_moe.experts.%lld.w2",
        },
    .router_bias = "model.layers.%lld.block_sparse_moe.e_score_correction_bias",
    .kinds =
        {
            .attn = MOE8_ATTN_GQA,
            .attn_opts = MOE8_ATTN_QK_NORM_WHOLE,
            .rope = MOE8_ROPE_HALVES,         /* partial: rotary_dim */
            .layers = MOE8_LAYERS_ALL_MOE,
            .moe = MOE8_FFN_MOE,
            .sigmoid_router = 1,
            .renorm = MOE8_RENORM_ALWAYS,
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
