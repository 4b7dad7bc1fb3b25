/*
 * test_logits.c — a request's logits processors in the scheduler
 * (moe8_request's logit_bias, min_tokens, repetition / frequency / presence
 * penalties) and the prompt log-probs of PROMPT_LOGITS events, against this
 * test's own computation in double from the raw logits every event carries:
 *   - greedy: each token is the arg-max of the processed logits computed here
 *     (vLLM's order: bias, min_tokens ban, repetition over prompt + output,
 *     then frequency x count and presence over the output);
 *   - log-probs stay the raw model's (processors do not touch them);
 *   - min_tokens: the eos ids cannot come before it, even with +100 on them;
 *   - logit_bias -100 bans a token that greedy would take; +100 forces one;
 *   - batch invariance: processed requests give the same tokens beside 6
 *     others (unprocessed and processed) as alone;
 *   - bad values refused, naming the field;
 *   - PROMPT_LOGITS at pos p: the log-softmax of its logits at the prompt
 *     token p + 1, and its best alternatives.
 */
#include "test.h"
#include "fixture_model.h"

#define VOCAB 2048
#define NCTX 256
#define MAXG 48

static moe8_model *g_model;
static int32_t g_eos[8], g_n_eos;

typedef struct {
    int32_t tok[MAXG];
    float lp[MAXG];
    int n;
    moe8_finish finish;
    int greedy_bad;           /* steps whose token is not the arg-max of the processed logits */
    int lp_bad;               /* steps whose log-prob is not the raw one */
    int checked;              /* steps clearly decided (margin) and checked */
} run_res;

typedef struct {
    const int32_t *prompt;
    int32_t n_prompt;
    moe8_request rq;          /* processors set by the case */
    run_res *res;
} one;

/* The processed logits of this test (double), from raw[VOCAB] and history. */
static void process_ref(const moe8_request *q, const int32_t *prompt, int32_t n_prompt, const int32_t *out,
                        int n_out, const float *raw, double *x) {
    for (int t = 0; t < VOCAB; t++) x[t] = raw[t];
    for (int i = 0; i < q->n_bias; i++) x[q->bias_ids[i]] += q->bias[i];
    if (n_out < q->min_tokens)
        for (int i = 0; i < g_n_eos; i++) x[g_eos[i]] = -INFINITY;
    if (q->repetition_penalty != 1.0f) {
        static unsigned char seen[VOCAB];
        memset(seen, 0, sizeof seen);
        for (int i = 0; i < n_prompt; i++) seen[prompt[i]] = 1;
        for (int i = 0; i < n_out; i++) seen[out[i]] = 1;
        for (int t = 0; t < VOCAB; t++)
            if (seen[t]) x[t] = x[t] > 0 ? x[t] / q->repetition_penalty : x[t] * q->repetition_penalty;
    }
    {
        static int count[VOCAB];
        memset(count, 0, sizeof count);
        for (int i = 0; i < n_out; i++) count[out[i]]++;
        for (int t = 0; t < VOCAB; t++)
            if (count[t]) x[t] -= q->frequency_penalty * count[t] + q->presence_penalty;
    }
}

/* Run `n` requests together (or each alone when n == 1) to the end, checking
 * every token of each against process_ref. */
