/*
 * api_messages.c — Anthropic's Messages API in moe8 serve: POST /v1/messages
 * (also with ?beta=true) and /v1/messages/count_tokens (endpoints.c's rows).
 *
 * A request is translated into a chat completions request and runs the chat
 * path (openai.c with chat's prompt and <think> split, tools.c):
 *   system (a string or text blocks; Claude Code's per-request
 *   "x-anthropic-billing-header" block dropped, so the prefix cache holds)
 *   and role "system" messages -> system messages; text blocks joined with
 *   "\n"; tool_use -> the assistant's tool_calls (input as the arguments);
 *   tool_result -> a "tool" message (is_error: its text after "Error: ");
 *   thinking -> the assistant's reasoning_content (redacted_thinking
 *   dropped); image, document and other blocks refused naming the block;
 *   tools with input_schema -> function tools (server tools such as
 *   web_search_20250305 dropped with a log line); tool_choice auto / any /
 *   tool / none -> auto / required / the named function / none, with
 *   disable_parallel_tool_use -> parallel_tool_calls false; thinking enabled
 *   or adaptive -> the template's enable_thinking true (budget_tokens and
 *   display accepted, not enforced), disabled or absent (Anthropic's
 *   default) -> false; stop_sequences -> stop; max_tokens
 *   (required; past the context's rest it is cut to it, and an answer that
 *   reaches that end stops with "model_context_window_exceeded", as
 *   Anthropic's newer models do), temperature, top_p, top_k as they are.
 * Fields (FIELDS below) are honoured, accepted and ignored (metadata,
 * output_config, context_management, cache_control, service_tier, ...), or
 * refused naming the field; an unknown one is ignored with a log line, as
 * fields.c does for the OpenAI APIs.
 *
 * The answer: the message object {id "msg_...", type, role, model, content
 * [thinking, text, tool_use {id "toolu_...", name, input}], stop_reason
 * (end_turn, max_tokens, stop_sequence, tool_use,
 * model_context_window_exceeded), stop_sequence, usage}, or its events
 * (message_start, ping, content_block_start / _delta / _stop with
 * text_delta, thinking_delta and input_json_delta, message_delta with the
 * cumulative usage, message_stop), each with its "event:" line. No text is
 * shown once a tool call began (vLLM's rule): text after the calls, and a
 * call broken off by max_tokens, which the chat path gives back as content,
 * never reach the client. A thinking block's signature is "" (nothing is
 * signed; a signature sent back is ignored).
 * usage.input_tokens counts the prompt tokens not read from the prefix
 * cache; cache_read_input_tokens those that were.
 * Errors: every part of the server writes OpenAI's body; this row's `error`
 * (moe8_msg_error) rewrites it as {"type": "error", "error": {type,
 * message}} with Anthropic's type for the status, and as an "error" event
 * in a stream.
 *
 * Does not: sample, render or parse tool calls itself (the chat path does);
 * know which stop string ended a request exactly (the scheduler does not
 * say: the last token's bytes ending in a piece of one is taken for it).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "io/json_util.h"
#include "server/api.h"

/* A job's state in j->api_state: a stream's open block kind and next index,
 * an error event sent; where the text is cut (a whole answer); max_tokens cut
 * to the context's rest. */
enum { ST_OPEN, ST_NEXT, ST_FAILED, ST_CUT, ST_CLAMPED };

/* ---- errors: OpenAI's body in Anthropic's shape -------------------------------------------- */

static const char *error_type(int status) {
    switch (status) {
    case 401: return "authentication_error";
    case 402: return "billing_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 408: return "timeout_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 500: return "api_error";
    case 503: case 529: return "overloaded_error";
    case 504: return "timeout_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
    }
}

void moe8_msg_error(int status, int sse, moe8_buf *body) {
    cJSON *in = NULL, *out = cJSON_CreateObject(), *e;
    const char *msg;
    char *txt;
    moe8_json_parse(body->p ? body->p : "", body->n, "error", &in, NULL);
    msg = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(in, "error"),
                                                                 "message"));
    cJSON_AddStringToObject(out, "type", "error");
    e = cJSON_AddObjectToObject(out, "error");
    cJSON_AddStringToObject(e, "type", error_type(status));
    cJSON_AddStringToObject(e, "message", msg ? msg : "the request failed");
    txt = cJSON_PrintUnformatted(out);
    body->n = 0;
    if (sse) moe8_buf_str(body, "event: error\ndata: ");
    moe8_buf_str(body, txt ? txt : "{\"type\":\"error\"}");
    if (sse) moe8_buf_str(body, "\n\n");
    free(txt);
    cJSON_Delete(in);
    cJSON_Delete(out);
}

/* ---- fields ------------------------------------------------------------------------------- */

