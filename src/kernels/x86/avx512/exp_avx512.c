/*
 * exp_avx512.c — moe8_exp_f32 on 16 floats a step, in two halves of 8
 * doubles: the reference's operations lane by lane (the same fused
 * multiply-adds, the table read by a gather), then the out-of-range lanes
 * (|x| >= 88, inf, NaN) set as the reference sets them. Bit-identical to
 * moe8_exp_f32_ref.
 */
#include <immintrin.h>
#include <math.h>

#include "kernels/x86/avx512/kernels_avx512.h"

static inline __m256 exp8(__m256 x) {
    const __m512d xd = _mm512_cvtps_pd(x), inv = _mm512_set1_pd(MOE8_EXPF_INVLN2N);
    const __m512d shift = _mm512_set1_pd(MOE8_EXPF_SHIFT);
    const __m512d z = _mm512_fmadd_pd(inv, xd, shift), kd = _mm512_sub_pd(z, shift);
    const __m512d r = _mm512_fmsub_pd(inv, xd, kd);
    const __m512i ki = _mm512_castpd_si512(z);
    const __m512i t = _mm512_add_epi64(
        _mm512_i64gather_epi64(_mm512_and_si512(ki, _mm512_set1_epi64(31)), (const void *)moe8_expf_tab, 8),
        _mm512_slli_epi64(ki, 47));
    const __m512d p = _mm512_fmadd_pd(r, _mm512_set1_pd(MOE8_EXPF_C0), _mm512_set1_pd(MOE8_EXPF_C1));
    const __m512d q = _mm512_fmadd_pd(r, _mm512_set1_pd(MOE8_EXPF_C2), _mm512_set1_pd(1.0));
    const __m512d y = _mm512_fmadd_pd(p, _mm512_mul_pd(r, r), q);
    return _mm512_cvtpd_ps(_mm512_mul_pd(y, _mm512_castsi512_pd(t)));
}

void moe8_exp_f32_avx512(float *y, const float *x, int n, float sub, float div) {
    const __m512 vs = _mm512_set1_ps(sub), vd = _mm512_set1_ps(div);
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 v = _mm512_div_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i), vs), vd);
        const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
        __m512 e = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(
            exp8(_mm512_castps512_ps256(v)))), _mm256_castps_pd(exp8(hi)), 1));
        /* the ranges past |x| >= 88 (in this order, later ones win) */
        e = _mm512_mask_mov_ps(e, _mm512_cmp_ps_mask(v, _mm512_set1_ps(MOE8_EXPF_MAY_UFLOW), _CMP_LT_OQ),
                               _mm512_set1_ps(0x1p-149f));
        e = _mm512_mask_mov_ps(e, _mm512_cmp_ps_mask(v, _mm512_set1_ps(MOE8_EXPF_UFLOW), _CMP_LT_OQ),
                               _mm512_setzero_ps());
        e = _mm512_mask_mov_ps(e, _mm512_cmp_ps_mask(v, _mm512_set1_ps(MOE8_EXPF_OFLOW), _CMP_GT_OQ),
                               _mm512_set1_ps(INFINITY));
        e = _mm512_mask_mov_ps(e, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), _mm512_add_ps(v, v));
        _mm512_storeu_ps(y + i, e);
    }
    moe8_exp_f32_ref(y + i, x + i, n - i, sub, div);
}
