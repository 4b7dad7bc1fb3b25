/*
 * kv_disk_dir.c — the prompt cache's directory as a whole (kv_disk.h):
 * its lock, the sweep (temporaries of dead writers, the size bound, least
 * recently used first) and moe8_prompt_cache_list / _clear of moe8_tools.h.
 *
 * The lock is flock(DIR/.lock), as the packed cache's; a sweep and a clear
 * hold it. Block files need no lock to be written or read: each is written
 * under a temporary name, <name>.tmp.<pid>.<n>, and renamed; a reader opens
 * the final name only. A temporary whose process no longer exists was left
 * by a killed writer and is removed (logged); one of a live process never.
 * Last use is a file's modification time (a load or a repeated write touches
 * it). Files of version 1 (one block each, "<key>.kvb") are removed by a
 * sweep and by clear.
 *
 * Does not: know the pool or the format beyond moe8_kvd_head and the index.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"
#include "model/kv_disk.h"

int moe8_kvd_lock(const char *dir) {
    char path[4200];
    snprintf(path, sizeof path, "%s/.lock", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) fd = open(path, O_RDONLY | O_CLOEXEC); /* a read-only directory */
    while (fd >= 0 && flock(fd, LOCK_EX) && errno == EINTR) {}
    return fd;
}

static int is_block_name(const char *n) {
    const size_t len = strlen(n), ext = strlen(MOE8_KVD_EXT);
    return len == 32 + ext && strspn(n, "0123456789abcdef") == 32 && !strcmp(n + 32, MOE8_KVD_EXT);
}

/* A file of version 1, or its temporary: "<32 hex>.kvb[.tmp.*]". */
static int is_old_name(const char *n) {
    const size_t ext = strlen(MOE8_KVD_OLD_EXT);
    return strlen(n) >= 32 + ext && strspn(n, "0123456789abcdef") == 32 &&
           !strncmp(n + 32, MOE8_KVD_OLD_EXT, ext) && (!n[32 + ext] || n[32 + ext] == '.');
}

/* The pid of a temporary "<block name>.tmp.<pid>.<n>", or 0 when it is not one. */
static long tmp_pid(const char *n) {
    const char *t = strstr(n, MOE8_KVD_EXT ".tmp.");
    char *end;
    if (!t || t - n != 32) return 0;
    long pid = strtol(t + strlen(MOE8_KVD_EXT ".tmp."), &end, 10);
    return pid > 0 && *end == '.' ? pid : 0;
}

typedef struct {
    char name[40];
    uint64_t bytes;
    struct timespec t;
} kvd_ent;

static int by_time(const void *a, const void *b) {
    const struct timespec *x = &((const kvd_ent *)a)->t, *y = &((const kvd_ent *)b)->t;
    if (x->tv_sec != y->tv_sec) return x->tv_sec < y->tv_sec ? -1 : 1;
    return (x->tv_nsec > y->tv_nsec) - (x->tv_nsec < y->tv_nsec);
}

uint64_t moe8_kvd_sweep(const char *dir, uint64_t max_bytes, uint64_t *n_evicted) {
    DIR *dp = opendir(dir);
    struct dirent *e;
    kvd_ent *ents = NULL;
    size_t n = 0, cap = 0;
    uint64_t total = 0;
    while (dp && (e = readdir(dp))) {
        struct stat sb;
        const long pid = tmp_pid(e->d_name);
        if (pid) {
            if (kill((pid_t)pid, 0) && errno == ESRCH && unlinkat(dirfd(dp), e->d_name, 0) == 0)
                moe8_log(MOE8_LOG_WARN, "prompt cache: removed '%s/%s', left by a writer that did "
                         "not finish", dir, e->d_name);
            continue;
        }
        if (is_old_name(e->d_name)) {
            unlinkat(dirfd(dp), e->d_name, 0); /* another version's: never read */
            continue;
        }
        if (!is_block_name(e->d_name) || fstatat(dirfd(dp), e->d_name, &sb, 0)) continue;
        total += (uint64_t)sb.st_size;
        if (!max_bytes) continue;
        if (n == cap) {
            kvd_ent *g = realloc(ents, (cap = cap ? 2 * cap : 256) * sizeof *g);
            if (!g) break;
            ents = g;
        }
        memcpy(ents[n].name, e->d_name, 32 + sizeof MOE8_KVD_EXT); /* is_block_name: that long */
        ents[n].bytes = (uint64_t)sb.st_size;
        ents[n++].t = sb.st_mtim;
    }
    if (max_bytes && total > max_bytes) {
        const uint64_t goal = max_bytes / 10 * 9;
        qsort(ents, n, sizeof *ents, by_time);
        for (size_t i = 0; i < n && total > goal; i++)
            if (unlinkat(dirfd(dp), ents[i].name, 0) == 0) {
                total -= ents[i].bytes;
                (*n_evicted)++;
            }
    }
    free(ents);
    if (dp) closedir(dp);
    return total;
}

