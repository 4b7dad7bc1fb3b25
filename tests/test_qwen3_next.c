/*
 * test_qwen3_next.c — Qwen3-Next (qwen3_next, Qwen3NextForCausalLM), the
 * hybrid of Gated DeltaNet linear attention and gated full attention under a
 * MoE with a gated shared expert, against the test's own double-precision
 * reading of transformers' modeling_qwen3_next.py (fixture_model.h /
 * fixture_hybrid.h FX_QWEN3_NEXT, hybrid_ref.h):
 *   - the kinds: the causal conv1d with its state (an impulse gives the
 *     kernel; any split of the sequence gives the same outputs); the gated
 *     delta rule on hand-made steps (write, keep, overwrite, decay, partial
 *     beta), its GQA grouping of key heads to value heads, and the chunked
 *     form (chunks of 64, WY representation) equal to the recurrent one
 *     within 1e-10 for every length 1..300, from zero and random initial
 *     states, and continued across every chunk edge; the gated attention at
 *     one token (o_proj(v * sigmoid(gate)), the gate the second half of each
 *     head's q_proj rows); the zero-centred RMSNorm;
 *   - the whole model: prefill = token-by-token decode with the state
 *     carried = a split prefill = a chunked prefill (float and W8A8); each
 *     option and each DeltaNet tensor changes the logits, the MTP tensors do
 *     not; the fixture's names, shapes, config.json and the W8A8 description
 *     (msModelSlim's recipe: W8A8_DYNAMIC for q/k/v, experts, in_proj_qkvz);
 *   - then the engine: float within 1e-4 relative at every position, prefilled and
 *     decoded, W8A8 (and W4A8_DYNAMIC routed experts) at cosine >= 0.9999;
 *     a 70-token prompt across the chunk
 *     edge; the MTP tensors skipped even malformed; corrupt folders (a
 *     missing A_log, a conv kernel of the wrong size, ...) refused naming
 *     the tensor.
 */
#include "test.h"

#include "fixture_model.h"
#include "forward_ref.h"
#include "family_test.h"
#include "hybrid_test.h"

#include "moe8.h"

static fx_opts qn_opts(int quant) {
    fx_opts o = fx_hybrid_opts(FX_QWEN3_NEXT);
    o.quant = quant;
    o.seed = 3100 + (uint64_t)quant;
    if (quant) o.nonzero_offsets = 1;
    return o;
}

/* A smaller one for the reference's many runs: H 32, vocab 64, 2/1 heads,
 * linear 1 key head / 2 value heads of 8, E 4 of 16, shared 16. */
static fx_opts qn_small(int quant) {
    fx_opts o = qn_opts(quant);
    o.hidden = 32, o.vocab = 64, o.n_heads = 2, o.n_kv_heads = 1;
    o.lin_k_heads = 1, o.lin_v_heads = 2, o.lin_k_dim = 8, o.lin_v_dim = 8;
    o.n_experts = 4, o.moe_inter = 16, o.shared_inter = 16, o.inter = 32;
    return o;
}

/* ======================================================================== */
/* The kinds                                                                 */
/* ======================================================================== */

/* An F32 tensor [C][1][K] of N(0, 1) values. */
static fx_tensor conv_weight(int64_t C, int64_t K, uint64_t seed) {
    fx_tensor t;
    test_rng r = {seed};
    memset(&t, 0, sizeof t);
    t.dtype = MOE8_DT_F32;
    t.n_dims = 3;
    t.shape[0] = C, t.shape[1] = 1, t.shape[2] = K;
    t.n_bytes = (size_t)(C * K) * 4;
    t.data = calloc(t.n_bytes, 1);
    for (int64_t i = 0; i < C * K; i++) fx_set(&t, i, test_rng_normal(&r));
    return t;
}

static double silu(double v) { return v / (1.0 + exp(-v)); }

