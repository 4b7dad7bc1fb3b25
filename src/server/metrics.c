/*
 * metrics.c — `GET /metrics` of moe8 serve: the Prometheus text format
 * (version 0.0.4) with vLLM's metric names under the `moe8:` prefix, each
 * labelled with the served model_name:
 *   counters   moe8:prompt_tokens_total, moe8:generation_tokens_total,
 *              moe8:request_success_total{finished_reason="stop|length|abort"},
 *              moe8:prefix_cache_hits_total, moe8:prefix_cache_queries_total (tokens)
 *              with --prompt-cache-dir, its disk tier (blocks, bytes, files):
 *              moe8:prompt_cache_disk_{hits,misses,evictions,rejected,dropped}_total,
 *              moe8:prompt_cache_disk_{read,written}_bytes_total
 *   gauges     moe8:num_requests_running, moe8:num_requests_waiting,
 *              moe8:kv_cache_usage_perc (fraction of KV blocks in use, 1 = all)
 *   histograms moe8:time_to_first_token_seconds, moe8:inter_token_latency_seconds
 *              (one observation per token after the first),
 *              moe8:e2e_request_latency_seconds
 *   hybrid models only (Gated DeltaNet layers: the recurrent-state pool, the
 *   prefix cache's state snapshots; SEMANTICS §10):
 *   gauges     moe8:state_slots_used, moe8:state_slots_total (slots held by
 *              running sequences or snapshots; all slots),
 *              moe8:state_snapshot_bytes, moe8:state_snapshot_bytes_limit (the
 *              snapshots' bytes; the pool's, --state-mb, which they share with
 *              running sequences: a sequence needing a slot evicts one)
 *   counters   moe8:state_snapshot_hits_total, moe8:state_snapshot_misses_total
 *              (sequences started or resumed from a snapshot / from position 0),
 *              moe8:state_snapshot_evictions_total (snapshots that left the cache)
 * The engine thread updates the numbers under the server lock; rendering
 * reads them under the same lock.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "server/server.h"

static const double TTFT_LE[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
                                 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0};
static const double ITL_LE[] = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
                                1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
static const double E2E_LE[] = {0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
                                40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

static void hist_init(srv_hist *h, const double *le, int n) {
    memset(h, 0, sizeof *h);
    h->le = le;
    h->n = n;
}

void moe8_metrics_init(srv_metrics *m) {
    memset(m, 0, sizeof *m);
    hist_init(&m->ttft, TTFT_LE, (int)(sizeof TTFT_LE / sizeof *TTFT_LE));
    hist_init(&m->itl, ITL_LE, (int)(sizeof ITL_LE / sizeof *ITL_LE));
    hist_init(&m->e2e, E2E_LE, (int)(sizeof E2E_LE / sizeof *E2E_LE));
}

void moe8_hist_observe(srv_hist *h, double v) {
    int i = 0;
    while (i < h->n && v > h->le[i]) i++;
    h->count[i]++;
    h->sum += v;
    h->total++;
}

static void line(moe8_buf *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void line(moe8_buf *out, const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    int n;
    va_start(ap, fmt);
    n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n > 0) moe8_buf_add(out, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
}

static void head(moe8_buf *out, const char *name, const char *type, const char *help) {
    line(out, "# HELP moe8:%s %s\n# TYPE moe8:%s %s\n", name, help, name, type);
}

static void counter(moe8_buf *out, const char *name, const char *help, const char *model, uint64_t v) {
    head(out, name, "counter", help);
    line(out, "moe8:%s{model_name=\"%s\"} %llu\n", name, model, (unsigned long long)v);
}

static void gauge(moe8_buf *out, const char *name, const char *help, const char *model, double v) {
    head(out, name, "gauge", help);
    line(out, "moe8:%s{model_name=\"%s\"} %.17g\n", name, model, v);
}

static void hist(moe8_buf *out, const char *name, const char *help, const char *model, const srv_hist *h) {
    uint64_t acc = 0;
    head(out, name, "histogram", help);
    for (int i = 0; i < h->n; i++) {
        acc += h->count[i];
        line(out, "moe8:%s_bucket{le=\"%g\",model_name=\"%s\"} %llu\n", name, h->le[i], model,
             (unsigned long long)acc);
    }
    line(out, "moe8:%s_bucket{le=\"+Inf\",model_name=\"%s\"} %llu\n", name, model,
         (unsigned long long)h->total);
    line(out, "moe8:%s_sum{model_name=\"%s\"} %.17g\n", name, model, h->sum);
    line(out, "moe8:%s_count{model_name=\"%s\"} %llu\n", name, model, (unsigned long long)h->total);
}

/* A label value in the text format: backslash, double quote and line feed
 * escaped (\\, \", \n); everything else as it is. */
