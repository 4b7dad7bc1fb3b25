/*
 * moe8.h — the public header of moe8 for inference, a CPU inference engine for
 * Mixture-of-Experts language models quantized W8A8 dynamic: version, status,
 * logging, dtypes, the model folder, sampling, contexts and the scheduler,
 * the tokenizer and chat templates. Stable: functions and enum values keep
 * their meaning, structs only gain fields at the end (initialise them with
 * their *_default()).
 *
 * The other levels have their own headers, each with its own promise:
 *   moe8_safetensors.h  checkpoint files (reader, writer)
 *   moe8_tools.h        make-model and the quantizer
 *   moe8_moe.h          the MoE layer on its own (experimental)
 *   moe8_dist.h         tensor / expert parallelism over MPI
 *   moe8_server.h       the OpenAI-compatible server (libmoe8_server)
 *   moe8_bench.h        benchmark probes and counters (unstable)
 *
 * Conventions used throughout:
 *   - Calls that can fail return moe8_status (0 = ok, negative = error) and fill
 *     an optional moe8_error (pass NULL when you do not want the message).
 *   - Handles are opaque. One naming scheme for every level: a handle is made
 *     by _load (from a folder: model, tokenizer), _open (a file: safetensors
 *     reader and writer), _parse / _compile (from text: chat template,
 *     grammar) or _create (in memory: everything else), and released by
 *     _free, a no-op on NULL; a parameter struct T comes from T_default()
 *     (moe8_context_params_default, moe8_request_default, ...).
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

/* Seconds on the monotonic clock, for intervals (every timing in moe8 and its
 * commands reads this one). */
double moe8_time_s(void);

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
/* Model folder: config.json, quant description, tensors                     */
/* ======================================================================== */

/* How a linear layer or the experts of a MoE layer are stored. */
typedef enum {
    MOE8_QUANT_FLOAT = 0,        /* bf16/fp16/fp32 weights */
    MOE8_QUANT_W8A8 = 1,         /* static: int8 weight, per-tensor activation scale/offset */
    MOE8_QUANT_W8A8_DYNAMIC = 2, /* int8 weight + per-channel scale, per-token activations */
    MOE8_QUANT_W4A8_DYNAMIC = 3, /* int4 weight (two per byte) + per-channel scale, per-token
                                  * activations: routed experts only (SEMANTICS §4b) */
} moe8_quant_type;

const char *moe8_quant_type_name(moe8_quant_type q); /* "FLOAT", "W8A8", "W8A8_DYNAMIC", "W4A8_DYNAMIC" */

/* Model families (config.json "model_type"), one descriptor each (src/arch,
 * docs/MODELS.md). Append-only. */
typedef enum {
    MOE8_ARCH_QWEN3_MOE = 0,      /* "qwen3_moe": q/k RMSNorm, no biases */
    MOE8_ARCH_QWEN2_MOE = 1,      /* "qwen2_moe": q/k/v biases, a sigmoid-gated shared expert */
    MOE8_ARCH_MIXTRAL = 2,        /* "mixtral": block_sparse_moe, w1/w3/w2 experts, top-k always
                                   * renormalized, every layer MoE */
    MOE8_ARCH_DEEPSEEK_V2 = 3,    /* "deepseek_v2": multi-head latent attention (MLA), shared
                                   * experts, first_k_dense_replace, softmax greedy or
                                   * group-limited routing, YaRN */
    MOE8_ARCH_DEEPSEEK_V3 = 4,    /* "deepseek_v3": MLA; sigmoid routing with
                                   * e_score_correction_bias and grouped top-k (top-2 sums) */
    MOE8_ARCH_GLM4_MOE = 5,       /* "glm4_moe" (GLM-4.5/4.6/4.7): GQA with q/k/v biases, optional
                                   * per-head q/k norm, partial rotary; DeepSeek-V3's routing and
                                   * shared experts; the MTP layer skipped */
    MOE8_ARCH_MINIMAX_M2 = 6,     /* "minimax_m2" (MiniMax-M2, M2.5): GQA with q/k RMSNorm over
                                   * the whole projection, rotary_dim of head_dim; sigmoid routing
                                   * with e_score_correction_bias; every layer MoE; MTP skipped */
    MOE8_ARCH_QWEN3_NEXT = 7,     /* "qwen3_next" (Qwen3-Next-80B-A3B): hybrid of Gated DeltaNet
                                   * linear attention and gated full attention (3:1), zero-centred
                                   * RMSNorms, MoE with a sigmoid-gated shared expert */
    MOE8_ARCH_QWEN3_5_MOE = 8,    /* "qwen3_5_moe" (Qwen3.5/3.6-MoE): the text model of the same
                                   * hybrid, settings under text_config, split in_proj_qkv/z/b/a,
                                   * stacked experts; the vision tower and MTP skipped */
    MOE8_ARCH_GPT_OSS = 9,        /* "gpt_oss" (gpt-oss-20b, -120b): attention sinks, sliding and
                                   * full layers, q/k/v/o biases, YaRN; router with a bias,
                                   * softmax over the top-k; clamped SwiGLU experts with biases,
                                   * stacked, MXFP4 or bf16 */
    MOE8_ARCH_COUNT
} moe8_arch;

/* The model_type string of a family ("qwen3_moe"), or "?" out of range. */
const char *moe8_arch_name(moe8_arch a);

/* What a family's forward does beyond the common decoder (docs/MODELS.md). */
typedef struct {
    const char *model_type;       /* "qwen2_moe" */
    const char *hf_class;         /* "Qwen2MoeForCausalLM" */
    int qk_norm;                  /* per-head RMSNorm of q and k before RoPE */
    int shared_expert;            /* MoE layers add a sigmoid-gated shared expert */
    int sparse_step;              /* decoder_sparse_step / mlp_only_layers pick dense layers
                                   * (else every layer is MoE) */
    int always_renorm;            /* top-k weights always renormalized (else norm_topk_prob) */
    int mla;                      /* multi-head latent attention (deepseek) */
    int first_k_dense;            /* first_k_dense_replace / moe_layer_freq pick dense layers */
    /* appended with the families as declarations (issue 34): */
    int shared_gate;              /* the shared expert is sigmoid-gated (qwen2_moe), else summed */
    int qk_norm_config;           /* q/k RMSNorm per head when the config says so (glm4_moe's
                                   * use_qk_norm: moe8_config_get_int(c, "qk_norm")) */
    int qk_norm_whole;            /* q/k RMSNorm over the whole projection before the head split
                                   * (minimax_m2) */
    /* appended with gpt_oss (issue 37): */
    int sinks;                    /* attention sinks, an o_proj bias, sliding-window layers
                                   * (moe8_config_get_int(c, "sliding_window")) */
    int router_bias;              /* the router's logits carry a bias */
    int swiglu_clamped;           /* clamped SwiGLU experts with biases
                                   * (moe8_config_get_num(c, "swiglu_limit")) */
} moe8_arch_info;
/* 0 and *out filled, or -1 for an unknown family. */
int moe8_arch_get_info(moe8_arch a, moe8_arch_info *out);

/* config.json of a supported model (SEMANTICS §7), defaults filled in (those of
 * Hugging Face's config class of its family where it has one). */
