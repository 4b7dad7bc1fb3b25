/*
 * tokenizer.h — internal layout of the byte-level BPE tokenizer shared by
 * tok_load.c (building it), tok_encode.c (text -> ids), tok_decode.c
 * (ids -> text) and tok_map.c (the two hash maps). Not part of the public API.
 *
 * Tokens are stored as their raw bytes (the ByteLevel "Ġ"-style spelling of
 * tokenizer.json is decoded once at load), so BPE runs directly on the bytes
 * of the text and decoding is a plain concatenation.
 */
#ifndef MOE8_TOKENIZER_INTERNAL_H
#define MOE8_TOKENIZER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/core.h"

/* Longest accepted text for one moe8_tokenize call: BPE positions are int32. */
#define TOK_MAX_TEXT ((size_t)1 << 29)   /* NFC may grow text up to 3x */

/* Raw bytes -> token id, open addressing over ids whose bytes live in the
 * tokenizer's pool. */
typedef struct {
    int32_t *slots;   /* [mask + 1], -1 = empty */
    size_t mask;      /* slot count - 1 (a power of two minus one) */
} tok_strmap;

/* (left id, right id) -> (merge rank, merged id). */
typedef struct {
    uint64_t key;     /* (uint64_t)left << 32 | right; UINT64_MAX = empty */
    int32_t rank;     /* index in the "merges" list (lower merges first) */
    int32_t new_id;   /* id of the concatenation */
} tok_pair;

typedef struct {
    tok_pair *slots;  /* [mask + 1] */
    size_t mask;
} tok_pairmap;

struct moe8_tokenizer {
    int32_t n_vocab;        /* largest id + 1 (ids may have holes) */
    uint32_t *tok_off;      /* [n_vocab] offset of a token's bytes in pool */
    uint32_t *tok_len;      /* [n_vocab] byte length; TOK_UNASSIGNED for a hole */
    uint8_t *tok_flags;     /* [n_vocab] MOE8_TOKEN_* bits */
    char *pool;             /* [pool_len] raw bytes of every token */
    size_t pool_len;
    size_t max_token_len;   /* longest token in bytes */

    tok_strmap vocab;       /* regular ("model.vocab") tokens only */
    tok_pairmap merges;
    int32_t byte_id[256];   /* id of the one-byte token of each byte value */
    int ignore_merges;      /* model.ignore_merges: whole-word lookup first */
    int nfc;                /* normalizer is NFC */

    int32_t n_added;        /* "added_tokens", matched before everything else */
    int32_t *added;         /* [n_added] ids sorted by first byte, then longest first */
    int32_t added_first[257]; /* added[added_first[b] .. added_first[b+1]) start with byte b */

    pcre2_code *re;         /* Split pre-tokenizer regex (UTF, UCP; JIT when available) */
    int re_jit;             /* pcre2_jit_compile succeeded */

    int add_bos;            /* tokenizer_config.json add_bos_token */
    int32_t bos_id, eos_id; /* tokenizer_config.json bos_token / eos_token, or -1 */
    struct tok_chat *chat;  /* chat template (tok_template.c), NULL without tokenizer_config.json */
};

#define TOK_UNASSIGNED UINT32_MAX

static inline const char *tok_bytes(const struct moe8_tokenizer *t, int32_t id, size_t *len) {
    *len = t->tok_len[id];
    return t->pool + t->tok_off[id];
}

/* tok_map.c */
int tok_strmap_init(tok_strmap *m, size_t n_keys);
void tok_strmap_free(tok_strmap *m);
/* Insert id (its bytes are already in the pool); returns the id already
 * holding the same bytes, or -1 when the insert happened. */
int32_t tok_strmap_put(tok_strmap *m, const struct moe8_tokenizer *t, int32_t id);
int32_t tok_strmap_get(const tok_strmap *m, const struct moe8_tokenizer *t, const char *s,
                       size_t len);
int tok_pairmap_init(tok_pairmap *m, size_t n_keys);
void tok_pairmap_free(tok_pairmap *m);
void tok_pairmap_put(tok_pairmap *m, int32_t left, int32_t right, int32_t rank, int32_t new_id);
const tok_pair *tok_pairmap_get(const tok_pairmap *m, int32_t left, int32_t right);

/* tok_load.c: build a tokenizer from tokenizer.json text json[0..len) and the
 * tokenizer_config.json text cfg[0..cfg_len) (cfg NULL: the file is absent);
 * path and cfg_path name them in errors. moe8_tokenizer_load reads the two
 * files and calls this; the fuzz target calls it directly. */
moe8_status tok_load_json(const char *json, size_t len, const char *path, const char *cfg,
                          size_t cfg_len, const char *cfg_path, struct moe8_tokenizer **out,
                          moe8_error *err);

/* tok_decode.c: one UTF-8 character at s[0..n): returns its length (> 0) when
 * valid and complete, 0 when s is a valid but incomplete prefix, or -k when
 * invalid, k >= 1 being the bytes to replace by one U+FFFD (the maximal
 * subpart rule of Unicode Table 3-7, as Rust's from_utf8_lossy). */
int tok_utf8_char(const uint8_t *s, size_t n);
/* Offset of the first byte of the first invalid or truncated UTF-8 sequence
 * of s[0..n), or (size_t)-1 when all of it is valid. */
size_t tok_utf8_valid(const char *s, size_t n);

#endif
