/*
 * avx2_load.h — the one widening load the AVX2 kernels share (float GEMM
 * weights, flash attention's K/V rows). Included only by the x86 ..._avx2.c files, which
 * are compiled with -mavx2 -mfma -mf16c.
 */
#ifndef MOE8_AVX2_LOAD_H
#define MOE8_AVX2_LOAD_H

#include <immintrin.h>

#include "kernels/kernels.h"

/* 8 elements at element i of w (F32, F16 or BF16) widened to fp32, exactly;
 * with dt a compile-time constant after inlining the test folds away. */
static inline __attribute__((always_inline)) __m256 moe8_avx2_load8(const void *w, size_t i,
                                                                    moe8_dtype dt) {
    if (dt == MOE8_DT_F32) return _mm256_loadu_ps((const float *)w + i);
    const __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)w + i));
    if (dt == MOE8_DT_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

#endif
