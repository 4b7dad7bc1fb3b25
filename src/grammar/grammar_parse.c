/*
 * grammar_parse.c — GBNF text (llama.cpp's syntax) parsed into rules of
 * elements, each rule its alternatives separated by ALT and closed by END
 * (grammar_impl.h's parser); grammar_compile.c turns them into a grammar.
 *
 * Syntax (llama.cpp grammars/README.md): rules `name ::= alternatives`, one
 * per line (a rule continues on the next line after `|` or inside `( )`);
 * alternatives `|`; sequences; groups `( )`; `?` `*` `+` `{m}` `{m,}` `{m,n}`
 * after an item; string literals "..." and character classes [a-z] [^...]
 * with the escapes \n \r \t \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH (code
 * points); `.` any character; `<[N]>` token N (grammar.h); `#` comments;
 * names [A-Za-z0-9_-]+; the root
 * rule is `root`. Repetitions are rewritten as llama.cpp's parser does
 * (S{m,n} = m copies of S, then n-m nested optional rules; S* = a right-
 * recursive rule), so a generated rule has one caller. A literal is one
 * single-byte class per UTF-8 byte; a character class is grammar_class.c's.
 *
 * Checked here: the syntax, every referenced rule defined, a root, and the
 * limits of grammar.h on text, rules, elements, nesting and repeats. Not
 * here: the analysis (left recursion, rules that never finish:
 * grammar_compile.c).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_impl.h"

static void line_col(const char *t, size_t off, int *line, int *col) {
    int l = 1, c = 1;
    for (size_t i = 0; i < off; i++) {
        if (t[i] == '\n') l++, c = 1;
        else if (((unsigned char)t[i] & 0xC0) != 0x80) c++;
    }
    *line = l, *col = c;
}

void moe8_gp_rule_label(const parser *P, uint32_t r, char *buf, size_t cap) {
    const prule *u = &P->rules[P->rules[r].owner];
    snprintf(buf, cap, "%.*s", (int)(u->name_len > 64 ? 64 : u->name_len), u->name);
}

moe8_status moe8_gp_err(parser *P, size_t off, const char *fmt, ...) {
    char msg[384], rn[80];
    int line, col;
    va_list ap;
    if (P->st != MOE8_OK) return P->st;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (off > P->len) off = P->len;
    line_col(P->text, off, &line, &col);
    if (P->cur != G_NONE) {
        moe8_gp_rule_label(P, P->cur, rn, sizeof rn);
        moe8_fail(P->err, MOE8_ERR_INVALID_ARG, (int64_t)off,
                  "grammar: line %d col %d: in rule '%s': %s", line, col, rn, msg);
    } else {
        moe8_fail(P->err, MOE8_ERR_INVALID_ARG, (int64_t)off, "grammar: line %d col %d: %s", line,
                  col, msg);
    }
    P->st = MOE8_ERR_INVALID_ARG;
    return P->st;
}

moe8_status moe8_gp_oom(parser *P) {
    if (P->st == MOE8_OK) P->st = moe8_fail(P->err, MOE8_ERR_NOMEM, -1, "grammar: out of memory");
    return P->st;
}

static int at(const parser *P, size_t i) { return i < P->len ? (unsigned char)P->text[i] : -1; }

static int is_word(int c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
}

static size_t skip_space(const parser *P, size_t i, int newline_ok) {
    for (;;) {
        int c = at(P, i);
        if (c == ' ' || c == '\t') i++;
        else if (newline_ok && (c == '\r' || c == '\n')) i++;
        else if (c == '#') {
            while (at(P, i) >= 0 && at(P, i) != '\r' && at(P, i) != '\n') i++;
        } else return i;
    }
}

static int push_el(parser *P, pvec *v, uint8_t kind, uint32_t arg, uint32_t src) {
    if (++P->n_elements > GRAMMAR_MAX_ELEMENTS) {
        moe8_gp_err(P, src, "grammar too large: more than %u elements after expanding repetitions",
                    GRAMMAR_MAX_ELEMENTS);
        return -1;
    }
    if (v->n == v->cap) {
        uint32_t nc = v->cap ? v->cap * 2 : 16;
        pel *q = realloc(v->e, nc * sizeof *q);
        if (!q) return moe8_gp_oom(P), -1;
        v->e = q, v->cap = nc;
    }
    v->e[v->n].kind = kind, v->e[v->n].arg = arg, v->e[v->n].src = src;
    v->n++;
    return 0;
}

static uint32_t new_rule(parser *P, const char *name, uint32_t name_len, uint32_t owner,
                         uint32_t src, int generated) {
    prule *r;
    if (P->n_rules >= GRAMMAR_MAX_RULES) {
        moe8_gp_err(P, src, "grammar too large: more than %u rules (generated ones included)",
                    GRAMMAR_MAX_RULES);
        return G_NONE;
    }
    if (P->n_rules == P->cap_rules) {
        uint32_t nc = P->cap_rules ? P->cap_rules * 2 : 32;
        prule *q = realloc(P->rules, nc * sizeof *q);
        if (!q) return moe8_gp_oom(P), G_NONE;
        P->rules = q, P->cap_rules = nc;
    }
    r = &P->rules[P->n_rules];
    memset(r, 0, sizeof *r);
    r->name = name, r->name_len = name_len;
    r->owner = generated ? owner : P->n_rules;
    r->src = src, r->generated = generated;
    r->ref_src = G_NONE, r->ref_rule = G_NONE;
    return P->n_rules++;
}

typedef struct {
    const char *s;
    uint32_t n;
} name_key;

static uint64_t name_hash(const void *ctx, uint32_t id) {
    const prule *r = &((const parser *)ctx)->rules[id];
    return moe8_hash64(r->name, r->name_len, 0);
}

static int name_eq(const void *ctx, uint32_t id, const void *key) {
    const prule *r = &((const parser *)ctx)->rules[id];
    const name_key *k = key;
    return r->name_len == k->n && !memcmp(r->name, k->s, k->n);
}

static uint32_t find_rule(parser *P, const char *name, uint32_t n) {
    name_key k = {name, n};
    int64_t id;
    if (!P->names.slots) return G_NONE;
    id = moe8_index_find(&P->names, moe8_hash64(name, n, 0), name_eq, P, &k);
    return id < 0 ? G_NONE : (uint32_t)id;
}

/* Enter user rule id (its name set, not yet in the table) into the name table. */
static int add_name(parser *P, uint32_t id) {
    const prule *r = &P->rules[id];
    name_key k = {r->name, r->name_len};
    if (!P->names.slots && moe8_index_init(&P->names, 128, name_hash)) return moe8_gp_oom(P), -1;
    if (moe8_index_add(&P->names, moe8_hash64(r->name, r->name_len, 0), id, name_eq, P, &k) == -2)
        return moe8_gp_oom(P), -1;
    return 0;
}

