/*
 * tok_encode.c — text -> ids, in the order of the Hugging Face pipeline:
 *   1. the whole text must be UTF-8 (else an error naming the byte offset);
 *   2. added tokens are cut out first, leftmost-longest, on the raw text;
 *   3. each stretch between them is NFC-normalized (utf8proc; ASCII skips it),
 *   4. split by the pre-tokenizer regex (PCRE2, UTF + UCP, JIT when available;
 *      matches and the gaps between them each become a piece, "Isolated"),
 *   5. each piece is BPE-merged on its raw bytes (ByteLevel makes every byte
 *      one initial symbol): a min-heap of (rank, position) candidates over a
 *      linked list of symbols, stale entries skipped — the exact algorithm of
 *      tokenizers' Word::merge_all, O(n log n) even for a pathological piece.
 * The tokenizer is read-only here, so concurrent calls on one handle are safe.
 * Each call allocates its scratch (symbols and heap sized to the longest
 * piece, PCRE2 match data, the NFC copy) and frees it before returning.
 */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

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
    int32_t *ids;            /* caller's output, [cap] */
    size_t cap, n;           /* n counts every id, also past cap */
    bpe_sym *syms;           /* [sym_cap] */
    bpe_cand *heap;          /* [3 * sym_cap] */
    size_t sym_cap, n_heap;
    pcre2_match_data *md;
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
    const tok_pair *p = r >= 0 ? tok_pairmap_get(&e->t->merges, e->syms[pos].id, e->syms[r].id) : NULL;
    if (p) heap_push(e, pos, p);
}

