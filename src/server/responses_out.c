/*
 * responses_out.c — the answer side of OpenAI's Responses API in moe8 serve
 * (responses.h): moe8_oa_responses, the oa_api whose hooks turn the chat
 * path's output (text shown, the <think> split, tool-call deltas, finish)
 * into a Response object or its stream of events.
 *
 * Output items, in order (as vLLM's): a reasoning item {summary: [],
 * content: [reasoning_text]} when the model thought; a message with one
 * output_text part when there is text that is not only whitespace; one
 * function_call item per tool call {id "fc_...", call_id, name, namespace?,
 * arguments}. finish "length" gives status "incomplete" (incomplete_details
 * {reason: "max_output_tokens"}); a failure or a cancel gives "failed".
 *
 * A stream (API33.md A.3) is `event: TYPE\ndata: JSON\n\n` events numbered
 * by sequence_number from 0: response.created, response.in_progress, then per
 * item output_item.added -> (content_part.added -> *_text.delta ... ->
 * *_text.done -> content_part.done | function_call_arguments.delta ... ->
 * .done) -> output_item.done with the complete item, then one of
 * response.completed / .incomplete / .failed with the whole Response, and
 * the body ends (no [DONE]). Whitespace-only text is held until more text
 * comes (no empty message before a call); text after the first call is not
 * shown (vLLM's rule; a whole answer keeps it in its message).
 * Finished responses with store true go to the store (responses_store.c).
 *
 * Does not: read the request (api_responses.c) or run anything.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/responses.h"

/* ---- items and the Response ------------------------------------------------------------------ */

static void item_id(const job *j, const char *prefix, int index, char *out, size_t cap) {
    snprintf(out, cap, "%s_%s%02d", prefix, j->id + 5, index);
}

static int blank(const char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != ' ' && p[i] != '\n' && p[i] != '\r' && p[i] != '\t') return 0;
    return 1;
}

static cJSON *text_part(const char *type, const char *text, size_t n) {
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "type", type);
    moe8_oa_json_text(p, "text", text ? text : "", n);
    if (!strcmp(type, "output_text")) {
        cJSON_AddArrayToObject(p, "annotations");
        cJSON_AddArrayToObject(p, "logprobs");
    }
    return p;
}

/* A reasoning or message item; text NULL: the skeleton of output_item.added. */
static cJSON *text_item(int reasoning, const char *id, const char *text, size_t n, const char *status) {
    cJSON *it = cJSON_CreateObject(), *content;
    cJSON_AddStringToObject(it, "type", reasoning ? "reasoning" : "message");
    cJSON_AddStringToObject(it, "id", id);
    if (reasoning) cJSON_AddArrayToObject(it, "summary");
    else {
        cJSON_AddStringToObject(it, "status", status);
        cJSON_AddStringToObject(it, "role", "assistant");
    }
    content = cJSON_AddArrayToObject(it, "content");
    if (text) cJSON_AddItemToArray(content, text_part(reasoning ? "reasoning_text" : "output_text", text, n));
    if (reasoning) {
        cJSON_AddNullToObject(it, "encrypted_content");
        cJSON_AddStringToObject(it, "status", status);
    }
    return it;
}

cJSON *moe8_resp_call_item(const resp_state *st, const char *id, const char *call_id, const char *flat,
                           const char *args, const char *status) {
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(st->names, flat);
    const cJSON *ns = cJSON_GetObjectItemCaseSensitive(e, "namespace"), *nm = cJSON_GetObjectItemCaseSensitive(e, "name");
    cJSON *it = cJSON_CreateObject();
    cJSON_AddStringToObject(it, "type", "function_call");
    cJSON_AddStringToObject(it, "id", id);
    cJSON_AddStringToObject(it, "call_id", call_id);
    cJSON_AddStringToObject(it, "name", cJSON_IsString(nm) ? nm->valuestring : flat);
    if (cJSON_IsString(ns)) cJSON_AddStringToObject(it, "namespace", ns->valuestring);
    cJSON_AddStringToObject(it, "arguments", args);
    cJSON_AddStringToObject(it, "status", status);
    return it;
}

