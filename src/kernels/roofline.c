/*
 * roofline.c — public benchmark helpers (moe8.h, "Benchmark helpers"): the
 * streaming-read bandwidth, the exact int8 MAC peak and the fp32 FMA peak of this machine, as
 * the AVX2 probes in x86/roofline_avx2.c measure them (or portable scalar
 * loops when the reference kernels are in use). Threads: OpenMP, one probe
 * per thread, each on its own contiguous share of the buffer. These calls
 * allocate and take a fraction of a second; they are not for hot paths.
 */
#include <omp.h>
#include <string.h>
#include <time.h>

#include "core/core.h"
#include "kernels/kernels.h"
#include "kernels/x86/kernels_avx2.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int use_avx2(void) { return !strcmp(moe8_kernel_isa(), "avx2"); }

static double read_scalar(const void *buf, size_t n_bytes, uint32_t *sink) {
    const uint64_t *p = (const uint64_t *)buf;
    uint64_t a = 0, b = 0, c = 0, d = 0;
    const double t0 = now_s();
    for (size_t i = 0; i < n_bytes / 8; i += 4) {
        a |= p[i]; b |= p[i + 1]; c |= p[i + 2]; d |= p[i + 3];
    }
    const double t = now_s() - t0;
    *sink ^= (uint32_t)(a | b | c | d);
    return t;
}

double moe8_bench_read_gbs(size_t n_bytes, int n_threads, int reps) {
    if (n_threads <= 0) n_threads = omp_get_max_threads();
    const size_t share = n_bytes / (size_t)n_threads / 256 * 256;
    if (share == 0 || reps <= 0) return 0.0;
    unsigned char *buf = moe8_alloc_aligned(share * (size_t)n_threads);
    if (!buf) return 0.0;
    double best = 0.0;
    uint32_t sink = 0;
    #pragma omp parallel num_threads(n_threads) reduction(^ : sink)
    {
        unsigned char *mine = buf + share * (size_t)omp_get_thread_num();
        memset(mine, omp_get_thread_num() + 1, share); /* first touch by the reader */
    }
    for (int rep = 0; rep < reps; rep++) {
        const double t0 = now_s();
        #pragma omp parallel num_threads(n_threads) reduction(^ : sink)
        {
            const unsigned char *mine = buf + share * (size_t)omp_get_thread_num();
            if (use_avx2()) moe8_read_stream_avx2(mine, share, &sink);
            else read_scalar(mine, share, &sink);
        }
        const double gbs = (double)(share * (size_t)n_threads) / (now_s() - t0) * 1e-9;
        if (gbs > best) best = gbs;
    }
    moe8_free_aligned(buf);
    return sink == 0x5a5a5a5a ? best * (1 + 1e-12) : best; /* keep the sink alive */
}

/* Portable twin of the maddwd probe: 8 independent int32 multiply-add chains. */
static double peak_scalar(long n_iter, uint32_t *sink) {
    int32_t a[8] = {0}, x = -127, w = (int32_t)(*sink & 1) - 128;
    const double t0 = now_s();
    for (long i = 0; i < n_iter; i++) {
        for (int c = 0; c < 8; c++) a[c] += x * w;
        __asm__ volatile("" : : "r"(a) : "memory");
    }
    const double t = now_s() - t0;
    for (int c = 0; c < 8; c++) *sink ^= (uint32_t)a[c];
    return t;
}

/* A register-only probe: seconds for n_iter iterations; *sink keeps it alive. */
typedef double (*probe_fn)(long n_iter, uint32_t *sink);

/* G(ops)/s of `probe` on n_threads threads, ops_per_iter operations (2 per
 * multiply-accumulate) an iteration: per run the slowest thread sets the
 * rate; best of 3 runs. */
static double register_peak(probe_fn probe, long n_iter, double ops_per_iter, int n_threads) {
    double best = 0.0;
    uint32_t sink = 0;
    if (n_threads <= 0) n_threads = omp_get_max_threads();
    for (int rep = 0; rep < 3; rep++) {
        double t_max = 0.0;
        #pragma omp parallel num_threads(n_threads) reduction(max : t_max) reduction(^ : sink)
        {
            t_max = probe(n_iter, &sink);
        }
        const double g = ops_per_iter * (double)n_iter * n_threads / t_max * 1e-9;
        if (g > best) best = g;
    }
    return sink == 0x5a5a5a5a ? best * (1 + 1e-12) : best; /* keep the sink alive */
}

double moe8_bench_int8_peak_gops(int n_threads, const char **how) {
    const int avx2 = use_avx2();
    if (how)
        *how = avx2 ? "vpmaddwd+vpaddd ymm (int16 pairs -> int32, exact), 12 chains"
                    : "scalar int32 multiply-add, 8 chains";
    return avx2 ? register_peak(moe8_maddwd_peak_avx2, 20000000L, 2.0 * 12 * 16, n_threads)
                : register_peak(peak_scalar, 50000000L, 2.0 * 8, n_threads);
}

/* Portable twin of the FMA probe: 8 independent float multiply-add chains. */
static double fma_scalar(long n_iter, uint32_t *sink) {
    float a[8] = {0}, x = 1.0f + 1e-7f * (float)(*sink & 1), w = 0.999999f;
    const double t0 = now_s();
    for (long i = 0; i < n_iter; i++) {
        for (int c = 0; c < 8; c++) a[c] += x * w;
        __asm__ volatile("" : : "r"(a) : "memory");
    }
    const double t = now_s() - t0;
    uint32_t bits;
    memcpy(&bits, &a[0], sizeof bits);
    *sink ^= bits;
    return t;
}

double moe8_bench_f32_peak_gflops(int n_threads, const char **how) {
    const int avx2 = use_avx2();
    if (how) *how = avx2 ? "vfmadd231ps ymm, 10 chains" : "scalar float multiply-add, 8 chains";
    return avx2 ? register_peak(moe8_fma_peak_avx2, 20000000L, 2.0 * 10 * 8, n_threads)
                : register_peak(fma_scalar, 50000000L, 2.0 * 8, n_threads);
}
