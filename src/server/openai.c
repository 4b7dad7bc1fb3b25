/*
 * openai.c — the OpenAI API's JSON for `moe8 serve`: request bodies become
 * validated jobs, scheduler events become streamed chunks or whole
 * responses (completions: object "text_completion"; chat: "chat.completion"
 * and "chat.completion.chunk"), plus /tokenize, /detokenize, /v1/models.
 *
 * Validation names the field and what was expected, with OpenAI's error
 * body {"error": {"message", "type", "param", "code"}}. Sampling defaults
 * come from the model folder's generation_config.json where it sets them,
 * else OpenAI's (temperature 1, top_p 1).
 *
 * Chat prompts are the model's chat template (moe8_chat_apply) over the
 * messages, with the request's chat_template_kwargs as template variables,
 * tokenized without an added BOS (the template writes its own), as vLLM
 * does; a template's raise_exception is a 400 with its message.
 * Chat output is split as vLLM's Qwen3 reasoning parser does: text between
 * <think> and </think> is reasoning_content, the rest content; a tag split
 * across tokens is held back until it is decided, never shown in part. When
 * the rendered prompt itself ends in an open <think> (DeepSeek-R1's
 * template), the answer starts as reasoning, as vLLM's DeepSeek-R1 parser
 * reads it (a leading <think> the model writes anyway is dropped).
 * Token strings in log-probs are the token's bytes with invalid UTF-8
 * replaced by U+FFFD ("bytes" keeps the raw values).
 *
 * Does not: run anything (engine.c does), or talk HTTP (http.c does).
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
#include "server/chat.h"
#include "server/toolcall.h"
#include "server/server.h"

#define T_INVALID "invalid_request_error"

void oa_error(moe8_buf *out, const char *type, const char *param, const char *code, const char *fmt, ...) {
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

int oa_bad(moe8_buf *err, const char *param, const char *fmt, ...) {
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    oa_error(err, T_INVALID, param, NULL, "%s", msg);
    return 400;
}

/* Valid UTF-8 (and no NUL): the offset of the first bad byte, or -1. */
static ptrdiff_t bad_utf8(const char *s, size_t n) {
    size_t bad = moe8_utf8_valid(s, n);
    const char *nul = memchr(s, 0, bad == (size_t)-1 ? n : bad);
    if (nul) return nul - s;
    return bad == (size_t)-1 ? -1 : (ptrdiff_t)bad;
}

void oa_json_text(cJSON *o, const char *key, const char *s, size_t n) {
    moe8_buf b = {0};
    moe8_buf_json_str(&b, s, n, MOE8_JSON_LOSSY);
    cJSON_AddRawToObject(o, key, b.p ? b.p : "\"\"");
    moe8_buf_free(&b);
}

/* ---- field readers --------------------------------------------------------------- */

const char *oa_type_name(const cJSON *v) {
    return cJSON_IsString(v) ? "a string" : cJSON_IsNumber(v) ? "a number" : cJSON_IsBool(v) ? "a boolean"
           : cJSON_IsArray(v) ? "an array" : cJSON_IsObject(v) ? "an object" : "null";
}

/* Optional number field in [lo, hi] (lo_open: (lo, hi]); integral when `integer`. */
int oa_get_num(const cJSON *o, const char *key, double lo, double hi, int lo_open, int integer,
                   double *out, int *present, moe8_buf *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    double x;
    if (present) *present = 0;
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsNumber(v))
        return oa_bad(err, key, "'%s' must be %s, got %s", key, integer ? "an integer" : "a number",
                   oa_type_name(v));
    x = v->valuedouble;
    if (!isfinite(x) || (integer && x != floor(x)))
        return oa_bad(err, key, "'%s' must be %s, got %g", key, integer ? "an integer" : "a finite number", x);
    if (x < lo || x > hi || (lo_open && x == lo))
        return oa_bad(err, key, "'%s' must be in %c%g, %g], got %g", key, lo_open ? '(' : '[', lo, hi, x);
    *out = x;
    if (present) *present = 1;
    return 0;
}

int oa_get_bool(const cJSON *o, const char *key, int *out, moe8_buf *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsBool(v)) return oa_bad(err, key, "'%s' must be a boolean, got %s", key, oa_type_name(v));
    *out = cJSON_IsTrue(v);
    return 0;
}

/* ---- prompts ------------------------------------------------------------------------ */

/* with_bos: prepend BOS when the tokenizer asks for it (prompts, not chats). */
static int tokenize_text(srv *s, const char *text, int with_bos, int32_t **ids, int32_t *n,
                         const char *param, moe8_buf *err) {
    size_t len = strlen(text), need = 0;
    const int bos = with_bos && moe8_tokenizer_add_bos(s->tok) && moe8_tokenizer_bos_id(s->tok) >= 0;
    moe8_error e;
    if (moe8_tokenize(s->tok, text, len, NULL, 0, &need, &e) != MOE8_OK && need == 0 && len > 0)
        return oa_bad(err, param, "'%s' cannot be tokenized: %s", param, e.message);
    if (!(*ids = malloc((need + 1) * sizeof **ids))) return oa_bad(err, param, "out of memory");
    if (bos) (*ids)[0] = moe8_tokenizer_bos_id(s->tok);
    if (moe8_tokenize(s->tok, text, len, *ids + bos, need, &need, &e) != MOE8_OK) {
        free(*ids);
        *ids = NULL;
        return oa_bad(err, param, "'%s' cannot be tokenized: %s", param, e.message);
    }
    *n = (int32_t)need + bos;
    return 0;
}

static int ids_from_array(srv *s, const cJSON *a, int32_t **ids, int32_t *n, const char *param,
                          moe8_buf *err) {
    int k = 0, count = cJSON_GetArraySize(a);
    const cJSON *v;
    if (!(*ids = malloc(((size_t)count + 1) * sizeof **ids))) return oa_bad(err, param, "out of memory");
    cJSON_ArrayForEach(v, a) {
        if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 0 ||
            v->valuedouble >= s->n_vocab) {
            free(*ids);
            *ids = NULL;
            return oa_bad(err, param, "'%s'[%d] must be a token id in [0, %d)", param, k, s->n_vocab);
        }
        (*ids)[k++] = (int32_t)v->valuedouble;
    }
    *n = k;
    return 0;
}

/* The chat template over the conversation as JSON, into a malloc'd *out;
 * a 400 when it fails (its raise_exception, no template, ...). */
