/*
 * toolcall.c — OpenAI tool calls out of a model's text, as it streams, for
 * the three families moe8 serves (vLLM's parser names):
 *
 *   hermes (Qwen2.5, Qwen3; vllm/.../tool_parsers/hermes_tool_parser.py):
 *       <tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>
 *     one block per call, "\n" between blocks (Qwen3's template writes them
 *     so). The object's keys in any order, others ("id") ignored; no
 *     "arguments" is {}. A block whose JSON is complete but whose
 *     </tool_call> never came is a call at the end of the output (vLLM's
 *     `<tool_call>(.*)` alternative).
 *   deepseek_v3 (deepseekv3_tool_parser.py; tests/data/jinja/deepseek_v3.jinja):
 *       <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{...}\n```<｜tool▁call▁end｜>
 *       \n<｜tool▁call▁begin｜>...<｜tool▁call▁end｜><｜tool▁calls▁end｜>
 *     and DeepSeek-V3.1's <｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>
 *     (deepseekv31_tool_parser.py) in the same block. The fence and the
 *     newlines may carry other whitespace. Before the separator, "function"
 *     means V3; anything else is a V3.1 name, a call only if "{" follows.
 *   mistral (mistral_tool_parser.py; tests/data/tool_templates/mistral_v3_tools.jinja):
 *       [TOOL_CALLS] [{"name": "get_weather", "arguments": {...}}, {...}]    v3 tokenizers
 *       [TOOL_CALLS]get_weather[ARGS]{...}[TOOL_CALLS]...                   v11+ (name [A-Za-z0-9_.-]+)
 *     also a lone object after [TOOL_CALLS] and a name followed by {...}
 *     without [ARGS] (what v11 output looks like with control tokens
 *     skipped).
 *
 * Arguments are the JSON text of the arguments object, as OpenAI's
 * function.arguments. vLLM re-serializes hermes and mistral arguments with
 * Python's json.dumps (separators ", " and ": ") and passes DeepSeek's
 * through as the model wrote them; moe8 does the same layout without
 * re-encoding: hermes and mistral arguments lose their insignificant
 * whitespace and get ", " and ": " (so {"a":1} is {"a": 1}, as vLLM sends
 * it), strings and numbers stay as written (vLLM would turn "\u00e9" into
 * "é" and 1E2 into 100.0); DeepSeek's are byte for byte the model's.
 *
 * How it reads: one state machine over bytes, so any split of the text
 * gives the same events. Outside a call, text is content except a tail that
 * could still begin the start marker. From the marker on, every byte goes
 * into `raw` (the text of the call or block being read) while it is
 * checked: markers and tags as literals, JSON by a validating scanner
 * (jscan, RFC 8259: strings, escapes, numbers, nesting up to 256). A call
 * is reported once its name is complete; its arguments follow in pieces (at
 * most one per moe8_toolcall_feed). A byte that cannot continue the call "breaks"
 * it: an unreported call's raw text goes out as content (the sink never
 * heard of it), a reported one ends with ok 0 and its raw text follows as
 * content; then a partly matched tag and the byte are read again as text,
 * so a marker right after a broken call still starts one.
 *
 * glm45, glm47, minimax_m2 and qwen3_coder are read by toolcall_xml.c, which the API
 * functions below hand them to; it shares the JSON scanner
 * (moe8_toolcall_json_norm). harmony (gpt-oss) by toolcall_harmony.c.
 *
 * Does not: make call ids, know the request's tools (a name the request
 * did not offer is the caller's to judge), or split <think> reasoning
 * (feed it the content only).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/buf.h"
#include "server/toolcall.h"
#include "server/toolcall_harmony.h"
#include "server/toolcall_xml.h"

#define NAME_MAX_BYTES 256
#define JSON_DEPTH_MAX 256

/* ---- growing buffer -------------------------------------------------------------- */


