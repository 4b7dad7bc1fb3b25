/*
 * kernels_amx.h — prototypes of the AMX kernels (the *_amx.c files of this
 * folder). They are compiled with the AVX-512 flags plus -mamx-tile
 * -mamx-int8 and must only be called through the kernel table, i.e. after
 * its supported() probe said the CPU has AMX-INT8 and AVX-512 VNNI, the OS
 * saves the tile state (XCR0) and granted it to this process
 * (arch_prctl(ARCH_REQ_XCOMP_PERM), core/cpu.c).
 *
 * The table reads the AVX-512 table's layout, k4u (kernels.h): panels of 16
 * output channels, K in quads, each weight stored as the unsigned byte
 * W + 128. One panel's 64-input chunk, 16 quads x 64 bytes, is exactly an
 * AMX B tile (K/4 rows of 16 channels x 4 bytes), so `tdpbsud` (signed
 * activations x unsigned weights) reads the weights in place, and the same
 * correction as vpdpbusd's takes the bias back out (gemm_q8_amx.c). Weights
 * packed for one of the two tables serve the other.
 */
#ifndef MOE8_KERNELS_AMX_H
#define MOE8_KERNELS_AMX_H

#include "kernels/kernels.h"

void moe8_gemm_q8_i32_amx(int32_t *acc, int ldc, const int8_t *xq, int ldq, const moe8_qmat *w,
                          int m, int n0, int n1);
void moe8_gemm_q8_f32_amx(float *y, int ldy, const int8_t *xq, int ldq, const float *sx,
                          const int32_t *xsum, const moe8_qmat *w, int m, int n0, int n1);
/* Configure this thread's tiles (idempotent; the GEMMs also do it on first use). */
void moe8_amx_thread_init(void);
/* Seconds for n_iter iterations of 4 independent tdpbsud into 4 tiles
 * (4 x 16 x 16 x 64 = 65536 int8 MACs per iteration). */
double moe8_tdpbsud_peak_amx(long n_iter, uint32_t *sink);

#endif
