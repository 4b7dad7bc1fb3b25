/*
 * cmd_bench_serve.c — `moe8 bench serve --url URL`: a load generator for any
 * OpenAI-compatible server, measured as `vllm bench serve` measures it.
 *
 * One thread drives every request through libcurl's multi interface. Request
 * i is sent at its arrival time (all at t = 0 by default, or a Poisson process
 * of --request-rate R: exponential gaps from a seeded generator), once fewer
 * than --max-concurrency are in flight (FIFO). Every request streams
 * (POST /v1/completions with "prompt", or /v1/chat/completions with one user
 * message; max_tokens = --output-len, ignore_eos, temperature 0, usage in the
 * stream; or the agents' APIs: /v1/responses with "input" and
 * max_output_tokens, /v1/messages with one user message and max_tokens, at
 * temperature 0, without ignore_eos, which neither API has; --api-key goes
 * as x-api-key to /v1/messages, as Authorization: Bearer elsewhere). --json-schema FILE / --json-object add response_format (json_schema
 * with that schema, strict; json_object), so constrained decoding is measured
 * on the same load: a server then ends each answer where its grammar does
 * (moe8 and vLLM drop ignore_eos under a grammar), so compare the per-token
 * times (TPOT, ITL, output tok/s), not the token counts.
 *
 * The stream is Server-Sent Events, read incrementally: each `data: <json>`
 * line is one event (as vllm reads it), `data: [DONE]` ends it. An event with
 * non-empty text (choices[0].text, or choices[0].delta.content /
 * .reasoning_content for chat; response.output_text.delta /
 * .reasoning_text.delta; content_block_delta's text_delta / thinking_delta)
 * is a token arrival, timed at the moment its bytes reached us; the usage
 * event gives prompt_tokens / completion_tokens (response.completed's usage,
 * message_start's and message_delta's: output tokens are the server's count
 * for every API, so their tok/s compare; the text events are counted when it
 * is missing). The Responses stream ends at response.completed (or
 * .incomplete), the Messages stream at message_stop. Per request: TTFT = first
 * text - send, ITL = gaps between successive text events, latency = [DONE] -
 * send, TPOT = (latency - TTFT) / (output tokens - 1). A request fails on a
 * non-2xx status, a timeout, a transport error, or a malformed stream (not
 * JSON, an error event, no [DONE], no text, far more text events than
 * max_tokens); the first failure is printed to stderr, the counts in the table.
 *
 * Synthetic prompts are --input-len words from a list of 256 common English
 * words, each one token for the Qwen3 tokenizer with or without its leading
 * space (so N words are N prompt tokens there; other tokenizers: about N): the
 * first --shared-prefix words are the same in every prompt, the next (up to 3)
 * spell the prompt's index in base 256, so no two prompts share more than the
 * prefix; the rest are seeded random words.
 *
 * It talks only to --url (http or https; no redirects, no proxies), sends at
 * most 1e6 requests, each bounded by --timeout. Results on stdout as a table,
 * progress and errors on stderr. It does not tokenize: token counts come from
 * the server.
 *
 * This file: the flags, the URL and the model name, the command; the parts
 * are in bench_serve_*.c (bench_serve.h).
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/random.h>
#include <time.h>

#include "bench_serve.h"

/* ---- options ------------------------------------------------------------- */

#define SYNOPSIS "moe8 bench serve --url URL [--endpoint completions|chat|responses|messages]\n" \
    "                        [--model NAME] [--api-key KEY] [-n N] [--input-len N] [--output-len N]\n" \
    "                        [--shared-prefix N] [--prompt-file FILE]\n" \
    "                        [--request-rate R] [--max-concurrency C] [--seed S]\n" \
    "                        [--timeout S] [--json-schema FILE | --json-object]"
#define NOTES "Exit status: 0 when every request completed, 1 when some failed, 2 on bad flags.\n"

