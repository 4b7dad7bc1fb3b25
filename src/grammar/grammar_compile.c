/*
 * grammar_compile.c — GBNF text into a compiled grammar (grammar.h's struct
 * grammar): grammar_parse.c's rules and grammar_class.c's DFAs flattened into
 * one element array and one DFA table, then analysed.
 *
 * Layout: elements in one array, each rule its alternatives separated by ALT
 * and closed by END (llama.cpp's); a terminal (TERM) is a class whose DFA
 * rows sit in one table at cls_off[class].
 *
 * The analysis, one pass each: nullable and productive rules; no left
 * recursion (llama.cpp's check, nullable prefixes included); reachability
 * and each rule's one caller; every reachable rule able to finish; exits (a
 * rule's end continues after its unique callers' tail positions: what a
 * precomputing walk does on the unknown rest of a stack); FIRST and FOLLOW
 * bytes; the fewest bytes from each element to its alternative's end; the
 * precomputed tables' numbering; byte classes (bytes every DFA row and
 * FOLLOW set treats alike, so the walk memoizes one step per class).
 *
 * Not here: parsing (grammar_parse.c), running the grammar (grammar_walk.c,
 * grammar_state.c) and the token tables (grammar_mask.c).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_impl.h"

static void bs_set(g_byteset *s, unsigned b) { s->w[b >> 6] |= 1ULL << (b & 63); }
static int bs_or(g_byteset *d, const g_byteset *s) {
    int ch = 0;
    for (int k = 0; k < 4; k++) {
        uint64_t v = d->w[k] | s->w[k];
        ch |= v != d->w[k];
        d->w[k] = v;
    }
    return ch;
}

static int flatten(parser *P, grammar *g) {
    uint64_t n = 0, n_alt = 0;
    uint32_t k = 0, a = 0;
    for (uint32_t r = 0; r < P->n_rules; r++) {
        n += P->rules[r].body.n;
        for (uint32_t j = 0; j < P->rules[r].body.n; j++)
            n_alt += P->rules[r].body.e[j].kind != GE_REF && P->rules[r].body.e[j].kind != GE_TERM;
    }
    g->n_el = (uint32_t)n, g->n_rules = P->n_rules;
    g->kind = malloc(n);
    g->arg = malloc(n * sizeof *g->arg);
    g->el_rule = malloc(n * sizeof *g->el_rule);
    g->alt_off = malloc((P->n_rules + 1) * sizeof *g->alt_off);
    g->alt_start = malloc((n_alt + 1) * sizeof *g->alt_start);
    if (!g->kind || !g->arg || !g->el_rule || !g->alt_off || !g->alt_start) return -1;
    for (uint32_t r = 0; r < P->n_rules; r++) {
        const pvec *b = &P->rules[r].body;
        g->alt_off[r] = a;
        g->alt_start[a++] = k;
        for (uint32_t j = 0; j < b->n; j++, k++) {
            g->kind[k] = b->e[j].kind, g->arg[k] = b->e[j].arg, g->el_rule[k] = r;
            if (b->e[j].kind == GE_ALT) g->alt_start[a++] = k + 1;
        }
    }
    g->alt_off[P->n_rules] = a;
    return 0;
}

static int check_left_recursion(parser *P, const grammar *g, const uint8_t *nullable) {
    /* edges r -> s when s can come first in r (after nullable elements);
     * an iterative DFS finds a cycle (color 1 = on the path, 2 = done) */
    uint32_t nr = g->n_rules, n_edges = 0;
    uint32_t *eoff = calloc(nr + 1, sizeof *eoff), *edge = NULL, *esrc = NULL, *stack = NULL;
    uint8_t *color = calloc(nr, 1);
    int rc = 0;
    if (!eoff || !color) goto oom;
    for (int pass = 0; pass < 2; pass++) {
        n_edges = 0;
        for (uint32_t r = 0; r < nr; r++) {
            const pvec *b = &P->rules[r].body;
            int left = 1;
            if (pass) eoff[r] = n_edges;
            for (uint32_t j = 0; j < b->n; j++) {
                if (b->e[j].kind == GE_ALT || b->e[j].kind == GE_END) left = 1;
                else if (!left) continue;
                else if (b->e[j].kind == GE_TERM) left = 0;
                else {
                    if (pass) edge[n_edges] = b->e[j].arg, esrc[n_edges] = b->e[j].src;
                    n_edges++;
                    if (!nullable[b->e[j].arg]) left = 0;
                }
            }
        }
        if (!pass) {
            edge = malloc((n_edges + 1) * sizeof *edge);
            esrc = malloc((n_edges + 1) * sizeof *esrc);
            stack = malloc((2 * (size_t)nr + 2) * sizeof *stack);
            if (!edge || !esrc || !stack) goto oom;
        }
    }
    eoff[nr] = n_edges;
    for (uint32_t s0 = 0; s0 < nr && !rc; s0++) {
        uint32_t sp = 0;
        if (color[s0]) continue;
        color[s0] = 1;
        stack[sp++] = s0, stack[sp++] = eoff[s0];
        while (sp && !rc) {
            uint32_t r = stack[sp - 2], e = stack[sp - 1];
            if (e == eoff[r + 1]) {
                color[r] = 2;
                sp -= 2;
                continue;
            }
            stack[sp - 1] = e + 1;
            if (color[edge[e]] == 1) {
                char rn[80], sn[80];
                moe8_gp_rule_label(P, edge[e], sn, sizeof sn);
                moe8_gp_rule_label(P, r, rn, sizeof rn);
                P->cur = G_NONE;
                if (!strcmp(rn, sn)) moe8_gp_err(P, esrc[e], "left recursion in rule '%s'", sn);
                else moe8_gp_err(P, esrc[e], "left recursion in rule '%s' (through '%s')", sn, rn);
                rc = -1;
            } else if (color[edge[e]] == 0) {
                color[edge[e]] = 1;
                stack[sp++] = edge[e], stack[sp++] = eoff[edge[e]];
            }
        }
    }
    free(eoff), free(edge), free(esrc), free(stack), free(color);
    return rc;
