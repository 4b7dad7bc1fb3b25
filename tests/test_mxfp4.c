/*
 * test_mxfp4.c — the MXFP4 reader (src/io/mxfp4.c) against the OCP
 * Microscaling Formats spec v1.0: every e2m1 code (table 5.3.3 written out,
 * and the same values derived from the sign / exponent / mantissa bits in
 * double), the e8m0 exponent edges (0: 2^-127, 1, 126, 127: 1, 128, 253,
 * 254: 2^127, 255: NaN), the nibble order (value 2j in the low nibble of
 * byte j, as transformers' convert_moe_packed_tensors reads it) and a
 * row of several blocks each with its own scale.
 */
#include "test.h"

#include "io/mxfp4.h"

/* OCP MX v1.0, FP4 E2M1: the 16 codes in order. */
static const double spec_e2m1[16] = {0.0,  0.5,  1.0,  1.5,  2.0,  3.0,  4.0,  6.0,
                                     -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0};

/* The same from the bits: S EE M, bias 1, EE = 0 subnormal 2^0 x 0.M. */
static double e2m1_bits(unsigned c) {
    const int s = (c >> 3) & 1, e = (c >> 1) & 3, m = c & 1;
    const double v = e == 0 ? 0.5 * m : ldexp(1.0 + 0.5 * m, e - 1);
    return s ? -v : v;
}

static void test_codes(void) {
    for (unsigned c = 0; c < 16; c++) {
        CHECKF(spec_e2m1[c] == e2m1_bits(c), "code %u: table %g, bits %g", c, spec_e2m1[c],
               e2m1_bits(c));
        CHECKF((double)moe8_e2m1_value(c) == spec_e2m1[c], "code %u: %g", c,
               (double)moe8_e2m1_value(c));
        CHECKF(!signbit(moe8_e2m1_value(c)) == !signbit(spec_e2m1[c]), "code %u: sign", c);
    }
}

static void test_scales(void) {
    static const unsigned edges[] = {0, 1, 2, 100, 126, 127, 128, 200, 252, 253, 254};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) {
        const unsigned s = edges[i];
        const double want = pow(2.0, (double)s - 127.0); /* 2^-127 .. 2^127: all fp32 */
        CHECKF((double)moe8_e8m0_value(s) == want, "e8m0 %u: %g vs %g", s,
               (double)moe8_e8m0_value(s), want);
    }
    CHECK(isnan(moe8_e8m0_value(255)));
}

/* One block per scale edge, holding every code twice (bytes j = code j
 * low, code 15 - j high), decoded and compared with spec value x 2^(s-127)
 * rounded once to fp32 (inf where it overflows). */
static void test_rows(void) {
    static const uint8_t sc[] = {0, 1, 118, 127, 128, 135, 252, 253, 254, 255};
    enum { NB = sizeof sc / sizeof sc[0], N = NB * 32 };
    uint8_t blocks[NB * 16];
    float out[N];
    for (int b = 0; b < NB; b++)
        for (int j = 0; j < 16; j++) blocks[b * 16 + j] = (uint8_t)(j | ((15 - j) << 4));
    moe8_mxfp4_decode_row(out, blocks, sc, N);
    for (int b = 0; b < NB; b++)
        for (int j = 0; j < 32; j++) {
            const unsigned code = j % 2 ? 15u - (unsigned)(j / 2) : (unsigned)(j / 2);
            const float got = out[b * 32 + j];
            if (sc[b] == 255) {
                CHECKF(isnan(got), "block %d value %d: %g, want NaN", b, j, (double)got);
                continue;
            }
            const float want = (float)(spec_e2m1[code] * pow(2.0, (double)sc[b] - 127.0));
            CHECKF(got == want && !signbit(got) == !signbit(want),
                   "scale %u value %d (code %u): %.9g vs %.9g", sc[b], j, code, (double)got,
                   (double)want);
        }
    /* the smallest non-zero magnitude, 0.5 x 2^-127, is a subnormal, not 0 */
    CHECK(out[2] == (float)ldexp(1.0, -128) && out[2] > 0);
    /* the largest finite scale keeps 6 x 2^125 finite; 253 overflows for 6 */
    CHECK(isfinite(out[6 * 32 + 14]) && isinf(out[7 * 32 + 14]));
}

int main(void) {
    test_codes();
    test_scales();
    test_rows();
    return test_summary();
}
