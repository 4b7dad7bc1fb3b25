/*
 * kv_pool.c — the paged KV cache: block allocation, block tables, reference
 * counts and the prefix cache (kv_pool.h has the layout; SEMANTICS §10).
 *
 * Three lists partition the blocks: the free list (ref 0, unregistered), the
 * evictable list (ref 0, registered; LRU order, head evicted first) and the
 * held blocks (ref > 0). A block is taken from the free list first, else
 * the LRU head is evicted. A sequence gives its blocks back last block
 * first, so the start of a prefix — the part most requests share — is the
 * most recently used and the last to go.
 *
 * Two groups (full layers, sliding-window layers; kv_pool.h): both tables of
 * a sequence have the same length; the sliding one has -1 where a block was
 * given back (moe8_kv_slide, or never attached: moe8_kv_attach). A given
 * back block that is registered stays findable on the evictable list, like
 * any other cached block.
 *
 * Does not: touch the K/V values except for the copy-on-write of a shared
 * partial block on truncate.
 */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "model/kv_pool.h"
#include "model/state_pool.h"

/* ---- lists --------------------------------------------------------------------- */

static void lru_unlink(kv_pool *p, int32_t id) {
    kv_block *b = &p->b[id];
    if (b->lru_prev >= 0) p->b[b->lru_prev].lru_next = b->lru_next;
    else p->lru_head = b->lru_next;
    if (b->lru_next >= 0) p->b[b->lru_next].lru_prev = b->lru_prev;
    else p->lru_tail = b->lru_prev;
    b->lru_prev = b->lru_next = -1;
    p->n_cached--;
}

static void lru_push_tail(kv_pool *p, int32_t id) {
    kv_block *b = &p->b[id];
    b->lru_next = -1;
    b->lru_prev = p->lru_tail;
    if (p->lru_tail >= 0) p->b[p->lru_tail].lru_next = id;
    else p->lru_head = id;
    p->lru_tail = id;
    p->n_cached++;
}

static void free_push(kv_pool *p, int32_t id) {
    p->b[id].free_next = p->free_head;
    p->free_head = id;
    p->n_free++;
}

static uint64_t block_hash(const void *ctx, uint32_t id) { return ((const kv_pool *)ctx)->b[id].hash; }

static void unregister(kv_pool *p, int32_t id) {
    kv_block *b = &p->b[id];
    moe8_index_remove(&p->registered, b->hash, (uint32_t)id, p);
    b->registered = 0;
    if (b->snap >= 0) { /* its snapshot goes with it */
        moe8_state_evict(p->state, b->snap);
        b->snap = -1;
    }
}

/* A block for new contents: free list first, else evict the LRU head. */
static int32_t take_block(kv_pool *p) {
    int32_t id;
    if (p->free_head >= 0) {
        id = p->free_head;
        p->free_head = p->b[id].free_next;
        p->n_free--;
    } else {
        MOE8_ASSERT(p->lru_head >= 0);
        id = p->lru_head;
        lru_unlink(p, id);
        unregister(p, id);
    }
    p->b[id].ref = 1;
    p->b[id].gen++;
    p->b[id].on_disk = 0;
    return id;
}

static void drop_ref(kv_pool *p, int32_t id) {
    kv_block *b = &p->b[id];
    MOE8_ASSERT(b->ref > 0);
    if (--b->ref > 0) return;
    if (b->registered) lru_push_tail(p, id);
    else free_push(p, id);
}

/* ---- hashing ------------------------------------------------------------------- */

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static uint64_t chain_hash(uint64_t seed, uint64_t parent, const int32_t *tok) {
    uint64_t h = mix64(seed ^ mix64(parent + 0x9E3779B97F4A7C15ULL));
    for (int i = 0; i < KV_BS; i++) h = mix64(h ^ (uint32_t)tok[i]) + (uint64_t)i;
    return h;
}

