/*
 * test_qwen3_5_moe.c — Qwen3.5 / 3.6-MoE (qwen3_5_moe, the text model of
 * Qwen3_5MoeForConditionalGeneration: settings under text_config, tensors
 * under model.language_model., a vision tower and MTP tensors to skip)
 * against the test's own double-precision reading of transformers'
 * modeling_qwen3_5_moe.py (fixture_model.h / fixture_hybrid.h
 * FX_QWEN3_5_MOE, hybrid_ref.h); the DeltaNet kinds themselves are checked
 * in test_qwen3_next.c (the same hybrid_ref.h functions):
 *   - the reference itself: on Qwen3-Next's weights carried over (its
 *     grouped in_proj_qkvz / in_proj_ba rows permuted into Qwen3.5's flat
 *     in_proj_qkv / z / b / a as llama.cpp's converter does, every other
 *     tensor copied) the whole Qwen3.5 model gives Qwen3-Next's logits; the
 *     fused experts (gate_up_proj [E][2I][H], down_proj [E][H][I]) give the
 *     per-expert ones; prefill = decode steps = split = chunked prefill
 *     (float, W8A8); each option and DeltaNet tensor changes the logits, the
 *     MTP and vision tensors do not; the fixture's names, shapes, config.json
 *     (text_config, rope_parameters) and W8A8 description (msModelSlim's
 *     recipe: W8A8_DYNAMIC for q/k/v and the experts only);
 *   - then the engine: float within 1e-4 relative at every position,
 *     prefilled and decoded (fused and per-expert experts), W8A8 (and
 *     W4A8_DYNAMIC routed experts) at cosine >= 0.9999; a 70-token prompt across the chunk edge; the MTP and vision
 *     tensors skipped even malformed; corrupt folders refused naming the
 *     tensor.
 */
#include "test.h"

#include "fixture_model.h"
#include "forward_ref.h"
#include "family_test.h"
#include "hybrid_test.h"

#include "moe8.h"

static fx_opts q5_opts(int quant) {
    fx_opts o = fx_hybrid_opts(FX_QWEN3_5_MOE);
    o.quant = quant;
    o.seed = 3500 + (uint64_t)quant;
    if (quant) o.nonzero_offsets = 1, o.scale_2d = 1;
    return o;
}

/* A smaller one for the reference's many runs (H 32, vocab 64, E 4). */
static fx_opts q5_small(int quant) {
    fx_opts o = q5_opts(quant);
    o.hidden = 32, o.vocab = 64, o.n_heads = 2, o.n_kv_heads = 1;
    o.lin_k_heads = 1, o.lin_v_heads = 2, o.lin_k_dim = 8, o.lin_v_dim = 8;
    o.n_experts = 4, o.moe_inter = 16, o.shared_inter = 16;
    return o;
}

/* ======================================================================== */
/* The reference itself                                                      */
/* ======================================================================== */

static void copy_values(fx_tensor *dst, const fx_tensor *src) {
    CHECKF(fx_numel(dst) == fx_numel(src), "%s: %lld values, %s has %lld", dst->name,
           (long long)fx_numel(dst), src->name, (long long)fx_numel(src));
    for (int64_t i = 0; i < fx_numel(dst) && i < fx_numel(src); i++) fx_set(dst, i, fx_get(src, i));
}

/* Qwen3.5's linear-layer projections from Qwen3-Next's of layer l: per key
 * head g the rows [q, k, v (r heads), z (r heads)] of in_proj_qkvz go to
 * in_proj_qkv's q block, k block and v block and to in_proj_z; in_proj_ba's
 * [b (r), a (r)] to in_proj_b and in_proj_a. */
