/*
 * test_forward.c — the Qwen3-MoE forward pass and the generation API against
 * an independent double-precision reference (forward_ref.h) on tiny synthetic
 * models (fixture_model.h): float and W8A8 checkpoints, each also with an int8
 * (W8A8_DYNAMIC) lm_head, the W8A8_DYNAMIC linear itself, ref vs AVX2 kernels
 * (re-running itself with MOE8_FORCE_REF=1), thread counts, batching,
 * token-by-token decode vs prefill, context overflow, callbacks, bad batches,
 * and the KV cache types (F32 exact; F16, BF16 close to it).
 */
#include <pthread.h>

#include "test.h"
#include "test_isa.h"
#include "fixture_model.h"
#include "forward_ref.h"

#include "kernels/kernels.h"
#include "model/forward.h"

#define MAX_V 256
#define N_GREEDY 16

/* ---- helpers --------------------------------------------------------------- */

static moe8_dtype g_kv = MOE8_DT_F32; /* KV cache type of new_ctx */

static const char *kv_name(moe8_dtype t) { return moe8_dtype_name(t); }

static moe8_context *new_ctx(moe8_model *m, int n_ctx, int n_seq, int n_threads, int float_ex) {
    moe8_context_params p = moe8_context_params_default();
    moe8_context *c = NULL;
    moe8_error e;
    p.kv_type = g_kv;
    p.n_ctx = n_ctx;
    p.n_seq_max = n_seq;
    p.n_outputs = 64;
    p.n_threads = n_threads;
    p.float_experts = float_ex;
    if (moe8_context_create(m, &p, &c, &e) != MOE8_OK) {
        fprintf(stderr, "context: %s\n", e.message);
        exit(2);
    }
    return c;
}

/* Prefill ids[0..n) as sequence `seq` in one batch, logits of every token
 * into out[n][V]. */
static moe8_status prefill(moe8_context *c, int seq, const int32_t *ids, int n, float *out) {
    int32_t pos[64], sq[64];
    int8_t lg[64];
    int V = moe8_context_n_vocab(c);
    moe8_error e;
    for (int i = 0; i < n; i++) {
        pos[i] = moe8_context_seq_len(c, seq) + i;
        sq[i] = seq;
        lg[i] = 1;
    }
    moe8_batch b = {n, ids, pos, sq, lg};
    moe8_status st = moe8_decode(c, &b, &e);
    if (st) fprintf(stderr, "decode: %s\n", e.message);
    for (int i = 0; !st && out && i < n; i++)
        memcpy(out + (size_t)i * V, moe8_context_logits(c, i), sizeof(float) * V);
    return st;
}

static double max_rel(const float *a, const double *b, int n) {
    double d = 0, m = 0;
    for (int i = 0; i < n; i++) {
        d = fmax(d, fabs(a[i] - b[i]));
        m = fmax(m, fabs(b[i]));
    }
    return d / m;
}

static double max_rel_f(const float *a, const float *b, int n) {
    double d = 0, m = 0;
    for (int i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        m = fmax(m, fabs((double)b[i]));
    }
    return d / m;
}

static const int32_t PROMPT[9] = {5, 17, 200, 3, 99, 42, 7, 128, 64};

static fx_opts float_opts(void) {
    fx_opts o = fx_default_opts();
    o.n_layers = 3;
    o.dense_layer = 1;
    return o;
}

static fx_opts w8a8_opts(int variant) {
    fx_opts o = fx_default_opts();
    o.quant = 1;
    o.n_layers = 3;
    o.dense_layer = 0;
    o.nonzero_offsets = 1;
    o.deq_i64 = variant == 0;             /* fp16 export: deq I64, input_offset I8 */
    o.scale_dtype = variant == 0 ? MOE8_DT_BF16 : MOE8_DT_F32;
    o.scale_2d = variant == 1;
    o.qkv_same_input = variant == 1;      /* variant 0: q/k/v scales differ */
    o.seed = 99 + (uint64_t)variant;
    return o;
}

static const char *write_fixture(const char *name, const fx_opts *o) {
    static char dirs[8][4096];
    static int n;
    const char *d = test_tmpdir(name);
    char *slot = dirs[n++ % 8];
    snprintf(slot, 4096, "%s", d);
    if (fx_write_model(slot, o) != 0) exit(2);
    return slot;
}

/* ---- float and W8A8 vs the reference ---------------------------------------- */

/* quantized 0: float model, rel err <= 1e-4; else the least cosine per position
 * (`cos_min`), and for a float body with an int8 lm_head (o->lm_head_w8a8,
 * !o->quant) also rel err <= 1e-5: the reference runs the same W8A8 dynamic
 * maths on its own double hidden state. */
static void check_vs_ref_cos(const char *label, const fx_opts *o, int float_ex, double cos_min) {
    const char *dir = write_fixture(label, o);
    moe8_model *m = test_load_model(dir);
    moe8_context *c = new_ctx(m, 32, 1, 2, float_ex);
    const int n = 9, V = (int)o->vocab;
    float *got = malloc(sizeof(float) * n * V);
    double *want = malloc(sizeof(double) * n * V);
    ref_model rm;
    ref_init(&rm, o);
    rm.float_experts = float_ex;
    ref_forward(&rm, PROMPT, n, want);
    CHECK(prefill(c, 0, PROMPT, n, got) == MOE8_OK);
    if (!cos_min) {
        double worst = 0;
        for (int t = 0; t < n; t++) worst = fmax(worst, max_rel(got + t * V, want + t * V, V));
        printf("%-26s last-token rel err %.3g, worst position %.3g\n", label,
               max_rel(got + (n - 1) * V, want + (n - 1) * V, V), worst);
        CHECKF(max_rel(got + (n - 1) * V, want + (n - 1) * V, V) <= 1e-5 && worst <= 1e-5,
               "%s: last-token rel err %.3g, worst position %.3g", label,
               max_rel(got + (n - 1) * V, want + (n - 1) * V, V), worst);
    } else {
        double worst = 1;
        for (int t = 0; t < n; t++) worst = fmin(worst, test_cosine_ref(got + t * V, want + t * V, V));
        printf("%-26s last-token cosine %.8f, worst position %.8f\n", label,
               test_cosine_ref(got + (n - 1) * V, want + (n - 1) * V, V), worst);
        CHECKF(test_cosine_ref(got + (n - 1) * V, want + (n - 1) * V, V) >= cos_min && worst >= cos_min,
               "%s: last-token cosine %.8f, worst position %.8f", label,
               test_cosine_ref(got + (n - 1) * V, want + (n - 1) * V, V), worst);
        if (o->lm_head_w8a8 && !o->quant) {
            double rel = 0;
            for (int t = 0; t < n; t++) rel = fmax(rel, max_rel(got + t * V, want + t * V, V));
            printf("%-26s worst position rel err %.3g\n", label, rel);
            CHECKF(rel <= 1e-5, "%s: rel err %.3g vs the double W8A8-dynamic reference", label, rel);
        }
    }
    ref_free(&rm);
    free(got);
    free(want);
    moe8_context_free(c);
    moe8_model_free(m);
}

