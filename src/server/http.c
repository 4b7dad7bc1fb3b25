/*
 * http.c — the HTTP/1.1 server of moe8 serve: one thread runs an epoll loop
 * over every socket; a small pool of workers does the CPU work of requests
 * (JSON, chat templates, tokenizing); the engine thread writes each job's
 * output and tells this thread (http_notify) through an eventfd.
 *
 * A connection goes IDLE -> HEAD -> BODY -> WORK -> (answer written) ->
 * IDLE again for the next request, or CLOSE. Decided from the head alone,
 * before a byte of the body is read or buffered: the framing (http_parse.c;
 * an error is answered once and the connection closed), the API key (401),
 * the route (404, 405), the body's size (413 past --max-body) and room for
 * it under --max-buffered (503); only then is "100 Continue" sent to a
 * client that expects it. A refusal with a body pending closes the
 * connection after a short lingering read (so the client sees the answer).
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
 * comment line in a stream); a closed socket answers that with a reset, a
 * half-closed one reads on. Bytes a client pipelines behind a request are
 * read into the connection's buffer (up to 64 KiB), so they never hide a
 * close.
 *
 * Streams: the 200 and the SSE events go out once the engine has accepted
 * the job (a refusal before that keeps its status), chunked (HTTP/1.1) or
 * close-delimited (HTTP/1.0). Each request ends with one access-log line.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <omp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/core.h"
#include "server/http_parse.h"
#include "server/server.h"

#define N_WORKERS 2
#define PIPE_MAX (64u << 10)     /* pipelined bytes read ahead of the current request */
#define LINGER_S 2.0             /* reading (and dropping) a refused body before the close */
#define LINGER_QUIET_S 0.5       /* ... after a 503 or 408 of a limit: they come in floods */
#define LINGER_BYTES (1u << 20)
#define LOG_EVERY_S 10.0
#define IP_BUCKETS 4096

typedef enum {
    R_NONE, R_COMPLETIONS, R_CHAT, R_TOKENIZE, R_DETOKENIZE, R_MODELS, R_MODEL, R_HEALTH, R_METRICS,
    R_VERSION, R_PREFLIGHT
} route;
typedef enum { C_IDLE, C_HEAD, C_BODY, C_WORK, C_CLOSE } cstate;

/* Connections per client address. */
typedef struct ipslot {
    unsigned char addr[16];
    int n;
    struct ipslot *next;
} ipslot;

typedef struct task task;

typedef struct conn {
    int fd;
    struct conn *prev, *next;   /* every open connection */
    ipslot *ip;
    char addr[INET6_ADDRSTRLEN];
    cstate st;
    int served;                 /* requests answered on it */
    double t_phase;             /* start of the head (accept, or first byte), of the body,
                                 * of the idle wait, of the lingering close */
    double t_read, t_write;     /* last byte read; last write progress */
    moe8_buf in;                    /* read, not consumed */
    size_t in_off, scan, skip;  /* consumed; head scan position; empty lines skipped */
    size_t counted;             /* bytes of in + body counted in the server's buffered total */
    /* the request */
    http_head h;
    route r;
    char method[16], path[300];
    int keep_alive, minor;
    uint64_t body_len;          /* Content-Length */
    int chunked;
    http_chunked ck;
    moe8_buf body;
    double t_req;
    int status;
    const char *note;           /* for the access log */
    /* the answer */
    moe8_buf out;
    size_t out_off;
    int answered;               /* the whole answer is in out */
    int close_after;
    int rd_eof;
    size_t lingered;
    /* the job (completions, chat) */
    job *jobs[SRV_MAX_N];       /* its choices, the leader first */
    int n_jobs;
    int stream, hdr_sent;
    int32_t n_prompt, n_gen;
    task *t;                    /* a worker has its request */
    int dead;                   /* closed while a worker had it: freed when it comes back */
    unsigned ev;                /* epoll events registered */
    int in_ready;               /* on this round's flush list */
    int quiet;                  /* no access-log line: a limit's line counts it */
    char origin[256];           /* CORS: the Origin to allow in the answer ("" none) */
    double t_probe;             /* last probe of a half-closed client (0: none yet) */
} conn;

struct task {
    conn *c;
    route r;
    moe8_buf body;
    int status;                 /* 0: j made; else the answer's status */
    moe8_buf out;
    job *j;
    task *next;
};

typedef struct {
    uint64_t n;                 /* events since the last line */
    double t_line;              /* when the last line was written */
    char last[64];              /* the last event's address */
} limit_log;

enum { L_CONN, L_IP, L_BUFFERED, L_HEADER, L_BODY, L_WRITE, L_FD, L_N };

