/*
 * pool.c — the forward pass's thread pool (pool.h): persistent workers that
 * claim a job's chunks at run time, so a thread the OS takes away (another
 * process, the server's own threads) holds up one chunk, not a static
 * share of every parallel step, and nobody waits for a thread to arrive.
 *
 * One job at a time, process-wide. Its chunks are claimed from `claim`, a
 * 64-bit word holding (generation << 32 | next chunk), by compare-and-swap:
 * a claim succeeds only while the word still names the claimer's
 * generation and a chunk is left, so a worker that wakes late, or reads a
 * job just as it ends, claims nothing and never calls the finished job's
 * function nor touches its data. The job's description (function, context,
 * chunk and thread counts) is published under a seqlock on `seq` (odd while
 * the caller writes it, 2 x generation once it is whole); a worker uses a
 * description only when `seq` read the same before and after it. A job is
 * complete when `done` reaches its chunk count, not when the workers have
 * arrived: the caller runs chunks too, then waits only for chunks claimed
 * and still running.
 *
 * Waits spin for MOE8_POOL_SPIN_US microseconds (default 50: the gaps
 * between the jobs of one decode step are shorter) and then sleep on a
 * futex, so an idle or waiting thread gives its core back to the thread
 * that holds the last chunk.
 *
 * Deterministic by construction: a chunk's arithmetic is fixed by its
 * index (pool.h), so any thread count and any schedule give the same bits.
 *
 * Does not: run two jobs at once (a second caller, or a job started from
 * inside a chunk, runs inline), or end its workers (they sleep; they live
 * as long as the process; a child of fork() starts its own).
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/core.h"
#include "core/pool.h"

#define MAX_WORKERS 4095

static pthread_mutex_t grow_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_int n_workers;                    /* grown under grow_mu */
static atomic_int busy;                        /* a caller holds the pool */
static _Atomic uint32_t seq;                   /* seqlock of the job; futex of idle workers */
static _Atomic uint64_t claim;                 /* generation << 32 | next chunk */
static _Atomic uint32_t done;                  /* chunks finished; futex of the caller */
static atomic_int caller_sleeps, workers_sleep;
/* the job (written by the caller under the seqlock) */
static _Atomic(moe8_pool_fn) job_fn;
static _Atomic(void *) job_ctx;
static _Atomic uint32_t job_n;
static atomic_int job_threads;
static _Atomic(moe8_pool_hook_fn) chunk_hook;
static int spin_ns = -1;
static _Thread_local int in_job, my_thread;

void moe8_pool_set_chunk_hook(moe8_pool_hook_fn hook) { atomic_store(&chunk_hook, hook); }

int moe8_cpu_count(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

int64_t moe8_pool_chunks(int64_t units, int n_threads, int per_thread) {
    int64_t n = (int64_t)(n_threads > 1 ? n_threads : 1) * (per_thread > 1 ? per_thread : 1);
    if (n_threads <= 1) n = 1;
    if (n > units) n = units;
    return n < 1 ? 1 : n;
}

static void futex_wait(_Atomic uint32_t *w, uint32_t v) {
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT_PRIVATE, v, NULL, NULL, 0);
}
static void futex_wake(_Atomic uint32_t *w, int n) {
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Spin until *w != v or the spin time is over; 1 when it changed. */
static int spin_while(_Atomic uint32_t *w, uint32_t v) {
    int64_t t_end = 0;
    for (int i = 0;; i++) {
        if (atomic_load_explicit(w, memory_order_acquire) != v) return 1;
        cpu_relax();
        if ((i & 63) == 63) {
            const int64_t t = now_ns();
            if (!t_end) t_end = t + spin_ns;
            else if (t >= t_end) return 0;
        }
    }
}

/* Claim and run chunks of generation g until none is left. */
static void run_chunks(uint32_t g, uint32_t n, moe8_pool_fn fn, void *ctx, int thread) {
    const moe8_pool_hook_fn hook = atomic_load_explicit(&chunk_hook, memory_order_relaxed);
    uint64_t s = atomic_load(&claim);
    for (;;) {
        if ((uint32_t)(s >> 32) != g || (uint32_t)s >= n) return;
        if (!atomic_compare_exchange_weak(&claim, &s, s + 1)) continue;
        const uint32_t c = (uint32_t)s;
        if (hook) hook(c, thread);
        fn(ctx, c, thread);
        if (atomic_fetch_add(&done, 1) + 1 == n && atomic_load(&caller_sleeps))
            futex_wake(&done, 1);
        s = atomic_load(&claim);
    }
}

static void *worker(void *arg) {
    uint32_t seen = 0; /* a job still running when it starts is one it may join */
    my_thread = (int)(uintptr_t)arg;
    in_job = 1;
    for (;;) {
        uint32_t s = atomic_load(&seq);
        if (s == seen || (s & 1)) {
            if (!spin_while(&seq, s)) {
                atomic_fetch_add(&workers_sleep, 1);
                while ((s = atomic_load(&seq)) == seen || (s & 1)) futex_wait(&seq, s);
                atomic_fetch_sub(&workers_sleep, 1);
            }
            continue;
        }
        const moe8_pool_fn fn = atomic_load_explicit(&job_fn, memory_order_relaxed);
        void *ctx = atomic_load_explicit(&job_ctx, memory_order_relaxed);
        const uint32_t n = atomic_load_explicit(&job_n, memory_order_relaxed);
        const int threads = atomic_load_explicit(&job_threads, memory_order_relaxed);
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&seq, memory_order_relaxed) != s) continue; /* rewritten */
        seen = s;
        if (my_thread < threads) run_chunks(s >> 1, n, fn, ctx, my_thread);
    }
    return NULL;
}

