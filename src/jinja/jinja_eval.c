/*
 * jinja_eval.c — runs a parsed template (jinja_impl.h): statements write to
 * the output buffer, expressions give values, with jinja2's scoping and
 * Undefined rules.
 *
 * Scopes, as jinja2 3.1 behaves: each loop iteration runs in a fresh scope
 * whose parent is the scope around the loop (a {% set %} inside a loop never
 * leaks out, and each iteration starts from the outer values); the loop's
 * else body gets one too; {% if %} opens none; a macro body runs in a new
 * scope over the one it was defined in, seeing that scope as it is at call
 * time. Names resolve through the scopes, then the caller's variables, then
 * the global functions. namespace() objects are the only shared, mutable
 * values.
 *
 * Undefined: a missing name, attribute or item is an undefined value; it
 * prints as '', is false, iterates as nothing and has length 0; using it
 * otherwise (arithmetic, attribute of it, calling it, ordering) fails with
 * jinja2's message ("'x' is undefined", "'dict object' has no attribute 'y'").
 *
 * Bounded: every node and loop turn costs a step, copied bytes cost 1/64 of
 * one, values and the text being written come from an arena and buffers
 * under one byte limit, and nesting (including macro recursion) has a depth
 * limit: see jinja_limits.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja/jinja_impl.h"

jinja_limits moe8_jinja_limits_default(void) {
    jinja_limits l = {(size_t)16 << 20, (size_t)256 << 20, 20000000, 500};
    return l;
}

/* ---- failures, work, memory ---------------------------------------------------- */

/* The failure at source offset pos (-1: none). */
static int vfail(jctx *c, int64_t pos, const char *fmt, va_list ap) {
    char msg[MOE8_ERROR_MESSAGE_MAX];
    if (c->failed) return -1; /* the first failure is the one reported */
    c->failed = 1;
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (pos >= 0) {
        int line, col;
        moe8_jinja_line_col(c->t->src, c->t->len, (size_t)pos, &line, &col);
        moe8_fail(c->err, MOE8_ERR_INVALID_ARG, pos, "%s line %d, column %d: %s", c->t->name, line,
                  col, msg);
    } else {
        moe8_fail(c->err, MOE8_ERR_INVALID_ARG, -1, "%s: %s", c->t->name, msg);
    }
    return -1;
}

int moe8_jx_fail(jctx *c, const jnode *n, const char *fmt, ...) {
    va_list ap;
    int rc;
    va_start(ap, fmt);
    rc = vfail(c, n ? (int64_t)n->pos : -1, fmt, ap);
    va_end(ap);
    return rc;
}

static int fail_at(jctx *c, int64_t pos, const char *fmt, ...) MOE8_PRINTF(3, 4);
static int fail_at(jctx *c, int64_t pos, const char *fmt, ...) {
    va_list ap;
    int rc;
    va_start(ap, fmt);
    rc = vfail(c, pos, fmt, ap);
    va_end(ap);
    return rc;
}

int moe8_jx_charge(jctx *c, const jnode *n, uint64_t steps) {
    if (jx_spend(c, steps))
        return moe8_jx_fail(c, n, "rendering takes more than %llu steps (a loop that does not end?)",
                       (unsigned long long)c->lim.max_steps);
    return 0;
}

void *moe8_jx_alloc(jctx *c, const jnode *n, size_t bytes) {
    void *p = moe8_ja_alloc(&c->A, bytes);
    if (!p)
        moe8_jx_fail(c, n, "rendering needs more than %zu MiB of memory", c->lim.max_memory >> 20);
    return p;
}

char *moe8_jx_strbuf(jctx *c, const jnode *n, const char *s, size_t len) {
    char *p;
    if (len > c->lim.max_output) {
        moe8_jx_fail(c, n, "a string of %zu bytes is over the %zu-byte limit", len, c->lim.max_output);
        return NULL;
    }
    if (moe8_jx_charge(c, n, len / 64) || !(p = moe8_jx_alloc(c, n, len + 1))) return NULL;
    if (s) memcpy(p, s, len);
    p[len] = '\0';
    return p;
}

/* ---- byte buffers ----------------------------------------------------------------- */

static int out_of_memory(jctx *c, const jnode *n) {
    return moe8_jx_fail(c, n, "rendering needs more than %zu MiB of memory", c->lim.max_memory >> 20);
}

int moe8_jx_over_output(jctx *c, const jnode *n) {
    return moe8_jx_fail(c, n, "the rendered text is over the %zu-byte limit", c->lim.max_output);
}

int moe8_jbuf_add(jctx *c, const jnode *n, moe8_buf *b, const char *s, size_t len) {
    if (len > c->lim.max_output - b->n) return moe8_jx_over_output(c, n);
    if (b->n + len + 1 > b->cap) {
        size_t cap = 2 * b->cap > b->n + len + 64 ? 2 * b->cap : b->n + len + 64;
        size_t grow = cap - b->cap;
        if (c->A.total + grow > c->A.limit || moe8_buf_reserve(b, cap - 1)) return out_of_memory(c, n);
        c->A.total += grow; /* b->cap is cap now */
    }
    if (moe8_jx_charge(c, n, len / 64)) return -1;
    return moe8_buf_add(b, s, len) ? out_of_memory(c, n) : 0; /* room was made */
}

