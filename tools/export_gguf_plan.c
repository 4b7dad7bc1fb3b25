/*
 * export_gguf_plan.c — the tensors `moe8 export-gguf` writes (export_gguf.h):
 * token_embd, then per layer the rows of the family's table that apply to it
 * (MoE or dense layer, q/k norm, q/k/v biases, shared experts) and the
 * stacked experts ffn_{gate,up,down}_exps [E][out][in] of a MoE layer (as
 * convert_hf_to_gguf.py merges mlp.experts.N.*, or splits a checkpoint's
 * stacked mlp.experts.gate_up_proj), then output_norm and output
 * (absent with tied embeddings unless the family's llama.cpp loader requires
 * it: then the embedding's data again). Each source is checked: present, float
 * (F32/F16/BF16: a quantized checkpoint is refused, naming the tensor) and of
 * the shape the config implies. Also the hyper-parameter keys every family
 * writes.
 */
#include <stdlib.h>
#include <string.h>

#include "export_gguf.h"

/* The float tensor `name` of shape [rows][cols] (cols = 0: 1-D [rows]), or
 * NULL after a message naming it. */
const moe8_tensor *xg_need(xg_plan *p, const char *name, int64_t rows, int64_t cols) {
    const moe8_tensor *t = moe8_st_find(p->st, name);
    int want_dims = cols ? 2 : 1;
    if (!t) {
        xg_fail("'%s': tensor '%s' is missing", p->dir, name);
        return NULL;
    }
    if (t->dtype != MOE8_DT_F32 && t->dtype != MOE8_DT_F16 && t->dtype != MOE8_DT_BF16) {
        xg_fail("'%s': tensor '%s' is %s: only float models (F32/F16/BF16) are exported; for a "
             "quantized checkpoint export the float model it was made from",
             p->dir, name, moe8_dtype_name(t->dtype));
        return NULL;
    }
    if (t->n_dims != want_dims || t->shape[0] != rows || (cols && t->shape[1] != cols)) {
        char got[96] = "", *g = got;
        for (int i = 0; i < t->n_dims && g < got + sizeof got - 24; i++)
            g += sprintf(g, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
        if (cols)
            xg_fail("'%s': tensor '%s' has shape [%s], expected [%lld, %lld]", p->dir, name, got,
                 (long long)rows, (long long)cols);
        else
            xg_fail("'%s': tensor '%s' has shape [%s], expected [%lld]", p->dir, name, got,
                 (long long)rows);
        return NULL;
    }
    return t;
}

/* Append a GGUF tensor of n_src sources, each [rows][cols] (cols = 0: 1-D). */
xg_tensor *xg_add(xg_plan *p, const char *gname, int type, int n_src, int64_t rows,
                      int64_t cols) {
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 64;
        xg_tensor *t = realloc(p->t, (size_t)cap * sizeof *t);
        if (!t) {
            xg_fail("out of memory");
            return NULL;
        }
        p->t = t;
        p->cap = cap;
    }
    xg_tensor *g = &p->t[p->n];
    memset(g, 0, sizeof *g);
    snprintf(g->name, sizeof g->name, "%s", gname);
    g->src = calloc((size_t)n_src, sizeof *g->src);
    if (!g->src) {
        xg_fail("out of memory");
        return NULL;
    }
    p->n++;
    g->n_src = n_src;
    g->type = cols ? type : GGML_F32;
    g->n_dims = cols ? (n_src > 1 ? 3 : 2) : 1;
    g->ne[0] = (uint64_t)(cols ? cols : rows);
    g->ne[1] = cols ? (uint64_t)rows : 1;
    g->ne[2] = (uint64_t)n_src;
    if ((g->type == GGML_Q8_0 || g->type == GGML_MXFP4) && g->ne[0] % Q8_0_BLOCK) {
        xg_fail("tensor '%s': row length %llu is not a multiple of %d (Q8_0 blocks); use --type f16",
             gname, (unsigned long long)g->ne[0], Q8_0_BLOCK);
        return NULL;
    }
    g->n_bytes = xg_type_row_bytes(g->type, g->ne[0]) * g->ne[1] * g->ne[2];
    return g;
}

