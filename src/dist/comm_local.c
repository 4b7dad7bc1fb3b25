/*
 * comm_local.c — the one-rank communicator (always built) and the dispatch
 * from the generic moe8_comm_* calls to an implementation's ops table.
 * With one rank, all-reduce and broadcast leave the buffer as it is and
 * all-gather is a copy.
 *
 * The MPI communicator is reached through a weak reference: it is NULL in a
 * program linked without libmoe8_mpi, so libmoe8.a never needs -lmpi.
 *
 * The dispatch keeps the first MOE8_ERR_COMM of a collective (comm.h): from
 * then on every collective fails at once with that message.
 */
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "dist/comm.h"

moe8_status moe8_comm_mpi_create(moe8_comm **out, moe8_error *err) __attribute__((weak));

static void local_free(moe8_comm *c) { free(c); }

static moe8_status local_allreduce(moe8_comm *c, float *buf, size_t n, moe8_error *err) {
    (void)c, (void)buf, (void)n, (void)err;
    return MOE8_OK;
}

static moe8_status local_allgather(moe8_comm *c, const void *send, void *recv, size_t bytes,
                                   moe8_error *err) {
    (void)c, (void)err;
    if (bytes) memmove(recv, send, bytes);
    return MOE8_OK;
}

static moe8_status local_bcast(moe8_comm *c, void *buf, size_t bytes, int root, moe8_error *err) {
    (void)c, (void)buf, (void)bytes;
    if (root != 0) return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "broadcast root %d of 1 rank", root);
    return MOE8_OK;
}

static moe8_status local_barrier(moe8_comm *c, moe8_error *err) {
    (void)c, (void)err;
    return MOE8_OK;
}

/* One rank has no peer to bring down: return, and the caller ends itself. */
static void local_abort(moe8_comm *c, int code) {
    (void)c, (void)code;
}

static const moe8_comm_ops local_ops = {
    local_free, local_allreduce, local_allgather, local_bcast, local_barrier, local_abort,
};

/* The offline stand-in (comm.h): every other rank is taken to send what this one does. */
static moe8_status offline_allreduce(moe8_comm *c, float *buf, size_t n, moe8_error *err) {
    (void)buf, (void)n;
    return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1, "rank %d of %d offline (pack): all-reduce "
                     "needs the other ranks; an offline shard only loads and packs", c->rank,
                     c->size);
}

static moe8_status offline_allgather(moe8_comm *c, const void *send, void *recv, size_t bytes,
                                     moe8_error *err) {
    (void)err;
    for (int r = 0; r < c->size && bytes; r++) memmove((char *)recv + (size_t)r * bytes, send, bytes);
    return MOE8_OK;
}

static moe8_status offline_bcast(moe8_comm *c, void *buf, size_t bytes, int root,
                                 moe8_error *err) {
    (void)buf, (void)bytes;
    if (root < 0 || root >= c->size)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "broadcast root %d of %d ranks", root,
                         c->size);
    return MOE8_OK;
}

static const moe8_comm_ops offline_ops = {
    local_free, offline_allreduce, offline_allgather, offline_bcast, local_barrier, local_abort,
};

moe8_status moe8_comm_create_offline(int rank, int size, moe8_comm **out, moe8_error *err) {
    moe8_comm *c;
    *out = NULL;
    if (size < 1 || rank < 0 || rank >= size)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "rank %d of %d: expected 0 <= rank < size",
                         rank, size);
    if (!(c = calloc(1, sizeof *c)))
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "cannot allocate a communicator");
    c->ops = &offline_ops;
    c->rank = rank;
    c->size = size;
    *out = c;
    return MOE8_OK;
}

int moe8_comm_mpi_available(void) { return moe8_comm_mpi_create != NULL; }

