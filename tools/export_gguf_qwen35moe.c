/*
 * export_gguf_qwen35moe.c — `moe8 export-gguf` of qwen3_5_moe (Qwen3.5 /
 * Qwen3.6-MoE, the text model of Qwen3_5MoeForConditionalGeneration) as
 * llama.cpp's "qwen35moe" (convert_hf_to_gguf.py's Qwen3_5MoeTextModel over
 * _LinearAttentionVReorderBase, Qwen3NextModel and Qwen2MoeModel; llama.cpp's
 * qwen35moe model: load_arch_hparams, load_arch_tensors). Cross-checked
 * against llama.cpp: scripts/crosscheck_llamacpp.sh,
 * tests/data/llamacpp_crosscheck/qwen3_5_moe_tiny.md.
 *
 * As qwen3next (export_gguf_qwen3next.c: zero-centred norms written 1 + w,
 * ssm_a = -exp(A_log), conv1d squeezed to [C][K], the gated q_proj, the
 * shared expert and its gate, the same keys and refusals) with:
 *   names       under model.language_model. (the converter drops
 *               "language_model."); lm_head.weight at the top; the vision
 *               tower and mtp.* not exported
 *   projections the flat ones as their own tensors: attn_qkv (in_proj_qkv),
 *               attn_gate (in_proj_z), ssm_beta (in_proj_b), ssm_alpha
 *               (in_proj_a), no ssm_ba
 *   value heads the converter's reorder from grouped to tiled: with Kh key
 *               heads and r = Vh / Kh value heads each, Hugging Face's value
 *               head g r + j (key head g, j < r) becomes head j Kh + g
 *               (ggml broadcasts the key heads tiled). Applied to the v rows
 *               of in_proj_qkv and the v channels of conv1d (each head's dv
 *               rows), the rows of in_proj_z (dv per head), of in_proj_b and
 *               in_proj_a and the values of A_log and dt_bias (one per head),
 *               and the columns of out_proj (dv per head); nothing when
 *               Kh = Vh. linear_attn.norm [dv] is per head dim: unchanged
 *   experts     stacked in the checkpoint (mlp.experts.gate_up_proj [E][2I][H]
 *               split into ffn_gate_exps / ffn_up_exps, down_proj as it is;
 *               export_gguf_plan.c), or per expert where a folder has those
 *   keys        rope.dimension_sections: rope_parameters.mrope_section
 *               padded to 4 or cut there (llama.cpp requires the key; its interleaved
 *               M-RoPE gives every section the token's position for text, so
 *               the sections do not change text's numbers); [rotary / 2, 0,
 *               0, 0] when config.json has none
 *   tokenizer   tokenizer.ggml.pre "qwen35" (Qwen3.5's pre-tokenizer, what the
 *               converter names for its tokenizer)
 */
#include <stdlib.h>
#include <string.h>

#include "export_gguf.h"

static const xg_row rows[] = {
    {"attn_norm.weight", "input_layernorm.weight", XG_NORM_H, XG_ALWAYS, XG_X_PLUS1},
    {"post_attention_norm.weight", "post_attention_layernorm.weight", XG_NORM_H, XG_ALWAYS,
     XG_X_PLUS1},
    {"ssm_norm.weight", "linear_attn.norm.weight", XG_GDN_NORM, XG_IF_LINEAR, XG_X_NONE},
    {"attn_q.weight", "self_attn.q_proj.weight", XG_Q_GATED, XG_IF_FULL, XG_X_NONE},
    {"attn_k.weight", "self_attn.k_proj.weight", XG_KV, XG_IF_FULL, XG_X_NONE},
    {"attn_v.weight", "self_attn.v_proj.weight", XG_KV, XG_IF_FULL, XG_X_NONE},
    {"attn_output.weight", "self_attn.o_proj.weight", XG_O, XG_IF_FULL, XG_X_NONE},
    {"attn_q_norm.weight", "self_attn.q_norm.weight", XG_NORM_D, XG_IF_FULL, XG_X_PLUS1},
    {"attn_k_norm.weight", "self_attn.k_norm.weight", XG_NORM_D, XG_IF_FULL, XG_X_PLUS1},
    {"ffn_gate_inp.weight", "mlp.gate.weight", XG_ROUTER, XG_ALWAYS, XG_X_NONE},
    {"ffn_gate_shexp.weight", "mlp.shared_expert.gate_proj.weight", XG_SHARED_GU, XG_ALWAYS,
     XG_X_NONE},
    {"ffn_up_shexp.weight", "mlp.shared_expert.up_proj.weight", XG_SHARED_GU, XG_ALWAYS,
     XG_X_NONE},
    {"ffn_down_shexp.weight", "mlp.shared_expert.down_proj.weight", XG_SHARED_D, XG_ALWAYS,
     XG_X_NONE},
};

