/*
 * tok_norm.c — the pipeline stages around the BPE model, as Hugging Face
 * `tokenizers` defines them: read from tokenizer.json at load, and the two
 * that rewrite strings (the normalizer on text, the decoder on each token).
 *
 * Accepted (anything else fails with MOE8_ERR_UNSUPPORTED naming the field):
 *   normalizer     null, or NFC | Prepend(prepend) | Replace({"String": s}, content), alone or
 *                  in (nested) Sequences, at most TOK_MAX_STEPS steps. Prepend adds its
 *                  string to a non-empty stretch; Replace rewrites every occurrence, left to
 *                  right, without overlap.
 *   pre_tokenizer  null (a stretch is one piece), or Split(Regex, behavior Isolated, invert
 *                  false) | ByteLevel(add_prefix_space false), alone or in (nested) Sequences;
 *                  each Split cuts every piece of the one before; ByteLevel must come last
 *                  and its use_regex (default true) adds GPT-2's pattern as a last Split.
 *   decoder        ByteLevel, exactly when the pre-tokenizer has ByteLevel; otherwise
 *                  Replace({"String": s}, content)..., ByteFallback, Fuse, Strip(content:
 *                  one character, start n, stop 0), in this order, each optional, alone or
 *                  in a Sequence (Llama-2/Mistral: Replace("▁"→" "), ByteFallback, Fuse,
 *                  Strip(" ", 1, 0)). Replace and ByteFallback act per token, so they are
 *                  applied once at load (moe8_tok_piece_text); Strip after Fuse acts on the
 *                  start of the whole decoded text (tok_decode.c).
 * Not done: the other normalizers (NFD, NFKC, Lowercase, Strip, BertNormalizer, Precompiled,
 * Replace with a Regex), pre-tokenizers (Metaspace, Whitespace, Digits, Punctuation, ...) and
 * decoders (Metaspace, WordPiece, CTC, ...); a null decoder (HF joins the tokens with spaces).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "io/json_util.h"
#include "tokenizer/tokenizer.h"

/* GPT-2's pattern, used by a ByteLevel pre-tokenizer with use_regex true. */
static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

typedef struct {
    struct moe8_tokenizer *t;
    const char *path;      /* ".../tokenizer.json" */
    moe8_error *err;
} pipe_loader;

static const char *type_of(const cJSON *obj) {
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(obj, "type");
    return cJSON_IsString(ty) ? ty->valuestring : NULL;
}

static const cJSON *get(const cJSON *obj, const char *key) {
    return cJSON_GetObjectItemCaseSensitive(obj, key);
}

/* A {"String": s} pattern with s non-empty (Regex patterns are refused). */
static moe8_status string_pattern(pipe_loader *P, const cJSON *item, const char *field,
                                  const char **s) {
    const cJSON *pat = get(item, "pattern"), *str = get(pat, "String");
    if (cJSON_IsString(get(pat, "Regex")))
        return moe8_fail(P->err, MOE8_ERR_UNSUPPORTED, -1,
                         "'%s': %s: a Replace with a Regex pattern is not supported", P->path,
                         field);
    if (!cJSON_IsString(str) || !str->valuestring[0] || !cJSON_IsString(get(item, "content")))
        return moe8_fail(P->err, MOE8_ERR_FORMAT, -1,
                         "'%s': %s: expected pattern {\"String\": non-empty} and a string content",
                         P->path, field);
    *s = str->valuestring;
    return MOE8_OK;
}

/* Append a step; from/to are copied. */
static moe8_status add_step(pipe_loader *P, tok_step *steps, int *n, tok_step_type type,
                            const char *from, const char *to, const char *field) {
    tok_step *st = &steps[*n];
    if (*n == TOK_MAX_STEPS)
        return moe8_fail(P->err, MOE8_ERR_UNSUPPORTED, -1, "'%s': %s: more than %d steps",
                         P->path, field, TOK_MAX_STEPS);
    *st = (tok_step){.type = type};
    if ((from && !(st->from = strdup(from))) || (to && !(st->to = strdup(to))))
        return moe8_fail(P->err, MOE8_ERR_NOMEM, -1, "'%s': out of memory", P->path);
    st->n_from = from ? strlen(from) : 0;
    st->n_to = to ? strlen(to) : 0;
    (*n)++;
    return MOE8_OK;
}

