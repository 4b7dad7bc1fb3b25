/*
 * test_chat_families.c — whole OpenAI conversations through the chat
 * templates of the GLM-4.5 / 4.6 / 4.7, MiniMax-M2 and Qwen3.5 (Qwen3.5/3.6
 * MoE) families (as llama.cpp keeps copies of them:
 * tests/data/jinja/README.md), against Python's
 * jinja2. tests/data/jinja/family_goldens.json is made once, by hand, by
 * tests/data/jinja/make_family_goldens.py: each conversation as vLLM hands it
 * to apply_chat_template (tools, assistant tool_calls with arguments of
 * every JSON type, tool results, reasoning_content before and after the last
 * user turn, a think block inside content) and what jinja2 renders from it,
 * with and without the generation prompt and enable_thinking false. Checked
 * here: moe8_chat_template_render_json over the same messages, byte for
 * byte; where jinja2 fails, moe8 fails too.
 * Also the server's split of their output into reasoning_content and
 * content (src/server/api_chat.c): GLM-4.5 / 4.6 (the model opens <think>),
 * GLM-4.7 and Qwen3.5 (the prompt opens it; Qwen3.5's closes it with
 * thinking off), MiniMax-M2 split (minimax_m2) and kept
 * whole (minimax_m2_append_think), each output fed split at every byte,
 * against the expected text written here.
 */
#include <cjson/cJSON.h>

#include "moe8.h"
#include "server/api.h"
#include "server/server.h"
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

/* j printed compactly (malloc'd), or NULL for an absent or null j. */
static char *print(const cJSON *j) {
    return j && !cJSON_IsNull(j) ? cJSON_PrintUnformatted(j) : NULL;
}

static moe8_chat_template *load(const cJSON *t) {
    const cJSON *bos = cJSON_GetObjectItemCaseSensitive(t, "bos_token"),
                *eos = cJSON_GetObjectItemCaseSensitive(t, "eos_token"),
                *file = cJSON_GetObjectItemCaseSensitive(t, "file");
    char path[4096], *src;
    size_t len;
    moe8_error e;
    moe8_chat_template *tmpl = NULL;
    moe8_status st;
    snprintf(path, sizeof path, "%s/%s", DATA, file->valuestring);
    src = slurp(path, &len);
    st = moe8_chat_template_parse(src, len, cJSON_IsString(bos) ? bos->valuestring : NULL,
                                  cJSON_IsString(eos) ? eos->valuestring : NULL, &tmpl, &e);
    CHECKF(st == MOE8_OK, "template %s: %s", t->string, e.message);
    free(src);
    return st == MOE8_OK ? tmpl : NULL;
}

static void check_chat(const cJSON *g, const cJSON *templates, const cJSON *cases, int *n, int *n_err) {
    const cJSON *out = cJSON_GetObjectItemCaseSensitive(g, "output"),
                *err = cJSON_GetObjectItemCaseSensitive(g, "error");
    const char *tname = cJSON_GetObjectItemCaseSensitive(g, "template")->valuestring,
               *cname = cJSON_GetObjectItemCaseSensitive(g, "case")->valuestring;
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(cases, cname),
                *t = cJSON_GetObjectItemCaseSensitive(templates, tname);
    char *msgs = print(cJSON_GetObjectItemCaseSensitive(c, "messages")),
         *tools = print(cJSON_GetObjectItemCaseSensitive(c, "tools")),
         *docs = print(cJSON_GetObjectItemCaseSensitive(c, "documents")),
         *kwargs = print(cJSON_GetObjectItemCaseSensitive(g, "kwargs")), what[200];
    const int gen = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(g, "add_generation_prompt"));
    moe8_chat_template *tmpl = t ? load(t) : NULL;
    moe8_error e = {0};
    size_t len = 0;
    moe8_status st;
    snprintf(what, sizeof what, "%s/%s gen=%d kwargs=%s", tname, cname, gen, kwargs ? kwargs : "-");
    CHECKF(tmpl && msgs, "%s: no template or case", what);
    if (tmpl && msgs) {
        st = moe8_chat_template_render_json(tmpl, msgs, tools, docs, gen, kwargs, g_buf, sizeof g_buf, &len, &e);
        if (out) {
            CHECKF(st == MOE8_OK && len == strlen(out->valuestring) && !strcmp(g_buf, out->valuestring),
                   "%s: status %d (%s)\n got: '%s'\nwant: '%s'", what, st, e.message,
                   st == MOE8_OK ? g_buf : "", out->valuestring);
        } else {
            CHECKF(st == MOE8_ERR_INVALID_ARG, "%s: jinja2 failed with '%s'; moe8: status %d", what,
                   err->valuestring, st);
            (*n_err)++;
        }
        (*n)++;
    }
    moe8_chat_template_free(tmpl);
    cJSON_free(msgs);
    cJSON_free(tools);
    cJSON_free(docs);
    cJSON_free(kwargs);
}

