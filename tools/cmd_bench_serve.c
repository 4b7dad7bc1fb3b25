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
 * stream). --json-schema FILE / --json-object add response_format (json_schema
 * with that schema, strict; json_object), so constrained decoding is measured
 * on the same load: a server then ends each answer where its grammar does
 * (moe8 and vLLM drop ignore_eos under a grammar), so compare the per-token
 * times (TPOT, ITL, output tok/s), not the token counts.
 *
 * The stream is Server-Sent Events, read incrementally: each `data: <json>`
 * line is one event (as vllm reads it), `data: [DONE]` ends it. An event with
 * non-empty text (choices[0].text, or choices[0].delta.content /
 * .reasoning_content for chat) is a token arrival, timed at the moment its
 * bytes reached us; the usage event gives prompt_tokens / completion_tokens
 * (the text events are counted when it is missing). Per request: TTFT = first
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
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/random.h>
#include <time.h>

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
static const char *const fail_name[N_FAIL] = {"", "HTTP", "timeout", "connection", "stream"};

typedef struct {
    const char *url, *model, *api_key, *prompt_file;
    int chat;                    /* 0: /v1/completions, 1: /v1/chat/completions */
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
} serve_opts;


static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* ---- options ------------------------------------------------------------- */

#define SYNOPSIS "moe8 bench serve --url URL [--endpoint completions|chat] [--model NAME]\n" \
    "                        [--api-key KEY] [-n N] [--input-len N] [--output-len N]\n" \
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
        {"--endpoint", NULL, CLI_CHOICE, &o->chat, .choices = "completions,chat", .arg = "E",
         .help = "completions (POST /v1/completions, default) or chat\n"
         "(POST /v1/chat/completions, one user message)"},
        {"--model", NULL, CLI_STR, &o->model, .arg = "NAME",
         .help = "model field (default: the first id of GET /v1/models)"},
        {"--api-key", NULL, CLI_STR, &o->api_key, .arg = "KEY", .help = "sent as Authorization: Bearer KEY"},
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
        {0},
    };
    const int rc = cli_parse(CMD, SYNOPSIS, opts, NOTES, argc - 1, argv + 1);
    if (rc) return rc;
    o->len_set = input_set || shared_set;
    if (!o->url) {
        fprintf(stderr, "moe8 " CMD ": --url is required (moe8 bench serve -h lists the flags)\n");
        return 2;
    }
    if (o->prompt_file && o->len_set) {
        fprintf(stderr, "moe8 " CMD ": --input-len and --shared-prefix are for synthetic prompts, "
                        "not --prompt-file\n");
        return 2;
    }
    if (o->json_schema && o->json_object) {
        fprintf(stderr, "moe8 " CMD ": --json-schema and --json-object both set response_format: "
                        "give one\n");
        return 2;
    }
    if (o->shared_prefix > o->input_len) {
        fprintf(stderr, "moe8 " CMD ": --shared-prefix %d is longer than --input-len %d\n",
                o->shared_prefix, o->input_len);
        return 2;
    }
    if (o->api_key && (strpbrk(o->api_key, "\r\n") || strlen(o->api_key) > 4096)) {
        fprintf(stderr, "moe8 " CMD ": --api-key: expected at most 4096 bytes on one line\n");
        return 2;
    }
    return 0;
}

/* ---- prompts --------------------------------------------------------------- */

static const char *const words[N_WORDS] = {
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by",
    "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an",
    "had", "they", "you", "were", "their", "one", "all", "we", "can", "her", "has", "there",
    "been", "if", "more", "when", "will", "would", "who", "so", "no", "she", "other", "its", "may",
    "these", "what", "them", "than", "some", "him", "time", "into", "only", "do", "out", "could",
    "new", "about", "two", "first", "then", "also", "any", "like", "my", "now", "over", "such",
    "our", "man", "me", "even", "most", "made", "after", "many", "said", "did", "where", "must",
    "way", "years", "through", "back", "much", "before", "your", "good", "well", "down", "work",
    "should", "because", "each", "just", "those", "people", "how", "too", "little", "state",
    "very", "make", "world", "still", "own", "see", "men", "long", "here", "get", "both",
    "between", "life", "being", "under", "never", "day", "same", "another", "know", "while",
    "last", "might", "us", "great", "old", "year", "off", "come", "since", "against", "go", "came",
    "right", "used", "take", "three", "small", "house", "place", "found", "part", "water", "home",
    "light", "name", "city", "again", "point", "number", "hand", "high", "every", "left", "end",
    "form", "war", "few", "power", "school", "group", "body", "land", "night", "open", "road",
    "tree", "book", "line", "music", "river", "green", "table", "paper", "letter", "money",
    "story", "young", "word", "family", "black", "white", "order", "field", "early", "free",
    "case", "week", "car", "room", "door", "head", "face", "mind", "voice", "girl", "boy", "king",
    "art", "sea", "sun", "fire", "air", "eye", "game", "love", "food", "real", "blue", "red",
    "south", "north", "east", "west", "stone", "horse", "bird", "ship", "star", "moon", "rain",
    "snow", "wind", "glass", "gold", "iron", "wood", "dog", "bread", "salt", "tea", "song",
    "dance", "film", "news", "model", "train", "plan", "test", "rule", "rock", "hill", "lake",
    "farm", "shop", "bank", "club"};

