/*
 * api.h — internal: one OpenAI-style API of moe8 serve as a table of hooks,
 * and the request and output helpers the APIs share (openai.c).
 *
 *   openai.c           what every API shares: error bodies, field readers,
 *                      prompts as text or ids, sampling, stop, structured
 *                      outputs, the request's limits, jobs and their choices,
 *                      the output path (events -> text -> chunks or a whole
 *                      answer), usage
 *   api_chat.c         /v1/chat/completions: messages through the chat
 *                      template, tools, the <think> split, chat log-probs,
 *                      deltas and messages
 *   api_completions.c  /v1/completions: prompt text or ids, echo (its text
 *                      and prompt log-probs), completions log-probs, text
 *   api_tokenize.c     /tokenize, /detokenize, /v1/models (no jobs)
 *   api_responses.c    /v1/responses: the request translated into a chat
 *                      request; responses_out.c its Response and events,
 *                      responses_store.c the store (responses.h)
 *   api_messages.c     /v1/messages (Anthropic's), translated into a chat
 *                      request; its message object and events
 *
 * A new API is a file with its oa_api and a row in
 * endpoints.c; the shared path calls only its hooks.
 */
#ifndef MOE8_SERVER_API_H
#define MOE8_SERVER_API_H

#include <cjson/cJSON.h>

#include "server/server.h"

/* One step's output of a job as the shared path splits it: the text shown,
 * the reasoning, the tool-call deltas (chat's form: [{index, id?, type?,
 * function: {name?, arguments}}], owned by the hook), the log-probs (owned,
 * or NULL) and, on the last step of a stream, the finish reason ("stop",
 * "length", "tool_calls", "abort"). */
typedef struct {
    const char *content, *reason;
    size_t n_content, n_reason;
    cJSON *tool_deltas, *logprobs;
    const char *finish;
} oa_piece;

/* What one request's parse carries between the shared passes and the hooks. */
typedef struct {
    int echo;                   /* completions: echo the prompt */
} oa_req;

typedef struct oa_api {
    job_kind kind;              /* fields.c's list of this API's fields */
    const char *id_prefix;      /* the answer's id: "chatcmpl-...", "cmpl-..." */
    const char *object;         /* a whole answer's "object" */
    const char *chunk_object;   /* a streamed chunk's */
    const char *prompt_param;   /* what errors about the prompt name: "messages", "prompt" */
    const char *max_alias;      /* a field that overrides max_tokens (NULL: none) */
    int32_t default_max;        /* max_tokens when absent; 0: the rest of the context */
    int clamp_max;              /* max_tokens past the context's rest is cut to it, not refused */
    /* request, each 0 or an HTTP status with the error body: the API's own
     * options (read where echo is: before ignore_eos), its log-probs fields,
     * then its prompt into j->prompt (after sampling, stop, processors) */
    int (*options)(const cJSON *root, job *j, oa_req *r, moe8_buf *err);
    int (*logprobs)(const cJSON *root, job *j, moe8_buf *err);
    int (*prompt)(srv *s, const cJSON *root, job *j, oa_req *r, moe8_buf *err);
    /* output (engine thread, under the lock): a stream's first events; new
     * text split into what is shown and reasoning (appended); log-probs:
     * an empty object and one token's entry added; a streamed chunk's
     * choice body; a whole choice's body (its text and log-probs) */
    void (*start)(srv *s, job *j);
    void (*split)(srv *s, job *j, const char *txt, size_t n, moe8_buf *content, moe8_buf *reason, int final);
    cJSON *(*new_logprobs)(void);
    void (*add_logprobs)(srv *s, job *j, cJSON *lp, const moe8_event *e);
    void (*delta)(cJSON *c, const char *content, size_t nc, const char *reason, size_t nr, const char *finish,
                  cJSON *tool_deltas);
    void (*choice)(job *j, cJSON *c);
    /* APIs whose answers are not chat-style choices (responses, messages):
     * a stream's step (NULL: moe8_oa_stream_chunk with delta), the whole
     * answer from the finished jobs' text, reasoning and calls (NULL: the
     * choices of `choice` under moe8_oa_envelope, with usage), and the
     * stream's end (NULL: the usage chunk if asked, then "data: [DONE]") */
    void (*stream)(srv *s, job *j, const oa_piece *p);
    void (*whole)(srv *s, job *const *jobs, int n, moe8_buf *out);
    void (*tail)(srv *s, job *const *jobs, int n, moe8_buf *out);
    /* a stream's failure after its start, body OpenAI's error (NULL: "data: body") */
    void (*fail)(srv *s, job *j, const moe8_buf *body);
} oa_api;

