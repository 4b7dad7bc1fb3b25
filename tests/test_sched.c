/*
 * test_sched.c — the step scheduler (moe8_sched_*) over the paged KV cache:
 * batch invariance (random add / step / cancel schedules against each
 * request run alone, bit for bit), chunked prefill and thread counts (with
 * each KV cache type), the prefix cache and its LRU eviction, preemption, stop strings across token
 * boundaries, log-probabilities against an independent double-precision
 * log-softmax of the CLI's --dump-logits, library defects (sampler
 * vocabulary, model freed before its context), 500 requests, bad requests.
 *
 * Model: a tiny W8A8 fixture (fixture_model.h) with a 2048-token vocabulary,
 * the first 2048 ids of the real Qwen3 tokenizer (copied into the folder),
 * so tokens have real text and stop strings can span token boundaries.
 */
#include <time.h>

#include "test.h"
#include "test_isa.h"
#include "fixture_model.h"

#define VOCAB 2048
#define NCTX 256
#define MAXG 64                  /* most tokens a request generates here */
#define MAXP 128                 /* longest prompt here */
#define MAXTEXT 8192

static const char *g_dir;
static moe8_model *g_model;
static moe8_tokenizer *g_tok;
static size_t g_block_bytes;

/* ---- contexts and schedulers -------------------------------------------------- */

typedef struct {
    int n_seq, n_threads, prefix_cache;
    int kv_blocks;               /* 0: the default pool */
    int max_batch, max_running;  /* scheduler; 0: defaults */
    int float_experts;
    moe8_dtype kv_type;
} cfg;

static cfg cfg_default(void) {
    cfg c = {1, 1, 1, 0, 0, 0, 0, moe8_context_params_default().kv_type};
    return c;
}

static moe8_context *new_ctx(moe8_model *m, const cfg *c) {
    moe8_context_params p = moe8_context_params_default();
    moe8_context *x = NULL;
    moe8_error e;
    p.n_ctx = NCTX;
    p.n_seq_max = c->n_seq;
    p.n_threads = c->n_threads;
    p.prefix_cache = c->prefix_cache;
    p.float_experts = c->float_experts;
    p.kv_type = c->kv_type;
    p.kv_bytes = (uint64_t)c->kv_blocks * moe8_model_kv_block_bytes(m, c->kv_type);
    if (moe8_context_create(m, &p, &x, &e) != MOE8_OK) {
        fprintf(stderr, "context: %s\n", e.message);
        exit(2);
    }
    return x;
}

static moe8_sched *new_sched(moe8_context *x, const cfg *c, const moe8_tokenizer *tok) {
    moe8_sched_params p = moe8_sched_params_default();
    moe8_sched *s = NULL;
    moe8_error e;
    p.max_batch_tokens = c->max_batch;
    p.max_running = c->max_running;
    p.tok = tok;
    if (moe8_sched_create(x, &p, &s, &e) != MOE8_OK) {
        fprintf(stderr, "scheduler: %s\n", e.message);
        exit(2);
    }
    return s;
}

/* ---- requests and what they produced -------------------------------------------- */

typedef struct {
    int32_t prompt[MAXP];
    int n_prompt;
    moe8_sampler_params sp;
    int max_tokens, logprobs, ignore_eos;
    int32_t stop_ids[2];
    int n_stop_ids;
    char stop_buf[4][16];        /* n_stop stop strings */
    int n_stop;
} spec;

typedef struct {
    int64_t id;
    int cancelled;               /* moe8_sched_cancel said OK */
    int n_tok;                   /* TOKEN events */
    int32_t tok[MAXG];
    float lp[MAXG];
    int32_t n_top[MAXG];
    moe8_logprob top[MAXG][MOE8_MAX_LOGPROBS];
    float logits0[VOCAB];        /* the first TOKEN event's logits (or FINISH's, max_tokens 0) */
    int has_logits0;             /* 1: from a TOKEN event, 2: from the FINISH */
    size_t cum[MAXG];            /* text released up to and including TOKEN event i */
    char text[MAXTEXT];          /* all text, TOKEN events then FINISH */
    size_t n_text;
    int n_finish, after_finish, bad_id;
    int bad_lp;                  /* TOKEN events whose log-probs miss the reference */
    moe8_finish finish;
    int32_t n_prompt, n_generated, n_cached;
    double ttft;
} result;

/* Steps whose events had a FINISH before a TOKEN (moe8.h: tokens, then finishes). */
static int g_order_bad;

/* stops[4] receives the stop string pointers (moe8_sched_add copies them). */
static moe8_request to_request(const spec *q, result *r, const char **stops) {
    moe8_request rq = moe8_request_default();
    for (int i = 0; i < q->n_stop; i++) stops[i] = q->stop_buf[i];
    rq.prompt = q->prompt;
    rq.n_prompt = q->n_prompt;
    rq.sampling = q->sp;
    rq.max_tokens = q->max_tokens;
    rq.stop_ids = q->stop_ids;
    rq.n_stop_ids = q->n_stop_ids;
    rq.stop = stops;
    rq.n_stop = q->n_stop;
    rq.logprobs = q->logprobs;
    rq.ignore_eos = q->ignore_eos;
    rq.user = r;
    return rq;
}

static void spec_init(spec *q) {
    memset(q, 0, sizeof *q);
    q->sp = moe8_sampler_params_default();
    q->logprobs = -1;
}

static void add_text(result *r, const char *t, size_t n) {
    if (r->n_text + n >= MAXTEXT) n = MAXTEXT - 1 - r->n_text;
    memcpy(r->text + r->n_text, t, n);
    r->n_text += n;
    r->text[r->n_text] = 0;
}

/* 1 when e's log-prob and alternatives match a double-precision log-softmax
 * of its logits (within 1e-6; alternatives by logit, ties to the lower id). */
static int logprobs_ok(const moe8_event *e) {
    double m = -INFINITY, sum = 0, lse;
    int prev = -1;
    for (int i = 0; i < VOCAB; i++) m = fmax(m, (double)e->logits[i]);
    for (int i = 0; i < VOCAB; i++) sum += exp((double)e->logits[i] - m);
    lse = m + log(sum);
    if (!(fabs((double)e->logprob - ((double)e->logits[e->token] - lse)) <= 1e-6)) return 0;
    for (int k = 0; k < e->n_top; k++) {
        int32_t t = e->top[k].token;
        float l = e->logits[t];
        if (t < 0 || t >= VOCAB || fabs((double)e->top[k].logprob - ((double)l - lse)) > 1e-6)
            return 0;
        if (prev >= 0 && (l > e->logits[prev] || (l == e->logits[prev] && t < prev))) return 0;
        for (int i = 0; i < VOCAB; i++) /* nothing better left out */
            if (e->logits[i] > l || (e->logits[i] == l && i < t)) {
                int in = 0;
                for (int j = 0; j < k; j++) in |= e->top[j].token == i;
                if (!in) return 0;
            }
        prev = t;
    }
    return 1;
}

/* Events of one step into the results they belong to (user). */
static void collect(const moe8_event *ev, int32_t n) {
    for (int32_t k = 1; k < n; k++)
        if (ev[k].type == MOE8_EVENT_TOKEN && ev[k - 1].type == MOE8_EVENT_FINISH) {
            g_order_bad++;
            break;
        }
    for (int32_t k = 0; k < n; k++) {
        const moe8_event *e = &ev[k];
        result *r = e->user;
        if (r->n_finish) {
            r->after_finish++;
            continue;
        }
        if (r->id && e->request != r->id) r->bad_id++;
        if (e->type == MOE8_EVENT_TOKEN) {
            int i = r->n_tok++;
            add_text(r, e->text, e->text_len);
            if (i >= MAXG) continue;
            r->tok[i] = e->token;
            r->lp[i] = e->logprob;
            r->n_top[i] = e->n_top;
            if (e->n_top > 0 && e->n_top <= MOE8_MAX_LOGPROBS)
                memcpy(r->top[i], e->top, (size_t)e->n_top * sizeof *e->top);
            r->cum[i] = r->n_text;
            if (e->n_top > MOE8_MAX_LOGPROBS || (!isnan(e->logprob) && !logprobs_ok(e))) r->bad_lp++;
            if (i == 0 && e->logits) {
                memcpy(r->logits0, e->logits, sizeof r->logits0);
                r->has_logits0 = 1;
            }
        } else {
            r->n_finish++;
            r->finish = e->finish;
            r->n_prompt = e->n_prompt;
            r->n_generated = e->n_generated;
            r->n_cached = e->n_cached;
            r->ttft = e->ttft_s;
            add_text(r, e->text, e->text_len);
            if (r->n_tok == 0 && e->logits) {
                memcpy(r->logits0, e->logits, sizeof r->logits0);
                r->has_logits0 = 2;
            }
        }
    }
}

/* Step until nothing is pending (at most max_steps). */
static void drain(moe8_sched *s, int max_steps) {
    for (int i = 0; moe8_sched_pending(s) > 0 && i < max_steps; i++) {
        const moe8_event *ev;
        int32_t n;
        moe8_error e;
        moe8_status st = moe8_sched_step(s, &ev, &n, &e);
        CHECKF(st == MOE8_OK, "step: %s", e.message);
        collect(ev, n);
    }
    CHECKF(moe8_sched_pending(s) == 0, "%d requests still pending", moe8_sched_pending(s));
}

static int64_t add(moe8_sched *s, const spec *q, result *r) {
    const char *stops[4];
    moe8_request rq = to_request(q, r, stops);
    moe8_error e;
    int64_t id = -1;
    CHECKF(moe8_sched_add(s, &rq, &id, &e) == MOE8_OK && id > 0, "add: %s", e.message);
    r->id = id;
    return id;
}

