/*
 * test_quant_desc.c — quant_model_description.json resolution (SEMANTICS §6)
 * without safetensors: the checkpoint's tensor names are a list, the
 * description is built with cJSON and edited once per defect.
 */
#include "test.h"

#include <cjson/cJSON.h>

#include "arch/quant_desc.h"
#include "moe8.h"

/* Model: 3 layers, E = 4, layer 1 dense (mlp_only_layers). */
static moe8_config cfg;

#define MAX_NAMES 256
static char names[MAX_NAMES][96];
static int n_names;

static int exists(void *user, const char *name) {
    (void)user;
    for (int i = 0; i < n_names; i++)
        if (!strcmp(names[i], name)) return 1;
    return 0;
}

static void add(cJSON *d, const char *type, const char *fmt, long long l, long long e) {
    char name[96];
    snprintf(name, sizeof name, fmt, l, e);
    cJSON_AddStringToObject(d, name, type);
    if (n_names < MAX_NAMES) snprintf(names[n_names++], sizeof names[0], "%s", name);
}

/* A W8A8 description in ModelSlim style; also fills the tensor-name list. */
static cJSON *good_desc(void) {
    static const char *lin[] = {"q_proj", "k_proj", "v_proj", "o_proj"};
    static const char *mlp[] = {"gate_proj", "up_proj", "down_proj"};
    cJSON *d = cJSON_CreateObject();
    n_names = 0;
    cJSON_AddStringToObject(d, "model_quant_type", "W8A8_DYNAMIC");
    cJSON_AddStringToObject(d, "version", "1.0.0");
    cJSON_AddNullToObject(d, "fa_quant_type");
    cJSON_AddNumberToObject(d, "group_size", 0);
    add(d, "FLOAT", "model.embed_tokens.weight%.0lld%.0lld", 0, 0);
    for (long long l = 0; l < 3; l++) {
        add(d, "FLOAT", "model.layers.%lld.input_layernorm.weight%.0lld", l, 0);
        add(d, "FLOAT", "model.layers.%lld.self_attn.q_norm.weight%.0lld", l, 0);
        for (int i = 0; i < 4; i++) {
            char f[96];
            snprintf(f, sizeof f, "model.layers.%%lld.self_attn.%s.weight%%.0lld", lin[i]);
            add(d, "W8A8", f, l, 0);
            snprintf(f, sizeof f, "model.layers.%%lld.self_attn.%s.input_scale%%.0lld", lin[i]);
            add(d, "W8A8", f, l, 0);
        }
        if (l == 1) {
            for (int i = 0; i < 3; i++) {
                char f[96];
                snprintf(f, sizeof f, "model.layers.%%lld.mlp.%s.weight%%.0lld", mlp[i]);
                add(d, "W8A8", f, l, 0);
            }
            continue;
        }
        add(d, "FLOAT", "model.layers.%lld.mlp.gate.weight%.0lld", l, 0);
        for (long long e = 0; e < 4; e++)
            for (int i = 0; i < 3; i++) {
                char f[96];
                snprintf(f, sizeof f, "model.layers.%%lld.mlp.experts.%%lld.%s.weight", mlp[i]);
                add(d, "W8A8_DYNAMIC", f, l, e);
                snprintf(f, sizeof f, "model.layers.%%lld.mlp.experts.%%lld.%s.weight_scale", mlp[i]);
                add(d, "W8A8_DYNAMIC", f, l, e);
            }
    }
    add(d, "FLOAT", "model.norm.weight%.0lld%.0lld", 0, 0);
    add(d, "FLOAT", "lm_head.weight%.0lld%.0lld", 0, 0);
    return d;
}

static moe8_status resolve(cJSON *d, moe8_layer_info *li, moe8_error *e) {
    char *text = cJSON_PrintUnformatted(d);
    moe8_quant_desc *qd = NULL;
    moe8_status st;
    memset(e, 0, sizeof *e);
    st = moe8_quant_desc_parse(text, strlen(text), "qd.json", &qd, e);
    if (st == MOE8_OK) st = moe8_quant_desc_resolve(qd, &cfg, exists, NULL, li, e);
    moe8_quant_desc_free(qd);
    free(text);
    cJSON_Delete(d);
    return st;
}

