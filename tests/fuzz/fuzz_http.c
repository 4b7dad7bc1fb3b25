/*
 * fuzz_http.c — libFuzzer target: moe8 serve's request framing
 * (src/server/http_parse.c) on arbitrary bytes. The head scanner must give
 * the same answer whether the bytes come at once or one at a time (the
 * server feeds it whatever each read brings); a parsed head must point
 * inside its bytes and be self-consistent; the chunked decoder, also fed in
 * pieces, must agree with itself fed whole and never write past the data it
 * was given.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/http_parse.h"

static int inside(const char *p, size_t n, const char *base, size_t len) {
    return !p || (p >= base && p + n <= base + len);
}

/* Decode in[0..n) fed in pieces of `step` bytes (0: whole). */
static long decode(const char *in, size_t n, size_t step, char *out, size_t *out_n, int *done) {
    http_chunked c;
    const char *why = NULL;
    size_t at = 0;
    memset(&c, 0, sizeof c);
    *out_n = 0;
    *done = 0;
    while (at < n && !*done) {
        const size_t k = step && n - at > step ? step : n - at;
        long used = moe8_http_chunked_feed(&c, in + at, k, out, n, out_n, 1u << 20, done, &why);
        if (used < 0) {
            if (!why) abort();
            return used;
        }
        if ((size_t)used > k || (!*done && (size_t)used != k)) abort();
        at += (size_t)used;
    }
    if (*out_n > n) abort();
    return (long)at;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *buf = (const char *)data, *why = NULL;
    size_t pos = 0, skip = 0, pos1 = 0, skip1 = 0;
    long whole = moe8_http_head_scan(buf, size, &pos, &skip, &why), piece = 0;
    /* the same bytes one at a time */
    for (size_t n = 1; n <= size; n++) {
        piece = moe8_http_head_scan(buf, n, &pos1, &skip1, &why);
        if (piece != 0) break;
    }
    if (whole != piece || (whole > 0 && skip != skip1)) abort();
    if (whole < 0 && whole != -400 && whole != -414 && whole != -431) abort();
    if (whole > 0) {
        http_head h;
        const char *hb = buf + skip;
        const size_t hn = (size_t)whole;
        int rc;
        if (skip + hn > size) abort();
        rc = moe8_http_head_parse(hb, hn, &h, &why);
        if (rc && (!why || (rc != 400 && rc != 414 && rc != 431 && rc != 501 && rc != 505 && rc != 417)))
            abort();
        if (!rc) {
            if (!inside(h.method, h.method_len, hb, hn) || !inside(h.target, h.target_len, hb, hn) ||
                !inside(h.path, h.path_len, hb, hn) || !inside(h.auth, h.auth_len, hb, hn) ||
                !inside(h.origin, h.origin_len, hb, hn) || h.path_len > h.target_len ||
                !moe8_http_is_token(h.method, h.method_len) || h.content_length < -1 ||
                (h.chunked && h.content_length >= 0) || h.minor < 0 || h.minor > 1)
                abort();
            if (h.chunked) {
                const char *body = hb + hn;
                const size_t bn = size - skip - hn;
                char *o1 = malloc(bn + 1), *o2 = malloc(bn + 1);
                size_t n1, n2;
                int d1, d2;
                long r1 = decode(body, bn, 0, o1, &n1, &d1), r2 = decode(body, bn, 1, o2, &n2, &d2);
                /* pieces and whole agree on the outcome, and on the data when it ended */
                if ((r1 < 0) != (r2 < 0) || (r1 >= 0 && (d1 != d2 || (d1 && (r1 != r2 || n1 != n2 ||
                                                                           memcmp(o1, o2, n1))))))
                    abort();
                free(o1);
                free(o2);
            }
        }
    }
    return 0;
}