typedef struct {
    srv *s;
    int ep, lfd, efd, spare_fd;
    pthread_t thread, workers[N_WORKERS];
    int n_workers, started;
    volatile int stop, quiesce, quiesced;
    conn *conns;                /* every open connection */
    conn *closed;               /* closed this round, freed when it ends (conn_reap) */
    int n_conns;                /* open, the HTTP thread's count */
    volatile int n_open;        /* the same, read by http_wait_idle */
    size_t buffered;            /* bytes held for unfinished heads and bodies */
    int max_conns;
    ipslot *ips[IP_BUCKETS];
    limit_log lim[L_N];
    /* workers */
    pthread_mutex_t tlock;
    pthread_cond_t tcond;
    task *todo_head, *todo_tail, *done_head;
    conn **flush;               /* connections touched this round */
    int n_flush, cap_flush;
    char date[40];
    time_t date_t;
} http;

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

static void log_line(srv *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void log_line(srv *s, const char *fmt, ...) {
    char line[512];
    va_list ap;
    moe8_serve_line_fn f = s->p.on_log ? s->p.on_log : s->p.on_access;
    if (!f) return;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    f(s->p.user, line);
}

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
    log_line(h->s, "limit: %llu %s (%s%s)%s%s", (unsigned long long)l->n, LIMITS[k].what, LIMITS[k].flag,
             val, l->last[0] ? ", last from " : "", l->last);
    l->n = 0;
    l->t_line = now;
}

static void limit_hit(http *h, int k, const char *addr, double now) {
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

static void recount(http *h, conn *c) {
    count(h, c, (c->in.n - c->in_off) + (c->body.cap > c->body_len ? c->body.cap : (size_t)c->body_len));
}

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
    if (c->r == R_PREFLIGHT)
        moe8_buf_str(&c->out, "Access-Control-Allow-Methods: GET, POST, OPTIONS\r\n"
                          "Access-Control-Allow-Headers: Authorization, Content-Type, OpenAI-Organization, "
                          "OpenAI-Project, X-Stainless-Arch, X-Stainless-Lang, X-Stainless-OS, "
                          "X-Stainless-Package-Version, X-Stainless-Retry-Count, X-Stainless-Runtime, "
                          "X-Stainless-Runtime-Version, X-Stainless-Timeout\r\n"
                          "Access-Control-Max-Age: 600\r\n");
}

/* 1 if origin[0..n) is one of --allowed-origins (or it is "*"). */
static int origin_allowed(const srv *s, const char *o, size_t n) {
    const char *p = s->p.allowed_origins;
    while (p && *p) {
        const char *e = strchr(p, ',');
        size_t k = e ? (size_t)(e - p) : strlen(p);
        while (k && *p == ' ') p++, k--;
        while (k && p[k - 1] == ' ') k--;
        if ((k == 1 && *p == '*') || (k == n && !strncasecmp(p, o, n))) return 1;
        p = e ? e + 1 : NULL;
    }
    return 0;
}

/* A whole answer into c->out. */
static void respond(http *h, conn *c, int status, const char *type, const char *body, size_t n) {
    char head[512];
    int k;
    if (!c->keep_alive || c->rd_eof) c->close_after = 1;
    if (c->out_off == c->out.n) c->t_write = moe8_time_s(); /* the write timeout starts now */
    k = snprintf(head, sizeof head,
                 "HTTP/1.1 %d %s\r\nDate: %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s%s",
                 status, reason(status), http_date(h), type, n,
                 status == 401 ? "WWW-Authenticate: Bearer\r\n" : "",
                 c->close_after ? "Connection: close\r\n" : c->minor == 0 ? "Connection: keep-alive\r\n" : "");
    moe8_buf_add(&c->out, head, (size_t)k);
    cors_headers(h, c);
    k = snprintf(head, sizeof head, "\r\n");
    moe8_buf_add(&c->out, head, (size_t)k);
    moe8_buf_add(&c->out, body ? body : "", n);
    c->status = status;
    c->answered = 1;
    if (c->st != C_CLOSE) c->st = C_WORK; /* nothing more is parsed until it is written */
}

