/*
 * forward.h — internal: the pieces of the forward pass of every family
 * (SEMANTICS §5, §7), the prepared weights they read and the context they run in.
 *
 *   linear.c     FLOAT and W8A8-static linear layers (moe8_proj)
 *   attention.c  RMSNorm, NEOX RoPE, KV writes, causal GQA flash attention
 *   forward.c    prepared weights (moe8_weights) and the per-layer loop
 *   context.c    contexts (KV cache, scratch), batches, moe8_generate
 *
 * Shapes are [rows][cols], outermost first; T is the number of tokens of one
 * forward call, H the hidden size, D the head dim.
 */
#ifndef MOE8_FORWARD_H
#define MOE8_FORWARD_H

#include <stdint.h>

#include "kernels/kernels.h"
#include "model/model.h"
#include "moe8.h"

/* ======================================================================== */
/* linear.c                                                                  */
/* ======================================================================== */

/* A linear layer of model.h made ready to run: y[T][n] = x[T][k] @ W^T with W
 * FLOAT (read in place), W8A8 static or W8A8_DYNAMIC (packed here). */
typedef struct {
    moe8_quant_type type;   /* MOE8_QUANT_FLOAT, MOE8_QUANT_W8A8 or MOE8_QUANT_W8A8_DYNAMIC */
    int n, k;               /* W[n][k] */
    const void *w;          /* FLOAT: [n][ldw] F32/F16/BF16 inside the memory map */
    int ldw;                /* FLOAT: row stride of w (elements) */
    moe8_dtype wdt;
    moe8_qmat q;            /* int8: packed weight; q.offset = bias, q.scale = deq */
    float in_scale;         /* W8A8: > 0, finite */
    float in_offset;        /* W8A8: integer in [-128, 127] */
    int32_t *bias;          /* [n] (owned): W8A8 quant_bias, NULL when not added (TP rank
                             * != 0); W8A8_DYNAMIC weight_offset, NULL when all 0 */
    float *fbias;           /* [n] (owned): FLOAT linear bias (qwen2_moe q/k/v), added
                             * after the product by the caller (moe8_proj_add_bias); else NULL */
    float *deq;             /* [n] (owned): W8A8 deq_scale, W8A8_DYNAMIC weight_scale, fp32 */
    int8_t *packed;         /* owned storage behind q.data (int8) or w (a FLOAT copy);
                             * NULL when q.data is in the packed cache's mapping */
} moe8_proj;

/* Make `src` (checked by moe8_model_load) ready: FLOAT keeps a pointer, W8A8
 * packs the weight and decodes deq_scale / quant_bias (`with_bias` 0 drops
 * the bias, for row-parallel layers off rank 0), W8A8_DYNAMIC packs it and
 * decodes weight_scale / weight_offset (`with_bias` unused). */
moe8_status moe8_proj_init(moe8_proj *p, const moe8_linear *src, int with_bias, moe8_error *err);
/* The same for the block rows [r0, r1) x columns [c0, c1) of src (SEMANTICS §8:
 * column-parallel layers take rows, row-parallel ones columns); FLOAT reads
 * the block in place with a row stride, W8A8 packs it. */
moe8_status moe8_proj_init_slice(moe8_proj *p, const moe8_linear *src, int r0, int r1, int c0,
                                 int c1, int with_bias, moe8_error *err);
/* The same, the packed weight taken from (or handed to) a model's packed
 * cache (cache.h; NULL: none). */
struct moe8_pcache;
moe8_status moe8_proj_init_cached(moe8_proj *p, const moe8_linear *src, int r0, int r1, int c0,
                                  int c1, int with_bias, struct moe8_pcache *pc, moe8_error *err);
void moe8_proj_free(moe8_proj *p);
/* y[t][j] += p->fbias[j] for T rows of stride ldy (no-op without a bias). */
void moe8_proj_add_bias(const moe8_proj *p, float *y, int ldy, int T);
size_t moe8_proj_owned_bytes(const moe8_proj *p);
/* A FLOAT proj: copy its block of the weight out of the memory map into
 * memory it owns (same dtype, rows packed). Streaming file-backed pages is
 * slower than anonymous memory (measured 19 vs 24-26 GB/s for the bf16
 * lm_head at decode on this project's test machine). With st and t (the
 * tensor p reads), the mapped pages of each 16 MB slice are released as soon
 * as it is copied, so the copy never holds twice the weight resident.
 * No-op for the int8 types. */
