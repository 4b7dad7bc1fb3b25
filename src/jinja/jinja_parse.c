/*
 * jinja_parse.c — template source -> tokens -> tree (jinja_impl.h), following
 * jinja2 3.1's lexer and parser with trim_blocks and lstrip_blocks on, as
 * Hugging Face's apply_chat_template configures them.
 *
 * Lexing, as jinja2 does it: newlines (\r\n, \r) become \n and one trailing
 * newline of the template is dropped; `{%-`/`{{-`/`{#-` strip all whitespace
 * before the tag, `-%}`/`-}}`/`-#}` all whitespace after it; otherwise
 * (lstrip_blocks) the spaces and tabs between a line start and `{%` or `{#`
 * are dropped, unless `{%+`, and (trim_blocks) one newline after `%}` or `#}`,
 * unless `+%}`. A tag ends at the first `}}`/`%}` outside brackets. String
 * literals take Python's escapes (\n, \t, \xhh, \uXXXX, \ooo, ...).
 *
 * Statements: if/elif/else, for (targets, `if` filter, else), set (names,
 * tuples, namespace attributes, block form), macro, break/continue, raw,
 * generation (HF's marker, rendered as its body), comments. Expressions:
 * literals, lists, tuples, dicts, names, attributes, subscripts and slices,
 * calls with keyword arguments, filters, tests (`is not`), unary -/+/not,
 * + - * / // % ** ~, comparisons (chained), in / not in, and/or, `a if b else c`.
 * Anything else (include, import, extends, block, call, filter and with
 * blocks, do — an extension HF does not load —, recursive loops, *args) is
 * refused with its line and column, as is a filter or test name the
 * interpreter lacks.
 *
 * Bounded: a source of at most SRC_MAX bytes, expressions and blocks nested
 * at most PARSE_MAX_DEPTH deep, the tree in an arena of at most 64 bytes per
 * source byte.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja/jinja_impl.h"

#define PARSE_MAX_DEPTH 200
#define SRC_MAX ((size_t)1 << 20) /* chat templates are tens of KiB */

/* ---- arena ------------------------------------------------------------------ */

void *ja_alloc(jarena *a, size_t n) {
    ja_chunk *c = a->head;
    n = (n + 15) & ~(size_t)15;
    if (!n) n = 16;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > 16384 ? n : 16384;
        if (a->total + cap + sizeof *c > a->limit || !(c = malloc(sizeof *c + cap))) return NULL;
        a->total += cap + sizeof *c;
        c->cap = cap;
        c->used = 0;
        if (n > 4096 && a->head) { /* a big block: keep filling the current chunk */
            c->next = a->head->next;
            a->head->next = c;
        } else {
            c->next = a->head;
            a->head = c;
        }
    }
    c->used += n;
    return c->data + c->used - n;
}

void ja_free(jarena *a) {
    for (ja_chunk *c = a->head, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    a->head = NULL;
    a->total = 0;
}

void jinja_line_col(const char *src, size_t len, size_t pos, int *line, int *col) {
    int l = 1, k = 1;
    for (size_t i = 0; i < pos && i < len; i++) {
        if (src[i] == '\n') l++, k = 1;
        else if (((unsigned char)src[i] & 0xc0) != 0x80) k++;
    }
    *line = l;
    *col = k;
}

/* ---- tokens -------------------------------------------------------------------- */

typedef enum {
    TK_DATA, TK_VAR_BEGIN, TK_VAR_END, TK_BLOCK_BEGIN, TK_BLOCK_END, TK_NAME, TK_STRING,
    TK_INT, TK_FLOAT, TK_OP, TK_EOF,
} tk_type;

enum {
    O_ADD, O_SUB, O_DIV, O_FDIV, O_MUL, O_MOD, O_POW, O_TILDE, O_LBRACKET, O_RBRACKET,
    O_LPAREN, O_RPAREN, O_LBRACE, O_RBRACE, O_EQ, O_NE, O_GT, O_GE, O_LT, O_LE, O_ASSIGN,
    O_DOT, O_COLON, O_PIPE, O_COMMA, O_SEMI,
};

static const char *const OP_TEXT[] = {
    "+", "-", "/", "//", "*", "%", "**", "~", "[", "]", "(", ")", "{", "}", "==", "!=", ">",
    ">=", "<", "<=", "=", ".", ":", "|", ",", ";",
};

typedef struct {
    uint8_t type, op;
    uint32_t pos;
    const char *s;   /* TK_DATA, TK_NAME, TK_STRING (decoded) */
    size_t n;
    int64_t i;
    double f;
} jtok;

typedef struct {
    jinja_template *t;
    jtok *tk;
    size_t n_tk, cap_tk, i;
    int depth, loop_depth, in_macro;
    moe8_error *err;
} jparser;

static int pfail(jparser *P, size_t pos, moe8_status code, const char *fmt, ...)
    MOE8_PRINTF(4, 5);

static int pfail(jparser *P, size_t pos, moe8_status code, const char *fmt, ...) {
    char msg[MOE8_ERROR_MESSAGE_MAX];
    int line, col;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    jinja_line_col(P->t->src, P->t->len, pos, &line, &col);
    moe8_fail(P->err, code, (int64_t)pos, "%s line %d, column %d: %s", P->t->name, line, col, msg);
    return -1;
}

static jtok *push_tok(jparser *P, tk_type type, size_t pos) {
    if (P->n_tk == P->cap_tk) {
        size_t cap = P->cap_tk ? 2 * P->cap_tk : 256;
        jtok *tk = realloc(P->tk, cap * sizeof *tk);
        if (!tk) {
            pfail(P, pos, MOE8_ERR_NOMEM, "out of memory");
            return NULL;
        }
        P->tk = tk;
        P->cap_tk = cap;
    }
    memset(&P->tk[P->n_tk], 0, sizeof P->tk[0]);
    P->tk[P->n_tk].type = (uint8_t)type;
    P->tk[P->n_tk].pos = (uint32_t)pos;
    return &P->tk[P->n_tk++];
}

/* ---- lexer: whitespace ---------------------------------------------------------- */

/* Whitespace code point at s[i] (Python's str.isspace), its length in *k. */
static int ws_at(const char *s, size_t len, size_t i, size_t *k) {
    size_t j = i;
    uint32_t cp = ju_next(s, len, &j);
    *k = j - i;
    return ju_isspace(cp);
}

static size_t skip_ws(const char *s, size_t len, size_t i) {
    size_t k;
    while (i < len && ws_at(s, len, i, &k)) i += k;
    return i;
}

/* End of s[a..b) with trailing whitespace removed (str.rstrip()). */
static size_t rstrip_end(const char *s, size_t a, size_t b) {
    while (b > a) {
        size_t j = b - 1, k;
        while (j > a && ((unsigned char)s[j] & 0xc0) == 0x80) j--;
        if (!ws_at(s, b, j, &k)) break;
        b = j;
    }
    return b;
}

/* lstrip_blocks: s[a..b) is the text before a block or comment tag. */
static size_t lstrip_end(const char *s, size_t a, size_t b, int line_starting) {
    size_t l = b;
    int newline = 0;
    while (l > a && s[l - 1] != '\n') l--;
    if (l > a) newline = 1;
    if ((newline || line_starting) && l < b && skip_ws(s, b, l) == b) return l;
    return b;
}

/* ---- lexer: literals ----------------------------------------------------------- */

static int hexval(char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* Python's unicode-escape decoding of a literal body s[0..n) into out (at
 * most n bytes: no escape grows). jinja2 first turns non-ASCII characters
 * into backslash escapes, so a backslash before one keeps its escape text. */
static int decode_string(jparser *P, size_t pos, const char *s, size_t n, char *out, size_t *n_out) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int d;
        if (s[i] != '\\' || i + 1 >= n) {
            out[o++] = s[i++];
            continue;
        }
        char e = s[i + 1];
        i += 2;
        switch (e) {
        case '\n': continue;
        case '\\': out[o++] = '\\'; continue;
        case '\'': out[o++] = '\''; continue;
        case '"': out[o++] = '"'; continue;
        case 'a': out[o++] = '\a'; continue;
        case 'b': out[o++] = '\b'; continue;
        case 'f': out[o++] = '\f'; continue;
        case 'n': out[o++] = '\n'; continue;
        case 'r': out[o++] = '\r'; continue;
        case 't': out[o++] = '\t'; continue;
        case 'v': out[o++] = '\v'; continue;
        case 'x': case 'u': case 'U': {
            int want = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            cp = 0;
            for (int k = 0; k < want; k++) {
                if (i + (size_t)k >= n || (d = hexval(s[i + (size_t)k])) < 0)
                    return pfail(P, pos, MOE8_ERR_FORMAT, "truncated \\%c escape in a string", e);
                cp = cp * 16 + (uint32_t)d;
            }
            i += (size_t)want;
            if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
                return pfail(P, pos, MOE8_ERR_UNSUPPORTED,
                             "string escape \\%c gives U+%04X, which is not a character", e,
                             (unsigned)cp);
            o += ju_put(out + o, cp);
            continue;
        }
        case 'N':
            return pfail(P, pos, MOE8_ERR_UNSUPPORTED, "\\N{...} escapes are not supported");
        default:
            if (e >= '0' && e <= '7') {
                cp = (uint32_t)(e - '0');
                for (int k = 0; k < 2 && i < n && s[i] >= '0' && s[i] <= '7'; k++)
                    cp = cp * 8 + (uint32_t)(s[i++] - '0');
                o += ju_put(out + o, cp);
                continue;
            }
            out[o++] = '\\';
            if ((unsigned char)e >= 0x80) { /* backslashreplace text, then the escape is literal */
                size_t j = i - 1;
                char tmp[16];
                cp = ju_next(s, n, &j);
                int k = snprintf(tmp, sizeof tmp, cp <= 0xff ? "x%02x" : cp <= 0xffff ? "u%04x"
                                 : "U%08x", (unsigned)cp);
                memcpy(out + o, tmp, (size_t)k); /* at most 2x the input: lex_string sizes for 3x */
                o += (size_t)k;
                i = j;
                continue;
            }
            out[o++] = e;
        }
    }
    *n_out = o;
    return 0;
}

