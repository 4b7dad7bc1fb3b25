/*
 * http_route.c — what moe8 serve decides about a request once its head is
 * in: the framing (http_parse.c; an error is answered once and the
 * connection closed), the API key (401), the route (404, 405: the row of
 * the endpoint table, endpoints.c, of the path and method; 405 when the
 * path has no row of the method), the body's size (413 past --max-body)
 * and room for it under --max-buffered (503); only then is "100 Continue"
 * sent to a client that expects it. A refusal with a body pending closes
 * the connection after its lingering read. A row may take the key as
 * x-api-key too, and may give its errors its API's shape (its `error`). CORS: an Origin in
 * --allowed-origins is answered with its headers, and its OPTIONS preflight
 * here (403 for another origin).
 *
 * A complete body goes to its row: a cheap answer (models, health,
 * metrics) on the HTTP thread, anything of a request's size (JSON, chat
 * templates, tokenizing) on a worker; a worker's job is queued for the
 * engine here once it comes back (503 while stopping or past --max-queue).
 *
 * Does not: read or write sockets (http.c, http_out.c), or know any API:
 * the rows' functions do the parsing and the answers.
 */
#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <omp.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/core.h"
#include "server/http_impl.h"

/* ---- routes and auth -------------------------------------------------------------------- */

/* The row of path[0..n) that s serves: an exact path, else a prefix with
 * something after it; among the rows of that same path, the one of `method`
 * (several methods may share a path), else the first (a 405 names its
 * method); NULL: none. */
static const srv_endpoint *find_route(const srv *s, const char *method, const char *path, size_t n) {
    const srv_endpoint *first = NULL;
    for (const srv_endpoint *e = moe8_srv_endpoints; e->method; e++) {
        const size_t k = strlen(e->path);
        if (!moe8_srv_endpoint_on(s, e)) continue;
        if (first) {
            if (e->prefix == first->prefix && !strcmp(e->path, first->path) && !strcmp(e->method, method)) return e;
            continue;
        }
        if (e->prefix ? n > k && !memcmp(path, e->path, k) : n == k && !memcmp(path, e->path, n)) {
            if (!strcmp(e->method, method)) return e;
            first = e;
        }
    }
    return first;
}

/* 1 if v[0..n) is the key (constant time in the key's length). */
static int key_is(const srv *s, const char *v, size_t n) {
    const size_t k = strlen(s->p.api_key);
    unsigned char d = 0;
    if (n != k) return 0;
    for (size_t i = 0; i < k; i++) d |= (unsigned char)(v[i] ^ s->p.api_key[i]);
    return d == 0;
}

/* The key as "Authorization: Bearer <key>", or where the row takes it
 * (x_api_key) as "x-api-key: <key>". */
