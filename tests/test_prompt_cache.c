/*
 * test_prompt_cache.c — the prompt cache's disk tier (SEMANTICS §10b;
 * src/model/kv_disk.c): a restart (a second context opened after the first
 * was freed) loads the blocks the first wrote and gives bit-identical tokens
 * (greedy and seeded; Qwen3-MoE and DeepSeek-V3's MLA; f16 and f32 KV);
 * every corruption of a run file (a byte of a block's data or ids: the
 * blocks before it are used; of the version, of the fingerprint, of the KV
 * type, of the TP layout; truncation; a file of another KV type or TP
 * layout under its own key) is rejected and recomputed with the same
 * tokens; runs written apart and a prompt that leaves a run midway; two contexts sharing a directory; the
 * size bound removes the least recently used files; a full or read-only
 * directory stops writing, not serving; a killed writer's temporaries are
 * removed (and version 1's files); a hybrid (Qwen3-Next) resumes from
 * the recurrent-state snapshot stored with its blocks, bit-identical, and a
 * flipped byte of it is rejected and recomputed; batch invariance with the tier on; moe8 generate twice (two
 * processes, then two at once) and moe8 prompt-cache ls|verify|clear.
 *
 * The reference of every output is the same request run with the tier off:
 * the scheduler's batch invariance (test_sched.c) makes that exact.
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"
#include "fixture_model.h"
#include "fixture_hybrid.h"
#include "model/context.h"
#include "model/kv_disk.h"

#define NCTX 256
#define MAXG 12
#define MAXR 8

static moe8_model *g_model[2]; /* Qwen3-MoE (W8A8), DeepSeek-V3 (MLA) */

typedef struct {
    int32_t prompt[200];
    int n_prompt;
    int seeded;                /* temperature 0.8, seed 7 (else greedy) */
    int32_t tok[MAXG];
    int n_tok, n_cached;
} req;

typedef struct {
    moe8_dtype kv;
    const char *dir;           /* NULL: the tier off */
    uint64_t bytes;
    int n_seq, kv_blocks;      /* kv_blocks 0: the default pool */
} cfg;

static moe8_context *open_ctx(moe8_model *m, const cfg *c) {
    moe8_context_params p = moe8_context_params_default();
    moe8_context *x = NULL;
    moe8_error e;
    p.n_ctx = NCTX;
    p.n_seq_max = c->n_seq ? c->n_seq : 1;
    p.n_threads = 1;
    p.kv_type = c->kv;
    p.prompt_cache_dir = c->dir;
    p.prompt_cache_bytes = c->bytes;
    p.kv_bytes = (uint64_t)c->kv_blocks * moe8_model_kv_block_bytes(m, c->kv);
    if (moe8_context_create(m, &p, &x, &e) != MOE8_OK) {
        fprintf(stderr, "context: %s\n", e.message);
        exit(2);
    }
    return x;
}

/* Run every request on x (added at once) to its end. */
static void run_on(moe8_context *x, req *r, int n) {
    moe8_sched *s = NULL;
    moe8_error e;
    CHECK(moe8_sched_create(x, NULL, &s, &e) == MOE8_OK);
    for (int i = 0; i < n; i++) {
        moe8_request q = moe8_request_default();
        int64_t id;
        q.prompt = r[i].prompt;
        q.n_prompt = r[i].n_prompt;
        q.max_tokens = MAXG;
        q.ignore_eos = 1;
        if (r[i].seeded) {
            q.sampling.temperature = 0.8f;
            q.sampling.seed = 7;
        }
        q.user = &r[i];
        r[i].n_tok = 0;
        r[i].n_cached = -1;
        CHECK(moe8_sched_add(s, &q, &id, &e) == MOE8_OK);
    }
    for (int step = 0; moe8_sched_pending(s) > 0 && step < 10000; step++) {
        const moe8_event *ev;
        int32_t n_ev;
        CHECK(moe8_sched_step(s, &ev, &n_ev, &e) == MOE8_OK);
        for (int32_t i = 0; i < n_ev; i++) {
            req *q = ev[i].user;
            if (ev[i].type == MOE8_EVENT_TOKEN && q->n_tok < MAXG) q->tok[q->n_tok++] = ev[i].token;
            if (ev[i].type == MOE8_EVENT_FINISH) q->n_cached = ev[i].n_cached;
        }
    }
    moe8_sched_free(s);
}

/* A context of c, the requests run, its writer drained: its disk counters. */
static moe8_prompt_cache_stats run(moe8_model *m, const cfg *c, req *r, int n) {
    moe8_context *x = open_ctx(m, c);
    moe8_kv_stats kv;
    run_on(x, r, n);
    if (moe8_context_disk(x)) moe8_kvd_flush(moe8_context_disk(x));
    moe8_context_kv_stats(x, &kv);
    moe8_context_free(x);
    return kv.disk;
}

