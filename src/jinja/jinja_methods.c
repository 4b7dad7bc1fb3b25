/*
 * jinja_methods.c — what templates call on values and by name: Python's str
 * operations by code point (shared with the filters through jinja_call.h),
 * the methods of str, dict, list and the loop object, attribute and item
 * lookup (jinja2's getattr-then-getitem), and the global functions HF's
 * environment has (range, namespace, dict, raise_exception, strftime_now).
 * Filters and tests are in jinja_filters.c.
 *
 * Each follows Python 3 / jinja2 3.1 semantics, strings by code point:
 *   str methods   capitalize count endswith find index isalnum isalpha
 *                 isdigit islower isspace isupper join lower lstrip
 *                 removeprefix removesuffix replace rfind rindex rsplit rstrip
 *                 split splitlines startswith strip title upper
 *   dict methods  get items keys values      list methods  count index
 * Methods that would modify a container are refused as the immutable sandbox
 * refuses them. Not matched: case mappings are utf8proc's one-to-one ones
 * ('ß'.upper() stays 'ß'; Python gives 'SS'); dict views and range() give
 * lists.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <utf8proc.h>

#include "jinja/jinja_call.h"

#define MAX_RANGE 100000 /* jinja2's sandbox refuses bigger ranges too */

/* ---- arguments ------------------------------------------------------------------ */

/* Arguments fit the signature params[] (NULL-terminated). */
int moe8_jx_check_sig(jctx *c, const jnode *n, const jargs *a, const char *const *params,
                      const char *what, const char *name) {
    size_t np = 0;
    while (params[np]) np++;
    if (a->n_pos > np)
        return moe8_jx_fail(c, n, "%s '%s' takes at most %zu argument%s (%zu given)", what, name, np,
                       np == 1 ? "" : "s", a->n_pos);
    for (size_t i = 0; i < a->n_kw; i++) {
        size_t k = 0;
        while (params[k] && !(strlen(params[k]) == a->kw_len[i] &&
                              !memcmp(params[k], a->kw_name[i], a->kw_len[i])))
            k++;
        if (!params[k])
            return moe8_jx_fail(c, n, "%s '%s' got an unexpected keyword argument '%.*s'", what, name,
                           (int)a->kw_len[i], a->kw_name[i]);
        if (k < a->n_pos)
            return moe8_jx_fail(c, n, "%s '%s' got multiple values for argument '%s'", what, name,
                           params[k]);
    }
    return 0;
}

/* ---- string helpers ----------------------------------------------------------------- */


/* Map every code point of s through f (all utf8proc mappings are one-to-one
 * and at most 4 bytes). */
static int map_cps(jctx *c, const jnode *n, const jv *s, uint32_t (*f)(uint32_t, void *), void *st,
                   jv *out) {
    sb b;
    if (sb_init(c, n, &b, s->n + 8)) return -1;
    for (size_t i = 0; i < s->n;) {
        uint32_t cp = f(ju_next(s->u.s, s->n, &i), st);
        if (b.n + 4 > b.cap) { /* grow: a mapping may lengthen a character */
            char *p = moe8_jx_strbuf(c, n, NULL, 2 * b.cap + 8);
            if (!p) return -1;
            memcpy(p, b.p, b.n);
            b.p = p;
            b.cap = 2 * b.cap + 8;
        }
        sb_cp(&b, cp);
    }
    *out = sb_val(&b);
    return 0;
}

static uint32_t cp_upper(uint32_t cp, void *st) { (void)st; return (uint32_t)utf8proc_toupper((utf8proc_int32_t)cp); }
static uint32_t cp_lower(uint32_t cp, void *st) { (void)st; return (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp); }

static int is_cased(uint32_t cp) {
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)cp);
    return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT;
}

/* str.title(): title-case a cased character after an uncased one, lower the rest. */
static uint32_t cp_title(uint32_t cp, void *st) {
    int *prev = st, cased = is_cased(cp);
    uint32_t r = cased ? (uint32_t)(*prev ? utf8proc_tolower((utf8proc_int32_t)cp)
                                          : utf8proc_totitle((utf8proc_int32_t)cp))
                       : cp;
    *prev = cased;
    return r;
}

/* str.capitalize(): the first character title-cased, the rest lowered. */
static uint32_t cp_capitalize(uint32_t cp, void *st) {
    int *first = st;
    uint32_t r = *first ? (uint32_t)utf8proc_totitle((utf8proc_int32_t)cp)
                        : (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp);
    *first = 0;
    return r;
}

/* jinja2's title filter: words start after [-\s({[<]. */
static uint32_t cp_jtitle(uint32_t cp, void *st) {
    int *after_sep = st, sep = cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' ||
                               moe8_ju_isspace(cp);
    uint32_t r = sep ? cp : *after_sep ? (uint32_t)utf8proc_toupper((utf8proc_int32_t)cp)
                                       : (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp);
    *after_sep = sep;
    return r;
}

