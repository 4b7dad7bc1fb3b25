/*
 * test_arch.c — the model families beside Qwen3-MoE (docs/MODELS.md): Qwen2-MoE
 * and Mixtral, each against the test's own reading of Hugging Face's config
 * and modeling code:
 *   - config.json: the config class's defaults, a released model's config,
 *     every family-specific refusal, and the families moe8 refuses
 *     (DeepSeek-V2/V3 are tests/test_deepseek.c's);
 *   - the float forward against the double-precision reference of the
 *     family (forward_ref.h): last-token logits within 1e-4 relative;
 *   - W8A8 checkpoints (fixture_model.h, ModelSlim layout) against the
 *     reference's double W8A8 maths: cosine >= 0.9999 at every position;
 *   - make-model's tiny preset of the family (Mixtral with the Qwen tokenizer
 *     until this build reads Mistral's SentencePiece one), quantized by moe8 quantize:
 *     cosine >= 0.99 against the float source and 5 greedy tokens equal,
 *     plus the layout quantize writes (q/k/v biases folded into quant_bias);
 *   - the mixed layout of quantize --down-proj float (every expert down_proj
 *     FLOAT beside W8A8_DYNAMIC gate/up; Qwen3-MoE too) against the double
 *     maths (cosine >= 0.9999), thread counts bit-identical, and through
 *     make-model + quantize and the CLI;
 *   - a corrupt-folder table: missing and mis-shaped tensors named in the
 *     error, config fields out of range named;
 *   - `moe8 inspect` showing the family's parts.
 * TP and EP of every family are in mpi_dist.c.
 */
#include "test.h"
#include "test_isa.h"

#include <sys/wait.h>

#include "fixture_model.h"
#include "forward_ref.h"
#include "family_test.h"

#include "moe8.h"

#define TOK MOE8_TOKENIZER_DIR

/* ======================================================================== */
/* Helpers                                                                   */
/* ======================================================================== */


/* ======================================================================== */
/* Forward against the family's reference                                    */
/* ======================================================================== */


static fx_opts family_opts(int arch, int quant) {
    fx_opts o = fx_default_opts();
    o.arch = arch;
    o.quant = quant;
    o.n_layers = 3;
    o.dense_layer = 1;   /* ignored by Mixtral: every layer MoE */
    o.seed = 500 + (uint64_t)(10 * arch + quant);
    if (quant) {
        o.nonzero_offsets = 1;
        o.deq_i64 = 1;
    }
    return o;
}

/* The mixed layout of --down-proj float: every expert's down_proj (routed
 * and shared) FLOAT beside W8A8_DYNAMIC gate/up, against the reference's
 * double maths (the down product takes the float SwiGLU output), and the
 * same logits bit for bit on 1 and 3 threads. */
static void test_down_float(int arch) {
    char label[64];
    fx_opts o = family_opts(arch, 1);
    o.down_float = 1;
    o.seed += 100;
    FMT(label, "%s_w8a8_down_float", moe8_arch_name((moe8_arch)arch));
    check_vs_ref(label, &o);
    {
        const char *dir = write_fixture("down_float_threads", &o);
        moe8_model *m = test_load_model(dir);
        moe8_layer_info li;
        const int V = (int)o.vocab;
        float *a = malloc(sizeof(float) * 9 * V), *b = malloc(sizeof(float) * 9 * V);
        CHECK(moe8_model_layer_info(m, 0, &li) == 0 && li.experts == MOE8_QUANT_W8A8_DYNAMIC &&
              li.experts_down == MOE8_QUANT_FLOAT);
        if (li.has_shared)
            CHECK(li.shared_gate_up == MOE8_QUANT_W8A8_DYNAMIC && li.shared_down == MOE8_QUANT_FLOAT);
        g_threads = 1;
        run_logits(m, PROMPT, 9, 9, a);
        g_threads = 3;
        run_logits(m, PROMPT, 9, 9, b);
        g_threads = 2;
        CHECKF(!memcmp(a, b, sizeof(float) * 9 * V), "%s: 1 vs 3 threads differ", label);
        free(a);
        free(b);
        moe8_model_free(m);
    }
}

