/*
 * test_moe_layer.c — the W8A8 dynamic MoE layer (SEMANTICS §1-§4) against the
 * independent reference in moe_ref.h, on a table of shapes (H, I not
 * multiples of 32/64; E up to 128; T up to 300): activation codes and int32
 * accumulators exact, output within 1e-5 of the reference on the same
 * quantized operands and within 5e-2 (relative L2) of the unquantized result,
 * 1 vs 2 threads and ref vs dispatched kernels bit-identical, zero rows,
 * unused experts, one busy expert, ties, EP ranges, TP slices, weight offsets,
 * float experts (f32/bf16/f16), and errors.
 */
#include <stdint.h>

#include "moe/moe.h"
#include "moe8.h"
#include "moe_ref.h"
#include "test.h"
#include "test_isa.h"

static test_rng rng = {0xfeedbeefULL};

static float *gaussian(size_t n, double scale) {
    float *v = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) v[i] = (float)(scale * test_rng_normal(&rng));
    return v;
}

/* ======================================================================== */
/* Test model: expert weights in checkpoint layout + their exact values      */
/* ======================================================================== */

typedef struct {
    int E, H, I, is_float, offsets;
    moe8_dtype wdt, sdt;
    int8_t *q[3];
    void *raw_s[3], *raw_o[3], *raw_f[3];
    double *s[3], *o[3], *f[3];
    ref_expert *rex;
    moe8_moe_expert *mex;
} tmodel;

static void proj_dims(const tmodel *m, int p, int *n, int *k) {
    *n = p < 2 ? m->I : m->H;
    *k = p < 2 ? m->H : m->I;
}

/* Store v in dtype dt at raw[i]; return the stored value, decoded independently. */
static double store(void *raw, moe8_dtype dt, size_t i, float v) {
    if (dt == MOE8_DT_F32) {
        ((float *)raw)[i] = v;
        return v;
    }
    uint16_t b = dt == MOE8_DT_BF16 ? moe8_f32_to_bf16(v) : moe8_f32_to_f16(v);
    ((uint16_t *)raw)[i] = b;
    return dt == MOE8_DT_BF16 ? ref_bf16(b) : ref_f16(b);
}

static tmodel *tmodel_new(int E, int H, int I, int is_float, moe8_dtype dt, int offsets) {
    tmodel *m = calloc(1, sizeof *m);
    m->E = E, m->H = H, m->I = I, m->is_float = is_float, m->offsets = offsets;
    m->wdt = is_float ? dt : MOE8_DT_I8;
    m->sdt = is_float ? MOE8_DT_F32 : dt;
    m->rex = calloc((size_t)E, sizeof *m->rex);
    m->mex = calloc((size_t)E, sizeof *m->mex);
    for (int p = 0; p < 3; p++) {
        int n, k;
        proj_dims(m, p, &n, &k);
        size_t nk = (size_t)E * n * k, ne = (size_t)E * n, es = moe8_dtype_size(dt);
        if (is_float) {
            m->raw_f[p] = malloc(nk * es);
            m->f[p] = malloc(nk * sizeof(double));
            for (size_t i = 0; i < nk; i++)
                m->f[p][i] = store(m->raw_f[p], dt, i, (float)(test_rng_normal(&rng) / sqrt(k)));
            continue;
        }
        m->q[p] = malloc(nk);
        m->raw_s[p] = malloc(ne * es);
        m->s[p] = malloc(ne * sizeof(double));
        for (size_t i = 0; i < nk; i++) {
            int v = (int)(test_rng_u64(&rng) % (offsets ? 256 : 255)) - (offsets ? 128 : 127);
            m->q[p][i] = (int8_t)(offsets && i % 7 == 0 ? -128 : v);
        }
        for (size_t i = 0; i < ne; i++)
            m->s[p][i] = store(m->raw_s[p], dt, i,
                               (float)((0.5 + test_rng_uniform(&rng)) / (73.0 * sqrt(k))));
        if (offsets) {
            m->raw_o[p] = malloc(ne * es);
            m->o[p] = malloc(ne * sizeof(double));
            for (size_t i = 0; i < ne; i++)
                m->o[p][i] = store(m->raw_o[p], dt, i, (float)((int)(test_rng_u64(&rng) % 9) - 4));
        }
    }
    for (int e = 0; e < E; e++)
        for (int p = 0; p < 3; p++) {
            int n, k;
            proj_dims(m, p, &n, &k);
            size_t es = moe8_dtype_size(dt), off = (size_t)e * n * k;
            moe8_moe_weight *w = p == 0 ? &m->mex[e].gate : p == 1 ? &m->mex[e].up : &m->mex[e].down;
            if (is_float) {
                m->rex[e].f[p] = m->f[p] + off;
                w->data = (char *)m->raw_f[p] + off * es;
                w->dtype = dt;
                continue;
            }
            m->rex[e].q[p] = m->q[p] + off;
            m->rex[e].s[p] = m->s[p] + (size_t)e * n;
            m->rex[e].o[p] = offsets ? m->o[p] + (size_t)e * n : NULL;
            w->data = m->q[p] + off;
            w->dtype = MOE8_DT_I8;
            w->scale = (char *)m->raw_s[p] + (size_t)e * n * es;
            w->scale_dtype = dt;
            if (offsets) {
                w->offset = (char *)m->raw_o[p] + (size_t)e * n * es;
                w->offset_dtype = dt;
            }
        }
    return m;
}

