/*
 * http.c — the HTTP/1.1 server of moe8 serve: one thread runs an epoll loop
 * over every socket; a small pool of workers does the CPU work of requests
 * (JSON, chat templates, tokenizing); the engine thread writes each job's
 * output and tells this thread (moe8_http_notify) through an eventfd.
 *
 * A connection goes IDLE -> HEAD -> BODY -> WORK -> (answer written) ->
 * IDLE again for the next request, or CLOSE. This file reads: heads are
 * scanned here and decided by http_route.c (framing, auth, route, size,
 * room) before a byte of the body is read or buffered; bodies (sized or
 * chunked) are read here and handed to the route. A refusal with a body
 * pending closes the connection after a short lingering read (so the
 * client sees the answer).
 *
 * Time limits, checked every 100 ms: the head within --header-timeout of the
 * accept (or of the request's first byte on a kept-alive connection); the
 * body at --body-min-rate bytes/s on average after a grace of
 * --header-timeout, and never silent for --timeout; an idle kept-alive
 * connection closed after --timeout; an answer the client does not read for
 * --timeout closed (its request cancelled). Connections past --max-connections
 * or --max-connections-per-ip, or while --max-buffered is full, get 503.
 * Each limit is logged at most once per 10 s, with the count.
 *
 * A client is gone when a write fails or the socket reports an error or a
 * hang-up — never because it half-closed (shutdown(SHUT_WR) after its
 * request): its answer is written whole, then the connection closes. As TCP
 * cannot tell a half-close from a close until something is written, a
 * client whose end of file came while its answer is not ready is probed,
 * at once and then every second: the answer's 200 goes out early, chunked,
 * with a byte the body's parser skips (a space before a JSON body, an SSE
 * comment line in a stream: http_out.c); a closed socket answers that with
 * a reset, a half-closed one reads on. Bytes a client pipelines behind a
 * request are read into the connection's buffer (up to 64 KiB), so they
 * never hide a close.
 *
 * Streams: the 200 and the SSE events go out once the engine has accepted
 * the job (a refusal before that keeps its status), chunked (HTTP/1.1) or
 * close-delimited (HTTP/1.0). Each request ends with one access-log line.
 *
 * Does not: decide a request (http_route.c), know any API (endpoints.c),
 * or format what it writes (http_out.c).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/core.h"
#include "server/http_impl.h"

static const char LISTEN_TAG = 'l', KICK_TAG = 'k';

/* ---- logging at limits -------------------------------------------------------------- */

static const struct { const char *what, *flag; } LIMITS[L_N] = {
    {"connections refused: the server holds its most connections", "--max-connections"},
    {"connections refused: too many from one address", "--max-connections-per-ip"},
    {"requests refused: the bytes buffered for request bodies are at the limit", "--max-buffered"},
    {"connections closed: request head not complete in time", "--header-timeout"},
    {"connections closed: request body too slow", "--body-min-rate"},
    {"connections closed: the client did not read its answer", "--timeout"},
    {"connections dropped: out of file descriptors", "ulimit -n"},
};

static void limit_flush(http *h, int k, double now) {
    limit_log *l = &h->lim[k];
    char val[64];
    if (!l->n) return;
    switch (k) {
    case L_CONN: snprintf(val, sizeof val, " %d", h->max_conns); break;
    case L_IP: snprintf(val, sizeof val, " %d", h->s->p.max_connections_per_ip); break;
    case L_BUFFERED: snprintf(val, sizeof val, " %llu", (unsigned long long)h->s->p.max_buffered); break;
    case L_HEADER: snprintf(val, sizeof val, " %g", h->s->p.header_timeout_s); break;
    case L_BODY: snprintf(val, sizeof val, " %g", h->s->p.body_min_rate); break;
    case L_WRITE: snprintf(val, sizeof val, " %g", h->s->p.timeout_s); break;
    default: val[0] = '\0';
    }
    moe8_srv_log(h->s, "limit: %llu %s (%s%s)%s%s", (unsigned long long)l->n, LIMITS[k].what, LIMITS[k].flag,
             val, l->last[0] ? ", last from " : "", l->last);
    l->n = 0;
    l->t_line = now;
}