/* ---- literals, escapes, UTF-8 -------------------------------------------------- */

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One character of a literal or class at *i (escapes decoded); -1 on error. */
static int32_t parse_char(parser *P, size_t *i) {
    size_t s = *i;
    int c = at(P, s);
    if (c == '\\') {
        int e = at(P, s + 1), nd;
        uint32_t v = 0;
        switch (e) {
        case 'n': *i = s + 2; return '\n';
        case 'r': *i = s + 2; return '\r';
        case 't': *i = s + 2; return '\t';
        case '\\': case '"': case '[': case ']': *i = s + 2; return e;
        case 'x': nd = 2; break;
        case 'u': nd = 4; break;
        case 'U': nd = 8; break;
        case -1: moe8_gp_err(P, s, "unexpected end of input after '\\'"); return -1;
        default: moe8_gp_err(P, s, "unknown escape '\\%c'", e); return -1;
        }
        for (int k = 0; k < nd; k++) {
            int h = hexval(at(P, s + 2 + (size_t)k));
            if (h < 0) {
                moe8_gp_err(P, s, "escape '\\%c' wants %d hex digits", e, nd);
                return -1;
            }
            v = v << 4 | (uint32_t)h;
        }
        if (v > 0x10FFFF) {
            moe8_gp_err(P, s, "escape names U+%X, past U+10FFFF", v);
            return -1;
        }
        if (v >= 0xD800 && v <= 0xDFFF) {
            moe8_gp_err(P, s, "escape names the surrogate U+%04X, not a character", v);
            return -1;
        }
        *i = s + 2 + (size_t)nd;
        return (int32_t)v;
    }
    if (c < 0) {
        moe8_gp_err(P, s, "unexpected end of input");
        return -1;
    }
    {
        uint32_t cp;
        int k = moe8_utf8_decode((const uint8_t *)P->text + s, P->len - s, &cp);
        if (k <= 0) {
            moe8_gp_err(P, s, "invalid UTF-8 in the grammar text");
            return -1;
        }
        *i = s + (size_t)k;
        return (int32_t)cp;
    }
}

