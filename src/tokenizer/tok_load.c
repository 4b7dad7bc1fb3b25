/*
 * tok_load.c — builds a moe8_tokenizer from a model folder's tokenizer.json
 * (Hugging Face `tokenizers` format) and, when present, tokenizer_config.json.
 *
 * The normalizer, pre_tokenizer and decoder sections are read by tok_norm.c
 * (which lists what it accepts); here the rest. Anything else is refused with
 * MOE8_ERR_UNSUPPORTED, naming the field:
 *   model          BPE: vocab {spelling: id}, merges as "a b" strings or [a, b] arrays
 *                  (rank = index), no subword prefix/suffix, no dropout; ignore_merges,
 *                  byte_fallback (all 256 "<0xNN>" tokens needed), unk_token, fuse_unk honoured
 *   added_tokens   [{id, content, special, normalized, ...}] with lstrip/rstrip/single_word
 *                  false; `normalized` true: matched on the normalized text (the pattern is
 *                  the normalized content), else on the raw text
 * With a ByteLevel pre-tokenizer every token is stored as its raw bytes (the
 * spelling decoded here) and the vocabulary must hold a one-byte token for each
 * of the 256 byte values; a vocab entry outside the ByteLevel alphabet must be
 * an added token (DeepSeek-V3's <｜begin▁of▁sentence｜>: BPE cannot reach it).
 * Otherwise (SentencePiece-style, Llama-2/Mistral) a token's key is its vocab
 * spelling ("▁Hello") and its text the decoder's per-token output (" Hello").
 * Every merge must name two vocab tokens whose concatenation is one too (a part
 * longer than the longest token is refused without being decoded in full).
 * The JSON is strict (as json_util.c's): no key twice in any object, nothing
 * after the value; tok_json.c parses it into an arena (no malloc per node).
 * moe8_tok_load_json builds from text in memory (the fuzz target's way
 * in); moe8_tokenizer_load reads the two files and calls it.
 * Not done: post-processor templates (the caller adds BOS when add_bos_token
 * says so; add_eos_token is not applied), clean_up_tokenization_spaces true
 * (refused), tokenizer_config's `legacy` (tokenizer.json is followed as is).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/json_util.h"
#include "tokenizer/tok_template.h"
#include "tokenizer/tokenizer.h"

#define TOK_JSON_MAX ((size_t)1 << 30)
#define TOK_CONFIG_MAX ((size_t)64 << 20)
#define TOK_F_RAW 0x80u   /* tok_flags, load only: ByteLevel vocab entry kept verbatim */

/* Loading context: names the file in every error. */
typedef struct {
    struct moe8_tokenizer *t;
    const char *path;   /* ".../tokenizer.json" */
    moe8_error *err;
    int16_t cp_byte[324]; /* ByteLevel code point -> byte, -1 if not in the alphabet */
    size_t pool_cap, key_cap;
    char *tmp;          /* scratch: [tmp_cap] */
    size_t tmp_cap;
} loader;

static const cJSON *get(const cJSON *obj, const char *key) {
    return cJSON_GetObjectItemCaseSensitive(obj, key);
}

static int is_true(const cJSON *obj, const char *key) { return cJSON_IsTrue(get(obj, key)); }

static moe8_status no_memory(loader *L) {
    return moe8_fail(L->err, MOE8_ERR_NOMEM, -1, "'%s': out of memory", L->path);
}

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
        uint32_t cp;
        int k = moe8_utf8_decode(p, (size_t)(end - p), &cp);
        if (k != 1 && k != 2) return -1;   /* every alphabet character is below U+0800 */
        if (cp >= 324 || L->cp_byte[cp] < 0 || (size_t)n >= cap) return -1;
        out[n++] = (char)L->cp_byte[cp];
        p += k;
    }
    return n;
}

/* ---- the model section ------------------------------------------------- */

static int empty_or_null(const cJSON *v) {
    return !v || cJSON_IsNull(v) || (cJSON_IsString(v) && v->valuestring[0] == '\0');
}

