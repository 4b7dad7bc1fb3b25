/*
 * serve.c — moe8_serve: set up a server over a loaded model (its context,
 * scheduler, sampling defaults, served name), start the HTTP side (rank 0),
 * run the engine until the stop flag and the drain, and take it all down.
 *
 * Sampling defaults: generation_config.json of the model folder where it
 * sets temperature / top_p / top_k / min_p, else OpenAI's (temperature 1,
 * top_p 1, top-k and min-p off).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <omp.h>

#include "core/core.h"
#include "io/json_util.h"
#include "server/responses.h"
#include "server/server.h"
#include "server/toolcall.h"

moe8_serve_params moe8_serve_params_default(void) {
    moe8_serve_params p;
    memset(&p, 0, sizeof p);
    p.host = "127.0.0.1";
    p.port = 8080;
    p.parallel = 16;
    p.max_batch_tokens = 2048;
    p.max_queue = 256;
    p.prefix_cache = 1;
    p.timeout_s = 30;
    p.drain_s = 5;
    p.max_body = 4u << 20;
    p.max_buffered = 256u << 20;
    p.header_timeout_s = 10;
    p.body_min_rate = 4096;
    p.max_connections = 8192;
    p.max_connections_per_ip = 1024;
    p.kv_type = MOE8_DT_F16;
    p.responses_store = 128;
    p.webui = 1;
    return p;
}

static void sampling_defaults(srv *s) {
    char path[4096], *data = NULL;
    size_t n = 0;
    cJSON *root;
    const cJSON *v;
    s->defaults = moe8_sampler_params_default();
    s->defaults.temperature = 1.0f;
    if (!s->p.model_dir ||
        snprintf(path, sizeof path, "%s/generation_config.json", s->p.model_dir) >= (int)sizeof path ||
        moe8_read_file(path, 1 << 20, &data, &n, NULL) != MOE8_OK)
        return;
    if (moe8_json_parse(data, n, path, &root, NULL) == MOE8_OK) { /* the model's load checked it */
        if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(root, "temperature")) && v->valuedouble >= 0)
            s->defaults.temperature = (float)v->valuedouble;
        if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(root, "top_p")) && v->valuedouble > 0 &&
            v->valuedouble <= 1)
            s->defaults.top_p = (float)v->valuedouble;
        if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(root, "top_k")) && v->valuedouble >= 0)
            s->defaults.top_k = (int)v->valuedouble;
        if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(root, "min_p")) && v->valuedouble >= 0 &&
            v->valuedouble <= 1)
            s->defaults.min_p = (float)v->valuedouble;
        cJSON_Delete(root);
    }
    free(data);
}

static void model_name(srv *s) {
    const char *name = s->p.served_model_name;
    if (!name && s->p.model_dir) {
        size_t n = strlen(s->p.model_dir);
        while (n > 1 && s->p.model_dir[n - 1] == '/') n--;
        name = s->p.model_dir;
        for (size_t i = 0; i + 1 < n; i++)
            if (s->p.model_dir[i] == '/') name = s->p.model_dir + i + 1;
        snprintf(s->model_name, sizeof s->model_name, "%.*s", (int)(s->p.model_dir + n - name), name);
        return;
    }
    snprintf(s->model_name, sizeof s->model_name, "%s", name ? name : "moe8");
}

