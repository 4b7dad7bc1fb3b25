/*
 * test_sched_hybrid.c — the scheduler over a hybrid model (qwen3_next: Gated
 * DeltaNet layers with per-sequence recurrent state; SEMANTICS §10):
 *   - batch invariance: random add / step / cancel schedules (prompt cuts at
 *     every budget, small KV pools that preempt and evict, small state pools,
 *     thread counts, shared prefixes) give every request the tokens and the
 *     logits of every token, bit for bit, of the same request alone (a fresh
 *     context of one sequence without the prefix cache);
 *   - prefix caching with state snapshots: a request resumed from a snapshot
 *     = the same request from scratch, bit for bit, with the cached count the
 *     rule gives (the deepest multiple of 64 at most n_prompt - 2 inside the
 *     shared prefix), across snapshot eviction (a state pool of one spare
 *     slot, LRU) and KV block eviction, and after preemption;
 *   - the state pool's accounting (running slots back on finish and cancel;
 *     the snapshot hits, misses and evictions moe8_kv_stats counts, which
 *     /metrics shows, after known sequences) and its errors: a state_bytes below one slot names --state-mb and the
 *     bytes one takes; a full pool refuses a batch cleanly.
 * The reference is the engine itself run alone: the forward's own accuracy
 * against a double-precision reference is test_qwen3_next's.
 */
#include "test.h"
#include "fixture_model.h"
#include "fixture_hybrid.h"

#define NCTX 320
#define MAXG 24
#define MAXP 260

static moe8_model *g_model;
static int g_vocab;

typedef struct {
    int32_t prompt[MAXP];
    int n_prompt, max_tokens;
    moe8_sampler_params sp;
} spec;

typedef struct {
    int64_t id;
    int32_t tok[MAXG];
    uint64_t lhash[MAXG + 1]; /* FNV-1a of the logits of each token (and a FINISH's) */
    int n_tok, n_finish, cancelled, n_cached;
    moe8_finish finish;
} result;

typedef struct {
    int n_seq, n_threads, prefix_cache, kv_blocks, max_batch, state_slots; /* 0: defaults */
} cfg;

static uint64_t fnv(const float *x, int n) {
    const unsigned char *b = (const unsigned char *)x;
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < (size_t)n * sizeof(float); i++) h = (h ^ b[i]) * 1099511628211ULL;
    return h;
}

static size_t slot_bytes(void) {
    moe8_context_params p = moe8_context_params_default();
    moe8_context *x = NULL;
    moe8_kv_stats st;
    p.n_ctx = 64;
    CHECK(moe8_context_create(g_model, &p, &x, NULL) == MOE8_OK);
    moe8_context_kv_stats(x, &st);
    moe8_context_free(x);
    return st.state_slot_bytes;
}

static moe8_context *ctx_of(const cfg *c) {
    moe8_context_params p = moe8_context_params_default();
    moe8_context *x = NULL;
    moe8_error e;
    p.n_ctx = NCTX;
    p.n_seq_max = c->n_seq;
    p.n_threads = c->n_threads;
    p.prefix_cache = c->prefix_cache;
    p.kv_type = MOE8_DT_F32;
    p.kv_bytes = (uint64_t)c->kv_blocks * moe8_model_kv_block_bytes(g_model, MOE8_DT_F32);
    p.state_bytes = (uint64_t)c->state_slots * slot_bytes();
    if (moe8_context_create(g_model, &p, &x, &e) != MOE8_OK) {
        fprintf(stderr, "context: %s\n", e.message);
        exit(2);
    }
    return x;
}

static moe8_sched *sched_of(moe8_context *x, const cfg *c) {
    moe8_sched_params sp = moe8_sched_params_default();
    moe8_sched *s = NULL;
    moe8_error e;
    int32_t eos = -1; /* none: requests end at max_tokens or a full context */
    sp.max_batch_tokens = c->max_batch;
    sp.eos_ids = &eos, sp.n_eos_ids = 1;
    CHECKF(moe8_sched_create(x, &sp, &s, &e) == MOE8_OK, "sched: %s", e.message);
    return s;
}