static int64_t cfg_int(const xg_plan *p, const char *name) {
    return moe8_config_get_int(p->cfg, name, NULL);
}

/* The tiled index of Hugging Face's value-head index i of n = Kh r heads of
 * width w (element i = (g r + j) w + d goes to (j Kh + g) w + d): the
 * converter's _reorder_v_heads. Written as "source of each destination". */
static void tiled_sources(int64_t *src_of, int64_t Kh, int64_t r, int64_t w, int64_t base) {
    for (int64_t g = 0; g < Kh; g++)
        for (int64_t j = 0; j < r; j++)
            for (int64_t d = 0; d < w; d++)
                src_of[(j * Kh + g) * w + d] = base + (g * r + j) * w + d;
}

/* An order of n entries: `keep` as they are, then the value heads of width w
 * tiled; NULL after a message. */
static int64_t *order(const xg_plan *p, int64_t keep, int64_t w) {
    const int64_t Kh = cfg_int(p, "linear_num_key_heads"), Vh = cfg_int(p, "linear_num_value_heads");
    int64_t *o = malloc((size_t)(keep + Vh * w) * sizeof *o);
    if (!o) {
        xg_fail("out of memory");
        return NULL;
    }
    for (int64_t i = 0; i < keep; i++) o[i] = i;
    tiled_sources(o + keep, Kh, Vh / Kh, w, keep);
    return o;
}

/* GGUF tensor `gname` of layer l from `hf` [rows][cols] (cols 0: 1-D), its
 * rows (2-D) or values (1-D) after `keep` reordered by value head of width
 * w (w 0: the columns, by heads of dv). */
static int add_v(xg_plan *p, int64_t l, const char *gname, const char *hf, int type,
                 int64_t rows, int64_t cols, int64_t keep, int64_t w, int xform) {
    char g[64], h[160];
    xg_layer_name(p, l, hf, h, sizeof h);
    snprintf(g, sizeof g, "blk.%lld.%s", (long long)l, gname);
    const moe8_tensor *t = xg_need(p, h, rows, cols);
    xg_tensor *x = t ? xg_add(p, g, type, 1, rows, cols) : NULL;
    if (!x) return -1;
    x->src[0] = t;
    x->xform = xform;
    if (cols && w) return (x->row_of = order(p, keep, w)) ? 0 : -1;
    return (x->col_of = order(p, keep, w ? w : cfg_int(p, "linear_value_head_dim"))) ? 0 : -1;
}

