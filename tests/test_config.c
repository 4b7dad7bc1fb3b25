/*
 * test_config.c — config.json parsing (SEMANTICS §7): Hugging Face defaults, a real
 * Qwen3-30B-A3B config, every validation error with its message, eos lists,
 * mlp_only_layers and the MoE-layer rule.
 */
#include "test.h"

#include "moe8.h"

static moe8_status parse(const char *json, moe8_config *c, moe8_error *e) {
    memset(e, 0, sizeof *e);
    return moe8_config_parse(json, strlen(json), "config.json", c, e);
}

static void test_defaults(void) {
    moe8_config c;
    moe8_error e;
    CHECK(parse("{\"model_type\": \"qwen3_moe\"}", &c, &e) == MOE8_OK);
    /* transformers 4.51 Qwen3MoeConfig.__init__ defaults */
    CHECK(!strcmp(c.model_type, "qwen3_moe"));
    CHECK(c.vocab_size == 151936);
    CHECK(c.hidden_size == 2048);
    CHECK(c.intermediate_size == 6144);
    CHECK(c.moe_intermediate_size == 768);
    CHECK(c.num_hidden_layers == 24);
    CHECK(c.num_attention_heads == 32);
    CHECK(c.num_key_value_heads == 4);
    CHECK(c.head_dim == 2048 / 32);
    CHECK(c.num_experts == 128);
    CHECK(c.num_experts_per_tok == 8);
    CHECK(c.norm_topk_prob == 0);
    CHECK(c.decoder_sparse_step == 1);
    CHECK(c.max_position_embeddings == 32768);
    CHECK(c.rms_norm_eps == 1e-6);
    CHECK(c.rope_theta == 10000.0);
    CHECK(c.tie_word_embeddings == 0);
    CHECK(c.bos_token_id == -1);
    CHECK(c.n_eos_ids == 0);
    CHECK(c.n_mlp_only_layers == 0);
    /* nulls mean "default" too */
    CHECK(parse("{\"model_type\":\"qwen3_moe\",\"head_dim\":null,\"rope_scaling\":null,"
                "\"mlp_only_layers\":null,\"eos_token_id\":null,\"hidden_size\":512}",
                &c, &e) == MOE8_OK);
    CHECK(c.head_dim == 16 && c.hidden_size == 512);
}

static const char *qwen3_30b =
    "{\"architectures\": [\"Qwen3MoeForCausalLM\"], \"attention_bias\": false,"
    " \"attention_dropout\": 0.0, \"bos_token_id\": 151643, \"decoder_sparse_step\": 1,"
    " \"eos_token_id\": 151645, \"head_dim\": 128, \"hidden_act\": \"silu\","
    " \"hidden_size\": 2048, \"initializer_range\": 0.02, \"intermediate_size\": 6144,"
    " \"max_position_embeddings\": 40960, \"max_window_layers\": 48, \"mlp_only_layers\": [],"
    " \"model_type\": \"qwen3_moe\", \"moe_intermediate_size\": 768, \"norm_topk_prob\": true,"
    " \"num_attention_heads\": 32, \"num_experts\": 128, \"num_experts_per_tok\": 8,"
    " \"num_hidden_layers\": 48, \"num_key_value_heads\": 4, \"output_router_logits\": false,"
    " \"rms_norm_eps\": 1e-06, \"rope_scaling\": null, \"rope_theta\": 1000000.0,"
    " \"router_aux_loss_coef\": 0.001, \"sliding_window\": null, \"tie_word_embeddings\": false,"
    " \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.51.0\", \"use_cache\": true,"
    " \"use_sliding_window\": false, \"vocab_size\": 151936}";

