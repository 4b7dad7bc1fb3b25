/*
 * export_gguf.h — what the files of `moe8 export-gguf` share (internal to
 * tools/): the GGUF metadata buffer, the plan of tensors (each GGUF tensor and
 * the Hugging Face tensors its data comes from), the families' export
 * descriptors and the tokenizer. cmd_export_gguf.c parses the flags and runs
 * the command, export_gguf_write.c writes the file (header, metadata, Q8_0 /
 * F16 / BF16 data), export_gguf_plan.c builds the plan from a family's
 * per-layer table, export_gguf_vocab.c the tokenizer keys, and one file per
 * family holds its table, checks and hyper-parameter keys
 * (export_gguf_qwen3moe.c, export_gguf_glm4moe.c, export_gguf_minimax_m2.c,
 * export_gguf_qwen3next.c, export_gguf_qwen35moe.c, export_gguf_gptoss.c).
 */
#ifndef MOE8_TOOLS_EXPORT_GGUF_H
#define MOE8_TOOLS_EXPORT_GGUF_H

#include <stdint.h>
#include <stdio.h>

#include <cjson/cJSON.h>

#include "cli.h"

#define CMD "export-gguf"
#define GGUF_ALIGN 32
#define TOKENIZER_MAX_BYTES ((size_t)256 << 20)

/* ggml_type and gguf value types (append-only enums of ggml). */
enum { GGML_F32 = 0, GGML_F16 = 1, GGML_Q8_0 = 8, GGML_BF16 = 30, GGML_MXFP4 = 39 };
enum { GV_U8 = 0, GV_I8, GV_U16, GV_I16, GV_U32, GV_I32, GV_F32, GV_BOOL, GV_STR, GV_ARR,
       GV_U64, GV_I64, GV_F64 };
/* llama_ftype of general.file_type. */
enum { FTYPE_F16 = 1, FTYPE_Q8_0 = 7, FTYPE_BF16 = 32 };
/* llama_token_type of tokenizer.ggml.token_type. */
enum { TOK_NORMAL = 1, TOK_CONTROL = 3, TOK_USER_DEFINED = 4, TOK_UNUSED = 5 };
/* llama_expert_gating_func_type of <arch>.expert_gating_func. */
enum { GATING_SOFTMAX = 1, GATING_SIGMOID = 2 };

#define Q8_0_BLOCK 32
#define Q8_0_BYTES 34 /* f16 d + 32 int8 */
#define MXFP4_BYTES 17 /* e8m0 scale + 16 bytes of e2m1 pairs (ggml's block_mxfp4) */

/* ---- the metadata ---------------------------------------------------------- */

/* A growable byte buffer (sticky oom). */
typedef struct {
    unsigned char *p;
    size_t n, cap;
    int oom;
} xg_bytes;

void xg_put(xg_bytes *b, const void *d, size_t n);
void xg_put_u32(xg_bytes *b, uint32_t v);
void xg_put_u64(xg_bytes *b, uint64_t v);
void xg_put_str(xg_bytes *b, const char *s);

/* The metadata: each xg_kv_* appends one key/value and counts it. */
typedef struct {
    xg_bytes b;
    uint64_t n;
} xg_kvs;

void xg_kv_u32(xg_kvs *k, const char *key, uint32_t v);
void xg_kv_f32(xg_kvs *k, const char *key, float v);
void xg_kv_bool(xg_kvs *k, const char *key, int v);
void xg_kv_str(xg_kvs *k, const char *key, const char *v);
/* An array's header; the caller appends its n elements. */
void xg_kv_arr(xg_kvs *k, const char *key, uint32_t elem_type, uint64_t n);
/* "<arch>.<key>" of the family being written. */
void xg_kv_au32(xg_kvs *k, const char *arch, const char *key, uint32_t v);
void xg_kv_af32(xg_kvs *k, const char *arch, const char *key, float v);
void xg_kv_abool(xg_kvs *k, const char *arch, const char *key, int v);

/* A message "moe8 export-gguf: ..." on stderr; returns -1. */
int xg_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- the plan -------------------------------------------------------------- */

