/*
 * test_minimax_m2.c — the MiniMax-M2 family (minimax_m2,
 * MiniMaxM2ForCausalLM) against the test's own reading of transformers'
 * modeling_minimax_m2.py and vLLM's minimax_m2.py (fixture_model.h
 * FX_MINIMAX_M2, forward_ref.h ref_layer_sig): GQA with q/k RMSNorm over the
 * WHOLE projection before the head split (q_norm [NH*D], k_norm [NKV*D]),
 * partial rotary of rotary_dim dims (rotate_half within them), sigmoid
 * routing with block_sparse_moe.e_score_correction_bias for the selection
 * only, no groups, the top-k weights always renormalized and not scaled,
 * block_sparse_moe.experts.N.w1/w3/w2, every layer MoE, no shared expert, and
 * the num_mtp_modules MTP layers model.layers.{num_hidden_layers + i}.*
 * present in the folder and skipped (vLLM's get_spec_layer_idx_from_weight_name).
 *   - the reference itself: the whole-projection norm with one head equal to
 *     the per-head norm (and not with several), the routing equal to
 *     DeepSeek-V3's reference with one group and factor 1 and on hand-made
 *     scores, the expert names equal to Mixtral's reference with one expert;
 *     rotary_dim, theta and the bias move the logits, the MTP modules do not;
 *     the fixture's names, config.json keys and quantization description;
 *   - then the engine: make-model's tiny preset quantized as msModelSlim does
 *     (W8A8 close to its float source); the float forward within 1e-4 relative at every position,
 *     prefill and decode; W8A8 at cosine >= 0.9999 against the reference's
 *     W8A8 maths; the MTP modules skipped even when malformed; corrupt and
 *     mismatched folders refused naming the tensor or the field.
 */
#include "test.h"

#include <sys/wait.h>

#include "fixture_model.h"
#include "forward_ref.h"
#include "family_test.h"

#include "moe8.h"

/* The tiny MiniMax-M2 fixture: H 64, 4/2 heads of 16, rotary_dim 8 (the
 * released 64 of 128), E 8, top-3, I 32, 2 layers, one MTP module
 * (model.layers.2.*). */