static int is_ws(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* ---- JSON scanner -------------------------------------------------------------------- */

/* A JSON value, byte by byte: checks it, and copies it to *out as written
 * (norm 0) or in json.dumps's layout (norm 1: whitespace dropped, ", " and
 * ": " between items). */
enum { JS_MORE, JS_DONE, JS_END, JS_BAD }; /* END: complete before this byte, not consumed */
/* states; those up to J_NEXT are between tokens, where whitespace may come */
enum { J_VALUE, J_ARR_FIRST, J_OBJ_FIRST, J_OBJ_KEY, J_COLON, J_NEXT, J_STR, J_ESC, J_HEX, J_NUM,
       J_LIT, J_OVER };
/* number: after '-', after a leading 0, in the integer, after '.', in the
 * fraction, after 'e', after its sign, in the exponent */
enum { N_SIGN, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP };

typedef struct {
    int st, is_key, hex, num, norm, depth;
    const char *lit;
    size_t lit_pos;
    unsigned char stack[JSON_DEPTH_MAX]; /* '{' or '[' per open container */
    moe8_buf *out;                           /* NULL: checked only */
    int oom;
} jscan;

static void js_start(jscan *j, int norm, moe8_buf *out) {
    j->st = J_VALUE;
    j->depth = 0;
    j->norm = norm;
    j->out = out;
    j->oom = 0;
}

static void js_put(jscan *j, const char *s, size_t n) {
    if (j->out && moe8_buf_add(j->out, s, n)) j->oom = 1;
}

/* A value just ended: the container goes on, or the whole value is done. */
static int js_value_done(jscan *j) {
    if (j->depth == 0) {
        j->st = J_OVER;
        return JS_DONE;
    }
    j->st = J_NEXT;
    return JS_MORE;
}

static int js_number_byte(jscan *j, unsigned char c) {
    int digit = c >= '0' && c <= '9';
    switch (j->num) {
    case N_SIGN: if (!digit) return 0; j->num = c == '0' ? N_ZERO : N_INT; return 1;
    case N_ZERO:
    case N_INT:
        if (digit && j->num == N_INT) return 1;
        if (c == '.') return j->num = N_DOT, 1;
        if (c == 'e' || c == 'E') return j->num = N_E, 1;
        return 0;
    case N_DOT: if (!digit) return 0; j->num = N_FRAC; return 1;
    case N_FRAC:
        if (digit) return 1;
        if (c == 'e' || c == 'E') return j->num = N_E, 1;
        return 0;
    case N_E:
        if (c == '+' || c == '-') return j->num = N_ESIGN, 1;
        if (!digit) return 0;
        j->num = N_EXP;
        return 1;
    case N_ESIGN: if (!digit) return 0; j->num = N_EXP; return 1;
    default: return digit;
    }
}

/* The first byte of a value (not whitespace). */
static int js_value_begin(jscan *j, unsigned char c) {
    char ch = (char)c;
    if (c == '{' || c == '[') {
        if (j->depth == JSON_DEPTH_MAX) return JS_BAD;
        j->stack[j->depth++] = c;
        j->st = c == '{' ? J_OBJ_FIRST : J_ARR_FIRST;
    } else if (c == '"') {
        j->st = J_STR;
        j->is_key = 0;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
        j->st = J_NUM;
        j->num = c == '-' ? N_SIGN : c == '0' ? N_ZERO : N_INT;
    } else if (c == 't' || c == 'f' || c == 'n') {
        j->lit = c == 't' ? "true" : c == 'f' ? "false" : "null";
        j->lit_pos = 1;
        j->st = J_LIT;
    } else {
        return JS_BAD;
    }
    js_put(j, &ch, 1);
    return JS_MORE;
}

/* Inside a string: its bytes, escapes (\uXXXX: 4 hex digits), the closing quote. */
static int js_string_byte(jscan *j, unsigned char c) {
    char ch = (char)c;
    if (j->st == J_ESC) {
        if (!c || !strchr("\"\\/bfnrtu", c)) return JS_BAD;
        j->st = c == 'u' ? J_HEX : J_STR;
        j->hex = 4;
    } else if (j->st == J_HEX) {
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))) return JS_BAD;
        if (--j->hex == 0) j->st = J_STR;
    } else if (c < 0x20) {
        return JS_BAD;
    } else if (c == '\\') {
        j->st = J_ESC;
    } else if (c == '"') {
        js_put(j, &ch, 1);
        if (!j->is_key) return js_value_done(j);
        j->st = J_COLON;
        return JS_MORE;
    }
    js_put(j, &ch, 1);
    return JS_MORE;
}

static int js_byte(jscan *j, unsigned char c) {
    char ch = (char)c;
    int top;
again:
    top = j->depth ? j->stack[j->depth - 1] : 0;
    if (j->st <= J_NEXT && is_ws(c)) { /* between tokens */
        if (!j->norm && j->depth) js_put(j, &ch, 1);
        return JS_MORE;
    }
    switch (j->st) {
    case J_ARR_FIRST:
        if (c == ']') goto close;
        /* fall through */
    case J_VALUE: return js_value_begin(j, c);
    case J_OBJ_FIRST:
        if (c == '}') goto close;
        /* fall through */
    case J_OBJ_KEY:
        if (c != '"') return JS_BAD;
        j->st = J_STR;
        j->is_key = 1;
        js_put(j, &ch, 1);
        return JS_MORE;
    case J_COLON:
        if (c != ':') return JS_BAD;
        js_put(j, j->norm ? ": " : ":", j->norm ? 2 : 1);
        j->st = J_VALUE;
        return JS_MORE;
    case J_NEXT:
        if (c == ',') {
            js_put(j, j->norm ? ", " : ",", j->norm ? 2 : 1);
            j->st = top == '{' ? J_OBJ_KEY : J_VALUE;
            return JS_MORE;
        }
        if ((c == '}' && top == '{') || (c == ']' && top == '[')) goto close;
        return JS_BAD;
    case J_STR:
    case J_ESC:
    case J_HEX: return js_string_byte(j, c);
    case J_NUM:
        if (js_number_byte(j, c)) {
            js_put(j, &ch, 1);
            return JS_MORE;
        }
        if (j->num == N_SIGN || j->num == N_DOT || j->num == N_E || j->num == N_ESIGN) return JS_BAD;
        if (js_value_done(j) == JS_DONE) return JS_END; /* a bare number ends before c */
        goto again;
    case J_LIT:
        if (c != (unsigned char)j->lit[j->lit_pos]) return JS_BAD;
        js_put(j, &ch, 1);
        if (!j->lit[++j->lit_pos]) return js_value_done(j);
        return JS_MORE;
    default:
        return JS_END;
    }
close:
    j->depth--;
    js_put(j, &ch, 1);
    return js_value_done(j);
}

