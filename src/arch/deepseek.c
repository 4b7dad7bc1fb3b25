/*
 * deepseek.c — the DeepSeek-V2 and DeepSeek-V3 families (DeepSeek-V2-Lite,
 * DeepSeek-V2, DeepSeek-V3/R1, Moonlight-16B-A3B): Hugging Face's
 * DeepseekV2Config / DeepseekV3Config and the models' modeling_deepseek.py.
 *
 *   attention   multi-head latent attention (docs/SEMANTICS.md §7d): q from
 *               q_proj, or q_b_proj(q_a_layernorm(q_a_proj(h))) when
 *               q_lora_rank is set; kv_a_proj_with_mqa gives the latent c
 *               (kv_lora_rank) and one rotary key k_pe (qk_rope_head_dim)
 *               shared by every head; kv_b_proj(kv_a_layernorm(c)) the
 *               per-head k_nope and v. RoPE on the rope parts only, on pairs
 *               (2i, 2i+1); YaRN rope_scaling and its softmax-scale factor.
 *               q_a_layernorm / kv_a_layernorm use eps 1e-6 whatever
 *               rms_norm_eps says (the modeling code hard-codes it).
 *   MoE         mlp.gate [E][H] (V3 also mlp.gate.e_score_correction_bias
 *               [E]); mlp.experts.N.{gate,up,down}_proj; shared experts
 *               mlp.shared_experts.{gate,up,down}_proj of width
 *               n_shared_experts x moe_intermediate_size, added ungated.
 *               V2: softmax scores, topk_method "greedy" or
 *               "group_limited_greedy" (groups ranked by their best score);
 *               V3: sigmoid scores, selection on score + bias, groups ranked
 *               by the sum of their two best, weights the unbiased scores.
 *               Then V3 renormalizes (norm_topk_prob, also at top-1, as
 *               transformers does) and scales by routed_scaling_factor; V2
 *               does one or the other (its MoEGate).
 *   layers      MoE when l >= first_k_dense_replace and l % moe_layer_freq
 *               == 0; dense mlp.{gate,up,down}_proj of intermediate_size
 *               otherwise.
 *   config      defaults of transformers' config classes (V2: vocab 32000,
 *               hidden 4096, intermediate 11008, 32 layers, 32 heads, max
 *               positions 2048, bos 1, eos 2, kv_lora 512, q_lora 1536, nope
 *               128, rope 64, v 128, 64 routed + 2 shared experts of 1407,
 *               greedy, norm_topk_prob false; V3: vocab 129280, hidden 7168,
 *               intermediate 18432, 61 layers, 128 heads, 256 routed + 1
 *               shared of 2048, top-8, 8 groups keep 4, scaling 2.5, first 3
 *               dense, norm_topk_prob true, max positions 4096, bos 0, eos 1).
 *               Refused: attention_bias true, scoring / topk methods the
 *               family's code does not run, rope_scaling other than yarn.
 *               V3's rope_interleave false rotates halves (i, i + R/2), as
 *               transformers' rotate_half, instead of pairs.
 *
 * make-model presets: tiny, and slice (DeepSeek-V2-Lite's shapes for V2,
 * Moonlight-16B-A3B's for V3), both with the DeepSeek-V3 tokenizer
 * (vocabulary 129280).
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "arch/arch.h"
#include "core/core.h"

#define DS_VOCAB 129280 /* DeepSeek-V3's (its tokenizer is the one make-model ships) */
#define DS_BOS 0        /* <｜begin▁of▁sentence｜> */
#define DS_EOS 1        /* <｜end▁of▁sentence｜> */