static void respond_error(http *h, conn *c, int status, const char *type, const char *code,
                          const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static void respond_error(http *h, conn *c, int status, const char *type, const char *code,
                          const char *fmt, ...) {
    char msg[600];
    moe8_buf b = {0};
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    oa_error(&b, type, NULL, code, "%s", msg);
    respond(h, c, status, "application/json", b.p, b.n);
    moe8_buf_free(&b);
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

static void set_events(http *h, conn *c) {
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
    if (!s->p.on_access || c->quiet) return;
    snprintf(line, sizeof line, "%s %s %d prompt_tokens=%d gen_tokens=%d ms=%.1f%s%s%s",
             c->method[0] ? c->method : "-", c->path[0] ? c->path : "-", c->status ? c->status : 499,
             c->n_prompt, c->n_gen, 1e3 * (moe8_time_s() - c->t_req), why ? " (" : "", why ? why : "",
             why ? ")" : "");
    s->p.on_access(s->p.user, line);
}

/* The connection lets go of its jobs (under the lock): cancelled unless done. */
static void job_detach(srv *s, conn *c) {
    if (!c->n_jobs) return;
    c->n_prompt = c->jobs[0]->n_prompt;
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
        if (--j->refs == 0) job_free(j);
        c->jobs[i] = NULL;
    }
    c->n_jobs = 0;
}

/* A job nobody else holds yet, with the choices it carries. */
static void job_drop(job *j) {
    if (!j) return;
    for (int i = 0; i < j->n_kids; i++) job_free(j->kids[i]);
    job_free(j);
}

static void conn_free(conn *c) {
    moe8_buf_free(&c->in);
    moe8_buf_free(&c->body);
    moe8_buf_free(&c->out);
    free(c);
}

static void conn_retire(http *h, conn *c);

/* Close now; `why` for the access log of a request in progress (NULL: none
 * to log). The memory lives until the round ends (conn_reap): an event later
 * in the same epoll batch may name the connection (the kick's flush closed
 * it; its hang-up comes next), and is skipped by its fd of -1. */
static void conn_close(http *h, conn *c, const char *why) {
    srv *s = h->s;
    if (c->fd < 0) return;
    if (c->t_req > 0 && why) access_line(h, c, why);
    if (c->n_jobs) {
        pthread_mutex_lock(&s->lock);
        job_detach(s, c);
        pthread_mutex_unlock(&s->lock);
    }
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
    else conn_retire(h, c);
}

/* A closed connection nothing will use after this round: freed when it ends. */
static void conn_retire(http *h, conn *c) {
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

/* Write what is pending. 0 ok (maybe more to write), -1 the connection was closed. */
static int conn_flush(http *h, conn *c);
/* A half-closed client: still there? Bytes it will skip go into its output
 * (see the top of the file); the caller flushes. */
static void probe(http *h, conn *c, double now);

/* The current request is over: log it, then the next one (or the close). */
static int request_done(http *h, conn *c) {
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
    c->n_prompt = c->n_gen = 0;
    c->note = NULL;
    c->status = 0;
    c->method[0] = c->path[0] = '\0';
    moe8_buf_free(&c->body);
    c->body_len = 0;
    recount(h, c);
    if (c->close_after) {
        if (c->rd_eof) {
            conn_close(h, c, NULL);
            return -1;
        }
        /* lingering close: our side is done; what the client still sends is dropped */
        shutdown(c->fd, SHUT_WR);
        c->st = C_CLOSE;
        c->t_phase = moe8_time_s();
        c->in.n = c->in_off = 0;
        recount(h, c);
        set_events(h, c);
        return 0;
    }
    c->st = C_IDLE;
    c->quiet = 0; /* (a closing one keeps it: its linger is short) */
    c->t_phase = moe8_time_s();
    return 1; /* the caller parses what is buffered */
}

/* ---- requests ------------------------------------------------------------------------- */

static route find_route(const char *path, size_t n, const char **want_method) {
    static const struct { const char *path, *method; route r; } table[] = {
        {"/v1/completions", "POST", R_COMPLETIONS}, {"/v1/chat/completions", "POST", R_CHAT},
        {"/tokenize", "POST", R_TOKENIZE},         {"/detokenize", "POST", R_DETOKENIZE},
        {"/v1/models", "GET", R_MODELS},           {"/health", "GET", R_HEALTH},
        {"/metrics", "GET", R_METRICS},            {"/version", "GET", R_VERSION},
    };
    for (size_t i = 0; i < sizeof table / sizeof *table; i++)
        if (strlen(table[i].path) == n && !memcmp(path, table[i].path, n)) {
            *want_method = table[i].method;
            return table[i].r;
        }
    if (n > 11 && !memcmp(path, "/v1/models/", 11)) { /* /v1/models/{id} */
        *want_method = "GET";
        return R_MODEL;
    }
    return R_NONE;
}

/* Open under --api-key, as in vLLM: probes and scrapers carry no key. */
static int open_route(route r) { return r == R_HEALTH || r == R_VERSION || r == R_METRICS || r == R_PREFLIGHT; }

static int authorized(const srv *s, const http_head *hd) {
    const char *v = hd->auth;
    size_t n = hd->auth_len, k;
    if (!s->p.api_key) return 1;
    if (!v || n < 7 || strncasecmp(v, "bearer", 6) || (v[6] != ' ' && v[6] != '\t')) return 0;
    v += 6, n -= 6;
    while (n && (*v == ' ' || *v == '\t')) v++, n--;
    k = strlen(s->p.api_key);
    if (n != k) return 0;
    {
        unsigned char d = 0; /* constant time in the key's length */
        for (size_t i = 0; i < k; i++) d |= (unsigned char)(v[i] ^ s->p.api_key[i]);
        return d == 0;
    }
}

static void task_queue(http *h, task *t) {
    pthread_mutex_lock(&h->tlock);
    t->next = NULL;
    if (h->todo_tail) h->todo_tail->next = t;
    else h->todo_head = t;
    h->todo_tail = t;
    pthread_cond_signal(&h->tcond);
    pthread_mutex_unlock(&h->tlock);
}

/* The body is complete: answer here (cheap ones) or hand it to a worker. */
static void dispatch(http *h, conn *c) {
    srv *s = h->s;
    moe8_buf out = {0};
    c->st = C_WORK;
    switch (c->r) {
    case R_MODELS:
        oa_models(s, &out);
        respond(h, c, 200, "application/json", out.p, out.n);
        break;
    case R_HEALTH:
        respond(h, c, 200, "application/json", "{\"status\":\"ok\"}", 15);
        break;
    case R_VERSION: {
        char v[96];
        const int k = snprintf(v, sizeof v, "{\"version\":\"%s\"}", moe8_version());
        respond(h, c, 200, "application/json", v, (size_t)k);
        break;
    }
    case R_MODEL: {
        const char *id = c->path + 11;
        const size_t n = strlen(id);
        if (n == strlen(s->model_name) && !memcmp(id, s->model_name, n)) {
            oa_model(s, &out);
            respond(h, c, 200, "application/json", out.p, out.n);
        } else {
            respond_error(h, c, 404, "invalid_request_error", "model_not_found",
                          "the model '%.*s' does not exist; this server serves '%s'",
                          (int)(n < 200 ? n : 200), id, s->model_name);
        }
        break;
    }
    case R_METRICS:
        pthread_mutex_lock(&s->lock);
        metrics_render(&s->m, s->model_name, &out);
        pthread_mutex_unlock(&s->lock);
        respond(h, c, 200, "text/plain; version=0.0.4; charset=utf-8", out.p ? out.p : "", out.n);
        break;
    default: {
        task *t = calloc(1, sizeof *t);
        if (!t) {
            respond_error(h, c, 500, "server_error", NULL, "out of memory");
            break;
        }
        t->c = c;
        t->r = c->r;
        t->body = c->body; /* the task owns the body; it stays counted until it comes back */
        memset(&c->body, 0, sizeof c->body);
        c->t = t;
        task_queue(h, t);
    }
    }
    moe8_buf_free(&out);
}

/* The head is complete: framing, auth, route, size, room; then the body. */
static void on_head(http *h, conn *c, const char *p, size_t n) {
    srv *s = h->s;
    const char *why = NULL, *want = NULL;
    int rc = http_head_parse(p, n, &c->h, &why);
    c->t_req = moe8_time_s();
    c->keep_alive = 0; /* until the head is known good */
    if (rc) {
        c->close_after = 1;
        respond_error(h, c, rc, "invalid_request_error", "bad_request", "%s", why);
        return;
    }
    c->minor = c->h.minor;
    c->keep_alive = c->h.keep_alive;
    snprintf(c->method, sizeof c->method, "%.*s", (int)(c->h.method_len < 15 ? c->h.method_len : 15),
             c->h.method);
    if (c->h.path_len < sizeof c->path) snprintf(c->path, sizeof c->path, "%.*s", (int)c->h.path_len, c->h.path);
    else snprintf(c->path, sizeof c->path, "%.*s...", (int)sizeof c->path - 4, c->h.path);
    c->chunked = c->h.chunked;
    c->body_len = c->h.content_length > 0 ? (uint64_t)c->h.content_length : 0;
    memset(&c->ck, 0, sizeof c->ck);
    c->r = find_route(c->h.path, c->h.path_len, &want);
    c->origin[0] = '\0';
    if (c->h.origin && s->p.allowed_origins && c->h.origin_len < sizeof c->origin &&
        origin_allowed(s, c->h.origin, c->h.origin_len))
        snprintf(c->origin, sizeof c->origin, "%.*s", (int)c->h.origin_len, c->h.origin);
    if (!strcmp(c->method, "OPTIONS") && s->p.allowed_origins && c->h.origin) { /* a CORS preflight */
        c->r = R_PREFLIGHT;
        if (c->chunked || c->body_len) c->close_after = 1;
        if (!c->origin[0])
            respond_error(h, c, 403, "invalid_request_error", "origin_not_allowed",
                          "the origin is not in --allowed-origins");
        else respond(h, c, 204, "text/plain", "", 0);
        return;
    }
    if (!open_route(c->r) && !authorized(s, &c->h)) {
        if (c->chunked || c->body_len) c->close_after = 1;
        respond_error(h, c, 401, "invalid_request_error", "invalid_api_key",
                      "missing or wrong API key: send 'Authorization: Bearer <key>'");
        return;
    }
    if (c->r == R_NONE || strcmp(c->method, want)) {
        if (c->chunked || c->body_len) c->close_after = 1;
        if (c->r == R_NONE)
            respond_error(h, c, 404, "invalid_request_error", "not_found", "no such endpoint: %s %s",
                          c->method, c->path);
        else
            respond_error(h, c, 405, "invalid_request_error", "method_not_allowed", "%s takes %s, not %s",
                          c->path, want, c->method);
        return;
    }
    if (c->body_len > s->p.max_body) {
        c->close_after = 1;
        respond_error(h, c, 413, "invalid_request_error", "body_too_large",
                      "the request body (%llu bytes) is larger than %llu bytes (--max-body)",
                      (unsigned long long)c->body_len, (unsigned long long)s->p.max_body);
        return;
    }
    /* the room the body needs beside everyone else's bytes (what of it came
     * with the head is this connection's unread input, counted already) */
    if (h->buffered - c->counted + (c->body_len > c->in.n - c->in_off ? c->body_len : c->in.n - c->in_off) >
        s->p.max_buffered) {
        c->close_after = 1;
        limit_hit(h, L_BUFFERED, c->addr, c->t_req);
        respond_error(h, c, 503, "server_error", "overloaded",
                      "the server is holding too many request bodies (--max-buffered); try again later");
        return;
    }
    if (c->chunked || c->body_len) {
        if (moe8_buf_reserve(&c->body, c->chunked ? 4096 : (size_t)c->body_len)) {
            c->close_after = 1;
            respond_error(h, c, 500, "server_error", NULL, "out of memory");
            return;
        }
        c->st = C_BODY;
        c->t_phase = c->t_req;
        recount(h, c);
        if (c->h.expect_continue && c->minor == 1 && c->in.n == c->in_off)
            moe8_buf_str(&c->out, "HTTP/1.1 100 Continue\r\n\r\n");
        return;
    }
    dispatch(h, c);
}

/* Consume buffered bytes: heads and bodies, as far as the state allows. */
static void advance(http *h, conn *c) {
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
            len = http_head_scan(p, n, &c->scan, &c->skip, &why);
            if (len == 0) break;
            if (len < 0) {
                c->t_req = moe8_time_s();
                c->close_after = 1;
                c->keep_alive = 0;
                respond_error(h, c, (int)-len, "invalid_request_error", "bad_request", "%s", why);
                c->in_off = c->in.n;
                break;
            }
            c->in_off += c->skip + (size_t)len;
            on_head(h, c, p + c->skip, (size_t)len);
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
                    respond_error(h, c, 500, "server_error", NULL, "out of memory");
                    break;
                }
                if (h->buffered + n > h->s->p.max_buffered) {
                    c->close_after = 1;
                    limit_hit(h, L_BUFFERED, c->addr, moe8_time_s());
                    respond_error(h, c, 503, "server_error", "overloaded", "the server is holding too "
                                  "many request bodies (--max-buffered); try again later");
                    c->in_off = c->in.n;
                    break;
                }
                used = http_chunked_feed(&c->ck, p, n, c->body.p, c->body.cap - 1, &c->body.n,
                                         h->s->p.max_body, &done, &why);
                if (used < 0) {
                    c->close_after = 1;
                    if (used == -413)
                        respond_error(h, c, 413, "invalid_request_error", "body_too_large",
                                      "the request body is larger than %llu bytes (--max-body)",
                                      (unsigned long long)h->s->p.max_body);
                    else respond_error(h, c, 400, "invalid_request_error", "bad_request", "%s", why);
                    c->in_off = c->in.n;
                    break;
                }
                c->body.p[c->body.n] = '\0';
                c->in_off += (size_t)used;
                recount(h, c);
                if (!done) continue;
            } else {
                take = n < c->body_len - c->body.n ? n : (size_t)(c->body_len - c->body.n);
                memcpy(c->body.p + c->body.n, p, take);
                c->body.n += take;
                c->body.p[c->body.n] = '\0';
                c->in_off += take;
                if (c->body.n < c->body_len) continue;
            }
            dispatch(h, c);
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
    recount(h, c);
}

