/*
 * gdn.c — the Gated DeltaNet compute core (gdn.h; SEMANTICS "Gated
 * DeltaNet"): conv + SiLU with its state, the q/k L2 norms and gates, the
 * gated delta rule in its recurrent and chunked forms, the gated RMSNorm.
 *
 * The chunked form, per value head and chunk of m <= 64 tokens (rows i, j;
 * G the running sum of g within the chunk, Q and K normalised, S [dk][dv]):
 *   A  = -(beta K Kᵀ) ∘ e^(G_i - G_j), strictly lower; A <- (I - A)^-1 - I
 *        by forward substitution (the UT transform)
 *   U  = (I + A) beta V;  W = (I + A) beta K e^G
 *   VN = U - W S                         (what the old state does not predict)
 *   O  = (Q e^G) S + ((Q Kᵀ) ∘ e^(G_i - G_j), lower incl. diagonal) VN
 *   S  = e^(G_last) S + (K e^(G_last - G))ᵀ VN
 * the matrix products on the table's gemm_f32_nn (triangular flags skip the
 * zero halves); everything else is O(m (dk + dv) + m²) per chunk.
 *
 * The recurrent and decode loops run on the thread pool (core/pool.h), one
 * value head (of one sequence) at a time on its own state, so nothing
 * depends on the thread count.
 *
 * Does not: project, read weights, or know a family's layout.
 */
#include <math.h>
#include <string.h>

#include "core/pool.h"
#include "kernels/kernels.h"
#include "model/gdn.h"

enum { CH = MOE8_GDN_CHUNK };

int moe8_gdn_dims_check(const moe8_gdn_dims *d) {
    if (d->n_k_heads <= 0 || d->n_v_heads <= 0 || d->n_v_heads % d->n_k_heads) return -1;
    if (d->dk <= 0 || d->dv <= 0 || d->conv_k <= 0) return -1;
    if (d->dk > MOE8_GDN_MAX_DIM || d->dv > MOE8_GDN_MAX_DIM || d->conv_k > MOE8_GDN_MAX_DIM) return -1;
    return 0;
}

int moe8_gdn_conv_channels(const moe8_gdn_dims *d) {
    return 2 * d->n_k_heads * d->dk + d->n_v_heads * d->dv;
}

size_t moe8_gdn_conv_state_floats(const moe8_gdn_dims *d) {
    return (size_t)(d->conv_k - 1) * (size_t)moe8_gdn_conv_channels(d);
}

size_t moe8_gdn_state_floats(const moe8_gdn_dims *d) {
    return (size_t)d->n_v_heads * (size_t)d->dk * (size_t)d->dv;
}

/* ---- conv, norms, gates ------------------------------------------------------- */

void moe8_gdn_conv_weight(float *wt, const float *w, const moe8_gdn_dims *d) {
    const int C = moe8_gdn_conv_channels(d), K = d->conv_k;
    for (int c = 0; c < C; c++)
        for (int j = 0; j < K; j++) wt[(size_t)j * C + c] = w[(size_t)c * K + j];
}

/* y[0..n) = x / (1 + exp(-x)), the exponential by the table's exp_f32. */
static void silu_row(float *y, const float *x, int n, const moe8_kernels *kt) {
    float e[256];
    for (int c0 = 0; c0 < n; c0 += 256) {
        const int w = n - c0 < 256 ? n - c0 : 256;
        kt->exp_f32(e, x + c0, w, 0.0f, -1.0f);
        for (int c = 0; c < w; c++) y[c0 + c] = x[c0 + c] / (1.0f + e[c]);
    }
}

void moe8_gdn_conv(float *y, int ldy, const float *x, int ldx, int T, const moe8_gdn_dims *d,
                   const float *wt, float *state) {
    const moe8_kernels *kt = moe8_kernels_get();
    const int C = moe8_gdn_conv_channels(d), K = d->conv_k;
    for (int t = 0; t < T; t++) {
        float *yt = y + (size_t)t * ldy;
        for (int j = 0; j < K; j++) { /* input t-K+1+j: from x, or from the state before x */
            const int p = t - (K - 1) + j;
            const float *src = p >= 0 ? x + (size_t)p * ldx : state + (size_t)(p + K - 1) * C;
            const float *wj = wt + (size_t)j * C;
            if (j == 0)
                for (int c = 0; c < C; c++) yt[c] = wj[c] * src[c];
            else
                for (int c = 0; c < C; c++) yt[c] += wj[c] * src[c];
        }
        silu_row(yt, yt, C, kt);
    }
    for (int s = 0; s < K - 1; s++) { /* ascending: a kept state row moves down */
        const int p = T - (K - 1) + s;
        const float *src = p >= 0 ? x + (size_t)p * ldx : state + (size_t)(p + K - 1) * C;
        if (src != state + (size_t)s * C) memmove(state + (size_t)s * C, src, sizeof(float) * (size_t)C);
    }
}

static void l2norm(float *x, int n, float scale) {
    double ss = 0.0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    const float r = (float)(scale / sqrt(ss + 1e-6));
    for (int i = 0; i < n; i++) x[i] *= r;
}

void moe8_gdn_qk_norm(float *q, int ldq, float *k, int ldk, int T, const moe8_gdn_dims *d) {
    const int dk = d->dk;
    const double qs = 1.0 / sqrt((double)dk);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < d->n_k_heads; h++) {
            l2norm(q + (size_t)t * ldq + (size_t)h * dk, dk, (float)qs);
            l2norm(k + (size_t)t * ldk + (size_t)h * dk, dk, 1.0f);
        }
}