static const moe8_cfg_int fields[] = {
    {"intermediate_size", 1, MOE8_CAP_WIDTH, offsetof(moe8_config, intermediate_size)},
    {"moe_intermediate_size", 1, MOE8_CAP_WIDTH, offsetof(moe8_config, moe_intermediate_size)},
    {"n_routed_experts", 0, MOE8_CAP_EXPERTS, offsetof(moe8_config, num_experts)},
    {"n_shared_experts", 0, 64, MOE8_FAM_OFFSET(n_shared_experts)},
    {"first_k_dense_replace", 0, MOE8_MAX_LAYERS, MOE8_FAM_OFFSET(first_k_dense_replace)},
    {"moe_layer_freq", 1, MOE8_MAX_LAYERS, MOE8_FAM_OFFSET(moe_layer_freq)},
    {"kv_lora_rank", 1, MOE8_CAP_HIDDEN, MOE8_FAM_OFFSET(kv_lora_rank)},
    {"q_lora_rank", 1, MOE8_CAP_HIDDEN, MOE8_FAM_OFFSET(q_lora_rank)},
    {"qk_nope_head_dim", 1, MOE8_CAP_HEAD_DIM, MOE8_FAM_OFFSET(qk_nope_head_dim)},
    {"qk_rope_head_dim", 2, MOE8_CAP_HEAD_DIM, MOE8_FAM_OFFSET(qk_rope_head_dim)},
    {"v_head_dim", 1, MOE8_CAP_HEAD_DIM, MOE8_FAM_OFFSET(v_head_dim)},
    {"n_group", 1, MOE8_CAP_EXPERTS, MOE8_FAM_OFFSET(n_group)},
    {"topk_group", 1, MOE8_CAP_EXPERTS, MOE8_FAM_OFFSET(topk_group)},
};

static void mla_defaults(moe8_config *c) {
    moe8_family_cfg *fc = MOE8_FAM(c);
    c->hidden_size = 4096;
    c->num_attention_heads = 32;
    c->num_key_value_heads = 0;   /* = num_attention_heads (unused by MLA) */
    c->max_position_embeddings = 2048;
    c->rms_norm_eps = 1e-6;
    c->rope_theta = 10000.0;
    fc->kv_lora_rank = 512;
    fc->q_lora_rank = 1536;
    fc->qk_nope_head_dim = 128;
    fc->qk_rope_head_dim = 64;
    fc->v_head_dim = 128;
    fc->moe_layer_freq = 1;
    fc->routed_scaling_factor = 1.0;
    fc->rope_interleave = 1;
}

static void defaults_v2(moe8_config *c) {
    mla_defaults(c);
    c->vocab_size = 32000;
    c->intermediate_size = 11008;
    c->moe_intermediate_size = 1407;
    c->num_hidden_layers = 32;
    c->num_experts = 64;
    MOE8_FAM(c)->n_shared_experts = 2;
    c->num_experts_per_tok = 0;   /* None: required with experts */
    c->bos_token_id = 1;
    c->n_eos_ids = 1;
    c->eos_token_ids[0] = 2;
}

static void defaults_v3(moe8_config *c) {
    moe8_family_cfg *fc = MOE8_FAM(c);
    mla_defaults(c);
    c->vocab_size = 129280;
    c->hidden_size = 7168;
    c->intermediate_size = 18432;
    c->moe_intermediate_size = 2048;
    c->num_hidden_layers = 61;
    c->num_attention_heads = 128;
    c->num_experts = 256;
    fc->n_shared_experts = 1;
    c->num_experts_per_tok = 8;
    fc->n_group = 8;
    fc->topk_group = 4;
    fc->first_k_dense_replace = 3;
    c->norm_topk_prob = 1;
    fc->routed_scaling_factor = 2.5;
    c->max_position_embeddings = 4096;
    c->bos_token_id = 0;
    c->n_eos_ids = 1;
    c->eos_token_ids[0] = 1;
    fc->scoring_sigmoid = 1;
    fc->topk_grouped = 1;
    fc->group_top2 = 1;
    fc->e_score_bias = 1;
}

