/*
 * test_serve_webui.c — the chat page of `moe8 serve` (the CLI at MOE8_CLI):
 * GET / under --webui (the default), on the tiny Qwen3 fixture:
 *   - GET / is 200 "text/html; charset=utf-8" and its body is
 *     src/server/webui/index.html byte for byte (the build embeds that file);
 *     it is open under --api-key (the page asks for the key itself) while
 *     /v1/models is not; HEAD, POST, PUT, DELETE and PATCH on / answer
 *     exactly as on /health, the other open GET row (the same status and
 *     error, naming the path);
 *   - --no-webui: / is what any unknown path is, for every method (the JSON
 *     404; under --api-key the 401 first); --webui with --no-webui is a usage
 *     error (exit 2);
 *   - the page in Debian's headless Chromium through puppeteer-core
 *     (tests/clients/webui.mjs, whose checks are read back here; the server
 *     under --api-key and an --allowed-origins list without the page's own
 *     origin, which a same-origin page does not need): the model's
 *     name, the key in localStorage, a streamed answer equal to the API's at
 *     temperature 0, a long answer stopped (the server counts exactly one
 *     aborted request in /metrics), the page ready again, thinking folded
 *     (the chain model of serve_test.h); the browser gone afterwards (no
 *     process left that names the test's profile folder).
 * The browser is `--part clients` (ctest's test_serve_webui_clients,
 * labelled client; in the release build only: the page drives the chat path,
 * which the sanitizer tests cover), the HTTP checks `--part c`. Exit 77
 * (skipped) when node, puppeteer-core (.deps/clients, `make deps`) or
 * Chromium (/usr/bin/chromium, or $MOE8_CHROMIUM) is missing, once the
 * HTTP checks have passed. Servers listen on 127.0.0.1 port 0 in their own
 * process groups (serve_test.h).
 */
#include <dirent.h>
#include <fcntl.h>

#include "test.h"
#include "fixture_model.h"
#include "serve_test.h"

#define NAME "serve_text"
#define KEY "sekret"
#define PAGE_SRC MOE8_SOURCE_DIR "/src/server/webui/index.html"

/* A request whose access-log line server_stop does not count (HEAD, PATCH). */
static long http_uncounted(server *sv, const char *method, const char *path, const char *auth, buf *out) {
    const long st = http(sv, method, path, NULL, 0, auth, out);
    sv->n_req--;
    return st;
}

/* The error object's code and message of an answer ("" when not one). */
static void error_of(const char *body, char *code, size_t nc, char *msg, size_t nm) {
    cJSON *o = cJSON_Parse(body);
    const cJSON *e = J(o, "error");
    snprintf(code, nc, "%s", jstr(e, "code") ? jstr(e, "code") : "");
    snprintf(msg, nm, "%s", jstr(e, "message") ? jstr(e, "message") : "");
    cJSON_Delete(o);
}

/* ---- 1. the page over HTTP ----------------------------------------------------------------- */

/* GET / under --api-key KEY: the committed file, open; the other methods as on /health. */
static void test_page(server *sv) {
    static const char *const methods[] = {"HEAD", "POST", "PUT", "DELETE", "PATCH"};
    size_t n_src = 0;
    unsigned char *src = test_slurp(PAGE_SRC, &n_src);
    buf out = {0}, ref = {0};
    char type[128] = "";
    long st;
    CHECKF(src && n_src > 1000, "cannot read %s", PAGE_SRC);
    {
        CURL *c = curl_easy_init(); /* the Content-Type too: one request by hand */
        char url[128], *ct = NULL;
        snprintf(url, sizeof url, "http://127.0.0.1:%d/", sv->port);
        curl_easy_setopt(c, CURLOPT_URL, url);
        curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(c, CURLOPT_TIMEOUT, 60L);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &out);
        buf_add(&out, "", 0);
        sv->n_req++;
        st = 0;
        if (curl_easy_perform(c) == CURLE_OK) {
            curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &st);
            curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &ct);
            snprintf(type, sizeof type, "%s", ct ? ct : "");
        }
        curl_easy_cleanup(c);
    }
    CHECKF(st == 200 && !strcmp(type, "text/html; charset=utf-8"), "GET / without the key: %ld '%s'", st, type);
    CHECKF(src && out.n == n_src && !memcmp(out.p, src, n_src),
           "GET / is not %s byte for byte (%zu bytes, want %zu)", PAGE_SRC, out.n, n_src);
    st = http(sv, "GET", "/", NULL, 0, "Bearer " KEY, &ref);
    CHECKF(st == 200 && ref.n == out.n && !memcmp(ref.p, out.p, out.n), "GET / with the key: %ld", st);
    st = http(sv, "GET", "/v1/models", NULL, 0, NULL, &ref);
    CHECKF(st == 401, "GET /v1/models without the key: %ld (the page does not open it)", st);
    for (size_t i = 0; i < sizeof methods / sizeof *methods; i++) {
        const int counted = strcmp(methods[i], "HEAD") && strcmp(methods[i], "PATCH");
        char code[64], msg[256], rcode[64], rmsg[256], want[256];
        long rst;
        st = counted ? http(sv, methods[i], "/", NULL, 0, NULL, &out) : http_uncounted(sv, methods[i], "/", NULL, &out);
        rst = counted ? http(sv, methods[i], "/health", NULL, 0, NULL, &ref)
                      : http_uncounted(sv, methods[i], "/health", NULL, &ref);
        error_of(buf_s(&out), code, sizeof code, msg, sizeof msg);
        error_of(buf_s(&ref), rcode, sizeof rcode, rmsg, sizeof rmsg);
        snprintf(want, sizeof want, "/ takes GET, not %s", methods[i]);
        if (!strcmp(methods[i], "HEAD")) /* the status and head alone (RFC 9110 9.3.2) */
            CHECKF(st == rst && st == 405 && out.n == 0 && ref.n == 0, "HEAD /: %ld '%s'; /health: %ld '%s'", st,
                   buf_s(&out), rst, buf_s(&ref));
        else
            CHECKF(st == rst && st == 405 && !strcmp(code, rcode) && !strcmp(msg, want),
                   "%s /: %ld %s '%s'; /health: %ld %s '%s'", methods[i], st, code, msg, rst, rcode, rmsg);
    }
    free(src);
    buf_free(&out);
    buf_free(&ref);
}

