/*
 * cmd_pack.c — `moe8 pack`: build the packed cache of a model folder ahead
 * of time (SEMANTICS §6c), or check it (--verify: header, fingerprint and
 * every section checksum). Building is what the first context of a load
 * does; this command loads the model, makes one small context and prints
 * where the cache is.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define CMD "pack"

static void usage(FILE *f) {
    fprintf(f,
            "usage: moe8 pack -m DIR [--isa NAME] [--verify] [--threads N]\n"
            "                 [--cache-dir DIR] [--no-mmap]\n"
            "  --isa NAME   the kernel table whose layout to pack (as MOE8_ISA)\n"
            "  --verify     check the existing cache only (every checksum); exit 1 if invalid\n"
            "  --tp N --rank R  not supported yet: run the sharded command once under mpirun\n");
}

static void print_info(const moe8_cache_info *ci) {
    printf("packed cache (%s, layout %s): %s\n  %s", ci->table, ci->layout,
           ci->valid ? "valid" : ci->exists ? "invalid" : "absent", ci->path);
    if (ci->exists) printf(" (%.1f MiB)", (double)ci->bytes / (1 << 20));
    printf("\n");
    if (!ci->valid && ci->exists) printf("  %s\n", ci->why);
}

int cmd_pack(int argc, char **argv) {
    const char *dir = NULL;
    int verify = 0, threads = 0;
    moe8_error err;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-m") && i + 1 < argc) {
            dir = argv[++i];
        } else if (!strcmp(a, "--isa") && i + 1 < argc) {
            setenv("MOE8_ISA", argv[++i], 1);
        } else if (!strcmp(a, "--verify")) {
            verify = 1;
        } else if (!strcmp(a, "--threads") && i + 1 < argc) {
            if (cli_parse_int(argv[++i], 1, 4096, &threads)) {
                fprintf(stderr, "moe8 %s: --threads wants 1..4096, got '%s'\n", CMD, argv[i]);
                return 2;
            }
        } else if ((!strcmp(a, "--tp") || !strcmp(a, "--rank")) && i + 1 < argc) {
            fprintf(stderr, "moe8 %s: %s: not supported yet (a rank's shard is packed by its "
                    "first sharded load: mpirun -n N moe8 generate --tp N -m DIR -p hi -n 1)\n",
                    CMD, a);
            return 2;
        } else {
            fprintf(stderr, "moe8 %s: unexpected argument '%s'\n", CMD, a);
            usage(stderr);
            return 2;
        }
    }
    if (!dir) {
        usage(stderr);
        return 2;
    }
    cli_log_warnings(CMD);
    moe8_model_params mp = moe8_model_params_default();
    cli_model_opts(&mp);
    mp.n_threads = threads;
    moe8_model *m;
    moe8_cache_info ci;
    if (moe8_model_load(dir, &mp, &m, &err)) return cli_fail(CMD, &err);
    if (mp.no_cache) {
        moe8_model_free(m);
        fprintf(stderr, "moe8 %s: --no-cache leaves nothing to do\n", CMD);
        return 2;
    }
    if (!verify) {
        moe8_context_params cp = moe8_context_params_default();
        moe8_context *ctx;
        cp.n_ctx = 16;
        cp.n_batch = 1;
        cp.n_threads = threads;
        if (moe8_context_create(m, &cp, &ctx, &err)) {
            moe8_model_free(m);
            return cli_fail(CMD, &err);
        }
        moe8_context_free(ctx);
    }
    if (moe8_model_cache_check(m, 1, &ci, &err)) {
        moe8_model_free(m);
        return cli_fail(CMD, &err);
    }
    print_info(&ci);
    moe8_model_free(m);
    return ci.valid ? 0 : 1;
}