static void check_vs_ref(const char *label, const fx_opts *o, int float_ex, int quantized) {
    check_vs_ref_cos(label, o, float_ex, quantized ? 0.9999 : 0);
}

static void test_vs_reference(void) {
    fx_opts o = float_opts();
    check_vs_ref("fwd_float", &o, 0, 0);
    o.tie = 1;
    o.float_dtype = MOE8_DT_F32;
    check_vs_ref("fwd_float_tied_f32", &o, 0, 0);
    o = w8a8_opts(0);
    check_vs_ref("fwd_w8a8_deq_i64", &o, 0, 1);
    check_vs_ref("fwd_w8a8_float_experts", &o, 1, 1);
    o = w8a8_opts(1);
    check_vs_ref("fwd_w8a8_deq_f32", &o, 0, 1);
    /* int8 lm_head: on a float body the reference's codes of the final-normed
     * row are the engine's but for fp32 noise in that row */
    o = float_opts();
    o.lm_head_w8a8 = 1;
    check_vs_ref_cos("fwd_float_lmhead_w8a8", &o, 0, 0.99999);
    o.nonzero_offsets = 1;
    o.scale_2d = 1;
    o.scale_dtype = MOE8_DT_BF16;
    check_vs_ref_cos("fwd_float_lmhead_offsets", &o, 0, 0.99999);
    o = w8a8_opts(0);
    o.lm_head_w8a8 = 1;
    check_vs_ref("fwd_w8a8_lmhead_w8a8", &o, 0, 1);
    check_vs_ref("fwd_w8a8_lmhead_float_ex", &o, 1, 1);
}

/* ---- W8A8_DYNAMIC linear (the int8 lm_head), both kernel tables ------------ */

/* Codes, scales and outputs of a W8A8_DYNAMIC proj against this test's own
 * SEMANTICS §4 arithmetic: codes in fp32, then exact integer sums, outputs
 * bit for bit ((float)(acc + O·xsum) · sx) · S; a row block (TP's vocabulary
 * split) equals those rows of the whole; the result is near the double
 * product with the dequantized weight. */
static void dynamic_case(int with_offsets) {
    enum { N = 37, K = 70, T = 4, R0 = 16 };
    int8_t w[N * K];
    float sc[N], of[N], x[T * K];
    test_rng r = {4242 + (uint64_t)with_offsets};
    for (int i = 0; i < N * K; i++) w[i] = (int8_t)(i % 7 == 0 ? -128 : (int)(test_rng_u64(&r) % 256) - 128);
    for (int i = 0; i < N; i++) {
        sc[i] = (float)((0.5 + test_rng_uniform(&r)) * 1e-3);
        of[i] = with_offsets ? (float)((int)(test_rng_u64(&r) % 7) - 3) : 0.0f;
    }
    for (int i = 0; i < T * K; i++) x[i] = (float)(test_rng_normal(&r) * (1 + i / K));
    for (int k = 0; k < K; k++) x[2 * K + k] = 0.0f; /* a zero row: sx 0, output exactly 0 */
    x[5] = 37.5f;                                       /* row 0's amax: code 127 */
    moe8_tensor tw = {"lm_head.weight", MOE8_DT_I8, 2, {N, K}, N * K, w, sizeof w, 0, 0};
    moe8_tensor ts = {"lm_head.weight_scale", MOE8_DT_F32, 2, {N, 1}, N, sc, sizeof sc, 0, 0};
    moe8_tensor to = {"lm_head.weight_offset", MOE8_DT_F32, 2, {N, 1}, N, of, sizeof of, 0, 0};
    moe8_linear src;
    memset(&src, 0, sizeof src);
    src.quant = MOE8_QUANT_W8A8_DYNAMIC;
    src.n_out = N;
    src.n_in = K;
    src.weight = &tw;
    src.weight_scale = &ts;
    src.weight_offset = &to;
    src.nonzero_offset = with_offsets;
    moe8_proj p, blk;
    CHECK(moe8_proj_init(&p, &src, 0, NULL) == MOE8_OK && p.type == MOE8_QUANT_W8A8_DYNAMIC);
    CHECK(moe8_proj_init_slice(&blk, &src, R0, N, 0, K, 0, NULL) == MOE8_OK && blk.n == N - R0);
    CHECK((p.bias != NULL) == with_offsets);
    int ldq = moe8_round_up(K, 64), bad_code = 0, bad_y = 0, bad_blk = 0;
    int8_t *xq = moe8_alloc_aligned((size_t)T * ldq), *xq2 = moe8_alloc_aligned((size_t)T * ldq);
    float sx[T], sx2[T], y_ref[T * N], y_opt[T * N], y_blk[T * N];
    int32_t xsum[T], xsum2[T];
    double ab = 0, aa = 0, bb = 0;
    moe8_kernels_ref()->quant_rows(xq, ldq, sx, xsum, x, K, T, K);
    moe8_kernels_get()->quant_rows(xq2, ldq, sx2, xsum2, x, K, T, K);
    for (int t = 0; t < T; t++) {
        float amax = 0, s;
        int32_t sum = 0;
        for (int k = 0; k < K; k++) amax = fmaxf(amax, fabsf(x[t * K + k]));
        s = amax / 127.0f;
        bad_code += sx[t] != s || sx2[t] != s;
        for (int k = 0; k < K; k++) {
            float v = s > 0 ? rintf(x[t * K + k] / s) : 0.0f;
            int8_t c = (int8_t)fminf(fmaxf(v, -127.0f), 127.0f);
            bad_code += xq[t * ldq + k] != c || xq2[t * ldq + k] != c;
            sum += c;
        }
        bad_code += xsum[t] != sum || xsum2[t] != sum;
    }
    CHECKF(bad_code == 0, "dynamic codes: %d differ from the fp32 rule", bad_code);
    moe8_proj_apply(&p, moe8_kernels_ref(), y_ref, N, x, K, xq, ldq, sx, xsum, T, 1);
    moe8_proj_apply(&p, moe8_kernels_get(), y_opt, N, x, K, xq, ldq, sx, xsum, T, 2);
    moe8_proj_apply(&blk, moe8_kernels_get(), y_blk, N, x, K, xq, ldq, sx, xsum, T, 2);
    for (int t = 0; t < T; t++)
        for (int j = 0; j < N; j++) {
            int32_t acc = (int32_t)of[j] * xsum[t];
            double ref = 0;
            for (int k = 0; k < K; k++) {
                acc += (int32_t)xq[t * ldq + k] * w[j * K + k];
                ref += (double)x[t * K + k] * sc[j] * ((double)w[j * K + k] + of[j]);
            }
            float want = ((float)acc * sx[t]) * sc[j];
            bad_y += y_ref[t * N + j] != want || y_opt[t * N + j] != want;
            bad_blk += j >= R0 && y_blk[t * N + j - R0] != want;
            ab += ref * y_opt[t * N + j], aa += ref * ref, bb += (double)y_opt[t * N + j] * y_opt[t * N + j];
        }
    CHECKF(bad_y == 0 && bad_blk == 0, "offsets %d: %d outputs, %d block outputs differ from "
           "((float)(acc + O*xsum) * sx) * S (%s kernels)", with_offsets, bad_y, bad_blk,
           moe8_kernel_isa());
    for (int j = 0; j < N; j++) CHECK(y_opt[2 * N + j] == 0.0f);
    CHECKF(ab / sqrt(aa * bb) >= 0.999, "dynamic vs double dequantized: cosine %.6f",
           ab / sqrt(aa * bb));
    moe8_free_aligned(xq);
    moe8_free_aligned(xq2);
    moe8_proj_free(&p);
    moe8_proj_free(&blk);
}

