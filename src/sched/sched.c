/*
 * sched.c — the step-driven scheduler of moe8.h (SEMANTICS §10), in the
 * manner of vLLM's V1 scheduler, over one context and its paged KV pool.
 *
 * Requests wait in a FIFO queue, then run in start order (`run`), each on a
 * sequence of the context. A step:
 *   1. reports cancelled requests (their blocks go back);
 *   2. builds one batch within max_batch_tokens: every running request in
 *      start order gets its pending tokens — one when decoding, else a chunk
 *      of its prompt (leaving a token for each running request after it) —
 *      with its KV blocks reserved at once. When the pool cannot give a
 *      running request even one more position, the most recently started
 *      request is preempted (blocks back, to the head of the queue, its
 *      tokens recomputed when it starts again); a request alone in the pool
 *      that cannot grow ends with MOE8_FINISH_CONTEXT. Then, unless someone
 *      was preempted, waiting requests start in order while fewer than
 *      max_running run and their first chunk fits: each first takes the
 *      prefix cache's blocks of its tokens (all but the last token, which
 *      must be computed for its logits);
 *   3. runs moe8_decode; rank 0 samples every request whose tokens are all
 *      computed from its own generator, and under TP broadcasts the tokens;
 *   4. turns tokens into events (request.c) and ends requests on a stop id,
 *      a stop string, max_tokens or a full context.
 * A preempted request recomputes exactly the K/V it had (batch invariance),
 * and its generator is untouched, so its output is the same as if it had
 * never been preempted.
 * Hybrid models (recurrent state; SEMANTICS §10): a request starts only when
 * a state slot can be had; its prompt is cut only at multiples of HY_CHUNK
 * and at its end (hy_cut), its tokens after the prompt run one per step, a
 * snapshot of its state is asked at each multiple of HY_CHUNK its prompt
 * reaches, and its prefix match stops at the deepest snapshot within
 * n_prompt - 2 positions.
 *
 * Does not: run in parallel with anything on its context, or communicate
 * anything but the sampled tokens (every rank makes the same decisions from
 * the same calls and tokens).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/core.h"
#include "dist/dist.h"
#include "model/context.h"
#include "grammar/grammar.h"
#include "sample/logits.h"
#include "sample/sampler.h"
#include "sched/sched.h"

#define KV_BS MOE8_KV_BLOCK_TOKENS
#define HY_CHUNK 64 /* MOE8_GDN_CHUNK (model/gdn.h): hybrid prompts are cut at its multiples */

struct moe8_sched {
    moe8_context *ctx;
    moe8_model *model;
    moe8_dist *dist; /* the model's group (NULL: one process) */
    int rank, n_ranks;
    int32_t max_running, max_batch, n_vocab, n_ctx;
    int hybrid;                 /* the model has recurrent state: hy_cut, snapshots */
    const moe8_tokenizer *tok;
    int32_t *eos, n_eos;
    moe8_sampler *smp;          /* shared buffers; each request has its own generator */
    int64_t next_id;
    rq *wait_head, *wait_tail;
    rq **run;                   /* [max_running] in start order */
    int32_t n_run;
    int32_t *free_seq, n_free_seq;
    int32_t n_pending;
    int preempted;              /* this step preempted someone: start nobody new */
    /* the batch of a step */
    int32_t *b_tok, *b_pos, *b_seq; /* [max_batch] */
    int8_t *b_lg;
    rq **b_rq;                  /* [max_running] requests in the batch */
    int32_t *b_row, *b_chunk;   /* [max_running] batch index of its logits (-1), tokens */
    int32_t *b_first;           /* [max_running] batch index of its chunk's first token */
    int32_t max_rows, n_rows;   /* logits rows per step (n_outputs), used by this batch */
    int32_t *sampled;           /* [max_running] */
    logits_scratch lp;          /* processed logits of one draw (sample/logits.c) */
    const grammar_vocab *gv;    /* for requests with a grammar: the caller's, or gv_own */
    grammar_vocab *gv_own;      /* made from tok at the first such request */
    int32_t n_b, n_brq;
    int32_t *match;             /* [max_blocks] prefix-cache hits */
    ev_buf ev;
    moe8_sched_stats st;
    moe8_error fail;            /* why the last failed step failed (its events point here) */
};

moe8_sched_params moe8_sched_params_default(void) {
    moe8_sched_params p;
    memset(&p, 0, sizeof p);
    return p;
}

moe8_request moe8_request_default(void) {
    moe8_request r;
    memset(&r, 0, sizeof r);
    r.sampling = moe8_sampler_params_default();
    r.max_tokens = 16;
    r.logprobs = -1;
    r.repetition_penalty = 1.0f;
    return r;
}

/* ---- create / free --------------------------------------------------------------- */

