/*
 * json_util.c — exact-integer checks over cJSON numbers and strict JSON
 * parsing: byte offsets in errors, nothing but whitespace after the value,
 * and no object anywhere with a key twice (cJSON
 * would silently keep the first copy where Python's json keeps the last, so a
 * file with duplicates means different things to different readers).
 * Does not: stream, or validate anything about what the JSON says.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/index.h"
#include "io/json_util.h"

int moe8_json_exact_int(const cJSON *item, int64_t *out) {
    double v;
    if (!item || !cJSON_IsNumber(item)) return -1;
    v = item->valuedouble;
    if (!isfinite(v) || v != floor(v)) return -1;
    if (v > MOE8_JSON_MAX_EXACT || v < -MOE8_JSON_MAX_EXACT) return -1;
    *out = (int64_t)v;
    return 0;
}

/* ---- duplicate keys ------------------------------------------------------ */

static const char *key_of(const void *ctx, uint32_t i) { return ((const char *const *)ctx)[i]; }

moe8_status moe8_json_check_unique_keys(const cJSON *object, const char *label, const char *where,
                                        moe8_error *err) {
    const cJSON *c;
    const char **keys, *dup = NULL;
    moe8_name_table t;
    size_t n = 0;
    if (!cJSON_IsObject(object)) return MOE8_OK;
    cJSON_ArrayForEach(c, object) n++;
    if (n < 2) return MOE8_OK;
    if (n > UINT32_MAX || !(keys = malloc(n * sizeof *keys)))
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "'%s': out of memory checking %zu keys", label, n);
    if (moe8_name_table_init(&t, n, key_of, keys)) {
        free(keys);
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "'%s': out of memory checking %zu keys", label, n);
    }
    n = 0;
    cJSON_ArrayForEach(c, object) {
        keys[n] = c->string ? c->string : "";
        if (moe8_name_table_add(&t, (uint32_t)n) >= 0) {
            dup = keys[n];
            break;
        }
        n++;
    }
    moe8_name_table_free(&t);
    free(keys);
    if (dup)
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': duplicate key '%.128s' %s%s", label, dup,
                         where && *where ? "in " : "at the top level", where ? where : "");
    return MOE8_OK;
}

#define PATH_CAP 256

/* Check every object under `item`; path[0..plen) names it ("" = top level). */
static moe8_status check_tree(const cJSON *item, const char *label, char *path, size_t plen,
                              moe8_error *err) {
    const cJSON *c;
    int i = 0;
    moe8_status s = moe8_json_check_unique_keys(item, label, path, err);
    for (c = item->child; c && s == MOE8_OK; c = c->next, i++) {
        int k;
        if (!cJSON_IsObject(c) && !cJSON_IsArray(c)) continue;
        if (cJSON_IsObject(item))
            k = snprintf(path + plen, PATH_CAP - plen, "%s%.64s", plen ? "." : "", c->string);
        else
            k = snprintf(path + plen, PATH_CAP - plen, "[%d]", i);
        k = k < 0 ? 0 : plen + (size_t)k < PATH_CAP ? k : (int)(PATH_CAP - 1 - plen);
        s = check_tree(c, label, path, plen + (size_t)k, err);
        path[plen] = '\0';
    }
    return s;
}

/* ---- parsing ------------------------------------------------------------- */

static int is_json_space(char ch) { return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r'; }

moe8_status moe8_json_parse_syntax(const char *text, size_t len, int64_t base, const char *label,
                                   const char *what, cJSON **out, moe8_error *err) {
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    *out = NULL;
    if (!j) {
        int64_t off = end ? base + (int64_t)(end - text) : -1;
        if (what)
            return moe8_fail(err, MOE8_ERR_FORMAT, off, "'%s': %s is not valid JSON near byte %lld",
                             label, what, (long long)off);
        return moe8_fail(err, MOE8_ERR_FORMAT, off, "'%s': invalid JSON near byte %lld", label,
                         (long long)off);
    }
    while (end && end < text + len && is_json_space(*end)) end++;
    if (end && end < text + len) {
        int64_t off = base + (int64_t)(end - text);
        cJSON_Delete(j);
        return moe8_fail(err, MOE8_ERR_FORMAT, off, "'%s': unexpected bytes after the %s at byte %lld",
                         label, what ? what : "JSON value", (long long)off);
    }
    *out = j;
    return MOE8_OK;
}

moe8_status moe8_json_parse(const char *text, size_t len, const char *label, cJSON **out,
                            moe8_error *err) {
    char path[PATH_CAP] = "";
    cJSON *j;
    moe8_status s = moe8_json_parse_syntax(text, len, 0, label, NULL, &j, err);
    *out = NULL;
    if (s != MOE8_OK) return s;
    if ((s = check_tree(j, label, path, 0, err)) != MOE8_OK) {
        cJSON_Delete(j);
        return s;
    }
    *out = j;
    return MOE8_OK;
}
