/*
 * linear.c — running the dense linear layers of the forward pass (SEMANTICS
 * §5, §7); making them ready (packing, the packed cache) is load/proj.c.
 *
 * FLOAT: y = x @ W^T with W[n][k] in its stored dtype (F32/F16/BF16) read in
 * place from the memory map by gemm_f32_wf; nothing is copied. A FLOAT
 * linear's bias (qwen2_moe q/k/v) was converted to fp32 once and is added by
 * the caller after the product, y = (x @ W^T) + b in fp32.
 *
 * W8A8 static (ModelSlim attention projections and dense MLPs):
 *     xq = clamp(rintf(x / input_scale + input_offset), -128, 127)   fp32, true division
 *     y  = (float)(xq @ W^T + quant_bias) * deq_scale
 * The int8 weight was packed once into a moe8_qmat. The epilogue is the one
 * gemm_q8_f32 computes, ((float)(acc + O*xsum) * sx) * S, with O =
 * quant_bias, xsum = 1, sx = 1 and S = deq_scale: the bias is added in exact
 * int32, then one fp32 multiply. Activation codes use the whole int8 range
 * (-128 included); the kernels are exact there (int16 pair products).
 * deq_scale comes as int64 holding the float32 bit pattern (fp16 exports) or
 * as float32 (bf16 exports); moe8_deq_scale_at reads either.
 *
 * W8A8_DYNAMIC (the lm_head of `moe8 quantize --lm-head w8a8`, the shared
 * expert of qwen2_moe; SEMANTICS §4):
 * the caller quantizes each input row with the kernels' quant_rows (row
 * scale sx = amax/127, codes +-127, code sum xsum) and the same gemm_q8_f32
 * computes ((float)(acc + O*xsum) * sx) * S with S = weight_scale and
 * O = weight_offset (NULL, costing nothing, when every offset is 0).
 *
 * W4A8_DYNAMIC (`moe8 quantize --linear w4a8`, SEMANTICS §5b): the same with
 * int4 codes in the table's q4layout and its gemm_q4_f32.
 *
 * An int8 weight is read only by a table whose GEMMs read the layout it was
 * packed in (moe8_kernels_reads): another is refused before anything runs,
 * as the MoE layer refuses its experts (moe/moe_layer.c).
 * Does not: fuse q/k/v into one GEMM, or communicate (model/forward.c
 * all-reduces the partial sums of tensor parallelism).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/pool.h"
#include "model/linear.h"

void moe8_proj_add_bias(const moe8_proj *p, float *y, int ldy, int T) {
    if (!p->fbias) return;
    for (int t = 0; t < T; t++)
        for (int j = 0; j < p->n; j++) y[(size_t)t * ldy + j] += p->fbias[j];
}

/* One activation code: clamp(round_half_even(x / scale + offset), -128, 127).
 * Clamping to [-129, 128] first changes no result (those round to values the
 * final clamp maps the same way) and keeps the integer conversions in range;
 * floor is done in integers (v is in range, (int)v truncates toward zero), so
 * the loop vectorizes on any x86-64 and no rounding mode enters. A NaN input
 * becomes -128, as fmaxf makes it. */
static inline int8_t quant_code(float x, float scale, float offset) {
    float v = x / scale + offset; /* true division, rounded to fp32, then the add */
    v = fminf(fmaxf(v, -129.0f), 128.0f);
    int i = (int)v;
    i -= (float)i > v;            /* floor */
    const float d = v - (float)i; /* exact */
    i += (d > 0.5f) | ((d == 0.5f) & (i & 1));
    return (int8_t)(i < -128 ? -128 : i > 127 ? 127 : i);
}

void moe8_proj_quant(int8_t *xq, int ldq, const float *x, int ldx, int T, int k, float scale,
                     float offset) {
    const int k_pad = moe8_round_up(k, MOE8_QK_KALIGN);
    for (int r = 0; r < T; r++) {
        const float *xr = x + (size_t)r * ldx;
        int8_t *qr = xq + (size_t)r * ldq;
        for (int j = 0; j < k; j++) qr[j] = quant_code(xr[j], scale, offset);
        for (int j = k; j < k_pad; j++) qr[j] = 0;
    }
}

int moe8_proj_same_input(const moe8_proj *a, const moe8_proj *b) {
    return a->type == MOE8_QUANT_W8A8 && b->type == MOE8_QUANT_W8A8 && a->k == b->k &&
           a->in_scale == b->in_scale && a->in_offset == b->in_offset;
}

static int reads(const moe8_kernels *kt, const moe8_proj *p) {
    return p->type == MOE8_QUANT_FLOAT || moe8_kernels_reads(kt, p->q.layout);
}