/* Bit for bit: tokens, log-probs, alternatives, text, finish. */
static int same_result(const result *a, const result *b) {
    int n = a->n_tok < MAXG ? a->n_tok : MAXG;
    return a->n_tok == b->n_tok && !memcmp(a->tok, b->tok, (size_t)n * sizeof a->tok[0]) &&
           !memcmp(a->lp, b->lp, (size_t)n * sizeof a->lp[0]) &&
           !memcmp(a->n_top, b->n_top, (size_t)n * sizeof a->n_top[0]) &&
           !memcmp(a->top, b->top, (size_t)n * sizeof a->top[0]) && a->n_text == b->n_text &&
           !memcmp(a->text, b->text, a->n_text) && a->finish == b->finish &&
           a->n_generated == b->n_generated && a->n_prompt == b->n_prompt &&
           a->has_logits0 == b->has_logits0 &&
           (!a->has_logits0 || !memcmp(a->logits0, b->logits0, sizeof a->logits0));
}

static void check_same(const result *got, const result *want, const char *what, int i) {
    CHECKF(same_result(got, want), "%s request %d: %d tokens (finish %d, text '%s') vs alone %d "
           "(finish %d, text '%s')", what, i, got->n_tok, got->finish, got->text, want->n_tok,
           want->finish, want->text);
}

/* Exactly one FINISH, last, events with the right id. */
static void check_events(const result *r, const char *what, int i) {
    CHECKF(r->n_finish == 1 && r->after_finish == 0 && r->bad_id == 0,
           "%s request %d: %d finish events, %d events after it, %d with another id", what, i,
           r->n_finish, r->after_finish, r->bad_id);
    CHECKF(r->n_generated == r->n_tok, "%s request %d: n_generated %d, %d token events", what, i,
           r->n_generated, r->n_tok);
    CHECKF(r->bad_lp == 0, "%s request %d: %d tokens with wrong log-probs", what, i, r->bad_lp);
    CHECKF(r->n_tok > 0 ? r->ttft >= 0 && r->ttft < 600 : r->ttft == -1,
           "%s request %d: ttft %g after %d tokens", what, i, r->ttft, r->n_tok);
}

/* The text against the detokenized tokens: all of it, or everything before
 * the first occurrence of a stop string (then it ended there, STOP). */
static void check_text(const spec *q, const result *r, const char *what, int i) {
    static char full[MAXTEXT];
    size_t n = 0, first = (size_t)-1;
    int ok = r->n_tok <= MAXG &&
             moe8_detokenize(g_tok, r->tok, (size_t)r->n_tok, 0, full, sizeof full, &n, NULL) == MOE8_OK;
    for (int k = 0; ok && k < q->n_stop; k++) {
        size_t m = strlen(q->stop_buf[k]);
        for (size_t at = 0; at + m <= n && at < first; at++)
            if (!memcmp(full + at, q->stop_buf[k], m)) first = at;
    }
    if (ok && first != (size_t)-1) ok = r->finish == MOE8_FINISH_STOP && r->n_text == first &&
                                        !memcmp(r->text, full, first);
    else if (ok) ok = r->n_text == n && !memcmp(r->text, full, n);
    CHECKF(ok, "%s request %d: text '%s' (finish %d), tokens say '%s'", what, i, r->text, r->finish,
           full);
}

static void check_pool_empty(moe8_sched *s, const char *what) {
    moe8_sched_stats st;
    moe8_sched_get_stats(s, &st);
    CHECKF(st.kv.n_used == 0 && st.kv.n_used + st.kv.n_cached + st.kv.n_free == st.kv.n_blocks &&
               st.n_running == 0 && st.n_waiting == 0,
           "%s: pool used %d cached %d free %d of %d, %d running, %d waiting", what, st.kv.n_used,
           st.kv.n_cached, st.kv.n_free, st.kv.n_blocks, st.n_running, st.n_waiting);
}

/* The request alone in a fresh context (one sequence, one thread, no prefix
 * cache) and scheduler. */
static void run_alone_cfg(cfg c, const spec *q, result *r) {
    c.prefix_cache = 0;
    moe8_context *x = new_ctx(g_model, &c);
    moe8_sched *s = new_sched(x, &c, g_tok);
    memset(r, 0, sizeof *r);
    add(s, q, r);
    drain(s, 1000);
    check_events(r, "alone", 0);
    check_text(q, r, "alone", 0);
    moe8_sched_free(s);
    moe8_context_free(x);
}

static void run_alone_fx(const spec *q, result *r, int float_experts) {
    cfg c = cfg_default();
    c.float_experts = float_experts;
    run_alone_cfg(c, q, r);
}

static void run_alone(const spec *q, result *r) { run_alone_fx(q, r, 0); }

/* All specs in one scheduler of config c, added at once; results in out. */
static void run_together(const cfg *c, const spec *q, int n, result *out, moe8_sched_stats *st) {
    moe8_context *x = new_ctx(g_model, c);
    moe8_sched *s = new_sched(x, c, g_tok);
    for (int i = 0; i < n; i++) {
        memset(&out[i], 0, sizeof out[i]);
        add(s, &q[i], &out[i]);
    }
    drain(s, 20000);
    for (int i = 0; i < n; i++) check_events(&out[i], "together", i);
    check_pool_empty(s, "together");
    if (st) moe8_sched_get_stats(s, st);
    moe8_sched_free(s);
    moe8_context_free(x);
}

static void random_tokens(test_rng *g, int32_t *t, int n) {
    for (int i = 0; i < n; i++) t[i] = (int32_t)(test_rng_u64(g) % VOCAB);
}

static int rnd(test_rng *g, int n) { return (int)(test_rng_u64(g) % (uint64_t)n); }

/* ---- 1. random interleavings --------------------------------------------------------- */

/* An ASCII substring of r's text (1..6 bytes, no NUL) into buf; 0 if none. */
static int pick_substring(test_rng *g, const result *r, char *buf) {
    for (int tries = 0; tries < 20 && r->n_text >= 1; tries++) {
        size_t at = (size_t)rnd(g, (int)r->n_text), len = 1 + (size_t)rnd(g, 6), k;
        if (at + len > r->n_text) len = r->n_text - at;
        for (k = 0; k < len; k++)
            if ((unsigned char)r->text[at + k] >= 0x80 || !r->text[at + k]) break;
        if (k < len) continue;
        memcpy(buf, r->text + at, len);
        buf[len] = 0;
        return 1;
    }
    return 0;
}

static void random_spec(test_rng *g, spec *q, int32_t base[3][100], result *scratch) {
    spec_init(q);
    /* prompt: a piece of one of three shared prefixes (or none), then its own tail */
    int shared = rnd(g, 4) < 3 ? 1 + rnd(g, 100) : 0, tail = rnd(g, 4) ? rnd(g, 21) : 0;
    if (shared + tail == 0) tail = 1 + rnd(g, 100);
    if (shared + tail > 100) tail = 100 - shared;
    if (shared) memcpy(q->prompt, base[rnd(g, 3)], (size_t)shared * sizeof(int32_t));
    random_tokens(g, q->prompt + shared, tail);
    q->n_prompt = shared + tail;
    if (rnd(g, 2)) {
        q->sp.temperature = 0.5f + (float)test_rng_uniform(g);
        q->sp.top_k = rnd(g, 3) ? rnd(g, 60) : 0;
        q->sp.top_p = rnd(g, 2) ? 0.5f + 0.5f * (float)test_rng_uniform(g) : 1.0f;
        q->sp.min_p = rnd(g, 3) ? 0.0f : 0.05f;
        q->sp.seed = test_rng_u64(g);
    }
    q->max_tokens = rnd(g, 8) ? 1 + rnd(g, 24) : 0;
    q->logprobs = rnd(g, 3) ? rnd(g, 22) - 1 : -1;
    q->ignore_eos = rnd(g, 2);
    /* stop ids and strings taken from what it generates without them, so they fire */
    if (q->max_tokens > 0 && rnd(g, 2)) {
        run_alone(q, scratch);
        if (scratch->n_tok > 0 && rnd(g, 3) == 0) q->stop_ids[q->n_stop_ids++] = scratch->tok[rnd(g, scratch->n_tok)];
        if (rnd(g, 2) && pick_substring(g, scratch, q->stop_buf[q->n_stop])) q->n_stop++;
        if (rnd(g, 3) == 0 && pick_substring(g, scratch, q->stop_buf[q->n_stop])) q->n_stop++;
        if (rnd(g, 4) == 0) snprintf(q->stop_buf[q->n_stop++], 16, "zq\x7fzq");
    }
}

/* What the random schedules exercised, over all seeds (printed). */
static struct { int64_t req, cancelled, stop, length, hits, preempted, steps; } g_cov;