int moe8_toolcall_json_norm(const char *s, size_t n, moe8_buf *out) {
    jscan j;
    size_t i = 0;
    int r = JS_MORE;
    js_start(&j, 1, out);
    while (i < n && is_ws((unsigned char)s[i])) i++;
    for (; i < n && r == JS_MORE; i++) r = js_byte(&j, (unsigned char)s[i]);
    if (r == JS_END) i--;                   /* a bare number ended before s[i - 1] */
    if (r == JS_MORE) r = js_byte(&j, ' '); /* or ends at the end */
    while (i < n && is_ws((unsigned char)s[i])) i++;
    return (r == JS_DONE || r == JS_END) && i == n && !j.oom ? 0 : -1;
}

/* ---- the parser ------------------------------------------------------------------------ */

/* Parser states. S_TEXT: outside calls. S_LIT: matching literal(s), then
 * lit_done(next). S_OBJ: a {"name", "arguments"} object (sub-state co). */
enum {
    S_TEXT, S_LIT, S_OBJ,
    H_CLOSE, H_DONE,                                   /* hermes, after the object */
    M_START, M_ARR_FIRST, M_ARR_NEXT, M_ARR_ELEM,      /* mistral v3 */
    M_SINGLE, M_NAME, M_ARGS_TAG, M_ARGS_START, M_ARGS, /* mistral: lone object, v11+ */
    D_CALLS, D_CALL, D_PRE, D_SEP, D_NAME, D_JSON, D_ARGS_START, D_ARGS, D_FENCE, D_FENCE_DONE,
    D_END, D_CALL_DONE, D_SEG_END                      /* deepseek */
};
/* The call object's sub-states: before '{', after '{', before a key, in
 * it, before ':', before the value, in it, after it. */
enum { C_OPEN, C_FIRST, C_KEYSTART, C_KEY, C_COLON, C_VSTART, C_VALUE, C_NEXT };
enum { K_NAME, K_ARGS, K_OTHER };
enum { R_OK, R_AGAIN, R_BREAK }; /* a segment byte: consumed, read again, breaks the call */

static const char H_START[] = "<tool_call>", H_END[] = "</tool_call>";
static const char M_MARK[] = "[TOOL_CALLS]", M_ARGS_MARK[] = "[ARGS]";
/* DeepSeek's markers (toolcall.h) */
static const char D_BEGIN[] = TOOLCALL_DS_CALLS_BEGIN, D_END_ALL[] = TOOLCALL_DS_CALLS_END,
                  D_CALL_BEGIN[] = TOOLCALL_DS_CALL_BEGIN, D_CALL_END[] = TOOLCALL_DS_CALL_END,
                  D_SEP_MARK[] = TOOLCALL_DS_SEP;

struct toolcall_parser {
    toolcall_format f;
    tcx *x;               /* glm45, glm47, minimax_m2: toolcall_xml.c reads them */
    moe8_tc_text tx;      /* outside calls: the start marker, held bytes, whitespace after a call */
    int st;
    /* the block being read */
    moe8_buf raw;             /* its text since it (or its last complete call) began */
    int raw_reset;        /* this byte ended a call or the block: it is not raw any more */
    int seg_calls;        /* calls completed in this block */
    const char *lit[2];   /* literal(s) being matched, from lit_pos on */
    int lit_next[2], lit_alive[2];
    size_t lit_pos;
    /* the call being read */
    int co, co_after, kind;
    int have_name, have_args, reported, cur, n_calls;
    int v31;              /* deepseek: a V3.1 call (no type, no fence) */
    moe8_buf key, name, hold; /* the key's text; the name (JSON text or bare); arguments before the name */
    jscan js;
    moe8_tc_out out; /* events not yet handed to the sink */
    tch *h;          /* harmony: its parser */
};

void moe8_tc_need(moe8_tc_out *o, int rc) {
    if (rc) o->oom = 1;
}

