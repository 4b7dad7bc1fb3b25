/*
 * test_serve_responses.c — OpenAI's Responses API of `moe8 serve` (the CLI at
 * MOE8_CLI) over HTTP on the tiny Qwen3 fixtures, each against an
 * independent reference:
 *   - the field policy: a table of fields honoured (200), ignored (200), refused
 *     (400 naming the field), an unknown one's warning line, the errors of the
 *     chat path in the Responses names;
 *   - text, reasoning (the chain model: "<think>Let me think</think>Hello!") and
 *     tool calls (required and named, a namespace tool's call split back into
 *     name + namespace, hosted tools dropped): the same request through
 *     /v1/chat/completions at temperature 0 gives the same text, reasoning,
 *     calls and token counts;
 *   - streams: every event "event: T\ndata: JSON\n\n" with type T and
 *     sequence_number 0, 1, 2, ...; response.created and .in_progress first,
 *     one terminal event last; each item added -> deltas -> done with deltas
 *     joined = the done text = the final Response's item; the final Response's
 *     output = the whole (non-stream) answer's (ids aside);
 *   - store: previous_response_id chains (its prompt = the whole conversation
 *     counted by /v1/responses/input_tokens = chat's prompt_tokens), GET
 *     /v1/responses/{id}, store false keeps nothing, --responses-store 2: a
 *     third response evicts the first (404);
 *   - a client that hangs up mid-stream: the server goes on serving;
 *   - 32 requests at once (text and tool calls, whole and streamed) each equal
 *     themselves alone; hostile bodies and routes (duplicate keys, bad UTF-8,
 *     NUL, items and tools of the wrong shape, wrong methods) refused;
 *   - tests/clients/responses_openai.mjs (the openai library's
 *     responses.create plain, streamed, with tools and text.format; an
 *     @openai/agents agent with a function tool) when node and .deps/clients
 *     are there;
 *   - Codex CLI (.deps/clients, @openai/codex): `codex exec` with a fresh
 *     CODEX_HOME against the chain model with a 32k context: one streamed
 *     request (its hosted web_search dropped with a log line), exit 0, the
 *     answer printed.
 * The node clients and Codex are `--part clients` (ctest's
 * test_serve_responses_clients, labelled client; in the release build only:
 * the sanitizer run keeps every C check of the same paths), the rest
 * `--part c`.
 */
#include <sys/stat.h>

#include "test.h"
#include "fixture_model.h"
#include "serve_test.h"

#define NAME "resp"
#define RESP "/v1/responses"

/* ---- requests ------------------------------------------------------------------------------ */

/* POST body to path; the answer parsed (NULL when it is not JSON), *status its status. */
static cJSON *jpost(server *sv, const char *path, const char *body, long *status, buf *raw) {
    buf out = {0};
    cJSON *o;
    *status = post(sv, path, body, &out);
    o = cJSON_Parse(buf_s(&out));
    if (raw) {
        raw->n = 0;
        buf_str(raw, buf_s(&out));
    }
    buf_free(&out);
    return o;
}

/* The output items of a Response with their ids taken out, as text (what two answers
 * to one request share); `by_type`: reasoning items first (a whole answer puts them
 * first, a stream where the model wrote them). */
static char *output_text(const cJSON *resp, int by_type) {
    cJSON *o = cJSON_Duplicate(J(resp, "output"), 1), *it;
    char *txt;
    cJSON_ArrayForEach(it, o) {
        cJSON_DeleteItemFromObject(it, "id");
        cJSON_DeleteItemFromObject(it, "call_id");
    }
    for (int k = by_type ? cJSON_GetArraySize(o) - 1 : -1; k > 0; k--) {
        const char *t = jstr(cJSON_GetArrayItem(o, k), "type");
        if (t && !strcmp(t, "reasoning")) {
            cJSON_InsertItemInArray(o, 0, cJSON_DetachItemFromArray(o, k));
            break;
        }
    }
    txt = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return txt;
}

/* The first output item of type `type` (NULL: none). */
static const cJSON *item_of(const cJSON *resp, const char *type, int nth) {
    const cJSON *it;
    cJSON_ArrayForEach(it, J(resp, "output")) {
        const char *t = jstr(it, "type");
        if (t && !strcmp(t, type) && nth-- == 0) return it;
    }
    return NULL;
}

/* The text of a message or reasoning item (its first content part), or "". */
static const char *item_text(const cJSON *it) {
    const char *t = jstr(cJSON_GetArrayItem(J(it, "content"), 0), "text");
    return t ? t : "";
}

/* ---- streams -------------------------------------------------------------------------------- */

typedef struct {
    const char *type;          /* its item's type */
    buf acc;                   /* its deltas joined */
    int done, part_open;
} sitem;

/* Check a Responses stream event by event (API33.md A.3); the final Response
 * (the caller frees it), or NULL when the stream is broken (CHECKed). */
