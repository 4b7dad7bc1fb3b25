/*
 * cli_opts.c — the table-driven option parser of the subcommands (cli.h):
 * one table per command says each option's names, kind, range or choices,
 * value name and help; the parser, the help text and every error message
 * ("moe8 CMD: --threads wants an integer in 1..4096, got '0'") come from it.
 *
 * Every command also takes --config FILE: a JSON object of the same options
 * ({"port": 8080, "log-level": "info", "m": "/models/x", "no-webui": true};
 * or FILE.toml, `port = 8080` lines: cli_config.c reads either;
 * a key is the option's name without its dashes, '_' as '-'), applied
 * before the command line, so the command line wins. A flag takes true
 * (false: left out); a value a string or a number. An unknown key or a bad
 * value is refused naming the file and the key.
 */
#include <ctype.h>
#include <sched.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli.h"

/* --threads by default: every CPU the process may run on (sched_getaffinity,
 * so taskset, a cgroup's cpuset or mpirun's binding of each rank count, not
 * the machine's), less one for `serve` from 4 CPUs up, where the HTTP,
 * tokenizer and grammar threads work beside every step; on 2 or 3 CPUs
 * serve keeps them all (the forward's pool hands work out in chunks, so a
 * thread the server preempts delays one chunk, not the step, and one
 * thread fewer would cost a third to a half of decode). OMP_NUM_THREADS,
 * when set, decides instead (0: the library's default, which reads it). */
int cli_default_threads(int serving) {
    cpu_set_t set;
    int n = 1;
    if (getenv("OMP_NUM_THREADS")) return 0;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) n = CPU_COUNT(&set);
    return serving && n >= 4 ? n - 1 : n;
}

static const cli_opt *find(const cli_opt *opts, const char *a) {
    for (const cli_opt *o = opts; o->name; o++)
        if (!strcmp(a, o->name) || (o->alias && !strcmp(a, o->alias))) return o;
    return NULL;
}

/* What a value of o must be, for its error message. */
static void wanted(const cli_opt *o, char *buf, size_t cap) {
    switch (o->kind) {
    case CLI_INT: snprintf(buf, cap, "an integer in %ld..%ld", o->lo, o->hi); break;
    case CLI_U64:
        snprintf(buf, cap, "an integer in %lu..%llu", (unsigned long)o->lo,
                 o->hi ? (unsigned long long)o->hi : (unsigned long long)UINT64_MAX);
        break;
    case CLI_SIZE: snprintf(buf, cap, "a positive byte count (optional K, M or G)"); break;
    case CLI_FLOAT:
    case CLI_DOUBLE:
        snprintf(buf, cap, "a number in %c%g, %g]", o->open_lo ? '(' : '[', o->dlo, o->dhi);
        break;
    case CLI_I64: snprintf(buf, cap, "an integer in %ld..%ld", o->lo, o->hi); break;
    case CLI_CHOICE: {
        size_t n = (size_t)snprintf(buf, cap, "one of ");
        for (const char *c = o->choices; *c && n < cap; c++) buf[n++] = *c == ',' ? '|' : *c;
        buf[n < cap ? n : cap - 1] = '\0';
        break;
    }
    case CLI_KV: snprintf(buf, cap, "one of f32|f16|bf16"); break;
    case CLI_LIST:
        snprintf(buf, cap, "1 to %d comma-separated integers in %ld..%ld", o->cap, o->lo, o->hi);
        break;
    default: snprintf(buf, cap, "a value"); break;
    }
}

/* Index of s among o->choices ("a,b,c"), or -1. */
static int choice_of(const cli_opt *o, const char *s) {
    const char *c = o->choices;
    for (int i = 0; *c; i++) {
        const size_t len = strcspn(c, ",");
        if (strlen(s) == len && !strncmp(c, s, len)) return i;
        c += len + (c[len] == ',');
    }
    return -1;
}

