/*
 * st_writer.c — streaming safetensors writer: declare every tensor, then write
 * their data in any order (pwrite at computed offsets), then finish.
 *
 * Layout written (see safetensors.c for the format):
 *   [0, 8)        u64 little-endian header length N
 *   [8, 8+N)      JSON header, keys in layout order, "__metadata__" first when
 *                 set, padded with spaces so 8 + N is a multiple of 8
 *   [8+N, EOF)    data: tensors by decreasing dtype size (stable in declaration
 *                 order), so each starts at a multiple of its element size
 * The file is built at "<path>.tmp.<pid>" and renamed over `path` only by a
 * successful finish (after fsync of the file, then of the folder), so `path`
 * never holds a partial file.
 * Does not: convert dtypes, or keep tensor data in memory.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/buf.h"
#include "io/json_util.h"
#include "io/safetensors_internal.h"

typedef struct {
    char *name;
    moe8_dtype dtype;
    int n_dims;
    int64_t shape[MOE8_MAX_DIMS];
    size_t n_bytes;
    uint64_t begin;  /* offset in the data section, set with the header */
    int written;
} wt_tensor;

struct moe8_st_writer {
    char *path, *tmp_path;
    int fd;                /* open on tmp_path, -1 once closed */
    wt_tensor *t;          /* [n] in declaration order */
    size_t n, cap;
    uint64_t data_bytes;   /* sum of n_bytes, kept <= 2^53 */
    char **meta;           /* [2 * n_meta]: key, value, ... */
    size_t n_meta;
    moe8_name_table names;
    uint64_t data_start;   /* 8 + header length, once the header is written */
    int header_written, finished;
};

/* ======================================================================== */
/* Helpers                                                                   */
/* ======================================================================== */

static const char *wt_name_of(const void *ctx, uint32_t i) {
    return ((const moe8_st_writer *)ctx)->t[i].name;
}

/* pwrite all of [data, data+n) at `off`, retrying short writes. */
static int pwrite_all(int fd, const void *data, size_t n, uint64_t off) {
    const char *p = data;
    while (n > 0) {
        size_t chunk = n < ((size_t)1 << 30) ? n : ((size_t)1 << 30);
        ssize_t r = pwrite(fd, p, chunk, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        p += r;
        off += (uint64_t)r;
        n -= (size_t)r;
    }
    return 0;
}

/* Assign data offsets: dtype sizes 8, 4, 2, 1, declaration order within each. */
static void layout(moe8_st_writer *w) {
    uint64_t pos = 0;
    for (size_t size = 8; size >= 1; size /= 2)
        for (size_t i = 0; i < w->n; i++)
            if (moe8_dtype_size(w->t[i].dtype) == size) {
                w->t[i].begin = pos;
                pos += w->t[i].n_bytes;
            }
}

static void header_json(const moe8_st_writer *w, moe8_buf *b) {
    int first = 1;
    moe8_buf_add(b, "{", 1);
    if (w->n_meta) {
        moe8_buf_str(b, "\"__metadata__\":{");
        for (size_t i = 0; i < w->n_meta; i++) {
            if (i) moe8_buf_add(b, ",", 1);
            moe8_buf_json_str(b, w->meta[2 * i], strlen(w->meta[2 * i]), 0);
            moe8_buf_add(b, ":", 1);
            moe8_buf_json_str(b, w->meta[2 * i + 1], strlen(w->meta[2 * i + 1]), 0);
        }
        moe8_buf_add(b, "}", 1);
        first = 0;
    }
    for (size_t size = 8; size >= 1; size /= 2)
        for (size_t i = 0; i < w->n; i++) {
            const wt_tensor *t = &w->t[i];
            if (moe8_dtype_size(t->dtype) != size) continue;
            if (!first) moe8_buf_add(b, ",", 1);
            first = 0;
            moe8_buf_json_str(b, t->name, strlen(t->name), 0);
            moe8_buf_str(b, ":{\"dtype\":\"");
            moe8_buf_str(b, moe8_dtype_name(t->dtype));
            moe8_buf_str(b, "\",\"shape\":[");
            for (int d = 0; d < t->n_dims; d++)
                moe8_buf_printf(b, d ? ",%llu" : "%llu", (unsigned long long)t->shape[d]);
            moe8_buf_printf(b, "],\"data_offsets\":[%llu", (unsigned long long)t->begin);
            moe8_buf_printf(b, ",%llu]}", (unsigned long long)(t->begin + t->n_bytes));
        }
    moe8_buf_add(b, "}", 1);
    while ((8 + b->n) % 8) moe8_buf_add(b, " ", 1);
}

static moe8_status write_header(moe8_st_writer *w, moe8_error *err) {
    moe8_buf b = {0};
    unsigned char len8[8];
    moe8_status s = MOE8_OK;
    layout(w);
    header_json(w, &b);
    if (b.oom) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "'%s': out of memory for the header", w->path);
    if (b.n > MOE8_ST_MAX_HEADER) {
        free(b.p);
        return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1, "'%s': header of %zu bytes exceeds the "
                         "format's limit of %llu", w->path, b.n,
                         (unsigned long long)MOE8_ST_MAX_HEADER);
    }
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)b.n >> (8 * i));
    w->data_start = 8 + b.n;
    if (pwrite_all(w->fd, len8, 8, 0) || pwrite_all(w->fd, b.p, b.n, 8) ||
        ftruncate(w->fd, (off_t)(w->data_start + w->data_bytes)) != 0)
        s = moe8_fail(err, MOE8_ERR_IO, -1, "cannot write '%s': %s", w->tmp_path, strerror(errno));
    else
        w->header_written = 1;
    free(b.p);
    return s;
}