static void test_dynamic_linear(void) {
    dynamic_case(0);
    dynamic_case(1);
}

/* ---- W8A8 static linear with -128 codes, both kernel tables ----------------- */

static void test_static_linear_full_range(void) {
    enum { N = 37, K = 70, T = 5 };
    int8_t w[N * K];
    int32_t bias[N];
    float deq[N], x[T * K], scale = 0.05f, off = -3.0f;
    int64_t w_shape[2] = {N, K};
    test_rng r = {77};
    for (int i = 0; i < N * K; i++) w[i] = (int8_t)(i % 5 == 0 ? -128 : (int)(test_rng_u64(&r) % 256) - 128);
    for (int i = 0; i < N; i++) {
        bias[i] = (int32_t)(test_rng_u64(&r) % 20001) - 10000;
        deq[i] = (float)(1e-3 * (1 + test_rng_uniform(&r)));
    }
    for (int i = 0; i < T * K; i++) x[i] = (float)(test_rng_normal(&r) * 4.0);
    x[3] = -1000.0f; /* clamps to -128 */
    moe8_tensor tw = {"w", MOE8_DT_I8, 2, {N, K}, N * K, w, sizeof w, 0, 0};
    moe8_tensor td = {"deq", MOE8_DT_F32, 1, {N}, N, deq, sizeof deq, 0, 0};
    moe8_tensor tb = {"bias", MOE8_DT_I32, 1, {N}, N, bias, sizeof bias, 0, 0};
    moe8_linear src;
    memset(&src, 0, sizeof src);
    src.quant = MOE8_QUANT_W8A8;
    src.n_out = w_shape[0];
    src.n_in = w_shape[1];
    src.weight = &tw;
    src.deq_scale = &td;
    src.quant_bias = &tb;
    src.in_scale = scale;
    src.in_offset = (int32_t)off;
    moe8_proj p;
    CHECK(moe8_proj_init(&p, &src, 1, NULL) == MOE8_OK);
    int ldq = moe8_round_up(K, 64);
    int8_t *xq = moe8_alloc_aligned((size_t)T * ldq);
    float ones[T], y_ref[T * N], y_opt[T * N];
    int32_t ones_i[T];
    int n_min = 0;
    for (int i = 0; i < T; i++) ones[i] = 1.0f, ones_i[i] = 1;
    moe8_proj_quant(xq, ldq, x, K, T, K, scale, off);
    for (int i = 0; i < T * K; i++) {
        float v = rintf(x[i] / scale + off);
        int8_t want = (int8_t)(v < -128 ? -128 : v > 127 ? 127 : v);
        n_min += want == -128;
        if (xq[(i / K) * ldq + i % K] != want) {
            CHECKF(0, "code %d: %d vs %d", i, xq[(i / K) * ldq + i % K], want);
            break;
        }
    }
    CHECKF(n_min > 0, "test data should produce -128 codes");
    moe8_proj_apply(&p, moe8_kernels_ref(), y_ref, N, x, K, xq, ldq, ones, ones_i, T, 1);
    moe8_proj_apply(&p, moe8_kernels_get(), y_opt, N, x, K, xq, ldq, ones, ones_i, T, 2);
    int bad = 0;
    for (int t = 0; t < T; t++)
        for (int j = 0; j < N; j++) {
            int32_t acc = bias[j];
            for (int k = 0; k < K; k++) acc += (int32_t)xq[t * ldq + k] * w[j * K + k];
            float want = (float)acc * deq[j];
            bad += y_ref[t * N + j] != want || y_opt[t * N + j] != want;
        }
    CHECKF(bad == 0, "%d outputs differ from (float)(acc + bias) * deq (%s kernels)", bad,
           moe8_kernel_isa());
    moe8_free_aligned(xq);
    moe8_proj_free(&p);
}

/* ---- a packed linear and a table that does not read its layout ------------- */

/* Refused before anything is computed, as the MoE layer refuses its experts:
 * a copy of the table in use that reads the other layout stands for the
 * table of another machine or another MOE8_ISA. */