static const oa_field FIELDS[] = {
    {"model", 0, OA_HONOURED, NULL},
    {"messages", 0, OA_HONOURED, NULL},
    {"system", 0, OA_HONOURED, NULL},
    {"max_tokens", 0, OA_HONOURED, NULL},
    {"stop_sequences", 0, OA_HONOURED, NULL},
    {"stream", 0, OA_HONOURED, NULL},
    {"temperature", 0, OA_HONOURED, NULL},
    {"top_p", 0, OA_HONOURED, NULL},
    {"top_k", 0, OA_HONOURED, NULL},
    {"tools", 0, OA_HONOURED, NULL},
    {"tool_choice", 0, OA_HONOURED, NULL},
    {"thinking", 0, OA_HONOURED, NULL},
    {"metadata", 0, OA_IGNORED, NULL},
    {"output_config", 0, OA_IGNORED, NULL},
    {"context_management", 0, OA_IGNORED, NULL},
    {"cache_control", 0, OA_IGNORED, NULL},
    {"service_tier", 0, OA_IGNORED, NULL},
    {"container", 0, OA_IGNORED, NULL},
    {"inference_geo", 0, OA_IGNORED, NULL},
    {"speed", 0, OA_IGNORED, NULL},
    {"diagnostics", 0, OA_IGNORED, NULL},
    {"user_profile_id", 0, OA_IGNORED, NULL},
    {"workspace_id", 0, OA_IGNORED, NULL},
    {"mcp_servers", 0, OA_REFUSED, "MCP servers are not supported"},
};

static int check_fields(srv *s, const cJSON *root, moe8_buf *err) {
    return moe8_oa_field_policy(s, root, FIELDS, sizeof FIELDS / sizeof *FIELDS, 0, "messages", err);
}

/* ---- request: blocks ------------------------------------------------------------------------ */

static const cJSON *get(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }

/* A block's type, or NULL (the 400 written) when it has none. */
static const char *block_type(const cJSON *b, const char *param, moe8_buf *err) {
    const cJSON *ty = get(b, "type");
    if (!cJSON_IsObject(b)) {
        moe8_oa_bad(err, param, "'%s' must be a content block object, got %s", param, moe8_json_type_name(b));
        return NULL;
    }
    if (!cJSON_IsString(ty)) {
        moe8_oa_bad(err, param, "'%s.type' must be a string", param);
        return NULL;
    }
    return ty->valuestring;
}

/* The 400 for a block this server does not read. */
static int refuse_block(const char *type, const char *param, moe8_buf *err) {
    if (!strcmp(type, "image") || !strcmp(type, "document"))
        return moe8_oa_bad(err, param, "'%s': %s blocks are not supported (this server reads text only)", param,
                           type);
    return moe8_oa_bad(err, param, "'%s': blocks of type '%.60s' are not supported here", param, type);
}

/* content (a string, or text blocks) appended to t, blocks joined by "\n";
 * skip_billing: Claude Code's "x-anthropic-billing-header" blocks dropped. */
static int text_of(const cJSON *content, const char *param, int skip_billing, moe8_buf *t, moe8_buf *err) {
    const cJSON *b;
    int k = 0, n_text = 0;
    if (cJSON_IsString(content)) return moe8_buf_str(t, content->valuestring), 0;
    if (!cJSON_IsArray(content))
        return moe8_oa_bad(err, param, "'%s' must be a string or an array of text blocks, got %s", param,
                           moe8_json_type_name(content));
    cJSON_ArrayForEach(b, content) {
        char p[160];
        const char *ty;
        const cJSON *tx = get(b, "text");
        snprintf(p, sizeof p, "%s[%d]", param, k++);
        if (!(ty = block_type(b, p, err))) return 400;
        if (strcmp(ty, "text")) return refuse_block(ty, p, err);
        if (!cJSON_IsString(tx)) return moe8_oa_bad(err, p, "'%s.text' must be a string", p);
        if (skip_billing && !strncmp(tx->valuestring, "x-anthropic-billing-header", 26)) continue;
        if (n_text++) moe8_buf_str(t, "\n");
        moe8_buf_str(t, tx->valuestring);
    }
    return 0;
}

static void add_message(cJSON *msgs, const char *role, const char *content) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", role);
    cJSON_AddStringToObject(m, "content", content);
    cJSON_AddItemToArray(msgs, m);
}

/* A tool_result block as a "tool" message. */
static int tool_result(const cJSON *b, const char *p, cJSON *msgs, moe8_buf *err) {
    const cJSON *id = get(b, "tool_use_id"), *c = get(b, "content");
    moe8_buf t = {0};
    char pc[200];
    cJSON *m;
    int rc;
    if (!cJSON_IsString(id)) return moe8_oa_bad(err, p, "'%s.tool_use_id' must be a string", p);
    if (cJSON_IsTrue(get(b, "is_error"))) moe8_buf_str(&t, "Error: ");
    snprintf(pc, sizeof pc, "%s.content", p);
    if (c && !cJSON_IsNull(c) && (rc = text_of(c, pc, 0, &t, err))) {
        moe8_buf_free(&t);
        return rc;
    }
    m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "tool");
    cJSON_AddStringToObject(m, "tool_call_id", id->valuestring);
    cJSON_AddStringToObject(m, "content", t.p ? t.p : "");
    cJSON_AddItemToArray(msgs, m);
    moe8_buf_free(&t);
    return 0;
}