static void test_random_one(uint64_t seed) {
    test_rng g = {seed * 0x9E3779B97F4A7C15ULL + 12345};
    int32_t base[3][100];
    const int n_req = 6 + rnd(&g, 8);
    static const int batches[5] = {1, 7, 16, 64, 0};
    spec *q = calloc((size_t)n_req, sizeof *q);
    result *mix = calloc((size_t)n_req, sizeof *mix), *ref = calloc((size_t)n_req, sizeof *ref);
    result *scratch = calloc(1, sizeof *scratch);
    cfg c = cfg_default();
    char what[64];
    int next = 0, steps = 0;
    int64_t hits = 0, queries_min = 0, queries_max = 0;
    moe8_sched_stats st;
    c.n_seq = 2 + rnd(&g, 5);
    c.n_threads = 1 + rnd(&g, 3);
    c.prefix_cache = rnd(&g, 5) != 0;
    if (rnd(&g, 2)) { /* a small pool (a request needs up to 8 blocks): preempts and evicts */
        c.kv_blocks = 8 + rnd(&g, 3);
        c.n_seq = 4 + rnd(&g, 3);
    }
    c.max_batch = batches[rnd(&g, 5)];
    for (int b = 0; b < 3; b++) random_tokens(&g, base[b], 100);
    for (int i = 0; i < n_req; i++) random_spec(&g, &q[i], base, scratch);
    for (int i = 0; i < n_req; i++) run_alone(&q[i], &ref[i]);
    snprintf(what, sizeof what, "seed %llu", (unsigned long long)seed);
    moe8_context *x = new_ctx(g_model, &c);
    moe8_sched *s = new_sched(x, &c, g_tok);
    while ((next < n_req || moe8_sched_pending(s) > 0) && steps < 20000) {
        int a = rnd(&g, 10);
        if (next < n_req && a < 4) {
            add(s, &q[next], &mix[next]);
            if (rnd(&g, 15) == 0) { /* cancelled before it ever runs */
                CHECK(moe8_sched_cancel(s, mix[next].id) == MOE8_OK);
                mix[next].cancelled = 1;
            }
            next++;
        } else if (next > 0 && a == 4 && rnd(&g, 8) == 0) {
            int j = rnd(&g, next);
            moe8_status cs = moe8_sched_cancel(s, mix[j].id);
            if (cs == MOE8_OK) {
                CHECKF(!mix[j].n_finish, "%s: cancel of finished request %d said OK", what, j);
                mix[j].cancelled = 1;
            } else {
                CHECKF(cs == MOE8_ERR_NOT_FOUND && mix[j].n_finish,
                       "%s: cancel of pending request %d: %d", what, j, cs);
            }
        } else {
            const moe8_event *ev;
            int32_t n;
            moe8_error e;
            CHECKF(moe8_sched_step(s, &ev, &n, &e) == MOE8_OK, "%s: step: %s", what, e.message);
            collect(ev, n);
            steps++;
        }
    }
    CHECKF(moe8_sched_pending(s) == 0, "%s: %d pending after %d steps", what,
           moe8_sched_pending(s), steps);
    for (int i = 0; i < n_req; i++) {
        int lp_ok = 1;
        check_events(&mix[i], what, i);
        check_text(&q[i], &mix[i], what, i);
        for (int k = 0; k < mix[i].n_tok && k < MAXG; k++)
            lp_ok &= isnan(mix[i].lp[k]) == (q[i].logprobs < 0) &&
                     mix[i].n_top[k] == (q[i].logprobs > 0 ? q[i].logprobs : 0);
        CHECKF(lp_ok && mix[i].n_prompt == q[i].n_prompt, "%s request %d: log-probs asked %d, "
               "n_prompt %d of %d", what, i, q[i].logprobs, mix[i].n_prompt, q[i].n_prompt);
        hits += mix[i].n_cached;
        queries_max += q[i].n_prompt;
        if (!mix[i].cancelled) queries_min += q[i].n_prompt;
        if (mix[i].cancelled) {
            int n = mix[i].n_tok;
            CHECKF(mix[i].finish == MOE8_FINISH_CANCELLED, "%s request %d: finish %d, cancelled",
                   what, i, mix[i].finish);
            CHECKF(n <= ref[i].n_tok && !memcmp(mix[i].tok, ref[i].tok, (size_t)n * sizeof(int32_t)) &&
                       !memcmp(mix[i].lp, ref[i].lp, (size_t)n * sizeof(float)),
                   "%s request %d: cancelled after %d tokens that are not the alone run's", what, i, n);
        } else {
            check_same(&mix[i], &ref[i], what, i);
        }
    }
    check_pool_empty(s, what);
    moe8_sched_get_stats(s, &st);
    g_cov.req += n_req;
    g_cov.hits += hits;
    g_cov.preempted += st.n_preempted;
    g_cov.steps += steps;
    for (int i = 0; i < n_req; i++) {
        g_cov.cancelled += mix[i].finish == MOE8_FINISH_CANCELLED;
        g_cov.stop += mix[i].finish == MOE8_FINISH_STOP;
        g_cov.length += mix[i].finish == MOE8_FINISH_LENGTH;
    }
    {
        int64_t gen = 0, prompt = 0;
        for (int i = 0; i < n_req; i++) {
            gen += mix[i].n_tok;
            prompt += q[i].n_prompt;
            if (q[i].max_tokens == 0 && !mix[i].cancelled)
                CHECKF(mix[i].has_logits0 == 2, "%s request %d: max_tokens 0 without the "
                       "prompt's logits", what, i);
        }
        CHECKF(st.generated_tokens == gen && st.prompt_tokens == prompt && st.n_steps <= steps &&
                   st.n_steps > 0,
               "%s: stats %lld generated (%lld), %lld prompt (%lld), %lld steps (%d)", what,
               (long long)st.generated_tokens, (long long)gen, (long long)st.prompt_tokens,
               (long long)prompt, (long long)st.n_steps, steps);
    }
    CHECKF(st.prefix_hits == hits && st.prefix_queries >= queries_min &&
               st.prefix_queries <= queries_max && (c.prefix_cache || hits == 0),
           "%s: prefix stats %lld/%lld, events %lld, queries in [%lld, %lld]", what,
           (long long)st.prefix_hits, (long long)st.prefix_queries, (long long)hits,
           (long long)queries_min, (long long)queries_max);
    moe8_sched_free(s);
    moe8_context_free(x);
    free(q);
    free(mix);
    free(ref);
    free(scratch);
}

static void test_random(void) {
    for (uint64_t seed = 1; seed <= 40; seed++) test_random_one(seed);
    printf("random: %lld requests, %lld steps: %lld cancelled, %lld stopped, %lld at length; "
           "%lld cached prompt tokens, %lld preemptions\n", (long long)g_cov.req,
           (long long)g_cov.steps, (long long)g_cov.cancelled, (long long)g_cov.stop,
           (long long)g_cov.length, (long long)g_cov.hits, (long long)g_cov.preempted);
    CHECK(g_cov.cancelled > 0 && g_cov.stop > 0 && g_cov.hits > 0 && g_cov.preempted > 0);
    CHECKF(g_order_bad == 0, "%d steps gave a FINISH event before a TOKEN event", g_order_bad);
}

/* ---- 2. chunked prefill, thread counts ------------------------------------------------- */

/* Six requests: lengths around the block size, shared prefixes, greedy and
 * sampled, log-probs. */
static int fixed_specs(spec *q) {
    static const int len[6] = {1, 15, 16, 17, 63, 100};
    test_rng g = {777};
    int32_t base[100];
    random_tokens(&g, base, 100);
    for (int i = 0; i < 6; i++) {
        spec_init(&q[i]);
        if (i >= 3) memcpy(q[i].prompt, base, (size_t)len[i] * sizeof(int32_t));
        else random_tokens(&g, q[i].prompt, len[i]);
        q[i].n_prompt = len[i];
        q[i].max_tokens = 12 + i;
        q[i].ignore_eos = 1;
        q[i].logprobs = 3 * i;
        if (i % 2) {
            q[i].sp.temperature = 0.8f;
            q[i].sp.top_k = 40;
            q[i].sp.top_p = 0.9f;
            q[i].sp.seed = 1000 + (uint64_t)i;
        }
    }
    return 6;
}

static void test_chunking_threads(void) {
    spec q[6];
    result *ref = calloc(6, sizeof *ref), *got = calloc(6, sizeof *got);
    result *ref_fx = calloc(6, sizeof *ref_fx);
    static const struct { int max_batch, n_threads, n_seq, float_experts; } v[] = {
        {1, 1, 4, 0}, {7, 1, 4, 0}, {64, 1, 4, 0}, {0, 1, 4, 0}, {0, 2, 4, 0}, {0, 3, 4, 0},
        {7, 3, 3, 0}, {64, 2, 6, 0}, {0, 5, 4, 0}, {7, 1, 4, 1}, {0, 3, 6, 1},
    };
    int n = fixed_specs(q);
    for (int i = 0; i < n; i++) {
        run_alone(&q[i], &ref[i]);
        run_alone_fx(&q[i], &ref_fx[i], 1);
    }
    for (size_t k = 0; k < sizeof v / sizeof v[0]; k++) {
        cfg c = cfg_default();
        char what[80];
        c.max_batch = v[k].max_batch;
        c.n_threads = v[k].n_threads;
        c.n_seq = v[k].n_seq;
        c.float_experts = v[k].float_experts;
        snprintf(what, sizeof what, "max_batch_tokens %d, %d threads%s", c.max_batch, c.n_threads,
                 c.float_experts ? ", float experts" : "");
        run_together(&c, q, n, got, NULL);
        for (int i = 0; i < n; i++) {
            check_same(&got[i], c.float_experts ? &ref_fx[i] : &ref[i], what, i);
            CHECK(got[i].finish == MOE8_FINISH_LENGTH && got[i].n_tok == q[i].max_tokens);
        }
    }
    free(ref);
    free(ref_fx);
    free(got);
}

/* Chunking, threads and a short pool with F32 and BF16 caches (F16, the
 * default, is everywhere else), against each request alone with that cache. */
