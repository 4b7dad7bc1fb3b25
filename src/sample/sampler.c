/*
 * sampler.c — choosing the next token from logits.
 *
 * Greedy when temperature is 0 (the default): the arg-max, ties to the lower
 * id. Otherwise, as vLLM does: logits / temperature -> softmax -> top-k ->
 * top-p (smallest prefix whose mass reaches p) -> min-p (keep p >= min_p *
 * p_max) -> renormalize -> one draw from a seeded xoshiro256** stream.
 * Candidates are ordered by probability, ties by id, so a seed gives the same
 * tokens on every machine and thread count.
 *
 * Without top-k, top-p or min-p there is nothing to rank: the draw walks the
 * whole distribution in id order, O(n_vocab) with no sort (sorting 151936
 * candidates per token cost ~40 ms).
 *
 * The generator may live outside the sampler (moe8_sampler_draw): the
 * scheduler keeps one per request, seeded by the request's seed, and shares
 * one sampler's buffers between all requests.
 *
 * The exponentials and their sum are the kernels' (moe8_exp_sum: SEMANTICS
 * §10, "The exponential"): glibc's expf bit for bit, vectorized.
 *
 * Avoids sorting the whole vocabulary: top-k keeps a bounded heap; top-p
 * alone sorts only the tokens at or above the probability bucket where the
 * mass from the top passes top_p (nucleus_floor), and never those under
 * (1 - top_p) / n_vocab (together they weigh less than 1 - top_p);
 * min-p sorts only tokens with p >= min_p * p_max (it would drop the rest).
 * Greedy is a vector max, then the first id holding it.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "kernels/kernels.h"
#include "sample/sampler.h"

struct moe8_sampler {
    moe8_sampler_params p;
    int n_vocab;
    uint64_t rng[4];   /* xoshiro256** state */
    float *work;       /* [n_vocab] probability of each token id */
    int32_t *ids;      /* [n_vocab] candidate ids */
    float *probs;      /* [n_vocab] candidate probabilities, parallel to ids */
    uint64_t *keys;    /* [2 * n_vocab] the candidates' sort keys and the radix sort's other half */
};

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t xoshiro_next(uint64_t *s) {
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3];
    s[2] ^= t; s[3] = rotl(s[3], 45);
    return r;
}

moe8_status moe8_sampler_params_check(const moe8_sampler_params *params, moe8_error *err) {
    const moe8_sampler_params p = params ? *params : moe8_sampler_params_default();
    if (!(p.temperature >= 0.0f) || !isfinite(p.temperature))
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "temperature (%g) must be >= 0", p.temperature);
    if (p.top_k < 0) return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "top_k (%d) must be >= 0", p.top_k);
    if (!(p.top_p > 0.0f && p.top_p <= 1.0f))
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "top_p (%g) must be in (0, 1]", p.top_p);
    if (!(p.min_p >= 0.0f && p.min_p <= 1.0f))
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "min_p (%g) must be in [0, 1]", p.min_p);
    return MOE8_OK;
}

void moe8_sampler_seed(uint64_t rng[4], uint64_t seed) {
    for (int i = 0; i < 4; i++) rng[i] = splitmix64(&seed);
}

moe8_status moe8_sampler_create(const moe8_sampler_params *params, int n_vocab,
                                moe8_sampler **out, moe8_error *err) {
    moe8_sampler_params p = params ? *params : moe8_sampler_params_default();
    moe8_sampler *s;
    moe8_status st;
    *out = NULL;
    if (n_vocab <= 0) return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "n_vocab (%d) must be > 0", n_vocab);
    if ((st = moe8_sampler_params_check(&p, err))) return st;
    s = calloc(1, sizeof *s);
    if (!s) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "cannot allocate the sampler");
    s->ids = malloc((size_t)n_vocab * sizeof *s->ids);
    s->probs = malloc((size_t)n_vocab * sizeof *s->probs);
    s->work = malloc((size_t)n_vocab * sizeof *s->work);
    s->keys = malloc((size_t)n_vocab * 2 * sizeof *s->keys);
    if (!s->ids || !s->probs || !s->work || !s->keys) {
        moe8_sampler_free(s);
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "cannot allocate the sampler for %d tokens", n_vocab);
    }
    s->p = p;
    s->n_vocab = n_vocab;
    moe8_sampler_seed(s->rng, p.seed);
    *out = s;
    return MOE8_OK;
}

moe8_sampler_params moe8_sampler_get_params(const moe8_sampler *s) { return s->p; }
int moe8_sampler_n_vocab(const moe8_sampler *s) { return s->n_vocab; }

void moe8_sampler_free(moe8_sampler *s) {
    if (!s) return;
    free(s->ids);
    free(s->probs);
    free(s->work);
    free(s->keys);
    free(s);
}

moe8_sampler_params moe8_sampler_params_default(void) {
    moe8_sampler_params p = {0.0f, 0, 1.0f, 0.0f, 0};
    return p;
}

