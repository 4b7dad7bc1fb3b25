/*
 * weights.c — the prepared weights (weights.h): what the forward pass reads,
 * built once from a loaded model (model.h: tensors checked, still mapped),
 * and their lifetime in the model.
 *
 * moe8_weights_build turns the model into what the layer loop runs: W8A8
 * static linears packed (proj.c), MoE layers built with
 * moe8_moe_layer_create (experts repacked; moe_build.c), MLA's kv_b_proj
 * absorbed per head, norm vectors converted to fp32 (a few KB); the mapped
 * pages of every packed int8 weight are released (SEMANTICS §6b). Everything
 * int8 is packed in the layout of one kernel table, the one in use when the
 * build starts, and the weights keep it (moe8_weights.kt): the forward runs
 * with that table, never with one picked per call.
 * The packed int8 weights come from the model's packed cache when it has a
 * valid one (cache.h: section i = layer i, then lm_head), and go to it when
 * it is being written: the streamed build packs one section at a time, hands
 * it to the file and frees it, so a model larger than RAM can be packed.
 * Embeddings, the router, FLOAT linears and a tied lm_head stay in the map in
 * their stored dtype; an untied FLOAT lm_head is copied into owned memory
 * under --no-mmap only (and its pages released); a W8A8_DYNAMIC lm_head is
 * packed like the W8A8 linears, and so is a float one quantized per row to
 * int8 under --lm-head int8 (its scales a region of the cache too). In float-experts mode W8A8 experts are
 * dequantized to fp32, W = S·(Wq + O), and run as FLOAT experts (a
 * comparison aid; 4x the memory).
 *
 * Tensor / expert parallelism (SEMANTICS §8, model.h shard): each rank builds
 * only its share — q/k/v rows of its heads, o_proj columns (quant_bias on
 * rank 0 only), dense gate/up rows and down columns of its F slice (the
 * shared expert's likewise of its S slice, under TP and EP), its MoE part
 * (an I slice, or a block of whole experts), its lm_head vocabulary rows,
 * a Gated DeltaNet layer's key-head groups (their rows of the input
 * projections and conv channels, out_proj's columns, A_log / dt_bias).
 * Embeddings, norms and the router are replicated.
 *
 * Lifetime: the model holds one set per float_experts setting (model.h
 * prepared[]), built under the model's lock by the first
 * moe8_weights_acquire (a context, or moe8_model_prepare), shared read-only
 * by its contexts, freed by the last release; the reference
 * moe8_model_prepare keeps is dropped when the model is destroyed.
 *
 * Does not: run anything (model/forward.c), or agree on errors across ranks
 * (the callers of moe8_weights_acquire do).
 */
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "arch/arch.h"
#include "core/core.h"
#include "dist/dist.h"
#include "load/cache.h"
#include "load/weights.h"
#include "moe/moe.h"

/* ---- building ------------------------------------------------------------ */

static moe8_status norm_copy(float **dst, const moe8_tensor *t, int n, moe8_error *err) {
    if (!t || t->n_elements != n)
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "tensor '%s': expected %d elements",
                         t ? t->name : "(norm)", n);
    *dst = malloc((size_t)n * sizeof(float));
    if (!*dst) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "cannot allocate norm weight");
    return moe8_convert_to_f32(*dst, t->data, t->dtype, (size_t)n, err);
}

/* A norm weight, as 1 + w when the family's norms are zero-centred (plan.h
 * MOE8_NORM_ZERO_CENTRED: x / rms(x) * (1 + w) is the plain RMSNorm of 1 + w). */
static moe8_status norm_copy_zc(float **dst, const moe8_tensor *t, int n, int zc,
                                moe8_error *err) {
    moe8_status st = norm_copy(dst, t, n, err);
    for (int i = 0; !st && zc && i < n; i++) (*dst)[i] += 1.0f;
    return st;
}

/* q_norm / k_norm: [D] per head, or this rank's heads' slice of [NH*D] /
 * [NKV*D] when the norm is over the whole projection (its sum of squares
 * then adds over the ranks: model/attn_gqa.c). */
static moe8_status qk_norm_copy(const moe8_weights *w, float **dst, const moe8_layer *L,
                                int is_k, moe8_error *err) {
    const moe8_tensor *t = is_k ? L->k_norm : L->q_norm;
    const moe8_dist_shard *sh = &w->model->shard;
    const moe8_config *c = &w->model->cfg;
    if (!(L->plan.attn_opts & MOE8_ATTN_QK_NORM_WHOLE)) return norm_copy(dst, t, w->D, err);
    const int64_t all = (is_k ? c->num_key_value_heads : c->num_attention_heads) * c->head_dim;
    const int h0 = is_k ? sh->kv_begin : sh->head_begin, n = (is_k ? w->n_kv : w->n_head) * w->D;
    if (t->n_elements != all)
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "tensor '%s': expected %lld elements", t->name,
                         (long long)all);
    if (!(*dst = malloc((size_t)n * sizeof(float))))
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "cannot allocate norm weight");
    return moe8_convert_to_f32(*dst, (const char *)t->data + (size_t)h0 * (size_t)w->D *
                                         moe8_dtype_size(t->dtype), t->dtype, (size_t)n, err);
}

