/*
 * cmd_bench_prompt_cache.c — `moe8 bench prompt-cache -m DIR --dir D`: the
 * prompt cache's disk tier (SEMANTICS §10b) on a real model folder, three
 * tables (Markdown on stdout, progress on stderr; greedy, eos ignored):
 * 1. Restart: a --prompt token request, time to first token and CPU seconds
 *    cold with the tier off, cold with it on (writing), and in a new
 *    context after the first was freed (the restart: loaded from D); whether
 *    the restarted run's tokens equal the cold run's.
 * 2. Block loading: the restart's bytes read over the time its loads took
 *    (moe8_prompt_cache_stats.read_seconds and read_cpu_seconds: open,
 *    read into the pool, verify, touch), against read-bandwidth probes on
 *    the same files, warm in the page cache: pread in 1 MiB pieces into one
 *    reused buffer, and each file whole into fresh memory (the pool's pages
 *    of a new context are touched first by the load), best of two passes
 *    after a warming one.
 * 3. Decode at concurrency --running: --requests requests of
 *    --decode-prompt distinct tokens and --tokens generated each, a new one
 *    started as one ends, the tier off and on (writing every finished
 *    prompt), alternated --reps times: generated tokens per second (wall)
 *    and per CPU second.
 * Uses the public API only.
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define CMD "bench prompt-cache"
#define SYNOPSIS "moe8 bench prompt-cache -m DIR --dir D [--prompt 4096] [--threads N]\n" \
                 "        [--running 8] [--requests 24] [--decode-prompt 256] [--tokens 32] [--reps 2]"

typedef struct {
    const char *dir, *cache;
    int prompt, threads, running, requests, dprompt, tokens, reps;
} pc_opts;

static double wall_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double cpu_s(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + 1e-6 * (double)u.ru_utime.tv_usec +
           (double)u.ru_stime.tv_sec + 1e-6 * (double)u.ru_stime.tv_usec;
}

static void fill_ids(int32_t *t, int n, uint64_t seed, int32_t V) {
    for (int i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        t[i] = (int32_t)(1 + (seed >> 33) % (uint64_t)(V - 1));
    }
}

static int make(moe8_model *m, const pc_opts *o, int n_seq, int n_ctx, const char *cache,
                moe8_context **ctx, moe8_sched **s) {
    moe8_context_params cp = moe8_context_params_default();
    moe8_error err;
    cp.n_ctx = n_ctx;
    cp.n_seq_max = n_seq;
    cp.n_batch = n_ctx < 2048 ? n_ctx : 2048;
    cp.n_outputs = n_seq;
    cp.n_threads = o->threads;
    cp.prompt_cache_dir = cache;
    if (moe8_context_create(m, &cp, ctx, &err) || moe8_sched_create(*ctx, NULL, s, &err))
        return cli_fail(CMD, &err);
    return 0;
}

/* ---- 1, 2: restart and loading --------------------------------------------------------- */

typedef struct {
    double ttft, cpu, first_step, again_step; /* again: the same prompt, from memory */
    int32_t cached, tok[4];
    moe8_prompt_cache_stats disk;
} one_run;

/* One request of ids[0..n) (4 tokens) in a context of its own; again: then
 * the same request once more (its prefix from memory), its first step timed. */
