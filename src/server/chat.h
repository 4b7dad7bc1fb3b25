/*
 * chat.h — a chat request's messages, tools and documents as the chat
 * template gets them (moe8_chat_template_render_json), validated with
 * OpenAI-style errors. Pure functions over cJSON; no server state.
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
 * arguments"), and the three outputs NULL. What is made, as vLLM makes it:
 *   - content: a string; null or absent (allowed for assistant messages
 *     only, as OpenAI has it) -> ""; an array of {"type": "text", "text"}
 *     parts -> their texts joined with "\n"; another part type is refused;
 *   - role: system, user, assistant, tool; developer -> system;
 *   - assistant: tool_calls, each {id, function: {arguments, name}, type}
 *     (the openai types' order, as pydantic rebuilds them), arguments
 *     parsed from their JSON string ("" -> {}; an object is taken as it is),
 *     an empty list dropped; reasoning or reasoning_content -> both keys;
 *   - tool: tool_call_id; any role: name;
 *   - other fields are ignored, as vLLM ignores them;
 *   - tools: each {type: "function", function: {name, description
 *     (null when absent), parameters (null when absent), other keys}, other
 *     keys}, as pydantic's model_dump writes them;
 *   - documents: an array of objects with string values, as they are. */
int chat_messages_normalize(const cJSON *messages, const cJSON *tools, const cJSON *documents,
                            char **messages_json, char **tools_json, char **documents_json,
                            moe8_buf *err_body);

#endif