/* ======================================================================== */
/* Public API                                                                */
/* ======================================================================== */

moe8_status moe8_st_writer_open(const char *path, moe8_st_writer **out, moe8_error *err) {
    moe8_st_writer *w;
    size_t n;
    if (!path || !out) return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "st_writer_open: null argument");
    *out = NULL;
    if (!(w = calloc(1, sizeof *w))) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "out of memory");
    w->fd = -1;
    n = strlen(path) + 32;
    w->path = strdup(path);
    w->tmp_path = malloc(n);
    if (!w->path || !w->tmp_path || moe8_name_table_init(&w->names, 64, wt_name_of, w)) {
        moe8_st_writer_free(w);
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "out of memory");
    }
    snprintf(w->tmp_path, n, "%s.tmp.%ld", path, (long)getpid());
    w->fd = open(w->tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        moe8_status s = moe8_fail(err, MOE8_ERR_IO, -1, "cannot create '%s': %s", w->tmp_path,
                                  strerror(errno));
        free(w->tmp_path); /* nothing was created: close must not unlink */
        w->tmp_path = NULL;
        moe8_st_writer_free(w);
        return s;
    }
    *out = w;
    return MOE8_OK;
}

moe8_status moe8_st_writer_metadata(moe8_st_writer *w, const char *key, const char *value,
                                    moe8_error *err) {
    char **p, *k, *v;
    if (!w || !key || !value)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "st_writer_metadata: null argument");
    if (w->header_written)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "'%s': metadata '%s' after data was written",
                         w->path, key);
    for (size_t i = 0; i < w->n_meta; i++)
        if (strcmp(w->meta[2 * i], key) == 0)
            return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "'%s': duplicate metadata key '%s'",
                             w->path, key);
    if (!(p = realloc(w->meta, 2 * (w->n_meta + 1) * sizeof *p)))
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "out of memory");
    w->meta = p;
    k = strdup(key);
    v = strdup(value);
    if (!k || !v) {
        free(k);
        free(v);
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "out of memory");
    }
    p[2 * w->n_meta] = k;
    p[2 * w->n_meta + 1] = v;
    w->n_meta++;
    return MOE8_OK;
}

/* Check a declaration and compute its byte size. */
static moe8_status check_decl(const moe8_st_writer *w, const char *name, moe8_dtype dt,
                              int n_dims, const int64_t *shape, size_t *n_bytes, moe8_error *err) {
    uint64_t n = moe8_dtype_size(dt), total;
    if (!name || !*name || strcmp(name, "__metadata__") == 0)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "'%s': invalid tensor name '%s'", w->path,
                         name ? name : "(null)");
    if (n == 0)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "'%s': tensor '%s': invalid dtype %d",
                         w->path, name, (int)dt);
    if (n_dims < 0 || n_dims > MOE8_MAX_DIMS || (n_dims > 0 && !shape))
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "'%s': tensor '%s': %d dims (expected "
                         "0..%d with a shape)", w->path, name, n_dims, MOE8_MAX_DIMS);
    for (int d = 0; d < n_dims; d++) {
        if (shape[d] < 0)
            return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "'%s': tensor '%s': negative dim "
                             "shape[%d] = %lld", w->path, name, d, (long long)shape[d]);
        if (__builtin_mul_overflow(n, (uint64_t)shape[d], &n)) n = UINT64_MAX;
    }
    if (n > (uint64_t)MOE8_JSON_MAX_EXACT || n > SIZE_MAX ||
        __builtin_add_overflow(w->data_bytes, n, &total) || total > (uint64_t)MOE8_JSON_MAX_EXACT)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "'%s': tensor '%s': size overflows",
                         w->path, name);
    *n_bytes = (size_t)n;
    return MOE8_OK;
}

