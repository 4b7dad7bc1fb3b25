/*
 * generate_output.c — what `moe8 generate` prints: one prompt streams its text
 * (or ids) as the scheduler's events come; a batch keeps each completion and
 * prints it, every line prefixed "[i] ", when it finishes (--ids: one line per
 * prompt at the end). Also the --dump-logits file (checked before loading,
 * written whole, then renamed over its path), the per-rank memory line of
 * --tp and the final stats line. Output on stdout, the rest on stderr; ranks
 * other than 0 print nothing. Does not drive the scheduler.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "generate.h"

int gen_runner_alloc(runner *r) {
    const int n_seq = r->pr->n;
    int64_t cap = r->o->n_predict < (int64_t)r->n_ctx + 1 ? r->o->n_predict : r->n_ctx + 1;
    r->cap_out = (int32_t)(cap > 0 ? cap : 1);
    r->count = calloc((size_t)n_seq, sizeof(int32_t));
    r->fin = calloc((size_t)n_seq, sizeof(int32_t));
    r->out = malloc((size_t)n_seq * (size_t)r->cap_out * sizeof(int32_t));
    r->text = calloc((size_t)n_seq, sizeof *r->text);
    r->text_len = calloc((size_t)n_seq, sizeof *r->text_len);
    r->text_cap = calloc((size_t)n_seq, sizeof *r->text_cap);
    if (r->count && r->fin && r->out && r->text && r->text_len && r->text_cap) return 0;
    cli_err(CMD, "out of memory for %d prompts", n_seq);
    return -1;
}

void gen_runner_free(runner *r) {
    for (int i = 0; r->text && i < r->pr->n; i++) free(r->text[i]);
    free(r->text);
    free(r->text_len);
    free(r->text_cap);
    free(r->count);
    free(r->fin);
    free(r->out);
}

static void text_append(runner *r, int i, const char *s, size_t n) {
    if (r->text_len[i] + n + 1 > r->text_cap[i]) {
        size_t cap = 2 * (r->text_len[i] + n + 1) + 256;
        char *nb = realloc(r->text[i], cap);
        if (!nb) return; /* output truncated rather than a crash */
        r->text[i] = nb;
        r->text_cap[i] = cap;
    }
    memcpy(r->text[i] + r->text_len[i], s, n);
    r->text_len[i] += n;
    r->text[i][r->text_len[i]] = '\0';
}

/* Batch mode: the whole completion of prompt i, each line prefixed "[i] ". */
static void print_completion(const runner *r, int i) {
    for (const char *line = r->text[i] ? r->text[i] : "", *nl;; line = nl + 1) {
        nl = strchr(line, '\n');
        printf("[%d] ", i);
        fwrite(line, 1, nl ? (size_t)(nl - line) : strlen(line), stdout);
        putchar('\n');
        if (!nl) break;
    }
    fflush(stdout);
}

void gen_print_ids_batch(const runner *r) {
    for (int i = 0; i < r->pr->n; i++) {
        for (int32_t k = 0; k < r->count[i] && k < r->cap_out; k++)
            printf("%s%d", k ? " " : "", r->out[(size_t)i * r->cap_out + k]);
        putchar('\n');
    }
    fflush(stdout);
}

/* Text of an event: streamed (one prompt) or kept for the completion. */
static void put_text(runner *r, int i, const moe8_event *e) {
    if (r->quiet || r->o->print_ids || !e->text_len) return;
    if (r->pr->n == 1) {
        fwrite(e->text, 1, e->text_len, stdout);
        fflush(stdout);
    } else {
        text_append(r, i, e->text, e->text_len);
    }
}

void gen_on_token(runner *r, int i, const moe8_event *e) {
    if (r->count[i] < r->cap_out) r->out[(size_t)i * r->cap_out + r->count[i]] = e->token;
    r->count[i]++;
    if (r->pr->n == 1 && r->o->print_ids && !r->quiet) {
        printf("%s%d", r->count[i] > 1 ? " " : "", e->token);
        fflush(stdout);
    }
    put_text(r, i, e);
}

