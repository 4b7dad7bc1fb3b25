/*
 * grammar_mask.c — the vocabulary as a byte trie, and the per-step mask.
 *
 * Trie: every allowed token (bytes, not EOS; a special token by its
 * reference's bytes, grammar.h's `<[N]>`) sorted by its
 * bytes; nodes in preorder as parallel arrays (edge byte, depth, subtree end,
 * tokens ending there), so a walk is a forward scan that jumps to end[i] to
 * skip a rejected subtree. Qwen3's 151,655 text tokens make 333 k nodes,
 * 6.4 MB with the token bytes.
 *
 * Precomputation (moe8_grammar_prepare, once per grammar and vocabulary): for
 * every terminal position of the grammar and every DFA state inside its
 * character, the trie is walked from that top alone over the unknown rest of
 * the stack (gwk ci_mode, see grammar_walk.c), with pruning. A token is accepted
 * (whatever the stack) when some path takes all its bytes, including paths
 * whose rule ended exactly at its last byte; rejected when every path fails
 * before needing the stack; otherwise it depends on the stack ("uncertain":
 * a rule with several callers ended before its last byte, and the next byte
 * may follow that rule). 64 such starts share one walk, each tagged by its
 * own marker: a set knows which tags have a top (alive) and which met the
 * unknown context (umask), a token node ORs its alive tags into a per-token
 * 64-bit mask, and 64x64 bit transposes turn those into one bitmap per start.
 * Starts that take many first bytes are batched together, so a JSON string's
 * `{0,64}` copies cost one full walk, not 64. Accepted sets are stored as a
 * bitmap when large, an id list when small; uncertain tokens as a list in
 * trie order with each one's common prefix with the one before. Batches run
 * on OpenMP threads.
 *
 * A mask: for each distinct top of the state, OR its accepted set (32 bits
 * at a time) and walk its uncertain tokens from the real stacks with that
 * top, reusing the walk of the shared prefix and memoized steps; EOS ids
 * where the grammar may end. moe8_grammar_mask_reference walks the whole trie
 * from the state instead: the same answer, the tests' oracle.
 */
#define GRAMMAR_INTERNAL
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "grammar/grammar.h"

/* ======================================================================== */
/* Vocabulary                                                                */
/* ======================================================================== */

static uint64_t g_vocab_serial;

static int cmp_tok(const void *a, const void *b, void *ctx) {
    const grammar_vocab *v = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint32_t lx = v->tok_off[x + 1] - v->tok_off[x], ly = v->tok_off[y + 1] - v->tok_off[y];
    int c = memcmp(v->pool + v->tok_off[x], v->pool + v->tok_off[y], lx < ly ? lx : ly);
    if (c) return c;
    if (lx != ly) return lx < ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

void moe8_grammar_vocab_free(grammar_vocab *v) {
    if (!v) return;
    free(v->byte), free(v->depth), free(v->ntok), free(v->end), free(v->tok), free(v->order);
    free(v->tok_off), free(v->pool), free(v->eos_bits), free(v->is_eos);
    free(v);
}

static moe8_status build_trie(grammar_vocab *v, moe8_error *err) {
    uint32_t n = v->n_order, nn = 1, *stack = NULL, sp = 0;
    size_t cap = 1;
    for (uint32_t k = 0; k < n; k++) cap += v->tok_off[v->order[k] + 1] - v->tok_off[v->order[k]];
    v->byte = malloc(cap), v->depth = malloc(cap * sizeof *v->depth), v->ntok = calloc(cap, 1);
    v->end = malloc(cap * sizeof *v->end), v->tok = malloc(cap * sizeof *v->tok);
    stack = malloc((v->max_len + 2) * sizeof *stack);
    if (!v->byte || !v->depth || !v->ntok || !v->end || !v->tok || !stack) goto oom;
    v->byte[0] = 0, v->depth[0] = 0, v->tok[0] = 0;
    {
        uint32_t *path = stack; /* path[d]: the node at depth d of the last token */
        const char *prev = NULL;
        uint32_t plen = 0;
        path[0] = 0;
        for (uint32_t k = 0; k < n; k++) {
            int32_t id = v->order[k];
            const char *b = v->pool + v->tok_off[id];
            uint32_t len = v->tok_off[id + 1] - v->tok_off[id], l = 0;
            while (prev && l < len && l < plen && b[l] == prev[l]) l++;
            for (uint32_t d = l + 1; d <= len; d++) {
                v->byte[nn] = (uint8_t)b[d - 1], v->depth[nn] = (uint16_t)d, v->tok[nn] = 0;
                path[d] = nn++;
            }
            if (v->ntok[path[len]]++ == 0) v->tok[path[len]] = k;
            if (v->ntok[path[len]] == 255) goto too_many;
            prev = b, plen = len;
        }
    }
    v->n_nodes = nn;
    /* subtree ends: the next node not deeper */
    for (uint32_t i = 0; i < nn; i++) {
        while (sp && v->depth[stack[sp - 1]] >= v->depth[i]) v->end[stack[--sp]] = i;
        stack[sp++] = i;
    }
    while (sp) v->end[stack[--sp]] = nn;
    free(stack);
    return MOE8_OK;
too_many:
    free(stack);
    return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "grammar vocabulary: 255 tokens with the same bytes");
oom:
    free(stack);
    return moe8_fail(err, MOE8_ERR_NOMEM, -1, "grammar vocabulary: out of memory");
}

