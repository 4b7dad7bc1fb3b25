/*
 * server.h — internal: `moe8 serve`, an OpenAI-compatible HTTP front end on
 * the scheduler (libmoe8_server: sockets and threads; libmoe8 never serves).
 *
 *   http.c     the HTTP/1.1 server: one epoll thread for every socket
 *              (limits, timeouts, bodies, disconnects, access log) and a
 *              small pool of workers for CPU work; http_route.c decides a
 *              head (auth, routing) and hands its body to the endpoint's
 *              row, http_out.c writes answers and SSE (http_impl.h)
 *   endpoints.c  the endpoint table: method, path, auth, parser, emitters
 *   http_parse.c  strict request framing (RFC 9112), pure functions
 *   openai.c   OpenAI JSON shared by the APIs: requests -> jobs (validated),
 *              events -> chunks and responses; one file per API beside it
 *              (api_chat.c, api_completions.c, api_tokenize.c; api.h;
 *              the Responses API: api_responses.c, responses_out.c,
 *              responses_store.c, responses.h; Anthropic's Messages API:
 *              api_messages.c, translated into a chat request)
 *   engine.c   the scheduler thread: jobs -> moe8_sched, events -> jobs,
 *              under TP every step's adds and cancels broadcast by rank 0
 *   metrics.c  Prometheus counters, gauges and histograms (vLLM's names)
 *
 * Threads: the HTTP thread reads and frames requests and writes answers,
 * never blocking and never doing CPU work of a request's size; a worker
 * parses, validates, tokenizes and renders a request into a job; the engine
 * thread (the caller of moe8_serve, which also does all MPI) owns the
 * scheduler and writes each job's output, then tells the HTTP thread
 * (moe8_http_notify). One mutex (the server's `lock`) guards every job's shared
 * fields and the queues.
 * Nothing below sched/ knows HTTP exists.
 */
#ifndef MOE8_SERVER_H
#define MOE8_SERVER_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "core/public.h"
#include "core/buf.h"
#include "io/json_util.h" /* moe8_json_type_name for messages */



/* ---- metrics (metrics.c) ------------------------------------------------------- */

#define SRV_HIST_MAX 24

typedef struct {
    int n;                          /* buckets */
    const double *le;               /* [n] upper bounds */
    uint64_t count[SRV_HIST_MAX + 1]; /* [n + 1] (last: +Inf) */
    double sum;
    uint64_t total;
} srv_hist;

typedef struct {
    uint64_t prompt_tokens, generation_tokens;
    uint64_t success_stop, success_length, success_abort;
    uint64_t prefix_hits, prefix_queries;
    moe8_prompt_cache_stats disk;   /* the prompt cache's disk tier (enabled 0: not shown) */
    int32_t running, waiting;
    double kv_usage;
    /* hybrid models (state_slots > 0): the recurrent-state pool (moe8_kv_stats) */
    int32_t state_slots, state_used;      /* slots; held by sequences or snapshots */
    uint64_t state_snap_bytes, state_bytes; /* snapshots' bytes; the pool's (their limit) */
    uint64_t snap_hits, snap_misses, snap_evictions;
    srv_hist ttft, itl, e2e;
} srv_metrics;

void moe8_metrics_init(srv_metrics *m);
/* Prometheus text exposition of m. */
int moe8_metrics_render(const srv_metrics *m, const char *model, moe8_buf *out);
void moe8_hist_observe(srv_hist *h, double v);

/* ---- jobs ------------------------------------------------------------------------ */

typedef enum { JOB_COMPLETION = 0, JOB_CHAT = 1 } job_kind;

#define SRV_MAX_N 16      /* choices of one request (n) */
#define SRV_MAX_TOOLS 128 /* tools of one request */

/* One choice of a request is one job; a request of n choices has n jobs
 * (choice i samples with seed + i, as vLLM), the first the leader: the
 * others enter the scheduler once the leader's prompt is computed, so they
 * take its KV from the prefix cache. */