/* ---- normalizer ------------------------------------------------------- */

/* Normalized text must stay UTF-8 (BPE walks it by character). */
static moe8_status check_utf8(pipe_loader *P, const char *s, const char *field) {
    if (moe8_utf8_valid(s, strlen(s)) == (size_t)-1) return MOE8_OK;
    return moe8_fail(P->err, MOE8_ERR_FORMAT, -1, "'%s': %s: a string is not UTF-8", P->path, field);
}

static moe8_status normalizer_item(pipe_loader *P, const cJSON *n, const char *field) {
    struct moe8_tokenizer *t = P->t;
    const char *ty = type_of(n), *from;
    char sub[160];
    moe8_status st;
    if (ty && !strcmp(ty, "Sequence")) {
        const cJSON *list = get(n, "normalizers"), *c;
        int i = 0;
        if (!cJSON_IsArray(list))
            return moe8_fail(P->err, MOE8_ERR_FORMAT, -1, "'%s': %s.normalizers must be an array",
                             P->path, field);
        cJSON_ArrayForEach(c, list) {
            snprintf(sub, sizeof sub, "%s.normalizers[%d]", field, i++);
            if ((st = normalizer_item(P, c, sub)) != MOE8_OK) return st;
        }
        return MOE8_OK;
    }
    if (ty && !strcmp(ty, "NFC"))
        return add_step(P, t->norm, &t->n_norm, TOK_NFC, NULL, NULL, field);
    if (ty && !strcmp(ty, "Prepend")) {
        const cJSON *pre = get(n, "prepend");
        if (!cJSON_IsString(pre))
            return moe8_fail(P->err, MOE8_ERR_FORMAT, -1, "'%s': %s.prepend must be a string",
                             P->path, field);
        if ((st = check_utf8(P, pre->valuestring, field)) != MOE8_OK) return st;
        return add_step(P, t->norm, &t->n_norm, TOK_PREPEND, NULL, pre->valuestring, field);
    }
    if (ty && !strcmp(ty, "Replace")) {
        const char *to;
        if ((st = string_pattern(P, n, field, &from)) != MOE8_OK) return st;
        to = get(n, "content")->valuestring;
        if ((st = check_utf8(P, from, field)) != MOE8_OK || (st = check_utf8(P, to, field)))
            return st;
        return add_step(P, t->norm, &t->n_norm, TOK_REPLACE, from, to, field);
    }
    return moe8_fail(P->err, MOE8_ERR_UNSUPPORTED, -1,
                     "'%s': %s type '%s' is not supported (supported: NFC, Prepend, Replace, "
                     "Sequence)", P->path, field, ty ? ty : "?");
}

/* ---- pre-tokenizer ---------------------------------------------------- */

static moe8_status add_split(pipe_loader *P, const char *pattern, const char *field) {
    struct moe8_tokenizer *t = P->t;
    int code;
    PCRE2_SIZE off;
    if (t->n_split == TOK_MAX_STEPS)
        return moe8_fail(P->err, MOE8_ERR_UNSUPPORTED, -1, "'%s': %s: more than %d Split steps",
                         P->path, field, TOK_MAX_STEPS);
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP, &code, &off, NULL);
    if (!re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(code, msg, sizeof msg);
        return moe8_fail(P->err, MOE8_ERR_UNSUPPORTED, -1,
                         "'%s': %s: pre_tokenizer regex does not compile at pattern offset %zu: %s",
                         P->path, field, (size_t)off, (const char *)msg);
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);   /* without JIT, the interpreter matches */
    t->split[t->n_split++] = re;
    return MOE8_OK;
}

static moe8_status split_item(pipe_loader *P, const cJSON *sp, const char *field) {
    const cJSON *re = get(get(sp, "pattern"), "Regex"), *beh = get(sp, "behavior");
    if (!cJSON_IsString(re))
        return moe8_fail(P->err, MOE8_ERR_UNSUPPORTED, -1,
                         "'%s': %s: Split.pattern must be {\"Regex\": string}", P->path, field);
    if (!cJSON_IsString(beh) || strcmp(beh->valuestring, "Isolated") != 0 ||
        cJSON_IsTrue(get(sp, "invert")))
        return moe8_fail(P->err, MOE8_ERR_UNSUPPORTED, -1,
                         "'%s': %s: Split must have behavior 'Isolated' and invert false", P->path,
                         field);
    return add_split(P, re->valuestring, field);
}

