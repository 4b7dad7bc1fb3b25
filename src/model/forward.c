/*
 * forward.c — the forward pass of every family (SEMANTICS §7; docs/MODELS.md)
 * over the prepared weights (load/weights.h): the embedding, the per-layer
 * loop composing each layer's kinds (its plan, arch/plan.h) — the attention
 * kind (attn_gqa.c, mla.c) then the feed-forward kind (ffn.c) — lm_head, and
 * the steps the kinds' files share (forward_run.h): row loops, the linear
 * path, the residual add with the next norm, the all-reduce.
 *
 * moe8_forward, for T tokens each tagged (seq, pos):
 *   x = embed[token]
 *   per layer: h = rmsnorm(x); x += attention kind(h) (attn_gqa.c: q,k,v
 *              (+ bias), per-head q/k norm, the rotary kind, the cache,
 *              causal GQA, the output gate; mla.c; attn_gdn.c: Gated
 *              DeltaNet over each sequence's recurrent state);
 *              h = rmsnorm(x); x += feed-forward kind(h)
 *              (ffn.c: dense SwiGLU MLP, MoE, MoE + shared expert)
 *   logits[i] = rmsnorm(x[out_idx[i]]) @ lm_head^T
 * A W8A8_DYNAMIC lm_head quantizes each final-normed row per token first.
 * Every buffer comes from the context's scratch: nothing is allocated here.
 * Every GEMM runs with the kernel table the weights were packed for (w->kt),
 * and each projection and MoE layer checks that table reads its layout.
 *
 * Tensor / expert parallelism (SEMANTICS §8): each rank holds its share of
 * the weights (load/weights.c) and the forward all-reduces the three partial
 * sums (o_proj, dense down, MoE output) before adding them to x; lm_head is
 * split by vocabulary rows and the logits all-gathered, so every rank ends
 * with the same logits. With one rank nothing communicates.
 *
 * Does not: build or pack weights (load/), validate the batch (context.c
 * does), sample, or agree on errors (context.c and the model load do).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "core/core.h"
#include "core/pool.h"
#include "dist/dist.h"
#include "model/forward.h"
#include "model/forward_run.h"
#include "moe/moe.h"

/* ---- steps shared with mla.c (forward_run.h) ---------------------------------- */

/* The row loops between the GEMMs run on the pool's threads (core/pool.h),
 * 4 chunks of consecutive rows a thread: a row's result is computed the
 * same way whichever thread takes it, so nothing depends on the thread
 * count or the schedule. One row (decode) runs inline. */
typedef struct {
    const moe8_fwd_run *r;
    moe8_fwd_row_fn fn;
    const void *ctx;
    int64_t n, n_chunks;
} rows_job;

static void rows_chunk(void *ctx, int64_t c, int thread) {
    const rows_job *j = ctx;
    int64_t t0, t1;
    (void)thread;
    moe8_pool_part(j->n, c, j->n_chunks, &t0, &t1);
    for (int64_t t = t0; t < t1; t++) j->fn(j->r, j->ctx, (int)t);
}

void moe8_fwd_rows(const moe8_fwd_run *r, int n, moe8_fwd_row_fn fn, const void *ctx) {
    rows_job j = {r, fn, ctx, n, moe8_pool_chunks(n, r->nt, 4)};
    moe8_pool_run(r->nt, j.n_chunks, rows_chunk, &j);
}

typedef struct {
    const moe8_proj *p;
    const float *x;
} quant_ctx;

static void quant_row(const moe8_fwd_run *r, const void *ctx, int t) {
    const quant_ctx *c = ctx;
    moe8_fwd_scratch *s = r->s;
    moe8_proj_quant(s->xq + (size_t)t * s->ldq, s->ldq, c->x + (size_t)t * c->p->k, c->p->k, 1,
                    c->p->k, c->p->in_scale, c->p->in_offset);
}

/* Activation codes of a W8A8 static linear for T rows, on all threads. */
static void quant_static(const moe8_fwd_run *r, const moe8_proj *p, const float *x, int T) {
    const quant_ctx c = {p, x};
    moe8_fwd_rows(r, T, quant_row, &c);
}

typedef struct {
    const float *x;
    int k;
} dyn_ctx;

