/*
 * kv_disk.c — the prompt cache's disk tier (kv_disk.h; SEMANTICS §10b): keys,
 * the block file format, loading with verification, and the writer thread.
 *
 * File DIR/<key as 32 hex digits>.kvb (little-endian, this machine's layout):
 *   moe8_kvd_head   magic "MOE8KVB\n", version, header size, the folded
 *                   fingerprint, the key, n_tokens (the block's end), KV type,
 *                   block bytes, TP rank and size, kernel table, checksum
 *   int32[n_tokens] every token id from position 0 to the block's end
 *   K/V             [block_bytes] as the pool holds it (kv_pool.h)
 * sum = XXH3 of the header (sum 0), then the ids, then the K/V, chained. A
 * load checks the size, every header field against what it wants, every id
 * against the prompt's and the sum; any difference (or an I/O error) rejects
 * the file: logged, removed, and the caller recomputes the block.
 *
 * Key: two XXH3 chains over the context's folded fingerprint and each
 * block's 16 ids (seeded by the previous block's value), so block i's key
 * names every id up to its end; the ids in the file make a collision
 * harmless (it is rejected, never used).
 *
 * Writing: moe8_kvd_save copies blocks into a queue bounded in bytes (what
 * does not fit is dropped); one thread writes each block to
 * <name>.tmp.<pid>.<n> and renames it (several processes may write the same
 * block: the contents are the same, the last rename wins). A full disk or a
 * directory that cannot be written stops writing (logged once); reading
 * goes on. A load touches the file's time: the size bound removes the least
 * recently used files (kv_disk_dir.c).
 *
 * Does not: fsync (a file torn by a crash fails its checksum), or share a
 * block between fingerprints.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "core/core.h"
#include "model/kv_disk.h"

#define KVD_QUEUE_BYTES ((size_t)512 << 20) /* copies waiting for the writer */

typedef struct kvd_job {
    struct kvd_job *next;
    int32_t first, n;           /* blocks first..first+n-1 */
    int32_t *tokens;            /* [(first + n) * BS] */
    unsigned char *data;        /* [n][block_bytes] */
    size_t bytes;               /* counted in the queue */
} kvd_job;

struct moe8_kv_disk {
    char *dir;
    moe8_kvd_fp fp;
    uint64_t fp64, max_bytes;
    size_t bb;                  /* block bytes */
    /* the loader's (the context's thread) */
    unsigned char *buf;         /* [cap_buf] a file's header and ids */
    size_t cap_buf;
    struct timespec load_time;  /* the use the loads stamp (moe8_kvd_use_now) */
    /* the writer */
    pthread_t thread;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv_job, cv_idle;
    kvd_job *head, *tail;
    size_t queued;              /* bytes of queued jobs */
    int busy, stop;
    int writing;                /* 0: stopped (read-only or full directory) */
    int inject;                 /* tests: errno of the next write */
    double read_s, read_cpu;    /* the loader's (the context's thread): wall, CPU seconds */
    uint64_t dir_bytes;         /* the directory's block files, as last counted plus written */
    moe8_prompt_cache_stats st; /* counters: __atomic */
};

static void count(uint64_t *c, uint64_t v) { __atomic_fetch_add(c, v, __ATOMIC_RELAXED); }

/* ---- keys and format --------------------------------------------------------------- */

uint64_t moe8_kvd_fold(const moe8_kvd_fp *f) {
    uint64_t h = moe8_hash64("moe8 kv disk", 12, MOE8_KVD_VERSION);
    const int32_t v[5] = {f->kv_type, f->tp_rank, f->tp_size, f->float_experts, MOE8_KVD_BS};
    h = moe8_hash64(&f->model_fp, sizeof f->model_fp, h);
    h = moe8_hash64(f->isa, strnlen(f->isa, sizeof f->isa), h);
    h = moe8_hash64(v, sizeof v, h);
    return moe8_hash64(&f->block_bytes, sizeof f->block_bytes, h);
}

void moe8_kvd_keys(const moe8_kv_disk *d, const int32_t *tokens, int32_t n_blocks,
                   moe8_kvd_key *keys) {
    uint64_t lo = d->fp64, hi = moe8_hash64(&d->fp64, sizeof d->fp64, 0x9E3779B97F4A7C15ULL);
    for (int32_t i = 0; i < n_blocks; i++) {
        const int32_t *t = tokens + (size_t)i * MOE8_KVD_BS;
        lo = moe8_hash64(t, MOE8_KVD_BS * sizeof *t, lo);
        hi = moe8_hash64(t, MOE8_KVD_BS * sizeof *t, hi ^ 0xD6E8FEB86659FD93ULL);
        keys[i].lo = lo;
        keys[i].hi = hi;
    }
}