static void collect(const moe8_event *ev, int32_t n) {
    for (int32_t k = 0; k < n; k++) {
        const moe8_event *e = &ev[k];
        result *r = e->user;
        if (e->type == MOE8_EVENT_TOKEN) {
            if (r->n_tok < MAXG) {
                r->tok[r->n_tok] = e->token;
                r->lhash[r->n_tok] = e->logits ? fnv(e->logits, g_vocab) : 0;
            }
            r->n_tok++;
        } else if (e->type == MOE8_EVENT_FINISH) {
            r->n_finish++;
            r->finish = e->finish;
            r->n_cached = e->n_cached;
            if (e->logits) r->lhash[MAXG] = fnv(e->logits, g_vocab);
        }
    }
}

static int64_t add(moe8_sched *s, const spec *q, result *r) {
    moe8_request rq = moe8_request_default();
    moe8_error e;
    int64_t id = -1;
    rq.prompt = q->prompt;
    rq.n_prompt = q->n_prompt;
    rq.max_tokens = q->max_tokens;
    rq.sampling = q->sp;
    rq.user = r;
    CHECKF(moe8_sched_add(s, &rq, &id, &e) == MOE8_OK, "add: %s", e.message);
    r->id = id;
    return id;
}

static void step(moe8_sched *s) {
    const moe8_event *ev;
    int32_t n;
    moe8_error e;
    CHECKF(moe8_sched_step(s, &ev, &n, &e) == MOE8_OK, "step: %s", e.message);
    collect(ev, n);
}

static void drain(moe8_sched *s) {
    for (int i = 0; moe8_sched_pending(s) > 0 && i < 5000; i++) step(s);
    CHECKF(moe8_sched_pending(s) == 0, "%d requests still pending", moe8_sched_pending(s));
}

static int same(const result *a, const result *b) {
    const int n = a->n_tok < MAXG ? a->n_tok : MAXG;
    return a->n_tok == b->n_tok && a->finish == b->finish &&
           !memcmp(a->tok, b->tok, (size_t)n * sizeof a->tok[0]) &&
           !memcmp(a->lhash, b->lhash, (size_t)n * sizeof a->lhash[0]) &&
           a->lhash[MAXG] == b->lhash[MAXG];
}

/* Nothing held: no running slot, no used block. */
static void check_idle(moe8_sched *s, const char *what) {
    moe8_sched_stats st;
    moe8_sched_get_stats(s, &st);
    CHECKF(st.kv.n_used == 0 && st.kv.state_running == 0 && st.kv.state_slots > 0 &&
               st.kv.state_snapshots <= st.kv.state_slots && st.n_running == 0,
           "%s: %d blocks used, %d state slots running, %d snapshots of %d slots", what,
           st.kv.n_used, st.kv.state_running, st.kv.state_snapshots, st.kv.state_slots);
}

/* The state pool's counters (moe8_kv_stats, /metrics) after a known sequence. */
static void check_snap_counts(const moe8_sched_stats *st, int64_t hits, int64_t misses,
                              int64_t evictions, int32_t snapshots, const char *what) {
    CHECKF(st->kv.state_snap_hits == hits && st->kv.state_snap_misses == misses &&
               st->kv.state_snap_evictions == evictions && st->kv.state_snapshots == snapshots,
           "%s: snapshot hits %lld misses %lld evictions %lld, %d kept; expected %lld %lld %lld, %d",
           what, (long long)st->kv.state_snap_hits, (long long)st->kv.state_snap_misses,
           (long long)st->kv.state_snap_evictions, st->kv.state_snapshots, (long long)hits,
           (long long)misses, (long long)evictions, snapshots);
}

static void run_alone(const spec *q, result *r) {
    const cfg c = {1, 1, 0, 0, 0, 0};
    moe8_context *x = ctx_of(&c);
    moe8_sched *s = sched_of(x, &c);
    memset(r, 0, sizeof *r);
    add(s, q, r);
    drain(s);
    CHECKF(r->n_finish == 1 && r->n_cached == 0, "alone: %d finishes, %d cached", r->n_finish,
           r->n_cached);
    check_idle(s, "alone");
    moe8_sched_free(s);
    moe8_context_free(x);
}

static int rnd(test_rng *g, int n) { return (int)(test_rng_u64(g) % (uint64_t)n); }

