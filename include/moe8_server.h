/*
 * moe8_server.h — the OpenAI-compatible HTTP server (libmoe8_server; `moe8 serve`).
 *
 * Stable: append-only. Link libmoe8_server.
 */
#ifndef MOE8_API_SERVER_H
#define MOE8_API_SERVER_H

#include "moe8.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================== */
/* Server: OpenAI-compatible HTTP (libmoe8_server; `moe8 serve`)            */
/* ======================================================================== */

/* A line for the caller to print (the library never prints). */
typedef void (*moe8_serve_line_fn)(void *user, const char *line);

/* One log line as a record (moe8_serve_params.on_record): what a caller needs
 * to print it as text or JSON, with its own timestamp and level filter. The
 * strings live for the call only. */
typedef struct {
    moe8_log_level level;      /* access and notes INFO, warnings and limits WARN, a request's
                                * start DEBUG */
    const char *kind;          /* "access" (a request ended), "request" (its head arrived),
                                * "note", "banner" (start-up facts), "ready", "stop" */
    const char *message;       /* the line as on_access / on_log / on_ready have it */
    const char *request_id;    /* the request's id (its x-request-id), or NULL outside one */
    const char *client;        /* the client's address, or NULL */
    const char *method, *path; /* "access" and "request"; else NULL */
    int status;                /* "access": the HTTP status (499: the client left first) */
    int32_t prompt_tokens, gen_tokens, cached_tokens; /* "access" */
    double ms;                 /* "access": the request's seconds x 1000, head to last byte queued */
    double ttft_ms;            /* "access": to the first generated token; -1: none */
} moe8_serve_record;
typedef void (*moe8_serve_record_fn)(void *user, const moe8_serve_record *r);

