/*
 * kv_disk.c — the prompt cache's disk tier (kv_disk.h; SEMANTICS §10b): keys,
 * the run file format, loading with verification, and the writer thread.
 *
 * File DIR/<first block's key as 32 hex digits>.kvr (little-endian, this
 * machine's layout), the blocks first..first+n-1 of one prefix:
 *   moe8_kvd_head        magic "MOE8KVR\n", version, header size, the folded
 *                        fingerprint, the key, first and n, KV type, TP rank
 *                        and size, block bytes, where the K/V start, the
 *                        kernel table, the header's checksum
 *   moe8_kvd_ent[n]      each block's key and checksum
 *   int32[(first+n)*BS]  every token id from position 0 to the run's end
 *   zeros                up to data_off (a multiple of 4096)
 *   K/V [n][block_bytes] as the pool holds each block (kv_pool.h)
 *   snapshots [n_snap][snap_bytes]  hybrids: the recurrent state at the end
 *                        of the blocks that had one (state_pool.h), in order
 * The header's sum is XXH3 of the header (sum 0), the index and the ids
 * before `first`; block i's sum is XXH3 of its 16 ids, then its K/V; its
 * snapshot's, XXH3 of the snapshot seeded by the block's key. A load
 * checks the size and every header field against what it wants, the ids
 * before the run against the prompt's, then block by block its key, its ids
 * and its sum (and the sum of the deepest snapshot used): a block whose key
 * differs ends the run's use (the prompt went another way there); any other
 * difference (or an I/O error) rejects the file: logged, removed, and the
 * caller recomputes from that block (the blocks before it are good and are
 * used, but are written again).
 *
 * Key: two XXH3 chains over the context's folded fingerprint and each
 * block's 16 ids (seeded by the previous block's value), so block i's key
 * names every id up to its end; the ids in the file make a collision
 * harmless (it is rejected, never used).
 *
 * Reading: a prompt's run files are found by key, in order: the file named
 * by block k's key holds k and the blocks written with it; the next file is
 * named by the key of the first block the run did not give. A run costs an
 * open, fstat, two preads (header; index and ids), one preadv straight into
 * the pool's blocks, a time stamp and a close, whatever its length.
 *
 * Writing: moe8_kvd_save copies blocks into a queue bounded in bytes (what
 * does not fit is dropped); one thread writes each job as one run file to
 * <name>.tmp.<pid>.<n> and renames it. Several processes may write the same
 * blocks: a run there already keeps the blocks it starts with that are the
 * job's (it is only touched), and the job's others become the run that
 * follows it (so a prompt that leaves another's run midway still gets
 * its own blocks written). A
 * full disk or a directory that cannot be written stops writing (logged
 * once); reading goes on. A load touches the file's time: the size bound
 * removes the least recently used files (kv_disk_dir.c).
 *
 * Does not: fsync (a file torn by a crash fails its checksums), or share a
 * block between fingerprints.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "core/core.h"
#include "model/kv_disk.h"

#define KVD_QUEUE_BYTES ((size_t)512 << 20) /* copies waiting for the writer */
#define KVD_IOV 1024                        /* iovecs per preadv (IOV_MAX) */
#ifdef MADV_POPULATE_WRITE
#define KVD_POPULATE_WRITE MADV_POPULATE_WRITE
#else
#define KVD_POPULATE_WRITE 23 /* Linux 5.14's value; older kernels answer EINVAL */
#endif

typedef struct kvd_job {
    struct kvd_job *next;
    int32_t first, n;           /* blocks first..first+n-1 */
    int32_t *tokens;            /* [(first + n) * BS] */
    unsigned char *data;        /* [n][block_bytes], then [n_snap][snap_bytes] */
    int32_t *snap;              /* [n] block i's snapshot among the job's, or -1 */
    int32_t n_snap;
    size_t bytes;               /* counted in the queue */
} kvd_job;