static void test_kv_types(void) {
    static const moe8_dtype types[2] = {MOE8_DT_F32, MOE8_DT_BF16};
    static const struct { int max_batch, n_threads, n_seq, kv_blocks; } v[] = {
        {1, 1, 4, 0}, {7, 3, 3, 0}, {0, 2, 6, 0}, {16, 2, 6, 14},
    };
    spec q[6];
    result *ref = calloc(6, sizeof *ref), *got = calloc(6, sizeof *got);
    const int n = fixed_specs(q);
    for (int k = 0; k < 2; k++) {
        cfg a = cfg_default();
        a.kv_type = types[k];
        for (int i = 0; i < n; i++) run_alone_cfg(a, &q[i], &ref[i]);
        for (size_t j = 0; j < sizeof v / sizeof v[0]; j++) {
            cfg c = cfg_default();
            char what[96];
            c.kv_type = types[k];
            c.max_batch = v[j].max_batch;
            c.n_threads = v[j].n_threads;
            c.n_seq = v[j].n_seq;
            c.kv_blocks = v[j].kv_blocks;
            snprintf(what, sizeof what, "%s KV, max_batch_tokens %d, %d threads, %d blocks",
                     moe8_dtype_name(types[k]), c.max_batch, c.n_threads, c.kv_blocks);
            run_together(&c, q, n, got, NULL);
            for (int i = 0; i < n; i++) check_same(&got[i], &ref[i], what, i);
        }
    }
    free(ref);
    free(got);
}

/* ---- 3. prefix cache ------------------------------------------------------------------- */

static void run_one(moe8_sched *s, const spec *q, result *r) {
    memset(r, 0, sizeof *r);
    add(s, q, r);
    drain(s, 2000);
    check_events(r, "one", 0);
}

static void test_prefix_cache(void) {
    cfg c = cfg_default();
    spec a, b, d;
    result *ra = calloc(1, sizeof *ra), *rb = calloc(1, sizeof *rb), *rd = calloc(1, sizeof *rd);
    result *alone = calloc(1, sizeof *alone), *off = calloc(1, sizeof *off);
    test_rng g = {4242};
    moe8_sched_stats st;
    int computed, expect;
    spec_init(&a);
    random_tokens(&g, a.prompt, 105);
    a.n_prompt = 105;
    a.max_tokens = 20;
    a.ignore_eos = 1;
    a.logprobs = 5;
    b = a; /* same 100-token prefix, its own tail, sampled */
    random_tokens(&g, b.prompt + 100, 9);
    b.n_prompt = 109;
    b.sp.temperature = 1.0f;
    b.sp.seed = 9;

    c.n_seq = 2;
    moe8_context *x = new_ctx(g_model, &c);
    moe8_sched *s = new_sched(x, &c, g_tok);
    run_one(s, &a, ra);
    CHECKF(ra->n_cached == 0, "first request: %d cached tokens", ra->n_cached);
    run_one(s, &b, rb);
    CHECKF(rb->n_cached >= 96 && rb->n_cached <= 100, "second request: %d cached tokens",
           rb->n_cached);
    /* the same with prefix_cache = 0, and alone */
    {
        cfg c0 = c;
        c0.prefix_cache = 0;
        moe8_context *x0 = new_ctx(g_model, &c0);
        moe8_sched *s0 = new_sched(x0, &c0, g_tok);
        run_one(s0, &a, off);
        CHECK(off->n_cached == 0);
        check_same(ra, off, "prefix cache a", 0);
        run_one(s0, &b, off);
        CHECKF(off->n_cached == 0, "prefix_cache 0: %d cached", off->n_cached);
        check_same(rb, off, "prefix cache b", 0);
        moe8_sched_get_stats(s0, &st);
        CHECK(st.prefix_hits == 0 && st.prefix_queries == 105 + 109);
        moe8_sched_free(s0);
        moe8_context_free(x0);
    }
    run_alone(&b, alone);
    check_same(rb, alone, "prefix cache b alone", 0);
    /* a continuation: a's prompt, its output and more hits every full block a computed */
    spec_init(&d);
    memcpy(d.prompt, a.prompt, 105 * sizeof(int32_t));
    memcpy(d.prompt + 105, ra->tok, 20 * sizeof(int32_t));
    random_tokens(&g, d.prompt + 125, 3);
    d.n_prompt = 128;
    d.max_tokens = 4;
    d.logprobs = 2;
    run_one(s, &d, rd);
    computed = 105 + 20 - 1; /* a's last token was never fed */
    expect = computed / 16 * 16;
    if (expect > (d.n_prompt - 1) / 16 * 16) expect = (d.n_prompt - 1) / 16 * 16;
    CHECKF(rd->n_cached == expect, "continuation: %d cached, expected %d", rd->n_cached, expect);
    run_alone(&d, alone);
    check_same(rd, alone, "continuation", 0);
    moe8_sched_get_stats(s, &st);
    CHECKF(st.prefix_queries == 105 + 109 + 128 &&
               st.prefix_hits == (int64_t)ra->n_cached + rb->n_cached + rd->n_cached,
           "stats: %lld queries, %lld hits", (long long)st.prefix_queries, (long long)st.prefix_hits);
    check_pool_empty(s, "prefix cache");
    CHECK(st.kv.n_cached > 0);
    moe8_sched_free(s);
    moe8_context_free(x);
    free(ra);
    free(rb);
    free(rd);
    free(alone);
    free(off);
}

/* Eight blocks: three 2-block prefixes fill the cache, one is used again,
 * a 4-block request evicts the two least recently used blocks (the first
 * prefix's); the reused prefix is still hit, the first one no longer. */
static void test_lru(void) {
    cfg c = cfg_default();
    spec p[4], big;
    result *r = calloc(1, sizeof *r), *alone = calloc(1, sizeof *alone);
    test_rng g = {99};
    int64_t hits = 0, queries = 0;
    moe8_sched_stats st;
    moe8_kv_stats kv;
    for (int i = 0; i < 4; i++) {
        spec_init(&p[i]);
        random_tokens(&g, p[i].prompt, 33); /* 2 full blocks + 1 token */
        p[i].n_prompt = 33;
        p[i].max_tokens = 1;
        p[i].ignore_eos = 1;
    }
    spec_init(&big);
    random_tokens(&g, big.prompt, 50); /* 4 blocks, 3 of them full */
    big.n_prompt = 50;
    big.max_tokens = 1;
    big.ignore_eos = 1;
    c.kv_blocks = 8;
    moe8_context *x = new_ctx(g_model, &c);
    moe8_sched *s = new_sched(x, &c, g_tok);
#define RUN(q, want_cached, label)                                                              \
    do {                                                                                        \
        run_one(s, &(q), r);                                                                    \
        CHECKF(r->n_cached == (want_cached), "lru %s: %d cached, expected %d", label,            \
               r->n_cached, (want_cached));                                                     \
        hits += r->n_cached;                                                                    \
        queries += (q).n_prompt;                                                                \
        run_alone(&(q), alone);                                                                 \
        check_same(r, alone, "lru", 0);                                                         \
    } while (0)
    RUN(p[0], 0, "x1");
    RUN(p[1], 0, "x2");
    RUN(p[2], 0, "x3");
    moe8_context_kv_stats(x, &kv);
    CHECKF(kv.n_cached == 6 && kv.n_free == 2 && kv.n_used == 0, "after 3 prefixes: %d cached, "
           "%d free, %d used", kv.n_cached, kv.n_free, kv.n_used);
    RUN(p[1], 32, "x2 again");
    RUN(big, 0, "big");       /* takes the 2 free blocks and evicts x1's two */
    RUN(p[1], 32, "x2 after eviction");
    RUN(p[0], 0, "x1 after eviction");
    RUN(p[3], 0, "x4");
    moe8_sched_get_stats(s, &st);
    CHECKF(st.prefix_hits == hits && st.prefix_queries == queries,
           "lru stats: %lld hits (events %lld), %lld queries (%lld)", (long long)st.prefix_hits,
           (long long)hits, (long long)st.prefix_queries, (long long)queries);
    check_pool_empty(s, "lru");
#undef RUN
    moe8_sched_free(s);
    moe8_context_free(x);
    free(r);
    free(alone);
}

/* A registered block rewritten through the raw API (truncate into it,
 * decode other tokens) is never handed out for its old contents. */
static void test_rewritten_block(void) {
    cfg c = cfg_default();
    spec a, b;
    result *r = calloc(1, sizeof *r), *alone = calloc(1, sizeof *alone);
    test_rng g = {6060};
    int32_t pos[32], seq[32] = {0};
    moe8_kv_stats kv;
    spec_init(&a);
    random_tokens(&g, a.prompt, 33);
    a.n_prompt = 33;
    a.max_tokens = 6;
    a.ignore_eos = 1;
    a.logprobs = 3;
    b = a;
    random_tokens(&g, b.prompt + 20, 13);
    for (int i = 0; i < 32; i++) pos[i] = i;
    moe8_context *x = new_ctx(g_model, &c);
    {
        moe8_batch pa = {32, a.prompt, pos, seq, NULL}, pb = {12, b.prompt + 20, pos + 20, seq, NULL};
        CHECK(moe8_decode(x, &pa, NULL) == MOE8_OK);
        CHECK(moe8_context_seq_truncate(x, 0, 20, NULL) == MOE8_OK);
        CHECK(moe8_decode(x, &pb, NULL) == MOE8_OK);
        CHECK(moe8_context_seq_truncate(x, 0, 0, NULL) == MOE8_OK);
    }
    moe8_context_kv_stats(x, &kv);
    CHECKF(kv.n_used == 0 && kv.n_cached == 2, "after raw decodes: %d used, %d cached", kv.n_used,
           kv.n_cached);
    moe8_sched *s = new_sched(x, &c, g_tok);
    run_one(s, &a, r);
    CHECKF(r->n_cached == 16, "old contents: %d cached tokens, expected 16", r->n_cached);
    run_alone(&a, alone);
    check_same(r, alone, "rewritten block, old prompt", 0);
    run_one(s, &b, r);
    CHECKF(r->n_cached == 32, "new contents: %d cached tokens, expected 32", r->n_cached);
    run_alone(&b, alone);
    check_same(r, alone, "rewritten block, new prompt", 0);
    check_pool_empty(s, "rewritten block");
    moe8_sched_free(s);
    moe8_context_free(x);
    free(r);
    free(alone);
}