static cJSON *check_stream(const char *body, const char *what) {
    sitem items[16];
    int n_items = 0, seq = 0, ok = 1, terminal = 0;
    cJSON *final = NULL;
    const char *p = body;
    memset(items, 0, sizeof items);
#define BAD(...) do { CHECKF(0, __VA_ARGS__); ok = 0; goto out; } while (0)
    while (*p) {
        const char *nl = strchr(p, '\n'), *dl, *end;
        char type[96];
        cJSON *e;
        const char *t;
        int oi;
        if (terminal) BAD("%s: an event after the terminal one: %.200s", what, p);
        if (strncmp(p, "event: ", 7) || !nl || (size_t)(nl - p - 7) >= sizeof type)
            BAD("%s: event %d does not start with 'event: ': %.200s", what, seq, p);
        snprintf(type, sizeof type, "%.*s", (int)(nl - p - 7), p + 7);
        dl = nl + 1;
        if (strncmp(dl, "data: ", 6) || !(end = strstr(dl, "\n\n")))
            BAD("%s: event %d (%s) has no 'data: ' line ended by a blank line", what, seq, type);
        e = cJSON_ParseWithLength(dl + 6, (size_t)(end - dl - 6));
        p = end + 2;
        t = jstr(e, "type");
        if (!e || !t || strcmp(t, type) || !cJSON_IsNumber(J(e, "sequence_number")) ||
            J(e, "sequence_number")->valueint != seq) {
            cJSON_Delete(e);
            BAD("%s: event %d: type %s, JSON %.300s", what, seq, type, dl + 6);
        }
        seq++;
        oi = cJSON_IsNumber(J(e, "output_index")) ? J(e, "output_index")->valueint : -1;
        if (seq == 1 || seq == 2) {
            const char *want = seq == 1 ? "response.created" : "response.in_progress";
            const char *st = jstr(J(e, "response"), "status");
            if (strcmp(t, want) || !st || strcmp(st, "in_progress") || cJSON_GetArraySize(J(J(e, "response"), "output")))
                BAD("%s: event %d is %s (status %s), want %s in_progress", what, seq - 1, t, st ? st : "?", want);
        } else if (!strcmp(t, "response.completed") || !strcmp(t, "response.incomplete") ||
                   !strcmp(t, "response.failed")) {
            terminal = 1;
            final = cJSON_DetachItemFromObject(e, "response");
            if (strcmp(jstr(final, "status") ? jstr(final, "status") : "", t + 9))
                BAD("%s: %s with status %s", what, t, jstr(final, "status"));
        } else if (!strcmp(t, "response.output_item.added")) {
            if (oi != n_items || n_items >= 16 || (n_items && !items[n_items - 1].done))
                BAD("%s: output_item.added at %d with %d items (the last done: %d)", what, oi, n_items,
                    n_items ? items[n_items - 1].done : 1);
            items[n_items].type = jstr(J(e, "item"), "type");
            items[n_items].type = items[n_items].type && !strcmp(items[n_items].type, "function_call") ? "function_call"
                                  : items[n_items].type && !strcmp(items[n_items].type, "reasoning") ? "reasoning" : "message";
            n_items++;
        } else if (oi < 0 || oi >= n_items || items[oi].done) {
            BAD("%s: %s for output_index %d of %d items", what, t, oi, n_items);
        } else if (strstr(t, ".delta")) {
            const char *d = jstr(e, "delta");
            if (!d) BAD("%s: %s without a delta", what, t);
            buf_str(&items[oi].acc, d);
        } else if (!strcmp(t, "response.output_text.done") || !strcmp(t, "response.reasoning_text.done")) {
            if (strcmp(jstr(e, "text") ? jstr(e, "text") : "", buf_s(&items[oi].acc)))
                BAD("%s: %s text '%s', deltas joined '%s'", what, t, jstr(e, "text"), buf_s(&items[oi].acc));
        } else if (!strcmp(t, "response.function_call_arguments.done")) {
            if (strcmp(jstr(e, "arguments") ? jstr(e, "arguments") : "", buf_s(&items[oi].acc)))
                BAD("%s: arguments '%s', deltas joined '%s'", what, jstr(e, "arguments"), buf_s(&items[oi].acc));
        } else if (!strcmp(t, "response.output_item.done")) {
            const cJSON *it = J(e, "item");
            const char *got = !strcmp(items[oi].type, "function_call") ? jstr(it, "arguments") : item_text(it);
            if (strcmp(got ? got : "", buf_s(&items[oi].acc)))
                BAD("%s: output_item.done %d holds '%s', deltas joined '%s'", what, oi, got, buf_s(&items[oi].acc));
            items[oi].done = 1;
        }
        cJSON_Delete(e);
    }
    if (!terminal || !final) BAD("%s: no terminal event", what);
    if (cJSON_GetArraySize(J(final, "output")) != n_items)
        BAD("%s: the final Response has %d items, the stream %d", what, cJSON_GetArraySize(J(final, "output")), n_items);
out:
#undef BAD
    for (int i = 0; i < 16; i++) buf_free(&items[i].acc);
    if (!ok) {
        cJSON_Delete(final);
        return NULL;
    }
    return final;
}

/* body as a whole answer and streamed ("stream": true added): both 200, the stream
 * well-formed, the two outputs equal (ids aside); the whole answer (freed by the caller). */
static cJSON *whole_and_stream(server *sv, const char *body, const char *what, int by_type) {
    long st1, st2;
    buf raw = {0};
    cJSON *whole = jpost(sv, RESP, body, &st1, &raw), *fin = NULL;
    char *sbody = malloc(strlen(body) + 20);
    snprintf(sbody, strlen(body) + 20, "{\"stream\":true,%s", body + 1);
    CHECKF(st1 == 200 && whole, "%s: %ld %.600s", what, st1, buf_s(&raw));
    cJSON_Delete(jpost(sv, RESP, sbody, &st2, &raw));
    CHECKF(st2 == 200, "%s streamed: %ld %.600s", what, st2, buf_s(&raw));
    if (st2 == 200 && (fin = check_stream(buf_s(&raw), what)) && whole) {
        char *a = output_text(whole, by_type), *b = output_text(fin, by_type);
        CHECKF(!strcmp(a, b), "%s: the stream's output %s, the whole answer's %s", what, b, a);
        /* the same tokens (the stream's prompt came from the prefix cache) */
        CHECKF(J(J(whole, "usage"), "input_tokens")->valueint == J(J(fin, "usage"), "input_tokens")->valueint &&
               J(J(whole, "usage"), "output_tokens")->valueint == J(J(fin, "usage"), "output_tokens")->valueint &&
               J(J(J(whole, "usage"), "output_tokens_details"), "reasoning_tokens")->valueint ==
                   J(J(J(fin, "usage"), "output_tokens_details"), "reasoning_tokens")->valueint,
               "%s: usage %s, streamed %s", what, cJSON_PrintUnformatted(J(whole, "usage")),
               cJSON_PrintUnformatted(J(fin, "usage")));
        free(a);
        free(b);
    }
    cJSON_Delete(fin);
    free(sbody);
    buf_free(&raw);
    return whole;
}

/* ---- 1. the field policy ------------------------------------------------------------------- */

