/*
 * export_gguf_gptoss.c — `moe8 export-gguf` of gpt_oss (gpt-oss-20b / 120b) as
 * llama.cpp's "gpt-oss" (convert_hf_to_gguf.py's GptOssModel; llama.cpp's
 * openai-moe model: its load_arch_hparams, load_arch_tensors and graph).
 *
 * Per layer: attn_norm; attn_{q,k,v} with their biases; attn_output with its
 * bias; attn_sinks.weight [n_head] (self_attn.sinks, F32);
 * post_attention_norm (the RMSNorm before the MoE: llama.cpp names
 * post_attention_layernorm ATTN_POST_NORM for this architecture);
 * ffn_gate_inp weight and bias (mlp.router, F32); the experts
 * ffn_{gate,up,down}_exps and their biases ffn_{gate,up,down}_exps.bias
 * [E][I] / [E][H] (F32). Every one of these is required by llama.cpp's
 * loader, so attention_bias false is refused.
 *
 * The experts: a folder as released (mlp.experts.gate_up_proj_blocks
 * [E][2I][H/32][16] and _scales [E][2I][H/32], U8; down_proj_* [E][H][I/32]...)
 * is written as MXFP4, its blocks repacked byte for byte
 * (export_gguf_write.c), whatever --type says: gate the even rows of
 * gate_up, up the odd ones. A float folder (make-model --float-experts,
 * transformers' layout gate_up_proj [E][H][2I], down_proj [E][I][H]) is
 * written in --type, transposed to [E][out][in], gate the even columns. The
 * biases split the same way (gate_up_proj_bias [E][2I]).
 *
 * Keys: the common ones (feed_forward_length and expert_feed_forward_length
 * both intermediate_size, as the converter writes them),
 * attention.sliding_window, and with rope_scaling yarn rope.scaling.{type,
 * factor, original_context_length, yarn_beta_fast, yarn_beta_slow}.
 * llama.cpp fixes what the checkpoint may not say otherwise, so it is
 * checked: the SwiGLU's limit 7 and alpha 1.702, softmax over the top-k
 * logits, and the sliding layers every other one from layer 0 (its default
 * sliding_window_pattern 2; another layer_types is refused, naming the
 * layer). YaRN's correction range: llama.cpp rounds it (floor / ceil) where
 * gpt-oss's truncate false leaves it unrounded, so a few rotary frequencies
 * differ slightly; a note says so (tests/data/llamacpp_crosscheck/
 * gpt_oss_tiny.md measures it).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "export_gguf.h"

static const xg_row rows[] = {
    {"attn_norm.weight", "input_layernorm.weight", XG_NORM_H, XG_ALWAYS, XG_X_NONE},
    {"attn_q.weight", "self_attn.q_proj.weight", XG_Q, XG_ALWAYS, XG_X_NONE},
    {"attn_q.bias", "self_attn.q_proj.bias", XG_BIAS_Q, XG_ALWAYS, XG_X_NONE},
    {"attn_k.weight", "self_attn.k_proj.weight", XG_KV, XG_ALWAYS, XG_X_NONE},
    {"attn_k.bias", "self_attn.k_proj.bias", XG_BIAS_KV, XG_ALWAYS, XG_X_NONE},
    {"attn_v.weight", "self_attn.v_proj.weight", XG_KV, XG_ALWAYS, XG_X_NONE},
    {"attn_v.bias", "self_attn.v_proj.bias", XG_BIAS_KV, XG_ALWAYS, XG_X_NONE},
    {"attn_output.weight", "self_attn.o_proj.weight", XG_O, XG_ALWAYS, XG_X_NONE},
    {"attn_output.bias", "self_attn.o_proj.bias", XG_NORM_H, XG_ALWAYS, XG_X_NONE},
    {"post_attention_norm.weight", "post_attention_layernorm.weight", XG_NORM_H, XG_ALWAYS, XG_X_NONE},
    {"ffn_gate_inp.weight", "mlp.router.weight", XG_ROUTER, XG_ALWAYS, XG_X_NONE},
    {"ffn_gate_inp.bias", "mlp.router.bias", XG_ROUTER_BIAS, XG_ALWAYS, XG_X_NONE},
};

/* ---- checks ------------------------------------------------------------------- */

