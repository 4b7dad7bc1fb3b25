/*
 * tok_load.c — builds a moe8_tokenizer from a model folder's tokenizer.json
 * (Hugging Face `tokenizers` format) and, when present, tokenizer_config.json.
 *
 * Accepted pipeline (anything else is refused with MOE8_ERR_UNSUPPORTED,
 * naming the field):
 *   normalizer      null or NFC
 *   pre_tokenizer   Sequence[Split(Regex, Isolated, not inverted), ByteLevel(use_regex
 *                   false)], or a lone ByteLevel(use_regex true) = the GPT-2 regex;
 *                   add_prefix_space false
 *   model           BPE: vocab {byte-level token: id}, merges as "a b" strings or
 *                   [a, b] arrays (rank = index), no subword prefix/suffix, no
 *                   byte fallback, no dropout; ignore_merges honoured
 *   decoder         ByteLevel (or absent)
 *   added_tokens    [{id, content, special, ...}] with lstrip/rstrip/single_word false
 * Every token is stored as its raw bytes (ByteLevel spelling decoded here); the
 * vocabulary must hold a one-byte token for each of the 256 byte values. Every
 * merge must name two vocab tokens whose concatenation is one too (a part
 * longer than the longest token is refused without being decoded in full).
 * The JSON is strict (json_util.c): no key twice in any object, nothing after
 * the value. tok_load_json builds from text in memory (the fuzz target's way
 * in); moe8_tokenizer_load reads the two files and calls it.
 * Not done: post-processor templates (the engine adds BOS itself when
 * add_bos_token says so), normalized-vs-raw matching of added tokens (all are
 * matched on the raw text, which is the same thing under NFC for ASCII ones).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/json_util.h"
#include "tokenizer/tok_template.h"
#include "tokenizer/tokenizer.h"

#define TOK_JSON_MAX ((size_t)1 << 30)
#define TOK_CONFIG_MAX ((size_t)64 << 20)

/* GPT-2's pattern, used by a ByteLevel pre-tokenizer with use_regex true. */
static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* Loading context: names the file in every error. */
typedef struct {
    struct moe8_tokenizer *t;
    const char *path;   /* ".../tokenizer.json" */
    moe8_error *err;
    int16_t cp_byte[324]; /* ByteLevel code point -> byte, -1 if not in the alphabet */
    char *tmp;          /* scratch for merge parts: [2 * max_token_len + 8] */
} loader;

/* ---- ByteLevel alphabet ------------------------------------------------- */

/* GPT-2's bytes_to_unicode: printable bytes map to themselves, the other 68
 * to U+0100.. in byte order. */
static void byte_level_table(int16_t cp_byte[324]) {
    int n = 0;
    for (int i = 0; i < 324; i++) cp_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
        cp_byte[printable ? b : 256 + n++] = (int16_t)b;
    }
}

/* Decode a ByteLevel-spelled UTF-8 string s[0..len) into at most `cap` raw
 * bytes at out; returns the byte count, or -1 when a character is outside the
 * alphabet (or not UTF-8) or the bytes would not fit in cap. */
static long byte_level_decode(const loader *L, const char *s, size_t len, char *out, size_t cap) {
    const uint8_t *p = (const uint8_t *)s, *end = p + len;
    long n = 0;
    while (p < end) {
        int cp, k = tok_utf8_char(p, (size_t)(end - p));
        if (k == 1) cp = p[0];
        else if (k == 2) cp = (p[0] & 0x1f) << 6 | (p[1] & 0x3f);
        else return -1;   /* every alphabet character is below U+0800 */
        if (cp >= 324 || L->cp_byte[cp] < 0 || (size_t)n >= cap) return -1;
        out[n++] = (char)L->cp_byte[cp];
        p += k;
    }
    return n;
}

/* ---- pipeline checks -------------------------------------------------- */

static const char *type_of(const cJSON *obj) {
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(obj, "type");
    return cJSON_IsString(ty) ? ty->valuestring : NULL;
}

static int is_true(const cJSON *obj, const char *key) {
    return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(obj, key));
}

