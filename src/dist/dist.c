/*
 * dist.c — the public "Distributed" API of moe8.h (SEMANTICS §8) on top of the
 * communicator of comm.h: joining the group, agreeing on outcomes, the shard
 * of each rank, and comparing hashes across ranks (the model's load check,
 * load/fingerprint.c, compares its folder fingerprints so).
 *
 * Agreement: each rank all-gathers {status, message}; the lowest failing
 * rank's status and message become every rank's result.
 *
 * Launcher detection for n_ranks 1 reads the environment variables mpirun
 * sets (OMPI_COMM_WORLD_SIZE, PMI_SIZE), so a plain run never touches MPI.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch/plan.h"
#include "core/core.h"
#include "dist/dist.h"

/* ---- the handle -------------------------------------------------------------- */

int moe8_dist_mpi_available(void) { return moe8_comm_mpi_available(); }

/* Processes the launcher started, from its environment (1 when none). */
static long launcher_size(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        char *end;
        long n;
        if (!v || !*v) continue;
        errno = 0;
        n = strtol(v, &end, 10);
        if (!errno && !*end && n >= 1) return n;
    }
    return 1;
}

moe8_status moe8_dist_create(int n_ranks, int expert_parallel, moe8_dist **out, moe8_error *err) {
    moe8_dist *d;
    moe8_status st;
    long launched = launcher_size();
    if (!out) return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "dist: NULL output");
    *out = NULL;
    if (n_ranks < 1)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "--tp %d: expected 1 or more ranks", n_ranks);
    if (n_ranks == 1 && launched > 1)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "started as one of %ld processes "
                         "(mpirun -np %ld) but --tp is 1: pass --tp %ld", launched, launched,
                         launched);
    if (!(d = calloc(1, sizeof *d))) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "out of memory");
    d->expert_parallel = expert_parallel != 0;
    st = moe8_comm_create(n_ranks > 1 ? MOE8_COMM_MPI : MOE8_COMM_LOCAL, &d->comm, err);
    if (!st && moe8_comm_size(d->comm) != n_ranks)
        st = moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "--tp %d but %d process%s started: run "
                       "it as mpirun -np %d ...", n_ranks, moe8_comm_size(d->comm),
                       moe8_comm_size(d->comm) == 1 ? " was" : "es were", n_ranks);
    if (st) {
        moe8_dist_free(d);
        return st;
    }
    *out = d;
    return MOE8_OK;
}

moe8_status moe8_dist_create_offline(int n_ranks, int rank, int expert_parallel, moe8_dist **out,
                                   moe8_error *err) {
    moe8_dist *d;
    moe8_status st;
    if (!out) return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "dist: NULL output");
    *out = NULL;
    if (n_ranks < 1 || rank < 0 || rank >= n_ranks)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "--tp %d --rank %d: expected 0 <= rank < tp",
                         n_ranks, rank);
    if (!(d = calloc(1, sizeof *d))) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "out of memory");
    d->expert_parallel = expert_parallel != 0;
    if ((st = moe8_comm_create_offline(rank, n_ranks, &d->comm, err))) {
        free(d);
        return st;
    }
    *out = d;
    return MOE8_OK;
}

void moe8_dist_free(moe8_dist *d) {
    if (!d) return;
    moe8_comm_free(d->comm);
    free(d);
}

int moe8_dist_rank(const moe8_dist *d) { return d ? moe8_comm_rank(d->comm) : 0; }
int moe8_dist_size(const moe8_dist *d) { return d ? moe8_comm_size(d->comm) : 1; }
int moe8_dist_expert_parallel(const moe8_dist *d) { return d ? d->expert_parallel : 0; }
double moe8_dist_comm_seconds(const moe8_dist *d) { return d ? moe8_comm_busy_seconds(d->comm) : 0; }

void moe8_dist_set_timeout(moe8_dist *d, double seconds) {
    if (d) moe8_comm_set_timeout(d->comm, seconds);
}

