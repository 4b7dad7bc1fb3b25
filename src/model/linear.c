/*
 * linear.c — the dense linear layers of the forward pass (SEMANTICS §5, §7).
 *
 * FLOAT: y = x @ W^T with W[n][k] in its stored dtype (F32/F16/BF16) read in
 * place from the memory map by gemm_f32_wf; nothing is copied.
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
 * W8A8_DYNAMIC (the lm_head of `moe8 quantize --lm-head w8a8`; SEMANTICS §4):
 * the caller quantizes each input row with the kernels' quant_rows (row
 * scale sx = amax/127, codes +-127, code sum xsum) and the same gemm_q8_f32
 * computes ((float)(acc + O*xsum) * sx) * S with S = weight_scale and
 * O = weight_offset (NULL, costing nothing, when every offset is 0).
 *
 * Tensor parallelism (SEMANTICS §8): a proj may be a block of the checkpoint's
 * weight — rows (column-parallel q/k/v, dense gate/up) or columns
 * (row-parallel o_proj, dense down, whose quant_bias only rank 0 adds).
 * Values were checked by moe8_model_load (model.h). Does not: fuse q/k/v into
 * one GEMM, or communicate (forward.c all-reduces the partial sums).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "model/forward.h"

moe8_status moe8_proj_init(moe8_proj *p, const moe8_linear *src, int with_bias, moe8_error *err) {
    if (src->n_out <= 0 || src->n_in <= 0 || src->n_out > INT32_MAX / 2 || src->n_in > INT32_MAX / 2)
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "tensor '%s': bad shape", src->weight->name);
    return moe8_proj_init_slice(p, src, 0, (int)src->n_out, 0, (int)src->n_in, with_bias, err);
}

moe8_status moe8_proj_init_slice(moe8_proj *p, const moe8_linear *src, int r0, int r1, int c0,
                                 int c1, int with_bias, moe8_error *err) {
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
    p->packed = moe8_alloc_aligned(moe8_qmat_bytes(p->n, p->k));
    if (!p->deq || (with_bias && !p->bias) || !p->packed) {
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
    moe8_qmat_pack(p->packed, (const int8_t *)w->data + (size_t)r0 * ld + (size_t)c0, p->n, p->k,
                   (int)ld);
    p->q.n = p->n;
    p->q.k = p->k;
    p->q.n_pad = moe8_round_up(p->n, MOE8_QK_NR);
    p->q.k_pad = moe8_round_up(p->k, MOE8_QK_KALIGN);
    p->q.data = p->packed;
    p->q.scale = p->deq;
    p->q.offset = p->bias;
    return MOE8_OK;
}

void moe8_proj_free(moe8_proj *p) {
    if (!p) return;
    free(p->deq);
    free(p->bias);
    moe8_free_aligned(p->packed);
    memset(p, 0, sizeof *p);
}

size_t moe8_proj_owned_bytes(const moe8_proj *p) {
    if (p->type == MOE8_QUANT_FLOAT) return 0;
    return moe8_qmat_bytes(p->n, p->k) + (size_t)p->n * (sizeof(float) + (p->bias ? 4 : 0));
}

void moe8_proj_quant(int8_t *xq, int ldq, const float *x, int ldx, int T, int k, float scale,
                     float offset) {
    const int k_pad = moe8_round_up(k, MOE8_QK_KALIGN);
    for (int r = 0; r < T; r++) {
        const float *xr = x + (size_t)r * ldx;
        int8_t *qr = xq + (size_t)r * ldq;
        for (int j = 0; j < k; j++) {
            float v = xr[j] / scale;   /* true division, rounded to fp32 */
            v = moe8_round_even(v + offset);
            qr[j] = (int8_t)fminf(fmaxf(v, -128.0f), 127.0f);
        }
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
    const int n_blocks = moe8_round_up(p->n, MOE8_QK_NR) / MOE8_QK_NR;
    int n_chunks = n_threads < n_blocks ? n_threads : n_blocks;
    if (n_chunks < 1) n_chunks = 1;
#pragma omp parallel for schedule(static, 1) num_threads(n_chunks) if (n_chunks > 1)
    for (int c = 0; c < n_chunks; c++) {
        int n0 = (int)((int64_t)n_blocks * c / n_chunks) * MOE8_QK_NR;
        int n1 = (int)((int64_t)n_blocks * (c + 1) / n_chunks) * MOE8_QK_NR;
        if (n1 > p->n) n1 = p->n;
        if (n0 >= n1) continue;
        if (p->type == MOE8_QUANT_FLOAT)
            kt->gemm_f32_wf(y, ldy, x, ldx, p->w, p->wdt, p->ldw, T, n0, n1, p->k);
        else
            kt->gemm_q8_f32(y, ldy, xq, ldq, sx, xsum, &p->q, T, n0, n1);
    }
}
