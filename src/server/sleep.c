/*
 * sleep.c — `moe8 serve --sleep-idle-seconds N` (moe8_serve_params.sleep_idle_s):
 * after N seconds in which the engine had nothing to do, give memory back:
 *   - the KV pool: the prefix cache emptied, the pool's pages given back
 *     (moe8_context_sleep: madvise DONTNEED, they come back zeroed);
 *   - the mapped weights: every read-only file mapping of this process whose
 *     file ends in .safetensors or .pkc (the packed cache), found in
 *     /proc/self/maps, paged out (MADV_PAGEOUT, or MADV_DONTNEED on a kernel
 *     without it: read-only file pages refault from the file, so their
 *     contents never change). Weights in anonymous memory (--no-cache,
 *     --no-mmap) stay: without swap they cannot go anywhere.
 * The next request to the engine wakes it: nothing to redo, the pages fault
 * back in as the forward touches them (the first request pays that). The
 * HTTP side's own answers (/health, /metrics, /v1/models) never reach the
 * engine and do not wake it. Rank 0 alone (TP/EP is refused at start).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/core.h"
#include "model/context.h"
#include "server/server.h"

#ifndef MADV_PAGEOUT
#define MADV_PAGEOUT 21
#endif

static int weight_file(const char *path) {
    const size_t n = strlen(path);
    return (n > 12 && !strcmp(path + n - 12, ".safetensors")) || (n > 4 && !strcmp(path + n - 4, ".pkc"));
}

/* Page out the weights' file mappings: the bytes advised. */
static uint64_t page_out_weights(void) {
    FILE *f = fopen("/proc/self/maps", "r");
    char line[4600];
    uint64_t total = 0;
    if (!f) return 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char perms[8], path[4096] = "";
        line[strcspn(line, "\n")] = '\0';
        if (sscanf(line, "%lx-%lx %7s %*s %*s %*s %4095[^\n]", &lo, &hi, perms, path) < 3) continue;
        char *p = path;
        while (*p == ' ') p++;
        if (perms[1] != '-' || !weight_file(p) || hi <= lo) continue; /* writable, or not a weight file */
        if (madvise((void *)lo, hi - lo, MADV_PAGEOUT) && madvise((void *)lo, hi - lo, MADV_DONTNEED)) continue;
        total += hi - lo;
    }
    fclose(f);
    return total;
}

void moe8_srv_sleep_check(srv *s, int busy, double now) {
    if (s->p.sleep_idle_s <= 0) return;
    if (busy) {
        if (s->t_sleep > 0) {
            moe8_srv_log(s, "awake: a request after %.1f s asleep (the first one reads the weights back in)",
                         now - s->t_sleep);
            s->t_sleep = 0;
        }
        s->t_active = now;
        return;
    }
    if (s->t_active == 0) s->t_active = now; /* idle since the start */
    if (s->t_sleep > 0 || now - s->t_active < s->p.sleep_idle_s) return;
    const size_t kv = moe8_context_sleep(s->ctx);
    const uint64_t w = page_out_weights();
    s->t_sleep = now;
    moe8_srv_log(s, "asleep after %.0f s idle: KV pool and prefix cache dropped (%.1f MiB given back), %.1f MiB of "
                 "mapped weights paged out", now - s->t_active, (double)kv / 1048576.0, (double)w / 1048576.0);
}
