/*
 * qwen2_moe.c — the Qwen2-MoE family (Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B):
 * Hugging Face's Qwen2MoeConfig / modeling_qwen2_moe.
 *
 *   attention   q/k/v with biases (qkv_bias, default true), o without; no q/k
 *               norm; NEOX rotary embedding; head_dim = hidden / heads unless
 *               config.json gives one
 *   MoE         mlp.gate [E][H], mlp.experts.N.{gate,up,down}_proj; softmax
 *               top-k, renormalized when norm_topk_prob (false in the released
 *               models); plus a shared expert mlp.shared_expert.{gate,up,down}_proj
 *               of width shared_expert_intermediate_size and its gate
 *               mlp.shared_expert_gate [1][H]: out += sigmoid(h . g) * shared(h)
 *   layers      MoE unless in mlp_only_layers or (l + 1) % decoder_sparse_step
 *               != 0; dense layers mlp.{gate,up,down}_proj of intermediate_size
 *   config      defaults: vocab 151936, hidden 2048, intermediate 5632, 24
 *               layers, 16 heads, 16 kv heads, max positions 32768, eps 1e-6,
 *               theta 10000, untied, sparse step 1, moe_intermediate 1408,
 *               shared 5632, top-4, 60 experts, norm_topk_prob false,
 *               mlp_only_layers []; use_sliding_window true is refused (the
 *               window is then unused, as in Hugging Face)
 *
 * make-model preset: tiny.
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "arch/arch.h"
#include "core/core.h"

#define QWEN_VOCAB 151936
#define QWEN_ENDOFTEXT 151643
#define QWEN_IM_END 151645

static const moe8_cfg_int fields[] = {
    {"intermediate_size", 1, MOE8_CAP_WIDTH, offsetof(moe8_config, intermediate_size)},
    {"moe_intermediate_size", 1, MOE8_CAP_WIDTH, offsetof(moe8_config, moe_intermediate_size)},
    {"shared_expert_intermediate_size", 1, MOE8_CAP_WIDTH,
     MOE8_FAM_OFFSET(shared_expert_intermediate_size)},
    {"num_experts", 0, MOE8_CAP_EXPERTS, offsetof(moe8_config, num_experts)},
    {"decoder_sparse_step", 1, MOE8_MAX_LAYERS, offsetof(moe8_config, decoder_sparse_step)},
};

static void defaults(moe8_config *c) {
    moe8_family_cfg *fc = MOE8_FAM(c);
    c->vocab_size = QWEN_VOCAB;
    c->hidden_size = 2048;
    c->intermediate_size = 5632;
    c->num_hidden_layers = 24;
    c->num_attention_heads = 16;
    c->num_key_value_heads = 16;
    c->max_position_embeddings = 32768;
    c->rms_norm_eps = 1e-6;
    c->rope_theta = 10000.0;
    c->decoder_sparse_step = 1;
    c->moe_intermediate_size = 1408;
    fc->shared_expert_intermediate_size = 5632;
    c->num_experts_per_tok = 4;
    c->num_experts = 60;
    c->norm_topk_prob = 0;
    fc->qkv_bias = 1;
}

static moe8_status check(const cJSON *root, const char *label, moe8_config *c, moe8_error *err) {
    moe8_status st;
    if ((st = moe8_cfg_refuse_true(root, label, "use_sliding_window", err))) return st;
    if ((st = moe8_cfg_read_bool(root, label, "qkv_bias", &MOE8_FAM(c)->qkv_bias, err))) return st;
    return moe8_cfg_read_bool(root, label, "norm_topk_prob", &c->norm_topk_prob, err);
}

/* ---- make-model ---------------------------------------------------------- */

static moe8_status preset(moe8_preset p, moe8_config *c, moe8_error *err) {
    moe8_family_cfg *fc = MOE8_FAM(c);
    if (p != MOE8_PRESET_TINY)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "make-model: qwen2_moe has only the tiny "
                         "preset");
    c->hidden_size = 256;
    c->num_attention_heads = 8;
    c->num_key_value_heads = 2;
    c->head_dim = 32;             /* hidden / heads: config.json carries no head_dim */
    c->num_experts = 16;
    c->num_experts_per_tok = 4;
    c->moe_intermediate_size = 64;
    fc->shared_expert_intermediate_size = 256;
    c->intermediate_size = 512;
    c->n_mlp_only_layers = 1;     /* exercise the dense path too (from 2 layers) */
    c->mlp_only_layers[0] = 0;
    c->vocab_size = QWEN_VOCAB;
    c->norm_topk_prob = 0;        /* as the released models */
    fc->qkv_bias = 1;
    c->decoder_sparse_step = 1;
    c->max_position_embeddings = 8192;
    c->rms_norm_eps = 1e-6;
    c->rope_theta = 1e6;
    c->bos_token_id = QWEN_ENDOFTEXT;
    c->n_eos_ids = 1;
    c->eos_token_ids[0] = QWEN_IM_END;
    return MOE8_OK;
}

