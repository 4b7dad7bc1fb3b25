/*
 * fuzz_tokenizer.c — libFuzzer target over the real tokenizers, loaded once
 * from .deps: Qwen3 (MOE8_TOKENIZER_DIR), Llama-2/Mistral and DeepSeek-V3 (the
 * last two skipped when their files are missing). The first input byte picks:
 *   bits 1-2  the tokenizer: 1 Llama-2/Mistral, 2 DeepSeek-V3, else Qwen3;
 *   bit 3     MOE8_TOKENIZE_NO_SPECIAL (text) / MOE8_DETOK_SKIP_SPECIAL (ids);
 *   bit 0     the mode:
 *   0: tokenize the rest. Invalid UTF-8 must fail cleanly with the offset
 *      of the first bad byte; valid text must succeed, every id must be in
 *      the vocabulary, and detokenizing must give the text back: NFC(text)
 *      for Qwen3, text for DeepSeek-V3, and for Llama-2/Mistral (with special
 *      tokens as text) the text with each "▁" a space.
 *   1: read the rest as little-endian ids (some out of range) and stream
 *      them through the detokenizer: every chunk must be valid UTF-8.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "moe8.h"

enum { QWEN3, LLAMA2, DEEPSEEK_V3 };
static moe8_tokenizer *toks[3];

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

/* What detokenize(tokenize(s)) must be, in a heap buffer (NULL: no property). */
static uint8_t *round_trip(int which, unsigned flags, const uint8_t *s, size_t n, size_t *len) {
    utf8proc_uint8_t *out = NULL;
    size_t o = 0;
    if (which == QWEN3) {
        utf8proc_ssize_t m = utf8proc_map(s, (utf8proc_ssize_t)n, &out,
                                          UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        *len = m < 0 ? 0 : (size_t)m;
        return out;
    }
    if (which == LLAMA2 && !(flags & MOE8_TOKENIZE_NO_SPECIAL)) return NULL;
    if (!(out = malloc(n + 1))) abort();
    for (size_t i = 0; i < n; i++) {
        if (which == LLAMA2 && i + 2 < n && !memcmp(s + i, "\xe2\x96\x81", 3)) {
            out[o++] = ' ';
            i += 2;
        } else {
            out[o++] = s[i];
        }
    }
    *len = o;
    return out;
}

static void check_text(int which, unsigned flags, const uint8_t *s, size_t n) {
    const moe8_tokenizer *tok = toks[which];
    size_t cap = 4 * n + 16, n_ids = 0, n_out = 0, n_want = 0, bad = first_bad(s, n);
    int32_t *ids = malloc(cap * sizeof *ids);
    char *out = malloc(4 * n + 64);
    uint8_t *want = NULL;
    moe8_error e;
    moe8_status st = moe8_tokenize_ex(tok, (const char *)s, n, flags, ids, cap, &n_ids, &e);
    if (bad < n) {
        if (st != MOE8_ERR_FORMAT || e.offset != (int64_t)bad) abort();
        goto out;
    }
    if (st != MOE8_OK) abort();
    for (size_t i = 0; i < n_ids; i++)
        if (!moe8_tokenizer_token_bytes(tok, ids[i], NULL, NULL)) abort();
    if (moe8_detokenize(tok, ids, n_ids, 0, out, 4 * n + 64, &n_out, &e) != MOE8_OK) abort();
    want = round_trip(which, flags, s, n, &n_want);
    if (want && (n_want != n_out || memcmp(want, out, n_out) != 0)) abort();
out:
    free(want);
    free(out);
    free(ids);
}

static void check_ids(int which, const uint8_t *s, size_t n) {
    moe8_detok *d;
    const char *text;
    size_t len;
    if (moe8_detok_create(toks[which], s[0] & 8 ? MOE8_DETOK_SKIP_SPECIAL : 0, &d, NULL) != MOE8_OK)
        abort();
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

static void load_all(void) {
    static const char *const dirs[3] = {MOE8_TOKENIZER_DIR, MOE8_DEPS_DIR "/llama2-tokenizer",
                                        MOE8_DEPS_DIR "/deepseek-v3-tokenizer"};
    moe8_error e;
    for (int i = 0; i < 3; i++)
        if (moe8_tokenizer_load(dirs[i], &toks[i], &e) != MOE8_OK) {
            fprintf(stderr, "fuzz_tokenizer: %s%s\n", e.message, i ? " (skipped)" : "");
            if (i == QWEN3) abort();
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int loaded;
    int which;
    if (!loaded) load_all(), loaded = 1;
    if (size == 0) return 0;
    which = (data[0] >> 1 & 3) == 1 ? LLAMA2 : (data[0] >> 1 & 3) == 2 ? DEEPSEEK_V3 : QWEN3;
    if (!toks[which]) which = QWEN3;
    if (data[0] & 1) check_ids(which, data, size);
    else check_text(which, data[0] & 8 ? MOE8_TOKENIZE_NO_SPECIAL : 0, data + 1, size - 1);
    return 0;
}