static moe8_status pre_tokenizer_item(pipe_loader *P, const cJSON *p, const char *field) {
    const char *ty = type_of(p);
    char sub[160];
    moe8_status st;
    if (P->t->byte_level)
        return moe8_fail(P->err, MOE8_ERR_UNSUPPORTED, -1,
                         "'%s': %s: nothing may follow the ByteLevel pre-tokenizer", P->path,
                         field);
    if (ty && !strcmp(ty, "Sequence")) {
        const cJSON *list = get(p, "pretokenizers"), *c;
        int i = 0;
        if (!cJSON_IsArray(list))
            return moe8_fail(P->err, MOE8_ERR_FORMAT, -1,
                             "'%s': %s.pretokenizers must be an array", P->path, field);
        cJSON_ArrayForEach(c, list) {
            snprintf(sub, sizeof sub, "%s.pretokenizers[%d]", field, i++);
            if ((st = pre_tokenizer_item(P, c, sub)) != MOE8_OK) return st;
        }
        return MOE8_OK;
    }
    if (ty && !strcmp(ty, "Split")) return split_item(P, p, field);
    if (ty && !strcmp(ty, "ByteLevel")) {
        if (cJSON_IsTrue(get(p, "add_prefix_space")))
            return moe8_fail(P->err, MOE8_ERR_UNSUPPORTED, -1,
                             "'%s': %s.add_prefix_space true is not supported", P->path, field);
        if (!cJSON_IsFalse(get(p, "use_regex")) && (st = add_split(P, GPT2_PATTERN, field)))
            return st;
        P->t->byte_level = 1;
        return MOE8_OK;
    }
    return moe8_fail(P->err, MOE8_ERR_UNSUPPORTED, -1,
                     "'%s': %s type '%s' is not supported (supported: Split, ByteLevel, Sequence)",
                     P->path, field, ty ? ty : "?");
}

/* ---- decoder ------------------------------------------------------------ */

/* Order of the per-token decoder steps: Replace* < ByteFallback < Fuse < Strip. */
enum { DEC_REPLACE, DEC_BYTE_FALLBACK, DEC_FUSE, DEC_STRIP };

static moe8_status strip_item(pipe_loader *P, const cJSON *d, const char *field) {
    const cJSON *c = get(d, "content");
    int64_t start, stop;
    const char *cs = cJSON_IsString(c) ? c->valuestring : "";
    int k = cs[0] ? moe8_utf8_char((const uint8_t *)cs, strlen(cs)) : -1;
    if (k <= 0 || cs[k] != '\0' ||
        moe8_json_exact_int(get(d, "start"), &start) != 0 || start < 0 || start > 1 << 20 ||
        moe8_json_exact_int(get(d, "stop"), &stop) != 0 || stop < 0)
        return moe8_fail(P->err, MOE8_ERR_FORMAT, -1,
                         "'%s': %s: Strip wants content (one character), start and stop (integers "
                         ">= 0)", P->path, field);
    if (stop != 0)
        return moe8_fail(P->err, MOE8_ERR_UNSUPPORTED, -1,
                         "'%s': %s.stop %lld is not supported (only 0)", P->path, field,
                         (long long)stop);
    P->t->strip_start = (int)start;
    memcpy(P->t->strip_char, cs, (size_t)k + 1);
    P->t->strip_char_len = k;
    return MOE8_OK;
}

