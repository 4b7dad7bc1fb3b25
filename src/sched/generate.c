/*
 * generate.c — moe8_generate: a fixed set of prompts run to the end as
 * requests of a scheduler (sched.c), the one scheduling code path.
 *
 * Each prompt i is one request (user = i) with the sampler's settings, the
 * request's stop ids and no eos ids of its own. Token events go to the
 * caller's callback; its answers — finish this sequence (a cancel, reported
 * as MOE8_FINISH_CALLBACK) or stop everything — are taken from rank 0 under
 * TP/EP, so every rank makes the same calls on its scheduler.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "dist/dist.h"
#include "model/context.h"

typedef struct {
    moe8_context *ctx;
    const moe8_generate_request *r;
    moe8_sched *s;
    int64_t *id;        /* [n_seq] request ids */
    int32_t *count;     /* [n_seq] tokens generated */
    int32_t *fin;       /* [n_seq] moe8_finish */
    int32_t *act;       /* [n_seq] 1: the callback finished it this step */
    int cancelled;
} gen;

static moe8_status check(const moe8_context *x, const moe8_sampler *smp,
                         const moe8_generate_request *r, moe8_error *err) {
    if (!x || !smp || !r)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "generate: no context, sampler or request");
    if (moe8_sampler_n_vocab(smp) != moe8_context_n_vocab(x))
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "generate: the sampler was made for %d "
                         "tokens, the context's vocabulary has %d", moe8_sampler_n_vocab(smp),
                         moe8_context_n_vocab(x));
    if (r->n_seq < 1 || !r->prompt || !r->n_prompt || r->n_predict < 0 || r->n_stop < 0 ||
        (r->n_stop && !r->stop_ids))
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "generate: expected n_seq >= 1 (got %d) "
                         "prompts, n_predict >= 0 and stop ids", r->n_seq);
    return MOE8_OK;
}

static moe8_status add_all(gen *g, const moe8_sampler *smp, moe8_error *err) {
    const moe8_generate_request *r = g->r;
    for (int32_t i = 0; i < r->n_seq; i++) {
        moe8_request q = moe8_request_default();
        moe8_status st;
        q.prompt = r->prompt[i];
        q.n_prompt = r->n_prompt[i];
        q.sampling = moe8_sampler_get_params(smp);
        q.max_tokens = r->n_predict;
        q.stop_ids = r->stop_ids;
        q.n_stop_ids = r->n_stop;
        q.ignore_eos = 1;
        q.user = (void *)(intptr_t)i;
        if ((st = moe8_sched_add(g->s, &q, &g->id[i], err))) {
            moe8_error_prefix(err, "generate: prompt %d", i);
            return st;
        }
    }
    return MOE8_OK;
}

/* One step: tokens to the caller, its answers (rank 0's) applied. */
static moe8_status step(gen *g, moe8_error *err) {
    const moe8_generate_request *r = g->r;
    int rank, n_ranks;
    moe8_dist *dist = moe8_context_group(g->ctx, &rank, &n_ranks);
    const moe8_event *ev;
    int32_t n_ev, flag;
    moe8_status st = moe8_sched_step(g->s, &ev, &n_ev, err);
    if (st) return st;
    memset(g->act, 0, (size_t)r->n_seq * sizeof *g->act);
    for (int32_t k = 0; k < n_ev; k++) {
        const int32_t i = (int32_t)(intptr_t)ev[k].user;
        if (ev[k].type == MOE8_EVENT_FINISH) {
            if (g->fin[i] == MOE8_FINISH_NONE) g->fin[i] = ev[k].finish;
            continue;
        }
        if (g->cancelled) continue; /* nothing after the callback said stop */
        if (r->out_tokens) r->out_tokens[(size_t)i * r->n_predict + g->count[i]] = ev[k].token;
        g->count[i]++;
        if (r->on_token) {
            int rc = r->on_token(r->user, i, ev[k].token);
            if (rc == MOE8_GEN_CANCEL) g->cancelled = 1;
            else if (rc == MOE8_GEN_STOP_SEQ) g->act[i] = 1;
        }
    }
    if (n_ranks > 1) { /* rank 0's callback decides for every rank */
        flag = g->cancelled;
        if ((st = moe8_dist_bcast_tokens(dist, g->act, r->n_seq, &flag, err))) return st;
        g->cancelled = flag;
    }
    for (int32_t i = 0; i < r->n_seq; i++)
        if (g->act[i] && g->fin[i] == MOE8_FINISH_NONE) {
            g->fin[i] = MOE8_FINISH_CALLBACK;
            moe8_sched_cancel(g->s, g->id[i]);
        }
    return g->cancelled ? moe8_fail(err, MOE8_ERR_CANCELLED, -1, "generation cancelled by the "
                                    "token callback") : MOE8_OK;
}

moe8_status moe8_generate(moe8_context *x, moe8_sampler *smp, const moe8_generate_request *r,
                          moe8_error *err) {
    gen g = {x, r, NULL, NULL, NULL, NULL, NULL, 0};
    moe8_status st;
    if ((st = check(x, smp, r, err))) return st;
    g.id = calloc((size_t)r->n_seq, sizeof *g.id);
    g.count = calloc((size_t)r->n_seq, sizeof *g.count);
    g.fin = calloc((size_t)r->n_seq, sizeof *g.fin);
    g.act = calloc((size_t)r->n_seq, sizeof *g.act);
    if (!g.id || !g.count || !g.fin || !g.act)
        st = moe8_fail(err, MOE8_ERR_NOMEM, -1, "generate: out of memory for %d prompts", r->n_seq);
    if (!st) st = moe8_sched_create(x, NULL, &g.s, err);
    if (!st) st = add_all(&g, smp, err);
    while (!st && moe8_sched_pending(g.s) > 0) st = step(&g, err);
    for (int32_t i = 0; g.count && i < r->n_seq; i++) {
        if (r->n_out) r->n_out[i] = g.count[i];
        if (r->finish) r->finish[i] = (moe8_finish)g.fin[i];
    }
    moe8_sched_free(g.s);
    free(g.id);
    free(g.count);
    free(g.fin);
    free(g.act);
    return st;
}
