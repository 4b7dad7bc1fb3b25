/*
 * tools.c — tool calling in a chat request: `tools`, `tool_choice` (none,
 * auto, required, or {"type": "function", "function": {"name"}}) and
 * `parallel_tool_calls`, then the model's output parsed into OpenAI tool
 * calls by the format of its family (toolcall.c; the server's
 * --tool-call-parser, else the one its chat template teaches).
 *
 *   none       the tools reach the template (vLLM's default); output is text
 *   auto       output parsed: calls become tool_calls, the rest content
 *   required   constrained decoding (grammar.c) to one call, or with
 *              parallel_tool_calls (default true) one or more, of any tool,
 *              whose arguments validate against the tool's parameters
 *   a name     the same, to that tool only
 *
 * A stream sends each call as OpenAI does: its index, id, type and name
 * first, then its arguments in pieces; finish_reason "tool_calls" when the
 * output ended by itself with at least one call. A call that breaks off
 * after it was streamed stays sent; in a whole answer it is dropped (its
 * text comes as content). parallel_tool_calls false: the grammar of required
 * and named allows one call; in any mode the request ends once its first call
 * is complete (finish_reason "tool_calls"), and nothing after it is shown.
 * With thinking on, the grammar starts after the think block (openai.c).
 * Harmony (gpt-oss): the grammar names the special tokens of the call's
 * header (toolcall_gbnf.c) and allows an analysis message before it (the
 * reasoning, as vLLM's gpt-oss structural tag does); one call per turn,
 * since <|call|> ends it.
 * The formats whose arguments are text (glm45, glm47, minimax_m2, qwen3_coder) get one
 * rule per parameter instead of one for the arguments object: JSON by the
 * parameter's schema, or any text for a string parameter (as the parser
 * types it: toolcall_value.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "server/server.h"
#include "server/toolcall.h"
#include "server/toolcall_xml.h"

/* GBNF text with every rule name given `prefix` (so several tools'
 * grammars can live in one): names outside strings, classes, repetition
 * braces and comments. */
static void prefix_rules(const char *g, const char *prefix, moe8_buf *out) {
    size_t i = 0, n = strlen(g);
    while (i < n) {
        const char c = g[i];
        if (c == '"' || c == '[') { /* a literal or a class, escapes included */
            const char close = c == '"' ? '"' : ']';
            size_t k = i + 1;
            while (k < n && g[k] != close) k += g[k] == '\\' && k + 1 < n ? 2 : 1;
            moe8_buf_add(out, g + i, (k < n ? k + 1 : n) - i);
            i = k < n ? k + 1 : n;
        } else if (c == '#' || c == '{') { /* a comment to the line's end; {m,n} */
            const char close = c == '#' ? '\n' : '}';
            size_t k = i;
            while (k < n && g[k] != close) k++;
            moe8_buf_add(out, g + i, (k < n ? k + 1 : n) - i);
            i = k < n ? k + 1 : n;
        } else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                   c == '_') {
            size_t k = i;
            while (k < n && ((g[k] >= 'a' && g[k] <= 'z') || (g[k] >= 'A' && g[k] <= 'Z') ||
                             (g[k] >= '0' && g[k] <= '9') || g[k] == '-' || g[k] == '_'))
                k++;
            moe8_buf_str(out, prefix);
            moe8_buf_add(out, g + i, k - i);
            i = k;
        } else {
            moe8_buf_add(out, g + i, 1);
            i++;
        }
    }
}

static const cJSON *fn_of(const cJSON *tool) {
    return cJSON_GetObjectItemCaseSensitive(tool, "function");
}

static const char *name_of(const cJSON *tool) {
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(fn_of(tool), "name");
    return cJSON_IsString(n) ? n->valuestring : NULL;
}

/* Schema (NULL: any object) -> GBNF with every rule named prefix..., into
 * all; a 400 naming `param` when it cannot be converted. */
