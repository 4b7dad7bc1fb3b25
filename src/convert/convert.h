/*
 * convert.h — internal: the pieces of the model tools (moe8_make_model,
 * moe8_quantize) of moe8.h's "Model tools" section.
 *
 *   folder.c    output folders (temp folder + rename, overwrite and
 *               self-overwrite checks), file copies, the sharded writer
 *   synth.c     synthetic checkpoints of every family (moe8_make_model)
 *   calib.c     activation ranges of the float model over a calibration text
 *   quantize.c  the ModelSlim W8A8 / W8A8_DYNAMIC writer (moe8_quantize)
 */
#ifndef MOE8_QUANT_H
#define MOE8_QUANT_H

#include <stdint.h>

#include "arch/arch.h"
#include "core/public.h"

/* ======================================================================== */
/* folder.c: output folders                                                  */
/* ======================================================================== */

/* An output folder being built: everything is written into `tmp` (a sibling
 * of the destination, same file system) and renamed over `final` by
 * moe8_outdir_commit. */
typedef struct {
    char final[4096];   /* canonical destination path (parent resolved) */
    char tmp[4096];     /* "<parent>/.<name>.tmp.<pid>", created by begin */
    int replace;        /* final exists and is non-empty (force given) */
} moe8_outdir;

/* Check `out_dir` and create the temporary folder. Fails when out_dir's
 * parent does not exist, when out_dir exists and is not a folder, when it is
 * a non-empty folder and !force, or when it equals, contains or lies inside
 * one of the `protect[n_protect]` folders (existing inputs: the input model,
 * the tokenizer source), which are never written or removed. Once the checks
 * pass, removes the temporary folders of out_dir left by killed runs (their
 * pid no longer exists), logging each at MOE8_LOG_WARN. */
moe8_status moe8_outdir_begin(moe8_outdir *o, const char *out_dir, int force,
                              const char *const *protect, int n_protect, moe8_error *err);
/* Move tmp into place (removing the old folder when replacing). */
moe8_status moe8_outdir_commit(moe8_outdir *o, moe8_error *err);
/* Remove the temporary folder and what was written into it. */
void moe8_outdir_abort(moe8_outdir *o);

/* Copy src_dir/name to dst_dir/name byte for byte. A missing source is an
 * error (MOE8_ERR_NOT_FOUND, naming it) unless `optional`. */
moe8_status moe8_copy_file(const char *src_dir, const char *dst_dir, const char *name,
                           int optional, moe8_error *err);
/* Write `text` to dir/name. */
moe8_status moe8_write_text(const char *dir, const char *name, const char *text, moe8_error *err);

/* ======================================================================== */
/* folder.c: sharded safetensors output                                      */
/* ======================================================================== */

/* Plan every tensor first (in write order, grouped: a group never straddles
 * two files), then write them in that order; files are opened and finished
 * as the writes cross them. One file is "model.safetensors"; several are
 * "model-0000i-of-0000n.safetensors" plus model.safetensors.index.json. */
typedef struct moe8_shards moe8_shards;

/* `max_bytes` caps the tensor bytes of one file (a group bigger than the cap
 * gets a file of its own). */
moe8_status moe8_shards_new(const char *dir, uint64_t max_bytes, moe8_shards **out,
                            moe8_error *err);
void moe8_shards_free(moe8_shards *s);
/* Start a group of `group_bytes` tensor bytes (opens a new file when it does
 * not fit the current one). */
void moe8_shards_group(moe8_shards *s, uint64_t group_bytes);
moe8_status moe8_shards_plan(moe8_shards *s, const char *name, moe8_dtype dt, int n_dims,
                             const int64_t *shape, moe8_error *err);
/* Write the next planned tensor, which must be `name`. */
moe8_status moe8_shards_write(moe8_shards *s, const char *name, const void *data, size_t n_bytes,
                              moe8_error *err);
/* Finish the last file and write the index when there are several. */
moe8_status moe8_shards_finish(moe8_shards *s, moe8_error *err);
int moe8_shards_count(const moe8_shards *s);
uint64_t moe8_shards_total_bytes(const moe8_shards *s);

#define MOE8_SHARD_DEFAULT_BYTES (UINT64_C(4) << 30)

/* ======================================================================== */
/* quantize.c / calib.c                                                      */
/* ======================================================================== */

/* Per-output-channel symmetric int8 of one row w[k]: scale = amax / 127
 * (0 for an all-zero row, codes 0), q = rintf(w / scale) (fp32 division),
 * clamped to [-127, 127]. Returns the scale; *sum gets the sum of the codes.
 * A non-finite w[j] gives -1 (codes and sum 0): the caller refuses the row. */
