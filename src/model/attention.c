/*
 * attention.c — the attention block's arithmetic (SPEC §7): RMSNorm (whole
 * rows and per head), NEOX rotary embedding from a precomputed cos/sin table,
 * and causal grouped-query attention over an fp32 KV cache.
 *
 * Cache layout of one layer: [n_seq][n_kv][n_ctx][D] fp32, so the keys one
 * head reads are contiguous. Query head h reads kv head h / (n_head / n_kv).
 * Each (token, head) pair is computed by one thread in position order with a
 * max-subtracted softmax, so the result does not depend on the thread count.
 *
 * Does not: write the cache (the forward pass does, before calling this),
 * quantize the cache, or handle sliding windows / rope scaling.
 */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "model/forward.h"

void moe8_rmsnorm_rows(float *y, int ldy, const float *x, int ldx, int T, int n, const float *w,
                       float eps) {
    for (int t = 0; t < T; t++) {
        const float *xr = x + (size_t)t * ldx;
        float *yr = y + (size_t)t * ldy;
        double ss = 0.0;
        for (int j = 0; j < n; j++) ss += (double)xr[j] * xr[j];
        float r = (float)(1.0 / sqrt(ss / n + (double)eps));
        for (int j = 0; j < n; j++) yr[j] = (xr[j] * r) * w[j];
    }
}

void moe8_rmsnorm_heads(float *x, int T, int n_head, int D, const float *w, float eps) {
    moe8_rmsnorm_rows(x, D, x, D, T * n_head, D, w, eps);
}

void moe8_rope_table(float *cs, int64_t n_pos, int D, double theta) {
    const int half = D / 2;
    for (int64_t p = 0; p < n_pos; p++)
        for (int i = 0; i < half; i++) {
            double inv = pow(theta, -2.0 * i / D);
            double a = (double)p * inv;
            cs[((size_t)p * half + i) * 2 + 0] = (float)cos(a);
            cs[((size_t)p * half + i) * 2 + 1] = (float)sin(a);
        }
}

void moe8_rope_neox(float *x, int n_head, int D, const float *cs) {
    const int half = D / 2;
    for (int h = 0; h < n_head; h++) {
        float *xh = x + (size_t)h * D;
        for (int i = 0; i < half; i++) {
            float c = cs[2 * i], s = cs[2 * i + 1];
            float x1 = xh[i], x2 = xh[i + half];
            xh[i] = x1 * c - x2 * s;
            xh[i + half] = x2 * c + x1 * s;
        }
    }
}

/* q·k; `omp simd` lets the compiler split the sum into vector lanes (a fixed
 * order for a given build, so still deterministic). */
static float dot(const float *a, const float *b, int n) {
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int d = 0; d < n; d++) s += a[d] * b[d];
    return s;
}

/* One query head against positions 0..p of its kv head; out[D]. */
static void attend_one(float *out, const float *q, const float *k, const float *v, int64_t p,
                       int D, float scale, float *sc) {
    float mx = -INFINITY, sum = 0.0f;
    for (int64_t i = 0; i <= p; i++) {
        float s = dot(q, k + (size_t)i * D, D) * scale;
        sc[i] = s;
        if (s > mx) mx = s;
    }
    for (int64_t i = 0; i <= p; i++) {
        sc[i] = expf(sc[i] - mx);
        sum += sc[i];
    }
    memset(out, 0, (size_t)D * sizeof(float));
    for (int64_t i = 0; i <= p; i++) {
        const float *vi = v + (size_t)i * D;
        float wgt = sc[i] / sum;
#pragma omp simd
        for (int d = 0; d < D; d++) out[d] += wgt * vi[d];
    }
}

void moe8_attention(float *out, const float *q, const moe8_attn_cache *c, const int32_t *seq,
                    const int32_t *pos, int T, float *work, int n_threads) {
    const int n_head = c->n_head, n_kv = c->n_kv, D = c->D, group = n_head / n_kv;
    const int64_t n_ctx = c->n_ctx;
    const float scale = (float)(1.0 / sqrt((double)D));
    const int64_t n_pairs = (int64_t)T * n_head;
#pragma omp parallel for schedule(dynamic, 1) num_threads(n_threads) if (n_threads > 1 && n_pairs > 1)
    for (int64_t i = 0; i < n_pairs; i++) {
        int t = (int)(i / n_head), h = (int)(i % n_head);
        size_t base = moe8_kv_offset(n_kv, n_ctx, D, seq[t], h / group, 0);
        float *sc = work + (size_t)omp_get_thread_num() * (size_t)n_ctx;
        attend_one(out + ((size_t)t * n_head + h) * D, q + ((size_t)t * n_head + h) * D,
                   c->kc + base, c->vc + base, pos[t], D, scale, sc);
    }
}