void moe8_http_limit_hit(http *h, int k, const char *addr, double now) {
    limit_log *l = &h->lim[k];
    l->n++;
    snprintf(l->last, sizeof l->last, "%s", addr ? addr : "");
    if (l->t_line == 0 || now - l->t_line >= LOG_EVERY_S) limit_flush(h, k, now);
}

/* ---- buffers and accounting ------------------------------------------------------------- */

static void count(http *h, conn *c, size_t now_bytes) {
    h->buffered = h->buffered - c->counted + now_bytes;
    c->counted = now_bytes;
}

void moe8_http_recount(http *h, conn *c) {
    count(h, c, (c->in.n - c->in_off) + (c->body.cap > c->body_len ? c->body.cap : (size_t)c->body_len));
}

/* ---- connections ---------------------------------------------------------------------- */

static unsigned ip_hash(const unsigned char a[16]) {
    return (unsigned)(moe8_hash64(a, 16, 0) % IP_BUCKETS);
}

static ipslot *ip_get(http *h, const unsigned char a[16]) {
    ipslot **pp = &h->ips[ip_hash(a)], *p;
    for (p = *pp; p; p = p->next)
        if (!memcmp(p->addr, a, 16)) return p;
    if (!(p = calloc(1, sizeof *p))) return NULL;
    memcpy(p->addr, a, 16);
    p->next = *pp;
    *pp = p;
    return p;
}

static void ip_put(http *h, ipslot *p) {
    ipslot **pp;
    if (!p || --p->n > 0) return;
    for (pp = &h->ips[ip_hash(p->addr)]; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            free(p);
            return;
        }
}

void moe8_http_set_events(http *h, conn *c) {
    unsigned ev = 0;
    struct epoll_event e;
    const int pending = c->out_off < c->out.n;
    if (!c->rd_eof) {
        if (c->st == C_CLOSE) ev |= EPOLLIN;
        else if (c->st == C_WORK) ev |= c->in.n - c->in_off < PIPE_MAX ? EPOLLIN : 0;
        else ev |= EPOLLIN;
    }
    if (pending) ev |= EPOLLOUT;
    if (ev == c->ev) return;
    e.events = ev;
    e.data.ptr = c;
    epoll_ctl(h->ep, EPOLL_CTL_MOD, c->fd, &e);
    c->ev = ev;
}

static void access_line(http *h, conn *c, const char *why) {
    srv *s = h->s;
    char line[400];
    if (c->quiet) return;
    const double ms = 1e3 * (moe8_time_s() - c->t_req);
    snprintf(line, sizeof line, "%s %s %d prompt_tokens=%d gen_tokens=%d ms=%.1f%s%s%s",
             c->method[0] ? c->method : "-", c->path[0] ? c->path : "-", c->status ? c->status : 499,
             c->n_prompt, c->n_gen, ms, why ? " (" : "", why ? why : "", why ? ")" : "");
    moe8_serve_record r = {.level = MOE8_LOG_INFO, .kind = "access", .message = line,
                           .request_id = c->rid[0] ? c->rid : NULL, .client = c->addr,
                           .method = c->method[0] ? c->method : "-", .path = c->path[0] ? c->path : "-",
                           .status = c->status ? c->status : 499, .prompt_tokens = c->n_prompt,
                           .gen_tokens = c->n_gen, .cached_tokens = c->n_cached, .ms = ms,
                           .ttft_ms = c->ttft_ms};
    moe8_srv_emit(s, &r);
}

/* The connection lets go of its jobs (under the lock): cancelled unless done. */
static void job_detach(srv *s, conn *c) {
    if (!c->n_jobs) return;
    c->n_prompt = c->jobs[0]->n_prompt;
    c->n_cached = c->jobs[0]->n_cached;
    c->ttft_ms = c->jobs[0]->t_first > 0 ? 1e3 * (c->jobs[0]->t_first - c->t_req) : -1;
    c->n_gen = 0;
    for (int i = 0; i < c->n_jobs; i++) {
        job *j = c->jobs[i];
        if (!j->done) {
            j->cancel = 1;
            pthread_cond_signal(&s->wake);
        }
        c->n_gen += j->n_gen;
        if (j->finish_note && !c->note) c->note = j->finish_note;
        j->conn = NULL;
        if (--j->refs == 0) moe8_job_free(j);
        c->jobs[i] = NULL;
    }
    c->n_jobs = 0;
}

