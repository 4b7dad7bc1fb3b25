/*
 * grammar.c — GBNF grammars (llama.cpp's syntax) compiled into a byte-level
 * pushdown automaton, and one request's state in it.
 *
 * Syntax (llama.cpp grammars/README.md): rules `name ::= alternatives`, one
 * per line (a rule continues on the next line after `|` or inside `( )`);
 * alternatives `|`; sequences; groups `( )`; `?` `*` `+` `{m}` `{m,}` `{m,n}`
 * after an item; string literals "..." and character classes [a-z] [^...]
 * with the escapes \n \r \t \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH (code
 * points); `.` any character; `#` comments; names [A-Za-z0-9_-]+; the root
 * rule is `root`. Repetitions are rewritten as llama.cpp's parser does
 * (S{m,n} = m copies of S, then n-m nested optional rules; S* = a right-
 * recursive rule), so a generated rule has one caller.
 *
 * Layout: elements in one array, each rule its alternatives separated by ALT
 * and closed by END. A terminal (TERM) is a character class compiled to a
 * DFA over UTF-8 bytes (a literal is one single-byte class per byte), so a
 * token may stop inside a character: the DFA state travels in the stack top.
 * Classes never match surrogates or invalid UTF-8.
 *
 * Stacks are interned nodes (code, parent) in a walk engine (gwk): a top is
 * a terminal about to match with its DFA state, each node below is the
 * element to expand when the rule above it ends (tail calls push nothing, so
 * `x ::= a x |` runs in constant depth). A state is a set of tops. A byte
 * step matches every top, expands completed elements until every path again
 * ends at a terminal (or the grammar's end), and interns the result; steps
 * are memoized per (set, byte class) — bytes that every DFA row and FOLLOW
 * set treat alike form a class — so walking a trie of tokens is a lazily
 * built DFA over stack sets.
 *
 * In ci_mode (grammar_mask.c's precomputation) a walk starts from one top
 * over N_MARKER(t), the unknown rest of the stack (up to 64 walks, tags t,
 * run as one). A rule ending onto the marker continues after its caller when
 * it has exactly one (generated rules always do: the copies of a repeated
 * group get cloned rules), through callers in tail position in one hop
 * (exit_pos, so a {0,n} chain costs O(1) per step), ends the grammar for a
 * root nobody refers to, and otherwise becomes a "marker top": the next byte
 * is checked against the rule's FOLLOW set and, if it may follow, marks tag t
 * in the set's umask (the outcome depends on the real stack).
 *
 * Compile-time checks: every referenced rule defined, a root, no left
 * recursion (llama.cpp's check, nullable prefixes included), every reachable
 * rule able to finish, and the limits of grammar.h.
 */
#define GRAMMAR_INTERNAL
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/index.h"
#include "grammar/grammar.h"

/* ======================================================================== */
/* Parser                                                                    */
/* ======================================================================== */

typedef struct { uint8_t kind; uint32_t arg, src; } pel; /* element + source offset */

typedef struct {
    pel *e;
    uint32_t n, cap;
} pvec;

typedef struct {
    const char *name; /* user rules: into the text (not terminated) */
    uint32_t name_len;
    uint32_t owner;   /* the user rule a generated rule belongs to (itself for user rules) */
    uint32_t src;     /* definition (user) or group/repetition (generated) offset */
    uint32_t ref_src; /* first reference, for "undefined rule" */
    uint32_t ref_rule;
    int defined, generated;
    pvec body;
} prule;

/* A character class being built: sorted, merged code point ranges. */
typedef struct { uint32_t lo, hi; } cprange;

typedef struct {
    uint16_t *tab;  /* [n_states][256] */
    uint32_t *min;  /* [n_states] */
    uint32_t n_states;
    uint64_t hash;
} pclass;

typedef struct {
    const char *text;
    size_t len;
    moe8_error *err;
    moe8_status st;
    prule *rules;
    uint32_t n_rules, cap_rules;
    pclass *cls;
    uint32_t n_cls, cap_cls, dfa_states;
    uint32_t byte_cls[256]; /* class id of "exactly this byte", G_NONE until made */
    uint64_t n_elements;
    moe8_index names; /* user rules by name (slots NULL until the first) */
    int depth;
    uint32_t cur; /* rule being parsed */
} parser;

static void line_col(const char *t, size_t off, int *line, int *col) {
    int l = 1, c = 1;
    for (size_t i = 0; i < off; i++) {
        if (t[i] == '\n') l++, c = 1;
        else if (((unsigned char)t[i] & 0xC0) != 0x80) c++;
    }
    *line = l, *col = c;
}

/* The user rule a rule belongs to, as text for messages. */
static void rule_label(const parser *P, uint32_t r, char *buf, size_t cap) {
    const prule *u = &P->rules[P->rules[r].owner];
    snprintf(buf, cap, "%.*s", (int)(u->name_len > 64 ? 64 : u->name_len), u->name);
}

static moe8_status perr(parser *P, size_t off, const char *fmt, ...) MOE8_PRINTF(3, 4);
static moe8_status perr(parser *P, size_t off, const char *fmt, ...) {
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
        rule_label(P, P->cur, rn, sizeof rn);
        moe8_fail(P->err, MOE8_ERR_INVALID_ARG, (int64_t)off,
                  "grammar: line %d col %d: in rule '%s': %s", line, col, rn, msg);
    } else {
        moe8_fail(P->err, MOE8_ERR_INVALID_ARG, (int64_t)off, "grammar: line %d col %d: %s", line,
                  col, msg);
    }
    P->st = MOE8_ERR_INVALID_ARG;
    return P->st;
}

static moe8_status poom(parser *P) {
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
        perr(P, src, "grammar too large: more than %u elements after expanding repetitions",
             GRAMMAR_MAX_ELEMENTS);
        return -1;
    }
    if (v->n == v->cap) {
        uint32_t nc = v->cap ? v->cap * 2 : 16;
        pel *q = realloc(v->e, nc * sizeof *q);
        if (!q) return poom(P), -1;
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
        perr(P, src, "grammar too large: more than %u rules (generated ones included)",
             GRAMMAR_MAX_RULES);
        return G_NONE;
    }
    if (P->n_rules == P->cap_rules) {
        uint32_t nc = P->cap_rules ? P->cap_rules * 2 : 32;
        prule *q = realloc(P->rules, nc * sizeof *q);
        if (!q) return poom(P), G_NONE;
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
    if (!P->names.slots && moe8_index_init(&P->names, 128, name_hash)) return poom(P), -1;
    if (moe8_index_add(&P->names, moe8_hash64(r->name, r->name_len, 0), id, name_eq, P, &k) == -2)
        return poom(P), -1;
    return 0;
}

/* ---- character classes -> UTF-8 DFAs ----------------------------------------- */

static int cmp_range(const void *a, const void *b) {
    const cprange *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Sort and merge; negate; drop surrogates. Returns the new count. */
static uint32_t normalize_ranges(cprange *r, uint32_t n, int negate, cprange *out) {
    uint32_t m = 0, k = 0;
    cprange tmp[2];
    qsort(r, n, sizeof *r, cmp_range);
    for (uint32_t i = 0; i < n; i++) {
        if (m && r[i].lo <= r[m - 1].hi + 1) {
            if (r[i].hi > r[m - 1].hi) r[m - 1].hi = r[i].hi;
        } else {
            r[m++] = r[i];
        }
    }
    if (negate) { /* complement in [0, 0x10FFFF] */
        uint32_t next = 0;
        for (uint32_t i = 0; i < m; i++) {
            if (r[i].lo > next) out[k].lo = next, out[k++].hi = r[i].lo - 1;
            next = r[i].hi + 1;
        }
        if (next <= 0x10FFFF) out[k].lo = next, out[k++].hi = 0x10FFFF;
    } else {
        memcpy(out, r, m * sizeof *r), k = m;
    }
    /* remove [D800, DFFF]: a range may split in two */
    m = 0;
    for (uint32_t i = 0; i < k; i++) {
        cprange x = out[i];
        int nt = 0;
        if (x.hi < 0xD800 || x.lo > 0xDFFF) tmp[nt++] = x;
        else {
            if (x.lo < 0xD800) tmp[nt].lo = x.lo, tmp[nt++].hi = 0xD7FF;
            if (x.hi > 0xDFFF) tmp[nt].lo = 0xE000, tmp[nt++].hi = x.hi;
        }
        for (int j = 0; j < nt; j++) r[m++] = tmp[j];
    }
    memcpy(out, r, m * sizeof *r);
    return m;
}

/* A DFA state under construction: k continuation bytes still to read; the
 * code points (relative to this prefix) still possible. */
typedef struct {
    uint32_t k;
    cprange *r;
    uint32_t n;
} dstate;

typedef struct {
    dstate *s;
    uint32_t n, cap;
    uint16_t *tab;
    int oom, too_many;
} dbuild;

/* Ranges of [lo, hi] ∩ set, shifted down by lo, into out; their count. */
static uint32_t clip(const cprange *r, uint32_t n, uint32_t lo, uint32_t hi, cprange *out) {
    uint32_t m = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t a = r[i].lo > lo ? r[i].lo : lo, b = r[i].hi < hi ? r[i].hi : hi;
        if (a <= b) out[m].lo = a - lo, out[m++].hi = b - lo;
    }
    return m;
}