moe8_status moe8_proj_own_float(moe8_proj *p, const moe8_st *st, const moe8_tensor *t,
                                moe8_error *err);

/* Activation codes of a W8A8 static linear (SEMANTICS §5): xq[T][ldq] int8 with
 * ldq >= round_up(k, KALIGN), tail zeroed. */
void moe8_proj_quant(int8_t *xq, int ldq, const float *x, int ldx, int T, int k, float scale,
                     float offset);
/* 1 when two W8A8 linears quantize their input identically. */
int moe8_proj_same_input(const moe8_proj *a, const moe8_proj *b);

/* y[T][n] (stride ldy) = p(x[T][k]). FLOAT reads x. The int8 types read the
 * codes xq (stride ldq) with the row scales sx[T] and code sums xsum[T]:
 * W8A8 codes from moe8_proj_quant with sx = 1.0f, xsum = 1 (the bias enters
 * as offset x 1); W8A8_DYNAMIC codes, sx and xsum from the kernels'
 * quant_rows. Columns are split over n_threads in whole panels of the packed layout, so
 * the result does not depend on the thread count. */
void moe8_proj_apply(const moe8_proj *p, const moe8_kernels *kt, float *y, int ldy,
                     const float *x, int ldx, const int8_t *xq, int ldq, const float *sx,
                     const int32_t *xsum, int T, int n_threads);
/* n projections of the same input x / codes xq (same type, same k; for W8A8
 * the same input scale and offset) at once: y[i] (stride ldy[i]) = p[i](x).
 * Their panels are split over the threads as one sequence, so each thread
 * streams its share of all of them in one pass (decode: q, k and v). The
 * results equal n moe8_proj_apply calls bit for bit. */
void moe8_proj_apply_group(const moe8_proj *const *p, float *const *y, const int *ldy, int n,
                           const moe8_kernels *kt, const float *x, int ldx, const int8_t *xq,
                           int ldq, const float *sx, const int32_t *xsum, int T, int n_threads);

/* ======================================================================== */
/* attention.c                                                               */
/* ======================================================================== */

/* y[T][n] = rmsnorm(x[T][n]) * w (y may equal x; sum of squares in double). */
void moe8_rmsnorm_rows(float *y, int ldy, const float *x, int ldx, int T, int n, const float *w,
                       float eps);
/* Eps of MLA's q_a_layernorm / kv_a_layernorm, hard-coded in DeepSeek's modeling code. */
#define MOE8_MLA_NORM_EPS 1e-6f

/* x[T][n_head*D] <- per-head rmsnorm with weight w[D]. */
void moe8_rmsnorm_heads(float *x, int T, int n_head, int D, const float *w, float eps);
/* cs[n_pos][D/2][2]: cos, sin of pos * theta^(-2i/D), computed in double. */
void moe8_rope_table(float *cs, int64_t n_pos, int D, double theta);
/* NEOX rotary embedding of x[n_head][D] with the table row cs[D/2][2] of its
 * position: out[:D/2] = x1 c - x2 s, out[D/2:] = x2 c + x1 s. */
void moe8_rope_neox(float *x, int n_head, int D, const float *cs);
/* The rotary table of a model's config: frequencies theta^(-2i/R) over its
 * rotary width R (head_dim, or qk_rope_head_dim with MLA), blended by YaRN
 * when rope_scaling is set (the ramp between the correction dims of
 * beta_fast / beta_slow, interpolated frequencies / factor outside it), cos
 * and sin times YaRN's mscale(factor, mscale) / mscale(factor,
 * mscale_all_dim); computed in double. cs[n_pos][R/2][2]. */
