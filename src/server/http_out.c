/*
 * http_out.c — what moe8 serve writes to a connection: the one response-head
 * writer (status line, Date, Content-Type, length or chunked framing, the
 * connection and CORS lines), whole answers and error bodies (OpenAI's, or
 * the endpoint row's shape), the
 * chunked (HTTP/1.1) or close-delimited (HTTP/1.0) bodies of streams, SSE
 * events, the early 200 and skipped bytes that probe a half-closed client,
 * and the socket writes themselves.
 *
 * The jobs' output reaches a connection here (pump, under the lock): a
 * stream's events in choice order as they come and its tail once every
 * choice is done; a whole answer once every choice is done. The bodies
 * themselves are written by the endpoint's emitters (endpoints.c); this file
 * frames them.
 *
 * Does not: read, route, or decide when a connection closes (http.c,
 * http_route.c).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/core.h"
#include "server/http_impl.h"

/* ---- heads ------------------------------------------------------------------------------ */

static const char *reason(int st) {
    switch (st) {
    case 100: return "Continue";
    case 200: return "OK";
    case 204: return "No Content";
    case 403: return "Forbidden";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 417: return "Expectation Failed";
    case 431: return "Request Header Fields Too Large";
    case 499: return "Client Closed Request";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
    }
}

static const char *http_date(http *h) {
    time_t t = time(NULL);
    if (t != h->date_t) {
        struct tm tm;
        gmtime_r(&t, &tm);
        strftime(h->date, sizeof h->date, "%a, %d %b %Y %H:%M:%S GMT", &tm);
        h->date_t = t;
    }
    return h->date;
}

/* CORS response headers for an allowed Origin (none without --allowed-origins). */
static void cors_headers(http *h, conn *c) {
    (void)h;
    if (!c->origin[0]) return;
    moe8_buf_str(&c->out, "Access-Control-Allow-Origin: ");
    moe8_buf_str(&c->out, c->origin);
    moe8_buf_str(&c->out, "\r\nVary: Origin\r\n");
    if (c->preflight)
        moe8_buf_str(&c->out, "Access-Control-Allow-Methods: GET, POST, OPTIONS\r\n"
                          "Access-Control-Allow-Headers: Authorization, Content-Type, OpenAI-Organization, "
                          "OpenAI-Project, X-Stainless-Arch, X-Stainless-Lang, X-Stainless-OS, "
                          "X-Stainless-Package-Version, X-Stainless-Retry-Count, X-Stainless-Runtime, "
                          "X-Stainless-Runtime-Version, X-Stainless-Timeout, X-Request-Id\r\n"
                          "Access-Control-Max-Age: 600\r\n");
}

/* The one head writer: the status line, Date and Content-Type; then
 * Content-Length when `length` >= 0, WWW-Authenticate for a 401,
 * Cache-Control for a stream (no_cache), `framing` (a Connection or
 * Transfer-Encoding line, or ""), the CORS lines of c's allowed origin (c
 * NULL: none) and the blank line. */
static void head_write(http *h, moe8_buf *out, conn *c, int status, const char *type, long long length,
                       int no_cache, const char *framing) {
    moe8_buf_printf(out, "HTTP/1.1 %d %s\r\nDate: %s\r\nContent-Type: %s\r\n", status, reason(status),
                    http_date(h), type);
    if (length >= 0) moe8_buf_printf(out, "Content-Length: %lld\r\n", length);
    if (status == 401) moe8_buf_str(out, "WWW-Authenticate: Bearer\r\n");
    if (no_cache) moe8_buf_str(out, "Cache-Control: no-cache\r\n");
    moe8_buf_str(out, framing);
    if (c && c->rid[0]) moe8_buf_printf(out, "x-request-id: %s\r\n", c->rid);
    if (c) cors_headers(h, c);
    moe8_buf_str(out, "\r\n");
}

/* A whole answer into c->out; to a HEAD request its head alone (RFC 9110
 * 9.3.2: no body; Content-Length the size a GET would have had). */
void moe8_http_respond(http *h, conn *c, int status, const char *type, const char *body, size_t n) {
    if (!c->keep_alive || c->rd_eof) c->close_after = 1;
    if (c->out_off == c->out.n) c->t_write = moe8_time_s(); /* the write timeout starts now */
    head_write(h, &c->out, c, status, type, (long long)n, 0,
               c->close_after ? "Connection: close\r\n" : c->minor == 0 ? "Connection: keep-alive\r\n" : "");
    if (strcmp(c->method, "HEAD")) moe8_buf_add(&c->out, body ? body : "", n);
    c->status = status;
    c->answered = 1;
    if (c->st != C_CLOSE) c->st = C_WORK; /* nothing more is parsed until it is written */
}