/* moe8_sched_free with requests waiting and running gives their blocks
 * back; a new scheduler on the context gives the same outputs. */
static void test_free_pending(void) {
    spec q[6];
    result *r = calloc(6, sizeof *r), *again = calloc(6, sizeof *again);
    cfg c = cfg_default();
    moe8_kv_stats kv;
    int n = fixed_specs(q);
    c.n_seq = 3;
    c.max_batch = 16;
    moe8_context *x = new_ctx(g_model, &c);
    moe8_sched *s = new_sched(x, &c, g_tok);
    for (int i = 0; i < n; i++) add(s, &q[i], &r[i]);
    for (int k = 0; k < 5; k++) {
        const moe8_event *ev;
        int32_t n_ev;
        CHECK(moe8_sched_step(s, &ev, &n_ev, NULL) == MOE8_OK);
        collect(ev, n_ev);
    }
    {
        moe8_sched_stats st;
        moe8_sched_get_stats(s, &st);
        CHECKF(moe8_sched_pending(s) == n && st.n_running == 3 && st.n_waiting == 3 &&
                   st.kv.n_used > 0, "before free: %d pending, %d running, %d waiting, %d blocks",
               moe8_sched_pending(s), st.n_running, st.n_waiting, st.kv.n_used);
    }
    moe8_sched_free(s);
    moe8_context_kv_stats(x, &kv);
    CHECKF(kv.n_used == 0 && kv.n_used + kv.n_cached + kv.n_free == kv.n_blocks,
           "after freeing a busy scheduler: %d used, %d cached, %d free of %d", kv.n_used,
           kv.n_cached, kv.n_free, kv.n_blocks);
    for (int i = 0; i < 3; i++) CHECK(moe8_context_seq_len(x, i) == 0);
    s = new_sched(x, &c, g_tok);
    for (int i = 0; i < n; i++) add(s, &q[i], &again[i]);
    drain(s, 5000);
    for (int i = 0; i < n; i++) {
        check_events(&again[i], "after free", i);
        run_alone(&q[i], &r[i]);
        check_same(&again[i], &r[i], "after free", i);
    }
    moe8_sched_free(s);
    moe8_context_free(x);
    free(r);
    free(again);
}

/* ---- 4. preemption ----------------------------------------------------------------------- */

static void test_preemption(void) {
    spec q[5];
    result *big = calloc(5, sizeof *big), *small = calloc(5, sizeof *small);
    result *alone = calloc(1, sizeof *alone);
    test_rng g = {31337};
    moe8_sched_stats st;
    for (int i = 0; i < 5; i++) {
        spec_init(&q[i]);
        q[i].n_prompt = 20 + 5 * i;
        random_tokens(&g, q[i].prompt, q[i].n_prompt);
        if (i >= 3) memcpy(q[i].prompt, q[0].prompt, 20 * sizeof(int32_t)); /* shared blocks */
        q[i].max_tokens = MAXG;
        q[i].ignore_eos = 1;
        q[i].logprobs = i;
        if (i % 2) {
            q[i].sp.temperature = 1.1f;
            q[i].sp.top_p = 0.95f;
            q[i].sp.seed = 5 + (uint64_t)i;
        }
    }
    for (int pc = 0; pc < 2; pc++) {
        cfg c = cfg_default();
        c.n_seq = 5;
        c.prefix_cache = pc;
        run_together(&c, q, 5, big, &st);
        CHECK(st.n_preempted == 0);
        c.kv_blocks = 8; /* each needs up to 7 */
        c.max_batch = pc ? 16 : 0;
        run_together(&c, q, 5, small, &st);
        CHECKF(st.n_preempted > 0, "small pool: %lld preemptions", (long long)st.n_preempted);
        for (int i = 0; i < 5; i++) {
            check_same(&small[i], &big[i], pc ? "preemption (prefix cache)" : "preemption", i);
            CHECK(small[i].finish == MOE8_FINISH_LENGTH && small[i].n_tok == MAXG);
        }
    }
    for (int i = 0; i < 5; i++) {
        run_alone(&q[i], alone);
        check_same(&big[i], alone, "preemption alone", i);
    }
    free(big);
    free(small);
    free(alone);
}

/* ---- 5. stop strings -------------------------------------------------------------------- */

/* What a scheduler must have released after each token, from the plain
 * text of each token (base) and the stop strings: everything before the
 * first match, else all but the longest tail that is a proper prefix of a
 * stop string. */
static size_t expect_release(const char *text, size_t n, const char *const *stop, int n_stop,
                             int *matched) {
    size_t best = (size_t)-1, keep = 0;
    for (int i = 0; i < n_stop; i++) {
        size_t m = strlen(stop[i]);
        for (size_t at = 0; at + m <= n; at++)
            if (!memcmp(text + at, stop[i], m)) {
                if (at < best) best = at;
                break;
            }
    }
    *matched = best != (size_t)-1;
    if (*matched) return best;
    for (int i = 0; i < n_stop; i++) {
        size_t m = strlen(stop[i]);
        for (size_t k = 1; k < m && k <= n; k++)
            if (!memcmp(text + n - k, stop[i], k) && k > keep) keep = k;
    }
    return n - keep;
}

/* Run q with the stop strings `stop` and check every event against the
 * plain run `base` (the same request without them). */
static void check_stop_run(const spec *q0, const result *base, const char *const *stop, int n_stop,
                           const char *label) {
    spec q = *q0;
    result *r = calloc(1, sizeof *r), *alone = calloc(1, sizeof *alone);
    int matched = 0, k, ok = 1;
    size_t rel = 0;
    for (int i = 0; i < n_stop; i++) snprintf(q.stop_buf[i], 16, "%s", stop[i]);
    q.n_stop = n_stop;
    run_alone(&q, r);
    for (k = 0; k < base->n_tok && !matched; k++) {
        rel = expect_release(base->text, base->cum[k], stop, n_stop, &matched);
        if (k < r->n_tok) ok &= r->cum[k] == rel && r->tok[k] == base->tok[k];
    }
    /* some text was held back at a token boundary inside the (partial) match */
    {
        int held = 0;
        for (int i = 0; i < r->n_tok && i < k && i < MAXG; i++) held += r->cum[i] < base->cum[i];
        CHECKF(held > 0, "%s: no text held back", label);
    }
    /* k tokens: the last completed the match (or all of base's) */
    CHECKF(ok && r->n_tok == k, "%s: %d tokens (expected %d), releases differ %d", label, r->n_tok,
           k, !ok);
    if (matched) {
        CHECKF(r->finish == MOE8_FINISH_STOP && r->n_text == rel &&
                   !memcmp(r->text, base->text, rel),
               "%s: finish %d, text '%s' (%zu bytes), expected %zu bytes of '%s'", label,
               r->finish, r->text, r->n_text, rel, base->text);
        /* never a byte of the match released before the decision */
        for (int i = 0; i < r->n_tok && i < MAXG; i++)
            CHECKF(r->cum[i] <= rel, "%s: token %d released %zu bytes, the stop string starts at "
                   "%zu", label, i, r->cum[i], rel);
    } else {
        CHECKF(r->finish == base->finish && r->n_text == base->n_text &&
                   !memcmp(r->text, base->text, base->n_text),
               "%s: unmatched stop string changed the output: '%s' vs '%s'", label, r->text,
               base->text);
    }
    /* same again among others with a tight budget */
    {
        cfg c = cfg_default();
        spec qs[3];
        result *rs = calloc(3, sizeof *rs);
        c.n_seq = 3;
        c.max_batch = 5;
        qs[0] = q;
        qs[1] = q;
        qs[1].prompt[0] = (qs[1].prompt[0] + 1) % VOCAB;
        qs[2] = q;
        run_together(&c, qs, 3, rs, NULL);
        check_same(&rs[0], r, label, 0);
        check_same(&rs[2], r, label, 2);
        free(rs);
    }
    free(r);
    free(alone);
}

static int ascii(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] >= 0x80 || (unsigned char)s[i] < 0x20) return 0;
    return 1;
}

/* First occurrence of needle in text[0..n), or -1. */
static long find_at(const char *text, size_t n, const char *needle) {
    size_t m = strlen(needle);
    for (size_t at = 0; at + m <= n; at++)
        if (!memcmp(text + at, needle, m)) return (long)at;
    return -1;
}