/* Push and pull: write what is pending; when an answer is done, go on. */
static int conn_flush(http *h, conn *c) {
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
                set_events(h, c);
                return 0;
            }
            conn_close(h, c, "client gone");
            return -1;
        }
        c->out.n = c->out_off = 0;
        if (c->out.cap > 65536) moe8_buf_free(&c->out);
        if (c->st == C_CLOSE || !c->answered) break;
        {
            int rc = request_done(h, c);
            if (rc < 0) return -1;
            if (rc == 0) break;
        }
        advance(h, c);
        if (c->out.n == 0) break;
    }
    if (c->st == C_IDLE && c->rd_eof && c->in.n == c->in_off) {
        conn_close(h, c, NULL);
        return -1;
    }
    set_events(h, c);
    return 0;
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
                    conn_close(h, c, NULL);
                    return;
                }
                continue;
            }
            if (moe8_buf_add(&c->in, buf, (size_t)k)) {
                conn_close(h, c, "out of memory");
                return;
            }
            recount(h, c);
            advance(h, c);
            if (c->fd < 0) return;
            if (c->answered && c->close_after) break;
            continue;
        }
        if (k == 0) {
            c->rd_eof = 1;
            if (c->st == C_CLOSE) {
                conn_close(h, c, NULL);
                return;
            }
            if (c->st == C_HEAD || c->st == C_BODY) { /* a request that can never complete */
                conn_close(h, c, c->st == C_BODY ? "client closed during the body" : NULL);
                return;
            }
            if (c->st == C_IDLE && c->in.n == c->in_off && c->out_off == c->out.n) {
                conn_close(h, c, NULL);
                return;
            }
            if (c->st == C_WORK && c->n_jobs && !c->answered) probe(h, c, moe8_time_s()); /* or a close? */
            break; /* a half-close: the answer is still written */
        }
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        conn_close(h, c, "client gone");
        return;
    }
    if (conn_flush(h, c) < 0) return;
}