static moe8_status set_eos(moe8_sched *s, const moe8_sched_params *p) {
    const moe8_config *c = moe8_model_config(s->model);
    int32_t n = p->eos_ids ? p->n_eos_ids : c->n_eos_ids + 1;
    if (n < 0) n = 0;
    if (!(s->eos = malloc(((size_t)n + 1) * sizeof *s->eos))) return MOE8_ERR_NOMEM;
    if (p->eos_ids) {
        memcpy(s->eos, p->eos_ids, (size_t)n * sizeof *s->eos);
        s->n_eos = n;
        return MOE8_OK;
    }
    for (int i = 0; i < c->n_eos_ids; i++) s->eos[s->n_eos++] = (int32_t)c->eos_token_ids[i];
    if (p->tok && moe8_tokenizer_eos_id(p->tok) >= 0) s->eos[s->n_eos++] = moe8_tokenizer_eos_id(p->tok);
    return MOE8_OK;
}

moe8_status moe8_sched_create(moe8_context *ctx, const moe8_sched_params *params,
                              moe8_sched **out, moe8_error *err) {
    const moe8_sched_params p = params ? *params : moe8_sched_params_default();
    moe8_context_params cp;
    moe8_sched *s;
    moe8_status st;
    if (!out || !ctx) return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "scheduler: no context");
    *out = NULL;
    cp = moe8_context_get_params(ctx);
    if (p.max_running < 0 || p.max_batch_tokens < 0 || (p.n_eos_ids && !p.eos_ids) ||
        p.n_eos_ids < 0)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "scheduler: max_running (%d) and "
                         "max_batch_tokens (%d) must be >= 0, eos ids an array", p.max_running,
                         p.max_batch_tokens);
    if (!(s = calloc(1, sizeof *s))) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "out of memory");
    s->ctx = ctx;
    s->model = moe8_context_model(ctx);
    s->dist = moe8_context_group(ctx, &s->rank, &s->n_ranks);
    s->tok = p.tok;
    s->gv = G_VOCAB(p.grammar_vocab);
    s->n_vocab = moe8_context_n_vocab(ctx);
    s->n_ctx = cp.n_ctx;
    s->max_running = cp.n_seq_max < cp.n_outputs ? cp.n_seq_max : cp.n_outputs;
    if (p.max_running && p.max_running < s->max_running) s->max_running = p.max_running;
    s->max_batch = p.max_batch_tokens && p.max_batch_tokens < cp.n_batch ? p.max_batch_tokens
                                                                          : cp.n_batch;
    s->max_rows = cp.n_outputs;
    s->next_id = 1;
    s->hybrid = moe8_context_state_slots(ctx) > 0;
    st = set_eos(s, &p);
    if (!st) st = moe8_sampler_create(NULL, s->n_vocab, &s->smp, err);
    if (!st) {
        s->run = calloc((size_t)s->max_running, sizeof *s->run);
        s->free_seq = malloc((size_t)cp.n_seq_max * sizeof *s->free_seq);
        s->b_tok = malloc((size_t)s->max_batch * sizeof *s->b_tok);
        s->b_pos = malloc((size_t)s->max_batch * sizeof *s->b_pos);
        s->b_seq = malloc((size_t)s->max_batch * sizeof *s->b_seq);
        s->b_lg = malloc((size_t)s->max_batch);
        s->b_rq = malloc((size_t)s->max_running * sizeof *s->b_rq);
        s->b_row = malloc((size_t)s->max_running * sizeof *s->b_row);
        s->b_chunk = malloc((size_t)s->max_running * sizeof *s->b_chunk);
        s->b_first = malloc((size_t)s->max_running * sizeof *s->b_first);
        s->sampled = malloc((size_t)s->max_running * sizeof *s->sampled);
        s->match = malloc((size_t)moe8_context_kv_seq_blocks(ctx) * moe8_context_kv_groups(ctx) *
                          sizeof *s->match);
        if (!s->run || !s->free_seq || !s->b_tok || !s->b_pos || !s->b_seq || !s->b_lg ||
            !s->b_rq || !s->b_row || !s->b_chunk || !s->b_first || !s->sampled || !s->match)
            st = moe8_fail(err, MOE8_ERR_NOMEM, -1, "cannot allocate the scheduler");
    } else if (st == MOE8_ERR_NOMEM) {
        moe8_fail(err, st, -1, "cannot allocate the scheduler");
    }
    if (st) {
        moe8_sched_free(s);
        return st;
    }
    /* Every sequence of the context is the scheduler's from now on. */
    for (int32_t i = cp.n_seq_max - 1; i >= 0; i--) {
        moe8_context_seq_truncate(ctx, i, 0, NULL);
        s->free_seq[s->n_free_seq++] = i;
    }
    *out = s;
    return MOE8_OK;
}

