/*
 * cmd_bench.c — `moe8 bench moe`: the MoE layer at the Qwen3-30B-A3B shape
 * (E=128, top-8, H=2048, I=768), W8A8 dynamic vs float (fp32) experts on the
 * same routing, for a list of token counts and thread counts, next to the
 * machine's ceilings measured in the same run (streaming-read bandwidth and
 * the exact int8 peak of the kernel set in use).
 *
 * Weights are synthetic (random int8 / fp32, random router), spread over
 * several layers that forwards rotate through, so the weights touched are
 * several times the last-level cache and DRAM is what is measured. Each
 * forward gets fresh hidden states (a pool of inputs), hence fresh routing.
 * Per row: median µs per layer after a warm-up; GB/s of distinct expert
 * weights touched; int8 GOP/s (1 MAC = 2 ops; expert GEMMs only); % of
 * roofline = max(bytes/bandwidth, ops/peak) / time; the share of time outside
 * the int8 GEMMs (router, quantization, gather, SwiGLU, combine) from the
 * library's kernel-time accounting, in a second pass (with n threads: summed
 * GEMM time / n, so load imbalance and barrier waits count as outside); the float layer's time
 * and the float/W8A8 time ratio. Uses the public API only. Results go to
 * stdout as a Markdown table, progress to stderr.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

#define N_EXPERT 128
#define TOP_K 8
#define HIDDEN 2048
#define INTER 768
#define MAX_LIST 32

typedef struct {
    int n_layers, n_float_layers, reps, bw_mb;
    int tokens[MAX_LIST], n_tokens_list;
    int threads[MAX_LIST], n_threads_list;
} bench_opts;


static uint64_t rng_next(uint64_t *s) {
    *s ^= *s >> 12; *s ^= *s << 25; *s ^= *s >> 27;
    return *s * 2685821657736338717ULL;
}

/* Uniform in [-1, 1). */
static float rng_float(uint64_t *s) {
    return (float)((double)(rng_next(s) >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

#define SYNOPSIS "moe8 bench moe [--layers N] [--float-layers N] [--tokens 1,2,...] [--threads 1,2]\n" \
                 "                      [--reps N] [--bw-mb N]"
#define NOTES                                                                                       \
    "       moe8 bench forward -m DIR ... (the whole forward, phase by phase: moe8 bench forward -h)\n" \
    "       moe8 bench sched -m DIR ...   (the scheduler on a model: moe8 bench sched -h)\n"          \
    "       moe8 bench prompt-cache -m DIR --dir D ... (the prompt cache's disk tier: -h)\n"       \
    "       moe8 bench serve --url URL ... (load on an OpenAI-compatible server: moe8 bench serve -h)\n" \
    "       moe8 bench grammar [-m DIR | --tokenizer DIR] ... (constrained decoding: compile,\n"     \
    "                          prepare and per-step mask times: moe8 bench grammar -h)\n"

static int parse_opts(int argc, char **argv, bench_opts *o) {
    static const int tok[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
    memset(o, 0, sizeof *o);
    o->n_layers = 4, o->n_float_layers = 1, o->bw_mb = 1024;
    o->n_tokens_list = (int)(sizeof tok / sizeof tok[0]);
    memcpy(o->tokens, tok, sizeof tok);
    o->threads[0] = 1, o->threads[1] = 2, o->n_threads_list = 2;
    const cli_opt opts[] = {
        {"--layers", NULL, CLI_INT, &o->n_layers, 1, 1024, .arg = "N",
         .help = "int8 layers to rotate through (default 4, ~604 MB each)"},
        {"--float-layers", NULL, CLI_INT, &o->n_float_layers, 0, 1024, .arg = "N",
         .help = "fp32 layers for the float path (default 1, ~2.4 GB each; 0 = skip)"},
        {"--tokens", NULL, CLI_LIST, o->tokens, 1, 1 << 20, .count = &o->n_tokens_list, .cap = MAX_LIST,
         .arg = "LIST", .help = "token counts T (default 1,2,4,...,1024)"},
        {"--threads", NULL, CLI_LIST, o->threads, 1, 4096, .count = &o->n_threads_list, .cap = MAX_LIST,
         .arg = "LIST", .help = "OpenMP thread counts (default 1,2)"},
        {"--reps", NULL, CLI_INT, &o->reps, 0, 1000000, .arg = "N",
         .help = "timed forwards per row (default: auto, >= 5, ~0.5 s)"},
        {"--bw-mb", NULL, CLI_INT, &o->bw_mb, 1, 1 << 20, .arg = "N",
         .help = "buffer of the bandwidth probe in MB (default 1024)"},
        {0},
    };
    const int rc = cli_parse("bench", SYNOPSIS, opts, NOTES, argc - 1, argv + 1);
    return rc < 0 ? -1 : rc;
}

/* ---- synthetic layers ------------------------------------------------------ */

typedef struct {
    moe8_moe_layer *layer;
    void *weights;                 /* float layers: the fp32 experts it reads in place */
} bench_layer;

static moe8_moe_layer_desc base_desc(const float *router, moe8_moe_expert *ex) {
    moe8_moe_layer_desc d = moe8_moe_layer_desc_default();
    d.name = "bench.mlp";
    d.n_expert = N_EXPERT, d.hidden = HIDDEN, d.intermediate = INTER;
    d.experts = ex;
    d.router = router, d.router_dtype = MOE8_DT_F32;
    d.router_params.top_k = TOP_K;
    d.router_params.renormalize = 1;
    return d;
}

/* int8 layer: src holds E x (gate, up, down) int8 + E x (2I + H) scales; refilled per layer. */
static int make_q8_layer(bench_layer *bl, const float *router, int8_t *src, float *scales,
                         uint64_t seed) {
    const size_t per = (size_t)3 * HIDDEN * INTER, words = (size_t)N_EXPERT * per / 8;
    moe8_moe_expert ex[N_EXPERT];
    for (size_t i = 0; i < words; i++) {
        uint64_t v = rng_next(&seed);
        memcpy(src + 8 * i, &v, 8);
    }
    for (size_t i = 0; i < (size_t)N_EXPERT * (2 * INTER + HIDDEN); i++)
        scales[i] = (1.0f + 0.5f * rng_float(&seed)) * (0.02f / 127.0f);
    for (int e = 0; e < N_EXPERT; e++) {
        const int8_t *b = src + (size_t)e * per;
        const float *s = scales + (size_t)e * (2 * INTER + HIDDEN);
        ex[e].gate = (moe8_moe_weight){b, MOE8_DT_I8, s, MOE8_DT_F32, NULL, MOE8_DT_F32, NULL, MOE8_DT_F32};
        ex[e].up = (moe8_moe_weight){b + INTER * HIDDEN, MOE8_DT_I8, s + INTER, MOE8_DT_F32, NULL,
                                     MOE8_DT_F32, NULL, MOE8_DT_F32};
        ex[e].down = (moe8_moe_weight){b + 2 * INTER * HIDDEN, MOE8_DT_I8, s + 2 * INTER,
                                       MOE8_DT_F32, NULL, MOE8_DT_F32, NULL, MOE8_DT_F32};
    }
    moe8_moe_layer_desc d = base_desc(router, ex);
    moe8_error err;
    bl->weights = NULL;
    if (moe8_moe_layer_create(&d, &bl->layer, &err) != MOE8_OK) return cli_fail("bench", &err);
    return 0;
}

static int make_f32_layer(bench_layer *bl, const float *router, uint64_t seed) {
    const size_t per = (size_t)3 * HIDDEN * INTER, n = (size_t)N_EXPERT * per;
    float *w = malloc(n * sizeof *w);
    moe8_moe_expert ex[N_EXPERT];
    if (!w) return cli_err("bench", "cannot allocate %zu MB of float weights", n * 4 >> 20);
    for (size_t i = 0; i < n; i++) w[i] = 0.02f * rng_float(&seed);
    for (int e = 0; e < N_EXPERT; e++) {
        const float *b = w + (size_t)e * per;
        ex[e].gate = (moe8_moe_weight){b, MOE8_DT_F32, NULL, MOE8_DT_F32, NULL, MOE8_DT_F32, NULL, MOE8_DT_F32};
        ex[e].up = (moe8_moe_weight){b + INTER * HIDDEN, MOE8_DT_F32, NULL, MOE8_DT_F32, NULL,
                                     MOE8_DT_F32, NULL, MOE8_DT_F32};
        ex[e].down = (moe8_moe_weight){b + 2 * INTER * HIDDEN, MOE8_DT_F32, NULL, MOE8_DT_F32,
                                       NULL, MOE8_DT_F32, NULL, MOE8_DT_F32};
    }
    moe8_moe_layer_desc d = base_desc(router, ex);
    d.quant = MOE8_QUANT_FLOAT;
    moe8_error err;
    bl->weights = w;
    if (moe8_moe_layer_create(&d, &bl->layer, &err) != MOE8_OK) return cli_fail("bench", &err);
    return 0;
}

/* ---- timing ------------------------------------------------------------------ */

#define N_POOL 8

typedef struct {
    double median_s;
    double mean_distinct;  /* distinct experts per forward */
    double outside_share;  /* of the int8 pass: 1 - int8 GEMM time / layer time; -1 = n/a */
} run_result;

static int count_distinct(const moe8_moe_workspace *ws) {
    int n_tok, seen[N_EXPERT] = {0}, n = 0;
    const int32_t *ids;
    const float *wts;
    moe8_moe_workspace_routing(ws, &n_tok, &ids, &wts);
    for (int i = 0; i < n_tok * TOP_K; i++)
        if (ids[i] >= 0 && ids[i] < N_EXPERT && !seen[ids[i]]++) n++;
    return n;
}

/* Forwards over the layers in rotation, input pool[i % N_POOL]; one workspace per layer. */
static int time_layers(bench_layer *ls, int n_l, float *const *pool, float *out, int T, int nt,
                       int reps_opt, int account, run_result *res) {
    moe8_moe_workspace *ws[16] = {0};
    static double times[4096];
    moe8_error err;
    int rc = 0, reps = 0;
    double distinct = 0.0, t_total = 0.0;
    for (int l = 0; l < n_l && !rc; l++)
        if (moe8_moe_workspace_create(ls[l].layer, T, nt, &ws[l], &err) != MOE8_OK)
            rc = cli_fail("bench", &err);
    for (int l = 0; l < n_l && !rc; l++) /* warm-up: one forward per layer */
        if (moe8_moe_layer_forward(ls[l].layer, ws[l], pool[l % N_POOL], T, NULL, out, &err))
            rc = cli_fail("bench", &err);
    moe8_kernel_times kt;
    moe8_bench_kernel_times(&kt, 1);
    moe8_bench_kernel_timing(account);
    const double t_start = moe8_time_s();
    for (int i = 0; !rc && i < 4096; i++) {
        if (reps_opt ? i >= reps_opt : (i >= 5 && i >= n_l && moe8_time_s() - t_start > 0.5)) break;
        const int l = i % n_l;
        const double t0 = moe8_time_s();
        if (moe8_moe_layer_forward(ls[l].layer, ws[l], pool[i % N_POOL], T, NULL, out, &err))
            rc = cli_fail("bench", &err);
        times[i] = moe8_time_s() - t0;
        t_total += times[i];
        distinct += count_distinct(ws[l]);
        reps = i + 1;
    }
    moe8_bench_kernel_timing(0);
    moe8_bench_kernel_times(&kt, 1);
    for (int l = 0; l < n_l; l++) moe8_moe_workspace_free(ws[l]);
    if (rc || reps == 0) return rc ? rc : 1;
    qsort(times, (size_t)reps, sizeof times[0], cli_cmp_double);
    res->median_s = reps % 2 ? times[reps / 2] : 0.5 * (times[reps / 2 - 1] + times[reps / 2]);
    res->mean_distinct = distinct / reps;
    res->outside_share = account ? 1.0 - kt.gemm_q8_s / nt / t_total : -1.0;
    return 0;
}

/* ---- the table ------------------------------------------------------------------ */

typedef struct {
    int T, nt;
    run_result q, f;   /* f.median_s = 0 when the float path is skipped */
    double gbs, gops, roof_pct;
    const char *bound;
} row;

/* Raises bw/peak to this measurement: the ceilings are measured before each
 * token count and after the runs and the highest value kept, since a machine
 * shared with other work can only make a probe slower. */
static void measure_ceilings(const bench_opts *o, double *bw, double *peak, const char **how) {
    for (int i = 0; i < o->n_threads_list; i++) {
        double b = moe8_bench_read_gbs((size_t)o->bw_mb << 20, o->threads[i], 3);
        double p = moe8_bench_int8_peak_gops(o->threads[i], how);
        fprintf(stderr, "ceilings, %d thread(s): read %.2f GB/s, int8 peak %.1f GOP/s\n",
                o->threads[i], b, p);
        bw[i] = b > bw[i] ? b : bw[i];
        peak[i] = p > peak[i] ? p : peak[i];
    }
}

static void print_summary(const row *rows, int n_rows, const double *bw, const double *peak,
                          const bench_opts *o) {
    printf("\nTargets (1 thread unless stated):\n");
    for (int i = 0; i < n_rows; i++) {
        const row *r = &rows[i];
        if (r->nt != o->threads[0]) continue;
        if (r->T == 1)
            printf("- T=1: %.1f GB/s = %.0f%% of streaming read %.2f GB/s (target >= 75%%); "
                   "outside the int8 GEMMs %.1f%% (target <= 5%%)\n",
                   r->gbs, 100.0 * r->gbs / bw[0], bw[0], 100.0 * r->q.outside_share);
        if (r->T >= 256)
            printf("- T=%d: %.1f GOP/s = %.0f%% of the int8 peak %.1f GOP/s (target >= 60%%)\n",
                   r->T, r->gops, 100.0 * r->gops / peak[0], peak[0]);
        if ((r->T == 1 || r->T == 512) && r->f.median_s > 0)
            printf("- T=%d: W8A8 %.2fx faster than float (target >= %s)\n", r->T,
                   r->f.median_s / r->q.median_s, r->T == 1 ? "3x" : "1.7x");
        for (int j = 0; j < n_rows && r->T >= 256; j++)
            if (rows[j].T == r->T && rows[j].nt == 2 * r->nt)
                printf("- T=%d: %d threads %.2fx faster than %d (target >= 1.6x)\n", r->T,
                       rows[j].nt, r->q.median_s / rows[j].q.median_s, r->nt);
    }
}

static void fill_row(row *r, const double *bw, const double *peak, int ti) {
    const double q8_expert = 3.0 * HIDDEN * INTER + 4.0 * (2 * INTER + HIDDEN);
    const double bytes = r->q.mean_distinct * q8_expert;
    const double ops = 2.0 * r->T * TOP_K * 3.0 * HIDDEN * INTER;
    const double t_bw = bytes / (bw[ti] * 1e9), t_ops = ops / (peak[ti] * 1e9);
    r->gbs = bytes / r->q.median_s * 1e-9;
    r->gops = ops / r->q.median_s * 1e-9;
    r->roof_pct = 100.0 * (t_bw > t_ops ? t_bw : t_ops) / r->q.median_s;
    r->bound = t_bw > t_ops ? "bw" : "int8";
}

static void print_row(const row *r) {
    printf("| %4d | %d | %10.1f | %6.2f | %7.1f | %5.1f%% %-4s | %5.1f%% |", r->T, r->nt,
           1e6 * r->q.median_s, r->gbs, r->gops, r->roof_pct, r->bound,
           100.0 * r->q.outside_share);
    if (r->f.median_s > 0)
        printf(" %10.1f | %5.2fx |\n", 1e6 * r->f.median_s, r->f.median_s / r->q.median_s);
    else
        printf(" - | - |\n");
    fflush(stdout);
}

static int bench_moe(const bench_opts *o) {
    bench_layer q[16] = {{0}}, f[16] = {{0}};
    double bw[MAX_LIST] = {0}, peak[MAX_LIST] = {0};
    const char *how = "";
    static row rows[MAX_LIST * MAX_LIST];
    int n_rows = 0, rc = 0, max_t = 0;
    uint64_t seed = 0x243f6a8885a308d3ULL;
    float *router = malloc(sizeof(float) * N_EXPERT * HIDDEN), *pool[N_POOL] = {0}, *out = NULL;
    int8_t *src = malloc((size_t)N_EXPERT * 3 * HIDDEN * INTER);
    float *scales = malloc(sizeof(float) * N_EXPERT * (2 * INTER + HIDDEN));
    for (int i = 0; i < o->n_tokens_list; i++) max_t = o->tokens[i] > max_t ? o->tokens[i] : max_t;
    for (int i = 0; i < N_POOL; i++) pool[i] = malloc(sizeof(float) * max_t * HIDDEN);
    out = malloc(sizeof(float) * max_t * HIDDEN);
    if (!router || !src || !scales || !pool[N_POOL - 1] || !out) {
        return cli_err("bench", "out of memory");
    }
    for (int i = 0; i < N_EXPERT * HIDDEN; i++) router[i] = 0.05f * rng_float(&seed);
    for (int p = 0; p < N_POOL; p++)
        for (size_t i = 0; i < (size_t)max_t * HIDDEN; i++) pool[p][i] = rng_float(&seed);

    measure_ceilings(o, bw, peak, &how);
    fprintf(stderr, "building %d int8 and %d fp32 layers...\n", o->n_layers, o->n_float_layers);
    int n_q = 0, n_f = 0;
    for (; n_q < o->n_layers && !rc; n_q++) rc = make_q8_layer(&q[n_q], router, src, scales, seed + n_q);
    free(src);
    for (; n_f < o->n_float_layers && !rc; n_f++) rc = make_f32_layer(&f[n_f], router, seed + 100 + n_f);

    printf("moe8 %s, kernels %s; MoE layer E=%d top-%d H=%d I=%d; %d int8 layers (%.0f MB), "
           "%d fp32 layers (%.0f MB)\n", moe8_version(), moe8_kernel_isa(), N_EXPERT, TOP_K,
           HIDDEN, INTER, o->n_layers, o->n_layers * N_EXPERT * 3.0 * HIDDEN * INTER / 1e6,
           o->n_float_layers, o->n_float_layers * N_EXPERT * 12.0 * HIDDEN * INTER / 1e6);
    for (int a = 0; a < o->n_tokens_list && !rc; a++)
        for (int b = 0; b < o->n_threads_list && !rc; b++) {
            if (b == 0 && a > 0) measure_ceilings(o, bw, peak, &how);
            row *r = &rows[n_rows];
            run_result scratch = {0, 0, -1.0};
            memset(r, 0, sizeof *r);
            r->T = o->tokens[a], r->nt = o->threads[b];
            fprintf(stderr, "T=%d threads=%d\n", r->T, r->nt);
            rc = time_layers(q, n_q, pool, out, r->T, r->nt, o->reps, 0, &r->q);
            if (!rc) rc = time_layers(q, n_q, pool, out, r->T, r->nt, n_q > 3 ? n_q : 3, 1, &scratch);
            r->q.outside_share = scratch.outside_share;
            if (!rc && n_f) rc = time_layers(f, n_f, pool, out, r->T, r->nt, o->reps, 0, &r->f);
            if (rc) break;
            fprintf(stderr, "  int8 %.1f us, fp32 %.1f us\n", 1e6 * r->q.median_s,
                    1e6 * r->f.median_s);
            n_rows++;
        }
    if (!rc) {
        measure_ceilings(o, bw, peak, &how);
        for (int i = 0; i < o->n_threads_list; i++)
            printf("ceilings with %d thread(s): streaming read %.2f GB/s (%d MB buffer); int8 "
                   "peak %.1f GOP/s [%s]\n", o->threads[i], bw[i], o->bw_mb, peak[i], how);
        printf("\n|    T | thr | int8 µs/layer | GB/s | GOP/s | %% roofline | outside GEMM | "
               "fp32 µs/layer | fp32/int8 |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        for (int i = 0; i < n_rows; i++) {
            int ti = 0;
            while (o->threads[ti] != rows[i].nt) ti++;
            fill_row(&rows[i], bw, peak, ti);
            print_row(&rows[i]);
        }
        print_summary(rows, n_rows, bw, peak, o);
    }
    for (int i = 0; i < n_q; i++) moe8_moe_layer_free(q[i].layer);
    for (int i = 0; i < n_f; i++) {
        moe8_moe_layer_free(f[i].layer);
        free(f[i].weights);
    }
    for (int i = 0; i < N_POOL; i++) free(pool[i]);
    free(out);
    free(scales);
    free(router);
    return rc;
}

int cmd_bench(int argc, char **argv) {
    bench_opts o;
    if (argc >= 2 && !strcmp(argv[1], "sched")) return cmd_bench_sched(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "serve")) return cmd_bench_serve(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "forward")) return cmd_bench_forward(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "grammar")) return cmd_bench_grammar(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "sampler")) return cmd_bench_sampler(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "prompt-cache")) return cmd_bench_prompt_cache(argc, argv);
    if (argc < 2 || strcmp(argv[1], "moe")) {
        fprintf(stderr, "usage: " SYNOPSIS "\n" NOTES "(moe8 bench moe -h: its options)\n");
        return 2;
    }
    const int rc = parse_opts(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    if (o.n_layers > 16 || o.n_float_layers > 16) {
        return cli_usage_err("bench", "at most 16 layers of each kind");
    }
    return bench_moe(&o);
}
