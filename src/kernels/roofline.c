/*
 * roofline.c — public benchmark helpers (moe8.h, "Benchmark helpers"): the
 * streaming-read bandwidth, the exact int8 MAC peak and the fp32 FMA peak of
 * this machine, as the probes of the kernel table in use measure them (each
 * table runs the instructions its own kernels use). Threads: OpenMP, one
 * probe per thread, each on its own contiguous share of the buffer. These
 * calls allocate and take a fraction of a second; they are not for hot paths.
 */
#include <omp.h>
#include <string.h>
#include <time.h>

#include "core/core.h"
#include "kernels/kernels.h"

double moe8_bench_read_gbs(size_t n_bytes, int n_threads, int reps) {
    const moe8_kernels *kt = moe8_kernels_get();
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
        const double t0 = moe8_time_s();
        #pragma omp parallel num_threads(n_threads) reduction(^ : sink)
        {
            const unsigned char *mine = buf + share * (size_t)omp_get_thread_num();
            kt->read_stream(mine, share, &sink);
        }
        const double gbs = (double)(share * (size_t)n_threads) / (moe8_time_s() - t0) * 1e-9;
        if (gbs > best) best = gbs;
    }
    moe8_free_aligned(buf);
    return sink == 0x5a5a5a5a ? best * (1 + 1e-12) : best; /* keep the sink alive */
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
    const moe8_kernels *kt = moe8_kernels_get();
    if (how) *how = kt->int8_how;
    /* about 0.05 s a run: AMX tiles do 2^17 operations (64 cycles) an iteration */
    const long n_iter = kt->int8_ops > 1e5 ? 1500000L : kt->int8_ops > 100 ? 5000000L : 12500000L;
    return register_peak(kt->int8_peak, n_iter, kt->int8_ops, n_threads);
}

double moe8_bench_f32_peak_gflops(int n_threads, const char **how) {
    const moe8_kernels *kt = moe8_kernels_get();
    if (how) *how = kt->fma_how;
    return register_peak(kt->fma_peak, kt->fma_ops > 100 ? 5000000L : 12500000L, kt->fma_ops,
                         n_threads);
}
