/*
 * test_serve_log.c — the log of `moe8 serve`: the shape of every line (text:
 * "moe8 serve: MESSAGE ... ts=RFC3339 level=L"; json: one object per line
 * with ts, level, kind, msg), the start-up banner and the stop line, the
 * request id on every line of a request and in the x-request-id answer header
 * (the client's when valid, else 16 hex digits made by the server), levels
 * (debug adds a line per arriving request, warn leaves out the access log)
 * and --log-file; and --sleep-idle-seconds (asleep when idle, the resident
 * weight pages fall, /health does not wake it, a completion does and gives
 * the same greedy text).
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "fixture_model.h"
#include "serve_test.h"

static size_t on_hdr(char *p, size_t size, size_t n, void *user) {
    char *rid = user;
    const size_t k = size * n;
    if (k > 14 && !strncasecmp(p, "x-request-id:", 13)) {
        const char *v = p + 13, *e = p + k;
        while (v < e && *v == ' ') v++;
        while (e > v && (e[-1] == '\r' || e[-1] == '\n')) e--;
        snprintf(rid, 80, "%.*s", (int)(e - v), v);
    }
    return k;
}

/* method path (body: POST) with an x-request-id header (NULL: none); the
 * answer's x-request-id into rid[80]; the status. */
static long request(server *sv, const char *path, const char *body, const char *send_id, char *rid) {
    CURL *c = curl_easy_init();
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    char url[256], hdr[256];
    buf out = {0};
    long status = 0;
    rid[0] = '\0';
    if (send_id) {
        snprintf(hdr, sizeof hdr, "x-request-id: %s", send_id);
        h = curl_slist_append(h, hdr);
    }
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", sv->port, path);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &out);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_hdr);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, rid);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 120L);
    if (body) curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    sv->n_req++;
    if (curl_easy_perform(c) == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    buf_free(&out);
    return status;
}

static int is_hex16(const char *s) {
    if (strlen(s) != 16) return 0;
    for (int i = 0; i < 16; i++)
        if (!isxdigit((unsigned char)s[i])) return 0;
    return 1;
}

/* Does the text line end in " ts=YYYY-MM-DDTHH:MM:SS.mmmZ level=L"? */
static int text_shape(const char *line, size_t n) {
    static const char *const lv[] = {" level=debug", " level=info", " level=warn", " level=error"};
    for (int i = 0; i < 4; i++) {
        const size_t k = strlen(lv[i]);
        if (n < k + 28 || strncmp(line + n - k, lv[i], k)) continue;
        const char *ts = line + n - k - 28; /* " ts=" + 24 characters */
        if (strncmp(ts, " ts=", 4)) return 0;
        ts += 4;
        for (int j = 0; j < 24; j++) {
            const char want = "dddd-dd-ddTdd:dd:dd.dddZ"[j];
            if (want == 'd' ? !isdigit((unsigned char)ts[j]) : ts[j] != want) return 0;
        }
        return !strncmp(line, "moe8 serve: ", 12);
    }
    return 0;
}

/* Lines of text holding both a and b (b NULL: a alone). */
static int lines_with(const char *text, const char *a, const char *b) {
    int n = 0;
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        const char *e = strchr(p, '\n');
        const size_t k = e ? (size_t)(e - p) : strlen(p);
        char line[2048];
        snprintf(line, sizeof line, "%.*s", (int)(k < 2047 ? k : 2047), p);
        n += strstr(line, a) && (!b || strstr(line, b));
    }
    return n;
}

static const char *const COMPLETION = "{\"prompt\": \"hello\", \"max_tokens\": 3, \"temperature\": 0}";
static const char *const UNKNOWN = "{\"prompt\": \"hello\", \"max_tokens\": 2, \"foo\": 1}";

