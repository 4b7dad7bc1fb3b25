/*
 * fuzz_quant_desc.c — libFuzzer target: parse a quant_model_description.json
 * from arbitrary bytes and resolve it against a fixed 2-layer model (layer 1
 * dense) whose checkpoint holds the W8A8 / W8A8_DYNAMIC tensor names.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch/quant_desc.h"

static const char *const k_names[] = {
    "model.embed_tokens.weight", "model.norm.weight", "lm_head.weight",
    "model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.k_proj.weight",
    "model.layers.0.self_attn.v_proj.weight", "model.layers.0.self_attn.o_proj.weight",
    "model.layers.0.self_attn.q_proj.input_scale", "model.layers.0.input_layernorm.weight",
    "model.layers.0.mlp.gate.weight", "model.layers.0.mlp.experts.0.gate_proj.weight",
    "model.layers.0.mlp.experts.0.up_proj.weight", "model.layers.0.mlp.experts.0.down_proj.weight",
    "model.layers.0.mlp.experts.1.down_proj.weight_scale",
    "model.layers.1.self_attn.q_proj.weight", "model.layers.1.self_attn.k_proj.weight",
    "model.layers.1.self_attn.v_proj.weight", "model.layers.1.self_attn.o_proj.weight",
    "model.layers.1.mlp.gate_proj.weight", "model.layers.1.mlp.up_proj.weight",
    "model.layers.1.mlp.down_proj.weight",
};

static int exists(void *user, const char *name) {
    (void)user;
    for (size_t i = 0; i < sizeof k_names / sizeof k_names[0]; i++)
        if (!strcmp(k_names[i], name)) return 1;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static moe8_config cfg;
    static int have_cfg;
    moe8_quant_desc *qd = NULL;
    moe8_layer_info li[2];
    moe8_error e;
    if (!have_cfg) {
        const char *c = "{\"model_type\":\"qwen3_moe\",\"hidden_size\":64,\"num_hidden_layers\":2,"
                        "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"num_experts\":4,"
                        "\"num_experts_per_tok\":2,\"mlp_only_layers\":[1],\"vocab_size\":256}";
        if (moe8_config_parse(c, strlen(c), "config.json", &cfg, NULL) != MOE8_OK) abort();
        have_cfg = 1;
    }
    if (moe8_quant_desc_parse((const char *)data, size, "fuzz", &qd, &e) != MOE8_OK) return 0;
    if (moe8_quant_desc_resolve(qd, &cfg, exists, NULL, li, &e) == MOE8_OK) {
        if (li[0].is_moe != 1 || li[1].is_moe != 0 || li[0].router != MOE8_QUANT_FLOAT ||
            li[0].experts == MOE8_QUANT_W8A8 || li[0].qkv == MOE8_QUANT_W8A8_DYNAMIC ||
            li[1].mlp_down == MOE8_QUANT_W8A8_DYNAMIC)
            abort();
    }
    moe8_quant_desc_free(qd);
    return 0;
}