static int schema_rules(const cJSON *schema, const char *prefix, const char *param, moe8_buf *all, moe8_buf *err) {
    char *text = schema && !cJSON_IsNull(schema) ? cJSON_PrintUnformatted(schema) : strdup("{\"type\":\"object\"}"),
         *gbnf = NULL;
    moe8_error e;
    if (!text || moe8_json_schema_to_gbnf(text, strlen(text), &gbnf, &e) != MOE8_OK) {
        free(text);
        return moe8_oa_bad(err, param, "'%s' cannot constrain the call: %s", param, text ? e.message : "out of memory");
    }
    free(text);
    prefix_rules(gbnf, prefix, all);
    moe8_buf_str(all, "\n");
    free(gbnf);
    return 0;
}

/* The text-argument formats' grammar (glm45, glm47, minimax_m2): each
 * parameter of tools[sel] (sel < 0: of every tool) a rule of its own. */
static int tool_grammar_xml(srv *s, job *j, const cJSON *tools, int sel, int parallel, moe8_buf *err) {
    toolcall_xml_tool tt[SRV_MAX_TOOLS];
    toolcall_xml_param *ps[SRV_MAX_TOOLS] = {0};
    char (*rules[SRV_MAX_TOOLS])[40] = {0}; /* [tool][parameter]: its value's rule name */
    moe8_buf all = {0};
    int n = 0, k = 0, rc = 0;
    const cJSON *t;
    char *calls = NULL;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn_of(t), "parameters"),
                    *props = cJSON_GetObjectItemCaseSensitive(params, "properties"),
                    *req = cJSON_GetObjectItemCaseSensitive(params, "required"), *p, *r;
        int np = 0;
        if (sel >= 0 && k != sel) {
            k++;
            continue;
        }
        tt[n] = (toolcall_xml_tool){name_of(t), NULL, 0};
        if (!cJSON_IsObject(props)) props = NULL;
        if (!cJSON_IsArray(req)) req = NULL;
        if (props && cJSON_GetArraySize(props)) {
            const size_t m = (size_t)cJSON_GetArraySize(props);
            if (!(ps[n] = calloc(m, sizeof *ps[n])) || !(rules[n] = calloc(m, sizeof *rules[n]))) {
                rc = moe8_oa_bad(err, "tools", "out of memory");
                goto done;
            }
        }
        cJSON_ArrayForEach(p, props) {
            toolcall_xml_param *q = &ps[n][np];
            const unsigned types = moe8_tcx_param_types(tools, j->tool_format, name_of(t), p->string);
            q->name = p->string;
            q->required = 0;
            cJSON_ArrayForEach(r, req)
                if (cJSON_IsString(r) && !strcmp(r->valuestring, p->string)) q->required = 1;
            if (!(types & TCX_STRING)) { /* a value the parser reads as JSON */
                char prefix[40], param[200];
                snprintf(prefix, sizeof prefix, "t%d-p%d-", k, np);
                snprintf(rules[n][np], sizeof rules[n][np], "t%d-p%d-root", k, np);
                snprintf(param, sizeof param, "tools[%d].function.parameters.properties.%.100s", k, p->string);
                if ((rc = schema_rules(p, prefix, param, &all, err))) goto done;
                q->rule = rules[n][np];
            }
            np++;
        }
        tt[n].params = ps[n];
        tt[n++].n_params = np;
        k++;
    }
    if (!(calls = moe8_toolcall_grammar_xml(j->tool_format, tt, n, parallel))) {
        rc = moe8_oa_bad(err, "tools", "the tools' names cannot be put in a grammar");
        goto done;
    }
    {
        moe8_buf g = {0};
        moe8_buf_str(&g, calls);
        moe8_buf_add(&g, all.p ? all.p : "", all.n);
        rc = moe8_oa_attach_grammar(s, j, g.p, "tool_choice", err);
        moe8_buf_free(&g);
    }
done:
    free(calls);
    for (int i = 0; i < SRV_MAX_TOOLS; i++) free(ps[i]), free(rules[i]);
    moe8_buf_free(&all);
    return rc;
}

