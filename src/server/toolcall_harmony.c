/*
 * toolcall_harmony.c — gpt-oss's output in the harmony format (OpenAI's
 * openai/harmony docs/format.md; the chat template tests/data/jinja/
 * gpt_oss.jinja) read as it streams into reasoning, tool calls and content.
 *
 * The prompt ends in "<|start|>assistant"; the model then writes messages
 *     HEADER <|message|> BODY END
 *     HEADER = [" to=" RECIPIENT] "<|channel|>" CHANNEL [" to=" RECIPIENT] [" " ["<|constrain|>"] TYPE]
 *              (the parts in any order after the first; the role "assistant" after <|start|>)
 *     END    = <|end|> (more follows: "<|start|>assistant" HEADER ...) | <|call|> | <|return|>
 * (the stop tokens <|call|> and <|return|> may be cut by the engine: the
 * output's end ends the message too). What each message becomes, as vLLM's
 * harmony path and llama.cpp's gpt-oss parser read them:
 *     analysis                       -> reasoning (whatever its recipient: built-in tools
 *                                       are called from it, and moe8 runs none)
 *     commentary to=functions.NAME   -> a tool call NAME, the body its JSON arguments
 *                                       (streamed as written, less whitespace before
 *                                       and after the JSON; at the end a body that is
 *                                       not a JSON object ends the call with ok 0 and
 *                                       comes out as content)
 *     final, commentary otherwise    -> content (commentary without a recipient is a
 *                                       preamble the user may see)
 * A call is a call only when the request has tools; without, its body is
 * content. "<|start|>" inside a body ends the message too (a model that
 * skipped <|end|>).
 *
 * Malformed output falls back to text, never dropped: a header that does
 * not parse (no channel, an unknown channel, no <|message|> within 512
 * bytes, an output that does not begin like a header at all) comes out as
 * content as written, and its body with it; text between messages that is
 * not "<|start|>" is content. A marker split across pieces is held back
 * until it is decided, so any split of the output gives the same events.
 *
 * Also the template's input as moe8_harmony_messages / moe8_harmony_tools
 * make it (toolcall_harmony.h).
 *
 * Does not: make call ids, check a name against the request's tools (the
 * caller's), or run built-in tools (browser, python).
 */
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "server/toolcall_harmony.h"

#define HDR_MAX 512

enum { M_HEADER, M_BODY, M_BETWEEN, M_RAW };            /* where the parser is */
enum { K_REASON, K_CONTENT, K_CALL };                   /* what a body becomes */
enum { O_NONE, O_CONTENT, O_REASON, O_ARGS };           /* held output's kind */

static const char *const END_MARKS[] = {"<|end|>", "<|call|>", "<|return|>", "<|start|>"};
#define START "<|start|>"
#define MESSAGE "<|message|>"
#define CHANNEL "<|channel|>"
#define CONSTRAIN "<|constrain|>"

struct tch {
    cJSON *tools;           /* the request's tools, or NULL: no calls */
    int mode, kind;
    moe8_buf hdr;           /* M_HEADER: the header so far */
    moe8_buf tail;          /* M_BODY, M_BETWEEN: a tail that may begin a marker */
    moe8_buf args;          /* K_CALL: the arguments so far */
    moe8_buf ws;            /* K_CALL: whitespace after the last other byte, held back */
    int n_calls, cur, args_started;
    /* output not yet handed to the sink: one kind at a time */
    moe8_buf out;
    int out_kind, oom;
    const toolcall_sink *k;
};

/* ---- output ------------------------------------------------------------------------------ */

static void flush(tch *h) {
    const toolcall_sink *k = h->k;
    if (h->out.n) {
        if (h->out_kind == O_CONTENT && k->content) k->content(k->u, h->out.p, h->out.n);
        if (h->out_kind == O_REASON && k->reasoning) k->reasoning(k->u, h->out.p, h->out.n);
        if (h->out_kind == O_ARGS && k->call_args) k->call_args(k->u, h->cur, h->out.p, h->out.n);
    }
    h->out.n = 0;
    h->out_kind = O_NONE;
}