/* A tool_use block as one of the assistant's tool_calls. */
static int tool_use(const cJSON *b, const char *p, cJSON *calls, moe8_buf *err) {
    const cJSON *id = get(b, "id"), *name = get(b, "name"), *in = get(b, "input");
    cJSON *c, *fn;
    if (!cJSON_IsString(id) || !cJSON_IsString(name))
        return moe8_oa_bad(err, p, "'%s' needs 'id' and 'name' strings", p);
    if (in && !cJSON_IsNull(in) && !cJSON_IsObject(in))
        return moe8_oa_bad(err, p, "'%s.input' must be an object, got %s", p, moe8_json_type_name(in));
    c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "id", id->valuestring);
    cJSON_AddStringToObject(c, "type", "function");
    fn = cJSON_AddObjectToObject(c, "function");
    cJSON_AddStringToObject(fn, "name", name->valuestring);
    cJSON_AddItemToObject(fn, "arguments", in && cJSON_IsObject(in) ? cJSON_Duplicate(in, 1) : cJSON_CreateObject());
    cJSON_AddItemToArray(calls, c);
    return 0;
}

/* One message's blocks into chat messages: a user's text (flushed before
 * each tool result) and tool results; an assistant's text, reasoning and
 * calls as one message. */
static int blocks(const cJSON *content, int i, int assistant, cJSON *msgs, moe8_buf *err) {
    moe8_buf text = {0}, reason = {0};
    cJSON *calls = cJSON_CreateArray();
    const cJSON *b;
    int k = 0, rc = 0;
    cJSON_ArrayForEach(b, content) {
        char p[96];
        const char *ty;
        snprintf(p, sizeof p, "messages[%d].content[%d]", i, k++);
        if (!(ty = block_type(b, p, err))) {
            rc = 400;
            break;
        }
        if (!strcmp(ty, "text")) {
            const cJSON *tx = get(b, "text");
            if (!cJSON_IsString(tx)) {
                rc = moe8_oa_bad(err, p, "'%s.text' must be a string", p);
                break;
            }
            if (text.n) moe8_buf_str(&text, "\n");
            moe8_buf_str(&text, tx->valuestring);
        } else if (assistant && !strcmp(ty, "thinking")) {
            const cJSON *th = get(b, "thinking");
            if (cJSON_IsString(th)) moe8_buf_str(&reason, th->valuestring);
        } else if (assistant && !strcmp(ty, "redacted_thinking")) {
            continue;
        } else if (assistant && !strcmp(ty, "tool_use")) {
            if ((rc = tool_use(b, p, calls, err))) break;
        } else if (!assistant && !strcmp(ty, "tool_result")) {
            if (text.n) add_message(msgs, "user", text.p);
            text.n = 0;
            if ((rc = tool_result(b, p, msgs, err))) break;
        } else {
            rc = refuse_block(ty, p, err);
            break;
        }
    }
    if (!rc && assistant) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "assistant");
        cJSON_AddStringToObject(m, "content", text.p ? text.p : "");
        if (reason.n) cJSON_AddStringToObject(m, "reasoning_content", reason.p);
        if (cJSON_GetArraySize(calls)) cJSON_AddItemToObject(m, "tool_calls", calls), calls = NULL;
        cJSON_AddItemToArray(msgs, m);
    } else if (!rc && (text.n || !k)) {
        add_message(msgs, "user", text.p ? text.p : "");
    }
    cJSON_Delete(calls);
    moe8_buf_free(&text);
    moe8_buf_free(&reason);
    return rc;
}

/* system and messages into chat's messages. */
static int messages(const cJSON *root, cJSON *out, moe8_buf *err) {
    const cJSON *sys = get(root, "system"), *ms = get(root, "messages"), *m;
    cJSON *msgs = cJSON_AddArrayToObject(out, "messages");
    int i = 0, rc;
    if (sys && !cJSON_IsNull(sys)) {
        moe8_buf t = {0};
        if ((rc = text_of(sys, "system", 1, &t, err))) return moe8_buf_free(&t), rc;
        add_message(msgs, "system", t.p ? t.p : "");
        moe8_buf_free(&t);
    }
    if (!ms) return moe8_oa_bad(err, "messages", "'messages' is required");
    if (!cJSON_IsArray(ms)) return moe8_oa_bad(err, "messages", "'messages' must be an array, got %s", moe8_json_type_name(ms));
    if (!cJSON_GetArraySize(ms)) return moe8_oa_bad(err, "messages", "'messages' must not be empty");
    cJSON_ArrayForEach(m, ms) {
        const cJSON *role = get(m, "role"), *c = get(m, "content");
        char p[64];
        snprintf(p, sizeof p, "messages[%d]", i);
        if (!cJSON_IsObject(m)) return moe8_oa_bad(err, p, "'%s' must be an object {role, content}", p);
        if (!cJSON_IsString(role) || (strcmp(role->valuestring, "user") && strcmp(role->valuestring, "assistant") &&
                                      strcmp(role->valuestring, "system")))
            return moe8_oa_bad(err, p, "'%s.role' must be \"user\", \"assistant\" or \"system\"", p);
        snprintf(p, sizeof p, "messages[%d].content", i);
        if (!strcmp(role->valuestring, "system")) {
            moe8_buf t = {0};
            if ((rc = text_of(c, p, 1, &t, err))) return moe8_buf_free(&t), rc;
            add_message(msgs, "system", t.p ? t.p : "");
            moe8_buf_free(&t);
        } else if (cJSON_IsString(c)) {
            add_message(msgs, role->valuestring, c->valuestring);
        } else if (cJSON_IsArray(c)) {
            if ((rc = blocks(c, i, !strcmp(role->valuestring, "assistant"), msgs, err))) return rc;
        } else {
            return moe8_oa_bad(err, p, "'%s' must be a string or an array of content blocks, got %s", p,
                               moe8_json_type_name(c));
        }
        i++;
    }
    return 0;
}

