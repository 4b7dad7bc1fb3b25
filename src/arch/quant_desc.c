/*
 * quant_desc.c — ModelSlim quant_model_description.json (SEMANTICS §6): a flat
 * JSON object mapping tensor names to "FLOAT" / "W8A8" / "W8A8_DYNAMIC" /
 * "W4A8_DYNAMIC" (routed experts, and linears: moe8's `quantize --linear
 * w4a8`; per channel: group_size 0), plus
 * metadata keys (model_quant_type, version, fa_quant_type, group_size, ...).
 *
 * Lookup rules (the reference's): only `<module>.weight` keys decide a
 * module's type; keys naming no tensor of the checkpoint are metadata; packed
 * modules (qkv_proj, gate_up_proj, the experts' gate/up via expert 0, the
 * shared expert's gate/up) must agree across shards. Module names come from
 * the family's descriptor (src/arch): Qwen3-MoE's are
 *   model.layers.N.self_attn.{q,k,v,o}_proj.weight
 *   model.layers.N.mlp.gate.weight                       (router)
 *   model.layers.N.mlp.{gate,up,down}_proj.weight         (dense layers)
 *   model.layers.N.mlp.experts.0.{gate,up,down}_proj.weight (MoE layers)
 * An expert's down_proj may be FLOAT beside W8A8_DYNAMIC gate/up (quantize
 * --down-proj float). lm_head.weight (no key: FLOAT) may also be
 * W8A8_DYNAMIC, a moe8 extension (`moe8 quantize --lm-head w8a8`); ModelSlim
 * writes it FLOAT. It does not look at tensor data; model.c checks dtypes and
 * shapes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch/arch.h"
#include "io/json_util.h"
#include "arch/quant_desc.h"

struct moe8_quant_desc {
    cJSON *root;      /* the JSON object */
    char label[256];  /* file name for errors */
};

const char *moe8_quant_type_name(moe8_quant_type q) {
    switch (q) {
    case MOE8_QUANT_FLOAT: return "FLOAT";
    case MOE8_QUANT_W8A8: return "W8A8";
    case MOE8_QUANT_W8A8_DYNAMIC: return "W8A8_DYNAMIC";
    case MOE8_QUANT_W4A8_DYNAMIC: return "W4A8_DYNAMIC";
    }
    return "?";
}

static int parse_type(const char *s, moe8_quant_type *out) {
    static const moe8_quant_type all[] = {MOE8_QUANT_FLOAT, MOE8_QUANT_W8A8, MOE8_QUANT_W8A8_DYNAMIC,
                                          MOE8_QUANT_W4A8_DYNAMIC};
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

#define LM_HEAD "lm_head.weight"   /* the output projection of every family (src/arch) */

/* Tensors that are float whatever the description says (SEMANTICS §6): the
 * family's norms, embedding, router and shared-expert gate, and any other
 * tensor of those modules (DeepSeek-V3's mlp.gate.e_score_correction_bias),
 * and a correction bias the family names elsewhere (MiniMax-M2's on the
 * MoE block: the descriptor's router_bias). */
static int float_only(const moe8_arch_desc *a, const char *name) {
    moe8_role r;
    int64_t l, e;
    const char *suffix;
    if (a->router_bias) {
        char f[200], canon[200];
        long long li = -1;
        int end = -1;
        if (snprintf(f, sizeof f, "%s%%n", a->router_bias) < (int)sizeof f &&
            sscanf(name, f, &li, &end) == 1 && end > 0 && !name[end] &&
            !moe8_arch_router_bias_name(a, li, canon, sizeof canon) && !strcmp(canon, name))
            return 1;
    }
    if (moe8_arch_parse(a, name, &r, &l, &e, &suffix) != 0) return 0;
    return moe8_role_of(r)->kind == MOE8_KIND_NORM || moe8_role_of(r)->kind == MOE8_KIND_FLOAT;
}

static moe8_status check_values(const moe8_quant_desc *qd, const moe8_arch_desc *a,
                                moe8_tensor_exists_fn exists, void *user, moe8_error *err) {
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
                             "W8A8, W8A8_DYNAMIC or W4A8_DYNAMIC)",
                             qd->label, it->string, it->valuestring);
        if (float_only(a, it->string) && q != MOE8_QUANT_FLOAT)
            return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1,
                             "'%s': tensor '%s': quant type %s not supported (must be FLOAT)",
                             qd->label, it->string, moe8_quant_type_name(q));
        if (!strcmp(it->string, LM_HEAD) && (q == MOE8_QUANT_W8A8 || q == MOE8_QUANT_W4A8_DYNAMIC))
            return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1,
                             "'%s': tensor '%s': quant type %s not supported (expected FLOAT "
                             "or W8A8_DYNAMIC)", qd->label, it->string, moe8_quant_type_name(q));
    }
    return MOE8_OK;
}