static void test_forward(int arch) {
    char label[64];
    fx_opts o = family_opts(arch, 0);
    FMT(label, "%s_float", moe8_arch_name((moe8_arch)arch));
    check_vs_ref(label, &o);
    o.float_dtype = MOE8_DT_F32;
    o.tie = 1;
    o.no_renorm = 1;    /* Mixtral ignores it: always renormalized */
    FMT(label, "%s_float_f32_tied", moe8_arch_name((moe8_arch)arch));
    check_vs_ref(label, &o);
    o = family_opts(arch, 1);
    o.bias_tensor = 1;  /* Qwen2-MoE: a float .bias beside the folded quant_bias, ignored */
    FMT(label, "%s_w8a8", moe8_arch_name((moe8_arch)arch));
    check_vs_ref(label, &o);
    o.qkv_same_input = 0;
    o.scale_2d = 1;
    o.deq_i64 = 0;
    o.no_renorm = 1;
    FMT(label, "%s_w8a8_variant", moe8_arch_name((moe8_arch)arch));
    check_vs_ref(label, &o);
    test_down_float(arch);
}

/* ======================================================================== */
/* make-model + quantize                                                     */
/* ======================================================================== */

static const moe8_tensor *find_t(const moe8_st *st, const char *fmt, int l) {
    char n[200];
    FMT(n, fmt, l);
    return moe8_st_find(st, n);
}

static float at(const moe8_tensor *t, int64_t i) {
    float f;
    uint32_t lo;
    int64_t v;
    switch (t->dtype) {
    case MOE8_DT_F32: return ((const float *)t->data)[i];
    case MOE8_DT_BF16: return moe8_bf16_to_f32(((const uint16_t *)t->data)[i]);
    case MOE8_DT_I32: return (float)((const int32_t *)t->data)[i];
    case MOE8_DT_I8: return (float)((const int8_t *)t->data)[i];
    case MOE8_DT_I64: /* deq_scale: fp32 bits in the low word */
        memcpy(&v, (const char *)t->data + 8 * i, 8);
        lo = (uint32_t)(uint64_t)v;
        memcpy(&f, &lo, 4);
        return f;
    default: return NAN;
    }
}

/* Qwen2-MoE: quantize folds each q/k/v bias into quant_bias, msModelSlim's
 * form: quant_bias = round(bias / deq_scale) - input_offset * sum_k Wq. */
static void check_folded_bias(const char *fdir, const char *qdir) {
    moe8_st *f = NULL, *q = NULL;
    int bad = 0;
    CHECK(moe8_st_open(fdir, &f, NULL) == MOE8_OK && moe8_st_open(qdir, &q, NULL) == MOE8_OK);
    if (!f || !q) goto done;
    for (int l = 0; l < 2; l++) {
        const moe8_tensor *b = find_t(f, "model.layers.%d.self_attn.q_proj.bias", l);
        const moe8_tensor *w = find_t(q, "model.layers.%d.self_attn.q_proj.weight", l);
        const moe8_tensor *d = find_t(q, "model.layers.%d.self_attn.q_proj.deq_scale", l);
        const moe8_tensor *qb = find_t(q, "model.layers.%d.self_attn.q_proj.quant_bias", l);
        const moe8_tensor *io = find_t(q, "model.layers.%d.self_attn.q_proj.input_offset", l);
        CHECK(b && w && d && qb && io);
        CHECK(!find_t(q, "model.layers.%d.self_attn.q_proj.bias", l) &&
              !find_t(q, "model.layers.%d.self_attn.v_proj.bias", l));
        if (!b || !w || !d || !qb || !io) continue;
        for (int64_t i = 0; i < w->shape[0]; i++) {
            int64_t sum = 0, want;
            for (int64_t k = 0; k < w->shape[1]; k++) sum += ((const int8_t *)w->data)[i * w->shape[1] + k];
            want = (int64_t)rintf(at(b, i) / at(d, i)) - (int64_t)at(io, 0) * sum;
            bad += (int64_t)at(qb, i) != want;
        }
    }
    CHECKF(bad == 0, "%d folded quant_bias values differ from round(bias/deq) - o*sum(Wq)", bad);
done:
    moe8_st_free(f);
    moe8_st_free(q);
}

static void test_make_quantize(int arch, int down_float) {
    char fdir[4096], qdir[4096];
    moe8_model *mf, *mq;
    /* qwen2_moe: layer 0 dense, layer 1 MoE; mixtral: both MoE */
    make_quantize_compare(arch, down_float, TOK, fdir, qdir, sizeof fdir, &mf, &mq);
    {
        moe8_layer_info li;
        CHECK(moe8_model_layer_info(mq, 1, &li) == 0 && li.is_moe);
        const moe8_quant_type down = down_float ? MOE8_QUANT_FLOAT : MOE8_QUANT_W8A8_DYNAMIC;
        CHECK(li.experts == MOE8_QUANT_W8A8_DYNAMIC && li.experts_down == down);
        CHECK(li.qkv == MOE8_QUANT_W8A8 && li.o == MOE8_QUANT_W8A8);
        CHECK(li.has_shared == (arch == MOE8_ARCH_QWEN2_MOE));
        if (li.has_shared)
            CHECK(li.shared_gate_up == MOE8_QUANT_W8A8_DYNAMIC && li.shared_down == down);
    }
    if (arch == MOE8_ARCH_QWEN2_MOE && !down_float) check_folded_bias(fdir, qdir);
    moe8_model_free(mf);
    moe8_model_free(mq);
}

