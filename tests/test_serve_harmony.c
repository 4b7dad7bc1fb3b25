/*
 * test_serve_harmony.c — `moe8 serve` with gpt-oss's harmony format end to
 * end, on the tiny Qwen3-MoE fixture given gpt-oss's tokenizer
 * (o200k_harmony, .deps/gptoss-tokenizer) and chat template
 * (tests/data/jinja/gpt_oss.jinja as its chat_template.jinja): the server
 * finds the format in the template, renders its prompts (reasoning_effort
 * into the template's "Reasoning:" line) and reads its output's channels.
 * Two chain models (serve_test.h's trick: each edge's token by far the
 * most likely after its first) say exactly one thing each after the
 * prompt's "<|start|>assistant":
 *   call:   " to=functions.get_weather<|channel|>commentary json<|message|>
 *           {"city": "Paris"}<|call|>" then <|return|> (EOS)
 *   think:  "<|channel|>analysis<|message|>Let me think.<|end|>" then <|return|>
 * (the second server named vLLM's parsers, --tool-call-parser openai
 * --reasoning-parser openai_gptoss; the first found the format itself).
 * Checked against those texts: chat completions (whole and streamed) gives
 * the tool call (finish_reason tool_calls) or reasoning_content, and the
 * call as content when the request has no tools; Responses a function_call
 * item or a reasoning item; Messages a tool_use block or a thinking block.
 * tool_choice "required" and a named function (a grammar over harmony's
 * special tokens): on the call chain, in chat completions, Responses and
 * Messages, whole and streamed, one call whose arguments validate against
 * its bounded schema (required follows the chain to get_weather {"city":
 * "Paris"}; named gets get_time {}); on the think chain the analysis message
 * comes first as reasoning; on make-model's tiny gpt_oss (random weights,
 * gpt-oss's generation_config: <|call|> an EOS id) whatever it would say.
 * Exits 77 (skipped) without the tokenizer files (make deps).
 */
#include "serve_test.h"
#include "moe8_tools.h"

#define NAME "gpt-oss-fixture"
#define GPTOSS_DIR MOE8_SOURCE_DIR "/.deps/gptoss-tokenizer"

/* "<|start|>assistant" ends every prompt: 173781 is "assistant". */
static const int32_t CALL_CHAIN[][2] = {
    {173781, 316}, {316, 28}, {28, 44580}, {44580, 775}, {775, 170154}, {170154, 200005}, {200005, 12606},
    {12606, 815}, {815, 5701}, {5701, 200008}, {200008, 10848}, {10848, 17500}, {17500, 1243}, {1243, 392},
    {392, 72782}, {72782, 18583}, {18583, 200012}, {200012, 200002},
};
static const int32_t THINK_CHAIN[][2] = {
    {173781, 200005}, {200005, 35644}, {35644, 200008}, {200008, 12845}, {12845, 668}, {668, 2411},
    {2411, 13}, {13, 200007}, {200007, 200002},
};

typedef struct {
    const int32_t (*chain)[2];
    int n;
} chain_spec;

static void hook(void *user, fx_tensor *t) {
    const chain_spec *c = user;
    const int64_t H = t->shape[1];
    if (!strcmp(t->name, "model.embed_tokens.weight"))
        for (int i = 0; i < c->n; i++)
            for (int64_t h = 0; h < H; h++) fx_set(t, (int64_t)c->chain[i][0] * H + h, h == i ? 20.0 : 0.0);
    if (!strcmp(t->name, "lm_head.weight"))
        for (int i = 0; i < c->n; i++) fx_set(t, (int64_t)c->chain[i][1] * H + i, 50.0);
}

static const char *model(const char *name, const chain_spec *c) {
    fx_opts o = serve_fixture_opts();
    const char *dir;
    char cmd[9000];
    o.vocab = 200019;
    o.tensor_hook = hook;
    o.user = (void *)c;
    dir = fx_test_model(name, &o, 0);
    snprintf(cmd, sizeof cmd, "cp '%s/tokenizer.json' '%s/tokenizer_config.json' '%s/' && "
             "cp '%s/tests/data/jinja/gpt_oss.jinja' '%s/chat_template.jinja'",
             GPTOSS_DIR, GPTOSS_DIR, dir, MOE8_SOURCE_DIR, dir);
    if (system(cmd) != 0) exit(2);
    return dir;
}

