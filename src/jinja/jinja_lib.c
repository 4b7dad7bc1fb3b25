/*
 * jinja_lib.c — the interpreter's values as Python sees them: the arena
 * they live in, UTF-8 code point helpers, list/dict building, truthiness,
 * ==, <, str(), repr(), json.dumps (for tojson) and the cJSON -> value
 * conversion of the caller's variables. Methods are in jinja_methods.c,
 * filters and tests in jinja_filters.c.
 *
 * Python's text forms are matched exactly for what templates print: floats
 * as repr (shortest round trip, '1e+16', '1.0'), True/False/None, lists and
 * dicts as repr with Python's quote choice and escapes, json.dumps' default
 * separators (", " and ": ") and escapes. Not matched: a character's
 * printability in repr follows utf8proc's Unicode tables, not Python's.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "jinja/jinja_impl.h"

/* ---- arena ------------------------------------------------------------------ */

void *moe8_ja_alloc(jarena *a, size_t n) {
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

void moe8_ja_free(jarena *a) {
    for (ja_chunk *c = a->head, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    a->head = NULL;
    a->total = 0;
}

/* ---- UTF-8 --------------------------------------------------------------------- */

size_t moe8_ju_len(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xc0) != 0x80;
    return k;
}

int moe8_ju_isspace(uint32_t cp) {
    if (cp <= 0x20) return cp == ' ' || (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x1f);
    return cp == 0x85 || cp == 0xa0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) ||
           cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

/* ---- lists and dicts ----------------------------------------------------------- */

jlist *moe8_jl_new(jctx *c, const jnode *n, size_t cap) {
    jlist *l = moe8_jx_alloc(c, n, sizeof *l);
    if (!l) return NULL;
    l->n = 0;
    l->cap = cap;
    l->v = NULL;
    if (cap && !(l->v = moe8_jx_alloc(c, n, cap * sizeof *l->v))) return NULL;
    return l;
}

int moe8_jl_push(jctx *c, const jnode *n, jlist *l, jv v) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 4;
        jv *nv = moe8_jx_alloc(c, n, cap * sizeof *nv);
        if (!nv) return -1;
        if (l->n) memcpy(nv, l->v, l->n * sizeof *nv);
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = v;
    return 0;
}

jdict *moe8_jd_new(jctx *c, const jnode *n, size_t cap) {
    jdict *d = moe8_jx_alloc(c, n, sizeof *d);
    if (!d) return NULL;
    memset(d, 0, sizeof *d);
    if (cap && (!(d->k = moe8_jx_alloc(c, n, cap * sizeof *d->k)) || !(d->v = moe8_jx_alloc(c, n, cap * sizeof *d->v))))
        return NULL;
    d->cap = cap;
    return d;
}

const jv *moe8_jd_get(jctx *c, const jdict *d, const jv *k) {
    if (k->t == JV_STR) return moe8_jd_get_str(c, d, k->u.s, k->n);
    for (size_t i = d->n; i-- > 0;)
        if (moe8_jv_equal(c, &d->k[i], k)) return &d->v[i];
    return NULL;
}

const jv *moe8_jd_get_str(jctx *c, const jdict *d, const char *s, size_t n) {
    jx_spend(c, d->n / 8 + 1);
    for (size_t i = d->n; i-- > 0;)
        if (d->k[i].t == JV_STR && d->k[i].n == n && !memcmp(d->k[i].u.s, s, n)) return &d->v[i];
    return NULL;
}

int moe8_jd_set(jctx *c, const jnode *n, jdict *d, jv k, jv v) {
    const jv *have = moe8_jd_get(c, d, &k);
    if (have) {
        d->v[have - d->v] = v;
        return 0;
    }
    return moe8_jd_push(c, n, d, k, v);
}

int moe8_jd_push(jctx *c, const jnode *n, jdict *d, jv k, jv v) {
    if (d->n == d->cap) {
        size_t cap = d->cap ? 2 * d->cap : 4;
        jv *nk = moe8_jx_alloc(c, n, cap * sizeof *nk), *nv = nk ? moe8_jx_alloc(c, n, cap * sizeof *nv) : NULL;
        if (!nv) return -1;
        if (d->n) {
            memcpy(nk, d->k, d->n * sizeof *nk);
            memcpy(nv, d->v, d->n * sizeof *nv);
        }
        d->k = nk;
        d->v = nv;
        d->cap = cap;
    }
    d->k[d->n] = k;
    d->v[d->n++] = v;
    return 0;
}

