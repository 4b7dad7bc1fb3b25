/*
 * cmd_bench_sched.c — `moe8 bench sched -m DIR`: the scheduler on a real
 * model folder, two tables (Markdown on stdout, progress on stderr).
 *
 * 1. Decode with R running requests, for each R of --running: R requests of
 *    --prompt synthetic tokens each (distinct), started together; once every
 *    one has its first token, --steps decode steps are timed. Per row: the
 *    prompt phase, ms per step, aggregate and per-request tok/s, and the KV
 *    memory per request: what the paged pool holds for it (blocks in use x
 *    block bytes / R) against what a cache of n_ctx positions per sequence
 *    (the layout before paging) reserves; the share of the decode time in
 *    int8 GEMMs (experts, W8A8 projections) and float GEMMs (lm_head,
 *    router, FLOAT linears) from the library's kernel-time accounting (with
 *    --threads N, summed kernel time / N).
 * 2. Prefix cache: a request of --shared-total tokens whose first
 *    --shared tokens a finished request already computed, against a cold one
 *    of the same length (no shared tokens) and a cold one of its unshared
 *    suffix's length (issue 41's target for hybrids): time to first token
 *    (best and median of --reps, alternated), CPU seconds, cached tokens.
 * Uses the public API only; greedy, eos ignored.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

#define CMD "bench sched"
#define MAX_LIST 16

typedef struct {
    const char *dir;
    int running[MAX_LIST], n_running;
    int prompt, steps, threads, n_ctx, shared, shared_total, reps;
} sched_opts;


#define SYNOPSIS "moe8 bench sched -m DIR [--running 1,4,16,64] [--prompt 32] [--steps 16]\n" \
                 "                        [--ctx 4096] [--shared 240] [--shared-total 256]\n" \
                 "                        [--reps 3] [--threads N]"

static int parse(int argc, char **argv, sched_opts *o) {
    static const int def[] = {1, 4, 16, 64};
    memset(o, 0, sizeof *o);
    memcpy(o->running, def, sizeof def);
    o->n_running = 4;
    o->prompt = 32, o->steps = 16, o->n_ctx = 4096, o->shared = 240, o->shared_total = 256;
    o->reps = 3;
    const cli_opt opts[] = {
        {"-m", NULL, CLI_STR, &o->dir, .arg = "DIR", .help = "the model folder"},
        {"--running", NULL, CLI_LIST, o->running, 1, 4096, .count = &o->n_running, .cap = MAX_LIST,
         .arg = "LIST", .help = "requests running at once, one row each (default 1,4,16,64)"},
        {"--prompt", NULL, CLI_INT, &o->prompt, 1, 1 << 20, .arg = "N", .help = "prompt tokens (default 32)"},
        {"--steps", NULL, CLI_INT, &o->steps, 1, 1 << 20, .arg = "N", .help = "timed decode steps (default 16)"},
        {"--ctx", NULL, CLI_INT, &o->n_ctx, 1, 1 << 24, .arg = "N", .help = "context length (default 4096)"},
        {"--shared", NULL, CLI_INT, &o->shared, 1, 1 << 20, .arg = "N",
         .help = "tokens of the prefix-cache request a finished one computed\n(default 240)"},
        {"--shared-total", NULL, CLI_INT, &o->shared_total, 1, 1 << 20, .arg = "N",
         .help = "that request's length (default 256)"},
        {"--reps", NULL, CLI_INT, &o->reps, 1, 100, .arg = "N", .help = "prefix-cache repetitions, the best kept (default 3)"},
        {"--threads", NULL, CLI_INT, &o->threads, 1, 4096, .arg = "N", .help = "threads (default: OpenMP's)"},
        {0},
    };
    const int rc = cli_parse(CMD, SYNOPSIS, opts, NULL, argc - 1, argv + 1);
    if (rc) return rc;
    if (!o->dir) {
        cli_usage(stderr, SYNOPSIS, opts, NULL);
        return 2;
    }
    if (o->shared >= o->shared_total) {
        return cli_usage_err(CMD, "--shared %d must be below --shared-total %d", o->shared,
                             o->shared_total);
    }
    return 0;
}

/* Deterministic synthetic token ids in [0, V). */
static void fill_ids(int32_t *ids, int n, uint64_t seed, int32_t V) {
    for (int i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        ids[i] = (int32_t)((seed >> 33) % (uint64_t)V);
    }
}