/* A job nobody else holds yet, with the choices it carries. */
void moe8_http_job_drop(job *j) {
    if (!j) return;
    for (int i = 0; i < j->n_kids; i++) moe8_job_free(j->kids[i]);
    moe8_job_free(j);
}

static void conn_free(conn *c) {
    moe8_buf_free(&c->in);
    moe8_buf_free(&c->body);
    moe8_buf_free(&c->out);
    free(c);
}


/* Close now; `why` for the access log of a request in progress (NULL: none
 * to log). The memory lives until the round ends (conn_reap): an event later
 * in the same epoll batch may name the connection (the kick's flush closed
 * it; its hang-up comes next), and is skipped by its fd of -1. */
void moe8_http_conn_close(http *h, conn *c, const char *why) {
    srv *s = h->s;
    if (c->fd < 0) return;
    if (c->n_jobs) { /* first: the line counts the tokens its jobs made */
        pthread_mutex_lock(&s->lock);
        job_detach(s, c);
        pthread_mutex_unlock(&s->lock);
    }
    if (c->t_req > 0 && why) access_line(h, c, why);
    epoll_ctl(h->ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->fd = -1;
    count(h, c, 0);
    ip_put(h, c->ip);
    if (c->prev) c->prev->next = c->next;
    else h->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    h->n_conns--;
    __atomic_store_n(&h->n_open, h->n_conns, __ATOMIC_RELAXED);
    if (c->t) c->dead = 1; /* the worker's task hands it to conn_retire */
    else moe8_http_conn_retire(h, c);
}

/* A closed connection nothing will use after this round: freed when it ends. */
void moe8_http_conn_retire(http *h, conn *c) {
    c->next = h->closed;
    h->closed = c;
}

/* Free the connections closed this round (no event or list names them any more). */
static void conn_reap(http *h) {
    while (h->closed) {
        conn *c = h->closed;
        h->closed = c->next;
        conn_free(c);
    }
}

/* The current request is over: log it, then the next one (or the close). */
int moe8_http_request_done(http *h, conn *c) {
    srv *s = h->s;
    if (c->n_jobs) {
        pthread_mutex_lock(&s->lock);
        job_detach(s, c);
        pthread_mutex_unlock(&s->lock);
    }
    access_line(h, c, c->note);
    c->served++;
    c->t_req = 0;
    c->answered = 0;
    c->stream = c->hdr_sent = 0;
    c->t_probe = 0;
    c->n_prompt = c->n_gen = c->n_cached = 0;
    c->ttft_ms = -1;
    c->note = NULL;
    c->status = 0;
    c->method[0] = c->path[0] = c->rid[0] = '\0';
    c->ep = NULL; /* the next head's errors are no row's until it is routed */
    moe8_buf_free(&c->body);
    c->body_len = 0;
    moe8_http_recount(h, c);
    if (c->close_after) {
        if (c->rd_eof) {
            moe8_http_conn_close(h, c, NULL);
            return -1;
        }
        /* lingering close: our side is done; what the client still sends is dropped */
        shutdown(c->fd, SHUT_WR);
        c->st = C_CLOSE;
        c->t_phase = moe8_time_s();
        c->in.n = c->in_off = 0;
        moe8_http_recount(h, c);
        moe8_http_set_events(h, c);
        return 0;
    }
    c->st = C_IDLE;
    c->quiet = 0; /* (a closing one keeps it: its linger is short) */
    c->t_phase = moe8_time_s();
    return 1; /* the caller parses what is buffered */
}


/* Consume buffered bytes: heads and bodies, as far as the state allows. */
void moe8_http_advance(http *h, conn *c) {
    for (;;) {
        const char *p = c->in.p + c->in_off;
        const size_t n = c->in.n - c->in_off;
        if (c->st == C_IDLE || c->st == C_HEAD) {
            const char *why = NULL;
            long len;
            if (!n) break;
            if (c->st == C_IDLE) {
                c->st = C_HEAD;
                c->scan = c->skip = 0;
                if (c->served) c->t_phase = moe8_time_s(); /* the first byte of a later request */
            }
            len = moe8_http_head_scan(p, n, &c->scan, &c->skip, &why);
            if (len == 0) break;
            if (len < 0) {
                c->t_req = moe8_time_s();
                c->close_after = 1;
                c->keep_alive = 0;
                moe8_http_respond_error(h, c, (int)-len, "invalid_request_error", "bad_request", "%s", why);
                c->in_off = c->in.n;
                break;
            }
            c->in_off += c->skip + (size_t)len;
            moe8_http_on_head(h, c, p + c->skip, (size_t)len);
            if (c->answered && c->close_after) { /* nothing after it is read */
                c->in_off = c->in.n;
                break;
            }
            continue;
        }
        if (c->st == C_BODY) {
            size_t take;
            if (!n) break;
            if (c->chunked) {
                const char *why = NULL;
                int done = 0;
                long used;
                if (moe8_buf_reserve(&c->body, c->body.n + n)) {
                    c->close_after = 1;
                    moe8_http_respond_error(h, c, 500, "server_error", NULL, "out of memory");
                    break;
                }
                if (h->buffered + n > h->s->p.max_buffered) {
                    c->close_after = 1;
                    moe8_http_limit_hit(h, L_BUFFERED, c->addr, moe8_time_s());
                    moe8_http_respond_error(h, c, 503, "server_error", "overloaded", "the server is holding too "
                                  "many request bodies (--max-buffered); try again later");
                    c->in_off = c->in.n;
                    break;
                }
                used = moe8_http_chunked_feed(&c->ck, p, n, c->body.p, c->body.cap - 1, &c->body.n,
                                         h->s->p.max_body, &done, &why);
                if (used < 0) {
                    c->close_after = 1;
                    if (used == -413)
                        moe8_http_respond_error(h, c, 413, "invalid_request_error", "body_too_large",
                                      "the request body is larger than %llu bytes (--max-body)",
                                      (unsigned long long)h->s->p.max_body);
                    else moe8_http_respond_error(h, c, 400, "invalid_request_error", "bad_request", "%s", why);
                    c->in_off = c->in.n;
                    break;
                }
                c->body.p[c->body.n] = '\0';
                c->in_off += (size_t)used;
                moe8_http_recount(h, c);
                if (!done) continue;
            } else {
                take = n < c->body_len - c->body.n ? n : (size_t)(c->body_len - c->body.n);
                memcpy(c->body.p + c->body.n, p, take);
                c->body.n += take;
                c->body.p[c->body.n] = '\0';
                c->in_off += take;
                if (c->body.n < c->body_len) continue;
            }
            moe8_http_dispatch(h, c);
            continue;
        }
        break; /* C_WORK, C_CLOSE: wait */
    }
    if (c->in_off == c->in.n) c->in.n = c->in_off = 0;
    else if (c->in_off > 65536 && c->in_off * 2 > c->in.n) {
        memmove(c->in.p, c->in.p + c->in_off, c->in.n - c->in_off);
        c->in.n -= c->in_off;
        c->in_off = 0; /* scan positions are relative to in_off: still right */
    }
    moe8_http_recount(h, c);
}
static void conn_read(http *h, conn *c) {
    char buf[65536];
    for (;;) {
        ssize_t k;
        if (c->rd_eof) break;
        if (c->st == C_WORK && c->in.n - c->in_off >= PIPE_MAX) break;
        k = recv(c->fd, buf, sizeof buf, 0);
        if (k > 0) {
            c->t_read = moe8_time_s();
            if (c->st == C_CLOSE) { /* lingering: dropped */
                c->lingered += (size_t)k;
                if (c->lingered > LINGER_BYTES) {
                    moe8_http_conn_close(h, c, NULL);
                    return;
                }
                continue;
            }
            if (moe8_buf_add(&c->in, buf, (size_t)k)) {
                moe8_http_conn_close(h, c, "out of memory");
                return;
            }
            moe8_http_recount(h, c);
            moe8_http_advance(h, c);
            if (c->fd < 0) return;
            if (c->answered && c->close_after) break;
            continue;
        }
        if (k == 0) {
            c->rd_eof = 1;
            if (c->st == C_CLOSE) {
                moe8_http_conn_close(h, c, NULL);
                return;
            }
            if (c->st == C_HEAD || c->st == C_BODY) { /* a request that can never complete */
                moe8_http_conn_close(h, c, c->st == C_BODY ? "client closed during the body" : NULL);
                return;
            }
            if (c->st == C_IDLE && c->in.n == c->in_off && c->out_off == c->out.n) {
                moe8_http_conn_close(h, c, NULL);
                return;
            }
            if (c->st == C_WORK && c->n_jobs && !c->answered) moe8_http_probe(h, c, moe8_time_s()); /* or a close? */
            break; /* a half-close: the answer is still written */
        }
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        moe8_http_conn_close(h, c, "client gone");
        return;
    }
    if (moe8_http_flush(h, c) < 0) return;
}

static void do_accept(http *h) {
    srv *s = h->s;
    for (;;) {
        struct sockaddr_storage a;
        socklen_t al = sizeof a;
        unsigned char key[16];
        const double now = moe8_time_s();
        int fd = accept4(h->lfd, (struct sockaddr *)&a, &al, SOCK_NONBLOCK | SOCK_CLOEXEC);
        int refuse = -1, one = 1;
        conn *c = NULL;
        ipslot *ip;
        char addr[INET6_ADDRSTRLEN] = "";
        struct epoll_event e;
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if ((errno == EMFILE || errno == ENFILE) && h->spare_fd >= 0) {
                /* out of descriptors: take the connection with the spare one, drop it
                 * (accept fails so even with nothing waiting: then stop) */
                close(h->spare_fd);
                fd = accept(h->lfd, NULL, NULL);
                if (fd >= 0) close(fd);
                h->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
                if (fd < 0) return;
                moe8_http_limit_hit(h, L_FD, NULL, now);
                continue;
            }
            return;
        }
        memset(key, 0, sizeof key);
        if (a.ss_family == AF_INET) {
            const struct sockaddr_in *a4 = (const struct sockaddr_in *)&a;
            key[10] = key[11] = 0xff;
            memcpy(key + 12, &a4->sin_addr, 4);
            inet_ntop(AF_INET, &a4->sin_addr, addr, sizeof addr);
        } else if (a.ss_family == AF_INET6) {
            const struct sockaddr_in6 *a6 = (const struct sockaddr_in6 *)&a;
            memcpy(key, &a6->sin6_addr, 16);
            inet_ntop(AF_INET6, &a6->sin6_addr, addr, sizeof addr);
        }
        ip = ip_get(h, key);
        if (h->n_conns >= h->max_conns) refuse = L_CONN;
        else if (s->p.max_connections_per_ip > 0 && ip && ip->n >= s->p.max_connections_per_ip) refuse = L_IP;
        else if (h->buffered >= s->p.max_buffered) refuse = L_BUFFERED;
        if (refuse >= 0 || !(c = calloc(1, sizeof *c))) {
            if (ip && ip->n == 0) { ip->n = 1; ip_put(h, ip); } /* a slot made for nobody */
            if (refuse < 0) refuse = L_CONN;
            moe8_http_limit_hit(h, refuse, addr, now);
            moe8_http_refuse_now(h, fd, refuse);
            continue;
        }
        memcpy(c->addr, addr, sizeof c->addr);
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        c->fd = fd;
        c->t_phase = c->t_read = c->t_write = now;
        c->ip = ip;
        if (c->ip) c->ip->n++;
        c->next = h->conns;
        if (h->conns) h->conns->prev = c;
        h->conns = c;
        h->n_conns++;
        __atomic_store_n(&h->n_open, h->n_conns, __ATOMIC_RELAXED);
        e.events = EPOLLIN;
        e.data.ptr = c;
        c->ev = EPOLLIN;
        if (epoll_ctl(h->ep, EPOLL_CTL_ADD, fd, &e)) moe8_http_conn_close(h, c, NULL);
    }
}

