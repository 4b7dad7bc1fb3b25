/*
 * moe8.h — the one public header of moe8, a CPU inference engine for
 * Mixture-of-Experts language models quantized W8A8 dynamic.
 *
 * Conventions used throughout:
 *   - Calls that can fail return moe8_status (0 = ok, negative = error) and fill
 *     an optional moe8_error (pass NULL when you do not want the message).
 *   - Handles are opaque and come in _open/_close or _load/_free pairs; a
 *     _free/_close of NULL is a no-op.
 *   - The library never prints and never exits. Diagnostics go through the
 *     log callback (moe8_set_log), silent by default.
 *   - Shapes are written C-style, outermost first: [rows][cols].
 *   - Thread safety: every function is safe to call concurrently on distinct
 *     handles. Read-only calls on one handle (find, get, info) are safe to call
 *     concurrently; anything else needs external locking unless it says so.
 */
#ifndef MOE8_H
#define MOE8_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================== */
/* Version                                                                   */
/* ======================================================================== */

#define MOE8_VERSION_MAJOR 0
#define MOE8_VERSION_MINOR 1
#define MOE8_VERSION_PATCH 0
#define MOE8_VERSION_NUMBER \
    (MOE8_VERSION_MAJOR * 10000 + MOE8_VERSION_MINOR * 100 + MOE8_VERSION_PATCH)

/* "MAJOR.MINOR.PATCH" of the linked library (may differ from the header). */
const char *moe8_version(void);
int moe8_version_number(void);

/* ======================================================================== */
/* Status and errors                                                         */
/* ======================================================================== */

/* Append-only: values never change meaning. */
typedef enum {
    MOE8_OK = 0,
    MOE8_ERR_INVALID_ARG = -1,  /* a caller passed something impossible */
    MOE8_ERR_IO = -2,           /* open/read/write/mmap/rename failed */
    MOE8_ERR_FORMAT = -3,       /* a file is malformed (bad header, JSON, shape) */
    MOE8_ERR_UNSUPPORTED = -4,  /* well-formed but not supported by moe8 */
    MOE8_ERR_NOMEM = -5,        /* allocation failed */
    MOE8_ERR_NOT_FOUND = -6,    /* a named file, tensor or key is missing */
    MOE8_ERR_CANCELLED = -7,    /* a callback asked to stop */
    MOE8_ERR_COMM = -8,         /* a distributed peer failed */
    MOE8_ERR_INTERNAL = -9,     /* a bug in moe8: please report */
} moe8_status;

/* Short constant description of a status ("format error", ...). */
const char *moe8_status_str(moe8_status status);

#define MOE8_ERROR_MESSAGE_MAX 512

/* Optional out-parameter of every fallible call. */
typedef struct {
    moe8_status code;                     /* same value the call returned */
    int64_t offset;                       /* byte offset in the offending file, or -1 */
    char message[MOE8_ERROR_MESSAGE_MAX]; /* lowercase, names the file/tensor/field */
} moe8_error;

/* ======================================================================== */
/* Logging                                                                   */
/* ======================================================================== */

typedef enum {
    MOE8_LOG_DEBUG = 0,
    MOE8_LOG_INFO = 1,
    MOE8_LOG_WARN = 2,
    MOE8_LOG_ERROR = 3,
} moe8_log_level;

typedef void (*moe8_log_fn)(moe8_log_level level, const char *message, void *user);

/* Replace the process-wide log callback (NULL: silence). Not thread-safe with
 * respect to concurrent logging; set it once at start-up. */
void moe8_set_log(moe8_log_fn fn, void *user);

/* ======================================================================== */
/* Data types (safetensors dtypes)                                           */
/* ======================================================================== */

/* Append-only. */
typedef enum {
    MOE8_DT_F64 = 0,
    MOE8_DT_F32,
    MOE8_DT_F16,
    MOE8_DT_BF16,
    MOE8_DT_I64,
    MOE8_DT_I32,
    MOE8_DT_I16,
    MOE8_DT_I8,
    MOE8_DT_U64,
    MOE8_DT_U32,
    MOE8_DT_U16,
    MOE8_DT_U8,
    MOE8_DT_BOOL,
    MOE8_DT_F8_E4M3,
    MOE8_DT_F8_E5M2,
    MOE8_DT_COUNT
} moe8_dtype;

