/*
 * attn_gdn.c — the attention kind MOE8_ATTN_GDN (arch/plan.h; SEMANTICS
 * §7h): the Gated DeltaNet linear attention of the hybrid families'
 * linear layers, over the compute core of gdn.h and each sequence's state
 * (state_pool.h). On entry h = rmsnorm(x) * attn_norm:
 *
 *   mixed [T][C], z [T][NV dv], b, a [T][NV] = the projections of h:
 *     grouped (qwen3_next): in_proj_qkvz rows per key head g [q_g, k_g,
 *     v (NV/NK heads), z (NV/NK heads)] and in_proj_ba per g [b, a] reordered
 *     into flat [q of every key head, k, v] (transformers'
 *     fix_query_key_value_ordering); flat (qwen3_5_moe): in_proj_qkv, _z,
 *     _b, _a as they are
 *   g = -exp(A_log) softplus(a + dt_bias), beta = sigmoid(b)
 *   per sequence: q, k, v = silu(causal conv1d(mixed)) with its conv state;
 *     q, k L2-normalised per key head, q x dk^-1/2; the gated delta rule
 *     over its recurrent state: o [T][NV dv]
 *   y = o / rms(o) * norm * silu(z) per value head; x += out_proj(y);
 *   h = rmsnorm(x) * ffn_norm
 *
 * The batch is taken in runs of consecutive tokens of one sequence (the
 * caller's order): a run of several tokens (a prompt chunk) runs the chunked
 * form; runs of one token (decode steps) of distinct sequences are gathered
 * and run together by moe8_gdn_decode, each row on its own state, so a
 * decode step's result does not depend on the other sequences of the batch.
 * A sequence may appear in several runs: they run in batch order.
 *
 * Under TP/EP each rank runs its key-head groups (load/weights.c gives it
 * their rows, conv channels and out_proj columns; its states hold only
 * them) and out_proj's partial sums are all-reduced.
 *
 * Snapshot requests of the context (state_pool.h) cut a run at their
 * positions and copy the state there (run_prompt).
 *
 * Does not: choose where snapshots are taken (sched.c) or keep them
 * (context.c), or allocate.
 */
#include <string.h>

#include "model/forward_run.h"
#include "model/gdn.h"
#include "model/state_pool.h"

static moe8_gdn_dims dims_of(const moe8_weights *w) {
    const moe8_gdn_dims d = {w->gdn_nk, w->gdn_nv, w->gdn_dk, w->gdn_dv, w->gdn_k};
    return d;
}

/* Row t of the grouped projections (g_raw [C + Z], g_ba [2 NV]) into the
 * flat g_mix [C], g_z [Z], g_b, g_a [NV]. */
static void ungroup_row(const moe8_fwd_run *r, const void *ctx, int t) {
    const moe8_weights *w = r->w;
    moe8_fwd_scratch *s = r->s;
    const int NK = w->gdn_nk, NV = w->gdn_nv, dk = w->gdn_dk, dv = w->gdn_dv, rr = NV / NK;
    const int C = 2 * NK * dk + NV * dv, Z = NV * dv, gs = 2 * dk + 2 * rr * dv;
    const float *raw = s->g_raw + (size_t)t * (C + Z), *ba = s->g_ba + (size_t)t * 2 * NV;
    float *mix = s->g_mix + (size_t)t * C, *z = s->g_z + (size_t)t * Z;
    const size_t fk = (size_t)dk * sizeof(float), fv = (size_t)rr * dv * sizeof(float);
    (void)ctx;
    for (int g = 0; g < NK; g++) {
        const float *grp = raw + (size_t)g * gs;
        memcpy(mix + (size_t)g * dk, grp, fk);
        memcpy(mix + (size_t)(NK + g) * dk, grp + dk, fk);
        memcpy(mix + (size_t)2 * NK * dk + (size_t)g * rr * dv, grp + 2 * dk, fv);
        memcpy(z + (size_t)g * rr * dv, grp + 2 * dk + rr * dv, fv);
        for (int m = 0; m < rr; m++) {
            s->g_b[(size_t)t * NV + g * rr + m] = ba[g * 2 * rr + m];
            s->g_a[(size_t)t * NV + g * rr + m] = ba[g * 2 * rr + rr + m];
        }
    }
}