void moe8_http_flush_add(http *h, conn *c) {
    if (c->in_ready) return;
    if (h->n_flush == h->cap_flush) {
        int cap = h->cap_flush ? 2 * h->cap_flush : 64;
        conn **p = realloc(h->flush, (size_t)cap * sizeof *p);
        if (!p) return;
        h->flush = p;
        h->cap_flush = cap;
    }
    c->in_ready = 1;
    h->flush[h->n_flush++] = c;
}

/* Jobs with news (the engine), tasks done (the workers); then every
 * connection they touched is flushed. */
static void on_kick(http *h) {
    srv *s = h->s;
    uint64_t v;
    if (read(h->efd, &v, sizeof v) < 0) { /* nothing pending */
    }
    pthread_mutex_lock(&s->lock);
    moe8_http_jobs_news(h);
    pthread_mutex_unlock(&s->lock);
    moe8_http_tasks_done(h);
    for (int i = 0; i < h->n_flush; i++) {
        conn *c = h->flush[i];
        c->in_ready = 0;
        if (c->fd >= 0 && !c->dead) moe8_http_flush(h, c);
    }
    h->n_flush = 0;
    if (h->quiesce && !h->quiesced) {
        epoll_ctl(h->ep, EPOLL_CTL_DEL, h->lfd, NULL);
        close(h->lfd);
        h->lfd = -1;
        __atomic_store_n(&h->quiesced, 1, __ATOMIC_RELEASE);
    }
}

