/*
 * moe_build.c — builds the MoE layer of a loaded model (src/load):
 * router weight mlp.gate [E][H] in place, routing from config.json
 * (top_k = num_experts_per_tok, renormalize = norm_topk_prob, softmax; for
 * deepseek sigmoid scores, groups, e_score_correction_bias and
 * routed_scaling_factor),
 * experts W8A8_DYNAMIC or W4A8_DYNAMIC repacked or FLOAT in place (and a
 * FLOAT down_proj beside W8A8_DYNAMIC gate/up in place: down_float), for one
 * TP slice and/or EP range (SEMANTICS §8). A W4A8 projection's scale_bias is
 * compared with its weights as it is packed (its pages still mapped) and a
 * disagreement logged at WARN, once per layer; it is not used (§4b). Each local expert's mapped pages are released as
 * soon as it is packed (SEMANTICS §6b: not resident twice, not even for a
 * whole layer while it packs). gpt_oss's MXFP4 experts are converted here
 * (experts_gptoss.c) unless the packed cache holds them: their row scales
 * lead the layer's section (gptoss_convert).
 *
 * Dequantize mode (part->dequantize, W8A8/W4A8_DYNAMIC experts): the part is
 * dequantized to fp32, W = S·(Wq + O) (a FLOAT down widened), into one block
 * the layer owns —
 * gate/up [I_loc][H] and down [H][I_loc] per local expert — and run as FLOAT
 * experts; the layer reports the part's slice as usual.
 *
 * moe8_model_load has already checked every tensor's dtype, shape and
 * scale/offset values. Does not: all-reduce (the caller sums the parts).
 */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "load/cache.h"
#include "load/model.h"
#include "moe/moe.h"


static void weight_of(moe8_moe_weight *d, const moe8_linear *l) {
    d->data = l->weight ? l->weight->data : NULL; /* NULL: gpt_oss's MXFP4, converted later */
    d->dtype = l->weight ? l->weight->dtype : MOE8_DT_I8;
    d->scale = l->weight_scale ? l->weight_scale->data : NULL;
    d->scale_dtype = l->weight_scale ? l->weight_scale->dtype : MOE8_DT_F32;
    d->offset = l->weight_offset && l->nonzero_offset ? l->weight_offset->data : NULL;
    d->offset_dtype = l->weight_offset ? l->weight_offset->dtype : MOE8_DT_F32;
    d->bias = l->bias ? l->bias->data : NULL; /* gpt_oss's experts */
    d->bias_dtype = l->bias ? l->bias->dtype : MOE8_DT_F32;
}

static void release_linear(const moe8_model *m, const moe8_linear *l) {
    moe8_st_release(m->st, l->weight);
    if (l->weight_scale) moe8_st_release(m->st, l->weight_scale);
    if (l->weight_offset) moe8_st_release(m->st, l->weight_offset);
}

/* The layer whose experts are being packed (on_packed's and the cache
 * hooks' user). */
typedef struct {
    const moe8_model *m;
    const moe8_layer *L;
    struct moe8_pcache *pc;
    int from_cache;           /* the packed bytes came from the cache: sources unread */
    atomic_int n_bad;         /* W4A8 projections whose scale_bias disagrees */
    atomic_int first_bad;     /* 3 * expert + projection of the first found, or -1 */
} packing;

static const void *cache_take(void *user, size_t bytes) {
    packing *p = user;
    const void *r = moe8_pcache_take(p->pc, bytes);
    p->from_cache = r != NULL;
    return r;
}

static void cache_put(void *user, const void *q, size_t bytes) {
    moe8_pcache_put(((packing *)user)->pc, q, bytes);
}

/* Code W[i][j] of a W4A8 weight [n/2][k] (SEMANTICS §4b): row i/2, its low
 * nibble for even i, the high one for odd, two's complement. */
static inline int w4_code(const moe8_linear *l, int64_t i, int64_t j) {
    const uint8_t b = ((const uint8_t *)l->weight->data)[(i / 2) * l->n_in + j];
    return (int)(((b >> (i % 2 ? 4 : 0)) & 15) ^ 8) - 8;
}

/* 1 unless l's scale_bias (W4A8) disagrees with 8 sum_k W[n][k] S[n] (its
 * row sum for the [n][16] form: 16 K chunks) beyond 1e-3 of 8 sum_k |W| |S|. */