static void test_fields(server *sv) {
    static const struct {
        const char *field, *value;
        int status;
        const char *param; /* 400: the param named */
    } ROWS[] = {
        {"instructions", "\"Be brief.\"", 200, NULL},
        {"max_output_tokens", "2", 200, NULL},
        {"temperature", "0.5", 200, NULL},
        {"top_p", "0.9", 200, NULL},
        {"stop", "[\"zz\"]", 200, NULL},
        {"seed", "7", 200, NULL},
        {"parallel_tool_calls", "false", 200, NULL},
        {"text", "{\"format\":{\"type\":\"text\"},\"verbosity\":\"low\"}", 200, NULL},
        {"reasoning", "{\"effort\":\"low\",\"summary\":\"auto\"}", 200, NULL},
        {"include", "[\"reasoning.encrypted_content\",\"no.such.value\"]", 200, NULL},
        {"store", "false", 200, NULL},
        {"top_logprobs", "0", 200, NULL},
        {"metadata", "{\"k\":\"v\"}", 200, NULL},
        {"user", "\"u\"", 200, NULL},
        {"safety_identifier", "\"s\"", 200, NULL},
        {"prompt_cache_key", "\"k\"", 200, NULL},
        {"client_metadata", "{\"a\":1}", 200, NULL},
        {"truncation", "\"auto\"", 200, NULL},
        {"service_tier", "\"auto\"", 200, NULL},
        {"stream_options", "{\"include_obfuscation\":false}", 200, NULL},
        {"max_tool_calls", "3", 200, NULL},
        {"background", "false", 200, NULL},
        {"background", "true", 400, "background"},
        {"conversation", "\"conv_1\"", 400, "conversation"},
        {"prompt", "{\"id\":\"p\"}", 400, "prompt"},
        {"top_logprobs", "3", 400, "top_logprobs"},
        {"reasoning", "{\"effort\":\"huge\"}", 400, "reasoning.effort"},
        {"text", "{\"format\":{\"type\":\"xml\"}}", 400, "text.format.type"},
        {"text", "{\"format\":{\"type\":\"json_schema\",\"name\":\"x\",\"schema\":5}}", 400, "text.format.schema"},
        {"max_output_tokens", "100000", 400, "max_output_tokens"},
        {"temperature", "-1", 400, "temperature"},
        {"tool_choice", "{\"type\":\"web_search_preview\"}", 400, "tool_choice"},
        {"tool_choice", "\"required\"", 400, "tool_choice"},
        {"previous_response_id", "\"resp_none\"", 404, "previous_response_id"},
        {"input", "[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\",\"image_url\":\"x\"}]}]", 400,
         "input[0].content[0]"},
        {"input", "[{\"type\":\"item_reference\",\"id\":\"x\"}]", 400, "input[0]"},
        {"input", "5", 400, "input"},
        {"input", "[]", 400, "input"},
        {"model", "\"other\"", 404, "model"},
    };
    int n_ok = 0;
    const int n = (int)(sizeof ROWS / sizeof *ROWS);
    for (int i = 0; i < n; i++) {
        char *body;
        long st;
        buf raw = {0};
        cJSON *o = cJSON_Parse("{\"model\":\"" NAME "\",\"input\":\"Hi\",\"max_output_tokens\":2}");
        const char *param;
        cJSON_DeleteItemFromObject(o, ROWS[i].field);
        cJSON_AddItemToObject(o, ROWS[i].field, cJSON_Parse(ROWS[i].value));
        body = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
        o = jpost(sv, RESP, body, &st, &raw);
        param = jstr(J(o, "error"), "param");
        if (ROWS[i].status == 200)
            CHECKF(st == 200 && !strcmp(jstr(o, "object") ? jstr(o, "object") : "", "response"), "%s: %ld %.400s",
                   body, st, buf_s(&raw));
        else
            CHECKF(st == ROWS[i].status && param && !strcmp(param, ROWS[i].param), "%s: %ld %.400s (want %d naming %s)",
                   body, st, buf_s(&raw), ROWS[i].status, ROWS[i].param);
        n_ok += st == ROWS[i].status;
        cJSON_Delete(o);
        free(body);
        buf_free(&raw);
    }
    /* an unknown field: ignored, one warning line naming it */
    {
        long st;
        buf e = {0};
        cJSON_Delete(jpost(sv, RESP, "{\"model\":\"" NAME "\",\"input\":\"Hi\",\"max_output_tokens\":1,\"frobnicate\":1}",
                           &st, NULL));
        CHECKF(st == 200, "an unknown field: %ld", st);
        sleep_s(0.1);
        read_text(sv->err, &e);
        CHECKF(strstr(buf_s(&e), "warning: responses request: unknown field 'frobnicate' ignored"), "no warning: %s",
               buf_s(&e));
        buf_free(&e);
    }
    printf("test_serve_responses: fields: %d of %d rows as the table says\n", n_ok, n);
}

/* ---- 2. text and tool calls against chat completions ---------------------------------------- */

/* The chat answer of body (chat completions). */
static cJSON *chat(server *sv, const char *body) {
    long st;
    buf raw = {0};
    cJSON *o = jpost(sv, "/v1/chat/completions", body, &st, &raw);
    CHECKF(st == 200 && o, "chat: %ld %.600s", st, buf_s(&raw));
    buf_free(&raw);
    return o;
}

static const cJSON *chat_msg(const cJSON *c) {
    return J(cJSON_GetArrayItem(J(c, "choices"), 0), "message");
}

static void test_text(server *sv) {
    /* a conversation of every message kind: instructions, developer, an assistant turn with a
     * call and its output; thinking off (effort "none") = chat's enable_thinking false */
    static const char *const R =
        "{\"model\":\"" NAME "\",\"temperature\":0,\"max_output_tokens\":24,\"reasoning\":{\"effort\":\"none\"},"
        "\"instructions\":\"You are terse.\",\"input\":["
        "{\"role\":\"developer\",\"content\":\"Answer in English.\"},"
        "{\"type\":\"message\",\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"Weather?\"}]},"
        "{\"type\":\"function_call\",\"call_id\":\"call_1\",\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Bern\\\"}\"},"
        "{\"type\":\"function_call_output\",\"call_id\":\"call_1\",\"output\":\"sunny\"},"
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"It is sunny.\"}]},"
        "{\"role\":\"user\",\"content\":\"Thanks\"}]}";
    static const char *const C =
        "{\"model\":\"" NAME "\",\"temperature\":0,\"max_tokens\":24,\"chat_template_kwargs\":{\"enable_thinking\":false},"
        "\"messages\":[{\"role\":\"system\",\"content\":\"You are terse.\"},"
        "{\"role\":\"developer\",\"content\":\"Answer in English.\"},"
        "{\"role\":\"user\",\"content\":\"Weather?\"},"
        "{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\",\"function\":"
        "{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Bern\\\"}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"sunny\"},"
        "{\"role\":\"assistant\",\"content\":\"It is sunny.\"},"
        "{\"role\":\"user\",\"content\":\"Thanks\"}]}";
    cJSON *r = whole_and_stream(sv, R, "text", 0), *c = chat(sv, C);
    const cJSON *msg = item_of(r, "message", 0), *u = J(r, "usage"), *cu = J(c, "usage");
    const char *want = jstr(chat_msg(c), "content");
    long st;
    char body[256];
    cJSON *it;
    CHECKF(r && msg && want && !strcmp(item_text(msg), want), "text: '%s', chat's '%s'", item_text(msg), want ? want : "?");
    CHECKF(J(u, "input_tokens")->valueint == J(cu, "prompt_tokens")->valueint &&
           J(u, "output_tokens")->valueint == J(cu, "completion_tokens")->valueint &&
           J(u, "total_tokens")->valueint == J(cu, "total_tokens")->valueint &&
           J(J(u, "output_tokens_details"), "reasoning_tokens")->valueint == 0 &&
           cJSON_IsNumber(J(J(u, "input_tokens_details"), "cached_tokens")),
           "usage %s, chat's %s", cJSON_PrintUnformatted(u), cJSON_PrintUnformatted(cu));
    CHECKF(!strcmp(jstr(r, "status"), "incomplete") == !strcmp(jstr(cJSON_GetArrayItem(J(c, "choices"), 0), "finish_reason"), "length"),
           "status %s", jstr(r, "status"));
    CHECKF(!strncmp(jstr(r, "id"), "resp_", 5) && !strcmp(jstr(r, "object"), "response") &&
           !strcmp(jstr(r, "instructions"), "You are terse.") && !strcmp(jstr(r, "model"), NAME) &&
           J(r, "temperature")->valuedouble == 0 && cJSON_IsNumber(J(r, "created_at")),
           "the echo: %s", cJSON_PrintUnformatted(r));
    /* input_tokens counts the same prompt */
    it = jpost(sv, "/v1/responses/input_tokens", R, &st, NULL);
    CHECKF(st == 200 && J(it, "input_tokens") && J(it, "input_tokens")->valueint == J(cu, "prompt_tokens")->valueint,
           "input_tokens: %ld %s, chat's %d", st, cJSON_PrintUnformatted(it), J(cu, "prompt_tokens")->valueint);
    cJSON_Delete(it);
    snprintf(body, sizeof body, "{\"model\":\"" NAME "\",\"input\":\"Hi\"}");
    it = jpost(sv, "/v1/responses/input_tokens", body, &st, NULL);
    cJSON_Delete(c);
    c = chat(sv, "{\"model\":\"" NAME "\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}");
    CHECKF(st == 200 && J(it, "input_tokens")->valueint == J(J(c, "usage"), "prompt_tokens")->valueint,
           "input_tokens of a string: %s", cJSON_PrintUnformatted(it));
    cJSON_Delete(it);
    cJSON_Delete(c);
    cJSON_Delete(r);
    printf("test_serve_responses: text = chat's, whole and streamed; input_tokens = chat's prompt_tokens\n");
}

