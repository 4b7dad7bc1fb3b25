/*
 * test_jinja.c — moe8's Jinja interpreter and chat templates against Python's
 * jinja2. tests/data/jinja/goldens.json holds renderings made once, by hand,
 * by tests/data/jinja/make_goldens.py (jinja2 set up as transformers'
 * apply_chat_template): the Qwen3, Llama-2-chat, Mixtral-Instruct and
 * DeepSeek-V3 templates over a table of conversations, and ~150 small
 * templates of the interpreter itself; outputs are compared byte for byte,
 * and where jinja2 fails moe8 must fail too (with raise_exception's message).
 * Then, by hand: errors with line and column, the limits (loops, recursion,
 * memory, output), the tokenizer's own template (tokenizer_config.json, its
 * list form, chat_template.jinja, none), Qwen3's template against the ChatML
 * formatter, the API's edges, and the known differences from jinja2.
 */
#include <time.h>

#include <cjson/cJSON.h>

#include "moe8.h"
#include "test.h"
#include "jinja/jinja.h"

#define DATA MOE8_SOURCE_DIR "/tests/data/jinja"

static char g_buf[1 << 20];

/* ---- helpers ----------------------------------------------------------------- */

static char *slurp(const char *path, size_t *len) {
    char *text = NULL;
    moe8_error e;
    if (moe8_read_file(path, (size_t)1 << 26, &text, len, &e) != MOE8_OK) {
        fprintf(stderr, "cannot read %s: %s\n", path, e.message);
        exit(2);
    }
    return text;
}

/* A small template through the interpreter itself; *out is malloc'd. */
static moe8_status junit(const char *src, const cJSON *vars, const jinja_limits *lim, char **out,
                         moe8_error *e) {
    jinja_template *t = NULL;
    size_t n;
    moe8_status st = moe8_jinja_parse(src, strlen(src), "chat template", &t, e);
    *out = NULL;
    if (st == MOE8_OK) st = moe8_jinja_render(t, vars, lim, out, &n, e);
    moe8_jinja_free(t);
    return st;
}

/* Render src with vars (JSON text or NULL): expect `want`. */
static void expect_out(const char *src, const char *vars, const char *want) {
    cJSON *v = vars ? cJSON_Parse(vars) : NULL;
    char *out = NULL;
    moe8_error e = {0};
    moe8_status st = junit(src, v, NULL, &out, &e);
    CHECKF(st == MOE8_OK && out && !strcmp(out, want), "'%s': status %d '%s', got '%s', want '%s'",
           src, st, e.message, out ? out : "", want);
    free(out);
    cJSON_Delete(v);
}

/* Expect failure with `code` and every needle in the message. */
static void expect_err(const char *src, const char *vars, const jinja_limits *lim, moe8_status code,
                       const char *needle, const char *needle2) {
    cJSON *v = vars ? cJSON_Parse(vars) : NULL;
    char *out = NULL;
    moe8_error e = {0};
    moe8_status st = junit(src, v, lim, &out, &e);
    CHECKF(st == code && !out && strstr(e.message, needle) && (!needle2 || strstr(e.message, needle2)),
           "'%.60s': status %d (want %d), message '%s' (want '%s'%s%s)", src, st, code, e.message,
           needle, needle2 ? " and " : "", needle2 ? needle2 : "");
    free(out);
    cJSON_Delete(v);
}

static size_t messages_of(const cJSON *list, moe8_chat_message *m, size_t cap) {
    size_t n = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, list) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(x, "content");
        if (n == cap) break;
        m[n].role = cJSON_GetObjectItemCaseSensitive(x, "role")->valuestring;
        m[n].content = cJSON_IsString(c) ? c->valuestring : NULL;
        n++;
    }
    return n;
}

/* The message jinja2 gave a TemplateError (raise_exception), or NULL. */
static const char *raised(const char *py_error) {
    static const char k[] = "TemplateError: ";
    return !strncmp(py_error, k, sizeof k - 1) ? py_error + sizeof k - 1 : NULL;
}

/* ---- the goldens ---------------------------------------------------------------- */

static cJSON *g_goldens;
static moe8_chat_template *g_tmpl[8];
static const char *g_tmpl_name[8];
static int g_n_tmpl;

static moe8_chat_template *tmpl_named(const char *name) {
    for (int i = 0; i < g_n_tmpl; i++)
        if (!strcmp(g_tmpl_name[i], name)) return g_tmpl[i];
    return NULL;
}

