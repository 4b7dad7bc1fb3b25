/*
 * json_util.h — small helpers over cJSON and whole-file reads, shared by the
 * safetensors, config and quant-description parsers. Every number read from a
 * file is hostile: cJSON holds numbers as doubles, so integers are checked to
 * be exact before conversion.
 */
#ifndef MOE8_JSON_UTIL_H
#define MOE8_JSON_UTIL_H

#include <stdint.h>
#include <cjson/cJSON.h>

#include "core/core.h"

/* Largest integer a double holds exactly: 2^53. */
#define MOE8_JSON_MAX_EXACT 9007199254740992.0

/* 0 and *out set if `item` is a JSON number holding an exact integer in
 * [-2^53, 2^53]; -1 otherwise (not a number, fractional, NaN, out of range). */
int moe8_json_exact_int(const cJSON *item, int64_t *out);

/* Read a whole regular file of at most `max_bytes` into a NUL-terminated heap
 * buffer (free with free()). Errors name the file. */
moe8_status moe8_read_file(const char *path, size_t max_bytes, char **out, size_t *out_len,
                           moe8_error *err);

/* Parse `text` (length `len`, need not be NUL-terminated) as JSON. On a syntax
 * error fails with MOE8_ERR_FORMAT naming `label` and the byte offset. */
moe8_status moe8_json_parse(const char *text, size_t len, const char *label, cJSON **out,
                            moe8_error *err);

#endif
