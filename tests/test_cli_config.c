/*
 * test_cli_config.c — `--config FILE` (JSON or TOML: tools/cli_opts.c,
 * tools/cli_config.c) through the moe8
 * binary: the file's options apply, the command line wins over them (shown
 * by make-model, whose output folder and layer count are read back), and a
 * bad file is refused naming the file and the key: an unknown key, a bad
 * value, a flag that is not a boolean, a value of the wrong JSON type, a
 * syntax error, a missing file.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "test.h"

static char g_out[1 << 16], g_dir[1024];

static int cli(const char *args) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' %s 2>&1", MOE8_CLI, args);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    const size_t n = fread(g_out, 1, sizeof g_out - 1, p);
    g_out[n] = '\0';
    const int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static const char *write_conf(const char *name, const char *text) {
    static char path[1200];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) fputs(text, f), fclose(f);
    return path;
}

/* num_hidden_layers of DIR/config.json, or -1. */
static int layers_of(const char *dir) {
    char path[1300], buf[8192];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    const size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *at = strstr(buf, "\"num_hidden_layers\"");
    return at ? atoi(strchr(at, ':') + 1) : -1;
}

int main(void) {
    char args[4096], conf_text[2048], a[1200], b[1200];
    struct stat st;
    snprintf(g_dir, sizeof g_dir, "%s/cli_config", MOE8_TEST_TMP);
    snprintf(args, sizeof args, "rm -rf '%s' && mkdir -p '%s'", g_dir, g_dir);
    CHECK(system(args) == 0);
    snprintf(a, sizeof a, "%s/from_file", g_dir);
    snprintf(b, sizeof b, "%s/from_cmdline", g_dir);
    /* the file's options, and the command line over them */
    snprintf(conf_text, sizeof conf_text, "{\"arch\": \"mixtral\", \"preset\": \"tiny\", \"layers\": 2, \"o\": \"%s\","
             " \"seed\": 7, \"force\": true}\n", a);
    const char *conf = write_conf("make.json", conf_text);
    snprintf(args, sizeof args, "make-model --config '%s'", conf);
    int rc = cli(args);
    CHECKF(rc == 0 && layers_of(a) == 2, "from the file alone: exit %d: %s", rc, g_out);
    snprintf(args, sizeof args, "make-model --config '%s' --layers 1 -o '%s'", conf, b);
    rc = cli(args);
    CHECKF(rc == 0 && layers_of(b) == 1, "the command line wins: exit %d, layers %d: %s", rc, layers_of(b), g_out);
    snprintf(args, sizeof args, "make-model --layers 1 -o '%s' --config '%s'", b, conf); /* order does not matter */
    rc = cli(args);
    CHECKF(rc == 2 || (rc == 0 && layers_of(b) == 1), "--config after: exit %d: %s", rc, g_out);
    /* the same from TOML: its values, and the command line over them */
    snprintf(conf_text, sizeof conf_text, "# moe8 make-model\narch = 'mixtral'\npreset = \"tiny\"  # a comment\n"
             "layers = 2\n\"o\" = \"%s\"\nforce = true\nseed = 7\n", a);
    const char *toml = write_conf("make.toml", conf_text);
    snprintf(args, sizeof args, "make-model --config '%s' --layers 1", toml);
    rc = cli(args);
    CHECKF(rc == 0 && layers_of(a) == 1, "TOML, the command line wins: exit %d, layers %d: %s", rc, layers_of(a), g_out);
    static const struct {
        const char *text, *want;
    } bad_toml[] = {
        {"layers = 2\n[server]\nport = 1\n", "line 2: tables are not supported"},
        {"layers = [1, 2]\n", "line 1: arrays and inline tables are not supported"},
        {"# ok\nlayers = \"2\n", "line 2: an unterminated or bad string"},
        {"layers 2\n", "line 1: a line that is not key = value"},
        {"layers = 2\nlayers = 3\n", "line 2: a key given twice"},
        {"layers = 0\n", "key 'layers' wants an integer"},
        {"layerz = 1\n", "unknown key 'layerz'"},
    };
    for (size_t i = 0; i < sizeof bad_toml / sizeof bad_toml[0]; i++) {
        const char *p = write_conf("bad.toml", bad_toml[i].text);
        snprintf(args, sizeof args, "make-model --config '%s' -o '%s/never'", p, g_dir);
        rc = cli(args);
        CHECKF(rc == 2 && strstr(g_out, bad_toml[i].want) && strstr(g_out, "bad.toml"), "toml %zu: exit %d: %s", i, rc,
               g_out);
    }
    /* a bad file, named with its key */
    static const struct {
        const char *file, *text, *want;
    } bad[] = {
        {"unknown.json", "{\"preset\": \"tiny\", \"no-such-option\": 1}", "unknown key 'no-such-option'"},
        {"value.json", "{\"layers\": 0}", "key 'layers' wants an integer"},
        {"choice.json", "{\"preset\": \"huge\"}", "key 'preset' wants one of"},
        {"flag.json", "{\"force\": 1}", "key 'force' is a flag"},
        {"type.json", "{\"layers\": [1, 2]}", "key 'layers' wants a string or a number"},
        {"syntax.json", "{\"layers\": 1,", "not a JSON object: a syntax error"},
        {"array.json", "[1]", "not a JSON object"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *p = write_conf(bad[i].file, bad[i].text);
        snprintf(args, sizeof args, "make-model --config '%s' -o '%s/never'", p, g_dir);
        rc = cli(args);
        CHECKF(rc == 2 && strstr(g_out, bad[i].want) && strstr(g_out, bad[i].file), "%s: exit %d: %s", bad[i].file,
               rc, g_out);
    }
    snprintf(args, sizeof args, "make-model --config '%s/missing.json'", g_dir);
    CHECKF(cli(args) == 2 && strstr(g_out, "missing.json") && strstr(g_out, "cannot open"), "%s", g_out);
    snprintf(a, sizeof a, "%s/never", g_dir);
    CHECK(stat(a, &st) != 0);
    /* serve: a config key checked by the command after parsing */
    const char *sv = write_conf("serve.json", "{\"m\": \"/nonexistent\", \"log_level\": \"loud\"}");
    snprintf(args, sizeof args, "serve --config '%s'", sv);
    CHECKF(cli(args) == 2 && strstr(g_out, "--log-level wants one of error|warn|info|debug, got 'loud'"), "%s", g_out);
    CHECK(cli("serve --help") == 0 && strstr(g_out, "--config FILE"));
    snprintf(args, sizeof args, "rm -rf '%s'", g_dir);
    if (!test_n_fail) CHECK(system(args) == 0);
    return test_summary();
}
