/*
 * api_responses.c — the request side of OpenAI's Responses API in moe8 serve
 * (responses.h): POST /v1/responses becomes a chat completions request that
 * the shared path (openai.c, api_chat.c, tools.c) runs; responses_out.c
 * writes the answer. Also POST /v1/responses/input_tokens (the prompt
 * counted as the chat path renders it) and GET /v1/responses/{id}.
 *
 * The translation (API33.md part A; where it is silent, as vLLM does):
 *   instructions        a system message first (not kept for previous_response_id)
 *   input               a string (one user message) or items: messages of roles
 *                       user / assistant / system / developer with input_text /
 *                       output_text / refusal parts; reasoning (its reasoning_text,
 *                       else its summary) as the next assistant turn's reasoning;
 *                       function_call as that turn's tool_calls; function_call_output
 *                       as a tool message; images and files refused naming the part;
 *                       item_reference refused; other item types skipped with a log line
 *   previous_response_id  the stored conversation first (responses_store.c); unknown: 404
 *   tools               function tools (flat form; the chat form is taken too); a
 *                       namespace's functions offered under Codex's flat name
 *                       ns.trim_end('_') + "__" + name.trim_start('_'), calls mapped
 *                       back to name + namespace; hosted and custom tools dropped with
 *                       a log line (Codex sends them)
 *   tool_choice         none / auto / required / {type: function, name} /
 *                       {type: allowed_tools, mode, tools} (only those tools offered);
 *                       hosted choices refused
 *   text.format         json_object / json_schema as chat's response_format
 *   reasoning.effort    chat's reasoning_effort (api_chat.c: the template's thinking
 *                       switch, "none" and "minimal" turn it off (enable_thinking
 *                       false), any other effort on; also given to the template as
 *                       reasoning_effort, as vLLM passes it, gpt-oss's levels for
 *                       gpt-oss); absent or null: the template's default; summary ignored
 *   max_output_tokens, temperature, top_p, stop, seed, top_k, min_p and the penalties
 *                       as chat's
 * Fields are honoured, ignored (as vLLM does) or refused naming the field
 * (FIELDS below); an unknown one is ignored with a warning line. Errors of the
 * chat path name the Responses field ('input' for 'messages', ...).
 *
 * Does not: write the answer (responses_out.c) or run anything.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/json_util.h"
#include "server/responses.h"

#define T_INVALID "invalid_request_error"

static const oa_field FIELDS[] = {
    {"model", 0, OA_HONOURED, NULL},
    {"input", 0, OA_HONOURED, NULL},
    {"instructions", 0, OA_HONOURED, NULL},
    {"tools", 0, OA_HONOURED, NULL},
    {"tool_choice", 0, OA_HONOURED, NULL},
    {"parallel_tool_calls", 0, OA_HONOURED, NULL},
    {"text", 0, OA_HONOURED, NULL},
    {"reasoning", 0, OA_HONOURED, NULL},
    {"include", 0, OA_HONOURED, NULL}, /* values it does not know: ignored */
    {"max_output_tokens", 0, OA_HONOURED, NULL},
    {"temperature", 0, OA_HONOURED, NULL},
    {"top_p", 0, OA_HONOURED, NULL},
    {"stop", 0, OA_HONOURED, NULL},
    {"seed", 0, OA_HONOURED, NULL},
    {"top_k", 0, OA_HONOURED, NULL},
    {"min_p", 0, OA_HONOURED, NULL},
    {"presence_penalty", 0, OA_HONOURED, NULL},
    {"frequency_penalty", 0, OA_HONOURED, NULL},
    {"repetition_penalty", 0, OA_HONOURED, NULL},
    {"store", 0, OA_HONOURED, NULL},
    {"previous_response_id", 0, OA_HONOURED, NULL},
    {"stream", 0, OA_HONOURED, NULL},
    {"top_logprobs", 0, OA_HONOURED, NULL}, /* 0 only: checked below */
    {"metadata", 0, OA_IGNORED, NULL},
    {"user", 0, OA_IGNORED, NULL},
    {"safety_identifier", 0, OA_IGNORED, NULL},
    {"prompt_cache_key", 0, OA_IGNORED, NULL},
    {"prompt_cache_retention", 0, OA_IGNORED, NULL},
    {"prompt_cache_options", 0, OA_IGNORED, NULL},
    {"client_metadata", 0, OA_IGNORED, NULL},
    {"truncation", 0, OA_IGNORED, NULL},
    {"service_tier", 0, OA_IGNORED, NULL},
    {"stream_options", 0, OA_IGNORED, NULL},
    {"max_tool_calls", 0, OA_IGNORED, NULL},
    {"context_management", 0, OA_IGNORED, NULL},
    {"moderation", 0, OA_IGNORED, NULL},
    {"background", 0, OA_REFUSED, "background responses are not supported"},
    {"conversation", 0, OA_REFUSED, "conversations are not supported; chain responses with previous_response_id"},
    {"prompt", 0, OA_REFUSED, "stored prompt templates are not supported"},
};