#define MOE8_MAX_STOP_IDS 16
#define MOE8_MAX_LAYERS 512       /* num_hidden_layers above this is refused */
typedef struct {
    char model_type[32];          /* "qwen3_moe" */
    int64_t vocab_size;           /* default 151936 */
    int64_t hidden_size;          /* H, default 2048 */
    int64_t intermediate_size;    /* dense MLP width, default 6144 */
    int64_t moe_intermediate_size;/* I, per expert, default 768 */
    int64_t num_hidden_layers;    /* default 24, at most MOE8_MAX_LAYERS */
    int64_t num_attention_heads;  /* default 32 */
    int64_t num_key_value_heads;  /* default 4; divides num_attention_heads */
    int64_t head_dim;             /* default hidden_size / num_attention_heads */
    int64_t num_experts;          /* E (0 = dense model), default 128 */
    int64_t num_experts_per_tok;  /* top-k, default 8, <= E */
    int norm_topk_prob;           /* renormalize the top-k weights, default 0 */
    int64_t decoder_sparse_step;  /* default 1 */
    int64_t max_position_embeddings; /* default 32768 */
    double rms_norm_eps;          /* default 1e-6 */
    double rope_theta;            /* default 10000 */
    int tie_word_embeddings;      /* default 0 */
    int64_t bos_token_id;         /* -1 if absent or null */
    int n_eos_ids;                /* 0 if absent or null */
    int64_t eos_token_ids[MOE8_MAX_STOP_IDS]; /* [n_eos_ids], distinct */
    int n_mlp_only_layers;
    int64_t mlp_only_layers[MOE8_MAX_LAYERS]; /* [n_mlp_only_layers], distinct, each < layers */
    /* appended with the model families: */
    moe8_arch arch;               /* the family model_type names */
    /* What only some families have (a shared expert's width, q/k/v biases,
     * multi-head latent attention's widths, grouped and sigmoid routing,
     * YaRN, ...): opaque, read with moe8_config_get_int / moe8_config_get_num
     * by name. */
    union {
        int64_t align_;
        unsigned char bytes[512];
    } family;
} moe8_config;

/* Parse and validate a config.json image (`len` bytes, need not be
 * NUL-terminated; `label` names it in errors). Refuses model types other than
 * those of moe8_arch, a rope_scaling the family does not read (DeepSeek's
 * YaRN is read; the other families refuse any), wrong JSON types,
 * non-integral or out-of-range numbers, with messages naming the field and
 * its value. */
moe8_status moe8_config_parse(const char *json, size_t len, const char *label, moe8_config *out,
                              moe8_error *err);
/* 1 if layer `layer` is a MoE layer (SEMANTICS §7), 0 if it has a dense MLP. */
int moe8_config_is_moe_layer(const moe8_config *c, int64_t layer);
/* A value only some families have, by name (docs/MODELS.md): integers and
 * flags "shared_expert_intermediate_size" (qwen2_moe's shared width S; 0 = no
 * shared expert), "qkv_bias", "kv_lora_rank" (> 0: multi-head latent
 * attention), "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
 * "v_head_dim" (= head_dim outside MLA), "n_shared_experts",
 * "first_k_dense_replace", "moe_layer_freq", "n_group", "topk_group",
 * "topk_grouped" (routing through the groups), "group_top2" (a group's score
 * is the sum of its two best), "scoring_sigmoid", "e_score_bias",
 * "rope_interleave", "yarn_original_max_position_embeddings"; numbers
 * "routed_scaling_factor" (1 when unset), "yarn_factor" (0: no YaRN),
 * "yarn_beta_fast", "yarn_beta_slow", "yarn_mscale", "yarn_mscale_all_dim".
 * A name the family does not use reads 0 (the defaults above where said);
 * an unknown name reads 0 and *known (may be NULL) is set to 0. Integers
 * also read as numbers and the reverse (truncated). */
int64_t moe8_config_get_int(const moe8_config *c, const char *name, int *known);
double moe8_config_get_num(const moe8_config *c, const char *name, int *known);

typedef struct moe8_model moe8_model;
typedef struct moe8_dist moe8_dist;   /* moe8_dist.h */

/* Load options. Initialise with moe8_model_params_default(); fields are only
 * ever appended. */
typedef struct {
    int n_threads;                /* threads for load-time work and inference; 0 = OpenMP default; at most 4096 */
    moe8_dist *dist;              /* NULL (or one rank): single process. Else this rank's share
                                   * of the model (SEMANTICS §8); must outlive the model */
    /* The packed cache (SEMANTICS §6c): the packed int8 weights of this kernel
     * table and shard in a file that later loads map instead of packing. */
    const char *cache_dir;        /* NULL: DIR/.moe8-cache/ when it can be written, else
                                   * $XDG_CACHE_HOME/moe8/ (~/.cache/moe8/); set: only there
                                   * (an error when it cannot be used). Copied at load */
    int no_cache;                 /* 1: pack in memory every load; no cache read or written */
    int no_mmap;                  /* 1: read the cache (and a float lm_head) into anonymous
                                   * memory, not a mapping */
    int mlock;                    /* 1: pin the cache in RAM; the context fails with the
                                   * system's reason (RLIMIT_MEMLOCK) when it cannot */
    int lm_head_int8;             /* 1: a float lm_head (untied, or the tied embedding's
                                   * copy) is quantized when packed to per-row symmetric
                                   * int8 and run as W8A8_DYNAMIC (SEMANTICS §6d); into the
                                   * packed cache, a file of its own. No effect on a
                                   * W8A8_DYNAMIC lm_head.weight */
} moe8_model_params;
moe8_model_params moe8_model_params_default(void);

/* Open a model folder: config.json (+ generation_config.json), the
 * safetensors file(s), quant_model_description.json (absent = every tensor
 * FLOAT). Resolves each layer's quant types (SEMANTICS §6) and checks every tensor
 * the forward pass reads (names, dtypes, shapes, scale/offset values) before
 * returning. Tensors stay memory-mapped; nothing is packed or computed yet.
 * `params` may be NULL (defaults). */
moe8_status moe8_model_load(const char *dir, const moe8_model_params *params, moe8_model **out,
                            moe8_error *err);
void moe8_model_free(moe8_model *m);

/* Where the packed cache of m for the kernel table in use (and this rank's
 * shard) is, and whether it is valid: header, size, fingerprint of the
 * folder, table, layout and shard, and with `full` every section checksum
 * (reads the whole file). Neither builds nor changes anything. */
typedef struct {
    int exists;                   /* a file is at path */
    int valid;                    /* it would be used */
    char path[4096];              /* the valid one, else the first found, else where it goes */
    uint64_t bytes;               /* its size */
    char why[512];                /* why not valid ("absent" when no file) */
    char table[16], layout[16];   /* the kernel table and packed layout it is for */
} moe8_cache_info;
moe8_status moe8_model_cache_check(const moe8_model *m, int full, moe8_cache_info *out,
                                   moe8_error *err);

/* The parsed config.json. eos_token_ids holds the union of config.json's and
 * generation_config.json's stop ids (the tokenizer's <|im_end|> is added by
 * the caller). Valid while the model lives. */
const moe8_config *moe8_model_config(const moe8_model *m);

/* Resolved storage of one decoder layer. */
typedef struct {
    int is_moe;                   /* 1: router + experts, 0: dense SwiGLU MLP */
    moe8_quant_type qkv;          /* q/k/v projections (packed: always equal) */
    moe8_quant_type o;            /* o_proj */
    moe8_quant_type router;       /* mlp.gate, MoE layers (always FLOAT) */
    moe8_quant_type experts;      /* MoE layers: FLOAT, W8A8_DYNAMIC or W4A8_DYNAMIC */
    moe8_quant_type mlp_gate_up;  /* dense layers: gate/up (packed: always equal) */
    moe8_quant_type mlp_down;     /* dense layers: down_proj */
    /* appended with the model families: */
    moe8_quant_type experts_down; /* MoE layers: the experts' down_proj; equals `experts`, or
                                   * FLOAT beside W8A8_DYNAMIC gate/up (quantize --down-proj float) */
    int has_shared;               /* MoE layer with a shared expert (qwen2_moe) */
    moe8_quant_type shared_gate_up; /* shared expert gate/up: FLOAT, W8A8 or W8A8_DYNAMIC */
    moe8_quant_type shared_down;  /* shared expert down_proj */
    int qkv_bias;                 /* q/k/v carry a bias (FLOAT: added; W8A8: in quant_bias) */
    /* appended with DeepSeek (MLA layers): `qkv` is then the type of q_proj or q_a_proj and
     * kv_a_proj_with_mqa (they read the same input and must agree), `o` of o_proj, and: */
    int mla;                      /* 1: multi-head latent attention */
    moe8_quant_type q_b;          /* q_b_proj (q_lora_rank > 0), FLOAT or W8A8 */
    moe8_quant_type kv_b;         /* kv_b_proj: FLOAT or W8A8, run dequantized (absorbed) */
    /* appended with the hybrid families (a Gated DeltaNet layer has no q/k/v/o): */
    int gdn;                      /* 1: Gated DeltaNet linear attention */
    moe8_quant_type gdn_in;       /* in_proj_qkvz or in_proj_qkv: FLOAT, W8A8 or W8A8_DYNAMIC */
    moe8_quant_type gdn_z;        /* in_proj_z (qwen3_5_moe) */
    moe8_quant_type gdn_out;      /* out_proj */
} moe8_layer_info;