/* A connection past a limit: its 503 written at once and closed, holding
 * nothing (what it sent is read first, so the close is no reset that could
 * eat the answer). No access-log line: the limit's line counts it. */
static void refuse_now(http *h, int fd, int kind, const char *addr) {
    char head[256], drop[4096];
    moe8_buf b = {0};
    int k, budget = 16;
    oa_error(&b, "server_error", NULL, "overloaded", "%s",
             kind == L_CONN ? "the server has too many connections (--max-connections); try again later"
             : kind == L_IP ? "too many connections from this address (--max-connections-per-ip); try again later"
                            : "the server is holding too many request bodies (--max-buffered); try again later");
    (void)addr;
    k = snprintf(head, sizeof head, "HTTP/1.1 503 Service Unavailable\r\nDate: %s\r\nContent-Type: "
                 "application/json\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n", http_date(h), b.n);
    while (budget-- > 0 && recv(fd, drop, sizeof drop, MSG_DONTWAIT) > 0) {
    }
    if (send(fd, head, (size_t)k, MSG_NOSIGNAL | MSG_DONTWAIT) == k) send(fd, b.p, b.n, MSG_NOSIGNAL | MSG_DONTWAIT);
    shutdown(fd, SHUT_WR);
    budget = 16;
    while (budget-- > 0 && recv(fd, drop, sizeof drop, MSG_DONTWAIT) > 0) {
    }
    close(fd);
    moe8_buf_free(&b);
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
                limit_hit(h, L_FD, NULL, now);
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
            limit_hit(h, refuse, addr, now);
            refuse_now(h, fd, refuse, addr);
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
        if (epoll_ctl(h->ep, EPOLL_CTL_ADD, fd, &e)) conn_close(h, c, NULL);
    }
}

