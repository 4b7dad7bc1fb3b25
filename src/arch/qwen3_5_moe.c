/*
 * qwen3_5_moe.c — the Qwen3.5 / Qwen3.6 MoE family (Qwen3.5-35B-A3B,
 * -122B-A10B, -397B-A17B, Qwen3.6-35B-A3B): the text model of Hugging Face's
 * Qwen3_5MoeForConditionalGeneration (configuration / modeling_qwen3_5_moe).
 * The same hybrid as qwen3_next.c (plan.h gdn_layers, zero-centred norms,
 * gated full attention, a sigmoid-gated shared expert) with:
 *
 *   config      the text model's settings under text_config (model_type
 *               qwen3_5_moe_text), rotary under its rope_parameters
 *               (rope_theta, partial_rotary_factor; the interleaved M-RoPE
 *               sections are plain rotary for text, all three position ids
 *               equal); attn_output_gate; defaults of Qwen3_5MoeTextConfig
 *   tensors     under model.language_model.; the DeltaNet projections split:
 *               in_proj_qkv [C][H] flat [q, k, v], in_proj_z, in_proj_b,
 *               in_proj_a; the experts stacked, mlp.experts.gate_up_proj
 *               [E][2I][H] and mlp.experts.down_proj [E][H][I] (FLOAT; per
 *               expert names where a checkpoint has them, as W8A8 ones do)
 *   MoE         every layer; top-k always renormalized
 *   skipped     the vision tower (model.visual.*, one log line; image inputs
 *               are not accepted anyway) and the MTP tensors (mtp.*)
 *
 * make-model presets: tiny and slice (Qwen3.6-35B-A3B's shapes: H 2048,
 * 16 / 2 heads of 256, linear 16 key / 32 value heads of 128, 256 experts
 * top-8 of 512, shared 512; vocab 248320), 4 layers keeping the 3:1
 * pattern; per-expert tensors (the loader reads both layouts).
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "arch/arch.h"
#include "core/core.h"

static const moe8_cfg_int fields[] = {
    {"moe_intermediate_size", 1, MOE8_CAP_WIDTH, offsetof(moe8_config, moe_intermediate_size)},
    {"shared_expert_intermediate_size", 0, MOE8_CAP_WIDTH,
     MOE8_FAM_OFFSET(shared_expert_intermediate_size)},
    {"num_experts", 1, MOE8_CAP_EXPERTS, offsetof(moe8_config, num_experts)},
    MOE8_GDN_FIELDS,
};

static void defaults(moe8_config *c) {
    moe8_hybrid_defaults(c);
    c->vocab_size = 248320;
    c->num_hidden_layers = 40;
    c->max_position_embeddings = 262144;
    c->rope_theta = 1e7;
    c->num_experts_per_tok = 8;
    c->num_experts = 256;
}

/* rope_parameters {rope_type "default", rope_theta, partial_rotary_factor, ...}. */
static moe8_status rope_parameters(const cJSON *root, const char *label, moe8_config *c,
                                   moe8_error *err) {
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(root, "rope_parameters");
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(r, "rope_type");
    moe8_status st;
    if (!r || cJSON_IsNull(r)) return MOE8_OK;
    if (!cJSON_IsObject(r))
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': rope_parameters must be an object",
                         label);
    if (ty && !(cJSON_IsString(ty) && !strcmp(ty->valuestring, "default")))
        return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1, "'%s': rope_parameters.rope_type other "
                         "than \"default\" not supported yet", label);
    if ((st = moe8_cfg_read_pos_double(r, label, "rope_theta", &c->rope_theta, err)) ||
        (st = moe8_cfg_read_pos_double(r, label, "partial_rotary_factor",
                                       &MOE8_FAM(c)->partial_rotary_factor, err)))
        return st;
    return MOE8_OK;
}

static moe8_status check(const cJSON *root, const char *label, moe8_config *c, moe8_error *err) {
    moe8_family_cfg *fc = MOE8_FAM(c);
    moe8_status st;
    if ((st = moe8_cfg_read_bool(root, label, "attn_output_gate", &fc->attn_output_gate, err)) ||
        (st = moe8_cfg_read_pos_double(root, label, "partial_rotary_factor",
                                       &fc->partial_rotary_factor, err)) ||
        (st = rope_parameters(root, label, c, err)) ||
        (st = moe8_cfg_read_layer_types(root, label, c, "full_attention", "linear_attention",
                                             MOE8_FAM(c)->full_layers, err)))
        return st;
    if (fc->partial_rotary_factor > 1)
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': partial_rotary_factor %g above 1", label,
                         fc->partial_rotary_factor);
    return MOE8_OK;
}

static moe8_status finish(const char *label, moe8_config *c, moe8_error *err) {
    return moe8_cfg_check_gdn(label, c, err);
}

static moe8_status preset(moe8_preset p, moe8_config *c, moe8_error *err) {
    moe8_status st = moe8_hybrid_preset(p, c, "qwen3_5_moe", err);
    c->vocab_size = p == MOE8_PRESET_TINY ? 151936 : 248320;
    c->num_experts = p == MOE8_PRESET_TINY ? 16 : 256;
    c->num_experts_per_tok = p == MOE8_PRESET_TINY ? 4 : 8;
    return st;
}

/* config.json as Qwen3.6-35B-A3B's: the text model's keys under text_config,
 * rotary under its rope_parameters (M-RoPE sections over the rotary half). */