static moe8_status build_moe(moe8_pcache *pc, moe8_fwd_layer *fl, const moe8_model *m, int li,
                             int float_experts, int n_threads, moe8_error *err) {
    const moe8_dist_shard *sh = &m->shard;
    moe8_moe_part part = {0, 0, 0, 0, n_threads, float_experts};
    if (sh->size > 1) {
        part.i_begin = sh->i_begin, part.i_end = sh->i_end;
        part.expert_first = sh->expert_first, part.expert_last = sh->expert_last;
    }
    return moe8_moe_layer_from_model_cached(m, li, &part, pc, &fl->moe, err);
}

/* This rank's block of a linear: rows [r0, r1) (column-parallel) or columns
 * [c0, c1) (row-parallel: the bias on rank 0 only). Whole with one rank. */
static moe8_status proj_rows(const moe8_weights *w, moe8_proj *p, const moe8_linear *src, int r0,
                             int r1, moe8_error *err) {
    moe8_status st = moe8_proj_init_cached(p, src, r0, r1, 0, (int)src->n_in, 1, w->kt->qlayout,
                                           w->cache, err);
    if (!st && p->type != MOE8_QUANT_FLOAT) moe8_st_release(w->model->st, src->weight);
    return st;
}

static moe8_status proj_cols(const moe8_weights *w, moe8_proj *p, const moe8_linear *src, int c0,
                             int c1, moe8_error *err) {
    moe8_status st = moe8_proj_init_cached(p, src, 0, (int)src->n_out, c0, c1,
                                           w->model->shard.rank == 0, w->kt->qlayout, w->cache,
                                           err);
    if (!st && p->type != MOE8_QUANT_FLOAT) moe8_st_release(w->model->st, src->weight);
    return st;
}

static moe8_status build_attn(moe8_weights *w, moe8_fwd_layer *fl, const moe8_layer *L,
                              moe8_error *err) {
    const moe8_dist_shard *sh = &w->model->shard;
    const int D = w->D;
    const int QD = (L->plan.attn_opts & MOE8_ATTN_OUT_GATE) ? 2 * D : D; /* q rows per head */
    moe8_status st;
    w->out_gate |= QD != D;
    w->has_dynamic |= L->info.qkv == MOE8_QUANT_W8A8_DYNAMIC;
    if ((st = proj_rows(w, &fl->q, &L->q, sh->head_begin * QD, sh->head_end * QD, err)) ||
        (st = proj_rows(w, &fl->k, &L->k, sh->kv_begin * D, sh->kv_end * D, err)) ||
        (st = proj_rows(w, &fl->v, &L->v, sh->kv_begin * D, sh->kv_end * D, err)))
        return st;
    if (L->sinks) { /* split with their heads */
        if (!(fl->sinks = malloc((size_t)w->n_head * sizeof(float))))
            return moe8_fail(err, MOE8_ERR_NOMEM, -1, "cannot allocate attention sinks");
        for (int h = 0; h < w->n_head; h++)
            fl->sinks[h] = moe8_tensor_f32_at(L->sinks, sh->head_begin + h);
    }
    return proj_cols(w, &fl->o, &L->o, sh->head_begin * D, sh->head_end * D, err);
}

/* This rank's Gated DeltaNet heads (TP/EP split them like attention heads,
 * whole key-head groups: key heads [k0, k0 + nk), value heads [v0, v0 + nv)). */
typedef struct {
    int NK, NV, dk, dv, rr;  /* the whole model's; rr = NV / NK */
    int nk, nv, k0, v0;      /* this rank's */
} gdn_share;

static gdn_share gdn_share_of(const moe8_weights *w) {
    const moe8_family_cfg *fc = MOE8_FAM(&w->model->cfg);
    const moe8_dist_shard *sh = &w->model->shard;
    const int size = sh->size > 1 ? sh->size : 1, rank = sh->size > 1 ? sh->rank : 0;
    gdn_share g;
    g.NK = (int)fc->linear_num_key_heads, g.NV = (int)fc->linear_num_value_heads;
    g.dk = (int)fc->linear_key_head_dim, g.dv = (int)fc->linear_value_head_dim;
    g.rr = g.NV / g.NK, g.nk = g.NK / size, g.nv = g.nk * g.rr;
    g.k0 = rank * g.nk, g.v0 = g.k0 * g.rr;
    return g;
}

/* Rows [r0, r1) of a float tensor [n][k] as a FLOAT projection (in_proj_ba / b / a). */
static moe8_status float_rows(const moe8_weights *w, moe8_proj *p, const moe8_tensor *t, int r0,
                              int r1, moe8_error *err) {
    const moe8_linear L = {.quant = MOE8_QUANT_FLOAT, .n_out = t->shape[0], .n_in = t->shape[1],
                           .weight = t};
    return proj_rows(w, p, &L, r0, r1, err);
}

/* qwen3_5_moe's flat in_proj_qkv under TP: this rank's q, k and v rows (three
 * blocks) gathered into an owned copy, run as one FLOAT projection. */
