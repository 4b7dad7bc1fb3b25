/*
 * grammar_walk.c — the walk engine (gwk, grammar.h): a grammar's stacks as
 * interned nodes, sets of stack tops, and byte steps between sets.
 *
 * Stacks are interned nodes (code, parent): a top is a terminal about to
 * match with its DFA state, each node below is the element to expand when
 * the rule above it ends (tail calls push nothing, so `x ::= a x |` runs in
 * constant depth). A state is a set of tops. A byte step matches every top,
 * expands completed elements until every path again ends at a terminal (or
 * the grammar's end), and interns the result; steps are memoized per (set,
 * byte class) — bytes that every DFA row and FOLLOW set treat alike form a
 * class — so walking a trie of tokens is a lazily built DFA over stack sets.
 *
 * In ci_mode (grammar_mask.c's precomputation) a walk starts from one top
 * over N_MARKER(t), the unknown rest of the stack (up to 64 walks, tags t,
 * run as one). A rule ending onto the marker continues after its caller when
 * it has exactly one (generated rules always do: the copies of a repeated
 * group get cloned rules), through callers in tail position in one hop
 * (exit_pos, so a {0,n} chain costs O(1) per step), ends the grammar for a
 * root nobody refers to, and otherwise becomes a "marker top": the next byte
 * is checked against the rule's FOLLOW set and, if it may follow, marks tag t
 * in the set's umask (the outcome depends on the real stack).
 *
 * A live set keeps at most GRAMMAR_MAX_STACKS tops (fewer paths, never
 * more). Out of memory is sticky (moe8_gwk_oom): every later call answers the
 * empty set. Not here: a request's own copy of its stacks (grammar_state.c).
 */
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_impl.h"

uint32_t *moe8_gwk_buf(gwk *w, int which, size_t n) {
    if (n > w->bufcap[which]) {
        size_t nc = n < 256 ? 256 : n * 2;
        uint32_t *q = realloc(w->buf[which], nc * sizeof *q);
        if (!q) return NULL;
        w->buf[which] = q, w->bufcap[which] = nc;
    }
    return w->buf[which];
}

static int grow_u32(gwk *w, uint32_t **p, uint32_t *cap, uint32_t need) {
    uint32_t nc = *cap ? *cap : 64;
    uint32_t *q;
    if (need <= *cap) return 0;
    while (nc < need) nc *= 2;
    if (!(q = realloc(*p, (size_t)nc * sizeof *q))) {
        w->oom = 1;
        return -1;
    }
    *p = q, *cap = nc;
    return 0;
}

static uint32_t mix32(uint32_t a, uint32_t b) {
    uint64_t h = ((uint64_t)a << 32 | b) * 0x9E3779B97F4A7C15ULL;
    return (uint32_t)(h >> 32) ^ (uint32_t)h;
}

/* The walker's three tables (core/index.h): nodes by (code, parent), sets by
 * (sorted tops, umask), the memo by (set, byte class). */
static uint64_t node_hash(const void *ctx, uint32_t id) {
    const gwk *w = ctx;
    return mix32(w->ncode[id], w->npar[id]);
}

static int node_eq(const void *ctx, uint32_t id, const void *key) {
    const gwk *w = ctx;
    const uint32_t *k = key;
    return w->ncode[id] == k[0] && w->npar[id] == k[1];
}

typedef struct {
    const uint32_t *t;
    uint32_t n;
    uint64_t umask;
} set_key;

static uint32_t set_hash(const uint32_t *t, uint32_t n, uint64_t umask) {
    uint32_t h = mix32(0x811C9DC5u ^ (uint32_t)umask, (uint32_t)(umask >> 32));
    for (uint32_t i = 0; i < n; i++) h = mix32(h, t[i]);
    return h;
}

static uint64_t set_hash_id(const void *ctx, uint32_t id) {
    const gwk *w = ctx;
    return set_hash(w->pool + w->soff[id], w->slen[id], w->sumask[id]);
}

static int set_eq(const void *ctx, uint32_t id, const void *key) {
    const gwk *w = ctx;
    const set_key *k = key;
    return w->slen[id] == k->n && w->sumask[id] == k->umask &&
           !memcmp(w->pool + w->soff[id], k->t, k->n * sizeof *k->t);
}