/* ---- moe8 prompt-cache ls | verify | clear --------------------------------------------- */

static const char *kv_name(int32_t t) {
    return t == MOE8_DT_F32 ? "f32" : t == MOE8_DT_F16 ? "f16" : t == MOE8_DT_BF16 ? "bf16" : "?";
}

/* Why run file h (of size bytes, named name) is not valid by its header, or NULL. */
static const char *head_bad(const moe8_kvd_head *h, uint64_t size, const char *name) {
    char want[40];
    if (memcmp(h->magic, MOE8_KVD_MAGIC, 8)) return "not a run file";
    if (h->version != MOE8_KVD_VERSION || h->head_bytes != sizeof *h) return "another version";
    if (h->first < 0 || h->n_blocks < 1 || h->n_blocks > (1 << 24) ||
        h->first > (1 << 24) || h->block_bytes > (1ull << 40) || h->n_snap < 0 ||
        h->n_snap > h->n_blocks || h->snap_bytes > (1ull << 40) ||
        h->data_off != moe8_kvd_data_off(h->first, h->n_blocks) || size != moe8_kvd_file_bytes(h))
        return "truncated or overlong";
    moe8_kvd_name((moe8_kvd_key){h->key_lo, h->key_hi}, want);
    return strcmp(want, name) ? "its name is not its key" : NULL;
}

/* The whole file buf[size] (its header valid) checked: its header's sum, its
 * keys against its ids, each block's sum and each snapshot's. */
static const char *run_bad(const moe8_kvd_head *h, const unsigned char *buf) {
    const moe8_kvd_ent *ix = (const moe8_kvd_ent *)(const void *)(buf + sizeof *h);
    const int32_t *ids = (const int32_t *)(const void *)(ix + h->n_blocks);
    const int32_t end = h->first + h->n_blocks;
    moe8_kvd_key *keys = malloc((size_t)end * sizeof *keys);
    const char *why = NULL;
    if (!keys) return "out of memory";
    if (moe8_kvd_head_sum(h, ix, ids) != h->sum) why = "header checksum";
    else why = moe8_kvd_index_check(h, ix);
    moe8_kvd_chain(h->fp, ids, end, keys);
    for (int32_t i = 0; !why && i < h->n_blocks; i++) {
        const moe8_kvd_key k = keys[h->first + i];
        if (k.lo != ix[i].key_lo || k.hi != ix[i].key_hi) why = "a key is not its ids'";
        else if (moe8_kvd_block_sum(ids + (size_t)(h->first + i) * MOE8_KVD_BS,
                                    buf + h->data_off + (size_t)i * h->block_bytes,
                                    h->block_bytes) != ix[i].sum)
            why = "checksum";
        else if (ix[i].snap >= 0 &&
                 moe8_hash64(buf + h->data_off + (uint64_t)h->n_blocks * h->block_bytes +
                                 (uint64_t)ix[i].snap * h->snap_bytes,
                             h->snap_bytes, ix[i].key_lo) != ix[i].snap_sum)
            why = "snapshot checksum";
    }
    free(keys);
    return why;
}