static int scale_bias_ok(const moe8_linear *l) {
    const moe8_tensor *sb = l->scale_bias;
    if (!sb || l->quant != MOE8_QUANT_W4A8_DYNAMIC) return 1;
    const int64_t nc = sb->n_dims == 2 ? sb->shape[1] : 1;
    for (int64_t i = 0; i < l->n_out; i++) {
        const double s = moe8_tensor_f32_at(l->weight_scale, i);
        double got = 0.0, sum = 0.0, mag = 0.0;
        for (int64_t c = 0; c < nc; c++) got += moe8_tensor_f32_at(sb, i * nc + c);
        for (int64_t j = 0; j < l->n_in; j++) {
            const int v = w4_code(l, i, j);
            sum += v;
            mag += abs(v);
        }
        if (fabs(got - 8.0 * sum * s) > 1e-3 * 8.0 * mag * fabs(s) + 1e-30) return 0;
    }
    return 1;
}

/* One expert packed: its int8 gate/up (and down unless FLOAT, kept in
 * place) leave memory now, so packing a layer never holds all its mapped
 * experts beside their packed copy (SEMANTICS §6b). */
static void on_packed(void *user, int e) {
    packing *p = user;
    const moe8_linear *pr[3] = {&p->L->experts[e].gate, &p->L->experts[e].up,
                                &p->L->experts[e].down};
    for (int k = 0; k < 3 && !p->from_cache; k++) /* W4A8: the pages are still mapped */
        if (!scale_bias_ok(pr[k])) {
            int none = -1;
            atomic_fetch_add(&p->n_bad, 1);
            atomic_compare_exchange_strong(&p->first_bad, &none, 3 * e + k);
        }
    release_linear(p->m, &p->L->experts[e].gate);
    release_linear(p->m, &p->L->experts[e].up);
    if (p->L->info.experts_down != MOE8_QUANT_FLOAT) release_linear(p->m, &p->L->experts[e].down);
}

/* dst[n][k] = S·(Wq + O) of rows [r0, r0+n), columns [c0, c0+k) of l (a
 * FLOAT l: its values widened to fp32); d describes dst as an F32 weight. */
static void dequant(float *dst, int n, int k, int r0, int c0, const moe8_linear *l,
                    moe8_moe_weight *d) {
    const int64_t ld = l->n_in;
    const int8_t *wq = (const int8_t *)l->weight->data;
    for (int i = 0; l->quant == MOE8_QUANT_FLOAT && i < n; i++)
        for (int j = 0; j < k; j++)
            dst[(size_t)i * k + j] = moe8_tensor_f32_at(l->weight, (int64_t)(r0 + i) * ld + c0 + j);
    for (int i = 0; l->quant != MOE8_QUANT_FLOAT && i < n; i++) {
        float s = moe8_tensor_f32_at(l->weight_scale, r0 + i);
        float o = l->weight_offset ? moe8_tensor_f32_at(l->weight_offset, r0 + i) : 0.0f;
        for (int j = 0; j < k; j++) {
            const int v = l->quant == MOE8_QUANT_W4A8_DYNAMIC
                              ? w4_code(l, r0 + i, c0 + j)
                              : wq[(size_t)(r0 + i) * (size_t)ld + c0 + j];
            dst[(size_t)i * k + j] = s * ((float)v + o);
        }
    }
    const void *bias = d->bias; /* gpt_oss's expert biases stay (their slice: the caller) */
    const moe8_dtype bias_dt = d->bias_dtype;
    memset(d, 0, sizeof *d);
    d->data = dst;
    d->dtype = MOE8_DT_F32;
    d->bias = bias;
    d->bias_dtype = bias_dt;
}

/* Dequantize experts [first, last), slice [i0, i0+n_i) into *block (owned by
 * the caller until the layer takes it); ex[e] then describes float weights. */