moe8_status moe8_grammar_vocab_new_raw(int32_t n_vocab, const char *const *bytes, const size_t *lens,
                                  const int32_t *eos_ids, int32_t n_eos, grammar_vocab **out,
                                  moe8_error *err) {
    grammar_vocab *v;
    size_t total = 0;
    moe8_status st;
    if (!out || n_vocab <= 0 || (!bytes && n_vocab) || (!eos_ids && n_eos > 0) || n_eos < 0)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "grammar vocabulary: bad arguments "
                         "(n_vocab %d, n_eos %d)", (int)n_vocab, (int)n_eos);
    *out = NULL;
    if (!(v = calloc(1, sizeof *v))) goto oom;
    v->n_vocab = n_vocab, v->n_words = (uint32_t)(((uint64_t)n_vocab + 31) / 32);
    v->eos_bits = calloc(v->n_words, sizeof *v->eos_bits);
    v->is_eos = calloc((size_t)n_vocab, 1);
    v->tok_off = malloc(((size_t)n_vocab + 1) * sizeof *v->tok_off);
    v->order = malloc((size_t)n_vocab * sizeof *v->order);
    if (!v->eos_bits || !v->is_eos || !v->tok_off || !v->order) goto oom;
    for (int32_t i = 0; i < n_eos; i++) {
        if (eos_ids[i] < 0 || eos_ids[i] >= n_vocab) {
            moe8_grammar_vocab_free(v);
            return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "grammar vocabulary: eos id %d is outside "
                             "the vocabulary (%d ids)", (int)eos_ids[i], (int)n_vocab);
        }
        v->is_eos[eos_ids[i]] = 1;
        v->eos_bits[eos_ids[i] >> 5] |= 1u << (eos_ids[i] & 31);
    }
    for (int32_t t = 0; t < n_vocab; t++) {
        size_t l = bytes[t] && !v->is_eos[t] ? lens[t] : 0;
        if (l > 65535) l = 0; /* deeper than the trie counts: never allowed */
        total += l;
        if (total > 0xFFFFFFF0u) {
            moe8_grammar_vocab_free(v);
            return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "grammar vocabulary: more than 4 GB of "
                             "token bytes");
        }
    }
    if (!(v->pool = malloc(total ? total : 1))) goto oom;
    total = 0;
    for (int32_t t = 0; t < n_vocab; t++) {
        size_t l = bytes[t] && !v->is_eos[t] ? lens[t] : 0;
        if (l > 65535) l = 0;
        v->tok_off[t] = (uint32_t)total;
        if (l) {
            memcpy(v->pool + total, bytes[t], l);
            v->order[v->n_order++] = t;
            if (l > v->max_len) v->max_len = (uint32_t)l;
        }
        total += l;
    }
    v->tok_off[n_vocab] = (uint32_t)total;
    qsort_r(v->order, v->n_order, sizeof *v->order, cmp_tok, v);
    if ((st = build_trie(v, err)) != MOE8_OK) {
        moe8_grammar_vocab_free(v);
        return st;
    }
    v->serial = __atomic_add_fetch(&g_vocab_serial, 1, __ATOMIC_RELAXED);
    *out = v;
    return MOE8_OK;
