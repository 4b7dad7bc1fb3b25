/*
 * jinja_parse.c — tokens -> tree (jinja_impl.h), following jinja2 3.1's
 * parser; jinja_lex.c makes the tokens.
 *
 * Statements: if/elif/else, for (targets, `if` filter, else), set (names,
 * tuples, namespace attributes, block form), macro, break/continue, raw,
 * generation (HF's marker, rendered as its body), comments. Expressions:
 * literals, lists, tuples, dicts, names, attributes, subscripts and slices,
 * calls with keyword arguments, filters, tests (`is not`), unary -/+/not,
 * + - * / // % ** ~, comparisons (chained), in / not in, and/or, `a if b else c`.
 * Anything else (include, import, extends, block, call, filter and with
 * blocks, do — an extension HF does not load —, recursive loops, *args) is
 * refused with its line and column, as is a filter or test name the
 * interpreter lacks.
 *
 * Bounded: a source of at most SRC_MAX bytes, expressions and blocks nested
 * at most PARSE_MAX_DEPTH deep, the tree in an arena of at most 64 bytes per
 * source byte.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja/jinja_lex.h"

/* ---- parser: helpers ----------------------------------------------------------- */

static int unexpected(jparser *P, const char *wanted) {
    char d[80];
    jtok *t = cur(P);
    return moe8_jp_fail(P, t->pos, MOE8_ERR_FORMAT, "expected %s, got %s", wanted,
                        moe8_jp_tok_desc(t, d, sizeof d));
}

static int expect_op(jparser *P, int op) {
    jtok want = {.type = TK_OP, .op = (uint8_t)op};
    char w[16];
    if (is_op(cur(P), op)) {
        next_tok(P);
        return 0;
    }
    return unexpected(P, moe8_jp_tok_desc(&want, w, sizeof w));
}

static jnode *new_node(jparser *P, jnode_kind kind, size_t pos) {
    jnode *n = moe8_ja_alloc(&P->t->arena, sizeof *n);
    if (!n) {
        moe8_jp_fail(P, pos, MOE8_ERR_NOMEM, "out of memory");
        return NULL;
    }
    memset(n, 0, sizeof *n);
    n->kind = (uint8_t)kind;
    n->pos = (uint32_t)pos;
    return n;
}

/* A growing list of child nodes (copied into the arena when done). */
typedef struct {
    jnode **v;
    uint32_t n, cap;
} kids;

static int kids_push(jparser *P, kids *k, jnode *n) {
    if (k->n == k->cap) {
        uint32_t cap = k->cap ? 2 * k->cap : 4;
        jnode **v = moe8_ja_alloc(&P->t->arena, cap * sizeof *v);
        if (!v) return moe8_jp_fail(P, n->pos, MOE8_ERR_NOMEM, "out of memory");
        if (k->n) memcpy(v, k->v, k->n * sizeof *v);
        k->v = v;
        k->cap = cap;
    }
    k->v[k->n++] = n;
    return 0;
}

static void kids_set(jnode *n, const kids *k) {
    n->kids = k->v;
    n->n_kids = k->n;
}

static int enter(jparser *P) {
    if (++P->depth > PARSE_MAX_DEPTH)
        return moe8_jp_fail(P, cur(P)->pos, MOE8_ERR_UNSUPPORTED, "the template nests deeper than %d",
                            PARSE_MAX_DEPTH);
    return 0;
}

/* ---- parser: expressions ------------------------------------------------------- */

static jnode *parse_expression(jparser *P, int with_condexpr);
static jnode *parse_tuple(jparser *P, int simplified, int with_condexpr, int explicit_paren,
                          const char *extra_end);
static jnode *parse_unary(jparser *P, int with_filter);
static jnode *parse_primary(jparser *P);
static jnode *parse_postfix(jparser *P, jnode *node);

static jnode *binop(jparser *P, jnode_kind kind, int op, size_t pos, jnode *a, jnode *b) {
    jnode *n;
    if (!a || !b || !(n = new_node(P, kind, pos))) return NULL;
    n->op = (uint8_t)op;
    n->a = a;
    n->b = b;
    return n;
}