/* config.json as Qwen1.5-MoE-A2.7B-Chat's (keys in its order). */
static cJSON *config_json(const moe8_config *c, moe8_dtype dt) {
    const moe8_family_cfg *fc = MOE8_FAM(c);
    cJSON *j = cJSON_CreateObject(), *arr;
    if (!j) return NULL;
    arr = cJSON_AddArrayToObject(j, "architectures");
    cJSON_AddItemToArray(arr, cJSON_CreateString("Qwen2MoeForCausalLM"));
    cJSON_AddNumberToObject(j, "attention_dropout", 0);
    cJSON_AddNumberToObject(j, "bos_token_id", (double)c->bos_token_id);
    cJSON_AddNumberToObject(j, "decoder_sparse_step", (double)c->decoder_sparse_step);
    cJSON_AddNumberToObject(j, "eos_token_id", (double)c->eos_token_ids[0]);
    cJSON_AddStringToObject(j, "hidden_act", "silu");
    cJSON_AddNumberToObject(j, "hidden_size", (double)c->hidden_size);
    cJSON_AddNumberToObject(j, "initializer_range", 0.02);
    cJSON_AddNumberToObject(j, "intermediate_size", (double)c->intermediate_size);
    cJSON_AddNumberToObject(j, "max_position_embeddings", (double)c->max_position_embeddings);
    cJSON_AddNumberToObject(j, "max_window_layers", (double)c->num_hidden_layers);
    arr = cJSON_AddArrayToObject(j, "mlp_only_layers");
    for (int i = 0; i < c->n_mlp_only_layers; i++)
        cJSON_AddItemToArray(arr, cJSON_CreateNumber((double)c->mlp_only_layers[i]));
    cJSON_AddStringToObject(j, "model_type", "qwen2_moe");
    cJSON_AddNumberToObject(j, "moe_intermediate_size", (double)c->moe_intermediate_size);
    cJSON_AddBoolToObject(j, "norm_topk_prob", c->norm_topk_prob);
    cJSON_AddNumberToObject(j, "num_attention_heads", (double)c->num_attention_heads);
    cJSON_AddNumberToObject(j, "num_experts", (double)c->num_experts);
    cJSON_AddNumberToObject(j, "num_experts_per_tok", (double)c->num_experts_per_tok);
    cJSON_AddNumberToObject(j, "num_hidden_layers", (double)c->num_hidden_layers);
    cJSON_AddNumberToObject(j, "num_key_value_heads", (double)c->num_key_value_heads);
    cJSON_AddBoolToObject(j, "output_router_logits", 0);
    cJSON_AddBoolToObject(j, "qkv_bias", fc->qkv_bias);
    cJSON_AddNumberToObject(j, "rms_norm_eps", c->rms_norm_eps);
    cJSON_AddNumberToObject(j, "rope_theta", c->rope_theta);
    cJSON_AddNumberToObject(j, "router_aux_loss_coef", 0.001);
    cJSON_AddNumberToObject(j, "shared_expert_intermediate_size",
                            (double)fc->shared_expert_intermediate_size);
    cJSON_AddNumberToObject(j, "sliding_window", (double)c->max_position_embeddings);
    cJSON_AddBoolToObject(j, "tie_word_embeddings", c->tie_word_embeddings);
    cJSON_AddStringToObject(j, "torch_dtype", dt == MOE8_DT_F32 ? "float32" : "bfloat16");
    cJSON_AddBoolToObject(j, "use_cache", 1);
    cJSON_AddBoolToObject(j, "use_sliding_window", 0);
    cJSON_AddNumberToObject(j, "vocab_size", (double)c->vocab_size);
    return j;
}

/* Qwen1.5-MoE-A2.7B-Chat's generation_config.json: eos [<|im_end|>, <|endoftext|>]. */
static cJSON *generation_json(const moe8_config *c) {
    cJSON *j = cJSON_CreateObject(), *eos;
    if (!j) return NULL;
    cJSON_AddNumberToObject(j, "bos_token_id", (double)c->bos_token_id);
    cJSON_AddBoolToObject(j, "do_sample", 1);
    eos = cJSON_AddArrayToObject(j, "eos_token_id");
    cJSON_AddItemToArray(eos, cJSON_CreateNumber((double)c->eos_token_ids[0]));
    cJSON_AddItemToArray(eos, cJSON_CreateNumber((double)c->bos_token_id));
    cJSON_AddNumberToObject(j, "pad_token_id", (double)c->bos_token_id);
    cJSON_AddNumberToObject(j, "repetition_penalty", 1.05);
    cJSON_AddNumberToObject(j, "temperature", 0.7);
    cJSON_AddNumberToObject(j, "top_k", 20);
    cJSON_AddNumberToObject(j, "top_p", 0.8);
    return j;
}

const moe8_arch_desc moe8_arch_qwen2_moe = {
    .id = MOE8_ARCH_QWEN2_MOE,
    .model_type = "qwen2_moe",
    .hf_class = "Qwen2MoeForCausalLM",
    .moe_block = "model.layers.%lld.mlp",
    .names =
        {
            MOE8_NAMES_DECODER,
            MOE8_NAMES_KV,
            MOE8_NAMES_MLP,
            [MOE8_R_SHEXP_GATE] = "model.layers.%lld.mlp.shared_expert.gate_proj",
            [MOE8_R_SHEXP_UP] = "model.layers.%lld.mlp.shared_expert.up_proj",
            [MOE8_R_SHEXP_DOWN] = "model.layers.%lld.mlp.shared_expert.down_proj",
            [MOE8_R_SHEXP_SCORE] = "model.layers.%lld.mlp.shared_expert_gate",
        },
    .kinds =
        {
            .attn = MOE8_ATTN_GQA,            /* q/k/v biases: the config's qkv_bias */
            .rope = MOE8_ROPE_HALVES,
            .layers = MOE8_LAYERS_SPARSE_STEP,
            .moe = MOE8_FFN_MOE_SHARED,
            .shared_gate = MOE8_SHARED_SIGMOID_GATE,
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
