/*
 * plan.c — a family's declared kinds resolved against a config.json into the
 * plan of each layer (plan.h), the refusal of the kinds moe8 declares but
 * does not run yet, and the kinds' names for inspect and errors.
 *
 * Does not: read config.json (config.c and the descriptors), bind tensors
 * (load/), or run anything (model/, moe/).
 */
#include <string.h>

#include "arch/arch.h"
#include "arch/plan.h"
#include "core/core.h"

void moe8_plan_layer(const moe8_config *c, int64_t l, moe8_layer_plan *p) {
    const moe8_family_cfg *fc = MOE8_FAM(c);
    const moe8_arch_desc *a = moe8_arch_get(c->arch);
    const moe8_family_kinds *k = &a->kinds;
    memset(p, 0, sizeof *p);
    p->attn = moe8_arch_is_gdn_layer(c, l) ? MOE8_ATTN_GDN : k->attn;
    p->attn_opts = k->attn_opts;
    if (fc->qkv_bias) p->attn_opts |= MOE8_ATTN_QKV_BIAS;
    if (fc->qk_norm) p->attn_opts |= MOE8_ATTN_QK_NORM_HEAD;
    if (!fc->attn_output_gate) p->attn_opts &= ~MOE8_ATTN_OUT_GATE;
    if (!fc->qkv_bias) p->attn_opts &= ~MOE8_ATTN_O_BIAS; /* attention_bias: all four */
    if (moe8_arch_is_sliding_layer(c, l)) p->window = fc->sliding_window;
    else p->attn_opts &= ~MOE8_ATTN_SLIDING;
    if (p->attn == MOE8_ATTN_GDN) p->attn_opts = 0;
    p->norm_zc = (k->norm & MOE8_NORM_ZERO_CENTRED) != 0;
    p->rope = k->rope == MOE8_ROPE_PAIRS && !fc->rope_interleave ? MOE8_ROPE_HALVES : k->rope;
    p->rope_dim = moe8_rope_dim(c);
    p->yarn = fc->yarn_factor > 0;
    p->act = k->act;
    if (p->act == MOE8_ACT_SWIGLU_CLAMPED) p->limit = fc->swiglu_limit, p->alpha = fc->swiglu_alpha;
    p->scale = 1.0;
    if (!moe8_arch_is_moe_layer(c, l)) {
        p->ffn = MOE8_FFN_DENSE;
        p->width = c->intermediate_size;
        return;
    }
    p->ffn = k->moe == MOE8_FFN_MOE_SHARED && fc->shared_expert_intermediate_size > 0
                 ? MOE8_FFN_MOE_SHARED
                 : MOE8_FFN_MOE;
    p->shared_gate = k->shared_gate;
    if (p->ffn == MOE8_FFN_MOE_SHARED) p->width = fc->shared_expert_intermediate_size;
    p->sigmoid = k->sigmoid_router || fc->scoring_sigmoid;
    p->correction_bias = fc->e_score_bias;
    p->router_bias = k->router_bias;
    p->grouped = fc->topk_grouped;
    p->n_group = fc->n_group;
    p->topk_group = fc->topk_group;
    p->group_top2 = fc->group_top2;
    switch (k->renorm) {
    case MOE8_RENORM_ALWAYS: p->renorm = 1; p->scale = fc->routed_scaling_factor; break;
    case MOE8_RENORM_CONFIG:
        p->renorm = c->norm_topk_prob;
        p->scale = fc->routed_scaling_factor;
        break;
    case MOE8_RENORM_OR_SCALE:
        p->renorm = c->norm_topk_prob && c->num_experts_per_tok > 1;
        p->scale = p->renorm ? 1.0 : fc->routed_scaling_factor;
        break;
    }
}

moe8_status moe8_plan_check(const moe8_config *c, const char *label, moe8_error *err) {
    const moe8_arch_desc *a = moe8_arch_get(c->arch);
    const char *what = NULL;
    if (!a) return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "'%s': unknown family", label);
    if (a->kinds.rope == MOE8_ROPE_NONE) what = "attention without a rotary embedding";
    if (what)
        return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1, "'%s': %s: %s not supported yet", label,
                         a->model_type, what);
    return MOE8_OK;
}

const char *moe8_attn_kind_name(moe8_attn_kind k) {
    return k == MOE8_ATTN_MLA ? "MLA" : k == MOE8_ATTN_GDN ? "GDN" : "GQA";
}

const char *moe8_rope_kind_name(moe8_rope_kind k) {
    return k == MOE8_ROPE_PAIRS ? "pairs" : k == MOE8_ROPE_NONE ? "none" : "halves";
}

const char *moe8_ffn_kind_name(moe8_ffn_kind k) {
    return k == MOE8_FFN_DENSE ? "dense" : k == MOE8_FFN_MOE ? "MoE" : "MoE + shared";
}
