/*
 * chat.h — a chat request's messages, tools and documents as the chat
 * template gets them, validated with OpenAI-style errors: the library's one
 * normalisation (moe8_chat_messages_normalize in moe8.h, on the request's
 * cJSON: tokenizer/tok_messages.h) with its refusals as OpenAI's error body.
 * In api_chat.c.
 */
#ifndef MOE8_SERVER_CHAT_H
#define MOE8_SERVER_CHAT_H

#include <cjson/cJSON.h>

#include "server/server.h"

/* messages, tools, documents: the request's fields (tools, documents: NULL
 * or a JSON null when absent). On success 0, with *messages_json the JSON
 * array the template gets and *tools_json, *documents_json the tools and
 * documents (NULL when absent: None to the template); all malloc'd, free()
 * them. On failure 400 (500 for out of memory) with OpenAI's error body in
 * *err_body naming the field (param "messages[1].tool_calls[0].function.
 * arguments"), and the three outputs NULL. What is made: moe8.h's
 * moe8_chat_messages_normalize. */
int moe8_oa_chat_messages_normalize(const cJSON *messages, const cJSON *tools, const cJSON *documents,
                            char **messages_json, char **tools_json, char **documents_json,
                            moe8_buf *err_body);

#endif