oom:
    moe8_grammar_vocab_free(v);
    return moe8_fail(err, MOE8_ERR_NOMEM, -1, "grammar vocabulary: out of memory");
}

moe8_status moe8_grammar_vocab_new(const moe8_tokenizer *tok, int32_t n_vocab, const int32_t *eos_ids,
                              int32_t n_eos, grammar_vocab **out, moe8_error *err) {
    const char **bytes;
    size_t *lens;
    char *refs;
    int32_t n_tok;
    moe8_status st;
    if (!tok || n_vocab <= 0)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "grammar vocabulary: no tokenizer or n_vocab %d",
                         (int)n_vocab);
    n_tok = moe8_tokenizer_n_vocab(tok);
    bytes = calloc((size_t)n_vocab, sizeof *bytes);
    lens = calloc((size_t)n_vocab, sizeof *lens);
    if (!bytes || !lens) {
        free(bytes), free(lens);
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "grammar vocabulary: out of memory");
    }
    refs = malloc((size_t)n_vocab * GRAMMAR_TOKEN_REF_LEN);
    if (!refs) {
        free(bytes), free(lens);
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "grammar vocabulary: out of memory");
    }
    for (int32_t t = 0; t < n_vocab && t < n_tok; t++) {
        unsigned flags = 0;
        size_t n = 0;
        const char *b = moe8_tokenizer_token_bytes(tok, t, &n, &flags);
        if (flags & MOE8_TOKEN_SPECIAL) { /* its reference's bytes: only a grammar naming it takes it */
            moe8_grammar_token_ref(t, refs + (size_t)t * GRAMMAR_TOKEN_REF_LEN);
            bytes[t] = refs + (size_t)t * GRAMMAR_TOKEN_REF_LEN, lens[t] = GRAMMAR_TOKEN_REF_LEN;
        } else if (b && n && !memchr(b, 0xFF, n)) { /* 0xFF: no UTF-8, and it begins references */
            bytes[t] = b, lens[t] = n;
        }
    }
    st = moe8_grammar_vocab_new_raw(n_vocab, bytes, lens, eos_ids, n_eos, out, err);
    free(bytes), free(lens), free(refs);
    return st;
}

void moe8_grammar_token_ref(int32_t id, char out[GRAMMAR_TOKEN_REF_LEN]) {
    const uint32_t u = (uint32_t)id & GRAMMAR_TOKEN_REF_MAX;
    out[0] = (char)0xFF;
    for (int k = 0; k < 4; k++) out[1 + k] = (char)(0x80 | ((u >> (7 * (3 - k))) & 0x7F));
}

int32_t moe8_grammar_vocab_n_vocab(const grammar_vocab *v) { return v->n_vocab; }

size_t moe8_grammar_vocab_bytes(const grammar_vocab *v) {
    return (size_t)v->n_nodes * (1 + 2 + 1 + 4 + 4) + (size_t)v->n_order * 4 +
           ((size_t)v->n_vocab + 1) * 4 + v->tok_off[v->n_vocab] + (size_t)v->n_words * 4 +
           (size_t)v->n_vocab;
}

int moe8_grammar_vocab_is_eos(const grammar_vocab *v, int32_t t) {
    return v && t >= 0 && t < v->n_vocab && v->is_eos[t];
}

const char *moe8_grammar_vocab_token(const grammar_vocab *v, int32_t t, size_t *n) {
    if (t < 0 || t >= v->n_vocab || v->tok_off[t + 1] == v->tok_off[t]) {
        *n = 0;
        return NULL;
    }
    *n = v->tok_off[t + 1] - v->tok_off[t];
    return v->pool + v->tok_off[t];
}

/* ======================================================================== */
/* Precomputed tables                                                        */
/* ======================================================================== */

