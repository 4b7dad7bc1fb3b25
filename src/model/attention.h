/*
 * attention.h — internal (model/): RMSNorm, K/V rows into the paged cache
 * and causal GQA flash attention (attention.c; SEMANTICS §7), and the rotary
 * embeddings (rotary.c).
 */
#ifndef MOE8_ATTENTION_H
#define MOE8_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"
#include "load/model.h"
#include "core/public.h"

/* y[T][n] = rmsnorm(x[T][n]) * w (y may equal x; sum of squares in double). */
void moe8_rmsnorm_rows(float *y, int ldy, const float *x, int ldx, int T, int n, const float *w,
                       float eps);
/* Eps of MLA's q_a_layernorm / kv_a_layernorm, hard-coded in DeepSeek's modeling code. */
#define MOE8_MLA_NORM_EPS 1e-6f

/* x[T][n_head*D] <- per-head rmsnorm with weight w[D]. */
void moe8_rmsnorm_heads(float *x, int T, int n_head, int D, const float *w, float eps);
/* cs[n_pos][D/2][2]: cos, sin of pos * theta^(-2i/D), computed in double. */
void moe8_rope_table(float *cs, int64_t n_pos, int D, double theta);
/* NEOX rotary embedding of x[n_head][D] with the table row cs[D/2][2] of its
 * position: out[:D/2] = x1 c - x2 s, out[D/2:] = x2 c + x1 s. */
void moe8_rope_neox(float *x, int n_head, int D, const float *cs);
/* The rotary table of a model's config, cs[n_pos][R/2][2]: cos and sin of
 * pos * freq[i] times the scale, both from moe8_rope_freqs (arch.h, with
 * moe8_rope_dim and moe8_attn_scale); computed in double. */
void moe8_rope_table_cfg(float *cs, int64_t n_pos, const moe8_config *c);
/* Rotary embedding on pairs (deepseek): x[h*stride + 2i], x[h*stride + 2i+1]
 * of n_head heads rotated by the table row cs[R/2][2]. Equal to Hugging
 * Face's de-interleave + rotate_half up to the order of the outputs, which
 * every dot product it feeds ignores (q_pe and k_pe are permuted alike). */
void moe8_rope_pairs(float *x, int n_head, int stride, int R, const float *cs);
/* Rotary embedding on halves (NEOX, HF's rotate_half; DeepSeek-V3 with
 * rope_interleave false): x[h*stride + i] with x[h*stride + i + R/2]. */
void moe8_rope_halves(float *x, int n_head, int stride, int R, const float *cs);
/* The rotary kind k (arch/plan.h) on the first R dims of n_head heads of
 * x[h*stride ...] (MOE8_ROPE_NONE: nothing). rotary.c, with the above. */
void moe8_rope_apply(moe8_rope_kind k, float *x, int n_head, int stride, int R, const float *cs);

/* The paged KV cache as the forward sees it (model/kv_pool.h has the pool):
 * data[block][n_layer][2 (k, v)][n_kv][BS][D] of dt (F32, F16 or BF16),
 * BS = MOE8_KV_BLOCK_TOKENS; position p of sequence s is slot p % BS of
 * block table[s][p / BS]. With layer groups (slot non-NULL: gpt_oss's
 * sliding layers apart) KV layer l is layer slot[l] of its group's blocks,
 * group[l] 1 reading table2 (entries left of the window -1: never read). */
typedef struct {
    unsigned char *data;
    size_t block_bytes;      /* bytes per block */
    moe8_dtype dt;
    const int32_t *table;    /* [n_seq][max_blocks] */
    int32_t max_blocks;
    const int32_t *table2;   /* [n_seq][max_blocks] the sliding group's, or NULL */
    const int32_t *slot;     /* [n_kv_layers] layer within its group's block, or NULL */
    const uint8_t *group;    /* [n_kv_layers] 0 full, 1 sliding */
} moe8_kv_view;

