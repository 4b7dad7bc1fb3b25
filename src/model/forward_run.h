/*
 * forward_run.h — internal to the forward pass (forward.c, mla.c): the state
 * of one forward call and the steps the attention blocks share — row loops on
 * all threads, the linear path (activation codes, then the GEMM; each
 * projection checked against the kernel table running it), the residual add
 * with the next norm, the tensor-parallel all-reduce, phase timing and the
 * calibration hook.
 */
#ifndef MOE8_FORWARD_RUN_H
#define MOE8_FORWARD_RUN_H

#include "core/core.h"
#include "model/forward.h"

/* One forward call. */
typedef struct {
    const moe8_weights *w;
    moe8_fwd_scratch *s;
    const moe8_kernels *kt;  /* w->kt: the table the weights were packed for */
    int T, nt;
    double *clock;           /* phase accounting (moe8_bench_forward_timing): start of the
                              * current phase; NULL when off */
} moe8_fwd_run;

/* The phase that just ended: its time goes to `ph` (nothing when timing is
 * off); ph < 0 only restarts the clock (the MoE layer times itself). */
static inline void moe8_fwd_mark(const moe8_fwd_run *r, int ph) {
    if (!r->clock) return;
    const double now = moe8_time_s();
    if (ph >= 0) moe8_phase_add((moe8_phase)ph, now - *r->clock);
    *r->clock = now;
}

/* The calibration hook (forward.h moe8_observe_fn), when one is set. */
static inline void moe8_fwd_observe(const moe8_fwd_run *r, const moe8_fwd_layer *L, int site,
                                    const float *x, int n) {
    if (r->s->observe) r->s->observe(r->s->observe_user, (int)(L - r->w->layers), site, x, r->T, n);
}

/* One row t of a row loop, with what the loop passes in ctx. */
typedef void (*moe8_fwd_row_fn)(const moe8_fwd_run *r, const void *ctx, int t);

/* fn(r, ctx, t) for t in [0, n), on the pool's threads (chunks of rows;
 * inline for one row or one thread): nothing depends on the thread count. */
void moe8_fwd_rows(const moe8_fwd_run *r, int n, moe8_fwd_row_fn fn, const void *ctx);

/* y[T][p->n] = p(x[T][p->k]) with r's table, int8 codes reused from `prev`
 * (applied to the same x) where they are the same; refused, nothing
 * computed, when the table does not read p's packed layout. */
moe8_status moe8_fwd_lin(const moe8_fwd_run *r, const moe8_proj *p, const moe8_proj *prev,
                         float *y, const float *x, int T, moe8_error *err);
/* y[i] = p[i](x) for n <= 3 projections of the same input, in one pass when
 * they can share it. */
moe8_status moe8_fwd_lin_group(const moe8_fwd_run *r, const moe8_proj *const *p,
                               float *const *y, int n, const float *x, int T, moe8_error *err);

/* x += tmp, then (norm != NULL) h = rmsnorm(x) * norm, on all threads. */
void moe8_fwd_add_norm(const moe8_fwd_run *r, const float *norm);
/* Sum a partial [T][H] result over the ranks (nothing with one rank). */
moe8_status moe8_fwd_allreduce(const moe8_fwd_run *r, float *y, moe8_error *err);

/* What the per-token rotary/cache-store rows read. */
typedef struct {
    const moe8_fwd_layer *L;
    const moe8_attn_cache *cache;
    int64_t n_ctx;
    const float *rope;
    const int32_t *seq, *pos;
} moe8_fwd_qk;

/* The attention block of a grouped-query attention layer (attn_gqa.c): on
 * entry h = rmsnorm(x) * attn_norm; x += o_proj(attention(h)), then
 * h = rmsnorm(x) * ffn_norm. */
moe8_status moe8_fwd_attn_gqa(const moe8_fwd_run *r, const moe8_fwd_layer *L,
                              const moe8_attn_cache *cache, int64_t n_ctx, const float *rope,
                              const int32_t *seq, const int32_t *pos, moe8_error *err);
/* The feed-forward block of the layer's kind (ffn.c): x += FFN(h), then
 * h = rmsnorm(x) * next_norm (NULL after the last layer). */
moe8_status moe8_fwd_ffn(const moe8_fwd_run *r, const moe8_fwd_layer *L, const float *next_norm,
                         moe8_error *err);
/* The attention block of a multi-head latent attention layer (mla.c):
 * x += o_proj(MLA(h)), then h = rmsnorm(x) * ffn_norm. */
moe8_status moe8_fwd_attn_mla(const moe8_fwd_run *r, const moe8_fwd_layer *L,
                              const moe8_attn_cache *cache, int64_t n_ctx, const float *rope,
                              const int32_t *seq, const int32_t *pos, moe8_error *err);

/* The attention block of a Gated DeltaNet layer (attn_gdn.c): x += out_proj(
 * GatedDeltaNet(h)) with each sequence's recurrent state, then h = rmsnorm(x) *
 * ffn_norm. The cache, n_ctx and rope arguments are unused (one signature for
 * the attention kinds). */
moe8_status moe8_fwd_attn_gdn(const moe8_fwd_run *r, const moe8_fwd_layer *L,
                              const moe8_attn_cache *cache, int64_t n_ctx, const float *rope,
                              const int32_t *seq, const int32_t *pos, moe8_error *err);

#endif