static void test_text(const char *dir) {
    server sv;
    char args[4400], rid_a[80], rid_b[80], rid_c[80], want[128];
    buf e = {0};
    snprintf(args, sizeof args, "-m '%s' --ctx-size 256 --parallel 2 --threads 2 --log-level debug", dir);
    if (server_start(&sv, "log_text", NULL, args)) return;
    sv.log_check = 0; /* at debug a request has two lines: counted below */
    CHECK(request(&sv, "/v1/models", NULL, "client-id_1.2:3", rid_a) == 200);
    CHECKF(!strcmp(rid_a, "client-id_1.2:3"), "the client's id comes back: '%s'", rid_a);
    CHECK(request(&sv, "/v1/completions", COMPLETION, NULL, rid_b) == 200);
    CHECKF(is_hex16(rid_b), "an id made by the server: '%s'", rid_b);
    CHECK(request(&sv, "/v1/completions", UNKNOWN, "bad id!", rid_c) == 200);
    CHECKF(is_hex16(rid_c) && strcmp(rid_b, rid_c), "an invalid id replaced: '%s'", rid_c);
    server_stop(&sv, 20);
    read_text(sv.err, &e);
    const char *t = buf_s(&e);
    int n_lines = 0, n_bad = 0;
    for (const char *p = t; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        const char *eol = strchr(p, '\n');
        const size_t k = eol ? (size_t)(eol - p) : strlen(p);
        if (!k || !strncmp(p, "moe8 serve: note:", 17)) continue; /* the CLI's own notes (no template) */
        n_lines++;
        if (!text_shape(p, k)) n_bad++, fprintf(stderr, "bad line: %.*s\n", (int)k, p);
    }
    CHECKF(n_lines >= 12 && n_bad == 0, "%d lines, %d not of the shape", n_lines, n_bad);
    CHECK(lines_with(t, "moe8 serve: moe8 ", "kernels ") == 1);
    CHECK(lines_with(t, "moe8 serve: layout: one process", NULL) == 1);
    CHECK(lines_with(t, "moe8 serve: loaded in ", NULL) == 1);
    CHECK(lines_with(t, "moe8 serve: model ", "layers") == 1);
    CHECK(lines_with(t, "moe8 serve: context 256 tokens, parallel 2", "threads 2") == 1);
    CHECK(lines_with(t, "moe8 serve: KV pool: ", "MiB (f16)") == 1);
    CHECK(lines_with(t, "moe8 serve: listening on http://127.0.0.1:", NULL) == 1);
    CHECK(lines_with(t, "moe8 serve: stopped after ", "3 requests finished") == 0); /* /v1/models is no job */
    CHECK(lines_with(t, "moe8 serve: stopped after ", "2 requests finished") == 1);
    /* every line of a request carries its id: arrival (debug), notes, access */
    snprintf(want, sizeof want, " id=%s ", rid_a);
    CHECK(lines_with(t, want, NULL) == 2);
    CHECK(lines_with(t, "moe8 serve: GET /v1/models 200 ", want) == 1);
    CHECK(lines_with(t, "client=127.0.0.1", want) == 1);
    snprintf(want, sizeof want, " id=%s ", rid_b);
    CHECK(lines_with(t, want, NULL) == 2);
    CHECK(lines_with(t, "moe8 serve: POST /v1/completions 200 prompt_tokens=", want) == 1);
    CHECK(lines_with(t, "gen_tokens=3 ", want) == 1 && lines_with(t, "ttft_ms=", want) == 1);
    CHECK(lines_with(t, "level=debug", want) == 1);
    snprintf(want, sizeof want, " id=%s ", rid_c);
    CHECK(lines_with(t, want, NULL) == 3);
    CHECK(lines_with(t, "moe8 serve: warning: completions request: unknown field", want) == 1);
    CHECK(lines_with(t, "level=warn", want) == 1);
    buf_free(&e);
}

