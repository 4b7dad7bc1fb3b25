/*
 * test_chat_harmony.c — gpt-oss's harmony format on both sides of the model:
 *   - the chat template (llama.cpp's copy, tests/data/jinja/gpt_oss.jinja)
 *     rendered by moe8 for a table of conversations (system and developer
 *     instructions, tools as the TypeScript-like namespace, reasoning_effort
 *     low / medium / high, reasoning and tool calls in the history, tool
 *     results, the template's refusals) against Python's jinja2:
 *     tests/data/jinja/harmony_goldens.json, made by hand by
 *     make_harmony_goldens.py, byte for byte but the "Current date:" the
 *     template takes from the clock (jinja2's was pinned);
 *   - the messages as the server hands them to that template
 *     (moe8_chat_messages_normalize, then moe8_harmony_messages: reasoning as
 *     `thinking`) against the goldens' (the Python restatement);
 *   - the output parser (src/server/toolcall_harmony.c through toolcall.h):
 *     a table of outputs (analysis, final, calls with and without
 *     <|constrain|>, two calls, preambles, built-in tools, outputs cut short,
 *     and malformed ones) fed split at every byte and byte by byte, against
 *     the content, reasoning and calls written here.
 */
#include <cjson/cJSON.h>

#include "core/buf.h"
#include "moe8.h"
#include "server/server.h"
#include "server/toolcall.h"
#include "server/toolcall_harmony.h"
#include "test.h"

#define DATA MOE8_SOURCE_DIR "/tests/data/jinja"

static char g_buf[1 << 20];

static char *slurp(const char *path, size_t *len) {
    char *text = NULL;
    moe8_error e;
    if (moe8_read_file(path, (size_t)1 << 26, &text, len, &e) != MOE8_OK) {
        fprintf(stderr, "cannot read %s: %s\n", path, e.message);
        exit(2);
    }
    return text;
}

static char *print(const cJSON *j) {
    return j && !cJSON_IsNull(j) ? cJSON_PrintUnformatted(j) : NULL;
}

/* ---- the template against jinja2 ------------------------------------------------------ */

/* moe8's "Current date: YYYY-MM-DD" (today) as the goldens' date. */
static int pin_date(char *out, const char *date) {
    char *p = strstr(out, "Current date: ");
    if (!p) return 1;
    p += strlen("Current date: ");
    for (int i = 0; i < 10; i++)
        if (!p[i] || (i == 4 || i == 7 ? p[i] != '-' : (p[i] < '0' || p[i] > '9'))) return 0;
    memcpy(p, date, 10);
    return 1;
}

static void check_chat(const cJSON *g, const moe8_chat_template *tmpl, const cJSON *cases, const char *date,
                       int *n, int *n_err) {
    const cJSON *out = cJSON_GetObjectItemCaseSensitive(g, "output"),
                *err = cJSON_GetObjectItemCaseSensitive(g, "error");
    const char *cname = cJSON_GetObjectItemCaseSensitive(g, "case")->valuestring;
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(cases, cname);
    char *msgs = print(cJSON_GetObjectItemCaseSensitive(c, "messages")),
         *tools = print(cJSON_GetObjectItemCaseSensitive(c, "tools")),
         *kwargs = print(cJSON_GetObjectItemCaseSensitive(g, "kwargs")), what[200];
    const int gen = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(g, "add_generation_prompt"));
    moe8_error e = {0};
    size_t len = 0;
    moe8_status st;
    snprintf(what, sizeof what, "%s gen=%d kwargs=%s", cname, gen, kwargs ? kwargs : "-");
    CHECKF(msgs != NULL, "%s: no case", what);
    if (msgs) {
        st = moe8_chat_template_render_json(tmpl, msgs, tools, NULL, gen, kwargs, g_buf, sizeof g_buf, &len, &e);
        if (out) {
            const int dated = st == MOE8_OK && pin_date(g_buf, date);
            CHECKF(dated && len == strlen(out->valuestring) && !strcmp(g_buf, out->valuestring),
                   "%s: status %d (%s)\n got: '%s'\nwant: '%s'", what, st, e.message,
                   st == MOE8_OK ? g_buf : "", out->valuestring);
        } else {
            CHECKF(st == MOE8_ERR_INVALID_ARG, "%s: jinja2 failed with '%s'; moe8: status %d", what,
                   err->valuestring, st);
            (*n_err)++;
        }
        (*n)++;
    }
    cJSON_free(msgs);
    cJSON_free(tools);
    cJSON_free(kwargs);
}

