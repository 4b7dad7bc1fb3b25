/*
 * cache.c — the packed cache (cache.h; SEMANTICS §6c): the packed int8
 * weights of one model folder, kernel table and shard in one file, mapped
 * read-only and shared by later loads instead of packing again.
 *
 * File (little-endian, written by this machine for this machine):
 *   [0, header_bytes)   pc_head, then n_sections pc_sect; zero padded to 4096
 *   sections            each at a 4096-aligned offset: its regions in the
 *                       order the build takes them, each 64-byte aligned,
 *                       zeros between
 * pc_head names the format version, the table and its layout, the shard
 * (TP size and rank, EP flag, and a hash of every slice bound), the source
 * fingerprint (moe8_model_fingerprint with times: config.json,
 * quant_model_description.json, model.safetensors.index.json bytes; each
 * loaded safetensors file's name, size, mtime and header bytes) and the file size; header_hash covers the header
 * (with itself zero). A section's hash is moe8_hash64 (XXH3) of each 1 MiB block of
 * its bytes, folded in order; its `shape` hashes the sizes of its regions.
 *
 * Rules: a file whose header, size, fingerprint, table, layout or shard
 * differs, or whose section hash fails, is never used. Opening checks the
 * header, then every section's hash (all blocks in parallel) before any
 * weight is read. Where: cache_dir/<folder>-<hash of its real path>/, else
 * DIR/.moe8-cache/ when it can be written, else
 * $XDG_CACHE_HOME/moe8/<folder>-<hash>/ (~/.cache/moe8). The name is
 * <table>-tp<N>r<R>[-ep][-lm8].pkc (-lm8: a float lm_head packed to int8,
 * --lm-head int8; the choice is in the fingerprint too, as is a gpt_oss
 * MXFP4 folder's, whose layers' sections begin with the converted experts'
 * row scales: moe_build.c). A builder holds flock(<name>.lock) from its
 * last look to the rename of <name>.tmp.<pid>, so a racing process waits and
 * then maps the winner's file; holding it, a builder removes the
 * <name>.tmp.<pid> files a killed build left.
 * Does not: cache float weights (they are used in place from the
 * safetensors map; a model with no int8 weight gets no cache file), or
 * share one file between tables or shards.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"
#include "kernels/kernels.h"
#include "load/cache.h"
#include "load/model.h"

#define PC_MAGIC "MOE8PKC\n"
#define PC_VERSION 2u
#define PC_PAGE 4096u
#define PC_BLOCK ((size_t)1 << 20)
#define PC_MAX_SECTIONS 100000u

typedef struct {
    char magic[8];
    uint32_t version, n_sections;
    char table[16], layout[16];
    int32_t tp_size, tp_rank, ep;
    int32_t lm_int8;               /* 1: a float lm_head quantized at load (--lm-head int8) */
    uint64_t source_fp, shard_fp;
    uint64_t file_bytes, header_bytes;
    uint64_t header_hash;          /* of [0, header_bytes) with this field zero */
} pc_head;

typedef struct {
    uint64_t offset, bytes, hash, shape;
} pc_sect;

typedef struct {
    const void *p;
    size_t bytes;
    int owned;                     /* moe8_pcache_put_owned's: freed once written */
} pc_region;

struct moe8_pcache {
    char path[PATH_MAX], lock_path[PATH_MAX + 8];
    int lock_fd;                   /* held while writing */
    int reading;
    int no_mmap, mlock;
    pc_head want;                  /* the header a valid file has (sizes aside) */
    /* reading */
    unsigned char *base;           /* the mapping (or the anonymous copy) */
    size_t map_bytes;
    pc_sect *sect;                 /* [n_sections] of the file */
    uint64_t *shape;               /* [n_sections] of the regions taken */
    size_t cur;                    /* next byte of the current section */
    int cur_sect, bad;
    /* writing: each section goes to the temporary file when it is done */
    pc_region *reg;                /* the current section's regions */
    size_t n_reg, cap_reg;
    int fd;                        /* the temporary file, -1 before the first section */
    char tmp[PATH_MAX + 32];
    uint64_t next_off;             /* where the next section starts */
    uint32_t n_done;               /* sections written */
    pc_sect *out;                  /* [n_sections] as written */
    int failed;                    /* a write failed (why) */
    char why[PATH_MAX * 2 + 128];
};

/* ---- hashing --------------------------------------------------------------- */

