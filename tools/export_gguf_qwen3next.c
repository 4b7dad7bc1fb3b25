/*
 * export_gguf_qwen3next.c — `moe8 export-gguf` of qwen3_next (Qwen3-Next) as
 * llama.cpp's "qwen3next" (convert_hf_to_gguf.py's Qwen3NextModel, over
 * Qwen2MoeModel; llama.cpp's qwen3next model: its load_arch_hparams,
 * load_arch_tensors and graph). Cross-checked against llama.cpp:
 * scripts/crosscheck_llamacpp.sh, tests/data/llamacpp_crosscheck/.
 *
 * Per layer: attn_norm and post_attention_norm (input / post-attention
 * RMSNorm, zero-centred: written 1 + w, as the converter does for every
 * "norm.weight" but linear_attn.norm); then
 * - Gated DeltaNet layers: attn_qkv = the q, k, v rows of
 *   linear_attn.in_proj_qkvz (grouped by key head [q dk, k dk, v r dv,
 *   z r dv], r = value heads / key heads) regrouped as [all q, all k, all v],
 *   attn_gate = its z rows (the converter's split); ssm_conv1d (conv1d
 *   [C][1][K] squeezed to [C][K], F32); ssm_dt.bias (dt_bias); ssm_a =
 *   -exp(A_log); ssm_ba (in_proj_ba as is); ssm_norm (linear_attn.norm, a
 *   plain gated RMSNorm: no +1); ssm_out (out_proj);
 * - full-attention layers: attn_q [2 x heads x D] (per head query then
 *   gate, as llama.cpp splits it), attn_k, attn_v, attn_output, attn_q_norm
 *   and attn_k_norm [D] (1 + w);
 * then ffn_gate_inp (F32), the stacked experts, ffn_gate_inp_shexp
 * (mlp.shared_expert_gate [1][H] as [H], F32) and ffn_{gate,up,down}_shexp.
 * output_norm is 1 + w too.
 *
 * Keys: the common ones (feed_forward_length intermediate_size,
 * rope.dimension_count head_dim x partial_rotary_factor), then
 * expert_shared_feed_forward_length, ssm.conv_kernel, ssm.state_size
 * (linear_key_head_dim), ssm.group_count (key heads), ssm.time_step_rank
 * (value heads), ssm.inner_size (value heads x linear_value_head_dim) and
 * full_attention_interval (llama.cpp's loader makes every layer but each
 * interval-th recurrent from it).
 * Refused: dense layers (llama.cpp's qwen3next is MoE only), a
 * layer_types list that is not the interval's pattern (no recurrent_layers
 * array written yet), linear key and value head dims that differ (llama.cpp
 * sizes both by ssm.state_size), a model without the attention output gate
 * or the shared expert. The MTP tensors (mtp.*) are not exported (moe8 never
 * reads them; llama.cpp runs without them). The checks and keys are shared
 * with qwen35moe (xg_hybrid_check, xg_hybrid_hparams; export_gguf_qwen35moe.c).
 */
#include <stdlib.h>
#include <string.h>

#include "export_gguf.h"

