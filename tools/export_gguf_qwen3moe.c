/*
 * export_gguf_qwen3moe.c — `moe8 export-gguf` of qwen3_moe as llama.cpp's
 * "qwen3moe" (convert_hf_to_gguf.py's Qwen3MoeModel): per-head q/k norms, no
 * biases, every layer MoE. Refused: dense layers (mlp_only_layers /
 * decoder_sparse_step) and q/k/v biases, which llama.cpp's qwen3moe has not;
 * norm_topk_prob false is warned about (qwen3moe always renormalizes).
 */
#include "export_gguf.h"

static const xg_row rows[] = {
    {"attn_norm.weight", "input_layernorm.weight", XG_NORM_H, XG_ALWAYS, XG_X_NONE},
    {"attn_q.weight", "self_attn.q_proj.weight", XG_Q, XG_ALWAYS, XG_X_NONE},
    {"attn_k.weight", "self_attn.k_proj.weight", XG_KV, XG_ALWAYS, XG_X_NONE},
    {"attn_v.weight", "self_attn.v_proj.weight", XG_KV, XG_ALWAYS, XG_X_NONE},
    {"attn_output.weight", "self_attn.o_proj.weight", XG_O, XG_ALWAYS, XG_X_NONE},
    {"attn_q_norm.weight", "self_attn.q_norm.weight", XG_NORM_D, XG_ALWAYS, XG_X_NONE},
    {"attn_k_norm.weight", "self_attn.k_norm.weight", XG_NORM_D, XG_ALWAYS, XG_X_NONE},
    {"ffn_norm.weight", "post_attention_layernorm.weight", XG_NORM_H, XG_ALWAYS, XG_X_NONE},
    {"ffn_gate_inp.weight", "mlp.gate.weight", XG_ROUTER, XG_ALWAYS, XG_X_NONE},
};

static int check(const xg_plan *p) {
    const moe8_config *c = p->cfg;
    if (xg_check_sizes(p)) return -1;
    for (int64_t l = 0; l < c->num_hidden_layers; l++)
        if (!moe8_config_is_moe_layer(c, l))
            return xg_fail("'%s/config.json': layer %lld has a dense MLP (mlp_only_layers / "
                           "decoder_sparse_step): llama.cpp's qwen3moe has MoE layers only",
                           p->dir, (long long)l);
    if (moe8_config_get_int(c, "qkv_bias", NULL))
        return xg_fail("'%s/config.json': q/k/v biases: llama.cpp's qwen3moe has none", p->dir);
    if (!c->norm_topk_prob)
        fprintf(stderr, "moe8 " CMD ": warning: norm_topk_prob is false, but llama.cpp's qwen3moe "
                        "always renormalizes the top-k weights: its outputs will differ\n");
    return 0;
}

static void hparams(xg_kvs *k, const xg_plan *p) {
    xg_common_hparams(k, p, p->cfg->head_dim, p->cfg->intermediate_size);
}

const xg_family xg_qwen3moe = {
    .model_arch = MOE8_ARCH_QWEN3_MOE,
    .arch = "qwen3moe",
    .pre = "qwen2",
    .rows = rows,
    .n_rows = (int)(sizeof rows / sizeof rows[0]),
    .expert_fmt = "mlp.experts.%lld.%s.weight",
    .exp_names = {"gate_proj", "up_proj", "down_proj"},
    .check = check,
    .hparams = hparams,
};
