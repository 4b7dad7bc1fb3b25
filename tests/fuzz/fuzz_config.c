/*
 * fuzz_config.c — libFuzzer target: moe8_config_parse on arbitrary bytes.
 * A successful parse must leave a config every later stage can trust.
 */
#include <stdint.h>
#include <stdlib.h>

#include "moe8.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    moe8_config c;
    moe8_error e;
    if (moe8_config_parse((const char *)data, size, "fuzz", &c, &e) != MOE8_OK) return 0;
    if (c.hidden_size < 1 || c.num_hidden_layers < 1 || c.num_hidden_layers > MOE8_MAX_LAYERS ||
        c.head_dim < 1 || c.num_attention_heads % c.num_key_value_heads != 0 ||
        c.n_eos_ids > MOE8_MAX_STOP_IDS || c.n_mlp_only_layers > c.num_hidden_layers ||
        (c.num_experts > 0 && c.num_experts_per_tok > c.num_experts))
        abort();
    for (int i = 0; i < c.n_mlp_only_layers; i++)
        if (c.mlp_only_layers[i] < 0 || c.mlp_only_layers[i] >= c.num_hidden_layers) abort();
    for (int64_t l = 0; l < c.num_hidden_layers; l++) (void)moe8_config_is_moe_layer(&c, l);
    return 0;
}