/* One GGUF tensor from one Hugging Face tensor, its values transformed by xform. */
static int add1(xg_plan *p, const char *gname, int type, const char *hname, int64_t rows,
                int64_t cols, int xform) {
    const moe8_tensor *t = xg_need(p, hname, rows, cols);
    xg_tensor *g = t ? xg_add(p, gname, type, 1, rows, cols) : NULL;
    if (!g) return -1;
    g->src[0] = t;
    g->xform = xform;
    return 0;
}

static const char *prefix(const xg_plan *p) { return p->fam->prefix ? p->fam->prefix : "model."; }

void xg_layer_name(const xg_plan *p, int64_t l, const char *rest, char *out, size_t cap) {
    snprintf(out, cap, "%slayers.%lld.%s", prefix(p), (long long)l, rest);
}

int xg_is_linear_layer(const xg_plan *p, int64_t l) {
    int64_t every = moe8_config_get_int(p->cfg, "full_attention_interval", NULL);
    return every > 0 && (l + 1) % every != 0;
}

/* The shape of a table row: rows x cols (cols 0: 1-D) and its GGUF type. */
static void row_shape(const xg_plan *p, int shape, int64_t *rows, int64_t *cols, int *type) {
    const moe8_config *c = p->cfg;
    int64_t H = c->hidden_size, D = c->head_dim;
    int64_t nq = c->num_attention_heads * D, nkv = c->num_key_value_heads * D;
    int64_t S = moe8_config_get_int(c, "shared_expert_intermediate_size", NULL);
    int64_t F = c->intermediate_size;
    int64_t Vh = moe8_config_get_int(c, "linear_num_value_heads", NULL);
    int64_t dv = moe8_config_get_int(c, "linear_value_head_dim", NULL);
    *type = p->wtype;
    *cols = 0;
    switch (shape) {
    case XG_NORM_H: *rows = H; break;
    case XG_NORM_D: *rows = D; break;
    case XG_NORM_Q: case XG_BIAS_Q: *rows = nq; break;
    case XG_NORM_KV: case XG_BIAS_KV: *rows = nkv; break;
    case XG_Q: *rows = nq, *cols = H; break;
    case XG_KV: *rows = nkv, *cols = H; break;
    case XG_O: *rows = H, *cols = nq; break;
    case XG_ROUTER: *rows = c->num_experts, *cols = H, *type = GGML_F32; break;
    case XG_ROUTER_BIAS: *rows = c->num_experts; break;
    case XG_DENSE_GU: *rows = F, *cols = H; break;
    case XG_DENSE_D: *rows = H, *cols = F; break;
    case XG_SHARED_GU: *rows = S, *cols = H; break;
    case XG_Q_GATED: *rows = 2 * nq, *cols = H; break;
    case XG_GDN_BA: *rows = 2 * Vh, *cols = H; break;
    case XG_GDN_OUT: *rows = H, *cols = Vh * dv; break;
    case XG_GDN_V: *rows = Vh; break;
    case XG_GDN_NORM: *rows = dv; break;
    default: *rows = H, *cols = S; break; /* XG_SHARED_D */
    }
}

static int row_applies(const xg_plan *p, int when, int moe, int64_t l) {
    const moe8_config *c = p->cfg;
    switch (when) {
    case XG_IF_LINEAR: return xg_is_linear_layer(p, l);
    case XG_IF_FULL: return !xg_is_linear_layer(p, l);
    case XG_IF_MOE: return moe;
    case XG_IF_DENSE: return !moe;
    case XG_IF_QK_NORM: return moe8_config_get_int(c, "qk_norm", NULL) != 0;
    case XG_IF_QKV_BIAS: return moe8_config_get_int(c, "qkv_bias", NULL) != 0;
    case XG_IF_SHARED:
        return moe && moe8_config_get_int(c, "shared_expert_intermediate_size", NULL) > 0;
    default: return 1;
    }
}