/* "completed", "incomplete" or "failed" of a chat finish reason (NULL: it never finished). */
static const char *status_of(const char *finish) {
    if (!finish || !strcmp(finish, "abort")) return "failed";
    return !strcmp(finish, "length") ? "incomplete" : "completed";
}

static cJSON *usage_of(const job *j, const resp_state *st) {
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "input_tokens", j->n_prompt);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "input_tokens_details"), "cached_tokens", j->n_cached);
    cJSON_AddNumberToObject(u, "output_tokens", j->n_gen);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "output_tokens_details"), "reasoning_tokens",
                            st->n_reason_tok);
    cJSON_AddNumberToObject(u, "total_tokens", j->n_prompt + j->n_gen);
    return u;
}

/* The Response of j: status "in_progress" (no output, no usage) or final. */
static cJSON *response(srv *s, const job *j, const resp_state *st, const char *status, const char *finish) {
    cJSON *r = cJSON_CreateObject(), *it;
    const int final = strcmp(status, "in_progress") != 0;
    cJSON_AddStringToObject(r, "id", j->id);
    cJSON_AddStringToObject(r, "object", "response");
    cJSON_AddNumberToObject(r, "created_at", (double)j->created);
    cJSON_AddStringToObject(r, "status", status);
    cJSON_AddFalseToObject(r, "background");
    if (!strcmp(status, "completed")) cJSON_AddNumberToObject(r, "completed_at", (double)time(NULL));
    else cJSON_AddNullToObject(r, "completed_at");
    if (!strcmp(status, "failed")) {
        cJSON *e = cJSON_AddObjectToObject(r, "error");
        cJSON_AddStringToObject(e, "code", "server_error");
        cJSON_AddStringToObject(e, "message", finish ? "the request was cancelled" : "the request failed");
    } else {
        cJSON_AddNullToObject(r, "error");
    }
    if (!strcmp(status, "incomplete"))
        cJSON_AddStringToObject(cJSON_AddObjectToObject(r, "incomplete_details"), "reason", "max_output_tokens");
    else cJSON_AddNullToObject(r, "incomplete_details");
    cJSON_AddStringToObject(r, "model", s->model_name);
    cJSON_AddItemToObject(r, "output", final ? cJSON_Duplicate(st->output, 1) : cJSON_CreateArray());
    cJSON_ArrayForEach(it, st->echo) cJSON_AddItemToObject(r, it->string, cJSON_Duplicate(it, 1));
    if (final) cJSON_AddItemToObject(r, "usage", usage_of(j, st));
    else cJSON_AddNullToObject(r, "usage");
    return r;
}

/* A finished response into the store (store true): its conversation with its output
 * (read back from the Response's text: the items hold raw JSON strings). */
static void keep(srv *s, resp_state *st, const char *id, const char *text) {
    cJSON *r, *out, *it;
    if (!st->items || !s->responses) return;
    r = cJSON_Parse(text);
    out = cJSON_DetachItemFromObject(r, "output");
    cJSON_Delete(r);
    while (out && (it = cJSON_DetachItemFromArray(out, 0))) cJSON_AddItemToArray(st->items, it);
    cJSON_Delete(out);
    moe8_resp_store_put(s->responses, id, text, st->items);
    st->items = NULL;
}

/* A string of chat's tool-call JSON (a string, or raw JSON text of one: tools.c writes
 * names and arguments raw), malloc'd; "" when it is neither. */
static char *str_any(const cJSON *v) {
    char *r = NULL;
    if (cJSON_IsString(v)) return strdup(v->valuestring);
    if (cJSON_IsRaw(v)) {
        cJSON *p = cJSON_Parse(v->valuestring);
        if (cJSON_IsString(p)) r = strdup(p->valuestring);
        cJSON_Delete(p);
    }
    return r ? r : strdup("");
}

/* ---- a whole answer ------------------------------------------------------------------------------ */

/* The choice's finish reason (openai.c writes {"index", "finish_reason"} to j->out: resp_choice). */
static char *finish_of(const job *j) {
    cJSON *c = j->out.p ? cJSON_ParseWithLength(j->out.p, j->out.n) : NULL;
    const cJSON *f = cJSON_GetObjectItem(c, "finish_reason");
    char *r = strdup(cJSON_IsString(f) ? f->valuestring : "stop");
    cJSON_Delete(c);
    return r;
}

