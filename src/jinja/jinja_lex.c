/*
 * jinja_lex.c — template source -> tokens (jinja_lex.h), following jinja2
 * 3.1's lexer with trim_blocks and lstrip_blocks on, as Hugging Face's
 * apply_chat_template configures them; jinja_parse.c makes the tree.
 *
 * As jinja2 does it: newlines (\r\n, \r) become \n and one trailing
 * newline of the template is dropped; `{%-`/`{{-`/`{#-` strip all whitespace
 * before the tag, `-%}`/`-}}`/`-#}` all whitespace after it; otherwise
 * (lstrip_blocks) the spaces and tabs between a line start and `{%` or `{#`
 * are dropped, unless `{%+`, and (trim_blocks) one newline after `%}` or `#}`,
 * unless `+%}`. A tag ends at the first `}}`/`%}` outside brackets. String
 * literals take Python's escapes (\n, \t, \xhh, \uXXXX, \ooo, ...). Comments
 * and {% raw %} blocks go no further than here; the parser judges the rest.
 *
 * Bounded: brackets nest at most PARSE_MAX_DEPTH deep.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja/jinja_lex.h"

static const char *const OP_TEXT[] = {
    "+", "-", "/", "//", "*", "%", "**", "~", "[", "]", "(", ")", "{", "}", "==", "!=", ">",
    ">=", "<", "<=", "=", ".", ":", "|", ",", ";",
};

/* ---- source positions ---------------------------------------------------------- */

void moe8_jinja_line_col(const char *src, size_t len, size_t pos, int *line, int *col) {
    int l = 1, k = 1;
    for (size_t i = 0; i < pos && i < len; i++) {
        if (src[i] == '\n') l++, k = 1;
        else if (((unsigned char)src[i] & 0xc0) != 0x80) k++;
    }
    *line = l;
    *col = k;
}

/* ---- tokens -------------------------------------------------------------------- */

int moe8_jp_fail(jparser *P, size_t pos, moe8_status code, const char *fmt, ...) {
    char msg[MOE8_ERROR_MESSAGE_MAX];
    int line, col;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    moe8_jinja_line_col(P->t->src, P->t->len, pos, &line, &col);
    moe8_fail(P->err, code, (int64_t)pos, "%s line %d, column %d: %s", P->t->name, line, col, msg);
    return -1;
}

static jtok *push_tok(jparser *P, tk_type type, size_t pos) {
    if (P->n_tk == P->cap_tk) {
        size_t cap = P->cap_tk ? 2 * P->cap_tk : 256;
        jtok *tk = realloc(P->tk, cap * sizeof *tk);
        if (!tk) {
            moe8_jp_fail(P, pos, MOE8_ERR_NOMEM, "out of memory");
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

const char *moe8_jp_tok_desc(const jtok *t, char *buf, size_t cap) {
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

/* ---- lexer: whitespace ---------------------------------------------------------- */

/* Whitespace code point at s[i] (Python's str.isspace), its length in *k. */
static int ws_at(const char *s, size_t len, size_t i, size_t *k) {
    size_t j = i;
    uint32_t cp = ju_next(s, len, &j);
    *k = j - i;
    return moe8_ju_isspace(cp);
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
                    return moe8_jp_fail(P, pos, MOE8_ERR_FORMAT, "truncated \\%c escape in a string", e);
                cp = cp * 16 + (uint32_t)d;
            }
            i += (size_t)want;
            if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
                return moe8_jp_fail(P, pos, MOE8_ERR_UNSUPPORTED,
                                    "string escape \\%c gives U+%04X, which is not a character", e,
                                    (unsigned)cp);
            o += (size_t)moe8_utf8_encode(cp, out + o);
            continue;
        }
        case 'N':
            return moe8_jp_fail(P, pos, MOE8_ERR_UNSUPPORTED, "\\N{...} escapes are not supported");
        default:
            if (e >= '0' && e <= '7') {
                cp = (uint32_t)(e - '0');
                for (int k = 0; k < 2 && i < n && s[i] >= '0' && s[i] <= '7'; k++)
                    cp = cp * 8 + (uint32_t)(s[i++] - '0');
                o += (size_t)moe8_utf8_encode(cp, out + o);
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
    if (i >= len) return moe8_jp_fail(P, start, MOE8_ERR_FORMAT, "unterminated string");
    /* escapes shrink, except "\<non-ASCII>" which may grow to 10 bytes */
    if (!(buf = moe8_ja_alloc(&P->t->arena, 3 * (i - start) + 16)))
        return moe8_jp_fail(P, start, MOE8_ERR_NOMEM, "out of memory");
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
        if (e == i) return moe8_jp_fail(P, start, MOE8_ERR_FORMAT, "malformed number");
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
            if (k + 1 >= sizeof tmp) return moe8_jp_fail(P, start, MOE8_ERR_UNSUPPORTED, "number too long");
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
            return moe8_jp_fail(P, start, MOE8_ERR_UNSUPPORTED, "integer %s is beyond 64 bits", tmp);
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
        return moe8_jp_fail(P, i, MOE8_ERR_FORMAT, "unexpected character U+%04X '%.*s'", (unsigned)cp,
                            (int)(j - i), s + i);
    }
    if (op == O_LPAREN || op == O_LBRACKET || op == O_LBRACE) {
        if (*depth >= PARSE_MAX_DEPTH)
            return moe8_jp_fail(P, i, MOE8_ERR_UNSUPPORTED, "brackets nest deeper than %d", PARSE_MAX_DEPTH);
        stack[(*depth)++] = s[i] == '(' ? ')' : s[i] == '[' ? ']' : '}';
    } else if (op == O_RPAREN || op == O_RBRACKET || op == O_RBRACE) {
        if (*depth == 0) return moe8_jp_fail(P, i, MOE8_ERR_FORMAT, "unexpected '%c'", s[i]);
        if (stack[*depth - 1] != s[i])
            return moe8_jp_fail(P, i, MOE8_ERR_FORMAT, "unexpected '%c', expected '%c'", s[i],
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
            return moe8_jp_fail(P, begin, MOE8_ERR_FORMAT, "unexpected end of template: this '%s' is not "
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
    if (i + 1 >= len) return moe8_jp_fail(P, begin, MOE8_ERR_FORMAT, "missing end of comment tag");
    if (i > *pi && s[i - 1] == '-') end = skip_ws(s, len, i + 2);
    else if (i > *pi && s[i - 1] == '+') end = i + 2;
    else end = i + 2 + (i + 2 < len && s[i + 2] == '\n');
    *line_starting = s[end - 1] == '\n';
    *pi = end;
    return 0;
}

static int lex_tokens(jparser *P) {
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
                return moe8_jp_fail(P, at, MOE8_ERR_FORMAT, "missing end of raw directive");
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

/* ---- entry --------------------------------------------------------------------- */

int moe8_jp_lex(jparser *P, const char *src, size_t len) {
    jinja_template *t = P->t;
    size_t k = 0;
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
    return lex_tokens(P);
}