static void spec_of(spec *q, const int32_t *base, int shared, int n_prompt, int max_tokens,
                    uint64_t seed) {
    test_rng g = {seed};
    memset(q, 0, sizeof *q);
    q->sp = moe8_sampler_params_default();
    q->n_prompt = n_prompt;
    q->max_tokens = max_tokens;
    for (int i = 0; i < n_prompt; i++)
        q->prompt[i] = i < shared ? base[i] : (int32_t)(test_rng_u64(&g) % (uint64_t)g_vocab);
}

/* ---- snapshots ------------------------------------------------------------------------ */

/* b after a (sharing `shared` tokens) in one scheduler: b's cached count is
 * the rule's, its output b's alone. */
static void snap_pair(const cfg *c, const spec *a, const spec *b, int shared, const char *what) {
    int want = shared < b->n_prompt - 2 ? shared : b->n_prompt - 2;
    result ra, rb, ref;
    moe8_context *x = ctx_of(c);
    moe8_sched *s = sched_of(x, c);
    moe8_sched_stats st;
    want = want < 0 ? 0 : want / 64 * 64;
    memset(&ra, 0, sizeof ra), memset(&rb, 0, sizeof rb);
    add(s, a, &ra);
    drain(s);
    add(s, b, &rb);
    drain(s);
    run_alone(b, &ref);
    CHECKF(same(&rb, &ref), "%s: the resumed request differs from it alone", what);
    CHECKF(rb.n_cached == want, "%s: %d prompt tokens from the cache, expected %d", what,
           rb.n_cached, want);
    run_alone(a, &ref);
    CHECKF(same(&ra, &ref), "%s: the first request differs from it alone", what);
    moe8_sched_get_stats(s, &st);
    CHECKF(st.prefix_hits == want, "%s: prefix_hits %lld", what, (long long)st.prefix_hits);
    CHECKF(st.kv.state_snap_hits == (c->prefix_cache && want > 0) &&
               st.kv.state_snap_misses == (c->prefix_cache ? 2 - (want > 0) : 0) &&
               st.kv.state_snap_evictions == 0,
           "%s: snapshot hits %lld, misses %lld, evictions %lld", what,
           (long long)st.kv.state_snap_hits, (long long)st.kv.state_snap_misses,
           (long long)st.kv.state_snap_evictions);
    check_idle(s, what);
    moe8_sched_free(s);
    moe8_context_free(x);
}

static void test_snapshots(void) {
    int32_t base[MAXP];
    spec a, b;
    cfg c = {2, 2, 1, 0, 0, 0};
    for (int i = 0; i < MAXP; i++) base[i] = (i * 37 + 11) % g_vocab;
    /* shared 150: the snapshot at 128; greedy and sampled */
    spec_of(&a, base, 150, 170, 6, 1);
    spec_of(&b, base, 150, 200, 8, 2);
    snap_pair(&c, &a, &b, 150, "shared 150");
    b.sp.temperature = 0.8f, b.sp.seed = 7;
    snap_pair(&c, &a, &b, 150, "shared 150 sampled");
    /* the same prompt again (n > 1 choices): the snapshot at 192 of 200 */
    spec_of(&a, base, 200, 200, 5, 3);
    spec_of(&b, base, 200, 200, 9, 3);
    snap_pair(&c, &a, &b, 200, "same prompt");
    /* 194 tokens: 192 would leave 2 — allowed; 193: only 128 (one token left is refused) */
    spec_of(&a, base, 194, 194, 3, 4);
    snap_pair(&c, &a, &a, 194, "194 tokens");
    spec_of(&a, base, 193, 193, 3, 4);
    snap_pair(&c, &a, &a, 193, "193 tokens");
    /* shared 63: no snapshot below it */
    spec_of(&a, base, 63, 100, 3, 5);
    spec_of(&b, base, 63, 90, 3, 6);
    snap_pair(&c, &a, &b, 63, "shared 63");
    /* budgets that cut the prompts (at 64, 128, ...), one thread */
    c.max_batch = 70, c.n_threads = 1;
    spec_of(&a, base, 150, 170, 6, 1);
    spec_of(&b, base, 150, 200, 8, 2);
    snap_pair(&c, &a, &b, 150, "max_batch 70");
    /* prefix cache off: nothing cached */
    c.prefix_cache = 0, c.max_batch = 0;
    snap_pair(&c, &a, &b, 0, "prefix cache off");
}