int moe8_jx_buf_wrote(jctx *c, const jnode *n, moe8_buf *b, size_t old_cap, int rc) {
    if (b->cap > old_cap) c->A.total += b->cap - old_cap;
    if (b->n > c->lim.max_output) return moe8_jx_over_output(c, n);
    return rc || c->A.total > c->A.limit ? out_of_memory(c, n) : 0;
}

int moe8_jx_buf_value(jctx *c, const jnode *n, moe8_buf *b, jv *out) {
    char *p = NULL;
    int rc = 0;
    *out = jv_str("", 0);
    if (b->n && !(p = moe8_jx_alloc(c, n, b->n + 1))) rc = -1;
    else if (p) *out = jv_str(memcpy(p, b->p, b->n + 1), b->n);
    moe8_jx_buf_free(c, b);
    return rc;
}

void moe8_jx_buf_free(jctx *c, moe8_buf *b) {
    c->A.total -= b->cap;
    moe8_buf_free(b);
}

static const char *type_name_of(uint8_t t) {
    jv v = {t, 0, 0, 0, 0, {0}};
    return moe8_jv_type_name(&v);
}

/* Using v: report it where it became undefined when known (the name, the
 * missing attribute), else at n. */
int moe8_jx_undefined(jctx *c, const jnode *n, const jv *v) {
    int len = (int)(v->n > 80 ? 80 : v->n);
    int64_t pos = v->at ? (int64_t)v->at - 1 : n ? (int64_t)n->pos : -1;
    switch (v->flag) {
    case JU_ATTR:
        return fail_at(c, pos, "'%s object' has no attribute '%.*s'", type_name_of(v->of), len, v->u.s);
    case JU_ELEMENT:
        return fail_at(c, pos, "'%s object' has no element %lld", type_name_of(v->of), (long long)v->u.i);
    case JU_UNSAFE:
        return fail_at(c, pos, "access to attribute '%.*s' of '%s' object is unsafe.", len, v->u.s,
                       type_name_of(v->of));
    case JU_EMPTY: return fail_at(c, pos, "%.*s", len, v->u.s);
    default: return fail_at(c, pos, "'%.*s' is undefined", len, v->u.s);
    }
}

/* ---- scopes ------------------------------------------------------------------------ */

typedef struct {
    const char *name;
    size_t len;
    jv v;
} jvar;

struct jscope {
    jscope *parent;
    jvar *v;
    size_t n, cap;
};

static jscope *scope_new(jctx *c, const jnode *n, jscope *parent) {
    jscope *s = moe8_jx_alloc(c, n, sizeof *s);
    if (!s) return NULL;
    memset(s, 0, sizeof *s);
    s->parent = parent;
    return s;
}

/* Set name in s; replace: look for it first (the caller's variables are
 * pushed without looking: the last of a repeated key wins on lookup). */
static int scope_put(jctx *c, const jnode *n, jscope *s, const char *name, size_t len, jv v,
                     int replace) {
    if (replace)
        for (size_t i = 0; i < s->n; i++)
            if (s->v[i].len == len && !memcmp(s->v[i].name, name, len)) {
                s->v[i].v = v;
                return 0;
            }
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 8;
        jvar *nv = moe8_jx_alloc(c, n, cap * sizeof *nv);
        if (!nv) return -1;
        if (s->n) memcpy(nv, s->v, s->n * sizeof *nv);
        s->v = nv;
        s->cap = cap;
    }
    s->v[s->n].name = name;
    s->v[s->n].len = len;
    s->v[s->n++].v = v;
    return 0;
}

static const jv *scope_find(jctx *c, const char *name, size_t len) {
    for (const jscope *s = c->scope; s; s = s->parent) {
        jx_spend(c, s->n / 8);
        for (size_t i = s->n; i-- > 0;)
            if (s->v[i].len == len && !memcmp(s->v[i].name, name, len)) return &s->v[i].v;
    }
    return NULL;
}

/* ---- expressions ------------------------------------------------------------------- */

static int eval(jctx *c, const jnode *n, jv *out);
static int exec(jctx *c, const jnode *n);

static int enter(jctx *c, const jnode *n) {
    if (moe8_jx_charge(c, n, 1)) return -1;
    if (++c->depth > c->lim.max_depth) {
        c->depth--;
        return moe8_jx_fail(c, n, "rendering nests deeper than %d (recursion?)", c->lim.max_depth);
    }
    return 0;
}

static jv list_of(jlist *l, int tuple) {
    jv v = {JV_LIST, (uint8_t)tuple, 0, 0, 0, {0}};
    v.u.l = l;
    return v;
}

