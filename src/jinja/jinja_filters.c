/*
 * jinja_filters.c — jinja2's filters and tests as chat templates use them
 * (the string operations they share with the str methods are in
 * jinja_methods.c), and the stable sort behind sort, dictsort, unique, min
 * and max.
 *
 * Each follows jinja2 3.1 semantics, strings by code point:
 *   filters       abs attr capitalize count d default dictsort first float
 *                 indent int items join last length list lower map max min
 *                 reject rejectattr replace reverse round safe select
 *                 selectattr sort string sum title tojson trim unique upper
 *                 wordcount (not escape/e: its Markup changes what + does,
 *                 and HTML escaping has no place in a prompt)
 *   tests         defined undefined none boolean false true integer float
 *                 number string mapping iterable sequence callable lower upper
 *                 odd even divisibleby eq equalto ne lt lessthan le gt
 *                 greaterthan ge in sameas escaped
 * Not matched: case mappings are utf8proc's one-to-one ones; `sameas`
 * compares values, not object identity; reverse gives a list; `safe` is the
 * identity (jinja2's Markup would HTML-escape a string added to it).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "jinja/jinja_call.h"

/* ---- sorting (stable, Python's key semantics) ---------------------------------------- */

typedef struct {
    jv key, val;
} keyed;

/* key of an item: attribute path and/or lower-cased strings. */
static int attr_path(jctx *c, const jnode *n, const jv *item, const jv *attr, jv *out) {
    *out = *item;
    if (is_none_or_undef(attr)) return 0;
    if (attr->t == JV_INT) return moe8_jv_getitem(c, n, item, attr, out);
    if (want_str(c, n, attr, "attribute")) return -1;
    for (size_t i = 0; i <= attr->n;) { /* dotted parts; an all-digit part is an index */
        size_t j = i;
        while (j < attr->n && attr->u.s[j] != '.') j++;
        jv part = jv_str(attr->u.s + i, j - i), cur = *out;
        int digits = j > i;
        for (size_t k = i; k < j; k++) digits &= attr->u.s[k] >= '0' && attr->u.s[k] <= '9';
        if (digits && j - i < 18) part = jv_int(strtoll(part.u.s, NULL, 10));
        if (moe8_jv_getitem(c, n, &cur, &part, out)) return -1;
        i = j + 1;
    }
    return 0;
}

static int sort_key(jctx *c, const jnode *n, const jv *item, const jv *attr, int case_sensitive,
                    jv *out) {
    if (attr_path(c, n, item, attr, out)) return -1;
    if (!case_sensitive && out->t == JV_STR) return moe8_jstr_recase(c, n, out, JSTR_LOWER, out);
    return 0;
}

static int merge_sort(jctx *c, const jnode *n, keyed *v, keyed *tmp, size_t len, int reverse) {
    size_t h = len / 2, i = 0, j = h, k = 0;
    if (len < 2) return 0;
    if (merge_sort(c, n, v, tmp, h, reverse) || merge_sort(c, n, v + h, tmp, len - h, reverse)) return -1;
    while (i < h && j < len) {
        int lt;
        /* take the right one only when it is strictly before the left: stable */
        if (reverse ? moe8_jv_less(c, n, &v[i].key, &v[j].key, &lt) : moe8_jv_less(c, n, &v[j].key, &v[i].key, &lt))
            return -1;
        tmp[k++] = lt ? v[j++] : v[i++];
    }
    while (i < h) tmp[k++] = v[i++];
    while (j < len) tmp[k++] = v[j++];
    memcpy(v, tmp, len * sizeof *v);
    return moe8_jx_charge(c, n, len / 16);
}

static int sorted(jctx *c, const jnode *n, const jlist *items, const jv *attr, int case_sensitive,
                  int reverse, jlist **out) {
    keyed *v = moe8_jx_alloc(c, n, (items->n + 1) * sizeof *v), *tmp = moe8_jx_alloc(c, n, (items->n + 1) * sizeof *v);
    jlist *l = moe8_jl_new(c, n, items->n);
    if (!v || !tmp || !l) return -1;
    for (size_t i = 0; i < items->n; i++) {
        v[i].val = items->v[i];
        if (sort_key(c, n, &items->v[i], attr, case_sensitive, &v[i].key)) return -1;
    }
    if (merge_sort(c, n, v, tmp, items->n, reverse)) return -1;
    for (size_t i = 0; i < items->n; i++) l->v[i] = v[i].val;
    l->n = items->n;
    *out = l;
    return 0;
}

/* ---- filters ---------------------------------------------------------------------------- */

enum {
    F_ABS, F_ATTR, F_CAPITALIZE, F_COUNT, F_D, F_DEFAULT, F_DICTSORT, F_FIRST,
    F_FLOAT, F_INDENT, F_INT, F_ITEMS, F_JOIN, F_LAST, F_LENGTH, F_LIST, F_LOWER, F_MAP, F_MAX,
    F_MIN, F_REJECT, F_REJECTATTR, F_REPLACE, F_REVERSE, F_ROUND, F_SAFE, F_SELECT, F_SELECTATTR,
    F_SORT, F_STRING, F_SUM, F_TITLE, F_TOJSON, F_TRIM, F_UNIQUE, F_UPPER, F_WORDCOUNT, F_COUNT_,
};

typedef struct {
    const char *name;
    const char *params[5]; /* NULL-terminated; variadic filters check their own */
} jsig;

