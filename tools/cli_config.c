/*
 * cli_config.c — the file of `--config FILE` (cli.h), read into a cJSON
 * object for cli_opts.c to apply: JSON (the whole file one object), or, when
 * the name ends in .toml, the flat subset of TOML an options file needs:
 *
 *   # a comment
 *   port = 8080
 *   log-level = "info"          # basic strings ("...", with \" \\ \n \t), or 'literal'
 *   no-webui = true
 *   temp = 0.7
 *
 * one `key = value` a line, keys bare (A-Z a-z 0-9 - _) or quoted. Tables,
 * arrays, inline tables, multi-line strings and dates are refused naming the
 * line. At most 1 MiB.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli.h"

/* A basic ("...") or literal ('...') string at *p into out; 0, or -1. */
static int toml_string(const char **p, char *out, size_t cap) {
    const char q = **p;
    size_t n = 0;
    for ((*p)++; **p && **p != q; (*p)++) {
        char c = **p;
        if (q == '"' && c == '\\') {
            (*p)++;
            c = **p == 'n' ? '\n' : **p == 't' ? '\t' : **p == '"' ? '"' : **p == '\\' ? '\\' : 0;
            if (!c) return -1;
        }
        if (n + 1 >= cap) return -1;
        out[n++] = c;
    }
    if (**p != q) return -1;
    (*p)++;
    out[n] = '\0';
    return 0;
}

/* One "key = value" line into obj; NULL, or why not. */
static const char *toml_line(const char *s, cJSON *obj) {
    char key[128], val[4096];
    size_t n = 0;
    while (*s == ' ' || *s == '\t') s++;
    if (!*s || *s == '#') return NULL;
    if (*s == '[') return "tables are not supported (options are top-level keys)";
    if (*s == '"' || *s == '\'') {
        if (toml_string(&s, key, sizeof key)) return "a bad quoted key";
    } else {
        while (isalnum((unsigned char)*s) || *s == '-' || *s == '_')
            if (n + 1 < sizeof key) key[n++] = *s++;
            else return "a key too long";
        key[n] = '\0';
        if (!n) return "a line that is not key = value";
    }
    while (*s == ' ' || *s == '\t') s++;
    if (*s++ != '=') return "a line that is not key = value";
    while (*s == ' ' || *s == '\t') s++;
    cJSON *v = NULL;
    if (*s == '"' || *s == '\'') {
        if ((s[0] == '"' && !strncmp(s, "\"\"\"", 3)) || (s[0] == '\'' && !strncmp(s, "'''", 3)))
            return "multi-line strings are not supported";
        if (toml_string(&s, val, sizeof val)) return "an unterminated or bad string";
        v = cJSON_CreateString(val);
    } else if (!strncmp(s, "true", 4) && !isalnum((unsigned char)s[4])) {
        v = cJSON_CreateTrue(), s += 4;
    } else if (!strncmp(s, "false", 5) && !isalnum((unsigned char)s[5])) {
        v = cJSON_CreateFalse(), s += 5;
    } else if (*s == '[' || *s == '{') {
        return "arrays and inline tables are not supported";
    } else {
        char *end;
        errno = 0;
        const double d = strtod(s, &end);
        if (end == s || errno) return "a value that is not a string, number or boolean";
        v = cJSON_CreateNumber(d), s = end;
    }
    while (*s == ' ' || *s == '\t') s++;
    if (*s && *s != '#') return cJSON_Delete(v), "something after the value";
    if (cJSON_GetObjectItemCaseSensitive(obj, key)) return cJSON_Delete(v), "a key given twice";
    cJSON_AddItemToObject(obj, key, v);
    return NULL;
}

int cli_config_read(const char *cmd, const char *path, cJSON **out) {
    char *text = malloc(1 << 20);
    FILE *f = fopen(path, "rb");
    size_t n = 0;
    *out = NULL;
    if (!f || !text) {
        free(text);
        if (f) fclose(f);
        return cli_usage_err(cmd, "--config '%s': cannot open: %s", path, strerror(errno));
    }
    n = fread(text, 1, (1 << 20) - 1, f);
    fclose(f);
    text[n] = '\0';
    if (n == (1 << 20) - 1) return free(text), cli_usage_err(cmd, "--config '%s': larger than 1 MiB", path);
    const size_t len = strlen(path);
    if (len > 5 && !strcmp(path + len - 5, ".toml")) {
        cJSON *obj = cJSON_CreateObject();
        int line = 1;
        for (char *p = text; p; line++) {
            char *eol = strchr(p, '\n');
            if (eol) *eol = '\0';
            if (eol && eol > p && eol[-1] == '\r') eol[-1] = '\0';
            const char *why = toml_line(p, obj);
            if (why) {
                cJSON_Delete(obj);
                free(text);
                return cli_usage_err(cmd, "--config '%s': line %d: %s", path, line, why);
            }
            p = eol ? eol + 1 : NULL;
        }
        free(text);
        *out = obj;
        return 0;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
    if (!cJSON_IsObject(root)) {
        const long at = root ? 0L : (long)(cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() - text : 0);
        cJSON_Delete(root);
        free(text);
        return cli_usage_err(cmd, "--config '%s': not a JSON object%s (near byte %ld)", path,
                             root ? "" : ": a syntax error", at);
    }
    free(text);
    *out = root;
    return 0;
}
