/*
 * grammar.h — constrained decoding: GBNF grammars (llama.cpp's syntax), JSON
 * Schema converted to GBNF, a tokenizer's vocabulary as a byte trie, and the
 * per-step token mask of one request.
 *
 *   moe8_grammar_build(text)            GBNF -> compiled grammar (immutable, shared)
 *   moe8_json_schema_to_gbnf(schema) JSON Schema -> GBNF text
 *   moe8_grammar_vocab_new(tok)           the vocabulary's bytes as a trie (one per server)
 *   moe8_grammar_prepare(g, v)            optional: precompute g's per-position token
 *                                    tables for v now (else the first mask does)
 *   moe8_grammar_state_new(g)             one request's position (its own: batch invariance)
 *   moe8_grammar_mask / moe8_grammar_accept    each decoding step
 *
 * The automaton works on bytes: character classes are compiled to UTF-8 byte
 * DFAs, so a token may end inside a character. Only valid UTF-8 is ever
 * accepted (surrogate code points never). Needs only moe8.h and the C
 * library, so tools may include it as "../src/grammar/grammar.h".
 *
 * Files: grammar_parse.c (GBNF text), grammar_class.c (character classes as
 * UTF-8 DFAs), grammar_compile.c (the analysis), grammar_walk.c (the stack
 * automaton), grammar_state.c (a request's position), grammar_mask.c (the
 * vocabulary trie and the masks), json_schema.c and json_schema_types.c
 * (JSON Schema), grammar_api.c (moe8.h's moe8_grammar_*).
 */
#ifndef MOE8_GRAMMAR_GRAMMAR_H
#define MOE8_GRAMMAR_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#include "moe8.h"

/* Limits (each refusal names the one it hit). */
#define GRAMMAR_MAX_TEXT (4u << 20)      /* bytes of GBNF text */
#define GRAMMAR_MAX_ELEMENTS 1000000u    /* compiled elements (after repetition expansion) */
#define GRAMMAR_MAX_RULES 100000u        /* rules, generated ones included */
#define GRAMMAR_MAX_NESTING 64           /* nested ( ) groups */
#define GRAMMAR_MAX_REPEAT 10000         /* m and n of {m,n} */
#define GRAMMAR_MAX_CLASS_STATES 4096    /* UTF-8 DFA states of one character class */
#define GRAMMAR_MAX_DFA_STATES 16384     /* ... of all classes together */
#define GRAMMAR_MAX_STACKS 65536         /* live stacks of one state (ambiguity bound) */

typedef struct grammar grammar; /* compiled, immutable, shared by any number of states/threads */

/* Compile GBNF text[0..len) with root rule "root". Errors (MOE8_ERR_INVALID_ARG)
 * name the line:column and the rule, e.g. "grammar: line 3 col 7: undefined
 * rule 'valu' (in rule 'root')"; left recursion, rules that can never finish,
 * empty grammars and the limits above are refused the same way. */
moe8_status moe8_grammar_build(const char *text, size_t len, grammar **out, moe8_error *err);
void moe8_grammar_destroy(grammar *g);

/* JSON Schema (schema_json[0..len)) -> GBNF text (malloc'd, *out). The subset,
 * the whitespace rule and what is refused are described in json_schema.c;
 * refusals are MOE8_ERR_INVALID_ARG naming the keyword and its JSON path, e.g.
 * "json_schema: 'pattern' at /properties/zip is not supported". */
moe8_status moe8_json_schema_to_gbnf(const char *schema_json, size_t len, char **out,
                                     moe8_error *err);
/* GBNF of "any JSON object" (response_format json_object). */
const char *moe8_grammar_json_object(void);

/* A token reference: GBNF `<[N]>` (llama.cpp's syntax) matches token N
 * alone, never its text spelled by other tokens (harmony's <|channel|>,
 * <|message|>: toolcall_gbnf.c). It stands for GRAMMAR_TOKEN_REF_LEN bytes
 * that no valid UTF-8 holds: 0xFF, then N in four 7-bit groups, high first,
 * each 0x80 | bits (moe8_grammar_token_ref). moe8_grammar_vocab_new gives
 * every special token those bytes and drops the tokens whose bytes hold
 * 0xFF (no grammar could take them before), so a special token is allowed
 * only where a grammar names it. An EOS id never matches a reference (it
 * has no bytes: the grammar's end is where it may come). */