/* A string key: absent or null keeps `dflt`; else one of `allowed` (NULL-ended). */
static moe8_status read_choice(const cJSON *root, const char *label, const char *key,
                               const char *const *allowed, const char *dflt, const char **out,
                               moe8_error *err) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, key);
    char list[160] = "";
    *out = dflt;
    if (!it || cJSON_IsNull(it)) return MOE8_OK;
    if (!cJSON_IsString(it))
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': %s must be a string", label, key);
    for (int i = 0; allowed[i]; i++) {
        if (!strcmp(it->valuestring, allowed[i])) {
            *out = allowed[i];
            return MOE8_OK;
        }
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s\"%s\"", i ? ", " : "",
                 allowed[i]);
    }
    return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1, "'%s': %s \"%.64s\" not supported (expected %s)",
                     label, key, it->valuestring, list);
}

/* A key that is null in the released configs where the class has a number:
 * null reads as 0 ("none"); absent keeps the default. */
static void null_is_zero(const cJSON *root, const char *key, int64_t *v) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, key);
    if (it && cJSON_IsNull(it)) *v = 0;
}

/* rope_scaling (arch.h moe8_cfg_read_yarn; gpt_oss reads it too). */
moe8_status moe8_cfg_read_yarn(const cJSON *root, const char *label, moe8_config *c,
                               moe8_error *err) {
    moe8_family_cfg *fc = MOE8_FAM(c);
    static const char *const yarn[] = {"yarn", NULL};
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(root, "rope_scaling");
    const char *type = NULL;
    char sub[300];
    moe8_status st;
    moe8_cfg_int orig = {"original_max_position_embeddings", 1, MOE8_CAP_POSITIONS,
                         MOE8_FAM_OFFSET(yarn_original_max_position_embeddings)};
    if (!rs || cJSON_IsNull(rs)) return MOE8_OK;
    if (!cJSON_IsObject(rs))
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': rope_scaling must be an object or null",
                         label);
    snprintf(sub, sizeof sub, "%s: rope_scaling", label);
    if ((st = read_choice(rs, sub, cJSON_HasObjectItem(rs, "type") ? "type" : "rope_type", yarn,
                          NULL, &type, err)))
        return st;
    if (!type)
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': rope_scaling.type missing (expected "
                         "\"yarn\")", label);
    fc->yarn_factor = 0;
    fc->yarn_original_max_position_embeddings = 4096;
    fc->yarn_beta_fast = 32;
    fc->yarn_beta_slow = 1;
    fc->yarn_mscale = 1;
    fc->yarn_mscale_all_dim = 0;
    int truncate = 1;
    if ((st = moe8_cfg_read_pos_double(rs, sub, "factor", &fc->yarn_factor, err)) ||
        (st = moe8_cfg_read_bool(rs, sub, "truncate", &truncate, err)) ||
        (st = moe8_cfg_read_int(rs, sub, &orig, c, err)) ||
        (st = moe8_cfg_read_pos_double(rs, sub, "beta_fast", &fc->yarn_beta_fast, err)) ||
        (st = moe8_cfg_read_pos_double(rs, sub, "beta_slow", &fc->yarn_beta_slow, err)) ||
        (st = moe8_cfg_read_pos_double(rs, sub, "mscale", &fc->yarn_mscale, err)))
        return st;
    fc->yarn_no_truncate = !truncate;
    /* mscale_all_dim may be 0 (= no softmax-scale factor) */
    if (cJSON_GetObjectItemCaseSensitive(rs, "mscale_all_dim") &&
        !cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(rs, "mscale_all_dim"))) {
        const cJSON *it = cJSON_GetObjectItemCaseSensitive(rs, "mscale_all_dim");
        if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble) || it->valuedouble < 0)
            return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': mscale_all_dim must be a finite "
                             "number >= 0", sub);
        fc->yarn_mscale_all_dim = it->valuedouble;
    }
    if (!(fc->yarn_factor > 0))
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': factor missing (yarn needs it)", sub);
    /* bounds far beyond any released model keep the tables and the softmax scale finite */
    if (fc->yarn_factor > 1e6 || fc->yarn_mscale > 1e3 || fc->yarn_mscale_all_dim > 1e3 ||
        fc->yarn_beta_fast > 1e6 || fc->yarn_beta_slow > 1e6)
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': factor %g, mscale %g, mscale_all_dim %g, "
                         "beta_fast %g, beta_slow %g: expected factor and betas <= 1e6, mscales "
                         "<= 1e3", sub, fc->yarn_factor, fc->yarn_mscale, fc->yarn_mscale_all_dim,
                         fc->yarn_beta_fast, fc->yarn_beta_slow);
    return MOE8_OK;
}