static moe8_status qkv_gathered(moe8_fwd_layer *fl, const moe8_linear *src, const gdn_share *g,
                                moe8_error *err) {
    const moe8_tensor *t = src->weight;
    const size_t row = (size_t)t->shape[1] * moe8_dtype_size(t->dtype);
    const int blk[3][2] = {{g->k0 * g->dk, g->nk * g->dk},
                           {(g->NK + g->k0) * g->dk, g->nk * g->dk},
                           {2 * g->NK * g->dk + g->v0 * g->dv, g->nv * g->dv}};
    const int n = 2 * g->nk * g->dk + g->nv * g->dv;
    char *d;
    if (src->quant != MOE8_QUANT_FLOAT)
        return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1, "tensor '%s': %s under tensor "
                         "parallelism not supported yet", t->name, moe8_quant_type_name(src->quant));
    if (!(d = fl->gdn_own = malloc((size_t)n * row)))
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "tensor '%s': out of memory", t->name);
    for (int b = 0, at = 0; b < 3; at += blk[b][1], b++)
        memcpy(d + (size_t)at * row, (const char *)t->data + (size_t)blk[b][0] * row,
               (size_t)blk[b][1] * row);
    fl->gdn_own_t = *t;
    fl->gdn_own_t.data = d;
    fl->gdn_own_t.shape[0] = n;
    fl->gdn_own_t.n_elements = (int64_t)n * t->shape[1];
    fl->gdn_own_t.n_bytes = (size_t)n * row;
    fl->gdn_own_t.file_index = -1; /* not in the map: nothing to release */
    const moe8_linear L = {.quant = MOE8_QUANT_FLOAT, .n_out = n, .n_in = t->shape[1],
                           .weight = &fl->gdn_own_t};
    return moe8_proj_init(&fl->gdn_in, &L, 0, err);
}

/* The input projections of this rank's heads: grouped (one block of key-head
 * groups each) or flat. */
static moe8_status gdn_inputs(const moe8_weights *w, moe8_fwd_layer *fl, const moe8_layer *L,
                              const gdn_share *g, moe8_error *err) {
    const int gs = 2 * g->dk + 2 * g->rr * g->dv, v1 = g->v0 + g->nv;
    moe8_status st;
    if (L->gdn_ba) /* grouped: rows of key heads [k0, k0 + nk) */
        return (st = proj_rows(w, &fl->gdn_in, &L->gdn_in, g->k0 * gs, (g->k0 + g->nk) * gs, err))
                   ? st
                   : float_rows(w, &fl->gdn_ba, L->gdn_ba, g->k0 * 2 * g->rr,
                                (g->k0 + g->nk) * 2 * g->rr, err);
    if (g->nk == g->NK) st = proj_rows(w, &fl->gdn_in, &L->gdn_in, 0, (int)L->gdn_in.n_out, err);
    else st = qkv_gathered(fl, &L->gdn_in, g, err);
    if (st || (st = proj_rows(w, &fl->gdn_z, &L->gdn_z, g->v0 * g->dv, v1 * g->dv, err)) ||
        (st = float_rows(w, &fl->gdn_ba, L->gdn_b, g->v0, v1, err)))
        return st;
    return float_rows(w, &fl->gdn_a, L->gdn_a, g->v0, v1, err);
}

/* [v0, v0 + nv) of a float vector [NV] (A_log, dt_bias). */
static moe8_status head_slice(float **dst, const moe8_tensor *t, const gdn_share *g,
                              moe8_error *err) {
    moe8_status st = norm_copy(dst, t, g->NV, err);
    if (!st) memmove(*dst, *dst + g->v0, (size_t)g->nv * sizeof(float));
    return st;
}

/* The conv weight of this rank's channels (q and k of its key heads, v of its
 * value heads), transposed to [K][C_local] fp32. */
static moe8_status conv_local(const moe8_weights *w, moe8_fwd_layer *fl, const moe8_tensor *t,
                              const gdn_share *g, moe8_error *err) {
    const int K = w->gdn_k, C = 2 * g->NK * g->dk + g->NV * g->dv;
    const int qk = g->nk * g->dk, Cl = 2 * qk + g->nv * g->dv;
    float *cw = malloc((size_t)C * K * sizeof(float));
    moe8_status st;
    if (!cw || !(fl->gdn_conv = malloc((size_t)Cl * K * sizeof(float)))) {
        free(cw);
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "tensor '%s': out of memory", t->name);
    }
    st = moe8_convert_to_f32(cw, t->data, t->dtype, (size_t)C * K, err);
    for (int c = 0; !st && c < Cl; c++) {
        const int gc = c < qk       ? g->k0 * g->dk + c
                       : c < 2 * qk ? (g->NK + g->k0) * g->dk + c - qk
                                    : 2 * g->NK * g->dk + g->v0 * g->dv + c - 2 * qk;
        for (int j = 0; j < K; j++) fl->gdn_conv[(size_t)j * Cl + c] = cw[(size_t)gc * K + j];
    }
    free(cw);
    return st;
}

/* A Gated DeltaNet layer, this rank's heads (all of them with one rank): the
 * projections, out_proj's columns of its value heads (its partial sum is
 * all-reduced), the conv weight transposed to [K][C], A_log, dt_bias and the
 * output norm in fp32. */