static void make_prompt(req *r, int n, uint64_t seed, int seeded) {
    test_rng g = {seed};
    memset(r, 0, sizeof *r);
    r->n_prompt = n;
    r->seeded = seeded;
    for (int i = 0; i < n; i++) r->prompt[i] = (int32_t)(1 + test_rng_u64(&g) % 250);
}

static int same_tokens(const req *a, const req *b) {
    return a->n_tok == b->n_tok && !memcmp(a->tok, b->tok, (size_t)a->n_tok * sizeof *a->tok);
}

/* The references: each request alone, the tier off. */
static void reference(moe8_model *m, moe8_dtype kv, const req *r, req *ref, int n) {
    const cfg c = {kv, NULL, 0, 1, 0};
    for (int i = 0; i < n; i++) {
        ref[i] = r[i];
        run(m, &c, &ref[i], 1);
        CHECK(ref[i].n_tok == MAXG);
    }
}

/* Full blocks a prompt of n tokens can take from a cache (its last token is computed). */
static int cacheable(int n) { return (n - 1) / MOE8_KV_BLOCK_TOKENS; }

static const char *fresh_dir(const char *name) {
    static char dirs[4][4096];
    static int k;
    char *d = dirs[k++ % 4];
    snprintf(d, 4096, "%s", test_tmpdir(name));
    return d;
}

/* ---- the directory's files ------------------------------------------------------------ */

typedef struct {
    char name[64][48];
    int32_t n_tokens[64], n_blocks[64];
    uint64_t bytes[64], total;
    int n, n_bad;
} listing;

static void list_cb(void *user, const moe8_prompt_cache_file *f) {
    listing *l = user;
    if (l->n < 64) {
        snprintf(l->name[l->n], sizeof l->name[0], "%s", f->name);
        l->n_tokens[l->n] = f->n_tokens;
        l->n_blocks[l->n] = f->n_blocks;
        l->bytes[l->n++] = f->bytes;
    }
    l->total += f->bytes;
    l->n_bad += f->bad != NULL;
}

static listing list_dir(const char *dir, int verify) {
    listing l;
    uint64_t bad = 0;
    memset(&l, 0, sizeof l);
    CHECK(moe8_prompt_cache_list(dir, verify, list_cb, &l, &bad, NULL) == MOE8_OK);
    CHECK(bad == (uint64_t)l.n_bad);
    return l;
}

static int count_entries(const char *dir, const char *needle) {
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "ls -a '%s' | grep -c -- '%s' > /dev/null", dir, needle);
    return system(cmd) == 0;
}

/* ---- restart reuse ------------------------------------------------------------------------ */

static void test_restart(void) {
    static const moe8_dtype kvs[2] = {MOE8_DT_F16, MOE8_DT_F32};
    for (int f = 0; f < 2; f++)
        for (int k = 0; k < 2; k++) {
            req r[2], ref[2], warm[2];
            const char *dir = fresh_dir("pc_restart");
            const cfg c = {kvs[k], dir, 0, 2, 0};
            make_prompt(&r[0], 100, 11 + (uint64_t)f, 0);
            r[1] = r[0];
            r[1].seeded = 1;
            reference(g_model[f], kvs[k], r, ref, 2);
            /* cold: computes, writes */
            moe8_prompt_cache_stats st = run(g_model[f], &c, r, 2);
            CHECKF(same_tokens(&r[0], &ref[0]) && same_tokens(&r[1], &ref[1]),
                   "family %d kv %d: cold run differs", f, k);
            CHECKF(st.hits == 0 && st.written_blocks == (uint64_t)cacheable(100) && st.rejected == 0,
                   "family %d kv %d: cold: %llu hits, %llu written", f, k,
                   (unsigned long long)st.hits, (unsigned long long)st.written_blocks);
            /* restart: a new context loads them */
            warm[0] = r[0], warm[1] = r[1];
            st = run(g_model[f], &c, warm, 2);
            CHECKF(same_tokens(&warm[0], &ref[0]) && same_tokens(&warm[1], &ref[1]),
                   "family %d kv %d: the restarted run differs", f, k);
            CHECKF(st.hits == (uint64_t)cacheable(100) && st.rejected == 0 && st.written_blocks == 0,
                   "family %d kv %d: warm: %llu hits", f, k, (unsigned long long)st.hits);
            CHECK(warm[0].n_cached == cacheable(100) * 16 && warm[1].n_cached == cacheable(100) * 16);
            CHECK(list_dir(dir, 1).n_bad == 0);
        }
}

/* ---- corruption -------------------------------------------------------------------------- */

