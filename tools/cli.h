/*
 * cli.h — the moe8 command-line tool's subcommands and the helpers they share.
 * Each command lives in its own tools/cmd_*.c file (the larger ones with their
 * parts beside it: generate_*.c with generate.h, bench_serve_*.c with
 * bench_serve.h) and uses only the public headers (include/moe8*.h). A
 * subcommand returns the process exit status; results go to stdout, errors
 * (cli_err) and progress to stderr.
 */
#ifndef MOE8_CLI_H
#define MOE8_CLI_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>

#include "moe8.h"
#include "moe8_bench.h"
#include "moe8_dist.h"
#include "moe8_moe.h"
#include "moe8_safetensors.h"
#include "moe8_server.h"
#include "moe8_tools.h"

int cmd_inspect(int argc, char **argv);
int cmd_prompt_cache(int argc, char **argv); /* moe8 prompt-cache ls|verify|clear DIR */
int cmd_bench(int argc, char **argv);
int cmd_bench_sched(int argc, char **argv); /* moe8 bench sched */
int cmd_bench_serve(int argc, char **argv); /* moe8 bench serve */
int cmd_bench_forward(int argc, char **argv); /* moe8 bench forward */
int cmd_bench_grammar(int argc, char **argv); /* moe8 bench grammar */
int cmd_bench_sampler(int argc, char **argv); /* moe8 bench sampler */
int cmd_bench_prompt_cache(int argc, char **argv); /* moe8 bench prompt-cache */
int cmd_generate(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_make_model(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_export_gguf(int argc, char **argv); /* moe8 export-gguf */
int cmd_pull(int argc, char **argv);        /* moe8 pull (cmd_pull.c) */

/* ---- errors (cli_util.c) ----------------------------------------------------------------
 * The one way a command prints an error, as git does: "moe8 <cmd>: <message>"
 * on stderr, one line written by one call (cmd NULL: "moe8: <message>"); the
 * message is lowercase and names its subject. cli_err returns 1 (the exit
 * status of a failed command), cli_usage_err 2 (bad usage). */
int cli_err(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int cli_usage_err(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int cli_verr(const char *cmd, const char *fmt, va_list ap); /* cli_err's va_list twin */
/* cli_err for a failed library call: err's message (or its status's name); 1. */
int cli_fail(const char *cmd, const moe8_error *err);

/* A KV cache type flag value: "f32", "f16" or "bf16" -> 0 and *out, else -1. */
int cli_kv_type(const char *s, moe8_dtype *out);
/* A whole string that is a decimal integer in [lo, hi] (no sign, blanks or
 * suffix) -> 0 and *out, else -1. */
int cli_parse_int(const char *s, long lo, long hi, int *out);
/* The default of --threads (cli_opts.c): the CPUs the process may run on,
 * less one for `serve` from 4 of them up; 0 (the library's default) when
 * OMP_NUM_THREADS is set. */
int cli_default_threads(int serving);
/* A byte count: a positive decimal integer with an optional K, M or G
 * (binary) suffix -> 0 and *out, else -1. */
int cli_parse_size(const char *s, uint64_t *out);
/* Comma-separated such integers, at most cap of them: their count, or -1. */
int cli_parse_list(const char *s, long lo, long hi, int *out, int cap);

/* ---- options (cli_opts.c) ----------------------------------------------------------------
 * A command describes its options in one table, ended by {NULL}; cli_parse
 * fills their outputs, prints the usage generated from the table for -h/--help
 * (returns -1) and for an unknown option, and names the option, what it wants
 * and what it got for a bad value ("moe8 CMD: --threads wants an integer in
 * 1..4096, got '0'"; returns 2). */
typedef enum {
    CLI_FLAG,   /* out: int*, set to 1 */
    CLI_INT,    /* out: int*, a whole decimal integer in [lo, hi] */
    CLI_SIZE,   /* out: uint64_t*, cli_parse_size */
    CLI_STR,    /* out: const char** (into argv) */
    CLI_CHOICE, /* out: int*, the index of the value among choices ("a,b") */
    CLI_FLOAT,  /* out: float*, finite, in [dlo, dhi] ((dlo, dhi] with open_lo) */
    CLI_I64,    /* out: int64_t*, a whole decimal integer in [lo, hi] */
    CLI_DOUBLE, /* out: double*, as CLI_FLOAT; with dhi = INFINITY "inf" too */
    CLI_LIST,   /* out: int[cap], comma-separated integers in [lo, hi]; *count set */
    CLI_U64,    /* out: uint64_t*, a whole decimal integer in [lo, hi] (hi 0: UINT64_MAX) */
    CLI_KV,     /* out: moe8_dtype*, a KV cache type: f32, f16 or bf16 (cli_kv_type) */
} cli_kind;

typedef struct {
    const char *name;  /* "--threads" */
    const char *alias; /* "-t", or NULL */
    cli_kind kind;
    void *out;
    long lo, hi;         /* CLI_INT, CLI_U64 */
    double dlo, dhi;     /* CLI_FLOAT */
    int open_lo;         /* CLI_FLOAT: dlo itself refused */
    int *count, cap;     /* CLI_LIST: how many were given, at most cap */
    int *given;          /* set to 1 when the option appears; NULL: not needed */
    const char *choices; /* CLI_CHOICE */
    const char *arg;     /* the value's name in the usage: "N", "DIR" */
    const char *help;    /* its line(s) in the usage ('\n' continues, indented) */
} cli_opt;

int cli_parse(const char *cmd, const char *synopsis, const cli_opt *opts, const char *notes,
              int argc, char **argv);
/* "moe8 CMD: FLAG wants WANT, got 'GOT'" on stderr (the parser's format, for a
 * check made after parsing); returns 2. */
int cli_bad_value(const char *cmd, const char *flag, const char *want, const char *got);
/* --config FILE (cli_config.c): a JSON object, or FILE.toml's key = value
 * lines, as a cJSON object in *out (free with cJSON_Delete); 0, or 2 after
 * the error naming the file (and the line). */
struct cJSON;
int cli_config_read(const char *cmd, const char *path, struct cJSON **out);
/* The usage: the synopsis, a line per option from the table, then notes. */
void cli_usage(FILE *f, const char *synopsis, const cli_opt *opts, const char *notes);

/* qsort comparators in ascending order, and the median and p99 (the
 * element at rank floor(0.99 (n - 1))) of t[n], sorted here: the benches'
 * timing rows. */
int cli_cmp_double(const void *a, const void *b);
int cli_cmp_float(const void *a, const void *b);
void cli_median_p99(double *t, int n, double *median, double *p99);

/* Its spelling back: "f32", "f16", "bf16". */
const char *cli_kv_type_name(moe8_dtype t);

/* ---- the server's log (serve_log.c) ------------------------------------------------------
 * --log-level error|warn|info|debug (NULL: info), --log-format text|json
 * (NULL: text), --log-file FILE (NULL: stderr; appended): 0, or 2 / 1 after
 * the error. cli_log_record is a moe8_serve_record_fn; cli_log writes the
 * command's own lines the same way (kind "banner", "stop"). */
int cli_log_setup(const char *cmd, const char *level, const char *format, const char *file);
void cli_log_record(void *user, const moe8_serve_record *r);
void cli_log(moe8_log_level level, const char *kind, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void cli_log_close(void);

/* Route the library's warnings and errors (moe8_set_log) to stderr as
 * "moe8 <cmd>: <message>"; `cmd` must outlive the process's library calls. */
void cli_log_warnings(const char *cmd);

/* The packed-cache options every command that loads a model takes
 * (--cache-dir DIR, --no-cache, --no-mmap, --mlock; SEMANTICS §6c): main()
 * takes them out of argv before the command parses it; this copies them
 * into mp. */
void cli_model_opts(moe8_model_params *mp);

/* ---- start-up (cli_open.c) ---------------------------------------------------------------
 * What generate, perplexity, serve and pack share: the process group of --tp N,
 * the model folder checked, the tokenizer loaded on a second thread while the
 * model loads (with the packed-cache options) and, for generate, prepares. One
 * failure policy: a failed step prints its message once (a local step on its
 * rank, the model load, agreed by every rank, on rank 0); every rank learns of
 * it and cli_open returns 1 on every rank. cli_close, called after cli_open
 * whatever it returned, frees what it opened and ends a broken group (a rank
 * that stopped answering) with moe8_dist_abort. */
typedef enum {
    CLI_TOK_NONE,       /* no tokenizer */
    CLI_TOK_IF_PRESENT, /* loaded when DIR/tokenizer.json exists */
    CLI_TOK_REQUIRED,   /* loaded, or the start-up fails */
} cli_tok_need;

typedef struct cli_session {
    moe8_dist *dist;     /* the group (one local rank without --tp) */
    moe8_model *model;
    moe8_tokenizer *tok; /* NULL without one (CLI_TOK_NONE, or absent and not required) */
    int rank0;           /* this process prints results and agreed failures */
    double t_load;       /* moe8_time_s() when the loading began (after the checks) */
} cli_session;

typedef struct {
    const char *dir;          /* -m DIR */
    int tp, expert_parallel;  /* --tp N (1: no MPI), --expert-parallel */
    int offline_rank;         /* >= 0: offline, no MPI (pack): rank R of the N, or no
                               * group at all (dist NULL) when N is 1; -1: online */
    int n_threads;            /* 0: OpenMP's */
    int prepare;              /* moe8_model_prepare after the load ... */
    int float_experts;        /* ... with this */
    double timeout;           /* >= 0: --comm-timeout set before loading; -1: the default */
    cli_tok_need tokenizer;
    const char *tok_hint;     /* CLI_TOK_REQUIRED: why it is needed, said when
                               * tokenizer.json is missing ("'DIR/tokenizer.json' not found: HINT") */
    /* Hooks, each optional; non-zero: failed, its message printed. */
    int (*check)(void *user, cli_session *s);          /* this rank's checks before loading */
    int (*with_tok)(void *user, const cli_session *s); /* on the tokenizer's thread, after it
                                                        * loads (no collectives there) */
    void *user;
} cli_open_params;

/* The parameters of -m DIR, --tp N [--expert-parallel] and --threads N; the rest
 * zero, but offline_rank and timeout -1 (online, the default timeout). */
cli_open_params cli_open_params_of(const char *dir, int tp, int expert_parallel, int n_threads);
/* 0 with s filled, or 1 after the failure policy above. */
int cli_open(const char *cmd, const cli_open_params *p, cli_session *s);
void cli_close(const char *cmd, cli_session *s);
/* Collective: every rank's outcome of a local step (a failure is printed by
 * its rank); 1 on every rank when any failed, rank 0 naming a failed peer
 * when it did not fail itself. d NULL or one rank: `failed`. */
int cli_agree(const char *cmd, moe8_dist *d, int failed);

int cmd_pack(int argc, char **argv);

#endif