static void test_ref_conv(void) {
    enum { C = 3, K = 4, N = 11 };
    fx_tensor w = conv_weight(C, K, 5);
    double x[N * C] = {0}, y[N * C], y2[N * C], st[(K - 1) * C] = {0};
    test_rng r = {9};
    /* an impulse at t = 0: y_t = silu(w[K-1-t]) for t < K, then silu(0) = 0 */
    for (int c = 0; c < C; c++) x[c] = 1.0;
    hy_conv(y, x, N, C, K, &w, st);
    for (int t = 0; t < N; t++)
        for (int c = 0; c < C; c++)
            CHECK_NEAR(y[t * C + c], t < K ? silu(fx_get(&w, c * K + K - 1 - t)) : 0.0, 1e-15);
    /* random input: one call = pieces of 1, 2 and 8 with the state carried */
    for (int i = 0; i < N * C; i++) x[i] = test_rng_normal(&r);
    memset(st, 0, sizeof st);
    hy_conv(y, x, N, C, K, &w, st);
    memset(st, 0, sizeof st);
    hy_conv(y2, x, 1, C, K, &w, st);
    hy_conv(y2 + C, x + C, 2, C, K, &w, st);
    hy_conv(y2 + 3 * C, x + 3 * C, 8, C, K, &w, st);
    CHECK(hy_max_abs_diff(y, y2, N * C) == 0.0);
    /* the state holds the last K-1 inputs */
    for (int s = 0; s < K - 1; s++)
        for (int c = 0; c < C; c++) CHECK(st[s * C + c] == x[(N - (K - 1) + s) * C + c]);
    /* the direct sum at t = 5, channel 1 */
    {
        double a = 0;
        for (int j = 0; j < K; j++) a += fx_get(&w, 1 * K + j) * x[(5 - (K - 1) + j) * C + 1];
        CHECK_NEAR(y[5 * C + 1], silu(a), 1e-14);
    }
    free(w.data);
}

/* The gated delta rule on hand-made steps: NK = NV = 1, dk 4, dv 3, q and k
 * unit vectors (times 1000: the l2norm's eps is negligible), so each output
 * is 1/2 (= dk^-1/2) of what the state holds under q's direction. */
static void test_ref_gdn_hand(void) {
    enum { T = 5, dk = 4, dv = 3 };
    const hy_dims d = {1, 1, dk, dv};
    double q[T * dk] = {0}, k[T * dk] = {0}, v[T * dv], g[T] = {0}, beta[T] = {1, 1, 1, 0, 0.5};
    double S[dk * dv] = {0}, out[T * dv];
    const int qdir[T] = {0, 0, 0, 1, 1}, kdir[T] = {0, 1, 0, 0, 1};
    test_rng r = {11};
    for (int t = 0; t < T; t++) {
        q[t * dk + qdir[t]] = 1000.0;
        k[t * dk + kdir[t]] = 1000.0;
        for (int j = 0; j < dv; j++) v[t * dv + j] = test_rng_normal(&r);
    }
    g[3] = log(0.5);
    hy_gdn_recurrent(out, q, k, v, g, beta, T, d, S);
    for (int j = 0; j < dv; j++) {
        const double v0 = v[j], v1 = v[dv + j], v2 = v[2 * dv + j], v4 = v[4 * dv + j];
        CHECK_NEAR(out[j], 0.5 * v0, 1e-9);                   /* written, read back */
        CHECK_NEAR(out[dv + j], 0.5 * v0, 1e-9);              /* another key: the first kept */
        CHECK_NEAR(out[2 * dv + j], 0.5 * v2, 1e-9);          /* the same key: overwritten */
        CHECK_NEAR(out[3 * dv + j], 0.5 * 0.5 * v1, 1e-9);    /* decayed by 1/2, beta 0 */
        CHECK_NEAR(out[4 * dv + j], 0.5 * (0.25 * v1 + 0.5 * v4), 1e-9); /* beta 1/2 */
    }
}

static void rand_gdn(test_rng *r, double *q, double *k, double *v, double *g, double *beta, int n, hy_dims d) {
    for (int64_t i = 0; i < n * d.NK * d.dk; i++) q[i] = test_rng_normal(r), k[i] = test_rng_normal(r);
    for (int64_t i = 0; i < n * d.NV * d.dv; i++) v[i] = test_rng_normal(r);
    for (int64_t i = 0; i < n * d.NV; i++) {
        double u = test_rng_uniform(r);
        g[i] = u < 0.02 ? -8.0 * test_rng_uniform(r) : -0.6 * test_rng_uniform(r);
        beta[i] = test_rng_uniform(r);
    }
}

/* GQA: value head h reads key head h / (NV / NK): changing key head 1 moves
 * value heads 2 and 3 only (NK 2, NV 4). */
static void test_ref_gdn_groups(void) {
    enum { n = 6 };
    const hy_dims d = {2, 4, 8, 5};
    double q[n * 16], k[n * 16], v[n * 20], g[n * 4], beta[n * 4], S[4 * 40] = {0}, S2[4 * 40] = {0};
    double a[n * 20], b[n * 20];
    test_rng r = {21};
    rand_gdn(&r, q, k, v, g, beta, n, d);
    hy_gdn_recurrent(a, q, k, v, g, beta, n, d, S);
    for (int t = 0; t < n; t++)
        for (int i = 8; i < 16; i++) k[t * 16 + i] += 0.5, q[t * 16 + i] -= 0.25;
    hy_gdn_recurrent(b, q, k, v, g, beta, n, d, S2);
    for (int t = 0; t < n; t++)
        for (int h = 0; h < 4; h++) {
            double dd = hy_max_abs_diff(a + (t * 4 + h) * 5, b + (t * 4 + h) * 5, 5);
            CHECKF(h < 2 ? dd == 0.0 : dd > 1e-6, "token %d value head %d: %g", t, h, dd);
        }
}