void moe8_tc_flush(moe8_tc_out *o, int cur) {
    const toolcall_sink *k = o->k;
    if (o->cbuf.n) {
        if (k->content) k->content(k->u, o->cbuf.p, o->cbuf.n);
        o->cbuf.n = 0;
    }
    if (o->abuf.n) {
        if (k->call_args) k->call_args(k->u, cur, o->abuf.p, o->abuf.n);
        o->abuf.n = 0;
    }
}

void moe8_tc_content(moe8_tc_out *o, int cur, const char *s, size_t n) {
    if (!n) return;
    if (o->abuf.n) moe8_tc_flush(o, cur);
    moe8_tc_need(o, moe8_buf_add(&o->cbuf, s, n));
}

void moe8_tc_args(moe8_tc_out *o, int cur, const char *s, size_t n) {
    if (o->cbuf.n) moe8_tc_flush(o, cur);
    moe8_tc_need(o, moe8_buf_add(&o->abuf, s, n));
}


int moe8_tc_text_byte(moe8_tc_text *t, moe8_tc_out *o, int cur, unsigned char c) {
    char ch = (char)c;
    if (t->held) {
        if (c == (unsigned char)t->marker[t->held]) {
            if (++t->held < t->marker_n) return 0;
            t->held = 0;
            t->ws.n = 0;
            t->after_call = 0;
            return 1;
        }
        if (t->after_call) moe8_tc_content(o, cur, t->ws.p, t->ws.n);
        t->ws.n = 0;
        t->after_call = 0;
        moe8_tc_content(o, cur, t->marker, t->held);
        t->held = 0;
    }
    if (t->marker && c == (unsigned char)t->marker[0]) {
        t->held = 1;
        return 0;
    }
    if (t->after_call && is_ws(c)) {
        moe8_tc_need(o, moe8_buf_add(&t->ws, &ch, 1));
        return 0;
    }
    if (t->after_call) moe8_tc_content(o, cur, t->ws.p, t->ws.n);
    t->ws.n = 0;
    t->after_call = 0;
    moe8_tc_content(o, cur, &ch, 1);
    return 0;
}

void moe8_tc_text_end(moe8_tc_text *t, moe8_tc_out *o, int cur) {
    if (t->held) {
        if (t->after_call) moe8_tc_content(o, cur, t->ws.p, t->ws.n);
        moe8_tc_content(o, cur, t->marker, t->held);
    }
    t->held = 0;
    t->ws.n = 0;
    t->after_call = 0;
}

static void need(toolcall_parser *p, int rc) { moe8_tc_need(&p->out, rc); }
static void flush(toolcall_parser *p) { moe8_tc_flush(&p->out, p->cur); }
static void emit_content(toolcall_parser *p, const char *s, size_t n) { moe8_tc_content(&p->out, p->cur, s, n); }
static void emit_args(toolcall_parser *p, const char *s, size_t n) { moe8_tc_args(&p->out, p->cur, s, n); }

static void lit_begin(toolcall_parser *p, const char *a, int next_a, const char *b, int next_b, size_t pos) {
    p->lit[0] = a;
    p->lit[1] = b;
    p->lit_next[0] = next_a;
    p->lit_next[1] = next_b;
    p->lit_alive[0] = 1;
    p->lit_alive[1] = b != NULL;
    p->lit_pos = pos;
    p->st = S_LIT;
}

static void raw_reset(toolcall_parser *p) {
    p->raw.n = 0;
    p->raw_reset = 1;
}

/* The name is known: the call is reported, with any arguments read before it. */
static void report(toolcall_parser *p, const char *name, size_t n) {
    const toolcall_sink *k = p->out.k;
    flush(p);
    p->cur = p->n_calls++;
    p->reported = 1;
    if (k->call_begin) k->call_begin(k->u, p->cur, name, n);
    if (p->hold.n) emit_args(p, p->hold.p, p->hold.n);
    p->hold.n = 0;
}

static void call_complete(toolcall_parser *p) {
    const toolcall_sink *k = p->out.k;
    if (!p->have_args) emit_args(p, "{}", 2);
    flush(p);
    if (k->call_end) k->call_end(k->u, p->cur, 1);
    p->reported = p->have_name = p->have_args = 0;
    p->seg_calls++;
    raw_reset(p);
}

static void seg_done(toolcall_parser *p) {
    p->st = S_TEXT;
    p->tx.after_call = 1;
    raw_reset(p);
}

static void call_reset(toolcall_parser *p) {
    p->have_name = p->have_args = 0;
    p->name.n = p->hold.n = 0;
}

static void step(toolcall_parser *p, unsigned char c);

