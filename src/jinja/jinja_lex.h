/*
 * jinja_lex.h — the tokens jinja_lex.c makes of a template's source and
 * jinja_parse.c reads, and the parser state both work on. Internal to jinja/.
 */
#ifndef MOE8_JINJA_LEX_H
#define MOE8_JINJA_LEX_H

#include <string.h>

#include "jinja/jinja_impl.h"

#define SRC_MAX ((size_t)1 << 20) /* bytes of source: chat templates are tens of KiB */
#define PARSE_MAX_DEPTH 200       /* brackets, expressions and blocks */

typedef enum {
    TK_DATA, TK_VAR_BEGIN, TK_VAR_END, TK_BLOCK_BEGIN, TK_BLOCK_END, TK_NAME, TK_STRING,
    TK_INT, TK_FLOAT, TK_OP, TK_EOF,
} tk_type;

/* TK_OP operators (jtok.op), in the order of jinja_lex.c's OP_TEXT. */
enum {
    O_ADD, O_SUB, O_DIV, O_FDIV, O_MUL, O_MOD, O_POW, O_TILDE, O_LBRACKET, O_RBRACKET,
    O_LPAREN, O_RPAREN, O_LBRACE, O_RBRACE, O_EQ, O_NE, O_GT, O_GE, O_LT, O_LE, O_ASSIGN,
    O_DOT, O_COLON, O_PIPE, O_COMMA, O_SEMI,
};

typedef struct {
    uint8_t type, op;
    uint32_t pos;
    const char *s;   /* TK_DATA, TK_NAME, TK_STRING (decoded) */
    size_t n;
    int64_t i;
    double f;
} jtok;

typedef struct {
    jinja_template *t;
    jtok *tk;
    size_t n_tk, cap_tk, i;
    int depth, loop_depth, in_macro;
    moe8_error *err;
} jparser;

/* Reading the tokens: the current one, the k-th after it (TK_EOF past the
 * end), moving on (never past TK_EOF). */
static inline jtok *cur(jparser *P) { return &P->tk[P->i]; }
static inline jtok *peek(jparser *P, size_t k) {
    return P->i + k < P->n_tk ? &P->tk[P->i + k] : &P->tk[P->n_tk - 1];
}
static inline void next_tok(jparser *P) {
    if (P->tk[P->i].type != TK_EOF) P->i++;
}
static inline int is_op(const jtok *t, int op) { return t->type == TK_OP && t->op == op; }
static inline int is_name(const jtok *t, const char *name) {
    return t->type == TK_NAME && t->n == strlen(name) && !memcmp(t->s, name, t->n);
}

/* Fail the parse at source offset pos with "<name> line L, column C: ..."
 * in P->err; returns -1. */
int moe8_jp_fail(jparser *P, size_t pos, moe8_status code, const char *fmt, ...) MOE8_PRINTF(4, 5);

/* Validate src[0..len) as UTF-8, keep it newline-normalized in P->t->src
 * (P->t->len) and lex it into P->tk, ending with TK_EOF: 0, or -1 with
 * P->err filled. */
int moe8_jp_lex(jparser *P, const char *src, size_t len);

/* What a token looks like in an error message ("'name'", "a string", ...). */
const char *moe8_jp_tok_desc(const jtok *t, char *buf, size_t cap);

#endif