/* Chunked (64) = recurrent within 1e-10 for every length 1..300 (odd lengths
 * from a random initial state), final states too; and a sequence split at
 * each chunk edge (chunked, state carried) = recurrent whole. */
static void test_ref_gdn_chunked(void) {
    enum { NMAX = 300 };
    const hy_dims d = {1, 2, 8, 6};
    const size_t ns = 2 * 8 * 6;
    double *q = malloc(sizeof(double) * NMAX * 8), *k = malloc(sizeof(double) * NMAX * 8);
    double *v = malloc(sizeof(double) * NMAX * 12), *g = malloc(sizeof(double) * NMAX * 2);
    double *beta = malloc(sizeof(double) * NMAX * 2), *a = malloc(sizeof(double) * NMAX * 12);
    double *b = malloc(sizeof(double) * NMAX * 12), S0[96], S1[96], S2[96], worst = 0, worst_s = 0;
    test_rng r = {31};
    static const int cuts[] = {1, 63, 64, 65, 127, 128, 129, 192, 256, 299};
    rand_gdn(&r, q, k, v, g, beta, NMAX, d);
    for (size_t i = 0; i < ns; i++) S0[i] = 0.3 * test_rng_normal(&r);
    for (int n = 1; n <= NMAX; n++) {
        for (size_t i = 0; i < ns; i++) S1[i] = S2[i] = n % 2 ? S0[i] : 0.0;
        hy_gdn_recurrent(a, q, k, v, g, beta, n, d, S1);
        hy_gdn_chunked(b, q, k, v, g, beta, n, d, S2);
        worst = fmax(worst, hy_max_abs_diff(a, b, (size_t)n * 12) / fmax(1.0, hy_max_abs(a, (size_t)n * 12)));
        worst_s = fmax(worst_s, hy_max_abs_diff(S1, S2, ns) / fmax(1.0, hy_max_abs(S1, ns)));
    }
    printf("gated delta rule, chunked vs recurrent, lengths 1..%d: outputs %.3g, states %.3g\n", NMAX, worst,
           worst_s);
    CHECKF(worst <= 1e-10 && worst_s <= 1e-10, "chunked vs recurrent: %g / %g", worst, worst_s);
    for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
        const int m = cuts[c];
        for (size_t i = 0; i < ns; i++) S1[i] = S2[i] = S0[i];
        hy_gdn_recurrent(a, q, k, v, g, beta, NMAX, d, S1);
        hy_gdn_chunked(b, q, k, v, g, beta, m, d, S2);
        hy_gdn_chunked(b + m * 12, q + m * 8, k + m * 8, v + m * 12, g + m * 2, beta + m * 2, NMAX - m, d, S2);
        CHECKF(hy_max_abs_diff(a, b, NMAX * 12) <= 1e-10 * fmax(1.0, hy_max_abs(a, NMAX * 12)) &&
               hy_max_abs_diff(S1, S2, ns) <= 1e-10 * fmax(1.0, hy_max_abs(S1, ns)),
               "split at %d: %g", m, hy_max_abs_diff(a, b, NMAX * 12));
    }
    free(q); free(k); free(v); free(g); free(beta); free(a); free(b);
}

/* The gated attention at one token is o_proj(v_{h/G} * sigmoid(gate_h)),
 * gate_h = q_proj rows [h 2D + D, h 2D + 2D); the zero-centred norm with
 * w = 0 is x / rms(x). */