static void test_stop_strings(void) {
    spec q;
    result *base = calloc(1, sizeof *base);
    test_rng g = {2024};
    int done2 = 0, done3 = 0, done_prefix = 0;
    for (int attempt = 0; attempt < 40 && !(done2 && done3 && done_prefix); attempt++) {
        spec_init(&q);
        q.n_prompt = 8 + rnd(&g, 20);
        random_tokens(&g, q.prompt, q.n_prompt);
        q.max_tokens = 40;
        q.ignore_eos = 1;
        q.logprobs = 1;
        run_alone(&q, base);
        if (base->n_tok != 40) continue;
        for (int k = 1; k + 2 < base->n_tok; k++) {
            size_t s0 = base->cum[k - 1], s1 = base->cum[k], s2 = base->cum[k + 1];
            size_t s3 = base->cum[k + 2];
            char st[16];
            /* across 2 tokens: the last 2 bytes of token k, the first 2 of k+1 */
            if (!done2 && s1 - s0 >= 2 && s2 - s1 >= 2 && ascii(base->text + s1 - 2, 4)) {
                memcpy(st, base->text + s1 - 2, 4);
                st[4] = 0;
                if (find_at(base->text, base->n_text, st) == (long)s1 - 2) {
                    const char *stop[1] = {st};
                    check_stop_run(&q, base, stop, 1, "stop across 2 tokens");
                    done2 = 1;
                }
            }
            /* across 3 tokens: the last byte of k, all of k+1, the first byte of k+2 */
            if (!done3 && s1 > s0 && s2 > s1 && s3 > s2 && s2 - s1 <= 12 &&
                ascii(base->text + s1 - 1, s2 - s1 + 2)) {
                size_t m = s2 - s1 + 2;
                memcpy(st, base->text + s1 - 1, m);
                st[m] = 0;
                if (find_at(base->text, base->n_text, st) == (long)s1 - 1) {
                    const char *stop[2] = {"never\x7f", st};
                    check_stop_run(&q, base, stop, 2, "stop across 3 tokens");
                    done3 = 1;
                }
            }
            /* a stop string whose first bytes occur (end of token k) but never the rest:
             * held back at token k, released at k+1, output unchanged */
            if (!done_prefix && s1 - s0 >= 2 && s2 > s1 && ascii(base->text + s1 - 2, 2) &&
                base->text[s1] != '\x7f') {
                memcpy(st, base->text + s1 - 2, 2);
                st[2] = '\x7f';
                st[3] = 0;
                if (find_at(base->text, base->n_text, st) < 0) {
                    const char *stop[1] = {st};
                    check_stop_run(&q, base, stop, 1, "stop prefix held back");
                    done_prefix = 1;
                }
            }
        }
    }
    CHECKF(done2 && done3 && done_prefix, "no greedy text to cut stop strings from (%d %d %d)",
           done2, done3, done_prefix);
    free(base);
}

/* End-of-sequence ids (the scheduler's) end a request unless it ignores them;
 * a request's own stop ids end it always. */
static void test_eos(void) {
    spec q;
    result *base = calloc(1, sizeof *base), *r = calloc(1, sizeof *r);
    test_rng g = {808};
    cfg c = cfg_default();
    moe8_sched_params p = moe8_sched_params_default();
    moe8_sched *s = NULL;
    int32_t eos;
    int first = 0;
    spec_init(&q);
    q.n_prompt = 10;
    random_tokens(&g, q.prompt, 10);
    q.max_tokens = 20;
    q.ignore_eos = 1;
    q.logprobs = 2;
    run_alone(&q, base);
    CHECK(base->n_tok == 20);
    eos = base->tok[6];
    while (base->tok[first] != eos) first++;
    moe8_context *x = new_ctx(g_model, &c);
    p.tok = g_tok;
    p.eos_ids = &eos;
    p.n_eos_ids = 1;
    CHECK(moe8_sched_create(x, &p, &s, NULL) == MOE8_OK);
    q.ignore_eos = 0;
    run_one(s, &q, r);
    CHECKF(r->finish == MOE8_FINISH_STOP && r->n_tok == first &&
               !memcmp(r->tok, base->tok, (size_t)first * sizeof(int32_t)) &&
               !memcmp(r->lp, base->lp, (size_t)first * sizeof(float)),
           "eos %d: finish %d after %d tokens, expected %d", eos, r->finish, r->n_tok, first);
    check_text(&q, r, "eos", 0);
    q.ignore_eos = 1;
    run_one(s, &q, r);
    check_same(r, base, "ignore_eos", 0);
    q.stop_ids[0] = eos;
    q.n_stop_ids = 1;
    run_one(s, &q, r);
    CHECKF(r->finish == MOE8_FINISH_STOP && r->n_tok == first, "stop id with ignore_eos: finish "
           "%d after %d tokens", r->finish, r->n_tok);
    check_pool_empty(s, "eos");
    moe8_sched_free(s);
    moe8_context_free(x);
    free(base);
    free(r);
}

/* ---- 6. log-probabilities vs the CLI's dumped logits --------------------------------------- */

/* lm_head rows 2k+1 = rows 2k for ids below 1024: pairs of exactly equal logits. */
static void tie_hook(void *user, fx_tensor *t) {
    int64_t H = t->shape[1];
    (void)user;
    if (strcmp(t->name, "lm_head.weight")) return;
    for (int64_t k = 0; k < 512; k++)
        memcpy((char *)t->data + (size_t)(2 * k + 1) * H * moe8_dtype_size(t->dtype),
               (char *)t->data + (size_t)(2 * k) * H * moe8_dtype_size(t->dtype),
               (size_t)H * moe8_dtype_size(t->dtype));
}

/* The first token's log-prob and its 20 alternatives on `dir` (model m), for
 * a prompt run among others with a chunked prefill, against the logits the
 * CLI dumps for the same prompt; returns the tied pairs among the 20. */
static int check_logprobs(const char *dir, moe8_model *model) {
    static const int32_t prompt[12] = {5, 17, 99, 3, 200, 42, 1000, 2047, 64, 128, 7, 300};
    char path[4200], cmd[16384], ids[512];
    size_t u = 0, n = 0;
    unsigned char *text;
    float *lg = calloc(VOCAB, sizeof *lg);
    double *ref = calloc(VOCAB, sizeof *ref);
    int order[MOE8_MAX_LOGPROBS], n_lines = 0, bits = 1, ok_order = 1;
    double m = -INFINITY, sum = 0, lse, worst = 0;
    result *r = calloc(1, sizeof *r);
    spec q;
    for (int i = 0; i < 12; i++) u += (size_t)snprintf(ids + u, sizeof ids - u, "%s%d", i ? "," : "", prompt[i]);
    snprintf(path, sizeof path, "%s/sched_logits.txt", test_tmp_root());
    int ties = 0;
    moe8_model *keep = g_model;
    snprintf(cmd, sizeof cmd, "'%s' generate -m '%s' --prompt-ids %s -n 1 --ids --dump-logits '%s' "
             ">/dev/null 2>&1", MOE8_CLI, dir, ids, path);
    CHECK(test_run(cmd) == 0);
    text = test_slurp(path, &n);
    CHECK(text != NULL);
    for (char *p = (char *)text, *end; text && *p; p = end + 1) {
        long id = strtol(p, &end, 10);
        float v = strtof(end, &end);
        if (*end != '\n' || id != n_lines || id >= VOCAB) break;
        lg[n_lines++] = v;
    }
    CHECKF(n_lines == VOCAB, "dump: %d lines", n_lines);
    /* independent log-softmax in double */
    for (int i = 0; i < VOCAB; i++) m = fmax(m, (double)lg[i]);
    for (int i = 0; i < VOCAB; i++) sum += exp((double)lg[i] - m);
    lse = m + log(sum);
    for (int i = 0; i < VOCAB; i++) ref[i] = (double)lg[i] - lse;
    /* the 20 best: by logit descending, ties to the lower id */
    for (int k = 0; k < MOE8_MAX_LOGPROBS; k++) {
        int best = -1;
        for (int i = 0; i < VOCAB; i++) {
            int used = 0;
            for (int j = 0; j < k; j++) used |= order[j] == i;
            if (!used && (best < 0 || lg[i] > lg[best])) best = i;
        }
        order[k] = best;
    }
    spec_init(&q);
    memcpy(q.prompt, prompt, sizeof prompt);
    q.n_prompt = 12;
    q.max_tokens = 1;
    q.ignore_eos = 1;
    q.logprobs = 20;
    {   /* in a batch with others, chunked */
        cfg c = cfg_default();
        spec qs[3] = {q, q, q};
        result *rs = calloc(3, sizeof *rs);
        c.n_seq = 3;
        c.max_batch = 5;
        qs[0].prompt[3] = 9;
        qs[2].n_prompt = 7;
        g_model = model;
        run_together(&c, qs, 3, rs, NULL);
        g_model = keep;
        *r = rs[1];
        free(rs);
    }
    CHECK(r->n_tok == 1 && r->has_logits0);
    if (r->n_tok == 1 && r->has_logits0) {
        for (int i = 0; i < VOCAB; i++) bits &= !memcmp(&r->logits0[i], &lg[i], sizeof(float));
        CHECKF(bits, "the event's logits differ from --dump-logits");
        CHECKF(r->tok[0] == order[0], "greedy token %d, arg-max %d", r->tok[0], order[0]);
        CHECK_NEAR(r->lp[0], ref[r->tok[0]], 1e-6);
        CHECKF(r->n_top[0] == 20, "%d alternatives", r->n_top[0]);
        for (int k = 0; k < r->n_top[0] && k < 20; k++) {
            ties += k > 0 && lg[order[k]] == lg[order[k - 1]];
            ok_order &= r->top[0][k].token == order[k];
            worst = fmax(worst, fabs((double)r->top[0][k].logprob - ref[order[k]]));
        }
        CHECKF(ok_order, "alternatives not in logit order (ties by lower id)");
        CHECKF(worst <= 1e-6, "alternatives' log-probs off by %.3g", worst);
        printf("logprobs: token %d lp %.7f (ref %.9f), 20th alternative lp %.7f, worst %.2g, "
               "%d ties\n", r->tok[0], r->lp[0], ref[r->tok[0]], r->top[0][19].logprob, worst, ties);
    }
    free(text);
    free(lg);
    free(ref);
    free(r);
    return ties;
}

