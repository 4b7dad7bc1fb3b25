/*
 * gemm_f32_avx2.c — float GEMM y[r][j] = sum_k x[r][k] * W[j][k] with the
 * weight read in place as F32, F16 (F16C) or BF16 (shift into fp32), AVX2+FMA.
 * W is row-major [n][ldw] (checkpoint [out][in]); x is [m][ldx] fp32.
 *
 * Dot-product form: tiles of up to 4 rows x 3 channels keep 12 ymm
 * accumulators of 8 partial sums along k, reduced horizontally at the end;
 * the k % 8 tail is added in scalar. The summation order differs from the
 * reference (8 interleaved partial sums, FMA), so results agree within the
 * usual dot-product bound ~k * 2^-24 * sum|x*w|, not bit for bit. The order
 * depends only on k, never on the tiling or threads: deterministic.
 */
#include <immintrin.h>

#include "kernels/x86/avx2/avx2_load.h"
#include "kernels/x86/avx2/kernels_avx2.h"

#define L2_BLOCK (512 * 1024) /* weight bytes per block of channels */
#define INLINE static inline __attribute__((always_inline))

/* 8 weights at element i, widened to fp32. */
#define load8 moe8_avx2_load8

INLINE float load1(const void *w, size_t i, const int dt) {
    if (dt == MOE8_DT_F32) return ((const float *)w)[i];
    if (dt == MOE8_DT_F16) return _cvtsh_ss(((const uint16_t *)w)[i]);
    return moe8_bf16_to_f32(((const uint16_t *)w)[i]);
}

INLINE float hsum(__m256 v) {
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

/* y[r][j0+c] for r < mr, c < nc. */
INLINE void tile(float *y, int ldy, const float *x, int ldx, const void *w, int ldw, int j0, int k,
                 const int mr, const int nc, const int dt) {
    __m256 acc[4][3];
#pragma GCC unroll 4
    for (int r = 0; r < mr; r++)
#pragma GCC unroll 3
        for (int c = 0; c < nc; c++) acc[r][c] = _mm256_setzero_ps();
    int t = 0;
    for (; t + 8 <= k; t += 8) {
        __m256 wv[3];
#pragma GCC unroll 3
        for (int c = 0; c < nc; c++) wv[c] = load8(w, (size_t)(j0 + c) * ldw + t, dt);
#pragma GCC unroll 4
        for (int r = 0; r < mr; r++) {
            __m256 xv = _mm256_loadu_ps(x + (size_t)r * ldx + t);
#pragma GCC unroll 3
            for (int c = 0; c < nc; c++) acc[r][c] = _mm256_fmadd_ps(xv, wv[c], acc[r][c]);
        }
    }
    for (int r = 0; r < mr; r++)
        for (int c = 0; c < nc; c++) {
            float s = hsum(acc[r][c]);
            for (int u = t; u < k; u++)
                s += x[(size_t)r * ldx + u] * load1(w, (size_t)(j0 + c) * ldw + u, dt);
            y[(size_t)r * ldy + j0 + c] = s;
        }
}

INLINE void rows(float *y, int ldy, const float *x, int ldx, const void *w, int ldw, int n0, int n1,
                 int k, const int mr, const int dt) {
    int j = n0;
    for (; j + 3 <= n1; j += 3) tile(y, ldy, x, ldx, w, ldw, j, k, mr, 3, dt);
    for (; j < n1; j++) tile(y, ldy, x, ldx, w, ldw, j, k, mr, 1, dt);
}

INLINE void block(float *y, int ldy, const float *x, int ldx, const void *w, int ldw, int m, int n0,
                  int n1, int k, const int dt) {
    for (int r0 = 0; r0 < m; r0 += 4) {
        float *yr = y + (size_t)r0 * ldy;
        const float *xr = x + (size_t)r0 * ldx;
        switch (m - r0 < 4 ? m - r0 : 4) {
        case 1: rows(yr, ldy, xr, ldx, w, ldw, n0, n1, k, 1, dt); break;
        case 2: rows(yr, ldy, xr, ldx, w, ldw, n0, n1, k, 2, dt); break;
        case 3: rows(yr, ldy, xr, ldx, w, ldw, n0, n1, k, 3, dt); break;
        default: rows(yr, ldy, xr, ldx, w, ldw, n0, n1, k, 4, dt); break;
        }
    }
}

/* Blocks of channels whose weights stay in L2 while every row tile passes over them. */
INLINE void run(float *y, int ldy, const float *x, int ldx, const void *w, int ldw, int m, int n0,
                int n1, int k, const int dt) {
    const size_t row_bytes = (size_t)k * (dt == MOE8_DT_F32 ? 4 : 2) + 1;
    const int nb = row_bytes >= L2_BLOCK / 3 ? 3 : 3 * (int)(L2_BLOCK / row_bytes / 3);
    for (int j = n0; j < n1; j += nb)
        block(y, ldy, x, ldx, w, ldw, m, j, n1 - j < nb ? n1 : j + nb, k, dt);
}

void moe8_gemm_f32_wf_avx2(float *y, int ldy, const float *x, int ldx, const void *w,
                           moe8_dtype wdt, int ldw, int m, int n0, int n1, int k) {
#if MOE8_KERNEL_ENTRY_CHECK
    moe8_gemm_f32_wf_check(y, ldy, x, ldx, w, wdt, ldw, m, n0, n1, k);
#endif
    switch (wdt) {
    case MOE8_DT_F32: run(y, ldy, x, ldx, w, ldw, m, n0, n1, k, MOE8_DT_F32); break;
    case MOE8_DT_F16: run(y, ldy, x, ldx, w, ldw, m, n0, n1, k, MOE8_DT_F16); break;
    case MOE8_DT_BF16: run(y, ldy, x, ldx, w, ldw, m, n0, n1, k, MOE8_DT_BF16); break;
    default: moe8_gemm_f32_wf_ref(y, ldy, x, ldx, w, wdt, ldw, m, n0, n1, k); break;
    }
}