typedef struct {
    char **lines;    /* --prompt-file: the lines (into data) */
    int n_lines;
    char *data;
    int64_t *n_words; /* words per line: the input tokens when the server reports none */
} prompt_set;

/* Prompt i of the synthetic set, into *buf (grown as needed); NULL on no memory. */
static char *synth_prompt(const serve_opts *o, int i, char **buf, size_t *cap) {
    const size_t need = (size_t)o->input_len * 8 + 1; /* longest word 7 + a space */
    uint64_t shared = o->seed ^ 0x5851f42d4c957f2dULL;
    uint64_t own = o->seed + 0x9e3779b9ULL * (uint64_t)(i + 1);
    uint32_t digits = (uint32_t)i;
    char *p;
    if (*cap < need) {
        char *nb = realloc(*buf, need);
        if (!nb) return NULL;
        *buf = nb, *cap = need;
    }
    p = *buf;
    for (int k = 0; k < o->input_len; k++) {
        const char *w;
        if (k < o->shared_prefix) w = words[splitmix(&shared) % N_WORDS];
        else if (k < o->shared_prefix + 3) w = words[digits % N_WORDS], digits /= N_WORDS;
        else w = words[splitmix(&own) % N_WORDS];
        if (k) *p++ = ' ';
        p = stpcpy(p, w);
    }
    return *buf;
}

/* Words that tell every one of n prompts apart: ceil(log256 n). */
static int index_words(int n) {
    int d = 0;
    for (int64_t span = 1; span < n; span *= N_WORDS) d++;
    return d;
}

static int read_prompts(const serve_opts *o, prompt_set *ps) {
    moe8_error err;
    size_t len;
    char *p, *end;
    int cap = 0;
    if (moe8_read_file(o->prompt_file, MAX_PROMPT_FILE, &ps->data, &len, &err))
        return cli_fail(CMD, &err);
    if (memchr(ps->data, '\0', len)) {
        fprintf(stderr, "moe8 " CMD ": --prompt-file '%s' contains a NUL byte\n", o->prompt_file);
        return 2;
    }
    for (p = ps->data, end = ps->data + len; p < end;) {
        char *nl = memchr(p, '\n', (size_t)(end - p)), *e = nl ? nl : end;
        char *line = p;
        p = nl ? nl + 1 : end;
        if (e > line && e[-1] == '\r') e--;
        *e = '\0'; /* end is data[len], the terminator moe8_read_file adds */
        if (e == line) continue;
        if (ps->n_lines == cap) {
            int nc = cap ? 2 * cap : 1024;
            char **nl2 = realloc(ps->lines, (size_t)nc * sizeof *nl2);
            int64_t *nw = realloc(ps->n_words, (size_t)nc * sizeof *nw);
            if (nl2) ps->lines = nl2;
            if (nw) ps->n_words = nw;
            if (!nl2 || !nw) {
                fprintf(stderr, "moe8 " CMD ": out of memory reading '%s'\n", o->prompt_file);
                return 1;
            }
            cap = nc;
        }
        int64_t nw = 0;
        for (const char *q = line; *q; q++)
            if (*q != ' ' && *q != '\t' && (q == line || q[-1] == ' ' || q[-1] == '\t')) nw++;
        ps->lines[ps->n_lines] = line;
        ps->n_words[ps->n_lines++] = nw;
    }
    if (!ps->n_lines) {
        fprintf(stderr, "moe8 " CMD ": --prompt-file '%s' has no non-empty line\n", o->prompt_file);
        return 2;
    }
    return 0;
}

static void free_prompts(prompt_set *ps) {
    free(ps->lines);
    free(ps->n_words);
    free(ps->data);
}

/* --json-schema's file: a JSON Schema (an object, or true / false). */
static int read_schema(serve_opts *o) {
    moe8_error err;
    size_t len;
    char *data = NULL;
    const char *at = NULL;
    if (moe8_read_file(o->json_schema, MAX_SCHEMA_FILE, &data, &len, &err)) {
        cli_fail(CMD, &err);
        return 2;
    }
    o->schema = cJSON_ParseWithLengthOpts(data, len + 1, &at, 1); /* + its NUL: nothing after the value */
    if (!o->schema)
        fprintf(stderr, "moe8 " CMD ": --json-schema '%s': not one JSON value (at byte %td: '%.20s')\n",
                o->json_schema, at ? at - data : (ptrdiff_t)0, at ? at : "");
    else if (!cJSON_IsObject(o->schema) && !cJSON_IsBool(o->schema))
        fprintf(stderr, "moe8 " CMD ": --json-schema '%s': expected a JSON Schema (an object)\n",
                o->json_schema);
    free(data);
    if (o->schema && (cJSON_IsObject(o->schema) || cJSON_IsBool(o->schema))) return 0;
    cJSON_Delete(o->schema);
    o->schema = NULL;
    return 2;
}

