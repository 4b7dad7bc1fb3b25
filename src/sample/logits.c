/*
 * logits.c — a request's logits processors (moe8_request's grammar,
 * logit_bias, min_tokens, repetition / frequency / presence penalties),
 * applied on rank 0 to a copy of the logits before each draw, in vLLM's
 * order: the grammar's mask (-inf for every token that cannot continue it;
 * none while the grammar waits for its grammar_after string), the bias, the
 * min_tokens ban (unless the grammar must end there), then the penalties (repetition over the prompt and the output, then frequency and
 * presence over the output); -inf stays -inf through each. The raw logits stay
 * what log-probs and events report. Each request's processing depends only
 * on its own tokens: batch invariance holds.
 *
 *   repetition p:  x > 0 ? x / p : x * p        for every distinct token of prompt + output
 *   frequency f:   x - f * count_out(t)
 *   presence  q:   x - q * [count_out(t) > 0]
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "grammar/grammar.h"
#include "sample/logits.h"

moe8_status moe8_check_processors(const moe8_request *r, int32_t n_vocab, moe8_error *err) {
    if (r->n_bias < 0 || (r->n_bias && (!r->bias_ids || !r->bias)))
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "request: n_bias %d without ids or values",
                         r->n_bias);
    for (int32_t i = 0; i < r->n_bias; i++) {
        if (r->bias_ids[i] < 0 || r->bias_ids[i] >= n_vocab)
            return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "request: logit bias %d: token id %d not "
                             "in [0, %d)", i, r->bias_ids[i], n_vocab);
        if (!isfinite(r->bias[i]))
            return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "request: logit bias %d of token %d is "
                             "not finite", i, r->bias_ids[i]);
    }
    if (r->min_tokens < 0 || r->min_tokens > r->max_tokens)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "request: min_tokens %d must be in [0, "
                         "max_tokens %d]", r->min_tokens, r->max_tokens);
    if (!(r->repetition_penalty > 0.0f) || !isfinite(r->repetition_penalty))
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "request: repetition_penalty %g must be > 0 "
                         "(1 = off)", (double)r->repetition_penalty);
    if (!isfinite(r->frequency_penalty) || !isfinite(r->presence_penalty))
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "request: frequency_penalty %g and "
                         "presence_penalty %g must be finite", (double)r->frequency_penalty,
                         (double)r->presence_penalty);
    return MOE8_OK;
}

int moe8_logits_procs_copy(logits_procs *p, const moe8_request *q) {
    p->n_bias = q->n_bias;
    if (q->n_bias) {
        p->bias_ids = malloc((size_t)q->n_bias * sizeof *p->bias_ids);
        p->bias = malloc((size_t)q->n_bias * sizeof *p->bias);
        if (!p->bias_ids || !p->bias) return -1;
        memcpy(p->bias_ids, q->bias_ids, (size_t)q->n_bias * sizeof *p->bias_ids);
        memcpy(p->bias, q->bias, (size_t)q->n_bias * sizeof *p->bias);
    }
    p->min_tokens = q->min_tokens;
    p->rep_penalty = q->repetition_penalty;
    p->freq_penalty = q->frequency_penalty;
    p->pres_penalty = q->presence_penalty;
    return 0;
}

void moe8_logits_procs_free(logits_procs *p) {
    free(p->bias_ids);
    free(p->bias);
    p->bias_ids = NULL, p->bias = NULL, p->n_bias = 0;
}

int moe8_logits_needed(const logits_procs *p, int grammar_active, int32_t n_gen) {
    return grammar_active || p->n_bias > 0 || n_gen < p->min_tokens || p->rep_penalty != 1.0f ||
           p->freq_penalty != 0.0f || p->pres_penalty != 0.0f;
}

void moe8_logits_scratch_free(logits_scratch *w) {
    free(w->logits);
    free(w->mark);
    free(w->count);
    free(w->allowed);
    memset(w, 0, sizeof *w);
}

/* Grow the scratch to n_vocab logits and marks. */
static int scratch(logits_scratch *w, int32_t n_vocab) {
    if (w->n >= n_vocab) return 0;
    moe8_logits_scratch_free(w);
    w->logits = malloc((size_t)n_vocab * sizeof *w->logits);
    w->mark = calloc((size_t)n_vocab, 1);
    w->count = calloc((size_t)n_vocab, sizeof *w->count);
    w->allowed = malloc(((size_t)n_vocab + 31) / 32 * sizeof *w->allowed);
    if (!w->logits || !w->mark || !w->count || !w->allowed) {
        moe8_logits_scratch_free(w);
        return -1;
    }
    w->n = n_vocab;
    return 0;
}

const float *moe8_logits_process(const logits_procs *p, const logits_input *r, const float *in,
                                 int32_t n_vocab, const int32_t *eos, int32_t n_eos,
                                 const struct grammar_vocab *gv, logits_scratch *w) {
    float *x;
    const int32_t *out = r->tok + r->n_prompt;
    const int32_t n_out = r->n_tok - r->n_prompt;
    if (scratch(w, n_vocab)) return in; /* out of memory: unprocessed rather than nothing */
    x = w->logits;
    memcpy(x, in, (size_t)n_vocab * sizeof *x);
    if (r->gs) { /* 32 tokens a word: a word of zeros bans them all at once */
        moe8_grammar_mask(r->gs, gv, w->allowed);
        for (int32_t b = 0; b < (n_vocab + 31) / 32; b++) {
            const uint32_t m = w->allowed[b];
            const int32_t t0 = b * 32, t1 = t0 + 32 < n_vocab ? t0 + 32 : n_vocab;
            if (m == 0xFFFFFFFFu) continue;
            for (int32_t t = t0; t < t1; t++)
                if (!(m >> (t - t0) & 1u)) x[t] = -INFINITY;
        }
    }
    for (int32_t i = 0; i < p->n_bias; i++) x[p->bias_ids[i]] += p->bias[i];
    if (r->n_gen < p->min_tokens && !(r->gs && moe8_grammar_can_end(r->gs) == 2)) {
        for (int32_t i = 0; i < n_eos; i++)
            if (eos[i] >= 0 && eos[i] < n_vocab) x[eos[i]] = -INFINITY;
        for (int32_t i = 0; i < r->n_stop_ids; i++)
            if (r->stop_ids[i] >= 0 && r->stop_ids[i] < n_vocab) x[r->stop_ids[i]] = -INFINITY;
    }
    if (p->rep_penalty != 1.0f) { /* each distinct token of prompt + output once */
        const float rp = p->rep_penalty;
        for (int32_t i = 0; i < r->n_tok; i++) {
            const int32_t t = r->tok[i];
            if (w->mark[t]) continue;
            w->mark[t] = 1;
            x[t] = x[t] > 0 ? x[t] / rp : x[t] * rp;
        }
        for (int32_t i = 0; i < r->n_tok; i++) w->mark[r->tok[i]] = 0;
    }
    if (p->freq_penalty != 0.0f || p->pres_penalty != 0.0f) { /* as vLLM: x - f * count, then - q */
        for (int32_t i = 0; i < n_out; i++) w->count[out[i]]++;
        for (int32_t i = 0; i < n_out; i++) {
            const int32_t t = out[i];
            if (!w->count[t]) continue;
            x[t] = x[t] - p->freq_penalty * (float)w->count[t];
            x[t] = x[t] - p->pres_penalty;
            w->count[t] = 0;
        }
    }
    return x;
}