g_tables *moe8_grammar_tables_for(const grammar *g, const grammar_vocab *v) {
    g_tables *t = __atomic_load_n(&((grammar *)g)->tables, __ATOMIC_ACQUIRE);
    for (; t; t = t->next)
        if (t->vocab_serial == v->serial) return t;
    return NULL;
}

/* A direct-mapped cache of steps in front of moe8_gwk_step's memo (a trie walk
 * asks for the same few (set, byte) pairs hundreds of thousands of times). */
#define L1_BITS 12
typedef struct {
    uint32_t stamp, set, val;
    uint8_t byte;
} l1slot;

typedef struct {
    uint32_t *unc, n, cap;
} ulist;

typedef struct {
    uint64_t *tmask;         /* [n_words * 32] the walks accepting each token (zero between walks) */
    uint64_t *touched;       /* [n_words / 128 + 1] 64-token blocks of tmask written */
    uint64_t *bits;          /* [G_TAGS][n_words / 2 + 1] accepted, per walk */
    ulist unc[G_TAGS];       /* uncertain, per walk, in trie order */
    uint32_t *path;          /* [max_len + 1] */
    l1slot *l1;              /* [1 << L1_BITS] */
    uint32_t l1_stamp;
} ci_scratch;

static inline uint32_t step_l1(gwk *w, ci_scratch *s, uint32_t set, uint8_t b) {
    l1slot *e = &s->l1[(set * 0x9E3779B1u ^ (uint32_t)b * 0x85EBCA77u) >> (32 - L1_BITS)];
    if (e->stamp == s->l1_stamp && e->set == set && e->byte == b) return e->val;
    e->stamp = s->l1_stamp, e->set = set, e->byte = b;
    return e->val = moe8_gwk_step(w, set, b);
}

static int unc_push(ulist *u, uint32_t k) {
    if (u->n == u->cap) {
        uint32_t nc = u->cap ? u->cap * 2 : 256;
        uint32_t *q = realloc(u->unc, nc * sizeof *q);
        if (!q) return -1;
        u->unc = q, u->cap = nc;
    }
    u->unc[u->n++] = k;
    return 0;
}

static uint16_t lcp_of(const grammar_vocab *v, uint32_t a, uint32_t b) {
    int32_t x = v->order[a], y = v->order[b];
    const char *p = v->pool + v->tok_off[x], *q = v->pool + v->tok_off[y];
    uint32_t lx = v->tok_off[x + 1] - v->tok_off[x], ly = v->tok_off[y + 1] - v->tok_off[y], l = 0;
    while (l < lx && l < ly && p[l] == q[l]) l++;
    return (uint16_t)l;
}

/* Mark the tokens of subtree [i, end) uncertain for the tags in um. */
static int unc_subtree(const grammar_vocab *v, ci_scratch *s, uint32_t i, uint64_t um) {
    for (uint32_t j = i, e = v->end[i]; j < e; j++)
        for (uint32_t k = 0; k < v->ntok[j]; k++)
            for (uint64_t m = um; m; m &= m - 1)
                if (unc_push(&s->unc[__builtin_ctzll(m)], v->tok[j] + k)) return -1;
    return 0;
}

/* Transpose the 64x64 bit matrix a[0..64) in place (Hacker's Delight 7-3). */
static void transpose64(uint64_t *a) {
    uint64_t m = 0x00000000FFFFFFFFULL;
    for (int j = 32; j; j >>= 1, m ^= m << j)
        for (int k = 0; k < 64; k = (k + j + 1) & ~j) {
            uint64_t t = (a[k] >> j ^ a[k + j]) & m;
            a[k] ^= t << j;
            a[k + j] ^= t;
        }
}

/* One walk of the trie from `start` (tops of walks 0..n_tags-1, walk t over
 * N_MARKER(t)), with pruning: a token is accepted by walk t when the set at
 * its node has a top of t, uncertain when t met the unknown context on the
 * way and has no top. Results into out[0..n_tags). */