/* A state pool of n_seq + 1 slots keeps one snapshot (the last taken, LRU):
 * b (sharing a's first 150) finds a's 64 or 128 only while it is there. */
static void test_snapshot_lru(void) {
    int32_t base[MAXP];
    spec a, b, other;
    result ra, rb, ro, ref;
    const cfg c = {1, 1, 1, 0, 0, 2};
    moe8_context *x = ctx_of(&c);
    moe8_sched *s = sched_of(x, &c);
    moe8_sched_stats st;
    for (int i = 0; i < MAXP; i++) base[i] = (i * 53 + 5) % g_vocab;
    spec_of(&a, base, 150, 150, 4, 11);
    spec_of(&b, base, 150, 180, 4, 12);
    spec_of(&other, base, 0, 100, 4, 13);
    memset(&ra, 0, sizeof ra), memset(&rb, 0, sizeof rb), memset(&ro, 0, sizeof ro);
    add(s, &a, &ra);
    drain(s);
    moe8_sched_get_stats(s, &st);
    CHECKF(st.kv.state_slots == 2 && st.kv.state_snapshots == 1, "lru: %d slots, %d snapshots",
           st.kv.state_slots, st.kv.state_snapshots);
    add(s, &b, &rb); /* a's snapshot at 128 (the one kept) */
    drain(s);
    run_alone(&b, &ref);
    CHECKF(same(&rb, &ref) && rb.n_cached == 128, "lru: b from a's snapshot: cached %d",
           rb.n_cached);
    add(s, &other, &ro); /* its snapshot at 64 evicts b's latest */
    drain(s);
    memset(&rb, 0, sizeof rb);
    add(s, &b, &rb); /* nothing of b's left */
    drain(s);
    CHECKF(same(&rb, &ref) && rb.n_cached == 0, "lru: b after eviction: cached %d", rb.n_cached);
    memset(&rb, 0, sizeof rb);
    add(s, &b, &rb); /* b's own 128, kept with b's blocks (a's cached ones gave way) */
    drain(s);
    CHECKF(same(&rb, &ref) && rb.n_cached == 128, "lru: b again: cached %d", rb.n_cached);
    check_idle(s, "lru");
    /* a, other and b again from 0, b from a's 128 and then from its own; a's
     * 128 evicted by the other's 64, which b's 128 evicts (b's 64 finds no
     * slot); b's 128 is kept with b's KV blocks, which took the place of a's
     * cached blocks of the same tokens */
    moe8_sched_get_stats(s, &st);
    check_snap_counts(&st, 2, 3, 2, 1, "lru");
    moe8_sched_free(s);
    moe8_context_free(x);
}

/* A KV pool of 14 blocks: a (150 tokens, 10 blocks, snapshots at 64 and 128)
 * ends; another of 200 tokens takes 13 blocks, evicting a's (tail first):
 * its snapshots go with them, b (sharing a's 150) is computed from scratch,
 * the same; the pool holds only the other's snapshots (64, 128, 192). */
static void test_block_eviction(void) {
    int32_t base[MAXP];
    spec a, b, other;
    result ra, rb, ro, ref;
    const cfg c = {1, 1, 1, 14, 0, 0};
    moe8_context *x = ctx_of(&c);
    moe8_sched *s = sched_of(x, &c);
    moe8_sched_stats st;
    for (int i = 0; i < MAXP; i++) base[i] = (i * 29 + 1) % g_vocab;
    spec_of(&a, base, 150, 150, 4, 21);
    spec_of(&b, base, 150, 170, 4, 22);
    spec_of(&other, base, 0, 200, 4, 23);
    memset(&ra, 0, sizeof ra), memset(&rb, 0, sizeof rb), memset(&ro, 0, sizeof ro);
    add(s, &a, &ra);
    drain(s);
    moe8_sched_get_stats(s, &st);
    CHECKF(st.kv.state_snapshots == 2, "eviction: %d snapshots after a", st.kv.state_snapshots);
    add(s, &other, &ro);
    drain(s);
    moe8_sched_get_stats(s, &st);
    CHECKF(st.kv.state_snapshots == 3, "eviction: %d snapshots after the other",
           st.kv.state_snapshots);
    add(s, &b, &rb);
    drain(s);
    run_alone(&b, &ref);
    CHECKF(same(&rb, &ref) && rb.n_cached == 0, "eviction: b cached %d", rb.n_cached);
    check_idle(s, "eviction");
    /* three from 0; a's two snapshots evicted with their blocks, then the
     * other's three with theirs (b takes 11 of the 14 blocks) */
    moe8_sched_get_stats(s, &st);
    check_snap_counts(&st, 0, 3, 5, 2, "eviction");
    moe8_sched_free(s);
    moe8_context_free(x);
}