static int eval_args(jctx *c, const jnode *n, jargs *a) {
    size_t n_kw = 0, k = 0;
    memset(a, 0, sizeof *a);
    for (uint32_t i = 0; i < n->n_kids; i++) n_kw += n->kids[i]->kind == N_KWARG;
    a->n_pos = n->n_kids - n_kw;
    a->n_kw = n_kw;
    if ((a->n_pos && !(a->pos = moe8_jx_alloc(c, n, a->n_pos * sizeof *a->pos))) ||
        (n_kw && (!(a->kw = moe8_jx_alloc(c, n, n_kw * sizeof *a->kw)) ||
                  !(a->kw_name = moe8_jx_alloc(c, n, n_kw * sizeof *a->kw_name)) ||
                  !(a->kw_len = moe8_jx_alloc(c, n, n_kw * sizeof *a->kw_len)))))
        return -1;
    for (uint32_t i = 0, p = 0; i < n->n_kids; i++) {
        const jnode *e = n->kids[i];
        if (e->kind == N_KWARG) {
            for (size_t j = 0; j < k; j++)
                if (a->kw_len[j] == e->lit.n && !memcmp(a->kw_name[j], e->lit.u.s, e->lit.n))
                    return moe8_jx_fail(c, e, "keyword argument '%.*s' repeated", (int)e->lit.n, e->lit.u.s);
            a->kw_name[k] = e->lit.u.s;
            a->kw_len[k] = e->lit.n;
            if (eval(c, e->a, &a->kw[k++])) return -1;
        } else if (eval(c, e, &a->pos[p++])) {
            return -1;
        }
    }
    return 0;
}

static int64_t ival(const jv *v) { return v->t == JV_BOOL ? v->u.b : v->u.i; }
static int is_int(const jv *v) { return v->t == JV_INT || v->t == JV_BOOL; }
static int is_num(const jv *v) { return is_int(v) || v->t == JV_FLOAT; }
static double fval(const jv *v) { return v->t == JV_FLOAT ? v->u.f : (double)ival(v); }

static int concat(jctx *c, const jnode *n, const jv *a, const jv *b, jv *out) {
    moe8_buf buf = {0};
    if (moe8_jv_str_to(c, n, &buf, a) || moe8_jv_str_to(c, n, &buf, b)) {
        moe8_jx_buf_free(c, &buf);
        return -1;
    }
    return moe8_jx_buf_value(c, n, &buf, out);
}

/* seq * k for a string or list. */
static int repeat(jctx *c, const jnode *n, const jv *seq, int64_t k, jv *out) {
    size_t unit = seq->t == JV_STR ? seq->n : seq->u.l->n * sizeof(jv), total;
    if (k < 0) k = 0;
    if (moe8_mul_size(unit, (size_t)k, &total) || total > c->lim.max_output)
        return moe8_jx_fail(c, n, "repeating %s %lld times is over the %zu-byte limit", moe8_jv_type_name(seq),
                       (long long)k, c->lim.max_output);
    if (seq->t == JV_STR) {
        char *p = moe8_jx_strbuf(c, n, NULL, total);
        if (!p) return -1;
        for (int64_t i = 0; i < k; i++) memcpy(p + (size_t)i * seq->n, seq->u.s, seq->n);
        *out = jv_str(p, total);
        return 0;
    }
    jlist *l = moe8_jl_new(c, n, (size_t)k * seq->u.l->n);
    if (!l || moe8_jx_charge(c, n, total / 64)) return -1;
    for (int64_t i = 0; i < k; i++)
        for (size_t j = 0; j < seq->u.l->n; j++) l->v[l->n++] = seq->u.l->v[j];
    *out = list_of(l, seq->flag);
    return 0;
}

static int type_error(jctx *c, const jnode *n, const char *op, const jv *a, const jv *b) {
    return moe8_jx_fail(c, n, "unsupported operand type(s) for %s: '%s' and '%s'", op, moe8_jv_type_name(a),
                   moe8_jv_type_name(b));
}

/* Python's // and % on floats (floor division, the sign of the divisor). */
static void float_divmod(double x, double y, double *div, double *mod) {
    double m = fmod(x, y), d = (x - m) / y;
    if (m != 0) {
        if ((y < 0) != (m < 0)) {
            m += y;
            d -= 1.0;
        }
    } else {
        m = copysign(0.0, y);
    }
    if (d != 0) {
        double f = floor(d);
        if (d - f > 0.5) f += 1.0;
        d = f;
    } else {
        d = copysign(0.0, x / y);
    }
    *div = d;
    *mod = m;
}

static int int_pow(jctx *c, const jnode *n, int64_t base, int64_t e, jv *out) {
    int64_t r = 1;
    while (e > 0) {
        if ((e & 1) && __builtin_mul_overflow(r, base, &r)) goto overflow;
        e >>= 1;
        if (e && __builtin_mul_overflow(base, base, &base)) goto overflow;
    }
    *out = jv_int(r);
    return 0;
overflow:
    return moe8_jx_fail(c, n, "integer overflow (Python's ints grow; moe8's are 64-bit)");
}

