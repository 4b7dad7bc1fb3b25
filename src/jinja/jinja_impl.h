/*
 * jinja_impl.h — the inside of moe8's Jinja2 interpreter, shared by
 * jinja_lex.c and jinja_parse.c (source -> tokens -> tree, over
 * jinja_lex.h), jinja_eval.c (statements and expressions), jinja_lib.c
 * (values: the arena, Python's str/repr/json of them), jinja_methods.c
 * (str/dict/list methods, lookups, global functions) and jinja_filters.c
 * (filters and tests), the last two over jinja_call.h. Callers use jinja.h.
 *
 * Values follow Python's data model as far as chat templates see it: None,
 * bool, int (int64; an overflow is an error where Python would grow), float,
 * str (UTF-8, indexed by code point), list/tuple, dict (insertion order),
 * jinja2's Undefined, namespace, the loop object, macros and a few global
 * functions. Containers are immutable (HF renders in jinja2's immutable
 * sandbox) except a namespace's attributes.
 *
 * Memory: every value made while rendering comes from one arena, freed at
 * the end of the render; text being written (the output, a capture, a
 * string being joined) is in moe8_bufs counted against the arena's limit.
 * The parsed tree lives in the template's own arena.
 */
#ifndef MOE8_JINJA_IMPL_H
#define MOE8_JINJA_IMPL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"
#include "jinja/jinja.h"

/* ---- arena (jinja_lib.c) ------------------------------------------------ */

typedef struct ja_chunk {
    struct ja_chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
} ja_chunk;

typedef struct {
    ja_chunk *head;
    size_t total;   /* bytes taken from malloc (a render's live buffers too) */
    size_t limit;   /* most bytes it may take */
} jarena;

/* n bytes, 16-aligned; NULL when malloc fails or the limit would be passed. */
void *moe8_ja_alloc(jarena *a, size_t n);
void moe8_ja_free(jarena *a);

/* ---- values ------------------------------------------------------------- */

typedef enum {
    JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_DICT, JV_NS, JV_LOOP,
    JV_FUNC, JV_MACRO, JV_METHOD,
} jv_type;

/* JV_UNDEF kinds (jv.flag): why the value is undefined, for the message
 * when it is used. */
enum {
    JU_NAME,      /* a variable: u.s/n the name */
    JU_ATTR,      /* x.name / x['name'] missing: u.s/n the name, `of` the object's type */
    JU_ELEMENT,   /* x[i] missing: u.i the index, `of` the object's type */
    JU_UNSAFE,    /* a method that would modify a container (immutable sandbox) */
    JU_EMPTY,     /* first/last/min/max of nothing */
};

/* Global functions (JV_FUNC). */
enum { JF_RANGE, JF_NAMESPACE, JF_DICT, JF_RAISE, JF_STRFTIME, JF_COUNT };

typedef struct jlist jlist;
typedef struct jdict jdict;
typedef struct jloop jloop;
typedef struct jnode jnode;
typedef struct jmacro jmacro;
typedef struct jmethod jmethod;
typedef struct jscope jscope;

typedef struct {
    uint8_t t;       /* jv_type */
    uint8_t flag;    /* JV_LIST: 1 = tuple; JV_UNDEF: JU_* */
    uint8_t of;      /* JV_UNDEF: type of the object it was looked up in */
    uint32_t at;     /* JV_UNDEF: source offset + 1 of what made it (0: unknown) */
    size_t n;        /* JV_STR: bytes; JV_UNDEF: name bytes */
    union {
        int b;
        int64_t i;
        double f;
        const char *s;      /* JV_STR (not NUL-terminated); JV_UNDEF: the name */
        jlist *l;
        jdict *d;           /* JV_DICT, JV_NS */
        jloop *loop;
        int fn;             /* JF_* */
        const jmacro *macro;
        const jmethod *method;
    } u;
} jv;

struct jlist { jv *v; size_t n, cap; };
struct jdict { jv *k, *v; size_t n, cap; };
struct jloop {
    const jlist *items;   /* what the loop runs over (after its `if` filter) */
    size_t i;             /* index0 */
};
struct jmacro {
    const jnode *def;     /* N_MACRO */
    jscope *scope;        /* where it was defined: its body sees that scope */
};
struct jmethod {          /* obj.name, not yet called */
    jv self;
    const char *name;
    size_t len;
};