typedef struct job {
    /* set by the HTTP thread before queuing; read-only afterwards */
    job_kind kind;
    const struct oa_api *api;   /* its API's hooks (api.h) */
    int stream, include_usage;
    int32_t *prompt, n_prompt;
    moe8_request rq;            /* prompt, stop strings point into this job */
    char *stop_store[MOE8_MAX_STOP_STRINGS];
    int chat_logprobs;          /* chat: logprobs true */
    int index, n_choices;       /* choice index; the request's n */
    struct job *kids[SRV_MAX_N - 1]; /* leader: choices 1.. not in the scheduler yet (the
                                 * engine's references to them) */
    int n_kids;
    struct srv_grammar *grammar; /* constrained decoding (rq.grammar), shared by the choices */
    struct toolcall_parser *tc; /* tools (auto, required, named): the output's calls, or NULL */
    int tool_format, tool_parallel; /* toolcall_format; parallel_tool_calls */
    int thinking;               /* chat: the answer starts with a think block (thinking on): its
                                 * grammar, if any, waits for "</think>" (rq.grammar_after) */
    int grammar_whole;          /* harmony's tool_choice grammar: it covers the whole output
                                 * (the analysis message too), so nothing waits */
    char *echo;                 /* completions with echo: the prompt's text, else NULL */
    size_t n_echo;
    int echo_sent;              /* stream: the echo chunk went out */
    int32_t echo_off;           /* text offset of the next echo log-prob entry */
    int32_t *bias_ids;          /* logit_bias, pointed to by rq */
    float *bias;
    char id[48];
    int64_t created;
    double t_arrive;            /* seconds, monotonic */
    /* shared, under the server lock */
    int refs;                   /* the connection and the engine */
    int queued, started, done;  /* handed to the engine, scheduled, finished */
    int cancel;                 /* the client is gone, or the server stops */
    int64_t sched_id;
    moe8_buf out;                   /* bytes for the client: SSE events, or the final body */
    size_t sent;
    int status;                 /* HTTP status of a non-stream response, or of a stream
                                 * refused before it started */
    void *conn;                 /* http.c's connection, NULL once it is gone */
    int notified;               /* on the HTTP thread's ready list */
    struct job *next;           /* engine's submit queue */
    struct job *ready_next;     /* the HTTP thread's ready list */
    const char *finish_note;    /* why it ended, for the access log (NULL: nothing to add) */
    /* engine thread only */
    moe8_buf text, reasoning, hold; /* non-stream text; chat: <think> hold-back */
    int think;                  /* chat: 0 before <think>, 1 inside, 2 after </think>, 3 inside
                                 * by the prompt, a leading <think> not yet ruled out, 4 none
                                 * (thinking off and the answer does not start with <think>) */
    void *lp_json;              /* cJSON: log-probs gathered for a non-stream answer */
    void *echo_lp;              /* cJSON: echo's prompt log-probs (completions format) */
    cJSON *calls;               /* a whole answer's tool calls so far */
    moe8_buf args;                  /* ... the arguments of the one being read */
    int n_calls_ok;             /* complete calls (finish_reason tool_calls) */
    int tool_stop;              /* parallel_tool_calls false and the first call is complete:
                                 * the request is ended (under the lock), nothing more shown */
    uint64_t id_rng;            /* call ids */
    int32_t n_gen, n_cached, n_offset;
    double t_first, t_last;
    /* an API's own state of the request (api_responses.c), freed with the job by ext_free;
     * a request of several choices never has one */
    void *ext;
    void (*ext_free)(void *ext);
    int32_t last_token;         /* the last TOKEN event's id (once n_gen > 0) */
    size_t finish_text;         /* the FINISH event's text length (0 after a stop string) */
    const char *finish_reason;  /* once done: "stop", "length", "tool_calls", "abort" */
    int api_state[6];           /* the API's own state (api_messages.c: its blocks) */
} job;

/* A compiled grammar shared by the choices of a request (atomic count: a
 * request's jobs may be freed on different threads). */
typedef struct srv_grammar {
    struct grammar *g;
    int refs;
} srv_grammar;

/* ---- the server ------------------------------------------------------------------ */

typedef struct srv {
    moe8_serve_params p;
    moe8_model *model;
    const moe8_tokenizer *tok;
    moe8_context *ctx;
    moe8_sched *sched;
    int32_t n_ctx, n_vocab;
    int64_t kv_positions;       /* the KV pool's positions (blocks x block tokens) */
    const struct grammar_vocab *gvocab; /* the scheduler's vocabulary for grammars */
    int tool_format;            /* toolcall_format: --tool-call-parser, else the template's */
    int think_template;         /* the chat template writes think blocks ("</think>" in it) */
    int think_append;           /* the think block stays in content (minimax_m2_append_think) */
    char model_name[256];
    moe8_sampler_params defaults; /* generation_config.json, else OpenAI's */
    cJSON *default_kwargs;      /* --default-chat-template-kwargs, or NULL */
    pthread_mutex_t lock;
    pthread_cond_t wake;        /* a job was queued or cancelled */
    job *submit_head, *submit_tail;
    int n_submitted;            /* queued, not started */
    int sched_waiting;          /* waiting in the scheduler (engine's last count) */
    int stopping;               /* no new requests: 503 */
    job **live;                 /* engine: jobs added to the scheduler */
    int n_live, cap_live;
    srv_metrics m;
    void *http;                 /* http.c's state */
    job *ready_head;            /* jobs with news for their connection (moe8_http_notify) */
    int port;
    struct resp_store *responses; /* stored responses (responses_store.c), or NULL */
    double t_active;            /* engine: when it last had work (--sleep-idle-seconds) */
    double t_sleep;             /* engine: when it went to sleep; 0 awake */
} srv;