static void quant_dyn_row(const moe8_fwd_run *r, const void *ctx, int t) {
    const dyn_ctx *c = ctx;
    moe8_fwd_scratch *s = r->s;
    r->kt->quant_rows(s->xq + (size_t)t * s->ldq, s->ldq, s->dyn_sx + t, s->dyn_xsum + t,
                      c->x + (size_t)t * c->k, c->k, 1, c->k);
}

/* Per-token codes of a W8A8_DYNAMIC linear (SEMANTICS §4) for T rows, on all threads. */
static void quant_dynamic(const moe8_fwd_run *r, const float *x, int k, int T) {
    const dyn_ctx c = {x, k};
    moe8_fwd_rows(r, T, quant_dyn_row, &c);
}

/* y[T][p->n] = p(x[T][p->k]); int8 codes are reused when `prev` was applied
 * to the same x and quantized it the same way (W8A8: the same input
 * scale/offset; W8A8_DYNAMIC: per token, so any dynamic prev of that x).
 * The table is checked first: a refused projection quantizes nothing. */
moe8_status moe8_fwd_lin(const moe8_fwd_run *r, const moe8_proj *p, const moe8_proj *prev,
                         float *y, const float *x, int T, moe8_error *err) {
    moe8_fwd_scratch *s = r->s;
    const moe8_status st = moe8_proj_check(p, r->kt, err);
    if (st) return st;
    if (moe8_proj_dynamic(p)) { /* W8A8_DYNAMIC or W4A8_DYNAMIC: the same codes */
        if (!(prev && moe8_proj_dynamic(prev) && prev->k == p->k))
            quant_dynamic(r, x, p->k, T);
        return moe8_proj_apply(p, r->kt, y, p->n, x, p->k, s->xq, s->ldq, s->dyn_sx,
                               s->dyn_xsum, T, r->nt);
    }
    if (p->type == MOE8_QUANT_W8A8 && !(prev && moe8_proj_same_input(p, prev)))
        quant_static(r, p, x, T);
    return moe8_proj_apply(p, r->kt, y, p->n, x, p->k, s->xq, s->ldq, s->ones, s->ones_i, T,
                           r->nt);
}

/* y[i] = p[i](x) for n projections of the same input (q/k/v; MLA's q_proj or
 * q_a_proj with kv_a_proj_with_mqa): one pass over all of them when they are
 * FLOAT or W8A8 with one input scale/offset, each on its own otherwise
 * (codes shared where moe8_fwd_lin can). */
moe8_status moe8_fwd_lin_group(const moe8_fwd_run *r, const moe8_proj *const *p,
                               float *const *y, int n, const float *x, int T, moe8_error *err) {
    moe8_fwd_scratch *s = r->s;
    moe8_status st;
    int one_pass = 1;
    int ldy[3];
    MOE8_ASSERT(n <= 3);
    for (int i = 0; i < n; i++) {
        if ((st = moe8_proj_check(p[i], r->kt, err))) return st;
        ldy[i] = p[i]->n;
        if (i && (p[i]->type != p[0]->type ||
                  (p[0]->type != MOE8_QUANT_FLOAT && !moe8_proj_same_input(p[i - 1], p[i]))))
            one_pass = 0;
    }
    if (moe8_proj_dynamic(p[0])) one_pass = 0;
    for (int i = 0; !one_pass && i < n; i++)
        if ((st = moe8_fwd_lin(r, p[i], i ? p[i - 1] : NULL, y[i], x, T, err))) return st;
    if (!one_pass) return MOE8_OK;
    if (p[0]->type == MOE8_QUANT_W8A8) quant_static(r, p[0], x, T);
    return moe8_proj_apply_group(p, y, ldy, n, r->kt, x, p[0]->k, s->xq, s->ldq, s->ones,
                                 s->ones_i, T, r->nt);
}

static void add_norm_row(const moe8_fwd_run *r, const void *norm, int t) {
    const int H = r->w->H;
    float *xr = r->s->x + (size_t)t * H;
    const float *yr = r->s->tmp + (size_t)t * H;
    for (int j = 0; j < H; j++) xr[j] += yr[j];
    if (norm) moe8_rmsnorm_rows(r->s->h + (size_t)t * H, H, xr, H, 1, H, norm, r->w->eps);
}

