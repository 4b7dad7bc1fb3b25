/*
 * http_impl.h — internal to the HTTP layer of moe8 serve: the connection,
 * task and server-state types, and the functions its three files share.
 *
 *   http.c        connections: the epoll loop, accept, per-connection state
 *                 and framing (heads, bodies), timeouts, limits, start/stop
 *   http_route.c  routing: a head decided (framing, auth, route, size, room)
 *                 against the endpoint table (endpoints.c), the body handed
 *                 to its row on this thread or a worker, the workers' answers
 *                 and jobs back
 *   http_out.c    output: the one response-head writer, whole answers and
 *                 errors, chunked and SSE bodies, the jobs' news pumped into
 *                 a connection, writing to the socket
 *
 * The HTTP layer knows no API: a route is a row of moe8_srv_endpoints, whose
 * functions parse bodies and write the answers.
 */
#ifndef MOE8_SERVER_HTTP_IMPL_H
#define MOE8_SERVER_HTTP_IMPL_H

#include <arpa/inet.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "server/http_parse.h"
#include "server/server.h"

#define N_WORKERS 2
#define PIPE_MAX (64u << 10)     /* pipelined bytes read ahead of the current request */
#define LINGER_S 2.0             /* reading (and dropping) a refused body before the close */
#define LINGER_QUIET_S 0.5       /* ... after a 503 or 408 of a limit: they come in floods */
#define LINGER_BYTES (1u << 20)
#define LOG_EVERY_S 10.0
#define IP_BUCKETS 4096

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
    const srv_endpoint *ep;     /* its row of the endpoint table (NULL: no such path) */
    int preflight;              /* a CORS preflight (OPTIONS with an Origin) */
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
    char rid[72];               /* the request's id: its x-request-id, or one made here */
    int32_t n_cached;           /* for the access log: prompt tokens from the prefix cache */
    double ttft_ms;             /* ... and the first token's time (-1: none) */
    double t_probe;             /* last probe of a half-closed client (0: none yet) */
} conn;

struct task {
    conn *c;
    char rid[72];               /* c's request id, for the worker's log lines */
    const srv_endpoint *ep;
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
    volatile int n_open;        /* the same, read by moe8_http_wait_idle */
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
    uint64_t rid_seed, rid_n;   /* request ids made here: a hash of both */
} http;

/* ---- http.c: connections ------------------------------------------------------------- */

/* A limit was hit (L_*): counted, logged at most every LOG_EVERY_S. */
void moe8_http_limit_hit(http *h, int k, const char *addr, double now);
/* c's unread input and body counted again in the server's buffered total. */
void moe8_http_recount(http *h, conn *c);
/* The epoll events c waits for, from its state. */
void moe8_http_set_events(http *h, conn *c);
/* Close now; `why` for the access log of a request in progress (NULL: none). */
void moe8_http_conn_close(http *h, conn *c, const char *why);
/* A closed connection nothing will use after this round: freed when it ends. */
void moe8_http_conn_retire(http *h, conn *c);
/* The current request is over: -1 closed, 0 wait (a lingering close), 1
 * parse what is buffered (moe8_http_advance). */
int moe8_http_request_done(http *h, conn *c);
/* Consume buffered bytes: heads and bodies, as far as the state allows. */
void moe8_http_advance(http *h, conn *c);
/* A job nobody else holds yet, with the choices it carries. */
void moe8_http_job_drop(job *j);
/* c is flushed at the end of this round (on_kick). */
void moe8_http_flush_add(http *h, conn *c);

/* ---- http_route.c: routing ----------------------------------------------------------------- */

/* The head p[0..n) is complete: framing, auth, route, size, room; then the
 * body (C_BODY) or the answer. */
void moe8_http_on_head(http *h, conn *c, const char *p, size_t n);
/* The body is complete: its row answers here (cheap ones) or on a worker. */
void moe8_http_dispatch(http *h, conn *c);
/* A worker thread (arg: the http). */
void *moe8_http_worker_main(void *arg);
/* The workers' finished tasks: answers written, jobs queued for the engine. */
void moe8_http_tasks_done(http *h);

/* ---- http_out.c: output ------------------------------------------------------------------- */

/* A whole answer into c->out. */
void moe8_http_respond(http *h, conn *c, int status, const char *type, const char *body, size_t n);
/* An error answer with OpenAI's error body. */
void moe8_http_respond_error(http *h, conn *c, int status, const char *type, const char *code,
                             const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* A connection past a limit (L_CONN, L_IP, L_BUFFERED): its 503 written at once, closed. */
void moe8_http_refuse_now(http *h, int fd, int kind);
/* Write what is pending; when an answer is done, go on. 0 ok, -1 closed. */
int moe8_http_flush(http *h, conn *c);
/* A half-closed client: still there? Bytes it will skip go into its output;
 * the caller flushes. */
void moe8_http_probe(http *h, conn *c, double now);
/* The jobs with news (moe8_http_notify's list) into their connections (under the lock). */
void moe8_http_jobs_news(http *h);

#endif