/* Harmony's special tokens' ids from the tokenizer: 0, or -1 when one is
 * missing (a harmony parser forced on a model whose tokenizer lacks them). */
static int harmony_ids(const srv *s, toolcall_harmony_ids *ids) {
    const moe8_tokenizer *t = s->tok;
    ids->channel = t ? moe8_tokenizer_token_id(t, "<|channel|>") : -1;
    ids->message = t ? moe8_tokenizer_token_id(t, "<|message|>") : -1;
    ids->constrain = t ? moe8_tokenizer_token_id(t, "<|constrain|>") : -1;
    ids->end = t ? moe8_tokenizer_token_id(t, "<|end|>") : -1;
    ids->start = t ? moe8_tokenizer_token_id(t, "<|start|>") : -1;
    ids->call = t ? moe8_tokenizer_token_id(t, "<|call|>") : -1;
    return ids->channel < 0 || ids->message < 0 || ids->constrain < 0 || ids->end < 0 || ids->start < 0 ||
                   ids->call < 0 ? -1 : 0;
}

/* Harmony's call grammar; <|call|> named in it unless it is an EOS id
 * (then it ends the output). */
static char *harmony_grammar(srv *s, const char *const *names, const char *const *rules, int n) {
    toolcall_harmony_ids ids;
    if (harmony_ids(s, &ids)) return NULL;
    if (moe8_grammar_vocab_is_eos(s->gvocab, ids.call)) ids.call = -1;
    return moe8_toolcall_grammar_harmony(names, rules, n, &ids);
}

/* The grammar of calls to tools[sel] (sel < 0: any), attached to j. */
static int tool_grammar(srv *s, job *j, const cJSON *tools, int sel, int parallel, moe8_buf *err) {
    const char *names[SRV_MAX_TOOLS], *rules[SRV_MAX_TOOLS];
    char rule_buf[SRV_MAX_TOOLS][24];
    moe8_buf all = {0};
    int n = 0, k = 0, rc;
    const cJSON *t;
    char *calls;
    if (TOOLCALL_IS_XML(j->tool_format)) return tool_grammar_xml(s, j, tools, sel, parallel, err);
    cJSON_ArrayForEach(t, tools) {
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn_of(t), "parameters");
        char prefix[24], param[64];
        if (sel >= 0 && k != sel) {
            k++;
            continue;
        }
        snprintf(param, sizeof param, "tools[%d].function.parameters", k);
        snprintf(prefix, sizeof prefix, "t%d-", k);
        if ((rc = schema_rules(params, prefix, param, &all, err))) {
            moe8_buf_free(&all);
            return rc;
        }
        snprintf(rule_buf[n], sizeof rule_buf[n], "t%d-root", k);
        names[n] = name_of(t);
        rules[n] = rule_buf[n];
        n++, k++;
    }
    calls = j->tool_format == TOOLCALL_HARMONY ? harmony_grammar(s, names, rules, n)
                                               : moe8_toolcall_grammar(j->tool_format, names, rules, n, parallel);
    if (!calls) {
        moe8_buf_free(&all);
        return moe8_oa_bad(err, "tools", "the tools' names cannot be put in a grammar");
    }
    {
        moe8_buf g = {0};
        moe8_buf_str(&g, calls);
        moe8_buf_str(&g, "\n");
        moe8_buf_add(&g, all.p ? all.p : "", all.n);
        rc = moe8_oa_attach_grammar(s, j, g.p, "tool_choice", err);
        moe8_buf_free(&g);
    }
    free(calls);
    moe8_buf_free(&all);
    return rc;
}

