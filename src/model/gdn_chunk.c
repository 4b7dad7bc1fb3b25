/*
 * gdn_chunk.c — the chunked form of the gated delta rule (gdn.h
 * moe8_gdn_chunked; the algebra is in gdn.c's opening block): per value
 * head, its chunks in order, each a handful of small matrix products on the
 * kernel table's gemm_f32_nn. One value head a chunk of the thread pool
 * (core/pool.h), on the slice of the caller's work buffer of the thread that
 * runs it; a head's arithmetic does not depend on the thread count.
 *
 * Work slice of one thread (floats, each part a multiple of 16):
 *   KB, KBG, W, QG [CH][dk] beta K; -beta K e^G; -W; Q e^G
 *   KT, KET [dk][CH]       Kᵀ; (K e^(G_last - G))ᵀ
 *   VB, VN [CH][dv]        beta V; U, then VN
 *   A, P [CH][CH]          the UT-transformed A; the decayed Q Kᵀ
 *   G, eG, eE, row [CH]
 */
#include <math.h>
#include <string.h>

#include "core/pool.h"
#include "kernels/kernels.h"
#include "model/gdn.h"

enum { CH = MOE8_GDN_CHUNK };

static size_t r16(size_t n) { return (n + 15) / 16 * 16; }

static size_t slice_floats(const moe8_gdn_dims *d) {
    const size_t dk = (size_t)d->dk, dv = (size_t)d->dv;
    return 4 * r16(CH * dk) + 2 * r16(dk * CH) + 2 * r16(CH * dv) + 2 * r16(CH * CH) + 4 * r16(CH);
}

size_t moe8_gdn_chunk_work_floats(const moe8_gdn_dims *d, int n_threads) {
    return slice_floats(d) * (size_t)(n_threads > 0 ? n_threads : 1);
}

typedef struct {
    float *KB, *KBG, *W, *QG, *KT, *KET, *VB, *VN, *A, *P, *G, *eG, *eE, *row;
} slice;

static slice slice_at(float *w, const moe8_gdn_dims *d) {
    const size_t dk = (size_t)d->dk, dv = (size_t)d->dv;
    slice s;
    s.KB = w, w += r16(CH * dk);
    s.KBG = w, w += r16(CH * dk);
    s.W = w, w += r16(CH * dk);
    s.QG = w, w += r16(CH * dk);
    s.KT = w, w += r16(dk * CH);
    s.KET = w, w += r16(dk * CH);
    s.VB = w, w += r16(CH * dv);
    s.VN = w, w += r16(CH * dv);
    s.A = w, w += r16(CH * CH);
    s.P = w, w += r16(CH * CH);
    s.G = w, w += r16(CH);
    s.eG = w, w += r16(CH);
    s.eE = w, w += r16(CH);
    s.row = w;
    return s;
}

/* M[i][j] *= sign e^(G_i - G_j) for j < i (+ diag: j <= i), 0 elsewhere (j < m). */
static void decay_lower(float *M, int m, const float *G, float *row, float sign, int diag,
                        const moe8_kernels *kt) {
    for (int i = 0; i < m; i++) {
        float *Mi = M + (size_t)i * CH;
        const int n = i + (diag ? 1 : 0);
        for (int j = 0; j < n; j++) row[j] = G[i] - G[j];
        kt->exp_f32(row, row, n, 0.0f, 1.0f);
        for (int j = 0; j < n; j++) Mi[j] *= sign * row[j];
        for (int j = n; j < m; j++) Mi[j] = 0.0f;
    }
}

/* A <- (I - A)^-1 - I for strictly lower A: row i becomes a_i + a_i A (rows
 * above already transformed), accumulated into row[]. */
static void ut_transform(float *A, int m, float *restrict row) {
    for (int i = 1; i < m; i++) {
        float *Ai = A + (size_t)i * CH;
        for (int j = 0; j < i; j++) row[j] = Ai[j];
        for (int x = 1; x < i; x++) {
            const float ax = Ai[x], *restrict Ax = A + (size_t)x * CH;
            for (int j = 0; j < x; j++) row[j] += ax * Ax[j];
        }
        for (int j = 0; j < i; j++) Ai[j] = row[j];
    }
}

/* The chunk's per-row inputs: G, the exponentials, and the scaled copies. */
static void chunk_inputs(const slice *s, int m, const float *q, int ldq, const float *k, int ldk,
                         const float *v, int ldv, const float *g, const float *beta, int NV, int h,
                         int dk, int dv, const moe8_kernels *kt) {
    double acc = 0.0;
    for (int i = 0; i < m; i++) s->G[i] = (float)(acc += g[(size_t)i * NV + h]);
    kt->exp_f32(s->eG, s->G, m, 0.0f, 1.0f);
    for (int i = 0; i < m; i++) s->eE[i] = s->G[m - 1] - s->G[i];
    kt->exp_f32(s->eE, s->eE, m, 0.0f, 1.0f);
    for (int i = 0; i < m; i++) {
        const float *restrict qi = q + (size_t)i * ldq, *restrict ki = k + (size_t)i * ldk;
        const float *restrict vi = v + (size_t)i * ldv;
        float *restrict kb = s->KB + i * dk, *restrict kbg = s->KBG + i * dk, *restrict qg = s->QG + i * dk;
        float *restrict vb = s->VB + i * dv;
        const float b = beta[(size_t)i * NV + h], eg = s->eG[i];
        for (int x = 0; x < dk; x++) {
            kb[x] = ki[x] * b;
            kbg[x] = -(ki[x] * b) * eg;
            qg[x] = qi[x] * eg;
        }
        for (int x = 0; x < dv; x++) vb[x] = vi[x] * b;
    }
    for (int x0 = 0; x0 < dk; x0 += 8) /* Kᵀ in 8 x m strips: reads stay within a few lines */
        for (int i = 0; i < m; i++)
            for (int x = x0; x < x0 + 8 && x < dk; x++) s->KT[(size_t)x * CH + i] = k[(size_t)i * ldk + x];
    for (int x = 0; x < dk; x++) {
        const float *restrict kt_ = s->KT + (size_t)x * CH, *restrict ee = s->eE;
        float *restrict ket = s->KET + (size_t)x * CH;
        for (int i = 0; i < m; i++) ket[i] = kt_[i] * ee[i];
    }
}

