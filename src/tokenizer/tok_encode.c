/*
 * tok_encode.c — text -> ids, in the order of the Hugging Face pipeline:
 *   1. the whole text must be UTF-8 (else an error naming the byte offset);
 *   2. added tokens with normalized false are cut out first, leftmost-longest,
 *      on the raw text (with MOE8_TOKENIZE_NO_SPECIAL a special one found
 *      there stays text, and matching goes on after it, as tokenizers'
 *      encode_special_tokens does);
 *   3. each stretch between them is normalized (tok_norm.c: NFC, Prepend,
 *      Replace; an empty stretch stays empty, so Prepend never acts on it),
 *   4. added tokens with normalized true are cut out of the normalized stretch,
 *   5. what is left is split by each Split regex in turn (PCRE2, UTF + UCP,
 *      JIT when available; matches and the gaps between them each become a
 *      piece, "Isolated"; each regex sees one piece of the one before),
 *   6. each piece is BPE-merged. Its first symbols are its bytes (ByteLevel)
 *      or its characters: a character's own token, else its bytes' <0xNN>
 *      tokens (byte_fallback), else unk (a run fused with fuse_unk), else
 *      nothing. Then a min-heap of (rank, position) candidates over a linked
 *      list of symbols, stale entries skipped — the exact algorithm of
 *      tokenizers' Word::merge_all, O(n log n) even for a pathological piece.
 * The tokenizer is read-only here, so concurrent calls on one handle are safe.
 * Each call allocates its scratch (symbols and heap sized to the longest
 * piece, PCRE2 match data, normalized copies) and frees it before returning.
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer.h"

typedef struct {
    int32_t id;     /* current token of this symbol */
    int32_t prev;   /* index of the previous live symbol, -1 at the start */
    int32_t next;   /* index of the next live symbol, -1 at the end */
    int32_t alive;  /* 0 once merged into its left neighbour */
} bpe_sym;

typedef struct {
    int32_t pos;    /* index of the left symbol of the pair */
    int32_t rank;
    int32_t new_id;
} bpe_cand;

typedef struct {
    const moe8_tokenizer *t;
    moe8_error *err;
    unsigned flags;          /* MOE8_TOKENIZE_* */
    int32_t *ids;            /* caller's output, [cap] */
    size_t cap, n;           /* n counts every id, also past cap */
    bpe_sym *syms;           /* [sym_cap] */
    bpe_cand *heap;          /* [3 * sym_cap] */
    size_t sym_cap, n_heap;
    pcre2_match_data *md[TOK_MAX_STEPS]; /* one per Split regex */
} encoder;

static inline void emit(encoder *e, int32_t id) {
    if (e->n < e->cap) e->ids[e->n] = id;
    e->n++;
}

/* ---- BPE ---------------------------------------------------------------- */

static inline int cand_less(const bpe_cand *a, const bpe_cand *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void heap_push(encoder *e, int32_t pos, const tok_pair *p) {
    bpe_cand c = {pos, p->rank, p->new_id};
    size_t i = e->n_heap++;
    while (i > 0 && cand_less(&c, &e->heap[(i - 1) / 2])) {
        e->heap[i] = e->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    e->heap[i] = c;
}

static bpe_cand heap_pop(encoder *e) {
    bpe_cand top = e->heap[0], last = e->heap[--e->n_heap];
    size_t i = 0, n = e->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && cand_less(&e->heap[c + 1], &e->heap[c])) c++;
        if (!cand_less(&e->heap[c], &last)) break;
        e->heap[i] = e->heap[c];
        i = c;
    }
    if (n) e->heap[i] = last;
    return top;
}

static int grow_scratch(encoder *e, size_t len) {
    size_t cap = e->sym_cap ? e->sym_cap : 64;
    if (len <= e->sym_cap) return 0;
    while (cap < len) cap *= 2;
    free(e->syms);
    free(e->heap);
    e->syms = malloc(cap * sizeof *e->syms);
    e->heap = malloc(3 * cap * sizeof *e->heap);
    e->sym_cap = e->syms && e->heap ? cap : 0;
    return e->sym_cap ? 0 : -1;
}

/* Try the pair starting at symbol `pos` (with its right neighbour). */
static void consider(encoder *e, int32_t pos) {
    int32_t r = e->syms[pos].next;
    const tok_pair *p = r >= 0 ? moe8_tok_pairmap_get(&e->t->merges, e->syms[pos].id, e->syms[r].id) : NULL;
    if (p) heap_push(e, pos, p);
}

/* The first symbols of piece s[0..len) into e->syms, linked; returns their
 * count (at most len: never more than one symbol per byte). */
