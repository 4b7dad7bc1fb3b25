/*
 * grammar_class.c — a GBNF character class (a set of code points) compiled
 * to a DFA over its UTF-8 bytes, and the parser's table of distinct DFAs.
 *
 * Ranges are sorted, merged, negated in [0, U+10FFFF] and stripped of the
 * surrogates; state 0 reads the lead byte, each further state the rest of a
 * character (continuation bytes still to read and the code points still
 * possible), so a class never matches invalid UTF-8, an overlong form or a
 * surrogate. Entries: the next state, G_DONE (the character is complete) or
 * G_REJECT. A token may stop inside a character: the walk keeps the state.
 * Each class also records the fewest bytes that complete a character from
 * each of its states (moe8_grammar_min_remaining). Identical DFAs share one class
 * id; a literal's bytes are single-byte classes (moe8_gp_byte_class).
 *
 * Refused: an empty class, more than GRAMMAR_MAX_CLASS_STATES states for one
 * class or GRAMMAR_MAX_DFA_STATES for all.
 */
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_impl.h"

static int cmp_range(const void *a, const void *b) {
    const cprange *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Sort and merge; negate; drop surrogates. Returns the new count. */
static uint32_t normalize_ranges(cprange *r, uint32_t n, int negate, cprange *out) {
    uint32_t m = 0, k = 0;
    cprange tmp[2];
    qsort(r, n, sizeof *r, cmp_range);
    for (uint32_t i = 0; i < n; i++) {
        if (m && r[i].lo <= r[m - 1].hi + 1) {
            if (r[i].hi > r[m - 1].hi) r[m - 1].hi = r[i].hi;
        } else {
            r[m++] = r[i];
        }
    }
    if (negate) { /* complement in [0, 0x10FFFF] */
        uint32_t next = 0;
        for (uint32_t i = 0; i < m; i++) {
            if (r[i].lo > next) out[k].lo = next, out[k++].hi = r[i].lo - 1;
            next = r[i].hi + 1;
        }
        if (next <= 0x10FFFF) out[k].lo = next, out[k++].hi = 0x10FFFF;
    } else {
        memcpy(out, r, m * sizeof *r), k = m;
    }
    /* remove [D800, DFFF]: a range may split in two */
    m = 0;
    for (uint32_t i = 0; i < k; i++) {
        cprange x = out[i];
        int nt = 0;
        if (x.hi < 0xD800 || x.lo > 0xDFFF) tmp[nt++] = x;
        else {
            if (x.lo < 0xD800) tmp[nt].lo = x.lo, tmp[nt++].hi = 0xD7FF;
            if (x.hi > 0xDFFF) tmp[nt].lo = 0xE000, tmp[nt++].hi = x.hi;
        }
        for (int j = 0; j < nt; j++) r[m++] = tmp[j];
    }
    memcpy(out, r, m * sizeof *r);
    return m;
}

/* A DFA state under construction: k continuation bytes still to read; the
 * code points (relative to this prefix) still possible. */
typedef struct {
    uint32_t k;
    cprange *r;
    uint32_t n;
} dstate;

typedef struct {
    dstate *s;
    uint32_t n, cap;
    uint16_t *tab;
    int oom, too_many;
} dbuild;

/* Ranges of [lo, hi] ∩ set, shifted down by lo, into out; their count. */
static uint32_t clip(const cprange *r, uint32_t n, uint32_t lo, uint32_t hi, cprange *out) {
    uint32_t m = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t a = r[i].lo > lo ? r[i].lo : lo, b = r[i].hi < hi ? r[i].hi : hi;
        if (a <= b) out[m].lo = a - lo, out[m++].hi = b - lo;
    }
    return m;
}

static uint32_t dstate_get(dbuild *B, uint32_t k, const cprange *r, uint32_t n) {
    for (uint32_t i = 1; i < B->n; i++)
        if (B->s[i].k == k && B->s[i].n == n && !memcmp(B->s[i].r, r, n * sizeof *r)) return i;
    if (B->n >= GRAMMAR_MAX_CLASS_STATES) {
        B->too_many = 1;
        return 0;
    }
    if (B->n == B->cap) {
        uint32_t nc = B->cap * 2;
        dstate *q = realloc(B->s, nc * sizeof *q);
        uint16_t *t = realloc(B->tab, (size_t)nc * 256 * sizeof *t);
        if (q) B->s = q;
        if (t) B->tab = t;
        if (!q || !t) {
            B->oom = 1;
            return 0;
        }
        B->cap = nc;
    }
    dstate *d = &B->s[B->n];
    d->k = k, d->n = n;
    if (!(d->r = malloc((n ? n : 1) * sizeof *r))) {
        B->oom = 1;
        return 0;
    }
    memcpy(d->r, r, n * sizeof *r);
    return B->n++;
}

