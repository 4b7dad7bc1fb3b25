/*
 * export_gguf_glm4moe.c — `moe8 export-gguf` of glm4_moe (GLM-4.5 / 4.6 /
 * 4.7) as llama.cpp's "glm4moe" (convert_hf_to_gguf.py's Glm4MoeModel;
 * llama.cpp's glm4-moe model: its load_arch_tensors and graph).
 *
 * Per layer: attn_norm; attn_{q,k,v} weights and, when attention_bias, their
 * biases (o_proj has none); attn_output; attn_{q,k}_norm [head_dim] when
 * use_qk_norm (llama.cpp loads them when present); post_attention_norm (the
 * RMSNorm before the MLP: GLM's post_attention_layernorm, which llama.cpp
 * names ATTN_POST_NORM for this architecture, not ffn_norm); below
 * first_k_dense_replace the dense ffn_{gate,up,down}, from there ffn_gate_inp
 * (F32), exp_probs_b.bias (mlp.gate.e_score_correction_bias, F32), the
 * stacked experts and ffn_{gate,up,down}_shexp (width n_shared_experts x
 * moe_intermediate_size, as llama.cpp computes it).
 *
 * Keys: the common ones with rope.dimension_count = head_dim x
 * partial_rotary_factor (llama.cpp's glm4moe rotates that many leading dims
 * of each head on halves, NEOX, as Hugging Face's rotate_half),
 * expert_shared_count, leading_dense_block_count, expert_weights_scale
 * (routed_scaling_factor), expert_weights_norm (norm_topk_prob),
 * expert_gating_func sigmoid (2), and with n_group > 1 expert_group_count /
 * expert_group_used_count (topk_group), which llama.cpp's MoE reads for any
 * architecture (groups scored by the sum of their two best, as DeepSeek-V3
 * and GLM).
 *
 * The multi-token-prediction layer (num_nextn_predict_layers, model.layers.
 * {num_hidden_layers}...) is not exported: nextn_predict_layers 0 and
 * block_count the decoder's layers, which llama.cpp loads and runs as the
 * whole model (its converter writes block_count = layers + nextn and the
 * MTP tensors, which llama.cpp loads but skips in the forward: the same
 * logits). moe8 skips that layer too.
 */
#include <math.h>

#include "export_gguf.h"

static const xg_row rows[] = {
    {"attn_norm.weight", "input_layernorm.weight", XG_NORM_H, XG_ALWAYS, XG_X_NONE},
    {"attn_q.weight", "self_attn.q_proj.weight", XG_Q, XG_ALWAYS, XG_X_NONE},
    {"attn_q.bias", "self_attn.q_proj.bias", XG_BIAS_Q, XG_IF_QKV_BIAS, XG_X_NONE},
    {"attn_k.weight", "self_attn.k_proj.weight", XG_KV, XG_ALWAYS, XG_X_NONE},
    {"attn_k.bias", "self_attn.k_proj.bias", XG_BIAS_KV, XG_IF_QKV_BIAS, XG_X_NONE},
    {"attn_v.weight", "self_attn.v_proj.weight", XG_KV, XG_ALWAYS, XG_X_NONE},
    {"attn_v.bias", "self_attn.v_proj.bias", XG_BIAS_KV, XG_IF_QKV_BIAS, XG_X_NONE},
    {"attn_output.weight", "self_attn.o_proj.weight", XG_O, XG_ALWAYS, XG_X_NONE},
    {"attn_q_norm.weight", "self_attn.q_norm.weight", XG_NORM_D, XG_IF_QK_NORM, XG_X_NONE},
    {"attn_k_norm.weight", "self_attn.k_norm.weight", XG_NORM_D, XG_IF_QK_NORM, XG_X_NONE},
    {"post_attention_norm.weight", "post_attention_layernorm.weight", XG_NORM_H, XG_ALWAYS, XG_X_NONE},
    {"ffn_gate.weight", "mlp.gate_proj.weight", XG_DENSE_GU, XG_IF_DENSE, XG_X_NONE},
    {"ffn_up.weight", "mlp.up_proj.weight", XG_DENSE_GU, XG_IF_DENSE, XG_X_NONE},
    {"ffn_down.weight", "mlp.down_proj.weight", XG_DENSE_D, XG_IF_DENSE, XG_X_NONE},
    {"ffn_gate_inp.weight", "mlp.gate.weight", XG_ROUTER, XG_IF_MOE, XG_X_NONE},
    {"exp_probs_b.bias", "mlp.gate.e_score_correction_bias", XG_ROUTER_BIAS, XG_IF_MOE, XG_X_NONE},
    {"ffn_gate_shexp.weight", "mlp.shared_experts.gate_proj.weight", XG_SHARED_GU, XG_IF_SHARED, XG_X_NONE},
    {"ffn_up_shexp.weight", "mlp.shared_experts.up_proj.weight", XG_SHARED_GU, XG_IF_SHARED, XG_X_NONE},
    {"ffn_down_shexp.weight", "mlp.shared_experts.down_proj.weight", XG_SHARED_D, XG_IF_SHARED, XG_X_NONE},
};