static moe8_status check_model(loader *L, const cJSON *model) {
    const cJSON *ty = get(model, "type"), *dropout = get(model, "dropout");
    const cJSON *unk = get(model, "unk_token");
    if (cJSON_IsString(ty) && strcmp(ty->valuestring, "BPE") != 0)
        return moe8_fail(L->err, MOE8_ERR_UNSUPPORTED, -1,
                         "'%s': model.type '%s' is not supported (expected BPE)", L->path,
                         ty->valuestring);
    if (!empty_or_null(get(model, "continuing_subword_prefix")) ||
        !empty_or_null(get(model, "end_of_word_suffix")))
        return moe8_fail(L->err, MOE8_ERR_UNSUPPORTED, -1,
                         "'%s': model.continuing_subword_prefix/end_of_word_suffix must be empty",
                         L->path);
    if (dropout && !cJSON_IsNull(dropout) && !(cJSON_IsNumber(dropout) && dropout->valuedouble == 0))
        return moe8_fail(L->err, MOE8_ERR_UNSUPPORTED, -1,
                         "'%s': model.dropout must be null at inference", L->path);
    if (unk && !cJSON_IsNull(unk) && !(cJSON_IsString(unk) && unk->valuestring[0]))
        return moe8_fail(L->err, MOE8_ERR_FORMAT, -1,
                         "'%s': model.unk_token must be null or a non-empty string", L->path);
    L->t->ignore_merges = is_true(model, "ignore_merges");
    L->t->byte_fallback = is_true(model, "byte_fallback");
    L->t->fuse_unk = is_true(model, "fuse_unk");
    return MOE8_OK;
}

/* ---- vocabulary --------------------------------------------------------- */

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
    const cJSON *c = get(a, "content");
    if (!cJSON_IsObject(a) || !cJSON_IsString(c) || c->valuestring[0] == '\0')
        return moe8_fail(L->err, MOE8_ERR_FORMAT, -1,
                         "'%s': added_tokens[%d]: expected an object with a non-empty 'content'",
                         L->path, i);
    if (moe8_utf8_valid(c->valuestring, strlen(c->valuestring)) != (size_t)-1)
        return moe8_fail(L->err, MOE8_ERR_FORMAT, -1, "'%s': added_tokens[%d]: content is not UTF-8",
                         L->path, i);
    if (is_true(a, "lstrip") || is_true(a, "rstrip") || is_true(a, "single_word"))
        return moe8_fail(L->err, MOE8_ERR_UNSUPPORTED, -1,
                         "'%s': added_tokens[%d] '%s': lstrip/rstrip/single_word are not supported",
                         L->path, i, c->valuestring);
    return MOE8_OK;
}