void moe8_gdn_gates(float *g, float *beta, const float *a, int lda, const float *b, int ldb,
                    const float *A_log, const float *dt_bias, int T, int NV) {
    for (int t = 0; t < T; t++)
        for (int h = 0; h < NV; h++) {
            const double x = (double)a[(size_t)t * lda + h] + dt_bias[h];
            const double sp = x > 20.0 ? x : log1p(exp(x));
            g[(size_t)t * NV + h] = (float)(-exp((double)A_log[h]) * sp);
            beta[(size_t)t * NV + h] = (float)(1.0 / (1.0 + exp(-(double)b[(size_t)t * ldb + h])));
        }
}

void moe8_gdn_gated_norm(float *y, int ldy, const float *o, int ldo, const float *z, int ldz,
                         const float *w, int T, int NV, int dv, float eps) {
    const moe8_kernels *kt = moe8_kernels_get();
    float sz[MOE8_GDN_MAX_DIM];
    for (int t = 0; t < T; t++)
        for (int h = 0; h < NV; h++) {
            const float *ot = o + (size_t)t * ldo + (size_t)h * dv;
            float *yt = y + (size_t)t * ldy + (size_t)h * dv;
            double ss = 0.0;
            for (int j = 0; j < dv; j++) ss += (double)ot[j] * ot[j];
            const float r = (float)(1.0 / sqrt(ss / dv + eps));
            silu_row(sz, z + (size_t)t * ldz + (size_t)h * dv, dv, kt);
            for (int j = 0; j < dv; j++) yt[j] = ot[j] * r * w[j] * sz[j];
        }
}

/* ---- the recurrent form ---------------------------------------------------------- */

/* Recurrent steps of value heads (or of sequence x value head items, decode). */
typedef struct {
    moe8_gdn_step_fn step;
    float *o;
    const float *q, *k, *v, *g, *beta;
    float *S;                /* recurrent: [NV][dk][dv] */
    float *const *Sd;        /* decode: one state per sequence */
    int ldo, ldq, ldk, ldv, T, NV, dk, dv, r;
    int64_t n, n_chunks;     /* decode: items n_seq x NV in n_chunks parts */
} gdn_job;

static void recurrent_head(void *ctx, int64_t h_, int thread) {
    const gdn_job *j = ctx;
    const int h = (int)h_, NV = j->NV, dk = j->dk, dv = j->dv, r = j->r;
    (void)thread;
    for (int t = 0; t < j->T; t++)
        j->step(j->o + (size_t)t * j->ldo + (size_t)h * dv, j->S + (size_t)h * dk * dv,
                j->q + (size_t)t * j->ldq + (size_t)(h / r) * dk,
                j->k + (size_t)t * j->ldk + (size_t)(h / r) * dk,
                j->v + (size_t)t * j->ldv + (size_t)h * dv, expf(j->g[(size_t)t * NV + h]),
                j->beta[(size_t)t * NV + h], dk, dv);
}

void moe8_gdn_recurrent(float *o, int ldo, const float *q, int ldq, const float *k, int ldk,
                        const float *v, int ldv, const float *g, const float *beta, int T,
                        const moe8_gdn_dims *d, float *S, int n_threads) {
    const moe8_kernels *kt = moe8_kernels_get();
    const gdn_job j = {kt->gdn_step ? kt->gdn_step : moe8_gdn_step_ref, o, q, k, v, g, beta, S, NULL,
                       ldo, ldq, ldk, ldv, T, d->n_v_heads, d->dk, d->dv, d->n_v_heads / d->n_k_heads,
                       0, 0};
    moe8_pool_run(n_threads, d->n_v_heads, recurrent_head, (void *)&j);
}

static void decode_items(void *ctx, int64_t c, int thread) {
    const gdn_job *j = ctx;
    const int NV = j->NV, dk = j->dk, dv = j->dv, r = j->r;
    int64_t i0, i1;
    (void)thread;
    moe8_pool_part(j->n, c, j->n_chunks, &i0, &i1);
    for (int64_t it = i0; it < i1; it++) {
        const int s = (int)(it / NV), h = (int)(it % NV);
        j->step(j->o + (size_t)s * j->ldo + (size_t)h * dv, j->Sd[s] + (size_t)h * dk * dv,
                j->q + (size_t)s * j->ldq + (size_t)(h / r) * dk,
                j->k + (size_t)s * j->ldk + (size_t)(h / r) * dk,
                j->v + (size_t)s * j->ldv + (size_t)h * dv, expf(j->g[(size_t)s * NV + h]),
                j->beta[(size_t)s * NV + h], dk, dv);
    }
}

void moe8_gdn_decode(float *o, int ldo, const float *q, int ldq, const float *k, int ldk,
                     const float *v, int ldv, const float *g, const float *beta, int n_seq,
                     const moe8_gdn_dims *d, float *const *S, int n_threads) {
    const moe8_kernels *kt = moe8_kernels_get();
    const int64_t n = (int64_t)n_seq * d->n_v_heads;
    const gdn_job j = {kt->gdn_step ? kt->gdn_step : moe8_gdn_step_ref, o, q, k, v, g, beta, NULL, S,
                       ldo, ldq, ldk, ldv, 1, d->n_v_heads, d->dk, d->dv, d->n_v_heads / d->n_k_heads,
                       n, moe8_pool_chunks(n, n_threads, 4)};
    if (n > 0) moe8_pool_run(n_threads, j.n_chunks, decode_items, (void *)&j);
}