static moe8_status dequant_part(const moe8_layer *L, int H, int first, int last, int i0, int n_i,
                                moe8_moe_expert *ex, float **block, moe8_error *err) {
    size_t per = 3 * (size_t)n_i * (size_t)H, total;
    if (moe8_mul_size(per, (size_t)(last - first), &total) ||
        moe8_mul_size(total, sizeof(float), &total) || !(*block = moe8_alloc_aligned(total)))
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "cannot allocate dequantized experts");
    for (int e = first; e < last; e++) {
        float *base = *block + (size_t)(e - first) * per;
        dequant(base, n_i, H, i0, 0, &L->experts[e].gate, &ex[e].gate);
        dequant(base + (size_t)n_i * H, n_i, H, i0, 0, &L->experts[e].up, &ex[e].up);
        dequant(base + 2 * (size_t)n_i * H, H, n_i, 0, i0, &L->experts[e].down, &ex[e].down);
        if (ex[e].gate.bias) { /* the slice's gate/up biases; down's on the first slice only */
            const size_t es = moe8_dtype_size(ex[e].gate.bias_dtype);
            ex[e].gate.bias = (const char *)ex[e].gate.bias + (size_t)i0 * es;
            ex[e].up.bias = (const char *)ex[e].up.bias + (size_t)i0 * es;
            if (i0 > 0) ex[e].down.bias = NULL;
        }
    }
    return MOE8_OK;
}

/* Routing from config.json (docs/MODELS.md): top-k, renormalization, and for
 * deepseek the scoring, the groups, the selection bias (fp32 copy in bias[E])
 * and the scaling factor. */
static void routing_of(moe8_router_params *rp, const moe8_config *c, const moe8_layer *L,
                       float *bias) {
    const moe8_layer_plan *p = &L->plan; /* the router's kind (arch/plan.h) */
    rp->top_k = (int)c->num_experts_per_tok;
    rp->renormalize = p->renorm;
    rp->scoring = p->sigmoid ? MOE8_SCORING_SIGMOID : MOE8_SCORING_SOFTMAX;
    rp->routed_scaling_factor = (float)p->scale;
    if (p->grouped) {
        rp->use_grouped_topk = 1;
        rp->num_expert_group = (int)p->n_group;
        rp->topk_group = (int)p->topk_group;
        rp->group_score = p->group_top2 ? MOE8_GROUP_SCORE_TOP2_SUM : MOE8_GROUP_SCORE_MAX;
    }
    if (L->router_bias && bias) {
        for (int64_t e = 0; e < c->num_experts; e++) bias[e] = moe8_tensor_f32_at(L->router_bias, e);
        rp->e_score_correction_bias = bias;
        /* the bias acts through the grouped path, which DeepSeek-V3 always takes
         * (its config reads n_group / topk_group null as one group) */
        MOE8_ASSERT(rp->use_grouped_topk);
    }
}

static void desc_of(moe8_moe_layer_desc *d, const moe8_model *m, const moe8_layer *L,
                    const moe8_moe_part *part, const moe8_moe_expert *ex, const char *name,
                    float *bias) {
    const moe8_config *c = &m->cfg;
    *d = moe8_moe_layer_desc_default();
    d->name = name;
    d->n_expert = (int)c->num_experts;
    d->hidden = (int)c->hidden_size;
    d->intermediate = (int)c->moe_intermediate_size;
    d->quant = L->info.experts;
    d->down_float = L->info.experts == MOE8_QUANT_W8A8_DYNAMIC &&
                    L->info.experts_down == MOE8_QUANT_FLOAT;
    d->experts = ex;
    d->router = L->router->data;
    d->router_dtype = L->router->dtype;
    routing_of(&d->router_params, c, L, bias);
    if (L->plan.act == MOE8_ACT_SWIGLU_CLAMPED) {
        d->act_limit = (float)L->plan.limit;
        d->act_alpha = (float)L->plan.alpha;
    }
    d->n_threads = m->params.n_threads;
    if (part) {
        d->i_begin = part->i_begin, d->i_end = part->i_end;
        d->expert_first = part->expert_first, d->expert_last = part->expert_last;
        if (part->n_threads > 0) d->n_threads = part->n_threads;
    }
}

/* gpt_oss's MXFP4 experts of layer `layer` (d's local range) into ex:
 * with a packed cache, its section begins with their row scales (per
 * expert [gate I][up I][down H] fp32), then the packed int8 (the layer's
 * own region). Reading: both from the file, nothing decoded (one line says
 * so, at the first layer). Else decoded and converted (experts_gptoss.c),
 * the scales handed to a writing cache first. */