/* --sleep-idle-seconds (sleep.c), on the engine thread: asleep when idle long
 * enough; the wake is said when work comes. */
void moe8_srv_sleep_check(srv *s, int busy, double now);

/* A note for the operator (serve.c): on_log, else on_access, else nothing;
 * one line of at most 600 bytes. */
void moe8_srv_log(srv *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* One record to the caller (serve.c): on_record, else the line to on_ready
 * ("ready"), on_access ("access", "request" not at all) or on_log (the rest;
 * "banner" and "stop" only to on_record). A NULL request_id takes this
 * thread's (moe8_srv_rid). */
void moe8_srv_emit(srv *s, moe8_serve_record *r);
/* The request id of the request this thread works on (a worker, during its
 * parse), or NULL: moe8_srv_log's lines carry it. */
extern _Thread_local const char *moe8_srv_rid;
/* --reasoning-parser `name`: 1 the think block stays in content
 * (minimax_m2_append_think), 0 it is split off (deepseek_r1, qwen3, glm45,
 * minimax_m2; openai_gptoss: gpt-oss's analysis channel, which the harmony
 * output parser splits), -1 no such parser. */
int moe8_srv_reasoning_append(const char *name);

/* openai.c and the api_*.c files: the HTTP thread's side (its workers).
 * Each returns 0, or an HTTP status with the error body in *err_body
 * (OpenAI's {"error": {...}}). api: moe8_oa_chat, moe8_oa_completions (api.h). */
int moe8_oa_parse_completion(srv *s, const char *body, size_t n, const struct oa_api *api, job **out,
                        moe8_buf *err_body);
int moe8_oa_tokenize(srv *s, const char *body, size_t n, moe8_buf *out);
int moe8_oa_detokenize(srv *s, const char *body, size_t n, moe8_buf *out);
void moe8_oa_models(srv *s, moe8_buf *out);
void moe8_oa_model(srv *s, moe8_buf *out); /* GET /v1/models/{id} of the served model */
/* The HTTP thread's side, once every choice of a request is done (under the
 * lock): the whole non-stream answer, or a stream's usage chunk and [DONE]. */
void moe8_oa_response(srv *s, job *const *jobs, int n, moe8_buf *out);
void moe8_oa_stream_tail(srv *s, job *const *jobs, int n, moe8_buf *out);

/* An OpenAI error body. */
void moe8_oa_error(moe8_buf *out, const char *type, const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* A 400 invalid_request_error naming `param`: returns 400. */
int moe8_oa_bad(moe8_buf *err, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Optional number field `key` of o in [lo, hi] (lo_open: (lo, hi]), integral when
 * `integer`: 0 (*present says whether it was there), or 400 with the body. */
int moe8_oa_get_num(const cJSON *o, const char *key, double lo, double hi, int lo_open, int integer,
               double *out, int *present, moe8_buf *err);
/* Optional boolean field: 0, or 400. */
int moe8_oa_get_bool(const cJSON *o, const char *key, int *out, moe8_buf *err);

/* Constrained decoding of j by GBNF src, compiled on the calling worker
 * (400 naming `param` when it does not compile). */
int moe8_oa_attach_grammar(srv *s, job *j, const char *src, const char *param, moe8_buf *err);
/* s[0..n) under key as a JSON string, every code point kept (NUL too). */
void moe8_oa_json_text(cJSON *o, const char *key, const char *s, size_t n);

/* tools.c: tools / tool_choice / parallel_tool_calls of a chat request into
 * j (0 or a status with the body); the output through j's tool-call parser:
 * what may be shown goes to *shown (harmony's reasoning to *reason,
 * appended), a stream's tool_calls deltas come back
 * (NULL: none); then the job's parser and calls freed. */
int moe8_tools_parse(srv *s, const cJSON *root, job *j, moe8_buf *err);
cJSON *moe8_tools_feed(srv *s, job *j, const char *txt, size_t n, int final, moe8_buf *shown, moe8_buf *reason);
void moe8_tools_free(job *j);

/* fields.c: the request's fields against OpenAI's lists (fields.c's table):
 * 400 for one the server does not implement, a warning line for an unknown
 * one; then the logits processors (penalties, logit_bias, min_tokens) into
 * j->rq. Each returns 0 or an HTTP status with the error body. */
int moe8_oa_check_fields(srv *s, const cJSON *root, job_kind kind, moe8_buf *err);
/* An API's field policy: a row per field it knows (kinds: a mask of the
 * APIs the row is for, 0 for every one). */
enum { OA_HONOURED, OA_IGNORED, OA_REFUSED };
typedef struct {
    const char *name;
    int kinds, what;
    const char *why; /* OA_REFUSED: what to say */
} oa_field;
/* root's fields against table[0..n) for the API `mask`: a refused one that is
 * set (not null, not false) is a 400 naming it; unknown ones are logged in one
 * warning line, "warning: API request: unknown field(s) ... ignored". */
int moe8_oa_field_policy(srv *s, const cJSON *root, const oa_field *table, size_t n, int mask, const char *api,
                         moe8_buf *err);
int moe8_oa_parse_processors(srv *s, const cJSON *root, job *j, moe8_buf *err);
void moe8_job_free(job *j);

/* openai.c (api_completions.c: echo's prompt log-probs): the engine's side (under the lock). */
void moe8_oa_on_start(srv *s, job *j);        /* stream: the first chunk (chat: the role) */
void moe8_oa_on_prompt_logits(srv *s, job *j, const moe8_event *e); /* echo's prompt log-probs */
void moe8_oa_on_token(srv *s, job *j, const moe8_event *e);
void moe8_oa_on_finish(srv *s, job *j, const moe8_event *e);

/* engine.c */
moe8_status moe8_engine_run(srv *s, volatile int *stop, moe8_error *err);
moe8_status moe8_engine_follow(srv *s, moe8_error *err); /* ranks > 0 under TP */
/* After moe8_engine_run: every job still live is cancelled and let go. */
void moe8_engine_abandon(srv *s);

/* ---- endpoints (endpoints.c) ------------------------------------------------------- */

/* One endpoint, one row: the HTTP layer (http*.c) routes a request by its
 * method and path, checks the API key unless the row is open, and calls
 * the row's functions; it knows no API. A row has `answer` (cheap: on the
 * HTTP thread) or `parse` (on a worker); a row whose parse makes jobs has
 * the emitters too. */
typedef struct srv_endpoint {
    const char *method;
    const char *path;           /* exact; with `prefix`, what the path starts with (an id follows) */
    int prefix;
    int open;                   /* answered without --api-key's key (probes, scrapers) */
    /* the status; the body in *out, its Content-Type in *type */
    int (*answer)(srv *s, const char *path, moe8_buf *out, const char **type);
    /* the body into a job (0: *j made), or an answer (its status, the JSON body in *out) */
    int (*parse)(srv *s, const char *body, size_t n, job **j, moe8_buf *out);
    /* under the lock: a job's first stream events as it is queued; once every choice
     * is done, the whole answer (not a stream) or the stream's tail */
    void (*start)(srv *s, job *j);
    void (*respond)(srv *s, job *const *jobs, int n, moe8_buf *out);
    void (*tail)(srv *s, job *const *jobs, int n, moe8_buf *out);
    int x_api_key;              /* the key may also come as "x-api-key: <key>" (Anthropic's) */
    /* the error bodies of this path in its API's shape: `body` (OpenAI's
     * {"error": {...}}, as every part of the server writes it) rewritten for
     * `status`, as a stream's event when `sse` (NULL: OpenAI's, kept) */
    void (*error)(int status, int sse, moe8_buf *body);
} srv_endpoint;

/* The table, ended by a row with no method. */
extern const srv_endpoint moe8_srv_endpoints[];
/* Whether s serves row e (the chat page only under --webui). */
int moe8_srv_endpoint_on(const srv *s, const srv_endpoint *e);

/* The chat page, src/server/webui/index.html, built in by cmake/embed.cmake
 * (a NUL follows its moe8_webui_page_len bytes). */
extern const unsigned char moe8_webui_page[];
extern const size_t moe8_webui_page_len;

/* http.c, http_route.c, http_out.c */
moe8_status moe8_http_start(srv *s, moe8_error *err);
/* Stop accepting: the listening socket is closed (new connections refused). */
void moe8_http_quiesce(srv *s);
/* Wait until no connection is open, at most `seconds`. */
void moe8_http_wait_idle(srv *s, double seconds);
void moe8_http_stop(srv *s);
/* j has output, started or ended: its connection is told (call under the
 * lock; never blocks). */
void moe8_http_notify(srv *s, job *j);


#endif