static void test_linear_layout_refused(void) {
    enum { N = 20, K = 40, T = 2 };
    int8_t w[N * K];
    int32_t bias[N];
    float deq[N], x[T * K], y[T * N], ones[T];
    int32_t ones_i[T];
    for (int i = 0; i < N * K; i++) w[i] = (int8_t)(i % 251 - 125);
    for (int i = 0; i < N; i++) bias[i] = i - 10, deq[i] = 1e-3f;
    for (int i = 0; i < T * K; i++) x[i] = (float)(i % 7) - 3.0f;
    for (int i = 0; i < T; i++) ones[i] = 1.0f, ones_i[i] = 1;
    moe8_tensor tw = {"w", MOE8_DT_I8, 2, {N, K}, N * K, w, sizeof w, 0, 0};
    moe8_tensor td = {"deq", MOE8_DT_F32, 1, {N}, N, deq, sizeof deq, 0, 0};
    moe8_tensor tb = {"bias", MOE8_DT_I32, 1, {N}, N, bias, sizeof bias, 0, 0};
    moe8_linear src;
    memset(&src, 0, sizeof src);
    src.quant = MOE8_QUANT_W8A8;
    src.n_out = N;
    src.n_in = K;
    src.weight = &tw;
    src.deq_scale = &td;
    src.quant_bias = &tb;
    src.in_scale = 0.5f;
    moe8_proj p;
    CHECK(moe8_proj_init(&p, &src, 1, NULL) == MOE8_OK && p.q.layout);
    moe8_kernels other = *moe8_kernels_get();
    other.isa = "other";
    other.qlayout = p.q.layout == &moe8_qlayout_k2 ? &moe8_qlayout_k4u : &moe8_qlayout_k2;
    const int ldq = moe8_round_up(K, 64);
    int8_t *xq = moe8_alloc_aligned((size_t)T * ldq);
    moe8_proj_quant(xq, ldq, x, K, T, K, p.in_scale, p.in_offset);
    for (int i = 0; i < T * N; i++) y[i] = 7.0f;
    const moe8_proj *pp[1] = {&p};
    float *const ys[1] = {y};
    const int ldy[1] = {N};
    CHECK(moe8_proj_apply(&p, &other, y, N, x, K, xq, ldq, ones, ones_i, T, 2) ==
          MOE8_ERR_INVALID_ARG);
    CHECK(moe8_proj_apply_group(pp, ys, ldy, 1, &other, x, K, xq, ldq, ones, ones_i, T, 2) ==
          MOE8_ERR_INVALID_ARG);
    int untouched = 1;
    for (int i = 0; i < T * N; i++) untouched &= y[i] == 7.0f;
    CHECKF(untouched, "a refused linear wrote its output");
    moe8_error e;
    memset(&e, 0, sizeof e);
    CHECK(moe8_proj_check(&p, &other, &e) == MOE8_ERR_INVALID_ARG);
    CHECKF(strstr(e.message, p.q.layout->name) && strstr(e.message, "other kernels"),
           "refusal names the layout and the table: %s", e.message);
    /* its own table and the reference (which reads any layout) run it */
    CHECK(moe8_proj_check(&p, moe8_kernels_get(), NULL) == MOE8_OK &&
          moe8_proj_check(&p, moe8_kernels_ref(), NULL) == MOE8_OK);
    CHECK(moe8_proj_apply(&p, moe8_kernels_get(), y, N, x, K, xq, ldq, ones, ones_i, T, 2) ==
          MOE8_OK);
    int32_t acc = bias[0];
    for (int k = 0; k < K; k++) acc += (int32_t)xq[k] * w[k];
    CHECKF(y[0] == (float)acc * deq[0], "after the refusal: %g vs %g", y[0], (float)acc * deq[0]);
    moe8_free_aligned(xq);
    moe8_proj_free(&p);
}

/* Activation codes at the rounding edges: scale 0.5 makes x / scale exact, so
 * x = (j - 600) / 4 lands on .0, .25, .5 and .75 (ties go to even), plus
 * values far outside the range, infinities, NaN (-> -128), -0 and denormals.
 * The reference is rint() in the default rounding mode of the fp32 value
 * x / scale + offset, clamped. */
static void test_static_quant_edges(void) {
    enum { N_X = 2400 + 8 };
    static float x[N_X];
    static int8_t xq[N_X + 64];
    const float scale = 0.5f, off = -3.0f;
    int bad = 0, ties = 0;
    for (int j = 0; j < 2400; j++) x[j] = (float)(j - 1200) / 4.0f;
    x[2400] = NAN, x[2401] = INFINITY, x[2402] = -INFINITY, x[2403] = 1e30f;
    x[2404] = -1e30f, x[2405] = -0.0f, x[2406] = 1e-40f, x[2407] = -1e-40f;
    moe8_proj_quant(xq, N_X + 64, x, N_X, 1, N_X, scale, off);
    for (int j = 0; j < N_X; j++) {
        const float v = x[j] / scale + off;
        const double r = isnan(v) ? -128.0 : rint((double)v);
        const int8_t want = (int8_t)(r < -128 ? -128 : r > 127 ? 127 : r);
        ties += v - floorf(v) == 0.5f;
        if (xq[j] != want && bad++ < 5) CHECKF(0, "x = %g: code %d, expected %d", x[j], xq[j], want);
    }
    CHECKF(bad == 0, "%d of %d activation codes wrong", bad, N_X);
    CHECKF(ties >= 500, "only %d ties tested", ties);
}

/* moe8_proj_apply_group (q, k and v in one pass) equals separate calls bit for
 * bit, for int8 and float projections and 1-3 threads. */
static void test_proj_group(void) {
    enum { K = 96, T = 3, N1 = 40, N2 = 24, N3 = 17 };
    static int8_t w[(N1 + N2 + N3) * K];
    static float wf[(N1 + N2 + N3) * K], deq[N1 + N2 + N3], x[T * K];
    static float y_sep[T * (N1 + N2 + N3)], y_grp[T * (N1 + N2 + N3)];
    static int32_t bias[N1 + N2 + N3];
    const int ns[3] = {N1, N2, N3};
    test_rng r = {91};
    for (int i = 0; i < (N1 + N2 + N3) * K; i++) {
        w[i] = (int8_t)((int)(test_rng_u64(&r) % 256) - 128);
        wf[i] = (float)test_rng_normal(&r);
    }
    for (int i = 0; i < N1 + N2 + N3; i++) deq[i] = 1e-3f * (float)(i + 1), bias[i] = i * 7 - 100;
    for (int i = 0; i < T * K; i++) x[i] = (float)(test_rng_normal(&r) * 3.0);
    for (int is_float = 0; is_float < 2; is_float++) {
        moe8_proj p[3];
        moe8_tensor tw[3], td[3], tb[3];
        const moe8_proj *pp[3];
        int row = 0;
        for (int i = 0; i < 3; i++) {
            moe8_linear src;
            memset(&src, 0, sizeof src);
            tw[i] = (moe8_tensor){"w", is_float ? MOE8_DT_F32 : MOE8_DT_I8, 2, {ns[i], K}, ns[i] * K,
                                  is_float ? (void *)(wf + row * K) : (void *)(w + row * K), 0, 0, 0};
            td[i] = (moe8_tensor){"deq", MOE8_DT_F32, 1, {ns[i]}, ns[i], deq + row, 0, 0, 0};
            tb[i] = (moe8_tensor){"bias", MOE8_DT_I32, 1, {ns[i]}, ns[i], bias + row, 0, 0, 0};
            src.quant = is_float ? MOE8_QUANT_FLOAT : MOE8_QUANT_W8A8;
            src.n_out = ns[i];
            src.n_in = K;
            src.weight = &tw[i];
            src.deq_scale = &td[i];
            src.quant_bias = &tb[i];
            src.in_scale = 0.03f;
            src.in_offset = 2;
            CHECK(moe8_proj_init(&p[i], &src, 1, NULL) == MOE8_OK);
            pp[i] = &p[i];
            row += ns[i];
        }
        const int ldq = moe8_round_up(K, 64);
        int8_t *xq = moe8_alloc_aligned((size_t)T * ldq);
        float ones[T];
        int32_t ones_i[T];
        for (int i = 0; i < T; i++) ones[i] = 1.0f, ones_i[i] = 1;
        moe8_proj_quant(xq, ldq, x, K, T, K, 0.03f, 2.0f);
        for (int nt = 1; nt <= 3; nt++) {
            float *ys[3] = {y_grp, y_grp + T * N1, y_grp + T * (N1 + N2)};
            const int ldy[3] = {N1, N2, N3};
            row = 0;
            for (int i = 0; i < 3; i++) {
                moe8_proj_apply(&p[i], moe8_kernels_get(), y_sep + T * row, ns[i], x, K, xq, ldq,
                                ones, ones_i, T, 1);
                row += ns[i];
            }
            memset(y_grp, 0, sizeof y_grp);
            moe8_proj_apply_group(pp, ys, ldy, 3, moe8_kernels_get(), x, K, xq, ldq, ones, ones_i,
                                  T, nt);
            CHECKF(!memcmp(y_sep, y_grp, sizeof y_sep), "%s group of 3 projections, %d threads: "
                   "differs from separate calls", is_float ? "float" : "W8A8", nt);
        }
        moe8_free_aligned(xq);
        for (int i = 0; i < 3; i++) moe8_proj_free(&p[i]);
    }
}

