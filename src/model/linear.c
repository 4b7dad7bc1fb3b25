/*
 * linear.c — the dense linear layers of the forward pass (SEMANTICS §5, §7).
 *
 * FLOAT: y = x @ W^T with W[n][k] in its stored dtype (F32/F16/BF16) read in
 * place from the memory map by gemm_f32_wf; nothing is copied. A FLOAT
 * linear's bias (qwen2_moe q/k/v) is converted to fp32 once and added by
 * the caller after the product, y = (x @ W^T) + b in fp32.
 *
 * W8A8 static (ModelSlim attention projections and dense MLPs):
 *     xq = clamp(rintf(x / input_scale + input_offset), -128, 127)   fp32, true division
 *     y  = (float)(xq @ W^T + quant_bias) * deq_scale
 * The int8 weight is packed once into a moe8_qmat. The epilogue is the one
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
 * Tensor parallelism (SEMANTICS §8): a proj may be a block of the checkpoint's
 * weight — rows (column-parallel q/k/v, dense gate/up) or columns
 * (row-parallel o_proj, dense down, whose quant_bias only rank 0 adds).
 * With a model's packed cache (cache.h) the packed weight is a region of the
 * file, read in place (packed stays NULL).
 * Values were checked by moe8_model_load (model.h). Does not: fuse q/k/v into
 * one GEMM, or communicate (forward.c all-reduces the partial sums).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "model/cache.h"
#include "model/linear.h"

moe8_status moe8_proj_init(moe8_proj *p, const moe8_linear *src, int with_bias, moe8_error *err) {
    if (src->n_out <= 0 || src->n_in <= 0 || src->n_out > INT32_MAX / 2 || src->n_in > INT32_MAX / 2)
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "tensor '%s': bad shape", src->weight->name);
    return moe8_proj_init_slice(p, src, 0, (int)src->n_out, 0, (int)src->n_in, with_bias, err);
}

moe8_status moe8_proj_init_slice(moe8_proj *p, const moe8_linear *src, int r0, int r1, int c0,
                                 int c1, int with_bias, moe8_error *err) {
    return moe8_proj_init_cached(p, src, r0, r1, c0, c1, with_bias, NULL, err);
}

moe8_status moe8_proj_init_cached(moe8_proj *p, const moe8_linear *src, int r0, int r1, int c0,
                                  int c1, int with_bias, moe8_pcache *pc, moe8_error *err) {
    const moe8_tensor *w = src->weight;
    const size_t ld = (size_t)src->n_in;
    memset(p, 0, sizeof *p);
    if (r0 < 0 || r1 <= r0 || r1 > src->n_out || c0 < 0 || c1 <= c0 || c1 > src->n_in ||
        src->n_in > INT32_MAX / 2)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "tensor '%s': block [%d, %d) x [%d, %d) "
                         "not inside [%lld][%lld]", w->name, r0, r1, c0, c1,
                         (long long)src->n_out, (long long)src->n_in);
    p->n = r1 - r0;
    p->k = c1 - c0;
    if (src->quant == MOE8_QUANT_FLOAT) {
        p->type = MOE8_QUANT_FLOAT;
        p->w = (const char *)w->data + ((size_t)r0 * ld + (size_t)c0) * moe8_dtype_size(w->dtype);
        p->wdt = w->dtype;
        p->ldw = (int)ld;
        if (!src->bias) return MOE8_OK;
        /* a bias belongs to whole rows: column-parallel slices only */
        MOE8_ASSERT(c0 == 0 && c1 == src->n_in);
        if (!(p->fbias = malloc((size_t)p->n * sizeof(float))))
            return moe8_fail(err, MOE8_ERR_NOMEM, -1, "tensor '%s': cannot allocate its bias",
                             w->name);
        for (int j = 0; j < p->n; j++) p->fbias[j] = moe8_tensor_f32_at(src->bias, r0 + j);
        return MOE8_OK;
    }
    if ((src->quant != MOE8_QUANT_W8A8 && src->quant != MOE8_QUANT_W8A8_DYNAMIC) ||
        w->dtype != MOE8_DT_I8)
        return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1, "tensor '%s': a linear layer must be "
                         "FLOAT, W8A8 or W8A8_DYNAMIC, not %s", w->name,
                         moe8_quant_type_name(src->quant));
    p->type = src->quant;
    if (p->type == MOE8_QUANT_W8A8) {
        p->in_scale = src->in_scale;
        p->in_offset = (float)src->in_offset;
    } else {
        with_bias = src->nonzero_offset; /* the weight offsets take the bias's place */
    }
    p->deq = malloc((size_t)p->n * sizeof(float));
    p->bias = with_bias ? malloc((size_t)p->n * sizeof(int32_t)) : NULL;
    const moe8_qlayout *ql = moe8_kernels_get()->qlayout; /* packed once, for the table in use */
    const int8_t *mapped = moe8_pcache_take(pc, ql->bytes(p->n, p->k));
    if (!mapped) p->packed = moe8_alloc_aligned(ql->bytes(p->n, p->k));
    if (!p->deq || (with_bias && !p->bias) || (!mapped && !p->packed)) {
        moe8_proj_free(p);
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "tensor '%s': cannot allocate packed weight",
                         w->name);
    }
    if (p->type == MOE8_QUANT_W8A8_DYNAMIC) {
        for (int j = 0; j < p->n; j++) {
            p->deq[j] = moe8_tensor_f32_at(src->weight_scale, r0 + j);
            if (with_bias) p->bias[j] = (int32_t)moe8_tensor_f32_at(src->weight_offset, r0 + j);
        }
    } else {
        for (int j = 0; j < p->n; j++) p->deq[j] = moe8_deq_scale_at(src->deq_scale, r0 + j);
        if (with_bias)
            memcpy(p->bias, (const int32_t *)src->quant_bias->data + r0,
                   (size_t)p->n * sizeof(int32_t));
    }
    if (!mapped) {
        ql->pack(p->packed, (const int8_t *)w->data + (size_t)r0 * ld + (size_t)c0, p->n, p->k,
                 (int)ld);
        moe8_pcache_put(pc, p->packed, ql->bytes(p->n, p->k));
    }
    moe8_qmat_init(&p->q, ql, mapped ? mapped : p->packed, p->n, p->k, p->deq, p->bias);
    return MOE8_OK;
}

