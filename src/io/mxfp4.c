/*
 * mxfp4.c — decoding MXFP4 rows (mxfp4.h): the e2m1 table, the e8m0 scale,
 * a row of blocks. Authority: the OCP Microscaling Formats spec v1.0 and
 * transformers' integrations/mxfp4.py (FP4_VALUES, the low nibble first,
 * ldexp by scales - 127).
 *
 * Does not: check shapes or scale ranges (the loader does).
 */
#include <math.h>

#include "io/mxfp4.h"

/* e2m1: exponent field 0 is subnormal (m x 0.5), else 2^(e-1) x (1 + m/2). */
static const float e2m1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                               -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

float moe8_e2m1_value(unsigned code) { return e2m1[code & 15u]; }

float moe8_e8m0_value(unsigned s) {
    s &= 255u;
    return s == 255u ? NAN : ldexpf(1.0f, (int)s - 127);
}

void moe8_mxfp4_decode_row(float *dst, const uint8_t *blocks, const uint8_t *scales, int64_t n) {
    for (int64_t b = 0; b < n / MOE8_MXFP4_BLOCK; b++) {
        const int x = (int)scales[b] - 127;
        const uint8_t *q = blocks + b * MOE8_MXFP4_BLOCK_BYTES;
        float *d = dst + b * MOE8_MXFP4_BLOCK;
        if (scales[b] == 255) {
            for (int j = 0; j < MOE8_MXFP4_BLOCK; j++) d[j] = NAN;
            continue;
        }
        for (int j = 0; j < MOE8_MXFP4_BLOCK_BYTES; j++) { /* ldexp: exact, no 2^x rounding */
            d[2 * j] = ldexpf(e2m1[q[j] & 15u], x);
            d[2 * j + 1] = ldexpf(e2m1[q[j] >> 4], x);
        }
    }
}

/* The nearest e2m1 code of a >= 0 (a <= 6), ties to the even code. */
static unsigned nearest(float a) {
    unsigned best = 0;
    for (unsigned c = 1; c < 8; c++) {
        const float d = fabsf(e2m1[c] - a), db = fabsf(e2m1[best] - a);
        if (d < db || (d == db && !(c & 1))) best = c;
    }
    return best;
}

uint8_t moe8_mxfp4_encode_block(uint8_t *q, const float *x) {
    float amax = 0.0f;
    int s = 127;
    for (int j = 0; j < MOE8_MXFP4_BLOCK; j++) amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
    if (amax > 0.0f) {
        s = 0;
        while (s < MOE8_MXFP4_MAX_SCALE && amax > ldexpf(6.0f, s - 127)) s++;
    }
    for (int j = 0; j < MOE8_MXFP4_BLOCK_BYTES; j++) {
        unsigned c[2];
        for (int k = 0; k < 2; k++) {
            const float v = ldexpf(x[2 * j + k], 127 - s);
            const float a = fabsf(v) > 6.0f ? 6.0f : fabsf(v);
            c[k] = nearest(a) | (v < 0 && nearest(a) ? 8u : 0u);
        }
        q[j] = (uint8_t)(c[0] | (c[1] << 4));
    }
    return (uint8_t)s;
}