/* Appends ", 'name'" to a list of names for a log line. */
static void name_list(char *list, size_t cap, const char *name) {
    const size_t n = strlen(list);
    if (n < cap) snprintf(list + n, cap - n, "%s'%.40s'", n ? ", " : "", name);
}

static int check_fields(srv *s, const cJSON *root, moe8_buf *err) {
    const cJSON *f;
    const int rc = moe8_oa_field_policy(s, root, FIELDS, sizeof FIELDS / sizeof *FIELDS, 0, "responses", err);
    if (rc) return rc;
    f = cJSON_GetObjectItemCaseSensitive(root, "top_logprobs");
    if (f && !cJSON_IsNull(f) && !(cJSON_IsNumber(f) && f->valuedouble == 0))
        return moe8_oa_bad(err, "top_logprobs", "'top_logprobs': log-probs are not supported on /v1/responses");
    return 0;
}

/* ---- tools --------------------------------------------------------------------------------- */

static const char *str_of(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Codex's flat name of function `name` in namespace `ns`. */
static void flat_name(const char *ns, const char *name, moe8_buf *out) {
    size_t n = strlen(ns);
    while (n && ns[n - 1] == '_') n--;
    while (*name == '_') name++;
    out->n = 0;
    moe8_buf_add(out, ns, n);
    moe8_buf_str(out, "__");
    moe8_buf_str(out, name);
}

/* A chat tool {type: function, function: {name, description?, parameters?}} of a flat
 * function tool f under `name`. */
static cJSON *chat_tool(const cJSON *f, const char *name) {
    cJSON *t = cJSON_CreateObject(), *fn = cJSON_AddObjectToObject(t, "function");
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(f, "description"),
                *p = cJSON_GetObjectItemCaseSensitive(f, "parameters");
    cJSON_AddStringToObject(t, "type", "function");
    cJSON_AddStringToObject(fn, "name", name);
    if (cJSON_IsString(d)) cJSON_AddItemToObject(fn, "description", cJSON_Duplicate(d, 1));
    if (p && !cJSON_IsNull(p)) cJSON_AddItemToObject(fn, "parameters", cJSON_Duplicate(p, 1));
    return t;
}

/* One function tool (flat, or chat's form with "function") into the chat tools. */
static int add_function(const cJSON *t, const char *param, cJSON *tools, moe8_buf *err) {
    const cJSON *f = cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(t, "function"))
                         ? cJSON_GetObjectItemCaseSensitive(t, "function") : t;
    const char *name = str_of(f, "name");
    if (!name || !name[0]) return moe8_oa_bad(err, param, "'%s.name' must be a non-empty string", param);
    cJSON_AddItemToArray(tools, chat_tool(f, name));
    return 0;
}

/* A namespace's function tools into the chat tools under their flat names. */
static int add_namespace(resp_state *st, const cJSON *t, const char *param, cJSON *tools, char *dropped,
                         size_t cap, moe8_buf *err) {
    const char *ns = str_of(t, "name");
    const cJSON *inner = cJSON_GetObjectItemCaseSensitive(t, "tools"), *f;
    moe8_buf flat = {0};
    int k = 0;
    if (!ns || !ns[0]) return moe8_oa_bad(err, param, "'%s.name' must be a non-empty string", param);
    if (!cJSON_IsArray(inner)) return moe8_oa_bad(err, param, "'%s.tools' must be an array", param);
    cJSON_ArrayForEach(f, inner) {
        const char *type = str_of(f, "type"), *name = str_of(f, "name");
        cJSON *entry;
        if (type && strcmp(type, "function")) {
            name_list(dropped, cap, type);
            k++;
            continue;
        }
        if (!name || !name[0]) {
            moe8_buf_free(&flat);
            return moe8_oa_bad(err, param, "'%s.tools[%d].name' must be a non-empty string", param, k);
        }
        flat_name(ns, name, &flat);
        cJSON_AddItemToArray(tools, chat_tool(f, flat.p));
        entry = cJSON_CreateObject();
        cJSON_AddStringToObject(entry, "namespace", ns);
        cJSON_AddStringToObject(entry, "name", name);
        cJSON_DeleteItemFromObjectCaseSensitive(st->names, flat.p);
        cJSON_AddItemToObject(st->names, flat.p, entry);
        k++;
    }
    moe8_buf_free(&flat);
    return 0;
}