#define TOOLS_R                                                                                                    \
    "\"tools\":[{\"type\":\"function\",\"name\":\"get_weather\",\"strict\":false,\"parameters\":{\"type\":\"object\","     \
    "\"properties\":{\"city\":{\"type\":\"string\",\"enum\":[\"Bern\",\"Paris\"]}},\"required\":[\"city\"]}},"        \
    "{\"type\":\"namespace\",\"name\":\"mcp__sage__\",\"description\":\"d\",\"tools\":[{\"type\":\"function\","        \
    "\"name\":\"__sage_turn\",\"parameters\":{\"type\":\"object\",\"properties\":{\"q\":{\"type\":\"integer\","        \
    "\"enum\":[1,2,3]}},\"required\":[\"q\"]}}]},{\"type\":\"web_search\"},{\"type\":\"custom\",\"name\":\"apply_patch\"}]"
#define TOOLS_C                                                                                                    \
    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","    \
    "\"properties\":{\"city\":{\"type\":\"string\",\"enum\":[\"Bern\",\"Paris\"]}},\"required\":[\"city\"]}}},"       \
    "{\"type\":\"function\",\"function\":{\"name\":\"mcp__sage__sage_turn\",\"parameters\":{\"type\":\"object\","      \
    "\"properties\":{\"q\":{\"type\":\"integer\",\"enum\":[1,2,3]}},\"required\":[\"q\"]}}}]"

/* The calls of a Response against chat's tool_calls: same count, names (flat), arguments. */
static int same_calls(const cJSON *r, const cJSON *c, const char *what) {
    const cJSON *calls = J(chat_msg(c), "tool_calls"), *tc;
    int k = 0, ok = cJSON_GetArraySize(calls) > 0;
    cJSON_ArrayForEach(tc, calls) {
        const cJSON *it = item_of(r, "function_call", k++);
        const char *name = jstr(it, "name"), *ns = jstr(it, "namespace"), *args = jstr(it, "arguments");
        const char *cname = jstr(J(tc, "function"), "name"), *cargs = jstr(J(tc, "function"), "arguments");
        char flat[160];
        snprintf(flat, sizeof flat, "%s%s", ns ? "mcp__sage__" : "", name ? (ns ? name + 2 : name) : "");
        ok &= it && name && args && cname && cargs && !strcmp(flat, cname) && !strcmp(args, cargs) &&
              jstr(it, "call_id") && !strcmp(jstr(it, "status"), "completed") && (!ns || !strcmp(ns, "mcp__sage__"));
    }
    ok &= item_of(r, "function_call", k) == NULL;
    CHECKF(ok, "%s: calls %s, chat's %s", what, cJSON_PrintUnformatted(J(r, "output")), cJSON_PrintUnformatted(calls));
    return ok;
}

static void test_tools(server *sv) {
    static const char *const CHOICE_R[] = {"\"required\"",
                                           "{\"type\":\"function\",\"name\":\"__sage_turn\",\"namespace\":\"mcp__sage__\"}",
                                           "{\"type\":\"function\",\"name\":\"get_weather\"}"};
    static const char *const CHOICE_C[] = {"\"required\"",
                                           "{\"type\":\"function\",\"function\":{\"name\":\"mcp__sage__sage_turn\"}}",
                                           "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}"};
    int n_ok = 0;
    for (int i = 0; i < 3; i++) {
        char rb[2048], cb[2048], what[64];
        cJSON *r, *c;
        snprintf(rb, sizeof rb, "{\"model\":\"" NAME "\",\"temperature\":0,\"max_output_tokens\":60,\"reasoning\":"
                 "{\"effort\":\"minimal\"},\"input\":\"Weather in Bern?\",\"tool_choice\":%s,\"parallel_tool_calls\":%s,"
                 TOOLS_R "}", CHOICE_R[i], i == 1 ? "false" : "true");
        snprintf(cb, sizeof cb, "{\"model\":\"" NAME "\",\"temperature\":0,\"max_tokens\":60,\"chat_template_kwargs\":"
                 "{\"enable_thinking\":false},\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Bern?\"}],"
                 "\"tool_choice\":%s,\"parallel_tool_calls\":%s," TOOLS_C "}", CHOICE_C[i], i == 1 ? "false" : "true");
        snprintf(what, sizeof what, "tool_choice %s", CHOICE_R[i]);
        r = whole_and_stream(sv, rb, what, 0);
        c = chat(sv, cb);
        n_ok += same_calls(r, c, what);
        CHECKF(!strcmp(jstr(r, "status") ? jstr(r, "status") : "", "completed"), "%s: status %s", what, jstr(r, "status"));
        cJSON_Delete(r);
        cJSON_Delete(c);
    }
    {
        buf e = {0};
        read_text(sv->err, &e);
        CHECKF(strstr(buf_s(&e), "responses request: tools of type 'web_search', 'custom' dropped"),
               "no line for the hosted tools: %s", buf_s(&e));
        buf_free(&e);
    }
    printf("test_serve_responses: tool calls (required, a namespace's, named): %d of 3 as chat's, whole and "
           "streamed\n", n_ok);
}

/* ---- 3. reasoning (the chain model) -------------------------------------------------------------- */