static moe8_status check_common(const cJSON *root, const char *label, moe8_config *c,
                                moe8_error *err) {
    moe8_family_cfg *fc = MOE8_FAM(c);
    moe8_status st;
    if ((st = moe8_cfg_refuse_true(root, label, "attention_bias", err))) return st;
    if ((st = moe8_cfg_read_bool(root, label, "norm_topk_prob", &c->norm_topk_prob, err))) return st;
    if ((st = moe8_cfg_read_pos_double(root, label, "routed_scaling_factor",
                                       &fc->routed_scaling_factor, err)))
        return st;
    {   /* the latent width has no "none": MLA needs it */
        const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, "kv_lora_rank");
        if (it && cJSON_IsNull(it))
            return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': kv_lora_rank must be an integer "
                             "(null given; multi-head latent attention needs its width)", label);
    }
    null_is_zero(root, "q_lora_rank", &fc->q_lora_rank);
    null_is_zero(root, "n_routed_experts", &c->num_experts);
    null_is_zero(root, "n_shared_experts", &fc->n_shared_experts);
    null_is_zero(root, "n_group", &fc->n_group);
    null_is_zero(root, "topk_group", &fc->topk_group);
    null_is_zero(root, "num_experts_per_tok", &c->num_experts_per_tok);
    return moe8_cfg_read_yarn(root, label, c, err);
}

static moe8_status check_v2(const cJSON *root, const char *label, moe8_config *c,
                            moe8_error *err) {
    moe8_family_cfg *fc = MOE8_FAM(c);
    static const char *const methods[] = {"greedy", "group_limited_greedy", NULL};
    static const char *const scoring[] = {"softmax", NULL};
    const char *m, *s;
    moe8_status st;
    if ((st = check_common(root, label, c, err))) return st;
    if ((st = read_choice(root, label, "topk_method", methods, "greedy", &m, err)) ||
        (st = read_choice(root, label, "scoring_func", scoring, "softmax", &s, err)))
        return st;
    fc->topk_grouped = !strcmp(m, "group_limited_greedy");
    fc->group_top2 = 0;
    fc->scoring_sigmoid = 0;
    fc->e_score_bias = 0;
    return MOE8_OK;
}

static moe8_status check_v3(const cJSON *root, const char *label, moe8_config *c,
                            moe8_error *err) {
    static const char *const methods[] = {"noaux_tc", NULL};
    static const char *const scoring[] = {"sigmoid", NULL};
    const char *m, *s;
    moe8_status st;
    if ((st = check_common(root, label, c, err))) return st;
    if ((st = read_choice(root, label, "topk_method", methods, "noaux_tc", &m, err)) ||
        (st = read_choice(root, label, "scoring_func", scoring, "sigmoid", &s, err)) ||
        (st = moe8_cfg_read_bool(root, label, "rope_interleave", &MOE8_FAM(c)->rope_interleave, err)))
        return st;
    return MOE8_OK; /* rope_interleave false: transformers' rotate-half form */
}