/* Forward-phase accounting (moe8_bench_forward_timing): on, a prefill adds
 * time to every phase the model has, the phases sum to no more than the
 * whole moe8_decode, the MoE counters count each MoE layer once, and the
 * logits are those of a run with it off (it only reads clocks). Off, nothing
 * moves. Then `moe8 bench forward` prints its table on the same model. */
static void test_phase_timing(moe8_model *m, const char *dir) {
    const moe8_config *cfg = moe8_model_config(m);
    const int V = (int)cfg->vocab_size, n = 9;
    int n_moe = 0;
    for (int64_t l = 0; l < cfg->num_hidden_layers; l++) n_moe += moe8_config_is_moe_layer(cfg, l);
    float *a = malloc(sizeof(float) * (size_t)V * n), *b = malloc(sizeof(float) * (size_t)V * n);
    moe8_forward_times ft;
    moe8_context *c1 = new_ctx(m, 64, 1, 2, 0), *c2 = new_ctx(m, 64, 1, 2, 0);
    moe8_bench_forward_times(&ft, 1);
    CHECK(prefill(c1, 0, PROMPT, n, a) == MOE8_OK);
    moe8_bench_forward_times(&ft, 1);
    CHECKF(ft.n_forward == 0 && ft.forward_s == 0.0 && ft.phase_s[MOE8_PHASE_ATTN_CORE] == 0.0,
           "timing off, yet %lld forwards counted", (long long)ft.n_forward);
    moe8_bench_forward_timing(1);
    CHECK(prefill(c2, 0, PROMPT, n, b) == MOE8_OK);
    moe8_bench_forward_timing(0);
    moe8_bench_forward_times(&ft, 1);
    CHECKF(!memcmp(a, b, sizeof(float) * (size_t)V * n), "logits differ with phase timing on");
    double sum = 0.0;
    for (int p = 0; p < MOE8_PHASE_COUNT; p++) {
        sum += ft.phase_s[p];
        const int expect = p == MOE8_PHASE_COMM ? 0
                           : p == MOE8_PHASE_ROUTER || p == MOE8_PHASE_EXPERTS ? n_moe > 0
                           : p == MOE8_PHASE_DENSE_MLP ? n_moe < cfg->num_hidden_layers : 1;
        CHECKF((ft.phase_s[p] > 0.0) == expect, "phase '%s': %g s (expected %s)",
               moe8_phase_name((moe8_phase)p), ft.phase_s[p], expect ? "> 0" : "0");
    }
    CHECKF(ft.n_forward == 1 && sum <= ft.forward_s * (1 + 1e-9) + 1e-6,
           "%lld forwards; phases sum to %g s of a %g s forward", (long long)ft.n_forward, sum,
           ft.forward_s);
    CHECKF(ft.moe_calls == n_moe && ft.expert_blocks >= n_moe &&
           ft.expert_blocks <= (int64_t)n_moe * cfg->num_experts,
           "%lld MoE calls (want %d), %lld active experts", (long long)ft.moe_calls, n_moe,
           (long long)ft.expert_blocks);
    CHECK(strcmp(moe8_phase_name(MOE8_PHASE_ATTN_CORE), "attention core") == 0 &&
          strcmp(moe8_phase_name((moe8_phase)MOE8_PHASE_COUNT), "?") == 0);
    moe8_context_free(c1);
    moe8_context_free(c2);
    free(a);
    free(b);

    char cmd[16384], out[4200], line[1024], mdir[4096];
    int rows = 0, whole = 0, decode = 0;
    snprintf(mdir, sizeof mdir, "%s", dir); /* test_tmpdir reuses its buffer */
    dir = mdir;
    snprintf(out, sizeof out, "%s/bench_forward.md", test_tmpdir("fwd_bench"));
    snprintf(cmd, sizeof cmd, "'%s' bench forward -m '%s' --tokens 1,8 --ctx 12 --steps 2 --reps 1 "
             "--bw-mb 16 --threads 2 >'%s' 2>/dev/null", MOE8_CLI, dir, out);
    CHECKF(system(cmd) == 0, "%s failed", cmd);
    FILE *f = fopen(out, "r");
    CHECK(f != NULL);
    while (f && fgets(line, sizeof line, f)) {
        rows += !strncmp(line, "| attention core |", 18) || !strncmp(line, "| experts |", 11);
        whole += !strncmp(line, "| **whole forward** |", 21);
        decode += !strncmp(line, "decode: ", 8);
    }
    if (f) fclose(f);
    CHECKF(rows == 4 && whole == 2 && decode == 1, "bench forward tables: %d phase rows, %d whole-"
           "forward lines, %d decode lines (want 4, 2, 1)", rows, whole, decode);
    snprintf(cmd, sizeof cmd, "'%s' bench forward -m '%s' --tokens 0 >/dev/null 2>&1", MOE8_CLI, dir);
    CHECKF(WEXITSTATUS(system(cmd)) == 2, "bench forward --tokens 0 should fail with usage (2)");
}

/* ---- MOE8_FORCE_REF=1 in a child process vs this one ------------------------- */

/* Logits of every prompt position + N_GREEDY greedy tokens. */
typedef struct {
    float logits[9 * MAX_V];
    int32_t tokens[N_GREEDY];
    int32_t n_tokens;
    char isa[8];
} dump_t;

static void run_dump(const char *dir, int n_threads, dump_t *d) {
    moe8_model *m = test_load_model(dir);
    moe8_context *c = new_ctx(m, 32, 1, n_threads, 0);
    moe8_sampler *s = NULL;
    const int32_t *pp = PROMPT;
    int32_t np = 9;
    moe8_generate_request r = {1, &pp, &np, N_GREEDY, NULL, 0, NULL, NULL, d->tokens,
                               &d->n_tokens, NULL};
    memset(d, 0, sizeof *d);
    snprintf(d->isa, sizeof d->isa, "%s", moe8_kernel_isa());
    CHECK(prefill(c, 0, PROMPT, 9, d->logits) == MOE8_OK);
    CHECK(moe8_sampler_create(NULL, moe8_context_n_vocab(c), &s, NULL) == MOE8_OK);
    CHECK(moe8_generate(c, s, &r, NULL) == MOE8_OK);
    moe8_sampler_free(s);
    moe8_context_free(c);
    moe8_model_free(m);
}

