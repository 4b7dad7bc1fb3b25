/*
 * grammar_state.c — one request's position in a grammar (grammar_state):
 * its stacks, copied out of the walk engine after each accepted token so the
 * engine's tables can be reset, and copied back in for the next step or
 * mask. Each state has its own engine (scratch, made on first use), so
 * requests never share mutable state: batch invariance holds.
 *
 * Layout: nodes numbered from N_FIRST, parents before children, each
 * (code, parent); tops index them (or are N_FINAL, the grammar has ended).
 * An export reuses its spare arrays, so a step allocates nothing once they
 * have grown.
 *
 * Not here: the token mask (grammar_mask.c), the walk itself
 * (grammar_walk.c).
 */
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_impl.h"

struct grammar_state {
    const grammar *g;
    uint32_t *code, *par, n_nodes, cap_nodes;
    uint32_t *tops, n_tops, cap_tops;
    gwk *w;             /* scratch, made on first use */
    uint32_t *imp, imp_cap; /* import: state node -> engine node */
    uint32_t *map, map_cap; /* export: engine node -> state node (zero between exports) */
    uint32_t *xcode, *xpar, *xtops, xcap_nodes, xcap_tops; /* the next stacks, swapped in */
    uint32_t *xids, xids_cap; /* export: engine ids in state order */
};

static int grow_buf(uint32_t **p, uint32_t *cap, uint32_t need, int zero) {
    uint32_t nc = *cap ? *cap : 16, *q;
    if (need <= *cap) return 0;
    while (nc < need) nc *= 2;
    if (!(q = realloc(*p, (size_t)nc * sizeof *q))) return -1;
    if (zero) memset(q + *cap, 0, (size_t)(nc - *cap) * sizeof *q);
    *p = q, *cap = nc;
    return 0;
}

static int st_reserve(grammar_state *st, uint32_t nodes, uint32_t tops) {
    if (nodes > st->cap_nodes) {
        uint32_t nc = nodes < 16 ? 16 : nodes;
        uint32_t *a = realloc(st->code, nc * sizeof *a), *b;
        if (!a) return -1;
        st->code = a;
        if (!(b = realloc(st->par, nc * sizeof *b))) return -1;
        st->par = b, st->cap_nodes = nc;
    }
    if (tops > st->cap_tops) {
        uint32_t nc = tops < 16 ? 16 : tops;
        uint32_t *a = realloc(st->tops, nc * sizeof *a);
        if (!a) return -1;
        st->tops = a, st->cap_tops = nc;
    }
    return 0;
}

uint32_t moe8_gwk_import_state(gwk *w, const grammar_state *st) {
    uint32_t *ids = st->imp; /* st->imp holds at least n_nodes + n_tops entries */
    for (uint32_t i = 0; i < st->n_nodes; i++) {
        uint32_t p = st->par[i];
        ids[i] = moe8_gwk_node(w, st->code[i], p < N_FIRST ? p : ids[p - N_FIRST]);
    }
    for (uint32_t i = 0; i < st->n_tops; i++) {
        uint32_t t = st->tops[i];
        ids[st->n_nodes + i] = t < N_FIRST ? t : ids[t - N_FIRST];
    }
    return moe8_gwk_set(w, ids + st->n_nodes, st->n_tops, 0);
}

static int st_scratch(grammar_state *st) {
    if (!st->w && !(st->w = moe8_gwk_new(st->g, 0))) return -1;
    if (grow_buf(&st->imp, &st->imp_cap, st->n_nodes + st->n_tops + 1, 0)) return -1;
    return 0;
}

/* Replace the state's stacks with set `s` of w: the nodes under its tops,
 * parents first, into the spare arrays, which are then swapped in (no
 * allocation once the buffers have grown). */
