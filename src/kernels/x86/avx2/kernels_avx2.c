/*
 * kernels_avx2.c — the AVX2 kernel table (registry.c lists it): AVX2 + FMA +
 * F16C, the k2 weight layout (vpmaddwd pairs), no per-thread setup.
 */
#include "core/core.h"
#include "kernels/x86/avx2/kernels_avx2.h"

static int supported(void) { return moe8_cpu()->avx2; }

const moe8_kernels moe8_kernels_avx2 = {
    .isa = "avx2",
    .qlayout = &moe8_qlayout_k2,
    .supported = supported,
    .attn_work_floats = moe8_attn_work_floats,
    .quant_rows = moe8_quant_rows_avx2,
    .gemm_q8_i32 = moe8_gemm_q8_i32_avx2,
    .gemm_q8_f32 = moe8_gemm_q8_f32_avx2,
    .q4layout = &moe8_qlayout_q4k8,
    .gemm_q4_i32 = moe8_gemm_q4_i32_avx2,
    .gemm_q4_f32 = moe8_gemm_q4_f32_avx2,
    .gemm_f32_wf = moe8_gemm_f32_wf_avx2,
    .flash_attn = moe8_flash_attn_avx2,
    .exp_f32 = moe8_exp_f32_avx2,
    .gemm_f32_nn = moe8_gemm_f32_nn_avx2,
    .gdn_step = moe8_gdn_step_avx2,
    .read_stream = moe8_read_stream_avx2,
    .int8_peak = moe8_maddwd_peak_avx2,
    .fma_peak = moe8_fma_peak_avx2,
    .int8_ops = 2.0 * 12 * 16,
    .fma_ops = 2.0 * 10 * 8,
    .int8_how = "vpmaddwd+vpaddd ymm (int16 pairs -> int32, exact), 12 chains",
    .fma_how = "vfmadd231ps ymm, 10 chains",
};
