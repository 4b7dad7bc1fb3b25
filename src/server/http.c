/*
 * http.c — the HTTP side of moe8 serve, on libmicrohttpd: one internal
 * epoll thread serves every connection; a connection that waits for its
 * request's output is suspended (it holds no thread, only memory), and the
 * engine resumes it when there is output.
 *
 * A request: the body is gathered (413 past SRV_MAX_BODY), the API key
 * checked (401; not for /health), the path and method routed (404, 405),
 * then:
 *   - completions / chat: openai.c makes a job (400 with OpenAI's error body
 *     when the request is bad), 503 when --max-queue jobs already wait or
 *     the server stops; the job goes to the engine's queue. A stream gets a
 *     200 text/event-stream response at once whose reader hands out the
 *     job's SSE bytes, suspending the connection while there are none; any
 *     other request is suspended until the job is done, then answered whole.
 *   - /tokenize, /detokenize, /v1/models, /health, /metrics: answered here.
 * A client that disconnects: MHD reports the request terminated (the job is
 * cancelled); while a connection is suspended MHD does not look at it, so
 * the engine also peeks at the sockets of waiting jobs (http_peer_gone).
 * Each request ends with one access-log line (method, path, status, tokens,
 * ms) through the caller's on_access.
 */
#include <errno.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "core/core.h"
#include "server/server.h"

typedef enum { R_NONE, R_COMPLETIONS, R_CHAT, R_TOKENIZE, R_DETOKENIZE, R_MODELS, R_HEALTH, R_METRICS } route;

/* Per connection-request state (MHD's con_cls). */
typedef struct {
    srv *s;
    route r;
    char method[16], path[96];
    sbuf body;
    int too_large;
    int status;                 /* answered with this (access log) */
    job *j;
    double t0;
} req;

/* ---- answers ------------------------------------------------------------------- */

static enum MHD_Result answer(req *q, struct MHD_Connection *c, int status, const char *type,
                              const char *body, size_t n) {
    struct MHD_Response *r = MHD_create_response_from_buffer(n, (void *)body, MHD_RESPMEM_MUST_COPY);
    enum MHD_Result rc;
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", type);
    if (status == 401) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    rc = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    q->status = status;
    return rc;
}

static enum MHD_Result answer_json(req *q, struct MHD_Connection *c, int status, const sbuf *b) {
    return answer(q, c, status, "application/json", b->p ? b->p : "{}", b->p ? b->n : 2);
}

static enum MHD_Result answer_error(req *q, struct MHD_Connection *c, int status, const char *type,
                                    const char *param, const char *code, const char *msg) {
    sbuf b = {0};
    enum MHD_Result rc;
    oa_error(&b, type, param, code, "%s", msg);
    rc = answer_json(q, c, status, &b);
    sbuf_free(&b);
    return rc;
}

/* ---- routing --------------------------------------------------------------------- */

static route find_route(const char *path, const char **want_method) {
    static const struct { const char *path, *method; route r; } table[] = {
        {"/v1/completions", "POST", R_COMPLETIONS}, {"/v1/chat/completions", "POST", R_CHAT},
        {"/tokenize", "POST", R_TOKENIZE},         {"/detokenize", "POST", R_DETOKENIZE},
        {"/v1/models", "GET", R_MODELS},           {"/health", "GET", R_HEALTH},
        {"/metrics", "GET", R_METRICS},
    };
    for (size_t i = 0; i < sizeof table / sizeof *table; i++)
        if (!strcmp(path, table[i].path)) {
            *want_method = table[i].method;
            return table[i].r;
        }
    return R_NONE;
}

static int authorized(const srv *s, struct MHD_Connection *c) {
    const char *h;
    size_t n;
    if (!s->p.api_key || !s->p.api_key[0]) return 1;
    h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncmp(h, "Bearer ", 7)) return 0;
    h += 7;
    n = strlen(s->p.api_key);
    if (strlen(h) != n) return 0;
    {
        unsigned char d = 0; /* constant time in the key's length */
        for (size_t i = 0; i < n; i++) d |= (unsigned char)(h[i] ^ s->p.api_key[i]);
        return d == 0;
    }
}

