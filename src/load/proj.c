/*
 * proj.c — a linear layer of a loaded model made ready to run (proj.h;
 * SEMANTICS §4, §5, §5b, §8): FLOAT keeps a pointer into the memory map (or, with
 * moe8_proj_own_float, a copy it owns) and converts a q/k/v bias to fp32;
 * W8A8 static and W8A8_DYNAMIC pack the int8 weight once into a moe8_qmat of
 * the layout of the kernel table that will run it, and decode deq_scale /
 * quant_bias or weight_scale / weight_offset to fp32 / int32; W4A8_DYNAMIC
 * (quantize --linear w4a8) unpacks its int4 pairs and packs them in the
 * table's int4 layout (q4k8), its scales as W8A8_DYNAMIC's; a float lm_head
 * may be quantized to int8 here (moe8_proj_init_int8, --lm-head int8). A proj may be a
 * block of the checkpoint's weight — rows (column-parallel q/k/v, dense
 * gate/up) or columns (row-parallel o_proj, dense down, whose quant_bias only
 * rank 0 adds). With a model's packed cache (cache.h) the packed weight is a
 * region of the file, read in place (packed stays NULL), or is handed to it.
 *
 * Values were checked by moe8_model_load (model.h). Does not: run a linear
 * (model/linear.c) or quantize activations.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "load/cache.h"
#include "load/proj.h"

moe8_status moe8_proj_init(moe8_proj *p, const moe8_linear *src, int with_bias, moe8_error *err) {
    if (src->n_out <= 0 || src->n_in <= 0 || src->n_out > INT32_MAX / 2 || src->n_in > INT32_MAX / 2)
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "tensor '%s': bad shape", src->weight->name);
    return moe8_proj_init_slice(p, src, 0, (int)src->n_out, 0, (int)src->n_in, with_bias, err);
}

moe8_status moe8_proj_init_slice(moe8_proj *p, const moe8_linear *src, int r0, int r1, int c0,
                                 int c1, int with_bias, moe8_error *err) {
    return moe8_proj_init_cached(p, src, r0, r1, c0, c1, with_bias, NULL, NULL, err);
}

/* codes[n][k] = W[r0 + i][c0 + j] of a W4A8_DYNAMIC weight [N/2][K]
 * (SEMANTICS §4b: channel 2i in the low nibble of row i, 2i+1 in the high);
 * a slice may start at an odd channel. */
static void unpack_w4(int8_t *codes, const moe8_tensor *w, int r0, int n, int c0, int k) {
    const uint8_t *b = (const uint8_t *)w->data;
    const size_t K = (size_t)w->shape[1];
    for (int i = 0; i < n; i++) {
        const int ch = r0 + i;
        const uint8_t *row = b + (size_t)(ch / 2) * K + (size_t)c0;
        for (int j = 0; j < k; j++) {
            const int v = ch % 2 ? row[j] >> 4 : row[j] & 15;
            codes[(size_t)i * k + j] = (int8_t)(v >= 8 ? v - 16 : v);
        }
    }
}