static void tmodel_free(tmodel *m) {
    for (int p = 0; p < 3; p++) {
        free(m->q[p]);
        free(m->raw_s[p]);
        free(m->raw_o[p]);
        free(m->raw_f[p]);
        free(m->s[p]);
        free(m->o[p]);
        free(m->f[p]);
    }
    free(m->rex);
    free(m->mex);
    free(m);
}

static moe8_moe_layer *make_layer(const tmodel *m, const moe8_router_params *rp, int i0, int i1,
                                  int first, int last, const void *router, moe8_dtype rdt) {
    moe8_moe_layer_desc d = moe8_moe_layer_desc_default();
    moe8_moe_layer *L = NULL;
    moe8_error err;
    d.name = "test.mlp";
    d.n_expert = m->E;
    d.hidden = m->H;
    d.intermediate = m->I;
    d.i_begin = i0, d.i_end = i1;
    d.expert_first = first, d.expert_last = last;
    d.quant = m->is_float ? MOE8_QUANT_FLOAT : MOE8_QUANT_W8A8_DYNAMIC;
    d.experts = m->mex;
    d.router = router;
    d.router_dtype = rdt;
    d.router_params = *rp;
    moe8_status st = moe8_moe_layer_create(&d, &L, &err);
    CHECKF(st == MOE8_OK, "create: %s", err.message);
    return L;
}

static ref_layer ref_of(const tmodel *m, int K, int i0, int i1, int first, int last) {
    ref_layer r = {m->E, m->H, m->I, i0, i1, first, last, K, m->rex};
    if (i1 == 0) r.i1 = m->I;
    if (last == 0) r.last = m->E;
    return r;
}

static ref_router ref_router_of(const moe8_router_params *p) {
    ref_router r = {p->top_k, p->renormalize, p->scoring == MOE8_SCORING_SIGMOID,
                    p->use_grouped_topk, p->num_expert_group, p->topk_group,
                    p->group_score == MOE8_GROUP_SCORE_TOP2_SUM, p->e_score_correction_bias,
                    p->routed_scaling_factor};
    return r;
}

/* ======================================================================== */
/* Checks on one forward                                                     */
/* ======================================================================== */

/* Forward on a fresh workspace with n_threads threads and kernel table k. */
static float *forward(const moe8_moe_layer *L, const float *h, int T, const float *logits,
                      int n_threads, const moe8_kernels *k, moe8_moe_workspace **keep) {
    moe8_moe_workspace *ws = NULL;
    moe8_error err;
    float *out = malloc(sizeof(float) * (size_t)T * L->hidden);
    CHECK(moe8_moe_workspace_create(L, T, n_threads, &ws, &err) == MOE8_OK);
    moe8_status st = moe8_moe_layer_forward_k(L, ws, k, h, T, logits, out, &err);
    CHECKF(st == MOE8_OK, "forward: %s", err.message);
    if (keep)
        *keep = ws;
    else
        moe8_moe_workspace_free(ws);
    return out;
}

/* The layer's A codes for (t, j), for ref_moe_quant. */
static const int8_t *ws_acodes(void *user, int t, int j, float *sa, int32_t *asum) {
    const moe8_moe_workspace *ws = user;
    int r = ws->row_of[t * ws->layer->rp.top_k + j];
    *sa = ws->sa[r];
    *asum = ws->asum[r];
    return ws->aq + (size_t)r * ws->lda;
}

