/*
 * test_gdn.c — the Gated DeltaNet compute core (src/model/gdn.h) and its
 * kernels (kernels.h gemm_f32_nn, gdn_step) against hybrid_ref.h's
 * double-precision reference (transformers' qwen3_next, sharing no code with
 * src/). The driver runs on the table MOE8_ISA picks (ctest runs this once
 * per table, test_gdn_ISA; a table the CPU lacks exits 77); the two kernels
 * are checked on every table this machine runs, in every run.
 *
 * Checked: conv + SiLU prefill and one-token steps (state carried, split
 * runs = one run), q/k norms, gates, gated norm; the recurrent form and the
 * chunked form against the double recurrent one, for every length 1..300 on
 * a small shape (on 1 and 2 threads), at the chunk edges 63, 64, 65, 127, 128, 129 on shapes of
 * dk, dv 8..128 and NV/NK 1, 2, 3, from random initial states, and a prefill
 * cut into pieces followed by decode steps against one double pass; the
 * same bits whatever the thread count.
 * Bounds (fp32 against double), relative to the largest reference magnitude
 * of the output or state compared: 2e-5 for the recurrent form, 5e-5 for
 * the chunked one (its UT inverse and e^(G_i - G_j) factors add rounding),
 * k * 2^-23 * sum |a b| (x2) per element for the matrix product.
 */
#include <math.h>
#include <stdint.h>

#include "core/core.h"
#include "kernels/kernels.h"
#include "model/gdn.h"

#include "test.h"
#include "test_isa.h"
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function" /* the model-level half */
#include "fixture_model.h"
#include "forward_ref.h"
#pragma GCC diagnostic pop

static test_rng rng = {0x243f6a8885a308d3ULL};

static double unif(double lo, double hi) { return lo + (hi - lo) * test_rng_uniform(&rng); }
static void fill(float *x, size_t n, double s) {
    for (size_t i = 0; i < n; i++) x[i] = (float)(s * test_rng_normal(&rng));
}
static double *widen(const float *x, size_t n) {
    double *y = malloc(sizeof(double) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) y[i] = x[i];
    return y;
}
/* max |a - b| / max(max |b|, floor) */
static double rel_err(const float *a, const double *b, size_t n, double floor) {
    double e = 0, m = floor;
    for (size_t i = 0; i < n; i++) {
        e = fmax(e, fabs(a[i] - b[i]));
        m = fmax(m, fabs(b[i]));
        if (a[i] != a[i]) return INFINITY;
    }
    return e / m;
}

/* ---- kernels, every table the machine runs ----------------------------------------- */

static void check_gemm(const moe8_kernels *t) {
    static const int shapes[][3] = {{1, 1, 1}, {5, 7, 3}, {64, 64, 128}, {64, 128, 64}, {37, 24, 64},
                                    {128, 128, 64}, {13, 40, 29}, {64, 8, 8}, {8, 33, 17}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int flags = 0; flags < 8; flags++) {
            const int m = shapes[si][0], n = shapes[si][1], k = shapes[si][2], ldc = n + 3;
            float *a = malloc(sizeof(float) * (size_t)(m * k)), *b = malloc(sizeof(float) * (size_t)(k * n));
            float *c = malloc(sizeof(float) * (size_t)(m * ldc));
            double worst = 0;
            fill(a, (size_t)(m * k), 1.0), fill(b, (size_t)(k * n), 1.0), fill(c, (size_t)(m * ldc), 1.0);
            if (flags & MOE8_GEMM_TRI_A)
                for (int i = 0; i < m; i++)
                    for (int p = i + 1; p < k; p++) a[i * k + p] = 0.0f;
            float *c0 = malloc(sizeof(float) * (size_t)(m * ldc));
            memcpy(c0, c, sizeof(float) * (size_t)(m * ldc));
            t->gemm_f32_nn(c, ldc, a, k, b, n, m, n, k, flags);
            for (int i = 0; i < m; i++)
                for (int j = 0; j < n; j++) {
                    double s = (flags & MOE8_GEMM_ACC) ? c0[i * ldc + j] : 0, mag = fabs(s);
                    if ((flags & MOE8_GEMM_TRI_C) && j > i) continue;
                    for (int p = 0; p < k; p++) s += (double)a[i * k + p] * b[p * n + j], mag += fabs((double)a[i * k + p] * b[p * n + j]);
                    worst = fmax(worst, fabs(c[i * ldc + j] - s) / ((k + 1) * 0x1p-23 * 2 * mag + 1e-30));
                }
            for (int i = 0; i < m; i++) /* the padding column beyond n untouched */
                for (int j = n; j < ldc; j++) CHECK(c[i * ldc + j] == c0[i * ldc + j]);
            CHECKF(worst <= 1.0, "%s gemm_f32_nn %dx%dx%d flags %d: %.3g of the bound", t->isa, m, n, k, flags, worst);
            free(a), free(b), free(c), free(c0);
        }
}

