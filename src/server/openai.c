/*
 * openai.c — what the OpenAI-style APIs of `moe8 serve` share (api.h): a
 * request body becomes validated jobs through the shared passes and the
 * API's hooks (api_chat.c, api_completions.c); scheduler events become
 * streamed chunks or whole responses through the one output path, each
 * API's JSON written by its hooks.
 *
 * Validation names the field and what was expected, with OpenAI's error
 * body {"error": {"message", "type", "param", "code"}}. Sampling defaults
 * come from the model folder's generation_config.json where it sets them,
 * else OpenAI's (temperature 1, top_p 1).
 * Token strings in log-probs are the token's bytes with invalid UTF-8
 * replaced by U+FFFD ("bytes" keeps the raw values).
 *
 * Does not: run anything (engine.c does), talk HTTP (http*.c do), or know
 * an API's own fields and JSON (its api_*.c file does).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "io/json_util.h"
#include "grammar/grammar.h"
#include "server/api.h"
#include "server/toolcall.h"

#define T_INVALID "invalid_request_error"

void moe8_oa_error(moe8_buf *out, const char *type, const char *param, const char *code, const char *fmt, ...) {
    char msg[1024];
    cJSON *root = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(root, "error");
    char *txt;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cJSON_AddStringToObject(e, "message", msg);
    cJSON_AddStringToObject(e, "type", type);
    if (param) cJSON_AddStringToObject(e, "param", param);
    else cJSON_AddNullToObject(e, "param");
    if (code) cJSON_AddStringToObject(e, "code", code);
    else cJSON_AddNullToObject(e, "code");
    txt = cJSON_PrintUnformatted(root);
    out->n = 0;
    if (txt) moe8_buf_str(out, txt);
    free(txt);
    cJSON_Delete(root);
}

int moe8_oa_bad(moe8_buf *err, const char *param, const char *fmt, ...) {
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    moe8_oa_error(err, T_INVALID, param, NULL, "%s", msg);
    return 400;
}

/* Valid UTF-8 (and no NUL): the offset of the first bad byte, or -1. */
static ptrdiff_t bad_utf8(const char *s, size_t n) {
    size_t bad = moe8_utf8_valid(s, n);
    const char *nul = memchr(s, 0, bad == (size_t)-1 ? n : bad);
    if (nul) return nul - s;
    return bad == (size_t)-1 ? -1 : (ptrdiff_t)bad;
}

void moe8_oa_json_text(cJSON *o, const char *key, const char *s, size_t n) {
    moe8_buf b = {0};
    moe8_buf_json_str(&b, s, n, MOE8_JSON_LOSSY);
    cJSON_AddRawToObject(o, key, b.p ? b.p : "\"\"");
    moe8_buf_free(&b);
}

/* ---- field readers --------------------------------------------------------------- */

/* Optional number field in [lo, hi] (lo_open: (lo, hi]); integral when `integer`. */
int moe8_oa_get_num(const cJSON *o, const char *key, double lo, double hi, int lo_open, int integer,
                   double *out, int *present, moe8_buf *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    double x;
    if (present) *present = 0;
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsNumber(v))
        return moe8_oa_bad(err, key, "'%s' must be %s, got %s", key, integer ? "an integer" : "a number",
                   moe8_json_type_name(v));
    x = v->valuedouble;
    if (!isfinite(x) || (integer && x != floor(x)))
        return moe8_oa_bad(err, key, "'%s' must be %s, got %g", key, integer ? "an integer" : "a finite number", x);
    if (x < lo || x > hi || (lo_open && x == lo))
        return moe8_oa_bad(err, key, "'%s' must be in %c%g, %g], got %g", key, lo_open ? '(' : '[', lo, hi, x);
    *out = x;
    if (present) *present = 1;
    return 0;
}

int moe8_oa_get_bool(const cJSON *o, const char *key, int *out, moe8_buf *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsBool(v)) return moe8_oa_bad(err, key, "'%s' must be a boolean, got %s", key, moe8_json_type_name(v));
    *out = cJSON_IsTrue(v);
    return 0;
}

/* ---- prompts ------------------------------------------------------------------------ */

