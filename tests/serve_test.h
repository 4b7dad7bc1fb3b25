/*
 * serve_test.h — what the tests of `moe8 serve` (tests/test_serve*.c) share:
 * a server started in its own process group and stopped with its checks,
 * HTTP through libcurl (one request, or many at once) and raw sockets,
 * /metrics samples, OpenAI requests and the parsing of their answers
 * (whole bodies and SSE streams), the table-driven check of an error
 * answer, the access-log count of what a client sent, the node clients
 * (tests/clients/, one runner) and progress lines with the CPU spent so far.
 * Include after test.h and fixture_model.h; link libcurl and cJSON.
 *
 *   serve_test_init("test_serve_x");         // env, signals, libcurl, g_asan
 *   fx_opts o = serve_fixture_opts();        // the tiny Qwen3 fixture's options
 *   server sv;
 *   if (server_start(&sv, "name", NULL, "-m DIR --threads 2") == 0) {
 *       http(&sv, "GET", "/health", NULL, 0, NULL, &out);
 *       server_stop(&sv, 10);                // SIGTERM; exit 0, no sanitizer report
 *   }
 *
 * Servers listen on 127.0.0.1 port 0 (the port is read from the one
 * "listening" line), run in their own process group and die with the test
 * (PR_SET_PDEATHSIG; kill_groups at exit and on fatal signals). The ASan
 * build (g_asan) waits longer everywhere.
 */
#ifndef MOE8_SERVE_TEST_H
#define MOE8_SERVE_TEST_H

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>

#include <cjson/cJSON.h>
#include <curl/curl.h>

#include "test.h"
#include "fixture_model.h"

#define QWEN_VOCAB 151669

#ifndef MOE8_TEST_SANITIZE
#define MOE8_TEST_SANITIZE ""
#endif
static int g_asan; /* the ASan build: smaller sizes, longer waits */

static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* ---- growing buffer ------------------------------------------------------------ */

typedef struct {
    char *p;
    size_t n, cap;
} buf;

static inline void buf_add(buf *b, const void *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->n + n + 1) cap *= 2;
        if (!(b->p = realloc(b->p, cap))) abort();
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static inline void buf_str(buf *b, const char *s) { buf_add(b, s, strlen(s)); }

static inline void buf_free(buf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

static inline const char *buf_s(const buf *b) { return b->p ? b->p : ""; }

/* ---- servers ----------------------------------------------------------------------- */

typedef struct {
    pid_t pid;       /* also its process group */
    int port;
    int n_req;       /* requests sent (each must give one access-log line) */
    int log_check;   /* count access-log lines at the stop */
    char err[4200];  /* its stderr */
    pid_t ranks[8];  /* under mpirun: the ranks (each in its own process group) */
    int n_ranks;
    pid_t term;      /* the process server_stop signals (0: pid) */
    int any_status;  /* mpirun signalled: its exit status is OpenMPI's, not ours */
} server;

static pid_t g_groups[64], g_ranks[64]; /* live servers' process groups; mpirun's ranks */
static int g_n_groups, g_n_ranks;

/* Last resort (exit, or a fatal signal): no process of ours outlives the test. */
static inline void kill_groups(void) {
    for (int i = 0; i < g_n_ranks; i++)
        if (g_ranks[i] > 0) kill(g_ranks[i], SIGKILL), g_ranks[i] = 0;
    for (int i = 0; i < g_n_groups; i++)
        if (g_groups[i] > 0) {
            kill(-g_groups[i], SIGKILL);
            waitpid(g_groups[i], NULL, 0);
            g_groups[i] = 0;
        }
}

static inline void on_fatal(int sig) {
    kill_groups();
    signal(sig, SIG_DFL);
    raise(sig);
}

static inline void forget_group(pid_t pid) {
    for (int i = 0; i < g_n_groups; i++)
        if (g_groups[i] == pid) g_groups[i] = 0;
}

/* The whole file (also /proc files, whose size reads 0). */
static inline void read_text(const char *path, buf *b) {
    FILE *f = fopen(path, "rb");
    char tmp[65536];
    size_t k;
    b->n = 0;
    buf_add(b, "", 0);
    while (f && (k = fread(tmp, 1, sizeof tmp, f)) > 0) buf_add(b, tmp, k);
    if (f) fclose(f);
}

/* Pids of the children of `parent` (mpirun's ranks). */
static inline int children(pid_t parent, pid_t *out, int cap) {
    char path[64];
    buf b = {0};
    int n = 0;
    snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)parent, (int)parent);
    read_text(path, &b);
    for (char *p = b.p, *end; p && n < cap; p = end) {
        long v = strtol(p, &end, 10);
        if (end == p) break;
        out[n++] = (pid_t)v;
    }
    buf_free(&b);
    return n;
}

/* Run `sh -c cmd` in a new process group that dies with the test, with
 * `env` ("NAME=VALUE", or NULL) added to its environment; its pid (= its
 * group), or -1. */
static inline pid_t spawn_group(const char *cmd, const char *env) {
    pid_t pid;
    fflush(NULL);
    pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* the test died: so does the server */
        if (env) putenv((char *)env);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    setpgid(pid, pid);
    if (g_n_groups < 64) g_groups[g_n_groups++] = pid;
    return pid;
}

/* Start `[prefix] moe8 serve ARGS --host 127.0.0.1 --port 0` in its own
 * process group; wait for the one "listening" line. 0 when it is up. */
