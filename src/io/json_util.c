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

/* *dup: the first key of `object` seen twice, or NULL. -1: out of memory. */
static int find_dup(const cJSON *object, const char **dup) {
    const cJSON *c;
    const char **keys;
    moe8_name_table t;
    size_t n = 0;
    *dup = NULL;
    if (!cJSON_IsObject(object)) return 0;
    cJSON_ArrayForEach(c, object) n++;
    if (n < 2) return 0;
    if (n > UINT32_MAX || !(keys = malloc(n * sizeof *keys))) return -1;
    if (moe8_name_table_init(&t, n, key_of, keys)) {
        free(keys);
        return -1;
    }
    n = 0;
    cJSON_ArrayForEach(c, object) {
        keys[n] = c->string ? c->string : "";
        if (moe8_name_table_add(&t, (uint32_t)n) >= 0) {
            *dup = keys[n];
            break;
        }
        n++;
    }
    moe8_name_table_free(&t);
    free(keys);
    return 0;
}

/* The status of find_dup's answer (rc, dup) for an object at `where`. */
static moe8_status dup_status(int rc, const char *dup, const char *label, const char *where,
                              moe8_error *err) {
    if (rc) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "'%s': out of memory checking keys", label);
    if (!dup) return MOE8_OK;
    return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': duplicate key '%.128s' %s%s", label, dup,
                     where && *where ? "in " : "at the top level", where ? where : "");
}

moe8_status moe8_json_check_unique_keys(const cJSON *object, const char *label, const char *where,
                                        moe8_error *err) {
    const char *dup;
    const int rc = find_dup(object, &dup);
    return dup_status(rc, dup, label, where, err);
}

#define PATH_CAP 256

/* Where an item sits: its parent's frame and its key there (or, in an
 * array, its index). The path is written only for a message. */
typedef struct at {
    const struct at *up;
    const char *key;
    int index;
} at;

/* The path of frame f ("" at the top level) into path[0..PATH_CAP); its length. */
static size_t path_of(const at *f, char *path) {
    if (!f->up) return 0;
    const size_t n = path_of(f->up, path);
    int k;
    if (f->key) k = snprintf(path + n, PATH_CAP - n, "%s%.64s", n ? "." : "", f->key);
    else k = snprintf(path + n, PATH_CAP - n, "[%d]", f->index);
    k = k < 0 ? 0 : n + (size_t)k < PATH_CAP ? k : (int)(PATH_CAP - 1 - n);
    return n + (size_t)k;
}

/* Check every object under the item of frame f. */
static moe8_status check_tree(const cJSON *item, const at *f, const char *label, moe8_error *err) {
    const cJSON *c;
    const char *dup;
    const int rc = find_dup(item, &dup);
    int i = 0;
    moe8_status s = MOE8_OK;
    if (rc || dup) {
        char path[PATH_CAP] = "";
        path_of(f, path);
        return dup_status(rc, dup, label, path, err);
    }
    for (c = item->child; c && s == MOE8_OK; c = c->next, i++) {
        if (!cJSON_IsObject(c) && !cJSON_IsArray(c)) continue;
        const at kid = {f, cJSON_IsObject(item) ? c->string : NULL, i};
        s = check_tree(c, &kid, label, err);
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
    const at top = {NULL, NULL, 0};
    cJSON *j;
    moe8_status s = moe8_json_parse_syntax(text, len, 0, label, NULL, &j, err);
    *out = NULL;
    if (s != MOE8_OK) return s;
    if ((s = check_tree(j, &top, label, err)) != MOE8_OK) {
        cJSON_Delete(j);
        return s;
    }
    *out = j;
    return MOE8_OK;
}

const char *moe8_json_type_name(const cJSON *v) {
    return cJSON_IsString(v) ? "a string" : cJSON_IsNumber(v) ? "a number" : cJSON_IsBool(v) ? "a boolean"
           : cJSON_IsArray(v) ? "an array" : cJSON_IsObject(v) ? "an object" : "null";
}