static const jsig FILTERS[F_COUNT_] = {
    [F_ABS] = {"abs", {NULL}},
    [F_ATTR] = {"attr", {"name", NULL}},
    [F_CAPITALIZE] = {"capitalize", {NULL}},
    [F_COUNT] = {"count", {NULL}},
    [F_D] = {"d", {"default_value", "boolean", NULL}},
    [F_DEFAULT] = {"default", {"default_value", "boolean", NULL}},
    [F_DICTSORT] = {"dictsort", {"case_sensitive", "by", "reverse", NULL}},
    [F_FIRST] = {"first", {NULL}},
    [F_FLOAT] = {"float", {"default", NULL}},
    [F_INDENT] = {"indent", {"width", "first", "blank", NULL}},
    [F_INT] = {"int", {"default", "base", NULL}},
    [F_ITEMS] = {"items", {NULL}},
    [F_JOIN] = {"join", {"d", "attribute", NULL}},
    [F_LAST] = {"last", {NULL}},
    [F_LENGTH] = {"length", {NULL}},
    [F_LIST] = {"list", {NULL}},
    [F_LOWER] = {"lower", {NULL}},
    [F_MAP] = {"map", {NULL}},
    [F_MAX] = {"max", {"case_sensitive", "attribute", NULL}},
    [F_MIN] = {"min", {"case_sensitive", "attribute", NULL}},
    [F_REJECT] = {"reject", {NULL}},
    [F_REJECTATTR] = {"rejectattr", {NULL}},
    [F_REPLACE] = {"replace", {"old", "new", "count", NULL}},
    [F_REVERSE] = {"reverse", {NULL}},
    [F_ROUND] = {"round", {"precision", "method", NULL}},
    [F_SAFE] = {"safe", {NULL}},
    [F_SELECT] = {"select", {NULL}},
    [F_SELECTATTR] = {"selectattr", {NULL}},
    [F_SORT] = {"sort", {"reverse", "case_sensitive", "attribute", NULL}},
    [F_STRING] = {"string", {NULL}},
    [F_SUM] = {"sum", {"attribute", "start", NULL}},
    [F_TITLE] = {"title", {NULL}},
    [F_TOJSON] = {"tojson", {"ensure_ascii", "indent", "separators", "sort_keys", NULL}},
    [F_TRIM] = {"trim", {"chars", NULL}},
    [F_UNIQUE] = {"unique", {"case_sensitive", "attribute", NULL}},
    [F_UPPER] = {"upper", {NULL}},
    [F_WORDCOUNT] = {"wordcount", {NULL}},
};

int moe8_jfilter_id(const char *name, size_t n) {
    for (int i = 0; i < F_COUNT_; i++)
        if (strlen(FILTERS[i].name) == n && !memcmp(FILTERS[i].name, name, n)) return i;
    return -1;
}

/* The value as a string (str()), for the string filters: undefined is ''. */
static int as_text(jctx *c, const jnode *n, const jv *in, jv *out) {
    if (in->t == JV_UNDEF) {
        *out = jv_str("", 0);
        return 0;
    }
    return moe8_jv_to_str(c, n, in, out);
}

static int f_tojson(jctx *c, const jnode *n, const jv *in, const jargs *a, jv *out) {
    const char *const *p = FILTERS[F_TOJSON].params;
    const jv *ea = arg(a, 0, p), *ind = arg(a, 1, p), *sep = arg(a, 2, p), *sk = arg(a, 3, p);
    jjson_opts o = {0};
    char spaces[64];
    moe8_buf b = {0};
    o.ensure_ascii = ea && moe8_jv_truthy(ea);
    o.sort_keys = sk && moe8_jv_truthy(sk);
    if (ind && ind->t != JV_NONE) {
        int64_t w = 0;
        if (ind->t == JV_STR) {
            o.indent = ind->u.s, o.indent_n = ind->n;
        } else {
            if (want_int(c, n, ind, "tojson's indent", &w)) return -1;
            if (w > 32) return moe8_jx_fail(c, n, "tojson's indent of %lld is over the supported 32", (long long)w);
            memset(spaces, ' ', sizeof spaces);
            o.indent = spaces, o.indent_n = w > 0 ? (size_t)w : 0;
        }
    }
    o.item_sep = o.indent ? "," : ", ", o.item_sep_n = o.indent ? 1 : 2;
    o.key_sep = ": ", o.key_sep_n = 2;
    if (sep && sep->t != JV_NONE) {
        if (sep->t != JV_LIST || sep->u.l->n != 2 || sep->u.l->v[0].t != JV_STR || sep->u.l->v[1].t != JV_STR)
            return moe8_jx_fail(c, n, "tojson's separators must be a pair of strings");
        o.item_sep = sep->u.l->v[0].u.s, o.item_sep_n = sep->u.l->v[0].n;
        o.key_sep = sep->u.l->v[1].u.s, o.key_sep_n = sep->u.l->v[1].n;
    }
    if (moe8_jv_json_to(c, n, &b, in, &o, 0)) {
        moe8_jx_buf_free(c, &b);
        return -1;
    }
    return moe8_jx_buf_value(c, n, &b, out);
}

/* Python's int(str, base) after jinja2's do_int: whitespace and underscores
 * allowed, then float() as the fallback. 0 on success. */
static int parse_int_text(const jv *s, int64_t base, int64_t *out) {
    char tmp[96], *end;
    size_t k = 0, i = 0, e = s->n;
    while (i < e && moe8_ju_isspace((unsigned char)s->u.s[i])) i++;
    while (e > i && moe8_ju_isspace((unsigned char)s->u.s[e - 1])) e--;
    if (e - i >= sizeof tmp || e == i) return -1;
    for (; i < e; i++) {
        if (s->u.s[i] == '_') continue;
        tmp[k++] = s->u.s[i];
    }
    tmp[k] = '\0';
    if (base == 16 && k > 2 && tmp[0] == '0' && (tmp[1] | 0x20) == 'x') memmove(tmp, tmp + 2, k - 1);
    else if (base == 8 && k > 2 && tmp[0] == '0' && (tmp[1] | 0x20) == 'o') memmove(tmp, tmp + 2, k - 1);
    else if (base == 2 && k > 2 && tmp[0] == '0' && (tmp[1] | 0x20) == 'b') memmove(tmp, tmp + 2, k - 1);
    if (tmp[0] == '+' || tmp[0] == '-' ? !tmp[1] : 0) return -1;
    long long v = strtoll(tmp, &end, (int)base);
    if (*end || end == tmp) return -1;
    *out = v;
    return 0;
}