static uint32_t dstate_get(dbuild *B, uint32_t k, const cprange *r, uint32_t n) {
    for (uint32_t i = 1; i < B->n; i++)
        if (B->s[i].k == k && B->s[i].n == n && !memcmp(B->s[i].r, r, n * sizeof *r)) return i;
    if (B->n >= GRAMMAR_MAX_CLASS_STATES) {
        B->too_many = 1;
        return 0;
    }
    if (B->n == B->cap) {
        uint32_t nc = B->cap * 2;
        dstate *q = realloc(B->s, nc * sizeof *q);
        uint16_t *t = realloc(B->tab, (size_t)nc * 256 * sizeof *t);
        if (q) B->s = q;
        if (t) B->tab = t;
        if (!q || !t) {
            B->oom = 1;
            return 0;
        }
        B->cap = nc;
    }
    dstate *d = &B->s[B->n];
    d->k = k, d->n = n;
    if (!(d->r = malloc((n ? n : 1) * sizeof *r))) {
        B->oom = 1;
        return 0;
    }
    memcpy(d->r, r, n * sizeof *r);
    return B->n++;
}

/* Build the DFA of a normalized code point set: state 0 reads the lead byte. */
static int build_dfa(const cprange *set, uint32_t n, dbuild *B) {
    cprange *tmp = malloc((n + 1) * sizeof *tmp);
    memset(B, 0, sizeof *B);
    B->cap = 16;
    B->s = calloc(B->cap, sizeof *B->s);
    B->tab = malloc((size_t)B->cap * 256 * sizeof *B->tab);
    if (!tmp || !B->s || !B->tab) {
        free(tmp);
        B->oom = 1;
        return -1;
    }
    B->n = 1; /* state 0: lead byte */
    for (uint32_t s = 0; s < B->n && !B->oom && !B->too_many; s++) {
        uint16_t *row = B->tab + (size_t)s * 256;
        for (int b = 0; b < 256; b++) {
            uint32_t lo, hi, k, m;
            row[b] = G_REJECT;
            if (s == 0) {
                if (b < 0x80) {
                    for (uint32_t i = 0; i < n; i++)
                        if ((uint32_t)b >= set[i].lo && (uint32_t)b <= set[i].hi) row[b] = G_DONE;
                    continue;
                }
                if (b >= 0xC2 && b <= 0xDF) k = 1, lo = (uint32_t)(b & 0x1F) << 6, hi = lo + 63;
                else if (b >= 0xE0 && b <= 0xEF) k = 2, lo = (uint32_t)(b & 0x0F) << 12, hi = lo + 4095;
                else if (b >= 0xF0 && b <= 0xF4) k = 3, lo = (uint32_t)(b & 0x07) << 18, hi = lo + 262143;
                else continue;
                uint32_t vlo = k == 1 ? 0x80 : k == 2 ? 0x800 : 0x10000; /* no overlong forms */
                uint32_t base = lo;
                if (lo < vlo) lo = vlo;
                if (hi > 0x10FFFF) hi = 0x10FFFF;
                if (lo > hi) continue;
                m = clip(set, n, lo, hi, tmp);
                for (uint32_t i = 0; i < m; i++) tmp[i].lo += lo - base, tmp[i].hi += lo - base;
            } else {
                dstate *d = &B->s[s];
                uint32_t span;
                if (b < 0x80 || b > 0xBF) continue;
                k = d->k - 1;
                span = 1u << (6 * k);
                lo = (uint32_t)(b & 0x3F) * span, hi = lo + span - 1;
                m = clip(d->r, d->n, lo, hi, tmp);
            }
            if (!m) continue;
            if (k == 0) row[b] = G_DONE;
            else {
                uint32_t t = dstate_get(B, k, tmp, m);
                if (!t) break;
                row = B->tab + (size_t)s * 256; /* tab may have moved */
                row[b] = (uint16_t)t;
            }
        }
    }
    free(tmp);
    return B->oom || B->too_many ? -1 : 0;
}

static void dbuild_free(dbuild *B) {
    for (uint32_t i = 1; i < B->n; i++) free(B->s[i].r);
    free(B->s);
    free(B->tab);
}

/* Intern a DFA (tab[n_states][256]): its class id, or G_NONE on failure. */
static uint32_t intern_class(parser *P, uint16_t *tab, uint32_t n_states, size_t src) {
    size_t bytes = (size_t)n_states * 256 * sizeof *tab;
    uint64_t h = moe8_hash64(tab, bytes, 0);
    pclass *c;
    for (uint32_t i = 0; i < P->n_cls; i++)
        if (P->cls[i].hash == h && P->cls[i].n_states == n_states && !memcmp(P->cls[i].tab, tab, bytes))
            return i;
    if (P->dfa_states + n_states > GRAMMAR_MAX_DFA_STATES) {
        perr(P, src, "grammar too large: character classes need more than %u UTF-8 DFA states",
             GRAMMAR_MAX_DFA_STATES);
        return G_NONE;
    }
    if (P->n_cls == P->cap_cls) {
        uint32_t nc = P->cap_cls ? P->cap_cls * 2 : 64;
        pclass *q = realloc(P->cls, nc * sizeof *q);
        if (!q) return poom(P), G_NONE;
        P->cls = q, P->cap_cls = nc;
    }
    c = &P->cls[P->n_cls];
    c->tab = malloc(bytes);
    c->min = malloc(n_states * sizeof *c->min);
    if (!c->tab || !c->min) {
        free(c->tab), free(c->min);
        return poom(P), G_NONE;
    }
    memcpy(c->tab, tab, bytes);
    c->n_states = n_states, c->hash = h;
    /* fewest bytes to complete the character from each state (Bellman-Ford) */
    for (uint32_t s = 0; s < n_states; s++) c->min[s] = G_NONE;
    for (int changed = 1; changed;) {
        changed = 0;
        for (uint32_t s = 0; s < n_states; s++)
            for (int b = 0; b < 256; b++) {
                uint16_t t = tab[(size_t)s * 256 + b];
                uint32_t v = t == G_DONE ? 1 : t == G_REJECT || c->min[t] == G_NONE ? G_NONE : c->min[t] + 1;
                if (v < c->min[s]) c->min[s] = v, changed = 1;
            }
    }
    P->dfa_states += n_states;
    return P->n_cls++;
}

static uint32_t byte_class(parser *P, unsigned b, size_t src) {
    if (P->byte_cls[b] == G_NONE) {
        uint16_t tab[256];
        for (int i = 0; i < 256; i++) tab[i] = G_REJECT;
        tab[b] = G_DONE;
        P->byte_cls[b] = intern_class(P, tab, 1, src);
    }
    return P->byte_cls[b];
}

/* The class of ranges r[0..n) (modified), negated or not; G_NONE on error. */
static uint32_t range_class(parser *P, cprange *r, uint32_t n, int negate, size_t src) {
    cprange *norm = malloc((2 * n + 4) * sizeof *norm);
    cprange *work = malloc((2 * n + 4) * sizeof *work);
    dbuild B;
    uint32_t m, id = G_NONE;
    if (!norm || !work) {
        free(norm), free(work);
        return poom(P), G_NONE;
    }
    memcpy(work, r, n * sizeof *r);
    m = normalize_ranges(work, n, negate, norm);
    if (m == 0) {
        free(norm), free(work);
        perr(P, src, "character class matches no character");
        return G_NONE;
    }
    if (build_dfa(norm, m, &B) == 0) id = intern_class(P, B.tab, B.n, src);
    else if (B.too_many)
        perr(P, src, "character class too complex: more than %u UTF-8 DFA states",
             GRAMMAR_MAX_CLASS_STATES);
    else poom(P);
    dbuild_free(&B);
    free(norm), free(work);
    return id;
}

/* ---- literals, escapes, UTF-8 -------------------------------------------------- */

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Decode one UTF-8 character of the text at *i; -1 if invalid. */
static int32_t utf8_at(const parser *P, size_t *i) {
    int c = at(P, *i), n, k;
    uint32_t cp;
    if (c < 0x80) return (*i)++, c;
    if (c >= 0xC2 && c <= 0xDF) n = 1, cp = (uint32_t)c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF) n = 2, cp = (uint32_t)c & 0x0F;
    else if (c >= 0xF0 && c <= 0xF4) n = 3, cp = (uint32_t)c & 0x07;
    else return -1;
    for (k = 1; k <= n; k++) {
        int d = at(P, *i + (size_t)k);
        if (d < 0x80 || d > 0xBF) return -1;
        cp = cp << 6 | ((uint32_t)d & 0x3F);
    }
    if ((n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF))
        return -1;
    *i += (size_t)n + 1;
    return (int32_t)cp;
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
        case -1: perr(P, s, "unexpected end of input after '\\'"); return -1;
        default: perr(P, s, "unknown escape '\\%c'", e); return -1;
        }
        for (int k = 0; k < nd; k++) {
            int h = hexval(at(P, s + 2 + (size_t)k));
            if (h < 0) {
                perr(P, s, "escape '\\%c' wants %d hex digits", e, nd);
                return -1;
            }
            v = v << 4 | (uint32_t)h;
        }
        if (v > 0x10FFFF) {
            perr(P, s, "escape names U+%X, past U+10FFFF", v);
            return -1;
        }
        if (v >= 0xD800 && v <= 0xDFFF) {
            perr(P, s, "escape names the surrogate U+%04X, not a character", v);
            return -1;
        }
        *i = s + 2 + (size_t)nd;
        return (int32_t)v;
    }
    if (c < 0) {
        perr(P, s, "unexpected end of input");
        return -1;
    }
    {
        int32_t cp = utf8_at(P, i);
        if (cp < 0) perr(P, s, "invalid UTF-8 in the grammar text");
        return cp;
    }
}