/* h folded with one more word (order matters). */
static uint64_t fold(uint64_t h, uint64_t w) {
    const uint64_t p[2] = {h, w};
    return moe8_hash64(p, sizeof p, 7);
}

/* Hash of every section of base[], each the fold of its 1 MiB blocks
 * (all blocks of all sections hashed in parallel). */
static int hash_sections(const unsigned char *base, const pc_sect *s, uint32_t n, uint32_t first_id,
                         uint64_t *out) {
    size_t n_blk = 0, *first = malloc(((size_t)n + 1) * sizeof *first);
    if (!first) return -1;
    for (uint32_t i = 0; i < n; i++) {
        first[i] = n_blk;
        n_blk += (s[i].bytes + PC_BLOCK - 1) / PC_BLOCK;
    }
    first[n] = n_blk;
    uint64_t *bh = malloc((n_blk ? n_blk : 1) * sizeof *bh);
    if (!bh) {
        free(first);
        return -1;
    }
#pragma omp parallel for schedule(dynamic)
    for (uint32_t i = 0; i < n; i++)
        for (size_t b = first[i]; b < first[i + 1]; b++) {
            const size_t off = (b - first[i]) * PC_BLOCK;
            const size_t len = s[i].bytes - off < PC_BLOCK ? s[i].bytes - off : PC_BLOCK;
            bh[b] = moe8_hash64(base + s[i].offset + off, len, first_id + i);
        }
    for (uint32_t i = 0; i < n; i++) {
        uint64_t h = fold(1, s[i].bytes);
        for (size_t b = first[i]; b < first[i + 1]; b++) h = fold(h, bh[b]);
        out[i] = h;
    }
    free(bh);
    free(first);
    return 0;
}

/* ---- the source fingerprint ------------------------------------------------- */

/* ---- where ------------------------------------------------------------------ */

static int mkdir_p(const char *path) {
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(tmp, 0755) && errno != EEXIST) return -1;
            *p = '/';
        }
    return mkdir(tmp, 0755) && errno != EEXIST ? -1 : 0;
}

/* <base>/<folder name>-<hash of the real path> */
static void keyed_dir(char *out, size_t cap, const char *base, const char *model_dir) {
    char real[PATH_MAX];
    const char *r = realpath(model_dir, real) ? real : model_dir;
    const char *slash = strrchr(r, '/');
    const char *leaf = slash && slash[1] ? slash + 1 : r;
    snprintf(out, cap, "%s/%s-%016llx", base, leaf,
             (unsigned long long)moe8_hash64(r, strlen(r), 4));
}

/* Candidate folders in order of preference: 1 or 2. */
static int candidates(const moe8_model *m, char dirs[2][PATH_MAX]) {
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char base[PATH_MAX];
    if (m->params.cache_dir) {
        keyed_dir(dirs[0], PATH_MAX, m->params.cache_dir, m->dir);
        return 1;
    }
    snprintf(dirs[0], PATH_MAX, "%s/.moe8-cache", m->dir);
    if (xdg && xdg[0] == '/') snprintf(base, sizeof base, "%s/moe8", xdg);
    else snprintf(base, sizeof base, "%s/.cache/moe8", home && home[0] ? home : "/tmp");
    keyed_dir(dirs[1], PATH_MAX, base, m->dir);
    return 2;
}

static void file_name(char *out, size_t cap, const char *dir, const pc_head *h) {
    if (snprintf(out, cap, "%s/%s-tp%dr%d%s%s.pkc", dir, h->table, h->tp_size, h->tp_rank,
                 h->ep ? "-ep" : "", h->lm_int8 ? "-lm8" : "") >= (int)cap)
        out[0] = 0; /* too long: opens nothing */
}

/* ---- checking a file ---------------------------------------------------------- */

static void unmap(moe8_pcache *pc) {
    if (pc->base) {
        if (pc->no_mmap) moe8_free_aligned(pc->base);
        else munmap(pc->base, pc->map_bytes);
    }
    pc->base = NULL;
    free(pc->sect);
    pc->sect = NULL;
}

