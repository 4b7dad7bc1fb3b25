/*
 * api_completions.c — /v1/completions of moe8 serve (OpenAI's legacy
 * completions): object "text_completion", whole or streamed (api.h's hooks;
 * openai.c runs the request and output path they plug into).
 *
 * The prompt is one string (tokenized with BOS when the tokenizer asks for
 * it) or one array of token ids; several prompts in one request are
 * refused. echo puts the prompt's text before the answer (a string prompt
 * as sent, ids decoded), and with logprobs its prompt log-probs first (its
 * first token has none), scored by the engine's prompt-logits events.
 * Log-probs: {tokens, token_logprobs, top_logprobs, text_offset}, the
 * alternatives a {token text: log-prob} object (the first of equal texts
 * kept).
 *
 * Does not: parse the shared fields or run anything (openai.c, engine.c).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "server/api.h"

/* ---- request ------------------------------------------------------------------------------ */

int moe8_oa_prompt_ids(srv *s, const cJSON *root, int32_t **ids, int32_t *n, moe8_buf *err) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    if (!p || cJSON_IsNull(p)) return moe8_oa_bad(err, "prompt", "'prompt' is required");
    if (cJSON_IsString(p)) return moe8_oa_tokenize_text(s, p->valuestring, 1, ids, n, "prompt", err);
    if (cJSON_IsArray(p) && cJSON_GetArraySize(p) > 0) {
        const cJSON *first = cJSON_GetArrayItem(p, 0);
        if (cJSON_IsString(first)) {
            if (cJSON_GetArraySize(p) > 1)
                return moe8_oa_bad(err, "prompt", "'prompt' holds %d prompts; one prompt per request is "
                           "supported", cJSON_GetArraySize(p));
            return moe8_oa_tokenize_text(s, first->valuestring, 1, ids, n, "prompt", err);
        }
        if (cJSON_IsArray(first))
            return moe8_oa_bad(err, "prompt", "'prompt' as an array of token arrays (several prompts) is "
                       "not supported; send one prompt per request");
        return moe8_oa_ids_from_array(s, p, ids, n, "prompt", err);
    }
    return moe8_oa_bad(err, "prompt", "'prompt' must be a string or a non-empty array of token ids, got %s",
               cJSON_IsArray(p) ? "an empty array" : moe8_json_type_name(p));
}

static int completion_options(const cJSON *root, job *j, oa_req *r, moe8_buf *err) {
    (void)j;
    return moe8_oa_get_bool(root, "echo", &r->echo, err);
}

static int completion_logprobs(const cJSON *root, job *j, moe8_buf *err) {
    double x;
    int rc, has;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "logprobs");
    if (v && cJSON_IsBool(v))
        return moe8_oa_bad(err, "logprobs", "'logprobs' of a completion must be an integer in [0, %d]",
                      MOE8_MAX_LOGPROBS);
    if ((rc = moe8_oa_get_num(root, "logprobs", 0, MOE8_MAX_LOGPROBS, 0, 1, &x, &has, err))) return rc;
    if (has) j->rq.logprobs = (int32_t)x;
    return 0;
}

/* Echo: the prompt's text as the answer's start (a string prompt as sent,
 * token ids decoded). */
static int echo_text(srv *s, job *j, moe8_buf *err) {
    size_t need = 0;
    moe8_detokenize(s->tok, j->prompt, (size_t)j->n_prompt, 0, NULL, 0, &need, NULL);
    if (!(j->echo = malloc(need + 1)) ||
        moe8_detokenize(s->tok, j->prompt, (size_t)j->n_prompt, 0, j->echo, need + 1, &need, NULL) != MOE8_OK)
        return moe8_oa_bad(err, "echo", "out of memory");
    j->n_echo = need;
    j->n_offset = (int32_t)need; /* the completion's text offsets follow the echo */
    return 0;
}