/* response_format of --json-schema / --json-object into j (0, or -1 on no memory). */
static int add_response_format(const serve_opts *o, cJSON *j) {
    cJSON *rf, *js;
    if (!o->schema && !o->json_object) return 0;
    if (!(rf = cJSON_AddObjectToObject(j, "response_format"))) return -1;
    if (o->json_object) return cJSON_AddStringToObject(rf, "type", "json_object") ? 0 : -1;
    if (!cJSON_AddStringToObject(rf, "type", "json_schema") || !(js = cJSON_AddObjectToObject(rf, "json_schema")) ||
        !cJSON_AddStringToObject(js, "name", "bench") || !cJSON_AddBoolToObject(js, "strict", 1))
        return -1;
    return cJSON_AddItemToObject(js, "schema", cJSON_Duplicate(o->schema, 1)) ? 0 : -1;
}

/* The JSON body of request i; NULL on no memory. */
static char *request_body(const serve_opts *o, const char *model, const char *prompt) {
    cJSON *j = cJSON_CreateObject(), *so = cJSON_CreateObject();
    char *s = NULL;
    if (!j || !so) goto done;
    cJSON_AddStringToObject(j, "model", model);
    if (o->chat) {
        cJSON *msgs = cJSON_AddArrayToObject(j, "messages"), *m = cJSON_CreateObject();
        if (!msgs || !m) {
            cJSON_Delete(m);
            goto done;
        }
        cJSON_AddItemToArray(msgs, m);
        cJSON_AddStringToObject(m, "role", "user");
        cJSON_AddStringToObject(m, "content", prompt);
    } else {
        cJSON_AddStringToObject(j, "prompt", prompt);
    }
    cJSON_AddNumberToObject(j, "max_tokens", o->output_len);
    cJSON_AddNumberToObject(j, "temperature", 0);
    cJSON_AddBoolToObject(j, "ignore_eos", 1);
    cJSON_AddBoolToObject(j, "stream", 1);
    cJSON_AddBoolToObject(so, "include_usage", 1);
    cJSON_AddItemToObject(j, "stream_options", so);
    so = NULL;
    if (add_response_format(o, j)) goto done;
    s = cJSON_PrintUnformatted(j);
done:
    cJSON_Delete(so);
    cJSON_Delete(j);
    return s;
}

/* ---- one request ------------------------------------------------------------ */

typedef struct request {
    int index;
    CURL *h;
    char *body;
    char errbuf[CURL_ERROR_SIZE];
    double t_send, t_first, t_last, t_done; /* monotonic s; t_first = 0: no text yet */
    int64_t n_events, n_text;               /* data: lines, those with text */
    int64_t prompt_tokens, completion_tokens; /* -1: no usage seen */
    int64_t cached_tokens;      /* usage.prompt_tokens_details.cached_tokens (-1: not given) */
    long status;                            /* HTTP status; 0 until the body starts */
    int done;                               /* data: [DONE] seen */
    int fail;                               /* FAIL_* */
    char msg[512];                          /* the failure */
    char *buf;                              /* bytes of an unfinished line, or an error body */
    size_t len, cap;
    float *itl;                             /* [n_text - 1] gaps, s */
    size_t n_itl, cap_itl;
    int64_t max_text;                       /* more text events than this: malformed */
    int max_tokens, chat;
    struct request *prev, *next;            /* the requests in flight */
} request;

/* The first failure of a request stays; later ones are its consequences. */
__attribute__((format(printf, 3, 4))) static void req_fail(request *r, int kind, const char *fmt,
                                                           ...) {
    va_list ap;
    if (r->fail) return;
    r->fail = kind;
    va_start(ap, fmt);
    vsnprintf(r->msg, sizeof r->msg, fmt, ap);
    va_end(ap);
}

static int push_itl(request *r, double gap) {
    if (r->n_itl == r->cap_itl) {
        size_t nc = r->cap_itl ? 2 * r->cap_itl : 256;
        float *n = realloc(r->itl, nc * sizeof *n);
        if (!n) return -1;
        r->itl = n, r->cap_itl = nc;
    }
    r->itl[r->n_itl++] = (float)gap;
    return 0;
}