/* ---- the job's output (engine -> connection) ------------------------------------------ */

void http_notify(srv *s, job *j) {
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

static void flush_add(http *h, conn *c) {
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
    char head[300];
    if (c->minor == 0) c->close_after = 1;
    if (c->out_off == c->out.n) c->t_write = moe8_time_s();
    snprintf(head, sizeof head, "HTTP/1.1 200 OK\r\nDate: %s\r\nContent-Type: %s\r\n%s%s",
             http_date(h), type, c->stream ? "Cache-Control: no-cache\r\n" : "",
             c->minor == 0 ? "Connection: close\r\n" : "Transfer-Encoding: chunked\r\n");
    moe8_buf_str(&c->out, head);
    cors_headers(h, c);
    moe8_buf_str(&c->out, "\r\n");
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
            if (!c->hdr_sent) respond(h, c, status, "application/json", bad->out.p, bad->out.n);
            else {
                if (c->stream) chunk(c, "data: ", 6);
                chunk(c, bad->out.p, bad->out.n);
                if (c->stream) chunk(c, "\n\ndata: [DONE]\n\n", 16);
                body_end(c);
            }
            return;
        }
        oa_response(s, c->jobs, c->n_jobs, &b);
        if (!c->hdr_sent) respond(h, c, 200, "application/json", b.p, b.n);
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
        oa_stream_tail(s, c->jobs, c->n_jobs, &b);
        chunk(c, b.p, b.n);
        moe8_buf_free(&b);
        body_end(c);
    }
}

