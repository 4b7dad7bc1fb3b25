/*
 * config.c — config.json of a supported model (SEMANTICS §7) into moe8_config.
 *
 * model_type picks the family's descriptor (src/arch): its Hugging Face
 * config-class defaults fill every field first, then its own checks run
 * (booleans, refused features), then the integer keys every family shares
 * and those of its table, the common relations, the token ids and, for
 * families with decoder_sparse_step, mlp_only_layers. Keys moe8 does not use
 * (architectures, torch_dtype, ...) are ignored, as Hugging Face does.
 *
 * Every number is hostile: integers must be exact, dimensions positive and
 * below the caps of arch.h. It does not read generation_config.json (see
 * model.c) nor check tensors.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "arch/arch.h"
#include "io/json_util.h"
#include "arch/quant_desc.h"

/* One int64 field: absent or null keeps *v (the default). */
static moe8_status get_int(const cJSON *root, const char *label, const char *key, int64_t lo,
                           int64_t hi, int64_t *v, moe8_error *err) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, key);
    int64_t x;
    if (!it || cJSON_IsNull(it)) return MOE8_OK;
    if (!cJSON_IsNumber(it))
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': %s must be an integer", label, key);
    if (moe8_json_exact_int(it, &x) != 0)
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': %s (%.17g) is not an exact integer",
                         label, key, it->valuedouble);
    if (x < lo || x > hi)
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': %s (%lld) outside [%lld, %lld]", label,
                         key, (long long)x, (long long)lo, (long long)hi);
    *v = x;
    return MOE8_OK;
}

moe8_status moe8_cfg_read_int(const cJSON *root, const char *label, const moe8_cfg_int *f,
                              moe8_config *c, moe8_error *err) {
    return get_int(root, label, f->key, f->lo, f->hi, (int64_t *)((char *)c + f->offset), err);
}

moe8_status moe8_cfg_read_bool(const cJSON *root, const char *label, const char *key, int *v,
                               moe8_error *err) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!it || cJSON_IsNull(it)) return MOE8_OK;
    if (!cJSON_IsBool(it))
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': %s must be true or false", label, key);
    *v = cJSON_IsTrue(it) ? 1 : 0;
    return MOE8_OK;
}

moe8_status moe8_cfg_refuse_true(const cJSON *root, const char *label, const char *key,
                                 moe8_error *err) {
    int flag = 0;
    moe8_status st = moe8_cfg_read_bool(root, label, key, &flag, err);
    if (st == MOE8_OK && flag)
        return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1, "'%s': %s true not supported", label, key);
    return st;
}

moe8_status moe8_cfg_refuse_non_null(const cJSON *root, const char *label, const char *key,
                                     moe8_error *err) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!it || cJSON_IsNull(it)) return MOE8_OK;
    if (cJSON_IsNumber(it))
        return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1,
                         "'%s': %s %.17g not supported (must be null or absent)", label, key,
                         it->valuedouble);
    return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1,
                     "'%s': %s not supported (must be null or absent)", label, key);
}

moe8_status moe8_cfg_read_pos_double(const cJSON *root, const char *label, const char *key,
                                     double *v, moe8_error *err);

/* A positive finite number. */
static moe8_status get_pos_double(const cJSON *root, const char *label, const char *key, double *v,
                                  moe8_error *err) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!it || cJSON_IsNull(it)) return MOE8_OK;
    if (!cJSON_IsNumber(it))
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': %s must be a number", label, key);
    if (!isfinite(it->valuedouble) || it->valuedouble <= 0)
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': %s (%g) must be finite and > 0", label,
                         key, it->valuedouble);
    *v = it->valuedouble;
    return MOE8_OK;
}

moe8_status moe8_cfg_read_pos_double(const cJSON *root, const char *label, const char *key,
                                     double *v, moe8_error *err) {
    return get_pos_double(root, label, key, v, err);
}

/* ------------------------------------------------------------------------ */
/* Family and unsupported fields                                             */
/* ------------------------------------------------------------------------ */

static moe8_status find_arch(const cJSON *root, const char *label, const moe8_arch_desc **out,
                             moe8_error *err) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    if (!it)
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': model_type missing (expected one of %s)",
                         label, moe8_arch_list());
    if (!cJSON_IsString(it))
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': model_type must be a string", label);
    if (!(*out = moe8_arch_find(it->valuestring)))
        return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1,
                         "'%s': model_type \"%.64s\" not supported (expected one of %s)", label,
                         it->valuestring, moe8_arch_list());
    return MOE8_OK;
}