/* Routing, codes and int32 accumulators of the last forward on ws. */
static void check_intermediates(const char *what, const tmodel *m, const moe8_moe_layer *L,
                                const moe8_moe_workspace *ws, const float *h, int T,
                                const float *logits, const moe8_router_params *rp,
                                const ref_layer *rl) {
    const moe8_kernels *k = moe8_kernels_get();
    const int H = m->H, K = rp->top_k, IL = L->inter;
    ref_router rr = ref_router_of(rp);
    int32_t rids[8];
    double rw[8];
    int8_t *q = malloc((size_t)H);
    int32_t *acc = malloc(sizeof(int32_t) * (H > IL ? H : IL));
    long bad_route = 0, bad_code = 0, bad_acc = 0;
    for (int t = 0; t < T; t++) {
        float sx;
        int32_t xs;
        ref_route_token(logits + (size_t)t * m->E, m->E, &rr, rids, rw);
        for (int j = 0; j < K; j++)
            bad_route += ws->ids[t * K + j] != rids[j] ||
                         !(fabs(ws->weights[t * K + j] - rw[j]) <= 1e-6);
        ref_quant_row(h + (size_t)t * H, H, q, &sx, &xs);
        bad_code += memcmp(q, ws->xq_tok + (size_t)t * ws->ldq, (size_t)H) != 0 ||
                    sx != ws->sx_tok[t] || xs != ws->xsum_tok[t];
        for (int j = 0; j < K; j++) {
            const int e = ws->ids[t * K + j], r = ws->row_of[t * K + j];
            if (e < L->first || e >= L->last) {
                bad_acc += r != -1;
                continue;
            }
            const moe8_qexpert *qe = &L->qe[e - L->first];
            const ref_expert *x = &rl->ex[e];
            for (int p = 0; p < 2; p++) {
                k->gemm_q8_i32(acc, IL, q, ws->ldq, p ? &qe->up : &qe->gate, 1, 0, IL);
                for (int n = 0; n < IL; n++)
                    bad_acc += acc[n] != ref_dot_q(q, x->q[p], H, rl->i0 + n, 0, H);
            }
            const int8_t *a = ws->aq + (size_t)r * ws->lda;
            k->gemm_q8_i32(acc, H, a, ws->lda, &qe->down, 1, 0, H);
            for (int n = 0; n < H; n++) bad_acc += acc[n] != ref_dot_q(a, x->q[2], m->I, n, rl->i0, IL);
        }
    }
    CHECKF(bad_route == 0, "%s: %ld routing slots differ", what, bad_route);
    CHECKF(bad_code == 0, "%s: %ld token code rows differ", what, bad_code);
    CHECKF(bad_acc == 0, "%s: %ld int32 accumulators differ", what, bad_acc);
    free(q);
    free(acc);
}

/* Output vs the reference on the same operands (1e-5) and vs the float
 * result (5e-2 L2), A codes close to the reference's own. */
static void check_output(const char *what, const tmodel *m, const moe8_moe_workspace *ws,
                         const float *h, int T, const float *out, const ref_layer *rl,
                         int check_float) {
    const size_t n = (size_t)T * m->H;
    double *ro = malloc(sizeof(double) * n), *wd = malloc(sizeof(double) * T * rl->top_k);
    long mism = 0;
    int maxd = 0;
    for (int i = 0; i < T * rl->top_k; i++) wd[i] = ws->weights[i];
    if (!m->is_float) {
        ref_moe_quant(rl, h, T, ws->ids, wd, ws_acodes, (void *)ws, ro, &mism, &maxd);
        double e = ref_rel_max(out, ro, n);
        CHECKF(e <= 1e-5, "%s: rel err %.3g vs reference on the same codes", what, e);
        CHECKF(maxd <= 1 && mism <= 1 + (long)(0.01 * ws->n_rows * (rl->i1 - rl->i0)),
               "%s: A codes: %ld differ, max diff %d", what, mism, maxd);
    }
    if (check_float) {
        ref_moe_float(rl, h, T, ws->ids, wd, ro);
        double e = m->is_float ? ref_rel_max(out, ro, n) : ref_rel_l2(out, ro, n);
        double tol = m->is_float ? 1e-4 : 5e-2;
        CHECKF(e <= tol, "%s: rel err %.3g vs unquantized double (tol %g)", what, e, tol);
    }
    for (size_t i = 0; i < n; i++)
        if (!isfinite(out[i])) {
            CHECKF(0, "%s: non-finite output at %zu", what, i);
            break;
        }
    free(ro);
    free(wd);
}

/* ======================================================================== */
/* The shape table                                                           */
/* ======================================================================== */

typedef struct {
    int T, E, K, H, I, offsets;
    moe8_dtype sdt;
    int router;   /* 0: logits given, else router weight in this dtype + 1 */
    int grouped;
} lcase;