moe8_status moe8_proj_check(const moe8_proj *p, const moe8_kernels *kt, moe8_error *err) {
    if (reads(kt, p)) return MOE8_OK;
    return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "a linear layer [%d][%d] is packed in layout "
                     "%s, which the %s kernels do not read", p->n, p->k, p->q.layout->name,
                     kt->isa);
}

moe8_status moe8_proj_apply(const moe8_proj *p, const moe8_kernels *kt, float *y, int ldy,
                            const float *x, int ldx, const int8_t *xq, int ldq, const float *sx,
                            const int32_t *xsum, int T, int n_threads) {
    float *const ys[1] = {y};
    const int ldys[1] = {ldy};
    return moe8_proj_apply_group(&p, ys, ldys, 1, kt, x, ldx, xq, ldq, sx, xsum, T, n_threads);
}

/* Columns per panel: the packed layout's; 16 for float weights (any width works). */
static int panel_width(const moe8_proj *p) {
    return p->type == MOE8_QUANT_FLOAT ? 16 : p->q.layout->nr;
}

/* Panels [b0, b1) of the group's panels numbered one after another. */
static void group_chunk(const moe8_proj *const *p, float *const *y, const int *ldy, int n,
                        const moe8_kernels *kt, const float *x, int ldx, const int8_t *xq,
                        int ldq, const float *sx, const int32_t *xsum, int T, int64_t b0,
                        int64_t b1) {
    int64_t first = 0; /* number of the current projection's first panel */
    moe8_kernels_thread_init(kt);
    for (int i = 0; i < n && first < b1; i++) {
        const moe8_proj *q = p[i];
        const int nr = panel_width(q);
        const int64_t nb = moe8_round_up(q->n, nr) / nr;
        const int64_t lo = b0 > first ? b0 - first : 0, hi = b1 - first < nb ? b1 - first : nb;
        first += nb;
        if (lo >= hi) continue;
        const int n0 = (int)lo * nr;
        const int n1 = (int)hi * nr < q->n ? (int)hi * nr : q->n;
        if (q->type == MOE8_QUANT_FLOAT)
            kt->gemm_f32_wf(y[i], ldy[i], x, ldx, q->w, q->wdt, q->ldw, T, n0, n1, q->k);
        else if (q->type == MOE8_QUANT_W4A8_DYNAMIC) /* int4 codes (SEMANTICS §5b) */
            kt->gemm_q4_f32(y[i], ldy[i], xq, ldq, sx, xsum, &q->q, T, n0, n1);
        else
            kt->gemm_q8_f32(y[i], ldy[i], xq, ldq, sx, xsum, &q->q, T, n0, n1);
    }
}

typedef struct {
    const moe8_proj *const *p;
    float *const *y;
    const int *ldy;
    int n;
    const moe8_kernels *kt;
    const float *x;
    int ldx;
    const int8_t *xq;
    int ldq;
    const float *sx;
    const int32_t *xsum;
    int T;
    int64_t n_blocks, n_chunks;
} group_job;

static void group_run(void *ctx, int64_t c, int thread) {
    const group_job *g = ctx;
    int64_t b0, b1;
    (void)thread;
    moe8_pool_part(g->n_blocks, c, g->n_chunks, &b0, &b1);
    group_chunk(g->p, g->y, g->ldy, g->n, g->kt, g->x, g->ldx, g->xq, g->ldq, g->sx, g->xsum,
                g->T, b0, b1);
}

/* The panels of all n projections, numbered one after another, are cut into
 * chunks of contiguous runs that the pool's threads claim as they come
 * (core/pool.h): a chunk streams its run across projection boundaries (at
 * decode the q, k and v weights are one job). Decode cuts 8 chunks a
 * thread, so a thread the OS takes away holds up little; a prefill GEMM 2
 * (its activations are read again by every chunk). */
moe8_status moe8_proj_apply_group(const moe8_proj *const *p, float *const *y, const int *ldy,
                                  int n, const moe8_kernels *kt, const float *x, int ldx,
                                  const int8_t *xq, int ldq, const float *sx, const int32_t *xsum,
                                  int T, int n_threads) {
    int64_t n_blocks = 0;
    for (int i = 0; i < n; i++)
        if (!reads(kt, p[i])) return MOE8_ERR_INVALID_ARG; /* computes nothing */
    for (int i = 0; i < n; i++) n_blocks += moe8_round_up(p[i]->n, panel_width(p[i])) / panel_width(p[i]);
    group_job g = {p, y, ldy, n, kt, x, ldx, xq, ldq, sx, xsum, T, n_blocks, 0};
    g.n_chunks = moe8_pool_chunks(n_blocks, n_threads, T <= 16 ? 8 : 2);
    moe8_pool_run(n_threads, g.n_chunks, group_run, &g);
    return MOE8_OK;
}