static const xg_row rows[] = {
    {"attn_norm.weight", "input_layernorm.weight", XG_NORM_H, XG_ALWAYS, XG_X_PLUS1},
    {"post_attention_norm.weight", "post_attention_layernorm.weight", XG_NORM_H, XG_ALWAYS,
     XG_X_PLUS1},
    {"ssm_dt.bias", "linear_attn.dt_bias", XG_GDN_V, XG_IF_LINEAR, XG_X_NONE},
    {"ssm_a", "linear_attn.A_log", XG_GDN_V, XG_IF_LINEAR, XG_X_NEG_EXP},
    {"ssm_ba.weight", "linear_attn.in_proj_ba.weight", XG_GDN_BA, XG_IF_LINEAR, XG_X_NONE},
    {"ssm_norm.weight", "linear_attn.norm.weight", XG_GDN_NORM, XG_IF_LINEAR, XG_X_NONE},
    {"ssm_out.weight", "linear_attn.out_proj.weight", XG_GDN_OUT, XG_IF_LINEAR, XG_X_NONE},
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

/* layer_types, when config.json has it (under text_config for a nested text
 * model), must be the interval's pattern. */
static int check_layer_types(const xg_plan *p) {
    char path[4096];
    size_t n = 0;
    snprintf(path, sizeof path, "%s/config.json", p->dir);
    FILE *f = fopen(path, "rb");
    if (!f) return xg_fail("cannot open '%s'", path);
    char *buf = malloc((size_t)1 << 20);
    if (buf) n = fread(buf, 1, ((size_t)1 << 20) - 1, f);
    fclose(f);
    if (!buf) return xg_fail("out of memory");
    buf[n] = 0;
    cJSON *root = cJSON_Parse(buf), *lt = root ? cJSON_GetObjectItemCaseSensitive(root, "layer_types") : NULL;
    const cJSON *text = root ? cJSON_GetObjectItemCaseSensitive(root, "text_config") : NULL;
    if (!lt && cJSON_IsObject(text)) lt = cJSON_GetObjectItemCaseSensitive(text, "layer_types");
    int rc = 0, i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, lt) {
        int linear = cJSON_IsString(e) && !strcmp(e->valuestring, "linear_attention");
        if (i < p->n_layers && linear != xg_is_linear_layer(p, i)) {
            rc = xg_fail("'%s': layer_types[%d] is not the full_attention_interval pattern: "
                         "not supported yet by export-gguf (llama.cpp's recurrent_layers)", path, i);
            break;
        }
        i++;
    }
    cJSON_Delete(root);
    free(buf);
    return rc;
}

int xg_hybrid_check(const xg_plan *p) {
    const moe8_config *c = p->cfg;
    const char *a = p->fam->arch;
    if (xg_check_sizes(p)) return -1;
    for (int64_t l = 0; l < c->num_hidden_layers; l++)
        if (!moe8_config_is_moe_layer(c, l))
            return xg_fail("'%s/config.json': layer %lld has a dense MLP (mlp_only_layers / "
                           "decoder_sparse_step): llama.cpp's %s has MoE layers only",
                           p->dir, (long long)l, a);
    if (cfg_int(p, "linear_key_head_dim") != cfg_int(p, "linear_value_head_dim"))
        return xg_fail("'%s/config.json': linear_key_head_dim %lld != linear_value_head_dim %lld: "
                       "llama.cpp's %s sizes both by ssm.state_size", p->dir,
                       (long long)cfg_int(p, "linear_key_head_dim"),
                       (long long)cfg_int(p, "linear_value_head_dim"), a);
    if (!cfg_int(p, "attn_output_gate"))
        return xg_fail("'%s/config.json': attn_output_gate false: llama.cpp's %s always "
                       "gates the attention output", p->dir, a);
    if (cfg_int(p, "shared_expert_intermediate_size") <= 0)
        return xg_fail("'%s/config.json': no shared expert: llama.cpp's %s requires one",
                       p->dir, a);
    if (!c->norm_topk_prob)
        fprintf(stderr, "moe8 " CMD ": warning: norm_topk_prob is false, but llama.cpp's "
                        "%s always renormalizes the top-k weights: its outputs will differ\n", a);
    return check_layer_types(p);
}

/* attn_qkv and attn_gate from in_proj_qkvz (regrouped), ssm_conv1d
 * (squeezed), ffn_gate_inp_shexp ([1][H] as [H]). */