void moe8_rope_table_cfg(float *cs, int64_t n_pos, const moe8_config *c);
/* Width R of that table. */
int moe8_rope_dim(const moe8_config *c);
/* Softmax scale of attention: 1/sqrt(head_dim), times mscale(factor,
 * mscale_all_dim)^2 with YaRN and a non-zero mscale_all_dim (DeepSeek). */
float moe8_attn_scale(const moe8_config *c);
/* Rotary embedding on pairs (deepseek): x[h*stride + 2i], x[h*stride + 2i+1]
 * of n_head heads rotated by the table row cs[R/2][2]. Equal to Hugging
 * Face's de-interleave + rotate_half up to the order of the outputs, which
 * every dot product it feeds ignores (q_pe and k_pe are permuted alike). */
void moe8_rope_pairs(float *x, int n_head, int stride, int R, const float *cs);
/* Rotary embedding on halves (NEOX, HF's rotate_half; DeepSeek-V3 with
 * rope_interleave false): x[h*stride + i] with x[h*stride + i + R/2]. */
void moe8_rope_halves(float *x, int n_head, int stride, int R, const float *cs);

/* The paged KV cache as the forward sees it (model/kv_pool.h has the pool):
 * data[block][n_layer][2 (k, v)][n_kv][BS][D] of dt (F32, F16 or BF16),
 * BS = MOE8_KV_BLOCK_TOKENS; position p of sequence s is slot p % BS of
 * block table[s][p / BS]. */
typedef struct {
    unsigned char *data;
    size_t block_bytes;      /* bytes per block */
    moe8_dtype dt;
    const int32_t *table;    /* [n_seq][max_blocks] */
    int32_t max_blocks;
} moe8_kv_view;

/* One layer of it, for attention. */
typedef struct {
    int n_head, n_kv, D;
    moe8_dtype dt;
    float scale;             /* softmax scale (1/sqrt(D) unless set) */
    unsigned char *k0;       /* K of this layer in block 0 (V follows at v_off; 0 with MLA:
                              * the latent row is K and its first L values V) */
    size_t block_bytes;
    size_t v_off;            /* n_kv * BS * D elements, in bytes */
    size_t head_bytes;       /* BS * D elements (one kv head's rows of a block), in bytes */
    const int32_t *table;
    int32_t max_blocks;
} moe8_attn_cache;

/* Layer `layer` of the cache for n_kv kv heads of head dim D. */
moe8_attn_cache moe8_attn_cache_layer(const moe8_kv_view *kv, int n_head, int n_kv, int D,
                                      int layer);
/* The same for a cache of `planes` (2: K then V; 1: one row read as both) and
 * a given softmax scale. */
moe8_attn_cache moe8_attn_cache_layer_ex(const moe8_kv_view *kv, int n_head, int n_kv, int D,
                                         int planes, float scale, int layer);

/* Offset (bytes from k0) of the K row of (seq, kv head, pos); its V row is
 * v_off further. */
static inline size_t moe8_kv_row(const moe8_attn_cache *c, int32_t seq, int kvh, int32_t pos) {
    const int32_t blk = c->table[(size_t)seq * c->max_blocks + pos / MOE8_KV_BLOCK_TOKENS];
    return (size_t)blk * c->block_bytes + (size_t)kvh * c->head_bytes +
           (size_t)(pos % MOE8_KV_BLOCK_TOKENS) * (c->head_bytes / MOE8_KV_BLOCK_TOKENS);
}

/* A K or V row into the cache: src[D] fp32 as dt (F16, BF16: rounded to
 * nearest even). */
void moe8_kv_store(void *dst, const float *src, int D, moe8_dtype dt);

/* Scratch of moe8_attention: per thread, for heads of group size G = n_head / n_kv. */
size_t moe8_attention_work_floats(int D, int G);

/* Causal GQA attention: out[T][n_head*D] from q[T][n_head*D]; token t reads
 * positions 0..pos[t] of sequence seq[t] (already in the cache). Tokens
 * are cut into query tiles (consecutive tokens of one sequence, at most 128
 * query rows), and each (tile, kv head) runs the flash-attention kernel
 * (kernels.h) on one thread: the group's query heads share every K/V block
 * read, scale 1/sqrt(D), online softmax over blocks in position order. A
 * row's result depends only on its own query, position and sequence, so
 * neither the thread count nor the other tokens of the batch change it.
 * tiles: [2][T] int32; work: [n_threads][work_floats]. */