static void test_ref_gated_attention(void) {
    fx_opts o = qn_opts(0);
    ref_model rm;
    hy_state st;
    const int64_t H = o.hidden, NH = o.n_heads, NKV = o.n_kv_heads, D = o.head_dim;
    double h[64], out[64], want[64] = {0}, att[64] = {0}, vv[32] = {0};
    const fx_tensor *qp, *vp, *op;
    test_rng r = {41};
    ref_init(&rm, &o);
    qp = hy_t(&rm, "model.layers.3.self_attn.q_proj.weight");
    vp = hy_t(&rm, "model.layers.3.self_attn.v_proj.weight");
    op = hy_t(&rm, "model.layers.3.self_attn.o_proj.weight");
    for (int i = 0; i < H; i++) h[i] = test_rng_normal(&r);
    hy_state_init(&st, &o, 4);
    hy_attn_layer(out, h, 1, &rm, "model.layers.3", &st, 3);
    hy_state_free(&st, &o);
    for (int64_t j = 0; j < NKV * D; j++) {
        vv[j] = 0;
        for (int64_t i = 0; i < H; i++) vv[j] += fx_get(vp, j * H + i) * h[i];
    }
    for (int64_t hd = 0; hd < NH; hd++)
        for (int64_t d = 0; d < D; d++) {
            double gt = 0;
            for (int64_t i = 0; i < H; i++) gt += fx_get(qp, (hd * 2 * D + D + d) * H + i) * h[i];
            att[hd * D + d] = vv[(hd / (NH / NKV)) * D + d] / (1.0 + exp(-gt));
        }
    for (int64_t j = 0; j < H; j++) {
        want[j] = 0;
        for (int64_t i = 0; i < NH * D; i++) want[j] += fx_get(op, j * NH * D + i) * att[i];
    }
    CHECK(hy_max_abs_diff(out, want, (size_t)H) <= 1e-12 * hy_max_abs(want, (size_t)H));
    {
        fx_tensor w0;
        double x[5] = {1, -2, 3, 0.5, 4}, y[5], ss = 0;
        memset(&w0, 0, sizeof w0);
        w0.dtype = MOE8_DT_F32, w0.n_dims = 1, w0.shape[0] = 5, w0.n_bytes = 20;
        w0.data = calloc(5, 4);
        hy_rmsnorm_zc(y, x, 5, &w0, 1e-6);
        for (int i = 0; i < 5; i++) ss += x[i] * x[i];
        for (int i = 0; i < 5; i++) CHECK_NEAR(y[i], x[i] / sqrt(ss / 5 + 1e-6), 1e-15);
        free(w0.data);
    }
    ref_free(&rm);
}

/* ======================================================================== */
/* The whole model                                                           */
/* ======================================================================== */

static void test_ref_model(void) {
    fx_opts o = qn_small(0);
    o.n_mtp = 0;
    hy_check_decode_vs_prefill("qwen3_next float small", &o, 67, 65, 0); /* chunked across the edge */
    o = qn_opts(0);
    o.n_mtp = 0;
    hy_check_decode_vs_prefill("qwen3_next float", &o, 10, 3, 1);
    o = qn_opts(1);
    o.n_mtp = 0;
    hy_check_decode_vs_prefill("qwen3_next W8A8", &o, 10, 5, 1);
    o = qn_opts(0);
    o.lin_v_heads = 2, o.lin_k_dim = 6, o.lin_v_dim = 6, o.conv_kernel = 3, o.full_interval = 2;
    o.dense_layer = 0, o.no_renorm = 1, o.n_mtp = 0;
    hy_check_decode_vs_prefill("qwen3_next variant", &o, 8, 3, 1);
}

/* Each option and each DeltaNet / attention tensor reaches the logits; the
 * MTP tensors do not. */
static void test_ref_options(void) {
    enum { n = 5 };
    int32_t ids[n];
    static const char *const tensors[] = {
        "model.layers.0.linear_attn.A_log",        "model.layers.0.linear_attn.dt_bias",
        "model.layers.1.linear_attn.conv1d.weight", "model.layers.1.linear_attn.norm.weight",
        "model.layers.2.linear_attn.in_proj_ba.weight", "model.layers.2.linear_attn.in_proj_qkvz.weight",
        "model.layers.0.linear_attn.out_proj.weight", "model.layers.3.self_attn.q_proj.weight",
        "model.layers.3.self_attn.q_norm.weight",  "model.layers.3.self_attn.k_norm.weight",
        "model.layers.1.mlp.shared_expert_gate.weight", "model.layers.1.input_layernorm.weight",
        "model.norm.weight"};
    hy_ids(ids, n, 64, 5);
    for (int quant = 0; quant < 2; quant++) {
        fx_opts o = qn_small(quant);
        double *base = malloc(sizeof(double) * n * 64), m;
        ref_model rm;
        ref_init(&rm, &o);
        ref_forward(&rm, ids, n, base);
        m = hy_max_abs(base, n * 64);
        for (size_t i = 0; i < sizeof tensors / sizeof tensors[0]; i++)
            CHECKF(hy_edit_diff(&rm, tensors[i], ids, n, base) > 1e-9 * m, "quant %d: %s changed nothing",
                   quant, tensors[i]);
        ref_free(&rm);
        for (int v = quant ? 5 : 0; v < 9; v++) {
            fx_opts p = o;
            double d;
            if (v == 0) p.no_renorm = 1;
            if (v == 1) p.partial_rotary = 0.5;
            if (v == 2) p.theta = 1e4;
            if (v == 3) p.rms_eps = 1e-2;
            if (v == 4) p.dense_layer = 1;
            if (v == 5) p.full_interval = 2;
            if (v == 6) p.conv_kernel = 2;
            if (v == 7) p.n_mtp = 0, p.layer_types = 1;
            if (v == 8) p.n_mtp = 2;
            d = hy_ref_diff(&p, ids, n, base);
            if (v >= 7) CHECKF(d == 0.0, "quant %d: the MTP tensors / layer_types changed the logits (%g)", quant, d);
            else CHECKF(d > 1e-9 * m, "quant %d: option %d changed nothing", quant, v);
        }
        free(base);
    }
}

