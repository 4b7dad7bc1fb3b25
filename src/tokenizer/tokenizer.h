/*
 * tokenizer.h — internal layout of the BPE tokenizer shared by tok_load.c
 * (building it from tokenizer.json), tok_norm.c (the pipeline stages around the
 * model: normalizer, pre-tokenizer, decoder), tok_encode.c (text -> ids),
 * tok_decode.c (ids -> text) and tok_map.c (the two hash maps). Not part of
 * the public API.
 *
 * Every token has two spellings:
 *   key   what BPE looks up: the model.vocab string, except that a ByteLevel
 *         tokenizer's "Ġ"-style spelling is decoded to raw bytes once at load
 *         (BPE then runs directly on the bytes of the text);
 *   text  what decoding emits: raw bytes, the per-token steps of the decoder
 *         already applied ("▁Hello" -> " Hello", "<0x0A>" -> "\n"), so
 *         detokenizing is a concatenation plus the decoder's Strip at the start.
 * A ByteLevel tokenizer's key and text are the same bytes (key_pool NULL); a
 * vocab entry outside its alphabet (an added token) keeps its spelling and is
 * left out of the key map, as BPE can never produce it.
 */
#ifndef MOE8_TOKENIZER_INTERNAL_H
#define MOE8_TOKENIZER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/core.h"
#include "core/index.h"

struct cJSON;   /* moe8_tok_pipeline_load reads a parsed tokenizer.json */

/* Longest accepted text for one moe8_tokenize call: BPE positions are int32. */
#define TOK_MAX_TEXT ((size_t)1 << 29)   /* NFC may grow text up to 3x */
#define TOK_MAX_NORM ((size_t)INT32_MAX - 64) /* longest normalized stretch */
#define TOK_MAX_STEPS 8                  /* normalizer steps, Split regexes, decoder Replaces */

/* Token key -> id: an index (core/index.h) over ids whose keys (tok_key)
 * live in the tokenizer's pools. */
typedef struct {
    moe8_index x;
} tok_strmap;

/* (left id, right id) -> (merge rank, merged id). */
typedef struct {
    uint64_t key;     /* (uint64_t)left << 32 | right */
    int32_t rank;     /* index in the "merges" list (lower merges first) */
    int32_t new_id;   /* id of the concatenation */
} tok_pair;

typedef struct {
    moe8_index x;     /* over pairs */
    tok_pair *pairs;  /* [cap], n in use */
    size_t n, cap;
} tok_pairmap;

/* One string rewrite: a normalizer step (NFC, Prepend, Replace) or a decoder
 * Replace. Strings are NUL-terminated UTF-8 owned by the step. */
typedef enum { TOK_NFC = 1, TOK_PREPEND, TOK_REPLACE } tok_step_type;
typedef struct {
    tok_step_type type;
    char *from;             /* REPLACE: the pattern (non-empty) */
    char *to;               /* PREPEND: the prefix; REPLACE: the replacement */
    size_t n_from, n_to;
} tok_step;

/* Added tokens matched on one kind of text (raw or normalized), leftmost-longest. */
typedef struct {
    int32_t n;
    int32_t *ids;           /* [n] sorted by first byte, then longest first */
    uint32_t *off, *len;    /* [n] each pattern's bytes in pat */
    char *pat;              /* patterns: the content, or the normalized content */
    int32_t first[257];     /* ids[first[b] .. first[b+1]) start with byte b */
} tok_added_set;

struct moe8_tokenizer {
    int32_t n_vocab;        /* largest id + 1 (ids may have holes) */
    uint32_t *tok_off;      /* [n_vocab] offset of a token's text in pool */
    uint32_t *tok_len;      /* [n_vocab] text length; TOK_UNASSIGNED for a hole */
    uint8_t *tok_flags;     /* [n_vocab] MOE8_TOKEN_* bits */
    char *pool;             /* [pool_len] the text of every token */
    size_t pool_len;
    size_t max_token_len;   /* longest text in bytes */
    uint32_t *key_off;      /* [n_vocab] offset of a token's key in key_pool (NULL: key = text) */
    uint32_t *key_len;      /* [n_vocab] key length (an added token's key is its content) */
    char *key_pool;         /* [key_pool_len] model.vocab spellings; NULL for ByteLevel */
    size_t key_pool_len;
    size_t max_key_len;     /* longest key in bytes */

    tok_strmap vocab;       /* key -> id, regular ("model.vocab") tokens only */
    tok_pairmap merges;
    int ignore_merges;      /* model.ignore_merges: whole-piece lookup first */
    int byte_level;         /* ByteLevel pre-tokenizer and decoder: BPE starts from bytes */
    int byte_fallback;      /* model.byte_fallback: an unknown character becomes <0xNN> tokens */
    int fuse_unk;           /* model.fuse_unk: a run of unknown characters is one unk */
    int32_t unk_id;         /* model.unk_token, or -1 (unknown characters are then dropped) */
    int32_t byte_id[256];   /* ByteLevel: the token of each byte; byte_fallback: <0xNN>; else -1 */

