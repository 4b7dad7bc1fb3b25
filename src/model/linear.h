/*
 * linear.h — internal (model/): running the FLOAT, W8A8-static and
 * W8A8_DYNAMIC linear layers that load/proj.h made ready (moe8_proj;
 * linear.c; SEMANTICS §4, §5).
 */
#ifndef MOE8_LINEAR_H
#define MOE8_LINEAR_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"
#include "load/proj.h"
#include "core/public.h"

/* y[t][j] += p->fbias[j] for T rows of stride ldy (no-op without a bias). */
void moe8_proj_add_bias(const moe8_proj *p, float *y, int ldy, int T);
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
 * the result does not depend on the thread count. MOE8_ERR_INVALID_ARG, and
 * nothing computed, when kt does not read the layout p was packed in
 * (moe8_proj_check says so in words). */
moe8_status moe8_proj_apply(const moe8_proj *p, const moe8_kernels *kt, float *y, int ldy,
                            const float *x, int ldx, const int8_t *xq, int ldq, const float *sx,
                            const int32_t *xsum, int T, int n_threads);
/* n projections of the same input x / codes xq (same type, same k; for W8A8
 * the same input scale and offset) at once: y[i] (stride ldy[i]) = p[i](x).
 * Their panels are split over the threads as one sequence, so each thread
 * streams its share of all of them in one pass (decode: q, k and v). The
 * results equal n moe8_proj_apply calls bit for bit; refused as it is when
 * kt does not read one of them. */
moe8_status moe8_proj_apply_group(const moe8_proj *const *p, float *const *y, const int *ldy,
                                  int n, const moe8_kernels *kt, const float *x, int ldx,
                                  const int8_t *xq, int ldq, const float *sx, const int32_t *xsum,
                                  int T, int n_threads);
/* MOE8_OK when kt's GEMMs read the layout p was packed in (always for FLOAT,
 * and for the reference table); else MOE8_ERR_INVALID_ARG naming both. */
moe8_status moe8_proj_check(const moe8_proj *p, const moe8_kernels *kt, moe8_error *err);

#endif