static fx_opts mm_opts(int quant) {
    fx_opts o = fx_default_opts();
    o.arch = FX_MINIMAX_M2;
    o.quant = quant;
    o.n_layers = 2;
    o.n_experts = 8;
    o.top_k = 3;
    o.moe_inter = 32;
    o.rotary_dim = 8;
    o.seed = 950 + (uint64_t)quant;
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

/* The attention of layer 1 on random inputs with the q/k norms over the
 * whole projection and per head of D (the same [NH*D] weights read as [D]
 * when NH = NKV = 1): equal with one head, different with several. */
static void test_ref_whole_norm(void) {
    for (int heads = 1; heads <= 4; heads += 3)
        for (int quant = 0; quant < 2; quant++) {
            fx_opts o = mm_opts(quant);
            ref_model rm;
            test_rng r = {5};
            const int n = 5;
            double h[5 * 64], a[5 * 64], b[5 * 64];
            o.n_heads = heads, o.n_kv_heads = heads == 1 ? 1 : 2;
            ref_init(&rm, &o);
            for (int i = 0; i < n * 64; i++) h[i] = test_rng_normal(&r);
            ref_attn_gqa(a, h, n, &rm, 1, REF_QK_WHOLE, 8, 1e-6, 5e6);
            if (heads == 1) {
                ref_attn_gqa(b, h, n, &rm, 1, REF_QK_HEAD, 8, 1e-6, 5e6);
                CHECKF(max_abs_diff(a, b, n * 64) == 0.0, "one head (quant %d): %g", quant,
                       max_abs_diff(a, b, n * 64));
            } else {
                /* per head of D, the [NH*D] weights' first D: not the same maths */
                fx_tensor *qn = (fx_tensor *)ref_t(&rm, "model.layers.%lld.self_attn.q_norm.weight", 1, 0);
                fx_tensor *kn = (fx_tensor *)ref_t(&rm, "model.layers.%lld.self_attn.k_norm.weight", 1, 0);
                double *w = malloc(sizeof(double) * 64);
                /* give every head the same weights so that only the variance's span differs */
                for (int i = 0; i < 64; i++) w[i] = fx_get(qn, i % 16);
                for (int i = 0; i < 64; i++) fx_set(qn, i, w[i]);
                for (int i = 0; i < 32; i++) fx_set(kn, i, fx_get(kn, i % 16));
                ref_attn_gqa(a, h, n, &rm, 1, REF_QK_WHOLE, 8, 1e-6, 5e6);
                ref_attn_gqa(b, h, n, &rm, 1, REF_QK_HEAD, 8, 1e-6, 5e6);
                CHECK(max_abs_diff(a, b, n * 64) > 1e-6 * max_abs(b, n * 64));
                free(w);
            }
            ref_free(&rm);
        }
    /* the whole-projection norm by hand: q scaled so that mean(q^2) over all NH*D is 1 */
    {
        fx_opts o = mm_opts(0);
        ref_model rm;
        double q[64], y[64], ss = 0, ss2 = 0;
        test_rng r = {8};
        ref_init(&rm, &o);
        const fx_tensor *qn = ref_t(&rm, "model.layers.%lld.self_attn.q_norm.weight", 0, 0);
        CHECK(qn->shape[0] == 64);
        for (int i = 0; i < 64; i++) q[i] = (i < 16 ? 10.0 : 0.1) * test_rng_normal(&r), ss += q[i] * q[i];
        ref_rmsnorm(y, q, 64, qn, 1e-6);
        for (int i = 0; i < 64; i++) ss2 += (y[i] / fx_get(qn, i)) * (y[i] / fx_get(qn, i));
        CHECK_NEAR(ss2 / 64.0, ss / 64.0 / (ss / 64.0 + 1e-6), 1e-12);
        ref_free(&rm);
    }
}

static double logit(double p) { return log(p / (1 - p)); }

/* MiniMaxM2TopKRouter: hand-made scores; random ones equal to DeepSeek-V3's
 * reference with one group, norm_topk_prob and factor 1. */
static void test_ref_route(void) {
    static const double p[8] = {0.9, 0.1, 0.6, 0.6, 0.55, 0.55, 0.2, 0.2};
    double lg[8], bias[8] = {0}, w[4];
    int64_t ids[4];
    for (int e = 0; e < 8; e++) lg[e] = logit(p[e]);
    bias[5] = 0.1; /* 0.65: picked over 2 and 3, weighted by its unbiased 0.55 */
    ref_route_sigmoid(8, 2, lg, bias, 1, 1, 1, 0.0, 1.0, ids, w);
    CHECK(ids[0] == 0 && ids[1] == 5);
    CHECK_NEAR(w[0], 0.9 / 1.45, 1e-15);
    CHECK_NEAR(w[1], 0.55 / 1.45, 1e-15);
    {
        test_rng r = {31337};
        static const int cfg[][2] = {{8, 3}, {16, 8}, {32, 8}, {12, 1}};
        int bad = 0;
        for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++)
            for (int trial = 0; trial < 50; trial++) {
                fx_opts o = fx_default_opts();
                double l2[64], b2[64], w1[16], w2[16];
                int64_t i1[16], i2[16];
                o.arch = FX_DEEPSEEK_V3, o.n_experts = cfg[c][0], o.top_k = cfg[c][1];
                o.n_group = 1, o.topk_group = 1, o.routed_scale = 1.0;
                for (int e = 0; e < cfg[c][0]; e++)
                    l2[e] = 2.0 * test_rng_normal(&r), b2[e] = 0.1 * test_rng_uniform(&r);
                ref_route_sigmoid(o.n_experts, o.top_k, l2, b2, 1, 1, 1, 0.0, 1.0, i1, w1);
                ref_route_deepseek(&o, l2, b2, i2, w2);
                for (int j = 0; j < cfg[c][1]; j++) bad += i1[j] != i2[j] || fabs(w1[j] - w2[j]) > 1e-14;
            }
        CHECKF(bad == 0, "%d routing mismatches against the DeepSeek-V3 reference", bad);
    }
}

