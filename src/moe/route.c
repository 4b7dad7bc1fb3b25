/*
 * route.c — expert selection (SEMANTICS §2): router logits [T][E] -> the top-k
 * expert ids [T][K] (int32) and their weights [T][K] (fp32) of every token.
 *
 * Plain path: rank the experts by logit (the order of softmax and sigmoid
 * scores, exactly), compute the scores of the K winners only (softmax needs
 * the full denominator unless renormalizing, where it cancels), renormalize,
 * scale. Grouped path: scores s of all experts, selection keys s + bias,
 * group scores (max or top-2 sum of keys), keep the best topk_group groups,
 * top-k of the keys over kept experts, weights from s.
 * Ties go to the lower id everywhere: candidates are scanned by increasing id
 * and only a strictly better one displaces an earlier one.
 * Does not: allocate (the caller passes scratch), or thread.
 */
#include <math.h>
#include <stdlib.h>

#include "moe/moe.h"

moe8_router_params moe8_router_params_default(void) {
    moe8_router_params p = {0};
    p.scoring = MOE8_SCORING_SOFTMAX;
    p.group_score = MOE8_GROUP_SCORE_MAX;
    p.routed_scaling_factor = 1.0f;
    return p;
}

moe8_status moe8_router_params_check(const moe8_router_params *p, int n_expert, moe8_error *err) {
    const int E = n_expert, K = p->top_k;
    if (E < 1) return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "router: n_expert %d < 1", E);
    if (K < 1 || K > E)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "router: top_k %d not in [1, %d]", K, E);
    if (p->custom) return MOE8_OK;
    if (p->scoring != MOE8_SCORING_SOFTMAX && p->scoring != MOE8_SCORING_SIGMOID)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1,
                         "router: unknown scoring function %d (softmax or sigmoid)",
                         (int)p->scoring);
    if (!isfinite(p->routed_scaling_factor))
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "router: routed_scaling_factor not finite");
    if (!p->use_grouped_topk) return MOE8_OK;
    const int G = p->num_expert_group, TG = p->topk_group;
    if (G < 1 || E % G != 0)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1,
                         "router: num_expert_group %d must be >= 1 and divide %d experts", G, E);
    if (TG < 1 || TG > G)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "router: topk_group %d not in [1, %d]",
                         TG, G);
    if (K > TG * (E / G))
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1,
                         "router: top_k %d exceeds the %d experts of %d kept groups", K,
                         TG * (E / G), TG);
    if (p->group_score != MOE8_GROUP_SCORE_MAX && p->group_score != MOE8_GROUP_SCORE_TOP2_SUM)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "router: unknown group score %d",
                         (int)p->group_score);
    if (p->group_score == MOE8_GROUP_SCORE_TOP2_SUM && E / G < 2)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1,
                         "router: top-2 group score needs >= 2 experts per group, got %d", E / G);
    if (p->e_score_correction_bias)
        for (int e = 0; e < E; e++)
            if (!isfinite(p->e_score_correction_bias[e]))
                return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1,
                                 "router: e_score_correction_bias[%d] not finite", e);
    return MOE8_OK;
}

/* s [E], key [E], group keys [G], group ids [G] (G <= E). */
size_t moe8_route_scratch_floats(int n_expert) { return 4 * (size_t)n_expert; }

/* ======================================================================== */
/* Top-k by insertion                                                        */
/* ======================================================================== */

/* Offer candidate (v, id) to the sorted list key[0..*n) (descending, ties in
 * offer order). Ids must be offered in increasing order. */
static inline void topk_offer(float *key, int32_t *ids, int *n, int k, float v, int32_t id) {
    int pos = *n;
    if (pos == k) {
        if (!(v > key[k - 1])) return;
        pos = k - 1;
    } else {
        (*n)++;
    }
    while (pos > 0 && v > key[pos - 1]) {
        key[pos] = key[pos - 1];
        ids[pos] = ids[pos - 1];
        pos--;
    }
    key[pos] = v;
    ids[pos] = id;
}

static inline float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

/* Renormalize (sum 0 stays 0), then scale. */
static void finish_weights(float *w, int k, const moe8_router_params *p) {
    if (p->renormalize) {
        float sum = 0.0f;
        for (int j = 0; j < k; j++) sum += w[j];
        if (sum > 0.0f)
            for (int j = 0; j < k; j++) w[j] /= sum;
    }
    if (p->routed_scaling_factor != 1.0f)
        for (int j = 0; j < k; j++) w[j] *= p->routed_scaling_factor;
}

/* ======================================================================== */
/* Plain path                                                                */
/* ======================================================================== */

static void route_plain(const float *l, int E, const moe8_router_params *p, int32_t *ids,
                        float *w) {
    const int K = p->top_k;
    int n = 0;
    for (int e = 0; e < E; e++) topk_offer(w, ids, &n, K, l[e], e);
    if (p->scoring == MOE8_SCORING_SIGMOID) {
        for (int j = 0; j < K; j++) w[j] = sigmoidf(l[ids[j]]);
    } else {
        const float mx = l[ids[0]]; /* the largest logit */
        for (int j = 0; j < K; j++) w[j] = expf(l[ids[j]] - mx);
        if (!p->renormalize) {
            float sum = 0.0f;
            for (int e = 0; e < E; e++) sum += expf(l[e] - mx);
            for (int j = 0; j < K; j++) w[j] /= sum;
        }
    }
    finish_weights(w, K, p);
}