static int render_chat(srv *s, const char *msgs, const char *tools, const char *docs, int gen_prompt,
                       const char *kwargs, char **out, moe8_buf *err) {
    size_t cap = 4096 + 2 * (strlen(msgs) + (tools ? strlen(tools) : 0) + (docs ? strlen(docs) : 0)), need = 0;
    moe8_error e;
    moe8_status st = MOE8_ERR_NOMEM;
    const char *where;
    for (int k = 0; k < 2; k++) {
        if (!(*out = malloc(cap))) break;
        if ((st = moe8_chat_apply_json(s->tok, msgs, tools, docs, gen_prompt, kwargs, *out, cap, &need,
                                       &e)) == MOE8_OK)
            return 0;
        free(*out);
        *out = NULL;
        if (need < cap) break;
        cap = need + 1;
    }
    if (st == MOE8_ERR_NOMEM) return oa_bad(err, "messages", "out of memory");
    if (st == MOE8_ERR_NOT_FOUND)
        return oa_bad(err, "messages", "this model has no chat template (its tokenizer_config.json has "
                   "no chat_template); send a formatted prompt to /v1/completions");
    if (st == MOE8_ERR_INVALID_ARG) /* the template refused this conversation, or bad kwargs */
        return oa_bad(err, strstr(e.message, "kwargs") ? "chat_template_kwargs" : "messages", "%s",
                   e.message);
    /* one moe8 cannot use: the message starts with the file's path, which clients need not see */
    where = strstr(e.message, "chat template");
    return oa_bad(err, "messages", "the model's chat template cannot be used: %s", where ? where : e.message);
}

/* 1 if the rendered prompt ends inside an open <think> (DeepSeek-R1's template
 * writes "<think>\n" after the assistant tag): the answer starts as reasoning. */
static int ends_in_think(const char *p) {
    size_t n = strlen(p);
    while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\n' || p[n - 1] == '\r' || p[n - 1] == '\t')) n--;
    return n >= 7 && !memcmp(p + n - 7, "<think>", 7);
}

/* Reasoning is on for a chat prompt (vLLM's structured outputs then wait
 * for the reasoning parser's end): the template writes think blocks, the
 * template variables `kwargs` (JSON, may be NULL) do not switch thinking off
 * (enable_thinking false), and the prompt does not close the block itself
 * (Qwen3's "<think>\n\n</think>\n\n" with thinking off). */
static int reasoning_on(const srv *s, const char *kwargs, const char *prompt) {
    size_t n = strlen(prompt);
    if (!s->think_template) return 0;
    if (kwargs) {
        cJSON *kw = NULL;
        moe8_json_parse(kwargs, strlen(kwargs), "chat_template_kwargs", &kw, NULL); /* checked */
        const int off = cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(kw, "enable_thinking"));
        cJSON_Delete(kw);
        if (off) return 0;
    }
    while (n > 0 && (prompt[n - 1] == ' ' || prompt[n - 1] == '\n' || prompt[n - 1] == '\r' || prompt[n - 1] == '\t')) n--;
    return !(n >= 8 && !memcmp(prompt + n - 8, "</think>", 8));
}

/* The request's template variables: its chat_template_kwargs over
 * --default-chat-template-kwargs; *kwargs NULL when neither. */
static int template_kwargs(srv *s, const cJSON *root, char **kwargs, moe8_buf *err) {
    const cJSON *kw = cJSON_GetObjectItemCaseSensitive(root, "chat_template_kwargs"), *it;
    cJSON *merged;
    int thinking = 1, rc;
    *kwargs = NULL;
    if (kw && !cJSON_IsNull(kw) && !cJSON_IsObject(kw))
        return oa_bad(err, "chat_template_kwargs", "'chat_template_kwargs' must be an object, got %s",
                      oa_type_name(kw));
    if (!(kw && cJSON_IsObject(kw)) && !s->default_kwargs) return 0;
    if (kw && cJSON_IsObject(kw) && (rc = oa_get_bool(kw, "enable_thinking", &thinking, err))) return rc;
    merged = s->default_kwargs ? cJSON_Duplicate(s->default_kwargs, 1) : cJSON_CreateObject();
    if (kw && cJSON_IsObject(kw))
        cJSON_ArrayForEach(it, kw) {
            cJSON_DeleteItemFromObjectCaseSensitive(merged, it->string);
            cJSON_AddItemToObject(merged, it->string, cJSON_Duplicate(it, 1));
        }
    *kwargs = merged ? cJSON_PrintUnformatted(merged) : NULL;
    cJSON_Delete(merged);
    return *kwargs ? 0 : oa_bad(err, "chat_template_kwargs", "out of memory");
}

/* The chat prompt's ids: the messages as the client sent them (chat.c),
 * the tools (unless `no_tools`) and documents, through the model's template;
 * *open_think (may be NULL) = ends_in_think of its text, *reasoning (may be
 * NULL) = reasoning_on. */
static int chat_prompt(srv *s, const cJSON *root, int gen_prompt, int no_tools, int32_t **ids,
                       int32_t *n, int *open_think, int *reasoning, moe8_buf *err) {
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(root, "messages");
    char *mj = NULL, *tj = NULL, *dj = NULL, *kwargs = NULL, *out = NULL;
    int rc;
    if (!msgs) return oa_bad(err, "messages", "'messages' is required");
    if (!cJSON_IsArray(msgs)) return oa_bad(err, "messages", "'messages' must be an array, got %s", oa_type_name(msgs));
    if (cJSON_GetArraySize(msgs) == 0) return oa_bad(err, "messages", "'messages' must not be empty");
    if ((rc = template_kwargs(s, root, &kwargs, err))) return rc;
    rc = chat_messages_normalize(msgs, no_tools ? NULL : cJSON_GetObjectItemCaseSensitive(root, "tools"),
                                 cJSON_GetObjectItemCaseSensitive(root, "documents"), &mj, &tj, &dj, err);
    if (!rc) rc = render_chat(s, mj, tj, dj, gen_prompt, kwargs, &out, err);
    if (!rc && open_think) *open_think = gen_prompt && ends_in_think(out);
    if (!rc && reasoning) *reasoning = gen_prompt && reasoning_on(s, kwargs, out);
    if (!rc) rc = tokenize_text(s, out, 0, ids, n, "messages", err);
    free(mj);
    free(tj);
    free(dj);
    free(out);
    cJSON_free(kwargs);
    return rc;
}

