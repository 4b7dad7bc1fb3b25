/*
 * qwen3_moe.c — the Qwen3-MoE family (Qwen3-30B-A3B, Qwen3-235B-A22B):
 * Hugging Face's Qwen3MoeConfig / modeling_qwen3_moe (transformers 4.51).
 *
 *   attention   q/k/v/o without biases; per-head RMSNorm of q and k (q_norm,
 *               k_norm [head_dim]) before the NEOX rotary embedding
 *   MoE         mlp.gate [E][H], mlp.experts.N.{gate,up,down}_proj; softmax
 *               top-k, renormalized when norm_topk_prob
 *   layers      MoE unless in mlp_only_layers or (l + 1) % decoder_sparse_step
 *               != 0; dense layers mlp.{gate,up,down}_proj of intermediate_size
 *   config      defaults: vocab 151936, hidden 2048, intermediate 6144,
 *               moe_intermediate 768, 24 layers, 32 heads, 4 kv heads,
 *               head_dim = hidden / heads, 128 experts, top-8, norm_topk_prob
 *               false, sparse step 1, max positions 32768, eps 1e-6, theta
 *               10000, untied, mlp_only_layers []; attention_bias true and
 *               use_sliding_window true are refused
 *
 * make-model presets: tiny and a3b-slice = slice (Qwen3-30B-A3B shapes), both
 * 4 layers (moe8.h moe8_preset).
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "arch/arch.h"
#include "core/core.h"

#define QWEN3_VOCAB 151936
#define QWEN3_BOS 151643
#define QWEN3_EOS 151645

static const moe8_cfg_int fields[] = {
    {"intermediate_size", 1, MOE8_CAP_WIDTH, offsetof(moe8_config, intermediate_size)},
    {"moe_intermediate_size", 1, MOE8_CAP_WIDTH, offsetof(moe8_config, moe_intermediate_size)},
    {"num_experts", 0, MOE8_CAP_EXPERTS, offsetof(moe8_config, num_experts)},
    {"decoder_sparse_step", 1, MOE8_MAX_LAYERS, offsetof(moe8_config, decoder_sparse_step)},
};

static void defaults(moe8_config *c) {
    c->vocab_size = QWEN3_VOCAB;
    c->hidden_size = 2048;
    c->intermediate_size = 6144;
    c->moe_intermediate_size = 768;
    c->num_hidden_layers = 24;
    c->num_attention_heads = 32;
    c->num_key_value_heads = 4;
    c->num_experts = 128;
    c->num_experts_per_tok = 8;
    c->norm_topk_prob = 0;
    c->decoder_sparse_step = 1;
    c->max_position_embeddings = 32768;
    c->rms_norm_eps = 1e-6;
    c->rope_theta = 10000.0;
}

static moe8_status check(const cJSON *root, const char *label, moe8_config *c, moe8_error *err) {
    moe8_status st;
    if ((st = moe8_cfg_refuse_true(root, label, "attention_bias", err))) return st;
    if ((st = moe8_cfg_refuse_true(root, label, "use_sliding_window", err))) return st;
    return moe8_cfg_read_bool(root, label, "norm_topk_prob", &c->norm_topk_prob, err);
}

/* ---- make-model ---------------------------------------------------------- */

static moe8_status preset(moe8_preset p, moe8_config *c, moe8_error *err) {
    if (p == MOE8_PRESET_TINY) {
        c->hidden_size = 256;
        c->num_attention_heads = 8;
        c->num_key_value_heads = 2;
        c->head_dim = 32;
        c->num_experts = 16;
        c->num_experts_per_tok = 4;
        c->moe_intermediate_size = 128;
        c->intermediate_size = 512;
        c->n_mlp_only_layers = 1;   /* exercise the dense path too (from 2 layers) */
        c->mlp_only_layers[0] = 0;
    } else if (p == MOE8_PRESET_A3B_SLICE || p == MOE8_PRESET_SLICE) {
        c->hidden_size = 2048;
        c->num_attention_heads = 32;
        c->num_key_value_heads = 4;
        c->head_dim = 128;
        c->num_experts = 128;
        c->num_experts_per_tok = 8;
        c->moe_intermediate_size = 768;
        c->intermediate_size = 6144;
    } else {
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "make-model: unknown preset %d", (int)p);
    }
    c->num_hidden_layers = 4;
    c->vocab_size = QWEN3_VOCAB;
    c->norm_topk_prob = 1;
    c->decoder_sparse_step = 1;
    c->max_position_embeddings = 40960;
    c->rms_norm_eps = 1e-6;
    c->rope_theta = 1e6;
    c->tie_word_embeddings = 0;
    c->bos_token_id = QWEN3_BOS;
    c->n_eos_ids = 1;
    c->eos_token_ids[0] = QWEN3_EOS;
    return MOE8_OK;
}

