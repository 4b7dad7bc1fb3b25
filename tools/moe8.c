/*
 * moe8.c — entry point of the moe8 CLI: dispatches to a subcommand.
 * Subcommands not built yet are weak stubs that say so and fail.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define STUB(fn, name)                                                            \
    __attribute__((weak)) int fn(int argc, char **argv) {                         \
        (void)argc;                                                               \
        (void)argv;                                                               \
        fprintf(stderr, "moe8 %s: not supported yet\n", name);                    \
        return 2;                                                                 \
    }
STUB(cmd_inspect, "inspect")
STUB(cmd_bench, "bench")
STUB(cmd_generate, "generate")
STUB(cmd_quantize, "quantize")
STUB(cmd_make_model, "make-model")
STUB(cmd_serve, "serve")
STUB(cmd_perplexity, "perplexity")

static struct {
    const char *cache_dir;
    int no_cache, no_mmap, mlock;
} g_model_opts;

void cli_model_opts(moe8_model_params *mp) {
    mp->cache_dir = g_model_opts.cache_dir;
    mp->no_cache = g_model_opts.no_cache;
    mp->no_mmap = g_model_opts.no_mmap;
    mp->mlock = g_model_opts.mlock;
}

/* Take the packed-cache options out of argv[first..]; -1 when --cache-dir has no value. */
static int take_model_opts(int *argc, char **argv) {
    int n = 1;
    for (int i = 1; i < *argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--cache-dir")) {
            if (i + 1 >= *argc) return -1;
            g_model_opts.cache_dir = argv[++i];
        } else if (!strcmp(a, "--no-cache")) g_model_opts.no_cache = 1;
        else if (!strcmp(a, "--no-mmap")) g_model_opts.no_mmap = 1;
        else if (!strcmp(a, "--mlock")) g_model_opts.mlock = 1;
        else argv[n++] = argv[i];
    }
    argv[n] = NULL;
    *argc = n;
    return 0;
}

int cli_cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int cli_cmp_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

void cli_median_p99(double *t, int n, double *median, double *p99) {
    qsort(t, (size_t)n, sizeof *t, cli_cmp_double);
    *median = t[n / 2];
    *p99 = t[(size_t)((double)(n - 1) * 0.99)];
}

int cli_fail(const char *cmd, const moe8_error *err) {
    fprintf(stderr, "moe8 %s: %s\n", cmd, err->message[0] ? err->message : moe8_status_str(err->code));
    return 1;
}

int cli_kv_type(const char *s, moe8_dtype *out) {
    if (!strcmp(s, "f32")) *out = MOE8_DT_F32;
    else if (!strcmp(s, "f16")) *out = MOE8_DT_F16;
    else if (!strcmp(s, "bf16")) *out = MOE8_DT_BF16;
    else return -1;
    return 0;
}

int cli_parse_int(const char *s, long lo, long hi, int *out) {
    char *end;
    long v;
    if (*s < '0' || *s > '9') return -1;
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

int cli_parse_size(const char *s, uint64_t *out) {
    char *end;
    unsigned long long v;
    uint64_t mul = 1;
    if (*s < '0' || *s > '9') return -1;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno || end == s) return -1;
    if (*end == 'K' || *end == 'k') mul = 1ull << 10;
    else if (*end == 'M' || *end == 'm') mul = 1ull << 20;
    else if (*end == 'G' || *end == 'g') mul = 1ull << 30;
    else if (*end) return -1;
    if (*end && end[1]) return -1;
    if (v == 0 || v > UINT64_MAX / mul) return -1;
    *out = v * mul;
    return 0;
}

int cli_parse_list(const char *s, long lo, long hi, int *out, int cap) {
    int n = 0;
    while (n < cap) {
        char item[32];
        size_t len = strcspn(s, ",");
        if (len == 0 || len >= sizeof item) return -1;
        memcpy(item, s, len);
        item[len] = '\0';
        if (cli_parse_int(item, lo, hi, &out[n++])) return -1;
        if (!s[len]) return n;
        s += len + 1;
    }
    return -1;
}

const char *cli_kv_type_name(moe8_dtype t) {
    return t == MOE8_DT_F32 ? "f32" : t == MOE8_DT_F16 ? "f16" : t == MOE8_DT_BF16 ? "bf16" : "?";
}

static void log_to_stderr(moe8_log_level level, const char *message, void *user) {
    if (level >= MOE8_LOG_WARN) fprintf(stderr, "moe8 %s: %s\n", (const char *)user, message);
}

void cli_log_warnings(const char *cmd) { moe8_set_log(log_to_stderr, (void *)cmd); }

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} commands[] = {
    {"inspect", cmd_inspect, "describe a model folder: architecture, quant types, memory"},
    {"generate", cmd_generate, "generate text from a prompt"},
    {"quantize", cmd_quantize, "write a W8A8 (ModelSlim layout) copy of a float model"},
    {"export-gguf", cmd_export_gguf, "write a float Qwen3-MoE folder as a GGUF file for llama.cpp"},
    {"make-model", cmd_make_model, "write a synthetic Qwen3-MoE model folder"},
    {"perplexity", cmd_perplexity, "perplexity and KL divergence on a text (as llama-perplexity)"},
    {"pack", cmd_pack, "build (or --verify) the packed-weight cache of a model folder"},
    {"tokenize", cmd_tokenize, "the token ids of a text (-p TEXT or -f FILE)"},
    {"serve", cmd_serve, "an OpenAI-compatible HTTP server on a model folder"},
    {"bench", cmd_bench, "benchmarks that print tables (moe8 bench moe|forward|sched|serve|grammar|sampler)"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: moe8 <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-11s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "  %-11s %s\n", "version", "print the version and the kernel table in use (MOE8_ISA=NAME forces one)");
    fprintf(f, "\nevery command that loads a model also takes --cache-dir DIR, --no-cache, --no-mmap\n"
               "and --mlock (the packed-weight cache; docs/SEMANTICS.md 6c)\n");
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "version") || !strcmp(argv[1], "--version")) {
        moe8_error e;
        if (moe8_kernel_check(&e) != MOE8_OK) {
            fprintf(stderr, "moe8: %s\n", e.message);
            return 1;
        }
        printf("moe8 %s (kernels: %s; this build has: %s)\n", moe8_version(), moe8_kernel_isa(),
               moe8_kernel_tables());
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        if (strcmp(argv[1], commands[i].name)) continue;
        int n = argc - 1;
        if (take_model_opts(&n, argv + 1)) {
            fprintf(stderr, "moe8 %s: --cache-dir wants a folder\n", argv[1]);
            return 2;
        }
        return commands[i].fn(n, argv + 1);
    }
    fprintf(stderr, "moe8: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
