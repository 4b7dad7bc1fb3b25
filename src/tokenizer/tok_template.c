/*
 * tok_template.c — chat templates as the public API has them
 * (moe8_chat_template_*, moe8_chat_apply, moe8_chat_apply_json) and the
 * tokenizer's own: read from tokenizer_config.json's chat_template, or
 * chat_template.jinja beside it, which takes precedence as in transformers.
 *
 * A render builds the variables transformers' apply_chat_template passes to
 * jinja2 — the special tokens map (bos_token, eos_token, unk_token,
 * pad_token, ..., additional_special_tokens; unset ones are left undefined),
 * then the caller's kwargs over them, then messages, tools and documents
 * (kwargs win over these two, as vLLM passes chat_template_kwargs last) and
 * add_generation_prompt — and runs the interpreter (jinja.h) over them.
 * Messages come as structs ({role, content}; tools and documents None) or as
 * JSON (moe8_chat_template_render_json: whole message objects, as vLLM hands
 * them to apply_chat_template; moe8_chat_messages_normalize, tok_messages.c,
 * makes them from an OpenAI request). Both go through one render(). An empty rendering is a valid
 * result: it fits any buffer, even cap 0.
 *
 * Errors while loading name the file; errors while rendering say "chat
 * template" only (they go back to HTTP clients, who need not see paths).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/json_util.h"
#include "jinja/jinja.h"
#include "tokenizer/tok_template.h"
#include "tokenizer/tokenizer.h"

#define TEMPLATE_FILE_MAX ((size_t)16 << 20)
#define NAME "chat template"

struct moe8_chat_template {
    jinja_template *jt;
    cJSON *special;     /* {"bos_token": "<s>", ...}: what the template sees besides messages */
    char *source;       /* its text (NUL-terminated) */
};

struct tok_chat {
    moe8_chat_template *tmpl;          /* NULL: none, or it did not parse (st, msg say which) */
    cJSON *special;                    /* the config's special tokens, for chat_template.jinja */
    moe8_status st;
    char msg[MOE8_ERROR_MESSAGE_MAX];
};

/* ---- templates ---------------------------------------------------------------- */

static moe8_status parse_with(const char *source, size_t len, cJSON *special,
                              moe8_chat_template **out, moe8_error *err) {
    moe8_chat_template *t = calloc(1, sizeof *t);
    moe8_status st;
    *out = NULL;
    if (!t) {
        cJSON_Delete(special);
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, NAME ": out of memory");
    }
    t->special = special;
    if (!(t->source = malloc(len + 1))) {
        moe8_chat_template_free(t);
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, NAME ": out of memory");
    }
    memcpy(t->source, source, len);
    t->source[len] = '\0';
    if ((st = moe8_jinja_parse(source, len, NAME, &t->jt, err)) != MOE8_OK) {
        moe8_chat_template_free(t);
        return st;
    }
    *out = t;
    return MOE8_OK;
}

moe8_status moe8_chat_template_parse(const char *source, size_t len, const char *bos_token,
                                     const char *eos_token, moe8_chat_template **out,
                                     moe8_error *err) {
    cJSON *special = cJSON_CreateObject();
    if (!out || (!source && len)) {
        cJSON_Delete(special);
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "chat_template_parse: NULL argument");
    }
    *out = NULL;
    if (!special || (bos_token && !cJSON_AddStringToObject(special, "bos_token", bos_token)) ||
        (eos_token && !cJSON_AddStringToObject(special, "eos_token", eos_token))) {
        cJSON_Delete(special);
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, NAME ": out of memory");
    }
    return parse_with(source ? source : "", len, special, out, err);
}

void moe8_chat_template_free(moe8_chat_template *t) {
    if (!t) return;
    moe8_jinja_free(t->jt);
    cJSON_Delete(t->special);
    free(t->source);
    free(t);
}

const char *moe8_chat_template_source(const moe8_chat_template *t) { return t ? t->source : NULL; }

/* ---- rendering ---------------------------------------------------------------- */

#define OOM(err) moe8_fail(err, MOE8_ERR_NOMEM, -1, NAME ": out of memory")

