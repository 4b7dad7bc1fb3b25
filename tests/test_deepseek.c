/*
 * test_deepseek.c — the DeepSeek-V2 / DeepSeek-V3 families (multi-head latent
 * attention, shared experts, grouped routing, YaRN) against the test's own
 * reading of DeepSeek-V2-Lite's modeling_deepseek.py and transformers'
 * modeling_deepseek_v3.py (fixture_model.h FX_DEEPSEEK_V2/V3, forward_ref.h):
 *   - the reference itself: YaRN's inv_freq, mscale and softmax scale against
 *     numbers worked by hand from the formulas, HF's rotary layout against
 *     rotating the pairs (2i, 2i+1), the routing rules on hand-made scores
 *     (group-limited V2, V3's top-2 group sums and correction bias), the
 *     fixture's W8A8 kv_b_proj quant_bias cancelling the input offset;
 *   - config.json: the config classes' defaults, DeepSeek-V2-Lite's and
 *     Moonlight-16B-A3B's released config.json, refusals naming the field;
 *   - the float forward against the reference: logits within 1e-4 relative at
 *     every position of a 9-token prefill, and of a 4-token prefill followed
 *     by 5 single-token decode steps (the engine's absorbed decode path);
 *     V2 (q_proj, greedy, YaRN), V3 (q_lora, grouped sigmoid, bias), V2
 *     group_limited_greedy, first_k_dense_replace / moe_layer_freq, and a
 *     small latent whose sub-norm eps (1e-6 whatever rms_norm_eps says) shows;
 *   - W8A8 checkpoints (kv_b_proj FLOAT or W8A8, FLOAT expert down_proj)
 *     against the reference's W8A8 maths: cosine >= 0.9999 everywhere;
 *   - make-model --arch deepseek_v2 / deepseek_v3 --preset tiny quantized by
 *     moe8_quantize (and with down_proj_float): cosine >= 0.99 against the
 *     float model and 5 greedy tokens equal;
 *   - a corrupt-folder table: the error names the tensor or the field.
 * TP and EP of both families are in mpi_dist.c.
 */
#include "test.h"
#include "test_isa.h"

#include <sys/wait.h>

#include "fixture_model.h"
#include "forward_ref.h"
#include "family_test.h"

#include "arch/arch.h"
#include "moe8.h"

/* ======================================================================== */
/* Helpers                                                                   */
/* ======================================================================== */


/* The tiny DeepSeek fixture: H 64, 4 heads, dn 16, dr 8, dv 16, L 32, E 8,
 * top-3, I 32, dense 96, 3 layers (layer 0 dense). */
static fx_opts ds_opts(int arch, int quant) {
    fx_opts o = fx_default_opts();
    o.arch = arch;
    o.quant = quant;
    o.n_layers = 3;
    o.n_experts = 8;
    o.top_k = 3;
    o.moe_inter = 32;
    o.inter = 96;
    o.seed = 700 + (uint64_t)(10 * arch + quant);
    if (arch == FX_DEEPSEEK_V3) o.q_lora = 24;
    else o.no_renorm = 1;   /* V2: norm_topk_prob false, routed_scaling_factor applies */
    if (quant) {
        o.nonzero_offsets = 1;
        o.deq_i64 = 1;
    }
    return o;
}

/* ======================================================================== */
/* The reference itself                                                      */
/* ======================================================================== */

static void test_ref_yarn(void) {
    fx_opts o = fx_default_opts();
    double inv[4];
    o.arch = FX_DEEPSEEK_V2;
    o.qk_rope = 8, o.ds_theta = 500, o.yarn = 1, o.yarn_orig_max = 512;
    o.yarn_factor = 4, o.yarn_beta_fast = 8, o.yarn_beta_slow = 1;
    /* correction dims: 8 ln(512 / (8 * 2 pi)) / (2 ln 500) = 1.494 -> floor 1;
     * 8 ln(512 / (2 pi)) / (2 ln 500) = 2.832 -> ceil 3: the ramp over i is
     * 0, 0, 0.5, 1, so i = 0, 1 keep theta^(-2i/8), i = 2 takes 0.625 of it,
     * i = 3 a quarter. */
    ref_ds_inv_freq(&o, inv);
    CHECK_NEAR(inv[0], 1.0, 1e-15);
    CHECK_NEAR(inv[1], pow(500, -0.25), 1e-15);
    CHECK_NEAR(inv[2], 0.625 * pow(500, -0.5), 1e-15);
    CHECK_NEAR(inv[3], 0.25 * pow(500, -0.75), 1e-15);
    o.yarn = 0;
    ref_ds_inv_freq(&o, inv);
    CHECK_NEAR(inv[3], pow(500, -0.75), 1e-15);
    /* DeepSeek-V2-Lite: factor 40, mscale = mscale_all_dim = 0.707: cos/sin
     * unscaled, softmax scale 192^-0.5 * (1 + 0.0707 ln 40)^2 */
    o.yarn = 1, o.yarn_factor = 40, o.yarn_mscale = 0.707, o.yarn_mscale_all_dim = 0.707;
    o.qk_nope = 128, o.qk_rope = 64;
    CHECK_NEAR(ref_ds_rope_mscale(&o), 1.0, 1e-15);
    CHECK_NEAR(ref_yarn_mscale(40, 0.707), 1.2608037, 1e-7);
    CHECK_NEAR(ref_ds_softmax_scale(&o), 0.11472, 1e-5);
    /* mscale 1, mscale_all_dim 0 (DeepseekV2YarnRotaryEmbedding's defaults):
     * cos/sin x (1 + 0.1 ln f), softmax scale unchanged */
    o.yarn_mscale = 1.0, o.yarn_mscale_all_dim = 0.0, o.yarn_factor = 4;
    CHECK_NEAR(ref_ds_rope_mscale(&o), 1.0 + 0.1 * log(4.0), 1e-15);
    CHECK_NEAR(ref_ds_softmax_scale(&o), 1.0 / sqrt(192.0), 1e-15);
    CHECK_NEAR(ref_yarn_mscale(1.0, 5.0), 1.0, 0);
}

/* HF's layout (de-interleave, rotate_half) gives the scores of rotating
 * the pairs (2i, 2i+1), and they depend only on the distance. */
