/*
 * jinja_call.h — what the filters and tests (jinja_filters.c) share with the
 * methods, lookups and global functions (jinja_methods.c): reading a call's
 * arguments, building a string value, and Python's str operations by code
 * point. Internal to jinja/.
 */
#ifndef MOE8_JINJA_CALL_H
#define MOE8_JINJA_CALL_H

#include <string.h>

#include "jinja/jinja_impl.h"

/* ---- arguments ------------------------------------------------------------ */

/* Parameter k of a signature (positional index k or keyword params[k]). */
static inline const jv *arg(const jargs *a, size_t k, const char *const *params) {
    if (k < a->n_pos) return &a->pos[k];
    for (size_t i = 0; i < a->n_kw; i++)
        if (a->kw_len[i] == strlen(params[k]) && !memcmp(a->kw_name[i], params[k], a->kw_len[i]))
            return &a->kw[i];
    return NULL;
}

/* Arguments fit the signature params[] (NULL-terminated); else the render
 * fails naming `what` ("filter", "method") and `name`. */
int moe8_jx_check_sig(jctx *c, const jnode *n, const jargs *a, const char *const *params,
                      const char *what, const char *name);

static inline int want_str(jctx *c, const jnode *n, const jv *v, const char *what) {
    if (v->t == JV_STR) return 0;
    if (v->t == JV_UNDEF) return moe8_jx_undefined(c, n, v);
    return moe8_jx_fail(c, n, "%s must be a string, not %s", what, moe8_jv_type_name(v));
}

static inline int want_int(jctx *c, const jnode *n, const jv *v, const char *what, int64_t *out) {
    if (v->t == JV_INT) *out = v->u.i;
    else if (v->t == JV_BOOL) *out = v->u.b;
    else if (v->t == JV_UNDEF) return moe8_jx_undefined(c, n, v);
    else return moe8_jx_fail(c, n, "%s must be an integer, not %s", what, moe8_jv_type_name(v));
    return 0;
}

static inline int is_none_or_undef(const jv *v) { return !v || v->t == JV_NONE || v->t == JV_UNDEF; }

static inline jv list_val(jlist *l, int tuple) {
    jv v = {JV_LIST, (uint8_t)tuple, 0, 0, 0, {0}};
    v.u.l = l;
    return v;
}

/* ---- a string of cap bytes being built, as a value when done -------------- */

typedef struct {
    char *p;
    size_t n, cap;
} sb;

static inline int sb_init(jctx *c, const jnode *n, sb *b, size_t cap) {
    b->n = 0;
    b->cap = cap;
    return (b->p = moe8_jx_strbuf(c, n, NULL, cap ? cap : 1)) ? 0 : -1;
}
static inline void sb_put(sb *b, const char *s, size_t len) {
    memcpy(b->p + b->n, s, len);
    b->n += len;
}
static inline void sb_cp(sb *b, uint32_t cp) { b->n += (size_t)moe8_utf8_encode(cp, b->p + b->n); }
static inline jv sb_val(sb *b) { return jv_str(b->p, b->n); }

/* ---- Python's str (jinja_methods.c) ---------------------------------------- */

/* Case mappings (utf8proc's one-to-one ones): str.upper, str.lower,
 * str.title, str.capitalize, and jinja2's title filter (words start after
 * [-\s({[<]). */
enum { JSTR_UPPER, JSTR_LOWER, JSTR_TITLE, JSTR_CAPITALIZE, JSTR_JTITLE };
int moe8_jstr_recase(jctx *c, const jnode *n, const jv *s, int how, jv *out);
/* strip/lstrip/rstrip (which = 1 left, 2 right, 3 both); chars NULL or None:
 * whitespace. */
int moe8_jstr_strip(jctx *c, const jnode *n, const jv *s, const jv *chars, int which, jv *out);
int moe8_jstr_splitlines(jctx *c, const jnode *n, const jv *s, jv *out);
/* str.replace(old, new[, count]) (countv NULL: all). */
int moe8_jstr_replace(jctx *c, const jnode *n, const jv *s, const jv *old, const jv *new_,
                      const jv *countv, jv *out);
/* sep.join(items), items turned to str. */
int moe8_jstr_join(jctx *c, const jnode *n, const jv *sep, const jlist *items, jv *out);
/* islower (upper 0) / isupper (upper 1). */
int moe8_jstr_cased(const jv *s, int upper);
/* The first nd[0..nn) in h[0..hn) (h itself for an empty nd), or NULL. */
const char *moe8_jstr_find(const char *h, size_t hn, const char *nd, size_t nn);

/* The undefined value of obj.name or obj[...] (kind JU_ATTR, JU_ELEMENT,
 * JU_UNSAFE), made at node n. */
jv moe8_jv_undef_attr(const jv *obj, const jnode *n, const char *name, size_t len, int kind);

#endif