static int parse_float_text(const jv *s, double *out) {
    char tmp[96], *end;
    size_t i = 0, e = s->n, k = 0;
    while (i < e && moe8_ju_isspace((unsigned char)s->u.s[i])) i++;
    while (e > i && moe8_ju_isspace((unsigned char)s->u.s[e - 1])) e--;
    if (e - i >= sizeof tmp || e == i) return -1;
    for (; i < e; i++) {
        char ch = s->u.s[i];
        if (ch == '_') continue;
        if (!strchr("0123456789+-.eEinfatyINFATY", ch)) return -1; /* no hex floats, no "0x" */
        tmp[k++] = ch;
    }
    tmp[k] = '\0';
    *out = strtod(tmp, &end);
    return *end || end == tmp ? -1 : 0;
}

static int f_round(jctx *c, const jnode *n, const jv *in, const jargs *a, jv *out) {
    const char *const *p = FILTERS[F_ROUND].params;
    const jv *pv = arg(a, 0, p), *mv = arg(a, 1, p);
    int64_t prec = 0;
    double x, scale;
    char buf[400];
    if (pv && want_int(c, n, pv, "round's precision", &prec)) return -1;
    if (mv && want_str(c, n, mv, "round's method")) return -1;
    if (in->t == JV_UNDEF) return moe8_jx_undefined(c, n, in);
    if (in->t != JV_INT && in->t != JV_BOOL && in->t != JV_FLOAT)
        return moe8_jx_fail(c, n, "round needs a number, not %s", moe8_jv_type_name(in));
    if (prec > 300 || prec < -300) return moe8_jx_fail(c, n, "round's precision %lld is out of range", (long long)prec);
    x = in->t == JV_FLOAT ? in->u.f : (double)(in->t == JV_INT ? in->u.i : in->u.b);
    if (!mv || (mv->n == 6 && !memcmp(mv->u.s, "common", 6))) {
        if (in->t != JV_FLOAT && prec >= 0) {
            *out = in->t == JV_BOOL ? jv_int(in->u.b) : *in;
            return 0;
        }
        if (prec >= 0) { /* correctly rounded, half to even on the exact binary value, as Python */
            snprintf(buf, sizeof buf, "%.*f", (int)prec, x);
            *out = jv_float(strtod(buf, NULL));
        } else {
            scale = pow(10.0, (double)-prec);
            double q = x / scale, r = nearbyint(q);
            *out = jv_float(r * scale);
        }
        return 0;
    }
    scale = pow(10.0, (double)prec);
    if (mv->n == 4 && !memcmp(mv->u.s, "ceil", 4)) *out = jv_float(ceil(x * scale) / scale);
    else if (mv->n == 5 && !memcmp(mv->u.s, "floor", 5)) *out = jv_float(floor(x * scale) / scale);
    else return moe8_jx_fail(c, n, "method must be common, ceil or floor");
    return 0;
}

static int f_indent(jctx *c, const jnode *n, const jv *in, const jargs *a, jv *out) {
    const char *const *p = FILTERS[F_INDENT].params;
    const jv *wv = arg(a, 0, p), *fv = arg(a, 1, p), *bv = arg(a, 2, p);
    jv s, lines, ind = jv_str("    ", 4);
    moe8_buf b = {0};
    int64_t w = 4;
    char *sp;
    if (want_str(c, n, in, "indent's value")) return -1; /* jinja2 appends "\n" to it: a str only */
    s = *in;
    if (wv && wv->t == JV_STR) ind = *wv;
    else if (wv) {
        if (want_int(c, n, wv, "indent's width", &w)) return -1;
        if (w < 0) w = 0;
        if ((size_t)w > c->lim.max_output) return moe8_jx_fail(c, n, "indent width %lld is too large", (long long)w);
        if (!(sp = moe8_jx_strbuf(c, n, NULL, (size_t)w + 1))) return -1;
        memset(sp, ' ', (size_t)w);
        ind = jv_str(sp, (size_t)w);
    }
    /* s + "\n", split into lines: jinja2's quirk that keeps a trailing empty line */
    char *t = moe8_jx_strbuf(c, n, NULL, s.n + 1);
    if (!t) return -1;
    memcpy(t, s.u.s, s.n);
    t[s.n] = '\n';
    jv s2 = jv_str(t, s.n + 1);
    if (moe8_jstr_splitlines(c, n, &s2, &lines)) return -1;
    const jlist *l = lines.u.l;
    for (size_t i = 0; i < l->n; i++) {
        const jv *line = &l->v[i];
        int indented = (i == 0 && fv && moe8_jv_truthy(fv)) || (i > 0 && (line->n || (bv && moe8_jv_truthy(bv))));
        if ((i && moe8_jbuf_add(c, n, &b, "\n", 1)) || (indented && moe8_jbuf_add(c, n, &b, ind.u.s, ind.n)) ||
            moe8_jbuf_add(c, n, &b, line->u.s, line->n)) {
            moe8_jx_buf_free(c, &b);
            return -1;
        }
    }
    return moe8_jx_buf_value(c, n, &b, out);
}