enum { C_DATA, C_IDS, C_TRUNC, C_VERSION, C_FP, C_KVTYPE, C_TP, C_N };
static const char *const c_name[C_N] = {"data byte", "token id", "truncation", "version",
                                        "fingerprint", "kv type", "tp layout"};

/* Flip a byte of the run file at path: of block 2's data or ids, or of a header field. */
static void corrupt(const char *path, int kind) {
    const int fd = open(path, O_RDWR);
    struct stat sb;
    moe8_kvd_head h;
    off_t at = 0;
    unsigned char b;
    CHECK(fd >= 0 && fstat(fd, &sb) == 0 && pread(fd, &h, sizeof h, 0) == (ssize_t)sizeof h);
    CHECK(h.first == 0 && h.n_blocks > 2);
    switch (kind) {
    case C_DATA: at = (off_t)(h.data_off + 2 * h.block_bytes + 7); break;
    case C_IDS:
        at = (off_t)(sizeof h + (size_t)h.n_blocks * sizeof(moe8_kvd_ent) + 4 * (2 * 16 + 5));
        break;
    case C_VERSION: at = (off_t)offsetof(moe8_kvd_head, version); break;
    case C_FP: at = (off_t)offsetof(moe8_kvd_head, fp) + 3; break;
    case C_KVTYPE: at = (off_t)offsetof(moe8_kvd_head, kv_type); break;
    case C_TP: at = (off_t)offsetof(moe8_kvd_head, tp_size); break;
    default: break;
    }
    if (kind == C_TRUNC) {
        CHECK(ftruncate(fd, sb.st_size - 100) == 0);
    } else {
        CHECK(pread(fd, &b, 1, at) == 1);
        b ^= 0x10;
        CHECK(pwrite(fd, &b, 1, at) == 1);
    }
    close(fd);
}

/* The path of the one run file of dir. */
static const char *only_file(const char *dir) {
    static char path[4200];
    listing l = list_dir(dir, 0);
    CHECKF(l.n == 1, "%d run files, not 1", l.n);
    if (l.n < 1) return NULL;
    snprintf(path, sizeof path, "%s/%s", dir, l.name[0]);
    return path;
}

static void test_corruption(void) {
    req r, ref;
    make_prompt(&r, 90, 21, 1);
    reference(g_model[0], MOE8_DT_F16, &r, &ref, 1);
    for (int kind = 0; kind < C_N; kind++) {
        const char *dir = fresh_dir("pc_corrupt");
        const cfg c = {MOE8_DT_F16, dir, 0, 1, 0};
        /* a block's data or ids: the blocks before it are used; the header: none */
        const int good = kind == C_DATA || kind == C_IDS ? 2 : 0;
        req w = r;
        run(g_model[0], &c, &w, 1);
        const char *path = only_file(dir); /* blocks 0..5 in one run */
        if (!path) continue;
        corrupt(path, kind);
        w = r;
        moe8_prompt_cache_stats st = run(g_model[0], &c, &w, 1);
        CHECKF(same_tokens(&w, &ref), "%s: tokens differ", c_name[kind]);
        CHECKF(st.rejected == 1 && st.hits == (uint64_t)good && w.n_cached == 16 * good,
               "%s: %llu rejected, %llu hits, %d cached", c_name[kind],
               (unsigned long long)st.rejected, (unsigned long long)st.hits, w.n_cached);
        CHECKF(access(path, F_OK) != 0 || list_dir(dir, 1).n_bad == 0, "%s: not removed",
               c_name[kind]);
        /* the run was written again whole (the good blocks too, their file gone), with the
         * block its generated tokens filled (96..111): a third run loads all */
        listing l = list_dir(dir, 1);
        CHECKF(l.n_bad == 0 && l.n == 1 && l.n_tokens[0] == (90 + MAXG - 1) / 16 * 16,
               "%s: files", c_name[kind]);
        w = r;
        st = run(g_model[0], &c, &w, 1);
        CHECKF(same_tokens(&w, &ref) && st.hits == (uint64_t)cacheable(90) && st.rejected == 0,
               "%s: after rewrite %llu hits", c_name[kind], (unsigned long long)st.hits);
    }
}

/* Blocks k..nb-1 of tok that d loads into got[i]: how many. */
static int32_t load(moe8_kv_disk *d, const moe8_kvd_key *keys, const int32_t *tok, int32_t k,
                    int32_t nb, unsigned char (*got)[256]) {
    void *p[4] = {got[0], got[1], got[2], got[3]};
    int kept = 1;
    int32_t m = moe8_kvd_open_run(d, keys, tok, k, nb);
    CHECK(m <= 4);
    return m > 0 ? moe8_kvd_read_run(d, m, p, &kept) : 0;
}