void moe8_sched_free(moe8_sched *s) {
    if (!s) return;
    for (rq *r = s->wait_head, *n; r; r = n) {
        n = r->next;
        moe8_rq_free(r);
    }
    for (int32_t i = 0; s->run && i < s->n_run; i++) {
        moe8_context_seq_truncate(s->ctx, s->run[i]->seq, 0, NULL);
        moe8_rq_free(s->run[i]);
    }
    moe8_sampler_free(s->smp);
    moe8_logits_scratch_free(&s->lp);
    moe8_grammar_vocab_free(s->gv_own);
    moe8_ev_free(&s->ev);
    free(s->eos);
    free(s->run);
    free(s->free_seq);
    free(s->b_tok);
    free(s->b_pos);
    free(s->b_seq);
    free(s->b_lg);
    free(s->b_rq);
    free(s->b_row);
    free(s->b_chunk);
    free(s->b_first);
    free(s->sampled);
    free(s->match);
    free(s);
}

/* ---- add / cancel ----------------------------------------------------------------- */

static moe8_status check_request(const moe8_sched *s, const moe8_request *r, moe8_error *err) {
    const int32_t blocks = moe8_context_kv_blocks_for(s->ctx, r->n_prompt);
    moe8_status st;
    if (!r->prompt || r->n_prompt < 1 || r->n_prompt > s->n_ctx)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "request: prompt of %d tokens; expected "
                         "1..%d (n_ctx)", r->n_prompt, s->n_ctx);
    if (blocks > moe8_context_kv_blocks(s->ctx))
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "request: a prompt of %d tokens needs %d "
                         "kv blocks, the kv cache holds %d (raise kv_bytes)", r->n_prompt,
                         blocks, moe8_context_kv_blocks(s->ctx));
    /* hybrids: a cut prompt's runs are up to HY_CHUNK + 1 tokens (hy_cut) */
    if (s->hybrid && r->n_prompt > s->max_batch && s->max_batch < HY_CHUNK + 2)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "request: a prompt of %d tokens of a "
                         "hybrid model is cut at multiples of %d positions, which needs "
                         "max_batch_tokens >= %d (it is %d)", r->n_prompt, HY_CHUNK, HY_CHUNK + 2,
                         s->max_batch);
    if (s->hybrid && r->n_prompt_logits > 0 && s->max_rows < HY_CHUNK + 2)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "request: n_prompt_logits of a hybrid "
                         "model needs n_outputs >= %d logits rows per step (it is %d): not "
                         "supported yet", HY_CHUNK + 2, s->max_rows);
    for (int32_t i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] < 0 || r->prompt[i] >= s->n_vocab)
            return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "request: prompt token %d: id %d not "
                             "in [0, %d)", i, r->prompt[i], s->n_vocab);
    if (r->max_tokens < 0)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "request: max_tokens %d must be >= 0",
                         r->max_tokens);
    if ((st = moe8_sampler_params_check(&r->sampling, err))) {
        moe8_error_prefix(err, "request");
        return st;
    }
    if (r->logprobs < -1 || r->logprobs > MOE8_MAX_LOGPROBS)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "request: logprobs %d must be -1 (none) "
                         "or 0..%d", r->logprobs, MOE8_MAX_LOGPROBS);
    if (r->n_stop_ids < 0 || (r->n_stop_ids && !r->stop_ids))
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "request: n_stop_ids %d without ids",
                         r->n_stop_ids);
    if (r->n_prompt_logits < 0 || r->n_prompt_logits > r->n_prompt)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "request: n_prompt_logits %d must be in "
                         "[0, n_prompt %d]", r->n_prompt_logits, r->n_prompt);
    if (r->n_stop < 0 || r->n_stop > MOE8_MAX_STOP_STRINGS || (r->n_stop && !r->stop))
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "request: %d stop strings; expected "
                         "0..%d", r->n_stop, MOE8_MAX_STOP_STRINGS);
    if (r->n_stop && !s->tok)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "request: stop strings need the "
                         "scheduler to have a tokenizer");
    for (int32_t i = 0; i < r->n_stop; i++)
        if (!r->stop[i] || !r->stop[i][0])
            return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "request: stop string %d is empty", i);
    if ((st = moe8_check_processors(r, s->n_vocab, err))) return st;
    if (r->grammar && r->ignore_eos)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "request: ignore_eos with a grammar (the "
                         "grammar says where the end may come)");
    if (r->grammar && !s->gv && !s->tok)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "request: a grammar needs the scheduler to "
                         "have a tokenizer or a grammar vocabulary");
    if (r->grammar_after && r->grammar_after[0] && !r->grammar)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "request: grammar_after '%.40s' without a "
                         "grammar", r->grammar_after);
    if (r->grammar_after && strnlen(r->grammar_after, MOE8_MAX_GRAMMAR_AFTER + 1) > MOE8_MAX_GRAMMAR_AFTER)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "request: grammar_after holds more than %d "
                         "bytes", MOE8_MAX_GRAMMAR_AFTER);
    return MOE8_OK;
}