oom:
    free(eoff), free(edge), free(esrc), free(stack), free(color);
    return moe8_gp_oom(P), -1;
}

/* Nullable and productive rules: fixpoints over the alternatives. */
static void nullable_productive(const grammar *g, uint8_t *nullable, uint8_t *productive) {
    int changed;
    do {
        changed = 0;
        for (uint32_t r = 0; r < g->n_rules; r++)
            for (uint32_t a = g->alt_off[r]; a < g->alt_off[r + 1]; a++) {
                int nul = 1, prod = 1;
                for (uint32_t p = g->alt_start[a]; !is_end(g, p); p++) {
                    if (g->kind[p] == GE_TERM) nul = 0;
                    else nul &= nullable[g->arg[p]], prod &= productive[g->arg[p]];
                }
                if (nul && !nullable[r]) nullable[r] = 1, changed = 1;
                if (prod && !productive[r]) productive[r] = 1, changed = 1;
            }
    } while (changed);
}

/* Reachability from the root, and each rule's caller: its one referring
 * position, G_MULTI, or G_NONE. queue[n_rules + 1]; refs[n_rules] zeroed. */
static void reach(grammar *g, uint32_t *queue, uint32_t *refs) {
    uint32_t qh = 0, qt = 0;
    g->reachable[g->root] = 1, queue[qt++] = g->root;
    while (qh < qt) {
        uint32_t r = queue[qh++];
        for (uint32_t a = g->alt_off[r]; a < g->alt_off[r + 1]; a++)
            for (uint32_t p = g->alt_start[a]; !is_end(g, p); p++)
                if (g->kind[p] == GE_REF) {
                    uint32_t s = g->arg[p];
                    refs[s]++;
                    g->caller[s] = p;
                    if (!g->reachable[s]) g->reachable[s] = 1, queue[qt++] = s;
                }
    }
    for (uint32_t r = 0; r < g->n_rules; r++) {
        if (r == g->root) g->caller[r] = refs[r] ? G_MULTI : G_NONE;
        else if (refs[r] != 1) g->caller[r] = refs[r] ? G_MULTI : G_NONE;
    }
}

/* Every reachable rule can finish, else the error names an unproductive rule
 * that needs itself (a cause, not a victim) if there is one. 0, or -1.
 * queue and seen: [n_rules] scratch. */