/* The residual add x += tmp, then (norm != NULL) h = rmsnorm(x) * norm: one
 * pass over each row, on all threads. */
void moe8_fwd_add_norm(const moe8_fwd_run *r, const float *norm) {
    moe8_fwd_rows(r, r->T, add_norm_row, norm);
}

moe8_status moe8_fwd_allreduce(const moe8_fwd_run *r, float *y, moe8_error *err) {
    if (!r->w->comm) return MOE8_OK;
    moe8_status st = moe8_comm_allreduce_sum_f32(r->w->comm, y, (size_t)r->T * (size_t)r->w->H, err);
    moe8_fwd_mark(r, MOE8_PHASE_COMM);
    return st;
}

/* ---- lm_head and the layer loop ----------------------------------------------- */

static void lm_quant_row(const moe8_fwd_run *r, const void *ctx, int i) {
    moe8_fwd_scratch *s = r->s;
    const int H = r->w->H;
    (void)ctx;
    r->kt->quant_rows(s->xq + (size_t)i * s->ldq, s->ldq, s->lm_sx + i, s->lm_xsum + i,
                      s->h + (size_t)i * H, H, 1, H);
}

/* y[n_out][ldy] = this rank's lm_head rows of the final-normed s->h. A
 * W8A8_DYNAMIC lm_head first quantizes each row per token (SEMANTICS §4);
 * under TP every rank computes the same codes of the same whole row. */
static moe8_status lm_head_apply(const moe8_fwd_run *r, float *y, int ldy, int n_out,
                                 int n_threads, moe8_error *err) {
    const moe8_weights *w = r->w;
    moe8_fwd_scratch *s = r->s;
    const moe8_status st = moe8_proj_check(&w->lm_head, r->kt, err);
    if (st) return st;
    if (w->lm_head.type != MOE8_QUANT_W8A8_DYNAMIC)
        return moe8_proj_apply(&w->lm_head, r->kt, y, ldy, s->h, w->H, NULL, 0, NULL, NULL,
                               n_out, n_threads);
    moe8_fwd_rows(r, n_out, lm_quant_row, NULL);
    return moe8_proj_apply(&w->lm_head, r->kt, y, ldy, s->h, w->H, s->xq, s->ldq, s->lm_sx,
                           s->lm_xsum, n_out, n_threads);
}

/* TP logits: this rank's vocab rows, all-gathered into [n_out][V] on every rank. */
static moe8_status lm_head_split(const moe8_fwd_run *r, int n_out, int n_threads, moe8_error *err) {
    const moe8_weights *w = r->w;
    moe8_fwd_scratch *s = r->s;
    const int C = w->v_chunk;
    moe8_status st;
    if (w->v_count > 0 && (st = lm_head_apply(r, s->lm_part, C, n_out, n_threads, err))) return st;
    for (int i = 0; i < n_out; i++) /* the last rank's short chunk: no stale bytes on the wire */
        memset(s->lm_part + (size_t)i * C + w->v_count, 0, (size_t)(C - w->v_count) * sizeof(float));
    moe8_fwd_mark(r, MOE8_PHASE_LM_HEAD);
    st = moe8_comm_allgather(w->comm, s->lm_part, s->lm_all, (size_t)n_out * C * sizeof(float), err);
    moe8_fwd_mark(r, MOE8_PHASE_COMM);
    if (st) return st;
    for (int rk = 0; rk < w->n_ranks; rk++) {
        const int v0 = rk * C, cnt = w->V - v0 < C ? w->V - v0 : C;
        for (int i = 0; cnt > 0 && i < n_out; i++)
            memcpy(s->logits + (size_t)i * w->V + v0, s->lm_all + ((size_t)rk * n_out + i) * C,
                   (size_t)cnt * sizeof(float));
    }
    return MOE8_OK;
}