static void check_step(const moe8_kernels *t) {
    static const int shapes[][2] = {{8, 8}, {128, 128}, {16, 24}, {40, 72}, {64, 100}, {8, 130}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int dk = shapes[si][0], dv = shapes[si][1];
        const hy_dims hd = {1, 1, dk, dv};
        float *S = malloc(sizeof(float) * (size_t)(dk * dv)), q[256], k[256], v[256], o[256];
        double gq, bq;
        fill(S, (size_t)(dk * dv), 0.5), fill(q, (size_t)dk, 1.0), fill(k, (size_t)dk, 1.0), fill(v, (size_t)dv, 1.0);
        double *Sd = widen(S, (size_t)(dk * dv)), *qd = widen(q, (size_t)dk), *kd = widen(k, (size_t)dk);
        double *vd = widen(v, (size_t)dv), od[256];
        gq = unif(-2, 0), bq = unif(0, 1);
        moe8_gdn_dims d = {1, 1, dk, dv, 1};
        moe8_gdn_qk_norm(q, dk, k, dk, 1, &d);
        t->gdn_step(o, S, q, k, v, expf((float)gq), (float)bq, dk, dv);
        hy_gdn_recurrent(od, qd, kd, vd, &gq, &bq, 1, hd, Sd);
        CHECKF(rel_err(o, od, (size_t)dv, 1e-3) < 2e-5, "%s gdn_step %dx%d: out %.3g", t->isa, dk, dv, rel_err(o, od, (size_t)dv, 1e-3));
        CHECKF(rel_err(S, Sd, (size_t)(dk * dv), 1e-3) < 2e-5, "%s gdn_step %dx%d: state", t->isa, dk, dv);
        free(S), free(Sd), free(qd), free(kd), free(vd);
    }
}

/* ---- conv, norms, gates ------------------------------------------------------------- */

static void check_conv(void) {
    static const int Ks[] = {4, 2, 1};
    for (size_t ki = 0; ki < 3; ki++) {
        const moe8_gdn_dims d = {2, 4, 8, 8, Ks[ki]};
        const int C = moe8_gdn_conv_channels(&d), K = d.conv_k, T = 9, ldx = C + 5;
        const size_t ns = moe8_gdn_conv_state_floats(&d) + 1;
        float *w = malloc(sizeof(float) * (size_t)(C * K)), *wt = malloc(sizeof(float) * (size_t)(C * K));
        float *x = malloc(sizeof(float) * (size_t)(T * ldx)), *y = malloc(sizeof(float) * (size_t)(T * C));
        float *st = malloc(sizeof(float) * ns), *st2 = malloc(sizeof(float) * ns);
        double *xd = malloc(sizeof(double) * (size_t)(T * C)), *yd = malloc(sizeof(double) * (size_t)(T * C));
        fill(w, (size_t)(C * K), 0.7), fill(x, (size_t)(T * ldx), 1.0), fill(st, ns, 1.0);
        memcpy(st2, st, sizeof(float) * ns);
        double *wd = widen(w, (size_t)(C * K)), *sd = widen(st, ns);
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++) xd[t * C + c] = x[t * ldx + c];
        fx_tensor wten;
        memset(&wten, 0, sizeof wten);
        wten.dtype = MOE8_DT_F64, wten.data = wd;
        hy_conv(yd, xd, T, C, K, &wten, sd);
        moe8_gdn_conv_weight(wt, w, &d);
        moe8_gdn_conv(y, C, x, ldx, T, &d, wt, st);
        CHECKF(rel_err(y, yd, (size_t)(T * C), 1.0) < 1e-5, "conv K %d prefill: %.3g", K, rel_err(y, yd, (size_t)(T * C), 1.0));
        CHECK(rel_err(st, sd, ns - 1, 1.0) == 0.0); /* the state is the inputs, copied */
        static const int cut[] = {2, 1, 1, 5}; /* pieces shorter and longer than K-1, steps */
        for (int i = 0, t0 = 0; i < 4; t0 += cut[i++])
            moe8_gdn_conv(y + t0 * C, C, x + t0 * ldx, ldx, cut[i], &d, wt, st2);
        CHECKF(rel_err(y, yd, (size_t)(T * C), 1.0) < 1e-5, "conv K %d in pieces", K);
        CHECK(rel_err(st2, sd, ns - 1, 1.0) == 0.0);
        free(w), free(wt), free(x), free(y), free(st), free(st2), free(xd), free(yd), free(wd), free(sd);
    }
}

