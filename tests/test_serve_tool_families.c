/*
 * test_serve_tool_families.c — `moe8 serve` with the GLM, MiniMax-M2 and
 * Qwen3-Coder / Qwen3.5 tool-call formats (--tool-call-parser glm45, glm47,
 * minimax_m2, qwen3_coder) on the
 * tiny Qwen3 fixture: tool_choice "required" constrains its random output to
 * one call in the format (the tool's parameters are an integer in [1, 7]
 * and a boolean: every value the grammar allows ends), which the server
 * parses back and types by the schema. Checked: the whole answer is one
 * call to the tool, finish_reason "tool_calls", its arguments a JSON object
 * whose `days` is an integer in range and `metric` (when there) a boolean;
 * the same request streamed gives the same call, its deltas joined. Then
 * the fixture with Qwen3.5's chat template and no --tool-call-parser: the
 * server finds qwen3_coder in the template and does the same. And
 * --tool-call-parser openai (harmony) there: required is a 400 naming the
 * special tokens the tokenizer lacks.
 */
#include "serve_test.h"

#define NAME "fixture"

static const char BODY[] =
    "{\"model\": \"" NAME "\", \"messages\": [{\"role\": \"user\", \"content\": \"Weather?\"}], "
    "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": "
    "{\"type\": \"object\", \"properties\": {\"days\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 7}, "
    "\"metric\": {\"type\": \"boolean\"}}, \"required\": [\"days\"]}}}], \"tool_choice\": \"required\", "
    "\"parallel_tool_calls\": false, \"max_tokens\": 120, \"temperature\": 1, \"seed\": %d, "
    "\"chat_template_kwargs\": {\"enable_thinking\": false}%s}";

/* The one call of a whole answer: its name and arguments; 0 when it is not one well-formed call. */
static int whole_call(const char *body, buf *name, buf *args) {
    cJSON *o = cJSON_Parse(body);
    const cJSON *ch = cJSON_GetArrayItem(J(o, "choices"), 0), *calls = J(J(ch, "message"), "tool_calls"),
                *f = J(cJSON_GetArrayItem(calls, 0), "function");
    int ok = jstr(ch, "finish_reason") && !strcmp(jstr(ch, "finish_reason"), "tool_calls") &&
             cJSON_GetArraySize(calls) == 1 && jstr(f, "name") && jstr(f, "arguments");
    if (ok) buf_str(name, jstr(f, "name")), buf_str(args, jstr(f, "arguments"));
    cJSON_Delete(o);
    return ok;
}

/* A stream's tool_calls deltas joined (index 0 only). */
static int stream_call(const char *body, buf *name, buf *args) {
    const char *p = body;
    int n_calls = 0;
    while ((p = strstr(p, "data: {"))) {
        const char *end = strstr(p, "\n\n");
        cJSON *o = end ? cJSON_ParseWithLength(p + 6, (size_t)(end - p - 6)) : NULL;
        const cJSON *d = J(cJSON_GetArrayItem(J(o, "choices"), 0), "delta"), *k;
        cJSON_ArrayForEach(k, J(d, "tool_calls")) {
            const cJSON *f = J(k, "function");
            if (!cJSON_IsNumber(J(k, "index")) || J(k, "index")->valueint != 0) n_calls = 99;
            if (jstr(f, "name")) buf_str(name, jstr(f, "name")), n_calls++;
            if (jstr(f, "arguments")) buf_str(args, jstr(f, "arguments"));
        }
        cJSON_Delete(o);
        if (!end) break;
        p = end;
    }
    return n_calls == 1;
}

