/*
 * test_chat_messages.c — whole OpenAI conversations (tools, assistant
 * tool_calls, tool results, reasoning_content, text-part arrays) through the
 * chat template, against Python's jinja2. tests/data/jinja/tool_goldens.json
 * is made once, by hand, by tests/data/jinja/make_tool_goldens.py: it holds
 * each request, what vLLM's message handling makes of it (restated in
 * Python there) and what jinja2 renders from that with the Qwen3,
 * DeepSeek-V3 and Mistral (v3, with tools) templates and a probe template
 * that prints the messages whole. Checked here:
 *   - moe8_chat_template_render_json over those messages, byte for byte
 *     (where jinja2 fails, moe8 must fail too, with raise_exception's text);
 *   - the library's normalisation (moe8_chat_messages_normalize, and the
 *     server's moe8_oa_chat_messages_normalize over it in src/server/api_chat.c)
 *     makes the same JSON from each request, key order included;
 *   - its refusals name the field (messages[2].content[1].type, ...), the
 *     public entry's with the same message;
 *   - the API's edges: bad JSON, bad UTF-8, kwargs over tools, an empty
 *     rendering, the tokenizer's own template.
 */
#include <cjson/cJSON.h>

#include "moe8.h"
#include "server/chat.h"
#include "test.h"

#define DATA MOE8_SOURCE_DIR "/tests/data/jinja"

static char g_buf[1 << 20];
static cJSON *g_goldens;

static char *slurp(const char *path, size_t *len) {
    char *text = NULL;
    moe8_error e;
    if (moe8_read_file(path, (size_t)1 << 26, &text, len, &e) != MOE8_OK) {
        fprintf(stderr, "cannot read %s: %s\n", path, e.message);
        exit(2);
    }
    return text;
}

/* j printed compactly (malloc'd), or NULL for an absent or null j. */
static char *print(const cJSON *j) {
    return j && !cJSON_IsNull(j) ? cJSON_PrintUnformatted(j) : NULL;
}

static int same(const char *a, const char *b) { return (!a && !b) || (a && b && !strcmp(a, b)); }

static const char *raised(const char *py_error) {
    static const char k[] = "TemplateError: ";
    return !strncmp(py_error, k, sizeof k - 1) ? py_error + sizeof k - 1 : NULL;
}

/* ---- the goldens ---------------------------------------------------------------------- */

#define N_TMPL 8
static moe8_chat_template *g_tmpl[N_TMPL];
static const char *g_tmpl_name[N_TMPL];
static int g_n_tmpl;

static moe8_chat_template *tmpl_named(const char *name) {
    for (int i = 0; i < g_n_tmpl; i++)
        if (!strcmp(g_tmpl_name[i], name)) return g_tmpl[i];
    return NULL;
}

static void load_templates(void) {
    const cJSON *t;
    cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(g_goldens, "templates")) {
        const cJSON *bos = cJSON_GetObjectItemCaseSensitive(t, "bos_token"),
                    *eos = cJSON_GetObjectItemCaseSensitive(t, "eos_token"),
                    *file = cJSON_GetObjectItemCaseSensitive(t, "file"),
                    *source = cJSON_GetObjectItemCaseSensitive(t, "source");
        char path[4096], *src;
        size_t len;
        moe8_error e;
        moe8_status st;
        if (g_n_tmpl == N_TMPL) break;
        if (cJSON_IsString(file)) {
            snprintf(path, sizeof path, "%s/%s", DATA, file->valuestring);
            src = slurp(path, &len);
        } else {
            src = strdup(source->valuestring);
            len = strlen(src);
        }
        st = moe8_chat_template_parse(src, len, cJSON_IsString(bos) ? bos->valuestring : NULL,
                                      cJSON_IsString(eos) ? eos->valuestring : NULL, &g_tmpl[g_n_tmpl], &e);
        CHECKF(st == MOE8_OK, "template %s: %s", t->string, e.message);
        if (st == MOE8_OK) g_tmpl_name[g_n_tmpl++] = t->string;
        free(src);
    }
}