/* ---- timers ----------------------------------------------------------------------------------- */

static void sweep(http *h, double now) {
    srv *s = h->s;
    for (conn *c = h->conns, *next; c; c = next) {
        next = c->next;
        switch (c->st) {
        case C_IDLE:
            if (!c->served && now - c->t_phase > s->p.header_timeout_s) {
                moe8_http_limit_hit(h, L_HEADER, c->addr, now);
                moe8_http_conn_close(h, c, NULL);
            } else if (c->served && now - c->t_phase > s->p.timeout_s) {
                moe8_http_conn_close(h, c, NULL);
            }
            break;
        case C_HEAD:
            if (now - c->t_phase > s->p.header_timeout_s) {
                moe8_http_limit_hit(h, L_HEADER, c->addr, now);
                c->t_req = now;
                c->close_after = 1;
                c->keep_alive = 0;
                moe8_http_respond_error(h, c, 408, "invalid_request_error", "timeout",
                              "the request head did not arrive within %g s (--header-timeout)",
                              s->p.header_timeout_s);
                c->quiet = 1;
                c->in.n = c->in_off = 0;
                c->st = C_WORK;
                moe8_http_flush(h, c);
            }
            break;
        case C_BODY: {
            const double t = now - c->t_phase - s->p.header_timeout_s;
            const int slow = t > 0 && (double)c->body.n < t * s->p.body_min_rate;
            if (slow || now - c->t_read > s->p.timeout_s) {
                moe8_http_limit_hit(h, L_BODY, c->addr, now);
                c->close_after = 1;
                c->keep_alive = 0;
                moe8_http_respond_error(h, c, 408, "invalid_request_error", "timeout",
                              slow ? "the request body arrives slower than %g bytes/s (--body-min-rate)"
                                   : "the request body stalled for %g s (--timeout)",
                              slow ? s->p.body_min_rate : s->p.timeout_s);
                c->quiet = 1;
                c->st = C_WORK;
                moe8_buf_free(&c->body);
                c->in.n = c->in_off = 0;
                moe8_http_recount(h, c);
                moe8_http_flush(h, c);
            }
            break;
        }
        case C_WORK:
            if (c->out_off < c->out.n && now - c->t_write > s->p.timeout_s) {
                moe8_http_limit_hit(h, L_WRITE, c->addr, now);
                moe8_http_conn_close(h, c, "client stopped reading");
            } else if (c->rd_eof && c->n_jobs && !c->answered && (!c->t_probe || now - c->t_probe >= 1.0)) {
                moe8_http_probe(h, c, now);
                moe8_http_flush(h, c);
            }
            break;
        case C_CLOSE:
            if (now - c->t_phase > (c->quiet ? LINGER_QUIET_S : LINGER_S) ||
                (c->out_off < c->out.n && now - c->t_write > s->p.timeout_s))
                moe8_http_conn_close(h, c, NULL);
            break;
        }
    }
    for (int k = 0; k < L_N; k++)
        if (h->lim[k].n && now - h->lim[k].t_line >= LOG_EVERY_S) limit_flush(h, k, now);
}