static int start(server *sv, const char *label, const char *dir, const char *more) {
    char args[4600];
    snprintf(args, sizeof args, "-m '%s' --ctx-size 1024 --threads 2 --served-model-name " NAME "%s", dir, more);
    if (server_start(sv, label, NULL, args) != 0) {
        CHECKF(0, "%s: the server did not start", label);
        return -1;
    }
    return 0;
}

#define USER "\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Paris?\"}]"
#define TOOL_PARAMS "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}"
#define CHAT_TOOLS "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":" TOOL_PARAMS "}}]"

/* A stream's deltas joined: content, reasoning_content, the calls' names and arguments. */
static void join_stream(const char *body, buf *content, buf *reason, buf *names, buf *args, buf *finish) {
    for (const char *p = body; (p = strstr(p, "data: {"));) {
        const char *end = strstr(p, "\n\n");
        cJSON *o = end ? cJSON_ParseWithLength(p + 6, (size_t)(end - p - 6)) : NULL;
        const cJSON *ch = cJSON_GetArrayItem(J(o, "choices"), 0), *d = J(ch, "delta"), *k;
        if (jstr(d, "content")) buf_str(content, jstr(d, "content"));
        if (jstr(d, "reasoning_content")) buf_str(reason, jstr(d, "reasoning_content"));
        cJSON_ArrayForEach(k, J(d, "tool_calls")) {
            if (jstr(J(k, "function"), "name")) buf_str(names, jstr(J(k, "function"), "name"));
            if (jstr(J(k, "function"), "arguments")) buf_str(args, jstr(J(k, "function"), "arguments"));
        }
        if (jstr(ch, "finish_reason")) buf_str(finish, jstr(ch, "finish_reason"));
        cJSON_Delete(o);
        if (!end) break;
        p = end;
    }
}

