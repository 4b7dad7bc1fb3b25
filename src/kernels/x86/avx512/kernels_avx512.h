/*
 * kernels_avx512.h — prototypes of the AVX-512 kernels (the *_avx512.c files
 * of this folder). They are compiled with -mavx512f -mavx512bw -mavx512vl
 * -mavx512vnni -mfma -mf16c and must only be called through the kernel
 * table, i.e. after its supported() probe said the CPU and the OS (XCR0 ZMM
 * state) have them. Signatures are those of the function-pointer types in
 * kernels.h.
 *
 * The int8 weights of this table use the layout "k4u" (kernels.h,
 * moe8_qlayout_k4u): panels of 16 output channels, K in quads, each weight
 * stored biased as the unsigned byte W + 128:
 *     data[p][kq][c][t] = (uint8_t)(W[16p + c][4kq + t] + 128)   (128 outside n x k)
 * so one 64-byte chunk is the unsigned operand of vpdpbusd for 16 channels x
 * 4 inputs, and the signed activation quad is broadcast from memory. The
 * bias comes back out exactly: sum_t (W + 128) x = sum_t W x + 128 sum_t x.
 */
#ifndef MOE8_KERNELS_AVX512_H
#define MOE8_KERNELS_AVX512_H

#include "kernels/kernels.h"

void moe8_quant_rows_avx512(int8_t *xq, int ldq, float *sx, int32_t *xsum, const float *x,
                            int ldx, int m, int k);
void moe8_gemm_q8_i32_avx512(int32_t *acc, int ldc, const int8_t *xq, int ldq,
                             const moe8_qmat *w, int m, int n0, int n1);
void moe8_gemm_q8_f32_avx512(float *y, int ldy, const int8_t *xq, int ldq, const float *sx,
                             const int32_t *xsum, const moe8_qmat *w, int m, int n0, int n1);
/* W4A8 (gemm_q4_avx512.c): the same on the int4 layout q4k8, nibbles unpacked in registers. */
void moe8_gemm_q4_i32_avx512(int32_t *acc, int ldc, const int8_t *xq, int ldq,
                             const moe8_qmat *w, int m, int n0, int n1);
void moe8_gemm_q4_f32_avx512(float *y, int ldy, const int8_t *xq, int ldq, const float *sx,
                             const int32_t *xsum, const moe8_qmat *w, int m, int n0, int n1);
void moe8_gemm_f32_wf_avx512(float *y, int ldy, const float *x, int ldx, const void *w,
                             moe8_dtype wdt, int ldw, int m, int n0, int n1, int k);
void moe8_flash_attn_avx512(float *out, int ldo, const float *q, int ldq, int n_tok, int G,
                            int D, int32_t pos0, float scale, const moe8_kv_pages *kv,
                            float *work);
void moe8_exp_f32_avx512(float *y, const float *x, int n, float sub, float div);
void moe8_gemm_f32_nn_avx512(float *c, int ldc, const float *a, int lda, const float *b, int ldb,
                            int m, int n, int k, int flags);
void moe8_gdn_step_avx512(float *o, float *S, const float *q, const float *k, const float *v,
                         float e, float beta, int dk, int dv);
/* Scratch floats of one flash-attention tile of `rows` query rows (a multiple
 * of 16 floats). */
size_t moe8_attn_work_floats_avx512(int D, int rows);

/* Roofline probes (roofline_avx512.c), each one thread, registers or one buffer only. */
/* Seconds to read n_bytes (64-byte aligned, multiple of 256) once with zmm loads. */
double moe8_read_stream_avx512(const void *buf, size_t n_bytes, uint32_t *sink);
/* Seconds for n_iter iterations of 12 independent vpdpbusd zmm chains
 * (12 x 64 = 768 int8 MACs per iteration). */
double moe8_dpbusd_peak_avx512(long n_iter, uint32_t *sink);
/* Seconds for n_iter iterations of 12 independent vfmadd231ps zmm chains
 * (12 x 16 = 192 fp32 FMAs per iteration). */
double moe8_fma_peak_avx512(long n_iter, uint32_t *sink);

#endif