/* A child of fork() has none of its parent's workers (fork happens outside
 * a job: the calling thread holds no chunk): it starts its own. */
static void forget_workers(void) {
    atomic_store(&n_workers, 0);
    atomic_store(&workers_sleep, 0);
    pthread_mutex_init(&grow_mu, NULL);
}

/* Workers 1..want exist. */
static void grow(int want) {
    if (want > MAX_WORKERS) want = MAX_WORKERS;
    pthread_mutex_lock(&grow_mu);
    if (spin_ns < 0) {
        pthread_atfork(NULL, NULL, forget_workers);
        const char *e = getenv("MOE8_POOL_SPIN_US");
        const long us = e ? atol(e) : 50;
        spin_ns = (int)((us < 0 ? 0 : us > 100000 ? 100000 : us) * 1000);
    }
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old); /* signals go to the program's own threads */
    while (n_workers < want) {
        pthread_t t;
        pthread_attr_t a;
        const uintptr_t arg = (uintptr_t)(n_workers + 1);
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        const int rc = pthread_create(&t, &a, worker, (void *)arg);
        pthread_attr_destroy(&a);
        if (rc) break; /* fewer workers: the caller and the others run every chunk */
        n_workers++;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_mutex_unlock(&grow_mu);
}

static void run_inline(int64_t n, moe8_pool_fn fn, void *ctx, int thread) {
    const moe8_pool_hook_fn hook = atomic_load_explicit(&chunk_hook, memory_order_relaxed);
    for (int64_t c = 0; c < n; c++) {
        if (hook) hook(c, thread);
        fn(ctx, c, thread);
    }
}

void moe8_pool_run(int n_threads, int64_t n_chunks, moe8_pool_fn fn, void *ctx) {
    int free_ = 0;
    if (n_chunks <= 0) return;
    MOE8_ASSERT(n_chunks <= INT32_MAX);
    if (n_threads <= 1 || n_chunks == 1 || in_job ||
        !atomic_compare_exchange_strong(&busy, &free_, 1)) {
        run_inline(n_chunks, fn, ctx, in_job ? my_thread : 0);
        return;
    }
    in_job = 1;
    my_thread = 0;
    if (n_threads - 1 > n_workers) grow(n_threads - 1);
    const uint32_t g = (atomic_load(&seq) >> 1) + 1, n = (uint32_t)n_chunks;
    atomic_store(&seq, 2 * g - 1); /* odd: the description is being written */
    atomic_store_explicit(&job_fn, fn, memory_order_relaxed);
    atomic_store_explicit(&job_ctx, ctx, memory_order_relaxed);
    atomic_store_explicit(&job_n, n, memory_order_relaxed);
    atomic_store_explicit(&job_threads, n_threads, memory_order_relaxed);
    atomic_store(&done, 0);
    atomic_store(&claim, (uint64_t)g << 32);
    atomic_store(&seq, 2 * g);
    if (atomic_load(&workers_sleep)) futex_wake(&seq, INT_MAX);
    run_chunks(g, n, fn, ctx, 0);
    /* the chunks others still run: spin while they finish, else sleep */
    for (uint32_t d; (d = atomic_load(&done)) != n;) {
        if (spin_while(&done, d)) continue;
        atomic_store(&caller_sleeps, 1);
        while ((d = atomic_load(&done)) != n) futex_wait(&done, d);
        atomic_store(&caller_sleeps, 0);
    }
    in_job = 0;
    atomic_store(&busy, 0);
}
