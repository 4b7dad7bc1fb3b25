/*
 * test_serve_messages.c — Anthropic's Messages API of `moe8 serve`
 * (src/server/api_messages.c), on the chain fixture (serve_test.h: a model
 * whose greedy chat answer is "<think>Let me think</think>Hello!" with
 * thinking on), each against an independent reference:
 *   - the same conversation through /v1/chat/completions at temperature 0
 *     gives the same text, reasoning, tool calls and token counts (text,
 *     thinking on and off, tool_choice any / tool, a tool round trip with
 *     tool_use and tool_result in the history, role "system" in messages);
 *   - streams: every event "event: T\ndata: {type: T}\n\n", message_start
 *     first, then ping, blocks with 0-based sequential indexes going start
 *     -> deltas -> stop without interleaving, text / thinking deltas and
 *     input_json_delta concatenating to the whole answer's blocks and tool
 *     input, message_delta with the stop reason and the cumulative usage,
 *     message_stop last;
 *   - a table of fields: honoured, accepted and ignored, refused naming the
 *     field; unknown ones and server tools logged;
 *   - stop_reason end_turn / max_tokens / stop_sequence / tool_use;
 *   - batch invariance: 32 requests at once (the cases, whole and
 *     streamed) equal themselves alone;
 *   - errors in Anthropic's shape with its types and statuses (400 with
 *     hostile bodies too, 401, 404, 405, 413, 503 overloaded_error past
 *     --max-queue), x-api-key and Bearer auth, the OpenAI paths' bodies
 *     unchanged beside them; max_tokens past the context cut to it
 *     (model_context_window_exceeded); a client gone mid-stream;
 *   - count_tokens equals the message's input tokens;
 *   - the official @anthropic-ai/sdk (tests/clients/messages_sdk.mjs) and one
 *     turn of Claude Code (`claude -p`, its ~12k-token request, on a copy of
 *     the fixture with a 64k context) when node and .deps/clients are there:
 *     `--part clients` (ctest's test_serve_messages_clients, labelled client;
 *     in the release build only: the sanitizer run keeps every C check of
 *     the same paths), the rest `--part c`.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"
#include "fixture_model.h"
#include "serve_test.h"

#define NAME "serve_text"
#define MSGS "/v1/messages"
#define MAXC 128 /* tool calls of one answer the checks read */

/* ---- requests with headers ---------------------------------------------------------------- */

/* POST body to path with the headers every Anthropic client sends and the
 * lines hdr (NULL-ended, may be NULL): serve_test.h's http_hdrs. */
static long mpost(server *sv, const char *path, const char *body, const char *const *hdr, buf *out) {
    const char *h[16] = {"anthropic-version: 2023-06-01",
                         "anthropic-beta: interleaved-thinking-2025-05-14,context-management-2025-06-27"};
    int n = 2;
    for (int i = 0; hdr && hdr[i] && n < 15; i++) h[n++] = hdr[i];
    return http_hdrs(sv, "POST", path, body, strlen(body), NULL, h, out);
}