static const char *text_of(const cJSON *c0, int chat) {
    if (!chat) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(c0, "text");
        return cJSON_IsString(t) && t->valuestring[0] ? t->valuestring : NULL;
    }
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(c0, "delta");
    const char *keys[] = {"content", "reasoning_content"};
    for (int k = 0; k < 2; k++) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(d, keys[k]);
        if (cJSON_IsString(t) && t->valuestring[0]) return t->valuestring;
    }
    return NULL;
}

/* One `data:` payload that arrived at time t. */
static void on_event(request *r, const char *s, size_t n, double t) {
    char shown[160];
    cJSON *j, *e, *ch, *u;
    if (n == 6 && !memcmp(s, "[DONE]", 6)) {
        r->done = 1, r->t_done = t;
        return;
    }
    if (!(j = cJSON_ParseWithLength(s, n))) {
        snprintf(shown, sizeof shown, "%.*s", (int)(n < 120 ? n : 120), s);
        req_fail(r, FAIL_STREAM, "malformed stream: an event is not JSON: '%s'", shown);
        return;
    }
    if ((e = cJSON_GetObjectItemCaseSensitive(j, "error")) && !cJSON_IsNull(e)) {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(e, "message");
        char *p = cJSON_IsString(m) ? NULL : cJSON_PrintUnformatted(e);
        snprintf(shown, sizeof shown, "%s", p ? p : cJSON_IsString(m) ? m->valuestring : "?");
        free(p);
        req_fail(r, FAIL_STREAM, "error event in the stream: %s", shown);
    }
    ch = cJSON_GetObjectItemCaseSensitive(j, "choices");
    if (cJSON_IsArray(ch) && cJSON_GetArraySize(ch) > 0 &&
        text_of(cJSON_GetArrayItem(ch, 0), r->chat)) {
        if (r->n_text++ == 0) r->t_first = t;
        else if (push_itl(r, t - r->t_last)) req_fail(r, FAIL_STREAM, "%s", "out of memory");
        r->t_last = t;
        if (r->n_text > r->max_text)
            req_fail(r, FAIL_STREAM,
                     "malformed stream: more than %lld text events for max_tokens %d",
                     (long long)r->max_text, r->max_tokens);
    }
    if (cJSON_IsObject(u = cJSON_GetObjectItemCaseSensitive(j, "usage"))) {
        const cJSON *pt = cJSON_GetObjectItemCaseSensitive(u, "prompt_tokens");
        const cJSON *ct = cJSON_GetObjectItemCaseSensitive(u, "completion_tokens");
        if (cJSON_IsNumber(pt) && pt->valuedouble >= 0) r->prompt_tokens = (int64_t)pt->valuedouble;
        if (cJSON_IsNumber(ct) && ct->valuedouble >= 0)
            r->completion_tokens = (int64_t)ct->valuedouble;
        {
            const cJSON *d = cJSON_GetObjectItemCaseSensitive(u, "prompt_tokens_details");
            const cJSON *c = d ? cJSON_GetObjectItemCaseSensitive(d, "cached_tokens") : NULL;
            if (cJSON_IsNumber(c) && c->valuedouble >= 0) r->cached_tokens = (int64_t)c->valuedouble;
        }
    }
    cJSON_Delete(j);
}

/* One SSE line (no line break): `data: x` is an event; comments, event:, id:,
 * retry: and blank lines carry nothing we time. */
static void on_line(request *r, char *s, size_t n, double t) {
    if (n && s[n - 1] == '\r') n--;
    if (n < 5 || memcmp(s, "data:", 5)) return;
    s += 5, n -= 5;
    if (n && *s == ' ') s++, n--;
    r->n_events++;
    on_event(r, s, n, t);
}

static int grow(request *r, size_t need) {
    if (need <= r->cap) return 0;
    size_t nc = r->cap ? r->cap : 4096;
    while (nc < need) nc *= 2;
    char *nb = realloc(r->buf, nc);
    if (!nb) return -1;
    r->buf = nb, r->cap = nc;
    return 0;
}

/* CURLOPT_WRITEFUNCTION: the body as it arrives. Returning less than given
 * aborts the transfer (after a failure, nothing more is needed). */
static size_t on_body(char *p, size_t size, size_t nmemb, void *user) {
    request *r = user;
    const size_t n = size * nmemb;
    const double t = moe8_time_s();
    size_t start = 0;
    if (!r->status) curl_easy_getinfo(r->h, CURLINFO_RESPONSE_CODE, &r->status);
    if (r->status / 100 != 2) { /* keep the head of the error body for the message */
        size_t keep = r->len + n > MAX_ERR_BODY ? MAX_ERR_BODY - r->len : n;
        if (keep && !grow(r, r->len + keep + 1)) memcpy(r->buf + r->len, p, keep), r->len += keep;
        return n;
    }
    if (r->fail) return 0;
    if (grow(r, r->len + n + 1)) {
        req_fail(r, FAIL_STREAM, "%s", "out of memory");
        return 0;
    }
    memcpy(r->buf + r->len, p, n);
    r->len += n;
    for (size_t i = r->len - n; i < r->len && !r->fail; i++)
        if (r->buf[i] == '\n') {
            on_line(r, r->buf + start, i - start, t);
            start = i + 1;
        }
    memmove(r->buf, r->buf + start, r->len - start);
    r->len -= start;
    if (r->len > MAX_LINE)
        req_fail(r, FAIL_STREAM, "malformed stream: a line over %zu MiB", MAX_LINE >> 20);
    return r->fail ? 0 : n;
}