static int prompt_ids(srv *s, const cJSON *root, int32_t **ids, int32_t *n, moe8_buf *err) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    if (!p || cJSON_IsNull(p)) return oa_bad(err, "prompt", "'prompt' is required");
    if (cJSON_IsString(p)) return tokenize_text(s, p->valuestring, 1, ids, n, "prompt", err);
    if (cJSON_IsArray(p) && cJSON_GetArraySize(p) > 0) {
        const cJSON *first = cJSON_GetArrayItem(p, 0);
        if (cJSON_IsString(first)) {
            if (cJSON_GetArraySize(p) > 1)
                return oa_bad(err, "prompt", "'prompt' holds %d prompts; one prompt per request is "
                           "supported", cJSON_GetArraySize(p));
            return tokenize_text(s, first->valuestring, 1, ids, n, "prompt", err);
        }
        if (cJSON_IsArray(first))
            return oa_bad(err, "prompt", "'prompt' as an array of token arrays (several prompts) is "
                       "not supported; send one prompt per request");
        return ids_from_array(s, p, ids, n, "prompt", err);
    }
    return oa_bad(err, "prompt", "'prompt' must be a string or a non-empty array of token ids, got %s",
               cJSON_IsArray(p) ? "an empty array" : oa_type_name(p));
}

/* ---- requests ----------------------------------------------------------------------- */

static int parse_stop(const cJSON *root, job *j, moe8_buf *err) {
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(root, "stop"), *v;
    int k = 0;
    if (!st || cJSON_IsNull(st)) return 0;
    if (cJSON_IsString(st)) {
        if (!st->valuestring[0]) return oa_bad(err, "stop", "'stop' must not be an empty string");
        j->stop_store[0] = strdup(st->valuestring);
        j->rq.n_stop = 1;
        return 0;
    }
    if (!cJSON_IsArray(st)) return oa_bad(err, "stop", "'stop' must be a string or an array of strings, got %s", oa_type_name(st));
    if (cJSON_GetArraySize(st) > MOE8_MAX_STOP_STRINGS)
        return oa_bad(err, "stop", "'stop' holds %d strings; at most %d", cJSON_GetArraySize(st), MOE8_MAX_STOP_STRINGS);
    cJSON_ArrayForEach(v, st) {
        if (!cJSON_IsString(v) || !v->valuestring[0])
            return oa_bad(err, "stop", "'stop'[%d] must be a non-empty string", k);
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
    if ((rc = oa_get_num(root, "temperature", 0, 1e6, 0, 0, &x, &has, err))) return rc;
    if (has) sp->temperature = (float)x;
    if ((rc = oa_get_num(root, "top_p", 0, 1, 1, 0, &x, &has, err))) return rc;
    if (has) sp->top_p = (float)x;
    if ((rc = oa_get_num(root, "top_k", -1, 1e9, 0, 1, &x, &has, err))) return rc;
    if (has) sp->top_k = x < 0 ? 0 : (int)x; /* -1: off, as vLLM */
    if ((rc = oa_get_num(root, "min_p", 0, 1, 0, 0, &x, &has, err))) return rc;
    if (has) sp->min_p = (float)x;
    if ((rc = oa_get_num(root, "seed", -9.2e18, 9.2e18, 0, 1, &x, &has, err))) return rc;
    if (has) sp->seed = (uint64_t)(int64_t)x;
    else sp->seed = fresh_seed(); /* "regenerate" gives another answer, as OpenAI's and vLLM's */
    /* what the sampler checks, on the float values it gets (top_p 1e-300 is 0 as a float) */
    if (!(sp->top_p > 0.0f))
        return oa_bad(err, "top_p", "'top_p' must be in (0, 1] as a 32-bit float, got %g", (double)sp->top_p);
    {
        moe8_error e;
        if (moe8_sampler_params_check(sp, &e) != MOE8_OK)
            return oa_bad(err, strncmp(e.message, "temperature", 11) == 0 ? "temperature"
                            : strncmp(e.message, "top_k", 5) == 0 ? "top_k"
                            : strncmp(e.message, "min_p", 5) == 0 ? "min_p" : "top_p",
                       "%s", e.message);
    }
    return 0;
}

static int parse_logprobs(const cJSON *root, job *j, moe8_buf *err) {
    double x;
    int rc, has, on = 0;
    if (j->kind == JOB_COMPLETION) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "logprobs");
        if (v && cJSON_IsBool(v))
            return oa_bad(err, "logprobs", "'logprobs' of a completion must be an integer in [0, %d]",
                       MOE8_MAX_LOGPROBS);
        if ((rc = oa_get_num(root, "logprobs", 0, MOE8_MAX_LOGPROBS, 0, 1, &x, &has, err))) return rc;
        if (has) j->rq.logprobs = (int32_t)x;
        return 0;
    }
    if ((rc = oa_get_bool(root, "logprobs", &on, err))) return rc;
    if ((rc = oa_get_num(root, "top_logprobs", 0, MOE8_MAX_LOGPROBS, 0, 1, &x, &has, err))) return rc;
    if (has && !on) return oa_bad(err, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
    j->chat_logprobs = on;
    if (on) j->rq.logprobs = has ? (int32_t)x : 0;
    return 0;
}

/* ---- structured outputs ---------------------------------------------------------- */