static char *json_text(cJSON *o) {
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

/* ---- answers: the message object, and a stream put together ---------------------------------- */

typedef struct {
    buf text, thinking;
    int n_calls;
    char call_id[MAXC][64], call_name[MAXC][64];
    cJSON *input[MAXC];         /* tool_use inputs */
    char stop_reason[32], stop_sequence[32];
    int input_tokens, output_tokens, cache_read;
    int n_blocks;
    char kinds[MAXC + 8];       /* the blocks' kinds in order: 'r' thinking, 't' text, 'u' tool_use */
} msg;

static void msg_free(msg *m) {
    buf_free(&m->text);
    buf_free(&m->thinking);
    for (int i = 0; i < MAXC; i++) cJSON_Delete(m->input[i]);
    memset(m, 0, sizeof *m);
}

static int take_usage_msg(msg *m, const cJSON *u) {
    const cJSON *in = J(u, "input_tokens"), *out = J(u, "output_tokens"), *cr = J(u, "cache_read_input_tokens");
    if (!cJSON_IsNumber(in) || !cJSON_IsNumber(out) || !cJSON_IsNumber(cr) ||
        !cJSON_IsNumber(J(u, "cache_creation_input_tokens")))
        FAILR("usage fields missing: %s", cJSON_PrintUnformatted(u));
    m->input_tokens = in->valueint;
    m->output_tokens = out->valueint;
    m->cache_read = cr->valueint;
    return 1;
}

/* One content block of a whole answer into m. */
static int take_block(msg *m, const cJSON *b) {
    const char *ty = jstr(b, "type");
    if (!ty || m->n_blocks >= MAXC + 6) FAILR("a block without type");
    if (!strcmp(ty, "text") && jstr(b, "text")) {
        buf_str(&m->text, jstr(b, "text"));
        m->kinds[m->n_blocks++] = 't';
    } else if (!strcmp(ty, "thinking") && jstr(b, "thinking") && jstr(b, "signature")) {
        buf_str(&m->thinking, jstr(b, "thinking"));
        m->kinds[m->n_blocks++] = 'r';
    } else if (!strcmp(ty, "tool_use") && jstr(b, "id") && jstr(b, "name") && cJSON_IsObject(J(b, "input")) &&
               m->n_calls < MAXC) {
        if (strncmp(jstr(b, "id"), "toolu_", 6)) FAILR("tool_use id '%s'", jstr(b, "id"));
        snprintf(m->call_id[m->n_calls], 64, "%s", jstr(b, "id"));
        snprintf(m->call_name[m->n_calls], 64, "%s", jstr(b, "name"));
        m->input[m->n_calls++] = cJSON_Duplicate(J(b, "input"), 1);
        m->kinds[m->n_blocks++] = 'u';
    } else {
        FAILR("bad block: %s", cJSON_PrintUnformatted(b));
    }
    return 1;
}

static int parse_msg(msg *m, const char *body) {
    cJSON *o = cJSON_Parse(body);
    const cJSON *b;
    const char *id = jstr(o, "id"), *sr = jstr(o, "stop_reason");
    int ok = 0;
    memset(m, 0, sizeof *m);
    if (!o || !id || strncmp(id, "msg_", 4) || strcmp(jstr(o, "type") ? jstr(o, "type") : "", "message") ||
        strcmp(jstr(o, "role") ? jstr(o, "role") : "", "assistant") ||
        strcmp(jstr(o, "model") ? jstr(o, "model") : "", NAME) || !cJSON_IsArray(J(o, "content")) || !sr ||
        !(cJSON_IsNull(J(o, "stop_sequence")) || jstr(o, "stop_sequence"))) {
        CHECKF(0, "bad message object: %.600s", body);
        goto done;
    }
    snprintf(m->stop_reason, sizeof m->stop_reason, "%s", sr);
    if (jstr(o, "stop_sequence")) snprintf(m->stop_sequence, sizeof m->stop_sequence, "%s", jstr(o, "stop_sequence"));
    cJSON_ArrayForEach(b, J(o, "content")) if (!take_block(m, b)) goto done;
    ok = take_usage_msg(m, J(o, "usage"));
done:
    cJSON_Delete(o);
    return ok;
}

/* One stream event's checks against the state: the block in progress. */
typedef struct {
    int n_ev, started, stopped, open, next, pings, delta_seen;
    char kind;
    buf part;                   /* the open block's text / thinking / partial_json */
} sstate;

static int close_block(msg *m, sstate *st) {
    if (st->kind == 't') buf_add(&m->text, st->part.p ? st->part.p : "", st->part.n);
    else if (st->kind == 'r') buf_add(&m->thinking, st->part.p ? st->part.p : "", st->part.n);
    else {
        cJSON *in = cJSON_Parse(st->part.n ? buf_s(&st->part) : "{}");
        if (!cJSON_IsObject(in)) FAILR("input_json_delta pieces '%s' are not a JSON object", buf_s(&st->part));
        m->input[m->n_calls - 1] = in;
    }
    m->kinds[m->n_blocks++] = st->kind;
    st->open = 0;
    st->part.n = 0;
    return 1;
}

static int stream_event(msg *m, sstate *st, const char *type, const cJSON *o) {
    const cJSON *idx = J(o, "index");
    if (!st->started && strcmp(type, "message_start")) FAILR("'%s' before message_start", type);
    if (st->stopped) FAILR("'%s' after message_stop", type);
    if (!strcmp(type, "message_start")) {
        const cJSON *msg_ = J(o, "message");
        if (st->started || !jstr(msg_, "id") || strncmp(jstr(msg_, "id"), "msg_", 4) ||
            cJSON_GetArraySize(J(msg_, "content")) || !cJSON_IsNull(J(msg_, "stop_reason")) ||
            !cJSON_IsNumber(J(J(msg_, "usage"), "input_tokens")))
            FAILR("bad message_start");
        st->started = 1;
    } else if (!strcmp(type, "ping")) {
        st->pings++;
    } else if (!strcmp(type, "content_block_start")) {
        const cJSON *b = J(o, "content_block");
        const char *bt = jstr(b, "type");
        if (st->open || !cJSON_IsNumber(idx) || idx->valueint != st->next || !bt || m->n_blocks >= MAXC + 6)
            FAILR("content_block_start %d out of order (open %d, next %d)", idx ? idx->valueint : -1, st->open, st->next);
        st->open = 1, st->next++;
        if (!strcmp(bt, "text") && jstr(b, "text") && !jstr(b, "text")[0]) st->kind = 't';
        else if (!strcmp(bt, "thinking") && jstr(b, "thinking") && !jstr(b, "thinking")[0] && jstr(b, "signature"))
            st->kind = 'r';
        else if (!strcmp(bt, "tool_use") && jstr(b, "id") && !strncmp(jstr(b, "id"), "toolu_", 6) && jstr(b, "name") &&
                 cJSON_IsObject(J(b, "input")) && !cJSON_GetArraySize(J(b, "input")) && m->n_calls < MAXC) {
            st->kind = 'u';
            snprintf(m->call_id[m->n_calls], 64, "%s", jstr(b, "id"));
            snprintf(m->call_name[m->n_calls++], 64, "%s", jstr(b, "name"));
        } else {
            FAILR("bad content_block_start: %s", cJSON_PrintUnformatted(o));
        }
    } else if (!strcmp(type, "content_block_delta")) {
        const cJSON *d = J(o, "delta");
        const char *dt = jstr(d, "type"), *want = st->kind == 't' ? "text_delta" : st->kind == 'r' ? "thinking_delta"
                                                                                                  : "input_json_delta";
        const char *key = st->kind == 't' ? "text" : st->kind == 'r' ? "thinking" : "partial_json";
        if (!st->open || !cJSON_IsNumber(idx) || idx->valueint != st->next - 1 || !dt || strcmp(dt, want) ||
            !jstr(d, key))
            FAILR("bad content_block_delta: %s", cJSON_PrintUnformatted(o));
        buf_str(&st->part, jstr(d, key));
        st->delta_seen = 1;
    } else if (!strcmp(type, "content_block_stop")) {
        if (!st->open || !cJSON_IsNumber(idx) || idx->valueint != st->next - 1) FAILR("bad content_block_stop");
        if (!close_block(m, st)) return 0;
    } else if (!strcmp(type, "message_delta")) {
        const cJSON *d = J(o, "delta");
        if (st->open || !jstr(d, "stop_reason") || !(cJSON_IsNull(J(d, "stop_sequence")) || jstr(d, "stop_sequence")))
            FAILR("bad message_delta: %s", cJSON_PrintUnformatted(o));
        snprintf(m->stop_reason, sizeof m->stop_reason, "%s", jstr(d, "stop_reason"));
        if (jstr(d, "stop_sequence")) snprintf(m->stop_sequence, sizeof m->stop_sequence, "%s", jstr(d, "stop_sequence"));
        if (!take_usage_msg(m, J(o, "usage"))) return 0;
    } else if (!strcmp(type, "message_stop")) {
        if (!m->stop_reason[0]) FAILR("message_stop before message_delta");
        st->stopped = 1;
    } else {
        FAILR("unknown event '%s'", type);
    }
    return 1;
}

/* A whole stream: each event "event: T\ndata: {"type": T, ...}\n\n". */
static int parse_msg_stream(msg *m, const char *body) {
    const char *p = body;
    sstate st;
    int ok = 1;
    memset(m, 0, sizeof *m);
    memset(&st, 0, sizeof st);
    while (*p && ok) {
        const char *nl = strchr(p, '\n'), *end = strstr(p, "\n\n");
        char type[64];
        cJSON *o;
        if (strncmp(p, "event: ", 7) || !nl || !end || nl >= end || strncmp(nl + 1, "data: ", 6) ||
            (size_t)(nl - p - 7) >= sizeof type || memchr(nl + 1, '\n', (size_t)(end - nl - 1))) {
            CHECKF(0, "event %d is not 'event: T\\ndata: J\\n\\n': '%.80s'", st.n_ev, p);
            ok = 0;
            break;
        }
        snprintf(type, sizeof type, "%.*s", (int)(nl - p - 7), p + 7);
        o = cJSON_ParseWithLength(nl + 7, (size_t)(end - nl - 7));
        if (!o || !jstr(o, "type") || strcmp(jstr(o, "type"), type)) {
            CHECKF(0, "event %d: data's type is not '%s': '%.120s'", st.n_ev, type, nl + 1);
            ok = 0;
        } else {
            ok = stream_event(m, &st, type, o);
        }
        cJSON_Delete(o);
        st.n_ev++;
        p = end + 2;
    }
    if (ok && (!st.stopped || st.pings < 1)) {
        CHECKF(0, "the stream ends without message_stop (%d pings)", st.pings);
        ok = 0;
    }
    buf_free(&st.part);
    return ok;
}

/* ---- requests: Messages and the chat reference -------------------------------------------------- */

static const char WEATHER[] =
    "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":10},"
    "\"days\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":7}},\"required\":[\"city\",\"days\"],"
    "\"additionalProperties\":false}";

typedef struct {
    int thinking;               /* 1 on, 0 off */
    const char *choice;         /* NULL: no tools; "auto", "any", "none", or a tool's name */
    int history;                /* a tool round trip before the question */
    int max_tokens, stream;
    const char *stop;           /* one stop sequence, or NULL */
    int one_call;               /* disable_parallel_tool_use (chat: parallel_tool_calls false) */
    int cut;                    /* a call is cut by max_tokens: chat shows it as text, messages not */
} mcase;