/* ---- jobs: streaming reader -------------------------------------------------------- */

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    req *q = cls;
    job *j = q->j;
    srv *s = q->s;
    ssize_t n = 0;
    (void)pos;
    pthread_mutex_lock(&s->lock);
    if (j->sent < j->out.n) {
        size_t k = j->out.n - j->sent < max ? j->out.n - j->sent : max;
        memcpy(buf, j->out.p + j->sent, k);
        j->sent += k;
        if (j->sent == j->out.n) j->sent = j->out.n = 0; /* sent: the buffer starts over */
        n = (ssize_t)k;
    } else if (j->done) {
        n = MHD_CONTENT_READER_END_OF_STREAM;
    } else if (j->cancel) {
        n = MHD_CONTENT_READER_END_WITH_ERROR;
    } else {
        j->suspended = 1;
        MHD_suspend_connection((struct MHD_Connection *)j->conn);
    }
    pthread_mutex_unlock(&s->lock);
    return n;
}

/* Queue the job for the engine (under the lock); 503 when the queue is full. */
static int submit(srv *s, job *j, struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (s->stopping) return 1;
    if (s->n_submitted + s->sched_waiting >= s->p.max_queue) return 2;
    j->conn = c;
    j->conn_fd = ci ? ci->connect_fd : -1;
    j->refs = 2;
    j->queued = 1;
    j->t_arrive = moe8_now_s();
    oa_on_start(s, j);
    if (s->submit_tail) s->submit_tail->next = j;
    else s->submit_head = j;
    s->submit_tail = j;
    s->n_submitted++;
    pthread_cond_signal(&s->wake);
    return 0;
}

static enum MHD_Result start_job(req *q, struct MHD_Connection *c) {
    srv *s = q->s;
    sbuf err = {0};
    job *j = NULL;
    int rc = oa_parse_completion(s, q->body.p ? q->body.p : "", q->body.n,
                                 q->r == R_CHAT ? JOB_CHAT : JOB_COMPLETION, &j, &err);
    enum MHD_Result mr;
    if (rc) {
        mr = answer_json(q, c, rc, &err);
        sbuf_free(&err);
        return mr;
    }
    pthread_mutex_lock(&s->lock);
    rc = submit(s, j, c);
    if (rc) {
        pthread_mutex_unlock(&s->lock);
        job_free(j);
        return answer_error(q, c, 503, "server_error", NULL, rc == 1 ? "shutting_down" : "overloaded",
                            rc == 1 ? "the server is shutting down"
                                    : "too many requests are waiting (--max-queue); try again later");
    }
    q->j = j;
    if (j->stream) {
        struct MHD_Response *r;
        pthread_mutex_unlock(&s->lock);
        r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 8 * 1024, stream_reader, q, NULL);
        if (!r) return MHD_NO;
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        mr = MHD_queue_response(c, 200, r);
        MHD_destroy_response(r);
        q->status = 200;
        return mr;
    }
    j->suspended = 1;
    MHD_suspend_connection(c);
    pthread_mutex_unlock(&s->lock);
    return MHD_YES;
}

/* A suspended non-stream request is resumed: its answer, or close. */
static enum MHD_Result finish_job(req *q, struct MHD_Connection *c) {
    srv *s = q->s;
    job *j = q->j;
    enum MHD_Result mr;
    pthread_mutex_lock(&s->lock);
    if (!j->done) {
        if (j->cancel) {
            pthread_mutex_unlock(&s->lock);
            return MHD_NO;
        }
        j->suspended = 1; /* woken early: wait on */
        MHD_suspend_connection(c);
        pthread_mutex_unlock(&s->lock);
        return MHD_YES;
    }
    pthread_mutex_unlock(&s->lock);
    mr = answer_json(q, c, j->status ? j->status : 500, &j->out);
    return mr;
}