void moe8_attention(const moe8_kernels *kt, float *out, const float *q, const moe8_attn_cache *c,
                    const int32_t *seq, const int32_t *pos, int T, int32_t *tiles, float *work,
                    size_t work_floats, int n_threads);

/* ======================================================================== */
/* forward.c                                                                 */
/* ======================================================================== */

/* One decoder layer, ready to run. */
typedef struct {
    float *attn_norm, *ffn_norm;   /* [H] fp32 (owned; tiny) */
    float *q_norm, *k_norm;        /* [D] */
    moe8_proj q, k, v, o;          /* [NH*D][H], [NKV*D][H] x2, [H][NH*D] */
    int is_moe;
    moe8_moe_layer *moe;           /* MoE layers: this rank's part */
    int ws_layer;                  /* MoE layers: first layer of the same shape, whose
                                    * workspace this one uses */
    moe8_proj gate, up, down;      /* dense layers: [F][H] x2, [H][F] (this rank's F slice) */
    int has_shared;                /* MoE layer with a shared expert (qwen2_moe): */
    moe8_proj sh_gate, sh_up, sh_down; /* [S][H] x2, [H][S] (this rank's S slice) */
    moe8_proj sh_score;            /* shared_expert_gate [1][H], FLOAT; n == 0: ungated
                                    * (deepseek's shared experts) */
    /* multi-head latent attention (moe8_weights.mla); q above is q_proj when QL == 0: */
    moe8_proj q_a, q_b, kv_a;      /* [QL][H], [NH*D][QL] (local heads), [C][H] */
    float *q_a_norm, *kv_a_norm;   /* [QL], [L] */
    void *uk;                      /* [NH][L][DN] of uk_dt: kv_b_proj's k_nope rows of each
                                    * local head, transposed (q_nope -> latent) */
    void *uv;                      /* [NH][DV][L] of uk_dt: its v rows (latent -> v) */
    moe8_dtype uk_dt;              /* kv_b_proj's dtype when FLOAT, F32 when W8A8 (dequantized) */
    float *uv_bias;                /* [NH*DV] a W8A8 kv_b_proj's folded bias on v, or NULL */
} moe8_fwd_layer;

/* Everything the forward pass reads, built once per model and shared
 * read-only by its contexts. Under TP/EP (model.h shard) it holds this
 * rank's share: n_head/n_kv are the local heads, F_max the local width, and
 * o_proj, dense down and the MoE output are partial sums all-reduced over
 * `comm` (NULL with one rank: no call at all). */
typedef struct moe8_weights {
    const moe8_model *model;
    struct moe8_comm *comm;        /* NULL: single process */
    int H, n_layer, n_head, n_kv, D, V, F_max; /* F_max: widest dense MLP or shared expert
                                    * (this rank's slice), 0 if none */
    int has_shared;                /* some layer has a shared expert */
    int has_dynamic;               /* some dense-path linear is W8A8_DYNAMIC */
    int E, K;
    float eps;
    /* attention geometry: the cache holds kv_planes x n_kv x C values per position and layer */
    int mla;                       /* multi-head latent attention (deepseek) */
    int kv_planes, C;              /* 2 and D; MLA: 1 and L + R */
    int L, R, DN, DV, QL;          /* MLA widths (DV = D outside MLA) */
    int rope_interleave;           /* MLA: rotary on pairs (2i, 2i+1), else on halves */
    int rope_dim;                  /* rotary width: pairs (2i, 2i+1) with MLA, halves (NEOX) else */
    float attn_scale;              /* softmax scale */
    const void *embed;             /* [V][H] in place */
    moe8_dtype embed_dt;
    moe8_proj lm_head;             /* [V][H] FLOAT in place (embed when tied) or W8A8_DYNAMIC
                                    * packed; under TP rows [v_begin, v_begin + v_count) only */
    int v_chunk;                   /* TP: vocab rows per rank (ceil(V / ranks)); 0: whole vocab */
    int v_begin, v_count;          /* TP: this rank's lm_head rows */
    int n_ranks;                   /* 1 without TP/EP */
    float *final_norm;             /* [H] */
    moe8_fwd_layer *layers;        /* [n_layer] */
    int float_experts;             /* W8A8 experts run dequantized */
    size_t owned_bytes;            /* packed weights and vectors */
    struct moe8_pcache *cache;     /* the packed cache the int8 weights are mapped from (or
                                    * were written to); NULL: none */
} moe8_weights;