/* 0 and *out filled, or -1 when `layer` is out of range. */
int moe8_model_layer_info(const moe8_model *m, int64_t layer, moe8_layer_info *out);

/* Storage of the output projection (lm_head). */
typedef struct {
    moe8_quant_type quant;        /* FLOAT, or W8A8_DYNAMIC (int8 rows, per-row scale) */
    int tied;                     /* 1: it is model.embed_tokens.weight (tie_word_embeddings) */
    moe8_dtype dtype;             /* of the weight: BF16/F16/F32, or I8 */
    uint64_t weight_bytes;        /* bytes of the weight tensor in the checkpoint */
    uint64_t scale_bytes;         /* W8A8_DYNAMIC: weight_scale + weight_offset bytes; else 0 */
} moe8_lm_head_info;
/* 0 and *out filled, or -1 when m or out is NULL. */
int moe8_model_lm_head_info(const moe8_model *m, moe8_lm_head_info *out);

/* Checkpoint totals over every tensor of the safetensors file(s). */
typedef struct {
    int n_files;                          /* safetensors files */
    int64_t n_tensors;
    uint64_t total_bytes;                 /* sum of tensor data bytes */
    uint64_t bytes_by_dtype[MOE8_DT_COUNT];
    int64_t tensors_by_dtype[MOE8_DT_COUNT];
} moe8_model_stats;
void moe8_model_get_stats(const moe8_model *m, moe8_model_stats *out);

/* Rough memory need for a context of n_ctx tokens (SEMANTICS §6b): the checkpoint's
 * tensor bytes (plus, with MLA, 3 bytes per element of a W8A8 kv_b_proj, which
 * runs as fp32), a KV cache of kv_type elements (2 x layers x kv_heads x head_dim
 * x n_ctx x 4 bytes for F32, x 2 for F16 and BF16; MLA: layers x (kv_lora_rank +
 * qk_rope_head_dim) x n_ctx x the element size) and a scratch estimate for one
 * sequence. */
typedef struct {
    uint64_t weight_bytes;
    uint64_t kv_bytes;
    uint64_t scratch_bytes;
    uint64_t total_bytes;
} moe8_memory_estimate;
moe8_status moe8_model_memory(const moe8_model *m, int64_t n_ctx, moe8_dtype kv_type,
                              moe8_memory_estimate *out, moe8_error *err);
/* Bytes of one KV cache block of the whole model: every layer's K and V of
 * MOE8_KV_BLOCK_TOKENS positions as kv_type (2 x layers x kv_heads x head_dim
 * x 16 x 4 bytes for F32, x 2 for F16 and BF16; with multi-head latent
 * attention one row of kv_lora_rank + qk_rope_head_dim per position and
 * layer instead of K and V; 0 for any other type).
 * moe8_context_params.kv_bytes counts in these. */
size_t moe8_model_kv_block_bytes(const moe8_model *m, moe8_dtype kv_type);

/* ======================================================================== */
/* Sampling                                                                  */
/* ======================================================================== */

/* Filters apply in vLLM's order: logits / temperature -> softmax -> top-k ->
 * top-p -> min-p -> renormalize -> draw. Candidates are ranked by probability,
 * ties by lower id (without any of the three filters the draw walks the ids
 * in order: nothing to rank), so a seed reproduces the same tokens
 * everywhere. */
typedef struct {
    float temperature; /* 0 = greedy (arg-max, ties to the lower id); default 0 */
    int top_k;         /* keep the k most likely; 0 = off */
    float top_p;       /* keep the smallest prefix with mass >= top_p; 1 = off */
    float min_p;       /* keep p >= min_p * p_max; 0 = off */
    uint64_t seed;     /* default 0 */
} moe8_sampler_params;

typedef struct moe8_sampler moe8_sampler;

moe8_sampler_params moe8_sampler_params_default(void);
/* `params` may be NULL (defaults). A sampler belongs to one caller at a time. */
moe8_status moe8_sampler_create(const moe8_sampler_params *params, int n_vocab,
                                moe8_sampler **out, moe8_error *err);
/* Fails (MOE8_ERR_INVALID_ARG, naming the field) for settings out of range. */
moe8_status moe8_sampler_params_check(const moe8_sampler_params *params, moe8_error *err);
/* The settings and vocabulary size the sampler was made with. */
moe8_sampler_params moe8_sampler_get_params(const moe8_sampler *s);
int moe8_sampler_n_vocab(const moe8_sampler *s);
/* Next token id from logits [n_vocab]. Never allocates. */
int32_t moe8_sampler_sample(moe8_sampler *s, const float *logits);
void moe8_sampler_free(moe8_sampler *s);

/* The softmax of logits [n] as every part of moe8 computes it (SEMANTICS
 * §10): moe8_logits_max is the largest logit (NaN ignored; -INFINITY when
 * there is none); moe8_logits_exp_sum the sum over j of
 * expf((logits[j] - max) / temperature), in double, added in id order, the
 * exponentials vectorized and bit for bit glibc's expf. A log-probability
 * (temperature 1) is logits[i] - max - log(sum). */
float moe8_logits_max(const float *logits, int32_t n);
double moe8_logits_exp_sum(const float *logits, int32_t n, float max, float temperature);

/* ======================================================================== */
/* Generation: contexts, batches, decode, generate (SEMANTICS §7)                 */
/* ======================================================================== */

/* A moe8_model holds the weights; a moe8_context holds what one stream of
 * work needs on top: a paged KV cache shared by up to n_seq_max sequences of
 * at most n_ctx positions each, and scratch sized once (decode never
 * allocates).
 *
 * Paged KV cache: a pool of blocks of MOE8_KV_BLOCK_TOKENS positions (every
 * layer's K and V as kv_type: F16 by default, BF16, or F32 as computed; read
 * back widened to fp32); each sequence holds the blocks its positions need,
 * through a block table. The pool is sized by kv_bytes (default: enough for
 * every sequence to reach n_ctx). moe8_decode takes the blocks a batch needs
 * and fails cleanly when the pool has too few (the scheduler below never lets
 * that happen). With prefix_cache on, each full block is registered under the
 * hash of all token ids up to its end; the scheduler reuses registered blocks
 * for requests that share a prompt prefix (reference-counted, immutable,
 * evicted least-recently-used when the pool needs room).
 *
 * Preparation: the first context of a model prepares it — W8A8 linears and
 * experts are mapped from the packed cache (SEMANTICS §6c; every section's
 * checksum checked first), or packed and the cache written when it is absent
 * or invalid, or (no_cache) repacked into memory moe8 owns with their
 * checkpoint pages released (§6b); moe8_model_load stays cheap (`inspect`
 * never prepares). The
 * prepared weights are shared by every context of the model (with the same
 * float_experts setting) and freed with the last of them.
 *
 * Thread safety: moe8_context_create and moe8_context_free may be called from
 * any thread, concurrently, for the same model (preparation is serialized
 * inside). Contexts of one model run concurrently on different threads. One
 * context is used by one thread at a time: calls taking a non-const
 * moe8_context * need exclusive use; the const getters may run concurrently
 * with each other, not with those. A context keeps its model alive:
 * moe8_model_free with contexts still open only drops the caller's
 * reference, and the last moe8_context_free frees the model. Each call
 * parallelizes internally with OpenMP (n_threads); results do not depend on
 * the thread count. */