static void put(tch *h, int kind, const char *s, size_t n) {
    if (!n) return;
    if (h->out_kind != kind) flush(h);
    h->out_kind = kind;
    if (moe8_buf_add(&h->out, s, n)) h->oom = 1;
}

/* ---- the header ---------------------------------------------------------------------------- */

static int starts(const char *s, size_t n, const char *lit) {
    const size_t m = strlen(lit);
    return n >= m && !memcmp(s, lit, m);
}

/* s[0..n) is a prefix of lit, or lit a prefix of s[0..n). */
static int agrees(const char *s, size_t n, const char *lit) {
    const size_t m = strlen(lit);
    return !memcmp(s, lit, n < m ? n : m);
}

/* Past an optional "<|start|>" and role "assistant" at the header's front. */
static size_t skip_role(const char *s, size_t n) {
    size_t i = 0;
    if (starts(s, n, START)) i += strlen(START);
    if (starts(s + i, n - i, "assistant")) i += strlen("assistant");
    return i;
}

/* Could the header so far still begin a valid one? (Checked on its first
 * bytes, so text that is not harmony is shown at once.) */
static int header_plausible(const char *s, size_t n) {
    size_t i = 0;
    if (agrees(s, n, START)) {
        if (n < strlen(START)) return 1;
        i = strlen(START);
    }
    if (agrees(s + i, n - i, "assistant")) {
        if (n - i < strlen("assistant")) return 1;
        i += strlen("assistant");
    }
    while (i < n && s[i] == ' ') i++;
    return i == n || agrees(s + i, n - i, CHANNEL) || agrees(s + i, n - i, "to=");
}

static size_t word(const char *s, size_t n, size_t i) {
    while (i < n && s[i] != ' ' && s[i] != '<') i++;
    return i;
}

/* The header s[0..n) (without <|message|>): its kind and, for a call, the
 * function's name (*name, *n_name). 0, or -1 when it does not parse. */
static int parse_header(const tch *h, const char *s, size_t n, int *kind, const char **name, size_t *n_name) {
    const char *chan = NULL, *rcpt = NULL;
    size_t n_chan = 0, n_rcpt = 0, i = skip_role(s, n), e;
    int constrained = 0;
    while (i < n) {
        if (s[i] == ' ') {
            i++;
        } else if (starts(s + i, n - i, "to=")) {
            e = word(s, n, i + 3);
            if (rcpt || e == i + 3) return -1;
            rcpt = s + i + 3, n_rcpt = e - i - 3, i = e;
        } else if (starts(s + i, n - i, CHANNEL)) {
            i += strlen(CHANNEL);
            e = word(s, n, i);
            if (chan || e == i) return -1;
            chan = s + i, n_chan = e - i, i = e;
        } else if (starts(s + i, n - i, CONSTRAIN)) {
            i += strlen(CONSTRAIN);
            constrained = 1;
        } else if ((chan || constrained) && s[i] != '<') {
            i = word(s, n, i); /* the content type: json, code, ... */
        } else {
            return -1;
        }
    }
    if (!chan) return -1;
    if (n_chan == 8 && !memcmp(chan, "analysis", 8)) *kind = K_REASON;
    else if ((n_chan == 5 && !memcmp(chan, "final", 5)) || (n_chan == 10 && !memcmp(chan, "commentary", 10)))
        *kind = K_CONTENT;
    else return -1;
    if (*kind == K_CONTENT && rcpt && h->tools && n_rcpt > 10 && !memcmp(rcpt, "functions.", 10)) {
        *kind = K_CALL;
        *name = rcpt + 10;
        *n_name = n_rcpt - 10;
    }
    return 0;
}