static int completion_prompt(srv *s, const cJSON *root, job *j, oa_req *r, moe8_buf *err) {
    int rc = moe8_oa_prompt_ids(s, root, &j->prompt, &j->n_prompt, err);
    if (rc) return rc;
    if (j->n_prompt < 1) return moe8_oa_bad(err, "prompt", "the prompt is empty");
    if (r->echo && (rc = echo_text(s, j, err))) return rc;
    return 0;
}

/* ---- log-probs ----------------------------------------------------------------------------- */

static cJSON *completion_new_logprobs(void) {
    cJSON *lp = cJSON_CreateObject();
    cJSON_AddArrayToObject(lp, "tokens");
    cJSON_AddArrayToObject(lp, "token_logprobs");
    cJSON_AddArrayToObject(lp, "top_logprobs");
    cJSON_AddArrayToObject(lp, "text_offset");
    return lp;
}

/* One token's entries, at text offset j->n_offset. */
static void completion_add_logprobs(srv *s, job *j, cJSON *lp, const moe8_event *e) {
    /* {token text: log-prob} of the alternatives, the first of equal texts kept;
     * written as JSON text, as the keys may hold NUL */
    cJSON *ent = moe8_oa_token_entry(s, e->token, e->logprob, 0);
    moe8_buf top = {0}, key = {0};
    size_t keys[MOE8_MAX_LOGPROBS + 1][2];
    int n_keys = 0;
    cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "tokens"), cJSON_Duplicate(cJSON_GetObjectItem(ent, "token"), 1));
    cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "token_logprobs"), cJSON_CreateNumber(e->logprob));
    moe8_buf_add(&top, "{", 1);
    for (int32_t k = 0; k < e->n_top && k <= MOE8_MAX_LOGPROBS; k++) {
        size_t nb = 0, at = key.n;
        const char *b = moe8_tokenizer_token_bytes(s->tok, e->top[k].token, &nb, NULL);
        int seen = 0;
        moe8_buf_json_str(&key, b ? b : "", b ? nb : 0, MOE8_JSON_LOSSY);
        for (int q = 0; q < n_keys && !seen; q++)
            seen = keys[q][1] == key.n - at && !memcmp(key.p + keys[q][0], key.p + at, key.n - at);
        if (seen) continue;
        keys[n_keys][0] = at, keys[n_keys][1] = key.n - at, n_keys++;
        {
            cJSON *num = cJSON_CreateNumber(e->top[k].logprob);
            char *txt = cJSON_PrintUnformatted(num);
            if (n_keys > 1) moe8_buf_add(&top, ",", 1);
            moe8_buf_add(&top, key.p + at, key.n - at);
            moe8_buf_add(&top, ":", 1);
            moe8_buf_str(&top, txt ? txt : "0");
            free(txt);
            cJSON_Delete(num);
        }
    }
    moe8_buf_add(&top, "}", 1);
    cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "top_logprobs"), cJSON_CreateRaw(top.p));
    moe8_buf_free(&top);
    moe8_buf_free(&key);
    cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "text_offset"), cJSON_CreateNumber(j->n_offset));
    cJSON_Delete(ent);
}

/* Echo's prompt log-probs (completions): its first token has none. */
static cJSON *echo_logprobs(srv *s, job *j) {
    if (!j->echo_lp) {
        cJSON *lp = completion_new_logprobs();
        size_t nb = 0;
        const char *b = moe8_tokenizer_token_bytes(s->tok, j->prompt[0], &nb, NULL);
        cJSON *tok = cJSON_CreateObject();
        moe8_oa_json_text(tok, "t", b ? b : "", b ? nb : 0);
        cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "tokens"), cJSON_Duplicate(cJSON_GetObjectItem(tok, "t"), 1));
        cJSON_Delete(tok);
        cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "token_logprobs"), cJSON_CreateNull());
        cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "top_logprobs"), cJSON_CreateNull());
        cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "text_offset"), cJSON_CreateNumber(0));
        j->echo_lp = lp;
        j->echo_off = (int32_t)nb;
    }
    return j->echo_lp;
}