void moe8_kvd_name(moe8_kvd_key key, char name[40]) {
    snprintf(name, 40, "%016llx%016llx" MOE8_KVD_EXT, (unsigned long long)key.hi,
             (unsigned long long)key.lo);
}

uint64_t moe8_kvd_sum(const moe8_kvd_head *h, const int32_t *tokens, const void *data) {
    moe8_kvd_head z = *h;
    z.sum = 0;
    uint64_t s = moe8_hash64(&z, sizeof z, 7);
    s = moe8_hash64(tokens, (size_t)h->n_tokens * sizeof *tokens, s);
    return moe8_hash64(data, (size_t)h->block_bytes, s);
}

static void head_of(const moe8_kv_disk *d, moe8_kvd_key key, int32_t end, moe8_kvd_head *h) {
    memset(h, 0, sizeof *h);
    memcpy(h->magic, MOE8_KVD_MAGIC, 8);
    h->version = MOE8_KVD_VERSION;
    h->head_bytes = sizeof *h;
    h->fp = d->fp64;
    h->key_lo = key.lo;
    h->key_hi = key.hi;
    h->n_tokens = end;
    h->kv_type = d->fp.kv_type;
    h->block_bytes = d->bb;
    h->tp_rank = d->fp.tp_rank;
    h->tp_size = d->fp.tp_size;
    memcpy(h->isa, d->fp.isa, sizeof h->isa);
}

/* A file's last use, set from the clock to the nanosecond (a file system's own
 * times may be coarser than the writes), less `depth` ns: of one prompt's
 * blocks used together the deeper are older, so the bound removes a chain
 * from its end. */
static void use_time(struct timespec t[2], struct timespec base, int32_t depth) {
    t[0] = base;
    t[0].tv_nsec -= depth;
    while (t[0].tv_nsec < 0) t[0].tv_nsec += 1000000000L, t[0].tv_sec--;
    t[1] = t[0];
}

