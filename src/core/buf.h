/*
 * buf.h — moe8's one growable byte buffer, and the JSON text it writes
 * (buf.c).
 *
 * A moe8_buf is always NUL-terminated after its n bytes once anything was
 * added (p is NULL while empty and untouched). Out of memory is sticky: the
 * failed call and every later add return -1 and leave the bytes as they
 * were, so a writer may add many pieces and check once (moe8_buf_ok) at
 * the end. Zero-initialize to start; moe8_buf_free to end.
 */
#ifndef MOE8_CORE_BUF_H
#define MOE8_CORE_BUF_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h"

typedef struct {
    char *p;       /* [cap] the bytes, p[n] == '\0' */
    size_t n, cap;
    int oom;       /* a growth failed: every add since returned -1 */
} moe8_buf;

/* 0, or -1 out of memory. */
int moe8_buf_add(moe8_buf *b, const void *s, size_t n);
int moe8_buf_str(moe8_buf *b, const char *s);
int moe8_buf_printf(moe8_buf *b, const char *fmt, ...) MOE8_PRINTF(2, 3);
int moe8_buf_reserve(moe8_buf *b, size_t n); /* room for n bytes in all (+ NUL) */
/* 1 when no growth has failed. */
static inline int moe8_buf_ok(const moe8_buf *b) { return !b->oom; }
/* The bytes, the caller's to free (never NULL unless out of memory: an
 * empty buffer gives ""); b is empty again. */
char *moe8_buf_take(moe8_buf *b);
void moe8_buf_free(moe8_buf *b);

/* s[0..n) as a JSON string literal, quotes included: '"' and '\\' escaped,
 * \n \r \t \b \f in their short forms, every other byte below 0x20 as
 * \u00XX. Flags:
 *   MOE8_JSON_ASCII   every code point from U+007F up as \uXXXX (a surrogate
 *                     pair past U+FFFF), as Python's json.dumps with
 *                     ensure_ascii; invalid UTF-8 is then written as U+FFFD
 *   MOE8_JSON_DEL     U+007F as \u007f (without MOE8_JSON_ASCII)
 *   MOE8_JSON_LOSSY   each byte of invalid UTF-8 becomes U+FFFD (as vLLM
 *                     decodes with errors="replace"); without it, bytes are
 *                     copied as they are
 * A NUL byte is written \u0000. 0, or -1 out of memory. */
enum { MOE8_JSON_ASCII = 1, MOE8_JSON_DEL = 2, MOE8_JSON_LOSSY = 4 };
int moe8_buf_json_str(moe8_buf *b, const char *s, size_t n, unsigned flags);

/* The offset of the first \u0000 escape in JSON text s[0..n) (cJSON cuts a
 * string there, so callers refuse it), or -1. Each backslash escapes the
 * next byte, so "\\u0000" is not one. */
ptrdiff_t moe8_json_nul_escape(const char *s, size_t n);

#endif
