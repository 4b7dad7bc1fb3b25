/*
 * test_glm4_moe.c — the GLM-4.5 / 4.6 / 4.7 family (glm4_moe,
 * Glm4MoeForCausalLM) against the test's own reading of transformers'
 * modeling_glm4_moe.py (fixture_model.h FX_GLM4_MOE, forward_ref.h
 * ref_layer_sig): partial rotary (partial_rotary_factor of head_dim,
 * rotate_half within the rotary dims), q/k/v biases, per-head q/k RMSNorm
 * (use_qk_norm), sigmoid routing with e_score_correction_bias for the
 * selection only, grouped top-k (a group's two best summed), norm_topk_prob,
 * routed_scaling_factor, shared experts added ungated, dense first
 * first_k_dense_replace layers, and the num_nextn_predict_layers MTP layer
 * model.layers.{num_hidden_layers}.* present in the folder and skipped.
 *   - the reference itself: partial rotary against the full rotary on the
 *     rotary dims, hand-made routing, the routing and the MoE block equal to
 *     DeepSeek-V3's reference on the same tensors; with the rotary full, the
 *     biases off and q/k norms on, the whole GLM model equals the Qwen3-MoE
 *     reference on the same weights (float and W8A8), with the norms off and
 *     the biases on the Qwen2-MoE one; the fixture's names, config.json keys
 *     and quantization description;
 *   - then, when moe8 knows glm4_moe (else "SKIP: engine lacks glm4_moe",
 *     exit 77): the float forward within 1e-4 relative at every position,
 *     prefill and decode; W8A8 at cosine >= 0.9999 against the reference's
 *     W8A8 maths; the MTP layer skipped even when malformed; corrupt and
 *     mismatched folders refused naming the tensor.
 */
#include "test.h"

#include <sys/wait.h>

#include "fixture_model.h"
#include "forward_ref.h"
#include "family_test.h"

#include "moe8.h"

/* The tiny GLM fixture: H 64, 4/2 heads of 16 (rotary 8), E 8 in 4 groups
 * (2 kept), top-3, I 32, one shared expert, dense 96, 3 layers (layer 0
 * dense), routed_scaling_factor 2.5, the MTP layer model.layers.3.*. */
static fx_opts glm_opts(int quant) {
    fx_opts o = fx_default_opts();
    o.arch = FX_GLM4_MOE;
    o.quant = quant;
    o.n_layers = 3;
    o.n_experts = 8;
    o.top_k = 3;
    o.moe_inter = 32;
    o.inter = 96;
    o.n_group = 4;
    o.topk_group = 2;
    o.routed_scale = 2.5;
    o.seed = 900 + (uint64_t)quant;
    if (quant) {
        o.nonzero_offsets = 1;
        o.deq_i64 = 1;
    }
    return o;
}

static double max_abs_diff(const double *a, const double *b, size_t n) {
    double d = 0;
    for (size_t i = 0; i < n; i++) d = fmax(d, fabs(a[i] - b[i]));
    return d;
}

static double max_abs(const double *a, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(a[i]));
    return m;
}

/* ======================================================================== */
/* The reference itself                                                      */
/* ======================================================================== */

/* Partial rotary: with rot = D it is ref_rope; with rot < D the rotary dims
 * are ref_rope of a rot-wide head and the rest pass; q.k depends only on the
 * distance. */
