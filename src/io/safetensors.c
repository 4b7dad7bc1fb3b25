/*
 * safetensors.c — memory-mapped reader of safetensors files and sharded sets.
 *
 * File layout (integers little-endian):
 *   [0, 8)         u64 N: header length, N <= 100 MB and 8 + N <= file size
 *   [8, 8+N)       JSON object, space-padded: optional "__metadata__"
 *                  (string -> string) and one entry per tensor
 *                    "name": {"dtype": "BF16", "shape": [d0, ...],
 *                             "data_offsets": [begin, end]}
 *                  with offsets relative to the data section
 *   [8+N, EOF)     data section: the tensors back to back, no gaps, no
 *                  overlaps, no trailing bytes
 * A folder is either sharded (model.safetensors.index.json: "weight_map" maps
 * each tensor name to a file inside the folder) or every *.safetensors in it,
 * in name order.
 *
 * Every number in a file is hostile: each header is validated in full (types,
 * exact integers, overflow, contiguity) before open returns. Tensors are
 * listed file by file and, within a file, in data order.
 * Does not: convert dtypes (dtype.c), write files (st_writer.c), copy data.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"
#include "io/file.h"
#include "io/json_util.h"
#include "io/safetensors_internal.h"

typedef struct {
    char *path;           /* as opened; names the file in errors */
    const uint8_t *base;  /* [size] the whole file (our map or the caller's buffer) */
    size_t size;
    int mapped;           /* base is our mmap: unmap on close, madvise on release */
    cJSON *metadata;      /* detached "__metadata__" object, or NULL */
} st_file;

struct moe8_st {
    st_file *files;       /* [n_files] */
    int n_files;
    moe8_tensor *tensors; /* [n_tensors]; names are owned (strdup) */
    size_t n_tensors, cap_tensors;
    moe8_name_table names;
};

static const char *tensor_name_of(const void *ctx, uint32_t i) {
    return ((const moe8_st *)ctx)->tensors[i].name;
}

/* ======================================================================== */
/* One header entry                                                          */
/* ======================================================================== */

/* Bounds of the current file's data section, for the entry checks. */
typedef struct {
    const char *path;
    uint64_t data_start, data_size;
} st_ctx;

static moe8_status parse_dtype(const st_ctx *c, const char *name, const cJSON *v,
                               moe8_tensor *t, moe8_error *err) {
    if (!cJSON_IsString(v))
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': tensor '%.128s': dtype is not a string",
                         c->path, name);
    if (moe8_dtype_parse(v->valuestring, &t->dtype))
        return moe8_fail(err, MOE8_ERR_FORMAT, -1,
                         "'%s': tensor '%.128s': unknown dtype '%.32s' (expected F64, F32, F16, "
                         "BF16, I64, I32, I16, I8, U64, U32, U16, U8, BOOL, F8_E4M3 or F8_E5M2)",
                         c->path, name, v->valuestring);
    return MOE8_OK;
}

static moe8_status parse_shape(const st_ctx *c, const char *name, const cJSON *v, moe8_tensor *t,
                               moe8_error *err) {
    int n;
    const cJSON *d;
    if (!cJSON_IsArray(v))
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': tensor '%.128s': shape is not an array",
                         c->path, name);
    n = cJSON_GetArraySize(v);
    if (n > MOE8_MAX_DIMS)
        return moe8_fail(err, MOE8_ERR_FORMAT, -1,
                         "'%s': tensor '%.128s': shape has %d dims, more than %d", c->path, name, n,
                         MOE8_MAX_DIMS);
    t->n_dims = 0;
    cJSON_ArrayForEach(d, v) {
        int64_t x;
        if (moe8_json_exact_int(d, &x) || x < 0)
            return moe8_fail(err, MOE8_ERR_FORMAT, -1,
                             "'%s': tensor '%.128s': shape[%d] is not an exact non-negative "
                             "integer", c->path, name, t->n_dims);
        t->shape[t->n_dims++] = x;
    }
    return MOE8_OK;
}