/* Build the DFA of a normalized code point set: state 0 reads the lead byte. */
static int build_dfa(const cprange *set, uint32_t n, dbuild *B) {
    cprange *tmp = malloc((n + 1) * sizeof *tmp);
    memset(B, 0, sizeof *B);
    B->cap = 16;
    B->s = calloc(B->cap, sizeof *B->s);
    B->tab = malloc((size_t)B->cap * 256 * sizeof *B->tab);
    if (!tmp || !B->s || !B->tab) {
        free(tmp);
        B->oom = 1;
        return -1;
    }
    B->n = 1; /* state 0: lead byte */
    for (uint32_t s = 0; s < B->n && !B->oom && !B->too_many; s++) {
        uint16_t *row = B->tab + (size_t)s * 256;
        for (int b = 0; b < 256; b++) {
            uint32_t lo, hi, k, m;
            row[b] = G_REJECT;
            if (s == 0) {
                if (b < 0x80) {
                    for (uint32_t i = 0; i < n; i++)
                        if ((uint32_t)b >= set[i].lo && (uint32_t)b <= set[i].hi) row[b] = G_DONE;
                    continue;
                }
                if (b >= 0xC2 && b <= 0xDF) k = 1, lo = (uint32_t)(b & 0x1F) << 6, hi = lo + 63;
                else if (b >= 0xE0 && b <= 0xEF) k = 2, lo = (uint32_t)(b & 0x0F) << 12, hi = lo + 4095;
                else if (b >= 0xF0 && b <= 0xF4) k = 3, lo = (uint32_t)(b & 0x07) << 18, hi = lo + 262143;
                else continue;
                uint32_t vlo = k == 1 ? 0x80 : k == 2 ? 0x800 : 0x10000; /* no overlong forms */
                uint32_t base = lo;
                if (lo < vlo) lo = vlo;
                if (hi > 0x10FFFF) hi = 0x10FFFF;
                if (lo > hi) continue;
                m = clip(set, n, lo, hi, tmp);
                for (uint32_t i = 0; i < m; i++) tmp[i].lo += lo - base, tmp[i].hi += lo - base;
            } else {
                dstate *d = &B->s[s];
                uint32_t span;
                if (b < 0x80 || b > 0xBF) continue;
                k = d->k - 1;
                span = 1u << (6 * k);
                lo = (uint32_t)(b & 0x3F) * span, hi = lo + span - 1;
                m = clip(d->r, d->n, lo, hi, tmp);
            }
            if (!m) continue;
            if (k == 0) row[b] = G_DONE;
            else {
                uint32_t t = dstate_get(B, k, tmp, m);
                if (!t) break;
                row = B->tab + (size_t)s * 256; /* tab may have moved */
                row[b] = (uint16_t)t;
            }
        }
    }
    free(tmp);
    return B->oom || B->too_many ? -1 : 0;
}

static void dbuild_free(dbuild *B) {
    for (uint32_t i = 1; i < B->n; i++) free(B->s[i].r);
    free(B->s);
    free(B->tab);
}

/* Intern a DFA (tab[n_states][256]): its class id, or G_NONE on failure. */
static uint32_t intern_class(parser *P, uint16_t *tab, uint32_t n_states, size_t src) {
    size_t bytes = (size_t)n_states * 256 * sizeof *tab;
    uint64_t h = moe8_hash64(tab, bytes, 0);
    pclass *c;
    for (uint32_t i = 0; i < P->n_cls; i++)
        if (P->cls[i].hash == h && P->cls[i].n_states == n_states && !memcmp(P->cls[i].tab, tab, bytes))
            return i;
    if (P->dfa_states + n_states > GRAMMAR_MAX_DFA_STATES) {
        moe8_gp_err(P, src, "grammar too large: character classes need more than %u UTF-8 DFA states",
                    GRAMMAR_MAX_DFA_STATES);
        return G_NONE;
    }
    if (P->n_cls == P->cap_cls) {
        uint32_t nc = P->cap_cls ? P->cap_cls * 2 : 64;
        pclass *q = realloc(P->cls, nc * sizeof *q);
        if (!q) return moe8_gp_oom(P), G_NONE;
        P->cls = q, P->cap_cls = nc;
    }
    c = &P->cls[P->n_cls];
    c->tab = malloc(bytes);
    c->min = malloc(n_states * sizeof *c->min);
    if (!c->tab || !c->min) {
        free(c->tab), free(c->min);
        return moe8_gp_oom(P), G_NONE;
    }
    memcpy(c->tab, tab, bytes);
    c->n_states = n_states, c->hash = h;
    /* fewest bytes to complete the character from each state (Bellman-Ford) */
    for (uint32_t s = 0; s < n_states; s++) c->min[s] = G_NONE;
    for (int changed = 1; changed;) {
        changed = 0;
        for (uint32_t s = 0; s < n_states; s++)
            for (int b = 0; b < 256; b++) {
                uint16_t t = tab[(size_t)s * 256 + b];
                uint32_t v = t == G_DONE ? 1 : t == G_REJECT || c->min[t] == G_NONE ? G_NONE : c->min[t] + 1;
                if (v < c->min[s]) c->min[s] = v, changed = 1;
            }
    }
    P->dfa_states += n_states;
    return P->n_cls++;
}

uint32_t moe8_gp_byte_class(parser *P, unsigned b, size_t src) {
    if (P->byte_cls[b] == G_NONE) {
        uint16_t tab[256];
        for (int i = 0; i < 256; i++) tab[i] = G_REJECT;
        tab[b] = G_DONE;
        P->byte_cls[b] = intern_class(P, tab, 1, src);
    }
    return P->byte_cls[b];
}

uint32_t moe8_gp_range_class(parser *P, cprange *r, uint32_t n, int negate, size_t src) {
    cprange *norm = malloc((2 * n + 4) * sizeof *norm);
    cprange *work = malloc((2 * n + 4) * sizeof *work);
    dbuild B;
    uint32_t m, id = G_NONE;
    if (!norm || !work) {
        free(norm), free(work);
        return moe8_gp_oom(P), G_NONE;
    }
    memcpy(work, r, n * sizeof *r);
    m = normalize_ranges(work, n, negate, norm);
    if (m == 0) {
        free(norm), free(work);
        moe8_gp_err(P, src, "character class matches no character");
        return G_NONE;
    }
    if (build_dfa(norm, m, &B) == 0) id = intern_class(P, B.tab, B.n, src);
    else if (B.too_many)
        moe8_gp_err(P, src, "character class too complex: more than %u UTF-8 DFA states",
                    GRAMMAR_MAX_CLASS_STATES);
    else moe8_gp_oom(P);
    dbuild_free(&B);
    free(norm), free(work);
    return id;
}
