/*
 * rotary.c — the rotary kinds (arch/plan.h; SEMANTICS §7, §7d): the cos/sin
 * table of a config (its frequencies and YaRN's scales from arch/rope.c),
 * and the rotation of the first R dims of each head, on halves (i, i + R/2:
 * NEOX, Hugging Face's rotate_half) or on interleaved pairs (2i, 2i + 1:
 * DeepSeek). R below the head width is partial rotary: the rest of the head
 * is left as is.
 *
 * Does not: derive frequencies from a config (arch/rope.c).
 */
#include <math.h>

#include "core/core.h"
#include "model/attention.h"

/* cs[p][i] = cos, sin of p * freq[i], times ms (1 outside YaRN: exact). */
static void fill_rope(float *cs, int64_t n_pos, int half, const double *freq, double ms) {
    for (int64_t p = 0; p < n_pos; p++)
        for (int i = 0; i < half; i++) {
            const double a = (double)p * freq[i];
            cs[((size_t)p * half + i) * 2 + 0] = (float)(cos(a) * ms);
            cs[((size_t)p * half + i) * 2 + 1] = (float)(sin(a) * ms);
        }
}

void moe8_rope_table(float *cs, int64_t n_pos, int D, double theta) {
    double freq[MOE8_CAP_HEAD_DIM / 2];
    MOE8_ASSERT(D / 2 <= MOE8_CAP_HEAD_DIM / 2);
    for (int i = 0; i < D / 2; i++) freq[i] = pow(theta, -2.0 * i / D);
    fill_rope(cs, n_pos, D / 2, freq, 1.0);
}

void moe8_rope_neox(float *x, int n_head, int D, const float *cs) { moe8_rope_halves(x, n_head, D, D, cs); }

void moe8_rope_halves(float *x, int n_head, int stride, int R, const float *cs) {
    const int half = R / 2;
    for (int h = 0; h < n_head; h++) {
        float *xh = x + (size_t)h * stride;
        for (int i = 0; i < half; i++) {
            float c = cs[2 * i], s = cs[2 * i + 1];
            float x1 = xh[i], x2 = xh[i + half];
            xh[i] = x1 * c - x2 * s;
            xh[i + half] = x2 * c + x1 * s;
        }
    }
}

void moe8_rope_table_cfg(float *cs, int64_t n_pos, const moe8_config *c) {
    double freq[MOE8_CAP_HEAD_DIM / 2];
    const double ms = moe8_rope_freqs(c, freq);
    fill_rope(cs, n_pos, moe8_rope_dim(c) / 2, freq, ms);
}

void moe8_rope_pairs(float *x, int n_head, int stride, int R, const float *cs) {
    for (int h = 0; h < n_head; h++) {
        float *xh = x + (size_t)h * stride;
        for (int i = 0; i < R / 2; i++) {
            const float c = cs[2 * i], s = cs[2 * i + 1];
            const float x1 = xh[2 * i], x2 = xh[2 * i + 1];
            xh[2 * i] = x1 * c - x2 * s;
            xh[2 * i + 1] = x2 * c + x1 * s;
        }
    }
}

void moe8_rope_apply(moe8_rope_kind k, float *x, int n_head, int stride, int R, const float *cs) {
    if (k == MOE8_ROPE_PAIRS) moe8_rope_pairs(x, n_head, stride, R, cs);
    else if (k == MOE8_ROPE_HALVES) moe8_rope_halves(x, n_head, stride, R, cs);
}