static int child_dump(const char *dir, const char *out, const char *kv) {
    dump_t d;
    if (moe8_dtype_parse(kv, &g_kv)) return 2;
    run_dump(dir, 2, &d);
    test_write_file(out, &d, sizeof d);
    return test_summary();
}

static void compare_force_ref(const char *self, const char *label, const fx_opts *o, double tol) {
    const char *dir = write_fixture(label, o);
    char out[4200], cmd[9000];
    dump_t opt, ref;
    FILE *f;
    run_dump(dir, 2, &opt);
    snprintf(out, sizeof out, "%s/ref.bin", dir);
    snprintf(cmd, sizeof cmd, "MOE8_FORCE_REF=1 '%s' --dump '%s' '%s' %s", self, dir, out,
             kv_name(g_kv));
    CHECKF(system(cmd) == 0, "child failed: %s", cmd);
    f = fopen(out, "rb");
    CHECK(f && fread(&ref, sizeof ref, 1, f) == 1);
    if (f) fclose(f);
    CHECKF(!strcmp(ref.isa, "ref"), "child ran %s kernels", ref.isa);
    double rel = max_rel_f(opt.logits, ref.logits, 9 * (int)o->vocab);
    printf("%-26s %s vs ref kernels, %s KV: rel diff %.3g\n", label, opt.isa, kv_name(g_kv), rel);
    CHECKF(rel <= tol, "%s: %s vs ref kernels: logits rel diff %.3g > %g", label, opt.isa, rel, tol);
    CHECK(opt.n_tokens == N_GREEDY && ref.n_tokens == N_GREEDY &&
          !memcmp(opt.tokens, ref.tokens, sizeof opt.tokens));
}

static void test_force_ref(const char *self) {
    fx_opts o = float_opts();
    compare_force_ref(self, "fwd_forceref_float", &o, 1e-5);
    o = w8a8_opts(0);
    compare_force_ref(self, "fwd_forceref_w8a8", &o, 1e-5);
    g_kv = MOE8_DT_F16;
    compare_force_ref(self, "fwd_forceref_w8a8_f16", &o, 1e-5);
    g_kv = MOE8_DT_F32;
}

/* ---- KV cache types ------------------------------------------------------------ */

/* F16 and BF16 caches against the F32 one: the same greedy tokens, and every
 * position's logits within 1e-2 relative (max|a-b| / max|b|) on float models.
 * On W8A8 ones a rounded K/V may move an activation code of the static o_proj
 * (or an expert choice) by one step, which max-relative sees as a jump: there
 * the bound is a cosine, as against the double reference. */
static void check_kv_types(const char *label, const fx_opts *o) {
    static const moe8_dtype types[3] = {MOE8_DT_F32, MOE8_DT_F16, MOE8_DT_BF16};
    const char *dir = write_fixture(label, o);
    const int V = (int)o->vocab;
    dump_t d[3];
    for (int i = 0; i < 3; i++) {
        g_kv = types[i];
        run_dump(dir, 2, &d[i]);
    }
    g_kv = MOE8_DT_F32;
    for (int i = 1; i < 3; i++) {
        double last = max_rel_f(d[i].logits + 8 * V, d[0].logits + 8 * V, V), worst = 0;
        for (int t = 0; t < 9; t++)
            worst = fmax(worst, max_rel_f(d[i].logits + t * V, d[0].logits + t * V, V));
        double cos = 1;
        for (int t = 0; t < 9; t++)
            cos = fmin(cos, test_cosine(d[i].logits + t * V, d[0].logits + t * V, V));
        printf("%-26s %s KV vs F32 KV: last-token rel diff %.3g, worst position %.3g, "
               "cosine %.6f\n", label, kv_name(types[i]), last, worst, cos);
        if (!o->quant) {
            CHECKF(last <= 1e-2 && worst <= 1e-2, "%s: %s KV vs F32: rel diff %.3g, worst %.3g",
                   label, kv_name(types[i]), last, worst);
            CHECKF(last > 0, "%s: %s KV should round K/V (logits equal those of F32)", label,
                   kv_name(types[i]));
        } else {
            CHECKF(cos >= 0.999, "%s: %s KV vs F32: cosine %.6f", label, kv_name(types[i]), cos);
        }
        CHECKF(d[i].n_tokens == N_GREEDY && d[0].n_tokens == N_GREEDY &&
               !memcmp(d[i].tokens, d[0].tokens, sizeof d[0].tokens),
               "%s: %s KV greedy tokens differ from F32 KV", label, kv_name(types[i]));
    }
}

static void test_kv_types(void) {
    fx_opts o = float_opts();
    check_kv_types("fwd_kv_float", &o);
    o = w8a8_opts(0);
    check_kv_types("fwd_kv_w8a8", &o);
    o = w8a8_opts(1);
    check_kv_types("fwd_kv_w8a8_f32", &o);
}

static void test_bad_kv_type(moe8_model *m) {
    moe8_context_params p = moe8_context_params_default();
    moe8_context *c = NULL;
    moe8_error e;
    CHECK(p.kv_type == MOE8_DT_F16);
    p.kv_type = MOE8_DT_I8;
    CHECK(moe8_context_create(m, &p, &c, &e) == MOE8_ERR_INVALID_ARG && !c &&
          strstr(e.message, "kv_type I8 must be F32, F16 or BF16"));
    p.kv_type = MOE8_DT_F64; /* a zeroed struct */
    CHECK(moe8_context_create(m, &p, &c, &e) == MOE8_ERR_INVALID_ARG && !c);
}

/* ---- threads, batching, decode vs prefill ----------------------------------- */

static void test_threads(const char *dir) {
    static const moe8_dtype types[3] = {MOE8_DT_F32, MOE8_DT_F16, MOE8_DT_BF16};
    for (int i = 0; i < 3; i++) {
        dump_t a, b, c;
        g_kv = types[i];
        run_dump(dir, 1, &a);
        run_dump(dir, 2, &b);
        run_dump(dir, 3, &c);
        CHECKF(!memcmp(a.logits, b.logits, sizeof a.logits) &&
               !memcmp(a.logits, c.logits, sizeof a.logits),
               "%s KV: 1 vs 2 vs 3 threads: logits differ", kv_name(types[i]));
        CHECK(!memcmp(a.tokens, b.tokens, sizeof a.tokens) &&
              !memcmp(a.tokens, c.tokens, sizeof a.tokens));
    }
    g_kv = MOE8_DT_F32;
}