extern const oa_api moe8_oa_chat, moe8_oa_completions, moe8_oa_messages;

/* ---- openai.c: shared helpers ---------------------------------------------------------- */

/* The body as a JSON object under the one input policy of every endpoint
 * (valid UTF-8, no NUL, one value, no key twice): NULL with *rc the status. */
cJSON *moe8_oa_parse_object(const char *body, size_t n, moe8_buf *err, int *rc);
/* text tokenized into malloc'd *ids; with_bos: BOS first when the tokenizer
 * asks for it (prompts, not chats). 0, or 400 naming param. */
int moe8_oa_tokenize_text(srv *s, const char *text, int with_bos, int32_t **ids, int32_t *n, const char *param,
                          moe8_buf *err);
/* The array a of token ids into malloc'd *ids: 0, or 400 naming param. */
int moe8_oa_ids_from_array(srv *s, const cJSON *a, int32_t **ids, int32_t *n, const char *param, moe8_buf *err);
/* One log-probs entry {token, logprob, (chat) bytes}. */
cJSON *moe8_oa_token_entry(srv *s, int32_t tok, float lp, int bytes);
/* One streamed chunk of j: its choice body by the API's delta. */
void moe8_oa_stream_chunk(srv *s, job *j, const char *content, size_t nc, const char *reason, size_t nr,
                          const char *finish, cJSON *lp, cJSON *tool_deltas);
/* root as an SSE event ("data: ...\n\n") into j->out; root is freed. */
void moe8_oa_sse(job *j, cJSON *root);
/* {id, object, created, model} of j's answer. */
cJSON *moe8_oa_envelope(srv *s, const job *j, const char *object);

/* ---- api_chat.c, api_completions.c: what /tokenize shares ---------------------------- */

/* The chat prompt's ids: the messages (normalized by the library), the tools
 * (unless no_tools) and documents through the model's template; *open_think
 * (may be NULL): the prompt ends in an open <think>; *reasoning (may be
 * NULL): thinking is on. */
int moe8_oa_chat_prompt(srv *s, const cJSON *root, int gen_prompt, int no_tools, int32_t **ids, int32_t *n,
                        int *open_think, int *reasoning, moe8_buf *err);
/* Chat's hooks that other chat-shaped APIs (messages) reuse: tools and the
 * prompt of a request; the <think> split of its output. */
int moe8_oa_chat_request_prompt(srv *s, const cJSON *root, job *j, oa_req *r, moe8_buf *err);
void moe8_oa_chat_split(srv *s, job *j, const char *txt, size_t n, moe8_buf *content, moe8_buf *reason,
                        int final);
/* ---- api_messages.c: Anthropic's Messages API (endpoints.c's rows) --------------------- */

/* POST /v1/messages: the body into a job (0), or an error status with OpenAI's body. */
int moe8_msg_parse(srv *s, const char *body, size_t n, job **j, moe8_buf *err);
/* POST /v1/messages/count_tokens: 200 with {"input_tokens": n}, or an error status. */
int moe8_msg_count(srv *s, const char *body, size_t n, job **j, moe8_buf *out);
/* The rows' `error`: OpenAI's error body as Anthropic's, an "error" event when sse. */
void moe8_msg_error(int status, int sse, moe8_buf *body);

/* A completion's prompt (a string, or token ids) into ids. */
int moe8_oa_prompt_ids(srv *s, const cJSON *root, int32_t **ids, int32_t *n, moe8_buf *err);

#endif