/* rope_scaling: the families with MLA and gpt_oss (desc.yarn) read YaRN themselves; the
 * others have none. */
static moe8_status check_unsupported(const cJSON *root, const char *label, const moe8_arch_desc *a,
                                     moe8_error *err) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, "rope_scaling");
    if (it && !cJSON_IsNull(it) && !(a->kinds.attn == MOE8_ATTN_MLA) && !a->yarn)
        return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1,
                         "'%s': rope_scaling not supported (must be null or absent)", label);
    it = cJSON_GetObjectItemCaseSensitive(root, "hidden_act");
    if (it && !cJSON_IsNull(it)) {
        if (!cJSON_IsString(it))
            return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': hidden_act must be a string", label);
        if (strcmp(it->valuestring, "silu") != 0)
            return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1,
                             "'%s': hidden_act \"%.64s\" not supported (expected \"silu\")", label,
                             it->valuestring);
    }
    return MOE8_OK;
}

/* ------------------------------------------------------------------------ */
/* Numeric fields                                                            */
/* ------------------------------------------------------------------------ */

/* Keys every family reads (the family's own follow, from its table). */
static const moe8_cfg_int common_fields[] = {
    {"vocab_size", 1, MOE8_CAP_VOCAB, offsetof(moe8_config, vocab_size)},
    {"hidden_size", 1, MOE8_CAP_HIDDEN, offsetof(moe8_config, hidden_size)},
    {"num_hidden_layers", 1, MOE8_MAX_LAYERS, offsetof(moe8_config, num_hidden_layers)},
    {"num_attention_heads", 1, MOE8_CAP_HEADS, offsetof(moe8_config, num_attention_heads)},
    {"num_key_value_heads", 1, MOE8_CAP_HEADS, offsetof(moe8_config, num_key_value_heads)},
    {"head_dim", 1, MOE8_CAP_HEAD_DIM, offsetof(moe8_config, head_dim)},
    {"num_experts_per_tok", 1, MOE8_CAP_EXPERTS, offsetof(moe8_config, num_experts_per_tok)},
    {"max_position_embeddings", 1, MOE8_CAP_POSITIONS,
     offsetof(moe8_config, max_position_embeddings)},
};

static moe8_status read_dims(const cJSON *root, const char *label, const moe8_arch_desc *a,
                             moe8_config *c, moe8_error *err) {
    moe8_status st;
    for (size_t i = 0; i < sizeof common_fields / sizeof common_fields[0]; i++)
        if ((st = moe8_cfg_read_int(root, label, &common_fields[i], c, err)) != MOE8_OK) return st;
    for (int i = 0; i < a->n_fields; i++)
        if ((st = moe8_cfg_read_int(root, label, &a->fields[i], c, err)) != MOE8_OK) return st;
    if ((st = moe8_cfg_read_bool(root, label, "tie_word_embeddings", &c->tie_word_embeddings, err)) !=
        MOE8_OK)
        return st;
    if ((st = get_pos_double(root, label, "rms_norm_eps", &c->rms_norm_eps, err)) != MOE8_OK)
        return st;
    return get_pos_double(root, label, "rope_theta", &c->rope_theta, err);
}

/* Partial rotary (plan.h): rotary_dim (a count) or head_dim x partial_rotary_factor
 * dims, even, at least 2 and at most head_dim. */
static moe8_status check_partial_rotary(const char *label, const moe8_config *c, moe8_error *err) {
    const double f = MOE8_FAM(c)->partial_rotary_factor;
    const int64_t rd = MOE8_FAM(c)->rotary_dim;
    const int R = moe8_rope_dim(c);
    if (rd > 0 && (rd < 2 || rd % 2 || rd > c->head_dim))
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': rotary_dim %lld must be even, at least 2 "
                         "and at most head_dim (%lld)", label, (long long)rd,
                         (long long)c->head_dim);
    if (f > 0 && (R < 2 || R % 2))
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': head_dim (%lld) x partial_rotary_factor "
                         "(%g) gives %d rotary dims: must be even and at least 2", label,
                         (long long)c->head_dim, f, R);
    return MOE8_OK;
}