/* tools -> chat tools (NULL when none is left); hosted ones dropped with a log line. */
static int tools_to_chat(srv *s, const cJSON *root, resp_state *st, cJSON **out, moe8_buf *err) {
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(root, "tools"), *t;
    char dropped[400] = "", param[48];
    int k = 0, rc = 0;
    cJSON *chat = cJSON_CreateArray();
    *out = NULL;
    if (!tools || cJSON_IsNull(tools)) {
        cJSON_Delete(chat);
        return 0;
    }
    if (!cJSON_IsArray(tools)) {
        cJSON_Delete(chat);
        return moe8_oa_bad(err, "tools", "'tools' must be an array, got %s", moe8_json_type_name(tools));
    }
    cJSON_ArrayForEach(t, tools) {
        const char *type = str_of(t, "type");
        snprintf(param, sizeof param, "tools[%d]", k++);
        if (!cJSON_IsObject(t)) rc = moe8_oa_bad(err, param, "'%s' must be an object", param);
        else if (!type) rc = moe8_oa_bad(err, param, "'%s.type' must be a string", param);
        else if (!strcmp(type, "function")) rc = add_function(t, param, chat, err);
        else if (!strcmp(type, "namespace")) rc = add_namespace(st, t, param, chat, dropped, sizeof dropped, err);
        else name_list(dropped, sizeof dropped, type);
        if (rc) {
            cJSON_Delete(chat);
            return rc;
        }
    }
    if (dropped[0])
        moe8_srv_log(s, "responses request: tools of type %s dropped (this server runs no hosted or custom "
                      "tools)", dropped);
    if (cJSON_GetArraySize(chat)) *out = chat;
    else cJSON_Delete(chat);
    return 0;
}

/* The chat name of a function the request names: a chat tool's own name, else a
 * namespaced function's name (with its namespace, when given). */
static const char *chat_name(const resp_state *st, const cJSON *tools, const char *name, const char *ns) {
    const cJSON *t, *e;
    cJSON_ArrayForEach(t, tools) {
        const char *n = str_of(cJSON_GetObjectItemCaseSensitive(t, "function"), "name");
        if (n && !strcmp(n, name) && !ns) return n;
    }
    cJSON_ArrayForEach(e, st->names) {
        const char *n = str_of(e, "name"), *sp = str_of(e, "namespace");
        if (n && !strcmp(n, name) && (!ns || (sp && !strcmp(sp, ns)))) return e->string;
    }
    return name;
}

/* tool_choice -> chat's; allowed_tools keeps only its tools in *tools. */
static int choice_to_chat(const cJSON *root, const resp_state *st, cJSON **tools, cJSON *chat, moe8_buf *err) {
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(root, "tool_choice");
    const char *type;
    if (!c || cJSON_IsNull(c)) return 0;
    if (cJSON_IsString(c)) {
        if (!*tools && (!strcmp(c->valuestring, "auto") || !strcmp(c->valuestring, "none")))
            return 0; /* every tool was a hosted one */
        cJSON_AddItemToObject(chat, "tool_choice", cJSON_Duplicate(c, 1));
        return 0;
    }
    type = str_of(c, "type");
    if (!cJSON_IsObject(c) || !type)
        return moe8_oa_bad(err, "tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or an "
                           "object with a 'type'");
    if (!strcmp(type, "function")) {
        const char *name = str_of(c, "name");
        cJSON *o = cJSON_CreateObject();
        if (!name) {
            cJSON_Delete(o);
            return moe8_oa_bad(err, "tool_choice.name", "'tool_choice.name' must be a string");
        }
        cJSON_AddStringToObject(o, "type", "function");
        cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "function"), "name",
                                chat_name(st, *tools, name, str_of(c, "namespace")));
        cJSON_AddItemToObject(chat, "tool_choice", o);
        return 0;
    }
    if (!strcmp(type, "allowed_tools")) {
        const char *mode = str_of(c, "mode");
        const cJSON *allowed = cJSON_GetObjectItemCaseSensitive(c, "tools"), *a;
        cJSON *keep = cJSON_CreateArray(), *t;
        if (!mode || (strcmp(mode, "auto") && strcmp(mode, "required")) || !cJSON_IsArray(allowed)) {
            cJSON_Delete(keep);
            return moe8_oa_bad(err, "tool_choice", "'tool_choice' of type allowed_tools needs 'mode' \"auto\" or "
                               "\"required\" and an array 'tools'");
        }
        cJSON_ArrayForEach(t, *tools) {
            const char *n = str_of(cJSON_GetObjectItemCaseSensitive(t, "function"), "name");
            int in = 0;
            cJSON_ArrayForEach(a, allowed) {
                const char *an = str_of(a, "name");
                in |= an && n && !strcmp(chat_name(st, *tools, an, str_of(a, "namespace")), n);
            }
            if (in) cJSON_AddItemToArray(keep, cJSON_Duplicate(t, 1));
        }
        cJSON_Delete(*tools);
        *tools = keep;
        cJSON_AddStringToObject(chat, "tool_choice", mode);
        return 0;
    }
    return moe8_oa_bad(err, "tool_choice", "'tool_choice' of type '%.40s' is not supported: this server runs only "
                       "function tools", type);
}

/* ---- input items -> messages --------------------------------------------------------------- */