/* One expert, top-1: the block is that expert, weight 1, read under
 * Mixtral's names (block_sparse_moe.experts.0.w1/w3/w2) as Mixtral's
 * reference reads them. */
static void test_ref_moe_vs_mixtral(void) {
    for (int quant = 0; quant < 2; quant++) {
        fx_opts o = mm_opts(quant);
        ref_model rm, rx;
        test_rng r = {12};
        double h[64], a[64], b[64];
        o.n_experts = 1, o.top_k = 1;
        ref_init(&rm, &o);
        rx = rm;
        rx.o.arch = FX_MIXTRAL;
        for (int i = 0; i < 64; i++) h[i] = test_rng_normal(&r);
        ref_moe_sig(a, h, &rm, 1);
        ref_moe(b, h, &rx, 1);
        CHECK(max_abs_diff(a, b, 64) <= 1e-12 * max_abs(b, 64));
        ref_free(&rm);
    }
}

/* rotary_dim and the correction bias reach the reference's logits; the MTP
 * modules do not. */
static void test_ref_options(void) {
    const int n = 6, V = 256;
    double *base = malloc(sizeof(double) * n * V), *l = malloc(sizeof(double) * n * V);
    for (int quant = 0; quant < 2; quant++) {
        fx_opts o = mm_opts(quant);
        ref_model rm;
        ref_init(&rm, &o);
        ref_forward(&rm, PROMPT, n, base);
        ref_free(&rm);
        for (int v = 0; v < 4; v++) {
            fx_opts p = o;
            if (v == 0) p.rotary_dim = 16;
            if (v == 1) p.e_bias_max = 0.5;
            if (v == 2) p.theta = 1e4;
            if (v == 3) p.n_mtp = 3;
            ref_init(&rm, &p);
            ref_forward(&rm, PROMPT, n, l);
            ref_free(&rm);
            if (v == 3) CHECKF(max_abs_diff(l, base, (size_t)n * V) == 0.0, "the MTP modules changed the logits");
            else CHECKF(max_abs_diff(l, base, (size_t)n * V) > 1e-9 * max_abs(base, (size_t)n * V),
                        "option %d (quant %d) changed nothing", v, quant);
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

static void test_ref_fixture(void) {
    fx_opts o = mm_opts(1);
    ref_model rm;
    char path[4200];
    const char *dir;
    unsigned char *text;
    size_t len;
    cJSON *c, *d;
    ref_init(&rm, &o);
    CHECK(ref_t(&rm, "model.layers.%lld.self_attn.q_norm.weight", 1, 0)->shape[0] == 64);
    CHECK(ref_t(&rm, "model.layers.%lld.self_attn.k_norm.weight", 1, 0)->shape[0] == 32);
    CHECK(ref_t(&rm, "model.layers.%lld.block_sparse_moe.e_score_correction_bias", 1, 0)->dtype == MOE8_DT_F32);
    CHECK(ref_t(&rm, "model.layers.%lld.block_sparse_moe.gate.weight", 0, 0)->shape[0] == 8);
    CHECK(ref_t(&rm, "model.layers.%lld.block_sparse_moe.experts.%lld.w2.weight", 1, 7)->shape[1] == 32);
    CHECK(ref_t(&rm, "model.layers.%lld.block_sparse_moe.experts.%lld.w3.weight_scale", 0, 2)->shape[0] == 32);
    CHECK(ref_t(&rm, "model.layers.%lld.eh_proj.weight", 2, 0)->shape[1] == 128);
    CHECK(ref_t(&rm, "model.layers.%lld.self_attn.q_norm.weight", 2, 0)->shape[0] == 64);
    ref_free(&rm);
    dir = write_fixture("minimax_fixture", &o);
    FMT(path, "%s/config.json", dir);
    text = test_slurp(path, &len);
    c = cJSON_Parse(text ? (const char *)text : "");
    free(text);
    if (!c || !cJSON_IsObject(c)) {
        CHECKF(0, "%s: not a JSON object", path);
        cJSON_Delete(c);
        return;
    }
    CHECK(c && !strcmp(jstr(c, "model_type"), "minimax_m2"));
    CHECK(!strcmp(arch0(c), "MiniMaxM2ForCausalLM"));
    CHECK(jnum(c, "rotary_dim") == 8 && jnum(c, "head_dim") == 16);
    CHECK(jtrue(c, "use_qk_norm") && jtrue(c, "use_routing_bias"));
    CHECK(!strcmp(jstr(c, "scoring_func"), "sigmoid"));
    CHECK(jnum(c, "num_mtp_modules") == 1 && jnum(c, "num_local_experts") == 8);
    CHECK(jnum(c, "intermediate_size") == 32 && jnum(c, "rope_theta") == 5e6);
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(c, "attn_type_list")) == 2);
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
    CHECK(d && !strcmp(DESC("model.layers.1.block_sparse_moe.e_score_correction_bias"), "FLOAT"));
    CHECK(!strcmp(DESC("model.layers.1.block_sparse_moe.gate.weight"), "FLOAT"));
    CHECK(!strcmp(DESC("model.layers.1.self_attn.k_norm.weight"), "FLOAT"));
    CHECK(!strcmp(DESC("model.layers.1.self_attn.o_proj.deq_scale"), "W8A8"));
    CHECK(!strcmp(DESC("model.layers.0.block_sparse_moe.experts.5.w1.weight"), "W8A8_DYNAMIC"));
#undef DESC
    cJSON_Delete(d);
}

/* ======================================================================== */
/* The engine against the reference                                          */
/* ======================================================================== */

/* The rotary width as vLLM also reads it: partial_rotary_factor = rotary_dim
 * / head_dim (minimax_m2.py), here without rotary_dim. */
static void hook_factor_only(void *user, const char *file, cJSON *root) {
    (void)user;
    if (strcmp(file, "config.json")) return;
    cJSON_DeleteItemFromObjectCaseSensitive(root, "rotary_dim");
    cJSON_AddNumberToObject(root, "partial_rotary_factor", 0.5);
}

static void test_forward_float(void) {
    fx_opts o = mm_opts(0);
    check_vs_ref("mm_float", &o);
    o.json_hook = hook_factor_only; /* rotary_dim 8 of 16 as a factor */
    check_vs_ref("mm_float_rotary_factor", &o);
    o.json_hook = NULL;
    o.rotary_dim = 4;
    o.float_dtype = MOE8_DT_F32;
    o.n_shards = 2;
    check_vs_ref("mm_float_rot4_f32", &o);
    /* the released shape's ratios: 48 / 8 heads, NH * D (6144) != H (3072) */
    o = mm_opts(0);
    o.n_heads = 8, o.n_kv_heads = 1, o.head_dim = 16, o.rotary_dim = 8;
    o.top_k = 2, o.n_layers = 3, o.n_mtp = 0;
    check_vs_ref("mm_float_8heads_1kv", &o);
    o = mm_opts(0);
    o.n_heads = 1, o.n_kv_heads = 1, o.head_dim = 24, o.rotary_dim = 10, o.n_mtp = 2;
    check_vs_ref("mm_float_one_head_2mtp", &o);
}

/* Odd widths (no multiple of 8 or 16: the kernels' tails), GQA groups of
 * 1 to 6, rotary_dim from 2 to D - 2, float and W8A8. */
#define N_ODD 4
static fx_opts odd_opts(int i) {
    static const struct { int quant, H, heads, kv, D, rot, E, K, I; } S[N_ODD] = {
        {0, 48, 6, 1, 10, 4, 5, 2, 24},
        {0, 36, 3, 3, 14, 12, 7, 3, 11},
        {1, 48, 6, 2, 10, 2, 5, 2, 24},
        {1, 60, 4, 2, 18, 6, 9, 4, 19},
    };
    fx_opts o = mm_opts(S[i].quant);
    o.hidden = S[i].H, o.n_heads = S[i].heads, o.n_kv_heads = S[i].kv, o.head_dim = S[i].D;
    o.rotary_dim = S[i].rot, o.n_experts = S[i].E, o.top_k = S[i].K, o.moe_inter = S[i].I;
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
        FMT(label, "mm_odd_%s_%d", o.quant ? "w8a8" : "float", i);
        check_vs_ref(label, &o);
    }
}