typedef struct {
    char name[64];              /* "blk.3.ffn_up_exps.weight" */
    int type;                   /* GGML_* */
    int n_dims;
    uint64_t ne[3];             /* ggml order: ne[0] = row length */
    const moe8_tensor **src;    /* [n_src]: one tensor, or the experts in order */
    int n_src;
    int xform;                  /* XG_X_*: the converter's transform of each value */
    int64_t *row_of;            /* [ne[1] ne[2]] the source row of each row (one source); NULL: the same */
    int64_t *col_of;            /* [ne[0]] the source column of each column; NULL: the same */
    int64_t src_cols;           /* the source's row length when col_of picks from a wider
                                 * row; 0: ne[0] */
    /* transposed: one source whose ne[2] slabs are each [ne[0]][src_cols] (transformers'
     * [in][out] experts); GGUF row r of slab e is the slab's column row_of[e ne[1] + r] */
    int transposed;
    /* GGML_MXFP4: src[0] is the checkpoint's _blocks [..][in/32][16] U8 and this its
     * _scales [..][in/32] U8, rows chosen by row_of as above; repacked, not requantized */
    const moe8_tensor *scales;
    uint64_t offset, n_bytes;   /* in the data section */
} xg_tensor;

struct xg_family;

typedef struct {
    const char *dir;
    const moe8_config *cfg;
    const struct xg_family *fam;
    moe8_st *st;
    xg_tensor *t;               /* [n] */
    int n, cap;
    int wtype;                  /* GGML_* of the matrices */
    int64_t n_layers;           /* layers written: the first n_layers of the model */
} xg_plan;

/* Shapes of a per-layer tensor (rows x cols of its Hugging Face weight; a
 * 1-D tensor has cols 0). H hidden, D head_dim, nq = heads x D, nkv = kv
 * heads x D, E experts, F intermediate_size (dense), S the shared experts'
 * width. */
enum {
    XG_NORM_H, XG_NORM_D, XG_NORM_Q, XG_NORM_KV, /* [H], [D], [nq], [nkv] */
    XG_Q, XG_KV, XG_O,                           /* [nq][H], [nkv][H], [H][nq] */
    XG_BIAS_Q, XG_BIAS_KV,                       /* [nq], [nkv] */
    XG_ROUTER, XG_ROUTER_BIAS,                   /* [E][H], [E]: F32 */
    XG_DENSE_GU, XG_DENSE_D,                     /* [F][H], [H][F] */
    XG_SHARED_GU, XG_SHARED_D,                   /* [S][H], [H][S] */
};
/* Hybrid (Gated DeltaNet) shapes: Kh / Vh the linear key / value heads, dv
 * the value head dim. */
enum {
    XG_Q_GATED = XG_SHARED_D + 1,                /* [2 nq][H]: per head query then gate */
    XG_GDN_BA, XG_GDN_OUT,                       /* [2 Vh][H], [H][Vh dv] */
    XG_GDN_V, XG_GDN_NORM,                       /* [Vh] (A_log, dt_bias), [dv] */
};
/* When a per-layer tensor is written (XG_IF_LINEAR / XG_IF_FULL: a hybrid's
 * Gated DeltaNet / full-attention layers; a family without
 * full_attention_interval has full attention only). */
enum { XG_ALWAYS, XG_IF_MOE, XG_IF_DENSE, XG_IF_QK_NORM, XG_IF_QKV_BIAS, XG_IF_SHARED,
       XG_IF_LINEAR, XG_IF_FULL };
/* The converter's value transforms: none, 1 + w (zero-centred norms), -exp(w) (A_log). */
enum { XG_X_NONE, XG_X_PLUS1, XG_X_NEG_EXP };

/* One row of a family's per-layer table: the GGUF name "blk.N.<gguf>" and the
 * Hugging Face name "model.layers.N.<hf>". */
typedef struct {
    const char *gguf, *hf;
    int shape, when;
    int xform;                  /* XG_X_* */
} xg_row;

