/*
 * tok_map.c — the tokenizer's two hash maps, both moe8_index (core/index.h):
 *   tok_strmap:  token key -> id (keys are not copied: the index holds ids,
 *                whose keys, tok_key, live in the tokenizer's pools);
 *   tok_pairmap: (left id, right id) -> (merge rank, merged id), the index
 *                over an array of pairs.
 * Built once at load, read-only afterwards (safe to read from many threads).
 * Both are sized for their key count, known before building.
 */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "tokenizer/tokenizer.h"

typedef struct {
    const char *s;
    size_t len;
} str_key;

static uint64_t str_hash(const void *ctx, uint32_t id) {
    size_t len;
    const char *s = tok_key(ctx, (int32_t)id, &len);
    return moe8_hash64(s, len, 0);
}

static int str_eq(const void *ctx, uint32_t id, const void *key) {
    const str_key *k = key;
    size_t len;
    const char *s = tok_key(ctx, (int32_t)id, &len);
    return len == k->len && memcmp(s, k->s, len) == 0;
}

int moe8_tok_strmap_init(tok_strmap *m, size_t n_keys) { return moe8_index_init(&m->x, n_keys, str_hash); }

void moe8_tok_strmap_free(tok_strmap *m) { moe8_index_free(&m->x); }

int32_t moe8_tok_strmap_put(tok_strmap *m, const struct moe8_tokenizer *t, int32_t id) {
    str_key k;
    int64_t other;
    k.s = tok_key(t, id, &k.len);
    other = moe8_index_add(&m->x, moe8_hash64(k.s, k.len, 0), (uint32_t)id, str_eq, t, &k);
    MOE8_ASSERT(other != -2); /* sized for every key at init: never grows */
    return (int32_t)other;
}

int32_t moe8_tok_strmap_get(const tok_strmap *m, const struct moe8_tokenizer *t, const char *s,
                       size_t len) {
    str_key k = {s, len};
    if (!m->x.slots) return -1;
    return (int32_t)moe8_index_find(&m->x, moe8_hash64(s, len, 0), str_eq, t, &k);
}

static uint64_t pair_mix(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    return k ^ (k >> 33);
}

static uint64_t pair_hash(const void *ctx, uint32_t id) {
    return pair_mix(((const tok_pairmap *)ctx)->pairs[id].key);
}

static int pair_eq(const void *ctx, uint32_t id, const void *key) {
    return ((const tok_pairmap *)ctx)->pairs[id].key == *(const uint64_t *)key;
}

int moe8_tok_pairmap_init(tok_pairmap *m, size_t n_keys) {
    m->n = 0;
    m->cap = n_keys ? n_keys : 1;
    if (!(m->pairs = malloc(m->cap * sizeof *m->pairs))) return -1;
    if (moe8_index_init(&m->x, n_keys, pair_hash)) {
        free(m->pairs);
        m->pairs = NULL;
        return -1;
    }
    return 0;
}

void moe8_tok_pairmap_free(tok_pairmap *m) {
    moe8_index_free(&m->x);
    free(m->pairs);
    m->pairs = NULL;
}

/* A repeated pair keeps the last rank, as the reference's HashMap collect
 * does. At most the n_keys given to init are put. */
void moe8_tok_pairmap_put(tok_pairmap *m, int32_t left, int32_t right, int32_t rank, int32_t new_id) {
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    int64_t id;
    MOE8_ASSERT(m->n < m->cap);
    m->pairs[m->n].key = key;
    id = moe8_index_add(&m->x, pair_mix(key), (uint32_t)m->n, pair_eq, m, &key);
    MOE8_ASSERT(id != -2); /* sized for every key at init: never grows */
    if (id < 0) id = (int64_t)m->n++;
    m->pairs[id].rank = rank;
    m->pairs[id].new_id = new_id;
}

const tok_pair *moe8_tok_pairmap_get(const tok_pairmap *m, int32_t left, int32_t right) {
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    int64_t id;
    if (!m->x.slots) return NULL;
    id = moe8_index_find(&m->x, pair_mix(key), pair_eq, m, &key);
    return id < 0 ? NULL : &m->pairs[id];
}