static void test_ref_rope_partial(void) {
    test_rng r = {17};
    double a[2 * 16], b[2 * 16], c[8];
    for (int i = 0; i < 32; i++) a[i] = b[i] = test_rng_normal(&r);
    ref_rope_partial(a, 2, 16, 16, 5, 1e6);
    ref_rope(b, 2, 16, 5, 1e6);
    CHECK(max_abs_diff(a, b, 32) == 0.0);
    for (int i = 0; i < 32; i++) a[i] = b[i] = test_rng_normal(&r);
    ref_rope_partial(a, 2, 16, 8, 7, 1e6);
    for (int h = 0; h < 2; h++) {
        memcpy(c, b + 16 * h, sizeof c);
        ref_rope(c, 1, 8, 7, 1e6);
        CHECK(max_abs_diff(a + 16 * h, c, 8) <= 1e-15);
        CHECK(max_abs_diff(a + 16 * h + 8, b + 16 * h + 8, 8) == 0.0);
    }
    {
        double q[16], k[16], q1[16], k1[16], d0 = 0, d1 = 0;
        for (int i = 0; i < 16; i++) q[i] = test_rng_normal(&r), k[i] = test_rng_normal(&r);
        memcpy(q1, q, sizeof q), memcpy(k1, k, sizeof k);
        ref_rope_partial(q, 1, 16, 8, 9, 1e4), ref_rope_partial(k, 1, 16, 8, 4, 1e4);
        ref_rope_partial(q1, 1, 16, 8, 15, 1e4), ref_rope_partial(k1, 1, 16, 8, 10, 1e4);
        for (int i = 0; i < 16; i++) d0 += q[i] * k[i], d1 += q1[i] * k1[i];
        CHECK_NEAR(d0, d1, 1e-12);
    }
}

static double logit(double p) { return log(p / (1 - p)); }

/* GLM's route_tokens_to_experts on hand-made scores, and on random logits
 * equal to DeepSeek-V3's MoEGate reference (the same rules, written apart). */
static void test_ref_route(void) {
    static const double p[8] = {0.9, 0.1, 0.6, 0.6, 0.55, 0.55, 0.2, 0.2};
    double lg[8], bias[8] = {0}, w[4];
    int64_t ids[4];
    /* groups of 2: top-2 sums 1.0, 1.2, 1.1, 0.4 keep groups 1 and 2: expert 0 is dropped */
    for (int e = 0; e < 8; e++) lg[e] = logit(p[e]);
    ref_route_sigmoid(8, 2, lg, bias, 4, 2, 1, 1e-20, 2.5, ids, w);
    CHECK(ids[0] == 2 && ids[1] == 3);
    CHECK_NEAR(w[0], 0.5 * 2.5, 1e-12);
    /* the bias picks expert 5 over 3; the weights stay the unbiased scores */
    bias[5] = 0.1;
    ref_route_sigmoid(8, 2, lg, bias, 4, 2, 1, 1e-20, 2.5, ids, w);
    CHECK(ids[0] == 5 && ids[1] == 2);
    CHECK_NEAR(w[0], 0.55 / 1.15 * 2.5, 1e-12);
    CHECK_NEAR(w[1], 0.6 / 1.15 * 2.5, 1e-12);
    /* norm_topk_prob false: the scores times the factor */
    ref_route_sigmoid(8, 2, lg, bias, 4, 2, 0, 1e-20, 2.5, ids, w);
    CHECK_NEAR(w[0], 0.55 * 2.5, 1e-12);
    /* one group (GLM-4.5's n_group 1): plain top-k of the biased scores */
    ref_route_sigmoid(8, 2, lg, bias, 1, 1, 1, 1e-20, 1.0, ids, w);
    CHECK(ids[0] == 0 && ids[1] == 5);
    CHECK_NEAR(w[0] + w[1], 1.0, 1e-12);
    /* random logits and biases: the same ids and weights as ref_route_deepseek (V3) */
    {
        test_rng r = {4242};
        static const int cfg[][5] = {/* E, K, n_group, topk_group, no_renorm */
                                     {8, 3, 4, 2, 0}, {8, 3, 4, 2, 1}, {16, 4, 1, 1, 0},
                                     {16, 6, 8, 3, 0}, {12, 2, 3, 1, 1}, {32, 8, 4, 4, 0}};
        int bad = 0;
        for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++)
            for (int trial = 0; trial < 50; trial++) {
                fx_opts o = fx_default_opts();
                double l2[64], b2[64], w1[16], w2[16];
                int64_t i1[16], i2[16];
                o.arch = FX_DEEPSEEK_V3, o.n_experts = cfg[c][0], o.top_k = cfg[c][1];
                o.n_group = cfg[c][2], o.topk_group = cfg[c][3], o.no_renorm = cfg[c][4];
                o.routed_scale = 1.0 + 0.5 * (double)c;
                for (int e = 0; e < cfg[c][0]; e++)
                    l2[e] = 2.0 * test_rng_normal(&r), b2[e] = 0.1 * test_rng_uniform(&r);
                ref_route_sigmoid(o.n_experts, o.top_k, l2, b2, o.n_group, o.topk_group,
                                  !o.no_renorm, 1e-20, o.routed_scale, i1, w1);
                ref_route_deepseek(&o, l2, b2, i2, w2);
                for (int j = 0; j < cfg[c][1]; j++)
                    bad += i1[j] != i2[j] || fabs(w1[j] - w2[j]) > 1e-14;
            }
        CHECKF(bad == 0, "%d routing mismatches against the DeepSeek-V3 reference", bad);
    }
}

