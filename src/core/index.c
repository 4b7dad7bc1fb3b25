/*
 * index.c — growing and clearing moe8's one hash table (index.h).
 */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/index.h"

static int alloc_slots(moe8_index *x, size_t n_slots) {
    x->slots = calloc(n_slots, sizeof *x->slots); /* epoch 0: empty */
    if (!x->slots) return -1;
    x->mask = n_slots - 1;
    return 0;
}

int moe8_index_init(moe8_index *x, size_t n_hint, moe8_index_hash_fn hash) {
    size_t n_slots = 16;
    memset(x, 0, sizeof *x);
    x->hash = hash;
    x->epoch = 1;
    while (n_slots < 2 * n_hint && n_slots < ((size_t)1 << 40)) n_slots *= 2;
    return alloc_slots(x, n_slots);
}

void moe8_index_free(moe8_index *x) {
    free(x->slots);
    x->slots = NULL;
    x->mask = x->n = 0;
}

void moe8_index_clear(moe8_index *x) {
    x->n = 0;
    if (++x->epoch == 0) {
        memset(x->slots, 0, (x->mask + 1) * sizeof *x->slots);
        x->epoch = 1;
    }
}

int moe8_index_grow(moe8_index *x, const void *ctx) {
    moe8_index old = *x;
    if (old.mask >= ((size_t)1 << 40) || alloc_slots(x, (old.mask + 1) * 2)) {
        *x = old;
        return -1;
    }
    x->epoch = 1;
    for (size_t i = 0; i <= old.mask; i++) {
        if (old.slots[i].epoch != old.epoch) continue;
        size_t j = (size_t)x->hash(ctx, old.slots[i].id) & x->mask;
        while (x->slots[j].epoch == x->epoch) j = (j + 1) & x->mask;
        x->slots[j].epoch = x->epoch, x->slots[j].id = old.slots[i].id;
    }
    free(old.slots);
    return 0;
}

void moe8_index_remove(moe8_index *x, uint64_t h, uint32_t id, const void *ctx) {
    moe8_index_slot *slots = x->slots;
    const size_t mask = x->mask;
    const uint32_t epoch = x->epoch;
    size_t i = (size_t)h & mask, j;
    for (;; i = (i + 1) & mask) {
        if (slots[i].epoch != epoch) return; /* not there */
        if (slots[i].id == id) break;
    }
    /* backward shift: an entry after the hole moves into it unless its home
     * slot k lies cyclically in (hole, j], where probes from k still reach j */
    for (j = (i + 1) & mask; slots[j].epoch == epoch; j = (j + 1) & mask) {
        size_t k = (size_t)x->hash(ctx, slots[j].id) & mask;
        if (i <= j ? (i < k && k <= j) : (i < k || k <= j)) continue;
        slots[i] = slots[j];
        i = j;
    }
    slots[i].epoch = 0; /* epochs start at 1: 0 is empty in every epoch */
    x->n--;
}

/* ---- named entries --------------------------------------------------------- */

static uint64_t name_hash(const void *ctx, uint32_t id) {
    const moe8_name_table *t = ctx;
    return moe8_hash_str(t->name_of(t->ctx, id));
}

static int name_eq(const void *ctx, uint32_t id, const void *key) {
    const moe8_name_table *t = ctx;
    return strcmp(t->name_of(t->ctx, id), (const char *)key) == 0;
}

int moe8_name_table_init(moe8_name_table *t, size_t n_hint, moe8_name_of_fn name_of,
                         const void *ctx) {
    t->name_of = name_of;
    t->ctx = ctx;
    return moe8_index_init(&t->x, n_hint, name_hash);
}

void moe8_name_table_free(moe8_name_table *t) { moe8_index_free(&t->x); }

int64_t moe8_name_table_find(const moe8_name_table *t, const char *name) {
    if (!t->x.slots) return -1;
    return moe8_index_find(&t->x, moe8_hash_str(name), name_eq, t, name);
}

int64_t moe8_name_table_add(moe8_name_table *t, uint32_t id) {
    const char *name = t->name_of(t->ctx, id);
    return moe8_index_add(&t->x, moe8_hash_str(name), id, name_eq, t, name);
}
