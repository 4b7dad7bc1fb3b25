/*
 * kernels_ref.c — scalar reference kernels: the definition every optimized
 * kernel is tested against. Plain loops, no tricks; the integer parts are
 * exact int32, the float parts follow SEMANTICS §4 operation by operation.
 * The GEMMs read weights of any layout through moe8_qmat_at.
 */
#include <math.h>
#include <string.h>

#include "core/core.h"
#include "kernels/kernels.h"

size_t moe8_attn_work_floats_ref(int D, int rows) {
    (void)D;
    return ((size_t)2 * (size_t)rows + 15) / 16 * 16; /* running max and sum per row */
}

void moe8_quant_rows_ref(int8_t *xq, int ldq, float *sx, int32_t *xsum, const float *x, int ldx,
                         int m, int k) {
    const int k_pad = moe8_round_up(k, MOE8_QK_KALIGN);
    for (int r = 0; r < m; r++) {
        const float *xr = x + (size_t)r * ldx;
        int8_t *qr = xq + (size_t)r * ldq;
        float amax = 0.0f, s;
        int32_t sum = 0;
        for (int j = 0; j < k; j++) amax = fmaxf(amax, fabsf(xr[j]));
        s = amax / 127.0f;
        for (int j = 0; j < k; j++) {
            float q = s > 0.0f ? moe8_round_even(xr[j] / s) : 0.0f;
            q = fminf(fmaxf(q, -127.0f), 127.0f);
            qr[j] = (int8_t)q;
            sum += qr[j];
        }
        for (int j = k; j < k_pad; j++) qr[j] = 0;
        sx[r] = s;
        xsum[r] = sum;
    }
}

void moe8_gemm_q8_i32_ref(int32_t *acc, int ldc, const int8_t *xq, int ldq, const moe8_qmat *w,
                          int m, int n0, int n1) {
    const int k = w->k;
    for (int r = 0; r < m; r++)
        for (int j = n0; j < n1; j++) {
            int32_t a = 0;
            for (int t = 0; t < k; t++) a += (int32_t)xq[(size_t)r * ldq + t] * moe8_qmat_at(w, j, t);
            acc[(size_t)r * ldc + j] = a;
        }
}

void moe8_gemm_q8_f32_ref(float *y, int ldy, const int8_t *xq, int ldq, const float *sx,
                          const int32_t *xsum, const moe8_qmat *w, int m, int n0, int n1) {
    const int k = w->k;
    for (int r = 0; r < m; r++)
        for (int j = n0; j < n1; j++) {
            int32_t a = 0;
            for (int t = 0; t < k; t++) a += (int32_t)xq[(size_t)r * ldq + t] * moe8_qmat_at(w, j, t);
            if (w->offset) a += w->offset[j] * xsum[r];
            y[(size_t)r * ldy + j] = ((float)a * sx[r]) * w->scale[j];
        }
}

static inline float load_wf(const void *w, moe8_dtype dt, size_t i) {
    switch (dt) {
    case MOE8_DT_F32: return ((const float *)w)[i];
    case MOE8_DT_BF16: return moe8_bf16_to_f32(((const uint16_t *)w)[i]);
    case MOE8_DT_F16: return moe8_f16_to_f32(((const uint16_t *)w)[i]);
    default: MOE8_ASSERT(!"float weight dtype must be F32, F16 or BF16"); return 0.0f;
    }
}

void moe8_gemm_f32_wf_ref(float *y, int ldy, const float *x, int ldx, const void *w,
                          moe8_dtype wdt, int ldw, int m, int n0, int n1, int k) {
    for (int r = 0; r < m; r++)
        for (int j = n0; j < n1; j++) {
            float a = 0.0f;
            for (int t = 0; t < k; t++)
                a += x[(size_t)r * ldx + t] * load_wf(w, wdt, (size_t)j * ldw + t);
            y[(size_t)r * ldy + j] = a;
        }
}

/* ---- flash attention ------------------------------------------------------ */

static inline float load_kv(const char *row, moe8_dtype dt, int d) {
    if (dt == MOE8_DT_F32) return ((const float *)(const void *)row)[d];
    return load_wf(row, dt, (size_t)d);
}

/* q.k with 8 lane sums (lane l takes d = l mod 8, in order) added as
 * ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)): the order of the AVX2 twin. */
static float attn_dot(const float *q, const char *k, moe8_dtype dt, int D) {
    float p[8] = {0};
    for (int d = 0; d < D; d++) p[d % 8] += q[d] * load_kv(k, dt, d);
    return ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
}

