/*
 * dist.h — internal: the moe8_dist handle of moe8.h (a communicator plus the
 * parallel mode) and the pieces the model loader and the forward use: the
 * shard of one rank (SEMANTICS §8) and the collective check at the end of a model
 * load (agree on every rank's outcome, then compare folder fingerprints).
 */
#ifndef MOE8_DIST_H
#define MOE8_DIST_H

#include "dist/comm.h"
#include "moe8.h"

struct moe8_dist {
    moe8_comm *comm;
    int expert_parallel;
};

/* The shard of rank `rank` of `size` for config c; fails with a message
 * naming the field when the split is impossible (heads, kv heads, I, F not
 * divisible; fewer experts than ranks under EP). */
moe8_status moe8_dist_shard_of(const moe8_config *c, int rank, int size, int expert_parallel,
                               moe8_dist_shard *out, moe8_error *err);

/* Collective end of moe8_model_load with a dist of more than one rank: `m` is
 * the loaded model (NULL when loading failed, `local` then says why). Agrees
 * on the outcome, then checks the split and compares the folder fingerprint.
 * Fills m->shard. */
moe8_status moe8_dist_load_check(moe8_dist *d, moe8_model *m, moe8_status local,
                                 moe8_error *err);

#endif