static int parse_opts(int argc, char **argv, serve_opts *o) {
    memset(o, 0, sizeof *o);
    o->n_prompts = 100, o->input_len = 1024, o->output_len = 128;
    o->request_rate = INFINITY, o->timeout_s = 1800.0;
    int input_set = 0, shared_set = 0;
    const cli_opt opts[] = {
        {"--url", NULL, CLI_STR, &o->url, .arg = "URL",
         .help = "server base, http(s)://host:port (a trailing /v1 is allowed)"},
        {"--endpoint", NULL, CLI_CHOICE, &o->api, .choices = "completions,chat,responses,messages", .arg = "E",
         .help = "completions (POST /v1/completions, default), chat\n"
         "(POST /v1/chat/completions, one user message), responses\n"
         "(POST /v1/responses, input) or messages (POST /v1/messages)"},
        {"--model", NULL, CLI_STR, &o->model, .arg = "NAME",
         .help = "model field (default: the first id of GET /v1/models)"},
        {"--api-key", NULL, CLI_STR, &o->api_key, .arg = "KEY",
         .help = "sent as Authorization: Bearer KEY (x-api-key: KEY to messages)"},
        {"--num-prompts", "-n", CLI_INT, &o->n_prompts, 1, MAX_PROMPTS, .arg = "N", .given = &o->n_set,
         .help = "requests to send (default 100; with --prompt-file: its lines)"},
        {"--input-len", NULL, CLI_INT, &o->input_len, 1, MAX_LEN, .arg = "N", .given = &input_set,
         .help = "words per synthetic prompt, ~1 token each (default 1024)"},
        {"--output-len", NULL, CLI_INT, &o->output_len, 1, MAX_LEN, .arg = "N",
         .help = "max_tokens of every request, eos ignored (default 128)"},
        {"--shared-prefix", NULL, CLI_INT, &o->shared_prefix, 0, MAX_LEN, .arg = "N", .given = &shared_set,
         .help = "first N words identical in every prompt (default 0)"},
        {"--prompt-file", NULL, CLI_STR, &o->prompt_file, .arg = "FILE",
         .help = "one prompt per line instead (cycled if -n is larger)"},
        {"--request-rate", NULL, CLI_DOUBLE, &o->request_rate, .dlo = 0.01, .dhi = INFINITY, .arg = "R",
         .help = "Poisson arrivals at R requests/s (default inf: all at once)"},
        {"--max-concurrency", NULL, CLI_INT, &o->max_concurrency, 1, MAX_PROMPTS, .arg = "C",
         .help = "at most C requests in flight (default: no limit)"},
        {"--seed", NULL, CLI_U64, &o->seed, .arg = "S", .given = &o->seed_set,
         .help = "seed of the prompts and the arrivals (default: a new one\n"
         "each run, printed, so a run can be repeated)"},
        {"--timeout", NULL, CLI_DOUBLE, &o->timeout_s, .dlo = 0.001, .dhi = 86400, .arg = "S",
         .help = "seconds each request may take (default 1800)"},
        {"--json-schema", NULL, CLI_STR, &o->json_schema, .arg = "FILE",
         .help = "structured output: response_format json_schema with the JSON\n"
         "Schema in FILE (strict), constrained decoding on the server"},
        {"--json-object", NULL, CLI_FLAG, &o->json_object,
         .help = "structured output: response_format json_object"},
        {"--save-result", NULL, CLI_STR, &o->save_result, .arg = "FILE",
         .help = "also write the results as JSON (vLLM's keys: mean_ttft_ms, ...)"},
        {"--percentiles", NULL, CLI_LIST, o->percentiles, 1, 100, .count = &o->n_percentiles, .cap = 16,
         .arg = "LIST", .help = "the latency percentiles shown and saved, e.g. 50,90,99\n(default: median and p99)"},
        {0},
    };
    const int rc = cli_parse(CMD, SYNOPSIS, opts, NOTES, argc - 1, argv + 1);
    if (rc) return rc;
    o->len_set = input_set || shared_set;
    if (!o->url) {
        return cli_usage_err(CMD, "--url is required (moe8 bench serve -h lists the flags)");
    }
    if (o->prompt_file && o->len_set) {
        return cli_usage_err(CMD, "--input-len and --shared-prefix are for synthetic prompts, not "
                             "--prompt-file");
    }
    if (o->json_schema && o->json_object) {
        return cli_usage_err(CMD, "--json-schema and --json-object both set response_format: "
                             "give one");
    }
    if ((o->json_schema || o->json_object) && o->api >= API_RESPONSES) {
        return cli_usage_err(CMD, "--json-schema and --json-object are for --endpoint completions or chat");
    }
    if (o->shared_prefix > o->input_len) {
        return cli_usage_err(CMD, "--shared-prefix %d is longer than --input-len %d",
                             o->shared_prefix, o->input_len);
    }
    if (o->api_key && (strpbrk(o->api_key, "\r\n") || strlen(o->api_key) > 4096)) {
        return cli_usage_err(CMD, "--api-key: expected at most 4096 bytes on one line");
    }
    return 0;
}

/* ---- the model name, the URL ------------------------------------------------- */

typedef struct {
    char *data;
    size_t len;
} membuf;

static size_t to_membuf(char *p, size_t size, size_t nmemb, void *user) {
    membuf *mb = user;
    const size_t n = size * nmemb;
    if (mb->len + n > MAX_MODELS_BODY) return 0;
    char *nd = realloc(mb->data, mb->len + n + 1);
    if (!nd) return 0;
    memcpy(nd + mb->len, p, n);
    mb->data = nd, mb->len += n;
    mb->data[mb->len] = '\0';
    return n;
}