/* A byte that cannot go on: see the file's header. */
static void brk(toolcall_parser *p, unsigned char c) {
    const toolcall_sink *k = p->out.k;
    char again[64];
    size_t n_again = p->st == S_LIT ? p->lit_pos : 0;
    if (n_again > p->raw.n || n_again > sizeof again) n_again = 0;
    if (!p->raw.n) need(p, moe8_buf_add(&p->raw, "", 0)); /* raw.p is then a string */
    if (p->out.oom) return;
    if (p->reported) {
        flush(p);
        if (k->call_end) k->call_end(k->u, p->cur, 0);
        p->reported = 0;
    }
    memcpy(again, p->raw.p + p->raw.n - n_again, n_again);
    emit_content(p, p->raw.p, p->raw.n - n_again);
    p->raw.n = 0;
    call_reset(p);
    p->st = S_TEXT;
    p->tx.after_call = 0;
    p->tx.held = 0;
    for (size_t i = 0; i < n_again; i++) step(p, (unsigned char)again[i]);
    step(p, c);
}

static void start_block(toolcall_parser *p) {
    p->raw.n = 0;
    need(p, moe8_buf_add(&p->raw, p->tx.marker, p->tx.marker_n));
    p->seg_calls = 0;
    call_reset(p);
    switch (p->f) {
    case TOOLCALL_HERMES: p->st = S_OBJ; p->co = C_OPEN; p->co_after = H_CLOSE; break;
    case TOOLCALL_MISTRAL: p->st = M_START; break;
    default: p->st = D_CALLS; break;
    }
}


/* A literal (or one of two) matched whole: what it means. */
static int lit_done(toolcall_parser *p, int next) {
    switch (next) {
    case H_DONE: call_complete(p); seg_done(p); return R_OK;
    case M_ARGS_TAG: report(p, p->name.p, p->name.n); p->st = M_ARGS_START; return R_OK;
    case D_CALL: call_reset(p); p->st = D_PRE; return R_OK;
    case D_SEP: /* V3 "function<｜tool▁sep｜>NAME\n", V3.1 "NAME<｜tool▁sep｜>{" */
        p->v31 = p->name.n != 8 || memcmp(p->name.p, "function", 8);
        if (p->v31) { /* reported when its arguments begin: "func<｜tool▁sep｜>x\n" is not a call */
            p->st = D_ARGS_START;
        } else {
            p->name.n = 0;
            p->st = D_NAME;
        }
        return R_OK;
    case D_JSON: p->st = D_ARGS_START; return R_OK;
    case D_FENCE_DONE: p->st = D_END; return R_OK;
    case D_CALL_DONE: call_complete(p); p->st = D_CALLS; return R_OK;
    case D_SEG_END: seg_done(p); return R_OK;
    default: return R_BREAK;
    }
}

static int lit_byte(toolcall_parser *p, unsigned char c) {
    int alive = 0;
    for (int i = 0; i < 2; i++) {
        if (p->lit_alive[i] && (unsigned char)p->lit[i][p->lit_pos] != c) p->lit_alive[i] = 0;
        alive |= p->lit_alive[i];
    }
    if (!alive) return R_BREAK;
    p->lit_pos++;
    for (int i = 0; i < 2; i++)
        if (p->lit_alive[i] && !p->lit[i][p->lit_pos]) return lit_done(p, p->lit_next[i]);
    return R_OK;
}

/* The value of a call object's key is complete. */
static int value_done(toolcall_parser *p) {
    if (p->kind == K_NAME) {
        cJSON *s = cJSON_ParseWithLength(p->name.p, p->name.n);
        int ok = cJSON_IsString(s) && s->valuestring[0];
        if (ok) report(p, s->valuestring, strlen(s->valuestring));
        cJSON_Delete(s);
        if (!ok) return R_BREAK;
        p->have_name = 1;
    } else if (p->kind == K_ARGS) {
        p->have_args = 1;
    }
    p->co = C_NEXT;
    return R_OK;
}

static int obj_done(toolcall_parser *p) {
    if (!p->have_name) return R_BREAK;
    if (p->co_after == H_CLOSE) { /* the call ends at </tool_call> */
        p->st = H_CLOSE;
        return R_OK;
    }
    call_complete(p);
    if (p->co_after == M_SINGLE) seg_done(p);
    else p->st = p->co_after;
    return R_OK;
}