/* int8 lm_head: thread counts bit-identical, AVX2 vs reference kernels. */
static void test_lm_head_threads_ref(const char *self) {
    fx_opts o = w8a8_opts(0);
    o.lm_head_w8a8 = 1;
    test_threads(write_fixture("fwd_threads_lmhead", &o));
    compare_force_ref(self, "fwd_forceref_w8a8_lmhead", &o, 1e-5);
}

static moe8_status gen(moe8_context *c, int n_seq, const int32_t *const *prompts,
                       const int32_t *lens, int n_predict, const int32_t *stop, int n_stop,
                       moe8_token_fn cb, void *user, int32_t *toks, int32_t *n_out,
                       moe8_finish *fin, moe8_error *e) {
    moe8_sampler *s = NULL;
    moe8_generate_request r = {n_seq, prompts, lens, n_predict, stop, n_stop, cb, user, toks, n_out, fin};
    moe8_sampler_create(NULL, moe8_context_n_vocab(c), &s, NULL);
    moe8_status st = moe8_generate(c, s, &r, e);
    moe8_sampler_free(s);
    return st;
}

static void test_batch_vs_alone(moe8_model *m) {
    static const int32_t p1[5] = {11, 22, 33, 44, 55}, p2[3] = {200, 201, 3};
    const int32_t *prompts[3] = {PROMPT, p1, p2};
    const int32_t lens[3] = {9, 5, 3};
    int32_t toks[3 * 8], n_out[3], alone[8], n_alone;
    moe8_finish fin[3];
    moe8_context *c = new_ctx(m, 40, 3, 2, 0);
    CHECK(gen(c, 3, prompts, lens, 8, NULL, 0, NULL, NULL, toks, n_out, fin, NULL) == MOE8_OK);
    for (int i = 0; i < 3; i++) {
        moe8_context *c1 = new_ctx(m, 40, 1, 2, 0);
        CHECK(gen(c1, 1, &prompts[i], &lens[i], 8, NULL, 0, NULL, NULL, alone, &n_alone, NULL,
                  NULL) == MOE8_OK);
        CHECKF(n_out[i] == 8 && n_alone == 8 && fin[i] == MOE8_FINISH_LENGTH &&
               !memcmp(alone, toks + 8 * i, sizeof alone),
               "prompt %d: batched tokens differ from alone", i);
        CHECK(moe8_context_seq_len(c, i) == 0); /* generate gives its sequences back */
        moe8_context_free(c1);
    }
    moe8_kv_stats ks;
    moe8_context_kv_stats(c, &ks);
    CHECKF(ks.n_used == 0 && ks.n_cached + ks.n_free == ks.n_blocks,
           "kv pool after generate: %d used, %d cached, %d free of %d", ks.n_used, ks.n_cached,
           ks.n_free, ks.n_blocks);
    moe8_context_free(c);
}

static void test_decode_vs_prefill(moe8_model *m) {
    const int V = (int)moe8_model_config(m)->vocab_size;
    float *all = malloc(sizeof(float) * 9 * V), *one = malloc(sizeof(float) * V);
    moe8_context *c = new_ctx(m, 64, 2, 2, 0);
    double worst = 0;
    CHECK(prefill(c, 0, PROMPT, 9, all) == MOE8_OK);
    for (int t = 0; t < 9; t++) {
        CHECK(prefill(c, 1, PROMPT + t, 1, one) == MOE8_OK);
        worst = fmax(worst, max_rel_f(one, all + (size_t)t * V, V));
    }
    printf("token-by-token vs prefill, %s KV: rel diff %.3g\n", kv_name(g_kv), worst);
    CHECKF(worst == 0, "token-by-token vs prefill, %s KV: rel diff %.3g", kv_name(g_kv), worst);
    /* rewind sequence 0 to 4 tokens and decode the rest again */
    CHECK(moe8_context_seq_truncate(c, 0, 4, NULL) == MOE8_OK && moe8_context_seq_len(c, 0) == 4);
    float *again = malloc(sizeof(float) * 5 * V);
    CHECK(prefill(c, 0, PROMPT + 4, 5, again) == MOE8_OK);
    CHECKF(max_rel_f(again, all + 4 * (size_t)V, 5 * V) == 0, "after truncate: logits differ");
    free(again);
    free(all);
    free(one);
    moe8_context_free(c);
}

/* ---- errors: overflow, bad batches ------------------------------------------ */

static void test_overflow(moe8_model *m) {
    moe8_context *c = new_ctx(m, 8, 1, 1, 0);
    int32_t tok = 1, pos = 8, seq = 0, toks[10], n_out;
    moe8_finish fin;
    moe8_error e;
    const int32_t *pp = PROMPT;
    int32_t n9 = 9, n6 = 6, ref_toks[10], ref_n;
    CHECK(prefill(c, 0, PROMPT, 8, NULL) == MOE8_OK);
    moe8_batch b = {1, &tok, &pos, &seq, NULL};
    CHECK(moe8_decode(c, &b, &e) == MOE8_ERR_INVALID_ARG && strstr(e.message, "context overflow"));
    CHECK(moe8_context_seq_len(c, 0) == 8 && moe8_context_logits(c, 0) == NULL);
    CHECK(gen(c, 1, &pp, &n9, 4, NULL, 0, NULL, NULL, toks, &n_out, &fin, &e) == MOE8_ERR_INVALID_ARG);
    CHECK(strstr(e.message, "n_ctx") != NULL);
    /* 6-token prompt in an 8-position cache: 3 tokens fit (the last is not fed back) */
    CHECK(gen(c, 1, &pp, &n6, 10, NULL, 0, NULL, NULL, toks, &n_out, &fin, NULL) == MOE8_OK);
    CHECKF(n_out == 3 && fin == MOE8_FINISH_CONTEXT, "n_out %d finish %d", n_out, fin);
    moe8_context *big = new_ctx(m, 32, 1, 1, 0);
    CHECK(gen(big, 1, &pp, &n6, 10, NULL, 0, NULL, NULL, ref_toks, &ref_n, NULL, NULL) == MOE8_OK);
    CHECK(ref_n == 10 && !memcmp(toks, ref_toks, 3 * sizeof(int32_t)));
    moe8_context_free(big);
    moe8_context_free(c);
}

