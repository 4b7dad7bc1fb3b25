/*
 * cmd_make_model.c — `moe8 make-model`: write a synthetic model folder of a
 * family (--arch, default qwen3_moe; moe8_make_model) with a progress line
 * on stderr.
 *
 * The tokenizer files come from --tokenizer DIR, else $MOE8_TOKENIZER_DIR,
 * else the family's folder under .deps (qwen3-tokenizer for the Qwen
 * families, llama2-tokenizer for Mixtral) next to or above the binary's
 * folder, else the source tree's .deps compiled in. Uses only the public headers.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

/* --vocab (tests): the range moe8_make_model_config accepts, 151936 being
 * the real Qwen3 vocabulary. */
#define VOCAB_MIN 1024
#define VOCAB_MAX 201088

#define SYNOPSIS "moe8 make-model [--arch A] --preset tiny|slice -o DIR [options]"

typedef struct {
    int tty, last;
} progress_state;

static int progress(void *user, const char *stage, uint64_t done, uint64_t total) {
    progress_state *p = user;
    int pct = total ? (int)(100.0 * (double)done / (double)total) : 100;
    if (pct == p->last) return 0;
    p->last = pct;
    if (p->tty) fprintf(stderr, "\rmoe8 make-model: %s %3d%% (%.1f / %.1f MiB)", stage, pct,
                        (double)done / 1048576.0, (double)total / 1048576.0);
    if (p->tty && done == total) fputc('\n', stderr);
    return 0;
}

static int exists_tok(const char *dir) {
    char p[PATH_MAX + 128];
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    return access(p, R_OK) == 0;
}

/* The folder under .deps holding a family's tokenizer. */
static const char *tokenizer_folder(moe8_arch a) {
    if (a == MOE8_ARCH_DEEPSEEK_V2 || a == MOE8_ARCH_DEEPSEEK_V3) return "deepseek-v3-tokenizer";
    if (a == MOE8_ARCH_GPT_OSS) return "gptoss-tokenizer"; /* o200k_harmony */
    return a == MOE8_ARCH_MIXTRAL ? "llama2-tokenizer" : "qwen3-tokenizer";
}

/* The default tokenizer folder of family a, or NULL. */
static const char *default_tokenizer(moe8_arch a, char *buf, size_t cap) {
    const char *env = getenv("MOE8_TOKENIZER_DIR"), *name = tokenizer_folder(a);
    static const char *rel[] = {"/.deps/", "/../.deps/"};
    char exe[PATH_MAX];
    ssize_t n;
    if (env && *env) return env;
    if ((n = readlink("/proc/self/exe", exe, sizeof exe - 1)) > 0) {
        char *slash;
        exe[n] = '\0';
        if ((slash = strrchr(exe, '/'))) *slash = '\0';
        for (size_t i = 0; i < 2; i++) {
            snprintf(buf, cap, "%s%s%s", exe, rel[i], name);
            if (exists_tok(buf)) return buf;
        }
    }
#ifdef MOE8_DEFAULT_DEPS_DIR
    snprintf(buf, cap, "%s/%s", MOE8_DEFAULT_DEPS_DIR, name);
    if (exists_tok(buf)) return buf;
#endif
    return NULL;
}

