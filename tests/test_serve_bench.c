/*
 * test_serve_bench.c — `moe8 bench serve --endpoint completions|chat|responses|messages`
 * against `moe8 serve` on the tiny Qwen3 fixture (started with --api-key, so
 * the key reaches each API: Authorization: Bearer, and x-api-key for
 * /v1/messages). For every endpoint: all N requests complete, the table
 * names the endpoint, and its total output tokens are the server's own count
 * (the rise of moe8:generation_tokens_total over the run, an independent
 * reference: the tool reads each API's usage from its stream: the usage
 * chunk, response.completed / .incomplete, message_start + message_delta), as
 * are its input tokens (moe8:prompt_tokens_total, the prompts' tokens not
 * read from the prefix cache, plus the cached ones the table reports).
 * completions and chat ask for ignore_eos, so they give exactly N x
 * --output-len tokens. A wrong key fails every messages request with the
 * server's 401; --json-object with the agents' APIs is refused. The server's
 * access log has one line per request sent.
 * Does not check the timings (the benchmarks do, docs/BENCHMARKS.md).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "fixture_model.h"
#include "serve_test.h"

#define N_REQ 5
#define OUT_LEN 6

static long long row_value(const char *text, const char *label) {
    const char *p = strstr(text, label);
    return p ? strtoll(p + strlen(label), NULL, 10) : -1;
}

/* moe8 bench serve with these flags; its exit status, its output in out. */
static int bench(server *sv, const char *flags, buf *out) {
    char cmd[8192], outp[4200];
    snprintf(outp, sizeof outp, "%s/serve_bench.out", MOE8_TEST_TMP);
    snprintf(cmd, sizeof cmd, "'%s' bench serve --url http://127.0.0.1:%d %s >'%s' 2>&1", MOE8_CLI, sv->port, flags,
             outp);
    const int rc = test_run(cmd);
    out->n = 0;
    read_text(outp, out);
    return rc;
}

static void test_endpoints(server *sv) {
    static const char *const E[] = {"completions", "chat", "responses", "messages"};
    static const char *const PATH[] = {"/v1/completions", "/v1/chat/completions", "/v1/responses", "/v1/messages"};
    buf out = {0};
    char flags[512];
    for (int e = 0; e < 4; e++) {
        CHECK(wait_idle(sv, 10));
        const double g0 = metric(sv, "moe8:generation_tokens_total", NULL);
        const double p0 = metric(sv, "moe8:prompt_tokens_total", NULL);
        snprintf(flags, sizeof flags, "--endpoint %s --api-key sekret -n %d --input-len 40 --output-len %d "
                 "--max-concurrency 3 --seed %d", E[e], N_REQ, OUT_LEN, 11 + e);
        const int rc = bench(sv, flags, &out);
        sv->n_req += 1 + N_REQ; /* GET /v1/models, the requests */
        CHECK(wait_idle(sv, 10));
        const double g1 = metric(sv, "moe8:generation_tokens_total", NULL);
        const double p1 = metric(sv, "moe8:prompt_tokens_total", NULL);
        const char *s = buf_s(&out);
        const long long gen = row_value(s, "Total generated tokens:"), in = row_value(s, "Total input tokens:");
        const long long cached = row_value(s, "Cached input tokens:");
        const char *ep = strstr(s, "Endpoint:");
        CHECKF(rc == 0 && row_value(s, "Successful requests:") == N_REQ && row_value(s, "Failed requests:") == 0,
               "bench serve %s: exit %d: %s", E[e], rc, s);
        CHECKF(ep && strstr(ep, PATH[e]) && strstr(ep, PATH[e])[strlen(PATH[e])] == '\n', "%s: endpoint line: %s", E[e], s);
        CHECKF(gen > 0 && gen <= N_REQ * OUT_LEN && (double)gen == g1 - g0 && !strstr(s, "counted as text events"),
               "%s: %lld output tokens in the table, the server generated %.0f: %s", E[e], gen, g1 - g0, s);
        CHECKF(e >= 2 || gen == N_REQ * OUT_LEN, "%s with ignore_eos: %lld output tokens", E[e], gen);
        CHECKF(in >= N_REQ * 40 && cached >= 0 && (double)(in - cached) == p1 - p0 && !strstr(s, "counted as words") &&
               !strstr(s, "had no cached_tokens"),
               "%s: %lld input tokens (%lld cached) in the table, the server prefilled %.0f: %s", E[e], in, cached,
               p1 - p0, s);
        CHECKF(row_value(s, "Median TTFT (ms):") >= 0 && strstr(s, "Output token throughput (tok/s):"), "%s: %s", E[e], s);
    }
    /* a wrong key: the server's 401 for each request (x-api-key reached /v1/messages) */
    CHECKF(bench(sv, "--endpoint messages --api-key nope --model x -n 2 --input-len 8 --output-len 2", &out) == 1 &&
           row_value(buf_s(&out), "Failed requests:") == 2 && strstr(buf_s(&out), "HTTP 401") &&
           strstr(buf_s(&out), "authentication_error"),
           "messages with a wrong key: %s", buf_s(&out));
    sv->n_req += 2;
    CHECKF(bench(sv, "--endpoint responses --json-object --api-key sekret -n 2", &out) == 2 &&
           strstr(buf_s(&out), "are for --endpoint completions or chat"), "--json-object with responses: %s", buf_s(&out));
    buf_free(&out);
}

