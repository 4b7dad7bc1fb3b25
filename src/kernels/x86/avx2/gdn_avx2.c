/*
 * gdn_avx2.c — the Gated DeltaNet kernels for AVX2 + FMA (kernels.h): the
 * fp32 matrix product of the chunked prefill as 6 x 16 register tiles (a
 * broadcast from row-major a, two ymm rows of b, masked loads and stores for
 * the last columns), and the recurrent one-token update, which reads the
 * state once for Sᵀk and Sᵀq and then rewrites it while it is still in cache.
 * Sums run in a fixed order set by the shapes only.
 */
#include <immintrin.h>

#include "kernels/x86/avx2/kernels_avx2.h"

enum { MR = 6, NR = 16 };

static inline __m256i tail_mask(int w) { /* lanes < w set (w may be <= 0 or >= 8) */
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(w), idx);
}

/* One tile: mr rows (a constant after inlining), 16 columns, the last tile's
 * columns masked by m0, m1 when `tail`. */
static inline __attribute__((always_inline)) void tile(float *c, int ldc, const float *a, int lda,
                                                       const float *b, int ldb, int k, int acc,
                                                       const int mr, const int tail, __m256i m0,
                                                       __m256i m1) {
    __m256 c0[MR], c1[MR];
    _Pragma("GCC unroll 8")
    for (int r = 0; r < mr; r++) c0[r] = c1[r] = _mm256_setzero_ps();
    for (int p = 0; p < k; p++) {
        const float *bp = b + (size_t)p * ldb;
        const __m256 b0 = tail ? _mm256_maskload_ps(bp, m0) : _mm256_loadu_ps(bp);
        const __m256 b1 = tail ? _mm256_maskload_ps(bp + 8, m1) : _mm256_loadu_ps(bp + 8);
        _Pragma("GCC unroll 8")
        for (int r = 0; r < mr; r++) {
            const __m256 ar = _mm256_broadcast_ss(a + (size_t)r * lda + p);
            c0[r] = _mm256_fmadd_ps(ar, b0, c0[r]);
            c1[r] = _mm256_fmadd_ps(ar, b1, c1[r]);
        }
    }
    _Pragma("GCC unroll 8")
    for (int r = 0; r < mr; r++) {
        float *cr = c + (size_t)r * ldc;
        if (tail) {
            if (acc) {
                c0[r] = _mm256_add_ps(_mm256_maskload_ps(cr, m0), c0[r]);
                c1[r] = _mm256_add_ps(_mm256_maskload_ps(cr + 8, m1), c1[r]);
            }
            _mm256_maskstore_ps(cr, m0, c0[r]);
            _mm256_maskstore_ps(cr + 8, m1, c1[r]);
        } else {
            if (acc) {
                c0[r] = _mm256_add_ps(_mm256_loadu_ps(cr), c0[r]);
                c1[r] = _mm256_add_ps(_mm256_loadu_ps(cr + 8), c1[r]);
            }
            _mm256_storeu_ps(cr, c0[r]);
            _mm256_storeu_ps(cr + 8, c1[r]);
        }
    }
}

#define TILE_CASES(TAIL)                                                                   \
    switch (mr) {                                                                          \
    case 6: tile(cc, ldc, aa, lda, bb, ldb, kk, acc, 6, TAIL, m0, m1); break;              \
    case 5: tile(cc, ldc, aa, lda, bb, ldb, kk, acc, 5, TAIL, m0, m1); break;              \
    case 4: tile(cc, ldc, aa, lda, bb, ldb, kk, acc, 4, TAIL, m0, m1); break;              \
    case 3: tile(cc, ldc, aa, lda, bb, ldb, kk, acc, 3, TAIL, m0, m1); break;              \
    case 2: tile(cc, ldc, aa, lda, bb, ldb, kk, acc, 2, TAIL, m0, m1); break;              \
    default: tile(cc, ldc, aa, lda, bb, ldb, kk, acc, 1, TAIL, m0, m1); break;             \
    }

