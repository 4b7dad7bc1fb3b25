/*
 * comm_mpi.c — the MPI communicator over MPI_COMM_WORLD (built only when
 * CMake finds MPI; the only file of moe8 that includes mpi.h).
 *
 * MPI is initialised on the first create (thread level FUNNELED: only the
 * thread that made the communicator calls MPI; OpenMP threads never do) and
 * finalised when that communicator is freed. Errors come back as statuses
 * (MPI_ERRORS_RETURN) so the caller can report them, then bring every rank
 * down with moe8_comm_abort rather than leave peers waiting.
 *
 * The watchdog. Every collective is the non-blocking form of the call it
 * replaces (MPI_Iallreduce, MPI_Iallgather, MPI_Ibcast, MPI_Ibarrier: the
 * same operation on the same data) completed by complete(): MPI_Test in a spin of
 * SPIN_S (ranks in step meet within it, so decode latency does not move),
 * then naps growing from NAP_MIN_NS to NAP_MAX_NS, so a rank left waiting
 * uses a few percent of a core instead of all of it. While it waits a rank
 * answers pings: a TAG_PING message on `ctl`, its own duplicate of
 * MPI_COMM_WORLD (collectives never see these), is answered with a TAG_PONG.
 * After c->timeout_s without completion the rank pings every other rank and
 * waits a grace period (GRACE_S, or the timeout when shorter); the ranks that
 * sent no pong are named, and the collective fails with MOE8_ERR_COMM:
 *   "rank 1 stopped answering: no reply within 60 s in all-reduce".
 * When every rank answers (a slow one has just arrived) the wait goes on for
 * one more timeout; stuck again with every rank answering, the ranks are out
 * of step and the collective fails saying so. A rank computing between two
 * collectives cannot answer (MPI is called from one thread), so the timeout
 * must exceed the longest such gap (a slow rank's model load, say).
 * The failed collective's request stays as it is: the communicator is broken
 * (comm.h), no collective runs on it again and free skips MPI_Finalize.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mpi.h>

#include "core/core.h"
#include "dist/comm.h"

/* Under LeakSanitizer. What MPI allocates inside MPI_Init_thread and
 * MPI_Finalize (its plugins' tables, its runtime) lives until exit by design,
 * and moe8 allocates nothing inside either call: LSan ignores what the calling
 * thread allocates between MPI_OWN_BEGIN and MPI_OWN_END. MPI's own threads
 * allocate too, and MPI_Finalize unloads the plugins that did it, so at exit
 * LSan could neither see their pointers nor name their frames: before it,
 * every loaded library is made permanent (RTLD_NODELETE), and what is left is
 * named and suppressed by library (tests/lsan.supp) with the fast unwinder. */
#if defined(__SANITIZE_ADDRESS__)
#include <dlfcn.h>
#include <link.h>
#include <sanitizer/lsan_interface.h>
static int keep_loaded(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    (void)data;
    if (info->dlpi_name && info->dlpi_name[0])
        (void)dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE);
    return 0;
}
#define MPI_OWN_BEGIN() __lsan_disable()
#define MPI_OWN_END() __lsan_enable()
#define MPI_KEEP_LOADED() ((void)dl_iterate_phdr(keep_loaded, NULL))
#else
#define MPI_OWN_BEGIN() ((void)0)
#define MPI_OWN_END() ((void)0)
#define MPI_KEEP_LOADED() ((void)0)
#endif

#define DEFAULT_TIMEOUT_S 60.0
#define SPIN_S 50e-6          /* MPI_Test without pause this long */
#define NAP_MIN_NS 10000L     /* then naps from 10 us ... */
#define NAP_MAX_NS 200000L    /* ... doubling up to 200 us */
#define GRACE_S 1.0           /* how long a pinged rank has to answer */
#define GRACE_NAP_NS 1000000L
#define TAG_PING 1
#define TAG_PONG 2