static void grammar_unref(srv_grammar *sg) {
    if (sg && __atomic_sub_fetch(&sg->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        grammar_free(sg->g);
        free(sg);
    }
}

/* Compile GBNF src for j (on a worker: never the HTTP or the engine thread),
 * its tables over the server's vocabulary made now too. */
int oa_attach_grammar(srv *s, job *j, const char *src, const char *param, moe8_buf *err) {
    grammar *g = NULL;
    moe8_error e;
    srv_grammar *sg;
    if (j->grammar) /* tools.c's, for tool_choice required or a named function */
        return oa_bad(err, "tool_choice", "'tool_choice' \"required\" or a named function and '%s' both "
                      "constrain the output: give one", param);
    if (!s->gvocab) return oa_bad(err, param, "'%s': this server has no vocabulary for grammars", param);
    if (grammar_compile(src, strlen(src), &g, &e) != MOE8_OK) return oa_bad(err, param, "'%s': %s", param, e.message);
    if (grammar_prepare(g, s->gvocab, &e) != MOE8_OK || !(sg = malloc(sizeof *sg))) {
        grammar_free(g);
        return oa_bad(err, param, "'%s': %s", param, "out of memory");
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
        return oa_bad(err, "grammar", "'grammar' must be a string of GBNF, got %s", oa_type_name(gr));
    if (!rf || cJSON_IsNull(rf))
        return gr && cJSON_IsString(gr) ? oa_attach_grammar(s, j, gr->valuestring, "grammar", err) : 0;
    if (!cJSON_IsObject(rf))
        return oa_bad(err, "response_format", "'response_format' must be an object, got %s", oa_type_name(rf));
    ty = cJSON_GetObjectItemCaseSensitive(rf, "type");
    if (!cJSON_IsString(ty))
        return oa_bad(err, "response_format.type", "'response_format.type' must be \"text\", "
                      "\"json_object\" or \"json_schema\"");
    if (!strcmp(ty->valuestring, "text"))
        return gr && cJSON_IsString(gr) ? oa_attach_grammar(s, j, gr->valuestring, "grammar", err) : 0;
    if (gr && cJSON_IsString(gr))
        return oa_bad(err, "grammar", "'grammar' and a 'response_format' of type '%s' both constrain "
                      "the output: give one", ty->valuestring);
    if (!strcmp(ty->valuestring, "json_object"))
        return oa_attach_grammar(s, j, grammar_json_object(), "response_format", err);
    if (strcmp(ty->valuestring, "json_schema"))
        return oa_bad(err, "response_format.type", "'response_format.type' must be \"text\", "
                      "\"json_object\" or \"json_schema\", got '%.40s'", ty->valuestring);
    js = cJSON_GetObjectItemCaseSensitive(rf, "json_schema");
    if (!cJSON_IsObject(js))
        return oa_bad(err, "response_format.json_schema", "'response_format.json_schema' must be an "
                      "object {name, schema, strict}");
    schema = cJSON_GetObjectItemCaseSensitive(js, "schema");
    if (!cJSON_IsObject(schema) && !cJSON_IsBool(schema))
        return oa_bad(err, "response_format.json_schema.schema", "'response_format.json_schema.schema' "
                      "must be a JSON Schema object");
    {
        char *txt = cJSON_PrintUnformatted(schema), *gbnf = NULL;
        moe8_error e;
        if (!txt) return oa_bad(err, "response_format", "out of memory");
        if (grammar_from_json_schema(txt, strlen(txt), &gbnf, &e) != MOE8_OK) {
            free(txt);
            return oa_bad(err, "response_format.json_schema.schema", "%s", e.message);
        }
        free(txt);
        rc = oa_attach_grammar(s, j, gbnf, "response_format.json_schema.schema", err);
        free(gbnf);
        return rc;
    }
}

/* Echo: the prompt's text as the answer's start (a string prompt as sent,
 * token ids decoded). */
static int echo_text(srv *s, job *j, moe8_buf *err) {
    size_t need = 0;
    moe8_detokenize(s->tok, j->prompt, (size_t)j->n_prompt, 0, NULL, 0, &need, NULL);
    if (!(j->echo = malloc(need + 1)) ||
        moe8_detokenize(s->tok, j->prompt, (size_t)j->n_prompt, 0, j->echo, need + 1, &need, NULL) != MOE8_OK)
        return oa_bad(err, "echo", "out of memory");
    j->n_echo = need;
    j->n_offset = (int32_t)need; /* the completion's text offsets follow the echo */
    return 0;
}

static int parse_request(srv *s, const cJSON *root, job *j, moe8_buf *err) {
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(root, "stream_options");
    double x;
    int rc, has, has2, echo = 0, ignore_eos = 0;
    int64_t max_tokens;
    if ((rc = oa_check_fields(s, root, j->kind, err))) return rc;
    if (model && !cJSON_IsNull(model)) {
        if (!cJSON_IsString(model)) return oa_bad(err, "model", "'model' must be a string, got %s", oa_type_name(model));
        if (strcmp(model->valuestring, s->model_name)) { /* OpenAI's and vLLM's answer */
            oa_error(err, T_INVALID, "model", "model_not_found", "the model '%s' does not exist; "
                     "this server serves '%s'", model->valuestring, s->model_name);
            return 404;
        }
    }
    if ((rc = oa_get_bool(root, "stream", &j->stream, err))) return rc;
    if (so && !cJSON_IsNull(so)) {
        if (!cJSON_IsObject(so)) return oa_bad(err, "stream_options", "'stream_options' must be an object, got %s", oa_type_name(so));
        if ((rc = oa_get_bool(so, "include_usage", &j->include_usage, err))) return rc;
    }
    if ((rc = oa_get_num(root, "n", 1, SRV_MAX_N, 0, 1, &x, &has, err))) return rc;
    j->n_choices = has ? (int)x : 1;
    if (j->kind == JOB_COMPLETION && (rc = oa_get_bool(root, "echo", &echo, err))) return rc;
    if ((rc = oa_get_bool(root, "ignore_eos", &ignore_eos, err))) return rc;
    j->rq.ignore_eos = ignore_eos;
    if ((rc = parse_sampling(s, root, j, err)) || (rc = parse_stop(root, j, err)) ||
        (rc = parse_logprobs(root, j, err)) || (rc = oa_parse_processors(s, root, j, err)))
        return rc;
    if (j->kind == JOB_CHAT) {
        int open = 0;
        if ((rc = tools_parse(s, root, j, err))) return rc;
        rc = chat_prompt(s, root, 1, 0, &j->prompt, &j->n_prompt, &open, &j->thinking, err);
        j->think = open ? 3 : 0;
    }
    else rc = prompt_ids(s, root, &j->prompt, &j->n_prompt, err);
    if (rc) return rc;
    if (j->n_prompt < 1) return oa_bad(err, j->kind == JOB_CHAT ? "messages" : "prompt", "the prompt is empty");
    if (echo && (rc = echo_text(s, j, err))) return rc;
    if ((rc = oa_get_num(root, "max_tokens", -1e18, 1e18, 0, 1, &x, &has, err))) return rc;
    if (j->kind == JOB_CHAT) {
        double y;
        if ((rc = oa_get_num(root, "max_completion_tokens", -1e18, 1e18, 0, 1, &y, &has2, err))) return rc;
        if (has2) {
            x = y;
            has = 1;
        }
    }
    {
        const char *field = j->kind == JOB_CHAT && has2 ? "max_completion_tokens" : "max_tokens";
        if (has && x < (echo ? 0 : 1)) /* echo with 0: the prompt scored, nothing generated */
            return oa_bad(err, field, "'%s' must be at least %d, got %g", field, echo ? 0 : 1, x);
    }
    /* a prompt the KV cache cannot hold even alone */
    if ((int64_t)j->n_prompt > s->kv_positions)
        return oa_bad(err, j->kind == JOB_CHAT ? "messages" : "prompt", "the prompt has %d tokens; the "
                   "KV cache holds %lld positions in all (--kv-mb): shorten the prompt or start the "
                   "server with a larger --kv-mb", j->n_prompt, (long long)s->kv_positions);
    /* chat's default: the rest of the context, within what the KV cache holds */
    max_tokens = has ? (int64_t)x : j->kind == JOB_CHAT ? (int64_t)s->n_ctx - j->n_prompt : 16;
    if (!has && j->kind == JOB_CHAT && max_tokens > s->kv_positions + 1 - j->n_prompt)
        max_tokens = s->kv_positions + 1 - j->n_prompt;
    if (!has && max_tokens < 1) /* chat's default (the rest of the context) is nothing */
        return oa_bad(err, "messages", "this model's maximum context length is %d tokens; the request "
                   "has %d prompt tokens, which leaves no room for a completion", s->n_ctx, j->n_prompt);
    if ((int64_t)j->n_prompt + max_tokens > s->n_ctx)
        return oa_bad(err, has ? (j->kind == JOB_CHAT && has2 ? "max_completion_tokens" : "max_tokens")
                            : (j->kind == JOB_CHAT ? "messages" : "prompt"),
                   "this model's maximum context length is %d tokens; the request has %d prompt "
                   "tokens and asks for %lld completion tokens (%lld in all)", s->n_ctx,
                   j->n_prompt, (long long)max_tokens, (long long)j->n_prompt + max_tokens);
    /* every position but the last token's lives in the KV cache: a request
     * that cannot fit alone would end early; one that fits waits its turn */
    if ((int64_t)j->n_prompt + (max_tokens ? max_tokens - 1 : 0) > s->kv_positions) {
        const char *field = j->kind == JOB_CHAT && has2 ? "max_completion_tokens" : "max_tokens";
        return oa_bad(err, has ? field : j->kind == JOB_CHAT ? "messages" : "prompt",
                   "the request needs %lld KV cache positions (%d prompt tokens + %lld completion "
                   "tokens - 1), the KV cache holds %lld (--kv-mb): lower '%s' to at most %lld or "
                   "start the server with a larger --kv-mb", (long long)j->n_prompt + max_tokens - 1,
                   j->n_prompt, (long long)max_tokens, (long long)s->kv_positions, field,
                   (long long)(s->kv_positions + 1 - j->n_prompt));
    }
    if (j->rq.min_tokens > max_tokens)
        return oa_bad(err, "min_tokens", "'min_tokens' (%d) must not exceed the completion's "
                      "max_tokens (%lld)", j->rq.min_tokens, (long long)max_tokens);
    j->rq.max_tokens = (int32_t)max_tokens;
    if (echo && j->rq.logprobs >= 0) j->rq.n_prompt_logits = j->n_prompt; /* echo's log-probs */
    if ((rc = parse_grammar(s, root, j, err))) return rc;
    /* thinking on: the model thinks freely, the grammar (response_format, grammar, or required /
     * named tools) constrains what follows the think block, as vLLM's reasoning parsers do */
    if (j->grammar && j->thinking) j->rq.grammar_after = "</think>";
    return 0;
}

/* The body as a JSON object, under the one input policy of every endpoint:
 * valid UTF-8, no NUL, exactly one value with nothing but whitespace after
 * it, no object anywhere holding a key twice (refused, naming the key:
 * parsers disagree on which copy wins), nesting within cJSON's limit. */
static cJSON *parse_object(const char *body, size_t n, moe8_buf *err, int *rc) {
    cJSON *root;
    ptrdiff_t at;
    moe8_error e;
    *rc = 0;
    if ((at = bad_utf8(body, n)) >= 0) {
        *rc = oa_bad(err, NULL, "the body is not valid UTF-8 JSON (byte %td)", at);
        return NULL;
    }
    if ((at = moe8_json_nul_escape(body, n)) >= 0) {
        *rc = oa_bad(err, NULL, "the body holds a NUL character (\\u0000 at byte %td); request text "
                  "cannot contain NUL", at);
        return NULL;
    }
    if (moe8_json_parse(body, n, "the body", &root, &e) != MOE8_OK) {
        *rc = oa_bad(err, NULL, "%s", e.message);
        return NULL;
    }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        *rc = oa_bad(err, NULL, "the body must be a JSON object");
        return NULL;
    }
    return root;
}

static job *job_clone(const job *j, int i);

int oa_parse_completion(srv *s, const char *body, size_t n, job_kind kind, job **out, moe8_buf *err) {
    cJSON *root;
    job *j;
    int rc;
    static uint64_t counter;
    *out = NULL;
    if (!(root = parse_object(body, n, err, &rc))) return rc;
    if (!(j = calloc(1, sizeof *j))) {
        cJSON_Delete(root);
        return oa_bad(err, NULL, "out of memory");
    }
    j->kind = kind;
    j->rq = moe8_request_default();
    if ((rc = parse_request(s, root, j, err))) {
        cJSON_Delete(root);
        job_free(j);
        return rc;
    }
    cJSON_Delete(root);
    j->rq.prompt = j->prompt;
    j->rq.n_prompt = j->n_prompt;
    j->rq.stop = (const char *const *)j->stop_store;
    j->rq.user = j;
    j->created = (int64_t)time(NULL);
    j->id_rng = fresh_seed();
    snprintf(j->id, sizeof j->id, "%s-%llx%06llx", kind == JOB_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)j->created, (unsigned long long)(__atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED) & 0xffffff));
    for (int i = 1; i < j->n_choices; i++) {
        job *k = job_clone(j, i);
        if (!k) {
            job_free(j);
            return oa_bad(err, "n", "out of memory for %d choices", j->n_choices);
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
    k->grammar = NULL;
    k->calls = NULL;
    memset(&k->args, 0, sizeof k->args);
    k->tc = j->tc ? toolcall_new((toolcall_format)j->tool_format) : NULL;
    ok = k->prompt && (!j->rq.n_bias || (k->bias_ids && k->bias)) && (!j->echo || k->echo) &&
         (!j->tc || k->tc);
    for (int s = 0; ok && s < j->rq.n_stop; s++) ok = (k->stop_store[s] = strdup(j->stop_store[s])) != NULL;
    if (!ok) {
        job_free(k);
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

void job_free(job *j) {
    if (!j) return;
    free(j->prompt);
    free(j->bias_ids);
    free(j->bias);
    free(j->echo);
    cJSON_Delete(j->echo_lp);
    grammar_unref(j->grammar);
    tools_free(j);
    for (int i = 0; i < MOE8_MAX_STOP_STRINGS; i++) free(j->stop_store[i]);
    moe8_buf_free(&j->out);
    moe8_buf_free(&j->text);
    moe8_buf_free(&j->reasoning);
    moe8_buf_free(&j->hold);
    cJSON_Delete(j->lp_json);
    free(j);
}

/* ---- tokenize / detokenize / models ------------------------------------------------ */

static void print_json(cJSON *root, moe8_buf *out) {
    char *txt = cJSON_PrintUnformatted(root);
    out->n = 0;
    if (txt) moe8_buf_str(out, txt);
    free(txt);
    cJSON_Delete(root);
}

int oa_tokenize(srv *s, const char *body, size_t n, moe8_buf *out) {
    int rc, gen = 1;
    cJSON *root = parse_object(body, n, out, &rc), *res;
    int32_t *ids = NULL, n_ids = 0;
    if (!root) return rc;
    if (cJSON_GetObjectItemCaseSensitive(root, "messages")) {
        if (!(rc = oa_get_bool(root, "add_generation_prompt", &gen, out)))
            rc = chat_prompt(s, root, gen, 0, &ids, &n_ids, NULL, NULL, out);
    } else {
        rc = prompt_ids(s, root, &ids, &n_ids, out);
    }
    cJSON_Delete(root);
    if (rc) return rc;
    res = cJSON_CreateObject();
    cJSON *arr = cJSON_AddArrayToObject(res, "tokens");
    for (int32_t i = 0; i < n_ids; i++) cJSON_AddItemToArray(arr, cJSON_CreateNumber(ids[i]));
    cJSON_AddNumberToObject(res, "count", n_ids);
    cJSON_AddNumberToObject(res, "max_model_len", s->n_ctx);
    free(ids);
    print_json(res, out);
    return 0;
}

int oa_detokenize(srv *s, const char *body, size_t n, moe8_buf *out) {
    int rc;
    cJSON *root = parse_object(body, n, out, &rc), *res;
    const cJSON *t;
    int32_t *ids = NULL, n_ids = 0;
    size_t need = 0;
    char *text;
    if (!root) return rc;
    t = cJSON_GetObjectItemCaseSensitive(root, "tokens");
    if (!cJSON_IsArray(t)) rc = oa_bad(out, "tokens", "'tokens' must be an array of token ids");
    else if ((rc = ids_from_array(s, t, &ids, &n_ids, "tokens", out))) {
    } else {
        for (int32_t i = 0; i < n_ids && !rc; i++)
            if (!moe8_tokenizer_token_bytes(s->tok, ids[i], NULL, NULL))
                rc = oa_bad(out, "tokens", "'tokens'[%d]: id %d has no text in the tokenizer", i, ids[i]);
    }
    cJSON_Delete(root);
    if (rc) {
        free(ids);
        return rc;
    }
    moe8_detokenize(s->tok, ids, (size_t)n_ids, 0, NULL, 0, &need, NULL);
    if (!(text = malloc(need + 1)) ||
        moe8_detokenize(s->tok, ids, (size_t)n_ids, 0, text, need + 1, &need, NULL) != MOE8_OK) {
        free(text);
        free(ids);
        return oa_bad(out, NULL, "out of memory");
    }
    free(ids);
    res = cJSON_CreateObject();
    oa_json_text(res, "prompt", text, need);
    free(text);
    print_json(res, out);
    return 0;
}

static cJSON *model_object(srv *s) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", s->model_name);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)time(NULL));
    cJSON_AddStringToObject(m, "owned_by", "moe8");
    cJSON_AddNumberToObject(m, "max_model_len", s->n_ctx);
    return m;
}

void oa_models(srv *s, moe8_buf *out) {
    cJSON *root = cJSON_CreateObject(), *data = cJSON_AddArrayToObject(root, "data");
    cJSON_AddStringToObject(root, "object", "list");
    cJSON_AddItemToArray(data, model_object(s));
    print_json(root, out);
}

void oa_model(srv *s, moe8_buf *out) { print_json(model_object(s), out); }

/* ---- output: reasoning split ------------------------------------------------------- */

/* Longest tail of b[0..n) that is a proper prefix of tag. */
static size_t tag_tail(const char *b, size_t n, const char *tag) {
    size_t t = strlen(tag);
    for (size_t k = t - 1 < n ? t - 1 : n; k > 0; k--)
        if (!memcmp(b + n - k, tag, k)) return k;
    return 0;
}

/* Split new chat text into content and reasoning (appended); `final`
 * releases what was held. */
static void think_split(job *j, const char *txt, size_t n, moe8_buf *content, moe8_buf *reason, int final) {
    moe8_buf in = {0};
    size_t at = 0;
    moe8_buf_add(&in, j->hold.p ? j->hold.p : "", j->hold.n);
    moe8_buf_add(&in, txt, n);
    j->hold.n = 0;
    if (j->think == 3) { /* opened by the prompt: a <think> the model writes anyway is dropped */
        const size_t m = in.n < 7 ? in.n : 7;
        if (!memcmp(in.p, "<think>", m) && m < 7 && !final) { /* undecided: hold it */
            moe8_buf_add(&j->hold, in.p, in.n);
            moe8_buf_free(&in);
            return;
        }
        if (m == 7 && !memcmp(in.p, "<think>", 7)) at = 7;
        j->think = 1;
    }
    while (at < in.n) {
        const char *tag = j->think == 1 ? "</think>" : "<think>";
        const char *rest = in.p + at,
                   *hit = j->think == 2 ? NULL : memmem(rest, in.n - at, tag, strlen(tag));
        moe8_buf *dst = j->think == 1 ? reason : content;
        size_t len = in.n - at, keep;
        if (hit) {
            moe8_buf_add(dst, rest, (size_t)(hit - rest));
            at += (size_t)(hit - rest) + strlen(tag);
            j->think++;
            continue;
        }
        keep = j->think == 2 || final ? 0 : tag_tail(rest, len, tag);
        moe8_buf_add(dst, rest, len - keep);
        moe8_buf_add(&j->hold, rest + len - keep, keep);
        break;
    }
    moe8_buf_free(&in);
}

/* ---- output: JSON pieces ------------------------------------------------------------ */

static cJSON *token_entry(srv *s, int32_t tok, float lp, int chat) {
    size_t nb = 0;
    const char *b = moe8_tokenizer_token_bytes(s->tok, tok, &nb, NULL);
    cJSON *e = cJSON_CreateObject();
    oa_json_text(e, "token", b ? b : "", b ? nb : 0);
    cJSON_AddNumberToObject(e, "logprob", lp);
    if (chat) {
        cJSON *bytes = cJSON_AddArrayToObject(e, "bytes");
        for (size_t i = 0; i < nb; i++) cJSON_AddItemToArray(bytes, cJSON_CreateNumber((unsigned char)b[i]));
    }
    return e;
}

/* Log-probs of one token, appended to `lp` (chat: {content: [...]};
 * completions: {tokens, token_logprobs, top_logprobs, text_offset}). */
static void add_logprobs(srv *s, job *j, cJSON *lp, const moe8_event *e) {
    if (j->kind == JOB_CHAT) {
        cJSON *content = cJSON_GetObjectItem(lp, "content"), *ent = token_entry(s, e->token, e->logprob, 1);
        cJSON *top = cJSON_AddArrayToObject(ent, "top_logprobs");
        for (int32_t k = 0; k < e->n_top; k++)
            cJSON_AddItemToArray(top, token_entry(s, e->top[k].token, e->top[k].logprob, 1));
        cJSON_AddItemToArray(content, ent);
        return;
    }
    /* {token text: log-prob} of the alternatives, the first of equal texts kept;
     * written as JSON text, as the keys may hold NUL */
    cJSON *ent = token_entry(s, e->token, e->logprob, 0);
    moe8_buf top = {0}, key = {0};
    size_t keys[MOE8_MAX_LOGPROBS + 1][2];
    int n_keys = 0;
    cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "tokens"), cJSON_Duplicate(cJSON_GetObjectItem(ent, "token"), 1));
    cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "token_logprobs"), cJSON_CreateNumber(e->logprob));
    moe8_buf_add(&top, "{", 1);
    for (int32_t k = 0; k < e->n_top && k <= MOE8_MAX_LOGPROBS; k++) {
        size_t nb = 0, at = key.n;
        const char *b = moe8_tokenizer_token_bytes(s->tok, e->top[k].token, &nb, NULL);
        int seen = 0;
        moe8_buf_json_str(&key, b ? b : "", b ? nb : 0, MOE8_JSON_LOSSY);
        for (int q = 0; q < n_keys && !seen; q++)
            seen = keys[q][1] == key.n - at && !memcmp(key.p + keys[q][0], key.p + at, key.n - at);
        if (seen) continue;
        keys[n_keys][0] = at, keys[n_keys][1] = key.n - at, n_keys++;
        {
            cJSON *num = cJSON_CreateNumber(e->top[k].logprob);
            char *txt = cJSON_PrintUnformatted(num);
            if (n_keys > 1) moe8_buf_add(&top, ",", 1);
            moe8_buf_add(&top, key.p + at, key.n - at);
            moe8_buf_add(&top, ":", 1);
            moe8_buf_str(&top, txt ? txt : "0");
            free(txt);
            cJSON_Delete(num);
        }
    }
    moe8_buf_add(&top, "}", 1);
    cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "top_logprobs"), cJSON_CreateRaw(top.p));
    moe8_buf_free(&top);
    moe8_buf_free(&key);
    cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "text_offset"), cJSON_CreateNumber(j->n_offset));
    cJSON_Delete(ent);
}