/* The request's messages as the server makes them, against the goldens'. */
static void check_messages(const cJSON *c) {
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(c, "request");
    char *in = print(cJSON_GetObjectItemCaseSensitive(req, "messages")),
         *tools = print(cJSON_GetObjectItemCaseSensitive(req, "tools")), *mj = NULL, *tj = NULL, *dj = NULL;
    moe8_error e;
    cJSON *got = NULL;
    const moe8_status st = moe8_chat_messages_normalize(in, tools, NULL, &mj, &tj, &dj, &e);
    CHECKF(st == MOE8_OK, "%s: normalize: %s", c->string, st ? e.message : "");
    if (st == MOE8_OK) {
        CHECK(moe8_harmony_messages(&mj) == 0);
        got = cJSON_Parse(mj);
        CHECKF(cJSON_Compare(got, cJSON_GetObjectItemCaseSensitive(c, "messages"), 1), "%s: messages %s", c->string,
               mj);
    }
    cJSON_Delete(got);
    cJSON_free(in);
    cJSON_free(tools);
    free(mj);
    free(tj);
    free(dj);
}

static void test_template(void) {
    size_t len;
    char *text = slurp(DATA "/harmony_goldens.json", &len), *src, path[4096];
    cJSON *goldens = cJSON_ParseWithLength(text, len);
    const cJSON *g, *c, *cases = cJSON_GetObjectItemCaseSensitive(goldens, "cases"),
                    *t = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(goldens, "templates"),
                                                         "gpt_oss");
    const char *date = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(goldens, "date"));
    moe8_chat_template *tmpl = NULL;
    moe8_error e;
    int n = 0, n_err = 0;
    CHECK(goldens && t && date && strlen(date) == 10);
    if (!goldens || !t || !date) exit(test_summary());
    snprintf(path, sizeof path, "%s/%s", DATA, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(t, "file")));
    src = slurp(path, &len);
    CHECK(moe8_harmony_template(src) && moe8_toolcall_detect(src) == TOOLCALL_HARMONY);
    CHECKF(moe8_chat_template_parse(src, len, "<|startoftext|>", "<|return|>", &tmpl, &e) == MOE8_OK,
           "gpt_oss.jinja: %s", e.message);
    if (tmpl)
        cJSON_ArrayForEach(g, cJSON_GetObjectItemCaseSensitive(goldens, "chats"))
            check_chat(g, tmpl, cases, date, &n, &n_err);
    printf("harmony goldens: %d renderings (%d failing as in jinja2)\n", n, n_err);
    CHECK(n >= 60 && n_err >= 8);
    cJSON_ArrayForEach(c, cases) check_messages(c);
    { /* a tool without a description: "" (the template would concatenate None) */
        char *tj = strdup("[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"description\":null}},"
                          "{\"type\":\"function\",\"function\":{\"name\":\"g\",\"description\":\"G\"}}]");
        CHECK(moe8_harmony_tools(&tj) == 0 &&
              !strcmp(tj, "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"description\":\"\"}},"
                          "{\"type\":\"function\",\"function\":{\"name\":\"g\",\"description\":\"G\"}}]"));
        free(tj);
    }
    moe8_chat_template_free(tmpl);
    free(src);
    cJSON_Delete(goldens);
    free(text);
}

/* ---- the output parser ------------------------------------------------------------------ */

typedef struct {
    const char *name;
    int tools;                       /* the request has tools */
    const char *out, *content, *reasoning, *calls; /* calls: "NAME ARGS ok|broken;" each */
} parse_case;