/* (args) of a call, filter or test: positional then name=value. */
static int parse_call_args(jparser *P, jnode *call) {
    kids k = {0};
    int kw_seen = 0;
    if (expect_op(P, O_LPAREN)) return -1;
    while (!is_op(cur(P), O_RPAREN)) {
        jnode *arg;
        if (k.n && expect_op(P, O_COMMA)) return -1;
        if (is_op(cur(P), O_RPAREN)) break;
        if (is_op(cur(P), O_MUL) || is_op(cur(P), O_POW))
            return moe8_jp_fail(P, cur(P)->pos, MOE8_ERR_UNSUPPORTED, "*args and **kwargs are not supported");
        if (cur(P)->type == TK_NAME && is_op(peek(P, 1), O_ASSIGN)) {
            jtok *name = cur(P);
            if (!(arg = new_node(P, N_KWARG, name->pos))) return -1;
            arg->lit = jv_str(name->s, name->n);
            next_tok(P);
            next_tok(P);
            if (!(arg->a = parse_expression(P, 1))) return -1;
            kw_seen = 1;
        } else {
            if (kw_seen)
                return moe8_jp_fail(P, cur(P)->pos, MOE8_ERR_FORMAT,
                                    "a positional argument follows a keyword argument");
            if (!(arg = parse_expression(P, 1))) return -1;
        }
        if (kids_push(P, &k, arg)) return -1;
    }
    next_tok(P);
    kids_set(call, &k);
    return 0;
}

static jnode *parse_call(jparser *P, jnode *callee) {
    jnode *n = new_node(P, N_CALL, cur(P)->pos);
    if (!n) return NULL;
    n->a = callee;
    return parse_call_args(P, n) ? NULL : n;
}

/* A dotted name after `|` or `is`. */
static int parse_dotted(jparser *P, const char **s, size_t *len) {
    jtok *t = cur(P);
    if (t->type != TK_NAME) return unexpected(P, "a name");
    *s = t->s;
    *len = t->n;
    next_tok(P);
    if (is_op(cur(P), O_DOT))
        return moe8_jp_fail(P, cur(P)->pos, MOE8_ERR_UNSUPPORTED,
                            "dotted filter and test names are not supported");
    return 0;
}

static jnode *parse_filter(jparser *P, jnode *node) {
    while (is_op(cur(P), O_PIPE)) {
        jnode *f;
        next_tok(P);
        if (!(f = new_node(P, N_FILTER, cur(P)->pos))) return NULL;
        const char *s;
        size_t len;
        int id;
        if (parse_dotted(P, &s, &len)) return NULL;
        if ((id = moe8_jfilter_id(s, len)) < 0) {
            moe8_jp_fail(P, f->pos, MOE8_ERR_UNSUPPORTED, "filter '%.*s' is not supported", (int)len, s);
            return NULL;
        }
        f->lit = jv_str(s, len);
        f->op = (uint8_t)id;
        f->a = node;
        if (is_op(cur(P), O_LPAREN) && parse_call_args(P, f)) return NULL;
        node = f;
    }
    return node;
}

static jnode *parse_test(jparser *P, jnode *node) {
    jnode *t = new_node(P, N_TEST, cur(P)->pos), *not;
    int negated = 0, id;
    const char *s;
    size_t len;
    if (!t) return NULL;
    next_tok(P); /* is */
    if (is_name(cur(P), "not")) negated = 1, next_tok(P);
    if (parse_dotted(P, &s, &len)) return NULL;
    if ((id = moe8_jtest_id(s, len)) < 0) {
        moe8_jp_fail(P, t->pos, MOE8_ERR_UNSUPPORTED, "test '%.*s' is not supported", (int)len, s);
        return NULL;
    }
    t->lit = jv_str(s, len);
    t->op = (uint8_t)id;
    t->a = node;
    if (is_op(cur(P), O_LPAREN)) {
        if (parse_call_args(P, t)) return NULL;
    } else {
        jtok *c = cur(P);
        int starts = c->type == TK_NAME || c->type == TK_STRING || c->type == TK_INT ||
                     c->type == TK_FLOAT || is_op(c, O_LPAREN) || is_op(c, O_LBRACKET) ||
                     is_op(c, O_LBRACE);
        if (starts && !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
            jnode *arg;
            kids k = {0};
            if (is_name(c, "is")) {
                moe8_jp_fail(P, c->pos, MOE8_ERR_FORMAT, "tests cannot be chained with 'is'");
                return NULL;
            }
            if (!(arg = parse_primary(P)) || !(arg = parse_postfix(P, arg)) || kids_push(P, &k, arg))
                return NULL;
            kids_set(t, &k);
        }
    }
    if (!negated) return t;
    if (!(not = new_node(P, N_NOT, t->pos))) return NULL;
    not->a = t;
    return not;
}