moe8_status moe8_proj_init_cached(moe8_proj *p, const moe8_linear *src, int r0, int r1, int c0,
                                  int c1, int with_bias, const moe8_qlayout *ql, moe8_pcache *pc,
                                  moe8_error *err) {
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
        /* a bias belongs to whole rows: a row-parallel slice (o_proj under TP) adds it
         * on one rank only (with_bias) */
        if (!src->bias || !with_bias) return MOE8_OK;
        if (!(p->fbias = malloc((size_t)p->n * sizeof(float))))
            return moe8_fail(err, MOE8_ERR_NOMEM, -1, "tensor '%s': cannot allocate its bias",
                             w->name);
        for (int j = 0; j < p->n; j++) p->fbias[j] = moe8_tensor_f32_at(src->bias, r0 + j);
        return MOE8_OK;
    }
    if ((src->quant != MOE8_QUANT_W8A8 && src->quant != MOE8_QUANT_W8A8_DYNAMIC &&
         src->quant != MOE8_QUANT_W4A8_DYNAMIC) || w->dtype != MOE8_DT_I8)
        return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1, "tensor '%s': a linear layer must be "
                         "FLOAT, W8A8, W8A8_DYNAMIC or W4A8_DYNAMIC, not %s", w->name,
                         moe8_quant_type_name(src->quant));
    p->type = src->quant;
    if (p->type == MOE8_QUANT_W4A8_DYNAMIC) ql = moe8_kernels_get()->q4layout; /* every table's */
    if (p->type == MOE8_QUANT_W8A8) {
        p->in_scale = src->in_scale;
        p->in_offset = (float)src->in_offset;
    } else {
        with_bias = src->nonzero_offset; /* the weight offsets take the bias's place */
    }
    p->deq = malloc((size_t)p->n * sizeof(float));
    p->bias = with_bias ? malloc((size_t)p->n * sizeof(int32_t)) : NULL;
    if (!ql) ql = moe8_kernels_get()->qlayout; /* packed once, for the table in use */
    const int8_t *mapped = moe8_pcache_take(pc, ql->bytes(p->n, p->k));
    if (!mapped) p->packed = moe8_alloc_aligned(ql->bytes(p->n, p->k));
    if (!p->deq || (with_bias && !p->bias) || (!mapped && !p->packed)) {
        moe8_proj_free(p);
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "tensor '%s': cannot allocate packed weight",
                         w->name);
    }
    if (p->type != MOE8_QUANT_W8A8) {
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
    if (!mapped && p->type == MOE8_QUANT_W4A8_DYNAMIC) {
        int8_t *codes = malloc((size_t)p->n * (size_t)p->k);
        if (!codes) {
            moe8_proj_free(p);
            return moe8_fail(err, MOE8_ERR_NOMEM, -1, "tensor '%s': out of memory", w->name);
        }
        unpack_w4(codes, w, r0, p->n, c0, p->k);
        ql->pack(p->packed, codes, p->n, p->k, p->k);
        free(codes);
        moe8_pcache_put(pc, p->packed, ql->bytes(p->n, p->k));
    } else if (!mapped) {
        ql->pack(p->packed, (const int8_t *)w->data + (size_t)r0 * ld + (size_t)c0, p->n, p->k,
                 (int)ld);
        moe8_pcache_put(pc, p->packed, ql->bytes(p->n, p->k));
    }
    if (src->bias && p->type == MOE8_QUANT_W4A8_DYNAMIC) { /* added after, as FLOAT's */
        MOE8_ASSERT(c0 == 0 && c1 == src->n_in);
        if (!(p->fbias = malloc((size_t)p->n * sizeof(float)))) {
            moe8_proj_free(p);
            return moe8_fail(err, MOE8_ERR_NOMEM, -1, "tensor '%s': cannot allocate its bias",
                             w->name);
        }
        for (int j = 0; j < p->n; j++) p->fbias[j] = moe8_tensor_f32_at(src->bias, r0 + j);
    }
    moe8_qmat_init(&p->q, ql, mapped ? mapped : p->packed, p->n, p->k, p->deq, p->bias);
    return MOE8_OK;
}

/* Rows [i0, i1) of p (rows r0 + i of w) quantized and packed into p's
 * storage: codes into `codes` (a [PK_ROWS][ldq] scratch), then packed at
 * their first panel's offset. 0, or (row of w) * k + column + 1 of the first
 * non-finite weight. */
#define PK_ROWS 256 /* rows per block: a multiple of every layout's panel */
static int64_t quant_block(moe8_proj *p, const moe8_tensor *w, int r0, int i0, int i1,
                           const moe8_qlayout *ql, int8_t *codes, float *row, int ldq) {
    const size_t es = moe8_dtype_size(w->dtype);
    int32_t xsum;
    for (int i = i0; i < i1; i++) {
        const char *src = (const char *)w->data + (size_t)(r0 + i) * (size_t)p->k * es;
        moe8_convert_to_f32(row, src, w->dtype, (size_t)p->k, NULL);
        for (int j = 0; j < p->k; j++)
            if (!isfinite(row[j])) return (int64_t)(r0 + i) * p->k + j + 1;
        moe8_quant_rows_ref(codes + (size_t)(i - i0) * ldq, ldq, p->deq + i, &xsum, row, p->k, 1,
                            p->k);
    }
    ql->pack(p->packed + ql->bytes(i0, p->k), codes, i1 - i0, p->k, ldq);
    return 0;
}