static inline jv jv_undef(const char *name, size_t n) {
    jv v = {JV_UNDEF, 0, 0, 0, n, {0}};
    v.u.s = name;
    return v;
}
static inline jv jv_none(void) { jv v = {JV_NONE, 0, 0, 0, 0, {0}}; return v; }
static inline jv jv_bool(int b) { jv v = {JV_BOOL, 0, 0, 0, 0, {0}}; v.u.b = !!b; return v; }
static inline jv jv_int(int64_t i) { jv v = {JV_INT, 0, 0, 0, 0, {0}}; v.u.i = i; return v; }
static inline jv jv_float(double f) { jv v = {JV_FLOAT, 0, 0, 0, 0, {0}}; v.u.f = f; return v; }
static inline jv jv_str(const char *s, size_t n) {
    jv v = {JV_STR, 0, 0, 0, n, {0}};
    v.u.s = s;
    return v;
}

/* ---- the tree ------------------------------------------------------------ */

typedef enum {
    /* statements */
    N_BODY, N_TEXT, N_OUT, N_IF, N_FOR, N_SET, N_BREAK, N_CONTINUE, N_MACRO,
    /* expressions */
    N_LIT, N_NAME, N_LIST, N_TUPLE, N_DICT, N_ATTR, N_ITEM, N_SLICE, N_CALL, N_KWARG,
    N_FILTER, N_TEST, N_NEG, N_POS, N_NOT, N_BINOP, N_AND, N_OR, N_CMP, N_COND,
} jnode_kind;

/* N_BINOP operators and N_CMP comparisons (node->op, node->ops[]). */
enum { OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FDIV, OP_MOD, OP_POW, OP_CAT };
enum { CMP_EQ, CMP_NE, CMP_LT, CMP_LE, CMP_GT, CMP_GE, CMP_IN, CMP_NOTIN };

/* Shape per kind (unused fields NULL):
 *   N_BODY      kids = statements
 *   N_TEXT      lit = the text          N_OUT   a = expression
 *   N_IF        a = test, b = body, c = else body (an elif is an N_IF in it)
 *   N_FOR       a = target (N_NAME or N_TUPLE of N_NAME), b = iterable,
 *               c = `if` filter, d = body, e = else body
 *   N_SET       a = target (N_NAME, N_TUPLE of N_NAME, or N_ATTR of a name:
 *               ns.x), b = value, or c = body for {% set x %}...{% endset %}
 *   N_MACRO     lit = name, kids = parameters (N_NAME, a = default), b = body
 *   N_LIT       lit                     N_NAME  lit = name
 *   N_LIST/N_TUPLE  kids                N_DICT  kids = key, value, key, ...
 *   N_ATTR      a = object, lit = name  N_ITEM  a = object, b = key
 *   N_SLICE     a = object, b/c/d = start/stop/step (each may be NULL)
 *   N_CALL      a = callee, kids = arguments (N_KWARG: lit = name, a = value)
 *   N_FILTER    a = operand, lit = name, op = filter id, kids = arguments
 *   N_TEST      a = operand, lit = name, op = test id, kids = arguments
 *   N_NEG/N_POS/N_NOT  a                N_BINOP op, a, b     N_AND/N_OR a, b
 *   N_CMP       a = first operand, kids = the others, ops[k] = comparison
 *   N_COND      a = test, b = value, c = else value (NULL: undefined)
 */
struct jnode {
    uint8_t kind, op;
    uint32_t pos;      /* byte offset in the (newline-normalized) source */
    uint32_t n_kids;
    jv lit;
    jnode *a, *b, *c, *d, *e;
    jnode **kids;
    uint8_t *ops;
};

struct jinja_template {
    jarena arena;      /* the tree and the source */
    char *src;         /* newline-normalized source (offsets refer to it) */
    size_t len;
    char name[160];    /* start of every error message */
    jnode *root;       /* N_BODY */
};

/* Byte offset -> 1-based line and column (in characters) of the source
 * (jinja_lex.c). */
void moe8_jinja_line_col(const char *src, size_t len, size_t pos, int *line, int *col);

/* ---- render state (jinja_eval.c; jinja_lib.c works on it too) ----------- */