/* The struct messages as the JSON list the template sees: [{role, content}]. */
static moe8_status messages_of_structs(const moe8_chat_message *msgs, size_t n, cJSON **out,
                                       moe8_error *err) {
    cJSON *list = cJSON_CreateArray();
    *out = list;
    if (!list) return OOM(err);
    for (size_t i = 0; i < n; i++) {
        const char *role = msgs[i].role, *content = msgs[i].content;
        size_t bad;
        cJSON *m = cJSON_CreateObject();
        if (!m || !cJSON_AddItemToArray(list, m)) return cJSON_Delete(m), OOM(err);
        if (!role) return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, NAME ": message %zu has no role", i);
        if ((bad = moe8_utf8_valid(role, strlen(role))) != (size_t)-1 ||
            (content && (bad = moe8_utf8_valid(content, strlen(content))) != (size_t)-1))
            return moe8_fail(err, MOE8_ERR_INVALID_ARG, (int64_t)bad,
                             NAME ": message %zu: the %s is not valid UTF-8 (byte %zu)", i,
                             moe8_utf8_valid(role, strlen(role)) != (size_t)-1 ? "role" : "content",
                             bad);
        if (!cJSON_AddStringToObject(m, "role", role) ||
            !(content ? cJSON_AddStringToObject(m, "content", content)
                      : cJSON_AddNullToObject(m, "content")))
            return OOM(err);
    }
    return MOE8_OK;
}

/* The first string (a value or a key) in j that is not valid UTF-8: its path
 * into where[0..cap) and 1; 0 when all are valid. Recursion is as deep as
 * the tree, which cJSON's parser bounds (CJSON_NESTING_LIMIT). */
static int bad_utf8_in(const cJSON *j, char *where, size_t cap, size_t at) {
    const cJSON *e;
    int i = 0;
    if (cJSON_IsString(j) && moe8_utf8_valid(j->valuestring, strlen(j->valuestring)) != (size_t)-1)
        return 1;
    if (!cJSON_IsArray(j) && !cJSON_IsObject(j)) return 0;
    cJSON_ArrayForEach(e, j) {
        int isobj = cJSON_IsObject(j), bad_key;
        size_t k = at;
        bad_key = isobj && moe8_utf8_valid(e->string, strlen(e->string)) != (size_t)-1;
        if (k < cap)
            k += (size_t)(isobj ? snprintf(where + k, cap - k, bad_key ? " (a key)" : ".%s", e->string)
                                : snprintf(where + k, cap - k, "[%d]", i));
        if (bad_key || bad_utf8_in(e, where, cap, k < cap ? k : cap - 1))
            return 1;
        i++;
    }
    return 0;
}

/* text (the caller's JSON, NULL: None) parsed into *out: `what` must be an
 * array (or null), every string valid UTF-8. */
static moe8_status parse_list(const char *text, const char *what, cJSON **out, moe8_error *err) {
    char where[256];
    *out = NULL;
    if (!text) return (*out = cJSON_CreateNull()) ? MOE8_OK : OOM(err);
    if (moe8_json_parse(text, strlen(text), what, out, err)) {
        if (err) err->code = MOE8_ERR_INVALID_ARG; /* the caller's text, not a file */
        return MOE8_ERR_INVALID_ARG;
    }
    if (!cJSON_IsArray(*out) && !cJSON_IsNull(*out))
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "chat template: %s must be a JSON array", what);
    snprintf(where, sizeof where, "%s", what);
    if (bad_utf8_in(*out, where, sizeof where, strlen(where)))
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "chat template: %s: a string is not valid "
                         "UTF-8", where);
    return MOE8_OK;
}