static moe8_status check_normalizer(loader *L, const cJSON *root) {
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
    const char *ty;
    if (!n || cJSON_IsNull(n)) return MOE8_OK;
    ty = type_of(n);
    if (ty && strcmp(ty, "NFC") == 0) {
        L->t->nfc = 1;
        return MOE8_OK;
    }
    return moe8_fail(L->err, MOE8_ERR_UNSUPPORTED, -1,
                     "'%s': normalizer type '%s' is not supported (expected NFC or null)",
                     L->path, ty ? ty : "?");
}

static moe8_status check_byte_level(loader *L, const cJSON *bl, const char *field) {
    if (is_true(bl, "add_prefix_space"))
        return moe8_fail(L->err, MOE8_ERR_UNSUPPORTED, -1,
                         "'%s': %s.add_prefix_space true is not supported", L->path, field);
    return MOE8_OK;
}

static moe8_status check_split(loader *L, const cJSON *sp, const char **pattern) {
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(sp, "pattern");
    const cJSON *re = pat ? cJSON_GetObjectItemCaseSensitive(pat, "Regex") : NULL;
    const cJSON *beh = cJSON_GetObjectItemCaseSensitive(sp, "behavior");
    if (!cJSON_IsString(re))
        return moe8_fail(L->err, MOE8_ERR_UNSUPPORTED, -1,
                         "'%s': pre_tokenizer Split.pattern must be {\"Regex\": string}", L->path);
    if (!cJSON_IsString(beh) || strcmp(beh->valuestring, "Isolated") != 0 || is_true(sp, "invert"))
        return moe8_fail(L->err, MOE8_ERR_UNSUPPORTED, -1,
                         "'%s': pre_tokenizer Split must have behavior 'Isolated' and invert false",
                         L->path);
    *pattern = re->valuestring;
    return MOE8_OK;
}

/* Sequence[Split, ByteLevel(use_regex false)] or ByteLevel(use_regex true). */
static moe8_status check_pre_tokenizer(loader *L, const cJSON *root, const char **pattern) {
    const cJSON *pt = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    const char *ty = pt ? type_of(pt) : NULL;
    moe8_status st;
    *pattern = NULL;
    if (ty && strcmp(ty, "ByteLevel") == 0) {
        const cJSON *ur = cJSON_GetObjectItemCaseSensitive(pt, "use_regex");
        if ((st = check_byte_level(L, pt, "pre_tokenizer")) != MOE8_OK) return st;
        if (!cJSON_IsFalse(ur)) *pattern = GPT2_PATTERN;
    } else if (ty && strcmp(ty, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(pt, "pretokenizers");
        const cJSON *a = cJSON_GetArrayItem(list, 0), *b = cJSON_GetArrayItem(list, 1);
        if (cJSON_GetArraySize(list) != 2 || !type_of(a) || !type_of(b) ||
            strcmp(type_of(a), "Split") != 0 || strcmp(type_of(b), "ByteLevel") != 0 ||
            !cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(b, "use_regex")))
            return moe8_fail(L->err, MOE8_ERR_UNSUPPORTED, -1,
                             "'%s': pre_tokenizer Sequence must be [Split, ByteLevel(use_regex "
                             "false)]", L->path);
        if ((st = check_split(L, a, pattern)) != MOE8_OK) return st;
        if ((st = check_byte_level(L, b, "pre_tokenizer.pretokenizers[1]")) != MOE8_OK) return st;
    }
    if (!*pattern)
        return moe8_fail(L->err, MOE8_ERR_UNSUPPORTED, -1,
                         "'%s': pre_tokenizer type '%s' is not supported (expected Sequence[Split, "
                         "ByteLevel] or ByteLevel)", L->path, ty ? ty : "null");
    return MOE8_OK;
}

static int empty_or_null(const cJSON *v) {
    return !v || cJSON_IsNull(v) || (cJSON_IsString(v) && v->valuestring[0] == '\0');
}