/* Each case's request through the normalisation: the messages, tools, documents vLLM makes. */
static void test_normalize(void) {
    const cJSON *c;
    int n = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(g_goldens, "cases")) {
        const cJSON *rq = cJSON_GetObjectItemCaseSensitive(c, "request");
        char *want_m = print(cJSON_GetObjectItemCaseSensitive(c, "messages")),
             *want_t = print(cJSON_GetObjectItemCaseSensitive(c, "tools")),
             *want_d = print(cJSON_GetObjectItemCaseSensitive(c, "documents")), *m = NULL, *t = NULL, *d = NULL;
        moe8_buf err = {0};
        int rc;
        if (!cJSON_IsObject(rq)) goto next;
        rc = moe8_oa_chat_messages_normalize(cJSON_GetObjectItemCaseSensitive(rq, "messages"),
                                     cJSON_GetObjectItemCaseSensitive(rq, "tools"),
                                     cJSON_GetObjectItemCaseSensitive(rq, "documents"), &m, &t, &d, &err);
        CHECKF(rc == 0 && same(m, want_m) && same(t, want_t) && same(d, want_d),
               "%s: normalize rc %d (%s)\n got: %s\n      %s\n want: %s\n      %s", c->string, rc,
               err.p ? err.p : "", m ? m : "-", t ? t : "-", want_m, want_t ? want_t : "-");
        n++;
        { /* the public entry on the request's text (what `moe8 tokenize --messages` calls) */
            char *rm = print(cJSON_GetObjectItemCaseSensitive(rq, "messages")),
                 *rt = print(cJSON_GetObjectItemCaseSensitive(rq, "tools")),
                 *rd = print(cJSON_GetObjectItemCaseSensitive(rq, "documents")), *m2 = NULL, *t2 = NULL, *d2 = NULL;
            moe8_error e;
            moe8_status st = moe8_chat_messages_normalize(rm, rt, rd, &m2, &t2, &d2, &e);
            CHECKF(st == MOE8_OK && same(m2, want_m) && same(t2, want_t) && same(d2, want_d),
                   "%s: moe8_chat_messages_normalize %d (%s)\n got: %s", c->string, st,
                   st == MOE8_OK ? "" : e.message, m2 ? m2 : "-");
            free(m2);
            free(t2);
            free(d2);
            cJSON_free(rm);
            cJSON_free(rt);
            cJSON_free(rd);
        }
    next:
        free(m);
        free(t);
        free(d);
        cJSON_free(want_m);
        cJSON_free(want_t);
        cJSON_free(want_d);
        moe8_buf_free(&err);
    }
    printf("tool goldens: %d requests normalized as vLLM does\n", n);
    CHECK(n >= 12);
}

static void test_goldens(void) {
    const cJSON *g, *cases = cJSON_GetObjectItemCaseSensitive(g_goldens, "cases");
    int n = 0, n_err = 0;
    cJSON_ArrayForEach(g, cJSON_GetObjectItemCaseSensitive(g_goldens, "chats")) {
        const cJSON *out = cJSON_GetObjectItemCaseSensitive(g, "output"),
                    *err = cJSON_GetObjectItemCaseSensitive(g, "error");
        const char *tname = cJSON_GetObjectItemCaseSensitive(g, "template")->valuestring,
                   *cname = cJSON_GetObjectItemCaseSensitive(g, "case")->valuestring;
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(cases, cname);
        char *msgs = print(cJSON_GetObjectItemCaseSensitive(c, "messages")),
             *tools = print(cJSON_GetObjectItemCaseSensitive(c, "tools")),
             *docs = print(cJSON_GetObjectItemCaseSensitive(c, "documents")),
             *kwargs = print(cJSON_GetObjectItemCaseSensitive(g, "kwargs")), what[160];
        int gen = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(g, "add_generation_prompt"));
        moe8_chat_template *t = tmpl_named(tname);
        moe8_error e = {0};
        size_t len = 0;
        moe8_status st;
        snprintf(what, sizeof what, "%s/%s gen=%d kwargs=%s", tname, cname, gen, kwargs ? kwargs : "-");
        CHECKF(t && msgs, "%s: no template or case", what);
        if (t && msgs) {
            st = moe8_chat_template_render_json(t, msgs, tools, docs, gen, kwargs, g_buf, sizeof g_buf,
                                                &len, &e);
            if (out) {
                CHECKF(st == MOE8_OK && len == strlen(out->valuestring) && !strcmp(g_buf, out->valuestring),
                       "%s: status %d (%s)\n got: '%s'\nwant: '%s'", what, st, e.message,
                       st == MOE8_OK ? g_buf : "", out->valuestring);
            } else {
                const char *msg = raised(err->valuestring);
                CHECKF(st == MOE8_ERR_INVALID_ARG && (!msg || strstr(e.message, msg)),
                       "%s: jinja2 failed with '%s'; moe8: status %d '%s'", what, err->valuestring, st,
                       e.message);
                n_err++;
            }
            n++;
        }
        cJSON_free(msgs);
        cJSON_free(tools);
        cJSON_free(docs);
        cJSON_free(kwargs);
    }
    printf("tool goldens: %d renderings (%d failing as in jinja2)\n", n, n_err);
    CHECK(n >= 150 && n_err >= 8);
}