/* with_bos: prepend BOS when the tokenizer asks for it (prompts, not chats). */
int moe8_oa_tokenize_text(srv *s, const char *text, int with_bos, int32_t **ids, int32_t *n, const char *param,
                          moe8_buf *err) {
    size_t len = strlen(text), need = 0;
    const int bos = with_bos && moe8_tokenizer_add_bos(s->tok) && moe8_tokenizer_bos_id(s->tok) >= 0;
    moe8_error e;
    if (moe8_tokenize(s->tok, text, len, NULL, 0, &need, &e) != MOE8_OK && need == 0 && len > 0)
        return moe8_oa_bad(err, param, "'%s' cannot be tokenized: %s", param, e.message);
    if (!(*ids = malloc((need + 1) * sizeof **ids))) return moe8_oa_bad(err, param, "out of memory");
    if (bos) (*ids)[0] = moe8_tokenizer_bos_id(s->tok);
    if (moe8_tokenize(s->tok, text, len, *ids + bos, need, &need, &e) != MOE8_OK) {
        free(*ids);
        *ids = NULL;
        return moe8_oa_bad(err, param, "'%s' cannot be tokenized: %s", param, e.message);
    }
    *n = (int32_t)need + bos;
    return 0;
}

int moe8_oa_ids_from_array(srv *s, const cJSON *a, int32_t **ids, int32_t *n, const char *param, moe8_buf *err) {
    int k = 0, count = cJSON_GetArraySize(a);
    const cJSON *v;
    if (!(*ids = malloc(((size_t)count + 1) * sizeof **ids))) return moe8_oa_bad(err, param, "out of memory");
    cJSON_ArrayForEach(v, a) {
        if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 0 ||
            v->valuedouble >= s->n_vocab) {
            free(*ids);
            *ids = NULL;
            return moe8_oa_bad(err, param, "'%s'[%d] must be a token id in [0, %d)", param, k, s->n_vocab);
        }
        (*ids)[k++] = (int32_t)v->valuedouble;
    }
    *n = k;
    return 0;
}


/* ---- requests ----------------------------------------------------------------------- */

static int parse_stop(const cJSON *root, job *j, moe8_buf *err) {
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(root, "stop"), *v;
    int k = 0;
    if (!st || cJSON_IsNull(st)) return 0;
    if (cJSON_IsString(st)) {
        if (!st->valuestring[0]) return moe8_oa_bad(err, "stop", "'stop' must not be an empty string");
        j->stop_store[0] = strdup(st->valuestring);
        j->rq.n_stop = 1;
        return 0;
    }
    if (!cJSON_IsArray(st)) return moe8_oa_bad(err, "stop", "'stop' must be a string or an array of strings, got %s", moe8_json_type_name(st));
    if (cJSON_GetArraySize(st) > MOE8_MAX_STOP_STRINGS)
        return moe8_oa_bad(err, "stop", "'stop' holds %d strings; at most %d", cJSON_GetArraySize(st), MOE8_MAX_STOP_STRINGS);
    cJSON_ArrayForEach(v, st) {
        if (!cJSON_IsString(v) || !v->valuestring[0])
            return moe8_oa_bad(err, "stop", "'stop'[%d] must be a non-empty string", k);
        j->stop_store[k++] = strdup(v->valuestring);
    }
    j->rq.n_stop = k;
    return 0;
}

/* A seed nobody chose: from the kernel's generator (the clock if that fails). */
static uint64_t fresh_seed(void) {
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, GRND_NONBLOCK) != (ssize_t)sizeof v) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        v = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)ts.tv_sec;
    }
    return v;
}

static int parse_sampling(srv *s, const cJSON *root, job *j, moe8_buf *err) {
    moe8_sampler_params *sp = &j->rq.sampling;
    double x;
    int rc, has;
    *sp = s->defaults;
    if ((rc = moe8_oa_get_num(root, "temperature", 0, 1e6, 0, 0, &x, &has, err))) return rc;
    if (has) sp->temperature = (float)x;
    if ((rc = moe8_oa_get_num(root, "top_p", 0, 1, 1, 0, &x, &has, err))) return rc;
    if (has) sp->top_p = (float)x;
    if ((rc = moe8_oa_get_num(root, "top_k", -1, 1e9, 0, 1, &x, &has, err))) return rc;
    if (has) sp->top_k = x < 0 ? 0 : (int)x; /* -1: off, as vLLM */
    if ((rc = moe8_oa_get_num(root, "min_p", 0, 1, 0, 0, &x, &has, err))) return rc;
    if (has) sp->min_p = (float)x;
    if ((rc = moe8_oa_get_num(root, "seed", -9.2e18, 9.2e18, 0, 1, &x, &has, err))) return rc;
    if (has) sp->seed = (uint64_t)(int64_t)x;
    else sp->seed = fresh_seed(); /* "regenerate" gives another answer, as OpenAI's and vLLM's */
    /* what the sampler checks, on the float values it gets (top_p 1e-300 is 0 as a float) */
    if (!(sp->top_p > 0.0f))
        return moe8_oa_bad(err, "top_p", "'top_p' must be in (0, 1] as a 32-bit float, got %g", (double)sp->top_p);
    {
        moe8_error e;
        if (moe8_sampler_params_check(sp, &e) != MOE8_OK)
            return moe8_oa_bad(err, strncmp(e.message, "temperature", 11) == 0 ? "temperature"
                            : strncmp(e.message, "top_k", 5) == 0 ? "top_k"
                            : strncmp(e.message, "min_p", 5) == 0 ? "min_p" : "top_p",
                       "%s", e.message);
    }
    return 0;
}