typedef struct moe8_context moe8_context;
typedef struct moe8_sampler moe8_sampler; /* see "Sampling" below */

#define MOE8_KV_BLOCK_TOKENS 16   /* positions per KV block */

/* Initialise with moe8_context_params_default(); fields are only appended. */
typedef struct {
    int32_t n_ctx;        /* positions per sequence; default 4096, at most
                           * max_position_embeddings */
    int32_t n_seq_max;    /* sequences held at once (ids 0..n_seq_max-1); default 1 */
    int32_t n_batch;      /* most tokens per moe8_decode; 0 = n_ctx */
    int32_t n_outputs;    /* most logits rows per moe8_decode; 0 = n_seq_max */
    int n_threads;        /* OpenMP threads; 0 = the model's n_threads, else the OpenMP default; at most 4096 */
    int float_experts;    /* run W8A8 experts dequantized to fp32 (a comparison aid:
                           * 4x the expert memory) */
    uint64_t kv_bytes;    /* KV pool budget in bytes (whole model, also under TP); 0 =
                           * n_seq_max x n_ctx positions */
    int prefix_cache;     /* register full KV blocks for reuse; default 1 */
    moe8_dtype kv_type;   /* KV cache elements: MOE8_DT_F16 (default), MOE8_DT_BF16 (half the
                           * memory of F32, K/V rounded to nearest even when written) or
                           * MOE8_DT_F32 (exact) */
    uint64_t state_bytes; /* hybrid models (Gated DeltaNet layers): the recurrent-state pool
                           * in bytes, in slots (every Gated DeltaNet layer's conv state and f32
                           * recurrent state: moe8_kv_stats.state_slot_bytes); each running
                           * sequence holds one, the rest keep prefix-cache snapshots
                           * (SEMANTICS §10). 0 = n_seq_max slots plus, with prefix_cache,
                           * 256 MiB of snapshots (at least 4 slots, at most 256). Ignored
                           * for other models */
    const char *prompt_cache_dir; /* the prompt cache's disk tier (SEMANTICS §10b): full KV
                           * blocks of finished prefixes written to files in this directory
                           * (made when missing; several processes may share it) by a
                           * background thread, and read back, verified, when a prompt's
                           * prefix is not in memory; NULL = off. Needs prefix_cache; not
                           * supported yet for hybrid models or under TP/EP */
    uint64_t prompt_cache_bytes; /* bound on the directory's block files (least recently
                           * used removed first); 0 = no bound */
} moe8_context_params;
moe8_context_params moe8_context_params_default(void);

/* Prepare the model now, as its first context with this float_experts setting
 * would (above): map or build the packed cache, or pack in memory. Contexts
 * created later share what it prepared; it is released with the model. A
 * second call is a no-op. Collective when the model has a dist of more than
 * one rank (every rank learns whether every rank succeeded). Lets a program
 * overlap preparation with other start-up work (moe8 generate loads the
 * tokenizer meanwhile); without it the first context prepares. */
moe8_status moe8_model_prepare(moe8_model *model, int float_experts, int n_threads,
                               moe8_error *err);

/* `params` may be NULL (defaults). Prepares the model when needed (above). */
moe8_status moe8_context_create(moe8_model *model, const moe8_context_params *params,
                                moe8_context **out, moe8_error *err);
void moe8_context_free(moe8_context *ctx);

/* The parameters in effect (zeros replaced by the values chosen). */
moe8_context_params moe8_context_get_params(const moe8_context *ctx);
int32_t moe8_context_n_vocab(const moe8_context *ctx);
/* Tokens held for sequence `seq` (its next position), or -1 if out of range. */
int32_t moe8_context_seq_len(const moe8_context *ctx, int32_t seq);
/* Keep the first n_keep positions of `seq` and drop the rest (0 clears it), so
 * the next token of seq has position n_keep. A hybrid model's (qwen3_next,
 * qwen3_5_moe) recurrent state cannot be rewound yet: there only 0 (or a
 * length >= the current one) is accepted, others give MOE8_ERR_UNSUPPORTED. */
moe8_status moe8_context_seq_truncate(moe8_context *ctx, int32_t seq, int32_t n_keep,
                                      moe8_error *err);

/* The prompt cache's disk tier (prompt_cache_dir), counted since the context
 * was created: blocks loaded (hits) and lookups of a block beyond the memory
 * match that found no file (misses), bytes read and written, files removed by
 * the size bound (evictions), files that did not verify (rejected: removed,
 * their blocks recomputed), blocks not written (dropped: queue full or
 * writing stopped). */
typedef struct {
    int enabled;                    /* the context has a disk tier */
    int writing;                    /* 0 once writing stopped (read-only or full directory) */
    uint64_t hits, misses, read_bytes, written_bytes, written_blocks;
    uint64_t evictions, rejected, dropped;
    double read_seconds;            /* wall time spent loading and verifying blocks */
    double read_cpu_seconds;        /* the loading thread's CPU time in it */
} moe8_prompt_cache_stats;

/* Accounting of the KV pool: every block is used (held by a sequence),
 * cached (held by none, kept for the prefix cache, evictable) or free. */
typedef struct {
    int32_t n_blocks, block_tokens;
    size_t block_bytes;             /* this process's bytes per block */
    int32_t n_used, n_cached, n_free;
    /* hybrid models: recurrent-state slots (0 for others), those of running sequences,
     * those holding prefix-cache snapshots, and the bytes of one */
    int32_t state_slots, state_running, state_snapshots;
    size_t state_slot_bytes;
    /* hybrid models with the prefix cache, since the context was made: sequences
     * started (or resumed) from a state snapshot / from position 0, and snapshots
     * that left the cache (their slot taken for a sequence or a newer snapshot,
     * their KV block evicted or rewritten) */
    int64_t state_snap_hits, state_snap_misses, state_snap_evictions;
    moe8_prompt_cache_stats disk;   /* the disk tier (zeros when off) */
    /* models with sliding-window layers beside full ones (gpt_oss): the window, and of
     * n_used the blocks of the sliding layers' group, which keeps only the window's
     * (SEMANTICS §10; a block then holds one group's layers); 0 and 0 for others */
    int32_t window, n_window_used;
} moe8_kv_stats;
void moe8_context_kv_stats(const moe8_context *ctx, moe8_kv_stats *out);

/* A batch of tokens, each tagged with its sequence and position (like
 * llama.cpp's llama_batch). Tokens of different sequences may be mixed in any
 * order; the tokens of one sequence appear in position order and continue it:
 * the first has position moe8_context_seq_len(seq), the next +1, and so on.
 * All tokens of one sequence in one batch are one forward pass (a prompt of
 * T tokens goes through the MoE layer as T rows). */
typedef struct {
    int32_t n_tokens;
    const int32_t *token;   /* [n_tokens] ids in [0, n_vocab) */
    const int32_t *pos;     /* [n_tokens] position within its sequence */
    const int32_t *seq_id;  /* [n_tokens] in [0, n_seq_max) */
    const int8_t *logits;   /* [n_tokens] 1 = compute this token's logits; NULL = the
                             * last token of each sequence in the batch */
} moe8_batch;

/* Run the batch: append every token's K/V to its sequence and compute the
 * logits asked for. A bad batch (ids, positions, n_batch/n_outputs exceeded,
 * a position >= n_ctx: context overflow, or more new KV blocks than the pool
 * has) fails with MOE8_ERR_INVALID_ARG before anything changes. On any failure the logits of the call are void;
 * after a failure inside the pass, the sequences of the batch keep only their
 * old positions (truncate is not needed). */
moe8_status moe8_decode(moe8_context *ctx, const moe8_batch *batch, moe8_error *err);
/* Logits [n_vocab] of token i of the last moe8_decode batch, or NULL when they
 * were not asked for. Valid until the next moe8_decode on ctx. */