typedef struct {
    const jinja_template *t;
    jarena A;               /* values */
    jinja_limits lim;
    uint64_t steps;
    int depth;
    moe8_buf *out;          /* where output goes (a capture swaps it) */
    jscope *scope;          /* innermost scope: {% set %} writes here */
    jscope *root;           /* template-level variables */
    jscope *globals;        /* the caller's variables */
    moe8_error *err;
    int failed;
} jctx;

/* Fail the render at node n (NULL: no position); returns -1. */
int moe8_jx_fail(jctx *c, const jnode *n, const char *fmt, ...) MOE8_PRINTF(3, 4);
/* Charge `steps` units of work; -1 (failed) past max_steps. */
int moe8_jx_charge(jctx *c, const jnode *n, uint64_t steps);
/* Count work inside a loop that cannot fail on the spot (a comparison, a
 * lookup): 1 once past max_steps, and the next moe8_jx_charge fails the render. */
static inline int jx_spend(jctx *c, uint64_t steps) {
    c->steps += steps;
    return c->steps > c->lim.max_steps;
}
/* Arena allocation that fails the render when the memory limit is hit. */
void *moe8_jx_alloc(jctx *c, const jnode *n, size_t bytes);
/* A new string of n bytes (charged; fails over max_output), copied from s when s. */
char *moe8_jx_strbuf(jctx *c, const jnode *n, const char *s, size_t len);

/* Byte buffers (jinja_eval.c). The render's buffers (the output, captures,
 * strings being built) are moe8_bufs whose capacity counts in c->A.total,
 * so max_memory bounds them with the arena; each is freed with
 * moe8_jx_buf_free or turned into a value by moe8_jx_buf_value, on every
 * path. */

/* Append s[0..len) to b: fails the render past max_output bytes in b or
 * past max_memory; charges len / 64 steps. */
int moe8_jbuf_add(jctx *c, const jnode *n, moe8_buf *b, const char *s, size_t len);
/* The same limits after b was written to directly (moe8_buf_json_str) with
 * result rc, its capacity having been old_cap. */
int moe8_jx_buf_wrote(jctx *c, const jnode *n, moe8_buf *b, size_t old_cap, int rc);
/* The failure for output past max_output. */
int moe8_jx_over_output(jctx *c, const jnode *n);
/* b's bytes as a string value in the arena; b is freed either way. */
int moe8_jx_buf_value(jctx *c, const jnode *n, moe8_buf *b, jv *out);
void moe8_jx_buf_free(jctx *c, moe8_buf *b);

/* ---- values (jinja_lib.c) ----------------------------------------------- */

const char *moe8_jv_type_name(const jv *v);   /* Python's: 'str', 'int', 'dict', ... */
int moe8_jv_truthy(const jv *v);
/* Python could hash it (a dict key): not a list, dict or namespace (a tuple
 * only when its items are). */
int moe8_jv_hashable(const jv *v);
/* Python's ==. Work is spent on c: past the step limit the answer is
 * meaningless, and the render fails at its next moe8_jx_charge. */
int moe8_jv_equal(jctx *c, const jv *a, const jv *b);
/* Python's <, with -1 and a failed render for types that do not compare. */
int moe8_jv_less(jctx *c, const jnode *n, const jv *a, const jv *b, int *lt);

jlist *moe8_jl_new(jctx *c, const jnode *n, size_t cap);
int moe8_jl_push(jctx *c, const jnode *n, jlist *l, jv v);
jdict *moe8_jd_new(jctx *c, const jnode *n, size_t cap);
/* Set key k (replacing an equal key's value) / append without looking. */
int moe8_jd_set(jctx *c, const jnode *n, jdict *d, jv k, jv v);
int moe8_jd_push(jctx *c, const jnode *n, jdict *d, jv k, jv v);
/* The value of the last key equal to k (a JSON object may repeat a key:
 * the last one wins, as in Python), or NULL. */
const jv *moe8_jd_get(jctx *c, const jdict *d, const jv *k);
const jv *moe8_jd_get_str(jctx *c, const jdict *d, const char *s, size_t n);

