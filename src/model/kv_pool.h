/*
 * kv_pool.h — internal: the paged KV cache of a context (SEMANTICS §10).
 *
 * The cache is a pool of fixed-size blocks shared by every sequence of the
 * context. A block holds MOE8_KV_BLOCK_TOKENS consecutive positions of one
 * sequence for every layer of one group:
 *     data[block][layer of the group][2 (k, v)][n_kv][MOE8_KV_BLOCK_TOKENS][D]
 * (F32, F16 or BF16). Each sequence has a block table per group (its blocks
 * in position order); position p of sequence s lives in block
 * table[g][s][p / BS], slot p % BS. One group (n_group 1) holds every layer.
 * Models with sliding-window layers beside full ones (gpt_oss) have two, as
 * vLLM's hybrid allocator: group 0 the full layers, group 1 the sliding ones
 * (blocks sized for the larger group; both draw on the one pool). A sliding
 * table gives back every block wholly left of the window of the next
 * position to compute (moe8_kv_slide: its entry becomes -1), so a sequence
 * holds at most ~window + one block + its chunk of sliding K/V.
 *
 * Prefix cache: a full block may be registered under the hash of every token
 * id from position 0 to its end (chained: hash(parent hash, its tokens)).
 * Lookups verify exactly — the block's own tokens and its parent block (id
 * and generation) — so a hash collision can never return another prefix's
 * K/V. A registered block is immutable. Blocks are reference-counted; a
 * block nobody holds stays in the cache (least-recently-used order) until
 * the pool needs room, then it is evicted (unregistered, generation bumped).
 * A sliding block is registered as the twin of the full block of the same
 * positions (its key: that block's hash salted, verified by its id and
 * generation), so a prefix is found through the full chain, then shortened
 * to the deepest end whose last window - 1 positions' sliding blocks are
 * all still cached (moe8_kv_match).
 * A hybrid model's registered block may carry a snapshot of the recurrent
 * state at its end (state_pool.h); it goes back to the state pool when the
 * block is unregistered. A sequence that fills a block beside a registered
 * twin (same tokens, same parent) takes the twin instead (its own block goes
 * back), so its chain goes on along the twin's.
 *
 * Does not: compute K/V (forward.c writes and reads through the tables),
 * schedule (sched.c decides who gets blocks), or lock (one context, one
 * thread).
 */
#ifndef MOE8_KV_POOL_H
#define MOE8_KV_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "core/index.h"
#include "core/public.h"

#define KV_BS MOE8_KV_BLOCK_TOKENS

typedef struct {
    int32_t ref;            /* sequences holding it */
    uint32_t gen;           /* bumped each time the block is taken for new contents */
    int32_t parent;         /* registered: previous block of its chain (-1: first) */
    uint32_t parent_gen;    /* gen of that parent when registered */
    uint64_t hash;          /* registered: chained hash up to its end */
    int registered;
    int32_t lru_prev, lru_next; /* ref 0 and registered: the evictable list */
    int32_t free_next;      /* on the free list (ref 0, not registered) */
    int32_t snap;           /* hybrids: state_pool slot of the recurrent state at its end, or
                             * -1; only on a registered block; given back when it leaves */
    int on_disk;            /* its contents were queued for or loaded from the disk tier
                             * (kv_disk.h); cleared when it is taken for new contents */
    int group;              /* the layer group it was taken for (0 full, 1 sliding); a
                             * sliding block's `parent` is its twin in group 0 */
} kv_block;

typedef struct kv_pool {
    int32_t n_blocks;
    size_t block_bytes;     /* n_layer * 2 * n_kv * BS * D * element size */
    unsigned char *data;    /* [n_blocks][block_bytes] */
    kv_block *b;            /* [n_blocks] */
    int32_t *tokens;        /* [n_blocks][BS] token ids written in each block */
    int32_t free_head, n_free;
    int32_t lru_head, lru_tail, n_cached; /* head: least recently used */
    moe8_index registered;  /* the registered blocks by chained hash (core/index.h) */
    int32_t n_seq, max_blocks; /* max_blocks = ceil(n_ctx / BS) */
    int n_group;            /* 1, or 2: full layers, then sliding-window ones */
    int32_t window;         /* n_group 2: positions a sliding layer reads (its own included) */
    int32_t *table;         /* [n_group][n_seq][max_blocks]; sliding: -1 where given back */
    int32_t *n_held;        /* [n_group][n_seq] entries in each table (-1 ones included) */
    int prefix_cache;       /* register full blocks after each decode */
    uint64_t seed;          /* mixed into every hash (the model) */
    struct moe8_state_pool *state; /* hybrids: where kv_block.snap slots go back, or NULL */
} kv_pool;

/* n_group 2 with window >= 1: the sliding group beside the full one. */
moe8_status moe8_kv_pool_init(kv_pool *p, int32_t n_blocks, int32_t n_seq, int32_t n_ctx,
                              size_t block_bytes, uint64_t seed, int n_group, int32_t window,
                              moe8_error *err);
