/*
 * cmd_bench_grammar.c — `moe8 bench grammar -m DIR`: constrained decoding on
 * a tokenizer's real vocabulary (Qwen3's 151,669 ids by default from .deps).
 *
 * Prints (Markdown on stdout, progress on stderr):
 * 1. the vocabulary trie: build time, nodes, memory;
 * 2. per grammar (json_object; a 12-field JSON Schema with required and
 *    optional fields, an enum, integer ranges, a bounded string, an array,
 *    a nested object; an arithmetic GBNF): schema-to-GBNF and compile time,
 *    and moe8_grammar_prepare, the per-position token tables (on OMP_NUM_THREADS
 *    threads; set it to 1 for one core);
 * 3. the mask of one step in typical states (the state reached by accepting
 *    a prefix of valid output): median and p99 µs over --reps masks, and the
 *    allowed token count; a "walk" row: every step of a walk choosing
 *    uniformly among the allowed tokens (any model), over --walk steps.
 * The mask works on one core. Uses moe8.h and src/grammar/grammar.h (included
 * by path: it needs nothing else of the library's internals).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../src/grammar/grammar.h"
#include "cli.h"

#define CMD "bench grammar"

static const char *SCHEMA12 =
    "{\"type\":\"object\",\"properties\":{"
    "\"id\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":1000000},"
    "\"name\":{\"type\":\"string\"},"
    "\"email\":{\"type\":\"string\",\"maxLength\":64},"
    "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150},"
    "\"active\":{\"type\":\"boolean\"},"
    "\"score\":{\"type\":\"number\"},"
    "\"role\":{\"enum\":[\"admin\",\"user\",\"guest\"]},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":8},"
    "\"address\":{\"type\":\"object\",\"properties\":{\"street\":{\"type\":\"string\"},"
    "\"city\":{\"type\":\"string\"},\"zip\":{\"type\":\"string\",\"minLength\":5,\"maxLength\":10}},"
    "\"required\":[\"street\",\"city\"]},"
    "\"phone\":{\"type\":[\"string\",\"null\"]},"
    "\"created\":{\"type\":\"string\"},"
    "\"notes\":{\"type\":\"string\"}},"
    "\"required\":[\"id\",\"name\",\"email\",\"age\",\"active\",\"role\"]}";

static const char *ARITH =
    "root ::= ws expr ws\n"
    "expr ::= term ( ws [-+] ws term )*\n"
    "term ::= factor ( ws [*/] ws factor )*\n"
    "factor ::= num | \"(\" ws expr ws \")\" | \"-\" factor\n"
    "num ::= [0-9]+ ( \".\" [0-9]+ )?\n"
    "ws ::= [ \\t]{0,4}\n";

typedef struct { const char *kind, *prefix; } state_kind;

static const state_kind JSON_STATES[] = {
    {"start", ""},
    {"in a key", "{\"na"},
    {"in a string value", "{\"name\": \"Jo"},
    {"between fields", "{\"name\": \"John\", "},
    {"in a number", "{\"a\": 12"},
    {"in an array", "{\"a\": [1, "},
    {NULL, NULL}};

static const state_kind SCHEMA_STATES[] = {
    {"start", ""},
    {"in a string value", "{\"id\": 12, \"name\": \"Jo"},
    {"inside a UTF-8 character", "{\"id\": 12, \"name\": \"J\xe4\xb8"},
    {"in a bounded string", "{\"id\": 12, \"name\": \"Jo\", \"email\": \"jo@ex"},
    {"between fields", "{\"id\": 12, \"name\": \"John\", "},
    {"in an integer range", "{\"id\": 12"},
    {"in a number", "{\"id\": 1, \"name\": \"\", \"email\": \"\", \"age\": 3, \"active\": true, \"score\": 1.2"},
    {"optional fields ahead", "{\"id\": 1, \"name\": \"\", \"email\": \"\", \"age\": 3, \"active\": true, \"role\": \"user\""},
    {"in a nested object", "{\"id\": 1, \"name\": \"\", \"email\": \"\", \"age\": 3, \"active\": true, \"role\": \"user\", "
                           "\"address\": {\"street\": \"Main St\", "},
    {NULL, NULL}};

static const state_kind ARITH_STATES[] = {
    {"start", ""},
    {"in a number", "(12"},
    {"after an operator", "(1 + 2) * "},
    {NULL, NULL}};

typedef struct {
    const char *dir;
    int reps, walk, n_vocab;
    unsigned long long seed;
} bench_opts;


static int count_bits(const uint32_t *m, int32_t n) {
    int c = 0;
    for (int32_t i = 0; i < (n + 31) / 32; i++) c += __builtin_popcount(m[i]);
    return c;
}