/* The fixture: names, shapes, dtypes, config.json, the W8A8 description. */
static void test_ref_fixture(void) {
    fx_opts o = qn_opts(1);
    ref_model rm;
    const char *dir;
    cJSON *c, *d;
    ref_init(&rm, &o);
    CHECK(hy_t(&rm, "model.layers.0.linear_attn.in_proj_qkvz.weight")->shape[0] == 2 * 2 * 8 + 2 * 4 * 12);
    CHECK(hy_t(&rm, "model.layers.0.linear_attn.in_proj_qkvz.weight")->dtype == MOE8_DT_I8);
    CHECK(hy_t(&rm, "model.layers.0.linear_attn.in_proj_ba.weight")->shape[0] == 8);
    CHECK(hy_t(&rm, "model.layers.0.linear_attn.conv1d.weight")->n_dims == 3);
    CHECK(hy_t(&rm, "model.layers.0.linear_attn.conv1d.weight")->shape[0] == 2 * 2 * 8 + 4 * 12);
    CHECK(hy_t(&rm, "model.layers.0.linear_attn.conv1d.weight")->shape[2] == 4);
    CHECK(hy_t(&rm, "model.layers.0.linear_attn.A_log")->dtype == MOE8_DT_F32);
    CHECK(hy_t(&rm, "model.layers.2.linear_attn.norm.weight")->shape[0] == 12);
    CHECK(hy_t(&rm, "model.layers.2.linear_attn.out_proj.weight")->shape[1] == 48);
    CHECK(hy_t(&rm, "model.layers.3.self_attn.q_proj.weight")->shape[0] == 4 * 2 * 16);
    CHECK(hy_t(&rm, "model.layers.3.self_attn.o_proj.weight")->dtype == MOE8_DT_BF16);
    CHECK(hy_t(&rm, "model.layers.3.mlp.experts.7.down_proj.weight_scale")->shape[0] == 64);
    CHECK(hy_t(&rm, "model.layers.3.mlp.shared_expert.up_proj.weight")->shape[0] == 48);
    CHECK(hy_t(&rm, "mtp.layers.0.self_attn.q_proj.weight")->dtype == MOE8_DT_I8);
    CHECK(hy_t(&rm, "mtp.fc.weight")->shape[1] == 128);
    CHECK(hy_find(&rm, "model.layers.3.linear_attn.A_log") == NULL);
    CHECK(hy_find(&rm, "model.layers.0.self_attn.q_proj.weight") == NULL);
    ref_free(&rm);
    dir = write_fixture("qn_fixture", &o);
    c = hy_json(dir, "config.json");
    CHECK(!strcmp(hy_jstr(c, "model_type"), "qwen3_next"));
    CHECK(hy_jnum(c, "full_attention_interval") == 4 && !cJSON_GetObjectItem(c, "layer_types"));
    CHECK(hy_jnum(c, "linear_num_key_heads") == 2 && hy_jnum(c, "linear_num_value_heads") == 4);
    CHECK(hy_jnum(c, "linear_key_head_dim") == 8 && hy_jnum(c, "linear_value_head_dim") == 12);
    CHECK(hy_jnum(c, "linear_conv_kernel_dim") == 4 && hy_jnum(c, "partial_rotary_factor") == 0.25);
    CHECK(hy_jnum(c, "rope_theta") == 1e7 && hy_jnum(c, "shared_expert_intermediate_size") == 48);
    CHECK(hy_jnum(c, "num_experts") == 8 && hy_jnum(c, "head_dim") == 16);
    cJSON_Delete(c);
    d = hy_json(dir, "quant_model_description.json");
    CHECK(!strcmp(hy_jstr(d, "model_quant_type"), "W8A8_DYNAMIC"));
    CHECK(!strcmp(hy_jstr(d, "model.layers.0.linear_attn.in_proj_qkvz.weight"), "W8A8_DYNAMIC"));
    CHECK(!strcmp(hy_jstr(d, "model.layers.0.linear_attn.in_proj_ba.weight"), "FLOAT"));
    CHECK(!strcmp(hy_jstr(d, "model.layers.0.linear_attn.conv1d.weight"), "FLOAT"));
    CHECK(!strcmp(hy_jstr(d, "model.layers.0.linear_attn.A_log"), "FLOAT"));
    CHECK(!strcmp(hy_jstr(d, "model.layers.0.linear_attn.dt_bias"), "FLOAT"));
    CHECK(!strcmp(hy_jstr(d, "model.layers.0.linear_attn.out_proj.weight"), "FLOAT"));
    CHECK(!strcmp(hy_jstr(d, "model.layers.3.self_attn.k_proj.weight"), "W8A8_DYNAMIC"));
    CHECK(!strcmp(hy_jstr(d, "model.layers.3.self_attn.o_proj.weight"), "FLOAT"));
    CHECK(!strcmp(hy_jstr(d, "model.layers.3.mlp.experts.2.gate_proj.weight"), "W8A8_DYNAMIC"));
    CHECK(!strcmp(hy_jstr(d, "model.layers.3.mlp.shared_expert.gate_proj.weight"), "FLOAT"));
    CHECK(!strcmp(hy_jstr(d, "model.layers.3.mlp.shared_expert_gate.weight"), "FLOAT"));
    CHECK(!strcmp(hy_jstr(d, "lm_head.weight"), "FLOAT"));
    cJSON_Delete(d);
}