/* Header checks against pc->want; 0 ok, else -1 with why. */
static int check_head(const pc_head *h, const pc_sect *s, const pc_head *want, uint64_t size,
                      char *why, size_t cap) {
    if (memcmp(h->magic, PC_MAGIC, 8))
        return snprintf(why, cap, "not a moe8 packed cache (bad magic)"), -1;
    if (h->version != PC_VERSION)
        return snprintf(why, cap, "format version %u, this build reads %u", h->version,
                        PC_VERSION), -1;
    if (h->file_bytes != size)
        return snprintf(why, cap, "%llu bytes, its header says %llu (truncated or extended)",
                        (unsigned long long)size, (unsigned long long)h->file_bytes), -1;
    if (strncmp(h->table, want->table, 16) || strncmp(h->layout, want->layout, 16))
        return snprintf(why, cap, "packed by table %.16s (layout %.16s), this is %.16s (%.16s)",
                        h->table, h->layout, want->table, want->layout), -1;
    if (h->tp_size != want->tp_size || h->tp_rank != want->tp_rank || h->ep != want->ep ||
        h->shard_fp != want->shard_fp)
        return snprintf(why, cap, "shard tp %d rank %d%s, this is tp %d rank %d%s", h->tp_size,
                        h->tp_rank, h->ep ? " ep" : "", want->tp_size, want->tp_rank,
                        want->ep ? " ep" : ""), -1;
    if (h->lm_int8 != want->lm_int8)
        return snprintf(why, cap, "lm_head %s, this load %s", h->lm_int8 ? "packed to int8 at "
                        "load (--lm-head int8)" : "as stored", want->lm_int8 ? "packs it to "
                        "int8" : "keeps it as stored"), -1;
    if (h->source_fp != want->source_fp)
        return snprintf(why, cap, "the model folder changed since it was built (config, quant "
                        "description or a safetensors file)"), -1;
    if (h->n_sections != want->n_sections)
        return snprintf(why, cap, "%u sections, the model has %u", h->n_sections,
                        want->n_sections), -1;
    uint64_t end = h->header_bytes;
    for (uint32_t i = 0; i < h->n_sections; i++) {
        if (s[i].offset % PC_PAGE || s[i].offset < end || s[i].bytes > size ||
            s[i].offset > size - s[i].bytes)
            return snprintf(why, cap, "section %u at %llu (+%llu) outside the file", i,
                            (unsigned long long)s[i].offset, (unsigned long long)s[i].bytes), -1;
        end = s[i].offset + s[i].bytes;
    }
    return 0;
}

/* Open and check `path` fully (header, then every section hash unless
 * !full_hash); on success pc maps it (reading). 0 ok, 1 absent, -1 invalid
 * (why), -2 a system error the caller reports (why). */