#define CALL_HDR "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
static const parse_case CASES[] = {
    {"analysis_final", 1, "<|channel|>analysis<|message|>User greets.<|end|><|start|>assistant<|channel|>final"
     "<|message|>Hello!<|return|>", "Hello!", "User greets.", ""},
    {"final_eos_cut", 0, "<|channel|>analysis<|message|>x<|end|><|start|>assistant<|channel|>final<|message|>Hi",
     "Hi", "x", ""},
    {"call_constrain", 1, "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant" CALL_HDR
     "{\"city\": \"Paris\"}<|call|>", "", "Need weather.", "get_weather {\"city\": \"Paris\"} ok;"},
    {"call_recipient_first", 1, " to=functions.get_time<|channel|>commentary json<|message|>{}<|call|>", "", "",
     "get_time {} ok;"},
    {"call_constrain_first", 1, " to=functions.get_weather <|constrain|>json<|channel|>commentary<|message|>{}<|call|>",
     "", "", "get_weather {} ok;"},
    {"call_cut_by_eos", 1, CALL_HDR "\n{\"city\": \"Rome\"}", "", "", "get_weather {\"city\": \"Rome\"} ok;"},
    {"call_empty_body", 1, CALL_HDR "<|call|>", "", "", "get_weather {} ok;"},
    {"call_trailing_ws", 1, CALL_HDR " \n{\"city\": \"Paris\"}\n\t\t  <|call|>", "", "",
     "get_weather {\"city\": \"Paris\"} ok;"},
    {"call_inner_ws", 1, CALL_HDR "{ \"city\" :  \"a  b\" }\n<|call|>", "", "", "get_weather { \"city\" :  \"a  b\" } ok;"},
    {"call_ws_cut_by_eos", 1, CALL_HDR "{}\n\n", "", "", "get_weather {} ok;"},
    {"two_calls", 1, CALL_HDR "{\"city\": \"A\"}<|call|><|start|>assistant" CALL_HDR "{\"city\": \"B\"}<|call|>",
     "", "", "get_weather {\"city\": \"A\"} ok;get_weather {\"city\": \"B\"} ok;"},
    {"preamble_then_call", 1, "<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant" CALL_HDR
     "{\"city\": \"Oslo\"}<|call|>", "Checking.", "", "get_weather {\"city\": \"Oslo\"} ok;"},
    {"bad_json_args", 1, CALL_HDR "{\"city\": Paris}<|call|>", "{\"city\": Paris}", "",
     "get_weather {\"city\": Paris} broken;"},
    {"args_cut_short", 1, CALL_HDR "{\"city\": \"Pa", "{\"city\": \"Pa", "", "get_weather {\"city\": \"Pa broken;"},
    {"no_tools_call_is_content", 0, CALL_HDR "{\"city\": \"Paris\"}<|call|>", "{\"city\": \"Paris\"}", "", ""},
    {"builtin_in_analysis", 1, "<|channel|>analysis to=browser.search code<|message|>{\"query\": \"x\"}<|call|>",
     "", "{\"query\": \"x\"}", ""},
    {"not_harmony", 1, "Hello there, <|end|> plain text.", "Hello there, <|end|> plain text.", "", ""},
    {"unknown_channel", 1, "<|channel|>thoughts<|message|>hmm<|end|><|start|>assistant<|channel|>final<|message|>ok",
     "<|channel|>thoughts<|message|>hmmok", "", ""},
    {"no_channel", 1, " to=functions.f<|message|>{}<|call|>", " to=functions.f<|message|>{}", "", ""},
    {"header_cut", 1, "<|channel|>analysis<|message|>a<|end|><|start|>assistant<|chan", "<|start|>assistant<|chan",
     "a", ""},
    {"start_without_end", 1, "<|channel|>analysis<|message|>a<|start|>assistant<|channel|>final<|message|>b", "b",
     "a", ""},
    {"text_between", 1, "<|channel|>analysis<|message|>a<|end|>\n<|start|>assistant<|channel|>final<|message|>b",
     "\nb", "a", ""},
    {"marker_prefixes_in_body", 1, "<|channel|>final<|message|>a <| b <|en c<|endx|> d<|return|>",
     "a <| b <|en c<|endx|> d", "", ""},
    {"empty", 1, "", "", "", ""},
    {"unicode", 1, "<|channel|>analysis<|message|>\xe4\xbd\xa0\xe5\xa5\xbd<|end|><|start|>assistant<|channel|>final"
     "<|message|>caf\xc3\xa9 \xf0\x9f\x9a\x80<|return|>", "caf\xc3\xa9 \xf0\x9f\x9a\x80", "\xe4\xbd\xa0\xe5\xa5\xbd", ""},
};

