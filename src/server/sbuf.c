/*
 * sbuf.c — the server's growing byte buffer (sbuf.h).
 */
#include <stdlib.h>
#include <string.h>

#include "server/sbuf.h"

int sbuf_add(sbuf *b, const char *s, size_t n) {
    if (!n && b->p) return 0;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        char *p;
        while (cap < b->n + n + 1) cap *= 2;
        if (!(p = realloc(b->p, cap))) return -1;
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
    return 0;
}

int sbuf_str(sbuf *b, const char *s) { return sbuf_add(b, s, strlen(s)); }

int sbuf_reserve(sbuf *b, size_t n) {
    char *p;
    if (n + 1 <= b->cap) return 0;
    if (!(p = realloc(b->p, n + 1))) return -1;
    b->p = p;
    b->cap = n + 1;
    return 0;
}

void sbuf_free(sbuf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}
