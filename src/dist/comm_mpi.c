/*
 * comm_mpi.c — the MPI communicator over MPI_COMM_WORLD (built only when
 * CMake finds MPI; the only file of moe8 that includes mpi.h).
 *
 * MPI is initialised on the first create (thread level FUNNELED: only the
 * thread that made the communicator calls MPI; OpenMP threads never do) and
 * finalised when that communicator is freed. Errors come back as statuses
 * (MPI_ERRORS_RETURN) so the caller can report them, then bring every rank
 * down with moe8_comm_abort rather than leave peers waiting.
 */
#include <limits.h>
#include <stdlib.h>

#include <mpi.h>

#include "core/core.h"
#include "dist/comm.h"

typedef struct {
    int initialised_here; /* we called MPI_Init_thread, so we finalise */
} mpi_state;

static moe8_status mpi_error(moe8_error *err, int rc, const char *what) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) len = 0;
    msg[len < MPI_MAX_ERROR_STRING ? len : MPI_MAX_ERROR_STRING - 1] = '\0';
    return moe8_fail(err, MOE8_ERR_COMM, -1, "mpi %s failed: %s", what, msg);
}

static void mpi_free(moe8_comm *c) {
    mpi_state *s = c->impl;
    int finalized = 0;
    if (s && s->initialised_here && MPI_Finalized(&finalized) == MPI_SUCCESS && !finalized)
        MPI_Finalize();
    free(s);
    free(c);
}

static moe8_status mpi_allreduce(moe8_comm *c, float *buf, size_t n, moe8_error *err) {
    (void)c;
    while (n > 0) { /* MPI counts are int */
        int chunk = n > (size_t)INT_MAX ? INT_MAX : (int)n;
        int rc = MPI_Allreduce(MPI_IN_PLACE, buf, chunk, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS) return mpi_error(err, rc, "all-reduce");
        buf += chunk;
        n -= (size_t)chunk;
    }
    return MOE8_OK;
}

static moe8_status mpi_allgather(moe8_comm *c, const void *send, void *recv, size_t bytes,
                                 moe8_error *err) {
    int rc;
    (void)c;
    if (bytes > (size_t)INT_MAX)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "all-gather of %zu bytes per rank is too large", bytes);
    rc = MPI_Allgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, MPI_COMM_WORLD);
    return rc == MPI_SUCCESS ? MOE8_OK : mpi_error(err, rc, "all-gather");
}

static moe8_status mpi_bcast(moe8_comm *c, void *buf, size_t bytes, int root, moe8_error *err) {
    char *p = buf;
    (void)c;
    while (bytes > 0) {
        int chunk = bytes > (size_t)INT_MAX ? INT_MAX : (int)bytes;
        int rc = MPI_Bcast(p, chunk, MPI_BYTE, root, MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS) return mpi_error(err, rc, "broadcast");
        p += chunk;
        bytes -= (size_t)chunk;
    }
    return MOE8_OK;
}

static moe8_status mpi_barrier(moe8_comm *c, moe8_error *err) {
    int rc = MPI_Barrier(MPI_COMM_WORLD);
    (void)c;
    return rc == MPI_SUCCESS ? MOE8_OK : mpi_error(err, rc, "barrier");
}

static void mpi_abort(moe8_comm *c, int code) {
    (void)c;
    MPI_Abort(MPI_COMM_WORLD, code); /* ends every rank of the job: does not return */
}

static const moe8_comm_ops mpi_ops = {
    mpi_free, mpi_allreduce, mpi_allgather, mpi_bcast, mpi_barrier, mpi_abort,
};

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
    MPI_Initialized(&inited);
    if (!inited) {
        rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
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
    *out = c;
    return MOE8_OK;
}
