/*
 * status.c — version, status strings, error filling and the log hook.
 * The library never prints: every message goes to the caller's moe8_error or
 * to the log callback set with moe8_set_log (silent by default).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

#define STR2(x) #x
#define STR(x) STR2(x)

const char *moe8_version(void) {
    return STR(MOE8_VERSION_MAJOR) "." STR(MOE8_VERSION_MINOR) "." STR(MOE8_VERSION_PATCH);
}

int moe8_version_number(void) { return MOE8_VERSION_NUMBER; }

const char *moe8_status_str(moe8_status status) {
    switch (status) {
    case MOE8_OK: return "ok";
    case MOE8_ERR_INVALID_ARG: return "invalid argument";
    case MOE8_ERR_IO: return "i/o error";
    case MOE8_ERR_FORMAT: return "format error";
    case MOE8_ERR_UNSUPPORTED: return "not supported";
    case MOE8_ERR_NOMEM: return "out of memory";
    case MOE8_ERR_NOT_FOUND: return "not found";
    case MOE8_ERR_CANCELLED: return "cancelled";
    case MOE8_ERR_COMM: return "communication error";
    case MOE8_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}

moe8_status moe8_fail(moe8_error *err, moe8_status code, int64_t offset, const char *fmt, ...) {
    if (err) {
        va_list ap;
        err->code = code;
        err->offset = offset;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    return code;
}

void moe8_error_prefix(moe8_error *err, const char *fmt, ...) {
    char prefix[MOE8_ERROR_MESSAGE_MAX], old[MOE8_ERROR_MESSAGE_MAX];
    size_t n;
    va_list ap;
    if (!err) return;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err->message, sizeof old);
    old[sizeof old - 1] = '\0';
    n = strlen(prefix);
    if (n > sizeof err->message - 3) n = sizeof err->message - 3;
    memcpy(err->message, prefix, n);
    memcpy(err->message + n, ": ", 2);
    n += 2;
    size_t m = strlen(old);
    if (m > sizeof err->message - 1 - n) m = sizeof err->message - 1 - n;
    memcpy(err->message + n, old, m);
    err->message[n + m] = '\0';
}

static moe8_log_fn g_log_fn;
static void *g_log_user;

void moe8_set_log(moe8_log_fn fn, void *user) {
    g_log_fn = fn;
    g_log_user = user;
}

void moe8_log(moe8_log_level level, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    if (!g_log_fn) return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    g_log_fn(level, msg, g_log_user);
}

void moe8_assert_fail(const char *cond, const char *file, int line) {
    /* An invariant of moe8 itself is broken: continuing would compute garbage. */
    fprintf(stderr, "moe8: internal assertion failed: %s (%s:%d)\n", cond, file, line);
    abort();
}

void *moe8_alloc_aligned(size_t n_bytes) {
    void *p = NULL;
    size_t rounded;
    if (moe8_add_size(n_bytes, 63, &rounded)) return NULL;
    rounded &= ~(size_t)63;
    if (rounded == 0) rounded = 64;
    if (posix_memalign(&p, 64, rounded) != 0) return NULL;
    return p;
}

void moe8_free_aligned(void *p) { free(p); }

void moe8_touch_pages(void *p, size_t n_bytes, int n_threads) {
    unsigned char *b = p;
    const size_t page = 4096, n_pages = (n_bytes + page - 1) / page;
    if (!p || n_bytes == 0) return;
#pragma omp parallel for schedule(static) num_threads(n_threads > 0 ? n_threads : 1) if (n_threads > 1 && n_pages > 64)
    for (size_t i = 0; i < n_pages; i++) b[i * page < n_bytes ? i * page : n_bytes - 1] = 0;
}