/* The grammar's view of the vocabulary, made from the tokenizer the first time. */
static const grammar_vocab *vocab_of(moe8_sched *s) {
    if (!s->gv && s->tok && moe8_grammar_vocab_new(s->tok, s->n_vocab, s->eos, s->n_eos, &s->gv_own, NULL) == MOE8_OK)
        s->gv = s->gv_own;
    return s->gv;
}

const moe8_grammar_vocab *moe8_sched_grammar_vocab(moe8_sched *s) {
    return s ? (const moe8_grammar_vocab *)(const void *)vocab_of(s) : NULL;
}

static rq *rq_new(moe8_sched *s, const moe8_request *q) {
    rq *r = calloc(1, sizeof *r);
    int64_t room = (int64_t)s->n_ctx + 1 - q->n_prompt; /* at most n_ctx + 1 tokens */
    int ok;
    if (!r) return NULL;
    r->cap_tok = q->n_prompt + (int32_t)(q->max_tokens < room ? q->max_tokens : room);
    r->tok = malloc((size_t)r->cap_tok * sizeof *r->tok);
    r->stop_ids = malloc(((size_t)q->n_stop_ids + 1) * sizeof *r->stop_ids);
    r->stop = calloc((size_t)q->n_stop + 1, sizeof *r->stop);
    ok = r->tok && r->stop_ids && r->stop;
    for (int32_t i = 0; ok && i < q->n_stop; i++, r->n_stop++) ok = (r->stop[i] = strdup(q->stop[i])) != NULL;
    /* generated text continues the prompt: Llama's leading space stays (" Paris") */
    if (ok && s->tok) ok = moe8_detok_create(s->tok, MOE8_DETOK_CONTINUE, &r->detok, NULL) == MOE8_OK;
    if (!ok) {
        moe8_rq_free(r);
        return NULL;
    }
    memcpy(r->tok, q->prompt, (size_t)q->n_prompt * sizeof *r->tok);
    memcpy(r->stop_ids, q->stop_ids ? q->stop_ids : r->stop_ids,
           (size_t)q->n_stop_ids * sizeof *r->stop_ids);
    r->n_stop_ids = q->n_stop_ids;
    r->n_tok = r->n_prompt = q->n_prompt;
    r->max_tokens = q->max_tokens;
    r->sp = q->sampling;
    moe8_sampler_seed(r->rng, q->sampling.seed);
    r->logprobs = q->logprobs;
    r->ignore_eos = q->ignore_eos;
    r->plog_from = r->plog_done = q->n_prompt - q->n_prompt_logits;
    if (!q->n_prompt_logits) r->plog_from = r->plog_done = q->n_prompt;
    if (q->grammar && q->grammar_after && q->grammar_after[0]) { /* the grammar waits for it */
        r->n_g_after = strlen(q->grammar_after);
        r->g_after = strdup(q->grammar_after);
        r->g_tail = malloc(r->n_g_after);
        ok = r->g_after && r->g_tail;
    }
    if (!ok || moe8_logits_procs_copy(&r->proc, q) ||
        (q->grammar && (!vocab_of(s) || moe8_grammar_state_new(G_OF(q->grammar), &r->gs, NULL) != MOE8_OK))) {
        moe8_rq_free(r);
        return NULL;
    }
    r->user = q->user;
    r->seq = -1;
    r->ttft = -1;
    r->t_add = moe8_time_s();
    return r;
}

static void wait_push_back(moe8_sched *s, rq *r) {
    r->next = NULL;
    if (s->wait_tail) s->wait_tail->next = r;
    else s->wait_head = r;
    s->wait_tail = r;
}

static void wait_push_front(moe8_sched *s, rq *r) {
    r->next = s->wait_head;
    s->wait_head = r;
    if (!s->wait_tail) s->wait_tail = r;
}

static void wait_remove(moe8_sched *s, rq *r) {
    rq **pp = &s->wait_head, *prev = NULL;
    while (*pp && *pp != r) prev = *pp, pp = &(*pp)->next;
    if (!*pp) return;
    *pp = r->next;
    if (s->wait_tail == r) s->wait_tail = prev;
    r->next = NULL;
}

moe8_status moe8_sched_add(moe8_sched *s, const moe8_request *q, int64_t *id, moe8_error *err) {
    moe8_status st;
    rq *r;
    if (!s || !q || !id) return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "request: NULL argument");
    if ((st = check_request(s, q, err))) return st;
    if (!(r = rq_new(s, q))) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "request: out of memory");
    r->id = s->next_id++;
    wait_push_back(s, r);
    s->n_pending++;
    s->st.prompt_tokens += q->n_prompt;
    *id = r->id;
    return MOE8_OK;
}

static rq *find_rq(const moe8_sched *s, int64_t id) {
    for (int32_t i = 0; i < s->n_run; i++)
        if (s->run[i]->id == id) return s->run[i];
    for (rq *r = s->wait_head; r; r = r->next)
        if (r->id == id) return r;
    return NULL;
}

