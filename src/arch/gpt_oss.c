/*
 * gpt_oss.c — the gpt-oss family (gpt-oss-20b, gpt-oss-120b): Hugging Face's
 * GptOssConfig / modeling_gpt_oss (GptOssForCausalLM), its MXFP4 integration
 * (integrations/mxfp4.py), then vLLM's gpt_oss.py. Kinds (plan.h):
 *
 *   attention   GQA with q/k/v/o biases (attention_bias), no q/k norm;
 *               self_attn.sinks [NH]: a learned logit per head that joins
 *               each softmax's denominator (not scaled); the layers
 *               layer_types calls "sliding_attention" attend to the last
 *               sliding_window positions (128, the query's own included), the
 *               "full_attention" ones to all; rotary on halves (rotate_half)
 *               over the whole head, YaRN (factor 32, beta_fast 32, beta_slow
 *               1, original context 4096, truncate false: the correction
 *               range unrounded), softmax scale 1/sqrt(head_dim)
 *   MoE         every layer; mlp.router [E][H] with its bias [E]; the top-k
 *               logits, softmaxed among themselves (= softmax, then
 *               renormalized); experts stacked: gate_up_proj [E][H][2I]
 *               (gate at even columns, up at odd), down_proj [E][I][H], their
 *               biases gate_up_proj_bias [E][2I], down_proj_bias [E][H]; as
 *               released, MXFP4: gate_up_proj_blocks [E][2I][H/32][16] U8
 *               and _scales [E][2I][H/32] U8 (rows are outputs, gate and up
 *               interleaved), down_proj_blocks [E][H][I/32][16], _scales
 *               (load/experts_gptoss.c); a quantized folder (moe8 quantize)
 *               has per-expert mlp.experts.N.{gate,up,down}_proj with biases
 *   activation  clamped SwiGLU: gate <= limit, -limit <= up <= limit,
 *               (up + 1) gate sigmoid(1.702 gate), limit swiglu_limit (7)
 *   config      GptOssConfig's defaults (vocab 201088, hidden 2880,
 *               intermediate 2880 per expert, 36 layers, 64 heads of 64, 8 kv
 *               heads, 128 experts top-4, eps 1e-5, theta 150000, window 128,
 *               max positions 131072, the YaRN above, layer_types alternating
 *               sliding / full from layer 0, untied); eos 200002
 *               (<|return|>), pad 199999; quantization_config is not read (the
 *               tensors say how the experts are stored)
 *
 * make-model presets: tiny (H 128, 8/2 heads of 32, E 8 top-4, I 64, 4
 * layers, window 128) and slice (gpt-oss-20b's shapes, 4 of its 24 layers);
 * the experts MXFP4 as released, or bf16 stacked (make-model params).
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "arch/arch.h"
#include "core/core.h"

#define GO_VOCAB 201088
#define GO_EOS 200002 /* <|return|> */
#define GO_PAD 199999 /* <|endoftext|> */
#define GO_BOS 199998 /* <|startoftext|> */

static const moe8_cfg_int fields[] = {
    {"intermediate_size", 1, MOE8_CAP_WIDTH, offsetof(moe8_config, moe_intermediate_size)},
    {"num_local_experts", 1, MOE8_CAP_EXPERTS, offsetof(moe8_config, num_experts)},
    {"experts_per_token", 1, MOE8_CAP_EXPERTS, offsetof(moe8_config, num_experts_per_tok)},
    {"sliding_window", 1, MOE8_CAP_POSITIONS, MOE8_FAM_OFFSET(sliding_window)},
};

/* layer_types's default: sliding on even layers, full on odd ones. */
static void default_pattern(moe8_family_cfg *fc) {
    for (int i = 0; i < MOE8_MAX_LAYERS / 64; i++) fc->sliding_layers[i] = 0x5555555555555555ull;
}

static void yarn_defaults(moe8_family_cfg *fc) {
    fc->yarn_factor = 32;
    fc->yarn_beta_fast = 32;
    fc->yarn_beta_slow = 1;
    fc->yarn_mscale = 1;
    fc->yarn_mscale_all_dim = 0;
    fc->yarn_original_max_position_embeddings = 4096;
    fc->yarn_no_truncate = 1;
}

static void defaults(moe8_config *c) {
    moe8_family_cfg *fc = MOE8_FAM(c);
    c->vocab_size = GO_VOCAB;
    c->hidden_size = 2880;
    c->moe_intermediate_size = 2880;
    c->num_hidden_layers = 36;
    c->num_attention_heads = 64;
    c->num_key_value_heads = 8;
    c->head_dim = 64;
    c->num_experts = 128;
    c->num_experts_per_tok = 4;
    c->norm_topk_prob = 1; /* softmax over the top-k */
    c->max_position_embeddings = 131072;
    c->rms_norm_eps = 1e-5;
    c->rope_theta = 150000.0;
    c->bos_token_id = -1;
    c->n_eos_ids = 1;
    c->eos_token_ids[0] = GO_EOS;
    fc->qkv_bias = 1;
    fc->sliding_window = 128;
    fc->swiglu_limit = 7.0;
    fc->swiglu_alpha = 1.702;
    fc->routed_scaling_factor = 1.0;
    default_pattern(fc);
    yarn_defaults(fc);
}