static void test_qwen3_30b(void) {
    moe8_config c;
    moe8_error e;
    CHECK(parse(qwen3_30b, &c, &e) == MOE8_OK);
    CHECK(c.hidden_size == 2048 && c.num_hidden_layers == 48);
    CHECK(c.num_attention_heads == 32 && c.num_key_value_heads == 4 && c.head_dim == 128);
    CHECK(c.num_experts == 128 && c.num_experts_per_tok == 8 && c.moe_intermediate_size == 768);
    CHECK(c.norm_topk_prob == 1);
    CHECK(c.max_position_embeddings == 40960);
    CHECK(c.rope_theta == 1e6 && c.rms_norm_eps == 1e-6);
    CHECK(c.bos_token_id == 151643);
    CHECK(c.n_eos_ids == 1 && c.eos_token_ids[0] == 151645);
    for (int l = 0; l < 48; l++) CHECK(moe8_config_is_moe_layer(&c, l) == 1);
    CHECK(moe8_config_is_moe_layer(&c, 48) == 0);
    CHECK(moe8_config_is_moe_layer(&c, -1) == 0);
}

static void test_lists_and_moe_rule(void) {
    moe8_config c;
    moe8_error e;
    CHECK(parse("{\"model_type\":\"qwen3_moe\",\"num_hidden_layers\":6,\"decoder_sparse_step\":2,"
                "\"mlp_only_layers\":[3,3,5],\"eos_token_id\":[151645, 151643, 151645]}",
                &c, &e) == MOE8_OK);
    CHECK(c.n_mlp_only_layers == 2 && c.mlp_only_layers[0] == 3 && c.mlp_only_layers[1] == 5);
    CHECK(c.n_eos_ids == 2 && c.eos_token_ids[0] == 151645 && c.eos_token_ids[1] == 151643);
    /* (l+1) % 2 == 0 -> 1, 3, 5; minus mlp_only {3, 5} -> only layer 1 */
    int expect[6] = {0, 1, 0, 0, 0, 0};
    for (int l = 0; l < 6; l++) CHECKF(moe8_config_is_moe_layer(&c, l) == expect[l], "layer %d", l);
    /* num_experts 0: a dense model, no layer is MoE, top-k unconstrained */
    CHECK(parse("{\"model_type\":\"qwen3_moe\",\"num_hidden_layers\":2,\"num_experts\":0}", &c, &e) ==
          MOE8_OK);
    CHECK(moe8_config_is_moe_layer(&c, 0) == 0 && moe8_config_is_moe_layer(&c, 1) == 0);
    CHECK(parse("{\"model_type\":\"qwen3_moe\",\"eos_token_id\":[]}", &c, &e) == MOE8_OK);
    CHECK(c.n_eos_ids == 0);
}

