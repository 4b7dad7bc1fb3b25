/*
 * export_gguf_minimax_m2.c — `moe8 export-gguf` of minimax_m2 (MiniMax-M2 /
 * M2.1 / M2.5) as llama.cpp's "minimax-m2" (convert_hf_to_gguf.py's
 * MiniMaxM2Model; llama.cpp's minimax-m2 model: its load_arch_hparams,
 * load_arch_tensors and graph). Cross-checked against llama.cpp:
 * docs/BENCHMARKS.md, scripts/crosscheck_llamacpp.sh.
 *
 * Per layer: attn_norm; attn_{q,k,v,output} (no biases); attn_q_norm
 * [heads x head_dim] and attn_k_norm [kv heads x head_dim]: llama.cpp's
 * RMSNorm over the whole projection, before the head split, as moe8's
 * MOE8_ATTN_QK_NORM_WHOLE; ffn_norm (post_attention_layernorm);
 * ffn_gate_inp (block_sparse_moe.gate, F32); exp_probs_b.bias
 * (block_sparse_moe.e_score_correction_bias, which the converter renames to
 * e_score_correction.bias; llama.cpp requires it); the experts
 * block_sparse_moe.experts.N.w1 (gate), w3 (up), w2 (down) stacked into
 * ffn_{gate,up,down}_exps. Every layer is MoE, no shared expert. output is
 * required by llama.cpp's loader: with tied embeddings it is the embedding.
 *
 * Keys: the common ones with feed_forward_length AND
 * expert_feed_forward_length = intermediate_size (moe8's
 * moe_intermediate_size: llama.cpp sizes the stacked experts by
 * feed_forward_length, the converter writes intermediate_size there),
 * rope.dimension_count = rotary_dim (64 of head_dim 128; NEOX halves on the
 * leading dims, as Hugging Face's rotate_half over rotary_dim), and
 * expert_gating_func sigmoid (2). No expert_weights_scale (moe8's factor is
 * 1, llama.cpp applies none) and no groups (one group: no grouping);
 * llama.cpp's minimax-m2 always renormalizes the top-k weights, as moe8's.
 * The MTP modules (num_mtp_modules, after the decoder's layers) are not
 * exported; llama.cpp's minimax-m2 has none.
 * Refused: a model without the correction bias (use_routing_bias false).
 */
#include <math.h>

#include "export_gguf.h"

static const xg_row rows[] = {
    {"attn_norm.weight", "input_layernorm.weight", XG_NORM_H, XG_ALWAYS, XG_X_NONE},
    {"attn_q.weight", "self_attn.q_proj.weight", XG_Q, XG_ALWAYS, XG_X_NONE},
    {"attn_k.weight", "self_attn.k_proj.weight", XG_KV, XG_ALWAYS, XG_X_NONE},
    {"attn_v.weight", "self_attn.v_proj.weight", XG_KV, XG_ALWAYS, XG_X_NONE},
    {"attn_output.weight", "self_attn.o_proj.weight", XG_O, XG_ALWAYS, XG_X_NONE},
    {"attn_q_norm.weight", "self_attn.q_norm.weight", XG_NORM_Q, XG_ALWAYS, XG_X_NONE},
    {"attn_k_norm.weight", "self_attn.k_norm.weight", XG_NORM_KV, XG_ALWAYS, XG_X_NONE},
    {"ffn_norm.weight", "post_attention_layernorm.weight", XG_NORM_H, XG_ALWAYS, XG_X_NONE},
    {"ffn_gate_inp.weight", "block_sparse_moe.gate.weight", XG_ROUTER, XG_ALWAYS, XG_X_NONE},
    {"exp_probs_b.bias", "block_sparse_moe.e_score_correction_bias", XG_ROUTER_BIAS, XG_ALWAYS, XG_X_NONE},
};

static int check(const xg_plan *p) {
    const moe8_config *c = p->cfg;
    if (xg_check_sizes(p)) return -1;
    if (!moe8_config_get_int(c, "e_score_bias", NULL))
        return xg_fail("'%s/config.json': use_routing_bias false: llama.cpp's minimax-m2 requires "
                       "the correction bias (blk.N.exp_probs_b.bias)", p->dir);
    if (moe8_config_get_int(c, "num_nextn_predict_layers", NULL) > 0)
        fprintf(stderr, "moe8 " CMD ": note: the %lld multi-token-prediction module(s) of the "
                        "checkpoint are not exported\n",
                (long long)moe8_config_get_int(c, "num_nextn_predict_layers", NULL));
    for (int64_t l = 0; l < c->num_hidden_layers; l++)
        if (!moe8_config_is_moe_layer(c, l))
            return xg_fail("'%s/config.json': layer %lld has a dense MLP: llama.cpp's minimax-m2 "
                           "has MoE layers only", p->dir, (long long)l);
    return 0;
}

/* rotary_dim, else head_dim x partial_rotary_factor, else the whole head (the
 * family's rule, src/arch/minimax_m2.c). */
static int64_t rotary_dims(const moe8_config *c) {
    int64_t rot = moe8_config_get_int(c, "rotary_dim", NULL);
    double f = moe8_config_get_num(c, "partial_rotary_factor", NULL);
    if (rot > 0) return rot;
    return f > 0 ? (int64_t)llround((double)c->head_dim * f) : c->head_dim;
}

static void hparams(xg_kvs *k, const xg_plan *p) {
    xg_common_hparams(k, p, rotary_dims(p->cfg), p->cfg->moe_intermediate_size);
    xg_kv_au32(k, p->fam->arch, "expert_gating_func", GATING_SIGMOID);
}

const xg_family xg_minimax_m2 = {
    .model_arch = MOE8_ARCH_MINIMAX_M2,
    .arch = "minimax-m2",
    .pre = "minimax-m2",
    .rows = rows,
    .n_rows = (int)(sizeof rows / sizeof rows[0]),
    .expert_fmt = "block_sparse_moe.experts.%lld.%s.weight",
    .exp_names = {"w1", "w3", "w2"},
    .check = check,
    .hparams = hparams,
    .output_required = 1,
};