static void check_small_ops(void) {
    enum { T = 5, NV = 6, NK = 3, dk = 24, dv = 40 };
    const moe8_gdn_dims d = {NK, NV, dk, dv, 4};
    float a[T * NV], b[T * NV], Al[NV], dt[NV], g[T * NV], be[T * NV];
    fill(a, T * NV, 4.0), fill(b, T * NV, 3.0), fill(Al, NV, 1.0), fill(dt, NV, 1.0);
    a[3] = 25.0f, a[4] = 19.5f, a[5] = -30.0f; /* softplus's threshold, both sides; its tail */
    moe8_gdn_gates(g, be, a, NV, b, NV, Al, dt, T, NV);
    for (int i = 0; i < T * NV; i++) {
        const double x = (double)a[i] + dt[i % NV];
        const double gd = -exp((double)Al[i % NV]) * hy_softplus(x), bd = hy_sigmoid(b[i]);
        CHECKF(fabs(g[i] - gd) <= 1e-6 * fabs(gd) + 1e-30, "g %d: %g vs %g", i, g[i], gd);
        CHECKF(fabs(be[i] - bd) <= 1e-6 * bd, "beta %d", i);
    }
    float q[T * NK * dk], k[T * NK * dk], o[T * NV * dv], z[T * NV * dv], w[dv], y[T * NV * dv];
    double qn[dk], kn[dk];
    fill(q, T * NK * dk, 2.0), fill(k, T * NK * dk, 0.01), fill(o, T * NV * dv, 3.0), fill(z, T * NV * dv, 2.0);
    fill(w, dv, 1.0);
    double *qd = widen(q, T * NK * dk), *kd = widen(k, T * NK * dk);
    const hy_dims hd = {NK, NV, dk, dv};
    moe8_gdn_qk_norm(q, NK * dk, k, NK * dk, T, &d);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < NK; h++) {
            hy_qk(qn, kn, qd, kd, t, h, hd);
            CHECK(rel_err(q + (t * NK + h) * dk, qn, dk, 0.0) < 2e-7);
            CHECK(rel_err(k + (t * NK + h) * dk, kn, dk, 0.0) < 2e-7);
        }
    moe8_gdn_gated_norm(y, NV * dv, o, NV * dv, z, NV * dv, w, T, NV, dv, 1e-6f);
    for (int r = 0; r < T * NV; r++) { /* norm before gate, w plain */
        double ss = 0, yd[dv];
        for (int j = 0; j < dv; j++) ss += (double)o[r * dv + j] * o[r * dv + j];
        for (int j = 0; j < dv; j++)
            yd[j] = o[r * dv + j] / sqrt(ss / dv + 1e-6) * w[j] * ref_silu(z[r * dv + j]);
        CHECKF(rel_err(y + r * dv, yd, dv, 0.0) < 1e-6, "gated norm row %d", r);
    }
    moe8_gdn_gated_norm(o, NV * dv, o, NV * dv, z, NV * dv, w, T, NV, dv, 1e-6f); /* in place */
    CHECK(!memcmp(o, y, sizeof y));
    free(qd), free(kd);
}

/* ---- the delta rule ------------------------------------------------------------------- */

