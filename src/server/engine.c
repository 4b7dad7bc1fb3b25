/*
 * engine.c — the scheduler thread of moe8 serve: takes the jobs the HTTP
 * thread queued, adds them to the scheduler, steps it, and turns every
 * event into the job's output (openai.c), telling the connection that waits
 * for it (moe8_http_notify). Also: cancels the jobs whose client left (http.c
 * sets their cancel flag), keeps the metrics, and on stop drains: no new requests, running ones finish within
 * drain_s, then the rest are cancelled (streams get a final event).
 *
 * Under TP/EP (SEMANTICS §8, §10) rank 0 runs this loop and, before each of
 * its iterations, broadcasts what changes the schedulers: the requests
 * added and the ids cancelled, and whether to step or stop. The other ranks
 * (moe8_engine_follow) apply the same calls to their own schedulers and step
 * with it, so every rank runs the same decode; their events are dropped.
 * While idle, rank 0 still broadcasts every 100 ms and every rank joins a
 * barrier (a heartbeat the collectives' watchdog times), so a rank that
 * stops answering is found even when no request runs.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/core.h"
#include "dist/comm.h"
#include "dist/dist.h"
#include "sched/request_wire.h"
#include "server/server.h"

#define TICK_S 0.1 /* idle wake-up: heartbeats, the stop flag */

/* ---- the message rank 0 broadcasts each iteration --------------------------------- */

typedef struct {
    int32_t n_add, n_cancel, step, stop;
} msg_head;

/* A request into the message (sched/request_wire.c describes its fields once). */
static int put_req(moe8_buf *b, const moe8_request *r) {
    const size_t n = moe8_request_wire_size(r);
    unsigned char *w = malloc(n ? n : 1);
    if (!w) return -1;
    moe8_request_wire_put(r, w);
    const int rc = moe8_buf_add(b, (const char *)w, n);
    free(w);
    return rc;
}

/* Add the serialized request at *at to the follower's scheduler. */
static moe8_status take_req(srv *s, const char *buf, size_t n, size_t *at, moe8_error *err) {
    moe8_request r;
    const char *stop[MOE8_MAX_STOP_STRINGS];
    int64_t id;
    moe8_status st = moe8_request_wire_get((const unsigned char *)buf, n, at, &r, stop, err);
    return st ? st : moe8_sched_add(s->sched, &r, &id, err);
}

/* Rank 0: the message of this iteration to every rank (nothing alone). */
static moe8_status broadcast(srv *s, moe8_buf *msg, moe8_error *err) {
    uint64_t n = msg->n;
    moe8_status st;
    if (moe8_dist_size(s->p.dist) <= 1) return MOE8_OK;
    if ((st = moe8_comm_bcast(s->p.dist->comm, &n, sizeof n, 0, err))) return st;
    return moe8_comm_bcast(s->p.dist->comm, msg->p, msg->n, 0, err);
}

moe8_status moe8_engine_follow(srv *s, moe8_error *err) {
    moe8_buf msg = {0};
    moe8_status st = MOE8_OK;
    for (;;) {
        uint64_t n = 0;
        msg_head h;
        size_t at = sizeof h;
        if ((st = moe8_comm_bcast(s->p.dist->comm, &n, sizeof n, 0, err))) break;
        if (n < sizeof h || n > ((uint64_t)1 << 32) || moe8_buf_reserve(&msg, (size_t)n)) {
            st = moe8_fail(err, MOE8_ERR_COMM, -1, "serve: bad step message of %llu bytes",
                           (unsigned long long)n);
            break;
        }
        msg.n = (size_t)n;
        if ((st = moe8_comm_bcast(s->p.dist->comm, msg.p, (size_t)n, 0, err))) break;
        memcpy(&h, msg.p, sizeof h);
        for (int32_t i = 0; i < h.n_add && !st; i++) st = take_req(s, msg.p, msg.n, &at, err);
        for (int32_t i = 0; i < h.n_cancel && !st && at + 8 <= msg.n; i++, at += 8) {
            int64_t id;
            memcpy(&id, msg.p + at, 8);
            moe8_sched_cancel(s->sched, id);
        }
        if (st || h.stop) break;
        if (!h.step) { /* the idle heartbeat: every rank must answer it */
            if ((st = moe8_comm_barrier(s->p.dist->comm, err))) break;
            continue;
        }
        if ((st = moe8_sched_step(s->sched, NULL, NULL, err)) == MOE8_ERR_COMM) break;
        st = MOE8_OK;
    }
    moe8_buf_free(&msg);
    return st;
}

/* ---- rank 0 -------------------------------------------------------------------------- */

static void live_remove(srv *s, job *j) {
    for (int i = 0; i < s->n_live; i++)
        if (s->live[i] == j) {
            s->live[i] = s->live[--s->n_live];
            return;
        }
}

/* j is done (under the lock): its connection is told, the engine's
 * reference goes. */
static void job_done(srv *s, job *j) {
    j->done = 1;
    moe8_http_notify(s, j);
    if (--j->refs == 0) moe8_job_free(j);
}