/* x[...] slice or key. */
static jnode *parse_subscribed(jparser *P) {
    size_t pos = cur(P)->pos;
    jnode *parts[3] = {NULL, NULL, NULL}, *n;
    if (is_op(cur(P), O_COLON)) {
        next_tok(P);
    } else {
        jnode *e = parse_expression(P, 1);
        if (!e || !is_op(cur(P), O_COLON)) return e;
        next_tok(P);
        parts[0] = e;
    }
    if (!is_op(cur(P), O_COLON) && !is_op(cur(P), O_RBRACKET) && !is_op(cur(P), O_COMMA))
        if (!(parts[1] = parse_expression(P, 1))) return NULL;
    if (is_op(cur(P), O_COLON)) {
        next_tok(P);
        if (!is_op(cur(P), O_RBRACKET) && !is_op(cur(P), O_COMMA))
            if (!(parts[2] = parse_expression(P, 1))) return NULL;
    }
    if (!(n = new_node(P, N_SLICE, pos))) return NULL;
    n->b = parts[0];
    n->c = parts[1];
    n->d = parts[2];
    return n;
}

static jnode *parse_subscript(jparser *P, jnode *node) {
    jtok *t = cur(P);
    jnode *n;
    if (is_op(t, O_DOT)) {
        jtok *a;
        next_tok(P);
        a = cur(P);
        if (a->type == TK_NAME) {
            if (!(n = new_node(P, N_ATTR, a->pos))) return NULL;
            n->a = node;
            n->lit = jv_str(a->s, a->n);
            next_tok(P);
            return n;
        }
        if (a->type != TK_INT) {
            unexpected(P, "a name or number after '.'");
            return NULL;
        }
        if (!(n = new_node(P, N_ITEM, a->pos)) || !(n->b = new_node(P, N_LIT, a->pos))) return NULL;
        n->a = node;
        n->b->lit = jv_int(a->i);
        next_tok(P);
        return n;
    }
    /* [ ... ] */
    kids k = {0};
    next_tok(P);
    while (!is_op(cur(P), O_RBRACKET)) {
        jnode *e;
        if (k.n && expect_op(P, O_COMMA)) return NULL;
        if (!(e = parse_subscribed(P)) || kids_push(P, &k, e)) return NULL;
    }
    next_tok(P);
    if (k.n == 0) {
        moe8_jp_fail(P, t->pos, MOE8_ERR_FORMAT, "expected an index or slice inside '[]'");
        return NULL;
    }
    if (k.n > 1) { /* x[a, b]: the key is the tuple (a, b) */
        jnode *tuple = new_node(P, N_TUPLE, t->pos);
        for (uint32_t i = 0; tuple && i < k.n; i++)
            if (k.v[i]->kind == N_SLICE) {
                moe8_jp_fail(P, k.v[i]->pos, MOE8_ERR_UNSUPPORTED,
                             "a slice inside a tuple index is not supported");
                return NULL;
            }
        if (!tuple || !(n = new_node(P, N_ITEM, t->pos))) return NULL;
        kids_set(tuple, &k);
        n->a = node;
        n->b = tuple;
        return n;
    }
    if (k.v[0]->kind == N_SLICE) {
        k.v[0]->a = node;
        return k.v[0];
    }
    if (!(n = new_node(P, N_ITEM, t->pos))) return NULL;
    n->a = node;
    n->b = k.v[0];
    return n;
}

static jnode *parse_postfix(jparser *P, jnode *node) {
    while (node) {
        jtok *t = cur(P);
        if (is_op(t, O_DOT) || is_op(t, O_LBRACKET)) node = parse_subscript(P, node);
        else if (is_op(t, O_LPAREN)) node = parse_call(P, node);
        else break;
    }
    return node;
}

static jnode *parse_filter_expr(jparser *P, jnode *node) {
    while (node) {
        jtok *t = cur(P);
        if (is_op(t, O_PIPE)) node = parse_filter(P, node);
        else if (is_name(t, "is")) node = parse_test(P, node);
        else if (is_op(t, O_LPAREN)) node = parse_call(P, node);
        else break;
    }
    return node;
}

static jnode *parse_list_or_dict(jparser *P, int dict) {
    jnode *n = new_node(P, dict ? N_DICT : N_LIST, cur(P)->pos);
    int close = dict ? O_RBRACE : O_RBRACKET;
    kids k = {0};
    if (!n) return NULL;
    next_tok(P);
    while (!is_op(cur(P), close)) {
        jnode *e;
        if (k.n && expect_op(P, O_COMMA)) return NULL;
        if (is_op(cur(P), close)) break;
        if (!(e = parse_expression(P, 1)) || kids_push(P, &k, e)) return NULL;
        if (dict && (expect_op(P, O_COLON) || !(e = parse_expression(P, 1)) || kids_push(P, &k, e)))
            return NULL;
    }
    next_tok(P);
    kids_set(n, &k);
    return n;
}

