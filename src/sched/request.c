/*
 * request.c — what a request's tokens become: events with their text and
 * log-probabilities (SEMANTICS §10).
 *
 * Text: each token goes through the request's streaming detokenizer, which
 * hands back whole UTF-8 characters only. The text is appended to `held`;
 * then, when a stop string occurs in held, the text before its first
 * occurrence is released and the request ends (the stop string and anything
 * after it are dropped); otherwise everything is released except the
 * longest tail of held that is a proper prefix of some stop string — text
 * that may still turn into a stop string is never shown in part. Without
 * stop strings every character is released at once.
 *
 * Log-probabilities: log-softmax of the fp32 logits, log p_i = l_i - m -
 * log(sum_j exp(l_j - m)) with m the largest logit, the sum in double; the
 * alternatives are the n largest logits, ties to the lower id.
 *
 * The step's events keep their text and alternatives in two growing arrays
 * of the ev_buf, by offset, and get their pointers when the step ends
 * (moe8_ev_finalize), so growing an array never leaves a dangling pointer.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "kernels/kernels.h"
#include "grammar/grammar.h"
#include "sched/sched.h"

/* ---- event storage ----------------------------------------------------------- */

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    size_t n = *cap ? *cap : 64;
    void *q;
    if (need <= *cap) return 0;
    while (n < need) n *= 2;
    if (!(q = realloc(*p, n * elem))) return -1;
    *p = q;
    *cap = n;
    return 0;
}

moe8_event *moe8_ev_push(ev_buf *b, moe8_event_type type, const rq *r) {
    moe8_event *e;
    if (b->n == b->cap) {
        int32_t cap = b->cap ? 2 * b->cap : 64;
        void *p;
        if (!(p = realloc(b->ev, (size_t)cap * sizeof *b->ev))) return NULL;
        b->ev = p;
        if (!(p = realloc(b->text_off, (size_t)cap * sizeof *b->text_off))) return NULL;
        b->text_off = p;
        if (!(p = realloc(b->top_off, (size_t)cap * sizeof *b->top_off))) return NULL;
        b->top_off = p;
        b->cap = cap;
    }
    e = &b->ev[b->n];
    memset(e, 0, sizeof *e);
    e->type = type;
    e->request = r->id;
    e->user = r->user;
    e->token = -1;
    e->logprob = NAN;
    b->text_off[b->n] = b->n_text;
    b->top_off[b->n] = b->n_top;
    b->n++;
    return e;
}

static int text_add(ev_buf *b, const char *s, size_t n) {
    if (grow((void **)&b->text, &b->cap_text, b->n_text + n + 1, 1)) return -1;
    memcpy(b->text + b->n_text, s, n);
    b->n_text += n;
    return 0;
}

/* Token (and prompt-logits) events first, then finishes (moe8.h), each kind in the order it
 * came: finishes are pushed as they happen (cancels before the batch, a
 * request's end right after its token), so move each token event up past
 * the finishes before it. */
static void tokens_first(ev_buf *b) {
    for (int32_t i = 0, t = 0; i < b->n; i++) {
        moe8_event e;
        size_t to, po;
        if (b->ev[i].type == MOE8_EVENT_FINISH) continue;
        if (i > t) {
            e = b->ev[i];
            to = b->text_off[i];
            po = b->top_off[i];
            memmove(b->ev + t + 1, b->ev + t, (size_t)(i - t) * sizeof *b->ev);
            memmove(b->text_off + t + 1, b->text_off + t, (size_t)(i - t) * sizeof *b->text_off);
            memmove(b->top_off + t + 1, b->top_off + t, (size_t)(i - t) * sizeof *b->top_off);
            b->ev[t] = e;
            b->text_off[t] = to;
            b->top_off[t] = po;
        }
        t++;
    }
}

void moe8_ev_finalize(ev_buf *b) {
    tokens_first(b);
    for (int32_t i = 0; i < b->n; i++) {
        moe8_event *e = &b->ev[i];
        e->text = b->text ? b->text + b->text_off[i] : "";
        e->top = b->top ? b->top + b->top_off[i] : NULL;
    }
}

void moe8_ev_free(ev_buf *b) {
    free(b->ev);
    free(b->text);
    free(b->top);
    free(b->text_off);
    free(b->top_off);
    memset(b, 0, sizeof *b);
}

/* ---- log-probabilities -------------------------------------------------------- */