/* The conversation as Messages (chat 0) or chat completions (chat 1) request. */
static cJSON *conv(const mcase *c, int chat) {
    cJSON *o = cJSON_CreateObject(), *ms = cJSON_CreateArray(), *m;
    cJSON_AddStringToObject(o, "model", NAME);
    if (chat) {
        m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "system");
        cJSON_AddStringToObject(m, "content", "You are terse.\nAnswer in English.");
        cJSON_AddItemToArray(ms, m);
    } else {
        cJSON *sys = cJSON_AddArrayToObject(o, "system"), *b = cJSON_CreateObject();
        cJSON_AddStringToObject(b, "type", "text");
        cJSON_AddStringToObject(b, "text", "You are terse.");
        cJSON_AddItemToArray(sys, b);
        b = cJSON_CreateObject();
        cJSON_AddStringToObject(b, "type", "text");
        cJSON_AddStringToObject(b, "text", "Answer in English.");
        cJSON_AddItemToObject(cJSON_AddObjectToObject(b, "cache_control"), "type", cJSON_CreateString("ephemeral"));
        cJSON_AddItemToArray(sys, b);
    }
    if (c->history) {
        /* user asks; assistant thinks and calls; the tool answers (an error) */
        m = cJSON_Parse(chat ? "{\"role\":\"user\",\"content\":\"Weather in Bern?\"}"
                             : "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Weather in Bern?\"}]}");
        cJSON_AddItemToArray(ms, m);
        m = cJSON_Parse(chat ? "{\"role\":\"assistant\",\"content\":\"Let me look.\",\"reasoning_content\":\"Use the "
                               "tool.\",\"tool_calls\":[{\"id\":\"toolu_01A\",\"type\":\"function\",\"function\":{"
                               "\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Bern\\\",\\\"days\\\":2}\"}}]}"
                             : "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"Use the "
                               "tool.\",\"signature\":\"x\"},{\"type\":\"text\",\"text\":\"Let me look.\"},{\"type\":"
                               "\"tool_use\",\"id\":\"toolu_01A\",\"name\":\"get_weather\",\"input\":{\"city\":\"Bern\","
                               "\"days\":2}}]}");
        cJSON_AddItemToArray(ms, m);
        m = cJSON_Parse(chat ? "{\"role\":\"tool\",\"tool_call_id\":\"toolu_01A\",\"content\":\"Error: sunny\\n20 C\"}"
                             : "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_01A\","
                               "\"is_error\":true,\"content\":[{\"type\":\"text\",\"text\":\"sunny\"},{\"type\":\"text\","
                               "\"text\":\"20 C\"}]}]}");
        cJSON_AddItemToArray(ms, m);
    }
    m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "user");
    cJSON_AddStringToObject(m, "content", "Hi there");
    cJSON_AddItemToArray(ms, m);
    cJSON_AddItemToObject(o, "messages", ms);
    if (c->choice || c->history) {
        cJSON *ts = cJSON_AddArrayToObject(o, "tools"), *t = cJSON_CreateObject();
        if (chat) {
            cJSON *f;
            cJSON_AddStringToObject(t, "type", "function");
            f = cJSON_AddObjectToObject(t, "function");
            cJSON_AddStringToObject(f, "name", "get_weather");
            cJSON_AddStringToObject(f, "description", "The weather of a city");
            cJSON_AddItemToObject(f, "parameters", cJSON_Parse(WEATHER));
        } else {
            cJSON_AddStringToObject(t, "name", "get_weather");
            cJSON_AddStringToObject(t, "description", "The weather of a city");
            cJSON_AddItemToObject(t, "input_schema", cJSON_Parse(WEATHER));
        }
        cJSON_AddItemToArray(ts, t);
    }
    if (c->choice) {
        const int named = strcmp(c->choice, "auto") && strcmp(c->choice, "any") && strcmp(c->choice, "none");
        if (chat && named) {
            cJSON *tc = cJSON_AddObjectToObject(o, "tool_choice");
            cJSON_AddStringToObject(tc, "type", "function");
            cJSON_AddStringToObject(cJSON_AddObjectToObject(tc, "function"), "name", c->choice);
        } else if (chat) {
            cJSON_AddStringToObject(o, "tool_choice", !strcmp(c->choice, "any") ? "required" : c->choice);
        } else {
            cJSON *tc = cJSON_AddObjectToObject(o, "tool_choice");
            cJSON_AddStringToObject(tc, "type", named ? "tool" : c->choice);
            if (named) cJSON_AddStringToObject(tc, "name", c->choice);
        }
    }
    if (c->one_call && chat) cJSON_AddFalseToObject(o, "parallel_tool_calls");
    if (c->one_call && !chat) cJSON_AddTrueToObject(cJSON_GetObjectItem(o, "tool_choice"), "disable_parallel_tool_use");
    if (chat) cJSON_AddBoolToObject(cJSON_AddObjectToObject(o, "chat_template_kwargs"), "enable_thinking", c->thinking);
    else if (c->thinking) {
        cJSON *t = cJSON_AddObjectToObject(o, "thinking");
        cJSON_AddStringToObject(t, "type", c->max_tokens > 1100 ? "enabled" : "adaptive");
        if (c->max_tokens > 1100) cJSON_AddNumberToObject(t, "budget_tokens", 1024);
    }
    if (c->stop) {
        cJSON *a = cJSON_AddArrayToObject(o, chat ? "stop" : "stop_sequences");
        cJSON_AddItemToArray(a, cJSON_CreateString(c->stop));
    }
    cJSON_AddNumberToObject(o, "max_tokens", c->max_tokens);
    cJSON_AddNumberToObject(o, "temperature", 0);
    if (c->stream) cJSON_AddBoolToObject(o, "stream", 1);
    return o;
}

/* The chat reference's calls: names and parsed arguments. */
typedef struct {
    buf text, reason;
    char finish[16];
    int n, prompt_tokens, completion_tokens;
    char name[MAXC][64];
    cJSON *args[MAXC];
} chat_ref;

static void chat_ref_free(chat_ref *r) {
    buf_free(&r->text);
    buf_free(&r->reason);
    for (int i = 0; i < MAXC; i++) cJSON_Delete(r->args[i]);
    memset(r, 0, sizeof *r);
}

static int chat_run(server *sv, const mcase *c, chat_ref *r) {
    char *body = json_text(conv(c, 1));
    buf out = {0};
    cJSON *o = NULL;
    const cJSON *ch, *m, *t;
    int ok = 0;
    memset(r, 0, sizeof *r);
    if (post(sv, CHAT, body, &out) != 200 || !(o = cJSON_Parse(buf_s(&out)))) {
        CHECKF(0, "chat reference: %.600s", buf_s(&out));
        goto done;
    }
    ch = cJSON_GetArrayItem(J(o, "choices"), 0);
    m = J(ch, "message");
    if (jstr(m, "content")) buf_str(&r->text, jstr(m, "content"));
    if (jstr(m, "reasoning_content")) buf_str(&r->reason, jstr(m, "reasoning_content"));
    snprintf(r->finish, sizeof r->finish, "%s", jstr(ch, "finish_reason") ? jstr(ch, "finish_reason") : "");
    r->prompt_tokens = J(J(o, "usage"), "prompt_tokens")->valueint;
    r->completion_tokens = J(J(o, "usage"), "completion_tokens")->valueint;
    cJSON_ArrayForEach(t, J(m, "tool_calls")) if (r->n < MAXC) {
        snprintf(r->name[r->n], 64, "%s", jstr(J(t, "function"), "name"));
        r->args[r->n++] = cJSON_Parse(jstr(J(t, "function"), "arguments"));
    }
    ok = 1;
done:
    cJSON_Delete(o);
    free(body);
    buf_free(&out);
    return ok;
}

