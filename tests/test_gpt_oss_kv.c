/*
 * test_gpt_oss_kv.c — the KV pool's sliding-window group (model/kv_pool.h,
 * SEMANTICS §10) on gpt_oss's tiny preset cut to 2 layers (layer 0 sliding,
 * window 128; layer 1 full):
 *
 *   bound     the blocks a sequence holds per group after 127, 128, 129,
 *             1000 and 5000 positions against the blocks the window of the
 *             next position touches, counted here; a pool block holds one
 *             group (half the whole model's block: kv_bytes buys ~2x the
 *             positions); a rewind past the given-back blocks refused
 *   exact     logits of 300 positions (a prefill, chunks and decode steps
 *             across the window) bit for bit those of a pool that keeps
 *             every position (one group: a context with the disk tier), and
 *             within 1e-4 of the double-precision reference (gptoss_ref.h)
 *   prefix    a request sharing 300 prompt tokens with an earlier one of 320:
 *             288 positions reused (the sliding blocks of its last window
 *             still cached), its tokens those of the same request from
 *             scratch; after a long request in a tight pool evicted the
 *             sliding blocks of the first 300 positions, the match is
 *             shortened (to 0: no shorter end has its window cached either)
 *             and the tokens are still the same
 *   batch     four requests of 30 to 600 prompt tokens together in a pool too
 *             small for all (preemptions: a long sequence given back and
 *             resumed) give each the tokens it gets alone
 */
#include <time.h>

#include "test.h"

#include "gptoss_ref.h"
#include "model/context.h"

#define V 1024
#define BS MOE8_KV_BLOCK_TOKENS
#define W 128
#define TOK MOE8_TOKENIZER_DIR

static moe8_context *context(moe8_model *m, moe8_context_params cp) {
    moe8_context *c = NULL;
    moe8_error e;
    cp.n_threads = 2;
    CHECKF(moe8_context_create(m, &cp, &c, &e) == MOE8_OK, "context: %s", e.message);
    if (!c) exit(2);
    return c;
}

static int32_t tok_at(int i, int salt) { return (int32_t)((i * 37 + 11 + salt * 101) % V); }

/* Blocks of a sequence of n positions: every one (full), and those holding a
 * position the window of position n reads (sliding). */
static int32_t full_blocks(int32_t n) { return (n + BS - 1) / BS; }
static int32_t window_blocks(int32_t n) {
    int32_t k = 0;
    for (int32_t j = 0; j < full_blocks(n); j++) k += (j + 1) * BS - 1 >= n - W + 1;
    return k;
}

/* ---- bound ------------------------------------------------------------------------- */

static void decode_to(moe8_context *c, int32_t from, int32_t to, int chunk) {
    static int32_t tok[256], pos[256], seq[256];
    moe8_error e;
    while (from < to) {
        const int n = to - from < chunk ? to - from : chunk;
        for (int i = 0; i < n; i++) tok[i] = tok_at(from + i, 0), pos[i] = from + i, seq[i] = 0;
        moe8_batch b = {n, tok, pos, seq, NULL};
        CHECKF(moe8_decode(c, &b, &e) == MOE8_OK, "decode at %d: %s", from, e.message);
        from += n;
    }
}