/* parser NULL: the one the chat template teaches (named `label` in messages). */
static void check_parser(const char *dir, const char *label, const char *parser) {
    server sv;
    char args[4600];
    snprintf(args, sizeof args, "-m '%s' --ctx-size 2048 --threads 2 --served-model-name " NAME "%s%s", dir,
             parser ? " --tool-call-parser " : "", parser ? parser : "");
    parser = label;
    if (server_start(&sv, parser, NULL, args) != 0) {
        CHECKF(0, "%s: the server did not start", parser);
        return;
    }
    for (int seed = 1; seed <= 4; seed++) {
        char body[2048];
        buf out = {0}, name = {0}, a = {0}, sname = {0}, sa = {0};
        cJSON *o;
        long st;
        snprintf(body, sizeof body, BODY, seed, "");
        st = post(&sv, CHAT, body, &out);
        CHECKF(st == 200 && whole_call(buf_s(&out), &name, &a), "%s seed %d: %ld %.600s", parser, seed, st, buf_s(&out));
        o = cJSON_Parse(buf_s(&a));
        {
            const cJSON *days = J(o, "days"), *metric = J(o, "metric");
            CHECKF(!strcmp(buf_s(&name), "get_weather") && cJSON_IsObject(o) && cJSON_IsNumber(days) &&
                       days->valuedouble == (double)days->valueint && days->valueint >= 1 && days->valueint <= 7 &&
                       (!metric || cJSON_IsBool(metric)) && strchr(buf_s(&a), '.') == NULL,
                   "%s seed %d: %s(%s)", parser, seed, buf_s(&name), buf_s(&a));
        }
        cJSON_Delete(o);
        buf_free(&out);
        snprintf(body, sizeof body, BODY, seed, ", \"stream\": true");
        st = post(&sv, CHAT, body, &out);
        CHECKF(st == 200 && stream_call(buf_s(&out), &sname, &sa) && !strcmp(buf_s(&sname), buf_s(&name)) &&
                   !strcmp(buf_s(&sa), buf_s(&a)),
               "%s seed %d stream: %s(%s), whole %s(%s)", parser, seed, buf_s(&sname), buf_s(&sa), buf_s(&name), buf_s(&a));
        buf_free(&out);
        buf_free(&name);
        buf_free(&a);
        buf_free(&sname);
        buf_free(&sa);
    }
    if (!strcmp(label, "qwen3_5 template")) { /* the tokens say which format the grammar held it to */
        char body[2048];
        buf out = {0}, text = {0};
        cJSON *o, *t;
        snprintf(body, sizeof body, BODY, 1, ", \"logprobs\": true");
        CHECK(post(&sv, CHAT, body, &out) == 200);
        o = cJSON_Parse(buf_s(&out));
        cJSON_ArrayForEach(t, J(J(cJSON_GetArrayItem(J(o, "choices"), 0), "logprobs"), "content"))
            if (jstr(t, "token")) buf_str(&text, jstr(t, "token"));
        CHECKF(!strncmp(buf_s(&text), "<tool_call>\n<function=get_weather>\n<parameter=days>\n", 52),
               "%s: the output is '%.300s'", label, buf_s(&text));
        cJSON_Delete(o);
        buf_free(&out);
        buf_free(&text);
    }
    CHECK(wait_idle(&sv, 5));
    server_stop(&sv, 10);
}

/* The fixture's tokenizer_config.json with Qwen3.5's chat template. */
static void use_qwen35_template(const char *dir) {
    char path[4200], *text = NULL, *tmpl = NULL, *out;
    size_t len;
    cJSON *cfg;
    moe8_error e;
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    if (moe8_read_file(path, 1 << 24, &text, &len, &e) ||
        moe8_read_file(MOE8_SOURCE_DIR "/tests/data/jinja/qwen3_5.jinja", 1 << 20, &tmpl, &len, &e)) {
        fprintf(stderr, "%s\n", e.message);
        exit(2);
    }
    cfg = cJSON_Parse(text);
    cJSON_ReplaceItemInObjectCaseSensitive(cfg, "chat_template", cJSON_CreateString(tmpl));
    out = cJSON_Print(cfg);
    test_write_file(path, out, strlen(out));
    cJSON_free(out);
    cJSON_Delete(cfg);
    free(text);
    free(tmpl);
}

/* --tool-call-parser openai (harmony) on a tokenizer without harmony's
 * special tokens: required is a 400 naming them, not a broken grammar. */
static void check_harmony_without_tokens(const char *dir) {
    server sv;
    char args[4600], body[2048];
    buf out = {0};
    snprintf(args, sizeof args, "-m '%s' --ctx-size 2048 --threads 2 --served-model-name " NAME
             " --tool-call-parser openai", dir);
    if (server_start(&sv, "openai", NULL, args) != 0) {
        CHECKF(0, "openai: the server did not start");
        return;
    }
    snprintf(body, sizeof body, BODY, 1, "");
    long st = post(&sv, CHAT, body, &out);
    CHECKF(st == 400 && strstr(buf_s(&out), "\"param\":\"tool_choice\"") && strstr(buf_s(&out), "<|channel|>") &&
               strstr(buf_s(&out), "lacks"),
           "harmony required without its tokens: %ld %.600s", st, buf_s(&out));
    buf_free(&out);
    CHECK(wait_idle(&sv, 5));
    server_stop(&sv, 10);
}

int main(void) {
    fx_opts o = serve_fixture_opts();
    const char *dir;
    serve_test_init("test_serve_tool_families");
    dir = fx_test_model("serve_tool_families", &o, 1);
    check_parser(dir, "glm45", "glm45");
    phase("glm45");
    check_parser(dir, "glm47", "glm47");
    phase("glm47");
    check_parser(dir, "minimax_m2", "minimax_m2");
    phase("minimax_m2");
    check_parser(dir, "qwen3_coder", "qwen3_coder");
    phase("qwen3_coder");
    check_harmony_without_tokens(dir);
    phase("openai without harmony's tokens");
    use_qwen35_template(dir);
    check_parser(dir, "qwen3_5 template", NULL);
    phase("qwen3_5 template");
    curl_global_cleanup();
    return test_summary();
}
