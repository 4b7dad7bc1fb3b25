/*
 * http_parse.c — strict HTTP/1.1 request framing (http_parse.h; RFC 9112
 * sections 2-7). Everything a request smuggler needs — two lengths, a
 * length beside chunked, a coding we would misread, a folded or LF-only
 * line, a header name with a space — is refused here, before the request
 * is routed, so the connection is closed instead of read on.
 */
#include <string.h>
#include <strings.h>

#include "server/http_parse.h"

/* tchar: "!#$%&'*+-.^_`|~" DIGIT ALPHA */
static int tchar(unsigned char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

int moe8_http_is_token(const char *s, size_t n) {
    if (!n) return 0;
    for (size_t i = 0; i < n; i++)
        if (!tchar((unsigned char)s[i])) return 0;
    return 1;
}

/* field-vchar, SP and HTAB (obs-text allowed) */
static int value_char(unsigned char c) { return c == '\t' || (c >= 0x20 && c != 0x7f); }

static int ieq(const char *a, size_t n, const char *b) {
    size_t m = strlen(b);
    if (n != m) return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char x = (unsigned char)a[i], y = (unsigned char)b[i];
        if (x >= 'A' && x <= 'Z') x = (unsigned char)(x + 32);
        if (y >= 'A' && y <= 'Z') y = (unsigned char)(y + 32);
        if (x != y) return 0;
    }
    return 1;
}

long moe8_http_head_scan(const char *buf, size_t n, size_t *pos, size_t *skip, const char **why) {
    size_t i = *pos, line_start;
    /* empty lines before the request line (RFC 9112 §2.2), a few */
    if (i == *skip) {
        size_t k = *skip;
        while (k + 1 < n && buf[k] == '\r' && buf[k + 1] == '\n') k += 2;
        if (k > HTTP_MAX_EMPTY_LINES * 2) {
            *why = "too many empty lines before the request line";
            return -400;
        }
        *skip = *pos = k;
        if (k + 1 == n && buf[k] == '\r') return 0;
        i = k;
    }
    line_start = i;
    /* resume at the start of the line holding *pos */
    while (line_start > *skip && buf[line_start - 1] != '\n') line_start--;
    for (; i < n; i++) {
        const char c = buf[i];
        if (c == '\r') {
            if (i + 1 == n) break; /* the LF may come next */
            if (buf[i + 1] != '\n') {
                *why = "a bare CR in the request head (lines end in CRLF)";
                return -400;
            }
            continue;
        }
        if (c != '\n') {
            if (line_start == *skip && i - line_start >= HTTP_MAX_LINE) {
                *why = "the request line is longer than 8 KiB";
                return -414;
            }
            if (i - *skip >= HTTP_MAX_HEAD) {
                *why = "the request head is longer than 32 KiB";
                return -431;
            }
            continue;
        }
        if (i == 0 || buf[i - 1] != '\r') {
            *why = "a bare LF in the request head (lines end in CRLF)";
            return -400;
        }
        if (i - 1 == line_start && line_start > *skip) { /* the empty line: the end */
            *pos = i + 1;
            return (long)(i + 1 - *skip);
        }
        line_start = i + 1;
    }
    *pos = i;
    if (i - *skip >= HTTP_MAX_HEAD) {
        *why = "the request head is longer than 32 KiB";
        return -431;
    }
    return 0;
}

/* Trim optional whitespace (SP, HTAB) from both ends. */
static void ows_trim(const char **s, size_t *n) {
    while (*n && (**s == ' ' || **s == '\t')) (*s)++, (*n)--;
    while (*n && ((*s)[*n - 1] == ' ' || (*s)[*n - 1] == '\t')) (*n)--;
}

/* Next comma-separated list member of s[*at..n), trimmed; 0 at the end. */
static int list_next(const char *s, size_t n, size_t *at, const char **m, size_t *mn) {
    while (*at < n) {
        size_t b = *at, e = b;
        while (e < n && s[e] != ',') e++;
        *at = e < n ? e + 1 : e;
        *m = s + b;
        *mn = e - b;
        ows_trim(m, mn);
        if (*mn) return 1;
    }
    return 0;
}

