/*
 * fuzz_jinja.c — libFuzzer target over the chat template interpreter: parse
 * the input as a template, then render it. Input: the template text,
 * optionally followed by a NUL byte and a JSON object of variables (the
 * kwargs of moe8_chat_template_render).
 *
 * The template renders through the interpreter with small limits (so a run
 * stays fast whatever it loops over) and the variables the public API
 * gives it (a fixed conversation, bos/eos, the kwargs); whatever happens must
 * be a clean result: a failure with a message, or valid UTF-8 text of the
 * length said, within the output limit. A render that succeeds is redone
 * through moe8_chat_template_render, which must give the same text.
 * Seeds: tests/fuzz/corpus/fuzz_jinja (the four chat templates and a few
 * small ones).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/json_util.h"
#include "moe8.h"
#include "jinja/jinja.h"

static char g_out[1 << 17];

static void check_text(const char *s, size_t n, size_t limit) {
    if (n > limit || moe8_utf8_valid(s, n) != (size_t)-1) abort();
}

static const moe8_chat_message MSGS[3] = {{"system", "Be brief."}, {"user", "Hi \xe4\xbd\xa0 {{ x }}"},
                                          {"assistant", "<think>\nr\n</think>\n\nOk."}};

/* What moe8_chat_template_render gives a template, built here independently:
 * bos/eos, the kwargs over them, then messages, tools, documents and
 * add_generation_prompt. */
static cJSON *api_vars(const cJSON *kwargs) {
    cJSON *v = cJSON_CreateObject(), *list, *k;
    cJSON_AddStringToObject(v, "bos_token", "<s>");
    cJSON_AddStringToObject(v, "eos_token", "</s>");
    cJSON_ArrayForEach(k, kwargs) {
        cJSON_DeleteItemFromObjectCaseSensitive(v, k->string);
        cJSON_AddItemToObject(v, k->string, cJSON_Duplicate(k, 1));
    }
    list = cJSON_AddArrayToObject(v, "messages");
    for (int i = 0; i < 3; i++) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", MSGS[i].role);
        cJSON_AddStringToObject(m, "content", MSGS[i].content);
        cJSON_AddItemToArray(list, m);
    }
    if (!cJSON_GetObjectItemCaseSensitive(v, "tools")) cJSON_AddNullToObject(v, "tools");
    if (!cJSON_GetObjectItemCaseSensitive(v, "documents")) cJSON_AddNullToObject(v, "documents");
    cJSON_AddBoolToObject(v, "add_generation_prompt", 1);
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *src = (const char *)data;
    const uint8_t *nul = memchr(data, 0, size);
    size_t len = nul ? (size_t)(nul - data) : size, n = 0;
    char *kw_text = NULL, *out = NULL;
    cJSON *kw = NULL, *vars;
    jinja_template *t = NULL;
    jinja_limits lim = moe8_jinja_limits_default();
    moe8_chat_template *ct = NULL;
    moe8_error e = {0};
    if (nul) { /* the kwargs, NUL-terminated for cJSON */
        if (!(kw_text = malloc(size - len))) return 0;
        memcpy(kw_text, nul + 1, size - len - 1);
        kw_text[size - len - 1] = '\0';
        /* as strict as moe8_chat_template_render is with kwargs, or none */
        if (moe8_json_parse(kw_text, strlen(kw_text), "kwargs", &kw, NULL) != MOE8_OK) kw = NULL;
        if (!cJSON_IsObject(kw) || cJSON_GetObjectItemCaseSensitive(kw, "messages") ||
            cJSON_GetObjectItemCaseSensitive(kw, "add_generation_prompt")) {
            cJSON_Delete(kw);
            kw = NULL;
        }
    }
    lim.max_output = 1 << 16;
    lim.max_memory = (size_t)64 << 20;
    lim.max_steps = 200000;
    if (moe8_jinja_parse(src, len, "chat template", &t, &e) != MOE8_OK) {
        if (t || !e.message[0] || (e.code != MOE8_ERR_FORMAT && e.code != MOE8_ERR_UNSUPPORTED)) abort();
        goto done;
    }
    vars = api_vars(kw);
    e.message[0] = '\0';
    if (moe8_jinja_render(t, vars, &lim, &out, &n, &e) == MOE8_OK) {
        size_t n2 = 0;
        check_text(out, n, lim.max_output);
        if (moe8_chat_template_parse(src, len, "<s>", "</s>", &ct, &e) != MOE8_OK ||
            moe8_chat_template_render(ct, MSGS, 3, 1, kw ? kw_text : NULL, g_out, sizeof g_out, &n2,
                                      &e) != MOE8_OK ||
            (n2 != n || memcmp(g_out, out, n) != 0))
            if (!strstr(src, "strftime_now")) abort(); /* the clock may tick between the two */
        moe8_chat_template_free(ct);
    } else if (out || !e.message[0]) {
        abort();
    }
    free(out);
    cJSON_Delete(vars);
    moe8_jinja_free(t);
done:
    cJSON_Delete(kw);
    free(kw_text);
    return 0;
}
