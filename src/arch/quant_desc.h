/*
 * quant_desc.h — internal: ModelSlim quant_model_description.json (SEMANTICS §6)
 * and the per-layer quant types resolved from it, plus the eos_token_id
 * reader shared by config.json and generation_config.json.
 *
 * Resolution needs only the set of tensor names of the checkpoint (a
 * callback), so it is testable and fuzzable without safetensors files.
 */
#ifndef MOE8_QUANT_DESC_H
#define MOE8_QUANT_DESC_H

/* cJSON stays out of the files that include this one: the readers take it by name */
struct cJSON;

#include "core/public.h"

/* Size caps of the JSON files of a model folder. */
#define MOE8_CONFIG_MAX_BYTES ((size_t)1 << 20)
#define MOE8_QUANT_DESC_MAX_BYTES ((size_t)256 << 20)

typedef struct moe8_quant_desc moe8_quant_desc;

/* Parse the description: a flat JSON object. Refuses a non-null
 * fa_quant_type or kv_cache_type (MOE8_ERR_UNSUPPORTED). Values are checked
 * later, by moe8_quant_desc_resolve, once it is known which keys name tensors. */
moe8_status moe8_quant_desc_parse(const char *json, size_t len, const char *label,
                                  moe8_quant_desc **out, moe8_error *err);
void moe8_quant_desc_free(moe8_quant_desc *qd);
/* The type recorded for `name`: 0 and *out set; -1 if absent or not one of
 * FLOAT / W8A8 / W8A8_DYNAMIC. */
int moe8_quant_desc_get(const moe8_quant_desc *qd, const char *name, moe8_quant_type *out);

/* 1 if the checkpoint holds a tensor of that name. */
typedef int (*moe8_tensor_exists_fn)(void *user, const char *name);

/* Fill layers[cfg->num_hidden_layers] (SEMANTICS §6 lookup rules). `qd` NULL means
 * no description file: every layer FLOAT. Every key naming a tensor must hold
 * FLOAT, W8A8 or W8A8_DYNAMIC; required `.weight` keys must be present;
 * packed shards (q/k/v, gate/up, experts.0 gate/up/down) must agree; linears
 * are FLOAT or W8A8, experts FLOAT or W8A8_DYNAMIC; embeddings, norms and
 * router FLOAT; lm_head FLOAT or W8A8_DYNAMIC. */
moe8_status moe8_quant_desc_resolve(const moe8_quant_desc *qd, const moe8_config *cfg,
                                    moe8_tensor_exists_fn exists, void *user,
                                    moe8_layer_info *layers, moe8_error *err);
/* The type of lm_head.weight: FLOAT without a description, without such a
 * tensor or without its key; else its key's value (FLOAT or W8A8_DYNAMIC
 * once moe8_quant_desc_resolve has accepted the description). */
moe8_quant_type moe8_quant_desc_lm_head(const moe8_quant_desc *qd, moe8_tensor_exists_fn exists,
                                        void *user);

/* Add the eos_token_id of `root` (absent/null, an int, or a list of ints, each
 * in [0, vocab)) to ids[*n], skipping duplicates; at most MOE8_MAX_STOP_IDS.
 * Defined in config.c. */
moe8_status moe8_config_read_eos(const struct cJSON *root, const char *label, int64_t vocab,
                                 int64_t *ids, int *n, moe8_error *err);

#endif