static cJSON *new_logprobs(const job *j) {
    cJSON *lp = cJSON_CreateObject();
    if (j->kind == JOB_CHAT) {
        cJSON_AddArrayToObject(lp, "content");
    } else {
        cJSON_AddArrayToObject(lp, "tokens");
        cJSON_AddArrayToObject(lp, "token_logprobs");
        cJSON_AddArrayToObject(lp, "top_logprobs");
        cJSON_AddArrayToObject(lp, "text_offset");
    }
    return lp;
}

static cJSON *envelope(srv *s, const job *j, const char *object) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "id", j->id);
    cJSON_AddStringToObject(root, "object", object);
    cJSON_AddNumberToObject(root, "created", (double)j->created);
    cJSON_AddStringToObject(root, "model", s->model_name);
    return root;
}

static void sse(job *j, cJSON *root) {
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
static void stream_chunk(srv *s, job *j, const char *content, size_t nc, const char *reason, size_t nr,
                         const char *finish, cJSON *lp, cJSON *tool_deltas) {
    const int chat = j->kind == JOB_CHAT;
    cJSON *root = envelope(s, j, chat ? "chat.completion.chunk" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(root, "choices"), *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", j->index);
    if (chat) {
        cJSON *d = cJSON_AddObjectToObject(c, "delta");
        if (nr) oa_json_text(d, "reasoning_content", reason, nr);
        if (nc || (!nr && !finish && !tool_deltas)) oa_json_text(d, "content", content ? content : "", nc);
        if (tool_deltas) cJSON_AddItemToObject(d, "tool_calls", tool_deltas);
    } else {
        oa_json_text(c, "text", content ? content : "", nc);
    }
    if (lp) cJSON_AddItemToObject(c, "logprobs", lp);
    else cJSON_AddNullToObject(c, "logprobs");
    if (finish) cJSON_AddStringToObject(c, "finish_reason", finish);
    else cJSON_AddNullToObject(c, "finish_reason");
    cJSON_AddItemToArray(choices, c);
    sse(j, root);
}

/* ---- output: the engine's callbacks ------------------------------------------------- */

void oa_on_start(srv *s, job *j) {
    if (j->stream && j->kind == JOB_CHAT) {
        cJSON *root = envelope(s, j, "chat.completion.chunk");
        cJSON *c = cJSON_CreateObject(), *d = cJSON_AddObjectToObject(c, "delta");
        cJSON_AddNumberToObject(c, "index", j->index);
        cJSON_AddStringToObject(d, "role", "assistant");
        cJSON_AddStringToObject(d, "content", "");
        cJSON_AddNullToObject(c, "logprobs");
        cJSON_AddNullToObject(c, "finish_reason");
        cJSON_AddItemToArray(cJSON_AddArrayToObject(root, "choices"), c);
        sse(j, root);
    }
}

/* Echo's prompt log-probs (completions): its first token has none. */
static cJSON *echo_logprobs(srv *s, job *j) {
    if (!j->echo_lp) {
        cJSON *lp = new_logprobs(j);
        size_t nb = 0;
        const char *b = moe8_tokenizer_token_bytes(s->tok, j->prompt[0], &nb, NULL);
        cJSON *tok = cJSON_CreateObject();
        oa_json_text(tok, "t", b ? b : "", b ? nb : 0);
        cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "tokens"), cJSON_Duplicate(cJSON_GetObjectItem(tok, "t"), 1));
        cJSON_Delete(tok);
        cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "token_logprobs"), cJSON_CreateNull());
        cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "top_logprobs"), cJSON_CreateNull());
        cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "text_offset"), cJSON_CreateNumber(0));
        j->echo_lp = lp;
        j->echo_off = (int32_t)nb;
    }
    return j->echo_lp;
}