static void test_bound(moe8_model *m) {
    static const int32_t at[] = {127, 128, 129, 1000, 5000};
    moe8_context_params cp = moe8_context_params_default();
    moe8_kv_stats st;
    moe8_error e;
    int32_t len = 0;
    cp.n_ctx = 5120;
    cp.n_batch = 256;
    cp.kv_type = MOE8_DT_F32; /* the full layer reads 5000 positions: no widening */
    moe8_context *c = context(m, cp);
    moe8_context_kv_stats(c, &st);
    CHECKF(moe8_context_kv_groups(c) == 2 && st.window == W, "groups %d, window %d",
           moe8_context_kv_groups(c), st.window);
    CHECKF(2 * st.block_bytes == moe8_model_kv_block_bytes(m, cp.kv_type), "pool block %zu bytes, "
           "model block %zu", st.block_bytes, moe8_model_kv_block_bytes(m, cp.kv_type));
    /* the default pool: n_ctx for the full layers, window + n_batch for the sliding ones */
    CHECKF(st.n_blocks == 320 + (W + 256 - 1 + BS - 1) / BS + 1, "default pool of %d blocks",
           st.n_blocks);
    for (int i = 0; i < 5; i++) {
        decode_to(c, len, at[i], i < 3 ? 256 : 200);
        len = at[i];
        const int32_t f = moe8_context_kv_held_group(c, 0, 0);
        const int32_t w = moe8_context_kv_held_group(c, 0, 1);
        moe8_context_kv_stats(c, &st);
        printf("gpt_oss kv after %4d positions: full layers %3d blocks, sliding %d (want %d, %d); "
               "pool used %d\n", len, f, w, full_blocks(len), window_blocks(len), st.n_used);
        CHECKF(f == full_blocks(len) && w == window_blocks(len), "after %d: %d / %d blocks", len,
               f, w);
        CHECKF(st.n_used == f + w && st.n_window_used == w, "stats: used %d, window %d",
               st.n_used, st.n_window_used);
    }
    CHECK(window_blocks(5000) == 9 && window_blocks(129) == 9 && window_blocks(128) == 8);
    /* rewinding to 4000: its window was given back */
    CHECK(moe8_context_seq_truncate(c, 0, 4000, &e) == MOE8_ERR_UNSUPPORTED &&
          strstr(e.message, "sliding-window"));
    CHECK(moe8_context_seq_len(c, 0) == 5000);
    /* to 4990: it reads position 4863, in block 303 (4848..4863), given back at 5000 */
    CHECK(moe8_context_seq_truncate(c, 0, 4990, &e) == MOE8_ERR_UNSUPPORTED);
    /* to 4995: its window (4868..4994, blocks 304..312) is held */
    CHECK(moe8_context_seq_truncate(c, 0, 4995, &e) == MOE8_OK);
    CHECK(moe8_context_kv_held_group(c, 0, 1) == window_blocks(4995));
    decode_to(c, 4995, 5000, 1);
    CHECK(moe8_context_kv_held_group(c, 0, 1) == window_blocks(5000));
    CHECK(moe8_context_seq_truncate(c, 0, 0, &e) == MOE8_OK);
    moe8_context_kv_stats(c, &st);
    CHECK(st.n_used == 0 && st.n_window_used == 0);
    moe8_context_free(c);
}

/* ---- exact ------------------------------------------------------------------------- */

#define NX 300

/* Logits of positions 0..NX-1: a prefill of 100, chunks of 37 to 248, then steps. */
static void logits_of(moe8_context *c, const int32_t *ids, float *out) {
    int32_t pos[NX], seq[NX] = {0};
    int8_t want[NX];
    moe8_error e;
    for (int i = 0; i < NX; i++) pos[i] = i, want[i] = 1;
    for (int p = 0; p < NX;) {
        const int n = p == 0 ? 100 : p < 248 ? (248 - p < 37 ? 248 - p : 37) : 1;
        moe8_batch b = {n, ids + p, pos + p, seq, want};
        CHECKF(moe8_decode(c, &b, &e) == MOE8_OK, "decode at %d: %s", p, e.message);
        for (int i = 0; i < n; i++)
            memcpy(out + (size_t)(p + i) * V, moe8_context_logits(c, i), sizeof(float) * V);
        p += n;
    }
}

static double rel(const float *a, const double *b, int n) {
    double d = 0, m = 0;
    for (int i = 0; i < n; i++) d = fmax(d, fabs(a[i] - b[i])), m = fmax(m, fabs(b[i]));
    return d / m;
}

