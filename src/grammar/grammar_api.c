/*
 * grammar_api.c — the public face of constrained decoding (moe8.h's
 * moe8_grammar_*): the opaque moe8_grammar is grammar/grammar.h's compiled
 * grammar.
 */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "grammar/grammar.h"

moe8_status moe8_grammar_compile(const char *gbnf, size_t len, moe8_grammar **out, moe8_error *err) {
    grammar *g = NULL;
    moe8_status st;
    if (!out || (!gbnf && len)) return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "grammar: NULL argument");
    *out = NULL;
    if ((st = moe8_grammar_build(gbnf ? gbnf : "", len, &g, err))) return st;
    *out = (moe8_grammar *)(void *)g;
    return MOE8_OK;
}

moe8_status moe8_grammar_from_json_schema(const char *schema_json, size_t len, moe8_grammar **out,
                                          moe8_error *err) {
    char *gbnf = NULL;
    moe8_status st;
    if (!out || !schema_json) return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "json_schema: NULL argument");
    *out = NULL;
    if ((st = moe8_json_schema_to_gbnf(schema_json, len, &gbnf, err))) return st;
    st = moe8_grammar_compile(gbnf, strlen(gbnf), out, err);
    free(gbnf);
    return st;
}

void moe8_grammar_free(moe8_grammar *g) { moe8_grammar_destroy((grammar *)(void *)g); }