/* A file of another KV type or TP layout (its own key) is not found under
 * this one's key, and renamed to it, is rejected. */
static void test_foreign_layout(void) {
    const char *dir = fresh_dir("pc_foreign");
    moe8_kvd_fp a, b;
    moe8_kv_disk *da = NULL, *db = NULL;
    int32_t tok[64];
    moe8_kvd_key ka[4], kb[4];
    unsigned char data[3][256], got[4][256];
    const void *pd[3] = {data[0], data[1], data[2]};
    char na[40], nb[40], pa[4200], pb[4200];
    moe8_prompt_cache_stats st;
    memset(&a, 0, sizeof a);
    a.model_fp = 42;
    snprintf(a.isa, sizeof a.isa, "ref");
    a.kv_type = MOE8_DT_F16;
    a.tp_size = 1;
    a.block_bytes = sizeof data[0];
    for (int i = 0; i < 64; i++) tok[i] = i * 3 + 1;
    for (size_t i = 0; i < sizeof data; i++) data[i / 256][i % 256] = (unsigned char)(i * 7 + i / 251);
    for (int variant = 0; variant < 3; variant++) {
        b = a;
        if (variant == 0) b.kv_type = MOE8_DT_F32;
        if (variant == 1) b.tp_rank = 1, b.tp_size = 2;
        if (variant == 2) b.model_fp = 43; /* another model */
        CHECK(moe8_kvd_open(dir, 0, &a, &da, NULL) == MOE8_OK);
        CHECK(moe8_kvd_open(dir, 0, &b, &db, NULL) == MOE8_OK);
        CHECK(moe8_kvd_save(da, tok, 0, 1, pd, NULL) == 1);
        moe8_kvd_flush(da);
        moe8_kvd_keys(da, tok, 1, ka);
        moe8_kvd_keys(db, tok, 1, kb);
        moe8_kvd_use_now(da);
        moe8_kvd_use_now(db);
        CHECK(load(da, ka, tok, 0, 1, got) == 1 && !memcmp(got[0], data[0], 256));
        CHECK(load(db, kb, tok, 0, 1, got) == 0); /* another key: no file */
        moe8_kvd_name(ka[0], na);
        moe8_kvd_name(kb[0], nb);
        snprintf(pa, sizeof pa, "%s/%s", dir, na);
        snprintf(pb, sizeof pb, "%s/%s", dir, nb);
        CHECK(rename(pa, pb) == 0);
        CHECK(load(db, kb, tok, 0, 1, got) == 0); /* under its key: rejected */
        CHECK(access(pb, F_OK) != 0);             /* and removed */
        moe8_kvd_stats(db, &st);
        CHECK(st.rejected == 1 && st.misses == 1 && st.hits == 0);
        moe8_kvd_close(da);
        moe8_kvd_close(db);
    }
    /* runs: blocks 0..1 written together, then 2 after them; a prompt that
     * goes another way in block 1 takes block 0 only */
    CHECK(moe8_kvd_open(dir, 0, &a, &da, NULL) == MOE8_OK);
    CHECK(moe8_kvd_save(da, tok, 0, 2, pd, NULL) == 2);
    CHECK(moe8_kvd_save(da, tok, 2, 1, pd + 2, NULL) == 1);
    moe8_kvd_flush(da);
    CHECK(list_dir(dir, 1).n == 2 && list_dir(dir, 1).n_bad == 0);
    moe8_kvd_keys(da, tok, 4, ka);
    moe8_kvd_use_now(da);
    memset(got, 0, sizeof got);
    CHECK(load(da, ka, tok, 0, 4, got) == 2 && !memcmp(got, data, 512));
    CHECK(load(da, ka, tok, 2, 4, got) == 1 && !memcmp(got[0], data[2], 256));
    CHECK(load(da, ka, tok, 3, 4, got) == 0); /* no run starts there */
    tok[20] ^= 1;
    moe8_kvd_keys(da, tok, 4, ka);
    CHECK(load(da, ka, tok, 0, 4, got) == 1 && !memcmp(got[0], data[0], 256));
    tok[20] ^= 1;
    moe8_kvd_stats(da, &st);
    CHECK(st.hits == 4 && st.misses == 1 && st.rejected == 0);
    /* another prompt that shares block 0, written from 0 while tok's run is there:
     * block 0 stays in tok's run, blocks 1..2 become the run that follows it */
    int32_t tb[48];
    moe8_kvd_key kc[3];
    memcpy(tb, tok, sizeof tb);
    tb[20] ^= 1;
    CHECK(moe8_kvd_save(da, tb, 0, 3, pd, NULL) == 3);
    moe8_kvd_flush(da);
    moe8_kvd_stats(da, &st);
    CHECK(st.written_blocks == 5 && list_dir(dir, 1).n == 3 && list_dir(dir, 1).n_bad == 0);
    moe8_kvd_keys(da, tb, 3, kc);
    CHECK(load(da, kc, tb, 0, 3, got) == 1 && load(da, kc, tb, 1, 3, got) == 2 &&
          !memcmp(got[0], data[1], 256) && !memcmp(got[1], data[2], 256));
    moe8_kvd_close(da);
    CHECK(moe8_prompt_cache_clear(dir, NULL, NULL, NULL) == MOE8_OK);
    /* a full disk or read-only directory: writing stops, loading goes on */
    CHECK(moe8_kvd_open(dir, 0, &a, &da, NULL) == MOE8_OK);
    CHECK(moe8_kvd_save(da, tok, 0, 1, pd, NULL) == 1);
    moe8_kvd_flush(da);
    moe8_kvd_inject_write_error(da, ENOSPC);
    CHECK(moe8_kvd_save(da, tok, 1, 1, pd + 1, NULL) == 1);
    moe8_kvd_flush(da);
    moe8_kvd_stats(da, &st);
    CHECK(!st.writing && st.dropped == 1 && st.written_blocks == 1);
    CHECK(moe8_kvd_save(da, tok, 1, 1, pd + 1, NULL) == 0); /* refused at once */
    moe8_kvd_keys(da, tok, 2, ka);
    moe8_kvd_use_now(da);
    CHECK(load(da, ka, tok, 0, 2, got) == 1 && load(da, ka, tok, 1, 2, got) == 0);
    CHECK(!count_entries(dir, ".tmp."));
    moe8_kvd_close(da);
}

