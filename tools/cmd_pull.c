/*
 * cmd_pull.c — `moe8 pull OWNER/NAME[@REVISION] [--hub hf|modelscope] [-o DIR]`:
 * list the revision's files on the hub (pull_hub.c), download those moe8
 * reads (pull_fetch.c), print the folder on stdout.
 *
 * Where: -o DIR, else the cache,
 *   ${MOE8_MODELS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/moe8/models}/HUB/OWNER/NAME
 * (NAME@REV for a revision other than the default). A finished pull leaves
 * DIR/.moe8-pull (hub, repository, revision, commit, files), which is how
 * `-m OWNER/NAME --pull` on a model-loading command knows a folder is
 * complete and goes on without the network. A spec may start with "hf:" or
 * "modelscope:" to name the hub (the form -m takes).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <curl/curl.h>

#include "cli.h"
#include "pull.h"

#define CMD "pull"
#define SYNOPSIS "moe8 pull OWNER/NAME[@REVISION] [--hub hf|modelscope] [-o DIR] [options]"
#define NOTES "downloads config, tokenizer and template files, *.safetensors with their index and\n" \
              "quant_model_description*.json; resumable (run it again), each file checked against\n" \
              "the hub's size and SHA-256 before it is renamed into place.\n" \
              "environment: HF_TOKEN, HF_ENDPOINT (Hugging Face); MODELSCOPE_API_TOKEN,\n" \
              "MODELSCOPE_DOMAIN (ModelScope); MOE8_MODELS_DIR (the cache; default\n" \
              "~/.cache/moe8/models). Any command that loads a model takes -m OWNER/NAME --pull.\n"

/* "modelscope:" / "hf:" off the front of spec, into *hub. */
static const char *hub_prefix(const char *spec, pull_hub_kind *hub) {
    if (!strncmp(spec, "modelscope:", 11)) return *hub = PULL_MODELSCOPE, spec + 11;
    if (!strncmp(spec, "hf:", 3)) return *hub = PULL_HF, spec + 3;
    return spec;
}

int pull_is_repo_id(const char *s) {
    struct stat st;
    pull_hub_kind hub = PULL_HF;
    const char *p = hub_prefix(s, &hub), *slash = strchr(p, '/');
    if (!stat(s, &st)) return 0; /* a local path wins */
    return slash && slash != p && slash[1] && !strchr(slash + 1, '/') && p[0] != '.';
}

