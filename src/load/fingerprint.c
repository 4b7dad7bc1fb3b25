/*
 * fingerprint.c — what identifies a loaded model folder without reading its
 * weights, and the check at the end of a load across ranks (SEMANTICS §8).
 *
 * A fingerprint is three moe8_hash64 chains: [0] config.json, [1]
 * quant_model_description.json (or the word "absent"), [2]
 * model.safetensors.index.json (or "absent") and each loaded safetensors
 * file's base name, size and header bytes, with its modification time when
 * asked for. The packed cache (cache.c) keys its file on all three with the
 * times; ranks of a group compare them without (their copies of a model are
 * the same when their bytes are, whatever their times).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/core.h"
#include "dist/dist.h"
#include "load/model.h"

/* h extended by n bytes at p. */
static uint64_t hash_more(uint64_t h, const void *p, size_t n) { return moe8_hash64(p, n, h); }
#define HASH_SEED 1

/* h extended by a whole file (small JSON), or by the word "absent". */
static uint64_t hash_file(uint64_t h, const char *dir, const char *name) {
    char path[4096];
    unsigned char buf[65536];
    size_t n;
    FILE *f;
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path || !(f = fopen(path, "rb")))
        return hash_more(h, "absent", 6);
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) h = hash_more(h, buf, n);
    fclose(f);
    return h;
}

/* h extended by every loaded safetensors file: base name, size, [mtime],
 * header length and bytes (validated by the load, so the length is sane). */
static moe8_status hash_headers(const moe8_model *m, int with_mtime, uint64_t *h, moe8_error *err) {
    for (int i = 0; i < moe8_st_n_files(m->st); i++) {
        const char *path = moe8_st_file_path(m->st, i), *base = strrchr(path, '/');
        const int64_t size = moe8_st_file_size(m->st, i);
        unsigned char len8[8], buf[65536];
        uint64_t len = 0;
        struct stat sb;
        FILE *f = fopen(path, "rb");
        base = base ? base + 1 : path;
        if (!f || fread(len8, 1, 8, f) != 8 || (with_mtime && fstat(fileno(f), &sb) != 0)) {
            if (f) fclose(f);
            return moe8_fail(err, MOE8_ERR_IO, -1, "cannot read the header of '%s'", path);
        }
        for (int b = 7; b >= 0; b--) len = (len << 8) | len8[b];
        *h = hash_more(hash_more(hash_more(*h, base, strlen(base) + 1), &size, sizeof size), len8, 8);
        if (with_mtime) {
            const int64_t t[2] = {(int64_t)sb.st_mtim.tv_sec, (int64_t)sb.st_mtim.tv_nsec};
            *h = hash_more(*h, t, sizeof t);
        }
        while (len > 0) {
            size_t want = len < sizeof buf ? (size_t)len : sizeof buf, got = fread(buf, 1, want, f);
            if (got == 0) break;
            *h = hash_more(*h, buf, got);
            len -= got;
        }
        fclose(f);
        if (len) return moe8_fail(err, MOE8_ERR_IO, -1, "'%s': header shorter than its length", path);
    }
    return MOE8_OK;
}

moe8_status moe8_model_fingerprint(const moe8_model *m, int with_mtime, uint64_t fp[3],
                                   moe8_error *err) {
    fp[0] = hash_file(HASH_SEED, m->dir, "config.json");
    fp[1] = hash_file(HASH_SEED, m->dir, "quant_model_description.json");
    fp[2] = hash_file(HASH_SEED, m->dir, "model.safetensors.index.json");
    return hash_headers(m, with_mtime, &fp[2], err);
}

moe8_status moe8_model_load_check(moe8_dist *d, moe8_model *m, moe8_status local,
                                  moe8_error *err) {
    static const char *const names[3] = {
        "the model's config.json", "the model's quant_model_description.json",
        "the model's safetensors files (index, headers or sizes)"};
    uint64_t h[3] = {0, 0, 0};
    moe8_status st = local;
    if (!st) {
        st = moe8_dist_shard_of(&m->cfg, moe8_dist_rank(d), moe8_dist_size(d),
                                moe8_dist_expert_parallel(d), &m->shard, err);
        if (st) moe8_error_prefix(err, "model '%s'", m->dir);
    }
    if (!st) st = moe8_model_fingerprint(m, 0, h, err);
    if ((st = moe8_dist_agree(d, st, err))) return st;
    return moe8_dist_same_hashes(d, h, 3, names, err);
}