/* Column panels of 16 outside, row blocks of 6 inside: a panel of b (k x 16)
 * stays in L1 while every row block reads it. */
void moe8_gemm_f32_nn_avx2(float *c, int ldc, const float *a, int lda, const float *b, int ldb,
                           int m, int n, int k, int flags) {
    const int acc = flags & MOE8_GEMM_ACC;
    for (int j0 = 0; j0 < n; j0 += NR) {
        const __m256i m0 = tail_mask(n - j0), m1 = tail_mask(n - j0 - 8);
        for (int i0 = 0; i0 < m; i0 += MR) {
            const int mr = m - i0 < MR ? m - i0 : MR;
            const int kk = (flags & MOE8_GEMM_TRI_A) && i0 + mr < k ? i0 + mr : k;
            if ((flags & MOE8_GEMM_TRI_C) && i0 + mr <= j0) continue; /* above the diagonal */
            const float *aa = a + (size_t)i0 * lda, *bb = b + j0;
            float *cc = c + (size_t)i0 * ldc + j0;
            if (j0 + NR <= n) {
                TILE_CASES(0)
            } else {
                TILE_CASES(1)
            }
        }
    }
}

/* u = Sᵀk and w = Sᵀq over columns j0 .. j0 + 8 nv (nv ymm each). */
static inline __attribute__((always_inline)) void step_read(float *u, float *w, const float *S,
                                                            const float *q, const float *k, int dk,
                                                            int dv, int j0, const int nv) {
    __m256 cu[4], cw[4];
    _Pragma("GCC unroll 4")
    for (int x = 0; x < nv; x++) cu[x] = cw[x] = _mm256_setzero_ps();
    for (int i = 0; i < dk; i++) {
        const float *s = S + (size_t)i * dv + j0;
        const __m256 ki = _mm256_broadcast_ss(k + i), qi = _mm256_broadcast_ss(q + i);
        _Pragma("GCC unroll 4")
        for (int x = 0; x < nv; x++) {
            const __m256 sv = _mm256_loadu_ps(s + 8 * x);
            cu[x] = _mm256_fmadd_ps(sv, ki, cu[x]);
            cw[x] = _mm256_fmadd_ps(sv, qi, cw[x]);
        }
    }
    _Pragma("GCC unroll 4")
    for (int x = 0; x < nv; x++) {
        _mm256_storeu_ps(u + j0 + 8 * x, cu[x]);
        _mm256_storeu_ps(w + j0 + 8 * x, cw[x]);
    }
}

void moe8_gdn_step_avx2(float *o, float *S, const float *q, const float *k, const float *v, float e,
                        float beta, int dk, int dv) {
    float u[dv], w[dv], kq = 0.0f;
    int j = 0;
    for (int i = 0; i < dk; i++) kq += k[i] * q[i];
    for (; j + 32 <= dv; j += 32) step_read(u, w, S, q, k, dk, dv, j, 4);
    for (; j + 8 <= dv; j += 8) step_read(u, w, S, q, k, dk, dv, j, 1);
    for (; j < dv; j++) {
        float uj = 0.0f, wj = 0.0f;
        for (int i = 0; i < dk; i++) {
            uj += S[(size_t)i * dv + j] * k[i];
            wj += S[(size_t)i * dv + j] * q[i];
        }
        u[j] = uj, w[j] = wj;
    }
    for (j = 0; j < dv; j++) { /* u becomes d */
        u[j] = beta * (v[j] - e * u[j]);
        o[j] = e * w[j] + kq * u[j];
    }
    const __m256 ev = _mm256_set1_ps(e);
    for (int i = 0; i < dk; i++) {
        float *s = S + (size_t)i * dv;
        const __m256 ki = _mm256_broadcast_ss(k + i);
        for (j = 0; j + 8 <= dv; j += 8)
            _mm256_storeu_ps(s + j, _mm256_fmadd_ps(ki, _mm256_loadu_ps(u + j),
                                                    _mm256_mul_ps(ev, _mm256_loadu_ps(s + j))));
        for (; j < dv; j++) s[j] = e * s[j] + k[i] * u[j];
    }
}