/* Odd widths (no multiple of 8: the kernels' tails), 1:1 key/value heads,
 * half the layers full, conv 3, rotary 6 of 12, one KV head. */
static fx_opts odd_opts(void) {
    fx_opts o = qn_opts(0);
    o.lin_v_heads = 2, o.full_interval = 2, o.conv_kernel = 3, o.layer_types = 1;
    o.hidden = 40, o.lin_k_dim = 6, o.lin_v_dim = 10, o.head_dim = 12, o.n_heads = 3, o.n_kv_heads = 1;
    o.partial_rotary = 0.5, o.n_mtp = 0, o.moe_inter = 20, o.shared_inter = 28;
    return o;
}

/* The reference on the odd shapes: finite, nonzero. */
static void test_ref_odd(void) {
    fx_opts o = odd_opts();
    ref_model rm;
    double l[9 * 256];
    int bad = 0;
    ref_init(&rm, &o);
    ref_forward(&rm, PROMPT, 9, l);
    for (int j = 0; j < 9 * 256; j++) bad += !isfinite(l[j]);
    CHECKF(bad == 0 && hy_max_abs(l, 9 * 256) > 0, "odd shapes: %d non-finite logits", bad);
    ref_free(&rm);
}

/* ======================================================================== */
/* The engine against the reference                                          */
/* ======================================================================== */

static void test_forward(void) {
    fx_opts o = qn_opts(0);
    check_vs_ref("qn_float", &o);
    o.float_dtype = MOE8_DT_F32, o.n_shards = 2, o.no_renorm = 1, o.dense_layer = 0;
    check_vs_ref("qn_float_f32_dense0", &o);
    o = odd_opts();
    check_vs_ref("qn_float_odd", &o);
    o = qn_opts(1);
    check_vs_ref("qn_w8a8", &o);
    o.layer_types = 2, o.a_log_float_dtype = 1; /* both layer keys; A_log BF16 */
    check_vs_ref("qn_w8a8_bf16_a_log", &o);
    o = qn_opts(1);
    o.scale_2d = 1, o.down_float = 1, o.seed += 9;
    check_vs_ref("qn_w8a8_down_float", &o);
    o = qn_opts(1); /* W4A8_DYNAMIC routed experts in a linear and the full layer */
    o.w4a8_layers = 1u | 8u, o.seed += 13;
    check_vs_ref("qn_w4a8", &o);
    o = qn_opts(0);
    hy_check_long("qn_float_long", &o, 70, 3);
    o = qn_opts(1);
    hy_check_long("qn_w8a8_long", &o, 70, 3);
}

/* ======================================================================== */
/* The per-sequence recurrent state                                          */
/* ======================================================================== */