/* Move every key of the kwargs object into vars (replacing a special token). */
static moe8_status add_kwargs(cJSON *vars, const char *kwargs_json, moe8_error *err) {
    cJSON *kw = NULL, *item;
    moe8_status st;
    if (!kwargs_json) return MOE8_OK;
    if (moe8_json_parse(kwargs_json, strlen(kwargs_json), "chat template kwargs", &kw, err)) {
        if (err) err->code = MOE8_ERR_INVALID_ARG; /* the caller's text, not a file */
        return MOE8_ERR_INVALID_ARG;
    }
    if (!cJSON_IsObject(kw)) {
        cJSON_Delete(kw);
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "chat template kwargs must be a JSON object");
    }
    st = MOE8_OK;
    while ((item = kw->child)) {
        const char *key = item->string;
        if (!strcmp(key, "messages") || !strcmp(key, "add_generation_prompt")) {
            st = moe8_fail(err, MOE8_ERR_INVALID_ARG, -1,
                           "chat template kwargs cannot set '%s' (the conversation sets it)", key);
            break;
        }
        cJSON_DetachItemViaPointer(kw, item);
        if (cJSON_GetObjectItemCaseSensitive(vars, key)) cJSON_DeleteItemFromObjectCaseSensitive(vars, key);
        cJSON_AddItemToObject(vars, key, item); /* takes the item and its key */
    }
    cJSON_Delete(kw);
    return st;
}

/* vars[key] = *item (taken; *item set to NULL), unless kwargs set it already
 * (vLLM passes chat_template_kwargs after tools and documents: they win). */
static int add_unless_set(cJSON *vars, const char *key, cJSON **item) {
    cJSON *v = *item;
    *item = NULL;
    if (cJSON_GetObjectItemCaseSensitive(vars, key)) return cJSON_Delete(v), 1;
    return cJSON_AddItemToObject(vars, key, v) ? 1 : (cJSON_Delete(v), 0);
}

/* The one render both APIs share. messages, tools, documents are taken (freed
 * here). The template's variables, in transformers' order of precedence: the
 * special tokens, the caller's kwargs over them, then messages, tools and
 * documents (unless kwargs set those two) and add_generation_prompt. */
static moe8_status render(const moe8_chat_template *t, cJSON *messages, cJSON *tools,
                          cJSON *documents, int add_generation_prompt, const char *kwargs_json,
                          char *out, size_t cap, size_t *n_out, moe8_error *err) {
    cJSON *vars = cJSON_Duplicate(t->special, 1);
    char *text = NULL;
    size_t len = 0;
    moe8_status st;
    if (!vars) {
        st = OOM(err);
        goto done;
    }
    if ((st = add_kwargs(vars, kwargs_json, err))) goto done;
    if (!cJSON_AddItemToObject(vars, "messages", messages)) {
        st = OOM(err);
        goto done;
    }
    messages = NULL;
    if (!add_unless_set(vars, "tools", &tools) || !add_unless_set(vars, "documents", &documents) ||
        !cJSON_AddBoolToObject(vars, "add_generation_prompt", add_generation_prompt != 0)) {
        st = OOM(err);
        goto done;
    }
    if ((st = moe8_jinja_render(t->jt, vars, NULL, &text, &len, err)) != MOE8_OK) goto done;
    if (n_out) *n_out = len;
    /* an empty rendering fits any buffer, even none: it is a valid prompt */
    if (len >= cap && len > 0) {
        st = moe8_fail(err, MOE8_ERR_INVALID_ARG, -1,
                       NAME ": output holds %zu bytes, %zu needed (with the NUL)", cap, len + 1);
        goto done;
    }
    if (cap) memcpy(out, text, len + 1);
done:
    free(text);
    cJSON_Delete(messages);
    cJSON_Delete(tools);
    cJSON_Delete(documents);
    cJSON_Delete(vars);
    return st;
}

moe8_status moe8_chat_template_render(const moe8_chat_template *t, const moe8_chat_message *msgs,
                                      size_t n_msgs, int add_generation_prompt,
                                      const char *kwargs_json, char *out, size_t cap, size_t *n_out,
                                      moe8_error *err) {
    cJSON *messages = NULL;
    moe8_status st;
    if (n_out) *n_out = 0;
    if (!t || (!msgs && n_msgs) || (!out && cap))
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "chat_template_render: NULL argument");
    if ((st = messages_of_structs(msgs, n_msgs, &messages, err))) {
        cJSON_Delete(messages);
        return st;
    }
    return render(t, messages, cJSON_CreateNull(), cJSON_CreateNull(), add_generation_prompt,
                  kwargs_json, out, cap, n_out, err);
}