static moe8_status check_relations(const char *label, moe8_config *c, moe8_error *err) {
    if (c->head_dim == 0) {
        c->head_dim = c->hidden_size / c->num_attention_heads;
        if (c->head_dim < 1 || c->head_dim > MOE8_CAP_HEAD_DIM)
            return moe8_fail(err, MOE8_ERR_FORMAT, -1,
                             "'%s': default head_dim = hidden_size (%lld) / num_attention_heads "
                             "(%lld) = %lld outside [1, %lld]",
                             label, (long long)c->hidden_size, (long long)c->num_attention_heads,
                             (long long)c->head_dim, (long long)MOE8_CAP_HEAD_DIM);
    }
    if (c->num_key_value_heads == 0) c->num_key_value_heads = c->num_attention_heads;
    if (c->num_attention_heads % c->num_key_value_heads != 0)
        return moe8_fail(err, MOE8_ERR_FORMAT, -1,
                         "'%s': num_attention_heads (%lld) is not a multiple of "
                         "num_key_value_heads (%lld)",
                         label, (long long)c->num_attention_heads,
                         (long long)c->num_key_value_heads);
    if (c->num_experts > 0 && c->num_experts_per_tok > c->num_experts)
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': num_experts_per_tok (%lld) > num_experts (%lld)",
                         label, (long long)c->num_experts_per_tok, (long long)c->num_experts);
    if (c->num_attention_heads * c->head_dim > MOE8_CAP_ATTN_WIDTH)
        return moe8_fail(err, MOE8_ERR_FORMAT, -1,
                         "'%s': num_attention_heads x head_dim (%lld x %lld) too large", label,
                         (long long)c->num_attention_heads, (long long)c->head_dim);
    return MOE8_OK;
}

/* ------------------------------------------------------------------------ */
/* Token ids and layer lists                                                 */
/* ------------------------------------------------------------------------ */

/* Append `id` to ids[*n] unless present; fails beyond MOE8_MAX_STOP_IDS. */
static moe8_status add_stop_id(const char *label, int64_t id, int64_t *ids, int *n,
                               moe8_error *err) {
    for (int i = 0; i < *n; i++)
        if (ids[i] == id) return MOE8_OK;
    if (*n >= MOE8_MAX_STOP_IDS)
        return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1, "'%s': more than %d distinct eos_token_id values",
                         label, MOE8_MAX_STOP_IDS);
    ids[(*n)++] = id;
    return MOE8_OK;
}

static moe8_status token_id(const char *label, const char *key, const cJSON *it, int64_t vocab,
                            int64_t *out, moe8_error *err) {
    if (moe8_json_exact_int(it, out) != 0)
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': %s must be an integer token id", label, key);
    if (*out < 0 || *out >= vocab)
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': %s (%lld) outside [0, vocab_size %lld)",
                         label, key, (long long)*out, (long long)vocab);
    return MOE8_OK;
}

moe8_status moe8_config_read_eos(const cJSON *root, const char *label, int64_t vocab,
                                 int64_t *ids, int *n, moe8_error *err) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, "eos_token_id"), *e;
    int64_t id;
    moe8_status st;
    if (!it || cJSON_IsNull(it)) return MOE8_OK;
    if (cJSON_IsNumber(it)) {
        if ((st = token_id(label, "eos_token_id", it, vocab, &id, err)) != MOE8_OK) return st;
        return add_stop_id(label, id, ids, n, err);
    }
    if (!cJSON_IsArray(it))
        return moe8_fail(err, MOE8_ERR_FORMAT, -1,
                         "'%s': eos_token_id must be an integer or a list of integers", label);
    cJSON_ArrayForEach(e, it) {
        if ((st = token_id(label, "eos_token_id", e, vocab, &id, err)) != MOE8_OK) return st;
        if ((st = add_stop_id(label, id, ids, n, err)) != MOE8_OK) return st;
    }
    return MOE8_OK;
}

/* bos / eos: a key present replaces the family's default (null: none, as in
 * Hugging Face); defaults kept must lie in the vocabulary too. */