static int parse_request_line(const char *p, size_t n, http_head *h, const char **why) {
    const char *sp1 = memchr(p, ' ', n), *sp2;
    size_t rest;
    if (!sp1) goto bad;
    h->method = p;
    h->method_len = (size_t)(sp1 - p);
    if (!moe8_http_is_token(h->method, h->method_len)) goto bad;
    rest = n - h->method_len - 1;
    sp2 = memchr(sp1 + 1, ' ', rest);
    if (!sp2) goto bad;
    h->target = sp1 + 1;
    h->target_len = (size_t)(sp2 - h->target);
    if (!h->target_len) goto bad;
    for (size_t i = 0; i < h->target_len; i++) {
        const unsigned char c = (unsigned char)h->target[i];
        if (c <= 0x20 || c >= 0x7f) goto bad;
    }
    {
        const char *v = sp2 + 1;
        const size_t vn = (size_t)(p + n - v);
        if (vn != 8 || memcmp(v, "HTTP/", 5) || v[5] < '0' || v[5] > '9' || v[6] != '.' ||
            v[7] < '0' || v[7] > '9') {
            *why = "the request line must be 'METHOD TARGET HTTP/1.1'";
            return 400;
        }
        if (v[5] != '1' || v[7] > '1') {
            *why = "only HTTP/1.0 and HTTP/1.1 are supported";
            return 505;
        }
        h->minor = v[7] - '0';
    }
    h->path = h->target;
    h->path_len = h->target_len;
    /* absolute-form (RFC 9112 §3.2.2), which a server must accept: its path */
    for (int k = 0; k < 2; k++) {
        const char *scheme = k ? "https://" : "http://";
        const size_t sn = strlen(scheme);
        if (h->target_len > sn && !strncasecmp(h->target, scheme, sn)) {
            const char *slash = memchr(h->target + sn, '/', h->target_len - sn);
            if (!slash) {
                *why = "an absolute request target must have a path ('http://host/...')";
                return 400;
            }
            h->path = slash;
            h->path_len = (size_t)(h->target + h->target_len - slash);
        }
    }
    if (h->path[0] != '/' && !(h->target_len == 1 && h->target[0] == '*')) {
        *why = "the request target must be a path starting with '/'";
        return 400;
    }
    {
        const char *q = memchr(h->path, '?', h->path_len);
        if (q) h->path_len = (size_t)(q - h->path);
    }
    return 0;
bad:
    *why = "the request line must be 'METHOD TARGET HTTP/1.1' (single spaces, no control characters)";
    return 400;
}

/* What the header lines said, for the checks after the last one. */
typedef struct {
    int n_host, n_cl, n_te, n_headers, conn_close, conn_keep;
    int te_chunked_last, te_other, te_chunked_twice, n_expect, expect_other;
} head_tally;

/* One header line at p (before end): *name and *val (trimmed) of it, *next
 * the line after; *name_n 0 for the empty line that ends the head. 0, or
 * the status with *why. */
static int header_line(const char *p, const char *end, head_tally *t, const char **name, size_t *name_n,
                       const char **val, size_t *val_n, const char **next, const char **why) {
    const char *eol, *colon;
    size_t line_n;
    if (p >= end) {
        *why = "the request head has no empty line at its end";
        return 400;
    }
    eol = memchr(p, '\n', (size_t)(end - p));
    if (!eol || eol == p || eol[-1] != '\r') {
        *why = "a header line that does not end in CRLF";
        return 400;
    }
    line_n = (size_t)(eol - 1 - p);
    *name_n = 0;
    *next = eol + 1;
    if (line_n == 0) return 0; /* the empty line */
    if (++t->n_headers > HTTP_MAX_HEADERS) {
        *why = "more than 100 header lines";
        return 431;
    }
    if (*p == ' ' || *p == '\t') {
        *why = "a folded header line (obs-fold: a line starting with a space or tab)";
        return 400;
    }
    colon = memchr(p, ':', line_n);
    if (!colon || !moe8_http_is_token(p, (size_t)(colon - p))) {
        *why = "a header name that is not a token followed by ':' (no spaces before the colon)";
        return 400;
    }
    *name = p;
    *name_n = (size_t)(colon - p);
    *val = colon + 1;
    *val_n = line_n - *name_n - 1;
    for (size_t i = 0; i < *val_n; i++)
        if (!value_char((unsigned char)(*val)[i])) {
            *why = "a header value holding a control character";
            return 400;
        }
    ows_trim(val, val_n);
    return 0;
}

