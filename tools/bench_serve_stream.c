/*
 * bench_serve_stream.c — one request's answer of `moe8 bench serve`, read as
 * it arrives: Server-Sent Events, each `data: <json>` line one event (as vllm
 * reads it; `event:` lines are not needed, every API's data names its type).
 * Completions and chat: an event with non-empty text (choices[0].text, or
 * choices[0].delta.content / .reasoning_content for chat) is a token arrival,
 * timed when its bytes reached us; the usage event gives the token counts;
 * `data: [DONE]` is the end. The Responses and Messages events are read in
 * bench_serve_events.c. A non-2xx answer keeps the head of its body for the
 * message. The first failure of a request is kept (bserve_req_fail); the run
 * (bench_serve_run.c) classifies the rest when the transfer ends.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_serve.h"

void bserve_req_fail(request *r, int kind, const char *fmt, ...) {
    va_list ap;
    if (r->fail) return;
    r->fail = kind;
    va_start(ap, fmt);
    vsnprintf(r->msg, sizeof r->msg, fmt, ap);
    va_end(ap);
}

static int push_itl(request *r, double gap) {
    if (r->n_itl == r->cap_itl) {
        size_t nc = r->cap_itl ? 2 * r->cap_itl : 256;
        float *n = realloc(r->itl, nc * sizeof *n);
        if (!n) return -1;
        r->itl = n, r->cap_itl = nc;
    }
    r->itl[r->n_itl++] = (float)gap;
    return 0;
}

static const char *text_of(const cJSON *c0, int api) {
    if (api == API_COMPLETIONS) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(c0, "text");
        return cJSON_IsString(t) && t->valuestring[0] ? t->valuestring : NULL;
    }
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(c0, "delta");
    const char *keys[] = {"content", "reasoning_content"};
    for (int k = 0; k < 2; k++) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(d, keys[k]);
        if (cJSON_IsString(t) && t->valuestring[0]) return t->valuestring;
    }
    return NULL;
}

const char *bserve_end_event(int api) {
    return api == API_RESPONSES ? "response.completed" : api == API_MESSAGES ? "message_stop"
                                                                              : "data: [DONE]";
}

void bserve_on_text(request *r, double t) {
    if (r->n_text++ == 0) r->t_first = t;
    else if (push_itl(r, t - r->t_last)) bserve_req_fail(r, FAIL_STREAM, "%s", "out of memory");
    r->t_last = t;
    if (r->n_text > r->max_text)
        bserve_req_fail(r, FAIL_STREAM, "malformed stream: more than %lld text events for max_tokens %d",
                        (long long)r->max_text, r->max_tokens);
}

/* A completions or chat event (j: its data). */
static void openai_event(request *r, const cJSON *j, double t) {
    char shown[160];
    const cJSON *e, *ch, *u;
    if ((e = cJSON_GetObjectItemCaseSensitive(j, "error")) && !cJSON_IsNull(e)) {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(e, "message");
        char *p = cJSON_IsString(m) ? NULL : cJSON_PrintUnformatted(e);
        snprintf(shown, sizeof shown, "%s", p ? p : cJSON_IsString(m) ? m->valuestring : "?");
        free(p);
        bserve_req_fail(r, FAIL_STREAM, "error event in the stream: %s", shown);
    }
    ch = cJSON_GetObjectItemCaseSensitive(j, "choices");
    if (cJSON_IsArray(ch) && cJSON_GetArraySize(ch) > 0 && text_of(cJSON_GetArrayItem(ch, 0), r->api))
        bserve_on_text(r, t);
    if (cJSON_IsObject(u = cJSON_GetObjectItemCaseSensitive(j, "usage"))) {
        const cJSON *pt = cJSON_GetObjectItemCaseSensitive(u, "prompt_tokens");
        const cJSON *ct = cJSON_GetObjectItemCaseSensitive(u, "completion_tokens");
        if (cJSON_IsNumber(pt) && pt->valuedouble >= 0) r->prompt_tokens = (int64_t)pt->valuedouble;
        if (cJSON_IsNumber(ct) && ct->valuedouble >= 0)
            r->completion_tokens = (int64_t)ct->valuedouble;
        {
            const cJSON *d = cJSON_GetObjectItemCaseSensitive(u, "prompt_tokens_details");
            const cJSON *c = d ? cJSON_GetObjectItemCaseSensitive(d, "cached_tokens") : NULL;
            if (cJSON_IsNumber(c) && c->valuedouble >= 0) r->cached_tokens = (int64_t)c->valuedouble;
        }
    }
}