static void test_ref_rope(void) {
    test_rng r = {99};
    double q[8], k[8], a[8], b[8], inv[4], pq[8], pk[8];
    fx_opts o = fx_default_opts();
    o.qk_rope = 8, o.ds_theta = 10000;
    ref_ds_inv_freq(&o, inv);
    for (int i = 0; i < 8; i++) q[i] = test_rng_normal(&r), k[i] = test_rng_normal(&r);
    for (int p1 = 0; p1 < 6; p1++)
        for (int p2 = 0; p2 <= p1; p2++) {
            double d = 0, dp = 0, ds = 0;
            memcpy(a, q, sizeof a), memcpy(b, k, sizeof b);
            ref_ds_rope(a, 8, p1, inv, 1.0, 1);
            ref_ds_rope(b, 8, p2, inv, 1.0, 1);
            for (int i = 0; i < 8; i++) d += a[i] * b[i];
            for (int j = 0; j < 4; j++) {
                double t1 = p1 * inv[j], t2 = p2 * inv[j];
                pq[2 * j] = q[2 * j] * cos(t1) - q[2 * j + 1] * sin(t1);
                pq[2 * j + 1] = q[2 * j + 1] * cos(t1) + q[2 * j] * sin(t1);
                pk[2 * j] = k[2 * j] * cos(t2) - k[2 * j + 1] * sin(t2);
                pk[2 * j + 1] = k[2 * j + 1] * cos(t2) + k[2 * j] * sin(t2);
            }
            for (int i = 0; i < 8; i++) dp += pq[i] * pk[i];
            memcpy(a, q, sizeof a), memcpy(b, k, sizeof b);
            ref_ds_rope(a, 8, p1 + 7, inv, 1.0, 1);
            ref_ds_rope(b, 8, p2 + 7, inv, 1.0, 1);
            for (int i = 0; i < 8; i++) ds += a[i] * b[i];
            CHECK_NEAR(d, dp, 1e-12);
            CHECK_NEAR(d, ds, 1e-12);
        }
}

static double logit(double p) { return log(p / (1 - p)); }

static void test_ref_route(void) {
    fx_opts o = fx_default_opts();
    int64_t ids[4];
    double w[4], lg[8], bias[8] = {0};
    /* V3: sigmoid scores by group (2 experts each): {0.9, 0.1} {0.6, 0.6}
     * {0.55, 0.55} {0.2, 0.2}; top-2 sums 1.0, 1.2, 1.1, 0.4 keep groups 1
     * and 2, so the best expert (0) is dropped: experts 2 and 3. */
    static const double p[8] = {0.9, 0.1, 0.6, 0.6, 0.55, 0.55, 0.2, 0.2};
    o.arch = FX_DEEPSEEK_V3, o.n_experts = 8, o.top_k = 2, o.n_group = 4, o.topk_group = 2;
    o.routed_scale = 2.5;
    for (int e = 0; e < 8; e++) lg[e] = logit(p[e]);
    ref_route_deepseek(&o, lg, bias, ids, w);
    CHECK(ids[0] == 2 && ids[1] == 3);
    CHECK_NEAR(w[0], 0.5 * 2.5, 1e-12);
    /* a correction bias moves the choice (expert 5 over 3) but not the
     * weights: the unbiased sigmoid scores, normalized, x 2.5 */
    bias[5] = 0.1;
    ref_route_deepseek(&o, lg, bias, ids, w);
    CHECK(ids[0] == 5 && ids[1] == 2);
    CHECK_NEAR(w[0], 0.55 / 1.15 * 2.5, 1e-12);
    CHECK_NEAR(w[1], 0.6 / 1.15 * 2.5, 1e-12);
    o.no_renorm = 1;   /* norm_topk_prob false: the scores x 2.5 */
    ref_route_deepseek(&o, lg, bias, ids, w);
    CHECK_NEAR(w[0], 0.55 * 2.5, 1e-12);
    /* one group kept of one group: plain top-k */
    o.n_group = 1, o.topk_group = 1, o.no_renorm = 0;
    bias[5] = 0;
    ref_route_deepseek(&o, lg, bias, ids, w);
    CHECK(ids[0] == 0 && (ids[1] == 2 || ids[1] == 3));
    /* V2 group_limited_greedy: softmax scores, a group's best: group 0 (0.9)
     * and group 1 (0.6) kept; experts 0 and 2 */
    o = fx_default_opts();
    o.arch = FX_DEEPSEEK_V2, o.n_experts = 8, o.top_k = 2, o.n_group = 4, o.topk_group = 2;
    o.group_limited = 1, o.no_renorm = 1, o.routed_scale = 3.0;
    for (int e = 0; e < 8; e++) lg[e] = log(p[e]);
    ref_route_deepseek(&o, lg, NULL, ids, w);
    CHECK(ids[0] == 0 && ids[1] == 2);
    CHECK_NEAR(w[0], 0.9 / 3.7 * 3.0, 1e-12);
    /* norm_topk_prob with top-k > 1: divided by their sum, not scaled (V2's MoEGate) */
    o.no_renorm = 0;
    ref_route_deepseek(&o, lg, NULL, ids, w);
    CHECK_NEAR(w[0], 0.9 / 1.5, 1e-12);
    /* groups of 4 (n_group 2) keep one: the first group's best two */
    o.n_group = 2, o.topk_group = 1;
    ref_route_deepseek(&o, lg, NULL, ids, w);
    CHECK(ids[0] == 0 && (ids[1] == 2 || ids[1] == 3));
    o.group_limited = 0, o.n_group = 4;   /* greedy */
    ref_route_deepseek(&o, lg, NULL, ids, w);
    CHECK(ids[0] == 0 && (ids[1] == 2 || ids[1] == 3));
}

/* The fixture's W8A8 kv_b_proj: quant_bias cancels the input offset, row by
 * row; the names of both q forms and the V3 bias. */
static void test_ref_fixture(void) {
    fx_opts o = ds_opts(FX_DEEPSEEK_V3, 1);
    ref_model rm;
    int bad = 0;
    o.kvb_w8a8 = 1;
    ref_init(&rm, &o);
    const fx_tensor *w = ref_t(&rm, "model.layers.%lld.self_attn.kv_b_proj.weight", 1, 0);
    const fx_tensor *qb = ref_t(&rm, "model.layers.%lld.self_attn.kv_b_proj.quant_bias", 1, 0);
    const fx_tensor *io = ref_t(&rm, "model.layers.%lld.self_attn.kv_b_proj.input_offset", 1, 0);
    CHECK(w->shape[0] == 4 * 32 && w->shape[1] == 32);
    for (int64_t j = 0; j < w->shape[0]; j++) {
        double sum = 0;
        for (int64_t i = 0; i < w->shape[1]; i++) sum += fx_get(w, j * w->shape[1] + i);
        bad += fx_get(qb, j) + fx_get(io, 0) * sum != 0;
    }
    CHECK(bad == 0);
    CHECK(ref_t(&rm, "model.layers.%lld.self_attn.q_b_proj.weight", 2, 0)->shape[1] == 24);
    CHECK(ref_t(&rm, "model.layers.%lld.mlp.gate.e_score_correction_bias", 2, 0)->dtype == MOE8_DT_F32);
    CHECK(ref_t(&rm, "model.layers.%lld.mlp.shared_experts.down_proj.weight", 1, 0)->shape[1] == 32);
    CHECK(ref_t(&rm, "model.layers.%lld.mlp.down_proj.weight", 0, 0)->shape[1] == 96);
    ref_free(&rm);
    o = ds_opts(FX_DEEPSEEK_V2, 0);
    o.first_dense = 0, o.moe_freq = 2;   /* layers 0 and 2 MoE, 1 dense */
    CHECK(!fx_dense(&o, 0) && fx_dense(&o, 1) && !fx_dense(&o, 2));
    ref_init(&rm, &o);
    CHECK(ref_t(&rm, "model.layers.%lld.self_attn.q_proj.weight", 0, 0)->shape[0] == 4 * 24);
    CHECK(ref_t(&rm, "model.layers.%lld.self_attn.kv_a_proj_with_mqa.weight", 0, 0)->shape[0] == 40);
    CHECK(ref_t(&rm, "model.layers.%lld.self_attn.o_proj.weight", 0, 0)->shape[1] == 64);
    ref_free(&rm);
}