/* ---- structured outputs ---------------------------------------------------------- */

static void grammar_unref(srv_grammar *sg) {
    if (sg && __atomic_sub_fetch(&sg->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        moe8_grammar_destroy(sg->g);
        free(sg);
    }
}

/* Compile GBNF src for j (on a worker: never the HTTP or the engine thread),
 * its tables over the server's vocabulary made now too. */
int moe8_oa_attach_grammar(srv *s, job *j, const char *src, const char *param, moe8_buf *err) {
    grammar *g = NULL;
    moe8_error e;
    srv_grammar *sg;
    if (j->grammar) /* tools.c's, for tool_choice required or a named function */
        return moe8_oa_bad(err, "tool_choice", "'tool_choice' \"required\" or a named function and '%s' both "
                      "constrain the output: give one", param);
    if (!s->gvocab) return moe8_oa_bad(err, param, "'%s': this server has no vocabulary for grammars", param);
    if (moe8_grammar_build(src, strlen(src), &g, &e) != MOE8_OK) return moe8_oa_bad(err, param, "'%s': %s", param, e.message);
    if (moe8_grammar_prepare(g, s->gvocab, &e) != MOE8_OK || !(sg = malloc(sizeof *sg))) {
        moe8_grammar_destroy(g);
        return moe8_oa_bad(err, param, "'%s': %s", param, "out of memory");
    }
    sg->g = g;
    sg->refs = 1;
    j->grammar = sg;
    j->rq.grammar = (const moe8_grammar *)(const void *)g;
    j->rq.ignore_eos = 0; /* the grammar says where the end may come */
    return 0;
}

/* response_format (text, json_object, json_schema) and llama-server's grammar. */
static int parse_grammar(srv *s, const cJSON *root, job *j, moe8_buf *err) {
    const cJSON *rf = cJSON_GetObjectItemCaseSensitive(root, "response_format");
    const cJSON *gr = cJSON_GetObjectItemCaseSensitive(root, "grammar");
    const cJSON *ty, *js, *schema;
    int rc;
    if (gr && !cJSON_IsNull(gr) && !cJSON_IsString(gr))
        return moe8_oa_bad(err, "grammar", "'grammar' must be a string of GBNF, got %s", moe8_json_type_name(gr));
    if (!rf || cJSON_IsNull(rf))
        return gr && cJSON_IsString(gr) ? moe8_oa_attach_grammar(s, j, gr->valuestring, "grammar", err) : 0;
    if (!cJSON_IsObject(rf))
        return moe8_oa_bad(err, "response_format", "'response_format' must be an object, got %s", moe8_json_type_name(rf));
    ty = cJSON_GetObjectItemCaseSensitive(rf, "type");
    if (!cJSON_IsString(ty))
        return moe8_oa_bad(err, "response_format.type", "'response_format.type' must be \"text\", "
                      "\"json_object\" or \"json_schema\"");
    if (!strcmp(ty->valuestring, "text"))
        return gr && cJSON_IsString(gr) ? moe8_oa_attach_grammar(s, j, gr->valuestring, "grammar", err) : 0;
    if (gr && cJSON_IsString(gr))
        return moe8_oa_bad(err, "grammar", "'grammar' and a 'response_format' of type '%s' both constrain "
                      "the output: give one", ty->valuestring);
    if (!strcmp(ty->valuestring, "json_object"))
        return moe8_oa_attach_grammar(s, j, moe8_grammar_json_object(), "response_format", err);
    if (strcmp(ty->valuestring, "json_schema"))
        return moe8_oa_bad(err, "response_format.type", "'response_format.type' must be \"text\", "
                      "\"json_object\" or \"json_schema\", got '%.40s'", ty->valuestring);
    js = cJSON_GetObjectItemCaseSensitive(rf, "json_schema");
    if (!cJSON_IsObject(js))
        return moe8_oa_bad(err, "response_format.json_schema", "'response_format.json_schema' must be an "
                      "object {name, schema, strict}");
    schema = cJSON_GetObjectItemCaseSensitive(js, "schema");
    if (!cJSON_IsObject(schema) && !cJSON_IsBool(schema))
        return moe8_oa_bad(err, "response_format.json_schema.schema", "'response_format.json_schema.schema' "
                      "must be a JSON Schema object");
    {
        char *txt = cJSON_PrintUnformatted(schema), *gbnf = NULL;
        moe8_error e;
        if (!txt) return moe8_oa_bad(err, "response_format", "out of memory");
        if (moe8_json_schema_to_gbnf(txt, strlen(txt), &gbnf, &e) != MOE8_OK) {
            free(txt);
            return moe8_oa_bad(err, "response_format.json_schema.schema", "%s", e.message);
        }
        free(txt);
        rc = moe8_oa_attach_grammar(s, j, gbnf, "response_format.json_schema.schema", err);
        free(gbnf);
        return rc;
    }
}

/* The request's length: max_tokens (or the API's alias of it) against the
 * context and the KV cache, after the prompt. */
static int parse_max_tokens(srv *s, const cJSON *root, job *j, moe8_buf *err) {
    const oa_api *api = j->api;
    const int echo = j->echo != NULL;
    double x;
    int rc, has, has2 = 0;
    int64_t max_tokens;
    if ((rc = moe8_oa_get_num(root, "max_tokens", -1e18, 1e18, 0, 1, &x, &has, err))) return rc;
    if (api->max_alias) {
        double y;
        if ((rc = moe8_oa_get_num(root, api->max_alias, -1e18, 1e18, 0, 1, &y, &has2, err))) return rc;
        if (has2) {
            x = y;
            has = 1;
        }
    }
    const char *field = has2 ? api->max_alias : "max_tokens";
    if (has && x < (echo ? 0 : 1)) /* echo with 0: the prompt scored, nothing generated */
        return moe8_oa_bad(err, field, "'%s' must be at least %d, got %g", field, echo ? 0 : 1, x);
    /* a prompt the KV cache cannot hold even alone */
    if ((int64_t)j->n_prompt > s->kv_positions)
        return moe8_oa_bad(err, api->prompt_param, "the prompt has %d tokens; the "
                   "KV cache holds %lld positions in all (--kv-mb): shorten the prompt or start the "
                   "server with a larger --kv-mb", j->n_prompt, (long long)s->kv_positions);
    /* default 0 (chat's): the rest of the context, within what the KV cache holds */
    max_tokens = has ? (int64_t)x : api->default_max ? api->default_max : (int64_t)s->n_ctx - j->n_prompt;
    if (has && api->clamp_max) { /* a limit, not a demand: at most the rest of the context */
        const int64_t rest = (int64_t)s->n_ctx - j->n_prompt, kv = s->kv_positions + 1 - j->n_prompt;
        if (max_tokens > (rest < kv ? rest : kv)) max_tokens = rest < kv ? rest : kv;
        if (max_tokens < 1)
            return moe8_oa_bad(err, api->prompt_param, "prompt is too long: %d tokens > %lld maximum", j->n_prompt,
                               (long long)(s->n_ctx < s->kv_positions ? s->n_ctx : s->kv_positions) - 1);
    }
    if (!has && !api->default_max && max_tokens > s->kv_positions + 1 - j->n_prompt)
        max_tokens = s->kv_positions + 1 - j->n_prompt;
    if (!has && max_tokens < 1) /* the default (the rest of the context) is nothing */
        return moe8_oa_bad(err, api->prompt_param, "this model's maximum context length is %d tokens; the request "
                   "has %d prompt tokens, which leaves no room for a completion", s->n_ctx, j->n_prompt);
    if ((int64_t)j->n_prompt + max_tokens > s->n_ctx)
        return moe8_oa_bad(err, has ? field : api->prompt_param,
                   "this model's maximum context length is %d tokens; the request has %d prompt "
                   "tokens and asks for %lld completion tokens (%lld in all)", s->n_ctx,
                   j->n_prompt, (long long)max_tokens, (long long)j->n_prompt + max_tokens);
    /* every position but the last token's lives in the KV cache: a request
     * that cannot fit alone would end early; one that fits waits its turn */
    if ((int64_t)j->n_prompt + (max_tokens ? max_tokens - 1 : 0) > s->kv_positions)
        return moe8_oa_bad(err, has ? field : api->prompt_param,
                   "the request needs %lld KV cache positions (%d prompt tokens + %lld completion "
                   "tokens - 1), the KV cache holds %lld (--kv-mb): lower '%s' to at most %lld or "
                   "start the server with a larger --kv-mb", (long long)j->n_prompt + max_tokens - 1,
                   j->n_prompt, (long long)max_tokens, (long long)s->kv_positions, field,
                   (long long)(s->kv_positions + 1 - j->n_prompt));
    if (j->rq.min_tokens > max_tokens)
        return moe8_oa_bad(err, "min_tokens", "'min_tokens' (%d) must not exceed the completion's "
                      "max_tokens (%lld)", j->rq.min_tokens, (long long)max_tokens);
    j->rq.max_tokens = (int32_t)max_tokens;
    return 0;
}

/* The shared passes in their order, the API's hooks between them (the first
 * error wins, so the order is the API's contract). */
static int parse_request(srv *s, const cJSON *root, job *j, moe8_buf *err) {
    const oa_api *api = j->api;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(root, "stream_options");
    oa_req r = {0};
    double x;
    int rc, has, ignore_eos = 0;
    if ((rc = moe8_oa_check_fields(s, root, j->kind, err))) return rc;
    if (model && !cJSON_IsNull(model)) {
        if (!cJSON_IsString(model)) return moe8_oa_bad(err, "model", "'model' must be a string, got %s", moe8_json_type_name(model));
        if (strcmp(model->valuestring, s->model_name)) { /* OpenAI's and vLLM's answer */
            moe8_oa_error(err, T_INVALID, "model", "model_not_found", "the model '%s' does not exist; "
                     "this server serves '%s'", model->valuestring, s->model_name);
            return 404;
        }
    }
    if ((rc = moe8_oa_get_bool(root, "stream", &j->stream, err))) return rc;
    if (so && !cJSON_IsNull(so)) {
        if (!cJSON_IsObject(so)) return moe8_oa_bad(err, "stream_options", "'stream_options' must be an object, got %s", moe8_json_type_name(so));
        if ((rc = moe8_oa_get_bool(so, "include_usage", &j->include_usage, err))) return rc;
    }
    if ((rc = moe8_oa_get_num(root, "n", 1, SRV_MAX_N, 0, 1, &x, &has, err))) return rc;
    j->n_choices = has ? (int)x : 1;
    if (api->options && (rc = api->options(root, j, &r, err))) return rc;
    if ((rc = moe8_oa_get_bool(root, "ignore_eos", &ignore_eos, err))) return rc;
    j->rq.ignore_eos = ignore_eos;
    if ((rc = parse_sampling(s, root, j, err)) || (rc = parse_stop(root, j, err)) ||
        (rc = api->logprobs(root, j, err)) || (rc = moe8_oa_parse_processors(s, root, j, err)) ||
        (rc = api->prompt(s, root, j, &r, err)) || (rc = parse_max_tokens(s, root, j, err)))
        return rc;
    if (j->echo && j->rq.logprobs >= 0) j->rq.n_prompt_logits = j->n_prompt; /* echo's log-probs */
    if ((rc = parse_grammar(s, root, j, err))) return rc;
    /* thinking on: the model thinks freely, the grammar (response_format, grammar, or required /
     * named tools) constrains what follows the think block, as vLLM's reasoning parsers do */
    if (j->grammar && j->grammar_whole) j->rq.grammar_after = NULL; /* tools.c's harmony call */
    else if (j->grammar && j->thinking) j->rq.grammar_after = "</think>";
    else if (j->grammar && s->tool_format == TOOLCALL_HARMONY) /* gpt-oss: the final channel's message */
        j->rq.grammar_after = "<|channel|>final<|message|>";
    return 0;
}

/* The body as a JSON object, under the one input policy of every endpoint:
 * valid UTF-8, no NUL, exactly one value with nothing but whitespace after
 * it, no object anywhere holding a key twice (refused, naming the key:
 * parsers disagree on which copy wins), nesting within cJSON's limit. */
cJSON *moe8_oa_parse_object(const char *body, size_t n, moe8_buf *err, int *rc) {
    cJSON *root;
    ptrdiff_t at;
    moe8_error e;
    *rc = 0;
    if ((at = bad_utf8(body, n)) >= 0) {
        *rc = moe8_oa_bad(err, NULL, "the body is not valid UTF-8 JSON (byte %td)", at);
        return NULL;
    }
    if ((at = moe8_json_nul_escape(body, n)) >= 0) {
        *rc = moe8_oa_bad(err, NULL, "the body holds a NUL character (\\u0000 at byte %td); request text "
                  "cannot contain NUL", at);
        return NULL;
    }
    if (moe8_json_parse(body, n, "the body", &root, &e) != MOE8_OK) {
        *rc = moe8_oa_bad(err, NULL, "%s", e.message);
        return NULL;
    }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        *rc = moe8_oa_bad(err, NULL, "the body must be a JSON object");
        return NULL;
    }
    return root;
}