/* ---- the benchmark ---------------------------------------------------------- */

typedef struct {
    double *ttft, *tpot, *e2el; /* [n_ok], [n_tpot], [n_ok] in s */
    int n_ok, n_tpot, n_failed, n_by[N_FAIL];
    float *itl;
    size_t n_itl, cap_itl;
    int64_t in_tokens, out_tokens, cached_tokens;
    int no_cached;              /* some request's usage had no cached_tokens */
    int no_usage_in, no_usage_out; /* some request's counts were estimated */
    int printed_error, peak;
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

static int start_request(bench *b, int i, double t) {
    request *r = calloc(1, sizeof *r);
    const char *prompt = b->ps->n_lines ? b->ps->lines[i % b->ps->n_lines]
                                        : synth_prompt(b->o, i, &b->pbuf, &b->pcap);
    if (!r || !prompt || !(r->body = request_body(b->o, b->model, prompt)) ||
        !(r->h = curl_easy_init())) {
        if (r) free(r->body);
        free(r);
        fprintf(stderr, "moe8 " CMD ": out of memory starting request %d\n", i);
        return 1;
    }
    r->index = i, r->t_send = t, r->chat = b->o->chat;
    r->prompt_tokens = r->completion_tokens = r->cached_tokens = -1;
    r->max_tokens = b->o->output_len;
    r->max_text = 2 * (int64_t)b->o->output_len + 16;
    CURL *h = r->h;
    curl_easy_setopt(h, CURLOPT_URL, b->endpoint);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, b->headers);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, r->body);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(r->body));
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(h, CURLOPT_PRIVATE, r);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, r->errbuf);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)(b->o->timeout_s * 1000.0));
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(h, CURLOPT_PROXY, ""); /* only ever the URL given, never $http_proxy */
    if (curl_multi_add_handle(b->multi, h) != CURLM_OK) {
        fprintf(stderr, "moe8 " CMD ": cannot start request %d\n", i);
        curl_easy_cleanup(h);
        free(r->body);
        free(r);
        return 1;
    }
    r->next = b->live;
    if (b->live) b->live->prev = r;
    b->live = r;
    return 0;
}

static void free_request(bench *b, request *r) {
    if (r->prev) r->prev->next = r->next;
    else b->live = r->next;
    if (r->next) r->next->prev = r->prev;
    curl_multi_remove_handle(b->multi, r->h);
    curl_easy_cleanup(r->h);
    free(r->body);
    free(r->buf);
    free(r->itl);
    free(r);
}

static int push_res_itl(results *s, const request *r) {
    if (s->n_itl + r->n_itl > s->cap_itl) {
        size_t nc = s->cap_itl ? s->cap_itl : 4096;
        while (nc < s->n_itl + r->n_itl) nc *= 2;
        float *n = realloc(s->itl, nc * sizeof *n);
        if (!n) return -1;
        s->itl = n, s->cap_itl = nc;
    }
    if (r->n_itl) memcpy(s->itl + s->n_itl, r->itl, r->n_itl * sizeof *r->itl);
    s->n_itl += r->n_itl;
    return 0;
}

