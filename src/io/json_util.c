/*
 * json_util.c — exact-integer checks over cJSON numbers, bounded whole-file
 * reads, and JSON parsing with byte offsets in errors.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

moe8_status moe8_read_file(const char *path, size_t max_bytes, char **out, size_t *out_len,
                           moe8_error *err) {
    struct stat st;
    char *buf = NULL;
    size_t len, got = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    *out = NULL;
    if (out_len) *out_len = 0;
    if (fd < 0)
        return moe8_fail(err, errno == ENOENT ? MOE8_ERR_NOT_FOUND : MOE8_ERR_IO, -1,
                         "cannot open '%s': %s", path, strerror(errno));
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return moe8_fail(err, MOE8_ERR_IO, -1, "'%s' is not a regular file", path);
    }
    if ((uint64_t)st.st_size > max_bytes) {
        close(fd);
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s' is %lld bytes, more than the %zu allowed",
                         path, (long long)st.st_size, max_bytes);
    }
    len = (size_t)st.st_size;
    buf = malloc(len + 1);
    if (!buf) {
        close(fd);
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "cannot allocate %zu bytes for '%s'", len + 1, path);
    }
    while (got < len) {
        ssize_t r = read(fd, buf + got, len - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            int e = errno;
            free(buf);
            close(fd);
            return moe8_fail(err, MOE8_ERR_IO, (int64_t)got, "cannot read '%s': %s", path,
                             r == 0 ? "unexpected end of file" : strerror(e));
        }
        got += (size_t)r;
    }
    close(fd);
    buf[len] = '\0';
    *out = buf;
    if (out_len) *out_len = len;
    return MOE8_OK;
}

moe8_status moe8_json_parse(const char *text, size_t len, const char *label, cJSON **out,
                            moe8_error *err) {
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    *out = NULL;
    if (!j) {
        int64_t off = end ? (int64_t)(end - text) : -1;
        return moe8_fail(err, MOE8_ERR_FORMAT, off, "'%s': invalid JSON near byte %lld", label,
                         (long long)off);
    }
    *out = j;
    return MOE8_OK;
}