static int arith(jctx *c, const jnode *n, int op, const jv *a, const jv *b, jv *out) {
    static const char *const NAMES[] = {"+", "-", "*", "/", "//", "%", "**", "~"};
    int64_t r = 0;
    if (op == OP_CAT) return concat(c, n, a, b, out);
    if (a->t == JV_UNDEF) return moe8_jx_undefined(c, n, a);
    if (b->t == JV_UNDEF) return moe8_jx_undefined(c, n, b);
    if (is_int(a) && is_int(b) && op != OP_DIV && op != OP_POW) {
        int64_t x = ival(a), y = ival(b);
        int ovf = 0;
        switch (op) {
        case OP_ADD: ovf = __builtin_add_overflow(x, y, &r); break;
        case OP_SUB: ovf = __builtin_sub_overflow(x, y, &r); break;
        case OP_MUL: ovf = __builtin_mul_overflow(x, y, &r); break;
        case OP_FDIV: case OP_MOD:
            if (y == 0) return moe8_jx_fail(c, n, "integer division or modulo by zero");
            if (x == INT64_MIN && y == -1) {
                if (op == OP_MOD) r = 0;
                else ovf = 1;
                break;
            }
            r = op == OP_FDIV ? x / y - ((x % y != 0) && ((x < 0) != (y < 0))) : x % y;
            if (op == OP_MOD && r != 0 && ((r < 0) != (y < 0))) r += y;
            break;
        }
        if (ovf) return moe8_jx_fail(c, n, "integer overflow (Python's ints grow; moe8's are 64-bit)");
        *out = jv_int(r);
        return 0;
    }
    if (is_num(a) && is_num(b)) {
        double x = fval(a), y = fval(b), d, m;
        switch (op) {
        case OP_ADD: *out = jv_float(x + y); return 0;
        case OP_SUB: *out = jv_float(x - y); return 0;
        case OP_MUL: *out = jv_float(x * y); return 0;
        case OP_DIV:
            if (y == 0) return moe8_jx_fail(c, n, "division by zero");
            *out = jv_float(x / y);
            return 0;
        case OP_FDIV: case OP_MOD:
            if (y == 0) return moe8_jx_fail(c, n, "float floor division or modulo by zero");
            float_divmod(x, y, &d, &m);
            *out = jv_float(op == OP_FDIV ? d : m);
            return 0;
        case OP_POW:
            if (is_int(a) && is_int(b) && ival(b) >= 0) return int_pow(c, n, ival(a), ival(b), out);
            if (x == 0 && y < 0) return moe8_jx_fail(c, n, "0.0 cannot be raised to a negative power");
            if (x < 0 && y != floor(y)) return moe8_jx_fail(c, n, "a negative number to a fractional power is complex");
            *out = jv_float(pow(x, y));
            return 0;
        }
    }
    if (op == OP_ADD && a->t == JV_STR && b->t == JV_STR) {
        size_t len;
        char *p;
        if (moe8_add_size(a->n, b->n, &len) || !(p = moe8_jx_strbuf(c, n, NULL, len))) return -1;
        memcpy(p, a->u.s, a->n);
        memcpy(p + a->n, b->u.s, b->n);
        *out = jv_str(p, len);
        return 0;
    }
    if (op == OP_ADD && a->t == JV_LIST && b->t == JV_LIST && a->flag == b->flag) {
        jlist *l = moe8_jl_new(c, n, a->u.l->n + b->u.l->n);
        if (!l || moe8_jx_charge(c, n, l->cap / 8)) return -1;
        if (a->u.l->n) memcpy(l->v, a->u.l->v, a->u.l->n * sizeof *l->v);
        if (b->u.l->n) memcpy(l->v + a->u.l->n, b->u.l->v, b->u.l->n * sizeof *l->v);
        l->n = a->u.l->n + b->u.l->n;
        *out = list_of(l, a->flag);
        return 0;
    }
    if (op == OP_ADD && (a->t == JV_STR || a->t == JV_LIST))
        return moe8_jx_fail(c, n, "can only concatenate %s (not \"%s\") to %s", moe8_jv_type_name(a),
                       moe8_jv_type_name(b), moe8_jv_type_name(a));
    if (op == OP_MUL && (a->t == JV_STR || a->t == JV_LIST) && is_int(b)) return repeat(c, n, a, ival(b), out);
    if (op == OP_MUL && (b->t == JV_STR || b->t == JV_LIST) && is_int(a)) return repeat(c, n, b, ival(a), out);
    if (op == OP_MOD && a->t == JV_STR)
        return moe8_jx_fail(c, n, "printf-style string formatting ('...' %% x) is not supported");
    return type_error(c, n, NAMES[op], a, b);
}

static int contains(jctx *c, const jnode *n, const jv *seq, const jv *x, int *res) {
    *res = 0;
    switch (seq->t) {
    case JV_STR:
        if (x->t == JV_UNDEF) return moe8_jx_undefined(c, n, x);
        if (x->t != JV_STR)
            return moe8_jx_fail(c, n, "'in <string>' requires string as left operand, not %s", moe8_jv_type_name(x));
        if (!x->n) *res = 1;
        for (size_t i = 0; !*res && i + x->n <= seq->n; i++) *res = !memcmp(seq->u.s + i, x->u.s, x->n);
        return moe8_jx_charge(c, n, seq->n / 64);
    case JV_LIST:
        for (size_t i = 0; !*res && i < seq->u.l->n; i++) *res = moe8_jv_equal(c, &seq->u.l->v[i], x);
        return 0;
    case JV_DICT:
        if (!moe8_jv_hashable(x)) return moe8_jx_fail(c, n, "unhashable type: '%s'", moe8_jv_type_name(x));
        *res = moe8_jd_get(c, seq->u.d, x) != NULL;
        return 0;
    case JV_UNDEF: return 0;
    default: return moe8_jx_fail(c, n, "argument of type '%s' is not iterable", moe8_jv_type_name(seq));
    }
}