/* ---- request: tools, choices, thinking, the rest --------------------------------------------- */

/* Client tools as function tools; versioned server tools dropped (logged). */
static int tools(srv *s, const cJSON *root, cJSON *out, int *n_tools, moe8_buf *err) {
    const cJSON *ts = get(root, "tools"), *t;
    cJSON *a;
    char dropped[300] = "";
    size_t nd = 0;
    int k = 0;
    *n_tools = 0;
    if (!ts || cJSON_IsNull(ts)) return 0;
    if (!cJSON_IsArray(ts)) return moe8_oa_bad(err, "tools", "'tools' must be an array, got %s", moe8_json_type_name(ts));
    a = cJSON_AddArrayToObject(out, "tools");
    cJSON_ArrayForEach(t, ts) {
        const cJSON *ty = get(t, "type"), *name = get(t, "name"), *sc = get(t, "input_schema"), *d = get(t, "description");
        char p[48];
        cJSON *f, *fn;
        snprintf(p, sizeof p, "tools[%d]", k++);
        if (!cJSON_IsObject(t)) return moe8_oa_bad(err, p, "'%s' must be an object", p);
        if (ty && !cJSON_IsNull(ty) && !(cJSON_IsString(ty) && !strcmp(ty->valuestring, "custom"))) {
            const int w = snprintf(dropped + nd, sizeof dropped - nd, "%s'%.40s'", nd ? ", " : "",
                                   cJSON_IsString(ty) ? ty->valuestring : "?");
            if (w > 0 && (size_t)w < sizeof dropped - nd) nd += (size_t)w;
            continue;
        }
        if (!cJSON_IsString(name) || !name->valuestring[0])
            return moe8_oa_bad(err, p, "'%s.name' must be a non-empty string", p);
        if (!cJSON_IsObject(sc)) return moe8_oa_bad(err, p, "'%s.input_schema' must be a JSON Schema object", p);
        f = cJSON_CreateObject();
        cJSON_AddStringToObject(f, "type", "function");
        fn = cJSON_AddObjectToObject(f, "function");
        cJSON_AddStringToObject(fn, "name", name->valuestring);
        if (cJSON_IsString(d)) cJSON_AddStringToObject(fn, "description", d->valuestring);
        cJSON_AddItemToObject(fn, "parameters", cJSON_Duplicate(sc, 1));
        cJSON_AddItemToArray(a, f);
        (*n_tools)++;
    }
    if (nd) {
        char line[400];
        snprintf(line, sizeof line, "warning: messages request: server tool%s %s dropped (not supported)",
                 strchr(dropped, ',') ? "s" : "", dropped);
        moe8_srv_log(s, "%s", line);
    }
    if (!*n_tools) cJSON_DeleteItemFromObject(out, "tools");
    return 0;
}

static int tool_choice(const cJSON *root, cJSON *out, int n_tools, moe8_buf *err) {
    const cJSON *tc = get(root, "tool_choice"), *ty, *dp;
    const char *t;
    if (!tc || cJSON_IsNull(tc)) return 0;
    ty = get(tc, "type");
    if (!cJSON_IsObject(tc) || !cJSON_IsString(ty))
        return moe8_oa_bad(err, "tool_choice", "'tool_choice' must be an object {\"type\": \"auto\" | \"any\" | "
                           "\"tool\" | \"none\"}");
    t = ty->valuestring;
    dp = get(tc, "disable_parallel_tool_use");
    if (dp && !cJSON_IsNull(dp) && !cJSON_IsBool(dp))
        return moe8_oa_bad(err, "tool_choice.disable_parallel_tool_use", "'tool_choice.disable_parallel_tool_use' "
                           "must be a boolean");
    if (cJSON_IsTrue(dp)) cJSON_AddFalseToObject(out, "parallel_tool_calls");
    if (!strcmp(t, "none")) {
        if (n_tools) cJSON_AddStringToObject(out, "tool_choice", "none");
    } else if (!strcmp(t, "auto")) {
        if (n_tools) cJSON_AddStringToObject(out, "tool_choice", "auto");
    } else if (!strcmp(t, "any") || !strcmp(t, "tool")) {
        const cJSON *name = get(tc, "name");
        if (!n_tools) return moe8_oa_bad(err, "tool_choice", "'tool_choice' \"%s\" needs 'tools'", t);
        if (!strcmp(t, "any")) cJSON_AddStringToObject(out, "tool_choice", "required");
        else if (!cJSON_IsString(name)) return moe8_oa_bad(err, "tool_choice.name", "'tool_choice.name' must be a string");
        else {
            cJSON *c = cJSON_AddObjectToObject(out, "tool_choice");
            cJSON_AddStringToObject(c, "type", "function");
            cJSON_AddStringToObject(cJSON_AddObjectToObject(c, "function"), "name", name->valuestring);
        }
    } else {
        return moe8_oa_bad(err, "tool_choice.type", "'tool_choice.type' must be \"auto\", \"any\", \"tool\" or "
                           "\"none\", got '%.40s'", t);
    }
    return 0;
}

