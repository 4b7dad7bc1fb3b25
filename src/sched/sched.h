/*
 * sched.h — internal: the scheduler's request state (sched.c steps them,
 * request.c turns their tokens into events: text, stop strings,
 * log-probabilities).
 */
#ifndef MOE8_SCHED_H
#define MOE8_SCHED_H

#include <stddef.h>
#include <stdint.h>

#include "core/public.h"
#include "sample/logits.h"

typedef enum { RQ_WAITING = 0, RQ_RUNNING = 1, RQ_DONE = 2 } rq_state;

typedef struct rq {
    int64_t id;
    void *user;
    rq_state state;
    int cancel;                 /* moe8_sched_cancel asked; reported at the next step */
    int32_t seq;                /* context sequence while running, else -1 */
    int32_t *tok;               /* [cap_tok] prompt, then generated ids */
    int32_t n_tok, cap_tok;
    int32_t n_prompt, n_gen, max_tokens;
    int32_t n_computed;         /* tokens whose K/V is in the cache */
    int32_t n_cached;           /* prompt tokens from the prefix cache at its first start */
    int started;                /* has run at least once (n_cached is set) */
    int disk_tried;             /* its prefix was looked up in the disk tier (once) */
    moe8_sampler_params sp;
    uint64_t rng[4];            /* its own generator */
    int32_t *stop_ids, n_stop_ids;
    char **stop;                /* [n_stop] NUL-terminated copies */
    int32_t n_stop;
    int32_t logprobs;           /* -1 or 0..MOE8_MAX_LOGPROBS */
    int ignore_eos;
    int32_t plog_from;          /* prompt positions from here get PROMPT_LOGITS events */
    int32_t plog_done;          /* ... those before this were sent (recompute sends none) */
    moe8_detok *detok;          /* NULL without a tokenizer */
    char *held;                 /* text decoded but not released (could start a stop string) */
    size_t n_held, cap_held;
    double t_add, ttft;         /* seconds (monotonic); ttft -1 until the first token */
    logits_procs proc;          /* its logits processors' settings (sample/logits.c) */
    struct grammar_state *gs;   /* its position in its grammar, or NULL (rank 0 only) */
    int g_stuck;                /* the grammar refused the token drawn (1), or the bytes after
                                 * g_after in the token that completed it (2): the request ends */
    char *g_after;              /* the grammar waits until the output holds this (NUL-ended;
                                 * NULL: it is active, or there is none) */
    size_t n_g_after;
    char *g_tail;               /* [n_g_after - 1] the output's last bytes while it waits */
    size_t n_g_tail;
    struct rq *next;            /* waiting queue */
} rq;

/* The step's events and the storage their text and alternatives live in. */
typedef struct {
    moe8_event *ev;
    int32_t n, cap;
    char *text;                 /* every event's text, by offset until the step ends */
    size_t n_text, cap_text;
    moe8_logprob *top;          /* every event's alternatives, by offset */
    size_t n_top, cap_top;
    size_t *text_off, *top_off; /* [cap] offsets of event i */
} ev_buf;

/* The public grammar types are grammar/grammar.h's. */
#define G_OF(p) ((const struct grammar *)(const void *)(p))
#define G_VOCAB(p) ((const struct grammar_vocab *)(const void *)(p))

/* request.c */
moe8_event *moe8_ev_push(ev_buf *b, moe8_event_type type, const rq *r);
/* Pointers of every event of the step into its storage. */
void moe8_ev_finalize(ev_buf *b);
void moe8_ev_free(ev_buf *b);

/* A sampled token `tok` of r (not a stop id): appended to r->tok, its text
 * through the detokenizer and the stop strings, its log-probabilities from
 * logits[n_vocab] when asked. Returns 1 when a stop string matched (the text
 * before it was released with this event), 0 otherwise, -1 out of memory. */
int moe8_rq_token(ev_buf *b, rq *r, int32_t tok, const float *logits, int32_t n_vocab);
/* A PROMPT_LOGITS event e of r (e->pos set) with logits[n_vocab]: when r
 * asks for log-probs, the log-probability those logits give the prompt token
 * at pos + 1 and its best alternatives. 0, or -1 out of memory. */
int moe8_rq_prompt_logprob(ev_buf *b, const rq *r, moe8_event *e, const float *logits, int32_t n_vocab);
/* The text r still holds, released into a FINISH event `e` (the detokenizer
 * is flushed). */
int moe8_rq_flush_text(ev_buf *b, rq *r, moe8_event *e);
/* Free everything r owns, and r. */
void moe8_rq_free(rq *r);

#endif
