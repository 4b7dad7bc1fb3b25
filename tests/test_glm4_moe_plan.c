/*
 * test_glm4_moe_plan.c — the engine side of the glm4_moe family (issue 34): its
 * config.json read as Hugging Face's Glm4MoeConfig reads it, the per-layer
 * plan its declaration resolves to (plan.h), configs it refuses, and
 * make-model's tiny preset (with an MTP layer the loader skips) quantized
 * as msModelSlim does, the W8A8 model against its float source. The forward
 * against the double-precision reference is test_glm4_moe.c.
 */
#include "test.h"

#include "arch/arch.h"
#include "arch/plan.h"

#define V 2048

/* GLM-4.5-Air's config.json (zai-org/GLM-4.5-Air), keys as published. */
static const char air[] =
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

static moe8_status parse(const char *json, moe8_config *c, moe8_error *e) {
    memset(e, 0, sizeof *e);
    return moe8_config_parse(json, strlen(json), "config.json", c, e);
}

static void test_config_air(void) {
    moe8_config c;
    moe8_error e;
    moe8_layer_plan p0, p1;
    CHECKF(parse(air, &c, &e) == MOE8_OK, "%s", e.message);
    CHECK(c.arch == MOE8_ARCH_GLM4_MOE && !strcmp(c.model_type, "glm4_moe"));
    CHECK(c.hidden_size == 4096 && c.head_dim == 128 && c.num_attention_heads == 96 &&
          c.num_key_value_heads == 8 && c.num_experts == 128 && c.num_experts_per_tok == 8);
    CHECK(c.n_eos_ids == 3 && c.eos_token_ids[0] == 151329 && c.rms_norm_eps == 1e-5);
    CHECK(moe8_config_get_int(&c, "qkv_bias", NULL) == 1 &&
          moe8_config_get_int(&c, "qk_norm", NULL) == 0);
    CHECK(moe8_config_get_num(&c, "partial_rotary_factor", NULL) == 0.5);
    CHECK(moe8_config_get_int(&c, "shared_expert_intermediate_size", NULL) == 1408);
    CHECK(moe8_config_get_int(&c, "num_nextn_predict_layers", NULL) == 1);
    CHECK(moe8_rope_dim(&c) == 64);
    CHECK(!moe8_config_is_moe_layer(&c, 0) && moe8_config_is_moe_layer(&c, 1) &&
          moe8_config_is_moe_layer(&c, 45));
    moe8_plan_layer(&c, 0, &p0);
    moe8_plan_layer(&c, 1, &p1);
    CHECK(p0.ffn == MOE8_FFN_DENSE && p0.width == 10944 && p0.attn == MOE8_ATTN_GQA);
    CHECK(p0.attn_opts == MOE8_ATTN_QKV_BIAS && p0.rope == MOE8_ROPE_HALVES && p0.rope_dim == 64);
    CHECK(p1.ffn == MOE8_FFN_MOE_SHARED && p1.shared_gate == MOE8_SHARED_SUM && p1.width == 1408);
    CHECK(p1.sigmoid && p1.correction_bias && p1.grouped && p1.n_group == 1 &&
          p1.topk_group == 1 && p1.group_top2 && p1.renorm && p1.scale == 1.0);
    CHECK(p1.act == MOE8_ACT_SWIGLU);
    /* GLM-4.5 (355B) differs in use_qk_norm and the scaling */
    {
        static const char j[] = "{\"model_type\": \"glm4_moe\", \"hidden_size\": 5120, \"head_dim\": 128,"
                                " \"use_qk_norm\": true, \"routed_scaling_factor\": 2.5}";
        CHECKF(parse(j, &c, &e) == MOE8_OK, "%s", e.message);
        moe8_plan_layer(&c, 1, &p1);
        CHECK((p1.attn_opts & MOE8_ATTN_QK_NORM_HEAD) && p1.scale == 2.5);
    }
}