/* The headers the server reads, into h and the tally: 0, or 400 with *why. */
static int header_take(http_head *h, head_tally *t, const char *name, size_t name_n, const char *val,
                       size_t val_n, const char **why) {
    size_t at = 0, mn;
    const char *m;
    if (ieq(name, name_n, "host")) {
        t->n_host++;
    } else if (ieq(name, name_n, "content-length")) {
        int64_t v = 0;
        if (++t->n_cl > 1) {
            *why = "Content-Length given more than once";
            return 400;
        }
        if (!val_n || val_n > 18) {
            *why = "Content-Length must be a decimal number of bytes";
            return 400;
        }
        for (size_t i = 0; i < val_n; i++) {
            if (val[i] < '0' || val[i] > '9') {
                *why = "Content-Length must be a decimal number of bytes";
                return 400;
            }
            v = v * 10 + (val[i] - '0');
        }
        h->content_length = v;
    } else if (ieq(name, name_n, "transfer-encoding")) {
        t->n_te++;
        while (list_next(val, val_n, &at, &m, &mn)) {
            if (t->te_chunked_last) t->te_chunked_twice |= ieq(m, mn, "chunked"), t->te_other = 1;
            if (ieq(m, mn, "chunked")) t->te_chunked_last = 1;
            else t->te_chunked_last = 0, t->te_other = 1;
        }
        if (!val_n) t->te_chunked_last = 0, t->te_other = 1;
    } else if (ieq(name, name_n, "connection")) {
        while (list_next(val, val_n, &at, &m, &mn)) {
            if (ieq(m, mn, "close")) t->conn_close = 1;
            else if (ieq(m, mn, "keep-alive")) t->conn_keep = 1;
        }
    } else if (ieq(name, name_n, "expect")) {
        t->n_expect++;
        if (ieq(val, val_n, "100-continue")) h->expect_continue = 1;
        else t->expect_other = 1;
    } else if (ieq(name, name_n, "authorization")) {
        h->auth = val;
        h->auth_len = val_n;
    } else if (ieq(name, name_n, "origin")) {
        h->origin = val;
        h->origin_len = val_n;
    } else if (ieq(name, name_n, "x-api-key")) {
        h->x_api_key = val;
        h->x_api_key_len = val_n;
    } else if (ieq(name, name_n, "x-request-id")) {
        h->x_request_id = val;
        h->x_request_id_len = val_n;
    }
    return 0;
}

/* The head as a whole: Host, the body's framing, Expect, keep-alive. */
static int head_checks(http_head *h, const head_tally *t, const char **why) {
    if (h->minor == 1 && t->n_host != 1) {
        *why = t->n_host ? "Host given more than once" : "an HTTP/1.1 request needs a Host header";
        return 400;
    }
    if (t->n_host > 1) {
        *why = "Host given more than once";
        return 400;
    }
    if (t->n_te) {
        if (t->n_cl) {
            *why = "Content-Length together with Transfer-Encoding (a request must frame its body one way)";
            return 400;
        }
        if (h->minor == 0) {
            *why = "Transfer-Encoding in an HTTP/1.0 request";
            return 400;
        }
        if (!t->te_chunked_last || t->te_chunked_twice) {
            *why = "Transfer-Encoding must end in a single chunked";
            return 400;
        }
        if (t->te_other) {
            *why = "Transfer-Encoding: only chunked is implemented (no other coding before it)";
            return 501;
        }
        h->chunked = 1;
    }
    if (t->n_expect && (t->expect_other || t->n_expect > 1)) {
        *why = "Expect: only 100-continue is supported";
        return 417;
    }
    h->keep_alive = h->minor == 1 ? !t->conn_close : t->conn_keep && !t->conn_close;
    return 0;
}

int moe8_http_head_parse(const char *buf, size_t n, http_head *h, const char **why) {
    const char *p = buf, *end = buf + n, *eol;
    head_tally t = {0};
    int rc;
    memset(h, 0, sizeof *h);
    h->content_length = -1;
    eol = memchr(p, '\n', n);
    if (!eol || eol == p || eol[-1] != '\r') {
        *why = "the request head must end its lines in CRLF";
        return 400;
    }
    if ((size_t)(eol - 1 - p) > HTTP_MAX_LINE) {
        *why = "the request line is longer than 8 KiB";
        return 414;
    }
    if ((rc = parse_request_line(p, (size_t)(eol - 1 - p), h, why))) return rc;
    p = eol + 1;
    for (;;) {
        const char *name = NULL, *val = NULL;
        size_t name_n, val_n;
        if ((rc = header_line(p, end, &t, &name, &name_n, &val, &val_n, &p, why))) return rc;
        if (!name_n) break;
        if ((rc = header_take(h, &t, name, name_n, val, val_n, why))) return rc;
    }
    return head_checks(h, &t, why);
}

/* ---- chunked ----------------------------------------------------------------- */

