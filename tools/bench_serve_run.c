/*
 * bench_serve_run.c — the load of `moe8 bench serve`: one thread drives every
 * request through libcurl's multi interface. Request i is sent at its arrival
 * time (all at t = 0, or a Poisson process of --request-rate R: exponential
 * gaps from the seeded generator), once fewer than --max-concurrency are in
 * flight (FIFO). When a transfer ends it is classified (HTTP, timeout,
 * connection, malformed stream), the first failure printed, and its times
 * recorded: TTFT = first text - send, ITL = gaps between text events,
 * latency = the stream's end (data: [DONE], response.completed / .incomplete,
 * message_stop) - send, TPOT = (latency - TTFT) / (output tokens - 1).
 * Progress on stderr every tenth of the requests. Prints no table.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_serve.h"

static const char *const fail_name[N_FAIL] = {"", "HTTP", "timeout", "connection", "stream"};

static int start_request(bench *b, int i, double t) {
    request *r = calloc(1, sizeof *r);
    const char *prompt = b->ps->n_lines ? b->ps->lines[i % b->ps->n_lines]
                                        : bserve_synth_prompt(b->o, i, &b->pbuf, &b->pcap);
    if (!r || !prompt || !(r->body = bserve_request_body(b->o, b->model, prompt)) ||
        !(r->h = curl_easy_init())) {
        if (r) free(r->body);
        free(r);
        return cli_err(CMD, "out of memory starting request %d", i);
    }
    r->index = i, r->t_send = t, r->api = b->o->api;
    r->prompt_tokens = r->completion_tokens = r->cached_tokens = -1;
    r->max_tokens = b->o->output_len;
    r->max_text = 2 * (int64_t)b->o->output_len + 16;
    CURL *h = r->h;
    curl_easy_setopt(h, CURLOPT_URL, b->endpoint);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, b->headers);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, r->body);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(r->body));
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, bserve_on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(h, CURLOPT_PRIVATE, r);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, r->errbuf);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)(b->o->timeout_s * 1000.0));
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(h, CURLOPT_PROXY, ""); /* only ever the URL given, never $http_proxy */
    if (curl_multi_add_handle(b->multi, h) != CURLM_OK) {
        cli_err(CMD, "cannot start request %d", i);
        curl_easy_cleanup(h);
        free(r->body);
        free(r);
        return 1;
    }
    r->next = b->live;
    if (b->live) b->live->prev = r;
    b->live = r;
    return 0;
}

void bserve_free_request(bench *b, request *r) {
    if (r->prev) r->prev->next = r->next;
    else b->live = r->next;
    if (r->next) r->next->prev = r->prev;
    curl_multi_remove_handle(b->multi, r->h);
    curl_easy_cleanup(r->h);
    free(r->body);
    free(r->buf);
    free(r->itl);
    free(r);
}

static int push_res_itl(results *s, const request *r) {
    if (s->n_itl + r->n_itl > s->cap_itl) {
        size_t nc = s->cap_itl ? s->cap_itl : 4096;
        while (nc < s->n_itl + r->n_itl) nc *= 2;
        float *n = realloc(s->itl, nc * sizeof *n);
        if (!n) return -1;
        s->itl = n, s->cap_itl = nc;
    }
    if (r->n_itl) memcpy(s->itl + s->n_itl, r->itl, r->n_itl * sizeof *r->itl);
    s->n_itl += r->n_itl;
    return 0;
}

