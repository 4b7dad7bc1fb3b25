/*
 * json_schema.c — JSON Schema -> GBNF, after llama.cpp's
 * json-schema-to-grammar (its primitive rules and whitespace), for
 * response_format json_schema and tool-call arguments.
 *
 * Supported: type (string, number, integer, boolean, null, object, array,
 * or a list of them); properties, required, additionalProperties; enum,
 * const; anyOf, oneOf (as anyOf: alternatives are not made exclusive, as in
 * llama.cpp); items, prefixItems, minItems, maxItems; minLength, maxLength
 * (code points); minimum, maximum, exclusiveMinimum, exclusiveMaximum with
 * type integer (compiled exactly into digit grammars); $defs / definitions
 * with local $ref ("#", "#/$defs/x", any local JSON pointer), recursion
 * included; boolean schemas (true: any value). Annotations are ignored:
 * description, title, $schema, $id, $comment, default, examples,
 * deprecated, readOnly, writeOnly. Anything else is refused with
 * MOE8_ERR_INVALID_ARG naming the keyword and the schema's JSON pointer
 * ("json_schema: 'pattern' at /properties/zip is not supported").
 *
 * Choices, each a subset of what the schema allows, so every output
 * validates:
 * - Whitespace: llama.cpp's SPACE rule after every token, `| " " | "\n"{1,2}
 *   [ \t]{0,20}`, none before the value.
 * - Objects keep the schema's property order; required properties always
 *   appear, optional ones may. additionalProperties as llama.cpp's converter:
 *   absent or false with properties present, no other keys are generated;
 *   true or a schema, further keys (none equal to a declared one) after the
 *   declared ones. An object schema with neither properties nor
 *   additionalProperties (or with additionalProperties true alone) is any
 *   object.
 * - Numbers: at most 16 integer digits and 16 decimals (llama.cpp's
 *   bounds); an unbounded side of an integer range stops at 16 digits.
 * - Strings: no lone surrogate escapes (\uD800-\uDFFF), so one `char` is one
 *   code point and lengths count exactly; no DEL, as llama.cpp.
 * - prefixItems without items: the tuple items only (as llama.cpp), more
 *   (any values) only if minItems asks for them.
 * - enum/const: the values as compact JSON text.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/core.h"
#include "io/json_util.h"
#include "grammar/grammar.h"

#define MAX_DEPTH 64
#define INT_CAP 9999999999999999LL /* 16 digits */

typedef struct {
    char *s;
    size_t n, cap;
    int oom;
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 1024;
        char *q;
        while (nc < b->n + n + 1) nc *= 2;
        if (!(q = realloc(b->s, nc))) {
            b->oom = 1;
            return;
        }
        b->s = q, b->cap = nc;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

static void sb_puts(sbuf *b, const char *s) { sb_add(b, s, strlen(s)); }

static void sb_printf(sbuf *b, const char *fmt, ...) MOE8_PRINTF(2, 3);
static void sb_printf(sbuf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    int n;
    va_start(ap, fmt);
    n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof tmp) {
        sb_add(b, tmp, (size_t)n);
        return;
    }
    {
        char *big = malloc((size_t)n + 1);
        if (!big) {
            b->oom = 1;
            return;
        }
        va_start(ap, fmt);
        vsnprintf(big, (size_t)n + 1, fmt, ap);
        va_end(ap);
        sb_add(b, big, (size_t)n);
        free(big);
    }
}

typedef struct {
    const cJSON *node;
    char *name;
    int done;
    uint64_t content; /* the content counter when it started */
} refrule;

typedef struct {
    const cJSON *root;
    moe8_error *err;
    moe8_status st;
    sbuf out;       /* rules */
    sbuf path;      /* JSON pointer of the schema being visited */
    char **names;   /* taken rule names */
    size_t n_names, cap_names;
    refrule *refs;
    size_t n_refs, cap_refs;
    unsigned prims; /* primitive rules emitted (bits) */
    uint64_t content;
    int depth;
} conv;

static moe8_status cfail(conv *c, const char *fmt, ...) MOE8_PRINTF(2, 3);
static moe8_status cfail(conv *c, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    if (c->st != MOE8_OK) return c->st;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    c->st = moe8_fail(c->err, MOE8_ERR_INVALID_ARG, -1, "json_schema: %s", msg);
    return c->st;
}

static moe8_status coom(conv *c) {
    if (c->st == MOE8_OK) c->st = moe8_fail(c->err, MOE8_ERR_NOMEM, -1, "json_schema: out of memory");
    return c->st;
}

static const char *where(conv *c) { return c->path.n ? c->path.s : "the root"; }

static size_t path_push(conv *c, const char *seg) {
    size_t old = c->path.n;
    sb_add(&c->path, "/", 1);
    for (const char *p = seg; *p; p++) {
        if (*p == '~') sb_add(&c->path, "~0", 2);
        else if (*p == '/') sb_add(&c->path, "~1", 2);
        else sb_add(&c->path, p, 1);
    }
    return old;
}

static size_t path_push_idx(conv *c, const char *seg, int i) {
    char num[32];
    size_t old = path_push(c, seg);
    snprintf(num, sizeof num, "%d", i);
    path_push(c, num);
    return old;
}

static void path_pop(conv *c, size_t old) {
    c->path.n = old;
    if (c->path.s) c->path.s[old] = 0;
}

/* ---- rule names and text -------------------------------------------------------- */

static int name_taken(const conv *c, const char *n) {
    for (size_t i = 0; i < c->n_names; i++)
        if (!strcmp(c->names[i], n)) return 1;
    return 0;
}

