/*
 * test_route.c — expert selection (SEMANTICS §2) and dispatch/combine (SEMANTICS §3)
 * against the independent reference in moe_ref.h: every routing variant,
 * ties, dropped groups, zero-sum weights, custom callbacks, parameter errors,
 * the counting sort with local expert ranges.
 */
#include <stdint.h>

#include "moe/moe.h"
#include "moe8.h"
#include "moe_ref.h"
#include "test.h"

static test_rng rng = {0x5eed1234ULL};

/* Route with moe8 and the reference; compare ids exactly, weights to 1e-6. */
static void check_route(const char *what, const float *logits, int T, int E,
                        const moe8_router_params *p) {
    const int K = p->top_k;
    int32_t *ids = malloc(sizeof(int32_t) * T * K), *rids = malloc(sizeof(int32_t) * K);
    float *w = malloc(sizeof(float) * T * K);
    double *rw = malloc(sizeof(double) * K);
    ref_router rp = {K, p->renormalize, p->scoring == MOE8_SCORING_SIGMOID, p->use_grouped_topk,
                     p->num_expert_group, p->topk_group,
                     p->group_score == MOE8_GROUP_SCORE_TOP2_SUM, p->e_score_correction_bias,
                     p->routed_scaling_factor};
    moe8_error err;
    moe8_status st = moe8_select_experts(logits, T, E, p, ids, w, &err);
    CHECKF(st == MOE8_OK, "%s: %s", what, err.message);
    int bad_id = 0, bad_w = 0;
    for (int t = 0; t < T && st == MOE8_OK; t++) {
        ref_route_token(logits + (size_t)t * E, E, &rp, rids, rw);
        for (int j = 0; j < K; j++) {
            bad_id += ids[t * K + j] != rids[j];
            bad_w += !(fabs(w[t * K + j] - rw[j]) <= 1e-6 * (fabs(rw[j]) + 1.0));
        }
    }
    CHECKF(bad_id == 0 && bad_w == 0, "%s: T=%d E=%d K=%d: %d ids, %d weights differ", what, T,
           E, K, bad_id, bad_w);
    free(ids);
    free(rids);
    free(w);
    free(rw);
}

static float *gaussian(int n, double scale) {
    float *v = malloc(sizeof(float) * n);
    for (int i = 0; i < n; i++) v[i] = (float)(scale * test_rng_normal(&rng));
    return v;
}

static void test_plain_table(void) {
    static const int ek[][2] = {{4, 1}, {4, 4}, {8, 2}, {8, 8}, {128, 8}, {128, 1}, {128, 2}};
    static const int Ts[] = {1, 3, 17};
    for (size_t c = 0; c < sizeof ek / sizeof ek[0]; c++)
        for (int v = 0; v < 8; v++) {
            int T = Ts[(c + v) % 3], E = ek[c][0];
            moe8_router_params p = moe8_router_params_default();
            char what[64];
            float *l = gaussian(T * E, 2.0);
            p.top_k = ek[c][1];
            p.scoring = (v & 1) ? MOE8_SCORING_SIGMOID : MOE8_SCORING_SOFTMAX;
            p.renormalize = (v >> 1) & 1;
            p.routed_scaling_factor = (v & 4) ? 2.5f : 1.0f;
            snprintf(what, sizeof what, "plain v%d", v);
            check_route(what, l, T, E, &p);
            free(l);
        }
}