/* A message's content as chat's: a string, or its text parts. */
static int content_to_chat(const cJSON *content, const char *param, cJSON **out, moe8_buf *err) {
    const cJSON *p;
    int k = 0;
    *out = NULL;
    if (cJSON_IsString(content)) {
        *out = cJSON_CreateString(content->valuestring);
        return 0;
    }
    if (!cJSON_IsArray(content))
        return moe8_oa_bad(err, param, "'%s' must be a string or an array of parts", param);
    *out = cJSON_CreateArray();
    cJSON_ArrayForEach(p, content) {
        const char *type = str_of(p, "type"), *text = NULL;
        char pp[96];
        snprintf(pp, sizeof pp, "%s[%d]", param, k++);
        if (type && (!strcmp(type, "input_text") || !strcmp(type, "output_text") || !strcmp(type, "text")))
            text = str_of(p, "text");
        else if (type && !strcmp(type, "refusal")) text = str_of(p, "refusal");
        else if (type && (!strcmp(type, "input_image") || !strcmp(type, "input_file") ||
                          !strcmp(type, "input_audio"))) {
            cJSON_Delete(*out);
            *out = NULL;
            return moe8_oa_bad(err, pp, "'%s': %s parts are not supported (text only)", pp, type);
        }
        if (!text) {
            cJSON_Delete(*out);
            *out = NULL;
            return moe8_oa_bad(err, pp, "'%s' must be a part of type input_text, output_text or refusal with its "
                               "text", pp);
        }
        cJSON *tp = cJSON_CreateObject();
        cJSON_AddStringToObject(tp, "type", "text");
        cJSON_AddStringToObject(tp, "text", text);
        cJSON_AddItemToArray(*out, tp);
    }
    return 0;
}

/* A reasoning item's text: its reasoning_text parts, else its summary. */
static void reasoning_text(const cJSON *item, moe8_buf *out) {
    const cJSON *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(item, "content")) {
        const char *t = str_of(p, "text");
        if (t) moe8_buf_str(out, t);
    }
    if (out->n) return;
    cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(item, "summary")) {
        const char *t = str_of(p, "text");
        if (t) moe8_buf_str(out, t);
    }
}

/* The assistant turn being gathered (reasoning, then content, then calls), or a new one. */
static cJSON *assistant(cJSON *msgs, cJSON **asst, int need_empty_content, int need_no_calls) {
    if (*asst && (!need_empty_content || !cJSON_GetObjectItemCaseSensitive(*asst, "content")) &&
        (!need_no_calls || !cJSON_GetObjectItemCaseSensitive(*asst, "tool_calls")))
        return *asst;
    *asst = cJSON_CreateObject();
    cJSON_AddStringToObject(*asst, "role", "assistant");
    cJSON_AddItemToArray(msgs, *asst);
    return *asst;
}

static int function_call(const resp_state *st, const cJSON *it, const char *param, cJSON *msgs, cJSON **asst,
                         moe8_buf *err) {
    const char *call_id = str_of(it, "call_id"), *name = str_of(it, "name"), *args = str_of(it, "arguments"),
               *ns = str_of(it, "namespace");
    cJSON *a, *calls, *c, *fn;
    moe8_buf flat = {0};
    (void)st;
    if (!call_id || !name || !args)
        return moe8_oa_bad(err, param, "'%s' (function_call) needs the strings 'call_id', 'name' and 'arguments'",
                           param);
    a = assistant(msgs, asst, 0, 0);
    if (!(calls = cJSON_GetObjectItemCaseSensitive(a, "tool_calls"))) calls = cJSON_AddArrayToObject(a, "tool_calls");
    c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "id", call_id);
    cJSON_AddStringToObject(c, "type", "function");
    fn = cJSON_AddObjectToObject(c, "function");
    if (ns && ns[0]) flat_name(ns, name, &flat);
    cJSON_AddStringToObject(fn, "name", flat.p ? flat.p : name);
    cJSON_AddStringToObject(fn, "arguments", args);
    cJSON_AddItemToArray(calls, c);
    moe8_buf_free(&flat);
    return 0;
}

static int function_output(const cJSON *it, const char *param, cJSON *msgs, moe8_buf *err) {
    const char *call_id = str_of(it, "call_id");
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(it, "output");
    cJSON *m, *content;
    char pp[96];
    int rc;
    if (!call_id) return moe8_oa_bad(err, param, "'%s' (function_call_output) needs the string 'call_id'", param);
    snprintf(pp, sizeof pp, "%s.output", param);
    if ((rc = content_to_chat(o, pp, &content, err))) return rc;
    m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "tool");
    cJSON_AddStringToObject(m, "tool_call_id", call_id);
    cJSON_AddItemToObject(m, "content", content);
    cJSON_AddItemToArray(msgs, m);
    return 0;
}