/* A fresh rule name from hint (characters outside [A-Za-z0-9-] become '-'). */
static char *new_name(conv *c, const char *hint) {
    char base[72], cand[96];
    size_t k = 0;
    for (const char *p = hint && *hint ? hint : "r"; *p && k < 48; p++) {
        char ch = *p;
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-';
        base[k++] = ok ? ch : '-';
    }
    base[k] = 0;
    snprintf(cand, sizeof cand, "%s", base);
    for (int i = 2; name_taken(c, cand); i++) snprintf(cand, sizeof cand, "%s-%d", base, i);
    if (c->n_names == c->cap_names) {
        size_t nc = c->cap_names ? c->cap_names * 2 : 64;
        char **q = realloc(c->names, nc * sizeof *q);
        if (!q) return coom(c), NULL;
        c->names = q, c->cap_names = nc;
    }
    if (!(c->names[c->n_names] = strdup(cand))) return coom(c), NULL;
    return c->names[c->n_names++];
}

/* Emit `name ::= body` under a fresh name from hint; the name (NULL on error). */
static const char *add_rule(conv *c, const char *hint, const char *body) {
    char *n = new_name(c, hint);
    if (!n) return NULL;
    sb_printf(&c->out, "%s ::= %s\n", n, body);
    if (c->out.oom) return coom(c), NULL;
    return n;
}

enum {
    P_SPACE = 1, P_CHAR = 2, P_STRING = 4, P_NUMBER = 8, P_INTEGER = 16, P_BOOLEAN = 32,
    P_NULL = 64, P_VALUE = 128, P_OBJECT = 256, P_ARRAY = 512
};

static const char *prim(conv *c, unsigned which) {
    static const struct { unsigned bit, deps; const char *name, *def; } tab[] = {
        {P_SPACE, 0, "space", "space ::= | \" \" | \"\\n\"{1,2} [ \\t]{0,20}\n"},
        {P_CHAR, 0, "char", "char ::= [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" hex4 )\n"
                            "hex4 ::= [0-9a-cA-CeEfF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2}\n"},
        {P_STRING, P_CHAR | P_SPACE, "string", "string ::= \"\\\"\" char* \"\\\"\" space\n"},
        {P_NUMBER, P_SPACE, "number", "number ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} ) ( \".\" [0-9]{1,16} )? "
                                      "( [eE] [-+]? ( \"0\" | [1-9] [0-9]{0,15} ) )? space\n"},
        {P_INTEGER, P_SPACE, "integer", "integer ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} ) space\n"},
        {P_BOOLEAN, P_SPACE, "boolean", "boolean ::= ( \"true\" | \"false\" ) space\n"},
        {P_NULL, P_SPACE, "null", "null ::= \"null\" space\n"},
        {P_VALUE, P_OBJECT | P_ARRAY | P_STRING | P_NUMBER | P_BOOLEAN | P_NULL, "value",
         "value ::= object | array | string | number | boolean | null\n"},
        {P_OBJECT, P_VALUE | P_STRING | P_SPACE, "object",
         "object ::= \"{\" space ( string \":\" space value ( \",\" space string \":\" space value )* )? \"}\" space\n"},
        {P_ARRAY, P_VALUE | P_SPACE, "array", "array ::= \"[\" space ( value ( \",\" space value )* )? \"]\" space\n"},
    };
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++) {
        if (tab[i].bit != which) continue;
        if (!(c->prims & which)) {
            c->prims |= which;
            sb_puts(&c->out, tab[i].def);
            for (unsigned d = 1; d <= P_ARRAY; d <<= 1)
                if (tab[i].deps & d) prim(c, d);
        }
        return tab[i].name;
    }
    return NULL;
}

/* Reserve the primitive names so generated rules never take them. */
static int reserve_prims(conv *c) {
    static const char *n[] = {"root", "space", "char", "hex4", "string", "number", "integer",
                              "boolean", "null", "value", "object", "array"};
    for (size_t i = 0; i < sizeof n / sizeof n[0]; i++)
        if (!new_name(c, n[i])) return -1;
    return 0;
}

/* text[0..n) as a GBNF string literal. */
static void gbnf_literal(sbuf *b, const char *text, size_t n) {
    sb_add(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)text[i];
        if (ch == '"' || ch == '\\') {
            char e[2] = {'\\', (char)ch};
            sb_add(b, e, 2);
        } else if (ch < 0x20 || ch == 0x7F) {
            sb_printf(b, "\\x%02X", ch);
        } else {
            sb_add(b, (const char *)&ch, 1);
        }
    }
    sb_add(b, "\"", 1);
}

/* s as a JSON string (what the grammar's key literals spell). */
static void json_quote(sbuf *b, const char *s) {
    sb_add(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': sb_add(b, "\\\"", 2); break;
        case '\\': sb_add(b, "\\\\", 2); break;
        case '\n': sb_add(b, "\\n", 2); break;
        case '\r': sb_add(b, "\\r", 2); break;
        case '\t': sb_add(b, "\\t", 2); break;
        case '\b': sb_add(b, "\\b", 2); break;
        case '\f': sb_add(b, "\\f", 2); break;
        default:
            if (*p < 0x20 || *p == 0x7F) sb_printf(b, "\\u%04x", *p);
            else sb_add(b, (const char *)p, 1);
        }
    }
    sb_add(b, "\"", 1);
}

/* ---- keywords --------------------------------------------------------------------- */

static int is_annotation(const char *k) {
    static const char *a[] = {"description", "title", "$schema", "$id", "$comment", "default",
                              "examples", "deprecated", "readOnly", "writeOnly", "$defs",
                              "definitions"};
    for (size_t i = 0; i < sizeof a / sizeof a[0]; i++)
        if (!strcmp(k, a[i])) return 1;
    return 0;
}

static int is_known(const char *k) {
    static const char *a[] = {"type", "properties", "required", "additionalProperties", "enum",
                              "const", "anyOf", "oneOf", "items", "prefixItems", "minItems",
                              "maxItems", "minLength", "maxLength", "minimum", "maximum",
                              "exclusiveMinimum", "exclusiveMaximum", "$ref"};
    for (size_t i = 0; i < sizeof a / sizeof a[0]; i++)
        if (!strcmp(k, a[i])) return 1;
    return is_annotation(k);
}