static void test_reasoning(server *sv) {
    cJSON *r = whole_and_stream(sv, "{\"model\":\"" NAME "\",\"temperature\":0,\"input\":\"Hi there\"}", "reasoning", 0);
    cJSON *c = chat(sv, "{\"model\":\"" NAME "\",\"temperature\":0,\"messages\":[{\"role\":\"user\",\"content\":\"Hi there\"}]}");
    const cJSON *rs = item_of(r, "reasoning", 0), *msg = item_of(r, "message", 0);
    const char *cr = jstr(chat_msg(c), "reasoning_content"), *cc = jstr(chat_msg(c), "content");
    CHECKF(rs && msg && cJSON_GetArrayItem(J(r, "output"), 0) == rs && !strcmp(item_text(rs), "Let me think") &&
           !strcmp(item_text(msg), "Hello!") && cr && !strcmp(cr, item_text(rs)) && cc && !strcmp(cc, item_text(msg)) &&
           !strcmp(jstr(cJSON_GetArrayItem(J(rs, "content"), 0), "type"), "reasoning_text") &&
           cJSON_IsArray(J(rs, "summary")),
           "reasoning: %s; chat's %s", cJSON_PrintUnformatted(J(r, "output")), cJSON_PrintUnformatted(chat_msg(c)));
    /* "<think>" "Let" " me" " think" "</" "think" ">": 7 of the 9 tokens */
    CHECKF(J(J(J(r, "usage"), "output_tokens_details"), "reasoning_tokens")->valueint == 7 &&
           J(J(r, "usage"), "output_tokens")->valueint == 9,
           "reasoning tokens: %s", cJSON_PrintUnformatted(J(r, "usage")));
    cJSON_Delete(r);
    cJSON_Delete(c);
    /* effort none: thinking off, as chat's enable_thinking false */
    r = whole_and_stream(sv, "{\"model\":\"" NAME "\",\"temperature\":0,\"input\":\"Hi there\",\"reasoning\":{\"effort\":\"none\"}}",
                         "effort none", 1);
    c = chat(sv, "{\"model\":\"" NAME "\",\"temperature\":0,\"chat_template_kwargs\":{\"enable_thinking\":false},"
             "\"messages\":[{\"role\":\"user\",\"content\":\"Hi there\"}]}");
    CHECKF(!strcmp(item_text(item_of(r, "message", 0)), jstr(chat_msg(c), "content")) &&
           J(J(r, "usage"), "input_tokens")->valueint == J(J(c, "usage"), "prompt_tokens")->valueint,
           "effort none: %s; chat's %s", cJSON_PrintUnformatted(J(r, "output")), cJSON_PrintUnformatted(chat_msg(c)));
    cJSON_Delete(r);
    cJSON_Delete(c);
    /* max_output_tokens inside the think block: incomplete, the reasoning so far */
    r = whole_and_stream(sv, "{\"model\":\"" NAME "\",\"temperature\":0,\"input\":\"Hi there\",\"max_output_tokens\":3}",
                         "incomplete", 0);
    CHECKF(!strcmp(jstr(r, "status"), "incomplete") &&
           !strcmp(jstr(J(r, "incomplete_details"), "reason"), "max_output_tokens") &&
           !strcmp(item_text(item_of(r, "reasoning", 0)), "Let me") && !item_of(r, "message", 0),
           "incomplete: %s", cJSON_PrintUnformatted(r));
    cJSON_Delete(r);
    printf("test_serve_responses: reasoning items = chat's reasoning_content (7 reasoning tokens), effort none, "
           "incomplete\n");
}

/* Thinking off, a call whose argument holds "<think>x</think>y" (a named tool, its enum forcing
 * it): the argument whole in the call, no reasoning split out of it, on chat and on responses. */
#define THINK_ARG_SCHEMA                                                                                   \
    "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"enum\":[\"<think>x</think>y\"]}},"           \
    "\"required\":[\"a\"]}"
static void test_think_in_args(server *sv) {
    cJSON *c = chat(sv, "{\"model\":\"" NAME "\",\"temperature\":0,\"max_tokens\":60,\"chat_template_kwargs\":"
                    "{\"enable_thinking\":false},\"messages\":[{\"role\":\"user\",\"content\":\"Hi there\"}],"
                    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":"
                    THINK_ARG_SCHEMA "}}],"
                    "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"f\"}}}");
    const cJSON *call = cJSON_GetArrayItem(J(chat_msg(c), "tool_calls"), 0), *fc;
    cJSON *args = cJSON_Parse(jstr(J(call, "function"), "arguments") ? jstr(J(call, "function"), "arguments") : "");
    long st;
    buf raw = {0};
    cJSON *r;
    CHECKF(args && jstr(args, "a") && !strcmp(jstr(args, "a"), "<think>x</think>y") &&
           !jstr(chat_msg(c), "reasoning_content"), "chat, thinking off, '<think>' in an argument: %s",
           cJSON_PrintUnformatted(chat_msg(c)));
    cJSON_Delete(args);
    r = jpost(sv, RESP, "{\"model\":\"" NAME "\",\"temperature\":0,\"max_output_tokens\":60,\"reasoning\":"
              "{\"effort\":\"none\"},\"input\":\"Hi there\",\"tools\":[{\"type\":\"function\",\"name\":\"f\","
              "\"parameters\":" THINK_ARG_SCHEMA "}],\"tool_choice\":{\"type\":\"function\",\"name\":\"f\"}}",
              &st, &raw);
    fc = item_of(r, "function_call", 0);
    args = cJSON_Parse(jstr(fc, "arguments") ? jstr(fc, "arguments") : "");
    CHECKF(st == 200 && args && jstr(args, "a") && !strcmp(jstr(args, "a"), "<think>x</think>y") &&
           !item_of(r, "reasoning", 0), "responses, effort none, '<think>' in an argument: %ld %.600s", st,
           buf_s(&raw));
    cJSON_Delete(args);
    cJSON_Delete(r);
    cJSON_Delete(c);
    buf_free(&raw);
    printf("test_serve_responses: thinking off: '<think>' inside a call's argument stays in the call\n");
}

/* ---- 4. the store ------------------------------------------------------------------------------- */

static char *resp_id(server *sv, const char *body, cJSON **out) {
    long st;
    buf raw = {0};
    cJSON *o = jpost(sv, RESP, body, &st, &raw);
    char *id = jstr(o, "id") ? strdup(jstr(o, "id")) : NULL;
    CHECKF(st == 200 && id, "%s: %ld %.400s", body, st, buf_s(&raw));
    buf_free(&raw);
    if (out) *out = o;
    else cJSON_Delete(o);
    return id;
}