/* One input item into the messages; skipped types are named in `skipped`. */
static int item_to_chat(const resp_state *st, const cJSON *it, const char *param, cJSON *msgs, cJSON **asst,
                        char *skipped, size_t cap, moe8_buf *err) {
    const char *type = str_of(it, "type"), *role = str_of(it, "role");
    char pp[96];
    int rc;
    if (!cJSON_IsObject(it)) return moe8_oa_bad(err, param, "'%s' must be an object", param);
    if ((!type || !strcmp(type, "message")) && role) {
        cJSON *content, *m;
        snprintf(pp, sizeof pp, "%s.content", param);
        if ((rc = content_to_chat(cJSON_GetObjectItemCaseSensitive(it, "content"), pp, &content, err))) return rc;
        if (!strcmp(role, "assistant")) {
            cJSON_AddItemToObject(assistant(msgs, asst, 1, 1), "content", content);
            return 0;
        }
        *asst = NULL;
        if (strcmp(role, "user") && strcmp(role, "system") && strcmp(role, "developer")) {
            cJSON_Delete(content);
            return moe8_oa_bad(err, param, "'%s.role' must be \"user\", \"assistant\", \"system\" or \"developer\"",
                               param);
        }
        m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", role);
        cJSON_AddItemToObject(m, "content", content);
        cJSON_AddItemToArray(msgs, m);
        return 0;
    }
    if (!type) return moe8_oa_bad(err, param, "'%s' must have a 'type' (or a 'role')", param);
    if (!strcmp(type, "message")) return moe8_oa_bad(err, param, "'%s' (a message) needs a 'role'", param);
    if (!strcmp(type, "reasoning")) {
        moe8_buf t = {0};
        reasoning_text(it, &t);
        cJSON_AddStringToObject(assistant(msgs, asst, 1, 1), "reasoning_content", t.p ? t.p : "");
        moe8_buf_free(&t);
        return 0;
    }
    if (!strcmp(type, "function_call")) return function_call(st, it, param, msgs, asst, err);
    *asst = NULL;
    if (!strcmp(type, "function_call_output")) return function_output(it, param, msgs, err);
    if (!strcmp(type, "item_reference"))
        return moe8_oa_bad(err, param, "'%s': item references are not supported; send the item itself", param);
    name_list(skipped, cap, type);
    return 0;
}

/* The conversation items (and instructions first) into chat messages. */
static int items_to_chat(srv *s, const resp_state *st, const cJSON *items, int n_prev, const char *instructions,
                         cJSON *msgs, moe8_buf *err) {
    const cJSON *it;
    cJSON *asst = NULL, *m;
    char skipped[400] = "", param[48];
    int k = 0, rc;
    if (instructions) {
        m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "system");
        cJSON_AddStringToObject(m, "content", instructions);
        cJSON_AddItemToArray(msgs, m);
    }
    cJSON_ArrayForEach(it, items) {
        /* the stored items of previous_response_id come first: errors name this input's */
        if (k < n_prev) snprintf(param, sizeof param, "previous_response_id");
        else snprintf(param, sizeof param, "input[%d]", k - n_prev);
        k++;
        if ((rc = item_to_chat(st, it, param, msgs, &asst, skipped, sizeof skipped, err))) return rc;
    }
    cJSON_ArrayForEach(m, msgs) /* an assistant turn of reasoning or calls only */
        if (!strcmp(str_of(m, "role"), "assistant") && !cJSON_GetObjectItemCaseSensitive(m, "content"))
            cJSON_AddStringToObject(m, "content", "");
    if (skipped[0]) moe8_srv_log(s, "responses request: input items of type %s skipped (not supported)", skipped);
    return 0;
}

/* ---- text.format, reasoning, sampling -------------------------------------------------------- */

static int format_to_chat(const cJSON *root, cJSON *chat, moe8_buf *err) {
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(root, "text"), *f;
    const char *type;
    if (!text || cJSON_IsNull(text)) return 0;
    if (!cJSON_IsObject(text)) return moe8_oa_bad(err, "text", "'text' must be an object, got %s", moe8_json_type_name(text));
    f = cJSON_GetObjectItemCaseSensitive(text, "format");
    if (!f || cJSON_IsNull(f)) return 0;
    if (!cJSON_IsObject(f) || !(type = str_of(f, "type")))
        return moe8_oa_bad(err, "text.format", "'text.format' must be an object with a 'type'");
    if (!strcmp(type, "text")) return 0;
    if (!strcmp(type, "json_object")) {
        cJSON_AddStringToObject(cJSON_AddObjectToObject(chat, "response_format"), "type", "json_object");
        return 0;
    }
    if (!strcmp(type, "json_schema")) {
        cJSON *rf = cJSON_AddObjectToObject(chat, "response_format"), *js;
        const cJSON *schema = cJSON_GetObjectItemCaseSensitive(f, "schema"),
                    *strict = cJSON_GetObjectItemCaseSensitive(f, "strict");
        cJSON_AddStringToObject(rf, "type", "json_schema");
        js = cJSON_AddObjectToObject(rf, "json_schema");
        cJSON_AddStringToObject(js, "name", str_of(f, "name") ? str_of(f, "name") : "response");
        if (schema) cJSON_AddItemToObject(js, "schema", cJSON_Duplicate(schema, 1));
        if (cJSON_IsBool(strict)) cJSON_AddItemToObject(js, "strict", cJSON_Duplicate(strict, 1));
        return 0;
    }
    return moe8_oa_bad(err, "text.format.type", "'text.format.type' must be \"text\", \"json_object\" or "
                       "\"json_schema\", got '%.40s'", type);
}