/* A non-negative integer keyword: 0 and *out (default `def` when absent), -1 on error. */
static int get_count(conv *c, const cJSON *s, const char *key, int64_t def, int64_t *out) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(s, key);
    int64_t v;
    *out = def;
    if (!it) return 0;
    if (moe8_json_exact_int(it, &v) || v < 0) {
        cfail(c, "'%s' at %s must be a non-negative integer", key, where(c));
        return -1;
    }
    if (v > GRAMMAR_MAX_REPEAT) {
        cfail(c, "'%s' %lld at %s is above the limit of %d", key, (long long)v, where(c), GRAMMAR_MAX_REPEAT);
        return -1;
    }
    *out = v;
    return 0;
}

static const char *visit(conv *c, const cJSON *s, const char *hint);

/* ---- integers in a range ------------------------------------------------------------ */

/* Alternatives for the L-digit numbers in [x, y] (decimal strings of equal length). */
static void digits_range(sbuf *b, const char *x, const char *y, size_t n, int *first) {
    size_t p = 0;
    if (n == 0) return;
    while (p < n && x[p] == y[p]) p++;
    if (p == n) {
        if (!*first) sb_puts(b, " | ");
        *first = 0;
        sb_add(b, "\"", 1), sb_add(b, x, n), sb_add(b, "\"", 1);
        return;
    }
    {
        size_t rest = n - p - 1;
        int lo_zero = 1, hi_nine = 1;
        char d0 = x[p], d1 = y[p];
        for (size_t i = p + 1; i < n; i++) lo_zero &= x[i] == '0', hi_nine &= y[i] == '9';
#define PREFIX() do { if (!*first) sb_puts(b, " | "); *first = 0; \
        if (p) sb_add(b, "\"", 1), sb_add(b, x, p), sb_add(b, "\" ", 2); } while (0)
        if (!lo_zero) { /* d0 followed by [x[p+1..], 99..9] */
            char nines[24];
            int f2 = 1;
            sbuf sub = {0};
            memset(nines, '9', rest);
            digits_range(&sub, x + p + 1, nines, rest, &f2);
            PREFIX();
            sb_printf(b, "\"%c\" ( %s )", d0, sub.s ? sub.s : "");
            free(sub.s);
            d0++;
        }
        if (!hi_nine) d1--;
        if (d0 <= d1) {
            PREFIX();
            if (d0 == d1) sb_printf(b, "\"%c\"", d0);
            else sb_printf(b, "[%c-%c]", d0, d1);
            if (rest == 1) sb_puts(b, " [0-9]");
            else if (rest > 1) sb_printf(b, " [0-9]{%zu}", rest);
        }
        if (!hi_nine) { /* y[p] followed by [00..0, y[p+1..]] */
            char zeros[24];
            int f2 = 1;
            sbuf sub = {0};
            memset(zeros, '0', rest);
            digits_range(&sub, zeros, y + p + 1, rest, &f2);
            PREFIX();
            sb_printf(b, "\"%c\" ( %s )", y[p], sub.s ? sub.s : "");
            free(sub.s);
        }
#undef PREFIX
    }
}

/* Alternatives for the non-negative integers in [a, b], without leading zeros. */
static void nonneg_range(sbuf *b, long long a, long long hi, int *first) {
    char x[24], y[24];
    long long p10 = 1; /* 10^(len-1) */
    for (int len = 1; len <= 16; len++, p10 *= 10) {
        long long lo_l = len == 1 ? 0 : p10, hi_l = p10 * 10 - 1;
        if (lo_l < a) lo_l = a;
        if (hi_l > hi) hi_l = hi;
        if (lo_l > hi_l) continue;
        snprintf(x, sizeof x, "%lld", lo_l);
        snprintf(y, sizeof y, "%lld", hi_l);
        digits_range(b, x, y, strlen(x), first);
    }
}

static const char *int_range_rule(conv *c, long long lo, long long hi, const char *hint) {
    sbuf b = {0};
    const char *name;
    int first = 1;
    sb_puts(&b, "( ");
    if (lo < 0) {
        int f2 = 1;
        sbuf neg = {0};
        nonneg_range(&neg, hi < 0 ? -hi : 1, -lo, &f2);
        sb_printf(&b, "\"-\" ( %s )", neg.s ? neg.s : "");
        free(neg.s);
        first = 0;
    }
    if (hi >= 0) nonneg_range(&b, lo > 0 ? lo : 0, hi, &first);
    sb_puts(&b, " ) ");
    sb_puts(&b, prim(c, P_SPACE));
    if (b.oom) {
        free(b.s);
        return coom(c), NULL;
    }
    name = add_rule(c, hint, b.s);
    free(b.s);
    return name;
}

/* A bound keyword of an integer schema as an inclusive integer. */
static int int_bound(conv *c, const cJSON *s, const char *key, int is_min, int exclusive, long long *out) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(s, key);
    double v, r;
    if (!it) return 0;
    if (!cJSON_IsNumber(it)) {
        if (cJSON_IsBool(it))
            cfail(c, "'%s' at %s is a boolean (draft 4 style), which is not supported: give the bound "
                  "as a number", key, where(c));
        else cfail(c, "'%s' at %s must be a number", key, where(c));
        return -1;
    }
    v = it->valuedouble;
    if (is_min) r = exclusive ? floor(v) + 1 : ceil(v);
    else r = exclusive ? ceil(v) - 1 : floor(v);
    if (is_min) {
        if (r > (double)*out) *out = r >= (double)INT_CAP ? INT_CAP + 1 : (long long)r;
    } else {
        if (r < (double)*out) *out = r <= -(double)INT_CAP ? -INT_CAP - 1 : (long long)r;
    }
    return 0;
}

/* ---- strings, objects, arrays --------------------------------------------------------- */