/* One decode call of n tokens (seq, pos) with logits at every row, copied to out. */
static void st_decode(moe8_context *c, const int32_t *ids, const int32_t *pos, const int32_t *seq,
                      int n, float *out) {
    int8_t want[16];
    moe8_error e;
    moe8_batch b = {n, ids, pos, seq, want};
    const int V = moe8_context_n_vocab(c);
    memset(want, 1, sizeof want);
    CHECKF(moe8_decode(c, &b, &e) == MOE8_OK, "decode: %s", e.message);
    for (int i = 0; i < n && out; i++) {
        const float *l = moe8_context_logits(c, i);
        if (l) memcpy(out + (size_t)i * V, l, sizeof(float) * (size_t)V);
    }
}

static moe8_context *st_ctx(moe8_model *m) {
    moe8_context_params p = moe8_context_params_default();
    moe8_context *c = NULL;
    moe8_error e;
    p.kv_type = MOE8_DT_F32, p.n_ctx = 64, p.n_seq_max = 3, p.n_outputs = 16, p.n_threads = g_threads;
    CHECKF(moe8_context_create(m, &p, &c, &e) == MOE8_OK, "context: %s", e.message);
    return c;
}

/* Sequence 0 (6 prompt tokens, 2 decode steps) alone, then beside sequence 1
 * (its 5-token prompt and steps in the same batches, in either order): the
 * same logits bit for bit. Truncating to 3 is refused (no rewind yet); to 0
 * clears the state, and the same prompt gives the same logits again. */
static void test_state(void) {
    fx_opts o = qn_opts(0);
    moe8_model *m = test_load_model(write_fixture("qn_state", &o));
    moe8_context *c = st_ctx(m);
    const int V = (int)o.vocab;
    const int32_t a[8] = {5, 17, 99, 3, 250, 41, 7, 64}, bb[7] = {11, 12, 13, 14, 15, 16, 17};
    int32_t pos[16], seq[16], ids[16];
    float *alone = malloc(sizeof(float) * 8 * V), *mixed = malloc(sizeof(float) * 16 * V);
    moe8_error e;
    for (int i = 0; i < 8; i++) pos[i] = i, seq[i] = 0;
    st_decode(c, a, pos, seq, 6, alone);
    st_decode(c, a + 6, pos + 6, seq, 1, alone + 6 * V);
    st_decode(c, a + 7, pos + 7, seq, 1, alone + 7 * V);
    CHECK(moe8_context_seq_truncate(c, 0, 3, &e) == MOE8_ERR_UNSUPPORTED &&
          strstr(e.message, "not supported yet") != NULL);
    CHECK(moe8_context_seq_truncate(c, 0, 0, &e) == MOE8_OK);
    st_decode(c, a, pos, seq, 6, mixed);
    CHECKF(!memcmp(alone, mixed, sizeof(float) * 6 * V), "a restarted sequence differs");
    moe8_context_free(c);
    for (int order = 0; order < 2; order++) {
        c = st_ctx(m);
        for (int i = 0; i < 11; i++) { /* prompts: 6 of seq 0 and 5 of seq 2, either first */
            const int in0 = order ? i >= 5 : i < 6, k = order ? (in0 ? i - 5 : i) : (in0 ? i : i - 6);
            ids[i] = in0 ? a[k] : bb[k], pos[i] = k, seq[i] = in0 ? 0 : 2;
        }
        st_decode(c, ids, pos, seq, 11, mixed);
        CHECKF(!memcmp(mixed + (size_t)(order ? 5 : 0) * V, alone, sizeof(float) * 6 * V),
               "order %d: prompt logits depend on the batch", order);
        for (int step = 0; step < 2; step++) { /* then decode steps of both in one batch */
            ids[order] = a[6 + step], pos[order] = 6 + step, seq[order] = 0;
            ids[!order] = bb[5 + step], pos[!order] = 5 + step, seq[!order] = 2;
            st_decode(c, ids, pos, seq, 2, mixed);
            CHECKF(!memcmp(mixed + (size_t)order * V, alone + (size_t)(6 + step) * V, sizeof(float) * V),
                   "order %d step %d: decode logits depend on the batch", order, step);
        }
        moe8_context_free(c);
    }
    free(alone);
    free(mixed);
    moe8_model_free(m);
}

static void hook_break_mtp(void *user, fx_tensor *t) {
    (void)user;
    if (!strcmp(t->orig_name, "mtp.fc.weight")) {
        const int64_t shape[2] = {3, 5};
        fx_retype(t, MOE8_DT_F16, 2, shape);
    }
    if (!strcmp(t->orig_name, "mtp.layers.0.self_attn.q_proj.weight_scale")) t->omit = 1;
}

static void test_mtp_skipped(void) {
    fx_opts o = qn_opts(1);
    o.tensor_hook = hook_break_mtp;
    check_vs_ref("qn_w8a8_mtp_broken", &o);
}