/* cp (parse_char's: no surrogate, <= U+10FFFF) as one single-byte class per UTF-8 byte. */
static int emit_codepoint(parser *P, pvec *out, uint32_t cp, size_t src) {
    char u[4];
    int n = moe8_utf8_encode(cp, u);
    for (int k = 0; k < n; k++) {
        uint32_t c = moe8_gp_byte_class(P, (unsigned char)u[k], src);
        if (c == G_NONE || push_el(P, out, GE_TERM, c, (uint32_t)src)) return -1;
    }
    return 0;
}

/* ---- sequences, alternatives, rules ------------------------------------------- */

static size_t parse_alternates(parser *P, size_t i, uint32_t rule, int nested);

/* Clone generated rule `id` and the generated rules under it (the
 * (old, new) pairs in map[0..*n_map) so a self-reference maps to the clone):
 * each copy of a repeated group then has its own rules, each with one
 * caller, which keeps the precomputed token tables exact (grammar_mask.c). */
static uint32_t clone_rule(parser *P, uint32_t id, uint32_t *map, uint32_t *n_map, uint32_t cap_map);

static int push_copy(parser *P, uint32_t dst, const pel *e, uint32_t *map, uint32_t *n_map,
                     uint32_t cap_map) {
    uint32_t arg = e->arg;
    if (e->kind == GE_REF && P->rules[arg].generated) {
        uint32_t k;
        for (k = 0; k < *n_map && map[2 * k] != arg; k++)
            ;
        arg = k < *n_map ? map[2 * k + 1] : clone_rule(P, arg, map, n_map, cap_map);
        if (arg == G_NONE) return -1;
    }
    return push_el(P, &P->rules[dst].body, e->kind, arg, e->src);
}

static uint32_t clone_rule(parser *P, uint32_t id, uint32_t *map, uint32_t *n_map, uint32_t cap_map) {
    uint32_t nid, n = P->rules[id].body.n;
    pel *body;
    if (*n_map >= cap_map) {
        moe8_gp_err(P, P->rules[id].src, "repeated group nests more than %u groups", cap_map);
        return G_NONE;
    }
    if (!(body = malloc((n ? n : 1) * sizeof *body))) return moe8_gp_oom(P), G_NONE;
    memcpy(body, P->rules[id].body.e, n * sizeof *body);
    nid = new_rule(P, NULL, 0, P->rules[id].owner, P->rules[id].src, 1);
    if (nid == G_NONE) {
        free(body);
        return G_NONE;
    }
    P->rules[nid].defined = 1;
    map[2 * *n_map] = id, map[2 * *n_map + 1] = nid;
    (*n_map)++;
    for (uint32_t k = 0; k < n; k++)
        if (push_copy(P, nid, &body[k], map, n_map, cap_map)) {
            free(body);
            return G_NONE;
        }
    free(body);
    return nid;
}

#define CLONE_MAP 4096