int moe8_jstr_recase(jctx *c, const jnode *n, const jv *s, int how, jv *out) {
    static uint32_t (*const map[])(uint32_t, void *) = {
        [JSTR_UPPER] = cp_upper, [JSTR_LOWER] = cp_lower, [JSTR_TITLE] = cp_title,
        [JSTR_CAPITALIZE] = cp_capitalize, [JSTR_JTITLE] = cp_jtitle,
    };
    int st = how == JSTR_CAPITALIZE || how == JSTR_JTITLE; /* at a word's start */
    return map_cps(c, n, s, map[how], &st, out);
}

/* Characters to strip: chars NULL/None = whitespace. */
static int in_chars(const jv *chars, uint32_t cp) {
    if (is_none_or_undef(chars)) return moe8_ju_isspace(cp);
    for (size_t i = 0; i < chars->n;)
        if (ju_next(chars->u.s, chars->n, &i) == cp) return 1;
    return 0;
}

/* strip/lstrip/rstrip: which = 1 left, 2 right, 3 both. */
int moe8_jstr_strip(jctx *c, const jnode *n, const jv *s, const jv *chars, int which, jv *out) {
    size_t a = 0, b = s->n;
    if (chars && !is_none_or_undef(chars) && want_str(c, n, chars, "strip's argument")) return -1;
    if (which & 1)
        while (a < b) {
            size_t j = a;
            if (!in_chars(chars, ju_next(s->u.s, b, &j))) break;
            a = j;
        }
    if (which & 2)
        while (b > a) {
            size_t j = b - 1, k;
            while (j > a && ((unsigned char)s->u.s[j] & 0xc0) == 0x80) j--;
            k = j;
            if (!in_chars(chars, ju_next(s->u.s, b, &k))) break;
            b = j;
        }
    *out = jv_str(s->u.s + a, b - a);
    return 0;
}

const char *moe8_jstr_find(const char *h, size_t hn, const char *nd, size_t nn) {
    if (nn == 0) return h;
    if (nn > hn) return NULL;
    for (size_t i = 0; i + nn <= hn; i++)
        if (h[i] == nd[0] && !memcmp(h + i, nd, nn)) return h + i;
    return NULL;
}

static const char *rfind_sub(const char *h, size_t hn, const char *nd, size_t nn) {
    if (nn > hn) return NULL;
    for (size_t i = hn - nn + 1; i-- > 0;)
        if (!memcmp(h + i, nd, nn)) return h + i;
    return NULL;
}

static int push_str(jctx *c, const jnode *n, jlist *l, const char *s, size_t len) {
    return moe8_jl_push(c, n, l, jv_str(s, len));
}

/* str.split / str.rsplit (right = 1). */
static int do_split(jctx *c, const jnode *n, const jv *s, const jv *sep, const jv *maxv, int right,
                    jv *out) {
    int64_t max = -1;
    jlist *l = moe8_jl_new(c, n, 4);
    const char *p = s->u.s;
    size_t len = s->n;
    if (!l || (maxv && !is_none_or_undef(maxv) && want_int(c, n, maxv, "maxsplit", &max))) return -1;
    if (!is_none_or_undef(sep)) {
        if (want_str(c, n, sep, "the separator")) return -1;
        if (sep->n == 0) return moe8_jx_fail(c, n, "empty separator");
        if (!right) {
            size_t i = 0;
            for (int64_t k = 0; max < 0 || k < max; k++) {
                const char *hit = moe8_jstr_find(p + i, len - i, sep->u.s, sep->n);
                if (!hit) break;
                if (push_str(c, n, l, p + i, (size_t)(hit - p) - i)) return -1;
                i = (size_t)(hit - p) + sep->n;
            }
            if (push_str(c, n, l, p + i, len - i)) return -1;
        } else {
            size_t e = len;
            jlist *r = moe8_jl_new(c, n, 4);
            if (!r) return -1;
            for (int64_t k = 0; max < 0 || k < max; k++) {
                const char *hit = rfind_sub(p, e, sep->u.s, sep->n);
                if (!hit) break;
                size_t at = (size_t)(hit - p);
                if (push_str(c, n, r, p + at + sep->n, e - at - sep->n)) return -1;
                e = at;
            }
            if (push_str(c, n, l, p, e)) return -1;
            for (size_t k = r->n; k-- > 0;)
                if (moe8_jl_push(c, n, l, r->v[k])) return -1;
        }
    } else if (!right) { /* runs of whitespace */
        size_t i = 0;
        int64_t k = 0;
        for (;;) {
            size_t j = i;
            while (i < len && (j = i, moe8_ju_isspace(ju_next(p, len, &j)))) i = j;
            if (i >= len) break;
            if (max >= 0 && k == max) {
                if (push_str(c, n, l, p + i, len - i)) return -1;
                break;
            }
            size_t start = i;
            while (i < len && (j = i, !moe8_ju_isspace(ju_next(p, len, &j)))) i = j;
            if (push_str(c, n, l, p + start, i - start)) return -1;
            k++;
        }
    } else {
        size_t e = len;
        int64_t k = 0;
        jlist *r = moe8_jl_new(c, n, 4);
        if (!r) return -1;
        for (;;) {
            jv piece;
            while (e > 0) { /* skip whitespace from the right */
                size_t j = e - 1, t;
                while (j > 0 && ((unsigned char)p[j] & 0xc0) == 0x80) j--;
                t = j;
                if (!moe8_ju_isspace(ju_next(p, len, &t))) break;
                e = j;
            }
            if (e == 0) break;
            if (max >= 0 && k == max) {
                if (push_str(c, n, r, p, e)) return -1;
                break;
            }
            size_t b = e;
            while (b > 0) {
                size_t j = b - 1, t;
                while (j > 0 && ((unsigned char)p[j] & 0xc0) == 0x80) j--;
                t = j;
                if (moe8_ju_isspace(ju_next(p, len, &t))) break;
                b = j;
            }
            piece = jv_str(p + b, e - b);
            if (moe8_jl_push(c, n, r, piece)) return -1;
            e = b;
            k++;
        }
        for (size_t q = r->n; q-- > 0;)
            if (moe8_jl_push(c, n, l, r->v[q])) return -1;
    }
    *out = list_val(l, 0);
    return 0;
}