static double thread_cpu(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- loading ------------------------------------------------------------------------ */

static int read_at(int fd, void *p, size_t n, off_t off) {
    unsigned char *b = p;
    while (n > 0) {
        ssize_t r = pread(fd, b, n, off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        b += r, n -= (size_t)r, off += r;
    }
    return 0;
}

/* Why file h (of `size` bytes) is not the block wanted, or NULL. */
static const char *head_check(const moe8_kvd_head *h, const moe8_kvd_head *want, off_t size) {
    if (memcmp(h->magic, MOE8_KVD_MAGIC, 8)) return "not a block file (magic)";
    if (h->version != MOE8_KVD_VERSION || h->head_bytes != sizeof *h) return "another version";
    if (h->fp != want->fp || memcmp(h->isa, want->isa, sizeof h->isa))
        return "another model, kernel table or settings (fingerprint)";
    if (h->kv_type != want->kv_type || h->block_bytes != want->block_bytes) return "another KV type";
    if (h->tp_rank != want->tp_rank || h->tp_size != want->tp_size) return "another TP layout";
    if (h->key_lo != want->key_lo || h->key_hi != want->key_hi || h->n_tokens != want->n_tokens)
        return "another key or length";
    if ((uint64_t)size != sizeof *h + (uint64_t)h->n_tokens * 4 + h->block_bytes)
        return "truncated or overlong";
    return NULL;
}

static void reject(moe8_kv_disk *d, const char *path, const char *why) {
    moe8_log(MOE8_LOG_WARN, "prompt cache: '%s' rejected (%s); its block is recomputed", path, why);
    count(&d->st.rejected, 1);
    unlink(path);
}

int moe8_kvd_load(moe8_kv_disk *d, moe8_kvd_key key, const int32_t *tokens, int32_t end,
                  void *data) {
    char name[40], path[4200];
    moe8_kvd_head h, want;
    struct stat sb;
    const char *why = NULL;
    int fd;
    const double t0 = moe8_time_s(), c0 = thread_cpu();
    moe8_kvd_name(key, name);
    snprintf(path, sizeof path, "%s/%s", d->dir, name);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
        if (errno == ENOENT) {
            count(&d->st.misses, 1);
            return 1;
        }
        moe8_log(MOE8_LOG_WARN, "prompt cache: cannot open '%s': %s", path, strerror(errno));
        count(&d->st.rejected, 1);
        return -1;
    }
    const size_t head_ids = sizeof h + (size_t)end * 4; /* read at once */
    if (head_ids > d->cap_buf) {
        unsigned char *b = realloc(d->buf, head_ids);
        if (!b) {
            close(fd);
            return 1;
        }
        d->buf = b;
        d->cap_buf = head_ids;
    }
    const int32_t *ids = (const int32_t *)(void *)(d->buf + sizeof h);
    head_of(d, key, end, &want);
    if (fstat(fd, &sb)) why = "cannot stat it";
    else if ((uint64_t)sb.st_size < head_ids) why = "truncated";
    else if (read_at(fd, d->buf, head_ids, 0)) why = "cannot read its header and ids";
    if (!why) memcpy(&h, d->buf, sizeof h), why = head_check(&h, &want, sb.st_size);
    if (!why && memcmp(ids, tokens, (size_t)end * 4)) why = "its token ids differ";
    if (!why && read_at(fd, data, d->bb, (off_t)head_ids)) why = "cannot read its data";
    if (!why && moe8_kvd_sum(&h, ids, data) != h.sum) why = "checksum";
    if (!why) { /* its last use, for the LRU bound */
        struct timespec t[2];
        use_time(t, d->load_time, end / MOE8_KVD_BS);
        futimens(fd, t);
    }
    close(fd);
    d->read_s += moe8_time_s() - t0;
    d->read_cpu += thread_cpu() - c0;
    if (why) {
        reject(d, path, why);
        return -1;
    }
    count(&d->st.hits, 1);
    count(&d->st.read_bytes, (uint64_t)sb.st_size);
    return 0;
}

/* ---- writing -------------------------------------------------------------------------- */

static int write_all(int fd, const struct iovec *iov, int n) {
    struct iovec v[3];
    memcpy(v, iov, (size_t)n * sizeof *v);
    for (int i = 0; i < n;) {
        ssize_t w = writev(fd, v + i, n - i);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        while (i < n && (size_t)w >= v[i].iov_len) w -= (ssize_t)v[i++].iov_len;
        if (i < n) {
            v[i].iov_base = (char *)v[i].iov_base + w;
            v[i].iov_len -= (size_t)w;
        }
    }
    return 0;
}

/* Writing stopped for good (logged once): the directory cannot take files. */
static void stop_writing(moe8_kv_disk *d, const char *path, int e) {
    if (__atomic_exchange_n(&d->writing, 0, __ATOMIC_RELAXED))
        moe8_log(MOE8_LOG_WARN, "prompt cache: cannot write '%s': %s; writing stops, reading "
                 "goes on", path, strerror(e));
}

/* One block file: to a temporary name, then renamed. 0, or -1 (logged). */
static int write_block(moe8_kv_disk *d, moe8_kvd_key key, const int32_t *tokens, int32_t end,
                       const void *data, struct timespec base) {
    static unsigned long serial;
    char name[40], path[4200], tmp[4300];
    moe8_kvd_head h;
    struct timespec t[2];
    int fd, e = 0;
    moe8_kvd_name(key, name);
    snprintf(path, sizeof path, "%s/%s", d->dir, name);
    use_time(t, base, end / MOE8_KVD_BS);
    if (utimensat(AT_FDCWD, path, t, 0) == 0) return 0; /* there already: now used */
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%lu", path, (long)getpid(),
             __atomic_add_fetch(&serial, 1, __ATOMIC_RELAXED));
    head_of(d, key, end, &h);
    h.sum = moe8_kvd_sum(&h, tokens, data);
    const struct iovec iov[3] = {{&h, sizeof h}, {(void *)tokens, (size_t)end * 4},
                                 {(void *)data, d->bb}};
    e = __atomic_exchange_n(&d->inject, 0, __ATOMIC_RELAXED);
    fd = e ? -1 : open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && !e) e = errno;
    if (fd >= 0 && write_all(fd, iov, 3)) e = errno ? errno : EIO;
    if (fd >= 0 && !e) futimens(fd, t);
    if (fd >= 0 && close(fd) && !e) e = errno;
    if (!e && rename(tmp, path)) e = errno;
    if (!e) {
        const uint64_t n = sizeof h + (uint64_t)end * 4 + d->bb;
        count(&d->st.written_bytes, n);
        count(&d->st.written_blocks, 1);
        d->dir_bytes += n;
        return 0;
    }
    unlink(tmp);
    if (e == ENOSPC || e == EDQUOT || e == EROFS || e == EACCES || e == EPERM) stop_writing(d, tmp, e);
    else moe8_log(MOE8_LOG_WARN, "prompt cache: cannot write '%s': %s", tmp, strerror(e));
    return -1;
}