/* One `data:` payload that arrived at time t. */
static void on_event(request *r, const char *s, size_t n, double t) {
    char shown[160];
    cJSON *j;
    if (r->api <= API_CHAT && n == 6 && !memcmp(s, "[DONE]", 6)) {
        r->done = 1, r->t_done = t;
        return;
    }
    if (!(j = cJSON_ParseWithLength(s, n))) {
        snprintf(shown, sizeof shown, "%.*s", (int)(n < 120 ? n : 120), s);
        bserve_req_fail(r, FAIL_STREAM, "malformed stream: an event is not JSON: '%s'", shown);
        return;
    }
    if (r->api == API_RESPONSES) bserve_responses_event(r, j, t);
    else if (r->api == API_MESSAGES) bserve_messages_event(r, j, t);
    else openai_event(r, j, t);
    cJSON_Delete(j);
}

/* One SSE line (no line break): `data: x` is an event; comments, event:, id:,
 * retry: and blank lines carry nothing we time. */
void bserve_on_line(request *r, char *s, size_t n, double t) {
    if (n && s[n - 1] == '\r') n--;
    if (n < 5 || memcmp(s, "data:", 5)) return;
    s += 5, n -= 5;
    if (n && *s == ' ') s++, n--;
    r->n_events++;
    on_event(r, s, n, t);
}

static int grow(request *r, size_t need) {
    if (need <= r->cap) return 0;
    size_t nc = r->cap ? r->cap : 4096;
    while (nc < need) nc *= 2;
    char *nb = realloc(r->buf, nc);
    if (!nb) return -1;
    r->buf = nb, r->cap = nc;
    return 0;
}

/* CURLOPT_WRITEFUNCTION: the body as it arrives. Returning less than given
 * aborts the transfer (after a failure, nothing more is needed). */
size_t bserve_on_body(char *p, size_t size, size_t nmemb, void *user) {
    request *r = user;
    const size_t n = size * nmemb;
    const double t = moe8_time_s();
    size_t start = 0;
    if (!r->status) curl_easy_getinfo(r->h, CURLINFO_RESPONSE_CODE, &r->status);
    if (r->status / 100 != 2) { /* keep the head of the error body for the message */
        size_t keep = r->len + n > MAX_ERR_BODY ? MAX_ERR_BODY - r->len : n;
        if (keep && !grow(r, r->len + keep + 1)) memcpy(r->buf + r->len, p, keep), r->len += keep;
        return n;
    }
    if (r->fail) return 0;
    if (grow(r, r->len + n + 1)) {
        bserve_req_fail(r, FAIL_STREAM, "%s", "out of memory");
        return 0;
    }
    memcpy(r->buf + r->len, p, n);
    r->len += n;
    for (size_t i = r->len - n; i < r->len && !r->fail; i++)
        if (r->buf[i] == '\n') {
            bserve_on_line(r, r->buf + start, i - start, t);
            start = i + 1;
        }
    memmove(r->buf, r->buf + start, r->len - start);
    r->len -= start;
    if (r->len > MAX_LINE)
        bserve_req_fail(r, FAIL_STREAM, "malformed stream: a line over %zu MiB", MAX_LINE >> 20);
    return r->fail ? 0 : n;
}
