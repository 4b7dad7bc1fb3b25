/*
 * model_info.c — what a loaded model tells about itself (moe8.h): its config,
 * each layer's resolved kinds and quant types, the lm_head, the tensors'
 * bytes by dtype, the memory a context of n_ctx positions would take
 * (weights, KV of the full-attention layers, scratch, a hybrid's recurrent
 * state) and its TP/EP shard. Read-only queries on what model.c loaded.
 */
#include <stdint.h>
#include <string.h>

#include "load/model.h"

const moe8_config *moe8_model_config(const moe8_model *m) { return m ? &m->cfg : NULL; }

int moe8_model_layer_info(const moe8_model *m, int64_t layer, moe8_layer_info *out) {
    if (!m || !out || layer < 0 || layer >= m->cfg.num_hidden_layers) return -1;
    *out = m->layers[layer].info;
    return 0;
}

int moe8_model_lm_head_info(const moe8_model *m, moe8_lm_head_info *out) {
    const moe8_linear *L;
    if (!m || !out) return -1;
    L = &m->lm_head;
    memset(out, 0, sizeof *out);
    out->quant = L->quant;
    out->tied = m->cfg.tie_word_embeddings != 0;
    out->dtype = L->weight->dtype;
    out->weight_bytes = L->weight->n_bytes;
    if (L->weight_scale) out->scale_bytes += L->weight_scale->n_bytes;
    if (L->weight_offset) out->scale_bytes += L->weight_offset->n_bytes;
    return 0;
}

void moe8_model_get_stats(const moe8_model *m, moe8_model_stats *out) {
    memset(out, 0, sizeof *out);
    if (!m) return;
    out->n_files = moe8_st_n_files(m->st);
    for (size_t i = 0; i < moe8_st_count(m->st); i++) {
        const moe8_tensor *t = moe8_st_get(m->st, i);
        out->n_tensors++;
        out->total_bytes += t->n_bytes;
        if ((unsigned)t->dtype < MOE8_DT_COUNT) {
            out->bytes_by_dtype[t->dtype] += t->n_bytes;
            out->tensors_by_dtype[t->dtype]++;
        }
    }
}

moe8_status moe8_model_memory(const moe8_model *m, int64_t n_ctx, moe8_dtype kv_type,
                              moe8_memory_estimate *out, moe8_error *err) {
    const moe8_config *c;
    const moe8_family_cfg *fc;
    moe8_model_stats s;
    uint64_t kv, scratch, per_tok, wide;
    if (!m || !out) return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "model memory: NULL argument");
    if (n_ctx < 1 || n_ctx > (INT64_C(1) << 24))
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "model memory: context %lld outside [1, 16777216]",
                         (long long)n_ctx);
    if (kv_type != MOE8_DT_F32 && kv_type != MOE8_DT_F16 && kv_type != MOE8_DT_BF16)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "model memory: kv type %s is not F32, "
                         "F16 or BF16", moe8_dtype_name(kv_type));
    c = &m->cfg;
    fc = MOE8_FAM(c);
    moe8_model_get_stats(m, &s);
    /* config caps keep these products far below 2^63 */
    const moe8_kv_shape ks = moe8_arch_kv_shape(c);
    kv = (uint64_t)ks.planes * (uint64_t)moe8_arch_kv_layers(c) * (uint64_t)ks.heads *
         (uint64_t)ks.dim * (uint64_t)n_ctx * moe8_dtype_size(kv_type);
    /* one decode step: residual, normed, q/k/v/attn-out, MLP hidden (dense or
     * top-k experts, gate+up), router logits, one attention tile (K/V blocks
     * widened, scores of 128 query rows), vocab logits */
    wide = (uint64_t)(2 * c->intermediate_size);
    if ((uint64_t)(2 * c->num_experts_per_tok * c->moe_intermediate_size) > wide && c->num_experts > 0)
        wide = (uint64_t)(2 * c->num_experts_per_tok * c->moe_intermediate_size);
    if ((uint64_t)(2 * fc->shared_expert_intermediate_size) > wide)   /* its gate/up, qwen2_moe */
        wide = (uint64_t)(2 * fc->shared_expert_intermediate_size);
    if (fc->kv_lora_rank > 0) { /* MLA: q_a rows, the latent row, absorbed queries and outputs,
                                * v per head (load/weights.h) */
        const uint64_t qc = (uint64_t)(c->num_attention_heads * (fc->kv_lora_rank + fc->qk_rope_head_dim));
        wide += (uint64_t)fc->q_lora_rank + (uint64_t)(fc->kv_lora_rank + fc->qk_rope_head_dim) +
                2 * qc + (uint64_t)(c->num_attention_heads * fc->v_head_dim);
    }
    per_tok = 4ull * (uint64_t)c->hidden_size + 2ull * (uint64_t)(c->num_attention_heads * c->head_dim) +
              2ull * (uint64_t)(c->num_key_value_heads * c->head_dim) + wide + (uint64_t)c->num_experts +
              32ull * (uint64_t)c->head_dim + 19ull * 128 + (uint64_t)c->vocab_size;
    scratch = per_tok * 4ull + (1ull << 20);
    const int64_t n_gdn = c->num_hidden_layers - moe8_arch_kv_layers(c);
    if (n_gdn > 0) { /* hybrids: one sequence's conv and recurrent states, fp32 (state_pool.h) */
        const uint64_t C = (uint64_t)moe8_dim_of(c, MOE8_DIM_GC);
        scratch += 4ull * (uint64_t)n_gdn *
                   ((uint64_t)(fc->linear_conv_kernel_dim - 1) * C +
                    (uint64_t)(fc->linear_num_value_heads * fc->linear_key_head_dim *
                               fc->linear_value_head_dim));
    }
    /* a W8A8 kv_b_proj is absorbed as fp32: 4 bytes per int8 one (load/weights.c) */
    uint64_t absorbed = 0;
    for (int64_t l = 0; l < c->num_hidden_layers; l++)
        if (m->layers[l].info.mla && m->layers[l].info.kv_b != MOE8_QUANT_FLOAT)
            absorbed += 3ull * (uint64_t)(c->num_attention_heads * (fc->qk_nope_head_dim + fc->v_head_dim)) *
                        (uint64_t)fc->kv_lora_rank;
    out->weight_bytes = s.total_bytes + absorbed;
    out->kv_bytes = kv;
    out->scratch_bytes = scratch;
    out->total_bytes = out->weight_bytes + kv + scratch;
    return MOE8_OK;
}

void moe8_model_shard(const moe8_model *m, moe8_dist_shard *out) { *out = m->shard; }