static int check_productive(parser *P, const grammar *g, const uint8_t *productive, uint32_t *queue,
                            uint32_t *seen) {
    uint32_t nr = g->n_rules, bad = G_NONE;
    char rn[80];
    for (uint32_t r = 0; r < nr && bad == G_NONE; r++) {
        uint32_t qh = 0, qt = 0;
        if (!g->reachable[r] || productive[r]) continue;
        memset(seen, 0, nr * sizeof *seen);
        queue[qt++] = r;
        while (qh < qt && bad == G_NONE) {
            uint32_t q = queue[qh++];
            for (uint32_t a = g->alt_off[q]; a < g->alt_off[q + 1] && bad == G_NONE; a++)
                for (uint32_t p = g->alt_start[a]; !is_end(g, p); p++)
                    if (g->kind[p] == GE_REF && !productive[g->arg[p]]) {
                        if (g->arg[p] == r) {
                            bad = r;
                            break;
                        }
                        if (!seen[g->arg[p]] && qt < nr) seen[g->arg[p]] = 1, queue[qt++] = g->arg[p];
                    }
        }
    }
    for (uint32_t r = 0; r < nr && bad == G_NONE; r++)
        if (g->reachable[r] && !productive[r]) bad = r;
    if (bad == G_NONE) return 0;
    moe8_gp_rule_label(P, bad, rn, sizeof rn);
    P->cur = G_NONE;
    if (P->rules[bad].generated)
        moe8_gp_err(P, P->rules[bad].src, "a group in rule '%s' can never finish: each of its "
                    "alternatives needs itself again", rn);
    else
        moe8_gp_err(P, P->rules[bad].src, "rule '%s' can never finish: each of its alternatives "
                    "needs itself again", rn);
    return -1;
}

/* Exits: follow unique callers while the caller's reference is its last element. */
static void exits(grammar *g) {
    uint32_t nr = g->n_rules;
    for (uint32_t r = 0; r < nr; r++) {
        uint32_t q = r, hops = 0;
        g->exit_pos[r] = G_MULTI, g->exit_rule[r] = r;
        while (hops++ <= nr) {
            uint32_t c = g->caller[q];
            if (c == G_NONE || c == G_MULTI) {
                g->exit_pos[r] = c, g->exit_rule[r] = q;
                break;
            }
            if (!is_end(g, c + 1)) {
                g->exit_pos[r] = c + 1;
                break;
            }
            q = g->el_rule[c];
        }
    }
}

/* The bytes the terminal at p may start with. */
static void term_bytes(const grammar *g, uint32_t p, g_byteset *fb) {
    const uint16_t *row = g->dfa + (size_t)g->cls_off[g->arg[p]] * 256;
    memset(fb, 0, sizeof *fb);
    for (int b = 0; b < 256; b++)
        if (row[b] != G_REJECT) bs_set(fb, (unsigned)b);
}

/* FIRST (first[n_rules], zeroed) then FOLLOW of every reachable rule's
 * references, in bytes: fixpoints. */
static void first_follow(grammar *g, const uint8_t *nullable, g_byteset *first) {
    g_byteset fb;
    int changed;
    do {
        changed = 0;
        for (uint32_t r = 0; r < g->n_rules; r++)
            for (uint32_t a = g->alt_off[r]; a < g->alt_off[r + 1]; a++)
                for (uint32_t p = g->alt_start[a]; !is_end(g, p); p++) {
                    if (g->kind[p] == GE_TERM) {
                        term_bytes(g, p, &fb);
                        changed |= bs_or(&first[r], &fb);
                        break;
                    }
                    changed |= bs_or(&first[r], &first[g->arg[p]]);
                    if (!nullable[g->arg[p]]) break;
                }
    } while (changed);
    do {
        changed = 0;
        for (uint32_t q = 0; q < g->n_rules; q++) {
            if (!g->reachable[q]) continue;
            for (uint32_t a = g->alt_off[q]; a < g->alt_off[q + 1]; a++)
                for (uint32_t p = g->alt_start[a]; !is_end(g, p); p++) {
                    uint32_t s, t;
                    if (g->kind[p] != GE_REF) continue;
                    s = g->arg[p];
                    for (t = p + 1; !is_end(g, t); t++) {
                        if (g->kind[t] == GE_TERM) {
                            term_bytes(g, t, &fb);
                            changed |= bs_or(&g->follow[s], &fb);
                            break;
                        }
                        changed |= bs_or(&g->follow[s], &first[g->arg[t]]);
                        if (!nullable[g->arg[t]]) break;
                    }
                    if (is_end(g, t)) changed |= bs_or(&g->follow[s], &g->follow[q]);
                }
        }
    } while (changed);
}