static moe8_status check_model(loader *L, const cJSON *model) {
    const char *ty = type_of(model);
    const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if (ty && strcmp(ty, "BPE") != 0)
        return moe8_fail(L->err, MOE8_ERR_UNSUPPORTED, -1,
                         "'%s': model.type '%s' is not supported (expected BPE)", L->path, ty);
    if (!empty_or_null(cJSON_GetObjectItemCaseSensitive(model, "continuing_subword_prefix")) ||
        !empty_or_null(cJSON_GetObjectItemCaseSensitive(model, "end_of_word_suffix")))
        return moe8_fail(L->err, MOE8_ERR_UNSUPPORTED, -1,
                         "'%s': model.continuing_subword_prefix/end_of_word_suffix must be empty",
                         L->path);
    if (is_true(model, "byte_fallback"))
        return moe8_fail(L->err, MOE8_ERR_UNSUPPORTED, -1,
                         "'%s': model.byte_fallback true is not supported", L->path);
    if (dropout && !cJSON_IsNull(dropout) && !(cJSON_IsNumber(dropout) && dropout->valuedouble == 0))
        return moe8_fail(L->err, MOE8_ERR_UNSUPPORTED, -1,
                         "'%s': model.dropout must be null at inference", L->path);
    L->t->ignore_merges = is_true(model, "ignore_merges");
    return MOE8_OK;
}

static moe8_status check_decoder(loader *L, const cJSON *root) {
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(root, "decoder");
    const char *ty;
    if (!d || cJSON_IsNull(d)) return MOE8_OK;
    ty = type_of(d);
    if (ty && strcmp(ty, "ByteLevel") == 0) return MOE8_OK;
    return moe8_fail(L->err, MOE8_ERR_UNSUPPORTED, -1,
                     "'%s': decoder type '%s' is not supported (expected ByteLevel)", L->path,
                     ty ? ty : "?");
}

/* ---- vocabulary and added tokens ------------------------------------- */

static moe8_status read_id(loader *L, const cJSON *item, const char *what, const char *name,
                           int32_t *id) {
    int64_t v;
    if (moe8_json_exact_int(item, &v) != 0 || v < 0 || v >= INT32_MAX)
        return moe8_fail(L->err, MOE8_ERR_FORMAT, -1,
                         "'%s': %s '%s': id must be an integer in [0, 2147483647)", L->path, what,
                         name);
    *id = (int32_t)v;
    return MOE8_OK;
}

static moe8_status check_added_entry(loader *L, const cJSON *a, int i) {
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(a, "content");
    if (!cJSON_IsObject(a) || !cJSON_IsString(c) || c->valuestring[0] == '\0')
        return moe8_fail(L->err, MOE8_ERR_FORMAT, -1,
                         "'%s': added_tokens[%d]: expected an object with a non-empty 'content'",
                         L->path, i);
    if (tok_utf8_valid(c->valuestring, strlen(c->valuestring)) != (size_t)-1)
        return moe8_fail(L->err, MOE8_ERR_FORMAT, -1, "'%s': added_tokens[%d]: content is not UTF-8",
                         L->path, i);
    if (is_true(a, "lstrip") || is_true(a, "rstrip") || is_true(a, "single_word"))
        return moe8_fail(L->err, MOE8_ERR_UNSUPPORTED, -1,
                         "'%s': added_tokens[%d] '%s': lstrip/rstrip/single_word are not supported",
                         L->path, i, c->valuestring);
    return MOE8_OK;
}