static int make(moe8_model *m, const sched_opts *o, int n_seq, int n_batch, uint64_t kv_bytes,
                moe8_context **ctx, moe8_sched **s) {
    moe8_context_params cp = moe8_context_params_default();
    moe8_error err;
    cp.n_ctx = o->n_ctx;
    cp.n_seq_max = n_seq;
    cp.n_batch = n_batch;
    cp.n_outputs = n_seq;
    cp.n_threads = o->threads;
    cp.kv_bytes = kv_bytes;
    if (moe8_context_create(m, &cp, ctx, &err) || moe8_sched_create(*ctx, NULL, s, &err))
        return cli_fail(CMD, &err);
    return 0;
}

static int add(moe8_sched *s, const int32_t *ids, int n, int max_tokens, int64_t *id) {
    moe8_request q = moe8_request_default();
    moe8_error err;
    q.prompt = ids;
    q.n_prompt = n;
    q.max_tokens = max_tokens;
    q.ignore_eos = 1;
    return moe8_sched_add(s, &q, id, &err) ? cli_fail(CMD, &err) : 0;
}

/* Steps until n_tokens token events have come (or nothing is pending);
 * *ttft: the FINISH event's time to first token, when one came. */
static int run_until(moe8_sched *s, int64_t n_tokens, double *ttft, int32_t *cached) {
    int64_t seen = 0;
    while (seen < n_tokens && moe8_sched_pending(s) > 0) {
        const moe8_event *ev;
        int32_t n;
        moe8_error err;
        if (moe8_sched_step(s, &ev, &n, &err)) return cli_fail(CMD, &err);
        for (int32_t k = 0; k < n; k++) {
            if (ev[k].type == MOE8_EVENT_TOKEN) seen++;
            else {
                if (ttft) *ttft = ev[k].ttft_s;
                if (cached) *cached = ev[k].n_cached;
            }
        }
    }
    return 0;
}

static int decode_row(moe8_model *m, const sched_opts *o, int R) {
    const int32_t V = (int32_t)moe8_model_config(m)->vocab_size;
    const size_t bb = moe8_model_kv_block_bytes(m, moe8_context_params_default().kv_type);
    const int per_req = o->prompt + o->steps + 2;
    const uint64_t kv = (uint64_t)R * (uint64_t)((per_req + MOE8_KV_BLOCK_TOKENS - 1) /
                                                  MOE8_KV_BLOCK_TOKENS) * bb;
    int32_t *ids = malloc((size_t)o->prompt * sizeof *ids);
    moe8_context *ctx = NULL;
    moe8_sched *s = NULL;
    moe8_sched_stats st;
    moe8_kernel_times kt;
    double t0, t1, t2;
    const int nt = o->threads ? o->threads : 1;
    int rc = 1, nb = R * o->prompt < 4096 ? R * o->prompt : 4096;
    if (!ids || make(m, o, R, nb > R ? nb : R, kv, &ctx, &s)) goto done;
    for (int r = 0; r < R; r++) {
        int64_t id;
        fill_ids(ids, o->prompt, 1000 + (uint64_t)r, V);
        if (add(s, ids, o->prompt, o->steps + 2, &id)) goto done; /* still running after */
    }
    fprintf(stderr, "moe8 " CMD ": %d running: prompts\n", R);
    t0 = moe8_time_s();
    if (run_until(s, R, NULL, NULL)) goto done;
    t1 = moe8_time_s();
    fprintf(stderr, "moe8 " CMD ": %d running: %d decode steps\n", R, o->steps);
    moe8_bench_kernel_times(&kt, 1);
    if (run_until(s, (int64_t)R * o->steps, NULL, NULL)) goto done;
    t2 = moe8_time_s();
    moe8_bench_kernel_times(&kt, 0);
    moe8_sched_get_stats(s, &st);
    {
        const double step_ms = 1e3 * (t2 - t1) / o->steps, tok_s = R * o->steps / (t2 - t1);
        const double paged = (double)(st.kv.n_used) * (double)bb / R / 1048576.0;
        const double before = (double)o->n_ctx * (double)bb / MOE8_KV_BLOCK_TOKENS / 1048576.0;
        const double wall = (t2 - t1) * nt; /* kernel times are summed over threads */
        printf("| %d | %.2f | %.1f | %.1f | %.2f | %.0f%% | %.0f%% | %.2f | %.1f | %.0fx |\n", R,
               t1 - t0, step_ms, tok_s, tok_s / R, 100 * kt.gemm_q8_s / wall,
               100 * kt.gemm_f32_s / wall, paged, before, before / paged);
    }
    rc = 0;
done:
    moe8_sched_free(s);
    moe8_context_free(ctx);
    free(ids);
    return rc;
}