static void test_forward_w8a8(void) {
    fx_opts o = mm_opts(1);
    check_vs_ref("mm_w8a8", &o);
    o.qkv_same_input = 0, o.scale_2d = 1, o.deq_i64 = 0, o.scale_dtype = MOE8_DT_BF16;
    check_vs_ref("mm_w8a8_scales", &o);
    o = mm_opts(1);
    o.down_float = 1;
    o.seed += 50;
    check_vs_ref("mm_w8a8_down_float", &o);
}

static void hook_break_mtp(void *user, fx_tensor *t) {
    (void)user;
    if (!strcmp(t->orig_name, "model.layers.2.eh_proj.weight")) {
        const int64_t shape[2] = {7, 3};
        fx_retype(t, MOE8_DT_I16, 2, shape);
    }
    if (!strcmp(t->orig_name, "model.layers.2.block_sparse_moe.e_score_correction_bias")) t->omit = 1;
    if (!strcmp(t->orig_name, "model.layers.2.self_attn.q_norm.weight")) {
        const int64_t shape[1] = {5};
        fx_retype(t, t->dtype, 1, shape);
    }
}

static void test_mtp_skipped(void) {
    fx_opts o = mm_opts(1);
    o.tensor_hook = hook_break_mtp;
    check_vs_ref("mm_w8a8_mtp_broken", &o);
}