void oa_on_prompt_logits(srv *s, job *j, const moe8_event *e) {
    moe8_event at;
    size_t nb = 0;
    if (!j->echo || j->rq.logprobs < 0 || e->pos + 1 >= j->n_prompt) return;
    echo_logprobs(s, j);
    at = *e; /* the entry of the prompt token these logits score, at its offset in the echo */
    at.token = j->prompt[e->pos + 1];
    {
        const int32_t keep = j->n_offset;
        j->n_offset = j->echo_off;
        add_logprobs(s, j, j->echo_lp, &at);
        j->n_offset = keep;
    }
    moe8_tokenizer_token_bytes(s->tok, at.token, &nb, NULL);
    j->echo_off += (int32_t)nb;
}

/* A stream with echo: the prompt's text (and log-probs) first, once. */
static void echo_chunk(srv *s, job *j) {
    cJSON *lp = NULL;
    if (!j->echo || !j->stream || j->echo_sent) return;
    j->echo_sent = 1;
    if (j->rq.logprobs >= 0) {
        lp = echo_logprobs(s, j);
        j->echo_lp = NULL;
    }
    stream_chunk(s, j, j->echo, j->n_echo, NULL, 0, NULL, lp, NULL);
}

/* New text of the job (chat: split into reasoning and content, the content
 * through the tool-call parser); streamed at once or kept. `finish` (the
 * last call): "stop" becomes "tool_calls" when the output made a call. */