/* First pass: largest id and byte total, then allocate the id tables. */
static moe8_status size_tables(loader *L, const cJSON *vocab, const cJSON *added) {
    struct moe8_tokenizer *t = L->t;
    size_t n_entries = 0, n_bytes = 1;
    int32_t id = -1, max_id = -1;
    const cJSON *v;
    int i = 0;
    moe8_status st;
    cJSON_ArrayForEach(v, vocab) {
        if ((st = read_id(L, v, "model.vocab token", v->string, &id)) != MOE8_OK) return st;
        max_id = id > max_id ? id : max_id;
        n_bytes += strlen(v->string);
        n_entries++;
    }
    cJSON_ArrayForEach(v, added) {
        if ((st = check_added_entry(L, v, i++)) != MOE8_OK) return st;
        const char *content = cJSON_GetObjectItemCaseSensitive(v, "content")->valuestring;
        if ((st = read_id(L, cJSON_GetObjectItemCaseSensitive(v, "id"), "added token", content,
                          &id)) != MOE8_OK)
            return st;
        max_id = id > max_id ? id : max_id;
        n_bytes += strlen(content);
        n_entries++;
    }
    if (max_id < 0 || cJSON_GetArraySize(vocab) == 0)
        return moe8_fail(L->err, MOE8_ERR_FORMAT, -1, "'%s': model.vocab is empty", L->path);
    if ((size_t)max_id >= 2 * n_entries + 65536 || n_bytes >= UINT32_MAX)
        return moe8_fail(L->err, MOE8_ERR_FORMAT, -1,
                         "'%s': token id %d is far beyond the %zu tokens listed", L->path, max_id,
                         n_entries);
    t->n_vocab = max_id + 1;
    t->tok_off = calloc((size_t)t->n_vocab, sizeof *t->tok_off);
    t->tok_len = malloc((size_t)t->n_vocab * sizeof *t->tok_len);
    t->tok_flags = calloc((size_t)t->n_vocab, 1);
    t->pool = malloc(n_bytes);
    if (!t->tok_off || !t->tok_len || !t->tok_flags || !t->pool)
        return moe8_fail(L->err, MOE8_ERR_NOMEM, -1, "'%s': cannot allocate %d tokens", L->path,
                         t->n_vocab);
    memset(t->tok_len, 0xff, (size_t)t->n_vocab * sizeof *t->tok_len);
    return MOE8_OK;
}

static void place_token(struct moe8_tokenizer *t, int32_t id, size_t len) {
    t->tok_off[id] = (uint32_t)t->pool_len;
    t->tok_len[id] = (uint32_t)len;
    t->pool_len += len;
    if (len > t->max_token_len) t->max_token_len = len;
}

static moe8_status fill_vocab(loader *L, const cJSON *vocab) {
    struct moe8_tokenizer *t = L->t;
    const cJSON *v;
    if (tok_strmap_init(&t->vocab, (size_t)cJSON_GetArraySize(vocab)) != 0)
        return moe8_fail(L->err, MOE8_ERR_NOMEM, -1, "'%s': cannot allocate the vocab map", L->path);
    cJSON_ArrayForEach(v, vocab) {
        int32_t id = (int32_t)v->valuedouble, other;
        size_t len = strlen(v->string);   /* size_tables reserved this much */
        long n = byte_level_decode(L, v->string, len, t->pool + t->pool_len, len);
        if (t->tok_len[id] != TOK_UNASSIGNED)
            return moe8_fail(L->err, MOE8_ERR_FORMAT, -1, "'%s': model.vocab: id %d appears twice",
                             L->path, id);
        if (n <= 0)
            return moe8_fail(L->err, MOE8_ERR_FORMAT, -1,
                             "'%s': model.vocab token '%s' (id %d) is empty or not in the ByteLevel "
                             "alphabet", L->path, v->string, id);
        place_token(t, id, (size_t)n);
        if ((other = tok_strmap_put(&t->vocab, t, id)) >= 0)
            return moe8_fail(L->err, MOE8_ERR_FORMAT, -1,
                             "'%s': model.vocab: ids %d and %d have the same bytes", L->path, other,
                             id);
    }
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        if ((t->byte_id[b] = tok_strmap_get(&t->vocab, t, &c, 1)) < 0)
            return moe8_fail(L->err, MOE8_ERR_UNSUPPORTED, -1,
                             "'%s': model.vocab has no token for byte 0x%02x", L->path, b);
    }
    return MOE8_OK;
}

typedef struct { uint8_t first; uint32_t len; int32_t id; } added_key;

static int cmp_added(const void *pa, const void *pb) {
    const added_key *a = pa, *b = pb;
    if (a->first != b->first) return a->first < b->first ? -1 : 1;
    if (a->len != b->len) return a->len > b->len ? -1 : 1;   /* longest first */
    return a->id < b->id ? -1 : a->id > b->id;
}

