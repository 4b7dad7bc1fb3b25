/*
 * buf.c — the growable byte buffer and the JSON string writer (buf.h).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"

static int grow(moe8_buf *b, size_t need) {
    size_t cap = b->cap ? b->cap : 256;
    char *p;
    if (need <= b->cap) return 0;
    while (cap < need) {
        if (cap > SIZE_MAX / 2) {
            cap = need;
            break;
        }
        cap *= 2;
    }
    if (!(p = realloc(b->p, cap))) {
        b->oom = 1;
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

int moe8_buf_add(moe8_buf *b, const void *s, size_t n) {
    if (b->oom) return -1;
    if (n > SIZE_MAX - b->n - 1) {
        b->oom = 1;
        return -1;
    }
    if (grow(b, b->n + n + 1)) return -1;
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
    return 0;
}

int moe8_buf_str(moe8_buf *b, const char *s) { return moe8_buf_add(b, s, strlen(s)); }

int moe8_buf_printf(moe8_buf *b, const char *fmt, ...) {
    va_list ap;
    int k;
    if (b->oom) return -1;
    va_start(ap, fmt);
    k = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (k < 0) return -1;
    if (grow(b, b->n + (size_t)k + 1)) return -1;
    va_start(ap, fmt);
    vsnprintf(b->p + b->n, (size_t)k + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)k;
    return 0;
}

int moe8_buf_reserve(moe8_buf *b, size_t n) {
    char *p;
    if (b->oom) return -1;
    if (n >= SIZE_MAX) {
        b->oom = 1;
        return -1;
    }
    if (n + 1 <= b->cap) return 0;
    if (!(p = realloc(b->p, n + 1))) {
        b->oom = 1;
        return -1;
    }
    if (!b->p) p[0] = '\0';
    b->p = p;
    b->cap = n + 1;
    return 0;
}

char *moe8_buf_take(moe8_buf *b) {
    char *p = b->p;
    if (b->oom) {
        moe8_buf_free(b);
        return NULL;
    }
    if (!p && (p = malloc(1))) p[0] = '\0';
    memset(b, 0, sizeof *b);
    return p;
}

void moe8_buf_free(moe8_buf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

/* ---- JSON text ------------------------------------------------------------------ */

static int add_u(moe8_buf *b, uint32_t u) {
    static const char hex[] = "0123456789abcdef";
    char e[6] = {'\\', 'u', hex[(u >> 12) & 15], hex[(u >> 8) & 15], hex[(u >> 4) & 15], hex[u & 15]};
    return moe8_buf_add(b, e, 6);
}

/* One code point as \uXXXX (or a surrogate pair). */
static int add_cp_escaped(moe8_buf *b, uint32_t cp) {
    if (cp < 0x10000) return add_u(b, cp);
    cp -= 0x10000;
    if (add_u(b, 0xd800 + (cp >> 10))) return -1;
    return add_u(b, 0xdc00 + (cp & 0x3ff));
}

int moe8_buf_json_str(moe8_buf *b, const char *s, size_t n, unsigned flags) {
    const uint8_t *p = (const uint8_t *)s;
    size_t i = 0, run = 0; /* p[run..i) is copied as it is */
    if (moe8_buf_reserve(b, b->n + n + n / 8 + 16) || moe8_buf_add(b, "\"", 1)) return -1;
    while (i < n) {
        const uint8_t c = p[i];
        const char *esc = NULL;
        uint32_t cp = c;
        int k = 1;
        if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
            i++;
            continue;
        }
        if (c >= 0x80) {
            k = moe8_utf8_decode(p + i, n - i, &cp);
            if (k > 0 && !(flags & MOE8_JSON_ASCII)) {
                i += (size_t)k;
                continue;
            }
            if (k <= 0 && !(flags & (MOE8_JSON_ASCII | MOE8_JSON_LOSSY))) {
                i++;
                continue;
            }
        } else if (c == 0x7f && !(flags & (MOE8_JSON_ASCII | MOE8_JSON_DEL))) {
            i++;
            continue;
        }
        if (moe8_buf_add(b, p + run, i - run)) return -1;
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default: break;
        }
        if (esc) {
            if (moe8_buf_str(b, esc)) return -1;
        } else if (c < 0x80) {
            if (add_u(b, c)) return -1;
        } else if (k <= 0) { /* one U+FFFD per invalid byte */
            if ((flags & MOE8_JSON_ASCII) ? add_u(b, 0xfffd) : moe8_buf_add(b, "\xEF\xBF\xBD", 3)) return -1;
            k = 1;
        } else if (add_cp_escaped(b, cp)) {
            return -1;
        }
        i += (size_t)k;
        run = i;
    }
    if (moe8_buf_add(b, p + run, i - run)) return -1;
    return moe8_buf_add(b, "\"", 1);
}

ptrdiff_t moe8_json_nul_escape(const char *s, size_t n) {
    for (size_t i = 0; i + 1 < n; i++) {
        if (s[i] != '\\') continue;
        if (s[i + 1] == 'u' && i + 5 < n && !memcmp(s + i + 2, "0000", 4)) return (ptrdiff_t)i;
        i++;
    }
    return -1;
}