/* config.json as JSON (what moe8_config does not keep: layer_types, truncate). */
static cJSON *config_json(const char *dir) {
    char path[4096], *buf = NULL;
    size_t len = 0;
    moe8_error err;
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (moe8_read_file(path, (size_t)16 << 20, &buf, &len, &err) != MOE8_OK) return NULL;
    cJSON *j = cJSON_ParseWithLength(buf, len);
    free(buf);
    return j;
}

static int check(const xg_plan *p) {
    const moe8_config *c = p->cfg;
    if (xg_check_sizes(p)) return -1;
    if (!moe8_config_get_int(c, "qkv_bias", NULL))
        return xg_fail("'%s/config.json': attention_bias false: llama.cpp's gpt-oss requires "
                       "the q/k/v/o biases", p->dir);
    double limit = moe8_config_get_num(c, "swiglu_limit", NULL);
    double alpha = moe8_config_get_num(c, "swiglu_alpha", NULL);
    if (limit != 7.0 || fabs(alpha - 1.702) > 1e-9)
        return xg_fail("'%s/config.json': swiglu_limit %g (alpha %g): llama.cpp's gpt-oss fixes "
                       "limit 7 and alpha 1.702", p->dir, limit, alpha);
    if (moe8_config_get_int(c, "sliding_window", NULL) <= 0)
        return xg_fail("'%s/config.json': no sliding_window: llama.cpp's gpt-oss needs one",
                       p->dir);
    cJSON *j = config_json(p->dir);
    if (!j) return xg_fail("'%s/config.json': cannot read it again", p->dir);
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(j, "layer_types"), *e;
    int l = 0, rc = 0;
    cJSON_ArrayForEach(e, lt) {
        const char *want = l % 2 ? "full_attention" : "sliding_attention";
        if (!cJSON_IsString(e) || strcmp(e->valuestring, want)) {
            rc = xg_fail("'%s/config.json': layer_types[%d] is not \"%s\": llama.cpp's gpt-oss "
                         "has sliding layers every other one from layer 0", p->dir, l, want);
            break;
        }
        l++;
    }
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(j, "rope_scaling");
    if (!rc && moe8_config_get_num(c, "yarn_factor", NULL) > 0 &&
        cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(rs, "truncate")))
        fprintf(stderr, "moe8 " CMD ": note: rope_scaling.truncate is false (YaRN's correction "
                        "range unrounded); llama.cpp rounds it, so a few rotary frequencies "
                        "differ slightly\n");
    cJSON_Delete(j);
    return rc;
}

/* ---- tensors ------------------------------------------------------------------ */

/* The U8 tensor `name` of shape [a][b][c] (d > 0: [a][b][c][d]), or NULL after a message. */
static const moe8_tensor *need_u8(xg_plan *p, const char *name, int64_t a, int64_t b,
                                  int64_t c, int64_t d) {
    const moe8_tensor *t = moe8_st_find(p->st, name);
    const int nd = d ? 4 : 3;
    if (!t) {
        xg_fail("'%s': tensor '%s' is missing", p->dir, name);
        return NULL;
    }
    if (t->dtype != MOE8_DT_U8 || t->n_dims != nd || t->shape[0] != a || t->shape[1] != b ||
        t->shape[2] != c || (d && t->shape[3] != d)) {
        if (d)
            xg_fail("'%s': tensor '%s' is not U8 [%lld, %lld, %lld, %lld] (MXFP4 blocks)", p->dir,
                    name, (long long)a, (long long)b, (long long)c, (long long)d);
        else
            xg_fail("'%s': tensor '%s' is not U8 [%lld, %lld, %lld] (MXFP4 scales)", p->dir,
                    name, (long long)a, (long long)b, (long long)c);
        return NULL;
    }
    return t;
}