static void run_case(const lcase *c) {
    char what[96];
    tmodel *m = tmodel_new(c->E, c->H, c->I, 0, c->sdt, c->offsets);
    moe8_router_params rp = moe8_router_params_default();
    float *h = gaussian((size_t)c->T * c->H, 1.0), *logits = gaussian((size_t)c->T * c->E, 1.5);
    float *rw_f = NULL;
    void *router = NULL;
    moe8_dtype rdt = MOE8_DT_F32;
    snprintf(what, sizeof what, "T=%d E=%d K=%d H=%d I=%d", c->T, c->E, c->K, c->H, c->I);
    if (c->T >= 3) memset(h + c->H, 0, sizeof(float) * c->H); /* token 1: all zero */
    rp.top_k = c->K;
    rp.renormalize = 1;
    if (c->grouped) {
        rp.use_grouped_topk = 1;
        rp.num_expert_group = 4;
        rp.topk_group = 2;
        rp.scoring = MOE8_SCORING_SIGMOID;
    }
    if (c->router) {
        rdt = (moe8_dtype)(c->router - 1);
        rw_f = malloc(sizeof(float) * c->E * c->H);
        router = malloc(moe8_dtype_size(rdt) * c->E * c->H);
        for (int i = 0; i < c->E * c->H; i++)
            rw_f[i] = (float)store(router, rdt, (size_t)i, (float)(test_rng_normal(&rng) * 0.1));
    }
    moe8_moe_layer *L = make_layer(m, &rp, 0, 0, 0, 0, router, rdt);
    ref_layer rl = ref_of(m, c->K, 0, 0, 0, 0);
    moe8_moe_workspace *ws;
    const float *lg = c->router ? NULL : logits;
    float *out_ref = forward(L, h, c->T, lg, 1, moe8_kernels_ref(), NULL);
    float *out2 = forward(L, h, c->T, lg, 2, moe8_kernels_get(), NULL);
    float *out = forward(L, h, c->T, lg, 1, moe8_kernels_get(), &ws);
    size_t n = (size_t)c->T * c->H;
    CHECKF(memcmp(out, out2, n * sizeof(float)) == 0, "%s: 1 vs 2 threads differ", what);
    if (c->router) { /* float router GEMMs may round differently: logits differ */
        double *od = malloc(sizeof(double) * n);
        for (size_t i = 0; i < n; i++) od[i] = out_ref[i];
        CHECKF(ref_rel_max(out, od, n) <= 1e-5, "%s: ref vs %s kernels", what,
               moe8_kernels_get()->isa);
        free(od);
    } else {
        CHECKF(memcmp(out, out_ref, n * sizeof(float)) == 0, "%s: ref vs %s kernels differ",
               what, moe8_kernels_get()->isa);
    }
    if (c->router) { /* logits computed by the layer: vs double h @ Wg^T */
        double *rl_d = malloc(sizeof(double) * c->T * c->E);
        for (int t = 0; t < c->T; t++)
            for (int e = 0; e < c->E; e++) {
                double s = 0.0;
                for (int i = 0; i < c->H; i++) s += (double)h[t * c->H + i] * rw_f[e * c->H + i];
                rl_d[t * c->E + e] = s;
            }
        double e = ref_rel_max(ws->logits, rl_d, (size_t)c->T * c->E);
        CHECKF(e <= 1e-5, "%s: router logits rel err %.3g", what, e);
        free(rl_d);
        lg = ws->logits;
    }
    check_intermediates(what, m, L, ws, h, c->T, lg, &rp, &rl);
    check_output(what, m, ws, h, c->T, out, &rl, 1);
    if (c->T >= 3) {
        int nz = 0;
        for (int i = 0; i < c->H; i++) nz += out[c->H + i] != 0.0f;
        CHECKF(nz == 0, "%s: zero token gives %d non-zero outputs", what, nz);
    }
    moe8_moe_workspace_free(ws);
    moe8_moe_layer_free(L);
    tmodel_free(m);
    free(h);
    free(logits);
    free(out);
    free(out2);
    free(out_ref);
    free(rw_f);
    free(router);
}

static void test_table(void) {
    static const lcase cases[] = {
        {1, 4, 1, 72, 40, 0, MOE8_DT_F32, 0, 0},
        {2, 8, 2, 64, 32, 1, MOE8_DT_BF16, 0, 0},
        {3, 8, 8, 72, 40, 0, MOE8_DT_F16, 1 + MOE8_DT_BF16, 0},
        {7, 128, 8, 64, 48, 0, MOE8_DT_BF16, 0, 0},
        {17, 8, 2, 72, 40, 1, MOE8_DT_F32, 0, 1},
        {64, 4, 2, 96, 64, 0, MOE8_DT_F32, 1 + MOE8_DT_F32, 0},
        {129, 8, 2, 72, 40, 0, MOE8_DT_BF16, 0, 0},
        {300, 128, 8, 64, 32, 1, MOE8_DT_F32, 0, 0},
        {1, 128, 8, 136, 88, 0, MOE8_DT_BF16, 1 + MOE8_DT_F16, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i]);
}

/* ======================================================================== */
/* Routing extremes through the layer                                        */
/* ======================================================================== */

/* Given logits: run 1 and 2 threads, check against the reference. */
static void run_logits(const char *what, tmodel *m, const moe8_router_params *rp, const float *h,
                       int T, const float *logits) {
    moe8_moe_layer *L = make_layer(m, rp, 0, 0, 0, 0, NULL, MOE8_DT_F32);
    ref_layer rl = ref_of(m, rp->top_k, 0, 0, 0, 0);
    moe8_moe_workspace *ws;
    float *out2 = forward(L, h, T, logits, 2, moe8_kernels_get(), NULL);
    float *out = forward(L, h, T, logits, 1, moe8_kernels_get(), &ws);
    CHECKF(memcmp(out, out2, sizeof(float) * T * m->H) == 0, "%s: threads differ", what);
    check_intermediates(what, m, L, ws, h, T, logits, rp, &rl);
    check_output(what, m, ws, h, T, out, &rl, 1);
    moe8_moe_workspace_free(ws);
    moe8_moe_layer_free(L);
    free(out);
    free(out2);
}