static const char *want_stop_reason(const char *finish, int stop_hit) {
    if (!strcmp(finish, "tool_calls")) return "tool_use";
    if (!strcmp(finish, "length")) return "max_tokens";
    return stop_hit ? "stop_sequence" : "end_turn";
}

/* A Messages answer equals the chat reference's (cut: but for the text of
 * a call cut by max_tokens, which chat shows and messages does not). */
static int same_as_chat(const char *what, const msg *m, const chat_ref *r, int stop_hit, int cut) {
    int ok = (cut ? m->text.n == 0 && !strncmp(buf_s(&r->text), "<tool_call>", 11)
                  : !strcmp(buf_s(&m->text), buf_s(&r->text))) && !strcmp(buf_s(&m->thinking), buf_s(&r->reason)) &&
             m->n_calls == r->n && !strcmp(m->stop_reason, want_stop_reason(r->finish, stop_hit)) &&
             m->input_tokens + m->cache_read == r->prompt_tokens && m->output_tokens == r->completion_tokens;
    for (int i = 0; ok && i < r->n; i++)
        ok = !strcmp(m->call_name[i], r->name[i]) && cJSON_Compare(m->input[i], r->args[i], 1);
    CHECKF(ok, "%s: messages text '%s' thinking '%s' %d calls %s in %d+%d out %d; chat '%s' '%s' %d calls %s in %d out %d",
           what, buf_s(&m->text), buf_s(&m->thinking), m->n_calls, m->stop_reason, m->input_tokens, m->cache_read,
           m->output_tokens, buf_s(&r->text), buf_s(&r->reason), r->n, r->finish, r->prompt_tokens,
           r->completion_tokens);
    return ok;
}

static int by_char(const void *a, const void *b) { return *(const char *)a - *(const char *)b; }

/* The same blocks (a whole answer puts thinking first, a stream shows the
 * blocks as they come), text, thinking and tool inputs. */
static int same_msg(const char *what, const msg *a, const msg *b) {
    char ka[MAXC + 8], kb[MAXC + 8];
    snprintf(ka, sizeof ka, "%s", a->kinds), snprintf(kb, sizeof kb, "%s", b->kinds);
    qsort(ka, strlen(ka), 1, by_char), qsort(kb, strlen(kb), 1, by_char);
    int ok = !strcmp(ka, kb) && !strcmp(buf_s(&a->text), buf_s(&b->text)) &&
             !strcmp(buf_s(&a->thinking), buf_s(&b->thinking)) && a->n_calls == b->n_calls &&
             !strcmp(a->stop_reason, b->stop_reason) && !strcmp(a->stop_sequence, b->stop_sequence) &&
             a->output_tokens == b->output_tokens && a->input_tokens + a->cache_read == b->input_tokens + b->cache_read;
    for (int i = 0; ok && i < a->n_calls; i++)
        ok = !strcmp(a->call_name[i], b->call_name[i]) && cJSON_Compare(a->input[i], b->input[i], 1);
    CHECKF(ok, "%s: stream blocks '%s' text '%s' thinking '%s' %s/%s out %d; whole '%s' '%s' '%s' %s/%s out %d", what,
           a->kinds, buf_s(&a->text), buf_s(&a->thinking), a->stop_reason, a->stop_sequence, a->output_tokens, b->kinds,
           buf_s(&b->text), buf_s(&b->thinking), b->stop_reason, b->stop_sequence, b->output_tokens);
    return ok;
}

static const char *const *g_hdr; /* header lines of msg_run's requests (the key), or NULL */

static int msg_run(server *sv, const mcase *c, const char *path, msg *m) {
    char *body = json_text(conv(c, 0));
    buf out = {0};
    int ok = mpost(sv, path, body, g_hdr, &out) == 200 &&
             (c->stream ? parse_msg_stream(m, buf_s(&out)) : parse_msg(m, buf_s(&out)));
    if (!ok) fprintf(stderr, "  request: %s\n  answer: %.1500s\n", body, buf_s(&out));
    free(body);
    buf_free(&out);
    return ok;
}

/* ---- 1. answers against chat completions ------------------------------------------------------ */

static const mcase C[] = {
    {1, NULL, 0, 200, 0, NULL, 0, 0},      /* thinking on: "Let me think" + "Hello!" */
    {0, NULL, 0, 200, 0, NULL, 0, 0},      /* thinking off */
    {1, NULL, 0, 4, 0, NULL, 0, 0},      /* max_tokens */
    {1, NULL, 0, 200, 0, "Hello", 0, 0},     /* stop_sequence */
    {1, NULL, 0, 200, 0, "zzz", 0, 0},     /* a stop sequence never met */
    {1, "any", 0, 300, 0, NULL, 1, 0}, /* one tool_use by the grammar after thinking */
    {1, "get_weather", 0, 300, 0, NULL, 0, 1}, /* a named tool, parallel: calls, the last cut */
    {0, "auto", 1, 200, 0, NULL, 0, 0}, /* a tool round trip in the history */
    {1, "none", 1, 2000, 0, NULL, 0, 0}, /* thinking enabled with a budget, tools not to be called */
};
#define N_CASES (int)(sizeof C / sizeof *C)

static void test_answers(server *sv) {
    int n_ok = 0, n = N_CASES;
    for (int i = 0; i < n; i++) {
        mcase c = C[i];
        chat_ref r;
        msg whole, streamed;
        char what[96];
        const int stop_hit = c.stop && !strcmp(c.stop, "Hello");
        snprintf(what, sizeof what, "case %d (thinking %d, tools %s, history %d, max %d, stop %s)", i, c.thinking,
                 c.choice ? c.choice : "-", c.history, c.max_tokens, c.stop ? c.stop : "-");
        if (!chat_run(sv, &c, &r)) continue;
        if (msg_run(sv, &c, i % 2 ? MSGS "?beta=true" : MSGS, &whole)) {
            int ok = same_as_chat(what, &whole, &r, stop_hit, c.cut);
            CHECKF(!strcmp(whole.stop_sequence, stop_hit ? "Hello" : ""), "%s: stop_sequence '%s'", what,
                   whole.stop_sequence);
            c.stream = 1;
            if (msg_run(sv, &c, MSGS, &streamed)) {
                ok &= same_msg(what, &streamed, &whole);
                msg_free(&streamed);
            } else {
                ok = 0;
            }
            n_ok += ok;
            msg_free(&whole);
        }
        if (i == 0)
            CHECKF(!strcmp(buf_s(&r.reason), "Let me think") && !strcmp(buf_s(&r.text), "Hello!"),
                   "the chain model's answer: '%s' + '%s'", buf_s(&r.reason), buf_s(&r.text));
        if (i == 5) CHECKF(r.n == 1 && !strcmp(r.finish, "tool_calls"), "tool_choice any: %d calls, %s", r.n, r.finish);
        if (i == 6) CHECKF(r.n >= 2 && !strcmp(r.finish, "length"), "a named tool, parallel: %d calls, %s", r.n, r.finish);
        chat_ref_free(&r);
    }
    CHECKF(n_ok == n, "%d of %d cases equal chat completions, whole and streamed", n_ok, n);
    printf("test_serve_messages: %d answers (text, thinking, max_tokens, stop_sequence, tool_use, a tool round trip) "
           "equal chat completions', whole and streamed\n", n_ok);
}

