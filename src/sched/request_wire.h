/*
 * request_wire.h — internal: a moe8_request as bytes, for the TP/EP broadcast
 * of `moe8 serve` (request_wire.c describes every field once; SEMANTICS §8).
 */
#ifndef MOE8_REQUEST_WIRE_H
#define MOE8_REQUEST_WIRE_H

#include <stddef.h>

#include "core/public.h"

/* Bytes of r's wire form, and r written in it to out (that many bytes). */
size_t moe8_request_wire_size(const moe8_request *r);
void moe8_request_wire_put(const moe8_request *r, unsigned char *out);

/* One request read at buf[*at, n), *at moved past it: r's arrays point into
 * buf and its stop strings into strs[MOE8_MAX_STOP_STRINGS] (both must outlive
 * r); the fields rank 0 keeps are left at moe8_request_default's values.
 * MOE8_ERR_COMM naming the field on a short or inconsistent message. */
moe8_status moe8_request_wire_get(const unsigned char *buf, size_t n, size_t *at, moe8_request *r,
                                  const char **strs, moe8_error *err);

/* 1 when the field table covers every byte of moe8_request but padding (why:
 * a summary); 0 naming the first byte no field describes (tests). */
int moe8_request_wire_covers(char *why, size_t cap);

#endif
