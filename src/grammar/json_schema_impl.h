/*
 * json_schema_impl.h — internal to src/grammar/: what the JSON Schema
 * converter's driver (json_schema.c: names, primitives, $ref, enum/const,
 * anyOf, the walk over a schema) shares with its keyword handlers
 * (json_schema_types.c: integer ranges, strings, objects, arrays).
 */
#ifndef MOE8_GRAMMAR_JSON_SCHEMA_IMPL_H
#define MOE8_GRAMMAR_JSON_SCHEMA_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "core/buf.h"
#include "core/core.h"

typedef struct {
    const cJSON *node;
    char *name;
    int done;
    uint64_t content; /* the content counter when it started */
} refrule;

typedef struct {
    const cJSON *root;
    moe8_error *err;
    moe8_status st;
    moe8_buf out;   /* rules */
    moe8_buf path;  /* JSON pointer of the schema being visited */
    char **names;   /* taken rule names */
    size_t n_names, cap_names;
    refrule *refs;
    size_t n_refs, cap_refs;
    unsigned prims; /* primitive rules emitted (bits) */
    uint64_t content;
    int depth;
} conv;

/* Primitive rules (llama.cpp's), emitted once each with what they use. */
enum {
    P_SPACE = 1, P_CHAR = 2, P_STRING = 4, P_NUMBER = 8, P_INTEGER = 16, P_BOOLEAN = 32,
    P_NULL = 64, P_VALUE = 128, P_OBJECT = 256, P_ARRAY = 512
};

/* JSON types. */
enum { T_STRING = 1, T_NUMBER = 2, T_INTEGER = 4, T_BOOLEAN = 8, T_NULL = 16, T_OBJECT = 32, T_ARRAY = 64 };


/* The schema being visited, as a JSON pointer for messages. */
static inline const char *where(const conv *c) { return c->path.n ? c->path.p : "the root"; }
/* Back to the pointer of moe8_js_path_push's answer `old`. */
static inline void path_pop(conv *c, size_t old) {
    c->path.n = old;
    if (c->path.p) c->path.p[old] = 0;
}

/* json_schema.c */
/* The first error ("json_schema: ..."), kept in c->st; c->st. */
moe8_status moe8_js_fail(conv *c, const char *fmt, ...) MOE8_PRINTF(2, 3);
moe8_status moe8_js_oom(conv *c);
/* Append /seg (escaped as a JSON pointer), or /seg/i; the length before. */
size_t moe8_js_path_push(conv *c, const char *seg);
size_t moe8_js_path_push_idx(conv *c, const char *seg, int i);
/* Emit `name ::= body` under a fresh name from hint; the name (NULL on error). */
const char *moe8_js_add_rule(conv *c, const char *hint, const char *body);
/* The same with b's text as the body; b is freed (out of memory in b: NULL, the error). */
const char *moe8_js_add_rule_buf(conv *c, const char *hint, moe8_buf *b);
/* The name of primitive `which` (a P_* bit), emitted on first use. */
const char *moe8_js_prim(conv *c, unsigned which);
/* text[0..n) as a GBNF string literal. */
void moe8_js_gbnf_literal(moe8_buf *b, const char *text, size_t n);
/* A non-negative integer keyword: 0 and *out (default `def` when absent), -1 on error. */
int moe8_js_get_count(conv *c, const cJSON *s, const char *key, int64_t def, int64_t *out);
/* The rule (or primitive) name for schema s; NULL on error (c->st). */
const char *moe8_js_visit(conv *c, const cJSON *s, const char *hint);

/* json_schema_types.c: the rule for s as the JSON types `types` (T_* bits). */
const char *moe8_js_typed_rule(conv *c, const cJSON *s, unsigned types, const char *hint);

#endif