static void resp_whole(srv *s, job *const *jobs, int n, moe8_buf *out) {
    job *j = jobs[0];
    resp_state *st = j->ext;
    char id[96], *finish = finish_of(j);
    const char *status = status_of(finish);
    const cJSON *c;
    cJSON *r;
    char *txt;
    (void)n;
    if (j->reasoning.n) {
        item_id(j, "rs", cJSON_GetArraySize(st->output), id, sizeof id);
        cJSON_AddItemToArray(st->output, text_item(1, id, j->reasoning.p, j->reasoning.n, "completed"));
    }
    if (j->text.n && !blank(j->text.p, j->text.n)) {
        item_id(j, "msg", cJSON_GetArraySize(st->output), id, sizeof id);
        cJSON_AddItemToArray(st->output, text_item(0, id, j->text.p, j->text.n,
                                                   strcmp(status, "incomplete") ? "completed" : "incomplete"));
    }
    cJSON_ArrayForEach(c, j->calls) {
        const cJSON *fn = cJSON_GetObjectItem(c, "function");
        char *cid = str_any(cJSON_GetObjectItem(c, "id")), *nm = str_any(cJSON_GetObjectItem(fn, "name")),
             *args = str_any(cJSON_GetObjectItem(fn, "arguments"));
        item_id(j, "fc", cJSON_GetArraySize(st->output), id, sizeof id);
        if (cid && nm && args) cJSON_AddItemToArray(st->output, moe8_resp_call_item(st, id, cid, nm, args, "completed"));
        free(cid);
        free(nm);
        free(args);
    }
    r = response(s, j, st, status, finish);
    if ((txt = cJSON_PrintUnformatted(r))) {
        moe8_buf_str(out, txt);
        if (strcmp(status, "failed")) keep(s, st, j->id, txt);
    }
    free(txt);
    free(finish);
    cJSON_Delete(r);
}

/* A whole choice: nothing but the finish reason openai.c adds (read by resp_whole). */
static void resp_choice(job *j, cJSON *c) {
    (void)j, (void)c;
}

/* ---- a stream ---------------------------------------------------------------------------------- */

/* An event {type, sequence_number} the caller fills, then ev_put writes. */
static cJSON *ev_new(resp_state *st, const char *type) {
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "type", type);
    cJSON_AddNumberToObject(e, "sequence_number", st->seq++);
    return e;
}

static void ev_put(moe8_buf *b, cJSON *e) {
    char *txt = cJSON_PrintUnformatted(e);
    if (txt) {
        moe8_buf_printf(b, "event: %s\ndata: ", cJSON_GetObjectItem(e, "type")->valuestring);
        moe8_buf_str(b, txt);
        moe8_buf_str(b, "\n\n");
    }
    free(txt);
    cJSON_Delete(e);
}

/* An event about the open item: {type, sequence_number, item_id, output_index(, content_index)}. */
static cJSON *ev_item(resp_state *st, const char *type, int content_index) {
    cJSON *e = ev_new(st, type);
    cJSON_AddStringToObject(e, "item_id", st->item_id);
    cJSON_AddNumberToObject(e, "output_index", cJSON_GetArraySize(st->output));
    if (content_index >= 0) cJSON_AddNumberToObject(e, "content_index", content_index);
    return e;
}

static void resp_start(srv *s, job *j) {
    resp_state *st = j->ext;
    const char *types[2] = {"response.created", "response.in_progress"};
    if (!j->stream) return;
    for (int i = 0; i < 2; i++) {
        cJSON *e = ev_new(st, types[i]);
        cJSON_AddItemToObject(e, "response", response(s, j, st, "in_progress", NULL));
        ev_put(&j->out, e);
    }
}

static void open_text(job *j, resp_state *st, resp_item_kind kind) {
    cJSON *e;
    const int reasoning = kind == RI_REASONING;
    item_id(j, reasoning ? "rs" : "msg", cJSON_GetArraySize(st->output), st->item_id, sizeof st->item_id);
    st->open = kind;
    st->text.n = 0;
    e = ev_new(st, "response.output_item.added");
    cJSON_AddNumberToObject(e, "output_index", cJSON_GetArraySize(st->output));
    cJSON_AddItemToObject(e, "item", text_item(reasoning, st->item_id, NULL, 0, "in_progress"));
    ev_put(&j->out, e);
    e = ev_item(st, "response.content_part.added", 0);
    cJSON_AddItemToObject(e, "part", text_part(reasoning ? "reasoning_text" : "output_text", "", 0));
    ev_put(&j->out, e);
}