static moe8_status read_token_ids(const cJSON *root, const char *label, moe8_config *c,
                                  moe8_error *err) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, "bos_token_id");
    moe8_status st;
    if (it && cJSON_IsNull(it)) c->bos_token_id = -1;
    if (it && !cJSON_IsNull(it)) {
        st = token_id(label, "bos_token_id", it, c->vocab_size, &c->bos_token_id, err);
        if (st != MOE8_OK) return st;
    } else if (c->bos_token_id >= c->vocab_size) {
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': default bos_token_id (%lld) outside "
                         "[0, vocab_size %lld)", label, (long long)c->bos_token_id,
                         (long long)c->vocab_size);
    }
    if (cJSON_GetObjectItemCaseSensitive(root, "eos_token_id")) c->n_eos_ids = 0;
    for (int i = 0; i < c->n_eos_ids; i++)
        if (c->eos_token_ids[i] >= c->vocab_size)
            return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': default eos_token_id (%lld) outside "
                             "[0, vocab_size %lld)", label, (long long)c->eos_token_ids[i],
                             (long long)c->vocab_size);
    return moe8_config_read_eos(root, label, c->vocab_size, c->eos_token_ids, &c->n_eos_ids, err);
}

static moe8_status read_mlp_only(const cJSON *root, const char *label, moe8_config *c,
                                 moe8_error *err) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, "mlp_only_layers"), *e;
    if (!it || cJSON_IsNull(it)) return MOE8_OK;
    if (!cJSON_IsArray(it))
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': mlp_only_layers must be a list of integers",
                         label);
    cJSON_ArrayForEach(e, it) {
        int64_t l;
        int dup = 0;
        if (moe8_json_exact_int(e, &l) != 0)
            return moe8_fail(err, MOE8_ERR_FORMAT, -1,
                             "'%s': mlp_only_layers must hold integer layer indices", label);
        if (l < 0 || l >= c->num_hidden_layers)
            return moe8_fail(err, MOE8_ERR_FORMAT, -1,
                             "'%s': mlp_only_layers entry %lld outside [0, num_hidden_layers %lld)",
                             label, (long long)l, (long long)c->num_hidden_layers);
        for (int i = 0; i < c->n_mlp_only_layers; i++) dup |= c->mlp_only_layers[i] == l;
        if (!dup) c->mlp_only_layers[c->n_mlp_only_layers++] = l; /* distinct, so <= layers */
    }
    return MOE8_OK;
}

/* ------------------------------------------------------------------------ */
/* Hybrid linear attention                                                   */
/* ------------------------------------------------------------------------ */

moe8_status moe8_cfg_read_layer_types(const cJSON *root, const char *label, moe8_config *c,
                                      const char *marked, const char *other, uint64_t *bits,
                                      moe8_error *err) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, "layer_types"), *e;
    int n = 0;
    if (!it || cJSON_IsNull(it)) return MOE8_OK;
    if (!cJSON_IsArray(it))
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': layer_types must be a list", label);
    memset(bits, 0, MOE8_MAX_LAYERS / 64 * sizeof *bits);
    cJSON_ArrayForEach(e, it) {
        const int mark = cJSON_IsString(e) && !strcmp(e->valuestring, marked);
        if (!mark && !(cJSON_IsString(e) && !strcmp(e->valuestring, other)))
            return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': layer_types[%d] must be "
                             "\"%s\" or \"%s\"", label, n, other, marked);
        if (n >= MOE8_MAX_LAYERS)
            return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': layer_types has more than %d "
                             "entries", label, MOE8_MAX_LAYERS);
        if (mark) bits[n / 64] |= (uint64_t)1 << (n % 64);
        n++;
    }
    MOE8_FAM(c)->n_layer_types = n;
    return MOE8_OK;
}