/* The MoE block (routed + shared, float and W8A8) equals DeepSeek-V3's
 * reference on the same tensors (the fixture writes GLM's MoE under
 * DeepSeek-V3's names). */
static void test_ref_moe_vs_deepseek(void) {
    for (int quant = 0; quant < 2; quant++)
        for (int v = 0; v < 3; v++) {
            fx_opts o = glm_opts(quant);
            ref_model rm, rd;
            test_rng r = {77 + (unsigned long long)v};
            double h[64], a[64], b[64];
            if (v == 1) o.no_renorm = 1, o.n_shared = 2;
            if (v == 2) o.n_group = 1, o.topk_group = 1, o.routed_scale = 1.0, o.down_float = quant;
            ref_init(&rm, &o);
            rd = rm; /* the same tensors, read as DeepSeek-V3's */
            rd.o.arch = FX_DEEPSEEK_V3;
            for (int t = 0; t < 4; t++) {
                for (int i = 0; i < 64; i++) h[i] = test_rng_normal(&r);
                ref_moe_sig(a, h, &rm, 1 + t % 2);
                ref_moe_deepseek(b, h, &rd, 1 + t % 2);
                CHECKF(max_abs_diff(a, b, 64) <= 1e-12 * max_abs(b, 64), "quant %d variant %d: %g",
                       quant, v, max_abs_diff(a, b, 64));
            }
            ref_free(&rm);
        }
}

/* With the rotary full, q/k norms on and no biases, every layer dense, the
 * same eps and theta, the GLM reference is Qwen3-MoE's on the same weights
 * (the same tensor names, so the same values); with the norms off and the
 * biases on, Qwen2-MoE's. Float and W8A8. */
static void test_ref_vs_qwen(void) {
    for (int quant = 0; quant < 2; quant++)
        for (int qwen2 = 0; qwen2 < 2; qwen2++) {
            fx_opts g = glm_opts(quant), q = fx_default_opts();
            ref_model rg, rq;
            const int n = 6, V = 256;
            double *lg = malloc(sizeof(double) * n * V), *lq = malloc(sizeof(double) * n * V);
            g.n_layers = 1, g.first_dense = 1;
            g.partial_rotary = 1.0, g.rms_eps = 1e-6, g.theta = 1e6;
            g.no_qk_norm = qwen2, g.no_attn_bias = !qwen2;
            g.qkv_same_input = 0;
            q.arch = qwen2 ? FX_QWEN2 : FX_QWEN3;
            q.quant = quant, q.seed = g.seed, q.n_layers = 1, q.dense_layer = 0;
            q.inter = g.inter, q.nonzero_offsets = g.nonzero_offsets, q.deq_i64 = g.deq_i64;
            q.qkv_same_input = 0;
            ref_init(&rg, &g);
            ref_init(&rq, &q);
            ref_forward(&rg, PROMPT, n, lg);
            ref_forward(&rq, PROMPT, n, lq);
            printf("glm reference vs %s reference (%s): max |diff| %.3g of %.3g\n",
                   qwen2 ? "qwen2_moe" : "qwen3_moe", quant ? "W8A8" : "float",
                   max_abs_diff(lg, lq, (size_t)n * V), max_abs(lq, (size_t)n * V));
            CHECK(max_abs_diff(lg, lq, (size_t)n * V) <= 1e-12 * max_abs(lq, (size_t)n * V));
            /* and partial rotary (0.5) changes them */
            ref_free(&rg);
            g.partial_rotary = 0.5;
            ref_init(&rg, &g);
            ref_forward(&rg, PROMPT, n, lg);
            CHECK(max_abs_diff(lg, lq, (size_t)n * V) > 1e-6 * max_abs(lq, (size_t)n * V));
            ref_free(&rg);
            ref_free(&rq);
            free(lg);
            free(lq);
        }
}