static void test_routing_extremes(void) {
    const int T = 17, E = 8, H = 72, I = 40;
    tmodel *m = tmodel_new(E, H, I, 0, MOE8_DT_F32, 0);
    moe8_router_params rp = moe8_router_params_default();
    float *h = gaussian((size_t)T * H, 1.0), *lg = gaussian((size_t)T * E, 1.0);
    rp.renormalize = 1;
    for (int t = 0; t < T; t++) lg[t * E + 5] = 20.0f; /* every token: expert 5 first */
    rp.top_k = 1;
    run_logits("all to one expert", m, &rp, h, T, lg);
    rp.top_k = 2;
    run_logits("one busy expert, K=2", m, &rp, h, T, lg);
    memset(lg, 0, sizeof(float) * T * E); /* ties: experts 0..K-1 for all */
    rp.top_k = 8;
    run_logits("all ties", m, &rp, h, T, lg);
    memset(h, 0, sizeof(float) * T * H); /* every row zero */
    rp.top_k = 2;
    moe8_moe_layer *L = make_layer(m, &rp, 0, 0, 0, 0, NULL, MOE8_DT_F32);
    float *out = forward(L, h, T, lg, 2, moe8_kernels_get(), NULL);
    int nz = 0;
    for (int i = 0; i < T * H; i++) nz += out[i] != 0.0f || out[i] != out[i];
    CHECKF(nz == 0, "all-zero input: %d outputs not exactly 0", nz);
    moe8_moe_layer_free(L);
    free(out);
    free(h);
    free(lg);
    tmodel_free(m);
}

/* ======================================================================== */
/* Expert and tensor parallelism                                             */
/* ======================================================================== */

static void test_expert_parallel(void) {
    const int T = 17, E = 8, H = 72, I = 40, K = 2;
    static const int ranges[][2] = {{0, 3}, {3, 5}, {5, 8}};
    tmodel *m = tmodel_new(E, H, I, 0, MOE8_DT_BF16, 1);
    moe8_router_params rp = moe8_router_params_default();
    float *h = gaussian((size_t)T * H, 1.0), *lg = gaussian((size_t)T * E, 1.0);
    rp.top_k = K;
    for (int t = 0; t < T; t++) lg[t * E + 4] = -30.0f; /* expert 4 gets nothing */
    moe8_moe_layer *L = make_layer(m, &rp, 0, 0, 0, 0, NULL, MOE8_DT_F32);
    float *full = forward(L, h, T, lg, 1, moe8_kernels_get(), NULL);
    double *sum = calloc((size_t)T * H, sizeof(double));
    for (int r = 0; r < 3; r++) {
        char what[64];
        moe8_moe_layer *P = make_layer(m, &rp, 0, 0, ranges[r][0], ranges[r][1], NULL, MOE8_DT_F32);
        ref_layer rl = ref_of(m, K, 0, 0, ranges[r][0], ranges[r][1]);
        moe8_moe_workspace *ws;
        float *part2 = forward(P, h, T, lg, 2, moe8_kernels_get(), NULL);
        float *part = forward(P, h, T, lg, 1, moe8_kernels_get(), &ws);
        snprintf(what, sizeof what, "EP [%d, %d)", ranges[r][0], ranges[r][1]);
        CHECKF(memcmp(part, part2, sizeof(float) * T * H) == 0, "%s: threads differ", what);
        check_intermediates(what, m, P, ws, h, T, lg, &rp, &rl);
        check_output(what, m, ws, h, T, part, &rl, 0);
        for (int i = 0; i < T * H; i++) sum[i] += part[i];
        moe8_moe_workspace_free(ws);
        moe8_moe_layer_free(P);
        free(part);
        free(part2);
    }
    double e = ref_rel_max(full, sum, (size_t)T * H);
    CHECKF(e <= 1e-6, "EP: sum of partial outputs vs full: rel err %.3g", e);
    /* A range whose one expert receives no token: output exactly 0. */
    moe8_moe_layer *P = make_layer(m, &rp, 0, 0, 4, 5, NULL, MOE8_DT_F32);
    float *none = forward(P, h, T, lg, 2, moe8_kernels_get(), NULL);
    int nz = 0;
    for (int i = 0; i < T * H; i++) nz += none[i] != 0.0f;
    CHECKF(nz == 0, "EP range without tokens: %d non-zero outputs", nz);
    moe8_moe_layer_free(P);
    moe8_moe_layer_free(L);
    free(none);
    free(full);
    free(sum);
    free(h);
    free(lg);
    tmodel_free(m);
}

