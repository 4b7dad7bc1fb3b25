/*
 * comm.h — the communication layer between ranks (tensor / expert parallel).
 * One small interface, two implementations: comm_local.c (one rank, in
 * libmoe8, every collective a no-op or a copy) and comm_mpi.c (OpenMPI, in
 * libmoe8_mpi, built only when the build found MPI). Nothing but comm_mpi.c
 * includes mpi.h, and libmoe8 refers to it only through a weak symbol: a
 * program linked without libmoe8_mpi needs no MPI and has one rank.
 *
 * Collectives are blocking and must be called by every rank in the same
 * order. Reductions are deterministic for a fixed rank count: every rank gets
 * the same bits.
 *
 * Watchdog (MPI): a collective that waits longer than the timeout (default
 * 60 s) fails with MOE8_ERR_COMM naming the ranks that stopped answering.
 * That first failure breaks the communicator: every later collective fails
 * at once with the same message (a broken group never waits again), and
 * moe8_comm_free no longer finalises MPI (that would wait for the silent
 * peer); the caller ends the job with moe8_comm_abort.
 */
#ifndef MOE8_COMM_H
#define MOE8_COMM_H

#include <stddef.h>

#include "core/public.h"

typedef struct moe8_comm moe8_comm;

typedef enum {
    MOE8_COMM_LOCAL = 0, /* one process, no MPI */
    MOE8_COMM_MPI = 1,   /* MPI_COMM_WORLD; initialises MPI on first use */
} moe8_comm_kind;

/* 1 when this program was linked with libmoe8_mpi. */
int moe8_comm_mpi_available(void);

moe8_status moe8_comm_create(moe8_comm_kind kind, moe8_comm **out, moe8_error *err);
/* A stand-in for rank `rank` of `size` with no peers (moe8 pack --tp N --rank R):
 * all-gather fills every rank's slot with this rank's bytes and broadcast and
 * barrier return, as if every rank agreed; all-reduce fails (an offline shard
 * can load and pack, never compute). */
moe8_status moe8_comm_create_offline(int rank, int size, moe8_comm **out, moe8_error *err);
/* Frees the communicator; the last MPI one finalises MPI. */
void moe8_comm_free(moe8_comm *c);

int moe8_comm_rank(const moe8_comm *c);
int moe8_comm_size(const moe8_comm *c);

/* buf[n] = sum over ranks of buf[n] (in place). */
moe8_status moe8_comm_allreduce_sum_f32(moe8_comm *c, float *buf, size_t n, moe8_error *err);
/* recv[size][bytes] = every rank's send[bytes], in rank order. */
moe8_status moe8_comm_allgather(moe8_comm *c, const void *send, void *recv, size_t bytes,
                                moe8_error *err);
/* buf[bytes] of `root` copied to every rank. */
moe8_status moe8_comm_bcast(moe8_comm *c, void *buf, size_t bytes, int root, moe8_error *err);
moe8_status moe8_comm_barrier(moe8_comm *c, moe8_error *err);
/* Seconds a collective may wait for the other ranks (MPI; default 60);
 * 0 = wait forever (still without burning a core). No-op for the local comm. */
void moe8_comm_set_timeout(moe8_comm *c, double seconds);
/* MOE8_OK, or MOE8_ERR_COMM with the first failure's message once a
 * collective has failed (the communicator is broken). */
moe8_status moe8_comm_failure(const moe8_comm *c, moe8_error *err);
/* Seconds spent inside the collectives so far (waiting for peers included). */
double moe8_comm_busy_seconds(const moe8_comm *c);
/* Bring every rank down with `code` (after this rank reported its error):
 * a failed rank must never leave the others waiting in a collective. MPI:
 * MPI_Abort, does not return. One rank: returns (the caller then ends). */
void moe8_comm_abort(moe8_comm *c, int code);

/* Function table each implementation provides (internal). */
typedef struct {
    void (*free)(moe8_comm *c);
    moe8_status (*allreduce_sum_f32)(moe8_comm *c, float *buf, size_t n, moe8_error *err);
    moe8_status (*allgather)(moe8_comm *c, const void *send, void *recv, size_t bytes,
                             moe8_error *err);
    moe8_status (*bcast)(moe8_comm *c, void *buf, size_t bytes, int root, moe8_error *err);
    moe8_status (*barrier)(moe8_comm *c, moe8_error *err);
    void (*abort)(moe8_comm *c, int code);
} moe8_comm_ops;

struct moe8_comm {
    const moe8_comm_ops *ops;
    int rank, size;
    double busy_s;      /* wall time spent in all-reduce, all-gather and broadcast */
    double timeout_s;   /* watchdog of each collective, 0 = none (MPI only) */
    moe8_status failed; /* MOE8_ERR_COMM once a collective failed: sticky */
    char failure[MOE8_ERROR_MESSAGE_MAX]; /* that failure's message */
    void *impl; /* implementation state */
};

/* The MPI communicator (comm_mpi.c, libmoe8_mpi); call moe8_comm_create. */
moe8_status moe8_comm_mpi_create(moe8_comm **out, moe8_error *err);

#endif
