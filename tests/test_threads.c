/*
 * test_threads.c — the thread pool (src/core/pool.h) and the forward pass on
 * it: results that do not depend on the thread count or the schedule.
 *
 * The pool: every chunk of a job runs exactly once, for any thread count
 * and chunk count, under a random delay injected before chunks (the test
 * hook), with jobs started from inside a chunk (inline) and from two
 * threads at once (one inline); thousands of short jobs in a row, where a
 * worker that wakes late must find nothing to do (a chunk run twice or run
 * for a finished job is counted).
 *
 * The forward: make-model's tiny preset of qwen3_moe (grouped-query
 * attention, its W8A8 quantization too), deepseek_v2 (multi-head latent
 * attention), gpt_oss (attention sinks, a sliding layer) and qwen3_next
 * (Gated DeltaNet, chunked and decode steps; 4 layers), 2 layers, run a prefill of 40 tokens (several attention tiles,
 * the MoE's gather) and 3 decode steps with 1, 2, 3 and 5 threads, and with
 * 2 and 3 threads under a random delay of up to 200 µs before a chunk: the
 * logits must equal the 1-thread run's bit for bit. (What those bits are is
 * test_family_identity's business; every kernel table's numbers, the
 * kernel tests'.)
 */
#include "test.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "core/pool.h"

/* ---- the pool --------------------------------------------------------------- */

#define MAX_CHUNKS 4096

typedef struct {
    atomic_int runs[MAX_CHUNKS];
    atomic_int bad_thread;
    int n_threads;
    int64_t n;
} count_job;

static void count_chunk(void *ctx, int64_t c, int thread) {
    count_job *j = ctx;
    if (c < 0 || c >= j->n || thread < 0 || thread >= j->n_threads) atomic_store(&j->bad_thread, 1);
    else atomic_fetch_add(&j->runs[c], 1);
}

static _Atomic uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static atomic_int delay_max_us;