/* ---- sharing, the bound, temporaries --------------------------------------------------------- */

static void test_shared_dir(void) {
    const char *dir = fresh_dir("pc_shared");
    const cfg c = {MOE8_DT_F16, dir, 0, 1, 0};
    req p[3], ref[3], w;
    for (int i = 0; i < 3; i++) make_prompt(&p[i], 70 + 10 * i, 31 + (uint64_t)i, 0);
    p[2] = p[0]; /* both contexts write the same blocks */
    p[2].n_prompt = 80;
    for (int i = 70; i < 80; i++) p[2].prompt[i] = 7;
    reference(g_model[0], MOE8_DT_F16, p, ref, 3);
    moe8_context *x1 = open_ctx(g_model[0], &c), *x2 = open_ctx(g_model[0], &c);
    req a = p[0], a1 = p[0], b = p[1], a2 = p[2];
    run_on(x1, &a, 1);
    run_on(x2, &a1, 1); /* the same blocks, both writers (or x2 reads x1's) */
    run_on(x2, &b, 1);
    moe8_kvd_flush(moe8_context_disk(x1));
    moe8_kvd_flush(moe8_context_disk(x2));
    run_on(x1, &b, 1); /* x1 reads what x2 wrote */
    CHECK(b.n_cached == cacheable(p[1].n_prompt) * 16);
    run_on(x2, &a2, 1); /* its first 4 blocks in x2's memory */
    CHECK(same_tokens(&a, &ref[0]) && same_tokens(&a1, &ref[0]) && same_tokens(&b, &ref[1]) &&
          same_tokens(&a2, &ref[2]));
    moe8_context_free(x1);
    moe8_context_free(x2);
    for (int i = 0; i < 3; i++) {
        w = p[i];
        moe8_prompt_cache_stats st = run(g_model[0], &c, &w, 1);
        CHECKF(same_tokens(&w, &ref[i]) && st.hits == (uint64_t)cacheable(p[i].n_prompt) &&
               st.rejected == 0, "shared: prompt %d: %llu hits", i, (unsigned long long)st.hits);
    }
    CHECK(!count_entries(dir, ".tmp."));
}

static void test_bound_lru(void) {
    const char *dir = fresh_dir("pc_bound");
    req p[3], w;
    for (int i = 0; i < 3; i++) make_prompt(&p[i], 50, 41 + (uint64_t)i, 0); /* 3 blocks each */
    cfg c = {MOE8_DT_F16, dir, 0, 1, 0};
    w = p[0];
    run(g_model[0], &c, &w, 1);
    listing l = list_dir(dir, 0);
    CHECK(l.n == 1 && l.n_tokens[0] == 48); /* one run of 3 blocks */
    /* room for 2.5 runs: the third makes the writer remove down to 2.25 */
    c.bytes = l.total * 5 / 2;
    w = p[1];
    run(g_model[0], &c, &w, 1);
    w = p[0]; /* p[0] used again: now newer than p[1] */
    moe8_prompt_cache_stats st = run(g_model[0], &c, &w, 1);
    CHECK(st.hits == 3 && st.evictions == 0);
    w = p[2];
    st = run(g_model[0], &c, &w, 1);
    CHECKF(st.evictions == 1, "%llu evictions", (unsigned long long)st.evictions);
    l = list_dir(dir, 0);
    CHECK(l.n == 2 && l.total <= c.bytes);
    w = p[0];
    st = run(g_model[0], &c, &w, 1);
    CHECKF(st.hits == 3, "LRU: the used prompt lost blocks (%llu hits)", (unsigned long long)st.hits);
    w = p[2];
    st = run(g_model[0], &c, &w, 1);
    CHECK(st.hits == 3);
    w = p[1]; /* the least recently used: gone */
    st = run(g_model[0], &c, &w, 1);
    CHECKF(st.hits == 0 && st.misses == 1, "LRU: the oldest prompt: %llu hits",
           (unsigned long long)st.hits);
}