static int try_read(moe8_pcache *pc, const char *path, int full_hash, char *why, size_t cap) {
    struct stat sb;
    pc_head h;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT ? 1 : (snprintf(why, cap, "%s", strerror(errno)), -1);
    if (fstat(fd, &sb) || !S_ISREG(sb.st_mode) || sb.st_size < (off_t)sizeof h ||
        pread(fd, &h, sizeof h, 0) != (ssize_t)sizeof h) {
        close(fd);
        return snprintf(why, cap, "too short for a header (%lld bytes)", (long long)sb.st_size), -1;
    }
    const uint64_t size = (uint64_t)sb.st_size;
    if (memcmp(h.magic, PC_MAGIC, 8) || h.version != PC_VERSION || h.n_sections > PC_MAX_SECTIONS ||
        h.header_bytes < sizeof h + (uint64_t)h.n_sections * sizeof(pc_sect) ||
        h.header_bytes > size || h.header_bytes > (1u << 24)) {
        close(fd);
        if (!memcmp(h.magic, PC_MAGIC, 8) && h.version == PC_VERSION)
            return snprintf(why, cap, "bad header size"), -1;
        return check_head(&h, NULL, &pc->want, size, why, cap), -1;
    }
    unsigned char *hb = malloc(h.header_bytes);
    if (!hb || pread(fd, hb, h.header_bytes, 0) != (ssize_t)h.header_bytes) {
        free(hb);
        close(fd);
        return snprintf(why, cap, "cannot read its header"), -1;
    }
    pc_head *hh = (pc_head *)hb;
    const uint64_t stored = hh->header_hash;
    hh->header_hash = 0;
    if (moe8_hash64(hb, h.header_bytes, 5) != stored) {
        free(hb);
        close(fd);
        return snprintf(why, cap, "header checksum mismatch (corrupt header)"), -1;
    }
    pc_sect *s = malloc((h.n_sections ? h.n_sections : 1) * sizeof *s);
    if (s) memcpy(s, hb + sizeof h, (size_t)h.n_sections * sizeof *s);
    free(hb);
    if (!s || check_head(&h, s, &pc->want, size, why, cap)) {
        free(s);
        close(fd);
        return s ? -1 : (snprintf(why, cap, "out of memory"), -2);
    }
    unsigned char *base;
    if (pc->no_mmap) {
        base = moe8_alloc_aligned(size);
        for (size_t got = 0; base && got < size;) {
            ssize_t r = pread(fd, base + got, size - got > (1u << 30) ? (1u << 30) : size - got,
                              (off_t)got);
            if (r <= 0) {
                moe8_free_aligned(base);
                base = NULL;
            } else {
                got += (size_t)r;
            }
        }
        if (!base) snprintf(why, cap, "cannot read it into memory: %s", strerror(errno ? errno : ENOMEM));
    } else {
        base = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
        if (base == MAP_FAILED) {
            base = NULL;
            snprintf(why, cap, "cannot map it: %s", strerror(errno));
        } else {
            if (full_hash) madvise(base, size, MADV_WILLNEED); /* the checks read it all */
        }
    }
    close(fd);
    if (!base) {
        free(s);
        return -2;
    }
    uint64_t *got = full_hash ? malloc((h.n_sections ? h.n_sections : 1) * sizeof *got) : NULL;
    if (full_hash && (!got || hash_sections(base, s, h.n_sections, 0, got))) {
        free(got);
        free(s);
        if (pc->no_mmap) moe8_free_aligned(base);
        else munmap(base, size);
        return snprintf(why, cap, "out of memory"), -2;
    }
    for (uint32_t i = 0; full_hash && i < h.n_sections; i++)
        if (got[i] != s[i].hash) {
            snprintf(why, cap, "section %u (%s) checksum mismatch (corrupt)", i,
                     i + 1 == h.n_sections ? "lm_head" : "a layer");
            free(got);
            free(s);
            if (pc->no_mmap) moe8_free_aligned(base);
            else munmap(base, size);
            return -1;
        }
    free(got);
    snprintf(pc->path, sizeof pc->path, "%s", path);
    pc->base = base;
    pc->map_bytes = size;
    pc->sect = s;
    pc->reading = 1;
    return 0;
}

/* ---- opening ---------------------------------------------------------------- */

/* The header a cache of m packed for table k must have; fails where the
 * folder's fingerprint (moe8_model_fingerprint, with times) cannot be taken. */
static moe8_status want_of(pc_head *h, const moe8_model *m, const moe8_kernels *k,
                           moe8_error *err) {
    uint64_t fp[3];
    memset(h, 0, sizeof *h);
    memcpy(h->magic, PC_MAGIC, 8);
    h->version = PC_VERSION;
    h->n_sections = (uint32_t)m->cfg.num_hidden_layers + 1;
    snprintf(h->table, sizeof h->table, "%s", k->isa);
    snprintf(h->layout, sizeof h->layout, "%s", k->qlayout->name);
    h->tp_size = m->shard.size > 1 ? m->shard.size : 1;
    h->tp_rank = m->shard.size > 1 ? m->shard.rank : 0;
    h->ep = m->shard.size > 1 && m->shard.expert_parallel;
    h->shard_fp = m->shard.size > 1 ? moe8_hash64(&m->shard, sizeof m->shard, 6) : 0;
    const moe8_status st = moe8_model_fingerprint(m, 1, fp, err);
    if (st) return st;
    h->source_fp = fold(fold(fold(1, fp[0]), fp[1]), fp[2]);
    h->lm_int8 = moe8_model_lm_head_int8(m);
    if (h->lm_int8) h->source_fp = fold(h->source_fp, 0x6c6d2d696e7438u); /* "lm-int8" */
    for (int64_t l = 0; l < m->cfg.num_hidden_layers; l++)
        if (moe8_gptoss_is_mxfp4(m, l)) { /* its sections hold the row scales (moe_build.c) */
            h->source_fp = fold(h->source_fp, 0x6d78667034u); /* "mxfp4" */
            break;
        }
    return MOE8_OK;
}