static void run(one *r, int n) {
    moe8_context_params cp = moe8_context_params_default();
    moe8_sched *s;
    moe8_context *ctx;
    int64_t id[16];
    double *x = malloc(VOCAB * sizeof *x);
    cp.n_ctx = NCTX;
    cp.n_seq_max = n;
    cp.n_threads = 2;
    CHECK(moe8_context_create(g_model, &cp, &ctx, NULL) == MOE8_OK);
    CHECK(moe8_sched_create(ctx, NULL, &s, NULL) == MOE8_OK);
    for (int i = 0; i < n; i++) {
        memset(r[i].res, 0, sizeof *r[i].res);
        r[i].rq.prompt = r[i].prompt;
        r[i].rq.n_prompt = r[i].n_prompt;
        r[i].rq.logprobs = 0;
        r[i].rq.user = &r[i];
        CHECK(moe8_sched_add(s, &r[i].rq, &id[i], NULL) == MOE8_OK);
    }
    for (int step = 0; step < 4 * MAXG && moe8_sched_pending(s) > 0; step++) {
        const moe8_event *ev;
        int32_t ne;
        CHECK(moe8_sched_step(s, &ev, &ne, NULL) == MOE8_OK);
        for (int32_t k = 0; k < ne; k++) {
            one *o = ev[k].user;
            run_res *res = o->res;
            if (ev[k].type == MOE8_EVENT_FINISH) {
                res->finish = ev[k].finish;
                continue;
            }
            if (ev[k].type != MOE8_EVENT_TOKEN || res->n >= MAXG) continue;
            {
                int best = 0, second = -1;
                double mx = -INFINITY, sum = 0;
                process_ref(&o->rq, o->prompt, o->n_prompt, res->tok, res->n, ev[k].logits, x);
                for (int t = 1; t < VOCAB; t++) {
                    if (x[t] > x[best]) second = best, best = t;
                    else if (second < 0 || x[t] > x[second]) second = t;
                }
                /* decided with a margin the float arithmetic cannot flip */
                if (x[best] - x[second] > 1e-3) {
                    res->checked++;
                    res->greedy_bad += ev[k].token != best;
                }
                for (int t = 0; t < VOCAB; t++) mx = fmax(mx, ev[k].logits[t]);
                for (int t = 0; t < VOCAB; t++) sum += exp((double)ev[k].logits[t] - mx);
                res->lp_bad += fabs(ev[k].logprob - (ev[k].logits[ev[k].token] - mx - log(sum))) > 1e-4;
            }
            res->tok[res->n] = ev[k].token;
            res->lp[res->n++] = ev[k].logprob;
        }
    }
    CHECK(moe8_sched_pending(s) == 0);
    moe8_sched_free(s);
    moe8_context_free(ctx);
    free(x);
}

static const int32_t P1[] = {11, 47, 300, 47, 5, 911, 12, 12, 1024, 77};
static const int32_t P2[] = {3, 1500, 8, 2000};

static moe8_request base_rq(int max_tokens) {
    moe8_request q = moe8_request_default();
    q.max_tokens = max_tokens;
    q.ignore_eos = 1;
    return q;
}

static void check_alone(const char *what, moe8_request q, const int32_t *p, int np, run_res *out) {
    one o = {p, np, q, out};
    run(&o, 1);
    CHECKF(out->greedy_bad == 0 && out->lp_bad == 0 && out->checked >= out->n / 2,
           "%s: %d of %d decided steps not the processed arg-max, %d log-probs not raw (%d tokens)", what,
           out->greedy_bad, out->checked, out->lp_bad, out->n);
}

static int distinct(const run_res *r) {
    int n = 0;
    for (int i = 0; i < r->n; i++) {
        int seen = 0;
        for (int k = 0; k < i; k++) seen |= r->tok[k] == r->tok[i];
        n += !seen;
    }
    return n;
}