/* Prefixes that come back (issue 41's lost snapshots): three prefixes of
 * 150 tokens, each used by a pair of requests (a fresh suffix each), the
 * pairs in the order P0 P1 P2 P0 P1 P2, in a state pool of one spare slot
 * (each first of a pair evicts the last snapshot) with a KV pool ample or
 * tight. The second of each pair resumes from the first's snapshot at 128,
 * also in the second round, where the first recomputes blocks that are
 * still cached from the first round without their snapshots (it goes on
 * along those blocks, and its snapshot stays with them); every request gives
 * its tokens alone. */
static void test_snapshot_recache(void) {
    static const int kv[2] = {64, 30};
    int32_t base[3][MAXP];
    spec q;
    result r, ref;
    for (int p = 0; p < 3; p++)
        for (int i = 0; i < MAXP; i++) base[p][i] = (i * (41 + 6 * p) + 7 * p + 2) % g_vocab;
    for (int k = 0; k < 2; k++) {
        const cfg c = {1, 1, 1, kv[k], 0, 2};
        moe8_context *x = ctx_of(&c);
        moe8_sched *s = sched_of(x, &c);
        for (int j = 0; j < 12; j++) {
            const int p = j / 2 % 3, second = j % 2;
            spec_of(&q, base[p], 150, 170 + 10 * second, 3, 300 + (uint64_t)j);
            memset(&r, 0, sizeof r);
            add(s, &q, &r);
            drain(s);
            run_alone(&q, &ref);
            CHECKF(same(&r, &ref), "recache kv %d request %d: differs from it alone", kv[k], j);
            CHECKF(!second || r.n_cached == 128, "recache kv %d request %d (prefix %d, second "
                   "of its pair): %d cached, expected 128", kv[k], j, p, r.n_cached);
        }
        check_idle(s, "recache");
        moe8_sched_free(s);
        moe8_context_free(x);
    }
    /* a (200 tokens: snapshots at 64, 128, 192), another prompt whose two
     * snapshots evict a's 64 and 128, a again (from its 192), then b sharing
     * a's first 150: computed from 0 beside a's cached blocks, its 64 and 128
     * evicting the other's; then a again and b again: a's chain and its 192
     * are still found (b went on along a's blocks, not beside them), and b's
     * 128 with them */
    {
        const cfg c = {1, 1, 1, 64, 0, 4};
        moe8_context *x = ctx_of(&c);
        moe8_sched *s = sched_of(x, &c);
        spec a, b, other;
        result ra, rb, ro;
        spec_of(&a, base[0], 200, 200, 3, 310);
        spec_of(&b, base[0], 150, 170, 3, 311);
        spec_of(&other, base[1], 0, 130, 3, 312);
        memset(&ra, 0, sizeof ra), memset(&rb, 0, sizeof rb), memset(&ro, 0, sizeof ro);
        add(s, &a, &ra);
        drain(s);
        add(s, &other, &ro);
        drain(s);
        memset(&ra, 0, sizeof ra);
        add(s, &a, &ra);
        drain(s);
        CHECKF(ra.n_cached == 192, "recache a: cached %d", ra.n_cached);
        add(s, &b, &rb);
        drain(s);
        run_alone(&b, &ref);
        CHECKF(same(&rb, &ref) && rb.n_cached == 0, "recache b: cached %d", rb.n_cached);
        memset(&ra, 0, sizeof ra);
        add(s, &a, &ra);
        drain(s);
        run_alone(&a, &ref);
        CHECKF(same(&ra, &ref) && ra.n_cached == 192, "recache a again: cached %d", ra.n_cached);
        memset(&rb, 0, sizeof rb);
        add(s, &b, &rb);
        drain(s);
        run_alone(&b, &ref);
        CHECKF(same(&rb, &ref) && rb.n_cached == 128, "recache b again: cached %d", rb.n_cached);
        check_idle(s, "recache a b");
        moe8_sched_free(s);
        moe8_context_free(x);
    }
}