/* str.splitlines(): \n \r \r\n \v \f \x1c-\x1e \x85 \u2028 \u2029 end lines. */
int moe8_jstr_splitlines(jctx *c, const jnode *n, const jv *s, jv *out) {
    jlist *l = moe8_jl_new(c, n, 4);
    const char *p = s->u.s;
    size_t i = 0, start = 0, len = s->n;
    if (!l) return -1;
    while (i < len) {
        size_t j = i;
        uint32_t cp = ju_next(p, len, &j);
        if (cp == '\n' || cp == '\r' || cp == 0x0b || cp == 0x0c || (cp >= 0x1c && cp <= 0x1e) ||
            cp == 0x85 || cp == 0x2028 || cp == 0x2029) {
            if (push_str(c, n, l, p + start, i - start)) return -1;
            if (cp == '\r' && j < len && p[j] == '\n') j++;
            start = j;
        }
        i = j;
    }
    if (start < len && push_str(c, n, l, p + start, len - start)) return -1;
    *out = list_val(l, 0);
    return 0;
}

int moe8_jstr_replace(jctx *c, const jnode *n, const jv *s, const jv *old, const jv *new_,
                      const jv *countv, jv *out) {
    int64_t count = -1, k = 0, hits = 0;
    sb b;
    size_t i = 0, need;
    if (want_str(c, n, old, "replace's old") || want_str(c, n, new_, "replace's new") ||
        (countv && !is_none_or_undef(countv) && want_int(c, n, countv, "replace's count", &count)))
        return -1;
    if (old->n == 0) { /* between every character, and at both ends */
        size_t m = moe8_ju_len(s->u.s, s->n);
        hits = count < 0 || count > (int64_t)m + 1 ? (int64_t)m + 1 : count;
    } else {
        for (const char *h = s->u.s; (count < 0 || hits < count) &&
             (h = moe8_jstr_find(h, s->n - (size_t)(h - s->u.s), old->u.s, old->n)); h += old->n)
            hits++;
    }
    if (moe8_mul_size((size_t)hits, new_->n, &need) || moe8_add_size(need, s->n, &need) ||
        need > c->lim.max_output)
        return moe8_jx_fail(c, n, "replace would make a string over the %zu-byte limit", c->lim.max_output);
    if (sb_init(c, n, &b, need)) return -1;
    if (old->n == 0) {
        while (k < hits) {
            sb_put(&b, new_->u.s, new_->n);
            if (++k == hits) break;
            size_t j = i;
            if (i < s->n) ju_next(s->u.s, s->n, &j);
            sb_put(&b, s->u.s + i, j - i);
            i = j;
        }
        sb_put(&b, s->u.s + i, s->n - i);
    } else {
        for (; k < hits; k++) {
            const char *h = moe8_jstr_find(s->u.s + i, s->n - i, old->u.s, old->n);
            size_t at = (size_t)(h - s->u.s);
            sb_put(&b, s->u.s + i, at - i);
            sb_put(&b, new_->u.s, new_->n);
            i = at + old->n;
        }
        sb_put(&b, s->u.s + i, s->n - i);
    }
    *out = sb_val(&b);
    return 0;
}