/* ---- truth, equality, order ---------------------------------------------------- */

const char *moe8_jv_type_name(const jv *v) {
    switch (v->t) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST: return v->flag ? "tuple" : "list";
    case JV_DICT: return "dict";
    case JV_NS: return "Namespace";
    case JV_LOOP: return "LoopContext";
    case JV_FUNC: return "function";
    case JV_MACRO: return "Macro";
    case JV_METHOD: return "builtin_function_or_method";
    }
    return "object";
}

int moe8_jv_truthy(const jv *v) {
    switch (v->t) {
    case JV_UNDEF: case JV_NONE: return 0;
    case JV_BOOL: return v->u.b;
    case JV_INT: return v->u.i != 0;
    case JV_FLOAT: return v->u.f != 0;
    case JV_STR: return v->n != 0;
    case JV_LIST: return v->u.l->n != 0;
    case JV_DICT: return v->u.d->n != 0;
    default: return 1;
    }
}

int moe8_jv_hashable(const jv *v) {
    if (v->t == JV_DICT || v->t == JV_NS || (v->t == JV_LIST && !v->flag)) return 0;
    if (v->t == JV_LIST)
        for (size_t i = 0; i < v->u.l->n; i++)
            if (!moe8_jv_hashable(&v->u.l->v[i])) return 0;
    return 1;
}

static int is_num(const jv *v) { return v->t == JV_INT || v->t == JV_BOOL || v->t == JV_FLOAT; }
static int64_t as_int(const jv *v) { return v->t == JV_BOOL ? v->u.b : v->u.i; }

/* Python compares an int and a float exactly. -1, 0, 1; 2 when unordered (NaN). */
static int num_cmp(const jv *a, const jv *b) {
    if (a->t != JV_FLOAT && b->t != JV_FLOAT) {
        int64_t x = as_int(a), y = as_int(b);
        return x < y ? -1 : x > y;
    }
    if (a->t == JV_FLOAT && b->t == JV_FLOAT) {
        double x = a->u.f, y = b->u.f;
        return x < y ? -1 : x > y ? 1 : x == y ? 0 : 2;
    }
    int flip = a->t == JV_FLOAT;
    double f = flip ? a->u.f : b->u.f;
    int64_t i = flip ? as_int(b) : as_int(a);
    int r;
    if (isnan(f)) return 2;
    if (f >= 9223372036854775808.0) r = -1;
    else if (f < -9223372036854775808.0) r = 1;
    else {
        double t = trunc(f);
        int64_t ti = (int64_t)t;
        r = i < ti ? -1 : i > ti ? 1 : (f > t ? -1 : f < t ? 1 : 0);
    }
    return flip ? -r : r;
}

int moe8_jv_equal(jctx *c, const jv *a, const jv *b) {
    if (is_num(a) && is_num(b)) return num_cmp(a, b) == 0;
    if (jx_spend(c, 1)) return 0;
    if (a->t != b->t) return 0;
    switch (a->t) {
    case JV_UNDEF: case JV_NONE: return 1;
    case JV_STR: return a->n == b->n && !memcmp(a->u.s, b->u.s, a->n);
    case JV_LIST:
        if (a->flag != b->flag || a->u.l->n != b->u.l->n) return 0;
        for (size_t i = 0; i < a->u.l->n; i++)
            if (!moe8_jv_equal(c, &a->u.l->v[i], &b->u.l->v[i])) return 0;
        return 1;
    case JV_DICT:
        if (a->u.d->n != b->u.d->n) return 0;
        for (size_t i = 0; i < a->u.d->n; i++) {
            const jv *o = moe8_jd_get(c, b->u.d, &a->u.d->k[i]);
            if (!o || !moe8_jv_equal(c, &a->u.d->v[i], o)) return 0;
        }
        return 1;
    case JV_NS: return a->u.d == b->u.d;
    case JV_LOOP: return a->u.loop == b->u.loop;
    case JV_FUNC: return a->u.fn == b->u.fn;
    case JV_MACRO: return a->u.macro == b->u.macro;
    case JV_METHOD: return a->u.method == b->u.method;
    default: return 0;
    }
}