moe8_status moe8_proj_init_int8(moe8_proj *p, const moe8_linear *src, int r0, int r1,
                                const moe8_qlayout *ql, moe8_pcache *pc, int n_threads,
                                moe8_error *err) {
    const moe8_tensor *w = src->weight;
    memset(p, 0, sizeof *p);
    if (src->quant != MOE8_QUANT_FLOAT || r0 < 0 || r1 <= r0 || r1 > src->n_out ||
        src->n_in > INT32_MAX / 2)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "tensor '%s': rows [%d, %d) of a %s "
                         "[%lld][%lld] weight cannot be packed to int8", w->name, r0, r1,
                         moe8_quant_type_name(src->quant), (long long)src->n_out,
                         (long long)src->n_in);
    if (!ql) ql = moe8_kernels_get()->qlayout;
    MOE8_ASSERT(PK_ROWS % ql->nr == 0 && ql->bytes(2 * ql->nr, 64) == 2 * ql->bytes(ql->nr, 64));
    p->type = MOE8_QUANT_W8A8_DYNAMIC;
    p->n = r1 - r0;
    p->k = (int)src->n_in;
    const size_t bytes = ql->bytes(p->n, p->k);
    const int8_t *mapped = moe8_pcache_take(pc, bytes);
    const float *scales = mapped ? moe8_pcache_take(pc, (size_t)p->n * sizeof(float)) : NULL;
    p->deq = malloc((size_t)p->n * sizeof(float));
    if (!scales) p->packed = moe8_alloc_aligned(bytes);
    if (!p->deq || (!scales && !p->packed)) {
        moe8_proj_free(p);
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "tensor '%s': cannot allocate its int8 copy",
                         w->name);
    }
    if (scales) {
        memcpy(p->deq, scales, (size_t)p->n * sizeof(float));
        moe8_qmat_init(&p->q, ql, mapped, p->n, p->k, p->deq, NULL);
        return MOE8_OK;
    }
    const int ldq = moe8_round_up(p->k, 64), n_blk = (p->n + PK_ROWS - 1) / PK_ROWS;
    int64_t bad = INT64_MAX; /* the first non-finite weight's row * k + col + 1; -1: no memory */
#pragma omp parallel num_threads(n_threads > 0 ? n_threads : 1) reduction(min : bad)
    {
        int8_t *codes = malloc((size_t)PK_ROWS * (size_t)ldq);
        float *row = malloc((size_t)p->k * sizeof(float));
#pragma omp for schedule(dynamic)
        for (int b = 0; b < n_blk; b++) {
            const int i0 = b * PK_ROWS, i1 = i0 + PK_ROWS < p->n ? i0 + PK_ROWS : p->n;
            const int64_t e = codes && row ? quant_block(p, w, r0, i0, i1, ql, codes, row, ldq) : -1;
            if (e && e < bad) bad = e;
        }
        free(codes);
        free(row);
    }
    if (bad != INT64_MAX) {
        moe8_proj_free(p);
        if (bad < 0)
            return moe8_fail(err, MOE8_ERR_NOMEM, -1, "tensor '%s': out of memory", w->name);
        const float v = moe8_tensor_f32_at(w, bad - 1);
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "tensor '%s': row %lld, column %lld is %g: "
                         "cannot quantize a non-finite weight to int8", w->name,
                         (long long)((bad - 1) / p->k), (long long)((bad - 1) % p->k), v);
    }
    moe8_pcache_put(pc, p->packed, bytes);
    moe8_pcache_put(pc, p->deq, (size_t)p->n * sizeof(float));
    moe8_qmat_init(&p->q, ql, p->packed, p->n, p->k, p->deq, NULL);
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