/* map / select / reject / selectattr / rejectattr. */
static int f_seq(jctx *c, const jnode *n, int id, const jv *in, const jargs *a, jv *out) {
    const jlist *items;
    jlist *l;
    jargs rest = {0};
    const jv *attr = NULL, *name = NULL, *dflt = NULL;
    int by_attr = id == F_SELECTATTR || id == F_REJECTATTR;
    if (!moe8_jv_truthy(in)) { /* jinja2 iterates only a true value: none, 0, false give nothing */
        if (!(l = moe8_jl_new(c, n, 0))) return -1;
        *out = list_val(l, 0);
        return 0;
    }
    if (moe8_jv_iterate(c, n, in, &items) || !(l = moe8_jl_new(c, n, items->n))) return -1;
    if (id == F_MAP) {
        for (size_t i = 0; i < a->n_kw; i++) {
            if (a->kw_len[i] == 9 && !memcmp(a->kw_name[i], "attribute", 9)) attr = &a->kw[i];
            else if (a->kw_len[i] == 7 && !memcmp(a->kw_name[i], "default", 7)) dflt = &a->kw[i];
            else return moe8_jx_fail(c, n, "map got an unexpected keyword argument '%.*s'", (int)a->kw_len[i], a->kw_name[i]);
        }
        if (!attr) {
            if (!a->n_pos) return moe8_jx_fail(c, n, "map needs a filter name or attribute=");
            name = &a->pos[0];
            rest.pos = a->pos + 1, rest.n_pos = a->n_pos - 1;
        }
        for (size_t i = 0; i < items->n; i++) {
            jv v;
            if (attr) {
                if (attr_path(c, n, &items->v[i], attr, &v)) return -1;
                if (v.t == JV_UNDEF && dflt) v = *dflt;
            } else if (moe8_jx_filter_by_name(c, n, name, &items->v[i], &rest, &v)) {
                return -1;
            }
            l->v[l->n++] = v;
        }
        *out = list_val(l, 0);
        return 0;
    }
    if (a->n_kw) return moe8_jx_fail(c, n, "%s takes no keyword arguments", FILTERS[id].name);
    size_t k = 0;
    if (by_attr) {
        if (!a->n_pos) return moe8_jx_fail(c, n, "%s needs an attribute name", FILTERS[id].name);
        attr = &a->pos[k++];
    }
    if (k < a->n_pos) name = &a->pos[k++];
    rest.pos = a->pos + k, rest.n_pos = a->n_pos - k;
    for (size_t i = 0; i < items->n; i++) {
        jv v = items->v[i];
        int keep;
        if (attr && attr_path(c, n, &items->v[i], attr, &v)) return -1;
        if (name) {
            if (moe8_jx_test_by_name(c, n, name, &v, &rest, &keep)) return -1;
        } else {
            keep = moe8_jv_truthy(&v);
        }
        if (id == F_REJECT || id == F_REJECTATTR) keep = !keep;
        if (keep) l->v[l->n++] = items->v[i];
    }
    *out = list_val(l, 0);
    return 0;
}

/* min / max / unique / sort / dictsort. */
static int f_order(jctx *c, const jnode *n, int id, const jv *in, const jargs *a, jv *out) {
    const char *const *p = FILTERS[id].params;
    const jlist *items;
    jlist *l;
    if (id == F_DICTSORT) {
        const jv *cs = arg(a, 0, p), *by = arg(a, 1, p), *rev = arg(a, 2, p);
        jlist *pairs;
        jv key_index = jv_int(0);
        if (in->t != JV_DICT) return moe8_jx_fail(c, n, "dictsort needs a dict, not %s", moe8_jv_type_name(in));
        if (by && want_str(c, n, by, "dictsort's by")) return -1;
        if (by && !(by->n == 3 && !memcmp(by->u.s, "key", 3))) {
            if (!(by->n == 5 && !memcmp(by->u.s, "value", 5)))
                return moe8_jx_fail(c, n, "You can only sort by either \"key\" or \"value\"");
            key_index = jv_int(1);
        }
        if (!(pairs = moe8_jl_new(c, n, in->u.d->n))) return -1;
        for (size_t i = 0; i < in->u.d->n; i++) {
            jlist *pair = moe8_jl_new(c, n, 2);
            if (!pair) return -1;
            pair->v[0] = in->u.d->k[i], pair->v[1] = in->u.d->v[i], pair->n = 2;
            pairs->v[pairs->n++] = list_val(pair, 1);
        }
        if (sorted(c, n, pairs, &key_index, cs && moe8_jv_truthy(cs), rev && moe8_jv_truthy(rev), &l)) return -1;
        *out = list_val(l, 0);
        return 0;
    }
    if (moe8_jv_iterate(c, n, in, &items)) return -1;
    if (id == F_SORT) {
        const jv *rev = arg(a, 0, p), *cs = arg(a, 1, p), *attr = arg(a, 2, p);
        if (sorted(c, n, items, attr, cs && moe8_jv_truthy(cs), rev && moe8_jv_truthy(rev), &l)) return -1;
        *out = list_val(l, 0);
        return 0;
    }
    const jv *cs = arg(a, 0, p), *attr = arg(a, 1, p);
    int case_sensitive = cs && moe8_jv_truthy(cs);
    if (id == F_UNIQUE) {
        jv *keys = moe8_jx_alloc(c, n, (items->n + 1) * sizeof *keys);
        if (!keys || !(l = moe8_jl_new(c, n, items->n))) return -1;
        for (size_t i = 0; i < items->n; i++) {
            jv k;
            int seen = 0;
            if (sort_key(c, n, &items->v[i], attr, case_sensitive, &k)) return -1;
            for (size_t j = 0; j < l->n && !seen; j++) seen = moe8_jv_equal(c, &keys[j], &k);
            if (!seen) keys[l->n] = k, l->v[l->n++] = items->v[i];
        }
        *out = list_val(l, 0);
        return 0;
    }
    /* min / max: the first of the extreme keys */
    if (!items->n) {
        *out = jv_undef("No aggregated item, sequence was empty.", 39);
        out->flag = JU_EMPTY;
        return 0;
    }
    jv best_key, k;
    size_t best = 0;
    if (sort_key(c, n, &items->v[0], attr, case_sensitive, &best_key)) return -1;
    for (size_t i = 1; i < items->n; i++) {
        int lt;
        if (sort_key(c, n, &items->v[i], attr, case_sensitive, &k)) return -1;
        if (id == F_MIN ? moe8_jv_less(c, n, &k, &best_key, &lt) : moe8_jv_less(c, n, &best_key, &k, &lt)) return -1;
        if (lt) best = i, best_key = k;
    }
    *out = items->v[best];
    return 0;
}