static int st_export(grammar_state *st, gwk *w, uint32_t s) {
    uint32_t n, nn = 0, cap_nodes, *t;
    const uint32_t *tops = moe8_gwk_set_tops(w, s, &n);
    int rc = 0;
    if (grow_buf(&st->map, &st->map_cap, w->nn, 1) || grow_buf(&st->xtops, &st->xcap_tops, n + 1, 0))
        return -1;
    for (uint32_t i = 0; i < n && !rc; i++) {
        uint32_t x = tops[i], first = nn;
        /* the unmapped nodes under this top, top first, then reversed */
        while (x >= N_FIRST && !st->map[x]) {
            if (nn + 1 > st->xcap_nodes) { /* xcode and xpar share a capacity */
                uint32_t c1 = st->xcap_nodes, c2 = st->xcap_nodes;
                if (grow_buf(&st->xcode, &c1, nn + 1, 0) || grow_buf(&st->xpar, &c2, c1, 0)) {
                    rc = -1;
                    break;
                }
                st->xcap_nodes = c1;
            }
            if (grow_buf(&st->xids, &st->xids_cap, nn + 1, 0)) {
                rc = -1;
                break;
            }
            st->xids[nn++] = x;
            st->map[x] = 1; /* reserved until numbered below */
            x = w->npar[x];
        }
        for (uint32_t a = first, b = nn; b > a + 1; a++, b--) { /* parents first */
            uint32_t tmp = st->xids[a];
            st->xids[a] = st->xids[b - 1], st->xids[b - 1] = tmp;
        }
        for (uint32_t k = first; k < nn; k++) {
            uint32_t y = st->xids[k], p = w->npar[y];
            st->xcode[k] = w->ncode[y];
            st->xpar[k] = p < N_FIRST ? p : st->map[p];
            st->map[y] = N_FIRST + k;
        }
        st->xtops[i] = tops[i] < N_FIRST ? tops[i] : st->map[tops[i]];
    }
    for (uint32_t k = 0; k < nn; k++) st->map[st->xids[k]] = 0;
    if (rc) return -1;
    t = st->code, st->code = st->xcode, st->xcode = t;
    t = st->par, st->par = st->xpar, st->xpar = t;
    t = st->tops, st->tops = st->xtops, st->xtops = t;
    cap_nodes = st->cap_nodes, st->cap_nodes = st->xcap_nodes, st->xcap_nodes = cap_nodes;
    cap_nodes = st->cap_tops, st->cap_tops = st->xcap_tops, st->xcap_tops = cap_nodes;
    st->n_nodes = nn, st->n_tops = n;
    return 0;
}

moe8_status moe8_grammar_state_new(const grammar *g, grammar_state **out, moe8_error *err) {
    grammar_state *st;
    uint32_t s;
    if (!g || !out) return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "grammar: no grammar or output");
    *out = NULL;
    if (!(st = calloc(1, sizeof *st))) goto oom;
    st->g = g;
    if (!(st->w = moe8_gwk_new(g, 0))) goto oom;
    s = moe8_gwk_start(st->w);
    if (moe8_gwk_oom(st->w) || st_export(st, st->w, s) || st_reserve(st, 1, 1)) goto oom;
    *out = st;
    return MOE8_OK;
oom:
    moe8_grammar_state_free(st);
    return moe8_fail(err, MOE8_ERR_NOMEM, -1, "grammar: out of memory for a state");
}

grammar_state *moe8_grammar_state_clone(const grammar_state *src) {
    grammar_state *st = calloc(1, sizeof *st);
    if (!st) return NULL;
    st->g = src->g;
    if (st_reserve(st, src->n_nodes, src->n_tops > 0 ? src->n_tops : 1)) {
        moe8_grammar_state_free(st);
        return NULL;
    }
    if (src->n_nodes) {
        memcpy(st->code, src->code, src->n_nodes * sizeof *st->code);
        memcpy(st->par, src->par, src->n_nodes * sizeof *st->par);
    }
    if (src->n_tops) memcpy(st->tops, src->tops, src->n_tops * sizeof *st->tops);
    st->n_nodes = src->n_nodes, st->n_tops = src->n_tops;
    return st;
}

