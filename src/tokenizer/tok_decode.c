/*
 * tok_decode.c — ids -> text: token queries, the streaming detokenizer and
 * whole-sequence detokenization.
 *
 * A token's text is its raw bytes (ByteLevel, or the decoder's Replace and
 * ByteFallback steps, already applied at load; ByteLevel added tokens are their
 * content verbatim, as transformers does). Concatenated bytes need not be UTF-8 —
 * one character can straddle tokens ("🚀" = 11162 248 222), and a model can
 * emit any sequence. The detokenizer emits only complete characters: a valid
 * but incomplete tail (at most 3 bytes) waits for the next token, an invalid
 * sequence becomes U+FFFD (one per maximal subpart, as Rust's
 * String::from_utf8_lossy, which the reference decoder uses), and a tail left
 * at flush becomes one U+FFFD (tokenizers' ByteFallback decoder would turn every
 * byte of an invalid <0xNN> run into U+FFFD; transformers.js and moe8 replace
 * maximal subparts). The decoder's Strip (Llama/Mistral: one leading space)
 * acts on the first characters a stream emits, unless MOE8_DETOK_CONTINUE.
 * Not done: clean_up_tokenization_spaces (refused at load when true).
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer.h"

/* ---- queries ------------------------------------------------------------ */

int32_t moe8_tokenizer_n_vocab(const moe8_tokenizer *t) { return t->n_vocab; }
int moe8_tokenizer_add_bos(const moe8_tokenizer *t) { return t->add_bos; }
int32_t moe8_tokenizer_bos_id(const moe8_tokenizer *t) { return t->bos_id; }
int32_t moe8_tokenizer_eos_id(const moe8_tokenizer *t) { return t->eos_id; }

int32_t moe8_tokenizer_token_id(const moe8_tokenizer *t, const char *text) {
    const tok_added_set *sets[2] = {&t->added_raw, &t->added_norm};
    size_t len = strlen(text), have;
    for (int k = 0; k < 2; k++)
        for (int32_t i = 0; i < sets[k]->n; i++) {
            const char *s = tok_key(t, sets[k]->ids[i], &have);   /* an added token's content */
            if (have == len && memcmp(s, text, len) == 0) return sets[k]->ids[i];
        }
    return len ? moe8_tok_strmap_get(&t->vocab, t, text, len) : -1;
}

const char *moe8_tokenizer_token_bytes(const moe8_tokenizer *t, int32_t id, size_t *n_bytes,
                                       unsigned *flags) {
    size_t len = 0;
    const char *s = NULL;
    if (id >= 0 && id < t->n_vocab && t->tok_len[id] != TOK_UNASSIGNED) s = tok_bytes(t, id, &len);
    if (n_bytes) *n_bytes = len;
    if (flags) *flags = s ? t->tok_flags[id] : 0;
    return s;
}

/* ---- streaming detokenizer ------------------------------------------ */

struct moe8_detok {
    const moe8_tokenizer *tok;
    unsigned flags;       /* MOE8_DETOK_* */
    uint8_t tail[4];      /* valid but incomplete UTF-8 prefix held back */
    int n_tail;
    uint8_t *in;          /* [max_token_len + 4] tail + token bytes */
    char *out;            /* [3 * (max_token_len + 4)] every byte may become U+FFFD */
    int strip_left;       /* decoder Strip: leading characters still to drop */
};

moe8_status moe8_detok_create(const moe8_tokenizer *tok, unsigned flags, moe8_detok **out,
                           moe8_error *err) {
    moe8_detok *d;
    if (!tok || !out) return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "detok_new: NULL argument");
    *out = NULL;
    d = calloc(1, sizeof *d);
    if (d) d->in = malloc(tok->max_token_len + 4);
    if (d && d->in) d->out = malloc(3 * (tok->max_token_len + 4));
    if (!d || !d->in || !d->out) {
        moe8_detok_free(d);
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "detok_new: out of memory");
    }
    d->tok = tok;
    d->flags = flags;
    moe8_detok_reset(d);
    *out = d;
    return MOE8_OK;
}

void moe8_detok_free(moe8_detok *d) {
    if (!d) return;
    free(d->in);
    free(d->out);
    free(d);
}

