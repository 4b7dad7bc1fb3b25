/*
 * api_chat.c — /v1/chat/completions of moe8 serve: objects
 * "chat.completion" and "chat.completion.chunk" (api.h's hooks; openai.c
 * runs the request and output path they plug into).
 *
 * Chat prompts are the model's chat template (moe8_chat_apply_json) over the
 * messages as the library normalizes them (moe8_chat_messages_normalize),
 * with the request's chat_template_kwargs over --default-chat-template-kwargs
 * as template variables, tokenized without an added BOS (the template
 * writes its own), as vLLM does; a template's raise_exception is a 400 with
 * its message. Tools and tool_choice: tools.c.
 * Chat output is split as vLLM's Qwen3 reasoning parser does: text between
 * <think> and </think> is reasoning_content, the rest content; a tag split
 * across tokens is held back until it is decided, never shown in part. When
 * the rendered prompt itself ends in an open <think> (DeepSeek-R1's
 * template), the answer starts as reasoning, as vLLM's DeepSeek-R1 parser
 * reads it (a leading <think> the model writes anyway is dropped). With
 * thinking off (or a template without think blocks) nothing is split unless
 * the answer starts with <think>: a "<think>" later in the text (in a tool
 * call's arguments, say) is content, as vLLM's parsers, which look for the
 * think token where an answer begins, leave it. GLM-4.5 / 4.6 (the model
 * opens its think block) and GLM-4.7 (the prompt opens it) split the same
 * way, as vLLM's glm45 parser does in a stream. MiniMax-M2 keeps its
 * thinking in the history: with its template (or --reasoning-parser
 * minimax_m2_append_think) nothing is split off, and the answer is content
 * whole, after the "<think>" the prompt opened, as vLLM's
 * minimax_m2_append_think gives it (which writes "<think>" also when the
 * prompt did not open one: moe8 does not, so that thinking off gives the
 * bare answer); --reasoning-parser minimax_m2 splits it as above.
 * Log-probs: {content: [{token, logprob, bytes, top_logprobs}]}.
 *
 * Does not: parse the shared fields or run anything (openai.c, engine.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "io/json_util.h"
#include "server/api.h"
#include "server/chat.h"
#include "server/toolcall.h"
#include "server/toolcall_harmony.h"
#include "tokenizer/tok_messages.h"

/* ---- the prompt: messages through the chat template ------------------------------------ */

int moe8_oa_chat_messages_normalize(const cJSON *messages, const cJSON *tools, const cJSON *documents,
                            char **messages_json, char **tools_json, char **documents_json,
                            moe8_buf *err_body) {
    tok_messages_error e;
    const moe8_status st = moe8_chat_messages_normalize_cjson(messages, tools, documents, messages_json,
                                                              tools_json, documents_json, &e);
    if (st == MOE8_OK) return 0;
    if (st == MOE8_ERR_NOMEM) {
        moe8_oa_error(err_body, "server_error", NULL, NULL, "out of memory");
        return 500;
    }
    moe8_oa_error(err_body, "invalid_request_error", e.param, NULL, "%s", e.message);
    return 400;
}

/* The chat template over the conversation as JSON, into a malloc'd *out;
 * a 400 when it fails (its raise_exception, no template, ...). */
static int render_chat(srv *s, const char *msgs, const char *tools, const char *docs, int gen_prompt,
                       const char *kwargs, char **out, moe8_buf *err) {
    size_t cap = 4096 + 2 * (strlen(msgs) + (tools ? strlen(tools) : 0) + (docs ? strlen(docs) : 0)), need = 0;
    moe8_error e;
    moe8_status st = MOE8_ERR_NOMEM;
    const char *where;
    for (int k = 0; k < 2; k++) {
        if (!(*out = malloc(cap))) break;
        if ((st = moe8_chat_apply_json(s->tok, msgs, tools, docs, gen_prompt, kwargs, *out, cap, &need,
                                       &e)) == MOE8_OK)
            return 0;
        free(*out);
        *out = NULL;
        if (need < cap) break;
        cap = need + 1;
    }
    if (st == MOE8_ERR_NOMEM) return moe8_oa_bad(err, "messages", "out of memory");
    if (st == MOE8_ERR_NOT_FOUND)
        return moe8_oa_bad(err, "messages", "this model has no chat template (its tokenizer_config.json has "
                   "no chat_template); send a formatted prompt to /v1/completions");
    if (st == MOE8_ERR_INVALID_ARG) /* the template refused this conversation, or bad kwargs */
        return moe8_oa_bad(err, strstr(e.message, "kwargs") ? "chat_template_kwargs" : "messages", "%s",
                   e.message);
    /* one moe8 cannot use: the message starts with the file's path, which clients need not see */
    where = strstr(e.message, "chat template");
    return moe8_oa_bad(err, "messages", "the model's chat template cannot be used: %s", where ? where : e.message);
}