static int set_value(const cli_opt *o, const char *v) {
    char *end;
    switch (o->kind) {
    case CLI_INT: return cli_parse_int(v, o->lo, o->hi, o->out);
    case CLI_SIZE: return cli_parse_size(v, o->out);
    case CLI_STR: *(const char **)o->out = v; return 0;
    case CLI_KV: return cli_kv_type(v, o->out);
    case CLI_LIST: {
        int tmp[256];
        const int n = o->cap <= 256 ? cli_parse_list(v, o->lo, o->hi, tmp, o->cap) : -1;
        if (n < 1) return -1;
        memcpy(o->out, tmp, (size_t)n * sizeof *tmp);
        *o->count = n;
        return 0;
    }
    case CLI_U64: {
        if (*v < '0' || *v > '9') return -1;
        errno = 0;
        const unsigned long long x = strtoull(v, &end, 10);
        if (*end || errno || x < (unsigned long)o->lo || (o->hi && x > (unsigned long)o->hi)) return -1;
        *(uint64_t *)o->out = x;
        return 0;
    }
    case CLI_CHOICE: {
        const int i = choice_of(o, v);
        if (i < 0) return -1;
        *(int *)o->out = i;
        return 0;
    }
    case CLI_FLOAT:
    case CLI_DOUBLE: {
        if (!*v || isspace((unsigned char)*v)) return -1;
        errno = 0;
        const double x = strtod(v, &end);
        if (*end || errno || isnan(x) || (!isfinite(x) && !isinf(o->dhi)) || x < o->dlo ||
            x > o->dhi || (o->open_lo && x == o->dlo))
            return -1;
        if (o->kind == CLI_FLOAT) *(float *)o->out = (float)x;
        else *(double *)o->out = x;
        return 0;
    }
    case CLI_I64: {
        if ((*v < '0' || *v > '9') && !(*v == '-' && v[1] >= '0' && v[1] <= '9')) return -1;
        errno = 0;
        const long long x = strtoll(v, &end, 10);
        if (*end || errno || x < o->lo || x > o->hi) return -1;
        *(int64_t *)o->out = x;
        return 0;
    }
    default: return -1;
    }
}

/* The config file's values, which options point into as they point into
 * argv: kept for the life of the process (reachable, so no leak). s itself,
 * or NULL (s freed) when out of memory. */
static char **g_kept;
static size_t g_n_kept;
static char *keep(char *s) {
    char **g = s ? realloc(g_kept, (g_n_kept + 1) * sizeof *g) : NULL;
    if (!g) {
        free(s);
        return NULL;
    }
    g_kept = g;
    g_kept[g_n_kept++] = s;
    return s;
}

/* --config FILE's options into their outputs: 0, or 2 after the error. */
static int apply_config(const char *cmd, const cli_opt *opts, const char *path) {
    char name[128], num[64];
    cJSON *root = NULL;
    const cJSON *it;
    int rc = cli_config_read(cmd, path, &root);
    if (rc) return rc;
    rc = 2;
    cJSON_ArrayForEach(it, root) {
        const char *k = it->string;
        if (!*k || strlen(k) > 100) {
            cli_usage_err(cmd, "--config '%s': a key of %zu characters", path, strlen(k));
            goto done;
        }
        snprintf(name, sizeof name, "%s%s", k[0] == '-' ? "" : k[1] ? "--" : "-", k);
        for (char *q = name; *q; q++)
            if (*q == '_') *q = '-';
        const cli_opt *o = find(opts, name);
        if (!o || !strcmp(name, "--config")) {
            cli_usage_err(cmd, "--config '%s': unknown key '%s' (moe8 %s has no %s)", path, k, cmd, name);
            goto done;
        }
        const char *v = NULL;
        if (o->kind == CLI_FLAG) {
            if (!cJSON_IsBool(it)) {
                cli_usage_err(cmd, "--config '%s': key '%s' is a flag: true or false", path, k);
                goto done;
            }
            if (cJSON_IsTrue(it)) *(int *)o->out = 1;
            if (cJSON_IsTrue(it) && o->given) *o->given = 1;
            continue;
        }
        if (cJSON_IsString(it)) v = keep(strdup(it->valuestring)); /* lives as long as the process, as argv */
        else if (cJSON_IsNumber(it)) {
            const double d = it->valuedouble;
            if (d == (double)(long long)d) snprintf(num, sizeof num, "%lld", (long long)d);
            else snprintf(num, sizeof num, "%.17g", d);
            v = keep(strdup(num));
        } else {
            cli_usage_err(cmd, "--config '%s': key '%s' wants a string or a number", path, k);
            goto done;
        }
        if (!v || set_value(o, v)) {
            char w[256];
            wanted(o, w, sizeof w);
            cli_usage_err(cmd, "--config '%s': key '%s' wants %s, got '%s'", path, k, w, v ? v : "?");
            goto done;
        }
        if (o->given) *o->given = 1;
    }
    rc = 0;
done:
    cJSON_Delete(root);
    return rc;
}