/* reasoning.effort -> the template's thinking switch (chat_template_kwargs). */
static int reasoning_to_chat(const cJSON *root, cJSON *chat, moe8_buf *err) {
    static const char *const EFFORTS[] = {"none", "minimal", "low", "medium", "high", "xhigh", "max", NULL};
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(root, "reasoning"), *e;
    int i = 0;
    if (!r || cJSON_IsNull(r)) return 0;
    if (!cJSON_IsObject(r)) return moe8_oa_bad(err, "reasoning", "'reasoning' must be an object, got %s", moe8_json_type_name(r));
    e = cJSON_GetObjectItemCaseSensitive(r, "effort");
    if (!e || cJSON_IsNull(e)) return 0;
    while (EFFORTS[i] && !(cJSON_IsString(e) && !strcmp(e->valuestring, EFFORTS[i]))) i++;
    if (!EFFORTS[i])
        return moe8_oa_bad(err, "reasoning.effort", "'reasoning.effort' must be one of none, minimal, low, medium, "
                           "high, xhigh, max");
    cJSON_AddStringToObject(chat, "reasoning_effort", EFFORTS[i]); /* the chat path's switch (api_chat.c) */
    return 0;
}

/* The fields the chat request takes as they are. */
static void copy_fields(const cJSON *root, cJSON *chat) {
    static const char *const SAME[] = {"model", "temperature", "top_p", "stop", "seed", "top_k", "min_p",
                                       "presence_penalty", "frequency_penalty", "repetition_penalty",
                                       "parallel_tool_calls", "stream", NULL};
    const cJSON *v;
    for (int i = 0; SAME[i]; i++)
        if ((v = cJSON_GetObjectItemCaseSensitive(root, SAME[i])) && !cJSON_IsNull(v))
            cJSON_AddItemToObject(chat, SAME[i], cJSON_Duplicate(v, 1));
    if ((v = cJSON_GetObjectItemCaseSensitive(root, "max_output_tokens")) && !cJSON_IsNull(v))
        cJSON_AddItemToObject(chat, "max_completion_tokens", cJSON_Duplicate(v, 1));
}

/* ---- the settings a Response echoes ------------------------------------------------------------ */

/* root's key under e, else `deflt` (taken). */
static void echo_or(cJSON *e, const cJSON *root, const char *key, cJSON *deflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (v && !cJSON_IsNull(v)) {
        cJSON_Delete(deflt);
        cJSON_AddItemToObject(e, key, cJSON_Duplicate(v, 1));
    } else {
        cJSON_AddItemToObject(e, key, deflt);
    }
}

static cJSON *make_echo(const cJSON *root, int store) {
    cJSON *e = cJSON_CreateObject(), *o;
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(root, "reasoning"),
                *t = cJSON_GetObjectItemCaseSensitive(root, "text");
    echo_or(e, root, "instructions", cJSON_CreateNull());
    echo_or(e, root, "max_output_tokens", cJSON_CreateNull());
    echo_or(e, root, "max_tool_calls", cJSON_CreateNull());
    echo_or(e, root, "parallel_tool_calls", cJSON_CreateTrue());
    echo_or(e, root, "previous_response_id", cJSON_CreateNull());
    echo_or(e, root, "prompt_cache_key", cJSON_CreateNull());
    o = cJSON_AddObjectToObject(e, "reasoning");
    echo_or(o, r, "effort", cJSON_CreateNull());
    echo_or(o, r, "summary", cJSON_CreateNull());
    echo_or(e, root, "safety_identifier", cJSON_CreateNull());
    echo_or(e, root, "service_tier", cJSON_CreateString("default"));
    cJSON_AddBoolToObject(e, "store", store);
    cJSON_AddNullToObject(e, "temperature"); /* the values used: set once the request is read */
    cJSON_AddNullToObject(e, "top_p");
    o = cJSON_AddObjectToObject(e, "text");
    {
        cJSON *f = cJSON_CreateObject();
        cJSON_AddStringToObject(f, "type", "text");
        echo_or(o, t, "format", f);
    }
    echo_or(o, t, "verbosity", cJSON_CreateString("medium"));
    echo_or(e, root, "tool_choice", cJSON_CreateString("auto"));
    echo_or(e, root, "tools", cJSON_CreateArray());
    cJSON_AddNumberToObject(e, "top_logprobs", 0);
    echo_or(e, root, "truncation", cJSON_CreateString("disabled"));
    echo_or(e, root, "user", cJSON_CreateNull());
    echo_or(e, root, "metadata", cJSON_CreateObject());
    return e;
}