static void test_exact(moe8_model *m, const char *dir) {
    int32_t ids[NX];
    float *win = malloc(sizeof(float) * NX * V), *all = malloc(sizeof(float) * NX * V);
    double *want = malloc(sizeof(double) * NX * V);
    moe8_context_params cp = moe8_context_params_default();
    moe8_error e;
    char disk[4096];
    for (int i = 0; i < NX; i++) ids[i] = tok_at(i, 3);
    cp.n_ctx = 512;
    cp.n_batch = 100;
    cp.n_outputs = 100;
    cp.kv_type = MOE8_DT_F32;
    cp.float_experts = 1;
    moe8_context *c = context(m, cp);
    CHECK(moe8_context_kv_groups(c) == 2);
    logits_of(c, ids, win);
    CHECK(moe8_context_kv_held_group(c, 0, 1) == window_blocks(NX));
    moe8_context_free(c);
    snprintf(disk, sizeof disk, "%s", test_tmpdir("gptoss_kv_disk"));
    cp.prompt_cache_dir = disk; /* the disk tier keeps one group: every position */
    c = context(m, cp);
    CHECK(moe8_context_kv_groups(c) == 1);
    logits_of(c, ids, all);
    CHECK(moe8_context_kv_held_group(c, 0, 0) == full_blocks(NX));
    moe8_context_free(c);
    int same = !memcmp(win, all, sizeof(float) * NX * V);
    printf("gpt_oss kv: %d positions' logits with the window-only pool %s those of the pool "
           "keeping every position\n", NX, same ? "bit for bit" : "DIFFER from");
    CHECK(same);
    const moe8_config *mc = moe8_model_config(m);
    gref g = {V, (int)mc->hidden_size, (int)mc->num_attention_heads,
              (int)mc->num_key_value_heads, (int)mc->head_dim, (int)mc->num_experts,
              (int)mc->num_experts_per_tok, (int)mc->moe_intermediate_size,
              (int)mc->num_hidden_layers, W, mc->rms_norm_eps, mc->rope_theta, 32, 32, 1, 4096,
              moe8_config_get_num(mc, "swiglu_limit", NULL), {1, 0}, 0, NULL};
    CHECKF(moe8_st_open(dir, &g.st, &e) == MOE8_OK, "%s", e.message);
    gref_forward(&g, ids, NX, want);
    moe8_st_free(g.st);
    double worst = 0;
    for (int t = 0; t < NX; t++) worst = fmax(worst, rel(win + (size_t)t * V, want + (size_t)t * V, V));
    printf("gpt_oss kv: window-only pool vs the double reference over %d positions: rel err %.3g\n",
           NX, worst);
    CHECKF(worst <= 1e-4, "rel err %.3g", worst);
    free(win), free(all), free(want);
}

/* ---- the scheduler ----------------------------------------------------------------- */

#define MAXQ 4
#define MAXG 8

typedef struct {
    const int32_t *prompt;
    int32_t n, max_tokens;
    int32_t out[MAXG], n_out, n_cached;
    int64_t id;
} job;

/* Run jobs q[0..n) together to their ends. */
static void run_jobs(moe8_sched *s, job *q, int n) {
    const moe8_event *ev;
    int32_t n_ev, left = n;
    moe8_error e;
    for (int i = 0; i < n; i++) {
        moe8_request r = moe8_request_default();
        r.prompt = q[i].prompt;
        r.n_prompt = q[i].n;
        r.max_tokens = q[i].max_tokens;
        r.ignore_eos = 1;
        q[i].n_out = 0;
        q[i].n_cached = -1;
        CHECKF(moe8_sched_add(s, &r, &q[i].id, &e) == MOE8_OK, "add: %s", e.message);
    }
    for (int step = 0; step < 5000 && left > 0; step++) {
        CHECKF(moe8_sched_step(s, &ev, &n_ev, &e) == MOE8_OK, "step: %s", e.message);
        for (int k = 0; k < n_ev; k++)
            for (int i = 0; i < n; i++) {
                if (ev[k].request != q[i].id) continue;
                if (ev[k].type == MOE8_EVENT_TOKEN && q[i].n_out < MAXG)
                    q[i].out[q[i].n_out++] = ev[k].token;
                if (ev[k].type == MOE8_EVENT_FINISH) {
                    CHECKF(ev[k].finish == MOE8_FINISH_LENGTH, "request %d ended with %d", i,
                           (int)ev[k].finish);
                    q[i].n_cached = ev[k].n_cached;
                    left--;
                }
            }
    }
    CHECK(left == 0);
}

typedef struct {
    moe8_context *c;
    moe8_sched *s;
} runner;

/* A context (kv_blocks pool blocks, 0: default) and its scheduler. */
static runner runner_make(moe8_model *m, int prefix_cache, int32_t kv_blocks, int max_running) {
    moe8_context_params cp = moe8_context_params_default();
    moe8_sched_params sp = moe8_sched_params_default();
    moe8_error e;
    runner r;
    cp.n_ctx = 1024;
    cp.n_seq_max = max_running;
    cp.n_batch = 64;
    cp.prefix_cache = prefix_cache;
    cp.kv_bytes = (uint64_t)kv_blocks * (moe8_model_kv_block_bytes(m, cp.kv_type) / 2);
    sp.max_batch_tokens = 64;
    r.c = context(m, cp);
    CHECKF(moe8_sched_create(r.c, &sp, &r.s, &e) == MOE8_OK, "sched: %s", e.message);
    if (!r.s) exit(2);
    return r;
}