static const char *string_rule(conv *c, const cJSON *s, const char *hint) {
    int64_t lo, hi;
    char body[320];
    if (get_count(c, s, "minLength", 0, &lo) || get_count(c, s, "maxLength", -1, &hi)) return NULL;
    if (!cJSON_GetObjectItemCaseSensitive(s, "minLength") && !cJSON_GetObjectItemCaseSensitive(s, "maxLength"))
        return prim(c, P_STRING);
    if (hi >= 0 && hi < lo)
        return cfail(c, "maxLength %lld < minLength %lld at %s: no string fits", (long long)hi,
                     (long long)lo, where(c)), NULL;
    prim(c, P_CHAR), prim(c, P_SPACE);
    /* the group is cloned per copy by the compiler: each copy keeps one caller */
    if (hi < 0)
        snprintf(body, sizeof body, "\"\\\"\" ( [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" hex4 ) ){%lld,} \"\\\"\" space",
                 (long long)lo);
    else
        snprintf(body, sizeof body, "\"\\\"\" ( [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" hex4 ) ){%lld,%lld} \"\\\"\" space",
                 (long long)lo, (long long)hi);
    return add_rule(c, hint, body);
}

/* Key trie for "a string that is none of these keys". */
typedef struct ktrie {
    uint32_t cp;
    int end;
    struct ktrie *kids, *next;
} ktrie;

static void ktrie_free(ktrie *t) {
    while (t) {
        ktrie *n = t->next;
        ktrie_free(t->kids);
        free(t);
        t = n;
    }
}

static int utf8_next(const unsigned char **p, uint32_t *cp) {
    const unsigned char *s = *p;
    int n = s[0] < 0x80 ? 0 : s[0] < 0xE0 ? 1 : s[0] < 0xF0 ? 2 : 3;
    uint32_t v = n == 0 ? s[0] : n == 1 ? s[0] & 0x1Fu : n == 2 ? s[0] & 0x0Fu : s[0] & 0x07u;
    for (int k = 1; k <= n; k++) {
        if ((s[k] & 0xC0) != 0x80) return -1;
        v = v << 6 | (s[k] & 0x3Fu);
    }
    *cp = v, *p = s + n + 1;
    return 0;
}

/* Rule for the content after the opening quote at trie node t. */
static const char *notkey_rule(conv *c, const ktrie *t, const char *hint) {
    sbuf b = {0}, cls = {0};
    const char *name;
    int first = 1;
    if (!t->end) sb_puts(&b, "\"\\\"\" space"), first = 0;
    sb_puts(&cls, "[^\"\\\\\\x7F\\x00-\\x1F");
    for (const ktrie *k = t->kids; k; k = k->next) {
        int raw = k->cp >= 0x20 && k->cp != '"' && k->cp != '\\' && k->cp != 0x7F;
        if (raw) {
            const char *sub = notkey_rule(c, k, hint);
            if (!sub) goto fail;
            sb_printf(&cls, "\\U%08X", k->cp);
            if (!first) sb_puts(&b, " | ");
            first = 0;
            sb_printf(&b, "[\\U%08X] %s", k->cp, sub);
        }
    }
    sb_puts(&cls, "]");
    if (!first) sb_puts(&b, " | ");
    sb_printf(&b, "%s char* \"\\\"\" space", cls.s);
    if (b.oom || cls.oom) {
        coom(c);
        goto fail;
    }
    name = add_rule(c, hint, b.s);
    free(b.s), free(cls.s);
    return name;
fail:
    free(b.s), free(cls.s);
    return NULL;
}

static const char *other_key_rule(conv *c, const cJSON *props, const char *hint) {
    ktrie root = {0};
    const cJSON *p;
    const char *content;
    char body[160];
    for (p = props ? props->child : NULL; p; p = p->next) {
        const unsigned char *s = (const unsigned char *)p->string;
        ktrie *t = &root;
        while (*s) {
            uint32_t cp;
            ktrie *k;
            if (utf8_next(&s, &cp)) {
                ktrie_free(root.kids);
                return cfail(c, "a property name at %s is not valid UTF-8", where(c)), NULL;
            }
            for (k = t->kids; k && k->cp != cp; k = k->next)
                ;
            if (!k) {
                if (!(k = calloc(1, sizeof *k))) {
                    ktrie_free(root.kids);
                    return coom(c), NULL;
                }
                k->cp = cp, k->next = t->kids, t->kids = k;
            }
            t = k;
        }
        t->end = 1;
    }
    prim(c, P_CHAR), prim(c, P_SPACE);
    content = notkey_rule(c, &root, hint);
    ktrie_free(root.kids);
    if (!content) return NULL;
    snprintf(body, sizeof body, "\"\\\"\" %s", content);
    return add_rule(c, hint, body);
}