static cJSON *config_json(const moe8_config *c, moe8_dtype dt) {
    const moe8_family_cfg *fc = MOE8_FAM(c);
    cJSON *j = cJSON_CreateObject(), *arr, *t, *r;
    const int half = moe8_rope_dim(c) / 2;
    if (!j) return NULL;
    arr = cJSON_AddArrayToObject(j, "architectures");
    cJSON_AddItemToArray(arr, cJSON_CreateString("Qwen3_5MoeForConditionalGeneration"));
    cJSON_AddStringToObject(j, "model_type", "qwen3_5_moe");
    cJSON_AddBoolToObject(j, "tie_word_embeddings", c->tie_word_embeddings);
    t = cJSON_AddObjectToObject(j, "text_config");
    cJSON_AddStringToObject(t, "model_type", "qwen3_5_moe_text");
    moe8_hybrid_text_json(t, c);
    cJSON_AddBoolToObject(t, "attn_output_gate", fc->attn_output_gate);
    cJSON_AddStringToObject(t, "dtype", dt == MOE8_DT_F32 ? "float32" : "bfloat16");
    cJSON_AddNumberToObject(t, "mtp_num_hidden_layers", 0);
    r = cJSON_AddObjectToObject(t, "rope_parameters");
    cJSON_AddBoolToObject(r, "mrope_interleaved", 1);
    arr = cJSON_AddArrayToObject(r, "mrope_section");
    cJSON_AddItemToArray(arr, cJSON_CreateNumber((half + 2) / 3));
    cJSON_AddItemToArray(arr, cJSON_CreateNumber((half + 1) / 3));
    cJSON_AddItemToArray(arr, cJSON_CreateNumber(half / 3));
    cJSON_AddStringToObject(r, "rope_type", "default");
    cJSON_AddNumberToObject(r, "rope_theta", c->rope_theta);
    cJSON_AddNumberToObject(r, "partial_rotary_factor", fc->partial_rotary_factor);
    return j;
}

static cJSON *generation_json(const moe8_config *c) {
    cJSON *j = cJSON_CreateObject(), *eos;
    if (!j) return NULL;
    cJSON_AddNumberToObject(j, "bos_token_id", (double)c->bos_token_id);
    eos = cJSON_AddArrayToObject(j, "eos_token_id");
    for (int i = 0; i < c->n_eos_ids; i++)
        cJSON_AddItemToArray(eos, cJSON_CreateNumber((double)c->eos_token_ids[i]));
    return j;
}

#define P "model.language_model."
#define L P "layers.%lld."
const moe8_arch_desc moe8_arch_qwen3_5_moe = {
    .id = MOE8_ARCH_QWEN3_5_MOE,
    .model_type = "qwen3_5_moe",
    .hf_class = "Qwen3_5MoeForConditionalGeneration",
    .moe_block = L "mlp",
    .names =
        {
            [MOE8_R_EMBED] = P "embed_tokens",
            [MOE8_R_FINAL_NORM] = P "norm",
            [MOE8_R_LM_HEAD] = "lm_head",
            [MOE8_R_ATTN_NORM] = L "input_layernorm",
            [MOE8_R_FFN_NORM] = L "post_attention_layernorm",
            [MOE8_R_Q] = L "self_attn.q_proj",
            [MOE8_R_K] = L "self_attn.k_proj",
            [MOE8_R_V] = L "self_attn.v_proj",
            [MOE8_R_O] = L "self_attn.o_proj",
            [MOE8_R_Q_NORM] = L "self_attn.q_norm",
            [MOE8_R_K_NORM] = L "self_attn.k_norm",
            [MOE8_R_ROUTER] = L "mlp.gate",
            [MOE8_R_EXP_GATE] = L "mlp.experts.%lld.gate_proj",
            [MOE8_R_EXP_UP] = L "mlp.experts.%lld.up_proj",
            [MOE8_R_EXP_DOWN] = L "mlp.experts.%lld.down_proj",
            [MOE8_R_SHEXP_GATE] = L "mlp.shared_expert.gate_proj",
            [MOE8_R_SHEXP_UP] = L "mlp.shared_expert.up_proj",
            [MOE8_R_SHEXP_DOWN] = L "mlp.shared_expert.down_proj",
            [MOE8_R_SHEXP_SCORE] = L "mlp.shared_expert_gate",
            [MOE8_R_GDN_QKV] = L "linear_attn.in_proj_qkv",
            [MOE8_R_GDN_Z] = L "linear_attn.in_proj_z",
            [MOE8_R_GDN_B] = L "linear_attn.in_proj_b",
            [MOE8_R_GDN_A] = L "linear_attn.in_proj_a",
            [MOE8_R_GDN_CONV] = L "linear_attn.conv1d",
            [MOE8_R_GDN_A_LOG] = L "linear_attn.A_log",
            [MOE8_R_GDN_DT_BIAS] = L "linear_attn.dt_bias",
            [MOE8_R_GDN_NORM] = L "linear_attn.norm",
            [MOE8_R_GDN_OUT] = L "linear_attn.out_proj",
        },
    .kinds =
        {
            .attn = MOE8_ATTN_GQA,
            .attn_opts = MOE8_ATTN_QK_NORM_HEAD | MOE8_ATTN_OUT_GATE,
            .gdn_layers = 1,
            .norm = MOE8_NORM_ZERO_CENTRED,
            .rope = MOE8_ROPE_HALVES,
            .layers = MOE8_LAYERS_ALL_MOE,
            .moe = MOE8_FFN_MOE_SHARED,
            .shared_gate = MOE8_SHARED_SIGMOID_GATE,
            .renorm = MOE8_RENORM_ALWAYS,
            .act = MOE8_ACT_SWIGLU,
            .tensors = MOE8_TENSORS_STACKED_EXPERTS,
        },
    .stacked_gate_up = L "mlp.experts.gate_up_proj",
    .stacked_down = L "mlp.experts.down_proj",
    .config_nest = "text_config",
    .skip_prefix = "model.visual.",
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
#undef P