/* One layer of it, for attention. */
typedef struct {
    int n_head, n_kv, D;
    moe8_dtype dt;
    float scale;             /* softmax scale (1/sqrt(D) unless set) */
    unsigned char *k0;       /* K of this layer in block 0 (V follows at v_off; 0 with MLA:
                              * the latent row is K and its first L values V) */
    size_t block_bytes;
    size_t v_off;            /* n_kv * BS * D elements, in bytes */
    size_t head_bytes;       /* BS * D elements (one kv head's rows of a block), in bytes */
    const int32_t *table;
    int32_t max_blocks;
} moe8_attn_cache;

/* Layer `layer` of the cache for n_kv kv heads of head dim D. */
moe8_attn_cache moe8_attn_cache_layer(const moe8_kv_view *kv, int n_head, int n_kv, int D,
                                      int layer);
/* The same for a cache of `planes` (2: K then V; 1: one row read as both) and
 * a given softmax scale. */
moe8_attn_cache moe8_attn_cache_layer_ex(const moe8_kv_view *kv, int n_head, int n_kv, int D,
                                         int planes, float scale, int layer);

/* Offset (bytes from k0) of the K row of (seq, kv head, pos); its V row is
 * v_off further. */
static inline size_t moe8_kv_row(const moe8_attn_cache *c, int32_t seq, int kvh, int32_t pos) {
    const int32_t blk = c->table[(size_t)seq * c->max_blocks + pos / MOE8_KV_BLOCK_TOKENS];
    return (size_t)blk * c->block_bytes + (size_t)kvh * c->head_bytes +
           (size_t)(pos % MOE8_KV_BLOCK_TOKENS) * (c->head_bytes / MOE8_KV_BLOCK_TOKENS);
}

/* A K or V row into the cache: src[D] fp32 as dt (F16, BF16: rounded to
 * nearest even). */
void moe8_kv_store(void *dst, const float *src, int D, moe8_dtype dt);

/* Scratch of moe8_attention: per thread, for heads of group size G = n_head / n_kv. */
size_t moe8_attention_work_floats(int D, int G);

/* Causal GQA attention: out[T][n_head*D] from q[T][n_head*D]; token t reads
 * positions 0..pos[t] of sequence seq[t] (already in the cache). Tokens
 * are cut into query tiles (consecutive tokens of one sequence, at most 128
 * query rows), and each (tile, kv head) runs the flash-attention kernel
 * (kernels.h) on one thread: the group's query heads share every K/V block
 * read, scale 1/sqrt(D), online softmax over blocks in position order. A
 * row's result depends only on its own query, position and sequence, so
 * neither the thread count nor the other tokens of the batch change it.
 * tiles: [2][T] int32; work: [n_threads][work_floats]. */
void moe8_attention(const moe8_kernels *kt, float *out, const float *q, const moe8_attn_cache *c,
                    const int32_t *seq, const int32_t *pos, int T, int32_t *tiles, float *work,
                    size_t work_floats, int n_threads);

/* moe8_attention with a sink per head (sinks[n_head], this rank's heads)
 * joining each softmax's denominator after the kernel (SEMANTICS §7i):
 * gpt_oss's full-attention layers. n_head / n_kv <= 128. */
void moe8_attention_sinks(const moe8_kernels *kt, float *out, const float *q,
                          const moe8_attn_cache *c, const int32_t *seq, const int32_t *pos, int T,
                          const float *sinks, int32_t *tiles, float *work, size_t work_floats,
                          int n_threads);

/* The same with gpt_oss's options (attn_sink.c): sinks[n_head] (this rank's
 * heads; NULL: none) joining each softmax's denominator, and a sliding window
 * of `window` positions ending at the query's own (0: none). */
void moe8_attention_sink(float *out, const float *q, const moe8_attn_cache *c,
                         const int32_t *seq, const int32_t *pos, int T, const float *sinks,
                         int64_t window, int n_threads);

#endif