moe8_status moe8_st_writer_declare(moe8_st_writer *w, const char *name, moe8_dtype dt,
                                   int n_dims, const int64_t *shape, moe8_error *err) {
    wt_tensor *t;
    size_t n_bytes = 0;
    int64_t prev;
    moe8_status s;
    if (!w) return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "st_writer_declare: null writer");
    if (w->header_written)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "'%s': tensor '%s' declared after data "
                         "was written", w->path, name ? name : "(null)");
    if ((s = check_decl(w, name, dt, n_dims, shape, &n_bytes, err))) return s;
    if (moe8_name_table_find(&w->names, name) >= 0)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "'%s': duplicate tensor name '%s'",
                         w->path, name);
    if (w->n == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 64;
        wt_tensor *p = realloc(w->t, cap * sizeof *p);
        if (!p) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "out of memory");
        w->t = p;
        w->cap = cap;
    }
    t = &w->t[w->n];
    memset(t, 0, sizeof *t);
    if (!(t->name = strdup(name))) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "out of memory");
    t->dtype = dt;
    t->n_dims = n_dims;
    for (int d = 0; d < n_dims; d++) t->shape[d] = shape[d];
    t->n_bytes = n_bytes;
    t->written = n_bytes == 0; /* nothing to write */
    prev = moe8_name_table_add(&w->names, (uint32_t)w->n);
    if (prev != -1) {
        free(t->name);
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "out of memory");
    }
    w->n++;
    w->data_bytes += n_bytes;
    return MOE8_OK;
}

moe8_status moe8_st_writer_write(moe8_st_writer *w, const char *name, const void *data,
                                 size_t n_bytes, moe8_error *err) {
    int64_t i;
    wt_tensor *t;
    moe8_status s;
    if (!w || !name || (!data && n_bytes))
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "st_writer_write: null argument");
    if (w->finished || w->fd < 0)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "'%s': write after finish", w->path);
    if ((i = moe8_name_table_find(&w->names, name)) < 0)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "'%s': tensor '%s' was not declared",
                         w->path, name);
    t = &w->t[i];
    if (n_bytes != t->n_bytes)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "'%s': tensor '%s': %zu bytes given, "
                         "declared shape needs %zu", w->path, name, n_bytes, t->n_bytes);
    if (t->written && n_bytes)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "'%s': tensor '%s' written twice",
                         w->path, name);
    if (!w->header_written && (s = write_header(w, err))) return s;
    if (pwrite_all(w->fd, data, n_bytes, w->data_start + t->begin))
        return moe8_fail(err, MOE8_ERR_IO, -1, "cannot write '%s': %s", w->tmp_path,
                         strerror(errno));
    t->written = 1;
    return MOE8_OK;
}

/* fsync the folder holding `path`, so the rename itself is durable. */
static int sync_parent(const char *path) {
    char *copy = strdup(path);
    int fd, rc = -1;
    if (!copy) return -1;
    fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        rc = fsync(fd);
        close(fd);
    }
    free(copy);
    return rc;
}

moe8_status moe8_st_writer_finish(moe8_st_writer *w, moe8_error *err) {
    moe8_status s;
    if (!w) return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "st_writer_finish: null writer");
    if (w->finished || w->fd < 0)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "'%s': already finished", w->path);
    for (size_t i = 0; i < w->n; i++)
        if (!w->t[i].written)
            return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "'%s': tensor '%s' was declared but "
                             "never written", w->path, w->t[i].name);
    if (!w->header_written && (s = write_header(w, err))) return s;
    if (fsync(w->fd) != 0)
        return moe8_fail(err, MOE8_ERR_IO, -1, "cannot sync '%s': %s", w->tmp_path, strerror(errno));
    if (close(w->fd) != 0) {
        w->fd = -1;
        return moe8_fail(err, MOE8_ERR_IO, -1, "cannot close '%s': %s", w->tmp_path,
                         strerror(errno));
    }
    w->fd = -1;
    if (rename(w->tmp_path, w->path) != 0)
        return moe8_fail(err, MOE8_ERR_IO, -1, "cannot rename '%s' to '%s': %s", w->tmp_path,
                         w->path, strerror(errno));
    w->finished = 1;
    if (sync_parent(w->path) != 0)
        return moe8_fail(err, MOE8_ERR_IO, -1, "cannot sync the folder of '%s': %s", w->path,
                         strerror(errno));
    return MOE8_OK;
}

void moe8_st_writer_free(moe8_st_writer *w) {
    if (!w) return;
    if (w->fd >= 0) close(w->fd);
    if (!w->finished && w->tmp_path) unlink(w->tmp_path);
    for (size_t i = 0; i < w->n; i++) free(w->t[i].name);
    for (size_t i = 0; i < 2 * w->n_meta; i++) free(w->meta[i]);
    moe8_name_table_free(&w->names);
    free(w->meta);
    free(w->t);
    free(w->tmp_path);
    free(w->path);
    free(w);
}