static void test_temporaries(void) {
    const char *dir = fresh_dir("pc_tmp");
    char dead[4300], live[4300], old[4300];
    pid_t pid = fork();
    if (pid == 0) _exit(0);
    waitpid(pid, NULL, 0); /* a pid no process has now */
    snprintf(dead, sizeof dead, "%s/0123456789abcdef0123456789abcdef.kvr.tmp.%d.3", dir, (int)pid);
    snprintf(live, sizeof live, "%s/0123456789abcdef0123456789abcdef.kvr.tmp.%d.9", dir, (int)getpid());
    snprintf(old, sizeof old, "%s/0123456789abcdef0123456789abcdef.kvb", dir);
    FILE *f = fopen(dead, "w"), *g = fopen(live, "w"), *o = fopen(old, "w");
    CHECK(f && g && o);
    if (f) fputs("half a block", f), fclose(f);
    if (g) fputs("being written", g), fclose(g);
    if (o) fputs("MOE8KVB\n version 1", o), fclose(o);
    const cfg c = {MOE8_DT_F16, dir, 0, 1, 0};
    req w;
    make_prompt(&w, 40, 51, 0);
    run(g_model[0], &c, &w, 1);
    CHECK(access(dead, F_OK) != 0); /* a killed writer's: removed */
    CHECK(access(live, F_OK) == 0); /* a live process's: kept */
    CHECK(access(old, F_OK) != 0);  /* a file of version 1 (one block each): removed */
    unlink(live);
    /* not a directory: the context is refused, named */
    moe8_context_params p = moe8_context_params_default();
    moe8_context *x = NULL;
    moe8_error e;
    p.n_ctx = NCTX;
    p.prompt_cache_dir = "/dev/null";
    CHECK(moe8_context_create(g_model[0], &p, &x, &e) == MOE8_ERR_IO && strstr(e.message, "/dev/null"));
    p.prompt_cache_dir = dir;
    p.prefix_cache = 0;
    CHECK(moe8_context_create(g_model[0], &p, &x, &e) == MOE8_ERR_INVALID_ARG);
}

/* ---- a hybrid: recurrent-state snapshots stored with their blocks ------------------------ */

/* The path of the one run file of dir that starts at block 0 (a prompt's first run). */
static const char *first_run(const char *dir) {
    static char path[4200];
    listing l = list_dir(dir, 0);
    int k = -1, n = 0;
    for (int i = 0; i < l.n && i < 64; i++)
        if (l.n_blocks[i] * MOE8_KV_BLOCK_TOKENS == l.n_tokens[i]) k = i, n++;
    CHECKF(n == 1, "%d run files start at block 0, not 1", n);
    if (n != 1) return NULL;
    snprintf(path, sizeof path, "%s/%s", dir, l.name[k]);
    return path;
}

/* The snapshots in the run file of dir that starts at block 0. */
static int32_t file_snaps(const char *dir) {
    const char *path = first_run(dir);
    moe8_kvd_head h;
    int fd = path ? open(path, O_RDONLY) : -1;
    h.n_snap = -1;
    if (fd >= 0) {
        CHECK(pread(fd, &h, sizeof h, 0) == (ssize_t)sizeof h);
        close(fd);
    }
    return h.n_snap;
}