static int emit_codepoint(parser *P, pvec *out, uint32_t cp, size_t src) {
    unsigned char u[4];
    int n;
    if (cp < 0x80) u[0] = (unsigned char)cp, n = 1;
    else if (cp < 0x800) u[0] = (unsigned char)(0xC0 | cp >> 6), u[1] = (unsigned char)(0x80 | (cp & 0x3F)), n = 2;
    else if (cp < 0x10000)
        u[0] = (unsigned char)(0xE0 | cp >> 12), u[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F)),
        u[2] = (unsigned char)(0x80 | (cp & 0x3F)), n = 3;
    else
        u[0] = (unsigned char)(0xF0 | cp >> 18), u[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F)),
        u[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F)), u[3] = (unsigned char)(0x80 | (cp & 0x3F)), n = 4;
    for (int k = 0; k < n; k++) {
        uint32_t c = byte_class(P, u[k], src);
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
        perr(P, P->rules[id].src, "repeated group nests more than %u groups", cap_map);
        return G_NONE;
    }
    if (!(body = malloc((n ? n : 1) * sizeof *body))) return poom(P), G_NONE;
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
        return poom(P), -1;
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
        perr(P, s, "expecting a number in '{m,n}'");
        return -1;
    }
    while (at(P, *i) >= '0' && at(P, *i) <= '9') {
        v = v * 10 + (at(P, *i) - '0');
        if (v > GRAMMAR_MAX_REPEAT) {
            perr(P, s, "repetition count above the limit of %d", GRAMMAR_MAX_REPEAT);
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
    if (!r) return poom(P), i;
    i++;
    if (at(P, i) == '^') negate = 1, i++;
    while (at(P, i) != ']') {
        int32_t lo, hi;
        if (at(P, i) < 0) {
            perr(P, s, "unterminated character class");
            goto out;
        }
        if ((lo = parse_char(P, &i)) < 0) goto out;
        hi = lo;
        if (at(P, i) == '-' && at(P, i + 1) != ']' && at(P, i + 1) >= 0) {
            size_t rs = i;
            i++;
            if ((hi = parse_char(P, &i)) < 0) goto out;
            if (hi < lo) {
                perr(P, rs, "character range is backwards (U+%04X > U+%04X)", (unsigned)lo, (unsigned)hi);
                goto out;
            }
        }
        if (n == cap) {
            cprange *q = realloc(r, 2 * cap * sizeof *q);
            if (!q) {
                poom(P);
                goto out;
            }
            r = q, cap *= 2;
        }
        r[n].lo = (uint32_t)lo, r[n++].hi = (uint32_t)hi;
    }
    i++;
    if (!n && !negate) {
        perr(P, s, "empty character class");
        goto out;
    }
    cls = range_class(P, r, n, negate, s);
    if (cls != G_NONE) push_el(P, &P->rules[rule].body, GE_TERM, cls, (uint32_t)s);
out:
    free(r);
    return i;
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
                if (at(P, i) < 0) return perr(P, s, "unterminated string literal"), i;
                if ((cp = parse_char(P, &i)) < 0) return i;
                if (emit_codepoint(P, &P->rules[rule].body, (uint32_t)cp, s)) return i;
            }
            if (P->rules[rule].body.n == last) have_last = 0; /* "" matches nothing to repeat */
            i = skip_space(P, i + 1, nested);
        } else if (c == '[') {
            last = P->rules[rule].body.n, have_last = 1;
            i = skip_space(P, parse_class(P, i, rule), nested);
        } else if (c == '.') {
            cprange any = {0, 0x10FFFF};
            uint32_t cls = range_class(P, &any, 1, 0, s);
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
                return perr(P, s, "groups nested deeper than %d", GRAMMAR_MAX_NESTING), i;
            sub = new_rule(P, NULL, 0, P->rules[rule].owner, (uint32_t)s, 1);
            if (sub == G_NONE) return i;
            P->rules[sub].defined = 1;
            P->depth++;
            i = parse_alternates(P, skip_space(P, i + 1, 1), sub, 1);
            P->depth--;
            if (P->st != MOE8_OK) return i;
            if (at(P, i) != ')') return perr(P, s, "expecting ')' to close the group opened here"), i;
            last = P->rules[rule].body.n, have_last = 1;
            if (push_el(P, &P->rules[rule].body, GE_REF, sub, (uint32_t)s)) return i;
            i = skip_space(P, i + 1, nested);
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            int min, max;
            if (!have_last) return perr(P, s, "'%c' has no item before it to repeat", c), i;
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
                if (at(P, i) != '}') return perr(P, s, "expecting '}' to close the repetition"), i;
                i++;
                if (max >= 0 && max < min)
                    return perr(P, s, "repetition {%d,%d} has its maximum below its minimum", min, max), i;
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
        if (c >= 0x20 && c < 0x7F) return perr(P, s, "expecting a rule name, found '%c'", c), i;
        return perr(P, s, "expecting a rule name"), i;
    }
    r = find_rule(P, P->text + i, (uint32_t)(e - i));
    if (r != G_NONE && P->rules[r].defined) {
        int l, c;
        line_col(P->text, P->rules[r].src, &l, &c);
        return perr(P, s, "rule '%.*s' is defined twice (first at line %d col %d)", (int)(e - i),
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
        return perr(P, i, "expecting '::=' after the rule name"), i;
    i = parse_alternates(P, skip_space(P, i + 3, 1), r, 0);
    if (P->st != MOE8_OK) return i;
    if (at(P, i) == '\r') i += at(P, i + 1) == '\n' ? 2 : 1;
    else if (at(P, i) == '\n') i++;
    else if (at(P, i) >= 0) {
        int c = at(P, i);
        if (c == ')') return perr(P, i, "unexpected ')' without a '(' before it"), i;
        if (c >= 0x20 && c < 0x7F) return perr(P, i, "unexpected '%c' (expecting the end of the line)", c), i;
        return perr(P, i, "unexpected byte 0x%02X (expecting the end of the line)", c), i;
    }
    P->cur = G_NONE;
    return skip_space(P, i, 1);
}

/* ======================================================================== */
/* Analysis: flatten, nullable, left recursion, reachability, FIRST/FOLLOW   */
/* ======================================================================== */

static void bs_set(g_byteset *s, unsigned b) { s->w[b >> 6] |= 1ULL << (b & 63); }
static int bs_or(g_byteset *d, const g_byteset *s) {
    int ch = 0;
    for (int k = 0; k < 4; k++) {
        uint64_t v = d->w[k] | s->w[k];
        ch |= v != d->w[k];
        d->w[k] = v;
    }
    return ch;
}

static int is_end(const grammar *g, uint32_t pos) {
    return g->kind[pos] == GE_END || g->kind[pos] == GE_ALT;
}

static int flatten(parser *P, grammar *g) {
    uint64_t n = 0, n_alt = 0;
    uint32_t k = 0, a = 0;
    for (uint32_t r = 0; r < P->n_rules; r++) {
        n += P->rules[r].body.n;
        for (uint32_t j = 0; j < P->rules[r].body.n; j++)
            n_alt += P->rules[r].body.e[j].kind != GE_REF && P->rules[r].body.e[j].kind != GE_TERM;
    }
    g->n_el = (uint32_t)n, g->n_rules = P->n_rules;
    g->kind = malloc(n);
    g->arg = malloc(n * sizeof *g->arg);
    g->el_rule = malloc(n * sizeof *g->el_rule);
    g->alt_off = malloc((P->n_rules + 1) * sizeof *g->alt_off);
    g->alt_start = malloc((n_alt + 1) * sizeof *g->alt_start);
    if (!g->kind || !g->arg || !g->el_rule || !g->alt_off || !g->alt_start) return -1;
    for (uint32_t r = 0; r < P->n_rules; r++) {
        const pvec *b = &P->rules[r].body;
        g->alt_off[r] = a;
        g->alt_start[a++] = k;
        for (uint32_t j = 0; j < b->n; j++, k++) {
            g->kind[k] = b->e[j].kind, g->arg[k] = b->e[j].arg, g->el_rule[k] = r;
            if (b->e[j].kind == GE_ALT) g->alt_start[a++] = k + 1;
        }
    }
    g->alt_off[P->n_rules] = a;
    return 0;
}

static int check_left_recursion(parser *P, const grammar *g, const uint8_t *nullable) {
    /* edges r -> s when s can come first in r (after nullable elements);
     * an iterative DFS finds a cycle (color 1 = on the path, 2 = done) */
    uint32_t nr = g->n_rules, n_edges = 0;
    uint32_t *eoff = calloc(nr + 1, sizeof *eoff), *edge = NULL, *esrc = NULL, *stack = NULL;
    uint8_t *color = calloc(nr, 1);
    int rc = 0;
    if (!eoff || !color) goto oom;
    for (int pass = 0; pass < 2; pass++) {
        n_edges = 0;
        for (uint32_t r = 0; r < nr; r++) {
            const pvec *b = &P->rules[r].body;
            int left = 1;
            if (pass) eoff[r] = n_edges;
            for (uint32_t j = 0; j < b->n; j++) {
                if (b->e[j].kind == GE_ALT || b->e[j].kind == GE_END) left = 1;
                else if (!left) continue;
                else if (b->e[j].kind == GE_TERM) left = 0;
                else {
                    if (pass) edge[n_edges] = b->e[j].arg, esrc[n_edges] = b->e[j].src;
                    n_edges++;
                    if (!nullable[b->e[j].arg]) left = 0;
                }
            }
        }
        if (!pass) {
            edge = malloc((n_edges + 1) * sizeof *edge);
            esrc = malloc((n_edges + 1) * sizeof *esrc);
            stack = malloc((2 * (size_t)nr + 2) * sizeof *stack);
            if (!edge || !esrc || !stack) goto oom;
        }
    }
    eoff[nr] = n_edges;
    for (uint32_t s0 = 0; s0 < nr && !rc; s0++) {
        uint32_t sp = 0;
        if (color[s0]) continue;
        color[s0] = 1;
        stack[sp++] = s0, stack[sp++] = eoff[s0];
        while (sp && !rc) {
            uint32_t r = stack[sp - 2], e = stack[sp - 1];
            if (e == eoff[r + 1]) {
                color[r] = 2;
                sp -= 2;
                continue;
            }
            stack[sp - 1] = e + 1;
            if (color[edge[e]] == 1) {
                char rn[80], sn[80];
                rule_label(P, edge[e], sn, sizeof sn);
                rule_label(P, r, rn, sizeof rn);
                P->cur = G_NONE;
                if (!strcmp(rn, sn)) perr(P, esrc[e], "left recursion in rule '%s'", sn);
                else perr(P, esrc[e], "left recursion in rule '%s' (through '%s')", sn, rn);
                rc = -1;
            } else if (color[edge[e]] == 0) {
                color[edge[e]] = 1;
                stack[sp++] = edge[e], stack[sp++] = eoff[edge[e]];
            }
        }
    }
    free(eoff), free(edge), free(esrc), free(stack), free(color);
    return rc;
oom:
    free(eoff), free(edge), free(esrc), free(stack), free(color);
    return poom(P), -1;
}

/* The byte-class renumbering's keys: (class << 16 | value), 256 at most. */
static uint64_t renum_mix(uint32_t key) { return (key * 0x9E3779B1u) >> 23; }
static uint64_t renum_hash(const void *ctx, uint32_t id) { return renum_mix(((const uint32_t *)ctx)[id]); }
static int renum_eq(const void *ctx, uint32_t id, const void *key) {
    return ((const uint32_t *)ctx)[id] == *(const uint32_t *)key;
}

static int analyze(parser *P, grammar *g) {
    uint32_t nr = g->n_rules, ne = g->n_el;
    uint8_t *nullable = calloc(nr, 1), *productive = calloc(nr, 1);
    uint32_t *queue = malloc((nr + 1) * sizeof *queue), *refs = calloc(nr, sizeof *refs);
    g_byteset *first = calloc(nr, sizeof *first);
    int rc = -1, changed;
    g->reachable = calloc(nr, 1);
    g->caller = malloc(nr * sizeof *g->caller);
    g->rule_min = malloc(nr * sizeof *g->rule_min);
    g->exit_pos = malloc(nr * sizeof *g->exit_pos);
    g->exit_rule = malloc(nr * sizeof *g->exit_rule);
    g->follow = calloc(nr, sizeof *g->follow);
    g->suffix_min = malloc(ne * sizeof *g->suffix_min);
    g->ci_base = malloc(ne * sizeof *g->ci_base);
    if (!nullable || !productive || !queue || !refs || !first || !g->reachable || !g->caller ||
        !g->rule_min || !g->exit_pos || !g->exit_rule || !g->follow || !g->suffix_min || !g->ci_base) {
        poom(P);
        goto out;
    }
    /* nullable and productive: fixpoints over alternatives */
    do {
        changed = 0;
        for (uint32_t r = 0; r < nr; r++)
            for (uint32_t a = g->alt_off[r]; a < g->alt_off[r + 1]; a++) {
                int nul = 1, prod = 1;
                for (uint32_t p = g->alt_start[a]; !is_end(g, p); p++) {
                    if (g->kind[p] == GE_TERM) nul = 0;
                    else nul &= nullable[g->arg[p]], prod &= productive[g->arg[p]];
                }
                if (nul && !nullable[r]) nullable[r] = 1, changed = 1;
                if (prod && !productive[r]) productive[r] = 1, changed = 1;
            }
    } while (changed);
    if (check_left_recursion(P, g, nullable)) goto out;
    /* reachability from root, reference counts */
    {
        uint32_t qh = 0, qt = 0;
        g->reachable[g->root] = 1, queue[qt++] = g->root;
        while (qh < qt) {
            uint32_t r = queue[qh++];
            for (uint32_t a = g->alt_off[r]; a < g->alt_off[r + 1]; a++)
                for (uint32_t p = g->alt_start[a]; !is_end(g, p); p++)
                    if (g->kind[p] == GE_REF) {
                        uint32_t s = g->arg[p];
                        refs[s]++;
                        g->caller[s] = p;
                        if (!g->reachable[s]) g->reachable[s] = 1, queue[qt++] = s;
                    }
        }
        for (uint32_t r = 0; r < nr; r++) {
            if (r == g->root) g->caller[r] = refs[r] ? G_MULTI : G_NONE;
            else if (refs[r] != 1) g->caller[r] = refs[r] ? G_MULTI : G_NONE;
        }
    }
    {
        /* report an unproductive rule that needs itself (a cause, not a victim) */
        uint32_t bad = G_NONE;
        for (uint32_t r = 0; r < nr && bad == G_NONE; r++) {
            uint32_t qh = 0, qt = 0;
            if (!g->reachable[r] || productive[r]) continue;
            memset(refs, 0, nr * sizeof *refs); /* reused: visited marks */
            queue[qt++] = r;
            while (qh < qt && bad == G_NONE) {
                uint32_t q = queue[qh++];
                for (uint32_t a = g->alt_off[q]; a < g->alt_off[q + 1] && bad == G_NONE; a++)
                    for (uint32_t p = g->alt_start[a]; !is_end(g, p); p++)
                        if (g->kind[p] == GE_REF && !productive[g->arg[p]]) {
                            if (g->arg[p] == r) {
                                bad = r;
                                break;
                            }
                            if (!refs[g->arg[p]] && qt < nr) refs[g->arg[p]] = 1, queue[qt++] = g->arg[p];
                        }
            }
        }
        for (uint32_t r = 0; r < nr && bad == G_NONE; r++)
            if (g->reachable[r] && !productive[r]) bad = r;
        if (bad != G_NONE) {
            char rn[80];
            rule_label(P, bad, rn, sizeof rn);
            P->cur = G_NONE;
            if (P->rules[bad].generated)
                perr(P, P->rules[bad].src, "a group in rule '%s' can never finish: each of its "
                     "alternatives needs itself again", rn);
            else
                perr(P, P->rules[bad].src, "rule '%s' can never finish: each of its alternatives "
                     "needs itself again", rn);
            goto out;
        }
    }
    /* exits: follow unique callers while the caller's reference is its last element */
    for (uint32_t r = 0; r < nr; r++) {
        uint32_t q = r, hops = 0;
        g->exit_pos[r] = G_MULTI, g->exit_rule[r] = r;
        while (hops++ <= nr) {
            uint32_t c = g->caller[q];
            if (c == G_NONE || c == G_MULTI) {
                g->exit_pos[r] = c, g->exit_rule[r] = q;
                break;
            }
            if (!is_end(g, c + 1)) {
                g->exit_pos[r] = c + 1;
                break;
            }
            q = g->el_rule[c];
        }
    }
    /* FIRST then FOLLOW (bytes), fixpoints */
    do {
        changed = 0;
        for (uint32_t r = 0; r < nr; r++)
            for (uint32_t a = g->alt_off[r]; a < g->alt_off[r + 1]; a++)
                for (uint32_t p = g->alt_start[a]; !is_end(g, p); p++) {
                    if (g->kind[p] == GE_TERM) {
                        g_byteset fb = {{0}};
                        const uint16_t *row = g->dfa + (size_t)g->cls_off[g->arg[p]] * 256;
                        for (int b = 0; b < 256; b++)
                            if (row[b] != G_REJECT) bs_set(&fb, (unsigned)b);
                        changed |= bs_or(&first[r], &fb);
                        break;
                    }
                    changed |= bs_or(&first[r], &first[g->arg[p]]);
                    if (!nullable[g->arg[p]]) break;
                }
    } while (changed);
    do {
        changed = 0;
        for (uint32_t q = 0; q < nr; q++) {
            if (!g->reachable[q]) continue;
            for (uint32_t a = g->alt_off[q]; a < g->alt_off[q + 1]; a++)
                for (uint32_t p = g->alt_start[a]; !is_end(g, p); p++) {
                    uint32_t s, t;
                    if (g->kind[p] != GE_REF) continue;
                    s = g->arg[p];
                    for (t = p + 1; !is_end(g, t); t++) {
                        if (g->kind[t] == GE_TERM) {
                            g_byteset fb = {{0}};
                            const uint16_t *row = g->dfa + (size_t)g->cls_off[g->arg[t]] * 256;
                            for (int b = 0; b < 256; b++)
                                if (row[b] != G_REJECT) bs_set(&fb, (unsigned)b);
                            changed |= bs_or(&g->follow[s], &fb);
                            break;
                        }
                        changed |= bs_or(&g->follow[s], &first[g->arg[t]]);
                        if (!nullable[g->arg[t]]) break;
                    }
                    if (is_end(g, t)) changed |= bs_or(&g->follow[s], &g->follow[q]);
                }
        }
    } while (changed);
    /* fewest bytes: rules (fixpoint), then each element's suffix */
    for (uint32_t r = 0; r < nr; r++) g->rule_min[r] = G_NONE;
    do {
        changed = 0;
        for (uint32_t r = 0; r < nr; r++)
            for (uint32_t a = g->alt_off[r]; a < g->alt_off[r + 1]; a++) {
                uint64_t sum = 0;
                for (uint32_t p = g->alt_start[a]; !is_end(g, p) && sum < G_NONE; p++)
                    sum += g->kind[p] == GE_TERM ? g->dfa_min[g->cls_off[g->arg[p]]]
                                                 : g->rule_min[g->arg[p]];
                if (sum < g->rule_min[r]) g->rule_min[r] = (uint32_t)sum, changed = 1;
            }
    } while (changed);
    for (uint32_t p = ne; p-- > 0;) {
        uint64_t v;
        if (is_end(g, p)) {
            g->suffix_min[p] = 0;
            continue;
        }
        v = (uint64_t)(g->kind[p] == GE_TERM ? g->dfa_min[g->cls_off[g->arg[p]]] : g->rule_min[g->arg[p]]) +
            g->suffix_min[p + 1];
        g->suffix_min[p] = v >= G_NONE ? G_NONE - 1 : (uint32_t)v;
    }
    /* one precomputed table per (reachable terminal, DFA state) */
    g->n_ci = 0;
    for (uint32_t p = 0; p < ne; p++) {
        g->ci_base[p] = G_NONE;
        if (g->kind[p] == GE_TERM && g->reachable[g->el_rule[p]]) {
            uint32_t c = g->arg[p];
            g->ci_base[p] = g->n_ci;
            g->n_ci += g->cls_off[c + 1] - g->cls_off[c];
        }
    }
    g->start_n = g->alt_off[g->root + 1] - g->alt_off[g->root];
    /* byte classes: refine one class by every DFA row and reachable FOLLOW set,
     * (class, value) pairs renumbered through a hash cleared per row */
    {
        uint32_t cls[256], pair[256], keys[256], n_cls = 1, total = g->cls_off[g->n_cls];
        moe8_index renum;
        if (moe8_index_init(&renum, 256, renum_hash)) {
            poom(P);
            goto out;
        }
        for (int b = 0; b < 256; b++) cls[b] = 0;
        for (uint32_t row = 0; row < total + nr && n_cls < 256; row++) {
            uint32_t n_new = 0;
            if (row >= total && !g->reachable[row - total]) continue;
            moe8_index_clear(&renum);
            for (int b = 0; b < 256; b++) {
                uint32_t v = row < total ? g->dfa[(size_t)row * 256 + b]
                                         : (uint32_t)(g->follow[row - total].w[b >> 6] >> (b & 63) & 1);
                int64_t id;
                keys[n_new] = cls[b] << 16 | v;
                id = moe8_index_add(&renum, renum_mix(keys[n_new]), n_new, renum_eq, keys, &keys[n_new]);
                pair[b] = id < 0 ? n_new++ : (uint32_t)id; /* 256 keys at most: never grows */
            }
            memcpy(cls, pair, sizeof cls);
            n_cls = n_new;
        }
        moe8_index_free(&renum);
        for (int b = 0; b < 256; b++) g->byte_class[b] = (uint8_t)cls[b];
        g->n_byte_classes = n_cls;
    }
    rc = 0;
out:
    free(nullable), free(productive), free(queue), free(refs), free(first);
    return rc;
}

static void parser_free(parser *P) {
    for (uint32_t r = 0; r < P->n_rules; r++) free(P->rules[r].body.e);
    for (uint32_t c = 0; c < P->n_cls; c++) free(P->cls[c].tab), free(P->cls[c].min);
    free(P->rules);
    free(P->cls);
    moe8_index_free(&P->names);
}

void grammar_free(grammar *g) {
    g_tables *t;
    if (!g) return;
    t = g->tables;
    while (t) {
        g_tables *nx = t->next;
        for (uint32_t i = 0; i < t->n_ci; i++) {
            free(t->ci[i].acc_list), free(t->ci[i].acc_bits);
            free(t->ci[i].unc), free(t->ci[i].unc_lcp);
        }
        free(t->ci);
        free(t);
        t = nx;
    }
    pthread_mutex_destroy(&g->lock);
    free(g->kind), free(g->arg), free(g->el_rule), free(g->suffix_min), free(g->ci_base);
    free(g->alt_off), free(g->alt_start), free(g->caller), free(g->rule_min), free(g->follow);
    free(g->exit_pos), free(g->exit_rule);
    free(g->reachable), free(g->cls_off), free(g->dfa), free(g->dfa_min);
    free(g);
}

moe8_status grammar_compile(const char *text, size_t len, grammar **out, moe8_error *err) {
    parser P;
    grammar *g = NULL;
    size_t i;
    if (!out || (!text && len)) return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "grammar: no text or output");
    *out = NULL;
    if (len > GRAMMAR_MAX_TEXT)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "grammar: text of %zu bytes exceeds the limit "
                         "of %u bytes", len, GRAMMAR_MAX_TEXT);
    memset(&P, 0, sizeof P);
    P.text = text ? text : "", P.len = len, P.err = err, P.cur = G_NONE;
    for (int b = 0; b < 256; b++) P.byte_cls[b] = G_NONE;
    i = skip_space(&P, 0, 1);
    while (P.st == MOE8_OK && i < len) i = parse_rule(&P, i);
    if (P.st != MOE8_OK) goto fail;
    P.cur = G_NONE;
    if (P.n_rules == 0) {
        moe8_fail(err, MOE8_ERR_INVALID_ARG, 0, "grammar: empty grammar (no rules)");
        goto fail_set;
    }
    for (uint32_t r = 0; r < P.n_rules; r++)
        if (!P.rules[r].defined) {
            char in[80];
            rule_label(&P, P.rules[r].ref_rule, in, sizeof in);
            perr(&P, P.rules[r].ref_src, "undefined rule '%.*s' (in rule '%s')",
                 (int)(P.rules[r].name_len > 64 ? 64 : P.rules[r].name_len), P.rules[r].name, in);
            goto fail;
        }
    if (!(g = calloc(1, sizeof *g))) {
        poom(&P);
        goto fail;
    }
    pthread_mutex_init(&g->lock, NULL);
    g->root = find_rule(&P, "root", 4);
    if (g->root == G_NONE) {
        moe8_fail(err, MOE8_ERR_INVALID_ARG, 0, "grammar: no rule 'root' (the start rule)");
        goto fail_set;
    }
    /* classes into one DFA table */
    g->n_cls = P.n_cls;
    g->cls_off = malloc((P.n_cls + 1) * sizeof *g->cls_off);
    g->dfa = malloc(((size_t)P.dfa_states + 1) * 256 * sizeof *g->dfa);
    g->dfa_min = malloc(((size_t)P.dfa_states + 1) * sizeof *g->dfa_min);
    if (!g->cls_off || !g->dfa || !g->dfa_min) {
        poom(&P);
        goto fail;
    }
    {
        uint32_t s = 0;
        for (uint32_t c = 0; c < P.n_cls; c++) {
            g->cls_off[c] = s;
            memcpy(g->dfa + (size_t)s * 256, P.cls[c].tab, (size_t)P.cls[c].n_states * 256 * sizeof *g->dfa);
            memcpy(g->dfa_min + s, P.cls[c].min, P.cls[c].n_states * sizeof *g->dfa_min);
            s += P.cls[c].n_states;
        }
        g->cls_off[P.n_cls] = s;
    }
    if (flatten(&P, g)) {
        poom(&P);
        goto fail;
    }
    if (analyze(&P, g)) goto fail;
    parser_free(&P);
    *out = g;
    return MOE8_OK;
