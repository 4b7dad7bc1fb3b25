/*
 * quant_desc.c — ModelSlim quant_model_description.json (SEMANTICS §6): a flat
 * JSON object mapping tensor names to "FLOAT" / "W8A8" / "W8A8_DYNAMIC", plus
 * metadata keys (model_quant_type, version, fa_quant_type, group_size, ...).
 *
 * Lookup rules (the reference's): only `<prefix>.weight` keys decide a
 * module's type; keys naming no tensor of the checkpoint are metadata; packed
 * modules of qwen3_moe (qkv_proj, gate_up_proj, experts via expert 0) must
 * agree across shards. lm_head.weight (no key: FLOAT) may also be
 * W8A8_DYNAMIC, a moe8 extension (`moe8 quantize --lm-head w8a8`); ModelSlim
 * writes it FLOAT. Tensor names are Qwen3-MoE's:
 *   model.layers.N.self_attn.{q,k,v,o}_proj.weight
 *   model.layers.N.mlp.gate.weight                       (router)
 *   model.layers.N.mlp.{gate,up,down}_proj.weight         (dense layers)
 *   model.layers.N.mlp.experts.0.{gate,up,down}_proj.weight (MoE layers)
 * It does not look at tensor data; model.c checks dtypes and shapes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/json_util.h"
#include "io/quant_desc.h"

struct moe8_quant_desc {
    cJSON *root;      /* the JSON object */
    char label[256];  /* file name for errors */
};

const char *moe8_quant_type_name(moe8_quant_type q) {
    switch (q) {
    case MOE8_QUANT_FLOAT: return "FLOAT";
    case MOE8_QUANT_W8A8: return "W8A8";
    case MOE8_QUANT_W8A8_DYNAMIC: return "W8A8_DYNAMIC";
    }
    return "?";
}

static int parse_type(const char *s, moe8_quant_type *out) {
    static const moe8_quant_type all[] = {MOE8_QUANT_FLOAT, MOE8_QUANT_W8A8, MOE8_QUANT_W8A8_DYNAMIC};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (!strcmp(s, moe8_quant_type_name(all[i]))) {
            *out = all[i];
            return 0;
        }
    return -1;
}

moe8_status moe8_quant_desc_parse(const char *json, size_t len, const char *label,
                                  moe8_quant_desc **out, moe8_error *err) {
    static const char *refused[] = {"fa_quant_type", "kv_cache_type"};
    moe8_quant_desc *qd;
    cJSON *root = NULL;
    moe8_status st;
    *out = NULL;
    if (!label) label = "quant_model_description.json";
    if ((st = moe8_json_parse(json, len, label, &root, err)) != MOE8_OK) return st;
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': expected a JSON object", label);
    }
    for (size_t i = 0; i < 2; i++) {
        const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, refused[i]);
        if (it && !cJSON_IsNull(it)) {
            moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1,
                      "'%s': %s %.64s not supported (quantized attention/KV cache)", label,
                      refused[i], cJSON_IsString(it) ? it->valuestring : "(non-null)");
            cJSON_Delete(root);
            return MOE8_ERR_UNSUPPORTED;
        }
    }
    if (!(qd = calloc(1, sizeof *qd))) {
        cJSON_Delete(root);
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "'%s': out of memory", label);
    }
    qd->root = root;
    snprintf(qd->label, sizeof qd->label, "%s", label);
    *out = qd;
    return MOE8_OK;
}

void moe8_quant_desc_free(moe8_quant_desc *qd) {
    if (!qd) return;
    cJSON_Delete(qd->root);
    free(qd);
}

int moe8_quant_desc_get(const moe8_quant_desc *qd, const char *name, moe8_quant_type *out) {
    const cJSON *it = qd ? cJSON_GetObjectItemCaseSensitive(qd->root, name) : NULL;
    if (!it || !cJSON_IsString(it)) return -1;
    return parse_type(it->valuestring, out);
}

/* ------------------------------------------------------------------------ */
/* Values of keys that name tensors                                          */
/* ------------------------------------------------------------------------ */

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !memcmp(s + n - m, suffix, m);
}

