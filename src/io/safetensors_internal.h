/*
 * safetensors_internal.h — pieces shared by the safetensors reader
 * (safetensors.c) and writer (st_writer.c): the format's limits and a small
 * open-addressing name table used to find tensors by name and to reject
 * duplicate names. Not part of the public API.
 */
#ifndef MOE8_SAFETENSORS_INTERNAL_H
#define MOE8_SAFETENSORS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h"

/* Largest header the format allows (the reference implementation's limit). */
#define MOE8_ST_MAX_HEADER ((uint64_t)100 * 1000 * 1000)
/* Name of the index of a sharded checkpoint. */
#define MOE8_ST_INDEX_NAME "model.safetensors.index.json"

/* Entry i's name, for the table's probes. */
typedef const char *(*moe8_name_of_fn)(const void *ctx, uint32_t i);

/* Slots hold entry index + 1 (0 = empty); capacity is a power of two kept at
 * most half full, so probes stay short. */
typedef struct {
    uint32_t *slots;  /* [mask + 1] */
    size_t mask;
    size_t n;         /* entries stored */
    moe8_name_of_fn name_of;
    const void *ctx;
} moe8_name_table;

/* Room for n_hint entries before the first growth. 0 ok, -1 out of memory. */
int moe8_name_table_init(moe8_name_table *t, size_t n_hint, moe8_name_of_fn name_of,
                         const void *ctx);
void moe8_name_table_free(moe8_name_table *t);
/* Index of the entry called `name`, or -1. */
int64_t moe8_name_table_find(const moe8_name_table *t, const char *name);
/* Add entry `i` (named name_of(ctx, i)). Returns -1 when added, the index of
 * the entry already holding that name, or -2 when out of memory. */
int64_t moe8_name_table_add(moe8_name_table *t, uint32_t i);

#endif