static void test_call(server *sv) {
    buf out = {0}, c = {0}, r = {0}, n = {0}, a = {0}, f = {0};
    cJSON *o;
    const cJSON *m, *call;
    long st = post(sv, CHAT, "{" USER "," CHAT_TOOLS ",\"max_tokens\":40}", &out);
    o = cJSON_Parse(buf_s(&out));
    m = J(cJSON_GetArrayItem(J(o, "choices"), 0), "message");
    call = J(cJSON_GetArrayItem(J(m, "tool_calls"), 0), "function");
    CHECKF(st == 200 && cJSON_IsNull(J(m, "content")) && cJSON_IsNull(J(m, "reasoning_content")) &&
               cJSON_GetArraySize(J(m, "tool_calls")) == 1 && jstr(call, "name") &&
               !strcmp(jstr(call, "name"), "get_weather") && jstr(call, "arguments") &&
               !strcmp(jstr(call, "arguments"), "{\"city\": \"Paris\"}") &&
               !strcmp(jstr(cJSON_GetArrayItem(J(o, "choices"), 0), "finish_reason"), "tool_calls"),
           "chat call: %ld %.800s", st, buf_s(&out));
    cJSON_Delete(o);
    buf_free(&out);
    st = post(sv, CHAT, "{" USER "," CHAT_TOOLS ",\"max_tokens\":40,\"stream\":true}", &out);
    join_stream(buf_s(&out), &c, &r, &n, &a, &f);
    CHECKF(st == 200 && !strcmp(buf_s(&c), "") && !strcmp(buf_s(&r), "") && !strcmp(buf_s(&n), "get_weather") &&
               !strcmp(buf_s(&a), "{\"city\": \"Paris\"}") && !strcmp(buf_s(&f), "tool_calls"),
           "chat call stream: content '%s' reasoning '%s' call %s(%s) finish %s", buf_s(&c), buf_s(&r), buf_s(&n),
           buf_s(&a), buf_s(&f));
    buf_free(&out);
    /* no tools: the call message is text */
    st = post(sv, CHAT, "{" USER ",\"max_tokens\":40}", &out);
    o = cJSON_Parse(buf_s(&out));
    m = J(cJSON_GetArrayItem(J(o, "choices"), 0), "message");
    CHECKF(st == 200 && jstr(m, "content") && !strcmp(jstr(m, "content"), "{\"city\": \"Paris\"}") &&
               !J(m, "tool_calls"),
           "chat without tools: %ld %.600s", st, buf_s(&out));
    cJSON_Delete(o);
    buf_free(&out);
    /* Responses: a function_call item */
    st = post(sv, "/v1/responses", "{\"model\":\"" NAME "\",\"input\":\"Weather in Paris?\",\"max_output_tokens\":40,"
              "\"tools\":[{\"type\":\"function\",\"name\":\"get_weather\",\"parameters\":" TOOL_PARAMS "}]}", &out);
    o = cJSON_Parse(buf_s(&out));
    {
        const cJSON *it, *fc = NULL;
        cJSON_ArrayForEach(it, J(o, "output")) if (jstr(it, "type") && !strcmp(jstr(it, "type"), "function_call")) fc = it;
        CHECKF(st == 200 && fc && !strcmp(jstr(fc, "name"), "get_weather") &&
                   !strcmp(jstr(fc, "arguments"), "{\"city\": \"Paris\"}"),
               "responses call: %ld %.800s", st, buf_s(&out));
    }
    cJSON_Delete(o);
    buf_free(&out);
    /* Responses streamed: the arguments' done event carries them whole */
    st = post(sv, "/v1/responses", "{\"model\":\"" NAME "\",\"input\":\"Weather in Paris?\",\"max_output_tokens\":40,"
              "\"stream\":true,\"tools\":[{\"type\":\"function\",\"name\":\"get_weather\",\"parameters\":"
              TOOL_PARAMS "}]}", &out);
    CHECKF(st == 200 && strstr(buf_s(&out), "event: response.function_call_arguments.done") &&
               strstr(buf_s(&out), "\"arguments\":\"{\\\"city\\\": \\\"Paris\\\"}\"") &&
               !strstr(buf_s(&out), "response.output_text.delta"),
           "responses call stream: %ld %.1500s", st, buf_s(&out));
    buf_free(&out);
    /* Messages: a tool_use block */
    st = post(sv, "/v1/messages", "{\"model\":\"" NAME "\",\"max_tokens\":40,\"messages\":[{\"role\":\"user\","
              "\"content\":\"Weather in Paris?\"}],\"tools\":[{\"name\":\"get_weather\",\"input_schema\":" TOOL_PARAMS
              "}]}", &out);
    o = cJSON_Parse(buf_s(&out));
    {
        const cJSON *b, *tu = NULL;
        cJSON_ArrayForEach(b, J(o, "content")) if (jstr(b, "type") && !strcmp(jstr(b, "type"), "tool_use")) tu = b;
        CHECKF(st == 200 && tu && !strcmp(jstr(tu, "name"), "get_weather") && jstr(J(tu, "input"), "city") &&
                   !strcmp(jstr(J(tu, "input"), "city"), "Paris") && jstr(o, "stop_reason") &&
                   !strcmp(jstr(o, "stop_reason"), "tool_use"),
               "messages call: %ld %.800s", st, buf_s(&out));
    }
    cJSON_Delete(o);
    buf_free(&out);
    buf_free(&c), buf_free(&r), buf_free(&n), buf_free(&a), buf_free(&f);
}