static int run_one(moe8_model *m, const pc_opts *o, const int32_t *ids, int n, const char *cache,
                   int again, one_run *r) {
    moe8_context *ctx = NULL;
    moe8_sched *s = NULL;
    moe8_request q = moe8_request_default();
    moe8_kv_stats kv;
    moe8_error err;
    int64_t id;
    int k = 0, rc = make(m, o, 1, n + 8, cache, &ctx, &s);
    const double c0 = cpu_s();
    memset(r, 0, sizeof *r);
    q.prompt = ids;
    q.n_prompt = n;
    q.max_tokens = 4;
    q.ignore_eos = 1;
    for (int pass = 0; pass < 1 + again; pass++) {
        if (!rc && moe8_sched_add(s, &q, &id, &err)) rc = cli_fail(CMD, &err);
        for (int step = 0; !rc && moe8_sched_pending(s) > 0; step++) {
            const moe8_event *ev;
            int32_t n_ev;
            const double t0 = wall_s();
            if (moe8_sched_step(s, &ev, &n_ev, &err)) rc = cli_fail(CMD, &err);
            if (step == 0) *(pass ? &r->again_step : &r->first_step) = wall_s() - t0;
            for (int32_t i = 0; !rc && !pass && i < n_ev; i++) {
                if (ev[i].type == MOE8_EVENT_TOKEN && k < 4) r->tok[k++] = ev[i].token;
                if (ev[i].type == MOE8_EVENT_FINISH) r->ttft = ev[i].ttft_s, r->cached = ev[i].n_cached;
            }
        }
        if (!pass) r->cpu = cpu_s() - c0;
    }
    moe8_sched_free(s);
    if (ctx) moe8_context_kv_stats(ctx, &kv), r->disk = kv.disk;
    moe8_context_free(ctx); /* writes what is queued */
    return rc;
}