static moe8_status do_mlock(moe8_pcache *pc, moe8_error *err) {
    struct rlimit rl;
    if (!mlock(pc->base, pc->map_bytes)) return MOE8_OK;
    const int e = errno;
    getrlimit(RLIMIT_MEMLOCK, &rl);
    return moe8_fail(err, MOE8_ERR_IO, -1, "cannot mlock the packed cache '%s' (%zu bytes): %s "
                     "(RLIMIT_MEMLOCK %llu bytes; raise it with ulimit -l)", pc->path,
                     pc->map_bytes, strerror(e), (unsigned long long)rl.rlim_cur);
}

/* A file just mapped (try_read): pinned when asked, ready for moe8_pcache_take. */
static moe8_status start_reading(moe8_pcache *pc, moe8_error *err) {
    moe8_status st = pc->mlock ? do_mlock(pc, err) : MOE8_OK;
    pc->cur_sect = -1;
    if (!st && !(pc->shape = calloc(pc->want.n_sections, sizeof *pc->shape)))
        st = moe8_fail(err, MOE8_ERR_NOMEM, -1, "out of memory");
    return st;
}

/* The lock of the file at path; -1 (logged) when it cannot be taken. */
static int take_lock(moe8_pcache *pc) {
    snprintf(pc->lock_path, sizeof pc->lock_path, "%s.lock", pc->path);
    int fd = open(pc->lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    while (fd >= 0 && flock(fd, LOCK_EX) && errno == EINTR) {}
    return fd;
}

/* Under the lock no builder of pc->path is writing, so its temporaries left
 * in dir (<name>.tmp.<pid>, a build that was killed) are stale: removed. */
static void remove_stale(const moe8_pcache *pc, const char *dir) {
    const char *base = strrchr(pc->path, '/');
    char prefix[PATH_MAX + 8];
    struct dirent *e;
    DIR *d = opendir(dir);
    base = base ? base + 1 : pc->path;
    snprintf(prefix, sizeof prefix, "%s.tmp.", base);
    const size_t n = strlen(prefix);
    while (d && (e = readdir(d))) {
        if (strncmp(e->d_name, prefix, n)) continue;
        const char *pid = e->d_name + n;
        if (!*pid || strspn(pid, "0123456789") != strlen(pid)) continue;
        if (unlinkat(dirfd(d), e->d_name, 0) == 0)
            moe8_log(MOE8_LOG_WARN, "removed '%s/%s', left by a cache build that did not finish", dir,
                     e->d_name);
    }
    if (d) closedir(d);
}

/* 1 when some weight of m is packed (int8); a float model has nothing to cache. */
static int has_packed(const moe8_model *m) {
    if (m->lm_head.quant != MOE8_QUANT_FLOAT || moe8_model_lm_head_int8(m)) return 1;
    for (int64_t i = 0; i < m->cfg.num_hidden_layers; i++) {
        const moe8_layer_info *li = &m->layers[i].info;
        const moe8_quant_type q[] = {li->qkv, li->o, li->q_b};
        for (size_t j = 0; j < sizeof q / sizeof q[0]; j++)
            if (q[j] != MOE8_QUANT_FLOAT) return 1;
        if (li->is_moe ? li->experts != MOE8_QUANT_FLOAT ||
                             (li->has_shared && (li->shared_gate_up != MOE8_QUANT_FLOAT ||
                                                 li->shared_down != MOE8_QUANT_FLOAT))
                       : li->mlp_gate_up != MOE8_QUANT_FLOAT || li->mlp_down != MOE8_QUANT_FLOAT)
            return 1;
    }
    return 0;
}

moe8_status moe8_pcache_open(const moe8_model *m, const moe8_kernels *kt, int float_experts,
                             moe8_pcache **out, moe8_error *err) {
    char dirs[2][PATH_MAX], path[PATH_MAX], why[PATH_MAX + 512] = "";
    *out = NULL;
    if (m->params.no_cache || float_experts || !has_packed(m)) return MOE8_OK;
    moe8_pcache *pc = calloc(1, sizeof *pc);
    if (!pc) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "out of memory");
    pc->lock_fd = -1;
    pc->fd = -1;
    pc->no_mmap = m->params.no_mmap;
    pc->mlock = m->params.mlock;
    moe8_error fe = {0};
    if (want_of(&pc->want, m, kt, &fe)) { /* packed in memory instead */
        moe8_log(MOE8_LOG_WARN, "packed cache of '%s' not used: %s", m->dir, fe.message);
        free(pc);
        return MOE8_OK;
    }
    const int n_dir = candidates(m, dirs);
    int r = 1;
    for (int i = 0; i < n_dir && r; i++) {
        file_name(path, sizeof path, dirs[i], &pc->want);
        r = try_read(pc, path, 1, why, sizeof why);
        if (r < 0)
            moe8_log(MOE8_LOG_WARN, "packed cache '%s' not used: %s", path, why);
    }
    for (int i = 0; i < n_dir && r; i++) { /* none valid: build where we can write */
        file_name(path, sizeof path, dirs[i], &pc->want);
        snprintf(pc->path, sizeof pc->path, "%s", path);
        if (mkdir_p(dirs[i]) || access(dirs[i], W_OK)) {
            snprintf(why, sizeof why, "cannot write '%s': %s", dirs[i], strerror(errno));
            continue;
        }
        if ((pc->lock_fd = take_lock(pc)) < 0) {
            snprintf(why, sizeof why, "cannot lock '%s': %s", pc->lock_path, strerror(errno));
            continue;
        }
        /* A racing builder may have finished while we waited for the lock. */
        if ((r = try_read(pc, path, 1, why, sizeof why)) == 0) {
            close(pc->lock_fd);
            pc->lock_fd = -1;
        } else {
            remove_stale(pc, dirs[i]);
        }
        break;
    }
    if (r && pc->lock_fd < 0) { /* nowhere to write */
        if (m->params.cache_dir) {
            moe8_status st = moe8_fail(err, MOE8_ERR_IO, -1, "packed cache: %s", why);
            moe8_pcache_free(pc);
            return st;
        }
        moe8_log(MOE8_LOG_WARN, "no packed cache for '%s' (%s): packing in memory", m->dir, why);
        moe8_pcache_free(pc);
        return MOE8_OK;
    }
    pc->cur_sect = -1;
    moe8_status st = pc->reading ? start_reading(pc, err) : MOE8_OK;
    if (st) {
        moe8_pcache_free(pc);
        return st;
    }
    *out = pc;
    return MOE8_OK;
}