/* Fewest bytes: each rule's (a fixpoint), then each element's suffix. */
static void min_lengths(grammar *g) {
    int changed;
    for (uint32_t r = 0; r < g->n_rules; r++) g->rule_min[r] = G_NONE;
    do {
        changed = 0;
        for (uint32_t r = 0; r < g->n_rules; r++)
            for (uint32_t a = g->alt_off[r]; a < g->alt_off[r + 1]; a++) {
                uint64_t sum = 0;
                for (uint32_t p = g->alt_start[a]; !is_end(g, p) && sum < G_NONE; p++)
                    sum += g->kind[p] == GE_TERM ? g->dfa_min[g->cls_off[g->arg[p]]]
                                                 : g->rule_min[g->arg[p]];
                if (sum < g->rule_min[r]) g->rule_min[r] = (uint32_t)sum, changed = 1;
            }
    } while (changed);
    for (uint32_t p = g->n_el; p-- > 0;) {
        uint64_t v;
        if (is_end(g, p)) {
            g->suffix_min[p] = 0;
            continue;
        }
        v = (uint64_t)(g->kind[p] == GE_TERM ? g->dfa_min[g->cls_off[g->arg[p]]] : g->rule_min[g->arg[p]]) +
            g->suffix_min[p + 1];
        g->suffix_min[p] = v >= G_NONE ? G_NONE - 1 : (uint32_t)v;
    }
}

/* One precomputed table per (reachable terminal, DFA state): their numbering. */
static void ci_bases(grammar *g) {
    g->n_ci = 0;
    for (uint32_t p = 0; p < g->n_el; p++) {
        g->ci_base[p] = G_NONE;
        if (g->kind[p] == GE_TERM && g->reachable[g->el_rule[p]]) {
            uint32_t c = g->arg[p];
            g->ci_base[p] = g->n_ci;
            g->n_ci += g->cls_off[c + 1] - g->cls_off[c];
        }
    }
}

/* The byte-class renumbering's keys: (class << 16 | value), 256 at most. */
static uint64_t renum_mix(uint32_t key) { return (key * 0x9E3779B1u) >> 23; }
static uint64_t renum_hash(const void *ctx, uint32_t id) { return renum_mix(((const uint32_t *)ctx)[id]); }
static int renum_eq(const void *ctx, uint32_t id, const void *key) {
    return ((const uint32_t *)ctx)[id] == *(const uint32_t *)key;
}

/* Byte classes: refine one class by every DFA row and reachable FOLLOW set,
 * (class, value) pairs renumbered through a hash cleared per row. 0, or -1
 * out of memory. */
static int byte_classes(parser *P, grammar *g) {
    uint32_t cls[256], pair[256], keys[256], n_cls = 1, total = g->cls_off[g->n_cls], nr = g->n_rules;
    moe8_index renum;
    if (moe8_index_init(&renum, 256, renum_hash)) return moe8_gp_oom(P), -1;
    for (int b = 0; b < 256; b++) cls[b] = 0;
    for (uint32_t row = 0; row < total + nr && n_cls < 256; row++) {
        uint32_t n_new = 0;
        if (row >= total && !g->reachable[row - total]) continue;
        moe8_index_clear(&renum);
        for (int b = 0; b < 256; b++) {
            uint32_t v = row < total ? g->dfa[(size_t)row * 256 + b]
                                     : (uint32_t)(g->follow[row - total].w[b >> 6] >> (b & 63) & 1);
            int64_t id;
            keys[n_new] = cls[b] << 16 | v;
            id = moe8_index_add(&renum, renum_mix(keys[n_new]), n_new, renum_eq, keys, &keys[n_new]);
            pair[b] = id < 0 ? n_new++ : (uint32_t)id; /* 256 keys at most: never grows */
        }
        memcpy(cls, pair, sizeof cls);
        n_cls = n_new;
    }
    moe8_index_free(&renum);
    for (int b = 0; b < 256; b++) g->byte_class[b] = (uint8_t)cls[b];
    g->n_byte_classes = n_cls;
    return 0;
}