static int obj_byte(toolcall_parser *p, unsigned char c) {
    int r;
    switch (p->co) {
    case C_OPEN:
        if (is_ws(c)) return R_OK;
        if (c != '{') return R_BREAK;
        call_reset(p);
        p->co = C_FIRST;
        return R_OK;
    case C_FIRST:
    case C_KEYSTART:
        if (is_ws(c)) return R_OK;
        if (c == '}' && p->co == C_FIRST) return obj_done(p);
        if (c != '"') return R_BREAK;
        p->key.n = 0;
        js_start(&p->js, 0, &p->key);
        js_byte(&p->js, c);
        p->co = C_KEY;
        return R_OK;
    case C_KEY:
        r = js_byte(&p->js, c);
        if (r == JS_BAD) return R_BREAK;
        if (r == JS_DONE) {
            p->kind = !strcmp(p->key.p, "\"name\"") ? K_NAME : !strcmp(p->key.p, "\"arguments\"") ? K_ARGS : K_OTHER;
            if ((p->kind == K_NAME && p->have_name) || (p->kind == K_ARGS && p->have_args)) return R_BREAK;
            p->co = C_COLON;
        }
        return R_OK;
    case C_COLON:
        if (is_ws(c)) return R_OK;
        if (c != ':') return R_BREAK;
        p->co = C_VSTART;
        return R_OK;
    case C_VSTART:
        if (is_ws(c)) return R_OK;
        if (p->kind == K_NAME) {
            if (c != '"') return R_BREAK;
            p->name.n = 0;
            js_start(&p->js, 0, &p->name);
        } else if (p->kind == K_ARGS) {
            if (c != '{') return R_BREAK;
            js_start(&p->js, 1, p->reported ? &p->out.abuf : &p->hold);
            if (p->reported && p->out.cbuf.n) flush(p);
        } else {
            js_start(&p->js, 0, NULL);
        }
        p->co = C_VALUE;
        /* fall through */
    case C_VALUE:
        r = js_byte(&p->js, c);
        if (p->js.oom) p->out.oom = 1;
        if (r == JS_BAD) return R_BREAK;
        if (r == JS_MORE) return R_OK;
        if (value_done(p) == R_BREAK) return R_BREAK;
        return r == JS_END ? R_AGAIN : R_OK;
    default: /* C_NEXT */
        if (is_ws(c)) return R_OK;
        if (c == ',') {
            p->co = C_KEYSTART;
            return R_OK;
        }
        if (c == '}') return obj_done(p);
        return R_BREAK;
    }
}

/* An arguments object scanned on its own (mistral v11, deepseek). */
static int args_byte(toolcall_parser *p, unsigned char c, int next) {
    int r = js_byte(&p->js, c);
    if (p->js.oom) p->out.oom = 1;
    if (r == JS_BAD || r == JS_END) return R_BREAK;
    if (r == JS_DONE) {
        p->have_args = 1;
        if (next == M_ARGS) { /* mistral v11: the call ends with its arguments */
            call_complete(p);
            seg_done(p);
        } else {
            p->st = next;
        }
    }
    return R_OK;
}

static int start_args(toolcall_parser *p, unsigned char c, int norm, int st) {
    if (is_ws(c)) return R_OK;
    if (c != '{') return R_BREAK;
    if (p->out.cbuf.n) flush(p);
    js_start(&p->js, norm, &p->out.abuf);
    p->st = st;
    return R_AGAIN;
}

static int is_name_byte(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.';
}

static int name_byte(toolcall_parser *p, unsigned char c) {
    char ch = (char)c;
    if (p->name.n >= NAME_MAX_BYTES) return R_BREAK;
    need(p, moe8_buf_add(&p->name, &ch, 1));
    return R_OK;
}

/* Whitespace, then the literal a (or b), whose first byte c must be. */
static int ws_then(toolcall_parser *p, unsigned char c, const char *a, int next_a, const char *b, int next_b) {
    if (is_ws(c)) return R_OK;
    if (c != (unsigned char)a[0]) return R_BREAK;
    lit_begin(p, a, next_a, b, next_b, 1);
    return R_OK;
}

/* A {"name", "arguments"} object starts with c; then state `after`. */
static int obj_begin(toolcall_parser *p, int after) {
    p->st = S_OBJ;
    p->co = C_OPEN;
    p->co_after = after;
    return R_AGAIN;
}

static int mistral_byte(toolcall_parser *p, unsigned char c) {
    if (is_ws(c) && p->st != M_NAME && p->st != M_ARGS) return R_OK;
    switch (p->st) {
    case M_START: /* [ an array, { a lone object, or a v11 name */
        if (c == '[') return p->st = M_ARR_FIRST, R_OK;
        if (c == '{') return obj_begin(p, M_SINGLE);
        if (!is_name_byte(c)) return R_BREAK;
        p->name.n = 0;
        p->st = M_NAME;
        return name_byte(p, c);
    case M_ARR_FIRST:
    case M_ARR_ELEM:
        if (c == ']' && p->st == M_ARR_FIRST) return seg_done(p), R_OK;
        return c == '{' ? obj_begin(p, M_ARR_NEXT) : R_BREAK;
    case M_ARR_NEXT:
        if (c == ',') return p->st = M_ARR_ELEM, R_OK;
        if (c != ']') return R_BREAK;
        seg_done(p);
        return R_OK;
    case M_NAME:
        if (is_name_byte(c)) return name_byte(p, c);
        if (c == '[') return lit_begin(p, M_ARGS_MARK, M_ARGS_TAG, NULL, 0, 1), R_OK;
        if (c != '{') return R_BREAK;
        report(p, p->name.p, p->name.n);
        return start_args(p, c, 1, M_ARGS);
    case M_ARGS_START: return start_args(p, c, 1, M_ARGS);
    case M_ARGS: return args_byte(p, c, M_ARGS);
    default: return R_BREAK;
    }
}

