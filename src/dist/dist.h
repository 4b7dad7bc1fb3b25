/*
 * dist.h — internal: the moe8_dist handle of moe8.h (a communicator plus the
 * parallel mode) and the pieces the model loader and the forward use: the
 * shard of one rank (SEMANTICS §8) and the comparison of hashes across ranks
 * (the model's load check, load/fingerprint.c).
 */
#ifndef MOE8_DIST_H
#define MOE8_DIST_H

#include "dist/comm.h"
#include "core/public.h"

struct moe8_dist {
    moe8_comm *comm;
    int expert_parallel;
};

/* The shard of rank `rank` of `size` for config c; fails with a message
 * naming the field when the split is impossible (heads, kv heads, I, F not
 * divisible; fewer experts than ranks under EP). */
moe8_status moe8_dist_shard_of(const moe8_config *c, int rank, int size, int expert_parallel,
                               moe8_dist_shard *out, moe8_error *err);

/* All-gather n_h hashes; the first that differs from rank 0's fails naming
 * it: "rank R: <names[i]> differs from rank 0's". */
moe8_status moe8_dist_same_hashes(moe8_dist *d, const uint64_t *h, int n_h,
                                  const char *const *names, moe8_error *err);

#endif