/* An expert tensor blk.l.<what> [E][rows][cols] of type `type` from one source. */
static xg_tensor *add_exps(xg_plan *p, int64_t l, const char *what, int type, int64_t rows,
                           int64_t cols, const moe8_tensor *src) {
    const int64_t E = p->cfg->num_experts;
    char g[64];
    snprintf(g, sizeof g, "blk.%lld.%s", (long long)l, what);
    xg_tensor *t = xg_add(p, g, type, 1, rows, cols);
    if (!t) return NULL;
    t->n_dims = 3, t->ne[2] = (uint64_t)E, t->n_bytes *= (uint64_t)E;
    t->src[0] = src;
    return t;
}

/* row_of [E][rows]: the source row (MXFP4: e 2I + 2i + k; transposed: 2i + k) or
 * column of each row; k the half (0 gate, 1 up), k -1 the row itself. */
static int rows_of(xg_tensor *t, int64_t E, int64_t rows, int k, int global) {
    if (!(t->row_of = malloc((size_t)(E * rows) * sizeof *t->row_of)))
        return xg_fail("out of memory");
    for (int64_t e = 0; e < E; e++)
        for (int64_t i = 0; i < rows; i++)
            t->row_of[e * rows + i] = (global ? e * (k < 0 ? rows : 2 * rows) : 0) +
                                      (k < 0 ? i : 2 * i + k);
    return 0;
}

static int mxfp4_experts(xg_plan *p, int64_t l) {
    const moe8_config *c = p->cfg;
    const int64_t E = c->num_experts, I = c->moe_intermediate_size, H = c->hidden_size;
    char h[3][160];
    const moe8_tensor *s[4];
    xg_layer_name(p, l, "mlp.experts.gate_up_proj_blocks", h[0], sizeof h[0]);
    xg_layer_name(p, l, "mlp.experts.gate_up_proj_scales", h[1], sizeof h[1]);
    if (!(s[0] = need_u8(p, h[0], E, 2 * I, H / 32, 16)) ||
        !(s[1] = need_u8(p, h[1], E, 2 * I, H / 32, 0)))
        return -1;
    xg_layer_name(p, l, "mlp.experts.down_proj_blocks", h[0], sizeof h[0]);
    xg_layer_name(p, l, "mlp.experts.down_proj_scales", h[1], sizeof h[1]);
    if (!(s[2] = need_u8(p, h[0], E, H, I / 32, 16)) || !(s[3] = need_u8(p, h[1], E, H, I / 32, 0)))
        return -1;
    for (int k = 0; k < 3; k++) {
        static const char *const names[3] = {"ffn_gate_exps.weight", "ffn_up_exps.weight",
                                             "ffn_down_exps.weight"};
        xg_tensor *t = add_exps(p, l, names[k], GGML_MXFP4, k == 2 ? H : I, k == 2 ? I : H,
                                s[k == 2 ? 2 : 0]);
        if (!t) return -1;
        t->scales = s[k == 2 ? 3 : 1];
        if (k < 2 && rows_of(t, E, I, k, 1)) return -1;
    }
    return 0;
}

static int float_experts(xg_plan *p, int64_t l) {
    const moe8_config *c = p->cfg;
    const int64_t E = c->num_experts, I = c->moe_intermediate_size, H = c->hidden_size;
    char h[160];
    xg_layer_name(p, l, "mlp.experts.gate_up_proj", h, sizeof h);
    const moe8_tensor *gu = xg_need3(p, h, E, H, 2 * I);
    xg_layer_name(p, l, "mlp.experts.down_proj", h, sizeof h);
    const moe8_tensor *dn = gu ? xg_need3(p, h, E, I, H) : NULL;
    if (!dn) return -1;
    for (int k = 0; k < 3; k++) {
        static const char *const names[3] = {"ffn_gate_exps.weight", "ffn_up_exps.weight",
                                             "ffn_down_exps.weight"};
        xg_tensor *t = add_exps(p, l, names[k], p->wtype, k == 2 ? H : I, k == 2 ? I : H,
                                k == 2 ? dn : gu);
        if (!t) return -1;
        t->transposed = 1;
        t->src_cols = k == 2 ? H : 2 * I;
        if (rows_of(t, E, k == 2 ? H : I, k == 2 ? -1 : k, 0)) return -1;
    }
    return 0;
}

