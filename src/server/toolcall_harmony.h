/*
 * toolcall_harmony.h — inside the tool-call parsers (toolcall.h): gpt-oss's
 * harmony format, whose channels carry the reasoning, the tool calls and
 * the answer (toolcall_harmony.c), and the one change the chat template's
 * input needs for it (an assistant's reasoning as its `thinking`).
 */
#ifndef MOE8_SERVER_TOOLCALL_HARMONY_H
#define MOE8_SERVER_TOOLCALL_HARMONY_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "server/toolcall.h"

/* The parser of harmony output; toolcall.c's API functions hand
 * TOOLCALL_HARMONY to it. tools: the request's `tools` array (copied), or
 * NULL: then a message to functions.NAME is not a call, its text is
 * content. */
typedef struct tch tch;
tch *moe8_tch_new(const cJSON *tools);
int moe8_tch_feed(tch *h, const char *s, size_t n, const toolcall_sink *k);
int moe8_tch_finish(tch *h, const toolcall_sink *k);
int moe8_tch_count(const tch *h);
const cJSON *moe8_tch_tools(const tch *h);
void moe8_tch_free(tch *h);

/* 1 if a chat template writes the harmony format (its source has
 * "<|channel|>" and "<|message|>"). */
int moe8_harmony_template(const char *source);

/* The normalized messages (moe8_chat_messages_normalize's JSON array) as
 * gpt-oss's template reads them: an assistant message's reasoning_content
 * becomes its `thinking` (as llama.cpp's gpt-oss path passes it), except
 * where the message has tool calls and non-empty content (the template
 * refuses both; its content is then that turn's analysis); an assistant
 * turn of several calls becomes one turn per call (the first keeps its
 * content and thinking), each followed by its result (the one of its
 * tool_call_id, else the next left), as harmony writes them (the template
 * keeps only a message's first call). *json is
 * replaced by a malloc'd text; 0, or -1 out of memory or not an array
 * (*json unchanged). */
int moe8_harmony_messages(char **json);
/* The normalized tools (a JSON array) as that template reads them: a
 * function without a description gets "" (the template concatenates it:
 * None would fail the request, as it fails in jinja2). Same contract. */
int moe8_harmony_tools(char **json);

#endif