#define LM_HEAD "lm_head.weight"

/* Tensors that are float whatever the description says (SEMANTICS §6). */
static int float_only(const char *name) {
    return ends_with(name, "norm.weight") || ends_with(name, ".mlp.gate.weight") ||
           !strcmp(name, "model.embed_tokens.weight");
}

static moe8_status check_values(const moe8_quant_desc *qd, moe8_tensor_exists_fn exists,
                                void *user, moe8_error *err) {
    const cJSON *it;
    cJSON_ArrayForEach(it, qd->root) {
        moe8_quant_type q;
        if (!it->string || !exists(user, it->string)) continue; /* metadata */
        if (!cJSON_IsString(it))
            return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': tensor '%s': quant type must be a string",
                             qd->label, it->string);
        if (parse_type(it->valuestring, &q) != 0)
            return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1,
                             "'%s': tensor '%s': quant type \"%.64s\" not supported (expected FLOAT, "
                             "W8A8 or W8A8_DYNAMIC)",
                             qd->label, it->string, it->valuestring);
        if (float_only(it->string) && q != MOE8_QUANT_FLOAT)
            return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1,
                             "'%s': tensor '%s': quant type %s not supported (must be FLOAT)",
                             qd->label, it->string, moe8_quant_type_name(q));
        if (!strcmp(it->string, LM_HEAD) && q == MOE8_QUANT_W8A8)
            return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1,
                             "'%s': tensor '%s': quant type W8A8 not supported (expected FLOAT "
                             "or W8A8_DYNAMIC)", qd->label, it->string);
    }
    return MOE8_OK;
}

/* ------------------------------------------------------------------------ */
/* Required keys and packed modules                                          */
/* ------------------------------------------------------------------------ */

/* Type of the required key "model.layers.<layer>.<module>.weight". */
static moe8_status required(const moe8_quant_desc *qd, int64_t layer, const char *module,
                            moe8_quant_type *out, moe8_error *err) {
    char name[160];
    const cJSON *it;
    snprintf(name, sizeof name, "model.layers.%lld.%s.weight", (long long)layer, module);
    it = cJSON_GetObjectItemCaseSensitive(qd->root, name);
    if (!it)
        return moe8_fail(err, MOE8_ERR_NOT_FOUND, -1, "'%s': required key '%s' missing", qd->label,
                         name);
    if (!cJSON_IsString(it) || parse_type(it->valuestring, out) != 0)
        return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1,
                         "'%s': tensor '%s': quant type %s%.64s%s not supported (expected FLOAT, "
                         "W8A8 or W8A8_DYNAMIC)",
                         qd->label, name, cJSON_IsString(it) ? "\"" : "",
                         cJSON_IsString(it) ? it->valuestring : "(not a string)",
                         cJSON_IsString(it) ? "\"" : "");
    return MOE8_OK;
}

/* Resolve the n shards of one packed module to one type. */
static moe8_status packed(const moe8_quant_desc *qd, int64_t layer, const char *packed_name,
                          const char *const *shards, int n, moe8_quant_type *out, moe8_error *err) {
    moe8_quant_type q[3];
    moe8_status st;
    for (int i = 0; i < n; i++)
        if ((st = required(qd, layer, shards[i], &q[i], err)) != MOE8_OK) return st;
    for (int i = 1; i < n; i++)
        if (q[i] != q[0])
            return moe8_fail(err, MOE8_ERR_FORMAT, -1,
                             "'%s': layer %lld: shards of packed %s disagree: %s is %s, %s is %s",
                             qd->label, (long long)layer, packed_name, shards[0],
                             moe8_quant_type_name(q[0]), shards[i], moe8_quant_type_name(q[i]));
    *out = q[0];
    return MOE8_OK;
}

/* A linear layer (FLOAT or W8A8 only). */
static moe8_status linear_ok(const moe8_quant_desc *qd, int64_t layer, const char *module,
                             moe8_quant_type q, moe8_error *err) {
    if (q == MOE8_QUANT_W8A8_DYNAMIC)
        return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1,
                         "'%s': layer %lld: %s is W8A8_DYNAMIC, not supported on linear layers "
                         "(expected FLOAT or W8A8)",
                         qd->label, (long long)layer, module);
    return MOE8_OK;
}