/* ------------------------------------------------------------------------ */
/* Required keys and packed modules                                          */
/* ------------------------------------------------------------------------ */

/* Where the required keys of one layer are looked up: the description, the
 * family's names, the layer (expert roles: expert 0, which decides). */
typedef struct {
    const moe8_quant_desc *qd;
    const moe8_arch_desc *a;
    int64_t layer;
} lookup;

/* "model.layers.3.self_attn.q_proj" -> "self_attn.q_proj" (the name inside the layer). */
static const char *short_name(const char *full, int64_t layer) {
    char pre[64];
    int n = snprintf(pre, sizeof pre, "model.layers.%lld.", (long long)layer);
    return n > 0 && !strncmp(full, pre, (size_t)n) ? full + n : full;
}

/* Type of the required key "<module of role r>.weight"; `module` gets the
 * module's short name (for messages). */
static moe8_status required(const lookup *k, moe8_role r, char *module, size_t cap,
                            moe8_quant_type *out, moe8_error *err) {
    char name[200];
    const cJSON *it;
    if (moe8_arch_tensor_name(k->a, r, k->layer, 0, "weight", name, sizeof name))
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "'%s': no name for %s",
                         k->qd->label, moe8_role_of(r)->what);
    snprintf(module, cap, "%.*s", (int)(strlen(short_name(name, k->layer)) - strlen(".weight")),
             short_name(name, k->layer));
    it = cJSON_GetObjectItemCaseSensitive(k->qd->root, name);
    if (!it)
        return moe8_fail(err, MOE8_ERR_NOT_FOUND, -1, "'%s': required key '%s' missing",
                         k->qd->label, name);
    if (!cJSON_IsString(it) || parse_type(it->valuestring, out) != 0)
        return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1,
                         "'%s': tensor '%s': quant type %s%.64s%s not supported (expected FLOAT, "
                         "W8A8, W8A8_DYNAMIC or W4A8_DYNAMIC)",
                         k->qd->label, name, cJSON_IsString(it) ? "\"" : "",
                         cJSON_IsString(it) ? it->valuestring : "(not a string)",
                         cJSON_IsString(it) ? "\"" : "");
    return MOE8_OK;
}

/* Resolve the n shards of one packed module to one type. */
static moe8_status packed(const lookup *k, const char *packed_name, const moe8_role *shards,
                          int n, moe8_quant_type *out, moe8_error *err) {
    moe8_quant_type q[3];
    char mod[3][160];
    moe8_status st;
    for (int i = 0; i < n; i++)
        if ((st = required(k, shards[i], mod[i], sizeof mod[i], &q[i], err)) != MOE8_OK) return st;
    for (int i = 1; i < n; i++)
        if (q[i] != q[0])
            return moe8_fail(err, MOE8_ERR_FORMAT, -1,
                             "'%s': layer %lld: shards of packed %s disagree: %s is %s, %s is %s",
                             k->qd->label, (long long)k->layer, packed_name, mod[0],
                             moe8_quant_type_name(q[0]), mod[i], moe8_quant_type_name(q[i]));
    *out = q[0];
    return MOE8_OK;
}

/* A linear layer: FLOAT, W8A8, or W4A8_DYNAMIC (moe8's own `quantize --linear
 * w4a8`, SEMANTICS §5b); kv_b_proj, absorbed into MLA's attention, FLOAT or W8A8. */