#define GRAMMAR_TOKEN_REF_LEN 5
#define GRAMMAR_TOKEN_REF_MAX 0x0FFFFFFF
void moe8_grammar_token_ref(int32_t id, char out[GRAMMAR_TOKEN_REF_LEN]);

typedef struct grammar_vocab grammar_vocab; /* token bytes as a trie; built once, shared read-only */
/* eos_ids: the ids allowed only where the grammar may end (they carry no
 * bytes). Tokens with no bytes and ids at or past the tokenizer's vocabulary
 * are never allowed otherwise; special tokens (MOE8_TOKEN_SPECIAL) only where
 * the grammar names them (`<[N]>`, above). */
moe8_status moe8_grammar_vocab_new(const moe8_tokenizer *tok, int32_t n_vocab, const int32_t *eos_ids,
                              int32_t n_eos, grammar_vocab **out, moe8_error *err);
/* The same from raw token bytes: token t is bytes[t][0..lens[t]) (lens[t] == 0
 * or bytes[t] == NULL: never allowed). For tests and tools without a tokenizer. */
moe8_status moe8_grammar_vocab_new_raw(int32_t n_vocab, const char *const *bytes, const size_t *lens,
                                  const int32_t *eos_ids, int32_t n_eos, grammar_vocab **out,
                                  moe8_error *err);
void moe8_grammar_vocab_free(grammar_vocab *v);
int32_t moe8_grammar_vocab_n_vocab(const grammar_vocab *v);
size_t moe8_grammar_vocab_bytes(const grammar_vocab *v); /* memory of the trie and token bytes */
/* 1 when t is one of v's EOS ids. */
int moe8_grammar_vocab_is_eos(const grammar_vocab *v, int32_t t);
/* Token t's bytes (NULL and *n = 0 when t has none or is an EOS id). */
const char *moe8_grammar_vocab_token(const grammar_vocab *v, int32_t t, size_t *n);

/* Precompute g's tables for v (the tokens each grammar position accepts in any
 * context). moe8_grammar_mask does this on first use of a vocabulary; calling it
 * first keeps that cost off the decoding step. Thread-safe; done once per
 * (grammar, vocabulary). */
moe8_status moe8_grammar_prepare(const grammar *g, const grammar_vocab *v, moe8_error *err);
/* Memory of g's prepared tables for v (0 before moe8_grammar_prepare). */
size_t moe8_grammar_prepared_bytes(const grammar *g, const grammar_vocab *v);

typedef struct grammar_state grammar_state; /* one request's position in the grammar */
moe8_status moe8_grammar_state_new(const grammar *g, grammar_state **out, moe8_error *err);
grammar_state *moe8_grammar_state_clone(const grammar_state *st); /* NULL on OOM */
void moe8_grammar_state_free(grammar_state *st);
/* allowed[(n_vocab + 31) / 32]: bit t set iff token t may come next (out of
 * memory: no bit set). */
void moe8_grammar_mask(grammar_state *st, const grammar_vocab *v, uint32_t *allowed);
/* Advance by token t's bytes (or accept an EOS id where the grammar may end).
 * MOE8_ERR_INVALID_ARG if t is not allowed (the state is unchanged). */
moe8_status moe8_grammar_accept(grammar_state *st, const grammar_vocab *v, int32_t t, moe8_error *err);
/* Advance by raw bytes (no tokenizer), with the same rule. */
moe8_status moe8_grammar_accept_bytes(grammar_state *st, const char *bytes, size_t n, moe8_error *err);
/* 1 when the grammar may end here (EOS allowed); 2 when it must (nothing else can follow). */
int moe8_grammar_can_end(const grammar_state *st);
/* The fewest bytes that complete the grammar from here (0 when it may end). */
size_t moe8_grammar_min_remaining(const grammar_state *st);

/* The mask by walking the whole trie from the state's stacks, without the
 * precomputed tables: slower, the same answer. For tests and as the fallback. */