static moe8_status gptoss_convert(const moe8_model *m, int64_t layer, const moe8_moe_layer_desc *d,
                                  struct moe8_pcache *pc, int as_float, moe8_moe_expert *ex,
                                  void **gx, moe8_error *err) {
    const int ep = d->expert_last > d->expert_first;
    const int first = ep ? d->expert_first : 0, last = ep ? d->expert_last : d->n_expert;
    const size_t ns = 2 * (size_t)m->cfg.moe_intermediate_size + (size_t)m->cfg.hidden_size;
    const size_t sbytes = ns * (size_t)(last - first) * sizeof(float);
    const float *cached = !as_float && moe8_pcache_reading(pc) ? moe8_pcache_take(pc, sbytes) : NULL;
    moe8_status st;
    if (cached) {
        if (layer == 0)
            moe8_log(MOE8_LOG_WARN, "'%s': gpt_oss MXFP4 experts: their W8A8_DYNAMIC conversion "
                     "read from the packed cache (nothing decoded)", m->dir);
        return moe8_gptoss_experts_cached(m, layer, first, last, cached, ex, gx, err);
    }
    if (layer == 0)
        moe8_log(MOE8_LOG_INFO, "'%s': gpt_oss MXFP4 experts decoded%s", m->dir,
                 as_float ? " to fp32" : pc ? " and converted to W8A8_DYNAMIC into the packed cache"
                                            : " and converted to W8A8_DYNAMIC");
    if ((st = moe8_gptoss_experts(m, layer, first, last, as_float, ex, gx, err)) || as_float || !pc ||
        moe8_pcache_reading(pc))
        return st;
    float *sc = malloc(sbytes);
    if (!sc) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "'%s': layer %lld: out of memory", m->dir,
                              (long long)layer);
    for (int e = first; e < last; e++) /* gate's, up's and down's follow one another */
        memcpy(sc + (size_t)(e - first) * ns, ex[e].gate.scale, ns * sizeof(float));
    moe8_pcache_put_owned(pc, sc, sbytes);
    return MOE8_OK;
}

moe8_status moe8_moe_layer_from_model(const moe8_model *m, int64_t layer, const moe8_moe_part *part,
                                      moe8_moe_layer **out, moe8_error *err) {
    return moe8_moe_layer_from_model_cached(m, layer, part, NULL, out, err);
}