/* Each option reaches the reference's logits; the MTP layer does not. */
static void test_ref_options(void) {
    const int n = 6, V = 256;
    double *base = malloc(sizeof(double) * n * V), *l = malloc(sizeof(double) * n * V);
    for (int quant = 0; quant < 2; quant++) {
        fx_opts o = glm_opts(quant);
        ref_model rm;
        ref_init(&rm, &o);
        ref_forward(&rm, PROMPT, n, base);
        ref_free(&rm);
        for (int v = 0; v < 7; v++) {
            fx_opts p = o;
            const double m = max_abs(base, (size_t)n * V);
            if (v == 0) p.no_qk_norm = 1;
            if (v == 1) p.no_attn_bias = 1;
            if (v == 2) p.n_group = 1, p.topk_group = 1;
            if (v == 3) p.routed_scale = 1.0;
            if (v == 4) p.no_renorm = 1;
            if (v == 5) p.rms_eps = 1e-2;
            if (v == 6) p.n_mtp = 0;
            if (v == 1 && quant) continue; /* W8A8: the biases are inside quant_bias */
            ref_init(&rm, &p);
            ref_forward(&rm, PROMPT, n, l);
            ref_free(&rm);
            if (v == 6) CHECKF(max_abs_diff(l, base, (size_t)n * V) == 0.0, "the MTP layer changed the logits");
            else CHECKF(max_abs_diff(l, base, (size_t)n * V) > 1e-9 * m, "option %d (quant %d) changed nothing", v, quant);
        }
    }
    free(base);
    free(l);
}

/* A key of a parsed JSON file: its string ("" when absent or not one), its
 * number (NAN when absent). */
static const char *jstr(const cJSON *root, const char *k) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, k);
    return cJSON_IsString(it) ? it->valuestring : "";
}
static double jnum(const cJSON *root, const char *k) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, k);
    return cJSON_IsNumber(it) ? it->valuedouble : NAN;
}
static const char *arch0(const cJSON *root) {
    const cJSON *it = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "architectures"), 0);
    return cJSON_IsString(it) ? it->valuestring : "";
}
static int jtrue(const cJSON *root, const char *k) {
    return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, k));
}