/* ---- the normalisation's refusals ------------------------------------------------------------------ */

/* The request body `req` refused with 400 and this param. */
static void expect_refused(const char *req, const char *param, const char *needle) {
    cJSON *r = cJSON_Parse(req), *body, *e;
    char *m = (char *)1, *t = (char *)1, *d = (char *)1;
    moe8_buf err = {0};
    int rc;
    const char *got_param = NULL, *msg = NULL;
    if (!r) {
        CHECKF(0, "bad test JSON: %s", req);
        return;
    }
    rc = moe8_oa_chat_messages_normalize(cJSON_GetObjectItemCaseSensitive(r, "messages"),
                                 cJSON_GetObjectItemCaseSensitive(r, "tools"),
                                 cJSON_GetObjectItemCaseSensitive(r, "documents"), &m, &t, &d, &err);
    body = err.p ? cJSON_Parse(err.p) : NULL;
    e = cJSON_GetObjectItemCaseSensitive(body, "error");
    if (cJSON_IsString(cJSON_GetObjectItemCaseSensitive(e, "param")))
        got_param = cJSON_GetObjectItemCaseSensitive(e, "param")->valuestring;
    if (cJSON_IsString(cJSON_GetObjectItemCaseSensitive(e, "message")))
        msg = cJSON_GetObjectItemCaseSensitive(e, "message")->valuestring;
    CHECKF(rc == 400 && !m && !t && !d && got_param && !strcmp(got_param, param) && msg &&
               (!needle || strstr(msg, needle)) &&
               !strcmp(cJSON_GetObjectItemCaseSensitive(e, "type")->valuestring, "invalid_request_error"),
           "%s: rc %d, body %s (want param %s, '%s')", req, rc, err.p ? err.p : "-", param,
           needle ? needle : "");
    { /* the public entry on the request's text refuses it with the same message */
        char *rm = print(cJSON_GetObjectItemCaseSensitive(r, "messages")),
             *rt = print(cJSON_GetObjectItemCaseSensitive(r, "tools")),
             *rd = print(cJSON_GetObjectItemCaseSensitive(r, "documents"));
        moe8_error pe;
        m = t = d = (char *)1;
        moe8_status st = moe8_chat_messages_normalize(rm, rt, rd, &m, &t, &d, &pe);
        CHECKF(st == MOE8_ERR_INVALID_ARG && !m && !t && !d && msg && !strcmp(pe.message, msg),
               "%s: moe8_chat_messages_normalize %d '%s', the server's '%s'", req, st,
               st == MOE8_OK ? "" : pe.message, msg ? msg : "-");
        cJSON_free(rm);
        cJSON_free(rt);
        cJSON_free(rd);
    }
    cJSON_Delete(body);
    cJSON_Delete(r);
    moe8_buf_free(&err);
}

/* The request body `req` accepted, making these messages (and tools). */
static void expect_made(const char *req, const char *want_m, const char *want_t) {
    cJSON *r = cJSON_Parse(req);
    char *m = NULL, *t = NULL, *d = NULL;
    moe8_buf err = {0};
    int rc = moe8_oa_chat_messages_normalize(cJSON_GetObjectItemCaseSensitive(r, "messages"),
                                     cJSON_GetObjectItemCaseSensitive(r, "tools"), NULL, &m, &t, &d, &err);
    CHECKF(rc == 0 && same(m, want_m) && same(t, want_t), "%s: rc %d (%s)\n got: %s | %s\nwant: %s | %s", req,
           rc, err.p ? err.p : "", m ? m : "-", t ? t : "-", want_m, want_t ? want_t : "-");
    free(m);
    free(t);
    free(d);
    cJSON_Delete(r);
    moe8_buf_free(&err);
}

