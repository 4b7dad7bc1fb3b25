/*
 * dispatch.c — chooses the kernel table once: AVX2 when the CPU (and OS)
 * support it and MOE8_FORCE_REF is not set, else the scalar references.
 * The AVX2 table lives in x86/kernels_avx2.c. The reference is strong on
 * purpose: a weak undefined symbol does not pull its object out of the static
 * library, so the AVX2 kernels would silently never be linked.
 *
 * Benchmarks may switch on kernel-time accounting (moe8_bench_kernel_timing):
 * moe8_kernels_get() then hands out a table of thin wrappers that time each
 * call of the chosen table into atomic nanosecond counters.
 */
#include <stdatomic.h>
#include <time.h>

#include "core/core.h"
#include "kernels/kernels.h"

extern const moe8_kernels moe8_kernels_avx2;

static const moe8_kernels ref_table = {
    "ref", moe8_quant_rows_ref, moe8_gemm_q8_i32_ref, moe8_gemm_q8_f32_ref,
    moe8_gemm_f32_wf_ref, moe8_flash_attn_ref,
};

const moe8_kernels *moe8_kernels_ref(void) { return &ref_table; }

static const moe8_kernels *chosen(void) {
    if (!moe8_force_ref() && moe8_cpu()->avx2)
        return &moe8_kernels_avx2;
    return &ref_table;
}

/* ---- kernel-time accounting ---------------------------------------------- */

static atomic_int timing_on;
static atomic_llong ns_quant, ns_q8, ns_f32, ns_attn, n_calls;

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void add_time(atomic_llong *c, long long t0) {
    atomic_fetch_add_explicit(c, now_ns() - t0, memory_order_relaxed);
    atomic_fetch_add_explicit(&n_calls, 1, memory_order_relaxed);
}

static void timed_quant(int8_t *xq, int ldq, float *sx, int32_t *xsum, const float *x, int ldx,
                        int m, int k) {
    long long t0 = now_ns();
    chosen()->quant_rows(xq, ldq, sx, xsum, x, ldx, m, k);
    add_time(&ns_quant, t0);
}

static void timed_q8_i32(int32_t *acc, int ldc, const int8_t *xq, int ldq, const moe8_qmat *w,
                         int m, int n0, int n1) {
    long long t0 = now_ns();
    chosen()->gemm_q8_i32(acc, ldc, xq, ldq, w, m, n0, n1);
    add_time(&ns_q8, t0);
}

static void timed_q8_f32(float *y, int ldy, const int8_t *xq, int ldq, const float *sx,
                         const int32_t *xsum, const moe8_qmat *w, int m, int n0, int n1) {
    long long t0 = now_ns();
    chosen()->gemm_q8_f32(y, ldy, xq, ldq, sx, xsum, w, m, n0, n1);
    add_time(&ns_q8, t0);
}

static void timed_f32(float *y, int ldy, const float *x, int ldx, const void *w, moe8_dtype wdt,
                      int ldw, int m, int n0, int n1, int k) {
    long long t0 = now_ns();
    chosen()->gemm_f32_wf(y, ldy, x, ldx, w, wdt, ldw, m, n0, n1, k);
    add_time(&ns_f32, t0);
}

static void timed_attn(float *out, int ldo, const float *q, int ldq, int n_tok, int G, int D,
                       int32_t pos0, float scale, const moe8_kv_pages *kv, float *work) {
    long long t0 = now_ns();
    chosen()->flash_attn(out, ldo, q, ldq, n_tok, G, D, pos0, scale, kv, work);
    add_time(&ns_attn, t0);
}

static const moe8_kernels timed_table = {
    "timed", timed_quant, timed_q8_i32, timed_q8_f32, timed_f32, timed_attn,
};

void moe8_bench_kernel_timing(int on) { atomic_store(&timing_on, on ? 1 : 0); }

void moe8_bench_kernel_times(moe8_kernel_times *out, int reset) {
    out->quant_s = 1e-9 * (double)atomic_load(&ns_quant);
    out->gemm_q8_s = 1e-9 * (double)atomic_load(&ns_q8);
    out->gemm_f32_s = 1e-9 * (double)atomic_load(&ns_f32);
    out->attn_s = 1e-9 * (double)atomic_load(&ns_attn);
    out->n_calls = atomic_load(&n_calls);
    if (reset) {
        atomic_store(&ns_quant, 0);
        atomic_store(&ns_q8, 0);
        atomic_store(&ns_f32, 0);
        atomic_store(&ns_attn, 0);
        atomic_store(&n_calls, 0);
    }
}

const moe8_kernels *moe8_kernels_get(void) {
    return atomic_load_explicit(&timing_on, memory_order_relaxed) ? &timed_table : chosen();
}