fail_set:
    P.st = MOE8_ERR_INVALID_ARG;
fail:
    parser_free(&P);
    grammar_free(g);
    return P.st != MOE8_OK ? P.st : MOE8_ERR_INVALID_ARG;
}

/* ======================================================================== */
/* The walk engine                                                           */
/* ======================================================================== */


struct gwk {
    const grammar *g;
    int ci, oom;
    /* nodes */
    uint32_t *ncode, *npar, nn, ncap;
    uint8_t *ntag;
    moe8_index nht;
    /* sets */
    uint32_t *soff, *slen, ns, scap;
    uint64_t *sumask, *salive;
    uint32_t *pool;
    size_t np, pcap;
    moe8_index sht;
    /* memo: (set, byte class) -> set */
    moe8_index mt;
    uint64_t *mkey;
    uint32_t *mval, mcap;
    /* step scratch */
    uint32_t *out, nout, outcap;
    uint32_t *work, nwork, workcap;
    uint32_t *mark, markcap, mark_epoch;
    uint32_t *buf[2];
    size_t bufcap[2];
};

uint32_t *gwk_buf(gwk *w, int which, size_t n) {
    if (n > w->bufcap[which]) {
        size_t nc = n < 256 ? 256 : n * 2;
        uint32_t *q = realloc(w->buf[which], nc * sizeof *q);
        if (!q) return NULL;
        w->buf[which] = q, w->bufcap[which] = nc;
    }
    return w->buf[which];
}