/* --no-webui (with --api-key): / is an unknown path; --webui --no-webui is refused. */
static void test_off(const char *dir) {
    static const char *const methods[] = {"GET", "POST", "HEAD"};
    server sv;
    char args[4400], cmd[9000], errp[4200];
    buf out = {0}, ref = {0};
    snprintf(args, sizeof args, "-m '%s' --threads 1 --no-webui --api-key " KEY, dir);
    if (server_start(&sv, "webui_off", NULL, args)) return;
    for (size_t i = 0; i < sizeof methods / sizeof *methods; i++) {
        const int counted = strcmp(methods[i], "HEAD") != 0;
        char code[64], msg[256], rcode[64], rmsg[256], want[256];
        long st, rst;
        st = counted ? http(&sv, methods[i], "/", NULL, 0, "Bearer " KEY, &out)
                     : http_uncounted(&sv, methods[i], "/", "Bearer " KEY, &out);
        error_of(buf_s(&out), code, sizeof code, msg, sizeof msg);
        snprintf(want, sizeof want, "no such endpoint: %s /", methods[i]);
        CHECKF(st == 404 && (counted ? !strcmp(code, "not_found") && !strcmp(msg, want) : out.n == 0),
               "--no-webui %s /: %ld %s", methods[i], st, buf_s(&out));
        st = counted ? http(&sv, methods[i], "/", NULL, 0, NULL, &out) : http_uncounted(&sv, methods[i], "/", NULL, &out);
        rst = counted ? http(&sv, methods[i], "/nope", NULL, 0, NULL, &ref)
                      : http_uncounted(&sv, methods[i], "/nope", NULL, &ref);
        error_of(buf_s(&out), code, sizeof code, msg, sizeof msg);
        error_of(buf_s(&ref), rcode, sizeof rcode, rmsg, sizeof rmsg);
        CHECKF(st == 401 && rst == 401 && !strcmp(code, rcode) && !strcmp(msg, rmsg) && (counted || out.n + ref.n == 0),
               "--no-webui %s / without the key: %ld %s; /nope: %ld %s", methods[i], st, buf_s(&out), rst, buf_s(&ref));
    }
    server_stop(&sv, 10);
    snprintf(errp, sizeof errp, "%s/webui_both.err", MOE8_TEST_TMP);
    snprintf(cmd, sizeof cmd, "'%s' serve -m '%s' --webui --no-webui 2>'%s'", MOE8_CLI, dir, errp);
    CHECK(test_run(cmd) == 2);
    CHECK(test_file_contains(errp, "moe8 serve: --webui and --no-webui contradict each other"));
    buf_free(&out);
    buf_free(&ref);
}

/* ---- 2. the page in a browser --------------------------------------------------------------- */

/* Pids of processes whose command line holds `needle` (the browser's profile folder). */
static int procs_naming(const char *needle, pid_t *out, int cap) {
    DIR *d = opendir("/proc");
    struct dirent *e;
    int n = 0;
    while (d && (e = readdir(d)) && n < cap) {
        char path[300], line[8192];
        const pid_t pid = (pid_t)atoi(e->d_name);
        ssize_t k;
        int fd;
        if (pid <= 0 || pid == getpid()) continue;
        snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
        if ((fd = open(path, O_RDONLY)) < 0) continue;
        k = read(fd, line, sizeof line - 1);
        close(fd);
        if (k <= 0) continue;
        for (ssize_t i = 0; i < k; i++)
            if (!line[i]) line[i] = ' ';
        line[k] = '\0';
        if (strstr(line, needle)) out[n++] = pid;
    }
    if (d) closedir(d);
    return n;
}