static int32_t init_symbols(encoder *e, const uint8_t *s, size_t len) {
    const moe8_tokenizer *t = e->t;
    bpe_sym *sy = e->syms;
    int32_t n = 0, unk = 0;   /* unk: an unk symbol is pending */
    for (size_t i = 0; i < len;) {
        int k = t->byte_level ? 1 : moe8_utf8_char(s + i, len - i);
        int32_t id = t->byte_level ? t->byte_id[s[i]]
                   : moe8_tok_strmap_get(&t->vocab, t, (const char *)s + i, (size_t)(k > 0 ? k : 1));
        if (k <= 0) k = 1;   /* cannot happen: normalized text is UTF-8 */
        if (id >= 0 || t->byte_fallback) {
            if (unk) sy[n++].id = t->unk_id, unk = 0;
            if (id >= 0) sy[n++].id = id;
            else for (int j = 0; j < k; j++) sy[n++].id = t->byte_id[s[i + j]];
        } else if (t->unk_id >= 0) {   /* else the character is dropped, as tokenizers does */
            if (unk && !t->fuse_unk) sy[n++].id = t->unk_id;
            unk = 1;
        }
        i += (size_t)k;
    }
    if (unk) sy[n++].id = t->unk_id;
    for (int32_t i = 0; i < n; i++) {
        sy[i].prev = i - 1;
        sy[i].next = i + 1 < n ? i + 1 : -1;
        sy[i].alive = 1;
    }
    return n;
}

static moe8_status bpe_piece(encoder *e, const uint8_t *s, size_t len) {
    const moe8_tokenizer *t = e->t;
    bpe_sym *sy;
    int32_t id, n;
    if (len == 0) return MOE8_OK;
    if (t->ignore_merges && (id = moe8_tok_strmap_get(&t->vocab, t, (const char *)s, len)) >= 0) {
        emit(e, id);
        return MOE8_OK;
    }
    if (len == 1 && t->byte_level) {
        emit(e, t->byte_id[s[0]]);
        return MOE8_OK;
    }
    if (grow_scratch(e, len) != 0)
        return moe8_fail(e->err, MOE8_ERR_NOMEM, -1, "tokenize: no memory for a %zu-byte piece", len);
    sy = e->syms;
    if ((n = init_symbols(e, s, len)) == 0) return MOE8_OK;
    e->n_heap = 0;
    for (int32_t i = 0; i + 1 < n; i++) consider(e, i);
    while (e->n_heap) {
        bpe_cand c = heap_pop(e);
        bpe_sym *l = &sy[c.pos];
        if (!l->alive || l->next < 0) continue;
        const tok_pair *p = moe8_tok_pairmap_get(&t->merges, l->id, sy[l->next].id);
        if (!p || p->new_id != c.new_id) continue;   /* stale candidate */
        sy[l->next].alive = 0;
        l->id = c.new_id;
        l->next = sy[l->next].next;
        if (l->next >= 0) sy[l->next].prev = c.pos;
        if (l->prev >= 0) consider(e, l->prev);
        consider(e, c.pos);
    }
    for (int32_t i = 0; i >= 0; i = sy[i].next) emit(e, sy[i].id);
    return MOE8_OK;
}

/* ---- pre-tokenization ------------------------------------------------ */

static int regex_next(encoder *e, int k, const uint8_t *s, size_t n, size_t pos) {
    const uint32_t opt = PCRE2_NO_UTF_CHECK | PCRE2_NOTEMPTY;
    int rc = pcre2_match(e->t->split[k], s, n, pos, opt, e->md[k], NULL);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)   /* the interpreter keeps its frames on the heap */
        rc = pcre2_match(e->t->split[k], s, n, pos, opt | PCRE2_NO_JIT, e->md[k], NULL);
    return rc;
}

/* Pieces of s[0..n) under Split regex k (each match and each gap between
 * matches), each cut further by regex k + 1; past the last regex, BPE. off:
 * the stretch's byte offset in the text, for errors. */