#define SYNOPSIS "moe8 bench grammar [-m DIR | --tokenizer DIR] [--reps N] [--walk N] [--seed S]\n" \
                 "                          [--n-vocab N]"
#define NOTES "grammar_prepare runs on OMP_NUM_THREADS threads; masks on one.\n"

static int parse_opts(int argc, char **argv, bench_opts *o) {
    memset(o, 0, sizeof *o);
    o->reps = 200, o->walk = 200, o->seed = 1;
#ifdef MOE8_DEFAULT_DEPS_DIR
    o->dir = MOE8_DEFAULT_DEPS_DIR "/qwen3-tokenizer";
#endif
    const cli_opt opts[] = {
        {"--tokenizer", "-m", CLI_STR, &o->dir, .arg = "DIR",
         .help = "a model or tokenizer folder (default .deps/qwen3-tokenizer)"},
        {"--reps", NULL, CLI_INT, &o->reps, 1, 1000000, .arg = "N", .help = "masks timed per state (default 200)"},
        {"--walk", NULL, CLI_INT, &o->walk, 1, 1000000, .arg = "N",
         .help = "steps of the random walk row (default 200)"},
        {"--n-vocab", NULL, CLI_INT, &o->n_vocab, 1, 1 << 24, .arg = "N",
         .help = "ids in the mask (default: the model's 151936 for a Qwen3 tokenizer,\nelse the tokenizer's)"},
        {"--seed", NULL, CLI_U64, &o->seed, .arg = "S", .help = "the walk's seed (default 1; made odd)"},
        {0},
    };
    const int rc = cli_parse(CMD, SYNOPSIS, opts, NOTES, argc - 1, argv + 1);
    if (rc) return rc < 0 ? -2 : -1;
    o->seed |= 1;
    if (!o->dir) {
        cli_err(CMD, "give -m DIR");
        cli_usage(stderr, SYNOPSIS, opts, NOTES);
        return -1;
    }
    return 0;
}

/* Median and p99 of one state's mask, in µs. */
static void time_state(grammar_state *st, const grammar_vocab *v, uint32_t *mask, int reps, double *med,
                       double *p99, double *t) {
    for (int r = 0; r < reps; r++) {
        double t0 = moe8_time_s();
        moe8_grammar_mask(st, v, mask);
        t[r] = (moe8_time_s() - t0) * 1e6;
    }
    cli_median_p99(t, reps, med, p99);
}

static unsigned long long rng_next(unsigned long long *s) {
    *s ^= *s >> 12, *s ^= *s << 25, *s ^= *s >> 27;
    return *s * 2685821657736338717ULL;
}

/* Masks along a walk of uniformly random allowed tokens (restarting at the end). */
static void time_walk(const grammar *g, const grammar_vocab *v, int32_t eos, uint32_t *mask, int steps,
                      unsigned long long seed, double *med, double *p99, double *avg_allowed, double *t) {
    grammar_state *st = NULL;
    int32_t nv = moe8_grammar_vocab_n_vocab(v), *cand = malloc((size_t)nv * sizeof *cand);
    double sum = 0;
    for (int s = 0; s < steps && cand; s++) {
        int nc = 0;
        double t0;
        if (!st && moe8_grammar_state_new(g, &st, NULL) != MOE8_OK) break;
        t0 = moe8_time_s();
        moe8_grammar_mask(st, v, mask);
        t[s] = (moe8_time_s() - t0) * 1e6;
        for (int32_t w = 0; w < (nv + 31) / 32; w++)
            for (uint32_t b = mask[w]; b; b &= b - 1) cand[nc++] = w * 32 + __builtin_ctz(b);
        sum += nc;
        if (nc == 0) break;
        {
            int32_t pick = cand[rng_next(&seed) % (unsigned long long)nc];
            if (pick == eos || moe8_grammar_accept(st, v, pick, NULL) != MOE8_OK || moe8_grammar_can_end(st) == 2) {
                moe8_grammar_state_free(st);
                st = NULL;
            }
        }
    }
    moe8_grammar_state_free(st);
    free(cand);
    cli_median_p99(t, steps, med, p99);
    *avg_allowed = sum / steps;
}