/* 32 requests at once (the cases above, whole and streamed) equal themselves alone. */
static void test_batch(server *sv) {
    enum { N = 32 };
    mreq m[N];
    msg alone[2 * N_CASES];
    int have[2 * N_CASES], n_same = 0;
    memset(m, 0, sizeof m);
    for (int k = 0; k < 2 * N_CASES; k++) {
        mcase c = C[k % N_CASES];
        c.stream = k >= N_CASES;
        have[k] = msg_run(sv, &c, MSGS, &alone[k]);
    }
    for (int i = 0; i < N; i++) {
        mcase c = C[i % N_CASES];
        c.stream = (i / N_CASES) % 2;
        m[i].path = MSGS;
        m[i].body = json_text(conv(&c, 0));
    }
    multi_run(sv, m, N);
    for (int i = 0; i < N; i++) {
        const int k = i % N_CASES + ((i / N_CASES) % 2 ? N_CASES : 0);
        char what[64];
        msg a;
        snprintf(what, sizeof what, "batch request %d (case %d)", i, i % N_CASES);
        if (m[i].status == 200 && have[k] &&
            ((i / N_CASES) % 2 ? parse_msg_stream(&a, buf_s(&m[i].out)) : parse_msg(&a, buf_s(&m[i].out)))) {
            n_same += same_msg(what, &a, &alone[k]);
            msg_free(&a);
        } else {
            CHECKF(0, "%s: %ld %.300s", what, m[i].status, buf_s(&m[i].out));
        }
        free(m[i].body);
        buf_free(&m[i].out);
    }
    for (int k = 0; k < 2 * N_CASES; k++)
        if (have[k]) msg_free(&alone[k]);
    CHECKF(n_same == N, "%d of %d concurrent requests equal themselves alone", n_same, N);
    printf("test_serve_messages: batch invariance: %d of %d concurrent requests equal themselves alone\n", n_same, N);
}

/* ---- 2. count_tokens ------------------------------------------------------------------------ */

static void test_count(server *sv) {
    const mcase c = {0, "auto", 1, 50, 0, NULL, 0, 0};
    cJSON *o = conv(&c, 0), *x;
    msg m;
    buf out = {0};
    char *body;
    cJSON_DeleteItemFromObject(o, "max_tokens");
    cJSON_DeleteItemFromObject(o, "temperature");
    body = json_text(o);
    if (mpost(sv, MSGS "/count_tokens", body, NULL, &out) == 200 && (x = cJSON_Parse(buf_s(&out)))) {
        const cJSON *n = J(x, "input_tokens");
        if (msg_run(sv, &c, MSGS, &m)) {
            CHECKF(cJSON_IsNumber(n) && n->valueint == m.input_tokens + m.cache_read && cJSON_GetArraySize(x) == 1,
                   "count_tokens %s; the message's input %d + %d", buf_s(&out), m.input_tokens, m.cache_read);
            printf("test_serve_messages: count_tokens %d = the message's input tokens\n", n ? n->valueint : -1);
            msg_free(&m);
        }
        cJSON_Delete(x);
    } else {
        CHECKF(0, "count_tokens: %s", buf_s(&out));
    }
    free(body);
    buf_free(&out);
}

/* ---- 3. fields and errors -------------------------------------------------------------------- */

/* An Anthropic error answer: status, error.type, a part of its message. */
static void check_error(server *sv, const char *path, const char *body, const char *const *hdr, long status,
                        const char *type, const char *part) {
    buf out = {0};
    const long st = mpost(sv, path, body, hdr, &out);
    cJSON *o = cJSON_Parse(buf_s(&out));
    const cJSON *e = J(o, "error");
    const int ok = st == status && jstr(o, "type") && !strcmp(jstr(o, "type"), "error") && jstr(e, "type") &&
                   !strcmp(jstr(e, "type"), type) && jstr(e, "message") && strstr(jstr(e, "message"), part) &&
                   cJSON_GetArraySize(o) == 2 && cJSON_GetArraySize((cJSON *)e) == 2;
    CHECKF(ok, "%s %.160s: got %ld %s; want %ld %s ~'%s'", path, body, st, buf_s(&out), status, type, part);
    cJSON_Delete(o);
    buf_free(&out);
}

#define M1 "\"model\":\"" NAME "\",\"max_tokens\":3,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"