static int compare(jctx *c, const jnode *n, int op, const jv *a, const jv *b, int *res) {
    int lt;
    switch (op) {
    case CMP_EQ: *res = moe8_jv_equal(c, a, b); return 0;
    case CMP_NE: *res = !moe8_jv_equal(c, a, b); return 0;
    case CMP_LT: return moe8_jv_less(c, n, a, b, res);
    case CMP_GT: return moe8_jv_less(c, n, b, a, res);
    case CMP_LE: case CMP_GE:
        if (op == CMP_LE ? moe8_jv_less(c, n, a, b, &lt) : moe8_jv_less(c, n, b, a, &lt)) return -1;
        *res = lt || moe8_jv_equal(c, a, b);
        return 0;
    case CMP_IN: return contains(c, n, b, a, res);
    case CMP_NOTIN:
        if (contains(c, n, b, a, res)) return -1;
        *res = !*res;
        return 0;
    }
    return moe8_jx_fail(c, n, "bad comparison");
}

/* Python's slice.indices: clamp start/stop for len and step; the count. */
static int64_t slice_indices(int64_t len, const int64_t *given, int64_t *start, int64_t *stop,
                             int64_t step, const int *has) {
    if (step > 0) {
        *start = has[0] ? given[0] : 0;
        *stop = has[1] ? given[1] : len;
        if (*start < 0 && (*start += len) < 0) *start = 0;
        if (*start > len) *start = len;
        if (*stop < 0 && (*stop += len) < 0) *stop = 0;
        if (*stop > len) *stop = len;
        return *stop > *start ? (*stop - *start + step - 1) / step : 0;
    }
    *start = has[0] ? given[0] : len - 1;
    *stop = has[1] ? given[1] : -1 - len; /* "before the first" */
    if (*start < 0 && (*start += len) < 0) *start = -1;
    if (*start >= len) *start = len - 1;
    if (*stop < 0 && (*stop += len) < 0) *stop = -1;
    if (*stop >= len) *stop = len - 1;
    return *start > *stop ? (*start - *stop - step - 1) / -step : 0;
}

static int eval_slice(jctx *c, const jnode *n, jv *out) {
    jv obj, part[3];
    const jnode *parts[3] = {n->b, n->c, n->d};
    int64_t given[3] = {0, 0, 1}, start, stop, step, count;
    int has[3] = {0, 0, 0};
    if (eval(c, n->a, &obj)) return -1;
    for (int k = 0; k < 3; k++) {
        if (!parts[k]) continue;
        if (eval(c, parts[k], &part[k])) return -1;
        if (part[k].t == JV_NONE) continue;
        if (!is_int(&part[k])) { /* jinja2: a TypeError in obj[...] gives undefined */
            *out = jv_undef("slice", 5);
            out->flag = JU_ATTR;
            out->of = obj.t;
            return obj.t == JV_UNDEF ? moe8_jx_undefined(c, n, &obj) : 0;
        }
        given[k] = ival(&part[k]);
        has[k] = 1;
    }
    if (obj.t == JV_UNDEF) return moe8_jx_undefined(c, n, &obj);
    if (obj.t != JV_LIST && obj.t != JV_STR)
        return moe8_jx_fail(c, n, "'%s' object is not subscriptable", moe8_jv_type_name(&obj));
    step = given[2];
    if (step == 0) return moe8_jx_fail(c, n, "slice step cannot be zero");
    if (step == INT64_MIN) step = -INT64_MAX;
    if (obj.t == JV_LIST) {
        jlist *l;
        count = slice_indices((int64_t)obj.u.l->n, given, &start, &stop, step, has);
        if (!(l = moe8_jl_new(c, n, (size_t)count)) || moe8_jx_charge(c, n, (uint64_t)count / 8)) return -1;
        for (int64_t i = 0; i < count; i++) l->v[i] = obj.u.l->v[start + i * step];
        l->n = (size_t)count;
        *out = list_of(l, obj.flag);
        return 0;
    }
    /* strings slice by character: offsets of each character first */
    size_t m = moe8_ju_len(obj.u.s, obj.n), *off = moe8_jx_alloc(c, n, (m + 1) * sizeof *off), k = 0, total = 0;
    char *p;
    if (!off) return -1;
    for (size_t i = 0; i < obj.n;) {
        off[k++] = i;
        ju_next(obj.u.s, obj.n, &i);
    }
    off[m] = obj.n;
    count = slice_indices((int64_t)m, given, &start, &stop, step, has);
    if (step == 1) {
        *out = jv_str(obj.u.s + off[start], count ? off[start + count] - off[start] : 0);
        return 0;
    }
    for (int64_t i = 0; i < count; i++) {
        size_t ch = (size_t)(start + i * step);
        total += off[ch + 1] - off[ch];
    }
    if (!(p = moe8_jx_strbuf(c, n, NULL, total))) return -1;
    total = 0;
    for (int64_t i = 0; i < count; i++) {
        size_t ch = (size_t)(start + i * step), len = off[ch + 1] - off[ch];
        memcpy(p + total, obj.u.s + off[ch], len);
        total += len;
    }
    *out = jv_str(p, total);
    return 0;
}

