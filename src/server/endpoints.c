/*
 * endpoints.c — the endpoint table of moe8 serve: one row per endpoint
 * (method, path, whether the API key is needed, the body's parser or the
 * cheap answer, the job's emitters, whether the key may come as x-api-key,
 * the shape of its errors: NULL OpenAI's). The one file that joins the HTTP layer
 * (http*.c, which routes by these rows and knows no API) to the APIs
 * (openai.c and its per-API files, metrics.c). A new API is a row here.
 *
 * The chat page at / (webui/index.html, built in as moe8_webui_page) is a
 * row like the others, open (the page holds nothing; it asks for the key
 * itself), and served only under --webui.
 *
 * Does not: frame, route or write HTTP (http*.c do), or build JSON beyond
 * the two fixed probe answers.
 */
#include <stdio.h>
#include <string.h>

#include "server/api.h"
#include "server/responses.h"

#define JSON "application/json"

static int health(srv *s, const char *path, moe8_buf *out, const char **type) {
    (void)s, (void)path;
    *type = JSON;
    moe8_buf_str(out, "{\"status\":\"ok\"}");
    return 200;
}

static int version(srv *s, const char *path, moe8_buf *out, const char **type) {
    (void)s, (void)path;
    *type = JSON;
    moe8_buf_printf(out, "{\"version\":\"%s\"}", moe8_version());
    return 200;
}

static int metrics(srv *s, const char *path, moe8_buf *out, const char **type) {
    (void)path;
    *type = "text/plain; version=0.0.4; charset=utf-8";
    pthread_mutex_lock(&s->lock);
    moe8_metrics_render(&s->m, s->model_name, out);
    pthread_mutex_unlock(&s->lock);
    return 200;
}

static int models(srv *s, const char *path, moe8_buf *out, const char **type) {
    (void)path;
    *type = JSON;
    moe8_oa_models(s, out);
    return 200;
}

/* GET /v1/models/{id}: the served model, else 404. */
static int model(srv *s, const char *path, moe8_buf *out, const char **type) {
    const char *id = path + strlen("/v1/models/");
    const size_t n = strlen(id);
    *type = JSON;
    if (n == strlen(s->model_name) && !memcmp(id, s->model_name, n)) {
        moe8_oa_model(s, out);
        return 200;
    }
    moe8_oa_error(out, "invalid_request_error", NULL, "model_not_found",
             "the model '%.*s' does not exist; this server serves '%s'", (int)(n < 200 ? n : 200), id,
             s->model_name);
    return 404;
}

static int webui(srv *s, const char *path, moe8_buf *out, const char **type) {
    (void)s, (void)path;
    *type = "text/html; charset=utf-8";
    moe8_buf_add(out, moe8_webui_page, moe8_webui_page_len);
    return 200;
}

static int completions(srv *s, const char *body, size_t n, job **j, moe8_buf *out) {
    return moe8_oa_parse_completion(s, body, n, &moe8_oa_completions, j, out);
}

static int chat(srv *s, const char *body, size_t n, job **j, moe8_buf *out) {
    return moe8_oa_parse_completion(s, body, n, &moe8_oa_chat, j, out);
}

static int responses(srv *s, const char *body, size_t n, job **j, moe8_buf *out) {
    return moe8_resp_parse(s, body, n, j, out);
}

static int input_tokens(srv *s, const char *body, size_t n, job **j, moe8_buf *out) {
    (void)j;
    return moe8_resp_input_tokens(s, body, n, out);
}

/* GET /v1/responses/{id}: a stored response, else 404. */
static int response(srv *s, const char *path, moe8_buf *out, const char **type) {
    const char *id = path + strlen("/v1/responses/");
    *type = JSON;
    return moe8_resp_get(s, id, strlen(id), out);
}

/* DELETE /v1/responses/{id}: drops a stored response, else 404. */
static int response_delete(srv *s, const char *path, moe8_buf *out, const char **type) {
    const char *id = path + strlen("/v1/responses/");
    *type = JSON;
    return moe8_resp_delete(s, id, strlen(id), out);
}

static int tokenize(srv *s, const char *body, size_t n, job **j, moe8_buf *out) {
    const int rc = moe8_oa_tokenize(s, body, n, out);
    (void)j;
    return rc ? rc : 200;
}

static int detokenize(srv *s, const char *body, size_t n, job **j, moe8_buf *out) {
    const int rc = moe8_oa_detokenize(s, body, n, out);
    (void)j;
    return rc ? rc : 200;
}

/* Open rows (no key under --api-key, as in vLLM): probes and scrapers carry
 * none, nor does a browser opening the page. */
const srv_endpoint moe8_srv_endpoints[] = {
    /* method  path                    prefix open answer   parse        emitters   x-api-key  errors */
    {"POST", "/v1/completions", 0, 0, NULL, completions, moe8_oa_on_start, moe8_oa_response, moe8_oa_stream_tail, 0, NULL},
    {"POST", "/v1/chat/completions", 0, 0, NULL, chat, moe8_oa_on_start, moe8_oa_response, moe8_oa_stream_tail, 0, NULL},
    {"POST", "/v1/responses", 0, 0, NULL, responses, moe8_oa_on_start, moe8_oa_response, moe8_oa_stream_tail, 0, NULL},
    {"POST", "/v1/responses/input_tokens", 0, 0, NULL, input_tokens, NULL, NULL, NULL, 0, NULL},
    {"GET", "/v1/responses/", 1, 0, response, NULL, NULL, NULL, NULL, 0, NULL},
    {"DELETE", "/v1/responses/", 1, 0, response_delete, NULL, NULL, NULL, NULL, 0, NULL},
    {"POST", "/v1/messages", 0, 0, NULL, moe8_msg_parse, moe8_oa_on_start, moe8_oa_response, moe8_oa_stream_tail, 1,
     moe8_msg_error},
    {"POST", "/v1/messages/count_tokens", 0, 0, NULL, moe8_msg_count, NULL, NULL, NULL, 1, moe8_msg_error},
    {"POST", "/tokenize", 0, 0, NULL, tokenize, NULL, NULL, NULL, 0, NULL},
    {"POST", "/detokenize", 0, 0, NULL, detokenize, NULL, NULL, NULL, 0, NULL},
    {"GET", "/v1/models", 0, 0, models, NULL, NULL, NULL, NULL, 0, NULL},
    {"GET", "/v1/models/", 1, 0, model, NULL, NULL, NULL, NULL, 0, NULL},
    {"GET", "/health", 0, 1, health, NULL, NULL, NULL, NULL, 0, NULL},
    {"GET", "/metrics", 0, 1, metrics, NULL, NULL, NULL, NULL, 0, NULL},
    {"GET", "/version", 0, 1, version, NULL, NULL, NULL, NULL, 0, NULL},
    {"GET", "/", 0, 1, webui, NULL, NULL, NULL, NULL, 0, NULL},
    {NULL, NULL, 0, 0, NULL, NULL, NULL, NULL, NULL, 0, NULL},
};

int moe8_srv_endpoint_on(const srv *s, const srv_endpoint *e) { return e->answer != webui || s->p.webui; }
