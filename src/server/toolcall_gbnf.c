/*
 * toolcall_gbnf.c — the GBNF grammar of "a call in this format" for
 * constrained decoding (tool_choice "required" or a named function): the
 * layout each model family's template teaches (toolcall.h), one rule per
 * offered tool, its name as a literal (JSON-escaped where the format writes
 * it inside a JSON string) and its arguments by the caller's rule.
 * The formats whose arguments are text between tags (glm45, glm47,
 * minimax_m2, qwen3_coder) get one literal per parameter name, in the schema's order,
 * the required ones always there and the others optional, each value by its
 * rule (JSON by the parameter's schema) or, for a string parameter, any
 * text without "</".
 * Harmony (gpt-oss) names its special tokens (grammar.h's `<[N]>`): an
 * optional analysis message, then one call as OpenAI's harmony docs write
 * it, "<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>"
 * and the arguments, then <|call|> (the end of the output when it is an EOS
 * id, else named). The analysis text holds no "<|" (the output parser reads
 * markers from text, so a marker spelled in it would end the message).
 *
 * Does not: read model output (toolcall.c), or make the arguments' rules
 * (tools.c, from the tools' JSON Schemas).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "server/toolcall.h"

/* s as a GBNF string literal's body: \" \\ \n \r \t, other controls \xNN,
 * UTF-8 as it is. json: s is a JSON string's contents before that (as
 * moe8_buf_json_str writes them: " and \ escaped, \n \t ... short, other
 * controls \u00XX). */
static int gbnf_text(moe8_buf *b, const char *s, int json) {
    if (json) { /* the JSON string's body by the one JSON writer, then escaped for GBNF */
        moe8_buf j = {0};
        int rc = moe8_buf_json_str(&j, s, strlen(s), 0);
        if (!rc) {
            j.p[j.n - 1] = '\0'; /* its closing quote */
            rc = gbnf_text(b, j.p + 1, 0);
        }
        moe8_buf_free(&j);
        return rc ? -1 : 0;
    }
    for (const unsigned char *q = (const unsigned char *)s; *q; q++) {
        char esc[8];
        const char *e = NULL;
        if (*q == '"') e = "\\\"";
        else if (*q == '\\') e = "\\\\";
        else if (*q == '\n') e = "\\n";
        else if (*q == '\r') e = "\\r";
        else if (*q == '\t') e = "\\t";
        else if (*q < 0x20) e = (snprintf(esc, sizeof esc, "\\x%02x", *q), esc);
        if (e ? moe8_buf_str(b, e) : moe8_buf_add(b, (const char *)q, 1)) return -1;
    }
    return 0;
}

static int gbnf_lit(moe8_buf *b, const char *s) {
    return moe8_buf_str(b, "\"") || gbnf_text(b, s, 0) || moe8_buf_str(b, "\"");
}

static int is_rule_name(const char *s) {
    if (!s || !*s) return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '-'))
            return 0;
    return 1;
}

/* toolcall-I ::= "PRE NAME MID" ARG "POST", NAME JSON-escaped when json. */
static int gbnf_call(moe8_buf *b, int i, const char *pre, const char *name, int json, const char *mid,
                     const char *arg, const char *post) {
    char head[48];
    snprintf(head, sizeof head, "toolcall-%d ::= \"", i);
    return moe8_buf_str(b, head) || gbnf_text(b, pre, 0) || gbnf_text(b, name, json) || gbnf_text(b, mid, 0) ||
           moe8_buf_str(b, "\" ") || moe8_buf_str(b, arg) || moe8_buf_str(b, " ") || gbnf_lit(b, post) || moe8_buf_str(b, "\n");
}