/* thinking -> the template's enable_thinking (absent: off, Anthropic's default). */
static int thinking(const cJSON *root, cJSON *out, moe8_buf *err) {
    const cJSON *th = get(root, "thinking"), *ty;
    int on = 0;
    if (th && !cJSON_IsNull(th)) {
        ty = get(th, "type");
        if (!cJSON_IsObject(th) || !cJSON_IsString(ty))
            return moe8_oa_bad(err, "thinking", "'thinking' must be an object {\"type\": \"enabled\" | \"adaptive\" | "
                               "\"disabled\"}");
        if (!strcmp(ty->valuestring, "enabled") || !strcmp(ty->valuestring, "adaptive")) on = 1;
        else if (strcmp(ty->valuestring, "disabled"))
            return moe8_oa_bad(err, "thinking.type", "'thinking.type' must be \"enabled\", \"adaptive\" or "
                               "\"disabled\", got '%.40s'", ty->valuestring);
    }
    cJSON_AddBoolToObject(cJSON_AddObjectToObject(out, "chat_template_kwargs"), "enable_thinking", on);
    return 0;
}

/* The request's body as a chat completions body (*out, malloc'd text). */
static int translate(srv *s, const cJSON *root, int count, char **out, moe8_buf *err) {
    static const char *const SAME[] = {"model", "temperature", "top_p", "top_k", "stream", NULL};
    cJSON *c = cJSON_CreateObject();
    const cJSON *v;
    int rc, n_tools = 0;
    *out = NULL;
    if ((rc = check_fields(s, root, err)) || (rc = messages(root, c, err)) || (rc = tools(s, root, c, &n_tools, err)) ||
        (rc = tool_choice(root, c, n_tools, err)) || (rc = thinking(root, c, err)))
        goto done;
    for (int i = 0; !count && SAME[i]; i++)
        if ((v = get(root, SAME[i]))) cJSON_AddItemToObject(c, SAME[i], cJSON_Duplicate(v, 1));
    if (count) {
        if ((v = get(root, "model"))) cJSON_AddItemToObject(c, "model", cJSON_Duplicate(v, 1));
    } else if (!(v = get(root, "max_tokens")) || cJSON_IsNull(v)) {
        rc = moe8_oa_bad(err, "max_tokens", "'max_tokens' is required");
        goto done;
    } else {
        cJSON_AddItemToObject(c, "max_tokens", cJSON_Duplicate(v, 1));
    }
    if (!count && (v = get(root, "stop_sequences")) && !cJSON_IsNull(v)) {
        const cJSON *x;
        if (!cJSON_IsArray(v)) {
            rc = moe8_oa_bad(err, "stop_sequences", "'stop_sequences' must be an array of strings");
            goto done;
        }
        cJSON_ArrayForEach(x, v) if (!cJSON_IsString(x) || !x->valuestring[0]) {
            rc = moe8_oa_bad(err, "stop_sequences", "'stop_sequences' must hold non-empty strings");
            goto done;
        }
        if (cJSON_GetArraySize(v) > MOE8_MAX_STOP_STRINGS) {
            rc = moe8_oa_bad(err, "stop_sequences", "'stop_sequences' holds %d strings; at most %d",
                             cJSON_GetArraySize(v), MOE8_MAX_STOP_STRINGS);
            goto done;
        }
        if (cJSON_GetArraySize(v)) cJSON_AddItemToObject(c, "stop", cJSON_Duplicate(v, 1));
    }
    if (!(*out = cJSON_PrintUnformatted(c))) rc = moe8_oa_bad(err, NULL, "out of memory");
done:
    cJSON_Delete(c);
    return rc;
}