static void test_fields(server *sv) {
    static const struct {
        const char *extra;      /* what follows M1 in the body */
        int status;             /* 200, or 400 */
        const char *part;       /* 400: a part of the message */
    } F[] = {
        {"", 200, NULL},
        {",\"system\":\"Be brief.\"", 200, NULL},
        {",\"system\":[{\"type\":\"text\",\"text\":\"x-anthropic-billing-header: cc_version=1\"},{\"type\":\"text\","
         "\"text\":\"Be brief.\",\"cache_control\":{\"type\":\"ephemeral\"}}]", 200, NULL},
        {",\"temperature\":0.5,\"top_p\":0.9,\"top_k\":5", 200, NULL},
        {",\"stop_sequences\":[\"a\",\"b\"]", 200, NULL},
        {",\"stream\":false", 200, NULL},
        {",\"metadata\":{\"user_id\":\"u1\"}", 200, NULL},
        {",\"output_config\":{\"effort\":\"low\"}", 200, NULL},
        {",\"context_management\":{\"edits\":[{\"type\":\"clear_thinking_20251015\"}]}", 200, NULL},
        {",\"cache_control\":{\"type\":\"ephemeral\"}", 200, NULL},
        {",\"service_tier\":\"auto\"", 200, NULL},
        {",\"thinking\":{\"type\":\"disabled\"}", 200, NULL},
        {",\"thinking\":{\"type\":\"adaptive\",\"display\":\"summarized\"}", 200, NULL},
        {",\"tools\":[{\"type\":\"web_search_20250305\",\"name\":\"web_search\",\"max_uses\":3}]", 200, NULL},
        {",\"tools\":[{\"name\":\"f\",\"input_schema\":{\"type\":\"object\"}}],\"tool_choice\":{\"type\":\"auto\","
         "\"disable_parallel_tool_use\":true}", 200, NULL},
        {",\"mystery_field\":1", 200, NULL},
        {",\"mcp_servers\":[{\"type\":\"url\",\"url\":\"http://x\",\"name\":\"x\"}]", 400, "'mcp_servers'"},
        {",\"thinking\":{\"type\":\"sometimes\"}", 400, "'thinking.type'"},
        {",\"tool_choice\":{\"type\":\"any\"}", 400, "needs 'tools'"},
        {",\"tool_choice\":{\"type\":\"maybe\"}", 400, "'tool_choice.type'"},
        {",\"tools\":[{\"name\":\"f\"}]", 400, "'tools[0].input_schema'"},
        {",\"stop_sequences\":\"x\"", 400, "'stop_sequences'"},
        {",\"temperature\":-1", 400, "'temperature'"},
        {",\"system\":[{\"type\":\"image\",\"source\":{}}]", 400, "'system[0]': image blocks are not supported"},
    };
    int n = (int)(sizeof F / sizeof *F);
    for (int i = 0; i < n; i++) {
        char body[1024];
        buf out = {0};
        snprintf(body, sizeof body, "{" M1 "%s}", F[i].extra);
        if (F[i].status == 200) {
            msg m;
            const long st = mpost(sv, MSGS, body, NULL, &out);
            CHECKF(st == 200 && parse_msg(&m, buf_s(&out)), "%s: %ld %s", body, st, buf_s(&out));
            msg_free(&m);
        } else {
            check_error(sv, MSGS, body, NULL, 400, "invalid_request_error", F[i].part);
        }
        buf_free(&out);
    }
    /* blocks: image and document refused naming the block; the rest of the table */
    check_error(sv, MSGS, "{\"model\":\"" NAME "\",\"max_tokens\":3,\"messages\":[{\"role\":\"user\",\"content\":[{"
                "\"type\":\"text\",\"text\":\"see\"},{\"type\":\"image\",\"source\":{\"type\":\"base64\",\"media_type\":"
                "\"image/png\",\"data\":\"AA==\"}}]}]}", NULL, 400, "invalid_request_error",
                "'messages[0].content[1]': image blocks are not supported");
    check_error(sv, MSGS, "{\"model\":\"" NAME "\",\"max_tokens\":3,\"messages\":[{\"role\":\"user\",\"content\":[{"
                "\"type\":\"document\",\"source\":{\"type\":\"text\",\"media_type\":\"text/plain\",\"data\":\"x\"}}]}]}",
                NULL, 400, "invalid_request_error", "'messages[0].content[0]': document blocks are not supported");
    check_error(sv, MSGS, "{\"model\":\"" NAME "\",\"max_tokens\":3,\"messages\":[{\"role\":\"user\",\"content\":[{"
                "\"type\":\"tool_result\",\"tool_use_id\":\"t\",\"content\":[{\"type\":\"image\",\"source\":{}}]}]}]}",
                NULL, 400, "invalid_request_error", "'messages[0].content[0].content[0]': image blocks");
    check_error(sv, MSGS, "{\"model\":\"" NAME "\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", NULL, 400,
                "invalid_request_error", "'max_tokens' is required");
    check_error(sv, MSGS, "{\"model\":\"" NAME "\",\"max_tokens\":3,\"messages\":[{\"role\":\"tool\",\"content\":\"x\"}]}",
                NULL, 400, "invalid_request_error", "'messages[0].role'");
    check_error(sv, MSGS, "{\"model\":\"" NAME "\",\"max_tokens\":3}", NULL, 400, "invalid_request_error",
                "'messages' is required");
    check_error(sv, MSGS, "{\"model\":\"claude-x\",\"max_tokens\":3,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
                NULL, 404, "not_found_error", "'claude-x' does not exist");
    check_error(sv, MSGS "/count_tokens", "{\"model\":\"claude-x\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
                NULL, 404, "not_found_error", "'claude-x' does not exist");
    {
        buf big = {0};
        buf_str(&big, "{\"model\":\"" NAME "\",\"max_tokens\":10,\"messages\":[{\"role\":\"user\",\"content\":\"");
        for (int i = 0; i < 5000; i++) buf_str(&big, "hi ");
        buf_str(&big, "\"}]}");
        check_error(sv, MSGS, buf_s(&big), NULL, 400, "invalid_request_error", "prompt");
        buf_free(&big);
    }
    check_error(sv, MSGS, "[1]", NULL, 400, "invalid_request_error", "JSON object");
    check_error(sv, MSGS, "{\"max_tokens\":3,\"max_tokens\":4,\"messages\":[]}", NULL, 400, "invalid_request_error",
                "max_tokens");
    check_error(sv, MSGS, "{\"max_tokens\":3,\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}", NULL, 400,
                "invalid_request_error", "UTF-8");
    check_error(sv, MSGS, "{\"max_tokens\":3,\"messages\":[{\"role\":\"user\",\"content\":\"a\\u0000b\"}]}", NULL,
                400, "invalid_request_error", "NUL");
    {
        /* role "system" inside messages: as the system prompt (the prompt holds it once) */
        buf a = {0}, b = {0};
        cJSON *x = NULL, *y = NULL;
        const long sa = mpost(sv, MSGS "/count_tokens", "{\"model\":\"" NAME "\",\"messages\":[{\"role\":\"system\","
                              "\"content\":[{\"type\":\"text\",\"text\":\"Be brief.\"}]},{\"role\":\"user\",\"content\":\"hi\"}]}",
                              NULL, &a),
                   sb = mpost(sv, MSGS "/count_tokens", "{\"model\":\"" NAME "\",\"system\":\"Be brief.\",\"messages\":[{"
                              "\"role\":\"user\",\"content\":\"hi\"}]}", NULL, &b);
        x = cJSON_Parse(buf_s(&a)), y = cJSON_Parse(buf_s(&b));
        CHECKF(sa == 200 && sb == 200 && cJSON_Compare(x, y, 1), "role system in messages: %s; system: %s", buf_s(&a),
               buf_s(&b));
        cJSON_Delete(x), cJSON_Delete(y);
        buf_free(&a), buf_free(&b);
    }
    printf("test_serve_messages: %d fields honoured, ignored or refused; blocks, model and length errors\n", n);
}

/* The log lines of fields: the unknown one and the server tool. */
static void check_log(server *sv) {
    buf e = {0};
    read_text(sv->err, &e);
    CHECKF(strstr(buf_s(&e), "warning: messages request: unknown field 'mystery_field' ignored") != NULL,
           "no log line for the unknown field");
    CHECKF(strstr(buf_s(&e), "warning: messages request: server tool 'web_search_20250305' dropped") != NULL,
           "no log line for the server tool");
    buf_free(&e);
}

/* ---- 4. a client gone mid-stream ------------------------------------------------------------------ */

static void test_disconnect(server *sv) {
    const mcase c = {1, "get_weather", 0, 3000, 1, NULL, 0, 0}; /* calls for 1625 tokens */
    const double a0 = metric(sv, "moe8:request_success_total", "finished_reason=\"abort\"");
    mreq m[2];
    msg a;
    memset(m, 0, sizeof m);
    for (int i = 0; i < 2; i++) {
        m[i].path = MSGS;
        m[i].body = json_text(conv(&c, 0));
    }
    m[0].abort_at = 2000; /* among the first tool_use blocks' events */
    multi_run(sv, m, 2);
    CHECKF(m[0].aborted && m[1].status == 200 && parse_msg_stream(&a, buf_s(&m[1].out)) && a.n_calls > 10,
           "beside a client gone mid-stream: %ld %.300s", m[1].status, buf_s(&m[1].out));
    msg_free(&a);
    CHECK(wait_idle(sv, 10));
    CHECKF(wait_metric(sv, "moe8:request_success_total", "finished_reason=\"abort\"", a0 + 1, 10),
           "the request of the client gone is not counted aborted");
    for (int i = 0; i < 2; i++) {
        free(m[i].body);
        buf_free(&m[i].out);
    }
    printf("test_serve_messages: a client gone mid-stream; the stream beside it whole\n");
}

/* ---- 5. auth and the HTTP layer's errors ------------------------------------------------------------ */