/* 1 if the rendered prompt ends inside an open <think> (DeepSeek-R1's template
 * writes "<think>\n" after the assistant tag): the answer starts as reasoning. */
static int ends_in_think(const char *p) {
    size_t n = strlen(p);
    while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\n' || p[n - 1] == '\r' || p[n - 1] == '\t')) n--;
    return n >= 7 && !memcmp(p + n - 7, "<think>", 7);
}

/* Reasoning is on for a chat prompt (vLLM's structured outputs then wait
 * for the reasoning parser's end): the template writes think blocks, the
 * template variables `kwargs` (JSON, may be NULL) do not switch thinking off
 * (enable_thinking false), and the prompt does not close the block itself
 * (Qwen3's "<think>\n\n</think>\n\n" with thinking off). */
static int reasoning_on(const srv *s, const char *kwargs, const char *prompt) {
    size_t n = strlen(prompt);
    if (!s->think_template) return 0;
    if (kwargs) {
        cJSON *kw = NULL;
        moe8_json_parse(kwargs, strlen(kwargs), "chat_template_kwargs", &kw, NULL); /* checked */
        const int off = cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(kw, "enable_thinking"));
        cJSON_Delete(kw);
        if (off) return 0;
    }
    while (n > 0 && (prompt[n - 1] == ' ' || prompt[n - 1] == '\n' || prompt[n - 1] == '\r' || prompt[n - 1] == '\t')) n--;
    return !(n >= 8 && !memcmp(prompt + n - 8, "</think>", 8));
}

static void set_kwarg(cJSON *o, const char *key, cJSON *v) {
    cJSON_DeleteItemFromObjectCaseSensitive(o, key);
    cJSON_AddItemToObject(o, key, v);
}

/* reasoning_effort (OpenAI's levels) into the template's switches: its
 * enable_thinking (Qwen3, GLM, ...: on from "low" up, off for "none" and
 * "minimal", as Responses' reasoning.effort does) and reasoning_effort
 * (gpt-oss's "Reasoning:" line, which knows low, medium and high: "none" and
 * "minimal" are its "low", "xhigh" and "max" its "high"). 0, or 400. */
static int effort_kwargs(srv *s, const cJSON *root, cJSON *merged, moe8_buf *err) {
    static const char *const EFFORTS[] = {"none", "minimal", "low", "medium", "high", "xhigh", "max", NULL};
    static const char *const HARMONY[] = {"low", "low", "low", "medium", "high", "high", "high"};
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(root, "reasoning_effort");
    int i = 0;
    if (!e || cJSON_IsNull(e)) return 0;
    while (EFFORTS[i] && !(cJSON_IsString(e) && !strcmp(e->valuestring, EFFORTS[i]))) i++;
    if (!EFFORTS[i])
        return moe8_oa_bad(err, "reasoning_effort", "'reasoning_effort' must be one of none, minimal, low, medium, "
                           "high, xhigh, max");
    set_kwarg(merged, "enable_thinking", cJSON_CreateBool(i >= 2));
    set_kwarg(merged, "reasoning_effort",
              cJSON_CreateString(s->tool_format == TOOLCALL_HARMONY ? HARMONY[i] : EFFORTS[i]));
    return 0;
}

/* gpt-oss: thinking switched off (enable_thinking false, Anthropic's
 * thinking disabled) is its lowest effort; a level it does not know is
 * its nearest one. */
static void harmony_effort(cJSON *merged) {
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(merged, "reasoning_effort");
    if (!e && cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(merged, "enable_thinking")))
        set_kwarg(merged, "reasoning_effort", cJSON_CreateString("low"));
    else if (cJSON_IsString(e) && (!strcmp(e->valuestring, "none") || !strcmp(e->valuestring, "minimal")))
        set_kwarg(merged, "reasoning_effort", cJSON_CreateString("low"));
    else if (cJSON_IsString(e) && (!strcmp(e->valuestring, "xhigh") || !strcmp(e->valuestring, "max")))
        set_kwarg(merged, "reasoning_effort", cJSON_CreateString("high"));
}