static void carry_projections(ref_model *r5, const ref_model *rn, long long l) {
    const fx_opts *o = &rn->o;
    const int64_t NK = o->lin_k_heads, NV = o->lin_v_heads, dk = o->lin_k_dim, dv = o->lin_v_dim;
    const int64_t r = NV / NK, gs = 2 * dk + 2 * r * dv, H = o->hidden;
    const fx_tensor *qkvz = hy_t(rn, "model.layers.%lld.linear_attn.in_proj_qkvz.weight", l);
    const fx_tensor *ba = hy_t(rn, "model.layers.%lld.linear_attn.in_proj_ba.weight", l);
    fx_tensor *qkv = (fx_tensor *)hy_t(r5, "model.language_model.layers.%lld.linear_attn.in_proj_qkv.weight", l);
    fx_tensor *z = (fx_tensor *)hy_t(r5, "model.language_model.layers.%lld.linear_attn.in_proj_z.weight", l);
    fx_tensor *b = (fx_tensor *)hy_t(r5, "model.language_model.layers.%lld.linear_attn.in_proj_b.weight", l);
    fx_tensor *a = (fx_tensor *)hy_t(r5, "model.language_model.layers.%lld.linear_attn.in_proj_a.weight", l);
    for (int64_t g = 0; g < NK; g++)
        for (int64_t c = 0; c < H; c++) {
            for (int64_t i = 0; i < dk; i++) {
                fx_set(qkv, (g * dk + i) * H + c, fx_get(qkvz, (g * gs + i) * H + c));
                fx_set(qkv, (NK * dk + g * dk + i) * H + c, fx_get(qkvz, (g * gs + dk + i) * H + c));
            }
            for (int64_t j = 0; j < r * dv; j++) {
                fx_set(qkv, (2 * NK * dk + g * r * dv + j) * H + c, fx_get(qkvz, (g * gs + 2 * dk + j) * H + c));
                fx_set(z, (g * r * dv + j) * H + c, fx_get(qkvz, (g * gs + 2 * dk + r * dv + j) * H + c));
            }
            for (int64_t m = 0; m < r; m++) {
                fx_set(b, (g * r + m) * H + c, fx_get(ba, (g * 2 * r + m) * H + c));
                fx_set(a, (g * r + m) * H + c, fx_get(ba, (g * 2 * r + r + m) * H + c));
            }
        }
}

/* Qwen3-Next's float model carried into Qwen3.5's layout: the same logits. */
static void test_ref_vs_qwen3_next(void) {
    enum { n = 7 };
    fx_opts on = fx_hybrid_opts(FX_QWEN3_NEXT), o5 = q5_opts(0);
    ref_model rn, r5;
    int32_t ids[n];
    double ln[n * 256], l5[n * 256];
    on.seed = 71, o5.split_experts = 1, on.n_mtp = o5.n_mtp = 0, o5.no_vision = 1;
    ref_init(&rn, &on);
    ref_init(&r5, &o5);
    for (int i = 0; i < r5.L.n; i++) {
        fx_tensor *t = &r5.L.t[i];
        const char *rest = t->name + strlen("model.language_model.");
        const fx_tensor *src;
        if (strstr(t->name, ".linear_attn.in_proj_")) continue;
        if (!strncmp(t->name, "model.language_model.", 21)) src = hy_t(&rn, "model.%s", rest);
        else src = hy_t(&rn, "%s", t->name);
        copy_values(t, src);
    }
    for (long long l = 0; l < on.n_layers; l++)
        if (!fx_full_attn(&on, l)) carry_projections(&r5, &rn, l);
    hy_ids(ids, n, 256, 13);
    ref_forward(&rn, ids, n, ln);
    ref_forward(&r5, ids, n, l5);
    printf("qwen3_5_moe reference on qwen3_next's weights: max |diff| %.3g of %.3g\n",
           hy_max_abs_diff(ln, l5, n * 256), hy_max_abs(ln, n * 256));
    CHECK(hy_max_abs_diff(ln, l5, n * 256) <= 1e-12 * hy_max_abs(ln, n * 256));
    ref_free(&rn);
    ref_free(&r5);
}

/* The fused experts and the per-expert ones (the same values) give the
 * same logits. */