/* prefix may be a string or a tuple/list of strings. */
static int affix_match(jctx *c, const jnode *n, const jv *s, const jv *x, int end, int *hit) {
    if (x->t == JV_LIST) {
        *hit = 0;
        for (size_t i = 0; i < x->u.l->n && !*hit; i++)
            if (affix_match(c, n, s, &x->u.l->v[i], end, hit)) return -1;
        return 0;
    }
    if (want_str(c, n, x, end ? "endswith's argument" : "startswith's argument")) return -1;
    *hit = x->n <= s->n && !memcmp(s->u.s + (end ? s->n - x->n : 0), x->u.s, x->n);
    return 0;
}

/* Python str predicates over every character (isdigit, ...): which 'd','a','n','s'. */
static int str_all(const jv *s, char which) {
    if (!s->n) return 0;
    for (size_t i = 0; i < s->n;) {
        uint32_t cp = ju_next(s->u.s, s->n, &i);
        utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)cp);
        int letter = k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO;
        int digit = k == UTF8PROC_CATEGORY_ND;
        int numeric = digit || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
        int ok = which == 'd' ? digit : which == 'a' ? letter : which == 'n' ? letter || numeric
                 : moe8_ju_isspace(cp);
        if (!ok) return 0;
    }
    return 1;
}

/* islower/isupper: some cased character, and every cased one in that case. */
int moe8_jstr_cased(const jv *s, int upper) {
    int cased = 0;
    for (size_t i = 0; i < s->n;) {
        uint32_t cp = ju_next(s->u.s, s->n, &i);
        utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)cp);
        if (k == UTF8PROC_CATEGORY_LT) return 0;
        if (k == UTF8PROC_CATEGORY_LU) { if (!upper) return 0; cased = 1; }
        if (k == UTF8PROC_CATEGORY_LL) { if (upper) return 0; cased = 1; }
    }
    return cased;
}

/* Iterating a value as Python does: list items, dict keys, string characters. */
int moe8_jv_iterate(jctx *c, const jnode *n, const jv *v, const jlist **out) {
    jlist *l;
    switch (v->t) {
    case JV_LIST: *out = v->u.l; return 0;
    case JV_UNDEF: return !(*out = moe8_jl_new(c, n, 0));
    case JV_DICT: case JV_NS:
        if (!(l = moe8_jl_new(c, n, v->u.d->n))) return -1;
        for (size_t i = 0; i < v->u.d->n; i++) l->v[l->n++] = v->u.d->k[i];
        *out = l;
        return 0;
    case JV_STR:
        if (!(l = moe8_jl_new(c, n, v->n))) return -1;
        for (size_t i = 0; i < v->n;) {
            size_t s = i;
            ju_next(v->u.s, v->n, &i);
            l->v[l->n++] = jv_str(v->u.s + s, i - s);
        }
        *out = l;
        return 0;
    default:
        return moe8_jx_fail(c, n, "'%s' object is not iterable", moe8_jv_type_name(v));
    }
}

/* str.join(items) / the join filter: items turned to str. */
int moe8_jstr_join(jctx *c, const jnode *n, const jv *sep, const jlist *items, jv *out) {
    moe8_buf b = {0};
    for (size_t i = 0; i < items->n; i++)
        if ((i && moe8_jbuf_add(c, n, &b, sep->u.s, sep->n)) || moe8_jv_str_to(c, n, &b, &items->v[i])) {
            moe8_jx_buf_free(c, &b);
            return -1;
        }
    return moe8_jx_buf_value(c, n, &b, out);
}

/* ---- methods -------------------------------------------------------------------------- */

static const char *const STR_METHODS[] = {
    "capitalize", "casefold", "center", "count", "encode", "endswith", "expandtabs", "find",
    "format", "format_map", "index", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit",
    "isidentifier", "islower", "isnumeric", "isprintable", "isspace", "istitle", "isupper", "join",
    "ljust", "lower", "lstrip", "maketrans", "partition", "removeprefix", "removesuffix", "replace",
    "rfind", "rindex", "rjust", "rpartition", "rsplit", "rstrip", "split", "splitlines",
    "startswith", "strip", "swapcase", "title", "translate", "upper", "zfill", NULL,
};
static const char *const DICT_METHODS[] = {"copy", "fromkeys", "get", "items", "keys", "values", NULL};
static const char *const DICT_UNSAFE[] = {"clear", "pop", "popitem", "setdefault", "update", NULL};
static const char *const LIST_METHODS[] = {"copy", "count", "index", NULL};
static const char *const LIST_UNSAFE[] = {"append", "clear", "extend", "insert", "pop", "remove",
                                          "reverse", "sort", NULL};

static int in_names(const char *const *names, const char *s, size_t n) {
    for (int i = 0; names[i]; i++)
        if (strlen(names[i]) == n && !memcmp(names[i], s, n)) return 1;
    return 0;
}