static int grow_u32(gwk *w, uint32_t **p, uint32_t *cap, uint32_t need) {
    uint32_t nc = *cap ? *cap : 64;
    uint32_t *q;
    if (need <= *cap) return 0;
    while (nc < need) nc *= 2;
    if (!(q = realloc(*p, (size_t)nc * sizeof *q))) {
        w->oom = 1;
        return -1;
    }
    *p = q, *cap = nc;
    return 0;
}

static uint32_t mix32(uint32_t a, uint32_t b) {
    uint64_t h = ((uint64_t)a << 32 | b) * 0x9E3779B97F4A7C15ULL;
    return (uint32_t)(h >> 32) ^ (uint32_t)h;
}

/* The walker's three tables (core/index.h): nodes by (code, parent), sets by
 * (sorted tops, umask), the memo by (set, byte class). */
static uint64_t node_hash(const void *ctx, uint32_t id) {
    const gwk *w = ctx;
    return mix32(w->ncode[id], w->npar[id]);
}

static int node_eq(const void *ctx, uint32_t id, const void *key) {
    const gwk *w = ctx;
    const uint32_t *k = key;
    return w->ncode[id] == k[0] && w->npar[id] == k[1];
}

typedef struct {
    const uint32_t *t;
    uint32_t n;
    uint64_t umask;
} set_key;