/* ---- random schedules ------------------------------------------------------------------ */

static struct { int64_t req, cached, preempted, cancelled; } g_cov;

static void test_random_one(uint64_t seed) {
    static const int batches[4] = {66, 100, 160, 0};
    test_rng g = {seed * 0x9E3779B97F4A7C15ULL + 99};
    int32_t base[2][MAXP];
    const int n_req = 4 + rnd(&g, 6);
    spec *q = calloc((size_t)n_req, sizeof *q);
    result *mix = calloc((size_t)n_req, sizeof *mix), *ref = calloc((size_t)n_req, sizeof *ref);
    cfg c = {2 + rnd(&g, 3), 1 + rnd(&g, 2), rnd(&g, 4) != 0, 0, batches[rnd(&g, 4)], 0};
    int next = 0, steps = 0;
    moe8_sched_stats st;
    if (rnd(&g, 2)) c.kv_blocks = 16 + rnd(&g, 8); /* a request needs up to 15: preempts */
    if (rnd(&g, 2)) c.state_slots = 1 + rnd(&g, c.n_seq + 2); /* fewer slots than sequences */
    for (int b = 0; b < 2; b++)
        for (int i = 0; i < MAXP; i++) base[b][i] = (int32_t)(test_rng_u64(&g) % (uint64_t)g_vocab);
    for (int i = 0; i < n_req; i++) {
        const int n = 1 + rnd(&g, 220);
        int shared = rnd(&g, 3) ? rnd(&g, n + 1) : 0;
        if (rnd(&g, 2)) shared = n - rnd(&g, 40 < n ? 40 : n); /* most of it */
        spec_of(&q[i], base[rnd(&g, 2)], shared, n, rnd(&g, MAXG + 1), test_rng_u64(&g));
        if (rnd(&g, 3) == 0) q[i].sp.temperature = 0.9f, q[i].sp.seed = test_rng_u64(&g);
        run_alone(&q[i], &ref[i]);
    }
    moe8_context *x = ctx_of(&c);
    moe8_sched *s = sched_of(x, &c);
    while ((next < n_req || moe8_sched_pending(s) > 0) && steps < 5000) {
        const int a = rnd(&g, 10);
        if (next < n_req && a < 4) {
            add(s, &q[next], &mix[next]);
            next++;
        } else if (next > 0 && a == 4 && rnd(&g, 6) == 0) {
            const int j = rnd(&g, next);
            if (moe8_sched_cancel(s, mix[j].id) == MOE8_OK) mix[j].cancelled = 1;
        } else {
            step(s);
            steps++;
        }
    }
    CHECKF(moe8_sched_pending(s) == 0, "seed %llu: %d pending", (unsigned long long)seed,
           moe8_sched_pending(s));
    for (int i = 0; i < n_req; i++) {
        result *m = &mix[i];
        const int n = m->n_tok < MAXG ? m->n_tok : MAXG;
        CHECKF(m->n_finish == 1, "seed %llu request %d: %d finishes", (unsigned long long)seed, i,
               m->n_finish);
        if (m->cancelled && m->finish == MOE8_FINISH_CANCELLED) {
            CHECKF(m->n_tok <= ref[i].n_tok && !memcmp(m->tok, ref[i].tok, (size_t)n * 4) &&
                       !memcmp(m->lhash, ref[i].lhash, (size_t)n * 8),
                   "seed %llu request %d: cancelled after tokens that are not its alone run's",
                   (unsigned long long)seed, i);
            g_cov.cancelled++;
        } else {
            CHECKF(same(m, &ref[i]), "seed %llu request %d (prompt %d, %d cached, max_tokens "
                   "%d, n_seq %d, threads %d, prefix %d, kv %d, batch %d, state %d): %d tokens vs "
                   "%d alone", (unsigned long long)seed, i, q[i].n_prompt, m->n_cached,
                   q[i].max_tokens, c.n_seq, c.n_threads, c.prefix_cache, c.kv_blocks,
                   c.max_batch, c.state_slots, m->n_tok, ref[i].n_tok);
        }
        CHECKF(m->n_cached % 64 == 0 && (m->n_cached == 0 || m->n_cached <= q[i].n_prompt - 2),
               "seed %llu request %d: %d cached of %d", (unsigned long long)seed, i, m->n_cached,
               q[i].n_prompt);
        g_cov.cached += m->n_cached;
    }
    check_idle(s, "random");
    moe8_sched_get_stats(s, &st);
    g_cov.req += n_req;
    g_cov.preempted += st.n_preempted;
    moe8_sched_free(s);
    moe8_context_free(x);
    free(q);
    free(mix);
    free(ref);
}