void moe8_grammar_mask_reference(grammar_state *st, const grammar_vocab *v, uint32_t *allowed);

/* ======================================================================== */
/* Internals shared by the grammar_*.c files (not for other callers)         */
/* ======================================================================== */
#ifdef GRAMMAR_INTERNAL

#include <pthread.h>

/* Elements, as llama.cpp lays them out: each rule is its alternatives'
 * elements, ALT between alternatives, END after the last. */
enum { GE_END = 0, GE_ALT = 1, GE_REF = 2, GE_TERM = 3 };

/* A stack node's code: for a top (a terminal about to match), the element
 * position and the UTF-8 DFA state inside its character; for a node below a
 * top, the element to expand when the rule above it ends. */
#define G_POS_BITS 20
#define G_POS_MASK ((1u << G_POS_BITS) - 1)
#define G_CODE(pos, sub) ((uint32_t)(pos) | ((uint32_t)(sub) << G_POS_BITS))

/* Reserved node ids. N_EMPTY: the bottom of a real stack; N_FINAL: a top
 * meaning the grammar has ended. A precomputation (ci_mode) runs up to G_TAGS
 * walks together, walk t over N_MARKER(t), the unknown rest of its stack: a
 * node (rule, N_MTTAG(t)) is a "marker top" (the rule ended into that
 * unknown context), N_CIFINAL(t) a top where its grammar ended. Every node
 * carries the tag of the marker under it. */
#define G_TAGS 64
enum {
    N_EMPTY = 0,
    N_FINAL = 1,
    N_MARKER0 = 2,
    N_MTTAG0 = N_MARKER0 + G_TAGS,
    N_CIFINAL0 = N_MTTAG0 + G_TAGS,
    N_FIRST = N_CIFINAL0 + G_TAGS
};
#define N_MARKER(t) (N_MARKER0 + (uint32_t)(t))
#define N_MTTAG(t) (N_MTTAG0 + (uint32_t)(t))
#define N_CIFINAL(t) (N_CIFINAL0 + (uint32_t)(t))
/* S_EMPTY: the set without tops and without tags that met the unknown context. */
enum { S_EMPTY = 0, S_FIRST = 1 };

#define G_REJECT 0xFFFFu /* DFA table entries: byte refused */
#define G_DONE 0xFFFEu   /* ... the character is complete */
#define G_NONE 0xFFFFFFFFu
#define G_MULTI 0xFFFFFFFEu

typedef struct { uint64_t w[4]; } g_byteset;

/* Tokens a (position, DFA state) accepts whatever the stack below: a bitmap
 * (dense) or a sorted id list; plus the tokens that depend on the stack, in
 * trie order, each with its common prefix length with the one before. */
typedef struct {
    uint32_t n_acc;
    uint32_t *acc_list; /* [n_acc] ids, or NULL when acc_bits */
    uint32_t *acc_bits; /* [(n_vocab+31)/32] or NULL */
    uint32_t n_unc;
    uint32_t *unc;      /* [n_unc] indices into the vocabulary's sorted order */
    uint16_t *unc_lcp;  /* [n_unc] */
} g_ci;

typedef struct g_tables {
    uint64_t vocab_serial;
    g_ci *ci;            /* [n_ci] */
    uint32_t n_ci;
    struct g_tables *next;
} g_tables;

struct grammar {
    uint32_t n_el;
    uint8_t *kind;       /* [n_el] GE_* */
    uint32_t *arg;       /* [n_el] rule (REF) or class (TERM) */
    uint32_t *el_rule;   /* [n_el] the rule each element belongs to */
    uint32_t *suffix_min;/* [n_el] fewest bytes from here to the end of the alternative */
    uint32_t *ci_base;   /* [n_el] first g_ci of a TERM (one per DFA state), else G_NONE */
    uint32_t n_ci;