/* ======================================================================== */
/* Corrupt folders                                                           */
/* ======================================================================== */

#define L0 "model.layers.0."
static const defect defects[] = {
    /* Qwen2-MoE */
    {"q2_no_bias", 1, 0, D_OMIT, L0 "self_attn.q_proj.bias", 0, {0, 0}, NULL, NULL, NULL,
     MOE8_ERR_NOT_FOUND, "tensor '" L0 "self_attn.q_proj.bias' not found"},
    {"q2_bias_shape", 1, 0, D_SHAPE, L0 "self_attn.k_proj.bias", 1, {16, 0}, NULL, NULL, NULL,
     MOE8_ERR_FORMAT, "k_proj.bias': expected shape [32], found [16]"},
    {"q2_w8a8_bias_shape", 1, 1, D_SHAPE, L0 "self_attn.v_proj.bias", 2, {32, 1}, NULL, NULL, NULL,
     MOE8_ERR_FORMAT, "v_proj.bias': expected shape [32], found [32, 1]"},
    {"q2_no_shared_gate", 1, 0, D_OMIT, L0 "mlp.shared_expert_gate.weight", 0, {0, 0}, NULL, NULL,
     NULL, MOE8_ERR_NOT_FOUND, "tensor '" L0 "mlp.shared_expert_gate.weight' not found"},
    {"q2_shared_gate_shape", 1, 0, D_SHAPE, L0 "mlp.shared_expert_gate.weight", 2, {2, 64}, NULL,
     NULL, NULL, MOE8_ERR_FORMAT, "shared_expert_gate.weight': expected shape [1, 64], found [2, 64]"},
    {"q2_shared_down_shape", 1, 0, D_SHAPE, L0 "mlp.shared_expert.down_proj.weight", 2, {64, 40},
     NULL, NULL, NULL, MOE8_ERR_FORMAT, "shared_expert.down_proj.weight': expected shape [64, 48], "
     "found [64, 40]"},
    {"q2_no_shared_up", 1, 1, D_OMIT, L0 "mlp.shared_expert.up_proj.weight", 0, {0, 0}, NULL, NULL,
     NULL, MOE8_ERR_NOT_FOUND, "tensor '" L0 "mlp.shared_expert.up_proj.weight' not found"},
    {"q2_no_shared_scale", 1, 1, D_OMIT, L0 "mlp.shared_expert.down_proj.weight_scale", 0, {0, 0},
     NULL, NULL, NULL, MOE8_ERR_NOT_FOUND, "shared_expert.down_proj.weight_scale' not found"},
    {"q2_cfg_shared_width", 1, 0, D_NONE, NULL, 0, {0, 0}, "config.json",
     "shared_expert_intermediate_size", "40", MOE8_ERR_FORMAT,
     "shared_expert.gate_proj.weight': expected shape [40, 64], found [48, 64]"},
    {"q2_cfg_shared_zero", 1, 0, D_NONE, NULL, 0, {0, 0}, "config.json",
     "shared_expert_intermediate_size", "0", MOE8_ERR_FORMAT,
     "shared_expert_intermediate_size (0) outside [1, 1048576]"},
    {"q2_cfg_window", 1, 0, D_NONE, NULL, 0, {0, 0}, "config.json", "use_sliding_window", "true",
     MOE8_ERR_UNSUPPORTED, "use_sliding_window true not supported"},
    {"q2_cfg_qkv_bias", 1, 0, D_NONE, NULL, 0, {0, 0}, "config.json", "qkv_bias", "\"yes\"",
     MOE8_ERR_FORMAT, "qkv_bias must be true or false"},
    {"q2_cfg_no_qkv_bias", 1, 0, D_NONE, NULL, 0, {0, 0}, "config.json", "qkv_bias", "false",
     MOE8_OK, NULL},   /* biases present but unused: loads (HF ignores them too) */
    {"q2_desc_shared_gate", 1, 1, D_NONE, NULL, 0, {0, 0}, "quant_model_description.json",
     L0 "mlp.shared_expert_gate.weight", "\"W8A8\"", MOE8_ERR_UNSUPPORTED,
     "shared_expert_gate.weight': quant type W8A8 not supported (must be FLOAT)"},
    {"q2_desc_shared_mixed", 1, 1, D_NONE, NULL, 0, {0, 0}, "quant_model_description.json",
     L0 "mlp.shared_expert.up_proj.weight", "\"FLOAT\"", MOE8_ERR_FORMAT,
     "shards of packed shared_expert.gate_up_proj disagree"},
    {"q2_desc_no_shared_key", 1, 1, D_NONE, NULL, 0, {0, 0}, "quant_model_description.json",
     L0 "mlp.shared_expert.down_proj.weight", NULL, MOE8_ERR_NOT_FOUND,
     "required key '" L0 "mlp.shared_expert.down_proj.weight' missing"},
    /* Qwen3-MoE: the mixed down_proj layout and what it does not allow */
    {"q3_desc_down_dynamic", 0, 1, D_NONE, NULL, 0, {0, 0}, "quant_model_description.json",
     L0 "mlp.experts.0.down_proj.weight", "\"W8A8\"", MOE8_ERR_UNSUPPORTED,
     "layer 0: experts are W8A8, not supported on experts"},
    {"q3_desc_down_float", 0, 1, D_NONE, NULL, 0, {0, 0}, "quant_model_description.json",
     L0 "mlp.experts.0.down_proj.weight", "\"FLOAT\"", MOE8_ERR_FORMAT,
     "experts.0.down_proj.weight': expected dtype BF16, F16 or F32 (FLOAT), found I8"},
    /* Mixtral */
#define BSM L0 "block_sparse_moe."
    {"mx_no_w2", 2, 0, D_OMIT, BSM "experts.3.w2.weight", 0, {0, 0}, NULL, NULL, NULL,
     MOE8_ERR_NOT_FOUND, "tensor '" BSM "experts.3.w2.weight' not found"},
    {"mx_w3_shape", 2, 0, D_SHAPE, BSM "experts.1.w3.weight", 2, {32, 60}, NULL, NULL, NULL,
     MOE8_ERR_FORMAT, "experts.1.w3.weight': expected shape [32, 64], found [32, 60]"},
    {"mx_router_shape", 2, 0, D_SHAPE, BSM "gate.weight", 2, {3, 64}, NULL, NULL, NULL,
     MOE8_ERR_FORMAT, "block_sparse_moe.gate.weight': expected shape [4, 64], found [3, 64]"},
    {"mx_qwen_names", 2, 0, D_OMIT, BSM "gate.weight", 0, {0, 0}, NULL, NULL, NULL,
     MOE8_ERR_NOT_FOUND, "tensor '" BSM "gate.weight' not found"},
    {"mx_w1_scale", 2, 1, D_OMIT, BSM "experts.2.w1.weight_scale", 0, {0, 0}, NULL, NULL, NULL,
     MOE8_ERR_NOT_FOUND, "experts.2.w1.weight_scale' not found"},
    {"mx_cfg_experts", 2, 0, D_NONE, NULL, 0, {0, 0}, "config.json", "num_local_experts", "0",
     MOE8_ERR_FORMAT, "num_local_experts (0) outside [1, 4096]"},
    {"mx_cfg_width", 2, 0, D_NONE, NULL, 0, {0, 0}, "config.json", "intermediate_size", "40",
     MOE8_ERR_FORMAT, "experts.0.w1.weight': expected shape [40, 64], found [32, 64]"},
    {"mx_cfg_window", 2, 0, D_NONE, NULL, 0, {0, 0}, "config.json", "sliding_window", "4096",
     MOE8_ERR_UNSUPPORTED, "sliding_window 4096 not supported (must be null or absent)"},
    {"mx_cfg_topk", 2, 0, D_NONE, NULL, 0, {0, 0}, "config.json", "num_experts_per_tok", "5",
     MOE8_ERR_FORMAT, "num_experts_per_tok (5) > num_experts (4)"},
    {"mx_desc_mixed", 2, 1, D_NONE, NULL, 0, {0, 0}, "quant_model_description.json",
     BSM "experts.0.w3.weight", "\"FLOAT\"", MOE8_ERR_FORMAT,
     "shards of packed experts disagree: block_sparse_moe.experts.0.w1 is W8A8_DYNAMIC, "
     "block_sparse_moe.experts.0.w3 is FLOAT"},
    {"mx_desc_router", 2, 1, D_NONE, NULL, 0, {0, 0}, "quant_model_description.json",
     BSM "gate.weight", "\"W8A8\"", MOE8_ERR_UNSUPPORTED,
     "block_sparse_moe.gate.weight': quant type W8A8 not supported (must be FLOAT)"},
};