int cli_bad_value(const char *cmd, const char *flag, const char *want, const char *got) {
    return cli_usage_err(cmd, "%s wants %s, got '%s'", flag, want, got);
}

void cli_usage(FILE *f, const char *synopsis, const cli_opt *opts, const char *notes) {
    fprintf(f, "usage: %s\n", synopsis);
    for (const cli_opt *o = opts; o->name; o++) {
        char left[64];
        if (!o->help) continue;
        int n = snprintf(left, sizeof left, "%s%s%s", o->alias ? o->alias : "", o->alias ? ", " : "",
                         o->name);
        if (o->kind != CLI_FLAG && n < (int)sizeof left)
            snprintf(left + n, sizeof left - (size_t)n, " %s", o->arg ? o->arg : "X");
        if (strlen(left) > 22) fprintf(f, "  %s\n  %-22s ", left, "");
        else fprintf(f, "  %-22s ", left);
        for (const char *h = o->help; *h; h++) { /* continuation lines indented */
            fputc(*h, f);
            if (*h == '\n') fprintf(f, "  %-22s ", "");
        }
        fputc('\n', f);
    }
    fprintf(f, "  %-22s the same options from a JSON object or FILE.toml (the command\n"
               "  %-22s line wins)\n", "--config FILE", "");
    fprintf(f, "  %-22s this help\n", "-h, --help");
    if (notes) fputs(notes, f);
}

int cli_parse(const char *cmd, const char *synopsis, const cli_opt *opts, const char *notes,
              int argc, char **argv) {
    for (int i = 1; i < argc; i++) { /* the file first: the command line overrides it */
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) break;
        if (strcmp(argv[i], "--config")) continue;
        if (i + 1 >= argc) return cli_usage_err(cmd, "--config wants a value (FILE)");
        const int rc = apply_config(cmd, opts, argv[i + 1]);
        if (rc) return rc;
        break; /* one file */
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            cli_usage(stdout, synopsis, opts, notes);
            return -1;
        }
        if (!strcmp(a, "--config")) {
            i++;
            continue;
        }
        const cli_opt *o = find(opts, a);
        if (!o) {
            cli_err(cmd, "unknown option '%s'", a);
            cli_usage(stderr, synopsis, opts, notes);
            return 2;
        }
        if (o->given) *o->given = 1;
        if (o->kind == CLI_FLAG) {
            *(int *)o->out = 1;
            continue;
        }
        if (i + 1 >= argc) {
            return cli_usage_err(cmd, "%s wants a value (%s)", a, o->arg ? o->arg : "X");
        }
        const char *v = argv[++i];
        if (set_value(o, v)) {
            char w[256];
            wanted(o, w, sizeof w);
            return cli_bad_value(cmd, a, w, v);
        }
    }
    return 0;
}