/* Index the added tokens by first byte, longest first (leftmost-longest match). */
static moe8_status index_added(loader *L, added_key *keys, int32_t n) {
    struct moe8_tokenizer *t = L->t;
    qsort(keys, (size_t)n, sizeof *keys, cmp_added);
    t->added = malloc(((size_t)n + 1) * sizeof *t->added);
    if (!t->added) return moe8_fail(L->err, MOE8_ERR_NOMEM, -1, "'%s': out of memory", L->path);
    for (int32_t i = 0; i < n; i++) t->added[i] = keys[i].id;
    t->n_added = n;
    for (int b = 0, i = 0; b <= 256; b++) {
        while (i < n && keys[i].first < b) i++;
        t->added_first[b] = i;
    }
    return MOE8_OK;
}

static moe8_status fill_added(loader *L, const cJSON *added) {
    struct moe8_tokenizer *t = L->t;
    int n = cJSON_GetArraySize(added), k = 0;
    added_key *keys = malloc(((size_t)n + 1) * sizeof *keys);
    moe8_status st = MOE8_OK;
    const cJSON *a;
    if (!keys) return moe8_fail(L->err, MOE8_ERR_NOMEM, -1, "'%s': out of memory", L->path);
    cJSON_ArrayForEach(a, added) {
        const char *c = cJSON_GetObjectItemCaseSensitive(a, "content")->valuestring;
        int32_t id = (int32_t)cJSON_GetObjectItemCaseSensitive(a, "id")->valuedouble;
        size_t len = strlen(c), have;
        if (t->tok_flags[id] & MOE8_TOKEN_ADDED) continue;   /* listed twice */
        if (t->tok_len[id] == TOK_UNASSIGNED) {
            memcpy(t->pool + t->pool_len, c, len);
            place_token(t, id, len);
        } else if (have = t->tok_len[id], have != len || memcmp(t->pool + t->tok_off[id], c, len)) {
            st = moe8_fail(L->err, MOE8_ERR_FORMAT, -1,
                           "'%s': added token '%s' has id %d, which model.vocab gives to other "
                           "bytes", L->path, c, id);
            goto out;
        }
        t->tok_flags[id] = MOE8_TOKEN_ADDED | (is_true(a, "special") ? MOE8_TOKEN_SPECIAL : 0);
        keys[k++] = (added_key){(uint8_t)c[0], (uint32_t)len, id};
    }
    st = index_added(L, keys, k);
out:
    free(keys);
    return st;
}

/* ---- merges ------------------------------------------------------------ */

/* Split merge i into its two ByteLevel-spelled parts. */
static moe8_status merge_parts(loader *L, const cJSON *m, int i, const char **a, size_t *na,
                               const char **b, size_t *nb) {
    if (cJSON_IsString(m)) {
        const char *s = m->valuestring, *sp = strchr(s, ' ');
        if (sp && sp != s && sp[1] && !strchr(sp + 1, ' ')) {
            *a = s, *na = (size_t)(sp - s), *b = sp + 1, *nb = strlen(sp + 1);
            return MOE8_OK;
        }
    } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 &&
               cJSON_IsString(cJSON_GetArrayItem(m, 0)) && cJSON_IsString(cJSON_GetArrayItem(m, 1))) {
        *a = cJSON_GetArrayItem(m, 0)->valuestring, *na = strlen(*a);
        *b = cJSON_GetArrayItem(m, 1)->valuestring, *nb = strlen(*b);
        return MOE8_OK;
    }
    return moe8_fail(L->err, MOE8_ERR_FORMAT, -1,
                     "'%s': model.merges[%d]: expected \"a b\" or [\"a\", \"b\"]", L->path, i);
}

/* Merge i: both parts and their concatenation must be tokens of model.vocab.
 * A part decoding to more than max_token_len bytes cannot be one, so each is
 * decoded with that cap: L->tmp never holds more than 2 * max_token_len. */