/* config.json as Qwen3-30B-A3B's (keys in its order). */
static cJSON *config_json(const moe8_config *c, moe8_dtype dt) {
    cJSON *j = cJSON_CreateObject(), *arr;
    if (!j) return NULL;
    arr = cJSON_AddArrayToObject(j, "architectures");
    cJSON_AddItemToArray(arr, cJSON_CreateString("Qwen3MoeForCausalLM"));
    cJSON_AddBoolToObject(j, "attention_bias", 0);
    cJSON_AddNumberToObject(j, "attention_dropout", 0);
    cJSON_AddNumberToObject(j, "bos_token_id", (double)c->bos_token_id);
    cJSON_AddNumberToObject(j, "decoder_sparse_step", (double)c->decoder_sparse_step);
    cJSON_AddNumberToObject(j, "eos_token_id", (double)c->eos_token_ids[0]);
    cJSON_AddNumberToObject(j, "head_dim", (double)c->head_dim);
    cJSON_AddStringToObject(j, "hidden_act", "silu");
    cJSON_AddNumberToObject(j, "hidden_size", (double)c->hidden_size);
    cJSON_AddNumberToObject(j, "initializer_range", 0.02);
    cJSON_AddNumberToObject(j, "intermediate_size", (double)c->intermediate_size);
    cJSON_AddNumberToObject(j, "max_position_embeddings", (double)c->max_position_embeddings);
    cJSON_AddNumberToObject(j, "max_window_layers", (double)c->num_hidden_layers);
    arr = cJSON_AddArrayToObject(j, "mlp_only_layers");
    for (int i = 0; i < c->n_mlp_only_layers; i++)
        cJSON_AddItemToArray(arr, cJSON_CreateNumber((double)c->mlp_only_layers[i]));
    cJSON_AddStringToObject(j, "model_type", "qwen3_moe");
    cJSON_AddNumberToObject(j, "moe_intermediate_size", (double)c->moe_intermediate_size);
    cJSON_AddBoolToObject(j, "norm_topk_prob", c->norm_topk_prob);
    cJSON_AddNumberToObject(j, "num_attention_heads", (double)c->num_attention_heads);
    cJSON_AddNumberToObject(j, "num_experts", (double)c->num_experts);
    cJSON_AddNumberToObject(j, "num_experts_per_tok", (double)c->num_experts_per_tok);
    cJSON_AddNumberToObject(j, "num_hidden_layers", (double)c->num_hidden_layers);
    cJSON_AddNumberToObject(j, "num_key_value_heads", (double)c->num_key_value_heads);
    cJSON_AddBoolToObject(j, "output_router_logits", 0);
    cJSON_AddNumberToObject(j, "rms_norm_eps", c->rms_norm_eps);
    cJSON_AddNullToObject(j, "rope_scaling");
    cJSON_AddNumberToObject(j, "rope_theta", c->rope_theta);
    cJSON_AddNumberToObject(j, "router_aux_loss_coef", 0.001);
    cJSON_AddNullToObject(j, "sliding_window");
    cJSON_AddBoolToObject(j, "tie_word_embeddings", c->tie_word_embeddings);
    cJSON_AddStringToObject(j, "torch_dtype", dt == MOE8_DT_F32 ? "float32" : "bfloat16");
    cJSON_AddBoolToObject(j, "use_cache", 1);
    cJSON_AddBoolToObject(j, "use_sliding_window", 0);
    cJSON_AddNumberToObject(j, "vocab_size", (double)c->vocab_size);
    return j;
}

/* Qwen3's generation_config.json: eos [<|im_end|>, <|endoftext|>]. */
static cJSON *generation_json(const moe8_config *c) {
    cJSON *j = cJSON_CreateObject(), *eos;
    if (!j) return NULL;
    cJSON_AddNumberToObject(j, "bos_token_id", (double)c->bos_token_id);
    cJSON_AddBoolToObject(j, "do_sample", 1);
    eos = cJSON_AddArrayToObject(j, "eos_token_id");
    cJSON_AddItemToArray(eos, cJSON_CreateNumber((double)c->eos_token_ids[0]));
    cJSON_AddItemToArray(eos, cJSON_CreateNumber((double)c->bos_token_id));
    cJSON_AddNumberToObject(j, "pad_token_id", (double)c->bos_token_id);
    cJSON_AddNumberToObject(j, "temperature", 0.6);
    cJSON_AddNumberToObject(j, "top_k", 20);
    cJSON_AddNumberToObject(j, "top_p", 0.95);
    return j;
}

const moe8_arch_desc moe8_arch_qwen3_moe = {
    .id = MOE8_ARCH_QWEN3_MOE,
    .model_type = "qwen3_moe",
    .hf_class = "Qwen3MoeForCausalLM",
    .moe_block = "model.layers.%lld.mlp",
    .names =
        {
            MOE8_NAMES_DECODER,
            MOE8_NAMES_KV,
            MOE8_NAMES_MLP,
            [MOE8_R_Q_NORM] = "model.layers.%lld.self_attn.q_norm",
            [MOE8_R_K_NORM] = "model.layers.%lld.self_attn.k_norm",
        },
    .kinds =
        {
            .attn = MOE8_ATTN_GQA,
            .attn_opts = MOE8_ATTN_QK_NORM_HEAD,
            .rope = MOE8_ROPE_HALVES,
            .layers = MOE8_LAYERS_SPARSE_STEP,
            .moe = MOE8_FFN_MOE,
            .renorm = MOE8_RENORM_CONFIG,
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