void gen_on_finish(runner *r, int i, const moe8_event *e) {
    r->fin[i] = e->finish;
    put_text(r, i, e);
    if (r->quiet) return;
    if (e->finish == MOE8_FINISH_CONTEXT)
        fprintf(stderr, "moe8 " CMD ": prompt %d stopped at the context length %d\n", i, r->n_ctx);
    if (r->pr->n == 1) {
        putchar('\n');
        fflush(stdout);
    } else if (!r->o->print_ids) {
        print_completion(r, i);
    }
}

/* NULL when `path` (canonical) is missing or a regular file; else what it is.
 * The dump is renamed over its path, so anything else there (a FIFO, a
 * device such as /dev/null, a socket) would be replaced by a text file. */
static const char *dump_target_kind(const char *path) {
    struct stat sb;
    if (stat(path, &sb) != 0 || S_ISREG(sb.st_mode)) return NULL;
    return S_ISDIR(sb.st_mode)    ? "a folder"
           : S_ISFIFO(sb.st_mode) ? "a fifo"
           : S_ISCHR(sb.st_mode)  ? "a character device"
           : S_ISBLK(sb.st_mode)  ? "a block device"
           : S_ISSOCK(sb.st_mode) ? "a socket"
                                  : "a special file";
}

/* Prompt logits of every vocabulary id, "id value" per line, %.9g (round-trips
 * a float), written to "<path>.tmp.<pid>" and renamed over `path` (the
 * canonical path check_dump_path found): a failed run leaves no half file. */