/* ======================================================================== */
/* Forward against the reference                                             */
/* ======================================================================== */


static void test_forward_float(void) {
    fx_opts o = ds_opts(FX_DEEPSEEK_V2, 0);
    o.yarn = 1;
    check_vs_ref("v2_float_qproj_greedy_yarn", &o);
    o = ds_opts(FX_DEEPSEEK_V2, 0);
    o.group_limited = 1;
    /* norm_topk_prob true: divided by the sum, and V2's MoEGate then does not
     * scale (its else branch): a factor of 2 must not reach the weights */
    o.routed_scale = 2.0;
    o.no_renorm = 0;
    o.float_dtype = MOE8_DT_F32;
    o.first_dense = 0, o.moe_freq = 2;   /* layers 0 and 2 MoE, 1 dense */
    check_vs_ref("v2_float_group_limited", &o);
    o = ds_opts(FX_DEEPSEEK_V3, 0);
    check_vs_ref("v3_float_qlora_grouped", &o);
    o.yarn = 1;
    o.yarn_mscale = 1.0, o.yarn_mscale_all_dim = 1.0;   /* DeepSeek-V3's */
    o.no_renorm = 1;
    o.n_shared = 2;
    o.top_k = 2;
    check_vs_ref("v3_float_yarn_2shared", &o);
    o.rope_halves = 1; /* rope_interleave false: transformers' rotate_half, no de-interleave */
    check_vs_ref("v3_float_rope_halves", &o);
    o.rope_halves = 0;
    /* a small latent (q_a and kv_a's latent rows x 1e-3): q_a/kv_a_layernorm's
     * eps 1e-6 matters; rms_norm_eps 1e-5 (Moonlight's) must not be used there */
    o = ds_opts(FX_DEEPSEEK_V3, 0);
    o.float_dtype = MOE8_DT_F32;
    o.latent_scale = 1e-3;
    o.ds_eps = 1e-5;
    o.n_group = 2, o.topk_group = 1;
    check_vs_ref("v3_float_small_latent", &o);
}

/* Odd widths everywhere (no multiple of 8 or 16: the kernels' tails, C = L + R
 * not a multiple of 8 runs the reference attention), one head or several,
 * q_proj or q_lora, float and W8A8: against the reference, prefill and decode. */
static void test_forward_odd_shapes(void) {
    static const struct { int arch, quant, heads, dn, dr, dv, L, QL; } S[] = {
        {FX_DEEPSEEK_V2, 0, 1, 5, 2, 3, 7, 0},
        {FX_DEEPSEEK_V3, 0, 3, 9, 6, 11, 13, 5},
        {FX_DEEPSEEK_V2, 1, 2, 7, 4, 9, 21, 0},
        {FX_DEEPSEEK_V3, 1, 5, 3, 10, 1, 30, 17},
    };
    for (size_t i = 0; i < sizeof S / sizeof S[0]; i++) {
        fx_opts o = ds_opts(S[i].arch, S[i].quant);
        char label[64];
        o.n_heads = S[i].heads, o.qk_nope = S[i].dn, o.qk_rope = S[i].dr, o.v_head = S[i].dv;
        o.kv_lora = S[i].L, o.q_lora = S[i].QL;
        o.seed += 31 * i;
        FMT(label, "odd_%s_%s_%zu", S[i].arch == FX_DEEPSEEK_V2 ? "v2" : "v3",
            S[i].quant ? "w8a8" : "float", i);
        check_vs_ref(label, &o);
    }
}

static void test_forward_w8a8(void) {
    fx_opts o = ds_opts(FX_DEEPSEEK_V2, 1);
    o.yarn = 1;
    check_vs_ref("v2_w8a8", &o);
    o.kvb_w8a8 = 1;
    o.qkv_same_input = 0;
    o.scale_2d = 1;
    check_vs_ref("v2_w8a8_kvb_w8a8", &o);
    o = ds_opts(FX_DEEPSEEK_V3, 1);
    check_vs_ref("v3_w8a8", &o);
    o.kvb_w8a8 = 1;
    o.deq_i64 = 0;
    check_vs_ref("v3_w8a8_kvb_w8a8", &o);
    /* a folded bias in kv_b_proj's quant_bias: on v added to the output, on
     * k_nope cancelling in the softmax (the reference adds both, expanded) */
    o.kvb_bias = 1;
    check_vs_ref("v3_w8a8_kvb_bias", &o);
    o.kvb_bias = 0;
    o.down_float = 1;
    o.seed += 100;
    check_vs_ref("v3_w8a8_down_float", &o);
    o = ds_opts(FX_DEEPSEEK_V2, 1);
    o.down_float = 1;
    o.group_limited = 1;
    check_vs_ref("v2_w8a8_down_float_grouped", &o);
    {   /* what the loader resolved */
        const char *dir = write_fixture("v3_w8a8_info", &o);
        moe8_model *m = test_load_model(dir);
        moe8_layer_info li;
        CHECK(moe8_model_layer_info(m, 1, &li) == 0 && li.is_moe && li.mla);
        CHECK(li.experts == MOE8_QUANT_W8A8_DYNAMIC && li.experts_down == MOE8_QUANT_FLOAT);
        CHECK(li.has_shared && li.shared_gate_up == MOE8_QUANT_W8A8_DYNAMIC &&
              li.shared_down == MOE8_QUANT_FLOAT);
        CHECK(li.qkv == MOE8_QUANT_W8A8 && li.o == MOE8_QUANT_W8A8 && li.kv_b == MOE8_QUANT_FLOAT);
        CHECK(moe8_model_layer_info(m, 0, &li) == 0 && !li.is_moe && li.mla &&
              li.mlp_gate_up == MOE8_QUANT_W8A8);
        moe8_model_free(m);
        o = ds_opts(FX_DEEPSEEK_V3, 1);
        o.kvb_w8a8 = 1;
        dir = write_fixture("v3_w8a8_info_kvb", &o);
        m = test_load_model(dir);
        CHECK(moe8_model_layer_info(m, 2, &li) == 0 && li.mla && li.kv_b == MOE8_QUANT_W8A8 &&
              li.q_b == MOE8_QUANT_W8A8);
        moe8_model_free(m);
    }
}