static void runner_free(runner r) {
    moe8_sched_free(r.s);
    moe8_context_free(r.c);
}

/* q's tokens as a fresh context without the prefix cache gives them, alone. */
static void check_alone(moe8_model *m, const job *q, const char *what) {
    runner a = runner_make(m, 0, 0, 1);
    job j = *q;
    run_jobs(a.s, &j, 1);
    CHECKF(j.n_out == q->n_out && !memcmp(j.out, q->out, sizeof(int32_t) * (size_t)q->n_out),
           "%s: tokens differ from the request alone", what);
    runner_free(a);
}

static void test_prefix(moe8_model *m) {
    static int32_t a[1000], b[320];
    for (int i = 0; i < 1000; i++) a[i] = tok_at(i, 5);
    for (int i = 0; i < 320; i++) b[i] = i < 300 ? a[i] : tok_at(i, 7);
    runner r = runner_make(m, 1, 0, 1);
    job ja = {.prompt = a, .n = 320, .max_tokens = 2}, jb = {.prompt = b, .n = 320, .max_tokens = MAXG};
    run_jobs(r.s, &ja, 1);
    run_jobs(r.s, &jb, 1);
    printf("gpt_oss kv prefix: a request sharing 300 tokens reused %d positions\n", jb.n_cached);
    CHECKF(jb.n_cached == 288, "reused %d (want 288: 18 blocks, the window's 8 sliding ones "
           "cached)", jb.n_cached);
    check_alone(m, &jb, "after a prefix hit across the window");
    runner_free(r);
    /* 1000 positions in 79 blocks: 63 + 63 taken, the sliding blocks of its first
     * ~750 positions evicted (least recently used first) as it went */
    r = runner_make(m, 1, 79, 1);
    ja.n = 1000;
    run_jobs(r.s, &ja, 1);
    run_jobs(r.s, &jb, 1);
    printf("gpt_oss kv prefix: after their sliding blocks were evicted, %d positions reused\n",
           jb.n_cached);
    CHECKF(jb.n_cached == 0, "reused %d (want 0: no end's window cached)", jb.n_cached);
    check_alone(m, &jb, "after a match shortened for the window");
    runner_free(r);
}

static void test_batch(moe8_model *m) {
    static int32_t p[MAXQ][600];
    static const int32_t n[MAXQ] = {600, 500, 200, 30};
    job q[MAXQ];
    moe8_sched_stats st;
    for (int k = 0; k < MAXQ; k++) {
        for (int i = 0; i < n[k]; i++) p[k][i] = tok_at(i, 11 + k);
        q[k] = (job){.prompt = p[k], .n = n[k], .max_tokens = MAXG};
    }
    /* 600 + 8 positions need 38 + 9..13 blocks, 500 + 8 32 + 9..13: not both at once */
    runner r = runner_make(m, 1, 72, MAXQ);
    run_jobs(r.s, q, MAXQ);
    moe8_sched_get_stats(r.s, &st);
    printf("gpt_oss kv batch: 4 requests together in 72 blocks, %lld preemptions\n",
           (long long)st.n_preempted);
    CHECKF(st.n_preempted >= 1, "no preemption (%lld)", (long long)st.n_preempted);
    for (int k = 0; k < MAXQ; k++) check_alone(m, &q[k], "together, preempted");
    runner_free(r);
}

int main(void) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", test_tmpdir("gptoss_kv_tiny"));
    test_make_tiny(dir, MOE8_ARCH_GPT_OSS, V, 5, 2, 0);
    moe8_model *m = test_load_model_n(dir, 2);
    clock_t t = clock();
    test_bound(m);
    printf("(bound: %.1f CPU-s)\n", (double)(clock() - t) / CLOCKS_PER_SEC), t = clock();
    test_exact(m, dir);
    printf("(exact: %.1f CPU-s)\n", (double)(clock() - t) / CLOCKS_PER_SEC), t = clock();
    test_prefix(m);
    printf("(prefix: %.1f CPU-s)\n", (double)(clock() - t) / CLOCKS_PER_SEC), t = clock();
    test_batch(m);
    printf("(batch: %.1f CPU-s)\n", (double)(clock() - t) / CLOCKS_PER_SEC);
    moe8_model_free(m);
    return test_summary();
}