/* After every integer key: the derived widths and the routing relations. */
static moe8_status finish(const char *label, moe8_config *c, moe8_error *err) {
    moe8_family_cfg *fc = MOE8_FAM(c);
    const int64_t E = c->num_experts;
    if (fc->qk_rope_head_dim % 2)
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': qk_rope_head_dim (%lld) must be even",
                         label, (long long)fc->qk_rope_head_dim);
    c->head_dim = fc->qk_nope_head_dim + fc->qk_rope_head_dim; /* a head_dim key is rotary-only */
    if (c->num_attention_heads * (fc->kv_lora_rank + fc->qk_rope_head_dim) > MOE8_CAP_ATTN_WIDTH ||
        c->num_attention_heads * fc->v_head_dim > MOE8_CAP_ATTN_WIDTH)
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': num_attention_heads x (kv_lora_rank + "
                         "qk_rope_head_dim) (%lld x %lld) or x v_head_dim (%lld) too large "
                         "(at most %lld)", label, (long long)c->num_attention_heads,
                         (long long)(fc->kv_lora_rank + fc->qk_rope_head_dim),
                         (long long)fc->v_head_dim, (long long)MOE8_CAP_ATTN_WIDTH);
    if (fc->yarn_factor > 0 && c->rope_theta == 1.0)
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': rope_theta 1 with yarn rope_scaling (its "
                         "correction dims divide by ln(rope_theta))", label);
    c->num_key_value_heads = c->num_attention_heads;
    fc->shared_expert_intermediate_size = fc->n_shared_experts * c->moe_intermediate_size;
    if (fc->shared_expert_intermediate_size > MOE8_CAP_WIDTH)
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': n_shared_experts x moe_intermediate_size "
                         "(%lld x %lld) too large", label, (long long)fc->n_shared_experts,
                         (long long)c->moe_intermediate_size);
    int any_moe = 0; /* first_k_dense_replace may leave every layer dense */
    for (int64_t l = 0; l < c->num_hidden_layers && !any_moe; l++)
        any_moe = l >= fc->first_k_dense_replace && l % fc->moe_layer_freq == 0;
    if (E > 0 && any_moe && c->num_experts_per_tok < 1)
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': num_experts_per_tok missing (needed "
                         "with %lld n_routed_experts)", label, (long long)E);
    if (E == 0 || !fc->topk_grouped) return MOE8_OK;
    if (c->arch == MOE8_ARCH_DEEPSEEK_V3 && !fc->n_group) fc->n_group = 1;
    if (c->arch == MOE8_ARCH_DEEPSEEK_V3 && !fc->topk_group) fc->topk_group = 1;
    return moe8_cfg_check_groups(label, c, err);
}

/* ---- make-model ---------------------------------------------------------- */