static void test_tensor_parallel(void) {
    const int T = 7, E = 8, H = 72, I = 80, K = 2;
    static const int slices[][2] = {{0, 40}, {40, 80}};
    tmodel *m = tmodel_new(E, H, I, 0, MOE8_DT_F32, 1);
    moe8_router_params rp = moe8_router_params_default();
    float *h = gaussian((size_t)T * H, 1.0), *lg = gaussian((size_t)T * E, 1.0);
    float *sumf = calloc((size_t)T * H, sizeof(float));
    double *full_d = malloc(sizeof(double) * T * H), *fl = malloc(sizeof(double) * T * H);
    double wd[7 * 2];
    rp.top_k = K;
    moe8_moe_layer *L = make_layer(m, &rp, 0, 0, 0, 0, NULL, MOE8_DT_F32);
    moe8_moe_workspace *wsf;
    float *full = forward(L, h, T, lg, 1, moe8_kernels_get(), &wsf);
    for (int s = 0; s < 2; s++) {
        char what[64];
        moe8_moe_layer *P = make_layer(m, &rp, slices[s][0], slices[s][1], 0, 0, NULL, MOE8_DT_F32);
        ref_layer rl = ref_of(m, K, slices[s][0], slices[s][1], 0, 0);
        moe8_moe_workspace *ws;
        float *part = forward(P, h, T, lg, 2, moe8_kernels_get(), &ws);
        snprintf(what, sizeof what, "TP [%d, %d)", slices[s][0], slices[s][1]);
        check_intermediates(what, m, P, ws, h, T, lg, &rp, &rl);
        check_output(what, m, ws, h, T, part, &rl, 0);
        for (int i = 0; i < T * H; i++) sumf[i] += part[i];
        moe8_moe_workspace_free(ws);
        moe8_moe_layer_free(P);
        free(part);
    }
    for (int i = 0; i < T * H; i++) full_d[i] = full[i];
    for (int i = 0; i < T * K; i++) wd[i] = wsf->weights[i];
    ref_layer rl = ref_of(m, K, 0, 0, 0, 0);
    ref_moe_float(&rl, h, T, wsf->ids, wd, fl);
    double e1 = ref_rel_l2(sumf, full_d, (size_t)T * H), e2 = ref_rel_l2(sumf, fl, (size_t)T * H);
    CHECKF(e1 <= 2e-2 && e1 > 0.0, "TP: sum of slices vs TP=1: rel L2 %.3g", e1);
    CHECKF(e2 <= 5e-2, "TP: sum of slices vs unquantized: rel L2 %.3g", e2);
    moe8_moe_workspace_free(wsf);
    moe8_moe_layer_free(L);
    free(full);
    free(sumf);
    free(full_d);
    free(fl);
    free(h);
    free(lg);
    tmodel_free(m);
}

/* ======================================================================== */
/* Float experts                                                             */
/* ======================================================================== */

static void test_float_experts(void) {
    static const moe8_dtype dts[] = {MOE8_DT_F32, MOE8_DT_BF16, MOE8_DT_F16};
    for (int d = 0; d < 3; d++)
        for (int tp = 0; tp < 2; tp++) {
            const int T = 9, E = 8, H = 72, I = 40, K = 2, i0 = tp ? 8 : 0, i1 = tp ? 40 : 0;
            char what[64];
            tmodel *m = tmodel_new(E, H, I, 1, dts[d], 0);
            moe8_router_params rp = moe8_router_params_default();
            float *h = gaussian((size_t)T * H, 1.0), *lg = gaussian((size_t)T * E, 1.0);
            rp.top_k = K;
            rp.renormalize = 1;
            moe8_moe_layer *L = make_layer(m, &rp, i0, i1, 0, 0, NULL, MOE8_DT_F32);
            ref_layer rl = ref_of(m, K, i0, i1, 0, 0);
            moe8_moe_workspace *ws;
            float *out2 = forward(L, h, T, lg, 2, moe8_kernels_get(), NULL);
            float *outr = forward(L, h, T, lg, 1, moe8_kernels_ref(), NULL);
            float *out = forward(L, h, T, lg, 1, moe8_kernels_get(), &ws);
            snprintf(what, sizeof what, "float experts %s%s", moe8_dtype_name(dts[d]),
                     tp ? " TP slice" : "");
            CHECKF(memcmp(out, out2, sizeof(float) * T * H) == 0, "%s: threads differ", what);
            /* Float kernels may sum in another order: ref vs dispatched within 1e-5. */
            double *od = malloc(sizeof(double) * T * H);
            for (int i = 0; i < T * H; i++) od[i] = outr[i];
            CHECKF(ref_rel_max(out, od, (size_t)T * H) <= 1e-5, "%s: ref vs dispatched", what);
            check_output(what, m, ws, h, T, out, &rl, 1);
            moe8_moe_workspace_free(ws);
            moe8_moe_layer_free(L);
            free(od);
            free(out);
            free(out2);
            free(outr);
            free(h);
            free(lg);
            tmodel_free(m);
        }
}

