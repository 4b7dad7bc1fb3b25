/*
 * attention.c — the attention block's arithmetic (SEMANTICS §7): RMSNorm (whole
 * rows and per head), NEOX rotary embedding from a precomputed cos/sin table,
 * and causal grouped-query attention over the paged fp32 KV cache.
 *
 * Cache layout (forward.h moe8_kv_view): blocks of MOE8_KV_BLOCK_TOKENS
 * positions, [n_kv][BS][D] per layer and k/v, found through the sequence's
 * block table. Query head h reads kv head h / (n_head / n_kv). Each (token,
 * head) pair is computed by one thread in position order with a
 * max-subtracted softmax and a fixed summation order, so the result depends
 * neither on the thread count nor on the batch around the token.
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

/* q·k with 8 interleaved partial sums added pairwise at the end: the order
 * is fixed by the code, not left to the vectorizer (whose loop peeling could
 * depend on the pointers' alignment). */
static float dot(const float *a, const float *b, int n) {
    float p[8] = {0};
    int d = 0;
    for (; d + 8 <= n; d += 8)
        for (int j = 0; j < 8; j++) p[j] += a[d + j] * b[d + j];
    for (; d < n; d++) p[d % 8] += a[d] * b[d];
    return ((p[0] + p[4]) + (p[2] + p[6])) + ((p[1] + p[5]) + (p[3] + p[7]));
}

/* One query head against positions 0..p of its kv head in the paged cache; out[D]. */
static void attend_one(float *out, const float *q, const moe8_attn_cache *c, int32_t seq, int kvh,
                       int32_t p, float scale, float *sc) {
    const int D = c->D;
    float mx = -INFINITY, sum = 0.0f;
    for (int32_t i = 0; i <= p; i++) {
        float s = dot(q, c->k0 + moe8_kv_row(c, seq, kvh, i), D) * scale;
        sc[i] = s;
        if (s > mx) mx = s;
    }
    for (int32_t i = 0; i <= p; i++) {
        sc[i] = expf(sc[i] - mx);
        sum += sc[i];
    }
    memset(out, 0, (size_t)D * sizeof(float));
    for (int32_t i = 0; i <= p; i++) {
        const float *vi = c->k0 + moe8_kv_row(c, seq, kvh, i) + c->v_off;
        float wgt = sc[i] / sum;
        for (int d = 0; d < D; d++) out[d] += wgt * vi[d];
    }
}

void moe8_attention(float *out, const float *q, const moe8_attn_cache *c, const int32_t *seq,
                    const int32_t *pos, int T, float *work, int64_t n_ctx, int n_threads) {
    const int n_head = c->n_head, group = n_head / c->n_kv, D = c->D;
    const float scale = (float)(1.0 / sqrt((double)D));
    const int64_t n_pairs = (int64_t)T * n_head;
#pragma omp parallel for schedule(dynamic, 1) num_threads(n_threads) if (n_threads > 1 && n_pairs > 1)
    for (int64_t i = 0; i < n_pairs; i++) {
        int t = (int)(i / n_head), h = (int)(i % n_head);
        float *sc = work + (size_t)omp_get_thread_num() * (size_t)n_ctx;
        attend_one(out + ((size_t)t * n_head + h) * D, q + ((size_t)t * n_head + h) * D, c, seq[t],
                   h / group, pos[t], scale, sc);
    }
}