typedef struct {
    moe8_buf content, reasoning, calls, args;
    int open;      /* a call is open */
    int bad;       /* events out of order */
} sink_state;

static void on_content(void *u, const char *s, size_t n) { moe8_buf_add(&((sink_state *)u)->content, s, n); }
static void on_reasoning(void *u, const char *s, size_t n) { moe8_buf_add(&((sink_state *)u)->reasoning, s, n); }
static void on_begin(void *u, int index, const char *name, size_t n) {
    sink_state *st = u;
    (void)index;
    if (st->open) st->bad = 1;
    st->open = 1;
    moe8_buf_add(&st->calls, name, n);
    moe8_buf_str(&st->calls, " ");
    st->args.n = 0;
}
static void on_args(void *u, int index, const char *s, size_t n) {
    sink_state *st = u;
    (void)index;
    if (!st->open) st->bad = 1;
    moe8_buf_add(&st->args, s, n);
}
static void on_end(void *u, int index, int ok) {
    sink_state *st = u;
    (void)index;
    if (!st->open) st->bad = 1;
    st->open = 0;
    moe8_buf_add(&st->calls, st->args.p ? st->args.p : "", st->args.n);
    moe8_buf_str(&st->calls, ok ? " ok;" : " broken;");
}

static int same(const moe8_buf *b, const char *want) {
    return b->n == strlen(want) && (!b->n || !memcmp(b->p, want, b->n));
}

/* Feed c->out cut at `cut` (bytewise: one byte at a time). */
static void run_case(const parse_case *c, size_t cut, int bytewise) {
    static const char TOOLS[] = "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}]";
    cJSON *tools = c->tools ? cJSON_Parse(TOOLS) : NULL;
    toolcall_parser *p = moe8_toolcall_new(TOOLCALL_HARMONY, tools);
    sink_state st = {0};
    const toolcall_sink k = {on_content, on_begin, on_args, on_end, &st, on_reasoning};
    const size_t n = strlen(c->out);
    int rc = p ? 0 : -1;
    if (bytewise)
        for (size_t i = 0; i < n && !rc; i++) rc = moe8_toolcall_feed(p, c->out + i, 1, &k);
    else if (!rc && !(rc = moe8_toolcall_feed(p, c->out, cut, &k)))
        rc = moe8_toolcall_feed(p, c->out + cut, n - cut, &k);
    if (!rc) rc = moe8_toolcall_finish(p, &k);
    moe8_buf_str(&st.content, "");
    moe8_buf_str(&st.reasoning, "");
    moe8_buf_str(&st.calls, "");
    CHECKF(!rc && !st.bad && !st.open && same(&st.content, c->content) && same(&st.reasoning, c->reasoning) &&
               same(&st.calls, c->calls),
           "%s (cut %zu%s): content '%s' reasoning '%s' calls '%s'", c->name, cut, bytewise ? ", bytewise" : "",
           st.content.p, st.reasoning.p, st.calls.p);
    moe8_buf_free(&st.content);
    moe8_buf_free(&st.reasoning);
    moe8_buf_free(&st.calls);
    moe8_buf_free(&st.args);
    moe8_toolcall_free(p);
    cJSON_Delete(tools);
}

static void test_parser(void) {
    int n = 0;
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) {
        for (size_t cut = 0; cut <= strlen(CASES[i].out); cut++, n++) run_case(&CASES[i], cut, 0);
        run_case(&CASES[i], 0, 1);
    }
    printf("harmony parser: %zu outputs, %d splits\n", sizeof CASES / sizeof *CASES, n);
    CHECK(moe8_srv_reasoning_append("openai_gptoss") == 0);
    CHECK(moe8_toolcall_format_from_name("openai") == TOOLCALL_HARMONY &&
          !strcmp(moe8_toolcall_format_name(TOOLCALL_HARMONY), "openai"));
    /* a header that never ends is text once it passes 512 bytes */
    {
        static char out[2000];
        parse_case c = {"long_header", 1, out, out, "", ""};
        memcpy(out, "<|channel|>analysis", 19);
        memset(out + 19, 'x', 1000);
        out[1019] = '\0';
        run_case(&c, 600, 0);
    }
}

int main(void) {
    test_template();
    test_parser();
    return test_summary();
}
