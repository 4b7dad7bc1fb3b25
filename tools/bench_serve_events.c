/*
 * bench_serve_events.c — the events of the Responses and Messages streams, as
 * `moe8 bench serve --endpoint responses|messages` reads them (each event's
 * `data:` JSON names its type; the `event:` lines are not needed).
 *
 * Responses (POST /v1/responses): response.output_text.delta and
 * response.reasoning_text.delta with a non-empty `delta` are token arrivals
 * (as chat's content and reasoning_content are); response.completed, or
 * response.incomplete (max_output_tokens reached), ends the stream and carries
 * response.usage {input_tokens, output_tokens, input_tokens_details.
 * cached_tokens}; response.failed and error are failures.
 *
 * Messages (POST /v1/messages, Anthropic): content_block_delta with a
 * text_delta (its text) or a thinking_delta (its thinking) is a token
 * arrival; message_start's message.usage and message_delta's cumulative usage
 * give {input_tokens, cache_read_input_tokens, cache_creation_input_tokens,
 * output_tokens}, the input being their sum; message_stop ends the stream; an
 * error event is a failure. Output tokens are the server's usage for every
 * API, so the output tok/s of the four endpoints compare. Sends nothing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_serve.h"

/* j's member k as a count (-1: absent or not a count). */
static int64_t count_of(const cJSON *j, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, k);
    return cJSON_IsNumber(v) && v->valuedouble >= 0 ? (int64_t)v->valuedouble : -1;
}

/* j's string member k, non-empty (NULL: none). */
static const char *text_of(const cJSON *j, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, k);
    return cJSON_IsString(v) && v->valuestring[0] ? v->valuestring : NULL;
}

/* An error object (or the event holding one): the failure with its message. */
static void fail_with(request *r, const cJSON *e) {
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(e, "message");
    char *p = cJSON_IsString(m) ? NULL : cJSON_PrintUnformatted(e);
    bserve_req_fail(r, FAIL_STREAM, "error event in the stream: %.150s",
                    p ? p : cJSON_IsString(m) ? m->valuestring : "?");
    free(p);
}

void bserve_responses_event(request *r, const cJSON *j, double t) {
    const char *type = text_of(j, "type");
    if (!type) return;
    if (!strcmp(type, "response.output_text.delta") || !strcmp(type, "response.reasoning_text.delta")) {
        if (text_of(j, "delta")) bserve_on_text(r, t);
    } else if (!strcmp(type, "response.completed") || !strcmp(type, "response.incomplete")) {
        const cJSON *u = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "response"), "usage");
        const int64_t c = count_of(cJSON_GetObjectItemCaseSensitive(u, "input_tokens_details"), "cached_tokens");
        if (count_of(u, "input_tokens") >= 0) r->prompt_tokens = count_of(u, "input_tokens");
        if (count_of(u, "output_tokens") >= 0) r->completion_tokens = count_of(u, "output_tokens");
        if (c >= 0) r->cached_tokens = c;
        r->done = 1, r->t_done = t;
    } else if (!strcmp(type, "response.failed")) {
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "response"), "error");
        fail_with(r, cJSON_IsObject(e) ? e : j);
    } else if (!strcmp(type, "error")) {
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
        fail_with(r, cJSON_IsObject(e) ? e : j);
    }
}

/* Messages' usage object: the counts it gives (message_delta's may lack the input). */
static void messages_usage(request *r, const cJSON *u) {
    const int64_t in = count_of(u, "input_tokens"), rd = count_of(u, "cache_read_input_tokens");
    const int64_t cr = count_of(u, "cache_creation_input_tokens"), out = count_of(u, "output_tokens");
    if (in >= 0) r->prompt_tokens = in + (rd > 0 ? rd : 0) + (cr > 0 ? cr : 0);
    if (rd >= 0) r->cached_tokens = rd;
    if (out >= 0) r->completion_tokens = out;
}

void bserve_messages_event(request *r, const cJSON *j, double t) {
    const char *type = text_of(j, "type");
    if (!type) return;
    if (!strcmp(type, "content_block_delta")) {
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(j, "delta");
        const char *dt = text_of(d, "type");
        if (dt && ((!strcmp(dt, "text_delta") && text_of(d, "text")) ||
                   (!strcmp(dt, "thinking_delta") && text_of(d, "thinking"))))
            bserve_on_text(r, t);
    } else if (!strcmp(type, "message_start")) {
        const cJSON *u = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "message"), "usage");
        if (cJSON_IsObject(u)) messages_usage(r, u);
    } else if (!strcmp(type, "message_delta")) {
        const cJSON *u = cJSON_GetObjectItemCaseSensitive(j, "usage");
        if (cJSON_IsObject(u)) messages_usage(r, u);
    } else if (!strcmp(type, "message_stop")) {
        r->done = 1, r->t_done = t;
    } else if (!strcmp(type, "error")) {
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
        fail_with(r, cJSON_IsObject(e) ? e : j);
    }
}