static double thread_cpu(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The read bandwidth of the page cache: every file of dir read whole with
 * pread, twice after a warming pass, the best pass; bytes per wall second,
 * *per_cpu bytes per CPU second of this thread. */
static double read_probe(const char *dir, int fresh, double *per_cpu) {
    double best = 0;
    *per_cpu = 0;
    char *buf = fresh ? NULL : malloc((size_t)64 << 20);
    for (int pass = 0; (fresh || buf) && pass < 3; pass++) {
        DIR *d = opendir(dir);
        struct dirent *e;
        uint64_t bytes = 0;
        const double t0 = wall_s(), c0 = thread_cpu();
        while (d && (e = readdir(d))) {
            if (e->d_name[0] == '.') continue;
            int fd = openat(dirfd(d), e->d_name, O_RDONLY);
            struct stat sb;
            ssize_t got;
            off_t off = 0;
            const size_t size = fd >= 0 && !fstat(fd, &sb) ? (size_t)sb.st_size : 0;
            char *to = fresh ? malloc(size + 1) : buf; /* fresh: the whole file, untouched pages */
            while (fd >= 0 && to &&
                   (got = pread(fd, fresh ? to + off : to, (size_t)1 << 20, off)) > 0)
                off += got, bytes += (uint64_t)got;
            if (fd >= 0) close(fd);
            if (fresh) free(to);
        }
        if (d) closedir(d);
        const double dt = wall_s() - t0, dc = thread_cpu() - c0;
        if (pass > 0 && dt > 0 && bytes / dt > best) best = (double)bytes / dt;
        if (pass > 0 && dc > 0 && bytes / dc > *per_cpu) *per_cpu = (double)bytes / dc;
    }
    free(buf);
    return best;
}

static int restart_rows(moe8_model *m, const pc_opts *o) {
    const int32_t V = (int32_t)moe8_model_config(m)->vocab_size;
    int32_t *ids = malloc((size_t)o->prompt * sizeof *ids);
    one_run r[3];
    moe8_error err;
    int rc = 1;
    if (!ids) return 1;
    fill_ids(ids, o->prompt, 4242, V);
    if (moe8_prompt_cache_clear(o->cache, NULL, NULL, &err) && err.code != MOE8_ERR_IO) goto done;
    fprintf(stderr, "moe8 " CMD ": a %d-token prompt: cold, cold writing, restarted\n", o->prompt);
    double probe_cpu, probe;
    if (run_one(m, o, ids, o->prompt, NULL, 0, &r[0]) ||
        run_one(m, o, ids, o->prompt, o->cache, 0, &r[1]))
        goto done;
    sync(); /* written back: the restart reads a warm page cache, as the probe does */
    probe = read_probe(o->cache, 0, &probe_cpu);
    double fresh_cpu, fresh = read_probe(o->cache, 1, &fresh_cpu);
    if (run_one(m, o, ids, o->prompt, o->cache, 1, &r[2])) goto done;
    static const char *const name[3] = {"cold, tier off", "cold, tier on (writing)",
                                        "restarted (tier on, loaded)"};
    printf("| run | prompt | TTFT s | CPU s | cached tokens | blocks loaded | same tokens as cold |\n");
    printf("|---|---|---|---|---|---|---|\n");
    for (int k = 0; k < 3; k++)
        printf("| %s | %d | %.3f | %.2f | %d | %llu | %s |\n", name[k], o->prompt, r[k].ttft,
               r[k].cpu, r[k].cached, (unsigned long long)r[k].disk.hits,
               memcmp(r[k].tok, r[0].tok, sizeof r[0].tok) ? "NO" : "yes");
    printf("\nrestarted / cold TTFT: %.3f\n\n", r[2].ttft / r[0].ttft);
    const double load = r[2].disk.read_seconds, load_cpu = r[2].disk.read_cpu_seconds;
    const double bytes = (double)r[2].disk.read_bytes;
    const double rate = load > 0 ? bytes / load : 0, rate_cpu = load_cpu > 0 ? bytes / load_cpu : 0;
    printf("| block loading | MB | wall s | CPU s | MB/s wall | MB/s CPU |\n|---|---|---|---|---|---|\n");
    printf("| the restart's loads (open, read, verify, touch) | %.2f | %.4f | %.4f | %.0f | %.0f |\n",
           bytes / 1e6, load, load_cpu, rate / 1e6, rate_cpu / 1e6);
    printf("| read probe (pread of the same files, page cache, one reused buffer) | | | | %.0f | %.0f |\n",
           probe / 1e6, probe_cpu / 1e6);
    printf("| read probe into fresh memory (each file whole to a new malloc) | | | | %.0f | %.0f |\n",
           fresh / 1e6, fresh_cpu / 1e6);
    printf("\nload rate / read bandwidth: %.2f (wall), %.2f (CPU); into fresh memory %.2f (wall), "
           "%.2f (CPU); the restart's first step %.3f s, the same step from memory %.3f s\n\n",
           probe > 0 ? rate / probe : 0, probe_cpu > 0 ? rate_cpu / probe_cpu : 0,
           fresh > 0 ? rate / fresh : 0, fresh_cpu > 0 ? rate_cpu / fresh_cpu : 0,
           r[2].first_step, r[2].again_step);
    rc = 0;
done:
    free(ids);
    return rc;
}

/* ---- 3: decode with the tier writing ------------------------------------------------------- */

/* Closed loop: `running` at once, a new request as one ends, `requests` in all. */
static int decode_once(moe8_model *m, const pc_opts *o, const char *cache, uint64_t seed,
                       double *tok_s, double *tok_cpu, uint64_t *written) {
    const int32_t V = (int32_t)moe8_model_config(m)->vocab_size;
    int32_t *ids = malloc((size_t)o->requests * (size_t)o->dprompt * sizeof *ids);
    moe8_context *ctx = NULL;
    moe8_sched *s = NULL;
    moe8_error err;
    int64_t gen = 0;
    int added = 0, rc = !ids || make(m, o, o->running, o->dprompt + o->tokens + 8, cache, &ctx, &s);
    const double t0 = wall_s(), c0 = cpu_s();
    if (!rc) fill_ids(ids, o->requests * o->dprompt, seed, V);
    while (!rc && (added < o->requests || moe8_sched_pending(s) > 0)) {
        while (added < o->requests && moe8_sched_pending(s) < o->running) {
            moe8_request q = moe8_request_default();
            int64_t id;
            q.prompt = ids + (size_t)added++ * o->dprompt;
            q.n_prompt = o->dprompt;
            q.max_tokens = o->tokens;
            q.ignore_eos = 1;
            if (moe8_sched_add(s, &q, &id, &err)) rc = cli_fail(CMD, &err);
        }
        const moe8_event *ev;
        int32_t n_ev;
        if (!rc && moe8_sched_step(s, &ev, &n_ev, &err)) rc = cli_fail(CMD, &err);
        for (int32_t i = 0; !rc && i < n_ev; i++) gen += ev[i].type == MOE8_EVENT_TOKEN;
    }
    *tok_s = (double)gen / (wall_s() - t0);
    *tok_cpu = (double)gen / (cpu_s() - c0);
    if (ctx) {
        moe8_kv_stats kv;
        moe8_context_kv_stats(ctx, &kv);
        *written = kv.disk.written_bytes;
    }
    moe8_sched_free(s);
    moe8_context_free(ctx);
    free(ids);
    return rc;
}

static int decode_rows(moe8_model *m, const pc_opts *o) {
    double t[2][2] = {{0, 0}, {0, 0}}; /* [off/on][tok/s, tok/CPU-s] summed over reps */
    uint64_t written = 0;
    fprintf(stderr, "moe8 " CMD ": decode at concurrency %d, tier off and on, %d reps\n", o->running,
            o->reps);
    for (int rep = 0; rep < o->reps; rep++)
        for (int on = 0; on < 2; on++) {
            double a, b;
            uint64_t w = 0;
            if (on) moe8_prompt_cache_clear(o->cache, NULL, NULL, NULL);
            if (decode_once(m, o, on ? o->cache : NULL, 900 + (uint64_t)rep, &a, &b, &w)) return 1;
            t[on][0] += a / o->reps;
            t[on][1] += b / o->reps;
            if (on) written += w;
        }
    printf("| decode, %d running, %d requests of %d + %d tokens | tok/s (wall) | tok / CPU s |\n",
           o->running, o->requests, o->dprompt, o->tokens);
    printf("|---|---|---|\n| tier off | %.2f | %.3f |\n| tier on (writing) | %.2f | %.3f |\n",
           t[0][0], t[0][1], t[1][0], t[1][1]);
    printf("\ntier on / off: wall %.3f, CPU %.3f (%.1f MB written per run)\n", t[1][0] / t[0][0],
           t[1][1] / t[0][1], (double)written / o->reps / 1e6);
    return 0;
}

int cmd_bench_prompt_cache(int argc, char **argv) {
    pc_opts o = {NULL, NULL, 4096, 0, 8, 24, 256, 32, 2};
    moe8_model_params mp = moe8_model_params_default();
    moe8_model *m = NULL;
    moe8_error err;
    const cli_opt opts[] = {
        {"-m", NULL, CLI_STR, &o.dir, .arg = "DIR", .help = "model folder"},
        {"--dir", NULL, CLI_STR, &o.cache, .arg = "D", .help = "the prompt cache directory (cleared)"},
        {"--prompt", NULL, CLI_INT, &o.prompt, 17, 1 << 20, .arg = "N", .help = "restart prompt tokens (4096)"},
        {"--threads", NULL, CLI_INT, &o.threads, 1, 4096, .arg = "N", .help = "threads (default: OpenMP's)"},
        {"--running", NULL, CLI_INT, &o.running, 1, 4096, .arg = "N", .help = "decode concurrency (8)"},
        {"--requests", NULL, CLI_INT, &o.requests, 1, 1 << 20, .arg = "N", .help = "decode requests (24)"},
        {"--decode-prompt", NULL, CLI_INT, &o.dprompt, 1, 1 << 20, .arg = "N", .help = "their prompts (256)"},
        {"--tokens", NULL, CLI_INT, &o.tokens, 1, 1 << 20, .arg = "N", .help = "tokens each generates (32)"},
        {"--reps", NULL, CLI_INT, &o.reps, 1, 100, .arg = "N", .help = "decode runs each way, alternated (2)"},
        {0},
    };
    int rc = cli_parse(CMD, SYNOPSIS, opts, NULL, argc - 1, argv + 1);
    if (rc) return rc < 0 ? 0 : rc;
    if (!o.dir || !o.cache) return cli_usage_err(CMD, "-m DIR and --dir D are required");
    cli_model_opts(&mp);
    mp.n_threads = o.threads;
    if (moe8_model_load(o.dir, &mp, &m, &err)) return cli_fail(CMD, &err);
    rc = restart_rows(m, &o);
    if (!rc) rc = decode_rows(m, &o);
    moe8_model_free(m);
    return rc;
}