void moe8_detok_reset(moe8_detok *d) {
    d->n_tail = 0;
    d->strip_left = d->flags & MOE8_DETOK_CONTINUE ? 0 : d->tok->strip_start;
}

/* The decoder's Strip on the start of the text: drop up to strip_left leading
 * strip_char (emit_utf8 hands over whole characters only). */
static void strip_start(moe8_detok *d, const char **text, size_t *len) {
    const moe8_tokenizer *t = d->tok;
    size_t k = (size_t)t->strip_char_len;
    while (d->strip_left > 0 && *len > 0) {
        if (*len < k || memcmp(*text, t->strip_char, k) != 0) {
            d->strip_left = 0;
            break;
        }
        *text += k;
        *len -= k;
        d->strip_left--;
    }
}

/* Emit the complete characters of in[0..n) into d->out; keep a valid
 * incomplete tail unless `final`, where it becomes U+FFFD. */
static size_t emit_utf8(moe8_detok *d, const uint8_t *in, size_t n, int final) {
    size_t i = 0, o = 0;
    d->n_tail = 0;
    while (i < n) {
        int k = moe8_utf8_char(in + i, n - i);
        if (k > 0) {
            memcpy(d->out + o, in + i, (size_t)k);
            o += (size_t)k, i += (size_t)k;
            continue;
        }
        if (k == 0 && !final) {
            d->n_tail = (int)(n - i);
            memcpy(d->tail, in + i, n - i);
            break;
        }
        memcpy(d->out + o, "\xef\xbf\xbd", 3);   /* U+FFFD */
        o += 3;
        i += k == 0 ? n - i : (size_t)-k;
    }
    return o;
}

moe8_status moe8_detok_feed(moe8_detok *d, int32_t id, const char **text, size_t *len,
                            moe8_error *err) {
    size_t n;
    unsigned fl;
    const char *s = moe8_tokenizer_token_bytes(d->tok, id, &n, &fl);
    *text = d->out;
    *len = 0;
    if (!s)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "detok_feed: token id %d is not in the "
                         "vocabulary of %d", id, d->tok->n_vocab);
    if ((fl & MOE8_TOKEN_SPECIAL) && (d->flags & MOE8_DETOK_SKIP_SPECIAL)) return MOE8_OK;
    memcpy(d->in, d->tail, (size_t)d->n_tail);
    memcpy(d->in + d->n_tail, s, n);
    *len = emit_utf8(d, d->in, (size_t)d->n_tail + n, 0);
    strip_start(d, text, len);
    return MOE8_OK;
}

void moe8_detok_flush(moe8_detok *d, const char **text, size_t *len) {
    uint8_t tail[4];
    size_t n = (size_t)d->n_tail;
    memcpy(tail, d->tail, n);
    *text = d->out;
    *len = emit_utf8(d, tail, n, 1);
    strip_start(d, text, len);
}

/* ---- whole sequence --------------------------------------------------- */

static void append(char *out, size_t cap, size_t *pos, const char *s, size_t n) {
    if (*pos < cap) memcpy(out + *pos, s, n < cap - *pos ? n : cap - *pos);
    *pos += n;
}

moe8_status moe8_detokenize(const moe8_tokenizer *tok, const int32_t *ids, size_t n_ids,
                            unsigned flags, char *out, size_t cap, size_t *n_out,
                            moe8_error *err) {
    moe8_detok *d;
    const char *s;
    size_t n, pos = 0;
    moe8_status st = moe8_detok_create(tok, flags, &d, err);
    if (st != MOE8_OK) return st;
    for (size_t i = 0; i < n_ids && st == MOE8_OK; i++) {
        st = moe8_detok_feed(d, ids[i], &s, &n, err);
        append(out, cap, &pos, s, n);
    }
    moe8_detok_flush(d, &s, &n);
    append(out, cap, &pos, s, n);
    moe8_detok_free(d);
    if (n_out) *n_out = pos;
    if (st != MOE8_OK) return st;
    if (pos >= cap)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1,
                         "detokenize: output holds %zu bytes, %zu needed (with the NUL)", cap,
                         pos + 1);
    out[pos] = '\0';
    return MOE8_OK;
}
