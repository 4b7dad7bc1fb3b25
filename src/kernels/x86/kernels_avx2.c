/*
 * kernels_avx2.c — the AVX2 kernel table. dispatch.c references it weakly
 * and hands it out only when the CPU probe found AVX2 + FMA + F16C.
 */
#include "kernels/x86/kernels_avx2.h"

const moe8_kernels moe8_kernels_avx2 = {
    "avx2", moe8_quant_rows_avx2, moe8_gemm_q8_i32_avx2, moe8_gemm_q8_f32_avx2,
    moe8_gemm_f32_wf_avx2, moe8_flash_attn_avx2,
};