/* ======================================================================== */
/* Grouped path                                                              */
/* ======================================================================== */

static void scores(const float *l, int E, moe8_scoring sf, float *s) {
    if (sf == MOE8_SCORING_SIGMOID) {
        for (int e = 0; e < E; e++) s[e] = sigmoidf(l[e]);
        return;
    }
    float mx = l[0], sum = 0.0f;
    for (int e = 1; e < E; e++) mx = l[e] > mx ? l[e] : mx;
    for (int e = 0; e < E; e++) sum += (s[e] = expf(l[e] - mx));
    for (int e = 0; e < E; e++) s[e] /= sum;
}

static float group_score(const float *key, int n, moe8_group_score gs) {
    float a = key[0], b = -INFINITY; /* best, second best */
    for (int i = 1; i < n; i++) {
        if (key[i] > a) {
            b = a;
            a = key[i];
        } else if (key[i] > b) {
            b = key[i];
        }
    }
    return gs == MOE8_GROUP_SCORE_TOP2_SUM ? a + b : a;
}

static void route_grouped(const float *l, int E, const moe8_router_params *p, int32_t *ids,
                          float *w, float *scratch) {
    const int K = p->top_k, G = p->num_expert_group, TG = p->topk_group, GS = E / G;
    float *s = scratch, *key = scratch + E, *gkey = scratch + 2 * (size_t)E;
    int32_t *gid = (int32_t *)(scratch + 3 * (size_t)E);
    int n = 0;
    scores(l, E, p->scoring, s);
    for (int e = 0; e < E; e++)
        key[e] = p->e_score_correction_bias ? s[e] + p->e_score_correction_bias[e] : s[e];
    for (int g = 0; g < G; g++)
        topk_offer(gkey, gid, &n, TG, group_score(key + (size_t)g * GS, GS, p->group_score), g);
    /* Kept groups in increasing id so experts are offered in increasing id. */
    for (int a = 1; a < TG; a++)
        for (int b = a; b > 0 && gid[b] < gid[b - 1]; b--) {
            int32_t t = gid[b];
            gid[b] = gid[b - 1];
            gid[b - 1] = t;
        }
    n = 0;
    for (int g = 0; g < TG; g++)
        for (int e = gid[g] * GS; e < (gid[g] + 1) * GS; e++) topk_offer(w, ids, &n, K, key[e], e);
    for (int j = 0; j < K; j++) w[j] = s[ids[j]];
    finish_weights(w, K, p);
}

void moe8_route_token(const float *logits, int n_expert, const moe8_router_params *p,
                      int32_t *ids, float *weights, float *scratch) {
    if (p->use_grouped_topk)
        route_grouped(logits, n_expert, p, ids, weights, scratch);
    else
        route_plain(logits, n_expert, p, ids, weights);
}

moe8_status moe8_route_check(const int32_t *ids, const float *weights, int n_tokens,
                             int n_expert, int top_k, moe8_error *err) {
    for (int t = 0; t < n_tokens; t++)
        for (int j = 0; j < top_k; j++) {
            int32_t id = ids[(size_t)t * top_k + j];
            if (id < 0 || id >= n_expert)
                return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1,
                                 "custom routing: token %d slot %d: expert id %d not in [0, %d)",
                                 t, j, (int)id, n_expert);
            for (int i = 0; i < j; i++)
                if (ids[(size_t)t * top_k + i] == id)
                    return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1,
                                     "custom routing: token %d: expert %d selected twice", t,
                                     (int)id);
            if (!isfinite(weights[(size_t)t * top_k + j]))
                return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1,
                                 "custom routing: token %d slot %d: weight not finite", t, j);
        }
    return MOE8_OK;
}

moe8_status moe8_select_experts(const float *logits, int n_tokens, int n_expert,
                                const moe8_router_params *p, int32_t *ids, float *weights,
                                moe8_error *err) {
    moe8_status st;
    float *scratch = NULL;
    if (!p || !logits || !ids || !weights || n_tokens < 0)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "select_experts: bad arguments");
    if ((st = moe8_router_params_check(p, n_expert, err)) != MOE8_OK) return st;
    if (p->custom) {
        st = p->custom(p->custom_user, logits, n_tokens, n_expert, p->top_k, p->renormalize, ids,
                       weights, err);
        if (st != MOE8_OK) return st;
        return moe8_route_check(ids, weights, n_tokens, n_expert, p->top_k, err);
    }
    if (p->use_grouped_topk) {
        scratch = malloc(moe8_route_scratch_floats(n_expert) * sizeof(float));
        if (!scratch) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "select_experts: out of memory");
    }
    for (int t = 0; t < n_tokens; t++)
        moe8_route_token(logits + (size_t)t * n_expert, n_expert, p, ids + (size_t)t * p->top_k,
                         weights + (size_t)t * p->top_k, scratch);
    free(scratch);
    return MOE8_OK;
}