/* The experts' biases: gate / up the even / odd columns of gate_up_proj_bias. */
static int expert_biases(xg_plan *p, int64_t l) {
    const moe8_config *c = p->cfg;
    const int64_t E = c->num_experts, I = c->moe_intermediate_size, H = c->hidden_size;
    char h[160], g[64];
    xg_layer_name(p, l, "mlp.experts.gate_up_proj_bias", h, sizeof h);
    const moe8_tensor *gu = xg_need(p, h, E, 2 * I);
    xg_layer_name(p, l, "mlp.experts.down_proj_bias", h, sizeof h);
    const moe8_tensor *dn = gu ? xg_need(p, h, E, H) : NULL;
    if (!dn) return -1;
    for (int k = 0; k < 3; k++) {
        static const char *const names[3] = {"ffn_gate_exps.bias", "ffn_up_exps.bias",
                                             "ffn_down_exps.bias"};
        snprintf(g, sizeof g, "blk.%lld.%s", (long long)l, names[k]);
        xg_tensor *t = xg_add(p, g, GGML_F32, 1, E, k == 2 ? H : I);
        if (!t) return -1;
        t->src[0] = k == 2 ? dn : gu;
        if (k == 2) continue;
        t->src_cols = 2 * I;
        if (!(t->col_of = malloc((size_t)I * sizeof *t->col_of))) return xg_fail("out of memory");
        for (int64_t i = 0; i < I; i++) t->col_of[i] = 2 * i + k;
    }
    return 0;
}

/* After the table's rows: the sinks, the experts (MXFP4 or float), their biases. */
static int layer(xg_plan *p, int64_t l) {
    const int64_t NH = p->cfg->num_attention_heads;
    char h[160], g[64];
    xg_layer_name(p, l, "self_attn.sinks", h, sizeof h);
    const moe8_tensor *s = xg_need(p, h, NH, 0);
    snprintf(g, sizeof g, "blk.%lld.attn_sinks.weight", (long long)l);
    xg_tensor *t = s ? xg_add(p, g, GGML_F32, 1, NH, 0) : NULL;
    if (!t) return -1;
    t->src[0] = s;
    xg_layer_name(p, l, "mlp.experts.gate_up_proj_blocks", h, sizeof h);
    if (moe8_st_find(p->st, h) ? mxfp4_experts(p, l) : float_experts(p, l)) return -1;
    return expert_biases(p, l);
}

static void hparams(xg_kvs *k, const xg_plan *p) {
    const moe8_config *c = p->cfg;
    const char *a = p->fam->arch;
    xg_common_hparams(k, p, c->head_dim, c->moe_intermediate_size);
    xg_kv_au32(k, a, "attention.sliding_window",
               (uint32_t)moe8_config_get_int(c, "sliding_window", NULL));
    if (moe8_config_get_num(c, "yarn_factor", NULL) > 0) {
        char key[96];
        snprintf(key, sizeof key, "%s.rope.scaling.type", a);
        xg_kv_str(k, key, "yarn");
        xg_kv_af32(k, a, "rope.scaling.factor", (float)moe8_config_get_num(c, "yarn_factor", NULL));
        xg_kv_au32(k, a, "rope.scaling.original_context_length",
                   (uint32_t)moe8_config_get_int(c, "yarn_original_max_position_embeddings", NULL));
        xg_kv_af32(k, a, "rope.scaling.yarn_beta_fast",
                   (float)moe8_config_get_num(c, "yarn_beta_fast", NULL));
        xg_kv_af32(k, a, "rope.scaling.yarn_beta_slow",
                   (float)moe8_config_get_num(c, "yarn_beta_slow", NULL));
    }
}

const xg_family xg_gpt_oss = {
    .model_arch = MOE8_ARCH_GPT_OSS,
    .arch = "gpt-oss",
    .pre = "gpt-4o",
    .rows = rows,
    .n_rows = (int)(sizeof rows / sizeof rows[0]),
    .check = check,
    .hparams = hparams,
    .output_required = 1,
    .layer = layer,
    .own_experts = 1,
};