static void test_store(server *sv) {
    char body[1024], path[160];
    char *id1, *id2, *id3, *id4;
    cJSON *r1, *r2, *c, *it = NULL;
    long st;
    buf raw = {0};
    id1 = resp_id(sv, "{\"model\":\"" NAME "\",\"temperature\":0,\"max_output_tokens\":8,\"reasoning\":{\"effort\":"
                  "\"none\"},\"instructions\":\"Be kind.\",\"input\":\"Hi\"}", &r1);
    /* the chain: the stored conversation (without the instructions), then the new input */
    snprintf(body, sizeof body, "{\"model\":\"" NAME "\",\"temperature\":0,\"max_output_tokens\":8,\"reasoning\":"
             "{\"effort\":\"none\"},\"previous_response_id\":\"%s\",\"input\":\"More\"}", id1);
    id2 = resp_id(sv, body, &r2);
    {
        cJSON *said = cJSON_CreateString(item_text(item_of(r1, "message", 0)));
        char *said_json = cJSON_PrintUnformatted(said);
        snprintf(body, sizeof body, "{\"model\":\"" NAME "\",\"max_tokens\":1,\"chat_template_kwargs\":{\"enable_"
                 "thinking\":false},\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":\"assistant\","
                 "\"content\":%s},{\"role\":\"user\",\"content\":\"More\"}]}", said_json ? said_json : "\"\"");
        free(said_json);
        cJSON_Delete(said);
    }
    c = chat(sv, body);
    CHECKF(J(J(r2, "usage"), "input_tokens")->valueint == J(J(c, "usage"), "prompt_tokens")->valueint &&
           !strcmp(jstr(r2, "previous_response_id"), id1),
           "chained: %d input tokens, the conversation has %d", J(J(r2, "usage"), "input_tokens")->valueint,
           J(J(c, "usage"), "prompt_tokens")->valueint);
    /* GET returns the stored Response */
    snprintf(path, sizeof path, RESP "/%s", id2);
    CHECKF(http(sv, "GET", path, NULL, 0, NULL, &raw) == 200 && (it = cJSON_Parse(buf_s(&raw))) &&
           cJSON_Compare(it, r2, 1), "GET %s: %.300s", path, buf_s(&raw));
    cJSON_Delete(it);
    /* store false: nothing kept */
    id3 = resp_id(sv, "{\"model\":\"" NAME "\",\"max_output_tokens\":2,\"store\":false,\"input\":\"Hi\"}", NULL);
    snprintf(path, sizeof path, RESP "/%s", id3);
    CHECKF(http(sv, "GET", path, NULL, 0, NULL, &raw) == 404, "store false, GET: %.300s", buf_s(&raw));
    /* --responses-store 2: id1 (last used when id2 was made), id2, then id4 evicts id1 */
    id4 = resp_id(sv, "{\"model\":\"" NAME "\",\"max_output_tokens\":2,\"input\":\"Hi\"}", NULL);
    snprintf(path, sizeof path, RESP "/%s", id1);
    CHECKF(http(sv, "GET", path, NULL, 0, NULL, &raw) == 404, "evicted, GET: %.300s", buf_s(&raw));
    snprintf(body, sizeof body, "{\"model\":\"" NAME "\",\"max_output_tokens\":2,\"previous_response_id\":\"%s\","
             "\"input\":\"x\"}", id1);
    cJSON_Delete(jpost(sv, RESP, body, &st, &raw));
    CHECKF(st == 404 && strstr(buf_s(&raw), "previous_response_not_found"), "evicted: %ld %.300s", st, buf_s(&raw));
    snprintf(path, sizeof path, RESP "/%s", id2);
    CHECKF(http(sv, "GET", path, NULL, 0, NULL, &raw) == 200, "kept id2: %.300s", buf_s(&raw));
    snprintf(path, sizeof path, RESP "/%s", id4);
    CHECKF(http(sv, "GET", path, NULL, 0, NULL, &raw) == 200, "kept id4: %.300s", buf_s(&raw));
    free(id1), free(id2), free(id3), free(id4);
    cJSON_Delete(r1);
    cJSON_Delete(r2);
    cJSON_Delete(c);
    buf_free(&raw);
    printf("test_serve_responses: previous_response_id chains, GET, store false, eviction at --responses-store 2\n");
}

/* DELETE /v1/responses/{id}: {"id", "object": "response", "deleted": true}; then GET, DELETE and
 * previous_response_id answer 404 as for an id never kept; the path's other methods keep their
 * answers (405 naming the first row's method; input_tokens is POST's alone). */
static void test_delete(server *sv) {
    char path[160], want[256], body[512];
    char *id = resp_id(sv, "{\"model\":\"" NAME "\",\"max_output_tokens\":2,\"input\":\"Hi\"}", NULL);
    buf raw = {0}, never = {0};
    long st;
    if (!id) return;
    snprintf(path, sizeof path, RESP "/%s", id);
    snprintf(want, sizeof want, "{\"id\":\"%s\",\"object\":\"response\",\"deleted\":true}", id);
    CHECKF(http(sv, "GET", path, NULL, 0, NULL, &raw) == 200, "GET before DELETE: %.300s", buf_s(&raw));
    CHECKF(http(sv, "DELETE", path, NULL, 0, NULL, &raw) == 200 && !strcmp(buf_s(&raw), want),
           "DELETE %s: %s; want %s", path, buf_s(&raw), want);
    CHECKF(http(sv, "GET", path, NULL, 0, NULL, &raw) == 404 && strstr(buf_s(&raw), "\"not_found\""),
           "GET after DELETE: %.300s", buf_s(&raw));
    CHECKF(http(sv, "DELETE", path, NULL, 0, NULL, &raw) == 404 && strstr(buf_s(&raw), "\"not_found\"") &&
           strstr(buf_s(&raw), id), "DELETE again: %.300s", buf_s(&raw));
    CHECK(http(sv, "GET", RESP "/resp_never", NULL, 0, NULL, &never) == 404);
    CHECKF(http(sv, "DELETE", RESP "/resp_never", NULL, 0, NULL, &raw) == 404 &&
           !strcmp(buf_s(&raw), buf_s(&never)), "DELETE of an unknown id: %s; GET's: %s", buf_s(&raw),
           buf_s(&never));
    snprintf(body, sizeof body, "{\"model\":\"" NAME "\",\"max_output_tokens\":2,\"previous_response_id\":\"%s\","
             "\"input\":\"x\"}", id);
    cJSON_Delete(jpost(sv, RESP, body, &st, &raw));
    CHECKF(st == 404 && strstr(buf_s(&raw), "previous_response_not_found"), "deleted as previous: %ld %.300s", st,
           buf_s(&raw));
    CHECKF(http(sv, "PUT", path, NULL, 0, NULL, &raw) == 405 && strstr(buf_s(&raw), "takes GET, not PUT"),
           "PUT %s: %.300s", path, buf_s(&raw));
    CHECKF(http(sv, "DELETE", RESP, NULL, 0, NULL, &raw) == 405 && strstr(buf_s(&raw), "takes POST, not DELETE"),
           "DELETE " RESP ": %.300s", buf_s(&raw));
    CHECKF(http(sv, "GET", RESP "/input_tokens", NULL, 0, NULL, &raw) == 405 &&
           strstr(buf_s(&raw), "takes POST, not GET"), "GET input_tokens: %.300s", buf_s(&raw));
    free(id);
    buf_free(&raw);
    buf_free(&never);
    printf("test_serve_responses: DELETE /v1/responses/{id}: deleted, then 404 as never kept\n");
}

/* ---- 5. a client that hangs up mid-stream --------------------------------------------------------- */

