/*
 * moe8.c — entry point of the moe8 CLI: the command table, `moe8 version`, and
 * the packed-cache options every command that loads a model takes, taken out
 * of argv before the command parses it. The shared helpers are in cli_util.c
 * (errors, parsing, timings), cli_opts.c (options) and cli_open.c (start-up).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

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
    {"prompt-cache", cmd_prompt_cache, "list, verify or clear a prompt cache's disk tier (ls|verify|clear DIR)"},
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
        if (moe8_kernel_check(&e) != MOE8_OK) return cli_err(NULL, "%s", e.message);
        printf("moe8 %s (kernels: %s; this build has: %s)\n", moe8_version(), moe8_kernel_isa(),
               moe8_kernel_tables());
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        if (strcmp(argv[1], commands[i].name)) continue;
        int n = argc - 1;
        if (take_model_opts(&n, argv + 1)) {
            return cli_usage_err(argv[1], "--cache-dir wants a folder");
        }
        return commands[i].fn(n, argv + 1);
    }
    cli_err(NULL, "unknown command '%s'", argv[1]);
    usage(stderr);
    return 2;
}