void moe8_http_respond_error(http *h, conn *c, int status, const char *type, const char *code,
                             const char *fmt, ...) {
    char msg[600];
    moe8_buf b = {0};
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    moe8_oa_error(&b, type, NULL, code, "%s", msg);
    if (c->ep && c->ep->error) c->ep->error(status, 0, &b); /* the path's API's shape */
    moe8_http_respond(h, c, status, "application/json", b.p, b.n);
    moe8_buf_free(&b);
}

/* A connection past a limit: its 503 written at once and closed, holding
 * nothing (what it sent is read first, so the close is no reset that could
 * eat the answer). No access-log line: the limit's line counts it. */
void moe8_http_refuse_now(http *h, int fd, int kind) {
    char drop[4096];
    moe8_buf b = {0}, head = {0};
    int budget = 16;
    moe8_oa_error(&b, "server_error", NULL, "overloaded", "%s",
             kind == L_CONN ? "the server has too many connections (--max-connections); try again later"
             : kind == L_IP ? "too many connections from this address (--max-connections-per-ip); try again later"
                            : "the server is holding too many request bodies (--max-buffered); try again later");
    head_write(h, &head, NULL, 503, "application/json", (long long)b.n, 0, "Connection: close\r\n");
    while (budget-- > 0 && recv(fd, drop, sizeof drop, MSG_DONTWAIT) > 0) {
    }
    if (head.p && send(fd, head.p, head.n, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)head.n)
        send(fd, b.p, b.n, MSG_NOSIGNAL | MSG_DONTWAIT);
    shutdown(fd, SHUT_WR);
    budget = 16;
    while (budget-- > 0 && recv(fd, drop, sizeof drop, MSG_DONTWAIT) > 0) {
    }
    close(fd);
    moe8_buf_free(&head);
    moe8_buf_free(&b);
}

/* ---- writing ---------------------------------------------------------------------------- */

/* Push and pull: write what is pending; when an answer is done, go on. */
int moe8_http_flush(http *h, conn *c) {
    for (;;) {
        while (c->out_off < c->out.n) {
            ssize_t k = send(c->fd, c->out.p + c->out_off, c->out.n - c->out_off, MSG_NOSIGNAL);
            if (k > 0) {
                c->out_off += (size_t)k;
                c->t_write = moe8_time_s();
                continue;
            }
            if (k < 0 && errno == EINTR) continue;
            if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                moe8_http_set_events(h, c);
                return 0;
            }
            moe8_http_conn_close(h, c, "client gone");
            return -1;
        }
        c->out.n = c->out_off = 0;
        if (c->out.cap > 65536) moe8_buf_free(&c->out);
        if (c->st == C_CLOSE || !c->answered) break;
        {
            int rc = moe8_http_request_done(h, c);
            if (rc < 0) return -1;
            if (rc == 0) break;
        }
        moe8_http_advance(h, c);
        if (c->out.n == 0) break;
    }
    if (c->st == C_IDLE && c->rd_eof && c->in.n == c->in_off) {
        moe8_http_conn_close(h, c, NULL);
        return -1;
    }
    moe8_http_set_events(h, c);
    return 0;
}

/* ---- bodies: chunks, streams, the jobs' news ------------------------------------------- */

void moe8_http_notify(srv *s, job *j) {
    http *h = s->http;
    if (!j->conn || j->notified || !h) return;
    j->notified = 1;
    j->refs++;
    j->ready_next = s->ready_head;
    if (!s->ready_head) {
        uint64_t one = 1;
        s->ready_head = j;
        if (write(h->efd, &one, sizeof one) < 0) { /* the counter is full: a wake-up is pending anyway */
        }
        return;
    }
    s->ready_head = j;
}

static void chunk(conn *c, const char *p, size_t n) {
    char head[24];
    if (!n) return;
    if (c->minor == 0) {
        moe8_buf_add(&c->out, p, n);
        return;
    }
    snprintf(head, sizeof head, "%zx\r\n", n);
    moe8_buf_str(&c->out, head);
    moe8_buf_add(&c->out, p, n);
    moe8_buf_str(&c->out, "\r\n");
}

/* The 200 of an answer whose length is not known yet: chunked (HTTP/1.1)
 * or ended by the close (HTTP/1.0). */