typedef struct {
    int initialised_here;  /* we called MPI_Init_thread, so we finalise */
    MPI_Comm ctl;          /* duplicate of MPI_COMM_WORLD for pings and pongs */
    int ping_in;           /* payload of the ping being answered */
    int ping_seq;          /* this rank's ping rounds so far: each ping's payload */
    int *ping_out;         /* [size] payload of the ping in flight to each rank */
    int *pong_out;         /* [size] payload of the pong in flight to each rank */
    int *pong_in;          /* [size] pong received from each rank */
    MPI_Request *pong_req; /* [size] pong in flight to each rank, or MPI_REQUEST_NULL */
    MPI_Request *ping_req; /* [size] this rank's ping in flight to each rank */
    MPI_Request *wait_req; /* [size] the pong awaited from each rank */
} mpi_state;

static moe8_status mpi_error(moe8_error *err, int rc, const char *what) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) len = 0;
    msg[len < MPI_MAX_ERROR_STRING ? len : MPI_MAX_ERROR_STRING - 1] = '\0';
    return moe8_fail(err, MOE8_ERR_COMM, -1, "mpi %s failed: %s", what, msg);
}

static void state_free(mpi_state *s) {
    if (!s) return;
    free(s->ping_out);
    free(s->pong_out);
    free(s->pong_in);
    free(s->pong_req);
    free(s->ping_req);
    free(s->wait_req);
    free(s);
}

static void mpi_free(moe8_comm *c) {
    mpi_state *s = c->impl;
    int finalized = 0;
    /* A broken group cannot finalise: MPI_Finalize waits for the silent peer. */
    if (s && !c->failed && MPI_Finalized(&finalized) == MPI_SUCCESS && !finalized) {
        for (int r = 0; s->pong_req && r < c->size; r++) { /* these finish on their own */
            if (s->pong_req[r] != MPI_REQUEST_NULL) MPI_Request_free(&s->pong_req[r]);
            if (s->ping_req[r] != MPI_REQUEST_NULL) MPI_Request_free(&s->ping_req[r]);
        }
        if (s->ctl != MPI_COMM_NULL) MPI_Comm_free(&s->ctl);
        if (s->initialised_here) {
            MPI_KEEP_LOADED();
            MPI_OWN_BEGIN();
            MPI_Finalize();
            MPI_OWN_END();
        }
    }
    state_free(s);
    free(c);
}

/* ---- the watchdog ------------------------------------------------------------ */

static void nap(long ns) {
    struct timespec ts = {0, ns};
    nanosleep(&ts, NULL);
}

/* Answer every ping that has arrived. A rank whose previous pong is still
 * on its way gets no second one: that pong answers it. */
static void serve_pings(mpi_state *s) {
    int flag = 0, done;
    MPI_Status st;
    while (MPI_Iprobe(MPI_ANY_SOURCE, TAG_PING, s->ctl, &flag, &st) == MPI_SUCCESS && flag) {
        const int from = st.MPI_SOURCE;
        if (MPI_Recv(&s->ping_in, 1, MPI_INT, from, TAG_PING, s->ctl, MPI_STATUS_IGNORE))
            return;
        done = 1;
        if (s->pong_req[from] != MPI_REQUEST_NULL)
            MPI_Test(&s->pong_req[from], &done, MPI_STATUS_IGNORE);
        if (!done) continue;
        s->pong_out[from] = s->ping_in;
        MPI_Isend(&s->pong_out[from], 1, MPI_INT, from, TAG_PONG, s->ctl, &s->pong_req[from]);
    }
}

/* Ping every other rank and wait the grace period for their pongs,
 * answering the pings of ranks doing the same and watching *req: when the
 * collective completes meanwhile the round ends with *done = 1. Returns how
 * many ranks sent no pong, listed in names[cap] ("1" or "1, 3"). */