int moe8_jmethod_exists(const jv *obj, const char *name, size_t len, int *unsafe) {
    *unsafe = 0;
    switch (obj->t) {
    case JV_STR: return in_names(STR_METHODS, name, len);
    case JV_DICT:
        if (in_names(DICT_UNSAFE, name, len)) return *unsafe = 1;
        return in_names(DICT_METHODS, name, len);
    case JV_LIST:
        if (in_names(LIST_UNSAFE, name, len)) return *unsafe = 1;
        return in_names(LIST_METHODS, name, len);
    case JV_LOOP: return len == 5 && !memcmp(name, "cycle", 5);
    default: return 0;
    }
}

static int is_m(const jmethod *m, const char *name) {
    return m->len == strlen(name) && !memcmp(m->name, name, m->len);
}

static int str_method(jctx *c, const jnode *n, const jmethod *m, const jargs *a, jv *out) {
    static const char *const p_chars[] = {"chars", NULL}, *const p_split[] = {"sep", "maxsplit", NULL},
                             *const p_sub[] = {"sub", NULL}, *const p_affix[] = {"prefix", NULL},
                             *const p_repl[] = {"old", "new", "count", NULL}, *const p_none[] = {NULL},
                             *const p_join[] = {"iterable", NULL};
    const jv *s = &m->self;
    char name[24];
    snprintf(name, sizeof name, "str.%.*s", (int)(m->len > 16 ? 16 : m->len), m->name);
    if (is_m(m, "strip") || is_m(m, "lstrip") || is_m(m, "rstrip")) {
        if (moe8_jx_check_sig(c, n, a, p_chars, "method", name)) return -1;
        return moe8_jstr_strip(c, n, s, arg(a, 0, p_chars),
                               m->name[0] == 'l' ? 1 : m->name[0] == 'r' ? 2 : 3, out);
    }
    if (is_m(m, "split") || is_m(m, "rsplit")) {
        if (moe8_jx_check_sig(c, n, a, p_split, "method", name)) return -1;
        return do_split(c, n, s, arg(a, 0, p_split), arg(a, 1, p_split), m->name[0] == 'r', out);
    }
    if (is_m(m, "startswith") || is_m(m, "endswith")) {
        const jv *x;
        int hit;
        if (moe8_jx_check_sig(c, n, a, p_affix, "method", name)) return -1;
        if (!(x = arg(a, 0, p_affix))) return moe8_jx_fail(c, n, "%s takes one argument", name);
        if (affix_match(c, n, s, x, m->name[0] == 'e', &hit)) return -1;
        *out = jv_bool(hit);
        return 0;
    }
    if (is_m(m, "replace")) {
        if (moe8_jx_check_sig(c, n, a, p_repl, "method", name)) return -1;
        if (!arg(a, 0, p_repl) || !arg(a, 1, p_repl)) return moe8_jx_fail(c, n, "%s takes 2 or 3 arguments", name);
        return moe8_jstr_replace(c, n, s, arg(a, 0, p_repl), arg(a, 1, p_repl), arg(a, 2, p_repl), out);
    }
    if (is_m(m, "upper") || is_m(m, "lower") || is_m(m, "title") || is_m(m, "capitalize")) {
        if (moe8_jx_check_sig(c, n, a, p_none, "method", name)) return -1;
        return moe8_jstr_recase(c, n, s, is_m(m, "upper") ? JSTR_UPPER : is_m(m, "lower") ? JSTR_LOWER
                                         : is_m(m, "title") ? JSTR_TITLE : JSTR_CAPITALIZE, out);
    }
    if (is_m(m, "find") || is_m(m, "rfind") || is_m(m, "index") || is_m(m, "rindex") || is_m(m, "count")) {
        const jv *x;
        if (moe8_jx_check_sig(c, n, a, p_sub, "method", name)) return -1;
        if (!(x = arg(a, 0, p_sub)) || want_str(c, n, x, name)) return x ? -1 : moe8_jx_fail(c, n, "%s takes one argument", name);
        if (is_m(m, "count")) {
            int64_t k = 0;
            if (!x->n) k = (int64_t)moe8_ju_len(s->u.s, s->n) + 1;
            else
                for (const char *h = s->u.s;
                     (h = moe8_jstr_find(h, s->n - (size_t)(h - s->u.s), x->u.s, x->n)); h += x->n)
                    k++;
            *out = jv_int(k);
            return 0;
        }
        const char *h = m->name[0] == 'r' ? rfind_sub(s->u.s, s->n, x->u.s, x->n)
                                          : moe8_jstr_find(s->u.s, s->n, x->u.s, x->n);
        if (!h && (is_m(m, "index") || is_m(m, "rindex"))) return moe8_jx_fail(c, n, "substring not found");
        *out = jv_int(h ? (int64_t)moe8_ju_len(s->u.s, (size_t)(h - s->u.s)) : -1);
        return 0;
    }
    if (is_m(m, "removeprefix") || is_m(m, "removesuffix")) {
        const jv *x;
        int end = m->name[6] == 's', hit;
        if (moe8_jx_check_sig(c, n, a, p_affix, "method", name)) return -1;
        if (!(x = arg(a, 0, p_affix)) || want_str(c, n, x, name)) return x ? -1 : moe8_jx_fail(c, n, "%s takes one argument", name);
        hit = x->n <= s->n && !memcmp(s->u.s + (end ? s->n - x->n : 0), x->u.s, x->n);
        *out = hit ? jv_str(s->u.s + (end ? 0 : x->n), s->n - x->n) : *s;
        return 0;
    }
    if (is_m(m, "join")) {
        const jv *x;
        const jlist *items;
        if (moe8_jx_check_sig(c, n, a, p_join, "method", name)) return -1;
        if (!(x = arg(a, 0, p_join))) return moe8_jx_fail(c, n, "%s takes one argument", name);
        if (moe8_jv_iterate(c, n, x, &items)) return -1;
        for (size_t i = 0; i < items->n; i++)
            if (items->v[i].t != JV_STR)
                return moe8_jx_fail(c, n, "sequence item %zu: expected str instance, %s found", i,
                               moe8_jv_type_name(&items->v[i]));
        return moe8_jstr_join(c, n, s, items, out);
    }
    if (is_m(m, "splitlines")) {
        if (moe8_jx_check_sig(c, n, a, p_none, "method", name)) return -1;
        return moe8_jstr_splitlines(c, n, s, out);
    }
    if (is_m(m, "isdigit") || is_m(m, "isalpha") || is_m(m, "isalnum") || is_m(m, "isspace") ||
        is_m(m, "islower") || is_m(m, "isupper")) {
        if (moe8_jx_check_sig(c, n, a, p_none, "method", name)) return -1;
        if (is_m(m, "islower") || is_m(m, "isupper")) *out = jv_bool(moe8_jstr_cased(s, m->name[2] == 'u'));
        else *out = jv_bool(str_all(s, is_m(m, "isdigit") ? 'd' : is_m(m, "isalpha") ? 'a'
                                       : is_m(m, "isalnum") ? 'n' : 's'));
        return 0;
    }
    return moe8_jx_fail(c, n, "%s() is not supported", name);
}