static int f_length(jctx *c, const jnode *n, const jv *in, jv *out) {
    switch (in->t) {
    case JV_UNDEF: *out = jv_int(0); return 0;
    case JV_STR: *out = jv_int((int64_t)moe8_ju_len(in->u.s, in->n)); return 0;
    case JV_LIST: *out = jv_int((int64_t)in->u.l->n); return 0;
    case JV_DICT: *out = jv_int((int64_t)in->u.d->n); return 0;
    default: return moe8_jx_fail(c, n, "object of type '%s' has no len()", moe8_jv_type_name(in));
    }
}

/* abs, float, int, sum. */
static int f_number(jctx *c, const jnode *n, int id, const jv *in, const jargs *a, jv *out) {
    const char *const *p = FILTERS[id].params;
    if (id == F_ABS) {
        if (in->t == JV_INT) {
            if (in->u.i == INT64_MIN) return moe8_jx_fail(c, n, "integer overflow in abs");
            *out = jv_int(in->u.i < 0 ? -in->u.i : in->u.i);
        } else if (in->t == JV_BOOL) *out = jv_int(in->u.b);
        else if (in->t == JV_FLOAT) *out = jv_float(fabs(in->u.f));
        else if (in->t == JV_UNDEF) return moe8_jx_undefined(c, n, in);
        else return moe8_jx_fail(c, n, "bad operand type for abs(): '%s'", moe8_jv_type_name(in));
        return 0;
    }
    if (id == F_FLOAT) {
        const jv *d = arg(a, 0, p);
        double f;
        if (in->t == JV_FLOAT) *out = *in;
        else if (in->t == JV_INT) *out = jv_float((double)in->u.i);
        else if (in->t == JV_BOOL) *out = jv_float(in->u.b);
        else if (in->t == JV_STR && !parse_float_text(in, &f)) *out = jv_float(f);
        else *out = d ? *d : jv_float(0.0);
        return 0;
    }
    if (id == F_INT) {
        const jv *d = arg(a, 0, p), *bv = arg(a, 1, p);
        int64_t base = 10, v;
        double f;
        if (bv && want_int(c, n, bv, "int's base", &base)) return -1;
        if (base != 2 && base != 8 && base != 10 && base != 16)
            return moe8_jx_fail(c, n, "int's base %lld is not supported (2, 8, 10 or 16)", (long long)base);
        if (in->t == JV_INT) *out = *in;
        else if (in->t == JV_BOOL) *out = jv_int(in->u.b);
        else if (in->t == JV_FLOAT && isfinite(in->u.f) && fabs(in->u.f) < 9.2e18) *out = jv_int((int64_t)in->u.f);
        else if (in->t == JV_STR && !parse_int_text(in, base, &v)) *out = jv_int(v);
        else if (in->t == JV_STR && !parse_float_text(in, &f) && isfinite(f) && fabs(f) < 9.2e18)
            *out = jv_int((int64_t)f);
        else *out = d ? *d : jv_int(0);
        return 0;
    }
    /* sum(attribute=None, start=0) */
    const jlist *items;
    const jv *attr = arg(a, 0, p), *start = arg(a, 1, p);
    jv acc = start ? *start : jv_int(0);
    if (moe8_jv_iterate(c, n, in, &items)) return -1;
    for (size_t i = 0; i < items->n; i++) {
        jv v, r;
        if (attr_path(c, n, &items->v[i], attr, &v)) return -1;
        int ai = acc.t == JV_INT || acc.t == JV_BOOL, vi = v.t == JV_INT || v.t == JV_BOOL;
        if (ai && vi) {
            int64_t x = acc.t == JV_INT ? acc.u.i : acc.u.b, y = v.t == JV_INT ? v.u.i : v.u.b, z;
            if (__builtin_add_overflow(x, y, &z)) return moe8_jx_fail(c, n, "integer overflow in sum");
            r = jv_int(z);
        } else if ((ai || acc.t == JV_FLOAT) && (vi || v.t == JV_FLOAT)) {
            double x = acc.t == JV_FLOAT ? acc.u.f : (double)(acc.t == JV_INT ? acc.u.i : acc.u.b);
            double y = v.t == JV_FLOAT ? v.u.f : (double)(v.t == JV_INT ? v.u.i : v.u.b);
            r = jv_float(x + y);
        } else {
            return moe8_jx_fail(c, n, "unsupported operand type(s) for +: '%s' and '%s'", moe8_jv_type_name(&acc),
                           moe8_jv_type_name(&v));
        }
        acc = r;
    }
    *out = acc;
    return 0;
}