moe8_status moe8_dist_failure(const moe8_dist *d, moe8_error *err) {
    return d ? moe8_comm_failure(d->comm, err) : MOE8_OK;
}

/* ---- collectives ------------------------------------------------------------- */

typedef struct {
    int32_t status;
    char message[MOE8_ERROR_MESSAGE_MAX];
} outcome;

moe8_status moe8_dist_agree(moe8_dist *d, moe8_status local, moe8_error *err) {
    const int n = moe8_dist_size(d);
    outcome mine, *all;
    moe8_error e2;
    moe8_status st;
    if (n == 1) return local;
    memset(&mine, 0, sizeof mine);
    mine.status = (int32_t)local;
    if (local && err) snprintf(mine.message, sizeof mine.message, "%s", err->message);
    if (!(all = calloc((size_t)n, sizeof *all))) {
        /* Cannot gather: bring the group down rather than leave it waiting. */
        moe8_comm_abort(d->comm, 1);
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "out of memory");
    }
    if ((st = moe8_comm_allgather(d->comm, &mine, all, sizeof mine, &e2))) {
        free(all);
        return moe8_fail(err, st, -1, "%s", e2.message);
    }
    st = MOE8_OK;
    for (int r = 0; r < n && !st; r++)
        if (all[r].status != MOE8_OK) {
            all[r].message[sizeof all[r].message - 1] = '\0';
            st = moe8_fail(err, (moe8_status)all[r].status, -1, "rank %d: %s", r, all[r].message);
        }
    free(all);
    return st;
}

/* h extended by n bytes at p (moe8_hash64 with h as the seed). */
static uint64_t hash_more(uint64_t h, const void *p, size_t n) { return moe8_hash64(p, n, h); }
#define HASH_SEED 1

/* All-gather a few hashes; the first entry that differs from rank 0's names
 * the mismatch: "rank R: <names[i]> differs from rank 0's". */
moe8_status moe8_dist_same_hashes(moe8_dist *d, const uint64_t *h, int n_h, const char *const *names,
                               moe8_error *err) {
    const int n = moe8_dist_size(d);
    uint64_t *all = calloc((size_t)n * (size_t)n_h, sizeof *all);
    moe8_status st;
    if (!all) {
        moe8_comm_abort(d->comm, 1);
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "out of memory");
    }
    st = moe8_comm_allgather(d->comm, h, all, (size_t)n_h * sizeof *h, err);
    for (int r = 1; r < n && !st; r++)
        for (int i = 0; i < n_h && !st; i++)
            if (all[(size_t)r * n_h + i] != all[i])
                st = moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "rank %d: %s differs from rank "
                               "0's: every rank must run the same settings on the same model",
                               r, names[i]);
    free(all);
    return st;
}

moe8_status moe8_dist_check_same(moe8_dist *d, const void *bytes, size_t n, const char *what,
                                 moe8_error *err) {
    uint64_t h[2];
    const char *names[2] = {what, what};
    if (moe8_dist_size(d) == 1) return MOE8_OK;
    h[0] = hash_more(HASH_SEED, bytes, n);
    h[1] = (uint64_t)n;
    return moe8_dist_same_hashes(d, h, 2, names, err);
}

moe8_status moe8_dist_bcast_tokens(moe8_dist *d, int32_t *tokens, int n, int32_t *flag,
                                   moe8_error *err) {
    moe8_status st;
    if (moe8_dist_size(d) == 1) return MOE8_OK;
    if (n < 0) return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "broadcast of %d tokens", n);
    if (n > 0 && (st = moe8_comm_bcast(d->comm, tokens, (size_t)n * sizeof *tokens, 0, err)))
        return st;
    return flag ? moe8_comm_bcast(d->comm, flag, sizeof *flag, 0, err) : MOE8_OK;
}