int moe8_jv_less(jctx *c, const jnode *n, const jv *a, const jv *b, int *lt) {
    if (is_num(a) && is_num(b)) {
        *lt = num_cmp(a, b) == -1;
        return 0;
    }
    if (a->t == JV_STR && b->t == JV_STR) {
        size_t m = a->n < b->n ? a->n : b->n;
        int r = memcmp(a->u.s, b->u.s, m);
        *lt = r < 0 || (r == 0 && a->n < b->n);
        return 0;
    }
    if (a->t == JV_LIST && b->t == JV_LIST && a->flag == b->flag) {
        const jlist *x = a->u.l, *y = b->u.l;
        for (size_t i = 0; i < x->n && i < y->n; i++) {
            if (moe8_jv_equal(c, &x->v[i], &y->v[i])) continue;
            return moe8_jv_less(c, n, &x->v[i], &y->v[i], lt);
        }
        *lt = x->n < y->n;
        return 0;
    }
    if (a->t == JV_UNDEF) return moe8_jx_undefined(c, n, a);
    if (b->t == JV_UNDEF) return moe8_jx_undefined(c, n, b);
    return moe8_jx_fail(c, n, "'<' not supported between instances of '%s' and '%s'", moe8_jv_type_name(a),
                   moe8_jv_type_name(b));
}

/* ---- str() and repr() ----------------------------------------------------------- */

/* Python's repr(float): the shortest digits that round-trip, fixed notation
 * for exponents in [-4, 16), else d.ddde+XX. */
static int py_float(char *buf, size_t cap, double x) {
    char tmp[40], digits[24];
    int nd = 0, exp, neg, p;
    if (isnan(x)) return snprintf(buf, cap, "nan");
    if (isinf(x)) return snprintf(buf, cap, x < 0 ? "-inf" : "inf");
    for (p = 1; p <= 17; p++) {
        snprintf(tmp, sizeof tmp, "%.*e", p - 1, x);
        if (strtod(tmp, NULL) == x) break;
    }
    neg = tmp[0] == '-';
    for (const char *s = tmp + neg; *s && *s != 'e'; s++)
        if (*s != '.') digits[nd++] = *s;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = '\0';
    exp = atoi(strchr(tmp, 'e') + 1);
    size_t o = 0;
    if (neg) buf[o++] = '-';
    if (exp >= -4 && exp < 16) {
        if (exp >= 0) {
            for (int i = 0; i <= exp; i++) buf[o++] = i < nd ? digits[i] : '0';
            buf[o++] = '.';
            if (nd > exp + 1) for (int i = exp + 1; i < nd; i++) buf[o++] = digits[i];
            else buf[o++] = '0';
        } else {
            buf[o++] = '0';
            buf[o++] = '.';
            for (int i = 0; i < -exp - 1; i++) buf[o++] = '0';
            for (int i = 0; i < nd; i++) buf[o++] = digits[i];
        }
        buf[o] = '\0';
        return (int)o;
    }
    buf[o++] = digits[0];
    if (nd > 1) {
        buf[o++] = '.';
        for (int i = 1; i < nd; i++) buf[o++] = digits[i];
    }
    return (int)o + snprintf(buf + o, cap - o, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
}

static int add_s(jctx *c, const jnode *n, moe8_buf *b, const char *s) { return moe8_jbuf_add(c, n, b, s, strlen(s)); }

/* Python's str.isprintable for one character (repr escapes the others). */
static int printable(uint32_t cp) {
    if (cp == ' ') return 1;
    if (cp < 0x7f) return cp > 0x20;
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO: case UTF8PROC_CATEGORY_CN: case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP: case UTF8PROC_CATEGORY_ZS:
        return 0;
    default:
        return 1;
    }
}

