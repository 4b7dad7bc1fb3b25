/*
 * linear.h — internal (model/): FLOAT, W8A8-static and W8A8_DYNAMIC linear
 * layers made ready to run (moe8_proj; linear.c; SEMANTICS §4, §5).
 */
#ifndef MOE8_LINEAR_H
#define MOE8_LINEAR_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"
#include "model/model.h"
#include "core/public.h"

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

#endif