static int layer(xg_plan *p, int64_t l) {
    const int64_t H = p->cfg->hidden_size, Kh = cfg_int(p, "linear_num_key_heads");
    const int64_t Vh = cfg_int(p, "linear_num_value_heads"), dk = cfg_int(p, "linear_key_head_dim");
    const int64_t dv = cfg_int(p, "linear_value_head_dim"), K = cfg_int(p, "linear_conv_kernel_dim");
    const int64_t rv = Vh / Kh * dv, G = 2 * dk + 2 * rv, C = 2 * Kh * dk + Vh * dv;
    char g[64], h[160];
    if (xg_is_linear_layer(p, l)) {
        snprintf(h, sizeof h, "model.layers.%lld.linear_attn.in_proj_qkvz.weight", (long long)l);
        const moe8_tensor *t = xg_need(p, h, Kh * G, H);
        if (!t) return -1;
        snprintf(g, sizeof g, "blk.%lld.attn_qkv.weight", (long long)l);
        xg_tensor *qkv = xg_add(p, g, p->wtype, 1, C, H);
        snprintf(g, sizeof g, "blk.%lld.attn_gate.weight", (long long)l);
        xg_tensor *z = qkv ? xg_add(p, g, p->wtype, 1, Vh * dv, H) : NULL;
        if (!z) return -1;
        qkv = z - 1;
        qkv->src[0] = z->src[0] = t;
        qkv->row_of = malloc((size_t)C * sizeof *qkv->row_of);
        z->row_of = malloc((size_t)(Vh * dv) * sizeof *z->row_of);
        if (!qkv->row_of || !z->row_of) return xg_fail("out of memory");
        for (int64_t k = 0; k < Kh; k++) {
            for (int64_t i = 0; i < dk; i++) {
                qkv->row_of[k * dk + i] = k * G + i;                /* q */
                qkv->row_of[Kh * dk + k * dk + i] = k * G + dk + i; /* k */
            }
            for (int64_t i = 0; i < rv; i++) {
                qkv->row_of[2 * Kh * dk + k * rv + i] = k * G + 2 * dk + i; /* v */
                z->row_of[k * rv + i] = k * G + 2 * dk + rv + i;
            }
        }
        snprintf(h, sizeof h, "model.layers.%lld.linear_attn.conv1d.weight", (long long)l);
        t = moe8_st_find(p->st, h);
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
    }
    snprintf(h, sizeof h, "model.layers.%lld.mlp.shared_expert_gate.weight", (long long)l);
    const moe8_tensor *sg = xg_need(p, h, 1, H);
    snprintf(g, sizeof g, "blk.%lld.ffn_gate_inp_shexp.weight", (long long)l);
    xg_tensor *t = sg ? xg_add(p, g, GGML_F32, 1, H, 0) : NULL;
    if (!t) return -1;
    t->src[0] = sg;
    return 0;
}

void xg_hybrid_hparams(xg_kvs *k, const xg_plan *p) {
    const char *a = p->fam->arch;
    double f = moe8_config_get_num(p->cfg, "partial_rotary_factor", NULL);
    int64_t D = p->cfg->head_dim, rope = f > 0 ? (int64_t)((double)D * f + 0.5) : D;
    xg_common_hparams(k, p, rope, p->cfg->intermediate_size);
    xg_kv_au32(k, a, "expert_shared_feed_forward_length",
               (uint32_t)cfg_int(p, "shared_expert_intermediate_size"));
    xg_kv_au32(k, a, "ssm.conv_kernel", (uint32_t)cfg_int(p, "linear_conv_kernel_dim"));
    xg_kv_au32(k, a, "ssm.state_size", (uint32_t)cfg_int(p, "linear_key_head_dim"));
    xg_kv_au32(k, a, "ssm.group_count", (uint32_t)cfg_int(p, "linear_num_key_heads"));
    xg_kv_au32(k, a, "ssm.time_step_rank", (uint32_t)cfg_int(p, "linear_num_value_heads"));
    xg_kv_au32(k, a, "ssm.inner_size",
               (uint32_t)(cfg_int(p, "linear_num_value_heads") * cfg_int(p, "linear_value_head_dim")));
    xg_kv_au32(k, a, "full_attention_interval", (uint32_t)cfg_int(p, "full_attention_interval"));
}

const xg_family xg_qwen3next = {
    .model_arch = MOE8_ARCH_QWEN3_NEXT,
    .arch = "qwen3next",
    .pre = "qwen2",
    .rows = rows,
    .n_rows = (int)(sizeof rows / sizeof rows[0]),
    .expert_fmt = "mlp.experts.%lld.%s.weight",
    .exp_names = {"gate_proj", "up_proj", "down_proj"},
    .check = xg_hybrid_check,
    .hparams = xg_hybrid_hparams,
    .layer = layer,
    .output_norm_xform = XG_X_PLUS1,
};