static void test_ref_fused_experts(void) {
    enum { n = 5 };
    fx_opts o = q5_small(0);
    ref_model rm;
    int32_t ids[n];
    double base[n * 64], m;
    const fx_tensor *gu, *dn;
    hy_ids(ids, n, 64, 17);
    ref_init(&rm, &o);
    gu = hy_t(&rm, "model.language_model.layers.1.mlp.experts.gate_up_proj");
    dn = hy_t(&rm, "model.language_model.layers.1.mlp.experts.down_proj");
    CHECK(gu->n_dims == 3 && gu->shape[0] == 4 && gu->shape[1] == 32 && gu->shape[2] == 32);
    CHECK(dn->n_dims == 3 && dn->shape[0] == 4 && dn->shape[1] == 32 && dn->shape[2] == 16);
    CHECK(hy_find(&rm, "model.language_model.layers.1.mlp.experts.0.gate_proj.weight") == NULL);
    ref_forward(&rm, ids, n, base);
    ref_free(&rm);
    m = hy_max_abs(base, n * 64);
    o.split_experts = 1;
    CHECKF(hy_ref_diff(&o, ids, n, base) <= 1e-13 * m, "fused vs per-expert experts: %g",
           hy_ref_diff(&o, ids, n, base));
}

static void test_ref_model(void) {
    fx_opts o = q5_small(0);
    o.n_mtp = 0;
    hy_check_decode_vs_prefill("qwen3_5_moe float small", &o, 66, 65, 0);
    o = q5_opts(0);
    hy_check_decode_vs_prefill("qwen3_5_moe float", &o, 9, 4, 1);
    o = q5_opts(1);
    hy_check_decode_vs_prefill("qwen3_5_moe W8A8", &o, 9, 5, 1);
}

/* Each option and DeltaNet / attention tensor reaches the logits; the MTP
 * and vision tensors, the layer_types spelling and the experts' storage do
 * not. */
static void test_ref_options(void) {
    enum { n = 5 };
    int32_t ids[n];
    static const char *const tensors[] = {
        "model.language_model.layers.0.linear_attn.A_log",
        "model.language_model.layers.0.linear_attn.dt_bias",
        "model.language_model.layers.1.linear_attn.conv1d.weight",
        "model.language_model.layers.1.linear_attn.norm.weight",
        "model.language_model.layers.2.linear_attn.in_proj_qkv.weight",
        "model.language_model.layers.2.linear_attn.in_proj_z.weight",
        "model.language_model.layers.2.linear_attn.in_proj_b.weight",
        "model.language_model.layers.2.linear_attn.in_proj_a.weight",
        "model.language_model.layers.0.linear_attn.out_proj.weight",
        "model.language_model.layers.3.self_attn.q_proj.weight",
        "model.language_model.layers.3.self_attn.k_norm.weight",
        "model.language_model.layers.1.mlp.shared_expert_gate.weight",
        "model.language_model.norm.weight"};
    hy_ids(ids, n, 64, 6);
    for (int quant = 0; quant < 2; quant++) {
        fx_opts o = q5_small(quant);
        double base[n * 64], m;
        ref_model rm;
        ref_init(&rm, &o);
        ref_forward(&rm, ids, n, base);
        m = hy_max_abs(base, n * 64);
        for (size_t i = 0; i < sizeof tensors / sizeof tensors[0]; i++)
            CHECKF(hy_edit_diff(&rm, tensors[i], ids, n, base) > 1e-9 * m, "quant %d: %s changed nothing",
                   quant, tensors[i]);
        ref_free(&rm);
        for (int v = quant ? 4 : 0; v < 7; v++) {
            fx_opts p = o;
            double d;
            if (v == 0) p.partial_rotary = 0.5;
            if (v == 1) p.theta = 1e4;
            if (v == 2) p.full_interval = 2;
            if (v == 3) p.conv_kernel = 3;
            if (v == 4) p.no_renorm = 1;   /* Qwen3.5 always renormalizes: no change */
            if (v == 5) p.n_mtp = 0, p.no_vision = 1, p.layer_types = 0;
            if (v == 6) p.n_mtp = 2, p.split_experts = 1;
            d = hy_ref_diff(&p, ids, n, base);
            if (v >= 4) CHECKF(d == 0.0, "quant %d: variant %d changed the logits (%g)", quant, v, d);
            else CHECKF(d > 1e-9 * m, "quant %d: option %d changed nothing", quant, v);
        }
    }
}