moe8_status moe8_dist_bcast(moe8_dist *d, void *buf, size_t bytes, moe8_error *err) {
    if (moe8_dist_size(d) == 1 || bytes == 0) return MOE8_OK;
    if (!buf) return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "broadcast of %zu bytes from NULL", bytes);
    return moe8_comm_bcast(d->comm, buf, bytes, 0, err);
}

moe8_status moe8_dist_allgather(moe8_dist *d, const void *send, void *recv, size_t bytes,
                                moe8_error *err) {
    if (!d) {
        if (bytes) memmove(recv, send, bytes);
        return MOE8_OK;
    }
    return moe8_comm_allgather(d->comm, send, recv, bytes, err);
}

void moe8_dist_abort(moe8_dist *d, int code) {
    if (d) moe8_comm_abort(d->comm, code);
}

/* ---- shards ------------------------------------------------------------------ */

static moe8_status split(int64_t n, int size, const char *what, const char *mode, int rank,
                         int *b, int *e, moe8_error *err) {
    if (n % size)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "%s %lld is not divisible by %d ranks "
                         "(%s): use a rank count that divides it", what, (long long)n, size, mode);
    *b = (int)(n / size * rank);
    *e = (int)(n / size * (rank + 1));
    return MOE8_OK;
}

moe8_status moe8_dist_shard_of(const moe8_config *c, int rank, int size, int ep,
                               moe8_dist_shard *s, moe8_error *err) {
    const int64_t NH = c->num_attention_heads, NKV = c->num_key_value_heads, E = c->num_experts;
    const char *mode = ep ? "--expert-parallel" : "--tp";
    moe8_status st;
    memset(s, 0, sizeof *s);
    s->rank = rank, s->size = size, s->expert_parallel = ep;
    if ((st = split(NH, size, "num_attention_heads", mode, rank, &s->head_begin, &s->head_end, err)))
        return st;
    if (NKV % size != 0 && size % NKV != 0)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "num_key_value_heads %lld and %d ranks: "
                         "one must divide the other", (long long)NKV, size);
    s->kv_begin = (int)(s->head_begin / (NH / NKV));
    s->kv_end = (int)((s->head_end - 1) / (NH / NKV) + 1);
    /* What the layers are (arch/plan.h): dense MLPs, MoE, a shared expert's width. */
    int dense = E == 0, sparse = 0; /* DeepSeek's first_k_dense_replace may leave no MoE layer */
    int64_t S = 0;
    for (int64_t l = 0; l < c->num_hidden_layers; l++) {
        moe8_layer_plan p;
        moe8_plan_layer(c, l, &p);
        dense |= p.ffn == MOE8_FFN_DENSE;
        sparse |= p.ffn != MOE8_FFN_DENSE;
        if (p.ffn == MOE8_FFN_MOE_SHARED) S = p.width;
    }
    if (dense && (st = split(c->intermediate_size, size, "intermediate_size", mode, rank,
                             &s->f_begin, &s->f_end, err)))
        return st;
    if (sparse && !ep &&
        (st = split(c->moe_intermediate_size, size, "moe_intermediate_size", mode, rank,
                    &s->i_begin, &s->i_end, err)))
        return st;
    /* The shared expert splits like a dense MLP, under TP and EP alike. */
    if (S > 0 && (st = split(S, size, "shared_expert_intermediate_size", mode, rank, &s->s_begin,
                             &s->s_end, err)))
        return st;
    if (E > 0 && ep) {
        int64_t base = E / size, rem = E % size;
        if (E < size)
            return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "--expert-parallel: %lld experts "
                             "for %d ranks (every rank needs one)", (long long)E, size);
        s->expert_first = (int)(base * rank + (rank < rem ? rank : rem));
        s->expert_last = (int)(s->expert_first + base + (rank < rem));
        s->i_begin = 0, s->i_end = (int)c->moe_intermediate_size;
    } else if (E > 0) {
        s->expert_first = 0, s->expert_last = (int)E;
    }
    return MOE8_OK;
}