static uint32_t popcount64(uint64_t x) { /* SWAR: no libgcc call without -mpopcnt */
    x -= (x >> 1) & 0x5555555555555555ULL;
    x = (x & 0x3333333333333333ULL) + ((x >> 2) & 0x3333333333333333ULL);
    x = (x + (x >> 4)) & 0x0F0F0F0F0F0F0F0FULL;
    return (uint32_t)((x * 0x0101010101010101ULL) >> 56);
}

static int ci_build(gwk *w, const grammar_vocab *v, uint32_t start, int n_tags, ci_scratch *s, g_ci *const *out) {
    uint32_t i = 1, n = v->n_nodes, nw = v->n_words, nb = (nw + 1) / 2; /* 64-token blocks */
    uint64_t any = 0;
    for (int t = 0; t < n_tags; t++) s->unc[t].n = 0;
    s->path[0] = start;
    if (++s->l1_stamp == 0) {
        memset(s->l1, 0, ((size_t)1 << L1_BITS) * sizeof *s->l1);
        s->l1_stamp = 1;
    }
    while (i < n) {
        uint32_t d = v->depth[i], x = step_l1(w, s, s->path[d - 1], v->byte[i]), n_tops;
        uint64_t alive, unc;
        moe8_gwk_set_tops(w, x, &n_tops);
        if (n_tops == 0) {
            if (x != S_EMPTY && unc_subtree(v, s, i, moe8_gwk_set_umask(w, x))) return -1;
            i = v->end[i];
            continue;
        }
        s->path[d] = x;
        if (v->ntok[i]) {
            alive = moe8_gwk_set_alive(w, x);
            unc = moe8_gwk_set_umask(w, x) & ~alive;
            any |= alive;
            for (uint32_t k = 0; k < v->ntok[i]; k++) {
                uint32_t id = (uint32_t)v->order[v->tok[i] + k];
                s->tmask[id] |= alive;
                s->touched[id >> 12] |= 1ULL << (id >> 6 & 63);
                for (uint64_t m = unc; m; m &= m - 1)
                    if (unc_push(&s->unc[__builtin_ctzll(m)], v->tok[i] + k)) return -1;
            }
        }
        i++;
    }
    if (moe8_gwk_oom(w)) return -1;
    /* token-major masks -> one bitmap per accepting walk, 64x64 blocks at a
     * time, only the blocks written (then cleared for the next walk) */
    for (uint64_t m = any; m; m &= m - 1) memset(s->bits + (size_t)__builtin_ctzll(m) * nb, 0, nb * sizeof *s->bits);
    for (uint32_t q = 0; q < (nb + 63) / 64; q++)
        for (uint64_t tm = s->touched[q]; tm; tm &= tm - 1) {
            uint32_t b = q * 64 + (uint32_t)__builtin_ctzll(tm);
            uint64_t blk[64];
            memcpy(blk, s->tmask + (size_t)b * 64, sizeof blk);
            memset(s->tmask + (size_t)b * 64, 0, sizeof blk);
            transpose64(blk); /* blk[t] bit j: token 64b + j accepted by walk t */
            for (uint64_t a = any; a; a &= a - 1) {
                int t = __builtin_ctzll(a);
                s->bits[(size_t)t * nb + b] = blk[t];
            }
        }
    memset(s->touched, 0, ((nb + 63) / 64) * sizeof *s->touched);
    for (int t = 0; t < n_tags; t++) {
        g_ci *o = out[t];
        const uint64_t *bits = s->bits + (size_t)t * nb;
        const ulist *u = &s->unc[t];
        uint32_t n_acc = 0;
        memset(o, 0, sizeof *o);
        if (any >> t & 1)
            for (uint32_t b = 0; b < nb; b++) n_acc += popcount64(bits[b]);
        o->n_acc = n_acc;
        if (n_acc && n_acc < nw) { /* an id list is smaller than the bitmap */
            uint32_t k = 0;
            if (!(o->acc_list = malloc(n_acc * sizeof *o->acc_list))) return -1;
            for (uint32_t b = 0; b < nb; b++)
                for (uint64_t m = bits[b]; m; m &= m - 1) o->acc_list[k++] = b * 64 + (uint32_t)__builtin_ctzll(m);
        } else if (n_acc) {
            if (!(o->acc_bits = malloc(nw * sizeof *o->acc_bits))) return -1;
            for (uint32_t k = 0; k < nw; k++) o->acc_bits[k] = (uint32_t)(bits[k / 2] >> (32 * (k & 1)));
        }
        if (u->n) {
            o->unc = malloc(u->n * sizeof *o->unc);
            o->unc_lcp = malloc(u->n * sizeof *o->unc_lcp);
            if (!o->unc || !o->unc_lcp) return -1;
            o->n_unc = u->n;
            memcpy(o->unc, u->unc, u->n * sizeof *o->unc);
            o->unc_lcp[0] = 0;
            for (uint32_t k = 1; k < u->n; k++) o->unc_lcp[k] = lcp_of(v, u->unc[k - 1], u->unc[k]);
        }
    }
    return 0;
}