moe8_status moe8_chat_template_render_json(const moe8_chat_template *t, const char *messages_json,
                                           const char *tools_json, const char *documents_json,
                                           int add_generation_prompt, const char *kwargs_json,
                                           char *out, size_t cap, size_t *n_out, moe8_error *err) {
    cJSON *messages = NULL, *tools = NULL, *documents = NULL;
    const cJSON *m;
    moe8_status st;
    int i = 0;
    if (n_out) *n_out = 0;
    if (!t || !messages_json || (!out && cap))
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "chat_template_render_json: NULL argument");
    if ((st = parse_list(messages_json, "messages", &messages, err)) ||
        (st = parse_list(tools_json, "tools", &tools, err)) ||
        (st = parse_list(documents_json, "documents", &documents, err)))
        goto fail;
    if (!cJSON_IsArray(messages)) {
        st = moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, NAME ": messages must be a JSON array");
        goto fail;
    }
    cJSON_ArrayForEach(m, messages) {
        if (!cJSON_IsObject(m) || !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(m, "role"))) {
            st = moe8_fail(err, MOE8_ERR_INVALID_ARG, -1,
                           NAME ": messages[%d] must be an object with a string 'role'", i);
            goto fail;
        }
        i++;
    }
    return render(t, messages, tools, documents, add_generation_prompt, kwargs_json, out, cap, n_out,
                  err);
fail:
    cJSON_Delete(messages);
    cJSON_Delete(tools);
    cJSON_Delete(documents);
    return st;
}

/* ---- the tokenizer's template -------------------------------------------------- */

void moe8_tok_chat_free(struct tok_chat *c) {
    if (!c) return;
    moe8_chat_template_free(c->tmpl);
    cJSON_Delete(c->special);
    free(c);
}

/* A token in tokenizer_config.json: "text" or {"content": "text", ...}. */
static const char *token_text(const cJSON *v) {
    if (cJSON_IsObject(v)) v = cJSON_GetObjectItemCaseSensitive(v, "content");
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static cJSON *special_tokens(const cJSON *cfg) {
    static const char *const KEYS[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                       "pad_token", "cls_token", "mask_token", NULL};
    cJSON *map = cJSON_CreateObject(), *extra;
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(cfg, "additional_special_tokens"), *v;
    if (!map) return NULL;
    for (int i = 0; KEYS[i]; i++) {
        const char *text = token_text(cJSON_GetObjectItemCaseSensitive(cfg, KEYS[i]));
        if (text && !cJSON_AddStringToObject(map, KEYS[i], text)) goto oom;
    }
    if (cJSON_IsArray(list)) {
        if (!(extra = cJSON_AddArrayToObject(map, "additional_special_tokens"))) goto oom;
        cJSON_ArrayForEach(v, list) {
            const char *text = token_text(v);
            cJSON *s = text ? cJSON_CreateString(text) : NULL;
            if (text && (!s || !cJSON_AddItemToArray(extra, s))) goto oom;
        }
    }
    return map;
oom:
    cJSON_Delete(map);
    return NULL;
}

/* Parse `source` into c->tmpl, or keep why not ("'where': ..."). */
static void set_template(struct tok_chat *c, const char *source, size_t len, const char *where) {
    moe8_error e;
    cJSON *special = cJSON_Duplicate(c->special, 1);
    moe8_chat_template_free(c->tmpl);
    c->tmpl = NULL;
    if (!special) {
        c->st = MOE8_ERR_NOMEM;
        snprintf(c->msg, sizeof c->msg, "'%s': out of memory", where);
    } else if ((c->st = parse_with(source, len, special, &c->tmpl, &e)) != MOE8_OK) {
        moe8_error_prefix(&e, "'%s'", where);
        memcpy(c->msg, e.message, sizeof c->msg);
    }
}

static moe8_status new_chat(struct moe8_tokenizer *t, const cJSON *cfg, moe8_error *err) {
    if (t->chat) return MOE8_OK;
    if (!(t->chat = calloc(1, sizeof *t->chat)) || !(t->chat->special = special_tokens(cfg)))
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "chat template: out of memory");
    return MOE8_OK;
}