static const char *object_rule(conv *c, const cJSON *s, const char *hint) {
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
    const cJSON *add = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
    const char **kv = NULL, *xkv = NULL, *name = NULL;
    int *is_req = NULL, n = 0, i;
    sbuf b = {0}, tail = {0};
    char hbuf[160];
    size_t old;
    if (props && !cJSON_IsObject(props)) return cfail(c, "'properties' at %s must be an object", where(c)), NULL;
    if (req && !cJSON_IsArray(req)) return cfail(c, "'required' at %s must be an array of strings", where(c)), NULL;
    if (add && !cJSON_IsBool(add) && !cJSON_IsObject(add))
        return cfail(c, "'additionalProperties' at %s must be a boolean or a schema", where(c)), NULL;
    if (!props && (!add || cJSON_IsTrue(add))) { /* any object, as llama.cpp */
        if (req && cJSON_GetArraySize(req) > 0)
            return cfail(c, "'required' at %s without 'properties' is not supported", where(c)), NULL;
        return prim(c, P_OBJECT);
    }
    n = cJSON_GetArraySize(props);
    kv = calloc((size_t)n + 1, sizeof *kv);
    is_req = calloc((size_t)n + 1, sizeof *is_req);
    if (!kv || !is_req) {
        coom(c);
        goto out;
    }
    for (const cJSON *r = req ? req->child : NULL; r; r = r->next) {
        int found = 0;
        if (!cJSON_IsString(r)) {
            cfail(c, "'required' at %s must be an array of strings", where(c));
            goto out;
        }
        i = 0;
        for (const cJSON *p = props ? props->child : NULL; p; p = p->next, i++)
            if (!strcmp(p->string, r->valuestring)) is_req[i] = 1, found = 1;
        if (!found) {
            cfail(c, "required property '%s' at %s is not in 'properties'", r->valuestring, where(c));
            goto out;
        }
    }
    prim(c, P_SPACE);
    c->content++;
    i = 0;
    for (const cJSON *p = props ? props->child : NULL; p; p = p->next, i++) {
        const char *val;
        sbuf kb = {0};
        old = path_push(c, "properties");
        path_push(c, p->string);
        snprintf(hbuf, sizeof hbuf, "%s%s%s", hint, *hint ? "-" : "", p->string);
        val = visit(c, p, hbuf);
        path_pop(c, old);
        if (!val) goto out;
        {
            sbuf key = {0};
            json_quote(&key, p->string);
            gbnf_literal(&kb, key.s ? key.s : "", key.n);
            free(key.s);
        }
        sb_printf(&kb, " space \":\" space %s", val);
        snprintf(hbuf, sizeof hbuf, "%s%s%s-kv", hint, *hint ? "-" : "", p->string);
        if (kb.oom) {
            free(kb.s);
            coom(c);
            goto out;
        }
        kv[i] = add_rule(c, hbuf, kb.s);
        free(kb.s);
        if (!kv[i]) goto out;
    }
    if (add && !cJSON_IsFalse(add)) {
        const char *key, *val;
        sbuf xb = {0};
        snprintf(hbuf, sizeof hbuf, "%s%sadditional-key", hint, *hint ? "-" : "");
        key = n ? other_key_rule(c, props, hbuf) : prim(c, P_STRING);
        if (!key) goto out;
        old = path_push(c, "additionalProperties");
        snprintf(hbuf, sizeof hbuf, "%s%sadditional", hint, *hint ? "-" : "");
        val = cJSON_IsTrue(add) ? prim(c, P_VALUE) : visit(c, add, hbuf);
        path_pop(c, old);
        if (!val) goto out;
        sb_printf(&xb, "%s \":\" space %s", key, val);
        snprintf(hbuf, sizeof hbuf, "%s%sadditional-kv", hint, *hint ? "-" : "");
        xkv = xb.oom ? NULL : add_rule(c, hbuf, xb.s);
        free(xb.s);
        if (!xkv) goto out;
    }
    /* "{" F(0) "}": F(i) = kv_i A(i+1) when required, ( kv_i A(i+1) | F(i+1) ) when
     * optional; A(i) the rest after something was written (commas first) */
    {
        int open = 0;
        sb_puts(&b, "\"{\" space ");
        for (i = 0; i <= n; i++) {
            /* A(i+1) into tail */
            tail.n = 0;
            if (tail.s) tail.s[0] = 0;
            for (int j = i + 1; j < n; j++) {
                if (is_req[j]) sb_printf(&tail, " \",\" space %s", kv[j]);
                else sb_printf(&tail, " ( \",\" space %s )?", kv[j]);
            }
            if (xkv) sb_printf(&tail, " ( \",\" space %s )*", xkv);
            if (i == n) {
                if (xkv) sb_printf(&b, "( %s ( \",\" space %s )* )?", xkv, xkv);
                break;
            }
            if (is_req[i]) {
                sb_printf(&b, "%s%s", kv[i], tail.s ? tail.s : "");
                break;
            }
            sb_printf(&b, "( %s%s | ", kv[i], tail.s ? tail.s : "");
            open++;
        }
        if (i == n && !xkv && open) sb_puts(&b, "\"\""); /* the empty alternative: no property */
        for (; open > 0; open--) sb_puts(&b, " )");
        sb_puts(&b, " \"}\" space");
    }
    if (b.oom || tail.oom) {
        coom(c);
        goto out;
    }
    name = add_rule(c, *hint ? hint : "obj", b.s);
out:
    free(b.s), free(tail.s), free(kv), free(is_req);
    return name;
}