/* A transfer ended with `code`: classify, record, free. */
static void finish_request(bench *b, request *r, CURLcode code, double t) {
    results *s = &b->res;
    if (!r->status) curl_easy_getinfo(r->h, CURLINFO_RESPONSE_CODE, &r->status);
    if (code == CURLE_OK && r->status / 100 == 2 && r->len && !r->fail)
        bserve_on_line(r, r->buf, r->len, t); /* a last line without its line break */
    if (code == CURLE_OK && r->status / 100 != 2) {
        char head[MAX_ERR_BODY + 1];
        snprintf(head, sizeof head, "%.*s", (int)r->len, r->buf ? r->buf : "");
        r->fail = 0;
        snprintf(r->msg, sizeof r->msg, "HTTP %ld: %.480s", r->status, head);
        r->fail = FAIL_HTTP;
    } else if (code == CURLE_OPERATION_TIMEDOUT) {
        r->fail = 0;
        snprintf(r->msg, sizeof r->msg, "timed out after %g s (--timeout): %s", b->o->timeout_s,
                 r->errbuf[0] ? r->errbuf : curl_easy_strerror(code));
        r->fail = FAIL_TIMEOUT;
    } else if (code != CURLE_OK && !r->fail) {
        bserve_req_fail(r, FAIL_CONNECT, "%s", r->errbuf[0] ? r->errbuf : curl_easy_strerror(code));
    } else if (!r->fail && !r->n_events) {
        bserve_req_fail(r, FAIL_STREAM, "not a stream: no data: line in the answer (stream ignored?)");
    } else if (!r->fail && !r->done) {
        bserve_req_fail(r, FAIL_STREAM, "malformed stream: it ended before %s", bserve_end_event(r->api));
    } else if (!r->fail && !r->n_text) {
        bserve_req_fail(r, FAIL_STREAM, "malformed stream: no event carried text");
    }
    if (!r->fail && push_res_itl(s, r)) bserve_req_fail(r, FAIL_STREAM, "%s", "out of memory");
    if (r->fail) {
        s->n_failed++, s->n_by[r->fail]++;
        if (!s->printed_error++)
            cli_err(CMD, "request %d failed (%s): %s", r->index, fail_name[r->fail], r->msg);
    } else {
        const int64_t out = r->completion_tokens >= 0 ? r->completion_tokens : r->n_text;
        int64_t in = r->prompt_tokens;
        s->no_usage_in |= in < 0, s->no_usage_out |= r->completion_tokens < 0;
        if (in < 0)
            in = b->ps->n_lines ? b->ps->n_words[r->index % b->ps->n_lines] : b->o->input_len;
        const double ttft = r->t_first - r->t_send, e2el = r->t_done - r->t_send;
        s->ttft[s->n_ok] = ttft;
        s->e2el[s->n_ok++] = e2el;
        if (out > 1) s->tpot[s->n_tpot++] = (e2el - ttft) / (double)(out - 1);
        s->in_tokens += in, s->out_tokens += out;
        if (r->cached_tokens >= 0) s->cached_tokens += r->cached_tokens;
        else s->no_cached = 1;
    }
    bserve_free_request(b, r);
}

int bserve_run(bench *b, double *duration) {
    const serve_opts *o = b->o;
    const int n = o->n_prompts;
    const int cap = o->max_concurrency && o->max_concurrency < n ? o->max_concurrency : n;
    uint64_t rng = o->seed ^ 0xa0761d6478bd642fULL;
    double next_at = 0.0; /* arrival of request `next`, s after t0 */
    int next = 0, in_flight = 0, n_done = 0, last_pct = 0;
    const double t0 = moe8_time_s();
    while (n_done < n) {
        int still;
        CURLMsg *m;
        double t = moe8_time_s();
        while (next < n && in_flight < cap && next_at <= t - t0) {
            if (start_request(b, next, t)) return 1;
            next++, in_flight++;
            if (in_flight > b->res.peak) b->res.peak = in_flight;
            if (isfinite(o->request_rate)) { /* exponential gap: -ln(U) / R, U in (0, 1] */
                const double u = ((double)(bserve_splitmix(&rng) >> 11) + 1.0) / 9007199254740992.0;
                next_at += -log(u) / o->request_rate;
            }
        }
        if (curl_multi_perform(b->multi, &still) != CURLM_OK) {
            return cli_err(CMD, "curl_multi_perform failed");
        }
        t = moe8_time_s();
        while ((m = curl_multi_info_read(b->multi, &still)))
            if (m->msg == CURLMSG_DONE) {
                request *r;
                CURLcode code = m->data.result;
                curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&r);
                finish_request(b, r, code, t);
                in_flight--, n_done++;
                *duration = t - t0;
            }
        if (n_done * 10 / n > last_pct && n_done < n) {
            last_pct = n_done * 10 / n;
            fprintf(stderr, "moe8 " CMD ": %d/%d done (%d failed), %.1f s\n", n_done, n,
                    b->res.n_failed, t - t0);
        }
        if (n_done == n) break;
        int wait_ms = 1000; /* curl's own timers and any socket activity end it sooner */
        if (next < n && in_flight < cap) {
            const double dt = next_at - (moe8_time_s() - t0);
            wait_ms = dt <= 0 ? 0 : dt < 1.0 ? (int)ceil(dt * 1000.0) : 1000;
        }
        if (curl_multi_poll(b->multi, NULL, 0, wait_ms, NULL) != CURLM_OK) {
            return cli_err(CMD, "curl_multi_poll failed");
        }
    }
    return 0;
}
