/*
 * ffn.c — the feed-forward kinds (arch/plan.h; SEMANTICS §7): MOE8_FFN_DENSE
 * (a SwiGLU MLP of intermediate_size), MOE8_FFN_MOE (the MoE layer of
 * src/moe: router kind, experts) and MOE8_FFN_MOE_SHARED (the same plus a
 * shared expert, summed or gated by sigmoid(h . shared_expert_gate)). Under
 * TP each rank computes its slice's partial sum; one all-reduce sums them
 * before the residual add.
 *
 * Does not: route (moe/route.c) or run the routed experts (moe/).
 */
#include <math.h>

#include "model/forward_run.h"
#include "moe/moe.h"

typedef struct {
    float *g;
    const float *u;
    int F;
} swiglu_ctx;

static void swiglu_row(const moe8_fwd_run *r, const void *ctx, int t) {
    const swiglu_ctx *c = ctx;
    (void)r;
    for (size_t i = (size_t)t * c->F; i < (size_t)(t + 1) * c->F; i++)
        c->g[i] = c->g[i] / (1.0f + expf(-c->g[i])) * c->u[i];
}

static moe8_status dense_mlp(const moe8_fwd_run *r, const moe8_fwd_layer *L, moe8_error *err) {
    moe8_fwd_scratch *s = r->s;
    moe8_status st;
    const int T = r->T, F = L->gate.n;
    float *g = s->mlp, *u = s->mlp + (size_t)T * F;
    const swiglu_ctx sc = {g, u, F};
    moe8_fwd_observe(r, L, 2, s->h, L->gate.k);
    if ((st = moe8_fwd_lin(r, &L->gate, NULL, g, s->h, T, err)) ||
        (st = moe8_fwd_lin(r, &L->up, &L->gate, u, s->h, T, err)))
        return st;
    moe8_fwd_rows(r, T, swiglu_row, &sc);
    moe8_fwd_observe(r, L, 3, g, F);
    return moe8_fwd_lin(r, &L->down, NULL, s->tmp, g, T, err);
}

/* tmp[t] += gate * shared_out[t]: gate = sigmoid(score[t]) with a shared
 * expert gate (qwen2_moe), 1 without (deepseek; 1 * y is y exactly). */
static void shared_add_row(const moe8_fwd_run *r, const void *layer, int t) {
    const moe8_fwd_layer *L = layer;
    moe8_fwd_scratch *s = r->s;
    const int H = r->w->H;
    const float gate = L->sh_score.n ? 1.0f / (1.0f + expf(-s->sh_score[t])) : 1.0f;
    float *o = s->tmp + (size_t)t * H;
    const float *y = s->sh_out + (size_t)t * H;
    for (int j = 0; j < H; j++) o[j] += gate * y[j];
}

/* The shared expert, added to the MoE output in s->tmp:
 * tmp[t] += sigmoid(h[t] . g) * down(silu(gate(h[t])) * up(h[t])) (qwen2_moe),
 * in fp32, the sigmoid as 1 / (1 + expf(-z)); without a gate (deepseek's
 * shared experts) tmp[t] += down(silu(gate(h[t])) * up(h[t])). Under TP each rank adds its S slice's
 * partial down product; the all-reduce after it sums the parts. */
static moe8_status shared_expert(const moe8_fwd_run *r, const moe8_fwd_layer *L,
                                 moe8_error *err) {
    moe8_fwd_scratch *s = r->s;
    const int T = r->T, S = L->sh_gate.n, H = r->w->H;
    float *g = s->mlp, *u = s->mlp + (size_t)T * S;
    const swiglu_ctx sc = {g, u, S};
    moe8_status st;
    if ((st = moe8_fwd_lin(r, &L->sh_gate, NULL, g, s->h, T, err)) ||
        (st = moe8_fwd_lin(r, &L->sh_up, &L->sh_gate, u, s->h, T, err)))
        return st;
    if (L->sh_score.n) /* FLOAT: read by every table */
        moe8_proj_apply(&L->sh_score, r->kt, s->sh_score, 1, s->h, H, NULL, 0, NULL, NULL, T,
                        r->nt);
    moe8_fwd_rows(r, T, swiglu_row, &sc);
    if ((st = moe8_fwd_lin(r, &L->sh_down, NULL, s->sh_out, g, T, err))) return st;
    moe8_fwd_rows(r, T, shared_add_row, L);
    return MOE8_OK;
}

/* x += MLP(h) (MoE or dense), then h = rmsnorm(x) * next_norm (NULL after
 * the last layer: the final norm reads only the output rows). */
moe8_status moe8_fwd_ffn(const moe8_fwd_run *r, const moe8_fwd_layer *L, const float *next_norm,
                         moe8_error *err) {
    moe8_fwd_scratch *s = r->s;
    moe8_status st;
    if (L->is_moe) {
        /* with the weights' table: the layer refuses one that cannot read its experts */
        st = moe8_moe_layer_forward_k(L->moe, s->moe_ws[L->ws_layer], r->kt, s->h, r->T, NULL,
                                      s->tmp, err);
        moe8_fwd_mark(r, -1); /* the layer timed its router and experts itself */
        if (st) return st;
        if (L->has_shared) {
            if ((st = shared_expert(r, L, err))) return st;
            moe8_fwd_mark(r, MOE8_PHASE_EXPERTS);
        }
    } else {
        if ((st = dense_mlp(r, L, err))) return st;
        moe8_fwd_mark(r, MOE8_PHASE_DENSE_MLP);
    }
    if ((st = moe8_fwd_allreduce(r, s->tmp, err))) return st;
    moe8_fwd_add_norm(r, next_norm);
    moe8_fwd_mark(r, MOE8_PHASE_ELEMENTWISE);
    return MOE8_OK;
}
