/*
 * bench_serve.h — what the files of `moe8 bench serve` share (internal to
 * tools/): the options, the prompt set, one streamed request and the
 * benchmark's state. cmd_bench_serve.c parses the flags and checks the URL,
 * bench_serve_prompts.c makes the prompts and request bodies,
 * bench_serve_stream.c reads one request's event stream (bench_serve_events.c
 * the Responses and Messages events), bench_serve_run.c
 * drives the requests through libcurl, bench_serve_table.c prints the table.
 */
#ifndef MOE8_TOOLS_BENCH_SERVE_H
#define MOE8_TOOLS_BENCH_SERVE_H

#include <stdint.h>

#include <cjson/cJSON.h>
#include <curl/curl.h>

#include "cli.h"

#define CMD "bench serve"
#define MAX_PROMPTS 1000000
#define MAX_LEN (1 << 20)                   /* --input-len, --output-len */
#define MAX_TOKENS_TOTAL ((int64_t)1 << 28) /* prompts x output len: bounds the ITL samples */
#define MAX_PROMPT_FILE ((size_t)1 << 30)
#define MAX_LINE ((size_t)16 << 20)         /* one SSE line */
#define MAX_ERR_BODY 2048                   /* bytes of an error response kept */
#define MAX_MODELS_BODY ((size_t)4 << 20)
#define MAX_SCHEMA_FILE ((size_t)4 << 20)     /* --json-schema */
#define N_WORDS 256

enum { FAIL_NONE, FAIL_HTTP, FAIL_TIMEOUT, FAIL_CONNECT, FAIL_STREAM, N_FAIL };

/* --endpoint, in the order of its choices: the API of the requests and their streams. */
enum { API_COMPLETIONS, API_CHAT, API_RESPONSES, API_MESSAGES };

typedef struct {
    const char *url, *model, *api_key, *prompt_file;
    int api;                     /* API_*: /v1/completions, /v1/chat/completions,
                                    /v1/responses, /v1/messages */
    int n_prompts, n_set;        /* n_set: -n was given */
    int input_len, output_len, shared_prefix, len_set;
    int max_concurrency;         /* 0 = no limit */
    double request_rate;         /* requests/s; INFINITY = all at once */
    double timeout_s;            /* per request */
    uint64_t seed;
    int seed_set;
    const char *json_schema;     /* --json-schema FILE, or NULL */
    int json_object;             /* --json-object */
    cJSON *schema;               /* the file's schema, parsed */
    const char *save_result;     /* --save-result FILE: the results as JSON, or NULL */
    int percentiles[16];         /* --percentiles: rows of each latency table (default 50, 99) */
    int n_percentiles;
} serve_opts;

/* The generator behind the prompts' words and the arrivals (splitmix64). */
static inline uint64_t bserve_splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

typedef struct {
    char **lines;    /* --prompt-file: the lines (into data) */
    int n_lines;
    char *data;
    int64_t *n_words; /* words per line: the input tokens when the server reports none */
} prompt_set;

typedef struct request {
    int index;
    CURL *h;
    char *body;
    char errbuf[CURL_ERROR_SIZE];
    double t_send, t_first, t_last, t_done; /* monotonic s; t_first = 0: no text yet */
    int64_t n_events, n_text;               /* data: lines, those with text */
    int64_t prompt_tokens, completion_tokens; /* -1: no usage seen */
    int64_t cached_tokens;      /* usage.prompt_tokens_details.cached_tokens, Responses'
                                   input_tokens_details.cached_tokens, Messages'
                                   cache_read_input_tokens (-1: not given) */
    long status;                            /* HTTP status; 0 until the body starts */
    int done;                               /* the stream's end seen: data: [DONE],
                                               response.completed / .incomplete, message_stop */
    int fail;                               /* FAIL_* */
    char msg[512];                          /* the failure */
    char *buf;                              /* bytes of an unfinished line, or an error body */
    size_t len, cap;
    float *itl;                             /* [n_text - 1] gaps, s */
    size_t n_itl, cap_itl;
    int64_t max_text;                       /* more text events than this: malformed */
    int max_tokens, api;
    struct request *prev, *next;            /* the requests in flight */
} request;

typedef struct {
    double *ttft, *tpot, *e2el; /* [n_ok], [n_tpot], [n_ok] in s */
    int n_ok, n_tpot, n_failed, n_by[N_FAIL];
    float *itl;
    size_t n_itl, cap_itl;
    int64_t in_tokens, out_tokens, cached_tokens;
    int no_cached;              /* some request's usage had no cached_tokens */
    int no_usage_in, no_usage_out; /* some request's counts were estimated */
    int printed_error, peak;
    int save_failed;            /* --save-result could not be written */
} results;

typedef struct {
    const serve_opts *o;
    const prompt_set *ps;
    const char *endpoint, *model;
    struct curl_slist *headers;
    CURLM *multi;
    request *live;              /* in flight, newest first */
    char *pbuf;                 /* synthetic prompt scratch */
    size_t pcap;
    results res;
} bench;

/* ---- prompts and bodies (bench_serve_prompts.c) ---- */

/* Prompt i of the synthetic set, into *buf (grown as needed); NULL on no memory. */
char *bserve_synth_prompt(const serve_opts *o, int i, char **buf, size_t *cap);
/* Words that tell every one of n prompts apart: ceil(log256 n). */
int bserve_index_words(int n);
/* --prompt-file's non-empty lines; 0, or the exit status after a message. */
int bserve_read_prompts(const serve_opts *o, prompt_set *ps);
void bserve_free_prompts(prompt_set *ps);
/* --json-schema's file into o->schema; 0, or 2 after a message. */
int bserve_read_schema(serve_opts *o);
/* The JSON body of a request; NULL on no memory. */
char *bserve_request_body(const serve_opts *o, const char *model, const char *prompt);

/* ---- one request's stream (bench_serve_stream.c) ---- */

/* The first failure of a request stays; later ones are its consequences. */
void bserve_req_fail(request *r, int kind, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* One SSE line (no line break) that arrived at time t. */
void bserve_on_line(request *r, char *s, size_t n, double t);
/* CURLOPT_WRITEFUNCTION of a request (user: the request). */
size_t bserve_on_body(char *p, size_t size, size_t nmemb, void *user);
/* A text event at time t: TTFT, the gaps, the bound on their number. */
void bserve_on_text(request *r, double t);
/* The stream's end event each API sends ("data: [DONE]", ...), for messages. */
const char *bserve_end_event(int api);

/* ---- the Responses and Messages events (bench_serve_events.c) ---- */

/* One event of a /v1/responses stream (j: its data, parsed) at time t. */
void bserve_responses_event(request *r, const cJSON *j, double t);
/* One event of a /v1/messages stream at time t. */
void bserve_messages_event(request *r, const cJSON *j, double t);

/* ---- the run (bench_serve_run.c) ---- */

/* Runs every request; 0, or 1 on an internal error (not on failed requests). */
int bserve_run(bench *b, double *duration);
void bserve_free_request(bench *b, request *r);

/* ---- the table (bench_serve_table.c) ---- */

/* The table; with --save-result the JSON file too (res.save_failed when it failed). */
void bserve_print_results(bench *b, double dur);

#endif