static uint64_t rng_next(void) {
    uint64_t x = atomic_fetch_add(&rng_state, 0x9E3779B97F4A7C15ull);
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* The test hook: a random delay (half the chunks none) of up to delay_max_us. */
static void delay_hook(int64_t chunk, int thread) {
    const int mx = atomic_load(&delay_max_us);
    const uint64_t r = rng_next();
    (void)chunk;
    (void)thread;
    if (mx > 0 && (r & 1)) {
        struct timespec ts = {0, (long)((r >> 1) % (uint64_t)mx) * 1000};
        nanosleep(&ts, NULL);
    }
}

static int job_ok(count_job *j) {
    int ok = !atomic_load(&j->bad_thread);
    for (int64_t c = 0; c < j->n; c++) ok &= atomic_load(&j->runs[c]) == 1;
    return ok;
}

static count_job *new_job(int n_threads, int64_t n) {
    count_job *j = calloc(1, sizeof *j);
    j->n_threads = n_threads;
    j->n = n;
    return j;
}

/* Every (threads, chunks) pair: each chunk once, thread indices in range. */
static void test_counts(void) {
    static const int threads[] = {1, 2, 3, 5, 8};
    static const int64_t chunks[] = {1, 2, 3, 7, 64, 1000};
    for (size_t a = 0; a < sizeof threads / sizeof threads[0]; a++)
        for (size_t b = 0; b < sizeof chunks / sizeof chunks[0]; b++) {
            count_job *j = new_job(threads[a], chunks[b]);
            moe8_pool_run(threads[a], chunks[b], count_chunk, j);
            CHECKF(job_ok(j), "%d threads, %lld chunks", threads[a], (long long)chunks[b]);
            free(j);
        }
    moe8_pool_run(4, 0, count_chunk, NULL); /* no chunk: nothing runs */
}

/* Many short jobs back to back, each chunk delayed at random: a late worker
 * must not run a chunk of a finished job (its counts would exceed 1). */
static void test_many_jobs(void) {
    int ok = 1;
    atomic_store(&delay_max_us, 30);
    moe8_pool_set_chunk_hook(delay_hook);
    for (int rep = 0; rep < 3000 && ok; rep++) {
        const int nt = 2 + rep % 4;
        count_job *j = new_job(nt, 1 + rep % 13);
        moe8_pool_run(nt, j->n, count_chunk, j);
        ok = job_ok(j);
        free(j); /* a worker touching it after the job would be a use after free (ASan) */
    }
    moe8_pool_set_chunk_hook(NULL);
    CHECKF(ok, "a chunk ran other than once over 3000 jobs");
}

typedef struct {
    count_job *inner[16];
} nest_job;

static void nest_chunk(void *ctx, int64_t c, int thread) {
    nest_job *j = ctx;
    (void)thread;
    moe8_pool_run(3, j->inner[c]->n, count_chunk, j->inner[c]); /* inline, in order */
}

/* A job started from inside a chunk runs inline on that thread. */
static void test_nested(void) {
    nest_job j;
    int ok = 1;
    for (int i = 0; i < 16; i++) j.inner[i] = new_job(3, 5 + i);
    moe8_pool_run(3, 16, nest_chunk, &j);
    for (int i = 0; i < 16; i++) ok &= job_ok(j.inner[i]), free(j.inner[i]);
    CHECK(ok);
}

static void *other_caller(void *arg) {
    for (int rep = 0; rep < 300; rep++) {
        count_job *j = new_job(2, 17);
        moe8_pool_run(2, 17, count_chunk, j);
        if (!job_ok(j)) *(int *)arg = 0;
        free(j);
    }
    return NULL;
}

/* Two threads starting jobs at once: one has the pool, the other runs inline. */
static void test_two_callers(void) {
    pthread_t t;
    int ok_other = 1, ok = 1;
    CHECK(pthread_create(&t, NULL, other_caller, &ok_other) == 0);
    for (int rep = 0; rep < 300; rep++) {
        count_job *j = new_job(3, 23);
        moe8_pool_run(3, 23, count_chunk, j);
        ok &= job_ok(j);
        free(j);
    }
    pthread_join(t, NULL);
    CHECK(ok && ok_other);
}

static void test_parts(void) {
    /* moe8_pool_part cuts [0, total) into n consecutive runs covering it once */
    for (int64_t total = 0; total < 40; total++)
        for (int64_t n = 1; n < 9; n++) {
            int64_t end = 0, a, b;
            for (int64_t i = 0; i < n; i++) {
                moe8_pool_part(total, i, n, &a, &b);
                CHECK(a == end && b >= a);
                end = b;
            }
            CHECK(end == total);
        }
    CHECK(moe8_pool_chunks(100, 2, 8) == 16);
    CHECK(moe8_pool_chunks(5, 2, 8) == 5);
    CHECK(moe8_pool_chunks(100, 1, 8) == 1);
    CHECK(moe8_pool_chunks(0, 4, 8) == 1);
    CHECK(moe8_cpu_count() >= 1);
}

/* ---- the forward ------------------------------------------------------------ */

#define V 2048
#define N_PRE 40
#define N_DEC 3
#define N_POS (N_PRE + N_DEC)

static void model_dir(char *buf, size_t cap, const char *fam, int quant) {
    snprintf(buf, cap, "%s/threads/%s_%s", MOE8_TEST_TMP, fam, quant ? "w8a8" : "float");
}

static int build_model(moe8_arch arch, int quant) {
    char fdir[4096], qdir[4096];
    moe8_error e;
    moe8_make_model_params mp = moe8_make_model_params_default();
    model_dir(fdir, sizeof fdir, moe8_arch_name(arch), 0);
    model_dir(qdir, sizeof qdir, moe8_arch_name(arch), 1);
    mp.arch = arch;
    mp.preset = MOE8_PRESET_TINY;
    mp.n_layers = arch == MOE8_ARCH_QWEN3_NEXT ? 4 : 2; /* 3 Gated DeltaNet, 1 attention */
    mp.seed = 11;
    mp.vocab_size = V;
    mp.tokenizer_dir = MOE8_TOKENIZER_DIR;
    mp.force = 1;
    if (moe8_make_model(&mp, fdir, &e) != MOE8_OK) {
        fprintf(stderr, "make-model %s: %s\n", moe8_arch_name(arch), e.message);
        return -1;
    }
    if (!quant) return 0;
    moe8_quantize_params qp = moe8_quantize_params_default();
    qp.force = 1;
    qp.n_threads = 2;
    if (moe8_quantize(fdir, qdir, &qp, NULL, &e) != MOE8_OK) {
        fprintf(stderr, "quantize %s: %s\n", moe8_arch_name(arch), e.message);
        return -1;
    }
    return 0;
}

/* Logits [N_POS][V]: a prefill of N_PRE tokens, then one token a step. */
static int run_logits(moe8_model *m, int n_threads, float *out) {
    moe8_context_params p = moe8_context_params_default();
    moe8_context *c = NULL;
    moe8_error e;
    int32_t tok[N_POS], pos[N_POS], seq[N_POS] = {0};
    int8_t want[N_POS];
    p.kv_type = MOE8_DT_F16;
    p.n_ctx = 64;
    p.n_outputs = N_PRE;
    p.n_threads = n_threads;
    if (moe8_context_create(m, &p, &c, &e) != MOE8_OK) {
        fprintf(stderr, "context: %s\n", e.message);
        return -1;
    }
    for (int i = 0; i < N_POS; i++) tok[i] = (i * 389 + 7) % V, pos[i] = i, want[i] = 1;
    moe8_batch b = {N_PRE, tok, pos, seq, want};
    if (moe8_decode(c, &b, &e) != MOE8_OK) goto fail;
    for (int i = 0; i < N_PRE; i++) memcpy(out + (size_t)i * V, moe8_context_logits(c, i), sizeof(float) * V);
    for (int i = N_PRE; i < N_POS; i++) {
        moe8_batch b1 = {1, tok + i, pos + i, seq, want};
        if (moe8_decode(c, &b1, &e) != MOE8_OK) goto fail;
        memcpy(out + (size_t)i * V, moe8_context_logits(c, 0), sizeof(float) * V);
    }
    moe8_context_free(c);
    return 0;
fail:
    fprintf(stderr, "decode: %s\n", e.message);
    moe8_context_free(c);
    return -1;
}

static void test_model(moe8_arch arch, int quant) {
    static const struct {
        int threads, delay_us;
    } runs[] = {{2, 0}, {3, 0}, {5, 0}, {2, 200}, {3, 200}};
    char dir[4096];
    moe8_model_params mp = moe8_model_params_default();
    moe8_model *m = NULL;
    moe8_error e;
    float *a = malloc(sizeof(float) * N_POS * V), *b = malloc(sizeof(float) * N_POS * V);
    model_dir(dir, sizeof dir, moe8_arch_name(arch), quant);
    mp.no_cache = 1;
    mp.n_threads = 2;
    CHECKF(moe8_model_load(dir, &mp, &m, &e) == MOE8_OK, "load %s: %s", dir, e.message);
    if (!m) goto out;
    CHECK(run_logits(m, 1, a) == 0);
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        atomic_store(&delay_max_us, runs[i].delay_us);
        moe8_pool_set_chunk_hook(runs[i].delay_us ? delay_hook : NULL);
        const int rc = run_logits(m, runs[i].threads, b);
        moe8_pool_set_chunk_hook(NULL);
        CHECK(rc == 0);
        CHECKF(!memcmp(a, b, sizeof(float) * N_POS * V), "%s %s: %d threads%s differ from 1",
               moe8_arch_name(arch), quant ? "w8a8" : "float", runs[i].threads,
               runs[i].delay_us ? " with random delays" : "");
    }
    moe8_model_free(m);
out:
    free(a);
    free(b);
}

int main(void) {
    char cmd[4300];
    test_parts();
    test_counts();
    test_nested();
    test_two_callers();
    test_many_jobs();
    snprintf(cmd, sizeof cmd, "rm -rf '%s/threads' && mkdir -p '%s/threads'", MOE8_TEST_TMP,
             MOE8_TEST_TMP);
    if (system(cmd) != 0) return 2;
    if (build_model(MOE8_ARCH_QWEN3_MOE, 1) || build_model(MOE8_ARCH_DEEPSEEK_V2, 0) ||
        build_model(MOE8_ARCH_GPT_OSS, 0) || build_model(MOE8_ARCH_QWEN3_NEXT, 0))
        return 2;
    test_model(MOE8_ARCH_QWEN3_MOE, 0);
    test_model(MOE8_ARCH_QWEN3_MOE, 1);
    test_model(MOE8_ARCH_DEEPSEEK_V2, 0);
    test_model(MOE8_ARCH_GPT_OSS, 0);
    test_model(MOE8_ARCH_QWEN3_NEXT, 0);
    return test_summary();
}
