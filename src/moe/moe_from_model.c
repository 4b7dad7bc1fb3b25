/*
 * moe_from_model.c — builds the MoE layer of a loaded model (src/model):
 * router weight mlp.gate [E][H] in place, routing from config.json
 * (top_k = num_experts_per_tok, renormalize = norm_topk_prob, softmax),
 * experts W8A8_DYNAMIC repacked or FLOAT in place, for one TP slice and/or EP
 * range. After packing, the mapped pages of the packed tensors are released
 * (SPEC §6b: not resident twice). moe8_model_load has already checked every
 * tensor's dtype, shape and scale/offset values.
 * Does not: dequantize W8A8 experts to float (the caller does that when it
 * wants float experts).
 */
#include <stdio.h>
#include <stdlib.h>

#include "model/model.h"
#include "moe/moe.h"

static void weight_of(moe8_moe_weight *d, const moe8_linear *l) {
    d->data = l->weight->data;
    d->dtype = l->weight->dtype;
    d->scale = l->weight_scale ? l->weight_scale->data : NULL;
    d->scale_dtype = l->weight_scale ? l->weight_scale->dtype : MOE8_DT_F32;
    d->offset = l->weight_offset && l->nonzero_offset ? l->weight_offset->data : NULL;
    d->offset_dtype = l->weight_offset ? l->weight_offset->dtype : MOE8_DT_F32;
}

static void release_linear(const moe8_model *m, const moe8_linear *l) {
    moe8_st_release(m->st, l->weight);
    if (l->weight_scale) moe8_st_release(m->st, l->weight_scale);
    if (l->weight_offset) moe8_st_release(m->st, l->weight_offset);
}

moe8_status moe8_moe_layer_from_model(const moe8_model *m, int64_t layer, const moe8_moe_part *part,
                                      moe8_moe_layer **out, moe8_error *err) {
    const moe8_config *c;
    const moe8_layer *L;
    moe8_moe_layer_desc d = moe8_moe_layer_desc_default();
    moe8_moe_expert *ex;
    moe8_status st;
    char name[64];
    if (!m || !out) return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "moe layer: bad arguments");
    *out = NULL;
    c = &m->cfg;
    if (layer < 0 || layer >= c->num_hidden_layers || !m->layers[layer].info.is_moe)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1,
                         "model layer %lld is not a MoE layer (of %lld layers)", (long long)layer,
                         (long long)c->num_hidden_layers);
    L = &m->layers[layer];
    if (!(ex = calloc((size_t)c->num_experts, sizeof *ex)))
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "out of memory");
    for (int64_t e = 0; e < c->num_experts; e++) {
        weight_of(&ex[e].gate, &L->experts[e].gate);
        weight_of(&ex[e].up, &L->experts[e].up);
        weight_of(&ex[e].down, &L->experts[e].down);
    }
    snprintf(name, sizeof name, "model.layers.%lld.mlp", (long long)layer);
    d.name = name;
    d.n_expert = (int)c->num_experts;
    d.hidden = (int)c->hidden_size;
    d.intermediate = (int)c->moe_intermediate_size;
    d.quant = L->info.experts;
    d.experts = ex;
    d.router = L->router->data;
    d.router_dtype = L->router->dtype;
    d.router_params.top_k = (int)c->num_experts_per_tok;
    d.router_params.renormalize = c->norm_topk_prob;
    d.n_threads = m->params.n_threads;
    if (part) {
        d.i_begin = part->i_begin, d.i_end = part->i_end;
        d.expert_first = part->expert_first, d.expert_last = part->expert_last;
        if (part->n_threads > 0) d.n_threads = part->n_threads;
    }
    st = moe8_moe_layer_create(&d, out, err);
    free(ex);
    if (st != MOE8_OK || (*out)->quant != MOE8_QUANT_W8A8_DYNAMIC) return st;
    for (int e = (*out)->first; e < (*out)->last; e++) {
        release_linear(m, &L->experts[e].gate);
        release_linear(m, &L->experts[e].up);
        release_linear(m, &L->experts[e].down);
    }
    return MOE8_OK;
}