void moe8_grammar_state_free(grammar_state *st) {
    if (!st) return;
    free(st->code), free(st->par), free(st->tops), free(st->map), free(st->imp);
    free(st->xcode), free(st->xpar), free(st->xtops), free(st->xids);
    moe8_gwk_free(st->w);
    free(st);
}

uint32_t moe8_grammar_state_begin(grammar_state *st, gwk **w) {
    uint32_t s;
    if (st_scratch(st)) return G_NONE;
    moe8_gwk_reset(st->w);
    s = moe8_gwk_import_state(st->w, st);
    if (moe8_gwk_oom(st->w)) return G_NONE;
    *w = st->w;
    return s;
}

static moe8_status accept_bytes(grammar_state *st, const char *b, size_t n, int32_t tok, moe8_error *err) {
    gwk *w;
    uint32_t s = moe8_grammar_state_begin(st, &w);
    size_t i;
    if (s == G_NONE) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "grammar: out of memory");
    for (i = 0; i < n && s >= S_FIRST; i++) s = moe8_gwk_step(w, s, (uint8_t)b[i]);
    if (moe8_gwk_oom(w)) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "grammar: out of memory");
    if (s < S_FIRST) {
        if (tok >= 0)
            return moe8_fail(err, MOE8_ERR_INVALID_ARG, (int64_t)(i - 1),
                             "grammar: token %d is not allowed here (its byte %zu does not continue the "
                             "grammar)", (int)tok, i - 1);
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, (int64_t)(i - 1),
                         "grammar: byte %zu (0x%02X) does not continue the grammar", i - 1,
                         (unsigned char)b[i - 1]);
    }
    if (st_export(st, w, s)) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "grammar: out of memory");
    return MOE8_OK;
}

moe8_status moe8_grammar_accept_bytes(grammar_state *st, const char *bytes, size_t n, moe8_error *err) {
    if (!st || (!bytes && n)) return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "grammar: no state or bytes");
    return accept_bytes(st, bytes, n, -1, err);
}

moe8_status moe8_grammar_accept(grammar_state *st, const grammar_vocab *v, int32_t t, moe8_error *err) {
    const char *b;
    size_t n;
    if (!st || !v) return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "grammar: no state or vocabulary");
    if (t < 0 || t >= v->n_vocab)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "grammar: token %d is outside the vocabulary "
                         "(%d ids)", (int)t, (int)v->n_vocab);
    if (v->is_eos[t]) {
        if (!moe8_grammar_can_end(st))
            return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "grammar: end of sequence (token %d) is not "
                             "allowed here: the grammar is not complete", (int)t);
        st->tops[0] = N_FINAL, st->n_tops = 1, st->n_nodes = 0;
        return MOE8_OK;
    }
    b = moe8_grammar_vocab_token(v, t, &n);
    if (!b || !n)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "grammar: token %d has no text (special or "
                         "unassigned) and is never allowed", (int)t);
    return accept_bytes(st, b, n, t, err);
}

const grammar *moe8_grammar_state_grammar(const grammar_state *st) { return st->g; }

int moe8_grammar_can_end(const grammar_state *st) {
    for (uint32_t i = 0; i < st->n_tops; i++)
        if (st->tops[i] == N_FINAL) return st->n_tops == 1 ? 2 : 1;
    return 0;
}

size_t moe8_grammar_min_remaining(const grammar_state *st) {
    const grammar *g = st->g;
    uint64_t best = UINT64_MAX;
    for (uint32_t i = 0; i < st->n_tops; i++) {
        uint32_t t = st->tops[i], code, pos;
        uint64_t v;
        if (t == N_FINAL) return 0;
        code = st->code[t - N_FIRST], pos = code & G_POS_MASK;
        v = (uint64_t)g->dfa_min[g->cls_off[g->arg[pos]] + (code >> G_POS_BITS)] + g->suffix_min[pos + 1];
        for (uint32_t p = st->par[t - N_FIRST]; p >= N_FIRST; p = st->par[p - N_FIRST])
            v += g->suffix_min[st->code[p - N_FIRST]];
        if (v < best) best = v;
    }
    return best == UINT64_MAX ? 0 : (size_t)best;
}