static void test_auth(const char *dir) {
    server sv;
    char args[4400];
    buf out = {0};
    static const char *const KEY[] = {"x-api-key: sekret", NULL}, *const BEARER[] = {"Authorization: Bearer sekret", NULL},
                             *const WRONG[] = {"x-api-key: nope", NULL};
    static const char BODY[] = "{" M1 "}";
    char big[3000];
    snprintf(args, sizeof args, "-m '%s' --ctx-size 1024 --threads 2 --served-model-name " NAME
             " --api-key sekret --max-body 2000", dir);
    if (server_start(&sv, "messages_auth", NULL, args)) return;
    CHECKF(mpost(&sv, MSGS, BODY, KEY, &out) == 200, "x-api-key: %s", buf_s(&out));
    CHECKF(mpost(&sv, MSGS, BODY, BEARER, &out) == 200, "Bearer: %s", buf_s(&out));
    CHECKF(mpost(&sv, MSGS "/count_tokens", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", KEY, &out) == 200,
           "count_tokens with x-api-key: %s", buf_s(&out));
    check_error(&sv, MSGS, BODY, NULL, 401, "authentication_error", "x-api-key");
    check_error(&sv, MSGS, BODY, WRONG, 401, "authentication_error", "missing or wrong API key");
    check_error(&sv, MSGS "?beta=true", BODY, NULL, 401, "authentication_error", "missing or wrong API key");
    check_error(&sv, MSGS "/count_tokens", BODY, NULL, 401, "authentication_error", "missing or wrong API key");
    memset(big, ' ', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    memcpy(big, BODY, strlen(BODY));
    check_error(&sv, MSGS, big, KEY, 413, "request_too_large", "--max-body");
    {
        /* max_tokens past the context: a limit (Claude Code asks for 32000); the answer (a named
         * tool's calls, 1625 tokens on a long context) stops at the context's end with
         * model_context_window_exceeded */
        const mcase c = {1, "get_weather", 0, 100000, 0, NULL, 0, 0};
        msg m;
        g_hdr = KEY;
        if (msg_run(&sv, &c, MSGS, &m))
            CHECKF(!strcmp(m.stop_reason, "model_context_window_exceeded") &&
                   m.input_tokens + m.cache_read + m.output_tokens == 1024, "max_tokens 100000: %s after %d + %d + %d",
                   m.stop_reason, m.input_tokens, m.cache_read, m.output_tokens);
        msg_free(&m);
        g_hdr = NULL;
    }
    {
        /* GET: 405 in Anthropic's shape */
        buf o = {0};
        cJSON *x;
        const long st = http(&sv, "GET", MSGS, NULL, 0, "Bearer sekret", &o);
        x = cJSON_Parse(buf_s(&o));
        CHECKF(st == 405 && jstr(x, "type") && !strcmp(jstr(x, "type"), "error") &&
               !strcmp(jstr(J(x, "error"), "type") ? jstr(J(x, "error"), "type") : "", "invalid_request_error"),
               "GET /v1/messages: %ld %s", st, buf_s(&o));
        cJSON_Delete(x);
        buf_free(&o);
    }
    /* the OpenAI paths beside it: their bodies as they were, x-api-key not theirs */
    {
        const bad_case b[] = {
            {"POST", CHAT, "{" MSG "}", 0, 401, INV, NULL, "invalid_api_key",
             "missing or wrong API key: send 'Authorization: Bearer <key>'"},
            {"POST", CHAT, big, 0, 413, INV, NULL, "body_too_large", "--max-body"},
        };
        check_bad(&sv, &b[0], NULL);
        CHECKF(mpost(&sv, CHAT, "{" MSG "}", KEY, &out) == 401, "x-api-key opened chat completions: %s", buf_s(&out));
        check_bad(&sv, &b[1], "Bearer sekret");
    }
    printf("test_serve_messages: x-api-key and Bearer; 401, 405 and 413 in Anthropic's shape, OpenAI's beside\n");
    buf_free(&out);
    server_stop(&sv, 10);
}

/* --max-queue 1 under a burst: 503 overloaded_error in Anthropic's shape, the others answered. */
static void test_overload(const char *dir) {
    enum { N = 6 };
    const mcase c = {1, "get_weather", 0, 800, 0, NULL, 0, 0};
    server sv;
    char args[4400];
    mreq m[N];
    int n_ok = 0, n_busy = 0;
    snprintf(args, sizeof args, "-m '%s' --ctx-size 1024 --threads 2 --served-model-name " NAME
             " --parallel 1 --max-queue 1", dir);
    if (server_start(&sv, "messages_queue", NULL, args)) return;
    memset(m, 0, sizeof m);
    for (int i = 0; i < N; i++) {
        m[i].path = MSGS;
        m[i].body = json_text(conv(&c, 0));
    }
    multi_run(&sv, m, N);
    for (int i = 0; i < N; i++) {
        cJSON *o = cJSON_Parse(buf_s(&m[i].out));
        const cJSON *e = J(o, "error");
        if (m[i].status == 200) n_ok++;
        else if (m[i].status == 503 && jstr(o, "type") && !strcmp(jstr(o, "type"), "error") && jstr(e, "type") &&
                 !strcmp(jstr(e, "type"), "overloaded_error") && jstr(e, "message") && strstr(jstr(e, "message"), "--max-queue"))
            n_busy++;
        else CHECKF(0, "burst request %d: %ld %.300s", i, m[i].status, buf_s(&m[i].out));
        cJSON_Delete(o);
        free(m[i].body);
        buf_free(&m[i].out);
    }
    CHECKF(n_ok >= 1 && n_busy >= 1 && n_ok + n_busy == N, "burst of %d: %d answered, %d overloaded", N, n_ok, n_busy);
    printf("test_serve_messages: --max-queue 1: %d answered, %d overloaded_error (503)\n", n_ok, n_busy);
    server_stop(&sv, 10);
}

/* ---- 6. the official SDK ------------------------------------------------------------------------------ */

static void test_sdk(server *sv) {
    char args[4400];
    const char *missing;
    cJSON *o;
    int n = 0, n_ok = 0;
    if (g_asan) { /* the SDK's requests are the ones the C checks make; the sanitizer run sees those */
        printf("test_serve_messages: @anthropic-ai/sdk: in the release build only\n");
        return;
    }
    if ((missing = node_missing("@anthropic-ai/sdk"))) {
        printf("test_serve_messages: @anthropic-ai/sdk: skipped: %s\n", missing);
        return;
    }
    snprintf(args, sizeof args, "'%s/.deps/clients' 'http://127.0.0.1:%d' " NAME, MOE8_SOURCE_DIR, sv->port);
    o = node_checks("messages_sdk.mjs", args, 240, &sv, 1, 6, &n_ok, &n);
    printf("test_serve_messages: @anthropic-ai/sdk (create, stream, a tool round trip, countTokens, errors): "
           "%d of %d checks pass\n", n_ok, n);
    cJSON_Delete(o);
}

/* ---- 7. Claude Code -------------------------------------------------------------------------------- */

/* The chain fixture's folder again with max_position_embeddings 65536 (its
 * files linked), so a context holds Claude Code's ~12k-token prompt. */
static const char *long_model(const char *dir) {
    static char out[4200];
    char path[4400], cmd[24000];
    cJSON *c;
    size_t n = 0;
    unsigned char *txt;
    snprintf(out, sizeof out, "%s/serve_messages_long", MOE8_TEST_TMP);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s' && for f in '%s'/*; do ln -s \"$f\" '%s'/; done && rm '%s/config.json'",
             out, out, dir, out, out);
    if (test_run(cmd) != 0) return NULL;
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (!(txt = test_slurp(path, &n)) || !(c = cJSON_ParseWithLength((const char *)txt, n))) {
        free(txt);
        return NULL;
    }
    free(txt);
    cJSON_ReplaceItemInObject(c, "max_position_embeddings", cJSON_CreateNumber(65536));
    {
        char *t = cJSON_PrintUnformatted(c);
        FILE *f;
        snprintf(path, sizeof path, "%s/config.json", out);
        f = fopen(path, "wb");
        if (f) fputs(t, f), fclose(f);
        free(t);
        cJSON_Delete(c);
        return f ? out : NULL;
    }
}

/* One turn of Claude Code's non-interactive mode: its ~12k-token first request
 * (system blocks with cache_control, a role "system" message, a dozen tools,
 * thinking adaptive, max_tokens 32000 cut to the context) answered, exit 0;
 * a second run's prompt >= 95% from the prefix cache. */
static void test_claude_code(const char *dir) {
    char cli[4200], cmd[32768], outp[4200], errp[4200], home[4200], args[4400];
    const char *longdir;
    buf out = {0}, err = {0}, log = {0};
    server sv;
    int a0, rc, rc2;
    const char *at;
    snprintf(cli, sizeof cli, "%s/.deps/clients/node_modules/@anthropic-ai/claude-code/cli-wrapper.cjs", MOE8_SOURCE_DIR);
    if (g_asan || test_run("command -v node >/dev/null 2>&1") != 0 || access(cli, R_OK) != 0) {
        printf("test_serve_messages: Claude Code: skipped: %s\n", g_asan ? "in the release build only"
               : access(cli, R_OK) ? "no .deps/clients/node_modules/@anthropic-ai/claude-code (make deps installs it)"
                                   : "node not found");
        return;
    }
    if (!(longdir = long_model(dir))) {
        CHECKF(0, "cannot make the long-context copy of %s", dir);
        return;
    }
    snprintf(args, sizeof args, "-m '%s' --ctx-size 32768 --threads 2 --served-model-name " NAME " --api-key cc-key",
             longdir);
    if (server_start(&sv, "messages_cc", NULL, args)) return;
    snprintf(home, sizeof home, "%s/claude_home", MOE8_TEST_TMP);
    snprintf(outp, sizeof outp, "%s/claude.out", MOE8_TEST_TMP);
    snprintf(errp, sizeof errp, "%s/claude.err", MOE8_TEST_TMP);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s' && cd '%s' && HOME='%s' ANTHROPIC_BASE_URL=http://127.0.0.1:%d "
             "ANTHROPIC_API_KEY=cc-key CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 timeout 240 node '%s' -p 'Say hello' "
             "--model " NAME " >'%s' 2>'%s' </dev/null", home, home, home, home, sv.port, cli, outp, errp);
    /* its requests are the access lines it caused, counted once they have settled: Claude Code
     * may retry or abandon a request, and a line is written once its answer is out (an unsettled
     * count once took the line of the /metrics request just before it as one of Claude Code's) */
    a0 = access_lines(&sv, 1);
    rc = test_run(cmd);
    sv.n_req += access_lines(&sv, 1) - a0;
    if (rc == 0) { /* a second turn: its prompt from the prefix cache (the billing header block dropped) */
        const double h0 = metric(&sv, "moe8:prefix_cache_hits_total", NULL),
                     q0 = metric(&sv, "moe8:prefix_cache_queries_total", NULL);
        double h1, q1;
        a0 = access_lines(&sv, 1);
        rc2 = test_run(cmd);
        sv.n_req += access_lines(&sv, 1) - a0;
        h1 = metric(&sv, "moe8:prefix_cache_hits_total", NULL), q1 = metric(&sv, "moe8:prefix_cache_queries_total", NULL);
        CHECKF(rc2 == 0 && q1 - q0 > 8000 && h1 - h0 >= 0.95 * (q1 - q0),
               "Claude Code's second turn: exit %d, %.0f of %.0f prompt tokens from the prefix cache", rc2, h1 - h0,
               q1 - q0);
        printf("test_serve_messages: Claude Code's second turn: %.0f of %.0f prompt tokens from the prefix cache\n",
               h1 - h0, q1 - q0);
    }
    read_text(outp, &out);
    read_text(errp, &err);
    read_text(sv.err, &log);
    at = strstr(buf_s(&log), "moe8 serve: POST /v1/messages 200 prompt_tokens=");
    CHECKF(rc == 0 && strstr(buf_s(&out), "Hello!"), "claude -p exited %d: %s\n%s", rc, buf_s(&out), buf_s(&err));
    CHECKF(at && atoi(at + strlen("moe8 serve: POST /v1/messages 200 prompt_tokens=")) > 8000,
           "no long /v1/messages answered: %s", buf_s(&log));
    printf("test_serve_messages: Claude Code: one turn (%d prompt tokens) answered '%s', exit %d\n",
           at ? atoi(at + strlen("moe8 serve: POST /v1/messages 200 prompt_tokens=")) : -1,
           strstr(buf_s(&out), "Hello!") ? "Hello!" : "?", rc);
    server_stop(&sv, 10);
    buf_free(&out);
    buf_free(&err);
    buf_free(&log);
}