static void test_grouped_table(void) {
    /* E, K, G, TG */
    static const int g[][4] = {{8, 2, 4, 2}, {8, 1, 2, 1}, {128, 8, 8, 4}, {128, 8, 16, 1},
                               {4, 2, 2, 1}};
    for (size_t c = 0; c < sizeof g / sizeof g[0]; c++)
        for (int v = 0; v < 16; v++) {
            const int T = 7, E = g[c][0];
            moe8_router_params p = moe8_router_params_default();
            float *l = gaussian(T * E, 2.0), *bias = gaussian(E, 0.3);
            char what[64];
            p.top_k = g[c][1];
            p.use_grouped_topk = 1;
            p.num_expert_group = g[c][2];
            p.topk_group = g[c][3];
            p.scoring = (v & 1) ? MOE8_SCORING_SIGMOID : MOE8_SCORING_SOFTMAX;
            p.renormalize = (v >> 1) & 1;
            p.group_score = (v & 4) ? MOE8_GROUP_SCORE_TOP2_SUM : MOE8_GROUP_SCORE_MAX;
            p.e_score_correction_bias = (v & 8) ? bias : NULL;
            p.routed_scaling_factor = (v & 2) ? 1.0f : 0.5f;
            snprintf(what, sizeof what, "grouped case %zu v%d", c, v);
            check_route(what, l, T, E, &p);
            free(l);
            free(bias);
        }
}

static void test_ties_and_edges(void) {
    moe8_router_params p = moe8_router_params_default();
    int32_t ids[8];
    float w[8];
    /* All equal: lowest ids, equal weights. */
    float flat[8] = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f};
    p.top_k = 3;
    CHECK(moe8_select_experts(flat, 1, 8, &p, ids, w, NULL) == MOE8_OK);
    CHECK(ids[0] == 0 && ids[1] == 1 && ids[2] == 2);
    CHECK_NEAR(w[0], 0.125, 1e-7);
    p.renormalize = 1;
    CHECK(moe8_select_experts(flat, 1, 8, &p, ids, w, NULL) == MOE8_OK);
    CHECK_NEAR(w[0], 1.0 / 3.0, 1e-7);
    CHECK(w[0] == w[1] && w[1] == w[2]);
    check_route("flat", flat, 1, 8, &p);
    /* Partial ties keep id order within equal scores. */
    float part[5] = {1.0f, 3.0f, 2.0f, 3.0f, 3.0f};
    p.top_k = 4;
    CHECK(moe8_select_experts(part, 1, 5, &p, ids, w, NULL) == MOE8_OK);
    CHECK(ids[0] == 1 && ids[1] == 3 && ids[2] == 4 && ids[3] == 2);
    /* Huge logits: max-subtracted softmax stays finite. */
    float big[4] = {1000.0f, 999.0f, -1000.0f, 998.0f};
    p.top_k = 2;
    p.renormalize = 0;
    CHECK(moe8_select_experts(big, 1, 4, &p, ids, w, NULL) == MOE8_OK);
    CHECK(ids[0] == 0 && ids[1] == 1 && isfinite(w[0]) && isfinite(w[1]));
    check_route("huge logits", big, 1, 4, &p);
    /* Zero sum: sigmoid underflows to 0 -> renormalized weights stay 0. */
    float neg[8];
    for (int i = 0; i < 8; i++) neg[i] = -1000.0f;
    p.scoring = MOE8_SCORING_SIGMOID;
    p.renormalize = 1;
    CHECK(moe8_select_experts(neg, 1, 8, &p, ids, w, NULL) == MOE8_OK);
    CHECK(w[0] == 0.0f && w[1] == 0.0f && ids[0] == 0 && ids[1] == 1);
    check_route("zero sum", neg, 1, 8, &p);
}

/* Sigmoid + negative bias: kept experts have keys < 0, the dropped ones must
 * still never be picked (the reference's 0.0 fill would pick them). */
static void test_dropped_groups(void) {
    moe8_router_params p = moe8_router_params_default();
    float l[8] = {0.1f, 0.2f, 3.0f, 2.5f, -1.0f, -2.0f, 0.0f, 0.3f}, bias[8];
    int32_t ids[4];
    float w[4];
    for (int i = 0; i < 8; i++) bias[i] = -5.0f;
    p.top_k = 2;
    p.scoring = MOE8_SCORING_SIGMOID;
    p.use_grouped_topk = 1;
    p.num_expert_group = 4;
    p.topk_group = 1;
    p.e_score_correction_bias = bias;
    CHECK(moe8_select_experts(l, 1, 8, &p, ids, w, NULL) == MOE8_OK);
    CHECK(ids[0] == 2 && ids[1] == 3);
    CHECK_NEAR(w[0], 1.0 / (1.0 + exp(-3.0)), 1e-6); /* weight from the unbiased score */
    check_route("dropped groups", l, 1, 8, &p);
    /* Bias flips the choice of group: group 3 wins on s + bias. */
    bias[6] = bias[7] = 5.0f;
    p.topk_group = 1;
    CHECK(moe8_select_experts(l, 1, 8, &p, ids, w, NULL) == MOE8_OK);
    CHECK(ids[0] == 7 && ids[1] == 6);
    check_route("bias picks group", l, 1, 8, &p);
}