/* POST /v1/messages: the body into a chat job of this API. */
int moe8_msg_parse(srv *s, const char *body, size_t n, job **j, moe8_buf *err) {
    cJSON *root;
    char *chat = NULL;
    double asked = 0;
    int rc;
    *j = NULL;
    if (!(root = moe8_oa_parse_object(body, n, err, &rc))) return rc;
    rc = translate(s, root, 0, &chat, err);
    if (cJSON_IsNumber(get(root, "max_tokens"))) asked = get(root, "max_tokens")->valuedouble;
    cJSON_Delete(root);
    if (!rc) rc = moe8_oa_parse_completion(s, chat, strlen(chat), &moe8_oa_messages, j, err);
    cJSON_free(chat);
    if (!rc && *j) {
        (*j)->id[3] = '_'; /* "msg_...", Anthropic's form */
        (*j)->api_state[ST_CLAMPED] = (*j)->rq.max_tokens < asked;
    }
    return rc;
}

/* POST /v1/messages/count_tokens: {"input_tokens": n}, the prompt as a request would have it. */
int moe8_msg_count(srv *s, const char *body, size_t n, job **j, moe8_buf *out) {
    cJSON *root, *chat = NULL;
    char *txt = NULL;
    int32_t *ids = NULL, n_ids = 0;
    int rc;
    *j = NULL;
    if (!(root = moe8_oa_parse_object(body, n, out, &rc))) return rc;
    rc = translate(s, root, 1, &txt, out);
    cJSON_Delete(root);
    if (!rc && !(chat = cJSON_Parse(txt))) rc = moe8_oa_bad(out, NULL, "out of memory");
    if (!rc) {
        const cJSON *m = get(chat, "model");
        if (cJSON_IsString(m) && strcmp(m->valuestring, s->model_name)) {
            moe8_oa_error(out, "invalid_request_error", "model", "model_not_found", "the model '%s' does not "
                          "exist; this server serves '%s'", m->valuestring, s->model_name);
            rc = 404;
        }
    }
    if (!rc) rc = moe8_oa_chat_prompt(s, chat, 1, 0, &ids, &n_ids, NULL, NULL, out);
    if (!rc) {
        out->n = 0;
        moe8_buf_printf(out, "{\"input_tokens\":%d}", n_ids);
    }
    free(ids);
    cJSON_free(txt);
    cJSON_Delete(chat);
    return rc ? rc : 200;
}

/* ---- output ------------------------------------------------------------------------------- */

enum { B_NONE, B_THINKING, B_TEXT, B_TOOL };

/* A string field of the chat path's tool calls (moe8_oa_json_text writes them
 * raw: JSON string text) as a malloc'd string; "" when absent. */
static char *text_value(const cJSON *v) {
    cJSON *x;
    char *r;
    if (cJSON_IsString(v)) return strdup(v->valuestring);
    if (!cJSON_IsRaw(v) || !(x = cJSON_Parse(v->valuestring))) return strdup("");
    r = strdup(cJSON_IsString(x) ? x->valuestring : "");
    cJSON_Delete(x);
    return r;
}

/* A tool call's id in Anthropic's form: "call_X" -> "toolu_X". */
static void tool_id(const char *id, char *out, size_t cap) {
    snprintf(out, cap, "toolu_%s", !strncmp(id, "call_", 5) ? id + 5 : id);
}

/* The stop string that ended j, or NULL: see the opening comment. */
static const char *stop_sequence(srv *s, const job *j) {
    size_t nb = 0;
    const char *b;
    if (!j->finish_reason || strcmp(j->finish_reason, "stop") || !j->rq.n_stop || j->finish_text || !j->n_gen)
        return NULL;
    if (!(b = moe8_tokenizer_token_bytes(s->tok, j->last_token, &nb, NULL))) return NULL;
    for (int i = 0; i < j->rq.n_stop; i++) {
        const char *st = j->stop_store[i];
        const size_t L = strlen(st);
        for (size_t p = 1; p <= nb; p++) {
            const size_t k = L < p ? L : p;
            if (!memcmp(b + p - k, st + L - k, k)) return st;
        }
    }
    return NULL;
}

static const char *stop_reason(srv *s, const job *j) {
    const char *f = j->finish_reason ? j->finish_reason : "stop";
    if (!strcmp(f, "tool_calls")) return "tool_use";
    if (!strcmp(f, "length"))
        return j->api_state[ST_CLAMPED] && j->n_gen >= j->rq.max_tokens ? "model_context_window_exceeded" : "max_tokens";
    return stop_sequence(s, j) ? "stop_sequence" : "end_turn";
}

static cJSON *usage(const job *j, int start) {
    cJSON *u = cJSON_CreateObject();
    const int32_t cached = start ? 0 : j->n_cached;
    cJSON_AddNumberToObject(u, "input_tokens", j->n_prompt - cached);
    cJSON_AddNumberToObject(u, "output_tokens", start ? 0 : j->n_gen);
    cJSON_AddNumberToObject(u, "cache_creation_input_tokens", 0);
    cJSON_AddNumberToObject(u, "cache_read_input_tokens", cached);
    return u;
}