/* The fixture: names, shapes, dtypes, config.json, the W8A8 description. */
static void test_ref_fixture(void) {
    fx_opts o = q5_opts(1);
    ref_model rm;
    const char *dir;
    cJSON *c, *t, *r, *d;
    const char *P = "model.language_model.layers.";
    ref_init(&rm, &o);
    CHECK(hy_t(&rm, "%s0.linear_attn.in_proj_qkv.weight", P)->shape[0] == 2 * 2 * 8 + 4 * 12);
    CHECK(hy_t(&rm, "%s0.linear_attn.in_proj_qkv.weight", P)->dtype == MOE8_DT_BF16);
    CHECK(hy_t(&rm, "%s0.linear_attn.in_proj_z.weight", P)->shape[0] == 48);
    CHECK(hy_t(&rm, "%s0.linear_attn.in_proj_b.weight", P)->shape[0] == 4);
    CHECK(hy_t(&rm, "%s0.linear_attn.in_proj_a.weight", P)->shape[1] == 64);
    CHECK(hy_t(&rm, "%s0.linear_attn.conv1d.weight", P)->shape[1] == 1);
    CHECK(hy_t(&rm, "%s3.self_attn.v_proj.weight", P)->dtype == MOE8_DT_I8);
    CHECK(hy_t(&rm, "%s3.self_attn.v_proj.weight_scale", P)->n_dims == 2);
    CHECK(hy_t(&rm, "%s3.mlp.experts.5.up_proj.weight", P)->dtype == MOE8_DT_I8);
    CHECK(hy_t(&rm, "model.language_model.embed_tokens.weight")->shape[0] == 256);
    CHECK(hy_t(&rm, "model.language_model.norm.weight")->shape[0] == 64);
    CHECK(hy_t(&rm, "lm_head.weight")->shape[1] == 64);
    CHECK(hy_t(&rm, "mtp.layers.0.mlp.experts.0.gate_proj.weight")->dtype == MOE8_DT_I8);
    CHECK(hy_t(&rm, "model.visual.blocks.0.attn.qkv.weight")->shape[0] == 48);
    CHECK(hy_find(&rm, "model.embed_tokens.weight") == NULL);
    ref_free(&rm);
    dir = write_fixture("q5_fixture", &o);
    c = hy_json(dir, "config.json");
    t = cJSON_GetObjectItemCaseSensitive(c, "text_config");
    r = cJSON_GetObjectItemCaseSensitive(t, "rope_parameters");
    CHECK(!strcmp(hy_jstr(c, "model_type"), "qwen3_5_moe"));
    CHECK(cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(c, "vision_config")));
    CHECK(!cJSON_GetObjectItemCaseSensitive(c, "hidden_size"));
    CHECK(!strcmp(hy_jstr(t, "model_type"), "qwen3_5_moe_text"));
    CHECK(hy_jnum(t, "hidden_size") == 64 && hy_jnum(t, "num_hidden_layers") == 4);
    CHECK(hy_jnum(t, "full_attention_interval") == 4);
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(t, "layer_types")) == 4);
    CHECK(!strcmp(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(t, "layer_types"), 3)->valuestring,
                  "full_attention"));
    CHECK(hy_jnum(t, "linear_num_value_heads") == 4 && hy_jnum(t, "linear_conv_kernel_dim") == 4);
    CHECK(hy_jnum(t, "mtp_num_hidden_layers") == 1 && hy_jnum(t, "shared_expert_intermediate_size") == 48);
    CHECK(hy_jnum(r, "rope_theta") == 1e7 && hy_jnum(r, "partial_rotary_factor") == 0.25);
    CHECK(!cJSON_GetObjectItemCaseSensitive(t, "rope_theta") && !cJSON_GetObjectItemCaseSensitive(t, "norm_topk_prob"));
    cJSON_Delete(c);
    d = hy_json(dir, "quant_model_description.json");
    CHECK(!strcmp(hy_jstr(d, "model_quant_type"), "W8A8_DYNAMIC"));
    CHECK(!strcmp(hy_jstr(d, "model.language_model.layers.0.linear_attn.in_proj_qkv.weight"), "FLOAT"));
    CHECK(!strcmp(hy_jstr(d, "model.language_model.layers.0.linear_attn.in_proj_z.weight"), "FLOAT"));
    CHECK(!strcmp(hy_jstr(d, "model.language_model.layers.0.linear_attn.A_log"), "FLOAT"));
    CHECK(!strcmp(hy_jstr(d, "model.language_model.layers.3.self_attn.q_proj.weight"), "W8A8_DYNAMIC"));
    CHECK(!strcmp(hy_jstr(d, "model.language_model.layers.3.self_attn.o_proj.weight"), "FLOAT"));
    CHECK(!strcmp(hy_jstr(d, "model.language_model.layers.2.mlp.experts.1.down_proj.weight"), "W8A8_DYNAMIC"));
    CHECK(!strcmp(hy_jstr(d, "model.language_model.layers.2.mlp.shared_expert.down_proj.weight"), "FLOAT"));
    CHECK(!strcmp(hy_jstr(d, "model.visual.merger.linear_fc2.weight"), "FLOAT"));
    cJSON_Delete(d);
}