static int lex_string(jparser *P, size_t *pi) {
    const char *s = P->t->src;
    size_t len = P->t->len, start = *pi, i = start + 1, n_out = 0;
    char q = s[start], *buf;
    jtok *t;
    while (i < len && s[i] != q) i += s[i] == '\\' ? 2 : 1;
    if (i >= len) return pfail(P, start, MOE8_ERR_FORMAT, "unterminated string");
    /* escapes shrink, except "\<non-ASCII>" which may grow to 10 bytes */
    if (!(buf = ja_alloc(&P->t->arena, 3 * (i - start) + 16)))
        return pfail(P, start, MOE8_ERR_NOMEM, "out of memory");
    if (decode_string(P, start, s + start + 1, i - start - 1, buf, &n_out)) return -1;
    if (!(t = push_tok(P, TK_STRING, start))) return -1;
    t->s = buf;
    t->n = n_out;
    *pi = i + 1;
    return 0;
}

static int is_digit(char ch) { return ch >= '0' && ch <= '9'; }

/* digits with single underscores between them, from i; returns the end. */
static size_t digits(const char *s, size_t len, size_t i, int (*ok)(char)) {
    if (i >= len || !ok(s[i])) return i;
    i++;
    while (i < len && (ok(s[i]) || (s[i] == '_' && i + 1 < len && ok(s[i + 1])))) i++;
    return i;
}

static int is_hex(char ch) { return hexval(ch) >= 0; }
static int is_oct(char ch) { return ch >= '0' && ch <= '7'; }
static int is_bin(char ch) { return ch == '0' || ch == '1'; }

static int lex_number(jparser *P, size_t *pi) {
    const char *s = P->t->src;
    size_t len = P->t->len, start = *pi, i, e;
    char tmp[128];
    size_t k = 0;
    int is_float = 0, base = 10;
    jtok *t;
    if (s[start] == '0' && start + 2 < len && strchr("xXoObB", s[start + 1])) {
        char b = (char)(s[start + 1] | 0x20);
        base = b == 'x' ? 16 : b == 'o' ? 8 : 2;
        i = start + 2;
        if (i < len && s[i] == '_') i++;
        e = digits(s, len, i, base == 16 ? is_hex : base == 8 ? is_oct : is_bin);
        if (e == i) return pfail(P, start, MOE8_ERR_FORMAT, "malformed number");
        i = e;
    } else {
        i = digits(s, len, start, is_digit);
        if (i + 1 < len && s[i] == '.' && is_digit(s[i + 1])) {
            i = digits(s, len, i + 1, is_digit);
            is_float = 1;
        }
        if (i < len && (s[i] == 'e' || s[i] == 'E')) {
            size_t j = i + 1;
            if (j < len && (s[j] == '+' || s[j] == '-')) j++;
            e = digits(s, len, j, is_digit);
            if (e > j) i = e, is_float = 1;
        }
    }
    for (size_t j = base == 10 ? start : start + 2; j < i; j++)
        if (s[j] != '_') {
            if (k + 1 >= sizeof tmp) return pfail(P, start, MOE8_ERR_UNSUPPORTED, "number too long");
            tmp[k++] = s[j];
        }
    tmp[k] = '\0';
    if (!(t = push_tok(P, is_float ? TK_FLOAT : TK_INT, start))) return -1;
    errno = 0;
    if (is_float) {
        t->f = strtod(tmp, NULL);
    } else {
        unsigned long long v = strtoull(tmp, NULL, base);
        if (errno || v > INT64_MAX)
            return pfail(P, start, MOE8_ERR_UNSUPPORTED, "integer %s is beyond 64 bits", tmp);
        t->i = (int64_t)v;
    }
    *pi = i;
    return 0;
}