static int ping_round(moe8_comm *c, MPI_Request *req, int *done, char *names, size_t cap) {
    mpi_state *s = c->impl;
    const int n = c->size;
    const double grace = c->timeout_s < GRACE_S ? c->timeout_s : GRACE_S;
    const double t_end = moe8_time_s() + grace;
    size_t used = 0;
    int n_open = 0, n_silent = 0, got;
    names[0] = '\0';
    s->ping_seq++;
    for (int r = 0; r < n; r++) {
        s->wait_req[r] = MPI_REQUEST_NULL;
        got = 1;
        if (r == c->rank) continue;
        if (MPI_Irecv(&s->pong_in[r], 1, MPI_INT, r, TAG_PONG, s->ctl, &s->wait_req[r]))
            continue;
        n_open++;
        if (s->ping_req[r] != MPI_REQUEST_NULL) MPI_Test(&s->ping_req[r], &got, MPI_STATUS_IGNORE);
        if (!got) continue; /* the last ping is not even delivered: no second one */
        s->ping_out[r] = s->ping_seq;
        MPI_Isend(&s->ping_out[r], 1, MPI_INT, r, TAG_PING, s->ctl, &s->ping_req[r]);
    }
    while (n_open > 0 && !*done && moe8_time_s() < t_end) {
        for (int r = 0; r < n; r++) {
            if (s->wait_req[r] == MPI_REQUEST_NULL ||
                MPI_Test(&s->wait_req[r], &got, MPI_STATUS_IGNORE) != MPI_SUCCESS || !got)
                continue;
            if (s->pong_in[r] == s->ping_seq) n_open--;
            else /* a late pong of an earlier round: wait for this round's */
                MPI_Irecv(&s->pong_in[r], 1, MPI_INT, r, TAG_PONG, s->ctl, &s->wait_req[r]);
        }
        serve_pings(s);
        if (MPI_Test(req, done, MPI_STATUS_IGNORE) != MPI_SUCCESS) *done = 0; /* reported later */
        if (n_open > 0 && !*done) nap(GRACE_NAP_NS);
    }
    for (int r = 0; r < n; r++) {
        if (s->wait_req[r] == MPI_REQUEST_NULL) continue;
        MPI_Cancel(&s->wait_req[r]);
        MPI_Request_free(&s->wait_req[r]);
        if (used < cap)
            used += (size_t)snprintf(names + used, cap - used, "%s%d", n_silent ? ", " : "", r);
        n_silent++;
    }
    return n_silent;
}

/* Complete the collective `what` of *req: spin, then nap with a growing
 * back-off, answering pings. Past the timeout, a ping round: silent ranks
 * fail the collective; when every rank answers (a slow one just arrived) it
 * waits one more timeout, and fails only if it is still stuck with every
 * rank alive (ranks out of step). */
static moe8_status complete(moe8_comm *c, MPI_Request *req, const char *what, moe8_error *err) {
    const double t0 = moe8_time_s();
    double deadline = t0 + c->timeout_s;
    char names[256];
    long ns = 0;
    int done = 0, rounds = 0, rc, n_silent;
    for (;;) {
        double now;
        if ((rc = MPI_Test(req, &done, MPI_STATUS_IGNORE)) != MPI_SUCCESS)
            return mpi_error(err, rc, what);
        if (done) return MOE8_OK;
        if ((now = moe8_time_s()) - t0 < SPIN_S) continue;
        serve_pings(c->impl);
        if (c->timeout_s > 0 && now > deadline) {
            n_silent = ping_round(c, req, &done, names, sizeof names);
            if (done) continue; /* MPI_Test above confirms it */
            if (n_silent)
                return moe8_fail(err, MOE8_ERR_COMM, -1, "rank%s %s stopped answering: no reply "
                                 "within %g s in %s", n_silent > 1 ? "s" : "", names,
                                 c->timeout_s, what);
            if (rounds++)
                return moe8_fail(err, MOE8_ERR_COMM, -1, "%s has not completed after %.0f s "
                                 "although every rank answers: do the ranks run the same "
                                 "collectives in the same order?", what, moe8_time_s() - t0);
            deadline = moe8_time_s() + c->timeout_s;
        }
        ns = ns == 0 ? NAP_MIN_NS : ns * 2 > NAP_MAX_NS ? NAP_MAX_NS : ns * 2;
        nap(ns);
    }
}

/* ---- collectives ------------------------------------------------------------- */

static moe8_status mpi_allreduce(moe8_comm *c, float *buf, size_t n, moe8_error *err) {
    while (n > 0) { /* MPI counts are int */
        int chunk = n > (size_t)INT_MAX ? INT_MAX : (int)n, rc;
        MPI_Request req;
        moe8_status st;
        rc = MPI_Iallreduce(MPI_IN_PLACE, buf, chunk, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req);
        if (rc != MPI_SUCCESS) return mpi_error(err, rc, "all-reduce");
        if ((st = complete(c, &req, "all-reduce", err))) return st;
        buf += chunk;
        n -= (size_t)chunk;
    }
    return MOE8_OK;
}

