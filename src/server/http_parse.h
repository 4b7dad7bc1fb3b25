/*
 * http_parse.h — internal: the strict HTTP/1.1 request framing of moe8
 * serve (RFC 9112), as pure functions over bytes: where a request head ends,
 * what it says, and the chunked body decoder. No I/O, no allocation but the
 * body buffer it is given; the fuzz target runs them on arbitrary bytes.
 *
 * Every line ends in CRLF (a bare LF or CR is an error, not a line end);
 * header names are tokens with the colon right after; obs-fold is refused;
 * Content-Length is one run of digits, given once; Transfer-Encoding must end
 * in chunked, which moe8 alone decodes (another coding before it: 501), and
 * never comes with Content-Length; HTTP/1.1 needs exactly one Host. Each
 * error is an HTTP status and a sentence for the client.
 */
#ifndef MOE8_HTTP_PARSE_H
#define MOE8_HTTP_PARSE_H

#include <stddef.h>
#include <stdint.h>

#define HTTP_MAX_LINE (8u << 10)  /* request line: 414 beyond */
#define HTTP_MAX_HEAD (32u << 10) /* request line + headers: 431 beyond */
#define HTTP_MAX_HEADERS 100      /* header lines: 431 beyond */
#define HTTP_MAX_EMPTY_LINES 8    /* CRLFs skipped before a request line: 400 beyond */

/* What a request head says. Pointers point into the bytes parsed. */
typedef struct {
    const char *method, *target, *path; /* path: the target up to '?' */
    size_t method_len, target_len, path_len;
    int minor;                  /* HTTP/1.minor: 0 or 1 */
    int64_t content_length;     /* -1: none */
    int chunked;                /* Transfer-Encoding: chunked */
    int keep_alive;             /* after this request (version and Connection) */
    int expect_continue;        /* Expect: 100-continue */
    const char *auth, *origin;  /* Authorization and Origin values, or NULL */
    size_t auth_len, origin_len;
    const char *x_api_key;      /* x-api-key (Anthropic's key header), or NULL */
    size_t x_api_key_len;
    const char *x_request_id;   /* x-request-id, or NULL */
    size_t x_request_id_len;
} http_head;

/* Scan buf[*pos..n) for the end of a head; *pos is where scanning resumes
 * (start *pos and *skip at 0 for each request and keep them between calls).
 * Up to 8 empty lines before the request line are skipped (*skip: the bytes
 * they took). Returns the head's length
 * (from buf, through its empty line) when complete, 0 when more bytes are
 * needed, or a negative HTTP status (-400 bare LF or CR, -414 request line
 * too long, -431 head too long) with *why set. */
long moe8_http_head_scan(const char *buf, size_t n, size_t *pos, size_t *skip, const char **why);

/* Parse the complete head buf[0..n) (as moe8_http_head_scan returned it, its
 * leading empty lines already skipped). 0, or an HTTP status (400, 414, 431,
 * 501, 505, 417) with *why a sentence naming the header. */
int moe8_http_head_parse(const char *buf, size_t n, http_head *h, const char **why);

/* The chunked body decoder: zero it, then feed it bytes. */
typedef struct {
    int st;
    uint64_t left;              /* data bytes left in this chunk */
    int digits;
    size_t line;                /* bytes of the current trailer / extension line */
    size_t trailer;             /* bytes of the trailer section */
} http_chunked;

/* Decode in[0..n): data goes to out (at most `max` bytes in all: beyond,
 * status 413). Returns the bytes consumed (less than n only when the body
 * ended there: *done = 1), or a negative HTTP status with *why. `out_n` is
 * the data written so far (its running total). */
long moe8_http_chunked_feed(http_chunked *c, const char *in, size_t n, char *out, size_t out_cap,
                       size_t *out_n, uint64_t max, int *done, const char **why);

/* 1 if s[0..n) is a token (RFC 9110 tchar+). */
int moe8_http_is_token(const char *s, size_t n);

#endif