/* First pass: largest id, longest spelling and the byte total, then allocate the id tables. */
static moe8_status size_tables(loader *L, const cJSON *vocab, const cJSON *added) {
    struct moe8_tokenizer *t = L->t;
    size_t n_entries = 0, n_bytes = 1, longest = 1;
    int32_t id = -1, max_id = -1;
    const cJSON *v;
    int i = 0;
    moe8_status st;
    cJSON_ArrayForEach(v, vocab) {
        if ((st = read_id(L, v, "model.vocab token", v->string, &id)) != MOE8_OK) return st;
        size_t n = strlen(v->string);
        max_id = id > max_id ? id : max_id;
        longest = n > longest ? n : longest;
        n_bytes += n;
        n_entries++;
    }
    cJSON_ArrayForEach(v, added) {
        if ((st = check_added_entry(L, v, i++)) != MOE8_OK) return st;
        const char *content = get(v, "content")->valuestring;
        if ((st = read_id(L, get(v, "id"), "added token", content, &id)) != MOE8_OK) return st;
        max_id = id > max_id ? id : max_id;
        longest = strlen(content) > longest ? strlen(content) : longest;
        n_bytes += strlen(content);
        n_entries++;
    }
    if (max_id < 0 || cJSON_GetArraySize(vocab) == 0)
        return moe8_fail(L->err, MOE8_ERR_FORMAT, -1, "'%s': model.vocab is empty", L->path);
    if ((size_t)max_id >= 2 * n_entries + 65536 || n_bytes >= UINT32_MAX / 4)
        return moe8_fail(L->err, MOE8_ERR_FORMAT, -1,
                         "'%s': token id %d is far beyond the %zu tokens listed", L->path, max_id,
                         n_entries);
    t->n_vocab = max_id + 1;
    t->tok_off = calloc((size_t)t->n_vocab, sizeof *t->tok_off);
    t->tok_len = malloc((size_t)t->n_vocab * sizeof *t->tok_len);
    t->tok_flags = calloc((size_t)t->n_vocab, 1);
    t->pool = malloc(L->pool_cap = n_bytes);
    L->tmp = malloc(L->tmp_cap = 2 * longest + 8);
    if (!t->byte_level) {
        t->key_off = calloc((size_t)t->n_vocab, sizeof *t->key_off);
        t->key_len = calloc((size_t)t->n_vocab, sizeof *t->key_len);
        t->key_pool = malloc(L->key_cap = n_bytes);
    }
    if (!t->tok_off || !t->tok_len || !t->tok_flags || !t->pool || !L->tmp ||
        (!t->byte_level && (!t->key_off || !t->key_len || !t->key_pool)))
        return moe8_fail(L->err, MOE8_ERR_NOMEM, -1, "'%s': cannot allocate %d tokens", L->path,
                         t->n_vocab);
    memset(t->tok_len, 0xff, (size_t)t->n_vocab * sizeof *t->tok_len);
    return MOE8_OK;
}

/* Append n bytes to a growing pool; the offset in *off. -1: no memory or too big. */
static int pool_put(char **pool, size_t *len, size_t *cap, const char *s, size_t n, uint32_t *off) {
    if (n > UINT32_MAX - 1 - *len) return -1;
    if (*len + n > *cap) {
        size_t c = *cap * 2 > *len + n ? *cap * 2 : *len + n;
        char *p = realloc(*pool, c);
        if (!p) return -1;
        *pool = p, *cap = c;
    }
    memcpy(*pool + *len, s, n);
    *off = (uint32_t)*len;
    *len += n;
    return 0;
}

static moe8_status put_text(loader *L, int32_t id, const char *s, size_t n) {
    struct moe8_tokenizer *t = L->t;
    if (pool_put(&t->pool, &t->pool_len, &L->pool_cap, s, n, &t->tok_off[id]) != 0)
        return no_memory(L);
    t->tok_len[id] = (uint32_t)n;
    if (n > t->max_token_len) t->max_token_len = n;
    return MOE8_OK;
}

/* SentencePiece-style: the key is the spelling, the text the decoder's per-token output. */
static moe8_status put_spelling(loader *L, int32_t id, const char *s, size_t n) {
    struct moe8_tokenizer *t = L->t;
    char *text;
    size_t tn;
    moe8_status st;
    if (pool_put(&t->key_pool, &t->key_pool_len, &L->key_cap, s, n, &t->key_off[id]) != 0 ||
        moe8_tok_piece_text(t, s, n, &text, &tn) != 0)
        return no_memory(L);
    t->key_len[id] = (uint32_t)n;
    if (n > t->max_key_len) t->max_key_len = n;
    st = put_text(L, id, text, tn);
    free(text);
    return st;
}

static moe8_status vocab_entry(loader *L, const char *s, int32_t id) {
    struct moe8_tokenizer *t = L->t;
    size_t len = strlen(s);
    long n;
    if (t->tok_len[id] != TOK_UNASSIGNED)
        return moe8_fail(L->err, MOE8_ERR_FORMAT, -1, "'%s': model.vocab: id %d appears twice",
                         L->path, id);
    if (len == 0)
        return moe8_fail(L->err, MOE8_ERR_FORMAT, -1, "'%s': model.vocab token (id %d) is empty",
                         L->path, id);
    if (!t->byte_level) return put_spelling(L, id, s, len);
    n = byte_level_decode(L, s, len, L->tmp, L->tmp_cap);
    if (n > 0) return put_text(L, id, L->tmp, (size_t)n);
    t->tok_flags[id] = TOK_F_RAW;   /* outside the alphabet: must be an added token */
    return put_text(L, id, s, len);
}