/* mixed, z, b, a of every token (the layout above). */
static moe8_status project(const moe8_fwd_run *r, const moe8_fwd_layer *L, moe8_error *err) {
    moe8_fwd_scratch *s = r->s;
    const int T = r->T;
    moe8_status st;
    if (r->w->gdn_grouped) {
        if ((st = moe8_fwd_lin(r, &L->gdn_in, NULL, s->g_raw, s->h, T, err)) ||
            (st = moe8_fwd_lin(r, &L->gdn_ba, NULL, s->g_ba, s->h, T, err)))
            return st;
        moe8_fwd_rows(r, T, ungroup_row, NULL);
        return MOE8_OK;
    }
    if ((st = moe8_fwd_lin(r, &L->gdn_in, NULL, s->g_mix, s->h, T, err)) ||
        (st = moe8_fwd_lin(r, &L->gdn_z, &L->gdn_in, s->g_z, s->h, T, err)) ||
        (st = moe8_fwd_lin(r, &L->gdn_ba, NULL, s->g_b, s->h, T, err)) ||
        (st = moe8_fwd_lin(r, &L->gdn_a, NULL, s->g_a, s->h, T, err)))
        return st;
    return MOE8_OK;
}

/* Conv (with seq's conv state) and q/k norms of rows [t0, t0 + n) of one
 * sequence: g_conv rows = [q, k, v] ready for the delta rule. */
static void conv_rows(const moe8_fwd_run *r, const moe8_fwd_layer *L, const moe8_gdn_dims *d,
                      int t0, int n, int32_t seq) {
    moe8_fwd_scratch *s = r->s;
    const int C = moe8_gdn_conv_channels(d), QK = d->n_k_heads * d->dk;
    float *y = s->g_conv + (size_t)t0 * C;
    moe8_gdn_conv(y, C, s->g_mix + (size_t)t0 * C, C, n, d, L->gdn_conv,
                  moe8_state_conv(s->state, seq, L->gdn_slot));
    moe8_gdn_qk_norm(y, C, y + QK, C, n, d);
}

/* A prompt chunk: rows [t0, t0 + n) of sequence seq, chunked. */
static void run_chunk(const moe8_fwd_run *r, const moe8_fwd_layer *L, const moe8_gdn_dims *d,
                      int t0, int n, int32_t seq) {
    moe8_fwd_scratch *s = r->s;
    const int C = moe8_gdn_conv_channels(d), QK = d->n_k_heads * d->dk, NV = d->n_v_heads;
    const int Z = NV * d->dv;
    const float *y = s->g_conv + (size_t)t0 * C;
    conv_rows(r, L, d, t0, n, seq);
    moe8_gdn_chunked(s->g_o + (size_t)t0 * Z, Z, y, C, y + QK, C, y + 2 * QK, C,
                     s->g_g + (size_t)t0 * NV, s->g_beta + (size_t)t0 * NV, n, d,
                     moe8_state_ssm(s->state, seq, L->gdn_slot), s->g_work, r->nt);
}

typedef struct {
    const moe8_fwd_layer *L;
    const moe8_gdn_dims *d;
    int t0;
    const int32_t *seq;
} step_conv;

static void step_conv_row(const moe8_fwd_run *r, const void *ctx, int i) {
    const step_conv *c = ctx;
    conv_rows(r, c->L, c->d, c->t0 + i, 1, c->seq[c->t0 + i]);
}

/* Decode steps: rows [t0, t0 + n), one token each of n distinct sequences
 * (so the conv rows, each on its own sequence's conv state, run on all
 * threads; each recurrent state is updated in place). */
static void run_steps(const moe8_fwd_run *r, const moe8_fwd_layer *L, const moe8_gdn_dims *d,
                      int t0, int n, const int32_t *seq) {
    moe8_fwd_scratch *s = r->s;
    const int C = moe8_gdn_conv_channels(d), QK = d->n_k_heads * d->dk, NV = d->n_v_heads;
    const int Z = NV * d->dv;
    const float *y = s->g_conv + (size_t)t0 * C;
    const step_conv c = {L, d, t0, seq};
    moe8_fwd_rows(r, n, step_conv_row, &c);
    for (int i = 0; i < n; i++) s->g_S[i] = moe8_state_ssm(s->state, seq[t0 + i], L->gdn_slot);
    moe8_gdn_decode(s->g_o + (size_t)t0 * Z, Z, y, C, y + QK, C, y + 2 * QK, C,
                    s->g_g + (size_t)t0 * NV, s->g_beta + (size_t)t0 * NV, n, d, s->g_S, r->nt);
}