static void test_defects(int arch) {
    for (size_t i = 0; i < sizeof defects / sizeof defects[0]; i++) {
        fx_opts o;
        if (defects[i].arch != arch) continue;
        o = family_opts(arch, defects[i].quant);
        if (defects[i].quant) o.bias_tensor = 1;
        check_defect(&defects[i], o);
    }
}

/* ======================================================================== */
/* config.json                                                               */
/* ======================================================================== */

static const char *qwen15_moe =
    "{\"architectures\": [\"Qwen2MoeForCausalLM\"], \"attention_dropout\": 0.0,"
    " \"bos_token_id\": 151643, \"decoder_sparse_step\": 1, \"eos_token_id\": 151645,"
    " \"hidden_act\": \"silu\", \"hidden_size\": 2048, \"initializer_range\": 0.02,"
    " \"intermediate_size\": 5632, \"max_position_embeddings\": 8192, \"max_window_layers\": 21,"
    " \"model_type\": \"qwen2_moe\", \"moe_intermediate_size\": 1408, \"norm_topk_prob\": false,"
    " \"num_attention_heads\": 16, \"num_experts\": 60, \"num_experts_per_tok\": 4,"
    " \"num_hidden_layers\": 24, \"num_key_value_heads\": 16, \"output_router_logits\": false,"
    " \"rms_norm_eps\": 1e-06, \"rope_theta\": 1000000.0, \"router_aux_loss_coef\": 0.001,"
    " \"shared_expert_intermediate_size\": 5632, \"sliding_window\": 32768,"
    " \"tie_word_embeddings\": false, \"torch_dtype\": \"bfloat16\","
    " \"transformers_version\": \"4.40.0.dev0\", \"use_cache\": true, \"use_sliding_window\": false,"
    " \"vocab_size\": 151936}";

