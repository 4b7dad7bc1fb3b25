/*
 * json_util.h — small helpers over cJSON, shared by the safetensors, config,
 * tokenizer and quant-description parsers (whole files are read with
 * moe8_read_file, io/file.h). Every number read from a file is hostile:
 * cJSON holds numbers as doubles, so integers are checked to be exact before
 * conversion.
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

/* Parse `text` (length `len`, need not be NUL-terminated) as JSON. Fails with
 * MOE8_ERR_FORMAT naming `label` on a syntax error or on anything but
 * whitespace after the value (with the byte offset), and on an object anywhere
 * in the tree holding a key twice (naming the key and the object's path). */
moe8_status moe8_json_parse(const char *text, size_t len, const char *label, cJSON **out,
                            moe8_error *err);

/* The syntax half of moe8_json_parse, for a format with its own rules for
 * repeated keys (the safetensors header): one JSON value and nothing but
 * whitespace after it. Offsets in errors are `base` + the offset in text;
 * `what` (NULL: "JSON value") names the text in them ("header"). */
moe8_status moe8_json_parse_syntax(const char *text, size_t len, int64_t base, const char *label,
                                   const char *what, cJSON **out, moe8_error *err);

/* "a string", "a number", "a boolean", "an array", "an object" or "null":
 * what v is, for messages ("'x' must be an object, got a number"). */
const char *moe8_json_type_name(const cJSON *v);

/* MOE8_ERR_FORMAT naming `label`, the key and `where` (the object's path, NULL
 * or "" for the top level) if `object` holds a key twice; MOE8_OK for an
 * object without duplicates or a non-object. Linear time (a hash set). */
moe8_status moe8_json_check_unique_keys(const cJSON *object, const char *label, const char *where,
                                        moe8_error *err);

#endif