static void test_random(void) {
    for (uint64_t seed = 1; seed <= 24; seed++) test_random_one(seed);
    printf("random: %lld requests, %lld prompt tokens from snapshots, %lld preempted, %lld "
           "cancelled\n", (long long)g_cov.req, (long long)g_cov.cached,
           (long long)g_cov.preempted, (long long)g_cov.cancelled);
    CHECK(g_cov.cached > 0 && g_cov.preempted > 0 && g_cov.cancelled > 0);
}

/* ---- preemption ------------------------------------------------------------------------ */

/* Three requests of 100 + 20 tokens in a pool of 14 blocks (two prompts
 * take 7 each, 8 with their tokens): the last started is preempted, recomputed (prompt chunked from its
 * snapshot or from scratch, its generated tokens one at a time), the same. */
static void test_preemption(void) {
    int32_t base[MAXP];
    spec q[3];
    result mix[3], ref;
    const cfg c = {3, 2, 1, 14, 0, 0};
    moe8_context *x = ctx_of(&c);
    moe8_sched *s = sched_of(x, &c);
    moe8_sched_stats st;
    for (int i = 0; i < MAXP; i++) base[i] = (i * 7 + 3) % g_vocab;
    for (int i = 0; i < 3; i++) {
        spec_of(&q[i], base, 70, 100, 20, 40 + (uint64_t)i);
        memset(&mix[i], 0, sizeof mix[i]);
        add(s, &q[i], &mix[i]);
    }
    drain(s);
    moe8_sched_get_stats(s, &st);
    CHECKF(st.n_preempted > 0, "preemption: none happened");
    for (int i = 0; i < 3; i++) {
        run_alone(&q[i], &ref);
        CHECKF(same(&mix[i], &ref), "preemption: request %d differs from it alone", i);
    }
    check_idle(s, "preemption");
    moe8_sched_free(s);
    moe8_context_free(x);
}

/* ---- errors ----------------------------------------------------------------------------- */