/* The header is complete (hdr ends in <|message|>): the body begins. */
static void header_done(tch *h) {
    const size_t n = h->hdr.n - strlen(MESSAGE);
    const char *name = NULL;
    size_t n_name = 0;
    int kind;
    if (parse_header(h, h->hdr.p, n, &kind, &name, &n_name) != 0) {
        put(h, O_CONTENT, h->hdr.p, h->hdr.n); /* malformed: shown as written, its body too */
        kind = K_CONTENT;
    } else if (kind == K_CALL) {
        flush(h);
        h->cur = h->n_calls++;
        if (h->k->call_begin) h->k->call_begin(h->k->u, h->cur, name, n_name);
        h->args.n = h->ws.n = 0;
        h->args_started = 0;
    }
    h->hdr.n = 0;
    h->kind = kind;
    h->mode = M_BODY;
}

/* ---- the body ------------------------------------------------------------------------------ */

static int is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

static void body_text(tch *h, const char *s, size_t n) {
    if (!n) return;
    if (h->kind == K_REASON) put(h, O_REASON, s, n);
    else if (h->kind == K_CONTENT) put(h, O_CONTENT, s, n);
    else {
        size_t i = 0;
        if (!h->args_started) /* whitespace before the JSON is not the arguments' */
            while (i < n && is_ws(s[i])) i++;
        if (i < n) h->args_started = 1;
        if (moe8_buf_add(&h->args, s + i, n - i)) h->oom = 1;
        for (; i < n; i++) { /* nor is whitespace after it: held until more follows */
            if (is_ws(s[i])) {
                if (moe8_buf_add(&h->ws, s + i, 1)) h->oom = 1;
                continue;
            }
            put(h, O_ARGS, h->ws.p, h->ws.n);
            h->ws.n = 0;
            put(h, O_ARGS, s + i, 1);
        }
    }
}

/* The body ended (a marker, or the output's end). */
static void body_done(tch *h) {
    if (h->kind == K_CALL) {
        cJSON *a;
        int ok;
        if (!h->args_started) put(h, O_ARGS, "{}", 2);
        a = h->args_started ? cJSON_ParseWithLength(h->args.p, h->args.n) : NULL;
        ok = !h->args_started || cJSON_IsObject(a);
        cJSON_Delete(a);
        flush(h);
        if (h->k->call_end) h->k->call_end(h->k->u, h->cur, ok);
        if (!ok) put(h, O_CONTENT, h->args.p, h->args.n);
        h->args.n = h->ws.n = 0;
    }
    h->kind = K_CONTENT;
}

/* One byte of a body (or of the text between messages, where only
 * <|start|> is a marker): markers are held back until decided. */
static void body_byte(tch *h, unsigned char c) {
    const int between = h->mode == M_BETWEEN;
    if (moe8_buf_add(&h->tail, (const char *)&c, 1)) {
        h->oom = 1;
        return;
    }
    for (;;) {
        int prefix = 0;
        for (size_t m = between ? 3 : 0; m < 4; m++) {
            const char *mk = END_MARKS[m];
            if (h->tail.n == strlen(mk) && !memcmp(h->tail.p, mk, h->tail.n)) {
                h->tail.n = 0;
                if (!between) body_done(h);
                if (m == 3) { /* <|start|>: the next header */
                    h->mode = M_HEADER;
                    moe8_buf_add(&h->hdr, START, strlen(START));
                } else {
                    h->mode = M_BETWEEN;
                }
                return;
            }
            if (agrees(h->tail.p, h->tail.n, mk)) prefix = 1;
        }
        if (prefix) return;
        /* the first byte is text; the rest may still begin a marker */
        if (between) put(h, O_CONTENT, h->tail.p, 1);
        else body_text(h, h->tail.p, 1);
        memmove(h->tail.p, h->tail.p + 1, --h->tail.n);
        if (!h->tail.n) return;
    }
}

/* ---- the machine --------------------------------------------------------------------------- */

