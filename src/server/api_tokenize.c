/*
 * api_tokenize.c — moe8 serve's endpoints without jobs: /tokenize (a
 * prompt, or messages through the chat template as a chat request renders
 * them, add_generation_prompt as asked), /detokenize (ids to text), and
 * /v1/models, /v1/models/{id} (the one served model), as vLLM answers them.
 *
 * Does not: generate (the completions and chat APIs do).
 */
#include <stdlib.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "server/api.h"

static void print_json(cJSON *root, moe8_buf *out) {
    char *txt = cJSON_PrintUnformatted(root);
    out->n = 0;
    if (txt) moe8_buf_str(out, txt);
    free(txt);
    cJSON_Delete(root);
}

int moe8_oa_tokenize(srv *s, const char *body, size_t n, moe8_buf *out) {
    int rc, gen = 1;
    cJSON *root = moe8_oa_parse_object(body, n, out, &rc), *res;
    int32_t *ids = NULL, n_ids = 0;
    if (!root) return rc;
    if (cJSON_GetObjectItemCaseSensitive(root, "messages")) {
        if (!(rc = moe8_oa_get_bool(root, "add_generation_prompt", &gen, out)))
            rc = moe8_oa_chat_prompt(s, root, gen, 0, &ids, &n_ids, NULL, NULL, out);
    } else {
        rc = moe8_oa_prompt_ids(s, root, &ids, &n_ids, out);
    }
    cJSON_Delete(root);
    if (rc) return rc;
    res = cJSON_CreateObject();
    cJSON *arr = cJSON_AddArrayToObject(res, "tokens");
    for (int32_t i = 0; i < n_ids; i++) cJSON_AddItemToArray(arr, cJSON_CreateNumber(ids[i]));
    cJSON_AddNumberToObject(res, "count", n_ids);
    cJSON_AddNumberToObject(res, "max_model_len", s->n_ctx);
    free(ids);
    print_json(res, out);
    return 0;
}

int moe8_oa_detokenize(srv *s, const char *body, size_t n, moe8_buf *out) {
    int rc;
    cJSON *root = moe8_oa_parse_object(body, n, out, &rc), *res;
    const cJSON *t;
    int32_t *ids = NULL, n_ids = 0;
    size_t need = 0;
    char *text;
    if (!root) return rc;
    t = cJSON_GetObjectItemCaseSensitive(root, "tokens");
    if (!cJSON_IsArray(t)) rc = moe8_oa_bad(out, "tokens", "'tokens' must be an array of token ids");
    else if ((rc = moe8_oa_ids_from_array(s, t, &ids, &n_ids, "tokens", out))) {
    } else {
        for (int32_t i = 0; i < n_ids && !rc; i++)
            if (!moe8_tokenizer_token_bytes(s->tok, ids[i], NULL, NULL))
                rc = moe8_oa_bad(out, "tokens", "'tokens'[%d]: id %d has no text in the tokenizer", i, ids[i]);
    }
    cJSON_Delete(root);
    if (rc) {
        free(ids);
        return rc;
    }
    moe8_detokenize(s->tok, ids, (size_t)n_ids, 0, NULL, 0, &need, NULL);
    if (!(text = malloc(need + 1)) ||
        moe8_detokenize(s->tok, ids, (size_t)n_ids, 0, text, need + 1, &need, NULL) != MOE8_OK) {
        free(text);
        free(ids);
        return moe8_oa_bad(out, NULL, "out of memory");
    }
    free(ids);
    res = cJSON_CreateObject();
    moe8_oa_json_text(res, "prompt", text, need);
    free(text);
    print_json(res, out);
    return 0;
}

static cJSON *model_object(srv *s) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", s->model_name);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)time(NULL));
    cJSON_AddStringToObject(m, "owned_by", "moe8");
    cJSON_AddNumberToObject(m, "max_model_len", s->n_ctx);
    return m;
}

void moe8_oa_models(srv *s, moe8_buf *out) {
    cJSON *root = cJSON_CreateObject(), *data = cJSON_AddArrayToObject(root, "data");
    cJSON_AddStringToObject(root, "object", "list");
    cJSON_AddItemToArray(data, model_object(s));
    print_json(root, out);
}

void moe8_oa_model(srv *s, moe8_buf *out) { print_json(model_object(s), out); }