/* ======================================================================== */
/* make-model + quantize                                                     */
/* ======================================================================== */

static void test_make_quantize(int arch, int down_float) {
    char fdir[4096], qdir[4096], tok[4096];
    moe8_model *mf, *mq;
    FMT(tok, "%s/.deps/deepseek-v3-tokenizer", MOE8_SOURCE_DIR);
    make_quantize_compare(arch, down_float, access(tok, F_OK) == 0 ? tok : MOE8_TOKENIZER_DIR, fdir,
                          qdir, sizeof fdir, &mf, &mq);
    {
        moe8_layer_info li;
        const moe8_quant_type down = down_float ? MOE8_QUANT_FLOAT : MOE8_QUANT_W8A8_DYNAMIC;
        const moe8_config *c = moe8_model_config(mq);
        int64_t l = cfg_i(c, "first_k_dense_replace") < c->num_hidden_layers
            ? cfg_i(c, "first_k_dense_replace")
            : 0;
        CHECK(moe8_model_layer_info(mq, l, &li) == 0 && li.mla);
        CHECKF(li.is_moe, "layer %lld of the tiny preset is not MoE", (long long)l);
        CHECK(li.experts == MOE8_QUANT_W8A8_DYNAMIC && li.experts_down == down);
        CHECK(li.qkv == MOE8_QUANT_W8A8 && li.o == MOE8_QUANT_W8A8);
        CHECK(li.kv_b == MOE8_QUANT_FLOAT || li.kv_b == MOE8_QUANT_W8A8);
        CHECK(li.has_shared && li.shared_gate_up == MOE8_QUANT_W8A8_DYNAMIC && li.shared_down == down);
        if (cfg_i(c, "q_lora_rank") > 0) CHECK(li.q_b == MOE8_QUANT_W8A8);
    }
    moe8_model_free(mf);
    moe8_model_free(mq);
}

/* ======================================================================== */
/* Corrupt folders                                                           */
/* ======================================================================== */

#define L1 "model.layers.1."
#define V2 FX_DEEPSEEK_V2
#define V3 FX_DEEPSEEK_V3
static const defect defects[] = {
    {"ds_no_kvb", V2, 0, D_OMIT, L1 "self_attn.kv_b_proj.weight", 0, {0, 0}, NULL, NULL, NULL,
     MOE8_ERR_NOT_FOUND, "tensor '" L1 "self_attn.kv_b_proj.weight' not found"},
    {"ds_kva_shape", V2, 0, D_SHAPE, L1 "self_attn.kv_a_proj_with_mqa.weight", 2, {32, 64}, NULL,
     NULL, NULL, MOE8_ERR_FORMAT, "kv_a_proj_with_mqa.weight': expected shape [40, 64], found [32, 64]"},
    {"ds_kvb_shape", V3, 0, D_SHAPE, L1 "self_attn.kv_b_proj.weight", 2, {128, 24}, NULL, NULL,
     NULL, MOE8_ERR_FORMAT, "kv_b_proj.weight': expected shape [128, 32], found [128, 24]"},
    {"ds_no_kva_norm", V3, 0, D_OMIT, L1 "self_attn.kv_a_layernorm.weight", 0, {0, 0}, NULL, NULL,
     NULL, MOE8_ERR_NOT_FOUND, "tensor '" L1 "self_attn.kv_a_layernorm.weight' not found"},
    {"ds_no_qa_norm", V3, 0, D_OMIT, L1 "self_attn.q_a_layernorm.weight", 0, {0, 0}, NULL, NULL,
     NULL, MOE8_ERR_NOT_FOUND, "tensor '" L1 "self_attn.q_a_layernorm.weight' not found"},
    {"ds_qb_shape", V3, 0, D_SHAPE, L1 "self_attn.q_b_proj.weight", 2, {96, 20}, NULL, NULL, NULL,
     MOE8_ERR_FORMAT, "q_b_proj.weight': expected shape [96, 24], found [96, 20]"},
    {"ds_o_shape", V2, 0, D_SHAPE, L1 "self_attn.o_proj.weight", 2, {64, 96}, NULL, NULL, NULL,
     MOE8_ERR_FORMAT, "o_proj.weight': expected shape [64, 64], found [64, 96]"},
    {"ds_no_bias", V3, 0, D_OMIT, L1 "mlp.gate.e_score_correction_bias", 0, {0, 0}, NULL, NULL,
     NULL, MOE8_ERR_NOT_FOUND, "tensor '" L1 "mlp.gate.e_score_correction_bias' not found"},
    {"ds_bias_shape", V3, 0, D_SHAPE, L1 "mlp.gate.e_score_correction_bias", 1, {6, 0}, NULL, NULL,
     NULL, MOE8_ERR_FORMAT, "e_score_correction_bias': expected shape [8], found [6]"},
    {"ds_no_shared_down", V2, 0, D_OMIT, L1 "mlp.shared_experts.down_proj.weight", 0, {0, 0}, NULL,
     NULL, NULL, MOE8_ERR_NOT_FOUND, "tensor '" L1 "mlp.shared_experts.down_proj.weight' not found"},
    {"ds_shared_shape", V2, 0, D_SHAPE, L1 "mlp.shared_experts.up_proj.weight", 2, {48, 64}, NULL,
     NULL, NULL, MOE8_ERR_FORMAT, "shared_experts.up_proj.weight': expected shape [32, 64], found [48, 64]"},
    {"ds_dense_layer0", V2, 0, D_OMIT, "model.layers.0.mlp.down_proj.weight", 0, {0, 0}, NULL,
     NULL, NULL, MOE8_ERR_NOT_FOUND, "tensor 'model.layers.0.mlp.down_proj.weight' not found"},
    {"ds_w8a8_no_kvb", V3, 1, D_OMIT, L1 "self_attn.kv_b_proj.weight", 0, {0, 0}, NULL, NULL,
     NULL, MOE8_ERR_NOT_FOUND, "kv_b_proj.weight' not found"},
    {"ds_w8a8_no_qa_scale", V3, 1, D_OMIT, L1 "self_attn.q_a_proj.input_scale", 0, {0, 0}, NULL,
     NULL, NULL, MOE8_ERR_NOT_FOUND, "q_a_proj.input_scale' not found"},
    {"ds_cfg_kv_lora", V2, 0, D_NONE, NULL, 0, {0, 0}, "config.json", "kv_lora_rank", "0",
     MOE8_ERR_FORMAT, "kv_lora_rank"},
    {"ds_cfg_kv_lora_big", V2, 0, D_NONE, NULL, 0, {0, 0}, "config.json", "kv_lora_rank", "1e9",
     MOE8_ERR_FORMAT, "kv_lora_rank"},
    {"ds_cfg_kv_lora_shape", V2, 0, D_NONE, NULL, 0, {0, 0}, "config.json", "kv_lora_rank", "24",
     MOE8_ERR_FORMAT, "kv_a_proj_with_mqa.weight': expected shape [32, 64], found [40, 64]"},
    {"ds_cfg_q_lora_zero", V3, 0, D_NONE, NULL, 0, {0, 0}, "config.json", "q_lora_rank", "0",
     MOE8_ERR_FORMAT, "q_lora_rank"},
    {"ds_cfg_q_lora_null", V3, 0, D_NONE, NULL, 0, {0, 0}, "config.json", "q_lora_rank", "null",
     MOE8_ERR_NOT_FOUND, "tensor 'model.layers.0.self_attn.q_proj.weight' not found"},
    {"ds_cfg_rope_odd", V2, 0, D_NONE, NULL, 0, {0, 0}, "config.json", "qk_rope_head_dim", "7",
     MOE8_ERR_FORMAT, "qk_rope_head_dim"},
    {"ds_cfg_group", V3, 0, D_NONE, NULL, 0, {0, 0}, "config.json", "n_group", "3",
     MOE8_ERR_FORMAT, "n_group"},
    {"ds_cfg_topk_group", V3, 0, D_NONE, NULL, 0, {0, 0}, "config.json", "topk_group", "5",
     MOE8_ERR_FORMAT, "topk_group"},
    {"ds_cfg_method", V2, 0, D_NONE, NULL, 0, {0, 0}, "config.json", "topk_method", "\"gready\"",
     MOE8_ERR_UNSUPPORTED, "topk_method"},
    {"ds_cfg_scoring", V2, 0, D_NONE, NULL, 0, {0, 0}, "config.json", "scoring_func", "\"relu\"",
     MOE8_ERR_UNSUPPORTED, "scoring_func"},
    {"ds_cfg_attn_bias", V3, 0, D_NONE, NULL, 0, {0, 0}, "config.json", "attention_bias", "true",
     MOE8_ERR_UNSUPPORTED, "attention_bias true not supported"},
    {"ds_cfg_rope_linear", V2, 0, D_NONE, NULL, 0, {0, 0}, "config.json", "rope_scaling",
     "{\"type\": \"linear\", \"factor\": 2.0}", MOE8_ERR_UNSUPPORTED, "rope_scaling"},
    /* the selection bias is a router tensor: FLOAT whatever the description says */
    {"ds_desc_bias_w8a8", V3, 1, D_NONE, NULL, 0, {0, 0}, "quant_model_description.json",
     L1 "mlp.gate.e_score_correction_bias", "\"W8A8\"", MOE8_ERR_UNSUPPORTED,
     "e_score_correction_bias': quant type W8A8 not supported (must be FLOAT)"},
};