static moe8_status decoder_item(pipe_loader *P, const cJSON *d, const char *field, int *stage) {
    static const char *const names[] = {"Replace", "ByteFallback", "Fuse", "Strip"};
    struct moe8_tokenizer *t = P->t;
    const char *ty = type_of(d), *from;
    int kind = -1;
    moe8_status st;
    for (int i = 0; i < 4 && ty; i++)
        if (!strcmp(ty, names[i])) kind = i;
    if (kind < 0)
        return moe8_fail(P->err, MOE8_ERR_UNSUPPORTED, -1,
                         "'%s': %s type '%s' is not supported (supported: ByteLevel, or Replace, "
                         "ByteFallback, Fuse, Strip in this order)", P->path, field, ty ? ty : "?");
    if (kind < *stage || (kind == *stage && kind != DEC_REPLACE) ||
        (kind == DEC_STRIP && *stage != DEC_FUSE))
        return moe8_fail(P->err, MOE8_ERR_UNSUPPORTED, -1,
                         "'%s': %s: %s out of order (supported: Replace..., ByteFallback, Fuse, "
                         "Strip, in this order, Strip right after Fuse)", P->path, field, ty);
    *stage = kind;
    if (kind == DEC_REPLACE) {
        if ((st = string_pattern(P, d, field, &from)) != MOE8_OK) return st;
        return add_step(P, t->dec_replace, &t->n_dec_replace, TOK_REPLACE, from,
                        get(d, "content")->valuestring, field);
    }
    if (kind == DEC_BYTE_FALLBACK) t->dec_byte_fallback = 1;
    if (kind == DEC_STRIP) return strip_item(P, d, field);
    return MOE8_OK;
}

static moe8_status decoder(pipe_loader *P, const cJSON *d) {
    const char *ty = d && !cJSON_IsNull(d) ? type_of(d) : "null";
    int stage = DEC_REPLACE;
    char sub[160];
    moe8_status st;
    if (ty && !strcmp(ty, "ByteLevel")) {
        if (!P->t->byte_level)
            return moe8_fail(P->err, MOE8_ERR_UNSUPPORTED, -1,
                             "'%s': decoder ByteLevel needs a ByteLevel pre_tokenizer", P->path);
        return MOE8_OK;
    }
    if (ty && !strcmp(ty, "null"))
        return moe8_fail(P->err, MOE8_ERR_UNSUPPORTED, -1,
                         "'%s': decoder null is not supported (it joins the tokens with spaces)",
                         P->path);
    if (ty && !strcmp(ty, "Sequence")) {
        const cJSON *list = get(d, "decoders"), *c;
        int i = 0;
        if (!cJSON_IsArray(list))
            return moe8_fail(P->err, MOE8_ERR_FORMAT, -1, "'%s': decoder.decoders must be an array",
                             P->path);
        cJSON_ArrayForEach(c, list) {
            snprintf(sub, sizeof sub, "decoder.decoders[%d]", i++);
            if ((st = decoder_item(P, c, sub, &stage)) != MOE8_OK) return st;
        }
    } else if ((st = decoder_item(P, d, "decoder", &stage)) != MOE8_OK) {
        return st;
    }
    if (P->t->byte_level)
        return moe8_fail(P->err, MOE8_ERR_UNSUPPORTED, -1,
                         "'%s': a ByteLevel pre_tokenizer needs the ByteLevel decoder (decoder "
                         "type '%s')", P->path, ty ? ty : "?");
    return MOE8_OK;
}

moe8_status moe8_tok_pipeline_load(struct moe8_tokenizer *t, const cJSON *root, const char *path,
                              moe8_error *err) {
    pipe_loader P = {t, path, err};
    const cJSON *n = get(root, "normalizer"), *p = get(root, "pre_tokenizer");
    moe8_status st;
    if (n && !cJSON_IsNull(n) && (st = normalizer_item(&P, n, "normalizer")) != MOE8_OK) return st;
    if (p && !cJSON_IsNull(p) && (st = pre_tokenizer_item(&P, p, "pre_tokenizer")) != MOE8_OK)
        return st;
    return decoder(&P, get(root, "decoder"));
}

void moe8_tok_pipeline_free(struct moe8_tokenizer *t) {
    for (int i = 0; i < t->n_norm; i++) free(t->norm[i].from), free(t->norm[i].to);
    for (int i = 0; i < t->n_dec_replace; i++)
        free(t->dec_replace[i].from), free(t->dec_replace[i].to);
    for (int i = 0; i < t->n_split; i++) pcre2_code_free(t->split[i]);
}

/* ---- applying the string steps ---------------------------------------- */

/* Every occurrence of st->from in s[0..n), left to right, replaced by st->to:
 * a heap string in *out, or NULL when there is none (*out_len = n). */