static inline int server_start(server *sv, const char *name, const char *prefix, const char *args) {
    char cmd[16384], line[128];
    const double t0 = now_s(), limit = g_asan ? 120 : 40;
    buf e = {0};
    memset(sv, 0, sizeof *sv);
    sv->log_check = 1;
    snprintf(sv->err, sizeof sv->err, "%s/serve_%s.err", MOE8_TEST_TMP, name);
    snprintf(cmd, sizeof cmd, "exec %s '%s' serve %s --host 127.0.0.1 --port 0 >/dev/null 2>'%s'",
             prefix ? prefix : "", MOE8_CLI, args, sv->err);
    remove(sv->err);
    if ((sv->pid = spawn_group(cmd, NULL)) < 0) return -1;
    for (;;) {
        const char *at;
        int status = 0;
        read_text(sv->err, &e);
        if ((at = strstr(buf_s(&e), "moe8 serve: listening on http://127.0.0.1:"))) {
            sv->port = atoi(at + strlen("moe8 serve: listening on http://127.0.0.1:"));
            snprintf(line, sizeof line, "moe8 serve: listening on http://127.0.0.1:%d ", sv->port); /* then ts=... */
            if (sv->port > 0 && strstr(buf_s(&e), line)) break;
        }
        if (waitpid(sv->pid, &status, WNOHANG) == sv->pid || now_s() - t0 > limit) {
            CHECKF(0, "server %s did not start within %.0f s (%s, status 0x%x): %s", name, now_s() - t0,
                   kill(sv->pid, 0) == 0 ? "running" : "exited", status, buf_s(&e));
            kill(-sv->pid, SIGKILL);
            waitpid(sv->pid, NULL, 0);
            forget_group(sv->pid);
            sv->pid = 0;
            buf_free(&e);
            return -1;
        }
        sleep_s(0.02);
    }
    if (prefix && *prefix) sv->n_ranks = children(sv->pid, sv->ranks, 8);
    for (int r = 0; r < sv->n_ranks && g_n_ranks < 64; r++) g_ranks[g_n_ranks++] = sv->ranks[r];
    buf_free(&e);
    return 0;
}

/* Lines of the server's stderr that start with `prefix`. */
/* The token's bytes with each invalid UTF-8 byte replaced by U+FFFD (how the
 * API shows a token's text), written here independently of the server. */
static inline void utf8_shown(const unsigned char *s, size_t n, buf *out) {
    size_t i = 0;
    out->n = 0;
    buf_add(out, "", 0);
    while (i < n) {
        unsigned c = s[i];
        size_t k = c < 0x80 ? 1 : (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3
                 : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
        int ok = k > 0 && i + k <= n && c != 0;
        for (size_t j = 1; ok && j < k; j++) ok = (s[i + j] & 0xC0) == 0x80;
        if (ok && k == 3) {
            unsigned c1 = s[i + 1];
            ok = !(c == 0xE0 && c1 < 0xA0) && !(c == 0xED && c1 >= 0xA0); /* overlong, surrogates */
        }
        if (ok && k == 4) {
            unsigned c1 = s[i + 1];
            ok = !(c == 0xF0 && c1 < 0x90) && !(c == 0xF4 && c1 >= 0x90);
        }
        if (ok) {
            buf_add(out, s + i, k);
            i += k;
        } else {
            buf_add(out, "\xEF\xBF\xBD", 3);
            i++;
        }
    }
}

/* The library's own scheduler over the model folder: the reference the
 * server's answers are compared with (one sequence, a 1024-position context
 * with KV cache type kv_type). */
typedef struct {
    moe8_model *model;
    moe8_tokenizer *tok;
    moe8_context *ctx;
    moe8_sched *sched;
    int32_t n_vocab;
} lib_env;

static inline void lib_open(lib_env *L, const char *dir, moe8_dtype kv_type) {
    moe8_context_params cp = moe8_context_params_default();
    moe8_sched_params sp = moe8_sched_params_default();
    moe8_error e;
    memset(L, 0, sizeof *L);
    L->model = test_load_model(dir);
    if (moe8_tokenizer_load(dir, &L->tok, &e) != MOE8_OK) {
        fprintf(stderr, "tokenizer %s: %s\n", dir, e.message);
        exit(2);
    }
    cp.n_ctx = 1024;
    cp.n_seq_max = 1;
    cp.kv_type = kv_type;
    if (moe8_context_create(L->model, &cp, &L->ctx, &e) != MOE8_OK) {
        fprintf(stderr, "context: %s\n", e.message);
        exit(2);
    }
    sp.tok = L->tok;
    if (moe8_sched_create(L->ctx, &sp, &L->sched, &e) != MOE8_OK) {
        fprintf(stderr, "scheduler: %s\n", e.message);
        exit(2);
    }
    L->n_vocab = moe8_context_n_vocab(L->ctx);
}

static inline void lib_close(lib_env *L) {
    moe8_sched_free(L->sched);
    moe8_context_free(L->ctx);
    moe8_tokenizer_free(L->tok);
    moe8_model_free(L->model);
}

static inline int count_lines(const char *text, const char *prefix) {
    int n = 0;
    size_t k = strlen(prefix);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        n += !strncmp(p, prefix, k);
    return n;
}

static inline int sanitizer_report(const char *text) {
    return strstr(text, "ERROR: AddressSanitizer") || strstr(text, "ERROR: LeakSanitizer") ||
           strstr(text, "runtime error:") || strstr(text, "WARNING: ThreadSanitizer");
}

/* SIGTERM, then SIGKILL after `limit` s. Checks: it exited 0 within the
 * limit, nothing of its group (or its ranks) is left, no sanitizer report,
 * exactly one "listening" line and one access-log line per request.
 * Returns the seconds it took. */
static inline double server_stop(server *sv, double limit) {
    const double t0 = now_s();
    double secs;
    int status = 0, exited = 0;
    buf e = {0};
    if (sv->pid <= 0) return 0;
    if (g_asan) limit *= 3;
    kill(sv->term ? sv->term : sv->pid, SIGTERM);
    while (!(exited = waitpid(sv->pid, &status, WNOHANG) == sv->pid) && now_s() - t0 < limit)
        sleep_s(0.01);
    secs = now_s() - t0;
    CHECKF(exited && (sv->any_status || (WIFEXITED(status) && WEXITSTATUS(status) == 0)),
           "server %s: %s after SIGTERM (%.1f s, status 0x%x)", sv->err,
           exited ? "bad exit" : "still running", secs, status);
    if (!exited) {
        kill(-sv->pid, SIGKILL);
        waitpid(sv->pid, &status, 0);
    }
    /* Its group and its ranks are gone (a moment for ranks to be reaped). */
    for (int k = 0; k < 100; k++) {
        int alive = kill(-sv->pid, 0) == 0;
        for (int r = 0; r < sv->n_ranks; r++) alive |= kill(sv->ranks[r], 0) == 0;
        if (!alive) break;
        if (k == 99) {
            CHECKF(0, "server %s: processes outlived it", sv->err);
            kill(-sv->pid, SIGKILL);
            for (int r = 0; r < sv->n_ranks; r++) kill(sv->ranks[r], SIGKILL);
        }
        sleep_s(0.05);
    }
    forget_group(sv->pid);
    for (int i = 0; i < g_n_ranks; i++)
        for (int r = 0; r < sv->n_ranks; r++)
            if (g_ranks[i] == sv->ranks[r]) g_ranks[i] = 0;
    read_text(sv->err, &e);
    CHECKF(!sanitizer_report(buf_s(&e)), "server %s: sanitizer report:\n%s", sv->err, buf_s(&e));
    CHECKF(count_lines(buf_s(&e), "moe8 serve: listening on ") == 1, "%s", buf_s(&e));
    if (sv->log_check) {
        int n = count_lines(buf_s(&e), "moe8 serve: GET ") + count_lines(buf_s(&e), "moe8 serve: POST ") +
                count_lines(buf_s(&e), "moe8 serve: PUT ") + count_lines(buf_s(&e), "moe8 serve: DELETE ");
        CHECKF(n == sv->n_req, "server %s: %d access-log lines for %d requests", sv->err, n, sv->n_req);
    }
    buf_free(&e);
    sv->pid = 0;
    return secs;
}

/* ---- HTTP: libcurl ------------------------------------------------------------------- */

static inline size_t on_body(char *p, size_t size, size_t n, void *user) {
    buf_add(user, p, size * n);
    return size * n;
}

/* A request on a new handle: method, path, body (NULL: none), an
 * Authorization header value (NULL: none), more header lines ("Name: value",
 * a NULL-terminated list, or NULL). The status, or 0 (no answer). */
static inline long http_hdrs(server *sv, const char *method, const char *path, const char *body, size_t n,
                             const char *auth, const char *const *hdrs, buf *out) {
    CURL *c = curl_easy_init();
    struct curl_slist *h = NULL;
    char url[256], hdr[512];
    long status = 0;
    out->n = 0;
    buf_add(out, "", 0);
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", sv->port, path);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, g_asan ? 300L : 120L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, out);
    h = curl_slist_append(h, "Content-Type: application/json");
    if (auth) {
        snprintf(hdr, sizeof hdr, "Authorization: %s", auth);
        h = curl_slist_append(h, hdr);
    }
    for (int i = 0; hdrs && hdrs[i]; i++) h = curl_slist_append(h, hdrs[i]);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)n);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    }
    if (!strcmp(method, "HEAD")) curl_easy_setopt(c, CURLOPT_NOBODY, 1L); /* an answer to HEAD has no body */
    else if (strcmp(method, body ? "POST" : "GET")) curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    sv->n_req++;
    if (curl_easy_perform(c) == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return status;
}