/* ======================================================================== */
/* Corrupt and mismatched folders                                            */
/* ======================================================================== */

#define L1 "model.layers.1."
#define MM FX_MINIMAX_M2
static const defect defects[] = {
    {"mm_no_bias", MM, 0, D_OMIT, L1 "block_sparse_moe.e_score_correction_bias", 0, {0, 0}, NULL,
     NULL, NULL, MOE8_ERR_NOT_FOUND, "tensor '" L1 "block_sparse_moe.e_score_correction_bias' not found"},
    {"mm_w8a8_no_bias", MM, 1, D_OMIT, L1 "block_sparse_moe.e_score_correction_bias", 0, {0, 0},
     NULL, NULL, NULL, MOE8_ERR_NOT_FOUND, "tensor '" L1 "block_sparse_moe.e_score_correction_bias' not found"},
    {"mm_bias_shape", MM, 0, D_SHAPE, L1 "block_sparse_moe.e_score_correction_bias", 1, {6, 0},
     NULL, NULL, NULL, MOE8_ERR_FORMAT, "e_score_correction_bias': expected shape [8], found [6]"},
    /* a per-head q_norm ([D], as Qwen3 or GLM write it) is not MiniMax-M2's */
    {"mm_q_norm_per_head", MM, 0, D_SHAPE, L1 "self_attn.q_norm.weight", 1, {16, 0}, NULL, NULL,
     NULL, MOE8_ERR_FORMAT, "q_norm.weight': expected shape [64], found [16]"},
    {"mm_k_norm_shape", MM, 1, D_SHAPE, L1 "self_attn.k_norm.weight", 1, {16, 0}, NULL, NULL,
     NULL, MOE8_ERR_FORMAT, "k_norm.weight': expected shape [32], found [16]"},
    {"mm_no_k_norm", MM, 0, D_OMIT, L1 "self_attn.k_norm.weight", 0, {0, 0}, NULL, NULL, NULL,
     MOE8_ERR_NOT_FOUND, "tensor '" L1 "self_attn.k_norm.weight' not found"},
    {"mm_no_w2", MM, 0, D_OMIT, L1 "block_sparse_moe.experts.3.w2.weight", 0, {0, 0}, NULL, NULL,
     NULL, MOE8_ERR_NOT_FOUND, "tensor '" L1 "block_sparse_moe.experts.3.w2.weight' not found"},
    {"mm_w8a8_no_w1_scale", MM, 1, D_OMIT, L1 "block_sparse_moe.experts.0.w1.weight_scale", 0,
     {0, 0}, NULL, NULL, NULL, MOE8_ERR_NOT_FOUND, "w1.weight_scale' not found"},
    {"mm_desc_bias_w8a8", MM, 1, D_NONE, NULL, 0, {0, 0}, "quant_model_description.json",
     L1 "block_sparse_moe.e_score_correction_bias", "\"W8A8\"", MOE8_ERR_UNSUPPORTED,
     "e_score_correction_bias'"},
    {"mm_cfg_rotary_odd", MM, 0, D_NONE, NULL, 0, {0, 0}, "config.json", "rotary_dim", "7",
     MOE8_ERR_FORMAT, "rotary_dim"},
    {"mm_cfg_rotary_big", MM, 0, D_NONE, NULL, 0, {0, 0}, "config.json", "rotary_dim", "32",
     MOE8_ERR_FORMAT, "rotary_dim"},
    {"mm_cfg_rotary_factor", MM, 0, D_NONE, NULL, 0, {0, 0}, "config.json",
     "partial_rotary_factor", "0.25", MOE8_ERR_FORMAT, "rotary_dim 8 disagrees"},
    {"mm_cfg_scoring", MM, 0, D_NONE, NULL, 0, {0, 0}, "config.json", "scoring_func", "\"relu\"",
     MOE8_ERR_UNSUPPORTED, "scoring_func"},
    /* what MiniMax-M2's modeling code has no path for: MiniMax-M1's linear
     * attention layers (attn_type_list 0), no q/k norm, a shared expert */
    {"mm_cfg_linear_attn", MM, 0, D_NONE, NULL, 0, {0, 0}, "config.json", "attn_type_list",
     "[1, 0]", MOE8_ERR_UNSUPPORTED, "attn_type_list[1]"},
    {"mm_cfg_no_qk_norm", MM, 0, D_NONE, NULL, 0, {0, 0}, "config.json", "use_qk_norm", "false",
     MOE8_ERR_UNSUPPORTED, "use_qk_norm"},
    {"mm_cfg_shared", MM, 0, D_NONE, NULL, 0, {0, 0}, "config.json", "shared_intermediate_size",
     "64", MOE8_ERR_UNSUPPORTED, "shared_intermediate_size"},
};