static void test_bad_batches(moe8_model *m) {
    moe8_context *c = new_ctx(m, 16, 2, 1, 0);
    int32_t tok[3] = {1, 2, 3}, pos[3] = {0, 1, 2}, seq[3] = {0, 0, 0};
    int8_t lg[3] = {1, 1, 1};
    moe8_error e;
    moe8_batch b = {3, tok, pos, seq, NULL};
    pos[1] = 2;
    CHECK(moe8_decode(c, &b, &e) == MOE8_ERR_INVALID_ARG && strstr(e.message, "position"));
    CHECK(moe8_context_seq_len(c, 0) == 0);
    pos[1] = 1;
    seq[2] = 2;
    CHECK(moe8_decode(c, &b, &e) == MOE8_ERR_INVALID_ARG && strstr(e.message, "sequence id"));
    seq[2] = 0;
    tok[0] = 256;
    CHECK(moe8_decode(c, &b, &e) == MOE8_ERR_INVALID_ARG && strstr(e.message, "id 256"));
    tok[0] = 1;
    b.n_tokens = 0;
    CHECK(moe8_decode(c, &b, &e) == MOE8_ERR_INVALID_ARG);
    b.n_tokens = 3;
    b.logits = lg;
    CHECK(moe8_decode(c, &b, &e) == MOE8_OK && moe8_context_seq_len(c, 0) == 3);
    CHECK(moe8_context_logits(c, 0) && moe8_context_logits(c, 2) && !moe8_context_logits(c, 3));
    /* two sequences interleaved; NULL logits = last token of each sequence */
    int32_t t2[4] = {4, 9, 5, 10}, p2[4] = {3, 0, 4, 1}, s2[4] = {0, 1, 0, 1};
    moe8_batch b2 = {4, t2, p2, s2, NULL};
    CHECK(moe8_decode(c, &b2, &e) == MOE8_OK);
    CHECK(!moe8_context_logits(c, 0) && !moe8_context_logits(c, 1) && moe8_context_logits(c, 2) &&
          moe8_context_logits(c, 3));
    CHECK(moe8_context_seq_len(c, 0) == 5 && moe8_context_seq_len(c, 1) == 2);
    CHECK(moe8_context_seq_truncate(c, 5, 0, &e) == MOE8_ERR_INVALID_ARG);
    moe8_context_params p = moe8_context_params_default();
    moe8_context *bad = NULL;
    p.n_ctx = 5000; /* > max_position_embeddings 4096 */
    CHECK(moe8_context_create(m, &p, &bad, &e) == MOE8_ERR_INVALID_ARG && !bad);
    moe8_context_free(c);
}

/* ---- generate: callback, stop ids -------------------------------------------- */

typedef struct {
    int n, stop_after, cancel_after;
} cb_state;

static int on_token(void *user, int32_t seq, int32_t token) {
    cb_state *s = user;
    (void)token;
    s->n++;
    if (s->cancel_after && s->n >= s->cancel_after) return MOE8_GEN_CANCEL;
    if (seq == 0 && s->stop_after && s->n >= s->stop_after) return MOE8_GEN_STOP_SEQ;
    return MOE8_GEN_CONTINUE;
}

static void test_generate_controls(moe8_model *m) {
    moe8_context *c = new_ctx(m, 32, 2, 1, 0);
    const int32_t *pp[2] = {PROMPT, PROMPT + 2};
    int32_t lens[2] = {9, 7}, toks[2 * 6], n_out[2], base[6], n_base;
    moe8_finish fin[2];
    moe8_error e;
    cb_state cs = {0, 0, 3};
    CHECK(gen(c, 1, pp, lens, 6, NULL, 0, NULL, NULL, base, &n_base, NULL, NULL) == MOE8_OK);
    CHECK(gen(c, 2, pp, lens, 6, NULL, 0, on_token, &cs, toks, n_out, fin, &e) == MOE8_ERR_CANCELLED);
    CHECKF(cs.n == 3 && n_out[0] + n_out[1] == 3 && fin[0] == MOE8_FINISH_NONE,
           "cancel: %d calls, n_out %d+%d", cs.n, n_out[0], n_out[1]);
    cs = (cb_state){0, 1, 0};
    CHECK(gen(c, 2, pp, lens, 6, NULL, 0, on_token, &cs, toks, n_out, fin, &e) == MOE8_OK);
    CHECK(fin[0] == MOE8_FINISH_CALLBACK && n_out[0] == 1 && fin[1] == MOE8_FINISH_LENGTH &&
          n_out[1] == 6);
    /* the third greedy token as a stop id: two tokens come out */
    CHECK(gen(c, 1, pp, lens, 6, &base[2], 1, NULL, NULL, toks, n_out, fin, NULL) == MOE8_OK);
    int first = 0;
    while (base[first] != base[2]) first++;
    CHECK(fin[0] == MOE8_FINISH_STOP && n_out[0] == first && !memcmp(toks, base, first * sizeof(int32_t)));
    moe8_context_free(c);
}

/* ---- two threads, one model, a context each ---------------------------------- */

typedef struct {
    moe8_model *m;
    int32_t toks[8], n;
    moe8_status st;
} thread_job;

static void *thread_gen(void *arg) {
    thread_job *j = arg;
    const int32_t *pp = PROMPT;
    int32_t np = 9;
    moe8_context *c = new_ctx(j->m, 32, 1, 1, 0);
    j->st = gen(c, 1, &pp, &np, 8, NULL, 0, NULL, NULL, j->toks, &j->n, NULL, NULL);
    moe8_context_free(c);
    return NULL;
}

static void test_concurrent_contexts(moe8_model *m) {
    thread_job a = {m, {0}, 0, -1}, b = {m, {0}, 0, -1}, seq = {m, {0}, 0, -1};
    pthread_t ta, tb;
    thread_gen(&seq);
    CHECK(pthread_create(&ta, NULL, thread_gen, &a) == 0);
    CHECK(pthread_create(&tb, NULL, thread_gen, &b) == 0);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    CHECK(a.st == MOE8_OK && b.st == MOE8_OK && a.n == 8 && b.n == 8);
    CHECK(!memcmp(a.toks, seq.toks, sizeof a.toks) && !memcmp(b.toks, seq.toks, sizeof b.toks));
}

int main(int argc, char **argv) {
    test_table_or_skip(); /* MOE8_ISA: a table this CPU lacks is skipped */
    if (argc == 5 && !strcmp(argv[1], "--dump")) return child_dump(argv[2], argv[3], argv[4]);
    test_static_linear_full_range();
    test_linear_layout_refused();
    test_static_quant_edges();
    test_proj_group();
    test_dynamic_linear();
    test_vs_reference();
    test_force_ref(argv[0]);
    test_kv_types();
    fx_opts o = w8a8_opts(0);
    const char *dir = write_fixture("fwd_main", &o);
    test_threads(dir);
    fx_opts of = float_opts();
    test_threads(write_fixture("fwd_threads_float", &of));
    test_lm_head_threads_ref(argv[0]);
    moe8_model *m = test_load_model(dir);
    test_bad_kv_type(m);
    test_phase_timing(m, dir);
    for (int i = 0; i < 3; i++) {
        g_kv = i == 0 ? MOE8_DT_F32 : i == 1 ? MOE8_DT_F16 : MOE8_DT_BF16;
        test_decode_vs_prefill(m);
    }
    g_kv = moe8_context_params_default().kv_type; /* the rest with the library's default */
    test_batch_vs_alone(m);
    test_overflow(m);
    test_bad_batches(m);
    test_generate_controls(m);
    test_concurrent_contexts(m);
    moe8_model_free(m);
    return test_summary();
}