static void test_disconnect(server *sv) {
    buf b = {0}, out = {0};
    int fd = raw_post(sv, RESP, "{\"model\":\"" NAME "\",\"stream\":true,\"max_output_tokens\":300,\"input\":\"Hi\"}");
    CHECK(fd >= 0);
    if (fd >= 0) {
        CHECKF(raw_read_until(fd, &b, "response.output_text.delta", 30), "no delta: %.300s", buf_s(&b));
        close(fd);
    }
    CHECK(wait_idle(sv, 30));
    CHECKF(post(sv, RESP, "{\"model\":\"" NAME "\",\"max_output_tokens\":2,\"input\":\"Hi\"}", &out) == 200,
           "after a hang-up: %.300s", buf_s(&out));
    buf_free(&b);
    buf_free(&out);
    printf("test_serve_responses: a client hanging up mid-stream: the server serves on\n");
}

/* ---- 6. batch invariance and hostile bodies --------------------------------------------------------- */

/* 32 requests at once (text seeded at temperature 1, required tool calls; whole and streamed)
 * each give what they give alone. */
static void test_batch(server *sv) {
    enum { N = 32 };
    mreq m[N];
    int n_same = 0;
    memset(m, 0, sizeof m);
    for (int i = 0; i < N; i++) {
        char b[2048];
        const int stream = i % 3 == 0;
        if (i % 4 == 1)
            snprintf(b, sizeof b, "{\"model\":\"" NAME "\",\"stream\":%s,\"temperature\":1,\"seed\":%d,"
                     "\"max_output_tokens\":60,\"reasoning\":{\"effort\":\"none\"},\"input\":\"Weather?\","
                     "\"tool_choice\":\"required\"," TOOLS_R "}", stream ? "true" : "false", 300 + i);
        else
            snprintf(b, sizeof b, "{\"model\":\"" NAME "\",\"stream\":%s,\"temperature\":1,\"seed\":%d,"
                     "\"max_output_tokens\":%d,\"reasoning\":{\"effort\":\"none\"},\"input\":\"Tell me %d\"}",
                     stream ? "true" : "false", 100 + i, 4 + i % 13, i % 5);
        m[i].path = RESP;
        m[i].body = strdup(b);
    }
    multi_run(sv, m, N);
    for (int i = 0; i < N; i++) {
        const int stream = i % 3 == 0;
        buf alone = {0};
        const long st = post(sv, RESP, m[i].body, &alone);
        cJSON *a = stream ? check_stream(buf_s(&m[i].out), "batched") : cJSON_Parse(buf_s(&m[i].out));
        cJSON *b = stream ? check_stream(buf_s(&alone), "alone") : cJSON_Parse(buf_s(&alone));
        char *ta = a ? output_text(a, 0) : NULL, *tb = b ? output_text(b, 0) : NULL;
        const int same = m[i].status == 200 && st == 200 && ta && tb && !strcmp(ta, tb);
        CHECKF(same, "batch %d: %s\n  together: %.600s\n  alone: %.600s", i, m[i].body, ta ? ta : buf_s(&m[i].out),
               tb ? tb : buf_s(&alone));
        n_same += same;
        free(ta);
        free(tb);
        cJSON_Delete(a);
        cJSON_Delete(b);
        buf_free(&alone);
        buf_free(&m[i].out);
        free(m[i].body);
    }
    printf("test_serve_responses: batch invariance: %d of %d requests (text, tool calls, whole and streamed) "
           "equal themselves alone\n", n_same, N);
}

static void test_hostile(server *sv) {
    static const bad_case B[] = {
        {"POST", RESP, "{\"input\":\"a\",\"input\":\"b\"}", 0, 400, INV, NULL, NULL, "input"},
        {"POST", RESP, "{\"input\":\"\xff\"}", 0, 400, INV, NULL, NULL, "UTF-8"},
        {"POST", RESP, "{\"input\":\"a\\u0000\"}", 0, 400, INV, NULL, NULL, "NUL"},
        {"POST", RESP, "[1]", 0, 400, INV, NULL, NULL, "JSON object"},
        {"POST", RESP, "{\"input\":", 0, 400, INV, NULL, NULL, ""},
        {"POST", RESP, "{\"input\":[{\"role\":\"user\",\"content\":7}]}", 0, 400, INV, "input[0].content", NULL,
         "string or an array"},
        {"POST", RESP, "{\"input\":[{\"type\":\"function_call\",\"name\":\"f\"}]}", 0, 400, INV, "input[0]", NULL,
         "call_id"},
        {"POST", RESP, "{\"input\":\"a\",\"tools\":[{\"type\":\"function\"}]}", 0, 400, INV, "tools[0]", NULL,
         "name"},
        {"POST", RESP, "{\"input\":\"a\",\"tools\":{}}", 0, 400, INV, "tools", NULL, "array"},
        {"GET", RESP, NULL, 0, 405, INV, NULL, "method_not_allowed", "POST"},
        {"POST", RESP "/resp_x", "{}", 0, 405, INV, NULL, "method_not_allowed", "GET"},
        {"GET", RESP "/resp_x", NULL, 0, 404, INV, "response_id", "not_found", "not found"},
        {"POST", "/v1/responses/input_tokens", "{\"input\":5}", 0, 400, INV, "input", NULL, "string or an array"},
        {"POST", RESP, "{\"input\":[{\"type\":\"message\",\"content\":\"x\"}]}", 0, 400, INV, "input[0]", NULL,
         "role"},
        {"POST", RESP, "{\"input\":\"a\",\"max_output_tokens\":5000}", 0, 400, INV, "max_output_tokens",
         "context_length_exceeded", "maximum context length"},
    };
    for (size_t i = 0; i < sizeof B / sizeof *B; i++) check_bad(sv, &B[i], NULL);
    printf("test_serve_responses: %zu hostile bodies and routes refused as the table says\n", sizeof B / sizeof *B);
}

/* ---- 7. the node clients --------------------------------------------------------------------------- */

static void test_clients(server *sv) {
    char args[4400];
    const char *missing;
    cJSON *o;
    int n = 0, n_ok = 0;
    if (g_asan) {
        printf("test_serve_responses: node clients: in the release build only\n");
        return;
    }
    if ((missing = node_missing(""))) {
        printf("test_serve_responses: node clients: skipped: %s\n", missing);
        return;
    }
    snprintf(args, sizeof args, "'%s/.deps/clients' 'http://127.0.0.1:%d/v1' " NAME, MOE8_SOURCE_DIR, sv->port);
    o = node_checks("responses_openai.mjs", args, 240, &sv, 1, 5, &n_ok, &n);
    printf("test_serve_responses: node clients (openai responses, @openai/agents): %d of %d checks pass\n", n_ok, n);
    cJSON_Delete(o);
}

/* ---- 8. Codex CLI: one turn ----------------------------------------------------------------------- */

/* The chain model with a 32k context (Codex's prompt is some 8k tokens): a folder of links to
 * chain's files but config.json, whose max_position_embeddings is raised. */