/* The leader's other choices (under the lock): into the submit queue, at
 * its head, once the leader's prompt is in the KV cache (`add`); else, or
 * when their client is gone, ended with the leader's status. */
static void release_kids(srv *s, job *j, int add) {
    for (int i = j->n_kids - 1; i >= 0; i--) {
        job *k = j->kids[i];
        if (add && !k->cancel) {
            k->next = s->submit_head;
            s->submit_head = k;
            if (!s->submit_tail) s->submit_tail = k;
            s->n_submitted++;
            continue;
        }
        if (j->status && !j->started) { /* the leader was refused: so are they */
            k->out.n = 0;
            moe8_buf_add(&k->out, j->out.p ? j->out.p : "", j->out.n);
            k->status = j->status;
        } else if (!k->status) {
            moe8_oa_error(&k->out, "server_error", NULL, "shutting_down", "the request was cancelled");
            k->status = 503;
        }
        k->cancel = 1;
        job_done(s, k);
    }
    j->n_kids = 0;
}

/* New jobs from the HTTP thread into the scheduler; `msg` gets them. */
static void intake(srv *s, moe8_buf *msg, int32_t *n_add) {
    job *list;
    pthread_mutex_lock(&s->lock);
    list = s->submit_head;
    s->submit_head = s->submit_tail = NULL;
    s->n_submitted = 0;
    pthread_mutex_unlock(&s->lock);
    while (list) {
        job *j = list;
        moe8_error e;
        int64_t id;
        list = j->next;
        j->next = NULL;
        pthread_mutex_lock(&s->lock);
        if (j->cancel) { /* left before it started */
            release_kids(s, j, 0);
            job_done(s, j);
            pthread_mutex_unlock(&s->lock);
            continue;
        }
        pthread_mutex_unlock(&s->lock);
        if (moe8_sched_add(s->sched, &j->rq, &id, &e) != MOE8_OK) {
            /* openai.c validated what the scheduler checks: this is a bug or
             * out of memory; a stream not started yet still gets the status */
            pthread_mutex_lock(&s->lock);
            moe8_oa_error(&j->out, e.code == MOE8_ERR_NOMEM ? "server_error" : "invalid_request_error",
                     NULL, NULL, "%s", e.message);
            j->status = e.code == MOE8_ERR_NOMEM ? 500 : 400;
            release_kids(s, j, 0);
            job_done(s, j);
            pthread_mutex_unlock(&s->lock);
            continue;
        }
        /* a few hundred bytes; the followers could not follow without them */
        MOE8_ASSERT(put_req(msg, &j->rq) == 0);
        (*n_add)++;
        pthread_mutex_lock(&s->lock);
        j->sched_id = id;
        j->started = 1;
        if (j->stream) moe8_http_notify(s, j); /* its 200 and first chunk can go */
        if (s->n_live == s->cap_live) {
            int cap = s->cap_live ? 2 * s->cap_live : 64;
            job **p = realloc(s->live, (size_t)cap * sizeof *p);
            MOE8_ASSERT(p != NULL); /* a few bytes per request */
            s->live = p;
            s->cap_live = cap;
        }
        s->live[s->n_live++] = j;
        s->sched_waiting++; /* waiting in the scheduler until the next count: never uncounted */
        s->m.prompt_tokens += (uint64_t)j->n_prompt;
        pthread_mutex_unlock(&s->lock);
    }
}

/* Cancel jobs whose client left, or whose one tool call is complete
 * (parallel_tool_calls false), or all at the drain deadline; `msg` gets the ids. */
static void cancels(srv *s, int all, moe8_buf *msg, int32_t *n_cancel) {
    pthread_mutex_lock(&s->lock);
    for (int i = 0; i < s->n_live; i++) {
        job *j = s->live[i];
        if ((j->cancel || j->tool_stop || all) && j->started != 2) {
            j->started = 2; /* cancel sent */
            moe8_sched_cancel(s->sched, j->sched_id);
            moe8_buf_add(msg, (const char *)&j->sched_id, 8);
            (*n_cancel)++;
        }
    }
    pthread_mutex_unlock(&s->lock);
}

static void on_events(srv *s, const moe8_event *ev, int32_t n) {
    const double t = moe8_time_s();
    pthread_mutex_lock(&s->lock);
    for (int32_t k = 0; k < n; k++) {
        job *j = ev[k].user;
        if (ev[k].type == MOE8_EVENT_PROMPT_LOGITS) {
            moe8_oa_on_prompt_logits(s, j, &ev[k]);
            continue;
        }
        if (j->n_kids) release_kids(s, j, 1); /* its prompt is computed: theirs is cached */
        if (ev[k].type == MOE8_EVENT_TOKEN) {
            if (j->n_gen == 0) moe8_hist_observe(&s->m.ttft, t - j->t_arrive), j->t_first = t;
            else moe8_hist_observe(&s->m.itl, t - j->t_last);
            j->t_last = t;
            s->m.generation_tokens++;
            moe8_oa_on_token(s, j, &ev[k]);
        } else {
            moe8_oa_on_finish(s, j, &ev[k]);
            moe8_hist_observe(&s->m.e2e, t - j->t_arrive);
            if (ev[k].finish == MOE8_FINISH_STOP || (ev[k].finish == MOE8_FINISH_CANCELLED && j->tool_stop))
                s->m.success_stop++;
            else if (ev[k].finish == MOE8_FINISH_LENGTH || ev[k].finish == MOE8_FINISH_CONTEXT)
                s->m.success_length++;
            else s->m.success_abort++;
            live_remove(s, j);
            job_done(s, j);
            continue;
        }
        if (j->stream && j->sent < j->out.n) moe8_http_notify(s, j);
    }
    pthread_mutex_unlock(&s->lock);
}

