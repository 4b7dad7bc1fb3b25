/*
 * test_sampler.c — the sampler against an independent double-precision
 * implementation of the filter chain (temperature, top-k, top-p, min-p), and
 * its draws against the filtered distribution.
 */
#include "test.h"
#include "sample/sampler.h"

typedef struct { int id; double p; } cand;

static int cmp_cand_ref(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->p != y->p) return x->p > y->p ? -1 : 1;
    return x->id - y->id;
}

/* Reference: returns the number of candidates, filling out[] (sorted). */
static int ref_filter(const float *logits, int V, moe8_sampler_params p, cand *out) {
    double mx = -INFINITY, sum = 0.0, kept = 0.0, acc = 0.0, pmax, mass = 0.0;
    int n = V;
    for (int i = 0; i < V; i++) mx = fmax(mx, logits[i]);
    for (int i = 0; i < V; i++) {
        out[i].id = i;
        out[i].p = exp(((double)logits[i] - mx) / p.temperature);
        sum += out[i].p;
    }
    for (int i = 0; i < V; i++) out[i].p /= sum;
    qsort(out, (size_t)V, sizeof *out, cmp_cand_ref);
    if (p.top_k > 0 && p.top_k < n) n = p.top_k;
    for (int i = 0; i < n; i++) kept += out[i].p;
    for (int i = 0; i < n; i++) {
        acc += out[i].p / kept;
        if (acc >= p.top_p) { n = i + 1; break; }
    }
    pmax = out[0].p;
    for (int i = 0; i < n; i++)
        if (out[i].p < p.min_p * pmax) { n = i; break; }
    for (int i = 0; i < n; i++) mass += out[i].p;
    for (int i = 0; i < n; i++) out[i].p /= mass;
    return n;
}

static void check_filter(const float *logits, int V, moe8_sampler_params p, const char *what) {
    moe8_sampler *s;
    const int32_t *ids;
    const float *probs;
    cand *ref = malloc((size_t)V * sizeof *ref);
    int n_ref, n, same = 1;
    double maxerr = 0.0;
    CHECK(moe8_sampler_create(&p, V, &s, NULL) == MOE8_OK);
    n = moe8_sampler_candidates(s, logits, &ids, &probs);
    n_ref = ref_filter(logits, V, p, ref);
    CHECKF(n == n_ref, "%s: %d candidates, reference %d", what, n, n_ref);
    for (int i = 0; i < n && i < n_ref; i++) {
        if (ids[i] != ref[i].id) same = 0;
        maxerr = fmax(maxerr, fabs(probs[i] - ref[i].p));
    }
    CHECKF(same, "%s: candidate order differs from the reference", what);
    CHECKF(maxerr < 2e-6, "%s: probability error %g", what, maxerr);
    moe8_sampler_free(s);
    free(ref);
}

static void test_filters(void) {
    test_rng rng = {12345};
    enum { V = 64 };
    float logits[V];
    for (int i = 0; i < V; i++) logits[i] = (float)(2.0 * test_rng_normal(&rng));
    struct { float t; int k; float tp, mp; } cases[] = {
        {1.0f, 0, 1.0f, 0.0f}, {0.7f, 0, 1.0f, 0.0f}, {1.0f, 5, 1.0f, 0.0f}, {1.0f, 0, 0.9f, 0.0f},
        {1.0f, 0, 0.5f, 0.0f}, {1.0f, 0, 1.0f, 0.1f}, {1.3f, 10, 0.8f, 0.05f}, {0.5f, 1, 1.0f, 0.0f},
        {1.0f, 64, 0.95f, 0.0f}, {1.0f, 100, 1.0f, 0.0f}, {2.0f, 20, 0.3f, 0.2f},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        moe8_sampler_params p = moe8_sampler_params_default();
        char what[96];
        p.temperature = cases[c].t, p.top_k = cases[c].k, p.top_p = cases[c].tp, p.min_p = cases[c].mp;
        snprintf(what, sizeof what, "t=%g k=%d p=%g min_p=%g", p.temperature, p.top_k, p.top_p, p.min_p);
        check_filter(logits, V, p, what);
    }
    /* The real vocabulary size, top-p alone (the pre-filtered path). */
    {
        const int BV = 151936;
        float *big = malloc((size_t)BV * sizeof *big);
        moe8_sampler_params p = moe8_sampler_params_default();
        for (int i = 0; i < BV; i++) big[i] = (float)(3.0 * test_rng_normal(&rng));
        p.temperature = 0.8f, p.top_p = 0.9f;
        check_filter(big, BV, p, "vocab 151936 top-p 0.9");
        p.top_p = 1.0f, p.top_k = 40;
        check_filter(big, BV, p, "vocab 151936 top-k 40");
        /* min-p filters before the sort unless top-k and top-p are both on */
        p.top_k = 0, p.min_p = 0.05f;
        check_filter(big, BV, p, "vocab 151936 min-p 0.05");
        p.top_p = 0.95f;
        check_filter(big, BV, p, "vocab 151936 top-p 0.95 min-p 0.05");
        p.top_p = 1.0f, p.top_k = 3000;
        check_filter(big, BV, p, "vocab 151936 top-k 3000 min-p 0.05");
        p.top_p = 0.6f;
        check_filter(big, BV, p, "vocab 151936 top-k 3000 top-p 0.6 min-p 0.05");
        free(big);
    }
}