static moe8_status check(const cJSON *root, const char *label, moe8_config *c, moe8_error *err) {
    moe8_family_cfg *fc = MOE8_FAM(c);
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(root, "rope_scaling");
    moe8_status st;
    if (rs && cJSON_IsNull(rs)) fc->yarn_factor = 0; /* null: plain rotary */
    if ((st = moe8_cfg_read_bool(root, label, "attention_bias", &fc->qkv_bias, err)) ||
        (st = moe8_cfg_read_pos_double(root, label, "swiglu_limit", &fc->swiglu_limit, err)) ||
        (st = moe8_cfg_read_layer_types(root, label, c, "sliding_attention", "full_attention",
                                             MOE8_FAM(c)->sliding_layers, err)))
        return st;
    if (rs && !cJSON_IsNull(rs)) {
        yarn_defaults(fc);
        if ((st = moe8_cfg_read_yarn(root, label, c, err))) return st;
    }
    return MOE8_OK;
}

static moe8_status finish(const char *label, moe8_config *c, moe8_error *err) {
    const moe8_family_cfg *fc = MOE8_FAM(c);
    if (fc->n_layer_types && fc->n_layer_types != c->num_hidden_layers)
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': layer_types has %d entries, "
                         "num_hidden_layers is %lld", label, fc->n_layer_types,
                         (long long)c->num_hidden_layers);
    if (c->hidden_size % 32 || c->moe_intermediate_size % 32)
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': hidden_size %lld and intermediate_size "
                         "%lld must be multiples of 32 (MXFP4 blocks)", label,
                         (long long)c->hidden_size, (long long)c->moe_intermediate_size);
    return MOE8_OK;
}

/* ---- make-model ---------------------------------------------------------- */

static moe8_status preset(moe8_preset p, moe8_config *c, moe8_error *err) {
    defaults(c);
    if (p == MOE8_PRESET_TINY) {
        c->hidden_size = 128;
        c->num_attention_heads = 8;
        c->num_key_value_heads = 2;
        c->head_dim = 32;
        c->num_experts = 8;
        c->num_experts_per_tok = 4;
        c->moe_intermediate_size = 64;
        c->num_hidden_layers = 4;
    } else if (p == MOE8_PRESET_SLICE) { /* gpt-oss-20b */
        c->num_experts = 32;
        c->num_hidden_layers = 4;
    } else {
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "make-model: gpt_oss has the presets "
                         "tiny and slice (%d given)", (int)p);
    }
    c->bos_token_id = GO_BOS;
    return MOE8_OK;
}

/* config.json as gpt-oss-20b's (keys in its order); quantization_config when
 * the experts are MXFP4 (dt MOE8_DT_U8 here: make-model's way of saying so). */