/* Odd widths, 1:1 key/value heads, half the layers full, conv 2, rotary 12
 * of 24, no GQA grouping, no vision or MTP tensors. */
static fx_opts odd_opts(void) {
    fx_opts o = q5_opts(0);
    o.lin_v_heads = 2, o.full_interval = 2, o.conv_kernel = 2, o.hidden = 48, o.lin_v_dim = 10;
    o.head_dim = 24, o.n_heads = 3, o.n_kv_heads = 3, o.partial_rotary = 0.5, o.no_vision = 1, o.n_mtp = 0;
    o.moe_inter = 20, o.n_experts = 6, o.top_k = 3;
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
    fx_opts o = q5_opts(0);
    check_vs_ref("q5_float_fused", &o);
    o.split_experts = 1, o.float_dtype = MOE8_DT_F32, o.n_shards = 2, o.layer_types = 1;
    check_vs_ref("q5_float_split_f32", &o);
    o = odd_opts();
    check_vs_ref("q5_float_odd", &o);
    o = q5_opts(1);
    check_vs_ref("q5_w8a8", &o);
    o.down_float = 1, o.scale_2d = 0, o.seed += 5;
    check_vs_ref("q5_w8a8_down_float", &o);
    o = q5_opts(1); /* W4A8_DYNAMIC routed experts in two linear layers and the full one */
    o.w4a8_layers = 2u | 4u | 8u, o.seed += 17;
    check_vs_ref("q5_w4a8", &o);
    o = q5_opts(0);
    hy_check_long("q5_float_long", &o, 70, 3);
    o = q5_opts(1);
    hy_check_long("q5_w8a8_long", &o, 70, 3);
}

/* The MTP and vision tensors are never read: malformed, they change nothing. */
static void hook_break_extras(void *user, fx_tensor *t) {
    (void)user;
    if (!strcmp(t->orig_name, "mtp.fc.weight") || !strcmp(t->orig_name, "model.visual.blocks.0.attn.qkv.weight")) {
        const int64_t shape[2] = {3, 5};
        fx_retype(t, MOE8_DT_F16, 2, shape);
    }
    if (!strcmp(t->orig_name, "mtp.layers.0.mlp.experts.0.up_proj.weight_scale")) t->omit = 1;
}

static void test_extras_skipped(void) {
    fx_opts o = q5_opts(1);
    o.tensor_hook = hook_break_extras;
    check_vs_ref("q5_w8a8_mtp_vision_broken", &o);
}