/* GET base/v1/models; *model = a copy of data[0].id. */
static int first_model(const serve_opts *o, const char *base, struct curl_slist *headers,
                       char **model) {
    char url[4200], errbuf[CURL_ERROR_SIZE] = "";
    membuf mb = {0};
    long status = 0;
    int rc = 1;
    CURL *h = curl_easy_init();
    cJSON *j = NULL;
    if (!h) return 1;
    snprintf(url, sizeof url, "%s/v1/models", base);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, to_membuf);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &mb);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)(fmin(o->timeout_s, 60.0) * 1000.0));
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_PROXY, "");
    CURLcode code = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    if (code != CURLE_OK) {
        cli_err(CMD, "GET %s: %s (or pass --model)", url,
                errbuf[0] ? errbuf : curl_easy_strerror(code));
        goto done;
    }
    if (status != 200) {
        cli_err(CMD, "GET %s: HTTP %ld: %.300s (or pass --model)", url, status,
                mb.data ? mb.data : "");
        goto done;
    }
    j = cJSON_ParseWithLength(mb.data ? mb.data : "", mb.len);
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(j, "data");
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(d, 0), "id");
    if (!cJSON_IsArray(d) || !cJSON_IsString(id)) {
        cli_err(CMD, "GET %s: no data[0].id in the answer (or pass --model)", url);
        goto done;
    }
    if (!(*model = strdup(id->valuestring))) goto done;
    rc = 0;
done:
    cJSON_Delete(j);
    free(mb.data);
    curl_easy_cleanup(h);
    return rc;
}

/* *base = URL without trailing '/' or '/v1', checked to be http(s) with a host. */
static int check_url(const char *url, char **base) {
    CURLU *u = curl_url();
    char *scheme = NULL, *host = NULL, *query = NULL, *frag = NULL;
    int rc = 2;
    size_t n;
    if (!u) return 1;
    if (strlen(url) > 4000 || curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK) {
        cli_bad_value(CMD, "--url", "a URL such as http://127.0.0.1:8080", url);
        goto done;
    }
    curl_url_get(u, CURLUPART_QUERY, &query, 0);
    curl_url_get(u, CURLUPART_FRAGMENT, &frag, 0);
    if ((strcmp(scheme, "http") && strcmp(scheme, "https")) || query || frag) {
        cli_bad_value(CMD, "--url", "an http:// or https:// base URL without ?query or #fragment", url);
        goto done;
    }
    if (!(*base = strdup(url))) goto done;
    n = strlen(*base);
    while (n && (*base)[n - 1] == '/') (*base)[--n] = '\0';
    if (n >= 3 && !strcmp(*base + n - 3, "/v1")) (*base)[n - 3] = '\0';
    rc = 0;
done:
    curl_free(scheme);
    curl_free(host);
    curl_free(query);
    curl_free(frag);
    curl_url_cleanup(u);
    return rc;
}

/* In-flight transfers each hold a socket: raise the open-file limit if needed. */
static int check_fd_limit(int in_flight) {
    struct rlimit rl;
    const rlim_t need = (rlim_t)in_flight + 64;
    if (getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur >= need) return 0;
    if (rl.rlim_max >= need) {
        rl.rlim_cur = need;
        if (!setrlimit(RLIMIT_NOFILE, &rl)) return 0;
    }
    return cli_usage_err(CMD, "%d requests in flight need %llu open files, the limit is %llu "
                         "(ulimit -n): pass --max-concurrency %llu or less", in_flight,
                         (unsigned long long)need, (unsigned long long)rl.rlim_max,
                         (unsigned long long)(rl.rlim_max > 64 ? rl.rlim_max - 64 : 1));
}

/* ---- the command ------------------------------------------------------------------ */

/* The headers of GET /v1/models (*models) and of the requests (*reqs; the same
 * list but for /v1/messages, which gets x-api-key and anthropic-version); 0, or
 * -1 on no memory. */
static int make_headers(const serve_opts *o, struct curl_slist **models, struct curl_slist **reqs) {
    char line[4096 + 32];
    struct curl_slist *l[2] = {NULL, NULL};
    for (int k = 0; k < 2; k++) {
        const int anthropic = k == 1 && o->api == API_MESSAGES;
        if (k == 1 && !anthropic) break;
        l[k] = curl_slist_append(NULL, "Content-Type: application/json");
        l[k] = curl_slist_append(l[k], "Accept: text/event-stream");
        l[k] = curl_slist_append(l[k], "Expect:"); /* no 100-continue round trip */
        if (anthropic) l[k] = curl_slist_append(l[k], "anthropic-version: 2023-06-01");
        if (o->api_key) {
            snprintf(line, sizeof line, anthropic ? "x-api-key: %s" : "Authorization: Bearer %s", o->api_key);
            l[k] = curl_slist_append(l[k], line);
        }
    }
    *models = l[0], *reqs = l[1] ? l[1] : l[0];
    return l[0] && (o->api != API_MESSAGES || l[1]) ? 0 : -1;
}

