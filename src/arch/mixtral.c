/*
 * mixtral.c — the Mixtral family (Mixtral-8x7B, Mixtral-8x22B): Hugging
 * Face's MixtralConfig / modeling_mixtral.
 *
 *   attention   q/k/v/o without biases, no q/k norm, NEOX rotary embedding
 *               (rotate_half), head_dim = hidden / heads unless given
 *   MoE         block_sparse_moe.gate [E][H]; experts
 *               block_sparse_moe.experts.N.{w1, w3, w2} = gate, up, down of
 *               width intermediate_size; softmax over all experts, top-k
 *               (num_experts_per_tok), weights divided by their sum: always
 *               renormalized (norm_topk_prob is not a Mixtral key and reads 1)
 *   layers      every layer is MoE (no dense MLP, no decoder_sparse_step)
 *   config      defaults: vocab 32000, hidden 4096, intermediate 14336, 32
 *               layers, 32 heads, 8 kv heads (null: as many as heads), max
 *               positions 131072, eps 1e-5, theta 1e6, untied, top-2, 8
 *               experts (num_local_experts), bos 1, eos 2, sliding_window
 *               null; a non-null sliding_window is refused (moe8 has no
 *               windowed attention)
 *
 * make-model presets: tiny (4 layers, H 256) and slice (Mixtral-8x7B-v0.1's
 * shapes, 2 of its 32 layers: ~2.8 GB of bf16 per layer). Its tokenizer is
 * Mistral's SentencePiece-style one (.deps/llama2-tokenizer), which the CLI
 * looks for by default.
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "arch/arch.h"
#include "core/core.h"

static const moe8_cfg_int fields[] = {
    {"intermediate_size", 1, MOE8_CAP_WIDTH, offsetof(moe8_config, moe_intermediate_size)},
    {"num_local_experts", 1, MOE8_CAP_EXPERTS, offsetof(moe8_config, num_experts)},
};

static void defaults(moe8_config *c) {
    c->vocab_size = 32000;
    c->hidden_size = 4096;
    c->moe_intermediate_size = 14336;
    c->num_hidden_layers = 32;
    c->num_attention_heads = 32;
    c->num_key_value_heads = 8;
    c->max_position_embeddings = 4096 * 32;
    c->rms_norm_eps = 1e-5;
    c->rope_theta = 1e6;
    c->num_experts_per_tok = 2;
    c->num_experts = 8;
    c->norm_topk_prob = 1;        /* always renormalized */
    c->decoder_sparse_step = 1;
    c->bos_token_id = 1;
    c->n_eos_ids = 1;
    c->eos_token_ids[0] = 2;
}

static moe8_status check(const cJSON *root, const char *label, moe8_config *c, moe8_error *err) {
    const cJSON *kv = cJSON_GetObjectItemCaseSensitive(root, "num_key_value_heads");
    if (kv && cJSON_IsNull(kv)) c->num_key_value_heads = 0;  /* = num_attention_heads */
    return moe8_cfg_refuse_non_null(root, label, "sliding_window", err);
}

/* ---- make-model ---------------------------------------------------------- */

static moe8_status preset(moe8_preset p, moe8_config *c, moe8_error *err) {
    defaults(c);
    c->head_dim = 128;            /* hidden / heads: config.json carries no head_dim */
    c->max_position_embeddings = 32768;   /* Mixtral-8x7B-v0.1's config.json */
    if (p == MOE8_PRESET_SLICE) { /* Mixtral-8x7B-v0.1: H 4096, I 14336, 32/8 heads, E 8, top-2 */
        c->num_hidden_layers = 2; /* bf16 ~6.2 GB with embed + lm_head; W8A8 ~3.4 GB */
        return MOE8_OK;
    }
    if (p != MOE8_PRESET_TINY)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "make-model: mixtral has only the tiny "
                         "and slice presets");
    c->num_hidden_layers = 4;
    c->hidden_size = 256;
    c->num_attention_heads = 8;
    c->num_key_value_heads = 2;
    c->head_dim = 32;
    c->num_experts = 8;
    c->num_experts_per_tok = 2;
    c->moe_intermediate_size = 256;
    return MOE8_OK;
}

