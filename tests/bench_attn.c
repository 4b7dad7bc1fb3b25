/*
 * bench_attn.c — decode attention (one token, the G query heads of one kv
 * head: kernels.h moe8_flash_attn_fn) against its roofline, one thread, the
 * kernel table in use (MOE8_ISA picks it): Qwen3-30B-A3B's shape (G 8,
 * D 128), an f16 cache, contexts 512 to 16384. N_HEADS kv heads' caches, each
 * with its blocks in a shuffled order as a paged cache holds them, are
 * walked in turn, so K and V come from DRAM as in a decode step.
 *
 * roofline = max(K+V bytes / streaming-read bandwidth, 4 G D ctx flops /
 * fp32 FMA peak), both probed on one thread in the same run (moe8_bench.h);
 * each cell is the best of R runs, in CPU time (the machine may be shared).
 * Not a test: `build/bench_attn [R]`.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/core.h"
#include "kernels/kernels.h"
#include "moe8_bench.h"

#define G 8
#define D 128
#define N_HEADS 8
#define MAX_CTX 16384

static double cpu_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
    static const int ctxs[] = {512, 2048, 8192, 16384};
    const int R = argc > 1 ? atoi(argv[1]) : 5;
    const moe8_kernels *k = moe8_kernels_get();
    const int nb = MAX_CTX / MOE8_KV_BLOCK_TOKENS;
    const size_t half = (size_t)MOE8_KV_BLOCK_TOKENS * D * 2, block = 2 * half; /* K then V */
    uint16_t *cache = moe8_alloc_aligned((size_t)N_HEADS * nb * block);
    int32_t *table = malloc(sizeof(int32_t) * (size_t)N_HEADS * nb);
    float *q = malloc(sizeof(float) * G * D), *out = malloc(sizeof(float) * G * D);
    float *work = moe8_alloc_aligned(sizeof(float) * k->attn_work_floats(D, G));
    uint64_t s = 1;
    for (size_t i = 0; i < (size_t)N_HEADS * nb * block / 2; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        cache[i] = moe8_f32_to_f16((float)((int)(s >> 40) % 2001 - 1000) / 1000.0f);
    }
    for (int i = 0; i < G * D; i++) q[i] = (float)((i * 37) % 101 - 50) / 50.0f;
    for (int h = 0; h < N_HEADS; h++) { /* head h: blocks h, h + N_HEADS, ... shuffled */
        int32_t *t = table + (size_t)h * nb;
        for (int b = 0; b < nb; b++) t[b] = h + N_HEADS * b;
        for (int b = nb - 1; b > 0; b--) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            const int j = (int)((s >> 33) % (uint64_t)(b + 1));
            const int32_t x = t[b];
            t[b] = t[j];
            t[j] = x;
        }
    }
    const double bw = moe8_bench_read_gbs((size_t)256 << 20, 1, 3);
    const double peak = moe8_bench_f32_peak_gflops(1, NULL);
    printf("## decode attention, G %d, D %d, f16 KV, 1 thread, %s kernels\n\n", G, D, k->isa);
    printf("streaming read %.1f GB/s, fp32 peak %.1f GFLOP/s (one thread)\n\n", bw, peak);
    printf("| context | µs (CPU) | GB/s | GFLOP/s | roofline µs | roofline / time | ceiling |\n");
    printf("|---:|---:|---:|---:|---:|---:|---|\n");
    for (size_t c = 0; c < sizeof ctxs / sizeof ctxs[0]; c++) {
        const int ctx = ctxs[c];
        double best = 1e30;
        for (int r = 0; r < R; r++) {
            const double t0 = cpu_s();
            for (int h = 0; h < N_HEADS; h++) {
                const moe8_kv_pages kv = {(const char *)cache, block, half,
                                          table + (size_t)h * nb, MOE8_DT_F16, NULL};
                k->flash_attn(out, G * D, q, G * D, 1, G, D, ctx - 1, 0.088f, &kv, work);
            }
            const double t = (cpu_s() - t0) / N_HEADS;
            best = t < best ? t : best;
        }
        const double bytes = (double)ctx * D * 2 * 2, flops = 4.0 * G * D * ctx;
        const double t_bw = bytes / (bw * 1e9), t_fl = flops / (peak * 1e9);
        const double roof = t_bw > t_fl ? t_bw : t_fl;
        printf("| %d | %.1f | %.1f | %.1f | %.1f | %.0f%% | %s |\n", ctx, best * 1e6,
               bytes / best * 1e-9, flops / best * 1e-9, roof * 1e6, 100.0 * roof / best,
               t_bw > t_fl ? "read BW" : "fp32 peak");
    }
    printf("\n(checksum %g)\n", (double)out[0] + out[G * D - 1]);
    moe8_free_aligned(cache);
    moe8_free_aligned(work);
    free(table);
    free(q);
    free(out);
    return 0;
}
