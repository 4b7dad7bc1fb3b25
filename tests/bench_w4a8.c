/*
 * bench_w4a8.c — a table of the W4A8 expert GEMMs (int4 weights, SEMANTICS
 * §4b) against W8A8's on decode shapes: Qwen3-30B-A3B's expert (H 2048,
 * I 768: gate and up [768][2048], down [2048][768]) at 1-4 rows, one thread,
 * the kernel table in use (MOE8_ISA picks it as everywhere). E experts are
 * packed in both layouts and walked in turn, so the weights come from DRAM
 * as in a decode step (E x 4.7 MB of int8 exceeds any cache). Runs of the two
 * paths alternate; each cell is the best of R runs, in wall time and in the
 * process's CPU time (the machine may be shared: other processes inflate
 * wall time, CPU time much less). Not a test: `build/bench_w4a8 [E [R]]`.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/core.h"
#include "kernels/kernels.h"

#define H 2048
#define I 768

static double cpu_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct { moe8_qmat gate, up, down; } expert;

static void pack_one(moe8_qmat *q, int8_t **buf, const moe8_qlayout *L, const int8_t *w, int n,
                     int k, const float *scale) {
    *buf = moe8_alloc_aligned(L->bytes(n, k));
    L->pack(*buf, w, n, k, k);
    moe8_qmat_init(q, L, *buf, n, k, scale, NULL);
}

/* Seconds (wall, CPU) for one pass over every expert: gate, up, down at m rows. */
static void pass(const moe8_kernels *k, int q4, const expert *ex, int E, int m, const int8_t *xh,
                 const int8_t *xi, const float *sx, const int32_t *xsum, float *y, double *wall,
                 double *cpu) {
    const double t0 = moe8_time_s(), c0 = cpu_s();
    for (int e = 0; e < E; e++) {
        moe8_gemm_q8_f32_fn f = q4 ? k->gemm_q4_f32 : k->gemm_q8_f32;
        f(y, 2 * I, xh, H, sx, xsum, &ex[e].gate, m, 0, I);
        f(y + I, 2 * I, xh, H, sx, xsum, &ex[e].up, m, 0, I);
        f(y, H, xi, I, sx, xsum, &ex[e].down, m, 0, H);
    }
    *wall = moe8_time_s() - t0;
    *cpu = cpu_s() - c0;
}

int main(int argc, char **argv) {
    const int E = argc > 1 ? atoi(argv[1]) : 48, R = argc > 2 ? atoi(argv[2]) : 7;
    const moe8_kernels *k = moe8_kernels_get();
    const moe8_qlayout *L8 = k->qlayout, *L4 = k->q4layout;
    int8_t *w = malloc((size_t)I * H), **bufs = calloc((size_t)E * 6, sizeof *bufs);
    float *scale = malloc(sizeof(float) * H), *y = malloc(sizeof(float) * 4 * 2 * H);
    expert *e8 = calloc((size_t)E, sizeof *e8), *e4 = calloc((size_t)E, sizeof *e4);
    int8_t *xh = malloc(4 * H), *xi = malloc(4 * I);
    float sx[4] = {0.01f, 0.02f, 0.03f, 0.04f};
    int32_t xsum[4] = {0};
    unsigned s = 12345;
    if (E < 1 || R < 1 || !w || !bufs || !scale || !y || !e8 || !e4 || !xh || !xi) return 1;
    for (int i = 0; i < H; i++) scale[i] = 1e-3f;
    for (int i = 0; i < 4 * H; i++) xh[i] = (int8_t)((s = s * 1664525u + 1013904223u) >> 24);
    for (int i = 0; i < 4 * I; i++) xi[i] = (int8_t)((s = s * 1664525u + 1013904223u) >> 24);
    for (int e = 0; e < E; e++) {
        for (size_t i = 0; i < (size_t)I * H; i++)
            w[i] = (int8_t)((int)((s = s * 1664525u + 1013904223u) >> 28) - 8);
        pack_one(&e8[e].gate, &bufs[6 * e], L8, w, I, H, scale);
        pack_one(&e8[e].up, &bufs[6 * e + 1], L8, w, I, H, scale);
        pack_one(&e8[e].down, &bufs[6 * e + 2], L8, w, H, I, scale);
        pack_one(&e4[e].gate, &bufs[6 * e + 3], L4, w, I, H, scale);
        pack_one(&e4[e].up, &bufs[6 * e + 4], L4, w, I, H, scale);
        pack_one(&e4[e].down, &bufs[6 * e + 5], L4, w, H, I, scale);
    }
    const double b8 = 3.0 * I * H, b4 = b8 / 2; /* weight bytes per expert */
    printf("W4A8 vs W8A8 expert GEMMs, table %s (layouts %s / %s), 1 thread, %d experts of "
           "H %d x I %d walked in turn, best of %d alternated runs\n", k->isa, L8->name, L4->name,
           E, H, I, R);
    printf("(the machine may be shared with other processes: compare the CPU columns)\n\n");
    printf("| rows | W8A8 us/expert (wall / cpu) | W4A8 us/expert (wall / cpu) | W8A8 GB/s | "
           "W4A8 GB/s | speed-up (wall / cpu) |\n|---:|---:|---:|---:|---:|---:|\n");
    for (int m = 1; m <= 4; m++) {
        double bw[2] = {1e30, 1e30}, bc[2] = {1e30, 1e30}, wall, cpu;
        for (int r = 0; r < R; r++)
            for (int q4 = 0; q4 < 2; q4++) {
                pass(k, q4, q4 ? e4 : e8, E, m, xh, xi, sx, xsum, y, &wall, &cpu);
                if (wall < bw[q4]) bw[q4] = wall;
                if (cpu < bc[q4]) bc[q4] = cpu;
            }
        printf("| %d | %.1f / %.1f | %.1f / %.1f | %.1f | %.1f | %.2fx / %.2fx |\n", m,
               1e6 * bw[0] / E, 1e6 * bc[0] / E, 1e6 * bw[1] / E, 1e6 * bc[1] / E,
               b8 * E / bw[0] * 1e-9, b4 * E / bw[1] * 1e-9, bw[0] / bw[1], bc[0] / bc[1]);
    }
    for (int i = 0; i < 6 * E; i++) moe8_free_aligned(bufs[i]);
    free(bufs); free(w); free(scale); free(y); free(e8); free(e4); free(xh); free(xi);
    return 0;
}