/* A MiniMax-M2 config.json over Mixtral's tensors (the same MoE names, no
 * q/k norms, no correction bias): refused naming a tensor. */
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

static void test_defects(void) {
    for (size_t i = 0; i < sizeof defects / sizeof defects[0]; i++)
        check_defect(&defects[i], mm_opts(defects[i].quant));
    for (int quant = 0; quant < 2; quant++) {
        fx_opts mx = mm_opts(quant);
        moe8_model *m = NULL;
        moe8_error e;
        moe8_status st;
        mx.arch = FX_MIXTRAL;
        g_cfg = mm_opts(quant);
        mx.json_hook = hook_swap_config;
        memset(&e, 0, sizeof e);
        st = moe8_model_load(write_fixture("mm_cfg_mixtral_tensors", &mx), NULL, &m, &e);
        printf("minimax config, mixtral tensors%s: %s\n", quant ? " (W8A8)" : "", e.message);
        CHECKF(st != MOE8_OK && strstr(e.message, "'model.layers.") != NULL,
               "status %d, '%s' names no tensor", st, e.message);
        moe8_model_free(m);
    }
}

/* MiniMax-M2's released config.json (MiniMaxAI/MiniMax-M2), its
 * architecture keys (the quantization_config of its FP8 weights and
 * auto_map left out). */