/* The fixture: names, shapes, config.json keys, the description. */
static void test_ref_fixture(void) {
    fx_opts o = glm_opts(1);
    ref_model rm;
    char path[4200];
    const char *dir;
    unsigned char *text;
    size_t len;
    cJSON *c, *d;
    o.bias_tensor = 1;
    ref_init(&rm, &o);
    CHECK(ref_t(&rm, "model.layers.%lld.self_attn.q_norm.weight", 1, 0)->shape[0] == 16);
    CHECK(ref_t(&rm, "model.layers.%lld.self_attn.k_proj.bias", 1, 0)->shape[0] == 32);
    CHECK(ref_t(&rm, "model.layers.%lld.mlp.gate.e_score_correction_bias", 2, 0)->dtype == MOE8_DT_F32);
    CHECK(ref_t(&rm, "model.layers.%lld.mlp.shared_experts.down_proj.weight", 1, 0)->shape[1] == 32);
    CHECK(ref_t(&rm, "model.layers.%lld.mlp.down_proj.weight", 0, 0)->shape[1] == 96);
    CHECK(ref_t(&rm, "model.layers.%lld.mlp.experts.%lld.up_proj.weight_scale", 2, 7)->shape[0] == 32);
    /* the MTP layer: a whole decoder layer and the module's own tensors */
    CHECK(ref_t(&rm, "model.layers.%lld.eh_proj.weight", 3, 0)->shape[1] == 128);
    CHECK(ref_t(&rm, "model.layers.%lld.shared_head.head.weight", 3, 0)->shape[0] == 256);
    CHECK(ref_t(&rm, "model.layers.%lld.mlp.experts.%lld.down_proj.weight", 3, 7)->dtype == MOE8_DT_I8);
    ref_free(&rm);
    dir = write_fixture("glm_fixture", &o);
    FMT(path, "%s/config.json", dir);
    text = test_slurp(path, &len);
    c = cJSON_Parse(text ? (const char *)text : "");
    free(text);
    if (!c || !cJSON_IsObject(c)) {
        CHECKF(0, "%s: not a JSON object", path);
        cJSON_Delete(c);
        return;
    }
    CHECK(c && !strcmp(jstr(c, "model_type"), "glm4_moe"));
    CHECK(!strcmp(arch0(c), "Glm4MoeForCausalLM"));
    CHECK(jnum(c, "partial_rotary_factor") == 0.5);
    CHECK(jtrue(c, "use_qk_norm") && jtrue(c, "attention_bias"));
    CHECK(jnum(c, "num_nextn_predict_layers") == 1);
    CHECK(jnum(c, "n_group") == 4 && jnum(c, "topk_group") == 2);
    CHECK(jnum(c, "n_routed_experts") == 8 && jnum(c, "n_shared_experts") == 1);
    CHECK(jnum(c, "first_k_dense_replace") == 1 && jnum(c, "head_dim") == 16);
    CHECK(jnum(c, "routed_scaling_factor") == 2.5);
    CHECK(jtrue(c, "norm_topk_prob") && jnum(c, "rms_norm_eps") == 1e-5);
    cJSON_Delete(c);
    FMT(path, "%s/quant_model_description.json", dir);
    text = test_slurp(path, &len);
    d = cJSON_Parse(text ? (const char *)text : "");
    free(text);
    if (!d || !cJSON_IsObject(d)) {
        CHECKF(0, "%s: not a JSON object", path);
        cJSON_Delete(d);
        return;
    }
#define DESC(k) jstr(d, k)
    CHECK(d && !strcmp(DESC("model.layers.1.mlp.gate.e_score_correction_bias"), "FLOAT"));
    CHECK(!strcmp(DESC("model.layers.1.mlp.gate.weight"), "FLOAT"));
    CHECK(!strcmp(DESC("model.layers.1.self_attn.q_norm.weight"), "FLOAT"));
    CHECK(!strcmp(DESC("model.layers.1.self_attn.q_proj.weight"), "W8A8"));
    CHECK(!strcmp(DESC("model.layers.1.self_attn.q_proj.bias"), "FLOAT"));
    CHECK(!strcmp(DESC("model.layers.0.mlp.gate_proj.weight"), "W8A8"));
    CHECK(!strcmp(DESC("model.layers.2.mlp.experts.3.gate_proj.weight"), "W8A8_DYNAMIC"));
    CHECK(!strcmp(DESC("model.layers.2.mlp.shared_experts.down_proj.weight"), "W8A8_DYNAMIC"));
    CHECK(!strcmp(DESC("model.layers.3.eh_proj.weight"), "FLOAT"));
#undef DESC
    cJSON_Delete(d);
}

/* ======================================================================== */
/* The engine against the reference                                          */
/* ======================================================================== */

static void test_forward_float(void) {
    fx_opts o = glm_opts(0);
    check_vs_ref("glm_float", &o);
    o.no_qk_norm = 1; /* GLM-4.5-Air */
    o.n_group = 1, o.topk_group = 1, o.routed_scale = 1.0;
    o.float_dtype = MOE8_DT_F32;
    check_vs_ref("glm_float_air", &o);
    o = glm_opts(0);
    o.no_renorm = 1, o.n_shared = 2, o.no_attn_bias = 1, o.n_shards = 2;
    o.first_dense = 2, o.n_layers = 4;
    check_vs_ref("glm_float_norenorm_2shared", &o);
    /* real GLM: NH * D != H (96 heads of 128 on 4096); rotary 0.25 of D */
    o = glm_opts(0);
    o.n_heads = 6, o.n_kv_heads = 3, o.head_dim = 16, o.partial_rotary = 0.25;
    o.n_mtp = 0;
    check_vs_ref("glm_float_wide_heads", &o);
}

/* Odd widths (no multiple of 8 or 16: the kernels' tails), one KV head or
 * several, rotary of a quarter or a half, float and W8A8. */
