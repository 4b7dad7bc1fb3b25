/*
 * folder.c — output folders of the model tools and their sharded
 * safetensors writer (convert.h).
 *
 * An output folder is built at "<parent>/.<name>.tmp.<pid>" and renamed to
 * "<parent>/<name>" at the end (rename(2) replaces an empty folder; a
 * non-empty one, with force, is first moved aside to ".<name>.old.<pid>" and
 * removed after). A run killed with SIGKILL cannot remove its temporary
 * folder, so begin removes such leftovers beside the output: folders named
 * ".<name>.tmp.<pid>" whose process no longer exists (kill(pid, 0) fails
 * with ESRCH; a live or foreign process's folder is never touched), each
 * reported through the log callback. Paths are compared canonically (realpath of the existing
 * part) so an output can never be, contain or sit inside a protected input.
 *
 * Shards: tensors are planned in write order, in groups; a new file starts
 * when a group does not fit the byte cap. Files are named as Hugging Face
 * does ("model.safetensors", or "model-00001-of-00003.safetensors" + index
 * with metadata.total_size and weight_map).
 *
 * Does not: follow or remove anything outside the folders it made (the
 * removal walks physically, never through symlinks).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "core/core.h"
#include "convert/convert.h"

/* ======================================================================== */
/* Paths                                                                     */
/* ======================================================================== */

/* Canonical form of a path whose last component may not exist yet. */
static moe8_status canon_out(const char *path, char *out, size_t cap, moe8_error *err) {
    char buf[PATH_MAX], parent[PATH_MAX];
    const char *base;
    char *slash;
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "output folder: empty or too long path");
    memcpy(buf, path, n + 1);
    while (n > 1 && buf[n - 1] == '/') buf[--n] = '\0';
    slash = strrchr(buf, '/');
    if (!slash) {
        base = buf;
        snprintf(parent, sizeof parent, ".");
    } else {
        base = slash + 1;
        if (slash == buf) snprintf(parent, sizeof parent, "/");
        else {
            *slash = '\0';
            snprintf(parent, sizeof parent, "%s", buf);
        }
    }
    if (!*base || !strcmp(base, ".") || !strcmp(base, ".."))
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "output folder '%s': name a folder, "
                         "not '.' or '..'", path);
    {
        char real[PATH_MAX];
        if (!realpath(parent, real))
            return moe8_fail(err, MOE8_ERR_NOT_FOUND, -1, "output folder '%s': parent folder "
                             "'%s': %s", path, parent, strerror(errno));
        if ((size_t)snprintf(out, cap, "%s/%s", strcmp(real, "/") ? real : "", base) >= cap)
            return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "output folder '%s': path too long",
                             path);
    }
    return MOE8_OK;
}

/* 1 if `a` equals `b` or lies inside it (both canonical). */
static int path_within(const char *a, const char *b) {
    size_t n = strlen(b);
    if (strncmp(a, b, n)) return 0;
    return a[n] == '\0' || a[n] == '/' || (n == 1 && b[0] == '/');
}

static int dir_is_empty(const char *path) {
    DIR *d = opendir(path);
    struct dirent *e;
    int empty = 1;
    if (!d) return 0;
    while (empty && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) empty = 0;
    closedir(d);
    return empty;
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *f) {
    (void)sb;
    (void)f;
    return flag == FTW_DP ? rmdir(p) : unlink(p);
}

