/*
 * jinja_filters.c — what templates call: attribute and item lookup (jinja2's
 * getattr-then-getitem), the methods of str, dict, list and the loop object,
 * jinja2's filters and tests, and the global functions HF's environment has
 * (range, namespace, dict, raise_exception, strftime_now).
 *
 * Each follows Python 3 / jinja2 3.1 semantics, strings by code point:
 *   str methods   capitalize count endswith find index isalnum isalpha
 *                 isdigit islower isspace isupper join lower lstrip
 *                 removeprefix removesuffix replace rfind rindex rsplit rstrip
 *                 split splitlines startswith strip title upper
 *   dict methods  get items keys values      list methods  count index
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
 * Methods that would modify a container are refused as the immutable sandbox
 * refuses them. Not matched: case mappings are utf8proc's one-to-one ones
 * ('ß'.upper() stays 'ß'; Python gives 'SS'); `sameas` compares values, not
 * object identity; dict views, range() and reverse give lists; `safe` is
 * the identity (jinja2's Markup would HTML-escape a string added to it).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <utf8proc.h>

#include "jinja/jinja_impl.h"

#define MAX_RANGE 100000 /* jinja2's sandbox refuses bigger ranges too */

/* ---- arguments ------------------------------------------------------------------ */

/* Parameter k of a signature (positional index k or keyword params[k]). */
static const jv *arg(const jargs *a, size_t k, const char *const *params) {
    if (k < a->n_pos) return &a->pos[k];
    for (size_t i = 0; i < a->n_kw; i++)
        if (a->kw_len[i] == strlen(params[k]) && !memcmp(a->kw_name[i], params[k], a->kw_len[i]))
            return &a->kw[i];
    return NULL;
}

/* Arguments fit the signature params[] (NULL-terminated). */
static int check_sig(jctx *c, const jnode *n, const jargs *a, const char *const *params,
                     const char *what, const char *name) {
    size_t np = 0;
    while (params[np]) np++;
    if (a->n_pos > np)
        return jx_fail(c, n, "%s '%s' takes at most %zu argument%s (%zu given)", what, name, np,
                       np == 1 ? "" : "s", a->n_pos);
    for (size_t i = 0; i < a->n_kw; i++) {
        size_t k = 0;
        while (params[k] && !(strlen(params[k]) == a->kw_len[i] &&
                              !memcmp(params[k], a->kw_name[i], a->kw_len[i])))
            k++;
        if (!params[k])
            return jx_fail(c, n, "%s '%s' got an unexpected keyword argument '%.*s'", what, name,
                           (int)a->kw_len[i], a->kw_name[i]);
        if (k < a->n_pos)
            return jx_fail(c, n, "%s '%s' got multiple values for argument '%s'", what, name,
                           params[k]);
    }
    return 0;
}

static int want_str(jctx *c, const jnode *n, const jv *v, const char *what) {
    if (v->t == JV_STR) return 0;
    if (v->t == JV_UNDEF) return jx_undefined(c, n, v);
    return jx_fail(c, n, "%s must be a string, not %s", what, jv_type_name(v));
}

static int want_int(jctx *c, const jnode *n, const jv *v, const char *what, int64_t *out) {
    if (v->t == JV_INT) *out = v->u.i;
    else if (v->t == JV_BOOL) *out = v->u.b;
    else if (v->t == JV_UNDEF) return jx_undefined(c, n, v);
    else return jx_fail(c, n, "%s must be an integer, not %s", what, jv_type_name(v));
    return 0;
}

static int is_none_or_undef(const jv *v) { return !v || v->t == JV_NONE || v->t == JV_UNDEF; }

static jv list_val(jlist *l, int tuple) {
    jv v = {JV_LIST, (uint8_t)tuple, 0, 0, 0, {0}};
    v.u.l = l;
    return v;
}

/* ---- string helpers ----------------------------------------------------------------- */

/* A string of cap bytes being built, as a value when done. */
typedef struct {
    char *p;
    size_t n, cap;
} sb;

static int sb_init(jctx *c, const jnode *n, sb *b, size_t cap) {
    b->n = 0;
    b->cap = cap;
    return (b->p = jx_strbuf(c, n, NULL, cap ? cap : 1)) ? 0 : -1;
}
static void sb_put(sb *b, const char *s, size_t len) {
    memcpy(b->p + b->n, s, len);
    b->n += len;
}
static void sb_cp(sb *b, uint32_t cp) { b->n += ju_put(b->p + b->n, cp); }
static jv sb_val(sb *b) { return jv_str(b->p, b->n); }

/* Map every code point of s through f (all utf8proc mappings are one-to-one
 * and at most 4 bytes). */