static void update_gauges(srv *s) {
    moe8_sched_stats st;
    moe8_sched_get_stats(s->sched, &st);
    pthread_mutex_lock(&s->lock);
    s->m.running = st.n_running;
    s->sched_waiting = st.n_waiting;
    s->m.waiting = st.n_waiting + s->n_submitted;
    s->m.kv_usage = st.kv.n_blocks ? (double)st.kv.n_used / st.kv.n_blocks : 0;
    s->m.prefix_hits = (uint64_t)st.prefix_hits;
    s->m.prefix_queries = (uint64_t)st.prefix_queries;
    s->m.state_slots = st.kv.state_slots;
    s->m.state_used = st.kv.state_running + st.kv.state_snapshots;
    s->m.state_snap_bytes = (uint64_t)st.kv.state_snapshots * st.kv.state_slot_bytes;
    s->m.state_bytes = (uint64_t)st.kv.state_slots * st.kv.state_slot_bytes;
    s->m.snap_hits = (uint64_t)st.kv.state_snap_hits;
    s->m.snap_misses = (uint64_t)st.kv.state_snap_misses;
    s->m.snap_evictions = (uint64_t)st.kv.state_snap_evictions;
    s->m.disk = st.kv.disk;
    pthread_mutex_unlock(&s->lock);
}

static void idle_wait(srv *s) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += (long)(TICK_S * 1e9);
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_mutex_lock(&s->lock);
    if (!s->submit_head) pthread_cond_timedwait(&s->wake, &s->lock, &ts);
    pthread_mutex_unlock(&s->lock);
}

moe8_status moe8_engine_run(srv *s, volatile int *stop, moe8_error *err) {
    moe8_buf msg = {0};
    double t_stop = 0;
    moe8_status st = MOE8_OK;
    for (;;) {
        msg_head h = {0, 0, 0, 0};
        const double now = moe8_time_s();
        int drained;
        msg.n = 0;
        moe8_buf_add(&msg, (const char *)&h, sizeof h);
        if (*stop && !t_stop) {
            t_stop = now;
            pthread_mutex_lock(&s->lock);
            s->stopping = 1;
            pthread_mutex_unlock(&s->lock);
            moe8_http_quiesce(s);
        }
        intake(s, &msg, &h.n_add);
        cancels(s, t_stop && now - t_stop > s->p.drain_s, &msg, &h.n_cancel);
        pthread_mutex_lock(&s->lock);
        drained = t_stop && s->n_live == 0 && !s->submit_head;
        pthread_mutex_unlock(&s->lock);
        h.step = moe8_sched_pending(s->sched) > 0;
        h.stop = drained;
        memcpy(msg.p, &h, sizeof h);
        if ((st = broadcast(s, &msg, err))) break;
        if (drained) break;
        moe8_srv_sleep_check(s, h.step || h.n_add, now);
        if (!h.step) {
            /* idle: a heartbeat every rank answers, so one that stopped is found */
            if (moe8_dist_size(s->p.dist) > 1 && (st = moe8_comm_barrier(s->p.dist->comm, err))) break;
            update_gauges(s);
            idle_wait(s);
            continue;
        }
        {
            const moe8_event *ev;
            int32_t n;
            moe8_error e;
            st = moe8_sched_step(s->sched, &ev, &n, &e);
            on_events(s, ev, n);
            update_gauges(s);
            if (st == MOE8_ERR_COMM) {
                if (err) *err = e;
                break;
            }
            st = MOE8_OK;
        }
    }
    moe8_buf_free(&msg);
    return st;
}

/* A job that never started: 503 for its client (under the lock). */
static void abandon(srv *s, job *j) {
    j->cancel = 1;
    if (!j->started) {
        moe8_oa_error(&j->out, "server_error", NULL, "shutting_down", "the server is shutting down");
        j->status = 503;
    }
    release_kids(s, j, 0);
    job_done(s, j);
}

void moe8_engine_abandon(srv *s) {
    pthread_mutex_lock(&s->lock);
    for (job *j = s->submit_head, *n; j; j = n) {
        n = j->next;
        abandon(s, j);
    }
    s->submit_head = s->submit_tail = NULL;
    while (s->n_live > 0) abandon(s, s->live[--s->n_live]);
    pthread_mutex_unlock(&s->lock);
}
