/*
 * cmd_make_model.c — `moe8 make-model`: write a synthetic model folder of a
 * family (--arch, default qwen3_moe; moe8_make_model) with a progress line
 * on stderr.
 *
 * The tokenizer files come from --tokenizer DIR, else $MOE8_TOKENIZER_DIR,
 * else the family's folder under .deps (qwen3-tokenizer for the Qwen
 * families, llama2-tokenizer for Mixtral) next to or above the binary's
 * folder, else the source tree's .deps compiled in. Uses only moe8.h.
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
#define VOCAB_MAX 151936

static void usage(FILE *f) {
    fprintf(f,
            "usage: moe8 make-model [--arch A] --preset tiny|slice -o DIR [options]\n"
            "  --arch A         qwen3_moe (default), qwen2_moe, mixtral, deepseek_v2 or deepseek_v3\n"
            "  --preset P       tiny (4 layers, H 256; every family) or slice: the shapes of\n"
            "                   the family's reference model, a few layers (qwen3_moe:\n"
            "                   Qwen3-30B-A3B, 4 layers; mixtral: Mixtral-8x7B, 2 layers;\n"
            "                   deepseek_v2: DeepSeek-V2-Lite, deepseek_v3: Moonlight-16B-A3B,\n"
            "                   4 layers); a3b-slice: qwen3_moe's slice\n"
            "  -o DIR           output folder (must not exist or be empty, unless --force)\n"
            "  --layers N       number of layers, 1 to 512 (default: the preset's)\n"
            "  --seed S         weights seed (default 0)\n"
            "  --dtype D        bf16 (default) or f32\n"
            "  --tokenizer DIR  folder with tokenizer.json (default: .deps/qwen3-tokenizer,\n"
            "                   mixtral .deps/llama2-tokenizer, deepseek .deps/deepseek-v3-tokenizer)\n"
            "  --force          replace a non-empty output folder\n");
}

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

/* --arch value: a family's model_type. */
static int parse_arch(const char *s, moe8_arch *out) {
    for (int a = 0; a < MOE8_ARCH_COUNT; a++)
        if (!strcmp(s, moe8_arch_name((moe8_arch)a))) {
            *out = (moe8_arch)a;
            return 0;
        }
    return -1;
}

/* Whole string a decimal integer in [lo, hi]; else a message naming the
 * option and the value given, and -1. */
static int parse_u64(const char *opt, const char *s, uint64_t lo, uint64_t hi, uint64_t *out) {
    char *end;
    unsigned long long v;
    errno = 0;
    v = (*s >= '0' && *s <= '9') ? strtoull(s, &end, 10) : 0;
    if (!(*s >= '0' && *s <= '9') || *end || errno == ERANGE || v < lo || v > hi) {
        fprintf(stderr, "moe8 make-model: %s '%s': expected an integer in [%llu, %llu]\n", opt, s,
                (unsigned long long)lo, (unsigned long long)hi);
        return -1;
    }
    *out = v;
    return 0;
}

int cmd_make_model(int argc, char **argv) {
    moe8_make_model_params p = moe8_make_model_params_default();
    const char *out = NULL, *preset = NULL;
    char tokbuf[PATH_MAX + 64];
    progress_state ps = {isatty(2), -1};
    moe8_error err;
    uint64_t v;
    int i;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        int takes = strcmp(a, "--force") && strcmp(a, "-h") && strcmp(a, "--help");
        if (takes && !val) {
            fprintf(stderr, "moe8 make-model: %s needs a value\n", a);
            return 2;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--force")) {
            p.force = 1;
            continue;
        } else if (!strcmp(a, "--preset")) {
            preset = val;
        } else if (!strcmp(a, "-o")) {
            out = val;
        } else if (!strcmp(a, "--tokenizer")) {
            p.tokenizer_dir = val;
        } else if (!strcmp(a, "--arch")) {
            if (parse_arch(val, &p.arch)) {
                fprintf(stderr, "moe8 make-model: --arch '%s': expected qwen3_moe, qwen2_moe, mixtral, deepseek_v2 or deepseek_v3\n",
                        val);
                return 2;
            }
        } else if (!strcmp(a, "--dtype")) {
            if (!strcmp(val, "bf16")) p.dtype = MOE8_DT_BF16;
            else if (!strcmp(val, "f32")) p.dtype = MOE8_DT_F32;
            else {
                fprintf(stderr, "moe8 make-model: --dtype '%s': expected bf16 or f32\n", val);
                return 2;
            }
        } else if (!strcmp(a, "--layers") || !strcmp(a, "--seed") || !strcmp(a, "--vocab") ||
                   !strcmp(a, "--shard-size")) {
            int layers = !strcmp(a, "--layers"), vocab = !strcmp(a, "--vocab");
            uint64_t lo = layers ? 1 : vocab ? VOCAB_MIN : 0;
            uint64_t hi = layers ? MOE8_MAX_LAYERS : vocab ? VOCAB_MAX : UINT64_MAX;
            if (parse_u64(a, val, lo, hi, &v)) return 2;
            if (layers) p.n_layers = (int64_t)v;
            else if (!strcmp(a, "--seed")) p.seed = v;
            else if (vocab) p.vocab_size = (int64_t)v;
            else p.shard_bytes = v;   /* hidden: tests */
        } else {
            fprintf(stderr, "moe8 make-model: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
        i++;
    }
    if (!preset || !out) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(preset, "tiny")) p.preset = MOE8_PRESET_TINY;
    else if (!strcmp(preset, "slice")) p.preset = MOE8_PRESET_SLICE;
    else if (!strcmp(preset, "a3b-slice")) p.preset = MOE8_PRESET_A3B_SLICE;
    else {
        fprintf(stderr, "moe8 make-model: --preset '%s': expected tiny, slice or a3b-slice\n",
                preset);
        return 2;
    }
    if (!p.tokenizer_dir && !(p.tokenizer_dir = default_tokenizer(p.arch, tokbuf, sizeof tokbuf))) {
        fprintf(stderr, "moe8 make-model: no tokenizer folder found for %s (.deps/%s: run "
                        "scripts/deps.sh) — pass --tokenizer DIR\n", moe8_arch_name(p.arch),
                tokenizer_folder(p.arch));
        return 1;
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
