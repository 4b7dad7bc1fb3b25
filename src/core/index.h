/*
 * index.h — moe8's one hash table: an open-addressing index over entries the
 * caller keeps in its own arrays (tensor names, tokens, merges, grammar rules,
 * the grammar walker's nodes, sets and memo, JSON keys).
 *
 * A slot holds an entry number; the caller hashes keys (moe8_hash64, or its
 * own mixer for integer keys) and says, through an `eq` callback, whether
 * entry `id` holds a key. Linear probing on the hash's low bits, at most half
 * full, doubling as it fills (the table re-hashes its entries with the `hash`
 * callback given at init). Each slot carries the epoch it was written in, so
 * clear() forgets everything in O(1) — the walker clears its tables for every
 * token. The probes are static inline so that a call site's eq is inlined.
 * An entry is removed by shifting the entries after it back (no tombstones),
 * so probes stay as short as if it had never been there.
 *
 * Not thread-safe for writes; a table no one writes may be read from any
 * number of threads.
 */
#ifndef MOE8_CORE_INDEX_H
#define MOE8_CORE_INDEX_H

#include <stddef.h>
#include <stdint.h>

/* Entry `id`'s hash (for growing) and whether entry `id` holds `key`. */
typedef uint64_t (*moe8_index_hash_fn)(const void *ctx, uint32_t id);
typedef int (*moe8_index_eq_fn)(const void *ctx, uint32_t id, const void *key);

typedef struct {
    uint32_t epoch, id;
} moe8_index_slot;

typedef struct {
    moe8_index_slot *slots; /* [mask + 1]; a slot is in use when its epoch is the table's */
    size_t mask;
    size_t n;               /* entries in use */
    uint32_t epoch;         /* >= 1 */
    moe8_index_hash_fn hash;
} moe8_index;

/* Room for n_hint entries before the first growth. 0, or -1 out of memory. */
int moe8_index_init(moe8_index *x, size_t n_hint, moe8_index_hash_fn hash);
void moe8_index_free(moe8_index *x);
/* Forget every entry (O(1); the slots are rewritten once every 2^32 - 1 clears). */
void moe8_index_clear(moe8_index *x);
/* Double the slots, re-hashing every entry with hash(ctx, id). 0, or -1 out
 * of memory (the table is unchanged). */
int moe8_index_grow(moe8_index *x, const void *ctx);

/* Take entry `id` (added under hash h) out; nothing when it is not there.
 * The entries probed after it move back, re-hashed with hash(ctx, id). */
void moe8_index_remove(moe8_index *x, uint64_t h, uint32_t id, const void *ctx);

/* The entry holding `key` (whose hash is h), or -1. */
static inline int64_t moe8_index_find(const moe8_index *x, uint64_t h, moe8_index_eq_fn eq,
                                      const void *ctx, const void *key) {
    const moe8_index_slot *slots = x->slots;
    const size_t mask = x->mask;
    const uint32_t epoch = x->epoch;
    for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
        if (slots[i].epoch != epoch) return -1;
        if (eq(ctx, slots[i].id, key)) return slots[i].id;
    }
}

/* Add entry `id` for `key` (hash h) unless an entry already holds the key.
 * Returns -1 when added, the entry already holding the key, or -2 when out
 * of memory growing the table. */
static inline int64_t moe8_index_add(moe8_index *x, uint64_t h, uint32_t id, moe8_index_eq_fn eq,
                                     const void *ctx, const void *key) {
    moe8_index_slot *slots;
    size_t mask;
    uint32_t epoch;
    if (2 * (x->n + 1) > x->mask + 1 && moe8_index_grow(x, ctx)) return -2;
    slots = x->slots, mask = x->mask, epoch = x->epoch;
    for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
        if (slots[i].epoch != epoch) {
            slots[i].epoch = epoch, slots[i].id = id;
            x->n++;
            return -1;
        }
        if (eq(ctx, slots[i].id, key)) return slots[i].id;
    }
}

/* ---- entries named by NUL-terminated strings ------------------------------
 * The common case (tensor names, JSON keys): entry id is called
 * name_of(ctx, id); names are hashed with moe8_hash_str. */
typedef const char *(*moe8_name_of_fn)(const void *ctx, uint32_t id);

typedef struct {
    moe8_index x;
    moe8_name_of_fn name_of;
    const void *ctx;
} moe8_name_table;

/* 0, or -1 out of memory. */
int moe8_name_table_init(moe8_name_table *t, size_t n_hint, moe8_name_of_fn name_of,
                         const void *ctx);
void moe8_name_table_free(moe8_name_table *t);
/* The entry called `name`, or -1. */
int64_t moe8_name_table_find(const moe8_name_table *t, const char *name);
/* Add entry `id` (called name_of(ctx, id)): -1 when added, the entry already
 * holding that name, or -2 when out of memory. */
int64_t moe8_name_table_add(moe8_name_table *t, uint32_t id);

#endif