void moe8_oa_on_prompt_logits(srv *s, job *j, const moe8_event *e) {
    moe8_event at;
    size_t nb = 0;
    if (!j->echo || j->rq.logprobs < 0 || e->pos + 1 >= j->n_prompt) return;
    echo_logprobs(s, j);
    at = *e; /* the entry of the prompt token these logits score, at its offset in the echo */
    at.token = j->prompt[e->pos + 1];
    {
        const int32_t keep = j->n_offset;
        j->n_offset = j->echo_off;
        completion_add_logprobs(s, j, j->echo_lp, &at);
        j->n_offset = keep;
    }
    moe8_tokenizer_token_bytes(s->tok, at.token, &nb, NULL);
    j->echo_off += (int32_t)nb;
}

/* A stream with echo: the prompt's text (and log-probs) first, once. */
static void echo_chunk(srv *s, job *j) {
    cJSON *lp = NULL;
    if (!j->echo || !j->stream || j->echo_sent) return;
    j->echo_sent = 1;
    if (j->rq.logprobs >= 0) {
        lp = echo_logprobs(s, j);
        j->echo_lp = NULL;
    }
    moe8_oa_stream_chunk(s, j, j->echo, j->n_echo, NULL, 0, NULL, lp, NULL);
}


/* ---- output -------------------------------------------------------------------------------- */

static void completion_split(srv *s, job *j, const char *txt, size_t n, moe8_buf *content, moe8_buf *reason,
                             int final) {
    (void)reason, (void)final;
    echo_chunk(s, j); /* a stream's echo goes first */
    moe8_buf_add(content, txt, n);
}

static void completion_delta(cJSON *c, const char *content, size_t nc, const char *reason, size_t nr,
                             const char *finish, cJSON *tool_deltas) {
    (void)reason, (void)nr, (void)finish, (void)tool_deltas;
    moe8_oa_json_text(c, "text", content ? content : "", nc);
}

/* A whole choice's text (the echo first) and log-probs (echo's prompt entries, then the completion's). */
static void completion_choice(job *j, cJSON *c) {
    moe8_buf t = {0};
    if (j->echo) moe8_buf_add(&t, j->echo, j->n_echo);
    moe8_buf_add(&t, j->text.p ? j->text.p : "", j->text.n);
    moe8_oa_json_text(c, "text", t.p ? t.p : "", t.n);
    moe8_buf_free(&t);
    if (j->echo_lp || j->lp_json) { /* echo's prompt entries, then the completion's */
        cJSON *lp = j->echo_lp ? j->echo_lp : j->lp_json;
        if (j->echo_lp && j->lp_json) {
            static const char *const keys[] = {"tokens", "token_logprobs", "top_logprobs", "text_offset"};
            for (int k = 0; k < 4; k++) {
                cJSON *from = cJSON_GetObjectItem(j->lp_json, keys[k]), *to = cJSON_GetObjectItem(lp, keys[k]), *it;
                while ((it = from->child)) cJSON_AddItemToArray(to, cJSON_DetachItemViaPointer(from, it));
            }
            cJSON_Delete(j->lp_json);
        }
        cJSON_AddItemToObject(c, "logprobs", lp);
        j->lp_json = j->echo_lp = NULL;
    } else {
        cJSON_AddNullToObject(c, "logprobs");
    }
}

const oa_api moe8_oa_completions = {
    .kind = JOB_COMPLETION,
    .id_prefix = "cmpl",
    .object = "text_completion",
    .chunk_object = "text_completion",
    .prompt_param = "prompt",
    .max_alias = NULL,
    .default_max = 16,
    .options = completion_options,
    .logprobs = completion_logprobs,
    .prompt = completion_prompt,
    .start = NULL,
    .split = completion_split,
    .new_logprobs = completion_new_logprobs,
    .add_logprobs = completion_add_logprobs,
    .delta = completion_delta,
    .choice = completion_choice,
};
