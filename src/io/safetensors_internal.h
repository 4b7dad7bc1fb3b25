/*
 * safetensors_internal.h — pieces shared by the safetensors reader
 * (safetensors.c) and writer (st_writer.c): the format's limits and the name
 * table (core/index.h) that finds tensors by name and rejects duplicate
 * names. Not part of the public API.
 */
#ifndef MOE8_SAFETENSORS_INTERNAL_H
#define MOE8_SAFETENSORS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h"
#include "core/index.h"

/* Largest header the format allows (the reference implementation's limit). */
#define MOE8_ST_MAX_HEADER ((uint64_t)100 * 1000 * 1000)
/* Name of the index of a sharded checkpoint. */
#define MOE8_ST_INDEX_NAME "model.safetensors.index.json"

#endif