const moe8_tensor *xg_need3(xg_plan *p, const char *name, int64_t n, int64_t rows,
                           int64_t cols) {
    const moe8_tensor *t = moe8_st_find(p->st, name);
    if (!t) {
        xg_fail("'%s': tensor '%s' is missing", p->dir, name);
        return NULL;
    }
    if (t->dtype != MOE8_DT_F32 && t->dtype != MOE8_DT_F16 && t->dtype != MOE8_DT_BF16) {
        xg_fail("'%s': tensor '%s' is %s: only float models (F32/F16/BF16) are exported", p->dir,
                name, moe8_dtype_name(t->dtype));
        return NULL;
    }
    if (t->n_dims != 3 || t->shape[0] != n || t->shape[1] != rows || t->shape[2] != cols) {
        xg_fail("'%s': tensor '%s' is not [%lld, %lld, %lld]", p->dir, name, (long long)n,
                (long long)rows, (long long)cols);
        return NULL;
    }
    return t;
}

/* The experts of a checkpoint that stacks them (Qwen3.5-MoE's
 * mlp.experts.gate_up_proj [E][2I][H], gate rows then up rows of each expert,
 * and mlp.experts.down_proj [E][H][I]), split as the converter's
 * Qwen2MoeModel does: ffn_gate_exps / ffn_up_exps the first / last I rows of
 * each expert's block, ffn_down_exps the tensor as it is. */