static moe8_status check_params(const moe8_serve_params *p, const moe8_model *m, moe8_error *err) {
    const int64_t max_pos = moe8_model_config(m)->max_position_embeddings;
    if (p->port < 0 || p->port > 65535)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "port %d must be in [0, 65535]", p->port);
    if (p->parallel < 1 || p->parallel > 4096)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "parallel %d must be in [1, 4096]", p->parallel);
    if (p->ctx_size < 0 || p->ctx_size > max_pos)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "ctx_size %d must be in [1, "
                         "max_position_embeddings %lld]", p->ctx_size, (long long)max_pos);
    if (p->max_batch_tokens < 1 || p->max_queue < 1 || !(p->timeout_s > 0) || !(p->drain_s >= 0))
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "max_batch_tokens (%d) and max_queue (%d) "
                         "must be >= 1, timeout > 0, drain >= 0", p->max_batch_tokens, p->max_queue);
    if (!p->host) return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "no host to listen on");
    if (p->kv_type != MOE8_DT_F16 && p->kv_type != MOE8_DT_BF16 && p->kv_type != MOE8_DT_F32)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "kv_type must be f16, bf16 or f32");
    if (p->default_chat_template_kwargs) {
        /* the one JSON input policy (io/json_util.h): nothing after the value, no key twice */
        cJSON *kw = NULL;
        const char *k = p->default_chat_template_kwargs;
        const moe8_status st = moe8_json_parse(k, strlen(k), "default chat template kwargs", &kw, err);
        const int ok = cJSON_IsObject(kw);
        cJSON_Delete(kw);
        if (st) return st;
        if (!ok)
            return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "default chat template kwargs must be a "
                             "JSON object, got '%.80s'", p->default_chat_template_kwargs);
    }
    if (p->tool_call_parser && moe8_toolcall_format_from_name(p->tool_call_parser) < 0)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "tool call parser '%s' is not one of hermes, "
                         "deepseek_v3, mistral, glm45 (glm4_moe), glm47, minimax_m2, qwen3_coder, openai (harmony)", p->tool_call_parser);
    if (p->reasoning_parser && moe8_srv_reasoning_append(p->reasoning_parser) < 0)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "reasoning parser '%s' is not one of deepseek_r1, "
                         "qwen3, glm45, minimax_m2, minimax_m2_append_think, openai_gptoss", p->reasoning_parser);
    if (!(p->sleep_idle_s >= 0) || (p->sleep_idle_s > 0 && moe8_dist_size(p->dist) > 1))
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "sleep_idle_s (%g) must be >= 0, and 0 with TP/EP "
                         "(not supported yet)", p->sleep_idle_s);
    if (p->responses_store < 0)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "responses_store (%d) must be >= 0", p->responses_store);
    if (p->api_key && !p->api_key[0])
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "api_key is empty: give a key, or none "
                         "for no authentication");
    if (p->max_body < 1 || p->max_buffered < p->max_body)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "max_body (%llu) must be >= 1 and "
                         "max_buffered (%llu) >= max_body", (unsigned long long)p->max_body,
                         (unsigned long long)p->max_buffered);
    if (!(p->header_timeout_s > 0) || !(p->body_min_rate >= 0) || p->max_connections < 1 ||
        p->max_connections_per_ip < 0)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "header_timeout (%g) must be > 0, "
                         "body_min_rate (%g) >= 0, max_connections (%d) >= 1, "
                         "max_connections_per_ip (%d) >= 0", p->header_timeout_s, p->body_min_rate,
                         p->max_connections, p->max_connections_per_ip);
    return MOE8_OK;
}

int moe8_srv_reasoning_append(const char *name) {
    static const char *const split[] = {"deepseek_r1", "qwen3", "glm45", "minimax_m2", "openai_gptoss"};
    for (size_t i = 0; i < sizeof split / sizeof split[0]; i++)
        if (!strcmp(name, split[i])) return 0;
    return !strcmp(name, "minimax_m2_append_think") ? 1 : -1;
}

_Thread_local const char *moe8_srv_rid;

void moe8_srv_emit(srv *s, moe8_serve_record *r) {
    const moe8_serve_params *p = &s->p;
    if (!r->request_id) r->request_id = moe8_srv_rid;
    if (p->on_record) {
        p->on_record(p->user, r);
        return;
    }
    if (!strcmp(r->kind, "ready")) {
        if (p->on_ready) p->on_ready(p->user, r->message);
    } else if (!strcmp(r->kind, "access")) {
        if (p->on_access) p->on_access(p->user, r->message);
    } else if (strcmp(r->kind, "request") && strcmp(r->kind, "banner") && strcmp(r->kind, "stop")) {
        moe8_serve_line_fn f = p->on_log ? p->on_log : p->on_access;
        if (f) f(p->user, r->message);
    }
}