int moe8_tools_parse(srv *s, const cJSON *root, job *j, moe8_buf *err) {
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(root, "tools");
    const cJSON *choice = cJSON_GetObjectItemCaseSensitive(root, "tool_choice"), *t;
    int parallel = 1, rc, sel = -1, mode, n = 0;
    if ((rc = moe8_oa_get_bool(root, "parallel_tool_calls", &parallel, err))) return rc;
    if (tools && cJSON_IsNull(tools)) tools = NULL;
    if (choice && cJSON_IsNull(choice)) choice = NULL;
    if (tools) { /* their shape as the template gets them: tok_messages.c */
        if (!cJSON_IsArray(tools)) return moe8_oa_bad(err, "tools", "'tools' must be an array, got %s", moe8_json_type_name(tools));
        cJSON_ArrayForEach(t, tools) {
            char param[48];
            snprintf(param, sizeof param, "tools[%d].function.name", n);
            if (!name_of(t) || !name_of(t)[0]) return moe8_oa_bad(err, param, "'%s' must be a non-empty string", param);
            n++;
        }
        if (n > SRV_MAX_TOOLS) return moe8_oa_bad(err, "tools", "'tools' holds %d tools; at most %d", n, SRV_MAX_TOOLS);
        if (!n) tools = NULL;
    }
    mode = tools ? 1 : 0; /* 0 none, 1 auto, 2 required, 3 named */
    if (cJSON_IsString(choice)) {
        if (!strcmp(choice->valuestring, "none")) mode = 0;
        else if (!strcmp(choice->valuestring, "auto")) mode = 1;
        else if (!strcmp(choice->valuestring, "required")) mode = 2;
        else return moe8_oa_bad(err, "tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or "
                           "{\"type\": \"function\", \"function\": {\"name\": ...}}, got '%.40s'", choice->valuestring);
    } else if (choice) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(choice, "function"),
                    *nm = cJSON_GetObjectItemCaseSensitive(fn, "name");
        int k = 0;
        if (!cJSON_IsObject(choice) || !cJSON_IsString(nm))
            return moe8_oa_bad(err, "tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or "
                          "{\"type\": \"function\", \"function\": {\"name\": ...}}");
        cJSON_ArrayForEach(t, tools) {
            if (name_of(t) && !strcmp(name_of(t), nm->valuestring)) sel = k;
            k++;
        }
        if (sel < 0)
            return moe8_oa_bad(err, "tool_choice", "'tool_choice' names the function '%.60s', which is not "
                          "in 'tools'", nm->valuestring);
        mode = 3;
    }
    if (mode && !tools)
        return moe8_oa_bad(err, "tool_choice", "'tool_choice' other than \"none\" needs 'tools'");
    if (!mode) return 0;
    j->tool_format = s->tool_format;
    if (j->tool_format == TOOLCALL_NONE)
        return moe8_oa_bad(err, "tools", "this model's chat template teaches no tool-call format moe8 knows; "
                      "start the server with --tool-call-parser hermes|deepseek_v3|mistral|glm45|glm47|minimax_m2|qwen3_coder");
    if (mode >= 2 && j->tool_format == TOOLCALL_HARMONY) {
        toolcall_harmony_ids ids;
        if (harmony_ids(s, &ids))
            return moe8_oa_bad(err, "tool_choice", "'tool_choice' \"required\" or a named function with the harmony "
                               "format needs its special tokens (<|channel|>, <|message|>, <|constrain|>, <|end|>, "
                               "<|start|>, <|call|>), which this model's tokenizer lacks");
    }
    if (!(j->tc = moe8_toolcall_new(j->tool_format, tools))) return moe8_oa_bad(err, "tools", "out of memory");
    j->tool_parallel = parallel;
    if (mode >= 2 && (rc = tool_grammar(s, j, tools, mode == 3 ? sel : -1, parallel, err))) return rc;
    j->grammar_whole = mode >= 2 && j->tool_format == TOOLCALL_HARMONY;
    return 0;
}

/* ---- output -------------------------------------------------------------------- */

typedef struct {
    srv *s;
    job *j;
    moe8_buf *shown;       /* content to show */
    moe8_buf *reason;      /* harmony: reasoning (appended) */
    cJSON *deltas;     /* stream: tool_calls deltas of this piece */
} sink_ctx;