static void emit_text(srv *s, job *j, const char *txt, size_t n, const moe8_event *tok_ev,
                      int final, const char *finish) {
    moe8_buf content = {0}, reason = {0};
    cJSON *lp = NULL, *deltas = NULL;
    echo_chunk(s, j);
    if (j->kind == JOB_CHAT) think_split(j, txt, n, &content, &reason, final);
    else moe8_buf_add(&content, txt, n);
    if (j->tc) { /* only what is not a call is shown */
        moe8_buf shown = {0};
        deltas = tools_feed(s, j, content.p, content.n, final, &shown);
        moe8_buf_free(&content);
        content = shown;
        if (finish && j->n_calls_ok && !strcmp(finish, "stop")) finish = "tool_calls";
    }
    if (tok_ev && j->rq.logprobs >= 0) {
        if (j->stream) lp = new_logprobs(j);
        else if (!j->lp_json) j->lp_json = new_logprobs(j);
        add_logprobs(s, j, lp ? lp : (cJSON *)j->lp_json, tok_ev);
    }
    j->n_offset += (int32_t)n;
    if (j->stream) {
        if (content.n || reason.n || lp || finish || deltas)
            stream_chunk(s, j, content.p, content.n, reason.p, reason.n, finish, lp, deltas);
    } else {
        moe8_buf_add(&j->text, content.p ? content.p : "", content.n);
        moe8_buf_add(&j->reasoning, reason.p ? reason.p : "", reason.n);
    }
    moe8_buf_free(&content);
    moe8_buf_free(&reason);
}