static job *job_clone(const job *j, int i);

int moe8_oa_parse_completion(srv *s, const char *body, size_t n, const oa_api *api, job **out, moe8_buf *err) {
    cJSON *root;
    job *j;
    int rc;
    static uint64_t counter;
    *out = NULL;
    if (!(root = moe8_oa_parse_object(body, n, err, &rc))) return rc;
    if (!(j = calloc(1, sizeof *j))) {
        cJSON_Delete(root);
        return moe8_oa_bad(err, NULL, "out of memory");
    }
    j->kind = api->kind;
    j->api = api;
    j->rq = moe8_request_default();
    if ((rc = parse_request(s, root, j, err))) {
        cJSON_Delete(root);
        moe8_job_free(j);
        return rc;
    }
    cJSON_Delete(root);
    j->rq.prompt = j->prompt;
    j->rq.n_prompt = j->n_prompt;
    j->rq.stop = (const char *const *)j->stop_store;
    j->rq.user = j;
    j->created = (int64_t)time(NULL);
    j->id_rng = fresh_seed();
    snprintf(j->id, sizeof j->id, "%s-%llx%06llx", api->id_prefix,
             (unsigned long long)j->created, (unsigned long long)(__atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED) & 0xffffff));
    for (int i = 1; i < j->n_choices; i++) {
        job *k = job_clone(j, i);
        if (!k) {
            moe8_job_free(j);
            return moe8_oa_bad(err, "n", "out of memory for %d choices", j->n_choices);
        }
        j->kids[j->n_kids++] = k;
    }
    *out = j;
    return 0;
}