static int replace_all(const tok_step *st, const char *s, size_t n, char **out, size_t *out_len) {
    size_t count = 0, o = 0;
    const char *p = s, *end = s + n, *hit;
    *out = NULL;
    *out_len = n;
    while ((hit = memmem(p, (size_t)(end - p), st->from, st->n_from)) != NULL)
        count++, p = hit + st->n_from;
    if (count == 0) return 0;
    if (st->n_to > st->n_from && count > (TOK_MAX_NORM - n) / (st->n_to - st->n_from)) return -2;
    *out_len = n - count * st->n_from + count * st->n_to;
    if (!(*out = malloc(*out_len + 1))) return -1;
    for (p = s; (hit = memmem(p, (size_t)(end - p), st->from, st->n_from)) != NULL;
         p = hit + st->n_from) {
        memcpy(*out + o, p, (size_t)(hit - p));
        o += (size_t)(hit - p);
        memcpy(*out + o, st->to, st->n_to);
        o += st->n_to;
    }
    memcpy(*out + o, p, (size_t)(end - p));
    return 0;
}

/* One normalizer step: as replace_all (NULL: unchanged; -1 no memory, -2 too long). */
static int apply_step(const tok_step *st, const char *s, size_t n, char **out, size_t *out_len) {
    size_t i = 0;
    *out = NULL;
    *out_len = n;
    if (st->type == TOK_REPLACE) return replace_all(st, s, n, out, out_len);
    if (st->type == TOK_PREPEND) {
        if (n == 0 || st->n_to == 0) return 0;
        if (n > TOK_MAX_NORM - st->n_to) return -2;
        if (!(*out = malloc(n + st->n_to + 1))) return -1;
        memcpy(*out, st->to, st->n_to);
        memcpy(*out + st->n_to, s, n);
        *out_len = n + st->n_to;
        return 0;
    }
    while (i < n && (uint8_t)s[i] < 0x80) i++;   /* NFC: ASCII is already normal */
    if (i == n) return 0;
    utf8proc_uint8_t *norm = NULL;
    utf8proc_ssize_t m = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &norm,
                                      UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    if (m < 0) return m == UTF8PROC_ERROR_NOMEM ? -1 : -3;
    if ((size_t)m > TOK_MAX_NORM) {
        free(norm);
        return -2;
    }
    *out = (char *)norm;
    *out_len = (size_t)m;
    return 0;
}

moe8_status moe8_tok_normalize(const struct moe8_tokenizer *t, const char *s, size_t n, size_t off,
                          const char **out, size_t *out_len, char **own, moe8_error *err) {
    *out = s;
    *out_len = n;
    *own = NULL;
    for (int k = 0; k < t->n_norm; k++) {
        char *next;
        size_t next_len;
        int rc = apply_step(&t->norm[k], *out, *out_len, &next, &next_len);
        if (rc < 0) {
            free(*own);
            *own = NULL;
            return moe8_fail(err, rc == -1 ? MOE8_ERR_NOMEM : rc == -2 ? MOE8_ERR_INVALID_ARG
                             : MOE8_ERR_FORMAT, (int64_t)off,
                             "tokenize: normalizing the text at byte %zu failed (%s)", off,
                             rc == -1 ? "out of memory" : rc == -2 ? "it grows past 2 GiB"
                             : "not normalizable UTF-8");
        }
        if (next) {
            free(*own);
            *own = next;
            *out = next;
            *out_len = next_len;
        }
    }
    return MOE8_OK;
}

static int hex_digit(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10
         : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

int moe8_tok_piece_text(const struct moe8_tokenizer *t, const char *s, size_t n, char **out,
                   size_t *out_len) {
    char *cur = malloc(n + 1);
    size_t len = n;
    if (!cur) return -1;
    memcpy(cur, s, n);
    for (int k = 0; k < t->n_dec_replace; k++) {
        char *next;
        size_t next_len;
        if (replace_all(&t->dec_replace[k], cur, len, &next, &next_len) != 0) {
            free(cur);
            return -1;
        }
        if (next) free(cur), cur = next, len = next_len;
    }
    /* ByteFallback: exactly "<0xHH>" is the byte 0xHH */
    if (t->dec_byte_fallback && len == 6 && !memcmp(cur, "<0x", 3) && cur[5] == '>' &&
        hex_digit(cur[3]) >= 0 && hex_digit(cur[4]) >= 0) {
        cur[0] = (char)(hex_digit(cur[3]) << 4 | hex_digit(cur[4]));
        len = 1;
    }
    *out = cur;
    *out_len = len;
    return 0;
}