static void test_defects(void) {
    for (size_t i = 0; i < sizeof defects / sizeof defects[0]; i++)
        check_defect(&defects[i], ds_opts(defects[i].arch, defects[i].quant));
}

/* ======================================================================== */
/* config.json                                                               */
/* ======================================================================== */

static const char *v2_lite =
    "{\"architectures\": [\"DeepseekV2ForCausalLM\"], \"attention_bias\": false,"
    " \"attention_dropout\": 0.0, \"aux_loss_alpha\": 0.001, \"bos_token_id\": 100000,"
    " \"eos_token_id\": 100001, \"first_k_dense_replace\": 1, \"hidden_act\": \"silu\","
    " \"hidden_size\": 2048, \"initializer_range\": 0.02, \"intermediate_size\": 10944,"
    " \"kv_lora_rank\": 512, \"max_position_embeddings\": 163840, \"model_type\": \"deepseek_v2\","
    " \"moe_intermediate_size\": 1408, \"moe_layer_freq\": 1, \"n_group\": 1,"
    " \"n_routed_experts\": 64, \"n_shared_experts\": 2, \"norm_topk_prob\": false,"
    " \"num_attention_heads\": 16, \"num_experts_per_tok\": 6, \"num_hidden_layers\": 27,"
    " \"num_key_value_heads\": 16, \"pretraining_tp\": 1, \"q_lora_rank\": null,"
    " \"qk_nope_head_dim\": 128, \"qk_rope_head_dim\": 64, \"rms_norm_eps\": 1e-06,"
    " \"rope_scaling\": {\"beta_fast\": 32, \"beta_slow\": 1, \"factor\": 40, \"mscale\": 0.707,"
    " \"mscale_all_dim\": 0.707, \"original_max_position_embeddings\": 4096, \"type\": \"yarn\"},"
    " \"rope_theta\": 10000, \"routed_scaling_factor\": 1.0, \"scoring_func\": \"softmax\","
    " \"seq_aux\": true, \"tie_word_embeddings\": false, \"topk_group\": 1,"
    " \"topk_method\": \"greedy\", \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.33.1\","
    " \"use_cache\": true, \"v_head_dim\": 128, \"vocab_size\": 102400}";

static const char *moonlight =
    "{\"architectures\": [\"DeepseekV3ForCausalLM\"], \"attention_bias\": false,"
    " \"attention_dropout\": 0.0, \"aux_loss_alpha\": 0.001, \"bos_token_id\": 163584,"
    " \"eos_token_id\": 163585, \"first_k_dense_replace\": 1, \"hidden_act\": \"silu\","
    " \"hidden_size\": 2048, \"initializer_range\": 0.02, \"intermediate_size\": 11264,"
    " \"kv_lora_rank\": 512, \"max_position_embeddings\": 8192, \"model_type\": \"deepseek_v3\","
    " \"moe_intermediate_size\": 1408, \"moe_layer_freq\": 1, \"n_group\": 1,"
    " \"n_routed_experts\": 64, \"n_shared_experts\": 2, \"norm_topk_prob\": true,"
    " \"num_attention_heads\": 16, \"num_experts_per_tok\": 6, \"num_hidden_layers\": 27,"
    " \"num_key_value_heads\": 16, \"num_nextn_predict_layers\": 0, \"pretraining_tp\": 1,"
    " \"q_lora_rank\": null, \"qk_nope_head_dim\": 128, \"qk_rope_head_dim\": 64,"
    " \"rms_norm_eps\": 1e-05, \"rope_scaling\": null, \"rope_theta\": 50000.0,"
    " \"routed_scaling_factor\": 2.446, \"scoring_func\": \"sigmoid\", \"seq_aux\": true,"
    " \"tie_word_embeddings\": false, \"topk_group\": 1, \"topk_method\": \"noaux_tc\","
    " \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.48.0\", \"use_cache\": true,"
    " \"v_head_dim\": 128, \"vocab_size\": 163840}";