static moe8_status fill_vocab(loader *L, const cJSON *vocab) {
    struct moe8_tokenizer *t = L->t;
    const cJSON *v;
    moe8_status st;
    int32_t other;
    if (moe8_tok_strmap_init(&t->vocab, (size_t)cJSON_GetArraySize(vocab)) != 0)
        return moe8_fail(L->err, MOE8_ERR_NOMEM, -1, "'%s': cannot allocate the vocab map", L->path);
    cJSON_ArrayForEach(v, vocab) {
        int32_t id = (int32_t)v->valuedouble;   /* size_tables checked it */
        if ((st = vocab_entry(L, v->string, id)) != MOE8_OK) return st;
        if (t->tok_flags[id] & TOK_F_RAW) continue;   /* BPE never makes it */
        if ((other = moe8_tok_strmap_put(&t->vocab, t, id)) >= 0)
            return moe8_fail(L->err, MOE8_ERR_FORMAT, -1,
                             "'%s': model.vocab: ids %d and %d have the same bytes", L->path, other,
                             id);
    }
    if (!t->key_pool) t->max_key_len = t->max_token_len;
    return MOE8_OK;
}

/* byte_id[], unk_id: the tokens BPE starts from when a character has none of its own. */
static moe8_status find_fallbacks(loader *L, const cJSON *model) {
    struct moe8_tokenizer *t = L->t;
    const cJSON *unk = get(model, "unk_token");
    char name[8];
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        t->byte_id[b] = t->byte_level ? moe8_tok_strmap_get(&t->vocab, t, &c, 1) : -1;
        if (t->byte_level && t->byte_id[b] < 0)
            return moe8_fail(L->err, MOE8_ERR_UNSUPPORTED, -1,
                             "'%s': model.vocab has no token for byte 0x%02x", L->path, b);
        snprintf(name, sizeof name, "<0x%02X>", b);
        int32_t fb = t->byte_fallback ? moe8_tok_strmap_get(&t->vocab, t, name, 6) : -1;
        if (t->byte_fallback && fb < 0)
            return moe8_fail(L->err, MOE8_ERR_UNSUPPORTED, -1,
                             "'%s': model.byte_fallback is true but model.vocab has no token '%s'",
                             L->path, name);
        if (!t->byte_level) t->byte_id[b] = fb;
    }
    t->unk_id = -1;
    if (cJSON_IsString(unk) && !t->byte_level &&
        (t->unk_id = moe8_tok_strmap_get(&t->vocab, t, unk->valuestring, strlen(unk->valuestring))) < 0)
        return moe8_fail(L->err, MOE8_ERR_FORMAT, -1,
                         "'%s': model.unk_token '%s' is not in model.vocab", L->path,
                         unk->valuestring);
    return MOE8_OK;
}

/* ---- added tokens ------------------------------------------------------- */

typedef struct { uint8_t first; uint32_t len, off; int32_t id; } added_key;

static int cmp_added(const void *pa, const void *pb) {
    const added_key *a = pa, *b = pb;
    if (a->first != b->first) return a->first < b->first ? -1 : 1;
    if (a->len != b->len) return a->len > b->len ? -1 : 1;   /* longest first */
    return a->id < b->id ? -1 : a->id > b->id;
}