static int is_name_start(char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_'; }
static int is_name_char(char ch) { return is_name_start(ch) || is_digit(ch); }

/* One operator at *pi, tracking bracket balance. */
static int lex_op(jparser *P, size_t *pi, char *stack, int *depth) {
    const char *s = P->t->src;
    size_t len = P->t->len, i = *pi;
    int op = -1, best = 0;
    jtok *t;
    for (int k = 0; k < (int)(sizeof OP_TEXT / sizeof *OP_TEXT); k++) {
        int n = (int)strlen(OP_TEXT[k]);
        if (n > best && i + (size_t)n <= len && !memcmp(s + i, OP_TEXT[k], (size_t)n)) op = k, best = n;
    }
    if (op < 0) {
        size_t j = i;
        uint32_t cp = ju_next(s, len, &j);
        return pfail(P, i, MOE8_ERR_FORMAT, "unexpected character U+%04X '%.*s'", (unsigned)cp,
                     (int)(j - i), s + i);
    }
    if (op == O_LPAREN || op == O_LBRACKET || op == O_LBRACE) {
        if (*depth >= PARSE_MAX_DEPTH)
            return pfail(P, i, MOE8_ERR_UNSUPPORTED, "brackets nest deeper than %d", PARSE_MAX_DEPTH);
        stack[(*depth)++] = s[i] == '(' ? ')' : s[i] == '[' ? ']' : '}';
    } else if (op == O_RPAREN || op == O_RBRACKET || op == O_RBRACE) {
        if (*depth == 0) return pfail(P, i, MOE8_ERR_FORMAT, "unexpected '%c'", s[i]);
        if (stack[*depth - 1] != s[i])
            return pfail(P, i, MOE8_ERR_FORMAT, "unexpected '%c', expected '%c'", s[i],
                         stack[*depth - 1]);
        (*depth)--;
    }
    if (!(t = push_tok(P, TK_OP, i))) return -1;
    t->op = (uint8_t)op;
    *pi = i + (size_t)best;
    return 0;
}

/* ---- lexer: tags ------------------------------------------------------------- */

/* After `{%`+sign at i: `\s*raw\s*(-%}\s*|%})`? Returns the end or 0. */
static size_t raw_begin(const char *s, size_t len, size_t i) {
    i = skip_ws(s, len, i);
    if (i + 3 > len || memcmp(s + i, "raw", 3) || (i + 3 < len && is_name_char(s[i + 3]))) return 0;
    i = skip_ws(s, len, i + 3);
    if (i + 3 <= len && !memcmp(s + i, "-%}", 3)) return skip_ws(s, len, i + 3);
    if (i + 2 <= len && !memcmp(s + i, "%}", 2)) return i + 2;
    return 0;
}

/* Find `{%[-+]?\s*endraw\s*(+%}|-%}\s*|%}\n?)` from i: its start in *at, its end returned (0: none). */
static size_t raw_end(const char *s, size_t len, size_t i, size_t *at, char *sign) {
    for (; i + 1 < len; i++) {
        size_t j;
        if (s[i] != '{' || s[i + 1] != '%') continue;
        j = i + 2;
        *sign = j < len && (s[j] == '-' || s[j] == '+') ? s[j++] : 0;
        j = skip_ws(s, len, j);
        if (j + 6 > len || memcmp(s + j, "endraw", 6)) continue;
        j = skip_ws(s, len, j + 6);
        *at = i;
        if (j + 3 <= len && !memcmp(s + j, "+%}", 3)) return j + 3;
        if (j + 3 <= len && !memcmp(s + j, "-%}", 3)) return skip_ws(s, len, j + 3);
        if (j + 2 <= len && !memcmp(s + j, "%}", 2)) return j + 2 + (j + 2 < len && s[j + 2] == '\n');
    }
    return 0;
}

static int push_data(jparser *P, size_t a, size_t b) {
    jtok *t;
    if (b <= a) return 0;
    if (!(t = push_tok(P, TK_DATA, a))) return -1;
    t->s = P->t->src + a;
    t->n = b - a;
    return 0;
}

/* The tokens of one {{ }} or {% %} from just after its start (and sign);
 * returns the position after its end. */
static int lex_tag(jparser *P, size_t begin, int block, size_t *pi, int *line_starting) {
    const char *s = P->t->src;
    size_t len = P->t->len, i = *pi, end = 0;
    char stack[PARSE_MAX_DEPTH];
    int depth = 0;
    for (;;) {
        i = skip_ws(s, len, i);
        if (i >= len)
            return pfail(P, begin, MOE8_ERR_FORMAT, "unexpected end of template: this '%s' is not "
                         "closed", block ? "{%" : "{{");
        if (depth == 0) {
            if (!block && i + 3 <= len && !memcmp(s + i, "-}}", 3)) end = skip_ws(s, len, i + 3);
            else if (!block && i + 2 <= len && !memcmp(s + i, "}}", 2)) end = i + 2;
            else if (block && i + 3 <= len && !memcmp(s + i, "+%}", 3)) end = i + 3;
            else if (block && i + 3 <= len && !memcmp(s + i, "-%}", 3)) end = skip_ws(s, len, i + 3);
            else if (block && i + 2 <= len && !memcmp(s + i, "%}", 2))
                end = i + 2 + (i + 2 < len && s[i + 2] == '\n');
            if (end) {
                if (!push_tok(P, block ? TK_BLOCK_END : TK_VAR_END, i)) return -1;
                *line_starting = s[end - 1] == '\n';
                *pi = end;
                return 0;
            }
        }
        if (is_name_start(s[i])) {
            size_t j = i;
            jtok *t;
            while (j < len && is_name_char(s[j])) j++;
            if (!(t = push_tok(P, TK_NAME, i))) return -1;
            t->s = s + i;
            t->n = j - i;
            i = j;
        } else if (is_digit(s[i])) {
            if (lex_number(P, &i)) return -1;
        } else if (s[i] == '\'' || s[i] == '"') {
            if (lex_string(P, &i)) return -1;
        } else if (lex_op(P, &i, stack, &depth)) {
            return -1;
        }
    }
}

/* A comment from just after `{#`+sign: find `#}`, apply its sign. */
static int lex_comment(jparser *P, size_t begin, size_t *pi, int *line_starting) {
    const char *s = P->t->src;
    size_t len = P->t->len, i = *pi, end;
    for (; i + 1 < len; i++)
        if (s[i] == '#' && s[i + 1] == '}') break;
    if (i + 1 >= len) return pfail(P, begin, MOE8_ERR_FORMAT, "missing end of comment tag");
    if (i > *pi && s[i - 1] == '-') end = skip_ws(s, len, i + 2);
    else if (i > *pi && s[i - 1] == '+') end = i + 2;
    else end = i + 2 + (i + 2 < len && s[i + 2] == '\n');
    *line_starting = s[end - 1] == '\n';
    *pi = end;
    return 0;
}

static int lex(jparser *P) {
    const char *s = P->t->src;
    size_t len = P->t->len, pos = 0;
    int line_starting = 1;
    while (pos < len) {
        size_t at = pos, d_end, after;
        char kind, sign;
        while (at + 1 < len && !(s[at] == '{' && (s[at + 1] == '{' || s[at + 1] == '%' || s[at + 1] == '#')))
            at++;
        if (at + 1 >= len) {
            if (push_data(P, pos, len)) return -1;
            break;
        }
        kind = s[at + 1];
        sign = at + 2 < len && (s[at + 2] == '-' || s[at + 2] == '+') ? s[at + 2] : 0;
        after = at + 2 + (sign != 0);
        d_end = at;
        if (sign == '-') d_end = rstrip_end(s, pos, at);
        else if (sign != '+' && kind != '{') d_end = lstrip_end(s, pos, at, line_starting);
        if (push_data(P, pos, d_end)) return -1;
        if (kind == '#') {
            if (lex_comment(P, at, &after, &line_starting)) return -1;
            pos = after;
            continue;
        }
        if (kind == '%' && raw_begin(s, len, after)) {
            size_t body = raw_begin(s, len, after), e_at = 0, e;
            char e_sign = 0;
            if (!(e = raw_end(s, len, body, &e_at, &e_sign)))
                return pfail(P, at, MOE8_ERR_FORMAT, "missing end of raw directive");
            d_end = e_at;
            if (e_sign == '-') d_end = rstrip_end(s, body, e_at);
            else if (e_sign != '+') d_end = lstrip_end(s, body, e_at, s[body - 1] == '\n');
            if (push_data(P, body, d_end)) return -1;
            line_starting = s[e - 1] == '\n';
            pos = e;
            continue;
        }
        if (!push_tok(P, kind == '%' ? TK_BLOCK_BEGIN : TK_VAR_BEGIN, at)) return -1;
        if (lex_tag(P, at, kind == '%', &after, &line_starting)) return -1;
        pos = after;
    }
    return push_tok(P, TK_EOF, len) ? 0 : -1;
}

/* ---- parser: helpers ----------------------------------------------------------- */

static jtok *cur(jparser *P) { return &P->tk[P->i]; }
static jtok *peek(jparser *P, size_t k) {
    return P->i + k < P->n_tk ? &P->tk[P->i + k] : &P->tk[P->n_tk - 1];
}
static void next_tok(jparser *P) {
    if (P->tk[P->i].type != TK_EOF) P->i++;
}

static int is_op(const jtok *t, int op) { return t->type == TK_OP && t->op == op; }
static int is_name(const jtok *t, const char *name) {
    return t->type == TK_NAME && t->n == strlen(name) && !memcmp(t->s, name, t->n);
}

/* What a token looks like in an error message. */
static const char *tok_desc(const jtok *t, char *buf, size_t cap) {
    switch (t->type) {
    case TK_NAME: snprintf(buf, cap, "'%.*s'", (int)(t->n > 40 ? 40 : t->n), t->s); break;
    case TK_STRING: snprintf(buf, cap, "a string"); break;
    case TK_INT: case TK_FLOAT: snprintf(buf, cap, "a number"); break;
    case TK_OP: snprintf(buf, cap, "'%s'", OP_TEXT[t->op]); break;
    case TK_VAR_END: snprintf(buf, cap, "the end of the expression ('}}')"); break;
    case TK_BLOCK_END: snprintf(buf, cap, "the end of the statement ('%%}')"); break;
    case TK_EOF: snprintf(buf, cap, "the end of the template"); break;
    default: snprintf(buf, cap, "template text"); break;
    }
    return buf;
}

static int unexpected(jparser *P, const char *wanted) {
    char d[80];
    jtok *t = cur(P);
    return pfail(P, t->pos, MOE8_ERR_FORMAT, "expected %s, got %s", wanted, tok_desc(t, d, sizeof d));
}

static int expect_op(jparser *P, int op) {
    char w[16];
    if (is_op(cur(P), op)) {
        next_tok(P);
        return 0;
    }
    snprintf(w, sizeof w, "'%s'", OP_TEXT[op]);
    return unexpected(P, w);
}

static jnode *new_node(jparser *P, jnode_kind kind, size_t pos) {
    jnode *n = ja_alloc(&P->t->arena, sizeof *n);
    if (!n) {
        pfail(P, pos, MOE8_ERR_NOMEM, "out of memory");
        return NULL;
    }
    memset(n, 0, sizeof *n);
    n->kind = (uint8_t)kind;
    n->pos = (uint32_t)pos;
    return n;
}

/* A growing list of child nodes (copied into the arena when done). */
typedef struct {
    jnode **v;
    uint32_t n, cap;
} kids;

static int kids_push(jparser *P, kids *k, jnode *n) {
    if (k->n == k->cap) {
        uint32_t cap = k->cap ? 2 * k->cap : 4;
        jnode **v = ja_alloc(&P->t->arena, cap * sizeof *v);
        if (!v) return pfail(P, n->pos, MOE8_ERR_NOMEM, "out of memory");
        if (k->n) memcpy(v, k->v, k->n * sizeof *v);
        k->v = v;
        k->cap = cap;
    }
    k->v[k->n++] = n;
    return 0;
}

static void kids_set(jnode *n, const kids *k) {
    n->kids = k->v;
    n->n_kids = k->n;
}

static int enter(jparser *P) {
    if (++P->depth > PARSE_MAX_DEPTH)
        return pfail(P, cur(P)->pos, MOE8_ERR_UNSUPPORTED, "the template nests deeper than %d",
                     PARSE_MAX_DEPTH);
    return 0;
}

/* ---- parser: expressions ------------------------------------------------------- */

static jnode *parse_expression(jparser *P, int with_condexpr);
static jnode *parse_tuple(jparser *P, int simplified, int with_condexpr, int explicit_paren,
                          const char *extra_end);
static jnode *parse_unary(jparser *P, int with_filter);
static jnode *parse_primary(jparser *P);
static jnode *parse_postfix(jparser *P, jnode *node);

static jnode *binop(jparser *P, jnode_kind kind, int op, size_t pos, jnode *a, jnode *b) {
    jnode *n;
    if (!a || !b || !(n = new_node(P, kind, pos))) return NULL;
    n->op = (uint8_t)op;
    n->a = a;
    n->b = b;
    return n;
}

/* (args) of a call, filter or test: positional then name=value. */
static int parse_call_args(jparser *P, jnode *call) {
    kids k = {0};
    int kw_seen = 0;
    if (expect_op(P, O_LPAREN)) return -1;
    while (!is_op(cur(P), O_RPAREN)) {
        jnode *arg;
        if (k.n && expect_op(P, O_COMMA)) return -1;
        if (is_op(cur(P), O_RPAREN)) break;
        if (is_op(cur(P), O_MUL) || is_op(cur(P), O_POW))
            return pfail(P, cur(P)->pos, MOE8_ERR_UNSUPPORTED, "*args and **kwargs are not supported");
        if (cur(P)->type == TK_NAME && is_op(peek(P, 1), O_ASSIGN)) {
            jtok *name = cur(P);
            if (!(arg = new_node(P, N_KWARG, name->pos))) return -1;
            arg->lit = jv_str(name->s, name->n);
            next_tok(P);
            next_tok(P);
            if (!(arg->a = parse_expression(P, 1))) return -1;
            kw_seen = 1;
        } else {
            if (kw_seen)
                return pfail(P, cur(P)->pos, MOE8_ERR_FORMAT,
                             "a positional argument follows a keyword argument");
            if (!(arg = parse_expression(P, 1))) return -1;
        }
        if (kids_push(P, &k, arg)) return -1;
    }
    next_tok(P);
    kids_set(call, &k);
    return 0;
}

static jnode *parse_call(jparser *P, jnode *callee) {
    jnode *n = new_node(P, N_CALL, cur(P)->pos);
    if (!n) return NULL;
    n->a = callee;
    return parse_call_args(P, n) ? NULL : n;
}

/* A dotted name after `|` or `is`. */
static int parse_dotted(jparser *P, const char **s, size_t *len) {
    jtok *t = cur(P);
    if (t->type != TK_NAME) return unexpected(P, "a name");
    *s = t->s;
    *len = t->n;
    next_tok(P);
    if (is_op(cur(P), O_DOT))
        return pfail(P, cur(P)->pos, MOE8_ERR_UNSUPPORTED, "dotted filter and test names are not supported");
    return 0;
}

static jnode *parse_filter(jparser *P, jnode *node) {
    while (is_op(cur(P), O_PIPE)) {
        jnode *f;
        next_tok(P);
        if (!(f = new_node(P, N_FILTER, cur(P)->pos))) return NULL;
        const char *s;
        size_t len;
        int id;
        if (parse_dotted(P, &s, &len)) return NULL;
        if ((id = jfilter_id(s, len)) < 0) {
            pfail(P, f->pos, MOE8_ERR_UNSUPPORTED, "filter '%.*s' is not supported", (int)len, s);
            return NULL;
        }
        f->lit = jv_str(s, len);
        f->op = (uint8_t)id;
        f->a = node;
        if (is_op(cur(P), O_LPAREN) && parse_call_args(P, f)) return NULL;
        node = f;
    }
    return node;
}

static jnode *parse_test(jparser *P, jnode *node) {
    jnode *t = new_node(P, N_TEST, cur(P)->pos), *not;
    int negated = 0, id;
    const char *s;
    size_t len;
    if (!t) return NULL;
    next_tok(P); /* is */
    if (is_name(cur(P), "not")) negated = 1, next_tok(P);
    if (parse_dotted(P, &s, &len)) return NULL;
    if ((id = jtest_id(s, len)) < 0) {
        pfail(P, t->pos, MOE8_ERR_UNSUPPORTED, "test '%.*s' is not supported", (int)len, s);
        return NULL;
    }
    t->lit = jv_str(s, len);
    t->op = (uint8_t)id;
    t->a = node;
    if (is_op(cur(P), O_LPAREN)) {
        if (parse_call_args(P, t)) return NULL;
    } else {
        jtok *c = cur(P);
        int starts = c->type == TK_NAME || c->type == TK_STRING || c->type == TK_INT ||
                     c->type == TK_FLOAT || is_op(c, O_LPAREN) || is_op(c, O_LBRACKET) ||
                     is_op(c, O_LBRACE);
        if (starts && !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
            jnode *arg;
            kids k = {0};
            if (is_name(c, "is")) {
                pfail(P, c->pos, MOE8_ERR_FORMAT, "tests cannot be chained with 'is'");
                return NULL;
            }
            if (!(arg = parse_primary(P)) || !(arg = parse_postfix(P, arg)) || kids_push(P, &k, arg))
                return NULL;
            kids_set(t, &k);
        }
    }
    if (!negated) return t;
    if (!(not = new_node(P, N_NOT, t->pos))) return NULL;
    not->a = t;
    return not;
}

/* x[...] slice or key. */
static jnode *parse_subscribed(jparser *P) {
    size_t pos = cur(P)->pos;
    jnode *parts[3] = {NULL, NULL, NULL}, *n;
    if (is_op(cur(P), O_COLON)) {
        next_tok(P);
    } else {
        jnode *e = parse_expression(P, 1);
        if (!e || !is_op(cur(P), O_COLON)) return e;
        next_tok(P);
        parts[0] = e;
    }
    if (!is_op(cur(P), O_COLON) && !is_op(cur(P), O_RBRACKET) && !is_op(cur(P), O_COMMA))
        if (!(parts[1] = parse_expression(P, 1))) return NULL;
    if (is_op(cur(P), O_COLON)) {
        next_tok(P);
        if (!is_op(cur(P), O_RBRACKET) && !is_op(cur(P), O_COMMA))
            if (!(parts[2] = parse_expression(P, 1))) return NULL;
    }
    if (!(n = new_node(P, N_SLICE, pos))) return NULL;
    n->b = parts[0];
    n->c = parts[1];
    n->d = parts[2];
    return n;
}

static jnode *parse_subscript(jparser *P, jnode *node) {
    jtok *t = cur(P);
    jnode *n;
    if (is_op(t, O_DOT)) {
        jtok *a;
        next_tok(P);
        a = cur(P);
        if (a->type == TK_NAME) {
            if (!(n = new_node(P, N_ATTR, a->pos))) return NULL;
            n->a = node;
            n->lit = jv_str(a->s, a->n);
            next_tok(P);
            return n;
        }
        if (a->type != TK_INT) {
            unexpected(P, "a name or number after '.'");
            return NULL;
        }
        if (!(n = new_node(P, N_ITEM, a->pos)) || !(n->b = new_node(P, N_LIT, a->pos))) return NULL;
        n->a = node;
        n->b->lit = jv_int(a->i);
        next_tok(P);
        return n;
    }
    /* [ ... ] */
    kids k = {0};
    next_tok(P);
    while (!is_op(cur(P), O_RBRACKET)) {
        jnode *e;
        if (k.n && expect_op(P, O_COMMA)) return NULL;
        if (!(e = parse_subscribed(P)) || kids_push(P, &k, e)) return NULL;
    }
    next_tok(P);
    if (k.n == 0) {
        pfail(P, t->pos, MOE8_ERR_FORMAT, "expected an index or slice inside '[]'");
        return NULL;
    }
    if (k.n > 1) { /* x[a, b]: the key is the tuple (a, b) */
        jnode *tuple = new_node(P, N_TUPLE, t->pos);
        for (uint32_t i = 0; tuple && i < k.n; i++)
            if (k.v[i]->kind == N_SLICE) {
                pfail(P, k.v[i]->pos, MOE8_ERR_UNSUPPORTED, "a slice inside a tuple index is not supported");
                return NULL;
            }
        if (!tuple || !(n = new_node(P, N_ITEM, t->pos))) return NULL;
        kids_set(tuple, &k);
        n->a = node;
        n->b = tuple;
        return n;
    }
    if (k.v[0]->kind == N_SLICE) {
        k.v[0]->a = node;
        return k.v[0];
    }
    if (!(n = new_node(P, N_ITEM, t->pos))) return NULL;
    n->a = node;
    n->b = k.v[0];
    return n;
}

static jnode *parse_postfix(jparser *P, jnode *node) {
    while (node) {
        jtok *t = cur(P);
        if (is_op(t, O_DOT) || is_op(t, O_LBRACKET)) node = parse_subscript(P, node);
        else if (is_op(t, O_LPAREN)) node = parse_call(P, node);
        else break;
    }
    return node;
}

static jnode *parse_filter_expr(jparser *P, jnode *node) {
    while (node) {
        jtok *t = cur(P);
        if (is_op(t, O_PIPE)) node = parse_filter(P, node);
        else if (is_name(t, "is")) node = parse_test(P, node);
        else if (is_op(t, O_LPAREN)) node = parse_call(P, node);
        else break;
    }
    return node;
}

static jnode *parse_list_or_dict(jparser *P, int dict) {
    jnode *n = new_node(P, dict ? N_DICT : N_LIST, cur(P)->pos);
    int close = dict ? O_RBRACE : O_RBRACKET;
    kids k = {0};
    if (!n) return NULL;
    next_tok(P);
    while (!is_op(cur(P), close)) {
        jnode *e;
        if (k.n && expect_op(P, O_COMMA)) return NULL;
        if (is_op(cur(P), close)) break;
        if (!(e = parse_expression(P, 1)) || kids_push(P, &k, e)) return NULL;
        if (dict && (expect_op(P, O_COLON) || !(e = parse_expression(P, 1)) || kids_push(P, &k, e)))
            return NULL;
    }
    next_tok(P);
    kids_set(n, &k);
    return n;
}

static jnode *parse_primary(jparser *P) {
    jtok *t = cur(P);
    jnode *n;
    if (t->type == TK_NAME) {
        if (!(n = new_node(P, N_LIT, t->pos))) return NULL;
        if (is_name(t, "true") || is_name(t, "True")) n->lit = jv_bool(1);
        else if (is_name(t, "false") || is_name(t, "False")) n->lit = jv_bool(0);
        else if (is_name(t, "none") || is_name(t, "None")) n->lit = jv_none();
        else n->kind = N_NAME, n->lit = jv_str(t->s, t->n);
        next_tok(P);
        return n;
    }
    if (t->type == TK_STRING) { /* adjacent strings join */
        size_t total = 0, k = 0;
        char *buf;
        for (jtok *u = t; u->type == TK_STRING; u++) total += u->n;
        if (!(n = new_node(P, N_LIT, t->pos)) || !(buf = ja_alloc(&P->t->arena, total + 1)))
            return NULL;
        while (cur(P)->type == TK_STRING) {
            memcpy(buf + k, cur(P)->s, cur(P)->n);
            k += cur(P)->n;
            next_tok(P);
        }
        n->lit = jv_str(buf, total);
        return n;
    }
    if (t->type == TK_INT || t->type == TK_FLOAT) {
        if (!(n = new_node(P, N_LIT, t->pos))) return NULL;
        n->lit = t->type == TK_INT ? jv_int(t->i) : jv_float(t->f);
        next_tok(P);
        return n;
    }
    if (is_op(t, O_LPAREN)) {
        next_tok(P);
        if (!(n = parse_tuple(P, 0, 1, 1, NULL)) || expect_op(P, O_RPAREN)) return NULL;
        return n;
    }
    if (is_op(t, O_LBRACKET)) return parse_list_or_dict(P, 0);
    if (is_op(t, O_LBRACE)) return parse_list_or_dict(P, 1);
    unexpected(P, "an expression");
    return NULL;
}

static jnode *parse_unary(jparser *P, int with_filter) {
    jtok *t = cur(P);
    jnode *n;
    if (enter(P)) return NULL;
    if (is_op(t, O_SUB) || is_op(t, O_ADD)) {
        next_tok(P);
        if (!(n = new_node(P, t->op == O_SUB ? N_NEG : N_POS, t->pos)) ||
            !(n->a = parse_unary(P, 0)))
            return NULL;
    } else if (!(n = parse_primary(P))) {
        return NULL;
    }
    n = parse_postfix(P, n);
    if (with_filter) n = parse_filter_expr(P, n);
    P->depth--;
    return n;
}

static jnode *parse_pow(jparser *P) {
    jnode *n = parse_unary(P, 1);
    while (n && is_op(cur(P), O_POW)) {
        size_t pos = cur(P)->pos;
        next_tok(P);
        n = binop(P, N_BINOP, OP_POW, pos, n, parse_unary(P, 1));
    }
    return n;
}

static jnode *parse_math2(jparser *P) {
    jnode *n = parse_pow(P);
    for (;;) {
        jtok *t = cur(P);
        int op = is_op(t, O_MUL) ? OP_MUL : is_op(t, O_DIV) ? OP_DIV : is_op(t, O_FDIV) ? OP_FDIV
                 : is_op(t, O_MOD) ? OP_MOD : -1;
        if (!n || op < 0) return n;
        next_tok(P);
        n = binop(P, N_BINOP, op, t->pos, n, parse_pow(P));
    }
}

static jnode *parse_concat(jparser *P) {
    jnode *n = parse_math2(P);
    while (n && is_op(cur(P), O_TILDE)) {
        size_t pos = cur(P)->pos;
        next_tok(P);
        n = binop(P, N_BINOP, OP_CAT, pos, n, parse_math2(P));
    }
    return n;
}

static jnode *parse_math1(jparser *P) {
    jnode *n = parse_concat(P);
    while (n && (is_op(cur(P), O_ADD) || is_op(cur(P), O_SUB))) {
        jtok *t = cur(P);
        next_tok(P);
        n = binop(P, N_BINOP, t->op == O_ADD ? OP_ADD : OP_SUB, t->pos, n, parse_concat(P));
    }
    return n;
}

static jnode *parse_compare(jparser *P) {
    jnode *first = parse_math1(P), *n = NULL;
    kids k = {0};
    uint8_t ops[64];
    while (first) {
        jtok *t = cur(P);
        int op = -1;
        if (t->type == TK_OP) {
            op = t->op == O_EQ ? CMP_EQ : t->op == O_NE ? CMP_NE : t->op == O_LT ? CMP_LT
               : t->op == O_LE ? CMP_LE : t->op == O_GT ? CMP_GT : t->op == O_GE ? CMP_GE : -1;
            if (op >= 0) next_tok(P);
        } else if (is_name(t, "in")) {
            op = CMP_IN;
            next_tok(P);
        } else if (is_name(t, "not") && is_name(peek(P, 1), "in")) {
            op = CMP_NOTIN;
            next_tok(P);
            next_tok(P);
        }
        if (op < 0) break;
        if (k.n >= sizeof ops) {
            pfail(P, t->pos, MOE8_ERR_UNSUPPORTED, "more than %zu chained comparisons", sizeof ops);
            return NULL;
        }
        ops[k.n] = (uint8_t)op;
        jnode *rhs = parse_math1(P);
        if (!rhs || kids_push(P, &k, rhs)) return NULL;
    }
    if (!first || k.n == 0) return first;
    if (!(n = new_node(P, N_CMP, first->pos)) || !(n->ops = ja_alloc(&P->t->arena, k.n))) return NULL;
    memcpy(n->ops, ops, k.n);
    n->a = first;
    kids_set(n, &k);
    return n;
}

static jnode *parse_not(jparser *P) {
    jnode *n;
    if (is_name(cur(P), "not")) {
        size_t pos = cur(P)->pos;
        next_tok(P);
        if (enter(P) || !(n = new_node(P, N_NOT, pos)) || !(n->a = parse_not(P))) return NULL;
        P->depth--;
        return n;
    }
    return parse_compare(P);
}

static jnode *parse_and(jparser *P) {
    jnode *n = parse_not(P);
    while (n && is_name(cur(P), "and")) {
        size_t pos = cur(P)->pos;
        next_tok(P);
        n = binop(P, N_AND, 0, pos, n, parse_not(P));
    }
    return n;
}

static jnode *parse_or(jparser *P) {
    jnode *n = parse_and(P);
    while (n && is_name(cur(P), "or")) {
        size_t pos = cur(P)->pos;
        next_tok(P);
        n = binop(P, N_OR, 0, pos, n, parse_and(P));
    }
    return n;
}

static jnode *parse_condexpr(jparser *P) {
    jnode *n = parse_or(P);
    while (n && is_name(cur(P), "if")) {
        jnode *c = new_node(P, N_COND, cur(P)->pos);
        next_tok(P);
        if (!c || !(c->a = parse_or(P))) return NULL;
        c->b = n;
        if (is_name(cur(P), "else")) {
            next_tok(P);
            if (enter(P) || !(c->c = parse_condexpr(P))) return NULL;
            P->depth--;
        }
        n = c;
    }
    return n;
}

static jnode *parse_expression(jparser *P, int with_condexpr) {
    jnode *n;
    if (enter(P)) return NULL;
    n = with_condexpr ? parse_condexpr(P) : parse_or(P);
    P->depth--;
    return n;
}

static int tuple_end(jparser *P, const char *extra_end) {
    jtok *t = cur(P);
    return t->type == TK_VAR_END || t->type == TK_BLOCK_END || t->type == TK_EOF ||
           is_op(t, O_RPAREN) || (extra_end && is_name(t, extra_end));
}

/* Comma-separated expressions: one alone is itself, more (or a trailing
 * comma) a tuple. `simplified`: only primaries (assignment targets). */
static jnode *parse_tuple(jparser *P, int simplified, int with_condexpr, int explicit_paren,
                          const char *extra_end) {
    size_t pos = cur(P)->pos;
    kids k = {0};
    int is_tuple = 0;
    jnode *n;
    for (;;) {
        jnode *e;
        if (k.n && expect_op(P, O_COMMA)) return NULL;
        if (tuple_end(P, extra_end)) break;
        e = simplified ? parse_primary(P) : parse_expression(P, with_condexpr);
        if (!e || kids_push(P, &k, e)) return NULL;
        if (is_op(cur(P), O_COMMA)) is_tuple = 1;
        else break;
    }
    if (!is_tuple) {
        if (k.n) return k.v[0];
        if (!explicit_paren) {
            unexpected(P, "an expression");
            return NULL;
        }
    }
    if (!(n = new_node(P, N_TUPLE, pos))) return NULL;
    kids_set(n, &k);
    return n;
}

/* ---- parser: statements ------------------------------------------------------- */

static jnode *subparse(jparser *P, const char *const *ends, const char *owner);

static int expect_block_end(jparser *P) {
    if (cur(P)->type == TK_BLOCK_END) {
        next_tok(P);
        return 0;
    }
    return unexpected(P, "the end of the statement ('%}')");
}

/* After subparse stopped at `{% name`: consume the name (end tags also their `%}`). */
static int end_tag(jparser *P, int consume_end) {
    next_tok(P); /* the name */
    return consume_end ? expect_block_end(P) : 0;
}

static int check_target(jparser *P, jnode *t) {
    if (t->kind == N_NAME) return 0;
    if (t->kind == N_TUPLE) {
        for (uint32_t i = 0; i < t->n_kids; i++)
            if (t->kids[i]->kind != N_NAME)
                return pfail(P, t->kids[i]->pos, MOE8_ERR_UNSUPPORTED, "only names can be unpacked into");
        if (t->n_kids) return 0;
    }
    return pfail(P, t->pos, MOE8_ERR_FORMAT, "cannot assign to this expression");
}

static jnode *parse_if(jparser *P, size_t pos) {
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    static const char *const else_end[] = {"endif", NULL};
    jnode *n = new_node(P, N_IF, pos);
    if (!n || !(n->a = parse_tuple(P, 0, 0, 0, NULL)) || expect_block_end(P) ||
        !(n->b = subparse(P, ends, "if")))
        return NULL;
    if (is_name(cur(P), "elif")) {
        jnode *body = new_node(P, N_BODY, cur(P)->pos), *elif;
        kids k = {0};
        size_t epos = cur(P)->pos;
        if (!body || end_tag(P, 0) || !(elif = parse_if(P, epos)) || kids_push(P, &k, elif)) return NULL;
        kids_set(body, &k);
        n->c = body;
        return n; /* the innermost if consumed endif */
    }
    if (is_name(cur(P), "else")) {
        if (end_tag(P, 1) || !(n->c = subparse(P, else_end, "if"))) return NULL;
    }
    return end_tag(P, 1) ? NULL : n;
}

static jnode *parse_for(jparser *P, size_t pos) {
    static const char *const ends[] = {"endfor", "else", NULL};
    static const char *const else_end[] = {"endfor", NULL};
    jnode *n = new_node(P, N_FOR, pos);
    if (!n || !(n->a = parse_tuple(P, 1, 0, 0, "in")) || check_target(P, n->a)) return NULL;
    if (!is_name(cur(P), "in")) {
        unexpected(P, "'in'");
        return NULL;
    }
    next_tok(P);
    if (!(n->b = parse_tuple(P, 0, 0, 0, "recursive"))) return NULL;
    if (is_name(cur(P), "if")) {
        next_tok(P);
        if (!(n->c = parse_expression(P, 1))) return NULL;
    }
    if (is_name(cur(P), "recursive")) {
        pfail(P, cur(P)->pos, MOE8_ERR_UNSUPPORTED, "recursive loops are not supported");
        return NULL;
    }
    if (expect_block_end(P)) return NULL;
    P->loop_depth++;
    n->d = subparse(P, ends, "for");
    P->loop_depth--;
    if (!n->d) return NULL;
    if (is_name(cur(P), "else")) {
        if (end_tag(P, 1) || !(n->e = subparse(P, else_end, "for"))) return NULL;
    }
    return end_tag(P, 1) ? NULL : n;
}

static jnode *parse_set(jparser *P, size_t pos) {
    static const char *const ends[] = {"endset", NULL};
    jnode *n = new_node(P, N_SET, pos);
    if (!n) return NULL;
    if (cur(P)->type == TK_NAME && is_op(peek(P, 1), O_DOT)) { /* ns.attr */
        jnode *obj = new_node(P, N_NAME, cur(P)->pos), *attr;
        if (!obj) return NULL;
        obj->lit = jv_str(cur(P)->s, cur(P)->n);
        next_tok(P);
        next_tok(P);
        if (cur(P)->type != TK_NAME) {
            unexpected(P, "an attribute name");
            return NULL;
        }
        if (!(attr = new_node(P, N_ATTR, cur(P)->pos))) return NULL;
        attr->a = obj;
        attr->lit = jv_str(cur(P)->s, cur(P)->n);
        next_tok(P);
        n->a = attr;
    } else if (!(n->a = parse_tuple(P, 1, 0, 0, NULL)) || check_target(P, n->a)) {
        return NULL;
    }
    if (is_op(cur(P), O_ASSIGN)) {
        next_tok(P);
        if (!(n->b = parse_tuple(P, 0, 1, 0, NULL)) || expect_block_end(P)) return NULL;
        return n;
    }
    if (is_op(cur(P), O_PIPE)) {
        pfail(P, cur(P)->pos, MOE8_ERR_UNSUPPORTED, "filtered block assignments are not supported");
        return NULL;
    }
    if (n->a->kind != N_NAME) {
        pfail(P, n->a->pos, MOE8_ERR_UNSUPPORTED, "a block assignment takes one name");
        return NULL;
    }
    if (expect_block_end(P) || !(n->c = subparse(P, ends, "set")) || end_tag(P, 1)) return NULL;
    return n;
}

static jnode *parse_macro(jparser *P, size_t pos) {
    static const char *const ends[] = {"endmacro", NULL};
    jnode *n = new_node(P, N_MACRO, pos);
    kids k = {0};
    int saved_loop = P->loop_depth;
    if (!n) return NULL;
    if (P->in_macro) {
        pfail(P, pos, MOE8_ERR_UNSUPPORTED, "a macro inside a macro is not supported");
        return NULL;
    }
    if (cur(P)->type != TK_NAME) {
        unexpected(P, "a macro name");
        return NULL;
    }
    n->lit = jv_str(cur(P)->s, cur(P)->n);
    next_tok(P);
    if (expect_op(P, O_LPAREN)) return NULL;
    while (!is_op(cur(P), O_RPAREN)) {
        jnode *param;
        if (k.n && expect_op(P, O_COMMA)) return NULL;
        if (is_op(cur(P), O_RPAREN)) break;
        if (cur(P)->type != TK_NAME) {
            unexpected(P, "a parameter name");
            return NULL;
        }
        if (!(param = new_node(P, N_NAME, cur(P)->pos))) return NULL;
        param->lit = jv_str(cur(P)->s, cur(P)->n);
        next_tok(P);
        if (is_op(cur(P), O_ASSIGN)) {
            next_tok(P);
            if (!(param->a = parse_expression(P, 1))) return NULL;
        } else if (k.n && k.v[k.n - 1]->a) {
            pfail(P, param->pos, MOE8_ERR_FORMAT, "a parameter without a default follows one with a default");
            return NULL;
        }
        if (kids_push(P, &k, param)) return NULL;
    }
    next_tok(P);
    kids_set(n, &k);
    if (expect_block_end(P)) return NULL;
    P->in_macro = 1;
    P->loop_depth = 0;
    n->b = subparse(P, ends, "macro");
    P->in_macro = 0;
    P->loop_depth = saved_loop;
    return n->b && !end_tag(P, 1) ? n : NULL;
}

static jnode *parse_statement(jparser *P) {
    static const char *const gen_end[] = {"endgeneration", NULL};
    static const char *const unsupported[] = {
        "include", "import", "from", "extends", "block", "call", "filter", "with", "autoescape", "do",
        "trans", "pluralize", "print", "endblock", "endcall", "endfilter", "endwith", NULL,
    };
    jtok *t = cur(P);
    size_t pos = t->pos;
    jnode *n;
    if (t->type != TK_NAME) {
        unexpected(P, "a statement name");
        return NULL;
    }
    next_tok(P);
    if (is_name(t, "if")) return parse_if(P, pos);
    if (is_name(t, "for")) return parse_for(P, pos);
    if (is_name(t, "set")) return parse_set(P, pos);
    if (is_name(t, "macro")) return parse_macro(P, pos);
    if (is_name(t, "break") || is_name(t, "continue")) {
        if (!P->loop_depth) {
            pfail(P, pos, MOE8_ERR_FORMAT, "'%.*s' outside a for loop", (int)t->n, t->s);
            return NULL;
        }
        if (!(n = new_node(P, is_name(t, "break") ? N_BREAK : N_CONTINUE, pos)) || expect_block_end(P))
            return NULL;
        return n;
    }
    if (is_name(t, "generation")) {
        if (expect_block_end(P) || !(n = subparse(P, gen_end, "generation")) || end_tag(P, 1))
            return NULL;
        return n;
    }
    for (int i = 0; unsupported[i]; i++)
        if (is_name(t, unsupported[i])) {
            pfail(P, pos, MOE8_ERR_UNSUPPORTED, "the tag '%s' is not supported", unsupported[i]);
            return NULL;
        }
    pfail(P, pos, MOE8_ERR_FORMAT, "unknown tag '%.*s'", (int)(t->n > 40 ? 40 : t->n), t->s);
    return NULL;
}

/* Statements until `{% <one of ends>` (left for the caller) or, with ends
 * NULL, the end of the template. */
static jnode *subparse(jparser *P, const char *const *ends, const char *owner) {
    jnode *body = new_node(P, N_BODY, cur(P)->pos), *n;
    kids k = {0};
    size_t start = cur(P)->pos;
    if (!body || enter(P)) return NULL;
    for (;;) {
        jtok *t = cur(P);
        if (t->type == TK_EOF) {
            if (ends) {
                int line, col;
                jinja_line_col(P->t->src, P->t->len, start, &line, &col);
                pfail(P, t->pos, MOE8_ERR_FORMAT, "unexpected end of template: the '%s' block "
                      "of line %d is not closed with 'end%s'", owner, line, owner);
                return NULL;
            }
            break;
        }
        if (t->type == TK_DATA) {
            if (!(n = new_node(P, N_TEXT, t->pos))) return NULL;
            n->lit = jv_str(t->s, t->n);
            next_tok(P);
        } else if (t->type == TK_VAR_BEGIN) {
            next_tok(P);
            if (!(n = new_node(P, N_OUT, t->pos)) || !(n->a = parse_tuple(P, 0, 1, 0, NULL)))
                return NULL;
            if (cur(P)->type != TK_VAR_END) {
                unexpected(P, "the end of the expression ('}}')");
                return NULL;
            }
            next_tok(P);
        } else if (t->type == TK_BLOCK_BEGIN) {
            jtok *name = peek(P, 1);
            for (int i = 0; ends && ends[i]; i++)
                if (is_name(name, ends[i])) {
                    next_tok(P); /* leave the name for the caller */
                    kids_set(body, &k);
                    P->depth--;
                    return body;
                }
            if (name->type == TK_NAME && name->n > 3 &&
                (!memcmp(name->s, "end", 3) || is_name(name, "else") || is_name(name, "elif"))) {
                if (ends)
                    pfail(P, name->pos, MOE8_ERR_FORMAT, "unexpected '%.*s' inside '%s' (expected 'end%s')",
                          (int)(name->n > 40 ? 40 : name->n), name->s, owner, owner);
                else
                    pfail(P, name->pos, MOE8_ERR_FORMAT, "unexpected '%.*s' outside any block",
                          (int)(name->n > 40 ? 40 : name->n), name->s);
                return NULL;
            }
            next_tok(P);
            if (!(n = parse_statement(P))) return NULL;
        } else {
            unexpected(P, "template text or a tag");
            return NULL;
        }
        if (kids_push(P, &k, n)) return NULL;
    }
    kids_set(body, &k);
    P->depth--;
    return body;
}

/* ---- entry --------------------------------------------------------------------- */

moe8_status jinja_parse(const char *src, size_t len, const char *name, jinja_template **out,
                        moe8_error *err) {
    jinja_template *t;
    jparser P = {0};
    moe8_error local;
    size_t bad, k = 0;
    *out = NULL;
    if (!err) err = &local;
    if (!src && len) return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "jinja_parse: NULL source");
    if (len > SRC_MAX)
        return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1, "%s: %zu bytes, more than the %zu supported",
                         name, len, SRC_MAX);
    if (!(t = calloc(1, sizeof *t))) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "%s: out of memory", name);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->arena.limit = 64 * len + ((size_t)1 << 20);
    P.t = t;
    P.err = err;
    if ((bad = moe8_utf8_valid(src, len)) != (size_t)-1) {
        int line, col;
        jinja_line_col(src, len, bad, &line, &col);
        moe8_fail(err, MOE8_ERR_FORMAT, (int64_t)bad, "%s line %d, column %d: not valid UTF-8",
                  name, line, col);
        goto fail;
    }
    if (!(t->src = ja_alloc(&t->arena, len + 1))) {
        moe8_fail(err, MOE8_ERR_NOMEM, -1, "%s: out of memory", name);
        goto fail;
    }
    for (size_t i = 0; i < len; i++) { /* \r\n and \r -> \n */
        if (src[i] == '\r') {
            t->src[k++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            t->src[k++] = src[i];
        }
    }
    if (k && t->src[k - 1] == '\n') k--; /* keep_trailing_newline=False */
    t->src[k] = '\0';
    t->len = k;
    if (lex(&P) || !(t->root = subparse(&P, NULL, NULL))) goto fail;
    free(P.tk);
    *out = t;
    return MOE8_OK;
fail:
    free(P.tk);
    jinja_free(t);
    return err->code;
}

void jinja_free(jinja_template *t) {
    if (!t) return;
    ja_free(&t->arena);
    free(t);
}
