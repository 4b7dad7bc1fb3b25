/*
 * attn_sink.c — causal GQA attention with the options of gpt_oss's layers
 * (arch/plan.h MOE8_ATTN_SINKS, MOE8_ATTN_SLIDING; SEMANTICS §7i): a learned
 * sink logit per head that joins each softmax's denominator, and a sliding
 * window of W positions (the query's own included: positions pos-W+1 .. pos).
 * For query row (t, h), kv head h / G:
 *
 *   s_p  = scale * q . k_p                      p in [max(0, pos - W + 1), pos]
 *   m    = max(max_p s_p, sink_h)
 *   out  = sum_p e^(s_p - m) v_p / (sum_p e^(s_p - m) + e^(sink_h - m))
 *
 * (transformers' eager_attention_forward: the sink a last column of the
 * logits, softmaxed with them, then dropped.) Online softmax over the
 * positions in order, in fp32 with libm's expf; each row on its own, so its
 * result depends neither on the batch around it nor on the thread count.
 * Rows run on the thread pool (core/pool.h) in chunks of 8, the last rows
 * (the longest reads) handed out first.
 *
 * A sliding row reads only its window; the KV pool keeps only the window
 * of the sliding layers (their own group, kv_pool.h: blocks left of it are
 * given back, their table entries -1, never read here).
 *
 * Does not: use the kernel table's flash attention (the sink and the window
 * are not in its contract), or rotate (rotary.c).
 */
#include <math.h>

#include "core/core.h"
#include "core/pool.h"
#include "model/attention.h"

#define MAX_D 1024 /* arch.h MOE8_CAP_HEAD_DIM */

/* dst[D] = a K or V row of the cache in its dtype. */
static void row_f32(float *dst, const unsigned char *src, int D, moe8_dtype dt) {
    const uint16_t *h = (const uint16_t *)src;
    if (dt == MOE8_DT_F32) {
        for (int d = 0; d < D; d++) dst[d] = ((const float *)src)[d];
    } else if (dt == MOE8_DT_BF16) {
        for (int d = 0; d < D; d++) dst[d] = moe8_bf16_to_f32(h[d]);
    } else {
        for (int d = 0; d < D; d++) dst[d] = moe8_f16_to_f32(h[d]);
    }
}

/* Row (t, h): out[D] from q[D]. */
static void sink_row(float *out, const float *q, const moe8_attn_cache *c, int32_t seq,
                     int32_t pos, int kvh, float sink, int has_sink, int64_t window) {
    const int D = c->D;
    float k[MAX_D], v[MAX_D], acc[MAX_D];
    const int32_t lo = window > 0 && pos - window + 1 > 0 ? (int32_t)(pos - window + 1) : 0;
    float m = has_sink ? sink : -INFINITY, l = has_sink ? 1.0f : 0.0f;
    for (int d = 0; d < D; d++) acc[d] = 0.0f;
    for (int32_t p = lo; p <= pos; p++) {
        const size_t off = moe8_kv_row(c, seq, kvh, p);
        float s = 0.0f;
        row_f32(k, c->k0 + off, D, c->dt);
        for (int d = 0; d < D; d++) s += q[d] * k[d];
        s *= c->scale;
        if (s > m) { /* rescale what was summed under the old maximum */
            const float r = expf(m - s);
            l *= r;
            for (int d = 0; d < D; d++) acc[d] *= r;
            m = s;
        }
        const float w = expf(s - m);
        row_f32(v, c->k0 + off + c->v_off, D, c->dt);
        l += w;
        for (int d = 0; d < D; d++) acc[d] += w * v[d];
    }
    for (int d = 0; d < D; d++) out[d] = acc[d] / l;
}

typedef struct {
    float *out;
    const float *q;
    const moe8_attn_cache *c;
    const int32_t *seq, *pos;
    const float *sinks;
    int64_t window, n, n_chunks;
    int NH, G;
} sink_job;

enum { ROWS_PER_CHUNK = 8 };

/* Chunk k: rows [8 j, 8 j + 8) of the T x NH rows (t, h), j = n_chunks - 1 - k. */
static void sink_chunk(void *ctx, int64_t k, int thread) {
    const sink_job *a = ctx;
    const moe8_attn_cache *c = a->c;
    const int64_t i0 = (a->n_chunks - 1 - k) * ROWS_PER_CHUNK;
    const int64_t i1 = i0 + ROWS_PER_CHUNK < a->n ? i0 + ROWS_PER_CHUNK : a->n;
    (void)thread;
    for (int64_t i = i0; i < i1; i++) {
        const int t = (int)(i / a->NH), h = (int)(i % a->NH);
        const size_t row = ((size_t)t * a->NH + (size_t)h) * (size_t)c->D;
        sink_row(a->out + row, a->q + row, c, a->seq[t], a->pos[t], h / a->G,
                 a->sinks ? a->sinks[h] : 0.0f, a->sinks != NULL, a->window);
    }
}

void moe8_attention_sink(float *out, const float *q, const moe8_attn_cache *c,
                         const int32_t *seq, const int32_t *pos, int T, const float *sinks,
                         int64_t window, int n_threads) {
    const int NH = c->n_head;
    const int64_t n = (int64_t)T * NH;
    MOE8_ASSERT(c->D <= MAX_D);
    const sink_job a = {out, q, c, seq, pos, sinks, window, n,
                        (n + ROWS_PER_CHUNK - 1) / ROWS_PER_CHUNK, NH, NH / c->n_kv};
    if (n > 0) moe8_pool_run(n_threads, a.n_chunks, sink_chunk, (void *)&a);
}
