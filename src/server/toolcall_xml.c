/*
 * toolcall_xml.c — OpenAI tool calls out of the formats whose arguments are
 * text between tags, as the text streams (vLLM's parser names):
 *
 *   glm45, glm4_moe (GLM-4.5, GLM-4.6; vllm/tool_parsers/glm4_moe_tool_parser.py):
 *       <tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>
 *   glm47 (GLM-4.7; glm47_moe_tool_parser.py): the same without the newlines
 *       <tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>
 *     one parser reads both: the name runs to a newline or the first tag
 *     and is stripped; keys are stripped; any whitespace may come between
 *     the tags. One call per block; "\n" between blocks (the templates').
 *   minimax_m2 (minimax_m2_tool_parser.py):
 *       <minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Paris</parameter>\n</invoke>\n
 *       <invoke name="...">...</invoke>\n</minimax:tool_call>
 *     several calls in one block; a name (the invoke's or a parameter's)
 *     runs to '>', is stripped and loses one pair of quotes ("..." or
 *     '...'); a value is stripped.
 *   qwen3_coder (Qwen3-Coder, Qwen3.5/3.6; qwen3coder_tool_parser.py):
 *       <tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>
 *     one call per block, "\n" between blocks; names run to '>' as
 *     written (a function's without whitespace, quotes, braces or angle
 *     brackets, as vLLM's _is_valid_function_name); a value loses one
 *     newline at each end, nothing else.
 *
 * Each value becomes JSON by the tool's schema (toolcall_value.c); the
 * arguments are {"key": value, ...} in json.dumps's layout, each key
 * reported once it is complete and its value once its closing tag is read,
 * but for a string value taken as written (GLM's; Qwen3-Coder's when its
 * schema is a string that cannot be null), which goes out as it comes (as
 * vLLM's glm45 streams it; a MiniMax value is stripped, and may be null, so
 * it waits for its end). A call is reported once its name is complete
 * (GLM: at the newline or the first tag; MiniMax and Qwen3-Coder: at the
 * '>'), complete at </tool_call>, </invoke> or </function>. A MiniMax block
 * whose calls are complete may lack its </minimax:tool_call> at the end of
 * the output (as toolcall.c takes DeepSeek's), a Qwen3-Coder block its
 * </tool_call>; a GLM or MiniMax call without its closing tag is not
 * complete, as vLLM's regexes do not take it, but a Qwen3-Coder call cut
 * off by the end of the output is, with what was read (a value to the end,
 * an unfinished parameter name dropped), as vLLM's qwen3_coder takes it.
 *
 * How it reads: toolcall.c's scheme, for these formats. One state machine
 * over bytes, so any split gives the same events. Outside calls text is
 * content but for a tail that could begin the start marker; whitespace
 * after a call is dropped when another call or the end follows. In a block
 * every byte goes to `raw` while it is checked: tags as literals (one of
 * two expected, whitespace before them), names to their end byte, keys and
 * values to their closing tag. A byte that cannot go on breaks the call:
 * its raw text comes out as content (after call_end ok 0 if it was
 * reported), and the tag it was matching and the byte are read again as
 * text, so a marker there still starts a call.
 *
 * Does not: take text other than whitespace between the tags (vLLM's
 * regexes skip it), a key twice (written twice, where vLLM keeps the
 * last), or a name longer than 256 bytes. Qwen3-Coder: a value ends at
 * the first </parameter> (vLLM also reads on past one that no tag
 * follows, and takes the next <parameter= or </function> for a missing
 * one), a parameter name has no '<' or control byte, and a function
 * outside a <tool_call> block is text (vLLM falls back to reading one).
 */
#include <stdlib.h>
#include <string.h>

#include "server/toolcall_xml.h"

#define NAME_MAX_BYTES 256

