/*
 * cmd_prompt_cache.c — `moe8 prompt-cache ls|verify|clear DIR`: the block
 * files of a prompt cache's disk tier (--prompt-cache-dir; SEMANTICS §10b).
 * ls prints a line per file (its header checked), verify also reads each
 * whole and checks its checksum (exit 1 when any file is invalid; an
 * invalid file is never loaded, so nothing needs removing), clear removes
 * every block file and temporary under the directory's lock.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cli.h"

#define CMD "prompt-cache"
#define SYNOPSIS "moe8 prompt-cache ls|verify|clear DIR"

typedef struct {
    uint64_t files, bytes;
} totals;

static void print_file(void *user, const moe8_prompt_cache_file *f) {
    totals *t = user;
    char when[32] = "?";
    const time_t s = (time_t)f->mtime;
    struct tm tm;
    if (gmtime_r(&s, &tm)) strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    printf("%s  %10llu B  %7d tokens  %d blocks  %-4s  tp %d/%d  fp %016llx  %s  %s\n", f->name,
           (unsigned long long)f->bytes, f->n_tokens, f->n_blocks, f->kv_type, f->tp_rank, f->tp_size,
           (unsigned long long)f->fingerprint, when, f->bad ? f->bad : "ok");
    t->files++;
    t->bytes += f->bytes;
}

int cmd_prompt_cache(int argc, char **argv) {
    const cli_opt opts[] = {{0}};
    moe8_error err;
    totals t = {0, 0};
    uint64_t bad = 0;
    if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        cli_usage(stdout, SYNOPSIS, opts, "ls: one line per block file (name, bytes, tokens, KV "
                  "type, TP rank/size,\nfingerprint, last use, ok or why not); verify: the same "
                  "with every\nchecksum read; clear: remove every block file\n");
        return 0;
    }
    if (argc != 3) return cli_usage_err(CMD, "expected ls, verify or clear and a directory");
    const char *what = argv[1], *dir = argv[2];
    if (!strcmp(what, "clear")) {
        if (moe8_prompt_cache_clear(dir, &t.files, &t.bytes, &err)) return cli_fail(CMD, &err);
        printf("removed %llu files (%.1f MiB) from %s\n", (unsigned long long)t.files,
               (double)t.bytes / (1 << 20), dir);
        return 0;
    }
    if (strcmp(what, "ls") && strcmp(what, "verify"))
        return cli_usage_err(CMD, "'%s': expected ls, verify or clear", what);
    if (moe8_prompt_cache_list(dir, !strcmp(what, "verify"), print_file, &t, &bad, &err))
        return cli_fail(CMD, &err);
    printf("%llu files, %.1f MiB, %llu invalid\n", (unsigned long long)t.files,
           (double)t.bytes / (1 << 20), (unsigned long long)bad);
    return bad ? 1 : 0;
}