/* ---- custom routing ------------------------------------------------------ */

static int custom_mode;
static moe8_status custom_fn(void *user, const float *logits, int T, int E, int K, int renorm,
                             int32_t *ids, float *w, moe8_error *err) {
    (void)logits;
    (void)renorm;
    *(int *)user += 1;
    if (custom_mode == 3) return moe8_fail(err, MOE8_ERR_CANCELLED, -1, "callback says no");
    for (int t = 0; t < T; t++)
        for (int j = 0; j < K; j++) {
            ids[t * K + j] = E - 1 - j;
            w[t * K + j] = 0.25f * (float)(j + 1);
        }
    if (custom_mode == 1) ids[K - 1] = E;   /* out of range */
    if (custom_mode == 2) ids[1] = ids[0];  /* duplicate */
    if (custom_mode == 4) w[0] = NAN;
    return MOE8_OK;
}

static void test_custom(void) {
    moe8_router_params p = moe8_router_params_default();
    float l[2 * 8] = {0};
    int32_t ids[2 * 3];
    float w[2 * 3];
    int calls = 0;
    moe8_error err;
    p.top_k = 3;
    p.custom = custom_fn;
    p.custom_user = &calls;
    p.routed_scaling_factor = 7.0f; /* not applied to a callback's result */
    custom_mode = 0;
    CHECK(moe8_select_experts(l, 2, 8, &p, ids, w, &err) == MOE8_OK);
    CHECK(calls == 1 && ids[0] == 7 && ids[1] == 6 && ids[5] == 5 && w[2] == 0.75f);
    for (custom_mode = 1; custom_mode <= 4; custom_mode++) {
        moe8_status st = moe8_select_experts(l, 2, 8, &p, ids, w, &err);
        CHECKF(st == (custom_mode == 3 ? MOE8_ERR_CANCELLED : MOE8_ERR_INVALID_ARG),
               "mode %d: %d %s", custom_mode, st, err.message);
        CHECK(err.message[0] != 0);
    }
}

