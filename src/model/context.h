/*
 * context.h — internal: what the scheduler (sched/) uses of a context beyond
 * moe8.h: its model, its paged KV pool and its recurrent-state pool, through
 * calls on the context (the pools' layouts, model/kv_pool.h and
 * model/state_pool.h, stay inside model/; SEMANTICS §10).
 */
#ifndef MOE8_CONTEXT_H
#define MOE8_CONTEXT_H

#include <stdint.h>

#include "core/public.h"

moe8_model *moe8_context_model(const moe8_context *ctx);
/* The model's process group (NULL: one process); *rank and *size filled. */
moe8_dist *moe8_context_group(const moe8_context *ctx, int *rank, int *size);

/* Blocks in the pool, and the most one sequence can hold (n_ctx / block). */
int32_t moe8_context_kv_blocks(const moe8_context *ctx);
int32_t moe8_context_kv_seq_blocks(const moe8_context *ctx);
/* Blocks the pool can give now (free, or cached and held by nobody). */
int32_t moe8_context_kv_available(const moe8_context *ctx);
/* Entries of sequence seq's block table (of each group: they grow together). */
int32_t moe8_context_kv_held(const moe8_context *ctx, int32_t seq);
/* Layer groups of the pool (kv_pool.h): 1, or 2 when sliding-window layers
 * keep only their window (a position then takes a block of each group). */
int moe8_context_kv_groups(const moe8_context *ctx);
/* Blocks sequence seq holds in group g (given-back sliding ones not counted). */
int32_t moe8_context_kv_held_group(const moe8_context *ctx, int32_t seq, int g);
/* Blocks a sequence of n_tokens positions holds at least while computing its
 * last (every group). */
int32_t moe8_context_kv_blocks_for(const moe8_context *ctx, int32_t n_tokens);
/* Blocks for positions [0, n_tokens) of seq, taken from the pool; 0 on success. */
int moe8_context_kv_reserve(moe8_context *ctx, int32_t seq, int32_t n_tokens);

/* The prefix cache (0 blocks when it is off): the longest chain of registered
 * blocks matching tokens[0..n) from position 0, at most
 * moe8_context_kv_seq_blocks of them, into out[] (room for groups x
 * moe8_context_kv_seq_blocks: the sliding group's after the full one's,
 * kv_pool.h moe8_kv_match); takes no reference. */
int32_t moe8_context_prefix_match(const moe8_context *ctx, const int32_t *tokens, int32_t n,
                                  int32_t *out);
/* The disk tier (prompt_cache_dir; no-op without): extend the match
 * out[0..m) of tokens[0..n) with the blocks after it that load and verify
 * from disk, into the pool as cached blocks (kv_pool.h moe8_kv_extend); the
 * new count. */
int32_t moe8_context_prefix_load(moe8_context *ctx, const int32_t *tokens, int32_t n, int32_t *out,
                                 int32_t m);
/* The context's disk tier, or NULL (tests reach kv_disk.h through it). */
struct moe8_kv_disk *moe8_context_disk(const moe8_context *ctx);
/* How many of blocks[0..n) nobody holds (attaching them takes them from the
 * blocks the pool can give). */
int32_t moe8_context_kv_unheld(const moe8_context *ctx, const int32_t *blocks, int32_t n);
/* Put prefix-cache blocks at the start of the empty sequence seq (its length
 * becomes n * MOE8_KV_BLOCK_TOKENS). Hybrid models: seq also takes a
 * recurrent-state slot (a free one, else the least recently used snapshot's),
 * restored from the snapshot of blocks[n - 1] when n > 0 (the prefix match
 * returns only such chains); -1 (nothing changed) when no slot can be had. */
int moe8_context_seq_attach(moe8_context *ctx, int32_t seq, const int32_t *blocks, int32_t n);

/* Hybrid models (state_pool.h; SEMANTICS §10): recurrent-state slots in all
 * (0: not a hybrid), and those a starting sequence can take now (free, or
 * holding a snapshot). */
int32_t moe8_context_state_slots(const moe8_context *ctx);
int32_t moe8_context_state_available(const moe8_context *ctx);
/* Ask the next moe8_decode to keep the state of seq at position pos (a
 * multiple of MOE8_GDN_CHUNK inside a run of that batch that starts at one)
 * as a snapshot of the prefix-cache block ending there; ignored for other
 * models, without the prefix cache, or when the pool has no slot to spare.
 * Requests for one sequence come in position order. */
void moe8_context_snapshot_at(moe8_context *ctx, int32_t seq, int32_t pos);
/* Idle: when no sequence holds a KV block, empty the prefix cache and give
 * the KV pool's pages back (madvise DONTNEED: they come back zeroed when
 * touched, which free blocks allow). The bytes given back, 0 when a
 * sequence holds blocks. */
size_t moe8_context_sleep(moe8_context *ctx);

#endif