int cmd_bench_serve(int argc, char **argv) {
    serve_opts o;
    prompt_set ps = {0};
    bench b = {0};
    static const char *const path[] = {"completions", "chat/completions", "responses", "messages"};
    struct curl_slist *model_headers = NULL;
    char *base = NULL, *model = NULL, *endpoint = NULL;
    double dur = 0.0;
    int rc = parse_opts(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc; /* -1: -h */
    if ((rc = check_url(o.url, &base))) return rc;
    if (!o.seed_set) { /* a fresh run: other prompts, so no prefix cache hides the cost */
        if (getrandom(&o.seed, sizeof o.seed, GRND_NONBLOCK) != (ssize_t)sizeof o.seed)
            o.seed = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull;
        o.seed >>= 1; /* printable as a signed number too */
    }
    if (o.prompt_file && (rc = bserve_read_prompts(&o, &ps))) goto done;
    if (o.json_schema && (rc = bserve_read_schema(&o))) goto done;
    if (o.prompt_file && !o.n_set) o.n_prompts = ps.n_lines;
    if (!o.prompt_file && o.input_len - o.shared_prefix < bserve_index_words(o.n_prompts)) {
        cli_err(CMD, "%d distinct prompts need %d words after --shared-prefix; --input-len %d "
                "leaves %d", o.n_prompts, bserve_index_words(o.n_prompts), o.input_len,
                o.input_len - o.shared_prefix);
        rc = 2;
        goto done;
    }
    if ((int64_t)o.n_prompts * o.output_len > MAX_TOKENS_TOTAL) {
        cli_err(CMD, "-n %d x --output-len %d is over %lld tokens", o.n_prompts, o.output_len,
                (long long)MAX_TOKENS_TOTAL);
        rc = 2;
        goto done;
    }
    if ((rc = check_fd_limit(o.max_concurrency && o.max_concurrency < o.n_prompts
                                 ? o.max_concurrency : o.n_prompts)))
        goto done;
    rc = 1;
    if (curl_global_init(CURL_GLOBAL_DEFAULT)) {
        cli_err(CMD, "cannot initialise libcurl");
        goto done;
    }
    b.o = &o, b.ps = &ps;
    if (make_headers(&o, &model_headers, &b.headers)) goto cleanup;
    if (o.model) model = strdup(o.model);
    else if (first_model(&o, base, model_headers, &model)) goto cleanup;
    if (!model || !(endpoint = malloc(strlen(base) + 32))) goto cleanup;
    sprintf(endpoint, "%s/v1/%s", base, path[o.api]);
    b.endpoint = endpoint, b.model = model;
    b.res.ttft = malloc((size_t)o.n_prompts * sizeof(double));
    b.res.tpot = malloc((size_t)o.n_prompts * sizeof(double));
    b.res.e2el = malloc((size_t)o.n_prompts * sizeof(double));
    if (!b.res.ttft || !b.res.tpot || !b.res.e2el || !(b.multi = curl_multi_init())) {
        cli_err(CMD, "out of memory");
        goto cleanup;
    }
    fprintf(stderr, "moe8 " CMD ": %d requests to %s (model %s), %g requests/s, at most %d in "
            "flight\n", o.n_prompts, endpoint, model, o.request_rate,
            o.max_concurrency && o.max_concurrency < o.n_prompts ? o.max_concurrency : o.n_prompts);
    if (!bserve_run(&b, &dur)) {
        bserve_print_results(&b, dur);
        rc = b.res.n_failed || b.res.save_failed ? 1 : 0;
    }
cleanup:
    while (b.live) bserve_free_request(&b, b.live); /* left in flight by an internal error */
    if (b.multi) curl_multi_cleanup(b.multi);
    if (b.headers != model_headers) curl_slist_free_all(b.headers);
    curl_slist_free_all(model_headers);
    curl_global_cleanup();
done:
    free(b.res.ttft);
    free(b.res.tpot);
    free(b.res.e2el);
    free(b.res.itl);
    free(b.pbuf);
    free(endpoint);
    free(model);
    free(base);
    bserve_free_prompts(&ps);
    cJSON_Delete(o.schema);
    return rc;
}