static cJSON *config_json(const moe8_config *c, moe8_dtype dt) {
    const moe8_family_cfg *fc = MOE8_FAM(c);
    cJSON *j = cJSON_CreateObject(), *arr, *o;
    if (!j) return NULL;
    arr = cJSON_AddArrayToObject(j, "architectures");
    cJSON_AddItemToArray(arr, cJSON_CreateString("GptOssForCausalLM"));
    cJSON_AddBoolToObject(j, "attention_bias", fc->qkv_bias);
    cJSON_AddNumberToObject(j, "attention_dropout", 0.0);
    cJSON_AddNumberToObject(j, "eos_token_id", (double)c->eos_token_ids[0]);
    cJSON_AddNumberToObject(j, "experts_per_token", (double)c->num_experts_per_tok);
    cJSON_AddNumberToObject(j, "head_dim", (double)c->head_dim);
    cJSON_AddStringToObject(j, "hidden_act", "silu");
    cJSON_AddNumberToObject(j, "hidden_size", (double)c->hidden_size);
    cJSON_AddNumberToObject(j, "initial_context_length", 4096);
    cJSON_AddNumberToObject(j, "initializer_range", 0.02);
    cJSON_AddNumberToObject(j, "intermediate_size", (double)c->moe_intermediate_size);
    arr = cJSON_AddArrayToObject(j, "layer_types");
    for (int64_t l = 0; l < c->num_hidden_layers; l++)
        cJSON_AddItemToArray(arr, cJSON_CreateString((fc->sliding_layers[l / 64] >> (l % 64)) & 1u
                                                          ? "sliding_attention"
                                                          : "full_attention"));
    cJSON_AddNumberToObject(j, "max_position_embeddings", (double)c->max_position_embeddings);
    cJSON_AddStringToObject(j, "model_type", "gpt_oss");
    cJSON_AddNumberToObject(j, "num_attention_heads", (double)c->num_attention_heads);
    cJSON_AddNumberToObject(j, "num_experts_per_tok", (double)c->num_experts_per_tok);
    cJSON_AddNumberToObject(j, "num_hidden_layers", (double)c->num_hidden_layers);
    cJSON_AddNumberToObject(j, "num_key_value_heads", (double)c->num_key_value_heads);
    cJSON_AddNumberToObject(j, "num_local_experts", (double)c->num_experts);
    cJSON_AddBoolToObject(j, "output_router_logits", 0);
    cJSON_AddNumberToObject(j, "pad_token_id", (double)(GO_PAD % c->vocab_size));
    if (dt == MOE8_DT_U8) {
        o = cJSON_AddObjectToObject(j, "quantization_config");
        arr = cJSON_AddArrayToObject(o, "modules_to_not_convert");
        cJSON_AddItemToArray(arr, cJSON_CreateString("model.layers.*.self_attn"));
        cJSON_AddItemToArray(arr, cJSON_CreateString("model.layers.*.mlp.router"));
        cJSON_AddItemToArray(arr, cJSON_CreateString("model.embed_tokens"));
        cJSON_AddItemToArray(arr, cJSON_CreateString("lm_head"));
        cJSON_AddStringToObject(o, "quant_method", "mxfp4");
    }
    cJSON_AddNumberToObject(j, "rms_norm_eps", c->rms_norm_eps);
    if (fc->yarn_factor > 0) {
        o = cJSON_AddObjectToObject(j, "rope_scaling");
        cJSON_AddNumberToObject(o, "beta_fast", fc->yarn_beta_fast);
        cJSON_AddNumberToObject(o, "beta_slow", fc->yarn_beta_slow);
        cJSON_AddNumberToObject(o, "factor", fc->yarn_factor);
        cJSON_AddNumberToObject(o, "original_max_position_embeddings",
                                (double)fc->yarn_original_max_position_embeddings);
        cJSON_AddStringToObject(o, "rope_type", "yarn");
        cJSON_AddBoolToObject(o, "truncate", !fc->yarn_no_truncate);
    } else {
        cJSON_AddNullToObject(j, "rope_scaling");
    }
    cJSON_AddNumberToObject(j, "rope_theta", c->rope_theta);
    cJSON_AddNumberToObject(j, "router_aux_loss_coef", 0.9);
    cJSON_AddNumberToObject(j, "sliding_window", (double)fc->sliding_window);
    cJSON_AddNumberToObject(j, "swiglu_limit", fc->swiglu_limit);
    cJSON_AddBoolToObject(j, "tie_word_embeddings", c->tie_word_embeddings);
    cJSON_AddStringToObject(j, "torch_dtype", dt == MOE8_DT_F32 ? "float32" : "bfloat16");
    cJSON_AddBoolToObject(j, "use_cache", 1);
    cJSON_AddNumberToObject(j, "vocab_size", (double)c->vocab_size);
    return j;
}

static cJSON *generation_json(const moe8_config *c) {
    cJSON *j = cJSON_CreateObject(), *eos;
    if (!j) return NULL;
    cJSON_AddNumberToObject(j, "bos_token_id", (double)c->bos_token_id);
    cJSON_AddBoolToObject(j, "do_sample", 1);
    eos = cJSON_AddArrayToObject(j, "eos_token_id");
    cJSON_AddItemToArray(eos, cJSON_CreateNumber((double)c->eos_token_ids[0]));
    cJSON_AddNumberToObject(j, "pad_token_id", (double)(GO_PAD % c->vocab_size));
    return j;
}

#define L "model.layers.%lld."
const moe8_arch_desc moe8_arch_gpt_oss = {
    .id = MOE8_ARCH_GPT_OSS,
    .model_type = "gpt_oss",
    .hf_class = "GptOssForCausalLM",
    .moe_block = "model.layers.%lld.mlp",
    .names =
        {
            MOE8_NAMES_DECODER,
            MOE8_NAMES_KV,
            [MOE8_R_SINKS] = L "self_attn.sinks",
            [MOE8_R_ROUTER] = L "mlp.router",
            [MOE8_R_EXP_GATE] = L "mlp.experts.%lld.gate_proj",
            [MOE8_R_EXP_UP] = L "mlp.experts.%lld.up_proj",
            [MOE8_R_EXP_DOWN] = L "mlp.experts.%lld.down_proj",
        },
    .kinds =
        {
            .attn = MOE8_ATTN_GQA,
            .attn_opts = MOE8_ATTN_O_BIAS | MOE8_ATTN_SINKS | MOE8_ATTN_SLIDING,
            .rope = MOE8_ROPE_HALVES,
            .layers = MOE8_LAYERS_ALL_MOE,
            .moe = MOE8_FFN_MOE,
            .renorm = MOE8_RENORM_ALWAYS,
            .act = MOE8_ACT_SWIGLU_CLAMPED,
            .router_bias = 1,
            .tensors = MOE8_TENSORS_GPTOSS_EXPERTS,
        },
    .stacked_gate_up = L "mlp.experts.gate_up_proj",
    .stacked_down = L "mlp.experts.down_proj",
    .yarn = 1,
    .fields = fields,
    .n_fields = (int)(sizeof fields / sizeof fields[0]),
    .defaults = defaults,
    .check = check,
    .finish = finish,
    .preset = preset,
    .config_json = config_json,
    .generation_json = generation_json,
};
#undef L
