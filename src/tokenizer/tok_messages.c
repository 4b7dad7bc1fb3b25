/*
 * tok_messages.c — an OpenAI chat conversation (`messages`, `tools`,
 * `documents`) validated and rewritten into what a chat template gets, as
 * vLLM hands it to transformers' apply_chat_template
 * (vllm/entrypoints/chat_utils.py: _parse_chat_message_content,
 * _postprocess_messages; the request models of its protocol.py). The
 * contract, field by field, is at moe8_chat_messages_normalize in moe8.h;
 * tests/data/jinja/make_tool_goldens.py restates it in Python and
 * tests/test_chat_messages.c holds the two to each other. One
 * normalisation for the library, `moe8 tokenize --messages` and the server
 * (which calls moe8_chat_messages_normalize_cjson on the request it has parsed, for
 * OpenAI's error `param`).
 *
 * Each message becomes a new object with its keys in vLLM's order (role,
 * content, tool_calls, reasoning, reasoning_content | tool_call_id, name):
 * templates that print a message or iterate over it see what they would see
 * under vLLM. Where vLLM is lenient without telling (a text part without
 * text is skipped, arguments that are not JSON become {}) moe8 refuses,
 * naming the field: a client learns of its mistake.
 *
 * Does not: render (tok_template.c does), or decide tool_choice (the
 * server).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "io/json_util.h"
#include "tokenizer/tok_messages.h"
#include "tokenizer/tokenizer.h"

typedef struct {
    tok_messages_error *e;
    int rc;         /* 0, or the status of the first failure */
} chat_ctx;

