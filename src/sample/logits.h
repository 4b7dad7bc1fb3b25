/*
 * logits.h — internal: a request's logits processors (logits.c). The
 * scheduler's request embeds a logits_procs (its settings, copied from its
 * moe8_request) and passes what a draw reads of the request besides them
 * (logits_input); the scheduler owns one logits_scratch for all draws.
 */
#ifndef MOE8_SAMPLE_LOGITS_H
#define MOE8_SAMPLE_LOGITS_H

#include <stdint.h>

#include "core/public.h"

struct grammar_state;
struct grammar_vocab;

/* A request's processor settings (the arrays its own copies). */
typedef struct {
    int32_t *bias_ids, n_bias;  /* [n_bias] logit_bias: token ids, */
    float *bias;                /* [n_bias] and the values added to their logits */
    int32_t min_tokens;         /* EOS and stop ids banned before this many outputs */
    float rep_penalty, freq_penalty, pres_penalty;
} logits_procs;

/* What one draw's processing reads of its request besides the settings. */
typedef struct {
    const int32_t *tok;         /* [n_tok] the prompt, then the output so far */
    int32_t n_tok, n_prompt;
    int32_t n_gen;              /* outputs so far (min_tokens) */
    const int32_t *stop_ids;    /* [n_stop_ids] banned with the EOS ids before min_tokens */
    int32_t n_stop_ids;
    struct grammar_state *gs;   /* the request's grammar while it is active, or NULL */
} logits_input;

typedef struct {
    float *logits;              /* [n] the processed copy */
    uint32_t *allowed;          /* [(n + 31) / 32] a grammar's mask */
    unsigned char *mark;        /* [n] zero between calls */
    int32_t *count;             /* [n] zero between calls */
    int32_t n;
} logits_scratch;

/* r's processor settings checked against a vocabulary of n_vocab ids. */
moe8_status moe8_check_processors(const moe8_request *r, int32_t n_vocab, moe8_error *err);
/* Copy q's processor settings into p (zeroed): 0, or -1 out of memory (free
 * p with moe8_logits_procs_free either way). */
int moe8_logits_procs_copy(logits_procs *p, const moe8_request *q);
void moe8_logits_procs_free(logits_procs *p);
/* 1 when a draw with settings p, an active grammar or not, and n_gen outputs
 * so far needs processed logits. */
int moe8_logits_needed(const logits_procs *p, int grammar_active, int32_t n_gen);
/* in[n_vocab] processed for the next draw of request r with settings p (r's
 * grammar's mask over the vocabulary gv, bias, min_tokens over eos[n_eos] and
 * r's stop ids, penalties) into w's copy, which is returned (in itself
 * when w cannot grow: unprocessed rather than nothing). */
const float *moe8_logits_process(const logits_procs *p, const logits_input *r, const float *in,
                                 int32_t n_vocab, const int32_t *eos, int32_t n_eos,
                                 const struct grammar_vocab *gv, logits_scratch *w);
void moe8_logits_scratch_free(logits_scratch *w);

#endif