static int repr_str(jctx *c, const jnode *n, moe8_buf *b, const char *s, size_t len) {
    char q = '\'';
    if (memchr(s, '\'', len) && !memchr(s, '"', len)) q = '"';
    if (moe8_jbuf_add(c, n, b, &q, 1)) return -1;
    for (size_t i = 0; i < len;) {
        size_t start = i;
        uint32_t cp = ju_next(s, len, &i);
        char e[16];
        int k = 0;
        if (cp == (uint32_t)q || cp == '\\') k = snprintf(e, sizeof e, "\\%c", (char)cp);
        else if (cp == '\t') k = snprintf(e, sizeof e, "\\t");
        else if (cp == '\n') k = snprintf(e, sizeof e, "\\n");
        else if (cp == '\r') k = snprintf(e, sizeof e, "\\r");
        else if (!printable(cp))
            k = snprintf(e, sizeof e, cp <= 0xff ? "\\x%02x" : cp <= 0xffff ? "\\u%04x" : "\\U%08x",
                         (unsigned)cp);
        if (k ? moe8_jbuf_add(c, n, b, e, (size_t)k) : moe8_jbuf_add(c, n, b, s + start, i - start)) return -1;
    }
    return moe8_jbuf_add(c, n, b, &q, 1);
}

static int repr_depth(jctx *c, const jnode *n, int depth) {
    if (depth > 100) return moe8_jx_fail(c, n, "a value nests more than 100 deep (or contains itself)");
    return 0;
}

static int repr_to(jctx *c, const jnode *n, moe8_buf *b, const jv *v, int depth);

static int str_to(jctx *c, const jnode *n, moe8_buf *b, const jv *v, int depth) {
    char num[48];
    switch (v->t) {
    case JV_UNDEF: return 0;
    case JV_NONE: return add_s(c, n, b, "None");
    case JV_BOOL: return add_s(c, n, b, v->u.b ? "True" : "False");
    case JV_INT: snprintf(num, sizeof num, "%lld", (long long)v->u.i); return add_s(c, n, b, num);
    case JV_FLOAT: py_float(num, sizeof num, v->u.f); return add_s(c, n, b, num);
    case JV_STR: return moe8_jbuf_add(c, n, b, v->u.s, v->n);
    default: return repr_to(c, n, b, v, depth);
    }
}

static int repr_to(jctx *c, const jnode *n, moe8_buf *b, const jv *v, int depth) {
    char tmp[96];
    if (repr_depth(c, n, depth)) return -1;
    switch (v->t) {
    case JV_UNDEF: return add_s(c, n, b, "Undefined");
    case JV_STR: return repr_str(c, n, b, v->u.s, v->n);
    case JV_LIST: {
        const jlist *l = v->u.l;
        if (add_s(c, n, b, v->flag ? "(" : "[")) return -1;
        for (size_t i = 0; i < l->n; i++)
            if ((i && add_s(c, n, b, ", ")) || repr_to(c, n, b, &l->v[i], depth + 1)) return -1;
        return add_s(c, n, b, !v->flag ? "]" : l->n == 1 ? ",)" : ")");
    }
    case JV_DICT: case JV_NS: {
        const jdict *d = v->u.d;
        if (v->t == JV_NS && add_s(c, n, b, "<Namespace ")) return -1;
        if (add_s(c, n, b, "{")) return -1;
        for (size_t i = 0; i < d->n; i++)
            if ((i && add_s(c, n, b, ", ")) || repr_to(c, n, b, &d->k[i], depth + 1) ||
                add_s(c, n, b, ": ") || repr_to(c, n, b, &d->v[i], depth + 1))
                return -1;
        return add_s(c, n, b, v->t == JV_NS ? "}>" : "}");
    }
    case JV_LOOP:
        snprintf(tmp, sizeof tmp, "<LoopContext %zu/%zu>", v->u.loop->i + 1, v->u.loop->items->n);
        return add_s(c, n, b, tmp);
    case JV_FUNC: return add_s(c, n, b, "<function>");
    case JV_MACRO: {
        const jv *name = &v->u.macro->def->lit;
        snprintf(tmp, sizeof tmp, "<Macro '%.*s'>", (int)(name->n > 60 ? 60 : name->n), name->u.s);
        return add_s(c, n, b, tmp);
    }
    case JV_METHOD: {
        const jmethod *m = v->u.method;
        snprintf(tmp, sizeof tmp, "<built-in method %.*s of %s object>", (int)(m->len > 40 ? 40 : m->len),
                 m->name, moe8_jv_type_name(&m->self));
        return add_s(c, n, b, tmp);
    }
    default: return str_to(c, n, b, v, depth);
    }
}