static void test_logprobs(void) {
    fx_opts o = fx_default_opts();
    const char *dir;
    moe8_model *m;
    check_logprobs(g_dir, g_model);
    /* ties: equal logits ranked by lower id */
    o.quant = 1;
    o.vocab = VOCAB;
    o.dense_layer = 1;
    o.tensor_hook = tie_hook;
    dir = fx_test_model("sched_ties", &o, 0);
    m = test_load_model(dir);
    CHECKF(check_logprobs(dir, m) >= 3, "precondition: tied logits among the 20 best");
    moe8_model_free(m);
}

/* ---- 7. library defects ---------------------------------------------------------------------- */

static void test_defects(void) {
    moe8_context *x;
    moe8_sampler *smp = NULL;
    moe8_sampler_params sp = moe8_sampler_params_default(), got;
    moe8_error e;
    cfg c = cfg_default();
    const int32_t prompt[5] = {11, 22, 33, 44, 55};
    const int32_t *pp = prompt;
    int32_t n_prompt = 5, out[8], n_out = -1, pos[5], seq[5] = {0};
    float *before = calloc(VOCAB, sizeof *before);
    moe8_model *m;
    result *r = calloc(1, sizeof *r), *alone = calloc(1, sizeof *alone);
    spec q;

    /* samplers made for another vocabulary: refused, nothing read past the logits */
    x = new_ctx(g_model, &c);
    sp.temperature = 0.7f;
    sp.top_k = 13;
    sp.top_p = 0.8f;
    sp.min_p = 0.02f;
    sp.seed = 0xDEADBEEFCAFEULL;
    for (int d = -1; d <= 1; d += 2) {
        moe8_generate_request gr = {1, &pp, &n_prompt, 8, NULL, 0, NULL, NULL, out, &n_out, NULL};
        CHECK(moe8_sampler_create(&sp, VOCAB + d * 17, &smp, NULL) == MOE8_OK);
        CHECK(moe8_sampler_n_vocab(smp) == VOCAB + d * 17);
        got = moe8_sampler_get_params(smp);
        CHECK(got.temperature == sp.temperature && got.top_k == sp.top_k && got.top_p == sp.top_p &&
              got.min_p == sp.min_p && got.seed == sp.seed);
        memset(&e, 0, sizeof e);
        CHECKF(moe8_generate(x, smp, &gr, &e) == MOE8_ERR_INVALID_ARG && strstr(e.message, "sampler"),
               "sampler for %d tokens: '%s'", VOCAB + d * 17, e.message);
        moe8_sampler_free(smp);
    }
    /* the right vocabulary works */
    {
        moe8_generate_request gr = {1, &pp, &n_prompt, 8, NULL, 0, NULL, NULL, out, &n_out, NULL};
        CHECK(moe8_sampler_create(&sp, VOCAB, &smp, NULL) == MOE8_OK);
        CHECKF(moe8_generate(x, smp, &gr, &e) == MOE8_OK && n_out == 8, "generate: %s", e.message);
        moe8_sampler_free(smp);
    }
    moe8_context_free(x);

    /* the model freed before its context */
    m = test_load_model(g_dir);
    x = new_ctx(m, &c);
    for (int i = 0; i < 5; i++) pos[i] = i;
    {
        moe8_batch b = {5, prompt, pos, seq, NULL};
        CHECK(moe8_decode(x, &b, NULL) == MOE8_OK);
        memcpy(before, moe8_context_logits(x, 4), VOCAB * sizeof(float));
        moe8_model_free(m);
        CHECK(moe8_context_seq_truncate(x, 0, 0, NULL) == MOE8_OK);
        CHECK(moe8_decode(x, &b, NULL) == MOE8_OK);
        CHECKF(moe8_context_logits(x, 4) &&
                   !memcmp(before, moe8_context_logits(x, 4), VOCAB * sizeof(float)),
               "logits changed after moe8_model_free");
    }
    spec_init(&q);
    memcpy(q.prompt, prompt, sizeof prompt);
    q.n_prompt = 5;
    q.max_tokens = 10;
    q.ignore_eos = 1;
    q.logprobs = 4;
    {
        moe8_sched *s = new_sched(x, &c, g_tok);
        run_one(s, &q, r);
        moe8_sched_free(s);
    }
    run_alone(&q, alone);
    check_same(r, alone, "after moe8_model_free", 0);
    moe8_context_free(x); /* frees the model too (ASan: no leak, no use after free) */
    /* two contexts: the model lives until the last one goes */
    {
        moe8_context *x2;
        m = test_load_model(g_dir);
        x = new_ctx(m, &c);
        x2 = new_ctx(m, &c);
        moe8_model_free(m);
        moe8_context_free(x);
        moe8_batch b = {5, prompt, pos, seq, NULL};
        CHECK(moe8_decode(x2, &b, NULL) == MOE8_OK);
        CHECKF(moe8_context_logits(x2, 4) &&
                   !memcmp(before, moe8_context_logits(x2, 4), VOCAB * sizeof(float)),
               "logits of the second context changed after the first and the model went");
        moe8_context_free(x2);
    }
    free(before);
    free(r);
    free(alone);
}

/* ---- 8. 500 requests ----------------------------------------------------------------------- */

static void test_many(void) {
    enum { N = 500 };
    spec *q = calloc(N, sizeof *q);
    result *r = calloc(N, sizeof *r), *alone = calloc(1, sizeof *alone);
    test_rng g = {5005};
    cfg c = cfg_default();
    int next = 0, steps = 0, bad = 0, compared = 0;
    c.n_seq = 8;
    c.n_threads = 2;
    c.max_batch = 32;
    c.kv_blocks = 12;
    for (int i = 0; i < N; i++) {
        spec_init(&q[i]);
        q[i].n_prompt = 1 + rnd(&g, 8);
        random_tokens(&g, q[i].prompt, q[i].n_prompt);
        if (rnd(&g, 3) == 0) memcpy(q[i].prompt, q[0].prompt, (size_t)q[i].n_prompt * sizeof(int32_t));
        q[i].max_tokens = 1 + rnd(&g, 4);
        q[i].ignore_eos = rnd(&g, 2);
        q[i].logprobs = rnd(&g, 3) - 1;
        if (rnd(&g, 2)) {
            q[i].sp.temperature = 1.0f;
            q[i].sp.seed = (uint64_t)i;
        }
    }
    moe8_context *x = new_ctx(g_model, &c);
    moe8_sched *s = new_sched(x, &c, g_tok);
    while ((next < N || moe8_sched_pending(s) > 0) && steps < 100000) {
        const moe8_event *ev;
        int32_t n;
        for (int k = rnd(&g, 4); k > 0 && next < N; k--, next++) add(s, &q[next], &r[next]);
        if (next > 0 && rnd(&g, 5) == 0) {
            int j = next - 1 - rnd(&g, next < 10 ? next : 10);
            if (moe8_sched_cancel(s, r[j].id) == MOE8_OK) r[j].cancelled = 1;
        }
        CHECK(moe8_sched_step(s, &ev, &n, NULL) == MOE8_OK);
        collect(ev, n);
        steps++;
    }
    CHECKF(moe8_sched_pending(s) == 0 && next == N, "%d pending, %d added", moe8_sched_pending(s), next);
    for (int i = 0; i < N; i++) {
        int ok = r[i].n_finish == 1 && r[i].after_finish == 0 && r[i].n_generated == r[i].n_tok &&
                 r[i].n_tok <= q[i].max_tokens;
        if (r[i].cancelled) ok &= r[i].finish == MOE8_FINISH_CANCELLED;
        else if (q[i].ignore_eos) ok &= r[i].finish == MOE8_FINISH_LENGTH && r[i].n_tok == q[i].max_tokens;
        else ok &= r[i].finish == MOE8_FINISH_LENGTH || r[i].finish == MOE8_FINISH_STOP;
        check_text(&q[i], &r[i], "500 requests", i);
        ok &= r[i].bad_lp == 0;
        if (!ok && bad++ < 5)
            fprintf(stderr, "request %d: %d finishes, finish %d, %d tokens (max %d), cancelled %d\n",
                    i, r[i].n_finish, r[i].finish, r[i].n_tok, q[i].max_tokens, r[i].cancelled);
        if (!r[i].cancelled && i % 25 == 0) {
            run_alone(&q[i], alone);
            compared += same_result(&r[i], alone);
        }
    }
    CHECKF(bad == 0, "%d of %d requests ended wrong", bad, N);
    {
        int want = 0;
        for (int i = 0; i < N; i += 25) want += !r[i].cancelled;
        CHECKF(compared == want, "%d of %d sampled requests equal their alone run", compared, want);
    }
    check_pool_empty(s, "500 requests");
    /* a burst: 150 requests added, 100 of them cancelled, all reported in one step */
    {
        int64_t ids[150];
        const moe8_event *ev;
        int32_t n_ev, n_fin = 0, ok = 1;
        for (int i = 0; i < 150; i++) {
            memset(&r[i], 0, sizeof r[i]);
            ids[i] = add(s, &q[i], &r[i]);
        }
        for (int i = 0; i < 150; i += 3) {
            CHECK(moe8_sched_cancel(s, ids[i + 1]) == MOE8_OK && moe8_sched_cancel(s, ids[i + 2]) == MOE8_OK);
            r[i + 1].cancelled = r[i + 2].cancelled = 1;
        }
        CHECK(moe8_sched_step(s, &ev, &n_ev, NULL) == MOE8_OK);
        for (int32_t k = 0; k < n_ev; k++)
            if (ev[k].type == MOE8_EVENT_FINISH && ev[k].finish == MOE8_FINISH_CANCELLED) {
                result *x = ev[k].user;
                n_fin++;
                ok &= x->cancelled && ev[k].request == x->id && ev[k].text != NULL &&
                      ev[k].text_len == 0 && ev[k].n_generated == 0;
            }
        CHECKF(n_fin == 100 && ok, "burst of cancels: %d finish events in the step (ok %d)", n_fin, ok);
        collect(ev, n_ev);
        drain(s, 5000);
        for (int i = 0; i < 150; i++) check_events(&r[i], "burst", i);
        check_pool_empty(s, "burst");
    }
    moe8_sched_free(s);
    moe8_context_free(x);
    free(q);
    free(r);
    free(alone);
}