    int n_norm;             /* normalizer steps, applied in order */
    tok_step norm[TOK_MAX_STEPS];
    int n_split;            /* Split pre-tokenizers (Isolated), applied in order */
    pcre2_code *split[TOK_MAX_STEPS]; /* UTF, UCP; JIT when available */
    int n_dec_replace;      /* decoder Replace steps (before ByteFallback), applied at load */
    tok_step dec_replace[TOK_MAX_STEPS];
    int dec_byte_fallback;  /* decoder ByteFallback: "<0xNN>" texts are that byte */
    int strip_start;        /* decoder Strip after Fuse: leading strip_char removed, at most */
    char strip_char[5];     /* ... this many times at the start of a decoded sequence */
    int strip_char_len;

    tok_added_set added_raw;  /* added tokens with normalized false: cut from the raw text */
    tok_added_set added_norm; /* normalized true: cut from each normalized stretch */

    int add_bos;            /* tokenizer_config.json add_bos_token */
    int32_t bos_id, eos_id; /* tokenizer_config.json bos_token / eos_token, or -1 */
    struct tok_chat *chat;  /* chat template (tok_template.c), NULL without tokenizer_config.json */
};

#define TOK_UNASSIGNED UINT32_MAX

static inline const char *tok_bytes(const struct moe8_tokenizer *t, int32_t id, size_t *len) {
    *len = t->tok_len[id];
    return t->pool + t->tok_off[id];
}

static inline const char *tok_key(const struct moe8_tokenizer *t, int32_t id, size_t *len) {
    if (!t->key_pool) return tok_bytes(t, id, len);
    *len = t->key_len[id];
    return t->key_pool + t->key_off[id];
}

/* tok_map.c (keys are tok_key spellings) */
int moe8_tok_strmap_init(tok_strmap *m, size_t n_keys);
void moe8_tok_strmap_free(tok_strmap *m);
/* Insert id (its key is already in place); returns the id already holding
 * the same key, or -1 when the insert happened. */
int32_t moe8_tok_strmap_put(tok_strmap *m, const struct moe8_tokenizer *t, int32_t id);
int32_t moe8_tok_strmap_get(const tok_strmap *m, const struct moe8_tokenizer *t, const char *s,
                       size_t len);
int moe8_tok_pairmap_init(tok_pairmap *m, size_t n_keys);
void moe8_tok_pairmap_free(tok_pairmap *m);
void moe8_tok_pairmap_put(tok_pairmap *m, int32_t left, int32_t right, int32_t rank, int32_t new_id);
const tok_pair *moe8_tok_pairmap_get(const tok_pairmap *m, int32_t left, int32_t right);

/* tok_load.c: build a tokenizer from tokenizer.json text json[0..len) and the
 * tokenizer_config.json text cfg[0..cfg_len) (cfg NULL: the file is absent);
 * path and cfg_path name them in errors. moe8_tokenizer_load reads the two
 * files and calls this; the fuzz target calls it directly. */
moe8_status moe8_tok_load_json(const char *json, size_t len, const char *path, const char *cfg,
                          size_t cfg_len, const char *cfg_path, struct moe8_tokenizer **out,
                          moe8_error *err);

/* tok_json.c: parse tokenizer.json text[0..len) as moe8_json_parse does (same
 * syntax, trailing-bytes and duplicate-key errors naming `label`) into a
 * read-only cJSON tree held by *arena: free it with moe8_tok_json_free, never
 * cJSON_Delete. */
typedef struct moe8_tok_json moe8_tok_json;
moe8_status moe8_tok_json_parse(const char *text, size_t len, const char *label,
                                struct cJSON **out, moe8_tok_json **arena, moe8_error *err);
void moe8_tok_json_free(moe8_tok_json *arena);

/* tok_norm.c: read the normalizer, pre_tokenizer and decoder sections of
 * tokenizer.json (root) into t; `path` names the file in errors. */
moe8_status moe8_tok_pipeline_load(struct moe8_tokenizer *t, const struct cJSON *root,
                              const char *path, moe8_error *err);
void moe8_tok_pipeline_free(struct moe8_tokenizer *t);
/* Normalize s[0..n) with t's normalizer. The result goes to out and out_len:
 * s itself when no step changed it, else a heap copy also left in own (free
 * it; NULL otherwise). off names the stretch's byte offset in errors. */
moe8_status moe8_tok_normalize(const struct moe8_tokenizer *t, const char *s, size_t n, size_t off,
                          const char **out, size_t *out_len, char **own, moe8_error *err);
/* The decoded text of one token whose spelling is s[0..n) (decoder Replace
 * steps, then ByteFallback) into a heap buffer *out of *out_len bytes; -1
 * when out of memory. */
int moe8_tok_piece_text(const struct moe8_tokenizer *t, const char *s, size_t n, char **out,
                   size_t *out_len);


#endif