#define N_ODD 4
static fx_opts odd_opts(int i) {
    static const struct { int quant, H, heads, kv, D, E, K, G, TG, I, F; double prf; } S[N_ODD] = {
        {0, 40, 3, 1, 12, 6, 2, 3, 2, 20, 44, 0.5},
        {0, 72, 5, 5, 8, 9, 3, 3, 1, 13, 30, 0.25},
        {1, 40, 3, 1, 12, 6, 2, 3, 2, 20, 44, 0.5},
        {1, 56, 2, 2, 20, 10, 4, 5, 3, 17, 50, 0.4},
    };
    fx_opts o = glm_opts(S[i].quant);
    o.hidden = S[i].H, o.n_heads = S[i].heads, o.n_kv_heads = S[i].kv, o.head_dim = S[i].D;
    o.n_experts = S[i].E, o.top_k = S[i].K, o.n_group = S[i].G, o.topk_group = S[i].TG;
    o.moe_inter = S[i].I, o.inter = S[i].F, o.partial_rotary = S[i].prf;
    o.seed += 31 * (uint64_t)i;
    return o;
}

static void test_ref_odd_shapes(void) {
    for (int i = 0; i < N_ODD; i++) {
        fx_opts o = odd_opts(i);
        ref_model rm;
        double *l = malloc(sizeof(double) * 9 * 256);
        int bad = 0;
        ref_init(&rm, &o);
        ref_forward(&rm, PROMPT, 9, l);
        for (int j = 0; j < 9 * 256; j++) bad += !isfinite(l[j]);
        CHECKF(bad == 0 && max_abs(l, 9 * 256) > 0, "odd shape %d: %d non-finite logits", i, bad);
        ref_free(&rm);
        free(l);
    }
}

static void test_forward_odd_shapes(void) {
    for (int i = 0; i < N_ODD; i++) {
        fx_opts o = odd_opts(i);
        char label[64];
        FMT(label, "glm_odd_%s_%d", o.quant ? "w8a8" : "float", i);
        check_vs_ref(label, &o);
    }
}

static void test_forward_w8a8(void) {
    fx_opts o = glm_opts(1);
    check_vs_ref("glm_w8a8", &o);
    o.bias_tensor = 1;      /* the folded q/k/v biases also written as float .bias: ignored */
    o.qkv_same_input = 0;
    o.scale_2d = 1;
    o.deq_i64 = 0;
    check_vs_ref("glm_w8a8_bias_tensor", &o);
    o = glm_opts(1);
    o.down_float = 1, o.no_qk_norm = 1, o.n_group = 1, o.topk_group = 1;
    o.seed += 50;
    check_vs_ref("glm_w8a8_down_float_air", &o);
}

/* The MTP layer is never read: malformed, it changes nothing. */
static void hook_break_mtp(void *user, fx_tensor *t) {
    (void)user;
    if (!strcmp(t->orig_name, "model.layers.3.eh_proj.weight")) {
        const int64_t shape[2] = {3, 5};
        fx_retype(t, MOE8_DT_F16, 2, shape);
    }
    if (!strcmp(t->orig_name, "model.layers.3.self_attn.q_proj.weight_scale")) t->omit = 1;
}

static void test_mtp_skipped(void) {
    fx_opts o = glm_opts(1);
    o.tensor_hook = hook_break_mtp;
    check_vs_ref("glm_w8a8_mtp_broken", &o);
    o = glm_opts(0);
    o.n_mtp = 2; /* two MTP layers (model.layers.3.* and .4.*), num_nextn_predict_layers 2 */
    check_vs_ref("glm_float_2mtp", &o);
}

/* ======================================================================== */
/* Corrupt and mismatched folders                                            */
/* ======================================================================== */