/* Append a copy of src[0..n) to rule dst; `fresh`: its generated rules cloned. */
static int copy_els(parser *P, uint32_t dst, const pel *src, uint32_t n, int fresh, uint32_t *map) {
    uint32_t n_map = 0;
    for (uint32_t k = 0; k < n; k++) {
        if (fresh ? push_copy(P, dst, &src[k], map, &n_map, CLONE_MAP)
                  : push_el(P, &P->rules[dst].body, src[k].kind, src[k].arg, src[k].src))
            return -1;
    }
    return 0;
}

/* llama.cpp's rewrite of the last item S = body[last..] repeated {min,max}
 * (max < 0: unbounded): S{m,n} = S..S (m) then S'(n-m), S'(k) ::= S S'(k-1) |,
 * S'(1) ::= S |; S{m,} = S..S (m) then S', S' ::= S S' |. The first use of
 * S keeps its rules; every other copy gets clones. */
static int repeat(parser *P, uint32_t rule, uint32_t last, int min, int max, size_t src) {
    pvec *out = &P->rules[rule].body;
    uint32_t n_prev = out->n - last, last_rec = G_NONE;
    pel *prev = malloc((n_prev ? n_prev : 1) * sizeof *prev);
    uint32_t *map = malloc(2 * CLONE_MAP * sizeof *map);
    int n_opt = max < 0 ? 1 : max - min, used = min > 0;
    if (!prev || !map) {
        free(prev), free(map);
        return moe8_gp_oom(P), -1;
    }
    memcpy(prev, out->e + last, n_prev * sizeof *prev);
    if (min == 0) {
        P->n_elements -= n_prev;
        out->n = last;
    } else {
        for (int k = 1; k < min; k++)
            if (copy_els(P, rule, prev, n_prev, 1, map)) goto fail;
    }
    for (int k = 0; k < n_opt; k++) {
        uint32_t id = new_rule(P, NULL, 0, P->rules[rule].owner, (uint32_t)src, 1);
        if (id == G_NONE) goto fail;
        P->rules[id].defined = 1;
        if (copy_els(P, id, prev, n_prev, used, map)) goto fail;
        used = 1;
        if (k > 0 || max < 0)
            if (push_el(P, &P->rules[id].body, GE_REF, max < 0 ? id : last_rec, (uint32_t)src)) goto fail;
        if (push_el(P, &P->rules[id].body, GE_ALT, 0, (uint32_t)src) ||
            push_el(P, &P->rules[id].body, GE_END, 0, (uint32_t)src))
            goto fail;
        last_rec = id;
    }
    if (n_opt > 0 && push_el(P, &P->rules[rule].body, GE_REF, last_rec, (uint32_t)src)) goto fail;
    free(prev), free(map);
    return 0;
fail:
    free(prev), free(map);
    return -1;
}

static int parse_int(parser *P, size_t *i, int *out) {
    long v = 0;
    size_t s = *i;
    if (at(P, s) < '0' || at(P, s) > '9') {
        moe8_gp_err(P, s, "expecting a number in '{m,n}'");
        return -1;
    }
    while (at(P, *i) >= '0' && at(P, *i) <= '9') {
        v = v * 10 + (at(P, *i) - '0');
        if (v > GRAMMAR_MAX_REPEAT) {
            moe8_gp_err(P, s, "repetition count above the limit of %d", GRAMMAR_MAX_REPEAT);
            return -1;
        }
        (*i)++;
    }
    *out = (int)v;
    return 0;
}