static void test_greedy_and_draws(void) {
    float logits[8] = {0.5f, 2.0f, -1.0f, 2.0f, 1.5f, 0.0f, -3.0f, 1.0f};
    moe8_sampler *s, *s2;
    moe8_sampler_params p = moe8_sampler_params_default();
    int counts[8] = {0}, N = 200000, differ = 0;
    cand ref[8];
    CHECK(moe8_sampler_create(NULL, 8, &s, NULL) == MOE8_OK);
    CHECKF(moe8_sampler_sample(s, logits) == 1, "greedy tie must go to the lower id");
    {   /* greedy as the loop `if (l[i] > l[best]) best = i`: NaN never wins, a NaN first stays */
        float g[6] = {1.0f, NAN, 3.0f, -INFINITY, 3.0f, NAN};
        moe8_sampler *s6;
        int32_t a, b, c, d;
        CHECK(moe8_sampler_create(NULL, 6, &s6, NULL) == MOE8_OK);
        a = moe8_sampler_sample(s6, g);
        g[0] = NAN;
        b = moe8_sampler_sample(s6, g);
        for (int i = 0; i < 6; i++) g[i] = -INFINITY;
        c = moe8_sampler_sample(s6, g);
        g[4] = -0.0f, g[5] = 0.0f;
        d = moe8_sampler_sample(s6, g);
        moe8_sampler_free(s6);
        CHECKF(a == 2 && b == 0 && c == 0 && d == 4, "greedy with NaN and -inf: %d %d %d %d (want 2 0 0 4)", a,
               b, c, d);
    }
    moe8_sampler_free(s);

    p.temperature = 1.0f, p.top_p = 0.9f, p.seed = 7;
    CHECK(moe8_sampler_create(&p, 8, &s, NULL) == MOE8_OK);
    for (int i = 0; i < N; i++) counts[moe8_sampler_sample(s, logits)]++;
    moe8_sampler_free(s);
    int n = ref_filter(logits, 8, p, ref);
    double expect[8] = {0};
    for (int i = 0; i < n; i++) expect[ref[i].id] = ref[i].p;
    for (int i = 0; i < 8; i++) {
        double f = (double)counts[i] / N, sd = sqrt(expect[i] * (1 - expect[i]) / N);
        CHECKF(fabs(f - expect[i]) <= 5 * sd + 1e-12, "token %d: frequency %.5f, expected %.5f", i, f,
               expect[i]);
    }

    /* No filter (the unsorted path): the same frequencies as the distribution. */
    {
        moe8_sampler_params q = moe8_sampler_params_default();
        int c2[8] = {0};
        cand r2[8];
        double e2[8] = {0};
        int n2;
        q.temperature = 0.7f, q.seed = 11;
        CHECK(moe8_sampler_create(&q, 8, &s, NULL) == MOE8_OK);
        for (int i = 0; i < N; i++) c2[moe8_sampler_sample(s, logits)]++;
        moe8_sampler_free(s);
        n2 = ref_filter(logits, 8, q, r2);
        CHECK(n2 == 8);
        for (int i = 0; i < n2; i++) e2[r2[i].id] = r2[i].p;
        for (int i = 0; i < 8; i++) {
            double f = (double)c2[i] / N, sd = sqrt(e2[i] * (1 - e2[i]) / N);
            CHECKF(fabs(f - e2[i]) <= 5 * sd + 1e-12, "no filter: token %d: frequency %.5f, expected "
                   "%.5f", i, f, e2[i]);
        }
    }

    /* Same seed, same stream; another seed, another stream. */
    CHECK(moe8_sampler_create(&p, 8, &s, NULL) == MOE8_OK);
    CHECK(moe8_sampler_create(&p, 8, &s2, NULL) == MOE8_OK);
    for (int i = 0; i < 1000; i++) differ += moe8_sampler_sample(s, logits) != moe8_sampler_sample(s2, logits);
    CHECK(differ == 0);
    moe8_sampler_free(s2);
    p.seed = 8;
    CHECK(moe8_sampler_create(&p, 8, &s2, NULL) == MOE8_OK);
    differ = 0;
    for (int i = 0; i < 1000; i++) differ += moe8_sampler_sample(s, logits) != moe8_sampler_sample(s2, logits);
    CHECK(differ > 100);
    moe8_sampler_free(s);
    moe8_sampler_free(s2);
}

static void test_bad_params(void) {
    moe8_sampler *s = (moe8_sampler *)1;
    moe8_error err;
    moe8_sampler_params p = moe8_sampler_params_default();
    p.top_p = 0.0f;
    CHECK(moe8_sampler_create(&p, 10, &s, &err) == MOE8_ERR_INVALID_ARG && s == NULL);
    CHECK(strstr(err.message, "top_p") != NULL);
    p = moe8_sampler_params_default(), p.temperature = -1.0f;
    CHECK(moe8_sampler_create(&p, 10, &s, &err) == MOE8_ERR_INVALID_ARG);
    CHECK(strstr(err.message, "temperature") != NULL);
    p = moe8_sampler_params_default(), p.min_p = 1.5f;
    CHECK(moe8_sampler_create(&p, 10, &s, &err) == MOE8_ERR_INVALID_ARG);
    p = moe8_sampler_params_default(), p.top_k = -2;
    CHECK(moe8_sampler_create(&p, 10, &s, &err) == MOE8_ERR_INVALID_ARG);
    CHECK(moe8_sampler_create(NULL, 0, &s, &err) == MOE8_ERR_INVALID_ARG);
}

int main(void) {
    test_filters();
    test_greedy_and_draws();
    test_bad_params();
    return test_summary();
}