/* ---- 9. bad requests ------------------------------------------------------------------------ */

static void expect_bad(moe8_sched *s, const moe8_request *rq, const char *needle, const char *what) {
    moe8_error e;
    int64_t id = 0;
    memset(&e, 0, sizeof e);
    moe8_status st = moe8_sched_add(s, rq, &id, &e);
    CHECKF(st == MOE8_ERR_INVALID_ARG && strstr(e.message, needle) && moe8_sched_pending(s) == 0,
           "%s: status %d, message '%s' (wanted '%s')", what, st, e.message, needle);
}

static void test_bad_requests(void) {
    static int32_t prompt[NCTX + 1];
    static const char *many[17] = {"a", "b", "c", "d", "e", "f", "g", "h", "i",
                                   "j", "k", "l", "m", "n", "o", "p", "q"};
    static const char *empty[2] = {"ok", ""};
    cfg c = cfg_default(), small = cfg_default();
    moe8_context *x = new_ctx(g_model, &c), *x0 = new_ctx(g_model, &c), *xs;
    moe8_sched *s = new_sched(x, &c, g_tok), *s0 = new_sched(x0, &c, NULL), *ss;
    moe8_request rq;
    int64_t id;
    result r;
    for (int i = 0; i <= NCTX; i++) prompt[i] = i % VOCAB;
#define BAD(field_edit, needle)                                                                  \
    do {                                                                                         \
        rq = moe8_request_default();                                                             \
        rq.prompt = prompt;                                                                      \
        rq.n_prompt = 4;                                                                         \
        rq.user = &r;                                                                            \
        field_edit;                                                                              \
        expect_bad(s, &rq, needle, #field_edit);                                                 \
    } while (0)
    BAD(rq.n_prompt = 0, "prompt");
    BAD(rq.prompt = NULL, "prompt");
    BAD(rq.n_prompt = NCTX + 1, "n_ctx");
    BAD(prompt[2] = VOCAB, "id 2048");
    prompt[2] = 2;
    BAD(prompt[3] = -1, "id -1");
    prompt[3] = 3;
    BAD(rq.max_tokens = -1, "max_tokens");
    BAD(rq.sampling.top_p = 0.0f, "top_p");
    BAD(rq.sampling.temperature = -1.0f, "temperature");
    BAD(rq.sampling.temperature = NAN, "temperature");
    BAD(rq.sampling.top_k = -2, "top_k");
    BAD(rq.sampling.min_p = 1.5f, "min_p");
    BAD(rq.logprobs = 21, "logprobs");
    BAD(rq.logprobs = -2, "logprobs");
    BAD((rq.stop = many, rq.n_stop = 17), "stop strings");
    BAD((rq.stop = empty, rq.n_stop = 2), "stop string 1 is empty");
    BAD(rq.n_stop_ids = 2, "n_stop_ids");
#undef BAD
    /* bad scheduler parameters */
    {
        moe8_sched_params sp = moe8_sched_params_default();
        moe8_sched *bad = NULL;
        moe8_error e;
        sp.max_running = -1;
        CHECKF(moe8_sched_create(x0, &sp, &bad, &e) == MOE8_ERR_INVALID_ARG && !bad &&
                   strstr(e.message, "max_running"), "max_running -1: '%s'", e.message);
        sp = moe8_sched_params_default();
        sp.n_eos_ids = 2;
        CHECKF(moe8_sched_create(x0, &sp, &bad, &e) == MOE8_ERR_INVALID_ARG && !bad &&
                   strstr(e.message, "eos"), "eos ids without an array: '%s'", e.message);
    }
    /* stop strings without a tokenizer */
    rq = moe8_request_default();
    rq.prompt = prompt;
    rq.n_prompt = 4;
    rq.stop = empty;
    rq.n_stop = 1;
    expect_bad(s0, &rq, "tokenizer", "stop strings without tokenizer");
    /* a prompt larger than the pool (4 blocks = 64 positions) */
    small.kv_blocks = 4;
    xs = new_ctx(g_model, &small);
    ss = new_sched(xs, &small, g_tok);
    rq = moe8_request_default();
    rq.prompt = prompt;
    rq.n_prompt = 65;
    expect_bad(ss, &rq, "kv_bytes", "prompt larger than the pool");
    rq.n_prompt = 64; /* fits: reads its prompt, then the pool is full */
    memset(&r, 0, sizeof r);
    rq.user = &r;
    rq.max_tokens = 5;
    CHECK(moe8_sched_add(ss, &rq, &id, NULL) == MOE8_OK && id == 1);
    drain(ss, 100);
    CHECKF(r.n_finish == 1 && r.finish == MOE8_FINISH_CONTEXT && r.n_tok == 1,
           "a full pool: finish %d after %d tokens", r.finish, r.n_tok);
    check_pool_empty(ss, "full pool");
    /* a full context: 250 prompt positions of 256 give 7 tokens (the last needs no position) */
    rq = moe8_request_default();
    rq.prompt = prompt;
    rq.n_prompt = NCTX - 6;
    rq.max_tokens = 20;
    rq.ignore_eos = 1;
    memset(&r, 0, sizeof r);
    rq.user = &r;
    CHECK(moe8_sched_add(s, &rq, &id, NULL) == MOE8_OK && id == 1);
    drain(s, 100);
    CHECKF(r.n_finish == 1 && r.finish == MOE8_FINISH_CONTEXT && r.n_tok == 7,
           "a full context: finish %d after %d tokens", r.finish, r.n_tok);
    /* ids count from 1; refused requests take none */
    rq = moe8_request_default();
    rq.prompt = prompt;
    rq.n_prompt = 3;
    memset(&r, 0, sizeof r);
    rq.user = &r;
    CHECK(moe8_sched_add(s, &rq, &id, NULL) == MOE8_OK && id == 2);
    CHECK(moe8_sched_cancel(s, id) == MOE8_OK && moe8_sched_cancel(s, 99) == MOE8_ERR_NOT_FOUND);
    drain(s, 10);
    CHECK(r.n_finish == 1 && r.finish == MOE8_FINISH_CANCELLED && r.n_tok == 0);
    CHECK(moe8_sched_cancel(s, id) == MOE8_ERR_NOT_FOUND);
    moe8_sched_free(ss);
    moe8_context_free(xs);
    moe8_sched_free(s);
    moe8_sched_free(s0);
    moe8_context_free(x0);
    moe8_context_free(x);
}

int main(void) {
    test_table_or_skip(); /* MOE8_ISA: a table this CPU lacks is skipped */
    fx_opts o = fx_default_opts();
    moe8_context *keeper;
    moe8_kv_stats kv;
    cfg c = cfg_default();
    double t0 = 0;
    o.quant = 1;
    o.vocab = VOCAB;
    o.dense_layer = 1;
    g_dir = fx_test_model("sched_model", &o, 1);
    g_model = test_load_model(g_dir);
    if (moe8_tokenizer_load(g_dir, &g_tok, NULL) != MOE8_OK) {
        fprintf(stderr, "cannot load the tokenizer\n");
        return 2;
    }
    /* one context held throughout: the prepared weights stay shared */
    g_block_bytes = 1;
    c.kv_blocks = 0;
    keeper = new_ctx(g_model, &c);
    moe8_context_kv_stats(keeper, &kv);
    g_block_bytes = kv.block_bytes;
    CHECK(kv.block_tokens == MOE8_KV_BLOCK_TOKENS && kv.n_blocks == NCTX / 16 && kv.n_used == 0);
    CHECK(g_block_bytes == moe8_model_kv_block_bytes(g_model, c.kv_type) &&
          c.kv_type == MOE8_DT_F16);
#define TIMED(f)                                                                                 \
    do {                                                                                         \
        struct timespec ts;                                                                      \
        clock_gettime(CLOCK_MONOTONIC, &ts);                                                     \
        t0 = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;                                      \
        f();                                                                                     \
        clock_gettime(CLOCK_MONOTONIC, &ts);                                                     \
        printf("%-24s %6.2f s, %d passed, %d failed so far\n", #f,                               \
               (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec - t0, test_n_pass, test_n_fail);    \
        fflush(stdout);                                                                          \
    } while (0)
    TIMED(test_bad_requests);
    TIMED(test_defects);
    TIMED(test_logprobs);
    TIMED(test_stop_strings);
    TIMED(test_eos);
    TIMED(test_prefix_cache);
    TIMED(test_lru);
    TIMED(test_rewritten_block);
    TIMED(test_free_pending);
    TIMED(test_preemption);
    TIMED(test_chunking_threads);
    TIMED(test_kv_types);
    TIMED(test_random);
    TIMED(test_many);
    moe8_context_free(keeper);
    moe8_tokenizer_free(g_tok);
    moe8_model_free(g_model);
    return test_summary();
}