#define U "{\"role\": \"user\", \"content\": \"hi\"}"
#define CALL(args) "{\"role\": \"assistant\", \"tool_calls\": [{\"id\": \"c1\", \"type\": \"function\", " \
                   "\"function\": {\"name\": \"f\", \"arguments\": " args "}}]}"

static void test_refusals(void) {
    expect_refused("{}", "messages", "is required");
    expect_refused("{\"messages\": {}}", "messages", "must be an array");
    expect_refused("{\"messages\": []}", "messages", "must not be empty");
    expect_refused("{\"messages\": [1]}", "messages[0]", "must be an object");
    expect_refused("{\"messages\": [{\"role\": \"robot\", \"content\": \"x\"}]}", "messages[0].role", NULL);
    expect_refused("{\"messages\": [{\"content\": \"x\"}]}", "messages[0].role", NULL);
    expect_refused("{\"messages\": [{\"role\": \"user\", \"content\": null}]}", "messages[0].content", "required");
    expect_refused("{\"messages\": [{\"role\": \"tool\"}]}", "messages[0].content", "required");
    expect_refused("{\"messages\": [{\"role\": \"user\", \"content\": 3}]}", "messages[0].content", "a number");
    expect_refused("{\"messages\": [" U ", " U ", {\"role\": \"user\", \"content\": [{\"type\": \"text\", "
                   "\"text\": \"a\"}, {\"type\": \"image_url\", \"image_url\": {\"url\": \"x\"}}]}]}",
                   "messages[2].content[1].type", "\"image_url\": only text parts");
    expect_refused("{\"messages\": [{\"role\": \"user\", \"content\": [\"a\"]}]}", "messages[0].content[0]", NULL);
    expect_refused("{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\"}]}]}",
                   "messages[0].content[0].text", NULL);
    expect_refused("{\"messages\": [" U ", {\"role\": \"assistant\", \"tool_calls\": {}}]}",
                   "messages[1].tool_calls", "must be an array");
    expect_refused("{\"messages\": [" U ", {\"role\": \"assistant\", \"tool_calls\": [7]}]}",
                   "messages[1].tool_calls[0]", NULL);
    expect_refused("{\"messages\": [" U ", " CALL("\"{\\\"a\\\": \"") "]}",
                   "messages[1].tool_calls[0].function.arguments", "invalid JSON");
    expect_refused("{\"messages\": [" U ", " CALL("\"{\\\"a\\\": 1, \\\"a\\\": 2}\"") "]}",
                   "messages[1].tool_calls[0].function.arguments", "'a'");
    expect_refused("{\"messages\": [" U ", " CALL("\"not json\"") "]}",
                   "messages[1].tool_calls[0].function.arguments", NULL);
    expect_refused("{\"messages\": [" U ", " CALL("12") "]}", "messages[1].tool_calls[0].function.arguments",
                   "a number");
    expect_refused("{\"messages\": [" U ", " CALL("\"{\\\"a\\\": \\\"\\\\u0000\\\"}\"") "]}",
                   "messages[1].tool_calls[0].function.arguments", "\\u0000");
    expect_refused("{\"messages\": [" U ", {\"role\": \"assistant\", \"tool_calls\": [{\"id\": \"c\"}]}]}",
                   "messages[1].tool_calls[0].function", NULL);
    expect_refused("{\"messages\": [" U ", {\"role\": \"assistant\", \"tool_calls\": [{\"function\": "
                   "{\"arguments\": \"{}\"}}]}]}", "messages[1].tool_calls[0].function.name", NULL);
    expect_refused("{\"messages\": [" U ", {\"role\": \"assistant\", \"tool_calls\": [{\"type\": \"custom\", "
                   "\"function\": {\"name\": \"f\"}}]}]}", "messages[1].tool_calls[0].type", NULL);
    expect_refused("{\"messages\": [" U ", {\"role\": \"assistant\", \"tool_calls\": [{\"id\": 5, "
                   "\"function\": {\"name\": \"f\"}}]}]}", "messages[1].tool_calls[0].id", NULL);
    expect_refused("{\"messages\": [" U ", {\"role\": \"assistant\", \"content\": \"x\", "
                   "\"reasoning_content\": 1}]}", "messages[1].reasoning_content", NULL);
    expect_refused("{\"messages\": [" U ", {\"role\": \"tool\", \"content\": \"x\", \"tool_call_id\": 1}]}",
                   "messages[1].tool_call_id", NULL);
    expect_refused("{\"messages\": [{\"role\": \"user\", \"content\": \"x\", \"name\": []}]}",
                   "messages[0].name", NULL);
    expect_refused("{\"messages\": [" U "], \"tools\": {}}", "tools", "must be an array");
    expect_refused("{\"messages\": [" U "], \"tools\": [\"f\"]}", "tools[0]", NULL);
    expect_refused("{\"messages\": [" U "], \"tools\": [{\"type\": \"retrieval\"}]}", "tools[0].type", NULL);
    expect_refused("{\"messages\": [" U "], \"tools\": [{\"type\": \"function\"}]}", "tools[0].function", NULL);
    expect_refused("{\"messages\": [" U "], \"tools\": [{\"function\": {\"name\": \"\"}}]}",
                   "tools[0].function.name", NULL);
    expect_refused("{\"messages\": [" U "], \"tools\": [{\"function\": {\"name\": \"f\", \"description\": 1}}]}",
                   "tools[0].function.description", NULL);
    expect_refused("{\"messages\": [" U "], \"tools\": [{\"function\": {\"name\": \"f\", \"parameters\": []}}]}",
                   "tools[0].function.parameters", NULL);
    expect_refused("{\"messages\": [" U "], \"documents\": {}}", "documents", NULL);
    expect_refused("{\"messages\": [" U "], \"documents\": [{\"title\": 1}]}", "documents[0]", NULL);
}