/* ---- the request ------------------------------------------------------------------------------ */

/* The conversation: previous_response_id's stored items, then this input's. */
static int conversation(srv *s, const cJSON *root, cJSON **items, int *n_prev, moe8_buf *err) {
    const cJSON *input = cJSON_GetObjectItemCaseSensitive(root, "input"),
                *prev = cJSON_GetObjectItemCaseSensitive(root, "previous_response_id"), *it;
    *items = NULL;
    *n_prev = 0;
    if (prev && !cJSON_IsNull(prev)) {
        if (!cJSON_IsString(prev))
            return moe8_oa_bad(err, "previous_response_id", "'previous_response_id' must be a string, got %s",
                               moe8_json_type_name(prev));
        if (!(*items = moe8_resp_store_items(s->responses, prev->valuestring))) {
            moe8_oa_error(err, T_INVALID, "previous_response_id", "previous_response_not_found",
                          "Previous response with id '%.100s' not found.", prev->valuestring);
            return 404; /* the status (OpenAI answers 400, vLLM 404) */
        }
        *n_prev = cJSON_GetArraySize(*items);
    } else {
        *items = cJSON_CreateArray();
    }
    if (cJSON_IsString(input)) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "type", "message");
        cJSON_AddStringToObject(m, "role", "user");
        cJSON_AddStringToObject(m, "content", input->valuestring);
        cJSON_AddItemToArray(*items, m);
    } else if (cJSON_IsArray(input)) {
        cJSON_ArrayForEach(it, input) cJSON_AddItemToArray(*items, cJSON_Duplicate(it, 1));
    } else if (input && !cJSON_IsNull(input)) {
        cJSON_Delete(*items);
        *items = NULL;
        return moe8_oa_bad(err, "input", "'input' must be a string or an array of items, got %s",
                           moe8_json_type_name(input));
    }
    return 0;
}

/* The chat completions request of Responses request root into *out; st gets the
 * echo, the namespace names and (store true) the conversation. `counting`:
 * input_tokens (only what the prompt holds). */
static int build(srv *s, const cJSON *root, resp_state *st, int counting, cJSON **out, moe8_buf *err) {
    const cJSON *ins = cJSON_GetObjectItemCaseSensitive(root, "instructions");
    cJSON *chat = cJSON_CreateObject(), *items = NULL, *tools = NULL;
    int rc, store = 1, n_prev = 0;
    *out = NULL;
    st->names = cJSON_CreateObject();
    st->output = cJSON_CreateArray();
    if ((rc = moe8_oa_get_bool(root, "store", &store, err))) goto fail;
    if (ins && !cJSON_IsNull(ins) && !cJSON_IsString(ins)) {
        rc = moe8_oa_bad(err, "instructions", "'instructions' must be a string, got %s", moe8_json_type_name(ins));
        goto fail;
    }
    if ((rc = conversation(s, root, &items, &n_prev, err))) goto fail;
    if ((rc = tools_to_chat(s, root, st, &tools, err)) || (rc = choice_to_chat(root, st, &tools, chat, err)))
        goto fail;
    if (tools) cJSON_AddItemToObject(chat, "tools", tools);
    tools = NULL;
    if ((rc = items_to_chat(s, st, items, n_prev, cJSON_IsString(ins) ? ins->valuestring : NULL,
                            cJSON_AddArrayToObject(chat, "messages"), err)) ||
        (rc = format_to_chat(root, chat, err)) || (rc = reasoning_to_chat(root, chat, err)))
        goto fail;
    if (!counting) copy_fields(root, chat);
    st->echo = make_echo(root, store);
    if (store && !counting) st->items = items;
    else cJSON_Delete(items);
    *out = chat;
    return 0;
fail:
    cJSON_Delete(tools);
    cJSON_Delete(items);
    cJSON_Delete(chat);
    return rc;
}

/* An error of the chat path in the Responses request's names. */
static void rename_error(moe8_buf *err) {
    static const char *const MAP[][2] = {
        {"response_format.json_schema.schema", "text.format.schema"},
        {"response_format.json_schema", "text.format"},
        {"response_format", "text.format"},
        {"max_completion_tokens", "max_output_tokens"},
        {"chat_template_kwargs", "reasoning"},
        {"messages", "input"},
        {".function.", "."},
    };
    cJSON *root = err->p ? cJSON_ParseWithLength(err->p, err->n) : NULL, *e = cJSON_GetObjectItem(root, "error");
    const char *keys[2] = {"param", "message"};
    for (int k = 0; e && k < 2; k++) {
        cJSON *v = cJSON_GetObjectItem(e, keys[k]);
        moe8_buf b = {0};
        if (!cJSON_IsString(v)) continue;
        for (const char *p = v->valuestring; *p;) {
            size_t i = 0;
            for (; i < sizeof MAP / sizeof *MAP; i++)
                if (!strncmp(p, MAP[i][0], strlen(MAP[i][0]))) break;
            if (i < sizeof MAP / sizeof *MAP) {
                moe8_buf_str(&b, MAP[i][1]);
                p += strlen(MAP[i][0]);
            } else {
                moe8_buf_add(&b, p++, 1);
            }
        }
        cJSON_SetValuestring(v, b.p ? b.p : "");
        moe8_buf_free(&b);
    }
    if (e && cJSON_IsString(cJSON_GetObjectItem(e, "message")) &&
        strstr(cJSON_GetObjectItem(e, "message")->valuestring, "maximum context length")) /* OpenAI's code */
        cJSON_ReplaceItemInObject(e, "code", cJSON_CreateString("context_length_exceeded"));
    if (e) {
        char *txt = cJSON_PrintUnformatted(root);
        if (txt) {
            err->n = 0;
            moe8_buf_str(err, txt);
        }
        free(txt);
    }
    cJSON_Delete(root);
}