/* The request's template variables: its chat_template_kwargs over its
 * reasoning_effort over --default-chat-template-kwargs; *kwargs NULL when
 * none. */
static int template_kwargs(srv *s, const cJSON *root, char **kwargs, moe8_buf *err) {
    const cJSON *kw = cJSON_GetObjectItemCaseSensitive(root, "chat_template_kwargs"), *it,
                *effort = cJSON_GetObjectItemCaseSensitive(root, "reasoning_effort");
    cJSON *merged;
    int thinking = 1, rc;
    *kwargs = NULL;
    if (kw && !cJSON_IsNull(kw) && !cJSON_IsObject(kw))
        return moe8_oa_bad(err, "chat_template_kwargs", "'chat_template_kwargs' must be an object, got %s",
                      moe8_json_type_name(kw));
    if (!(kw && cJSON_IsObject(kw)) && !s->default_kwargs && (!effort || cJSON_IsNull(effort))) return 0;
    if (kw && cJSON_IsObject(kw) && (rc = moe8_oa_get_bool(kw, "enable_thinking", &thinking, err))) return rc;
    merged = s->default_kwargs ? cJSON_Duplicate(s->default_kwargs, 1) : cJSON_CreateObject();
    if (merged && (rc = effort_kwargs(s, root, merged, err))) {
        cJSON_Delete(merged);
        return rc;
    }
    if (merged && kw && cJSON_IsObject(kw))
        cJSON_ArrayForEach(it, kw) set_kwarg(merged, it->string, cJSON_Duplicate(it, 1));
    if (merged && s->tool_format == TOOLCALL_HARMONY) harmony_effort(merged);
    *kwargs = merged ? cJSON_PrintUnformatted(merged) : NULL;
    cJSON_Delete(merged);
    return *kwargs ? 0 : moe8_oa_bad(err, "chat_template_kwargs", "out of memory");
}

/* The chat prompt's ids: the messages as the client sent them (chat.c),
 * the tools (unless `no_tools`) and documents, through the model's template;
 * *open_think (may be NULL) = ends_in_think of its text, *reasoning (may be
 * NULL) = reasoning_on. */
int moe8_oa_chat_prompt(srv *s, const cJSON *root, int gen_prompt, int no_tools, int32_t **ids, int32_t *n,
                        int *open_think, int *reasoning, moe8_buf *err) {
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(root, "messages");
    char *mj = NULL, *tj = NULL, *dj = NULL, *kwargs = NULL, *out = NULL;
    int rc;
    if (!msgs) return moe8_oa_bad(err, "messages", "'messages' is required");
    if (!cJSON_IsArray(msgs)) return moe8_oa_bad(err, "messages", "'messages' must be an array, got %s", moe8_json_type_name(msgs));
    if (cJSON_GetArraySize(msgs) == 0) return moe8_oa_bad(err, "messages", "'messages' must not be empty");
    if ((rc = template_kwargs(s, root, &kwargs, err))) return rc;
    rc = moe8_oa_chat_messages_normalize(msgs, no_tools ? NULL : cJSON_GetObjectItemCaseSensitive(root, "tools"),
                                 cJSON_GetObjectItemCaseSensitive(root, "documents"), &mj, &tj, &dj, err);
    if (!rc && s->tool_format == TOOLCALL_HARMONY &&
        (moe8_harmony_messages(&mj) != 0 || (tj && moe8_harmony_tools(&tj) != 0)))
        rc = moe8_oa_bad(err, "messages", "out of memory");
    if (!rc) rc = render_chat(s, mj, tj, dj, gen_prompt, kwargs, &out, err);
    if (!rc && open_think) *open_think = gen_prompt && ends_in_think(out);
    if (!rc && reasoning) *reasoning = gen_prompt && reasoning_on(s, kwargs, out);
    if (!rc) rc = moe8_oa_tokenize_text(s, out, 0, ids, n, "messages", err);
    free(mj);
    free(tj);
    free(dj);
    free(out);
    cJSON_free(kwargs);
    return rc;
}

/* ---- request ------------------------------------------------------------------------------ */