/* A transfer ended with `code`: classify, record, free. */
static void finish_request(bench *b, request *r, CURLcode code, double t) {
    results *s = &b->res;
    if (!r->status) curl_easy_getinfo(r->h, CURLINFO_RESPONSE_CODE, &r->status);
    if (code == CURLE_OK && r->status / 100 == 2 && r->len && !r->fail)
        on_line(r, r->buf, r->len, t); /* a last line without its line break */
    if (code == CURLE_OK && r->status / 100 != 2) {
        char head[MAX_ERR_BODY + 1];
        snprintf(head, sizeof head, "%.*s", (int)r->len, r->buf ? r->buf : "");
        r->fail = 0;
        snprintf(r->msg, sizeof r->msg, "HTTP %ld: %.480s", r->status, head);
        r->fail = FAIL_HTTP;
    } else if (code == CURLE_OPERATION_TIMEDOUT) {
        r->fail = 0;
        snprintf(r->msg, sizeof r->msg, "timed out after %g s (--timeout): %s", b->o->timeout_s,
                 r->errbuf[0] ? r->errbuf : curl_easy_strerror(code));
        r->fail = FAIL_TIMEOUT;
    } else if (code != CURLE_OK && !r->fail) {
        req_fail(r, FAIL_CONNECT, "%s", r->errbuf[0] ? r->errbuf : curl_easy_strerror(code));
    } else if (!r->fail && !r->n_events) {
        req_fail(r, FAIL_STREAM, "not a stream: no data: line in the answer (stream ignored?)");
    } else if (!r->fail && !r->done) {
        req_fail(r, FAIL_STREAM, "malformed stream: it ended before data: [DONE]");
    } else if (!r->fail && !r->n_text) {
        req_fail(r, FAIL_STREAM, "malformed stream: no event carried text");
    }
    if (!r->fail && push_res_itl(s, r)) req_fail(r, FAIL_STREAM, "%s", "out of memory");
    if (r->fail) {
        s->n_failed++, s->n_by[r->fail]++;
        if (!s->printed_error++)
            fprintf(stderr, "moe8 " CMD ": request %d failed (%s): %s\n", r->index,
                    fail_name[r->fail], r->msg);
    } else {
        const int64_t out = r->completion_tokens >= 0 ? r->completion_tokens : r->n_text;
        int64_t in = r->prompt_tokens;
        s->no_usage_in |= in < 0, s->no_usage_out |= r->completion_tokens < 0;
        if (in < 0)
            in = b->ps->n_lines ? b->ps->n_words[r->index % b->ps->n_lines] : b->o->input_len;
        const double ttft = r->t_first - r->t_send, e2el = r->t_done - r->t_send;
        s->ttft[s->n_ok] = ttft;
        s->e2el[s->n_ok++] = e2el;
        if (out > 1) s->tpot[s->n_tpot++] = (e2el - ttft) / (double)(out - 1);
        s->in_tokens += in, s->out_tokens += out;
        if (r->cached_tokens >= 0) s->cached_tokens += r->cached_tokens;
        else s->no_cached = 1;
    }
    free_request(b, r);
}

/* Runs every request; returns 0 or 1 on an internal error (not on failed requests). */
static int run(bench *b, double *duration) {
    const serve_opts *o = b->o;
    const int n = o->n_prompts;
    const int cap = o->max_concurrency && o->max_concurrency < n ? o->max_concurrency : n;
    uint64_t rng = o->seed ^ 0xa0761d6478bd642fULL;
    double next_at = 0.0; /* arrival of request `next`, s after t0 */
    int next = 0, in_flight = 0, n_done = 0, last_pct = 0;
    const double t0 = moe8_time_s();
    while (n_done < n) {
        int still;
        CURLMsg *m;
        double t = moe8_time_s();
        while (next < n && in_flight < cap && next_at <= t - t0) {
            if (start_request(b, next, t)) return 1;
            next++, in_flight++;
            if (in_flight > b->res.peak) b->res.peak = in_flight;
            if (isfinite(o->request_rate)) { /* exponential gap: -ln(U) / R, U in (0, 1] */
                const double u = ((double)(splitmix(&rng) >> 11) + 1.0) / 9007199254740992.0;
                next_at += -log(u) / o->request_rate;
            }
        }
        if (curl_multi_perform(b->multi, &still) != CURLM_OK) {
            fprintf(stderr, "moe8 " CMD ": curl_multi_perform failed\n");
            return 1;
        }
        t = moe8_time_s();
        while ((m = curl_multi_info_read(b->multi, &still)))
            if (m->msg == CURLMSG_DONE) {
                request *r;
                CURLcode code = m->data.result;
                curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&r);
                finish_request(b, r, code, t);
                in_flight--, n_done++;
                *duration = t - t0;
            }
        if (n_done * 10 / n > last_pct && n_done < n) {
            last_pct = n_done * 10 / n;
            fprintf(stderr, "moe8 " CMD ": %d/%d done (%d failed), %.1f s\n", n_done, n,
                    b->res.n_failed, t - t0);
        }
        if (n_done == n) break;
        int wait_ms = 1000; /* curl's own timers and any socket activity end it sooner */
        if (next < n && in_flight < cap) {
            const double dt = next_at - (moe8_time_s() - t0);
            wait_ms = dt <= 0 ? 0 : dt < 1.0 ? (int)ceil(dt * 1000.0) : 1000;
        }
        if (curl_multi_poll(b->multi, NULL, 0, wait_ms, NULL) != CURLM_OK) {
            fprintf(stderr, "moe8 " CMD ": curl_multi_poll failed\n");
            return 1;
        }
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
        fprintf(stderr, "moe8 " CMD ": GET %s: %s (or pass --model)\n", url,
                errbuf[0] ? errbuf : curl_easy_strerror(code));
        goto done;
    }
    if (status != 200) {
        fprintf(stderr, "moe8 " CMD ": GET %s: HTTP %ld: %.300s (or pass --model)\n", url, status,
                mb.data ? mb.data : "");
        goto done;
    }
    j = cJSON_ParseWithLength(mb.data ? mb.data : "", mb.len);
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(j, "data");
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(d, 0), "id");
    if (!cJSON_IsArray(d) || !cJSON_IsString(id)) {
        fprintf(stderr, "moe8 " CMD ": GET %s: no data[0].id in the answer (or pass --model)\n",
                url);
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
    fprintf(stderr, "moe8 " CMD ": %d requests in flight need %llu open files, the limit is %llu "
                    "(ulimit -n): pass --max-concurrency %llu or less\n", in_flight,
            (unsigned long long)need, (unsigned long long)rl.rlim_max,
            (unsigned long long)(rl.rlim_max > 64 ? rl.rlim_max - 64 : 1));
    return 2;
}

