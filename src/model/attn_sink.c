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
 * positions in order, in fp32 with libm's expf; each row on its own (the
 * heads of a kv head share each K/V row's widening, not arithmetic), so its
 * result depends neither on the batch around it nor on the thread count.
 * Units of (token, kv head, up to 8 of its query heads) run on the thread
 * pool (core/pool.h), the last tokens (the longest reads) handed out first.
 *
 * A sliding row reads only its window; the KV pool keeps only the window
 * of the sliding layers (their own group, kv_pool.h: blocks left of it are
 * given back, their table entries -1, never read here).
 *
 * gpt_oss's full layers (sinks, no window) run the kernel table's flash
 * attention instead (attention.c moe8_attention_sinks); this file serves the
 * sliding layers (at most W positions a row) and any window.
 *
 * Does not: use the kernel table's flash attention (the window is not in its
 * contract), or rotate (rotary.c).
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

enum { MAX_G = 8 }; /* query heads of one kv head done together */

/* Rows (t, h0 .. h0 + n - 1), n <= MAX_G heads of kv head kvh: out[n][D] from
 * q[n][D]. Each K and V row is widened once for the n heads; each head's
 * arithmetic is that of a row on its own, in the same order. */
static void sink_rows(float *out, const float *q, int n, const moe8_attn_cache *c, int32_t seq,
                      int32_t pos, int kvh, const float *sink, int64_t window) {
    const int D = c->D;
    float k[MAX_D], v[MAX_D], acc[MAX_G][MAX_D], m[MAX_G], l[MAX_G], w[MAX_G];
    const int32_t lo = window > 0 && pos - window + 1 > 0 ? (int32_t)(pos - window + 1) : 0;
    for (int g = 0; g < n; g++) {
        m[g] = sink ? sink[g] : -INFINITY;
        l[g] = sink ? 1.0f : 0.0f;
        for (int d = 0; d < D; d++) acc[g][d] = 0.0f;
    }
    for (int32_t p = lo; p <= pos; p++) {
        const size_t off = moe8_kv_row(c, seq, kvh, p);
        row_f32(k, c->k0 + off, D, c->dt);
        for (int g = 0; g < n; g++) {
            const float *qg = q + (size_t)g * D;
            float s = 0.0f;
            for (int d = 0; d < D; d++) s += qg[d] * k[d];
            s *= c->scale;
            if (s > m[g]) { /* rescale what was summed under the old maximum */
                const float r = expf(m[g] - s);
                l[g] *= r;
                for (int d = 0; d < D; d++) acc[g][d] *= r;
                m[g] = s;
            }
            w[g] = expf(s - m[g]);
        }
        row_f32(v, c->k0 + off + c->v_off, D, c->dt);
        for (int g = 0; g < n; g++) {
            l[g] += w[g];
            for (int d = 0; d < D; d++) acc[g][d] += w[g] * v[d];
        }
    }
    for (int g = 0; g < n; g++)
        for (int d = 0; d < D; d++) out[(size_t)g * D + d] = acc[g][d] / l[g];
}

typedef struct {
    float *out;
    const float *q;
    const moe8_attn_cache *c;
    const int32_t *seq, *pos;
    const float *sinks;
    int64_t window, n_units;
    int NH, G, n_sub; /* n_sub: parts of MAX_G heads per kv head */
} sink_job;

/* Unit k: token t, kv head kvh, its heads' part j (at most MAX_G of them),
 * the last tokens (the longest reads) handed out first. */
static void sink_unit(void *ctx, int64_t k, int thread) {
    const sink_job *a = ctx;
    const moe8_attn_cache *c = a->c;
    const int64_t u = a->n_units - 1 - k, per_t = (int64_t)c->n_kv * a->n_sub;
    const int t = (int)(u / per_t), kvh = (int)(u % per_t / a->n_sub), j = (int)(u % a->n_sub);
    const int h0 = kvh * a->G + j * MAX_G;
    const int n = a->G - j * MAX_G < MAX_G ? a->G - j * MAX_G : MAX_G;
    const size_t row = ((size_t)t * a->NH + (size_t)h0) * (size_t)c->D;
    (void)thread;
    sink_rows(a->out + row, a->q + row, n, c, a->seq[t], a->pos[t], kvh,
              a->sinks ? a->sinks + h0 : NULL, a->window);
}

void moe8_attention_sink(float *out, const float *q, const moe8_attn_cache *c,
                         const int32_t *seq, const int32_t *pos, int T, const float *sinks,
                         int64_t window, int n_threads) {
    const int NH = c->n_head, G = NH / c->n_kv, n_sub = (G + MAX_G - 1) / MAX_G;
    MOE8_ASSERT(c->D <= MAX_D);
    const sink_job a = {out, q, c, seq, pos, sinks, window, (int64_t)T * c->n_kv * n_sub, NH, G,
                        n_sub};
    if (a.n_units > 0) moe8_pool_run(n_threads, a.n_units, sink_unit, (void *)&a);
}