static moe8_status parse_offsets(const st_ctx *c, const char *name, const cJSON *v,
                                 uint64_t off[2], moe8_error *err) {
    int64_t x[2];
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 2)
        return moe8_fail(err, MOE8_ERR_FORMAT, -1,
                         "'%s': tensor '%.128s': data_offsets is not [begin, end]", c->path, name);
    for (int i = 0; i < 2; i++) {
        if (moe8_json_exact_int(cJSON_GetArrayItem(v, i), &x[i]) || x[i] < 0)
            return moe8_fail(err, MOE8_ERR_FORMAT, -1,
                             "'%s': tensor '%.128s': data_offsets[%d] is not an exact "
                             "non-negative integer", c->path, name, i);
        off[i] = (uint64_t)x[i];
    }
    if (off[0] > off[1])
        return moe8_fail(err, MOE8_ERR_FORMAT, -1,
                         "'%s': tensor '%.128s': data_offsets begin %llu > end %llu", c->path,
                         name, (unsigned long long)off[0], (unsigned long long)off[1]);
    if (off[1] > c->data_size)
        return moe8_fail(err, MOE8_ERR_FORMAT, (int64_t)(c->data_start + c->data_size),
                         "'%s': tensor '%.128s': data_offsets end %llu past data section of "
                         "%llu bytes", c->path, name, (unsigned long long)off[1],
                         (unsigned long long)c->data_size);
    return MOE8_OK;
}

/* The span [begin, end) must hold exactly product(shape) elements. */
static moe8_status check_span(const st_ctx *c, const char *name, moe8_tensor *t,
                              const uint64_t off[2], moe8_error *err) {
    uint64_t n = 1, bytes;
    int overflow = 0;
    for (int i = 0; i < t->n_dims; i++) overflow |= __builtin_mul_overflow(n, (uint64_t)t->shape[i], &n);
    overflow |= __builtin_mul_overflow(n, (uint64_t)moe8_dtype_size(t->dtype), &bytes);
    if (overflow)
        return moe8_fail(err, MOE8_ERR_FORMAT, -1,
                         "'%s': tensor '%.128s': shape product overflows", c->path, name);
    if (bytes != off[1] - off[0])
        return moe8_fail(err, MOE8_ERR_FORMAT, (int64_t)(c->data_start + off[0]),
                         "'%s': tensor '%.128s': data_offsets span %llu bytes but shape needs "
                         "%llu bytes of %s", c->path, name, (unsigned long long)(off[1] - off[0]),
                         (unsigned long long)bytes, moe8_dtype_name(t->dtype));
    t->n_elements = (int64_t)n; /* n <= bytes <= file size: fits */
    t->n_bytes = (size_t)bytes;
    return MOE8_OK;
}

/* Fill *t (all but name, data and file_index) from one header entry. */
static moe8_status parse_entry(const st_ctx *c, const cJSON *e, moe8_tensor *t, uint64_t off[2],
                               moe8_error *err) {
    static const char *const fields[3] = {"dtype", "shape", "data_offsets"};
    const cJSON *v[3] = {NULL, NULL, NULL}, *f;
    const char *name = e->string;
    moe8_status s;
    if (!cJSON_IsObject(e))
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': tensor '%.128s': entry is not an object",
                         c->path, name);
    cJSON_ArrayForEach(f, e) {
        int k = 0;
        while (k < 3 && strcmp(f->string, fields[k]) != 0) k++;
        if (k == 3 || v[k])
            return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': tensor '%.128s': %s field '%.64s'",
                             c->path, name, k == 3 ? "unknown" : "duplicate", f->string);
        v[k] = f;
    }
    for (int k = 0; k < 3; k++)
        if (!v[k])
            return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': tensor '%.128s': missing field '%s'",
                             c->path, name, fields[k]);
    if ((s = parse_dtype(c, name, v[0], t, err)) || (s = parse_shape(c, name, v[1], t, err)) ||
        (s = parse_offsets(c, name, v[2], off, err)))
        return s;
    return check_span(c, name, t, off, err);
}

/* ======================================================================== */
/* One file                                                                  */
/* ======================================================================== */

static int cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static moe8_status check_metadata(const char *path, const cJSON *m, moe8_error *err) {
    const cJSON *f;
    const char **keys;
    size_t n = 0;
    moe8_status s = MOE8_OK;
    if (!cJSON_IsObject(m))
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': __metadata__ is not an object", path);
    cJSON_ArrayForEach(f, m) {
        if (!cJSON_IsString(f))
            return moe8_fail(err, MOE8_ERR_FORMAT, -1,
                             "'%s': __metadata__ value of '%.128s' is not a string", path, f->string);
        n++;
    }
    if (n < 2) return MOE8_OK;
    if (!(keys = malloc(n * sizeof *keys)))
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "'%s': out of memory", path);
    n = 0;
    cJSON_ArrayForEach(f, m) keys[n++] = f->string;
    qsort(keys, n, sizeof *keys, cmp_str_ptr);
    for (size_t i = 1; i < n && !s; i++)
        if (strcmp(keys[i - 1], keys[i]) == 0)
            s = moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': __metadata__ has duplicate key '%.128s'",
                          path, keys[i]);
    free(keys);
    return s;
}