moe8_status moe8_comm_create(moe8_comm_kind kind, moe8_comm **out, moe8_error *err) {
    moe8_comm *c;
    *out = NULL;
    if (kind == MOE8_COMM_MPI) {
        if (moe8_comm_mpi_create) return moe8_comm_mpi_create(out, err);
        return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1,
                         "more than one rank needs MPI, but this program was linked without "
                         "libmoe8_mpi: link it with pkg-config moe8-mpi (built when OpenMPI "
                         "is installed)");
    }
    if (kind != MOE8_COMM_LOCAL)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "unknown communicator kind %d", (int)kind);
    c = calloc(1, sizeof *c);
    if (!c) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "cannot allocate a communicator");
    c->ops = &local_ops;
    c->rank = 0;
    c->size = 1;
    *out = c;
    return MOE8_OK;
}

void moe8_comm_free(moe8_comm *c) {
    if (c) c->ops->free(c);
}

int moe8_comm_rank(const moe8_comm *c) { return c->rank; }
int moe8_comm_size(const moe8_comm *c) { return c->size; }

/* A broken communicator fails every collective at once with its first
 * failure's message. */
static moe8_status broken(const moe8_comm *c, moe8_error *err) {
    return moe8_fail(err, c->failed, -1, "%s", c->failure);
}

/* The outcome of a collective, run with the error struct `e` (the
 * implementation always gets one, so the message is kept even when the
 * caller passed NULL): a communication failure breaks the communicator. */
static moe8_status settle(moe8_comm *c, moe8_status st, const moe8_error *e, moe8_error *err) {
    if (!st) return MOE8_OK;
    if (err) *err = *e;
    if (st == MOE8_ERR_COMM) {
        c->failed = st;
        snprintf(c->failure, sizeof c->failure, "%s", e->message);
    }
    return st;
}

static moe8_status timed_allreduce(moe8_comm *c, float *buf, size_t n, moe8_error *err) {
    double t0 = moe8_time_s();
    moe8_status st = c->ops->allreduce_sum_f32(c, buf, n, err);
    c->busy_s += moe8_time_s() - t0;
    return st;
}

static moe8_status timed_allgather(moe8_comm *c, const void *send, void *recv, size_t bytes,
                                   moe8_error *err) {
    double t0 = moe8_time_s();
    moe8_status st = c->ops->allgather(c, send, recv, bytes, err);
    c->busy_s += moe8_time_s() - t0;
    return st;
}

static moe8_status timed_bcast(moe8_comm *c, void *buf, size_t bytes, int root, moe8_error *err) {
    double t0 = moe8_time_s();
    moe8_status st = c->ops->bcast(c, buf, bytes, root, err);
    c->busy_s += moe8_time_s() - t0;
    return st;
}

/* One rank never communicates: no clock reads on the single-process path. */
moe8_status moe8_comm_allreduce_sum_f32(moe8_comm *c, float *buf, size_t n, moe8_error *err) {
    moe8_error e;
    if (c->size == 1) return MOE8_OK;
    if (c->failed) return broken(c, err);
    return settle(c, timed_allreduce(c, buf, n, &e), &e, err);
}

moe8_status moe8_comm_allgather(moe8_comm *c, const void *send, void *recv, size_t bytes,
                                moe8_error *err) {
    moe8_error e;
    if (c->failed) return broken(c, err);
    return settle(c, timed_allgather(c, send, recv, bytes, &e), &e, err);
}

moe8_status moe8_comm_bcast(moe8_comm *c, void *buf, size_t bytes, int root, moe8_error *err) {
    moe8_error e;
    if (root < 0 || root >= c->size)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "broadcast root %d of %d ranks", root, c->size);
    if (c->failed) return broken(c, err);
    return settle(c, timed_bcast(c, buf, bytes, root, &e), &e, err);
}

moe8_status moe8_comm_barrier(moe8_comm *c, moe8_error *err) {
    moe8_error e;
    if (c->failed) return broken(c, err);
    return settle(c, c->ops->barrier(c, &e), &e, err);
}

double moe8_comm_busy_seconds(const moe8_comm *c) { return c->busy_s; }

void moe8_comm_set_timeout(moe8_comm *c, double seconds) {
    c->timeout_s = seconds > 0 ? seconds : 0; /* NaN and negatives: none */
}

moe8_status moe8_comm_failure(const moe8_comm *c, moe8_error *err) {
    return c->failed ? broken(c, err) : MOE8_OK;
}

void moe8_comm_abort(moe8_comm *c, int code) { c->ops->abort(c, code); }