typedef struct {
    uint64_t h;
    const int32_t *tok;
    int32_t parent;
    int group;
} block_key;

/* Registered block `id` holds exactly these tokens after this parent (in the
 * generation it had when the block was registered). */
static int block_eq(const void *ctx, uint32_t id, const void *key) {
    const kv_pool *p = ctx;
    const kv_block *b = &p->b[id];
    const block_key *k = key;
    if (b->hash != k->h || b->parent != k->parent || b->group != k->group) return 0;
    if (k->parent >= 0 && b->parent_gen != p->b[k->parent].gen) return 0;
    return !memcmp(p->tokens + (size_t)id * KV_BS, k->tok, KV_BS * sizeof *k->tok);
}

/* Registered block with this hash whose tokens and parent are exactly these. */
static int32_t find(const kv_pool *p, uint64_t h, const int32_t *tok, int32_t parent, int group) {
    block_key k = {h, tok, parent, group};
    return (int32_t)moe8_index_find(&p->registered, h, block_eq, p, &k);
}

/* A sliding block's key: its full twin's hash, salted. */
static uint64_t twin_hash(const kv_pool *p, int32_t twin) {
    return mix64(p->b[twin].hash ^ 0x51D1A6B10C5EEDULL);
}

/* Register block `id` (just filled) after `parent` (group 0; -1: the first),
 * or as the twin of the full block `parent` (group 1). When a registered
 * block holds the same tokens after the same parent already (a twin) and
 * `adopt`, the caller's reference moves to the twin (the same K/V bits, by
 * batch invariance) and `id` goes back; the twin is returned, else `id`. So
 * a sequence that computes blocks again beside their cached twins (a
 * hybrid's match stops at the deepest state snapshot) goes on along the
 * twin's chain: its own later blocks and snapshots join it, and the twin's
 * cached children and their snapshots stay findable. */
static int32_t register_block(kv_pool *p, int32_t id, int32_t parent, int adopt) {
    kv_block *b = &p->b[id];
    const int32_t *tok = p->tokens + (size_t)id * KV_BS;
    uint64_t ph;
    if (b->registered) return id;
    if (parent >= 0 && !p->b[parent].registered) return id; /* its chain is not findable */
    if (b->group && parent < 0) return id;
    ph = parent >= 0 ? p->b[parent].hash : 0;
    block_key k = {b->group ? twin_hash(p, parent) : chain_hash(p->seed, ph, tok), tok, parent,
                   b->group};
    int64_t other = moe8_index_add(&p->registered, k.h, (uint32_t)id, block_eq, p, &k);
    MOE8_ASSERT(other != -2); /* room for every block at init: never grows */
    if (other >= 0) {         /* an identical block is cached already */
        if (!adopt) return id;
        if (p->b[other].ref++ == 0) lru_unlink(p, (int32_t)other);
        drop_ref(p, id);
        return (int32_t)other;
    }
    b->hash = k.h;
    b->parent = parent;
    b->parent_gen = parent >= 0 ? p->b[parent].gen : 0;
    b->registered = 1;
    return id;
}

/* ---- pool ---------------------------------------------------------------------- */