/* Index one set's patterns by first byte, longest first (leftmost-longest match). */
static moe8_status index_added(loader *L, tok_added_set *set, added_key *keys, int32_t n) {
    qsort(keys, (size_t)n, sizeof *keys, cmp_added);
    set->ids = malloc(((size_t)n + 1) * sizeof *set->ids);
    set->off = malloc(((size_t)n + 1) * sizeof *set->off);
    set->len = malloc(((size_t)n + 1) * sizeof *set->len);
    if (!set->ids || !set->off || !set->len) return no_memory(L);
    for (int32_t i = 0; i < n; i++)
        set->ids[i] = keys[i].id, set->off[i] = keys[i].off, set->len[i] = keys[i].len;
    set->n = n;
    for (int b = 0, i = 0; b <= 256; b++) {
        while (i < n && keys[i].first < b) i++;
        set->first[b] = i;
    }
    return MOE8_OK;
}

/* One added token: its text and key (its content) when model.vocab lacks the id,
 * else a check that the vocab spells it the same. */
static moe8_status place_added(loader *L, int32_t id, const char *c) {
    struct moe8_tokenizer *t = L->t;
    size_t len = strlen(c), have;
    const char *s;
    if (t->tok_len[id] == TOK_UNASSIGNED) {
        if (t->byte_level) return put_text(L, id, c, len);
        return put_spelling(L, id, c, len);
    }
    s = tok_key(t, id, &have);
    if (have != len || memcmp(s, c, len) != 0)
        return moe8_fail(L->err, MOE8_ERR_FORMAT, -1,
                         "'%s': added token '%s' has id %d, which model.vocab gives to other bytes",
                         L->path, c, id);
    return MOE8_OK;
}

/* Append the pattern of added token id (content c) to set's pattern pool as
 * keys[*k]: a `normalized` token's pattern is its normalized content. */
static moe8_status add_pattern(loader *L, tok_added_set *set, added_key *keys, int32_t *k,
                               int32_t id, const char *c, int normalized, size_t *pat_len,
                               size_t *pat_cap) {
    const char *p = c;
    size_t n = strlen(c);
    char *own = NULL;
    uint32_t off;
    moe8_status st = MOE8_OK;
    if (normalized && (st = moe8_tok_normalize(L->t, c, n, 0, &p, &n, &own, L->err)) != MOE8_OK)
        return st;
    if (n == 0)
        st = moe8_fail(L->err, MOE8_ERR_FORMAT, -1, "'%s': added token '%s' normalizes to nothing",
                       L->path, c);
    else if (pool_put(&set->pat, pat_len, pat_cap, p, n, &off) != 0)
        st = no_memory(L);
    else
        keys[(*k)++] = (added_key){(uint8_t)p[0], (uint32_t)n, off, id};
    free(own);
    return st;
}

static moe8_status fill_added(loader *L, const cJSON *added) {
    struct moe8_tokenizer *t = L->t;
    int n = cJSON_GetArraySize(added);
    int32_t k[2] = {0, 0};
    size_t len[2] = {0, 0}, cap[2] = {0, 0};
    added_key *keys[2] = {malloc(((size_t)n + 1) * sizeof(added_key)),
                          malloc(((size_t)n + 1) * sizeof(added_key))};
    tok_added_set *set[2] = {&t->added_raw, &t->added_norm};
    moe8_status st = keys[0] && keys[1] ? MOE8_OK : no_memory(L);
    const cJSON *a;
    cJSON_ArrayForEach(a, added) {
        const char *c = get(a, "content")->valuestring;
        int32_t id = (int32_t)get(a, "id")->valuedouble;
        int norm = is_true(a, "normalized");
        if (st != MOE8_OK) break;
        if (t->tok_flags[id] & MOE8_TOKEN_ADDED) continue;   /* listed twice */
        if ((st = place_added(L, id, c)) != MOE8_OK ||
            (st = add_pattern(L, set[norm], keys[norm], &k[norm], id, c, norm, &len[norm],
                              &cap[norm])) != MOE8_OK)
            break;
        t->tok_flags[id] = MOE8_TOKEN_ADDED | (is_true(a, "special") ? MOE8_TOKEN_SPECIAL : 0);
    }
    for (int32_t id = 0; st == MOE8_OK && id < t->n_vocab; id++)
        if (t->tok_flags[id] & TOK_F_RAW)
            st = moe8_fail(L->err, MOE8_ERR_FORMAT, -1,
                           "'%s': model.vocab token '%.*s' (id %d) is not in the ByteLevel "
                           "alphabet (nor an added token)", L->path, (int)t->tok_len[id],
                           t->pool + t->tok_off[id], id);
    for (int i = 0; i < 2 && st == MOE8_OK; i++) st = index_added(L, set[i], keys[i], k[i]);
    free(keys[0]);
    free(keys[1]);
    return st;
}