static void test_errors(void) {
    moe8_context_params p = moe8_context_params_default();
    moe8_context *x = NULL;
    moe8_error e;
    moe8_kv_stats st;
    char want[64];
    const size_t one = slot_bytes();
    const int32_t ids[2] = {1, 2}, pos[2] = {0, 0}, seq[2] = {0, 1};
    moe8_batch b = {2, ids, pos, seq, NULL};
    p.n_ctx = 64;
    p.state_bytes = one - 1;
    CHECK(moe8_context_create(g_model, &p, &x, &e) == MOE8_ERR_INVALID_ARG && !x);
    snprintf(want, sizeof want, "one takes %zu bytes", one);
    CHECKF(strstr(e.message, "--state-mb") && strstr(e.message, want), "error: %s", e.message);
    /* default: n_seq_max slots and the snapshots' share (at least 4) */
    p.state_bytes = 0, p.n_seq_max = 3;
    CHECK(moe8_context_create(g_model, &p, &x, &e) == MOE8_OK);
    moe8_context_kv_stats(x, &st);
    CHECKF(st.state_slots >= 3 + 4 && moe8_context_get_params(x).state_bytes ==
               (uint64_t)st.state_slots * one, "default pool: %d slots", st.state_slots);
    moe8_context_free(x);
    /* one slot, two sequences starting in one batch: refused, nothing changed */
    p.n_seq_max = 2, p.state_bytes = one;
    CHECK(moe8_context_create(g_model, &p, &x, &e) == MOE8_OK);
    CHECK(moe8_decode(x, &b, &e) == MOE8_ERR_INVALID_ARG && strstr(e.message, "--state-mb"));
    CHECK(moe8_context_seq_len(x, 0) == 0 && moe8_context_seq_len(x, 1) == 0);
    moe8_context_kv_stats(x, &st);
    CHECK(st.n_used == 0 && st.state_running == 0);
    b.n_tokens = 1;
    CHECKF(moe8_decode(x, &b, &e) == MOE8_OK, "one sequence: %s", e.message);
    moe8_context_kv_stats(x, &st);
    CHECK(st.state_running == 1);
    CHECK(moe8_context_seq_truncate(x, 0, 0, &e) == MOE8_OK);
    moe8_context_kv_stats(x, &st);
    CHECK(st.state_running == 0);
    moe8_context_free(x);
    /* a hybrid prompt is cut at 64: one longer than a budget below 66 is refused */
    {
        const cfg c = {1, 1, 1, 0, 65, 0};
        moe8_sched *s;
        moe8_request rq = moe8_request_default();
        int32_t prompt[66] = {0};
        int64_t id;
        x = ctx_of(&c);
        s = sched_of(x, &c);
        rq.prompt = prompt, rq.n_prompt = 66;
        CHECK(moe8_sched_add(s, &rq, &id, &e) == MOE8_ERR_INVALID_ARG &&
              strstr(e.message, "max_batch_tokens >= 66"));
        rq.n_prompt = 65;
        CHECK(moe8_sched_add(s, &rq, &id, &e) == MOE8_OK);
        moe8_sched_free(s);
        moe8_context_free(x);
    }
}

/* `test_sched_hybrid --write-model DIR [slice]`: a larger W8A8 qwen3_next
 * fixture for `moe8 bench sched` (the prefix-cache TTFT target of issue 41;
 * no qwen3_next make-model preset on this branch): H 512, 8 layers of which 2
 * full attention, linear 4 key / 8 value heads of 64, 16 experts top-4,
 * vocab 2048; or (slice) Qwen3-Next-80B-A3B's layer shapes (below). */
static int write_bench_model(const char *dir, int slice) {
    fx_opts o = fx_hybrid_opts(FX_QWEN3_NEXT);
    o.quant = 1, o.seed = 4200;
    o.hidden = 512, o.n_layers = 8, o.n_heads = 8, o.n_kv_heads = 2, o.head_dim = 64;
    o.lin_k_heads = 4, o.lin_v_heads = 8, o.lin_k_dim = 64, o.lin_v_dim = 64;
    o.n_experts = 16, o.top_k = 4, o.moe_inter = 256, o.shared_inter = 256, o.inter = 1024;
    o.vocab = 2048;
    if (slice) { /* Qwen3-Next-80B-A3B's layer shapes, 4 layers, 32 of its 512 experts */
        o.hidden = 2048, o.n_layers = 4, o.n_heads = 16, o.n_kv_heads = 2, o.head_dim = 256;
        o.lin_k_heads = 16, o.lin_v_heads = 32, o.lin_k_dim = 128, o.lin_v_dim = 128;
        o.n_experts = 32, o.top_k = 10, o.moe_inter = 512, o.shared_inter = 512, o.inter = 5120;
    }
    return fx_write_model(dir, &o) != 0;
}

int main(int argc, char **argv) {
    fx_opts o = fx_hybrid_opts(FX_QWEN3_NEXT);
    const char *dir = test_tmpdir("sched_hybrid");
    if (argc >= 3 && !strcmp(argv[1], "--write-model"))
        return write_bench_model(argv[2], argc == 4 && !strcmp(argv[3], "slice"));
    o.quant = 1;
    o.seed = 4100;
    if (fx_write_model(dir, &o) != 0) return 2;
    g_model = test_load_model(dir);
    g_vocab = (int)o.vocab;
    test_errors();
    test_snapshots();
    test_snapshot_lru();
    test_block_eviction();
    test_snapshot_recache();
    test_preemption();
    test_random();
    moe8_model_free(g_model);
    return test_summary();
}
