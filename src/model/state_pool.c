/*
 * state_pool.c — the slots of Gated DeltaNet state (state_pool.h): one
 * contiguous slot each, [n_layer][conv | ssm], owned by a running sequence,
 * a snapshot or nobody.
 *
 * Does not: decide when a state is valid or which snapshot to evict (context.c
 * asks for the least recently used one and unlinks it from its KV block), or
 * compute anything (attn_gdn.c).
 */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "model/state_pool.h"

size_t moe8_state_slot_bytes(int n_layer, size_t conv_floats, size_t ssm_floats) {
    size_t per;
    if (n_layer <= 0 || moe8_add_size(conv_floats, ssm_floats, &per) ||
        moe8_mul_size(per, (size_t)n_layer, &per) || moe8_add_size(per, 15, &per) ||
        moe8_mul_size(per & ~(size_t)15, sizeof(float), &per))
        return 0;
    return per;
}

moe8_status moe8_state_pool_init(moe8_state_pool *p, int n_slot, int n_seq, int n_layer,
                                 size_t conv_floats, size_t ssm_floats, int max_req,
                                 moe8_error *err) {
    const size_t slot = moe8_state_slot_bytes(n_layer, conv_floats, ssm_floats);
    size_t all;
    memset(p, 0, sizeof *p);
    if (n_layer <= 0) return MOE8_OK;
    p->n_slot = n_slot;
    p->n_seq = n_seq;
    p->n_layer = n_layer;
    p->conv_floats = conv_floats;
    p->ssm_floats = ssm_floats;
    p->max_req = max_req;
    if (!slot || n_slot < 1 || moe8_mul_size(slot, (size_t)n_slot, &all))
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "recurrent state of %d slots x %d "
                         "layers is too large", n_slot, n_layer);
    p->slot_floats = slot / sizeof(float);
    p->data = moe8_alloc_aligned(all);
    p->seq_slot = malloc((size_t)n_seq * sizeof *p->seq_slot);
    p->owner = malloc((size_t)n_slot * sizeof *p->owner);
    p->used = calloc((size_t)n_slot, sizeof *p->used);
    p->req_seq = malloc(((size_t)max_req + 1) * 4 * sizeof(int32_t));
    if (!p->data || !p->seq_slot || !p->owner || !p->used || !p->req_seq) {
        moe8_state_pool_free(p);
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "cannot allocate %zu bytes of recurrent state "
                         "(%d slots x %d Gated DeltaNet layers)", all, n_slot, n_layer);
    }
    p->req_pos = p->req_seq + max_req + 1;
    p->req_slot = p->req_pos + max_req + 1;
    p->req_hits = p->req_slot + max_req + 1;
    memset(p->data, 0, all);
    for (int i = 0; i < n_seq; i++) p->seq_slot[i] = -1;
    for (int i = 0; i < n_slot; i++) p->owner[i] = MOE8_STATE_FREE;
    p->n_free = n_slot;
    return MOE8_OK;
}

void moe8_state_pool_free(moe8_state_pool *p) {
    moe8_free_aligned(p->data);
    free(p->seq_slot);
    free(p->owner);
    free(p->used);
    free(p->req_seq);
    memset(p, 0, sizeof *p);
}

float *moe8_state_slot_conv(const moe8_state_pool *p, int32_t slot, int layer) {
    MOE8_ASSERT(slot >= 0 && slot < p->n_slot && layer >= 0 && layer < p->n_layer);
    return p->data + (size_t)slot * p->slot_floats +
           (size_t)layer * (p->conv_floats + p->ssm_floats);
}

float *moe8_state_slot_ssm(const moe8_state_pool *p, int32_t slot, int layer) {
    return moe8_state_slot_conv(p, slot, layer) + p->conv_floats;
}

float *moe8_state_conv(const moe8_state_pool *p, int32_t seq, int layer) {
    MOE8_ASSERT(seq >= 0 && seq < p->n_seq && p->seq_slot[seq] >= 0);
    return moe8_state_slot_conv(p, p->seq_slot[seq], layer);
}

float *moe8_state_ssm(const moe8_state_pool *p, int32_t seq, int layer) {
    return moe8_state_conv(p, seq, layer) + p->conv_floats;
}

void moe8_state_clear(moe8_state_pool *p, int32_t seq) {
    if (p->data && p->seq_slot[seq] >= 0)
        memset(p->data + (size_t)p->seq_slot[seq] * p->slot_floats, 0,
               p->slot_floats * sizeof(float));
}

void moe8_state_slot_copy(moe8_state_pool *p, int32_t dst, int32_t src) {
    if (p->data && dst != src)
        memcpy(p->data + (size_t)dst * p->slot_floats, p->data + (size_t)src * p->slot_floats,
               p->slot_floats * sizeof(float));
}

void moe8_state_copy(moe8_state_pool *p, int32_t dst, int32_t src) {
    if (p->data) moe8_state_slot_copy(p, p->seq_slot[dst], p->seq_slot[src]);
}

int32_t moe8_state_take(moe8_state_pool *p, int32_t owner) {
    for (int32_t i = 0; p->n_free > 0 && i < p->n_slot; i++)
        if (p->owner[i] == MOE8_STATE_FREE) {
            p->owner[i] = owner;
            p->n_free--;
            if (owner < -1) p->n_snap++;
            return i;
        }
    return -1;
}

void moe8_state_give(moe8_state_pool *p, int32_t slot) {
    MOE8_ASSERT(slot >= 0 && slot < p->n_slot && p->owner[slot] != MOE8_STATE_FREE);
    if (p->owner[slot] < -1) p->n_snap--;
    p->owner[slot] = MOE8_STATE_FREE;
    p->n_free++;
}

void moe8_state_evict(moe8_state_pool *p, int32_t slot) {
    MOE8_ASSERT(slot >= 0 && slot < p->n_slot && p->owner[slot] < -1);
    moe8_state_give(p, slot);
    p->n_evicted++;
}

int32_t moe8_state_lru_snapshot(const moe8_state_pool *p, int32_t keep) {
    int32_t best = -1;
    for (int32_t i = 0; i < p->n_slot; i++)
        if (p->owner[i] < -1 && i != keep && (best < 0 || p->used[i] < p->used[best])) best = i;
    return best;
}

size_t moe8_state_pool_bytes(const moe8_state_pool *p) {
    return (size_t)p->n_slot * p->slot_floats * sizeof(float);
}
