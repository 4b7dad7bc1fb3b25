/*
 * grammar_impl.h — internal to src/grammar/: what the compiler's files share
 * (the parser's rules and classes under construction: grammar_parse.c and
 * grammar_class.c fill them, grammar_compile.c turns them into a grammar) and
 * the walk engine's fields (grammar_walk.c runs it, grammar_state.c copies a
 * request's stacks in and out of it). grammar.h's GRAMMAR_INTERNAL part is
 * what grammar_mask.c sees as well; nothing outside this folder includes this.
 */
#ifndef MOE8_GRAMMAR_IMPL_H
#define MOE8_GRAMMAR_IMPL_H

#ifndef GRAMMAR_INTERNAL
#define GRAMMAR_INTERNAL
#endif
#include <stddef.h>
#include <stdint.h>

#include "core/core.h"
#include "core/index.h"
#include "grammar/grammar.h"

/* ======================================================================== */
/* The parser's output (grammar_parse.c, grammar_class.c)                    */
/* ======================================================================== */

typedef struct { uint8_t kind; uint32_t arg, src; } pel; /* element + source offset */

typedef struct {
    pel *e;
    uint32_t n, cap;
} pvec;

typedef struct {
    const char *name; /* user rules: into the text (not terminated) */
    uint32_t name_len;
    uint32_t owner;   /* the user rule a generated rule belongs to (itself for user rules) */
    uint32_t src;     /* definition (user) or group/repetition (generated) offset */
    uint32_t ref_src; /* first reference, for "undefined rule" */
    uint32_t ref_rule;
    int defined, generated;
    pvec body;
} prule;

/* A character class being built: sorted, merged code point ranges. */
typedef struct { uint32_t lo, hi; } cprange;

typedef struct {
    uint16_t *tab;  /* [n_states][256] */
    uint32_t *min;  /* [n_states] */
    uint32_t n_states;
    uint64_t hash;
} pclass;

typedef struct {
    const char *text;
    size_t len;
    moe8_error *err;
    moe8_status st;
    prule *rules;
    uint32_t n_rules, cap_rules;
    pclass *cls;
    uint32_t n_cls, cap_cls, dfa_states;
    uint32_t byte_cls[256]; /* class id of "exactly this byte", G_NONE until made */
    uint64_t n_elements;
    moe8_index names; /* user rules by name (slots NULL until the first) */
    int depth;
    uint32_t cur; /* rule being parsed */
    uint32_t root; /* the rule named root (set by moe8_gp_parse) */
} parser;

/* grammar_parse.c: parse text[0..len) into P (zeroed first): every rule
 * defined, a root. MOE8_OK, or the error (P->st, err filled); free P with
 * moe8_gp_free either way. */
moe8_status moe8_gp_parse(parser *P, const char *text, size_t len, moe8_error *err);
void moe8_gp_free(parser *P);
/* An error at text offset off ("grammar: line L col C: [in rule 'r': ]..."),
 * kept only when it is the first; P->st. */
moe8_status moe8_gp_err(parser *P, size_t off, const char *fmt, ...) MOE8_PRINTF(3, 4);
moe8_status moe8_gp_oom(parser *P);
/* The user rule rule r belongs to, as text for messages. */
void moe8_gp_rule_label(const parser *P, uint32_t r, char *buf, size_t cap);

/* grammar_class.c: the class id of "exactly byte b", and of the code points
 * r[0..n) (r modified), negated or not; G_NONE on error (reported at src). */
uint32_t moe8_gp_byte_class(parser *P, unsigned b, size_t src);
uint32_t moe8_gp_range_class(parser *P, cprange *r, uint32_t n, int negate, size_t src);

/* ======================================================================== */
/* The walk engine (grammar_walk.c, grammar_state.c)                         */
/* ======================================================================== */

/* Position pos ends an alternative (ALT or END). */
static inline int is_end(const grammar *g, uint32_t pos) {
    return g->kind[pos] == GE_END || g->kind[pos] == GE_ALT;
}

/* The engine's tables (grammar.h's gwk_* functions; grammar_state.c reads the nodes). */
struct gwk {
    const grammar *g;
    int ci, oom;
    /* nodes */
    uint32_t *ncode, *npar, nn, ncap;
    uint8_t *ntag;
    moe8_index nht;
    /* sets */
    uint32_t *soff, *slen, ns, scap;
    uint64_t *sumask, *salive;
    uint32_t *pool;
    size_t np, pcap;
    moe8_index sht;
    /* memo: (set, byte class) -> set */
    moe8_index mt;
    uint64_t *mkey;
    uint32_t *mval, mcap;
    /* step scratch */
    uint32_t *out, nout, outcap;
    uint32_t *work, nwork, workcap;
    uint32_t *mark, markcap, mark_epoch;
    uint32_t *buf[2];
    size_t bufcap[2];
};

/* The initial set: root's alternatives over the empty stack. */
uint32_t moe8_gwk_start(gwk *w);

#endif