static void set(cJSON *d, const char *key, cJSON *v) {
    if (cJSON_GetObjectItemCaseSensitive(d, key))
        cJSON_ReplaceItemInObjectCaseSensitive(d, key, v);
    else
        cJSON_AddItemToObject(d, key, v);
}

static void test_good(void) {
    moe8_layer_info li[3];
    moe8_error e;
    CHECKF(resolve(good_desc(), li, &e) == MOE8_OK, "%s", e.message);
    for (int l = 0; l < 3; l++) {
        CHECK(li[l].is_moe == (l != 1));
        CHECK(li[l].qkv == MOE8_QUANT_W8A8 && li[l].o == MOE8_QUANT_W8A8);
    }
    CHECK(li[0].experts == MOE8_QUANT_W8A8_DYNAMIC && li[0].router == MOE8_QUANT_FLOAT);
    CHECK(li[2].experts == MOE8_QUANT_W8A8_DYNAMIC);
    CHECK(li[1].mlp_gate_up == MOE8_QUANT_W8A8 && li[1].mlp_down == MOE8_QUANT_W8A8);

    /* per-layer mix: layer 2 attention float, dense layer down_proj float,
     * metadata keys of any value ignored */
    cJSON *d = good_desc();
    set(d, "model.layers.2.self_attn.q_proj.weight", cJSON_CreateString("FLOAT"));
    set(d, "model.layers.2.self_attn.k_proj.weight", cJSON_CreateString("FLOAT"));
    set(d, "model.layers.2.self_attn.v_proj.weight", cJSON_CreateString("FLOAT"));
    set(d, "model.layers.1.mlp.down_proj.weight", cJSON_CreateString("FLOAT"));
    set(d, "model_quant_type", cJSON_CreateString("W4A8_DYNAMIC"));
    set(d, "model.layers.9.mlp.experts.0.up_proj.weight", cJSON_CreateString("W4A8"));
    set(d, "kv_cache_type", cJSON_CreateNull());
    set(d, "group_size", cJSON_CreateNumber(128));
    CHECKF(resolve(d, li, &e) == MOE8_OK, "%s", e.message);
    CHECK(li[2].qkv == MOE8_QUANT_FLOAT && li[2].o == MOE8_QUANT_W8A8);
    CHECK(li[0].qkv == MOE8_QUANT_W8A8);
    CHECK(li[1].mlp_gate_up == MOE8_QUANT_W8A8 && li[1].mlp_down == MOE8_QUANT_FLOAT);

    /* W4A8_DYNAMIC linears (quantize --linear w4a8, SEMANTICS §5b): per channel only */
    static const char *const w4[] = {"model.layers.0.self_attn.q_proj.weight",
                                     "model.layers.0.self_attn.k_proj.weight",
                                     "model.layers.0.self_attn.v_proj.weight",
                                     "model.layers.0.self_attn.o_proj.weight",
                                     "model.layers.1.mlp.gate_proj.weight",
                                     "model.layers.1.mlp.up_proj.weight",
                                     "model.layers.1.mlp.down_proj.weight"};
    for (int g = 0; g < 2; g++) {
        d = good_desc();
        for (size_t i = 0; i < sizeof w4 / sizeof w4[0]; i++)
            set(d, w4[i], cJSON_CreateString("W4A8_DYNAMIC"));
        set(d, "group_size", cJSON_CreateNumber(g ? 64 : 0));
        const moe8_status st = resolve(d, li, &e);
        if (g) {
            CHECKF(st == MOE8_ERR_UNSUPPORTED && strstr(e.message, "group_size 64"),
                   "per-group W4A8 linears: %s", e.message);
            continue;
        }
        CHECKF(st == MOE8_OK, "%s", e.message);
        CHECK(li[0].qkv == MOE8_QUANT_W4A8_DYNAMIC && li[0].o == MOE8_QUANT_W4A8_DYNAMIC);
        CHECK(li[1].mlp_gate_up == MOE8_QUANT_W4A8_DYNAMIC && li[1].mlp_down == MOE8_QUANT_W4A8_DYNAMIC);
        CHECK(li[2].qkv == MOE8_QUANT_W8A8);
    }

    /* experts of expert 1..3 do not decide (reference reads expert 0) */
    d = good_desc();
    set(d, "model.layers.0.mlp.experts.3.down_proj.weight", cJSON_CreateString("FLOAT"));
    CHECKF(resolve(d, li, &e) == MOE8_OK, "%s", e.message);
    CHECK(li[0].experts == MOE8_QUANT_W8A8_DYNAMIC);
}