float moe8_quant_row(int8_t *q, const float *w, int64_t k, int64_t *sum);

/* Observed ranges of the inputs of the W8A8 static linears, per layer. */
enum {
    MOE8_CALIB_QKV = 0,   /* input of q/k/v, MLA's q_proj / q_a_proj / kv_a_proj_with_mqa
                           * (after input_layernorm) */
    MOE8_CALIB_O = 1,     /* input of o_proj (attention output) */
    MOE8_CALIB_MLP = 2,   /* dense layers: input of gate/up */
    MOE8_CALIB_DOWN = 3,  /* dense layers: input of down_proj */
    MOE8_CALIB_QB = 4,    /* MLA: input of q_b_proj (after q_a_layernorm) */
    MOE8_CALIB_SITES = 5
};
typedef struct {
    float min, max;       /* over every finite element seen; 0, 0 if none */
    int64_t n;            /* finite elements seen */
    int64_t n_nonfinite;  /* inf/nan elements seen (moe8_calibrate then fails) */
} moe8_range;

/* Run the (float) model over `text` tokenized with `tok` and fill
 * ranges[n_layer][MOE8_CALIB_SITES]. Token ids >= vocab_size are folded
 * into range (id % vocab_size). MOE8_ERR_FORMAT, naming the layer and site,
 * when an observed activation is not finite or a range is too wide. */
moe8_status moe8_calibrate(moe8_model *m, const moe8_tokenizer *tok, const char *text,
                           size_t len, int n_threads, moe8_range *ranges, int64_t *n_tokens,
                           moe8_error *err);
/* The built-in calibration text (a few hundred tokens of varied English). */
const char *moe8_calib_default_text(void);

/* Asymmetric uint8-range parameters of a range, as ModelSlim's min/max
 * observer: the range is widened to include 0, scale = (max - min) / 255,
 * offset = rint(-128 - min / scale) clamped to [-128, 127]; 1/255 and 0 for
 * a range never seen or all zeros. Returns -1 (with those defaults) when the
 * range saw non-finite values or its scale is not finite, else 0. */
int moe8_range_params(const moe8_range *r, float *scale, int *offset);

/* ======================================================================== */
/* synth_gptoss.c: gpt_oss's stacked experts in a synthetic checkpoint       */
/* ======================================================================== */

/* Which tensor (synth.c's list): MXFP4 blocks / scales of gate_up_proj and
 * down_proj, or their float stacked forms. */
enum {
    MOE8_SYN_GX_GU_BLOCKS = 1,
    MOE8_SYN_GX_GU_SCALES,
    MOE8_SYN_GX_DN_BLOCKS,
    MOE8_SYN_GX_DN_SCALES,
    MOE8_SYN_GX_GU_FLOAT,
    MOE8_SYN_GX_DN_FLOAT,
};
/* Generate and write tensor `name` of kind gx and its shape (E first): each
 * expert's [out][in] matrix drawn N(0, 0.02²) row by row from (seed, the
 * stacked name, expert, row), MXFP4-encoded by blocks of 32; the float forms
 * hold the decoded values (exact in bf16), transposed as transformers stores
 * them ([E][H][2I] gate/up interleaved by rows 2i, 2i + 1; [E][I][H]). */
moe8_status moe8_syn_gptoss(moe8_shards *sh, const char *name, int gx, const int64_t *shape,
                            moe8_dtype dt, uint64_t seed, moe8_error *err);

/* ======================================================================== */
/* quantize_gptoss.c: gpt_oss's stacked experts split for moe8_quantize      */
/* ======================================================================== */

/* The per-expert parts source tensor t of a gpt_oss model splits into (2E
 * for gate_up's blocks, float form and bias; E for down's), -1 for one read
 * with another (MXFP4 scales: written nowhere), 0 for any other tensor. */
int64_t moe8_qz_gptoss_parts(const moe8_arch_desc *a, const moe8_config *c, const moe8_tensor *t);
/* Part j of t as an fp32 tensor *view named `name` (per expert: gate, up or
 * down weight [out][in], or its bias [out]); with buf its values in *buf
 * (malloc'ed: the caller frees it), without only its shape. */
moe8_status moe8_qz_gptoss_part(const moe8_arch_desc *a, const moe8_config *c, const moe8_st *src,
                                const moe8_tensor *t, int64_t j, moe8_tensor *view, float **buf,
                                char *name, size_t cap, moe8_error *err);
/* in_dir's config.json into dir without its quantization_config. */
moe8_status moe8_qz_gptoss_config(const char *in_dir, const char *dir, moe8_error *err);

#endif