static void test_think(server *sv) {
    buf out = {0}, c = {0}, r = {0}, n = {0}, a = {0}, f = {0};
    cJSON *o;
    const cJSON *m;
    long st = post(sv, CHAT, "{" USER ",\"max_tokens\":40}", &out);
    o = cJSON_Parse(buf_s(&out));
    m = J(cJSON_GetArrayItem(J(o, "choices"), 0), "message");
    CHECKF(st == 200 && jstr(m, "content") && !strcmp(jstr(m, "content"), "") && jstr(m, "reasoning_content") &&
               !strcmp(jstr(m, "reasoning_content"), "Let me think.") &&
               !strcmp(jstr(cJSON_GetArrayItem(J(o, "choices"), 0), "finish_reason"), "stop"),
           "chat think: %ld %.800s", st, buf_s(&out));
    cJSON_Delete(o);
    buf_free(&out);
    st = post(sv, CHAT, "{" USER ",\"max_tokens\":40,\"stream\":true}", &out);
    join_stream(buf_s(&out), &c, &r, &n, &a, &f);
    CHECKF(st == 200 && !strcmp(buf_s(&c), "") && !strcmp(buf_s(&r), "Let me think.") && !n.n &&
               !strcmp(buf_s(&f), "stop"),
           "chat think stream: content '%s' reasoning '%s' finish %s", buf_s(&c), buf_s(&r), buf_s(&f));
    buf_free(&out);
    st = post(sv, "/v1/responses", "{\"model\":\"" NAME "\",\"input\":\"Hi\",\"max_output_tokens\":40,"
              "\"reasoning\":{\"effort\":\"high\"}}", &out);
    CHECKF(st == 200 && strstr(buf_s(&out), "\"type\":\"reasoning\"") && strstr(buf_s(&out), "Let me think."),
           "responses reasoning: %ld %.800s", st, buf_s(&out));
    buf_free(&out);
    st = post(sv, "/v1/messages", "{\"model\":\"" NAME "\",\"max_tokens\":40,\"thinking\":{\"type\":\"enabled\","
              "\"budget_tokens\":1024},\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}", &out);
    o = cJSON_Parse(buf_s(&out));
    {
        const cJSON *b0 = cJSON_GetArrayItem(J(o, "content"), 0);
        CHECKF(st == 200 && jstr(b0, "type") && !strcmp(jstr(b0, "type"), "thinking") &&
                   !strcmp(jstr(b0, "thinking"), "Let me think."),
               "messages thinking: %ld %.800s", st, buf_s(&out));
    }
    cJSON_Delete(o);
    buf_free(&out);
    /* Messages streamed: the thinking block's deltas, no text */
    st = post(sv, "/v1/messages", "{\"model\":\"" NAME "\",\"max_tokens\":40,\"stream\":true,\"thinking\":"
              "{\"type\":\"enabled\",\"budget_tokens\":1024},\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}",
              &out);
    CHECKF(st == 200 && strstr(buf_s(&out), "\"type\":\"thinking_delta\"") && !strstr(buf_s(&out), "text_delta") &&
               strstr(buf_s(&out), "event: message_stop"),
           "messages thinking stream: %ld %.1500s", st, buf_s(&out));
    buf_free(&out);
    buf_free(&c), buf_free(&r), buf_free(&n), buf_free(&a), buf_free(&f);
}

/* ---- tool_choice required / a named function (grammar-constrained) ---------------------------- */

/* Bounded schemas, so any path the grammar allows ends: a city from an enum, no other key. */
#define CITY_PARAMS "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"enum\":[\"Paris\"," \
                    "\"Rome\"]}},\"required\":[\"city\"],\"additionalProperties\":false}"
#define TIME_PARAMS "{\"type\":\"object\",\"properties\":{},\"additionalProperties\":false}"
#define CHAT_TOOLS2 "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":" \
                    CITY_PARAMS "}},{\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"parameters\":" \
                    TIME_PARAMS "}}]"
#define RESP_TOOLS2 "\"tools\":[{\"type\":\"function\",\"name\":\"get_weather\",\"parameters\":" CITY_PARAMS "}," \
                    "{\"type\":\"function\",\"name\":\"get_time\",\"parameters\":" TIME_PARAMS "}]"
#define MSG_TOOLS2 "\"tools\":[{\"name\":\"get_weather\",\"input_schema\":" CITY_PARAMS "},{\"name\":\"get_time\"," \
                   "\"input_schema\":" TIME_PARAMS "}]"
#define NAMED "{\"type\":\"function\",\"function\":{\"name\":\"get_time\"}}"

