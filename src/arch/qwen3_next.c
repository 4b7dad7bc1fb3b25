/*
 * qwen3_next.c — the Qwen3-Next family (Qwen3-Next-80B-A3B-Instruct /
 * -Thinking): Hugging Face's Qwen3NextConfig / modeling_qwen3_next
 * (Qwen3NextForCausalLM). A hybrid (plan.h gdn_layers):
 *
 *   layers      Gated DeltaNet linear attention (model.layers.N.linear_attn:
 *               in_proj_qkvz grouped by key head, in_proj_ba, conv1d
 *               [C][1][K], A_log, dt_bias, norm [dv] (plain gated RMSNorm),
 *               out_proj; model/attn_gdn.c), except every
 *               full_attention_interval-th layer (or those layer_types names
 *               "full_attention"): gated GQA (q_proj per head [query D, gate
 *               D], zero-centred q/k RMSNorm per head, rotary on halves over
 *               head_dim x partial_rotary_factor dims)
 *   norms       zero-centred RMSNorm (1 + w): input / post-attention, q/k and
 *               the final norm
 *   MoE         Qwen2-MoE's: softmax router, top-k renormalized when
 *               norm_topk_prob, experts mlp.experts.N.*, a shared expert
 *               mlp.shared_expert.* behind sigmoid(mlp.shared_expert_gate);
 *               decoder_sparse_step / mlp_only_layers pick dense layers
 *   MTP         the mtp.* tensors a checkpoint carries are never read
 *   config      defaults of Qwen3NextConfig; refused: use_sliding_window,
 *               rope_scaling
 *
 * make-model presets: tiny (H 256, linear 2 key / 4 value heads of 32,
 * 16 experts) and slice (Qwen3-Next-80B-A3B's shapes: H 2048, 16 / 2 heads of
 * 256, linear 16 key / 32 value heads of 128, 512 experts top-10 of 512,
 * shared 512), 4 layers (3 linear, 1 full); more layers keep the 3:1
 * pattern. The widths and the text config.json keys are shared with
 * qwen3_5_moe.c (moe8_hybrid_preset, moe8_hybrid_text_json).
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "arch/arch.h"
#include "core/core.h"

static const moe8_cfg_int fields[] = {
    {"intermediate_size", 1, MOE8_CAP_WIDTH, offsetof(moe8_config, intermediate_size)},
    {"moe_intermediate_size", 1, MOE8_CAP_WIDTH, offsetof(moe8_config, moe_intermediate_size)},
    {"shared_expert_intermediate_size", 0, MOE8_CAP_WIDTH,
     MOE8_FAM_OFFSET(shared_expert_intermediate_size)},
    {"num_experts", 0, MOE8_CAP_EXPERTS, offsetof(moe8_config, num_experts)},
    {"decoder_sparse_step", 1, MOE8_MAX_LAYERS, offsetof(moe8_config, decoder_sparse_step)},
    MOE8_GDN_FIELDS,
};

static void defaults(moe8_config *c) {
    moe8_hybrid_defaults(c);
    c->vocab_size = 151936;
    c->intermediate_size = 5632;
    c->num_hidden_layers = 48;
    c->max_position_embeddings = 32768;
    c->rope_theta = 10000.0;
    c->num_experts_per_tok = 10;
    c->num_experts = 512;
}

static moe8_status check(const cJSON *root, const char *label, moe8_config *c, moe8_error *err) {
    moe8_family_cfg *fc = MOE8_FAM(c);
    moe8_status st;
    if ((st = moe8_cfg_refuse_true(root, label, "use_sliding_window", err)) ||
        (st = moe8_cfg_read_bool(root, label, "norm_topk_prob", &c->norm_topk_prob, err)) ||
        (st = moe8_cfg_read_pos_double(root, label, "partial_rotary_factor",
                                       &fc->partial_rotary_factor, err)) ||
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

/* ---- what qwen3_5_moe.c shares --------------------------------------------------- */

/* The Hugging Face defaults both hybrid families' configurations have. */
void moe8_hybrid_defaults(moe8_config *c) {
    moe8_family_cfg *fc = MOE8_FAM(c);
    c->hidden_size = 2048;
    c->num_attention_heads = 16;
    c->num_key_value_heads = 2;
    c->head_dim = 256;
    c->rms_norm_eps = 1e-6;
    c->decoder_sparse_step = 1;
    c->moe_intermediate_size = 512;
    c->norm_topk_prob = 1;
    fc->shared_expert_intermediate_size = 512;
    fc->partial_rotary_factor = 0.25;
    fc->linear_num_key_heads = 16;
    fc->linear_num_value_heads = 32;
    fc->linear_key_head_dim = 128;
    fc->linear_value_head_dim = 128;
    fc->linear_conv_kernel_dim = 4;
    fc->full_attention_interval = 4;
    fc->attn_output_gate = 1;
}