/* What is missing to drive the page (NULL: nothing); *chromium set. */
static const char *browser_missing(const char **chromium) {
    const char *missing = node_missing("puppeteer-core/package.json");
    *chromium = getenv("MOE8_CHROMIUM") ? getenv("MOE8_CHROMIUM") : "/usr/bin/chromium";
    if (missing) return missing;
    if (access(*chromium, X_OK) != 0) return "no Chromium at /usr/bin/chromium or $MOE8_CHROMIUM (apt install chromium)";
    return NULL;
}

/* tests/clients/webui.mjs against sv (under --api-key KEY) and chain (the chain model). */
static void test_browser(server *sv, server *chain, const char *chromium) {
    char profile[4200], shot[4200], args[20000];
    server *const svs[2] = {sv, chain};
    pid_t left[64];
    const double aborted0 = metric(sv, "moe8:request_success_total", "finished_reason=\"abort\"");
    int n = 0, n_ok = 0, n_left;
    cJSON *o;
    snprintf(profile, sizeof profile, "%s", test_tmpdir("webui_profile"));
    snprintf(shot, sizeof shot, "%s/webui.png", MOE8_TEST_TMP);
    snprintf(args, sizeof args, "'%s/.deps/clients' '%s' '%s' '%s' 'http://127.0.0.1:%d' " KEY " 'http://127.0.0.1:%d'",
             MOE8_SOURCE_DIR, chromium, profile, shot, sv->port, chain->port);
    o = node_checks("webui.mjs", args, g_asan ? 900 : 300, svs, 2, 14, &n_ok, &n);
    /* the server's side of Stop: one request ended as aborted, nothing left running */
    CHECKF(wait_metric(sv, "moe8:request_success_total", "finished_reason=\"abort\"", aborted0 + 1, 10),
           "aborted requests: %g, want %g", metric(sv, "moe8:request_success_total", "finished_reason=\"abort\""),
           aborted0 + 1);
    CHECK(wait_idle(sv, 10));
    /* the browser closed with the script */
    for (int k = 0; k < 100 && (n_left = procs_naming(profile, left, 64)) > 0; k++) sleep_s(0.05);
    CHECKF(n_left == 0, "%d browser processes outlived webui.mjs", n_left);
    for (int i = 0; i < n_left; i++) kill(left[i], SIGKILL);
    printf("test_serve_webui: the page in Chromium: %d of %d checks pass (screenshot %s)\n", n_ok, n, shot);
    cJSON_Delete(o);
}

/* ---- main ------------------------------------------------------------------------------------- */

/* The page's server: --webui under --api-key KEY and a CORS list without the
 * page's origin (a same-origin page needs none), room for the long answer the
 * browser stops (3000 tokens, webui.mjs). */
static int start_webui(server *sv, const char *name, const char *dir) {
    char args[4400];
    snprintf(args, sizeof args, "-m '%s' --ctx-size 4096 --threads 1 --webui --api-key " KEY
             " --allowed-origins http://elsewhere.example --served-model-name " NAME, dir);
    return server_start(sv, name, NULL, args);
}

/* --part clients: the page in Chromium, on its own servers; 1 when skipped */
static int clients_part(fx_opts ot, fx_opts oc) {
    const char *chromium = NULL, *missing, *dir, *chain_dir;
    server sv, chain;
    char args[4400];
    if (g_asan) {
        printf("test_serve_webui: the page in a browser: in the release build only\n");
        return 0;
    }
    if ((missing = browser_missing(&chromium))) {
        printf("test_serve_webui: the page in a browser: skipped: %s\n", missing);
        return 1;
    }
    dir = fx_test_model("serve_webui_clients", &ot, 1);
    chain_dir = fx_test_model("serve_webui_chain", &oc, 1);
    if (start_webui(&sv, "webui_clients", dir) == 0) {
        snprintf(args, sizeof args, "-m '%s' --threads 1 --served-model-name chain", chain_dir);
        if (server_start(&chain, "webui_chain", NULL, args) == 0) {
            test_browser(&sv, &chain, chromium);
            server_stop(&chain, 10);
        }
        phase("the page in Chromium");
        server_stop(&sv, 10);
    }
    return 0;
}

int main(int argc, char **argv) {
    fx_opts ot = serve_fixture_opts(), oc = serve_fixture_opts();
    server sv;
    int skipped = 0;
    serve_test_parts(argc, argv);
    serve_test_init("test_serve_webui");
    ot.hidden = 64; /* twice the work a token: a long answer lasts long enough to be stopped */
    oc.tensor_hook = chain_hook;
    if (g_part_c) {
        const char *dir = fx_test_model("serve_webui", &ot, 1);
        if (start_webui(&sv, "webui", dir) == 0) {
            test_page(&sv);
            phase("the page over HTTP");
            test_off(dir);
            phase("--no-webui");
            server_stop(&sv, 10);
        }
    }
    if (g_part_clients) skipped = clients_part(ot, oc);
    curl_global_cleanup();
    printf("test_serve_webui: %.1f s\n", now_s() - g_t0);
    if (skipped && !test_n_fail) {
        test_summary();
        return 77;
    }
    return test_summary();
}
