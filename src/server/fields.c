/*
 * fields.c — every field of an OpenAI completions or chat request, honoured
 * or refused, never silently dropped:
 *   - honoured: read by openai.c (or moe8_oa_parse_processors below);
 *   - accepted and ignored, as vLLM does: user, metadata, store,
 *     service_tier, prompt_cache_key, safety_identifier;
 *   - refused with 400 naming the field: OpenAI features moe8 does not
 *     implement (audio, modalities other than text, prediction,
 *     web_search_options, functions / function_call, verbosity, suffix, best_of other than 1, ...), when set;
 *   - anything else: ignored, with one warning line per request naming the
 *     fields (a client's typo shows in the log, not as a failure).
 * And the logits processors of the request (presence / frequency /
 * repetition penalties, logit_bias, min_tokens) into its moe8_request.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server.h"

enum { F_CMPL = 1, F_CHAT = 2, F_BOTH = 3 };
enum { HONOURED = OA_HONOURED, IGNORED = OA_IGNORED, REFUSED = OA_REFUSED };

static const oa_field FIELDS[] = {
    {"model", F_BOTH, HONOURED, NULL},
    {"prompt", F_CMPL, HONOURED, NULL},
    {"messages", F_CHAT, HONOURED, NULL},
    {"max_tokens", F_BOTH, HONOURED, NULL},
    {"max_completion_tokens", F_CHAT, HONOURED, NULL},
    {"temperature", F_BOTH, HONOURED, NULL},
    {"top_p", F_BOTH, HONOURED, NULL},
    {"top_k", F_BOTH, HONOURED, NULL},
    {"min_p", F_BOTH, HONOURED, NULL},
    {"seed", F_BOTH, HONOURED, NULL},
    {"stop", F_BOTH, HONOURED, NULL},
    {"stream", F_BOTH, HONOURED, NULL},
    {"stream_options", F_BOTH, HONOURED, NULL},
    {"logprobs", F_BOTH, HONOURED, NULL},
    {"top_logprobs", F_CHAT, HONOURED, NULL},
    {"n", F_BOTH, HONOURED, NULL},
    {"echo", F_CMPL, HONOURED, NULL},
    {"ignore_eos", F_BOTH, HONOURED, NULL},
    {"presence_penalty", F_BOTH, HONOURED, NULL},
    {"frequency_penalty", F_BOTH, HONOURED, NULL},
    {"repetition_penalty", F_BOTH, HONOURED, NULL},
    {"logit_bias", F_BOTH, HONOURED, NULL},
    {"min_tokens", F_BOTH, HONOURED, NULL},
    {"chat_template_kwargs", F_CHAT, HONOURED, NULL},
    {"reasoning_effort", F_CHAT, HONOURED, NULL}, /* the template's thinking switch: api_chat.c */
    {"best_of", F_CMPL, HONOURED, NULL}, /* 1 only: checked below */
    {"modalities", F_CHAT, HONOURED, NULL}, /* ["text"] only: checked below */
    {"user", F_BOTH, IGNORED, NULL},
    {"metadata", F_BOTH, IGNORED, NULL},
    {"store", F_BOTH, IGNORED, NULL},
    {"service_tier", F_BOTH, IGNORED, NULL},
    {"prompt_cache_key", F_BOTH, IGNORED, NULL},
    {"safety_identifier", F_BOTH, IGNORED, NULL},
    {"tools", F_CHAT, HONOURED, NULL},
    {"tool_choice", F_CHAT, HONOURED, NULL},
    {"parallel_tool_calls", F_CHAT, HONOURED, NULL},
    {"documents", F_CHAT, HONOURED, NULL},
    {"response_format", F_BOTH, HONOURED, NULL},
    {"grammar", F_BOTH, HONOURED, NULL},
    {"suffix", F_CMPL, REFUSED, "completions with a suffix (insertion) are not supported"},
    {"audio", F_CHAT, REFUSED, "audio output is not supported"},
    {"prediction", F_CHAT, REFUSED, "predicted outputs are not supported"},
    {"web_search_options", F_CHAT, REFUSED, "web search is not supported"},
    {"functions", F_CHAT, REFUSED, "the deprecated 'functions' are not supported"},
    {"function_call", F_CHAT, REFUSED, "the deprecated 'function_call' is not supported"},
    {"verbosity", F_CHAT, REFUSED, "verbosity levels are not supported"},
};

int moe8_oa_field_policy(srv *s, const cJSON *root, const oa_field *table, size_t n, int mask, const char *api,
                         moe8_buf *err) {
    const cJSON *f;
    char unknown[400];
    size_t n_unknown = 0;
    unknown[0] = '\0';
    cJSON_ArrayForEach(f, root) {
        size_t i = 0;
        for (; i < n; i++)
            if (!strcmp(table[i].name, f->string) && (!table[i].kinds || (table[i].kinds & mask))) break;
        if (i == n) { /* not one of this endpoint's */
            const int k = snprintf(unknown + n_unknown, sizeof unknown - n_unknown, "%s'%.60s'",
                                   n_unknown ? ", " : "", f->string);
            if (k > 0 && (size_t)k < sizeof unknown - n_unknown) n_unknown += (size_t)k;
            continue;
        }
        if (table[i].what == OA_REFUSED && !cJSON_IsNull(f) && !cJSON_IsFalse(f))
            return moe8_oa_bad(err, f->string, "'%s': %s", f->string, table[i].why);
    }
    if (n_unknown)
        moe8_srv_log(s, "warning: %s request: unknown field%s %s ignored", api, strchr(unknown, ',') ? "s" : "",
                     unknown);
    return 0;
}

