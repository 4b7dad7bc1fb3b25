/*
 * generate.h — what the files of `moe8 generate` share (internal to tools/):
 * the parsed options, the prompts, and the runner that turns the scheduler's
 * events into output. cmd_generate.c parses the flags and opens the model,
 * generate_prompts.c reads and tokenizes the prompts, generate_run.c runs them
 * as requests of one scheduler, generate_output.c prints what they give.
 */
#ifndef MOE8_TOOLS_GENERATE_H
#define MOE8_TOOLS_GENERATE_H

#include <limits.h>
#include <stdint.h>

#include "cli.h"

#define CMD "generate"
#define DEFAULT_N_PREDICT 64
#define DEFAULT_N_CTX 4096
#define MAX_N_BATCH 4096 /* most prompt tokens per forward pass */

typedef struct {
    const char *dir, *text, *file, *prompt_ids, *ids_file, *dump, *chat_kwargs;
    char dump_real[PATH_MAX + 256]; /* dump's canonical path (check_dump_path) */
    int64_t n_predict, n_ctx, kv_mb, state_mb, max_batch;
    int ctx_set, chat, ignore_eos, print_ids, float_experts, n_threads, tp, expert_parallel;
    moe8_dtype kv_type;
    moe8_sampler_params sp;
    float comm_timeout; /* seconds, 0 = none */
    const char *pc_dir; /* --prompt-cache-dir, or NULL */
    double pc_gb;       /* --prompt-cache-gb */
} opts;

/* ======================================================================== */

typedef struct {
    int n;              /* prompts */
    char **text;        /* [n] NUL-terminated, or NULL with --prompt-ids */
    int32_t **ids;      /* [n] token ids */
    int32_t *len;       /* [n] */
    int64_t n_tokens;   /* sum of len */
} prompts;


/* The prompts run as requests of one scheduler (moe8_sched): events drive
 * the output, rank 0 prints. */
typedef struct {
    const opts *o;
    const prompts *pr;
    moe8_dist *dist;
    int quiet;             /* ranks other than 0 print nothing */
    moe8_context *ctx;
    moe8_sched *sched;
    int32_t stop[MOE8_MAX_STOP_IDS + 1]; /* eos ids: the model's + <|im_end|> */
    int n_stop;
    int32_t n_ctx;
    int32_t *count;        /* [n_seq] tokens generated */
    int32_t *fin;          /* [n_seq] moe8_finish, 0 while running */
    int32_t *out;          /* [n_seq][cap_out] generated ids (--ids batch) */
    int32_t cap_out;
    int n_started;         /* prompts with their first token (or ended) */
    char **text;           /* [n_seq] batch: each completion's text so far */
    size_t *text_len, *text_cap;
} runner;

/* ---- prompts (generate_prompts.c) ---- */

/* The prompts as given: text (-p, -f) or ids (--prompt-ids, --prompt-ids-file);
 * 0, or -1 after a message. */
int gen_read_prompts(const opts *o, prompts *p);
/* Text prompts to ids (the chat template with --chat, else BOS when the
 * tokenizer asks); nothing for id prompts. */
int gen_tokenize_prompts(const opts *o, const moe8_tokenizer *tok, prompts *p);
/* Every prompt is non-empty, fits the context and uses ids of the model. */
int gen_check_prompts(const prompts *p, int64_t n_ctx, int64_t n_vocab);
void gen_prompts_free(prompts *p);

/* ---- output (generate_output.c) ---- */

int gen_runner_alloc(runner *r);
void gen_runner_free(runner *r);
/* A token, the end of prompt i: streamed (one prompt) or kept for its completion. */
void gen_on_token(runner *r, int i, const moe8_event *e);
void gen_on_finish(runner *r, int i, const moe8_event *e);
/* --ids with a batch: one line per prompt, in prompt order. */
void gen_print_ids_batch(const runner *r);
/* --dump-logits: the checks before loading (fills o->dump_real), and the write. */
int gen_check_dump_path(opts *o);
int gen_dump_logits(const char *shown, const char *path, const float *logits, int32_t n_vocab);
/* With --tp: every rank's memory and time in collectives, one line from rank 0. */
int gen_print_rank_memory(moe8_dist *d);
/* The final stats line (stderr). */
void gen_print_stats(double load_s, const prompts *p, double prefill_s, const runner *r,
                     int64_t n_first, double decode_s);

/* ---- running (generate_run.c) ---- */

/* Every prompt to its end on the opened model; the stats after. t0: when loading began. */
int gen_run(const opts *o, moe8_dist *d, moe8_model *m, moe8_tokenizer *tok, prompts *p, double t0);

#endif