void oa_on_token(srv *s, job *j, const moe8_event *e) {
    j->n_gen++;
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

/* A non-stream choice: its object as JSON text in j->out (oa_response puts
 * the choices of a request together). */
static void whole_choice(srv *s, job *j, const char *finish) {
    const int chat = j->kind == JOB_CHAT;
    cJSON *c = cJSON_CreateObject();
    (void)s;
    cJSON_AddNumberToObject(c, "index", j->index);
    if (chat) {
        cJSON *m = cJSON_AddObjectToObject(c, "message");
        cJSON_AddStringToObject(m, "role", "assistant");
        if (j->calls && cJSON_GetArraySize(j->calls) && !j->text.n) cJSON_AddNullToObject(m, "content");
        else oa_json_text(m, "content", j->text.p ? j->text.p : "", j->text.n);
        if (j->calls && cJSON_GetArraySize(j->calls)) {
            cJSON_AddItemToObject(m, "tool_calls", j->calls);
            j->calls = NULL;
        }
        if (j->reasoning.n) oa_json_text(m, "reasoning_content", j->reasoning.p, j->reasoning.n);
        else cJSON_AddNullToObject(m, "reasoning_content");
    } else {
        moe8_buf t = {0};
        if (j->echo) moe8_buf_add(&t, j->echo, j->n_echo);
        moe8_buf_add(&t, j->text.p ? j->text.p : "", j->text.n);
        oa_json_text(c, "text", t.p ? t.p : "", t.n);
        moe8_buf_free(&t);
    }
    if (j->echo_lp || j->lp_json) { /* echo's prompt entries, then the completion's */
        cJSON *lp = j->echo_lp ? j->echo_lp : j->lp_json;
        if (j->echo_lp && j->lp_json) {
            static const char *const keys[] = {"tokens", "token_logprobs", "top_logprobs", "text_offset"};
            for (int k = 0; k < 4; k++) {
                cJSON *from = cJSON_GetObjectItem(j->lp_json, keys[k]), *to = cJSON_GetObjectItem(lp, keys[k]), *it;
                while ((it = from->child)) cJSON_AddItemToArray(to, cJSON_DetachItemViaPointer(from, it));
            }
            cJSON_Delete(j->lp_json);
        }
        cJSON_AddItemToObject(c, "logprobs", lp);
        j->lp_json = j->echo_lp = NULL;
    } else {
        cJSON_AddNullToObject(c, "logprobs");
    }
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

void oa_response(srv *s, job *const *jobs, int n, moe8_buf *out) {
    const job *j = jobs[0];
    cJSON *root = envelope(s, j, j->kind == JOB_CHAT ? "chat.completion" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(root, "choices");
    char *txt;
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(choices, cJSON_CreateRaw(jobs[i]->out.p ? jobs[i]->out.p : "{}"));
    cJSON_AddItemToObject(root, "usage", usage_of(jobs, n));
    txt = cJSON_PrintUnformatted(root);
    out->n = 0;
    if (txt) moe8_buf_str(out, txt);
    free(txt);
    cJSON_Delete(root);
}

void oa_stream_tail(srv *s, job *const *jobs, int n, moe8_buf *out) {
    const job *j = jobs[0];
    if (j->include_usage) {
        cJSON *root = envelope(s, j, j->kind == JOB_CHAT ? "chat.completion.chunk" : "text_completion");
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

void oa_on_finish(srv *s, job *j, const moe8_event *e) {
    /* parallel_tool_calls false: the engine ended it after the first call */
    const char *finish = j->tool_stop && (e->finish == MOE8_FINISH_CANCELLED || e->finish == MOE8_FINISH_STOP)
                             ? "tool_calls" : finish_name(e->finish);
    j->n_cached = e->n_cached;
    if (e->finish == MOE8_FINISH_CONTEXT) /* "length" for the client, the reason for the log */
        j->finish_note = "finish_reason=length: the context or the KV cache is full";
    if (e->finish == MOE8_FINISH_ERROR) {
        moe8_buf body = {0};
        oa_error(&body, "server_error", NULL, NULL, "the request failed: %s",
                 e->message ? e->message : moe8_status_str(e->status));
        if (j->stream) { /* the [DONE] comes with the request's tail (oa_stream_tail) */
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
    if (!j->stream) whole_choice(s, j, j->n_calls_ok && !strcmp(finish, "stop") ? "tool_calls" : finish);
}