static jnode *parse_primary(jparser *P) {
    jtok *t = cur(P);
    jnode *n;
    if (t->type == TK_NAME) {
        if (!(n = new_node(P, N_LIT, t->pos))) return NULL;
        if (is_name(t, "true") || is_name(t, "True")) n->lit = jv_bool(1);
        else if (is_name(t, "false") || is_name(t, "False")) n->lit = jv_bool(0);
        else if (is_name(t, "none") || is_name(t, "None")) n->lit = jv_none();
        else n->kind = N_NAME, n->lit = jv_str(t->s, t->n);
        next_tok(P);
        return n;
    }
    if (t->type == TK_STRING) { /* adjacent strings join */
        size_t total = 0, k = 0;
        char *buf;
        for (jtok *u = t; u->type == TK_STRING; u++) total += u->n;
        if (!(n = new_node(P, N_LIT, t->pos)) || !(buf = moe8_ja_alloc(&P->t->arena, total + 1)))
            return NULL;
        while (cur(P)->type == TK_STRING) {
            memcpy(buf + k, cur(P)->s, cur(P)->n);
            k += cur(P)->n;
            next_tok(P);
        }
        n->lit = jv_str(buf, total);
        return n;
    }
    if (t->type == TK_INT || t->type == TK_FLOAT) {
        if (!(n = new_node(P, N_LIT, t->pos))) return NULL;
        n->lit = t->type == TK_INT ? jv_int(t->i) : jv_float(t->f);
        next_tok(P);
        return n;
    }
    if (is_op(t, O_LPAREN)) {
        next_tok(P);
        if (!(n = parse_tuple(P, 0, 1, 1, NULL)) || expect_op(P, O_RPAREN)) return NULL;
        return n;
    }
    if (is_op(t, O_LBRACKET)) return parse_list_or_dict(P, 0);
    if (is_op(t, O_LBRACE)) return parse_list_or_dict(P, 1);
    unexpected(P, "an expression");
    return NULL;
}

static jnode *parse_unary(jparser *P, int with_filter) {
    jtok *t = cur(P);
    jnode *n;
    if (enter(P)) return NULL;
    if (is_op(t, O_SUB) || is_op(t, O_ADD)) {
        next_tok(P);
        if (!(n = new_node(P, t->op == O_SUB ? N_NEG : N_POS, t->pos)) ||
            !(n->a = parse_unary(P, 0)))
            return NULL;
    } else if (!(n = parse_primary(P))) {
        return NULL;
    }
    n = parse_postfix(P, n);
    if (with_filter) n = parse_filter_expr(P, n);
    P->depth--;
    return n;
}

static jnode *parse_pow(jparser *P) {
    jnode *n = parse_unary(P, 1);
    while (n && is_op(cur(P), O_POW)) {
        size_t pos = cur(P)->pos;
        next_tok(P);
        n = binop(P, N_BINOP, OP_POW, pos, n, parse_unary(P, 1));
    }
    return n;
}

static jnode *parse_math2(jparser *P) {
    jnode *n = parse_pow(P);
    for (;;) {
        jtok *t = cur(P);
        int op = is_op(t, O_MUL) ? OP_MUL : is_op(t, O_DIV) ? OP_DIV : is_op(t, O_FDIV) ? OP_FDIV
                 : is_op(t, O_MOD) ? OP_MOD : -1;
        if (!n || op < 0) return n;
        next_tok(P);
        n = binop(P, N_BINOP, op, t->pos, n, parse_pow(P));
    }
}

static jnode *parse_concat(jparser *P) {
    jnode *n = parse_math2(P);
    while (n && is_op(cur(P), O_TILDE)) {
        size_t pos = cur(P)->pos;
        next_tok(P);
        n = binop(P, N_BINOP, OP_CAT, pos, n, parse_math2(P));
    }
    return n;
}

static jnode *parse_math1(jparser *P) {
    jnode *n = parse_concat(P);
    while (n && (is_op(cur(P), O_ADD) || is_op(cur(P), O_SUB))) {
        jtok *t = cur(P);
        next_tok(P);
        n = binop(P, N_BINOP, t->op == O_ADD ? OP_ADD : OP_SUB, t->pos, n, parse_concat(P));
    }
    return n;
}

