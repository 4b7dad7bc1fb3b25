/*
 * registry.c — the kernel tables, best first, and the choice among them:
 * MOE8_ISA=NAME when set (MOE8_FORCE_REF=1 means MOE8_ISA=ref), else the
 * first table whose supported() probe passes. Chosen once per process.
 * A table is in the list only when CMake built its folder (MOE8_HAVE_<ISA>).
 * The references are referenced strongly on purpose: a weak undefined
 * symbol does not pull its object out of the static library, so a table
 * would silently never be linked.
 *
 * Benchmarks may switch on kernel-time accounting (moe8_bench_kernel_timing):
 * moe8_kernels_get() then hands out a copy of the chosen table whose kernels
 * are thin wrappers that time each call into atomic nanosecond counters.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/core.h"
#include "kernels/kernels.h"

#if MOE8_HAVE_AVX2
extern const moe8_kernels moe8_kernels_avx2;
#endif
#if MOE8_HAVE_AVX512
extern const moe8_kernels moe8_kernels_avx512;
#endif
#if MOE8_HAVE_AMX
extern const moe8_kernels moe8_kernels_amx;
#endif

static double ref_read(const void *buf, size_t n_bytes, uint32_t *sink);
static double ref_int8_peak(long n_iter, uint32_t *sink);
static double ref_fma_peak(long n_iter, uint32_t *sink);

static const moe8_kernels ref_table = {
    .isa = "ref",
    .qlayout = &moe8_qlayout_k2,
    .attn_work_floats = moe8_attn_work_floats_ref,
    .quant_rows = moe8_quant_rows_ref,
    .gemm_q8_i32 = moe8_gemm_q8_i32_ref,
    .gemm_q8_f32 = moe8_gemm_q8_f32_ref,
    .q4layout = &moe8_qlayout_q4k8,
    .gemm_q4_i32 = moe8_gemm_q8_i32_ref, /* reads any layout through its `at` */
    .gemm_q4_f32 = moe8_gemm_q8_f32_ref,
    .gemm_f32_wf = moe8_gemm_f32_wf_ref,
    .flash_attn = moe8_flash_attn_ref,
    .exp_f32 = moe8_exp_f32_ref,
    .gemm_f32_nn = moe8_gemm_f32_nn_ref,
    .gdn_step = moe8_gdn_step_ref,
    .read_stream = ref_read,
    .int8_peak = ref_int8_peak,
    .fma_peak = ref_fma_peak,
    .int8_ops = 2.0 * 8,
    .fma_ops = 2.0 * 8,
    .int8_how = "scalar int32 multiply-add, 8 chains",
    .fma_how = "scalar float multiply-add, 8 chains",
};

static const moe8_kernels *const tables[] = {
#if MOE8_HAVE_AMX
    &moe8_kernels_amx,
#endif
#if MOE8_HAVE_AVX512
    &moe8_kernels_avx512,
#endif
#if MOE8_HAVE_AVX2
    &moe8_kernels_avx2,
#endif
    &ref_table,
};
#define N_TABLES ((int)(sizeof tables / sizeof tables[0]))

const moe8_kernels *moe8_kernels_ref(void) { return &ref_table; }
int moe8_kernels_n_tables(void) { return N_TABLES; }
const moe8_kernels *moe8_kernels_table(int i) { return i >= 0 && i < N_TABLES ? tables[i] : NULL; }

const moe8_kernels *moe8_kernels_find(const char *isa) {
    for (int i = 0; i < N_TABLES; i++)
        if (isa && !strcmp(tables[i]->isa, isa)) return tables[i];
    return NULL;
}

int moe8_kernels_supported(const moe8_kernels *t) { return t && (!t->supported || t->supported()); }

int moe8_kernels_reads(const moe8_kernels *t, const moe8_qlayout *L) {
    return t->qlayout == L || t->q4layout == L || !strcmp(t->isa, "ref");
}

const moe8_kernels *moe8_kernels_for_layout(const moe8_qlayout *L) {
    for (int i = 0; i < N_TABLES; i++)
        if ((tables[i]->qlayout == L || tables[i]->q4layout == L) &&
            moe8_kernels_supported(tables[i]))
            return tables[i];
    return &ref_table; /* reads any layout */
}

/* What MOE8_FORCE_REF=1 (first) or MOE8_ISA asks for: NULL when nothing is set. */
static const char *requested(void) {
    const char *v = getenv("MOE8_FORCE_REF");
    if (v && v[0] && strcmp(v, "0") != 0) return "ref";
    v = getenv("MOE8_ISA");
    return v && v[0] ? v : NULL;
}

moe8_status moe8_kernels_check(moe8_error *err) {
    const char *want = requested();
    const moe8_kernels *t = want ? moe8_kernels_find(want) : NULL;
    if (!want) return MOE8_OK;
    if (!t) {
        char names[128] = "";
        for (int i = 0; i < N_TABLES; i++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "",
                     tables[i]->isa);
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1,
                         "MOE8_ISA=%s: unknown kernel table (this build has %s)", want, names);
    }
    if (!moe8_kernels_supported(t))
        return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1,
                         "MOE8_ISA=%s: this CPU (or its OS) cannot run the %s kernels", want,
                         want);
    return MOE8_OK;
}

static const moe8_kernels *pick(void) {
    const moe8_kernels *t = moe8_kernels_find(requested());
    if (t && moe8_kernels_supported(t)) return t;
    for (int i = 0; i < N_TABLES; i++)
        if (moe8_kernels_supported(tables[i])) return tables[i];
    return &ref_table;
}