static void text_delta(job *j, resp_state *st, const char *p, size_t n) {
    cJSON *e = ev_item(st, st->open == RI_REASONING ? "response.reasoning_text.delta" : "response.output_text.delta", 0);
    moe8_oa_json_text(e, "delta", p, n);
    if (st->open == RI_MESSAGE) cJSON_AddArrayToObject(e, "logprobs");
    ev_put(&j->out, e);
    moe8_buf_add(&st->text, p, n);
}

static void open_call(job *j, resp_state *st, const char *call_id, const char *flat) {
    cJSON *e;
    item_id(j, "fc", cJSON_GetArraySize(st->output), st->item_id, sizeof st->item_id);
    st->open = RI_CALL;
    st->any_call = 1;
    st->text.n = 0;
    cJSON_Delete(st->call);
    st->call = moe8_resp_call_item(st, st->item_id, call_id, flat, "", "in_progress");
    e = ev_new(st, "response.output_item.added");
    cJSON_AddNumberToObject(e, "output_index", cJSON_GetArraySize(st->output));
    cJSON_AddItemToObject(e, "item", cJSON_Duplicate(st->call, 1));
    ev_put(&j->out, e);
}

/* The open item's done events; it joins the output. */
static void close_item(job *j, resp_state *st, const char *status) {
    const size_t n = st->text.n;
    const char *t = st->text.p ? st->text.p : "";
    cJSON *e, *item;
    if (st->open == RI_NONE) return;
    if (st->open == RI_CALL) {
        e = ev_item(st, "response.function_call_arguments.done", -1);
        cJSON_AddStringToObject(e, "name", cJSON_GetObjectItem(st->call, "name")->valuestring);
        moe8_oa_json_text(e, "arguments", t, n);
        ev_put(&j->out, e);
        item = st->call;
        st->call = NULL;
        cJSON_DeleteItemFromObject(item, "arguments");
        cJSON_DeleteItemFromObject(item, "status");
        moe8_oa_json_text(item, "arguments", t, n);
        cJSON_AddStringToObject(item, "status", status);
    } else {
        const int reasoning = st->open == RI_REASONING;
        e = ev_item(st, reasoning ? "response.reasoning_text.done" : "response.output_text.done", 0);
        moe8_oa_json_text(e, "text", t, n);
        if (!reasoning) cJSON_AddArrayToObject(e, "logprobs");
        ev_put(&j->out, e);
        e = ev_item(st, "response.content_part.done", 0);
        cJSON_AddItemToObject(e, "part", text_part(reasoning ? "reasoning_text" : "output_text", t, n));
        ev_put(&j->out, e);
        item = text_item(reasoning, st->item_id, t, n, reasoning ? "completed" : status);
    }
    e = ev_new(st, "response.output_item.done");
    cJSON_AddNumberToObject(e, "output_index", cJSON_GetArraySize(st->output));
    cJSON_AddItemToObject(e, "item", cJSON_Duplicate(item, 1));
    ev_put(&j->out, e);
    cJSON_AddItemToArray(st->output, item);
    st->open = RI_NONE;
    st->text.n = 0;
}

/* Shown text: held while only whitespace, dropped after a call. */
static void stream_content(job *j, resp_state *st, const char *p, size_t n) {
    if (!n || st->any_call) return;
    if (st->open != RI_MESSAGE) {
        if (blank(p, n)) {
            moe8_buf_add(&st->ws, p, n);
            return;
        }
        close_item(j, st, "completed");
        open_text(j, st, RI_MESSAGE);
        if (st->ws.n) text_delta(j, st, st->ws.p, st->ws.n);
        st->ws.n = 0;
    }
    text_delta(j, st, p, n);
}