static moe8_status build_gdn(moe8_weights *w, moe8_fwd_layer *fl, const moe8_layer *L,
                             moe8_error *err) {
    const gdn_share g = gdn_share_of(w);
    moe8_status st;
    if ((st = gdn_inputs(w, fl, L, &g, err)) ||
        (st = proj_cols(w, &fl->gdn_out, &L->gdn_out, g.v0 * g.dv, (g.v0 + g.nv) * g.dv, err)) ||
        (st = head_slice(&fl->gdn_a_log, L->gdn_a_log, &g, err)) ||
        (st = head_slice(&fl->gdn_dt_bias, L->gdn_dt_bias, &g, err)) ||
        (st = norm_copy(&fl->gdn_norm, L->gdn_norm, g.dv, err)) ||
        (st = conv_local(w, fl, L->gdn_conv, &g, err)))
        return st;
    fl->gdn_slot = w->n_gdn++;
    w->has_dynamic |= fl->gdn_in.type == MOE8_QUANT_W8A8_DYNAMIC ||
                      fl->gdn_z.type == MOE8_QUANT_W8A8_DYNAMIC ||
                      fl->gdn_out.type == MOE8_QUANT_W8A8_DYNAMIC;
    return MOE8_OK;
}

/* kv_b_proj of the local heads [h0, h1), absorbed (SEMANTICS §7d): uk[h][c][d]
 * = W[h(DN+DV) + d][c] (k_nope rows, transposed) and uv[h][v][c] =
 * W[h(DN+DV) + DN + v][c]. A FLOAT weight keeps its dtype; a W8A8 one is
 * dequantized, W = deq_scale[j] / input_scale * Wq[j][c], its quant_bias
 * beyond the input offset's term, deq_scale[j] * (quant_bias[j] +
 * input_offset * sum_c Wq[j][c]), a bias: on k_nope it adds the same to
 * every score of a query and cancels in the softmax; on v it is added to
 * the output (uv_bias). */
static moe8_status build_absorbed(const moe8_weights *w, moe8_fwd_layer *fl, const moe8_model *m,
                                  const moe8_linear *kvb, int h0, int h1, moe8_error *err) {
    const int Lr = w->L, DN = w->DN, DV = w->DV, NHl = h1 - h0;
    const moe8_tensor *t = kvb->weight;
    const int quant = kvb->quant != MOE8_QUANT_FLOAT;
    const moe8_dtype dt = quant ? MOE8_DT_F32 : t->dtype;
    const size_t es = moe8_dtype_size(dt), ld = (size_t)Lr;
    unsigned char *uk = moe8_alloc_aligned((size_t)NHl * Lr * DN * es + 64);
    unsigned char *uv = moe8_alloc_aligned((size_t)NHl * DV * Lr * es + 64);
    int any_bias = 0;
    fl->uk = uk;
    fl->uv = uv;
    fl->uk_dt = dt;
    if (!uk || !uv || (quant && !(fl->uv_bias = calloc((size_t)NHl * DV, sizeof(float)))))
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "tensor '%s': cannot allocate its absorbed "
                         "form", t->name);
    for (int h = 0; h < NHl; h++)
        for (int i = 0; i < DN + DV; i++) {
            const size_t j = (size_t)(h0 + h) * (DN + DV) + (size_t)i;
            unsigned char *dst = i < DN ? uk + ((size_t)h * Lr * DN + (size_t)i) * es
                                        : uv + ((size_t)h * DV + (size_t)(i - DN)) * ld * es;
            const size_t step = i < DN ? (size_t)DN * es : es; /* between latent columns */
            if (!quant) {
                const unsigned char *src = (const unsigned char *)t->data + j * ld * es;
                for (int c = 0; c < Lr; c++) memcpy(dst + (size_t)c * step, src + (size_t)c * es, es);
                continue;
            }
            const int8_t *row = (const int8_t *)t->data + j * ld;
            const float deq = moe8_deq_scale_at(kvb->deq_scale, (int64_t)j), s = deq / kvb->in_scale;
            int64_t sum = 0;
            int32_t qb;
            for (int c = 0; c < Lr; c++) {
                const float v = s * (float)row[c];
                memcpy(dst + (size_t)c * step, &v, 4);
                sum += row[c];
            }
            memcpy(&qb, (const char *)kvb->quant_bias->data + j * 4, 4);
            const double b = (double)deq * ((double)qb + (double)kvb->in_offset * (double)sum);
            if (i >= DN) fl->uv_bias[(size_t)h * DV + (size_t)(i - DN)] = (float)b;
            any_bias |= i >= DN && b != 0.0;
        }
    if (!any_bias) {
        free(fl->uv_bias);
        fl->uv_bias = NULL;
    }
    moe8_st_release(m->st, t);
    return MOE8_OK;
}

/* Multi-head latent attention of this rank's heads: q_proj or q_a_proj
 * (replicated) + q_b_proj rows of its heads; kv_a_proj_with_mqa and the
 * norms replicated; kv_b_proj absorbed for its heads; o_proj columns. */