static int deepseek_byte(toolcall_parser *p, unsigned char c) {
    switch (p->st) {
    case D_CALLS: return ws_then(p, c, D_CALL_BEGIN, D_CALL, D_END_ALL, D_SEG_END);
    case D_PRE: /* the type (V3) or the name (V3.1), up to the separator */
        if (c == '<') {
            if (!p->name.n) return R_BREAK;
            lit_begin(p, D_SEP_MARK, D_SEP, NULL, 0, 1);
            return R_OK;
        }
        if (c < 0x20 || c == '`' || c == '>') return R_BREAK;
        return name_byte(p, c);
    case D_NAME: /* V3: the name runs to "\n" */
        if (c == '\n' && p->name.n) {
            report(p, p->name.p, p->name.n);
            lit_begin(p, "```json", D_JSON, NULL, 0, 0);
            return R_OK;
        }
        if (c < 0x20 || c == '<' || c == '`') return R_BREAK;
        return name_byte(p, c);
    case D_ARGS_START:
        if (c == '{' && p->v31 && !p->reported) report(p, p->name.p, p->name.n);
        return start_args(p, c, 0, D_ARGS);
    case D_ARGS: return args_byte(p, c, p->v31 ? D_END : D_FENCE);
    case D_FENCE: return ws_then(p, c, "```", D_FENCE_DONE, NULL, 0);
    case D_END: return ws_then(p, c, D_CALL_END, D_CALL_DONE, NULL, 0);
    default: return R_BREAK;
    }
}

/* A byte inside a block. */
static int seg_byte(toolcall_parser *p, unsigned char c) {
    if (p->st == S_LIT) return lit_byte(p, c);
    if (p->st == S_OBJ) return obj_byte(p, c);
    if (p->st == H_CLOSE) return ws_then(p, c, H_END, H_DONE, NULL, 0);
    return p->f == TOOLCALL_MISTRAL ? mistral_byte(p, c) : deepseek_byte(p, c);
}

static void step(toolcall_parser *p, unsigned char c) {
    for (;;) {
        int r;
        char ch = (char)c;
        if (p->st == S_TEXT) {
            if (moe8_tc_text_byte(&p->tx, &p->out, p->cur, c)) start_block(p);
            return;
        }
        p->raw_reset = 0;
        r = seg_byte(p, c);
        if (r == R_AGAIN) continue;
        if (r == R_BREAK) {
            brk(p, c);
            return;
        }
        if (!p->raw_reset) need(p, moe8_buf_add(&p->raw, &ch, 1));
        return;
    }
}

/* ---- the API --------------------------------------------------------------------------- */

toolcall_format moe8_toolcall_format_from_name(const char *name) {
    if (!name) return TOOLCALL_INVALID;
    if (!strcmp(name, "none")) return TOOLCALL_NONE;
    if (!strcmp(name, "hermes")) return TOOLCALL_HERMES;
    if (!strcmp(name, "deepseek_v3") || !strcmp(name, "deepseekv3")) return TOOLCALL_DEEPSEEK_V3;
    if (!strcmp(name, "mistral")) return TOOLCALL_MISTRAL;
    if (!strcmp(name, "glm45") || !strcmp(name, "glm4_moe")) return TOOLCALL_GLM45;
    if (!strcmp(name, "glm47")) return TOOLCALL_GLM47;
    if (!strcmp(name, "minimax_m2")) return TOOLCALL_MINIMAX_M2;
    if (!strcmp(name, "qwen3_coder")) return TOOLCALL_QWEN3_CODER;
    if (!strcmp(name, "openai") || !strcmp(name, "harmony")) return TOOLCALL_HARMONY;
    return TOOLCALL_INVALID;
}

const char *moe8_toolcall_format_name(toolcall_format f) {
    switch (f) {
    case TOOLCALL_NONE: return "none";
    case TOOLCALL_HERMES: return "hermes";
    case TOOLCALL_DEEPSEEK_V3: return "deepseek_v3";
    case TOOLCALL_MISTRAL: return "mistral";
    case TOOLCALL_GLM45: return "glm45";
    case TOOLCALL_GLM47: return "glm47";
    case TOOLCALL_MINIMAX_M2: return "minimax_m2";
    case TOOLCALL_QWEN3_CODER: return "qwen3_coder";
    case TOOLCALL_HARMONY: return "openai";
    default: return NULL;
    }
}