/* ---- the reasoning split ---------------------------------------------------------------- */

typedef struct {
    const char *name;
    int append, open, thinking; /* --reasoning-parser minimax_m2_append_think; the prompt opened <think>; on */
    const char *out, *content, *reasoning;
} split_case;

static const split_case SPLITS[] = {
    {"glm45", 0, 0, 1, "<think>Two cities.</think>\nChecking.", "\nChecking.", "Two cities."},
    {"glm45_empty_think", 0, 0, 0, "<think></think>\nHi", "\nHi", ""},
    {"glm45_thinking_off", 0, 0, 0, "Hi <think>x</think>", "Hi <think>x</think>", ""},
    {"glm47_open", 0, 1, 1, "Look it up.</think>Sunny.<tool_call>f</tool_call>", "Sunny.<tool_call>f</tool_call>",
     "Look it up."},
    {"glm45_unclosed", 0, 0, 1, "<think>still going", "", "still going"},
    {"minimax_split", 0, 1, 1, "Two calls.\n</think>\n\nDone.", "\n\nDone.", "Two calls.\n"},
    {"minimax_append", 1, 1, 1, "Two calls.\n</think>\n\n<minimax:tool_call>",
     "<think>Two calls.\n</think>\n\n<minimax:tool_call>", ""},
    {"minimax_append_thinking_off", 1, 0, 0, "Hello <think>", "Hello <think>", ""},
    {"qwen35_open", 0, 1, 1, "The user greets.\n</think>\n\nHello!", "\n\nHello!", "The user greets.\n"},
    {"qwen35_call", 0, 1, 1, "Need the weather.\n</think>\n\n<tool_call>\n<function=get_weather>\n</function>\n</tool_call>",
     "\n\n<tool_call>\n<function=get_weather>\n</function>\n</tool_call>", "Need the weather.\n"},
    {"qwen35_thinking_off", 0, 0, 0, "Hello! <think>x</think>", "Hello! <think>x</think>", ""},
};

static void run_split(const split_case *c, size_t cut, moe8_buf *content, moe8_buf *reason) {
    static srv s;
    job *j = calloc(1, sizeof *j);
    const size_t n = strlen(c->out);
    s.think_append = c->append;
    j->think = c->open ? 3 : 0;
    j->thinking = c->thinking;
    moe8_oa_chat_split(&s, j, c->out, cut, content, reason, 0);
    moe8_oa_chat_split(&s, j, c->out + cut, n - cut, content, reason, 1);
    moe8_buf_free(&j->hold);
    free(j);
}

static void test_split(void) {
    for (size_t i = 0; i < sizeof SPLITS / sizeof SPLITS[0]; i++) {
        const split_case *c = &SPLITS[i];
        for (size_t cut = 0; cut <= strlen(c->out); cut++) {
            moe8_buf content = {0}, reason = {0};
            run_split(c, cut, &content, &reason);
            CHECKF(!strcmp(content.p ? content.p : "", c->content) && !strcmp(reason.p ? reason.p : "", c->reasoning),
                   "%s split at %zu: content '%s' reasoning '%s'", c->name, cut, content.p ? content.p : "",
                   reason.p ? reason.p : "");
            moe8_buf_free(&content);
            moe8_buf_free(&reason);
        }
    }
    CHECK(moe8_srv_reasoning_append("minimax_m2_append_think") == 1 && moe8_srv_reasoning_append("glm45") == 0 &&
          moe8_srv_reasoning_append("minimax_m2") == 0 && moe8_srv_reasoning_append("glm47") == -1);
}

int main(void) {
    size_t len;
    char *text = slurp(DATA "/family_goldens.json", &len);
    cJSON *goldens = cJSON_ParseWithLength(text, len);
    const cJSON *g, *templates = cJSON_GetObjectItemCaseSensitive(goldens, "templates"),
                    *cases = cJSON_GetObjectItemCaseSensitive(goldens, "cases");
    int n = 0, n_err = 0;
    CHECK(goldens != NULL);
    cJSON_ArrayForEach(g, cJSON_GetObjectItemCaseSensitive(goldens, "chats")) check_chat(g, templates, cases, &n, &n_err);
    printf("family goldens: %d renderings (%d failing as in jinja2)\n", n, n_err);
    CHECK(n >= 250 && n_err >= 6);
    test_split();
    cJSON_Delete(goldens);
    free(text);
    return test_summary();
}
