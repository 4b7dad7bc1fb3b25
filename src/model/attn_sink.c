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
 *
 * The KV cache keeps every position of a sliding layer (the pool is shared
 * by all layers); a sliding row reads only its window.
 *
 * Does not: use the kernel table's flash attention (the sink and the window
 * are not in its contract), or rotate (rotary.c).
 */
#include <math.h>
#include <omp.h>

#include "core/core.h"
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

static void sink_item(float *out, const float *q, const moe8_attn_cache *c, const int32_t *seq,
                      const int32_t *pos, const float *sinks, int64_t window, int NH, int G,
                      int64_t i) {
    const int t = (int)(i / NH), h = (int)(i % NH);
    const size_t row = ((size_t)t * NH + (size_t)h) * (size_t)c->D;
    sink_row(out + row, q + row, c, seq[t], pos[t], h / G, sinks ? sinks[h] : 0.0f,
             sinks != NULL, window);
}

void moe8_attention_sink(float *out, const float *q, const moe8_attn_cache *c,
                         const int32_t *seq, const int32_t *pos, int T, const float *sinks,
                         int64_t window, int n_threads) {
    const int NH = c->n_head, G = NH / c->n_kv;
    const int64_t n = (int64_t)T * NH;
    MOE8_ASSERT(c->D <= MAX_D);
    if (n_threads > 1 && n > 1) { /* an if(0) parallel region still allocates: run inline */
#pragma omp parallel for schedule(dynamic, 8) num_threads(n_threads)
        for (int64_t i = 0; i < n; i++) sink_item(out, q, c, seq, pos, sinks, window, NH, G, i);
    } else {
        for (int64_t i = 0; i < n; i++) sink_item(out, q, c, seq, pos, sinks, window, NH, G, i);
    }
}