moe8_status moe8_sched_cancel(moe8_sched *s, int64_t id) {
    rq *r = s ? find_rq(s, id) : NULL;
    if (!r) return MOE8_ERR_NOT_FOUND;
    r->cancel = 1;
    return MOE8_OK;
}

int32_t moe8_sched_pending(const moe8_sched *s) { return s ? s->n_pending : 0; }

void moe8_sched_get_stats(const moe8_sched *s, moe8_sched_stats *out) {
    *out = s->st;
    out->n_running = s->n_run;
    out->n_waiting = 0;
    for (rq *r = s->wait_head; r; r = r->next) out->n_waiting++;
    moe8_context_kv_stats(s->ctx, &out->kv);
}

/* ---- running set ------------------------------------------------------------------- */

/* Give r's sequence and blocks back and take it out of the running set. */
static void release(moe8_sched *s, rq *r) {
    int32_t i = 0;
    if (r->seq < 0) return;
    moe8_context_seq_truncate(s->ctx, r->seq, 0, NULL);
    s->free_seq[s->n_free_seq++] = r->seq;
    r->seq = -1;
    while (i < s->n_run && s->run[i] != r) i++;
    MOE8_ASSERT(i < s->n_run);
    memmove(s->run + i, s->run + i + 1, (size_t)(s->n_run - i - 1) * sizeof *s->run);
    s->n_run--;
}

static void preempt(moe8_sched *s, rq *r) {
    release(s, r);
    r->n_computed = 0;
    r->state = RQ_WAITING;
    wait_push_front(s, r);
    s->st.n_preempted++;
    s->preempted = 1;
}

/* End r with `why` in a FINISH event (text still held released, except after
 * a stop string) and free it. */
static void finish(moe8_sched *s, rq *r, moe8_finish why, int flush, const float *logits,
                   moe8_status status, const char *message) {
    moe8_event *e = moe8_ev_push(&s->ev, MOE8_EVENT_FINISH, r);
    if (e) {
        e->finish = why;
        e->n_prompt = r->n_prompt;
        e->n_generated = r->n_gen;
        e->n_cached = r->n_cached;
        e->ttft_s = r->ttft;
        e->logits = logits;
        e->status = status;
        e->message = message;
        if (flush) moe8_rq_flush_text(&s->ev, r, e);
    }
    if (r->state == RQ_RUNNING) release(s, r);
    else wait_remove(s, r);
    s->st.generated_tokens += r->n_gen;
    s->n_pending--;
    moe8_rq_free(r);
}

static void report_cancels(moe8_sched *s) {
    for (int32_t i = s->n_run - 1; i >= 0; i--)
        if (s->run[i]->cancel) finish(s, s->run[i], MOE8_FINISH_CANCELLED, 1, NULL, MOE8_OK, NULL);
    for (rq *r = s->wait_head, *n; r; r = n) {
        n = r->next;
        if (r->cancel) finish(s, r, MOE8_FINISH_CANCELLED, 1, NULL, MOE8_OK, NULL);
    }
}

/* ---- building the batch ------------------------------------------------------------- */

/* Prompt positions of the chunk [c0, c0 + want) of r that get logits events. */
static void plog_range(const rq *r, int32_t c0, int32_t want, int32_t *lo, int32_t *hi) {
    *lo = c0 > r->plog_done ? c0 : r->plog_done;
    *hi = c0 + want < r->n_prompt ? c0 + want : r->n_prompt;
    if (*hi < *lo) *hi = *lo;
}

/* Logits rows the chunk needs: its prompt-logits positions, and its last
 * token when that completes r. */
static int32_t rows_of(const rq *r, int32_t want) {
    int32_t lo, hi, end = r->n_computed + want;
    plog_range(r, r->n_computed, want, &lo, &hi);
    return hi - lo + (end == r->n_tok && !(end - 1 >= lo && end - 1 < hi));
}

/* `want` cut so the chunk's rows fit what the step has left (0: none fit). */
static int32_t fit_rows(const moe8_sched *s, const rq *r, int32_t want) {
    const int32_t left = s->max_rows - s->n_rows;
    int32_t lo, hi;
    if (rows_of(r, want) <= left) return want;
    plog_range(r, r->n_computed, want, &lo, &hi);
    want = lo - r->n_computed + (left > 0 ? left : 0);
    while (want > 0 && rows_of(r, want) > left) want--;
    return want;
}

/* Hybrid models (SEMANTICS §10): `want` tokens from position c0 of r cut so
 * that the chunked form runs the same chunks whatever the schedule — a
 * prompt is cut only at multiples of HY_CHUNK and at its end, never leaving
 * a run of one token (that would run the recurrent form: a prompt of one
 * token is the only such run); the tokens after the prompt (recomputed after
 * a preemption) go one at a time, as they ran. 0: nothing fits. */