void moe8_kv_pool_free(kv_pool *p);

/* Blocks that can be handed out now: free ones plus evictable cached ones. */
static inline int32_t kv_available(const kv_pool *p) { return p->n_free + p->n_cached; }
/* Blocks held by at least one sequence. */
static inline int32_t kv_used(const kv_pool *p) { return p->n_blocks - p->n_free - p->n_cached; }

/* Table of group g of sequence seq. */
static inline int32_t *kv_table(const kv_pool *p, int g, int32_t seq) {
    return p->table + ((size_t)g * p->n_seq + (size_t)seq) * p->max_blocks;
}

/* Blocks sequence `seq` needs on top of those it holds to reach n_tokens
 * (every group). */
int32_t moe8_kv_blocks_needed(const kv_pool *p, int32_t seq, int32_t n_tokens);
/* Blocks sequence `seq` holds in group g (given-back entries not counted). */
int32_t moe8_kv_held(const kv_pool *p, int g, int32_t seq);
/* The sliding group: give back the blocks of seq wholly left of the window
 * of position next (positions < next - window + 1); how many. */
int32_t moe8_kv_slide(kv_pool *p, int32_t seq, int32_t next);
/* The first sliding block a sequence resuming at position `next` reads. */
static inline int32_t kv_window_first(const kv_pool *p, int32_t next) {
    const int32_t lo = next - p->window + 1;
    return lo > 0 ? lo / KV_BS : 0;
}
/* Give `seq` blocks up to n_tokens positions; 0, or -1 (nothing taken) when
 * the pool has too few. */
int moe8_kv_reserve(kv_pool *p, int32_t seq, int32_t n_tokens);
/* Keep only the blocks covering n_tokens positions (0 releases all). A kept
 * last block that is partial and shared or registered is first copied to a
 * private block (copy-on-write); -1 when no block is free for that copy; -2
 * (nothing changed) when the sliding blocks position n_tokens reads were
 * given back. */
int moe8_kv_truncate(kv_pool *p, int32_t seq, int32_t n_tokens);

/* Record tokens[0..n) at positions pos0.. of `seq` (its blocks reserved), then
 * register the blocks they filled when prefix caching is on (a block with a
 * registered twin is swapped for the twin in seq's table). */
void moe8_kv_commit(kv_pool *p, int32_t seq, int32_t pos0, const int32_t *tokens, int32_t n);

/* Longest chain of registered blocks matching tokens[0..n) from position 0,
 * at most max_blocks of them: their ids in out[], count m returned. Two
 * groups: out has room for 2 * p->max_blocks; the sliding blocks a sequence
 * resuming at m * BS reads go to out[p->max_blocks + i] (i in
 * [kv_window_first(m * BS), m); -1 below), and m is shortened to the deepest
 * end whose sliding blocks are all cached. Takes no reference. */
int32_t moe8_kv_match(const kv_pool *p, const int32_t *tokens, int32_t n, int32_t *out,
                 int32_t max_blocks);
/* Put matched blocks (moe8_kv_match's out, n of them) at the start of the
 * empty sequence `seq` (a reference each; they leave the evictable list). */
void moe8_kv_attach(kv_pool *p, int32_t seq, const int32_t *blocks, int32_t n);

/* Empty the prefix cache: every registered block nobody holds goes back to
 * the free list (snapshots with them). Returns how many. */
int32_t moe8_kv_drop_cached(kv_pool *p);
/* Where moe8_kv_extend loads blocks from (the disk tier, kv_disk.h): avail
 * says how many blocks from block b on one read can give (0: none), then
 * fill puts blocks b..b+n-1 (n <= that) into data[i][block_bytes] and
 * returns how many from the first it could (*kept = 0: they are not
 * stored there any more). data is the caller's [max_blocks] scratch. */
typedef struct {
    int32_t (*avail)(void *user, int32_t b);
    int32_t (*fill)(void *user, int32_t b, int32_t n, void *const *data, int *kept);
    void *user;
    void **data;
} kv_source;
/* Extend the match out[0..m) of tokens[0..n) (moe8_kv_match's) with blocks
 * src loads, each into a block of the pool (free, else the least recently
 * used cached block not in the match), registered, on the evictable list
 * with the match (its first block most recently used). Stops where src has
 * no block or a bad one, at max_blocks, or when the pool has no block to
 * give. New count returned. */
int32_t moe8_kv_extend(kv_pool *p, const int32_t *tokens, int32_t n, int32_t *out, int32_t m,
                       int32_t max_blocks, const kv_source *src);

/* Block of position `pos` of `seq` (reserved) in group 0. */
static inline int32_t kv_block_of(const kv_pool *p, int32_t seq, int32_t pos) {
    return p->table[(size_t)seq * p->max_blocks + pos / KV_BS];
}

#endif