static int authorized(const srv *s, const http_head *hd, const srv_endpoint *ep) {
    const char *v = hd->auth;
    size_t n = hd->auth_len;
    if (!s->p.api_key) return 1;
    if (ep && ep->x_api_key && hd->x_api_key && key_is(s, hd->x_api_key, hd->x_api_key_len)) return 1;
    if (!v || n < 7 || strncasecmp(v, "bearer", 6) || (v[6] != ' ' && v[6] != '\t')) return 0;
    v += 6, n -= 6;
    while (n && (*v == ' ' || *v == '\t')) v++, n--;
    return key_is(s, v, n);
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

/* ---- dispatch: this thread or a worker ----------------------------------------------------- */

static void task_queue(http *h, task *t) {
    pthread_mutex_lock(&h->tlock);
    t->next = NULL;
    if (h->todo_tail) h->todo_tail->next = t;
    else h->todo_head = t;
    h->todo_tail = t;
    pthread_cond_signal(&h->tcond);
    pthread_mutex_unlock(&h->tlock);
}


/* The body is complete: its row answers here (cheap ones) or on a worker. */
void moe8_http_dispatch(http *h, conn *c) {
    c->st = C_WORK;
    if (c->ep->answer) {
        moe8_buf out = {0};
        const char *type = "application/json";
        const int status = c->ep->answer(h->s, c->path, &out, &type);
        moe8_http_respond(h, c, status, type, out.p ? out.p : "", out.n);
        moe8_buf_free(&out);
        return;
    }
    task *t = calloc(1, sizeof *t);
    if (!t) {
        moe8_http_respond_error(h, c, 500, "server_error", NULL, "out of memory");
        return;
    }
    t->c = c;
    memcpy(t->rid, c->rid, sizeof t->rid);
    t->ep = c->ep;
    t->body = c->body; /* the task owns the body; it stays counted until it comes back */
    memset(&c->body, 0, sizeof c->body);
    c->t = t;
    task_queue(h, t);
}

/* The request's id: the client's x-request-id when it is 1 to 64 of
 * A-Z a-z 0-9 . _ : - (so it is safe in a header and a log line), else 16 hex
 * digits made here (a hash of a per-server seed and a counter). */
static void request_id(http *h, conn *c) {
    const char *v = c->h.x_request_id;
    size_t n = c->h.x_request_id_len, i = 0;
    if (v && n >= 1 && n <= 64)
        for (i = 0; i < n; i++)
            if (!isalnum((unsigned char)v[i]) && !strchr("._:-", v[i])) break;
    if (v && n >= 1 && n <= 64 && i == n) {
        memcpy(c->rid, v, n);
        c->rid[n] = '\0';
        return;
    }
    if (!h->rid_seed) h->rid_seed = (uint64_t)(moe8_time_s() * 1e9) ^ ((uint64_t)getpid() << 32) ^ 0x9e3779b97f4a7c15ull;
    const uint64_t k[2] = {h->rid_seed, ++h->rid_n};
    snprintf(c->rid, sizeof c->rid, "%016llx", (unsigned long long)moe8_hash64(k, sizeof k, 0));
}

/* The head is complete: framing, auth, route, size, room; then the body. */
void moe8_http_on_head(http *h, conn *c, const char *p, size_t n) {
    srv *s = h->s;
    const char *why = NULL;
    int rc = moe8_http_head_parse(p, n, &c->h, &why);
    c->t_req = moe8_time_s();
    c->keep_alive = 0; /* until the head is known good */
    c->ttft_ms = -1;
    request_id(h, c);
    if (rc) {
        c->close_after = 1;
        moe8_http_respond_error(h, c, rc, "invalid_request_error", "bad_request", "%s", why);
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
    c->ep = find_route(s, c->method, c->h.path, c->h.path_len);
    {
        char line[400];
        snprintf(line, sizeof line, "%s %s from %s", c->method, c->path, c->addr);
        moe8_serve_record r = {.level = MOE8_LOG_DEBUG, .kind = "request", .message = line, .request_id = c->rid,
                               .client = c->addr, .method = c->method, .path = c->path, .ttft_ms = -1};
        moe8_srv_emit(s, &r);
    }
    c->preflight = 0;
    c->origin[0] = '\0';
    if (c->h.origin && s->p.allowed_origins && c->h.origin_len < sizeof c->origin &&
        origin_allowed(s, c->h.origin, c->h.origin_len))
        snprintf(c->origin, sizeof c->origin, "%.*s", (int)c->h.origin_len, c->h.origin);
    if (!strcmp(c->method, "OPTIONS") && s->p.allowed_origins && c->h.origin) { /* a CORS preflight */
        c->preflight = 1;
        if (c->chunked || c->body_len) c->close_after = 1;
        if (!c->origin[0])
            moe8_http_respond_error(h, c, 403, "invalid_request_error", "origin_not_allowed",
                          "the origin is not in --allowed-origins");
        else moe8_http_respond(h, c, 204, "text/plain", "", 0);
        return;
    }
    if (!(c->ep && c->ep->open) && !authorized(s, &c->h, c->ep)) {
        if (c->chunked || c->body_len) c->close_after = 1;
        moe8_http_respond_error(h, c, 401, "invalid_request_error", "invalid_api_key",
                      c->ep && c->ep->x_api_key ? "missing or wrong API key: send 'x-api-key: <key>' or "
                      "'Authorization: Bearer <key>'" : "missing or wrong API key: send 'Authorization: Bearer <key>'");
        return;
    }
    if (!c->ep || strcmp(c->method, c->ep->method)) {
        if (c->chunked || c->body_len) c->close_after = 1;
        if (!c->ep)
            moe8_http_respond_error(h, c, 404, "invalid_request_error", "not_found", "no such endpoint: %s %s",
                          c->method, c->path);
        else
            moe8_http_respond_error(h, c, 405, "invalid_request_error", "method_not_allowed", "%s takes %s, not %s",
                          c->path, c->ep->method, c->method);
        return;
    }
    if (c->body_len > s->p.max_body) {
        c->close_after = 1;
        moe8_http_respond_error(h, c, 413, "invalid_request_error", "body_too_large",
                      "the request body (%llu bytes) is larger than %llu bytes (--max-body)",
                      (unsigned long long)c->body_len, (unsigned long long)s->p.max_body);
        return;
    }
    /* the room the body needs beside everyone else's bytes (what of it came
     * with the head is this connection's unread input, counted already) */
    if (h->buffered - c->counted + (c->body_len > c->in.n - c->in_off ? c->body_len : c->in.n - c->in_off) >
        s->p.max_buffered) {
        c->close_after = 1;
        moe8_http_limit_hit(h, L_BUFFERED, c->addr, c->t_req);
        moe8_http_respond_error(h, c, 503, "server_error", "overloaded",
                      "the server is holding too many request bodies (--max-buffered); try again later");
        return;
    }
    if (c->chunked || c->body_len) {
        if (moe8_buf_reserve(&c->body, c->chunked ? 4096 : (size_t)c->body_len)) {
            c->close_after = 1;
            moe8_http_respond_error(h, c, 500, "server_error", NULL, "out of memory");
            return;
        }
        c->st = C_BODY;
        c->t_phase = c->t_req;
        moe8_http_recount(h, c);
        if (c->h.expect_continue && c->minor == 1 && c->in.n == c->in_off)
            moe8_buf_str(&c->out, "HTTP/1.1 100 Continue\r\n\r\n");
        return;
    }
    moe8_http_dispatch(h, c);
}

/* ---- workers ------------------------------------------------------------------------------ */

void *moe8_http_worker_main(void *arg) {
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
        moe8_srv_rid = t->rid; /* its notes carry the request's id */
        t->status = t->ep->parse(s, t->body.p ? t->body.p : "", t->body.n, &t->j, &t->out);
        moe8_srv_rid = NULL;
        pthread_mutex_lock(&h->tlock);
        t->next = h->done_head;
        h->done_head = t;
        pthread_mutex_unlock(&h->tlock);
        if (write(h->efd, &one, sizeof one) < 0) { /* a wake-up is pending anyway */
        }
    }
}

/* ---- the workers' answers and jobs back ----------------------------------------------------- */

/* A worker's job (its choices with it) queued for the engine: 0, or 1 the
 * server is stopping, 2 the queue is full (--max-queue). */
static int submit(srv *s, conn *c, job *j) {
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
            if (c->ep->start) c->ep->start(s, k);
        }
        if (s->submit_tail) s->submit_tail->next = j;
        else s->submit_head = j;
        s->submit_tail = j;
        s->n_submitted++;
        c->n_prompt = j->n_prompt;
        pthread_cond_signal(&s->wake);
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

void moe8_http_tasks_done(http *h) {
    task *done;
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
            moe8_http_job_drop(t->j);
            moe8_http_conn_retire(h, c);
            c = NULL;
        } else if (t->status) {
            if (t->status >= 400 && c->ep && c->ep->error) c->ep->error(t->status, 0, &t->out);
            moe8_http_respond(h, c, t->status, "application/json", t->out.p, t->out.n);
            moe8_http_flush_add(h, c);
        } else if (t->j) {
            const int rc = submit(h->s, c, t->j);
            if (rc) {
                moe8_http_job_drop(t->j);
                moe8_http_respond_error(h, c, 503, "server_error", rc == 1 ? "shutting_down" : "overloaded",
                                        "%s", rc == 1 ? "the server is shutting down"
                                        : "too many requests are waiting (--max-queue); try again later");
                moe8_http_flush_add(h, c);
            }
        }
        if (c) moe8_http_recount(h, c);
        moe8_buf_free(&t->body);
        moe8_buf_free(&t->out);
        free(t);
    }
}