int moe8_pcache_reading(const moe8_pcache *pc) { return pc && pc->reading; }

void moe8_pcache_section(moe8_pcache *pc, int id) {
    if (!pc) return;
    MOE8_ASSERT(id >= 0 && (uint32_t)id < pc->want.n_sections);
    pc->cur_sect = id;
    pc->cur = 0;
}

const void *moe8_pcache_take(moe8_pcache *pc, size_t bytes) {
    if (!pc || !pc->reading || pc->cur_sect < 0) return NULL;
    const pc_sect *s = &pc->sect[pc->cur_sect];
    const size_t at = (pc->cur + 63) & ~(size_t)63;
    pc->shape[pc->cur_sect] = fold(pc->shape[pc->cur_sect] ? pc->shape[pc->cur_sect]
                                                                : 1, bytes);
    if (at > s->bytes || bytes > s->bytes - at) {
        pc->bad = 1;
        return NULL;
    }
    pc->cur = at + bytes;
    return pc->base + s->offset + at;
}

static void put_region(moe8_pcache *pc, const void *p, size_t bytes, int owned) {
    if (!pc || pc->reading || pc->bad) {
        if (owned) free((void *)p);
        return;
    }
    if (pc->n_reg == pc->cap_reg) {
        size_t cap = pc->cap_reg ? 2 * pc->cap_reg : 64;
        pc_region *r = realloc(pc->reg, cap * sizeof *r);
        if (!r) {
            pc->bad = 1;
            if (owned) free((void *)p);
            return;
        }
        pc->reg = r;
        pc->cap_reg = cap;
    }
    pc->reg[pc->n_reg++] = (pc_region){p, bytes, owned};
}

void moe8_pcache_put(moe8_pcache *pc, const void *p, size_t bytes) { put_region(pc, p, bytes, 0); }

void moe8_pcache_put_owned(moe8_pcache *pc, void *p, size_t bytes) { put_region(pc, p, bytes, 1); }

/* The regions handed over so far forgotten (the owned ones freed). */
static void drop_regions(moe8_pcache *pc) {
    for (size_t r = 0; r < pc->n_reg; r++)
        if (pc->reg[r].owned) free((void *)pc->reg[r].p);
    pc->n_reg = 0;
}

/* ---- writing ---------------------------------------------------------------- */