/* 1 when `args` (JSON text, or a parsed object) validates against the tool `name`'s schema above. */
static int args_valid(const char *name, const char *args, const cJSON *parsed) {
    cJSON *a = parsed ? NULL : cJSON_Parse(args ? args : "");
    const cJSON *o = parsed ? parsed : a, *city = J(o, "city");
    int ok = cJSON_IsObject(o);
    if (ok && !strcmp(name, "get_weather"))
        ok = cJSON_GetArraySize(o) == 1 && jstr(o, "city") &&
             (!strcmp(city->valuestring, "Paris") || !strcmp(city->valuestring, "Rome"));
    else if (ok)
        ok = !strcmp(name, "get_time") && cJSON_GetArraySize(o) == 0;
    cJSON_Delete(a);
    return ok;
}

/* Chat completions with tool_choice `choice`: one call to `want` (NULL: either tool) whose
 * arguments validate (whole, then streamed); the reasoning is `reason`. */
static void chat_forced(server *sv, const char *choice, const char *want_or_any, const char *reason) {
    buf out = {0}, c = {0}, r = {0}, n = {0}, a = {0}, f = {0};
    char body[2048];
    snprintf(body, sizeof body, "{" USER "," CHAT_TOOLS2 ",\"max_tokens\":120,\"tool_choice\":%s}", choice);
    long st = post(sv, CHAT, body, &out);
    cJSON *o = cJSON_Parse(buf_s(&out));
    const cJSON *ch = cJSON_GetArrayItem(J(o, "choices"), 0), *m = J(ch, "message"),
                *call = J(cJSON_GetArrayItem(J(m, "tool_calls"), 0), "function");
    const char *want = want_or_any ? want_or_any : jstr(call, "name") ? jstr(call, "name") : "?";
    CHECKF(st == 200 && cJSON_GetArraySize(J(m, "tool_calls")) == 1 && jstr(call, "name") &&
               !strcmp(jstr(call, "name"), want) && args_valid(want, jstr(call, "arguments"), NULL) &&
               !strcmp(jstr(ch, "finish_reason"), "tool_calls") &&
               (reason ? jstr(m, "reasoning_content") && !strcmp(jstr(m, "reasoning_content"), reason)
                       : cJSON_IsNull(J(m, "reasoning_content"))),
           "chat tool_choice %s: %ld %.800s", choice, st, buf_s(&out));
    cJSON_Delete(o); /* want, if it pointed into o, is not read again: the stream's name below */
    buf_free(&out);
    snprintf(body, sizeof body, "{" USER "," CHAT_TOOLS2 ",\"max_tokens\":120,\"stream\":true,\"tool_choice\":%s}",
             choice);
    st = post(sv, CHAT, body, &out);
    join_stream(buf_s(&out), &c, &r, &n, &a, &f);
    want = want_or_any ? want_or_any : buf_s(&n);
    CHECKF(st == 200 && !strcmp(buf_s(&n), want) && args_valid(want, buf_s(&a), NULL) &&
               !strcmp(buf_s(&f), "tool_calls") && !strcmp(buf_s(&r), reason ? reason : "") && !c.n,
           "chat tool_choice %s stream: content '%s' reasoning '%s' call %s(%s) finish %s", choice, buf_s(&c),
           buf_s(&r), buf_s(&n), buf_s(&a), buf_s(&f));
    buf_free(&out), buf_free(&c), buf_free(&r), buf_free(&n), buf_free(&a), buf_free(&f);
}

/* Responses (tool_choice `choice`) and Messages (`mchoice`): one call to
 * `want`, whole and streamed. */