struct moe8_kv_disk {
    char *dir;
    moe8_kvd_fp fp;
    uint64_t fp64, max_bytes;
    size_t bb;                  /* block bytes */
    /* the loader's (the context's thread) */
    unsigned char *buf;         /* [cap_buf] a run's index and ids */
    size_t cap_buf;
    struct timespec load_time;  /* the use the loads stamp (moe8_kvd_use_now) */
    int run_fd;                 /* the run moe8_kvd_open_run opened, or -1 */
    int32_t run_m;              /* its blocks that match the prompt */
    moe8_kvd_head run_h;
    const char *run_bad;        /* why the block after those m does not do, or NULL */
    char run_path[4200];
    unsigned char *snap_buf;    /* [snap_bytes] the deepest snapshot read (moe8_kvd_snap) */
    int32_t snap_block;         /* the block it ends, or -1 */
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
    uint64_t dir_bytes;         /* the directory's run files, as last counted plus written */
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
    h = moe8_hash64(&f->snap_bytes, sizeof f->snap_bytes, h);
    return moe8_hash64(&f->block_bytes, sizeof f->block_bytes, h);
}

void moe8_kvd_chain(uint64_t fp64, const int32_t *tokens, int32_t n_blocks, moe8_kvd_key *keys) {
    uint64_t lo = fp64, hi = moe8_hash64(&fp64, sizeof fp64, 0x9E3779B97F4A7C15ULL);
    for (int32_t i = 0; i < n_blocks; i++) {
        const int32_t *t = tokens + (size_t)i * MOE8_KVD_BS;
        lo = moe8_hash64(t, MOE8_KVD_BS * sizeof *t, lo);
        hi = moe8_hash64(t, MOE8_KVD_BS * sizeof *t, hi ^ 0xD6E8FEB86659FD93ULL);
        keys[i].lo = lo;
        keys[i].hi = hi;
    }
}

void moe8_kvd_keys(const moe8_kv_disk *d, const int32_t *tokens, int32_t n_blocks,
                   moe8_kvd_key *keys) {
    moe8_kvd_chain(d->fp64, tokens, n_blocks, keys);
}

void moe8_kvd_name(moe8_kvd_key key, char name[40]) {
    snprintf(name, 40, "%016llx%016llx" MOE8_KVD_EXT, (unsigned long long)key.hi,
             (unsigned long long)key.lo);
}

uint64_t moe8_kvd_data_off(int32_t first, int32_t n_blocks) {
    const uint64_t meta = sizeof(moe8_kvd_head) + (uint64_t)n_blocks * sizeof(moe8_kvd_ent) +
                          ((uint64_t)first + (uint64_t)n_blocks) * MOE8_KVD_BS * 4;
    return (meta + MOE8_KVD_ALIGN - 1) / MOE8_KVD_ALIGN * MOE8_KVD_ALIGN;
}

uint64_t moe8_kvd_head_sum(const moe8_kvd_head *h, const moe8_kvd_ent *index, const int32_t *ids) {
    moe8_kvd_head z = *h;
    z.sum = 0;
    uint64_t s = moe8_hash64(&z, sizeof z, 7);
    s = moe8_hash64(index, (size_t)h->n_blocks * sizeof *index, s);
    return moe8_hash64(ids, (size_t)h->first * MOE8_KVD_BS * sizeof *ids, s);
}

uint64_t moe8_kvd_block_sum(const int32_t *ids, const void *data, size_t block_bytes) {
    return moe8_hash64(data, block_bytes, moe8_hash64(ids, MOE8_KVD_BS * sizeof *ids, 11));
}

uint64_t moe8_kvd_file_bytes(const moe8_kvd_head *h) {
    return h->data_off + (uint64_t)h->n_blocks * h->block_bytes +
           (uint64_t)h->n_snap * h->snap_bytes;
}

const char *moe8_kvd_index_check(const moe8_kvd_head *h, const moe8_kvd_ent *index) {
    int64_t next = 0;
    for (int32_t i = 0; i < h->n_blocks; i++)
        if (index[i].snap >= 0 && index[i].snap != next++) return "bad snapshot places";
        else if (index[i].snap < -1) return "bad snapshot places";
    return next == h->n_snap ? NULL : "bad snapshot count";
}

