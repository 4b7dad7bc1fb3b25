/*
 * moe8_dist.h — distribution: tensor and expert parallelism over MPI (SEMANTICS §8).
 *
 * Stable: append-only. Link libmoe8_mpi (moe8-mpi.pc) for more than one rank;
 * without it a program has one rank and these calls say so.
 */
#ifndef MOE8_API_DIST_H
#define MOE8_API_DIST_H

#include "moe8.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================== */
/* Distributed: tensor and expert parallelism over MPI (SEMANTICS §8)             */
/* ======================================================================== */

/* N processes (ranks), started together by mpirun, run one model: attention
 * heads are split over the ranks (q/k/v column-parallel, o_proj row-parallel
 * + all-reduce), dense MLPs along their width, experts along the intermediate
 * dimension (TP, default) or as whole experts in contiguous blocks
 * (expert_parallel). Embeddings, norms, router and lm_head are replicated.
 * Each rank packs only its shard; the pages of the checkpoint it never
 * touches are never resident. Every rank runs the same calls in the same
 * order (moe8_decode included); rank 0 samples and broadcasts the tokens.
 *
 * Failure handling: every call below that communicates is collective. A
 * model load or context create with a dist first agrees on every rank's
 * outcome, so one rank's failure (missing/corrupt shard, out of memory, bad
 * split) fails the call on every rank with that rank's message
 * ("rank R: ..."); the load then compares a fingerprint of the model folder
 * (config.json, quant description, safetensors headers and file sizes). A
 * rank that dies is handled by mpirun (it ends the others). A rank that
 * stops answering (a stopped process, a stuck node) is caught by a watchdog
 * on every collective (moe8_dist_set_timeout, default 60 s): a rank left
 * waiting sleeps instead of spinning, and after the timeout the collective
 * fails with MOE8_ERR_COMM naming the silent rank ("rank 1 stopped
 * answering: no reply within 60 s in all-reduce"); the group is then broken
 * (moe8_dist_failure) and the caller ends the job with moe8_dist_abort. MPI is
 * initialised only by moe8_dist_create with n_ranks > 1; nothing else in moe8
 * touches it. The MPI transport is used from the calling thread only.
 *
 * Linking: libmoe8 (pkg-config moe8) never needs MPI; the transport is in
 * libmoe8_mpi (pkg-config moe8-mpi), which a multi-rank program links too. */

/* 1 when this program was linked with libmoe8_mpi. */
int moe8_dist_mpi_available(void);

/* Join the group of n_ranks processes. n_ranks 1: a local handle, MPI is not
 * touched (fails if the process was started by a launcher with more than one
 * process: the counts must agree). n_ranks > 1: initialises MPI; fails
 * (MOE8_ERR_INVALID_ARG) unless the launcher started exactly n_ranks
 * processes, and (MOE8_ERR_UNSUPPORTED) in a program linked without
 * libmoe8_mpi. On failure nothing is left initialised. */
moe8_status moe8_dist_create(int n_ranks, int expert_parallel, moe8_dist **out, moe8_error *err);
/* A handle for rank `rank` of `n_ranks` in this one process, with no MPI and no
 * peers: moe8_model_load and the first context load and prepare exactly that
 * rank's shard (and write its packed cache, which the real group's rank then
 * maps: `moe8 pack --tp N --rank R`); a decode with it fails
 * (MOE8_ERR_UNSUPPORTED). Checks that compare ranks pass (every peer is taken
 * to agree). rank outside [0, n_ranks): MOE8_ERR_INVALID_ARG. */
moe8_status moe8_dist_create_offline(int n_ranks, int rank, int expert_parallel, moe8_dist **out,
                                   moe8_error *err);
/* Collective when n_ranks > 1 (finalises MPI, except in a broken group:
 * moe8_dist_failure). NULL is a no-op. */
void moe8_dist_free(moe8_dist *d);
int moe8_dist_rank(const moe8_dist *d);
int moe8_dist_size(const moe8_dist *d);
int moe8_dist_expert_parallel(const moe8_dist *d);
/* Wall seconds this rank spent in collectives (all-reduce, all-gather,
 * broadcast), waiting for slower ranks included; 0 with one rank. */
double moe8_dist_comm_seconds(const moe8_dist *d);

/* Seconds a collective may wait for the other ranks before it fails with
 * MOE8_ERR_COMM naming the ranks that stopped answering (they are found by
 * pinging every rank, which costs up to one more second). Default 60; 0 =
 * no timeout (negative and NaN count as 0). Local to this rank: give every
 * rank the same value. No effect with one rank or d NULL. */
void moe8_dist_set_timeout(moe8_dist *d, double seconds);
/* MOE8_OK while the group works. Once a collective has failed with
 * MOE8_ERR_COMM (a rank stopped answering, or the transport failed) the
 * group is broken: this returns MOE8_ERR_COMM with that first message,
 * every later collective fails at once the same way, and moe8_dist_free does
 * not finalise MPI (it would wait for the silent rank). End the job with
 * moe8_dist_abort. */
moe8_status moe8_dist_failure(const moe8_dist *d, moe8_error *err);

/* Collective: every rank passes its own outcome (`local`; when it is an error
 * err->message holds its message). Returns MOE8_OK when every rank
 * succeeded; else, on every rank, the status of the lowest failing rank with
 * err->message "rank R: <its message>". */
moe8_status moe8_dist_agree(moe8_dist *d, moe8_status local, moe8_error *err);
/* Collective: fails (MOE8_ERR_INVALID_ARG, same message on every rank) unless
 * bytes[n] is the same on every rank; `what` names it in the message. */
moe8_status moe8_dist_check_same(moe8_dist *d, const void *bytes, size_t n, const char *what,
                                 moe8_error *err);
/* Collective: rank 0's tokens[n] and *flag replace every rank's. */
moe8_status moe8_dist_bcast_tokens(moe8_dist *d, int32_t *tokens, int n, int32_t *flag,
                                   moe8_error *err);
/* Collective: rank 0's buf[bytes] replaces every rank's (every rank passes
 * the same `bytes`). One rank, or d NULL: a no-op. */
moe8_status moe8_dist_bcast(moe8_dist *d, void *buf, size_t bytes, moe8_error *err);
/* Collective: recv[size][bytes] = every rank's send[bytes], in rank order. */
moe8_status moe8_dist_allgather(moe8_dist *d, const void *send, void *recv, size_t bytes,
                                moe8_error *err);
/* For a failure the other ranks cannot know about. More than one rank:
 * ends every rank of the job now with `code` (MPI_Abort) and does not
 * return. One rank, or d NULL: there is no peer to end, so it returns and
 * the caller ends its own process (e.g. exit(code)): moe8 never exits. */
void moe8_dist_abort(moe8_dist *d, int code);

/* This rank's share of a model loaded with a dist (all zeros without). */
typedef struct {
    int rank, size, expert_parallel;
    int head_begin, head_end;        /* q heads [begin, end) */
    int kv_begin, kv_end;            /* kv heads (replicated when num_key_value_heads < size) */
    int i_begin, i_end;              /* expert intermediate slice (whole under EP) */
    int expert_first, expert_last;   /* local experts (all under TP) */
    int f_begin, f_end;              /* dense MLP intermediate slice */
    int s_begin, s_end;              /* shared expert intermediate slice (split like a dense
                                      * MLP under TP and EP); 0, 0 without a shared expert */
} moe8_dist_shard;
void moe8_model_shard(const moe8_model *m, moe8_dist_shard *out);

#ifdef __cplusplus
}
#endif

#endif /* MOE8_API_DIST_H */
