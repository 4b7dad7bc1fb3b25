/*
 * fuzz_grammar.c — libFuzzer target over the grammar compiler and its
 * automaton. Input: grammar text, optionally followed by a NUL byte and the
 * bytes to walk. Text that parses as JSON is a JSON Schema: if the converter
 * accepts it, its GBNF must compile (a converter that writes a grammar the
 * compiler refuses is a bug). Anything else is GBNF; a refusal must carry a
 * message.
 *
 * A grammar that compiles is walked over a one-token-per-byte vocabulary
 * (token 256 = EOS) for at most 48 steps, following the walk bytes while
 * they are allowed, else the lowest allowed byte. At every step: the mask
 * equals the whole-trie reference walk, each byte's bit says whether a clone
 * accepts it, EOS is allowed exactly where the grammar may end (then the
 * shortest completion is 0), and the mask is never empty (a stuck state).
 * Seeds: tests/fuzz/corpus/fuzz_grammar.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "grammar/grammar.h"

static grammar_vocab *g_bytes;

static void setup(void) {
    static char one[256];
    static const char *raw[257];
    static size_t lens[257];
    int32_t eos = 256;
    for (int b = 0; b < 256; b++) one[b] = (char)b, raw[b] = &one[b], lens[b] = 1;
    if (moe8_grammar_vocab_new_raw(257, raw, lens, &eos, 1, &g_bytes, NULL) != MOE8_OK) abort();
}

static int bit(const uint32_t *m, int t) { return (int)(m[t >> 5] >> (t & 31) & 1); }

static void walk(grammar *g, const uint8_t *w, size_t nw) {
    grammar_state *st;
    uint32_t m[9], r[9];
    if (moe8_grammar_state_new(g, &st, NULL) != MOE8_OK) return;
    for (size_t step = 0; step < 48; step++) {
        int want = -1, any = 0, ce = moe8_grammar_can_end(st);
        moe8_grammar_mask(st, g_bytes, m);
        moe8_grammar_mask_reference(st, g_bytes, r);
        if (memcmp(m, r, sizeof m)) abort();
        if (bit(m, 256) != (ce != 0)) abort();
        if (ce && moe8_grammar_min_remaining(st) != 0) abort();
        for (int b = 0; b < 256; b++) {
            grammar_state *c = moe8_grammar_state_clone(st);
            int ok;
            if (!c) abort();
            ok = moe8_grammar_accept(c, g_bytes, b, NULL) == MOE8_OK;
            moe8_grammar_state_free(c);
            if (ok != bit(m, b)) abort();
            any |= ok;
        }
        if (!any && !ce) abort(); /* stuck */
        if (ce == 2 || !any) break;
        if (step < nw && bit(m, w[step])) want = w[step];
        for (int b = 0; want < 0 && b < 256; b++)
            if (bit(m, b)) want = b;
        if (moe8_grammar_accept(st, g_bytes, want, NULL) != MOE8_OK) abort();
    }
    moe8_grammar_state_free(st);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t n_text = nul ? (size_t)(nul - data) : size;
    const uint8_t *w = nul ? nul + 1 : NULL;
    size_t nw = nul ? size - n_text - 1 : 0;
    grammar *g = NULL;
    moe8_error e;
    char *gbnf = NULL;
    cJSON *j;
    if (!g_bytes) setup();
    if (size > 1 << 16) return 0;
    j = cJSON_ParseWithLength((const char *)data, n_text);
    if (j) {
        cJSON_Delete(j);
        if (moe8_json_schema_to_gbnf((const char *)data, n_text, &gbnf, &e) == MOE8_OK) {
            if (moe8_grammar_build(gbnf, strlen(gbnf), &g, &e) != MOE8_OK) abort();
        } else if (!e.message[0]) {
            abort();
        }
        free(gbnf);
    } else if (moe8_grammar_build((const char *)data, n_text, &g, &e) != MOE8_OK) {
        if (!e.message[0] || e.code != MOE8_ERR_INVALID_ARG) abort();
    }
    if (g) walk(g, w, nw);
    moe8_grammar_destroy(g);
    return 0;
}