/* The message object's head: id, type, role, model, content (returned). */
static cJSON *message_head(srv *s, const job *j, cJSON *root) {
    cJSON_AddStringToObject(root, "id", j->id);
    cJSON_AddStringToObject(root, "type", "message");
    cJSON_AddStringToObject(root, "role", "assistant");
    cJSON_AddStringToObject(root, "model", s->model_name);
    return cJSON_AddArrayToObject(root, "content");
}

/* root as "event: <type>\ndata: <json>\n\n" into out; root freed. */
static void event(moe8_buf *out, cJSON *root) {
    char *txt = cJSON_PrintUnformatted(root);
    moe8_buf_printf(out, "event: %s\ndata: %s\n\n", cJSON_GetStringValue(get(root, "type")), txt ? txt : "{}");
    free(txt);
    cJSON_Delete(root);
}

static cJSON *typed(const char *type) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", type);
    return o;
}

static void msg_start(srv *s, job *j) {
    cJSON *root, *m;
    if (!j->stream) return;
    j->api_state[ST_OPEN] = B_NONE;
    j->api_state[ST_NEXT] = 0;
    root = typed("message_start");
    m = cJSON_AddObjectToObject(root, "message");
    message_head(s, j, m);
    cJSON_AddNullToObject(m, "stop_reason");
    cJSON_AddNullToObject(m, "stop_sequence");
    cJSON_AddItemToObject(m, "usage", usage(j, 1));
    event(&j->out, root);
    event(&j->out, typed("ping"));
}

static void block_stop(job *j) {
    cJSON *e;
    if (j->api_state[ST_OPEN] == B_NONE) return;
    e = typed("content_block_stop");
    cJSON_AddNumberToObject(e, "index", j->api_state[ST_NEXT] - 1);
    event(&j->out, e);
    j->api_state[ST_OPEN] = B_NONE;
}

/* Open a block of `kind` (closing the open one) unless it is open already. */
static void block_start(job *j, int kind, const char *id, const char *name) {
    cJSON *e, *b;
    if (j->api_state[ST_OPEN] == kind && kind != B_TOOL) return;
    block_stop(j);
    e = typed("content_block_start");
    cJSON_AddNumberToObject(e, "index", j->api_state[ST_NEXT]++);
    b = cJSON_AddObjectToObject(e, "content_block");
    if (kind == B_THINKING) {
        cJSON_AddStringToObject(b, "type", "thinking");
        cJSON_AddStringToObject(b, "thinking", "");
        cJSON_AddStringToObject(b, "signature", "");
    } else if (kind == B_TEXT) {
        cJSON_AddStringToObject(b, "type", "text");
        cJSON_AddStringToObject(b, "text", "");
    } else {
        char tid[64];
        tool_id(id ? id : "", tid, sizeof tid);
        cJSON_AddStringToObject(b, "type", "tool_use");
        cJSON_AddStringToObject(b, "id", tid);
        cJSON_AddStringToObject(b, "name", name ? name : "");
        cJSON_AddObjectToObject(b, "input");
    }
    event(&j->out, e);
    j->api_state[ST_OPEN] = kind;
}

static void block_delta(job *j, const char *type, const char *key, const char *p, size_t n) {
    cJSON *e = typed("content_block_delta"), *d;
    cJSON_AddNumberToObject(e, "index", j->api_state[ST_NEXT] - 1);
    d = cJSON_AddObjectToObject(e, "delta");
    cJSON_AddStringToObject(d, "type", type);
    moe8_oa_json_text(d, key, p, n);
    event(&j->out, e);
}

/* Chat's <think> split; a whole answer's text is cut where its first tool
 * call began (ST_CUT: the text's length + 1), as a stream shows no text once
 * a call began: text after the calls, and a call broken off by max_tokens
 * (which the chat path gives back as text), are never shown. */
static void msg_split(srv *s, job *j, const char *txt, size_t n, moe8_buf *content, moe8_buf *reason, int final) {
    if (!j->stream && !j->api_state[ST_CUT] && cJSON_GetArraySize(j->calls))
        j->api_state[ST_CUT] = (int)j->text.n + 1;
    moe8_oa_chat_split(s, j, txt, n, content, reason, final);
}

/* A stream's step: reasoning, text, then tool-call deltas, each in its block. */
static void msg_stream(srv *s, job *j, const oa_piece *p) {
    const cJSON *d;
    (void)s;
    if (p->n_reason) {
        block_start(j, B_THINKING, NULL, NULL);
        block_delta(j, "thinking_delta", "thinking", p->reason, p->n_reason);
    }
    if (p->n_content && !j->api_state[ST_CUT]) { /* no text once a call began */
        block_start(j, B_TEXT, NULL, NULL);
        block_delta(j, "text_delta", "text", p->content, p->n_content);
    }
    cJSON_ArrayForEach(d, p->tool_deltas) {
        const cJSON *fn = get(d, "function"), *id = get(d, "id");
        char *args = text_value(get(fn, "arguments"));
        if (cJSON_IsString(id)) {
            char *name = text_value(get(fn, "name"));
            j->api_state[ST_CUT] = 1;
            block_start(j, B_TOOL, id->valuestring, name);
            free(name);
        }
        if (j->api_state[ST_OPEN] == B_TOOL && args && args[0])
            block_delta(j, "input_json_delta", "partial_json", args, strlen(args));
        free(args);
    }
    cJSON_Delete(p->tool_deltas);
    cJSON_Delete(p->logprobs);
    if (p->finish) block_stop(j);
}