static int32_t hy_cut(const moe8_sched *s, const rq *r, int32_t c0, int32_t want) {
    int32_t end;
    if (!s->hybrid || want < 1) return want;
    if (c0 >= r->n_prompt) return 1;
    if (c0 + want >= r->n_prompt) return r->n_prompt - c0;
    end = (c0 + want) / HY_CHUNK * HY_CHUNK;
    if (end > r->n_prompt - 2) end -= HY_CHUNK;
    return end > c0 ? end - c0 : 0;
}

/* The next `want` tokens of r into the batch (its blocks taken now); for a
 * hybrid prompt, a state snapshot asked at each multiple of HY_CHUNK the
 * chunk reaches (SEMANTICS §10). */
static void batch_add(moe8_sched *s, rq *r, int32_t want) {
    int32_t lo, hi;
    MOE8_ASSERT(moe8_context_kv_reserve(s->ctx, r->seq, r->n_computed + want) == 0);
    for (int32_t p = (r->n_computed / HY_CHUNK + 1) * HY_CHUNK;
         s->hybrid && p <= r->n_computed + want && p <= r->n_prompt; p += HY_CHUNK)
        moe8_context_snapshot_at(s->ctx, r->seq, p);
    plog_range(r, r->n_computed, want, &lo, &hi);
    s->b_first[s->n_brq] = s->n_b;
    for (int32_t j = 0; j < want; j++) {
        const int32_t pos = r->n_computed + j;
        s->b_tok[s->n_b] = r->tok[pos];
        s->b_pos[s->n_b] = pos;
        s->b_seq[s->n_b] = r->seq;
        s->b_lg[s->n_b++] = (int8_t)(pos >= lo && pos < hi);
    }
    s->n_rows += rows_of(r, want);
    s->b_rq[s->n_brq] = r;
    s->b_chunk[s->n_brq] = want;
    s->b_row[s->n_brq] = -1;
    if (r->n_computed + want == r->n_tok) {
        s->b_lg[s->n_b - 1] = 1;
        s->b_row[s->n_brq] = s->n_b - 1;
    }
    s->n_brq++;
}

/* Positions r can reach with the blocks it holds and those the pool can give
 * (a block of each layer group per block of positions: SEMANTICS §10). */
static int32_t room(const moe8_sched *s, const rq *r) {
    return (moe8_context_kv_held(s->ctx, r->seq) +
            moe8_context_kv_available(s->ctx) / moe8_context_kv_groups(s->ctx)) * KV_BS -
           r->n_computed;
}

static int32_t schedule_running(moe8_sched *s, int32_t budget) {
    for (int32_t i = 0; i < s->n_run && budget > 0; i++) {
        rq *r = s->run[i];
        const int32_t pending = r->n_tok - r->n_computed, later = s->n_run - 1 - i;
        int32_t want = pending < budget ? pending : budget;
        if (pending > 1 && budget - later >= 1 && want > budget - later) want = budget - later;
        want = hy_cut(s, r, r->n_computed, want);
        while (r && room(s, r) < want) {
            if (pending > 1 && hy_cut(s, r, r->n_computed, room(s, r)) >= 1) {
                want = hy_cut(s, r, r->n_computed, room(s, r));
            } else if (s->n_run - 1 > i) {
                preempt(s, s->run[s->n_run - 1]);
            } else if (i > 0) {
                preempt(s, r);
                r = NULL;
            } else { /* alone, and it holds every block */
                finish(s, r, MOE8_FINISH_CONTEXT, 1, NULL, MOE8_OK, NULL);
                r = NULL;
            }
        }
        if (!r) break;
        want = hy_cut(s, r, r->n_computed, fit_rows(s, r, want));
        if (want < 1) continue; /* no logits row (or chunk edge) left this step */
        batch_add(s, r, want);
        budget -= want;
    }
    return budget;
}

