/*
 * kernels_avx2.h — prototypes of the AVX2 kernels (the x86 *_avx2.c files). These are
 * compiled with -mavx2 -mfma -mf16c and must only be called through the
 * dispatch table, i.e. after the run-time CPU probe said AVX2 is there.
 * Signatures are those of the function-pointer types in kernels.h.
 */
#ifndef MOE8_KERNELS_AVX2_H
#define MOE8_KERNELS_AVX2_H

#include "kernels/kernels.h"


void moe8_quant_rows_avx2(int8_t *xq, int ldq, float *sx, int32_t *xsum, const float *x, int ldx,
                          int m, int k);
void moe8_gemm_q8_i32_avx2(int32_t *acc, int ldc, const int8_t *xq, int ldq, const moe8_qmat *w,
                           int m, int n0, int n1);
void moe8_gemm_q8_f32_avx2(float *y, int ldy, const int8_t *xq, int ldq, const float *sx,
                           const int32_t *xsum, const moe8_qmat *w, int m, int n0, int n1);
/* W4A8 (gemm_q4_avx2.c): the same on the int4 layout q4k8, nibbles unpacked in registers. */
void moe8_gemm_q4_i32_avx2(int32_t *acc, int ldc, const int8_t *xq, int ldq, const moe8_qmat *w,
                           int m, int n0, int n1);
void moe8_gemm_q4_f32_avx2(float *y, int ldy, const int8_t *xq, int ldq, const float *sx,
                           const int32_t *xsum, const moe8_qmat *w, int m, int n0, int n1);
void moe8_gemm_f32_wf_avx2(float *y, int ldy, const float *x, int ldx, const void *w,
                           moe8_dtype wdt, int ldw, int m, int n0, int n1, int k);
void moe8_flash_attn_avx2(float *out, int ldo, const float *q, int ldq, int n_tok, int G, int D,
                          int32_t pos0, float scale, const moe8_kv_pages *kv, float *work);
void moe8_exp_f32_avx2(float *y, const float *x, int n, float sub, float div);
void moe8_gemm_f32_nn_avx2(float *c, int ldc, const float *a, int lda, const float *b, int ldb,
                          int m, int n, int k, int flags);
void moe8_gdn_step_avx2(float *o, float *S, const float *q, const float *k, const float *v,
                       float e, float beta, int dk, int dv);

/* Roofline probes (roofline_avx2.c). */
/* Seconds to read n_bytes (64-byte aligned, multiple of 256) once with ymm loads;
 * the sum it returns through *sink keeps the loads alive. */
double moe8_read_stream_avx2(const void *buf, size_t n_bytes, uint32_t *sink);
/* Seconds for n_iter iterations of 12 vpmaddwd + 12 vpaddd on registers
 * (12 x 16 = 192 int8-range MACs per iteration). */
double moe8_maddwd_peak_avx2(long n_iter, uint32_t *sink);
/* Seconds for n_iter iterations of 10 independent vfmadd231ps ymm chains
 * (80 fp32 FMAs per iteration). */
double moe8_fma_peak_avx2(long n_iter, uint32_t *sink);

#endif