static void probe(http *h, conn *c, double now) {
    c->t_probe = now;
    if (c->out_off < c->out.n) return; /* a write is under way: it will tell */
    if (!c->hdr_sent) send_head(h, c, c->stream ? "text/event-stream" : "application/json");
    if (c->stream) chunk(c, ": ping\n\n", 8);
    else chunk(c, " ", 1);
}

/* Jobs with news (the engine), tasks done (the workers). */
static void on_kick(http *h) {
    srv *s = h->s;
    uint64_t v;
    job *list;
    task *done;
    if (read(h->efd, &v, sizeof v) < 0) { /* nothing pending */
    }
    pthread_mutex_lock(&s->lock);
    list = s->ready_head;
    s->ready_head = NULL;
    while (list) {
        job *j = list;
        list = j->ready_next;
        j->notified = 0;
        if (j->conn) {
            conn *c = j->conn;
            pump(h, c);
            flush_add(h, c);
        }
        if (--j->refs == 0) job_free(j);
    }
    pthread_mutex_unlock(&s->lock);
    pthread_mutex_lock(&h->tlock);
    done = h->done_head;
    h->done_head = NULL;
    pthread_mutex_unlock(&h->tlock);
    while (done) {
        task *t = done;
        conn *c = t->c;
        done = t->next;
        c->t = NULL;
        if (c->dead) {
            job_drop(t->j);
            conn_retire(h, c);
            c = NULL;
        } else if (t->status) {
            respond(h, c, t->status, "application/json", t->out.p, t->out.n);
            flush_add(h, c);
        } else if (t->j) {
            job *j = t->j;
            int rc = 0;
            c->stream = j->stream;
            pthread_mutex_lock(&s->lock);
            if (s->stopping) rc = 1;
            else if (s->n_submitted + s->sched_waiting >= s->p.max_queue) rc = 2;
            else {
                /* the connection holds every choice; the engine the leader, and
                 * through it the others until they enter the scheduler */
                c->n_jobs = 0;
                c->jobs[c->n_jobs++] = j;
                for (int i = 0; i < j->n_kids; i++) c->jobs[c->n_jobs++] = j->kids[i];
                for (int i = 0; i < c->n_jobs; i++) {
                    job *k = c->jobs[i];
                    k->conn = c;
                    k->refs = 2;
                    k->queued = 1;
                    k->t_arrive = moe8_time_s();
                    oa_on_start(s, k);
                }
                if (s->submit_tail) s->submit_tail->next = j;
                else s->submit_head = j;
                s->submit_tail = j;
                s->n_submitted++;
                c->n_prompt = j->n_prompt;
                pthread_cond_signal(&s->wake);
            }
            pthread_mutex_unlock(&s->lock);
            if (rc) {
                job_drop(j);
                respond_error(h, c, 503, "server_error", rc == 1 ? "shutting_down" : "overloaded", "%s",
                              rc == 1 ? "the server is shutting down"
                                      : "too many requests are waiting (--max-queue); try again later");
                flush_add(h, c);
            }
        }
        if (c) recount(h, c);
        moe8_buf_free(&t->body);
        moe8_buf_free(&t->out);
        free(t);
    }
    for (int i = 0; i < h->n_flush; i++) {
        conn *c = h->flush[i];
        c->in_ready = 0;
        if (c->fd >= 0 && !c->dead) conn_flush(h, c);
    }
    h->n_flush = 0;
    if (h->quiesce && !h->quiesced) {
        epoll_ctl(h->ep, EPOLL_CTL_DEL, h->lfd, NULL);
        close(h->lfd);
        h->lfd = -1;
        __atomic_store_n(&h->quiesced, 1, __ATOMIC_RELEASE);
    }
}

/* ---- workers ------------------------------------------------------------------------------ */

