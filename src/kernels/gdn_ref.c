/*
 * gdn_ref.c — the scalar references of the Gated DeltaNet kernels
 * (kernels.h): the small fp32 matrix product of the chunked prefill and the
 * one-token state update of the recurrent form. Plain loops, sums in index
 * order; the vector tables are checked against these and against a double
 * reference (tests/test_gdn.c).
 */
#include "kernels/kernels.h"

void moe8_gemm_f32_nn_ref(float *c, int ldc, const float *a, int lda, const float *b, int ldb,
                          int m, int n, int k, int flags) {
    for (int i = 0; i < m; i++) {
        const int kk = (flags & MOE8_GEMM_TRI_A) && i + 1 < k ? i + 1 : k;
        const int nn = (flags & MOE8_GEMM_TRI_C) && i + 1 < n ? i + 1 : n;
        float *ci = c + (size_t)i * ldc;
        if (!(flags & MOE8_GEMM_ACC))
            for (int j = 0; j < nn; j++) ci[j] = 0.0f;
        for (int p = 0; p < kk; p++) {
            const float aip = a[(size_t)i * lda + p];
            const float *bp = b + (size_t)p * ldb;
            for (int j = 0; j < nn; j++) ci[j] += aip * bp[j];
        }
    }
}

void moe8_gdn_step_ref(float *o, float *S, const float *q, const float *k, const float *v, float e,
                       float beta, int dk, int dv) {
    float kq = 0.0f;
    for (int i = 0; i < dk; i++) kq += k[i] * q[i];
    for (int j = 0; j < dv; j++) {
        float u = 0.0f, w = 0.0f;
        for (int i = 0; i < dk; i++) {
            u += S[(size_t)i * dv + j] * k[i];
            w += S[(size_t)i * dv + j] * q[i];
        }
        const float d = beta * (v[j] - e * u);
        o[j] = e * w + kq * d;
        for (int i = 0; i < dk; i++) S[(size_t)i * dv + j] = e * S[(size_t)i * dv + j] + k[i] * d;
    }
}