static void head_of(const moe8_kv_disk *d, moe8_kvd_key key, int32_t first, int32_t n,
                    moe8_kvd_head *h) {
    memset(h, 0, sizeof *h);
    memcpy(h->magic, MOE8_KVD_MAGIC, 8);
    h->version = MOE8_KVD_VERSION;
    h->head_bytes = sizeof *h;
    h->fp = d->fp64;
    h->key_lo = key.lo;
    h->key_hi = key.hi;
    h->first = first;
    h->n_blocks = n;
    h->kv_type = d->fp.kv_type;
    h->tp_rank = d->fp.tp_rank;
    h->tp_size = d->fp.tp_size;
    h->block_bytes = d->bb;
    h->snap_bytes = d->fp.snap_bytes;
    h->data_off = moe8_kvd_data_off(first, n);
    memcpy(h->isa, d->fp.isa, sizeof h->isa);
}

/* A file's last use, set from the clock to the nanosecond (a file system's own
 * times may be coarser than the writes), less `depth` ns: of one prompt's
 * runs used together the deeper are older, so the bound removes a chain
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

/* Fault in the pages of data[0..n) (bb bytes each) with one madvise per
 * stretch of adjacent blocks: a new context's pool is untouched memory, and
 * a page fault per 4 KiB costs more than the read (13x on a VM measured,
 * SEMANTICS §10b). Best effort: a kernel without MADV_POPULATE_WRITE (5.14)
 * faults them in as preadv writes. */
static void populate(void *const *data, int32_t n, size_t bb) {
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    for (int32_t i = 0; i < n;) {
        int32_t k = i + 1;
        while (k < n && (char *)data[k] == (char *)data[k - 1] + bb) k++;
        const uintptr_t a = (uintptr_t)data[i] & ~(page - 1);
        const uintptr_t e = ((uintptr_t)data[k - 1] + bb + page - 1) & ~(page - 1);
        if (madvise((void *)a, e - a, KVD_POPULATE_WRITE) && errno == EINVAL) return;
        i = k;
    }
}

/* n blocks of bb bytes from off into data[i], KVD_IOV at a time. */
static int read_blocks(int fd, void *const *data, int32_t n, size_t bb, off_t off) {
    struct iovec v[KVD_IOV];
    populate(data, n, bb);
    for (int32_t i = 0; i < n;) {
        int c = 0;
        for (; c < KVD_IOV && i + c < n; c++) v[c].iov_base = data[i + c], v[c].iov_len = bb;
        for (int j = 0; j < c;) { /* short reads: go on where it stopped */
            ssize_t r = preadv(fd, v + j, c - j, off);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) return -1;
            off += r;
            while (j < c && (size_t)r >= v[j].iov_len) r -= (ssize_t)v[j++].iov_len;
            if (j < c) v[j].iov_base = (char *)v[j].iov_base + r, v[j].iov_len -= (size_t)r;
        }
        i += c;
    }
    return 0;
}

/* Why the header h of a file of `size` bytes is not the run wanted, or NULL. */
static const char *head_check(const moe8_kvd_head *h, const moe8_kvd_head *want, off_t size) {
    if (memcmp(h->magic, MOE8_KVD_MAGIC, 8)) return "not a run file (magic)";
    if (h->version != MOE8_KVD_VERSION || h->head_bytes != sizeof *h) return "another version";
    if (h->fp != want->fp || memcmp(h->isa, want->isa, sizeof h->isa))
        return "another model, kernel table or settings (fingerprint)";
    if (h->kv_type != want->kv_type || h->block_bytes != want->block_bytes) return "another KV type";
    if (h->snap_bytes != want->snap_bytes) return "another recurrent-state size";
    if (h->tp_rank != want->tp_rank || h->tp_size != want->tp_size) return "another TP layout";
    if (h->key_lo != want->key_lo || h->key_hi != want->key_hi || h->first != want->first)
        return "another key or place";
    if (h->n_blocks < 1 || h->n_blocks > (1 << 24) || h->n_snap < 0 || h->n_snap > h->n_blocks ||
        (h->n_snap && !h->snap_bytes) || h->data_off != moe8_kvd_data_off(h->first, h->n_blocks))
        return "a bad header (block or snapshot count, data offset)";
    if ((uint64_t)size != moe8_kvd_file_bytes(h)) return "truncated or overlong";
    return NULL;
}