static int cmp_tensor_offset(const void *a, const void *b) {
    const moe8_tensor *x = a, *y = b;
    if (x->file_offset != y->file_offset) return x->file_offset < y->file_offset ? -1 : 1;
    if (x->n_bytes != y->n_bytes) return x->n_bytes < y->n_bytes ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* Sort the file's tensors into data order; they must tile the data section. */
static moe8_status check_contiguous(const st_ctx *c, moe8_tensor *t, size_t n, moe8_error *err) {
    uint64_t pos = 0;
    if (n > 1) qsort(t, n, sizeof *t, cmp_tensor_offset);
    for (size_t i = 0; i < n; i++) {
        uint64_t begin = (uint64_t)t[i].file_offset - c->data_start;
        if (begin < pos)
            return moe8_fail(err, MOE8_ERR_FORMAT, t[i].file_offset,
                             "'%s': tensor '%.128s' (data bytes %llu..%llu) overlaps tensor "
                             "'%.128s'", c->path, t[i].name, (unsigned long long)begin,
                             (unsigned long long)(begin + t[i].n_bytes), t[i - 1].name);
        if (begin > pos)
            return moe8_fail(err, MOE8_ERR_FORMAT, (int64_t)(c->data_start + pos),
                             "'%s': gap of %llu bytes before tensor '%.128s' at data offset %llu",
                             c->path, (unsigned long long)(begin - pos), t[i].name,
                             (unsigned long long)begin);
        pos = begin + t[i].n_bytes;
    }
    if (pos != c->data_size)
        return moe8_fail(err, MOE8_ERR_FORMAT, (int64_t)(c->data_start + pos),
                         "'%s': %llu trailing bytes after the last tensor (data section is %llu "
                         "bytes)", c->path, (unsigned long long)(c->data_size - pos),
                         (unsigned long long)c->data_size);
    return MOE8_OK;
}

static moe8_status reserve_tensors(moe8_st *st, size_t more, const char *path, moe8_error *err) {
    size_t need = st->n_tensors + more, cap = st->cap_tensors ? st->cap_tensors : 64;
    moe8_tensor *p;
    if (need <= st->cap_tensors) return MOE8_OK;
    while (cap < need) cap *= 2;
    if (!(p = realloc(st->tensors, cap * sizeof *p)))
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "'%s': out of memory for %zu tensors", path, need);
    st->tensors = p;
    st->cap_tensors = cap;
    return MOE8_OK;
}

/* Append the tensors of a parsed header (a JSON object) of file `fi`. */
static moe8_status add_entries(moe8_st *st, int fi, const st_ctx *c, cJSON *root,
                               moe8_error *err) {
    st_file *f = &st->files[fi];
    size_t first = st->n_tensors;
    cJSON *e, *meta = NULL;
    moe8_status s = reserve_tensors(st, (size_t)cJSON_GetArraySize(root), c->path, err);
    if (s) return s;
    cJSON_ArrayForEach(e, root) {
        moe8_tensor *t = &st->tensors[st->n_tensors];
        uint64_t off[2];
        if (strcmp(e->string, "__metadata__") == 0) {
            if (meta)
                return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': duplicate __metadata__", c->path);
            if ((s = check_metadata(c->path, e, err))) return s;
            meta = e;
            continue;
        }
        memset(t, 0, sizeof *t);
        if ((s = parse_entry(c, e, t, off, err))) return s;
        if (!(t->name = strdup(e->string)))
            return moe8_fail(err, MOE8_ERR_NOMEM, -1, "'%s': out of memory", c->path);
        t->data = f->base + c->data_start + off[0];
        t->file_index = fi;
        t->file_offset = (int64_t)(c->data_start + off[0]);
        st->n_tensors++;
    }
    /* A file may hold no tensor at all (st->tensors still NULL): its data
     * section must then be empty, which check_contiguous still checks. */
    if ((s = check_contiguous(c, st->tensors ? st->tensors + first : NULL, st->n_tensors - first,
                              err)))
        return s;
    if (meta) f->metadata = cJSON_DetachItemViaPointer(root, meta);
    return MOE8_OK;
}