typedef struct {
    moe8_gdn_dims d;
    int T;
    float *q, *k, *v, *g, *beta, *S0;   /* raw q, k [T][NK dk]; v [T][NV dv]; g, beta [T][NV]; S0 */
    double *od;                         /* [T][NV dv] the double recurrent output from S0 */
    double **snap;                      /* [T + 1]: the double state after t tokens (or NULL) */
} gcase;

static size_t nS(const gcase *c) { return moe8_gdn_state_floats(&c->d); }

/* Random inputs (gates of realistic range through moe8_gdn_gates) and the
 * double recurrent pass, keeping the states after the lengths in keep[]
 * (all when keep is NULL). */
static void gcase_make(gcase *c, moe8_gdn_dims d, int T, const int *keep, int n_keep) {
    const int NK = d.n_k_heads, NV = d.n_v_heads;
    float *a = malloc(sizeof(float) * (size_t)(T * NV)), *b = malloc(sizeof(float) * (size_t)(T * NV));
    float Al[256], dt[256];
    c->d = d, c->T = T;
    c->q = malloc(sizeof(float) * (size_t)(T * NK * d.dk)), c->k = malloc(sizeof(float) * (size_t)(T * NK * d.dk));
    c->v = malloc(sizeof(float) * (size_t)(T * NV * d.dv));
    c->g = malloc(sizeof(float) * (size_t)(T * NV)), c->beta = malloc(sizeof(float) * (size_t)(T * NV));
    c->S0 = malloc(sizeof(float) * nS(c));
    fill(c->q, (size_t)(T * NK * d.dk), 1.0), fill(c->k, (size_t)(T * NK * d.dk), 1.0);
    fill(c->v, (size_t)(T * NV * d.dv), 1.0), fill(c->S0, nS(c), 0.3);
    fill(a, (size_t)(T * NV), 1.0), fill(b, (size_t)(T * NV), 1.5);
    for (int h = 0; h < NV; h++) Al[h] = (float)unif(-2.5, 1.0), dt[h] = (float)unif(-1, 1);
    moe8_gdn_gates(c->g, c->beta, a, NV, b, NV, Al, dt, T, NV);
    free(a), free(b);
    double *qd = widen(c->q, (size_t)(T * NK * d.dk)), *kd = widen(c->k, (size_t)(T * NK * d.dk));
    double *vd = widen(c->v, (size_t)(T * NV * d.dv)), *gd = widen(c->g, (size_t)(T * NV));
    double *bd = widen(c->beta, (size_t)(T * NV)), *S = widen(c->S0, nS(c));
    const hy_dims hd = {NK, NV, d.dk, d.dv};
    c->od = malloc(sizeof(double) * (size_t)(T * NV * d.dv));
    c->snap = calloc((size_t)T + 1, sizeof(double *));
    for (int t = 0; t < T; t++) { /* token by token: the reference's state after each */
        hy_gdn_recurrent(c->od + (size_t)t * NV * d.dv, qd + (size_t)t * NK * d.dk, kd + (size_t)t * NK * d.dk,
                         vd + (size_t)t * NV * d.dv, gd + t * NV, bd + t * NV, 1, hd, S);
        int want = !keep;
        for (int i = 0; i < n_keep; i++) want |= keep[i] == t + 1;
        if (want) {
            c->snap[t + 1] = malloc(sizeof(double) * nS(c));
            memcpy(c->snap[t + 1], S, sizeof(double) * nS(c));
        }
    }
    free(qd), free(kd), free(vd), free(gd), free(bd), free(S);
}

static void gcase_free(gcase *c) {
    for (int t = 0; t <= c->T; t++) free(c->snap[t]);
    free(c->snap), free(c->od), free(c->q), free(c->k), free(c->v), free(c->g), free(c->beta), free(c->S0);
}

enum { RECURRENT, CHUNKED };

/* Tokens t0..t0+n of case c by `form` on state S (float), outputs into o
 * rows t0.. (stride NV dv). q, k are normalised on copies. */