static moe8_status build_mla(moe8_weights *w, moe8_fwd_layer *fl, const moe8_model *m,
                             const moe8_layer *L, moe8_error *err) {
    const int h0 = m->shard.head_begin, h1 = m->shard.head_end, D = w->D;
    moe8_status st;
    if (w->QL) {
        if ((st = proj_rows(w, &fl->q_a, &L->q_a, 0, w->QL, err)) ||
            (st = norm_copy(&fl->q_a_norm, L->q_a_norm, w->QL, err)) ||
            (st = proj_rows(w, &fl->q_b, &L->q_b, h0 * D, h1 * D, err)))
            return st;
    } else if ((st = proj_rows(w, &fl->q, &L->q, h0 * D, h1 * D, err))) {
        return st;
    }
    if ((st = proj_rows(w, &fl->kv_a, &L->kv_a, 0, w->C, err)) ||
        (st = norm_copy(&fl->kv_a_norm, L->kv_a_norm, w->L, err)) ||
        (st = build_absorbed(w, fl, m, &L->kv_b, h0, h1, err)))
        return st;
    return proj_cols(w, &fl->o, &L->o, h0 * w->DV, h1 * w->DV, err);
}

/* The shared expert: gate/up rows and down columns of this rank's S slice,
 * like a dense MLP; its gate [1][H] whole. */
static moe8_status build_shared(moe8_weights *w, moe8_fwd_layer *fl, const moe8_model *m,
                                const moe8_layer *L, moe8_error *err) {
    const moe8_dist_shard *sh = &m->shard;
    const int s0 = sh->size > 1 ? sh->s_begin : 0;
    const int s1 = sh->size > 1 ? sh->s_end : (int)L->sh_gate.n_out;
    moe8_status st;
    if ((st = proj_rows(w, &fl->sh_gate, &L->sh_gate, s0, s1, err)) ||
        (st = proj_rows(w, &fl->sh_up, &L->sh_up, s0, s1, err)) ||
        (st = proj_cols(w, &fl->sh_down, &L->sh_down, s0, s1, err)))
        return st;
    if (L->sh_score) { /* qwen2_moe's sigmoid gate; deepseek's shared experts have none */
        const moe8_linear score = {.quant = MOE8_QUANT_FLOAT, .n_out = 1,
                                   .n_in = L->sh_score->shape[1], .weight = L->sh_score};
        if ((st = moe8_proj_init(&fl->sh_score, &score, 0, err))) return st;
    }
    fl->has_shared = 1;
    w->has_shared = 1;
    w->has_dynamic |= fl->sh_gate.type == MOE8_QUANT_W8A8_DYNAMIC ||
                      fl->sh_down.type == MOE8_QUANT_W8A8_DYNAMIC;
    if (fl->sh_gate.n > w->F_max) w->F_max = fl->sh_gate.n;
    return MOE8_OK;
}

static moe8_status build_layer(moe8_weights *w, int li, int float_experts, int n_threads,
                               moe8_error *err) {
    const moe8_model *m = w->model;
    const moe8_layer *L = &m->layers[li];
    const moe8_dist_shard *sh = &m->shard;
    moe8_fwd_layer *fl = &w->layers[li];
    moe8_status st;
    int f0, f1;
    const int zc = L->plan.norm_zc;
    if ((st = norm_copy_zc(&fl->attn_norm, L->attn_norm, w->H, zc, err)) ||
        (st = norm_copy_zc(&fl->ffn_norm, L->ffn_norm, w->H, zc, err)) ||
        (L->q_norm && (st = qk_norm_copy(w, &fl->q_norm, L, 0, err))) ||
        (L->k_norm && (st = qk_norm_copy(w, &fl->k_norm, L, 1, err))) ||
        (st = L->plan.attn == MOE8_ATTN_MLA   ? build_mla(w, fl, m, L, err)
              : L->plan.attn == MOE8_ATTN_GDN ? build_gdn(w, fl, L, err)
                                              : build_attn(w, fl, L, err)))
        return st;
    for (int i = 0; zc && fl->q_norm && i < w->D; i++) fl->q_norm[i] += 1.0f;
    for (int i = 0; zc && fl->k_norm && i < w->D; i++) fl->k_norm[i] += 1.0f;
    fl->plan = L->plan;
    fl->kv_layer = L->plan.attn == MOE8_ATTN_GDN ? -1 : w->n_kv_layers++;
    fl->is_moe = L->info.is_moe;
    if (fl->is_moe && L->info.has_shared && (st = build_shared(w, fl, m, L, err))) return st;
    if (fl->is_moe) return build_moe(w->cache, fl, m, li, float_experts, n_threads, err);
    f0 = sh->size > 1 ? sh->f_begin : 0;
    f1 = sh->size > 1 ? sh->f_end : (int)L->mlp_gate.n_out;
    if ((st = proj_rows(w, &fl->gate, &L->mlp_gate, f0, f1, err)) ||
        (st = proj_rows(w, &fl->up, &L->mlp_up, f0, f1, err)) ||
        (st = proj_cols(w, &fl->down, &L->mlp_down, f0, f1, err)))
        return st;
    if (fl->gate.n > w->F_max) w->F_max = fl->gate.n;
    return MOE8_OK;
}

static void assign_workspaces(moe8_weights *w) {
    for (int i = 0; i < w->n_layer; i++) {
        moe8_fwd_layer *fl = &w->layers[i];
        fl->ws_layer = i;
        for (int j = 0; fl->is_moe && j < i; j++)
            if (w->layers[j].is_moe && w->layers[j].ws_layer == j &&
                moe8_moe_layer_same_shape(fl->moe, w->layers[j].moe)) {
                fl->ws_layer = j;
                break;
            }
    }
}