static moe8_status add_merge(loader *L, const cJSON *m, int i) {
    struct moe8_tokenizer *t = L->t;
    const char *a = NULL, *b = NULL;
    size_t na = 0, nb = 0, cap = t->max_token_len;
    long ra, rb = -1;
    int32_t ia = -1, ib = -1, inew = -1;
    moe8_status st = merge_parts(L, m, i, &a, &na, &b, &nb);
    if (st != MOE8_OK) return st;
    ra = byte_level_decode(L, a, na, L->tmp, cap);
    if (ra > 0) rb = byte_level_decode(L, b, nb, L->tmp + ra, cap);
    if (ra > 0 && rb > 0) {
        ia = tok_strmap_get(&t->vocab, t, L->tmp, (size_t)ra);
        ib = tok_strmap_get(&t->vocab, t, L->tmp + ra, (size_t)rb);
        inew = tok_strmap_get(&t->vocab, t, L->tmp, (size_t)(ra + rb));
    }
    if (ia < 0 || ib < 0 || inew < 0)
        return moe8_fail(L->err, MOE8_ERR_FORMAT, -1,
                         "'%s': model.merges[%d] ('%.*s' + '%.*s'): a part or the merged token is "
                         "not in model.vocab", L->path, i, (int)(na > 64 ? 64 : na), a,
                         (int)(nb > 64 ? 64 : nb), b);
    tok_pairmap_put(&t->merges, ia, ib, i, inew);
    return MOE8_OK;
}

static moe8_status load_merges(loader *L, const cJSON *merges) {
    int n = cJSON_GetArraySize(merges), i = 0;
    const cJSON *m;
    moe8_status st;
    if (merges && !cJSON_IsArray(merges))
        return moe8_fail(L->err, MOE8_ERR_FORMAT, -1, "'%s': model.merges must be an array",
                         L->path);
    L->tmp = malloc(2 * L->t->max_token_len + 8);
    if (!L->tmp || tok_pairmap_init(&L->t->merges, (size_t)n) != 0)
        return moe8_fail(L->err, MOE8_ERR_NOMEM, -1, "'%s': cannot allocate %d merges", L->path, n);
    cJSON_ArrayForEach(m, merges) {
        if ((st = add_merge(L, m, i++)) != MOE8_OK) return st;
    }
    return MOE8_OK;
}

/* ---- regex and tokenizer_config.json --------------------------------- */

static moe8_status compile_regex(loader *L, const char *pattern) {
    int code;
    PCRE2_SIZE off;
    L->t->re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                             &code, &off, NULL);
    if (!L->t->re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(code, msg, sizeof msg);
        return moe8_fail(L->err, MOE8_ERR_UNSUPPORTED, -1,
                         "'%s': pre_tokenizer regex does not compile at pattern offset %zu: %s",
                         L->path, (size_t)off, (const char *)msg);
    }
    L->t->re_jit = pcre2_jit_compile(L->t->re, PCRE2_JIT_COMPLETE) == 0;
    return MOE8_OK;
}

/* bos_token/eos_token: null, "text" or {"content": "text", ...}. */
static int32_t config_token(const moe8_tokenizer *t, const cJSON *cfg, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (cJSON_IsObject(v)) v = cJSON_GetObjectItemCaseSensitive(v, "content");
    return cJSON_IsString(v) ? moe8_tokenizer_token_id(t, v->valuestring) : -1;
}

/* tokenizer_config.json (text NULL when the file is absent: defaults). */
static moe8_status apply_config(struct moe8_tokenizer *t, const char *text, size_t len,
                                const char *path, moe8_error *err) {
    cJSON *cfg = NULL, *bos;
    moe8_status st;
    t->bos_id = t->eos_id = -1;
    if (!text) return MOE8_OK;
    st = moe8_json_parse(text, len, path, &cfg, err);
    if (st == MOE8_OK && !cJSON_IsObject(cfg))
        st = moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': expected a JSON object", path);
    if (st != MOE8_OK) goto out;
    bos = cJSON_GetObjectItemCaseSensitive(cfg, "add_bos_token");
    if (bos && !cJSON_IsBool(bos) && !cJSON_IsNull(bos)) {
        st = moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': add_bos_token must be true or false", path);
        goto out;
    }
    t->add_bos = cJSON_IsTrue(bos);
    t->bos_id = config_token(t, cfg, "bos_token");
    t->eos_id = config_token(t, cfg, "eos_token");
    if (t->add_bos && t->bos_id < 0)
        st = moe8_fail(err, MOE8_ERR_FORMAT, -1,
                       "'%s': add_bos_token is true but bos_token is missing or not a token", path);
    if (st == MOE8_OK) st = tok_chat_from_config(t, cfg, path, err);
out:
    cJSON_Delete(cfg);
    return st;
}