static size_t parse_class(parser *P, size_t i, uint32_t rule) {
    size_t s = i;
    int negate = 0;
    uint32_t n = 0, cap = 16, cls;
    cprange *r = malloc(cap * sizeof *r);
    if (!r) return moe8_gp_oom(P), i;
    i++;
    if (at(P, i) == '^') negate = 1, i++;
    while (at(P, i) != ']') {
        int32_t lo, hi;
        if (at(P, i) < 0) {
            moe8_gp_err(P, s, "unterminated character class");
            goto out;
        }
        if ((lo = parse_char(P, &i)) < 0) goto out;
        hi = lo;
        if (at(P, i) == '-' && at(P, i + 1) != ']' && at(P, i + 1) >= 0) {
            size_t rs = i;
            i++;
            if ((hi = parse_char(P, &i)) < 0) goto out;
            if (hi < lo) {
                moe8_gp_err(P, rs, "character range is backwards (U+%04X > U+%04X)", (unsigned)lo,
                            (unsigned)hi);
                goto out;
            }
        }
        if (n == cap) {
            cprange *q = realloc(r, 2 * cap * sizeof *q);
            if (!q) {
                moe8_gp_oom(P);
                goto out;
            }
            r = q, cap *= 2;
        }
        r[n].lo = (uint32_t)lo, r[n++].hi = (uint32_t)hi;
    }
    i++;
    if (!n && !negate) {
        moe8_gp_err(P, s, "empty character class");
        goto out;
    }
    cls = moe8_gp_range_class(P, r, n, negate, s);
    if (cls != G_NONE) push_el(P, &P->rules[rule].body, GE_TERM, cls, (uint32_t)s);
out:
    free(r);
    return i;
}

/* `<[N]>` at *i: token N, as the bytes grammar.h's moe8_grammar_token_ref
 * gives it (one single-byte class each). */
static int parse_token_ref(parser *P, size_t *i, uint32_t rule) {
    const size_t s = *i;
    size_t k = s + 2;
    uint32_t v = 0;
    char b[GRAMMAR_TOKEN_REF_LEN];
    if (at(P, s + 1) != '[' || at(P, k) < '0' || at(P, k) > '9')
        return moe8_gp_err(P, s, "expecting a token id '<[N]>'"), -1;
    while (at(P, k) >= '0' && at(P, k) <= '9') {
        v = v * 10 + (uint32_t)(at(P, k++) - '0');
        if (v > GRAMMAR_TOKEN_REF_MAX) return moe8_gp_err(P, s, "token id past %u", (unsigned)GRAMMAR_TOKEN_REF_MAX), -1;
    }
    if (at(P, k) != ']' || at(P, k + 1) != '>') return moe8_gp_err(P, s, "expecting ']>' to close the token id"), -1;
    *i = k + 2;
    moe8_grammar_token_ref((int32_t)v, b);
    for (int n = 0; n < GRAMMAR_TOKEN_REF_LEN; n++) {
        const uint32_t c = moe8_gp_byte_class(P, (unsigned char)b[n], s);
        if (c == G_NONE || push_el(P, &P->rules[rule].body, GE_TERM, c, (uint32_t)s)) return -1;
    }
    return 0;
}