toolcall_format moe8_toolcall_detect(const char *src) {
    if (!src) return TOOLCALL_NONE;
    if (moe8_harmony_template(src)) return TOOLCALL_HARMONY;
    if (strstr(src, "<minimax:tool_call>")) return TOOLCALL_MINIMAX_M2;
    if (strstr(src, "<arg_key>")) /* GLM-4.7's system prompt shows no newline before the first key */
        return strstr(src, "{function-name}<arg_key>") ? TOOLCALL_GLM47 : TOOLCALL_GLM45;
    if (strstr(src, D_BEGIN)) return TOOLCALL_DEEPSEEK_V3;
    if (strstr(src, "<function=") && strstr(src, "<parameter=")) /* Qwen3.5's, Qwen3-Coder's */
        return TOOLCALL_QWEN3_CODER;
    if (strstr(src, H_START)) return TOOLCALL_HERMES;
    if (strstr(src, M_MARK)) return TOOLCALL_MISTRAL;
    return TOOLCALL_NONE;
}

toolcall_parser *moe8_toolcall_new(toolcall_format f, const struct cJSON *tools) {
    toolcall_parser *p;
    const int xml = TOOLCALL_IS_XML(f);
    if (f != TOOLCALL_NONE && f != TOOLCALL_HERMES && f != TOOLCALL_DEEPSEEK_V3 && f != TOOLCALL_MISTRAL && !xml &&
        f != TOOLCALL_HARMONY)
        return NULL;
    if (!(p = calloc(1, sizeof *p))) return NULL;
    p->f = f;
    if ((xml && !(p->x = moe8_tcx_new(f, tools))) || (f == TOOLCALL_HARMONY && !(p->h = moe8_tch_new(tools)))) {
        free(p);
        return NULL;
    }
    p->tx.marker = f == TOOLCALL_HERMES ? H_START : f == TOOLCALL_MISTRAL ? M_MARK
                : f == TOOLCALL_DEEPSEEK_V3 ? D_BEGIN : NULL;
    p->tx.marker_n = p->tx.marker ? strlen(p->tx.marker) : 0;
    p->st = S_TEXT;
    return p;
}

toolcall_parser *moe8_toolcall_new_like(const toolcall_parser *p) {
    return p ? moe8_toolcall_new(p->f, p->h ? moe8_tch_tools(p->h) : moe8_tcx_tools(p->x)) : NULL;
}

int moe8_toolcall_feed(toolcall_parser *p, const char *s, size_t n, const toolcall_sink *k) {
    if (p && p->x) return moe8_tcx_feed(p->x, s, n, k);
    if (p && p->h) return moe8_tch_feed(p->h, s, n, k);
    if (!p || p->out.oom) return -1;
    p->out.k = k;
    for (size_t i = 0; i < n && !p->out.oom; i++) step(p, (unsigned char)s[i]);
    if (!p->out.oom) flush(p);
    return p->out.oom ? -1 : 0;
}

/* At the end of the output, in a block: a call complete but for its closing
 * tag, or a block whose calls are all done, is fine. */
static int ends_well(const toolcall_parser *p) {
    int lit_next = p->st == S_LIT ? p->lit_next[0] : -1;
    if (p->st == H_CLOSE || lit_next == H_DONE) return 2; /* the call is to complete */
    if (p->st == M_ARR_NEXT) return 1;
    if ((p->st == D_CALLS || lit_next == D_CALL) && p->seg_calls) return 1;
    return 0;
}

int moe8_toolcall_finish(toolcall_parser *p, const toolcall_sink *k) {
    int w;
    if (p && p->x) return moe8_tcx_finish(p->x, k);
    if (p && p->h) return moe8_tch_finish(p->h, k);
    if (!p || p->out.oom) return -1;
    p->out.k = k;
    if (p->st == S_TEXT) {
        moe8_tc_text_end(&p->tx, &p->out, p->cur);
    } else if ((w = ends_well(p))) {
        if (w == 2) call_complete(p);
    } else {
        if (p->reported) {
            flush(p);
            if (k->call_end) k->call_end(k->u, p->cur, 0);
        }
        emit_content(p, p->raw.p, p->raw.n);
    }
    p->tx.held = 0;
    p->tx.ws.n = p->raw.n = 0;
    p->tx.after_call = p->reported = 0;
    p->st = S_TEXT;
    flush(p);
    return p->out.oom ? -1 : 0;
}

int moe8_toolcall_count(const toolcall_parser *p) {
    return p ? p->x ? moe8_tcx_count(p->x) : p->h ? moe8_tch_count(p->h) : p->n_calls : 0;
}

void moe8_toolcall_free(toolcall_parser *p) {
    if (!p) return;
    moe8_tcx_free(p->x);
    moe8_tch_free(p->h);
    moe8_buf_free(&p->tx.ws);
    moe8_buf_free(&p->raw);
    moe8_buf_free(&p->key);
    moe8_buf_free(&p->name);
    moe8_buf_free(&p->hold);
    moe8_buf_free(&p->out.cbuf);
    moe8_buf_free(&p->out.abuf);
    free(p);
}