static inline long http(server *sv, const char *method, const char *path, const char *body, size_t n,
                        const char *auth, buf *out) {
    return http_hdrs(sv, method, path, body, n, auth, NULL, out);
}

static inline long post(server *sv, const char *path, const char *body, buf *out) {
    return http(sv, "POST", path, body, strlen(body), NULL, out);
}

/* Many requests at once (libcurl multi): bodies POSTed to `path`; a request
 * with abort_at > 0 hangs up once it has received that many bytes. */
typedef struct {
    const char *path;
    char *body;
    buf out;
    long status;
    size_t abort_at;
    long timeout_ms;        /* > 0: the client gives up after this long */
    int aborted;
} mreq;

static inline size_t on_mbody(char *p, size_t size, size_t n, void *user) {
    mreq *r = user;
    buf_add(&r->out, p, size * n);
    if (r->abort_at && r->out.n >= r->abort_at) {
        r->aborted = 1;
        return 0; /* libcurl closes the connection */
    }
    return size * n;
}

static inline void multi_run(server *sv, mreq *r, int n) {
    CURLM *m = curl_multi_init();
    CURL **e = calloc((size_t)n, sizeof *e);
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    char url[256];
    int running = 1;
    curl_multi_setopt(m, CURLMOPT_MAX_TOTAL_CONNECTIONS, 0L);
    for (int i = 0; i < n; i++) {
        e[i] = curl_easy_init();
        snprintf(url, sizeof url, "http://127.0.0.1:%d%s", sv->port, r[i].path);
        curl_easy_setopt(e[i], CURLOPT_URL, url);
        curl_easy_setopt(e[i], CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(e[i], CURLOPT_TIMEOUT, g_asan ? 600L : 180L);
        curl_easy_setopt(e[i], CURLOPT_HTTPHEADER, h);
        curl_easy_setopt(e[i], CURLOPT_POSTFIELDS, r[i].body);
        curl_easy_setopt(e[i], CURLOPT_WRITEFUNCTION, on_mbody);
        curl_easy_setopt(e[i], CURLOPT_WRITEDATA, &r[i]);
        curl_easy_setopt(e[i], CURLOPT_FORBID_REUSE, 1L);
        if (r[i].timeout_ms > 0) curl_easy_setopt(e[i], CURLOPT_TIMEOUT_MS, r[i].timeout_ms);
        buf_add(&r[i].out, "", 0);
        curl_multi_add_handle(m, e[i]);
        sv->n_req++;
    }
    while (running) {
        curl_multi_perform(m, &running);
        if (running) curl_multi_poll(m, NULL, 0, 100, NULL);
    }
    for (int i = 0; i < n; i++) {
        curl_easy_getinfo(e[i], CURLINFO_RESPONSE_CODE, &r[i].status);
        if (r[i].timeout_ms > 0 && r[i].status == 0) r[i].aborted = 1;
        curl_multi_remove_handle(m, e[i]);
        curl_easy_cleanup(e[i]);
    }
    curl_slist_free_all(h);
    curl_multi_cleanup(m);
    free(e);
}

/* ---- HTTP: raw sockets (hang-ups, silence) ------------------------------------------- */

/* A connection to 127.0.0.1:port from the source address 127.0.0.src
 * (bound first; src 0: the kernel's choice, 127.0.0.1); -1 when refused. */
static inline int raw_connect_from(int port, int src) {
    struct sockaddr_in a, from;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    memset(&from, 0, sizeof from);
    from.sin_family = AF_INET;
    from.sin_addr.s_addr = htonl(0x7F000000u | (uint32_t)(src & 0xFF));
    if (fd < 0 || (src && bind(fd, (struct sockaddr *)&from, sizeof from) != 0) ||
        connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        if (fd >= 0) close(fd);
        return -1;
    }
    return fd;
}

static inline int raw_connect(int port) { return raw_connect_from(port, 0); }

/* Send one POST; the socket (the caller closes it), or -1. */
static inline int raw_post(server *sv, const char *path, const char *body) {
    char head[512];
    int fd = raw_connect(sv->port);
    size_t n = strlen(body);
    if (fd < 0) return -1;
    snprintf(head, sizeof head, "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
             "Content-Length: %zu\r\nConnection: close\r\n\r\n", path, n);
    if (write(fd, head, strlen(head)) != (ssize_t)strlen(head) || write(fd, body, n) != (ssize_t)n) {
        close(fd);
        return -1;
    }
    sv->n_req++;
    return fd;
}

/* Read from fd into b until it holds `needle` (NULL: until EOF) or `secs`
 * pass; 1 when found (or EOF reached). */
static inline int raw_read_until(int fd, buf *b, const char *needle, double secs) {
    const double t0 = now_s();
    char tmp[16384];
    while (now_s() - t0 < secs) {
        struct pollfd p = {fd, POLLIN, 0};
        ssize_t k;
        if (needle && b->p && strstr(b->p, needle)) return 1;
        if (poll(&p, 1, 50) <= 0) continue;
        k = read(fd, tmp, sizeof tmp);
        if (k <= 0) return needle ? b->p && strstr(b->p, needle) : 1;
        buf_add(b, tmp, (size_t)k);
    }
    return needle && b->p && strstr(b->p, needle);
}

/* ---- metrics --------------------------------------------------------------------------- */

/* The value of the sample `name{...label...}`, or -1. */
static inline double metric_in(const char *text, const char *name, const char *label) {
    size_t k = strlen(name);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        const char *eol = strchr(p, '\n'), *sp;
        if (strncmp(p, name, k) || (p[k] != '{' && p[k] != ' ')) continue;
        if (!eol) eol = p + strlen(p);
        if (label) {
            const char *hit = strstr(p, label);
            if (!hit || hit > eol) continue;
        }
        for (sp = eol; sp > p && sp[-1] != ' '; sp--) {}
        return strtod(sp, NULL);
    }
    return -1;
}