/* ---- the loop ---------------------------------------------------------------------------------- */

static void *http_main(void *arg) {
    http *h = arg;
    struct epoll_event ev[256];
    double last = 0;
    while (!h->stop) {
        int n = epoll_wait(h->ep, ev, 256, 100);
        double now;
        for (int i = 0; i < n; i++) {
            void *p = ev[i].data.ptr;
            if (p == &LISTEN_TAG) {
                if (h->lfd >= 0) do_accept(h);
            } else if (p == &KICK_TAG) {
                on_kick(h);
            } else {
                conn *c = p;
                if (c->fd < 0) continue; /* closed by an earlier event of this round */
                if (ev[i].events & (EPOLLERR | EPOLLHUP)) {
                    if (c->st == C_CLOSE) moe8_http_conn_close(h, c, NULL);
                    else moe8_http_conn_close(h, c, "client gone");
                    continue;
                }
                if (ev[i].events & EPOLLIN) conn_read(h, c);
                else if (ev[i].events & EPOLLOUT) moe8_http_flush(h, c);
            }
        }
        now = moe8_time_s();
        if (now - last >= 0.1) {
            sweep(h, now);
            last = now;
        }
        conn_reap(h);
    }
    return NULL;
}

/* ---- start / stop --------------------------------------------------------------------------------- */