/* A family's export: what llama.cpp's architecture `arch` reads. */
typedef struct xg_family {
    int model_arch;             /* the moe8_arch exported (MOE8_ARCH_COUNT: not enabled yet) */
    const char *arch;           /* general.architecture, "glm4moe" */
    const char *pre;            /* tokenizer.ggml.pre */
    const xg_row *rows;         /* [n_rows] per layer, in the converter's order */
    int n_rows;
    /* the stacked experts' sources "model.layers.%lld.<expert_fmt>" with the
     * expert index then exp_names[i] for gate, up, down */
    const char *expert_fmt;     /* "mlp.experts.%lld.%s.weight" */
    const char *exp_names[3];
    /* refuse (or warn about) what llama.cpp cannot run as moe8 does; -1 refused */
    int (*check)(const xg_plan *p);
    /* the "<arch>.*" hyper-parameter keys */
    void (*hparams)(xg_kvs *k, const xg_plan *p);
    /* llama.cpp's loader requires output.weight (no fallback to token_embd):
     * with tied embeddings it is written from model.embed_tokens.weight */
    int output_required;
    /* optional: the layer's tensors the table cannot say (a reordered or
     * squeezed source), appended after its rows; -1 after a message */
    int (*layer)(xg_plan *p, int64_t l);
    int output_norm_xform;      /* XG_X_* of output_norm */
    /* the Hugging Face names' prefix of the decoder ("model.language_model." for
     * a text model nested in a multimodal one); NULL: "model." */
    const char *prefix;
    /* 1: the layer callback writes the MoE block (experts and their biases) */
    int own_experts;
} xg_family;

extern const xg_family xg_qwen3moe, xg_glm4moe, xg_minimax_m2, xg_qwen3next, xg_qwen35moe,
    xg_gpt_oss;

/* The hybrids' (export_gguf_qwen3next.c, also qwen35moe's): the refusals and
 * warnings llama.cpp's qwen3next / qwen35moe call for, and their keys (the
 * common ones, expert_shared_feed_forward_length, ssm.*,
 * full_attention_interval). */
int xg_hybrid_check(const xg_plan *p);
void xg_hybrid_hparams(xg_kvs *k, const xg_plan *p);

/* The Hugging Face name of layer l's tensor `rest` ("<prefix>layers.<l>.<rest>"). */
void xg_layer_name(const xg_plan *p, int64_t l, const char *rest, char *out, size_t cap);

/* 1 if layer l is a hybrid's Gated DeltaNet layer (every layer but each
 * full_attention_interval-th). */
int xg_is_linear_layer(const xg_plan *p, int64_t l);
/* The float tensor `name` of shape [rows][cols] (cols 0: 1-D), or NULL after a message. */
const moe8_tensor *xg_need(xg_plan *p, const char *name, int64_t rows, int64_t cols);
/* The float stacked tensor `name` [n][rows][cols], or NULL after a message. */
const moe8_tensor *xg_need3(xg_plan *p, const char *name, int64_t n, int64_t rows, int64_t cols);
/* Append a GGUF tensor of n_src sources, each [rows][cols] (cols 0: 1-D, F32). */
xg_tensor *xg_add(xg_plan *p, const char *gname, int type, int n_src, int64_t rows, int64_t cols);

/* Every tensor the family's llama.cpp architecture reads, in the converter's order. */
int xg_make_plan(xg_plan *p);
/* The keys every family writes: "<arch>.block_count" ... "expert_feed_forward_length",
 * with rope.dimension_count rope_dims and feed_forward_length ff_len (the dense
 * width, or the experts' where the architecture sizes its expert tensors by it). */
void xg_common_hparams(xg_kvs *k, const xg_plan *p, int64_t rope_dims, int64_t ff_len);
/* Checks shared by the families: sizes that fit GGUF's u32 fields. */
int xg_check_sizes(const xg_plan *p);

/* ---- the tokenizer ---------------------------------------------------------- */

typedef struct {
    cJSON *json, *config;       /* tokenizer.json, tokenizer_config.json (may be NULL) */
    const char **text;          /* [n_vocab] token strings (into json), NULL = padding */
    unsigned char *type;        /* [n_vocab] TOK_* */
    int64_t n_vocab;
} xg_vocab;

int xg_load_vocab(xg_vocab *v, const char *dir, int64_t n_vocab);
int xg_tokenizer_kvs(xg_kvs *k, xg_vocab *v, const xg_plan *p);

/* ---- the file ---------------------------------------------------------------- */

typedef struct {
    FILE *f;
    const char *path;           /* the temporary file, for messages */
    float *row;                 /* [max row length] */
    unsigned char *out;         /* [max row bytes] */
    uint64_t done, total;       /* bytes of tensor data */
    int tty, last_pct;
} xg_writer;

uint64_t xg_type_row_bytes(int type, uint64_t ne0);
const char *xg_type_name(int type);
/* The header, then every tensor's data, into the open temporary file. */
int xg_write_file(xg_writer *w, xg_plan *p, xg_kvs *k);

#endif