/* ---- merges ------------------------------------------------------------ */

/* Split merge i into its two parts (vocab spellings). */
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

/* A part's key into out (at most cap bytes): ByteLevel decoded, else as spelled; -1 if it
 * cannot be a key (too long, outside the alphabet). */
static long part_key(const loader *L, const char *s, size_t n, char *out, size_t cap) {
    if (L->t->byte_level) return byte_level_decode(L, s, n, out, cap);
    if (n == 0 || n > cap) return -1;
    memcpy(out, s, n);
    return (long)n;
}

/* Merge i: both parts and their concatenation must be tokens of model.vocab.
 * A part longer than max_key_len cannot be one, so each is read with that cap:
 * L->tmp never holds more than 2 * max_key_len. */
static moe8_status add_merge(loader *L, const cJSON *m, int i) {
    struct moe8_tokenizer *t = L->t;
    const char *a = NULL, *b = NULL;
    size_t na = 0, nb = 0, cap = t->max_key_len;
    long ra, rb = -1;
    int32_t ia = -1, ib = -1, inew = -1;
    moe8_status st = merge_parts(L, m, i, &a, &na, &b, &nb);
    if (st != MOE8_OK) return st;
    ra = part_key(L, a, na, L->tmp, cap);
    if (ra > 0) rb = part_key(L, b, nb, L->tmp + ra, cap);
    if (ra > 0 && rb > 0) {
        ia = moe8_tok_strmap_get(&t->vocab, t, L->tmp, (size_t)ra);
        ib = moe8_tok_strmap_get(&t->vocab, t, L->tmp + ra, (size_t)rb);
        inew = moe8_tok_strmap_get(&t->vocab, t, L->tmp, (size_t)(ra + rb));
    }
    if (ia < 0 || ib < 0 || inew < 0)
        return moe8_fail(L->err, MOE8_ERR_FORMAT, -1,
                         "'%s': model.merges[%d] ('%.*s' + '%.*s'): a part or the merged token is "
                         "not in model.vocab", L->path, i, (int)(na > 64 ? 64 : na), a,
                         (int)(nb > 64 ? 64 : nb), b);
    moe8_tok_pairmap_put(&t->merges, ia, ib, i, inew);
    return MOE8_OK;
}

static moe8_status load_merges(loader *L, const cJSON *merges) {
    int n = cJSON_GetArraySize(merges), i = 0;
    const cJSON *m;
    moe8_status st;
    if (merges && !cJSON_IsArray(merges))
        return moe8_fail(L->err, MOE8_ERR_FORMAT, -1, "'%s': model.merges must be an array",
                         L->path);
    if (2 * L->t->max_key_len + 8 > L->tmp_cap) {   /* keys are never longer than spellings */
        free(L->tmp);
        L->tmp = malloc(L->tmp_cap = 2 * L->t->max_key_len + 8);
    }
    if (!L->tmp || moe8_tok_pairmap_init(&L->t->merges, (size_t)n) != 0)
        return moe8_fail(L->err, MOE8_ERR_NOMEM, -1, "'%s': cannot allocate %d merges", L->path, n);
    cJSON_ArrayForEach(m, merges) {
        if ((st = add_merge(L, m, i++)) != MOE8_OK) return st;
    }
    return MOE8_OK;
}

/* ---- tokenizer_config.json --------------------------------------------- */