static int check(const xg_plan *p) {
    const moe8_config *c = p->cfg;
    if (xg_check_sizes(p)) return -1;
    if (moe8_config_get_int(c, "moe_layer_freq", NULL) > 1)
        return xg_fail("'%s/config.json': moe_layer_freq %lld: llama.cpp's glm4moe has dense "
                       "layers only before first_k_dense_replace", p->dir,
                       (long long)moe8_config_get_int(c, "moe_layer_freq", NULL));
    if (moe8_config_get_int(c, "num_nextn_predict_layers", NULL) > 0)
        fprintf(stderr, "moe8 " CMD ": note: the %lld multi-token-prediction layer(s) of the "
                        "checkpoint are not exported (nextn_predict_layers 0)\n",
                (long long)moe8_config_get_int(c, "num_nextn_predict_layers", NULL));
    return 0;
}

static void hparams(xg_kvs *k, const xg_plan *p) {
    const moe8_config *c = p->cfg;
    const char *a = p->fam->arch;
    double f = moe8_config_get_num(c, "partial_rotary_factor", NULL);
    int64_t rope = f > 0 ? (int64_t)llround((double)c->head_dim * f) : c->head_dim;
    int64_t groups = moe8_config_get_int(c, "n_group", NULL);
    xg_common_hparams(k, p, rope, c->intermediate_size);
    xg_kv_au32(k, a, "expert_shared_count",
               (uint32_t)moe8_config_get_int(c, "n_shared_experts", NULL));
    xg_kv_au32(k, a, "leading_dense_block_count",
               (uint32_t)moe8_config_get_int(c, "first_k_dense_replace", NULL));
    xg_kv_af32(k, a, "expert_weights_scale",
               (float)moe8_config_get_num(c, "routed_scaling_factor", NULL));
    xg_kv_abool(k, a, "expert_weights_norm", c->norm_topk_prob);
    xg_kv_au32(k, a, "expert_gating_func", GATING_SIGMOID);
    if (groups > 1) {
        xg_kv_au32(k, a, "expert_group_count", (uint32_t)groups);
        xg_kv_au32(k, a, "expert_group_used_count",
                   (uint32_t)moe8_config_get_int(c, "topk_group", NULL));
    }
    xg_kv_au32(k, a, "nextn_predict_layers", 0);
}

const xg_family xg_glm4moe = {
    .model_arch = MOE8_ARCH_GLM4_MOE,
    .arch = "glm4moe",
    .pre = "glm4",
    .rows = rows,
    .n_rows = (int)(sizeof rows / sizeof rows[0]),
    .expert_fmt = "mlp.experts.%lld.%s.weight",
    .exp_names = {"gate_proj", "up_proj", "down_proj"},
    .check = check,
    .hparams = hparams,
};