static inline double metric(server *sv, const char *name, const char *label) {
    buf b = {0};
    double v = -1;
    if (http(sv, "GET", "/metrics", NULL, 0, NULL, &b) == 200) v = metric_in(buf_s(&b), name, label);
    buf_free(&b);
    return v;
}

/* Poll until running 0, waiting 0 and KV usage 0, at most `secs`; 1 when so. */
static inline int wait_idle(server *sv, double secs) {
    const double t0 = now_s();
    if (g_asan) secs *= 3;
    while (now_s() - t0 < secs) {
        if (metric(sv, "moe8:num_requests_running", NULL) == 0 &&
            metric(sv, "moe8:num_requests_waiting", NULL) == 0 &&
            metric(sv, "moe8:kv_cache_usage_perc", NULL) == 0)
            return 1;
        sleep_s(0.05);
    }
    return 0;
}

/* Poll until metric `name` reaches `want`, at most `secs`. */
static inline int wait_metric(server *sv, const char *name, const char *label, double want, double secs) {
    const double t0 = now_s();
    if (g_asan) secs *= 3;
    while (now_s() - t0 < secs) {
        if (metric(sv, name, label) == want) return 1;
        sleep_s(0.02);
    }
    return 0;
}

/* ---- requests ---------------------------------------------------------------------------- */

typedef struct {
    int chat, stream, usage;       /* chat or completion; stream; stream_options.include_usage */
    const char *text;              /* prompt string / the user message */
    const int32_t *ids;            /* or a token-array prompt */
    int n_ids;
    int max_tokens;
    double temp, top_p;            /* top_p 0: not sent */
    int top_k;                     /* 0: not sent */
    long long seed;                /* -1: not sent */
    int logprobs;                  /* -1: none; completions: logprobs N; chat: true + top_logprobs N */
    int thinking;                  /* chat: -1 not sent, else enable_thinking */
    const char *stop;
    int ignore_eos;
} rq;

static inline rq rq_default(void) {
    rq r;
    memset(&r, 0, sizeof r);
    r.max_tokens = 8;
    r.seed = -1;
    r.logprobs = -1;
    r.thinking = 0;
    return r;
}

static inline const char *rq_path(const rq *r) { return r->chat ? "/v1/chat/completions" : "/v1/completions"; }

/* r's prompt into o: messages (and chat_template_kwargs) for a chat, else
 * the prompt as token ids or a string. */
static inline void rq_add_prompt(cJSON *o, const rq *r) {
    if (r->chat) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "user");
        cJSON_AddStringToObject(m, "content", r->text);
        cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "messages"), m);
        if (r->thinking >= 0)
            cJSON_AddBoolToObject(cJSON_AddObjectToObject(o, "chat_template_kwargs"), "enable_thinking",
                                  r->thinking);
    } else if (r->ids) {
        cJSON *a = cJSON_AddArrayToObject(o, "prompt");
        for (int i = 0; i < r->n_ids; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(r->ids[i]));
    } else {
        cJSON_AddStringToObject(o, "prompt", r->text);
    }
}