static const char *codex_model(const char *chain) {
    static char dir[4200];
    static const char *const FILES[] = {"model.safetensors", "quant_model_description.json", "tokenizer.json",
                                        "tokenizer_config.json"};
    char src[4400], dst[4400];
    size_t n = 0;
    unsigned char *cfg;
    cJSON *c;
    char *txt;
    FILE *f;
    snprintf(dir, sizeof dir, "%s/serve_resp_codex", MOE8_TEST_TMP);
    mkdir(dir, 0755);
    for (size_t i = 0; i < sizeof FILES / sizeof *FILES; i++) {
        snprintf(src, sizeof src, "%s/%s", chain, FILES[i]);
        snprintf(dst, sizeof dst, "%s/%s", dir, FILES[i]);
        unlink(dst);
        CHECKF(symlink(src, dst) == 0, "symlink %s: %s", dst, strerror(errno));
    }
    snprintf(src, sizeof src, "%s/config.json", chain);
    cfg = test_slurp(src, &n);
    c = cfg ? cJSON_Parse((const char *)cfg) : NULL;
    CHECKF(c != NULL, "cannot read %s", src);
    cJSON_ReplaceItemInObject(c, "max_position_embeddings", cJSON_CreateNumber(32768));
    txt = cJSON_Print(c);
    snprintf(dst, sizeof dst, "%s/config.json", dir);
    if ((f = fopen(dst, "w"))) {
        fputs(txt ? txt : "", f);
        fclose(f);
    }
    free(txt);
    cJSON_Delete(c);
    free(cfg);
    return dir;
}

/* `codex exec` (its Responses wire API, a fresh CODEX_HOME) against the chain model: one
 * streamed POST /v1/responses with developer and user items, function and namespace tools and
 * a hosted web_search; Codex exits 0 and prints the answer "Hello!" (after the think block). */
static void test_codex(const char *chain) {
    char codex[4200], home[4300], wd[4300], cmd[40000], outp[4300], errp[4300], args[4600];
    buf out = {0}, err = {0}, log = {0};
    server sv;
    int rc;
    if (g_asan) {
        printf("test_serve_responses: codex: in the release build only\n");
        return;
    }
    snprintf(codex, sizeof codex, "%s/.deps/clients/node_modules/.bin/codex", MOE8_SOURCE_DIR);
    if (access(codex, X_OK) != 0) {
        printf("test_serve_responses: codex: skipped: no %s (make deps installs it)\n", codex);
        return;
    }
    snprintf(args, sizeof args, "-m '%s' --ctx-size 32768 --threads 2 --served-model-name " NAME, codex_model(chain));
    if (server_start(&sv, "resp_codex", NULL, args) != 0) return;
    snprintf(home, sizeof home, "%s/codex_home", MOE8_TEST_TMP);
    snprintf(wd, sizeof wd, "%s/codex_wd", MOE8_TEST_TMP);
    snprintf(outp, sizeof outp, "%s/codex.out", MOE8_TEST_TMP);
    snprintf(errp, sizeof errp, "%s/codex.err", MOE8_TEST_TMP);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s' && mkdir -p '%s' '%s' && cd '%s' && CODEX_HOME='%s' MOE8_CODEX_KEY=none "
             "timeout 180 '%s' exec --skip-git-repo-check -c model_provider=local -c "
             "'model_providers.local={name=\"local\",base_url=\"http://127.0.0.1:%d/v1\",wire_api=\"responses\","
             "env_key=\"MOE8_CODEX_KEY\"}' -m " NAME " 'Say hello' </dev/null >'%s' 2>'%s'",
             home, wd, home, wd, wd, home, codex, sv.port, outp, errp);
    rc = test_run(cmd);
    read_text(outp, &out);
    read_text(errp, &err);
    sv.n_req += 1;
    read_text(sv.err, &log);
    CHECKF(rc == 0 && strstr(buf_s(&out), "Hello!"), "codex exited %d: %s\n%s", rc, buf_s(&out), buf_s(&err));
    CHECKF(count_lines(buf_s(&log), "moe8 serve: POST /v1/responses 200") == 1 &&
           strstr(buf_s(&log), "tools of type 'web_search' dropped"), "the server saw: %s", buf_s(&log));
    server_stop(&sv, 10);
    printf("test_serve_responses: codex exec: one turn, exit %d, answer %s\n", rc,
           strstr(buf_s(&out), "Hello!") ? "Hello!" : "missing");
    buf_free(&out);
    buf_free(&err);
    buf_free(&log);
}

/* ---- main ---------------------------------------------------------------------------------------- */

/* --part clients: the node clients and Codex, each against its own server */
static void clients_part(void) {
    fx_opts ot = serve_fixture_opts(), oc = serve_fixture_opts();
    server sv;
    char args[4400];
    const char *dir = fx_test_model("serve_resp_clients", &ot, 1);
    snprintf(args, sizeof args, "-m '%s' --ctx-size 1024 --threads 2 --responses-store 2 --served-model-name " NAME,
             dir);
    if (server_start(&sv, "resp_clients", NULL, args) == 0) {
        test_clients(&sv);
        phase("node clients");
        server_stop(&sv, 10);
    }
    oc.tensor_hook = chain_hook;
    test_codex(fx_test_model("serve_resp_chain_clients", &oc, 1));
    phase("codex");
}

int main(int argc, char **argv) {
    fx_opts ot = serve_fixture_opts(), oc = serve_fixture_opts();
    server sv;
    char args[4400];
    const char *dir;
    serve_test_parts(argc, argv);
    serve_test_init("test_serve_responses");
    if (g_part_clients) {
        if (g_asan) printf("test_serve_responses: node clients, Codex: in the release build only\n");
        else clients_part();
    }
    if (!g_part_c) {
        curl_global_cleanup();
        return test_summary();
    }
    dir = fx_test_model("serve_resp", &ot, 1);
    snprintf(args, sizeof args, "-m '%s' --ctx-size 1024 --threads 2 --responses-store 2 --served-model-name " NAME,
             dir);
    if (server_start(&sv, "resp_main", NULL, args) == 0) {
        sv.log_check = 0; /* the node clients' requests are not counted */
        test_fields(&sv);
        phase("fields");
        test_text(&sv);
        test_tools(&sv);
        phase("text, tool calls");
        test_store(&sv);
        test_delete(&sv);
        phase("store");
        test_disconnect(&sv);
        phase("disconnect");
        test_batch(&sv);
        test_hostile(&sv);
        phase("batch, hostile bodies");
        server_stop(&sv, 10);
    }
    oc.tensor_hook = chain_hook;
    dir = fx_test_model("serve_resp_chain", &oc, 1);
    snprintf(args, sizeof args, "-m '%s' --ctx-size 1024 --threads 2 --served-model-name " NAME, dir);
    if (server_start(&sv, "resp_chain", NULL, args) == 0) {
        test_reasoning(&sv);
        test_think_in_args(&sv);
        phase("reasoning");
        server_stop(&sv, 10);
    }
    curl_global_cleanup();
    printf("test_serve_responses: %.1f s\n", now_s() - g_t0);
    return test_summary();
}