/* Validate file `fi` (already in memory) and append its tensors. */
static moe8_status parse_file(moe8_st *st, int fi, moe8_error *err) {
    const st_file *f = &st->files[fi];
    st_ctx c = {f->path, 0, 0};
    uint64_t hlen = 0;
    char *text;
    cJSON *root;
    moe8_status s;
    if (f->size < 8)
        return moe8_fail(err, MOE8_ERR_FORMAT, 0, "'%s': file of %zu bytes is shorter than the "
                         "8-byte header length", f->path, f->size);
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | f->base[i];
    if (hlen > MOE8_ST_MAX_HEADER)
        return moe8_fail(err, MOE8_ERR_FORMAT, 0, "'%s': header length %llu exceeds the limit of "
                         "%llu bytes", f->path, (unsigned long long)hlen,
                         (unsigned long long)MOE8_ST_MAX_HEADER);
    if (hlen > f->size - 8)
        return moe8_fail(err, MOE8_ERR_FORMAT, 0, "'%s': header length %llu past end of file "
                         "(%zu bytes)", f->path, (unsigned long long)hlen, f->size);
    c.data_start = 8 + hlen;
    c.data_size = f->size - c.data_start;
    /* A NUL-terminated copy, so the JSON parser can never read past the header. */
    if (!(text = malloc(hlen + 1)))
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "'%s': out of memory for the header", f->path);
    memcpy(text, f->base + 8, hlen);
    text[hlen] = '\0';
    s = moe8_json_parse_syntax(text, hlen, 8, f->path, "header", &root, err);
    free(text);
    if (s != MOE8_OK) return s;
    if (!cJSON_IsObject(root))
        s = moe8_fail(err, MOE8_ERR_FORMAT, 8, "'%s': header is not a JSON object", f->path);
    else
        s = add_entries(st, fi, &c, root, err);
    cJSON_Delete(root);
    return s;
}

/* ======================================================================== */
/* Files, folders, the sharded index                                         */
/* ======================================================================== */

static moe8_status new_file(moe8_st *st, const char *path, moe8_error *err) {
    st_file *p = realloc(st->files, (size_t)(st->n_files + 1) * sizeof *p);
    if (!p) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "'%s': out of memory", path);
    st->files = p;
    memset(&p[st->n_files], 0, sizeof *p);
    if (!(p[st->n_files].path = strdup(path)))
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "'%s': out of memory", path);
    st->n_files++;
    return MOE8_OK;
}

/* Map `path` read-only and parse it as the next file of the set. */
/* The small tensors of a mapped file (scales, offsets, norms, biases: a few KB
 * each, scattered between the weights) are read at load by the checks; ask for
 * them all at once, so a cold load reads them with the disk's queue full
 * rather than one fault at a time. */
#define PREFETCH_MAX_BYTES (64u << 10)
static void prefetch_small(const moe8_st *st, int file) {
    const st_file *f = &st->files[file];
    if (!f->mapped) return;
    for (size_t i = 0; i < st->n_tensors; i++) {
        const moe8_tensor *t = &st->tensors[i];
        if (t->file_index != file || !t->n_bytes || t->n_bytes > PREFETCH_MAX_BYTES) continue;
        const uintptr_t a = (uintptr_t)t->data, a0 = a & ~(uintptr_t)4095;
        madvise((void *)a0, t->n_bytes + (a - a0), MADV_WILLNEED);
    }
}

static moe8_status map_file(moe8_st *st, const char *path, moe8_error *err) {
    struct stat sb;
    st_file *f;
    int fd;
    moe8_status s = new_file(st, path, err);
    if (s) return s;
    f = &st->files[st->n_files - 1];
    if ((s = moe8_open_regular(path, &fd, &sb, err)) != MOE8_OK) return s;
    f->size = (size_t)sb.st_size;
    if (f->size > 0) {
        void *m = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            close(fd);
            return moe8_fail(err, MOE8_ERR_IO, -1, "cannot map '%s': %s", path, strerror(e));
        }
        f->base = m;
        f->mapped = 1;
    }
    close(fd);
    if ((s = parse_file(st, st->n_files - 1, err)) != MOE8_OK) return s;
    prefetch_small(st, st->n_files - 1);
    return MOE8_OK;
}