/* Append Python's str(v) / repr(v) to b (nested values as repr). */
int moe8_jv_str_to(jctx *c, const jnode *n, moe8_buf *b, const jv *v);
int moe8_jv_repr_to(jctx *c, const jnode *n, moe8_buf *b, const jv *v);
/* str(v) as a string value (strings themselves are not copied). */
int moe8_jv_to_str(jctx *c, const jnode *n, const jv *v, jv *out);

/* json.dumps as HF's tojson calls it (ensure_ascii, indent, separators,
 * sort_keys); indent NULL for none. */
typedef struct {
    int ensure_ascii, sort_keys;
    const char *indent;       /* NULL: single line */
    size_t indent_n;
    const char *item_sep, *key_sep;
    size_t item_sep_n, key_sep_n;
} jjson_opts;
int moe8_jv_json_to(jctx *c, const jnode *n, moe8_buf *b, const jv *v, const jjson_opts *o, int level);

/* cJSON -> value (numbers: an integral double within +-2^53 is an int). */
int moe8_jv_from_cjson(jctx *c, const cJSON *j, jv *out, int depth);

/* UTF-8 helpers: strings inside the interpreter are always valid UTF-8 (the
 * source and the variables are checked, escapes give no surrogates, case
 * mappings give code points); encode with moe8_utf8_encode. */
size_t moe8_ju_len(const char *s, size_t n);                       /* code points */
int moe8_ju_isspace(uint32_t cp);                                  /* Python's str.isspace */
/* The code point at s[*i], *i moved past it (an invalid byte: U+FFFD, one
 * byte on; never met). */
static inline uint32_t ju_next(const char *s, size_t n, size_t *i) {
    uint32_t cp = 0xfffd;
    int k = moe8_utf8_decode((const uint8_t *)s + *i, n - *i, &cp);
    *i += k > 0 ? (size_t)k : 1;
    return cp;
}

/* ---- filters, tests (jinja_filters.c), methods, globals (jinja_methods.c) */

/* id of a filter/test name, -1 when not supported (the parser refuses it). */
int moe8_jfilter_id(const char *name, size_t n);
int moe8_jtest_id(const char *name, size_t n);

/* Evaluated arguments of a call: positional first, then keyword. */
typedef struct {
    jv *pos;
    size_t n_pos;
    const char **kw_name;   /* [n_kw], not NUL-terminated: kw_len */
    size_t *kw_len;
    jv *kw;
    size_t n_kw;
} jargs;

int moe8_jfilter_apply(jctx *c, const jnode *n, int id, const jv *in, const jargs *a, jv *out);
int moe8_jtest_apply(jctx *c, const jnode *n, int id, const jv *in, const jargs *a, int *out);
/* 1 when obj.name is a method of obj's type (str, dict, list, loop); for a
 * method that would modify a container *unsafe is set too. */
int moe8_jmethod_exists(const jv *obj, const char *name, size_t len, int *unsafe);
/* Call a method made by moe8_jv_getattr. */
int moe8_jmethod_call(jctx *c, const jnode *n, const jmethod *m, const jargs *a, jv *out);
/* Global functions (range, namespace, dict, raise_exception, strftime_now). */
int moe8_jfunc_call(jctx *c, const jnode *n, int fn, const jargs *a, jv *out);
int moe8_jfunc_id(const char *name, size_t n);

/* Run a filter/test by name from inside a filter (map, select, ...). */
int moe8_jx_filter_by_name(jctx *c, const jnode *n, const jv *name, const jv *in, const jargs *a,
                      jv *out);
int moe8_jx_test_by_name(jctx *c, const jnode *n, const jv *name, const jv *in, const jargs *a,
                    int *out);

/* Iterate v as Python does: a list's items, a dict's keys, a string's
 * characters, nothing for undefined; other types fail. */
int moe8_jv_iterate(jctx *c, const jnode *n, const jv *v, const jlist **out);

/* Python's getattr-then-getitem lookup jinja2 does for x.name (and x[key]). */
int moe8_jv_getattr(jctx *c, const jnode *n, const jv *obj, const char *name, size_t len, jv *out);
int moe8_jv_getitem(jctx *c, const jnode *n, const jv *obj, const jv *key, jv *out);

/* The failure for using an undefined value. */
int moe8_jx_undefined(jctx *c, const jnode *n, const jv *v);

#endif