/* Choice i of leader j: the same request, seeded seed + i (vLLM's rule). */
static job *job_clone(const job *j, int i) {
    job *k = malloc(sizeof *k);
    int ok;
    if (!k) return NULL;
    *k = *j;
    k->prompt = malloc((size_t)j->n_prompt * sizeof *k->prompt);
    k->bias_ids = j->rq.n_bias ? malloc((size_t)j->rq.n_bias * sizeof *k->bias_ids) : NULL;
    k->bias = j->rq.n_bias ? malloc((size_t)j->rq.n_bias * sizeof *k->bias) : NULL;
    k->echo = j->echo ? malloc(j->n_echo + 1) : NULL;
    memset(k->stop_store, 0, sizeof k->stop_store);
    memset(&k->out, 0, sizeof k->out);
    memset(&k->text, 0, sizeof k->text);
    memset(&k->reasoning, 0, sizeof k->reasoning);
    memset(&k->hold, 0, sizeof k->hold);
    k->lp_json = k->echo_lp = NULL;
    k->n_kids = 0;
    k->ext = NULL;
    k->ext_free = NULL;
    k->grammar = NULL;
    k->calls = NULL;
    memset(&k->args, 0, sizeof k->args);
    k->tc = j->tc ? moe8_toolcall_new_like(j->tc) : NULL;
    ok = k->prompt && (!j->rq.n_bias || (k->bias_ids && k->bias)) && (!j->echo || k->echo) &&
         (!j->tc || k->tc);
    for (int s = 0; ok && s < j->rq.n_stop; s++) ok = (k->stop_store[s] = strdup(j->stop_store[s])) != NULL;
    if (!ok) {
        moe8_job_free(k);
        return NULL;
    }
    memcpy(k->prompt, j->prompt, (size_t)j->n_prompt * sizeof *k->prompt);
    if (j->rq.n_bias) {
        memcpy(k->bias_ids, j->bias_ids, (size_t)j->rq.n_bias * sizeof *k->bias_ids);
        memcpy(k->bias, j->bias, (size_t)j->rq.n_bias * sizeof *k->bias);
    }
    if (j->echo) memcpy(k->echo, j->echo, j->n_echo + 1);
    k->rq.prompt = k->prompt;
    k->rq.bias_ids = k->bias_ids;
    k->rq.bias = k->bias;
    k->rq.stop = (const char *const *)k->stop_store;
    k->rq.sampling.seed = j->rq.sampling.seed + (uint64_t)i;
    k->rq.user = k;
    k->index = i;
    k->id_rng = j->id_rng + 0x9E3779B97F4A7C15ull * (uint64_t)i;
    if ((k->grammar = j->grammar)) __atomic_add_fetch(&k->grammar->refs, 1, __ATOMIC_RELAXED);
    return k;
}