enum {
    CK_SIZE = 0,   /* hex digits */
    CK_EXT,        /* after the size: BWS, ';' extensions, until CR */
    CK_SIZE_LF,    /* CR seen after the size line */
    CK_DATA,
    CK_DATA_CR,    /* after the data: CR */
    CK_DATA_LF,
    CK_TRAILER,    /* start of a trailer line, or the final empty line */
    CK_TRAILER_LINE,
    CK_TRAILER_LF,
    CK_FINAL_LF,
    CK_DONE,
};

static int hexval(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

#define CK_FAIL(msg) do { *why = (msg); return -400; } while (0)

long moe8_http_chunked_feed(http_chunked *c, const char *in, size_t n, char *out, size_t out_cap,
                       size_t *out_n, uint64_t max, int *done, const char **why) {
    size_t i = 0;
    *done = 0;
    while (i < n) {
        const char ch = in[i];
        switch (c->st) {
        case CK_SIZE: {
            const int v = hexval(ch);
            if (v >= 0) {
                if (++c->digits > 15) CK_FAIL("a chunk size with more than 15 hex digits");
                c->left = c->left * 16 + (uint64_t)v;
                i++;
                break;
            }
            if (!c->digits) CK_FAIL("a chunk must start with its size in hex");
            if (c->left > max || *out_n + c->left > max) {
                *why = "the chunked body is larger than --max-body";
                return -413;
            }
            c->st = CK_EXT;
            c->line = 0;
            break;
        }
        case CK_EXT:
            if (ch == '\r') c->st = CK_SIZE_LF;
            else if (ch == '\n') CK_FAIL("a bare LF in the chunked framing");
            else if (!value_char((unsigned char)ch)) CK_FAIL("a control character in a chunk extension");
            else if (++c->line > 4096) CK_FAIL("a chunk extension longer than 4 KiB");
            else if (c->line == 1 && ch != ';' && ch != ' ' && ch != '\t')
                CK_FAIL("a chunk size must be followed by CRLF or ';' extensions");
            i++;
            break;
        case CK_SIZE_LF:
            if (ch != '\n') CK_FAIL("a bare CR in the chunked framing");
            i++;
            c->st = c->left ? CK_DATA : CK_TRAILER;
            c->digits = 0;
            c->line = 0;
            break;
        case CK_DATA: {
            size_t k = n - i < c->left ? n - i : (size_t)c->left;
            if (*out_n + k > out_cap) k = out_cap - *out_n; /* the caller reserved n per call */
            memcpy(out + *out_n, in + i, k);
            *out_n += k;
            c->left -= k;
            i += k;
            if (!c->left) c->st = CK_DATA_CR;
            break;
        }
        case CK_DATA_CR:
            if (ch != '\r') CK_FAIL("a chunk's data must be followed by CRLF");
            i++;
            c->st = CK_DATA_LF;
            break;
        case CK_DATA_LF:
            if (ch != '\n') CK_FAIL("a chunk's data must be followed by CRLF");
            i++;
            c->st = CK_SIZE;
            c->left = 0;
            break;
        case CK_TRAILER:
            if (ch == '\r') {
                c->st = CK_FINAL_LF;
            } else if (ch == '\n') {
                CK_FAIL("a bare LF in the chunked trailer");
            } else {
                if (!tchar((unsigned char)ch)) CK_FAIL("a trailer field that does not start with a token");
                c->st = CK_TRAILER_LINE;
                c->line = 1;
                c->digits = 0; /* here: 1 once the field's colon was seen */
            }
            i++;
            break;
        case CK_TRAILER_LINE:
            if (!c->digits && ch == ':') c->digits = 1;
            else if (!c->digits && !tchar((unsigned char)ch)) CK_FAIL("a trailer field name that is not a token followed by ':'");
            if (ch == '\r') c->st = CK_TRAILER_LF;
            else if (ch == '\n') CK_FAIL("a bare LF in the chunked trailer");
            else if (!value_char((unsigned char)ch)) CK_FAIL("a control character in the chunked trailer");
            if (++c->trailer > 8192) CK_FAIL("a chunked trailer longer than 8 KiB");
            i++;
            break;
        case CK_TRAILER_LF:
            if (ch != '\n') CK_FAIL("a bare CR in the chunked trailer");
            i++;
            c->st = CK_TRAILER;
            break;
        case CK_FINAL_LF:
            if (ch != '\n') CK_FAIL("a bare CR at the end of the chunked body");
            i++;
            c->st = CK_DONE;
            *done = 1;
            return (long)i;
        default:
            *done = 1;
            return (long)i;
        }
    }
    return (long)i;
}