size_t moe8_dtype_size(moe8_dtype dt);          /* bytes per element, 0 if invalid */
const char *moe8_dtype_name(moe8_dtype dt);     /* safetensors spelling: "BF16" */
/* Parse a safetensors dtype string; returns 0 and sets *out, or -1. */
int moe8_dtype_parse(const char *name, moe8_dtype *out);

/* Scalar conversions (round to nearest even on narrowing; NaN stays NaN). */
float moe8_bf16_to_f32(uint16_t h);
float moe8_f16_to_f32(uint16_t h);
uint16_t moe8_f32_to_bf16(float f);
uint16_t moe8_f32_to_f16(float f);
/* Convert n elements of a float tensor (F32/F16/BF16/F64) to fp32. */
moe8_status moe8_convert_to_f32(float *dst, const void *src, moe8_dtype dt, size_t n,
                                moe8_error *err);

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
void moe8_st_close(moe8_st *st);

size_t moe8_st_count(const moe8_st *st);
const moe8_tensor *moe8_st_get(const moe8_st *st, size_t i);          /* NULL if out of range */
const moe8_tensor *moe8_st_find(const moe8_st *st, const char *name); /* NULL if absent */
int moe8_st_n_files(const moe8_st *st);
const char *moe8_st_file_path(const moe8_st *st, int file_index);
int64_t moe8_st_file_size(const moe8_st *st, int file_index);
/* Value of a "__metadata__" key of the file holding tensor index 0 (or NULL). */
const char *moe8_st_metadata(const moe8_st *st, int file_index, const char *key);
/* Give back the resident pages of a tensor's data (madvise DONTNEED on the
 * whole pages it covers). Reading it again pages it in from the file. */
void moe8_st_release(const moe8_st *st, const moe8_tensor *t);

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
void moe8_st_writer_close(moe8_st_writer *w);

/* ======================================================================== */
/* Model folder: config.json, quant description, tensors                     */
/* ======================================================================== */

/* How a linear layer or the experts of a MoE layer are stored. */
typedef enum {
    MOE8_QUANT_FLOAT = 0,        /* bf16/fp16/fp32 weights */
    MOE8_QUANT_W8A8 = 1,         /* static: int8 weight, per-tensor activation scale/offset */
    MOE8_QUANT_W8A8_DYNAMIC = 2, /* int8 weight + per-channel scale, per-token activations */
} moe8_quant_type;

const char *moe8_quant_type_name(moe8_quant_type q); /* "FLOAT", "W8A8", "W8A8_DYNAMIC" */

/* config.json of a qwen3_moe model (SPEC §7), defaults filled in. */
#define MOE8_MAX_STOP_IDS 16
typedef struct {
    char model_type[32];          /* "qwen3_moe" */
    int64_t vocab_size;
    int64_t hidden_size;          /* H */
    int64_t intermediate_size;    /* dense MLP width */
    int64_t moe_intermediate_size;/* I, per expert */
    int64_t num_hidden_layers;
    int64_t num_attention_heads;
    int64_t num_key_value_heads;
    int64_t head_dim;
    int64_t num_experts;          /* E (0 = dense model) */
    int64_t num_experts_per_tok;  /* top-k */
    int norm_topk_prob;           /* renormalize the top-k weights */
    int64_t decoder_sparse_step;
    int64_t max_position_embeddings;
    double rms_norm_eps;
    double rope_theta;
    int tie_word_embeddings;
    int64_t bos_token_id;         /* -1 if absent */
    int n_eos_ids;
    int64_t eos_token_ids[MOE8_MAX_STOP_IDS];
    int n_mlp_only_layers;
    int64_t *mlp_only_layers;     /* [n_mlp_only_layers], owned by the model */
} moe8_config;

typedef struct moe8_model moe8_model;

/* ======================================================================== */
/* Utilities                                                                 */
/* ======================================================================== */

/* Name of the kernel set in use: "avx2" or "ref" (MOE8_FORCE_REF=1 forces ref). */
const char *moe8_kernel_isa(void);

#ifdef __cplusplus
}
#endif

#endif /* MOE8_H */
