/*
 * expert_mlp.c — the expert MLP of the MoE layer (SEMANTICS §1, §4), one entry for
 * quantized and float experts (vllm-ascend's unified_apply_mlp):
 *
 *   Y1 = X @ [gate; up]^T     -> [m][2I]  gate at columns [0, I), up at [I, 2I)
 *   A  = silu(gate) * up      fp32, written over the gate columns of Y1
 *   Y2 = A @ down^T           -> [m][H]   (quantized: A re-quantized per row)
 *
 * Quantized experts use gemm_q8_f32, or gemm_q4_f32 for int4 (W4A8) ones (exact
 * int32 + SEMANTICS §4 dequant, weight offsets included through qmat.offset and
 * the row sums); float experts use
 * gemm_f32_wf on the weights in their stored dtype. Both phases work on a
 * column range so moe_layer.c can split them across threads; every output
 * element is computed once, the same way, whatever the split.
 * Does not: quantize X (the layer does it once per token), or thread.
 */
#include <stdint.h>
#include <string.h>

#include "moe/moe.h"

/* exp(x), relative error ~1e-7, for |x| <= 87 (a larger |x| is clamped to 87
 * through the bits: integer compares do not block if-conversion the way float
 * compares do under -ftrapping-math). Cody-Waite reduction by ln 2, degree-7
 * Taylor polynomial on |r| <= ln2/2, 2^n through the exponent bits.
 * Branch-free and libm-free so the silu loop vectorizes: at decode it is
 * 8 x I exponentials per token, 10 us with libm's scalar expf. */
static inline float exp_approx(float x) {
    const float shift = 12582912.0f;
    int32_t ix, ax, lim = 0x42ae0000; /* 87.0f */
    memcpy(&ix, &x, 4);
    ax = ix & 0x7fffffff;
    ax = ax < lim ? ax : lim;
    ix = (ix & INT32_MIN) | ax;
    memcpy(&x, &ix, 4);
    float n = (x * 1.44269504f + shift) - shift;
    float r = (x - n * 0.693145752f) - n * 1.42860677e-6f;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float s;
    memcpy(&s, &bits, 4);
    return p * s;
}

/* The table's GEMM for w's codes: int8 (W8A8) or int4 (W4A8, SEMANTICS §4b). */
static inline moe8_gemm_q8_f32_fn gemm_of(const moe8_kernels *k, const moe8_qmat *w) {
    return w->layout->bits == 4 ? k->gemm_q4_f32 : k->gemm_q8_f32;
}

/* silu(g) * u = g * u / (1 + exp(-g)); exactly 0 for g = 0 or u = 0. */
static inline float silu_mul(float g, float u) { return g / (1.0f + exp_approx(-g)) * u; }

/* The expert's act (moe.h moe8_expert_act) on row columns [c0, c1): biases,
 * then the clamped SwiGLU (gpt_oss: gate <= limit, |up| <= limit,
 * (up + 1) gate sigmoid(alpha gate)) or silu(gate) * up. */
static void act_cols(const moe8_expert_act *a, float *g, int inter, int c0, int c1) {
    const float L = a->limit, al = a->alpha;
    for (int c = c0; c < c1; c++) {
        float x = g[c] + (a->b_gu ? a->b_gu[c] : 0.0f);
        float u = g[inter + c] + (a->b_gu ? a->b_gu[inter + c] : 0.0f);
        if (L > 0) {
            x = x < L ? x : L;
            u = u < -L ? -L : u > L ? L : u;
            g[c] = (u + 1.0f) * (x / (1.0f + exp_approx(-al * x)));
        } else {
            g[c] = silu_mul(x, u);
        }
    }
}

void moe8_mlp_up(const moe8_kernels *k, const moe8_qexpert *qe, const moe8_fexpert *fe,
                 int hidden, int inter, const moe8_mlp_rows *x, float *y1, int ldy1, int c0,
                 int c1) {
    const int m = x->m;
    if (qe) {
        const moe8_gemm_q8_f32_fn gemm = gemm_of(k, &qe->gate);
        gemm(y1, ldy1, x->xq, x->ldq, x->sx, x->xsum, &qe->gate, m, c0, c1);
        gemm(y1 + inter, ldy1, x->xq, x->ldq, x->sx, x->xsum, &qe->up, m, c0, c1);
    } else {
        k->gemm_f32_wf(y1, ldy1, x->xf, x->ldf, fe->gate, fe->gate_dt, fe->ld_gu, m, c0, c1,
                       hidden);
        k->gemm_f32_wf(y1 + inter, ldy1, x->xf, x->ldf, fe->up, fe->up_dt, fe->ld_gu, m, c0, c1,
                       hidden);
    }
    const moe8_expert_act *a = qe ? &qe->act : &fe->act;
    if (a->b_gu || a->limit > 0) {
        for (int r = 0; r < m; r++) act_cols(a, y1 + (size_t)r * ldy1, inter, c0, c1);
        return;
    }
    for (int r = 0; r < m; r++) {
        float *g = y1 + (size_t)r * ldy1;
#pragma omp simd
        for (int c = c0; c < c1; c++) g[c] = silu_mul(g[c], g[inter + c]);
    }
}

void moe8_mlp_down(const moe8_kernels *k, const moe8_qexpert *qe, const moe8_fexpert *fe,
                   int inter, const moe8_mlp_rows *a, float *y2, int ldy2, int c0, int c1) {
    if (qe)
        gemm_of(k, &qe->down)(y2, ldy2, a->xq, a->ldq, a->sx, a->xsum, &qe->down, a->m, c0, c1);
    else
        k->gemm_f32_wf(y2, ldy2, a->xf, a->ldf, fe->down, fe->down_dt, fe->ld_down, a->m, c0, c1,
                       inter);
    const float *bd = qe ? qe->act.b_down : fe->act.b_down;
    for (int r = 0; bd && r < a->m; r++)
        for (int c = c0; c < c1; c++) y2[(size_t)r * ldy2 + c] += bd[c];
}

void moe8_unified_apply_mlp(const moe8_kernels *k, const moe8_qexpert *qe,
                            const moe8_fexpert *fe, int hidden, int inter,
                            const moe8_mlp_rows *x, float *y1, int ldy1, int8_t *aq, int lda,
                            float *sa, int32_t *asum, float *y2, int ldy2) {
    moe8_mlp_rows a = {.m = x->m};
    moe8_mlp_up(k, qe, fe, hidden, inter, x, y1, ldy1, 0, inter);
    if (qe) {
        k->quant_rows(aq, lda, sa, asum, y1, ldy1, x->m, inter);
        a.xq = aq;
        a.ldq = lda;
        a.sx = sa;
        a.xsum = asum;
    } else {
        a.xf = y1;
        a.ldf = ldy1;
    }
    moe8_mlp_down(k, qe, fe, inter, &a, y2, ldy2, 0, hidden);
}
