/*
 * attn_gqa.c — the attention kind MOE8_ATTN_GQA (arch/plan.h; SEMANTICS §7):
 * grouped-query attention over q/k/v/o projections, with the options a plan
 * gives it: q/k/v biases (FLOAT; a W8A8 bias is in quant_bias), RMSNorm of
 * each q and k head or of the whole q and k projections (minimax_m2: one
 * mean of squares over NH*D and NKV*D; under TP each rank holds its heads'
 * part, so the ranks sum their sums of squares, two floats per token, before
 * dividing by the whole width), then the layer's rotary kind (rotary.c) over its rotary
 * width, K and V into the paged cache, causal attention (attention.c) and
 * o_proj, whose partial sum is all-reduced under TP.
 *
 *   h = rmsnorm(x); q,k,v = h@W^T (+ bias); per-head rmsnorm of q,k
 *   (qwen3_moe); RoPE; k,v -> cache at (seq, pos); GQA attention;
 *   x += o_proj(att); h = rmsnorm(x) * ffn_norm
 *
 * The output gate (qwen3_next, qwen3_5_moe): q_proj gives each head [query
 * D, gate D]; the attention output of head h is multiplied by
 * sigmoid(gate_h) before o_proj.
 *
 * gpt_oss's layers add an o bias after o_proj (on one rank under TP) and
 * attend with sinks and, on its sliding layers, a window (attn_sink.c).
 *
 * Does not: run multi-head latent attention (mla.c).
 */
#include <math.h>
#include <string.h>

#include "dist/dist.h"
#include "model/forward_run.h"

static void qkv_bias_row(const moe8_fwd_run *r, const void *layer, int t) {
    const moe8_fwd_layer *L = layer;
    moe8_fwd_scratch *s = r->s;
    moe8_proj_add_bias(&L->q, s->q + (size_t)t * L->q.n, L->q.n, 1);
    moe8_proj_add_bias(&L->k, s->k + (size_t)t * L->k.n, L->k.n, 1);
    moe8_proj_add_bias(&L->v, s->v + (size_t)t * L->v.n, L->v.n, 1);
}

/* q/k/v biases (FLOAT q/k/v of qwen2_moe), added after the products. */
static void qkv_bias(const moe8_fwd_run *r, const moe8_fwd_layer *L) {
    if (!L->q.fbias && !L->k.fbias && !L->v.fbias) return;
    moe8_fwd_rows(r, r->T, qkv_bias_row, L);
}

/* ---- q/k RMSNorm over the whole projection (MOE8_ATTN_QK_NORM_WHOLE) ---- */

/* The sums of squares of token t's q and k on this rank into ss[2t], ss[2t+1].
 * A kv head several ranks hold (more ranks than kv heads) counts once: each
 * holder adds its share 1 / (ranks x local kv heads / NKV). */
static void whole_ss_row(const moe8_fwd_run *r, const void *ctx, int t) {
    const moe8_weights *w = r->w;
    const moe8_dist_shard *sh = &w->model->shard;
    const int nq = w->n_head * w->D, nk = w->n_kv * w->D;
    const float *q = r->s->q + (size_t)t * nq, *k = r->s->k + (size_t)t * nk;
    const int64_t holders =
        w->comm ? (int64_t)sh->size * w->n_kv / w->model->cfg.num_key_value_heads : 1;
    float *ss = (float *)ctx;
    double a = 0, b = 0;
    for (int j = 0; j < nq; j++) a += (double)q[j] * q[j];
    for (int j = 0; j < nk; j++) b += (double)k[j] * k[j];
    ss[2 * t] = (float)a;
    ss[2 * t + 1] = (float)(b / (double)holders);
}

/* x[n] *= w / sqrt(ss / all + eps): the RMSNorm of a whole projection of
 * `all` values of which this rank holds n. */
static void whole_norm(float *x, int n, double ss, int64_t all, const float *w, float eps) {
    const float rs = (float)(1.0 / sqrt(ss / (double)all + (double)eps));
    for (int j = 0; j < n; j++) x[j] = (x[j] * rs) * w[j];
}

/* ss[2T] (in s->tmp, free until o_proj writes it): the sums of squares of
 * every token's q and k over the whole model (summed over the ranks). */
static moe8_status whole_ss(const moe8_fwd_run *r, float *ss, moe8_error *err) {
    moe8_status st = MOE8_OK;
    moe8_fwd_rows(r, r->T, whole_ss_row, ss);
    if (r->w->comm) {
        st = moe8_comm_allreduce_sum_f32(r->w->comm, ss, 2 * (size_t)r->T, err);
        moe8_fwd_mark(r, MOE8_PHASE_COMM);
    }
    return st;
}

static void qk_row(const moe8_fwd_run *r, const void *ctx, int t) {
    const moe8_fwd_qk *c = ctx;
    const moe8_weights *w = r->w;
    moe8_fwd_scratch *s = r->s;
    const int NH = w->n_head, NKV = w->n_kv, D = w->D;
    const float *cs = c->rope + (size_t)c->pos[t] * (size_t)w->rope_dim;
    float *q = s->q + (size_t)t * NH * D, *k = s->k + (size_t)t * NKV * D;
    unsigned char *kc = c->cache->k0;
    MOE8_ASSERT(c->pos[t] < c->n_ctx); /* its rope row and its block exist */
    if (c->L->plan.attn_opts & MOE8_ATTN_QK_NORM_WHOLE) {
        const moe8_config *cfg = &w->model->cfg;
        whole_norm(q, NH * D, s->tmp[2 * t], cfg->num_attention_heads * cfg->head_dim,
                   c->L->q_norm, w->eps);
        whole_norm(k, NKV * D, s->tmp[2 * t + 1], cfg->num_key_value_heads * cfg->head_dim,
                   c->L->k_norm, w->eps);
    } else {
        if (c->L->q_norm) moe8_rmsnorm_heads(q, 1, NH, D, c->L->q_norm, w->eps);
        if (c->L->k_norm) moe8_rmsnorm_heads(k, 1, NKV, D, c->L->k_norm, w->eps);
    }
    moe8_rope_apply(c->L->plan.rope, q, NH, D, w->rope_dim, cs);
    moe8_rope_apply(c->L->plan.rope, k, NKV, D, w->rope_dim, cs);
    for (int h = 0; h < NKV; h++) {
        size_t off = moe8_kv_row(c->cache, c->seq[t], h, c->pos[t]);
        moe8_kv_store(kc + off, k + (size_t)h * D, D, c->cache->dt);
        moe8_kv_store(kc + off + c->cache->v_off, s->v + ((size_t)t * NKV + h) * D, D,
                      c->cache->dt);
    }
}