static const char *array_rule(conv *c, const cJSON *s, const char *hint) {
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
    const cJSON *prefix = cJSON_GetObjectItemCaseSensitive(s, "prefixItems");
    const char **pre = NULL, *rest = NULL, *name = NULL;
    int64_t lo, hi;
    int k = 0, n_explicit;
    sbuf b = {0};
    char hbuf[160];
    if (get_count(c, s, "minItems", 0, &lo) || get_count(c, s, "maxItems", -1, &hi)) return NULL;
    if (hi >= 0 && hi < lo)
        return cfail(c, "maxItems %lld < minItems %lld at %s: no array fits", (long long)hi, (long long)lo,
                     where(c)), NULL;
    if (prefix && !cJSON_IsArray(prefix)) return cfail(c, "'prefixItems' at %s must be an array of schemas", where(c)), NULL;
    if (items && !cJSON_IsObject(items) && !cJSON_IsBool(items))
        return cfail(c, "'items' at %s must be a schema (an array of schemas is 'prefixItems')", where(c)), NULL;
    prim(c, P_SPACE);
    c->content++;
    k = prefix ? cJSON_GetArraySize(prefix) : 0;
    if (!(pre = calloc((size_t)k + 1, sizeof *pre))) return coom(c), NULL;
    for (int i = 0; i < k; i++) {
        size_t old = path_push_idx(c, "prefixItems", i);
        snprintf(hbuf, sizeof hbuf, "%s%s%d", hint, *hint ? "-" : "", i);
        pre[i] = visit(c, cJSON_GetArrayItem(prefix, i), hbuf);
        path_pop(c, old);
        if (!pre[i]) goto out;
    }
    if (items && cJSON_IsObject(items)) {
        size_t old = path_push(c, "items");
        snprintf(hbuf, sizeof hbuf, "%s%sitem", hint, *hint ? "-" : "");
        rest = visit(c, items, hbuf);
        path_pop(c, old);
        if (!rest) goto out;
    } else if (cJSON_IsTrue(items) || (!items && !prefix) || (!items && lo > k)) {
        rest = prim(c, P_VALUE);
    } else if (lo > k) {
        cfail(c, "minItems %lld at %s needs more items than 'prefixItems' allows", (long long)lo, where(c));
        goto out;
    }
    /* explicit items 0..n_explicit-1 (the tuple, then up to minItems), then a repetition */
    n_explicit = k > lo ? k : (int)lo;
    if (hi >= 0 && n_explicit > hi) n_explicit = (int)hi;
    sb_puts(&b, "\"[\" space ");
    {
        int opened = 0;
        for (int i = 0; i < n_explicit; i++) {
            const char *it = i < k ? pre[i] : rest;
            if (i >= lo) sb_puts(&b, "( "), opened++;
            if (i > 0) sb_puts(&b, "\",\" space ");
            sb_printf(&b, "%s ", it);
        }
        if (rest && (hi < 0 || n_explicit < hi)) {
            long long more = hi < 0 ? -1 : hi - n_explicit;
            if (n_explicit == 0) {
                if (more == 1) sb_printf(&b, "%s? ", rest);
                else if (more < 0) sb_printf(&b, "( %s ( \",\" space %s )* )? ", rest, rest);
                else sb_printf(&b, "( %s ( \",\" space %s ){0,%lld} )? ", rest, rest, more - 1);
            } else if (more < 0) {
                sb_printf(&b, "( \",\" space %s )* ", rest);
            } else {
                sb_printf(&b, "( \",\" space %s ){0,%lld} ", rest, more);
            }
        }
        for (; opened > 0; opened--) sb_puts(&b, ")? ");
    }
    sb_puts(&b, "\"]\" space");
    if (b.oom) {
        coom(c);
        goto out;
    }
    name = add_rule(c, *hint ? hint : "arr", b.s);
out:
    free(b.s), free(pre);
    return name;
}

/* ---- a schema ---------------------------------------------------------------------------- */

static const cJSON *resolve_ref(conv *c, const char *ref) {
    const cJSON *n = c->root;
    const char *p;
    if (ref[0] != '#') return NULL;
    p = ref + 1;
    while (*p) {
        char seg[256];
        size_t k = 0;
        if (*p != '/') return NULL;
        p++;
        while (*p && *p != '/' && k < sizeof seg - 1) {
            if (p[0] == '~' && p[1] == '0') seg[k++] = '~', p += 2;
            else if (p[0] == '~' && p[1] == '1') seg[k++] = '/', p += 2;
            else seg[k++] = *p++;
        }
        seg[k] = 0;
        if (cJSON_IsObject(n)) n = cJSON_GetObjectItemCaseSensitive(n, seg);
        else if (cJSON_IsArray(n)) {
            char *end;
            long i = strtol(seg, &end, 10);
            if (!*seg || *end || i < 0) return NULL;
            n = cJSON_GetArrayItem(n, (int)i);
        } else return NULL;
        if (!n) return NULL;
    }
    return n;
}

static const char *ref_rule(conv *c, const cJSON *s, const char *ref) {
    const cJSON *target;
    const char *last, *val;
    refrule *r;
    size_t idx;
    char *saved;
    sbuf b = {0};
    for (const cJSON *k = s->child; k; k = k->next)
        if (strcmp(k->string, "$ref") && !is_annotation(k->string))
            return cfail(c, "'%s' beside '$ref' at %s is not supported", k->string, where(c)), NULL;
    if (ref[0] != '#')
        return cfail(c, "$ref '%s' at %s is not supported (only local references '#/...')", ref, where(c)), NULL;
    if (!(target = resolve_ref(c, ref)))
        return cfail(c, "$ref '%s' at %s does not resolve in this schema", ref, where(c)), NULL;
    for (size_t i = 0; i < c->n_refs; i++)
        if (c->refs[i].node == target) {
            if (!c->refs[i].done && c->refs[i].content == c->content)
                return cfail(c, "$ref '%s' at %s refers back to itself with nothing in between "
                             "(left recursion)", ref, where(c)), NULL;
            return c->refs[i].name;
        }
    if (c->n_refs == c->cap_refs) {
        size_t nc = c->cap_refs ? c->cap_refs * 2 : 16;
        refrule *q = realloc(c->refs, nc * sizeof *q);
        if (!q) return coom(c), NULL;
        c->refs = q, c->cap_refs = nc;
    }
    last = strrchr(ref, '/');
    idx = c->n_refs++;
    r = &c->refs[idx];
    r->node = target, r->done = 0, r->content = c->content;
    if (!(r->name = new_name(c, last && last[1] ? last + 1 : "ref"))) return NULL;
    if (!(saved = strdup(c->path.s ? c->path.s : ""))) return coom(c), NULL;
    path_pop(c, 0);
    sb_puts(&c->path, ref + 1); /* errors inside name the target's pointer */
    val = visit(c, target, c->refs[idx].name);
    path_pop(c, 0);
    sb_puts(&c->path, saved);
    free(saved);
    if (!val) return NULL;
    sb_printf(&b, "%s ::= %s\n", c->refs[idx].name, val);
    sb_add(&c->out, b.s ? b.s : "", b.n);
    free(b.s);
    c->refs[idx].done = 1;
    return c->refs[idx].name;
}