static int chat_logprobs(const cJSON *root, job *j, moe8_buf *err) {
    double x;
    int rc, has, on = 0;
    if ((rc = moe8_oa_get_bool(root, "logprobs", &on, err))) return rc;
    if ((rc = moe8_oa_get_num(root, "top_logprobs", 0, MOE8_MAX_LOGPROBS, 0, 1, &x, &has, err))) return rc;
    if (has && !on) return moe8_oa_bad(err, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
    j->chat_logprobs = on;
    if (on) j->rq.logprobs = has ? (int32_t)x : 0;
    return 0;
}

int moe8_oa_chat_request_prompt(srv *s, const cJSON *root, job *j, oa_req *r, moe8_buf *err) {
    int open = 0, rc;
    (void)r;
    if ((rc = moe8_tools_parse(s, root, j, err))) return rc;
    if (s->tool_format == TOOLCALL_HARMONY && !j->tc) { /* its channels are read with or without tools */
        j->tool_format = TOOLCALL_HARMONY;
        if (!(j->tc = moe8_toolcall_new(TOOLCALL_HARMONY, NULL))) return moe8_oa_bad(err, "messages", "out of memory");
    }
    rc = moe8_oa_chat_prompt(s, root, 1, 0, &j->prompt, &j->n_prompt, &open, &j->thinking, err);
    j->think = open ? 3 : 0;
    if (rc) return rc;
    if (j->n_prompt < 1) return moe8_oa_bad(err, "messages", "the prompt is empty");
    return 0;
}

/* ---- output: reasoning split --------------------------------------------------------------- */

/* Longest tail of b[0..n) that is a proper prefix of tag. */
static size_t tag_tail(const char *b, size_t n, const char *tag) {
    size_t t = strlen(tag);
    for (size_t k = t - 1 < n ? t - 1 : n; k > 0; k--)
        if (!memcmp(b + n - k, tag, k)) return k;
    return 0;
}

/* Split new chat text into content and reasoning (appended); `final`
 * releases what was held. */
static void think_split(job *j, int append, const char *txt, size_t n, moe8_buf *content, moe8_buf *reason,
                        int final) {
    moe8_buf in = {0};
    size_t at = 0;
    moe8_buf_add(&in, j->hold.p ? j->hold.p : "", j->hold.n);
    moe8_buf_add(&in, txt, n);
    j->hold.n = 0;
    if (append && j->think != 4) { /* minimax_m2_append_think: content whole, from the prompt's <think> */
        if (j->think == 3) moe8_buf_str(content, "<think>");
        j->think = 4;
    }
    if (j->think == 3) { /* opened by the prompt: a <think> the model writes anyway is dropped */
        const size_t m = in.n < 7 ? in.n : 7;
        if (!memcmp(in.p, "<think>", m) && m < 7 && !final) { /* undecided: hold it */
            moe8_buf_add(&j->hold, in.p, in.n);
            moe8_buf_free(&in);
            return;
        }
        if (m == 7 && !memcmp(in.p, "<think>", 7)) at = 7;
        j->think = 1;
    }
    if (j->think == 0 && !j->thinking) { /* thinking off: a think block only where the answer starts */
        const size_t m = in.n < 7 ? in.n : 7;
        if ((m && memcmp(in.p, "<think>", m)) || (m < 7 && final)) j->think = 4; /* none: all content */
        else if (m < 7) {                                                 /* undecided: hold it */
            moe8_buf_add(&j->hold, in.p, in.n);
            moe8_buf_free(&in);
            return;
        }
    }
    while (at < in.n) {
        const char *tag = j->think == 1 ? "</think>" : "<think>";
        const char *rest = in.p + at,
                   *hit = j->think >= 2 ? NULL : memmem(rest, in.n - at, tag, strlen(tag));
        moe8_buf *dst = j->think == 1 ? reason : content;
        size_t len = in.n - at, keep;
        if (hit) {
            moe8_buf_add(dst, rest, (size_t)(hit - rest));
            at += (size_t)(hit - rest) + strlen(tag);
            j->think++;
            continue;
        }
        keep = j->think >= 2 || final ? 0 : tag_tail(rest, len, tag);
        moe8_buf_add(dst, rest, len - keep);
        moe8_buf_add(&j->hold, rest + len - keep, keep);
        break;
    }
    moe8_buf_free(&in);
}


/* ---- output: chat's JSON ------------------------------------------------------------------- */

static void chat_start(srv *s, job *j) {
    if (j->stream) {
        cJSON *root = moe8_oa_envelope(s, j, "chat.completion.chunk");
        cJSON *c = cJSON_CreateObject(), *d = cJSON_AddObjectToObject(c, "delta");
        cJSON_AddNumberToObject(c, "index", j->index);
        cJSON_AddStringToObject(d, "role", "assistant");
        cJSON_AddStringToObject(d, "content", "");
        cJSON_AddNullToObject(c, "logprobs");
        cJSON_AddNullToObject(c, "finish_reason");
        cJSON_AddItemToArray(cJSON_AddArrayToObject(root, "choices"), c);
        moe8_oa_sse(j, root);
    }
}

void moe8_oa_chat_split(srv *s, job *j, const char *txt, size_t n, moe8_buf *content, moe8_buf *reason,
                        int final) {
    if (s->tool_format == TOOLCALL_HARMONY) { /* its parser (j->tc) splits the channels */
        moe8_buf_add(content, txt, n);
        return;
    }
    think_split(j, s->think_append, txt, n, content, reason, final);
}

static cJSON *chat_new_logprobs(void) {
    cJSON *lp = cJSON_CreateObject();
    cJSON_AddArrayToObject(lp, "content");
    return lp;
}

static void chat_add_logprobs(srv *s, job *j, cJSON *lp, const moe8_event *e) {
    cJSON *content = cJSON_GetObjectItem(lp, "content"), *ent = moe8_oa_token_entry(s, e->token, e->logprob, 1);
    cJSON *top = cJSON_AddArrayToObject(ent, "top_logprobs");
    (void)j;
    for (int32_t k = 0; k < e->n_top; k++)
        cJSON_AddItemToArray(top, moe8_oa_token_entry(s, e->top[k].token, e->top[k].logprob, 1));
    cJSON_AddItemToArray(content, ent);
}

/* A chunk's delta: reasoning_content, content (also when nothing else is
 * there), tool_calls. */
static void chat_delta(cJSON *c, const char *content, size_t nc, const char *reason, size_t nr,
                       const char *finish, cJSON *tool_deltas) {
    cJSON *d = cJSON_AddObjectToObject(c, "delta");
    if (nr) moe8_oa_json_text(d, "reasoning_content", reason, nr);
    if (nc || (!nr && !finish && !tool_deltas)) moe8_oa_json_text(d, "content", content ? content : "", nc);
    if (tool_deltas) cJSON_AddItemToObject(d, "tool_calls", tool_deltas);
}

/* A whole choice's message {role, content, tool_calls, reasoning_content} and log-probs. */
static void chat_choice(job *j, cJSON *c) {
    cJSON *m = cJSON_AddObjectToObject(c, "message");
    cJSON_AddStringToObject(m, "role", "assistant");
    if (j->calls && cJSON_GetArraySize(j->calls) && !j->text.n) cJSON_AddNullToObject(m, "content");
    else moe8_oa_json_text(m, "content", j->text.p ? j->text.p : "", j->text.n);
    if (j->calls && cJSON_GetArraySize(j->calls)) {
        cJSON_AddItemToObject(m, "tool_calls", j->calls);
        j->calls = NULL;
    }
    if (j->reasoning.n) moe8_oa_json_text(m, "reasoning_content", j->reasoning.p, j->reasoning.n);
    else cJSON_AddNullToObject(m, "reasoning_content");
    if (j->lp_json) cJSON_AddItemToObject(c, "logprobs", j->lp_json);
    else cJSON_AddNullToObject(c, "logprobs");
    j->lp_json = NULL;
}

const oa_api moe8_oa_chat = {
    .kind = JOB_CHAT,
    .id_prefix = "chatcmpl",
    .object = "chat.completion",
    .chunk_object = "chat.completion.chunk",
    .prompt_param = "messages",
    .max_alias = "max_completion_tokens",
    .default_max = 0, /* the rest of the context, within what the KV cache holds */
    .options = NULL,
    .logprobs = chat_logprobs,
    .prompt = moe8_oa_chat_request_prompt,
    .start = chat_start,
    .split = moe8_oa_chat_split,
    .new_logprobs = chat_new_logprobs,
    .add_logprobs = chat_add_logprobs,
    .delta = chat_delta,
    .choice = chat_choice,
};