static moe8_status resolve_attention(const moe8_quant_desc *qd, int64_t l, moe8_layer_info *li,
                                     moe8_error *err) {
    static const char *const qkv[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"};
    moe8_status st;
    if ((st = packed(qd, l, "qkv_proj", qkv, 3, &li->qkv, err)) != MOE8_OK) return st;
    if ((st = linear_ok(qd, l, "qkv_proj", li->qkv, err)) != MOE8_OK) return st;
    if ((st = required(qd, l, "self_attn.o_proj", &li->o, err)) != MOE8_OK) return st;
    return linear_ok(qd, l, "self_attn.o_proj", li->o, err);
}

static moe8_status resolve_moe(const moe8_quant_desc *qd, int64_t l, moe8_layer_info *li,
                               moe8_error *err) {
    static const char *const ex[] = {"mlp.experts.0.gate_proj", "mlp.experts.0.up_proj",
                                     "mlp.experts.0.down_proj"};
    moe8_status st;
    if ((st = required(qd, l, "mlp.gate", &li->router, err)) != MOE8_OK) return st;
    if (li->router != MOE8_QUANT_FLOAT)
        return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1,
                         "'%s': layer %lld: router mlp.gate is %s, only FLOAT is supported",
                         qd->label, (long long)l, moe8_quant_type_name(li->router));
    if ((st = packed(qd, l, "experts", ex, 3, &li->experts, err)) != MOE8_OK) return st;
    if (li->experts == MOE8_QUANT_W8A8)
        return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1,
                         "'%s': layer %lld: experts are W8A8, not supported on experts (expected "
                         "FLOAT or W8A8_DYNAMIC)",
                         qd->label, (long long)l);
    return MOE8_OK;
}

static moe8_status resolve_dense(const moe8_quant_desc *qd, int64_t l, moe8_layer_info *li,
                                 moe8_error *err) {
    static const char *const gu[] = {"mlp.gate_proj", "mlp.up_proj"};
    moe8_status st;
    if ((st = packed(qd, l, "gate_up_proj", gu, 2, &li->mlp_gate_up, err)) != MOE8_OK) return st;
    if ((st = linear_ok(qd, l, "gate_up_proj", li->mlp_gate_up, err)) != MOE8_OK) return st;
    if ((st = required(qd, l, "mlp.down_proj", &li->mlp_down, err)) != MOE8_OK) return st;
    return linear_ok(qd, l, "mlp.down_proj", li->mlp_down, err);
}

moe8_quant_type moe8_quant_desc_lm_head(const moe8_quant_desc *qd, moe8_tensor_exists_fn exists,
                                        void *user) {
    moe8_quant_type q = MOE8_QUANT_FLOAT;
    if (!qd || !exists(user, LM_HEAD) || moe8_quant_desc_get(qd, LM_HEAD, &q) != 0)
        return MOE8_QUANT_FLOAT;
    return q;
}

moe8_status moe8_quant_desc_resolve(const moe8_quant_desc *qd, const moe8_config *cfg,
                                    moe8_tensor_exists_fn exists, void *user,
                                    moe8_layer_info *layers, moe8_error *err) {
    moe8_status st;
    for (int64_t l = 0; l < cfg->num_hidden_layers; l++) {
        memset(&layers[l], 0, sizeof layers[l]); /* every field FLOAT */
        layers[l].is_moe = moe8_config_is_moe_layer(cfg, l);
    }
    if (!qd) return MOE8_OK;
    if ((st = check_values(qd, exists, user, err)) != MOE8_OK) return st;
    for (int64_t l = 0; l < cfg->num_hidden_layers; l++) {
        moe8_layer_info *li = &layers[l];
        if ((st = resolve_attention(qd, l, li, err)) != MOE8_OK) return st;
        st = li->is_moe ? resolve_moe(qd, l, li, err) : resolve_dense(qd, l, li, err);
        if (st != MOE8_OK) return st;
    }
    return MOE8_OK;
}