static void test_config_qwen2(void) {
    moe8_config c;
    moe8_error e;
    /* Qwen2MoeConfig defaults */
    CHECK(parse("{\"model_type\": \"qwen2_moe\"}", &c, &e) == MOE8_OK);
    CHECK(c.arch == MOE8_ARCH_QWEN2_MOE && !strcmp(c.model_type, "qwen2_moe"));
    CHECK(c.vocab_size == 151936 && c.hidden_size == 2048 && c.intermediate_size == 5632);
    CHECK(c.num_hidden_layers == 24 && c.num_attention_heads == 16 && c.num_key_value_heads == 16);
    CHECK(c.head_dim == 128 && c.max_position_embeddings == 32768 && c.rms_norm_eps == 1e-6);
    CHECK(c.rope_theta == 10000.0 && !c.tie_word_embeddings && c.decoder_sparse_step == 1);
    CHECK(c.moe_intermediate_size == 1408 && cfg_i(&c, "shared_expert_intermediate_size") == 5632);
    CHECK(c.num_experts_per_tok == 4 && c.num_experts == 60 && !c.norm_topk_prob &&
          cfg_i(&c, "qkv_bias"));
    CHECK(c.bos_token_id == -1 && c.n_eos_ids == 0 && c.n_mlp_only_layers == 0);
    /* Qwen1.5-MoE-A2.7B's config.json */
    CHECK(parse(qwen15_moe, &c, &e) == MOE8_OK);
    CHECK(c.hidden_size == 2048 && c.num_experts == 60 &&
          cfg_i(&c, "shared_expert_intermediate_size") == 5632);
    CHECK(c.rope_theta == 1e6 && c.max_position_embeddings == 8192 && c.bos_token_id == 151643);
    for (int l = 0; l < 24; l++) CHECK(moe8_config_is_moe_layer(&c, l));
    CHECK(parse("{\"model_type\":\"qwen2_moe\",\"num_hidden_layers\":4,\"decoder_sparse_step\":2,"
                "\"mlp_only_layers\":[3],\"qkv_bias\":false}", &c, &e) == MOE8_OK);
    CHECK(!moe8_config_is_moe_layer(&c, 0) && moe8_config_is_moe_layer(&c, 1) &&
          !moe8_config_is_moe_layer(&c, 3) && !cfg_i(&c, "qkv_bias"));
}