enum {
    X_TEXT,  /* outside calls */
    X_WS,    /* whitespace, then one of the expected tags */
    X_TAG,   /* matching the expected tags */
    G_NAME,  /* GLM: the call's name */
    G_KEY,   /* GLM: a key, to </arg_key> */
    G_VALUE, /* GLM: a value, to </arg_value> */
    M_NAME,  /* MiniMax: the invoke's name, to '>' */
    M_PNAME, /* MiniMax: a parameter's name, to '>' */
    M_VALUE, /* MiniMax: a value, to </parameter> */
    Q_NAME,  /* Qwen3-Coder: the function's name, to '>' */
    Q_PNAME, /* Qwen3-Coder: a parameter's name, to '>' */
    Q_VALUE  /* Qwen3-Coder: a value, to </parameter> */
};
/* what a matched tag means */
enum { T_ARG_KEY, T_CALL_END, T_ARG_VALUE, T_INVOKE, T_BLOCK_END, T_PARAM, T_INVOKE_END, T_FUNC, T_QPARAM,
       T_FUNC_END };
enum { R_OK, R_BREAK };

static const char G_START[] = "<tool_call>", G_END[] = "</tool_call>", G_KEY_TAG[] = "<arg_key>",
                  G_KEY_END[] = "</arg_key>", G_VAL_TAG[] = "<arg_value>", G_VAL_END[] = "</arg_value>";
static const char M_START[] = "<minimax:tool_call>", M_END[] = "</minimax:tool_call>",
                  M_INVOKE[] = "<invoke name=", M_INVOKE_END[] = "</invoke>", M_PARAM[] = "<parameter name=",
                  M_PARAM_END[] = "</parameter>";
static const char Q_FUNC[] = "<function=", Q_FUNC_END[] = "</function>", Q_PARAM[] = "<parameter=",
                  Q_VAL_END[] = "\n</parameter>"; /* a value's last newline is not its own */

struct tcx {
    toolcall_format f;
    cJSON *tools;          /* the request's tools (a copy), or NULL */
    moe8_tc_text tx;       /* outside calls: the start marker (G_START or M_START), held bytes, whitespace after a call */
    int st;
    /* the block */
    moe8_buf raw;          /* its text since it (or its last complete call) began */
    int raw_reset;         /* this byte ended a call or the block */
    int seg_calls;         /* calls completed in this block */
    const char *exp[2];    /* the tags expected, from exp_pos on */
    int exp_next[2], exp_alive[2];
    size_t exp_pos;
    int name_open;         /* GLM: a tag ends the name, which is checked then */
    /* the call */
    moe8_buf name, key, val;
    unsigned val_types;    /* what the value is read as (toolcall_xml.h's TCX_*) */
    int val_stream;        /* a string value taken as written: sent as it comes */
    int val_lead;          /* Qwen3-Coder: the value's first byte, a newline to drop */
    int reported, cur, n_calls, n_args;
    moe8_tc_out out; /* events not yet handed to the sink */
};