int moe8_jmethod_call(jctx *c, const jnode *n, const jmethod *m, const jargs *a, jv *out) {
    static const char *const p_get[] = {"key", "default", NULL}, *const p_none[] = {NULL},
                             *const p_x[] = {"value", NULL};
    const jv *self = &m->self;
    char name[24];
    if (self->t == JV_STR) return str_method(c, n, m, a, out);
    snprintf(name, sizeof name, "%s.%.*s", moe8_jv_type_name(self), (int)(m->len > 12 ? 12 : m->len), m->name);
    if (self->t == JV_LOOP) { /* cycle(*values) */
        if (a->n_kw) return moe8_jx_fail(c, n, "loop.cycle takes no keyword arguments");
        if (!a->n_pos) return moe8_jx_fail(c, n, "no items for cycling given");
        *out = a->pos[self->u.loop->i % a->n_pos];
        return 0;
    }
    if (self->t == JV_DICT) {
        const jdict *d = self->u.d;
        if (is_m(m, "get")) {
            const jv *k, *v;
            if (moe8_jx_check_sig(c, n, a, p_get, "method", name)) return -1;
            if (!(k = arg(a, 0, p_get))) return moe8_jx_fail(c, n, "dict.get takes 1 or 2 arguments");
            v = moe8_jd_get(c, d, k);
            *out = v ? *v : arg(a, 1, p_get) ? *arg(a, 1, p_get) : jv_none();
            return 0;
        }
        if (moe8_jx_check_sig(c, n, a, p_none, "method", name)) return -1;
        if (is_m(m, "copy")) {
            *out = *self;
            return 0;
        }
        if (is_m(m, "keys") || is_m(m, "values") || is_m(m, "items")) {
            jlist *l = moe8_jl_new(c, n, d->n);
            if (!l) return -1;
            for (size_t i = 0; i < d->n; i++) {
                if (is_m(m, "keys")) l->v[i] = d->k[i];
                else if (is_m(m, "values")) l->v[i] = d->v[i];
                else {
                    jlist *pair = moe8_jl_new(c, n, 2);
                    if (!pair) return -1;
                    pair->v[0] = d->k[i];
                    pair->v[1] = d->v[i];
                    pair->n = 2;
                    l->v[i] = list_val(pair, 1);
                }
            }
            l->n = d->n;
            *out = list_val(l, 0);
            return 0;
        }
    }
    if (self->t == JV_LIST) {
        const jlist *l = self->u.l;
        if (is_m(m, "copy")) {
            if (moe8_jx_check_sig(c, n, a, p_none, "method", name)) return -1;
            *out = *self;
            return 0;
        }
        if (is_m(m, "count") || is_m(m, "index")) {
            const jv *x;
            int64_t k = 0;
            if (moe8_jx_check_sig(c, n, a, p_x, "method", name)) return -1;
            if (!(x = arg(a, 0, p_x))) return moe8_jx_fail(c, n, "%s takes one argument", name);
            for (size_t i = 0; i < l->n; i++)
                if (moe8_jv_equal(c, &l->v[i], x)) {
                    if (is_m(m, "index")) {
                        *out = jv_int((int64_t)i);
                        return 0;
                    }
                    k++;
                }
            if (is_m(m, "index")) return moe8_jx_fail(c, n, "list.index(x): x not in list");
            *out = jv_int(k);
            return 0;
        }
    }
    return moe8_jx_fail(c, n, "%s() is not supported", name);
}