static const char *m2_config =
    "{\"architectures\": [\"MiniMaxM2ForCausalLM\"], \"attn_type_list\": [1, 1, 1, 1],"
    " \"head_dim\": 128, \"hidden_act\": \"silu\", \"hidden_size\": 3072,"
    " \"intermediate_size\": 1536, \"max_position_embeddings\": 196608, \"model_type\": \"minimax_m2\","
    " \"mtp_transformer_layers\": 1, \"num_attention_heads\": 48, \"num_experts_per_tok\": 8,"
    " \"num_hidden_layers\": 62, \"num_key_value_heads\": 8, \"num_local_experts\": 256,"
    " \"num_mtp_modules\": 3, \"output_router_logits\": false, \"qk_norm_type\": \"per_layer\","
    " \"rms_norm_eps\": 1e-06, \"rope_theta\": 5000000, \"rotary_dim\": 64,"
    " \"router_aux_loss_coef\": 0.001, \"router_jitter_noise\": 0.0, \"scoring_func\": \"sigmoid\","
    " \"shared_intermediate_size\": 0, \"sliding_window\": null, \"tie_word_embeddings\": false,"
    " \"torch_dtype\": \"bfloat16\", \"use_cache\": true, \"use_mtp\": true, \"use_qk_norm\": true,"
    " \"use_routing_bias\": true, \"vocab_size\": 200064, \"bos_token_id\": 200034,"
    " \"eos_token_id\": 200020}";

static void test_config_and_inspect(void) {
    moe8_config c;
    moe8_error e;
    char cmd[8400], out[16384];
    fx_opts o = mm_opts(1);
    const char *dir = write_fixture("inspect_minimax", &o);
    CHECKF(parse(m2_config, &c, &e) == MOE8_OK, "MiniMax-M2 config.json: %s", e.message);
    CHECK(!strcmp(moe8_arch_name(c.arch), "minimax_m2"));
    CHECK(c.num_hidden_layers == 62 && c.hidden_size == 3072 && c.num_experts == 256);
    CHECK(c.num_experts_per_tok == 8 && c.num_attention_heads == 48 && c.num_key_value_heads == 8);
    FMT(cmd, "'%s' inspect -m '%s' 2>&1", MOE8_CLI, dir);
    CHECKF(run(cmd, out, sizeof out) == 0, "%s", out);
    CHECKF(strstr(out, "minimax_m2") != NULL, "inspect lacks minimax_m2:\n%s", out);
    CHECKF(strstr(out, "over the whole projection") && strstr(out, "rotary on 8 of 16 dims"),
           "inspect lacks the whole-projection norm or rotary_dim:\n%s", out);
    /* make-model's presets: tiny, and slice with MiniMax-M2's shapes (the
     * released config above) */
    {
        moe8_make_model_params p = moe8_make_model_params_default();
        moe8_config s;
        p.arch = MOE8_ARCH_MINIMAX_M2;
        CHECKF(moe8_make_model_config(&p, &s, &e) == MOE8_OK, "tiny: %s", e.message);
        CHECK(s.arch == MOE8_ARCH_MINIMAX_M2 && s.hidden_size == 256 && s.num_hidden_layers == 4);
        CHECK(moe8_config_get_int(&s, "rotary_dim", NULL) == 16 && s.head_dim == 32);
        p.preset = MOE8_PRESET_SLICE;
        CHECKF(moe8_make_model_config(&p, &s, &e) == MOE8_OK, "slice: %s", e.message);
        CHECK(s.hidden_size == c.hidden_size && s.num_attention_heads == c.num_attention_heads &&
              s.num_key_value_heads == c.num_key_value_heads && s.head_dim == 128);
        CHECK(s.num_experts == c.num_experts && s.num_experts_per_tok == c.num_experts_per_tok &&
              s.moe_intermediate_size == c.moe_intermediate_size);
        CHECK(moe8_config_get_int(&s, "rotary_dim", NULL) == 64 &&
              moe8_config_get_int(&c, "rotary_dim", NULL) == 64);
        CHECK(s.vocab_size == 200064 && s.eos_token_ids[0] == 200020 && s.bos_token_id == 200034);
        CHECK(s.rope_theta == 5e6 && s.rms_norm_eps == 1e-6 && s.num_hidden_layers == 2);
        CHECK(moe8_config_get_int(&s, "e_score_bias", NULL) == 1 &&
              moe8_config_get_int(&s, "scoring_sigmoid", NULL) == 1);
        p.preset = MOE8_PRESET_A3B_SLICE;
        CHECK(moe8_make_model_config(&p, &s, &e) == MOE8_ERR_INVALID_ARG &&
              strstr(e.message, "minimax_m2 has the presets tiny and slice"));
    }
}