/* ======================================================================== */
/* Errors, memory                                                            */
/* ======================================================================== */

static moe8_status create_status(const tmodel *m, moe8_moe_layer_desc d, moe8_error *err) {
    moe8_moe_layer *L = NULL;
    d.name = "layers.9.mlp";
    d.n_expert = d.n_expert ? d.n_expert : m->E;
    d.hidden = m->H;
    d.intermediate = m->I;
    d.experts = m->mex;
    if (!d.router_params.top_k) d.router_params.top_k = 2;
    moe8_status st = moe8_moe_layer_create(&d, &L, err);
    moe8_moe_layer_free(L);
    return st;
}

static void test_errors(void) {
    tmodel *m = tmodel_new(4, 72, 40, 0, MOE8_DT_F32, 1);
    moe8_moe_layer_desc d = moe8_moe_layer_desc_default();
    moe8_error err;
    moe8_status st;
    float *o = m->raw_o[1];
    /* Offsets: fractional, out of range. */
    o[40 * 2 + 5] = 0.5f;
    st = create_status(m, d, &err);
    CHECKF(st == MOE8_ERR_INVALID_ARG && strstr(err.message, "layers.9.mlp") &&
               strstr(err.message, "expert 2 up_proj") && strstr(err.message, "weight_offset[5]"),
           "%s", err.message);
    o[40 * 2 + 5] = 200.0f;
    st = create_status(m, d, &err);
    CHECKF(st == MOE8_ERR_INVALID_ARG && strstr(err.message, "200"), "%s", err.message);
    o[40 * 2 + 5] = -128.0f; /* the edge is fine */
    CHECK(create_status(m, d, &err) == MOE8_OK);
    ((float *)m->raw_s[2])[72 * 3 + 1] = INFINITY;
    st = create_status(m, d, &err);
    CHECKF(st == MOE8_ERR_INVALID_ARG && strstr(err.message, "expert 3 down_proj"), "%s",
           err.message);
    ((float *)m->raw_s[2])[72 * 3 + 1] = 1.0f;
    m->mex[1].gate.dtype = MOE8_DT_I16;
    st = create_status(m, d, &err);
    CHECKF(st == MOE8_ERR_INVALID_ARG && strstr(err.message, "expert 1 gate_proj"), "%s",
           err.message);
    /* ... but a non-local expert is not read. */
    d.expert_first = 2, d.expert_last = 4;
    CHECK(create_status(m, d, &err) == MOE8_OK);
    m->mex[1].gate.dtype = MOE8_DT_I8;
    d = moe8_moe_layer_desc_default();
    d.i_begin = 10, d.i_end = 50;
    CHECK(create_status(m, d, &err) == MOE8_ERR_INVALID_ARG && strstr(err.message, "slice"));
    d = moe8_moe_layer_desc_default();
    d.expert_first = 3, d.expert_last = 9;
    CHECK(create_status(m, d, &err) == MOE8_ERR_INVALID_ARG && strstr(err.message, "expert range"));
    d = moe8_moe_layer_desc_default();
    d.router_params.top_k = 5;
    CHECK(create_status(m, d, &err) == MOE8_ERR_INVALID_ARG && strstr(err.message, "top_k"));
    d = moe8_moe_layer_desc_default();
    d.quant = MOE8_QUANT_W8A8;
    CHECK(create_status(m, d, &err) == MOE8_ERR_UNSUPPORTED);

    /* Forward errors. */
    moe8_router_params rp = moe8_router_params_default();
    rp.top_k = 2;
    moe8_moe_layer *L = make_layer(m, &rp, 0, 0, 0, 0, NULL, MOE8_DT_F32);
    moe8_moe_layer *L2 = make_layer(m, &rp, 0, 0, 0, 0, NULL, MOE8_DT_F32);
    moe8_router_params rp3 = rp;
    rp3.top_k = 3;
    moe8_moe_layer *L3 = make_layer(m, &rp3, 0, 0, 0, 0, NULL, MOE8_DT_F32);
    moe8_moe_workspace *ws;
    float h[3 * 72] = {0}, lg[3 * 4] = {0}, out[3 * 72];
    CHECK(moe8_moe_workspace_create(L, 2, 1, &ws, &err) == MOE8_OK);
    CHECK(moe8_moe_layer_forward(L, ws, h, 3, lg, out, &err) == MOE8_ERR_INVALID_ARG &&
          strstr(err.message, "exceed"));
    CHECK(moe8_moe_layer_forward(L, ws, h, 2, NULL, out, &err) == MOE8_ERR_INVALID_ARG &&
          strstr(err.message, "router"));
    /* A workspace serves every layer of its shape, and only those. */
    CHECK(moe8_moe_layer_same_shape(L, L2) && !moe8_moe_layer_same_shape(L, L3));
    CHECK(moe8_moe_layer_forward(L2, ws, h, 2, lg, out, &err) == MOE8_OK);
    CHECK(moe8_moe_layer_forward(L3, ws, h, 2, lg, out, &err) == MOE8_ERR_INVALID_ARG &&
          strstr(err.message, "another shape"));
    CHECK(moe8_moe_layer_forward(L, ws, h, 0, lg, out, &err) == MOE8_OK);
    moe8_moe_workspace_free(ws);
    CHECK(moe8_moe_workspace_create(L, 0, 1, &ws, &err) == MOE8_ERR_INVALID_ARG);
    moe8_moe_layer_free(L);
    moe8_moe_layer_free(L2);
    moe8_moe_layer_free(L3);
    tmodel_free(m);
}