/* One chunk of m tokens of value head h: o rows (ldo), state Sh [dk][dv]. */
static void chunk(const slice *s, int m, float *o, int ldo, const float *q, int ldq, const float *k,
                  int ldk, const float *v, int ldv, const float *g, const float *beta, int NV, int h,
                  int dk, int dv, float *Sh, const moe8_kernels *kt, moe8_gemm_f32_nn_fn mm) {
    chunk_inputs(s, m, q, ldq, k, ldk, v, ldv, g, beta, NV, h, dk, dv, kt);
    mm(s->A, CH, s->KB, dk, s->KT, CH, m, m, dk, MOE8_GEMM_TRI_C);
    decay_lower(s->A, m, s->G, s->row, -1.0f, 0, kt);
    ut_transform(s->A, m, s->row);
    memcpy(s->VN, s->VB, sizeof(float) * (size_t)(m * dv));
    mm(s->VN, dv, s->A, CH, s->VB, dv, m, dv, m, MOE8_GEMM_ACC | MOE8_GEMM_TRI_A);    /* U */
    memcpy(s->W, s->KBG, sizeof(float) * (size_t)(m * dk));
    mm(s->W, dk, s->A, CH, s->KBG, dk, m, dk, m, MOE8_GEMM_ACC | MOE8_GEMM_TRI_A);   /* -W */
    mm(s->VN, dv, s->W, dk, Sh, dv, m, dv, dk, MOE8_GEMM_ACC);                      /* VN */
    mm(o, ldo, s->QG, dk, Sh, dv, m, dv, dk, 0);
    mm(s->P, CH, q, ldq, s->KT, CH, m, m, dk, MOE8_GEMM_TRI_C);
    decay_lower(s->P, m, s->G, s->row, 1.0f, 1, kt);
    mm(o, ldo, s->P, CH, s->VN, dv, m, dv, m, MOE8_GEMM_ACC | MOE8_GEMM_TRI_A);
    const float eL = expf(s->G[m - 1]);
    for (int x = 0; x < dk * dv; x++) Sh[x] *= eL;
    mm(Sh, dv, s->KET, CH, s->VN, dv, dk, dv, m, MOE8_GEMM_ACC);
}

typedef struct {
    const moe8_gdn_dims *d;
    const moe8_kernels *kt;
    moe8_gemm_f32_nn_fn mm;
    float *o, *S, *work;
    const float *q, *k, *v, *g, *beta;
    int ldo, ldq, ldk, ldv, T;
} chunked_job;

/* Pool chunk h: value head h, its chunks of tokens in order. */
static void chunked_head(void *ctx, int64_t h_, int thread) {
    const chunked_job *j = ctx;
    const moe8_gdn_dims *d = j->d;
    const int h = (int)h_, NV = d->n_v_heads, dk = d->dk, dv = d->dv, r = NV / d->n_k_heads;
    const slice s = slice_at(j->work + slice_floats(d) * (size_t)thread, d);
    const size_t kh = (size_t)(h / r) * dk;
    for (int t0 = 0; t0 < j->T; t0 += CH) {
        const int m = j->T - t0 < CH ? j->T - t0 : CH;
        chunk(&s, m, j->o + (size_t)t0 * j->ldo + (size_t)h * dv, j->ldo,
              j->q + (size_t)t0 * j->ldq + kh, j->ldq, j->k + (size_t)t0 * j->ldk + kh, j->ldk,
              j->v + (size_t)t0 * j->ldv + (size_t)h * dv, j->ldv, j->g + (size_t)t0 * NV,
              j->beta + (size_t)t0 * NV, NV, h, dk, dv, j->S + (size_t)h * dk * dv, j->kt, j->mm);
    }
}

void moe8_gdn_chunked(float *o, int ldo, const float *q, int ldq, const float *k, int ldk,
                      const float *v, int ldv, const float *g, const float *beta, int T,
                      const moe8_gdn_dims *d, float *S, float *work, int n_threads) {
    const moe8_kernels *kt = moe8_kernels_get();
    const chunked_job j = {d, kt, kt->gemm_f32_nn ? kt->gemm_f32_nn : moe8_gemm_f32_nn_ref,
                           o, S, work, q, k, v, g, beta, ldo, ldq, ldk, ldv, T};
    moe8_pool_run(n_threads, d->n_v_heads, chunked_head, (void *)&j);
}