static void step(tch *h, unsigned char c) {
    switch (h->mode) {
    case M_HEADER:
        if (moe8_buf_add(&h->hdr, (const char *)&c, 1)) {
            h->oom = 1;
            return;
        }
        if (h->hdr.n >= strlen(MESSAGE) && !memcmp(h->hdr.p + h->hdr.n - strlen(MESSAGE), MESSAGE, strlen(MESSAGE)))
            header_done(h);
        else if (h->hdr.n > HDR_MAX || !header_plausible(h->hdr.p, h->hdr.n)) {
            put(h, O_CONTENT, h->hdr.p, h->hdr.n); /* not harmony: shown as written, from here on */
            h->hdr.n = 0;
            h->mode = M_RAW;
        }
        return;
    case M_BODY:
    case M_BETWEEN: body_byte(h, c); return;
    default: put(h, O_CONTENT, (const char *)&c, 1); return;
    }
}

/* ---- the API --------------------------------------------------------------------------------- */

tch *moe8_tch_new(const cJSON *tools) {
    tch *h = calloc(1, sizeof *h);
    if (!h) return NULL;
    if (tools && !(h->tools = cJSON_Duplicate(tools, 1))) {
        free(h);
        return NULL;
    }
    h->mode = M_HEADER;
    h->kind = K_CONTENT;
    return h;
}

int moe8_tch_feed(tch *h, const char *s, size_t n, const toolcall_sink *k) {
    if (!h || h->oom) return -1;
    h->k = k;
    for (size_t i = 0; i < n && !h->oom; i++) step(h, (unsigned char)s[i]);
    if (!h->oom) flush(h);
    return h->oom ? -1 : 0;
}

int moe8_tch_finish(tch *h, const toolcall_sink *k) {
    if (!h || h->oom) return -1;
    h->k = k;
    if (h->mode == M_HEADER) put(h, O_CONTENT, h->hdr.p, h->hdr.n); /* a header cut short: as written */
    if (h->mode == M_BETWEEN) put(h, O_CONTENT, h->tail.p, h->tail.n);
    if (h->mode == M_BODY) {
        body_text(h, h->tail.p, h->tail.n);
        body_done(h);
    }
    h->hdr.n = h->tail.n = 0;
    h->mode = M_RAW;
    flush(h);
    return h->oom ? -1 : 0;
}

int moe8_tch_count(const tch *h) { return h ? h->n_calls : 0; }

const cJSON *moe8_tch_tools(const tch *h) { return h ? h->tools : NULL; }

void moe8_tch_free(tch *h) {
    if (!h) return;
    cJSON_Delete(h->tools);
    moe8_buf_free(&h->hdr);
    moe8_buf_free(&h->tail);
    moe8_buf_free(&h->args);
    moe8_buf_free(&h->ws);
    moe8_buf_free(&h->out);
    free(h);
}

/* ---- the template's input ---------------------------------------------------------------- */

int moe8_harmony_template(const char *source) {
    return source && strstr(source, CHANNEL) && strstr(source, MESSAGE);
}

int moe8_harmony_tools(char **json) {
    cJSON *tools = cJSON_Parse(*json), *t;
    char *out;
    if (!cJSON_IsArray(tools)) {
        cJSON_Delete(tools);
        return -1;
    }
    cJSON_ArrayForEach(t, tools) {
        cJSON *f = cJSON_GetObjectItemCaseSensitive(t, "function");
        if (cJSON_IsObject(f) && !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(f, "description"))) {
            cJSON_DeleteItemFromObjectCaseSensitive(f, "description");
            cJSON_AddStringToObject(f, "description", "");
        }
    }
    out = cJSON_PrintUnformatted(tools);
    cJSON_Delete(tools);
    if (!out) return -1;
    free(*json);
    *json = out;
    return 0;
}