static void tables_free(g_tables *t) {
    if (!t) return;
    for (uint32_t i = 0; t->ci && i < t->n_ci; i++) {
        free(t->ci[i].acc_list), free(t->ci[i].acc_bits);
        free(t->ci[i].unc), free(t->ci[i].unc_lcp);
    }
    free(t->ci);
    free(t);
}

/* Bytes a start takes first: a cheap measure of how much of the trie its
 * walk visits. */
static int first_bytes(const grammar *g, uint32_t p, uint32_t sub) {
    const uint16_t *row = g->dfa + ((size_t)g->cls_off[g->arg[p]] + sub) * 256;
    int n = 0;
    for (int b = 0; b < 256; b++) n += row[b] != G_REJECT;
    return n;
}

static int cmp_item(const void *a, const void *b, void *ctx) {
    const uint32_t *x = a, *y = b;
    int hx = first_bytes(ctx, x[0], x[1]) >= 32, hy = first_bytes(ctx, y[0], y[1]) >= 32;
    if (hx != hy) return hy - hx;
    if (x[1] != y[1]) return x[1] < y[1] ? -1 : 1;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* The (terminal, DFA state) starts go G_TAGS to a trie walk; the walks are split over OpenMP threads, each with its own
 * engine and scratch (the same tables for any thread count). */
static g_tables *tables_build(const grammar *g, const grammar_vocab *v) {
    g_tables *t = calloc(1, sizeof *t);
    uint32_t *items = NULL, n_items = 0, n_batches;
    int ok = t != NULL;
    if (ok) {
        t->vocab_serial = v->serial;
        t->n_ci = g->n_ci;
        ok = (t->ci = calloc(g->n_ci ? g->n_ci : 1, sizeof *t->ci)) != NULL &&
             (items = malloc(2 * (g->n_ci ? g->n_ci : 1) * sizeof *items)) != NULL;
    }
    for (uint32_t p = 0; ok && p < g->n_el; p++)
        if (g->ci_base[p] != G_NONE) {
            uint32_t c = g->arg[p], n_sub = g->cls_off[c + 1] - g->cls_off[c];
            for (uint32_t sub = 0; sub < n_sub; sub++) items[2 * n_items] = p, items[2 * n_items + 1] = sub, n_items++;
        }
    /* starts that take many first bytes (walk most of the trie) batch together */
    if (ok) qsort_r(items, n_items, 2 * sizeof *items, cmp_item, (void *)g);
    n_batches = (n_items + G_TAGS - 1) / G_TAGS;
    if (ok && n_batches) {
#pragma omp parallel
        {
            gwk *w = moe8_gwk_new(g, 1);
            ci_scratch s;
            int mine = w != NULL;
            memset(&s, 0, sizeof s);
            s.bits = malloc((size_t)G_TAGS * ((v->n_words + 1) / 2) * sizeof *s.bits);
            s.tmask = calloc((size_t)((v->n_words + 1) / 2) * 64, sizeof *s.tmask);
            s.touched = calloc(((v->n_words + 1) / 2 + 63) / 64 + 1, sizeof *s.touched);
            s.path = malloc(((size_t)v->max_len + 2) * sizeof *s.path);
            s.l1 = calloc((size_t)1 << L1_BITS, sizeof *s.l1);
            mine = mine && s.bits && s.tmask && s.touched && s.path && s.l1;
            if (!mine) {
#pragma omp atomic write
                ok = 0;
            }
#pragma omp for schedule(dynamic, 1)
            for (uint32_t bi = 0; bi < n_batches; bi++) {
                uint32_t first = bi * G_TAGS, nb = n_items - first < G_TAGS ? n_items - first : G_TAGS;
                uint32_t tops[G_TAGS], start;
                g_ci *out[G_TAGS];
                if (!mine) continue;
                moe8_gwk_reset(w);
                for (uint32_t k = 0; k < nb; k++) {
                    uint32_t p = items[2 * (first + k)], sub = items[2 * (first + k) + 1];
                    tops[k] = moe8_gwk_node(w, G_CODE(p, sub), N_MARKER(k));
                    out[k] = &t->ci[g->ci_base[p] + sub];
                }
                start = moe8_gwk_set(w, tops, nb, 0);
                if (moe8_gwk_oom(w) || ci_build(w, v, start, (int)nb, &s, out)) {
                    mine = 0;
#pragma omp atomic write
                    ok = 0;
                }
            }
            for (int k = 0; k < G_TAGS; k++) free(s.unc[k].unc);
            free(s.bits), free(s.tmask), free(s.touched), free(s.path), free(s.l1);
            moe8_gwk_free(w);
        }
    }
    free(items);
    if (!ok) {
        tables_free(t);
        return NULL;
    }
    return t;
}

moe8_status moe8_grammar_prepare(const grammar *g, const grammar_vocab *v, moe8_error *err) {
    grammar *mg = (grammar *)g; /* the tables are a cache: the grammar's meaning never changes */
    g_tables *t;
    if (!g || !v) return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "grammar: no grammar or vocabulary");
    if (moe8_grammar_tables_for(g, v)) return MOE8_OK;
    pthread_mutex_lock(&mg->lock);
    if (!moe8_grammar_tables_for(g, v)) {
        if (!(t = tables_build(g, v))) {
            pthread_mutex_unlock(&mg->lock);
            return moe8_fail(err, MOE8_ERR_NOMEM, -1, "grammar: out of memory for the token tables");
        }
        t->next = mg->tables;
        __atomic_store_n(&mg->tables, t, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&mg->lock);
    return MOE8_OK;
}

size_t moe8_grammar_prepared_bytes(const grammar *g, const grammar_vocab *v) {
    const g_tables *t = g && v ? moe8_grammar_tables_for(g, v) : NULL;
    size_t n = 0;
    if (!t) return 0;
    n = sizeof *t + (size_t)t->n_ci * sizeof *t->ci;
    for (uint32_t i = 0; i < t->n_ci; i++) {
        const g_ci *e = &t->ci[i];
        n += e->acc_bits ? (size_t)v->n_words * 4 : (size_t)e->n_acc * 4;
        n += (size_t)e->n_unc * 6;
    }
    return n;
}

/* ======================================================================== */
/* Masks                                                                     */
/* ======================================================================== */

/* Walk the uncertain tokens of e from set s; set the accepted ones' bits. */
static void walk_list(gwk *w, const grammar_vocab *v, const g_ci *e, uint32_t s, uint32_t *path,
                      uint32_t *allowed) {
    uint32_t valid = 0;
    path[0] = s;
    for (uint32_t k = 0; k < e->n_unc; k++) {
        int32_t id = v->order[e->unc[k]];
        const uint8_t *b = (const uint8_t *)v->pool + v->tok_off[id];
        uint32_t len = v->tok_off[id + 1] - v->tok_off[id];
        uint32_t d = e->unc_lcp[k] < valid ? e->unc_lcp[k] : valid;
        if (path[d] < S_FIRST) {
            valid = d;
            continue;
        }
        while (d < len) {
            uint32_t x = moe8_gwk_step(w, path[d], b[d]);
            path[++d] = x;
            if (x < S_FIRST) break;
        }
        valid = d;
        if (d == len && path[len] >= S_FIRST) allowed[id >> 5] |= 1u << (id & 31);
    }
}

static int cmp_code(const void *a, const void *b) {
    const uint32_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0] ? 1 : (x[1] < y[1] ? -1 : x[1] > y[1]);
}