    uint32_t n_rules, root;
    uint32_t *alt_off;   /* [n_rules + 1] into alt_start */
    uint32_t *alt_start; /* first element of each alternative */
    uint32_t *caller;    /* [n_rules] the one REF position referring to it, G_MULTI, or
                          * G_NONE (the root, referred to by nothing: its end is the end) */
    uint32_t *exit_pos;  /* [n_rules] where a rule ending onto the unknown context continues,
                          * its unique callers' tail positions skipped: an element to
                          * expand, or G_NONE (the grammar ends) */
    uint32_t *exit_rule; /* [n_rules] with exit_pos G_MULTI: the rule whose callers are many */
    uint32_t *rule_min;  /* [n_rules] fewest bytes a rule derives */
    g_byteset *follow;   /* [n_rules] bytes that may follow the rule's end */
    uint8_t *reachable;  /* [n_rules] */

    uint32_t n_cls;
    uint32_t *cls_off;   /* [n_cls + 1] first DFA state of each class */
    uint16_t *dfa;       /* [total states][256] next state, G_REJECT or G_DONE */
    uint32_t *dfa_min;   /* [total states] fewest bytes to complete the character */

    uint32_t start_n;    /* the initial state's alternatives: root's alt starts */
    uint8_t byte_class[256]; /* bytes every DFA row and FOLLOW set treats alike share a class */
    uint32_t n_byte_classes;

    pthread_mutex_t lock; /* guards tables' creation; readers go lock-free */
    g_tables *tables;     /* published with release stores */
};

/* The vocabulary trie, nodes in preorder: node i's subtree is [i, end[i]). */
struct grammar_vocab {
    uint64_t serial;
    int32_t n_vocab;
    uint32_t n_words;       /* (n_vocab + 31) / 32 */
    uint32_t n_nodes;
    uint8_t *byte;          /* [n_nodes] the byte on the edge into node i */
    uint16_t *depth;        /* [n_nodes] root 0 */
    uint8_t *ntok;          /* [n_nodes] tokens ending here */
    uint32_t *end;          /* [n_nodes] */
    uint32_t *tok;          /* [n_nodes] their first index in order */
    uint32_t n_order;
    int32_t *order;         /* [n_order] allowed token ids sorted by bytes */
    uint32_t *tok_off;      /* [n_vocab + 1] offsets into pool (none: equal offsets) */
    char *pool;
    uint32_t max_len;
    uint32_t *eos_bits;     /* [n_words] */
    uint8_t *is_eos;        /* [n_vocab] */
};

/* The walk engine: interned stack nodes (code, parent), interned sets of
 * tops, byte steps memoized per (set, byte). Scratch: reset before each use. */
typedef struct gwk gwk;
gwk *moe8_gwk_new(const grammar *g, int ci_mode);
void moe8_gwk_free(gwk *w);
void moe8_gwk_reset(gwk *w);
int moe8_gwk_oom(const gwk *w);
uint32_t moe8_gwk_node(gwk *w, uint32_t code, uint32_t parent);
uint32_t moe8_gwk_node_code(const gwk *w, uint32_t id);
uint32_t moe8_gwk_node_parent(const gwk *w, uint32_t id);
/* Intern a set from tops[0..n) (any order, duplicates allowed; modified);
 * umask: the tags whose paths met the unknown context on the way. */
uint32_t moe8_gwk_set(gwk *w, uint32_t *tops, uint32_t n, uint64_t umask);
const uint32_t *moe8_gwk_set_tops(const gwk *w, uint32_t set, uint32_t *n);
uint64_t moe8_gwk_set_umask(const gwk *w, uint32_t set);
uint64_t moe8_gwk_set_alive(const gwk *w, uint32_t set); /* tags with a top in the set */
uint32_t moe8_gwk_step(gwk *w, uint32_t set, uint8_t byte);
/* The state's set imported into w (after moe8_gwk_reset). */
uint32_t moe8_gwk_import_state(gwk *w, const grammar_state *st);
/* Scratch owned by w: buffer `which` (0 or 1) with room for n entries (NULL on OOM). */
uint32_t *moe8_gwk_buf(gwk *w, int which, size_t n);
/* st's own engine, reset, with st's stacks imported: the set id (G_NONE on OOM). */
uint32_t moe8_grammar_state_begin(grammar_state *st, gwk **w);
const grammar *moe8_grammar_state_grammar(const grammar_state *st);

g_tables *moe8_grammar_tables_for(const grammar *g, const grammar_vocab *v);

#endif /* GRAMMAR_INTERNAL */

#endif