static int call_macro(jctx *c, const jnode *n, const jmacro *m, const jargs *a, jv *out) {
    const jnode *def = m->def;
    jscope *s = scope_new(c, n, m->scope), *saved = c->scope;
    moe8_buf buf = {0}, *saved_out = c->out;
    int rc;
    if (!s) return -1;
    if (a->n_pos > def->n_kids)
        return moe8_jx_fail(c, n, "macro '%.*s' takes not more than %u argument(s)", (int)def->lit.n,
                       def->lit.u.s, def->n_kids);
    for (size_t i = 0; i < a->n_kw; i++) {
        uint32_t k = 0;
        while (k < def->n_kids && !(def->kids[k]->lit.n == a->kw_len[i] &&
                                    !memcmp(def->kids[k]->lit.u.s, a->kw_name[i], a->kw_len[i])))
            k++;
        if (k == def->n_kids)
            return moe8_jx_fail(c, n, "macro '%.*s' takes no keyword argument '%.*s'", (int)def->lit.n,
                           def->lit.u.s, (int)a->kw_len[i], a->kw_name[i]);
        if (k < a->n_pos)
            return moe8_jx_fail(c, n, "macro '%.*s' got multiple values for argument '%.*s'",
                           (int)def->lit.n, def->lit.u.s, (int)a->kw_len[i], a->kw_name[i]);
    }
    c->scope = s;
    for (uint32_t k = 0; k < def->n_kids; k++) {
        const jnode *p = def->kids[k];
        jv v = jv_undef(p->lit.u.s, p->lit.n);
        int found = 0;
        if (k < a->n_pos) v = a->pos[k], found = 1;
        for (size_t i = 0; !found && i < a->n_kw; i++)
            if (a->kw_len[i] == p->lit.n && !memcmp(a->kw_name[i], p->lit.u.s, p->lit.n)) v = a->kw[i], found = 1;
        if (!found && p->a && eval(c, p->a, &v)) goto fail;
        if (scope_put(c, p, s, p->lit.u.s, p->lit.n, v, 1)) goto fail;
    }
    c->out = &buf;
    rc = exec(c, def->b);
    c->out = saved_out;
    c->scope = saved;
    if (rc < 0) {
        moe8_jx_buf_free(c, &buf);
        return -1;
    }
    return moe8_jx_buf_value(c, n, &buf, out);
fail:
    c->scope = saved;
    return -1;
}

static int eval_call(jctx *c, const jnode *n, jv *out) {
    jv f;
    jargs a;
    if (eval(c, n->a, &f)) return -1;
    if (f.t == JV_UNDEF) return moe8_jx_undefined(c, n, &f);
    if (eval_args(c, n, &a)) return -1;
    switch (f.t) {
    case JV_FUNC: return moe8_jfunc_call(c, n, f.u.fn, &a, out);
    case JV_METHOD: return moe8_jmethod_call(c, n, f.u.method, &a, out);
    case JV_MACRO: return call_macro(c, n, f.u.macro, &a, out);
    default: return moe8_jx_fail(c, n, "'%s' object is not callable", moe8_jv_type_name(&f));
    }
}