#define L1 "model.layers.1."
#define GLM FX_GLM4_MOE
static const defect defects[] = {
    {"glm_no_bias", GLM, 0, D_OMIT, L1 "mlp.gate.e_score_correction_bias", 0, {0, 0}, NULL, NULL,
     NULL, MOE8_ERR_NOT_FOUND, "tensor '" L1 "mlp.gate.e_score_correction_bias' not found"},
    {"glm_w8a8_no_bias", GLM, 1, D_OMIT, L1 "mlp.gate.e_score_correction_bias", 0, {0, 0}, NULL,
     NULL, NULL, MOE8_ERR_NOT_FOUND, "tensor '" L1 "mlp.gate.e_score_correction_bias' not found"},
    {"glm_bias_shape", GLM, 0, D_SHAPE, L1 "mlp.gate.e_score_correction_bias", 1, {6, 0}, NULL,
     NULL, NULL, MOE8_ERR_FORMAT, "e_score_correction_bias': expected shape [8], found [6]"},
    {"glm_no_q_bias", GLM, 0, D_OMIT, L1 "self_attn.q_proj.bias", 0, {0, 0}, NULL, NULL, NULL,
     MOE8_ERR_NOT_FOUND, "tensor '" L1 "self_attn.q_proj.bias' not found"},
    {"glm_no_k_norm", GLM, 0, D_OMIT, L1 "self_attn.k_norm.weight", 0, {0, 0}, NULL, NULL, NULL,
     MOE8_ERR_NOT_FOUND, "tensor '" L1 "self_attn.k_norm.weight' not found"},
    {"glm_q_norm_whole", GLM, 0, D_SHAPE, L1 "self_attn.q_norm.weight", 1, {64, 0}, NULL, NULL,
     NULL, MOE8_ERR_FORMAT, "q_norm.weight': expected shape [16], found [64]"},
    {"glm_no_shared_down", GLM, 0, D_OMIT, L1 "mlp.shared_experts.down_proj.weight", 0, {0, 0},
     NULL, NULL, NULL, MOE8_ERR_NOT_FOUND, "tensor '" L1 "mlp.shared_experts.down_proj.weight' not found"},
    {"glm_dense_layer0", GLM, 0, D_OMIT, "model.layers.0.mlp.down_proj.weight", 0, {0, 0}, NULL,
     NULL, NULL, MOE8_ERR_NOT_FOUND, "tensor 'model.layers.0.mlp.down_proj.weight' not found"},
    {"glm_w8a8_no_q_scale", GLM, 1, D_OMIT, L1 "self_attn.q_proj.input_scale", 0, {0, 0}, NULL,
     NULL, NULL, MOE8_ERR_NOT_FOUND, "q_proj.input_scale' not found"},
    /* the selection bias is a router tensor: FLOAT whatever the description says */
    {"glm_desc_bias_w8a8", GLM, 1, D_NONE, NULL, 0, {0, 0}, "quant_model_description.json",
     L1 "mlp.gate.e_score_correction_bias", "\"W8A8\"", MOE8_ERR_UNSUPPORTED,
     "e_score_correction_bias'"},
    {"glm_cfg_group", GLM, 0, D_NONE, NULL, 0, {0, 0}, "config.json", "n_group", "3",
     MOE8_ERR_FORMAT, "n_group"},
    {"glm_cfg_rotary", GLM, 0, D_NONE, NULL, 0, {0, 0}, "config.json", "partial_rotary_factor",
     "1.5", MOE8_ERR_FORMAT, "partial_rotary_factor"},
};

/* A GLM config.json over another family's tensors (or the reverse): the
 * hook replaces config.json with the one of `cfg`. */
static fx_opts g_cfg;
static void hook_swap_config(void *user, const char *file, cJSON *root) {
    cJSON *c, *it;
    (void)user;
    if (strcmp(file, "config.json")) return;
    while (root->child) cJSON_Delete(cJSON_DetachItemViaPointer(root, root->child));
    c = fx_config_json(&g_cfg);
    while ((it = c->child)) cJSON_AddItemToObject(root, it->string, cJSON_DetachItemViaPointer(c, it));
    cJSON_Delete(c);
}

static void check_mismatch(const char *label, fx_opts tensors, fx_opts cfg) {
    moe8_model *m = NULL;
    moe8_error e;
    moe8_status st;
    g_cfg = cfg;
    tensors.json_hook = hook_swap_config;
    memset(&e, 0, sizeof e);
    st = moe8_model_load(write_fixture(label, &tensors), NULL, &m, &e);
    printf("%-30s refused: %s\n", label, e.message);
    CHECKF(st != MOE8_OK && strstr(e.message, "'model.layers.") != NULL,
           "%s: status %d, '%s' names no tensor", label, st, e.message);
    moe8_model_free(m);
}