static void load_templates(void) {
    const cJSON *t;
    cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(g_goldens, "templates")) {
        char path[4096];
        const cJSON *bos = cJSON_GetObjectItemCaseSensitive(t, "bos_token"),
                    *eos = cJSON_GetObjectItemCaseSensitive(t, "eos_token");
        size_t len;
        moe8_error e;
        snprintf(path, sizeof path, "%s/%s", DATA, cJSON_GetObjectItemCaseSensitive(t, "file")->valuestring);
        char *src = slurp(path, &len);
        moe8_status st = moe8_chat_template_parse(src, len, cJSON_IsString(bos) ? bos->valuestring : NULL,
                                                  cJSON_IsString(eos) ? eos->valuestring : NULL,
                                                  &g_tmpl[g_n_tmpl], &e);
        CHECKF(st == MOE8_OK, "%s: %s", path, e.message);
        g_tmpl_name[g_n_tmpl++] = t->string;
        free(src);
    }
    CHECK(g_n_tmpl == 4);
}

static void test_chat_goldens(void) {
    const cJSON *g;
    int n = 0, raised_n = 0;
    cJSON_ArrayForEach(g, cJSON_GetObjectItemCaseSensitive(g_goldens, "chats")) {
        moe8_chat_message m[16];
        const cJSON *out = cJSON_GetObjectItemCaseSensitive(g, "output"),
                    *err = cJSON_GetObjectItemCaseSensitive(g, "error"),
                    *kw = cJSON_GetObjectItemCaseSensitive(g, "kwargs");
        const char *tname = cJSON_GetObjectItemCaseSensitive(g, "template")->valuestring,
                   *cname = cJSON_GetObjectItemCaseSensitive(g, "case")->valuestring;
        size_t nm = messages_of(cJSON_GetObjectItemCaseSensitive(g, "messages"), m, 16), len = 0;
        int gen = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(g, "add_generation_prompt"));
        char *kwargs = cJSON_IsObject(kw) ? cJSON_PrintUnformatted(kw) : NULL;
        moe8_chat_template *t = tmpl_named(tname);
        moe8_error e = {0};
        moe8_status st;
        if (!t) continue;
        st = moe8_chat_template_render(t, m, nm, gen, kwargs, g_buf, sizeof g_buf, &len, &e);
        if (out) {
            CHECKF(st == MOE8_OK && len == strlen(out->valuestring) && !strcmp(g_buf, out->valuestring),
                   "%s/%s gen=%d kwargs=%s: status %d (%s)\n got: '%s'\nwant: '%s'", tname, cname, gen,
                   kwargs ? kwargs : "-", st, e.message, st == MOE8_OK ? g_buf : "", out->valuestring);
        } else {
            const char *msg = raised(err->valuestring);
            CHECKF(st == MOE8_ERR_INVALID_ARG && (!msg || strstr(e.message, msg)),
                   "%s/%s gen=%d: jinja2 failed with '%s'; moe8: status %d '%s'", tname, cname, gen,
                   err->valuestring, st, e.message);
            raised_n += msg != NULL;
        }
        cJSON_free(kwargs);
        n++;
    }
    printf("chat goldens: %d renderings (%d raise_exception)\n", n, raised_n);
    CHECK(n >= 150 && raised_n >= 10);
}

static void test_unit_goldens(void) {
    const cJSON *g;
    int n = 0;
    cJSON_ArrayForEach(g, cJSON_GetObjectItemCaseSensitive(g_goldens, "units")) {
        const cJSON *out = cJSON_GetObjectItemCaseSensitive(g, "output"),
                    *err = cJSON_GetObjectItemCaseSensitive(g, "error");
        const char *name = cJSON_GetObjectItemCaseSensitive(g, "name")->valuestring,
                   *src = cJSON_GetObjectItemCaseSensitive(g, "template")->valuestring;
        char *got = NULL;
        moe8_error e = {0};
        moe8_status st = junit(src, cJSON_GetObjectItemCaseSensitive(g, "vars"), NULL, &got, &e);
        if (out) {
            CHECKF(st == MOE8_OK && !strcmp(got, out->valuestring),
                   "unit %s: status %d (%s)\n got: '%s'\nwant: '%s'", name, st, e.message,
                   got ? got : "", out->valuestring);
        } else {
            const char *msg = raised(err->valuestring);
            CHECKF(st != MOE8_OK && e.message[0] && (!msg || strstr(e.message, msg)),
                   "unit %s: jinja2 failed with '%s'; moe8: status %d '%s' output '%s'", name,
                   err->valuestring, st, e.message, got ? got : "");
        }
        free(got);
        n++;
    }
    printf("unit goldens: %d templates\n", n);
    CHECK(n >= 150);
}

/* ---- errors ----------------------------------------------------------------------- */

