/*
 * bench_w4a8.c — a table of the W4A8 expert GEMMs (int4 weights, SEMANTICS
 * §4b) against W8A8's on decode shapes: Qwen3-30B-A3B's expert (H 2048,
 * I 768: gate and up [768][2048], down [2048][768]) at 1-4 rows (16, 64: prefill tiles), one thread,
 * the kernel table in use (MOE8_ISA picks it as everywhere). E experts are
 * packed in both layouts and walked in turn, so the weights come from DRAM
 * as in a decode step (E x 4.7 MB of int8 exceeds any cache). Runs of the two
 * paths alternate; each cell is the best of R runs, in wall time and in the
 * process's CPU time (the machine may be shared: other processes inflate
 * wall time, CPU time much less). A second table runs whole MoE layers of
 * that shape (128 experts, top-8, fresh random routing every step, the
 * table's threads: OMP_NUM_THREADS) at decode batch sizes 1-4, W8A8 against
 * W4A8 experts, alternated. Not a test: `build/bench_w4a8 [E [R]]`.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <omp.h>

#include "core/core.h"
#include "kernels/kernels.h"
#include "moe8_moe.h"

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

/* A MoE layer of E experts of H x I, every expert reading the same source
 * (packing copies it per expert): int8 codes, or msModelSlim's int4 pairs. */
static moe8_moe_layer *make_layer(int E, int w4, const int8_t *src, const float *scale) {
    moe8_moe_expert *ex = calloc((size_t)E, sizeof *ex);
    moe8_moe_layer_desc d = moe8_moe_layer_desc_default();
    moe8_moe_layer *L = NULL;
    moe8_error err;
    for (int e = 0; e < E; e++) {
        const moe8_moe_weight w = {src, MOE8_DT_I8, scale, MOE8_DT_F32, NULL, MOE8_DT_F32, NULL, MOE8_DT_F32};
        ex[e].gate = ex[e].up = ex[e].down = w;
    }
    d.name = w4 ? "w4a8" : "w8a8";
    d.n_expert = E;
    d.hidden = H;
    d.intermediate = I;
    d.quant = w4 ? MOE8_QUANT_W4A8_DYNAMIC : MOE8_QUANT_W8A8_DYNAMIC;
    d.experts = ex;
    d.router_params.top_k = 8;
    d.router_params.renormalize = 1;
    if (moe8_moe_layer_create(&d, &L, &err) != MOE8_OK) fprintf(stderr, "%s\n", err.message);
    free(ex);
    return L;
}

/* Whole-layer decode steps: best-of-R seconds (wall, CPU) per step of T tokens. */
static void layer_table(int R) {
    const int E = 128, steps = 24;
    int8_t *src = malloc((size_t)I * H);
    float *scale = malloc(sizeof(float) * H), *h = malloc(sizeof(float) * 4 * H);
    float *lg = malloc(sizeof(float) * 4 * E), *out = malloc(sizeof(float) * 4 * H);
    unsigned s = 777;
    for (size_t i = 0; i < (size_t)I * H; i++) src[i] = (int8_t)((int)((s = s * 1664525u + 1013904223u) >> 28) - 8);
    for (int i = 0; i < H; i++) scale[i] = 1e-3f;
    for (int i = 0; i < 4 * H; i++) h[i] = (float)((int)((s = s * 1664525u + 1013904223u) >> 20) - 2048) / 2048.0f;
    moe8_moe_layer *L[2] = {make_layer(E, 0, src, scale), make_layer(E, 1, src, scale)};
    moe8_moe_workspace *ws[2] = {NULL, NULL};
    if (!L[0] || !L[1]) return;
    for (int q = 0; q < 2; q++) moe8_moe_workspace_create(L[q], 4, 0, &ws[q], NULL);
    printf("\nWhole MoE layer (E %d, top-8, H %d, I %d), %d threads, %d decode steps of fresh "
           "random routing, best of %d alternated runs\n\n", E, H, I, omp_get_max_threads(), steps, R);
    printf("| tokens | W8A8 ms/step (wall / cpu) | W4A8 ms/step (wall / cpu) | speed-up (wall / cpu) "
           "|\n|---:|---:|---:|---:|\n");
    for (int T = 1; T <= 4; T++) {
        double bw[2] = {1e30, 1e30}, bc[2] = {1e30, 1e30};
        for (int r = 0; r < R; r++)
            for (int q = 0; q < 2; q++) {
                unsigned rs = 99u + (unsigned)r; /* the same routing for both */
                const double t0 = moe8_time_s(), c0 = cpu_s();
                for (int st = 0; st < steps; st++) {
                    for (int i = 0; i < T * E; i++)
                        lg[i] = (float)((rs = rs * 1664525u + 1013904223u) >> 8) / 16777216.0f;
                    moe8_moe_layer_forward(L[q], ws[q], h, T, lg, out, NULL);
                }
                const double w = (moe8_time_s() - t0) / steps, c = (cpu_s() - c0) / steps;
                if (w < bw[q]) bw[q] = w;
                if (c < bc[q]) bc[q] = c;
            }
        printf("| %d | %.3f / %.3f | %.3f / %.3f | %.2fx / %.2fx |\n", T, 1e3 * bw[0], 1e3 * bc[0],
               1e3 * bw[1], 1e3 * bc[1], bw[0] / bw[1], bc[0] / bc[1]);
    }
    for (int q = 0; q < 2; q++) moe8_moe_workspace_free(ws[q]), moe8_moe_layer_free(L[q]);
    free(src); free(scale); free(h); free(lg); free(out);
}

int main(int argc, char **argv) {
    const int E = argc > 1 ? atoi(argv[1]) : 48, R = argc > 2 ? atoi(argv[2]) : 7;
    const moe8_kernels *k = moe8_kernels_get();
    const moe8_qlayout *L8 = k->qlayout, *L4 = k->q4layout;
    int8_t *w = malloc((size_t)I * H), **bufs = calloc((size_t)E * 6, sizeof *bufs);
    float *scale = malloc(sizeof(float) * H), *y = malloc(sizeof(float) * 64 * 2 * H);
    expert *e8 = calloc((size_t)E, sizeof *e8), *e4 = calloc((size_t)E, sizeof *e4);
    int8_t *xh = malloc(64 * H), *xi = malloc(64 * I);
    float sx[64];
    int32_t xsum[64] = {0};
    unsigned s = 12345;
    if (E < 1 || R < 1 || !w || !bufs || !scale || !y || !e8 || !e4 || !xh || !xi) return 1;
    for (int i = 0; i < H; i++) scale[i] = 1e-3f;
    for (int i = 0; i < 64; i++) sx[i] = 0.01f * (float)(i + 1);
    for (int i = 0; i < 64 * H; i++) xh[i] = (int8_t)((s = s * 1664525u + 1013904223u) >> 24);
    for (int i = 0; i < 64 * I; i++) xi[i] = (int8_t)((s = s * 1664525u + 1013904223u) >> 24);
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
    static const int rows[] = {1, 2, 3, 4, 16, 64}; /* decode, then prefill tiles */
    for (int mi = 0; mi < 6; mi++) {
        const int m = rows[mi];
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
    layer_table(R);
    free(bufs); free(w); free(scale); free(y); free(e8); free(e4); free(xh); free(xi);
    return 0;
}