/* bos_token/eos_token: null, "text" or {"content": "text", ...}. */
static int32_t config_token(const moe8_tokenizer *t, const cJSON *cfg, const char *key) {
    const cJSON *v = get(cfg, key);
    if (cJSON_IsObject(v)) v = get(v, "content");
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
    if (cJSON_IsTrue(get(cfg, "clean_up_tokenization_spaces"))) {
        st = moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1,
                       "'%s': clean_up_tokenization_spaces true is not supported", path);
        goto out;
    }
    t->add_bos = cJSON_IsTrue(bos);
    t->bos_id = config_token(t, cfg, "bos_token");
    t->eos_id = config_token(t, cfg, "eos_token");
    if (t->add_bos && t->bos_id < 0)
        st = moe8_fail(err, MOE8_ERR_FORMAT, -1,
                       "'%s': add_bos_token is true but bos_token is missing or not a token", path);
    if (st == MOE8_OK) st = moe8_tok_chat_from_config(t, cfg, path, err);
out:
    cJSON_Delete(cfg);
    return st;
}

/* ---- load / free ------------------------------------------------------- */

static moe8_status build(loader *L, const cJSON *root) {
    const cJSON *model = get(root, "model");
    const cJSON *vocab = get(model, "vocab");
    const cJSON *added = get(root, "added_tokens");
    moe8_status st;
    if (!cJSON_IsObject(root) || !cJSON_IsObject(model) || !cJSON_IsObject(vocab))
        return moe8_fail(L->err, MOE8_ERR_FORMAT, -1,
                         "'%s': expected an object with model.vocab an object", L->path);
    if (added && !cJSON_IsNull(added) && !cJSON_IsArray(added))
        return moe8_fail(L->err, MOE8_ERR_FORMAT, -1, "'%s': added_tokens must be an array",
                         L->path);
    if ((st = moe8_tok_pipeline_load(L->t, root, L->path, L->err)) || (st = check_model(L, model)))
        return st;
    byte_level_table(L->cp_byte);
    if ((st = size_tables(L, vocab, added)) || (st = fill_vocab(L, vocab)) ||
        (st = find_fallbacks(L, model)) || (st = fill_added(L, added)))
        return st;
    return load_merges(L, get(model, "merges"));
}

moe8_status moe8_tok_load_json(const char *json, size_t len, const char *path, const char *cfg,
                          size_t cfg_len, const char *cfg_path, moe8_tokenizer **out,
                          moe8_error *err) {
    cJSON *root = NULL;
    moe8_tok_json *arena = NULL;
    loader L = {0};
    moe8_status st;
    *out = NULL;
    L.path = path;
    L.err = err;
    if (!(L.t = calloc(1, sizeof *L.t)))
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "'%s': out of memory", path);
    st = moe8_tok_json_parse(json, len, path, &root, &arena, err);
    if (st == MOE8_OK) st = build(&L, root);
    moe8_tok_json_free(arena);
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
    if (st == MOE8_OK) st = moe8_tok_load_json(text, len, path, cfg, cfg_len, cfg_path, out, err);
    if (st == MOE8_OK && (st = moe8_tok_chat_from_dir(*out, dir, err)) != MOE8_OK) {
        moe8_tokenizer_free(*out);
        *out = NULL;
    }
    free(cfg);
    free(text);
    return st;
}

static void free_added_set(tok_added_set *s) {
    free(s->ids);
    free(s->off);
    free(s->len);
    free(s->pat);
}

void moe8_tokenizer_free(moe8_tokenizer *t) {
    if (!t) return;
    free(t->tok_off);
    free(t->tok_len);
    free(t->tok_flags);
    free(t->pool);
    free(t->key_off);
    free(t->key_len);
    free(t->key_pool);
    moe8_tok_strmap_free(&t->vocab);
    moe8_tok_pairmap_free(&t->merges);
    free_added_set(&t->added_raw);
    free_added_set(&t->added_norm);
    moe8_tok_pipeline_free(t);
    moe8_tok_chat_free(t->chat);
    free(t);
}