static void write_job(moe8_kv_disk *d, const kvd_job *j) {
    moe8_kvd_key *keys = malloc((size_t)(j->first + j->n) * sizeof *keys);
    int32_t done = 0;
    struct timespec base;
    clock_gettime(CLOCK_REALTIME, &base);
    if (keys) {
        moe8_kvd_keys(d, j->tokens, j->first + j->n, keys);
        for (; done < j->n && __atomic_load_n(&d->writing, __ATOMIC_RELAXED); done++) {
            const int32_t b = j->first + done;
            if (write_block(d, keys[b], j->tokens, (b + 1) * MOE8_KVD_BS,
                            j->data + (size_t)done * d->bb, base))
                break;
        }
    }
    free(keys);
    if (done < j->n) count(&d->st.dropped, (uint64_t)(j->n - done));
    if (d->max_bytes && d->dir_bytes > d->max_bytes) {
        uint64_t ev = 0;
        int fd = moe8_kvd_lock(d->dir);
        d->dir_bytes = moe8_kvd_sweep(d->dir, d->max_bytes, &ev);
        if (fd >= 0) close(fd);
        count(&d->st.evictions, ev);
    }
}

static void *writer(void *arg) {
    moe8_kv_disk *d = arg;
    pthread_mutex_lock(&d->mu);
    for (;;) {
        while (!d->head && !d->stop) pthread_cond_wait(&d->cv_job, &d->mu);
        if (!d->head) break;
        kvd_job *j = d->head;
        d->head = j->next;
        if (!d->head) d->tail = NULL;
        d->busy = 1;
        pthread_mutex_unlock(&d->mu);
        write_job(d, j);
        pthread_mutex_lock(&d->mu);
        d->busy = 0;
        d->queued -= j->bytes;
        free(j->tokens);
        free(j->data);
        free(j);
        if (!d->head) pthread_cond_broadcast(&d->cv_idle);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

int32_t moe8_kvd_save(moe8_kv_disk *d, const int32_t *tokens, int32_t first, int32_t n,
                      const void *const *data) {
    kvd_job *j = NULL;
    int32_t fit = 0;
    if (n < 1) return 0;
    if (__atomic_load_n(&d->writing, __ATOMIC_RELAXED)) {
        pthread_mutex_lock(&d->mu);
        const size_t room = d->queued < KVD_QUEUE_BYTES ? KVD_QUEUE_BYTES - d->queued : 0;
        fit = (int32_t)(room / d->bb < (size_t)n ? room / d->bb : (size_t)n);
        d->queued += (size_t)fit * d->bb; /* reserved */
        pthread_mutex_unlock(&d->mu);
    }
    if (fit > 0 && (j = calloc(1, sizeof *j))) {
        j->first = first;
        j->n = fit;
        j->bytes = (size_t)fit * d->bb;
        j->tokens = malloc((size_t)(first + fit) * MOE8_KVD_BS * sizeof *tokens);
        j->data = malloc(j->bytes);
    }
    if (j && (!j->tokens || !j->data)) {
        free(j->tokens);
        free(j->data);
        free(j);
        j = NULL;
    }
    pthread_mutex_lock(&d->mu);
    if (!j) {
        d->queued -= (size_t)fit * d->bb;
        fit = 0;
    } else {
        memcpy(j->tokens, tokens, (size_t)(first + fit) * MOE8_KVD_BS * sizeof *tokens);
        for (int32_t i = 0; i < fit; i++) memcpy(j->data + (size_t)i * d->bb, data[i], d->bb);
        if (d->tail) d->tail->next = j;
        else d->head = j;
        d->tail = j;
        pthread_cond_signal(&d->cv_job);
    }
    pthread_mutex_unlock(&d->mu);
    if (fit < n) count(&d->st.dropped, (uint64_t)(n - fit));
    return fit;
}

/* ---- open / close ---------------------------------------------------------------------- */

static int mkdir_p(const char *path) {
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s", path) >= (int)sizeof tmp) return -1;
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, 0755) && errno != EEXIST) return -1;
            *p = '/';
        }
    return mkdir(tmp, 0755) && errno != EEXIST ? -1 : 0;
}