static void other_apis_forced(server *sv, const char *choice, const char *mchoice, const char *want) {
    buf out = {0};
    char body[2048];
    for (int stream = 0; stream < 2; stream++) {
        snprintf(body, sizeof body, "{\"model\":\"" NAME "\",\"input\":\"Weather in Paris?\",\"max_output_tokens\":120,"
                 "\"stream\":%s,\"tool_choice\":%s," RESP_TOOLS2 "}", stream ? "true" : "false", choice);
        long st = post(sv, "/v1/responses", body, &out);
        const cJSON *it, *fc = NULL;
        cJSON *o = NULL;
        if (stream) { /* the output item of response.output_item.done */
            for (const char *p = buf_s(&out); (p = strstr(p, "event: response.output_item.done\ndata: "));) {
                const char *e = strstr(p, "\n\n");
                cJSON *x = e ? cJSON_ParseWithLength(p + 39, (size_t)(e - p - 39)) : NULL;
                if (jstr(J(x, "item"), "type") && !strcmp(jstr(J(x, "item"), "type"), "function_call")) {
                    cJSON_Delete(o);
                    o = x;
                    fc = J(x, "item");
                } else {
                    cJSON_Delete(x);
                }
                p += 39;
            }
        } else {
            o = cJSON_Parse(buf_s(&out));
            cJSON_ArrayForEach(it, J(o, "output"))
                if (jstr(it, "type") && !strcmp(jstr(it, "type"), "function_call")) fc = it;
        }
        CHECKF(st == 200 && fc && jstr(fc, "name") && !strcmp(jstr(fc, "name"), want) &&
                   args_valid(want, jstr(fc, "arguments"), NULL),
               "responses tool_choice %s%s: %ld %.1500s", choice, stream ? " stream" : "", st, buf_s(&out));
        cJSON_Delete(o);
        buf_free(&out);
        snprintf(body, sizeof body, "{\"model\":\"" NAME "\",\"max_tokens\":120,\"stream\":%s,\"messages\":[{\"role\":"
                 "\"user\",\"content\":\"Weather in Paris?\"}],\"tool_choice\":%s," MSG_TOOLS2 "}",
                 stream ? "true" : "false", mchoice);
        st = post(sv, "/v1/messages", body, &out);
        if (stream) { /* the tool_use block's start names it, its input_json_delta pieces join to the input */
            buf args = {0};
            int named = 0;
            for (const char *p = buf_s(&out); (p = strstr(p, "data: {"));) {
                const char *e = strstr(p, "\n\n");
                cJSON *x = e ? cJSON_ParseWithLength(p + 6, (size_t)(e - p - 6)) : NULL;
                const cJSON *cb = J(x, "content_block"), *d = J(x, "delta");
                if (jstr(cb, "type") && !strcmp(jstr(cb, "type"), "tool_use") && jstr(cb, "name"))
                    named += !strcmp(jstr(cb, "name"), want);
                if (jstr(d, "partial_json")) buf_str(&args, jstr(d, "partial_json"));
                cJSON_Delete(x);
                p += 6;
            }
            CHECKF(st == 200 && named == 1 && args_valid(want, buf_s(&args), NULL) &&
                       strstr(buf_s(&out), "\"stop_reason\":\"tool_use\""),
                   "messages tool_choice %s stream: %ld %.1500s", mchoice, st, buf_s(&out));
            buf_free(&args);
        } else {
            const cJSON *b, *tu = NULL;
            o = cJSON_Parse(buf_s(&out));
            cJSON_ArrayForEach(b, J(o, "content")) if (jstr(b, "type") && !strcmp(jstr(b, "type"), "tool_use")) tu = b;
            CHECKF(st == 200 && tu && jstr(tu, "name") && !strcmp(jstr(tu, "name"), want) &&
                       args_valid(want, NULL, J(tu, "input")) && jstr(o, "stop_reason") &&
                       !strcmp(jstr(o, "stop_reason"), "tool_use"),
                   "messages tool_choice %s: %ld %.800s", mchoice, st, buf_s(&out));
            cJSON_Delete(o);
        }
        buf_free(&out);
    }
}

/* The call chain's server: required follows the chain into get_weather
 * {"city": "Paris"}; a named function gets that one. */
static void test_forced(server *sv) {
    chat_forced(sv, "\"required\"", "get_weather", NULL);
    chat_forced(sv, NAMED, "get_time", NULL);
    other_apis_forced(sv, "\"required\"", "{\"type\":\"any\"}", "get_weather");
    other_apis_forced(sv, "{\"type\":\"function\",\"name\":\"get_time\"}", "{\"type\":\"tool\",\"name\":\"get_time\"}",
                      "get_time");
    { /* the chain's exact arguments: the grammar took the tokens it wanted */
        buf out = {0};
        long st = post(sv, CHAT, "{" USER "," CHAT_TOOLS2 ",\"max_tokens\":120,\"tool_choice\":\"required\"}", &out);
        CHECKF(st == 200 && strstr(buf_s(&out), "\"arguments\":\"{\\\"city\\\": \\\"Paris\\\"}\""),
               "required on the call chain: %ld %.800s", st, buf_s(&out));
        buf_free(&out);
    }
}

