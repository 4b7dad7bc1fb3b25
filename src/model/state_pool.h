/*
 * state_pool.h — internal (model/): the recurrent state of the hybrid
 * families' Gated DeltaNet layers (SEMANTICS §7h, §10), a pool of slots
 * sized by bytes (moe8_context_params.state_bytes). A slot holds, for every
 * Gated DeltaNet layer, its conv state [K-1][C] and its f32 recurrent state
 * [NV][dk][dv] (model/gdn.h). A slot is free, a running sequence's (each
 * sequence of a context that is running holds one: seq_slot), or a snapshot:
 * the state at a position that is a multiple of MOE8_GDN_CHUNK, kept with the
 * prefix-cache KV block that ends there (kv_pool.h kv_block.snap), evicted
 * with it, or least recently used first when a sequence needs a slot.
 *
 * Snapshot requests: before a forward the context lists (sequence, position,
 * slot) triples; the Gated DeltaNet layer (attn_gdn.c) cuts the sequence's
 * run at that position and copies its layer's state into the slot (req_hits
 * counts the layers that did).
 *
 * Does not: decide when a state is valid (context.c zeroes it at position 0,
 * refuses what would need an older one, attaches snapshots), compute anything
 * (attn_gdn.c), or know the KV blocks (context.c links the two).
 */
#ifndef MOE8_STATE_POOL_H
#define MOE8_STATE_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "core/public.h"

#define MOE8_STATE_FREE (-1)
/* owner of a snapshot slot: MOE8_STATE_SNAP(block), block = MOE8_STATE_SNAP(owner) */
#define MOE8_STATE_SNAP(x) (-2 - (x))

typedef struct moe8_state_pool {
    int n_slot, n_seq, n_layer; /* slots; sequences of the context; Gated DeltaNet layers */
    size_t conv_floats;        /* (K-1) C per layer */
    size_t ssm_floats;         /* NV dk dv per layer */
    size_t slot_floats;        /* n_layer (conv + ssm), rounded to 16 */
    float *data;               /* [n_slot][slot_floats] */
    int32_t *seq_slot;         /* [n_seq] slot of each sequence, or -1 */
    int32_t *owner;            /* [n_slot] FREE, a sequence (>= 0) or MOE8_STATE_SNAP(block) */
    uint64_t *used;            /* [n_slot] snapshots: last use (LRU) */
    uint64_t clock;
    int32_t n_free, n_snap;
    int32_t n_req, max_req;    /* snapshot requests of the forward being run */
    int32_t *req_seq, *req_pos, *req_slot, *req_hits; /* [max_req] */
    /* since init (moe8_kv_stats, /metrics): sequences attached with a prefix
     * cache on that started from a snapshot / from position 0; snapshots
     * that left the cache (their slot taken, their KV block evicted) */
    uint64_t n_hits, n_misses, n_evicted;
} moe8_state_pool;

/* n_slot slots for n_layer layers of the given state sizes, n_seq sequences,
 * max_req snapshot requests per forward (n_layer 0: nothing allocated, every
 * call below a no-op). */
moe8_status moe8_state_pool_init(moe8_state_pool *p, int n_slot, int n_seq, int n_layer,
                                 size_t conv_floats, size_t ssm_floats, int max_req,
                                 moe8_error *err);
void moe8_state_pool_free(moe8_state_pool *p);
/* Bytes of one slot for these sizes (the unit of state_bytes). */
size_t moe8_state_slot_bytes(int n_layer, size_t conv_floats, size_t ssm_floats);
/* The conv state [K-1][C] and recurrent state [NV][dk][dv] of slot `slot`'s
 * Gated DeltaNet layer `layer` (moe8_fwd_layer.gdn_slot). */
float *moe8_state_slot_conv(const moe8_state_pool *p, int32_t slot, int layer);
float *moe8_state_slot_ssm(const moe8_state_pool *p, int32_t slot, int layer);
/* The same for the slot sequence seq holds (it must hold one). */
float *moe8_state_conv(const moe8_state_pool *p, int32_t seq, int layer);
float *moe8_state_ssm(const moe8_state_pool *p, int32_t seq, int layer);
/* Zero sequence seq's slot (a sequence starting again at position 0). */
void moe8_state_clear(moe8_state_pool *p, int32_t seq);
/* Slot dst = slot src, every layer. */
void moe8_state_slot_copy(moe8_state_pool *p, int32_t dst, int32_t src);
/* Sequence dst's slot = src's (a fork of a sequence with its KV). */
void moe8_state_copy(moe8_state_pool *p, int32_t dst, int32_t src);
/* A free slot marked as owned by `owner`, or -1 (none free). */
int32_t moe8_state_take(moe8_state_pool *p, int32_t owner);
/* Slot back to the free ones. */
void moe8_state_give(moe8_state_pool *p, int32_t slot);
/* A snapshot slot leaving the prefix cache: back to the free ones, counted
 * in n_evicted. */
void moe8_state_evict(moe8_state_pool *p, int32_t slot);
/* The least recently used snapshot other than `keep`, or -1. */
int32_t moe8_state_lru_snapshot(const moe8_state_pool *p, int32_t keep);
/* Bytes of the pool. */
size_t moe8_state_pool_bytes(const moe8_state_pool *p);

#endif