static const char *literal_rule(conv *c, const cJSON *vals, int n_vals, const char *hint) {
    sbuf b = {0};
    const char *name;
    sb_puts(&b, "( ");
    for (int i = 0; i < n_vals; i++) {
        const cJSON *v = cJSON_GetArrayItem(vals, i);
        char *text = cJSON_PrintUnformatted(v);
        if (!text) {
            free(b.s);
            return coom(c), NULL;
        }
        if (i) sb_puts(&b, " | ");
        gbnf_literal(&b, text, strlen(text));
        free(text);
    }
    sb_printf(&b, " ) %s", prim(c, P_SPACE));
    if (b.oom) {
        free(b.s);
        return coom(c), NULL;
    }
    name = add_rule(c, hint, b.s);
    free(b.s);
    return name;
}

/* Type bits. */
enum { T_STRING = 1, T_NUMBER = 2, T_INTEGER = 4, T_BOOLEAN = 8, T_NULL = 16, T_OBJECT = 32, T_ARRAY = 64 };

static int type_bit(const char *t) {
    static const char *n[] = {"string", "number", "integer", "boolean", "null", "object", "array"};
    for (int i = 0; i < 7; i++)
        if (!strcmp(t, n[i])) return 1 << i;
    return 0;
}

static int json_type_ok(const cJSON *v, unsigned types) {
    if (cJSON_IsString(v)) return types & T_STRING;
    if (cJSON_IsNumber(v)) {
        int64_t i;
        return (types & T_NUMBER) || ((types & T_INTEGER) && moe8_json_exact_int(v, &i) == 0);
    }
    if (cJSON_IsBool(v)) return types & T_BOOLEAN;
    if (cJSON_IsNull(v)) return types & T_NULL;
    if (cJSON_IsObject(v)) return types & T_OBJECT;
    return types & T_ARRAY;
}

static const char *typed_rule(conv *c, const cJSON *s, unsigned types, const char *hint) {
    const char *alts[7];
    int n = 0;
    if (types & (T_NUMBER | T_INTEGER)) {
        static const char *bk[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
        int bounded = 0;
        for (int i = 0; i < 4; i++)
            if (cJSON_GetObjectItemCaseSensitive(s, bk[i])) {
                if (types & T_NUMBER)
                    return cfail(c, "'%s' at %s is only supported with \"type\": \"integer\"", bk[i], where(c)), NULL;
                bounded = 1;
            }
        if (types & T_NUMBER) alts[n++] = prim(c, P_NUMBER);
        else if (!bounded) alts[n++] = prim(c, P_INTEGER);
        else {
            long long lo = -INT_CAP, hi = INT_CAP;
            if (int_bound(c, s, "minimum", 1, 0, &lo) || int_bound(c, s, "exclusiveMinimum", 1, 1, &lo) ||
                int_bound(c, s, "maximum", 0, 0, &hi) || int_bound(c, s, "exclusiveMaximum", 0, 1, &hi))
                return NULL;
            if (lo > hi)
                return cfail(c, "the integer bounds at %s leave no value (%s%lld to %s%lld)", where(c),
                             lo > INT_CAP ? "above " : "", lo > INT_CAP ? INT_CAP : lo,
                             hi < -INT_CAP ? "below " : "", hi < -INT_CAP ? -INT_CAP : hi), NULL;
            if (!(alts[n++] = int_range_rule(c, lo, hi, hint))) return NULL;
        }
    }
    if (types & T_STRING && !(alts[n++] = string_rule(c, s, hint))) return NULL;
    if (types & T_BOOLEAN) alts[n++] = prim(c, P_BOOLEAN);
    if (types & T_NULL) alts[n++] = prim(c, P_NULL);
    if (types & T_OBJECT && !(alts[n++] = object_rule(c, s, hint))) return NULL;
    if (types & T_ARRAY && !(alts[n++] = array_rule(c, s, hint))) return NULL;
    if (n == 1) return alts[0];
    {
        sbuf b = {0};
        const char *name;
        for (int i = 0; i < n; i++) sb_printf(&b, "%s%s", i ? " | " : "", alts[i]);
        if (b.oom) {
            free(b.s);
            return coom(c), NULL;
        }
        name = add_rule(c, hint, b.s);
        free(b.s);
        return name;
    }
}

static const char *visit(conv *c, const cJSON *s, const char *hint) {
    const cJSON *k, *t;
    unsigned types = 0;
    const char *res = NULL;
    if (c->st != MOE8_OK) return NULL;
    if (cJSON_IsTrue(s)) return prim(c, P_VALUE);
    if (cJSON_IsFalse(s)) return cfail(c, "the schema at %s is false: no value is allowed", where(c)), NULL;
    if (!cJSON_IsObject(s)) return cfail(c, "the schema at %s must be an object or a boolean", where(c)), NULL;
    if (c->depth >= MAX_DEPTH) return cfail(c, "schemas nest deeper than %d at %s", MAX_DEPTH, where(c)), NULL;
    for (k = s->child; k; k = k->next)
        if (!is_known(k->string)) return cfail(c, "'%s' at %s is not supported", k->string, where(c)), NULL;
    c->depth++;
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "$ref"))) {
        if (!cJSON_IsString(k)) cfail(c, "'$ref' at %s must be a string", where(c));
        else res = ref_rule(c, s, k->valuestring);
        goto out;
    }
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "anyOf")) || (k = cJSON_GetObjectItemCaseSensitive(s, "oneOf"))) {
        const char *kw = k->string;
        sbuf b = {0};
        int n;
        for (const cJSON *o = s->child; o; o = o->next)
            if (strcmp(o->string, kw) && !is_annotation(o->string)) {
                cfail(c, "'%s' beside '%s' at %s is not supported", o->string, kw, where(c));
                goto out;
            }
        if (!cJSON_IsArray(k) || (n = cJSON_GetArraySize(k)) == 0) {
            cfail(c, "'%s' at %s must be a non-empty array of schemas", kw, where(c));
            goto out;
        }
        for (int i = 0; i < n; i++) {
            char hb[160];
            size_t old = path_push_idx(c, kw, i);
            const char *alt;
            snprintf(hb, sizeof hb, "%s%s%d", hint, *hint ? "-" : "", i);
            alt = visit(c, cJSON_GetArrayItem(k, i), hb);
            path_pop(c, old);
            if (!alt) {
                free(b.s);
                goto out;
            }
            sb_printf(&b, "%s%s", i ? " | " : "", alt);
        }
        res = b.oom ? (coom(c), NULL) : add_rule(c, hint, b.s);
        free(b.s);
        goto out;
    }
    if ((t = cJSON_GetObjectItemCaseSensitive(s, "type"))) {
        if (cJSON_IsString(t)) {
            if (!(types = (unsigned)type_bit(t->valuestring))) {
                cfail(c, "type '%s' at %s is not supported", t->valuestring, where(c));
                goto out;
            }
        } else if (cJSON_IsArray(t) && cJSON_GetArraySize(t) > 0) {
            for (const cJSON *e = t->child; e; e = e->next) {
                int bit = cJSON_IsString(e) ? type_bit(e->valuestring) : 0;
                if (!bit) {
                    cfail(c, "'type' at %s holds %s, not a JSON Schema type", where(c),
                          cJSON_IsString(e) ? e->valuestring : "a non-string");
                    goto out;
                }
                types |= (unsigned)bit;
            }
        } else {
            cfail(c, "'type' at %s must be a type name or a non-empty array of them", where(c));
            goto out;
        }
    }
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "enum")) || (k = cJSON_GetObjectItemCaseSensitive(s, "const"))) {
        int is_enum = !strcmp(k->string, "enum"), n = 0;
        cJSON *vals;
        for (const cJSON *o = s->child; o; o = o->next)
            if (strcmp(o->string, k->string) && strcmp(o->string, "type") && !is_annotation(o->string)) {
                cfail(c, "'%s' beside '%s' at %s is not supported", o->string, k->string, where(c));
                goto out;
            }
        if (is_enum && (!cJSON_IsArray(k) || cJSON_GetArraySize(k) == 0)) {
            cfail(c, "'enum' at %s must be a non-empty array", where(c));
            goto out;
        }
        if (!(vals = cJSON_CreateArray())) {
            coom(c);
            goto out;
        }
        for (const cJSON *v = is_enum ? k->child : k; v; v = is_enum ? v->next : NULL)
            if (!types || json_type_ok(v, types)) {
                cJSON *d = cJSON_Duplicate(v, 1);
                if (!d) break;
                cJSON_AddItemToArray(vals, d), n++;
            }
        if (n == 0) cfail(c, "no value of '%s' at %s has the schema's type", k->string, where(c));
        else res = literal_rule(c, vals, n, hint);
        cJSON_Delete(vals);
        goto out;
    }
    if (!types) { /* infer from the keywords, as llama.cpp */
        static const struct { const char *kw; unsigned t; } infer[] = {
            {"properties", T_OBJECT}, {"additionalProperties", T_OBJECT}, {"required", T_OBJECT},
            {"items", T_ARRAY}, {"prefixItems", T_ARRAY}, {"minItems", T_ARRAY}, {"maxItems", T_ARRAY},
            {"minLength", T_STRING}, {"maxLength", T_STRING}};
        for (size_t i = 0; i < sizeof infer / sizeof infer[0]; i++)
            if (cJSON_GetObjectItemCaseSensitive(s, infer[i].kw)) types |= infer[i].t;
        for (const char *const *b = (const char *const[]){"minimum", "maximum", "exclusiveMinimum",
                                                          "exclusiveMaximum", NULL}; *b; b++)
            if (cJSON_GetObjectItemCaseSensitive(s, *b)) {
                cfail(c, "'%s' at %s needs \"type\": \"integer\"", *b, where(c));
                goto out;
            }
        if (!types) {
            res = prim(c, P_VALUE);
            goto out;
        }
    }
    res = typed_rule(c, s, types, hint);