/* chat's tool-call deltas [{index, id?, function: {name?, arguments}}] as function_call items. */
static void stream_calls(job *j, resp_state *st, const cJSON *deltas) {
    const cJSON *d;
    cJSON_ArrayForEach(d, deltas) {
        const cJSON *fn = cJSON_GetObjectItem(d, "function"), *id = cJSON_GetObjectItem(d, "id");
        char *args = str_any(cJSON_GetObjectItem(fn, "arguments"));
        if (cJSON_IsString(id)) {
            char *nm = str_any(cJSON_GetObjectItem(fn, "name"));
            close_item(j, st, "completed");
            open_call(j, st, id->valuestring, nm ? nm : "");
            free(nm);
        }
        if (st->open == RI_CALL && args && args[0]) {
            cJSON *e = ev_item(st, "response.function_call_arguments.delta", -1);
            cJSON_AddStringToObject(e, "delta", args);
            ev_put(&j->out, e);
            moe8_buf_str(&st->text, args);
        }
        free(args);
    }
}

static void resp_stream(srv *s, job *j, const oa_piece *p) {
    resp_state *st = j->ext;
    (void)s;
    if (p->n_reason) {
        if (st->open != RI_REASONING) {
            close_item(j, st, "completed");
            open_text(j, st, RI_REASONING);
        }
        text_delta(j, st, p->reason, p->n_reason);
    }
    stream_content(j, st, p->content, p->n_content);
    stream_calls(j, st, p->tool_deltas);
    cJSON_Delete(p->tool_deltas);
    cJSON_Delete(p->logprobs);
    if (p->finish) {
        close_item(j, st, strcmp(p->finish, "length") ? "completed" : "incomplete");
        st->finish = p->finish;
    }
}

/* The stream's end: the terminal event with the whole Response. */
static void resp_tail(srv *s, job *const *jobs, int n, moe8_buf *out) {
    job *j = jobs[0];
    resp_state *st = j->ext;
    const char *status = status_of(st->finish);
    char type[40];
    cJSON *e, *r;
    (void)n;
    snprintf(type, sizeof type, "response.%s", status);
    e = ev_new(st, type);
    r = response(s, j, st, status, st->finish);
    if (strcmp(status, "failed")) {
        char *txt = cJSON_PrintUnformatted(r);
        if (txt) keep(s, st, j->id, txt);
        free(txt);
    }
    cJSON_AddItemToObject(e, "response", r);
    ev_put(out, e);
}

/* ---- the hooks ----------------------------------------------------------------------------- */

/* Chat's own: the prompt (messages, tools through the template, the <think> state). */
static int resp_prompt(srv *s, const cJSON *root, job *j, oa_req *r, moe8_buf *err) {
    return moe8_oa_chat.prompt(s, root, j, r, err);
}

static int resp_logprobs(const cJSON *root, job *j, moe8_buf *err) {
    return moe8_oa_chat.logprobs(root, j, err);
}

static cJSON *resp_new_logprobs(void) {
    return moe8_oa_chat.new_logprobs();
}

static void resp_add_logprobs(srv *s, job *j, cJSON *lp, const moe8_event *e) {
    moe8_oa_chat.add_logprobs(s, j, lp, e);
}

/* Chat's <think> split; a token that opens, is inside or closes the think block
 * counts as a reasoning token. */
static void resp_split(srv *s, job *j, const char *txt, size_t n, moe8_buf *content, moe8_buf *reason, int final) {
    resp_state *st = j->ext;
    const int before = j->think;
    moe8_oa_chat.split(s, j, txt, n, content, reason, final);
    if (!final && (before == 1 || before == 3 || (before == 0 && j->think != 0 && j->think != 4))) st->n_reason_tok++;
}

const oa_api moe8_oa_responses = {
    .kind = JOB_CHAT, /* the translated request is a chat request (fields.c) */
    .id_prefix = "resp",
    .object = "response",
    .chunk_object = "response",
    .prompt_param = "input",
    .max_alias = "max_completion_tokens",
    .default_max = 0,
    .options = NULL,
    .logprobs = resp_logprobs,
    .prompt = resp_prompt,
    .start = resp_start,
    .split = resp_split,
    .new_logprobs = resp_new_logprobs,
    .add_logprobs = resp_add_logprobs,
    .delta = NULL,
    .choice = resp_choice,
    .stream = resp_stream,
    .whole = resp_whole,
    .tail = resp_tail,
};
