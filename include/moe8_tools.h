/*
 * moe8_tools.h — model tools: synthetic model folders and the W8A8 quantizer (moe8 make-model,
 * moe8 quantize).
 *
 * Stable: append-only; the presets and outputs follow docs/MODELS.md.
 */
#ifndef MOE8_API_TOOLS_H
#define MOE8_API_TOOLS_H

#include "moe8.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================== */
/* Model tools: synthetic models, quantization (moe8 make-model / quantize)  */
/* ======================================================================== */

/* Progress of a long call: `stage` ("write", "calibrate", "quantize"), `done`
 * of `total` units (bytes of tensor data, or tokens). Return non-zero to stop:
 * the call then fails with MOE8_ERR_CANCELLED and leaves nothing behind. */
typedef int (*moe8_progress_fn)(void *user, const char *stage, uint64_t done, uint64_t total);

/* Both tools write into a temporary sibling folder ".<name>.tmp.<pid>" and
 * rename it into place, so the output folder never holds a partial model. An
 * existing non-empty output folder is refused unless `force` (then it is
 * replaced). A run killed before it could clean up leaves its temporary
 * folder; the next run into the same output removes those whose process no
 * longer exists (never one of a live process) and logs each removal at
 * MOE8_LOG_WARN (moe8_set_log). */

/* Synthetic model presets (per family: docs/MODELS.md). Append-only. */
typedef enum {
    MOE8_PRESET_TINY = 0,       /* every family. qwen3_moe: 4 layers (layer 0 dense via
                                 * mlp_only_layers), H 256, 8/2 heads of 32, E 16, top-4, I 128,
                                 * dense 512; qwen2_moe: the same plus q/k/v biases and a shared
                                 * expert of 256, I 64; mixtral: 4 MoE layers, H 256, 8/2 heads,
                                 * E 8, top-2, I 256, vocab 32000 */
    MOE8_PRESET_A3B_SLICE = 1,  /* qwen3_moe only: Qwen3-30B-A3B shapes (SEMANTICS §7), 4 of
                                 * its 48 layers */
    MOE8_PRESET_SLICE = 2,      /* the shapes of the family's reference model, a few layers
                                 * (docs/MODELS.md): qwen3_moe Qwen3-30B-A3B (= A3B_SLICE),
                                 * mixtral Mixtral-8x7B, deepseek_v2 DeepSeek-V2-Lite,
                                 * deepseek_v3 Moonlight-16B-A3B */
} moe8_preset;

/* Initialise with moe8_make_model_params_default(); fields are only appended. */
typedef struct {
    moe8_preset preset;
    int64_t n_layers;           /* 0 = the preset's */
    uint64_t seed;              /* weights are a pure function of (seed, tensor name) */
    moe8_dtype dtype;           /* float tensors: MOE8_DT_BF16 (default) or MOE8_DT_F32 */
    const char *tokenizer_dir;  /* required: tokenizer.json (+ tokenizer_config.json) copied */
    int64_t vocab_size;         /* 0 = the family's (151936 for the Qwen families); smaller
                                 * only for fast tests (bos/eos ids then fold into range) */
    uint64_t shard_bytes;       /* most tensor bytes per file; 0 = 4 GiB */
    int force;                  /* replace a non-empty output folder */
    moe8_progress_fn progress;  /* may be NULL */
    void *progress_user;
    moe8_arch arch;             /* the family (default MOE8_ARCH_QWEN3_MOE) */
    int float_experts;          /* gpt_oss: stacked experts in `dtype` (gate_up_proj [E][H][2I],
                                 * the values MXFP4 would give) instead of MXFP4 as released */
} moe8_make_model_params;
moe8_make_model_params moe8_make_model_params_default(void);

/* The config.json a preset gives (what moe8_make_model writes), without
 * writing anything. */
moe8_status moe8_make_model_config(const moe8_make_model_params *p, moe8_config *out,
                                   moe8_error *err);

/* Write a synthetic model of family p->arch in Hugging Face layout to
 * `out_dir`: config.json and generation_config.json as the family writes
 * them, model.safetensors (or shards + index), the tokenizer files. Weights
 * are deterministic in the seed: linears N(0, 0.02²), norms 1 + N(0, 0.05²),
 * router rows scaled so routing is far from uniform, q/k/v biases N(0, 0.1²)
 * where the family has them, untied lm_head. Streams tensor by tensor (peak
 * memory: the largest tensor). */
moe8_status moe8_make_model(const moe8_make_model_params *p, const char *out_dir,
                            moe8_error *err);