#define L0 "model.language_model.layers.0.linear_attn."
#define Q5 FX_QWEN3_5_MOE
static const defect defects[] = {
    {"q5_no_A_log", Q5, 0, D_OMIT, L0 "A_log", 0, {0, 0}, NULL, NULL, NULL, MOE8_ERR_NOT_FOUND,
     "tensor '" L0 "A_log' not found"},
    {"q5_w8a8_no_A_log", Q5, 1, D_OMIT, L0 "A_log", 0, {0, 0}, NULL, NULL, NULL, MOE8_ERR_NOT_FOUND,
     "tensor '" L0 "A_log' not found"},
    {"q5_no_z", Q5, 0, D_OMIT, L0 "in_proj_z.weight", 0, {0, 0}, NULL, NULL, NULL, MOE8_ERR_NOT_FOUND,
     "tensor '" L0 "in_proj_z.weight' not found"},
    {"q5_no_a", Q5, 0, D_OMIT, L0 "in_proj_a.weight", 0, {0, 0}, NULL, NULL, NULL, MOE8_ERR_NOT_FOUND,
     "tensor '" L0 "in_proj_a.weight' not found"},
    {"q5_qkv_shape", Q5, 0, D_SHAPE, L0 "in_proj_qkv.weight", 2, {72, 64}, NULL, NULL, NULL,
     MOE8_ERR_FORMAT, L0 "in_proj_qkv.weight'"},
    {"q5_no_gate_up", Q5, 0, D_OMIT, "model.language_model.layers.1.mlp.experts.gate_up_proj", 0, {0, 0},
     NULL, NULL, NULL, MOE8_ERR_NOT_FOUND, "model.language_model.layers.1.mlp.experts."},
    {"q5_w8a8_no_expert_scale", Q5, 1, D_OMIT, "model.language_model.layers.1.mlp.experts.3.gate_proj.weight_scale",
     0, {0, 0}, NULL, NULL, NULL, MOE8_ERR_NOT_FOUND, "experts.3.gate_proj.weight_scale' not found"},
};

/* The conv kernel stored [C][1][3] where linear_conv_kernel_dim says 4; the
 * fused gate_up_proj with a wrong expert count. */
static void hook_shapes(void *user, fx_tensor *t) {
    const int which = *(const int *)user;
    if (which == 0 && !strcmp(t->orig_name, L0 "conv1d.weight")) {
        const int64_t shape[3] = {t->shape[0], 1, 3};
        fx_retype(t, t->dtype, 3, shape);
    }
    if (which == 1 && !strcmp(t->orig_name, "model.language_model.layers.1.mlp.experts.gate_up_proj")) {
        const int64_t shape[3] = {t->shape[0] - 1, t->shape[1], t->shape[2]};
        fx_retype(t, t->dtype, 3, shape);
    }
}

static void test_defects(void) {
    static const char *const want[2] = {L0 "conv1d.weight'", "layers.1.mlp.experts.gate_up_proj'"};
    for (size_t i = 0; i < sizeof defects / sizeof defects[0]; i++) check_defect(&defects[i], q5_opts(defects[i].quant));
    for (int which = 0; which < 2; which++) {
        fx_opts o = q5_opts(0);
        moe8_model *m = NULL;
        moe8_error e;
        moe8_status st;
        o.n_layers = 2;
        o.tensor_hook = hook_shapes;
        o.user = &which;
        memset(&e, 0, sizeof e);
        st = moe8_model_load(write_fixture(which ? "bad_q5_gate_up" : "bad_q5_conv_kernel", &o), NULL, &m, &e);
        CHECKF(st == MOE8_ERR_FORMAT && strstr(e.message, want[which]) != NULL, "%s: status %d, '%s'",
               want[which], st, e.message);
        moe8_model_free(m);
    }
    (void)make_quantize_compare;
    (void)parse;
    (void)run;
}

int main(void) {
    test_ref_vs_qwen3_next();
    test_ref_fused_experts();
    test_ref_model();
    test_ref_options();
    test_ref_fixture();
    test_ref_odd();
    CHECKF(!family_unknown("qwen3_5_moe", q5_opts(0)), "moe8 refuses model_type qwen3_5_moe");
    test_forward();
    test_extras_skipped();
    test_defects();
    hy_check_tiny(MOE8_ARCH_QWEN3_5_MOE);
    return test_summary();
}