static void test_errors(void) {
    /* syntax outside the subset: MOE8_ERR_UNSUPPORTED with line and column */
    expect_err("a\n  {% include 'x.jinja' %}", NULL, NULL, MOE8_ERR_UNSUPPORTED, "line 2, column 6",
               "the tag 'include' is not supported");
    expect_err("{% extends 'base' %}", NULL, NULL, MOE8_ERR_UNSUPPORTED, "line 1, column 4", "'extends'");
    expect_err("{% call m() %}x{% endcall %}", NULL, NULL, MOE8_ERR_UNSUPPORTED, "column 4", "'call'");
    expect_err("{% do x %}", NULL, NULL, MOE8_ERR_UNSUPPORTED, "column 4", "'do'");
    expect_err("x\ny {{ a|pprint }}", NULL, NULL, MOE8_ERR_UNSUPPORTED, "line 2, column 8",
               "filter 'pprint' is not supported");
    expect_err("{% if a is prime %}{% endif %}", NULL, NULL, MOE8_ERR_UNSUPPORTED, "column 9",
               "test 'prime' is not supported");
    expect_err("{% for x in y recursive %}{% endfor %}", NULL, NULL, MOE8_ERR_UNSUPPORTED, "column 15",
               "recursive loops");
    expect_err("{{ f(*args) }}", NULL, NULL, MOE8_ERR_UNSUPPORTED, "column 6", "*args");
    expect_err("{% set x | upper %}a{% endset %}", NULL, NULL, MOE8_ERR_UNSUPPORTED, "column 10", "filtered");
    expect_err("{{ '\\N{BULLET}' }}", NULL, NULL, MOE8_ERR_UNSUPPORTED, "column 4", "\\N{");
    expect_err("{% macro a() %}{% macro b() %}{% endmacro %}{% endmacro %}", NULL, NULL,
               MOE8_ERR_UNSUPPORTED, "column 19", "inside a macro");
    /* syntax errors: MOE8_ERR_FORMAT */
    expect_err("ok\n{% if x %}abc", NULL, NULL, MOE8_ERR_FORMAT, "line 2, column 14",
               "the 'if' block of line 2 is not closed with 'endif'");
    expect_err("{% for x in y %}{% endif %}", NULL, NULL, MOE8_ERR_FORMAT, "column 20",
               "unexpected 'endif' inside 'for' (expected 'endfor')");
    expect_err("{% endfor %}", NULL, NULL, MOE8_ERR_FORMAT, "column 4", "outside any block");
    expect_err("{{ x", NULL, NULL, MOE8_ERR_FORMAT, "line 1, column 1", "'{{' is not closed");
    expect_err("ab\n  {% if x", NULL, NULL, MOE8_ERR_FORMAT, "line 2, column 3", "'{%' is not closed");
    expect_err("{{ 1 + }}", NULL, NULL, MOE8_ERR_FORMAT, "column 8", "expected an expression");
    expect_err("{{ 'abc }}", NULL, NULL, MOE8_ERR_FORMAT, "column 4", "unterminated string");
    expect_err("{# abc", NULL, NULL, MOE8_ERR_FORMAT, "column 1", "missing end of comment");
    expect_err("{% raw %}abc", NULL, NULL, MOE8_ERR_FORMAT, "column 1", "missing end of raw");
    expect_err("{{ (1 }}", NULL, NULL, MOE8_ERR_FORMAT, "column 7", "unexpected '}', expected ')'");
    expect_err("{{ 1 ]}}", NULL, NULL, MOE8_ERR_FORMAT, "column 6", "unexpected ']'");
    expect_err("{% break %}", NULL, NULL, MOE8_ERR_FORMAT, "column 4", "outside a for loop");
    expect_err("{% frobnicate %}", NULL, NULL, MOE8_ERR_FORMAT, "column 4", "unknown tag 'frobnicate'");
    expect_err("{{ a b }}", NULL, NULL, MOE8_ERR_FORMAT, "column 6", "expected the end of the expression");
    expect_err("{% set 1 = 2 %}", NULL, NULL, MOE8_ERR_FORMAT, "column 8", "cannot assign");
    expect_err("{{ x is defined is defined }}", NULL, NULL, MOE8_ERR_FORMAT, "column 17", "chained");
    expect_err("{{ 99999999999999999999 }}", NULL, NULL, MOE8_ERR_UNSUPPORTED, "column 4", "64 bits");
    expect_err("{{ x @ y }}", NULL, NULL, MOE8_ERR_FORMAT, "column 6", "unexpected character");
    expect_err("a\xff{{ 1 }}", NULL, NULL, MOE8_ERR_FORMAT, "column 2", "not valid UTF-8");
    /* runtime errors: MOE8_ERR_INVALID_ARG, with where they happened */
    expect_err("line 1\n  {{ nothing.attr }}", NULL, NULL, MOE8_ERR_INVALID_ARG, "line 2, column 6",
               "'nothing' is undefined");
    expect_err("{{ d.x.y }}", "{\"d\": {}}", NULL, MOE8_ERR_INVALID_ARG, "column 6",
               "'dict object' has no attribute 'x'");
    expect_err("{{ l[3] + 1 }}", "{\"l\": [1]}", NULL, MOE8_ERR_INVALID_ARG, "column 5",
               "'list object' has no element 3");
    expect_err("{{ 'a' + 1 }}", NULL, NULL, MOE8_ERR_INVALID_ARG, "column 8",
               "can only concatenate str (not \"int\") to str");
    expect_err("{{ [].append(1) }}", NULL, NULL, MOE8_ERR_INVALID_ARG, "unsafe", NULL);
    expect_err("{{ 'x'.format(1) }}", NULL, NULL, MOE8_ERR_INVALID_ARG, "str.format() is not supported", NULL);
    expect_err("{{ '%s' % 1 }}", NULL, NULL, MOE8_ERR_INVALID_ARG, "printf-style", NULL);
    expect_err("{{ range(1, 2, 0) }}", NULL, NULL, MOE8_ERR_INVALID_ARG, "must not be zero", NULL);
    expect_err("{{ [1, 2][::0] }}", NULL, NULL, MOE8_ERR_INVALID_ARG, "slice step cannot be zero", NULL);
    expect_err("{{ 'ab'|tojson(indent=100) }}", NULL, NULL, MOE8_ERR_INVALID_ARG, "indent", NULL);
    expect_err("{{ x|join(', ', bogus=1) }}", "{\"x\": []}", NULL, MOE8_ERR_INVALID_ARG,
               "unexpected keyword argument 'bogus'", NULL);
    /* raise_exception: the template's words */
    expect_err("a{% if true %}{{ raise_exception('Roles must alternate (' ~ 3 ~ ')') }}{% endif %}", NULL,
               NULL, MOE8_ERR_INVALID_ARG, "chat template: Roles must alternate (3)", NULL);
}