/* ---- the access handler ------------------------------------------------------------- */

static enum MHD_Result handle(req *q, struct MHD_Connection *c) {
    srv *s = q->s;
    const char *want = NULL;
    sbuf out = {0};
    enum MHD_Result mr;
    int rc;
    char msg[256];
    q->r = find_route(q->path, &want);
    if (q->r != R_HEALTH && !authorized(s, c))
        return answer_error(q, c, 401, "invalid_request_error", NULL, "invalid_api_key",
                            "missing or wrong API key: send 'Authorization: Bearer <key>'");
    if (q->r == R_NONE) {
        snprintf(msg, sizeof msg, "no such endpoint: %s %s", q->method, q->path);
        return answer_error(q, c, 404, "invalid_request_error", NULL, "not_found", msg);
    }
    if (strcmp(q->method, want)) {
        snprintf(msg, sizeof msg, "%s takes %s, not %s", q->path, want, q->method);
        return answer_error(q, c, 405, "invalid_request_error", NULL, "method_not_allowed", msg);
    }
    if (q->too_large) {
        snprintf(msg, sizeof msg, "the request body is larger than %u bytes", SRV_MAX_BODY);
        return answer_error(q, c, 413, "invalid_request_error", NULL, "body_too_large", msg);
    }
    switch (q->r) {
    case R_COMPLETIONS:
    case R_CHAT: return start_job(q, c);
    case R_TOKENIZE:
    case R_DETOKENIZE:
        rc = q->r == R_TOKENIZE ? oa_tokenize(s, q->body.p ? q->body.p : "", q->body.n, &out)
                                : oa_detokenize(s, q->body.p ? q->body.p : "", q->body.n, &out);
        mr = answer_json(q, c, rc ? rc : 200, &out);
        break;
    case R_MODELS:
        oa_models(s, &out);
        mr = answer_json(q, c, 200, &out);
        break;
    case R_HEALTH:
        mr = answer(q, c, 200, "application/json", "{\"status\":\"ok\"}", 15);
        break;
    default: /* R_METRICS */
        pthread_mutex_lock(&s->lock);
        metrics_render(&s->m, s->model_name, &out);
        pthread_mutex_unlock(&s->lock);
        mr = answer(q, c, 200, "text/plain; version=0.0.4; charset=utf-8", out.p ? out.p : "",
                    out.n);
        break;
    }
    sbuf_free(&out);
    return mr;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *data,
                                  size_t *data_size, void **con_cls) {
    srv *s = cls;
    req *q = *con_cls;
    (void)version;
    if (!q) {
        if (!(q = calloc(1, sizeof *q))) return MHD_NO;
        q->s = s;
        q->t0 = moe8_now_s();
        snprintf(q->method, sizeof q->method, "%s", method);
        snprintf(q->path, sizeof q->path, "%s", url);
        *con_cls = q;
        return MHD_YES;
    }
    if (*data_size) {
        if (moe8_now_s() - q->t0 > s->p.timeout_s) return MHD_NO; /* a body slower than the timeout */
        if (q->body.n + *data_size > SRV_MAX_BODY) q->too_large = 1;
        else if (sbuf_add(&q->body, data, *data_size)) return MHD_NO;
        *data_size = 0;
        return MHD_YES;
    }
    if (q->j) return finish_job(q, c);
    return handle(q, c);
}

