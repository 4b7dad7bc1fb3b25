/*
 * dispatch.c — chooses the kernel table once: AVX2 when the CPU (and OS)
 * support it and MOE8_FORCE_REF is not set, else the scalar references.
 * The AVX2 table lives in x86/kernels_avx2.c; it is referenced weakly so the
 * library still links while a build has no AVX2 kernels.
 */
#include "core/core.h"
#include "kernels/kernels.h"

extern const moe8_kernels moe8_kernels_avx2 __attribute__((weak));

static const moe8_kernels ref_table = {
    "ref", moe8_quant_rows_ref, moe8_gemm_q8_i32_ref, moe8_gemm_q8_f32_ref, moe8_gemm_f32_wf_ref,
};

const moe8_kernels *moe8_kernels_ref(void) { return &ref_table; }

const moe8_kernels *moe8_kernels_get(void) {
    if (!moe8_force_ref() && moe8_cpu()->avx2 && &moe8_kernels_avx2 != NULL)
        return &moe8_kernels_avx2;
    return &ref_table;
}
