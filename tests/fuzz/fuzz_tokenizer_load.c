/*
 * fuzz_tokenizer_load.c — libFuzzer target over the tokenizer.json loader
 * (moe8_tok_load_json, the in-memory half of moe8_tokenizer_load). Input: the
 * tokenizer.json text, optionally followed by a NUL byte and the
 * tokenizer_config.json text. A tokenizer that loads must then tokenize a few
 * fixed texts into ids it knows and detokenize them; a ByteLevel one whose
 * normalizer is at most NFC must give the text back (the texts are ASCII or
 * already NFC). Other pipelines (Prepend, Replace, Strip, unk) need not.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "moe8.h"
#include "tokenizer/tokenizer.h"

static const char *const texts[] = {
    "Hello, world! 123  abc\tab\n",
    "a<x>b<xy> a aaaa bbbb",
    "h\xc3\xa9llo w\xc3\xb6rld \xe2\x82\xac \xf0\x9f\x98\x80",
};

static void check_text(const moe8_tokenizer *t, const char *s) {
    size_t n = strlen(s), n_ids = 0, n_out = 0;
    int32_t ids[256];
    char *out;
    int lossless = t->byte_level && t->added_norm.n == 0;
    if (moe8_tokenize(t, s, n, ids, 256, &n_ids, NULL) != MOE8_OK) return;   /* e.g. regex limits */
    for (size_t i = 0; i < n_ids; i++)
        if (!moe8_tokenizer_token_bytes(t, ids[i], NULL, NULL)) abort();
    moe8_detokenize(t, ids, n_ids, 0, NULL, 0, &n_out, NULL);   /* its length */
    if (!(out = malloc(n_out + 1)) ||
        moe8_detokenize(t, ids, n_ids, 0, out, n_out + 1, &n_out, NULL) != MOE8_OK)
        abort();
    for (int k = 0; k < t->n_norm; k++) lossless = lossless && t->norm[k].type == TOK_NFC;
    if (lossless && (n_out != n || memcmp(out, s, n) != 0)) abort();
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *json = (const char *)data, *cfg = NULL;
    const uint8_t *nul = memchr(data, 0, size);
    size_t len = size, cfg_len = 0;
    moe8_tokenizer *t = NULL;
    moe8_error e;
    if (nul) {
        len = (size_t)(nul - data);
        cfg = (const char *)nul + 1;
        cfg_len = size - len - 1;
    }
    if (moe8_tok_load_json(json, len, "tokenizer.json", cfg, cfg_len, "tokenizer_config.json", &t,
                      &e) != MOE8_OK) {
        if (t || e.code == MOE8_OK || !e.message[0]) abort();
        return 0;
    }
    if (t->byte_level && moe8_tokenizer_n_vocab(t) < 256) abort();   /* every byte has a token */
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) check_text(t, texts[i]);
    moe8_tokenizer_free(t);
    return 0;
}