static size_t parse_sequence(parser *P, size_t i, uint32_t rule, int nested) {
    uint32_t last = P->rules[rule].body.n;
    int have_last = 0;
    while (P->st == MOE8_OK) {
        int c = at(P, i);
        size_t s = i;
        if (c == '"') {
            last = P->rules[rule].body.n, have_last = 1;
            i++;
            while (at(P, i) != '"') {
                int32_t cp;
                if (at(P, i) < 0) return moe8_gp_err(P, s, "unterminated string literal"), i;
                if ((cp = parse_char(P, &i)) < 0) return i;
                if (emit_codepoint(P, &P->rules[rule].body, (uint32_t)cp, s)) return i;
            }
            if (P->rules[rule].body.n == last) have_last = 0; /* "" matches nothing to repeat */
            i = skip_space(P, i + 1, nested);
        } else if (c == '[') {
            last = P->rules[rule].body.n, have_last = 1;
            i = skip_space(P, parse_class(P, i, rule), nested);
        } else if (c == '<') {
            last = P->rules[rule].body.n, have_last = 1;
            if (parse_token_ref(P, &i, rule)) return i;
            i = skip_space(P, i, nested);
        } else if (c == '.') {
            cprange any = {0, 0x10FFFF};
            uint32_t cls = moe8_gp_range_class(P, &any, 1, 0, s);
            last = P->rules[rule].body.n, have_last = 1;
            if (cls == G_NONE || push_el(P, &P->rules[rule].body, GE_TERM, cls, (uint32_t)s)) return i;
            i = skip_space(P, i + 1, nested);
        } else if (is_word(c)) {
            size_t e = i;
            uint32_t ref;
            while (is_word(at(P, e))) e++;
            ref = find_rule(P, P->text + i, (uint32_t)(e - i));
            if (ref == G_NONE) {
                ref = new_rule(P, P->text + i, (uint32_t)(e - i), 0, (uint32_t)i, 0);
                if (ref == G_NONE || add_name(P, ref)) return i;
            }
            if (P->rules[ref].ref_src == G_NONE) P->rules[ref].ref_src = (uint32_t)i, P->rules[ref].ref_rule = rule;
            last = P->rules[rule].body.n, have_last = 1;
            if (push_el(P, &P->rules[rule].body, GE_REF, ref, (uint32_t)i)) return i;
            i = skip_space(P, e, nested);
        } else if (c == '(') {
            uint32_t sub;
            if (P->depth >= GRAMMAR_MAX_NESTING)
                return moe8_gp_err(P, s, "groups nested deeper than %d", GRAMMAR_MAX_NESTING), i;
            sub = new_rule(P, NULL, 0, P->rules[rule].owner, (uint32_t)s, 1);
            if (sub == G_NONE) return i;
            P->rules[sub].defined = 1;
            P->depth++;
            i = parse_alternates(P, skip_space(P, i + 1, 1), sub, 1);
            P->depth--;
            if (P->st != MOE8_OK) return i;
            if (at(P, i) != ')') return moe8_gp_err(P, s, "expecting ')' to close the group opened here"), i;
            last = P->rules[rule].body.n, have_last = 1;
            if (push_el(P, &P->rules[rule].body, GE_REF, sub, (uint32_t)s)) return i;
            i = skip_space(P, i + 1, nested);
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            int min, max;
            if (!have_last) return moe8_gp_err(P, s, "'%c' has no item before it to repeat", c), i;
            if (c == '*') min = 0, max = -1, i++;
            else if (c == '+') min = 1, max = -1, i++;
            else if (c == '?') min = 0, max = 1, i++;
            else {
                i = skip_space(P, i + 1, nested);
                if (parse_int(P, &i, &min)) return i;
                i = skip_space(P, i, nested);
                max = min;
                if (at(P, i) == ',') {
                    i = skip_space(P, i + 1, nested);
                    max = -1;
                    if (at(P, i) >= '0' && at(P, i) <= '9') {
                        if (parse_int(P, &i, &max)) return i;
                        i = skip_space(P, i, nested);
                    }
                }
                if (at(P, i) != '}') return moe8_gp_err(P, s, "expecting '}' to close the repetition"), i;
                i++;
                if (max >= 0 && max < min)
                    return moe8_gp_err(P, s, "repetition {%d,%d} has its maximum below its minimum", min,
                                       max), i;
            }
            if (repeat(P, rule, last, min, max, s)) return i;
            have_last = 0; /* "x**" is an error, as in llama.cpp */
            i = skip_space(P, i, nested);
        } else {
            break;
        }
    }
    return i;
}

static size_t parse_alternates(parser *P, size_t i, uint32_t rule, int nested) {
    i = parse_sequence(P, i, rule, nested);
    while (P->st == MOE8_OK && at(P, i) == '|') {
        if (push_el(P, &P->rules[rule].body, GE_ALT, 0, (uint32_t)i)) return i;
        i = parse_sequence(P, skip_space(P, i + 1, 1), rule, nested);
    }
    if (P->st == MOE8_OK) push_el(P, &P->rules[rule].body, GE_END, 0, (uint32_t)i);
    return i;
}