static int stacked_experts(xg_plan *p, int64_t l) {
    const moe8_config *c = p->cfg;
    const int64_t E = c->num_experts, I = c->moe_intermediate_size, H = c->hidden_size;
    static const char *const exps[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
    char g[64], h[160];
    xg_layer_name(p, l, "mlp.experts.gate_up_proj", h, sizeof h);
    const moe8_tensor *gu = xg_need3(p, h, E, 2 * I, H);
    xg_layer_name(p, l, "mlp.experts.down_proj", h, sizeof h);
    const moe8_tensor *dn = gu ? xg_need3(p, h, E, H, I) : NULL;
    if (!dn) return -1;
    for (int i = 0; i < 3; i++) {
        snprintf(g, sizeof g, "blk.%lld.%s.weight", (long long)l, exps[i]);
        xg_tensor *t = xg_add(p, g, p->wtype, 1, i == 2 ? H : I, i == 2 ? I : H);
        if (!t) return -1;
        t->n_dims = 3, t->ne[2] = (uint64_t)E, t->n_bytes *= (uint64_t)E;
        t->src[0] = i == 2 ? dn : gu;
        if (i == 2) continue;
        if (!(t->row_of = malloc((size_t)(E * I) * sizeof *t->row_of)))
            return xg_fail("out of memory");
        for (int64_t e = 0; e < E; e++)
            for (int64_t r = 0; r < I; r++) t->row_of[e * I + r] = e * 2 * I + i * I + r;
    }
    return 0;
}

/* One layer: the table's rows, then the stacked experts of a MoE layer. */
static int plan_layer(xg_plan *p, int64_t l) {
    const xg_family *f = p->fam;
    const moe8_config *c = p->cfg;
    const int moe = moe8_config_is_moe_layer(c, l);
    char g[64], h[160], fmt[160];
    for (int i = 0; i < f->n_rows; i++) {
        const xg_row *r = &f->rows[i];
        int64_t rows, cols;
        int type;
        if (!row_applies(p, r->when, moe, l)) continue;
        row_shape(p, r->shape, &rows, &cols, &type);
        snprintf(g, sizeof g, "blk.%lld.%s", (long long)l, r->gguf);
        xg_layer_name(p, l, r->hf, h, sizeof h);
        if (add1(p, g, type, h, rows, cols, r->xform)) return -1;
    }
    if (f->layer && f->layer(p, l)) return -1;
    if (!moe || f->own_experts) return 0;
    static const char *const exps[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
    const int64_t E = c->num_experts, I = c->moe_intermediate_size, H = c->hidden_size;
    xg_layer_name(p, l, "mlp.experts.gate_up_proj", h, sizeof h);
    if (moe8_st_find(p->st, h)) return stacked_experts(p, l);
    snprintf(fmt, sizeof fmt, "%slayers.%%lld.%s", prefix(p), f->expert_fmt);
    for (int i = 0; i < 3; i++) {
        int64_t rows = i == 2 ? H : I, cols = i == 2 ? I : H;
        snprintf(g, sizeof g, "blk.%lld.%s.weight", (long long)l, exps[i]);
        xg_tensor *t = xg_add(p, g, p->wtype, (int)E, rows, cols);
        if (!t) return -1;
        for (int64_t e = 0; e < E; e++) {
            snprintf(h, sizeof h, fmt, (long long)l, (long long)e, f->exp_names[i]);
            if (!(t->src[e] = xg_need(p, h, rows, cols))) return -1;
        }
    }
    return 0;
}

int xg_make_plan(xg_plan *p) {
    const moe8_config *c = p->cfg;
    int64_t H = c->hidden_size, V = c->vocab_size;
    char embed[96], norm[96];
    snprintf(embed, sizeof embed, "%sembed_tokens.weight", prefix(p));
    snprintf(norm, sizeof norm, "%snorm.weight", prefix(p));
    if (add1(p, "token_embd.weight", p->wtype, embed, V, H, XG_X_NONE)) return -1;
    for (int64_t l = 0; l < p->n_layers; l++)
        if (plan_layer(p, l)) return -1;
    if (add1(p, "output_norm.weight", GGML_F32, norm, H, 0, p->fam->output_norm_xform))
        return -1;
    if ((!c->tie_word_embeddings || p->fam->output_required) &&
        add1(p, "output.weight", p->wtype, c->tie_word_embeddings ? embed : "lm_head.weight", V, H,
             XG_X_NONE))
        return -1;
    return 0;
}

void xg_common_hparams(xg_kvs *k, const xg_plan *p, int64_t rope_dims, int64_t ff_len) {
    const moe8_config *c = p->cfg;
    const char *a = p->fam->arch;
    xg_kv_au32(k, a, "block_count", (uint32_t)p->n_layers);
    xg_kv_au32(k, a, "context_length", (uint32_t)c->max_position_embeddings);
    xg_kv_au32(k, a, "embedding_length", (uint32_t)c->hidden_size);
    xg_kv_au32(k, a, "feed_forward_length", (uint32_t)ff_len);
    xg_kv_au32(k, a, "attention.head_count", (uint32_t)c->num_attention_heads);
    xg_kv_au32(k, a, "attention.head_count_kv", (uint32_t)c->num_key_value_heads);
    xg_kv_au32(k, a, "attention.key_length", (uint32_t)c->head_dim);
    xg_kv_au32(k, a, "attention.value_length", (uint32_t)c->head_dim);
    xg_kv_au32(k, a, "rope.dimension_count", (uint32_t)rope_dims);
    xg_kv_af32(k, a, "rope.freq_base", (float)c->rope_theta);
    xg_kv_af32(k, a, "attention.layer_norm_rms_epsilon", (float)c->rms_norm_eps);
    xg_kv_au32(k, a, "expert_count", (uint32_t)c->num_experts);
    xg_kv_au32(k, a, "expert_used_count", (uint32_t)c->num_experts_per_tok);
    xg_kv_au32(k, a, "expert_feed_forward_length", (uint32_t)c->moe_intermediate_size);
}

int xg_check_sizes(const xg_plan *p) {
    const moe8_config *c = p->cfg;
    if (c->num_experts <= 0)
        return xg_fail("'%s/config.json': no experts: a dense model is not a %s", p->dir,
                       p->fam->arch);
    if (c->num_hidden_layers > UINT32_MAX || c->vocab_size > INT32_MAX ||
        c->max_position_embeddings > UINT32_MAX)
        return xg_fail("'%s/config.json': sizes beyond GGUF's u32 fields", p->dir);
    return 0;
}