static void reject(moe8_kv_disk *d, const char *path, const char *why) {
    moe8_log(MOE8_LOG_WARN, "prompt cache: '%s' rejected (%s); its blocks are recomputed", path,
             why);
    count(&d->st.rejected, 1);
    unlink(path);
}

/* The open run's index and ids into d->buf, checked against the prompt: the
 * blocks it gives, or -1 with *why. */
static int32_t run_match(moe8_kv_disk *d, const moe8_kvd_key *keys, const int32_t *tokens,
                         int32_t k, int32_t nb, const char **why) {
    const moe8_kvd_head *h = &d->run_h;
    const size_t meta = (size_t)h->data_off - sizeof *h;
    if (meta > d->cap_buf) {
        unsigned char *b = realloc(d->buf, meta);
        if (!b) return *why = "out of memory for its index", -1;
        d->buf = b;
        d->cap_buf = meta;
    }
    if (read_at(d->run_fd, d->buf, meta, sizeof *h)) return *why = "cannot read its index", -1;
    const moe8_kvd_ent *ix = (const moe8_kvd_ent *)(void *)d->buf;
    const int32_t *ids = (const int32_t *)(void *)(ix + h->n_blocks);
    if (moe8_kvd_head_sum(h, ix, ids) != h->sum) return *why = "header checksum", -1;
    if ((*why = moe8_kvd_index_check(h, ix))) return -1;
    if (memcmp(ids, tokens, (size_t)k * MOE8_KVD_BS * 4)) return *why = "its token ids differ", -1;
    int32_t m = 0;
    for (; m < h->n_blocks && k + m < nb; m++) {
        const size_t at = (size_t)(k + m) * MOE8_KVD_BS;
        if (ix[m].key_lo != keys[k + m].lo || ix[m].key_hi != keys[k + m].hi) break;
        if (memcmp(ids + at, tokens + at, MOE8_KVD_BS * 4)) {
            d->run_bad = "its token ids differ";
            break;
        }
    }
    if (m == 0) return *why = d->run_bad ? d->run_bad : "its index does not start with its key", -1;
    return m;
}

int32_t moe8_kvd_open_run(moe8_kv_disk *d, const moe8_kvd_key *keys, const int32_t *tokens,
                          int32_t k, int32_t nb) {
    char name[40];
    moe8_kvd_head want;
    struct stat sb;
    const char *why = NULL;
    int32_t m = -1;
    const double t0 = moe8_time_s(), c0 = thread_cpu();
    MOE8_ASSERT(d->run_fd < 0 && k < nb);
    moe8_kvd_name(keys[k], name);
    snprintf(d->run_path, sizeof d->run_path, "%s/%s", d->dir, name);
    d->run_bad = NULL;
    if ((d->run_fd = open(d->run_path, O_RDONLY | O_CLOEXEC)) < 0) {
        if (errno == ENOENT) {
            count(&d->st.misses, 1);
        } else {
            moe8_log(MOE8_LOG_WARN, "prompt cache: cannot open '%s': %s", d->run_path,
                     strerror(errno));
            count(&d->st.rejected, 1);
        }
        return 0;
    }
    head_of(d, keys[k], k, 1, &want);
    if (fstat(d->run_fd, &sb)) why = "cannot stat it";
    else if ((uint64_t)sb.st_size < sizeof d->run_h) why = "truncated";
    else if (read_at(d->run_fd, &d->run_h, sizeof d->run_h, 0)) why = "cannot read its header";
    else why = head_check(&d->run_h, &want, sb.st_size);
    if (!why) m = run_match(d, keys, tokens, k, nb, &why);
    if (why) {
        close(d->run_fd);
        d->run_fd = -1;
        reject(d, d->run_path, why);
        m = 0;
    }
    d->run_m = m;
    d->read_s += moe8_time_s() - t0;
    d->read_cpu += thread_cpu() - c0;
    return m;
}

static const char snap_bad[] = "snapshot checksum";

/* The snapshot of the deepest of the open run's first `good` blocks that has
 * one, into d->snap_buf: NULL, or why not (snap_bad: its checksum). */