static moe8_status split_level(encoder *e, const uint8_t *s, size_t n, int k, size_t off) {
    size_t pos = 0, last = 0;
    moe8_status st = MOE8_OK;
    if (k == e->t->n_split) return bpe_piece(e, s, n);
    while (pos < n && st == MOE8_OK) {
        int rc = regex_next(e, k, s, n, pos);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[120];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return moe8_fail(e->err, MOE8_ERR_UNSUPPORTED, (int64_t)off,
                             "tokenize: pre-tokenizer regex failed in the text near byte %zu: %s",
                             off, (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md[k]);
        size_t m0 = ov[0], m1 = ov[1];   /* the next level reuses its own match data only */
        if (m0 > last) st = split_level(e, s + last, m0 - last, k + 1, off);
        if (st == MOE8_OK) st = split_level(e, s + m0, m1 - m0, k + 1, off);
        last = pos = m1;
    }
    if (st == MOE8_OK && last < n) st = split_level(e, s + last, n - last, k + 1, off);
    return st;
}

/* ---- added tokens and the entry point ------------------------------ */

/* Longest pattern of `set` at s[0..n), or -1 (its length in *len). */
static int32_t match_added(const tok_added_set *set, const char *s, size_t n, size_t *len) {
    uint8_t b = (uint8_t)s[0];
    for (int32_t i = set->first[b]; i < set->first[b + 1]; i++) {
        *len = set->len[i];
        if (*len <= n && memcmp(set->pat + set->off[i], s, *len) == 0) return set->ids[i];
    }
    return -1;
}

typedef moe8_status (*stretch_fn)(encoder *e, const char *s, size_t n, size_t off);

/* Cut the tokens of `set` out of s[0..n), leftmost-longest; the stretches
 * between them (maybe empty) go to `gap`, in order with the cut ids. */
static moe8_status cut_added(encoder *e, const tok_added_set *set, const char *s, size_t n,
                             size_t off, stretch_fn gap) {
    size_t seg = 0, i = 0, mlen;
    moe8_status st = MOE8_OK;
    while (set->n && i < n && st == MOE8_OK) {
        int32_t id = match_added(set, s + i, n - i, &mlen);
        if (id < 0) {
            i++;
            continue;
        }
        if ((e->flags & MOE8_TOKENIZE_NO_SPECIAL) && (e->t->tok_flags[id] & MOE8_TOKEN_SPECIAL)) {
            i += mlen;   /* plain text; the next match starts after it */
            continue;
        }
        st = gap(e, s + seg, i - seg, off + seg);
        emit(e, id);
        i += mlen;
        seg = i;
    }
    if (st == MOE8_OK) st = gap(e, s + seg, n - seg, off + seg);
    return st;
}

static moe8_status pre_tokenize(encoder *e, const char *s, size_t n, size_t off) {
    return split_level(e, (const uint8_t *)s, n, 0, off);
}

/* One raw stretch between added tokens: normalize, cut the normalized added
 * tokens, pre-tokenize and merge the rest. */
static moe8_status encode_stretch(encoder *e, const char *s, size_t n, size_t off) {
    const char *ns;
    size_t nn;
    char *own;
    moe8_status st;
    if (n == 0) return MOE8_OK;
    if ((st = moe8_tok_normalize(e->t, s, n, off, &ns, &nn, &own, e->err)) != MOE8_OK) return st;
    st = cut_added(e, &e->t->added_norm, ns, nn, off, pre_tokenize);
    free(own);
    return st;
}

moe8_status moe8_tokenize_ex(const moe8_tokenizer *t, const char *text, size_t len,
                             unsigned flags, int32_t *ids, size_t cap, size_t *n_ids,
                             moe8_error *err) {
    encoder e = {.t = t, .err = err, .flags = flags, .ids = ids, .cap = cap};
    size_t bad;
    moe8_status st = MOE8_OK;
    if (n_ids) *n_ids = 0;
    if (!t || (!text && len) || (!ids && cap) || !n_ids)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "tokenize: NULL argument");
    if (len > TOK_MAX_TEXT)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "tokenize: text of %zu bytes is too long",
                         len);
    if ((bad = moe8_utf8_valid(text, len)) != (size_t)-1)
        return moe8_fail(err, MOE8_ERR_FORMAT, (int64_t)bad,
                         "tokenize: invalid utf-8 at byte %zu (0x%02x)", bad, (uint8_t)text[bad]);
    for (int k = 0; k < t->n_split && st == MOE8_OK; k++)
        if (!(e.md[k] = pcre2_match_data_create_from_pattern(t->split[k], NULL)))
            st = moe8_fail(err, MOE8_ERR_NOMEM, -1, "tokenize: out of memory");
    if (st == MOE8_OK) st = cut_added(&e, &t->added_raw, text, len, 0, encode_stretch);
    for (int k = 0; k < t->n_split; k++) pcre2_match_data_free(e.md[k]);
    free(e.syms);
    free(e.heap);
    if (st != MOE8_OK) return st;
    *n_ids = e.n;
    if (e.n > cap)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1,
                         "tokenize: output holds %zu ids, %zu needed", cap, e.n);
    return MOE8_OK;
}

moe8_status moe8_tokenize(const moe8_tokenizer *t, const char *text, size_t len, int32_t *ids,
                          size_t cap, size_t *n_ids, moe8_error *err) {
    return moe8_tokenize_ex(t, text, len, 0, ids, cap, n_ids, err);
}