static const char *mixtral_8x7b =
    "{\"architectures\": [\"MixtralForCausalLM\"], \"attention_dropout\": 0.0,"
    " \"bos_token_id\": 1, \"eos_token_id\": 2, \"hidden_act\": \"silu\", \"hidden_size\": 4096,"
    " \"initializer_range\": 0.02, \"intermediate_size\": 14336, \"max_position_embeddings\": 32768,"
    " \"model_type\": \"mixtral\", \"num_attention_heads\": 32, \"num_experts_per_tok\": 2,"
    " \"num_hidden_layers\": 32, \"num_key_value_heads\": 8, \"num_local_experts\": 8,"
    " \"output_router_logits\": false, \"rms_norm_eps\": 1e-05, \"rope_theta\": 1000000.0,"
    " \"router_aux_loss_coef\": 0.02, \"sliding_window\": null, \"tie_word_embeddings\": false,"
    " \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.36.0.dev0\", \"use_cache\": true,"
    " \"vocab_size\": 32000}";

static void test_config_mixtral(void) {
    moe8_config c;
    moe8_error e;
    /* MixtralConfig defaults */
    CHECK(parse("{\"model_type\": \"mixtral\"}", &c, &e) == MOE8_OK);
    CHECK(c.arch == MOE8_ARCH_MIXTRAL && !strcmp(c.model_type, "mixtral"));
    CHECK(c.vocab_size == 32000 && c.hidden_size == 4096 && c.moe_intermediate_size == 14336);
    CHECK(c.num_hidden_layers == 32 && c.num_attention_heads == 32 && c.num_key_value_heads == 8);
    CHECK(c.head_dim == 128 && c.max_position_embeddings == 131072 && c.rms_norm_eps == 1e-5);
    CHECK(c.rope_theta == 1e6 && !c.tie_word_embeddings && c.num_experts_per_tok == 2);
    CHECK(c.num_experts == 8 && c.norm_topk_prob == 1 && !cfg_i(&c, "qkv_bias"));
    CHECK(cfg_i(&c, "shared_expert_intermediate_size") == 0);
    CHECK(c.bos_token_id == 1 && c.n_eos_ids == 1 && c.eos_token_ids[0] == 2);
    /* Mixtral-8x7B-v0.1's config.json; every layer MoE whatever Qwen keys say */
    CHECK(parse(mixtral_8x7b, &c, &e) == MOE8_OK);
    CHECK(c.max_position_embeddings == 32768 && c.num_experts == 8 && c.moe_intermediate_size == 14336);
    for (int l = 0; l < 32; l++) CHECK(moe8_config_is_moe_layer(&c, l));
    CHECK(parse("{\"model_type\":\"mixtral\",\"num_hidden_layers\":4,\"decoder_sparse_step\":2,"
                "\"mlp_only_layers\":[0],\"norm_topk_prob\":false,\"num_key_value_heads\":null,"
                "\"eos_token_id\":[5,6],\"bos_token_id\":null}", &c, &e) == MOE8_OK);
    for (int l = 0; l < 4; l++) CHECK(moe8_config_is_moe_layer(&c, l));
    CHECK(c.norm_topk_prob == 1 && c.num_key_value_heads == 32 && c.bos_token_id == -1);
    CHECK(c.n_eos_ids == 2 && c.eos_token_ids[0] == 5 && c.eos_token_ids[1] == 6);
    CHECK(parse("{\"model_type\":\"mixtral\",\"vocab_size\":2}", &c, &e) == MOE8_ERR_FORMAT &&
          strstr(e.message, "default eos_token_id (2) outside [0, vocab_size 2)"));
}