static void test_defects(void) {
    for (size_t i = 0; i < sizeof defects / sizeof defects[0]; i++)
        check_defect(&defects[i], glm_opts(defects[i].quant));
    for (int quant = 0; quant < 2; quant++) {
        fx_opts mm = glm_opts(quant), glm = glm_opts(quant);
        mm.arch = FX_MINIMAX_M2;
        mm.n_layers = glm.n_layers = 2;
        check_mismatch(quant ? "glm_cfg_minimax_tensors_w8a8" : "glm_cfg_minimax_tensors", mm, glm);
        if (family_unknown("minimax_m2", mm)) /* until the engine has minimax_m2 */
            printf("SKIP: minimax_cfg_glm_tensors%s: engine lacks minimax_m2\n", quant ? "_w8a8" : "");
        else
            check_mismatch(quant ? "minimax_cfg_glm_tensors_w8a8" : "minimax_cfg_glm_tensors", glm, mm);
    }
}

/* GLM-4.5-Air's released config.json (zai-org/GLM-4.5-Air), as published. */
static const char *glm45_air =
    "{\"architectures\": [\"Glm4MoeForCausalLM\"], \"attention_bias\": true,"
    " \"attention_dropout\": 0.0, \"pad_token_id\": 151329,"
    " \"eos_token_id\": [151329, 151336, 151338], \"head_dim\": 128, \"hidden_act\": \"silu\","
    " \"hidden_size\": 4096, \"partial_rotary_factor\": 0.5, \"initializer_range\": 0.02,"
    " \"intermediate_size\": 10944, \"max_position_embeddings\": 131072,"
    " \"model_type\": \"glm4_moe\", \"moe_intermediate_size\": 1408, \"norm_topk_prob\": true,"
    " \"num_attention_heads\": 96, \"n_group\": 1, \"topk_group\": 1, \"n_routed_experts\": 128,"
    " \"n_shared_experts\": 1, \"routed_scaling_factor\": 1.0, \"num_experts_per_tok\": 8,"
    " \"first_k_dense_replace\": 1, \"num_hidden_layers\": 46, \"num_key_value_heads\": 8,"
    " \"rms_norm_eps\": 1e-05, \"rope_scaling\": null, \"rope_theta\": 1000000,"
    " \"num_nextn_predict_layers\": 1, \"tie_word_embeddings\": false,"
    " \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.54.0\", \"use_cache\": true,"
    " \"use_qk_norm\": false, \"vocab_size\": 151552}";

/* The released config parses; `moe8 inspect` names the family. */
static void test_config_and_inspect(void) {
    moe8_config c;
    moe8_error e;
    char cmd[8400], out[16384];
    fx_opts o = glm_opts(1);
    const char *dir = write_fixture("inspect_glm", &o);
    CHECKF(parse(glm45_air, &c, &e) == MOE8_OK, "GLM-4.5-Air config.json: %s", e.message);
    CHECK(!strcmp(moe8_arch_name(c.arch), "glm4_moe"));
    CHECK(c.num_hidden_layers == 46 && c.hidden_size == 4096 && c.num_experts_per_tok == 8);
    FMT(cmd, "'%s' inspect -m '%s' 2>&1", MOE8_CLI, dir);
    CHECKF(run(cmd, out, sizeof out) == 0, "%s", out);
    CHECKF(strstr(out, "glm4_moe") != NULL, "inspect lacks glm4_moe:\n%s", out);
    /* make-model --arch glm4_moe and quantize (family_test.h make_quantize_compare)
     * wait for the engine's MOE8_ARCH_ value of the family */
    (void)make_quantize_compare;
}

int main(void) {
    test_ref_rope_partial();
    test_ref_route();
    test_ref_moe_vs_deepseek();
    test_ref_vs_qwen();
    test_ref_options();
    test_ref_odd_shapes();
    test_ref_fixture();
    test_forward_float();
    test_forward_w8a8();
    test_forward_odd_shapes();
    test_config_and_inspect();
    test_mtp_skipped();
    test_defects();
    return test_summary();
}