static void test_config_released(void) {
    moe8_config c;
    moe8_error e;
    CHECKF(parse(v2_lite, &c, &e) == MOE8_OK, "DeepSeek-V2-Lite: %s", e.message);
    CHECK(c.arch == MOE8_ARCH_DEEPSEEK_V2 && !strcmp(c.model_type, "deepseek_v2"));
    CHECK(c.vocab_size == 102400 && c.hidden_size == 2048 && c.intermediate_size == 10944);
    CHECK(c.moe_intermediate_size == 1408 && c.num_hidden_layers == 27);
    CHECK(c.num_attention_heads == 16 && c.num_key_value_heads == 16);
    CHECK(c.num_experts == 64 && c.num_experts_per_tok == 6 && cfg_i(&c, "n_shared_experts") == 2);
    CHECK(cfg_i(&c, "shared_expert_intermediate_size") == 2816 && !c.norm_topk_prob);
    CHECK(cfg_i(&c, "kv_lora_rank") == 512 && cfg_i(&c, "q_lora_rank") == 0 &&
          cfg_i(&c, "qk_nope_head_dim") == 128);
    CHECK(cfg_i(&c, "qk_rope_head_dim") == 64 && cfg_i(&c, "v_head_dim") == 128 &&
          c.head_dim == 192);
    CHECK(cfg_i(&c, "first_k_dense_replace") == 1 && cfg_i(&c, "moe_layer_freq") == 1);
    CHECK(!cfg_i(&c, "topk_grouped") && !cfg_i(&c, "scoring_sigmoid") &&
          !cfg_i(&c, "e_score_bias") && cfg_i(&c, "rope_interleave"));
    CHECK(cfg_d(&c, "routed_scaling_factor") == 1.0 && c.rope_theta == 10000 &&
          c.rms_norm_eps == 1e-6);
    CHECK(c.max_position_embeddings == 163840 && c.bos_token_id == 100000);
    CHECK(c.n_eos_ids == 1 && c.eos_token_ids[0] == 100001);
    CHECK(cfg_d(&c, "yarn_factor") == 40 && cfg_d(&c, "yarn_beta_fast") == 32 &&
          cfg_d(&c, "yarn_beta_slow") == 1);
    CHECK(cfg_d(&c, "yarn_mscale") == 0.707 && cfg_d(&c, "yarn_mscale_all_dim") == 0.707);
    CHECK(cfg_i(&c, "yarn_original_max_position_embeddings") == 4096);
    CHECK(!moe8_config_is_moe_layer(&c, 0));
    for (int l = 1; l < 27; l++) CHECK(moe8_config_is_moe_layer(&c, l));
    CHECKF(parse(moonlight, &c, &e) == MOE8_OK, "Moonlight-16B-A3B: %s", e.message);
    CHECK(c.arch == MOE8_ARCH_DEEPSEEK_V3 && !strcmp(c.model_type, "deepseek_v3"));
    CHECK(c.vocab_size == 163840 && c.intermediate_size == 11264 && c.rms_norm_eps == 1e-5);
    CHECK(c.norm_topk_prob && cfg_d(&c, "routed_scaling_factor") == 2.446 &&
          cfg_i(&c, "scoring_sigmoid"));
    CHECK(cfg_i(&c, "e_score_bias") && cfg_i(&c, "n_group") == 1 && cfg_i(&c, "topk_group") == 1 &&
          cfg_i(&c, "group_top2"));
    CHECK(c.rope_theta == 50000 && cfg_d(&c, "yarn_factor") == 0 &&
          c.max_position_embeddings == 8192);
    CHECK(cfg_i(&c, "q_lora_rank") == 0 && cfg_i(&c, "kv_lora_rank") == 512 &&
          c.bos_token_id == 163584);
    CHECK(!moe8_config_is_moe_layer(&c, 0) && moe8_config_is_moe_layer(&c, 26));
    /* moe_layer_freq 2 with first_k_dense_replace 1: MoE at 2, 4, ... */
    CHECK(parse("{\"model_type\":\"deepseek_v2\",\"num_hidden_layers\":6,\"first_k_dense_replace\":1,"
                "\"moe_layer_freq\":2,\"n_routed_experts\":8,\"num_experts_per_tok\":2}", &c, &e) == MOE8_OK);
    for (int l = 0; l < 6; l++) CHECKF(moe8_config_is_moe_layer(&c, l) == (l >= 1 && l % 2 == 0), "layer %d", l);
    /* V2 group_limited_greedy: a group's best, grouped */
    CHECK(parse("{\"model_type\":\"deepseek_v2\",\"n_routed_experts\":160,\"num_experts_per_tok\":6,"
                "\"topk_method\":\"group_limited_greedy\",\"n_group\":8,\"topk_group\":3}", &c, &e) == MOE8_OK);
    CHECK(cfg_i(&c, "topk_grouped") && !cfg_i(&c, "group_top2") && cfg_i(&c, "n_group") == 8 &&
          cfg_i(&c, "topk_group") == 3);
}

/* The defaults of Hugging Face's config classes (missing keys). */
static void test_config_defaults(void) {
    moe8_config c;
    moe8_error e;
    moe8_status st = parse("{\"model_type\": \"deepseek_v3\"}", &c, &e);
    CHECKF(st == MOE8_OK, "deepseek_v3 defaults: %s", e.message);
    /* DeepseekV3Config: DeepSeek-V3's shapes */
    CHECK(c.vocab_size == 129280 && c.hidden_size == 7168 && c.intermediate_size == 18432);
    CHECK(c.moe_intermediate_size == 2048 && c.num_hidden_layers == 61);
    CHECK(c.num_attention_heads == 128 && c.num_key_value_heads == 128);
    CHECK(cfg_i(&c, "n_shared_experts") == 1 && c.num_experts == 256 && c.num_experts_per_tok == 8);
    CHECK(cfg_d(&c, "routed_scaling_factor") == 2.5 && cfg_i(&c, "kv_lora_rank") == 512 &&
          cfg_i(&c, "q_lora_rank") == 1536);
    CHECK(cfg_i(&c, "qk_rope_head_dim") == 64 && cfg_i(&c, "qk_nope_head_dim") == 128 &&
          cfg_i(&c, "v_head_dim") == 128);
    CHECK(cfg_i(&c, "n_group") == 8 && cfg_i(&c, "topk_group") == 4 &&
          cfg_i(&c, "first_k_dense_replace") == 3 && c.norm_topk_prob);
    CHECK(c.rms_norm_eps == 1e-6 && c.rope_theta == 10000 && c.bos_token_id == 0);
    CHECK(c.n_eos_ids == 1 && c.eos_token_ids[0] == 1 && !c.tie_word_embeddings);
    printf("deepseek_v3 defaults: max_position_embeddings %lld\n", (long long)c.max_position_embeddings);
    st = parse("{\"model_type\": \"deepseek_v2\", \"num_experts_per_tok\": 6}", &c, &e);
    CHECKF(st == MOE8_OK, "deepseek_v2 defaults: %s", e.message);
    CHECK(cfg_i(&c, "kv_lora_rank") == 512 && cfg_i(&c, "q_lora_rank") == 1536 &&
          cfg_i(&c, "qk_rope_head_dim") == 64);
    CHECK(cfg_i(&c, "qk_nope_head_dim") == 128 && cfg_i(&c, "v_head_dim") == 128 &&
          c.hidden_size == 4096);
    CHECK(c.intermediate_size == 11008 && c.moe_intermediate_size == 1407);
    CHECK(cfg_d(&c, "routed_scaling_factor") == 1.0 && !c.norm_topk_prob &&
          cfg_i(&c, "first_k_dense_replace") == 0);
    CHECK(cfg_i(&c, "moe_layer_freq") == 1 && !cfg_i(&c, "topk_grouped") &&
          !cfg_i(&c, "scoring_sigmoid"));
    printf("deepseek_v2 defaults: vocab %lld, layers %lld, experts %lld, shared %lld, bos %lld\n",
           (long long)c.vocab_size, (long long)c.num_hidden_layers, (long long)c.num_experts,
           (long long)cfg_i(&c, "n_shared_experts"), (long long)c.bos_token_id);
}

