/*
 * cmd_pack.c — `moe8 pack`: build the packed cache of a model folder ahead
 * of time (SEMANTICS §6c), or check it (--verify: header, fingerprint and
 * every section checksum). Building is what the first context of a load
 * does; this command loads the model, makes one small context and prints
 * where the cache is. With --tp N --rank R it packs rank R's shard in this
 * one process (moe8_dist_create_offline: no MPI), the file rank R of a
 * `--tp N` group then maps.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define CMD "pack"

#define SYNOPSIS "moe8 pack -m DIR [--isa NAME] [--tp N --rank R [--expert-parallel]] [--verify]\n" \
                 "                 [--threads N] [--cache-dir DIR] [--no-mmap]"
static void print_info(const moe8_cache_info *ci) {
    printf("packed cache (%s, layout %s): %s\n  %s", ci->table, ci->layout,
           ci->valid ? "valid" : ci->exists ? "invalid" : "absent", ci->path);
    if (ci->exists) printf(" (%.1f MiB)", (double)ci->bytes / (1 << 20));
    printf("\n");
    if (!ci->valid && ci->exists) printf("  %s\n", ci->why);
}

/* Build (unless verify) and check the cache of the loaded model m. */
static int run_pack(moe8_model *m, int no_cache, int verify, int threads) {
    moe8_cache_info ci;
    moe8_error err;
    if (no_cache) return cli_usage_err(CMD, "--no-cache leaves nothing to do");
    if (!verify) {
        moe8_context_params cp = moe8_context_params_default();
        moe8_context *ctx;
        cp.n_ctx = 16;
        cp.n_batch = 1;
        cp.n_threads = threads;
        if (moe8_context_create(m, &cp, &ctx, &err)) return cli_fail(CMD, &err);
        moe8_context_free(ctx);
    }
    if (moe8_model_cache_check(m, 1, &ci, &err)) return cli_fail(CMD, &err);
    print_info(&ci);
    return ci.valid ? 0 : 1;
}

int cmd_pack(int argc, char **argv) {
    const char *dir = NULL;
    int verify = 0, threads = 0, tp = 1, rank = -1, ep = 0;
    const char *isa = NULL;
    const cli_opt opts[] = {
        {"-m", NULL, CLI_STR, &dir, .arg = "DIR", .help = "the model folder"},
        {"--isa", NULL, CLI_STR, &isa, .arg = "NAME", .help = "the kernel table whose layout to pack (as MOE8_ISA)"},
        {"--tp", NULL, CLI_INT, &tp, 1, 4096, .arg = "N", .help = "with --rank: the shard of rank R of a --tp N group,\n"
         "packed here without MPI: `mpirun -np N moe8 ... --tp N` maps it"},
        {"--rank", NULL, CLI_INT, &rank, 0, 4095, .arg = "R", .help = "0 <= R < N"},
        {"--expert-parallel", NULL, CLI_FLAG, &ep, .help = "with --tp: the expert-parallel split (as generate's)"},
        {"--verify", NULL, CLI_FLAG, &verify, .help = "check the existing cache only (every checksum); exit 1 if invalid"},
        {"--threads", NULL, CLI_INT, &threads, 1, 4096, .arg = "N", .help = "packing threads (default: all)"},
        {0},
    };
    const int prc = cli_parse(CMD, SYNOPSIS, opts, NULL, argc, argv);
    if (prc) return prc < 0 ? 0 : prc;
    if (isa) setenv("MOE8_ISA", isa, 1);
    if (!dir) {
        cli_usage(stderr, SYNOPSIS, opts, NULL);
        return 2;
    }
    if ((tp > 1) != (rank >= 0) || rank >= tp) {
        return cli_usage_err(CMD, "%s", rank >= tp && tp > 1 ? "--rank must be below --tp"
                                                           : "--tp N (N >= 2) and --rank R go together");
    }
    if (ep && tp < 2) return cli_usage_err(CMD, "--expert-parallel needs --tp N with N >= 2");
    cli_log_warnings(CMD);
    cli_open_params op = cli_open_params_of(dir, tp, ep, threads);
    cli_session s;
    op.offline_rank = tp > 1 ? rank : 0; /* no MPI: one shard here, or no group */
    int rc = cli_open(CMD, &op, &s);
    if (!rc) {
        moe8_model_params mp = moe8_model_params_default();
        cli_model_opts(&mp);
        rc = run_pack(s.model, mp.no_cache, verify, threads);
    }
    cli_close(CMD, &s);
    return rc;
}
