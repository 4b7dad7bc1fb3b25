/*
 * fuzz_tokenizer.c — libFuzzer target over the real Qwen3 tokenizer (loaded
 * once from MOE8_TOKENIZER_DIR). The first input byte picks a mode:
 *   even: tokenize the rest. Invalid UTF-8 must fail cleanly with the offset
 *         of the first bad byte; valid text must succeed, every id must be in
 *         the vocabulary, and detokenizing must give back NFC(text).
 *   odd:  read the rest as little-endian ids (some out of range) and stream
 *         them through the detokenizer: every chunk must be valid UTF-8.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "moe8.h"

static moe8_tokenizer *tok;

/* Offset of the first invalid UTF-8 byte, or size when all valid (via utf8proc). */
static size_t first_bad(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate(s + i, (utf8proc_ssize_t)(n - i), &cp);
        if (k <= 0) return i;
        i += (size_t)k;
    }
    return n;
}

static void check_text(const uint8_t *s, size_t n) {
    size_t cap = 4 * n + 16, n_ids = 0, n_out = 0, bad = first_bad(s, n);
    int32_t *ids = malloc(cap * sizeof *ids);
    char *out = malloc(4 * n + 64);
    utf8proc_uint8_t *nfc = NULL;
    moe8_error e;
    moe8_status st = moe8_tokenize(tok, (const char *)s, n, ids, cap, &n_ids, &e);
    if (bad < n) {
        if (st != MOE8_ERR_FORMAT || e.offset != (int64_t)bad) abort();
        goto out;
    }
    if (st != MOE8_OK) abort();
    for (size_t i = 0; i < n_ids; i++)
        if (!moe8_tokenizer_token_bytes(tok, ids[i], NULL, NULL)) abort();
    if (moe8_detokenize(tok, ids, n_ids, 0, out, 4 * n + 64, &n_out, &e) != MOE8_OK) abort();
    utf8proc_ssize_t m = utf8proc_map(s, (utf8proc_ssize_t)n, &nfc, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    if (m < 0 || (size_t)m != n_out || memcmp(nfc, out, n_out) != 0) abort();
out:
    free(nfc);
    free(out);
    free(ids);
}

static void check_ids(const uint8_t *s, size_t n) {
    moe8_detok *d;
    const char *text;
    size_t len;
    if (moe8_detok_new(tok, s[0] & 2 ? MOE8_DETOK_SKIP_SPECIAL : 0, &d, NULL) != MOE8_OK) abort();
    for (size_t i = 0; i + 3 < n; i += 3) {
        int32_t id = (int32_t)(s[i + 1] | s[i + 2] << 8 | (uint32_t)(s[i + 3] & 3) << 16);
        if (moe8_detok_feed(d, id, &text, &len, NULL) == MOE8_OK &&
            first_bad((const uint8_t *)text, len) != len)
            abort();
    }
    moe8_detok_flush(d, &text, &len);
    if (first_bad((const uint8_t *)text, len) != len) abort();
    moe8_detok_free(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    moe8_error e;
    if (!tok && moe8_tokenizer_load(MOE8_TOKENIZER_DIR, &tok, &e) != MOE8_OK) {
        fprintf(stderr, "fuzz_tokenizer: %s\n", e.message);
        abort();
    }
    if (size == 0) return 0;
    if (data[0] & 1) check_ids(data, size);
    else check_text(data + 1, size - 1);
    return 0;
}