static const char *read_snap(moe8_kv_disk *d, int32_t good) {
    const moe8_kvd_head *h = &d->run_h;
    const moe8_kvd_ent *ix = (const moe8_kvd_ent *)(void *)d->buf;
    int32_t i = good - 1;
    while (i >= 0 && ix[i].snap < 0) i--;
    if (i < 0) return NULL;
    const off_t at = (off_t)(h->data_off + (uint64_t)h->n_blocks * h->block_bytes +
                             (uint64_t)ix[i].snap * h->snap_bytes);
    if (read_at(d->run_fd, d->snap_buf, h->snap_bytes, at)) return "cannot read a snapshot";
    if (moe8_hash64(d->snap_buf, h->snap_bytes, ix[i].key_lo) != ix[i].snap_sum) {
        d->snap_block = -1; /* its bytes are gone */
        return snap_bad;
    }
    d->snap_block = h->first + i;
    return NULL;
}

const void *moe8_kvd_snap(const moe8_kv_disk *d, int32_t *block) {
    *block = d->snap_block;
    return d->snap_block >= 0 ? d->snap_buf : NULL;
}

int32_t moe8_kvd_read_run(moe8_kv_disk *d, int32_t n, void *const *data, int *kept) {
    const moe8_kvd_head *h = &d->run_h;
    const moe8_kvd_ent *ix = (const moe8_kvd_ent *)(void *)d->buf;
    const int32_t *ids = (const int32_t *)(void *)(ix + h->n_blocks);
    const char *why = NULL;
    int32_t good = 0;
    const double t0 = moe8_time_s(), c0 = thread_cpu();
    MOE8_ASSERT(d->run_fd >= 0 && n <= d->run_m);
    if (read_blocks(d->run_fd, data, n, d->bb, (off_t)h->data_off)) why = "cannot read its data";
    for (; !why && good < n; good++) {
        const int32_t *bid = ids + (size_t)(h->first + good) * MOE8_KVD_BS;
        if (moe8_kvd_block_sum(bid, data[good], d->bb) != ix[good].sum) {
            why = "checksum";
            break;
        }
    }
    if (!why) why = d->run_bad;
    if (!why && good > 0 && h->n_snap) why = read_snap(d, good);
    if (why) good = why == snap_bad ? 0 : good;
    if (!why) { /* its last use, for the LRU bound */
        struct timespec t[2];
        use_time(t, d->load_time, h->first);
        futimens(d->run_fd, t);
    }
    close(d->run_fd);
    d->run_fd = -1;
    *kept = why == NULL;
    if (why) reject(d, d->run_path, why);
    count(&d->st.hits, (uint64_t)good);
    count(&d->st.read_bytes, (uint64_t)good * d->bb);
    d->read_s += moe8_time_s() - t0;
    d->read_cpu += thread_cpu() - c0;
    return good;
}

/* ---- writing -------------------------------------------------------------------------- */