static void *worker_main(void *arg) {
    http *h = arg;
    srv *s = h->s;
    /* below the engine and the HTTP thread: a big tokenize never slows a decode step */
    setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10);
    omp_set_num_threads(1); /* a grammar's precomputation: this thread only, beside the engine's team */
    for (;;) {
        task *t;
        uint64_t one = 1;
        pthread_mutex_lock(&h->tlock);
        while (!h->todo_head && !h->stop) pthread_cond_wait(&h->tcond, &h->tlock);
        if (!h->todo_head) {
            pthread_mutex_unlock(&h->tlock);
            return NULL;
        }
        t = h->todo_head;
        h->todo_head = t->next;
        if (!h->todo_head) h->todo_tail = NULL;
        pthread_mutex_unlock(&h->tlock);
        switch (t->r) {
        case R_COMPLETIONS:
        case R_CHAT:
            t->status = oa_parse_completion(s, t->body.p ? t->body.p : "", t->body.n,
                                            t->r == R_CHAT ? JOB_CHAT : JOB_COMPLETION, &t->j, &t->out);
            break;
        case R_TOKENIZE:
            t->status = oa_tokenize(s, t->body.p ? t->body.p : "", t->body.n, &t->out);
            if (!t->status) t->status = 200;
            break;
        default:
            t->status = oa_detokenize(s, t->body.p ? t->body.p : "", t->body.n, &t->out);
            if (!t->status) t->status = 200;
            break;
        }
        pthread_mutex_lock(&h->tlock);
        t->next = h->done_head;
        h->done_head = t;
        pthread_mutex_unlock(&h->tlock);
        if (write(h->efd, &one, sizeof one) < 0) { /* a wake-up is pending anyway */
        }
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
                limit_hit(h, L_HEADER, c->addr, now);
                conn_close(h, c, NULL);
            } else if (c->served && now - c->t_phase > s->p.timeout_s) {
                conn_close(h, c, NULL);
            }
            break;
        case C_HEAD:
            if (now - c->t_phase > s->p.header_timeout_s) {
                limit_hit(h, L_HEADER, c->addr, now);
                c->t_req = now;
                c->close_after = 1;
                c->keep_alive = 0;
                respond_error(h, c, 408, "invalid_request_error", "timeout",
                              "the request head did not arrive within %g s (--header-timeout)",
                              s->p.header_timeout_s);
                c->quiet = 1;
                c->in.n = c->in_off = 0;
                c->st = C_WORK;
                conn_flush(h, c);
            }
            break;
        case C_BODY: {
            const double t = now - c->t_phase - s->p.header_timeout_s;
            const int slow = t > 0 && (double)c->body.n < t * s->p.body_min_rate;
            if (slow || now - c->t_read > s->p.timeout_s) {
                limit_hit(h, L_BODY, c->addr, now);
                c->close_after = 1;
                c->keep_alive = 0;
                respond_error(h, c, 408, "invalid_request_error", "timeout",
                              slow ? "the request body arrives slower than %g bytes/s (--body-min-rate)"
                                   : "the request body stalled for %g s (--timeout)",
                              slow ? s->p.body_min_rate : s->p.timeout_s);
                c->quiet = 1;
                c->st = C_WORK;
                moe8_buf_free(&c->body);
                c->in.n = c->in_off = 0;
                recount(h, c);
                conn_flush(h, c);
            }
            break;
        }
        case C_WORK:
            if (c->out_off < c->out.n && now - c->t_write > s->p.timeout_s) {
                limit_hit(h, L_WRITE, c->addr, now);
                conn_close(h, c, "client stopped reading");
            } else if (c->rd_eof && c->n_jobs && !c->answered && (!c->t_probe || now - c->t_probe >= 1.0)) {
                probe(h, c, now);
                conn_flush(h, c);
            }
            break;
        case C_CLOSE:
            if (now - c->t_phase > (c->quiet ? LINGER_QUIET_S : LINGER_S) ||
                (c->out_off < c->out.n && now - c->t_write > s->p.timeout_s))
                conn_close(h, c, NULL);
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
                    if (c->st == C_CLOSE) conn_close(h, c, NULL);
                    else conn_close(h, c, "client gone");
                    continue;
                }
                if (ev[i].events & EPOLLIN) conn_read(h, c);
                else if (ev[i].events & EPOLLOUT) conn_flush(h, c);
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

moe8_status http_start(srv *s, moe8_error *err) {
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
            log_line(s, "note: --max-connections %d lowered to %d by the open-file limit (ulimit -n %llu)",
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
        if (pthread_create(&h->workers[h->n_workers], NULL, worker_main, h)) break;
    if (h->n_workers == 0 || pthread_create(&h->thread, NULL, http_main, h)) {
        moe8_fail(err, MOE8_ERR_IO, -1, "serve: cannot start the HTTP threads");
        goto fail;
    }
    h->started = 1;
    return MOE8_OK;
fail:
    http_stop(s);
    return err ? err->code : MOE8_ERR_IO;
}

static void kick(http *h) {
    uint64_t one = 1;
    if (write(h->efd, &one, sizeof one) < 0) { /* a wake-up is pending anyway */
    }
}

void http_quiesce(srv *s) {
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

void http_wait_idle(srv *s, double seconds) {
    http *h = s->http;
    const double t_end = moe8_time_s() + seconds;
    if (!h || !h->started) return;
    kick(h); /* the last jobs' news */
    while (moe8_time_s() < t_end && __atomic_load_n(&h->n_open, __ATOMIC_RELAXED) > 0) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

void http_stop(srv *s) {
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
        if (t->c->dead) conn_retire(h, t->c); /* closed while it waited: no task returns it now */
        moe8_buf_free(&t->body);
        free(t);
    }
    while (h->conns) conn_close(h, h->conns, h->conns->t_req > 0 ? "server stopped" : NULL);
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