/* Per token: RMSNorm of each q and k head, the rotary kind, K/V into the cache. */
static void qk_rope_store(const moe8_fwd_run *r, const moe8_fwd_layer *L, const moe8_attn_cache *cache,
                          int64_t n_ctx, const float *rope, const int32_t *seq,
                          const int32_t *pos) {
    const moe8_fwd_qk c = {L, cache, n_ctx, rope, seq, pos};
    moe8_fwd_rows(r, r->T, qk_row, &c);
}

/* ---- the output gate (MOE8_ATTN_OUT_GATE) ---- */

/* qg[t] = per head [query D, gate D] into q[t] and gate[t]. */
static void gate_split_row(const moe8_fwd_run *r, const void *ctx, int t) {
    const int NH = r->w->n_head, D = r->w->D;
    moe8_fwd_scratch *s = r->s;
    const float *qg = s->qg + (size_t)t * NH * 2 * D;
    (void)ctx;
    for (int h = 0; h < NH; h++) {
        memcpy(s->q + ((size_t)t * NH + h) * D, qg + (size_t)h * 2 * D, (size_t)D * sizeof(float));
        memcpy(s->gate + ((size_t)t * NH + h) * D, qg + (size_t)h * 2 * D + D,
               (size_t)D * sizeof(float));
    }
}

/* att[t] *= sigmoid(gate[t]). */
static void gate_apply_row(const moe8_fwd_run *r, const void *ctx, int t) {
    const int n = r->w->n_head * r->w->D;
    float *a = r->s->att + (size_t)t * n;
    const float *g = r->s->gate + (size_t)t * n;
    (void)ctx;
    for (int j = 0; j < n; j++) a[j] = a[j] / (1.0f + expf(-g[j]));
}

/* x += o_proj(attention(rmsnorm(x))); on entry h = rmsnorm(x) * attn_norm, on
 * exit h = rmsnorm(x) * ffn_norm. */
moe8_status moe8_fwd_attn_gqa(const moe8_fwd_run *r, const moe8_fwd_layer *L,
                              const moe8_attn_cache *cache, int64_t n_ctx, const float *rope,
                              const int32_t *seq, const int32_t *pos, moe8_error *err) {
    moe8_fwd_scratch *s = r->s;
    moe8_status st;
    const int T = r->T;
    moe8_fwd_observe(r, L, 0, s->h, r->w->H);
    const int gated = (L->plan.attn_opts & MOE8_ATTN_OUT_GATE) != 0;
    const moe8_proj *p[3] = {&L->q, &L->k, &L->v};
    float *const y[3] = {gated ? s->qg : s->q, s->k, s->v};
    if ((st = moe8_fwd_lin_group(r, p, y, 3, s->h, T, err))) return st;
    if (gated) moe8_fwd_rows(r, T, gate_split_row, NULL);
    qkv_bias(r, L);
    moe8_fwd_mark(r, MOE8_PHASE_ATTN_PROJ);
    if ((L->plan.attn_opts & MOE8_ATTN_QK_NORM_WHOLE) && (st = whole_ss(r, s->tmp, err))) return st;
    qk_rope_store(r, L, cache, n_ctx, rope, seq, pos);
    moe8_fwd_mark(r, MOE8_PHASE_ELEMENTWISE);
    if (L->sinks && L->plan.window <= 0) /* gpt_oss's full layers: the kernel, then the sink */
        moe8_attention_sinks(r->kt, s->att, s->q, cache, seq, pos, T, L->sinks, s->attn_tiles,
                             s->attn_work, s->attn_work_floats, r->nt);
    else if (L->sinks || L->plan.window > 0) /* gpt_oss's sliding layers: attn_sink.c */
        moe8_attention_sink(s->att, s->q, cache, seq, pos, T, L->sinks, L->plan.window, r->nt);
    else
        moe8_attention(r->kt, s->att, s->q, cache, seq, pos, T, s->attn_tiles, s->attn_work,
                       s->attn_work_floats, r->nt);
    moe8_fwd_mark(r, MOE8_PHASE_ATTN_CORE);
    if (gated) moe8_fwd_rows(r, T, gate_apply_row, NULL);
    moe8_fwd_observe(r, L, 1, s->att, r->w->n_head * r->w->D);
    if ((st = moe8_fwd_lin(r, &L->o, NULL, s->tmp, s->att, T, err))) return st;
    moe8_proj_add_bias(&L->o, s->tmp, r->w->H, T); /* an o bias (gpt_oss; rank 0's under TP) */
    moe8_fwd_mark(r, MOE8_PHASE_ATTN_PROJ);
    if ((st = moe8_fwd_allreduce(r, s->tmp, err))) return st;
    moe8_fwd_add_norm(r, L->ffn_norm);
    moe8_fwd_mark(r, MOE8_PHASE_ELEMENTWISE);
    return MOE8_OK;
}