static int write_all(int fd, struct iovec *v, int n) {
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

/* How many of blocks first..first+n-1 (keys[0..n)) the valid-looking run of
 * this fingerprint at path holds, from its start (touched when any: now
 * used); 0 when there is none. */
static int32_t have_run(const moe8_kv_disk *d, const char *path, const moe8_kvd_key *keys,
                        int32_t first, int32_t n, const struct timespec t[2]) {
    moe8_kvd_head h, want;
    moe8_kvd_ent *ix = NULL;
    struct stat sb;
    int32_t c = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    head_of(d, keys[0], first, 1, &want);
    if (!fstat(fd, &sb) && !read_at(fd, &h, sizeof h, 0) && !head_check(&h, &want, sb.st_size)) {
        const int32_t k = h.n_blocks < n ? h.n_blocks : n;
        if ((ix = malloc((size_t)k * sizeof *ix)) && !read_at(fd, ix, (size_t)k * sizeof *ix, sizeof h))
            while (c < k && ix[c].key_lo == keys[c].lo && ix[c].key_hi == keys[c].hi) c++;
    }
    if (c > 0) futimens(fd, t);
    free(ix);
    close(fd);
    return c;
}

/* Blocks first..first+n-1 of job j (its keys) as one run file: to a
 * temporary name, then renamed. A run there already that starts with some
 * of them keeps them; the rest are written as the run that follows it. 0,
 * or -1 (logged). */
static int write_run(moe8_kv_disk *d, const moe8_kvd_key *keys, const kvd_job *j,
                     struct timespec base) {
    const int32_t *tokens = j->tokens;
    int32_t first = j->first, n = j->n, skip = 0, s0 = 0;
    static unsigned long serial;
    static const unsigned char zeros[MOE8_KVD_ALIGN];
    char name[40], path[4200], tmp[4300];
    moe8_kvd_head h;
    moe8_kvd_ent *ix;
    struct timespec t[2];
    int fd, e = 0;
    for (int32_t c = n; c > 0 && skip < n; skip += c) { /* past the runs there already */
        moe8_kvd_name(keys[first + skip], name);
        snprintf(path, sizeof path, "%s/%s", d->dir, name);
        use_time(t, base, first + skip);
        c = have_run(d, path, keys + first + skip, first + skip, n - skip, t);
        if (c == 0) break;
    }
    if (skip >= n) return 0;
    for (int32_t i = 0; i < skip; i++) s0 += j->snap[i] >= 0; /* snapshots not written */
    const unsigned char *kv = j->data + (size_t)skip * d->bb;
    const unsigned char *snaps = j->data + (size_t)n * d->bb + (size_t)s0 * d->fp.snap_bytes;
    first += skip, n -= skip;
    if (!(ix = malloc((size_t)n * sizeof *ix))) return -1;
    head_of(d, keys[first], first, n, &h);
    h.n_snap = j->n_snap - s0;
    for (int32_t i = 0; i < n; i++) {
        const int32_t sn = j->snap[skip + i] < 0 ? -1 : j->snap[skip + i] - s0;
        ix[i].key_lo = keys[first + i].lo;
        ix[i].key_hi = keys[first + i].hi;
        ix[i].sum = moe8_kvd_block_sum(tokens + (size_t)(first + i) * MOE8_KVD_BS,
                                       kv + (size_t)i * d->bb, d->bb);
        ix[i].snap = sn;
        ix[i].snap_sum = sn < 0 ? 0 : moe8_hash64(snaps + (size_t)sn * h.snap_bytes,
                                                  h.snap_bytes, ix[i].key_lo);
    }
    h.sum = moe8_kvd_head_sum(&h, ix, tokens);
    const size_t ids = (size_t)(first + n) * MOE8_KVD_BS * 4;
    const size_t meta = sizeof h + (size_t)n * sizeof *ix + ids;
    struct iovec iov[6] = {{&h, sizeof h}, {ix, (size_t)n * sizeof *ix}, {(void *)tokens, ids},
                           {(void *)zeros, (size_t)h.data_off - meta},
                           {(void *)kv, (size_t)n * d->bb},
                           {(void *)snaps, (size_t)h.n_snap * h.snap_bytes}};
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%lu", path, (long)getpid(),
             __atomic_add_fetch(&serial, 1, __ATOMIC_RELAXED));
    e = __atomic_exchange_n(&d->inject, 0, __ATOMIC_RELAXED);
    fd = e ? -1 : open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && !e) e = errno;
    if (fd >= 0 && write_all(fd, iov, 6)) e = errno ? errno : EIO;
    if (fd >= 0 && !e) futimens(fd, t);
    if (fd >= 0 && close(fd) && !e) e = errno;
    if (!e && rename(tmp, path)) e = errno;
    free(ix);
    if (!e) {
        const uint64_t bytes = moe8_kvd_file_bytes(&h);
        count(&d->st.written_bytes, bytes);
        count(&d->st.written_blocks, (uint64_t)n);
        d->dir_bytes += bytes;
        return 0;
    }
    unlink(tmp);
    if (e == ENOSPC || e == EDQUOT || e == EROFS || e == EACCES || e == EPERM) stop_writing(d, tmp, e);
    else moe8_log(MOE8_LOG_WARN, "prompt cache: cannot write '%s': %s", tmp, strerror(e));
    return -1;
}