/* The passes in order; each after the ones it reads. */
static int analyze(parser *P, grammar *g) {
    uint32_t nr = g->n_rules, ne = g->n_el;
    uint8_t *nullable = calloc(nr, 1), *productive = calloc(nr, 1);
    uint32_t *queue = malloc((nr + 1) * sizeof *queue), *refs = calloc(nr, sizeof *refs);
    g_byteset *first = calloc(nr, sizeof *first);
    int rc = -1;
    g->reachable = calloc(nr, 1);
    g->caller = malloc(nr * sizeof *g->caller);
    g->rule_min = malloc(nr * sizeof *g->rule_min);
    g->exit_pos = malloc(nr * sizeof *g->exit_pos);
    g->exit_rule = malloc(nr * sizeof *g->exit_rule);
    g->follow = calloc(nr, sizeof *g->follow);
    g->suffix_min = malloc(ne * sizeof *g->suffix_min);
    g->ci_base = malloc(ne * sizeof *g->ci_base);
    if (!nullable || !productive || !queue || !refs || !first || !g->reachable || !g->caller ||
        !g->rule_min || !g->exit_pos || !g->exit_rule || !g->follow || !g->suffix_min || !g->ci_base) {
        moe8_gp_oom(P);
        goto out;
    }
    nullable_productive(g, nullable, productive);
    if (check_left_recursion(P, g, nullable)) goto out;
    reach(g, queue, refs);
    if (check_productive(P, g, productive, queue, refs)) goto out; /* refs reused: visited marks */
    exits(g);
    first_follow(g, nullable, first);
    min_lengths(g);
    ci_bases(g);
    g->start_n = g->alt_off[g->root + 1] - g->alt_off[g->root];
    if (byte_classes(P, g)) goto out;
    rc = 0;
out:
    free(nullable), free(productive), free(queue), free(refs), free(first);
    return rc;
}

void moe8_grammar_destroy(grammar *g) {
    g_tables *t;
    if (!g) return;
    t = g->tables;
    while (t) {
        g_tables *nx = t->next;
        for (uint32_t i = 0; i < t->n_ci; i++) {
            free(t->ci[i].acc_list), free(t->ci[i].acc_bits);
            free(t->ci[i].unc), free(t->ci[i].unc_lcp);
        }
        free(t->ci);
        free(t);
        t = nx;
    }
    pthread_mutex_destroy(&g->lock);
    free(g->kind), free(g->arg), free(g->el_rule), free(g->suffix_min), free(g->ci_base);
    free(g->alt_off), free(g->alt_start), free(g->caller), free(g->rule_min), free(g->follow);
    free(g->exit_pos), free(g->exit_rule);
    free(g->reachable), free(g->cls_off), free(g->dfa), free(g->dfa_min);
    free(g);
}

moe8_status moe8_grammar_build(const char *text, size_t len, grammar **out, moe8_error *err) {
    parser P;
    grammar *g = NULL;
    if (!out || (!text && len)) return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "grammar: no text or output");
    *out = NULL;
    if (len > GRAMMAR_MAX_TEXT)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "grammar: text of %zu bytes exceeds the limit "
                         "of %u bytes", len, GRAMMAR_MAX_TEXT);
    if (moe8_gp_parse(&P, text, len, err)) goto fail;
    if (!(g = calloc(1, sizeof *g))) {
        moe8_gp_oom(&P);
        goto fail;
    }
    pthread_mutex_init(&g->lock, NULL);
    g->root = P.root;
    /* classes into one DFA table */
    g->n_cls = P.n_cls;
    g->cls_off = malloc((P.n_cls + 1) * sizeof *g->cls_off);
    g->dfa = malloc(((size_t)P.dfa_states + 1) * 256 * sizeof *g->dfa);
    g->dfa_min = malloc(((size_t)P.dfa_states + 1) * sizeof *g->dfa_min);
    if (!g->cls_off || !g->dfa || !g->dfa_min) {
        moe8_gp_oom(&P);
        goto fail;
    }
    {
        uint32_t s = 0;
        for (uint32_t c = 0; c < P.n_cls; c++) {
            g->cls_off[c] = s;
            memcpy(g->dfa + (size_t)s * 256, P.cls[c].tab, (size_t)P.cls[c].n_states * 256 * sizeof *g->dfa);
            memcpy(g->dfa_min + s, P.cls[c].min, P.cls[c].n_states * sizeof *g->dfa_min);
            s += P.cls[c].n_states;
        }
        g->cls_off[P.n_cls] = s;
    }
    if (flatten(&P, g)) {
        moe8_gp_oom(&P);
        goto fail;
    }
    if (analyze(&P, g)) goto fail;
    moe8_gp_free(&P);
    *out = g;
    return MOE8_OK;
fail:
    moe8_gp_free(&P);
    moe8_grammar_destroy(g);
    return P.st != MOE8_OK ? P.st : MOE8_ERR_INVALID_ARG;
}