static void test_hybrid(void) {
    fx_opts h = fx_hybrid_opts(FX_QWEN3_NEXT);
    moe8_model *hm = test_load_model(fx_test_model("pc_hybrid", &h, 0));
    const char *dir = fresh_dir("pc_hyb_cache");
    const cfg c = {MOE8_DT_F16, dir, 0, 2, 0};
    req r[2], ref[2], w[2];
    make_prompt(&r[0], 150, 71, 0);
    r[1] = r[0];
    r[1].seeded = 1;
    reference(hm, MOE8_DT_F16, r, ref, 2);
    w[0] = r[0], w[1] = r[1];
    moe8_prompt_cache_stats st = run(hm, &c, w, 2); /* cold: snapshots at 64 and 128 */
    CHECK(same_tokens(&w[0], &ref[0]) && same_tokens(&w[1], &ref[1]) && st.written_blocks > 0);
    CHECKF(file_snaps(dir) == 2, "hybrid: %d snapshots stored", file_snaps(dir));
    /* Two runs: request 0's blocks 0..9, and request 1's own block 9 (positions 144..159:
     * its sampled tokens from 150 differ from request 0's greedy ones). The two compute the
     * prompt side by side; request 1 adopts request 0's twins of blocks 0..8 (kv_pool.c
     * register_block), so its block 9 follows a registered chain and is written as the run
     * after them. (Each request's blocks past the prompt are prefixes a later prompt can
     * take, e.g. a conversation's next turn.) */
    listing l0 = list_dir(dir, 1);
    CHECKF(l0.n == 2 && l0.n_bad == 0 && l0.n_tokens[0] == 160 && l0.n_tokens[1] == 160 &&
               l0.n_blocks[0] + l0.n_blocks[1] == 11,
           "hybrid cold: %d files", l0.n);
    /* A restart resumes at 128 (the deepest snapshot), recomputes blocks 8 and 9 and adopts
     * block 8 loaded from the disk: request 0's block 9 (in the first run, which the prompt's
     * 9 full blocks do not reach) is written again as a run of its own once; request 1's is
     * found there already. The later passes only touch them. */
    for (int pass = 0; pass < 3; pass++) {
        const char *path = first_run(dir);
        if (pass == 1 && path) { /* a flipped byte of the deepest snapshot (the file's end) */
            struct stat sb;
            unsigned char b;
            const int fd = open(path, O_RDWR);
            CHECK(fd >= 0 && fstat(fd, &sb) == 0 && pread(fd, &b, 1, sb.st_size - 7) == 1);
            b ^= 0x20;
            CHECK(pwrite(fd, &b, 1, sb.st_size - 7) == 1);
            close(fd);
            CHECK(list_dir(dir, 1).n_bad == 1);
        }
        w[0] = r[0], w[1] = r[1];
        st = run(hm, &c, w, 2); /* a restart: resumes at 128 from the disk (pass 1: recomputes) */
        const int want = pass == 1 ? 0 : 128;
        CHECKF(same_tokens(&w[0], &ref[0]) && same_tokens(&w[1], &ref[1]),
               "hybrid pass %d: tokens differ", pass);
        CHECKF(w[0].n_cached == want && w[1].n_cached == want &&
               st.rejected == (pass == 1 ? 1u : 0u),
               "hybrid pass %d: %d, %d cached, %llu rejected", pass, w[0].n_cached,
               w[1].n_cached, (unsigned long long)st.rejected);
        const listing l = list_dir(dir, 1);
        CHECKF(l.n == 3 && l.n_bad == 0, "hybrid pass %d: %d files, %d bad", pass, l.n, l.n_bad);
    }
    moe8_model_free(hm);
}

/* A read-only directory (where permissions bind: not for root) serves, writing nothing. */
static void test_read_only(void) {
    const char *dir = fresh_dir("pc_ro");
    req r, ref, w;
    make_prompt(&r, 60, 61, 0);
    reference(g_model[0], MOE8_DT_F16, &r, &ref, 1);
    const cfg c = {MOE8_DT_F16, dir, 0, 1, 0};
    w = r;
    run(g_model[0], &c, &w, 1);
    CHECK(chmod(dir, 0555) == 0);
    if (access(dir, W_OK) == 0) {
        printf("read-only directory: skipped (root ignores permissions; kv_disk's ENOSPC/EROFS path is tested)\n");
    } else {
        w = r;
        moe8_prompt_cache_stats st = run(g_model[0], &c, &w, 1);
        CHECK(same_tokens(&w, &ref) && st.hits == 3 && !st.writing);
    }
    chmod(dir, 0755);
}

/* ---- batch invariance with the tier on ---------------------------------------------------- */

static void test_batch_invariance(void) {
    const char *dir = fresh_dir("pc_batch");
    req base[2], r[MAXR], ref[MAXR];
    make_prompt(&base[0], 150, 71, 0);
    make_prompt(&base[1], 150, 72, 0);
    for (int i = 0; i < MAXR; i++) { /* shared prefixes of several lengths, varied tails */
        r[i] = base[i % 2];
        r[i].n_prompt = 40 + 13 * i;
        r[i].prompt[r[i].n_prompt - 1] = (int32_t)(200 + i);
        r[i].seeded = i % 3 == 0;
    }
    reference(g_model[0], MOE8_DT_F16, r, ref, MAXR);
    /* the disk holds base[0]'s prefix; base[1]'s comes from memory or is computed */
    req w = base[0];
    const cfg c0 = {MOE8_DT_F16, dir, 0, 1, 0};
    run(g_model[0], &c0, &w, 1);
    const cfg c = {MOE8_DT_F16, dir, 0, 4, 24}; /* a small pool: evictions, preemptions */
    moe8_prompt_cache_stats st = run(g_model[0], &c, r, MAXR);
    for (int i = 0; i < MAXR; i++) CHECKF(same_tokens(&r[i], &ref[i]), "batch: request %d differs", i);
    CHECK(st.hits > 0 && st.rejected == 0);
}