void moe8_grammar_mask(grammar_state *st, const grammar_vocab *v, uint32_t *allowed) {
    const grammar *g;
    const g_tables *t;
    gwk *w;
    uint32_t s, n, *pairs, *path, *group;
    const uint32_t *tops;
    int final = 0;
    memset(allowed, 0, v->n_words * sizeof *allowed);
    if (!st) return;
    g = moe8_grammar_state_grammar(st);
    if (!(t = moe8_grammar_tables_for(g, v))) {
        if (moe8_grammar_prepare(g, v, NULL) != MOE8_OK || !(t = moe8_grammar_tables_for(g, v))) {
            moe8_grammar_mask_reference(st, v, allowed);
            return;
        }
    }
    if ((s = moe8_grammar_state_begin(st, &w)) == G_NONE) return;
    tops = moe8_gwk_set_tops(w, s, &n);
    pairs = moe8_gwk_buf(w, 0, 2 * (size_t)n + 2 * (size_t)n + v->max_len + 2);
    if (!pairs) return;
    group = pairs + 2 * n, path = group + 2 * n;
    /* (code, node) pairs sorted by code: stacks sharing a top are walked together */
    for (uint32_t i = 0; i < n; i++) {
        pairs[2 * i] = tops[i] == N_FINAL ? G_NONE : moe8_gwk_node_code(w, tops[i]);
        pairs[2 * i + 1] = tops[i];
    }
    if (n > 1) qsort(pairs, n, 2 * sizeof *pairs, cmp_code);
    for (uint32_t i = 0; i < n;) {
        uint32_t code = pairs[2 * i], j = i, pos, ng = 0;
        const g_ci *e;
        if (code == G_NONE) {
            final = 1;
            i++;
            continue;
        }
        while (j < n && pairs[2 * j] == code) group[ng++] = pairs[2 * j + 1], j++;
        pos = code & G_POS_MASK;
        e = &t->ci[g->ci_base[pos] + (code >> G_POS_BITS)];
        if (e->acc_bits) {
            const uint32_t *a = e->acc_bits;
            for (uint32_t k = 0; k < v->n_words; k++) allowed[k] |= a[k];
        } else {
            for (uint32_t k = 0; k < e->n_acc; k++) allowed[e->acc_list[k] >> 5] |= 1u << (e->acc_list[k] & 31);
        }
        if (e->n_unc) {
            uint32_t gs = moe8_gwk_set(w, group, ng, 0);
            walk_list(w, v, e, gs, path, allowed);
        }
        i = j;
    }
    if (final)
        for (uint32_t k = 0; k < v->n_words; k++) allowed[k] |= v->eos_bits[k];
    if (moe8_gwk_oom(w)) memset(allowed, 0, v->n_words * sizeof *allowed);
}

