/*
 * export_gguf_minimax_m2.c — `moe8 export-gguf` of minimax_m2 (MiniMax-M2 /
 * M2.1 / M2.5) as llama.cpp's "minimax-m2" (convert_hf_to_gguf.py's
 * MiniMaxM2Model): NOT ENABLED YET. The mapping is written down here so that
 * the family can be enabled when moe8 runs it: set .model_arch to
 * MOE8_ARCH_MINIMAX_M2, check the config accessor names below against the
 * family's descriptor, and add test cases (tests/test_export_gguf.c) and a
 * logits cross-check (docs/BENCHMARKS.md) before relying on it. Until then
 * .model_arch is MOE8_ARCH_COUNT, which no config has: the command refuses
 * minimax_m2 as any family it does not export.
 *
 * Per layer: attn_norm; attn_{q,k,v,output} (no biases); attn_q_norm
 * [heads x head_dim] and attn_k_norm [kv heads x head_dim]: RMSNorm over the
 * whole projection, before the head split; ffn_norm (post_attention_layernorm);
 * ffn_gate_inp (block_sparse_moe.gate, F32); exp_probs_b.bias
 * (block_sparse_moe.e_score_correction_bias, which the converter renames to
 * e_score_correction.bias); the experts block_sparse_moe.experts.N.w1 (gate),
 * w3 (up), w2 (down) stacked into ffn_{gate,up,down}_exps. Every layer is MoE,
 * no shared expert.
 * Keys: the common ones with expert_feed_forward_length = intermediate_size
 * (moe8's moe_intermediate_size), rope.dimension_count = rotary_dim (64 of
 * head_dim 128), expert_gating_func sigmoid (2). The MTP modules are not
 * exported.
 */
#include "export_gguf.h"

static const xg_row rows[] = {
    {"attn_norm.weight", "input_layernorm.weight", XG_NORM_H, XG_ALWAYS},
    {"attn_q.weight", "self_attn.q_proj.weight", XG_Q, XG_ALWAYS},
    {"attn_k.weight", "self_attn.k_proj.weight", XG_KV, XG_ALWAYS},
    {"attn_v.weight", "self_attn.v_proj.weight", XG_KV, XG_ALWAYS},
    {"attn_output.weight", "self_attn.o_proj.weight", XG_O, XG_ALWAYS},
    {"attn_q_norm.weight", "self_attn.q_norm.weight", XG_NORM_Q, XG_ALWAYS},
    {"attn_k_norm.weight", "self_attn.k_norm.weight", XG_NORM_KV, XG_ALWAYS},
    {"ffn_norm.weight", "post_attention_layernorm.weight", XG_NORM_H, XG_ALWAYS},
    {"ffn_gate_inp.weight", "block_sparse_moe.gate.weight", XG_ROUTER, XG_ALWAYS},
    {"exp_probs_b.bias", "block_sparse_moe.e_score_correction_bias", XG_ROUTER_BIAS, XG_ALWAYS},
};

static int check(const xg_plan *p) {
    const moe8_config *c = p->cfg;
    if (xg_check_sizes(p)) return -1;
    for (int64_t l = 0; l < c->num_hidden_layers; l++)
        if (!moe8_config_is_moe_layer(c, l))
            return xg_fail("'%s/config.json': layer %lld has a dense MLP: llama.cpp's minimax-m2 "
                           "has MoE layers only", p->dir, (long long)l);
    return 0;
}

static void hparams(xg_kvs *k, const xg_plan *p) {
    int64_t rot = moe8_config_get_int(p->cfg, "rotary_dim", NULL);
    xg_common_hparams(k, p, rot > 0 ? rot : p->cfg->head_dim);
    xg_kv_au32(k, p->fam->arch, "expert_gating_func", GATING_SIGMOID);
}

const xg_family xg_minimax_m2 = {
    .model_arch = MOE8_ARCH_COUNT, /* MOE8_ARCH_MINIMAX_M2 when the family lands */
    .arch = "minimax-m2",
    .pre = "minimax-m2",
    .rows = rows,
    .n_rows = (int)(sizeof rows / sizeof rows[0]),
    .expert_fmt = "block_sparse_moe.experts.%lld.%s.weight",
    .exp_names = {"w1", "w3", "w2"},
    .check = check,
    .hparams = hparams,
};