static int cmp_double(const void *x, const void *y) {
    const double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* One request of ids[0..n) to its end: *ttft, *cpu (process CPU seconds of
 * its steps), *cached. */
static int timed(moe8_sched *s, const int32_t *ids, int n, double *ttft, double *cpu,
                 int32_t *cached) {
    int64_t id;
    const clock_t c0 = clock();
    if (add(s, ids, n, 1, &id) || run_until(s, 1 << 30, ttft, cached)) return 1;
    *cpu = (double)(clock() - c0) / CLOCKS_PER_SEC;
    return 0;
}

/* Per rep, alternated: cold (n never-seen tokens), warm (a prefix of `shared`
 * tokens computed by the cold one), and the warm one's unshared suffix alone
 * (n - shared never-seen tokens). Best and median of reps. */
static int prefix_rows(moe8_model *m, const sched_opts *o) {
    const int32_t V = (int32_t)moe8_model_config(m)->vocab_size;
    const int n = o->shared_total, R = o->reps;
    int32_t *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b);
    double *t = calloc((size_t)R * 6, sizeof *t); /* [3][R] TTFT, then [3][R] CPU s */
    int32_t cached[3] = {0};
    static const char *const name[3] = {"cold", "shared prefix", "unshared suffix alone"};
    const int len[3] = {n, n, n - o->shared}, shared[3] = {0, o->shared, 0};
    moe8_context *ctx = NULL;
    moe8_sched *s = NULL;
    int rc = 1;
    if (!a || !b || !t || make(m, o, 2, n, 0, &ctx, &s)) goto done;
    for (int rep = 0; rep < R; rep++) {
        fill_ids(a, n, 77 + 2 * (uint64_t)rep, V);            /* cold: never seen */
        if (timed(s, a, n, &t[rep], &t[3 * R + rep], &cached[0])) goto done;
        memcpy(b, a, (size_t)o->shared * sizeof *b);          /* warm: a's first `shared` */
        fill_ids(b + o->shared, n - o->shared, 78 + 2 * (uint64_t)rep, V);
        if (timed(s, b, n, &t[R + rep], &t[4 * R + rep], &cached[1])) goto done;
        fill_ids(b, n - o->shared, 1000 + 2 * (uint64_t)rep, V); /* the suffix's length, cold */
        if (timed(s, b, n - o->shared, &t[2 * R + rep], &t[5 * R + rep], &cached[2])) goto done;
    }
    {
        double best[3], med[3], cpu[3];
        for (int k = 0; k < 3; k++) {
            best[k] = t[k * R];
            for (int r = 1; r < R; r++) best[k] = t[k * R + r] < best[k] ? t[k * R + r] : best[k];
            med[k] = median(t + k * R, R);
            cpu[k] = median(t + (3 + k) * R, R);
        }
        for (int k = 0; k < 3; k++)
            printf("| %s | %d | %d | %d | %.1f | %.1f | %.3f | %.2f |\n", name[k], len[k],
                   shared[k], cached[k], 1e3 * best[k], 1e3 * med[k], cpu[k], med[k] / med[1]);
        printf("\nshared prefix / unshared suffix alone: TTFT %.3f (medians), CPU %.3f\n",
               med[1] / med[2], cpu[1] / cpu[2]);
    }
    rc = 0;
done:
    moe8_sched_free(s);
    moe8_context_free(ctx);
    free(a);
    free(b);
    free(t);
    return rc;
}

int cmd_bench_sched(int argc, char **argv) {
    sched_opts o;
    moe8_model_params mp = moe8_model_params_default();
    cli_model_opts(&mp);
    moe8_model *m = NULL;
    moe8_error err;
    int rc = parse(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    mp.n_threads = o.threads;
    moe8_bench_kernel_timing(1); /* before the context: its kernel table records times */
    if (moe8_model_load(o.dir, &mp, &m, &err)) return cli_fail(CMD, &err);
    printf("decode with R running requests (%d-token prompts, %d timed steps, n_ctx %d, %s "
           "kernels)\n\n", o.prompt, o.steps, o.n_ctx, moe8_kernel_isa());
    printf("| running | prompt phase s | ms / step | aggregate tok/s | tok/s per request | int8 "
           "GEMM | float GEMM | KV MiB per request (paged) | KV MiB per request (n_ctx reserved) "
           "| saved |\n");
    printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int i = 0; i < o.n_running && !rc; i++) rc = decode_row(m, &o, o.running[i]);
    if (!rc) {
        printf("\nprefix cache: time to first token (%d reps, alternated)\n\n", o.reps);
        printf("| request | prompt tokens | shared with a finished request | cached | TTFT ms "
               "best | TTFT ms median | CPU s median | / shared prefix |\n"
               "|---|---:|---:|---:|---:|---:|---:|---:|\n");
        rc = prefix_rows(m, &o);
    }
    moe8_model_free(m);
    return rc;
}