static moe8_status linear_kind_ok(const lookup *k, const char *module, moe8_quant_type q,
                                  int w4_ok, moe8_error *err) {
    if (q == MOE8_QUANT_W8A8_DYNAMIC || (q == MOE8_QUANT_W4A8_DYNAMIC && !w4_ok))
        return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1,
                         "'%s': layer %lld: %s is %s, not supported on %s (expected FLOAT%s "
                         "or W8A8)", k->qd->label, (long long)k->layer, module,
                         moe8_quant_type_name(q), w4_ok ? "linear layers" : "kv_b_proj",
                         w4_ok ? ", W4A8_DYNAMIC" : "");
    return MOE8_OK;
}

static moe8_status linear_ok(const lookup *k, const char *module, moe8_quant_type q,
                             moe8_error *err) {
    return linear_kind_ok(k, module, q, 1, err);
}

/* Multi-head latent attention: q_proj or q_a_proj and kv_a_proj_with_mqa
 * read the layer input (vLLM packs them as fused_qkv_a_proj) and agree;
 * q_b_proj and kv_b_proj each FLOAT or W8A8. */
static moe8_status resolve_mla(const lookup *k, const moe8_config *c, moe8_layer_info *li,
                               moe8_error *err) {
    const moe8_family_cfg *fc = MOE8_FAM(c);
    const moe8_role qa[] = {fc->q_lora_rank > 0 ? MOE8_R_Q_A : MOE8_R_Q, MOE8_R_KV_A};
    char mod[160];
    moe8_status st;
    if ((st = packed(k, "fused_qkv_a_proj", qa, 2, &li->qkv, err)) != MOE8_OK ||
        (st = linear_ok(k, "fused_qkv_a_proj", li->qkv, err)) != MOE8_OK)
        return st;
    if (fc->q_lora_rank > 0 &&
        ((st = required(k, MOE8_R_Q_B, mod, sizeof mod, &li->q_b, err)) != MOE8_OK ||
         (st = linear_ok(k, mod, li->q_b, err)) != MOE8_OK))
        return st;
    if ((st = required(k, MOE8_R_KV_B, mod, sizeof mod, &li->kv_b, err)) != MOE8_OK ||
        (st = linear_kind_ok(k, mod, li->kv_b, 0, err)) != MOE8_OK)
        return st;
    if ((st = required(k, MOE8_R_O, mod, sizeof mod, &li->o, err)) != MOE8_OK) return st;
    return linear_ok(k, mod, li->o, err);
}

/* A Gated DeltaNet layer: in_proj_qkvz / in_proj_qkv, in_proj_z and out_proj
 * by their keys (absent: FLOAT; msModelSlim quantizes in_proj_qkvz
 * W8A8_DYNAMIC); in_proj_ba / b / a, conv1d, A_log, dt_bias and the norm are
 * float (the loader reads them so). */
static moe8_status resolve_gdn(const lookup *k, moe8_layer_info *li) {
    static const moe8_role roles[3] = {MOE8_R_GDN_QKVZ, MOE8_R_GDN_Z, MOE8_R_GDN_OUT};
    moe8_quant_type *dst[3] = {&li->gdn_in, &li->gdn_z, &li->gdn_out};
    char name[200];
    for (int i = 0; i < 3; i++) {
        moe8_role r = i == 0 && !moe8_arch_has(k->a, roles[0]) ? MOE8_R_GDN_QKV : roles[i];
        *dst[i] = MOE8_QUANT_FLOAT;
        if (moe8_arch_has(k->a, r) &&
            !moe8_arch_tensor_name(k->a, r, k->layer, 0, "weight", name, sizeof name))
            (void)moe8_quant_desc_get(k->qd, name, dst[i]);
    }
    return MOE8_OK;
}