int moe8_jv_str_to(jctx *c, const jnode *n, moe8_buf *b, const jv *v) { return str_to(c, n, b, v, 0); }
int moe8_jv_repr_to(jctx *c, const jnode *n, moe8_buf *b, const jv *v) { return repr_to(c, n, b, v, 0); }

int moe8_jv_to_str(jctx *c, const jnode *n, const jv *v, jv *out) {
    moe8_buf b = {0};
    if (v->t == JV_STR) {
        *out = *v;
        return 0;
    }
    if (moe8_jv_str_to(c, n, &b, v)) {
        moe8_jx_buf_free(c, &b);
        return -1;
    }
    return moe8_jx_buf_value(c, n, &b, out);
}

/* ---- json.dumps ----------------------------------------------------------------- */

/* A string as json.dumps writes it (ensure_ascii: everything from U+007F up
 * as \uXXXX), under moe8_jbuf_add's output and memory limits; it costs no steps
 * (escaping is linear, and written a character at a time it always cost
 * none). A string that cannot fit is refused before it is written. */
static int json_str(jctx *c, const jnode *n, moe8_buf *b, const char *s, size_t len, int ascii) {
    size_t cap = b->cap;
    if (len + 2 > c->lim.max_output - b->n) return moe8_jx_over_output(c, n);
    return moe8_jx_buf_wrote(c, n, b, cap, moe8_buf_json_str(b, s, len, ascii ? MOE8_JSON_ASCII : 0));
}

static int json_newline(jctx *c, const jnode *n, moe8_buf *b, const jjson_opts *o, int level) {
    if (moe8_jbuf_add(c, n, b, "\n", 1)) return -1;
    for (int i = 0; i < level; i++)
        if (moe8_jbuf_add(c, n, b, o->indent, o->indent_n)) return -1;
    return 0;
}

/* A dict key as json.dumps writes it: strings as they are; numbers, bools and
 * None in their JSON spelling, quoted. */
static int json_key(jctx *c, const jnode *n, moe8_buf *b, const jv *k, const jjson_opts *o) {
    char num[48];
    switch (k->t) {
    case JV_STR: return json_str(c, n, b, k->u.s, k->n, o->ensure_ascii);
    case JV_NONE: return add_s(c, n, b, "\"null\"");
    case JV_BOOL: return add_s(c, n, b, k->u.b ? "\"true\"" : "\"false\"");
    case JV_INT: snprintf(num, sizeof num, "\"%lld\"", (long long)k->u.i); return add_s(c, n, b, num);
    case JV_FLOAT:
        num[0] = '"';
        py_float(num + 1, sizeof num - 2, k->u.f);
        strcat(num, "\"");
        return add_s(c, n, b, num);
    default:
        return moe8_jx_fail(c, n, "keys must be str, int, float, bool or None, not %s", moe8_jv_type_name(k));
    }
}

static int key_less(jctx *c, const jnode *n, const jv *a, const jv *b, int *lt) {
    return moe8_jv_less(c, n, a, b, lt);
}

