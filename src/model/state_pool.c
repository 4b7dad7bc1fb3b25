/*
 * state_pool.c — the per-sequence recurrent state of Gated DeltaNet layers
 * (state_pool.h): one contiguous slot per sequence, [n_layer][conv | ssm].
 *
 * Does not: decide when a state is valid (context.c zeroes it at position 0
 * and refuses what would need an older one) or compute anything (attn_gdn.c).
 */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "model/state_pool.h"

moe8_status moe8_state_pool_init(moe8_state_pool *p, int n_seq, int n_layer, size_t conv_floats,
                                 size_t ssm_floats, moe8_error *err) {
    size_t per, all;
    memset(p, 0, sizeof *p);
    if (n_layer <= 0) return MOE8_OK;
    p->n_seq = n_seq;
    p->n_layer = n_layer;
    p->conv_floats = conv_floats;
    p->ssm_floats = ssm_floats;
    if (moe8_add_size(conv_floats, ssm_floats, &per) || moe8_mul_size(per, (size_t)n_layer, &per) ||
        moe8_add_size(per, 15, &per) || moe8_mul_size(per & ~(size_t)15, (size_t)n_seq, &all) ||
        moe8_mul_size(all, sizeof(float), &all))
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "recurrent state of %d sequences x %d "
                         "layers is too large", n_seq, n_layer);
    p->slot_floats = per & ~(size_t)15;
    if (!(p->data = moe8_alloc_aligned(all)))
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "cannot allocate %zu bytes of recurrent state "
                         "(%d sequences x %d Gated DeltaNet layers)", all, n_seq, n_layer);
    memset(p->data, 0, all);
    return MOE8_OK;
}

void moe8_state_pool_free(moe8_state_pool *p) {
    moe8_free_aligned(p->data);
    memset(p, 0, sizeof *p);
}

float *moe8_state_conv(const moe8_state_pool *p, int32_t seq, int slot) {
    MOE8_ASSERT(seq >= 0 && seq < p->n_seq && slot >= 0 && slot < p->n_layer);
    return p->data + (size_t)seq * p->slot_floats + (size_t)slot * (p->conv_floats + p->ssm_floats);
}

float *moe8_state_ssm(const moe8_state_pool *p, int32_t seq, int slot) {
    return moe8_state_conv(p, seq, slot) + p->conv_floats;
}

void moe8_state_clear(moe8_state_pool *p, int32_t seq) {
    if (p->data) memset(p->data + (size_t)seq * p->slot_floats, 0, p->slot_floats * sizeof(float));
}

void moe8_state_copy(moe8_state_pool *p, int32_t dst, int32_t src) {
    if (p->data && dst != src)
        memcpy(p->data + (size_t)dst * p->slot_floats, p->data + (size_t)src * p->slot_floats,
               p->slot_floats * sizeof(float));
}

size_t moe8_state_pool_bytes(const moe8_state_pool *p) {
    return (size_t)p->n_seq * p->slot_floats * sizeof(float);
}