/* ---- the CLI: two processes, then two at once; ls, verify, clear ------------------------------- */

static int sh(const char *cmd) {
    const int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static void test_cli(const char *model_dir) {
    const char *dir = fresh_dir("pc_cli");
    char cmd[12000], ids[2000] = "", out[4][4200];
    test_rng g = {81};
    for (int i = 0; i < 120; i++) {
        char t[16];
        snprintf(t, sizeof t, "%s%d", i ? "," : "", (int)(1 + test_rng_u64(&g) % 250));
        strcat(ids, t);
    }
    for (int i = 0; i < 4; i++) snprintf(out[i], sizeof out[i], "%s/out%d.txt", test_tmp_root(), i);
    const char *gen = MOE8_CLI " generate -m '%s' --prompt-ids '%s' --ids -n 8 --threads 1 "
                      "--prompt-cache-dir '%s' > '%s' 2>/dev/null";
    snprintf(cmd, sizeof cmd, MOE8_CLI " generate -m '%s' --prompt-ids '%s' --ids -n 8 --threads 1 "
             "> '%s' 2>/dev/null", model_dir, ids, out[0]);
    CHECK(sh(cmd) == 0); /* the tier off */
    snprintf(cmd, sizeof cmd, gen, model_dir, ids, dir, out[1]);
    CHECK(sh(cmd) == 0); /* cold */
    snprintf(cmd, sizeof cmd, "(" MOE8_CLI " generate -m '%s' --prompt-ids '%s' --ids -n 8 --threads 1 "
             "--prompt-cache-dir '%s' > '%s' 2>/dev/null & " MOE8_CLI " generate -m '%s' --prompt-ids "
             "'%s' --ids -n 8 --threads 1 --prompt-cache-dir '%s' > '%s' 2>/dev/null; wait)",
             model_dir, ids, dir, out[2], model_dir, ids, dir, out[3]);
    CHECK(sh(cmd) == 0); /* two processes at once, both reading */
    for (int i = 1; i < 4; i++) {
        snprintf(cmd, sizeof cmd, "cmp -s '%s' '%s'", out[0], out[i]);
        CHECKF(sh(cmd) == 0, "moe8 generate run %d differs from the run without the tier", i);
    }
    snprintf(cmd, sizeof cmd, MOE8_CLI " prompt-cache verify '%s' | tail -1 | grep -q '^1 files.* 0 invalid'", dir);
    CHECK(sh(cmd) == 0);
    snprintf(cmd, sizeof cmd, MOE8_CLI " prompt-cache ls '%s' | grep -c ' 112 tokens  7 blocks  f16 .* ok$' | grep -q '^1$'", dir);
    CHECK(sh(cmd) == 0);
    corrupt(only_file(dir), C_DATA);
    snprintf(cmd, sizeof cmd, MOE8_CLI " prompt-cache verify '%s' > /dev/null", dir);
    CHECK(sh(cmd) == 1);
    snprintf(cmd, sizeof cmd, MOE8_CLI " prompt-cache clear '%s' | grep -q '^removed 1 files'", dir);
    CHECK(sh(cmd) == 0);
    CHECK(list_dir(dir, 0).n == 0);
    snprintf(cmd, sizeof cmd, MOE8_CLI " prompt-cache frob '%s' 2>/dev/null", dir);
    CHECK(sh(cmd) == 2);
}

int main(void) {
    fx_opts o = fx_default_opts();
    o.quant = 1;
    const char *qdir = fx_test_model("pc_qwen3", &o, 0);
    g_model[0] = test_load_model(qdir);
    fx_opts d = fx_default_opts();
    d.arch = FX_DEEPSEEK_V3, d.n_experts = 8, d.top_k = 2, d.q_lora = 24;
    d.quant = 1;
    g_model[1] = test_load_model(fx_test_model("pc_deepseek", &d, 0));
    test_restart();
    test_corruption();
    test_foreign_layout();
    test_shared_dir();
    test_bound_lru();
    test_temporaries();
    test_hybrid();
    test_read_only();
    test_batch_invariance();
    test_cli(qdir);
    moe8_model_free(g_model[0]);
    moe8_model_free(g_model[1]);
    return test_summary();
}