static int is_ws(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static void need(tcx *p, int rc) { moe8_tc_need(&p->out, rc); }
static void flush(tcx *p) { moe8_tc_flush(&p->out, p->cur); }
static void emit_content(tcx *p, const char *s, size_t n) { moe8_tc_content(&p->out, p->cur, s, n); }
static void emit_args(tcx *p, const char *s, size_t n) { moe8_tc_args(&p->out, p->cur, s, n); }

/* ---- calls ---------------------------------------------------------------------------- */

/* s[0..n) stripped and, with `quotes`, one pair of '...' or "..." taken off. */
static void clean_name(const char **s, size_t *n, int quotes) {
    moe8_tcx_strip(s, n);
    if (quotes && *n >= 1 && ((**s == '"' && (*s)[*n - 1] == '"') || (**s == '\'' && (*s)[*n - 1] == '\''))) {
        (*s)++;
        *n = *n >= 2 ? *n - 2 : 0;
    }
}

/* The call's name is complete in p->name: reported, or R_BREAK when empty. */
static int report(tcx *p, int quotes) {
    const toolcall_sink *k = p->out.k;
    const char *s = p->name.p ? p->name.p : "";
    size_t n = p->name.n;
    clean_name(&s, &n, quotes);
    if (!n) return R_BREAK;
    memmove(p->name.p, s, n);
    p->name.n = n;
    p->name.p[n] = '\0';
    flush(p);
    p->cur = p->n_calls++;
    p->reported = 1;
    p->n_args = 0;
    if (k->call_begin) k->call_begin(k->u, p->cur, p->name.p, n);
    return R_OK;
}

/* A key is complete: `"key": ` goes out, and *types is what its value is. */
static void key_done(tcx *p, int quotes, unsigned *types) {
    const char *key = p->key.p ? p->key.p : "";
    size_t n = p->key.n;
    moe8_buf v = {0};
    char *kz;
    if (p->f != TOOLCALL_QWEN3_CODER) clean_name(&key, &n, quotes); /* vLLM's qwen3_coder takes it as written */
    if (!(kz = malloc(n + 1))) {
        p->out.oom = 1;
        return;
    }
    memcpy(kz, key, n);
    kz[n] = '\0';
    *types = moe8_tcx_param_types(p->tools, p->f, p->name.p, kz);
    need(p, moe8_buf_str(&v, p->n_args++ ? ", " : "{"));
    need(p, moe8_buf_json_str(&v, kz, n, 0));
    need(p, moe8_buf_str(&v, ": "));
    if (v.p) emit_args(p, v.p, v.n);
    moe8_buf_free(&v);
    free(kz);
    p->key.n = 0;
}

/* s[0..n) of a string value as the JSON string's body (no quotes). */
static void emit_str_body(tcx *p, const char *s, size_t n) {
    moe8_buf v = {0};
    need(p, moe8_buf_json_str(&v, s, n, 0));
    if (v.p && v.n >= 2) emit_args(p, v.p + 1, v.n - 2);
    moe8_buf_free(&v);
}

/* A value is complete: the rest of it goes out. */
static void value_done(tcx *p) {
    const char *s = p->val.p ? p->val.p : "";
    if (p->f == TOOLCALL_QWEN3_CODER && p->val.n && s[p->val.n - 1] == '\n') p->val.n--;
    if (p->val_stream) {
        emit_str_body(p, s, p->val.n);
        emit_args(p, "\"", 1);
    } else {
        moe8_buf v = {0};
        need(p, moe8_tcx_value(&v, p->f, p->val_types, s, p->val.n));
        if (v.p) emit_args(p, v.p, v.n);
        moe8_buf_free(&v);
    }
    p->val.n = 0;
    p->val_stream = 0;
}

/* The longest tail of b that begins `end`, shorter than it. */
static size_t tail_of(const moe8_buf *b, const char *end) {
    const size_t e = strlen(end);
    for (size_t k = e - 1 < b->n ? e - 1 : b->n; k > 0; k--)
        if (!memcmp(b->p + b->n - k, end, k)) return k;
    return 0;
}

/* A string value taken as written streams as it comes, all of it but a
 * tail that may begin its end (</arg_value>; Qwen3-Coder's </parameter>,
 * with the newline before it that is not the value's). */
static void value_stream(tcx *p) {
    size_t keep = tail_of(&p->val, p->f == TOOLCALL_QWEN3_CODER ? Q_VAL_END : G_VAL_END);
    if (p->f == TOOLCALL_QWEN3_CODER && tail_of(&p->val, M_PARAM_END) > keep) keep = tail_of(&p->val, M_PARAM_END);
    if (p->val.n == keep) return;
    emit_str_body(p, p->val.p, p->val.n - keep);
    memmove(p->val.p, p->val.p + p->val.n - keep, keep);
    p->val.n = keep;
}

static void call_complete(tcx *p) {
    const toolcall_sink *k = p->out.k;
    emit_args(p, p->n_args ? "}" : "{}", p->n_args ? 1 : 2);
    flush(p);
    if (k->call_end) k->call_end(k->u, p->cur, 1);
    p->reported = 0;
    p->name.n = 0;
    p->seg_calls++;
    p->raw.n = 0;
    p->raw_reset = 1;
}

static void seg_done(tcx *p) {
    p->st = X_TEXT;
    p->tx.after_call = 1;
    p->raw.n = 0;
    p->raw_reset = 1;
}

/* Whitespace, then tag a (or b). */
static void expect(tcx *p, const char *a, int next_a, const char *b, int next_b) {
    p->exp[0] = a;
    p->exp[1] = b;
    p->exp_next[0] = next_a;
    p->exp_next[1] = next_b;
    p->st = X_WS;
}

static void expect_glm_next(tcx *p) { expect(p, G_KEY_TAG, T_ARG_KEY, G_END, T_CALL_END); }
static void expect_invoke_next(tcx *p) { expect(p, M_PARAM, T_PARAM, M_INVOKE_END, T_INVOKE_END); }
static void expect_block_next(tcx *p) { expect(p, M_INVOKE, T_INVOKE, M_END, T_BLOCK_END); }
static void expect_function_next(tcx *p) { expect(p, Q_PARAM, T_QPARAM, Q_FUNC_END, T_FUNC_END); }

static int tag_done(tcx *p, int next) {
    if (p->name_open) { /* GLM: the tag right after the name ends it */
        p->name_open = 0;
        if (report(p, 0)) return R_BREAK;
    }
    switch (next) {
    case T_ARG_KEY: p->st = G_KEY; p->key.n = 0; return R_OK;
    case T_ARG_VALUE:
        p->st = G_VALUE;
        p->val.n = 0;
        key_done(p, 0, &p->val_types);
        if ((p->val_stream = (p->val_types & TCX_STRING) != 0)) emit_args(p, "\"", 1);
        return R_OK;
    case T_CALL_END: call_complete(p); seg_done(p); return R_OK;
    case T_INVOKE: p->st = M_NAME; p->name.n = 0; return R_OK;
    case T_PARAM: p->st = M_PNAME; p->key.n = 0; return R_OK;
    case T_INVOKE_END: call_complete(p); expect_block_next(p); return R_OK;
    case T_FUNC: p->st = Q_NAME; p->name.n = 0; return R_OK;
    case T_QPARAM: p->st = Q_PNAME; p->key.n = 0; return R_OK;
    case T_FUNC_END: call_complete(p); expect(p, G_END, T_BLOCK_END, NULL, 0); return R_OK;
    default: seg_done(p); return R_OK; /* T_BLOCK_END */
    }
}

static int tag_byte(tcx *p, unsigned char c) {
    int alive = 0;
    for (int i = 0; i < 2; i++) {
        if (p->exp_alive[i] && (unsigned char)p->exp[i][p->exp_pos] != c) p->exp_alive[i] = 0;
        alive |= p->exp_alive[i];
    }
    if (!alive) return R_BREAK;
    p->exp_pos++;
    for (int i = 0; i < 2; i++)
        if (p->exp_alive[i] && !p->exp[i][p->exp_pos]) return tag_done(p, p->exp_next[i]);
    return R_OK;
}

/* The first byte of an expected tag, or R_BREAK. */
static int tag_begin(tcx *p, unsigned char c) {
    for (int i = 0; i < 2; i++) p->exp_alive[i] = p->exp[i] && (unsigned char)p->exp[i][0] == c;
    if (!p->exp_alive[0] && !p->exp_alive[1]) return R_BREAK;
    p->exp_pos = 1;
    p->st = X_TAG;
    return R_OK;
}

/* A byte of text that runs to the closing tag `end` (a key or a value). */
static int to_tag(tcx *p, moe8_buf *b, unsigned char c, const char *end) {
    const size_t e = strlen(end);
    char ch = (char)c;
    need(p, moe8_buf_add(b, &ch, 1));
    if (b->n < e || memcmp(b->p + b->n - e, end, e)) return 0;
    b->n -= e;
    return 1;
}

static int name_byte(tcx *p, unsigned char c) {
    char ch = (char)c;
    if (p->name.n >= NAME_MAX_BYTES || (c < 0x20 && c != '\t' && c != '\r')) return R_BREAK;
    need(p, moe8_buf_add(&p->name, &ch, 1));
    return R_OK;
}

/* ---- bytes ------------------------------------------------------------------------------ */

/* Qwen3-Coder: a name or a value. */
static int qwen3_byte(tcx *p, unsigned char c) {
    if (p->st == Q_NAME) {
        if (c == '>') {
            if (report(p, 0)) return R_BREAK;
            expect_function_next(p);
            return R_OK;
        }
        return strchr(" \t\r{}<\"'", c) ? R_BREAK : name_byte(p, c); /* '\0' too */
    }
    if (p->st == Q_PNAME) {
        if (c == '>') {
            p->st = Q_VALUE;
            p->val.n = 0;
            p->val_lead = 1;
            key_done(p, 0, &p->val_types);
            if ((p->val_stream = p->val_types == TCX_STRING)) emit_args(p, "\"", 1);
            return R_OK;
        }
        if (c == '<' || c < 0x20 || p->key.n >= NAME_MAX_BYTES) return R_BREAK;
        need(p, moe8_buf_add(&p->key, &c, 1));
        return R_OK;
    }
    if (p->val_lead) { /* Q_VALUE */
        p->val_lead = 0;
        if (c == '\n') return R_OK;
    }
    if (to_tag(p, &p->val, c, M_PARAM_END)) {
        value_done(p);
        expect_function_next(p);
    } else if (p->val_stream) {
        value_stream(p);
    }
    return R_OK;
}

static int seg_byte(tcx *p, unsigned char c) {
    switch (p->st) {
    case X_WS: return is_ws(c) ? R_OK : tag_begin(p, c);
    case X_TAG: return tag_byte(p, c);
    case G_NAME:
        if (c == '\n') { /* glm45: the name's line */
            if (report(p, 0)) return R_BREAK;
            expect_glm_next(p);
            return R_OK;
        }
        if (c == '<') { /* glm47: a tag right after the name */
            p->name_open = 1;
            expect_glm_next(p);
            return tag_begin(p, c);
        }
        return name_byte(p, c);
    case G_KEY:
        if (to_tag(p, &p->key, c, G_KEY_END)) expect(p, G_VAL_TAG, T_ARG_VALUE, NULL, 0);
        return R_OK;
    case G_VALUE:
        if (to_tag(p, &p->val, c, G_VAL_END)) {
            value_done(p);
            expect_glm_next(p);
        } else if (p->val_stream) {
            value_stream(p);
        }
        return R_OK;
    case M_NAME:
    case M_PNAME:
        if (c == '>') {
            if (p->st == M_NAME) {
                if (report(p, 1)) return R_BREAK;
                expect_invoke_next(p);
            } else {
                p->st = M_VALUE;
                p->val.n = 0;
                key_done(p, 1, &p->val_types);
            }
            return R_OK;
        }
        if (c == '<') return R_BREAK;
        if (p->st == M_NAME) return name_byte(p, c);
        if (p->key.n >= NAME_MAX_BYTES || (c < 0x20 && !is_ws(c))) return R_BREAK;
        need(p, moe8_buf_add(&p->key, &c, 1));
        return R_OK;
    case M_VALUE:
        if (to_tag(p, &p->val, c, M_PARAM_END)) {
            value_done(p);
            expect_invoke_next(p);
        }
        return R_OK;
    default: return qwen3_byte(p, c);
    }
}

static void start_block(tcx *p) {
    p->raw.n = 0;
    need(p, moe8_buf_add(&p->raw, p->tx.marker, p->tx.marker_n));
    p->seg_calls = 0;
    p->name.n = p->key.n = p->val.n = 0;
    p->name_open = 0;
    if (p->f == TOOLCALL_MINIMAX_M2) expect_block_next(p);
    else if (p->f == TOOLCALL_QWEN3_CODER) expect(p, Q_FUNC, T_FUNC, NULL, 0);
    else p->st = G_NAME;
}


static void step(tcx *p, unsigned char c);

/* The call breaks at byte c: see the file's header. */
static void brk(tcx *p, unsigned char c) {
    const toolcall_sink *k = p->out.k;
    char again[32];
    size_t n_again = p->st == X_TAG ? p->exp_pos : 0;
    if (n_again > p->raw.n || n_again > sizeof again) n_again = 0;
    if (p->reported) {
        flush(p);
        if (k->call_end) k->call_end(k->u, p->cur, 0);
        p->reported = 0;
    }
    if (n_again) memcpy(again, p->raw.p + p->raw.n - n_again, n_again);
    emit_content(p, p->raw.p, p->raw.n - n_again);
    p->raw.n = 0;
    p->name.n = p->key.n = p->val.n = 0;
    p->name_open = p->val_stream = p->val_lead = 0;
    p->st = X_TEXT;
    p->tx.after_call = 0;
    p->tx.held = 0;
    for (size_t i = 0; i < n_again; i++) step(p, (unsigned char)again[i]);
    step(p, c);
}

static void step(tcx *p, unsigned char c) {
    char ch = (char)c;
    if (p->st == X_TEXT) {
        if (moe8_tc_text_byte(&p->tx, &p->out, p->cur, c)) start_block(p);
        return;
    }
    p->raw_reset = 0;
    if (seg_byte(p, c) == R_BREAK) {
        brk(p, c);
        return;
    }
    if (!p->raw_reset) need(p, moe8_buf_add(&p->raw, &ch, 1));
}

/* ---- the API (through toolcall.c) --------------------------------------------------------- */

tcx *moe8_tcx_new(toolcall_format f, const cJSON *tools) {
    tcx *p;
    if (!TOOLCALL_IS_XML(f)) return NULL;
    if (!(p = calloc(1, sizeof *p))) return NULL;
    p->f = f;
    if (tools && !(p->tools = cJSON_Duplicate(tools, 1))) {
        free(p);
        return NULL;
    }
    p->tx.marker = f == TOOLCALL_MINIMAX_M2 ? M_START : G_START;
    p->tx.marker_n = strlen(p->tx.marker);
    p->st = X_TEXT;
    return p;
}

const cJSON *moe8_tcx_tools(const tcx *p) { return p ? p->tools : NULL; }

int moe8_tcx_feed(tcx *p, const char *s, size_t n, const toolcall_sink *k) {
    if (!p || p->out.oom) return -1;
    p->out.k = k;
    for (size_t i = 0; i < n && !p->out.oom; i++) step(p, (unsigned char)s[i]);
    if (!p->out.oom) flush(p);
    return p->out.oom ? -1 : 0;
}

/* The output ended in a Qwen3-Coder block: 1 when that is a complete call
 * (its </tool_call>, or more, cut off after the name; completed here). */
static int qwen3_cut(tcx *p) {
    if (p->f != TOOLCALL_QWEN3_CODER) return 0;
    if ((p->st == X_WS || p->st == X_TAG) && p->exp[0] == G_END) return 1; /* complete already */
    if (!p->reported) return 0;
    if (p->st == Q_VALUE) value_done(p);
    call_complete(p);
    return 1;
}

int moe8_tcx_finish(tcx *p, const toolcall_sink *k) {
    if (!p || p->out.oom) return -1;
    p->out.k = k;
    if (p->st == X_TEXT) {
        moe8_tc_text_end(&p->tx, &p->out, p->cur);
    } else if (qwen3_cut(p)) {
        /* a Qwen3-Coder call cut off: complete with what was read */
    } else if (!((p->st == X_WS || p->st == X_TAG) && p->exp[0] == M_INVOKE && p->seg_calls)) {
        if (p->reported) { /* a MiniMax block of complete calls may end without its tag; nothing else */
            flush(p);
            if (k->call_end) k->call_end(k->u, p->cur, 0);
        }
        emit_content(p, p->raw.p, p->raw.n);
    }
    p->tx.held = 0;
    p->tx.ws.n = p->raw.n = 0;
    p->tx.after_call = p->reported = 0;
    p->st = X_TEXT;
    flush(p);
    return p->out.oom ? -1 : 0;
}

int moe8_tcx_count(const tcx *p) { return p ? p->n_calls : 0; }

void moe8_tcx_free(tcx *p) {
    if (!p) return;
    cJSON_Delete(p->tools);
    moe8_buf_free(&p->tx.ws);
    moe8_buf_free(&p->raw);
    moe8_buf_free(&p->name);
    moe8_buf_free(&p->key);
    moe8_buf_free(&p->val);
    moe8_buf_free(&p->out.cbuf);
    moe8_buf_free(&p->out.abuf);
    free(p);
}