static int fail(chat_ctx *c, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(chat_ctx *c, const char *param, const char *fmt, ...) {
    va_list ap;
    if (!c->rc) {
        va_start(ap, fmt);
        vsnprintf(c->e->message, sizeof c->e->message, fmt, ap);
        va_end(ap);
        snprintf(c->e->param, sizeof c->e->param, "%s", param);
        c->rc = MOE8_ERR_INVALID_ARG;
    }
    return c->rc;
}

static int oom(chat_ctx *c) {
    if (!c->rc) {
        snprintf(c->e->message, sizeof c->e->message, "out of memory");
        c->e->param[0] = '\0';
        c->rc = MOE8_ERR_NOMEM;
    }
    return c->rc;
}

static int absent(const cJSON *v) { return !v || cJSON_IsNull(v); }

static const cJSON *field(const cJSON *o, const char *key) {
    return cJSON_GetObjectItemCaseSensitive(o, key);
}

/* o[key] = v (taken), or out of memory. */
static int put(chat_ctx *c, cJSON *o, const char *key, cJSON *v) {
    if (!v || !cJSON_AddItemToObject(o, key, v)) return cJSON_Delete(v), oom(c);
    return 0;
}

static int put_copy(chat_ctx *c, cJSON *o, const char *key, const cJSON *v) {
    return put(c, o, key, cJSON_Duplicate(v, 1));
}

/* ---- messages ---------------------------------------------------------------------- */

/* content: a string; null/absent (assistant only) -> ""; text parts joined by "\n". */
static int content_of(chat_ctx *c, const cJSON *m, int i, int assistant, cJSON *out) {
    const cJSON *v = field(m, "content"), *part;
    char param[96];
    moe8_buf text = {0};
    int k = 0;
    snprintf(param, sizeof param, "messages[%d].content", i);
    if (absent(v)) {
        if (!assistant) return fail(c, param, "'%s' is required", param);
        return put(c, out, "content", cJSON_CreateString(""));
    }
    if (cJSON_IsString(v)) return put_copy(c, out, "content", v);
    if (!cJSON_IsArray(v))
        return fail(c, param, "'%s' must be a string or an array of text parts, got %s", param,
                    moe8_json_type_name(v));
    cJSON_ArrayForEach(part, v) {
        const cJSON *ty = field(part, "type"), *tx = field(part, "text");
        char p2[128];
        snprintf(p2, sizeof p2, "%s[%d]", param, k);
        if (!cJSON_IsObject(part)) {
            moe8_buf_free(&text);
            return fail(c, p2, "'%s' must be an object {\"type\": \"text\", \"text\": string}, got %s",
                        p2, moe8_json_type_name(part));
        }
        if (!cJSON_IsString(ty) || strcmp(ty->valuestring, "text")) {
            snprintf(p2, sizeof p2, "%s[%d].type", param, k);
            moe8_buf_free(&text);
            if (!cJSON_IsString(ty)) return fail(c, p2, "'%s' must be \"text\", got %s", p2, moe8_json_type_name(ty));
            return fail(c, p2, "'%s' is \"%.40s\": only text parts are supported", p2, ty->valuestring);
        }
        if (!cJSON_IsString(tx)) {
            snprintf(p2, sizeof p2, "%s[%d].text", param, k);
            moe8_buf_free(&text);
            return fail(c, p2, "'%s' must be a string, got %s", p2, moe8_json_type_name(tx));
        }
        if ((k && moe8_buf_add(&text, "\n", 1)) || moe8_buf_str(&text, tx->valuestring)) {
            moe8_buf_free(&text);
            return oom(c);
        }
        k++;
    }
    put(c, out, "content", cJSON_CreateString(text.p ? text.p : ""));
    moe8_buf_free(&text);
    return c->rc;
}

/* function.arguments: its JSON text parsed ("" -> {}), or an object as it is. */
static cJSON *arguments_of(chat_ctx *c, const cJSON *a, const char *param) {
    cJSON *j = NULL;
    moe8_error e;
    const char *s;
    if (absent(a)) return cJSON_CreateObject();
    if (cJSON_IsObject(a)) return cJSON_Duplicate(a, 1);
    if (!cJSON_IsString(a)) {
        fail(c, param, "'%s' must be a string holding a JSON object, got %s", param, moe8_json_type_name(a));
        return NULL;
    }
    for (s = a->valuestring; *s == ' ' || *s == '\t' || *s == '\n' || *s == '\r'; s++) {}
    if (!*s) return cJSON_CreateObject();
    if (moe8_json_nul_escape(a->valuestring, strlen(a->valuestring)) >= 0) {
        fail(c, param, "'%s' holds a \\u0000 escape", param);
        return NULL;
    }
    if (moe8_json_parse(a->valuestring, strlen(a->valuestring), param, &j, &e) != MOE8_OK) {
        fail(c, param, "%s (it must be the JSON text of the arguments)", e.message);
        return NULL;
    }
    return j;
}

static int tool_call_of(chat_ctx *c, const cJSON *tc, const char *param, cJSON *list) {
    const cJSON *id = field(tc, "id"), *ty = field(tc, "type"), *fn = field(tc, "function"), *name;
    cJSON *call, *f, *args;
    char p2[160];
    if (!cJSON_IsObject(tc)) return fail(c, param, "'%s' must be an object, got %s", param, moe8_json_type_name(tc));
    if (!absent(id) && !cJSON_IsString(id)) {
        snprintf(p2, sizeof p2, "%s.id", param);
        return fail(c, p2, "'%s' must be a string, got %s", p2, moe8_json_type_name(id));
    }
    if (!absent(ty) && (!cJSON_IsString(ty) || strcmp(ty->valuestring, "function"))) {
        snprintf(p2, sizeof p2, "%s.type", param);
        return fail(c, p2, "'%s' must be \"function\"", p2);
    }
    snprintf(p2, sizeof p2, "%s.function", param);
    if (!cJSON_IsObject(fn)) return fail(c, p2, "'%s' must be an object {name, arguments}, got %s", p2,
                                         fn ? moe8_json_type_name(fn) : "nothing");
    name = field(fn, "name");
    snprintf(p2, sizeof p2, "%s.function.name", param);
    if (!cJSON_IsString(name)) return fail(c, p2, "'%s' must be a string, got %s", p2, name ? moe8_json_type_name(name) : "nothing");
    snprintf(p2, sizeof p2, "%s.function.arguments", param);
    if (!(args = arguments_of(c, field(fn, "arguments"), p2))) return c->rc ? c->rc : oom(c);
    if (!(call = cJSON_CreateObject()) || !cJSON_AddItemToArray(list, call)) {
        cJSON_Delete(args);
        cJSON_Delete(call);
        return oom(c);
    }
    if ((cJSON_IsString(id) && put_copy(c, call, "id", id)) ||
        !(f = cJSON_AddObjectToObject(call, "function"))) {
        cJSON_Delete(args);
        return oom(c);
    }
    if (put(c, f, "arguments", args) || put_copy(c, f, "name", name) ||
        put(c, call, "type", cJSON_CreateString("function")))
        return c->rc;
    return 0;
}

static int tool_calls_of(chat_ctx *c, const cJSON *m, int i, cJSON *out) {
    const cJSON *v = field(m, "tool_calls"), *tc;
    cJSON *list;
    char param[96];
    int k = 0;
    snprintf(param, sizeof param, "messages[%d].tool_calls", i);
    if (absent(v)) return 0;
    if (!cJSON_IsArray(v)) return fail(c, param, "'%s' must be an array, got %s", param, moe8_json_type_name(v));
    if (!cJSON_GetArraySize(v)) return 0; /* vLLM drops [] so templates take the plain path */
    if (!(list = cJSON_AddArrayToObject(out, "tool_calls"))) return oom(c);
    cJSON_ArrayForEach(tc, v) {
        char p2[128];
        snprintf(p2, sizeof p2, "%s[%d]", param, k++);
        if (tool_call_of(c, tc, p2, list)) return c->rc;
    }
    return 0;
}

/* An optional string field: copied when a string (or, with keep_null, null too). */
static int opt_string(chat_ctx *c, const cJSON *m, int i, const char *key, int keep_null, cJSON *out) {
    const cJSON *v = field(m, key);
    char param[96];
    if (!v || (cJSON_IsNull(v) && !keep_null)) return 0;
    snprintf(param, sizeof param, "messages[%d].%s", i, key);
    if (!cJSON_IsString(v) && !cJSON_IsNull(v))
        return fail(c, param, "'%s' must be a string, got %s", param, moe8_json_type_name(v));
    return put_copy(c, out, key, v);
}

static int message_of(chat_ctx *c, const cJSON *m, int i, cJSON *list) {
    static const char *const ROLES[] = {"system", "developer", "user", "assistant", "tool", NULL};
    const cJSON *role = field(m, "role");
    cJSON *out;
    char param[64];
    int r = 0, assistant;
    if (!cJSON_IsObject(m)) {
        snprintf(param, sizeof param, "messages[%d]", i);
        return fail(c, param, "'%s' must be an object, got %s", param, moe8_json_type_name(m));
    }
    snprintf(param, sizeof param, "messages[%d].role", i);
    while (cJSON_IsString(role) && ROLES[r] && strcmp(role->valuestring, ROLES[r])) r++;
    if (!cJSON_IsString(role) || !ROLES[r])
        return fail(c, param, "'%s' must be \"system\", \"developer\", \"user\", \"assistant\" or "
                    "\"tool\"", param);
    assistant = !strcmp(role->valuestring, "assistant");
    if (!(out = cJSON_CreateObject()) || !cJSON_AddItemToArray(list, out)) return cJSON_Delete(out), oom(c);
    /* OpenAI's "developer" is the system message of newer models; the templates know "system" */
    if (put(c, out, "role", cJSON_CreateString(r == 1 ? "system" : role->valuestring)) ||
        content_of(c, m, i, assistant, out))
        return c->rc;
    if (assistant) {
        const cJSON *rs = field(m, "reasoning");
        const char *key = absent(rs) ? "reasoning_content" : "reasoning";
        if (tool_calls_of(c, m, i, out)) return c->rc;
        rs = field(m, key);
        snprintf(param, sizeof param, "messages[%d].%s", i, key);
        if (!absent(rs) && !cJSON_IsString(rs))
            return fail(c, param, "'%s' must be a string, got %s", param, moe8_json_type_name(rs));
        if (!absent(rs) && (put_copy(c, out, "reasoning", rs) || put_copy(c, out, "reasoning_content", rs)))
            return c->rc;
    } else if (!strcmp(role->valuestring, "tool") && opt_string(c, m, i, "tool_call_id", 1, out)) {
        return c->rc;
    }
    return opt_string(c, m, i, "name", 0, out);
}

/* ---- tools and documents --------------------------------------------------------------- */

/* dst gets src's keys that are not in `skip` (NULL-terminated), in src's order. */
static int copy_others(chat_ctx *c, cJSON *dst, const cJSON *src, const char *const *skip) {
    const cJSON *e;
    cJSON_ArrayForEach(e, src) {
        int k = 0;
        while (skip[k] && strcmp(skip[k], e->string)) k++;
        if (!skip[k] && put_copy(c, dst, e->string, e)) return c->rc;
    }
    return 0;
}

static int tool_of(chat_ctx *c, const cJSON *t, int k, cJSON *list) {
    static const char *const TOOL_KEYS[] = {"type", "function", NULL},
                             *const FN_KEYS[] = {"name", "description", "parameters", NULL};
    const cJSON *ty = field(t, "type"), *fn = field(t, "function"), *name, *desc, *params;
    cJSON *out, *f;
    char param[96];
    snprintf(param, sizeof param, "tools[%d]", k);
    if (!cJSON_IsObject(t)) return fail(c, param, "'%s' must be an object, got %s", param, moe8_json_type_name(t));
    snprintf(param, sizeof param, "tools[%d].type", k);
    if (!absent(ty) && (!cJSON_IsString(ty) || strcmp(ty->valuestring, "function")))
        return fail(c, param, "'%s' must be \"function\" (the only tool type supported)", param);
    snprintf(param, sizeof param, "tools[%d].function", k);
    if (!cJSON_IsObject(fn))
        return fail(c, param, "'%s' must be an object {name, description, parameters}, got %s", param,
                    fn ? moe8_json_type_name(fn) : "nothing");
    name = field(fn, "name");
    desc = field(fn, "description");
    params = field(fn, "parameters");
    snprintf(param, sizeof param, "tools[%d].function.name", k);
    if (!cJSON_IsString(name) || !name->valuestring[0])
        return fail(c, param, "'%s' must be a non-empty string", param);
    snprintf(param, sizeof param, "tools[%d].function.description", k);
    if (!absent(desc) && !cJSON_IsString(desc))
        return fail(c, param, "'%s' must be a string, got %s", param, moe8_json_type_name(desc));
    snprintf(param, sizeof param, "tools[%d].function.parameters", k);
    if (!absent(params) && !cJSON_IsObject(params))
        return fail(c, param, "'%s' must be a JSON Schema object, got %s", param, moe8_json_type_name(params));
    if (!(out = cJSON_CreateObject()) || !cJSON_AddItemToArray(list, out)) return cJSON_Delete(out), oom(c);
    if (put(c, out, "type", cJSON_CreateString("function")) || !(f = cJSON_AddObjectToObject(out, "function")))
        return oom(c);
    if (put_copy(c, f, "name", name) ||
        put(c, f, "description", desc ? cJSON_Duplicate(desc, 1) : cJSON_CreateNull()) ||
        put(c, f, "parameters", params ? cJSON_Duplicate(params, 1) : cJSON_CreateNull()) ||
        copy_others(c, f, fn, FN_KEYS))
        return c->rc;
    return copy_others(c, out, t, TOOL_KEYS);
}

static int documents_ok(chat_ctx *c, const cJSON *docs) {
    const cJSON *d, *v;
    int k = 0;
    if (!cJSON_IsArray(docs))
        return fail(c, "documents", "'documents' must be an array of objects, got %s", moe8_json_type_name(docs));
    cJSON_ArrayForEach(d, docs) {
        char param[64];
        snprintf(param, sizeof param, "documents[%d]", k++);
        if (!cJSON_IsObject(d)) return fail(c, param, "'%s' must be an object, got %s", param, moe8_json_type_name(d));
        cJSON_ArrayForEach(v, d) {
            if (!cJSON_IsString(v))
                return fail(c, param, "'%s'.%s must be a string, got %s", param, v->string, moe8_json_type_name(v));
        }
    }
    return 0;
}

/* ---- the conversation ---------------------------------------------------------------------- */

static int print_to(chat_ctx *c, const cJSON *j, char **out) {
    char *p = cJSON_PrintUnformatted(j);
    if (!p) return oom(c);
    /* cJSON_free and free are the same allocator unless hooks are set; hand back malloc'd text */
    if (!(*out = strdup(p))) oom(c);
    cJSON_free(p);
    return c->rc;
}

moe8_status moe8_chat_messages_normalize_cjson(const cJSON *messages, const cJSON *tools, const cJSON *documents,
                                   char **messages_json, char **tools_json, char **documents_json,
                                   tok_messages_error *e) {
    chat_ctx c = {e, 0};
    cJSON *msgs = NULL, *tl = NULL;
    const cJSON *m;
    int i = 0;
    e->code = MOE8_OK;
    e->param[0] = e->message[0] = '\0';
    *messages_json = *tools_json = *documents_json = NULL;
    if (!messages) return e->code = fail(&c, "messages", "'messages' is required");
    if (!cJSON_IsArray(messages))
        return e->code = fail(&c, "messages", "'messages' must be an array, got %s", moe8_json_type_name(messages));
    if (!cJSON_GetArraySize(messages)) return e->code = fail(&c, "messages", "'messages' must not be empty");
    if (!(msgs = cJSON_CreateArray())) return e->code = oom(&c);
    cJSON_ArrayForEach(m, messages) {
        if (message_of(&c, m, i++, msgs)) goto done;
    }
    if (!absent(tools)) {
        const cJSON *t;
        int k = 0;
        if (!cJSON_IsArray(tools)) {
            fail(&c, "tools", "'tools' must be an array, got %s", moe8_json_type_name(tools));
            goto done;
        }
        if (!(tl = cJSON_CreateArray())) {
            oom(&c);
            goto done;
        }
        cJSON_ArrayForEach(t, tools) {
            if (tool_of(&c, t, k++, tl)) goto done;
        }
    }
    if (!absent(documents) && documents_ok(&c, documents)) goto done;
    if (print_to(&c, msgs, messages_json) || (tl && print_to(&c, tl, tools_json)) ||
        (!absent(documents) && print_to(&c, documents, documents_json)))
        goto done;
done:
    cJSON_Delete(msgs);
    cJSON_Delete(tl);
    if (c.rc) {
        free(*messages_json);
        free(*tools_json);
        free(*documents_json);
        *messages_json = *tools_json = *documents_json = NULL;
    }
    return e->code = (moe8_status)c.rc;
}

/* text (NULL: absent) as JSON into *out; `what` names it in errors. */
static moe8_status parse_part(const char *text, const char *what, cJSON **out, moe8_error *err) {
    ptrdiff_t at;
    *out = NULL;
    if (!text) return MOE8_OK;
    if ((at = moe8_json_nul_escape(text, strlen(text))) >= 0)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, at, "'%s' holds a \\u0000 escape (byte %td): text cannot "
                         "contain NUL", what, at);
    return moe8_json_parse(text, strlen(text), what, out, err);
}

moe8_status moe8_chat_messages_normalize(const char *messages_json, const char *tools_json,
                                         const char *documents_json, char **messages_out, char **tools_out,
                                         char **documents_out, moe8_error *err) {
    cJSON *m = NULL, *t = NULL, *d = NULL;
    tok_messages_error e;
    moe8_status st;
    *messages_out = *tools_out = *documents_out = NULL;
    if (!messages_json) return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "'messages' is required");
    if ((st = parse_part(messages_json, "messages", &m, err)) == MOE8_OK &&
        (st = parse_part(tools_json, "tools", &t, err)) == MOE8_OK &&
        (st = parse_part(documents_json, "documents", &d, err)) == MOE8_OK) {
        st = moe8_chat_messages_normalize_cjson(m, t, d, messages_out, tools_out, documents_out, &e);
        if (st != MOE8_OK) moe8_fail(err, st, -1, "%s", e.message);
    }
    cJSON_Delete(m);
    cJSON_Delete(t);
    cJSON_Delete(d);
    return st;
}