static void schedule_waiting(moe8_sched *s, int32_t budget) {
    while (s->wait_head && budget > 0 && s->n_run < s->max_running && !s->preempted) {
        rq *r = s->wait_head;
        int32_t m = 0, ref0 = 0, cached, want, need;
        const int groups = moe8_context_kv_groups(s->ctx);
        int32_t lim = r->n_tok - 1; /* the last token is computed for its logits */
        if (lim > r->plog_done) lim = r->plog_done; /* its prompt logits must be computed */
        if (s->hybrid && lim > r->n_prompt - 2) lim = r->n_prompt - 2; /* hy_cut */
        m = moe8_context_prefix_match(s->ctx, r->tok, lim, s->match);
        if (!r->disk_tried) { /* the disk tier, once: what memory lacks (SEMANTICS §10b) */
            r->disk_tried = 1;
            m = moe8_context_prefix_load(s->ctx, r->tok, lim, s->match, m);
        }
        ref0 = moe8_context_kv_unheld(s->ctx, s->match, m);
        cached = m * KV_BS;
        want = r->n_tok - cached < budget ? r->n_tok - cached : budget;
        r->n_computed = cached; /* for fit_rows; set for good below */
        want = hy_cut(s, r, cached, fit_rows(s, r, want));
        r->n_computed = 0;
        if (groups > 1) { /* a first chunk the pool can hold (it may be the whole prompt) */
            const int32_t most = (m + (moe8_context_kv_available(s->ctx) - ref0) / groups) * KV_BS;
            if (want > most - cached) want = most - cached;
        }
        need = ((cached + want + KV_BS - 1) / KV_BS - m) * groups;
        if (want < 1 || need + ref0 > moe8_context_kv_available(s->ctx) ||
            (s->hybrid && moe8_context_state_available(s->ctx) < 1))
            break; /* it waits (blocks, a state slot); nobody passes it */
        s->wait_head = r->next;
        if (!s->wait_head) s->wait_tail = NULL;
        r->next = NULL;
        r->seq = s->free_seq[--s->n_free_seq];
        r->state = RQ_RUNNING;
        s->run[s->n_run++] = r;
        MOE8_ASSERT(moe8_context_seq_attach(s->ctx, r->seq, s->match, m) == 0);
        r->n_computed = cached;
        if (!r->started) {
            r->started = 1;
            r->n_cached = cached < r->n_prompt ? cached : r->n_prompt;
            s->st.prefix_queries += r->n_prompt;
            s->st.prefix_hits += r->n_cached;
        }
        batch_add(s, r, want);
        budget -= want;
    }
}

/* ---- after the forward -------------------------------------------------------------- */

static int is_stop(const moe8_sched *s, const rq *r, int32_t tok) {
    for (int32_t i = 0; i < r->n_stop_ids; i++)
        if (r->stop_ids[i] == tok) return 1;
    for (int32_t i = 0; !r->ignore_eos && i < s->n_eos; i++)
        if (s->eos[i] == tok) return 1;
    return 0;
}

/* The bytes of token t as the output holds them (special tokens' text too). */
static const char *token_bytes(const moe8_sched *s, int32_t t, size_t *n) {
    const char *b = s->tok ? moe8_tokenizer_token_bytes(s->tok, t, n, NULL) : moe8_grammar_vocab_token(s->gv, t, n);
    if (!b) *n = 0;
    return b ? b : "";
}

/* r's grammar waits for r->g_after: token t's bytes follow the tail of the
 * output. At the first occurrence (which may begin in the tail: a string
 * split over tokens) the grammar starts, fed the bytes of t after it; else
 * the tail keeps the output's last n_g_after - 1 bytes. */
static void grammar_wait(const moe8_sched *s, rq *r, int32_t t) {
    const size_t m = r->n_g_after, keep = m - 1;
    size_t n, end = 0;
    const char *b = token_bytes(s, t, &n), *hit;
    int found = 0;
    /* an occurrence ending in t after j bytes of the tail: the earliest end wins */
    for (size_t j = r->n_g_tail < keep ? r->n_g_tail : keep; j > 0 && !found; j--)
        if (n >= m - j && !memcmp(r->g_tail + r->n_g_tail - j, r->g_after, j) &&
            !memcmp(b, r->g_after + j, m - j))
            found = 1, end = m - j;
    if (!found && n >= m && (hit = memmem(b, n, r->g_after, m))) found = 1, end = (size_t)(hit - b) + m;
    if (found) {
        free(r->g_after);
        free(r->g_tail);
        r->g_after = r->g_tail = NULL;
        if (end < n && moe8_grammar_accept_bytes(r->gs, b + end, n - end, NULL) != MOE8_OK) r->g_stuck = 2;
        return;
    }
    if (n >= keep) {
        memcpy(r->g_tail, b + n - keep, keep);
        r->n_g_tail = keep;
    } else {
        const size_t old = r->n_g_tail + n > keep ? keep - n : r->n_g_tail;
        memmove(r->g_tail, r->g_tail + r->n_g_tail - old, old);
        memcpy(r->g_tail + old, b, n);
        r->n_g_tail = old + n;
    }
}

/* Rank 0 draws the next token of every request whose tokens are all
 * computed (and that may still generate); the others take its tokens. */