static void test_config_errors(void) {
#define DS2 "{\"model_type\":\"deepseek_v2\",\"n_routed_experts\":8,\"num_experts_per_tok\":2,"
#define DS3 "{\"model_type\":\"deepseek_v3\",\"n_routed_experts\":8,\"num_experts_per_tok\":2,\"n_group\":4,\"topk_group\":2,"
    static const struct {
        const char *json;
        moe8_status code;
        const char *msg;
    } cases[] = {
        {DS2 "\"attention_bias\":true}", MOE8_ERR_UNSUPPORTED, "attention_bias true not supported"},
        {DS3 "\"attention_bias\":true}", MOE8_ERR_UNSUPPORTED, "attention_bias true not supported"},
        {DS2 "\"topk_method\":\"noaux_tc\"}", MOE8_ERR_UNSUPPORTED, "topk_method"},
        {DS2 "\"topk_method\":\"gready\"}", MOE8_ERR_UNSUPPORTED, "topk_method"},
        {DS3 "\"topk_method\":\"greedy\"}", MOE8_ERR_UNSUPPORTED, "topk_method"},
        {DS2 "\"scoring_func\":\"sigmoid\"}", MOE8_ERR_UNSUPPORTED, "scoring_func"},
        {DS3 "\"scoring_func\":\"softmax\"}", MOE8_ERR_UNSUPPORTED, "scoring_func"},
        {DS3 "\"n_group\":3}", MOE8_ERR_FORMAT, "n_group"},
        {DS3 "\"topk_group\":5}", MOE8_ERR_FORMAT, "topk_group"},
        {DS3 "\"num_experts_per_tok\":9}", MOE8_ERR_FORMAT, "num_experts_per_tok"},
        {DS2 "\"topk_method\":\"group_limited_greedy\",\"n_group\":3,\"topk_group\":1}",
         MOE8_ERR_FORMAT, "n_group"},
        {DS2 "\"rope_scaling\":{\"type\":\"linear\",\"factor\":2.0}}", MOE8_ERR_UNSUPPORTED,
         "rope_scaling"},
        {DS3 "\"rope_scaling\":{\"type\":\"dynamic\",\"factor\":2.0}}", MOE8_ERR_UNSUPPORTED,
         "rope_scaling"},
        {DS2 "\"q_lora_rank\":0}", MOE8_ERR_FORMAT, "q_lora_rank"},
        {DS2 "\"q_lora_rank\":-4}", MOE8_ERR_FORMAT, "q_lora_rank"},
        {DS2 "\"kv_lora_rank\":0}", MOE8_ERR_FORMAT, "kv_lora_rank"},
        {DS2 "\"kv_lora_rank\":null}", MOE8_ERR_FORMAT, "kv_lora_rank"},
        {DS2 "\"qk_rope_head_dim\":7}", MOE8_ERR_FORMAT, "qk_rope_head_dim"},
        {DS2 "\"qk_rope_head_dim\":0}", MOE8_ERR_FORMAT, "qk_rope_head_dim"},
        {DS2 "\"v_head_dim\":0}", MOE8_ERR_FORMAT, "v_head_dim"},
        {DS2 "\"routed_scaling_factor\":\"x\"}", MOE8_ERR_FORMAT, "routed_scaling_factor"},
        {DS2 "\"moe_layer_freq\":0}", MOE8_ERR_FORMAT, "moe_layer_freq"},
        {DS2 "\"hidden_act\":\"gelu\"}", MOE8_ERR_UNSUPPORTED, "hidden_act"},
        {DS2 "\"rope_scaling\":{\"type\":\"yarn\",\"factor\":-2,\"original_max_position_embeddings\":4096}}",
         MOE8_ERR_FORMAT, "factor"},
        {DS2 "\"rope_scaling\":{\"type\":\"yarn\",\"factor\":4,\"original_max_position_embeddings\":0}}",
         MOE8_ERR_FORMAT, "original_max_position_embeddings"},
        {DS2 "\"rope_scaling\":{\"factor\":4}}", MOE8_ERR_FORMAT, "rope_scaling.type"},
        /* values that would make the rotary tables or the softmax scale inf / NaN */
        {DS2 "\"rope_theta\":1,\"rope_scaling\":{\"type\":\"yarn\",\"factor\":4}}", MOE8_ERR_FORMAT,
         "rope_theta 1 with yarn"},
        {DS2 "\"rope_scaling\":{\"type\":\"yarn\",\"factor\":4,\"mscale\":1e300}}", MOE8_ERR_FORMAT,
         "mscales <= 1e3"},
        {DS2 "\"rope_scaling\":{\"type\":\"yarn\",\"factor\":4,\"mscale_all_dim\":1e30}}",
         MOE8_ERR_FORMAT, "mscale_all_dim 1e+30"},
        {DS2 "\"rope_scaling\":{\"type\":\"yarn\",\"factor\":1e9}}", MOE8_ERR_FORMAT, "factor 1e+09"},
        /* the latent rows of every head, and v, bounded like q */
        {DS2 "\"num_attention_heads\":1024,\"qk_nope_head_dim\":1,\"qk_rope_head_dim\":2,"
             "\"kv_lora_rank\":65536}", MOE8_ERR_FORMAT, "(kv_lora_rank + qk_rope_head_dim)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        moe8_config c;
        moe8_error e;
        moe8_status st = parse(cases[i].json, &c, &e);
        CHECKF(st == cases[i].code && strstr(e.message, cases[i].msg),
               "case %zu %s: status %d '%s' (want %d '%s')", i, cases[i].json, st, e.message,
               cases[i].code, cases[i].msg);
    }
    /* every layer dense (first_k_dense_replace >= layers): no top-k needed, as Hugging Face
     * loads it; a hand-made config with moe_layer_freq 0 reads as 1, never a division by 0 */
    {
        static const char all_dense[] = "{\"model_type\":\"deepseek_v2\",\"num_hidden_layers\":3,"
                                        "\"first_k_dense_replace\":3}";
        moe8_config c;
        moe8_error e;
        CHECKF(parse(all_dense, &c, &e) == MOE8_OK, "%s", e.message);
        for (int l = 0; l < 3; l++) CHECK(!moe8_config_is_moe_layer(&c, l));
        MOE8_FAM(&c)->first_k_dense_replace = 1; /* the family block (arch/arch.h) */
        MOE8_FAM(&c)->moe_layer_freq = 0;
        CHECK(moe8_config_is_moe_layer(&c, 1) && moe8_config_is_moe_layer(&c, 2));
    }
}

/* make-model's presets: the slice has the released model's shapes
 * (DeepSeek-V2-Lite, Moonlight-16B-A3B), tiny is MLA with every feature. */
static void test_presets(void) {
    moe8_make_model_params p = moe8_make_model_params_default();
    moe8_config c;
    moe8_error e;
    p.arch = MOE8_ARCH_DEEPSEEK_V2;
    p.preset = MOE8_PRESET_SLICE;
    CHECKF(moe8_make_model_config(&p, &c, &e) == MOE8_OK, "v2 slice: %s", e.message);
    CHECK(c.arch == MOE8_ARCH_DEEPSEEK_V2 && c.hidden_size == 2048 && c.intermediate_size == 10944);
    CHECK(c.num_attention_heads == 16 && cfg_i(&c, "kv_lora_rank") == 512 &&
          cfg_i(&c, "q_lora_rank") == 0);
    CHECK(cfg_i(&c, "qk_nope_head_dim") == 128 && cfg_i(&c, "qk_rope_head_dim") == 64 &&
          cfg_i(&c, "v_head_dim") == 128);
    CHECK(c.num_experts == 64 && c.num_experts_per_tok == 6 && cfg_i(&c, "n_shared_experts") == 2);
    CHECK(c.moe_intermediate_size == 1408 && cfg_i(&c, "first_k_dense_replace") == 1 &&
          !c.norm_topk_prob);
    CHECK(cfg_d(&c, "yarn_factor") == 40 && cfg_d(&c, "yarn_mscale") == 0.707 &&
          cfg_d(&c, "yarn_mscale_all_dim") == 0.707);
    CHECK(cfg_i(&c, "yarn_original_max_position_embeddings") == 4096 &&
          cfg_d(&c, "routed_scaling_factor") == 1.0);
    {   /* all of it: the released config.json with the V3 tokenizer's vocabulary and ids, 4 layers */
        moe8_config lite;
        CHECKF(parse(v2_lite, &lite, &e) == MOE8_OK, "%s", e.message);
        lite.vocab_size = 129280, lite.num_hidden_layers = 4;
        lite.bos_token_id = 0, lite.eos_token_ids[0] = 1;
        CHECK(!memcmp(&c, &lite, sizeof c));
    }
    p.arch = MOE8_ARCH_DEEPSEEK_V3;
    CHECKF(moe8_make_model_config(&p, &c, &e) == MOE8_OK, "v3 slice: %s", e.message);
    CHECK(c.arch == MOE8_ARCH_DEEPSEEK_V3 && c.hidden_size == 2048 && c.intermediate_size == 11264);
    CHECK(c.num_experts == 64 && c.num_experts_per_tok == 6 && cfg_i(&c, "n_shared_experts") == 2);
    CHECK(c.norm_topk_prob && cfg_d(&c, "routed_scaling_factor") == 2.446 &&
          cfg_i(&c, "scoring_sigmoid") && cfg_i(&c, "e_score_bias"));
    CHECK(c.rope_theta == 50000 && cfg_i(&c, "q_lora_rank") == 0 && cfg_d(&c, "yarn_factor") == 0);
    CHECK(c.rms_norm_eps == 1e-5); /* Moonlight's */
    for (int a = MOE8_ARCH_DEEPSEEK_V2; a <= MOE8_ARCH_DEEPSEEK_V3; a++) {
        p.arch = (moe8_arch)a;
        p.preset = MOE8_PRESET_TINY;
        CHECKF(moe8_make_model_config(&p, &c, &e) == MOE8_OK, "%s tiny: %s", moe8_arch_name(p.arch),
               e.message);
        CHECK(c.arch == (moe8_arch)a && cfg_i(&c, "kv_lora_rank") > 0 &&
              cfg_i(&c, "n_shared_experts") > 0);
        printf("%s tiny: H %lld, %lld heads, L %lld, q_lora %lld, dn %lld dr %lld dv %lld, E %lld "
               "top-%lld,"
               " groups %lld/%lld, first dense %lld, yarn %g\n",
               moe8_arch_name(p.arch), (long long)c.hidden_size, (long long)c.num_attention_heads,
               (long long)cfg_i(&c, "kv_lora_rank"), (long long)cfg_i(&c, "q_lora_rank"),
               (long long)cfg_i(&c, "qk_nope_head_dim"), (long long)cfg_i(&c, "qk_rope_head_dim"),
               (long long)cfg_i(&c, "v_head_dim"), (long long)c.num_experts,
               (long long)c.num_experts_per_tok, (long long)cfg_i(&c, "n_group"),
               (long long)cfg_i(&c, "topk_group"), (long long)cfg_i(&c, "first_k_dense_replace"),
               cfg_d(&c, "yarn_factor"));
    }
}

/* `moe8 inspect` on a W8A8 V3 fixture names the family and MLA. */
static void test_inspect(void) {
    char cmd[8400], out[16384];
    fx_opts o = ds_opts(FX_DEEPSEEK_V3, 1);
    const char *dir = write_fixture("inspect_ds3", &o);
    FMT(cmd, "'%s' inspect -m '%s' 2>&1", MOE8_CLI, dir);
    CHECKF(run(cmd, out, sizeof out) == 0, "%s", out);
    CHECKF(strstr(out, "deepseek_v3") != NULL, "inspect lacks deepseek_v3:\n%s", out);
}

int main(int argc, char **argv) {
    test_table_or_skip(); /* MOE8_ISA: a table this CPU lacks is skipped */
    const int ref_only = argc > 1 && !strcmp(argv[1], "--ref-only");
    test_ref_yarn();
    test_ref_rope();
    test_ref_route();
    test_ref_fixture();
    if (ref_only) return test_summary();
    test_config_released();
    test_config_defaults();
    test_config_errors();
    test_presets();
    test_forward_float();
    test_forward_w8a8();
    test_forward_odd_shapes();
    test_defects();
    test_make_quantize(MOE8_ARCH_DEEPSEEK_V2, 0);
    test_make_quantize(MOE8_ARCH_DEEPSEEK_V2, 1);
    test_make_quantize(MOE8_ARCH_DEEPSEEK_V3, 0);
    test_inspect();
    return test_summary();
}
