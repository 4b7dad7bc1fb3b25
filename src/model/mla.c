/*
 * mla.c — the attention block of DeepSeek's multi-head latent attention
 * (SEMANTICS §7d), in its absorbed form: the projections of the layer input
 * (q_proj, or q_a_proj then q_a_layernorm and q_b_proj; kv_a_proj_with_mqa),
 * the latent row normed (kv_a_layernorm) and stored in the cache with the
 * rotated k_pe, each head's q_nope taken into latent space through kv_b_proj's
 * k rows (uk), MQA flash attention over the latent rows (one kv head of width
 * L + R whose first L values are also the value), each head's output brought
 * back through kv_b_proj's v rows (uv, + a folded W8A8 bias), o_proj. The
 * absorbed uk / uv were made by the weights' build (load/weights.c); the row
 * loops, the linear path and the residual step are forward.c's
 * (forward_run.h).
 *
 * Does not: build weights, or compute anything outside the attention block.
 */
#include <string.h>

#include "core/core.h"
#include "model/forward.h"
#include "model/forward_run.h"

static void q_a_norm_row(const moe8_fwd_run *r, const void *layer, int t) {
    const moe8_fwd_layer *L = layer;
    float *x = r->s->qa + (size_t)t * r->w->QL;
    moe8_rmsnorm_rows(x, r->w->QL, x, r->w->QL, 1, r->w->QL, L->q_a_norm, MOE8_MLA_NORM_EPS);
}

/* Per token: the latent c normed (kv_a_layernorm), k_pe and each head's q_pe
 * rotated, the cache row [c, k_pe] stored, q_pe copied beside the head's
 * absorbed query in qc. */
static void mla_rope_row(const moe8_fwd_run *r, const void *ctx, int t) {
    const moe8_fwd_qk *c = ctx;
    const moe8_weights *w = r->w;
    moe8_fwd_scratch *s = r->s;
    const int NH = w->n_head, D = w->D, C = w->C, Lr = w->L, R = w->R;
    const float *cs = c->rope + (size_t)c->pos[t] * (size_t)R;
    float *kv = s->kva + (size_t)t * C, *q = s->q + (size_t)t * NH * D;
    float *qc = s->qc + (size_t)t * NH * C;
    MOE8_ASSERT(c->pos[t] < c->n_ctx);
    moe8_rmsnorm_rows(kv, Lr, kv, Lr, 1, Lr, c->L->kv_a_norm, MOE8_MLA_NORM_EPS);
    moe8_rope_apply(c->L->plan.rope, kv + Lr, 1, R, R, cs);
    moe8_rope_apply(c->L->plan.rope, q + w->DN, NH, D, R, cs);
    moe8_kv_store(c->cache->k0 + moe8_kv_row(c->cache, c->seq[t], 0, c->pos[t]), kv, C,
                  c->cache->dt);
    for (int h = 0; h < NH; h++)
        memcpy(qc + (size_t)h * C + Lr, q + (size_t)h * D + w->DN, (size_t)R * sizeof(float));
}

/* Head h: qc[t][h][0:L] = q_nope[t][h] @ uk[h]^T (the query in latent space). */
static void absorb_q_head(const moe8_fwd_run *r, const void *layer, int h) {
    const moe8_fwd_layer *L = layer;
    const moe8_weights *w = r->w;
    const size_t es = moe8_dtype_size(L->uk_dt);
    r->kt->gemm_f32_wf(r->s->qc + (size_t)h * w->C, w->n_head * w->C, r->s->q + (size_t)h * w->D,
                       w->n_head * w->D, (const char *)L->uk + (size_t)h * w->L * w->DN * es,
                       L->uk_dt, w->DN, r->T, 0, w->L, w->DN);
}

/* Head h: attv[t][h] = att[t][h][0:L] @ uv[h]^T (+ a folded v bias). */
static void absorb_v_head(const moe8_fwd_run *r, const void *layer, int h) {
    const moe8_fwd_layer *L = layer;
    const moe8_weights *w = r->w;
    const size_t es = moe8_dtype_size(L->uk_dt);
    const int ldv = w->n_head * w->DV;
    float *y = r->s->attv + (size_t)h * w->DV;
    r->kt->gemm_f32_wf(y, ldv, r->s->att + (size_t)h * w->C, w->n_head * w->C,
                       (const char *)L->uv + (size_t)h * w->DV * w->L * es, L->uk_dt, w->L, r->T,
                       0, w->DV, w->L);
    for (int t = 0; L->uv_bias && t < r->T; t++)
        for (int j = 0; j < w->DV; j++) y[(size_t)t * ldv + j] += L->uv_bias[(size_t)h * w->DV + j];
}

/* The MLA form of attn_block: the projections of the layer input (q_proj or
 * q_a_proj, kv_a_proj_with_mqa: one pass when they can share it), q_b_proj
 * of the normed q_a, RoPE and the cache row, the absorbed query, MQA flash
 * attention over the latent rows (one kv head of width L + R, value = its
 * first L), back to each head's v, o_proj. */
moe8_status moe8_fwd_attn_mla(const moe8_fwd_run *r, const moe8_fwd_layer *L,
                              const moe8_attn_cache *cache, int64_t n_ctx, const float *rope,
                              const int32_t *seq, const int32_t *pos, moe8_error *err) {
    const moe8_weights *w = r->w;
    moe8_fwd_scratch *s = r->s;
    const int T = r->T;
    const moe8_proj *qa = w->QL ? &L->q_a : &L->q;
    float *qa_out = w->QL ? s->qa : s->q;
    const moe8_proj *p[2] = {qa, &L->kv_a};
    float *const y[2] = {qa_out, s->kva};
    moe8_status st;
    moe8_fwd_observe(r, L, 0, s->h, w->H);
    if ((st = moe8_fwd_lin_group(r, p, y, 2, s->h, T, err))) return st;
    if (w->QL) {
        moe8_fwd_rows(r, T, q_a_norm_row, L);
        moe8_fwd_observe(r, L, 4, s->qa, w->QL);
        if ((st = moe8_fwd_lin(r, &L->q_b, NULL, s->q, s->qa, T, err))) return st;
    }
    moe8_fwd_mark(r, MOE8_PHASE_ATTN_PROJ);
    {
        const moe8_fwd_qk c = {L, cache, n_ctx, rope, seq, pos};
        moe8_fwd_rows(r, T, mla_rope_row, &c);
    }
    moe8_fwd_mark(r, MOE8_PHASE_ELEMENTWISE);
    /* the absorbed products are timed with the attention core they replace */
    moe8_fwd_rows(r, w->n_head, absorb_q_head, L);
    moe8_attention(r->kt, s->att, s->qc, cache, seq, pos, T, s->attn_tiles, s->attn_work,
                   s->attn_work_floats, r->nt);
    moe8_fwd_rows(r, w->n_head, absorb_v_head, L);
    moe8_fwd_mark(r, MOE8_PHASE_ATTN_CORE);
    moe8_fwd_observe(r, L, 1, s->attv, w->n_head * w->DV);
    if ((st = moe8_fwd_lin(r, &L->o, NULL, s->tmp, s->attv, T, err))) return st;
    moe8_fwd_mark(r, MOE8_PHASE_ATTN_PROJ);
    if ((st = moe8_fwd_allreduce(r, s->tmp, err))) return st;
    moe8_fwd_add_norm(r, L->ffn_norm);
    moe8_fwd_mark(r, MOE8_PHASE_ELEMENTWISE);
    return MOE8_OK;
}