static void rm_tree(const char *path) {
    if (path[0]) nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* ======================================================================== */
/* Output folder                                                             */
/* ======================================================================== */

/* The pid of a temporary folder name "<prefix><digits>", or 0. */
static long leftover_pid(const char *name, const char *prefix, size_t n_prefix) {
    const char *d = name + n_prefix;
    char *end;
    long pid;
    if (strncmp(name, prefix, n_prefix) || *d < '1' || *d > '9') return 0;
    errno = 0;
    pid = strtol(d, &end, 10);
    return errno || *end || pid > INT_MAX ? 0 : pid;
}

/* Remove ".<name>.tmp.<pid>" folders of `o->final` left by runs that were
 * killed (their process is gone). A pid that exists (kill(pid, 0) succeeds
 * or fails with EPERM: another user's) keeps its folder; so does anything
 * that is not a real folder. A pid reused since the crash keeps the leftover
 * until a later run. */
static void remove_dead_leftovers(const moe8_outdir *o) {
    const char *slash = strrchr(o->final, '/');
    char parent[PATH_MAX], prefix[PATH_MAX], path[2 * PATH_MAX];
    size_t n_prefix;
    struct dirent *e;
    DIR *d;
    snprintf(parent, sizeof parent, "%.*s", slash == o->final ? 1 : (int)(slash - o->final),
             o->final);
    n_prefix = (size_t)snprintf(prefix, sizeof prefix, ".%s.tmp.", slash + 1);
    if (n_prefix >= sizeof prefix || !(d = opendir(parent))) return;
    while ((e = readdir(d))) {
        long pid = leftover_pid(e->d_name, prefix, n_prefix);
        struct stat sb;
        if (pid <= 0 || pid == (long)getpid()) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        if ((size_t)snprintf(path, sizeof path, "%s/%s", slash == o->final ? "" : parent,
                             e->d_name) >= sizeof path ||
            lstat(path, &sb) != 0 || !S_ISDIR(sb.st_mode))
            continue;
        rm_tree(path);
        if (lstat(path, &sb) != 0)
            moe8_log(MOE8_LOG_WARN, "removed leftover temporary folder '%s' of process %ld "
                     "(no longer running)", path, pid);
        else
            moe8_log(MOE8_LOG_WARN, "cannot remove leftover temporary folder '%s' of process %ld",
                     path, pid);
    }
    closedir(d);
}

static moe8_status check_protect(const moe8_outdir *o, const char *out_dir,
                                 const char *const *protect, int n, moe8_error *err) {
    for (int i = 0; i < n; i++) {
        char real[PATH_MAX];
        if (!protect[i] || !realpath(protect[i], real)) continue;
        if (!strcmp(o->final, real))
            return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "output folder '%s' is the input "
                             "folder '%s'", out_dir, protect[i]);
        if (path_within(o->final, real))
            return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "output folder '%s' is inside the "
                             "input folder '%s'", out_dir, protect[i]);
        if (path_within(real, o->final))
            return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "output folder '%s' contains the "
                             "input folder '%s'", out_dir, protect[i]);
    }
    return MOE8_OK;
}

moe8_status moe8_outdir_begin(moe8_outdir *o, const char *out_dir, int force,
                              const char *const *protect, int n_protect, moe8_error *err) {
    struct stat sb;
    char *slash;
    moe8_status st;
    memset(o, 0, sizeof *o);
    if (!out_dir) return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "no output folder given");
    if ((st = canon_out(out_dir, o->final, sizeof o->final, err))) return st;
    if ((st = check_protect(o, out_dir, protect, n_protect, err))) return st;
    if (lstat(o->final, &sb) == 0) {
        if (!S_ISDIR(sb.st_mode))
            return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "output '%s' exists and is not a "
                             "folder", out_dir);
        if (!dir_is_empty(o->final)) {
            if (!force)
                return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "output folder '%s' exists and is "
                                 "not empty (use force to replace it)", out_dir);
            o->replace = 1;
        }
    }
    slash = strrchr(o->final, '/');
    if ((size_t)snprintf(o->tmp, sizeof o->tmp, "%.*s/.%s.tmp.%ld", (int)(slash - o->final),
                         o->final, slash + 1, (long)getpid()) >= sizeof o->tmp)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "output folder '%s': path too long", out_dir);
    remove_dead_leftovers(o);
    rm_tree(o->tmp);   /* a leftover of a crashed run with our pid */
    if (mkdir(o->tmp, 0755) != 0) {
        moe8_status r = moe8_fail(err, MOE8_ERR_IO, -1, "cannot create folder '%s': %s", o->tmp,
                                  strerror(errno));
        o->tmp[0] = '\0';
        return r;
    }
    return MOE8_OK;
}

moe8_status moe8_outdir_commit(moe8_outdir *o, moe8_error *err) {
    char old[sizeof o->tmp + 16];
    old[0] = '\0';
    if (o->replace) {
        char *slash = strrchr(o->final, '/');
        snprintf(old, sizeof old, "%.*s/.%s.old.%ld", (int)(slash - o->final), o->final, slash + 1,
                 (long)getpid());
        rm_tree(old);
        if (rename(o->final, old) != 0)
            return moe8_fail(err, MOE8_ERR_IO, -1, "cannot move '%s' aside: %s", o->final,
                             strerror(errno));
    }
    if (rename(o->tmp, o->final) != 0) {
        moe8_status st = moe8_fail(err, MOE8_ERR_IO, -1, "cannot rename '%s' to '%s': %s", o->tmp,
                                   o->final, strerror(errno));
        if (old[0]) rename(old, o->final);
        return st;
    }
    o->tmp[0] = '\0';
    if (old[0]) rm_tree(old);
    return MOE8_OK;
}