static void test_json(const char *dir) {
    server sv;
    char args[4400], path[1200], rid[80];
    buf e = {0}, f = {0};
    snprintf(path, sizeof path, "%s/serve_log.jsonl", MOE8_TEST_TMP);
    remove(path);
    snprintf(args, sizeof args, "-m '%s' --ctx-size 256 --parallel 2 --threads 2 --log-format json --log-file '%s'",
             dir, path);
    /* the log goes to the file: the readiness line is looked for there */
    {
        char cmd[8192];
        snprintf(cmd, sizeof cmd, "exec '%s' serve %s --host 127.0.0.1 --port 0 >/dev/null 2>/dev/null", MOE8_CLI,
                 args);
        memset(&sv, 0, sizeof sv);
        sv.pid = spawn_group(cmd, NULL);
        for (double t0 = now_s(); now_s() - t0 < 60 && !sv.port; sleep_s(0.05)) {
            const char *at;
            read_text(path, &f);
            if ((at = strstr(buf_s(&f), "\"msg\":\"listening on http://127.0.0.1:")))
                sv.port = atoi(at + strlen("\"msg\":\"listening on http://127.0.0.1:"));
        }
    }
    CHECKF(sv.port > 0, "the json server did not start: %s", buf_s(&f));
    if (sv.port > 0) {
        CHECK(request(&sv, "/v1/completions", COMPLETION, "json-req-1", rid) == 200);
        CHECK(!strcmp(rid, "json-req-1"));
    }
    kill(sv.pid, SIGTERM);
    waitpid(sv.pid, NULL, 0);
    forget_group(sv.pid);
    read_text(path, &f);
    int n = 0, bad = 0, access = 0, banner = 0, stop = 0;
    for (const char *p = buf_s(&f); p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        const char *eol = strchr(p, '\n');
        const size_t k = eol ? (size_t)(eol - p) : strlen(p);
        if (!k) continue;
        cJSON *o = cJSON_ParseWithLength(p, k);
        const cJSON *ts = cJSON_GetObjectItem(o, "ts"), *lv = cJSON_GetObjectItem(o, "level");
        const cJSON *kind = cJSON_GetObjectItem(o, "kind"), *msg = cJSON_GetObjectItem(o, "msg");
        n++;
        if (!cJSON_IsString(ts) || strlen(ts->valuestring) != 24 || ts->valuestring[23] != 'Z' ||
            !cJSON_IsString(lv) || !cJSON_IsString(kind) || !cJSON_IsString(msg)) {
            bad++;
        } else if (!strcmp(kind->valuestring, "access")) {
            const cJSON *id = cJSON_GetObjectItem(o, "request_id"), *st = cJSON_GetObjectItem(o, "status");
            const cJSON *pt = cJSON_GetObjectItem(o, "prompt_tokens"), *gt = cJSON_GetObjectItem(o, "gen_tokens");
            const cJSON *ms = cJSON_GetObjectItem(o, "ms"), *m = cJSON_GetObjectItem(o, "method");
            access++;
            CHECK(cJSON_IsString(id) && !strcmp(id->valuestring, "json-req-1"));
            CHECK(cJSON_IsNumber(st) && st->valueint == 200 && cJSON_IsNumber(pt) && pt->valueint > 0);
            CHECK(cJSON_IsNumber(gt) && gt->valueint == 3 && cJSON_IsNumber(ms) && ms->valuedouble > 0);
            CHECK(cJSON_IsString(m) && !strcmp(m->valuestring, "POST"));
            CHECK(!strcmp(lv->valuestring, "info"));
        } else {
            banner += !strcmp(kind->valuestring, "banner");
            stop += !strcmp(kind->valuestring, "stop");
        }
        cJSON_Delete(o);
    }
    CHECKF(n >= 8 && bad == 0 && access == 1 && banner >= 6 && stop == 1,
           "%d lines, %d bad, %d access, %d banner, %d stop: %s", n, bad, access, banner, stop, buf_s(&f));
    buf_free(&e);
    buf_free(&f);
}

/* A free port (bound, read, closed: the server takes it next). */
static int free_port(void) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t n = sizeof a;
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    int port = 0;
    if (fd >= 0 && !bind(fd, (struct sockaddr *)&a, sizeof a) && !getsockname(fd, (struct sockaddr *)&a, &n))
        port = ntohs(a.sin_port);
    if (fd >= 0) close(fd);
    return port;
}

/* --log-level warn: no banner, no access lines, no listening line; a warning
 * stays, with its request's id. */
static void test_warn(const char *dir) {
    server sv;
    char cmd[8192], rid[80], want[128];
    buf e = {0}, out = {0};
    memset(&sv, 0, sizeof sv);
    sv.port = free_port();
    snprintf(sv.err, sizeof sv.err, "%s/serve_log_warn.err", MOE8_TEST_TMP);
    snprintf(cmd, sizeof cmd, "exec '%s' serve -m '%s' --ctx-size 256 --threads 2 --log-level warn --host 127.0.0.1 "
             "--port %d >/dev/null 2>'%s'", MOE8_CLI, dir, sv.port, sv.err);
    sv.pid = spawn_group(cmd, NULL);
    long st = 0;
    for (double t0 = now_s(); now_s() - t0 < 60 && st != 200; sleep_s(0.05))
        st = http(&sv, "GET", "/health", NULL, 0, NULL, &out);
    CHECKF(st == 200, "the warn-level server did not answer /health");
    CHECK(request(&sv, "/v1/completions", UNKNOWN, "warn-1", rid) == 200);
    kill(sv.pid, SIGTERM);
    waitpid(sv.pid, NULL, 0);
    forget_group(sv.pid);
    read_text(sv.err, &e);
    snprintf(want, sizeof want, " id=warn-1 ");
    CHECKF(lines_with(buf_s(&e), "level=", NULL) == 1 && lines_with(buf_s(&e), "level=warn", want) == 1 &&
           lines_with(buf_s(&e), "unknown field", want) == 1, "at warn, one line: %s", buf_s(&e));
    buf_free(&e);
    buf_free(&out);
}