/* ---- make-model (shared with qwen3_5_moe.c) ---------------------------------- */

moe8_status moe8_hybrid_preset(moe8_preset p, moe8_config *c, const char *family,
                               moe8_error *err) {
    moe8_family_cfg *fc = MOE8_FAM(c);
    const int tiny = p == MOE8_PRESET_TINY;
    if (!tiny && p != MOE8_PRESET_SLICE)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "make-model: %s has the presets tiny and "
                         "slice (%d given)", family, (int)p);
    c->hidden_size = tiny ? 256 : 2048;
    c->num_attention_heads = tiny ? 8 : 16;
    c->num_key_value_heads = 2;
    c->head_dim = tiny ? 64 : 256;
    c->num_experts_per_tok = tiny ? 4 : 10;
    c->moe_intermediate_size = tiny ? 64 : 512;
    c->intermediate_size = tiny ? 512 : 5120;
    fc->shared_expert_intermediate_size = tiny ? 128 : 512;
    fc->linear_num_key_heads = tiny ? 2 : 16;
    fc->linear_num_value_heads = tiny ? 4 : 32;
    fc->linear_key_head_dim = fc->linear_value_head_dim = tiny ? 32 : 128;
    fc->linear_conv_kernel_dim = 4;
    fc->full_attention_interval = 4;
    fc->n_layer_types = 0;
    fc->attn_output_gate = 1;
    fc->partial_rotary_factor = 0.25;
    c->num_hidden_layers = 4;
    c->decoder_sparse_step = 1;
    c->norm_topk_prob = 1;
    c->max_position_embeddings = 262144;
    c->rms_norm_eps = 1e-6;
    c->rope_theta = tiny ? 10000.0 : 1e7;
    c->tie_word_embeddings = 0;
    c->bos_token_id = 151643; /* the Qwen tokenizer make-model copies */
    c->n_eos_ids = 1;
    c->eos_token_ids[0] = 151645;
    return MOE8_OK;
}

void moe8_hybrid_text_json(cJSON *j, const moe8_config *c) {
    const moe8_family_cfg *fc = MOE8_FAM(c);
    cJSON_AddBoolToObject(j, "attention_bias", 0);
    cJSON_AddNumberToObject(j, "attention_dropout", 0);
    cJSON_AddNumberToObject(j, "bos_token_id", (double)c->bos_token_id);
    cJSON_AddNumberToObject(j, "eos_token_id", (double)c->eos_token_ids[0]);
    cJSON_AddNumberToObject(j, "full_attention_interval", (double)fc->full_attention_interval);
    cJSON_AddNumberToObject(j, "head_dim", (double)c->head_dim);
    cJSON_AddStringToObject(j, "hidden_act", "silu");
    cJSON_AddNumberToObject(j, "hidden_size", (double)c->hidden_size);
    cJSON_AddNumberToObject(j, "linear_conv_kernel_dim", (double)fc->linear_conv_kernel_dim);
    cJSON_AddNumberToObject(j, "linear_key_head_dim", (double)fc->linear_key_head_dim);
    cJSON_AddNumberToObject(j, "linear_num_key_heads", (double)fc->linear_num_key_heads);
    cJSON_AddNumberToObject(j, "linear_num_value_heads", (double)fc->linear_num_value_heads);
    cJSON_AddNumberToObject(j, "linear_value_head_dim", (double)fc->linear_value_head_dim);
    cJSON_AddNumberToObject(j, "max_position_embeddings", (double)c->max_position_embeddings);
    cJSON_AddNumberToObject(j, "moe_intermediate_size", (double)c->moe_intermediate_size);
    cJSON_AddNumberToObject(j, "num_attention_heads", (double)c->num_attention_heads);
    cJSON_AddNumberToObject(j, "num_experts", (double)c->num_experts);
    cJSON_AddNumberToObject(j, "num_experts_per_tok", (double)c->num_experts_per_tok);
    cJSON_AddNumberToObject(j, "num_hidden_layers", (double)c->num_hidden_layers);
    cJSON_AddNumberToObject(j, "num_key_value_heads", (double)c->num_key_value_heads);
    cJSON_AddNumberToObject(j, "rms_norm_eps", c->rms_norm_eps);
    cJSON_AddNumberToObject(j, "shared_expert_intermediate_size",
                            (double)fc->shared_expert_intermediate_size);
    cJSON_AddBoolToObject(j, "tie_word_embeddings", c->tie_word_embeddings);
    cJSON_AddNumberToObject(j, "vocab_size", (double)c->vocab_size);
}

