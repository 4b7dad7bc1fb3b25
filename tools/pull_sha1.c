/*
 * pull_sha1.c — SHA-1 (FIPS 180-4) for `moe8 pull`: Hugging Face publishes
 * no SHA-256 for the small files git keeps itself (config.json, the
 * tokenizer), only their git blob id, SHA-1("blob SIZE\0" + bytes); a download
 * of one is checked against it. Not for anything secret: a check of the
 * transfer, as git uses it.
 */
#include <string.h>

#include "pull.h"

static uint32_t rol(uint32_t x, int n) { return (x << n) | (x >> (32 - n)); }

static void block(uint32_t h[5], const unsigned char *p) {
    uint32_t w[80], a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 80; i++) w[i] = rol(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
    for (int i = 0; i < 80; i++) {
        uint32_t f, k;
        if (i < 20) f = (b & c) | (~b & d), k = 0x5a827999;
        else if (i < 40) f = b ^ c ^ d, k = 0x6ed9eba1;
        else if (i < 60) f = (b & c) | (b & d) | (c & d), k = 0x8f1bbcdc;
        else f = b ^ c ^ d, k = 0xca62c1d6;
        const uint32_t t = rol(a, 5) + f + e + k + w[i];
        e = d, d = c, c = rol(b, 30), b = a, a = t;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e;
}

void pull_sha1_init(pull_sha1 *c) {
    static const uint32_t h0[5] = {0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476, 0xc3d2e1f0};
    memcpy(c->h, h0, sizeof h0);
    c->n = 0;
}

void pull_sha1_update(pull_sha1 *c, const void *data, size_t n) {
    const unsigned char *p = data;
    size_t fill = (size_t)(c->n % 64);
    c->n += n;
    if (fill) {
        const size_t take = n < 64 - fill ? n : 64 - fill;
        memcpy(c->buf + fill, p, take);
        p += take, n -= take, fill += take;
        if (fill < 64) return;
        block(c->h, c->buf);
    }
    for (; n >= 64; p += 64, n -= 64) block(c->h, p);
    memcpy(c->buf, p, n);
}

void pull_sha1_hex(pull_sha1 *c, char out[41]) {
    static const char hex[] = "0123456789abcdef";
    const uint64_t bits = c->n * 8;
    size_t fill = (size_t)(c->n % 64);
    c->buf[fill++] = 0x80;
    if (fill > 56) {
        memset(c->buf + fill, 0, 64 - fill);
        block(c->h, c->buf);
        fill = 0;
    }
    memset(c->buf + fill, 0, 56 - fill);
    for (int i = 0; i < 8; i++) c->buf[56 + i] = (unsigned char)(bits >> (56 - 8 * i));
    block(c->h, c->buf);
    for (int i = 0; i < 20; i++) {
        const unsigned v = (c->h[i / 4] >> (24 - 8 * (i % 4))) & 0xff;
        out[2 * i] = hex[v >> 4], out[2 * i + 1] = hex[v & 15];
    }
    out[40] = '\0';
}