static void test_config_errors(void) {
    static const struct {
        const char *json;
        moe8_status code;
        const char *msg;
    } cases[] = {
        {"{\"model_type\":\"deepseek_v3\",\"topk_method\":\"greedy\"}", MOE8_ERR_UNSUPPORTED,
         "topk_method \"greedy\" not supported (expected \"noaux_tc\")"},
        {"{\"model_type\":\"deepseek_v2\"}", MOE8_ERR_FORMAT,
         "num_experts_per_tok missing (needed with 64 n_routed_experts)"},
        {"{\"model_type\":\"llama\"}", MOE8_ERR_UNSUPPORTED,
         "expected one of qwen3_moe, qwen2_moe, mixtral"},
        {"{\"model_type\":\"mixtral\",\"sliding_window\":4096}", MOE8_ERR_UNSUPPORTED,
         "sliding_window 4096 not supported (must be null or absent)"},
        {"{\"model_type\":\"mixtral\",\"sliding_window\":\"x\"}", MOE8_ERR_UNSUPPORTED,
         "sliding_window not supported"},
        {"{\"model_type\":\"mixtral\",\"num_local_experts\":4,\"num_experts_per_tok\":6}",
         MOE8_ERR_FORMAT, "num_experts_per_tok (6) > num_experts (4)"},
        {"{\"model_type\":\"mixtral\",\"num_key_value_heads\":5}", MOE8_ERR_FORMAT,
         "num_attention_heads (32) is not a multiple of num_key_value_heads (5)"},
        {"{\"model_type\":\"qwen2_moe\",\"use_sliding_window\":true}", MOE8_ERR_UNSUPPORTED,
         "use_sliding_window true not supported"},
        {"{\"model_type\":\"qwen2_moe\",\"shared_expert_intermediate_size\":2e6}", MOE8_ERR_FORMAT,
         "shared_expert_intermediate_size (2000000) outside [1, 1048576]"},
        {"{\"model_type\":\"qwen2_moe\",\"norm_topk_prob\":0}", MOE8_ERR_FORMAT,
         "norm_topk_prob must be true or false"},
        {"{\"model_type\":\"qwen2_moe\",\"rope_scaling\":{\"type\":\"yarn\"}}", MOE8_ERR_UNSUPPORTED,
         "rope_scaling not supported"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        moe8_config c;
        moe8_error e;
        moe8_status st = parse(cases[i].json, &c, &e);
        CHECKF(st == cases[i].code && strstr(e.message, cases[i].msg),
               "case %zu: status %d '%s' (want %d '%s')", i, st, e.message, cases[i].code,
               cases[i].msg);
    }
}

/* make-model presets of the family: config fields and the files. */
static void test_presets(void) {
    moe8_make_model_params p = moe8_make_model_params_default();
    moe8_config c;
    moe8_error e;
    p.arch = MOE8_ARCH_QWEN2_MOE;
    CHECK(moe8_make_model_config(&p, &c, &e) == MOE8_OK);
    CHECK(c.arch == MOE8_ARCH_QWEN2_MOE && c.hidden_size == 256 && c.num_experts == 16);
    CHECK(cfg_i(&c, "shared_expert_intermediate_size") == 256 && cfg_i(&c, "qkv_bias") &&
          !c.norm_topk_prob);
    CHECK(c.head_dim == 32 && c.bos_token_id == 151643 && c.eos_token_ids[0] == 151645);
    p.preset = MOE8_PRESET_A3B_SLICE;
    CHECK(moe8_make_model_config(&p, &c, &e) == MOE8_ERR_INVALID_ARG &&
          strstr(e.message, "qwen2_moe has only the tiny preset"));
    p = moe8_make_model_params_default();
    p.arch = MOE8_ARCH_MIXTRAL;
    CHECK(moe8_make_model_config(&p, &c, &e) == MOE8_OK);
    CHECK(c.arch == MOE8_ARCH_MIXTRAL && c.vocab_size == 32000 && c.num_experts == 8);
    CHECK(c.num_experts_per_tok == 2 && c.moe_intermediate_size == 256 && c.rms_norm_eps == 1e-5);
    CHECK(c.norm_topk_prob && c.n_mlp_only_layers == 0 && c.bos_token_id == 1 && c.eos_token_ids[0] == 2);
    for (int l = 0; l < 4; l++) CHECK(moe8_config_is_moe_layer(&c, l));
    p.arch = MOE8_ARCH_COUNT;
    CHECK(moe8_make_model_config(&p, &c, &e) == MOE8_ERR_INVALID_ARG);
}

/* ======================================================================== */
/* inspect                                                                   */
/* ======================================================================== */

static void test_inspect(void) {
    char cmd[8400], out[16384];
    fx_opts o = family_opts(1, 1);
    const char *dir = write_fixture("inspect_qwen2", &o);
    FMT(cmd, "'%s' inspect -m '%s' 2>&1", MOE8_CLI, dir);
    CHECK(run(cmd, out, sizeof out) == 0);
    static const char *const want[] = {
        "architecture: qwen2_moe (Qwen2MoeForCausalLM)",
        "attention: no q/k norm, q/k/v bias",
        "routing: softmax top-2 of 4, renormalized (norm_topk_prob)",
        "shared expert: intermediate 48, sigmoid gate",
        "layer 0: attn W8A8, experts W8A8_DYNAMIC, shared expert W8A8_DYNAMIC, router FLOAT",
        "layer 1: attn W8A8, mlp W8A8",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        CHECKF(strstr(out, want[i]) != NULL, "inspect lacks '%s':\n%s", want[i], out);
    o = family_opts(2, 1);
    dir = write_fixture("inspect_mixtral", &o);
    FMT(cmd, "'%s' inspect -m '%s' 2>&1", MOE8_CLI, dir);
    CHECK(run(cmd, out, sizeof out) == 0);
    static const char *const want_mx[] = {
        "architecture: mixtral (MixtralForCausalLM)",
        "attention: no q/k norm, no biases",
        "routing: softmax top-2 of 4, always renormalized",
        "dense mlp: none (every layer is MoE)",
        "layers 0-2: attn W8A8, experts W8A8_DYNAMIC, router FLOAT",
    };
    for (size_t i = 0; i < sizeof want_mx / sizeof want_mx[0]; i++)
        CHECKF(strstr(out, want_mx[i]) != NULL, "inspect lacks '%s':\n%s", want_mx[i], out);
    CHECK(strstr(out, "shared expert") == NULL);
}

/* The MoE layer API: down_float only beside int8 gate/up. */
static void test_layer_desc(void) {
    float w[4 * 8] = {0};
    moe8_moe_expert ex[2];
    moe8_moe_layer_desc d = moe8_moe_layer_desc_default();
    moe8_moe_layer *L = NULL;
    moe8_error e;
    memset(ex, 0, sizeof ex);
    for (int i = 0; i < 2; i++)
        ex[i].gate = ex[i].up = ex[i].down = (moe8_moe_weight){w, MOE8_DT_F32, NULL, MOE8_DT_F32,
                                                               NULL, MOE8_DT_F32, NULL, MOE8_DT_F32};
    d.name = "mixed";
    d.n_expert = 2, d.hidden = 8, d.intermediate = 4, d.experts = ex;
    d.router_params.top_k = 1;
    d.quant = MOE8_QUANT_FLOAT;
    d.down_float = 1;
    CHECK(moe8_moe_layer_create(&d, &L, &e) == MOE8_ERR_INVALID_ARG && !L &&
          strstr(e.message, "down_float needs W8A8_DYNAMIC gate/up experts"));
    d.quant = MOE8_QUANT_W8A8_DYNAMIC;  /* float gate data: refused as the int8 weight it is not */
    CHECK(moe8_moe_layer_create(&d, &L, &e) == MOE8_ERR_INVALID_ARG && !L &&
          strstr(e.message, "expert 0 gate_proj: expected int8 (I8) weight data, got F32"));
}

/* `moe8 quantize --down-proj`: a bad value is a usage error; float through
 * the CLI gives the mixed layout (inspect says so). */
static void test_cli_down_proj(void) {
    char cmd[9000], out[16384], q[4096];
    fx_opts o = family_opts(2, 0);
    const char *dir = fx_test_model("cli_down_mixtral", &o, 1);
    FMT(q, "%s", test_tmpdir("cli_down_mixtral_q"));
    FMT(cmd, "'%s' quantize -i '%s' -o '%s' --down-proj int4 2>&1", MOE8_CLI, dir, q);
    CHECK(run(cmd, out, sizeof out) == 2 && strstr(out, "--down-proj wants one of w8a8|float, got 'int4'"));
    FMT(cmd, "'%s' quantize -i '%s' -o '%s' --down-proj float --linear float --force 2>&1 && "
        "'%s' inspect -m '%s' 2>&1", MOE8_CLI, dir, q, MOE8_CLI, q);
    CHECKF(run(cmd, out, sizeof out) == 0 &&
           strstr(out, "layers 0-2: attn FLOAT, experts W8A8_DYNAMIC (down_proj FLOAT), router FLOAT"),
           "%s", out);
}

int main(void) {
    test_table_or_skip(); /* MOE8_ISA: a table this CPU lacks is skipped */
    test_config_qwen2();
    test_config_errors();
    test_presets();
    test_forward(MOE8_ARCH_QWEN2_MOE);
    test_defects(MOE8_ARCH_QWEN2_MOE);
    test_make_quantize(MOE8_ARCH_QWEN2_MOE, 0);
    test_make_quantize(MOE8_ARCH_QWEN2_MOE, 1);
    test_config_mixtral();
    test_forward(MOE8_ARCH_MIXTRAL);
    test_defects(MOE8_ARCH_MIXTRAL);
    test_make_quantize(MOE8_ARCH_MIXTRAL, 0);
    test_down_float(MOE8_ARCH_QWEN3_MOE);
    test_defects(MOE8_ARCH_QWEN3_MOE);
    test_inspect();
    test_layer_desc();
    test_cli_down_proj();
    return test_summary();
}