static const moe8_kernels *chosen(void) {
    static _Atomic(const moe8_kernels *) cached;
    const moe8_kernels *t = atomic_load_explicit(&cached, memory_order_acquire);
    if (!t) { /* idempotent: a race picks the same table */
        t = pick();
        atomic_store_explicit(&cached, t, memory_order_release);
    }
    return t;
}

const char *moe8_kernel_isa(void) { return chosen()->isa; }

moe8_status moe8_kernel_check(moe8_error *err) { return moe8_kernels_check(err); }

const char *moe8_kernel_tables(void) {
    static char buf[256];
    static atomic_int done;
    if (!atomic_load(&done)) { /* idempotent: a race writes the same bytes */
        char b[256] = "";
        for (int i = 0; i < N_TABLES; i++)
            snprintf(b + strlen(b), sizeof b - strlen(b), "%s%s%s", i ? " " : "", tables[i]->isa,
                     moe8_kernels_supported(tables[i]) ? "" : "(unsupported)");
        memcpy(buf, b, sizeof buf);
        atomic_store(&done, 1);
    }
    return buf;
}

void moe8_kernels_thread_init(const moe8_kernels *t) {
    static _Thread_local const moe8_kernels *done[8];
    if (!t || !t->thread_init) return;
    for (int i = 0; i < 8; i++) {
        if (done[i] == t) return;
        if (!done[i]) {
            t->thread_init();
            done[i] = t;
            return;
        }
    }
    t->thread_init(); /* more tables than slots: setup is idempotent */
}

/* ---- the reference's roofline probes (portable loops) ----------------------- */

static double ref_read(const void *buf, size_t n_bytes, uint32_t *sink) {
    const uint64_t *p = (const uint64_t *)buf;
    uint64_t a = 0, b = 0, c = 0, d = 0;
    const double t0 = moe8_time_s();
    for (size_t i = 0; i < n_bytes / 8; i += 4) {
        a |= p[i]; b |= p[i + 1]; c |= p[i + 2]; d |= p[i + 3];
    }
    const double t = moe8_time_s() - t0;
    *sink ^= (uint32_t)(a | b | c | d);
    return t;
}

/* 8 independent int32 multiply-add chains. */
static double ref_int8_peak(long n_iter, uint32_t *sink) {
    int32_t a[8] = {0}, x = -127, w = (int32_t)(*sink & 1) - 128;
    const double t0 = moe8_time_s();
    for (long i = 0; i < n_iter; i++) {
        for (int c = 0; c < 8; c++) a[c] += x * w;
        __asm__ volatile("" : : "r"(a) : "memory");
    }
    const double t = moe8_time_s() - t0;
    for (int c = 0; c < 8; c++) *sink ^= (uint32_t)a[c];
    return t;
}

/* 8 independent float multiply-add chains. */
static double ref_fma_peak(long n_iter, uint32_t *sink) {
    float a[8] = {0}, x = 1.0f + 1e-7f * (float)(*sink & 1), w = 0.999999f;
    const double t0 = moe8_time_s();
    for (long i = 0; i < n_iter; i++) {
        for (int c = 0; c < 8; c++) a[c] += x * w;
        __asm__ volatile("" : : "r"(a) : "memory");
    }
    const double t = moe8_time_s() - t0;
    uint32_t bits;
    memcpy(&bits, &a[0], sizeof bits);
    *sink ^= bits;
    return t;
}

/* ---- kernel-time accounting ---------------------------------------------- */

static atomic_int timing_on;
static atomic_llong ns_quant, ns_q8, ns_f32, ns_attn, n_calls;

static long long now_ns(void) { return (long long)(moe8_time_s() * 1e9); }

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

static void timed_q4_i32(int32_t *acc, int ldc, const int8_t *xq, int ldq, const moe8_qmat *w,
                         int m, int n0, int n1) {
    long long t0 = now_ns();
    chosen()->gemm_q4_i32(acc, ldc, xq, ldq, w, m, n0, n1);
    add_time(&ns_q8, t0);
}

static void timed_q4_f32(float *y, int ldy, const int8_t *xq, int ldq, const float *sx,
                         const int32_t *xsum, const moe8_qmat *w, int m, int n0, int n1) {
    long long t0 = now_ns();
    chosen()->gemm_q4_f32(y, ldy, xq, ldq, sx, xsum, w, m, n0, n1);
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

/* The chosen table with timed kernels (same name, layout and probes). */
static const moe8_kernels *timed_table(void) {
    static _Atomic(const moe8_kernels *) cached;
    static moe8_kernels t;
    const moe8_kernels *p = atomic_load_explicit(&cached, memory_order_acquire);
    if (p) return p;
    moe8_kernels c = *chosen(); /* idempotent: a race writes the same bytes */
    c.quant_rows = timed_quant;
    c.gemm_q8_i32 = timed_q8_i32;
    c.gemm_q8_f32 = timed_q8_f32;
    c.gemm_q4_i32 = timed_q4_i32; /* counted with the int8 GEMMs */
    c.gemm_q4_f32 = timed_q4_f32;
    c.gemm_f32_wf = timed_f32;
    c.flash_attn = timed_attn;
    t = c;
    atomic_store_explicit(&cached, &t, memory_order_release);
    return &t;
}

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
    return atomic_load_explicit(&timing_on, memory_order_relaxed) ? timed_table() : chosen();
}