static int logprobs(ev_buf *b, moe8_event *e, int n_top, int32_t tok, const float *logits,
                    int32_t V) {
    moe8_logprob *top;
    const float mx = moe8_max_f32(logits, V);
    const double lse = (double)mx + log(moe8_exp_sum(NULL, logits, V, mx, 1.0f));
    int n = 0;
    e->logprob = (float)((double)logits[tok] - lse);
    if (n_top > V) n_top = V;
    if (grow((void **)&b->top, &b->cap_top, b->n_top + (size_t)n_top, sizeof *b->top)) return -1;
    top = b->top + b->n_top;
    for (int32_t i = 0; i < V && n_top > 0; i++) { /* insertion into the n best; ties: lower id */
        int j;
        if (n == n_top && !(logits[i] > top[n - 1].logprob)) continue;
        j = n < n_top ? n++ : n - 1;
        while (j > 0 && logits[i] > top[j - 1].logprob) {
            top[j] = top[j - 1];
            j--;
        }
        top[j].token = i;
        top[j].logprob = logits[i];
    }
    for (int j = 0; j < n; j++) top[j].logprob = (float)((double)top[j].logprob - lse);
    b->n_top += (size_t)n;
    e->n_top = n;
    return 0;
}

/* ---- text and stop strings ---------------------------------------------------- */

static int held_add(rq *r, const char *s, size_t n) {
    if (grow((void **)&r->held, &r->cap_held, r->n_held + n + 1, 1)) return -1;
    memcpy(r->held + r->n_held, s, n);
    r->n_held += n;
    return 0;
}

static void held_drop(rq *r, size_t n) {
    memmove(r->held, r->held + n, r->n_held - n);
    r->n_held -= n;
}

/* First occurrence of a stop string in held: its offset, or -1. */
static ptrdiff_t stop_match(const rq *r) {
    ptrdiff_t best = -1;
    for (int32_t i = 0; i < r->n_stop; i++) {
        size_t m = strlen(r->stop[i]);
        for (size_t at = 0; at + m <= r->n_held; at++)
            if (!memcmp(r->held + at, r->stop[i], m)) {
                if (best < 0 || (ptrdiff_t)at < best) best = (ptrdiff_t)at;
                break;
            }
    }
    return best;
}

/* Bytes of held that may be released: all but the longest tail that is a
 * proper prefix of a stop string. */
static size_t releasable(const rq *r) {
    size_t keep = 0;
    for (int32_t i = 0; i < r->n_stop; i++) {
        size_t m = strlen(r->stop[i]);
        for (size_t k = m - 1 < r->n_held ? m - 1 : r->n_held; k > keep; k--)
            if (!memcmp(r->held + r->n_held - k, r->stop[i], k)) {
                keep = k;
                break;
            }
    }
    return r->n_held - keep;
}

int moe8_rq_token(ev_buf *b, rq *r, int32_t tok, const float *logits, int32_t n_vocab) {
    moe8_event *e = moe8_ev_push(b, MOE8_EVENT_TOKEN, r);
    int stopped = 0;
    if (!e) return -1;
    e->token = tok;
    e->logits = logits;
    MOE8_ASSERT(r->n_tok < r->cap_tok);
    r->tok[r->n_tok++] = tok;
    r->n_gen++;
    if (r->logprobs >= 0 && logprobs(b, e, r->logprobs, tok, logits, n_vocab)) return -1;
    if (r->detok) {
        const char *s = "";
        size_t n = 0, out;
        ptrdiff_t at;
        if (moe8_detok_feed(r->detok, tok, &s, &n, NULL) != MOE8_OK) n = 0; /* no text for it */
        if (held_add(r, s, n)) return -1;
        if ((at = stop_match(r)) >= 0) {
            out = (size_t)at;
            stopped = 1;
        } else {
            out = releasable(r);
        }
        if (text_add(b, r->held, out)) return -1;
        e->text_len = out;
        if (stopped) r->n_held = 0;
        else held_drop(r, out);
    }
    return stopped;
}

int moe8_rq_prompt_logprob(ev_buf *b, const rq *r, moe8_event *e, const float *logits, int32_t n_vocab) {
    if (r->logprobs < 0 || e->pos + 1 >= r->n_prompt) return 0;
    return logprobs(b, e, r->logprobs, r->tok[e->pos + 1], logits, n_vocab);
}

int moe8_rq_flush_text(ev_buf *b, rq *r, moe8_event *e) {
    const char *s;
    size_t n;
    if (!r->detok) return 0;
    moe8_detok_flush(r->detok, &s, &n);
    if (held_add(r, s, n) || text_add(b, r->held, r->n_held)) return -1;
    e->text_len = r->n_held;
    r->n_held = 0;
    return 0;
}

void moe8_rq_free(rq *r) {
    if (!r) return;
    for (int32_t i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->stop);
    free(r->stop_ids);
    free(r->tok);
    moe8_logits_procs_free(&r->proc);
    moe8_grammar_state_free(r->gs);
    free(r->g_after);
    free(r->g_tail);
    free(r->held);
    moe8_detok_free(r->detok);
    free(r);
}