static void write_job(moe8_kv_disk *d, const kvd_job *j) {
    moe8_kvd_key *keys = malloc((size_t)(j->first + j->n) * sizeof *keys);
    int ok = 0;
    struct timespec base;
    clock_gettime(CLOCK_REALTIME, &base);
    if (keys && __atomic_load_n(&d->writing, __ATOMIC_RELAXED)) {
        moe8_kvd_keys(d, j->tokens, j->first + j->n, keys);
        ok = write_run(d, keys, j, base) == 0;
    }
    free(keys);
    if (!ok) count(&d->st.dropped, (uint64_t)j->n);
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
        free(j->snap);
        free(j);
        if (!d->head) pthread_cond_broadcast(&d->cv_idle);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

/* A job of blocks first..first+n-1 (copied), or NULL (out of memory). */
static kvd_job *job_new(const moe8_kv_disk *d, const int32_t *tokens, int32_t first, int32_t n,
                        const void *const *data, const void *const *snap, size_t bytes) {
    kvd_job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    j->first = first;
    j->n = n;
    j->bytes = bytes;
    j->tokens = malloc((size_t)(first + n) * MOE8_KVD_BS * sizeof *tokens);
    j->data = malloc(bytes);
    j->snap = malloc((size_t)n * sizeof *j->snap);
    if (!j->tokens || !j->data || !j->snap) {
        free(j->tokens);
        free(j->data);
        free(j->snap);
        free(j);
        return NULL;
    }
    memcpy(j->tokens, tokens, (size_t)(first + n) * MOE8_KVD_BS * sizeof *tokens);
    for (int32_t i = 0; i < n; i++) {
        memcpy(j->data + (size_t)i * d->bb, data[i], d->bb);
        j->snap[i] = snap && snap[i] ? j->n_snap++ : -1;
        if (j->snap[i] >= 0)
            memcpy(j->data + (size_t)n * d->bb + (size_t)j->snap[i] * d->fp.snap_bytes, snap[i],
                   d->fp.snap_bytes);
    }
    return j;
}

int32_t moe8_kvd_save(moe8_kv_disk *d, const int32_t *tokens, int32_t first, int32_t n,
                      const void *const *data, const void *const *snap) {
    kvd_job *j = NULL;
    int32_t fit = 0;
    size_t bytes = 0;
    if (n < 1) return 0;
    if (!d->fp.snap_bytes) snap = NULL;
    if (__atomic_load_n(&d->writing, __ATOMIC_RELAXED)) {
        pthread_mutex_lock(&d->mu);
        const size_t room = d->queued < KVD_QUEUE_BYTES ? KVD_QUEUE_BYTES - d->queued : 0;
        for (; fit < n; fit++) { /* a block, its snapshot with it */
            const size_t c = d->bb + (snap && snap[fit] ? d->fp.snap_bytes : 0);
            if (bytes + c > room) break;
            bytes += c;
        }
        d->queued += bytes; /* reserved */
        pthread_mutex_unlock(&d->mu);
    }
    if (fit > 0) j = job_new(d, tokens, first, fit, data, snap, bytes);
    pthread_mutex_lock(&d->mu);
    if (!j) {
        d->queued -= bytes;
        fit = 0;
    } else {
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
    if (!(d = calloc(1, sizeof *d)) || !(d->dir = strdup(dir)) ||
        (fp->snap_bytes && !(d->snap_buf = malloc(fp->snap_bytes)))) {
        if (d) free(d->dir);
        free(d);
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "out of memory");
    }
    d->fp = *fp;
    d->fp64 = moe8_kvd_fold(fp);
    d->bb = fp->block_bytes;
    d->max_bytes = max_bytes;
    d->run_fd = -1;
    d->snap_block = -1;
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
    if (d->run_fd >= 0) close(d->run_fd);
    pthread_mutex_destroy(&d->mu);
    pthread_cond_destroy(&d->cv_job);
    pthread_cond_destroy(&d->cv_idle);
    free(d->buf);
    free(d->snap_buf);
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

void moe8_kvd_use_now(moe8_kv_disk *d) {
    clock_gettime(CLOCK_REALTIME, &d->load_time);
    d->snap_block = -1;
}

void moe8_kvd_inject_write_error(moe8_kv_disk *d, int e) {
    __atomic_store_n(&d->inject, e, __ATOMIC_RELAXED);
}