/* make-model's tiny gpt_oss (random weights, MXFP4 experts) with gpt-oss's
 * tokenizer, template and generation_config (eos <|return|>, <|endoftext|>,
 * <|call|>: the grammar then leaves <|call|> to the EOS ids). */
static const char *gptoss_model(void) {
    moe8_make_model_params p = moe8_make_model_params_default();
    moe8_error e;
    const char *dir = test_tmpdir("serve_harmony_gptoss");
    char cmd[9000];
    p.arch = MOE8_ARCH_GPT_OSS;
    p.tokenizer_dir = GPTOSS_DIR;
    p.force = 1;
    p.seed = 3;
    if (moe8_make_model(&p, dir, &e) != MOE8_OK) {
        printf("make-model: %s\n", e.message);
        exit(2);
    }
    snprintf(cmd, sizeof cmd, "cp '%s/tests/data/jinja/gpt_oss.jinja' '%s/chat_template.jinja' && printf "
             "'{\"eos_token_id\": [200002, 199999, 200012]}' > '%s/generation_config.json'",
             MOE8_SOURCE_DIR, dir, dir);
    if (system(cmd) != 0) exit(2);
    return dir;
}

/* The random model: whatever it would say, required and named give a call
 * whose arguments validate; <|end|> biased up so an analysis message it
 * starts ends at once (else it may run to max_tokens). */
static void test_forced_random(server *sv) {
    static const char *const choices[] = {"\"required\"", NAMED};
    for (int i = 0; i < 2; i++)
        for (int stream = 0; stream < 2; stream++) {
            buf out = {0}, c = {0}, r = {0}, n = {0}, a = {0}, f = {0};
            char body[2048];
            snprintf(body, sizeof body, "{" USER "," CHAT_TOOLS2 ",\"max_tokens\":120,\"stream\":%s,\"tool_choice\":%s,"
                     "\"logit_bias\":{\"200007\":100}}", stream ? "true" : "false", choices[i]);
            long st = post(sv, CHAT, body, &out);
            if (stream) {
                join_stream(buf_s(&out), &c, &r, &n, &a, &f);
            } else {
                cJSON *o = cJSON_Parse(buf_s(&out));
                const cJSON *ch = cJSON_GetArrayItem(J(o, "choices"), 0), *m = J(ch, "message"),
                            *call = J(cJSON_GetArrayItem(J(m, "tool_calls"), 0), "function");
                if (cJSON_GetArraySize(J(m, "tool_calls")) == 1 && jstr(call, "name") && jstr(call, "arguments"))
                    buf_str(&n, jstr(call, "name")), buf_str(&a, jstr(call, "arguments"));
                if (jstr(ch, "finish_reason")) buf_str(&f, jstr(ch, "finish_reason"));
                cJSON_Delete(o);
            }
            CHECKF(st == 200 && (i == 0 || !strcmp(buf_s(&n), "get_time")) && args_valid(buf_s(&n), buf_s(&a), NULL) &&
                       a.n && buf_s(&a)[a.n - 1] == '}' && /* the grammar's whitespace after the JSON dropped */
                       !strcmp(buf_s(&f), "tool_calls"),
                   "tiny gpt_oss, tool_choice %s%s: %ld call %s(%s) finish %s: %.1200s", choices[i],
                   stream ? " stream" : "", st, buf_s(&n), buf_s(&a), buf_s(&f), buf_s(&out));
            buf_free(&out), buf_free(&c), buf_free(&r), buf_free(&n), buf_free(&a), buf_free(&f);
        }
}