/* ---- attribute and item lookup --------------------------------------------------------- */

jv moe8_jv_undef_attr(const jv *obj, const jnode *n, const char *name, size_t len, int kind) {
    jv v = jv_undef(name, len);
    v.flag = (uint8_t)kind;
    v.of = obj->t;
    v.at = n ? n->pos + 1 : 0;
    return v;
}

static int loop_attr(jctx *c, const jnode *n, const jloop *L, const char *name, size_t len, jv *out) {
    size_t i = L->i, N = L->items->n;
#define IS(s) (len == sizeof s - 1 && !memcmp(name, s, len))
    (void)c, (void)n;
    if (IS("index")) *out = jv_int((int64_t)i + 1);
    else if (IS("index0")) *out = jv_int((int64_t)i);
    else if (IS("revindex")) *out = jv_int((int64_t)(N - i));
    else if (IS("revindex0")) *out = jv_int((int64_t)(N - i - 1));
    else if (IS("first")) *out = jv_bool(i == 0);
    else if (IS("last")) *out = jv_bool(i + 1 == N);
    else if (IS("length")) *out = jv_int((int64_t)N);
    else if (IS("depth")) *out = jv_int(1);
    else if (IS("depth0")) *out = jv_int(0);
    else if (IS("previtem")) *out = i > 0 ? L->items->v[i - 1] : jv_undef("previtem", 8);
    else if (IS("nextitem")) *out = i + 1 < N ? L->items->v[i + 1] : jv_undef("nextitem", 8);
    else return 0;
#undef IS
    return 1;
}

int moe8_jv_getattr(jctx *c, const jnode *n, const jv *obj, const char *name, size_t len, jv *out) {
    int unsafe;
    if (obj->t == JV_UNDEF) return moe8_jx_undefined(c, n, obj);
    if (obj->t == JV_LOOP && loop_attr(c, n, obj->u.loop, name, len, out)) return 0;
    if (moe8_jmethod_exists(obj, name, len, &unsafe)) {
        jmethod *m;
        if (unsafe) {
            *out = moe8_jv_undef_attr(obj, n, name, len, JU_UNSAFE);
            return 0;
        }
        if (!(m = moe8_jx_alloc(c, n, sizeof *m))) return -1;
        m->self = *obj;
        m->name = name;
        m->len = len;
        out->t = JV_METHOD;
        out->u.method = m;
        return 0;
    }
    if (obj->t == JV_DICT || obj->t == JV_NS) {
        const jv *v = moe8_jd_get_str(c, obj->u.d, name, len);
        if (v) {
            *out = *v;
            return 0;
        }
    }
    *out = moe8_jv_undef_attr(obj, n, name, len, JU_ATTR);
    return 0;
}

int moe8_jv_getitem(jctx *c, const jnode *n, const jv *obj, const jv *key, jv *out) {
    if (obj->t == JV_UNDEF) return moe8_jx_undefined(c, n, obj);
    if ((obj->t == JV_LIST || obj->t == JV_STR) && (key->t == JV_INT || key->t == JV_BOOL)) {
        int64_t i = key->t == JV_INT ? key->u.i : key->u.b;
        size_t len = obj->t == JV_LIST ? obj->u.l->n : moe8_ju_len(obj->u.s, obj->n);
        if (i < 0) i += (int64_t)len;
        if (i >= 0 && (uint64_t)i < len) {
            if (obj->t == JV_LIST) {
                *out = obj->u.l->v[i];
            } else { /* the i-th character */
                size_t b = 0, k = 0;
                while (k < (size_t)i) {
                    ju_next(obj->u.s, obj->n, &b);
                    k++;
                }
                size_t e = b;
                ju_next(obj->u.s, obj->n, &e);
                *out = jv_str(obj->u.s + b, e - b);
            }
            return 0;
        }
        jv u = moe8_jv_undef_attr(obj, n, NULL, 0, JU_ELEMENT);
        u.u.i = key->t == JV_INT ? key->u.i : key->u.b;
        *out = u;
        return 0;
    }
    if (obj->t == JV_DICT) {
        const jv *v = moe8_jd_get(c, obj->u.d, key);
        if (v) {
            *out = *v;
            return 0;
        }
    }
    if (key->t == JV_STR) return moe8_jv_getattr(c, n, obj, key->u.s, key->n, out);
    *out = moe8_jv_undef_attr(obj, n, NULL, 0, JU_ELEMENT);
    out->u.i = key->t == JV_INT ? key->u.i : 0;
    return 0;
}