moe8_status moe8_kv_pool_init(kv_pool *p, int32_t n_blocks, int32_t n_seq, int32_t n_ctx,
                              size_t block_bytes, uint64_t seed, int n_group, int32_t window,
                              moe8_error *err) {
    size_t bytes;
    memset(p, 0, sizeof *p);
    MOE8_ASSERT(n_group == 1 || (n_group == 2 && window >= 1));
    p->n_group = n_group;
    p->window = n_group == 2 ? window : 0;
    p->n_blocks = n_blocks;
    p->block_bytes = block_bytes;
    p->n_seq = n_seq;
    p->max_blocks = (n_ctx + KV_BS - 1) / KV_BS;
    p->seed = seed;
    p->prefix_cache = 1;
    if (n_blocks < 1 || moe8_mul_size((size_t)n_blocks, block_bytes, &bytes))
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "kv cache: %d blocks of %zu bytes",
                         n_blocks, block_bytes);
    p->data = moe8_alloc_aligned(bytes);
    p->b = calloc((size_t)n_blocks, sizeof *p->b);
    p->tokens = malloc((size_t)n_blocks * KV_BS * sizeof *p->tokens);
    p->table = malloc((size_t)n_group * n_seq * (size_t)p->max_blocks * sizeof *p->table);
    p->n_held = calloc((size_t)n_group * n_seq, sizeof *p->n_held);
    if (!p->data || !p->b || !p->tokens || !p->table || !p->n_held ||
        moe8_index_init(&p->registered, (size_t)n_blocks, block_hash)) {
        moe8_kv_pool_free(p);
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "cannot allocate the kv cache: %d blocks of "
                         "%d tokens (%zu bytes)", n_blocks, KV_BS, bytes);
    }
    p->free_head = p->lru_head = p->lru_tail = -1;
    for (int32_t i = n_blocks - 1; i >= 0; i--) {
        p->b[i].lru_prev = p->b[i].lru_next = -1;
        p->b[i].snap = -1;
        free_push(p, i);
    }
    return MOE8_OK;
}

void moe8_kv_pool_free(kv_pool *p) {
    moe8_free_aligned(p->data);
    free(p->b);
    free(p->tokens);
    moe8_index_free(&p->registered);
    free(p->table);
    free(p->n_held);
    memset(p, 0, sizeof *p);
}

/* n_held of group g of seq. */
static int32_t *held(const kv_pool *p, int g, int32_t seq) {
    return &p->n_held[(size_t)g * p->n_seq + (size_t)seq];
}

int32_t moe8_kv_blocks_needed(const kv_pool *p, int32_t seq, int32_t n_tokens) {
    int32_t want = (n_tokens + KV_BS - 1) / KV_BS, need = 0;
    for (int g = 0; g < p->n_group; g++)
        need += want > *held(p, g, seq) ? want - *held(p, g, seq) : 0;
    return need;
}

int32_t moe8_kv_held(const kv_pool *p, int g, int32_t seq) {
    const int32_t *t = kv_table(p, g, seq);
    int32_t n = 0;
    for (int32_t i = 0; i < *held(p, g, seq); i++) n += t[i] >= 0;
    return n;
}

int moe8_kv_reserve(kv_pool *p, int32_t seq, int32_t n_tokens) {
    const int32_t want = (n_tokens + KV_BS - 1) / KV_BS;
    MOE8_ASSERT(want <= p->max_blocks);
    if (moe8_kv_blocks_needed(p, seq, n_tokens) > kv_available(p)) return -1;
    for (int g = 0; g < p->n_group; g++) {
        int32_t *t = kv_table(p, g, seq), *n = held(p, g, seq);
        while (*n < want) {
            t[*n] = take_block(p);
            p->b[t[(*n)++]].group = g;
        }
    }
    return 0;
}

int32_t moe8_kv_slide(kv_pool *p, int32_t seq, int32_t next) {
    int32_t *t, n = 0, end;
    if (p->n_group < 2) return 0;
    t = kv_table(p, 1, seq);
    end = kv_window_first(p, next);
    if (end > *held(p, 1, seq)) end = *held(p, 1, seq);
    for (int32_t i = end - 1; i >= 0 && t[i] >= 0; i--) { /* below them all given back */
        drop_ref(p, t[i]);
        t[i] = -1;
        n++;
    }
    return n;
}

/* Group g of seq keeps `keep` blocks; a kept partial last block is made
 * private and unregistered (it will be written again). */