static void test_no_description(void) {
    moe8_layer_info li[3];
    moe8_error e;
    memset(li, 0x55, sizeof li);
    CHECK(moe8_quant_desc_resolve(NULL, &cfg, exists, NULL, li, &e) == MOE8_OK);
    for (int l = 0; l < 3; l++) {
        CHECK(li[l].is_moe == (l != 1));
        CHECK(li[l].qkv == MOE8_QUANT_FLOAT && li[l].o == MOE8_QUANT_FLOAT);
        CHECK(li[l].experts == MOE8_QUANT_FLOAT && li[l].router == MOE8_QUANT_FLOAT);
        CHECK(li[l].mlp_gate_up == MOE8_QUANT_FLOAT && li[l].mlp_down == MOE8_QUANT_FLOAT);
    }
}

/* One defect per row: the key to set (value NULL = delete), code, message. */
static void test_defects(void) {
    static const struct {
        const char *key, *value;
        moe8_status code;
        const char *msg;
    } cases[] = {
        {"model.layers.2.self_attn.k_proj.weight", NULL, MOE8_ERR_NOT_FOUND,
         "required key 'model.layers.2.self_attn.k_proj.weight' missing"},
        {"model.layers.0.mlp.gate.weight", NULL, MOE8_ERR_NOT_FOUND,
         "required key 'model.layers.0.mlp.gate.weight' missing"},
        {"model.layers.2.mlp.experts.0.down_proj.weight", NULL, MOE8_ERR_NOT_FOUND,
         "required key 'model.layers.2.mlp.experts.0.down_proj.weight' missing"},
        {"model.layers.1.mlp.up_proj.weight", NULL, MOE8_ERR_NOT_FOUND,
         "required key 'model.layers.1.mlp.up_proj.weight' missing"},
        {"model.layers.0.self_attn.o_proj.weight", NULL, MOE8_ERR_NOT_FOUND,
         "required key 'model.layers.0.self_attn.o_proj.weight' missing"},
        {"model.layers.0.self_attn.v_proj.weight", "FLOAT", MOE8_ERR_FORMAT,
         "layer 0: shards of packed qkv_proj disagree: self_attn.q_proj is W8A8, self_attn.v_proj is FLOAT"},
        {"model.layers.1.mlp.gate_proj.weight", "FLOAT", MOE8_ERR_FORMAT,
         "layer 1: shards of packed gate_up_proj disagree"},
        {"model.layers.2.mlp.experts.0.up_proj.weight", "FLOAT", MOE8_ERR_FORMAT,
         "layer 2: shards of packed experts disagree: mlp.experts.0.gate_proj is W8A8_DYNAMIC, "
         "mlp.experts.0.up_proj is FLOAT"},
        {"model.layers.0.self_attn.o_proj.weight", "W8A8_DYNAMIC", MOE8_ERR_UNSUPPORTED,
         "layer 0: self_attn.o_proj is W8A8_DYNAMIC, not supported on linear layers"},
        {"model.layers.1.mlp.down_proj.weight", "W8A8_DYNAMIC", MOE8_ERR_UNSUPPORTED,
         "layer 1: mlp.down_proj is W8A8_DYNAMIC, not supported on linear"},
        {"model.layers.0.mlp.experts.0.gate_proj.weight", "W8A8", MOE8_ERR_FORMAT,
         "shards of packed experts disagree"},
        {"model.layers.2.mlp.experts.3.up_proj.weight", "W4A16", MOE8_ERR_UNSUPPORTED,
         "tensor 'model.layers.2.mlp.experts.3.up_proj.weight': quant type \"W4A16\" not "
         "supported"},
        /* W4A8_DYNAMIC linears (quantize --linear w4a8) are accepted, but q/k/v agree */
        {"model.layers.0.self_attn.q_proj.weight", "W4A8_DYNAMIC", MOE8_ERR_FORMAT,
         "layer 0: shards of packed qkv_proj disagree: self_attn.q_proj is W4A8_DYNAMIC"},
        {"model.layers.0.self_attn.q_proj.input_scale", "W8A16", MOE8_ERR_UNSUPPORTED,
         "tensor 'model.layers.0.self_attn.q_proj.input_scale': quant type \"W8A16\""},
        {"model.layers.0.mlp.gate.weight", "W8A8", MOE8_ERR_UNSUPPORTED,
         "tensor 'model.layers.0.mlp.gate.weight': quant type W8A8 not supported (must be FLOAT)"},
        {"model.norm.weight", "W8A8_DYNAMIC", MOE8_ERR_UNSUPPORTED,
         "tensor 'model.norm.weight': quant type W8A8_DYNAMIC not supported (must be FLOAT)"},
        {"lm_head.weight", "W8A8", MOE8_ERR_UNSUPPORTED, "tensor 'lm_head.weight'"},
        {"fa_quant_type", "FAQuant", MOE8_ERR_UNSUPPORTED, "fa_quant_type FAQuant not supported"},
        {"kv_cache_type", "C8", MOE8_ERR_UNSUPPORTED, "kv_cache_type C8 not supported"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        moe8_layer_info li[3];
        moe8_error e;
        cJSON *d = good_desc();
        moe8_status st;
        if (cases[i].value)
            set(d, cases[i].key, cJSON_CreateString(cases[i].value));
        else
            cJSON_DeleteItemFromObjectCaseSensitive(d, cases[i].key);
        st = resolve(d, li, &e);
        CHECKF(st == cases[i].code, "case %zu: status %d want %d (%s)", i, st, cases[i].code, e.message);
        CHECKF(strstr(e.message, cases[i].msg) != NULL, "case %zu: '%s' lacks '%s'", i, e.message,
               cases[i].msg);
        CHECKF(strstr(e.message, "qd.json") != NULL, "case %zu: '%s' names no file", i, e.message);
    }
}

/* The W8A8-on-experts rule on its own: all three shards W8A8. */
static void test_w8a8_experts(void) {
    moe8_layer_info li[3];
    moe8_error e;
    cJSON *d = good_desc();
    set(d, "model.layers.2.mlp.experts.0.gate_proj.weight", cJSON_CreateString("W8A8"));
    set(d, "model.layers.2.mlp.experts.0.up_proj.weight", cJSON_CreateString("W8A8"));
    set(d, "model.layers.2.mlp.experts.0.down_proj.weight", cJSON_CreateString("W8A8"));
    CHECK(resolve(d, li, &e) == MOE8_ERR_UNSUPPORTED);
    CHECKF(strstr(e.message, "layer 2: experts are W8A8, not supported on experts"), "%s", e.message);
    /* a non-string value on a tensor key */
    d = good_desc();
    set(d, "model.layers.0.self_attn.q_norm.weight", cJSON_CreateNumber(1));
    CHECK(resolve(d, li, &e) == MOE8_ERR_FORMAT);
    CHECKF(strstr(e.message, "tensor 'model.layers.0.self_attn.q_norm.weight': quant type must be a string"),
           "%s", e.message);
    /* not an object / bad JSON */
    moe8_quant_desc *qd = NULL;
    CHECK(moe8_quant_desc_parse("[\"FLOAT\"]", 9, "qd.json", &qd, &e) == MOE8_ERR_FORMAT && !qd);
    CHECK(strstr(e.message, "expected a JSON object") != NULL);
    CHECK(moe8_quant_desc_parse("{\"a\":", 5, "qd.json", &qd, &e) == MOE8_ERR_FORMAT && !qd);
    CHECK(strstr(e.message, "invalid JSON") != NULL);
    /* a key twice: cJSON would keep the first copy, Python (ModelSlim, vLLM) the last */
    const char *dup = "{\"model_quant_type\":\"W8A8_DYNAMIC\",\"a.weight\":\"W8A8_DYNAMIC\","
                      "\"a.weight\":\"FLOAT\"}";
    CHECK(moe8_quant_desc_parse(dup, strlen(dup), "qd.json", &qd, &e) == MOE8_ERR_FORMAT && !qd);
    CHECKF(strstr(e.message, "'qd.json': duplicate key 'a.weight' at the top level"), "%s", e.message);
    /* bytes after the value */
    CHECK(moe8_quant_desc_parse("{\"a\":\"FLOAT\"}\n[]", 16, "qd.json", &qd, &e) == MOE8_ERR_FORMAT &&
          !qd);
    CHECKF(strstr(e.message, "'qd.json': unexpected bytes after the JSON value at byte 14"), "%s",
           e.message);
}

/* lm_head.weight: FLOAT when absent, keyless or not a tensor; W8A8_DYNAMIC
 * accepted (moe8 extension); W8A8 refused with the supported types named. */
static moe8_quant_type lm_head_of(cJSON *d, moe8_status *st, moe8_error *e) {
    char *text = cJSON_PrintUnformatted(d);
    moe8_quant_desc *qd = NULL;
    moe8_layer_info li[3];
    moe8_quant_type q = (moe8_quant_type)-1;
    *st = moe8_quant_desc_parse(text, strlen(text), "qd.json", &qd, e);
    if (*st == MOE8_OK) *st = moe8_quant_desc_resolve(qd, &cfg, exists, NULL, li, e);
    if (*st == MOE8_OK) q = moe8_quant_desc_lm_head(qd, exists, NULL);
    moe8_quant_desc_free(qd);
    free(text);
    cJSON_Delete(d);
    return q;
}

static void test_lm_head(void) {
    moe8_status st;
    moe8_error e;
    cJSON *d = good_desc();
    CHECK(lm_head_of(d, &st, &e) == MOE8_QUANT_FLOAT && st == MOE8_OK);
    d = good_desc();
    set(d, "lm_head.weight", cJSON_CreateString("W8A8_DYNAMIC"));
    CHECKF(lm_head_of(d, &st, &e) == MOE8_QUANT_W8A8_DYNAMIC && st == MOE8_OK, "%s", e.message);
    d = good_desc();
    cJSON_DeleteItemFromObjectCaseSensitive(d, "lm_head.weight");
    CHECK(lm_head_of(d, &st, &e) == MOE8_QUANT_FLOAT && st == MOE8_OK);
    /* a key without a tensor (tied model) is metadata */
    d = good_desc();
    set(d, "lm_head.weight", cJSON_CreateString("W8A8_DYNAMIC"));
    n_names--; /* lm_head.weight was the last name added */
    CHECK(lm_head_of(d, &st, &e) == MOE8_QUANT_FLOAT && st == MOE8_OK);
    d = good_desc();
    set(d, "lm_head.weight", cJSON_CreateString("W8A8"));
    lm_head_of(d, &st, &e);
    CHECKF(st == MOE8_ERR_UNSUPPORTED &&
               strstr(e.message, "'qd.json': tensor 'lm_head.weight': quant type W8A8 not "
                                 "supported (expected FLOAT or W8A8_DYNAMIC)"),
           "%s", e.message);
    CHECK(moe8_quant_desc_lm_head(NULL, exists, NULL) == MOE8_QUANT_FLOAT);
}

static void test_get(void) {
    const char *s = "{\"a.weight\":\"W8A8\",\"b.weight\":\"W4A8\",\"c\":1}";
    moe8_quant_desc *qd = NULL;
    moe8_quant_type q = MOE8_QUANT_FLOAT;
    CHECK(moe8_quant_desc_parse(s, strlen(s), NULL, &qd, NULL) == MOE8_OK);
    CHECK(moe8_quant_desc_get(qd, "a.weight", &q) == 0 && q == MOE8_QUANT_W8A8);
    CHECK(moe8_quant_desc_get(qd, "b.weight", &q) == -1);
    CHECK(moe8_quant_desc_get(qd, "c", &q) == -1);
    CHECK(moe8_quant_desc_get(qd, "zzz", &q) == -1);
    moe8_quant_desc_free(qd);
    CHECK(!strcmp(moe8_quant_type_name(MOE8_QUANT_W8A8_DYNAMIC), "W8A8_DYNAMIC"));
    CHECK(!strcmp(moe8_quant_type_name(MOE8_QUANT_FLOAT), "FLOAT"));
}

int main(void) {
    const char *c = "{\"model_type\":\"qwen3_moe\",\"hidden_size\":64,\"num_hidden_layers\":3,"
                    "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"num_experts\":4,"
                    "\"num_experts_per_tok\":2,\"mlp_only_layers\":[1],\"vocab_size\":256}";
    if (moe8_config_parse(c, strlen(c), "config.json", &cfg, NULL) != MOE8_OK) return 2;
    test_good();
    test_no_description();
    test_defects();
    test_w8a8_experts();
    test_lm_head();
    test_get();
    return test_summary();
}