/* The prompt's text through /tokenize and /detokenize with `extra` fields. */
static void prompt_text(server *sv, const char *extra, buf *text) {
    char body[1024];
    buf out = {0};
    cJSON *o, *d;
    snprintf(body, sizeof body, "{\"model\":\"" NAME "\"," USER ",\"add_generation_prompt\":true%s}", extra);
    if (post(sv, "/tokenize", body, &out) == 200 && (o = cJSON_Parse(buf_s(&out)))) {
        d = cJSON_CreateObject();
        cJSON_AddItemToObject(d, "tokens", cJSON_Duplicate(J(o, "tokens"), 1));
        char *req = cJSON_PrintUnformatted(d);
        buf_free(&out);
        if (post(sv, "/detokenize", req, &out) == 200) {
            cJSON *t = cJSON_Parse(buf_s(&out));
            if (jstr(t, "prompt")) buf_str(text, jstr(t, "prompt"));
            cJSON_Delete(t);
        }
        free(req);
        cJSON_Delete(d);
        cJSON_Delete(o);
    }
    buf_free(&out);
}

/* reasoning_effort into the template's "Reasoning:" line, gpt-oss's levels. */
static void test_effort(server *sv) {
    static const struct { const char *extra, *level; } E[] = {
        {"", "medium"}, {",\"reasoning_effort\":\"none\"", "low"}, {",\"reasoning_effort\":\"minimal\"", "low"},
        {",\"reasoning_effort\":\"low\"", "low"}, {",\"reasoning_effort\":\"medium\"", "medium"},
        {",\"reasoning_effort\":\"high\"", "high"}, {",\"reasoning_effort\":\"xhigh\"", "high"},
        {",\"chat_template_kwargs\":{\"enable_thinking\":false}", "low"},
        {",\"reasoning_effort\":\"high\",\"chat_template_kwargs\":{\"reasoning_effort\":\"low\"}", "low"},
    };
    buf out = {0};
    for (size_t i = 0; i < sizeof E / sizeof *E; i++) {
        buf text = {0};
        char want[64];
        snprintf(want, sizeof want, "\nReasoning: %s\n\n", E[i].level);
        prompt_text(sv, E[i].extra, &text);
        CHECKF(strstr(buf_s(&text), want) && strstr(buf_s(&text), "<|start|>user<|message|>Weather in Paris?<|end|>"
                                                                   "<|start|>assistant"),
               "'%s': want '%s' in '%s'", E[i].extra, E[i].level, buf_s(&text));
        buf_free(&text);
    }
    CHECK(post(sv, CHAT, "{" USER ",\"max_tokens\":1,\"reasoning_effort\":\"extreme\"}", &out) == 400 &&
          strstr(buf_s(&out), "\"param\":\"reasoning_effort\""));
    buf_free(&out);
}

int main(void) {
    static const chain_spec call = {CALL_CHAIN, (int)(sizeof CALL_CHAIN / sizeof *CALL_CHAIN)},
                            think = {THINK_CHAIN, (int)(sizeof THINK_CHAIN / sizeof *THINK_CHAIN)};
    server sv;
    if (access(GPTOSS_DIR "/tokenizer.json", R_OK) != 0) {
        printf("SKIP: %s is missing (run make deps)\n", GPTOSS_DIR "/tokenizer.json");
        return 77;
    }
    serve_test_init("test_serve_harmony");
    if (start(&sv, "harmony call", model("serve_harmony_call", &call), "") == 0) {
        test_call(&sv);
        test_forced(&sv);
        test_effort(&sv);
        CHECK(wait_idle(&sv, 5));
        server_stop(&sv, 10);
    }
    phase("tool call, reasoning effort");
    if (start(&sv, "harmony think", model("serve_harmony_think", &think),
              " --tool-call-parser openai --reasoning-parser openai_gptoss") == 0) {
        test_think(&sv);
        /* the analysis message the chain writes first is allowed: reasoning, then the call */
        chat_forced(&sv, "\"required\"", NULL, "Let me think.");
        chat_forced(&sv, NAMED, "get_time", "Let me think.");
        CHECK(wait_idle(&sv, 5));
        server_stop(&sv, 10);
    }
    phase("reasoning");
    if (start(&sv, "harmony gpt_oss", gptoss_model(), "") == 0) {
        test_forced_random(&sv);
        CHECK(wait_idle(&sv, 5));
        server_stop(&sv, 10);
    }
    phase("tiny gpt_oss");
    curl_global_cleanup();
    return test_summary();
}