/* a ranks before b: higher probability, then lower id. */
static int before(float pa, int32_t ia, float pb, int32_t ib) {
    return pa > pb || (pa == pb && ia < ib);
}

static int cmp_cand(const void *a, const void *b, void *ctx) {
    const float *probs = ctx;
    int32_t ia = *(const int32_t *)a, ib = *(const int32_t *)b;
    if (before(probs[ia], ia, probs[ib], ib)) return -1;
    if (before(probs[ib], ib, probs[ia], ia)) return 1;
    return 0;
}

/* Keep the k best of ids[0..n) (by prob[id]) in ids[0..k), unsorted: a
 * min-heap of size k whose root is the worst kept candidate. */
static int keep_top_k(int32_t *ids, int n, int k, const float *prob) {
    if (k >= n) return n;
    for (int i = 0; i < n; i++) {
        int32_t id = ids[i];
        int pos;
        if (i < k) {
            pos = i; /* sift up */
            while (pos > 0) {
                int parent = (pos - 1) / 2;
                if (!before(prob[ids[parent]], ids[parent], prob[id], id)) break;
                ids[pos] = ids[parent];
                pos = parent;
            }
            ids[pos] = id;
            continue;
        }
        if (!before(prob[id], id, prob[ids[0]], ids[0])) continue;
        pos = 0; /* replace the root, sift down */
        for (;;) {
            int c = 2 * pos + 1;
            if (c >= k) break;
            if (c + 1 < k && before(prob[ids[c]], ids[c], prob[ids[c + 1]], ids[c + 1])) c++;
            if (!before(prob[id], id, prob[ids[c]], ids[c])) break;
            ids[pos] = ids[c];
            pos = c;
        }
        ids[pos] = id;
    }
    return k;
}

/* ids[0..n) into candidate order (higher probability, then lower id) for
 * finite p >= 0: an LSD radix sort, 11 bits a pass, of the keys
 * ~bits(p) << 32 | id in ascending order (a float's bits order p >= 0 as its
 * value); a pass whose digit is the same in every key moves nothing and is
 * skipped. The order cmp_cand gives, without its call per comparison. */
static void sort_cands(int32_t *ids, int n, const float *pr, uint64_t *a, uint64_t *b) {
    enum { BITS = 11, NB = 1 << BITS };
    uint32_t cnt[NB];
    if (n < 2) return;
    for (int i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &pr[ids[i]], 4);
        a[i] = (uint64_t)~u << 32 | (uint32_t)ids[i];
    }
    for (int shift = 0; shift < 64; shift += BITS) {
        uint32_t at = 0;
        uint64_t *t;
        memset(cnt, 0, sizeof cnt);
        for (int i = 0; i < n; i++) cnt[(a[i] >> shift) & (NB - 1)]++;
        if (cnt[(a[0] >> shift) & (NB - 1)] == (uint32_t)n) continue;
        for (int d = 0; d < NB; d++) {
            const uint32_t c = cnt[d];
            cnt[d] = at;
            at += c;
        }
        for (int i = 0; i < n; i++) b[cnt[(a[i] >> shift) & (NB - 1)]++] = a[i];
        t = a, a = b, b = t;
    }
    for (int i = 0; i < n; i++) ids[i] = (int32_t)(uint32_t)a[i];
}

/* Top-p alone: a floor under its nucleus. Probabilities (in [0, 1]) go into
 * 2049 buckets by their float bits' top 13 (value order); walking down from
 * the top, the first bucket whose running mass passes top_p times the whole
 * (with a margin far above the sums' rounding) holds the nucleus' last token,
 * so the tokens at or above its lower edge hold the nucleus, and sorting
 * them alone gives the full sort's order and prefix sums. 0 when none passes. */
static float nucleus_floor(const float *pr, int V, float top_p) {
    enum { NB = 2049 };
    double hist[NB] = {0}, total = 0.0, cum = 0.0, target;
    for (int i = 0; i < V; i++) {
        uint32_t b;
        memcpy(&b, &pr[i], 4);
        b >>= 19;
        if (b < NB) hist[b] += pr[i], total += pr[i];
    }
    target = (double)top_p * total * (1.0 + 1e-9);
    for (int b = NB - 1; b >= 0; b--) {
        cum += hist[b];
        if (cum >= target) {
            const uint32_t lo = (uint32_t)b << 19;
            float f;
            memcpy(&f, &lo, 4);
            return f;
        }
    }
    return 0.0f;
}