moe8_status moe8_moe_layer_from_model_cached(const moe8_model *m, int64_t layer,
                                             const moe8_moe_part *part, struct moe8_pcache *pc,
                                             moe8_moe_layer **out, moe8_error *err) {
    const moe8_config *c;
    const moe8_layer *L;
    moe8_moe_layer_desc d;
    moe8_moe_expert *ex;
    moe8_status st;
    float *deq = NULL, *bias = NULL;
    int i0 = 0, deq_mode;
    char name[64];
    if (!m || !out) return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "moe layer: bad arguments");
    *out = NULL;
    c = &m->cfg;
    if (layer < 0 || layer >= c->num_hidden_layers || !m->layers[layer].info.is_moe)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1,
                         "model layer %lld is not a MoE layer (of %lld layers)", (long long)layer,
                         (long long)c->num_hidden_layers);
    L = &m->layers[layer];
    ex = calloc((size_t)c->num_experts, sizeof *ex);
    bias = L->router_bias ? malloc((size_t)c->num_experts * sizeof(float)) : NULL;
    if (!ex || (L->router_bias && !bias)) {
        free(ex);
        free(bias);
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "out of memory");
    }
    for (int64_t e = 0; e < c->num_experts; e++) {
        weight_of(&ex[e].gate, &L->experts[e].gate);
        weight_of(&ex[e].up, &L->experts[e].up);
        weight_of(&ex[e].down, &L->experts[e].down);
    }
    snprintf(name, sizeof name, m->arch->moe_block, (long long)layer);
    desc_of(&d, m, L, part, ex, name, bias);
    float *lbias = NULL; /* gpt_oss's router bias, fp32 (the layer copies it) */
    if (L->router_lbias && (lbias = malloc((size_t)c->num_experts * sizeof(float)))) {
        for (int64_t e = 0; e < c->num_experts; e++)
            lbias[e] = moe8_tensor_f32_at(L->router_lbias, e);
        d.router_bias = lbias;
    }
    void *gx = NULL; /* gpt_oss's MXFP4 experts, converted now (experts_gptoss.c) */
    const int gx_float = part && part->dequantize;
    st = MOE8_OK;
    if (moe8_gptoss_is_mxfp4(m, layer)) {
        st = gptoss_convert(m, layer, &d, pc, gx_float, ex, &gx, err);
        if (gx_float) d.quant = MOE8_QUANT_FLOAT; /* the exact values, fp32, the layer owns */
    }
    deq_mode = part && part->dequantize && d.quant != MOE8_QUANT_FLOAT;
    if (deq_mode) {
        /* Check the ranges first (create does it again on the float desc). */
        int first = d.expert_first, last = d.expert_last > first ? d.expert_last : d.n_expert;
        int n_i = d.i_end > d.i_begin ? d.i_end - d.i_begin : d.intermediate;
        i0 = d.i_begin;
        if (d.i_begin < 0 || d.i_end < d.i_begin || d.i_end > d.intermediate || first < 0 ||
            last > d.n_expert || first > last)
            st = moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "'%s': bad part (slice [%d, %d), "
                           "experts [%d, %d))", name, d.i_begin, d.i_end, first, last);
        if (!st) st = dequant_part(L, d.hidden, first, last, i0, n_i, ex, &deq, err);
        d.quant = MOE8_QUANT_FLOAT;
        d.down_float = 0;
        d.intermediate = n_i;
        d.i_begin = d.i_end = 0;
    }
    packing pk = {m, L, pc, 0, 0, -1};
    if (!deq_mode && d.quant != MOE8_QUANT_FLOAT) {
        d.on_packed = on_packed;
        d.on_packed_user = &pk;
        if (pc) {
            d.packed_take = cache_take;
            d.packed_put = cache_put;
            d.packed_user = &pk;
        }
    }
    if (!st && L->router_lbias && !lbias)
        st = moe8_fail(err, MOE8_ERR_NOMEM, -1, "out of memory");
    if (!st) st = moe8_moe_layer_create(&d, out, err);
    if (!st && atomic_load(&pk.n_bad) > 0) {
        const int fb = atomic_load(&pk.first_bad);
        const moe8_linear *l = fb % 3 == 0 ? &L->experts[fb / 3].gate
                               : fb % 3 == 1 ? &L->experts[fb / 3].up : &L->experts[fb / 3].down;
        moe8_log(MOE8_LOG_WARN, "'%s': scale_bias disagrees with 8 x sum of W x weight_scale in "
                 "%d W4A8 projection(s), first '%s'; it is not used (SEMANTICS 4b)", name,
                 atomic_load(&pk.n_bad), l->scale_bias->name);
    }
    free(ex);
    free(bias); /* the layer keeps its own copy */
    free(lbias);
    if (gx && (st || !gx_float)) moe8_free_aligned(gx); /* int8: packed now */
    if (st != MOE8_OK) {
        moe8_free_aligned(deq);
        return st;
    }
    if (gx && gx_float) {
        moe8_moe_layer *o = *out;
        o->owned_f32 = gx;
        o->packed_bytes += 3 * (size_t)o->inter_full * (size_t)o->hidden *
                           (size_t)(o->last - o->first) * sizeof(float);
    }
    if (deq_mode) {
        moe8_moe_layer *o = *out;
        o->owned_f32 = deq;
        o->packed_bytes += 3 * (size_t)o->inter * (size_t)o->hidden * (size_t)(o->last - o->first) *
                           sizeof(float);
        o->i_begin = i0;          /* report the part's slice; the float pointers already */
        o->inter_full = (int)c->moe_intermediate_size;   /* start at it */
    }
    /* packed experts were released one by one (on_packed); dequantized ones here */
    if (L->info.experts == MOE8_QUANT_FLOAT || !deq_mode) return MOE8_OK;
    for (int e = (*out)->first; e < (*out)->last; e++) {
        release_linear(m, &L->experts[e].gate);
        release_linear(m, &L->experts[e].up);
        release_linear(m, &L->experts[e].down);
    }
    return MOE8_OK;
}