int cmd_make_model(int argc, char **argv) {
    moe8_make_model_params p = moe8_make_model_params_default();
    const char *out = NULL;
    char tokbuf[PATH_MAX + 64];
    progress_state ps = {isatty(2), -1};
    moe8_error err;
    char archs[256] = "";
    int arch = 0, preset = -1, dtype = 0, force = 0; /* preset: required */
    uint64_t layers = 0, vocab = 0;
    for (int a = 0; a < MOE8_ARCH_COUNT; a++) /* the choices, in moe8_arch order */
        snprintf(archs + strlen(archs), sizeof archs - strlen(archs), "%s%s", a ? "," : "",
                 moe8_arch_name((moe8_arch)a));
    const cli_opt opts[] = {
        {"--arch", NULL, CLI_CHOICE, &arch, .choices = archs, .arg = "A",
         .help = "qwen3_moe (default), qwen2_moe, mixtral, deepseek_v2, deepseek_v3,\n"
         "glm4_moe, minimax_m2, qwen3_next, qwen3_5_moe or gpt_oss"},
        {"--preset", NULL, CLI_CHOICE, &preset, .choices = "tiny,slice,a3b-slice", .arg = "P",
         .help = "tiny (4 layers, H 256; every family) or slice: the shapes of\n"
         "the family's reference model, a few layers (qwen3_moe:\n"
         "Qwen3-30B-A3B, 4 layers; mixtral: Mixtral-8x7B, 2 layers;\n"
         "deepseek_v2: DeepSeek-V2-Lite, deepseek_v3: Moonlight-16B-A3B,\n"
         "glm4_moe: GLM-4.5-Air, 4 layers; minimax_m2: MiniMax-M2,\n"
         "2 layers; qwen3_next: Qwen3-Next-80B-A3B, qwen3_5_moe:\n"
         "Qwen3.6-35B-A3B, 4 layers, 3 linear : 1 full; gpt_oss:\n"
         "gpt-oss-20b, 4 layers); a3b-slice: qwen3_moe's slice"},
        {"-o", NULL, CLI_STR, &out, .arg = "DIR",
         .help = "output folder (must not exist or be empty, unless --force)"},
        {"--layers", NULL, CLI_U64, &layers, 1, MOE8_MAX_LAYERS, .arg = "N",
         .help = "number of layers (default: the preset's)"},
        {"--seed", NULL, CLI_U64, &p.seed, .arg = "S", .help = "weights seed (default 0)"},
        {"--dtype", NULL, CLI_CHOICE, &dtype, .choices = "bf16,f32", .arg = "D",
         .help = "bf16 (default) or f32"},
        {"--tokenizer", NULL, CLI_STR, &p.tokenizer_dir, .arg = "DIR",
         .help = "folder with tokenizer.json (default: .deps/qwen3-tokenizer,\n"
         "mixtral .deps/llama2-tokenizer, deepseek .deps/deepseek-v3-tokenizer)"},
        {"--force", NULL, CLI_FLAG, &force, .help = "replace a non-empty output folder"},
        {"--float-experts", NULL, CLI_FLAG, &p.float_experts,
         .help = "gpt_oss: stacked experts in --dtype (transformers' layout)\n"
         "instead of MXFP4 as released (the same values)"},
        {"--vocab", NULL, CLI_U64, &vocab, VOCAB_MIN, VOCAB_MAX, .arg = "N"}, /* tests */
        {"--shard-size", NULL, CLI_U64, &p.shard_bytes, .arg = "N"},          /* tests */
        {0},
    };
    const int rc = cli_parse("make-model", SYNOPSIS, opts, NULL, argc, argv);
    if (rc) return rc < 0 ? 0 : rc;
    if (preset < 0 || !out) {
        cli_usage(stderr, SYNOPSIS, opts, NULL);
        return 2;
    }
    static const moe8_preset presets[3] = {MOE8_PRESET_TINY, MOE8_PRESET_SLICE, MOE8_PRESET_A3B_SLICE};
    p.arch = (moe8_arch)arch;
    p.preset = presets[preset];
    p.dtype = dtype ? MOE8_DT_F32 : MOE8_DT_BF16;
    p.force = force;
    if (layers) p.n_layers = (int64_t)layers;
    if (vocab) p.vocab_size = (int64_t)vocab;
    if (!p.tokenizer_dir && !(p.tokenizer_dir = default_tokenizer(p.arch, tokbuf, sizeof tokbuf))) {
        return cli_err("make-model", "no tokenizer folder found for %s (.deps/%s: run "
                       "scripts/deps.sh) — pass --tokenizer DIR", moe8_arch_name(p.arch),
                       tokenizer_folder(p.arch));
    }
    p.progress = progress;
    p.progress_user = &ps;
    cli_log_warnings("make-model"); /* e.g. a removed leftover of a killed run */
    if (moe8_make_model(&p, out, &err) != MOE8_OK) {
        if (ps.tty) fputc('\n', stderr);
        return cli_fail("make-model", &err);
    }
    fprintf(stderr, "moe8 make-model: wrote %s\n", out);
    return 0;
}