static moe8_status sample(moe8_sched *s, moe8_error *err) {
    const int rank0 = s->rank == 0;
    int32_t k = 0;
    for (int32_t j = 0; j < s->n_brq; j++) {
        rq *r = s->b_rq[j];
        const float *logits;
        if (s->b_row[j] < 0 || r->n_gen >= r->max_tokens) continue;
        logits = moe8_context_logits(s->ctx, s->b_row[j]);
        if (rank0 && moe8_logits_needed(&r->proc, r->gs && !r->g_after, r->n_gen)) {
            /* a copy, processed: the raw logits stay for log-probs */
            const logits_input in = {.tok = r->tok, .n_tok = r->n_tok, .n_prompt = r->n_prompt,
                                     .n_gen = r->n_gen, .stop_ids = r->stop_ids,
                                     .n_stop_ids = r->n_stop_ids, .gs = r->g_after ? NULL : r->gs};
            logits = moe8_logits_process(&r->proc, &in, logits, s->n_vocab, s->eos, s->n_eos, s->gv, &s->lp);
        }
        s->sampled[k] = rank0 ? moe8_sampler_draw(s->smp, &r->sp, r->rng, logits) : 0;
        if (rank0 && r->gs && r->g_after) grammar_wait(s, r, s->sampled[k]);
        else if (rank0 && r->gs && moe8_grammar_accept(r->gs, s->gv, s->sampled[k], NULL) != MOE8_OK)
            r->g_stuck = 1; /* nothing could continue it: ended in take_tokens */
        k++;
    }
    if (s->n_ranks > 1 && k > 0) return moe8_dist_bcast_tokens(s->dist, s->sampled, k, NULL, err);
    return MOE8_OK;
}

static void take_tokens(moe8_sched *s) {
    const double t = moe8_time_s();
    int32_t k = 0;
    for (int32_t j = 0; j < s->n_brq; j++) {
        rq *r = s->b_rq[j];
        const float *logits;
        int32_t tok;
        int rc;
        if (r->plog_done < r->n_prompt) { /* its prompt logits, in position order */
            int32_t lo, hi;
            plog_range(r, r->n_computed, s->b_chunk[j], &lo, &hi);
            for (int32_t p = lo; p < hi; p++) {
                moe8_event *e = moe8_ev_push(&s->ev, MOE8_EVENT_PROMPT_LOGITS, r);
                if (!e) break;
                e->pos = p;
                e->token = r->tok[p];
                e->logits = moe8_context_logits(s->ctx, s->b_first[j] + (p - r->n_computed));
                if (moe8_rq_prompt_logprob(&s->ev, r, e, e->logits, s->n_vocab)) break;
            }
            r->plog_done = hi > r->plog_done ? hi : r->plog_done;
        }
        r->n_computed += s->b_chunk[j];
        if (s->b_row[j] < 0) continue;
        logits = moe8_context_logits(s->ctx, s->b_row[j]);
        if (r->n_gen >= r->max_tokens) {
            finish(s, r, MOE8_FINISH_LENGTH, 1, logits, MOE8_OK, NULL);
            continue;
        }
        tok = s->sampled[k++];
        if (r->g_stuck) {
            finish(s, r, MOE8_FINISH_ERROR, 1, NULL, MOE8_ERR_INVALID_ARG, r->g_stuck == 1 ?
                   "no token can continue the request's grammar" : "the token that completed the "
                   "request's grammar_after goes on with text its grammar refuses");
            continue;
        }
        if (is_stop(s, r, tok)) {
            finish(s, r, MOE8_FINISH_STOP, 1, NULL, MOE8_OK, NULL);
            continue;
        }
        if ((rc = moe8_rq_token(&s->ev, r, tok, logits, s->n_vocab)) < 0) {
            finish(s, r, MOE8_FINISH_ERROR, 0, NULL, MOE8_ERR_NOMEM, "out of memory for its output");
            continue;
        }
        if (r->ttft < 0) r->ttft = t - r->t_add;
        if (rc == 1) finish(s, r, MOE8_FINISH_STOP, 0, NULL, MOE8_OK, NULL);
        else if (r->n_gen >= r->max_tokens) finish(s, r, MOE8_FINISH_LENGTH, 1, NULL, MOE8_OK, NULL);
        else if (r->n_computed >= s->n_ctx) finish(s, r, MOE8_FINISH_CONTEXT, 1, NULL, MOE8_OK, NULL);
    }
}

moe8_status moe8_sched_step(moe8_sched *s, const moe8_event **events, int32_t *n_events,
                            moe8_error *err) {
    moe8_status st = MOE8_OK;
    if (events) *events = NULL;
    if (n_events) *n_events = 0;
    if (!s) return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "scheduler: NULL");
    s->ev.n = 0;
    s->ev.n_text = s->ev.n_top = 0;
    s->n_b = s->n_brq = s->n_rows = 0;
    s->preempted = 0;
    report_cancels(s);
    schedule_waiting(s, schedule_running(s, s->max_batch));
    if (s->n_b > 0) {
        const moe8_batch b = {s->n_b, s->b_tok, s->b_pos, s->b_seq, s->b_lg};
        s->st.n_steps++;
        st = moe8_decode(s->ctx, &b, &s->fail);
        if (!st) st = sample(s, &s->fail);
        if (!st) {
            take_tokens(s);
        } else {
            for (int32_t j = 0; j < s->n_brq; j++)
                finish(s, s->b_rq[j], MOE8_FINISH_ERROR, 1, NULL, st, s->fail.message);
            if (err) *err = s->fail;
        }
    }
    moe8_ev_finalize(&s->ev);
    if (events) *events = s->ev.ev;
    if (n_events) *n_events = s->ev.n;
    return st;
}