static int pwrite_all(int fd, const void *p, size_t n, uint64_t off) {
    const char *b = p;
    while (n) {
        ssize_t w = pwrite(fd, b, n > (1u << 30) ? (1u << 30) : n, (off_t)off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        b += w, n -= (size_t)w, off += (uint64_t)w;
    }
    return 0;
}

static size_t header_size(uint32_t n) {
    return (sizeof(pc_head) + (size_t)n * sizeof(pc_sect) + PC_PAGE - 1) / PC_PAGE * PC_PAGE;
}

/* A write failed: remember why (logged by finish), drop the temporary file. */
static void write_failed(moe8_pcache *pc, const char *what) {
    if (!pc->failed)
        snprintf(pc->why, sizeof pc->why, "%s '%s': %s", what, pc->tmp, strerror(errno ? errno : EIO));
    pc->failed = 1;
    if (pc->fd >= 0) {
        close(pc->fd);
        unlink(pc->tmp);
    }
    pc->fd = -1;
}

/* The current section's regions, at the next page-aligned offset of the temporary
 * file (regions 64-byte aligned, in the order they were put); its checksum from
 * the page cache, where the bytes just went. The regions may be freed after. */
void moe8_pcache_section_done(moe8_pcache *pc) {
    if (!pc || pc->reading) return;
    const uint32_t n = pc->want.n_sections, id = (uint32_t)pc->cur_sect;
    if (!pc->failed && (pc->bad || id != pc->n_done)) {
        snprintf(pc->why, sizeof pc->why, pc->bad ? "out of memory" : "section %u out of order", id);
        pc->failed = 1;
    }
    if (!pc->failed && pc->fd < 0) {
        snprintf(pc->tmp, sizeof pc->tmp, "%s.tmp.%d", pc->path, (int)getpid());
        pc->next_off = header_size(n);
        if (!(pc->out = calloc(n, sizeof *pc->out))) {
            snprintf(pc->why, sizeof pc->why, "out of memory");
            pc->failed = 1;
        } else if ((pc->fd = open(pc->tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0) {
            write_failed(pc, "cannot create");
        }
    }
    uint64_t cur = 0, shape = 0;
    for (size_t r = 0; !pc->failed && r < pc->n_reg; r++) {
        cur = (cur + 63) & ~(uint64_t)63;
        if (pwrite_all(pc->fd, pc->reg[r].p, pc->reg[r].bytes, pc->next_off + cur))
            write_failed(pc, "cannot write");
        cur += pc->reg[r].bytes;
        shape = fold(shape ? shape : 1, pc->reg[r].bytes);
    }
    drop_regions(pc);
    if (pc->failed) return;
    pc_sect sec = {0, cur, 0, shape}, *o = &pc->out[id];
    unsigned char *map = NULL;
    if (cur && (map = mmap(NULL, cur, PROT_READ, MAP_SHARED, pc->fd, (off_t)pc->next_off)) == MAP_FAILED) {
        write_failed(pc, "cannot read back");
        return;
    }
    const int bad = hash_sections(map, &sec, 1, id, &o->hash);
    if (map) munmap(map, cur);
    if (bad) {
        errno = ENOMEM;
        write_failed(pc, "cannot hash");
        return;
    }
    o->offset = pc->next_off, o->bytes = cur, o->shape = shape;
    pc->next_off = (pc->next_off + cur + PC_PAGE - 1) / PC_PAGE * PC_PAGE;
    pc->n_done++;
}

/* Every section written: the header last, then the rename. */
static int finish_file(moe8_pcache *pc) {
    const uint32_t n = pc->want.n_sections;
    const size_t hdr = header_size(n);
    unsigned char *hb;
    if (pc->failed) return -1;
    if (pc->n_done != n) {
        snprintf(pc->why, sizeof pc->why, "%u of %u sections built", pc->n_done, n);
        return -1;
    }
    if (!(hb = calloc(1, hdr))) {
        errno = ENOMEM;
        write_failed(pc, "cannot finish");
        return -1;
    }
    pc_head head = pc->want;
    head.file_bytes = pc->next_off;
    head.header_bytes = hdr;
    head.header_hash = 0;
    memcpy(hb, &head, sizeof head);
    memcpy(hb + sizeof head, pc->out, (size_t)n * sizeof *pc->out);
    head.header_hash = moe8_hash64(hb, hdr, 5);
    memcpy(hb, &head, sizeof head);
    const int bad = ftruncate(pc->fd, (off_t)pc->next_off) || pwrite_all(pc->fd, hb, hdr, 0);
    free(hb);
    if (bad) {
        write_failed(pc, "cannot write");
        return -1;
    }
    const int fd = pc->fd;
    pc->fd = -1;
    if (close(fd)) {
        unlink(pc->tmp);
        snprintf(pc->why, sizeof pc->why, "cannot write '%s': %s", pc->tmp, strerror(errno));
        pc->failed = 1;
        return -1;
    }
    if (rename(pc->tmp, pc->path)) {
        snprintf(pc->why, sizeof pc->why, "cannot rename '%s' to '%s': %s", pc->tmp, pc->path,
                 strerror(errno));
        unlink(pc->tmp);
        pc->failed = 1;
        return -1;
    }
    return 0;
}

moe8_status moe8_pcache_finish(moe8_pcache *pc, moe8_error *err) {
    if (!pc) return MOE8_OK;
    if (pc->reading) {
        for (uint32_t i = 0; i < pc->want.n_sections && !pc->bad; i++)
            pc->bad = pc->shape[i] != pc->sect[i].shape;
        if (pc->bad)
            return moe8_fail(err, MOE8_ERR_FORMAT, -1, "packed cache '%s': its regions differ "
                             "from what the model needs (not from this build?); delete it",
                             pc->path);
        return MOE8_OK;
    }
    drop_regions(pc);
    free(pc->reg);
    pc->reg = NULL;
    pc->n_reg = pc->cap_reg = 0;
    moe8_status st = MOE8_OK;
    if (finish_file(pc)) {
        moe8_log(MOE8_LOG_WARN, "packed cache not written: %s", pc->why);
    } else {
        /* map what was just written, still under the lock: its sections were hashed
         * as they went out and the header checksum covers those hashes, so only the
         * header is read back (no second pass over the file) */
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s", pc->path);
        if (try_read(pc, path, 0, pc->why, sizeof pc->why))
            moe8_log(MOE8_LOG_WARN, "packed cache '%s' written but not mapped: %s", path, pc->why);
        else
            st = start_reading(pc, err);
    }
    if (pc->lock_fd >= 0) close(pc->lock_fd);
    pc->lock_fd = -1;
    return st;
}

void moe8_pcache_free(moe8_pcache *pc) {
    if (!pc) return;
    if (pc->fd >= 0) { /* not finished: nothing half-written stays */
        close(pc->fd);
        unlink(pc->tmp);
    }
    if (pc->lock_fd >= 0) close(pc->lock_fd);
    unmap(pc);
    free(pc->shape);
    drop_regions(pc);
    free(pc->reg);
    free(pc->out);
    free(pc);
}

/* ---- the public check (inspect, pack --verify) -------------------------------- */

moe8_status moe8_model_cache_check(const moe8_model *m, int full, moe8_cache_info *out,
                                   moe8_error *err) {
    char dirs[2][PATH_MAX], path[PATH_MAX];
    if (!m || !out) return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "cache check: bad arguments");
    memset(out, 0, sizeof *out);
    moe8_pcache *pc = calloc(1, sizeof *pc);
    if (!pc) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "out of memory");
    pc->lock_fd = -1;
    pc->fd = -1;
    const moe8_status st = want_of(&pc->want, m, moe8_kernels_get(), err);
    if (st) {
        free(pc);
        return st;
    }
    const int n_dir = candidates(m, dirs);
    for (int i = 0; i < n_dir && !out->valid; i++) {
        char why[512] = "";
        struct stat sb;
        file_name(path, sizeof path, dirs[i], &pc->want);
        const int r = try_read(pc, path, full, why, sizeof why);
        if (r == 1 && out->exists) continue;
        if (r != 1 || !out->path[0]) {
            snprintf(out->path, sizeof out->path, "%s", path);
            snprintf(out->why, sizeof out->why, "%s", r == 1 ? "absent" : why);
            out->exists = r != 1;
            out->bytes = r != 1 && !stat(path, &sb) ? (uint64_t)sb.st_size : 0;
        }
        out->valid = r == 0;
        unmap(pc);
    }
    snprintf(out->table, sizeof out->table, "%s", pc->want.table);
    snprintf(out->layout, sizeof out->layout, "%s", pc->want.layout);
    moe8_pcache_free(pc);
    return MOE8_OK;
}
