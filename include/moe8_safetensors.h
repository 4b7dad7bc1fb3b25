/*
 * moe8_safetensors.h — safetensors files: the memory-mapped reader and the two-phase writer.
 *
 * Stable: append-only like moe8.h. For programs that read or write checkpoints
 * themselves (moe8 quantize and make-model are built on it).
 */
#ifndef MOE8_API_SAFETENSORS_H
#define MOE8_API_SAFETENSORS_H

#include "moe8.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================== */
/* safetensors: memory-mapped reader (one file or a sharded set)             */
/* ======================================================================== */

#define MOE8_MAX_DIMS 8

typedef struct {
    const char *name;              /* tensor name, NUL-terminated */
    moe8_dtype dtype;
    int n_dims;                    /* 0..MOE8_MAX_DIMS (0 = scalar) */
    int64_t shape[MOE8_MAX_DIMS];  /* [n_dims] */
    int64_t n_elements;            /* product of shape (1 for a scalar) */
    const void *data;              /* read-only, inside the memory map */
    size_t n_bytes;                /* n_elements * dtype size */
    int file_index;                /* which file of the set holds it */
    int64_t file_offset;           /* byte offset of data in that file */
} moe8_tensor;

typedef struct moe8_st moe8_st;

/* Open `path`: a .safetensors file, or a folder holding either
 * model.safetensors.index.json (sharded) or exactly the *.safetensors files to
 * load. Every header is validated in full before this returns. */
moe8_status moe8_st_open(const char *path, moe8_st **out, moe8_error *err);
/* Parse a whole safetensors image already in memory (no copy; `buf` must
 * outlive the handle). `label` names it in errors. Used by fuzzers and tests. */
moe8_status moe8_st_open_buffer(const void *buf, size_t len, const char *label,
                                moe8_st **out, moe8_error *err);
void moe8_st_free(moe8_st *st);

size_t moe8_st_count(const moe8_st *st);
const moe8_tensor *moe8_st_get(const moe8_st *st, size_t i);          /* NULL if out of range */
const moe8_tensor *moe8_st_find(const moe8_st *st, const char *name); /* NULL if absent */
int moe8_st_n_files(const moe8_st *st);
const char *moe8_st_file_path(const moe8_st *st, int file_index);
int64_t moe8_st_file_size(const moe8_st *st, int file_index);
/* Value of a "__metadata__" key of file `file_index` of the set (or NULL). */
const char *moe8_st_metadata(const moe8_st *st, int file_index, const char *key);
/* Give back the resident pages of a tensor's data (madvise DONTNEED on the
 * whole pages it covers). Reading it again pages it in from the file. */
void moe8_st_release(const moe8_st *st, const moe8_tensor *t);
/* The same for bytes [offset, offset + n) of its data (whole pages inside). */
void moe8_st_release_range(const moe8_st *st, const moe8_tensor *t, size_t offset, size_t n);

/* ======================================================================== */
/* safetensors: writer                                                       */
/* ======================================================================== */

/* Two phases, so a file larger than memory can be written tensor by tensor:
 * declare every tensor (name, dtype, shape), then write their data in any
 * order, then finish. The file is written to "<path>.tmp.<pid>" and renamed
 * over `path` by moe8_st_writer_finish; a writer closed without finishing
 * removes its temporary file. Tensors are laid out by decreasing alignment
 * and the header is padded with spaces so every tensor is 8-byte aligned. */
typedef struct moe8_st_writer moe8_st_writer;

moe8_status moe8_st_writer_open(const char *path, moe8_st_writer **out, moe8_error *err);
moe8_status moe8_st_writer_metadata(moe8_st_writer *w, const char *key, const char *value,
                                    moe8_error *err);
moe8_status moe8_st_writer_declare(moe8_st_writer *w, const char *name, moe8_dtype dt,
                                   int n_dims, const int64_t *shape, moe8_error *err);
/* Write the whole data of a declared tensor (n_bytes must match). The first
 * call writes the header; no declare is accepted after it. */
moe8_status moe8_st_writer_write(moe8_st_writer *w, const char *name, const void *data,
                                 size_t n_bytes, moe8_error *err);
/* Check every declared tensor was written, fsync, rename into place. */
moe8_status moe8_st_writer_finish(moe8_st_writer *w, moe8_error *err);
/* Free; removes the temporary file if finish did not succeed. */
void moe8_st_writer_free(moe8_st_writer *w);

#ifdef __cplusplus
}
#endif

#endif /* MOE8_API_SAFETENSORS_H */