static uint64_t memo_mix(uint64_t key) { return (key * 0x9E3779B97F4A7C15ULL) >> 32; }
static uint64_t memo_hash(const void *ctx, uint32_t id) { return memo_mix(((const gwk *)ctx)->mkey[id]); }
static int memo_eq(const void *ctx, uint32_t id, const void *key) {
    return ((const gwk *)ctx)->mkey[id] == *(const uint64_t *)key;
}

gwk *moe8_gwk_new(const grammar *g, int ci_mode) {
    gwk *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->g = g, w->ci = ci_mode;
    /* small at first (a clone's first accept makes one); every table grows */
    w->ncap = N_FIRST + 64, w->scap = 32, w->pcap = 128;
    w->mcap = 64;
    w->ncode = malloc(w->ncap * sizeof *w->ncode);
    w->npar = malloc(w->ncap * sizeof *w->npar);
    w->ntag = malloc(w->ncap);
    w->soff = malloc(w->scap * sizeof *w->soff);
    w->slen = malloc(w->scap * sizeof *w->slen);
    w->sumask = malloc(w->scap * sizeof *w->sumask);
    w->salive = malloc(w->scap * sizeof *w->salive);
    w->pool = malloc(w->pcap * sizeof *w->pool);
    w->mkey = malloc(w->mcap * sizeof *w->mkey);
    w->mval = malloc(w->mcap * sizeof *w->mval);
    if (!w->ncode || !w->npar || !w->ntag || !w->soff || !w->slen || !w->sumask || !w->salive ||
        !w->pool || !w->mkey || !w->mval || moe8_index_init(&w->nht, 128, node_hash) ||
        moe8_index_init(&w->sht, 32, set_hash_id) || moe8_index_init(&w->mt, 64, memo_hash)) {
        moe8_gwk_free(w);
        return NULL;
    }
    moe8_gwk_reset(w);
    return w;
}

void moe8_gwk_free(gwk *w) {
    if (!w) return;
    free(w->ncode), free(w->npar), free(w->ntag), free(w->soff), free(w->slen);
    free(w->sumask), free(w->salive), free(w->mkey), free(w->mval);
    moe8_index_free(&w->nht), moe8_index_free(&w->sht), moe8_index_free(&w->mt);
    free(w->pool), free(w->out), free(w->work), free(w->mark);
    free(w->buf[0]), free(w->buf[1]);
    free(w);
}

void moe8_gwk_reset(gwk *w) {
    moe8_index_clear(&w->nht), moe8_index_clear(&w->sht), moe8_index_clear(&w->mt);
    w->oom = 0;
    w->nn = N_FIRST;
    for (uint32_t i = 0; i < N_FIRST; i++) {
        w->ncode[i] = 0, w->npar[i] = 0;
        w->ntag[i] = (uint8_t)(i < N_MARKER0 ? 0 : (i - N_MARKER0) % G_TAGS);
    }
    w->ns = S_FIRST, w->np = 0;
    w->soff[S_EMPTY] = 0, w->slen[S_EMPTY] = 0;
    w->sumask[S_EMPTY] = 0, w->salive[S_EMPTY] = 0;
}

int moe8_gwk_oom(const gwk *w) { return w->oom; }
uint32_t moe8_gwk_node_code(const gwk *w, uint32_t id) { return w->ncode[id]; }
uint32_t moe8_gwk_node_parent(const gwk *w, uint32_t id) { return w->npar[id]; }

uint32_t moe8_gwk_node(gwk *w, uint32_t code, uint32_t parent) {
    uint32_t key[2] = {code, parent};
    int64_t id;
    if (w->oom) return N_FINAL;
    if (w->nn == w->ncap) {
        uint32_t nc = w->ncap * 2;
        uint32_t *a = realloc(w->ncode, nc * sizeof *a), *b;
        uint8_t *t;
        if (!a) return w->oom = 1, N_FINAL;
        w->ncode = a;
        if (!(b = realloc(w->npar, nc * sizeof *b))) return w->oom = 1, N_FINAL;
        w->npar = b;
        if (!(t = realloc(w->ntag, nc))) return w->oom = 1, N_FINAL;
        w->ntag = t, w->ncap = nc;
    }
    id = moe8_index_add(&w->nht, mix32(code, parent), w->nn, node_eq, w, key);
    if (id == -2) return w->oom = 1, N_FINAL;
    if (id >= 0) return (uint32_t)id;
    w->ncode[w->nn] = code, w->npar[w->nn] = parent, w->ntag[w->nn] = w->ntag[parent];
    return w->nn++;
}