static char *join_path(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static int has_suffix(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* Free a list of n strings. */
static void free_strs(char **v, size_t n) {
    for (size_t i = 0; v && i < n; i++) free(v[i]);
    free(v);
}

/* Collect the *.safetensors regular files of `dir`, sorted by name. */
static moe8_status list_folder(const char *dir, char ***out, size_t *n_out, moe8_error *err) {
    DIR *d = opendir(dir);
    struct dirent *de;
    char **v = NULL;
    size_t n = 0, cap = 0;
    *out = NULL;
    *n_out = 0;
    if (!d) return moe8_fail(err, MOE8_ERR_IO, -1, "cannot list '%s': %s", dir, strerror(errno));
    while ((de = readdir(d))) {
        struct stat sb;
        char *full;
        if (!has_suffix(de->d_name, ".safetensors")) continue;
        if (!(full = join_path(dir, de->d_name))) goto nomem;
        if (stat(full, &sb) != 0 || !S_ISREG(sb.st_mode)) {
            free(full);
            continue;
        }
        if (n == cap) {
            char **p = realloc(v, (cap = cap ? 2 * cap : 16) * sizeof *v);
            if (!p) {
                free(full);
                goto nomem;
            }
            v = p;
        }
        v[n++] = full;
    }
    closedir(d);
    if (n > 1) qsort(v, n, sizeof *v, cmp_str_ptr);
    *out = v;
    *n_out = n;
    return MOE8_OK;
nomem:
    closedir(d);
    free_strs(v, n);
    return moe8_fail(err, MOE8_ERR_NOMEM, -1, "'%s': out of memory", dir);
}

static moe8_status open_folder_glob(moe8_st *st, const char *dir, moe8_error *err) {
    char **files;
    size_t n;
    moe8_status s = list_folder(dir, &files, &n, err);
    if (s) return s;
    if (n == 0)
        s = moe8_fail(err, MOE8_ERR_NOT_FOUND, -1, "'%s': no *.safetensors file and no %s", dir,
                      MOE8_ST_INDEX_NAME);
    for (size_t i = 0; i < n && !s; i++) s = map_file(st, files[i], err);
    free_strs(files, n);
    return s;
}

/* A shard name must be relative and have no ".." component. */
static moe8_status check_shard_name(const char *index, const char *name, moe8_error *err) {
    const char *p = name;
    if (!*name)
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': empty shard file name", index);
    if (name[0] == '/')
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': shard path '%.200s' is absolute", index,
                         name);
    while (*p) {
        size_t len = strcspn(p, "/");
        if (len == 2 && p[0] == '.' && p[1] == '.')
            return moe8_fail(err, MOE8_ERR_FORMAT, -1,
                             "'%s': shard path '%.200s' has a '..' component", index, name);
        p += len;
        while (*p == '/') p++;
    }
    return MOE8_OK;
}

/* Open one shard named by the index, after checking it stays inside `root`
 * (the folder's real path, with symlinks resolved). */
static moe8_status open_shard(moe8_st *st, const char *dir, const char *root, const char *index,
                              const char *name, moe8_error *err) {
    char *full, real[PATH_MAX];
    size_t n_root = strlen(root);
    moe8_status s = check_shard_name(index, name, err);
    if (s) return s;
    if (!(full = join_path(dir, name))) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "out of memory");
    if (!realpath(full, real)) {
        int e = errno;
        s = moe8_fail(err, e == ENOENT ? MOE8_ERR_NOT_FOUND : MOE8_ERR_IO, -1,
                      "'%s': shard '%.200s' listed in the index is missing: %s", index, name,
                      strerror(e));
    } else if (strncmp(real, root, n_root) != 0 || real[n_root] != '/') {
        s = moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': shard '%.200s' resolves outside the folder",
                      index, name);
    } else {
        s = map_file(st, full, err);
    }
    free(full);
    return s;
}