static void call_id(job *j, char *id, size_t cap) {
    static const char A[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    const int mistral = j->tool_format == TOOLCALL_MISTRAL, n = mistral ? 9 : 24;
    size_t k = 0;
    if (!mistral) k = (size_t)snprintf(id, cap, "call_");
    for (int i = 0; i < n && k + 1 < cap; i++) {
        j->id_rng = j->id_rng * 6364136223846793005ull + 1442695040888963407ull;
        id[k++] = A[(j->id_rng >> 33) % 62];
    }
    id[k] = '\0';
}

static void on_content(void *u, const char *s, size_t n) {
    sink_ctx *c = u;
    if (c->j->tool_stop) return; /* nothing after the one call */
    moe8_buf_add(c->shown, s, n);
}

static void on_begin(void *u, int index, const char *name, size_t n) {
    sink_ctx *c = u;
    job *j = c->j;
    cJSON *call, *fn;
    char id[40];
    if (index > 0 && !j->tool_parallel) return;
    call_id(j, id, sizeof id);
    call = cJSON_CreateObject();
    cJSON_AddNumberToObject(call, "index", index);
    cJSON_AddStringToObject(call, "id", id);
    cJSON_AddStringToObject(call, "type", "function");
    fn = cJSON_AddObjectToObject(call, "function");
    moe8_oa_json_text(fn, "name", name, n);
    if (j->stream) {
        cJSON_AddStringToObject(fn, "arguments", "");
        if (!c->deltas) c->deltas = cJSON_CreateArray();
        cJSON_AddItemToArray(c->deltas, call);
        return;
    }
    if (!j->calls) j->calls = cJSON_CreateArray();
    cJSON_DeleteItemFromObject(call, "index");
    cJSON_AddItemToArray(j->calls, call);
    moe8_buf_free(&j->args);
}

static void on_args(void *u, int index, const char *s, size_t n) {
    sink_ctx *c = u;
    job *j = c->j;
    if (index > 0 && !j->tool_parallel) return;
    if (j->stream) {
        cJSON *d = cJSON_CreateObject(), *fn;
        cJSON_AddNumberToObject(d, "index", index);
        fn = cJSON_AddObjectToObject(d, "function");
        moe8_oa_json_text(fn, "arguments", s, n);
        if (!c->deltas) c->deltas = cJSON_CreateArray();
        cJSON_AddItemToArray(c->deltas, d);
        return;
    }
    moe8_buf_add(&j->args, s, n);
}

static void on_end(void *u, int index, int ok) {
    sink_ctx *c = u;
    job *j = c->j;
    if (index > 0 && !j->tool_parallel) return;
    if (ok) j->n_calls_ok++;
    if (ok && !j->tool_parallel) j->tool_stop = 1; /* the engine ends the request */
    if (j->stream || !j->calls) return;
    {
        cJSON *last = cJSON_GetArrayItem(j->calls, cJSON_GetArraySize(j->calls) - 1);
        if (!ok) cJSON_DeleteItemFromArray(j->calls, cJSON_GetArraySize(j->calls) - 1);
        else moe8_oa_json_text(cJSON_GetObjectItem(last, "function"), "arguments", j->args.p ? j->args.p : "", j->args.n);
    }
    moe8_buf_free(&j->args);
}

static void on_reasoning(void *u, const char *s, size_t n) {
    sink_ctx *c = u;
    if (c->j->tool_stop) return;
    moe8_buf_add(c->reason, s, n);
}

cJSON *moe8_tools_feed(srv *s, job *j, const char *txt, size_t n, int final, moe8_buf *shown, moe8_buf *reason) {
    sink_ctx c = {s, j, shown, reason, NULL};
    const toolcall_sink k = {on_content, on_begin, on_args, on_end, &c, on_reasoning};
    if (n) moe8_toolcall_feed(j->tc, txt, n, &k);
    if (final) moe8_toolcall_finish(j->tc, &k);
    return c.deltas;
}

void moe8_tools_free(job *j) {
    moe8_toolcall_free(j->tc);
    cJSON_Delete(j->calls);
    moe8_buf_free(&j->args);
}