static void run_form(const gcase *c, int form, int t0, int n, float *o, float *S, int n_threads) {
    const moe8_gdn_dims *d = &c->d;
    const int lq = d->n_k_heads * d->dk, lv = d->n_v_heads * d->dv, NV = d->n_v_heads;
    float *q = malloc(sizeof(float) * (size_t)(n * lq)), *k = malloc(sizeof(float) * (size_t)(n * lq));
    memcpy(q, c->q + (size_t)t0 * lq, sizeof(float) * (size_t)(n * lq));
    memcpy(k, c->k + (size_t)t0 * lq, sizeof(float) * (size_t)(n * lq));
    moe8_gdn_qk_norm(q, lq, k, lq, n, d);
    if (form == RECURRENT) {
        moe8_gdn_recurrent(o + (size_t)t0 * lv, lv, q, lq, k, lq, c->v + (size_t)t0 * lv, lv, c->g + t0 * NV,
                           c->beta + t0 * NV, n, d, S, n_threads);
    } else {
        float *work = malloc(sizeof(float) * moe8_gdn_chunk_work_floats(d, n_threads));
        moe8_gdn_chunked(o + (size_t)t0 * lv, lv, q, lq, k, lq, c->v + (size_t)t0 * lv, lv, c->g + t0 * NV,
                         c->beta + t0 * NV, n, d, S, work, n_threads);
        free(work);
    }
    free(q), free(k);
}

static const double BOUND[2] = {2e-5, 5e-5};
static double worst[2][2]; /* [form][out, state] the largest errors seen, printed */

static void compare(const gcase *c, int form, int L, const float *o, const float *S, const char *what) {
    const size_t lv = (size_t)c->d.n_v_heads * c->d.dv;
    const double eo = rel_err(o, c->od, (size_t)L * lv, 1e-3), es = rel_err(S, c->snap[L], nS(c), 1e-3);
    worst[form][0] = fmax(worst[form][0], eo), worst[form][1] = fmax(worst[form][1], es);
    CHECKF(eo < BOUND[form] && es < BOUND[form], "%s %s NK %d NV %d dk %d dv %d T %d: out %.3g state %.3g",
           what, form ? "chunked" : "recurrent", c->d.n_k_heads, c->d.n_v_heads, c->d.dk, c->d.dv, L, eo, es);
}

/* Every length 1..300 from one random state, chunked; recurrent at 300. */
static void check_all_lengths(void) {
    const moe8_gdn_dims d = {1, 2, 8, 16, 4};
    enum { TMAX = 300 };
    gcase c;
    gcase_make(&c, d, TMAX, NULL, 0);
    float *o = malloc(sizeof(float) * (size_t)(TMAX * 2 * 16)), *S = malloc(sizeof(float) * nS(&c));
    for (int L = 1; L <= TMAX; L++) {
        memcpy(S, c.S0, sizeof(float) * nS(&c));
        run_form(&c, CHUNKED, 0, L, o, S, 1 + L % 2);
        compare(&c, CHUNKED, L, o, S, "lengths");
    }
    memcpy(S, c.S0, sizeof(float) * nS(&c));
    run_form(&c, RECURRENT, 0, TMAX, o, S, 2);
    compare(&c, RECURRENT, TMAX, o, S, "lengths");
    free(o), free(S);
    gcase_free(&c);
}

/* The chunk edges on head shapes of dk, dv 8..128, NV / NK 1, 2, 3. */
static void check_shapes(void) {
    static const moe8_gdn_dims ds[] = {{1, 1, 128, 128, 4}, {2, 4, 128, 128, 4}, {2, 4, 64, 32, 4},
                                       {1, 3, 16, 8, 4},    {2, 2, 8, 128, 4},   {1, 2, 40, 72, 4}};
    static const int Ls[] = {63, 64, 65, 127, 128, 129};
    for (size_t si = 0; si < sizeof ds / sizeof ds[0]; si++) {
        gcase c;
        gcase_make(&c, ds[si], 129, Ls, 6);
        float *o = malloc(sizeof(float) * (size_t)129 * ds[si].n_v_heads * ds[si].dv);
        float *S = malloc(sizeof(float) * nS(&c));
        for (int li = 0; li < 6; li++)
            for (int form = 0; form < 2; form++) {
                if (form == RECURRENT && li != 5 && si > 1) continue;
                memcpy(S, c.S0, sizeof(float) * nS(&c));
                run_form(&c, form, 0, Ls[li], o, S, 2);
                compare(&c, form, Ls[li], o, S, "shapes");
            }
        if (si == 1) { /* the same bits on 1 and 3 threads (work splits by value head only) */
            const size_t no = (size_t)129 * ds[si].n_v_heads * ds[si].dv;
            float *o1 = malloc(sizeof(float) * no), *S1 = malloc(sizeof(float) * nS(&c));
            for (int form = 0; form < 2; form++) {
                memcpy(S, c.S0, sizeof(float) * nS(&c)), memcpy(S1, c.S0, sizeof(float) * nS(&c));
                run_form(&c, form, 0, 129, o, S, 1);
                run_form(&c, form, 0, 129, o1, S1, 3);
                CHECK(!memcmp(o, o1, sizeof(float) * no) && !memcmp(S, S1, sizeof(float) * nS(&c)));
            }
            free(o1), free(S1);
        }
        free(o), free(S);
        gcase_free(&c);
    }
}

