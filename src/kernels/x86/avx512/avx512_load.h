/*
 * avx512_load.h — what the AVX-512 kernels share: the widening loads of the
 * float kernels (float GEMM weights, flash attention's K/V rows: 16 elements
 * of F32, F16 or BF16 to fp32, exactly, whole or under a lane mask; masked-off
 * lanes are 0 and are not read, so a tail never touches memory past its end)
 * and the int8 GEMMs' row sums and output of 16 sums (the AVX-512 and AMX
 * tables). Included only by kernel files compiled with -mavx512f/bw/vl/vnni
 * (this folder, ../amx).
 */
#ifndef MOE8_AVX512_LOAD_H
#define MOE8_AVX512_LOAD_H

#include <immintrin.h>

#include "kernels/kernels.h"

/* 16 elements at element i of w widened to fp32; with dt a compile-time
 * constant after inlining the tests fold away. */
static inline __attribute__((always_inline)) __m512 moe8_avx512_load16(const void *w, size_t i,
                                                                       moe8_dtype dt) {
    if (dt == MOE8_DT_F32) return _mm512_loadu_ps((const float *)w + i);
    const __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)w + i));
    if (dt == MOE8_DT_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* The same for the lanes of m only (the others 0, their memory untouched). */
static inline __attribute__((always_inline)) __m512 moe8_avx512_load16_mask(const void *w,
                                                                            size_t i, __mmask16 m,
                                                                            moe8_dtype dt) {
    if (dt == MOE8_DT_F32) return _mm512_maskz_loadu_ps(m, (const float *)w + i);
    const __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)w + i);
    if (dt == MOE8_DT_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* Lanes 0..n-1 (n clamped to 0..16). */
static inline __attribute__((always_inline)) __mmask16 moe8_avx512_lanes(int n) {
    return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}

/* Sum of the 16 lanes as the tree (l, l+8), then (l, l+4), (l, l+2), (l, l+1):
 * fixed, so every caller reducing the same vector gets the same bits. */
static inline __attribute__((always_inline)) float moe8_avx512_hsum(__m512 v) {
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v),
                                   _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    q = _mm_add_ss(q, _mm_movehdup_ps(q));
    return _mm_cvtss_f32(q);
}

/* Store the 16 int32 sums v of one output row at columns j..j+nc (nc in
 * 1..16) of the int8 GEMMs: to acc (the i32 variant, when not NULL), else
 * dequantized into y as SEMANTICS §4 fixes it, in this order:
 *     y[j] = ((float)(v[j] + O[j] * xsum) * sx) * S[j]
 * offset[] and scale[] have only n entries: masked loads. */
static inline __attribute__((always_inline)) void moe8_avx512_q8_out16(
    int32_t *acc, float *y, float sx, int32_t xsum, const moe8_qmat *w, __m512i v, int j,
    int nc) {
    const __mmask16 mk = moe8_avx512_lanes(nc);
    if (acc) {
        _mm512_mask_storeu_epi32(acc + j, mk, v);
        return;
    }
    if (w->offset)
        v = _mm512_add_epi32(v, _mm512_mullo_epi32(_mm512_maskz_loadu_epi32(mk, w->offset + j),
                                                   _mm512_set1_epi32(xsum)));
    __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(v), _mm512_set1_ps(sx));
    f = _mm512_mul_ps(f, _mm512_maskz_loadu_ps(mk, w->scale + j));
    _mm512_mask_storeu_ps(y + j, mk, f);
}

/* Sum of x[0..n) (signed bytes, the int8 GEMMs' row sums) as vpdpbusd with 1s
 * as the unsigned operand. */
static inline __attribute__((always_inline)) int32_t moe8_avx512_row_sum(const int8_t *x,
                                                                        int n) {
    const __m512i ones = _mm512_set1_epi8(1);
    __m512i s0 = _mm512_setzero_si512(), s1 = s0;
    int j = 0;
    for (; j + 128 <= n; j += 128) {
        s0 = _mm512_dpbusd_epi32(s0, ones, _mm512_loadu_si512(x + j));
        s1 = _mm512_dpbusd_epi32(s1, ones, _mm512_loadu_si512(x + j + 64));
    }
    for (; j < n; j += 64) {
        const int t = n - j;
        const __mmask64 mk = t >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << t) - 1);
        s0 = _mm512_dpbusd_epi32(s0, ones, _mm512_maskz_loadu_epi8(mk, x + j));
    }
    return _mm512_reduce_add_epi32(_mm512_add_epi32(s0, s1));
}

#endif