const float *moe8_context_logits(const moe8_context *ctx, int32_t i);

/* ---- the scheduler: requests that come and go (SEMANTICS §10) ---- */

/* Why a sequence or request stopped. Append-only. */
typedef enum {
    MOE8_FINISH_NONE = 0,     /* not finished (the call failed or was cancelled) */
    MOE8_FINISH_STOP = 1,     /* sampled a stop id (not emitted) */
    MOE8_FINISH_LENGTH = 2,   /* n_predict tokens generated */
    MOE8_FINISH_CONTEXT = 3,  /* the KV cache of the sequence is full */
    MOE8_FINISH_CALLBACK = 4, /* the callback returned MOE8_GEN_STOP_SEQ */
    MOE8_FINISH_CANCELLED = 5,/* moe8_sched_cancel */
    MOE8_FINISH_ERROR = 6,    /* the step failed (see the finish event's status) */
} moe8_finish;

/* A step-driven scheduler over one context, caller-driven like zstd's
 * streaming API: add requests at any time, call moe8_sched_step until
 * moe8_sched_pending says nothing is left, read each step's events.
 *
 * Each step is one moe8_decode over a batch built, within max_batch_tokens,
 * from the running requests in the order they started (a decoding request
 * takes one token, one still reading its prompt a chunk of it), then from
 * the waiting requests in arrival order (FCFS) while fewer than max_running
 * run and the KV pool holds their next chunk. A new request first takes every
 * cached block of its prompt's prefix (prefix_cache of the context). When a
 * running request cannot grow for want of KV blocks, the most recently
 * started running request is preempted: its blocks are given back and it
 * waits at the head of the queue, to be recomputed from its tokens later.
 *
 * Batch invariance: a request's tokens and log-probabilities are bit-identical
 * whatever else is in the batch, however its prompt was chunked, whether its
 * prefix came from the cache or was recomputed after preemption, and for any
 * thread count (integer sums are exact; every float reduction has a fixed
 * order per row). Seeded sampling draws from the request's own generator, so
 * the same request with the same seed gives the same tokens alone or under
 * load.
 *
 * Under TP/EP every rank runs its own scheduler on its own context with the
 * same calls in the same order; rank 0 samples and broadcasts the tokens, so
 * every rank makes the same decisions and emits the same events.
 * Not thread-safe: one thread drives a scheduler (and its context). */
typedef struct moe8_sched moe8_sched;
typedef struct moe8_tokenizer moe8_tokenizer; /* see "Tokenizer" below */
typedef struct moe8_grammar moe8_grammar;     /* a compiled grammar (moe8_grammar_compile) */
typedef struct moe8_grammar_vocab moe8_grammar_vocab; /* a vocabulary as the grammar reads it */

/* Initialise with moe8_sched_params_default(); fields are only appended. */
typedef struct {
    int32_t max_running;       /* most requests running at once; 0 = the context's n_seq_max
                                * (never more) */
    int32_t max_batch_tokens;  /* most tokens per step; 0 = the context's n_batch (never more) */
    const moe8_tokenizer *tok; /* for token text and stop strings; may be NULL (no text) */
    const int32_t *eos_ids;    /* end-of-sequence ids (copied), ended on unless a request
                                * ignores them; NULL = the model's eos ids and the tokenizer's */
    int32_t n_eos_ids;
    const moe8_grammar_vocab *grammar_vocab; /* for requests with a grammar: another scheduler's
                                * (moe8_sched_grammar_vocab, same tokenizer and eos ids), which
                                * must outlive this one; NULL: made from tok at the first one */
} moe8_sched_params;
moe8_sched_params moe8_sched_params_default(void);

#define MOE8_MAX_LOGPROBS 20      /* most alternatives per token */
#define MOE8_MAX_STOP_STRINGS 16
#define MOE8_MAX_GRAMMAR_AFTER 256 /* bytes of moe8_request.grammar_after */

/* One request. Initialise with moe8_request_default(); fields are only
 * appended. Everything it points to is copied by moe8_sched_add. */
typedef struct {
    const int32_t *prompt;          /* [n_prompt] token ids */
    int32_t n_prompt;               /* 1..n_ctx */
    moe8_sampler_params sampling;   /* its own settings and seed */
    int32_t max_tokens;             /* most new tokens (>= 0; 0: read the prompt only) */
    const int32_t *stop_ids;        /* [n_stop_ids] ids that end it (not emitted), always */
    int32_t n_stop_ids;
    const char *const *stop;        /* [n_stop] UTF-8 stop strings (need a tokenizer): matched on
                                     * the text across token boundaries; the text ends before
                                     * the match and the stop string is not returned */
    int32_t n_stop;
    int32_t logprobs;               /* -1: none (default); 0..20: each token's log-probability
                                     * and this many best alternatives */
    int ignore_eos;                 /* do not end on the scheduler's eos ids */
    void *user;                     /* handed back in its events */
    int32_t n_prompt_logits;        /* the logits of the last n_prompt_logits prompt positions
                                     * come as MOE8_EVENT_PROMPT_LOGITS events, each once, in
                                     * position order (0: none; perplexity, scoring) */
    /* Logits processors, applied in this order to a copy of the logits before
     * each draw (log-probs and events' logits stay the model's raw ones): */
    const int32_t *bias_ids;        /* [n_bias] logit_bias: bias[i] added to the logit of
                                     * bias_ids[i] (copied; -100 all but bans a token) */
    const float *bias;
    int32_t n_bias;
    int32_t min_tokens;             /* the eos and stop ids are banned until this many tokens
                                     * were generated (<= max_tokens) */
    float repetition_penalty;       /* vLLM's: each token of the prompt or the output gets
                                     * logit / p when the logit is > 0, logit * p otherwise;
                                     * 1 = off (default), > 0 */
    float frequency_penalty;        /* OpenAI's: minus this times the token's count in the
                                     * output; 0 = off */
    float presence_penalty;         /* OpenAI's: minus this for each token the output holds;
                                     * 0 = off */
    const moe8_grammar *grammar;    /* constrained decoding: each draw only among the tokens that
                                     * continue it, eos only where it may end (then ignore_eos
                                     * must be 0); NULL = none. Must outlive the request. The
                                     * request's position in it is its own: batch invariance */
    const char *grammar_after;      /* with a grammar: it starts only once the generated text
                                     * holds this string ("</think>": a reasoning model thinks
                                     * freely, then answers in the grammar), from its initial
                                     * state on the bytes after the string's first occurrence
                                     * (those in the same token included). Matched on the
                                     * tokens' bytes, across token boundaries; until then nothing
                                     * is masked and an eos may end the request, and a request
                                     * that never writes it runs to max_tokens unconstrained.
                                     * NULL or "" = from the first token (copied; at most
                                     * MOE8_MAX_GRAMMAR_AFTER bytes) */
} moe8_request;
moe8_request moe8_request_default(void);

typedef enum {
    MOE8_EVENT_TOKEN = 1,           /* a new token */
    MOE8_EVENT_FINISH = 2,          /* the request ended (its last event) */
    MOE8_EVENT_PROMPT_LOGITS = 3,   /* the logits at prompt position `pos` (n_prompt_logits) */
} moe8_event_type;

typedef struct {
    int32_t token;
    float logprob;
} moe8_logprob;