static inline char *rq_body(const rq *r) {
    cJSON *o = cJSON_CreateObject();
    char *s;
    cJSON_AddStringToObject(o, "model", "serve_text");
    rq_add_prompt(o, r);
    cJSON_AddNumberToObject(o, "max_tokens", r->max_tokens);
    cJSON_AddNumberToObject(o, "temperature", r->temp);
    if (r->top_p > 0) cJSON_AddNumberToObject(o, "top_p", r->top_p);
    if (r->top_k > 0) cJSON_AddNumberToObject(o, "top_k", r->top_k);
    if (r->seed >= 0) cJSON_AddNumberToObject(o, "seed", (double)r->seed);
    if (r->stream) {
        cJSON_AddBoolToObject(o, "stream", 1);
        if (r->usage) cJSON_AddBoolToObject(cJSON_AddObjectToObject(o, "stream_options"), "include_usage", 1);
    }
    if (r->logprobs >= 0) {
        if (r->chat) {
            cJSON_AddBoolToObject(o, "logprobs", 1);
            cJSON_AddNumberToObject(o, "top_logprobs", r->logprobs);
        } else {
            cJSON_AddNumberToObject(o, "logprobs", r->logprobs);
        }
    }
    if (r->stop) cJSON_AddStringToObject(o, "stop", r->stop);
    if (r->ignore_eos) cJSON_AddBoolToObject(o, "ignore_eos", 1);
    s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

/* ---- responses: parse, and check the shape and SSE framing -------------------------------- */

typedef struct {
    int ok;                 /* parsed, shape and framing right */
    buf text, reason;       /* content (text) / reasoning_content, concatenated */
    char finish[16];
    int has_usage, prompt_tokens, completion_tokens, total_tokens;
    cJSON *lp;              /* [n] per token: {token, bytes (chat), logprob, top} */
    buf norm;               /* the events (or body) without id and created (bit-identity) */
} result;

static inline void result_free(result *r) {
    buf_free(&r->text);
    buf_free(&r->reason);
    buf_free(&r->norm);
    cJSON_Delete(r->lp);
    memset(r, 0, sizeof *r);
}

static inline const cJSON *J(const cJSON *o, const char *key) { return cJSON_GetObjectItemCaseSensitive(o, key); }

static inline const char *jstr(const cJSON *o, const char *key) {
    const cJSON *v = J(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

#define FAILR(...)                                                                \
    do {                                                                          \
        CHECKF(0, __VA_ARGS__);                                                   \
        return 0;                                                                 \
    } while (0)

/* Per-token log-probs of one choice into r->lp (completions: from the
 * parallel arrays; chat: the content entries). */
static inline int take_logprobs(result *r, int chat, const cJSON *lp) {
    if (!lp || cJSON_IsNull(lp)) return 1;
    if (!r->lp) r->lp = cJSON_CreateArray();
    if (chat) {
        const cJSON *e;
        if (!cJSON_IsArray(J(lp, "content"))) FAILR("chat logprobs without content[]");
        cJSON_ArrayForEach(e, J(lp, "content")) cJSON_AddItemToArray(r->lp, cJSON_Duplicate(e, 1));
        return 1;
    }
    const cJSON *tk = J(lp, "tokens"), *tl = J(lp, "token_logprobs"), *tp = J(lp, "top_logprobs"),
                *to = J(lp, "text_offset");
    int n = cJSON_GetArraySize(tk);
    if (!cJSON_IsArray(tk) || cJSON_GetArraySize(tl) != n || cJSON_GetArraySize(tp) != n ||
        cJSON_GetArraySize(to) != n)
        FAILR("completion logprobs arrays of different lengths");
    for (int i = 0; i < n; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddItemToObject(e, "token", cJSON_Duplicate(cJSON_GetArrayItem(tk, i), 1));
        cJSON_AddItemToObject(e, "logprob", cJSON_Duplicate(cJSON_GetArrayItem(tl, i), 1));
        cJSON_AddItemToObject(e, "top", cJSON_Duplicate(cJSON_GetArrayItem(tp, i), 1));
        cJSON_AddItemToObject(e, "text_offset", cJSON_Duplicate(cJSON_GetArrayItem(to, i), 1));
        cJSON_AddItemToArray(r->lp, e);
    }
    return 1;
}

static inline int take_usage(result *r, const cJSON *u) {
    const cJSON *pt = J(u, "prompt_tokens"), *ct = J(u, "completion_tokens"), *tt = J(u, "total_tokens");
    if (!cJSON_IsNumber(pt) || !cJSON_IsNumber(ct) || !cJSON_IsNumber(tt) ||
        !cJSON_IsNumber(J(J(u, "prompt_tokens_details"), "cached_tokens")))
        FAILR("usage fields missing");
    r->has_usage = 1;
    r->prompt_tokens = pt->valueint;
    r->completion_tokens = ct->valueint;
    r->total_tokens = tt->valueint;
    return 1;
}

/* The body without id / created / cached_tokens, printed again. */
static inline void norm_add(result *r, cJSON *o) {
    cJSON *c = cJSON_Duplicate(o, 1);
    char *s;
    cJSON_DeleteItemFromObject(c, "id");
    cJSON_DeleteItemFromObject(c, "created");
    cJSON_DeleteItemFromObject(cJSON_GetObjectItemCaseSensitive(c, "usage"), "prompt_tokens_details");
    s = cJSON_PrintUnformatted(c);
    buf_str(&r->norm, s);
    buf_str(&r->norm, "\n");
    free(s);
    cJSON_Delete(c);
}

static inline int envelope_ok(const cJSON *o, const char *object, const char *id) {
    const char *ob = jstr(o, "object"), *i = jstr(o, "id"), *m = jstr(o, "model");
    if (!ob || strcmp(ob, object)) FAILR("object '%s', want '%s'", ob ? ob : "(none)", object);
    if (!i || (id && strcmp(i, id))) FAILR("id '%s' changed from '%s'", i ? i : "(none)", id ? id : "");
    if (!m || strcmp(m, "serve_text")) FAILR("model '%s'", m ? m : "(none)");
    if (!cJSON_IsNumber(J(o, "created"))) FAILR("no created");
    return 1;
}

/* A whole (non-stream) answer. */
static inline int parse_whole(result *r, int chat, const char *body) {
    cJSON *o = cJSON_Parse(body);
    const cJSON *c = cJSON_GetArrayItem(J(o, "choices"), 0);
    int ok = 0;
    if (!o || cJSON_GetArraySize(J(o, "choices")) != 1 || !c) {
        CHECKF(0, "bad answer: %s", body);
        goto done;
    }
    if (!envelope_ok(o, chat ? "chat.completion" : "text_completion", NULL)) goto done;
    if (chat) {
        const cJSON *m = J(c, "message");
        const char *role = jstr(m, "role"), *content = jstr(m, "content"), *rc = jstr(m, "reasoning_content");
        if (!role || strcmp(role, "assistant") || !content) {
            CHECKF(0, "bad message: %s", body);
            goto done;
        }
        buf_str(&r->text, content);
        if (rc) buf_str(&r->reason, rc);
    } else {
        if (!jstr(c, "text")) {
            CHECKF(0, "no text: %s", body);
            goto done;
        }
        buf_str(&r->text, jstr(c, "text"));
    }
    if (!jstr(c, "finish_reason") || !take_logprobs(r, chat, J(c, "logprobs")) || !take_usage(r, J(o, "usage")))
        goto done;
    snprintf(r->finish, sizeof r->finish, "%s", jstr(c, "finish_reason"));
    norm_add(r, o);
    ok = 1;
done:
    cJSON_Delete(o);
    return ok;
}

/* A stream: every event exactly "data: <json>\n\n", the last "data: [DONE]\n\n";
 * chat's first delta has role "assistant"; one chunk with a finish_reason,
 * after every other choice; then (include_usage) one chunk with empty choices
 * and usage. */
static inline int parse_stream(result *r, int chat, int include_usage, const char *body) {
    const char *p = body;
    char id[64] = "";
    int n_ev = 0, finished = 0, done = 0;
    while (*p) {
        const char *end = strstr(p, "\n\n");
        cJSON *o;
        const cJSON *ch, *c;
        if (done) FAILR("bytes after [DONE]: '%.40s'", p);
        if (strncmp(p, "data: ", 6) || !end) FAILR("event %d is not 'data: ...\\n\\n': '%.60s'", n_ev, p);
        if (memchr(p, '\n', (size_t)(end - p))) FAILR("event %d holds a newline", n_ev);
        if (end - p == 12 && !strncmp(p + 6, "[DONE]", 6)) {
            done = 1;
            p = end + 2;
            continue;
        }
        if (!(o = cJSON_ParseWithLength(p + 6, (size_t)(end - p - 6))) || !cJSON_IsObject(o))
            FAILR("event %d is not a JSON object: '%.80s'", n_ev, p);
        if (!envelope_ok(o, chat ? "chat.completion.chunk" : "text_completion", n_ev ? id : NULL)) {
            cJSON_Delete(o);
            return 0;
        }
        snprintf(id, sizeof id, "%s", jstr(o, "id"));
        ch = J(o, "choices");
        c = cJSON_GetArrayItem(ch, 0);
        if (finished == 1) { /* only the usage chunk may follow the finish */
            if (!include_usage || cJSON_GetArraySize(ch) != 0 || !cJSON_IsArray(ch) ||
                !take_usage(r, J(o, "usage"))) {
                cJSON_Delete(o);
                FAILR("after the finish chunk: '%.200s'", p);
            }
            finished = 2;
        } else if (finished == 2 || cJSON_GetArraySize(ch) != 1 || J(o, "usage")) {
            cJSON_Delete(o);
            FAILR("event %d: want one choice, no usage: '%.200s'", n_ev, p);
        } else {
            const cJSON *fr = J(c, "finish_reason");
            if (chat) {
                const cJSON *d = J(c, "delta");
                const char *role = jstr(d, "role");
                if (!cJSON_IsObject(d) || (n_ev == 0) != (role && !strcmp(role, "assistant")) ||
                    (n_ev && role)) {
                    cJSON_Delete(o);
                    FAILR("event %d: delta/role wrong: '%.200s'", n_ev, p);
                }
                if (jstr(d, "content")) buf_str(&r->text, jstr(d, "content"));
                if (jstr(d, "reasoning_content")) buf_str(&r->reason, jstr(d, "reasoning_content"));
            } else if (jstr(c, "text")) {
                buf_str(&r->text, jstr(c, "text"));
            } else {
                cJSON_Delete(o);
                FAILR("event %d: no text", n_ev);
            }
            if (!take_logprobs(r, chat, J(c, "logprobs"))) {
                cJSON_Delete(o);
                return 0;
            }
            if (!cJSON_IsNull(fr)) {
                if (!cJSON_IsString(fr)) {
                    cJSON_Delete(o);
                    FAILR("finish_reason not a string or null");
                }
                snprintf(r->finish, sizeof r->finish, "%s", fr->valuestring);
                finished = 1;
            }
        }
        norm_add(r, o);
        cJSON_Delete(o);
        n_ev++;
        p = end + 2;
    }
    if (!done) FAILR("the stream does not end with 'data: [DONE]\\n\\n'");
    if (!finished) FAILR("no chunk with a finish_reason");
    if (include_usage && finished != 2) FAILR("no usage chunk");
    return 1;
}

/* Send r; parse its answer into res (CHECKs the status and the shape). */
static inline int run_rq(server *sv, const rq *r, result *res) {
    char *body = rq_body(r);
    buf out = {0};
    long st = post(sv, rq_path(r), body, &out);
    int ok;
    memset(res, 0, sizeof *res);
    CHECKF(st == 200, "status %ld: %s", st, buf_s(&out));
    ok = st == 200 && (r->stream ? parse_stream(res, r->chat, r->usage, buf_s(&out))
                                 : parse_whole(res, r->chat, buf_s(&out)));
    if (!ok) fprintf(stderr, "  request: %s\n  answer: %.2000s\n", body, buf_s(&out));
    res->ok = ok;
    free(body);
    buf_free(&out);
    return ok;
}

/* A bad_case's param or code that is not checked. */
static const char BC_ANY[] = "(any)";

/* ---- error answers: a table of cases ----------------------------------------------------- */

typedef struct {
    const char *method, *path;
    const char *body;       /* NULL: none */
    size_t n;               /* 0: strlen(body) */
    int status;
    const char *type, *param, *code; /* param/code NULL: JSON null; BC_ANY: not checked */
    const char *msg;        /* a part of the message */
} bad_case;

static int g_n_bad;

static inline void check_bad(server *sv, const bad_case *b, const char *auth) {
    buf out = {0};
    long st = http(sv, b->method, b->path, b->body, b->body ? (b->n ? b->n : strlen(b->body)) : 0, auth, &out);
    cJSON *o = cJSON_Parse(buf_s(&out));
    const cJSON *e = J(o, "error");
    const cJSON *param = J(e, "param"), *code = J(e, "code");
    const char *type = jstr(e, "type"), *msg = jstr(e, "message");
    int ok = st == b->status && cJSON_IsObject(e) && type && !strcmp(type, b->type) && msg &&
             strstr(msg, b->msg) &&
             (b->param == BC_ANY ||
              (b->param ? cJSON_IsString(param) && !strcmp(param->valuestring, b->param) : cJSON_IsNull(param))) &&
             (b->code == BC_ANY ||
              (b->code ? cJSON_IsString(code) && !strcmp(code->valuestring, b->code) : cJSON_IsNull(code)));
    CHECKF(ok, "%s %s %.120s%s: got %ld %s; want %d %s param=%s code=%s msg~'%s'", b->method, b->path,
           b->body ? b->body : "", b->body && strlen(b->body) > 120 ? "..." : "", st, buf_s(&out), b->status,
           b->type, b->param ? b->param : "null", b->code ? b->code : "null", b->msg);
    g_n_bad++;
    cJSON_Delete(o);
    buf_free(&out);
}

#define INV "invalid_request_error"
#define CMPL "/v1/completions"
#define CHAT "/v1/chat/completions"
#define MSG "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"
/* ---- setup ------------------------------------------------------------------------------- */

/* The servers' model: a tiny Qwen3-MoE (hidden 32, one dense layer) with the
 * real Qwen3 vocabulary, W8A8. */
static inline fx_opts serve_fixture_opts(void) {
    fx_opts o = fx_default_opts();
    o.quant = 1;
    o.vocab = QWEN_VOCAB;
    o.hidden = 32;
    o.dense_layer = 0;
    return o;
}

/* The chain model (serve_fixture_opts with tensor_hook chain_hook), a
 * model that says exactly one thing: each edge's token is by far the most
 * likely after its first token (a one-hot embedding read by one lm_head
 * entry; the layers add little). Chat prompts end with "\n" (198) when
 * thinking is on and "\n\n" (271) when it is off, so greedy chat answers are
 *   on:  "<think>" "Let" " me" " think" "</" "think" ">" "Hello" "!" <|im_end|>
 *   off: " Hmm" "<th" "ink" ">" "Hello" "!" <|im_end|>
 * with one tag whole and one in three pieces each time. */
static const int32_t CHAIN[][2] = {
    {198, 151667}, {151667, 10061}, {10061, 752}, {752, 1744}, {1744, 522}, {522, 26865},
    {26865, 29}, {29, 9707}, {9707, 0}, {0, 151645}, {271, 88190}, {88190, 13708}, {13708, 766}, {766, 29},
};
#define N_CHAIN (int)(sizeof CHAIN / sizeof *CHAIN)

static inline void chain_hook(void *user, fx_tensor *t) {
    const int64_t H = t->shape[1];
    (void)user;
    if (!strcmp(t->name, "model.embed_tokens.weight"))
        for (int i = 0; i < N_CHAIN; i++)
            for (int64_t h = 0; h < H; h++) fx_set(t, (int64_t)CHAIN[i][0] * H + h, h == i ? 20.0 : 0.0);
    if (!strcmp(t->name, "lm_head.weight"))
        for (int i = 0; i < N_CHAIN; i++)
            for (int k = 0; k < N_CHAIN; k++)
                if (CHAIN[k][0] == CHAIN[i][0]) fx_set(t, (int64_t)CHAIN[i][1] * H + k, 50.0);
}

static const char *g_name; /* the test program, for its progress lines */
static double g_t0;        /* when it started */

/* CPU seconds (user + sys) of this program, of the children it has reaped
 * (clients, finished servers) and of its live servers (/proc/PID/stat). */
static inline double cpu_so_far(void) {
    struct rusage self, kids;
    double t;
    getrusage(RUSAGE_SELF, &self);
    getrusage(RUSAGE_CHILDREN, &kids);
    t = (double)(self.ru_utime.tv_sec + self.ru_stime.tv_sec + kids.ru_utime.tv_sec + kids.ru_stime.tv_sec) +
        1e-6 * (double)(self.ru_utime.tv_usec + self.ru_stime.tv_usec + kids.ru_utime.tv_usec + kids.ru_stime.tv_usec);
    for (int i = 0; i < g_n_groups; i++) {
        char path[64];
        buf b = {0};
        const char *p;
        unsigned long long ut = 0, st = 0;
        if (g_groups[i] <= 0) continue;
        snprintf(path, sizeof path, "/proc/%d/stat", (int)g_groups[i]);
        read_text(path, &b);
        /* after the ')' closing the name: state is field 3, utime 14, stime 15 */
        if ((p = strrchr(buf_s(&b), ')')) && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
                                                     &ut, &st) == 2)
            t += (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
        buf_free(&b);
    }
    return t;
}

/* A progress line on stdout: `what` is done, so many seconds in, and the
 * CPU seconds spent so far (where a test's time goes: docs/BENCHMARKS.md). */
static inline void phase(const char *what) {
    printf("%s: %-28s done at %6.1f s, %6.1f CPU-s\n", g_name, what, now_s() - g_t0, cpu_so_far());
    fflush(stdout);
}

/* The parts of a serve test program that has clients: `--part c` the C
 * checks, `--part clients` the node clients, agent CLIs and the browser
 * (ctest's test NAME_clients, labelled client: `make test` runs them in the
 * release build, `make check` leaves them out); no argument: both. */
static int g_part_c = 1, g_part_clients = 1;

static inline void serve_test_parts(int argc, char **argv) {
    const char *part = argc == 3 && !strcmp(argv[1], "--part") ? argv[2] : argc == 1 ? "" : "?";
    if (strcmp(part, "") && strcmp(part, "c") && strcmp(part, "clients")) {
        fprintf(stderr, "usage: %s [--part c|clients]\n", argv[0]);
        exit(2);
    }
    g_part_c = strcmp(part, "clients") != 0;
    g_part_clients = strcmp(part, "c") != 0;
}

/* What every serve test program does first (`name` heads its progress
 * lines): the build's sizes, idle OpenMP threads that sleep, no key from the
 * environment, no server outliving the test, no SIGPIPE from a peer that
 * hung up, libcurl. */
static inline void serve_test_init(const char *name) {
    g_name = name;
    g_t0 = now_s();
    g_asan = MOE8_TEST_SANITIZE[0] != '\0';
    unsetenv("MOE8_API_KEY");
    atexit(kill_groups);
    signal(SIGINT, on_fatal);
    signal(SIGTERM, on_fatal);
    signal(SIGABRT, on_fatal);
    signal(SIGSEGV, on_fatal);
    signal(SIGPIPE, SIG_IGN);
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* ---- access-log lines, node clients -------------------------------------------------------- */

/* Access-log lines (GET/POST/PUT/DELETE: what server_stop counts) so far;
 * `settle`: once the count has held for 0.3 s (at most 3 s), since a line is
 * written once its answer is out, which may be after its client went on or
 * exited. For requests this program does not count itself (a client's). */
static inline int access_lines(server *sv, int settle) {
    int n = -1, last = -1, still = 0;
    for (int k = 0; k < (settle ? 60 : 1) && still < 6; k++) {
        buf e = {0};
        read_text(sv->err, &e);
        n = count_lines(buf_s(&e), "moe8 serve: GET ") + count_lines(buf_s(&e), "moe8 serve: POST ") +
            count_lines(buf_s(&e), "moe8 serve: PUT ") + count_lines(buf_s(&e), "moe8 serve: DELETE ");
        buf_free(&e);
        still = n == last ? still + 1 : 0;
        last = n;
        if (settle) sleep_s(0.05);
    }
    return n;
}

/* Why the node clients (tests/clients/ scripts) cannot run here, NULL when they
 * can: node on PATH, .deps/clients/node_modules/MODULE (make deps). */
static inline const char *node_missing(const char *module) {
    static char why[4400];
    char mods[4300];
    snprintf(mods, sizeof mods, "%s/.deps/clients/node_modules/%s", MOE8_SOURCE_DIR, module);
    if (test_run("command -v node >/dev/null 2>&1") != 0) return "node not found";
    if (access(mods, R_OK) != 0) {
        snprintf(why, sizeof why, "no .deps/clients/node_modules/%s (make deps installs it)", module);
        return why;
    }
    return NULL;
}

/* `node tests/clients/SCRIPT ARGS` (ARGS quoted for sh by the caller) under
 * timeout SECS, its stdout and stderr in MOE8_TEST_TMP/SCRIPT.out and .err.
 * The access-log lines it caused on svs[0..n_svs) (the requests those
 * servers answered, however many the client sent, retried or abandoned) are
 * added to their n_req. CHECKs: it exited 0 and printed
 * {"checks": [{"name", "ok", "detail"}, ...]} with at least `min` checks,
 * each ok. What it printed (the caller frees; NULL when not JSON); *n_ok and
 * *n the checks. */
static inline cJSON *node_checks(const char *script, const char *args, int secs, server *const *svs, int n_svs,
                                 int min, int *n_ok, int *n) {
    char cmd[32768], outp[4300], errp[4300];
    int before[4], rc;
    buf out = {0}, err = {0};
    cJSON *o;
    const cJSON *c;
    *n_ok = *n = 0;
    snprintf(outp, sizeof outp, "%s/%s.out", MOE8_TEST_TMP, script);
    snprintf(errp, sizeof errp, "%s/%s.err", MOE8_TEST_TMP, script);
    snprintf(cmd, sizeof cmd, "timeout -k 5 %d node '%s/tests/clients/%s' %s >'%s' 2>'%s' </dev/null", secs,
             MOE8_SOURCE_DIR, script, args, outp, errp);
    for (int i = 0; i < n_svs && i < 4; i++) before[i] = access_lines(svs[i], 1);
    rc = test_run(cmd);
    for (int i = 0; i < n_svs && i < 4; i++) svs[i]->n_req += access_lines(svs[i], 1) - before[i];
    read_text(outp, &out);
    read_text(errp, &err);
    CHECKF(rc == 0, "node %s exited %d: %s", script, rc, buf_s(&err));
    o = cJSON_Parse(buf_s(&out));
    CHECKF(cJSON_IsArray(J(o, "checks")), "%s printed: %.600s", script, buf_s(&out));
    cJSON_ArrayForEach(c, J(o, "checks")) {
        const char *name = jstr(c, "name"), *detail = jstr(c, "detail");
        CHECKF(cJSON_IsTrue(J(c, "ok")), "%s '%s': %s", script, name ? name : "?", detail ? detail : "");
        (*n)++, *n_ok += cJSON_IsTrue(J(c, "ok"));
    }
    CHECKF(*n >= min, "%s ran %d checks", script, *n);
    buf_free(&out);
    buf_free(&err);
    return o;
}

#endif