void moe8_grammar_mask_reference(grammar_state *st, const grammar_vocab *v, uint32_t *allowed) {
    gwk *w;
    uint32_t s, n, *path, i = 1;
    const uint32_t *tops;
    memset(allowed, 0, v->n_words * sizeof *allowed);
    if (!st || (s = moe8_grammar_state_begin(st, &w)) == G_NONE) return;
    if (!(path = moe8_gwk_buf(w, 1, (size_t)v->max_len + 2))) return;
    path[0] = s;
    while (i < v->n_nodes) {
        uint32_t d = v->depth[i], x = moe8_gwk_step(w, path[d - 1], v->byte[i]);
        if (x < S_FIRST) {
            i = v->end[i];
            continue;
        }
        path[d] = x;
        for (uint32_t k = 0; k < v->ntok[i]; k++) {
            uint32_t id = (uint32_t)v->order[v->tok[i] + k];
            allowed[id >> 5] |= 1u << (id & 31);
        }
        i++;
    }
    tops = moe8_gwk_set_tops(w, s, &n);
    for (uint32_t k = 0; k < n; k++)
        if (tops[k] == N_FINAL)
            for (uint32_t j = 0; j < v->n_words; j++) allowed[j] |= v->eos_bits[j];
    if (moe8_gwk_oom(w)) memset(allowed, 0, v->n_words * sizeof *allowed);
}
