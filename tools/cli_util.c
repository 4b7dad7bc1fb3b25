/*
 * cli_util.c — the small helpers every subcommand shares (cli.h): the one way
 * an error is printed ("moe8 <cmd>: <message>" on stderr, cli_err), the value
 * parsers behind the option table, the library's log hook, and the timing
 * rows' sort and percentiles. Nothing here loads a model (cli_open.c does).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* One line, written by one call: ranks and threads writing at once do not
 * interleave inside it. */
static int vprint(int code, const char *cmd, const char *fmt, va_list ap) {
    char small[1024], *msg = small;
    va_list again;
    va_copy(again, ap);
    const int n = vsnprintf(small, sizeof small, fmt, ap);
    if (n >= (int)sizeof small && (msg = malloc((size_t)n + 1)))
        vsnprintf(msg, (size_t)n + 1, fmt, again);
    va_end(again);
    if (!msg) msg = small; /* out of memory: the message cut short */
    if (cmd) fprintf(stderr, "moe8 %s: %s\n", cmd, n < 0 ? fmt : msg);
    else fprintf(stderr, "moe8: %s\n", n < 0 ? fmt : msg);
    if (msg != small) free(msg);
    return code;
}

int cli_err(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    const int rc = vprint(1, cmd, fmt, ap);
    va_end(ap);
    return rc;
}

int cli_verr(const char *cmd, const char *fmt, va_list ap) { return vprint(1, cmd, fmt, ap); }

int cli_usage_err(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    const int rc = vprint(2, cmd, fmt, ap);
    va_end(ap);
    return rc;
}

int cli_cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int cli_cmp_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

void cli_median_p99(double *t, int n, double *median, double *p99) {
    qsort(t, (size_t)n, sizeof *t, cli_cmp_double);
    *median = t[n / 2];
    *p99 = t[(size_t)((double)(n - 1) * 0.99)];
}

int cli_fail(const char *cmd, const moe8_error *err) {
    return cli_err(cmd, "%s", err->message[0] ? err->message : moe8_status_str(err->code));
}

int cli_kv_type(const char *s, moe8_dtype *out) {
    if (!strcmp(s, "f32")) *out = MOE8_DT_F32;
    else if (!strcmp(s, "f16")) *out = MOE8_DT_F16;
    else if (!strcmp(s, "bf16")) *out = MOE8_DT_BF16;
    else return -1;
    return 0;
}

int cli_parse_int(const char *s, long lo, long hi, int *out) {
    char *end;
    long v;
    if (*s < '0' || *s > '9') return -1;
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

int cli_parse_size(const char *s, uint64_t *out) {
    char *end;
    unsigned long long v;
    uint64_t mul = 1;
    if (*s < '0' || *s > '9') return -1;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno || end == s) return -1;
    if (*end == 'K' || *end == 'k') mul = 1ull << 10;
    else if (*end == 'M' || *end == 'm') mul = 1ull << 20;
    else if (*end == 'G' || *end == 'g') mul = 1ull << 30;
    else if (*end) return -1;
    if (*end && end[1]) return -1;
    if (v == 0 || v > UINT64_MAX / mul) return -1;
    *out = v * mul;
    return 0;
}

int cli_parse_list(const char *s, long lo, long hi, int *out, int cap) {
    int n = 0;
    while (n < cap) {
        char item[32];
        size_t len = strcspn(s, ",");
        if (len == 0 || len >= sizeof item) return -1;
        memcpy(item, s, len);
        item[len] = '\0';
        if (cli_parse_int(item, lo, hi, &out[n++])) return -1;
        if (!s[len]) return n;
        s += len + 1;
    }
    return -1;
}

const char *cli_kv_type_name(moe8_dtype t) {
    return t == MOE8_DT_F32 ? "f32" : t == MOE8_DT_F16 ? "f16" : t == MOE8_DT_BF16 ? "bf16" : "?";
}

static void log_to_stderr(moe8_log_level level, const char *message, void *user) {
    if (level >= MOE8_LOG_WARN) cli_err((const char *)user, "%s", message);
}

void cli_log_warnings(const char *cmd) { moe8_set_log(log_to_stderr, (void *)cmd); }