/* kB of a "Name:" line of /proc/PID/status, or -1. */
static long status_kb(pid_t pid, const char *name) {
    char path[64], line[256];
    long v = -1;
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, name, strlen(name))) v = atol(line + strlen(name));
    if (f) fclose(f);
    return v;
}

/* The text of a greedy completion, into out. */
static long complete(server *sv, buf *text) {
    buf out = {0};
    const long st = post(sv, "/v1/completions", "{\"prompt\": \"the sleep test\", \"max_tokens\": 8, "
                         "\"temperature\": 0}", &out);
    cJSON *o = cJSON_Parse(buf_s(&out));
    const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0);
    const cJSON *t = cJSON_GetObjectItem(ch, "text");
    text->n = 0;
    buf_str(text, cJSON_IsString(t) ? t->valuestring : "(none)");
    cJSON_Delete(o);
    buf_free(&out);
    return st;
}

/* --sleep-idle-seconds: asleep after the idle time (KV and mapped weights
 * given back: the resident file pages fall), /health does not wake it, the
 * next completion does and gives the same greedy text as before. */
static void test_sleep(const char *dir) {
    server sv;
    char args[4400];
    buf e = {0}, t1 = {0}, t2 = {0}, out = {0};
    snprintf(args, sizeof args, "-m '%s' --ctx-size 256 --parallel 2 --threads 2 --sleep-idle-seconds 1", dir);
    if (server_start(&sv, "log_sleep", NULL, args)) return;
    CHECK(complete(&sv, &t1) == 200);
    const long file_awake = status_kb(sv.pid, "RssFile:");
    int asleep = 0;
    for (double t0 = now_s(); now_s() - t0 < 20 && !asleep; sleep_s(0.1)) {
        read_text(sv.err, &e);
        asleep = strstr(buf_s(&e), "moe8 serve: asleep after ") != NULL;
    }
    CHECKF(asleep, "not asleep: %s", buf_s(&e));
    const long file_asleep = status_kb(sv.pid, "RssFile:");
    printf("test_serve_log: RssFile %ld kB awake, %ld kB asleep\n", file_awake, file_asleep);
    CHECKF(file_asleep >= 0 && file_asleep < file_awake - 1024, "resident file pages %ld kB -> %ld kB", file_awake,
           file_asleep);
    CHECK(lines_with(buf_s(&e), "asleep after ", "MiB given back") == 1);
    for (int i = 0; i < 3; i++) CHECK(http(&sv, "GET", "/health", NULL, 0, NULL, &out) == 200);
    sleep_s(0.3);
    read_text(sv.err, &e);
    CHECKF(lines_with(buf_s(&e), "moe8 serve: awake", NULL) == 0, "/health woke it: %s", buf_s(&e));
    CHECK(complete(&sv, &t2) == 200);
    CHECKF(!strcmp(buf_s(&t1), buf_s(&t2)), "after the wake '%s', before '%s'", buf_s(&t2), buf_s(&t1));
    read_text(sv.err, &e);
    CHECK(lines_with(buf_s(&e), "moe8 serve: awake: a request after ", NULL) == 1);
    server_stop(&sv, 20);
    buf_free(&e), buf_free(&t1), buf_free(&t2), buf_free(&out);
}

int main(void) {
    fx_opts o = serve_fixture_opts();
    const char *dir;
    serve_test_init("test_serve_log");
    dir = fx_test_model("serve_log", &o, 1);
    test_text(dir);
    phase("text");
    test_json(dir);
    phase("json");
    test_warn(dir);
    phase("warn");
    test_sleep(dir);
    phase("sleep");
    curl_global_cleanup();
    printf("test_serve_log: %.1f s\n", now_s() - g_t0);
    return test_summary();
}