static jnode *parse_compare(jparser *P) {
    jnode *first = parse_math1(P), *n = NULL;
    kids k = {0};
    uint8_t ops[64];
    while (first) {
        jtok *t = cur(P);
        int op = -1;
        if (t->type == TK_OP) {
            op = t->op == O_EQ ? CMP_EQ : t->op == O_NE ? CMP_NE : t->op == O_LT ? CMP_LT
               : t->op == O_LE ? CMP_LE : t->op == O_GT ? CMP_GT : t->op == O_GE ? CMP_GE : -1;
            if (op >= 0) next_tok(P);
        } else if (is_name(t, "in")) {
            op = CMP_IN;
            next_tok(P);
        } else if (is_name(t, "not") && is_name(peek(P, 1), "in")) {
            op = CMP_NOTIN;
            next_tok(P);
            next_tok(P);
        }
        if (op < 0) break;
        if (k.n >= sizeof ops) {
            moe8_jp_fail(P, t->pos, MOE8_ERR_UNSUPPORTED, "more than %zu chained comparisons", sizeof ops);
            return NULL;
        }
        ops[k.n] = (uint8_t)op;
        jnode *rhs = parse_math1(P);
        if (!rhs || kids_push(P, &k, rhs)) return NULL;
    }
    if (!first || k.n == 0) return first;
    if (!(n = new_node(P, N_CMP, first->pos)) || !(n->ops = moe8_ja_alloc(&P->t->arena, k.n))) return NULL;
    memcpy(n->ops, ops, k.n);
    n->a = first;
    kids_set(n, &k);
    return n;
}

static jnode *parse_not(jparser *P) {
    jnode *n;
    if (is_name(cur(P), "not")) {
        size_t pos = cur(P)->pos;
        next_tok(P);
        if (enter(P) || !(n = new_node(P, N_NOT, pos)) || !(n->a = parse_not(P))) return NULL;
        P->depth--;
        return n;
    }
    return parse_compare(P);
}

static jnode *parse_and(jparser *P) {
    jnode *n = parse_not(P);
    while (n && is_name(cur(P), "and")) {
        size_t pos = cur(P)->pos;
        next_tok(P);
        n = binop(P, N_AND, 0, pos, n, parse_not(P));
    }
    return n;
}

static jnode *parse_or(jparser *P) {
    jnode *n = parse_and(P);
    while (n && is_name(cur(P), "or")) {
        size_t pos = cur(P)->pos;
        next_tok(P);
        n = binop(P, N_OR, 0, pos, n, parse_and(P));
    }
    return n;
}

static jnode *parse_condexpr(jparser *P) {
    jnode *n = parse_or(P);
    while (n && is_name(cur(P), "if")) {
        jnode *c = new_node(P, N_COND, cur(P)->pos);
        next_tok(P);
        if (!c || !(c->a = parse_or(P))) return NULL;
        c->b = n;
        if (is_name(cur(P), "else")) {
            next_tok(P);
            if (enter(P) || !(c->c = parse_condexpr(P))) return NULL;
            P->depth--;
        }
        n = c;
    }
    return n;
}

static jnode *parse_expression(jparser *P, int with_condexpr) {
    jnode *n;
    if (enter(P)) return NULL;
    n = with_condexpr ? parse_condexpr(P) : parse_or(P);
    P->depth--;
    return n;
}

static int tuple_end(jparser *P, const char *extra_end) {
    jtok *t = cur(P);
    return t->type == TK_VAR_END || t->type == TK_BLOCK_END || t->type == TK_EOF ||
           is_op(t, O_RPAREN) || (extra_end && is_name(t, extra_end));
}

/* Comma-separated expressions: one alone is itself, more (or a trailing
 * comma) a tuple. `simplified`: only primaries (assignment targets). */
static jnode *parse_tuple(jparser *P, int simplified, int with_condexpr, int explicit_paren,
                          const char *extra_end) {
    size_t pos = cur(P)->pos;
    kids k = {0};
    int is_tuple = 0;
    jnode *n;
    for (;;) {
        jnode *e;
        if (k.n && expect_op(P, O_COMMA)) return NULL;
        if (tuple_end(P, extra_end)) break;
        e = simplified ? parse_primary(P) : parse_expression(P, with_condexpr);
        if (!e || kids_push(P, &k, e)) return NULL;
        if (is_op(cur(P), O_COMMA)) is_tuple = 1;
        else break;
    }
    if (!is_tuple) {
        if (k.n) return k.v[0];
        if (!explicit_paren) {
            unexpected(P, "an expression");
            return NULL;
        }
    }
    if (!(n = new_node(P, N_TUPLE, pos))) return NULL;
    kids_set(n, &k);
    return n;
}

/* ---- parser: statements ------------------------------------------------------- */