char *moe8_toolcall_grammar(toolcall_format f, const char *const *names, const char *const *arg_rules,
                       int n_tools, int parallel) {
    moe8_buf b = {0};
    const char *root, *sep;
    int bad = 0;
    if (n_tools < 1 || !names || !arg_rules) return NULL;
    for (int i = 0; i < n_tools; i++)
        if (!names[i] || !names[i][0] || !is_rule_name(arg_rules[i])) return NULL;
    switch (f) {
    case TOOLCALL_HERMES: root = NULL; sep = "\n"; break;
    case TOOLCALL_DEEPSEEK_V3: root = TOOLCALL_DS_CALLS_BEGIN; sep = "\n"; break;
    case TOOLCALL_MISTRAL: root = "[TOOL_CALLS] ["; sep = ", "; break;
    default: return NULL;
    }
    bad |= moe8_buf_str(&b, "root ::= ");
    if (root) bad |= gbnf_lit(&b, root) || moe8_buf_str(&b, " ");
    bad |= moe8_buf_str(&b, "toolcall-call");
    if (parallel) bad |= moe8_buf_str(&b, " (") || gbnf_lit(&b, sep) || moe8_buf_str(&b, " toolcall-call)*");
    if (f == TOOLCALL_DEEPSEEK_V3) bad |= moe8_buf_str(&b, " ") || gbnf_lit(&b, TOOLCALL_DS_CALLS_END);
    if (f == TOOLCALL_MISTRAL) bad |= moe8_buf_str(&b, " \"]\"");
    bad |= moe8_buf_str(&b, "\ntoolcall-call ::=");
    for (int i = 0; i < n_tools; i++) {
        char ref[32];
        snprintf(ref, sizeof ref, "%s toolcall-%d", i ? " |" : "", i);
        bad |= moe8_buf_str(&b, ref);
    }
    bad |= moe8_buf_str(&b, "\n");
    for (int i = 0; i < n_tools && !bad; i++) {
        if (f == TOOLCALL_HERMES)
            bad |= gbnf_call(&b, i, "<tool_call>\n{\"name\": \"", names[i], 1, "\", \"arguments\": ",
                             arg_rules[i], "}\n</tool_call>");
        else if (f == TOOLCALL_DEEPSEEK_V3)
            bad |= gbnf_call(&b, i, TOOLCALL_DS_CALL_BEGIN "function" TOOLCALL_DS_SEP, names[i], 0, "\n```json\n",
                             arg_rules[i], "\n```" TOOLCALL_DS_CALL_END);
        else
            bad |= gbnf_call(&b, i, "{\"name\": \"", names[i], 1, "\", \"arguments\": ", arg_rules[i], "}");
    }
    if (bad) {
        moe8_buf_free(&b);
        return NULL;
    }
    return b.p;
}

/* toolcall-I ::= <[channel]> "commentary to=functions.NAME " <[constrain]> "json" <[message]> ARG [<[call]>] */
static int gbnf_harmony_call(moe8_buf *b, int i, const char *name, const char *arg, const toolcall_harmony_ids *ids) {
    char head[48], ref[3][24];
    snprintf(head, sizeof head, "toolcall-%d ::= ", i);
    snprintf(ref[0], sizeof ref[0], "<[%d]> ", (int)ids->channel);
    snprintf(ref[1], sizeof ref[1], " <[%d]> ", (int)ids->constrain);
    snprintf(ref[2], sizeof ref[2], " <[%d]> ", (int)ids->message);
    if (moe8_buf_str(b, head) || moe8_buf_str(b, ref[0]) || moe8_buf_str(b, "\"commentary to=functions.") ||
        gbnf_text(b, name, 0) || moe8_buf_str(b, " \"") || moe8_buf_str(b, ref[1]) || moe8_buf_str(b, "\"json\"") ||
        moe8_buf_str(b, ref[2]) || moe8_buf_str(b, arg))
        return -1;
    if (ids->call >= 0) {
        snprintf(ref[0], sizeof ref[0], " <[%d]>", (int)ids->call);
        if (moe8_buf_str(b, ref[0])) return -1;
    }
    return moe8_buf_str(b, "\n");
}

char *moe8_toolcall_grammar_harmony(const char *const *names, const char *const *arg_rules, int n_tools,
                                    const toolcall_harmony_ids *ids) {
    moe8_buf b = {0};
    char line[320];
    int bad = 0;
    if (n_tools < 1 || !names || !arg_rules || !ids || ids->channel < 0 || ids->message < 0 ||
        ids->constrain < 0 || ids->end < 0 || ids->start < 0)
        return NULL;
    for (int i = 0; i < n_tools; i++)
        if (!names[i] || !names[i][0] || strpbrk(names[i], " <") || !is_rule_name(arg_rules[i])) return NULL;
    snprintf(line, sizeof line, "root ::= toolcall-think? toolcall-call\n"
             "toolcall-think ::= <[%d]> \"analysis\" <[%d]> toolcall-text <[%d]> <[%d]> \"assistant\"\n"
             "toolcall-text ::= ([^<] | \"<\"+ [^<|])* \"<\"*\n",
             (int)ids->channel, (int)ids->message, (int)ids->end, (int)ids->start);
    bad |= moe8_buf_str(&b, line) || moe8_buf_str(&b, "toolcall-call ::=");
    for (int i = 0; i < n_tools; i++) {
        char ref[32];
        snprintf(ref, sizeof ref, "%s toolcall-%d", i ? " |" : "", i);
        bad |= moe8_buf_str(&b, ref);
    }
    bad |= moe8_buf_str(&b, "\n");
    for (int i = 0; i < n_tools && !bad; i++) bad |= gbnf_harmony_call(&b, i, names[i], arg_rules[i], ids);
    if (bad) {
        moe8_buf_free(&b);
        return NULL;
    }
    return b.p;
}

/* The text-argument formats: the markers around a call's name and each
 * parameter, in the layout their templates write. */