static uint32_t set_hash(const uint32_t *t, uint32_t n, uint64_t umask) {
    uint32_t h = mix32(0x811C9DC5u ^ (uint32_t)umask, (uint32_t)(umask >> 32));
    for (uint32_t i = 0; i < n; i++) h = mix32(h, t[i]);
    return h;
}

static uint64_t set_hash_id(const void *ctx, uint32_t id) {
    const gwk *w = ctx;
    return set_hash(w->pool + w->soff[id], w->slen[id], w->sumask[id]);
}

static int set_eq(const void *ctx, uint32_t id, const void *key) {
    const gwk *w = ctx;
    const set_key *k = key;
    return w->slen[id] == k->n && w->sumask[id] == k->umask &&
           !memcmp(w->pool + w->soff[id], k->t, k->n * sizeof *k->t);
}

static uint64_t memo_mix(uint64_t key) { return (key * 0x9E3779B97F4A7C15ULL) >> 32; }
static uint64_t memo_hash(const void *ctx, uint32_t id) { return memo_mix(((const gwk *)ctx)->mkey[id]); }
static int memo_eq(const void *ctx, uint32_t id, const void *key) {
    return ((const gwk *)ctx)->mkey[id] == *(const uint64_t *)key;
}

gwk *gwk_new(const grammar *g, int ci_mode) {
    gwk *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->g = g, w->ci = ci_mode;
    /* small at first (a clone's first accept makes one); every table grows */
    w->ncap = N_FIRST + 64, w->scap = 32, w->pcap = 128;
    w->mcap = 64;
    w->ncode = malloc(w->ncap * sizeof *w->ncode);
    w->npar = malloc(w->ncap * sizeof *w->npar);
    w->ntag = malloc(w->ncap);
    w->soff = malloc(w->scap * sizeof *w->soff);
    w->slen = malloc(w->scap * sizeof *w->slen);
    w->sumask = malloc(w->scap * sizeof *w->sumask);
    w->salive = malloc(w->scap * sizeof *w->salive);
    w->pool = malloc(w->pcap * sizeof *w->pool);
    w->mkey = malloc(w->mcap * sizeof *w->mkey);
    w->mval = malloc(w->mcap * sizeof *w->mval);
    if (!w->ncode || !w->npar || !w->ntag || !w->soff || !w->slen || !w->sumask || !w->salive ||
        !w->pool || !w->mkey || !w->mval || moe8_index_init(&w->nht, 128, node_hash) ||
        moe8_index_init(&w->sht, 32, set_hash_id) || moe8_index_init(&w->mt, 64, memo_hash)) {
        gwk_free(w);
        return NULL;
    }
    gwk_reset(w);
    return w;
}

void gwk_free(gwk *w) {
    if (!w) return;
    free(w->ncode), free(w->npar), free(w->ntag), free(w->soff), free(w->slen);
    free(w->sumask), free(w->salive), free(w->mkey), free(w->mval);
    moe8_index_free(&w->nht), moe8_index_free(&w->sht), moe8_index_free(&w->mt);
    free(w->pool), free(w->out), free(w->work), free(w->mark);
    free(w->buf[0]), free(w->buf[1]);
    free(w);
}

void gwk_reset(gwk *w) {
    moe8_index_clear(&w->nht), moe8_index_clear(&w->sht), moe8_index_clear(&w->mt);
    w->oom = 0;
    w->nn = N_FIRST;
    for (uint32_t i = 0; i < N_FIRST; i++) {
        w->ncode[i] = 0, w->npar[i] = 0;
        w->ntag[i] = (uint8_t)(i < N_MARKER0 ? 0 : (i - N_MARKER0) % G_TAGS);
    }
    w->ns = S_FIRST, w->np = 0;
    w->soff[S_EMPTY] = 0, w->slen[S_EMPTY] = 0;
    w->sumask[S_EMPTY] = 0, w->salive[S_EMPTY] = 0;
}

int gwk_oom(const gwk *w) { return w->oom; }
uint32_t gwk_node_code(const gwk *w, uint32_t id) { return w->ncode[id]; }
uint32_t gwk_node_parent(const gwk *w, uint32_t id) { return w->npar[id]; }

uint32_t gwk_node(gwk *w, uint32_t code, uint32_t parent) {
    uint32_t key[2] = {code, parent};
    int64_t id;
    if (w->oom) return N_FINAL;
    if (w->nn == w->ncap) {
        uint32_t nc = w->ncap * 2;
        uint32_t *a = realloc(w->ncode, nc * sizeof *a), *b;
        uint8_t *t;
        if (!a) return w->oom = 1, N_FINAL;
        w->ncode = a;
        if (!(b = realloc(w->npar, nc * sizeof *b))) return w->oom = 1, N_FINAL;
        w->npar = b;
        if (!(t = realloc(w->ntag, nc))) return w->oom = 1, N_FINAL;
        w->ntag = t, w->ncap = nc;
    }
    id = moe8_index_add(&w->nht, mix32(code, parent), w->nn, node_eq, w, key);
    if (id == -2) return w->oom = 1, N_FINAL;
    if (id >= 0) return (uint32_t)id;
    w->ncode[w->nn] = code, w->npar[w->nn] = parent, w->ntag[w->nn] = w->ntag[parent];
    return w->nn++;
}