static size_t parse_rule(parser *P, size_t i) {
    size_t s = i, e = i;
    uint32_t r;
    while (is_word(at(P, e))) e++;
    if (e == i) {
        int c = at(P, i);
        if (c >= 0x20 && c < 0x7F) return moe8_gp_err(P, s, "expecting a rule name, found '%c'", c), i;
        return moe8_gp_err(P, s, "expecting a rule name"), i;
    }
    r = find_rule(P, P->text + i, (uint32_t)(e - i));
    if (r != G_NONE && P->rules[r].defined) {
        int l, c;
        line_col(P->text, P->rules[r].src, &l, &c);
        return moe8_gp_err(P, s, "rule '%.*s' is defined twice (first at line %d col %d)", (int)(e - i),
                           P->text + i, l, c), i;
    }
    if (r == G_NONE) {
        r = new_rule(P, P->text + i, (uint32_t)(e - i), 0, (uint32_t)i, 0);
        if (r == G_NONE || add_name(P, r)) return i;
    }
    P->rules[r].defined = 1, P->rules[r].src = (uint32_t)s;
    P->cur = r;
    i = skip_space(P, e, 0);
    if (!(at(P, i) == ':' && at(P, i + 1) == ':' && at(P, i + 2) == '='))
        return moe8_gp_err(P, i, "expecting '::=' after the rule name"), i;
    i = parse_alternates(P, skip_space(P, i + 3, 1), r, 0);
    if (P->st != MOE8_OK) return i;
    if (at(P, i) == '\r') i += at(P, i + 1) == '\n' ? 2 : 1;
    else if (at(P, i) == '\n') i++;
    else if (at(P, i) >= 0) {
        int c = at(P, i);
        if (c == ')') return moe8_gp_err(P, i, "unexpected ')' without a '(' before it"), i;
        if (c >= 0x20 && c < 0x7F)
            return moe8_gp_err(P, i, "unexpected '%c' (expecting the end of the line)", c), i;
        return moe8_gp_err(P, i, "unexpected byte 0x%02X (expecting the end of the line)", c), i;
    }
    P->cur = G_NONE;
    return skip_space(P, i, 1);
}


void moe8_gp_free(parser *P) {
    for (uint32_t r = 0; r < P->n_rules; r++) free(P->rules[r].body.e);
    for (uint32_t c = 0; c < P->n_cls; c++) free(P->cls[c].tab), free(P->cls[c].min);
    free(P->rules);
    free(P->cls);
    moe8_index_free(&P->names);
}

/* ---- the whole text --------------------------------------------------------------- */

moe8_status moe8_gp_parse(parser *P, const char *text, size_t len, moe8_error *err) {
    size_t i;
    memset(P, 0, sizeof *P);
    P->text = text ? text : "", P->len = len, P->err = err, P->cur = G_NONE;
    for (int b = 0; b < 256; b++) P->byte_cls[b] = G_NONE;
    i = skip_space(P, 0, 1);
    while (P->st == MOE8_OK && i < len) i = parse_rule(P, i);
    if (P->st != MOE8_OK) return P->st;
    P->cur = G_NONE;
    if (P->n_rules == 0) {
        moe8_fail(err, MOE8_ERR_INVALID_ARG, 0, "grammar: empty grammar (no rules)");
        return P->st = MOE8_ERR_INVALID_ARG;
    }
    for (uint32_t r = 0; r < P->n_rules; r++)
        if (!P->rules[r].defined) {
            char in[80];
            moe8_gp_rule_label(P, P->rules[r].ref_rule, in, sizeof in);
            return moe8_gp_err(P, P->rules[r].ref_src, "undefined rule '%.*s' (in rule '%s')",
                               (int)(P->rules[r].name_len > 64 ? 64 : P->rules[r].name_len),
                               P->rules[r].name, in);
        }
    if ((P->root = find_rule(P, "root", 4)) == G_NONE) {
        moe8_fail(err, MOE8_ERR_INVALID_ARG, 0, "grammar: no rule 'root' (the start rule)");
        return P->st = MOE8_ERR_INVALID_ARG;
    }
    return MOE8_OK;
}