static int map_cps(jctx *c, const jnode *n, const jv *s, uint32_t (*f)(uint32_t, void *), void *st,
                   jv *out) {
    sb b;
    if (sb_init(c, n, &b, s->n + 8)) return -1;
    for (size_t i = 0; i < s->n;) {
        uint32_t cp = f(ju_next(s->u.s, s->n, &i), st);
        if (b.n + 4 > b.cap) { /* grow: a mapping may lengthen a character */
            char *p = jx_strbuf(c, n, NULL, 2 * b.cap + 8);
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
                               ju_isspace(cp);
    uint32_t r = sep ? cp : *after_sep ? (uint32_t)utf8proc_toupper((utf8proc_int32_t)cp)
                                       : (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp);
    *after_sep = sep;
    return r;
}

/* Characters to strip: chars NULL/None = whitespace. */
static int in_chars(const jv *chars, uint32_t cp) {
    if (is_none_or_undef(chars)) return ju_isspace(cp);
    for (size_t i = 0; i < chars->n;)
        if (ju_next(chars->u.s, chars->n, &i) == cp) return 1;
    return 0;
}

/* strip/lstrip/rstrip: which = 1 left, 2 right, 3 both. */
static int do_strip(jctx *c, const jnode *n, const jv *s, const jv *chars, int which, jv *out) {
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

static const char *find_sub(const char *h, size_t hn, const char *nd, size_t nn) {
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
    return jl_push(c, n, l, jv_str(s, len));
}

/* str.split / str.rsplit (right = 1). */
static int do_split(jctx *c, const jnode *n, const jv *s, const jv *sep, const jv *maxv, int right,
                    jv *out) {
    int64_t max = -1;
    jlist *l = jl_new(c, n, 4);
    const char *p = s->u.s;
    size_t len = s->n;
    if (!l || (maxv && !is_none_or_undef(maxv) && want_int(c, n, maxv, "maxsplit", &max))) return -1;
    if (!is_none_or_undef(sep)) {
        if (want_str(c, n, sep, "the separator")) return -1;
        if (sep->n == 0) return jx_fail(c, n, "empty separator");
        if (!right) {
            size_t i = 0;
            for (int64_t k = 0; max < 0 || k < max; k++) {
                const char *hit = find_sub(p + i, len - i, sep->u.s, sep->n);
                if (!hit) break;
                if (push_str(c, n, l, p + i, (size_t)(hit - p) - i)) return -1;
                i = (size_t)(hit - p) + sep->n;
            }
            if (push_str(c, n, l, p + i, len - i)) return -1;
        } else {
            size_t e = len;
            jlist *r = jl_new(c, n, 4);
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
                if (jl_push(c, n, l, r->v[k])) return -1;
        }
    } else if (!right) { /* runs of whitespace */
        size_t i = 0;
        int64_t k = 0;
        for (;;) {
            size_t j = i;
            while (i < len && (j = i, ju_isspace(ju_next(p, len, &j)))) i = j;
            if (i >= len) break;
            if (max >= 0 && k == max) {
                if (push_str(c, n, l, p + i, len - i)) return -1;
                break;
            }
            size_t start = i;
            while (i < len && (j = i, !ju_isspace(ju_next(p, len, &j)))) i = j;
            if (push_str(c, n, l, p + start, i - start)) return -1;
            k++;
        }
    } else {
        size_t e = len;
        int64_t k = 0;
        jlist *r = jl_new(c, n, 4);
        if (!r) return -1;
        for (;;) {
            jv piece;
            while (e > 0) { /* skip whitespace from the right */
                size_t j = e - 1, t;
                while (j > 0 && ((unsigned char)p[j] & 0xc0) == 0x80) j--;
                t = j;
                if (!ju_isspace(ju_next(p, len, &t))) break;
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
                if (ju_isspace(ju_next(p, len, &t))) break;
                b = j;
            }
            piece = jv_str(p + b, e - b);
            if (jl_push(c, n, r, piece)) return -1;
            e = b;
            k++;
        }
        for (size_t q = r->n; q-- > 0;)
            if (jl_push(c, n, l, r->v[q])) return -1;
    }
    *out = list_val(l, 0);
    return 0;
}

/* str.splitlines(): \n \r \r\n \v \f \x1c-\x1e \x85 \u2028 \u2029 end lines. */
static int do_splitlines(jctx *c, const jnode *n, const jv *s, jv *out) {
    jlist *l = jl_new(c, n, 4);
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

static int do_replace(jctx *c, const jnode *n, const jv *s, const jv *old, const jv *new_,
                      const jv *countv, jv *out) {
    int64_t count = -1, k = 0, hits = 0;
    sb b;
    size_t i = 0, need;
    if (want_str(c, n, old, "replace's old") || want_str(c, n, new_, "replace's new") ||
        (countv && !is_none_or_undef(countv) && want_int(c, n, countv, "replace's count", &count)))
        return -1;
    if (old->n == 0) { /* between every character, and at both ends */
        size_t m = ju_len(s->u.s, s->n);
        hits = count < 0 || count > (int64_t)m + 1 ? (int64_t)m + 1 : count;
    } else {
        for (const char *h = s->u.s; (count < 0 || hits < count) &&
             (h = find_sub(h, s->n - (size_t)(h - s->u.s), old->u.s, old->n)); h += old->n)
            hits++;
    }
    if (moe8_mul_size((size_t)hits, new_->n, &need) || moe8_add_size(need, s->n, &need) ||
        need > c->lim.max_output)
        return jx_fail(c, n, "replace would make a string over the %zu-byte limit", c->lim.max_output);
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
            const char *h = find_sub(s->u.s + i, s->n - i, old->u.s, old->n);
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
                 : ju_isspace(cp);
        if (!ok) return 0;
    }
    return 1;
}

/* islower/isupper: some cased character, and every cased one in that case. */
static int str_case(const jv *s, int upper) {
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
int jv_iterate(jctx *c, const jnode *n, const jv *v, const jlist **out) {
    jlist *l;
    switch (v->t) {
    case JV_LIST: *out = v->u.l; return 0;
    case JV_UNDEF: return !(*out = jl_new(c, n, 0));
    case JV_DICT: case JV_NS:
        if (!(l = jl_new(c, n, v->u.d->n))) return -1;
        for (size_t i = 0; i < v->u.d->n; i++) l->v[l->n++] = v->u.d->k[i];
        *out = l;
        return 0;
    case JV_STR:
        if (!(l = jl_new(c, n, v->n))) return -1;
        for (size_t i = 0; i < v->n;) {
            size_t s = i;
            ju_next(v->u.s, v->n, &i);
            l->v[l->n++] = jv_str(v->u.s + s, i - s);
        }
        *out = l;
        return 0;
    default:
        return jx_fail(c, n, "'%s' object is not iterable", jv_type_name(v));
    }
}

/* str.join(items) / the join filter: items turned to str. */
static int do_join(jctx *c, const jnode *n, const jv *sep, const jlist *items, jv *out) {
    jbuf b = {0};
    for (size_t i = 0; i < items->n; i++) {
        if (i && jbuf_add(c, n, &b, sep->u.s, sep->n)) return -1;
        if (jv_str_to(c, n, &b, &items->v[i])) return -1;
    }
    *out = jv_str(b.p ? b.p : "", b.n);
    return 0;
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

int jmethod_exists(const jv *obj, const char *name, size_t len, int *unsafe) {
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
        if (check_sig(c, n, a, p_chars, "method", name)) return -1;
        return do_strip(c, n, s, arg(a, 0, p_chars), m->name[0] == 'l' ? 1 : m->name[0] == 'r' ? 2 : 3,
                        out);
    }
    if (is_m(m, "split") || is_m(m, "rsplit")) {
        if (check_sig(c, n, a, p_split, "method", name)) return -1;
        return do_split(c, n, s, arg(a, 0, p_split), arg(a, 1, p_split), m->name[0] == 'r', out);
    }
    if (is_m(m, "startswith") || is_m(m, "endswith")) {
        const jv *x;
        int hit;
        if (check_sig(c, n, a, p_affix, "method", name)) return -1;
        if (!(x = arg(a, 0, p_affix))) return jx_fail(c, n, "%s takes one argument", name);
        if (affix_match(c, n, s, x, m->name[0] == 'e', &hit)) return -1;
        *out = jv_bool(hit);
        return 0;
    }
    if (is_m(m, "replace")) {
        if (check_sig(c, n, a, p_repl, "method", name)) return -1;
        if (!arg(a, 0, p_repl) || !arg(a, 1, p_repl)) return jx_fail(c, n, "%s takes 2 or 3 arguments", name);
        return do_replace(c, n, s, arg(a, 0, p_repl), arg(a, 1, p_repl), arg(a, 2, p_repl), out);
    }
    if (is_m(m, "upper") || is_m(m, "lower") || is_m(m, "title") || is_m(m, "capitalize")) {
        int st = m->name[0] == 'c';
        if (check_sig(c, n, a, p_none, "method", name)) return -1;
        return map_cps(c, n, s, is_m(m, "upper") ? cp_upper : is_m(m, "lower") ? cp_lower
                                : is_m(m, "title") ? cp_title : cp_capitalize, &st, out);
    }
    if (is_m(m, "find") || is_m(m, "rfind") || is_m(m, "index") || is_m(m, "rindex") || is_m(m, "count")) {
        const jv *x;
        if (check_sig(c, n, a, p_sub, "method", name)) return -1;
        if (!(x = arg(a, 0, p_sub)) || want_str(c, n, x, name)) return x ? -1 : jx_fail(c, n, "%s takes one argument", name);
        if (is_m(m, "count")) {
            int64_t k = 0;
            if (!x->n) k = (int64_t)ju_len(s->u.s, s->n) + 1;
            else
                for (const char *h = s->u.s; (h = find_sub(h, s->n - (size_t)(h - s->u.s), x->u.s, x->n)); h += x->n)
                    k++;
            *out = jv_int(k);
            return 0;
        }
        const char *h = m->name[0] == 'r' ? rfind_sub(s->u.s, s->n, x->u.s, x->n)
                                          : find_sub(s->u.s, s->n, x->u.s, x->n);
        if (!h && (is_m(m, "index") || is_m(m, "rindex"))) return jx_fail(c, n, "substring not found");
        *out = jv_int(h ? (int64_t)ju_len(s->u.s, (size_t)(h - s->u.s)) : -1);
        return 0;
    }
    if (is_m(m, "removeprefix") || is_m(m, "removesuffix")) {
        const jv *x;
        int end = m->name[6] == 's', hit;
        if (check_sig(c, n, a, p_affix, "method", name)) return -1;
        if (!(x = arg(a, 0, p_affix)) || want_str(c, n, x, name)) return x ? -1 : jx_fail(c, n, "%s takes one argument", name);
        hit = x->n <= s->n && !memcmp(s->u.s + (end ? s->n - x->n : 0), x->u.s, x->n);
        *out = hit ? jv_str(s->u.s + (end ? 0 : x->n), s->n - x->n) : *s;
        return 0;
    }
    if (is_m(m, "join")) {
        const jv *x;
        const jlist *items;
        if (check_sig(c, n, a, p_join, "method", name)) return -1;
        if (!(x = arg(a, 0, p_join))) return jx_fail(c, n, "%s takes one argument", name);
        if (jv_iterate(c, n, x, &items)) return -1;
        for (size_t i = 0; i < items->n; i++)
            if (items->v[i].t != JV_STR)
                return jx_fail(c, n, "sequence item %zu: expected str instance, %s found", i,
                               jv_type_name(&items->v[i]));
        return do_join(c, n, s, items, out);
    }
    if (is_m(m, "splitlines")) {
        if (check_sig(c, n, a, p_none, "method", name)) return -1;
        return do_splitlines(c, n, s, out);
    }
    if (is_m(m, "isdigit") || is_m(m, "isalpha") || is_m(m, "isalnum") || is_m(m, "isspace") ||
        is_m(m, "islower") || is_m(m, "isupper")) {
        if (check_sig(c, n, a, p_none, "method", name)) return -1;
        if (is_m(m, "islower") || is_m(m, "isupper")) *out = jv_bool(str_case(s, m->name[2] == 'u'));
        else *out = jv_bool(str_all(s, is_m(m, "isdigit") ? 'd' : is_m(m, "isalpha") ? 'a'
                                       : is_m(m, "isalnum") ? 'n' : 's'));
        return 0;
    }
    return jx_fail(c, n, "%s() is not supported", name);
}

int jmethod_call(jctx *c, const jnode *n, const jmethod *m, const jargs *a, jv *out) {
    static const char *const p_get[] = {"key", "default", NULL}, *const p_none[] = {NULL},
                             *const p_x[] = {"value", NULL};
    const jv *self = &m->self;
    char name[24];
    if (self->t == JV_STR) return str_method(c, n, m, a, out);
    snprintf(name, sizeof name, "%s.%.*s", jv_type_name(self), (int)(m->len > 12 ? 12 : m->len), m->name);
    if (self->t == JV_LOOP) { /* cycle(*values) */
        if (a->n_kw) return jx_fail(c, n, "loop.cycle takes no keyword arguments");
        if (!a->n_pos) return jx_fail(c, n, "no items for cycling given");
        *out = a->pos[self->u.loop->i % a->n_pos];
        return 0;
    }
    if (self->t == JV_DICT) {
        const jdict *d = self->u.d;
        if (is_m(m, "get")) {
            const jv *k, *v;
            if (check_sig(c, n, a, p_get, "method", name)) return -1;
            if (!(k = arg(a, 0, p_get))) return jx_fail(c, n, "dict.get takes 1 or 2 arguments");
            v = jd_get(c, d, k);
            *out = v ? *v : arg(a, 1, p_get) ? *arg(a, 1, p_get) : jv_none();
            return 0;
        }
        if (check_sig(c, n, a, p_none, "method", name)) return -1;
        if (is_m(m, "copy")) {
            *out = *self;
            return 0;
        }
        if (is_m(m, "keys") || is_m(m, "values") || is_m(m, "items")) {
            jlist *l = jl_new(c, n, d->n);
            if (!l) return -1;
            for (size_t i = 0; i < d->n; i++) {
                if (is_m(m, "keys")) l->v[i] = d->k[i];
                else if (is_m(m, "values")) l->v[i] = d->v[i];
                else {
                    jlist *pair = jl_new(c, n, 2);
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
            if (check_sig(c, n, a, p_none, "method", name)) return -1;
            *out = *self;
            return 0;
        }
        if (is_m(m, "count") || is_m(m, "index")) {
            const jv *x;
            int64_t k = 0;
            if (check_sig(c, n, a, p_x, "method", name)) return -1;
            if (!(x = arg(a, 0, p_x))) return jx_fail(c, n, "%s takes one argument", name);
            for (size_t i = 0; i < l->n; i++)
                if (jv_equal(c, &l->v[i], x)) {
                    if (is_m(m, "index")) {
                        *out = jv_int((int64_t)i);
                        return 0;
                    }
                    k++;
                }
            if (is_m(m, "index")) return jx_fail(c, n, "list.index(x): x not in list");
            *out = jv_int(k);
            return 0;
        }
    }
    return jx_fail(c, n, "%s() is not supported", name);
}

/* ---- attribute and item lookup --------------------------------------------------------- */

static jv undef_attr(const jv *obj, const jnode *n, const char *name, size_t len, int kind) {
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

int jv_getattr(jctx *c, const jnode *n, const jv *obj, const char *name, size_t len, jv *out) {
    int unsafe;
    if (obj->t == JV_UNDEF) return jx_undefined(c, n, obj);
    if (obj->t == JV_LOOP && loop_attr(c, n, obj->u.loop, name, len, out)) return 0;
    if (jmethod_exists(obj, name, len, &unsafe)) {
        jmethod *m;
        if (unsafe) {
            *out = undef_attr(obj, n, name, len, JU_UNSAFE);
            return 0;
        }
        if (!(m = jx_alloc(c, n, sizeof *m))) return -1;
        m->self = *obj;
        m->name = name;
        m->len = len;
        out->t = JV_METHOD;
        out->u.method = m;
        return 0;
    }
    if (obj->t == JV_DICT || obj->t == JV_NS) {
        const jv *v = jd_get_str(c, obj->u.d, name, len);
        if (v) {
            *out = *v;
            return 0;
        }
    }
    *out = undef_attr(obj, n, name, len, JU_ATTR);
    return 0;
}

int jv_getitem(jctx *c, const jnode *n, const jv *obj, const jv *key, jv *out) {
    if (obj->t == JV_UNDEF) return jx_undefined(c, n, obj);
    if ((obj->t == JV_LIST || obj->t == JV_STR) && (key->t == JV_INT || key->t == JV_BOOL)) {
        int64_t i = key->t == JV_INT ? key->u.i : key->u.b;
        size_t len = obj->t == JV_LIST ? obj->u.l->n : ju_len(obj->u.s, obj->n);
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
        jv u = undef_attr(obj, n, NULL, 0, JU_ELEMENT);
        u.u.i = key->t == JV_INT ? key->u.i : key->u.b;
        *out = u;
        return 0;
    }
    if (obj->t == JV_DICT) {
        const jv *v = jd_get(c, obj->u.d, key);
        if (v) {
            *out = *v;
            return 0;
        }
    }
    if (key->t == JV_STR) return jv_getattr(c, n, obj, key->u.s, key->n, out);
    *out = undef_attr(obj, n, NULL, 0, JU_ELEMENT);
    out->u.i = key->t == JV_INT ? key->u.i : 0;
    return 0;
}

/* ---- sorting (stable, Python's key semantics) ---------------------------------------- */

typedef struct {
    jv key, val;
} keyed;

/* key of an item: attribute path and/or lower-cased strings. */
static int attr_path(jctx *c, const jnode *n, const jv *item, const jv *attr, jv *out) {
    *out = *item;
    if (is_none_or_undef(attr)) return 0;
    if (attr->t == JV_INT) return jv_getitem(c, n, item, attr, out);
    if (want_str(c, n, attr, "attribute")) return -1;
    for (size_t i = 0; i <= attr->n;) { /* dotted parts; an all-digit part is an index */
        size_t j = i;
        while (j < attr->n && attr->u.s[j] != '.') j++;
        jv part = jv_str(attr->u.s + i, j - i), cur = *out;
        int digits = j > i;
        for (size_t k = i; k < j; k++) digits &= attr->u.s[k] >= '0' && attr->u.s[k] <= '9';
        if (digits && j - i < 18) part = jv_int(strtoll(part.u.s, NULL, 10));
        if (jv_getitem(c, n, &cur, &part, out)) return -1;
        i = j + 1;
    }
    return 0;
}

static int sort_key(jctx *c, const jnode *n, const jv *item, const jv *attr, int case_sensitive,
                    jv *out) {
    int st = 0;
    if (attr_path(c, n, item, attr, out)) return -1;
    if (!case_sensitive && out->t == JV_STR) return map_cps(c, n, out, cp_lower, &st, out);
    return 0;
}

static int merge_sort(jctx *c, const jnode *n, keyed *v, keyed *tmp, size_t len, int reverse) {
    size_t h = len / 2, i = 0, j = h, k = 0;
    if (len < 2) return 0;
    if (merge_sort(c, n, v, tmp, h, reverse) || merge_sort(c, n, v + h, tmp, len - h, reverse)) return -1;
    while (i < h && j < len) {
        int lt;
        /* take the right one only when it is strictly before the left: stable */
        if (reverse ? jv_less(c, n, &v[i].key, &v[j].key, &lt) : jv_less(c, n, &v[j].key, &v[i].key, &lt))
            return -1;
        tmp[k++] = lt ? v[j++] : v[i++];
    }
    while (i < h) tmp[k++] = v[i++];
    while (j < len) tmp[k++] = v[j++];
    memcpy(v, tmp, len * sizeof *v);
    return jx_charge(c, n, len / 16);
}

static int sorted(jctx *c, const jnode *n, const jlist *items, const jv *attr, int case_sensitive,
                  int reverse, jlist **out) {
    keyed *v = jx_alloc(c, n, (items->n + 1) * sizeof *v), *tmp = jx_alloc(c, n, (items->n + 1) * sizeof *v);
    jlist *l = jl_new(c, n, items->n);
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

int jfilter_id(const char *name, size_t n) {
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
    return jv_to_str(c, n, in, out);
}

static int f_tojson(jctx *c, const jnode *n, const jv *in, const jargs *a, jv *out) {
    const char *const *p = FILTERS[F_TOJSON].params;
    const jv *ea = arg(a, 0, p), *ind = arg(a, 1, p), *sep = arg(a, 2, p), *sk = arg(a, 3, p);
    jjson_opts o = {0};
    char spaces[64];
    jbuf b = {0};
    o.ensure_ascii = ea && jv_truthy(ea);
    o.sort_keys = sk && jv_truthy(sk);
    if (ind && ind->t != JV_NONE) {
        int64_t w;
        if (ind->t == JV_STR) {
            o.indent = ind->u.s, o.indent_n = ind->n;
        } else {
            if (want_int(c, n, ind, "tojson's indent", &w)) return -1;
            if (w > 32) return jx_fail(c, n, "tojson's indent of %lld is over the supported 32", (long long)w);
            memset(spaces, ' ', sizeof spaces);
            o.indent = spaces, o.indent_n = w > 0 ? (size_t)w : 0;
        }
    }
    o.item_sep = o.indent ? "," : ", ", o.item_sep_n = o.indent ? 1 : 2;
    o.key_sep = ": ", o.key_sep_n = 2;
    if (sep && sep->t != JV_NONE) {
        if (sep->t != JV_LIST || sep->u.l->n != 2 || sep->u.l->v[0].t != JV_STR || sep->u.l->v[1].t != JV_STR)
            return jx_fail(c, n, "tojson's separators must be a pair of strings");
        o.item_sep = sep->u.l->v[0].u.s, o.item_sep_n = sep->u.l->v[0].n;
        o.key_sep = sep->u.l->v[1].u.s, o.key_sep_n = sep->u.l->v[1].n;
    }
    if (jv_json_to(c, n, &b, in, &o, 0)) return -1;
    *out = jv_str(b.p ? b.p : "", b.n);
    return 0;
}

/* Python's int(str, base) after jinja2's do_int: whitespace and underscores
 * allowed, then float() as the fallback. 0 on success. */
static int parse_int_text(const jv *s, int64_t base, int64_t *out) {
    char tmp[96], *end;
    size_t k = 0, i = 0, e = s->n;
    while (i < e && ju_isspace((unsigned char)s->u.s[i])) i++;
    while (e > i && ju_isspace((unsigned char)s->u.s[e - 1])) e--;
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
    while (i < e && ju_isspace((unsigned char)s->u.s[i])) i++;
    while (e > i && ju_isspace((unsigned char)s->u.s[e - 1])) e--;
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
    if (in->t == JV_UNDEF) return jx_undefined(c, n, in);
    if (in->t != JV_INT && in->t != JV_BOOL && in->t != JV_FLOAT)
        return jx_fail(c, n, "round needs a number, not %s", jv_type_name(in));
    if (prec > 300 || prec < -300) return jx_fail(c, n, "round's precision %lld is out of range", (long long)prec);
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
    else return jx_fail(c, n, "method must be common, ceil or floor");
    return 0;
}

static int f_indent(jctx *c, const jnode *n, const jv *in, const jargs *a, jv *out) {
    const char *const *p = FILTERS[F_INDENT].params;
    const jv *wv = arg(a, 0, p), *fv = arg(a, 1, p), *bv = arg(a, 2, p);
    jv s, lines, ind = jv_str("    ", 4);
    jbuf b = {0};
    int64_t w = 4;
    char *sp;
    if (want_str(c, n, in, "indent's value")) return -1; /* jinja2 appends "\n" to it: a str only */
    s = *in;
    if (wv && wv->t == JV_STR) ind = *wv;
    else if (wv) {
        if (want_int(c, n, wv, "indent's width", &w)) return -1;
        if (w < 0) w = 0;
        if ((size_t)w > c->lim.max_output) return jx_fail(c, n, "indent width %lld is too large", (long long)w);
        if (!(sp = jx_strbuf(c, n, NULL, (size_t)w + 1))) return -1;
        memset(sp, ' ', (size_t)w);
        ind = jv_str(sp, (size_t)w);
    }
    /* s + "\n", split into lines: jinja2's quirk that keeps a trailing empty line */
    char *t = jx_strbuf(c, n, NULL, s.n + 1);
    if (!t) return -1;
    memcpy(t, s.u.s, s.n);
    t[s.n] = '\n';
    jv s2 = jv_str(t, s.n + 1);
    if (do_splitlines(c, n, &s2, &lines)) return -1;
    const jlist *l = lines.u.l;
    for (size_t i = 0; i < l->n; i++) {
        const jv *line = &l->v[i];
        if (i && jbuf_add(c, n, &b, "\n", 1)) return -1;
        if (((i == 0 && fv && jv_truthy(fv)) || (i > 0 && (line->n || (bv && jv_truthy(bv))))) &&
            jbuf_add(c, n, &b, ind.u.s, ind.n))
            return -1;
        if (jbuf_add(c, n, &b, line->u.s, line->n)) return -1;
    }
    *out = jv_str(b.p ? b.p : "", b.n);
    return 0;
}

/* map / select / reject / selectattr / rejectattr. */
static int f_seq(jctx *c, const jnode *n, int id, const jv *in, const jargs *a, jv *out) {
    const jlist *items;
    jlist *l;
    jargs rest = {0};
    const jv *attr = NULL, *name = NULL, *dflt = NULL;
    int by_attr = id == F_SELECTATTR || id == F_REJECTATTR;
    if (!jv_truthy(in)) { /* jinja2 iterates only a true value: none, 0, false give nothing */
        if (!(l = jl_new(c, n, 0))) return -1;
        *out = list_val(l, 0);
        return 0;
    }
    if (jv_iterate(c, n, in, &items) || !(l = jl_new(c, n, items->n))) return -1;
    if (id == F_MAP) {
        for (size_t i = 0; i < a->n_kw; i++) {
            if (a->kw_len[i] == 9 && !memcmp(a->kw_name[i], "attribute", 9)) attr = &a->kw[i];
            else if (a->kw_len[i] == 7 && !memcmp(a->kw_name[i], "default", 7)) dflt = &a->kw[i];
            else return jx_fail(c, n, "map got an unexpected keyword argument '%.*s'", (int)a->kw_len[i], a->kw_name[i]);
        }
        if (!attr) {
            if (!a->n_pos) return jx_fail(c, n, "map needs a filter name or attribute=");
            name = &a->pos[0];
            rest.pos = a->pos + 1, rest.n_pos = a->n_pos - 1;
        }
        for (size_t i = 0; i < items->n; i++) {
            jv v;
            if (attr) {
                if (attr_path(c, n, &items->v[i], attr, &v)) return -1;
                if (v.t == JV_UNDEF && dflt) v = *dflt;
            } else if (jx_filter_by_name(c, n, name, &items->v[i], &rest, &v)) {
                return -1;
            }
            l->v[l->n++] = v;
        }
        *out = list_val(l, 0);
        return 0;
    }
    if (a->n_kw) return jx_fail(c, n, "%s takes no keyword arguments", FILTERS[id].name);
    size_t k = 0;
    if (by_attr) {
        if (!a->n_pos) return jx_fail(c, n, "%s needs an attribute name", FILTERS[id].name);
        attr = &a->pos[k++];
    }
    if (k < a->n_pos) name = &a->pos[k++];
    rest.pos = a->pos + k, rest.n_pos = a->n_pos - k;
    for (size_t i = 0; i < items->n; i++) {
        jv v = items->v[i];
        int keep;
        if (attr && attr_path(c, n, &items->v[i], attr, &v)) return -1;
        if (name) {
            if (jx_test_by_name(c, n, name, &v, &rest, &keep)) return -1;
        } else {
            keep = jv_truthy(&v);
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
        if (in->t != JV_DICT) return jx_fail(c, n, "dictsort needs a dict, not %s", jv_type_name(in));
        if (by && want_str(c, n, by, "dictsort's by")) return -1;
        if (by && !(by->n == 3 && !memcmp(by->u.s, "key", 3))) {
            if (!(by->n == 5 && !memcmp(by->u.s, "value", 5)))
                return jx_fail(c, n, "You can only sort by either \"key\" or \"value\"");
            key_index = jv_int(1);
        }
        if (!(pairs = jl_new(c, n, in->u.d->n))) return -1;
        for (size_t i = 0; i < in->u.d->n; i++) {
            jlist *pair = jl_new(c, n, 2);
            if (!pair) return -1;
            pair->v[0] = in->u.d->k[i], pair->v[1] = in->u.d->v[i], pair->n = 2;
            pairs->v[pairs->n++] = list_val(pair, 1);
        }
        if (sorted(c, n, pairs, &key_index, cs && jv_truthy(cs), rev && jv_truthy(rev), &l)) return -1;
        *out = list_val(l, 0);
        return 0;
    }
    if (jv_iterate(c, n, in, &items)) return -1;
    if (id == F_SORT) {
        const jv *rev = arg(a, 0, p), *cs = arg(a, 1, p), *attr = arg(a, 2, p);
        if (sorted(c, n, items, attr, cs && jv_truthy(cs), rev && jv_truthy(rev), &l)) return -1;
        *out = list_val(l, 0);
        return 0;
    }
    const jv *cs = arg(a, 0, p), *attr = arg(a, 1, p);
    int case_sensitive = cs && jv_truthy(cs);
    if (id == F_UNIQUE) {
        jv *keys = jx_alloc(c, n, (items->n + 1) * sizeof *keys);
        if (!keys || !(l = jl_new(c, n, items->n))) return -1;
        for (size_t i = 0; i < items->n; i++) {
            jv k;
            int seen = 0;
            if (sort_key(c, n, &items->v[i], attr, case_sensitive, &k)) return -1;
            for (size_t j = 0; j < l->n && !seen; j++) seen = jv_equal(c, &keys[j], &k);
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
        if (id == F_MIN ? jv_less(c, n, &k, &best_key, &lt) : jv_less(c, n, &best_key, &k, &lt)) return -1;
        if (lt) best = i, best_key = k;
    }
    *out = items->v[best];
    return 0;
}

static int f_length(jctx *c, const jnode *n, const jv *in, jv *out) {
    switch (in->t) {
    case JV_UNDEF: *out = jv_int(0); return 0;
    case JV_STR: *out = jv_int((int64_t)ju_len(in->u.s, in->n)); return 0;
    case JV_LIST: *out = jv_int((int64_t)in->u.l->n); return 0;
    case JV_DICT: *out = jv_int((int64_t)in->u.d->n); return 0;
    default: return jx_fail(c, n, "object of type '%s' has no len()", jv_type_name(in));
    }
}

/* abs, float, int, sum. */
static int f_number(jctx *c, const jnode *n, int id, const jv *in, const jargs *a, jv *out) {
    const char *const *p = FILTERS[id].params;
    if (id == F_ABS) {
        if (in->t == JV_INT) {
            if (in->u.i == INT64_MIN) return jx_fail(c, n, "integer overflow in abs");
            *out = jv_int(in->u.i < 0 ? -in->u.i : in->u.i);
        } else if (in->t == JV_BOOL) *out = jv_int(in->u.b);
        else if (in->t == JV_FLOAT) *out = jv_float(fabs(in->u.f));
        else if (in->t == JV_UNDEF) return jx_undefined(c, n, in);
        else return jx_fail(c, n, "bad operand type for abs(): '%s'", jv_type_name(in));
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
            return jx_fail(c, n, "int's base %lld is not supported (2, 8, 10 or 16)", (long long)base);
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
    if (jv_iterate(c, n, in, &items)) return -1;
    for (size_t i = 0; i < items->n; i++) {
        jv v, r;
        if (attr_path(c, n, &items->v[i], attr, &v)) return -1;
        int ai = acc.t == JV_INT || acc.t == JV_BOOL, vi = v.t == JV_INT || v.t == JV_BOOL;
        if (ai && vi) {
            int64_t x = acc.t == JV_INT ? acc.u.i : acc.u.b, y = v.t == JV_INT ? v.u.i : v.u.b, z;
            if (__builtin_add_overflow(x, y, &z)) return jx_fail(c, n, "integer overflow in sum");
            r = jv_int(z);
        } else if ((ai || acc.t == JV_FLOAT) && (vi || v.t == JV_FLOAT)) {
            double x = acc.t == JV_FLOAT ? acc.u.f : (double)(acc.t == JV_INT ? acc.u.i : acc.u.b);
            double y = v.t == JV_FLOAT ? v.u.f : (double)(v.t == JV_INT ? v.u.i : v.u.b);
            r = jv_float(x + y);
        } else {
            return jx_fail(c, n, "unsupported operand type(s) for +: '%s' and '%s'", jv_type_name(&acc),
                           jv_type_name(&v));
        }
        acc = r;
    }
    *out = acc;
    return 0;
}

int jfilter_apply(jctx *c, const jnode *n, int id, const jv *in, const jargs *a, jv *out) {
    const char *const *p = FILTERS[id].params;
    jv s;
    int st;
    if (id < 0 || id >= F_COUNT_) return jx_fail(c, n, "internal error: filter %d", id);
    if (id != F_MAP && id != F_SELECT && id != F_REJECT && id != F_SELECTATTR && id != F_REJECTATTR &&
        check_sig(c, n, a, p, "filter", FILTERS[id].name))
        return -1;
    switch (id) {
    case F_D: case F_DEFAULT: {
        const jv *d = arg(a, 0, p), *b = arg(a, 1, p);
        int use = in->t == JV_UNDEF || (b && jv_truthy(b) && !jv_truthy(in));
        *out = use ? (d ? *d : jv_str("", 0)) : *in;
        return 0;
    }
    case F_ATTR: { /* Python's getattr only: a dict's keys are not its attributes */
        const jv *name = arg(a, 0, p);
        int unsafe;
        if (!name || want_str(c, n, name, "attr's name")) return name ? -1 : jx_fail(c, n, "attr needs a name");
        if (in->t == JV_DICT && !jmethod_exists(in, name->u.s, name->n, &unsafe)) {
            *out = undef_attr(in, n, name->u.s, name->n, JU_ATTR);
            return 0;
        }
        return jv_getattr(c, n, in, name->u.s, name->n, out);
    }
    case F_LENGTH: case F_COUNT: return f_length(c, n, in, out);
    case F_STRING: return as_text(c, n, in, out);
    case F_SAFE: *out = *in; return 0;
    case F_TRIM:
        if (as_text(c, n, in, &s)) return -1;
        return do_strip(c, n, &s, arg(a, 0, p), 3, out);
    case F_UPPER: case F_LOWER: case F_CAPITALIZE: case F_TITLE:
        st = 1;
        if (as_text(c, n, in, &s)) return -1;
        return map_cps(c, n, &s, id == F_UPPER ? cp_upper : id == F_LOWER ? cp_lower
                                 : id == F_CAPITALIZE ? cp_capitalize : cp_jtitle, &st, out);
    case F_REPLACE: {
        const jv *o = arg(a, 0, p), *nw = arg(a, 1, p);
        if (!o || !nw) return jx_fail(c, n, "replace needs old and new");
        if (as_text(c, n, in, &s)) return -1;
        return do_replace(c, n, &s, o, nw, arg(a, 2, p), out);
    }
    case F_WORDCOUNT: {
        int64_t k = 0;
        int in_word = 0;
        if (as_text(c, n, in, &s)) return -1;
        for (size_t i = 0; i < s.n;) { /* \w+ runs: letters, digits, marks, underscore */
            uint32_t cp = ju_next(s.u.s, s.n, &i);
            utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)cp);
            int w = cp == '_' || (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_NO);
            if (w && !in_word) k++;
            in_word = w;
        }
        *out = jv_int(k);
        return 0;
    }
    case F_INDENT: return f_indent(c, n, in, a, out);
    case F_TOJSON: return f_tojson(c, n, in, a, out);
    case F_JOIN: {
        const jv *d = arg(a, 0, p), *attr = arg(a, 1, p);
        const jlist *items;
        jv sep = jv_str("", 0);
        if (d && d->t != JV_UNDEF && jv_to_str(c, n, d, &sep)) return -1;
        if (jv_iterate(c, n, in, &items)) return -1;
        if (attr) {
            jlist *l = jl_new(c, n, items->n);
            if (!l) return -1;
            for (size_t i = 0; i < items->n; i++)
                if (attr_path(c, n, &items->v[i], attr, &l->v[l->n++])) return -1;
            items = l;
        }
        return do_join(c, n, &sep, items, out);
    }
    case F_FIRST: case F_LAST: {
        const jlist *items;
        if (in->t == JV_UNDEF) return jx_undefined(c, n, in);
        if (jv_iterate(c, n, in, &items)) return -1;
        if (!items->n) {
            *out = jv_undef("No first item, sequence was empty.", 34);
            out->flag = JU_EMPTY;
            return 0;
        }
        *out = items->v[id == F_FIRST ? 0 : items->n - 1];
        return 0;
    }
    case F_LIST: case F_REVERSE: {
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
        if (jv_iterate(c, n, in, &items) || !(l = jl_new(c, n, items->n))) return -1;
        for (size_t i = 0; i < items->n; i++) l->v[i] = items->v[id == F_LIST ? i : items->n - 1 - i];
        l->n = items->n;
        *out = list_val(l, 0);
        return 0;
    }
    case F_ITEMS: {
        jmethod m = {*in, "items", 5};
        jargs none = {0};
        if (in->t == JV_UNDEF) return !(out->u.l = jl_new(c, n, 0)) ? -1 : (*out = list_val(out->u.l, 0), 0);
        if (in->t != JV_DICT) return jx_fail(c, n, "items needs a mapping, not %s", jv_type_name(in));
        return jmethod_call(c, n, &m, &none, out);
    }
    case F_MAP: case F_SELECT: case F_REJECT: case F_SELECTATTR: case F_REJECTATTR:
        return f_seq(c, n, id, in, a, out);
    case F_SORT: case F_DICTSORT: case F_UNIQUE: case F_MIN: case F_MAX:
        return f_order(c, n, id, in, a, out);
    case F_ROUND: return f_round(c, n, in, a, out);
    case F_ABS: case F_FLOAT: case F_INT: case F_SUM: return f_number(c, n, id, in, a, out);
    }
    return jx_fail(c, n, "internal error: filter %d is not implemented", id);
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

int jtest_id(const char *name, size_t n) {
    for (size_t i = 0; i < sizeof TESTS / sizeof *TESTS; i++)
        if (strlen(TESTS[i].name) == n && !memcmp(TESTS[i].name, name, n)) return TESTS[i].id;
    return -1;
}

/* Python's x % m for numbers (the sign of m), as odd/even/divisibleby use it. */
static int num_mod(jctx *c, const jnode *n, const jv *x, const jv *m, double *out) {
    double a, b, r;
    if (x->t == JV_UNDEF) return jx_undefined(c, n, x);
    if ((x->t != JV_INT && x->t != JV_BOOL && x->t != JV_FLOAT) || (m->t != JV_INT && m->t != JV_BOOL && m->t != JV_FLOAT))
        return jx_fail(c, n, "this test needs numbers, not %s and %s", jv_type_name(x), jv_type_name(m));
    a = x->t == JV_FLOAT ? x->u.f : (double)(x->t == JV_INT ? x->u.i : x->u.b);
    b = m->t == JV_FLOAT ? m->u.f : (double)(m->t == JV_INT ? m->u.i : m->u.b);
    if (b == 0) return jx_fail(c, n, "integer division or modulo by zero");
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
    if (v->t == JV_UNDEF) return jx_undefined(c, n, v);
    return jx_fail(c, n, "this test needs an integer, not %s", jv_type_name(v));
}

int jtest_apply(jctx *c, const jnode *n, int id, const jv *in, const jargs *a, int *out) {
    int want = id == T_DIVISIBLEBY || (id >= T_EQ && id <= T_SAMEAS);
    const jv *x = a->n_pos ? &a->pos[0] : NULL;
    int64_t i, k;
    if (a->n_kw) return jx_fail(c, n, "tests take no keyword arguments");
    if (a->n_pos != (size_t)want)
        return jx_fail(c, n, "this test takes %d argument%s, %zu given", want, want ? "" : "s", a->n_pos);
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
        *out = str_case(&s, id == T_UPPER);
        return 0;
    }
    case T_ODD: case T_EVEN: case T_DIVISIBLEBY: {
        jv two = jv_int(2);
        double r = 0;
        if ((in->t == JV_INT || in->t == JV_BOOL) && (id != T_DIVISIBLEBY || x->t == JV_INT || x->t == JV_BOOL)) {
            if (int_of(c, n, in, &i) || (id == T_DIVISIBLEBY && int_of(c, n, x, &k))) return -1;
            if (id != T_DIVISIBLEBY) k = 2;
            if (k == 0) return jx_fail(c, n, "integer division or modulo by zero");
            int64_t m = k == -1 ? 0 : i % k;
            if (m != 0 && ((m < 0) != (k < 0))) m += k;
            *out = id == T_ODD ? m == 1 : m == 0;
            return 0;
        }
        if (num_mod(c, n, in, id == T_DIVISIBLEBY ? x : &two, &r)) return -1;
        *out = id == T_ODD ? r == 1 : r == 0;
        return 0;
    }
    case T_EQ: *out = jv_equal(c, in, x); return 0;
    case T_NE: *out = !jv_equal(c, in, x); return 0;
    case T_LT: return jv_less(c, n, in, x, out);
    case T_GT: return jv_less(c, n, x, in, out);
    case T_LE: case T_GE: {
        int lt;
        if (id == T_LE ? jv_less(c, n, x, in, &lt) : jv_less(c, n, in, x, &lt)) return -1;
        *out = !lt;
        return 0;
    }
    case T_IN: {
        const jlist *items;
        if (x->t == JV_STR) {
            if (want_str(c, n, in, "the left side of 'in <string>'")) return -1;
            *out = find_sub(x->u.s, x->n, in->u.s, in->n) != NULL;
            return 0;
        }
        if (x->t == JV_DICT) {
            *out = jd_get(c, x->u.d, in) != NULL;
            return 0;
        }
        if (jv_iterate(c, n, x, &items)) return -1;
        *out = 0;
        for (size_t j = 0; j < items->n && !*out; j++) *out = jv_equal(c, &items->v[j], in);
        return 0;
    }
    case T_SAMEAS: *out = in->t == x->t && jv_equal(c, in, x); return 0;
    case T_ESCAPED: *out = 0; return 0;
    }
    return jx_fail(c, n, "test not implemented");
}

int jx_filter_by_name(jctx *c, const jnode *n, const jv *name, const jv *in, const jargs *a,
                      jv *out) {
    int id;
    if (want_str(c, n, name, "a filter name")) return -1;
    if ((id = jfilter_id(name->u.s, name->n)) < 0)
        return jx_fail(c, n, "filter '%.*s' is not supported", (int)(name->n > 40 ? 40 : name->n), name->u.s);
    return jfilter_apply(c, n, id, in, a, out);
}

int jx_test_by_name(jctx *c, const jnode *n, const jv *name, const jv *in, const jargs *a, int *out) {
    int id;
    if (want_str(c, n, name, "a test name")) return -1;
    if ((id = jtest_id(name->u.s, name->n)) < 0)
        return jx_fail(c, n, "test '%.*s' is not supported", (int)(name->n > 40 ? 40 : name->n), name->u.s);
    return jtest_apply(c, n, id, in, a, out);
}

/* ---- global functions ------------------------------------------------------------------- */

static const char *const FUNCS[JF_COUNT] = {
    [JF_RANGE] = "range", [JF_NAMESPACE] = "namespace", [JF_DICT] = "dict",
    [JF_RAISE] = "raise_exception", [JF_STRFTIME] = "strftime_now",
};

int jfunc_id(const char *name, size_t n) {
    for (int i = 0; i < JF_COUNT; i++)
        if (strlen(FUNCS[i]) == n && !memcmp(FUNCS[i], name, n)) return i;
    return -1;
}

static int f_range(jctx *c, const jnode *n, const jargs *a, jv *out) {
    int64_t v[3] = {0, 0, 1}, len = 0;
    jlist *l;
    if (a->n_kw || a->n_pos < 1 || a->n_pos > 3) return jx_fail(c, n, "range takes 1 to 3 integer arguments");
    for (size_t i = 0; i < a->n_pos; i++)
        if (want_int(c, n, &a->pos[i], "a range argument", &v[a->n_pos == 1 ? 1 : i])) return -1;
    if (v[2] == 0) return jx_fail(c, n, "range() arg 3 must not be zero");
    if (v[2] > 0 && v[1] > v[0]) len = (int64_t)(((__int128)v[1] - v[0] + v[2] - 1) / v[2]);
    if (v[2] < 0 && v[1] < v[0]) len = (int64_t)(((__int128)v[0] - v[1] - v[2] - 1) / -(__int128)v[2]);
    if (len > MAX_RANGE)
        return jx_fail(c, n, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).", MAX_RANGE);
    if (!(l = jl_new(c, n, (size_t)len)) || jx_charge(c, n, (uint64_t)len / 8)) return -1;
    for (int64_t i = 0; i < len; i++) l->v[i] = jv_int(v[0] + i * v[2]);
    l->n = (size_t)len;
    *out = list_val(l, 0);
    return 0;
}

int jfunc_call(jctx *c, const jnode *n, int fn, const jargs *a, jv *out) {
    switch (fn) {
    case JF_RANGE: return f_range(c, n, a, out);
    case JF_NAMESPACE: case JF_DICT: {
        jdict *d = jd_new(c, n, a->n_kw);
        if (!d) return -1;
        if (a->n_pos > 1) return jx_fail(c, n, "%s takes at most one positional argument", FUNCS[fn]);
        if (a->n_pos) { /* namespace({...}) / dict({...}) */
            if (a->pos[0].t != JV_DICT) return jx_fail(c, n, "%s's argument must be a dict", FUNCS[fn]);
            for (size_t i = 0; i < a->pos[0].u.d->n; i++)
                if (jd_set(c, n, d, a->pos[0].u.d->k[i], a->pos[0].u.d->v[i])) return -1;
        }
        for (size_t i = 0; i < a->n_kw; i++)
            if (jd_set(c, n, d, jv_str(a->kw_name[i], a->kw_len[i]), a->kw[i])) return -1;
        out->t = fn == JF_DICT ? JV_DICT : JV_NS;
        out->flag = 0;
        out->u.d = d;
        return 0;
    }
    case JF_RAISE: {
        jv msg = jv_str("", 0);
        if (a->n_pos && jv_to_str(c, n, &a->pos[0], &msg)) return -1;
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
            return jx_fail(c, n, "strftime_now takes one format string (under 256 bytes)");
        memcpy(fmt, a->pos[0].u.s, a->pos[0].n);
        fmt[a->pos[0].n] = '\0';
        localtime_r(&now, &tm);
        k = strftime(buf, sizeof buf, fmt, &tm);
        if (!(out->u.s = jx_strbuf(c, n, buf, k))) return -1;
        *out = jv_str(out->u.s, k);
        return 0;
    }
    }
    return jx_fail(c, n, "unknown function");
}