/* ---- load / free ------------------------------------------------------- */

static moe8_status build(loader *L, const cJSON *root) {
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    const char *pattern;
    moe8_status st;
    if (!cJSON_IsObject(root) || !cJSON_IsObject(model) || !cJSON_IsObject(vocab))
        return moe8_fail(L->err, MOE8_ERR_FORMAT, -1,
                         "'%s': expected an object with model.vocab an object", L->path);
    if (added && !cJSON_IsNull(added) && !cJSON_IsArray(added))
        return moe8_fail(L->err, MOE8_ERR_FORMAT, -1, "'%s': added_tokens must be an array",
                         L->path);
    if ((st = check_normalizer(L, root)) || (st = check_pre_tokenizer(L, root, &pattern)) ||
        (st = check_model(L, model)) || (st = check_decoder(L, root)))
        return st;
    byte_level_table(L->cp_byte);
    if ((st = size_tables(L, vocab, added)) || (st = fill_vocab(L, vocab)) ||
        (st = fill_added(L, added)) ||
        (st = load_merges(L, cJSON_GetObjectItemCaseSensitive(model, "merges"))))
        return st;
    return compile_regex(L, pattern);
}

moe8_status tok_load_json(const char *json, size_t len, const char *path, const char *cfg,
                          size_t cfg_len, const char *cfg_path, moe8_tokenizer **out,
                          moe8_error *err) {
    cJSON *root = NULL;
    loader L = {0};
    moe8_status st;
    *out = NULL;
    L.path = path;
    L.err = err;
    if (!(L.t = calloc(1, sizeof *L.t)))
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "'%s': out of memory", path);
    st = moe8_json_parse(json, len, path, &root, err);
    if (st == MOE8_OK) st = build(&L, root);
    cJSON_Delete(root);
    free(L.tmp);
    if (st == MOE8_OK) st = apply_config(L.t, cfg, cfg_len, cfg_path, err);
    if (st != MOE8_OK) {
        moe8_tokenizer_free(L.t);
        return st;
    }
    *out = L.t;
    return MOE8_OK;
}

moe8_status moe8_tokenizer_load(const char *dir, moe8_tokenizer **out, moe8_error *err) {
    char path[4096], cfg_path[4096];
    char *text = NULL, *cfg = NULL;
    size_t len = 0, cfg_len = 0;
    moe8_status st;
    if (!dir || !out) return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "tokenizer_load: NULL argument");
    *out = NULL;
    if ((size_t)snprintf(cfg_path, sizeof cfg_path, "%s/tokenizer_config.json", dir) >=
        sizeof cfg_path)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "tokenizer folder path is too long");
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    st = moe8_read_file(path, TOK_JSON_MAX, &text, &len, err);
    if (st == MOE8_OK) {
        st = moe8_read_file(cfg_path, TOK_CONFIG_MAX, &cfg, &cfg_len, err);
        if (st == MOE8_ERR_NOT_FOUND) st = MOE8_OK;   /* optional: defaults */
    }
    if (st == MOE8_OK) st = tok_load_json(text, len, path, cfg, cfg_len, cfg_path, out, err);
    if (st == MOE8_OK && (st = tok_chat_from_dir(*out, dir, err)) != MOE8_OK) {
        moe8_tokenizer_free(*out);
        *out = NULL;
    }
    free(cfg);
    free(text);
    return st;
}

void moe8_tokenizer_free(moe8_tokenizer *t) {
    if (!t) return;
    free(t->tok_off);
    free(t->tok_len);
    free(t->tok_flags);
    free(t->pool);
    tok_strmap_free(&t->vocab);
    tok_pairmap_free(&t->merges);
    free(t->added);
    pcre2_code_free(t->re);
    tok_chat_free(t->chat);
    free(t);
}