static void label_escape(const char *v, char *out, size_t cap) {
    size_t o = 0;
    for (; *v && o + 3 < cap; v++) {
        if (*v == '\\' || *v == '"') out[o++] = '\\', out[o++] = *v;
        else if (*v == '\n') out[o++] = '\\', out[o++] = 'n';
        else out[o++] = *v;
    }
    out[o] = '\0';
}

static void state_pool(moe8_buf *out, const srv_metrics *m, const char *model) {
    gauge(out, "state_slots_used", "Recurrent-state slots held by running sequences or snapshots.",
          model, m->state_used);
    gauge(out, "state_slots_total", "Recurrent-state slots of the pool.", model, m->state_slots);
    gauge(out, "state_snapshot_bytes", "Bytes of the prefix cache's state snapshots.", model,
          (double)m->state_snap_bytes);
    gauge(out, "state_snapshot_bytes_limit",
          "Bytes of the recurrent-state pool, which snapshots share with running sequences.", model,
          (double)m->state_bytes);
    counter(out, "state_snapshot_hits_total", "Sequences started from a prefix-cache state snapshot.",
            model, m->snap_hits);
    counter(out, "state_snapshot_misses_total",
            "Sequences started from position 0 (no state snapshot found).", model, m->snap_misses);
    counter(out, "state_snapshot_evictions_total", "State snapshots evicted from the prefix cache.",
            model, m->snap_evictions);
}

int moe8_metrics_render(const srv_metrics *m, const char *model_name, moe8_buf *out) {
    static const char *const reason[3] = {"stop", "length", "abort"};
    const uint64_t n[3] = {m->success_stop, m->success_length, m->success_abort};
    char model[600];
    label_escape(model_name, model, sizeof model);
    out->n = 0;
    counter(out, "prompt_tokens_total", "Number of prefill tokens processed.", model, m->prompt_tokens);
    counter(out, "generation_tokens_total", "Number of generation tokens processed.", model,
            m->generation_tokens);
    head(out, "request_success_total", "counter", "Count of successfully processed requests.");
    for (int i = 0; i < 3; i++)
        line(out, "moe8:request_success_total{finished_reason=\"%s\",model_name=\"%s\"} %llu\n",
             reason[i], model, (unsigned long long)n[i]);
    counter(out, "prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.",
            model, m->prefix_hits);
    counter(out, "prefix_cache_queries_total",
            "Prefix cache queries, in terms of number of queried tokens.", model, m->prefix_queries);
    if (m->disk.enabled) {
        const moe8_prompt_cache_stats *d = &m->disk;
        counter(out, "prompt_cache_disk_hits_total", "Prompt cache disk tier: KV blocks loaded "
                "and verified.", model, d->hits);
        counter(out, "prompt_cache_disk_misses_total", "Prompt cache disk tier: lookups that found "
                "no block file.", model, d->misses);
        counter(out, "prompt_cache_disk_read_bytes_total", "Prompt cache disk tier: bytes read.",
                model, d->read_bytes);
        counter(out, "prompt_cache_disk_written_bytes_total", "Prompt cache disk tier: bytes "
                "written.", model, d->written_bytes);
        counter(out, "prompt_cache_disk_evictions_total", "Prompt cache disk tier: files removed "
                "by the size bound.", model, d->evictions);
        counter(out, "prompt_cache_disk_rejected_total", "Prompt cache disk tier: files that did "
                "not verify (removed, recomputed).", model, d->rejected);
        counter(out, "prompt_cache_disk_dropped_total", "Prompt cache disk tier: blocks not "
                "written (queue full or writing stopped).", model, d->dropped);
    }
    gauge(out, "num_requests_running", "Number of requests in model execution batches.", model,
          m->running);
    gauge(out, "num_requests_waiting", "Number of requests waiting to be processed.", model,
          m->waiting);
    gauge(out, "kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", model, m->kv_usage);
    if (m->state_slots > 0) state_pool(out, m, model);
    hist(out, "time_to_first_token_seconds", "Histogram of time to first token in seconds.", model,
         &m->ttft);
    hist(out, "inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", model,
         &m->itl);
    hist(out, "e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", model,
         &m->e2e);
    return 0;
}