/* Pointers stay valid until the next moe8_sched_step or moe8_sched_free. */
typedef struct {
    moe8_event_type type;
    int64_t request;                /* the id moe8_sched_add gave */
    void *user;
    int32_t token;                  /* TOKEN: the id */
    const char *text;               /* text released now (whole UTF-8 characters; text that could
                                     * still begin a stop string is held back); FINISH: what was
                                     * still held, when it ends for any reason but a stop string */
    size_t text_len;
    float logprob;                  /* TOKEN: log-softmax of the fp32 logits at `token`; NAN when
                                     * the request asked for none. PROMPT_LOGITS: what these
                                     * logits give the prompt token at pos + 1 (NAN at the last
                                     * position, or when the request asked for none) */
    int32_t n_top;                  /* TOKEN (and PROMPT_LOGITS, as logprob): alternatives in top,
                                     * best first (ties: lower id) */
    const moe8_logprob *top;
    const float *logits;            /* [n_vocab] the logits the token was drawn from (FINISH:
                                     * those of a prompt read with max_tokens 0), or NULL */
    moe8_finish finish;             /* FINISH: STOP, LENGTH, CONTEXT, CANCELLED or ERROR */
    int32_t n_prompt, n_generated;  /* FINISH: token counts */
    int32_t n_cached;               /* FINISH: prompt tokens that came from the prefix cache */
    double ttft_s;                  /* FINISH: seconds from add to the first token (-1: none) */
    moe8_status status;             /* FINISH with ERROR: why */
    const char *message;
    int32_t pos;                    /* PROMPT_LOGITS: the prompt position (token = its id) */
} moe8_event;

/* Counters since create, and the state now. */
typedef struct {
    int32_t n_running, n_waiting;
    int64_t n_steps, n_preempted;
    int64_t prompt_tokens, generated_tokens;
    int64_t prefix_queries, prefix_hits; /* prompt tokens looked up / found in the cache */
    moe8_kv_stats kv;
} moe8_sched_stats;

/* Constrained decoding (moe8_request.grammar). A grammar is immutable once
 * compiled: any number of requests and threads may use one. GBNF is
 * llama.cpp's syntax (root rule "root"); a JSON Schema (the subset
 * docs/SEMANTICS.md names: types, properties, required, enum, const, anyOf,
 * items, lengths, integer bounds, $defs/$ref, ...) compiles to its GBNF, any
 * other keyword refused naming it and its path. Errors name the line, column
 * and rule. */
moe8_status moe8_grammar_compile(const char *gbnf, size_t len, moe8_grammar **out, moe8_error *err);
moe8_status moe8_grammar_from_json_schema(const char *schema_json, size_t len, moe8_grammar **out,
                                          moe8_error *err);
void moe8_grammar_free(moe8_grammar *g);
/* The scheduler's vocabulary for grammars (its tokenizer's token bytes and
 * its eos ids), made on the first call; NULL without a tokenizer or out of
 * memory. Lives as long as s. */
const moe8_grammar_vocab *moe8_sched_grammar_vocab(moe8_sched *s);

/* The scheduler owns nothing of ctx but its use: ctx must outlive it and
 * serve nothing else meanwhile. `params` may be NULL (defaults). */
moe8_status moe8_sched_create(moe8_context *ctx, const moe8_sched_params *params,
                              moe8_sched **out, moe8_error *err);
/* Frees the requests still pending (no events) and their KV blocks. */
void moe8_sched_free(moe8_sched *s);

/* Queue a request; *id gets its id (> 0). Fails with MOE8_ERR_INVALID_ARG,
 * naming the field, for a prompt out of [1, n_ctx] or the KV pool, a token id
 * out of range, bad sampling settings, logprobs out of [-1, 20], too many or
 * empty stop strings, stop strings without a tokenizer, a grammar_after
 * without a grammar or longer than MOE8_MAX_GRAMMAR_AFTER, or (hybrid models)
 * a prompt longer than max_batch_tokens below 66, or prompt logits with
 * fewer than 66 logits rows per step (SEMANTICS §10). */
moe8_status moe8_sched_add(moe8_sched *s, const moe8_request *r, int64_t *id, moe8_error *err);
/* Cancel a waiting or running request: it ends with MOE8_FINISH_CANCELLED in
 * the next step's events. MOE8_ERR_NOT_FOUND when it ended already. */
moe8_status moe8_sched_cancel(moe8_sched *s, int64_t id);
/* Requests not finished yet (waiting or running, or cancelled not reported). */
int32_t moe8_sched_pending(const moe8_sched *s);

/* One step. *events / *n_events: what happened (token and prompt-logits
 * events in batch order, then finishes). A step computes at most the
 * context's n_outputs logits rows: prompt chunks that want more are cut. When the forward fails, the requests of the batch end
 * with MOE8_FINISH_ERROR and the status is returned as well (the others keep
 * their state; a communication failure under TP is fatal to the group). */
moe8_status moe8_sched_step(moe8_sched *s, const moe8_event **events, int32_t *n_events,
                            moe8_error *err);
void moe8_sched_get_stats(const moe8_sched *s, moe8_sched_stats *out);

/* ---- generate: a fixed set of prompts, run to the end through the scheduler ---- */

/* Return values of the per-token callback. */
#define MOE8_GEN_CONTINUE 0
#define MOE8_GEN_STOP_SEQ 1  /* finish this sequence, keep the others going */
#define MOE8_GEN_CANCEL 2    /* stop everything: moe8_generate returns MOE8_ERR_CANCELLED */

/* Called on the generate caller's thread for each new token of each sequence
 * (index `seq` into the request), in the order of the step's events. Under
 * TP/EP it runs on every rank and rank 0's answers decide for all of them, so
 * the ranks never diverge. */
typedef int (*moe8_token_fn)(void *user, int32_t seq, int32_t token);

typedef struct {
    int32_t n_seq;                   /* prompts (>= 1; more than n_seq_max wait their turn) */
    const int32_t *const *prompt;    /* [n_seq] pointers to prompt ids */
    const int32_t *n_prompt;         /* [n_seq] lengths, each 1..n_ctx */
    int32_t n_predict;               /* most new tokens per sequence (>= 0) */
    const int32_t *stop_ids;         /* [n_stop] or NULL */
    int32_t n_stop;
    moe8_token_fn on_token;          /* may be NULL */
    void *user;
    int32_t *out_tokens;             /* [n_seq][n_predict] or NULL: generated ids */
    int32_t *n_out;                  /* [n_seq] or NULL: how many were generated */
    moe8_finish *finish;             /* [n_seq] or NULL */
} moe8_generate_request;

/* Run every prompt to its end through a scheduler on ctx (max_running =
 * n_seq_max, max_batch_tokens = n_batch): each prompt is one request with
 * the sampler's settings and seed (its own generator: the same prompt gives
 * the same tokens alone or among others), ending on req's stop ids only. The
 * sampler must be made for moe8_context_n_vocab(ctx) tokens (else
 * MOE8_ERR_INVALID_ARG); only its settings are used. Reaching n_ctx finishes
 * a sequence with MOE8_FINISH_CONTEXT. The scheduler clears every sequence
 * of ctx first and gives them back at the end (their full blocks stay in the
 * prefix cache for later calls). Outputs written so far stay valid on
 * failure. */
moe8_status moe8_generate(moe8_context *ctx, moe8_sampler *sampler,
                          const moe8_generate_request *req, moe8_error *err);

/* ======================================================================== */
/* Utilities                                                                 */
/* ======================================================================== */

/* Name of the kernel table in use: "avx512", "avx2" or "ref" — the first of
 * this build's tables the CPU and OS support, unless MOE8_ISA=NAME forces one
 * (MOE8_FORCE_REF=1 is MOE8_ISA=ref). Weights are packed in that table's
 * layout when a model or layer is prepared. */
const char *moe8_kernel_isa(void);
/* This build's kernel tables, best first, those the CPU cannot run marked:
 * e.g. "avx512 avx2 ref" or "avx512(unsupported) avx2 ref". */
const char *moe8_kernel_tables(void);
/* MOE8_OK, or why the MOE8_ISA in the environment cannot be honoured: an
 * unknown name (MOE8_ERR_INVALID_ARG) or a table this CPU lacks
 * (MOE8_ERR_UNSUPPORTED). moe8_model_load and moe8_moe_layer_create fail so. */
moe8_status moe8_kernel_check(moe8_error *err);

