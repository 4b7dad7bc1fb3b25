/*
 * exp_avx2.c — moe8_exp_f32 on 8 floats a step, in two halves of 4 doubles:
 * the reference's operations lane by lane (the same fused multiply-adds, the
 * table read by a gather), then the out-of-range lanes (|x| >= 88, inf,
 * NaN) set as the reference sets them. Bit-identical to moe8_exp_f32_ref.
 */
#include <immintrin.h>
#include <math.h>

#include "kernels/x86/avx2/kernels_avx2.h"

static inline __m128 exp4(__m128 x) {
    const __m256d xd = _mm256_cvtps_pd(x), inv = _mm256_set1_pd(MOE8_EXPF_INVLN2N);
    const __m256d shift = _mm256_set1_pd(MOE8_EXPF_SHIFT);
    const __m256d z = _mm256_fmadd_pd(inv, xd, shift), kd = _mm256_sub_pd(z, shift);
    const __m256d r = _mm256_fmsub_pd(inv, xd, kd);
    const __m256i ki = _mm256_castpd_si256(z);
    const __m256i t = _mm256_add_epi64(
        _mm256_i64gather_epi64((const long long *)moe8_expf_tab, _mm256_and_si256(ki, _mm256_set1_epi64x(31)), 8),
        _mm256_slli_epi64(ki, 47));
    const __m256d p = _mm256_fmadd_pd(r, _mm256_set1_pd(MOE8_EXPF_C0), _mm256_set1_pd(MOE8_EXPF_C1));
    const __m256d q = _mm256_fmadd_pd(r, _mm256_set1_pd(MOE8_EXPF_C2), _mm256_set1_pd(1.0));
    const __m256d y = _mm256_fmadd_pd(p, _mm256_mul_pd(r, r), q);
    return _mm256_cvtpd_ps(_mm256_mul_pd(y, _mm256_castsi256_pd(t)));
}

void moe8_exp_f32_avx2(float *y, const float *x, int n, float sub, float div) {
    const __m256 vs = _mm256_set1_ps(sub), vd = _mm256_set1_ps(div);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_div_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vs), vd);
        __m256 e = _mm256_set_m128(exp4(_mm256_extractf128_ps(v, 1)), exp4(_mm256_castps256_ps128(v)));
        /* the ranges past |x| >= 88 (in this order, later ones win) */
        e = _mm256_blendv_ps(e, _mm256_set1_ps(0x1p-149f), _mm256_cmp_ps(v, _mm256_set1_ps(MOE8_EXPF_MAY_UFLOW), _CMP_LT_OQ));
        e = _mm256_blendv_ps(e, _mm256_setzero_ps(), _mm256_cmp_ps(v, _mm256_set1_ps(MOE8_EXPF_UFLOW), _CMP_LT_OQ));
        e = _mm256_blendv_ps(e, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(v, _mm256_set1_ps(MOE8_EXPF_OFLOW), _CMP_GT_OQ));
        e = _mm256_blendv_ps(e, _mm256_add_ps(v, v), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        _mm256_storeu_ps(y + i, e);
    }
    moe8_exp_f32_ref(y + i, x + i, n - i, sub, div);
}