static jnode *subparse(jparser *P, const char *const *ends, const char *owner);

static int expect_block_end(jparser *P) {
    if (cur(P)->type == TK_BLOCK_END) {
        next_tok(P);
        return 0;
    }
    return unexpected(P, "the end of the statement ('%}')");
}

/* After subparse stopped at `{% name`: consume the name (end tags also their `%}`). */
static int end_tag(jparser *P, int consume_end) {
    next_tok(P); /* the name */
    return consume_end ? expect_block_end(P) : 0;
}

static int check_target(jparser *P, jnode *t) {
    if (t->kind == N_NAME) return 0;
    if (t->kind == N_TUPLE) {
        for (uint32_t i = 0; i < t->n_kids; i++)
            if (t->kids[i]->kind != N_NAME)
                return moe8_jp_fail(P, t->kids[i]->pos, MOE8_ERR_UNSUPPORTED,
                                    "only names can be unpacked into");
        if (t->n_kids) return 0;
    }
    return moe8_jp_fail(P, t->pos, MOE8_ERR_FORMAT, "cannot assign to this expression");
}

static jnode *parse_if(jparser *P, size_t pos) {
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    static const char *const else_end[] = {"endif", NULL};
    jnode *n = new_node(P, N_IF, pos);
    if (!n || !(n->a = parse_tuple(P, 0, 0, 0, NULL)) || expect_block_end(P) ||
        !(n->b = subparse(P, ends, "if")))
        return NULL;
    if (is_name(cur(P), "elif")) {
        jnode *body = new_node(P, N_BODY, cur(P)->pos), *elif;
        kids k = {0};
        size_t epos = cur(P)->pos;
        if (!body || end_tag(P, 0) || !(elif = parse_if(P, epos)) || kids_push(P, &k, elif)) return NULL;
        kids_set(body, &k);
        n->c = body;
        return n; /* the innermost if consumed endif */
    }
    if (is_name(cur(P), "else")) {
        if (end_tag(P, 1) || !(n->c = subparse(P, else_end, "if"))) return NULL;
    }
    return end_tag(P, 1) ? NULL : n;
}

static jnode *parse_for(jparser *P, size_t pos) {
    static const char *const ends[] = {"endfor", "else", NULL};
    static const char *const else_end[] = {"endfor", NULL};
    jnode *n = new_node(P, N_FOR, pos);
    if (!n || !(n->a = parse_tuple(P, 1, 0, 0, "in")) || check_target(P, n->a)) return NULL;
    if (!is_name(cur(P), "in")) {
        unexpected(P, "'in'");
        return NULL;
    }
    next_tok(P);
    if (!(n->b = parse_tuple(P, 0, 0, 0, "recursive"))) return NULL;
    if (is_name(cur(P), "if")) {
        next_tok(P);
        if (!(n->c = parse_expression(P, 1))) return NULL;
    }
    if (is_name(cur(P), "recursive")) {
        moe8_jp_fail(P, cur(P)->pos, MOE8_ERR_UNSUPPORTED, "recursive loops are not supported");
        return NULL;
    }
    if (expect_block_end(P)) return NULL;
    P->loop_depth++;
    n->d = subparse(P, ends, "for");
    P->loop_depth--;
    if (!n->d) return NULL;
    if (is_name(cur(P), "else")) {
        if (end_tag(P, 1) || !(n->e = subparse(P, else_end, "for"))) return NULL;
    }
    return end_tag(P, 1) ? NULL : n;
}

static jnode *parse_set(jparser *P, size_t pos) {
    static const char *const ends[] = {"endset", NULL};
    jnode *n = new_node(P, N_SET, pos);
    if (!n) return NULL;
    if (cur(P)->type == TK_NAME && is_op(peek(P, 1), O_DOT)) { /* ns.attr */
        jnode *obj = new_node(P, N_NAME, cur(P)->pos), *attr;
        if (!obj) return NULL;
        obj->lit = jv_str(cur(P)->s, cur(P)->n);
        next_tok(P);
        next_tok(P);
        if (cur(P)->type != TK_NAME) {
            unexpected(P, "an attribute name");
            return NULL;
        }
        if (!(attr = new_node(P, N_ATTR, cur(P)->pos))) return NULL;
        attr->a = obj;
        attr->lit = jv_str(cur(P)->s, cur(P)->n);
        next_tok(P);
        n->a = attr;
    } else if (!(n->a = parse_tuple(P, 1, 0, 0, NULL)) || check_target(P, n->a)) {
        return NULL;
    }
    if (is_op(cur(P), O_ASSIGN)) {
        next_tok(P);
        if (!(n->b = parse_tuple(P, 0, 1, 0, NULL)) || expect_block_end(P)) return NULL;
        return n;
    }
    if (is_op(cur(P), O_PIPE)) {
        moe8_jp_fail(P, cur(P)->pos, MOE8_ERR_UNSUPPORTED, "filtered block assignments are not supported");
        return NULL;
    }
    if (n->a->kind != N_NAME) {
        moe8_jp_fail(P, n->a->pos, MOE8_ERR_UNSUPPORTED, "a block assignment takes one name");
        return NULL;
    }
    if (expect_block_end(P) || !(n->c = subparse(P, ends, "set")) || end_tag(P, 1)) return NULL;
    return n;
}