static int eval_node(jctx *c, const jnode *n, jv *out) {
    jv a, b;
    int r;
    switch (n->kind) {
    case N_LIT: *out = n->lit; return 0;
    case N_NAME: {
        const jv *v = scope_find(c, n->lit.u.s, n->lit.n);
        int fn;
        if (v) *out = *v;
        else if ((fn = moe8_jfunc_id(n->lit.u.s, n->lit.n)) >= 0) out->t = JV_FUNC, out->u.fn = fn;
        else *out = jv_undef(n->lit.u.s, n->lit.n), out->at = n->pos + 1;
        return 0;
    }
    case N_LIST: case N_TUPLE: {
        jlist *l = moe8_jl_new(c, n, n->n_kids);
        if (!l) return -1;
        for (uint32_t i = 0; i < n->n_kids; i++)
            if (eval(c, n->kids[i], &l->v[l->n++])) return -1;
        *out = list_of(l, n->kind == N_TUPLE);
        return 0;
    }
    case N_DICT: {
        jdict *d = moe8_jd_new(c, n, n->n_kids / 2);
        if (!d) return -1;
        for (uint32_t i = 0; i + 1 < n->n_kids; i += 2) {
            if (eval(c, n->kids[i], &a) || eval(c, n->kids[i + 1], &b)) return -1;
            if (!moe8_jv_hashable(&a)) return moe8_jx_fail(c, n->kids[i], "unhashable type: '%s'", moe8_jv_type_name(&a));
            if (moe8_jd_set(c, n, d, a, b)) return -1;
        }
        out->t = JV_DICT, out->flag = 0, out->u.d = d;
        return 0;
    }
    case N_ATTR:
        if (eval(c, n->a, &a)) return -1;
        return moe8_jv_getattr(c, n, &a, n->lit.u.s, n->lit.n, out);
    case N_ITEM:
        if (eval(c, n->a, &a) || eval(c, n->b, &b)) return -1;
        return moe8_jv_getitem(c, n, &a, &b, out);
    case N_SLICE: return eval_slice(c, n, out);
    case N_CALL: return eval_call(c, n, out);
    case N_FILTER: {
        jargs args;
        if (eval(c, n->a, &a) || eval_args(c, n, &args)) return -1;
        return moe8_jfilter_apply(c, n, n->op, &a, &args, out);
    }
    case N_TEST: {
        jargs args;
        if (eval(c, n->a, &a) || eval_args(c, n, &args) || moe8_jtest_apply(c, n, n->op, &a, &args, &r))
            return -1;
        *out = jv_bool(r);
        return 0;
    }
    case N_NEG: case N_POS:
        if (eval(c, n->a, &a)) return -1;
        if (a.t == JV_UNDEF) return moe8_jx_undefined(c, n, &a);
        if (a.t == JV_FLOAT) *out = jv_float(n->kind == N_NEG ? -a.u.f : a.u.f);
        else if (is_int(&a)) {
            if (n->kind == N_NEG && ival(&a) == INT64_MIN) return moe8_jx_fail(c, n, "integer overflow");
            *out = jv_int(n->kind == N_NEG ? -ival(&a) : ival(&a));
        } else {
            return moe8_jx_fail(c, n, "bad operand type for unary %c: '%s'", n->kind == N_NEG ? '-' : '+',
                           moe8_jv_type_name(&a));
        }
        return 0;
    case N_NOT:
        if (eval(c, n->a, &a)) return -1;
        *out = jv_bool(!moe8_jv_truthy(&a));
        return 0;
    case N_BINOP:
        if (eval(c, n->a, &a) || eval(c, n->b, &b)) return -1;
        return arith(c, n, n->op, &a, &b, out);
    case N_AND: case N_OR:
        if (eval(c, n->a, &a)) return -1;
        if (moe8_jv_truthy(&a) == (n->kind == N_OR)) {
            *out = a;
            return 0;
        }
        return eval(c, n->b, out);
    case N_CMP:
        if (eval(c, n->a, &a)) return -1;
        for (uint32_t i = 0; i < n->n_kids; i++) {
            if (eval(c, n->kids[i], &b) || compare(c, n, n->ops[i], &a, &b, &r)) return -1;
            if (!r) break;
            a = b;
        }
        *out = jv_bool(r);
        return 0;
    case N_COND:
        if (eval(c, n->a, &a)) return -1;
        if (moe8_jv_truthy(&a)) return eval(c, n->b, out);
        if (n->c) return eval(c, n->c, out);
        *out = jv_undef("", 0);
        return 0;
    default:
        return moe8_jx_fail(c, n, "internal error: node %d is not an expression", n->kind);
    }
}

static int eval(jctx *c, const jnode *n, jv *out) {
    int rc;
    if (enter(c, n)) return -1;
    rc = eval_node(c, n, out);
    c->depth--;
    return rc;
}

/* ---- statements ----------------------------------------------------------------------- */

/* Bind a for/set target: a name, or a tuple of names unpacking v. */
static int bind(jctx *c, const jnode *t, jscope *s, const jv *v) {
    const jlist *parts;
    if (t->kind == N_NAME) return scope_put(c, t, s, t->lit.u.s, t->lit.n, *v, 1);
    if (v->t != JV_LIST && v->t != JV_STR && v->t != JV_DICT)
        return moe8_jx_fail(c, t, "cannot unpack non-iterable %s object", moe8_jv_type_name(v));
    if (moe8_jv_iterate(c, t, v, &parts)) return -1;
    if (parts->n < t->n_kids)
        return moe8_jx_fail(c, t, "not enough values to unpack (expected %u, got %zu)", t->n_kids, parts->n);
    if (parts->n > t->n_kids) return moe8_jx_fail(c, t, "too many values to unpack (expected %u)", t->n_kids);
    for (uint32_t i = 0; i < t->n_kids; i++)
        if (scope_put(c, t->kids[i], s, t->kids[i]->lit.u.s, t->kids[i]->lit.n, parts->v[i], 1)) return -1;
    return 0;
}

static int exec_for(jctx *c, const jnode *n) {
    jv it, lv = {JV_LOOP, 0, 0, 0, 0, {0}};
    const jlist *items;
    jscope *s, *saved = c->scope;
    jloop *L;
    int rc = 0;
    if (eval(c, n->b, &it) || moe8_jv_iterate(c, n->b, &it, &items) || !(s = scope_new(c, n, saved)) ||
        !(L = moe8_jx_alloc(c, n, sizeof *L)))
        return -1;
    if (n->c) { /* the `if` filter runs first: loop.length counts what it keeps */
        jlist *kept = moe8_jl_new(c, n, items->n);
        if (!kept) return -1;
        c->scope = s;
        for (size_t i = 0; i < items->n; i++) {
            jv keep;
            s->n = 0;
            if (bind(c, n->a, s, &items->v[i]) || eval(c, n->c, &keep)) goto fail;
            if (moe8_jv_truthy(&keep)) kept->v[kept->n++] = items->v[i];
        }
        c->scope = saved;
        items = kept;
    }
    L->items = items;
    lv.u.loop = L;
    for (size_t i = 0; i < items->n; i++) {
        if (moe8_jx_charge(c, n, 1)) return -1;
        s->n = 0;
        L->i = i;
        if (bind(c, n->a, s, &items->v[i]) || scope_put(c, n, s, "loop", 4, lv, 0)) return -1;
        c->scope = s;
        rc = exec(c, n->d);
        c->scope = saved;
        if (rc < 0) return -1;
        if (rc == 1) break;
    }
    if (items->n == 0 && n->e) {
        s->n = 0;
        c->scope = s;
        rc = exec(c, n->e); /* a break/continue here belongs to an outer loop */
        c->scope = saved;
        return rc;
    }
    return 0;
fail:
    c->scope = saved;
    return -1;
}