/* x = embed[token], h = rmsnorm(x) * the first layer's attn_norm. */
static void embed_row(const moe8_fwd_run *r, const void *token, int t) {
    const moe8_weights *w = r->w;
    const int H = w->H;
    const int32_t id = ((const int32_t *)token)[t];
    float *x = r->s->x + (size_t)t * H;
    moe8_convert_to_f32(x, (const char *)w->embed + (size_t)id * H * moe8_dtype_size(w->embed_dt),
                        w->embed_dt, (size_t)H, NULL);
    if (w->n_layer > 0)
        moe8_rmsnorm_rows(r->s->h + (size_t)t * H, H, x, H, 1, H, w->layers[0].attn_norm, w->eps);
}

/* h[i] = rmsnorm(x[out_idx[i]]) * final_norm. */
static void final_norm_row(const moe8_fwd_run *r, const void *out_idx, int i) {
    const int H = r->w->H;
    moe8_rmsnorm_rows(r->s->h + (size_t)i * H, H,
                      r->s->x + (size_t)((const int32_t *)out_idx)[i] * H, H, 1, H,
                      r->w->final_norm, r->w->eps);
}

/* The attention kinds (arch/plan.h), each in its own file. */
typedef moe8_status (*attn_fn)(const moe8_fwd_run *r, const moe8_fwd_layer *L,
                               const moe8_attn_cache *cache, int64_t n_ctx, const float *rope,
                               const int32_t *seq, const int32_t *pos, moe8_error *err);
static const attn_fn attn_kinds[] = {
    [MOE8_ATTN_GQA] = moe8_fwd_attn_gqa, /* attn_gqa.c */
    [MOE8_ATTN_MLA] = moe8_fwd_attn_mla, /* mla.c */
    [MOE8_ATTN_GDN] = moe8_fwd_attn_gdn, /* attn_gdn.c */
};

moe8_status moe8_forward(const moe8_weights *w, moe8_fwd_scratch *s, const moe8_kv_view *kv,
                         int64_t n_ctx, const float *rope, const int32_t *token,
                         const int32_t *seq, const int32_t *pos, int T, const int32_t *out_idx,
                         int n_out, int n_threads, moe8_error *err) {
    double clock = moe8_time_s();
    const moe8_fwd_run r = {w, s, w->kt, T, n_threads, moe8_phase_on() ? &clock : NULL};
    moe8_status st = MOE8_OK;
    MOE8_ASSERT(T <= s->n_batch && n_out <= s->n_out);
    /* Weights paged in from the cache since the last forward (memory below the
     * model's size): this one tells the kernel which experts it will read. */
    struct rusage ru;
    const long majflt = w->cache && !getrusage(RUSAGE_SELF, &ru) ? ru.ru_majflt : 0;
    const int prefetch = majflt > s->majflt;
    s->majflt = majflt;
    for (int l = 0; l < w->n_layer && s->moe_ws; l++)
        if (s->moe_ws[l]) s->moe_ws[l]->prefetch = prefetch;
    moe8_fwd_rows(&r, T, embed_row, token);
    moe8_fwd_mark(&r, MOE8_PHASE_ELEMENTWISE);
    for (int l = 0; l < w->n_layer; l++) {
        const moe8_fwd_layer *L = &w->layers[l];
        const moe8_attn_cache cache = moe8_attn_cache_layer_ex(
            kv, w->n_head, w->n_kv, w->C, w->kv_planes, w->attn_scale,
            L->kv_layer < 0 ? 0 : L->kv_layer); /* unread by a Gated DeltaNet layer */
        const float *next_norm = l + 1 < w->n_layer ? w->layers[l + 1].attn_norm : NULL;
        if ((st = attn_kinds[L->plan.attn](&r, L, &cache, n_ctx, rope, seq, pos, err)) ||
            (st = moe8_fwd_ffn(&r, L, next_norm, err))) {
            moe8_error_prefix(err, "layer %d", l);
            return st;
        }
    }
    moe8_fwd_rows(&r, n_out, final_norm_row, out_idx);
    if (n_out > 0 && !w->v_chunk) {
        if ((st = lm_head_apply(&r, s->logits, w->V, n_out, n_threads, err)))
            moe8_error_prefix(err, "lm_head");
    } else if (n_out > 0) {
        st = lm_head_split(&r, n_out, n_threads, err);
    }
    moe8_fwd_mark(&r, MOE8_PHASE_LM_HEAD);
    return st;
}

