/*
 * bench_serve_table.c — the results table of `moe8 bench serve`, in the rows
 * and order of `vllm bench serve` (counts, throughputs, then mean, median and
 * p99 (or --percentiles) of TTFT, TPOT, ITL and end-to-end latency in ms) on
 * stdout, and with --save-result the same numbers as JSON under vLLM's keys
 * (mean_ttft_ms, median_ttft_ms, p99_ttft_ms, ..., request_throughput).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bench_serve.h"

/* p-th percentile of sorted v[n], linear between ranks (numpy's default). */
static double pct(const double *v, size_t n, double p) {
    const double rank = p / 100.0 * (double)(n - 1);
    const size_t lo = (size_t)rank, hi = lo + 1 < n ? lo + 1 : lo;
    return v[lo] + (rank - (double)lo) * (v[hi] - v[lo]);
}

#define ROW(label, fmt, ...) printf("%-40s " fmt "\n", label, __VA_ARGS__)

/* Mean and the percentiles (default median and p99) in ms of v[n] (sorted
 * here); "-" when n = 0. Into js too (mean_KEY_ms, median_KEY_ms, pP_KEY_ms)
 * when it is not NULL. */
static void print_stat(const serve_opts *o, cJSON *js, const char *title, const char *name, const char *key,
                       double *v, size_t n) {
    static const int def[2] = {50, 99};
    const int *ps = o->n_percentiles ? o->percentiles : def, np = o->n_percentiles ? o->n_percentiles : 2;
    char label[64], jkey[64];
    double sum = 0.0;
    printf("%s\n", title);
    if (n) qsort(v, n, sizeof *v, cli_cmp_double);
    for (size_t i = 0; i < n; i++) sum += v[i];
    snprintf(label, sizeof label, "Mean %s (ms):", name);
    if (n) ROW(label, "%.2f", 1e3 * sum / (double)n);
    else ROW(label, "%s", "-");
    snprintf(jkey, sizeof jkey, "mean_%s_ms", key);
    if (js && n) cJSON_AddNumberToObject(js, jkey, 1e3 * sum / (double)n);
    for (int k = 0; k < np; k++) {
        const double x = n ? 1e3 * pct(v, n, ps[k]) : 0;
        if (ps[k] == 50 && !o->n_percentiles) snprintf(label, sizeof label, "Median %s (ms):", name);
        else snprintf(label, sizeof label, "P%d %s (ms):", ps[k], name);
        if (n) ROW(label, "%.2f", x);
        else ROW(label, "%s", "-");
        if (ps[k] == 50) snprintf(jkey, sizeof jkey, "median_%s_ms", key);
        else snprintf(jkey, sizeof jkey, "p%d_%s_ms", ps[k], key);
        if (js && n) cJSON_AddNumberToObject(js, jkey, x);
    }
}

/* --save-result FILE: js written whole (FILE.tmp, then renamed); 0 or 1. */
static int save(const char *path, cJSON *js) {
    char tmp[4200];
    char *text = cJSON_Print(js);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = text ? fopen(tmp, "w") : NULL;
    const int ok = f && fputs(text, f) >= 0 && fputc('\n', f) != EOF;
    if (f && fclose(f)) return free(text), cli_err(CMD, "cannot write '%s': %m", tmp);
    free(text);
    if (!ok || rename(tmp, path)) return cli_err(CMD, "cannot write '%s': %m", path);
    fprintf(stderr, "moe8 " CMD ": results saved to %s\n", path);
    return 0;
}

void bserve_print_results(bench *b, double dur) {
    const serve_opts *o = b->o;
    results *s = &b->res;
    cJSON *js = o->save_result ? cJSON_CreateObject() : NULL;
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
    print_stat(o, js, "---------------Time to First Token----------------", "TTFT", "ttft", s->ttft,
               (size_t)s->n_ok);
    print_stat(o, js, "-----Time per Output Token (excl. 1st token)------", "TPOT", "tpot", s->tpot,
               (size_t)s->n_tpot);
    /* ITLs are kept as float to halve their memory; sorted in place, read as double. */
    if (s->n_itl && (itl = malloc(s->n_itl * sizeof *itl))) {
        qsort(s->itl, s->n_itl, sizeof *s->itl, cli_cmp_float);
        for (size_t i = 0; i < s->n_itl; i++) itl[i] = s->itl[i];
    }
    print_stat(o, js, "---------------Inter-token Latency----------------", "ITL", "itl", itl,
               itl ? s->n_itl : 0);
    print_stat(o, js, "----------------End-to-end Latency----------------", "E2EL", "e2el", s->e2el,
               (size_t)s->n_ok);
    printf("==================================================\n");
    fflush(stdout);
    free(itl);
    if (js) {
        char date[32];
        const time_t now = time(NULL);
        struct tm tm;
        strftime(date, sizeof date, "%Y%m%d-%H%M%S", gmtime_r(&now, &tm));
        cJSON_AddStringToObject(js, "date", date);
        cJSON_AddStringToObject(js, "backend", "moe8");
        cJSON_AddStringToObject(js, "endpoint", b->endpoint);
        cJSON_AddStringToObject(js, "model_id", b->model);
        cJSON_AddNumberToObject(js, "num_prompts", o->n_prompts);
        if (isfinite(o->request_rate)) cJSON_AddNumberToObject(js, "request_rate", o->request_rate);
        else cJSON_AddStringToObject(js, "request_rate", "inf");
        if (o->max_concurrency) cJSON_AddNumberToObject(js, "max_concurrency", o->max_concurrency);
        else cJSON_AddNullToObject(js, "max_concurrency");
        cJSON_AddNumberToObject(js, "seed", (double)o->seed);
        cJSON_AddNumberToObject(js, "duration", dur);
        cJSON_AddNumberToObject(js, "completed", s->n_ok);
        cJSON_AddNumberToObject(js, "failed", s->n_failed);
        cJSON_AddNumberToObject(js, "total_input_tokens", (double)s->in_tokens);
        cJSON_AddNumberToObject(js, "cached_input_tokens", (double)s->cached_tokens);
        cJSON_AddNumberToObject(js, "total_output_tokens", (double)s->out_tokens);
        cJSON_AddNumberToObject(js, "request_throughput", s->n_ok / dur);
        cJSON_AddNumberToObject(js, "output_throughput", (double)s->out_tokens / dur);
        cJSON_AddNumberToObject(js, "total_token_throughput", (double)(s->in_tokens + s->out_tokens) / dur);
        cJSON_AddNumberToObject(js, "max_concurrent_requests", s->peak);
        s->save_failed = save(o->save_result, js);
        cJSON_Delete(js);
    }
}