/* make-model --arch minimax_m2 (tiny) and quantize as msModelSlim does:
 * experts W8A8_DYNAMIC (down FLOAT with down_float), attention W8A8 static,
 * the router, the norms and the correction bias FLOAT; W8A8 close to the
 * float source (family_test.h make_quantize_compare). */
static void test_make_quantize(int down_float) {
    char fdir[4096], qdir[4096], path[4200], *text;
    size_t len;
    moe8_model *mf, *mq;
    moe8_layer_info li;
    cJSON *d;
    make_quantize_compare(MOE8_ARCH_MINIMAX_M2, down_float, MOE8_TOKENIZER_DIR, fdir, qdir,
                          sizeof fdir, &mf, &mq);
    CHECK(moe8_model_layer_info(mq, 1, &li) == 0 && li.is_moe && !li.has_shared);
    CHECK(li.experts == MOE8_QUANT_W8A8_DYNAMIC &&
          li.experts_down == (down_float ? MOE8_QUANT_FLOAT : MOE8_QUANT_W8A8_DYNAMIC));
    CHECK(li.qkv == MOE8_QUANT_W8A8 && li.o == MOE8_QUANT_W8A8);
    FMT(path, "%s/quant_model_description.json", qdir);
    text = (char *)test_slurp(path, &len);
    d = cJSON_Parse(text ? text : "");
    free(text);
    CHECKF(d && cJSON_IsObject(d), "%s: not a JSON object", path);
    if (d) {
        CHECK(!strcmp(jstr(d, "model.layers.1.block_sparse_moe.e_score_correction_bias"), "FLOAT"));
        CHECK(!strcmp(jstr(d, "model.layers.1.block_sparse_moe.gate.weight"), "FLOAT"));
        CHECK(!strcmp(jstr(d, "model.layers.1.self_attn.q_norm.weight"), "FLOAT"));
        CHECK(!strcmp(jstr(d, "model.layers.1.self_attn.k_proj.weight"), "W8A8"));
        CHECK(!strcmp(jstr(d, "model.layers.0.block_sparse_moe.experts.3.w1.weight"), "W8A8_DYNAMIC"));
        CHECK(!strcmp(jstr(d, "model.layers.0.block_sparse_moe.experts.3.w2.weight"),
                      down_float ? "FLOAT" : "W8A8_DYNAMIC"));
    }
    cJSON_Delete(d);
    moe8_model_free(mf);
    moe8_model_free(mq);
}

int main(void) {
    test_ref_whole_norm();
    test_ref_route();
    test_ref_moe_vs_mixtral();
    test_ref_options();
    test_ref_odd_shapes();
    test_ref_fixture();
    test_config_and_inspect();
    test_make_quantize(0);
    test_make_quantize(1);
    test_forward_float();
    test_forward_w8a8();
    test_forward_odd_shapes();
    test_mtp_skipped();
    test_defects();
    return test_summary();
}