static void test_config_refused(void) {
    static const struct {
        const char *json, *msg;
    } bad[] = {
        {"{\"model_type\":\"glm4_moe\",\"hidden_size\":256,\"num_attention_heads\":8,"
         "\"head_dim\":32,\"partial_rotary_factor\":0.3}", "partial_rotary_factor"},
        {"{\"model_type\":\"glm4_moe\",\"partial_rotary_factor\":1.5}", "partial_rotary_factor"},
        {"{\"model_type\":\"glm4_moe\",\"head_dim\":128,\"n_routed_experts\":16,"
         "\"num_experts_per_tok\":4,\"n_group\":3}", "n_group"},
        {"{\"model_type\":\"glm4_moe\",\"rope_scaling\":{\"type\":\"yarn\",\"factor\":4}}",
         "rope_scaling"},
        {"{\"model_type\":\"glm4_moe\",\"use_qk_norm\":1}", "use_qk_norm"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        moe8_config c;
        moe8_error e;
        const moe8_status st = parse(bad[i].json, &c, &e);
        CHECKF(st != MOE8_OK && strstr(e.message, bad[i].msg), "case %zu: status %d '%s'", i, st,
               e.message);
    }
}

/* ---- make-model tiny, quantize, run ------------------------------------------- */

static moe8_model *load(const char *dir) {
    moe8_model_params mp = moe8_model_params_default();
    moe8_model *m = NULL;
    moe8_error e;
    mp.no_cache = 1;
    if (moe8_model_load(dir, &mp, &m, &e) != MOE8_OK) {
        fprintf(stderr, "load %s: %s\n", dir, e.message);
        exit(2);
    }
    return m;
}

/* Logits [n][V]: 3 tokens prefilled, then one per step; greedy continuation in *next. */
static void run(moe8_model *m, int n_threads, float *out) {
    static const int32_t ids[6] = {5, 17, 200, 3, 99, 42};
    moe8_context_params p = moe8_context_params_default();
    moe8_context *c = NULL;
    moe8_error e;
    int32_t pos[6] = {0, 1, 2, 3, 4, 5}, seq[6] = {0};
    int8_t want[6] = {1, 1, 1, 1, 1, 1};
    p.kv_type = MOE8_DT_F32;
    p.n_ctx = 32;
    p.n_outputs = 8;
    p.n_threads = n_threads;
    CHECKF(moe8_context_create(m, &p, &c, &e) == MOE8_OK, "context: %s", e.message);
    if (!c) return;
    moe8_batch b = {3, ids, pos, seq, want};
    CHECKF(moe8_decode(c, &b, &e) == MOE8_OK, "decode: %s", e.message);
    for (int i = 0; i < 3; i++) memcpy(out + (size_t)i * V, moe8_context_logits(c, i), sizeof(float) * V);
    for (int i = 3; i < 6; i++) {
        moe8_batch b1 = {1, ids + i, pos + i, seq, want};
        CHECKF(moe8_decode(c, &b1, &e) == MOE8_OK, "decode step %d: %s", i, e.message);
        memcpy(out + (size_t)i * V, moe8_context_logits(c, 0), sizeof(float) * V);
    }
    moe8_context_free(c);
}

static int argmax(const float *x) {
    int best = 0;
    for (int i = 1; i < V; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

static void test_tiny(void) {
    char fdir[4096], qdir[4096];
    moe8_make_model_params mp = moe8_make_model_params_default();
    moe8_quantize_params qp = moe8_quantize_params_default();
    moe8_model_stats st;
    moe8_layer_info li;
    moe8_error e;
    float *f1 = malloc(sizeof(float) * 6 * V), *f2 = malloc(sizeof(float) * 6 * V);
    float *q = malloc(sizeof(float) * 6 * V);
    snprintf(fdir, sizeof fdir, "%s", test_tmpdir("glm4_tiny"));
    snprintf(qdir, sizeof qdir, "%s", test_tmpdir("glm4_tiny_w8a8"));
    mp.arch = MOE8_ARCH_GLM4_MOE;
    mp.n_layers = 2;
    mp.seed = 5;
    mp.vocab_size = V;
    mp.tokenizer_dir = MOE8_TOKENIZER_DIR;
    mp.force = 1;
    CHECKF(moe8_make_model(&mp, fdir, &e) == MOE8_OK, "make-model: %s", e.message);
    qp.force = 1;
    qp.n_threads = 2;
    CHECKF(moe8_quantize(fdir, qdir, &qp, NULL, &e) == MOE8_OK, "quantize: %s", e.message);
    moe8_model *mf = load(fdir), *mq = load(qdir);
    /* the MTP layer (model.layers.2.*) is in the checkpoint, not in the model */
    moe8_model_get_stats(mf, &st);
    CHECK(moe8_config_get_int(moe8_model_config(mf), "num_nextn_predict_layers", NULL) == 1);
    CHECK(moe8_model_config(mf)->num_hidden_layers == 2 && st.n_tensors > 0);
    CHECK(moe8_model_layer_info(mq, 2, &li) == -1);
    CHECK(moe8_model_layer_info(mq, 0, &li) == 0 && !li.is_moe && li.qkv == MOE8_QUANT_W8A8 &&
          li.qkv_bias && li.mlp_gate_up == MOE8_QUANT_W8A8);
    CHECK(moe8_model_layer_info(mq, 1, &li) == 0 && li.is_moe && li.has_shared &&
          li.experts == MOE8_QUANT_W8A8_DYNAMIC && li.router == MOE8_QUANT_FLOAT);
    run(mf, 1, f1);
    run(mf, 2, f2);
    CHECKF(!memcmp(f1, f2, sizeof(float) * 6 * V), "float logits differ with 1 and 2 threads");
    run(mq, 2, q);
    double worst = 1;
    int same = 0;
    for (int t = 0; t < 6; t++) {
        worst = fmin(worst, test_cosine(q + (size_t)t * V, f1 + (size_t)t * V, V));
        same += argmax(q + (size_t)t * V) == argmax(f1 + (size_t)t * V);
        CHECK(isfinite(f1[(size_t)t * V]) && isfinite(q[(size_t)t * V]));
    }
    printf("glm4_moe tiny: W8A8 vs float worst cosine %.6f, arg-max equal at %d of 6 positions\n",
           worst, same);
    CHECKF(worst >= 0.99, "W8A8 vs float cosine %.6f", worst);
    CHECKF(same >= 5, "arg-max equal at %d of 6 positions", same);
    moe8_model_free(mf);
    moe8_model_free(mq);
    free(f1);
    free(f2);
    free(q);
}

int main(void) {
    test_config_air();
    test_config_refused();
    test_tiny();
    return test_summary();
}