void moe8_outdir_abort(moe8_outdir *o) {
    if (!o) return;
    rm_tree(o->tmp);
    o->tmp[0] = '\0';
}

/* ======================================================================== */
/* Files                                                                     */
/* ======================================================================== */

static moe8_status copy_fd(int in, int out, const char *src, const char *dst, moe8_error *err) {
    char buf[1 << 16];
    for (;;) {
        ssize_t n = read(in, buf, sizeof buf), off = 0;
        if (n == 0) return MOE8_OK;
        if (n < 0) {
            if (errno == EINTR) continue;
            return moe8_fail(err, MOE8_ERR_IO, -1, "cannot read '%s': %s", src, strerror(errno));
        }
        while (off < n) {
            ssize_t w = write(out, buf + off, (size_t)(n - off));
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0)
                return moe8_fail(err, MOE8_ERR_IO, -1, "cannot write '%s': %s", dst, strerror(errno));
            off += w;
        }
    }
}

moe8_status moe8_copy_file(const char *src_dir, const char *dst_dir, const char *name,
                           int optional, moe8_error *err) {
    char src[PATH_MAX], dst[PATH_MAX];
    int in, out;
    moe8_status st;
    snprintf(src, sizeof src, "%s/%s", src_dir, name);
    snprintf(dst, sizeof dst, "%s/%s", dst_dir, name);
    if ((in = open(src, O_RDONLY)) < 0) {
        if (errno == ENOENT && optional) return MOE8_OK;
        return moe8_fail(err, errno == ENOENT ? MOE8_ERR_NOT_FOUND : MOE8_ERR_IO, -1,
                         "cannot open '%s': %s", src, strerror(errno));
    }
    if ((out = open(dst, O_WRONLY | O_CREAT | O_TRUNC, 0644)) < 0) {
        close(in);
        return moe8_fail(err, MOE8_ERR_IO, -1, "cannot create '%s': %s", dst, strerror(errno));
    }
    st = copy_fd(in, out, src, dst, err);
    close(in);
    if (close(out) != 0 && !st)
        st = moe8_fail(err, MOE8_ERR_IO, -1, "cannot write '%s': %s", dst, strerror(errno));
    return st;
}

moe8_status moe8_write_text(const char *dir, const char *name, const char *text, moe8_error *err) {
    char path[PATH_MAX];
    FILE *f;
    size_t n = strlen(text);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (!(f = fopen(path, "wb")))
        return moe8_fail(err, MOE8_ERR_IO, -1, "cannot create '%s': %s", path, strerror(errno));
    if (fwrite(text, 1, n, f) != n || fputc('\n', f) == EOF) {
        fclose(f);
        return moe8_fail(err, MOE8_ERR_IO, -1, "cannot write '%s': %s", path, strerror(errno));
    }
    if (fclose(f) != 0)
        return moe8_fail(err, MOE8_ERR_IO, -1, "cannot write '%s': %s", path, strerror(errno));
    return MOE8_OK;
}

/* ======================================================================== */
/* Shards                                                                    */
/* ======================================================================== */

typedef struct {
    char *name;
    moe8_dtype dt;
    int n_dims;
    int64_t shape[MOE8_MAX_DIMS];
    size_t n_bytes;
    int file;
} shard_tensor;

struct moe8_shards {
    char dir[PATH_MAX];
    uint64_t max_bytes, file_bytes, total;
    shard_tensor *t;
    size_t n, cap, next;      /* next: index of the next tensor to write */
    int n_files, open_file;   /* open_file: -1 before the first write */
    moe8_st_writer *w;
};

moe8_status moe8_shards_new(const char *dir, uint64_t max_bytes, moe8_shards **out,
                            moe8_error *err) {
    moe8_shards *s = calloc(1, sizeof *s);
    if (!s) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "out of memory");
    snprintf(s->dir, sizeof s->dir, "%s", dir);
    s->max_bytes = max_bytes ? max_bytes : MOE8_SHARD_DEFAULT_BYTES;
    s->open_file = -1;
    *out = s;
    return MOE8_OK;
}

void moe8_shards_free(moe8_shards *s) {
    if (!s) return;
    moe8_st_writer_free(s->w);
    for (size_t i = 0; i < s->n; i++) free(s->t[i].name);
    free(s->t);
    free(s);
}

void moe8_shards_group(moe8_shards *s, uint64_t group_bytes) {
    if (s->n_files == 0 || (s->file_bytes > 0 && s->file_bytes + group_bytes > s->max_bytes)) {
        s->n_files++;
        s->file_bytes = 0;
    }
    s->file_bytes += group_bytes;
}