int gen_dump_logits(const char *shown, const char *path, const float *logits, int32_t n_vocab) {
    char tmp[PATH_MAX + 300];
    const char *kind;
    FILE *f = NULL;
    int fd, ok;
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    if ((fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0666)) < 0 || !(f = fdopen(fd, "w"))) {
        cli_err(CMD, "cannot write --dump-logits file '%s' (via '%s'): %s", shown, tmp,
                strerror(errno));
        if (fd >= 0) {
            close(fd);
            unlink(tmp);
        }
        return -1;
    }
    for (int32_t v = 0; v < n_vocab; v++) fprintf(f, "%d %.9g\n", v, logits[v]);
    ok = !ferror(f);
    ok = fclose(f) == 0 && ok;
    if (ok && (kind = dump_target_kind(path))) { /* appeared since check_dump_path */
        cli_err(CMD, "--dump-logits '%s' is now %s; not replaced", shown, kind);
        unlink(tmp);
        return -1;
    }
    if (!ok || rename(tmp, path) != 0) {
        cli_err(CMD, "error writing --dump-logits file '%s': %s", shown, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* realpath of `path`; when it does not exist yet, its folder's realpath +
 * "/" + its name. 0, or -1 with errno set. */
static int canonical_path(const char *path, char *out, size_t cap) {
    char buf[PATH_MAX], *copy, *slash, *name;
    const char *folder;
    int rc = -1;
    if (realpath(path, buf)) {
        if ((size_t)snprintf(out, cap, "%s", buf) < cap) return 0;
        errno = ENAMETOOLONG;
        return -1;
    }
    if (errno != ENOENT || !(copy = strdup(path))) return -1;
    slash = strrchr(copy, '/');
    folder = !slash ? "." : slash == copy ? "/" : copy;
    name = slash ? slash + 1 : copy;
    if (slash && slash != copy) *slash = '\0';
    if (!*name || !strcmp(name, ".") || !strcmp(name, ".."))
        errno = EISDIR;
    else if (!realpath(folder, buf))
        ; /* errno from realpath: the folder is missing or unreadable */
    else if ((size_t)snprintf(out, cap, "%s%s%s", buf, strcmp(buf, "/") ? "/" : "", name) >= cap)
        errno = ENAMETOOLONG;
    else
        rc = 0;
    free(copy);
    return rc;
}

/* `path` is `dir` or below it (both canonical). */
static int path_inside(const char *path, const char *dir) {
    size_t n = strlen(dir);
    if (!strcmp(dir, "/")) return 1;
    return !strncmp(path, dir, n) && (path[n] == '\0' || path[n] == '/');
}

/* --dump-logits never overwrites the model (its files are memory-mapped: a
 * truncated one kills the run), the prompt file (-f, --prompt-ids-file), nor
 * anything but a regular file (as root, renaming over /dev/null replaced the
 * device with a text file). Fills o->dump_real. */
int gen_check_dump_path(opts *o) {
    char model[PATH_MAX], prompt[PATH_MAX];
    const char *kind;
    if (!o->dump) return 0;
    if (canonical_path(o->dump, o->dump_real, sizeof o->dump_real) != 0) {
        cli_err(CMD, "--dump-logits '%s': cannot resolve the path: %s", o->dump, strerror(errno));
        return -1;
    }
    if ((kind = dump_target_kind(o->dump_real))) {
        cli_err(CMD, "--dump-logits '%s' is %s, expected a regular file (or a new name): it would "
                "be replaced", o->dump, kind);
        return -1;
    }
    if (realpath(o->dir, model) && path_inside(o->dump_real, model)) {
        cli_err(CMD, "--dump-logits '%s' lies inside the model folder '%s' (-m); write it elsewhere",
                o->dump, o->dir);
        return -1;
    }
    if (o->file && realpath(o->file, prompt) && !strcmp(prompt, o->dump_real)) {
        cli_err(CMD, "--dump-logits '%s' is the prompt file (-f '%s')", o->dump, o->file);
        return -1;
    }
    if (o->ids_file && realpath(o->ids_file, prompt) && !strcmp(prompt, o->dump_real)) {
        cli_err(CMD, "--dump-logits '%s' is the prompt file (--prompt-ids-file '%s')", o->dump,
                o->ids_file);
        return -1;
    }
    return 0;
}

static double peak_rss_mb(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (double)ru.ru_maxrss / 1024.0; /* Linux: kilobytes */
}

static double rss_mb(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, resident = 0;
    if (!f) return 0;
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    fclose(f);
    return (double)resident * (double)sysconf(_SC_PAGESIZE) / (1024.0 * 1024.0);
}

/* With --tp: one line from rank 0, before the stats line, with every rank's
 * resident and peak memory and its seconds in collectives. */
int gen_print_rank_memory(moe8_dist *d) {
    double mine[3] = {rss_mb(), peak_rss_mb(), moe8_dist_comm_seconds(d)}, *all;
    const int n = moe8_dist_size(d);
    moe8_error err;
    if (n == 1) return 0;
    if (!(all = malloc((size_t)n * sizeof mine))) {
        cli_err(CMD, "out of memory");
        moe8_dist_abort(d, 1); /* returns only with one rank */
        return 1;
    }
    if (moe8_dist_allgather(d, mine, all, sizeof mine, &err) != MOE8_OK) {
        free(all);
        return cli_fail(CMD, &err);
    }
    if (moe8_dist_rank(d) == 0) {
        fprintf(stderr, "ranks=%d mode=%s", n, moe8_dist_expert_parallel(d) ? "ep" : "tp");
        for (int r = 0; r < n; r++)
            fprintf(stderr, " rank%d_rss_mb=%.1f rank%d_peak_rss_mb=%.1f rank%d_comm_s=%.4f", r,
                    all[3 * r], r, all[3 * r + 1], r, all[3 * r + 2]);
        fputc('\n', stderr);
    }
    free(all);
    return 0;
}

void gen_print_stats(double load_s, const prompts *p, double prefill_s, const runner *r,
                     int64_t n_first, double decode_s) {
    int64_t gen = 0;
    for (int i = 0; i < p->n; i++) gen += r->count[i];
    fprintf(stderr,
            "load_s=%.4f prompt_tokens=%lld prefill_s=%.4f prefill_tok_s=%.2f gen_tokens=%lld "
            "decode_s=%.4f decode_tok_s=%.2f peak_rss_mb=%.1f\n",
            load_s, (long long)p->n_tokens, prefill_s,
            prefill_s > 0 ? (double)p->n_tokens / prefill_s : 0.0, (long long)gen, decode_s,
            decode_s > 0 ? (double)(gen - n_first) / decode_s : 0.0, peak_rss_mb());
}
