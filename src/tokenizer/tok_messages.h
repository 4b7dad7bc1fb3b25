/*
 * tok_messages.h — the library's one normalisation of an OpenAI chat
 * conversation (tok_messages.c), on parsed JSON: what
 * moe8_chat_messages_normalize does on text, for a caller that holds the
 * request's cJSON already and wants the field at fault (the server, for
 * OpenAI's error `param`). Not part of the public API.
 */
#ifndef MOE8_TOK_MESSAGES_H
#define MOE8_TOK_MESSAGES_H

#include <cjson/cJSON.h>

#include "core/core.h"

/* A refusal: the field's path and the message naming it. */
typedef struct {
    moe8_status code;   /* MOE8_ERR_INVALID_ARG (the conversation), MOE8_ERR_NOMEM */
    char param[160];    /* "messages[1].tool_calls[0].function.arguments"; "" for out of memory */
    char message[900];
} tok_messages_error;

/* moe8_chat_messages_normalize's contract (moe8.h) on cJSON: messages,
 * tools, documents as the request has them (tools, documents NULL or a JSON
 * null when absent). */
moe8_status moe8_chat_messages_normalize_cjson(const cJSON *messages, const cJSON *tools, const cJSON *documents,
                                   char **messages_json, char **tools_json, char **documents_json,
                                   tok_messages_error *e);

#endif
