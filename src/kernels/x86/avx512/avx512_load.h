/*
 * avx512_load.h — the widening loads the AVX-512 float kernels share (float
 * GEMM weights, flash attention's K/V rows): 16 elements of F32, F16 or BF16
 * to fp32, exactly, whole or under a lane mask (masked-off lanes are 0 and
 * are not read, so a tail never touches memory past its end). Included only
 * by the ..._avx512.c files of this folder, compiled with -mavx512f/bw/vl.
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

#endif