#define L0 "model.layers.0.linear_attn."
#define QN FX_QWEN3_NEXT
static const defect defects[] = {
    {"qn_no_A_log", QN, 0, D_OMIT, L0 "A_log", 0, {0, 0}, NULL, NULL, NULL, MOE8_ERR_NOT_FOUND,
     "tensor '" L0 "A_log' not found"},
    {"qn_w8a8_no_A_log", QN, 1, D_OMIT, L0 "A_log", 0, {0, 0}, NULL, NULL, NULL, MOE8_ERR_NOT_FOUND,
     "tensor '" L0 "A_log' not found"},
    {"qn_no_dt_bias", QN, 0, D_OMIT, L0 "dt_bias", 0, {0, 0}, NULL, NULL, NULL, MOE8_ERR_NOT_FOUND,
     "tensor '" L0 "dt_bias' not found"},
    {"qn_dt_bias_shape", QN, 0, D_SHAPE, L0 "dt_bias", 1, {3, 0}, NULL, NULL, NULL, MOE8_ERR_FORMAT,
     L0 "dt_bias'"},
    {"qn_no_ba", QN, 0, D_OMIT, L0 "in_proj_ba.weight", 0, {0, 0}, NULL, NULL, NULL, MOE8_ERR_NOT_FOUND,
     "tensor '" L0 "in_proj_ba.weight' not found"},
    {"qn_qkvz_shape", QN, 0, D_SHAPE, L0 "in_proj_qkvz.weight", 2, {120, 64}, NULL, NULL, NULL,
     MOE8_ERR_FORMAT, L0 "in_proj_qkvz.weight'"},
    {"qn_w8a8_no_qkvz_scale", QN, 1, D_OMIT, L0 "in_proj_qkvz.weight_scale", 0, {0, 0}, NULL, NULL,
     NULL, MOE8_ERR_NOT_FOUND, "in_proj_qkvz.weight_scale' not found"},
    {"qn_norm_shape", QN, 0, D_SHAPE, L0 "norm.weight", 1, {8, 0}, NULL, NULL, NULL, MOE8_ERR_FORMAT,
     L0 "norm.weight'"},
    {"qn_no_shared_gate", QN, 0, D_OMIT, "model.layers.1.mlp.shared_expert_gate.weight", 0, {0, 0}, NULL,
     NULL, NULL, MOE8_ERR_NOT_FOUND, "tensor 'model.layers.1.mlp.shared_expert_gate.weight' not found"},
    {"qn_cfg_heads", QN, 0, D_NONE, NULL, 0, {0, 0}, "config.json", "linear_num_value_heads", "3",
     MOE8_ERR_FORMAT, "linear_num_value_heads"},
};

/* The conv kernel stored [C][1][3] where linear_conv_kernel_dim says 4. */
static void hook_conv_kernel(void *user, fx_tensor *t) {
    (void)user;
    if (!strcmp(t->orig_name, L0 "conv1d.weight")) {
        const int64_t shape[3] = {t->shape[0], 1, 3};
        fx_retype(t, t->dtype, 3, shape);
    }
}

static void test_defects(void) {
    for (size_t i = 0; i < sizeof defects / sizeof defects[0]; i++) {
        fx_opts o = qn_opts(defects[i].quant);
        check_defect(&defects[i], o);
    }
    for (int quant = 0; quant < 2; quant++) {
        fx_opts o = qn_opts(quant);
        moe8_model *m = NULL;
        moe8_error e;
        moe8_status st;
        o.n_layers = 2;
        o.tensor_hook = hook_conv_kernel;
        memset(&e, 0, sizeof e);
        st = moe8_model_load(write_fixture(quant ? "bad_qn_w8a8_conv_kernel" : "bad_qn_conv_kernel", &o), NULL,
                             &m, &e);
        CHECKF(st == MOE8_ERR_FORMAT && strstr(e.message, L0 "conv1d.weight'") != NULL,
               "conv kernel of 3: status %d, '%s'", st, e.message);
        moe8_model_free(m);
    }
    (void)make_quantize_compare;
    (void)parse;
    (void)run;
}

int main(void) {
    test_ref_conv();
    test_ref_gdn_hand();
    test_ref_gdn_groups();
    test_ref_gdn_chunked();
    test_ref_gated_attention();
    test_ref_model();
    test_ref_options();
    test_ref_fixture();
    test_ref_odd();
    CHECKF(!family_unknown("qwen3_next", qn_opts(0)), "moe8 refuses model_type qwen3_next");
    test_forward();
    test_state();
    test_mtp_skipped();
    test_defects();
    hy_check_tiny(MOE8_ARCH_QWEN3_NEXT);
    return test_summary();
}