/* Distinct shard names of weight_map, sorted (pointers into the JSON). */
static moe8_status index_shards(const char *index, const cJSON *map, const char ***out,
                                size_t *n_out, moe8_error *err) {
    const cJSON *e;
    const char **v;
    size_t n = 0, k = 0;
    *out = NULL;
    *n_out = 0;
    cJSON_ArrayForEach(e, map) {
        if (!cJSON_IsString(e))
            return moe8_fail(err, MOE8_ERR_FORMAT, -1,
                             "'%s': weight_map value of '%.128s' is not a string", index, e->string);
        n++;
    }
    if (n == 0) return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': weight_map is empty", index);
    if (!(v = malloc(n * sizeof *v))) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "out of memory");
    n = 0;
    cJSON_ArrayForEach(e, map) v[n++] = e->valuestring;
    qsort(v, n, sizeof *v, cmp_str_ptr);
    for (size_t i = 0; i < n; i++)
        if (k == 0 || strcmp(v[k - 1], v[i]) != 0) v[k++] = v[i];
    *out = v;
    *n_out = k;
    return MOE8_OK;
}

/* Every tensor the index names must be in the file the index says. */
static moe8_status check_index_map(const moe8_st *st, const char *index, const cJSON *map,
                                   const char *dir, moe8_error *err) {
    const cJSON *e;
    size_t n_dir = strlen(dir);
    cJSON_ArrayForEach(e, map) {
        const moe8_tensor *t = moe8_st_find(st, e->string);
        const char *file = t ? st->files[t->file_index].path + n_dir + 1 : NULL;
        if (!t || strcmp(file, e->valuestring) != 0)
            return moe8_fail(err, MOE8_ERR_FORMAT, -1,
                             "'%s': tensor '%.128s' listed for shard '%.200s' is missing from it",
                             index, e->string, e->valuestring);
    }
    return MOE8_OK;
}

static moe8_status open_index(moe8_st *st, const char *dir, const char *index, cJSON **root_out,
                              moe8_error *err) {
    char *text = NULL, root[PATH_MAX];
    size_t len;
    const char **shards = NULL;
    size_t n_shards = 0;
    const cJSON *map;
    moe8_status s = moe8_read_file(index, MOE8_ST_MAX_HEADER, &text, &len, err);
    if (s) return s;
    s = moe8_json_parse(text, len, index, root_out, err);
    free(text);
    if (s) return s;
    if (!cJSON_IsObject(*root_out))
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': index is not a JSON object", index);
    map = cJSON_GetObjectItemCaseSensitive(*root_out, "weight_map");
    if (!cJSON_IsObject(map))
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': weight_map is missing or not an object",
                         index);
    if (!realpath(dir, root))
        return moe8_fail(err, MOE8_ERR_IO, -1, "cannot resolve '%s': %s", dir, strerror(errno));
    if ((s = index_shards(index, map, &shards, &n_shards, err))) return s;
    for (size_t i = 0; i < n_shards && !s; i++) s = open_shard(st, dir, root, index, shards[i], err);
    free(shards);
    return s;
}

/* ======================================================================== */
/* Public API                                                                */
/* ======================================================================== */

/* Index every tensor by name; a name seen twice is an error. */
static moe8_status build_names(moe8_st *st, moe8_error *err) {
    if (st->n_tensors > UINT32_MAX - 1)
        return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1, "too many tensors (%zu)", st->n_tensors);
    if (moe8_name_table_init(&st->names, st->n_tensors, tensor_name_of, st))
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "out of memory for the tensor table");
    for (size_t i = 0; i < st->n_tensors; i++) {
        const moe8_tensor *t = &st->tensors[i];
        int64_t prev = moe8_name_table_add(&st->names, (uint32_t)i);
        if (prev == -2) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "out of memory");
        if (prev < 0) continue;
        if (st->tensors[prev].file_index == t->file_index)
            return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': duplicate tensor name '%.128s'",
                             st->files[t->file_index].path, t->name);
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "tensor '%.128s' is in both '%s' and '%s'",
                         t->name, st->files[st->tensors[prev].file_index].path,
                         st->files[t->file_index].path);
    }
    return MOE8_OK;
}

static moe8_status open_dir(moe8_st *st, const char *dir, moe8_error *err) {
    char *index = join_path(dir, MOE8_ST_INDEX_NAME);
    cJSON *root = NULL;
    struct stat sb;
    moe8_status s;
    if (!index) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "out of memory");
    if (stat(index, &sb) != 0) {
        s = open_folder_glob(st, dir, err);
        if (!s) s = build_names(st, err);
    } else {
        s = open_index(st, dir, index, &root, err);
        if (!s) s = build_names(st, err);
        if (!s) s = check_index_map(st, index, cJSON_GetObjectItemCaseSensitive(root, "weight_map"),
                                    dir, err);
    }
    cJSON_Delete(root);
    free(index);
    return s;
}