static int listen_on(srv *s, moe8_error *err) {
    struct sockaddr_storage a;
    socklen_t al;
    int fd, one = 1;
    memset(&a, 0, sizeof a);
    if (inet_pton(AF_INET, s->p.host, &((struct sockaddr_in *)&a)->sin_addr) == 1) {
        ((struct sockaddr_in *)&a)->sin_family = AF_INET;
        ((struct sockaddr_in *)&a)->sin_port = htons((uint16_t)s->p.port);
        al = sizeof(struct sockaddr_in);
    } else if (inet_pton(AF_INET6, s->p.host, &((struct sockaddr_in6 *)&a)->sin6_addr) == 1) {
        ((struct sockaddr_in6 *)&a)->sin6_family = AF_INET6;
        ((struct sockaddr_in6 *)&a)->sin6_port = htons((uint16_t)s->p.port);
        al = sizeof(struct sockaddr_in6);
    } else {
        moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "--host '%s' is not an IPv4 or IPv6 address", s->p.host);
        return -1;
    }
    fd = socket(a.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
        bind(fd, (struct sockaddr *)&a, al) || listen(fd, 4096)) {
        moe8_fail(err, MOE8_ERR_IO, -1, "cannot listen on %s port %d: %s", s->p.host, s->p.port,
                  strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    al = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &al);
    s->port = ntohs(a.ss_family == AF_INET ? ((struct sockaddr_in *)&a)->sin_port
                                           : ((struct sockaddr_in6 *)&a)->sin6_port);
    return fd;
}