static int exec_set(jctx *c, const jnode *n) {
    const jnode *t = n->a;
    jv v;
    if (n->c) { /* {% set x %}...{% endset %} */
        moe8_buf buf = {0}, *saved = c->out;
        int rc;
        c->out = &buf;
        rc = exec(c, n->c);
        c->out = saved;
        if (rc) {
            moe8_jx_buf_free(c, &buf);
            return rc < 0 ? -1 : moe8_jx_fail(c, n, "break/continue inside a block assignment");
        }
        if (moe8_jx_buf_value(c, n, &buf, &v)) return -1;
    } else if (eval(c, n->b, &v)) {
        return -1;
    }
    if (t->kind == N_ATTR) { /* ns.attr = v */
        const jv *ns = scope_find(c, t->a->lit.u.s, t->a->lit.n);
        if (!ns || ns->t != JV_NS)
            return moe8_jx_fail(c, t, "cannot assign attribute on non-namespace object");
        return moe8_jd_set(c, t, ns->u.d, jv_str(t->lit.u.s, t->lit.n), v);
    }
    return bind(c, t, c->scope, &v);
}

static int exec_node(jctx *c, const jnode *n) {
    jv v;
    int rc;
    switch (n->kind) {
    case N_BODY:
        for (uint32_t i = 0; i < n->n_kids; i++)
            if ((rc = exec(c, n->kids[i])) != 0) return rc;
        return 0;
    case N_TEXT: return moe8_jbuf_add(c, n, c->out, n->lit.u.s, n->lit.n);
    case N_OUT:
        if (eval(c, n->a, &v)) return -1;
        return moe8_jv_str_to(c, n, c->out, &v);
    case N_IF:
        if (eval(c, n->a, &v)) return -1;
        if (moe8_jv_truthy(&v)) return exec(c, n->b);
        return n->c ? exec(c, n->c) : 0;
    case N_FOR: return exec_for(c, n);
    case N_SET: return exec_set(c, n);
    case N_MACRO: {
        jmacro *m = moe8_jx_alloc(c, n, sizeof *m);
        if (!m) return -1;
        m->def = n;
        m->scope = c->scope;
        v.t = JV_MACRO;
        v.u.macro = m;
        return scope_put(c, n, c->scope, n->lit.u.s, n->lit.n, v, 1);
    }
    case N_BREAK: return 1;
    case N_CONTINUE: return 2;
    default: return moe8_jx_fail(c, n, "internal error: node %d is not a statement", n->kind);
    }
}

static int exec(jctx *c, const jnode *n) {
    int rc;
    if (enter(c, n)) return -1;
    rc = exec_node(c, n);
    c->depth--;
    return rc;
}

/* ---- entry -------------------------------------------------------------------------- */

moe8_status moe8_jinja_render(const jinja_template *t, const cJSON *vars, const jinja_limits *lim,
                         char **out, size_t *n_out, moe8_error *err) {
    jctx c;
    moe8_buf buf = {0};
    size_t n;
    moe8_error local;
    const cJSON *e;
    moe8_status st = MOE8_OK;
    *out = NULL;
    if (n_out) *n_out = 0;
    memset(&c, 0, sizeof c);
    c.t = t;
    c.lim = lim ? *lim : moe8_jinja_limits_default();
    c.A.limit = c.lim.max_memory;
    c.err = err ? err : &local;
    c.out = &buf;
    if (!(c.globals = scope_new(&c, NULL, NULL)) || !(c.root = scope_new(&c, NULL, c.globals))) goto done;
    c.scope = c.root;
    if (vars && !cJSON_IsObject(vars)) {
        moe8_jx_fail(&c, NULL, "the variables must be a JSON object");
        goto done;
    }
    cJSON_ArrayForEach(e, vars) {
        jv v;
        if (moe8_jv_from_cjson(&c, e, &v, 0) ||
            scope_put(&c, NULL, c.globals, e->string, strlen(e->string), v, 0))
            goto done;
    }
    if (exec(&c, t->root) || moe8_jx_charge(&c, NULL, 0)) goto done;
    n = buf.n;
    if (!(*out = moe8_buf_take(&buf))) {
        moe8_fail(c.err, MOE8_ERR_NOMEM, -1, "%s: out of memory", t->name);
        c.failed = 1;
        goto done;
    }
    if (n_out) *n_out = n;
done:
    if (c.failed || !*out) st = c.err->code ? c.err->code : MOE8_ERR_INTERNAL;
    moe8_buf_free(&buf);
    moe8_ja_free(&c.A);
    return st;
}
