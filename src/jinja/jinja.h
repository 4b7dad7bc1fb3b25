/*
 * jinja.h — moe8's Jinja2 interpreter for chat templates, as the rest of the
 * library sees it: parse a template once, render it any number of times
 * (concurrently: a parsed template is read-only) with a JSON object of
 * variables. Not part of the public API (tok_template.c wraps it).
 *
 * The subset, its limits and how it differs from Python's jinja2 are in
 * jinja_impl.h and docs/SEMANTICS.md §9. Rendering is as Hugging Face's
 * apply_chat_template sets jinja2 up: trim_blocks, lstrip_blocks, no
 * autoescape, loop controls, raise_exception and an unescaped tojson.
 */
#ifndef MOE8_JINJA_H
#define MOE8_JINJA_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "core/core.h"

typedef struct jinja_template jinja_template;

/* What one render may use; past any of them it fails with a message naming
 * the limit (never a crash or a hang, whatever the template). */
typedef struct {
    size_t max_output;   /* bytes of rendered text (also of any one string value) */
    size_t max_memory;   /* bytes of values (and text being written) while rendering */
    uint64_t max_steps;  /* evaluation steps: nodes, loop turns, bytes copied / 64 */
    int max_depth;       /* nested evaluation: expressions, blocks, macro calls */
} jinja_limits;

/* 16 MiB output, 256 MiB of values, 20 M steps, depth 500. */
jinja_limits moe8_jinja_limits_default(void);

/* Parse src[0..len) (UTF-8). `name` starts every error message ("chat
 * template", "'x/tokenizer_config.json' chat_template"). Syntax errors are
 * MOE8_ERR_FORMAT and syntax outside the subset MOE8_ERR_UNSUPPORTED, both
 * "<name> line L, column C: ..." with err->offset the byte offset in src. */
moe8_status moe8_jinja_parse(const char *src, size_t len, const char *name, jinja_template **out,
                        moe8_error *err);
void moe8_jinja_free(jinja_template *t);

/* Render with the variables of the JSON object `vars` (NULL: none). On
 * success *out is a malloc'd NUL-terminated string of *n_out bytes (free()
 * it). A raise_exception(msg) in the template fails with MOE8_ERR_INVALID_ARG
 * and the message "<name>: msg"; any other runtime error (an undefined value
 * used, a type error, a limit) with MOE8_ERR_INVALID_ARG and "<name> line L,
 * column C: ...". lim NULL: moe8_jinja_limits_default(). */
moe8_status moe8_jinja_render(const jinja_template *t, const cJSON *vars, const jinja_limits *lim,
                         char **out, size_t *n_out, moe8_error *err);

#endif
