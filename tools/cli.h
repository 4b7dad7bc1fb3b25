/*
 * cli.h — the moe8 command-line tool's subcommands. Each lives in its own
 * tools/cmd_*.c file and uses only the public headers (include/moe8*.h). A subcommand
 * returns the process exit status; results go to stdout, errors and progress
 * to stderr.
 */
#ifndef MOE8_CLI_H
#define MOE8_CLI_H

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
int cmd_bench(int argc, char **argv);
int cmd_bench_sched(int argc, char **argv); /* moe8 bench sched */
int cmd_bench_serve(int argc, char **argv); /* moe8 bench serve */
int cmd_bench_forward(int argc, char **argv); /* moe8 bench forward */
int cmd_bench_grammar(int argc, char **argv); /* moe8 bench grammar */
int cmd_bench_sampler(int argc, char **argv); /* moe8 bench sampler */
int cmd_generate(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_make_model(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_export_gguf(int argc, char **argv); /* moe8 export-gguf */

/* Print "moe8 <cmd>: <message>" for a failed library call and return 1. */
int cli_fail(const char *cmd, const moe8_error *err);

/* A KV cache type flag value: "f32", "f16" or "bf16" -> 0 and *out, else -1. */
int cli_kv_type(const char *s, moe8_dtype *out);
/* A whole string that is a decimal integer in [lo, hi] (no sign, blanks or
 * suffix) -> 0 and *out, else -1. */
int cli_parse_int(const char *s, long lo, long hi, int *out);
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

/* Route the library's warnings and errors (moe8_set_log) to stderr as
 * "moe8 <cmd>: <message>"; `cmd` must outlive the process's library calls. */
void cli_log_warnings(const char *cmd);

/* The packed-cache options every command that loads a model takes
 * (--cache-dir DIR, --no-cache, --no-mmap, --mlock; SEMANTICS §6c): main()
 * takes them out of argv before the command parses it; this copies them
 * into mp. */
void cli_model_opts(moe8_model_params *mp);
int cmd_pack(int argc, char **argv);

#endif