static moe8_status preset(moe8_preset p, moe8_config *c, moe8_error *err) {
    moe8_family_cfg *fc = MOE8_FAM(c);
    const int v3 = c->arch == MOE8_ARCH_DEEPSEEK_V3;
    if (v3) defaults_v3(c);
    else defaults_v2(c);
    if (p == MOE8_PRESET_TINY) {
        c->hidden_size = 256;
        c->num_attention_heads = 8;
        fc->qk_nope_head_dim = 32;
        fc->qk_rope_head_dim = 16;
        fc->v_head_dim = 32;
        fc->kv_lora_rank = 64;
        fc->q_lora_rank = v3 ? 96 : 0;  /* V2: q_proj (as V2-Lite); V3: the low-rank q */
        c->num_experts = 16;
        c->num_experts_per_tok = 4;
        fc->n_shared_experts = 1;
        c->moe_intermediate_size = 64;
        c->intermediate_size = 512;
        fc->first_k_dense_replace = 1;
        fc->n_group = 4;
        fc->topk_group = 2;
        c->max_position_embeddings = 8192;
        c->rope_theta = 10000.0;
        if (!v3) {  /* group-limited routing and YaRN, as DeepSeek-V2-Chat */
            fc->topk_grouped = 1;
            fc->yarn_factor = 4;
            fc->yarn_original_max_position_embeddings = 2048;
            fc->yarn_beta_fast = 32;
            fc->yarn_beta_slow = 1;
            fc->yarn_mscale = 0.707;
            fc->yarn_mscale_all_dim = 0.707;
        }
    } else if (p == MOE8_PRESET_SLICE && !v3) {  /* DeepSeek-V2-Lite */
        c->hidden_size = 2048;
        c->intermediate_size = 10944;
        c->moe_intermediate_size = 1408;
        c->num_attention_heads = 16;
        fc->kv_lora_rank = 512;
        fc->q_lora_rank = 0;
        fc->qk_nope_head_dim = 128;
        fc->qk_rope_head_dim = 64;
        fc->v_head_dim = 128;
        c->num_experts = 64;
        c->num_experts_per_tok = 6;
        fc->n_shared_experts = 2;
        fc->first_k_dense_replace = 1;
        fc->n_group = 1;
        fc->topk_group = 1;
        c->norm_topk_prob = 0;
        fc->routed_scaling_factor = 1.0;
        c->max_position_embeddings = 163840;
        fc->yarn_factor = 40;
        fc->yarn_original_max_position_embeddings = 4096;
        fc->yarn_beta_fast = 32;
        fc->yarn_beta_slow = 1;
        fc->yarn_mscale = 0.707;
        fc->yarn_mscale_all_dim = 0.707;
    } else if (p == MOE8_PRESET_SLICE) {  /* Moonlight-16B-A3B */
        c->hidden_size = 2048;
        c->intermediate_size = 11264;
        c->moe_intermediate_size = 1408;
        c->num_attention_heads = 16;
        fc->kv_lora_rank = 512;
        fc->q_lora_rank = 0;
        c->num_experts = 64;
        c->num_experts_per_tok = 6;
        fc->n_shared_experts = 2;
        fc->first_k_dense_replace = 1;
        fc->n_group = 1;
        fc->topk_group = 1;
        fc->routed_scaling_factor = 2.446;
        c->max_position_embeddings = 8192;
        c->rope_theta = 50000.0;
        c->rms_norm_eps = 1e-5;
    } else {
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "make-model: %s has the tiny and slice "
                         "presets", v3 ? "deepseek_v3" : "deepseek_v2");
    }
    c->num_hidden_layers = 4;     /* one dense layer, three MoE */
    c->vocab_size = DS_VOCAB;
    c->bos_token_id = DS_BOS;
    c->n_eos_ids = 1;
    c->eos_token_ids[0] = DS_EOS;
    c->tie_word_embeddings = 0;
    c->head_dim = fc->qk_nope_head_dim + fc->qk_rope_head_dim;
    c->num_key_value_heads = c->num_attention_heads;
    fc->shared_expert_intermediate_size = fc->n_shared_experts * c->moe_intermediate_size;
    return MOE8_OK;
}

static void add_int_or_null(cJSON *j, const char *key, int64_t v) {
    if (v) cJSON_AddNumberToObject(j, key, (double)v);
    else cJSON_AddNullToObject(j, key);
}