static moe8_status resolve_attention(const lookup *k, const moe8_config *c, moe8_layer_info *li,
                                     moe8_error *err) {
    static const moe8_role qkv[] = {MOE8_R_Q, MOE8_R_K, MOE8_R_V};
    char mod[160];
    moe8_status st;
    if (li->mla) return resolve_mla(k, c, li, err);
    if (li->gdn) return resolve_gdn(k, li);
    if ((st = packed(k, "qkv_proj", qkv, 3, &li->qkv, err)) != MOE8_OK) return st;
    /* msModelSlim's hybrid recipes: q/k/v W8A8_DYNAMIC (per-token activation codes) */
    if (!k->a->kinds.gdn_layers && (st = linear_ok(k, "qkv_proj", li->qkv, err)) != MOE8_OK)
        return st;
    if ((st = required(k, MOE8_R_O, mod, sizeof mod, &li->o, err)) != MOE8_OK) return st;
    return linear_ok(k, mod, li->o, err);
}

/* The routed experts (expert 0 decides): gate/up agree and are FLOAT,
 * W8A8_DYNAMIC or W4A8_DYNAMIC; down is the same type, or FLOAT beside
 * W8A8_DYNAMIC. Each layer decides for itself (recipes mix W4A8, W8A8 and
 * FLOAT layers). */
static moe8_status resolve_experts(const lookup *k, moe8_layer_info *li, moe8_error *err) {
    static const moe8_role gu[] = {MOE8_R_EXP_GATE, MOE8_R_EXP_UP};
    char mod[160];
    moe8_status st;
    if ((st = packed(k, "experts", gu, 2, &li->experts, err)) != MOE8_OK) return st;
    if ((st = required(k, MOE8_R_EXP_DOWN, mod, sizeof mod, &li->experts_down, err)) != MOE8_OK)
        return st;
    if (li->experts == MOE8_QUANT_W8A8 || li->experts_down == MOE8_QUANT_W8A8)
        return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1,
                         "'%s': layer %lld: experts are W8A8, not supported on experts (expected "
                         "FLOAT, W8A8_DYNAMIC or W4A8_DYNAMIC)",
                         k->qd->label, (long long)k->layer);
    if (li->experts_down != li->experts &&
        (li->experts_down != MOE8_QUANT_FLOAT || li->experts != MOE8_QUANT_W8A8_DYNAMIC))
        return moe8_fail(err, MOE8_ERR_FORMAT, -1,
                         "'%s': layer %lld: shards of packed experts disagree: gate/up are %s, "
                         "%s is %s (only a FLOAT down_proj beside W8A8_DYNAMIC gate/up is "
                         "supported)",
                         k->qd->label, (long long)k->layer, moe8_quant_type_name(li->experts), mod,
                         moe8_quant_type_name(li->experts_down));
    return MOE8_OK;
}

/* Router (and shared-expert gate) FLOAT; experts; the shared expert. */
static moe8_status resolve_moe(const lookup *k, moe8_layer_info *li, moe8_error *err) {
    static const moe8_role sgu[] = {MOE8_R_SHEXP_GATE, MOE8_R_SHEXP_UP};
    moe8_quant_type q = MOE8_QUANT_FLOAT;
    char mod[160];
    moe8_status st;
    if ((st = required(k, MOE8_R_ROUTER, mod, sizeof mod, &li->router, err)) != MOE8_OK) return st;
    if (li->router != MOE8_QUANT_FLOAT)
        return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1,
                         "'%s': layer %lld: router %s is %s, only FLOAT is supported",
                         k->qd->label, (long long)k->layer, mod, moe8_quant_type_name(li->router));
    if ((st = resolve_experts(k, li, err)) != MOE8_OK) return st;
    if (!li->has_shared) return MOE8_OK;
    if (moe8_arch_has(k->a, MOE8_R_SHEXP_SCORE) &&
        (st = required(k, MOE8_R_SHEXP_SCORE, mod, sizeof mod, &q, err)) != MOE8_OK)
        return st;
    if (moe8_arch_has(k->a, MOE8_R_SHEXP_SCORE) && q != MOE8_QUANT_FLOAT)
        return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1,
                         "'%s': layer %lld: %s is %s, only FLOAT is supported", k->qd->label,
                         (long long)k->layer, mod, moe8_quant_type_name(q));
    if ((st = packed(k, "shared_expert.gate_up_proj", sgu, 2, &li->shared_gate_up, err)) != MOE8_OK)
        return st;
    if ((st = required(k, MOE8_R_SHEXP_DOWN, mod, sizeof mod, &li->shared_down, err)) != MOE8_OK)
        return st;
    if (li->shared_gate_up == MOE8_QUANT_W4A8_DYNAMIC || li->shared_down == MOE8_QUANT_W4A8_DYNAMIC)
        return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1,
                         "'%s': layer %lld: the shared expert is W4A8_DYNAMIC, supported on "
                         "routed experts only (expected FLOAT, W8A8 or W8A8_DYNAMIC)",
                         k->qd->label, (long long)k->layer);
    return MOE8_OK;
}