/* A run of several tokens, rows [t, e) of sequence seq from position p0, cut
 * at the positions of its snapshot requests (state_pool.h): after each cut
 * the layer's state is copied to the request's slot. The scheduler puts cuts
 * only at multiples of MOE8_GDN_CHUNK counted from a run that starts at one,
 * so the pieces run the same chunks as the whole (SEMANTICS §10). */
static void run_prompt(const moe8_fwd_run *r, const moe8_fwd_layer *L, const moe8_gdn_dims *d,
                       int t, int e, int32_t seq, int32_t p0) {
    moe8_state_pool *sp = r->s->state;
    int a = t;
    for (int i = 0; i < sp->n_req; i++) {
        const int32_t at = sp->req_pos[i];
        if (sp->req_seq[i] != seq || at <= p0 + (a - t) || at > p0 + (e - t)) continue;
        run_chunk(r, L, d, a, t + (at - p0) - a, seq);
        a = t + (at - p0);
        memcpy(moe8_state_slot_conv(sp, sp->req_slot[i], L->gdn_slot),
               moe8_state_conv(sp, seq, L->gdn_slot),
               (sp->conv_floats + sp->ssm_floats) * sizeof(float));
        sp->req_hits[i]++;
    }
    if (a < e) run_chunk(r, L, d, a, e - a, seq);
}

/* The delta rule over the batch's runs (see the top of the file). */
static void core(const moe8_fwd_run *r, const moe8_fwd_layer *L, const moe8_gdn_dims *d,
                 const int32_t *seq, const int32_t *pos) {
    const int T = r->T;
    int g0 = 0, gn = 0; /* the pending decode group: rows [g0, g0 + gn) */
    for (int t = 0; t < T;) {
        int e = t + 1, dup = 0;
        while (e < T && seq[e] == seq[t]) e++;
        if (e - t > 1) {
            if (gn) run_steps(r, L, d, g0, gn, seq);
            gn = 0;
            run_prompt(r, L, d, t, e, seq[t], pos[t]);
        } else {
            for (int i = 0; i < gn && !dup; i++) dup = seq[g0 + i] == seq[t];
            if (dup) run_steps(r, L, d, g0, gn, seq);
            if (dup || !gn) g0 = t, gn = 0;
            gn++;
        }
        t = e;
    }
    if (gn) run_steps(r, L, d, g0, gn, seq);
}

moe8_status moe8_fwd_attn_gdn(const moe8_fwd_run *r, const moe8_fwd_layer *L,
                              const moe8_attn_cache *cache, int64_t n_ctx, const float *rope,
                              const int32_t *seq, const int32_t *pos, moe8_error *err) {
    moe8_fwd_scratch *s = r->s;
    const moe8_weights *w = r->w;
    const moe8_gdn_dims d = dims_of(w);
    const int T = r->T, NV = d.n_v_heads, Z = NV * d.dv;
    moe8_status st;
    (void)cache, (void)n_ctx, (void)rope;
    if ((st = project(r, L, err))) return st;
    moe8_fwd_mark(r, MOE8_PHASE_ATTN_PROJ);
    moe8_gdn_gates(s->g_g, s->g_beta, s->g_a, NV, s->g_b, NV, L->gdn_a_log, L->gdn_dt_bias, T,
                   NV);
    core(r, L, &d, seq, pos);
    moe8_gdn_gated_norm(s->g_o, Z, s->g_o, Z, s->g_z, Z, L->gdn_norm, T, NV, d.dv, w->eps);
    moe8_fwd_mark(r, MOE8_PHASE_ATTN_CORE);
    if ((st = moe8_fwd_lin(r, &L->gdn_out, NULL, s->tmp, s->g_o, T, err))) return st;
    moe8_fwd_mark(r, MOE8_PHASE_ATTN_PROJ);
    if ((st = moe8_fwd_allreduce(r, s->tmp, err))) return st; /* TP: the heads' partial sums */
    moe8_fwd_add_norm(r, L->ffn_norm);
    moe8_fwd_mark(r, MOE8_PHASE_ELEMENTWISE);
    return MOE8_OK;
}