/* Initialise with moe8_quantize_params_default(); fields are only appended. */
typedef struct {
    int linear_float;           /* keep attention (and dense MLP) linears FLOAT */
    int deq_scale_f32;          /* W8A8 deq_scale as F32 (default: I64 holding the fp32 bits) */
    const char *calib_text;     /* calibration text (UTF-8); NULL = a built-in English text */
    size_t calib_len;           /* bytes of calib_text */
    uint64_t shard_bytes;       /* most tensor bytes per file; 0 = 4 GiB */
    int force;                  /* replace a non-empty output folder */
    int n_threads;              /* calibration threads; 0 = OpenMP default; at most 4096 */
    moe8_progress_fn progress;  /* may be NULL */
    void *progress_user;
    int lm_head_w8a8;           /* also write lm_head.weight as W8A8_DYNAMIC (default FLOAT, as
                                 * ModelSlim); refused for tie_word_embeddings models */
    int down_proj_float;        /* keep every expert's down_proj (routed and shared) FLOAT
                                 * beside W8A8_DYNAMIC gate/up (msModelSlim's DeepSeek-V2-Lite
                                 * default) */
    int experts_w4a8;           /* routed experts W4A8_DYNAMIC in msModelSlim's layout
                                 * (SEMANTICS §4b): per-row symmetric int4 with a clip search;
                                 * shared experts stay W8A8_DYNAMIC; not with down_proj_float */
    int linear_w4a8;            /* attention projections and dense MLPs W4A8_DYNAMIC (moe8's
                                 * own option, SEMANTICS §5b): int4 per channel as the experts,
                                 * activations quantized per token at run time; no calibration.
                                 * kv_b_proj (MLA) stays FLOAT; not with linear_float */
} moe8_quantize_params;
moe8_quantize_params moe8_quantize_params_default(void);

/* What moe8_quantize did. */
typedef struct {
    int64_t n_tensors_in, n_tensors_out;
    uint64_t bytes_in, bytes_out;   /* tensor data */
    int n_files;                    /* safetensors files written */
    int64_t n_calib_tokens;         /* 0 with linear_float */
} moe8_quantize_stats;

/* Write a ModelSlim-layout W8A8 copy of the float model `in_dir` (any
 * supported family; tensor names from its descriptor) to `out_dir` (which
 * must not be, contain or lie inside in_dir; in_dir is only read):
 *   experts      W8A8_DYNAMIC: weight I8 [N][K] = rintf(W / (amax_row / 127)),
 *   (routed and  weight_scale F32 [N][1] = amax_row / 127, weight_offset F32 [N][1] = 0
 *   shared)
 *   q/k/v/o and  W8A8 static (SEMANTICS §5): weight, weight_scale, weight_offset as
 *   dense MLPs   above; input_scale F32 [1] and input_offset I8 [1] from the
 *                min/max of the layer's input over the calibration text (q/k/v
 *                share one; scale = (max - min) / 255, offset = rint(-128 -
 *                min / scale)); deq_scale [N] = fp32(input_scale * weight_scale)
 *                (I64 bits or F32); quant_bias I32 [N] = -input_offset * sum_k Wq,
 *                plus round(bias / deq_scale) for a q/k/v bias (qwen2_moe; the
 *                float .bias is then not written: msModelSlim's form)
 *   lm_head      FLOAT (as ModelSlim), or with lm_head_w8a8 W8A8_DYNAMIC like the
 *                experts (MOE8_ERR_UNSUPPORTED when tie_word_embeddings: the shared
 *                embedding must stay float)
 *   the rest     FLOAT, bytes and dtype unchanged (router, embeddings, norms)
 * plus quant_model_description.json (every tensor written, with its type;
 * model_quant_type "W8A8_DYNAMIC", version "1.0.0") and copies of config.json,
 * generation_config.json and the tokenizer files. The input is loaded (and so
 * checked) by moe8_model_load first; an already quantized input is refused.
 * Streams tensor by tensor. `p` and `stats` may be NULL. */
moe8_status moe8_quantize(const char *in_dir, const char *out_dir, const moe8_quantize_params *p,
                          moe8_quantize_stats *stats, moe8_error *err);

/* ======================================================================== */
/* The prompt cache's disk tier as files (moe8 prompt-cache ls|verify|clear) */
/* ======================================================================== */

/* One run file (consecutive blocks of a prefix) of a prompt-cache directory
 * (moe8_context_params.prompt_cache_dir). */
typedef struct {
    const char *name;        /* file name in the directory */
    uint64_t bytes;
    int64_t mtime;           /* its last use, seconds since the epoch */
    int32_t n_tokens;        /* the run ends at this position (0: unreadable header) */
    const char *kv_type;     /* "f32", "f16", "bf16" or "?" */
    int32_t tp_rank, tp_size;
    uint64_t fingerprint;    /* the model, kernel table and settings, folded */
    const char *bad;         /* NULL, or why the file is not a valid run (header checks;
                              * with verify also its checksums and keys) */
    int32_t n_blocks;        /* blocks it holds, the last ending at n_tokens */
} moe8_prompt_cache_file;
typedef void (*moe8_prompt_cache_fn)(void *user, const moe8_prompt_cache_file *f);

/* Call fn for each run file of dir (names in byte order); verify: read each
 * whole and check its checksum. *n_bad (may be NULL): files found invalid. */
moe8_status moe8_prompt_cache_list(const char *dir, int verify, moe8_prompt_cache_fn fn,
                                   void *user, uint64_t *n_bad, moe8_error *err);
/* Remove every run file (of any version) and temporary of dir (under its lock); counts may be NULL. */
moe8_status moe8_prompt_cache_clear(const char *dir, uint64_t *n_files, uint64_t *n_bytes,
                                    moe8_error *err);

#ifdef __cplusplus
}
#endif

#endif /* MOE8_API_TOOLS_H */