int pull_default_dir(const char *spec, pull_hub_kind hub, char *out, size_t cap) {
    const char *root = getenv("MOE8_MODELS_DIR"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    const char *at = strchr(spec, '@');
    int n;
    if (root && *root) n = snprintf(out, cap, "%s", root);
    else if (xdg && *xdg) n = snprintf(out, cap, "%s/moe8/models", xdg);
    else if (home && *home) n = snprintf(out, cap, "%s/.cache/moe8/models", home);
    else return -1;
    if (n < 0 || (size_t)n >= cap) return -1;
    const int rev_default = !at || !strcmp(at + 1, hub == PULL_HF ? "main" : "master");
    const int m = snprintf(out + n, cap - (size_t)n, "/%s/%.*s", hub == PULL_HF ? "hf" : "modelscope",
                           rev_default && at ? (int)(at - spec) : (int)strlen(spec), spec);
    if (m < 0 || (size_t)m >= cap - (size_t)n) return -1;
    char *rev = strchr(out + n, '@'); /* refs/pr/1: one folder, not three */
    for (char *q = rev; q && *q; q++)
        if (*q == '/') *q = '_';
    return 0;
}

/* The record of a finished pull. */
static void write_record(const pull_repo *r, const char *dir) {
    char path[4200];
    snprintf(path, sizeof path, "%s/.moe8-pull", dir);
    FILE *f = fopen(path, "w");
    if (!f) return;
    fprintf(f, "hub %s\nrepo %s\nrevision %s\ncommit %s\nfiles %d\n", r->hub == PULL_HF ? "hf" : "modelscope",
            r->repo, r->revision, r->commit[0] ? r->commit : "-", r->n_files);
    fclose(f);
}

/* The whole pull of spec into dir: 0 or 1. */
static int pull(const char *cmd, const char *spec, pull_hub_kind hub, const char *dir, const pull_fetch_params *fp) {
    pull_repo r;
    int rc = pull_repo_init(cmd, &r, hub, spec);
    if (rc) return rc;
    if (curl_global_init(CURL_GLOBAL_DEFAULT)) return cli_err(cmd, "cannot start libcurl");
    if (!fp->quiet) fprintf(stderr, "moe8 %s: %s@%s from %s\n", cmd, r.repo, r.revision, r.endpoint);
    rc = pull_repo_list(cmd, &r);
    if (!rc && !fp->quiet) {
        int64_t total = 0;
        for (int i = 0; i < r.n_files; i++) total += r.files[i].size;
        fprintf(stderr, "moe8 %s: commit %s: %d files, %.2f GB, into %s\n", cmd, r.commit[0] ? r.commit : "-",
                r.n_files, (double)total / 1e9, dir);
    }
    if (!rc) rc = pull_fetch_all(cmd, &r, dir, fp);
    if (!rc) write_record(&r, dir);
    pull_repo_free(&r);
    curl_global_cleanup();
    return rc;
}

int pull_for_model(const char *cmd, const char *spec, char *out, size_t cap) {
    pull_hub_kind hub = PULL_HF;
    const char *s = hub_prefix(spec, &hub);
    char rec[4200];
    struct stat st;
    pull_fetch_params fp = {.jobs = 4, .retries = 5};
    if (pull_default_dir(s, hub, out, cap))
        return cli_err(cmd, "no folder for '%s': set MOE8_MODELS_DIR or HOME", spec);
    snprintf(rec, sizeof rec, "%s/.moe8-pull", out);
    if (!stat(rec, &st)) return 0; /* pulled before */
    return pull(cmd, s, hub, out, &fp);
}

int cmd_pull(int argc, char **argv) {
    const char *out = NULL, *spec = NULL;
    int hub = 0, quiet = 0;
    pull_fetch_params fp = {.jobs = 4, .retries = 5};
    char dir[4096];
    const cli_opt opts[] = {
        {"--hub", NULL, CLI_CHOICE, &hub, .choices = "hf,modelscope", .arg = "H",
         .help = "hf (Hugging Face, the default) or modelscope"},
        {"--output", "-o", CLI_STR, &out, .arg = "DIR",
         .help = "the folder to fill (default: the cache, ~/.cache/moe8/models/HUB/OWNER/NAME)"},
        {"--jobs", "-j", CLI_INT, &fp.jobs, 1, 64, .arg = "N", .help = "files downloaded at once (default 4)"},
        {"--retries", NULL, CLI_INT, &fp.retries, 0, 1000, .arg = "N",
         .help = "attempts after a dropped connection, per file (default 5)"},
        {"--quiet", "-q", CLI_FLAG, &quiet, .help = "no progress on stderr"},
        {0},
    };
    /* the repository: the one argument that is neither an option nor an option's value */
    char *args[256];
    int n = 0;
    for (int i = 0; i < argc && n < 254; i++) {
        const char *a = argv[i];
        if (i > 0 && a[0] != '-' && !spec) {
            spec = a;
            continue;
        }
        args[n++] = argv[i];
        if (i > 0 && i + 1 < argc && (!strcmp(a, "-o") || !strcmp(a, "--output") || !strcmp(a, "--hub") || !strcmp(a, "--config") ||
                                      !strcmp(a, "--jobs") || !strcmp(a, "-j") || !strcmp(a, "--retries")))
            args[n++] = argv[++i];
    }
    args[n] = NULL;
    const int rc = cli_parse(CMD, SYNOPSIS, opts, NOTES, n, args);
    if (rc) return rc < 0 ? 0 : rc;
    if (!spec) return cli_usage_err(CMD, "which repository? (OWNER/NAME[@REVISION]; see -h)");
    fp.quiet = quiet;
    pull_hub_kind kind = hub == 1 ? PULL_MODELSCOPE : PULL_HF;
    spec = hub_prefix(spec, &kind);
    if (out) snprintf(dir, sizeof dir, "%s", out);
    else if (pull_default_dir(spec, kind, dir, sizeof dir))
        return cli_err(CMD, "no cache folder: set MOE8_MODELS_DIR or HOME, or give -o DIR");
    const int rc2 = pull(CMD, spec, kind, dir, &fp);
    if (rc2) return rc2;
    printf("%s\n", dir);
    return 0;
}
