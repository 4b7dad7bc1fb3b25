/*
 * quant_avx512.c — per-row dynamic int8 quantization (SEMANTICS §4), AVX-512.
 * Bit-identical to moe8_quant_rows_ref, as quant_avx2.c, 16 lanes a step and
 * the tail under a lane mask (masked-off lanes read as 0, are not touched in
 * memory and add nothing): amax with NaN ignored (max_ps keeps its second
 * operand on NaN, as fmaxf does; |x| has no -0, so the order of the maxima
 * does not matter), fp32 true division, round half to even whatever the
 * caller's rounding mode (explicit in vrndscaleps), clamp to ±127 with
 * NaN -> -127 as fmaxf/fminf order it in the reference, xsum the exact
 * integer sum. Zeroes the tail k..round_up(k, KALIGN) of each row and nothing
 * beyond it.
 */
#include <immintrin.h>

#include "core/core.h"
#include "kernels/x86/avx512/kernels_avx512.h"

static inline __mmask16 lanes(int n) {
    return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}

static float row_amax(const float *x, int k) {
    __m512 m0 = _mm512_setzero_ps(), m1 = _mm512_setzero_ps();
    int j = 0;
    for (; j + 32 <= k; j += 32) {
        m0 = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x + j)), m0);
        m1 = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x + j + 16)), m1);
    }
    for (; j < k; j += 16)
        m0 = _mm512_max_ps(_mm512_abs_ps(_mm512_maskz_loadu_ps(lanes(k - j), x + j)), m0);
    return _mm512_reduce_max_ps(_mm512_max_ps(m0, m1)); /* no NaN reaches m0, m1 */
}

/* 16 floats -> 16 int32 codes: clamp(rint_even(x / s), -127, 127), NaN -> -127. */
static inline __m512i codes16(__m512 x, __m512 s) {
    __m512 q = _mm512_roundscale_ps(_mm512_div_ps(x, s), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    q = _mm512_max_ps(q, _mm512_set1_ps(-127.0f)); /* NaN q -> -127 like fmaxf */
    q = _mm512_min_ps(q, _mm512_set1_ps(127.0f));
    return _mm512_cvtps_epi32(q); /* integral already: exact in any rounding mode */
}

static int32_t quant_row(int8_t *q, const float *x, int k, float s) {
    const __m512 vs = _mm512_set1_ps(s);
    __m512i vsum = _mm512_setzero_si512();
    int j = 0;
    for (; j + 32 <= k; j += 32) {
        const __m512i a = codes16(_mm512_loadu_ps(x + j), vs);
        const __m512i b = codes16(_mm512_loadu_ps(x + j + 16), vs);
        vsum = _mm512_add_epi32(vsum, _mm512_add_epi32(a, b));
        _mm_storeu_si128((__m128i *)(q + j), _mm512_cvtepi32_epi8(a));
        _mm_storeu_si128((__m128i *)(q + j + 16), _mm512_cvtepi32_epi8(b));
    }
    for (; j < k; j += 16) {
        const __mmask16 mk = lanes(k - j);
        const __m512i a = codes16(_mm512_maskz_loadu_ps(mk, x + j), vs); /* 0 in off lanes */
        vsum = _mm512_add_epi32(vsum, a);
        _mm512_mask_cvtepi32_storeu_epi8(q + j, mk, a);
    }
    return _mm512_reduce_add_epi32(vsum);
}

void moe8_quant_rows_avx512(int8_t *xq, int ldq, float *sx, int32_t *xsum, const float *x,
                            int ldx, int m, int k) {
    const int k_pad = moe8_round_up(k, MOE8_QK_KALIGN);
    for (int r = 0; r < m; r++) {
        const float *xr = x + (size_t)r * ldx;
        int8_t *qr = xq + (size_t)r * ldq;
        const float s = row_amax(xr, k) / 127.0f;
        if (s > 0.0f) {
            xsum[r] = quant_row(qr, xr, k, s);
        } else {
            for (int j = 0; j < k; j++) qr[j] = 0;
            xsum[r] = 0;
        }
        for (int j = k; j < k_pad; j++) qr[j] = 0;
        sx[r] = s;
    }
}