/* default / d: the default for undefined (or, with boolean=true, for a false value). */
static int f_default(const jv *in, const jargs *a, jv *out) {
    const char *const *p = FILTERS[F_DEFAULT].params;
    const jv *d = arg(a, 0, p), *b = arg(a, 1, p);
    int use = in->t == JV_UNDEF || (b && moe8_jv_truthy(b) && !moe8_jv_truthy(in));
    *out = use ? (d ? *d : jv_str("", 0)) : *in;
    return 0;
}

/* attr: Python's getattr only: a dict's keys are not its attributes. */
static int f_attr(jctx *c, const jnode *n, const jv *in, const jargs *a, jv *out) {
    const jv *name = arg(a, 0, FILTERS[F_ATTR].params);
    int unsafe;
    if (!name || want_str(c, n, name, "attr's name")) return name ? -1 : moe8_jx_fail(c, n, "attr needs a name");
    if (in->t == JV_DICT && !moe8_jmethod_exists(in, name->u.s, name->n, &unsafe)) {
        *out = moe8_jv_undef_attr(in, n, name->u.s, name->n, JU_ATTR);
        return 0;
    }
    return moe8_jv_getattr(c, n, in, name->u.s, name->n, out);
}

/* trim, upper, lower, capitalize, title, replace, wordcount: on str(in). */
static int f_text(jctx *c, const jnode *n, int id, const jv *in, const jargs *a, jv *out) {
    const char *const *p = FILTERS[id].params;
    int64_t k = 0;
    int in_word = 0;
    jv s;
    if (id == F_REPLACE && (!arg(a, 0, p) || !arg(a, 1, p))) return moe8_jx_fail(c, n, "replace needs old and new");
    if (as_text(c, n, in, &s)) return -1;
    switch (id) {
    case F_TRIM: return moe8_jstr_strip(c, n, &s, arg(a, 0, p), 3, out);
    case F_UPPER: return moe8_jstr_recase(c, n, &s, JSTR_UPPER, out);
    case F_LOWER: return moe8_jstr_recase(c, n, &s, JSTR_LOWER, out);
    case F_CAPITALIZE: return moe8_jstr_recase(c, n, &s, JSTR_CAPITALIZE, out);
    case F_TITLE: return moe8_jstr_recase(c, n, &s, JSTR_JTITLE, out);
    case F_REPLACE: return moe8_jstr_replace(c, n, &s, arg(a, 0, p), arg(a, 1, p), arg(a, 2, p), out);
    default: break;
    }
    for (size_t i = 0; i < s.n;) { /* wordcount: \w+ runs: letters, digits, marks, underscore */
        uint32_t cp = ju_next(s.u.s, s.n, &i);
        utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)cp);
        int w = cp == '_' || (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_NO);
        if (w && !in_word) k++;
        in_word = w;
    }
    *out = jv_int(k);
    return 0;
}

static int f_join(jctx *c, const jnode *n, const jv *in, const jargs *a, jv *out) {
    const char *const *p = FILTERS[F_JOIN].params;
    const jv *d = arg(a, 0, p), *attr = arg(a, 1, p);
    const jlist *items;
    jv sep = jv_str("", 0);
    if (d && d->t != JV_UNDEF && moe8_jv_to_str(c, n, d, &sep)) return -1;
    if (moe8_jv_iterate(c, n, in, &items)) return -1;
    if (attr) {
        jlist *l = moe8_jl_new(c, n, items->n);
        if (!l) return -1;
        for (size_t i = 0; i < items->n; i++)
            if (attr_path(c, n, &items->v[i], attr, &l->v[l->n++])) return -1;
        items = l;
    }
    return moe8_jstr_join(c, n, &sep, items, out);
}

/* first / last. */
static int f_end(jctx *c, const jnode *n, int id, const jv *in, jv *out) {
    const jlist *items;
    if (in->t == JV_UNDEF) return moe8_jx_undefined(c, n, in);
    if (moe8_jv_iterate(c, n, in, &items)) return -1;
    if (!items->n) {
        *out = jv_undef("No first item, sequence was empty.", 34);
        out->flag = JU_EMPTY;
        return 0;
    }
    *out = items->v[id == F_FIRST ? 0 : items->n - 1];
    return 0;
}

/* list / reverse (a string reversed by character). */
static int f_list(jctx *c, const jnode *n, int id, const jv *in, jv *out) {
    const jlist *items;
    jlist *l;
    if (id == F_REVERSE && in->t == JV_STR) {
        sb b;
        if (sb_init(c, n, &b, in->n)) return -1;
        for (size_t e = in->n; e > 0;) {
            size_t j = e - 1;
            while (j > 0 && ((unsigned char)in->u.s[j] & 0xc0) == 0x80) j--;
            sb_put(&b, in->u.s + j, e - j);
            e = j;
        }
        *out = sb_val(&b);
        return 0;
    }
    if (moe8_jv_iterate(c, n, in, &items) || !(l = moe8_jl_new(c, n, items->n))) return -1;
    for (size_t i = 0; i < items->n; i++) l->v[i] = items->v[id == F_LIST ? i : items->n - 1 - i];
    l->n = items->n;
    *out = list_val(l, 0);
    return 0;
}

static int f_items(jctx *c, const jnode *n, const jv *in, jv *out) {
    jmethod m = {*in, "items", 5};
    jargs none = {0};
    if (in->t == JV_UNDEF) return !(out->u.l = moe8_jl_new(c, n, 0)) ? -1 : (*out = list_val(out->u.l, 0), 0);
    if (in->t != JV_DICT) return moe8_jx_fail(c, n, "items needs a mapping, not %s", moe8_jv_type_name(in));
    return moe8_jmethod_call(c, n, &m, &none, out);
}