static void test_processors(void) {
    static run_res plain, pen[6], forced, banned, minr;
    moe8_request q;
    int32_t ids[2];
    float b[2];
    q = base_rq(32);
    check_alone("plain", q, P1, 10, &plain);
    {
        static const float rep[] = {2.0f, 0.7f, 1.0f, 1.0f, 1.0f, 1.8f};
        static const float fr[] = {0.0f, 0.0f, 1.5f, -0.5f, 0.0f, 0.8f};
        static const float pr[] = {0.0f, 0.0f, 0.0f, 0.0f, 2.0f, 0.6f};
        /* a random model rarely repeats itself: three tokens lifted by a bias make
         * it repeat them, so every penalty changes what it says */
        static const int32_t lift_ids[] = {100, 200, 300};
        static const float lift[] = {6.0f, 5.8f, 5.6f};
        static run_res lifted;
        q = base_rq(32);
        q.bias_ids = lift_ids, q.bias = lift, q.n_bias = 3;
        check_alone("lifted", q, P1, 10, &lifted);
        CHECKF(distinct(&lifted) <= 3, "the lifted model says %d distinct tokens", distinct(&lifted));
        for (int i = 0; i < 6; i++) {
            char what[64];
            q = base_rq(32);
            q.bias_ids = lift_ids, q.bias = lift, q.n_bias = 3;
            q.repetition_penalty = rep[i], q.frequency_penalty = fr[i], q.presence_penalty = pr[i];
            snprintf(what, sizeof what, "rep %.1f freq %.1f pres %.1f", rep[i], fr[i], pr[i]);
            check_alone(what, q, P1, 10, &pen[i]);
            if (rep[i] > 1 || fr[i] > 0 || pr[i] > 0) /* against repetition: more distinct tokens */
                CHECKF(distinct(&pen[i]) > distinct(&lifted), "%s: %d distinct tokens, lifted alone %d",
                       what, distinct(&pen[i]), distinct(&lifted));
            else if (rep[i] != 1 || fr[i] != 0) /* for it: another output all the same */
                CHECKF(memcmp(pen[i].tok, lifted.tok, sizeof lifted.tok[0] * 32) || pen[i].n != lifted.n ||
                       distinct(&pen[i]) <= distinct(&lifted), "%s: no effect", what);
        }
    }
    /* -100 bans the token greedy took first; +100 forces another */
    q = base_rq(8);
    ids[0] = plain.tok[0], b[0] = -100;
    q.bias_ids = ids, q.bias = b, q.n_bias = 1;
    check_alone("bias -100", q, P1, 10, &banned);
    for (int i = 0; i < banned.n; i++) CHECK(banned.tok[i] != plain.tok[0]);
    q = base_rq(8);
    ids[0] = 1234, b[0] = 100;
    q.bias_ids = ids, q.bias = b, q.n_bias = 1;
    check_alone("bias +100", q, P1, 10, &forced);
    for (int i = 0; i < forced.n; i++) CHECK(forced.tok[i] == 1234);
    /* min_tokens: the eos id forced by +100 comes only at token 5, then ends it */
    q = base_rq(20);
    q.ignore_eos = 0;
    ids[0] = g_eos[0], b[0] = 100;
    q.bias_ids = ids, q.bias = b, q.n_bias = 1;
    q.min_tokens = 5;
    check_alone("min_tokens 5", q, P2, 4, &minr);
    CHECKF(minr.n == 5 && minr.finish == MOE8_FINISH_STOP, "min_tokens 5 with eos at +100: %d tokens, finish %d",
           minr.n, minr.finish);
    for (int i = 0; i < minr.n; i++)
        for (int e = 0; e < g_n_eos; e++) CHECK(minr.tok[i] != g_eos[e]);
}

/* Processed and plain requests together: each as alone. */
static void test_batch_invariance(void) {
    static run_res alone[7], together[7];
    one r[7];
    float b[2] = {3.5f, -2.0f};
    int32_t ids[2] = {77, 911};
    for (int i = 0; i < 7; i++) {
        moe8_request q = base_rq(12 + i);
        if (i % 2) q.repetition_penalty = 1.0f + 0.2f * (float)i, q.presence_penalty = 0.3f * (float)i;
        if (i % 3 == 0) q.frequency_penalty = 0.7f, q.bias_ids = ids, q.bias = b, q.n_bias = 2;
        if (i == 5) q.min_tokens = 9, q.ignore_eos = 0;
        r[i].prompt = i % 2 ? P1 : P2;
        r[i].n_prompt = i % 2 ? 10 : 4;
        r[i].rq = q;
        r[i].res = &alone[i];
        run(&r[i], 1);
    }
    for (int i = 0; i < 7; i++) r[i].res = &together[i];
    run(r, 7);
    for (int i = 0; i < 7; i++)
        CHECKF(alone[i].n == together[i].n && !memcmp(alone[i].tok, together[i].tok, sizeof alone[i].tok[0] * alone[i].n) &&
               !memcmp(alone[i].lp, together[i].lp, sizeof alone[i].lp[0] * alone[i].n),
               "request %d: together differs from alone", i);
}