/* config.json as DeepSeek-V2-Lite's / Moonlight's (keys in their order). */
static cJSON *config_json(const moe8_config *c, moe8_dtype dt) {
    const moe8_family_cfg *fc = MOE8_FAM(c);
    const int v3 = c->arch == MOE8_ARCH_DEEPSEEK_V3;
    cJSON *j = cJSON_CreateObject(), *arr;
    if (!j) return NULL;
    arr = cJSON_AddArrayToObject(j, "architectures");
    cJSON_AddItemToArray(arr, cJSON_CreateString(v3 ? "DeepseekV3ForCausalLM"
                                                    : "DeepseekV2ForCausalLM"));
    cJSON_AddBoolToObject(j, "attention_bias", 0);
    cJSON_AddNumberToObject(j, "attention_dropout", 0);
    cJSON_AddNumberToObject(j, "aux_loss_alpha", 0.001);
    cJSON_AddNumberToObject(j, "bos_token_id", (double)c->bos_token_id);
    cJSON_AddNumberToObject(j, "eos_token_id", (double)c->eos_token_ids[0]);
    cJSON_AddNumberToObject(j, "first_k_dense_replace", (double)fc->first_k_dense_replace);
    cJSON_AddStringToObject(j, "hidden_act", "silu");
    cJSON_AddNumberToObject(j, "hidden_size", (double)c->hidden_size);
    cJSON_AddNumberToObject(j, "initializer_range", 0.02);
    cJSON_AddNumberToObject(j, "intermediate_size", (double)c->intermediate_size);
    cJSON_AddNumberToObject(j, "kv_lora_rank", (double)fc->kv_lora_rank);
    cJSON_AddNumberToObject(j, "max_position_embeddings", (double)c->max_position_embeddings);
    cJSON_AddStringToObject(j, "model_type", v3 ? "deepseek_v3" : "deepseek_v2");
    cJSON_AddNumberToObject(j, "moe_intermediate_size", (double)c->moe_intermediate_size);
    cJSON_AddNumberToObject(j, "moe_layer_freq", (double)fc->moe_layer_freq);
    add_int_or_null(j, "n_group", fc->n_group);
    cJSON_AddNumberToObject(j, "n_routed_experts", (double)c->num_experts);
    cJSON_AddNumberToObject(j, "n_shared_experts", (double)fc->n_shared_experts);
    cJSON_AddBoolToObject(j, "norm_topk_prob", c->norm_topk_prob);
    cJSON_AddNumberToObject(j, "num_attention_heads", (double)c->num_attention_heads);
    cJSON_AddNumberToObject(j, "num_experts_per_tok", (double)c->num_experts_per_tok);
    cJSON_AddNumberToObject(j, "num_hidden_layers", (double)c->num_hidden_layers);
    cJSON_AddNumberToObject(j, "num_key_value_heads", (double)c->num_key_value_heads);
    cJSON_AddNumberToObject(j, "pretraining_tp", 1);
    add_int_or_null(j, "q_lora_rank", fc->q_lora_rank);
    cJSON_AddNumberToObject(j, "qk_nope_head_dim", (double)fc->qk_nope_head_dim);
    cJSON_AddNumberToObject(j, "qk_rope_head_dim", (double)fc->qk_rope_head_dim);
    cJSON_AddNumberToObject(j, "rms_norm_eps", c->rms_norm_eps);
    if (fc->yarn_factor > 0) {
        cJSON *rs = cJSON_AddObjectToObject(j, "rope_scaling");
        cJSON_AddNumberToObject(rs, "beta_fast", fc->yarn_beta_fast);
        cJSON_AddNumberToObject(rs, "beta_slow", fc->yarn_beta_slow);
        cJSON_AddNumberToObject(rs, "factor", fc->yarn_factor);
        cJSON_AddNumberToObject(rs, "mscale", fc->yarn_mscale);
        cJSON_AddNumberToObject(rs, "mscale_all_dim", fc->yarn_mscale_all_dim);
        cJSON_AddNumberToObject(rs, "original_max_position_embeddings",
                                (double)fc->yarn_original_max_position_embeddings);
        cJSON_AddStringToObject(rs, "type", "yarn");
    } else {
        cJSON_AddNullToObject(j, "rope_scaling");
    }
    cJSON_AddNumberToObject(j, "rope_theta", c->rope_theta);
    cJSON_AddNumberToObject(j, "routed_scaling_factor", fc->routed_scaling_factor);
    cJSON_AddStringToObject(j, "scoring_func", v3 ? "sigmoid" : "softmax");
    cJSON_AddBoolToObject(j, "seq_aux", 1);
    cJSON_AddBoolToObject(j, "tie_word_embeddings", c->tie_word_embeddings);
    add_int_or_null(j, "topk_group", fc->topk_group);
    cJSON_AddStringToObject(j, "topk_method", v3 ? "noaux_tc"
                                              : fc->topk_grouped ? "group_limited_greedy"
                                                                : "greedy");
    cJSON_AddStringToObject(j, "torch_dtype", dt == MOE8_DT_F32 ? "float32" : "bfloat16");
    cJSON_AddBoolToObject(j, "use_cache", 1);
    cJSON_AddNumberToObject(j, "v_head_dim", (double)fc->v_head_dim);
    cJSON_AddNumberToObject(j, "vocab_size", (double)c->vocab_size);
    return j;
}

