/*
 * export_gguf_vocab.c — the tokenizer keys of `moe8 export-gguf`
 * (export_gguf.h): tokenizer.json (byte-level BPE: vocab, merges, added
 * tokens) as tokenizer.ggml.model "gpt2" with the family's pre-tokenizer name
 * (what convert_hf_to_gguf.py writes for it: "qwen2", "glm4"); ids the
 * tokenizer lacks up to config.json's vocab_size become "[PADn]" (UNUSED);
 * special ids from tokenizer_config.json, else config.json; the chat
 * template from tokenizer_config.json, else chat_template.jinja (gpt-oss's
 * folders), as the converter's SpecialVocab.
 */
#include <stdlib.h>
#include <string.h>

#include "export_gguf.h"

static cJSON *read_json(const char *path, int required) {
    moe8_error err;
    char *buf = NULL;
    size_t len = 0;
    moe8_status s = moe8_read_file(path, TOKENIZER_MAX_BYTES, &buf, &len, &err);
    if (s != MOE8_OK) {
        if (required || s != MOE8_ERR_NOT_FOUND) xg_fail("%s", err.message);
        return NULL;
    }
    cJSON *j = cJSON_ParseWithLength(buf, len);
    free(buf);
    if (!j) xg_fail("'%s': not valid JSON", path);
    return j;
}

/* The id of a tokenizer_config.json special token ("<|im_end|>" or
 * {"content": ...}), or -1. */
static int64_t special_id(const xg_vocab *v, const char *key) {
    cJSON *t = v->config ? cJSON_GetObjectItemCaseSensitive(v->config, key) : NULL;
    if (cJSON_IsObject(t)) t = cJSON_GetObjectItemCaseSensitive(t, "content");
    if (!cJSON_IsString(t)) return -1;
    for (int64_t i = 0; i < v->n_vocab; i++)
        if (v->text[i] && !strcmp(v->text[i], t->valuestring)) return i;
    return -1;
}

int xg_load_vocab(xg_vocab *v, const char *dir, int64_t n_vocab) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    if (!(v->json = read_json(path, 1))) return -1;
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    v->config = read_json(path, 0);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);

    cJSON *model = cJSON_GetObjectItemCaseSensitive(v->json, "model");
    cJSON *mtype = cJSON_GetObjectItemCaseSensitive(model, "type");
    cJSON *dec = cJSON_GetObjectItemCaseSensitive(v->json, "decoder");
    cJSON *dtype = cJSON_GetObjectItemCaseSensitive(dec, "type");
    if (!cJSON_IsString(mtype) || strcmp(mtype->valuestring, "BPE"))
        return xg_fail("'%s': model.type is not \"BPE\"", path);
    if (!cJSON_IsString(dtype) || strcmp(dtype->valuestring, "ByteLevel"))
        return xg_fail("'%s': decoder.type is not \"ByteLevel\": only byte-level BPE (gpt2-style) "
                    "tokenizers are exported", path);
    cJSON *vj = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    if (!cJSON_IsObject(vj)) return xg_fail("'%s': model.vocab is not an object", path);

    v->n_vocab = n_vocab;
    v->text = calloc((size_t)n_vocab, sizeof *v->text);
    v->type = malloc((size_t)n_vocab);
    if (!v->text || !v->type) return xg_fail("out of memory");
    memset(v->type, TOK_UNUSED, (size_t)n_vocab);

    /* ids at or above vocab_size (a tokenizer shared by a family with a
     * smaller embedding, as the test models' qwen3 tokenizer under glm4_moe's
     * 151552) cannot be in the GGUF's token list: left out, counted */
    cJSON *e;
    int64_t beyond = 0;
    cJSON_ArrayForEach(e, vj) {
        double id = cJSON_IsNumber(e) ? e->valuedouble : -1;
        if (id >= (double)n_vocab && id == (double)(int64_t)id) {
            beyond++;
            continue;
        }
        if (id < 0 || id != (double)(int64_t)id)
            return xg_fail("'%s': model.vocab['%s'] = %g is not an id", path, e->string, id);
        if (v->text[(int64_t)id])
            return xg_fail("'%s': id %lld appears twice in model.vocab", path, (long long)id);
        v->text[(int64_t)id] = e->string;
        v->type[(int64_t)id] = TOK_NORMAL;
    }
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(v->json, "added_tokens")) {
        cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
        cJSON *content = cJSON_GetObjectItemCaseSensitive(e, "content");
        if (cJSON_IsNumber(id) && id->valuedouble >= (double)n_vocab) {
            beyond++;
            continue;
        }
        if (!cJSON_IsNumber(id) || !cJSON_IsString(content) || id->valuedouble < 0)
            return xg_fail("'%s': an added token without a content string or an id", path);
        int64_t i = (int64_t)id->valuedouble;
        v->text[i] = content->valuestring;
        v->type[i] = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "special"))
                         ? TOK_CONTROL : TOK_USER_DEFINED;
    }
    if (beyond)
        fprintf(stderr, "moe8 " CMD ": warning: %lld tokens of '%s' have ids at or above "
                        "vocab_size %lld: left out of the GGUF's token list\n",
                (long long)beyond, path, (long long)n_vocab);
    return 0;
}