static moe8_status bpe_piece(encoder *e, const uint8_t *s, size_t len) {
    const moe8_tokenizer *t = e->t;
    bpe_sym *sy;
    if (len == 1 || (t->ignore_merges && tok_strmap_get(&t->vocab, t, (const char *)s, len) >= 0)) {
        emit(e, len == 1 ? t->byte_id[s[0]] : tok_strmap_get(&t->vocab, t, (const char *)s, len));
        return MOE8_OK;
    }
    if (grow_scratch(e, len) != 0)
        return moe8_fail(e->err, MOE8_ERR_NOMEM, -1, "tokenize: no memory for a %zu-byte piece", len);
    sy = e->syms;
    for (size_t i = 0; i < len; i++)
        sy[i] = (bpe_sym){t->byte_id[s[i]], (int32_t)i - 1, i + 1 < len ? (int32_t)i + 1 : -1, 1};
    e->n_heap = 0;
    for (size_t i = 0; i + 1 < len; i++) consider(e, (int32_t)i);
    while (e->n_heap) {
        bpe_cand c = heap_pop(e);
        bpe_sym *l = &sy[c.pos];
        if (!l->alive || l->next < 0) continue;
        const tok_pair *p = tok_pairmap_get(&t->merges, l->id, sy[l->next].id);
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

static int regex_next(encoder *e, const uint8_t *s, size_t n, size_t pos) {
    const uint32_t opt = PCRE2_NO_UTF_CHECK | PCRE2_NOTEMPTY;
    int rc = pcre2_match(e->t->re, s, n, pos, opt, e->md, NULL);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)   /* the interpreter keeps its frames on the heap */
        rc = pcre2_match(e->t->re, s, n, pos, opt | PCRE2_NO_JIT, e->md, NULL);
    return rc;
}

/* Pieces of s[0..n): each regex match and each gap between matches. */
static moe8_status split_and_merge(encoder *e, const uint8_t *s, size_t n, size_t seg_off) {
    size_t pos = 0, last = 0;
    moe8_status st = MOE8_OK;
    while (pos < n && st == MOE8_OK) {
        int rc = regex_next(e, s, n, pos);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[120];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return moe8_fail(e->err, MOE8_ERR_UNSUPPORTED, (int64_t)seg_off,
                             "tokenize: pre-tokenizer regex failed in the text at byte %zu: %s",
                             seg_off, (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md);
        if (ov[0] > last) st = bpe_piece(e, s + last, ov[0] - last);
        if (st == MOE8_OK) st = bpe_piece(e, s + ov[0], ov[1] - ov[0]);
        last = pos = ov[1];
    }
    if (st == MOE8_OK && last < n) st = bpe_piece(e, s + last, n - last);
    return st;
}

/* One stretch of text between added tokens: NFC, then split and merge. */
static moe8_status encode_segment(encoder *e, const char *s, size_t n, size_t seg_off) {
    utf8proc_uint8_t *norm = NULL;
    utf8proc_ssize_t m;
    moe8_status st;
    size_t i = 0;
    if (n == 0) return MOE8_OK;
    while (i < n && (uint8_t)s[i] < 0x80) i++;
    if (!e->t->nfc || i == n) return split_and_merge(e, (const uint8_t *)s, n, seg_off);
    m = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &norm,
                     UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    if (m < 0)
        return moe8_fail(e->err, m == UTF8PROC_ERROR_NOMEM ? MOE8_ERR_NOMEM : MOE8_ERR_FORMAT,
                         (int64_t)seg_off, "tokenize: nfc normalization failed at byte %zu: %s",
                         seg_off, utf8proc_errmsg(m));
    st = split_and_merge(e, norm, (size_t)m, seg_off);
    free(norm);
    return st;
}

/* ---- added tokens and the entry point ------------------------------ */

/* Longest added token at s[0..n), or -1 (its length in *len). */
static int32_t match_added(const moe8_tokenizer *t, const char *s, size_t n, size_t *len) {
    uint8_t b = (uint8_t)s[0];
    for (int32_t i = t->added_first[b]; i < t->added_first[b + 1]; i++) {
        const char *a = tok_bytes(t, t->added[i], len);
        if (*len <= n && memcmp(a, s, *len) == 0) return t->added[i];
    }
    return -1;
}

static moe8_status encode_all(encoder *e, const char *text, size_t len) {
    size_t seg = 0, i = 0, mlen;
    moe8_status st = MOE8_OK;
    while (i < len && st == MOE8_OK) {
        int32_t id = match_added(e->t, text + i, len - i, &mlen);
        if (id < 0) {
            i++;
            continue;
        }
        st = encode_segment(e, text + seg, i - seg, seg);
        emit(e, id);
        i += mlen;
        seg = i;
    }
    if (st == MOE8_OK) st = encode_segment(e, text + seg, len - seg, seg);
    return st;
}

moe8_status moe8_tokenize(const moe8_tokenizer *t, const char *text, size_t len, int32_t *ids,
                          size_t cap, size_t *n_ids, moe8_error *err) {
    encoder e = {.t = t, .err = err, .ids = ids, .cap = cap};
    size_t bad;
    moe8_status st;
    if (n_ids) *n_ids = 0;
    if (!t || (!text && len) || (!ids && cap) || !n_ids)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "tokenize: NULL argument");
    if (len > TOK_MAX_TEXT)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "tokenize: text of %zu bytes is too long",
                         len);
    if ((bad = tok_utf8_valid(text, len)) != (size_t)-1)
        return moe8_fail(err, MOE8_ERR_FORMAT, (int64_t)bad,
                         "tokenize: invalid utf-8 at byte %zu (0x%02x)", bad, (uint8_t)text[bad]);
    e.md = pcre2_match_data_create_from_pattern(t->re, NULL);
    if (!e.md) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "tokenize: out of memory");
    st = encode_all(&e, text, len);
    pcre2_match_data_free(e.md);
    free(e.syms);
    free(e.heap);
    if (st != MOE8_OK) return st;
    *n_ids = e.n;
    if (e.n > cap)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1,
                         "tokenize: output holds %zu ids, %zu needed", cap, e.n);
    return MOE8_OK;
}