static void test_bad(void) {
    moe8_context_params cp = moe8_context_params_default();
    moe8_context *ctx;
    moe8_sched *s;
    static const struct { int field; double v; const char *needle; } B[] = {
        {0, 0, "repetition_penalty"}, {0, -1, "repetition_penalty"}, {0, NAN, "repetition_penalty"},
        {1, INFINITY, "frequency_penalty"}, {2, NAN, "presence_penalty"}, {3, 17, "min_tokens"},
        {3, -1, "min_tokens"}, {4, VOCAB, "token id"}, {4, -1, "token id"}, {5, NAN, "not finite"},
    };
    cp.n_ctx = NCTX;
    CHECK(moe8_context_create(g_model, &cp, &ctx, NULL) == MOE8_OK);
    CHECK(moe8_sched_create(ctx, NULL, &s, NULL) == MOE8_OK);
    for (size_t i = 0; i < sizeof B / sizeof *B; i++) {
        moe8_request q = base_rq(16);
        moe8_error e;
        int64_t id;
        int32_t bid = 5;
        float bv = 1;
        q.prompt = P2, q.n_prompt = 4;
        switch (B[i].field) {
        case 0: q.repetition_penalty = (float)B[i].v; break;
        case 1: q.frequency_penalty = (float)B[i].v; break;
        case 2: q.presence_penalty = (float)B[i].v; break;
        case 3: q.min_tokens = (int32_t)B[i].v; break;
        case 4: bid = (int32_t)B[i].v; break;
        default: bv = (float)B[i].v;
        }
        if (B[i].field >= 4) q.bias_ids = &bid, q.bias = &bv, q.n_bias = 1;
        CHECKF(moe8_sched_add(s, &q, &id, &e) == MOE8_ERR_INVALID_ARG && strstr(e.message, B[i].needle),
               "case %zu: %s", i, e.message);
    }
    moe8_sched_free(s);
    moe8_context_free(ctx);
}

/* PROMPT_LOGITS events: the next prompt token's log-prob and alternatives. */
static void test_prompt_logprobs(void) {
    moe8_context_params cp = moe8_context_params_default();
    moe8_context *ctx;
    moe8_sched *s;
    moe8_request q = base_rq(0);
    int64_t id;
    int seen = 0, bad = 0;
    cp.n_ctx = NCTX;
    CHECK(moe8_context_create(g_model, &cp, &ctx, NULL) == MOE8_OK);
    CHECK(moe8_sched_create(ctx, NULL, &s, NULL) == MOE8_OK);
    q.prompt = P1, q.n_prompt = 10, q.n_prompt_logits = 10, q.logprobs = 3;
    CHECK(moe8_sched_add(s, &q, &id, NULL) == MOE8_OK);
    while (moe8_sched_pending(s) > 0) {
        const moe8_event *ev;
        int32_t ne;
        CHECK(moe8_sched_step(s, &ev, &ne, NULL) == MOE8_OK);
        for (int32_t k = 0; k < ne; k++) {
            const moe8_event *e = &ev[k];
            double mx = -INFINITY, sum = 0;
            if (e->type != MOE8_EVENT_PROMPT_LOGITS) continue;
            seen++;
            if (e->pos == 9) {
                bad += !isnan(e->logprob) || e->n_top != 0;
                continue;
            }
            for (int t = 0; t < VOCAB; t++) mx = fmax(mx, e->logits[t]);
            for (int t = 0; t < VOCAB; t++) sum += exp((double)e->logits[t] - mx);
            bad += fabs(e->logprob - (e->logits[P1[e->pos + 1]] - mx - log(sum))) > 1e-4;
            bad += e->n_top != 3;
            for (int a = 0; a < e->n_top; a++) {
                int above = 0;
                for (int t = 0; t < VOCAB; t++) above += e->logits[t] > e->logits[e->top[a].token];
                bad += above != a || fabs(e->top[a].logprob - (e->logits[e->top[a].token] - mx - log(sum))) > 1e-4;
            }
        }
    }
    CHECKF(seen == 10 && bad == 0, "%d prompt-logits events, %d wrong", seen, bad);
    moe8_sched_free(s);
    moe8_context_free(ctx);
}

int main(void) {
    fx_opts o = fx_default_opts();
    const char *dir;
    const moe8_config *c;
    o.quant = 1;
    o.vocab = VOCAB;
    o.dense_layer = 1;
    dir = fx_test_model("logits_model", &o, 0);
    g_model = test_load_model(dir);
    c = moe8_model_config(g_model);
    for (int i = 0; i < c->n_eos_ids && g_n_eos < 8; i++) g_eos[g_n_eos++] = (int32_t)c->eos_token_ids[i];
    CHECK(g_n_eos > 0);
    test_processors();
    test_batch_invariance();
    test_bad();
    test_prompt_logprobs();
    moe8_model_free(g_model);
    return test_summary();
}