/* Assistant message m with one of its calls, c: the first keeps the rest of m. */
static cJSON *one_call(const cJSON *m, const cJSON *c, int first) {
    cJSON *a = first ? cJSON_Duplicate(m, 1) : cJSON_CreateObject(), *calls = cJSON_CreateArray();
    if (!first) {
        cJSON_AddStringToObject(a, "role", "assistant");
        cJSON_AddStringToObject(a, "content", "");
    }
    cJSON_DeleteItemFromObjectCaseSensitive(a, "tool_calls");
    cJSON_AddItemToArray(calls, cJSON_Duplicate(c, 1));
    cJSON_AddItemToObject(a, "tool_calls", calls);
    return a;
}

static int is_role(const cJSON *m, const char *role) {
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(m, "role");
    return cJSON_IsString(r) && !strcmp(r->valuestring, role);
}

/* An assistant turn of several calls (msgs[i], its results after it up to
 * msgs[j]) into out as one turn per call, each followed by its result: the
 * one of the call's id, else the next one left; results left over after. */
static void split_calls(const cJSON *msgs, int i, int j, cJSON *out) {
    const cJSON *m = cJSON_GetArrayItem(msgs, i), *c;
    char used[64] = {0}; /* results taken, by offset from i + 1 (a turn of more is left whole) */
    int k = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(m, "tool_calls")) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(c, "id");
        int take = -1;
        cJSON_AddItemToArray(out, one_call(m, c, k++ == 0));
        for (int r = i + 1; r < j && take < 0 && cJSON_IsString(id); r++) {
            const cJSON *tid = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(msgs, r), "tool_call_id");
            if (!used[r - i - 1] && cJSON_IsString(tid) && !strcmp(tid->valuestring, id->valuestring)) take = r;
        }
        for (int r = i + 1; r < j && take < 0; r++)
            if (!used[r - i - 1]) take = r;
        if (take >= 0) {
            used[take - i - 1] = 1;
            cJSON_AddItemToArray(out, cJSON_Duplicate(cJSON_GetArrayItem(msgs, take), 1));
        }
    }
    for (int r = i + 1; r < j; r++)
        if (!used[r - i - 1]) cJSON_AddItemToArray(out, cJSON_Duplicate(cJSON_GetArrayItem(msgs, r), 1));
}

int moe8_harmony_messages(char **json) {
    cJSON *msgs = cJSON_Parse(*json), *m, *out;
    char *text;
    int n, i = 0;
    if (!cJSON_IsArray(msgs)) {
        cJSON_Delete(msgs);
        return -1;
    }
    cJSON_ArrayForEach(m, msgs) { /* reasoning as `thinking` */
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(m, "reasoning_content"),
                    *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls"),
                    *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        const int with_content = cJSON_IsString(content) && content->valuestring[0];
        if (!is_role(m, "assistant") || !cJSON_IsString(r) || cJSON_GetObjectItemCaseSensitive(m, "thinking"))
            continue;
        if (cJSON_GetArraySize(calls) > 0 && with_content) continue;
        cJSON_AddStringToObject(m, "thinking", r->valuestring);
    }
    out = cJSON_CreateArray();
    n = cJSON_GetArraySize(msgs);
    while (i < n) { /* one call per assistant turn, its result after it */
        const cJSON *mi = cJSON_GetArrayItem(msgs, i);
        int j = i + 1;
        while (j < n && is_role(cJSON_GetArrayItem(msgs, j), "tool")) j++;
        if (is_role(mi, "assistant") && cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(mi, "tool_calls")) > 1 &&
            j - i - 1 <= 64) {
            split_calls(msgs, i, j, out);
            i = j;
        } else {
            cJSON_AddItemToArray(out, cJSON_Duplicate(mi, 1));
            i++;
        }
    }
    text = cJSON_PrintUnformatted(out);
    cJSON_Delete(msgs);
    cJSON_Delete(out);
    if (!text) return -1;
    free(*json);
    *json = text;
    return 0;
}