moe8_status moe8_st_open(const char *path, moe8_st **out, moe8_error *err) {
    struct stat sb;
    moe8_st *st;
    moe8_status s;
    if (!out || !path) return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "st_open: null argument");
    *out = NULL;
    if (stat(path, &sb) != 0)
        return moe8_fail(err, errno == ENOENT ? MOE8_ERR_NOT_FOUND : MOE8_ERR_IO, -1,
                         "cannot open '%s': %s", path, strerror(errno));
    if (!(st = calloc(1, sizeof *st))) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "out of memory");
    if (S_ISDIR(sb.st_mode)) {
        s = open_dir(st, path, err);
    } else {
        s = map_file(st, path, err);
        if (!s) s = build_names(st, err);
    }
    if (s) {
        moe8_st_free(st);
        return s;
    }
    *out = st;
    return MOE8_OK;
}

moe8_status moe8_st_open_buffer(const void *buf, size_t len, const char *label, moe8_st **out,
                                moe8_error *err) {
    moe8_st *st;
    moe8_status s;
    if (!out || (!buf && len)) return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "st_open_buffer: null argument");
    *out = NULL;
    if (!(st = calloc(1, sizeof *st))) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "out of memory");
    s = new_file(st, label ? label : "<buffer>", err);
    if (!s) {
        st->files[0].base = buf;
        st->files[0].size = len;
        s = parse_file(st, 0, err);
    }
    if (!s) s = build_names(st, err);
    if (s) {
        moe8_st_free(st);
        return s;
    }
    *out = st;
    return MOE8_OK;
}

void moe8_st_free(moe8_st *st) {
    if (!st) return;
    for (size_t i = 0; i < st->n_tensors; i++) free((char *)st->tensors[i].name);
    for (int i = 0; i < st->n_files; i++) {
        st_file *f = &st->files[i];
        if (f->mapped) munmap((void *)f->base, f->size);
        cJSON_Delete(f->metadata);
        free(f->path);
    }
    moe8_name_table_free(&st->names);
    free(st->tensors);
    free(st->files);
    free(st);
}

size_t moe8_st_count(const moe8_st *st) { return st ? st->n_tensors : 0; }

const moe8_tensor *moe8_st_get(const moe8_st *st, size_t i) {
    return st && i < st->n_tensors ? &st->tensors[i] : NULL;
}

const moe8_tensor *moe8_st_find(const moe8_st *st, const char *name) {
    int64_t i;
    if (!st || !name) return NULL;
    i = moe8_name_table_find(&st->names, name);
    return i < 0 ? NULL : &st->tensors[i];
}

int moe8_st_n_files(const moe8_st *st) { return st ? st->n_files : 0; }

const char *moe8_st_file_path(const moe8_st *st, int file_index) {
    return st && file_index >= 0 && file_index < st->n_files ? st->files[file_index].path : NULL;
}

int64_t moe8_st_file_size(const moe8_st *st, int file_index) {
    if (!st || file_index < 0 || file_index >= st->n_files) return -1;
    return (int64_t)st->files[file_index].size;
}

const char *moe8_st_metadata(const moe8_st *st, int file_index, const char *key) {
    const cJSON *v;
    if (!st || !key || file_index < 0 || file_index >= st->n_files) return NULL;
    v = cJSON_GetObjectItemCaseSensitive(st->files[file_index].metadata, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

void moe8_st_release_range(const moe8_st *st, const moe8_tensor *t, size_t offset, size_t n) {
    uintptr_t page, begin, end;
    if (!st || !t || t->file_index < 0 || t->file_index >= st->n_files) return;
    if (!st->files[t->file_index].mapped || offset >= t->n_bytes) return;
    if (n > t->n_bytes - offset) n = t->n_bytes - offset;
    page = (uintptr_t)sysconf(_SC_PAGESIZE);
    begin = ((uintptr_t)t->data + offset + page - 1) & ~(page - 1);
    end = ((uintptr_t)t->data + offset + n) & ~(page - 1);
    if (end > begin) madvise((void *)begin, end - begin, MADV_DONTNEED);
}

void moe8_st_release(const moe8_st *st, const moe8_tensor *t) {
    if (t) moe8_st_release_range(st, t, 0, t->n_bytes);
}