/* ---- global functions ------------------------------------------------------------------- */

static const char *const FUNCS[JF_COUNT] = {
    [JF_RANGE] = "range", [JF_NAMESPACE] = "namespace", [JF_DICT] = "dict",
    [JF_RAISE] = "raise_exception", [JF_STRFTIME] = "strftime_now",
};

int moe8_jfunc_id(const char *name, size_t n) {
    for (int i = 0; i < JF_COUNT; i++)
        if (strlen(FUNCS[i]) == n && !memcmp(FUNCS[i], name, n)) return i;
    return -1;
}

static int f_range(jctx *c, const jnode *n, const jargs *a, jv *out) {
    int64_t v[3] = {0, 0, 1}, len = 0;
    jlist *l;
    if (a->n_kw || a->n_pos < 1 || a->n_pos > 3) return moe8_jx_fail(c, n, "range takes 1 to 3 integer arguments");
    for (size_t i = 0; i < a->n_pos; i++)
        if (want_int(c, n, &a->pos[i], "a range argument", &v[a->n_pos == 1 ? 1 : i])) return -1;
    if (v[2] == 0) return moe8_jx_fail(c, n, "range() arg 3 must not be zero");
    if (v[2] > 0 && v[1] > v[0]) len = (int64_t)(((__int128)v[1] - v[0] + v[2] - 1) / v[2]);
    if (v[2] < 0 && v[1] < v[0]) len = (int64_t)(((__int128)v[0] - v[1] - v[2] - 1) / -(__int128)v[2]);
    if (len > MAX_RANGE)
        return moe8_jx_fail(c, n, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).", MAX_RANGE);
    if (!(l = moe8_jl_new(c, n, (size_t)len)) || moe8_jx_charge(c, n, (uint64_t)len / 8)) return -1;
    for (int64_t i = 0; i < len; i++) l->v[i] = jv_int(v[0] + i * v[2]);
    l->n = (size_t)len;
    *out = list_val(l, 0);
    return 0;
}

int moe8_jfunc_call(jctx *c, const jnode *n, int fn, const jargs *a, jv *out) {
    switch (fn) {
    case JF_RANGE: return f_range(c, n, a, out);
    case JF_NAMESPACE: case JF_DICT: {
        jdict *d = moe8_jd_new(c, n, a->n_kw);
        if (!d) return -1;
        if (a->n_pos > 1) return moe8_jx_fail(c, n, "%s takes at most one positional argument", FUNCS[fn]);
        if (a->n_pos) { /* namespace({...}) / dict({...}) */
            if (a->pos[0].t != JV_DICT) return moe8_jx_fail(c, n, "%s's argument must be a dict", FUNCS[fn]);
            for (size_t i = 0; i < a->pos[0].u.d->n; i++)
                if (moe8_jd_set(c, n, d, a->pos[0].u.d->k[i], a->pos[0].u.d->v[i])) return -1;
        }
        for (size_t i = 0; i < a->n_kw; i++)
            if (moe8_jd_set(c, n, d, jv_str(a->kw_name[i], a->kw_len[i]), a->kw[i])) return -1;
        out->t = fn == JF_DICT ? JV_DICT : JV_NS;
        out->flag = 0;
        out->u.d = d;
        return 0;
    }
    case JF_RAISE: {
        jv msg = jv_str("", 0);
        if (a->n_pos && moe8_jv_to_str(c, n, &a->pos[0], &msg)) return -1;
        moe8_fail(c->err, MOE8_ERR_INVALID_ARG, n ? (int64_t)n->pos : -1, "%s: %.*s", c->t->name,
                  (int)(msg.n > 400 ? 400 : msg.n), msg.u.s);
        c->failed = 1;
        return -1;
    }
    case JF_STRFTIME: {
        char fmt[256], buf[1024];
        time_t now = time(NULL);
        struct tm tm;
        size_t k;
        if (a->n_pos != 1 || a->pos[0].t != JV_STR || a->pos[0].n >= sizeof fmt)
            return moe8_jx_fail(c, n, "strftime_now takes one format string (under 256 bytes)");
        memcpy(fmt, a->pos[0].u.s, a->pos[0].n);
        fmt[a->pos[0].n] = '\0';
        localtime_r(&now, &tm);
        k = strftime(buf, sizeof buf, fmt, &tm);
        if (!(out->u.s = moe8_jx_strbuf(c, n, buf, k))) return -1;
        *out = jv_str(out->u.s, k);
        return 0;
    }
    }
    return moe8_jx_fail(c, n, "unknown function");
}