int moe8_jfilter_apply(jctx *c, const jnode *n, int id, const jv *in, const jargs *a, jv *out) {
    if (id < 0 || id >= F_COUNT_) return moe8_jx_fail(c, n, "internal error: filter %d", id);
    if (id != F_MAP && id != F_SELECT && id != F_REJECT && id != F_SELECTATTR && id != F_REJECTATTR &&
        moe8_jx_check_sig(c, n, a, FILTERS[id].params, "filter", FILTERS[id].name))
        return -1;
    switch (id) {
    case F_D: case F_DEFAULT: return f_default(in, a, out);
    case F_ATTR: return f_attr(c, n, in, a, out);
    case F_LENGTH: case F_COUNT: return f_length(c, n, in, out);
    case F_STRING: return as_text(c, n, in, out);
    case F_SAFE: *out = *in; return 0;
    case F_TRIM: case F_UPPER: case F_LOWER: case F_CAPITALIZE: case F_TITLE: case F_REPLACE:
    case F_WORDCOUNT:
        return f_text(c, n, id, in, a, out);
    case F_INDENT: return f_indent(c, n, in, a, out);
    case F_TOJSON: return f_tojson(c, n, in, a, out);
    case F_JOIN: return f_join(c, n, in, a, out);
    case F_FIRST: case F_LAST: return f_end(c, n, id, in, out);
    case F_LIST: case F_REVERSE: return f_list(c, n, id, in, out);
    case F_ITEMS: return f_items(c, n, in, out);
    case F_MAP: case F_SELECT: case F_REJECT: case F_SELECTATTR: case F_REJECTATTR:
        return f_seq(c, n, id, in, a, out);
    case F_SORT: case F_DICTSORT: case F_UNIQUE: case F_MIN: case F_MAX:
        return f_order(c, n, id, in, a, out);
    case F_ROUND: return f_round(c, n, in, a, out);
    case F_ABS: case F_FLOAT: case F_INT: case F_SUM: return f_number(c, n, id, in, a, out);
    }
    return moe8_jx_fail(c, n, "internal error: filter %d is not implemented", id);
}

/* ---- tests -------------------------------------------------------------------------------- */

enum {
    T_DEFINED, T_UNDEFINED, T_NONE, T_BOOLEAN, T_FALSE, T_TRUE, T_INTEGER, T_FLOAT, T_NUMBER,
    T_STRING, T_MAPPING, T_ITERABLE, T_SEQUENCE, T_CALLABLE, T_LOWER, T_UPPER, T_ODD, T_EVEN,
    T_DIVISIBLEBY, T_EQ, T_NE, T_LT, T_LE, T_GT, T_GE, T_IN, T_SAMEAS, T_ESCAPED, T_COUNT_,
};

static const struct { const char *name; int id; } TESTS[] = {
    {"defined", T_DEFINED}, {"undefined", T_UNDEFINED}, {"none", T_NONE}, {"boolean", T_BOOLEAN},
    {"false", T_FALSE}, {"true", T_TRUE}, {"integer", T_INTEGER}, {"float", T_FLOAT},
    {"number", T_NUMBER}, {"string", T_STRING}, {"mapping", T_MAPPING}, {"iterable", T_ITERABLE},
    {"sequence", T_SEQUENCE}, {"callable", T_CALLABLE}, {"lower", T_LOWER}, {"upper", T_UPPER},
    {"odd", T_ODD}, {"even", T_EVEN}, {"divisibleby", T_DIVISIBLEBY}, {"eq", T_EQ},
    {"equalto", T_EQ}, {"==", T_EQ}, {"ne", T_NE}, {"!=", T_NE}, {"lt", T_LT}, {"lessthan", T_LT},
    {"<", T_LT}, {"le", T_LE}, {"<=", T_LE}, {"gt", T_GT}, {"greaterthan", T_GT}, {">", T_GT},
    {"ge", T_GE}, {">=", T_GE}, {"in", T_IN}, {"sameas", T_SAMEAS}, {"escaped", T_ESCAPED},
};

int moe8_jtest_id(const char *name, size_t n) {
    for (size_t i = 0; i < sizeof TESTS / sizeof *TESTS; i++)
        if (strlen(TESTS[i].name) == n && !memcmp(TESTS[i].name, name, n)) return TESTS[i].id;
    return -1;
}

/* Python's x % m for numbers (the sign of m), as odd/even/divisibleby use it. */
static int num_mod(jctx *c, const jnode *n, const jv *x, const jv *m, double *out) {
    double a, b, r;
    if (x->t == JV_UNDEF) return moe8_jx_undefined(c, n, x);
    if ((x->t != JV_INT && x->t != JV_BOOL && x->t != JV_FLOAT) || (m->t != JV_INT && m->t != JV_BOOL && m->t != JV_FLOAT))
        return moe8_jx_fail(c, n, "this test needs numbers, not %s and %s", moe8_jv_type_name(x), moe8_jv_type_name(m));
    a = x->t == JV_FLOAT ? x->u.f : (double)(x->t == JV_INT ? x->u.i : x->u.b);
    b = m->t == JV_FLOAT ? m->u.f : (double)(m->t == JV_INT ? m->u.i : m->u.b);
    if (b == 0) return moe8_jx_fail(c, n, "integer division or modulo by zero");
    r = fmod(a, b);
    if (r != 0 && ((r < 0) != (b < 0))) r += b;
    *out = r;
    return 0;
}

static int int_of(jctx *c, const jnode *n, const jv *v, int64_t *out) {
    if (v->t == JV_INT || v->t == JV_BOOL) {
        *out = v->t == JV_INT ? v->u.i : v->u.b;
        return 0;
    }
    if (v->t == JV_UNDEF) return moe8_jx_undefined(c, n, v);
    return moe8_jx_fail(c, n, "this test needs an integer, not %s", moe8_jv_type_name(v));
}