void moe8_resp_state_free(void *p) {
    resp_state *st = p;
    if (!st) return;
    cJSON_Delete(st->echo);
    cJSON_Delete(st->names);
    cJSON_Delete(st->items);
    cJSON_Delete(st->output);
    cJSON_Delete(st->call);
    moe8_buf_free(&st->text);
    moe8_buf_free(&st->ws);
    free(st);
}

int moe8_resp_parse(srv *s, const char *body, size_t n, job **out, moe8_buf *err) {
    cJSON *root, *chat = NULL;
    resp_state *st;
    char *txt = NULL;
    int rc;
    *out = NULL;
    if (!(root = moe8_oa_parse_object(body, n, err, &rc))) return rc;
    if (!(st = calloc(1, sizeof *st))) {
        cJSON_Delete(root);
        return moe8_oa_bad(err, NULL, "out of memory");
    }
    if (!(rc = check_fields(s, root, err)) && !(rc = build(s, root, st, 0, &chat, err))) {
        if (!(txt = cJSON_PrintUnformatted(chat))) rc = moe8_oa_bad(err, NULL, "out of memory");
        else if ((rc = moe8_oa_parse_completion(s, txt, strlen(txt), &moe8_oa_responses, out, err)))
            rename_error(err);
    }
    free(txt);
    cJSON_Delete(chat);
    cJSON_Delete(root);
    if (rc) {
        moe8_resp_state_free(st);
        return rc;
    }
    (*out)->ext = st;
    (*out)->ext_free = moe8_resp_state_free;
    (*out)->id[4] = '_'; /* "resp_...", as OpenAI's */
    cJSON_ReplaceItemInObject(st->echo, "temperature", cJSON_CreateNumber((*out)->rq.sampling.temperature));
    cJSON_ReplaceItemInObject(st->echo, "top_p", cJSON_CreateNumber((*out)->rq.sampling.top_p));
    return 0;
}

int moe8_resp_input_tokens(srv *s, const char *body, size_t n, moe8_buf *out) {
    cJSON *root, *chat = NULL;
    resp_state st = {0};
    int32_t *ids = NULL, n_ids = 0;
    int rc;
    if (!(root = moe8_oa_parse_object(body, n, out, &rc))) return rc;
    if (!(rc = check_fields(s, root, out)) && !(rc = build(s, root, &st, 1, &chat, out)) &&
        (rc = moe8_oa_chat_prompt(s, chat, 1, 0, &ids, &n_ids, NULL, NULL, out)))
        rename_error(out);
    cJSON_Delete(st.echo);
    cJSON_Delete(st.names);
    cJSON_Delete(st.output);
    cJSON_Delete(chat);
    cJSON_Delete(root);
    free(ids);
    if (rc) return rc;
    out->n = 0;
    moe8_buf_printf(out, "{\"object\":\"response.input_tokens\",\"input_tokens\":%d}", n_ids);
    return 200;
}

int moe8_resp_get(srv *s, const char *id, size_t n, moe8_buf *out) {
    char key[128], *r;
    snprintf(key, sizeof key, "%.*s", (int)(n < 120 ? n : 120), id);
    if (n < 120 && (r = moe8_resp_store_response(s->responses, key))) {
        moe8_buf_str(out, r);
        free(r);
        return 200;
    }
    moe8_oa_error(out, T_INVALID, "response_id", "not_found", "Response with id '%s' not found.", key);
    return 404;
}

int moe8_resp_delete(srv *s, const char *id, size_t n, moe8_buf *out) {
    char key[128];
    snprintf(key, sizeof key, "%.*s", (int)(n < 120 ? n : 120), id);
    if (n < 120 && moe8_resp_store_delete(s->responses, key)) {
        moe8_buf_str(out, "{\"id\":");
        moe8_buf_json_str(out, key, strlen(key), 0);
        moe8_buf_str(out, ",\"object\":\"response\",\"deleted\":true}");
        return 200;
    }
    moe8_oa_error(out, T_INVALID, "response_id", "not_found", "Response with id '%s' not found.", key);
    return 404;
}
