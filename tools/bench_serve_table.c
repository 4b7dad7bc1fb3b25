/*
 * bench_serve_table.c — the results table of `moe8 bench serve`, in the rows
 * and order of `vllm bench serve` (counts, throughputs, then mean, median and
 * p99 of TTFT, TPOT, ITL and end-to-end latency in ms) on stdout.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench_serve.h"

/* p-th percentile of sorted v[n], linear between ranks (numpy's default). */
static double pct(const double *v, size_t n, double p) {
    const double rank = p / 100.0 * (double)(n - 1);
    const size_t lo = (size_t)rank, hi = lo + 1 < n ? lo + 1 : lo;
    return v[lo] + (rank - (double)lo) * (v[hi] - v[lo]);
}

#define ROW(label, fmt, ...) printf("%-40s " fmt "\n", label, __VA_ARGS__)

/* Mean, median and p99 in ms of v[n] (sorted here); "-" when n = 0. */
static void print_stat(const char *title, const char *name, double *v, size_t n) {
    static const char *const what[3] = {"Mean", "Median", "P99"};
    double x[3], sum = 0.0;
    printf("%s\n", title);
    if (n) {
        qsort(v, n, sizeof *v, cli_cmp_double);
        for (size_t i = 0; i < n; i++) sum += v[i];
        x[0] = sum / (double)n, x[1] = pct(v, n, 50), x[2] = pct(v, n, 99);
    }
    for (int k = 0; k < 3; k++) {
        char label[64];
        snprintf(label, sizeof label, "%s %s (ms):", what[k], name);
        if (n) ROW(label, "%.2f", 1e3 * x[k]);
        else ROW(label, "%s", "-");
    }
}

void bserve_print_results(bench *b, double dur) {
    const serve_opts *o = b->o;
    results *s = &b->res;
    char fail[128] = "", rate[32], conc[32];
    double *itl = NULL;
    snprintf(rate, sizeof rate, isfinite(o->request_rate) ? "%g" : "inf", o->request_rate);
    snprintf(conc, sizeof conc, o->max_concurrency ? "%d" : "none", o->max_concurrency);
    if (s->n_failed)
        snprintf(fail, sizeof fail, " (HTTP %d, timeout %d, connection %d, stream %d)",
                 s->n_by[FAIL_HTTP], s->n_by[FAIL_TIMEOUT], s->n_by[FAIL_CONNECT],
                 s->n_by[FAIL_STREAM]);
    if (dur <= 0) dur = 1e-9;
    printf("============ Serving Benchmark Result ============\n");
    ROW("Endpoint:", "%s", b->endpoint);
    ROW("Seed:", "%llu", (unsigned long long)b->o->seed);
    ROW("Model:", "%s", b->model);
    if (o->json_schema || o->json_object)
        ROW("Structured output:", "%s%s", o->json_object ? "json_object" : "json_schema ", o->json_object ? "" : o->json_schema);
    ROW("Traffic request rate (req/s):", "%s", rate);
    ROW("Max request concurrency:", "%s", conc);
    ROW("Peak concurrent requests:", "%d", s->peak);
    ROW("Successful requests:", "%d", s->n_ok);
    ROW("Failed requests:", "%d%s", s->n_failed, fail);
    ROW("Benchmark duration (s):", "%.2f", dur);
    ROW("Total input tokens:", "%lld%s", (long long)s->in_tokens,
        s->no_usage_in ? " (some counted as words: no usage from the server)" : "");
    ROW("Cached input tokens:", "%lld%s", (long long)s->cached_tokens,
        s->no_cached ? " (some requests' usage had no cached_tokens)" : "");
    ROW("Total generated tokens:", "%lld%s", (long long)s->out_tokens,
        s->no_usage_out ? " (some counted as text events: no usage from the server)" : "");
    ROW("Request throughput (req/s):", "%.2f", s->n_ok / dur);
    ROW("Output token throughput (tok/s):", "%.2f", (double)s->out_tokens / dur);
    ROW("Total token throughput (tok/s):", "%.2f", (double)(s->in_tokens + s->out_tokens) / dur);
    print_stat("---------------Time to First Token----------------", "TTFT", s->ttft,
               (size_t)s->n_ok);
    print_stat("-----Time per Output Token (excl. 1st token)------", "TPOT", s->tpot,
               (size_t)s->n_tpot);
    /* ITLs are kept as float to halve their memory; sorted in place, read as double. */
    if (s->n_itl && (itl = malloc(s->n_itl * sizeof *itl))) {
        qsort(s->itl, s->n_itl, sizeof *s->itl, cli_cmp_float);
        for (size_t i = 0; i < s->n_itl; i++) itl[i] = s->itl[i];
    }
    print_stat("---------------Inter-token Latency----------------", "ITL", itl,
               itl ? s->n_itl : 0);
    print_stat("----------------End-to-end Latency----------------", "E2EL", s->e2el,
               (size_t)s->n_ok);
    printf("==================================================\n");
    free(itl);
}