/* The Gated DeltaNet tensors (value heads tiled) and the shared expert's gate. */
static int layer(xg_plan *p, int64_t l) {
    const int64_t H = p->cfg->hidden_size, Kh = cfg_int(p, "linear_num_key_heads");
    const int64_t Vh = cfg_int(p, "linear_num_value_heads"), dk = cfg_int(p, "linear_key_head_dim");
    const int64_t dv = cfg_int(p, "linear_value_head_dim"), K = cfg_int(p, "linear_conv_kernel_dim");
    const int64_t C = 2 * Kh * dk + Vh * dv;
    const int w = p->wtype;
    char g[64], h[160];
    if (xg_is_linear_layer(p, l)) {
        if (add_v(p, l, "attn_qkv.weight", "linear_attn.in_proj_qkv.weight", w, C, H, 2 * Kh * dk,
                  dv, XG_X_NONE) ||
            add_v(p, l, "attn_gate.weight", "linear_attn.in_proj_z.weight", w, Vh * dv, H, 0, dv,
                  XG_X_NONE) ||
            add_v(p, l, "ssm_beta.weight", "linear_attn.in_proj_b.weight", w, Vh, H, 0, 1,
                  XG_X_NONE) ||
            add_v(p, l, "ssm_alpha.weight", "linear_attn.in_proj_a.weight", w, Vh, H, 0, 1,
                  XG_X_NONE) ||
            add_v(p, l, "ssm_dt.bias", "linear_attn.dt_bias", GGML_F32, Vh, 0, 0, 1, XG_X_NONE) ||
            add_v(p, l, "ssm_a", "linear_attn.A_log", GGML_F32, Vh, 0, 0, 1, XG_X_NEG_EXP) ||
            add_v(p, l, "ssm_out.weight", "linear_attn.out_proj.weight", w, H, Vh * dv, 0, 0,
                  XG_X_NONE))
            return -1;
        xg_layer_name(p, l, "linear_attn.conv1d.weight", h, sizeof h);
        const moe8_tensor *t = moe8_st_find(p->st, h);
        if (!t) return xg_fail("'%s': tensor '%s' is missing", p->dir, h);
        if (t->n_dims != 3 || t->shape[0] != C || t->shape[1] != 1 || t->shape[2] != K)
            return xg_fail("'%s': tensor '%s' is not [%lld, 1, %lld]", p->dir, h, (long long)C,
                           (long long)K);
        if (t->dtype != MOE8_DT_F32 && t->dtype != MOE8_DT_F16 && t->dtype != MOE8_DT_BF16)
            return xg_fail("'%s': tensor '%s' is %s: only float models are exported", p->dir, h,
                           moe8_dtype_name(t->dtype));
        snprintf(g, sizeof g, "blk.%lld.ssm_conv1d.weight", (long long)l);
        xg_tensor *cv = xg_add(p, g, GGML_F32, 1, C, K);
        if (!cv) return -1;
        cv->src[0] = t;
        if (!(cv->row_of = order(p, 2 * Kh * dk, dv))) return -1;
    }
    xg_layer_name(p, l, "mlp.shared_expert_gate.weight", h, sizeof h);
    const moe8_tensor *sg = xg_need(p, h, 1, H);
    snprintf(g, sizeof g, "blk.%lld.ffn_gate_inp_shexp.weight", (long long)l);
    xg_tensor *t = sg ? xg_add(p, g, GGML_F32, 1, H, 0) : NULL;
    if (!t) return -1;
    t->src[0] = sg;
    return 0;
}

/* rope_parameters.mrope_section of config.json (under text_config), padded
 * with zeros to 4; [half, 0, 0, 0] without one. */
static void mrope_sections(const xg_plan *p, int64_t half, uint32_t out[4]) {
    char path[4096];
    char *buf = NULL;
    size_t len = 0;
    moe8_error err;
    out[0] = (uint32_t)half, out[1] = out[2] = out[3] = 0;
    snprintf(path, sizeof path, "%s/config.json", p->dir);
    if (moe8_read_file(path, (size_t)16 << 20, &buf, &len, &err) != MOE8_OK) return;
    cJSON *root = cJSON_ParseWithLength(buf, len);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "text_config");
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(cJSON_IsObject(t) ? t : root, "rope_parameters");
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(r, "mrope_section"), *e;
    int i = 0;
    if (cJSON_IsArray(s) && cJSON_GetArraySize(s) > 0) {
        out[0] = 0;
        cJSON_ArrayForEach(e, s) {
            if (i < 4) out[i] = cJSON_IsNumber(e) && e->valuedouble >= 0 ? (uint32_t)e->valuedouble : 0;
            i++;
        }
    }
    cJSON_Delete(root);
    free(buf);
}

static void hparams(xg_kvs *k, const xg_plan *p) {
    double f = moe8_config_get_num(p->cfg, "partial_rotary_factor", NULL);
    int64_t D = p->cfg->head_dim, rope = f > 0 ? (int64_t)((double)D * f + 0.5) : D;
    uint32_t sec[4];
    char key[96];
    xg_hybrid_hparams(k, p);
    mrope_sections(p, rope / 2, sec);
    snprintf(key, sizeof key, "%s.rope.dimension_sections", p->fam->arch);
    xg_kv_arr(k, key, GV_I32, 4);
    for (int i = 0; i < 4; i++) xg_put_u32(&k->b, sec[i]);
}

const xg_family xg_qwen35moe = {
    .model_arch = MOE8_ARCH_QWEN3_5_MOE,
    .arch = "qwen35moe",
    .pre = "qwen35",
    .rows = rows,
    .n_rows = (int)(sizeof rows / sizeof rows[0]),
    .expert_fmt = "mlp.experts.%lld.%s.weight",
    .exp_names = {"gate_proj", "up_proj", "down_proj"},
    .check = xg_hybrid_check,
    .hparams = hparams,
    .layer = layer,
    .output_norm_xform = XG_X_PLUS1,
    .prefix = "model.language_model.",
};