static size_t layer_owned(const moe8_fwd_layer *fl, const moe8_weights *w) {
    size_t n = moe8_proj_owned_bytes(&fl->gdn_in) + moe8_proj_owned_bytes(&fl->gdn_z) +
               moe8_proj_owned_bytes(&fl->gdn_out) + moe8_proj_owned_bytes(&fl->q) + moe8_proj_owned_bytes(&fl->k) +
               moe8_proj_owned_bytes(&fl->v) + moe8_proj_owned_bytes(&fl->o) +
               moe8_proj_owned_bytes(&fl->gate) + moe8_proj_owned_bytes(&fl->up) +
               moe8_proj_owned_bytes(&fl->down) + moe8_proj_owned_bytes(&fl->sh_gate) +
               moe8_proj_owned_bytes(&fl->sh_up) + moe8_proj_owned_bytes(&fl->sh_down) +
               moe8_proj_owned_bytes(&fl->q_a) + moe8_proj_owned_bytes(&fl->q_b) +
               moe8_proj_owned_bytes(&fl->kv_a) +
               (size_t)(2 * w->H + 2 * w->D + w->QL + w->L) * sizeof(float);
    if (fl->sinks) n += (size_t)w->n_head * sizeof(float);
    if (fl->plan.attn_opts & MOE8_ATTN_QK_NORM_WHOLE) /* this rank's slices, not [D] each */
        n += (size_t)((w->n_head + w->n_kv - 2) * w->D) * sizeof(float);
    if (fl->uk)
        n += (size_t)w->n_head * (size_t)w->L * (size_t)(w->DN + w->DV) *
             moe8_dtype_size(fl->uk_dt);
    if (fl->moe) {
        moe8_moe_layer_info info;
        moe8_moe_layer_get_info(fl->moe, &info);
        n += info.packed_bytes;
    }
    return n;
}

/* lm_head, FLOAT in place or W8A8_DYNAMIC packed (its mapped pages then
 * released; a float one quantized to int8 first under --lm-head int8). Under TP split by vocabulary: rank r computes rows [r*C, (r+1)*C)
 * of the logits and an all-gather assembles them (one token per step reads
 * 1/N of lm_head per rank). */
static moe8_status build_lm_head(moe8_weights *w, const moe8_model *m, int n_threads,
                                 moe8_error *err) {
    const moe8_linear *src = &m->lm_head;
    const int int8 = moe8_model_lm_head_int8(m); /* --lm-head int8: quantized here */
    moe8_status st = MOE8_OK;
    int r0 = 0, r1 = (int)src->n_out;
    if (w->n_ranks > 1) {
        w->v_chunk = (w->V + w->n_ranks - 1) / w->n_ranks;
        w->v_begin = m->shard.rank * w->v_chunk;
        w->v_count = w->V - w->v_begin < w->v_chunk ? w->V - w->v_begin : w->v_chunk;
        if (w->v_count < 0) w->v_count = 0;
        r0 = w->v_begin;
        r1 = w->v_begin + w->v_count;
    }
    if (r1 > r0)
        st = int8 ? moe8_proj_init_int8(&w->lm_head, src, r0, r1, w->kt->qlayout, w->cache,
                                        n_threads, err)
                  : moe8_proj_init_cached(&w->lm_head, src, r0, r1, 0, (int)src->n_in, 0,
                                          w->kt->qlayout, w->cache, err);
    /* A FLOAT lm_head (untied) is read in place from the checkpoint's map: it
     * streams as fast from there as from a copy (docs/BENCHMARKS.md, "Packed
     * cache"), and copying it was a third of a warm load. Under --no-mmap it is
     * copied into anonymous memory like everything else (moe8_proj_own_float). */
    if (!st && m->params.no_mmap && w->lm_head.type == MOE8_QUANT_FLOAT &&
        !m->cfg.tie_word_embeddings && w->lm_head.n)
        st = moe8_proj_own_float(&w->lm_head, m->st, src->weight, err);
    if (!st && w->lm_head.type != MOE8_QUANT_FLOAT && w->lm_head.n &&
        !m->cfg.tie_word_embeddings) /* tied: the embedding, still read */
        moe8_st_release(m->st, src->weight);
    if (!st && w->lm_head.packed) {
        w->owned_bytes += moe8_proj_owned_bytes(&w->lm_head);
    }
    if (st) moe8_error_prefix(err, "lm_head");
    return st;
}

static void layer_free(moe8_fwd_layer *fl);

/* 1 when a projection of fl is W4A8_DYNAMIC (quantize --linear w4a8): the
 * forward then quantizes their inputs per token (moe8_weights.has_dynamic). */
static int layer_w4(const moe8_fwd_layer *fl) {
    const moe8_proj *p[] = {&fl->q, &fl->k, &fl->v, &fl->o, &fl->gate, &fl->up, &fl->down,
                            &fl->sh_gate, &fl->sh_up, &fl->sh_down, &fl->q_a, &fl->q_b,
                            &fl->kv_a, &fl->gdn_in, &fl->gdn_z, &fl->gdn_out};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
        if (p[i]->type == MOE8_QUANT_W4A8_DYNAMIC) return 1;
    return 0;
}