int moe8_jtest_apply(jctx *c, const jnode *n, int id, const jv *in, const jargs *a, int *out) {
    int want = id == T_DIVISIBLEBY || (id >= T_EQ && id <= T_SAMEAS);
    const jv *x = a->n_pos ? &a->pos[0] : NULL;
    int64_t i, k;
    if (a->n_kw) return moe8_jx_fail(c, n, "tests take no keyword arguments");
    if (a->n_pos != (size_t)want)
        return moe8_jx_fail(c, n, "this test takes %d argument%s, %zu given", want, want ? "" : "s", a->n_pos);
    switch (id) {
    case T_DEFINED: *out = in->t != JV_UNDEF; return 0;
    case T_UNDEFINED: *out = in->t == JV_UNDEF; return 0;
    case T_NONE: *out = in->t == JV_NONE; return 0;
    case T_BOOLEAN: *out = in->t == JV_BOOL; return 0;
    case T_FALSE: *out = in->t == JV_BOOL && !in->u.b; return 0;
    case T_TRUE: *out = in->t == JV_BOOL && in->u.b; return 0;
    case T_INTEGER: *out = in->t == JV_INT; return 0;
    case T_FLOAT: *out = in->t == JV_FLOAT; return 0;
    case T_NUMBER: *out = in->t == JV_INT || in->t == JV_FLOAT || in->t == JV_BOOL; return 0;
    case T_STRING: *out = in->t == JV_STR; return 0;
    case T_MAPPING: *out = in->t == JV_DICT; return 0;
    case T_ITERABLE: *out = in->t == JV_STR || in->t == JV_LIST || in->t == JV_DICT || in->t == JV_UNDEF; return 0;
    case T_SEQUENCE: *out = in->t == JV_STR || in->t == JV_LIST || in->t == JV_DICT || in->t == JV_UNDEF; return 0;
    case T_CALLABLE: *out = in->t == JV_FUNC || in->t == JV_MACRO || in->t == JV_METHOD; return 0;
    case T_LOWER: case T_UPPER: {
        jv s;
        if (as_text(c, n, in, &s)) return -1;
        *out = moe8_jstr_cased(&s, id == T_UPPER);
        return 0;
    }
    case T_ODD: case T_EVEN: case T_DIVISIBLEBY: {
        jv two = jv_int(2);
        double r = 0;
        if ((in->t == JV_INT || in->t == JV_BOOL) && (id != T_DIVISIBLEBY || x->t == JV_INT || x->t == JV_BOOL)) {
            if (int_of(c, n, in, &i) || (id == T_DIVISIBLEBY && int_of(c, n, x, &k))) return -1;
            if (id != T_DIVISIBLEBY) k = 2;
            if (k == 0) return moe8_jx_fail(c, n, "integer division or modulo by zero");
            int64_t m = k == -1 ? 0 : i % k;
            if (m != 0 && ((m < 0) != (k < 0))) m += k;
            *out = id == T_ODD ? m == 1 : m == 0;
            return 0;
        }
        if (num_mod(c, n, in, id == T_DIVISIBLEBY ? x : &two, &r)) return -1;
        *out = id == T_ODD ? r == 1 : r == 0;
        return 0;
    }
    case T_EQ: *out = moe8_jv_equal(c, in, x); return 0;
    case T_NE: *out = !moe8_jv_equal(c, in, x); return 0;
    case T_LT: return moe8_jv_less(c, n, in, x, out);
    case T_GT: return moe8_jv_less(c, n, x, in, out);
    case T_LE: case T_GE: {
        int lt;
        if (id == T_LE ? moe8_jv_less(c, n, x, in, &lt) : moe8_jv_less(c, n, in, x, &lt)) return -1;
        *out = !lt;
        return 0;
    }
    case T_IN: {
        const jlist *items;
        if (x->t == JV_STR) {
            if (want_str(c, n, in, "the left side of 'in <string>'")) return -1;
            *out = moe8_jstr_find(x->u.s, x->n, in->u.s, in->n) != NULL;
            return 0;
        }
        if (x->t == JV_DICT) {
            *out = moe8_jd_get(c, x->u.d, in) != NULL;
            return 0;
        }
        if (moe8_jv_iterate(c, n, x, &items)) return -1;
        *out = 0;
        for (size_t j = 0; j < items->n && !*out; j++) *out = moe8_jv_equal(c, &items->v[j], in);
        return 0;
    }
    case T_SAMEAS: *out = in->t == x->t && moe8_jv_equal(c, in, x); return 0;
    case T_ESCAPED: *out = 0; return 0;
    }
    return moe8_jx_fail(c, n, "test not implemented");
}

int moe8_jx_filter_by_name(jctx *c, const jnode *n, const jv *name, const jv *in, const jargs *a,
                      jv *out) {
    int id;
    if (want_str(c, n, name, "a filter name")) return -1;
    if ((id = moe8_jfilter_id(name->u.s, name->n)) < 0)
        return moe8_jx_fail(c, n, "filter '%.*s' is not supported", (int)(name->n > 40 ? 40 : name->n), name->u.s);
    return moe8_jfilter_apply(c, n, id, in, a, out);
}

int moe8_jx_test_by_name(jctx *c, const jnode *n, const jv *name, const jv *in, const jargs *a, int *out) {
    int id;
    if (want_str(c, n, name, "a test name")) return -1;
    if ((id = moe8_jtest_id(name->u.s, name->n)) < 0)
        return moe8_jx_fail(c, n, "test '%.*s' is not supported", (int)(name->n > 40 ? 40 : name->n), name->u.s);
    return moe8_jtest_apply(c, n, id, in, a, out);
}