/* Initialise with moe8_serve_params_default(); fields are only appended. */
typedef struct {
    const char *host;              /* address to listen on; default "127.0.0.1" */
    int port;                      /* default 8080; 0: the OS picks a free port */
    int parallel;                  /* most running requests; default 16 */
    int32_t ctx_size;              /* longest prompt + completion; 0 = min(4096,
                                    * max_position_embeddings) */
    int32_t max_batch_tokens;      /* most tokens per step; default 2048 */
    uint64_t kv_bytes;             /* KV pool; 0 = parallel x ctx_size positions */
    int n_threads;                 /* 0 = the model's */
    const char *api_key;           /* NULL: no auth; else every endpoint but /health,
                                    * /version, /metrics and the page at / needs
                                    * "Authorization: Bearer KEY"
                                    * (the scheme in any case); "" is refused */
    const char *model_dir;         /* the folder: generation_config.json sampling defaults and
                                    * the default served name */
    const char *served_model_name; /* NULL: the folder's name */
    int max_queue;                 /* waiting requests before 503; default 256 */
    int prefix_cache;              /* default 1 */
    double timeout_s;              /* a kept-alive connection idle this long is closed, and so
                                    * is one whose client does not read its answer or send
                                    * its body for this long; default 30 */
    double drain_s;                /* on stop: seconds running requests may still finish
                                    * before they are cancelled; default 5 */
    moe8_dist *dist;               /* the model's TP/EP group, or NULL */
    moe8_serve_line_fn on_ready;   /* "listening on http://HOST:PORT", once, when ready */
    moe8_serve_line_fn on_access;  /* one access-log line per request */
    void *user;
    uint64_t max_body;             /* a request body larger: 413; default 4 MiB */
    uint64_t max_buffered;         /* bytes of unfinished request heads and bodies held at
                                    * once; past it, new connections and bodies get 503;
                                    * default 256 MiB */
    double header_timeout_s;       /* the request head must be complete this long after the
                                    * accept (or its first byte); else 408; default 10 */
    double body_min_rate;          /* bytes/s a body must average after header_timeout_s
                                    * of grace; else 408; default 4096 */
    int max_connections;           /* open connections; past it 503; default 8192 (lowered
                                    * to what RLIMIT_NOFILE allows) */
    int max_connections_per_ip;    /* open connections from one address; 0 = no limit;
                                    * default 1024 */
    moe8_serve_line_fn on_log;     /* notes: limits reached (at most a line per limit per
                                    * 10 s); NULL: on_access */
    const char *allowed_origins;   /* CORS: comma-separated origins browsers may call from, or
                                    * "*"; NULL: none (no CORS headers) */
    moe8_dtype kv_type;            /* KV cache elements: F16 (default), BF16 or F32 */
    const char *tool_call_parser;  /* "hermes", "deepseek_v3", "mistral", "glm45" (or
                                    * "glm4_moe"), "glm47", "minimax_m2": the format of the
                                    * model's tool calls; NULL: the one its chat template
                                    * teaches (none: tools answer 400) */
    const char *default_chat_template_kwargs; /* a JSON object of template variables under
                                    * each chat request's chat_template_kwargs (vLLM's
                                    * --default-chat-template-kwargs), or NULL: the
                                    * template's own defaults */
    int responses_store;           /* responses kept for previous_response_id and GET
                                    * /v1/responses/{id} (least recently used dropped first);
                                    * default 128; 0: none kept */
    int webui;                     /* the chat page at GET / (src/server/webui/index.html);
                                    * default 1; 0: / is a 404 like any unknown path */
    const char *reasoning_parser;  /* how chat output's think block is given back (vLLM's
                                    * --reasoning-parser): "deepseek_r1", "qwen3", "glm45",
                                    * "minimax_m2" split <think>...</think> off into
                                    * reasoning_content; "minimax_m2_append_think" keeps it
                                    * in content (the prompt's open "<think>" written
                                    * before it), as MiniMax-M2 wants it back in the
                                    * history; NULL: that for MiniMax-M2's template, the
                                    * split for any other */
    uint64_t state_bytes;          /* hybrid models: the recurrent-state pool
                                    * (moe8_context_params.state_bytes); 0 = its default */
    moe8_serve_record_fn on_record; /* every line as a record, start-up banner and stop line
                                    * too; when set, on_ready, on_access and on_log are not
                                    * called. Every request's answer carries x-request-id
                                    * (the client's, when it sent a valid one: 1 to 64 of
                                    * A-Z a-z 0-9 . _ : - ; else one made here), and so do
                                    * its records. */
    double sleep_idle_s;           /* > 0: after this many seconds without a request to the
                                    * engine, empty the prefix cache, give the KV pool's pages
                                    * back and page out the mapped weights (*.safetensors,
                                    * the packed cache); the next request wakes it (/health,
                                    * /metrics and the other answers the HTTP side gives
                                    * alone do not). 0: never (default). Not with TP/EP yet */
    const char *prompt_cache_dir;  /* the prompt cache's disk tier
                                    * (moe8_context_params.prompt_cache_dir); NULL: off */
    uint64_t prompt_cache_bytes;   /* its bound in bytes; 0: none */
} moe8_serve_params;
moe8_serve_params moe8_serve_params_default(void);

/* Serve `m` (its tokenizer `tok`) until *stop becomes non-zero (set it from a
 * signal handler), then stop accepting, let running requests finish for
 * drain_s, cancel the rest (streams get a final event), and return MOE8_OK.
 * Endpoints: POST /v1/completions, /v1/chat/completions, /v1/responses,
 * /v1/responses/input_tokens, /v1/messages, /v1/messages/count_tokens,
 * /tokenize, /detokenize; GET /v1/models, /v1/responses/{id}, /health,
 * /metrics, and the chat page at / (webui). Under TP/EP every rank
 * calls it: rank 0 listens and schedules, the others follow its steps;
 * a failed collective ends it with MOE8_ERR_COMM. */
moe8_status moe8_serve(moe8_model *m, const moe8_tokenizer *tok, const moe8_serve_params *p,
                       volatile int *stop, moe8_error *err);

#ifdef __cplusplus
}
#endif

#endif /* MOE8_API_SERVER_H */