static int truncate_group(kv_pool *p, int g, int32_t seq, int32_t n_tokens) {
    int32_t keep = (n_tokens + KV_BS - 1) / KV_BS, *t = kv_table(p, g, seq), *n = held(p, g, seq);
    while (*n > keep)
        if (t[--*n] >= 0) drop_ref(p, t[*n]);
    if (keep > 0 && n_tokens % KV_BS && t[keep - 1] >= 0) {
        int32_t id = t[keep - 1];
        if (p->b[id].ref > 1) {
            int32_t c;
            if (kv_available(p) < 1) return -1;
            c = take_block(p);
            p->b[c].group = g;
            memcpy(p->data + (size_t)c * p->block_bytes, p->data + (size_t)id * p->block_bytes,
                   p->block_bytes);
            memcpy(p->tokens + (size_t)c * KV_BS, p->tokens + (size_t)id * KV_BS,
                   KV_BS * sizeof(int32_t));
            drop_ref(p, id);
            t[keep - 1] = c;
        } else if (p->b[id].registered) {
            unregister(p, id);
            p->b[id].gen++; /* its cached children (and its twin) no longer follow it */
        }
    }
    return 0;
}

int moe8_kv_truncate(kv_pool *p, int32_t seq, int32_t n_tokens) {
    if (p->n_group > 1 && n_tokens > 0) { /* the window of position n_tokens must be held */
        const int32_t *t = kv_table(p, 1, seq), keep = (n_tokens + KV_BS - 1) / KV_BS;
        for (int32_t i = kv_window_first(p, n_tokens); i < keep && i < *held(p, 1, seq); i++)
            if (t[i] < 0) return -2;
    }
    for (int g = 0; g < p->n_group; g++)
        if (truncate_group(p, g, seq, n_tokens)) return -1;
    return 0;
}

void moe8_kv_commit(kv_pool *p, int32_t seq, int32_t pos0, const int32_t *tokens, int32_t n) {
    int32_t *t = kv_table(p, 0, seq), *ts = p->n_group > 1 ? kv_table(p, 1, seq) : NULL;
    for (int32_t i = 0; i < n; i++) {
        int32_t pos = pos0 + i;
        p->tokens[(size_t)t[pos / KV_BS] * KV_BS + pos % KV_BS] = tokens[i];
        if (ts) p->tokens[(size_t)ts[pos / KV_BS] * KV_BS + pos % KV_BS] = tokens[i];
    }
    if (!p->prefix_cache) return;
    for (int32_t blk = pos0 / KV_BS; blk < (pos0 + n) / KV_BS; blk++) {
        t[blk] = register_block(p, t[blk], blk > 0 ? t[blk - 1] : -1, 1);
        if (ts && ts[blk] >= 0 && p->b[t[blk]].registered)
            ts[blk] = register_block(p, ts[blk], t[blk], 1);
    }
}

static int32_t match_window(const kv_pool *p, int32_t *out, int32_t m);

int32_t moe8_kv_match(const kv_pool *p, const int32_t *tokens, int32_t n, int32_t *out,
                 int32_t max_blocks) {
    int32_t n_match = 0, parent = -1;
    uint64_t h = 0;
    while (n_match < max_blocks && (n_match + 1) * KV_BS <= n) {
        const int32_t *tok = tokens + (size_t)n_match * KV_BS;
        int32_t id;
        h = chain_hash(p->seed, h, tok);
        if ((id = find(p, h, tok, parent, 0)) < 0) break;
        out[n_match++] = parent = id;
    }
    return p->n_group > 1 ? match_window(p, out, n_match) : n_match;
}

/* The sliding twin of full block `twin` when it is cached, else -1. */
static int32_t find_twin(const kv_pool *p, int32_t twin) {
    return find(p, twin_hash(p, twin), p->tokens + (size_t)twin * KV_BS, twin, 1);
}