static moe8_status mpi_allgather(moe8_comm *c, const void *send, void *recv, size_t bytes,
                                 moe8_error *err) {
    MPI_Request req;
    int rc;
    if (bytes > (size_t)INT_MAX)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "all-gather of %zu bytes per rank is too large", bytes);
    rc = MPI_Iallgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, MPI_COMM_WORLD, &req);
    if (rc != MPI_SUCCESS) return mpi_error(err, rc, "all-gather");
    return complete(c, &req, "all-gather", err);
}

static moe8_status mpi_bcast(moe8_comm *c, void *buf, size_t bytes, int root, moe8_error *err) {
    char *p = buf;
    while (bytes > 0) {
        int chunk = bytes > (size_t)INT_MAX ? INT_MAX : (int)bytes, rc;
        MPI_Request req;
        moe8_status st;
        rc = MPI_Ibcast(p, chunk, MPI_BYTE, root, MPI_COMM_WORLD, &req);
        if (rc != MPI_SUCCESS) return mpi_error(err, rc, "broadcast");
        if ((st = complete(c, &req, "broadcast", err))) return st;
        p += chunk;
        bytes -= (size_t)chunk;
    }
    return MOE8_OK;
}

static moe8_status mpi_barrier(moe8_comm *c, moe8_error *err) {
    MPI_Request req;
    int rc = MPI_Ibarrier(MPI_COMM_WORLD, &req);
    if (rc != MPI_SUCCESS) return mpi_error(err, rc, "barrier");
    return complete(c, &req, "barrier", err);
}

static void mpi_abort(moe8_comm *c, int code) {
    (void)c;
    MPI_Abort(MPI_COMM_WORLD, code); /* ends every rank of the job: does not return */
}

static const moe8_comm_ops mpi_ops = {
    mpi_free, mpi_allreduce, mpi_allgather, mpi_bcast, mpi_barrier, mpi_abort,
};

/* ---- creation ---------------------------------------------------------------- */

static moe8_status state_alloc(mpi_state *s, int size) {
    const size_t n = (size_t)size;
    s->ping_out = calloc(n, sizeof *s->ping_out);
    s->pong_out = calloc(n, sizeof *s->pong_out);
    s->pong_in = calloc(n, sizeof *s->pong_in);
    s->pong_req = malloc(n * sizeof *s->pong_req);
    s->ping_req = malloc(n * sizeof *s->ping_req);
    s->wait_req = malloc(n * sizeof *s->wait_req);
    if (!s->ping_out || !s->pong_out || !s->pong_in || !s->pong_req || !s->ping_req || !s->wait_req)
        return MOE8_ERR_NOMEM;
    for (size_t r = 0; r < n; r++)
        s->pong_req[r] = s->ping_req[r] = s->wait_req[r] = MPI_REQUEST_NULL;
    return MOE8_OK;
}

moe8_status moe8_comm_mpi_create(moe8_comm **out, moe8_error *err) {
    int inited = 0, provided = 0, rc;
    moe8_comm *c = calloc(1, sizeof *c);
    mpi_state *s = calloc(1, sizeof *s);
    *out = NULL;
    if (!c || !s) {
        free(c);
        free(s);
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "cannot allocate an MPI communicator");
    }
    s->ctl = MPI_COMM_NULL;
    MPI_Initialized(&inited);
    if (!inited) {
        MPI_OWN_BEGIN();
        rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
        MPI_OWN_END();
        if (rc != MPI_SUCCESS) {
            free(c);
            free(s);
            return moe8_fail(err, MOE8_ERR_COMM, -1, "cannot initialise MPI (error %d)", rc);
        }
        s->initialised_here = 1;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &c->size);
    c->ops = &mpi_ops;
    c->impl = s;
    c->timeout_s = DEFAULT_TIMEOUT_S;
    /* Collective, like the create itself: every rank is here. */
    if ((rc = MPI_Comm_dup(MPI_COMM_WORLD, &s->ctl)) != MPI_SUCCESS) {
        moe8_status st = mpi_error(err, rc, "communicator duplicate");
        mpi_free(c);
        return st;
    }
    if (state_alloc(s, c->size)) {
        mpi_free(c);
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "cannot allocate an MPI communicator");
    }
    *out = c;
    return MOE8_OK;
}