/* Read the whole file `path` into a NUL-terminated heap buffer *data (free it
 * with free(); a NUL inside the file stays, *len says the real length; len may
 * be NULL). Only a regular file is read: the open never blocks (O_NONBLOCK), a
 * FIFO, a device such as /dev/zero or a folder fails with MOE8_ERR_IO, and a
 * file of more than max_bytes fails with MOE8_ERR_FORMAT before anything is
 * allocated (the message gives both sizes); a missing file is
 * MOE8_ERR_NOT_FOUND. Every message names the file. *data is NULL on failure.
 * This is how moe8 itself reads config.json, tokenizer.json and the
 * safetensors index. */
moe8_status moe8_read_file(const char *path, size_t max_bytes, char **data, size_t *len,
                           moe8_error *err);

/* ======================================================================== */
/* Tokenizer: BPE from tokenizer.json (SEMANTICS §9)                              */
/* ======================================================================== */

/* Loaded once, read-only afterwards: every call below that takes a
 * `const moe8_tokenizer *` may run concurrently on the same handle. A
 * moe8_detok is single-threaded state (one per stream). Token text here is
 * always raw bytes (UTF-8 for whole characters), never a tokenizer.json
 * spelling: not ByteLevel's "Ġhello", not SentencePiece's "▁hello" or "<0x0A>"
 * (their text is " hello" and "\n"). */
typedef struct moe8_tokenizer moe8_tokenizer;

/* Load `dir`/tokenizer.json (+ tokenizer_config.json when present: add_bos_token,
 * bos_token, eos_token) — a model folder or a folder holding just those files.
 * The pipeline follows Hugging Face `tokenizers`: added tokens; a normalizer of
 * NFC / Prepend / Replace steps; Split regex and ByteLevel pre-tokenizers; a BPE
 * model (byte-level, or SentencePiece-style with byte_fallback, unk_token,
 * fuse_unk); a ByteLevel decoder or Replace / ByteFallback / Fuse / Strip. This
 * covers Qwen2/Qwen3, Llama-2/Mistral/Mixtral and DeepSeek-V3. Anything else
 * fails with MOE8_ERR_UNSUPPORTED naming the field (e.g. "'.../tokenizer.json':
 * normalizer type 'Lowercase' is not supported ..."), never a silently wrong
 * tokenization. Loading the 11 MB Qwen3 file takes a fraction of a second. */
moe8_status moe8_tokenizer_load(const char *dir, moe8_tokenizer **out, moe8_error *err);
void moe8_tokenizer_free(moe8_tokenizer *tok);

/* Largest token id + 1 (151669 for Qwen3; the model's vocab_size may be larger). */
int32_t moe8_tokenizer_n_vocab(const moe8_tokenizer *tok);
/* 1 when tokenizer_config.json says add_bos_token: true (Qwen3: 0; Llama-2,
 * Mistral, DeepSeek-V3: 1). moe8_tokenize never adds it; the caller prepends
 * moe8_tokenizer_bos_id() when this says so, as Hugging Face tokenizers do. */
int moe8_tokenizer_add_bos(const moe8_tokenizer *tok);
int32_t moe8_tokenizer_bos_id(const moe8_tokenizer *tok); /* -1 when none (Qwen3) */
int32_t moe8_tokenizer_eos_id(const moe8_tokenizer *tok); /* tokenizer_config eos_token, or -1 */
/* Id of the token spelled exactly `text`: an added token's content first, then
 * the vocabulary's spelling (raw bytes for a ByteLevel vocabulary), e.g.
 * "<|im_end|>" -> 151645 and " hello" -> 23811 (Qwen3), "▁Hello" -> 22557 and
 * "<0x0A>" -> 13 (Mistral); -1 if none. */
int32_t moe8_tokenizer_token_id(const moe8_tokenizer *tok, const char *text);

#define MOE8_TOKEN_ADDED 1u   /* listed in "added_tokens": matched before pre-tokenization */
#define MOE8_TOKEN_SPECIAL 2u /* "special": true (<|im_start|>, <|im_end|>, <s>, ...) */
/* Text of token `id` as decoding emits it (not NUL-terminated; a piece of a
 * UTF-8 character is possible), valid while `tok` lives; NULL when id is out
 * of range or unassigned. *n_bytes and *flags (MOE8_TOKEN_* bits) are
 * optional. The decoder's Strip (Llama: one leading space of the whole text)
 * is not applied here. */
const char *moe8_tokenizer_token_bytes(const moe8_tokenizer *tok, int32_t id, size_t *n_bytes,
                                       unsigned *flags);

/* Encode text[0..len) (UTF-8; need not be NUL-terminated) into ids[0..cap).
 * Added/special tokens in the text are matched first, so "<|im_end|>" gives
 * 151645. *n_ids gets the id count; when it exceeds cap the call fails with
 * MOE8_ERR_INVALID_ARG and *n_ids says how many are needed (ids=NULL, cap=0
 * counts). Invalid UTF-8 fails with MOE8_ERR_FORMAT, err->offset = the byte
 * offset. No BOS is added. Allocates per-call scratch; thread-safe. */
moe8_status moe8_tokenize(const moe8_tokenizer *tok, const char *text, size_t len, int32_t *ids,
                          size_t cap, size_t *n_ids, moe8_error *err);

/* moe8_tokenize with MOE8_TOKENIZE_* flags (0: the same as moe8_tokenize). */
#define MOE8_TOKENIZE_NO_SPECIAL 1u /* special tokens' text is plain text (Qwen3: "<|im_end|>"
                                     * gives 27 91 318 6213 91 29, not 151645), as tokenizers'
                                     * encode_special_tokens / transformers' split_special_tokens;
                                     * added tokens that are not special are still matched */
moe8_status moe8_tokenize_ex(const moe8_tokenizer *tok, const char *text, size_t len,
                             unsigned flags, int32_t *ids, size_t cap, size_t *n_ids,
                             moe8_error *err);

/* Streaming detokenizer: feed ids one at a time; each call hands back only
 * complete UTF-8 characters (an incomplete tail waits for the next id,
 * invalid bytes become U+FFFD). Special tokens render as their text unless
 * MOE8_DETOK_SKIP_SPECIAL. A stream is one Hugging Face decode() call: the
 * decoder's Strip removes Llama/Mistral's leading space at its start (its first
 * emitted characters), unless MOE8_DETOK_CONTINUE says the ids continue text
 * decoded elsewhere (generated tokens after a prompt: " Paris" stays " Paris").
 * The returned text is not NUL-terminated and stays valid until the next call
 * on `d`. Feed and flush never allocate. */
typedef struct moe8_detok moe8_detok;
#define MOE8_DETOK_SKIP_SPECIAL 1u
#define MOE8_DETOK_CONTINUE 2u
moe8_status moe8_detok_create(const moe8_tokenizer *tok, unsigned flags, moe8_detok **out,
                           moe8_error *err);
/* Fails (MOE8_ERR_INVALID_ARG, *len = 0) for an id without a token. */
moe8_status moe8_detok_feed(moe8_detok *d, int32_t id, const char **text, size_t *len,
                            moe8_error *err);
/* End of stream: a dangling incomplete character becomes one U+FFFD. */
void moe8_detok_flush(moe8_detok *d, const char **text, size_t *len);
void moe8_detok_reset(moe8_detok *d); /* drop any held tail, start a new stream (Strip again) */
void moe8_detok_free(moe8_detok *d);

/* Whole sequence: what feeding every id and flushing gives, NUL-terminated in
 * out[0..cap). *n_out = bytes without the NUL; when cap <= that, fails with
 * MOE8_ERR_INVALID_ARG (*n_out still says the length). */
moe8_status moe8_detokenize(const moe8_tokenizer *tok, const int32_t *ids, size_t n_ids,
                            unsigned flags, char *out, size_t cap, size_t *n_out,
                            moe8_error *err);

/* ======================================================================== */
/* Chat templates: the model's own prompt format (SEMANTICS §9)              */
/* ======================================================================== */

/* One message of a conversation. */
typedef struct {
    const char *role;    /* "system", "user", "assistant", "tool", ... */
    const char *content; /* UTF-8, NUL-terminated; NULL is None to a template */
} moe8_chat_message;