/* The request is over (answered, failed, timed out or the client left). */
static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode why) {
    srv *s = cls;
    req *q = *con_cls;
    int32_t n_prompt = 0, n_gen = 0;
    (void)c;
    if (!q) return;
    if (q->j) {
        job *j = q->j;
        pthread_mutex_lock(&s->lock);
        if (!j->done) {
            j->cancel = 1;
            pthread_cond_signal(&s->wake);
        }
        if (why != MHD_REQUEST_TERMINATED_COMPLETED_OK && q->status == 200 && !j->stream) q->status = 499;
        n_prompt = j->n_prompt;
        n_gen = j->n_gen;
        j->conn = NULL;
        if (--j->refs == 0) job_free(j);
        pthread_mutex_unlock(&s->lock);
    }
    if (s->p.on_access) {
        char line[320];
        snprintf(line, sizeof line, "%s %s %d prompt_tokens=%d gen_tokens=%d ms=%.1f%s", q->method,
                 q->path, q->status ? q->status : 499, n_prompt, n_gen, 1e3 * (moe8_now_s() - q->t0),
                 why == MHD_REQUEST_TERMINATED_COMPLETED_OK ? ""
                 : why == MHD_REQUEST_TERMINATED_TIMEOUT_REACHED ? " (timed out)"
                 : why == MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN ? " (server stopped)"
                                                                 : " (client gone)");
        s->p.on_access(s->p.user, line);
    }
    sbuf_free(&q->body);
    free(q);
    *con_cls = NULL;
}

/* ---- start / stop ------------------------------------------------------------------- */

moe8_status http_start(srv *s, moe8_error *err) {
    struct sockaddr_in a4;
    struct sockaddr_in6 a6;
    struct sockaddr *addr;
    unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ITC;
    const union MHD_DaemonInfo *di;
    memset(&a4, 0, sizeof a4);
    memset(&a6, 0, sizeof a6);
    if (inet_pton(AF_INET, s->p.host, &a4.sin_addr) == 1) {
        a4.sin_family = AF_INET;
        a4.sin_port = htons((uint16_t)s->p.port);
        addr = (struct sockaddr *)&a4;
    } else if (inet_pton(AF_INET6, s->p.host, &a6.sin6_addr) == 1) {
        a6.sin6_family = AF_INET6;
        a6.sin6_port = htons((uint16_t)s->p.port);
        addr = (struct sockaddr *)&a6;
        flags |= MHD_USE_IPv6;
    } else {
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "--host '%s' is not an IPv4 or IPv6 address",
                         s->p.host);
    }
    s->daemon = MHD_start_daemon(flags, (uint16_t)s->p.port, NULL, NULL, on_request, s,
                                 MHD_OPTION_SOCK_ADDR, addr,
                                 MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                                 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)(s->p.timeout_s + 0.5),
                                 MHD_OPTION_CONNECTION_LIMIT, (unsigned)4096,
                                 MHD_OPTION_END);
    if (!s->daemon)
        return moe8_fail(err, MOE8_ERR_IO, -1, "cannot listen on %s port %d: %s", s->p.host,
                         s->p.port, strerror(errno));
    di = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : s->p.port;
    return MOE8_OK;
}

void http_quiesce(srv *s) {
    /* MHD hands the listening socket back: closed, new connections are
     * refused at once instead of waiting in its backlog until the exit. */
    MHD_socket fd = s->daemon ? MHD_quiesce_daemon(s->daemon) : MHD_INVALID_SOCKET;
    if (fd != MHD_INVALID_SOCKET) close(fd);
}

void http_wait_idle(srv *s, double seconds) {
    const double t_end = moe8_now_s() + seconds;
    while (s->daemon && moe8_now_s() < t_end) {
        const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
        struct timespec ts = {0, 10 * 1000 * 1000};
        if (!di || di->num_connections == 0) return;
        nanosleep(&ts, NULL);
    }
}

void http_stop(srv *s) {
    if (s->daemon) MHD_stop_daemon(s->daemon);
    s->daemon = NULL;
}

void http_resume(void *conn) { MHD_resume_connection((struct MHD_Connection *)conn); }

int http_peer_gone(const job *j) {
    char c;
    ssize_t n;
    if (j->conn_fd < 0) return 0;
    n = recv(j->conn_fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}