/* A stream's failure after message_start: an "error" event, and no message_stop. */
static void msg_fail(srv *s, job *j, const moe8_buf *body) {
    moe8_buf b = {0};
    (void)s;
    moe8_buf_add(&b, body->p ? body->p : "", body->n);
    moe8_msg_error(500, 1, &b);
    moe8_buf_add(&j->out, b.p ? b.p : "", b.n);
    moe8_buf_free(&b);
    j->api_state[ST_FAILED] = 1;
}

/* The stream's end: message_delta (stop_reason, the cumulative usage), message_stop. */
static void msg_tail(srv *s, job *const *jobs, int n, moe8_buf *out) {
    const job *j = jobs[0];
    const char *seq = stop_sequence(s, j);
    cJSON *e, *d;
    (void)n;
    if (j->api_state[ST_FAILED]) return;
    e = typed("message_delta");
    d = cJSON_AddObjectToObject(e, "delta");
    cJSON_AddStringToObject(d, "stop_reason", stop_reason(s, j));
    if (seq) cJSON_AddStringToObject(d, "stop_sequence", seq);
    else cJSON_AddNullToObject(d, "stop_sequence");
    cJSON_AddItemToObject(e, "usage", usage(j, 0));
    event(out, e);
    event(out, typed("message_stop"));
}

/* A tool call's input: its arguments parsed (an object), else {} (a call the
 * grammar did not constrain and the model wrote badly). */
static cJSON *tool_input(const char *args) {
    cJSON *in = args ? cJSON_Parse(args) : NULL;
    if (cJSON_IsObject(in)) return in;
    cJSON_Delete(in);
    return cJSON_CreateObject();
}

/* The whole answer: the message object. */
static void msg_whole(srv *s, job *const *jobs, int n, moe8_buf *out) {
    job *j = jobs[0];
    cJSON *root = cJSON_CreateObject(), *content = message_head(s, j, root), *b, *c;
    const char *seq = stop_sequence(s, j);
    char *txt;
    (void)n;
    if (j->reasoning.n) {
        b = typed("thinking");
        moe8_oa_json_text(b, "thinking", j->reasoning.p, j->reasoning.n);
        cJSON_AddStringToObject(b, "signature", "");
        cJSON_AddItemToArray(content, b);
    }
    if (j->api_state[ST_CUT] && (size_t)j->api_state[ST_CUT] - 1 < j->text.n) j->text.n = (size_t)j->api_state[ST_CUT] - 1;
    if (j->text.n) {
        b = typed("text");
        moe8_oa_json_text(b, "text", j->text.p, j->text.n);
        cJSON_AddItemToArray(content, b);
    }
    cJSON_ArrayForEach(c, j->calls) {
        const cJSON *fn = get(c, "function");
        char tid[64], *name = text_value(get(fn, "name")), *args = text_value(get(fn, "arguments"));
        tool_id(cJSON_GetStringValue(get(c, "id")) ? cJSON_GetStringValue(get(c, "id")) : "", tid, sizeof tid);
        b = typed("tool_use");
        cJSON_AddStringToObject(b, "id", tid);
        cJSON_AddStringToObject(b, "name", name ? name : "");
        cJSON_AddItemToObject(b, "input", tool_input(args));
        cJSON_AddItemToArray(content, b);
        free(name);
        free(args);
    }
    cJSON_AddStringToObject(root, "stop_reason", stop_reason(s, j));
    if (seq) cJSON_AddStringToObject(root, "stop_sequence", seq);
    else cJSON_AddNullToObject(root, "stop_sequence");
    cJSON_AddItemToObject(root, "usage", usage(j, 0));
    txt = cJSON_PrintUnformatted(root);
    if (txt) moe8_buf_str(out, txt);
    free(txt);
    cJSON_Delete(root);
}

static int no_logprobs(const cJSON *root, job *j, moe8_buf *err) {
    (void)root, (void)j, (void)err;
    return 0;
}

const oa_api moe8_oa_messages = {
    .kind = JOB_CHAT, /* the translated body is a chat request */
    .id_prefix = "msg",
    .object = "message",
    .chunk_object = "message",
    .prompt_param = "messages",
    .max_alias = NULL,
    .default_max = 0, /* max_tokens is required: translate() */
    .clamp_max = 1,   /* Claude Code asks for 32000: the answer stops at the context's end */
    .options = NULL,
    .logprobs = no_logprobs,
    .prompt = moe8_oa_chat_request_prompt,
    .start = msg_start,
    .split = msg_split,
    .stream = msg_stream,
    .whole = msg_whole,
    .tail = msg_tail,
    .fail = msg_fail,
};