moe8_status moe8_http_start(srv *s, moe8_error *err) {
    http *h = calloc(1, sizeof *h);
    struct epoll_event e;
    struct rlimit rl;
    if (!h) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "out of memory");
    h->s = s;
    h->ep = h->efd = h->spare_fd = -1;
    pthread_mutex_init(&h->tlock, NULL);
    pthread_cond_init(&h->tcond, NULL);
    s->http = h;
    /* as many descriptors as the hard limit allows; connections within them */
    h->max_conns = s->p.max_connections;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        if (rl.rlim_cur < rl.rlim_max) {
            rl.rlim_cur = rl.rlim_max;
            setrlimit(RLIMIT_NOFILE, &rl);
            getrlimit(RLIMIT_NOFILE, &rl);
        }
        if (rl.rlim_cur != RLIM_INFINITY && (rlim_t)h->max_conns + 64 > rl.rlim_cur) {
            h->max_conns = rl.rlim_cur > 128 ? (int)(rl.rlim_cur - 64) : 64;
            moe8_srv_log(s, "note: --max-connections %d lowered to %d by the open-file limit (ulimit -n %llu)",
                     s->p.max_connections, h->max_conns, (unsigned long long)rl.rlim_cur);
        }
    }
    if ((h->lfd = listen_on(s, err)) < 0) goto fail;
    h->ep = epoll_create1(EPOLL_CLOEXEC);
    h->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    h->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (h->ep < 0 || h->efd < 0) {
        moe8_fail(err, MOE8_ERR_IO, -1, "serve: epoll or eventfd: %s", strerror(errno));
        goto fail;
    }
    e.events = EPOLLIN;
    e.data.ptr = (void *)&LISTEN_TAG;
    epoll_ctl(h->ep, EPOLL_CTL_ADD, h->lfd, &e);
    e.data.ptr = (void *)&KICK_TAG;
    epoll_ctl(h->ep, EPOLL_CTL_ADD, h->efd, &e);
    for (h->n_workers = 0; h->n_workers < N_WORKERS; h->n_workers++)
        if (pthread_create(&h->workers[h->n_workers], NULL, moe8_http_worker_main, h)) break;
    if (h->n_workers == 0 || pthread_create(&h->thread, NULL, http_main, h)) {
        moe8_fail(err, MOE8_ERR_IO, -1, "serve: cannot start the HTTP threads");
        goto fail;
    }
    h->started = 1;
    return MOE8_OK;
fail:
    moe8_http_stop(s);
    return err ? err->code : MOE8_ERR_IO;
}

static void kick(http *h) {
    uint64_t one = 1;
    if (write(h->efd, &one, sizeof one) < 0) { /* a wake-up is pending anyway */
    }
}

void moe8_http_quiesce(srv *s) {
    http *h = s->http;
    const double t_end = moe8_time_s() + 2;
    if (!h || !h->started) return;
    h->quiesce = 1;
    kick(h);
    while (!__atomic_load_n(&h->quiesced, __ATOMIC_ACQUIRE) && moe8_time_s() < t_end) {
        struct timespec ts = {0, 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

void moe8_http_wait_idle(srv *s, double seconds) {
    http *h = s->http;
    const double t_end = moe8_time_s() + seconds;
    if (!h || !h->started) return;
    kick(h); /* the last jobs' news */
    while (moe8_time_s() < t_end && __atomic_load_n(&h->n_open, __ATOMIC_RELAXED) > 0) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

void moe8_http_stop(srv *s) {
    http *h = s->http;
    if (!h) return;
    h->stop = 1;
    if (h->started) pthread_join(h->thread, NULL);
    pthread_mutex_lock(&h->tlock);
    pthread_cond_broadcast(&h->tcond);
    pthread_mutex_unlock(&h->tlock);
    for (int i = 0; i < h->n_workers; i++) pthread_join(h->workers[i], NULL);
    /* what the workers left, then every connection */
    if (h->efd >= 0) on_kick(h);
    while (h->todo_head) {
        task *t = h->todo_head;
        h->todo_head = t->next;
        t->c->t = NULL;
        if (t->c->dead) moe8_http_conn_retire(h, t->c); /* closed while it waited: no task returns it now */
        moe8_buf_free(&t->body);
        free(t);
    }
    while (h->conns) moe8_http_conn_close(h, h->conns, h->conns->t_req > 0 ? "server stopped" : NULL);
    conn_reap(h);
    for (int i = 0; i < IP_BUCKETS; i++)
        while (h->ips[i]) {
            ipslot *p = h->ips[i];
            h->ips[i] = p->next;
            free(p);
        }
    if (h->lfd >= 0) close(h->lfd);
    if (h->ep >= 0) close(h->ep);
    if (h->efd >= 0) close(h->efd);
    if (h->spare_fd >= 0) close(h->spare_fd);
    free(h->flush);
    pthread_mutex_destroy(&h->tlock);
    pthread_cond_destroy(&h->tcond);
    s->http = NULL;
    free(h);
}