moe8_status moe8_shards_plan(moe8_shards *s, const char *name, moe8_dtype dt, int n_dims,
                             const int64_t *shape, moe8_error *err) {
    shard_tensor *t;
    size_t n = moe8_dtype_size(dt);
    if (s->n_files == 0) moe8_shards_group(s, 0);
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 256;
        shard_tensor *p = realloc(s->t, cap * sizeof *p);
        if (!p) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "out of memory");
        s->t = p;
        s->cap = cap;
    }
    t = &s->t[s->n];
    memset(t, 0, sizeof *t);
    for (int i = 0; i < n_dims; i++) {
        t->shape[i] = shape[i];
        if (moe8_mul_size(n, (size_t)shape[i], &n))
            return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "tensor '%s': size overflows", name);
    }
    if (!(t->name = strdup(name))) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "out of memory");
    t->dt = dt;
    t->n_dims = n_dims;
    t->n_bytes = n;
    t->file = s->n_files - 1;
    s->total += n;
    s->n++;
    return MOE8_OK;
}

static void file_name(const moe8_shards *s, int f, char *out, size_t cap) {
    if (s->n_files == 1) snprintf(out, cap, "model.safetensors");
    else snprintf(out, cap, "model-%05d-of-%05d.safetensors", f + 1, s->n_files);
}

static moe8_status open_file(moe8_shards *s, int f, moe8_error *err) {
    char name[64], path[PATH_MAX + 64];
    moe8_status st;
    file_name(s, f, name, sizeof name);
    snprintf(path, sizeof path, "%s/%s", s->dir, name);
    if ((st = moe8_st_writer_open(path, &s->w, err))) return st;
    if ((st = moe8_st_writer_metadata(s->w, "format", "pt", err))) return st;
    for (size_t i = s->next; i < s->n && s->t[i].file == f; i++)
        if ((st = moe8_st_writer_declare(s->w, s->t[i].name, s->t[i].dt, s->t[i].n_dims,
                                         s->t[i].shape, err)))
            return st;
    s->open_file = f;
    return MOE8_OK;
}

static moe8_status close_file(moe8_shards *s, moe8_error *err) {
    moe8_status st = s->w ? moe8_st_writer_finish(s->w, err) : MOE8_OK;
    moe8_st_writer_free(s->w);
    s->w = NULL;
    return st;
}

moe8_status moe8_shards_write(moe8_shards *s, const char *name, const void *data, size_t n_bytes,
                              moe8_error *err) {
    shard_tensor *t;
    moe8_status st;
    if (s->next >= s->n || strcmp(s->t[s->next].name, name))
        return moe8_fail(err, MOE8_ERR_INTERNAL, -1, "shards: tensor '%s' written out of plan "
                         "order", name);
    t = &s->t[s->next];
    if (t->file != s->open_file) {
        if ((st = close_file(s, err)) || (st = open_file(s, t->file, err))) return st;
    }
    if ((st = moe8_st_writer_write(s->w, name, data, n_bytes, err))) return st;
    s->next++;
    return MOE8_OK;
}

static moe8_status write_index(moe8_shards *s, moe8_error *err) {
    cJSON *root = cJSON_CreateObject(), *meta, *map;
    char name[64], *text;
    moe8_status st;
    if (!root) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "out of memory");
    meta = cJSON_AddObjectToObject(root, "metadata");
    cJSON_AddNumberToObject(meta, "total_size", (double)s->total);
    map = cJSON_AddObjectToObject(root, "weight_map");
    for (size_t i = 0; i < s->n; i++) {
        file_name(s, s->t[i].file, name, sizeof name);
        cJSON_AddStringToObject(map, s->t[i].name, name);
    }
    text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "out of memory");
    st = moe8_write_text(s->dir, "model.safetensors.index.json", text, err);
    free(text);
    return st;
}

moe8_status moe8_shards_finish(moe8_shards *s, moe8_error *err) {
    moe8_status st;
    if (s->next != s->n)
        return moe8_fail(err, MOE8_ERR_INTERNAL, -1, "shards: %zu of %zu tensors written", s->next,
                         s->n);
    if (s->open_file < 0 && s->n == 0)
        return moe8_fail(err, MOE8_ERR_INTERNAL, -1, "shards: no tensors");
    if ((st = close_file(s, err))) return st;
    return s->n_files > 1 ? write_index(s, err) : MOE8_OK;
}

int moe8_shards_count(const moe8_shards *s) { return s->n_files; }
uint64_t moe8_shards_total_bytes(const moe8_shards *s) { return s->total; }