moe8_status moe8_kvd_open(const char *dir, uint64_t max_bytes, const moe8_kvd_fp *fp,
                          moe8_kv_disk **out, moe8_error *err) {
    struct stat sb;
    moe8_kv_disk *d;
    int fd;
    *out = NULL;
    if (!dir || !dir[0]) return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "prompt_cache_dir is empty");
    if (mkdir_p(dir) && errno != EACCES && errno != EROFS)
        return moe8_fail(err, MOE8_ERR_IO, -1, "prompt cache: cannot make '%s': %s", dir,
                         strerror(errno));
    if (stat(dir, &sb) || !S_ISDIR(sb.st_mode))
        return moe8_fail(err, MOE8_ERR_IO, -1, "prompt cache: '%s' is not a directory", dir);
    if (!(d = calloc(1, sizeof *d)) || !(d->dir = strdup(dir))) {
        free(d);
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "out of memory");
    }
    d->fp = *fp;
    d->fp64 = moe8_kvd_fold(fp);
    d->bb = fp->block_bytes;
    d->max_bytes = max_bytes;
    d->writing = 1;
    d->st.enabled = 1;
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv_job, NULL);
    pthread_cond_init(&d->cv_idle, NULL);
    if (access(dir, W_OK)) stop_writing(d, dir, errno);
    fd = moe8_kvd_lock(dir);
    d->dir_bytes = moe8_kvd_sweep(dir, max_bytes, &d->st.evictions);
    if (fd >= 0) close(fd);
    if (pthread_create(&d->thread, NULL, writer, d)) {
        moe8_kvd_close(d);
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "prompt cache: cannot start its writer thread");
    }
    d->started = 1;
    *out = d;
    return MOE8_OK;
}

void moe8_kvd_flush(moe8_kv_disk *d) {
    pthread_mutex_lock(&d->mu);
    while (d->head || d->busy) pthread_cond_wait(&d->cv_idle, &d->mu);
    pthread_mutex_unlock(&d->mu);
}

void moe8_kvd_close(moe8_kv_disk *d) {
    if (!d) return;
    if (d->started) {
        pthread_mutex_lock(&d->mu);
        d->stop = 1;
        pthread_cond_signal(&d->cv_job);
        pthread_mutex_unlock(&d->mu);
        pthread_join(d->thread, NULL);
    }
    pthread_mutex_destroy(&d->mu);
    pthread_cond_destroy(&d->cv_job);
    pthread_cond_destroy(&d->cv_idle);
    free(d->buf);
    free(d->dir);
    free(d);
}

void moe8_kvd_stats(moe8_kv_disk *d, moe8_prompt_cache_stats *out) {
    memset(out, 0, sizeof *out);
    if (!d) return;
    out->enabled = 1;
    out->writing = __atomic_load_n(&d->writing, __ATOMIC_RELAXED);
    out->hits = __atomic_load_n(&d->st.hits, __ATOMIC_RELAXED);
    out->misses = __atomic_load_n(&d->st.misses, __ATOMIC_RELAXED);
    out->read_bytes = __atomic_load_n(&d->st.read_bytes, __ATOMIC_RELAXED);
    out->written_bytes = __atomic_load_n(&d->st.written_bytes, __ATOMIC_RELAXED);
    out->written_blocks = __atomic_load_n(&d->st.written_blocks, __ATOMIC_RELAXED);
    out->evictions = __atomic_load_n(&d->st.evictions, __ATOMIC_RELAXED);
    out->rejected = __atomic_load_n(&d->st.rejected, __ATOMIC_RELAXED);
    out->dropped = __atomic_load_n(&d->st.dropped, __ATOMIC_RELAXED);
    out->read_seconds = d->read_s;
    out->read_cpu_seconds = d->read_cpu;
}

void moe8_kvd_use_now(moe8_kv_disk *d) { clock_gettime(CLOCK_REALTIME, &d->load_time); }

void moe8_kvd_inject_write_error(moe8_kv_disk *d, int e) {
    __atomic_store_n(&d->inject, e, __ATOMIC_RELAXED);
}