int xg_tokenizer_kvs(xg_kvs *k, xg_vocab *v, const xg_plan *p) {
    char pad[32];
    cJSON *merges = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(v->json, "model"), "merges");
    if (!cJSON_IsArray(merges))
        return xg_fail("'%s/tokenizer.json': model.merges is not an array", p->dir);

    xg_kv_str(k, "tokenizer.ggml.model", "gpt2");
    xg_kv_str(k, "tokenizer.ggml.pre", p->fam->pre);
    xg_kv_arr(k, "tokenizer.ggml.tokens", GV_STR, (uint64_t)v->n_vocab);
    for (int64_t i = 0; i < v->n_vocab; i++) {
        if (v->text[i]) {
            xg_put_str(&k->b, v->text[i]);
        } else {
            snprintf(pad, sizeof pad, "[PAD%lld]", (long long)i);
            xg_put_str(&k->b, pad);
        }
    }
    xg_kv_arr(k, "tokenizer.ggml.token_type", GV_I32, (uint64_t)v->n_vocab);
    for (int64_t i = 0; i < v->n_vocab; i++) xg_put_u32(&k->b, v->type[i]);

    /* merges: "a b" strings, or (newer tokenizers) ["a", "b"] pairs */
    xg_kv_arr(k, "tokenizer.ggml.merges", GV_STR, (uint64_t)cJSON_GetArraySize(merges));
    cJSON *m;
    int mi = 0;
    cJSON_ArrayForEach(m, merges) {
        if (cJSON_IsString(m)) {
            xg_put_str(&k->b, m->valuestring);
        } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 &&
                   cJSON_IsString(cJSON_GetArrayItem(m, 0)) &&
                   cJSON_IsString(cJSON_GetArrayItem(m, 1))) {
            const char *a = cJSON_GetArrayItem(m, 0)->valuestring;
            const char *b = cJSON_GetArrayItem(m, 1)->valuestring;
            size_t na = strlen(a), nb = strlen(b);
            xg_put_u64(&k->b, na + 1 + nb);
            xg_put(&k->b, a, na);
            xg_put(&k->b, " ", 1);
            xg_put(&k->b, b, nb);
        } else {
            return xg_fail("'%s/tokenizer.json': model.merges[%d] is neither \"a b\" nor [\"a\", \"b\"]",
                        p->dir, mi);
        }
        mi++;
    }

    /* special ids as convert_hf_to_gguf.py's SpecialVocab: tokenizer_config.json's
     * tokens, else config.json's ids */
    int64_t bos = special_id(v, "bos_token"), eos = special_id(v, "eos_token");
    int64_t padid = special_id(v, "pad_token");
    if (bos < 0) bos = p->cfg->bos_token_id;
    if (eos < 0 && p->cfg->n_eos_ids) eos = p->cfg->eos_token_ids[0];
    if (bos >= 0 && bos < v->n_vocab) xg_kv_u32(k, "tokenizer.ggml.bos_token_id", (uint32_t)bos);
    if (eos >= 0 && eos < v->n_vocab) xg_kv_u32(k, "tokenizer.ggml.eos_token_id", (uint32_t)eos);
    if (padid >= 0) xg_kv_u32(k, "tokenizer.ggml.padding_token_id", (uint32_t)padid);
    cJSON *add_bos = v->config ? cJSON_GetObjectItemCaseSensitive(v->config, "add_bos_token") : NULL;
    xg_kv_bool(k, "tokenizer.ggml.add_bos_token", cJSON_IsTrue(add_bos));
    cJSON *tmpl = v->config ? cJSON_GetObjectItemCaseSensitive(v->config, "chat_template") : NULL;
    if (cJSON_IsString(tmpl)) {
        xg_kv_str(k, "tokenizer.chat_template", tmpl->valuestring);
    } else {
        char path[4096], *buf = NULL;
        size_t len = 0;
        moe8_error err;
        snprintf(path, sizeof path, "%s/chat_template.jinja", p->dir);
        moe8_status s = moe8_read_file(path, TOKENIZER_MAX_BYTES, &buf, &len, &err);
        if (s != MOE8_OK && s != MOE8_ERR_NOT_FOUND) return xg_fail("%s", err.message);
        int rc = 0;
        if (s == MOE8_OK && memchr(buf, 0, len))
            rc = xg_fail("'%s': a NUL byte in the template", path);
        else if (s == MOE8_OK)
            xg_kv_str(k, "tokenizer.chat_template", buf); /* NUL-terminated (moe8_read_file) */
        free(buf);
        if (rc) return -1;
    }
    return 0;
}