static void test_param_errors(void) {
    float l[8] = {0}, nanb[8] = {0, 0, 0, NAN, 0, 0, 0, 0};
    int32_t ids[8];
    float w[8];
    moe8_error err;
    struct {
        int K, grouped, G, TG, top2, scoring;
        float scale;
        const float *bias;
        const char *word;
    } bad[] = {
        {0, 0, 0, 0, 0, 0, 1.0f, NULL, "top_k"},      {9, 0, 0, 0, 0, 0, 1.0f, NULL, "top_k"},
        {2, 0, 0, 0, 0, 7, 1.0f, NULL, "scoring"},    {2, 1, 3, 1, 0, 0, 1.0f, NULL, "divide"},
        {2, 1, 4, 5, 0, 0, 1.0f, NULL, "topk_group"}, {2, 1, 4, 0, 0, 0, 1.0f, NULL, "topk_group"},
        {5, 1, 4, 2, 0, 0, 1.0f, NULL, "kept groups"}, {2, 1, 8, 2, 1, 0, 1.0f, NULL, "top-2"},
        {2, 0, 0, 0, 0, 0, NAN, NULL, "scaling"},     {2, 1, 4, 2, 0, 0, 1.0f, nanb, "bias"},
        {2, 1, 0, 1, 0, 0, 1.0f, NULL, "num_expert_group"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        moe8_router_params p = moe8_router_params_default();
        p.top_k = bad[i].K;
        p.use_grouped_topk = bad[i].grouped;
        p.num_expert_group = bad[i].G;
        p.topk_group = bad[i].TG;
        p.group_score = bad[i].top2 ? MOE8_GROUP_SCORE_TOP2_SUM : MOE8_GROUP_SCORE_MAX;
        p.scoring = (moe8_scoring)bad[i].scoring;
        p.routed_scaling_factor = bad[i].scale;
        p.e_score_correction_bias = bad[i].bias;
        moe8_status st = moe8_select_experts(l, 1, 8, &p, ids, w, &err);
        CHECKF(st == MOE8_ERR_INVALID_ARG && strstr(err.message, bad[i].word),
               "case %zu: %d '%s'", i, st, err.message);
    }
}

/* ---- dispatch / combine ---------------------------------------------------- */

static void test_dispatch(void) {
    static const int cases[][5] = {/* T, K, E, first, last */
                                   {1, 8, 128, 0, 128}, {3, 2, 8, 2, 5}, {17, 2, 8, 0, 8},
                                   {17, 8, 8, 6, 8},    {7, 1, 4, 3, 4}, {64, 8, 128, 40, 41}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int T = cases[c][0], K = cases[c][1], E = cases[c][2], f = cases[c][3],
                  l = cases[c][4], S = T * K;
        int32_t *ids = malloc(sizeof(int32_t) * S), *row_of = malloc(sizeof(int32_t) * S);
        int32_t *order = malloc(sizeof(int32_t) * S), *count = malloc(sizeof(int32_t) * (l - f));
        int32_t *offs = malloc(sizeof(int32_t) * (l - f + 1));
        for (int t = 0; t < T; t++) /* K distinct experts per token */
            for (int j = 0; j < K; j++) {
                int e, dup;
                do {
                    e = (int)(test_rng_u64(&rng) % (unsigned)E);
                    dup = 0;
                    for (int i = 0; i < j; i++) dup |= ids[t * K + i] == e;
                } while (dup);
                ids[t * K + j] = e;
            }
        int M = moe8_moe_dispatch(ids, T, K, f, l, count, offs, order, row_of);
        int r = 0, bad = 0;
        for (int e = f; e < l; e++) {
            bad += offs[e - f] != r;
            for (int i = 0; i < S; i++)
                if (ids[i] == e) {
                    bad += order[r] != i || row_of[i] != r;
                    r++;
                }
            bad += count[e - f] != r - offs[e - f];
        }
        for (int i = 0; i < S; i++) bad += (ids[i] < f || ids[i] >= l) && row_of[i] != -1;
        CHECKF(M == r && offs[l - f] == M && bad == 0, "dispatch case %zu: M %d vs %d, %d bad", c,
               M, r, bad);
        /* Combine: slot-order sum of weighted rows, columns [3, 11) only. */
        const int H = 13;
        float *y2 = gaussian(M * H + 1, 1.0), *w = gaussian(S, 1.0);
        float *out = calloc((size_t)T * H, sizeof(float));
        moe8_moe_combine(out, H, y2, H, w, row_of, T, K, 3, 11);
        int cbad = 0;
        for (int t = 0; t < T; t++)
            for (int col = 0; col < H; col++) {
                float ref = 0.0f;
                for (int j = 0; j < K; j++)
                    if (row_of[t * K + j] >= 0)
                        ref += w[t * K + j] * y2[(size_t)row_of[t * K + j] * H + col];
                cbad += (col >= 3 && col < 11) ? out[t * H + col] != ref : out[t * H + col] != 0.0f;
            }
        CHECKF(cbad == 0, "combine case %zu: %d differ", c, cbad);
        free(ids);
        free(row_of);
        free(order);
        free(count);
        free(offs);
        free(y2);
        free(w);
        free(out);
    }
}

int main(void) {
    test_plain_table();
    test_grouped_table();
    test_ties_and_edges();
    test_dropped_groups();
    test_custom();
    test_param_errors();
    test_dispatch();
    return test_summary();
}