typedef struct {
    const char *root_pre, *root_post, *sep; /* around the calls, between them */
    const char *call_pre, *call_mid, *call_post;
    const char *key_pre, *key_mid, *val_post;
} xml_layout;

static const xml_layout GLM45_LAYOUT = {"", "", "\n", "<tool_call>", "\n", "</tool_call>",
                                        "<arg_key>", "</arg_key>\n<arg_value>", "</arg_value>\n"};
static const xml_layout GLM47_LAYOUT = {"", "", "", "<tool_call>", "", "</tool_call>",
                                        "<arg_key>", "</arg_key><arg_value>", "</arg_value>"};
static const xml_layout MINIMAX_LAYOUT = {"<minimax:tool_call>\n", "</minimax:tool_call>", "",
                                          "<invoke name=\"", "\">\n", "</invoke>\n",
                                          "<parameter name=\"", "\">", "</parameter>\n"};
static const xml_layout QWEN3_CODER_LAYOUT = {"", "", "\n", "<tool_call>\n<function=", ">\n",
                                              "</function>\n</tool_call>", "<parameter=", ">\n",
                                              "\n</parameter>\n"};

/* toolcall-I ::= "PRE NAME MID" (pair)... "POST" */
static int gbnf_xml_call(moe8_buf *b, int i, const xml_layout *L, const toolcall_xml_tool *t) {
    char head[48];
    int bad = 0;
    snprintf(head, sizeof head, "toolcall-%d ::= \"", i);
    bad |= moe8_buf_str(b, head) || gbnf_text(b, L->call_pre, 0) || gbnf_text(b, t->name, 0) ||
           gbnf_text(b, L->call_mid, 0) || moe8_buf_str(b, "\"");
    for (int k = 0; k < t->n_params && !bad; k++) {
        const toolcall_xml_param *q = &t->params[k];
        bad |= moe8_buf_str(b, " (\"") || gbnf_text(b, L->key_pre, 0) || gbnf_text(b, q->name, 0) ||
               gbnf_text(b, L->key_mid, 0) || moe8_buf_str(b, "\" ") ||
               moe8_buf_str(b, q->rule ? q->rule : "toolcall-text") || moe8_buf_str(b, " ") ||
               gbnf_lit(b, L->val_post) || moe8_buf_str(b, q->required ? ")" : ")?");
    }
    return bad || moe8_buf_str(b, " ") || gbnf_lit(b, L->call_post) || moe8_buf_str(b, "\n");
}

char *moe8_toolcall_grammar_xml(toolcall_format f, const toolcall_xml_tool *tools, int n_tools, int parallel) {
    const xml_layout *L = f == TOOLCALL_GLM45 ? &GLM45_LAYOUT : f == TOOLCALL_GLM47 ? &GLM47_LAYOUT
                          : f == TOOLCALL_MINIMAX_M2 ? &MINIMAX_LAYOUT
                          : f == TOOLCALL_QWEN3_CODER ? &QWEN3_CODER_LAYOUT : NULL;
    moe8_buf b = {0};
    int bad = 0;
    if (!L || n_tools < 1 || !tools) return NULL;
    for (int i = 0; i < n_tools; i++) {
        if (!tools[i].name || !tools[i].name[0] || (tools[i].n_params && !tools[i].params)) return NULL;
        for (int k = 0; k < tools[i].n_params; k++)
            if (!tools[i].params[k].name || (tools[i].params[k].rule && !is_rule_name(tools[i].params[k].rule)))
                return NULL;
    }
    bad |= moe8_buf_str(&b, "root ::= ");
    if (L->root_pre[0]) bad |= gbnf_lit(&b, L->root_pre) || moe8_buf_str(&b, " ");
    bad |= moe8_buf_str(&b, "toolcall-call");
    if (parallel) {
        bad |= moe8_buf_str(&b, " (");
        if (L->sep[0]) bad |= gbnf_lit(&b, L->sep) || moe8_buf_str(&b, " ");
        bad |= moe8_buf_str(&b, "toolcall-call)*");
    }
    if (L->root_post[0]) bad |= moe8_buf_str(&b, " ") || gbnf_lit(&b, L->root_post);
    bad |= moe8_buf_str(&b, "\ntoolcall-call ::=");
    for (int i = 0; i < n_tools; i++) {
        char ref[32];
        snprintf(ref, sizeof ref, "%s toolcall-%d", i ? " |" : "", i);
        bad |= moe8_buf_str(&b, ref);
    }
    bad |= moe8_buf_str(&b, "\ntoolcall-text ::= ([^<] | \"<\" [^/])*\n");
    for (int i = 0; i < n_tools && !bad; i++) bad |= gbnf_xml_call(&b, i, L, &tools[i]);
    if (bad) {
        moe8_buf_free(&b);
        return NULL;
    }
    return b.p;
}