moe8_status moe8_cfg_check_gdn(const char *label, const moe8_config *c, moe8_error *err) {
    const moe8_family_cfg *fc = MOE8_FAM(c);
    const int64_t dims[4] = {fc->linear_num_key_heads, fc->linear_num_value_heads,
                             fc->linear_key_head_dim, fc->linear_value_head_dim};
    static const char *const keys[4] = {"linear_num_key_heads", "linear_num_value_heads",
                                        "linear_key_head_dim", "linear_value_head_dim"};
    for (int i = 0; i < 4; i++) /* head dims: the Gated DeltaNet core's cap (model/gdn.h) */
        if (dims[i] < 1 || (i >= 2 && dims[i] > 256))
            return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': %s (%lld) must be in [1, %d]",
                             label, keys[i], (long long)dims[i], i >= 2 ? 256 : 1 << 16);
    if (fc->linear_num_value_heads % fc->linear_num_key_heads)
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': linear_num_value_heads (%lld) is not a "
                         "multiple of linear_num_key_heads (%lld)", label,
                         (long long)fc->linear_num_value_heads,
                         (long long)fc->linear_num_key_heads);
    if (fc->linear_conv_kernel_dim < 1 || fc->linear_conv_kernel_dim > 256)
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': linear_conv_kernel_dim (%lld) must be "
                         "in [1, 256]", label, (long long)fc->linear_conv_kernel_dim);
    if (fc->n_layer_types && fc->n_layer_types != c->num_hidden_layers)
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': layer_types has %d entries, "
                         "num_hidden_layers is %lld", label, fc->n_layer_types,
                         (long long)c->num_hidden_layers);
    if (!fc->n_layer_types && fc->full_attention_interval < 1)
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': full_attention_interval (%lld) must be "
                         ">= 1", label, (long long)fc->full_attention_interval);
    return MOE8_OK;
}

/* ------------------------------------------------------------------------ */
/* Entry points                                                              */
/* ------------------------------------------------------------------------ */

/* A family whose text model's settings sit under a key (qwen3_5_moe's
 * text_config): *root becomes that object of `whole`. */
static moe8_status nest(const cJSON *whole, const cJSON **root, const char *label,
                        const moe8_arch_desc *a, moe8_error *err) {
    const cJSON *t;
    if (!a->config_nest) return MOE8_OK;
    t = cJSON_GetObjectItemCaseSensitive(whole, a->config_nest);
    if (!cJSON_IsObject(t))
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': %s: %s missing or not an object",
                         label, a->model_type, a->config_nest);
    *root = t;
    return MOE8_OK;
}

moe8_status moe8_config_parse(const char *json, size_t len, const char *label, moe8_config *out,
                              moe8_error *err) {
    const moe8_arch_desc *a;
    cJSON *whole = NULL;
    const cJSON *root;
    moe8_status st;
    if (!json || !out) return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "config: NULL argument");
    if (!label) label = "config.json";
    memset(out, 0, sizeof *out);
    out->bos_token_id = -1;
    if ((st = moe8_json_parse(json, len, label, &whole, err)) != MOE8_OK) return st;
    root = whole;
    if (!cJSON_IsObject(root)) {
        st = moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': expected a JSON object", label);
        goto done;
    }
    if ((st = find_arch(root, label, &a, err)) != MOE8_OK) goto done;
    if ((st = nest(whole, &root, label, a, err)) != MOE8_OK) goto done;
    out->arch = a->id;
    snprintf(out->model_type, sizeof out->model_type, "%s", a->model_type);
    a->defaults(out);   /* head_dim 0: hidden / heads after parsing */
    if ((st = check_unsupported(root, label, a, err)) != MOE8_OK) goto done;
    if ((st = a->check(root, label, out, err)) != MOE8_OK) goto done;
    if ((st = read_dims(root, label, a, out, err)) != MOE8_OK) goto done;
    if (a->finish && (st = a->finish(label, out, err)) != MOE8_OK) goto done;
    if ((st = check_relations(label, out, err)) != MOE8_OK) goto done;
    if ((st = check_partial_rotary(label, out, err)) != MOE8_OK) goto done;
    moe8_arch_fill_derived(out);
    if ((st = read_token_ids(root, label, out, err)) != MOE8_OK) goto done;
    if (a->kinds.layers == MOE8_LAYERS_SPARSE_STEP) st = read_mlp_only(root, label, out, err);
    if (!st) st = moe8_plan_check(out, label, err);
done:
    cJSON_Delete(whole);
    return st;
}

int moe8_config_is_moe_layer(const moe8_config *c, int64_t layer) {
    return moe8_arch_is_moe_layer(c, layer);
}