int moe8_oa_check_fields(srv *s, const cJSON *root, job_kind kind, moe8_buf *err) {
    const cJSON *f;
    const int rc = moe8_oa_field_policy(s, root, FIELDS, sizeof FIELDS / sizeof *FIELDS,
                                        kind == JOB_CHAT ? F_CHAT : F_CMPL, kind == JOB_CHAT ? "chat" : "completions",
                                        err);
    if (rc) return rc;
    /* values that are only honoured in one form */
    f = cJSON_GetObjectItemCaseSensitive(root, "best_of");
    if (f && !cJSON_IsNull(f) && !(cJSON_IsNumber(f) && f->valuedouble == 1))
        return moe8_oa_bad(err, "best_of", "'best_of' must be 1 (several candidates per choice are not "
                      "supported), got %s", cJSON_IsNumber(f) ? "another number" : moe8_json_type_name(f));
    f = cJSON_GetObjectItemCaseSensitive(root, "modalities");
    if (f && !cJSON_IsNull(f)) {
        const cJSON *m;
        if (!cJSON_IsArray(f)) return moe8_oa_bad(err, "modalities", "'modalities' must be an array, got %s", moe8_json_type_name(f));
        cJSON_ArrayForEach(m, f) if (!cJSON_IsString(m) || strcmp(m->valuestring, "text"))
            return moe8_oa_bad(err, "modalities", "'modalities': only \"text\" output is supported");
    }
    return 0;
}

/* logit_bias: {"token id": bias in [-100, 100]} as OpenAI. */
static int parse_bias(srv *s, const cJSON *root, job *j, moe8_buf *err) {
    const cJSON *lb = cJSON_GetObjectItemCaseSensitive(root, "logit_bias"), *e;
    int n = 0, k = 0;
    if (!lb || cJSON_IsNull(lb)) return 0;
    if (!cJSON_IsObject(lb))
        return moe8_oa_bad(err, "logit_bias", "'logit_bias' must be an object of token id -> bias, got %s",
                      moe8_json_type_name(lb));
    cJSON_ArrayForEach(e, lb) n++;
    if (n > 1024) return moe8_oa_bad(err, "logit_bias", "'logit_bias' holds %d tokens; at most 1024", n);
    if (!n) return 0;
    j->bias_ids = malloc((size_t)n * sizeof *j->bias_ids);
    j->bias = malloc((size_t)n * sizeof *j->bias);
    if (!j->bias_ids || !j->bias) return moe8_oa_bad(err, "logit_bias", "out of memory");
    cJSON_ArrayForEach(e, lb) {
        char *end;
        long id = strtol(e->string, &end, 10);
        if (!e->string[0] || *end || e->string[0] == '+' || e->string[0] == ' ' || id < 0 || id >= s->n_vocab)
            return moe8_oa_bad(err, "logit_bias", "'logit_bias' key '%.40s' must be a token id in [0, %d)",
                          e->string, s->n_vocab);
        if (!cJSON_IsNumber(e) || !isfinite(e->valuedouble) || e->valuedouble < -100 || e->valuedouble > 100)
            return moe8_oa_bad(err, "logit_bias", "'logit_bias' of token %ld must be a number in [-100, 100]", id);
        j->bias_ids[k] = (int32_t)id;
        j->bias[k] = (float)e->valuedouble;
        k++;
    }
    j->rq.bias_ids = j->bias_ids;
    j->rq.bias = j->bias;
    j->rq.n_bias = k;
    return 0;
}

int moe8_oa_parse_processors(srv *s, const cJSON *root, job *j, moe8_buf *err) {
    double x;
    int rc, has;
    if ((rc = moe8_oa_get_num(root, "presence_penalty", -2, 2, 0, 0, &x, &has, err))) return rc;
    if (has) j->rq.presence_penalty = (float)x;
    if ((rc = moe8_oa_get_num(root, "frequency_penalty", -2, 2, 0, 0, &x, &has, err))) return rc;
    if (has) j->rq.frequency_penalty = (float)x;
    if ((rc = moe8_oa_get_num(root, "repetition_penalty", 0, 1e3, 1, 0, &x, &has, err))) return rc;
    if (has) j->rq.repetition_penalty = (float)x;
    if (!(j->rq.repetition_penalty > 0.0f))
        return moe8_oa_bad(err, "repetition_penalty", "'repetition_penalty' must be > 0 as a 32-bit float");
    if ((rc = moe8_oa_get_num(root, "min_tokens", 0, 1e9, 0, 1, &x, &has, err))) return rc;
    if (has) j->rq.min_tokens = (int32_t)x;
    return parse_bias(s, root, j, err);
}