moe8_status moe8_proj_own_float(moe8_proj *p, const moe8_st *st, const moe8_tensor *t,
                                moe8_error *err) {
    const size_t es = moe8_dtype_size(p->wdt), row = (size_t)p->k * es;
    const size_t slice = (16u << 20) / row + 1; /* rows per copied-then-released slice */
    unsigned char *copy;
    if (p->type != MOE8_QUANT_FLOAT) return MOE8_OK;
    if (!(copy = moe8_alloc_aligned((size_t)p->n * row)))
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "cannot allocate %zu bytes for a float weight",
                         (size_t)p->n * row);
    for (size_t j0 = 0; j0 < (size_t)p->n; j0 += slice) {
        const size_t j1 = j0 + slice < (size_t)p->n ? j0 + slice : (size_t)p->n;
        const unsigned char *src = (const unsigned char *)p->w + j0 * p->ldw * es;
        for (size_t j = j0; j < j1; j++)
            memcpy(copy + j * row, (const unsigned char *)p->w + j * p->ldw * es, row);
        if (st && t && p->ldw == p->k) /* whole rows: the copied bytes are contiguous */
            moe8_st_release_range(st, t, (size_t)(src - (const unsigned char *)t->data),
                                  (j1 - j0) * row);
    }
    p->w = copy;
    p->ldw = p->k;
    p->packed = (int8_t *)copy;
    return MOE8_OK;
}

void moe8_proj_add_bias(const moe8_proj *p, float *y, int ldy, int T) {
    if (!p->fbias) return;
    for (int t = 0; t < T; t++)
        for (int j = 0; j < p->n; j++) y[(size_t)t * ldy + j] += p->fbias[j];
}

void moe8_proj_free(moe8_proj *p) {
    if (!p) return;
    free(p->fbias);
    free(p->deq);
    free(p->bias);
    moe8_free_aligned(p->packed);
    memset(p, 0, sizeof *p);
}

size_t moe8_proj_owned_bytes(const moe8_proj *p) {
    if (p->type == MOE8_QUANT_FLOAT)
        return p->packed ? (size_t)p->n * (size_t)p->k * moe8_dtype_size(p->wdt) : 0;
    return (p->packed ? p->q.layout->bytes(p->n, p->k) : 0) + /* 0: in the cache's mapping */
           (size_t)p->n * (sizeof(float) + (p->bias ? 4 : 0));
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

void moe8_proj_apply(const moe8_proj *p, const moe8_kernels *kt, float *y, int ldy,
                     const float *x, int ldx, const int8_t *xq, int ldq, const float *sx,
                     const int32_t *xsum, int T, int n_threads) {
    float *const ys[1] = {y};
    const int ldys[1] = {ldy};
    moe8_proj_apply_group(&p, ys, ldys, 1, kt, x, ldx, xq, ldq, sx, xsum, T, n_threads);
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
        else
            kt->gemm_q8_f32(y[i], ldy[i], xq, ldq, sx, xsum, &q->q, T, n0, n1);
    }
}

/* The panels of all n projections, numbered one after another, are cut into
 * n_chunks contiguous runs, one per thread: every thread streams its run
 * across projection boundaries with no barrier between them (at decode the
 * q, k and v weights are one stream per thread, as the experts' are). */
void moe8_proj_apply_group(const moe8_proj *const *p, float *const *y, const int *ldy, int n,
                           const moe8_kernels *kt, const float *x, int ldx, const int8_t *xq,
                           int ldq, const float *sx, const int32_t *xsum, int T, int n_threads) {
    int64_t n_blocks = 0;
    for (int i = 0; i < n; i++) n_blocks += moe8_round_up(p[i]->n, panel_width(p[i])) / panel_width(p[i]);
    int n_chunks = n_threads < n_blocks ? n_threads : (int)n_blocks;
    if (n_chunks < 1) n_chunks = 1;
    if (n_chunks == 1) { /* inline: an `if (0)` parallel region still allocates a team */
        group_chunk(p, y, ldy, n, kt, x, ldx, xq, ldq, sx, xsum, T, 0, n_blocks);
        return;
    }
#pragma omp parallel for schedule(static, 1) num_threads(n_chunks)
    for (int c = 0; c < n_chunks; c++)
        group_chunk(p, y, ldy, n, kt, x, ldx, xq, ldq, sx, xsum, T, n_blocks * c / n_chunks,
                    n_blocks * (c + 1) / n_chunks);
}