/* One bad config per validation rule: expected status + message substring. */
static void test_errors(void) {
    static const struct {
        const char *json;
        moe8_status code;
        const char *msg;
    } cases[] = {
        {"{\"model_type\":\"llama\"}", MOE8_ERR_UNSUPPORTED, "model_type \"llama\" not supported"},
        {"{\"hidden_size\":64}", MOE8_ERR_FORMAT, "model_type missing"},
        {"{\"model_type\":7}", MOE8_ERR_FORMAT, "model_type must be a string"},
        {"[1,2]", MOE8_ERR_FORMAT, "expected a JSON object"},
        {"{\"model_type\":\"qwen3_moe\",", MOE8_ERR_FORMAT, "invalid JSON"},
        {"{\"model_type\":\"qwen3_moe\",\"num_experts\":8,\"num_experts_per_tok\":10}",
         MOE8_ERR_FORMAT, "num_experts_per_tok (10) > num_experts (8)"},
        {"{\"model_type\":\"qwen3_moe\",\"hidden_size\":0}", MOE8_ERR_FORMAT, "hidden_size (0) outside"},
        {"{\"model_type\":\"qwen3_moe\",\"vocab_size\":-5}", MOE8_ERR_FORMAT, "vocab_size (-5) outside"},
        {"{\"model_type\":\"qwen3_moe\",\"vocab_size\":1e12}", MOE8_ERR_FORMAT,
         "vocab_size (1000000000000) outside [1, 16777216]"},
        {"{\"model_type\":\"qwen3_moe\",\"hidden_size\":64.5}", MOE8_ERR_FORMAT,
         "hidden_size (64.5) is not an exact integer"},
        {"{\"model_type\":\"qwen3_moe\",\"hidden_size\":1e300}", MOE8_ERR_FORMAT,
         "hidden_size (1.0000000000000001e+300) is not an exact integer"},
        {"{\"model_type\":\"qwen3_moe\",\"hidden_size\":\"64\"}", MOE8_ERR_FORMAT,
         "hidden_size must be an integer"},
        {"{\"model_type\":\"qwen3_moe\",\"num_hidden_layers\":513}", MOE8_ERR_FORMAT,
         "num_hidden_layers (513) outside [1, 512]"},
        {"{\"model_type\":\"qwen3_moe\",\"num_attention_heads\":32,\"num_key_value_heads\":5}",
         MOE8_ERR_FORMAT, "num_attention_heads (32) is not a multiple of num_key_value_heads (5)"},
        {"{\"model_type\":\"qwen3_moe\",\"hidden_size\":16,\"num_attention_heads\":32}", MOE8_ERR_FORMAT,
         "default head_dim = hidden_size (16) / num_attention_heads (32) = 0"},
        {"{\"model_type\":\"qwen3_moe\",\"rope_scaling\":{\"type\":\"yarn\",\"factor\":4}}",
         MOE8_ERR_UNSUPPORTED, "rope_scaling not supported"},
        {"{\"model_type\":\"qwen3_moe\",\"norm_topk_prob\":1}", MOE8_ERR_FORMAT,
         "norm_topk_prob must be true or false"},
        {"{\"model_type\":\"qwen3_moe\",\"tie_word_embeddings\":\"no\"}", MOE8_ERR_FORMAT,
         "tie_word_embeddings must be true or false"},
        {"{\"model_type\":\"qwen3_moe\",\"rms_norm_eps\":0}", MOE8_ERR_FORMAT,
         "rms_norm_eps (0) must be finite and > 0"},
        {"{\"model_type\":\"qwen3_moe\",\"rope_theta\":\"1e6\"}", MOE8_ERR_FORMAT,
         "rope_theta must be a number"},
        {"{\"model_type\":\"qwen3_moe\",\"eos_token_id\":\"</s>\"}", MOE8_ERR_FORMAT,
         "eos_token_id must be an integer or a list"},
        {"{\"model_type\":\"qwen3_moe\",\"eos_token_id\":[1, 2.5]}", MOE8_ERR_FORMAT,
         "eos_token_id must be an integer token id"},
        {"{\"model_type\":\"qwen3_moe\",\"vocab_size\":100,\"eos_token_id\":100}", MOE8_ERR_FORMAT,
         "eos_token_id (100) outside [0, vocab_size 100)"},
        {"{\"model_type\":\"qwen3_moe\",\"eos_token_id\":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17]}",
         MOE8_ERR_UNSUPPORTED, "more than 16 distinct eos_token_id"},
        {"{\"model_type\":\"qwen3_moe\",\"bos_token_id\":-1}", MOE8_ERR_FORMAT,
         "bos_token_id (-1) outside"},
        {"{\"model_type\":\"qwen3_moe\",\"num_hidden_layers\":4,\"mlp_only_layers\":[1,4]}",
         MOE8_ERR_FORMAT, "mlp_only_layers entry 4 outside [0, num_hidden_layers 4)"},
        {"{\"model_type\":\"qwen3_moe\",\"mlp_only_layers\":3}", MOE8_ERR_FORMAT,
         "mlp_only_layers must be a list"},
        {"{\"model_type\":\"qwen3_moe\",\"mlp_only_layers\":[\"1\"]}", MOE8_ERR_FORMAT,
         "mlp_only_layers must hold integer"},
        {"{\"model_type\":\"qwen3_moe\",\"hidden_act\":\"gelu\"}", MOE8_ERR_UNSUPPORTED,
         "hidden_act \"gelu\" not supported"},
        {"{\"model_type\":\"qwen3_moe\",\"attention_bias\":true}", MOE8_ERR_UNSUPPORTED,
         "attention_bias true not supported"},
        {"{\"model_type\":\"qwen3_moe\",\"use_sliding_window\":true}", MOE8_ERR_UNSUPPORTED,
         "use_sliding_window true not supported"},
        {"{\"model_type\":\"qwen3_moe\",\"head_dim\":2048}", MOE8_ERR_FORMAT, "head_dim (2048) outside"},
        {"{\"model_type\":\"qwen3_moe\",\"num_attention_heads\":1024,\"head_dim\":1024,"
         "\"num_key_value_heads\":1}",
         MOE8_ERR_FORMAT, "num_attention_heads x head_dim (1024 x 1024) too large"},
        /* strict JSON: a key twice (cJSON keeps the first copy, Python the last) or
         * anything but whitespace after the value */
        {"{\"model_type\":\"qwen3_moe\",\"hidden_size\":64,\"hidden_size\":128}", MOE8_ERR_FORMAT,
         "config.json': duplicate key 'hidden_size' at the top level"},
        {"{\"model_type\":\"qwen3_moe\",\"x\":{\"a\":[0,{\"b\":1,\"c\":2,\"b\":2}]}}", MOE8_ERR_FORMAT,
         "config.json': duplicate key 'b' in x.a[1]"},
        {"{\"model_type\":\"qwen3_moe\"} x", MOE8_ERR_FORMAT,
         "config.json': unexpected bytes after the JSON value at byte 27"},
        {"{\"model_type\":\"qwen3_moe\"}{}", MOE8_ERR_FORMAT,
         "config.json': unexpected bytes after the JSON value at byte 26"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        moe8_config c;
        moe8_error e;
        moe8_status st = parse(cases[i].json, &c, &e);
        CHECKF(st == cases[i].code, "case %zu: status %d, want %d (%s)", i, st, cases[i].code,
               e.message);
        CHECKF(e.code == st, "case %zu: err.code %d", i, e.code);
        CHECKF(strstr(e.message, cases[i].msg) != NULL, "case %zu: message '%s' lacks '%s'", i,
               e.message, cases[i].msg);
        CHECKF(strstr(e.message, "config.json") != NULL, "case %zu: message '%s' names no file", i,
               e.message);
    }
}

static void test_not_nul_terminated(void) {
    /* the parser honours len: a prefix that is a complete object parses */
    const char *s = "{\"model_type\":\"qwen3_moe\",\"hidden_size\":256}GARBAGE";
    moe8_config c;
    moe8_error e;
    size_t n = strlen(s) - strlen("GARBAGE");
    CHECK(moe8_config_parse(s, n, "x.json", &c, &e) == MOE8_OK);
    CHECK(c.hidden_size == 256 && c.head_dim == 8);
    CHECK(moe8_config_parse(s, n - 1, "x.json", &c, &e) == MOE8_ERR_FORMAT);
    CHECK(moe8_config_parse(s, n, "x.json", &c, NULL) == MOE8_OK);
    /* trailing JSON whitespace is fine, a trailing NUL is not */
    const char *ws = "{\"model_type\":\"qwen3_moe\",\"hidden_size\":256} \t\r\n\n";
    CHECK(moe8_config_parse(ws, strlen(ws), "x.json", &c, &e) == MOE8_OK && c.hidden_size == 256);
    CHECK(moe8_config_parse(ws, strlen(ws) + 1, "x.json", &c, &e) == MOE8_ERR_FORMAT);
    CHECKF(strstr(e.message, "unexpected bytes after the JSON value at byte 49"), "%s", e.message);
}

int main(void) {
    test_defaults();
    test_qwen3_30b();
    test_lists_and_moe_rule();
    test_errors();
    test_not_nul_terminated();
    return test_summary();
}