static jnode *parse_macro(jparser *P, size_t pos) {
    static const char *const ends[] = {"endmacro", NULL};
    jnode *n = new_node(P, N_MACRO, pos);
    kids k = {0};
    int saved_loop = P->loop_depth;
    if (!n) return NULL;
    if (P->in_macro) {
        moe8_jp_fail(P, pos, MOE8_ERR_UNSUPPORTED, "a macro inside a macro is not supported");
        return NULL;
    }
    if (cur(P)->type != TK_NAME) {
        unexpected(P, "a macro name");
        return NULL;
    }
    n->lit = jv_str(cur(P)->s, cur(P)->n);
    next_tok(P);
    if (expect_op(P, O_LPAREN)) return NULL;
    while (!is_op(cur(P), O_RPAREN)) {
        jnode *param;
        if (k.n && expect_op(P, O_COMMA)) return NULL;
        if (is_op(cur(P), O_RPAREN)) break;
        if (cur(P)->type != TK_NAME) {
            unexpected(P, "a parameter name");
            return NULL;
        }
        if (!(param = new_node(P, N_NAME, cur(P)->pos))) return NULL;
        param->lit = jv_str(cur(P)->s, cur(P)->n);
        next_tok(P);
        if (is_op(cur(P), O_ASSIGN)) {
            next_tok(P);
            if (!(param->a = parse_expression(P, 1))) return NULL;
        } else if (k.n && k.v[k.n - 1]->a) {
            moe8_jp_fail(P, param->pos, MOE8_ERR_FORMAT,
                         "a parameter without a default follows one with a default");
            return NULL;
        }
        if (kids_push(P, &k, param)) return NULL;
    }
    next_tok(P);
    kids_set(n, &k);
    if (expect_block_end(P)) return NULL;
    P->in_macro = 1;
    P->loop_depth = 0;
    n->b = subparse(P, ends, "macro");
    P->in_macro = 0;
    P->loop_depth = saved_loop;
    return n->b && !end_tag(P, 1) ? n : NULL;
}

static jnode *parse_statement(jparser *P) {
    static const char *const gen_end[] = {"endgeneration", NULL};
    static const char *const unsupported[] = {
        "include", "import", "from", "extends", "block", "call", "filter", "with", "autoescape", "do",
        "trans", "pluralize", "print", "endblock", "endcall", "endfilter", "endwith", NULL,
    };
    jtok *t = cur(P);
    size_t pos = t->pos;
    jnode *n;
    if (t->type != TK_NAME) {
        unexpected(P, "a statement name");
        return NULL;
    }
    next_tok(P);
    if (is_name(t, "if")) return parse_if(P, pos);
    if (is_name(t, "for")) return parse_for(P, pos);
    if (is_name(t, "set")) return parse_set(P, pos);
    if (is_name(t, "macro")) return parse_macro(P, pos);
    if (is_name(t, "break") || is_name(t, "continue")) {
        if (!P->loop_depth) {
            moe8_jp_fail(P, pos, MOE8_ERR_FORMAT, "'%.*s' outside a for loop", (int)t->n, t->s);
            return NULL;
        }
        if (!(n = new_node(P, is_name(t, "break") ? N_BREAK : N_CONTINUE, pos)) || expect_block_end(P))
            return NULL;
        return n;
    }
    if (is_name(t, "generation")) {
        if (expect_block_end(P) || !(n = subparse(P, gen_end, "generation")) || end_tag(P, 1))
            return NULL;
        return n;
    }
    for (int i = 0; unsupported[i]; i++)
        if (is_name(t, unsupported[i])) {
            moe8_jp_fail(P, pos, MOE8_ERR_UNSUPPORTED, "the tag '%s' is not supported", unsupported[i]);
            return NULL;
        }
    moe8_jp_fail(P, pos, MOE8_ERR_FORMAT, "unknown tag '%.*s'", (int)(t->n > 40 ? 40 : t->n), t->s);
    return NULL;
}

