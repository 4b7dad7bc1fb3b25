/*
 * utf8.c — moe8's one UTF-8 validator, decoder and encoder (core.h): strict UTF-8 as Unicode
 * Table 3-7 defines it (no overlong forms, no surrogates, nothing past
 * U+10FFFF), used by the tokenizer, the chat templates and the server.
 */
#include "core/core.h"

int moe8_utf8_char(const uint8_t *s, size_t n) {
    uint8_t c = s[0], lo = 0x80, hi = 0xbf;
    int len;
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf) len = 2;
    else if (c >= 0xe0 && c <= 0xef) len = 3;
    else if (c >= 0xf0 && c <= 0xf4) len = 4;
    else return -1;
    if (c == 0xe0) lo = 0xa0;
    else if (c == 0xed) hi = 0x9f;
    else if (c == 0xf0) lo = 0x90;
    else if (c == 0xf4) hi = 0x8f;
    for (int i = 1; i < len; i++) {
        if ((size_t)i >= n) return 0;
        if (s[i] < (i == 1 ? lo : 0x80) || s[i] > (i == 1 ? hi : 0xbf)) return -i;
    }
    return len;
}

size_t moe8_utf8_valid(const char *s, size_t n) {
    const uint8_t *p = (const uint8_t *)s;
    size_t i = 0;
    while (i < n) {
        if (p[i] < 0x80) {
            i++;
            continue;
        }
        int k = moe8_utf8_char(p + i, n - i);
        if (k <= 0) return i;
        i += (size_t)k;
    }
    return (size_t)-1;
}

int moe8_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp) {
    const int k = moe8_utf8_char(s, n);
    if (k == 1) *cp = s[0];
    else if (k == 2) *cp = (uint32_t)(s[0] & 0x1f) << 6 | (s[1] & 0x3f);
    else if (k == 3) *cp = (uint32_t)(s[0] & 0x0f) << 12 | (uint32_t)(s[1] & 0x3f) << 6 | (s[2] & 0x3f);
    else if (k == 4)
        *cp = (uint32_t)(s[0] & 0x07) << 18 | (uint32_t)(s[1] & 0x3f) << 12 | (uint32_t)(s[2] & 0x3f) << 6 |
              (s[3] & 0x3f);
    return k;
}

int moe8_utf8_encode(uint32_t cp, char out[4]) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp >= 0xd800 && cp < 0xe000) return 0;
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | cp >> 12);
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    if (cp > 0x10ffff) return 0;
    out[0] = (char)(0xf0 | cp >> 18);
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}
