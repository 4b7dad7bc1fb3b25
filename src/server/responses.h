/*
 * responses.h — internal: the OpenAI Responses API of moe8 serve
 * (POST /v1/responses, POST /v1/responses/input_tokens, GET and DELETE
 * /v1/responses/{id}), split in three files:
 *
 *   api_responses.c    the request: its fields (honoured, ignored, refused),
 *                      input items -> chat messages, function and namespace
 *                      tools -> chat tools, text.format -> response_format,
 *                      reasoning.effort -> enable_thinking; then the chat
 *                      path (openai.c) makes the job
 *   responses_out.c    the answer: the Response object, a stream's events
 *                      (sequence_number, added -> deltas -> done), the hooks
 *                      of moe8_oa_responses
 *   responses_store.c  the bounded store of finished responses (LRU) for
 *                      previous_response_id and GET
 */
#ifndef MOE8_SERVER_RESPONSES_H
#define MOE8_SERVER_RESPONSES_H

#include <cjson/cJSON.h>

#include "server/api.h"

/* ---- responses_store.c ---------------------------------------------------------------- */

typedef struct resp_store resp_store;

/* A store of at most cap responses; NULL when cap is 0 (nothing kept). */
resp_store *moe8_resp_store_new(int cap);
void moe8_resp_store_free(resp_store *st);
/* Keep response `id`: its Response JSON text and the conversation up to its
 * output (items, taken); the least recently used goes when full. */
void moe8_resp_store_put(resp_store *st, const char *id, const char *response, cJSON *items);
/* A copy of the conversation of id (NULL: not kept); it becomes the most recent. */
cJSON *moe8_resp_store_items(resp_store *st, const char *id);
/* A malloc'd copy of the Response JSON of id, or NULL. */
char *moe8_resp_store_response(resp_store *st, const char *id);
/* Drop response id: 1 when it was kept, 0 when not. */
int moe8_resp_store_delete(resp_store *st, const char *id);

/* ---- the request's state (api_responses.c makes it, responses_out.c reads it) ---------- */

typedef enum { RI_NONE, RI_REASONING, RI_MESSAGE, RI_CALL } resp_item_kind;

typedef struct resp_state {
    cJSON *echo;           /* the request's settings as the Response echoes them */
    cJSON *names;          /* flat tool name -> {"namespace", "name"} (namespace tools) */
    cJSON *items;          /* the conversation (previous response's + this input), kept
                            * for the store; NULL: store false */
    cJSON *output;         /* the output items done so far */
    int32_t n_reason_tok;  /* tokens of the think block */
    /* a stream */
    int seq;               /* the next sequence_number */
    resp_item_kind open;   /* the item being streamed */
    int any_call;          /* a function_call was opened: later text is not shown */
    char item_id[80];
    moe8_buf text;         /* the open item's text or arguments */
    moe8_buf ws;           /* whitespace-only text not shown yet (shown before more text) */
    cJSON *call;           /* the open function_call item */
    const char *finish;    /* the stream's finish reason once seen */
} resp_state;

void moe8_resp_state_free(void *st);
/* A function_call item {type, id, call_id, name, namespace?, arguments, status} of a chat
 * call's id, flat name and arguments (the namespace split back). */
cJSON *moe8_resp_call_item(const resp_state *st, const char *item_id, const char *call_id, const char *flat,
                           const char *args, const char *status);

/* ---- responses_out.c ------------------------------------------------------------------- */

extern const oa_api moe8_oa_responses;

/* ---- the endpoints (endpoints.c's rows) ------------------------------------------------- */

int moe8_resp_parse(srv *s, const char *body, size_t n, job **j, moe8_buf *out);
int moe8_resp_input_tokens(srv *s, const char *body, size_t n, moe8_buf *out);
int moe8_resp_get(srv *s, const char *id, size_t n, moe8_buf *out);
/* DELETE /v1/responses/{id}: {"id", "object": "response", "deleted": true}, else 404 as GET. */
int moe8_resp_delete(srv *s, const char *id, size_t n, moe8_buf *out);

#endif