static moe8_status bad_router(void *user, const float *logits, int T, int E, int K, int renorm,
                              int32_t *ids, float *w, moe8_error *err) {
    (void)user, (void)logits, (void)renorm, (void)err;
    for (int i = 0; i < T * K; i++) {
        ids[i] = (i % K) * (E - 1); /* 0, E-1 ... */
        w[i] = 0.5f;
    }
    if (user) ids[T * K - 1] = E + 3;
    return MOE8_OK;
}

static void test_custom_routing(void) {
    const int T = 5, E = 4, H = 72, I = 40;
    tmodel *m = tmodel_new(E, H, I, 0, MOE8_DT_F32, 0);
    moe8_router_params rp = moe8_router_params_default();
    float *h = gaussian((size_t)T * H, 1.0), lg[5 * 4] = {0}, out[5 * 72];
    moe8_error err;
    int flag = 1;
    rp.top_k = 2;
    rp.custom = bad_router;
    moe8_moe_layer *L = make_layer(m, &rp, 0, 0, 0, 0, NULL, MOE8_DT_F32);
    moe8_moe_workspace *ws;
    CHECK(moe8_moe_workspace_create(L, T, 2, &ws, &err) == MOE8_OK);
    CHECK(moe8_moe_layer_forward(L, ws, h, T, lg, out, &err) == MOE8_OK);
    const int32_t *ids;
    const float *w;
    int nt;
    moe8_moe_workspace_routing(ws, &nt, &ids, &w);
    CHECK(nt == T && ids[0] == 0 && ids[1] == 3 && w[1] == 0.5f);
    ref_layer rl = ref_of(m, 2, 0, 0, 0, 0);
    check_output("custom routing", m, ws, h, T, out, &rl, 1);
    moe8_moe_layer_free(L);
    rp.custom_user = &flag; /* now returns an id out of range */
    L = make_layer(m, &rp, 0, 0, 0, 0, NULL, MOE8_DT_F32);
    moe8_moe_workspace_free(ws);
    CHECK(moe8_moe_workspace_create(L, T, 2, &ws, &err) == MOE8_OK);
    CHECK(moe8_moe_layer_forward(L, ws, h, T, lg, out, &err) == MOE8_ERR_INVALID_ARG &&
          strstr(err.message, "custom routing"));
    moe8_moe_workspace_free(ws);
    moe8_moe_layer_free(L);
    free(h);
    tmodel_free(m);
}

/* Packed memory at the Qwen3-30B-A3B expert shape (2 experts). */
static void test_memory(void) {
    const int E = 2, H = 2048, I = 768;
    tmodel *m = tmodel_new(E, H, I, 0, MOE8_DT_BF16, 0);
    moe8_router_params rp = moe8_router_params_default();
    moe8_moe_layer_info info;
    rp.top_k = 1;
    moe8_moe_layer *L = make_layer(m, &rp, 0, 0, 0, 0, NULL, MOE8_DT_F32);
    moe8_moe_layer_get_info(L, &info);
    double int8_bytes = 3.0 * E * H * I;
    CHECKF(info.packed_bytes <= 1.05 * int8_bytes && info.packed_bytes >= int8_bytes,
           "packed %zu bytes for %.0f int8 bytes", info.packed_bytes, int8_bytes);
    CHECK(info.intermediate == I && info.top_k == 1 && info.expert_last == E);
    /* Spot-check the packing against the source. */
    int bad = 0;
    for (int i = 0; i < 1000; i++) {
        int e = i % E, n = (int)(test_rng_u64(&rng) % I), k = (int)(test_rng_u64(&rng) % H);
        bad += moe8_qmat_at(&L->qe[e].up, n, k) != m->q[1][(size_t)e * I * H + (size_t)n * H + k];
        bad += moe8_qmat_at(&L->qe[e].down, k, n) != m->q[2][(size_t)e * I * H + (size_t)k * I + n];
    }
    CHECK(bad == 0);
    moe8_moe_layer_free(L);
    tmodel_free(m);
}

int main(void) {
    test_table_or_skip(); /* MOE8_ISA: a table this CPU lacks is skipped */
    test_table();
    test_routing_extremes();
    test_expert_parallel();
    test_tensor_parallel();
    test_float_experts();
    test_custom_routing();
    test_errors();
    test_memory();
    return test_summary();
}
