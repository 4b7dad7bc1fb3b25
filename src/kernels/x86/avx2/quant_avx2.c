/*
 * quant_avx2.c — per-row dynamic int8 quantization (SEMANTICS §4), AVX2.
 * Bit-identical to moe8_quant_rows_ref: amax with NaN ignored (max_ps keeps
 * its second operand on NaN, as fmaxf does), fp32 true division, round half
 * to even whatever the caller's rounding mode (moe8_round_even), clamp to ±127 with NaN -> -127, exactly as
 * fmaxf/fminf order it in the reference. Does not handle k_pad layout beyond
 * zeroing the tail k..round_up(k, KALIGN).
 */
#include <immintrin.h>
#include <math.h>

#include "core/core.h"
#include "kernels/x86/avx2/kernels_avx2.h"

static float row_amax(const float *x, int k) {
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 m0 = _mm256_setzero_ps(), m1 = _mm256_setzero_ps();
    int j = 0;
    for (; j + 16 <= k; j += 16) {
        m0 = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + j), absmask), m0);
        m1 = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + j + 8), absmask), m1);
    }
    m0 = _mm256_max_ps(m0, m1);
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m0), _mm256_extractf128_ps(m0, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
    float amax = _mm_cvtss_f32(h);
    for (; j < k; j++) amax = fmaxf(amax, fabsf(x[j]));
    return amax;
}

/* 8 floats -> 8 int32 codes: clamp(rint(x / s), -127, 127), NaN -> -127. */
static inline __m256i codes8(__m256 x, __m256 s) {
    __m256 q = _mm256_round_ps(_mm256_div_ps(x, s), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    q = _mm256_max_ps(q, _mm256_set1_ps(-127.0f)); /* NaN q -> -127 like fmaxf */
    q = _mm256_min_ps(q, _mm256_set1_ps(127.0f));
    return _mm256_cvtps_epi32(q);
}

static int32_t quant_row(int8_t *q, const float *x, int k, float s) {
    const __m256 vs = _mm256_set1_ps(s);
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    __m256i vsum = _mm256_setzero_si256();
    int j = 0;
    for (; j + 32 <= k; j += 32) {
        __m256i a = codes8(_mm256_loadu_ps(x + j), vs), b = codes8(_mm256_loadu_ps(x + j + 8), vs);
        __m256i c = codes8(_mm256_loadu_ps(x + j + 16), vs);
        __m256i d = codes8(_mm256_loadu_ps(x + j + 24), vs);
        vsum = _mm256_add_epi32(vsum, _mm256_add_epi32(_mm256_add_epi32(a, b), _mm256_add_epi32(c, d)));
        __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
        _mm256_storeu_si256((__m256i *)(q + j), _mm256_permutevar8x32_epi32(p, perm));
    }
    __m128i h = _mm_add_epi32(_mm256_castsi256_si128(vsum), _mm256_extracti128_si256(vsum, 1));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
    int32_t sum = _mm_cvtsi128_si32(h);
    for (; j < k; j++) {
        float v = fminf(fmaxf(moe8_round_even(x[j] / s), -127.0f), 127.0f);
        q[j] = (int8_t)v;
        sum += q[j];
    }
    return sum;
}

void moe8_quant_rows_avx2(int8_t *xq, int ldq, float *sx, int32_t *xsum, const float *x, int ldx,
                          int m, int k) {
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