/* A streamed section's buffers, just freed, back to the system. glibc keeps
 * freed memory: once a buffer above its mmap threshold is freed, the
 * threshold rises to that size, later buffers come from the heap, and what is
 * freed there stays resident up to twice that. A build under a memory limit
 * (a cgroup at 60% of the cache size in test_cache) was OOM-killed or not
 * with the heap's layout (there, the length of the checkout's path). */
static void release_freed(void) {
#ifdef __GLIBC__
    malloc_trim(0);
#endif
}

/* One build of the weights with the packed cache pc (NULL, reading or
 * writing; the caller's, and the weights' own once they are returned). Writing,
 * each section goes to the file as soon as it is built and is freed at once,
 * no weights are returned, and pc maps the new file when finish succeeds. */
static moe8_status build_all(const moe8_model *m, const moe8_kernels *kt, int float_experts,
                             int n_threads, moe8_pcache *pc, moe8_weights **out,
                             moe8_error *err) {
    const moe8_config *c = &m->cfg;
    const moe8_family_cfg *fc = MOE8_FAM(c);
    moe8_weights *w = calloc(1, sizeof *w);
    const int streaming = pc && !moe8_pcache_reading(pc);
    moe8_status st;
    *out = NULL;
    if (!w) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "cannot allocate model weights");
    w->cache = pc;
    w->model = m;
    w->kt = kt;
    w->H = (int)c->hidden_size;
    w->n_layer = (int)c->num_hidden_layers;
    w->comm = m->shard.size > 1 ? m->params.dist->comm : NULL;
    w->n_head = m->shard.head_end - m->shard.head_begin;
    w->n_kv = m->shard.kv_end - m->shard.kv_begin;
    w->D = (int)c->head_dim;
    w->V = (int)c->vocab_size;
    w->E = (int)c->num_experts;
    w->K = (int)c->num_experts_per_tok;
    w->eps = (float)c->rms_norm_eps;
    w->mla = fc->kv_lora_rank > 0;
    w->L = (int)fc->kv_lora_rank;
    w->R = (int)fc->qk_rope_head_dim;
    w->DN = (int)fc->qk_nope_head_dim;
    w->DV = (int)fc->v_head_dim;
    w->QL = (int)fc->q_lora_rank;
    w->kv_planes = w->mla ? 1 : 2;
    w->C = w->mla ? w->L + w->R : w->D;
    if (w->mla) w->n_kv = 1;       /* the latent row: one kv head, replicated under TP */
    w->rope_dim = moe8_rope_dim(c);
    w->attn_scale = moe8_attn_scale(c);
    w->gdn_nk = (int)(fc->linear_num_key_heads / (m->shard.size > 1 ? m->shard.size : 1));
    w->gdn_nv = (int)(fc->linear_num_value_heads / (m->shard.size > 1 ? m->shard.size : 1));
    w->gdn_dk = (int)fc->linear_key_head_dim;
    w->gdn_dv = (int)fc->linear_value_head_dim;
    w->gdn_k = (int)fc->linear_conv_kernel_dim;
    w->gdn_grouped = moe8_arch_has(m->arch, MOE8_R_GDN_QKVZ);
    w->float_experts = float_experts;
    w->embed = m->embed->data;
    w->embed_dt = m->embed->dtype;
    w->layers = calloc((size_t)w->n_layer, sizeof *w->layers);
    st = w->layers ? MOE8_OK : moe8_fail(err, MOE8_ERR_NOMEM, -1, "cannot allocate layers");
    if (!st && (w->rope_dim % 2 || w->rope_dim <= 0))
        st = moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1, "rotary width %d must be even",
                       w->rope_dim);
    w->n_ranks = m->shard.size > 1 ? m->shard.size : 1;
    if (!st)
        st = norm_copy_zc(&w->final_norm, m->final_norm, w->H,
                          (m->arch->kinds.norm & MOE8_NORM_ZERO_CENTRED) != 0, err);
    for (int i = 0; !st && i < w->n_layer; i++) {
        moe8_pcache_section(w->cache, i);
        st = build_layer(w, i, float_experts, n_threads, err);
        if (st) {
            moe8_error_prefix(err, "layer %d", i);
        } else if (streaming) {
            moe8_pcache_section_done(w->cache);
            layer_free(&w->layers[i]);
            release_freed();
        } else {
            w->owned_bytes += layer_owned(&w->layers[i], w);
            w->has_dynamic |= layer_w4(&w->layers[i]);
        }
    }
    /* last: its copy (or packing) then does not add to the transient of a
     * layer's mapped pages being packed (the peak resident memory of loading) */
    moe8_pcache_section(w->cache, w->n_layer);
    if (!st) st = build_lm_head(w, m, n_threads, err);
    if (!st && streaming) {
        moe8_pcache_section_done(w->cache);
        moe8_proj_free(&w->lm_head);
        memset(&w->lm_head, 0, sizeof w->lm_head);
        release_freed();
    }
    if (!st) st = moe8_pcache_finish(w->cache, err);
    if (st || streaming) {
        w->cache = NULL; /* still the caller's */
        moe8_weights_free(w);
        return st;
    }
    assign_workspaces(w);
    *out = w;
    return MOE8_OK;
}

/* With no valid cache the weights are packed once, section by section into a
 * new cache file (never more than one section in memory), and then mapped from
 * it like any later load's; when the file cannot be written they are packed
 * again, in memory (the reason was logged). */
