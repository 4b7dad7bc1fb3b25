/*
 * gdn_avx512.c — the Gated DeltaNet kernels for AVX-512F (kernels.h): the
 * fp32 matrix product of the chunked prefill as 6 x 64 register tiles (a
 * broadcast from row-major a, four zmm of b per row, mask registers for the
 * last columns; column panels outside so b's panel stays in L1), and the recurrent one-token update, which reads the state once
 * for Sᵀk and Sᵀq and then rewrites it while it is still in cache. Sums run
 * in a fixed order set by the shapes only.
 */
#include <immintrin.h>

#include "kernels/x86/avx512/kernels_avx512.h"

enum { MR = 6, NR = 64 };

static inline __mmask16 tail_mask(int w) { /* lanes < w set */
    return w >= 16 ? (__mmask16)0xffff : w <= 0 ? (__mmask16)0 : (__mmask16)((1u << w) - 1);
}

/* One tile: mr rows, nv zmm columns (constants after inlining), the columns
 * beyond n masked by mk[]. */
static inline __attribute__((always_inline)) void tile(float *c, int ldc, const float *a, int lda,
                                                       const float *b, int ldb, int k, int acc,
                                                       const int mr, const int nv, const __mmask16 *mk) {
    __m512 cr[MR][4];
    _Pragma("GCC unroll 8")
    for (int r = 0; r < mr; r++)
        _Pragma("GCC unroll 4")
        for (int x = 0; x < nv; x++) cr[r][x] = _mm512_setzero_ps();
    for (int p = 0; p < k; p++) {
        const float *bp = b + (size_t)p * ldb;
        __m512 bv[4];
        _Pragma("GCC unroll 4")
        for (int x = 0; x < nv; x++) bv[x] = _mm512_maskz_loadu_ps(mk[x], bp + 16 * x);
        _Pragma("GCC unroll 8")
        for (int r = 0; r < mr; r++) {
            const __m512 ar = _mm512_set1_ps(a[(size_t)r * lda + p]);
            _Pragma("GCC unroll 4")
            for (int x = 0; x < nv; x++) cr[r][x] = _mm512_fmadd_ps(ar, bv[x], cr[r][x]);
        }
    }
    _Pragma("GCC unroll 8")
    for (int r = 0; r < mr; r++) {
        float *crow = c + (size_t)r * ldc;
        _Pragma("GCC unroll 4")
        for (int x = 0; x < nv; x++) {
            if (acc) cr[r][x] = _mm512_add_ps(_mm512_maskz_loadu_ps(mk[x], crow + 16 * x), cr[r][x]);
            _mm512_mask_storeu_ps(crow + 16 * x, mk[x], cr[r][x]);
        }
    }
}

#define TILE_NV(MRC)                                                                       \
    switch (nv) {                                                                          \
    case 4: tile(cc, ldc, aa, lda, bb, ldb, kk, acc, MRC, 4, mk); break;                   \
    case 3: tile(cc, ldc, aa, lda, bb, ldb, kk, acc, MRC, 3, mk); break;                   \
    case 2: tile(cc, ldc, aa, lda, bb, ldb, kk, acc, MRC, 2, mk); break;                   \
    default: tile(cc, ldc, aa, lda, bb, ldb, kk, acc, MRC, 1, mk); break;                  \
    }

/* Column panels of 64 outside, row blocks of 6 inside: a panel of b (k x 64)
 * stays in L1 while every row block reads it. */
void moe8_gemm_f32_nn_avx512(float *c, int ldc, const float *a, int lda, const float *b, int ldb,
                             int m, int n, int k, int flags) {
    const int acc = flags & MOE8_GEMM_ACC;
    for (int j0 = 0; j0 < n; j0 += NR) {
        const int w = n - j0 < NR ? n - j0 : NR, nv = (w + 15) / 16;
        const __mmask16 mk[4] = {tail_mask(w), tail_mask(w - 16), tail_mask(w - 32), tail_mask(w - 48)};
        for (int i0 = 0; i0 < m; i0 += MR) {
            const int mr = m - i0 < MR ? m - i0 : MR;
            const int kk = (flags & MOE8_GEMM_TRI_A) && i0 + mr < k ? i0 + mr : k;
            if ((flags & MOE8_GEMM_TRI_C) && i0 + mr <= j0) continue; /* above the diagonal */
            const float *aa = a + (size_t)i0 * lda, *bb = b + j0;
            float *cc = c + (size_t)i0 * ldc + j0;
            switch (mr) {
            case 6: TILE_NV(6) break;
            case 5: TILE_NV(5) break;
            case 4: TILE_NV(4) break;
            case 3: TILE_NV(3) break;
            case 2: TILE_NV(2) break;
            default: TILE_NV(1) break;
            }
        }
    }
}

/* u = Sᵀk and w = Sᵀq over columns j0 .. j0 + 16 nv (nv zmm each, the last
 * masked by mt). */
static inline __attribute__((always_inline)) void step_read(float *u, float *w, const float *S,
                                                            const float *q, const float *k, int dk,
                                                            int dv, int j0, const int nv,
                                                            __mmask16 mt) {
    __m512 cu[4], cw[4];
    _Pragma("GCC unroll 4")
    for (int x = 0; x < nv; x++) cu[x] = cw[x] = _mm512_setzero_ps();
    for (int i = 0; i < dk; i++) {
        const float *s = S + (size_t)i * dv + j0;
        const __m512 ki = _mm512_set1_ps(k[i]), qi = _mm512_set1_ps(q[i]);
        _Pragma("GCC unroll 4")
        for (int x = 0; x < nv; x++) {
            const __m512 sv = _mm512_maskz_loadu_ps(x == nv - 1 ? mt : (__mmask16)0xffff, s + 16 * x);
            cu[x] = _mm512_fmadd_ps(sv, ki, cu[x]);
            cw[x] = _mm512_fmadd_ps(sv, qi, cw[x]);
        }
    }
    _Pragma("GCC unroll 4")
    for (int x = 0; x < nv; x++) {
        const __mmask16 mx = x == nv - 1 ? mt : (__mmask16)0xffff;
        _mm512_mask_storeu_ps(u + j0 + 16 * x, mx, cu[x]);
        _mm512_mask_storeu_ps(w + j0 + 16 * x, mx, cw[x]);
    }
}

void moe8_gdn_step_avx512(float *o, float *S, const float *q, const float *k, const float *v,
                          float e, float beta, int dk, int dv) {
    float u[dv], w[dv], kq = 0.0f;
    int j = 0;
    for (int i = 0; i < dk; i++) kq += k[i] * q[i];
    for (; j + 64 <= dv; j += 64) step_read(u, w, S, q, k, dk, dv, j, 4, 0xffff);
    for (; j < dv; j += 16) step_read(u, w, S, q, k, dk, dv, j, 1, tail_mask(dv - j));
    for (j = 0; j < dv; j++) { /* u becomes d */
        u[j] = beta * (v[j] - e * u[j]);
        o[j] = e * w[j] + kq * u[j];
    }
    const __m512 ev = _mm512_set1_ps(e);
    for (int i = 0; i < dk; i++) {
        float *s = S + (size_t)i * dv;
        const __m512 ki = _mm512_set1_ps(k[i]);
        for (j = 0; j < dv; j += 16) {
            const __mmask16 mj = tail_mask(dv - j);
            _mm512_mask_storeu_ps(s + j, mj, _mm512_fmadd_ps(ki, _mm512_maskz_loadu_ps(mj, u + j),
                                                             _mm512_mul_ps(ev, _mm512_maskz_loadu_ps(mj, s + j))));
        }
    }
}