moe8_status moe8_tok_chat_from_config(struct moe8_tokenizer *t, const cJSON *cfg, const char *cfg_path,
                                 moe8_error *err) {
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template"), *e, *src = NULL;
    moe8_status st;
    if ((st = new_chat(t, cfg, err))) return st;
    if (!ct || cJSON_IsNull(ct)) {
        t->chat->st = MOE8_ERR_NOT_FOUND;
        snprintf(t->chat->msg, sizeof t->chat->msg,
                 "this model has no chat template ('%s' has no chat_template and there is no "
                 "chat_template.jinja beside it)", cfg_path);
        return MOE8_OK;
    }
    if (cJSON_IsString(ct)) {
        src = ct;
    } else if (cJSON_IsArray(ct)) { /* [{"name": ..., "template": ...}] */
        cJSON_ArrayForEach(e, ct) {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name"),
                        *text = cJSON_GetObjectItemCaseSensitive(e, "template");
            if (!cJSON_IsString(name) || !cJSON_IsString(text))
                return moe8_fail(err, MOE8_ERR_FORMAT, -1,
                                 "'%s': chat_template as a list must hold {\"name\": string, "
                                 "\"template\": string} objects", cfg_path);
            if (!strcmp(name->valuestring, "default")) src = text;
        }
        if (!src) {
            t->chat->st = MOE8_ERR_UNSUPPORTED;
            snprintf(t->chat->msg, sizeof t->chat->msg,
                     "'%s': chat_template lists templates but none named 'default'", cfg_path);
            return MOE8_OK;
        }
    } else {
        return moe8_fail(err, MOE8_ERR_FORMAT, -1,
                         "'%s': chat_template must be a string or a list of {name, template}",
                         cfg_path);
    }
    set_template(t->chat, src->valuestring, strlen(src->valuestring), cfg_path);
    return MOE8_OK;
}

moe8_status moe8_tok_chat_from_dir(struct moe8_tokenizer *t, const char *dir, moe8_error *err) {
    char path[4200], *text = NULL;
    size_t len = 0;
    moe8_status st;
    if ((size_t)snprintf(path, sizeof path, "%s/chat_template.jinja", dir) >= sizeof path)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "tokenizer folder path is too long");
    st = moe8_read_file(path, TEMPLATE_FILE_MAX, &text, &len, err);
    if (st == MOE8_ERR_NOT_FOUND) return MOE8_OK;
    if (st == MOE8_OK && (st = new_chat(t, NULL, err)) == MOE8_OK) set_template(t->chat, text, len, path);
    free(text);
    return st;
}

moe8_status moe8_tokenizer_chat_template(const moe8_tokenizer *tok, const moe8_chat_template **tmpl,
                                         moe8_error *err) {
    if (!tok || !tmpl) return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "tokenizer_chat_template: NULL argument");
    *tmpl = NULL;
    if (!tok->chat)
        return moe8_fail(err, MOE8_ERR_NOT_FOUND, -1, "this model has no chat template (no "
                         "tokenizer_config.json with a chat_template, no chat_template.jinja)");
    if (!tok->chat->tmpl) return moe8_fail(err, tok->chat->st, -1, "%s", tok->chat->msg);
    *tmpl = tok->chat->tmpl;
    return MOE8_OK;
}

moe8_status moe8_chat_apply(const moe8_tokenizer *tok, const moe8_chat_message *msgs, size_t n_msgs,
                            int add_generation_prompt, const char *kwargs_json, char *out,
                            size_t cap, size_t *n_out, moe8_error *err) {
    const moe8_chat_template *t;
    moe8_status st;
    if (n_out) *n_out = 0;
    if ((st = moe8_tokenizer_chat_template(tok, &t, err)) != MOE8_OK) return st;
    return moe8_chat_template_render(t, msgs, n_msgs, add_generation_prompt, kwargs_json, out, cap,
                                     n_out, err);
}

moe8_status moe8_chat_apply_json(const moe8_tokenizer *tok, const char *messages_json,
                                 const char *tools_json, const char *documents_json,
                                 int add_generation_prompt, const char *kwargs_json, char *out,
                                 size_t cap, size_t *n_out, moe8_error *err) {
    const moe8_chat_template *t;
    moe8_status st;
    if (n_out) *n_out = 0;
    if ((st = moe8_tokenizer_chat_template(tok, &t, err)) != MOE8_OK) return st;
    return moe8_chat_template_render_json(t, messages_json, tools_json, documents_json,
                                          add_generation_prompt, kwargs_json, out, cap, n_out, err);
}