moe8_status moe8_weights_build(const moe8_model *m, int float_experts, int n_threads,
                               moe8_weights **out, moe8_error *err) {
    const moe8_kernels *kt = moe8_kernels_get(); /* packed for it, run with it */
    moe8_pcache *pc = NULL;
    moe8_weights *none = NULL;
    moe8_status st = moe8_pcache_open(m, kt, float_experts, &pc, err);
    *out = NULL;
    if (st) return st;
    if (pc && !moe8_pcache_reading(pc))
        st = build_all(m, kt, float_experts, n_threads, pc, &none, err);
    if (!st && pc && !moe8_pcache_reading(pc)) { /* not written: pack in memory */
        moe8_pcache_free(pc);
        pc = NULL;
    }
    if (!st) st = build_all(m, kt, float_experts, n_threads, pc, out, err);
    if (st) moe8_pcache_free(pc);
    return st;
}

static void layer_free(moe8_fwd_layer *fl) {
    free(fl->attn_norm);
    free(fl->ffn_norm);
    free(fl->q_norm);
    free(fl->k_norm);
    free(fl->sinks);
    moe8_proj_free(&fl->q);
    moe8_proj_free(&fl->k);
    moe8_proj_free(&fl->v);
    moe8_proj_free(&fl->o);
    moe8_proj_free(&fl->gate);
    moe8_proj_free(&fl->up);
    moe8_proj_free(&fl->down);
    moe8_proj_free(&fl->sh_gate);
    moe8_proj_free(&fl->sh_up);
    moe8_proj_free(&fl->sh_down);
    moe8_proj_free(&fl->sh_score);
    moe8_proj_free(&fl->q_a);
    moe8_proj_free(&fl->q_b);
    moe8_proj_free(&fl->kv_a);
    free(fl->q_a_norm);
    free(fl->kv_a_norm);
    moe8_free_aligned(fl->uk);
    moe8_free_aligned(fl->uv);
    free(fl->uv_bias);
    moe8_proj_free(&fl->gdn_in);
    moe8_proj_free(&fl->gdn_z);
    moe8_proj_free(&fl->gdn_ba);
    moe8_proj_free(&fl->gdn_a);
    moe8_proj_free(&fl->gdn_out);
    free(fl->gdn_conv);
    free(fl->gdn_a_log);
    free(fl->gdn_dt_bias);
    free(fl->gdn_norm);
    free(fl->gdn_own);
    moe8_moe_layer_free(fl->moe);
    memset(fl, 0, sizeof *fl);
}

void moe8_weights_free(moe8_weights *w) {
    if (!w) return;
    for (int i = 0; w->layers && i < w->n_layer; i++) layer_free(&w->layers[i]);
    free(w->layers);
    moe8_proj_free(&w->lm_head);
    free(w->final_norm);
    moe8_pcache_free(w->cache); /* after every weight that points into it */
    free(w);
}

/* ---- lifetime: the model's prepared weights -------------------------------- */

moe8_status moe8_weights_acquire(moe8_model *m, int float_experts, int n_threads,
                                 const moe8_weights **out, moe8_error *err) {
    const int fe = float_experts != 0;
    moe8_status st = MOE8_OK;
    *out = NULL;
    pthread_mutex_lock(&m->prep_lock);
    if (!m->prepared[fe].w) st = moe8_weights_build(m, fe, n_threads, &m->prepared[fe].w, err);
    if (!st) {
        m->prepared[fe].refs++;
        *out = m->prepared[fe].w;
    }
    pthread_mutex_unlock(&m->prep_lock);
    return st;
}

void moe8_weights_release(moe8_model *m, const moe8_weights *w) {
    if (!w) return;
    pthread_mutex_lock(&m->prep_lock);
    for (int fe = 0; fe < 2; fe++) {
        if (m->prepared[fe].w != w || --m->prepared[fe].refs > 0) continue;
        moe8_weights_free(m->prepared[fe].w);
        m->prepared[fe].w = NULL;
    }
    pthread_mutex_unlock(&m->prep_lock);
}

moe8_status moe8_model_prepare(moe8_model *m, int float_experts, int n_threads,
                               moe8_error *err) {
    const moe8_weights *w = NULL;
    const int fe = float_experts != 0;
    moe8_status st;
    if (!m) return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "prepare: no model");
    st = moe8_weights_acquire(m, fe, n_threads, &w, err);
    if (moe8_dist_size(m->params.dist) > 1) st = moe8_dist_agree(m->params.dist, st, err);
    if (st) {
        moe8_weights_release(m, w);
        return st;
    }
    pthread_mutex_lock(&m->prep_lock);
    const int first = !m->prepared[fe].pinned;
    m->prepared[fe].pinned = 1;
    pthread_mutex_unlock(&m->prep_lock);
    if (!first) moe8_weights_release(m, w); /* prepared before: one reference is enough */
    return MOE8_OK;
}

void moe8_model_release_prepared(moe8_model *m) {
    for (int fe = 0; fe < 2; fe++)
        if (m->prepared[fe].pinned) {
            m->prepared[fe].pinned = 0;
            moe8_weights_release(m, m->prepared[fe].w);
        }
}
