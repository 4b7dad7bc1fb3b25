/*
 * kernels_avx512.c — the AVX-512 kernel table (registry.c lists it): AVX-512
 * F/BW/VL/VNNI with the OS's zmm state, the k4u weight layout (vpdpbusd,
 * weights stored + 128), no per-thread setup.
 */
#include "core/core.h"
#include "kernels/x86/avx512/kernels_avx512.h"

static int supported(void) { return moe8_cpu()->avx512; }

const moe8_kernels moe8_kernels_avx512 = {
    .isa = "avx512",
    .qlayout = &moe8_qlayout_k4u,
    .supported = supported,
    .attn_work_floats = moe8_attn_work_floats_avx512,
    .quant_rows = moe8_quant_rows_avx512,
    .gemm_q8_i32 = moe8_gemm_q8_i32_avx512,
    .gemm_q8_f32 = moe8_gemm_q8_f32_avx512,
    .q4layout = &moe8_qlayout_q4k8,
    .gemm_q4_i32 = moe8_gemm_q4_i32_avx512,
    .gemm_q4_f32 = moe8_gemm_q4_f32_avx512,
    .gemm_f32_wf = moe8_gemm_f32_wf_avx512,
    .flash_attn = moe8_flash_attn_avx512,
    .exp_f32 = moe8_exp_f32_avx512,
    .gemm_f32_nn = moe8_gemm_f32_nn_avx512,
    .gdn_step = moe8_gdn_step_avx512,
    .read_stream = moe8_read_stream_avx512,
    .int8_peak = moe8_dpbusd_peak_avx512,
    .fma_peak = moe8_fma_peak_avx512,
    .int8_ops = 2.0 * 12 * 64,
    .fma_ops = 2.0 * 12 * 16,
    .int8_how = "vpdpbusd zmm (u8 x s8 quads -> int32, exact), 12 chains",
    .fma_how = "vfmadd231ps zmm, 12 chains",
};
