/*
 * moe8.c — entry point of the moe8 CLI: the command table, `moe8 version`, and
 * the packed-cache options every command that loads a model takes (and
 * --lm-head int8), taken out of argv before the command parses it. The shared helpers are in cli_util.c
 * (errors, parsing, timings), cli_opts.c (options) and cli_open.c (start-up).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "pull.h"

static struct {
    const char *cache_dir;
    int no_cache, no_mmap, mlock, lm_head_int8, pull;
} g_model_opts;

void cli_model_opts(moe8_model_params *mp) {
    mp->cache_dir = g_model_opts.cache_dir;
    mp->no_cache = g_model_opts.no_cache;
    mp->no_mmap = g_model_opts.no_mmap;
    mp->mlock = g_model_opts.mlock;
    mp->lm_head_int8 = g_model_opts.lm_head_int8;
}

/* Take the packed-cache options out of argv[first..] (and --lm-head int8,
 * unless `lm_head` is 0: quantize has an --lm-head of its own); 2 after a
 * usage error (printed). */
static int take_model_opts(int *argc, char **argv, int lm_head) {
    int n = 1;
    for (int i = 1; i < *argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--cache-dir")) {
            if (i + 1 >= *argc) return cli_usage_err(argv[0], "--cache-dir wants a folder");
            g_model_opts.cache_dir = argv[++i];
        } else if (lm_head && !strcmp(a, "--lm-head")) {
            if (i + 1 >= *argc || strcmp(argv[i + 1], "int8"))
                return cli_bad_value(argv[0], a, "int8 (a float lm_head packed to int8 at load)",
                                     i + 1 < *argc ? argv[i + 1] : "");
            g_model_opts.lm_head_int8 = 1;
            i++;
        } else if (!strcmp(a, "--no-cache")) g_model_opts.no_cache = 1;
        else if (!strcmp(a, "--no-mmap")) g_model_opts.no_mmap = 1;
        else if (!strcmp(a, "--mlock")) g_model_opts.mlock = 1;
        else if (!strcmp(a, "--pull")) g_model_opts.pull = 1;
        else argv[n++] = argv[i];
    }
    argv[n] = NULL;
    *argc = n;
    return 0;
}

/* -m SPEC: a GGUF file is refused with the way to a moe8 input; a
 * repository id is pulled (--pull) into the cache, or said to need --pull.
 * 0, or the exit status. */
static int model_arg(const char *cmd, int argc, char **argv) {
    static char dir[4096];
    for (int i = 1; i + 1 < argc; i++) {
        if (strcmp(argv[i], "-m")) continue;
        const char *m = argv[i + 1];
        const size_t n = strlen(m);
        if (n > 5 && !strcmp(m + n - 5, ".gguf"))
            return cli_usage_err(cmd, "'%s': GGUF is not a moe8 input; moe8 reads a safetensors model folder "
                                 "(config.json, *.safetensors, tokenizer.json): take the original repository "
                                 "(moe8 pull OWNER/NAME, docs/REAL-MODELS.md), quantize it with moe8 quantize if "
                                 "you want W8A8; moe8 export-gguf goes the other way", m);
        if (!pull_is_repo_id(m)) continue;
        if (!g_model_opts.pull)
            return cli_usage_err(cmd, "-m '%s': no such folder; add --pull to download that repository "
                                 "(or moe8 pull %s)", m, m);
        if (pull_for_model(cmd, m, dir, sizeof dir)) return 1;
        argv[i + 1] = dir;
    }
    return 0;
}

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} commands[] = {
    {"inspect", cmd_inspect, "describe a model folder: architecture, quant types, memory"},
    {"generate", cmd_generate, "generate text from a prompt"},
    {"quantize", cmd_quantize, "write a W8A8 (ModelSlim layout; --experts w4a8: W4A8) copy of a float model"},
    {"pull", cmd_pull, "download a model repository from Hugging Face or ModelScope (resumable, checked)"},
    {"export-gguf", cmd_export_gguf, "write a float qwen3_moe, glm4_moe, minimax_m2 or qwen3_next folder as GGUF (llama.cpp)"},
    {"make-model", cmd_make_model, "write a synthetic model folder of a family (--arch)"},
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
    fprintf(f, "\nmodel families (config.json model_type): qwen3_moe, qwen2_moe, mixtral, deepseek_v2,\n"
               "deepseek_v3, glm4_moe, minimax_m2, qwen3_next, qwen3_5_moe, gpt_oss (docs/MODELS.md; real\n"
               "checkpoints and how to run them: docs/REAL-MODELS.md)\n");
    fprintf(f, "every command takes --config FILE (its options from a JSON object; the command line wins)\n");
    fprintf(f, "\nevery command that loads a model also takes --cache-dir DIR, --no-cache, --no-mmap\n"
               "and --mlock (the packed-weight cache; docs/SEMANTICS.md 6c), --lm-head int8\n"
               "(a float lm_head packed to per-row int8 at load; docs/SEMANTICS.md 6d), and\n"
               "-m OWNER/NAME --pull (download the repository on first use; moe8 pull)\n");
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
        const int rc = take_model_opts(&n, argv + 1, strcmp(argv[1], "quantize") != 0);
        if (rc) return rc;
        const int bad = model_arg(argv[1], n, argv + 1);
        if (bad) return bad;
        return commands[i].fn(n, argv + 1);
    }
    cli_err(NULL, "unknown command '%s'", argv[1]);
    usage(stderr);
    return 2;
}