moe8_status moe8_weights_build(const moe8_model *m, int float_experts, int n_threads,
                               moe8_weights **out, moe8_error *err);
void moe8_weights_free(moe8_weights *w);

/* Calibration hook (quant/calib.c): sees the input x[n_rows][n_cols] of the
 * linears of layer `layer` at `site` (0 q/k/v or MLA's q_proj / q_a_proj /
 * kv_a_proj_with_mqa, 1 o_proj, 2 dense gate/up, 3 dense down, 4 MLA's
 * q_b_proj). Unset (NULL) in normal use: one test per call site. */
typedef void (*moe8_observe_fn)(void *user, int layer, int site, const float *x, int n_rows,
                                int n_cols);

/* Scratch of one context, for up to n_batch tokens and n_out logits rows. */
typedef struct {
    int n_batch, n_out, ldq;
    float *x, *h, *q, *k, *v, *att, *tmp;  /* [B][H], [B][H], [B][NH*D], [B][NKV*D] x2, [B][NH*D], [B][H] */
    float *mlp;                            /* [B][2F] (dense layers) */
    int8_t *xq;                            /* [B][ldq] W8A8 codes */
    float *ones;                           /* [B] */
    int32_t *ones_i;                       /* [B] */
    float *attn_work;                      /* [n_threads][attn_work_floats] */
    size_t attn_work_floats;               /* moe8_attention_work_floats */
    int32_t *attn_tiles;                   /* [2][B] query tiles */
    moe8_moe_workspace **moe_ws;           /* [n_layer]: set for layers with ws_layer == itself */
    float *logits;                         /* [n_out][V] */
    float *lm_part, *lm_all;               /* TP: [n_out][v_chunk], [ranks][n_out][v_chunk] */
    float *lm_sx;                          /* W8A8_DYNAMIC lm_head: [n_out] row scales */
    int32_t *lm_xsum;                      /*   and [n_out] code sums (codes in xq) */
    float *dyn_sx;                         /* W8A8_DYNAMIC linears (shared expert): [B] row */
    int32_t *dyn_xsum;                     /*   scales and [B] code sums (codes in xq) */
    float *sh_out, *sh_score;              /* shared expert: [B][H] output, [B] gate logit */
    float *qa, *kva, *qc, *attv;           /* MLA: [B][QL], [B][C], [B][NH*C], [B][NH*DV];
                                            * att is then [B][NH*C] */
    void *block;
    moe8_observe_fn observe;               /* NULL unless calibrating */
    void *observe_user;
    long majflt;                           /* the process's major faults at the last forward */
} moe8_fwd_scratch;

/* One forward over T tokens (already validated, their blocks reserved):
 * token[T], seq[T], pos[T]; K/V of every token are written into the cache at
 * (seq, pos) first. Logits of the rows out_idx[n_out] go to s->logits. Never
 * allocates. */
moe8_status moe8_forward(const moe8_weights *w, moe8_fwd_scratch *s, const moe8_kv_view *kv,
                         int64_t n_ctx, const float *rope, const int32_t *token,
                         const int32_t *seq, const int32_t *pos, int T, const int32_t *out_idx,
                         int n_out, int n_threads, moe8_error *err);

/* Set (or clear, fn NULL) the calibration hook of a context (context.c). */
void moe8_context_set_observer(moe8_context *ctx, moe8_observe_fn fn, void *user);

#endif