static moe8_status preset(moe8_preset p, moe8_config *c, moe8_error *err) {
    moe8_status st = moe8_hybrid_preset(p, c, "qwen3_next", err);
    c->vocab_size = 151936;
    c->num_experts = p == MOE8_PRESET_TINY ? 16 : 512;
    return st;
}

/* config.json as Qwen3-Next-80B-A3B's. */
static cJSON *config_json(const moe8_config *c, moe8_dtype dt) {
    const moe8_family_cfg *fc = MOE8_FAM(c);
    cJSON *j = cJSON_CreateObject(), *arr;
    if (!j) return NULL;
    arr = cJSON_AddArrayToObject(j, "architectures");
    cJSON_AddItemToArray(arr, cJSON_CreateString("Qwen3NextForCausalLM"));
    cJSON_AddStringToObject(j, "model_type", "qwen3_next");
    moe8_hybrid_text_json(j, c);
    cJSON_AddNumberToObject(j, "decoder_sparse_step", (double)c->decoder_sparse_step);
    cJSON_AddNumberToObject(j, "intermediate_size", (double)c->intermediate_size);
    arr = cJSON_AddArrayToObject(j, "mlp_only_layers");
    for (int i = 0; i < c->n_mlp_only_layers; i++)
        cJSON_AddItemToArray(arr, cJSON_CreateNumber((double)c->mlp_only_layers[i]));
    cJSON_AddBoolToObject(j, "norm_topk_prob", c->norm_topk_prob);
    cJSON_AddNumberToObject(j, "partial_rotary_factor", fc->partial_rotary_factor);
    cJSON_AddNullToObject(j, "rope_scaling");
    cJSON_AddNumberToObject(j, "rope_theta", c->rope_theta);
    cJSON_AddStringToObject(j, "torch_dtype", dt == MOE8_DT_F32 ? "float32" : "bfloat16");
    cJSON_AddBoolToObject(j, "use_sliding_window", 0);
    return j;
}

/* generation_config.json: the stop id of config.json. */
static cJSON *generation_json(const moe8_config *c) {
    cJSON *j = cJSON_CreateObject(), *eos;
    if (!j) return NULL;
    cJSON_AddNumberToObject(j, "bos_token_id", (double)c->bos_token_id);
    eos = cJSON_AddArrayToObject(j, "eos_token_id");
    for (int i = 0; i < c->n_eos_ids; i++)
        cJSON_AddItemToArray(eos, cJSON_CreateNumber((double)c->eos_token_ids[i]));
    return j;
}

#define L "model.layers.%lld."
const moe8_arch_desc moe8_arch_qwen3_next = {
    .id = MOE8_ARCH_QWEN3_NEXT,
    .model_type = "qwen3_next",
    .hf_class = "Qwen3NextForCausalLM",
    .moe_block = L "mlp",
    .names =
        {
            MOE8_NAMES_DECODER,
            MOE8_NAMES_KV,
            MOE8_NAMES_MLP,
            [MOE8_R_Q_NORM] = L "self_attn.q_norm",
            [MOE8_R_K_NORM] = L "self_attn.k_norm",
            [MOE8_R_SHEXP_GATE] = L "mlp.shared_expert.gate_proj",
            [MOE8_R_SHEXP_UP] = L "mlp.shared_expert.up_proj",
            [MOE8_R_SHEXP_DOWN] = L "mlp.shared_expert.down_proj",
            [MOE8_R_SHEXP_SCORE] = L "mlp.shared_expert_gate",
            [MOE8_R_GDN_QKVZ] = L "linear_attn.in_proj_qkvz",
            [MOE8_R_GDN_BA] = L "linear_attn.in_proj_ba",
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
            .rope = MOE8_ROPE_HALVES,         /* partial: partial_rotary_factor */
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
    .finish = finish,
    .preset = preset,
    .config_json = config_json,
    .generation_json = generation_json,
};
#undef L