moe8_status moe8_cfg_check_groups(const char *label, const moe8_config *c, moe8_error *err) {
    const moe8_family_cfg *fc = MOE8_FAM(c);
    const int64_t E = c->num_experts;
    if (E == 0 || !fc->topk_grouped) return MOE8_OK;
    if (fc->n_group < 1 || E % fc->n_group)
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': n_group (%lld) must be >= 1 and divide "
                         "n_routed_experts (%lld)", label, (long long)fc->n_group, (long long)E);
    if (fc->topk_group < 1 || fc->topk_group > fc->n_group)
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': topk_group (%lld) must be in [1, n_group "
                         "%lld]", label, (long long)fc->topk_group, (long long)fc->n_group);
    if (c->num_experts_per_tok > fc->topk_group * (E / fc->n_group))
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': num_experts_per_tok (%lld) exceeds the "
                         "%lld experts of topk_group (%lld) groups", label,
                         (long long)c->num_experts_per_tok,
                         (long long)(fc->topk_group * (E / fc->n_group)),
                         (long long)fc->topk_group);
    if (fc->group_top2 && E / fc->n_group < 2)
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': %lld experts per group: the group score "
                         "(sum of the two best) needs 2", label, (long long)(E / fc->n_group));
    return MOE8_OK;
}

/* ------------------------------------------------------------------------ */
/* The family block by name (moe8.h moe8_config_get_int / _num)             */
/* ------------------------------------------------------------------------ */

#define FAM_I64(f) {#f, MOE8_FAM_OFFSET(f), 'l'}
#define FAM_INT(f) {#f, MOE8_FAM_OFFSET(f), 'i'}
#define FAM_DBL(f) {#f, MOE8_FAM_OFFSET(f), 'd'}
static const struct {
    const char *name;
    size_t offset;
    char type;
} fam_fields[] = {
    FAM_I64(shared_expert_intermediate_size), FAM_INT(qkv_bias), FAM_I64(kv_lora_rank),
    FAM_I64(q_lora_rank), FAM_I64(qk_nope_head_dim), FAM_I64(qk_rope_head_dim),
    FAM_I64(v_head_dim), FAM_I64(n_shared_experts), FAM_I64(first_k_dense_replace),
    FAM_I64(moe_layer_freq), FAM_I64(n_group), FAM_I64(topk_group), FAM_INT(topk_grouped),
    FAM_INT(group_top2), FAM_INT(scoring_sigmoid), FAM_INT(e_score_bias),
    FAM_DBL(routed_scaling_factor), FAM_INT(rope_interleave), FAM_DBL(yarn_factor),
    FAM_DBL(yarn_beta_fast), FAM_DBL(yarn_beta_slow), FAM_DBL(yarn_mscale),
    FAM_DBL(yarn_mscale_all_dim), FAM_I64(yarn_original_max_position_embeddings),
    FAM_DBL(partial_rotary_factor), FAM_INT(qk_norm), FAM_I64(num_nextn_predict_layers),
    FAM_I64(rotary_dim), FAM_I64(linear_num_key_heads), FAM_I64(linear_num_value_heads),
    FAM_I64(linear_key_head_dim), FAM_I64(linear_value_head_dim),
    FAM_I64(linear_conv_kernel_dim), FAM_I64(full_attention_interval), FAM_INT(attn_output_gate),
    FAM_I64(sliding_window), FAM_DBL(swiglu_limit), FAM_DBL(swiglu_alpha),
};

/* The value of `name` as a double (ints exactly up to 2^53), or 0 and *known 0. */
static double fam_get(const moe8_config *c, const char *name, int *known, int64_t *as_int) {
    for (size_t i = 0; c && name && i < sizeof fam_fields / sizeof fam_fields[0]; i++) {
        const char *p = (const char *)c + fam_fields[i].offset;
        if (strcmp(fam_fields[i].name, name)) continue;
        if (known) *known = 1;
        if (fam_fields[i].type == 'd') {
            double d;
            memcpy(&d, p, sizeof d);
            *as_int = (int64_t)d;
            return d;
        }
        if (fam_fields[i].type == 'l') memcpy(as_int, p, sizeof *as_int);
        else {
            int v;
            memcpy(&v, p, sizeof v);
            *as_int = v;
        }
        return (double)*as_int;
    }
    if (known) *known = 0;
    *as_int = 0;
    return 0;
}

int64_t moe8_config_get_int(const moe8_config *c, const char *name, int *known) {
    int64_t v;
    fam_get(c, name, known, &v);
    return v;
}

double moe8_config_get_num(const moe8_config *c, const char *name, int *known) {
    int64_t v;
    return fam_get(c, name, known, &v);
}