static void test_made(void) {
    /* no content, arguments already an object, blank arguments, ignored fields */
    expect_made("{\"messages\": [" U ", {\"role\": \"assistant\", \"refusal\": null, \"tool_calls\": ["
                "{\"function\": {\"name\": \"f\", \"arguments\": {\"a\": [1, {}]}}, \"extra\": 1},"
                "{\"type\": \"function\", \"id\": \"x\", \"function\": {\"arguments\": \" \\n\", \"name\": \"g\"}}]}]}",
                "[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":["
                "{\"function\":{\"arguments\":{\"a\":[1,{}]},\"name\":\"f\"},\"type\":\"function\"},"
                "{\"id\":\"x\",\"function\":{\"arguments\":{},\"name\":\"g\"},\"type\":\"function\"}]}]",
                NULL);
    /* tool_calls null, tool_calls on a user message (ignored as vLLM does), tool_call_id null */
    expect_made("{\"messages\": [{\"role\": \"user\", \"content\": \"a\", \"tool_calls\": [1]},"
                "{\"role\": \"assistant\", \"content\": \"b\", \"tool_calls\": null, \"reasoning\": null,"
                " \"reasoning_content\": \"r\"}, {\"role\": \"tool\", \"content\": \"c\", \"tool_call_id\": null,"
                " \"name\": null}]}",
                "[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\",\"content\":\"b\",\"reasoning\":"
                "\"r\",\"reasoning_content\":\"r\"},{\"role\":\"tool\",\"content\":\"c\",\"tool_call_id\":null}]",
                NULL);
    /* tools: defaults filled, extra keys kept after the known ones, null tools is None */
    expect_made("{\"messages\": [" U "], \"tools\": [{\"function\": {\"strict\": true, \"name\": \"f\"}, "
                "\"x\": 1}]}", "[{\"role\":\"user\",\"content\":\"hi\"}]",
                "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"description\":null,\"parameters\":null,"
                "\"strict\":true},\"x\":1}]");
    expect_made("{\"messages\": [" U "], \"tools\": null}", "[{\"role\":\"user\",\"content\":\"hi\"}]", NULL);
    expect_made("{\"messages\": [" U "], \"tools\": []}", "[{\"role\":\"user\",\"content\":\"hi\"}]", "[]");
}

/* ---- the API's edges ------------------------------------------------------------------- */

static void test_api(void) {
    moe8_chat_template *t = NULL, *empty = NULL;
    const char *src = "{{ tools }}|{{ documents }}|{% for m in messages %}{{ m.role }}={{ m.content }}"
                      "{% if m.tool_calls %}+{{ m.tool_calls[0].function.arguments.a }}{% endif %};{% endfor %}";
    moe8_chat_message one = {"user", "x"};
    moe8_error e = {0};
    size_t n = 99;
    CHECK(moe8_chat_template_parse(src, strlen(src), NULL, NULL, &t, &e) == MOE8_OK);
    CHECK(moe8_chat_template_parse("{# nothing #}", 13, NULL, NULL, &empty, &e) == MOE8_OK);
    if (!t || !empty) return;
    CHECK(moe8_chat_template_render_json(t, "[{\"role\": \"user\", \"content\": null}, {\"role\": \"assistant\", "
                                         "\"content\": \"k\", \"tool_calls\": [{\"function\": {\"arguments\": "
                                         "{\"a\": 5}}}]}]", "[1]", "[{\"t\": \"d\"}]", 0, NULL, g_buf,
                                         sizeof g_buf, &n, &e) == MOE8_OK &&
          !strcmp(g_buf, "[1]|[{'t': 'd'}]|user=None;assistant=k+5;") && n == strlen(g_buf));
    /* tools and documents NULL are None; kwargs set tools over tools_json (they come last in vLLM) */
    CHECK(moe8_chat_template_render_json(t, "[]", NULL, NULL, 0, NULL, g_buf, sizeof g_buf, &n, &e) == MOE8_OK &&
          !strcmp(g_buf, "None|None|"));
    CHECK(moe8_chat_template_render_json(t, "[]", "[1]", "null", 0, "{\"tools\": [2], \"documents\": 3}", g_buf,
                                         sizeof g_buf, &n, &e) == MOE8_OK && !strcmp(g_buf, "[2]|3|"));
    /* the caller's JSON: refused with MOE8_ERR_INVALID_ARG naming what */
    CHECK(moe8_chat_template_render_json(t, NULL, NULL, NULL, 0, NULL, g_buf, sizeof g_buf, &n, &e) ==
          MOE8_ERR_INVALID_ARG);
    CHECK(moe8_chat_template_render_json(NULL, "[]", NULL, NULL, 0, NULL, g_buf, sizeof g_buf, &n, &e) ==
          MOE8_ERR_INVALID_ARG);
    CHECK(moe8_chat_template_render_json(t, "[{\"role\": ", NULL, NULL, 0, NULL, g_buf, sizeof g_buf, &n, &e) ==
              MOE8_ERR_INVALID_ARG && strstr(e.message, "'messages'") && strstr(e.message, "invalid JSON"));
    CHECK(moe8_chat_template_render_json(t, "{}", NULL, NULL, 0, NULL, g_buf, sizeof g_buf, &n, &e) ==
              MOE8_ERR_INVALID_ARG && strstr(e.message, "messages must be a JSON array"));
    CHECK(moe8_chat_template_render_json(t, "null", NULL, NULL, 0, NULL, g_buf, sizeof g_buf, &n, &e) ==
              MOE8_ERR_INVALID_ARG && strstr(e.message, "messages must be a JSON array"));
    CHECK(moe8_chat_template_render_json(t, "[1]", NULL, NULL, 0, NULL, g_buf, sizeof g_buf, &n, &e) ==
              MOE8_ERR_INVALID_ARG && strstr(e.message, "messages[0] must be an object"));
    CHECK(moe8_chat_template_render_json(t, "[{\"content\": \"x\"}]", NULL, NULL, 0, NULL, g_buf, sizeof g_buf,
                                         &n, &e) == MOE8_ERR_INVALID_ARG && strstr(e.message, "'role'"));
    CHECK(moe8_chat_template_render_json(t, "[]", "{}", NULL, 0, NULL, g_buf, sizeof g_buf, &n, &e) ==
              MOE8_ERR_INVALID_ARG && strstr(e.message, "tools must be a JSON array"));
    CHECK(moe8_chat_template_render_json(t, "[]", NULL, "[1,]", 0, NULL, g_buf, sizeof g_buf, &n, &e) ==
              MOE8_ERR_INVALID_ARG && strstr(e.message, "'documents'"));
    CHECK(moe8_chat_template_render_json(t, "[{\"role\": \"user\", \"content\": \"a\xc3(\"}]", NULL, NULL, 0,
                                         NULL, g_buf, sizeof g_buf, &n, &e) == MOE8_ERR_INVALID_ARG &&
          strstr(e.message, "messages[0].content") && strstr(e.message, "UTF-8"));
    CHECK(moe8_chat_template_render_json(t, "[{\"role\": \"user\", \"\xff\": 1}]", NULL, NULL, 0, NULL, g_buf,
                                         sizeof g_buf, &n, &e) == MOE8_ERR_INVALID_ARG &&
          strstr(e.message, "(a key)"));
    CHECK(moe8_chat_template_render_json(t, "[]", NULL, NULL, 0, "{\"messages\": 1}", g_buf, sizeof g_buf, &n,
                                         &e) == MOE8_ERR_INVALID_ARG && strstr(e.message, "cannot set 'messages'"));
    /* measuring: a non-empty rendering needs room for it and the NUL */
    CHECK(moe8_chat_template_render_json(t, "[]", NULL, NULL, 0, NULL, NULL, 0, &n, &e) == MOE8_ERR_INVALID_ARG &&
          n == 10);
    /* an empty rendering is a rendering: it fits cap 0, and a buffer gets "" */
    n = 99;
    CHECK(moe8_chat_template_render_json(empty, "[]", NULL, NULL, 1, NULL, NULL, 0, &n, &e) == MOE8_OK && n == 0);
    n = 99;
    CHECK(moe8_chat_template_render(empty, &one, 1, 1, NULL, NULL, 0, &n, &e) == MOE8_OK && n == 0);
    g_buf[0] = 'x';
    CHECK(moe8_chat_template_render(empty, &one, 1, 1, NULL, g_buf, 1, &n, &e) == MOE8_OK && n == 0 &&
          g_buf[0] == '\0');
    moe8_chat_template_free(t);
    moe8_chat_template_free(empty);
}

/* The tokenizer's own template (Qwen3's tokenizer_config.json) renders JSON
 * conversations as qwen3.jinja does. */
static void test_tokenizer_template(void) {
    moe8_tokenizer *tok = NULL;
    moe8_error e = {0};
    const cJSON *g;
    int n = 0;
    if (access(MOE8_TOKENIZER_DIR "/tokenizer.json", F_OK)) {
        printf("tokenizer template: skipped (no %s; make deps)\n", MOE8_TOKENIZER_DIR);
        return;
    }
    CHECK(moe8_tokenizer_load(MOE8_TOKENIZER_DIR, &tok, &e) == MOE8_OK);
    if (!tok) return;
    cJSON_ArrayForEach(g, cJSON_GetObjectItemCaseSensitive(g_goldens, "chats")) {
        const cJSON *out = cJSON_GetObjectItemCaseSensitive(g, "output"),
                    *c = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(g_goldens, "cases"),
                                                          cJSON_GetObjectItemCaseSensitive(g, "case")->valuestring);
        char *msgs, *tools;
        size_t len;
        if (strcmp(cJSON_GetObjectItemCaseSensitive(g, "template")->valuestring, "qwen3") || !out ||
            !cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(g, "kwargs")))
            continue;
        msgs = print(cJSON_GetObjectItemCaseSensitive(c, "messages"));
        tools = print(cJSON_GetObjectItemCaseSensitive(c, "tools"));
        CHECKF(moe8_chat_apply_json(tok, msgs, tools, NULL,
                                    cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(g, "add_generation_prompt")),
                                    NULL, g_buf, sizeof g_buf, &len, &e) == MOE8_OK &&
                   !strcmp(g_buf, out->valuestring),
               "apply_json %s: %s", cJSON_GetObjectItemCaseSensitive(g, "case")->valuestring, e.message);
        cJSON_free(msgs);
        cJSON_free(tools);
        n++;
    }
    CHECK(n >= 20);
    CHECK(moe8_chat_apply_json(NULL, "[]", NULL, NULL, 0, NULL, g_buf, sizeof g_buf, NULL, &e) != MOE8_OK);
    moe8_tokenizer_free(tok);
}

int main(void) {
    size_t len;
    char *text = slurp(DATA "/tool_goldens.json", &len);
    g_goldens = cJSON_ParseWithLength(text, len);
    free(text);
    if (!g_goldens) {
        fprintf(stderr, "cannot parse tool_goldens.json\n");
        return 2;
    }
    printf("%s\n", cJSON_GetObjectItemCaseSensitive(g_goldens, "generator")->valuestring);
    load_templates();
    test_goldens();
    test_normalize();
    test_refusals();
    test_made();
    test_api();
    test_tokenizer_template();
    for (int i = 0; i < g_n_tmpl; i++) moe8_chat_template_free(g_tmpl[i]);
    cJSON_Delete(g_goldens);
    return test_summary();
}