/* ---- the table ------------------------------------------------------------------ */

/* p-th percentile of sorted v[n], linear between ranks (numpy's default). */
static double pct(const double *v, size_t n, double p) {
    const double rank = p / 100.0 * (double)(n - 1);
    const size_t lo = (size_t)rank, hi = lo + 1 < n ? lo + 1 : lo;
    return v[lo] + (rank - (double)lo) * (v[hi] - v[lo]);
}

#define ROW(label, fmt, ...) printf("%-40s " fmt "\n", label, __VA_ARGS__)

/* Mean, median and p99 in ms of v[n] (sorted here); "-" when n = 0. */
static void print_stat(const char *title, const char *name, double *v, size_t n) {
    static const char *const what[3] = {"Mean", "Median", "P99"};
    double x[3], sum = 0.0;
    printf("%s\n", title);
    if (n) {
        qsort(v, n, sizeof *v, cli_cmp_double);
        for (size_t i = 0; i < n; i++) sum += v[i];
        x[0] = sum / (double)n, x[1] = pct(v, n, 50), x[2] = pct(v, n, 99);
    }
    for (int k = 0; k < 3; k++) {
        char label[64];
        snprintf(label, sizeof label, "%s %s (ms):", what[k], name);
        if (n) ROW(label, "%.2f", 1e3 * x[k]);
        else ROW(label, "%s", "-");
    }
}

static void print_results(bench *b, double dur) {
    const serve_opts *o = b->o;
    results *s = &b->res;
    char fail[128] = "", rate[32], conc[32];
    double *itl = NULL;
    snprintf(rate, sizeof rate, isfinite(o->request_rate) ? "%g" : "inf", o->request_rate);
    snprintf(conc, sizeof conc, o->max_concurrency ? "%d" : "none", o->max_concurrency);
    if (s->n_failed)
        snprintf(fail, sizeof fail, " (HTTP %d, timeout %d, connection %d, stream %d)",
                 s->n_by[FAIL_HTTP], s->n_by[FAIL_TIMEOUT], s->n_by[FAIL_CONNECT],
                 s->n_by[FAIL_STREAM]);
    if (dur <= 0) dur = 1e-9;
    printf("============ Serving Benchmark Result ============\n");
    ROW("Endpoint:", "%s", b->endpoint);
    ROW("Seed:", "%llu", (unsigned long long)b->o->seed);
    ROW("Model:", "%s", b->model);
    if (o->json_schema || o->json_object)
        ROW("Structured output:", "%s%s", o->json_object ? "json_object" : "json_schema ", o->json_object ? "" : o->json_schema);
    ROW("Traffic request rate (req/s):", "%s", rate);
    ROW("Max request concurrency:", "%s", conc);
    ROW("Peak concurrent requests:", "%d", s->peak);
    ROW("Successful requests:", "%d", s->n_ok);
    ROW("Failed requests:", "%d%s", s->n_failed, fail);
    ROW("Benchmark duration (s):", "%.2f", dur);
    ROW("Total input tokens:", "%lld%s", (long long)s->in_tokens,
        s->no_usage_in ? " (some counted as words: no usage from the server)" : "");
    ROW("Cached input tokens:", "%lld%s", (long long)s->cached_tokens,
        s->no_cached ? " (some requests' usage had no cached_tokens)" : "");
    ROW("Total generated tokens:", "%lld%s", (long long)s->out_tokens,
        s->no_usage_out ? " (some counted as text events: no usage from the server)" : "");
    ROW("Request throughput (req/s):", "%.2f", s->n_ok / dur);
    ROW("Output token throughput (tok/s):", "%.2f", (double)s->out_tokens / dur);
    ROW("Total token throughput (tok/s):", "%.2f", (double)(s->in_tokens + s->out_tokens) / dur);
    print_stat("---------------Time to First Token----------------", "TTFT", s->ttft,
               (size_t)s->n_ok);
    print_stat("-----Time per Output Token (excl. 1st token)------", "TPOT", s->tpot,
               (size_t)s->n_tpot);
    /* ITLs are kept as float to halve their memory; sorted in place, read as double. */
    if (s->n_itl && (itl = malloc(s->n_itl * sizeof *itl))) {
        qsort(s->itl, s->n_itl, sizeof *s->itl, cli_cmp_float);
        for (size_t i = 0; i < s->n_itl; i++) itl[i] = s->itl[i];
    }
    print_stat("---------------Inter-token Latency----------------", "ITL", itl,
               itl ? s->n_itl : 0);
    print_stat("----------------End-to-end Latency----------------", "E2EL", s->e2el,
               (size_t)s->n_ok);
    printf("==================================================\n");
    free(itl);
}