void moe8_job_free(job *j) {
    if (!j) return;
    free(j->prompt);
    free(j->bias_ids);
    free(j->bias);
    free(j->echo);
    cJSON_Delete(j->echo_lp);
    grammar_unref(j->grammar);
    moe8_tools_free(j);
    for (int i = 0; i < MOE8_MAX_STOP_STRINGS; i++) free(j->stop_store[i]);
    moe8_buf_free(&j->out);
    moe8_buf_free(&j->text);
    moe8_buf_free(&j->reasoning);
    moe8_buf_free(&j->hold);
    cJSON_Delete(j->lp_json);
    if (j->ext_free) j->ext_free(j->ext);
    free(j);
}
/* ---- output: JSON pieces ------------------------------------------------------------ */

cJSON *moe8_oa_token_entry(srv *s, int32_t tok, float lp, int chat) {
    size_t nb = 0;
    const char *b = moe8_tokenizer_token_bytes(s->tok, tok, &nb, NULL);
    cJSON *e = cJSON_CreateObject();
    moe8_oa_json_text(e, "token", b ? b : "", b ? nb : 0);
    cJSON_AddNumberToObject(e, "logprob", lp);
    if (chat) {
        cJSON *bytes = cJSON_AddArrayToObject(e, "bytes");
        for (size_t i = 0; i < nb; i++) cJSON_AddItemToArray(bytes, cJSON_CreateNumber((unsigned char)b[i]));
    }
    return e;
}