/* config.json as Mixtral-8x7B-v0.1's (keys in its order). */
static cJSON *config_json(const moe8_config *c, moe8_dtype dt) {
    cJSON *j = cJSON_CreateObject(), *arr;
    if (!j) return NULL;
    arr = cJSON_AddArrayToObject(j, "architectures");
    cJSON_AddItemToArray(arr, cJSON_CreateString("MixtralForCausalLM"));
    cJSON_AddNumberToObject(j, "attention_dropout", 0);
    cJSON_AddNumberToObject(j, "bos_token_id", (double)c->bos_token_id);
    cJSON_AddNumberToObject(j, "eos_token_id", (double)c->eos_token_ids[0]);
    cJSON_AddStringToObject(j, "hidden_act", "silu");
    cJSON_AddNumberToObject(j, "hidden_size", (double)c->hidden_size);
    cJSON_AddNumberToObject(j, "initializer_range", 0.02);
    cJSON_AddNumberToObject(j, "intermediate_size", (double)c->moe_intermediate_size);
    cJSON_AddNumberToObject(j, "max_position_embeddings", (double)c->max_position_embeddings);
    cJSON_AddStringToObject(j, "model_type", "mixtral");
    cJSON_AddNumberToObject(j, "num_attention_heads", (double)c->num_attention_heads);
    cJSON_AddNumberToObject(j, "num_experts_per_tok", (double)c->num_experts_per_tok);
    cJSON_AddNumberToObject(j, "num_hidden_layers", (double)c->num_hidden_layers);
    cJSON_AddNumberToObject(j, "num_key_value_heads", (double)c->num_key_value_heads);
    cJSON_AddNumberToObject(j, "num_local_experts", (double)c->num_experts);
    cJSON_AddBoolToObject(j, "output_router_logits", 0);
    cJSON_AddNumberToObject(j, "rms_norm_eps", c->rms_norm_eps);
    cJSON_AddNumberToObject(j, "rope_theta", c->rope_theta);
    cJSON_AddNumberToObject(j, "router_aux_loss_coef", 0.02);
    cJSON_AddNullToObject(j, "sliding_window");
    cJSON_AddBoolToObject(j, "tie_word_embeddings", c->tie_word_embeddings);
    cJSON_AddStringToObject(j, "torch_dtype", dt == MOE8_DT_F32 ? "float32" : "bfloat16");
    cJSON_AddBoolToObject(j, "use_cache", 1);
    cJSON_AddNumberToObject(j, "vocab_size", (double)c->vocab_size);
    return j;
}

/* Mixtral-8x7B-v0.1's generation_config.json. */
static cJSON *generation_json(const moe8_config *c) {
    cJSON *j = cJSON_CreateObject();
    if (!j) return NULL;
    cJSON_AddNumberToObject(j, "bos_token_id", (double)c->bos_token_id);
    cJSON_AddNumberToObject(j, "eos_token_id", (double)c->eos_token_ids[0]);
    return j;
}

const moe8_arch_desc moe8_arch_mixtral = {
    .id = MOE8_ARCH_MIXTRAL,
    .model_type = "mixtral",
    .hf_class = "MixtralForCausalLM",
    .moe_block = "model.layers.%lld.block_sparse_moe",
    .names =
        {
            MOE8_NAMES_DECODER,
            MOE8_NAMES_KV,
            [MOE8_R_ROUTER] = "model.layers.%lld.block_sparse_moe.gate",
            [MOE8_R_EXP_GATE] = "model.layers.%lld.block_sparse_moe.experts.%lld.w1",
            [MOE8_R_EXP_UP] = "model.layers.%lld.block_sparse_moe.experts.%lld.w3",
            [MOE8_R_EXP_DOWN] = "model.layers.%lld.block_sparse_moe.experts.%lld.w2",
        },
    .kinds =
        {
            .attn = MOE8_ATTN_GQA,
            .rope = MOE8_ROPE_HALVES,
            .layers = MOE8_LAYERS_ALL_MOE,
            .moe = MOE8_FFN_MOE,
            .renorm = MOE8_RENORM_ALWAYS,
            .act = MOE8_ACT_SWIGLU,
        },
    .fields = fields,
    .n_fields = (int)(sizeof fields / sizeof fields[0]),
    .defaults = defaults,
    .check = check,
    .preset = preset,
    .config_json = config_json,
    .generation_json = generation_json,
};