/* Statements until `{% <one of ends>` (left for the caller) or, with ends
 * NULL, the end of the template. */
static jnode *subparse(jparser *P, const char *const *ends, const char *owner) {
    jnode *body = new_node(P, N_BODY, cur(P)->pos), *n;
    kids k = {0};
    size_t start = cur(P)->pos;
    if (!body || enter(P)) return NULL;
    for (;;) {
        jtok *t = cur(P);
        if (t->type == TK_EOF) {
            if (ends) {
                int line, col;
                moe8_jinja_line_col(P->t->src, P->t->len, start, &line, &col);
                moe8_jp_fail(P, t->pos, MOE8_ERR_FORMAT, "unexpected end of template: the '%s' block "
                             "of line %d is not closed with 'end%s'", owner, line, owner);
                return NULL;
            }
            break;
        }
        if (t->type == TK_DATA) {
            if (!(n = new_node(P, N_TEXT, t->pos))) return NULL;
            n->lit = jv_str(t->s, t->n);
            next_tok(P);
        } else if (t->type == TK_VAR_BEGIN) {
            next_tok(P);
            if (!(n = new_node(P, N_OUT, t->pos)) || !(n->a = parse_tuple(P, 0, 1, 0, NULL)))
                return NULL;
            if (cur(P)->type != TK_VAR_END) {
                unexpected(P, "the end of the expression ('}}')");
                return NULL;
            }
            next_tok(P);
        } else if (t->type == TK_BLOCK_BEGIN) {
            jtok *name = peek(P, 1);
            for (int i = 0; ends && ends[i]; i++)
                if (is_name(name, ends[i])) {
                    next_tok(P); /* leave the name for the caller */
                    kids_set(body, &k);
                    P->depth--;
                    return body;
                }
            if (name->type == TK_NAME && name->n > 3 &&
                (!memcmp(name->s, "end", 3) || is_name(name, "else") || is_name(name, "elif"))) {
                if (ends)
                    moe8_jp_fail(P, name->pos, MOE8_ERR_FORMAT,
                                 "unexpected '%.*s' inside '%s' (expected 'end%s')",
                                 (int)(name->n > 40 ? 40 : name->n), name->s, owner, owner);
                else
                    moe8_jp_fail(P, name->pos, MOE8_ERR_FORMAT, "unexpected '%.*s' outside any block",
                                 (int)(name->n > 40 ? 40 : name->n), name->s);
                return NULL;
            }
            next_tok(P);
            if (!(n = parse_statement(P))) return NULL;
        } else {
            unexpected(P, "template text or a tag");
            return NULL;
        }
        if (kids_push(P, &k, n)) return NULL;
    }
    kids_set(body, &k);
    P->depth--;
    return body;
}

/* ---- entry --------------------------------------------------------------------- */

moe8_status moe8_jinja_parse(const char *src, size_t len, const char *name, jinja_template **out,
                        moe8_error *err) {
    jinja_template *t;
    jparser P = {0};
    moe8_error local;
    size_t bad;
    *out = NULL;
    if (!err) err = &local;
    if (!src && len) return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "jinja_parse: NULL source");
    if (len > SRC_MAX)
        return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1, "%s: %zu bytes, more than the %zu supported",
                         name, len, SRC_MAX);
    if (!(t = calloc(1, sizeof *t))) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "%s: out of memory", name);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->arena.limit = 64 * len + ((size_t)1 << 20);
    P.t = t;
    P.err = err;
    if ((bad = moe8_utf8_valid(src, len)) != (size_t)-1) {
        int line, col;
        moe8_jinja_line_col(src, len, bad, &line, &col);
        moe8_fail(err, MOE8_ERR_FORMAT, (int64_t)bad, "%s line %d, column %d: not valid UTF-8",
                  name, line, col);
        goto fail;
    }
    if (!(t->src = moe8_ja_alloc(&t->arena, len + 1))) {
        moe8_fail(err, MOE8_ERR_NOMEM, -1, "%s: out of memory", name);
        goto fail;
    }
    if (moe8_jp_lex(&P, src, len) || !(t->root = subparse(&P, NULL, NULL))) goto fail;
    free(P.tk);
    *out = t;
    return MOE8_OK;
fail:
    free(P.tk);
    moe8_jinja_free(t);
    return err->code;
}

void moe8_jinja_free(jinja_template *t) {
    if (!t) return;
    moe8_ja_free(&t->arena);
    free(t);
}
