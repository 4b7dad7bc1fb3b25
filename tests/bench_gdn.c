/*
 * bench_gdn.c — a table of the Gated DeltaNet core's speed (src/model/gdn.h)
 * against this machine's roofline (moe8_bench.h probes of the kernel table in
 * use): the chunked prefill of one layer in GFLOP/s and as a fraction of the
 * fp32 FMA peak on the same threads, and one decode step of n sequences
 * against the time to stream its state's bytes (read once; and read + write
 * counted as twice the bytes). Not a test: `build/bench_gdn [threads...]`.
 * Shapes default to Qwen3-Next's (16 key heads x 128, 32 value heads x 128,
 * T 512, 16 sequences); MOE8_ISA picks the table as everywhere.
 *
 * FLOPs counted for a chunk of m tokens and one value head (the useful work,
 * the triangles at half): 6 m dk dv (W S, Q S, Kᵀ VN) + m² (3 dk + 2 dv)
 * (the masked K Kᵀ, Q Kᵀ, W, U, intra-chunk O) + m³ / 3 (the UT transform).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "kernels/kernels.h"
#include "model/gdn.h"
#include "moe8_bench.h"

static float *rnd(size_t n, float s, unsigned *seed) {
    float *x = moe8_alloc_aligned(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) {
        *seed = *seed * 1664525u + 1013904223u;
        x[i] = s * ((float)(*seed >> 8) / 16777216.0f - 0.5f);
    }
    return x;
}

static double chunk_flops(const moe8_gdn_dims *d, int T) {
    double f = 0;
    for (int t0 = 0; t0 < T; t0 += MOE8_GDN_CHUNK) {
        const double m = T - t0 < MOE8_GDN_CHUNK ? T - t0 : MOE8_GDN_CHUNK;
        f += 6 * m * d->dk * d->dv + m * m * (3.0 * d->dk + 2.0 * d->dv) + m * m * m / 3;
    }
    return f * d->n_v_heads;
}

int main(int argc, char **argv) {
    const moe8_gdn_dims d = {16, 32, 128, 128, 4};
    const int T = 512, NSEQ = 16, NSETS = 4, lq = d.n_k_heads * d.dk, lv = d.n_v_heads * d.dv;
    int threads[8] = {1, 2}, n_thr = 2;
    unsigned seed = 1;
    if (argc > 1) {
        n_thr = 0;
        for (int i = 1; i < argc && n_thr < 8; i++) threads[n_thr++] = atoi(argv[i]);
    }
    float *q = rnd((size_t)T * lq, 1, &seed), *k = rnd((size_t)T * lq, 1, &seed);
    float *v = rnd((size_t)T * lv, 1, &seed), *g = rnd((size_t)T * d.n_v_heads, 0.2f, &seed);
    float *beta = rnd((size_t)T * d.n_v_heads, 1, &seed), *o = rnd((size_t)T * lv, 1, &seed);
    const size_t ns = moe8_gdn_state_floats(&d);
    float *S = rnd(ns, 0.1f, &seed), *work = moe8_alloc_aligned(sizeof(float) * moe8_gdn_chunk_work_floats(&d, 8));
    for (int i = 0; i < T * d.n_v_heads; i++) g[i] -= 0.2f, beta[i] += 0.5f;
    moe8_gdn_qk_norm(q, lq, k, lq, T, &d);
    float *Ss[NSETS * NSEQ]; /* decode: NSETS layers' states, cycled so each step reads memory */
    for (int i = 0; i < NSETS * NSEQ; i++) Ss[i] = rnd(ns, 0.1f, &seed);
    const double state_bytes = (double)ns * sizeof(float) * NSEQ;
    printf("Gated DeltaNet core, kernel table %s; NK %d x dk %d, NV %d x dv %d, chunk %d\n",
           moe8_kernels_get()->isa, d.n_k_heads, d.dk, d.n_v_heads, d.dv, MOE8_GDN_CHUNK);
    printf("\n| threads | chunked prefill T=%d ms | GFLOP/s | f32 FMA peak GFLOP/s | %% of peak | recurrent T=%d ms |\n",
           T, T);
    printf("|---|---|---|---|---|---|\n");
    for (int ti = 0; ti < n_thr; ti++) {
        const int nt = threads[ti];
        const char *how;
        const double peak = moe8_bench_f32_peak_gflops(nt, &how);
        double best = 1e9, best_r = 1e9;
        for (int rep = 0; rep < 5; rep++) {
            double t0 = moe8_time_s();
            moe8_gdn_chunked(o, lv, q, lq, k, lq, v, lv, g, beta, T, &d, S, work, nt);
            double t1 = moe8_time_s();
            if (t1 - t0 < best) best = t1 - t0;
            for (size_t i = 0; i < ns; i++) S[i] *= 0.5f; /* keep the state bounded */
        }
        for (int rep = 0; rep < 2; rep++) {
            double t0 = moe8_time_s();
            moe8_gdn_recurrent(o, lv, q, lq, k, lq, v, lv, g, beta, T, &d, S, nt);
            double t1 = moe8_time_s();
            if (t1 - t0 < best_r) best_r = t1 - t0;
        }
        const double gf = chunk_flops(&d, T) / best * 1e-9;
        printf("| %d | %.2f | %.1f | %.1f (%s) | %.0f%% | %.2f |\n", nt, best * 1e3, gf, peak, how,
               100 * gf / peak, best_r * 1e3);
    }
    printf("\n| threads | decode step, %d sequences, us | state MB | stream read GB/s | read time of the state us | "
           "step / read | step / (read + write as 2x bytes) |\n", NSEQ);
    printf("|---|---|---|---|---|---|---|\n");
    for (int ti = 0; ti < n_thr; ti++) {
        const int nt = threads[ti];
        const double gbs = moe8_bench_read_gbs((size_t)(state_bytes * NSETS), nt, 5);
        double best = 1e9;
        for (int rep = 0; rep < 8 * NSETS; rep++) {
            float *const *Sr = Ss + (rep % NSETS) * NSEQ;
            double t0 = moe8_time_s();
            moe8_gdn_decode(o, lv, q, lq, k, lq, v, lv, g, beta, NSEQ, &d, Sr, nt);
            double t1 = moe8_time_s();
            if (t1 - t0 < best) best = t1 - t0;
        }
        const double tr = state_bytes / (gbs * 1e9);
        printf("| %d | %.0f | %.1f | %.1f | %.0f | %.2f | %.2f |\n", nt, best * 1e6, state_bytes / 1048576.0, gbs,
               tr * 1e6, best / tr, best / (2 * tr));
    }
    return 0;
}
