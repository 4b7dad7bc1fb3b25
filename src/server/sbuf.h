/*
 * sbuf.h — internal: the growing byte buffer of the server's code (always
 * NUL-terminated after its n bytes; a failed growth leaves it as it was).
 */
#ifndef MOE8_SERVER_SBUF_H
#define MOE8_SERVER_SBUF_H

#include <stddef.h>

typedef struct {
    char *p;
    size_t n, cap;
} sbuf;

/* 0, or -1 out of memory. */
int sbuf_add(sbuf *b, const char *s, size_t n);
int sbuf_str(sbuf *b, const char *s);
int sbuf_reserve(sbuf *b, size_t n); /* room for n bytes (+ NUL) */
void sbuf_free(sbuf *b);

#endif
