/*
 * kernels_amx.c — the AMX kernel table (registry.c lists it first): the int8
 * GEMMs on AMX tiles (tdpbsud) over the AVX-512 table's k4u layout, with the
 * AVX-512 VNNI kernel for the few-row products where tiles lose (decode);
 * quantization, the float GEMM and flash attention are the AVX-512 table's.
 * Per-thread setup: the tile configuration.
 *
 * W4A8 (int4 experts, SEMANTICS §4b): the AVX-512 table's int4 kernel itself,
 * on the shared q4k8 layout, for every row count. Decode (1-4 rows) is where
 * int4 pays, and there AMX already hands over to VNNI (fewer than 8 rows);
 * for tiles, int4 would have to be unpacked into an int8 B tile in memory
 * for every chunk (tdpbsud reads bytes), which no machine here can run or
 * time. Sharing the function keeps the AMX table's results bit-identical to
 * the tested AVX-512 ones by construction.
 */
#include "core/core.h"
#include "kernels/x86/amx/kernels_amx.h"
#include "kernels/x86/avx512/kernels_avx512.h"

static int supported(void) { return moe8_cpu()->amx_int8; }

const moe8_kernels moe8_kernels_amx = {
    .isa = "amx",
    .qlayout = &moe8_qlayout_k4u,
    .supported = supported,
    .thread_init = moe8_amx_thread_init,
    .attn_work_floats = moe8_attn_work_floats_avx512,
    .quant_rows = moe8_quant_rows_avx512,
    .gemm_q8_i32 = moe8_gemm_q8_i32_amx,
    .gemm_q8_f32 = moe8_gemm_q8_f32_amx,
    .q4layout = &moe8_qlayout_q4k8,
    .gemm_q4_i32 = moe8_gemm_q4_i32_avx512,
    .gemm_q4_f32 = moe8_gemm_q4_f32_avx512,
    .gemm_f32_wf = moe8_gemm_f32_wf_avx512,
    .flash_attn = moe8_flash_attn_avx512,
    .exp_f32 = moe8_exp_f32_avx512,
    .gemm_f32_nn = moe8_gemm_f32_nn_avx512,
    .gdn_step = moe8_gdn_step_avx512,
    .read_stream = moe8_read_stream_avx512,
    .int8_peak = moe8_tdpbsud_peak_amx,
    .fma_peak = moe8_fma_peak_avx512,
    .int8_ops = 2.0 * 4 * 16 * 16 * 64,
    .fma_ops = 2.0 * 12 * 16,
    .int8_how = "tdpbsud (s8 x u8 quads -> int32, exact), 4 tiles of 16 x 16",
    .fma_how = "vfmadd231ps zmm, 12 chains",
};