/* ---- main ------------------------------------------------------------------------------------------ */

/* --part clients: the SDK and Claude Code, each against its own server */
static void clients_part(void) {
    fx_opts o = serve_fixture_opts();
    server sv;
    char args[4400];
    const char *dir;
    o.tensor_hook = chain_hook;
    dir = fx_test_model("serve_messages_chain_clients", &o, 1);
    snprintf(args, sizeof args, "-m '%s' --ctx-size 4096 --threads 2 --served-model-name " NAME, dir);
    if (server_start(&sv, "messages_clients", NULL, args) == 0) {
        test_sdk(&sv);
        phase("sdk");
        CHECK(wait_idle(&sv, 5));
        server_stop(&sv, 10);
    }
    test_claude_code(dir);
    phase("claude code");
}

int main(int argc, char **argv) {
    fx_opts o = serve_fixture_opts();
    server sv;
    char args[4400];
    const char *dir;
    serve_test_parts(argc, argv);
    serve_test_init("test_serve_messages");
    if (g_part_clients) {
        if (g_asan) printf("test_serve_messages: @anthropic-ai/sdk, Claude Code: in the release build only\n");
        else clients_part();
    }
    if (!g_part_c) {
        curl_global_cleanup();
        return test_summary();
    }
    o.tensor_hook = chain_hook;
    dir = fx_test_model("serve_messages_chain", &o, 1);
    snprintf(args, sizeof args, "-m '%s' --ctx-size 4096 --threads 2 --served-model-name " NAME, dir);
    if (server_start(&sv, "messages", NULL, args) == 0) {
        test_answers(&sv);
        phase("answers");
        test_batch(&sv);
        phase("batch invariance");
        test_count(&sv);
        test_fields(&sv);
        check_log(&sv);
        phase("fields, errors");
        test_disconnect(&sv);
        phase("disconnect");
        CHECK(wait_idle(&sv, 5));
        server_stop(&sv, 10);
    }
    test_auth(dir);
    phase("auth");
    test_overload(dir);
    phase("overload");
    curl_global_cleanup();
    printf("test_serve_messages: %.1f s\n", now_s() - g_t0);
    return test_summary();
}
