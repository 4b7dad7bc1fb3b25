/*
 * test_http_parse.c — moe8 serve's request framing (src/server/http_parse.c)
 * against RFC 9112 as a table: each head with the status it must get (0:
 * accepted) and, when accepted, what it must say; each chunked body with its
 * decoded data or its status. Every case also runs fed one byte at a time,
 * as the server may receive it. (The same rules over a socket, with the
 * smuggled request behind each refusal, are in test_serve_hostile.)
 */
#include "test.h"
#include "server/http_parse.h"

typedef struct {
    const char *head;   /* through the empty line */
    int status;         /* 0, or the refusal */
    int64_t cl;         /* accepted: Content-Length (-1 none) */
    int chunked, keep_alive, expect, minor;
    const char *path;   /* accepted: the path (target up to '?') */
} head_case;

#define OK(h, cl, ch, ka, path) {h, 0, cl, ch, ka, 0, 1, path}
#define BAD(h, st) {h, st, -1, 0, 0, 0, 1, NULL}
#define H "Host: x\r\n"

static const head_case HEADS[] = {
    OK("GET /health HTTP/1.1\r\n" H "\r\n", -1, 0, 1, "/health"),
    OK("GET /health?x=1&y=2 HTTP/1.1\r\n" H "\r\n", -1, 0, 1, "/health"),
    OK("\r\n\r\nGET /health HTTP/1.1\r\n" H "\r\n", -1, 0, 1, "/health"), /* leading empty lines */
    BAD("\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\nGET / HTTP/1.1\r\n" H "\r\n", 400), /* but a few */
    OK("POST /v1/completions HTTP/1.1\r\n" H "Content-Length: 12\r\n\r\n", 12, 0, 1, "/v1/completions"),
    OK("POST /x HTTP/1.1\r\n" H "Content-Length:0\r\n\r\n", 0, 0, 1, "/x"),
    OK("POST /x HTTP/1.1\r\n" H "content-length: \t7 \r\n\r\n", 7, 0, 1, "/x"),
    OK("POST /x HTTP/1.1\r\n" H "Transfer-Encoding: chunked\r\n\r\n", -1, 1, 1, "/x"),
    OK("POST /x HTTP/1.1\r\n" H "transfer-encoding: CHUNKED\r\n\r\n", -1, 1, 1, "/x"),
    OK("GET /x HTTP/1.1\r\n" H "Connection: close\r\n\r\n", -1, 0, 0, "/x"),
    OK("GET /x HTTP/1.1\r\n" H "Connection: upgrade, Close\r\n\r\n", -1, 0, 0, "/x"),
    {"GET /x HTTP/1.0\r\n\r\n", 0, -1, 0, 0, 0, 0, "/x"},
    {"GET /x HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", 0, -1, 0, 1, 0, 0, "/x"},
    {"POST /x HTTP/1.1\r\n" H "Expect: 100-continue\r\nContent-Length: 3\r\n\r\n", 0, 3, 0, 1, 1, 1, "/x"},
    OK("GET /x HTTP/1.1\r\nHost:\r\n\r\n", -1, 0, 1, "/x"),            /* empty Host is allowed */
    OK("GET /x HTTP/1.1\r\n" H "X-Obs: caf\xc3\xa9\r\n\r\n", -1, 0, 1, "/x"), /* obs-text */
    /* smuggling: two ways to frame one body */
    BAD("POST /x HTTP/1.1\r\n" H "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
    BAD("POST /x HTTP/1.1\r\n" H "Transfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n", 400),
    BAD("POST /x HTTP/1.1\r\n" H "Content-Length: 4\r\nContent-Length: 4\r\n\r\n", 400),
    BAD("POST /x HTTP/1.1\r\n" H "Content-Length: 4\r\nContent-Length: 5\r\n\r\n", 400),
    BAD("POST /x HTTP/1.1\r\n" H "Content-Length: 5, 5\r\n\r\n", 400),
    BAD("POST /x HTTP/1.1\r\n" H "Content-Length: -1\r\n\r\n", 400),
    BAD("POST /x HTTP/1.1\r\n" H "Content-Length: +5\r\n\r\n", 400),
    BAD("POST /x HTTP/1.1\r\n" H "Content-Length: abc\r\n\r\n", 400),
    BAD("POST /x HTTP/1.1\r\n" H "Content-Length: 1 2\r\n\r\n", 400),
    BAD("POST /x HTTP/1.1\r\n" H "Content-Length:\r\n\r\n", 400),
    BAD("POST /x HTTP/1.1\r\n" H "Content-Length: 0x10\r\n\r\n", 400),
    BAD("POST /x HTTP/1.1\r\n" H "Content-Length: 9999999999999999999999\r\n\r\n", 400),
    BAD("POST /x HTTP/1.1\r\n" H "Transfer-Encoding: chunked, gzip\r\n\r\n", 400),
    BAD("POST /x HTTP/1.1\r\n" H "Transfer-Encoding: gzip\r\n\r\n", 400),
    BAD("POST /x HTTP/1.1\r\n" H "Transfer-Encoding: chunked, chunked\r\n\r\n", 400),
    BAD("POST /x HTTP/1.1\r\n" H "Transfer-Encoding:\r\n\r\n", 400),
    BAD("POST /x HTTP/1.1\r\n" H "Transfer-Encoding: gzip, chunked\r\n\r\n", 501),
    BAD("POST /x HTTP/1.1\r\n" H "Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n", 501),
    BAD("POST /x HTTP/1.1\r\n" H "Transfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n\r\n", 400),
    BAD("POST /x HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
    BAD("POST /x HTTP/1.1\r\n" H "Transfer-Encoding : chunked\r\n\r\n", 400),
    BAD("POST /x HTTP/1.1\r\n" H "Transfer-Encoding\t: chunked\r\n\r\n", 400),
    /* Host */
    BAD("GET /x HTTP/1.1\r\n\r\n", 400),
    BAD("GET /x HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
    BAD("GET /x HTTP/1.0\r\nHost: a\r\nHost: a\r\n\r\n", 400),
    /* header names and lines */
    BAD("GET /x HTTP/1.1\r\n" H "Bad Name: v\r\n\r\n", 400),
    BAD("GET /x HTTP/1.1\r\n" H "Name : v\r\n\r\n", 400),
    BAD("GET /x HTTP/1.1\r\n" H ": v\r\n\r\n", 400),
    BAD("GET /x HTTP/1.1\r\n" H "Na(me: v\r\n\r\n", 400),
    BAD("GET /x HTTP/1.1\r\n" H "NoColon\r\n\r\n", 400),
    BAD("GET /x HTTP/1.1\r\n" H "X: a\r\n folded\r\n\r\n", 400),
    BAD("GET /x HTTP/1.1\r\n" H "X: a\r\n\tfolded\r\n\r\n", 400),
    BAD("GET /x HTTP/1.1\r\n" H " X: a\r\n\r\n", 400),
    BAD("GET /x HTTP/1.1\r\n" H "X: a\x01" "b\r\n\r\n", 400),
    BAD("GET /x HTTP/1.1\r\nHost: x\nX: y\r\n\r\n", 400),       /* bare LF */
    BAD("GET /x HTTP/1.1\n" H "\r\n", 400),
    BAD("GET /x HTTP/1.1\r\n" H "\n", 400),
    BAD("GET /x HTTP/1.1\r\nHost: x\rX: y\r\n\r\n", 400),       /* bare CR */
    /* request lines */
    BAD("GET  /x HTTP/1.1\r\n" H "\r\n", 400),
    BAD("GET /x  HTTP/1.1\r\n" H "\r\n", 400),
    BAD("GET /x HTTP/1.1 \r\n" H "\r\n", 400),
    BAD("GET /a b HTTP/1.1\r\n" H "\r\n", 400),
    BAD("GET /x\x7f HTTP/1.1\r\n" H "\r\n", 400),
    BAD("G(T /x HTTP/1.1\r\n" H "\r\n", 400),
    BAD("GET x HTTP/1.1\r\n" H "\r\n", 400),
    OK("GET http://x/y?z HTTP/1.1\r\n" H "\r\n", -1, 0, 1, "/y"), /* absolute-form */
    BAD("GET http://x HTTP/1.1\r\n" H "\r\n", 400),
    BAD("GET /x HTTP/1\r\n" H "\r\n", 400),
    BAD("GET /x http/1.1\r\n" H "\r\n", 400),
    BAD("GET /x\r\n" H "\r\n", 400),
    BAD("GET /x HTTP/2.0\r\n" H "\r\n", 505),
    BAD("GET /x HTTP/1.2\r\n" H "\r\n", 505),
    BAD("GET /x HTTP/0.9\r\n" H "\r\n", 505),
    BAD("POST /x HTTP/1.1\r\n" H "Expect: something-else\r\n\r\n", 417),
};

/* Scan then parse `head` given at once or one byte at a time (`step`). */
static int run_head(const char *head, size_t n, int bytewise, http_head *h, long *len) {
    const char *why = NULL;
    size_t pos = 0, skip = 0;
    long r = 0;
    if (bytewise) {
        for (size_t k = 1; k <= n && r == 0; k++) r = moe8_http_head_scan(head, k, &pos, &skip, &why);
    } else {
        r = moe8_http_head_scan(head, n, &pos, &skip, &why);
    }
    *len = r;
    if (r < 0) {
        CHECKF(why != NULL, "a refusal without a reason");
        return (int)-r;
    }
    if (r == 0) return -1; /* incomplete */
    CHECKF(skip + (size_t)r == n, "head of %zu bytes scanned as %zu + %ld", n, skip, r);
    r = moe8_http_head_parse(head + skip, (size_t)r, h, &why);
    if (r) CHECKF(why && *why, "status %ld without a reason", r);
    return (int)r;
}

static void test_heads(void) {
    for (size_t i = 0; i < sizeof HEADS / sizeof *HEADS; i++) {
        const head_case *c = &HEADS[i];
        for (int bytewise = 0; bytewise < 2; bytewise++) {
            http_head h;
            long len;
            int st = run_head(c->head, strlen(c->head), bytewise, &h, &len);
            CHECKF(st == c->status, "case %zu%s: status %d, want %d: %s", i, bytewise ? " (bytewise)" : "",
                   st, c->status, c->head);
            if (st || c->status) continue;
            CHECKF(h.content_length == c->cl && h.chunked == c->chunked && h.keep_alive == c->keep_alive &&
                   h.expect_continue == c->expect && h.minor == c->minor,
                   "case %zu: cl %lld chunked %d keep-alive %d expect %d minor %d: %s", i,
                   (long long)h.content_length, h.chunked, h.keep_alive, h.expect_continue, h.minor, c->head);
            CHECKF(h.path_len == strlen(c->path) && !memcmp(h.path, c->path, h.path_len), "case %zu: path '%.*s'",
                   i, (int)h.path_len, h.path);
        }
    }
}

static void test_limits(void) {
    static char big[HTTP_MAX_HEAD + 64];
    http_head h;
    long len;
    const char *why;
    size_t pos = 0, skip = 0;
    /* a request line over 8 KiB: 414 as soon as it is known, without its end */
    memset(big, 'a', sizeof big);
    memcpy(big, "GET /", 5);
    CHECK(moe8_http_head_scan(big, HTTP_MAX_LINE + 16, &pos, &skip, &why) == -414);
    /* a head over 32 KiB: 431, also without its end */
    {
        size_t n = 0;
        n += (size_t)snprintf(big, sizeof big, "GET / HTTP/1.1\r\nHost: x\r\n");
        while (n + 40 < sizeof big) n += (size_t)snprintf(big + n, sizeof big - n, "X-Pad: %030d\r\n", 7);
        pos = skip = 0;
        CHECK(moe8_http_head_scan(big, n, &pos, &skip, &why) == -431);
    }
    /* 101 header lines: 431 */
    {
        size_t n = (size_t)snprintf(big, sizeof big, "GET / HTTP/1.1\r\nHost: x\r\n");
        for (int i = 0; i < 100; i++) n += (size_t)snprintf(big + n, sizeof big - n, "X%d: y\r\n", i);
        n += (size_t)snprintf(big + n, sizeof big - n, "\r\n");
        CHECK(run_head(big, n, 0, &h, &len) == 431);
    }
    /* incomplete heads wait for more */
    pos = skip = 0;
    CHECK(moe8_http_head_scan("GET / HTTP/1.1\r\nHost: x\r\n", 25, &pos, &skip, &why) == 0);
    pos = skip = 0;
    CHECK(moe8_http_head_scan("GET / HTTP/1.1\r\nHost: x\r\n\r", 26, &pos, &skip, &why) == 0);
    /* what follows a head is not part of it (a pipelined request, a body) */
    {
        const char *two = "GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n";
        pos = skip = 0;
        CHECK(moe8_http_head_scan(two, strlen(two), &pos, &skip, &why) == 28);
    }
}

typedef struct {
    const char *body;
    int status;          /* 0: ends, with `data`; -1: incomplete; else the refusal */
    const char *data;
    size_t used;         /* bytes the body took (the rest is the next request) */
} chunk_case;

static const chunk_case CHUNKS[] = {
    {"5\r\nhello\r\n0\r\n\r\n", 0, "hello", 15},
    {"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\nGET", 0, "hello world", 26},
    {"A\r\n0123456789\r\n0\r\n\r\n", 0, "0123456789", 20},
    {"a;name=value;x=\"q\"\r\n0123456789\r\n0\r\n\r\n", 0, "0123456789", 37},
    {"5 ;ext\r\nhello\r\n0\r\n\r\n", 0, "hello", 20},
    {"5\r\nhello\r\n0\r\nTrailer: x\r\nOther: y\r\n\r\n", 0, "hello", 37},
    {"0\r\n\r\n", 0, "", 5},
    {"000\r\n\r\n", 0, "", 7},
    {"5\r\nhel", -1, "hel", 6},
    {"5\r\nhello\r\n0\r\n", -1, "hello", 13},
    {"x\r\nhello\r\n0\r\n\r\n", 400, NULL, 0},
    {"\r\nhello\r\n0\r\n\r\n", 400, NULL, 0},
    {"-5\r\nhello\r\n0\r\n\r\n", 400, NULL, 0},
    {"5\nhello\r\n0\r\n\r\n", 400, NULL, 0},
    {"5\r\nhelloXY0\r\n\r\n", 400, NULL, 0},
    {"5\r\nhello\n0\r\n\r\n", 400, NULL, 0},
    {"5\r\nhello\r\n0\r\n\n", 400, NULL, 0},
    {"5\r\nhello\r\n0\r\nBad Trailer: x\r\n\r\n", 400, NULL, 0},
    {"5\r\nhello\r\n0\r\nNoColon\r\n\r\n", 400, NULL, 0},
    {"5x\r\nhello\r\n0\r\n\r\n", 400, NULL, 0},
    {"1234567890123456\r\n", 400, NULL, 0},
    {"200001\r\n", 413, NULL, 0}, /* over the 2 MiB limit given below */
};

static void test_chunks(void) {
    for (size_t i = 0; i < sizeof CHUNKS / sizeof *CHUNKS; i++) {
        const chunk_case *c = &CHUNKS[i];
        const size_t n = strlen(c->body);
        for (int bytewise = 0; bytewise < 2; bytewise++) {
            http_chunked ck;
            char out[256];
            size_t out_n = 0, at = 0;
            int done = 0, st = -1;
            const char *why = NULL;
            memset(&ck, 0, sizeof ck);
            while (at < n && !done) {
                const size_t k = bytewise ? 1 : n - at;
                long used = moe8_http_chunked_feed(&ck, c->body + at, k, out, sizeof out, &out_n, 2u << 20, &done, &why);
                if (used < 0) {
                    st = (int)-used;
                    break;
                }
                at += (size_t)used;
            }
            if (done) st = 0;
            CHECKF(st == c->status, "chunk case %zu%s: status %d, want %d", i, bytewise ? " (bytewise)" : "", st,
                   c->status);
            if (st > 0) CHECK(why && *why);
            if (c->data && st == c->status)
                CHECKF(out_n == strlen(c->data) && !memcmp(out, c->data, out_n), "chunk case %zu: data '%.*s'", i,
                       (int)out_n, out);
            if (st == 0) CHECKF(at == c->used, "chunk case %zu: took %zu bytes, want %zu", i, at, c->used);
        }
    }
}

int main(void) {
    test_heads();
    test_limits();
    test_chunks();
    return test_summary();
}