int moe8_jv_json_to(jctx *c, const jnode *n, moe8_buf *b, const jv *v, const jjson_opts *o, int level) {
    char num[48];
    if (repr_depth(c, n, level)) return -1;
    switch (v->t) {
    case JV_NONE: return add_s(c, n, b, "null");
    case JV_BOOL: return add_s(c, n, b, v->u.b ? "true" : "false");
    case JV_INT: snprintf(num, sizeof num, "%lld", (long long)v->u.i); return add_s(c, n, b, num);
    case JV_FLOAT:
        if (isnan(v->u.f)) return add_s(c, n, b, "NaN");
        if (isinf(v->u.f)) return add_s(c, n, b, v->u.f < 0 ? "-Infinity" : "Infinity");
        py_float(num, sizeof num, v->u.f);
        return add_s(c, n, b, num);
    case JV_STR: return json_str(c, n, b, v->u.s, v->n, o->ensure_ascii);
    case JV_LIST: {
        const jlist *l = v->u.l;
        if (!l->n) return add_s(c, n, b, "[]");
        if (add_s(c, n, b, "[")) return -1;
        for (size_t i = 0; i < l->n; i++) {
            if (i && moe8_jbuf_add(c, n, b, o->item_sep, o->item_sep_n)) return -1;
            if (o->indent && json_newline(c, n, b, o, level + 1)) return -1;
            if (moe8_jv_json_to(c, n, b, &l->v[i], o, level + 1)) return -1;
        }
        if (o->indent && json_newline(c, n, b, o, level)) return -1;
        return add_s(c, n, b, "]");
    }
    case JV_DICT: {
        const jdict *d = v->u.d;
        size_t *order;
        if (!d->n) return add_s(c, n, b, "{}");
        if (!(order = moe8_jx_alloc(c, n, d->n * sizeof *order))) return -1;
        for (size_t i = 0; i < d->n; i++) order[i] = i;
        if (o->sort_keys) /* insertion sort: stable, and dicts in templates are small */
            for (size_t i = 1; i < d->n; i++)
                for (size_t j = i; j > 0; j--) {
                    int lt;
                    if (key_less(c, n, &d->k[order[j]], &d->k[order[j - 1]], &lt)) return -1;
                    if (!lt) break;
                    size_t t = order[j];
                    order[j] = order[j - 1];
                    order[j - 1] = t;
                }
        if (add_s(c, n, b, "{")) return -1;
        for (size_t i = 0; i < d->n; i++) {
            if (i && moe8_jbuf_add(c, n, b, o->item_sep, o->item_sep_n)) return -1;
            if (o->indent && json_newline(c, n, b, o, level + 1)) return -1;
            if (json_key(c, n, b, &d->k[order[i]], o) ||
                moe8_jbuf_add(c, n, b, o->key_sep, o->key_sep_n) ||
                moe8_jv_json_to(c, n, b, &d->v[order[i]], o, level + 1))
                return -1;
        }
        if (o->indent && json_newline(c, n, b, o, level)) return -1;
        return add_s(c, n, b, "}");
    }
    case JV_UNDEF:
        return moe8_jx_undefined(c, n, v);
    default:
        return moe8_jx_fail(c, n, "Object of type %s is not JSON serializable", moe8_jv_type_name(v));
    }
}

/* ---- cJSON -> value ------------------------------------------------------------- */

int moe8_jv_from_cjson(jctx *c, const cJSON *j, jv *out, int depth) {
    if (depth > 200) return moe8_jx_fail(c, NULL, "the variables nest more than 200 deep");
    if (cJSON_IsNull(j) || !j) *out = jv_none();
    else if (cJSON_IsTrue(j)) *out = jv_bool(1);
    else if (cJSON_IsFalse(j)) *out = jv_bool(0);
    else if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        *out = d == floor(d) && fabs(d) <= 9007199254740992.0 ? jv_int((int64_t)d) : jv_float(d);
    } else if (cJSON_IsString(j)) {
        size_t n = strlen(j->valuestring), bad;
        if ((bad = moe8_utf8_valid(j->valuestring, n)) != (size_t)-1)
            return moe8_jx_fail(c, NULL, "a string variable is not valid UTF-8 (byte %zu)", bad);
        *out = jv_str(j->valuestring, n);
    } else if (cJSON_IsArray(j)) {
        jlist *l = moe8_jl_new(c, NULL, (size_t)cJSON_GetArraySize(j));
        const cJSON *e;
        if (!l) return -1;
        cJSON_ArrayForEach(e, j) {
            jv v;
            if (moe8_jv_from_cjson(c, e, &v, depth + 1) || moe8_jl_push(c, NULL, l, v)) return -1;
        }
        out->t = JV_LIST, out->flag = 0, out->u.l = l;
    } else if (cJSON_IsObject(j)) {
        jdict *d = moe8_jd_new(c, NULL, (size_t)cJSON_GetArraySize(j));
        const cJSON *e;
        if (!d) return -1;
        cJSON_ArrayForEach(e, j) {
            jv v;
            size_t n = strlen(e->string);
            if (moe8_utf8_valid(e->string, n) != (size_t)-1)
                return moe8_jx_fail(c, NULL, "a key of the variables is not valid UTF-8");
            if (moe8_jv_from_cjson(c, e, &v, depth + 1) || moe8_jd_push(c, NULL, d, jv_str(e->string, n), v))
                return -1;
        }
        out->t = JV_DICT, out->flag = 0, out->u.d = d;
    } else {
        return moe8_jx_fail(c, NULL, "unexpected JSON value in the variables");
    }
    return 0;
}