/* DeepSeek-V2-Lite-Chat's / DeepSeek-V3's generation_config.json. */
static cJSON *generation_json(const moe8_config *c) {
    cJSON *j = cJSON_CreateObject();
    if (!j) return NULL;
    cJSON_AddNumberToObject(j, "bos_token_id", (double)c->bos_token_id);
    cJSON_AddNumberToObject(j, "eos_token_id", (double)c->eos_token_ids[0]);
    cJSON_AddBoolToObject(j, "do_sample", 1);
    cJSON_AddNumberToObject(j, "temperature", c->arch == MOE8_ARCH_DEEPSEEK_V3 ? 0.6 : 0.3);
    cJSON_AddNumberToObject(j, "top_p", 0.95);
    return j;
}

#define DS_NAMES                                                                               \
    MOE8_NAMES_DECODER, MOE8_NAMES_MLP,                                                        \
    [MOE8_R_Q_A] = "model.layers.%lld.self_attn.q_a_proj",                                     \
    [MOE8_R_Q_A_NORM] = "model.layers.%lld.self_attn.q_a_layernorm",                           \
    [MOE8_R_Q_B] = "model.layers.%lld.self_attn.q_b_proj",                                     \
    [MOE8_R_KV_A] = "model.layers.%lld.self_attn.kv_a_proj_with_mqa",                          \
    [MOE8_R_KV_A_NORM] = "model.layers.%lld.self_attn.kv_a_layernorm",                         \
    [MOE8_R_KV_B] = "model.layers.%lld.self_attn.kv_b_proj",                                   \
    [MOE8_R_SHEXP_GATE] = "model.layers.%lld.mlp.shared_experts.gate_proj",                    \
    [MOE8_R_SHEXP_UP] = "model.layers.%lld.mlp.shared_experts.up_proj",                        \
    [MOE8_R_SHEXP_DOWN] = "model.layers.%lld.mlp.shared_experts.down_proj"

/* The two descriptors differ in their id, names of the class, defaults and checks. */
#define DS_DESC(ID, TYPE, CLASS, DEFAULTS, CHECK, RENORM)                                      \
    {                                                                                          \
        .id = ID, .model_type = TYPE, .hf_class = CLASS, .moe_block = "model.layers.%lld.mlp", \
        .names = {DS_NAMES},                                                                   \
        .kinds = {.attn = MOE8_ATTN_MLA, .rope = MOE8_ROPE_PAIRS,                              \
                  .layers = MOE8_LAYERS_FIRST_K_DENSE, .moe = MOE8_FFN_MOE_SHARED,             \
                  .shared_gate = MOE8_SHARED_SUM, .renorm = RENORM, .act = MOE8_ACT_SWIGLU},   \
        .fields = fields, .n_fields = (int)(sizeof fields / sizeof fields[0]),                 \
        .defaults = DEFAULTS, .check = CHECK, .finish = finish, .preset = preset,              \
        .config_json = config_json, .generation_json = generation_json,                        \
    }

const moe8_arch_desc moe8_arch_deepseek_v2 = DS_DESC(MOE8_ARCH_DEEPSEEK_V2, "deepseek_v2",
                                                     "DeepseekV2ForCausalLM", defaults_v2, check_v2,
                                                     MOE8_RENORM_OR_SCALE);
const moe8_arch_desc moe8_arch_deepseek_v3 = DS_DESC(MOE8_ARCH_DEEPSEEK_V3, "deepseek_v3",
                                                     "DeepseekV3ForCausalLM", defaults_v3, check_v3,
                                                     MOE8_RENORM_CONFIG);
