/*
 * state_pool.h — internal (model/): the recurrent state of the hybrid
 * families' Gated DeltaNet layers (SEMANTICS §7h), per sequence id of a
 * context: one slot per sequence (n_seq_max), each holding, for every
 * Gated DeltaNet layer, its conv state [K-1][C] and its f32 recurrent state
 * [NV][dk][dv] (model/gdn.h). Allocated at context create, zeroed when a
 * sequence starts at position 0 or is truncated to 0.
 *
 * Kept behind these calls so a later pool can be sized by bytes (--state-mb)
 * and hold snapshots at prefix-cache block boundaries; today a sequence's
 * state cannot be rewound, so a hybrid model's prefix cache is off and a
 * truncation to a length other than 0 is refused (context.c).
 */
#ifndef MOE8_STATE_POOL_H
#define MOE8_STATE_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "core/public.h"

typedef struct moe8_state_pool {
    int n_seq, n_layer;        /* slots; Gated DeltaNet layers of each */
    size_t conv_floats;        /* (K-1) C per layer */
    size_t ssm_floats;         /* NV dk dv per layer */
    size_t slot_floats;        /* n_layer (conv + ssm), rounded to 16 */
    float *data;               /* [n_seq][slot_floats] */
} moe8_state_pool;

/* n_seq slots for n_layer layers of the given state sizes (n_layer 0: nothing
 * allocated, every call below a no-op). */
moe8_status moe8_state_pool_init(moe8_state_pool *p, int n_seq, int n_layer, size_t conv_floats,
                                 size_t ssm_floats, moe8_error *err);
void moe8_state_pool_free(moe8_state_pool *p);
/* The conv state [K-1][C] and recurrent state [NV][dk][dv] of sequence seq's
 * Gated DeltaNet layer `slot` (moe8_fwd_layer.gdn_slot). */
float *moe8_state_conv(const moe8_state_pool *p, int32_t seq, int slot);
float *moe8_state_ssm(const moe8_state_pool *p, int32_t seq, int slot);
/* Zero sequence seq's slot (a sequence starting again at position 0). */
void moe8_state_clear(moe8_state_pool *p, int32_t seq);
/* Sequence dst's slot = src's (a fork of a sequence with its KV). */
void moe8_state_copy(moe8_state_pool *p, int32_t dst, int32_t src);
/* Bytes of the pool. */
size_t moe8_state_pool_bytes(const moe8_state_pool *p);

#endif