static moe8_status resolve_dense(const lookup *k, moe8_layer_info *li, moe8_error *err) {
    static const moe8_role gu[] = {MOE8_R_MLP_GATE, MOE8_R_MLP_UP};
    char mod[160];
    moe8_status st;
    if ((st = packed(k, "gate_up_proj", gu, 2, &li->mlp_gate_up, err)) != MOE8_OK) return st;
    if ((st = linear_ok(k, "gate_up_proj", li->mlp_gate_up, err)) != MOE8_OK) return st;
    if ((st = required(k, MOE8_R_MLP_DOWN, mod, sizeof mod, &li->mlp_down, err)) != MOE8_OK)
        return st;
    return linear_ok(k, mod, li->mlp_down, err);
}

/* W4A8_DYNAMIC is per output channel (SEMANTICS §4b): a "group_size" above
 * 0 is msModelSlim's older per-group form (weight_scale_second), refused. */
static moe8_status per_channel(const moe8_quant_desc *qd, moe8_error *err) {
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(qd->root, "group_size");
    if (!g || cJSON_IsNull(g) || (cJSON_IsNumber(g) && g->valuedouble == 0.0)) return MOE8_OK;
    if (!cJSON_IsNumber(g))
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': group_size: expected a number",
                         qd->label);
    return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1,
                     "'%s': group_size %g: per-group W4A8_DYNAMIC (weight_scale_second) not "
                     "supported, only per-channel (group_size 0)", qd->label, g->valuedouble);
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
    const moe8_arch_desc *a = moe8_arch_get(cfg->arch);
    moe8_status st;
    if (!a) return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "quant description: unknown family");
    for (int64_t l = 0; l < cfg->num_hidden_layers; l++) {
        memset(&layers[l], 0, sizeof layers[l]); /* every field FLOAT */
        moe8_layer_plan p;
        moe8_plan_layer(cfg, l, &p);
        layers[l].is_moe = p.ffn != MOE8_FFN_DENSE;
        layers[l].has_shared = p.ffn == MOE8_FFN_MOE_SHARED;
        layers[l].qkv_bias = (p.attn_opts & MOE8_ATTN_QKV_BIAS) != 0;
        layers[l].mla = p.attn == MOE8_ATTN_MLA;
        layers[l].gdn = p.attn == MOE8_ATTN_GDN;
    }
    if (!qd) return MOE8_OK;
    if ((st = check_values(qd, a, exists, user, err)) != MOE8_OK) return st;
    for (int64_t l = 0; l < cfg->num_hidden_layers; l++) {
        const lookup k = {qd, a, l};
        moe8_layer_info *li = &layers[l];
        if ((st = resolve_attention(&k, cfg, li, err)) != MOE8_OK) return st;
        st = li->is_moe ? resolve_moe(&k, li, err) : resolve_dense(&k, li, err);
        if (st != MOE8_OK) return st;
        const moe8_quant_type w4 = MOE8_QUANT_W4A8_DYNAMIC;
        if ((li->experts == w4 || li->qkv == w4 || li->o == w4 || li->q_b == w4 ||
             li->mlp_gate_up == w4 || li->mlp_down == w4) && (st = per_channel(qd, err)) != MOE8_OK)
            return st;
    }
    return MOE8_OK;
}