out:
    c->depth--;
    return c->st == MOE8_OK ? res : NULL;
}

moe8_status grammar_from_json_schema(const char *schema_json, size_t len, char **out, moe8_error *err) {
    conv c;
    cJSON *root = NULL;
    moe8_status st;
    const char *top;
    if (!out || (!schema_json && len))
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "json_schema: no schema or output");
    *out = NULL;
    /* cJSON keeps a string's bytes as they are: a schema that is not UTF-8
     * would put them into the grammar's literals, which the compiler refuses */
    const size_t bad = schema_json ? moe8_utf8_valid(schema_json, len) : (size_t)-1;
    if (bad != (size_t)-1)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, (int64_t)bad,
                         "json_schema: not valid UTF-8 at byte %zu", bad);
    if ((st = moe8_json_parse(schema_json ? schema_json : "", len, "json_schema", &root, err)) != MOE8_OK) {
        if (st != MOE8_ERR_FORMAT) return st;
        if (err) err->code = MOE8_ERR_INVALID_ARG; /* the caller's argument, not a file */
        return MOE8_ERR_INVALID_ARG;
    }
    memset(&c, 0, sizeof c);
    c.root = root, c.err = err;
    if (reserve_prims(&c) == 0) {
        top = visit(&c, root, "");
        if (top && c.st == MOE8_OK) {
            sbuf final = {0};
            sb_printf(&final, "root ::= %s\n", top);
            sb_add(&final, c.out.s ? c.out.s : "", c.out.n);
            if (final.oom) coom(&c), free(final.s);
            else *out = final.s;
        }
    }
    st = c.st;
    if (st == MOE8_OK && !*out) st = coom(&c);
    for (size_t i = 0; i < c.n_names; i++) free(c.names[i]);
    free(c.names), free(c.refs), free(c.out.s), free(c.path.s);
    cJSON_Delete(root);
    return st;
}