/* ---- the command ------------------------------------------------------------------ */

int cmd_bench_serve(int argc, char **argv) {
    serve_opts o;
    prompt_set ps = {0};
    bench b = {0};
    char *base = NULL, *model = NULL, *endpoint = NULL, auth[4096 + 32];
    double dur = 0.0;
    int rc = parse_opts(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc; /* -1: -h */
    if ((rc = check_url(o.url, &base))) return rc;
    if (!o.seed_set) { /* a fresh run: other prompts, so no prefix cache hides the cost */
        if (getrandom(&o.seed, sizeof o.seed, GRND_NONBLOCK) != (ssize_t)sizeof o.seed)
            o.seed = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull;
        o.seed >>= 1; /* printable as a signed number too */
    }
    if (o.prompt_file && (rc = read_prompts(&o, &ps))) goto done;
    if (o.json_schema && (rc = read_schema(&o))) goto done;
    if (o.prompt_file && !o.n_set) o.n_prompts = ps.n_lines;
    if (!o.prompt_file && o.input_len - o.shared_prefix < index_words(o.n_prompts)) {
        fprintf(stderr, "moe8 " CMD ": %d distinct prompts need %d words after --shared-prefix; "
                "--input-len %d leaves %d\n", o.n_prompts, index_words(o.n_prompts), o.input_len,
                o.input_len - o.shared_prefix);
        rc = 2;
        goto done;
    }
    if ((int64_t)o.n_prompts * o.output_len > MAX_TOKENS_TOTAL) {
        fprintf(stderr, "moe8 " CMD ": -n %d x --output-len %d is over %lld tokens\n",
                o.n_prompts, o.output_len, (long long)MAX_TOKENS_TOTAL);
        rc = 2;
        goto done;
    }
    if ((rc = check_fd_limit(o.max_concurrency && o.max_concurrency < o.n_prompts
                                 ? o.max_concurrency : o.n_prompts)))
        goto done;
    rc = 1;
    if (curl_global_init(CURL_GLOBAL_DEFAULT)) {
        fprintf(stderr, "moe8 " CMD ": cannot initialise libcurl\n");
        goto done;
    }
    b.o = &o, b.ps = &ps;
    b.headers = curl_slist_append(NULL, "Content-Type: application/json");
    b.headers = curl_slist_append(b.headers, "Accept: text/event-stream");
    b.headers = curl_slist_append(b.headers, "Expect:"); /* no 100-continue round trip */
    if (o.api_key) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", o.api_key);
        b.headers = curl_slist_append(b.headers, auth);
    }
    if (!b.headers) goto cleanup;
    if (o.model) model = strdup(o.model);
    else if (first_model(&o, base, b.headers, &model)) goto cleanup;
    if (!model || !(endpoint = malloc(strlen(base) + 32))) goto cleanup;
    sprintf(endpoint, "%s/v1/%s", base, o.chat ? "chat/completions" : "completions");
    b.endpoint = endpoint, b.model = model;
    b.res.ttft = malloc((size_t)o.n_prompts * sizeof(double));
    b.res.tpot = malloc((size_t)o.n_prompts * sizeof(double));
    b.res.e2el = malloc((size_t)o.n_prompts * sizeof(double));
    if (!b.res.ttft || !b.res.tpot || !b.res.e2el || !(b.multi = curl_multi_init())) {
        fprintf(stderr, "moe8 " CMD ": out of memory\n");
        goto cleanup;
    }
    fprintf(stderr, "moe8 " CMD ": %d requests to %s (model %s), %g requests/s, at most %d in "
            "flight\n", o.n_prompts, endpoint, model, o.request_rate,
            o.max_concurrency && o.max_concurrency < o.n_prompts ? o.max_concurrency : o.n_prompts);
    if (!run(&b, &dur)) {
        print_results(&b, dur);
        rc = b.res.n_failed ? 1 : 0;
    }
cleanup:
    while (b.live) free_request(&b, b.live); /* left in flight by an internal error */
    if (b.multi) curl_multi_cleanup(b.multi);
    curl_slist_free_all(b.headers);
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
    free_prompts(&ps);
    cJSON_Delete(o.schema);
    return rc;
}
