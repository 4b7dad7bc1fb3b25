/*
 * serve_log.c — how `moe8 serve` writes its log (cli.h): the server's
 * records (moe8_serve_record) and the command's own start-up lines, filtered
 * by --log-level, as text or JSON lines, to stderr or --log-file (appended).
 *
 * text: "moe8 serve: MESSAGE[ client=ADDR][ ttft_ms=T] id=RID ts=TIME level=L"
 *       (the message first, as the access log always was; key=value after it;
 *       id only on a request's lines)
 * json: one object a line: ts, level, kind, msg, then request_id, client,
 *       method, path, status, prompt_tokens, gen_tokens, cached_tokens, ms,
 *       ttft_ms where the record has them.
 * TIME is UTC with milliseconds, RFC 3339 ("2026-12-07T22:05:00.123Z"). One
 * write per line under a lock: the HTTP thread, the workers and the engine
 * log at once.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "cli.h"

static struct {
    FILE *f;
    int level, json; /* the least level written (moe8_log_level); JSON lines */
    const char *cmd;
    pthread_mutex_t lock;
} g_log = {.level = MOE8_LOG_INFO, .lock = PTHREAD_MUTEX_INITIALIZER};

static const char *const LEVELS[4] = {"debug", "info", "warn", "error"};

int cli_log_setup(const char *cmd, const char *level, const char *format, const char *file) {
    g_log.cmd = cmd;
    g_log.f = stderr;
    g_log.level = MOE8_LOG_INFO;
    if (level) {
        int i = 0;
        while (i < 4 && strcmp(level, LEVELS[i])) i++;
        if (i == 4) return cli_bad_value(cmd, "--log-level", "one of error|warn|info|debug", level);
        g_log.level = i;
    }
    if (format && strcmp(format, "text") && strcmp(format, "json"))
        return cli_bad_value(cmd, "--log-format", "one of text|json", format);
    g_log.json = format && !strcmp(format, "json");
    if (file && !(g_log.f = fopen(file, "a"))) {
        g_log.f = stderr;
        return cli_err(cmd, "cannot open the log file '%s': %m", file);
    }
    return 0;
}

void cli_log_close(void) {
    if (g_log.f && g_log.f != stderr) fclose(g_log.f);
    g_log.f = NULL;
}

static void timestamp(char *out, size_t cap) {
    struct timeval tv;
    struct tm tm;
    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);
    const size_t n = strftime(out, cap, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + n, cap - n, ".%03dZ", (int)(tv.tv_usec / 1000));
}

static char *json_line(const moe8_serve_record *r, const char *ts) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "ts", ts);
    cJSON_AddStringToObject(o, "level", LEVELS[r->level & 3]);
    cJSON_AddStringToObject(o, "kind", r->kind);
    cJSON_AddStringToObject(o, "msg", r->message);
    if (r->request_id) cJSON_AddStringToObject(o, "request_id", r->request_id);
    if (r->client) cJSON_AddStringToObject(o, "client", r->client);
    if (r->method) cJSON_AddStringToObject(o, "method", r->method);
    if (r->path) cJSON_AddStringToObject(o, "path", r->path);
    if (!strcmp(r->kind, "access")) {
        cJSON_AddNumberToObject(o, "status", r->status);
        cJSON_AddNumberToObject(o, "prompt_tokens", r->prompt_tokens);
        cJSON_AddNumberToObject(o, "gen_tokens", r->gen_tokens);
        cJSON_AddNumberToObject(o, "cached_tokens", r->cached_tokens);
        cJSON_AddNumberToObject(o, "ms", (double)(int64_t)(r->ms * 1000) / 1000);
        if (r->ttft_ms >= 0) cJSON_AddNumberToObject(o, "ttft_ms", (double)(int64_t)(r->ttft_ms * 1000) / 1000);
    }
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

void cli_log_record(void *user, const moe8_serve_record *r) {
    char ts[40], line[2048];
    (void)user;
    if ((int)r->level < g_log.level || !g_log.f) return;
    timestamp(ts, sizeof ts);
    char *js = g_log.json ? json_line(r, ts) : NULL;
    if (!g_log.json) {
        int n = snprintf(line, sizeof line, "moe8 %s: %s", g_log.cmd, r->message);
        if (n < (int)sizeof line && r->client && !strcmp(r->kind, "access"))
            n += snprintf(line + n, sizeof line - (size_t)n, " client=%s", r->client);
        if (n < (int)sizeof line && r->ttft_ms >= 0 && !strcmp(r->kind, "access"))
            n += snprintf(line + n, sizeof line - (size_t)n, " ttft_ms=%.1f", r->ttft_ms);
        if (n < (int)sizeof line && r->request_id)
            n += snprintf(line + n, sizeof line - (size_t)n, " id=%s", r->request_id);
        if (n < (int)sizeof line)
            snprintf(line + n, sizeof line - (size_t)n, " ts=%s level=%s", ts, LEVELS[r->level & 3]);
    }
    pthread_mutex_lock(&g_log.lock);
    fprintf(g_log.f, "%s\n", js ? js : line);
    fflush(g_log.f);
    pthread_mutex_unlock(&g_log.lock);
    free(js);
}

void cli_log(moe8_log_level level, const char *kind, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    moe8_serve_record r = {.level = level, .kind = kind, .message = msg, .ttft_ms = -1};
    cli_log_record(NULL, &r);
}