/* Fill f from the file at dirfd/name; verify: check its checksums and keys too. */
static void inspect(int dfd, const char *name, int verify, moe8_prompt_cache_file *f) {
    moe8_kvd_head h;
    struct stat sb;
    int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC);
    memset(f, 0, sizeof *f);
    f->name = name;
    f->kv_type = "?";
    if (fd < 0 || fstat(fd, &sb)) {
        f->bad = "cannot open";
        if (fd >= 0) close(fd);
        return;
    }
    f->bytes = (uint64_t)sb.st_size;
    f->mtime = (int64_t)sb.st_mtim.tv_sec;
    if (pread(fd, &h, sizeof h, 0) != (ssize_t)sizeof h) f->bad = "not a run file";
    else f->bad = head_bad(&h, (uint64_t)sb.st_size, name);
    if (!f->bad) {
        f->n_tokens = (h.first + h.n_blocks) * MOE8_KVD_BS;
        f->n_blocks = h.n_blocks;
        f->kv_type = kv_name(h.kv_type);
        f->tp_rank = h.tp_rank;
        f->tp_size = h.tp_size;
        f->fingerprint = h.fp;
    }
    if (!f->bad && verify) {
        unsigned char *buf = malloc((size_t)sb.st_size);
        if (!buf || pread(fd, buf, (size_t)sb.st_size, 0) != (ssize_t)sb.st_size)
            f->bad = "cannot read";
        else
            f->bad = run_bad(&h, buf);
        free(buf);
    }
    close(fd);
}

static int by_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

moe8_status moe8_prompt_cache_list(const char *dir, int verify, moe8_prompt_cache_fn fn,
                                   void *user, uint64_t *n_bad, moe8_error *err) {
    DIR *dp = dir ? opendir(dir) : NULL;
    struct dirent *e;
    char **names = NULL;
    size_t n = 0, cap = 0;
    moe8_status st = MOE8_OK;
    if (n_bad) *n_bad = 0;
    if (!dp)
        return moe8_fail(err, MOE8_ERR_IO, -1, "prompt cache: cannot open '%s': %s",
                         dir ? dir : "(null)", strerror(errno));
    while ((e = readdir(dp)) && !st) {
        if (!is_block_name(e->d_name)) continue;
        if (n == cap) {
            char **g = realloc(names, (cap = cap ? 2 * cap : 256) * sizeof *g);
            if (!g) st = moe8_fail(err, MOE8_ERR_NOMEM, -1, "out of memory");
            else names = g;
        }
        if (!st && !(names[n++] = strdup(e->d_name))) st = moe8_fail(err, MOE8_ERR_NOMEM, -1, "out of memory");
    }
    if (!st && n) qsort(names, n, sizeof *names, by_name); /* names is NULL when n is 0 */
    for (size_t i = 0; !st && i < n; i++) {
        moe8_prompt_cache_file f;
        inspect(dirfd(dp), names[i], verify, &f);
        if (f.bad && n_bad) (*n_bad)++;
        if (fn) fn(user, &f);
    }
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    closedir(dp);
    return st;
}

moe8_status moe8_prompt_cache_clear(const char *dir, uint64_t *n_files, uint64_t *n_bytes,
                                    moe8_error *err) {
    DIR *dp = dir ? opendir(dir) : NULL;
    struct dirent *e;
    uint64_t files = 0, bytes = 0;
    int fd, failed = 0;
    if (!dp)
        return moe8_fail(err, MOE8_ERR_IO, -1, "prompt cache: cannot open '%s': %s",
                         dir ? dir : "(null)", strerror(errno));
    fd = moe8_kvd_lock(dir);
    while ((e = readdir(dp))) {
        struct stat sb;
        if (!is_block_name(e->d_name) && !tmp_pid(e->d_name) && !is_old_name(e->d_name)) continue;
        if (fstatat(dirfd(dp), e->d_name, &sb, 0)) continue;
        if (unlinkat(dirfd(dp), e->d_name, 0)) {
            failed = errno;
            continue;
        }
        files++;
        bytes += (uint64_t)sb.st_size;
    }
    if (fd >= 0) close(fd);
    closedir(dp);
    if (n_files) *n_files = files;
    if (n_bytes) *n_bytes = bytes;
    if (failed)
        return moe8_fail(err, MOE8_ERR_IO, -1, "prompt cache: cannot remove files of '%s': %s",
                         dir, strerror(failed));
    return MOE8_OK;
}
