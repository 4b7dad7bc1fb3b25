/*
 * proj.h — internal (load/): a linear layer of model.h made ready to run
 * (moe8_proj; proj.c): FLOAT read in place, W8A8 static and W8A8_DYNAMIC
 * packed for a kernel table's layout (SEMANTICS §4, §5, §8). Running one is
 * the forward's (model/linear.h).
 */
#ifndef MOE8_PROJ_H
#define MOE8_PROJ_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"
#include "load/model.h"
#include "core/public.h"

/* A linear layer of model.h made ready to run: y[T][n] = x[T][k] @ W^T with W
 * FLOAT (read in place), W8A8 static or W8A8_DYNAMIC (packed here). */
typedef struct {
    moe8_quant_type type;   /* MOE8_QUANT_FLOAT, W8A8, W8A8_DYNAMIC or W4A8_DYNAMIC (int4
                             * codes in q, layout the table's q4layout) */
    int n, k;               /* W[n][k] */
    const void *w;          /* FLOAT: [n][ldw] F32/F16/BF16 inside the memory map */
    int ldw;                /* FLOAT: row stride of w (elements) */
    moe8_dtype wdt;
    moe8_qmat q;            /* int8: packed weight; q.offset = bias, q.scale = deq;
                             * q.layout: the layout it was packed in (a table reads it
                             * only when moe8_kernels_reads says so) */
    float in_scale;         /* W8A8: > 0, finite */
    float in_offset;        /* W8A8: integer in [-128, 127] */
    int32_t *bias;          /* [n] (owned): W8A8 quant_bias, NULL when not added (TP rank
                             * != 0); W8A8_DYNAMIC weight_offset, NULL when all 0 */
    float *fbias;           /* [n] (owned): FLOAT or W4A8_DYNAMIC linear bias (qwen2_moe q/k/v), added
                             * after the product by the caller (moe8_proj_add_bias); else NULL */
    float *deq;             /* [n] (owned): W8A8 deq_scale, W8A8_DYNAMIC weight_scale, fp32 */
    int8_t *packed;         /* owned storage behind q.data (int8) or w (a FLOAT copy);
                             * NULL when q.data is in the packed cache's mapping */
} moe8_proj;

/* 1 when p quantizes its input per token (SEMANTICS §4): W8A8_DYNAMIC, W4A8_DYNAMIC. */
static inline int moe8_proj_dynamic(const moe8_proj *p) {
    return p->type == MOE8_QUANT_W8A8_DYNAMIC || p->type == MOE8_QUANT_W4A8_DYNAMIC;
}

/* Make `src` (checked by moe8_model_load) ready: FLOAT keeps a pointer, W8A8
 * packs the weight (in the layout of the table in use, moe8_kernels_get) and decodes deq_scale / quant_bias (`with_bias` 0 drops
 * the bias, for row-parallel layers off rank 0), W8A8_DYNAMIC packs it and
 * decodes weight_scale / weight_offset (`with_bias` unused). */
moe8_status moe8_proj_init(moe8_proj *p, const moe8_linear *src, int with_bias, moe8_error *err);
/* The same for the block rows [r0, r1) x columns [c0, c1) of src (SEMANTICS §8:
 * column-parallel layers take rows, row-parallel ones columns); FLOAT reads
 * the block in place with a row stride, W8A8 packs it. */
moe8_status moe8_proj_init_slice(moe8_proj *p, const moe8_linear *src, int r0, int r1, int c0,
                                 int c1, int with_bias, moe8_error *err);
/* The same, packed in layout ql (the prepared weights' table's; NULL: the
 * table in use), the packed weight taken from (or handed to) a model's packed
 * cache (cache.h; NULL: none). */
struct moe8_pcache;
moe8_status moe8_proj_init_cached(moe8_proj *p, const moe8_linear *src, int r0, int r1, int c0,
                                  int c1, int with_bias, const moe8_qlayout *ql,
                                  struct moe8_pcache *pc, moe8_error *err);
/* A FLOAT src (an lm_head: --lm-head int8, SEMANTICS §6d) made a W8A8_DYNAMIC
 * proj of its rows [r0, r1): each row quantized as §4 quantizes an
 * activation row (scale max|w| / 127, codes clamp(rint(w / scale), ±127)),
 * packed in layout ql (NULL: the table in use), on n_threads threads. With a
 * packed cache pc the codes and then the scales are two regions of it (taken,
 * or handed over). A non-finite weight is refused naming the tensor, row and
 * column. */
moe8_status moe8_proj_init_int8(moe8_proj *p, const moe8_linear *src, int r0, int r1,
                                const moe8_qlayout *ql, struct moe8_pcache *pc, int n_threads,
                                moe8_error *err);
void moe8_proj_free(moe8_proj *p);
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

#endif