/* A parsed Jinja2 chat template (the `chat_template` of a Hugging Face
 * tokenizer_config.json), rendered by moe8's interpreter of the Jinja subset
 * chat templates use, as transformers' apply_chat_template renders it
 * (trim_blocks, lstrip_blocks, loop controls, raise_exception, tojson).
 * Read-only once parsed: renders of one template may run concurrently. */
typedef struct moe8_chat_template moe8_chat_template;

/* Parse source[0..len) (UTF-8). bos_token / eos_token: what the template
 * sees under those names (NULL: left undefined, as transformers leaves an
 * unset token). Syntax errors fail with MOE8_ERR_FORMAT, syntax outside the
 * subset (include, import, call blocks, recursive loops, an unknown filter,
 * ...) with MOE8_ERR_UNSUPPORTED; both messages say "line L, column C". */
moe8_status moe8_chat_template_parse(const char *source, size_t len, const char *bos_token,
                                     const char *eos_token, moe8_chat_template **out,
                                     moe8_error *err);
void moe8_chat_template_free(moe8_chat_template *tmpl);
/* The template's text as parsed (NUL-terminated), e.g. to tell which tool-call
 * format it teaches; lives as long as tmpl. */
const char *moe8_chat_template_source(const moe8_chat_template *tmpl);

/* Render msgs[0..n_msgs) into out[0..cap) (NUL-terminated; *n_out and a
 * too-small cap as moe8_detokenize, so out=NULL, cap=0 measures). The
 * template sees messages (a list of {role, content}), add_generation_prompt,
 * tools and documents (None), bos_token/eos_token and every key of the JSON
 * object kwargs_json (NULL: none), e.g. {"enable_thinking": false} for
 * Qwen3; kwargs may override bos_token or set tools, not messages or
 * add_generation_prompt. The template's raise_exception(msg) fails with
 * MOE8_ERR_INVALID_ARG and msg in the message ("chat template: msg"), as do
 * other errors of this conversation (an undefined value used, a limit:
 * 16 MiB of text, 20 M steps). Bad kwargs JSON: MOE8_ERR_INVALID_ARG. */
moe8_status moe8_chat_template_render(const moe8_chat_template *tmpl,
                                      const moe8_chat_message *msgs, size_t n_msgs,
                                      int add_generation_prompt, const char *kwargs_json,
                                      char *out, size_t cap, size_t *n_out, moe8_error *err);

/* Render a conversation given as JSON, as OpenAI clients send it and vLLM
 * passes it to apply_chat_template: messages_json an array of message
 * objects (role, content a string or null, tool_calls with
 * function.arguments an object, tool_call_id, name, reasoning_content, ...),
 * tools_json an array of tool objects or NULL (None), documents_json
 * likewise. Same output contract as moe8_chat_template_render (an empty
 * rendering is allowed). */
moe8_status moe8_chat_template_render_json(const moe8_chat_template *tmpl, const char *messages_json,
                                           const char *tools_json, const char *documents_json,
                                           int add_generation_prompt, const char *kwargs_json,
                                           char *out, size_t cap, size_t *n_out, moe8_error *err);

/* The tokenizer's own template: chat_template.jinja in its folder, else
 * tokenizer_config.json's chat_template (a string, or Hugging Face's list of
 * {name, template}: the one named "default"), with its bos/eos/pad/unk
 * tokens. A folder without one fails with MOE8_ERR_NOT_FOUND (moe8 does not
 * guess a format, as transformers and vLLM do not); a template moe8 cannot
 * parse fails here with the parse error (loading the tokenizer succeeds:
 * completions need no template). *tmpl lives as long as tok. */
moe8_status moe8_tokenizer_chat_template(const moe8_tokenizer *tok,
                                         const moe8_chat_template **tmpl, moe8_error *err);

/* moe8_chat_template_render with the tokenizer's own template. The text
 * holds the template's special tokens (BOS too, when it writes one), so
 * tokenize it as it is, without adding BOS. */
moe8_status moe8_chat_apply(const moe8_tokenizer *tok, const moe8_chat_message *msgs,
                            size_t n_msgs, int add_generation_prompt, const char *kwargs_json,
                            char *out, size_t cap, size_t *n_out, moe8_error *err);

/* moe8_chat_template_render_json with the tokenizer's own template. */
moe8_status moe8_chat_apply_json(const moe8_tokenizer *tok, const char *messages_json,
                                 const char *tools_json, const char *documents_json,
                                 int add_generation_prompt, const char *kwargs_json, char *out,
                                 size_t cap, size_t *n_out, moe8_error *err);

/* An OpenAI chat conversation as a chat template gets it, as vLLM hands it
 * to apply_chat_template: the one normalisation of moe8 (moe8 serve's chat
 * requests and /tokenize, `moe8 tokenize --messages`). messages_json: a
 * JSON array of message objects; tools_json, documents_json: JSON text, or
 * NULL (or "null") when absent. On success *messages_out is the normalized
 * array and *tools_out, *documents_out the tools and documents (NULL when
 * absent: None to the template), JSON text for moe8_chat_template_render_json
 * and moe8_chat_apply_json; malloc'd, free() them. What is made:
 *   - content: a string; null or absent (allowed for assistant messages
 *     only, as OpenAI has it) -> ""; an array of {"type": "text", "text"}
 *     parts -> their texts joined with "\n"; another part type is refused;
 *   - role: system, user, assistant, tool; developer -> system;
 *   - assistant: tool_calls, each {id, function: {arguments, name}, type}
 *     (the openai types' order, as pydantic rebuilds them), arguments
 *     parsed from their JSON string ("" -> {}; an object is taken as it is),
 *     an empty list dropped; reasoning or reasoning_content -> both keys;
 *   - tool: tool_call_id; any role: name;
 *   - other fields are ignored, as vLLM ignores them;
 *   - tools: each {type: "function", function: {name, description (null
 *     when absent), parameters (null when absent), other keys}, other keys},
 *     as pydantic's model_dump writes them;
 *   - documents: an array of objects with string values, as they are.
 * Fails with MOE8_ERR_FORMAT for text that is not JSON (or holds a key
 * twice), MOE8_ERR_INVALID_ARG for a conversation outside the above (the
 * message names the field: "'messages[1].tool_calls[0].function.arguments'
 * ..."), MOE8_ERR_NOMEM; the outputs are then NULL. */
moe8_status moe8_chat_messages_normalize(const char *messages_json, const char *tools_json,
                                         const char *documents_json, char **messages_out,
                                         char **tools_out, char **documents_out, moe8_error *err);

/* Source text of a template moe8 carries for families whose tokenizer files
 * ship none: "mixtral-instruct" (Mixtral-8x7B-Instruct-v0.1's). NULL for
 * any other name. */
const char *moe8_chat_template_builtin(const char *name);

/* Qwen's ChatML, without a template: "<|im_start|>{role}\n{content}<|im_end|>\n"
 * per message; with MOE8_CHAT_ADD_ASSISTANT then "<|im_start|>assistant\n", and
 * with MOE8_CHAT_NO_THINKING also "<think>\n\n</think>\n\n". Content is copied
 * verbatim (special-token text in it will tokenize as special tokens). For
 * conversations without assistant turns this is what Qwen3's template
 * renders; with them it is not (the template writes the last turn's <think>
 * block and drops earlier ones): prefer moe8_chat_apply. Output
 * NUL-terminated in out[0..cap); *n_out and a too-small cap as
 * moe8_detokenize. */
#define MOE8_CHAT_ADD_ASSISTANT 1u
#define MOE8_CHAT_NO_THINKING 2u
moe8_status moe8_chat_format(const moe8_chat_message *msgs, size_t n_msgs, unsigned flags,
                             char *out, size_t cap, size_t *n_out, moe8_error *err);

#ifdef __cplusplus
}
#endif

#endif /* MOE8_H */