void moe8_srv_log(srv *s, const char *fmt, ...) {
    char line[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    moe8_serve_record r = {.level = MOE8_LOG_INFO, .kind = "note", .message = line, .ttft_ms = -1};
    if (!strncmp(line, "warning:", 8) || !strncmp(line, "limit:", 6)) r.level = MOE8_LOG_WARN;
    moe8_srv_emit(s, &r);
}

/* One "banner" record. */
static void banner(srv *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void banner(srv *s, const char *fmt, ...) {
    char line[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    moe8_serve_record r = {.level = MOE8_LOG_INFO, .kind = "banner", .message = line, .ttft_ms = -1};
    moe8_srv_emit(s, &r);
}

/* What the server runs with, once its pools are made (rank 0, before "listening"). */
static void startup_banner(srv *s, const moe8_sched_stats *ss) {
    const moe8_config *c = moe8_model_config(s->model);
    const moe8_kv_stats *kv = &ss->kv;
    const int n_threads = s->p.n_threads > 0 ? s->p.n_threads : omp_get_max_threads();
    const int n_ranks = moe8_dist_size(s->p.dist);
    banner(s, "model %s: %s, %lld layers, %lld experts (%lld per token), vocabulary %lld", s->model_name,
           c->model_type, (long long)c->num_hidden_layers, (long long)c->num_experts,
           (long long)c->num_experts_per_tok, (long long)c->vocab_size);
    banner(s, "context %d tokens, parallel %d, max batch tokens %d, threads %d%s", s->n_ctx, s->p.parallel,
           s->p.max_batch_tokens, n_threads, s->p.prefix_cache ? ", prefix cache on" : ", prefix cache off");
    banner(s, "KV pool: %lld positions in %d blocks of %d, %.1f MiB (%s)%s", (long long)s->kv_positions,
           kv->n_blocks, kv->block_tokens, (double)kv->n_blocks * (double)kv->block_bytes / 1048576.0,
           s->p.kv_type == MOE8_DT_F32 ? "f32" : s->p.kv_type == MOE8_DT_BF16 ? "bf16" : "f16",
           n_ranks > 1 ? " per rank" : "");
    if (kv->state_slots)
        banner(s, "state pool: %d slots of %.2f MiB, %.1f MiB", kv->state_slots,
               (double)kv->state_slot_bytes / 1048576.0, (double)kv->state_slots * (double)kv->state_slot_bytes / 1048576.0);
}

moe8_status moe8_serve(moe8_model *m, const moe8_tokenizer *tok, const moe8_serve_params *params,
                       volatile int *stop, moe8_error *err) {
    srv *s;
    moe8_context_params cp = moe8_context_params_default();
    moe8_sched_params sp = moe8_sched_params_default();
    moe8_status st;
    const int rank0 = params ? moe8_dist_rank(params->dist) == 0 : 1;
    if (!m || !tok || !params || !stop)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "serve: no model, tokenizer, params or flag");
    if ((st = check_params(params, m, err))) return st;
    if (!(s = calloc(1, sizeof *s))) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "out of memory");
    s->p = *params;
    s->model = m;
    s->tok = tok;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->wake, NULL);
    moe8_metrics_init(&s->m);
    s->responses = moe8_resp_store_new(params->responses_store); /* NULL: none kept */
    if (params->default_chat_template_kwargs)
        moe8_json_parse(params->default_chat_template_kwargs, strlen(params->default_chat_template_kwargs),
                        "default chat template kwargs", &s->default_kwargs, NULL); /* checked above */
    sampling_defaults(s);
    model_name(s);
    {
        const moe8_chat_template *t = NULL;
        const char *src = moe8_tokenizer_chat_template(tok, &t, NULL) == MOE8_OK ? moe8_chat_template_source(t) : NULL;
        s->tool_format = params->tool_call_parser ? moe8_toolcall_format_from_name(params->tool_call_parser)
                         : src ? moe8_toolcall_detect(src) : TOOLCALL_NONE;
        s->think_template = src && strstr(src, "</think>") != NULL;
        s->think_append = params->reasoning_parser ? moe8_srv_reasoning_append(params->reasoning_parser)
                          : src && strstr(src, "<minimax:tool_call>") != NULL;
    }
    cp.n_ctx = params->ctx_size ? params->ctx_size
               : moe8_model_config(m)->max_position_embeddings < 4096
                   ? (int32_t)moe8_model_config(m)->max_position_embeddings : 4096;
    cp.n_seq_max = params->parallel;
    cp.n_outputs = params->parallel;
    cp.n_batch = params->max_batch_tokens > params->parallel ? params->max_batch_tokens : params->parallel;
    cp.n_threads = params->n_threads;
    cp.kv_bytes = params->kv_bytes;
    cp.state_bytes = params->state_bytes;
    cp.kv_type = params->kv_type;
    cp.prefix_cache = params->prefix_cache;
    cp.prompt_cache_dir = params->prompt_cache_dir;
    cp.prompt_cache_bytes = params->prompt_cache_bytes;
    s->n_ctx = cp.n_ctx;
    st = moe8_context_create(m, &cp, &s->ctx, err); /* agreed by every rank */
    if (!st) {
        s->n_vocab = moe8_context_n_vocab(s->ctx);
        sp.tok = tok;
        st = moe8_sched_create(s->ctx, &sp, &s->sched, err);
    }
    if (!st) {
        moe8_sched_stats ss;
        moe8_sched_get_stats(s->sched, &ss);
        s->kv_positions = (int64_t)ss.kv.n_blocks * ss.kv.block_tokens;
        /* made now, not at the first constrained request: workers compile against it */
        s->gvocab = (const struct grammar_vocab *)(const void *)moe8_sched_grammar_vocab(s->sched);
    }
    if (!st && rank0) st = moe8_http_start(s, err);
    if (moe8_dist_size(params->dist) > 1) st = moe8_dist_agree(params->dist, st, err);
    if (!st && rank0) {
        char line[300];
        moe8_serve_record r = {.level = MOE8_LOG_INFO, .kind = "ready", .message = line, .ttft_ms = -1};
        moe8_sched_stats ss;
        const double t0 = moe8_time_s();
        moe8_sched_get_stats(s->sched, &ss);
        startup_banner(s, &ss);
        snprintf(line, sizeof line, "listening on http://%s:%d", params->host, s->port);
        moe8_srv_emit(s, &r);
        st = moe8_engine_run(s, stop, err);
        moe8_sched_get_stats(s->sched, &ss);
        snprintf(line, sizeof line, "stopped after %.1f s: %llu requests finished, %lld prompt and %lld generated "
                 "tokens", moe8_time_s() - t0, (unsigned long long)(s->m.success_stop + s->m.success_length +
                 s->m.success_abort), (long long)ss.prompt_tokens, (long long)ss.generated_tokens);
        r.kind = "stop";
        moe8_srv_emit(s, &r);
        moe8_engine_abandon(s);         /* every job ended: its connection can finish */
        moe8_http_wait_idle(s, 2.0);    /* last bytes of finished answers */
    } else if (!st) {
        st = moe8_engine_follow(s, err);
    }
    moe8_http_stop(s);
    moe8_sched_free(s->sched);
    moe8_context_free(s->ctx);
    free(s->live);
    cJSON_Delete(s->default_kwargs);
    moe8_resp_store_free(s->responses);
    pthread_cond_destroy(&s->wake);
    pthread_mutex_destroy(&s->lock);
    free(s);
    return st;
}