/* A prefill cut into pieces (chunked and recurrent), then decode steps of
 * three sequences at once (moe8_gdn_decode), against one double pass each. */
static void check_split(void) {
    const moe8_gdn_dims d = {2, 4, 32, 24, 4};
    static const int cut[][2] = {{70, CHUNKED}, {1, CHUNKED}, {64, CHUNKED}, {65, RECURRENT}, {3, CHUNKED}};
    enum { NSEQ = 3, NDEC = 5, TP = 203, TT = TP + NDEC };
    const int lq = d.n_k_heads * d.dk, lv = d.n_v_heads * d.dv, NV = d.n_v_heads;
    gcase c[NSEQ];
    float *o[NSEQ], *S[NSEQ];
    int keep[] = {TP, TT};
    for (int s = 0; s < NSEQ; s++) {
        gcase_make(&c[s], d, TT, keep, 2);
        o[s] = malloc(sizeof(float) * (size_t)(TT * lv)), S[s] = malloc(sizeof(float) * nS(&c[s]));
        memcpy(S[s], c[s].S0, sizeof(float) * nS(&c[s]));
        for (int i = 0, t0 = 0; i < 5; t0 += cut[i++][0]) run_form(&c[s], cut[i][1], t0, cut[i][0], o[s], S[s], 2);
        compare(&c[s], CHUNKED, TP, o[s], S[s], "pieces");
    }
    for (int t = TP; t < TT; t++) { /* one token of each sequence per call */
        float q[NSEQ][64], k[NSEQ][64], v[NSEQ][96], g[NSEQ][4], be[NSEQ][4], od[NSEQ][96];
        for (int s = 0; s < NSEQ; s++) {
            memcpy(q[s], c[s].q + t * lq, sizeof(float) * lq), memcpy(k[s], c[s].k + t * lq, sizeof(float) * lq);
            memcpy(v[s], c[s].v + t * lv, sizeof(float) * lv);
            memcpy(g[s], c[s].g + t * NV, sizeof(float) * NV), memcpy(be[s], c[s].beta + t * NV, sizeof(float) * NV);
        }
        moe8_gdn_qk_norm(q[0], 64, k[0], 64, NSEQ, &d);
        moe8_gdn_decode(od[0], 96, q[0], 64, k[0], 64, v[0], 96, g[0], be[0], NSEQ, &d, S, 2);
        for (int s = 0; s < NSEQ; s++) memcpy(o[s] + t * lv, od[s], sizeof(float) * lv);
    }
    for (int s = 0; s < NSEQ; s++) {
        compare(&c[s], RECURRENT, TT, o[s], S[s], "decode after pieces");
        free(o[s]), free(S[s]);
        gcase_free(&c[s]);
    }
}

int main(void) {
    test_table_or_skip();
    for (int i = 0; i < moe8_kernels_n_tables(); i++) {
        const moe8_kernels *t = moe8_kernels_table(i);
        if (!moe8_kernels_supported(t)) continue;
        check_gemm(t);
        check_step(t);
    }
    check_conv();
    check_small_ops();
    check_all_lengths();
    check_shapes();
    check_split();
    printf("largest errors (relative to the largest reference value): recurrent out %.2g state %.2g, "
           "chunked out %.2g state %.2g\n", worst[0][0], worst[0][1], worst[1][0], worst[1][1]);
    return test_summary();
}