static void sort_u32(uint32_t *a, uint32_t n) {
    for (uint32_t i = 1; i < n; i++) {
        uint32_t v = a[i], j = i;
        while (j > 0 && a[j - 1] > v) a[j] = a[j - 1], j--;
        a[j] = v;
    }
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

uint32_t moe8_gwk_set(gwk *w, uint32_t *t, uint32_t n, uint64_t umask) {
    uint32_t m = 0;
    uint64_t alive = 0;
    set_key key;
    int64_t id;
    if (w->oom) return S_EMPTY;
    if (n <= 24) sort_u32(t, n);
    else qsort(t, n, sizeof *t, cmp_u32);
    for (uint32_t i = 0; i < n; i++)
        if (!m || t[m - 1] != t[i]) t[m++] = t[i];
    if (m > GRAMMAR_MAX_STACKS) m = GRAMMAR_MAX_STACKS; /* conservative: fewer paths, never more */
    if (!m && !umask) return S_EMPTY;
    if (w->ns == w->scap) {
        uint32_t nc = w->scap * 2;
        uint32_t *a = realloc(w->soff, nc * sizeof *a), *b;
        uint64_t *f, *al;
        if (!a) return w->oom = 1, S_EMPTY;
        w->soff = a;
        if (!(b = realloc(w->slen, nc * sizeof *b))) return w->oom = 1, S_EMPTY;
        w->slen = b;
        if (!(f = realloc(w->sumask, nc * sizeof *f))) return w->oom = 1, S_EMPTY;
        w->sumask = f;
        if (!(al = realloc(w->salive, nc * sizeof *al))) return w->oom = 1, S_EMPTY;
        w->salive = al, w->scap = nc;
    }
    if (w->np + m > w->pcap) {
        size_t nc = w->pcap * 2;
        uint32_t *q;
        while (nc < w->np + m) nc *= 2;
        if (!(q = realloc(w->pool, nc * sizeof *q))) return w->oom = 1, S_EMPTY;
        w->pool = q, w->pcap = nc;
    }
    key.t = t, key.n = m, key.umask = umask;
    id = moe8_index_add(&w->sht, set_hash(t, m, umask), w->ns, set_eq, w, &key);
    if (id == -2) return w->oom = 1, S_EMPTY;
    if (id >= 0) return (uint32_t)id;
    memcpy(w->pool + w->np, t, m * sizeof *t);
    for (uint32_t i = 0; i < m; i++) alive |= 1ULL << w->ntag[t[i]];
    w->soff[w->ns] = (uint32_t)w->np, w->slen[w->ns] = m, w->sumask[w->ns] = umask, w->salive[w->ns] = alive;
    w->np += m;
    return w->ns++;
}

const uint32_t *moe8_gwk_set_tops(const gwk *w, uint32_t set, uint32_t *n) {
    *n = w->slen[set];
    return w->pool + w->soff[set];
}

uint64_t moe8_gwk_set_umask(const gwk *w, uint32_t set) { return w->sumask[set]; }
uint64_t moe8_gwk_set_alive(const gwk *w, uint32_t set) { return w->salive[set]; }

static int is_marker(uint32_t id) { return id >= N_MARKER0 && id < N_MTTAG0; }

static void push_out(gwk *w, uint32_t id) {
    if (w->nout == w->outcap && grow_u32(w, &w->out, &w->outcap, w->nout + 1)) return;
    w->out[w->nout++] = id;
}

static void push_work(gwk *w, uint32_t id) {
    if (w->nwork == w->workcap && grow_u32(w, &w->work, &w->workcap, w->nwork + 1)) return;
    w->work[w->nwork++] = id;
}

/* Expand node `item` (an element to process over its parent) until every
 * path is a top: terminals, N_FINAL or marker tops, appended to w->out. */
static void expand(gwk *w, uint32_t item) {
    const grammar *g = w->g;
    w->nwork = 0;
    push_work(w, item);
    while (w->nwork && !w->oom) {
        uint32_t x = w->work[--w->nwork], pos, par;
        if (x >= w->markcap) {
            uint32_t old = w->markcap;
            if (grow_u32(w, &w->mark, &w->markcap, w->nn + 1)) return;
            memset(w->mark + old, 0, (w->markcap - old) * sizeof *w->mark);
        }
        if (w->mark[x] == w->mark_epoch) continue;
        w->mark[x] = w->mark_epoch;
        pos = w->ncode[x], par = w->npar[x];
        switch (g->kind[pos]) {
        case GE_TERM:
            push_out(w, x);
            break;
        case GE_REF: {
            uint32_t r = g->arg[pos], cont = pos + 1, np;
            if (is_end(g, cont))
                np = is_marker(par) && g->el_rule[pos] != r ? moe8_gwk_node(w, cont, par) : par;
            else
                np = moe8_gwk_node(w, cont, par);
            for (uint32_t a = g->alt_off[r]; a < g->alt_off[r + 1]; a++)
                push_work(w, moe8_gwk_node(w, g->alt_start[a], np));
            break;
        }
        default: { /* the alternative is complete: its rule ends */
            uint32_t r = g->el_rule[pos];
            if (par == N_EMPTY) push_out(w, N_FINAL);
            else if (is_marker(par)) {
                uint32_t c = g->exit_pos[r], t = par - N_MARKER0;
                if (c == G_NONE) push_out(w, N_CIFINAL(t));
                else if (c == G_MULTI) push_out(w, moe8_gwk_node(w, g->exit_rule[r], N_MTTAG(t)));
                else push_work(w, moe8_gwk_node(w, c, par));
            } else {
                push_work(w, par);
            }
        }
        }
    }
}

static void next_mark_epoch(gwk *w) {
    if (++w->mark_epoch == 0) {
        if (w->mark) memset(w->mark, 0, w->markcap * sizeof *w->mark);
        w->mark_epoch = 1;
    }
}

uint32_t moe8_gwk_step(gwk *w, uint32_t set, uint8_t byte) {
    const grammar *g = w->g;
    uint64_t key = (uint64_t)set << 8 | g->byte_class[byte]; /* alike bytes step alike */
    uint32_t n, res;
    uint64_t umask;
    int64_t id;
    if (set == S_EMPTY || w->oom) return S_EMPTY;
    if ((id = moe8_index_find(&w->mt, memo_mix(key), memo_eq, w, &key)) >= 0) return w->mval[id];
    umask = w->sumask[set];
    w->nout = 0;
    next_mark_epoch(w);
    n = w->slen[set];
    for (uint32_t i = 0; i < n && !w->oom; i++) {
        uint32_t x = w->pool[w->soff[set] + i], par, code, pos, nx;
        if (x == N_FINAL || (x >= N_CIFINAL0 && x < N_FIRST)) continue; /* ended: no byte follows */
        par = w->npar[x], code = w->ncode[x];
        if (par >= N_MTTAG0 && par < N_CIFINAL0) {
            const g_byteset *f = &g->follow[code];
            if (f->w[byte >> 6] >> (byte & 63) & 1) umask |= 1ULL << (par - N_MTTAG0);
            continue;
        }
        pos = code & G_POS_MASK;
        nx = g->dfa[((size_t)g->cls_off[g->arg[pos]] + (code >> G_POS_BITS)) * 256 + byte];
        if (nx == G_REJECT) continue;
        if (nx == G_DONE) {
            expand(w, moe8_gwk_node(w, pos + 1, par));
        } else {
            push_out(w, moe8_gwk_node(w, G_CODE(pos, nx), par));
        }
    }
    res = moe8_gwk_set(w, w->out, w->nout, umask);
    if (w->oom) return S_EMPTY;
    n = (uint32_t)w->mt.n;
    if (n == w->mcap) {
        uint64_t *k = realloc(w->mkey, 2 * (size_t)n * sizeof *k);
        uint32_t *v;
        if (!k) return w->oom = 1, S_EMPTY;
        w->mkey = k;
        if (!(v = realloc(w->mval, 2 * (size_t)n * sizeof *v))) return w->oom = 1, S_EMPTY;
        w->mval = v, w->mcap = 2 * n;
    }
    w->mkey[n] = key, w->mval[n] = res;
    if (moe8_index_add(&w->mt, memo_mix(key), n, memo_eq, w, &key) == -2) return w->oom = 1, S_EMPTY;
    return res;
}

uint32_t moe8_gwk_start(gwk *w) {
    const grammar *g = w->g;
    w->nout = 0;
    next_mark_epoch(w);
    for (uint32_t a = g->alt_off[g->root]; a < g->alt_off[g->root + 1]; a++) {
        /* expand() clears the work list; the marks keep shared items single */
        expand(w, moe8_gwk_node(w, g->alt_start[a], N_EMPTY));
    }
    return moe8_gwk_set(w, w->out, w->nout, 0);
}