static void sort_u32(uint32_t *a, uint32_t n) {
    for (uint32_t i = 1; i < n; i++) {
        uint32_t v = a[i], j = i;
        while (j > 0 && a[j - 1] > v) a[j] = a[j - 1], j--;
        a[j] = v;
    }
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

uint32_t gwk_set(gwk *w, uint32_t *t, uint32_t n, uint64_t umask) {
    uint32_t m = 0;
    uint64_t alive = 0;
    set_key key;
    int64_t id;
    if (w->oom) return S_EMPTY;
    if (n <= 24) sort_u32(t, n);
    else qsort(t, n, sizeof *t, cmp_u32);
    for (uint32_t i = 0; i < n; i++)
        if (!m || t[m - 1] != t[i]) t[m++] = t[i];
    if (m > GRAMMAR_MAX_STACKS) m = GRAMMAR_MAX_STACKS; /* conservative: fewer paths, never more */
    if (!m && !umask) return S_EMPTY;
    if (w->ns == w->scap) {
        uint32_t nc = w->scap * 2;
        uint32_t *a = realloc(w->soff, nc * sizeof *a), *b;
        uint64_t *f, *al;
        if (!a) return w->oom = 1, S_EMPTY;
        w->soff = a;
        if (!(b = realloc(w->slen, nc * sizeof *b))) return w->oom = 1, S_EMPTY;
        w->slen = b;
        if (!(f = realloc(w->sumask, nc * sizeof *f))) return w->oom = 1, S_EMPTY;
        w->sumask = f;
        if (!(al = realloc(w->salive, nc * sizeof *al))) return w->oom = 1, S_EMPTY;
        w->salive = al, w->scap = nc;
    }
    if (w->np + m > w->pcap) {
        size_t nc = w->pcap * 2;
        uint32_t *q;
        while (nc < w->np + m) nc *= 2;
        if (!(q = realloc(w->pool, nc * sizeof *q))) return w->oom = 1, S_EMPTY;
        w->pool = q, w->pcap = nc;
    }
    key.t = t, key.n = m, key.umask = umask;
    id = moe8_index_add(&w->sht, set_hash(t, m, umask), w->ns, set_eq, w, &key);
    if (id == -2) return w->oom = 1, S_EMPTY;
    if (id >= 0) return (uint32_t)id;
    memcpy(w->pool + w->np, t, m * sizeof *t);
    for (uint32_t i = 0; i < m; i++) alive |= 1ULL << w->ntag[t[i]];
    w->soff[w->ns] = (uint32_t)w->np, w->slen[w->ns] = m, w->sumask[w->ns] = umask, w->salive[w->ns] = alive;
    w->np += m;
    return w->ns++;
}

const uint32_t *gwk_set_tops(const gwk *w, uint32_t set, uint32_t *n) {
    *n = w->slen[set];
    return w->pool + w->soff[set];
}

uint64_t gwk_set_umask(const gwk *w, uint32_t set) { return w->sumask[set]; }
uint64_t gwk_set_alive(const gwk *w, uint32_t set) { return w->salive[set]; }

static int is_marker(uint32_t id) { return id >= N_MARKER0 && id < N_MTTAG0; }

static void push_out(gwk *w, uint32_t id) {
    if (w->nout == w->outcap && grow_u32(w, &w->out, &w->outcap, w->nout + 1)) return;
    w->out[w->nout++] = id;
}

static void push_work(gwk *w, uint32_t id) {
    if (w->nwork == w->workcap && grow_u32(w, &w->work, &w->workcap, w->nwork + 1)) return;
    w->work[w->nwork++] = id;
}

/* Expand node `item` (an element to process over its parent) until every
 * path is a top: terminals, N_FINAL or marker tops, appended to w->out. */
static void expand(gwk *w, uint32_t item) {
    const grammar *g = w->g;
    w->nwork = 0;
    push_work(w, item);
    while (w->nwork && !w->oom) {
        uint32_t x = w->work[--w->nwork], pos, par;
        if (x >= w->markcap) {
            uint32_t old = w->markcap;
            if (grow_u32(w, &w->mark, &w->markcap, w->nn + 1)) return;
            memset(w->mark + old, 0, (w->markcap - old) * sizeof *w->mark);
        }
        if (w->mark[x] == w->mark_epoch) continue;
        w->mark[x] = w->mark_epoch;
        pos = w->ncode[x], par = w->npar[x];
        switch (g->kind[pos]) {
        case GE_TERM:
            push_out(w, x);
            break;
        case GE_REF: {
            uint32_t r = g->arg[pos], cont = pos + 1, np;
            if (is_end(g, cont))
                np = is_marker(par) && g->el_rule[pos] != r ? gwk_node(w, cont, par) : par;
            else
                np = gwk_node(w, cont, par);
            for (uint32_t a = g->alt_off[r]; a < g->alt_off[r + 1]; a++)
                push_work(w, gwk_node(w, g->alt_start[a], np));
            break;
        }
        default: { /* the alternative is complete: its rule ends */
            uint32_t r = g->el_rule[pos];
            if (par == N_EMPTY) push_out(w, N_FINAL);
            else if (is_marker(par)) {
                uint32_t c = g->exit_pos[r], t = par - N_MARKER0;
                if (c == G_NONE) push_out(w, N_CIFINAL(t));
                else if (c == G_MULTI) push_out(w, gwk_node(w, g->exit_rule[r], N_MTTAG(t)));
                else push_work(w, gwk_node(w, c, par));
            } else {
                push_work(w, par);
            }
        }
        }
    }
}

static void next_mark_epoch(gwk *w) {
    if (++w->mark_epoch == 0) {
        if (w->mark) memset(w->mark, 0, w->markcap * sizeof *w->mark);
        w->mark_epoch = 1;
    }
}

uint32_t gwk_step(gwk *w, uint32_t set, uint8_t byte) {
    const grammar *g = w->g;
    uint64_t key = (uint64_t)set << 8 | g->byte_class[byte]; /* alike bytes step alike */
    uint32_t n, res;
    uint64_t umask;
    int64_t id;
    if (set == S_EMPTY || w->oom) return S_EMPTY;
    if ((id = moe8_index_find(&w->mt, memo_mix(key), memo_eq, w, &key)) >= 0) return w->mval[id];
    umask = w->sumask[set];
    w->nout = 0;
    next_mark_epoch(w);
    n = w->slen[set];
    for (uint32_t i = 0; i < n && !w->oom; i++) {
        uint32_t x = w->pool[w->soff[set] + i], par, code, pos, nx;
        if (x == N_FINAL || (x >= N_CIFINAL0 && x < N_FIRST)) continue; /* ended: no byte follows */
        par = w->npar[x], code = w->ncode[x];
        if (par >= N_MTTAG0 && par < N_CIFINAL0) {
            const g_byteset *f = &g->follow[code];
            if (f->w[byte >> 6] >> (byte & 63) & 1) umask |= 1ULL << (par - N_MTTAG0);
            continue;
        }
        pos = code & G_POS_MASK;
        nx = g->dfa[((size_t)g->cls_off[g->arg[pos]] + (code >> G_POS_BITS)) * 256 + byte];
        if (nx == G_REJECT) continue;
        if (nx == G_DONE) {
            expand(w, gwk_node(w, pos + 1, par));
        } else {
            push_out(w, gwk_node(w, G_CODE(pos, nx), par));
        }
    }
    res = gwk_set(w, w->out, w->nout, umask);
    if (w->oom) return S_EMPTY;
    n = (uint32_t)w->mt.n;
    if (n == w->mcap) {
        uint64_t *k = realloc(w->mkey, 2 * (size_t)n * sizeof *k);
        uint32_t *v;
        if (!k) return w->oom = 1, S_EMPTY;
        w->mkey = k;
        if (!(v = realloc(w->mval, 2 * (size_t)n * sizeof *v))) return w->oom = 1, S_EMPTY;
        w->mval = v, w->mcap = 2 * n;
    }
    w->mkey[n] = key, w->mval[n] = res;
    if (moe8_index_add(&w->mt, memo_mix(key), n, memo_eq, w, &key) == -2) return w->oom = 1, S_EMPTY;
    return res;
}

/* The initial set: root's alternatives over the empty stack. */
static uint32_t gwk_start(gwk *w) {
    const grammar *g = w->g;
    w->nout = 0;
    next_mark_epoch(w);
    for (uint32_t a = g->alt_off[g->root]; a < g->alt_off[g->root + 1]; a++) {
        /* expand() clears the work list; the marks keep shared items single */
        expand(w, gwk_node(w, g->alt_start[a], N_EMPTY));
    }
    return gwk_set(w, w->out, w->nout, 0);
}

/* ======================================================================== */
/* Grammar state                                                             */
/* ======================================================================== */

/* Nodes are numbered from N_FIRST, parents before children; tops index them
 * (or are N_FINAL). */
struct grammar_state {
    const grammar *g;
    uint32_t *code, *par, n_nodes, cap_nodes;
    uint32_t *tops, n_tops, cap_tops;
    gwk *w;             /* scratch, made on first use */
    uint32_t *imp, imp_cap; /* import: state node -> engine node */
    uint32_t *map, map_cap; /* export: engine node -> state node (zero between exports) */
    uint32_t *xcode, *xpar, *xtops, xcap_nodes, xcap_tops; /* the next stacks, swapped in */
    uint32_t *xids, xids_cap; /* export: engine ids in state order */
};

static int grow_buf(uint32_t **p, uint32_t *cap, uint32_t need, int zero) {
    uint32_t nc = *cap ? *cap : 16, *q;
    if (need <= *cap) return 0;
    while (nc < need) nc *= 2;
    if (!(q = realloc(*p, (size_t)nc * sizeof *q))) return -1;
    if (zero) memset(q + *cap, 0, (size_t)(nc - *cap) * sizeof *q);
    *p = q, *cap = nc;
    return 0;
}

static int st_reserve(grammar_state *st, uint32_t nodes, uint32_t tops) {
    if (nodes > st->cap_nodes) {
        uint32_t nc = nodes < 16 ? 16 : nodes;
        uint32_t *a = realloc(st->code, nc * sizeof *a), *b;
        if (!a) return -1;
        st->code = a;
        if (!(b = realloc(st->par, nc * sizeof *b))) return -1;
        st->par = b, st->cap_nodes = nc;
    }
    if (tops > st->cap_tops) {
        uint32_t nc = tops < 16 ? 16 : tops;
        uint32_t *a = realloc(st->tops, nc * sizeof *a);
        if (!a) return -1;
        st->tops = a, st->cap_tops = nc;
    }
    return 0;
}

uint32_t gwk_import_state(gwk *w, const grammar_state *st) {
    uint32_t *ids = st->imp; /* st->imp holds at least n_nodes + n_tops entries */
    for (uint32_t i = 0; i < st->n_nodes; i++) {
        uint32_t p = st->par[i];
        ids[i] = gwk_node(w, st->code[i], p < N_FIRST ? p : ids[p - N_FIRST]);
    }
    for (uint32_t i = 0; i < st->n_tops; i++) {
        uint32_t t = st->tops[i];
        ids[st->n_nodes + i] = t < N_FIRST ? t : ids[t - N_FIRST];
    }
    return gwk_set(w, ids + st->n_nodes, st->n_tops, 0);
}

static int st_scratch(grammar_state *st) {
    if (!st->w && !(st->w = gwk_new(st->g, 0))) return -1;
    if (grow_buf(&st->imp, &st->imp_cap, st->n_nodes + st->n_tops + 1, 0)) return -1;
    return 0;
}

/* Replace the state's stacks with set `s` of w: the nodes under its tops,
 * parents first, into the spare arrays, which are then swapped in (no
 * allocation once the buffers have grown). */
static int st_export(grammar_state *st, gwk *w, uint32_t s) {
    uint32_t n, nn = 0, cap_nodes, *t;
    const uint32_t *tops = gwk_set_tops(w, s, &n);
    int rc = 0;
    if (grow_buf(&st->map, &st->map_cap, w->nn, 1) || grow_buf(&st->xtops, &st->xcap_tops, n + 1, 0))
        return -1;
    for (uint32_t i = 0; i < n && !rc; i++) {
        uint32_t x = tops[i], first = nn;
        /* the unmapped nodes under this top, top first, then reversed */
        while (x >= N_FIRST && !st->map[x]) {
            if (nn + 1 > st->xcap_nodes) { /* xcode and xpar share a capacity */
                uint32_t c1 = st->xcap_nodes, c2 = st->xcap_nodes;
                if (grow_buf(&st->xcode, &c1, nn + 1, 0) || grow_buf(&st->xpar, &c2, c1, 0)) {
                    rc = -1;
                    break;
                }
                st->xcap_nodes = c1;
            }
            if (grow_buf(&st->xids, &st->xids_cap, nn + 1, 0)) {
                rc = -1;
                break;
            }
            st->xids[nn++] = x;
            st->map[x] = 1; /* reserved until numbered below */
            x = w->npar[x];
        }
        for (uint32_t a = first, b = nn; b > a + 1; a++, b--) { /* parents first */
            uint32_t tmp = st->xids[a];
            st->xids[a] = st->xids[b - 1], st->xids[b - 1] = tmp;
        }
        for (uint32_t k = first; k < nn; k++) {
            uint32_t y = st->xids[k], p = w->npar[y];
            st->xcode[k] = w->ncode[y];
            st->xpar[k] = p < N_FIRST ? p : st->map[p];
            st->map[y] = N_FIRST + k;
        }
        st->xtops[i] = tops[i] < N_FIRST ? tops[i] : st->map[tops[i]];
    }
    for (uint32_t k = 0; k < nn; k++) st->map[st->xids[k]] = 0;
    if (rc) return -1;
    t = st->code, st->code = st->xcode, st->xcode = t;
    t = st->par, st->par = st->xpar, st->xpar = t;
    t = st->tops, st->tops = st->xtops, st->xtops = t;
    cap_nodes = st->cap_nodes, st->cap_nodes = st->xcap_nodes, st->xcap_nodes = cap_nodes;
    cap_nodes = st->cap_tops, st->cap_tops = st->xcap_tops, st->xcap_tops = cap_nodes;
    st->n_nodes = nn, st->n_tops = n;
    return 0;
}

moe8_status grammar_state_new(const grammar *g, grammar_state **out, moe8_error *err) {
    grammar_state *st;
    uint32_t s;
    if (!g || !out) return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "grammar: no grammar or output");
    *out = NULL;
    if (!(st = calloc(1, sizeof *st))) goto oom;
    st->g = g;
    if (!(st->w = gwk_new(g, 0))) goto oom;
    s = gwk_start(st->w);
    if (gwk_oom(st->w) || st_export(st, st->w, s) || st_reserve(st, 1, 1)) goto oom;
    *out = st;
    return MOE8_OK;
oom:
    grammar_state_free(st);
    return moe8_fail(err, MOE8_ERR_NOMEM, -1, "grammar: out of memory for a state");
}