cJSON *moe8_oa_envelope(srv *s, const job *j, const char *object) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "id", j->id);
    cJSON_AddStringToObject(root, "object", object);
    cJSON_AddNumberToObject(root, "created", (double)j->created);
    cJSON_AddStringToObject(root, "model", s->model_name);
    return root;
}

void moe8_oa_sse(job *j, cJSON *root) {
    char *txt = cJSON_PrintUnformatted(root);
    if (txt) {
        moe8_buf_str(&j->out, "data: ");
        moe8_buf_str(&j->out, txt);
        moe8_buf_str(&j->out, "\n\n");
    }
    free(txt);
    cJSON_Delete(root);
}

/* One streamed chunk: text (completions), or content / reasoning deltas. */
void moe8_oa_stream_chunk(srv *s, job *j, const char *content, size_t nc, const char *reason, size_t nr,
                          const char *finish, cJSON *lp, cJSON *tool_deltas) {
    cJSON *root = moe8_oa_envelope(s, j, j->api->chunk_object);
    cJSON *choices = cJSON_AddArrayToObject(root, "choices"), *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", j->index);
    j->api->delta(c, content, nc, reason, nr, finish, tool_deltas);
    if (lp) cJSON_AddItemToObject(c, "logprobs", lp);
    else cJSON_AddNullToObject(c, "logprobs");
    if (finish) cJSON_AddStringToObject(c, "finish_reason", finish);
    else cJSON_AddNullToObject(c, "finish_reason");
    cJSON_AddItemToArray(choices, c);
    moe8_oa_sse(j, root);
}

/* ---- output: the engine's callbacks ------------------------------------------------- */

void moe8_oa_on_start(srv *s, job *j) {
    if (j->api->start) j->api->start(s, j);
}

/* New text of the job (split by the API: chat's reasoning and content), the
 * content through the tool-call parser; streamed at once or kept. `finish`
 * (the last call): "stop" becomes "tool_calls" when the output made a call. */
static void emit_text(srv *s, job *j, const char *txt, size_t n, const moe8_event *tok_ev,
                      int final, const char *finish) {
    moe8_buf content = {0}, reason = {0};
    cJSON *lp = NULL, *deltas = NULL;
    j->api->split(s, j, txt, n, &content, &reason, final);
    if (j->tc) { /* only what is not a call is shown */
        moe8_buf shown = {0};
        deltas = moe8_tools_feed(s, j, content.p, content.n, final, &shown, &reason);
        moe8_buf_free(&content);
        content = shown;
        if (finish && j->n_calls_ok && !strcmp(finish, "stop")) finish = "tool_calls";
    }
    if (tok_ev && j->rq.logprobs >= 0) {
        if (j->stream) lp = j->api->new_logprobs();
        else if (!j->lp_json) j->lp_json = j->api->new_logprobs();
        j->api->add_logprobs(s, j, lp ? lp : (cJSON *)j->lp_json, tok_ev);
    }
    j->n_offset += (int32_t)n;
    if (j->stream && j->api->stream) {
        const oa_piece p = {content.p, reason.p, content.n, reason.n, deltas, lp, finish};
        j->api->stream(s, j, &p);
    } else if (j->stream) {
        if (content.n || reason.n || lp || finish || deltas)
            moe8_oa_stream_chunk(s, j, content.p, content.n, reason.p, reason.n, finish, lp, deltas);
    } else {
        moe8_buf_add(&j->text, content.p ? content.p : "", content.n);
        moe8_buf_add(&j->reasoning, reason.p ? reason.p : "", reason.n);
    }
    moe8_buf_free(&content);
    moe8_buf_free(&reason);
}

void moe8_oa_on_token(srv *s, job *j, const moe8_event *e) {
    j->n_gen++;
    j->last_token = e->token;
    emit_text(s, j, e->text, e->text_len, e, 0, NULL);
}

static const char *finish_name(moe8_finish f) {
    switch (f) {
    case MOE8_FINISH_STOP: return "stop";
    case MOE8_FINISH_LENGTH:
    case MOE8_FINISH_CONTEXT: return "length";
    default: return "abort";
    }
}