/* vLLM's SlidingWindowManager.find_longest_cache_hit: from the right, the
 * deepest end m whose blocks [kv_window_first(m * BS), m) all have a cached
 * twin (each block looked up once). Resuming at a shorter end recomputes
 * every layer of the positions after it: the sliding K/V of a position
 * needs the hidden state the layers below compute, so there is nothing
 * cheaper than recomputing the sliding part alone. */
static int32_t match_window(const kv_pool *p, int32_t *out, int32_t m) {
    int32_t *sw = out + p->max_blocks;
    int32_t j = m - 1;
    while (m > 0 && j >= kv_window_first(p, m * KV_BS)) {
        if ((sw[j] = find_twin(p, out[j])) >= 0) {
            j--;
        } else {
            m = j; /* an end at j needs block j - 1 down: start over below */
            j = m - 1;
        }
    }
    for (int32_t i = 0; i < m && i < kv_window_first(p, m * KV_BS); i++) sw[i] = -1;
    return m;
}

void moe8_kv_attach(kv_pool *p, int32_t seq, const int32_t *blocks, int32_t n) {
    MOE8_ASSERT(n <= p->max_blocks);
    for (int g = 0; g < p->n_group; g++) {
        int32_t *t = kv_table(p, g, seq);
        const int32_t *from = blocks + (size_t)g * p->max_blocks;
        MOE8_ASSERT(*held(p, g, seq) == 0);
        for (int32_t i = 0; i < n; i++) {
            t[i] = g > 0 && i < kv_window_first(p, n * KV_BS) ? -1 : from[i];
            if (t[i] >= 0 && p->b[t[i]].ref++ == 0) lru_unlink(p, t[i]);
        }
        *held(p, g, seq) = n;
    }
}

int32_t moe8_kv_drop_cached(kv_pool *p) {
    int32_t n = 0;
    while (p->lru_head >= 0) {
        const int32_t id = p->lru_head;
        lru_unlink(p, id);
        unregister(p, id);
        free_push(p, id);
        n++;
    }
    return n;
}

int32_t moe8_kv_extend(kv_pool *p, const int32_t *tokens, int32_t n, int32_t *out, int32_t m,
                       int32_t max_blocks, const kv_source *src) {
    int32_t k = m, go = 1;
    MOE8_ASSERT(p->n_group == 1); /* the disk tier keeps one group (context.c alloc_kv) */
    if (!p->prefix_cache) return m;
    if (max_blocks > n / KV_BS) max_blocks = n / KV_BS;
    for (int32_t i = 0; i < m; i++) /* the match stays while blocks are taken */
        if (p->b[out[i]].ref++ == 0) lru_unlink(p, out[i]);
    while (go && k < max_blocks) {
        int32_t want = max_blocks - k, got, kept = 1;
        if (want > kv_available(p)) want = kv_available(p);
        if (want <= 0) break;
        const int32_t a = src->avail(src->user, k);
        if (a <= 0) break;
        if (want > a) want = a;
        for (int32_t i = 0; i < want; i++) { /* taken blocks are held: none evicts another */
            out[k + i] = take_block(p);
            src->data[i] = p->data + (size_t)out[k + i] * p->block_bytes;
        }
        got = src->fill(src->user, k, want, src->data, &kept);
        go = got == want && kept;
        for (int32_t i = 0; i < want; i++) {
            const int32_t id = out[k + i];
            if (i < got) {
                memcpy(p->tokens + (size_t)id * KV_BS, tokens + (size_t)(k + i) * KV_BS,
                       KV_BS * sizeof *tokens);
                register_block(p, id, i > 0 ? out[k + i - 1] : k > 0 ? out[k - 1] : -1, 0);
                if (!p->b[id].registered) got = i, go = 0; /* cannot happen: recompute */
            }
            if (i < got) p->b[id].on_disk = kept;
            else drop_ref(p, id); /* unregistered: back to the free list */
        }
        k += got;
    }
    for (int32_t i = k - 1; i >= 0; i--) drop_ref(p, out[i]); /* last first: block 0 the newest */
    return k;
}