static void send_head(http *h, conn *c, const char *type) {
    if (c->minor == 0) c->close_after = 1;
    if (c->out_off == c->out.n) c->t_write = moe8_time_s();
    head_write(h, &c->out, c, 200, type, -1, c->stream,
               c->minor == 0 ? "Connection: close\r\n" : "Transfer-Encoding: chunked\r\n");
    c->hdr_sent = 1;
    c->status = 200;
}

static void body_end(conn *c) {
    if (c->minor == 1) moe8_buf_str(&c->out, "0\r\n\r\n");
    c->answered = 1;
}

/* The jobs' news into the connection's output (under the lock): a stream's
 * events in choice order as they come, its tail once every choice is done;
 * a whole answer once every choice is done. */
static void pump(http *h, conn *c) {
    srv *s = h->s;
    job *lead = c->jobs[0];
    int all_done = 1;
    moe8_buf b = {0};
    if (c->answered || !c->n_jobs) return;
    if (c->out_off == c->out.n) c->t_write = moe8_time_s();
    for (int i = 0; i < c->n_jobs; i++) all_done &= c->jobs[i]->done;
    if (!c->stream || (lead->done && !lead->started)) {
        const job *bad = NULL;
        if (!all_done) return;
        for (int i = 0; i < c->n_jobs && !bad; i++)
            if (c->jobs[i]->status != 200 || (c->stream && !c->jobs[i]->started)) bad = c->jobs[i];
        if (bad) { /* an error: its status, or after probes (the 200 is out) as the body */
            const int status = bad->status ? bad->status : 500;
            if (c->ep->error) { /* the path's API's shape, as an event once a stream's 200 is out */
                moe8_buf b2 = {0};
                moe8_buf_add(&b2, bad->out.p ? bad->out.p : "", bad->out.n);
                c->ep->error(status, c->hdr_sent && c->stream, &b2);
                if (!c->hdr_sent) moe8_http_respond(h, c, status, "application/json", b2.p, b2.n);
                else {
                    chunk(c, b2.p, b2.n);
                    body_end(c);
                }
                moe8_buf_free(&b2);
            } else if (!c->hdr_sent) moe8_http_respond(h, c, status, "application/json", bad->out.p, bad->out.n);
            else {
                if (c->stream) chunk(c, "data: ", 6);
                chunk(c, bad->out.p, bad->out.n);
                if (c->stream) chunk(c, "\n\ndata: [DONE]\n\n", 16);
                body_end(c);
            }
            return;
        }
        c->ep->respond(s, c->jobs, c->n_jobs, &b);
        if (!c->hdr_sent) moe8_http_respond(h, c, 200, "application/json", b.p, b.n);
        else {
            chunk(c, b.p, b.n);
            body_end(c);
        }
        moe8_buf_free(&b);
        return;
    }
    if (!lead->started) return;
    if (!c->hdr_sent) send_head(h, c, "text/event-stream");
    for (int i = 0; i < c->n_jobs; i++) {
        job *j = c->jobs[i];
        if (j->done && !j->started) { /* a choice refused after the leader started: an error event */
            if (j->out.n) {
                chunk(c, "data: ", 6);
                chunk(c, j->out.p, j->out.n);
                chunk(c, "\n\n", 2);
                j->out.n = 0;
            }
            continue;
        }
        if (j->sent < j->out.n) {
            chunk(c, j->out.p + j->sent, j->out.n - j->sent);
            j->sent = j->out.n = 0;
        }
    }
    if (all_done) {
        c->ep->tail(s, c->jobs, c->n_jobs, &b);
        chunk(c, b.p, b.n);
        moe8_buf_free(&b);
        body_end(c);
    }
}

void moe8_http_probe(http *h, conn *c, double now) {
    c->t_probe = now;
    if (c->out_off < c->out.n) return; /* a write is under way: it will tell */
    if (!c->hdr_sent) send_head(h, c, c->stream ? "text/event-stream" : "application/json");
    if (c->stream) chunk(c, ": ping\n\n", 8);
    else chunk(c, " ", 1);
}

/* The jobs with news (moe8_http_notify's list) into their connections (under the lock). */
void moe8_http_jobs_news(http *h) {
    srv *s = h->s;
    job *list = s->ready_head;
    s->ready_head = NULL;
    while (list) {
        job *j = list;
        list = j->ready_next;
        j->notified = 0;
        if (j->conn) {
            conn *c = j->conn;
            pump(h, c);
            moe8_http_flush_add(h, c);
        }
        if (--j->refs == 0) moe8_job_free(j);
    }
}