/* One row against key block b: the online-softmax step (kernels.h). */
static void attn_row_block(float *o, float *m, float *l, const float *q, const char *kblk,
                           const char *vblk, moe8_dtype dt, int D, int c, float scale) {
    const size_t row_bytes = (size_t)D * moe8_dtype_size(dt);
    float s[MOE8_KV_BLOCK_TOKENS], t[8], mx = -INFINITY, m_new, alpha, sum;
    for (int j = 0; j < MOE8_KV_BLOCK_TOKENS; j++) {
        s[j] = j < c ? attn_dot(q, kblk + j * row_bytes, dt, D) * scale : -INFINITY;
        mx = fmaxf(mx, s[j]);
    }
    m_new = fmaxf(*m, mx);
    alpha = expf(*m - m_new);
    for (int j = 0; j < MOE8_KV_BLOCK_TOKENS; j++) s[j] = j < c ? expf(s[j] - m_new) : 0.0f;
    for (int j = 0; j < 8; j++) t[j] = s[j] + s[j + 8];
    sum = ((t[0] + t[4]) + (t[2] + t[6])) + ((t[1] + t[5]) + (t[3] + t[7]));
    *l = *l * alpha + sum;
    *m = m_new;
    for (int d = 0; d < D; d++) {
        float a = o[d] * alpha;
        for (int j = 0; j < c; j++) a += s[j] * load_kv(vblk + j * row_bytes, dt, d);
        o[d] = a;
    }
}

void moe8_flash_attn_ref(float *out, int ldo, const float *q, int ldq, int n_tok, int G, int D,
                         int32_t pos0, float scale, const moe8_kv_pages *kv, float *work) {
    const int R = n_tok * G, BS = MOE8_KV_BLOCK_TOKENS;
    const int32_t last = pos0 + n_tok - 1;
    float *M = work, *L = work + R;
    for (int r = 0; r < R; r++) {
        M[r] = -INFINITY;
        L[r] = 0.0f;
        memset(out + (size_t)(r / G) * ldo + (size_t)(r % G) * D, 0, (size_t)D * sizeof(float));
    }
    for (int32_t b = 0; b <= last / BS; b++) {
        const char *kblk = kv->base + (size_t)kv->blocks[b] * kv->block_bytes;
        const int nv = last + 1 - b * BS < BS ? last + 1 - b * BS : BS;
        const int i0 = b * BS - pos0 > 0 ? b * BS - pos0 : 0; /* first token that sees block b */
        for (int r = i0 * G; r < R; r++) {
            const int i = r / G, g = r % G, seen = pos0 + i - b * BS + 1; /* keys of b it sees */
            const int c = seen < nv ? seen : nv;
            attn_row_block(out + (size_t)i * ldo + (size_t)g * D, &M[r], &L[r],
                           q + (size_t)i * ldq + (size_t)g * D, kblk, kblk + kv->v_off, kv->dt, D,
                           c, scale);
        }
    }
    for (int r = 0; r < R; r++) {
        float *o = out + (size_t)(r / G) * ldo + (size_t)(r % G) * D;
        for (int d = 0; d < D; d++) o[d] = o[d] / L[r];
        if (kv->stats) {
            kv->stats[2 * r] = M[r];
            kv->stats[2 * r + 1] = L[r];
        }
    }
}

/* One float's exponential (SEMANTICS §10, "The exponential"), operation by
 * operation as glibc's expf on a CPU with FMA: the two products with 32/ln2
 * and the cubic's three multiply-adds are fused (fma), the rest rounds. */
static float exp_one(float x) {
    uint32_t bits;
    memcpy(&bits, &x, 4);
    if (((bits >> 20) & 0x7ff) >= 0x42b) { /* |x| >= 88, inf or NaN */
        if (x != x || x == INFINITY) return x + x;
        if (x > MOE8_EXPF_OFLOW) return INFINITY;
        if (x < MOE8_EXPF_UFLOW) return 0.0f; /* -inf too */
        if (x < MOE8_EXPF_MAY_UFLOW) return 0x1p-149f;
    }
    const double xd = (double)x, z = fma(MOE8_EXPF_INVLN2N, xd, MOE8_EXPF_SHIFT);
    const double kd = z - MOE8_EXPF_SHIFT, r = fma(MOE8_EXPF_INVLN2N, xd, -kd);
    uint64_t ki, t;
    double s, p, q, y;
    memcpy(&ki, &z, 8);
    t = moe8_expf_tab[ki % 32] + (ki << 47);
    memcpy(&s, &t, 8);
    p = fma(r, MOE8_EXPF_C0, MOE8_EXPF_C1);
    q = fma(r, MOE8_EXPF_C2, 1.0);
    y = fma(p, r * r, q);
    return (float)(y * s);
}

void moe8_exp_f32_ref(float *y, const float *x, int n, float sub, float div) {
    for (int i = 0; i < n; i++) y[i] = exp_one((x[i] - sub) / div);
}
