/*
 * pool.h — the thread pool of the forward pass (pool.c): a job is n chunks,
 * claimed one at a time at run time by whichever threads are awake (the
 * calling thread included), complete when every chunk has run. Not part of
 * the public API.
 */
#ifndef MOE8_POOL_H
#define MOE8_POOL_H

#include <stdint.h>

/* One chunk: fn(ctx, chunk, thread), chunk in [0, n_chunks), thread in
 * [0, n_threads) naming the runner's scratch only (0: the caller). A
 * chunk's arithmetic must not depend on `thread` nor on the other chunks'
 * order: that is what makes results independent of the schedule. */
typedef void (*moe8_pool_fn)(void *ctx, int64_t chunk, int thread);

/* Run chunks [0, n_chunks) of fn on up to n_threads threads and return when
 * all have run. Inline, in order, on the caller (thread 0) when n_threads or
 * n_chunks is 1, when called from inside a chunk, or while another thread's
 * job holds the pool. */
void moe8_pool_run(int n_threads, int64_t n_chunks, moe8_pool_fn fn, void *ctx);

/* The chunk count for `units` units of work (panels, rows, items) on
 * n_threads threads: `per_thread` chunks per thread (so a thread the OS
 * takes away holds up a small share), at most `units`, at least 1. */
int64_t moe8_pool_chunks(int64_t units, int n_threads, int per_thread);

/* [*a, *b): chunk i of n of [0, total), the same cut whatever runs it. */
static inline void moe8_pool_part(int64_t total, int64_t i, int64_t n, int64_t *a, int64_t *b) {
    *a = total * i / n;
    *b = total * (i + 1) / n;
}

/* For tests only: called before every chunk a pool thread (or the caller)
 * runs, e.g. to delay it at random; NULL (the default) calls nothing. */
typedef void (*moe8_pool_hook_fn)(int64_t chunk, int thread);
void moe8_pool_set_chunk_hook(moe8_pool_hook_fn hook);

/* CPUs this process may run on (sched_getaffinity), at least 1. */
int moe8_cpu_count(void);

#endif