/* --save-result FILE --percentiles: the JSON holds the table's numbers. */
static void test_save_result(server *sv) {
    buf out = {0}, js = {0};
    char flags[2048], path[1200];
    snprintf(path, sizeof path, "%s/serve_bench_result.json", MOE8_TEST_TMP);
    remove(path);
    snprintf(flags, sizeof flags, "--api-key sekret -n 4 --input-len 16 --output-len 4 --seed 5 "
             "--percentiles 50,90,99 --save-result '%s'", path);
    const int rc = bench(sv, flags, &out);
    sv->n_req += 1 + 4;
    read_text(path, &js);
    cJSON *o = cJSON_Parse(buf_s(&js));
    const char *s = buf_s(&out);
    CHECKF(rc == 0 && o, "bench serve --save-result: exit %d: %s / %s", rc, s, buf_s(&js));
    const cJSON *done = cJSON_GetObjectItem(o, "completed"), *gen = cJSON_GetObjectItem(o, "total_output_tokens");
    const cJSON *p50 = cJSON_GetObjectItem(o, "median_ttft_ms"), *p90 = cJSON_GetObjectItem(o, "p90_ttft_ms");
    const cJSON *p99 = cJSON_GetObjectItem(o, "p99_ttft_ms"), *e2e = cJSON_GetObjectItem(o, "mean_e2el_ms");
    const cJSON *ttft = cJSON_GetObjectItem(o, "mean_ttft_ms");
    const char *row = strstr(s, "P90 TTFT (ms):");
    CHECK(cJSON_IsNumber(done) && done->valueint == 4);
    CHECK(cJSON_IsNumber(gen) && gen->valuedouble == (double)row_value(s, "Total generated tokens:"));
    CHECKF(cJSON_IsNumber(p50) && cJSON_IsNumber(p90) && cJSON_IsNumber(p99) && p50->valuedouble <= p90->valuedouble &&
           p90->valuedouble <= p99->valuedouble, "percentiles: %s", buf_s(&js));
    CHECKF(row && p90 && fabs(atof(row + strlen("P90 TTFT (ms):")) - p90->valuedouble) < 0.01,
           "the table's P90 row and the file agree: %s", s);
    CHECK(strstr(s, "P50 TTFT (ms):") && strstr(s, "P99 E2EL (ms):") && !strstr(s, "Median TTFT"));
    CHECK(cJSON_IsNumber(e2e) && cJSON_IsNumber(ttft) && e2e->valuedouble >= ttft->valuedouble);
    cJSON_Delete(o);
    buf_free(&out), buf_free(&js);
}

int main(void) {
    fx_opts o = serve_fixture_opts();
    server sv;
    char args[4400];
    const char *dir;
    serve_test_init("test_serve_bench");
    dir = fx_test_model("serve_bench", &o, 1);
    snprintf(args, sizeof args, "-m '%s' --ctx-size 1024 --threads 2 --api-key sekret", dir);
    if (server_start(&sv, "bench", NULL, args) == 0) {
        test_endpoints(&sv);
        phase("endpoints");
        test_save_result(&sv);
        phase("save-result");
        server_stop(&sv, 10);
    }
    curl_global_cleanup();
    printf("test_serve_bench: %.1f s\n", now_s() - g_t0);
    return test_summary();
}