/* A non-stream choice: its object as JSON text in j->out (moe8_oa_response puts
 * the choices of a request together). */
static void whole_choice(job *j, const char *finish) {
    cJSON *c;
    if (!j->api->choice) { /* the API's whole hook reads the job itself */
        j->status = 200;
        return;
    }
    c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", j->index);
    j->api->choice(j, c);
    cJSON_AddStringToObject(c, "finish_reason", finish);
    j->out.n = 0;
    j->sent = 0;
    {
        char *txt = cJSON_PrintUnformatted(c);
        if (txt) moe8_buf_str(&j->out, txt);
        free(txt);
    }
    cJSON_Delete(c);
    j->status = 200;
}

static cJSON *usage_of(job *const *jobs, int n) {
    cJSON *u = cJSON_CreateObject(), *d;
    int32_t gen = 0;
    for (int i = 0; i < n; i++) gen += jobs[i]->n_gen;
    cJSON_AddNumberToObject(u, "prompt_tokens", jobs[0]->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", gen);
    cJSON_AddNumberToObject(u, "total_tokens", jobs[0]->n_prompt + gen);
    d = cJSON_AddObjectToObject(u, "prompt_tokens_details");
    cJSON_AddNumberToObject(d, "cached_tokens", jobs[0]->n_cached);
    return u;
}

void moe8_oa_response(srv *s, job *const *jobs, int n, moe8_buf *out) {
    const job *j = jobs[0];
    cJSON *root, *choices;
    char *txt;
    if (j->api->whole) {
        out->n = 0;
        j->api->whole(s, jobs, n, out);
        return;
    }
    root = moe8_oa_envelope(s, j, j->api->object);
    choices = cJSON_AddArrayToObject(root, "choices");
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(choices, cJSON_CreateRaw(jobs[i]->out.p ? jobs[i]->out.p : "{}"));
    cJSON_AddItemToObject(root, "usage", usage_of(jobs, n));
    txt = cJSON_PrintUnformatted(root);
    out->n = 0;
    if (txt) moe8_buf_str(out, txt);
    free(txt);
    cJSON_Delete(root);
}

void moe8_oa_stream_tail(srv *s, job *const *jobs, int n, moe8_buf *out) {
    const job *j = jobs[0];
    if (j->api->tail) {
        j->api->tail(s, jobs, n, out);
        return;
    }
    if (j->include_usage) {
        cJSON *root = moe8_oa_envelope(s, j, j->api->chunk_object);
        char *txt;
        cJSON_AddArrayToObject(root, "choices");
        cJSON_AddItemToObject(root, "usage", usage_of(jobs, n));
        txt = cJSON_PrintUnformatted(root);
        if (txt) {
            moe8_buf_str(out, "data: ");
            moe8_buf_str(out, txt);
            moe8_buf_str(out, "\n\n");
        }
        free(txt);
        cJSON_Delete(root);
    }
    moe8_buf_str(out, "data: [DONE]\n\n");
}

void moe8_oa_on_finish(srv *s, job *j, const moe8_event *e) {
    /* parallel_tool_calls false: the engine ended it after the first call */
    const char *finish = j->tool_stop && (e->finish == MOE8_FINISH_CANCELLED || e->finish == MOE8_FINISH_STOP)
                             ? "tool_calls" : finish_name(e->finish);
    j->n_cached = e->n_cached;
    j->finish_text = e->text_len;
    j->finish_reason = j->n_calls_ok && !strcmp(finish, "stop") ? "tool_calls" : finish;
    if (e->finish == MOE8_FINISH_CONTEXT) /* "length" for the client, the reason for the log */
        j->finish_note = "finish_reason=length: the context or the KV cache is full";
    if (e->finish == MOE8_FINISH_ERROR) {
        moe8_buf body = {0};
        moe8_oa_error(&body, "server_error", NULL, NULL, "the request failed: %s",
                 e->message ? e->message : moe8_status_str(e->status));
        if (j->stream && j->api->fail) {
            j->api->fail(s, j, &body);
        } else if (j->stream) { /* the [DONE] comes with the request's tail (moe8_oa_stream_tail) */
            moe8_buf_str(&j->out, "data: ");
            moe8_buf_add(&j->out, body.p, body.n);
            moe8_buf_str(&j->out, "\n\n");
        } else {
            j->out.n = 0;
            moe8_buf_add(&j->out, body.p, body.n);
            j->status = 500;
        }
        moe8_buf_free(&body);
        return;
    }
    emit_text(s, j, e->text, e->text_len, NULL, 1, j->stream ? finish : NULL);
    if (!j->stream) whole_choice(j, j->n_calls_ok && !strcmp(finish, "stop") ? "tool_calls" : finish);
}