/* ---- limits: no template and no input crashes or hangs ---------------------------------- */

static void test_limits(void) {
    jinja_limits small = moe8_jinja_limits_default();
    struct timespec t0, t1;
    small.max_steps = 2000000;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    expect_err("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", NULL,
               &small, MOE8_ERR_INVALID_ARG, "more than 2000000 steps", "line 1, column");
    expect_err("{% set ns = namespace(n=0) %}{% for i in range(100000) %}{% for j in range(100000) %}"
               "{% set ns.n = ns.n + 1 %}{% endfor %}{% endfor %}", NULL, NULL, MOE8_ERR_INVALID_ARG,
               "more than 20000000 steps", NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("20 M steps refused after %.2f s\n",
           (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9);
    expect_err("{{ range(100001)|length }}", NULL, NULL, MOE8_ERR_INVALID_ARG, "Range too big", NULL);
    expect_err("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", NULL, NULL, MOE8_ERR_INVALID_ARG,
               "nests deeper than 500", NULL);
    expect_err("{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}"
               "{% endfor %}", NULL, NULL, MOE8_ERR_INVALID_ARG, "over the 16777216-byte limit", NULL);
    expect_err("{{ 'x' * 100000000 }}", NULL, NULL, MOE8_ERR_INVALID_ARG, "over the 16777216-byte limit", NULL);
    expect_err("{% for i in range(100000) %}{{ 'x' * 200 }}{% endfor %}", NULL, NULL,
               MOE8_ERR_INVALID_ARG, "rendered text is over the 16777216-byte limit", NULL);
    small = moe8_jinja_limits_default();
    small.max_memory = (size_t)1 << 20;
    expect_err("{% set ns = namespace(l=[]) %}{% for i in range(20000) %}{% set ns.l = ns.l + [i] %}"
               "{% endfor %}", NULL, &small, MOE8_ERR_INVALID_ARG, "more than 1 MiB of memory", NULL);
    /* a value that holds itself cannot print forever */
    expect_err("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}", NULL, NULL, MOE8_ERR_INVALID_ARG,
               "nests more than 100 deep", NULL);
    /* a source over 1 MiB is refused before anything is parsed */
    {
        size_t big = ((size_t)1 << 20) + 1;
        char *src = malloc(big + 1);
        jinja_template *t = NULL;
        moe8_error e;
        memset(src, 'x', big);
        src[big] = '\0';
        CHECK(moe8_jinja_parse(src, big, "chat template", &t, &e) == MOE8_ERR_UNSUPPORTED && !t &&
              strstr(e.message, "more than the 1048576 supported"));
        free(src);
    }
    /* parser nesting */
    {
        char src[1024];
        size_t o = 0;
        o += (size_t)sprintf(src, "{{ ");
        for (int i = 0; i < 300; i++) src[o++] = '(';
        src[o++] = '1';
        for (int i = 0; i < 300; i++) src[o++] = ')';
        strcpy(src + o, " }}");
        expect_err(src, NULL, NULL, MOE8_ERR_UNSUPPORTED, "deeper than 200", NULL);
    }
    /* a big conversation still renders (Qwen3, 2000 turns) */
    {
        static moe8_chat_message m[2000];
        char *out = malloc((size_t)1 << 22);
        size_t n = 0;
        moe8_error e;
        for (int i = 0; i < 2000; i++) m[i].role = i % 2 ? "assistant" : "user", m[i].content = "turn";
        CHECKF(moe8_chat_template_render(tmpl_named("qwen3"), m, 2000, 1, NULL, out, (size_t)1 << 22, &n,
                                         &e) == MOE8_OK && n > 2000 * 20, "%s", e.message);
        free(out);
    }
}

/* ---- json.dumps' escapes the goldens do not reach (Python's output, by hand) --------------- */

static void test_json_escapes(void) {
    expect_out("{{ '\\b\\f\\x00\\x1f\\x7f\\x80\\uffff'|tojson }}", NULL,
               "\"\\b\\f\\u0000\\u001f\x7f\xc2\x80\xef\xbf\xbf\"");
    expect_out("{{ '\\b\\f\\x00\\x1f\\x7f\\x80\\uffff\\U0010ffff'|tojson(ensure_ascii=true) }}", NULL,
               "\"\\b\\f\\u0000\\u001f\\u007f\\u0080\\uffff\\udbff\\udfff\"");
    expect_out("{{ {'\\x7f\\U0001f600': '\"'}|tojson(ensure_ascii=true) }}", NULL,
               "{\"\\u007f\\ud83d\\ude00\": \"\\\"\"}");
    /* escaping may take a string past the output limit: refused, not cut */
    expect_err("{{ ('\xc3\xa9' * 5000000)|tojson(ensure_ascii=true) }}", NULL, NULL, MOE8_ERR_INVALID_ARG,
               "over the 16777216-byte limit", NULL);
}

/* ---- what differs from jinja2, on purpose (docs/SEMANTICS.md §9) ------------------------ */

static void test_deviations(void) {
    expect_err("{{ 9223372036854775807 + 1 }}", NULL, NULL, MOE8_ERR_INVALID_ARG, "integer overflow", NULL);
    expect_out("{{ x|tojson }} {{ x }}", "{\"x\": 2.0}", "2 2");     /* jinja2 (json.loads): 2.0 */
    expect_out("{{ range(3) }}", NULL, "[0, 1, 2]");                   /* jinja2: range(0, 3) */
    expect_out("{{ [1, 2]|reverse }}", NULL, "[2, 1]");                /* jinja2: an iterator */
    expect_out("{{ 'ab'.upper }}", NULL, "<built-in method upper of str object>"); /* no address */
    /* a JSON object with a key twice: lookups see the last value (as json.loads) */
    expect_out("{{ d.a }}", "{\"d\": {\"a\": 1, \"a\": 2}}", "2");
}

/* ---- the ChatML formatter is Qwen3's template for conversations without assistant turns */

static void test_chatml(void) {
    static const moe8_chat_message convs[][3] = {
        {{"user", "Hello!"}, {NULL, NULL}, {NULL, NULL}},
        {{"system", "Be brief."}, {"user", "Hi\nthere \xf0\x9f\x9a\x80"}, {NULL, NULL}},
        {{"user", "a"}, {"user", "<think>b</think>"}, {NULL, NULL}},
        {{"system", "s"}, {NULL, NULL}, {NULL, NULL}},
        {{"user", "u"}, {"system", "late system"}, {"user", "  padded \n\n"}},
    };
    const moe8_chat_template *t = tmpl_named("qwen3");
    char a[4096], b[4096];
    for (size_t k = 0; k < sizeof convs / sizeof *convs; k++) {
        size_t n = 0, na, nb;
        while (n < 3 && convs[k][n].role) n++;
        for (int gen = 0; gen < 2; gen++)
            for (int think = 0; think < 2; think++) {
                unsigned fl = (gen ? MOE8_CHAT_ADD_ASSISTANT : 0) | (think ? 0 : MOE8_CHAT_NO_THINKING);
                moe8_error e;
                CHECK(moe8_chat_format(convs[k], n, fl, a, sizeof a, &na, NULL) == MOE8_OK);
                CHECKF(moe8_chat_template_render(t, convs[k], n, gen, think ? NULL : "{\"enable_thinking\": false}",
                                                 b, sizeof b, &nb, &e) == MOE8_OK && na == nb && !strcmp(a, b),
                       "conversation %zu gen %d think %d:\nChatML:   '%s'\ntemplate: '%s'", k, gen, think, a, b);
            }
    }
    /* with an assistant turn they differ: the template is right (it writes the
     * last turn's think block and drops earlier turns' ones) */
    {
        moe8_chat_message m[2] = {{"user", "Hi"}, {"assistant", "Hello"}};
        size_t n;
        CHECK(moe8_chat_template_render(t, m, 2, 0, NULL, b, sizeof b, &n, NULL) == MOE8_OK &&
              !strcmp(b, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
                         "Hello<|im_end|>\n"));
    }
}

/* ---- the API's edges ------------------------------------------------------------------- */

static void test_api(void) {
    moe8_chat_template *t = NULL;
    moe8_chat_message m = {"user", "hi"};
    size_t n = 0;
    moe8_error e = {0};
    char small[8];
    const char *src = "{{ bos_token }}|{% for x in messages %}{{ x.role }}:{{ x.content }}{% endfor %}|"
                      "{{ add_generation_prompt }}|{{ tools }}|{{ eos_token is defined }}|{{ extra }}";
    CHECK(moe8_chat_template_parse(src, strlen(src), "<s>", NULL, &t, &e) == MOE8_OK);
    if (!t) return;
    CHECK(moe8_chat_template_render(t, &m, 1, 1, NULL, g_buf, sizeof g_buf, &n, &e) == MOE8_OK &&
          !strcmp(g_buf, "<s>|user:hi|True|None|False|") && n == strlen(g_buf));
    /* measuring, and a cap too small */
    CHECK(moe8_chat_template_render(t, &m, 1, 0, NULL, NULL, 0, &n, &e) == MOE8_ERR_INVALID_ARG && n == 29);
    CHECK(moe8_chat_template_render(t, &m, 1, 0, NULL, small, sizeof small, &n, &e) == MOE8_ERR_INVALID_ARG &&
          n == 29 && strstr(e.message, "30 needed"));
    /* kwargs: variables, an override, and what they may not set */
    CHECK(moe8_chat_template_render(t, &m, 1, 0, "{\"extra\": [1, \"x\"], \"bos_token\": \"<B>\", \"tools\": []}",
                                    g_buf, sizeof g_buf, &n, &e) == MOE8_OK &&
          !strcmp(g_buf, "<B>|user:hi|False|[]|False|[1, 'x']"));
    CHECK(moe8_chat_template_render(t, &m, 1, 0, "{\"messages\": []}", g_buf, sizeof g_buf, &n, &e) ==
              MOE8_ERR_INVALID_ARG && strstr(e.message, "cannot set 'messages'"));
    CHECK(moe8_chat_template_render(t, &m, 1, 0, "[1]", g_buf, sizeof g_buf, &n, &e) ==
              MOE8_ERR_INVALID_ARG && strstr(e.message, "must be a JSON object"));
    CHECK(moe8_chat_template_render(t, &m, 1, 0, "{\"a\": ", g_buf, sizeof g_buf, &n, &e) ==
              MOE8_ERR_INVALID_ARG && strstr(e.message, "chat template kwargs"));
    /* messages: a NULL role is refused, a NULL content is None, bad UTF-8 is refused */
    {
        moe8_chat_message bad[2] = {{"user", "ok"}, {NULL, "x"}}, none = {"assistant", NULL},
                          utf = {"user", "a\xc3("};
        CHECK(moe8_chat_template_render(t, bad, 2, 0, NULL, g_buf, sizeof g_buf, &n, &e) ==
                  MOE8_ERR_INVALID_ARG && strstr(e.message, "message 1 has no role"));
        CHECK(moe8_chat_template_render(t, &none, 1, 0, NULL, g_buf, sizeof g_buf, &n, &e) == MOE8_OK &&
              strstr(g_buf, "assistant:None"));
        CHECK(moe8_chat_template_render(t, &utf, 1, 0, NULL, g_buf, sizeof g_buf, &n, &e) ==
                  MOE8_ERR_INVALID_ARG && strstr(e.message, "not valid UTF-8 (byte 1)"));
    }
    CHECK(moe8_chat_template_render(NULL, &m, 1, 0, NULL, g_buf, sizeof g_buf, &n, &e) == MOE8_ERR_INVALID_ARG);
    moe8_chat_template_free(t);
    moe8_chat_template_free(NULL);
    /* concurrent renders of one template */
    {
        const moe8_chat_template *q = tmpl_named("qwen3");
        moe8_chat_message conv[3] = {{"system", "s"}, {"user", "u \xe4\xbd\xa0"}, {"assistant", "<think>r</think>a"}};
        char want[4096];
        int bad = 0;
        CHECK(moe8_chat_template_render(q, conv, 3, 1, NULL, want, sizeof want, &n, NULL) == MOE8_OK);
#pragma omp parallel for num_threads(4) reduction(+ : bad)
        for (int i = 0; i < 200; i++) {
            char got[4096];
            size_t k;
            if (moe8_chat_template_render(q, conv, 3, 1, NULL, got, sizeof got, &k, NULL) != MOE8_OK ||
                strcmp(got, want))
                bad++;
        }
        CHECK(bad == 0);
    }
    /* the built-in Mixtral template is the committed one, byte for byte */
    {
        size_t len;
        char *file = slurp(DATA "/mixtral_instruct.jinja", &len);
        const char *b = moe8_chat_template_builtin("mixtral-instruct");
        CHECK(b && strlen(b) == len && !memcmp(b, file, len));
        CHECK(moe8_chat_template_builtin("nope") == NULL && moe8_chat_template_builtin(NULL) == NULL);
        free(file);
    }
}

/* ---- the tokenizer's own template ---------------------------------------------------- */

/* A 256-byte-token tokenizer.json (GPT-2's bytes_to_unicode keys) plus <s>, </s>. */
static void write_tokenizer(const char *dir) {
    static char json[16384];
    char path[4200];
    int map[256], k = 0;
    size_t o = 0;
    for (int i = 0; i < 256; i++)
        map[i] = ((i >= 33 && i <= 126) || (i >= 161 && i <= 172) || i >= 174) ? i : 256 + k++;
    o += (size_t)sprintf(json, "{\"added_tokens\":[{\"id\":256,\"content\":\"<s>\",\"special\":true},"
                               "{\"id\":257,\"content\":\"</s>\",\"special\":true}],"
                               "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,"
                               "\"use_regex\":true},\"decoder\":{\"type\":\"ByteLevel\"},"
                               "\"model\":{\"type\":\"BPE\",\"vocab\":{");
    for (int b = 0; b < 256; b++) {
        int cp = map[b];
        json[o++] = '"';
        if (cp == '"' || cp == '\\') o += (size_t)sprintf(json + o, "\\%c", cp);
        else if (cp < 0x80) json[o++] = (char)cp;
        else o += (size_t)sprintf(json + o, "%c%c", 0xc0 | (cp >> 6), 0x80 | (cp & 0x3f));
        o += (size_t)sprintf(json + o, "\":%d%s", b, b < 255 ? "," : "");
    }
    o += (size_t)sprintf(json + o, "},\"merges\":[]}}");
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    test_write_file(path, json, o);
}

static void write_text(const char *dir, const char *name, const char *text) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (text) test_write_file(path, text, strlen(text));
    else unlink(path);
}

/* Load dir; apply one user message "hi": want (NULL: the apply fails with
 * code and needle). */
static void expect_apply(const char *dir, const char *want, moe8_status code, const char *needle) {
    moe8_tokenizer *tok = NULL;
    moe8_chat_message m = {"user", "hi"};
    moe8_error e = {0};
    size_t n;
    moe8_status st = moe8_tokenizer_load(dir, &tok, &e);
    CHECKF(st == MOE8_OK, "load: %s", e.message);
    if (!tok) return;
    st = moe8_chat_apply(tok, &m, 1, 1, NULL, g_buf, sizeof g_buf, &n, &e);
    if (want) CHECKF(st == MOE8_OK && !strcmp(g_buf, want), "status %d '%s', got '%s' want '%s'", st,
                     e.message, st == MOE8_OK ? g_buf : "", want);
    else CHECKF(st == code && strstr(e.message, needle), "status %d (want %d) '%s' (want '%s')", st, code,
                e.message, needle);
    moe8_tokenizer_free(tok);
}

static void test_tokenizer_template(void) {
    const char *dir = test_tmpdir("jinja_tok");
    moe8_tokenizer *tok = NULL;
    moe8_error e = {0};
    write_tokenizer(dir);
    /* no tokenizer_config.json, then one without chat_template: no template */
    expect_apply(dir, NULL, MOE8_ERR_NOT_FOUND, "no chat template");
    write_text(dir, "tokenizer_config.json", "{\"bos_token\": \"<s>\"}");
    expect_apply(dir, NULL, MOE8_ERR_NOT_FOUND, "tokenizer_config.json' has no chat_template");
    /* a string, with the special tokens it sees */
    write_text(dir, "tokenizer_config.json",
               "{\"bos_token\": \"<s>\", \"eos_token\": {\"content\": \"</s>\", \"lstrip\": false},"
               " \"pad_token\": null, \"unk_token\": \"<s>\", \"additional_special_tokens\": [\"<a>\", {\"content\": \"<b>\"}],"
               " \"chat_template\": \"{{ bos_token }}{% for m in messages %}[{{ m.content }}]{% endfor %}{{ eos_token }}"
               "{{ pad_token is defined }}{{ unk_token }}{{ additional_special_tokens|join(',') }}\"}");
    expect_apply(dir, "<s>[hi]</s>False<s><a>,<b>", MOE8_OK, NULL);
    /* Hugging Face's list form: the one named default */
    write_text(dir, "tokenizer_config.json",
               "{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"T\"}, {\"name\": \"default\", "
               "\"template\": \"D{{ messages[0].content }}\"}]}");
    expect_apply(dir, "Dhi", MOE8_OK, NULL);
    write_text(dir, "tokenizer_config.json", "{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"T\"}]}");
    expect_apply(dir, NULL, MOE8_ERR_UNSUPPORTED, "none named 'default'");
    /* chat_template.jinja beside it wins */
    write_text(dir, "tokenizer_config.json", "{\"eos_token\": \"</s>\", \"chat_template\": \"config\"}");
    write_text(dir, "chat_template.jinja", "file {{ messages[0].content }}{{ eos_token }}\n");
    expect_apply(dir, "file hi</s>", MOE8_OK, NULL);
    write_text(dir, "chat_template.jinja", "{% include 'x' %}");
    expect_apply(dir, NULL, MOE8_ERR_UNSUPPORTED, "chat_template.jinja': chat template line 1, column 4");
    write_text(dir, "chat_template.jinja", NULL);
    /* a template moe8 cannot parse: the tokenizer still loads, chat fails naming the file */
    write_text(dir, "tokenizer_config.json", "{\"chat_template\": \"ok\\n{% macro m() %}{% call x() %}{% endcall %}{% endmacro %}\"}");
    expect_apply(dir, NULL, MOE8_ERR_UNSUPPORTED, "tokenizer_config.json': chat template line 2, column 19: the tag 'call'");
    write_text(dir, "tokenizer_config.json", "{\"chat_template\": \"{% if %}\"}");
    expect_apply(dir, NULL, MOE8_ERR_FORMAT, "line 1, column 7: expected an expression");
    /* raise_exception reaches the caller */
    write_text(dir, "tokenizer_config.json", "{\"chat_template\": \"{{ raise_exception('no ' ~ messages[0].role) }}\"}");
    expect_apply(dir, NULL, MOE8_ERR_INVALID_ARG, "chat template: no user");
    /* the wrong JSON types fail the load */
    write_text(dir, "tokenizer_config.json", "{\"chat_template\": 5}");
    CHECK(moe8_tokenizer_load(dir, &tok, &e) == MOE8_ERR_FORMAT && !tok &&
          strstr(e.message, "chat_template must be a string"));
    write_text(dir, "tokenizer_config.json", "{\"chat_template\": [{\"name\": 1}]}");
    CHECK(moe8_tokenizer_load(dir, &tok, &e) == MOE8_ERR_FORMAT && !tok && strstr(e.message, "{\"name\": string"));
    /* the real Qwen3 tokenizer: its template, then its ids */
    CHECK(moe8_tokenizer_load(MOE8_TOKENIZER_DIR, &tok, &e) == MOE8_OK);
    if (tok) {
        const moe8_chat_template *t;
        moe8_chat_message m[2] = {{"system", "You are a helpful assistant."}, {"user", "Hello!"}};
        size_t n, n_ids;
        int32_t ids[64];
        static const char want[] = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
                                   "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";
        CHECK(moe8_tokenizer_chat_template(tok, &t, &e) == MOE8_OK && t);
        CHECKF(moe8_chat_apply(tok, m, 2, 1, "{\"enable_thinking\": false}", g_buf, sizeof g_buf, &n, &e) ==
                   MOE8_OK && !strcmp(g_buf, want), "%s", e.message);
        CHECK(moe8_tokenize(tok, g_buf, n, ids, 64, &n_ids, NULL) == MOE8_OK && ids[0] == 151644 &&
              ids[n_ids - 1] == 271);
        moe8_tokenizer_free(tok);
    }
}

int main(void) {
    size_t len;
    char *text = slurp(DATA "/goldens.json", &len);
    if (!(g_goldens = cJSON_ParseWithLength(text, len))) {
        fprintf(stderr, "goldens.json does not parse\n");
        return 1;
    }
    free(text);
    printf("%s\n", cJSON_GetObjectItemCaseSensitive(g_goldens, "generator")->valuestring);
    load_templates();
    test_chat_goldens();
    test_unit_goldens();
    test_errors();
    test_limits();
    test_json_escapes();
    test_deviations();
    test_chatml();
    test_api();
    test_tokenizer_template();
    for (int i = 0; i < g_n_tmpl; i++) moe8_chat_template_free(g_tmpl[i]);
    cJSON_Delete(g_goldens);
    return test_summary();
}