grammar_state *grammar_state_clone(const grammar_state *src) {
    grammar_state *st = calloc(1, sizeof *st);
    if (!st) return NULL;
    st->g = src->g;
    if (st_reserve(st, src->n_nodes, src->n_tops > 0 ? src->n_tops : 1)) {
        grammar_state_free(st);
        return NULL;
    }
    if (src->n_nodes) {
        memcpy(st->code, src->code, src->n_nodes * sizeof *st->code);
        memcpy(st->par, src->par, src->n_nodes * sizeof *st->par);
    }
    if (src->n_tops) memcpy(st->tops, src->tops, src->n_tops * sizeof *st->tops);
    st->n_nodes = src->n_nodes, st->n_tops = src->n_tops;
    return st;
}

void grammar_state_free(grammar_state *st) {
    if (!st) return;
    free(st->code), free(st->par), free(st->tops), free(st->map), free(st->imp);
    free(st->xcode), free(st->xpar), free(st->xtops), free(st->xids);
    gwk_free(st->w);
    free(st);
}

uint32_t grammar_state_begin(grammar_state *st, gwk **w) {
    uint32_t s;
    if (st_scratch(st)) return G_NONE;
    gwk_reset(st->w);
    s = gwk_import_state(st->w, st);
    if (gwk_oom(st->w)) return G_NONE;
    *w = st->w;
    return s;
}

static moe8_status accept_bytes(grammar_state *st, const char *b, size_t n, int32_t tok, moe8_error *err) {
    gwk *w;
    uint32_t s = grammar_state_begin(st, &w);
    size_t i;
    if (s == G_NONE) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "grammar: out of memory");
    for (i = 0; i < n && s >= S_FIRST; i++) s = gwk_step(w, s, (uint8_t)b[i]);
    if (gwk_oom(w)) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "grammar: out of memory");
    if (s < S_FIRST) {
        if (tok >= 0)
            return moe8_fail(err, MOE8_ERR_INVALID_ARG, (int64_t)(i - 1),
                             "grammar: token %d is not allowed here (its byte %zu does not continue the "
                             "grammar)", (int)tok, i - 1);
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, (int64_t)(i - 1),
                         "grammar: byte %zu (0x%02X) does not continue the grammar", i - 1,
                         (unsigned char)b[i - 1]);
    }
    if (st_export(st, w, s)) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "grammar: out of memory");
    return MOE8_OK;
}

moe8_status grammar_accept_bytes(grammar_state *st, const char *bytes, size_t n, moe8_error *err) {
    if (!st || (!bytes && n)) return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "grammar: no state or bytes");
    return accept_bytes(st, bytes, n, -1, err);
}

moe8_status grammar_accept(grammar_state *st, const grammar_vocab *v, int32_t t, moe8_error *err) {
    const char *b;
    size_t n;
    if (!st || !v) return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "grammar: no state or vocabulary");
    if (t < 0 || t >= v->n_vocab)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "grammar: token %d is outside the vocabulary "
                         "(%d ids)", (int)t, (int)v->n_vocab);
    if (v->is_eos[t]) {
        if (!grammar_can_end(st))
            return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "grammar: end of sequence (token %d) is not "
                             "allowed here: the grammar is not complete", (int)t);
        st->tops[0] = N_FINAL, st->n_tops = 1, st->n_nodes = 0;
        return MOE8_OK;
    }
    b = grammar_vocab_token(v, t, &n);
    if (!b || !n)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "grammar: token %d has no text (special or "
                         "unassigned) and is never allowed", (int)t);
    return accept_bytes(st, b, n, t, err);
}

const grammar *grammar_state_grammar(const grammar_state *st) { return st->g; }

int grammar_can_end(const grammar_state *st) {
    for (uint32_t i = 0; i < st->n_tops; i++)
        if (st->tops[i] == N_FINAL) return st->n_tops == 1 ? 2 : 1;
    return 0;
}

size_t grammar_min_remaining(const grammar_state *st) {
    const grammar *g = st->g;
    uint64_t best = UINT64_MAX;
    for (uint32_t i = 0; i < st->n_tops; i++) {
        uint32_t t = st->tops[i], code, pos;
        uint64_t v;
        if (t == N_FINAL) return 0;
        code = st->code[t - N_FIRST], pos = code & G_POS_MASK;
        v = (uint64_t)g->dfa_min[g->cls_off[g->arg[pos]] + (code >> G_POS_BITS)] + g->suffix_min[pos + 1];
        for (uint32_t p = st->par[t - N_FIRST]; p >= N_FIRST; p = st->par[p - N_FIRST])
            v += g->suffix_min[st->code[p - N_FIRST]];
        if (v < best) best = v;
    }
    return best == UINT64_MAX ? 0 : (size_t)best;
}

/* ======================================================================== */
/* The JSON object grammar                                                   */
/* ======================================================================== */

const char *grammar_json_object(void) {
    return "# any JSON object (response_format json_object); whitespace bounded as\n"
           "# llama.cpp's json-schema-to-grammar SPACE rule\n"
           "root ::= object\n"
           "value ::= object | array | string | number | (\"true\" | \"false\" | \"null\") space\n"
           "object ::= \"{\" space ( string \":\" space value ( \",\" space string \":\" space value )* )? \"}\" space\n"
           "array ::= \"[\" space ( value ( \",\" space value )* )? \"]\" space\n"
           "string ::= \"\\\"\" char* \"\\\"\" space\n"
           "char ::= [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" hex4 )\n"
           "hex4 ::= [0-9a-cA-CeEfF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2}\n"
           "number ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} ) ( \".\" [0-9]{1,16} )? ( [eE] [-+]? ( \"0\" | [1-9] [0-9]{0,15} ) )? space\n"
           "space ::= | \" \" | \"\\n\"{1,2} [ \\t]{0,20}\n";
}