static int candidates(moe8_sampler *s, const moe8_sampler_params *sp, const float *logits,
                      const int32_t **ids_out, const float **probs_out) {
    const int V = s->n_vocab;
    float *pr = s->work;
    int32_t *ids = s->ids;
    float mx, pmax = 0.0f;
    double sum, mass = 0.0;
    int n = 0;
    mx = moe8_max_f32(logits, V);
    sum = moe8_exp_sum(pr, logits, V, mx, sp->temperature);
    const int finite = sum > 0.0 && isfinite(sum); /* else NaN logits: every p NaN */
    for (int i = 0; i < V; i++) pr[i] = (float)(pr[i] / sum);
    {   /* candidates that can survive: top-p alone cuts below floor_p (above);
         * min-p keeps p >= min_p * p_max (the largest p ranks first, whatever
         * top-k and top-p keep). Filtering before the sort keeps the
         * survivors' order and prefix sums, so the result is the same, except
         * with top-k and top-p both on: top-p then weighs top-k's whole mass,
         * tokens under min-p's floor included, so min-p does not filter early. */
        float floor_p = 0.0f;
        if (sp->top_p < 1.0f && sp->top_k == 0) {
            floor_p = (1.0f - sp->top_p) / (float)V;
            if (finite) floor_p = fmaxf(floor_p, nucleus_floor(pr, V, sp->top_p));
        }
        if (sp->min_p > 0.0f && !(sp->top_k > 0 && sp->top_p < 1.0f)) /* (top-p's mass is top-k's then) */
            floor_p = fmaxf(floor_p, sp->min_p * moe8_max_f32(pr, V));
        if (floor_p > 0.0f) {
            for (int i = 0; i < V; i++)
                if (pr[i] >= floor_p) ids[n++] = i;
        } else {
            for (int i = 0; i < V; i++) ids[n++] = i;
        }
    }
    if (sp->top_k > 0) n = keep_top_k(ids, n, sp->top_k, pr);
    if (finite) sort_cands(ids, n, pr, s->keys, s->keys + V);
    else qsort_r(ids, (size_t)n, sizeof *ids, cmp_cand, pr); /* NaN: the comparator's order, as ever */
    if (sp->top_p < 1.0f || sp->top_k > 0) { /* nucleus of the (top-k) renormalized mass */
        double kept = 0.0, acc = 0.0; /* without top-k: all the mass, pre-filtered or not */
        if (sp->top_k > 0)
            for (int i = 0; i < n; i++) kept += pr[ids[i]];
        else
            for (int i = 0; i < V; i++) kept += pr[i];
        for (int i = 0; i < n; i++) {
            acc += pr[ids[i]];
            if (acc >= sp->top_p * kept) { n = i + 1; break; }
        }
    }
    if (n > 0) pmax = pr[ids[0]];
    if (sp->min_p > 0.0f) {
        int m = 0;
        while (m < n && pr[ids[m]] >= sp->min_p * pmax) m++;
        n = m;
    }
    for (int i = 0; i < n; i++) mass += pr[ids[i]];
    for (int i = 0; i < n; i++) s->probs[i] = (float)(pr[ids[i]] / mass);
    *ids_out = ids;
    *probs_out = s->probs;
    return n;
}

int moe8_sampler_candidates(moe8_sampler *s, const float *logits, const int32_t **ids,
                            const float **probs) {
    return candidates(s, &s->p, logits, ids, probs);
}

int32_t moe8_sampler_draw(moe8_sampler *s, const moe8_sampler_params *p, uint64_t rng[4],
                          const float *logits) {
    const int32_t *ids;
    const float *probs;
    double u, acc = 0.0;
    int n;
    if (p->temperature == 0.0f) { /* the first id of the largest logit: the loop
                                     * `if (l[i] > l[best]) best = i`, as two vector passes */
        const float mx = moe8_max_f32(logits, s->n_vocab);
        if (logits[0] != logits[0]) return 0; /* NaN first: nothing compares larger */
        for (int i = 0; i < s->n_vocab; i++)
            if (logits[i] == mx) return i;
        return 0; /* all NaN */
    }
    if (p->top_k == 0 && p->top_p >= 1.0f && p->min_p == 0.0f) {
        /* no filter: the whole distribution, walked in id order (no sort) */
        float *pr = s->work;
        const double sum = moe8_exp_sum(pr, logits, s->n_vocab, moe8_max_f32(logits, s->n_vocab), p->temperature);
        if (!(sum > 0.0)) return 0; /* all logits NaN */
        u = (double)(xoshiro_next(rng) >> 11) * (1.0 / 9007199254740992.0) * sum;
        for (int i = 0; i < s->n_vocab; i++) {
            acc += pr[i];
            if (u < acc) return i;
        }
        return s->n_vocab - 1;
    }
    n = candidates(s, p, logits, &ids, &probs);
    if (n <= 0) return 0; /* all logits NaN: nothing sensible to draw */
    u = (double)(xoshiro_next(rng) >> 11) * (1.0 / 9007199254740992.0);
    for (int i = 0; i < n; i++) {
        acc += probs[i];
        if (u < acc) return ids[i];
    }
    return ids[n - 1];
}

float moe8_logits_max(const float *logits, int32_t n) { return moe8_max_f32(logits, n); }

double moe8_logits_exp_sum(const float *logits, int32_t n, float max, float temperature) {
    return moe8_exp_sum(NULL, logits, n, max, temperature);
}

int32_t moe8_sampler_sample(moe8_sampler *s, const float *logits) {
    return moe8_sampler_draw(s, &s->p, s->rng, logits);
}