int cmd_bench_grammar(int argc, char **argv) {
    bench_opts o;
    moe8_tokenizer *tok = NULL;
    grammar_vocab *v = NULL;
    moe8_error err;
    int32_t eos, nv;
    uint32_t *mask = NULL;
    double *t = NULL, t0;
    int rc = 1;
    struct {
        const char *name, *text;
        int is_schema;
        const state_kind *states;
    } gs[] = {{"json_object", NULL, 0, JSON_STATES},
              {"12-field schema", SCHEMA12, 1, SCHEMA_STATES},
              {"arithmetic GBNF", ARITH, 0, ARITH_STATES}};
    const int prc = parse_opts(argc, argv, &o);
    if (prc) return prc == -2 ? 0 : 2; /* -2: the usage was asked for */
    gs[0].text = moe8_grammar_json_object();
    fprintf(stderr, "moe8 " CMD ": loading %s\n", o.dir);
    if (moe8_tokenizer_load(o.dir, &tok, &err) != MOE8_OK) return cli_fail(CMD, &err);
    eos = moe8_tokenizer_eos_id(tok);
    nv = o.n_vocab ? o.n_vocab : moe8_tokenizer_n_vocab(tok);
    if (!o.n_vocab && moe8_tokenizer_n_vocab(tok) == 151669) nv = 151936; /* Qwen3's model vocab */
    t0 = moe8_time_s();
    if (moe8_grammar_vocab_new(tok, nv, &eos, eos >= 0 ? 1 : 0, &v, &err) != MOE8_OK) {
        rc = cli_fail(CMD, &err);
        goto out;
    }
    printf("## Vocabulary trie\n\n| ids | build ms | memory MB |\n|---:|---:|---:|\n| %d | %.1f | %.2f |\n\n", (int)nv,
           (moe8_time_s() - t0) * 1e3, (double)moe8_grammar_vocab_bytes(v) / 1e6);
    mask = malloc(((size_t)nv + 31) / 32 * sizeof *mask);
    t = malloc((size_t)(o.reps > o.walk ? o.reps : o.walk) * sizeof *t);
    if (!mask || !t) {
        cli_err(CMD, "out of memory");
        goto out;
    }
    printf("## Grammars\n\n| grammar | GBNF bytes | schema->GBNF ms | compile ms | prepare ms | tables MB |\n"
           "|---|---:|---:|---:|---:|---:|\n");
    {
        grammar *g[3] = {NULL, NULL, NULL};
        for (int i = 0; i < 3; i++) {
            char *gbnf = NULL;
            double a = moe8_time_s(), b, c, d;
            if (gs[i].is_schema && moe8_json_schema_to_gbnf(gs[i].text, strlen(gs[i].text), &gbnf, &err) != MOE8_OK) {
                rc = cli_fail(CMD, &err);
                goto free_g;
            }
            b = moe8_time_s();
            if (moe8_grammar_build(gbnf ? gbnf : gs[i].text, strlen(gbnf ? gbnf : gs[i].text), &g[i], &err) != MOE8_OK) {
                free(gbnf);
                rc = cli_fail(CMD, &err);
                goto free_g;
            }
            c = moe8_time_s();
            if (moe8_grammar_prepare(g[i], v, &err) != MOE8_OK) {
                free(gbnf);
                rc = cli_fail(CMD, &err);
                goto free_g;
            }
            d = moe8_time_s();
            {
                char conv[32] = "-";
                if (gs[i].is_schema) snprintf(conv, sizeof conv, "%.2f", (b - a) * 1e3);
                printf("| %s | %zu | %s | %.2f | %.1f | %.2f |\n", gs[i].name, strlen(gbnf ? gbnf : gs[i].text), conv,
                       (c - b) * 1e3, (d - c) * 1e3, (double)moe8_grammar_prepared_bytes(g[i], v) / 1e6);
            }
            free(gbnf);
        }
        printf("\n## Mask of one step (%d ids, one core)\n\n| grammar | state | median µs | p99 µs | allowed |\n"
               "|---|---|---:|---:|---:|\n", (int)nv);
        for (int i = 0; i < 3; i++) {
            double med, p99, avg;
            for (const state_kind *k = gs[i].states; k->kind; k++) {
                grammar_state *st;
                if (moe8_grammar_state_new(g[i], &st, &err) != MOE8_OK) {
                    rc = cli_fail(CMD, &err);
                    goto free_g;
                }
                if (moe8_grammar_accept_bytes(st, k->prefix, strlen(k->prefix), &err) != MOE8_OK) {
                    cli_err(CMD, "%s, %s: %s", gs[i].name, k->kind, err.message);
                    moe8_grammar_state_free(st);
                    goto free_g;
                }
                time_state(st, v, mask, o.reps, &med, &p99, t);
                printf("| %s | %s | %.1f | %.1f | %d |\n", gs[i].name, k->kind, med, p99, count_bits(mask, nv));
                moe8_grammar_state_free(st);
            }
            time_walk(g[i], v, eos, mask, o.walk, o.seed, &med, &p99, &avg, t);
            printf("| %s | walk: %d uniform random steps | %.1f | %.1f | %.0f (mean) |\n", gs[i].name, o.walk, med, p99, avg);
        }
        rc = 0;
    free_g:
        for (int i = 0; i < 3; i++) moe8_grammar_destroy(g[i]);
    }
out:
    free(mask), free(t);
    moe8_grammar_vocab_free(v);
    moe8_tokenizer_free(tok);
    return rc;
}
