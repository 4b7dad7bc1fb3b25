/*
 * softmax.c — what every softmax over the vocabulary shares (the sampler,
 * log-probabilities, perplexity): the largest logit, and the exponentials
 * with their sum in double in index order, the exponentials by the chosen
 * table (SEMANTICS §10, "The exponential").
 */
#include <math.h>

#include "core/core.h"
#include "kernels/kernels.h"

/* bits of 2^(i/32), rounded to nearest, minus i << 47 (tested against exp2l) */
const uint64_t moe8_expf_tab[32] = {
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51,
    0x3fef72b83c7d517b, 0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1,
    0x3fef06fe0a31b715, 0x3feef1a7373aa9cb, 0x3feedea64c123422, 0x3feece086061892d,
    0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429, 0x3feea47eb03a5585,
    0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d,
    0x3feee89f995ad3ad, 0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069,
    0x3fef5818dcfba487, 0x3fef7c97337b9b5f, 0x3fefa4afa2a490da, 0x3fefd0765b6e4540,
};

float moe8_max_f32(const float *x, int n) {
    float m[8] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    int i = 0;
    for (; i + 8 <= n; i += 8) /* eight chains; a NaN compares false and is skipped */
        for (int j = 0; j < 8; j++) m[j] = x[i + j] > m[j] ? x[i + j] : m[j];
    for (; i < n; i++) m[0] = x[i] > m[0] ? x[i] : m[0];
    for (int j = 1; j < 8; j++) m[0] = m[j] > m[0] ? m[j] : m[0];
    return m[0];
}

double moe8_exp_sum(float *p, const float *x, int n, float mx, float div) {
    enum { CHUNK = 1024 };
    const moe8_exp_f32_fn ex = moe8_kernels_get()->exp_f32;
    float buf[CHUNK];
    double sum = 0.0;
    for (int i0 = 0; i0 < n; i0 += CHUNK) {
        const int m = n - i0 < CHUNK ? n - i0 : CHUNK;
        float *y = p ? p + i0 : buf;
        ex(y, x + i0, m, mx, div);
        for (int i = 0; i < m; i++) sum += y[i];
    }
    return sum;
}
