/*
 * tok_map.c — the tokenizer's two hash maps, both open addressing with linear
 * probing at a load factor of at most one half:
 *   tok_strmap:  token key -> id (keys are not copied: a slot holds the id,
 *                whose key, tok_key, lives in the tokenizer's pools);
 *   tok_pairmap: (left id, right id) -> (merge rank, merged id).
 * Built once at load, read-only afterwards (safe to read from many threads).
 * No deletion, no resizing: the key count is known before building.
 */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "tokenizer/tokenizer.h"

static size_t slot_count(size_t n_keys) {
    size_t n = 16;
    while (n < n_keys * 2 && n < ((size_t)1 << 40)) n <<= 1;
    return n;
}

static uint64_t hash_bytes(const char *s, size_t len) { return moe8_hash64(s, len, 0); }

static uint64_t hash_u64(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    return k ^ (k >> 33);
}

int tok_strmap_init(tok_strmap *m, size_t n_keys) {
    size_t n = slot_count(n_keys);
    m->slots = malloc(n * sizeof *m->slots);
    if (!m->slots) return -1;
    memset(m->slots, 0xff, n * sizeof *m->slots);
    m->mask = n - 1;
    return 0;
}

void tok_strmap_free(tok_strmap *m) {
    free(m->slots);
    m->slots = NULL;
}

int32_t tok_strmap_put(tok_strmap *m, const struct moe8_tokenizer *t, int32_t id) {
    size_t len, olen;
    const char *s = tok_key(t, id, &len);
    size_t i = (size_t)hash_bytes(s, len) & m->mask;
    for (;; i = (i + 1) & m->mask) {
        int32_t other = m->slots[i];
        if (other < 0) {
            m->slots[i] = id;
            return -1;
        }
        const char *o = tok_key(t, other, &olen);
        if (olen == len && memcmp(o, s, len) == 0) return other;
    }
}

int32_t tok_strmap_get(const tok_strmap *m, const struct moe8_tokenizer *t, const char *s,
                       size_t len) {
    size_t olen;
    size_t i = (size_t)hash_bytes(s, len) & m->mask;
    for (;; i = (i + 1) & m->mask) {
        int32_t other = m->slots[i];
        if (other < 0) return -1;
        const char *o = tok_key(t, other, &olen);
        if (olen == len && memcmp(o, s, len) == 0) return other;
    }
}

int tok_pairmap_init(tok_pairmap *m, size_t n_keys) {
    size_t n = slot_count(n_keys);
    m->slots = malloc(n * sizeof *m->slots);
    if (!m->slots) return -1;
    for (size_t i = 0; i < n; i++) m->slots[i].key = UINT64_MAX;
    m->mask = n - 1;
    return 0;
}

void tok_pairmap_free(tok_pairmap *m) {
    free(m->slots);
    m->slots = NULL;
}

/* A repeated pair keeps the last rank, as the reference's HashMap collect does. */
void tok_pairmap_put(tok_pairmap *m, int32_t left, int32_t right, int32_t rank, int32_t new_id) {
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    size_t i = (size_t)hash_u64(key) & m->mask;
    while (m->slots[i].key != UINT64_MAX && m->slots[i].key != key) i = (i + 1) & m->mask;
    m->slots[i].key = key;
    m->slots[i].rank = rank;
    m->slots[i].new_id = new_id;
}

const tok_pair *tok_pairmap_get(const tok_pairmap *m, int32_t left, int32_t right) {
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    size_t i = (size_t)hash_u64(key) & m->mask;
    for (;; i = (i + 1) & m->mask) {
        const tok_pair *p = &m->slots[i];
        if (p->key == key) return p;
        if (p->key == UINT64_MAX) return NULL;
    }
}
