/*
 * test_grammar.c — constrained decoding (src/grammar/grammar*.c,
 * json_schema*.c) against references written here:
 *
 * - GBNF: a table of parse errors (each message's line:col and rule), a
 *   table of accepted syntax, accept/reject tables (strings accepted in full,
 *   or refused at a given byte) fed byte by byte through a one-token-per-byte
 *   vocabulary, and token by token through the real Qwen3 vocabulary
 *   (moe8_tokenize) with the mask checked at every step: each token of a
 *   valid string is in the mask, the mask equals the whole-trie walk
 *   (moe8_grammar_mask_reference), and on a few steps every one of the 151,936
 *   ids is checked by accepting its bytes on a clone.
 * - Integer ranges from JSON Schema, exhaustively around their bounds.
 * - JSON Schema: schemas with their valid and invalid examples; every
 *   unsupported keyword refused with its path.
 * - Random schemas (a seeded generator) x random walks: every step picks a
 *   uniformly random allowed token ("any model"), then, past a budget,
 *   single-byte tokens that shorten the shortest completion; the text must
 *   be strict JSON (our own parser) and valid for the schema (our own
 *   validator), and the mask may never be empty before the grammar ends.
 * - grammar_after (moe8_request) in the scheduler on the tiny Qwen3 model:
 *   strings taken from an unconstrained seeded run, split over two tokens
 *   (ending at a token's end, or inside one: its last byte then goes to the
 *   grammar): the constrained request's tokens up to the string are the
 *   unconstrained run's (no mask before it), the text after it parses and
 *   validates (a JSON Schema) or is exactly the grammar's; a rest the grammar
 *   refuses is an error; a string never written leaves the request
 *   unconstrained to max_tokens; "" is none; all of them beside plain ones in
 *   5-token chunks equal themselves alone; bad values refused.
 * Under the sanitizers (MOE8_TEST_SANITIZE) the brute force over Qwen3's
 * vocabulary checks every 4th id and the random walks take the first 20 of
 * the 50 schemas; the release build checks every id and all 50.
 */
#include <pthread.h>
#include <stdint.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "grammar/grammar.h"
#include "test.h"
#include "fixture_model.h"

#ifndef MOE8_TEST_SANITIZE
#define MOE8_TEST_SANITIZE ""
#endif
#define SAN (MOE8_TEST_SANITIZE[0] != '\0')

#define BYTE_EOS 256
#define QWEN_N_VOCAB 151936
#define QWEN_EOS 151645

static grammar_vocab *bv;  /* token b = byte b, 256 = EOS */
static moe8_tokenizer *qtok;
static grammar_vocab *qv;  /* Qwen3, NULL when .deps lacks it */
static int32_t qbyte[256]; /* Qwen3's single-byte token of each byte */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static grammar *compile_or_die(const char *text) {
    grammar *g = NULL;
    moe8_error e;
    if (moe8_grammar_build(text, strlen(text), &g, &e) != MOE8_OK) {
        fprintf(stderr, "FAIL: grammar does not compile: %s\n---\n%s\n---\n", e.message, text);
        test_n_fail++;
        return NULL;
    }
    return g;
}

static int bit(const uint32_t *m, int32_t t) { return (int)(m[t >> 5] >> (t & 31) & 1); }

static int popcount_mask(const uint32_t *m, int32_t n) {
    int c = 0;
    for (int32_t i = 0; i < (n + 31) / 32; i++) c += __builtin_popcount(m[i]);
    return c;
}

/* ======================================================================== */
/* Feeding strings                                                            */
/* ======================================================================== */

/* Through the byte vocabulary, checking the mask at every step against
 * accepting on a clone. Returns the byte refused, -1 when all accepted and
 * the grammar may end, -2 when all accepted but it may not end yet. */
static long feed_bytes(grammar *g, const char *s, size_t n) {
    grammar_state *st;
    uint32_t m[9];
    long res = -1;
    moe8_error e;
    if (moe8_grammar_state_new(g, &st, &e) != MOE8_OK) return -3;
    for (size_t i = 0; i <= n; i++) {
        moe8_grammar_mask(st, bv, m);
        /* every byte: in the mask iff a clone accepts it */
        for (int b = 0; b < 256; b++) {
            grammar_state *c = moe8_grammar_state_clone(st);
            int ok = moe8_grammar_accept(c, bv, b, NULL) == MOE8_OK;
            moe8_grammar_state_free(c);
            if (ok != bit(m, b)) {
                CHECKF(0, "byte vocabulary: mask bit %d is %d but accept says %d after %zu bytes", b, bit(m, b), ok, i);
                break;
            }
        }
        CHECKF(bit(m, BYTE_EOS) == (moe8_grammar_can_end(st) != 0), "eos bit vs can_end");
        CHECKF(popcount_mask(m, 257) > 0, "empty mask (stuck) after %zu bytes of '%.*s'", i, (int)n, s);
        if (i == n) break;
        if (moe8_grammar_accept(st, bv, (unsigned char)s[i], &e) != MOE8_OK) {
            CHECKF(!bit(m, (unsigned char)s[i]), "byte %zu refused but in the mask", i);
            res = (long)i;
            break;
        }
    }
    if (res == -1 && !moe8_grammar_can_end(st)) res = -2;
    if (res == -1) {
        CHECK(moe8_grammar_accept(st, bv, BYTE_EOS, NULL) == MOE8_OK);
        CHECK(moe8_grammar_can_end(st) == 2);
    }
    moe8_grammar_state_free(st);
    return res;
}

/* Every allowed token of st must be accepted by a clone, every other one refused. */
static void brute_check(grammar_state *st, const grammar_vocab *v, const uint32_t *m, const char *what) {
    int32_t n = moe8_grammar_vocab_n_vocab(v), bad = 0;
    const int32_t step = SAN && n > 65536 ? 4 : 1;   /* Qwen3's, under the sanitizers */
    for (int32_t t = 0; t < n && bad < 3; t += step) {
        grammar_state *c = moe8_grammar_state_clone(st);
        int ok = moe8_grammar_accept(c, v, t, NULL) == MOE8_OK;
        moe8_grammar_state_free(c);
        if (ok != bit(m, t)) {
            size_t len;
            const char *b = moe8_grammar_vocab_token(v, t, &len);
            CHECKF(0, "%s: token %d '%.*s' mask %d, accept %d", what, (int)t, (int)len, b ? b : "", bit(m, t), ok);
            bad++;
        }
    }
    CHECK(bad == 0);
}

static int n_brute; /* brute-force checks done (they are slow: a few) */

/* Through Qwen3: tokenize, then token by token with the mask checked against
 * the reference walk. Returns as feed_bytes, with the refused token's first
 * byte offset. */
static long feed_qwen(grammar *g, const char *s, size_t n) {
    int32_t ids[4096];
    size_t n_ids = 0, off = 0;
    uint32_t *m, *r;
    grammar_state *st;
    moe8_error e;
    long res = -1;
    if (!qv) return -4;
    if (moe8_tokenize(qtok, s, n, ids, 4096, &n_ids, &e) != MOE8_OK) return -4;
    m = malloc((QWEN_N_VOCAB / 32 + 1) * 4), r = malloc((QWEN_N_VOCAB / 32 + 1) * 4);
    if (moe8_grammar_state_new(g, &st, &e) != MOE8_OK) return -3;
    for (size_t k = 0; k <= n_ids; k++) {
        moe8_grammar_mask(st, qv, m);
        moe8_grammar_mask_reference(st, qv, r);
        CHECKF(!memcmp(m, r, (QWEN_N_VOCAB + 31) / 32 * 4), "qwen mask differs from the reference walk "
               "after %zu tokens of '%.*s' (%d vs %d allowed)", k, (int)n, s, popcount_mask(m, QWEN_N_VOCAB),
               popcount_mask(r, QWEN_N_VOCAB));
        CHECKF(bit(m, QWEN_EOS) == (moe8_grammar_can_end(st) != 0), "qwen eos bit vs can_end");
        CHECKF(popcount_mask(m, QWEN_N_VOCAB) > 0, "qwen: empty mask after %zu tokens", k);
        if (k == n_ids) break;
        {
            size_t len;
            moe8_grammar_vocab_token(qv, ids[k], &len);
            if (moe8_grammar_accept(st, qv, ids[k], &e) != MOE8_OK) {
                CHECKF(!bit(m, ids[k]), "token %d refused but in the mask", (int)ids[k]);
                res = (long)off;
                break;
            }
            CHECKF(bit(m, ids[k]), "token %d accepted but not in the mask", (int)ids[k]);
            off += len;
        }
    }
    if (res == -1 && !moe8_grammar_can_end(st)) res = -2;
    moe8_grammar_state_free(st);
    free(m), free(r);
    return res;
}

/* Whether the token holding byte `at` of s is where Qwen feeding stopped. */
static int qwen_refused_at(const char *s, size_t n, long tok_off, long at) {
    int32_t ids[4096];
    size_t n_ids = 0, off = 0;
    if (moe8_tokenize(qtok, s, n, ids, 4096, &n_ids, NULL) != MOE8_OK) return 0;
    for (size_t k = 0; k < n_ids; k++) {
        size_t len;
        moe8_grammar_vocab_token(qv, ids[k], &len);
        if ((long)off == tok_off) return at >= (long)off && at < (long)(off + len);
        off += len;
    }
    return 0;
}

typedef struct {
    const char *s;
    long refused_at; /* -1: accepted in full; -2: a prefix, not complete; else the byte refused */
} case_t;

static void run_cases(const char *label, grammar *g, const case_t *cs) {
    for (int i = 0; cs[i].s; i++) {
        size_t n = strlen(cs[i].s);
        long got = feed_bytes(g, cs[i].s, n);
        CHECKF(got == cs[i].refused_at, "%s: '%s': bytes gave %ld, expected %ld", label, cs[i].s, got,
               cs[i].refused_at);
        if (qv) {
            long q = feed_qwen(g, cs[i].s, n);
            if (q == -4) continue; /* not tokenizable (invalid UTF-8) */
            if (cs[i].refused_at < 0) CHECKF(q == cs[i].refused_at, "%s: '%s': qwen gave %ld", label, cs[i].s, q);
            else CHECKF(q >= 0 && qwen_refused_at(cs[i].s, n, q, cs[i].refused_at),
                        "%s: '%s': qwen refused at token offset %ld, expected the token of byte %ld", label,
                        cs[i].s, q, cs[i].refused_at);
        }
    }
}

/* ======================================================================== */
/* GBNF: errors and syntax                                                    */
/* ======================================================================== */

static void test_parse_errors(void) {
    static const struct { const char *text, *msg; } t[] = {
        {"root ::= valu\n", "grammar: line 1 col 10: undefined rule 'valu' (in rule 'root')"},
        {"root ::= \"a\" x\n\nx ::= \"b\" y\n", "line 3 col 11: undefined rule 'y' (in rule 'x')"},
        {"root ::= (\"a\" | zz)*\n", "line 1 col 17: undefined rule 'zz' (in rule 'root')"},
        {"root ::= root \"a\"\n", "line 1 col 10: left recursion in rule 'root'"},
        {"root ::= a\na ::= b \"x\"\nb ::= \"\" | a\n", "line 3 col 12: left recursion in rule 'a' (through 'b')"},
        {"root ::= (\"\" | \"a\")*\n", "left recursion in rule 'root'"},
        {"", "grammar: empty grammar (no rules)"},
        {"# only a comment\n\n", "grammar: empty grammar (no rules)"},
        {"a ::= \"x\"\n", "grammar: no rule 'root'"},
        {"root ::= (\"a\"\n", "line 1 col 10: in rule 'root': expecting ')' to close the group opened here"},
        {"root ::= \"abc\n", "line 1 col 10: in rule 'root': unterminated string literal"},
        {"root ::= [abc", "line 1 col 10: in rule 'root': unterminated character class"},
        {"root ::= [z-a]", "line 1 col 12: in rule 'root': character range is backwards (U+007A > U+0061)"},
        {"root ::= []", "line 1 col 10: in rule 'root': empty character class"},
        {"root ::= [^\\x00-\\U0010FFFF]", "line 1 col 10: in rule 'root': character class matches no character"},
        {"root ::= \"a\"\nx ::= \"\\q\"", "line 2 col 8: in rule 'x': unknown escape '\\q'"},
        {"root ::= \"\\x4\"", "line 1 col 11: in rule 'root': escape '\\x' wants 2 hex digits"},
        {"root ::= \"\\uD800\"", "in rule 'root': escape names the surrogate U+D800"},
        {"root ::= \"\\U00110000\"", "escape names U+110000, past U+10FFFF"},
        {"root ::= \"a\"{3,1}", "line 1 col 13: in rule 'root': repetition {3,1} has its maximum below its minimum"},
        {"root ::= \"a\"{99999}", "line 1 col 14: in rule 'root': repetition count above the limit of 10000"},
        {"root ::= \"a\"{2", "expecting '}' to close the repetition"},
        {"root ::= *", "line 1 col 10: in rule 'root': '*' has no item before it to repeat"},
        {"root ::= <[x]>", "line 1 col 10: in rule 'root': expecting a token id '<[N]>'"},
        {"root ::= \"a\" <[12]", "line 1 col 14: in rule 'root': expecting ']>' to close the token id"},
        {"root ::= <[999999999]>", "token id past 268435455"},
        {"root ::= \"a\"+?", "'?' has no item before it to repeat"},
        {"root ::= \"a\" )", "line 1 col 14: in rule 'root': unexpected ')' without a '(' before it"},
        {"root ::= \"a\" ::= \"b\"", "line 1 col 14: in rule 'root': unexpected ':' (expecting the end of the line)"},
        {"root ::= \"a\"\nroot ::= \"b\"", "grammar: line 2 col 1: rule 'root' is defined twice (first at line 1 col 1)"},
        {"root = \"a\"", "line 1 col 6: in rule 'root': expecting '::=' after the rule name"},
        {"::= \"a\"", "line 1 col 1: expecting a rule name, found ':'"},
        {"root ::= x\nx ::= \"a\" x\n", "line 2 col 1: rule 'x' can never finish"},
        {"root ::= (\"a\" root)\n", "line 1 col 1: rule 'root' can never finish"},
        {"root ::= \"b\" x\nx ::= \"c\" | ( \"a\" ( \"q\" x2 ) )\nx2 ::= (\"d\" x2)", "rule 'x2' can never finish"},
        {"root ::= \"\xff\"", "line 1 col 11: in rule 'root': invalid UTF-8 in the grammar text"},
        {"root ::= \"\xed\xa0\x80\"", "invalid UTF-8 in the grammar text"},
        {NULL, NULL}};
    for (int i = 0; t[i].text; i++) {
        grammar *g = NULL;
        moe8_error e;
        moe8_status st = moe8_grammar_build(t[i].text, strlen(t[i].text), &g, &e);
        CHECKF(st == MOE8_ERR_INVALID_ARG, "'%s' compiled (status %d)", t[i].text, st);
        if (st == MOE8_OK) moe8_grammar_destroy(g);
        else CHECKF(strstr(e.message, t[i].msg) != NULL, "'%s':\n  got  '%s'\n  want '%s'", t[i].text, e.message, t[i].msg);
    }
    /* limits */
    {
        char *big = malloc(GRAMMAR_MAX_TEXT + 16);
        grammar *g = NULL;
        moe8_error e;
        memset(big, ' ', GRAMMAR_MAX_TEXT + 16);
        memcpy(big, "root ::= \"a\"", 12);
        CHECK(moe8_grammar_build(big, GRAMMAR_MAX_TEXT + 16, &g, &e) == MOE8_ERR_INVALID_ARG);
        CHECKF(strstr(e.message, "exceeds the limit") != NULL, "%s", e.message);
        free(big);
    }
    {
        static const char *t2 = "root ::= (\"abcdefghijklmnopqrstuvwxyz\"{10000}){100}\n";
        grammar *g = NULL;
        moe8_error e;
        CHECK(moe8_grammar_build(t2, strlen(t2), &g, &e) == MOE8_ERR_INVALID_ARG);
        CHECKF(strstr(e.message, "grammar too large: more than 1000000 elements") != NULL, "%s", e.message);
    }
    {
        char t3[512];
        int k = snprintf(t3, sizeof t3, "root ::= ");
        for (int i = 0; i < 70; i++) t3[k++] = '(';
        k += snprintf(t3 + k, sizeof t3 - (size_t)k, "\"a\"");
        for (int i = 0; i < 70; i++) t3[k++] = ')';
        t3[k] = 0;
        grammar *g = NULL;
        moe8_error e;
        CHECK(moe8_grammar_build(t3, strlen(t3), &g, &e) == MOE8_ERR_INVALID_ARG);
        CHECKF(strstr(e.message, "groups nested deeper than 64") != NULL, "%s", e.message);
    }
}

static void test_syntax(void) {
    static const struct { const char *text; case_t cases[8]; } t[] = {
        {"# comment\nroot ::= \"a\" # trailing comment\n  # another\n",
         {{"a", -1}, {"b", 0}, {"aa", 1}, {NULL, 0}}},
        {"root ::= \"a\" \"b\"\r\n", {{"ab", -1}, {"a", -2}, {NULL, 0}}},
        {"root ::= \"a\" |\n  \"b\"\n", {{"a", -1}, {"b", -1}, {"c", 0}, {NULL, 0}}},
        {"root ::= (\n  \"a\"\n  | \"b\" # inside a group\n)\n", {{"a", -1}, {"b", -1}, {NULL, 0}}},
        {"root ::= \"x\"{2} \"y\"{2,} \"z\"{1,3} \"w\"{0}", {{"xxyy", -2}, {"xxyyz", -1}, {"xxyyyyzzz", -1},
                                                              {"xxyzz", 3}, {"xxyyzzzz", 7}, {"xxyyw", 4}, {NULL, 0}}},
        {"root ::= \"a\"? \"b\"+ \"c\"*", {{"b", -1}, {"abbccc", -1}, {"ac", 1}, {"", -2}, {NULL, 0}}},
        {"root ::= my-rule_2 | \"\"\nmy-rule_2 ::= [-a] [\\]\\[\\\\] [a-cx]\nunused ::= \"q\"",
         {{"", -1}, {"-]a", -1}, {"a\\x", -1}, {"a[b", -1}, {"a]d", 2}, {"b", 0}, {NULL, 0}}},
        {"root ::= . . [^a-z\\n] \"\\x41\\u00e9\\U0001F600\\t\\r\\n\\\"\"",
         {{"ab\xc3\xa9""A\xc3\xa9\xf0\x9f\x98\x80\t\r\n\"", -1}, {"abc", 2}, {"\n\nZ", -2}, {NULL, 0}}},
        {"root ::= \"a\" | ", {{"", -1}, {"a", -1}, {"b", 0}, {NULL, 0}}},
        {"root ::= ( \"a\" ( \"b\" | \"c\" )* ){2,3}", {{"aa", -1}, {"abcab", -1}, {"aaaa", 3}, {NULL, 0}}},
        {NULL, {{NULL, 0}}}};
    for (int i = 0; t[i].text; i++) {
        grammar *g = compile_or_die(t[i].text);
        if (!g) continue;
        run_cases(t[i].text, g, t[i].cases);
        moe8_grammar_destroy(g);
    }
}

/* ======================================================================== */
/* Accept/reject tables                                                       */
/* ======================================================================== */

static const char *ARITH =
    "root ::= ws expr ws\n"
    "expr ::= term ( ws [-+] ws term )*\n"
    "term ::= factor ( ws [*/] ws factor )*\n"
    "factor ::= num | \"(\" ws expr ws \")\" | \"-\" factor\n"
    "num ::= [0-9]+ ( \".\" [0-9]+ )?\n"
    "ws ::= [ \\t]{0,4}\n";

static void test_tables(void) {
    static const case_t json_cases[] = {
        {"{}", -1},
        {"{\"a\": 1}", -1},
        {"{\"a\":[1,-2.5e+3,\"x\\u00e9\\n\",{},[],true,false,null]}", -1},
        {"{ \"k\" :\n  {\"nested\": {\"deep\": [0, 0.125, -0]}}}\n ", -1},
        {"{\"\xe4\xb8\xad\xe6\x96\x87\": \"\xf0\x9f\x98\x80\"}", -1},
        {"{\"a\": \"\\uD83D\"}", 10},  /* a lone surrogate escape */
        {"{\"a\": 01}", 7},
        {"{\"a\": 1,}", 8},
        {"{\"a\" 1}", 5},
        {"[1]", 0},
        {"{\"a\": \"x\ty\"}", 8},      /* a raw tab inside a string */
        {"{\"a\": tru}", 9},
        {"{\"a\": 1", -2},
        {"{\"a\": 1.}", 8},
        {"{\"a\": 12345678901234567}", 22}, /* 17 integer digits: past llama.cpp's bound */
        {"{\"a\": \"\xc3\x28\"}", 8},  /* invalid UTF-8 */
        {"{}    \n\n\n", 3},
        {"{} \n", 3},
        {"{}\n\n\t  \t", -1},
        {NULL, 0}};
    static const case_t arith_cases[] = {
        {"1+2*3", -1},
        {" (1 + 2.5) * -3 / 4 ", -1},
        {"((((7))))", -1},
        {"1+", -2},
        {"1++2", 2},
        {"(1", -2},
        {"1)", 1},
        {"1 .5", 2},
        {"", -2},
        {NULL, 0}};
    static const char *UNI =
        "root ::= \"\\\"\" ( [^\"\\\\] | \"\\\\\" [\"\\\\nt] )* \"\\\"\" | \"\\u00e9\" [\\u03b1-\\u03c9]+ | "
        "[\\u4e00-\\u9fff]{2,3} | \"\\U0001F600\" | [^\\x00-\\x7F] | \"z\" [^a]\n";
    static const case_t uni_cases[] = {
        {"\"a\\\"b\\\\c\\n\"", -1},
        {"\"\xe4\xb8\xad\"", -1},
        {"\xc3\xa9\xce\xb1\xce\xb2", -1},
        {"\xc3\xa9""a", 2},
        {"\xe4\xb8\xad\xe6\x96\x87", -1},
        {"\xe4\xb8\xad", -1},
        {"\xe4\xb8", -2},
        {"\xe4\xb8\xad\xe6\x96\x87\xe5\xad\x97\xe5\xad\x97", 9},
        {"\xf0\x9f\x98\x80", -1},
        {"\xf0\x9f\x98", -2},
        {"\xc3\xbc", -1},
        {"\xff", 0},
        {"\xc0\x80", 0},          /* overlong */
        {"z\xed\xa0\x80", 2},     /* an encoded surrogate */
        {"z\xe0\x80\x80", 2},     /* overlong 3-byte */
        {"z\xf4\x90\x80\x80", 2}, /* past U+10FFFF */
        {"\"\\q\"", 2},
        {NULL, 0}};
    grammar *g;
    if ((g = compile_or_die(moe8_grammar_json_object()))) {
        run_cases("json_object", g, json_cases);
        moe8_grammar_destroy(g);
    }
    if ((g = compile_or_die(ARITH))) {
        run_cases("arith", g, arith_cases);
        moe8_grammar_destroy(g);
    }
    if ((g = compile_or_die(UNI))) {
        run_cases("unicode", g, uni_cases);
        moe8_grammar_destroy(g);
    }
}

/* ======================================================================== */
/* A strict JSON parser and a schema validator (independent of src/)           */
/* ======================================================================== */

enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };

typedef struct jv {
    int t, b;
    char *s;        /* J_STR: decoded bytes; J_NUM: the number's text */
    size_t n;       /* J_STR: bytes; code points in ncp */
    size_t ncp;
    double d;
    int is_int;
    int nk;
    struct jv **kids;
    char **keys;
} jv;

static void jv_free(jv *v) {
    if (!v) return;
    for (int i = 0; i < v->nk; i++) {
        jv_free(v->kids[i]);
        if (v->keys) free(v->keys[i]);
    }
    free(v->kids), free(v->keys), free(v->s);
    free(v);
}

typedef struct { const char *p, *e; } jp;

static void jws(jp *q) {
    while (q->p < q->e && (*q->p == ' ' || *q->p == '\t' || *q->p == '\n' || *q->p == '\r')) q->p++;
}

static void put_utf8(char *o, size_t *n, uint32_t cp) {
    if (cp < 0x80) o[(*n)++] = (char)cp;
    else if (cp < 0x800) o[(*n)++] = (char)(0xC0 | cp >> 6), o[(*n)++] = (char)(0x80 | (cp & 63));
    else if (cp < 0x10000)
        o[(*n)++] = (char)(0xE0 | cp >> 12), o[(*n)++] = (char)(0x80 | (cp >> 6 & 63)), o[(*n)++] = (char)(0x80 | (cp & 63));
    else
        o[(*n)++] = (char)(0xF0 | cp >> 18), o[(*n)++] = (char)(0x80 | (cp >> 12 & 63)),
        o[(*n)++] = (char)(0x80 | (cp >> 6 & 63)), o[(*n)++] = (char)(0x80 | (cp & 63));
}

static int hex4(const char *p, uint32_t *v) {
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        int h = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (h < 0) return -1;
        *v = *v << 4 | (uint32_t)h;
    }
    return 0;
}

static jv *jparse(jp *q, int depth);

static char *jstring(jp *q, size_t *len, size_t *ncp) {
    char *o = malloc((size_t)(q->e - q->p) * 2 + 8);
    size_t n = 0, cps = 0;
    if (q->p >= q->e || *q->p != '"') goto bad;
    q->p++;
    while (q->p < q->e && *q->p != '"') {
        unsigned char c = (unsigned char)*q->p;
        if (c < 0x20) goto bad;
        if (c == '\\') {
            char x;
            if (q->e - q->p < 2) goto bad;
            x = q->p[1];
            q->p += 2;
            switch (x) {
            case '"': o[n++] = '"'; break;
            case '\\': o[n++] = '\\'; break;
            case '/': o[n++] = '/'; break;
            case 'b': o[n++] = '\b'; break;
            case 'f': o[n++] = '\f'; break;
            case 'n': o[n++] = '\n'; break;
            case 'r': o[n++] = '\r'; break;
            case 't': o[n++] = '\t'; break;
            case 'u': {
                uint32_t v, w;
                if (q->e - q->p < 4 || hex4(q->p, &v)) goto bad;
                q->p += 4;
                if (v >= 0xDC00 && v <= 0xDFFF) goto bad; /* lone low surrogate */
                if (v >= 0xD800 && v <= 0xDBFF) {
                    if (q->e - q->p < 6 || q->p[0] != '\\' || q->p[1] != 'u' || hex4(q->p + 2, &w) ||
                        w < 0xDC00 || w > 0xDFFF)
                        goto bad;
                    q->p += 6;
                    v = 0x10000 + ((v - 0xD800) << 10) + (w - 0xDC00);
                }
                put_utf8(o, &n, v);
                break;
            }
            default: goto bad;
            }
            cps++;
            continue;
        }
        {
            int k = c < 0x80 ? 0 : (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2 : (c & 0xF8) == 0xF0 ? 3 : -1;
            uint32_t cp = k == 0 ? c : k == 1 ? c & 0x1Fu : k == 2 ? c & 0x0Fu : c & 0x07u;
            if (k < 0 || q->e - q->p < k + 1) goto bad;
            for (int j = 1; j <= k; j++) {
                unsigned char d = (unsigned char)q->p[j];
                if ((d & 0xC0) != 0x80) goto bad;
                cp = cp << 6 | (d & 63u);
            }
            if ((k == 1 && cp < 0x80) || (k == 2 && cp < 0x800) || (k == 3 && (cp < 0x10000 || cp > 0x10FFFF)) ||
                (cp >= 0xD800 && cp <= 0xDFFF))
                goto bad;
            memcpy(o + n, q->p, (size_t)k + 1);
            n += (size_t)k + 1, q->p += k + 1, cps++;
        }
    }
    if (q->p >= q->e) goto bad;
    q->p++;
    o[n] = 0;
    *len = n, *ncp = cps;
    return o;
bad:
    free(o);
    return NULL;
}

static jv *jparse(jp *q, int depth) {
    jv *v = calloc(1, sizeof *v);
    jws(q);
    if (depth > 500 || q->p >= q->e) goto bad;
    if (*q->p == '{' || *q->p == '[') {
        int obj = *q->p == '{';
        v->t = obj ? J_OBJ : J_ARR;
        q->p++;
        jws(q);
        if (q->p < q->e && *q->p == (obj ? '}' : ']')) {
            q->p++;
            return v;
        }
        for (;;) {
            char *key = NULL;
            jv *kid;
            size_t kl, kc;
            jws(q);
            if (obj) {
                if (!(key = jstring(q, &kl, &kc))) goto bad;
                jws(q);
                if (q->p >= q->e || *q->p != ':') {
                    free(key);
                    goto bad;
                }
                q->p++;
            }
            if (!(kid = jparse(q, depth + 1))) {
                free(key);
                goto bad;
            }
            v->kids = realloc(v->kids, (size_t)(v->nk + 1) * sizeof *v->kids);
            if (obj) v->keys = realloc(v->keys, (size_t)(v->nk + 1) * sizeof *v->keys), v->keys[v->nk] = key;
            v->kids[v->nk++] = kid;
            jws(q);
            if (q->p < q->e && *q->p == ',') {
                q->p++;
                continue;
            }
            if (q->p < q->e && *q->p == (obj ? '}' : ']')) {
                q->p++;
                return v;
            }
            goto bad;
        }
    }
    if (*q->p == '"') {
        v->t = J_STR;
        if (!(v->s = jstring(q, &v->n, &v->ncp))) goto bad;
        return v;
    }
    if (q->e - q->p >= 4 && !memcmp(q->p, "true", 4)) return v->t = J_BOOL, v->b = 1, q->p += 4, v;
    if (q->e - q->p >= 5 && !memcmp(q->p, "false", 5)) return v->t = J_BOOL, q->p += 5, v;
    if (q->e - q->p >= 4 && !memcmp(q->p, "null", 4)) return v->t = J_NULL, q->p += 4, v;
    {
        const char *s = q->p;
        v->t = J_NUM, v->is_int = 1;
        if (q->p < q->e && *q->p == '-') q->p++;
        if (q->p < q->e && *q->p == '0') q->p++;
        else if (q->p < q->e && *q->p >= '1' && *q->p <= '9')
            while (q->p < q->e && *q->p >= '0' && *q->p <= '9') q->p++;
        else goto bad;
        if (q->p < q->e && *q->p == '.') {
            q->p++, v->is_int = 0;
            if (q->p >= q->e || *q->p < '0' || *q->p > '9') goto bad;
            while (q->p < q->e && *q->p >= '0' && *q->p <= '9') q->p++;
        }
        if (q->p < q->e && (*q->p == 'e' || *q->p == 'E')) {
            q->p++, v->is_int = 0;
            if (q->p < q->e && (*q->p == '+' || *q->p == '-')) q->p++;
            if (q->p >= q->e || *q->p < '0' || *q->p > '9') goto bad;
            while (q->p < q->e && *q->p >= '0' && *q->p <= '9') q->p++;
        }
        v->s = malloc((size_t)(q->p - s) + 1);
        memcpy(v->s, s, (size_t)(q->p - s));
        v->s[q->p - s] = 0;
        v->d = strtod(v->s, NULL);
        if (!v->is_int && v->d == floor(v->d) && fabs(v->d) < 1e15) v->is_int = 2; /* 1.0: an integer value */
        return v;
    }
bad:
    jv_free(v);
    return NULL;
}

/* Strict whole-text parse: NULL unless text[0..n) is exactly one JSON value. */
static jv *json_strict(const char *text, size_t n) {
    jp q = {text, text + n};
    jv *v = jparse(&q, 0);
    if (!v) return NULL;
    jws(&q);
    if (q.p != q.e) {
        jv_free(v);
        return NULL;
    }
    return v;
}

static int jv_equal_cjson(const jv *v, const cJSON *c) {
    if (cJSON_IsNull(c)) return v->t == J_NULL;
    if (cJSON_IsBool(c)) return v->t == J_BOOL && v->b == cJSON_IsTrue(c);
    if (cJSON_IsNumber(c)) return v->t == J_NUM && v->d == c->valuedouble;
    if (cJSON_IsString(c)) return v->t == J_STR && strlen(c->valuestring) == v->n && !memcmp(v->s, c->valuestring, v->n);
    if (cJSON_IsArray(c)) {
        int i = 0;
        if (v->t != J_ARR || v->nk != cJSON_GetArraySize(c)) return 0;
        for (const cJSON *k = c->child; k; k = k->next, i++)
            if (!jv_equal_cjson(v->kids[i], k)) return 0;
        return 1;
    }
    if (cJSON_IsObject(c)) {
        if (v->t != J_OBJ || v->nk != cJSON_GetArraySize(c)) return 0;
        for (int i = 0; i < v->nk; i++) {
            const cJSON *k = cJSON_GetObjectItemCaseSensitive(c, v->keys[i]);
            if (!k || !jv_equal_cjson(v->kids[i], k)) return 0;
        }
        return 1;
    }
    return 0;
}

static const cJSON *resolve(const cJSON *root, const char *ref) {
    const cJSON *n = root;
    char seg[256];
    const char *p = ref + 1;
    while (*p == '/') {
        size_t k = 0;
        p++;
        while (*p && *p != '/' && k < 255) {
            if (p[0] == '~' && p[1] == '1') seg[k++] = '/', p += 2;
            else if (p[0] == '~' && p[1] == '0') seg[k++] = '~', p += 2;
            else seg[k++] = *p++;
        }
        seg[k] = 0;
        n = cJSON_IsArray(n) ? cJSON_GetArrayItem(n, atoi(seg)) : cJSON_GetObjectItemCaseSensitive(n, seg);
        if (!n) return NULL;
    }
    return n;
}

static int type_ok(const jv *v, const char *t) {
    if (!strcmp(t, "string")) return v->t == J_STR;
    if (!strcmp(t, "number")) return v->t == J_NUM;
    if (!strcmp(t, "integer")) return v->t == J_NUM && v->is_int;
    if (!strcmp(t, "boolean")) return v->t == J_BOOL;
    if (!strcmp(t, "null")) return v->t == J_NULL;
    if (!strcmp(t, "object")) return v->t == J_OBJ;
    if (!strcmp(t, "array")) return v->t == J_ARR;
    return 0;
}

static char g_why[256]; /* why validation failed */

#define VFAIL(...) return snprintf(g_why, sizeof g_why, __VA_ARGS__), 0

/* Validate v against schema s (JSON Schema semantics for the supported
 * keywords, plus moe8's documented choice: with properties and no
 * additionalProperties, no other keys). */
static int validate(const jv *v, const cJSON *s, const cJSON *root) {
    const cJSON *k;
    if (cJSON_IsTrue(s)) return 1;
    if (cJSON_IsFalse(s)) VFAIL("false schema");
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "$ref"))) {
        const cJSON *t = resolve(root, k->valuestring);
        if (!t) VFAIL("bad ref");
        return validate(v, t, root);
    }
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "type"))) {
        int ok = 0;
        if (cJSON_IsString(k)) ok = type_ok(v, k->valuestring);
        else
            for (const cJSON *e = k->child; e; e = e->next) ok |= type_ok(v, e->valuestring);
        if (!ok) VFAIL("type");
    }
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "enum"))) {
        int ok = 0;
        for (const cJSON *e = k->child; e; e = e->next) ok |= jv_equal_cjson(v, e);
        if (!ok) VFAIL("enum");
    }
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "const")) && !jv_equal_cjson(v, k)) VFAIL("const");
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "anyOf"))) {
        int ok = 0;
        for (const cJSON *e = k->child; e; e = e->next) ok |= validate(v, e, root);
        if (!ok) VFAIL("anyOf");
    }
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "oneOf"))) {
        int n = 0;
        for (const cJSON *e = k->child; e; e = e->next) n += validate(v, e, root);
        if (n != 1) VFAIL("oneOf matched %d", n);
    }
    if (v->t == J_STR) {
        if ((k = cJSON_GetObjectItemCaseSensitive(s, "minLength")) && (double)v->ncp < k->valuedouble) VFAIL("minLength");
        if ((k = cJSON_GetObjectItemCaseSensitive(s, "maxLength")) && (double)v->ncp > k->valuedouble) VFAIL("maxLength");
    }
    if (v->t == J_NUM) {
        long double x = v->is_int == 1 ? (long double)strtoll(v->s, NULL, 10) : (long double)v->d;
        if ((k = cJSON_GetObjectItemCaseSensitive(s, "minimum")) && x < (long double)k->valuedouble) VFAIL("minimum");
        if ((k = cJSON_GetObjectItemCaseSensitive(s, "maximum")) && x > (long double)k->valuedouble) VFAIL("maximum");
        if ((k = cJSON_GetObjectItemCaseSensitive(s, "exclusiveMinimum")) && x <= (long double)k->valuedouble) VFAIL("exclusiveMinimum");
        if ((k = cJSON_GetObjectItemCaseSensitive(s, "exclusiveMaximum")) && x >= (long double)k->valuedouble) VFAIL("exclusiveMaximum");
    }
    if (v->t == J_OBJ) {
        const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
        const cJSON *add = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
        for (int i = 0; i < v->nk; i++) {
            const cJSON *ps = props ? cJSON_GetObjectItemCaseSensitive(props, v->keys[i]) : NULL;
            for (int j = 0; j < i; j++)
                if (ps && !strcmp(v->keys[i], v->keys[j])) VFAIL("declared key '%s' twice", v->keys[i]);
            if (ps) {
                if (!validate(v->kids[i], ps, root)) return 0;
            } else if (add && cJSON_IsFalse(add)) {
                VFAIL("additional key '%s'", v->keys[i]);
            } else if (add && cJSON_IsObject(add)) {
                if (!validate(v->kids[i], add, root)) return 0;
            } else if (!add && props) {
                VFAIL("key '%s' generated with additionalProperties absent", v->keys[i]);
            }
        }
        for (const cJSON *r = (k = cJSON_GetObjectItemCaseSensitive(s, "required")) ? k->child : NULL; r; r = r->next) {
            int found = 0;
            for (int i = 0; i < v->nk; i++) found |= !strcmp(v->keys[i], r->valuestring);
            if (!found) VFAIL("required '%s'", r->valuestring);
        }
    }
    if (v->t == J_ARR) {
        const cJSON *pre = cJSON_GetObjectItemCaseSensitive(s, "prefixItems");
        const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
        int np = pre ? cJSON_GetArraySize(pre) : 0;
        for (int i = 0; i < v->nk; i++) {
            if (i < np) {
                if (!validate(v->kids[i], cJSON_GetArrayItem(pre, i), root)) return 0;
            } else if (items && !validate(v->kids[i], items, root)) {
                return 0;
            }
        }
        if ((k = cJSON_GetObjectItemCaseSensitive(s, "minItems")) && v->nk < k->valuedouble) VFAIL("minItems");
        if ((k = cJSON_GetObjectItemCaseSensitive(s, "maxItems")) && v->nk > k->valuedouble) VFAIL("maxItems");
    }
    return 1;
}

/* ======================================================================== */
/* JSON Schema                                                                */
/* ======================================================================== */

static grammar *schema_grammar(const char *schema) {
    char *gbnf = NULL;
    moe8_error e;
    grammar *g;
    if (moe8_json_schema_to_gbnf(schema, strlen(schema), &gbnf, &e) != MOE8_OK) {
        CHECKF(0, "schema refused: %s\n  %s", e.message, schema);
        return NULL;
    }
    g = compile_or_die(gbnf);
    free(gbnf);
    return g;
}

/* Accepted in full and valid, or refused (somewhere) and invalid. */
static void schema_examples(const char *schema, const char *const *valid, const char *const *invalid) {
    grammar *g = schema_grammar(schema);
    cJSON *sj = cJSON_Parse(schema);
    if (!g) {
        cJSON_Delete(sj);
        return;
    }
    for (int i = 0; valid[i]; i++) {
        jv *v = json_strict(valid[i], strlen(valid[i]));
        CHECKF(v && validate(v, sj, sj), "example should be valid: %s (%s)", valid[i], g_why);
        jv_free(v);
        CHECKF(feed_bytes(g, valid[i], strlen(valid[i])) == -1, "schema %s\n  refuses %s", schema, valid[i]);
        if (qv && i < 2) CHECKF(feed_qwen(g, valid[i], strlen(valid[i])) == -1, "qwen refuses %s", valid[i]);
    }
    for (int i = 0; invalid[i]; i++) {
        jv *v = json_strict(invalid[i], strlen(invalid[i]));
        CHECKF(!v || !validate(v, sj, sj), "example should be invalid: %s", invalid[i]);
        jv_free(v);
        CHECKF(feed_bytes(g, invalid[i], strlen(invalid[i])) != -1, "schema %s\n  accepts %s", schema, invalid[i]);
    }
    cJSON_Delete(sj);
    moe8_grammar_destroy(g);
}

static void test_schemas(void) {
    {
        static const char *s =
            "{\"type\":\"object\",\"properties\":{"
            "\"id\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":999},"
            "\"name\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":8,\"description\":\"ignored\"},"
            "\"kind\":{\"enum\":[\"a\",\"b\",3,null]},"
            "\"v\":{\"const\":\"x\"},"
            "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":2},"
            "\"pt\":{\"anyOf\":[{\"type\":\"null\"},{\"type\":\"array\",\"prefixItems\":[{\"type\":\"number\"},{\"type\":\"boolean\"}]}]},"
            "\"opt\":{\"type\":[\"integer\",\"null\"]}},"
            "\"required\":[\"id\",\"name\"],\"title\":\"t\",\"$schema\":\"https://json-schema.org/draft/2020-12/schema\"}";
        static const char *const valid[] = {
            "{\"id\": 5, \"name\": \"ab\"}",
            "{\"id\":999,\"name\":\"\xc3\xa9\",\"kind\":3,\"v\":\"x\",\"tags\":[\"a\",\"b\"],\"pt\":[1.5,true],\"opt\":null}",
            "{ \"id\" : 1 , \"name\" : \"\\u00e912345\\n\" , \"kind\" : null , \"pt\" : null , \"opt\" : -7 }",
            "{\"id\": 10, \"name\": \"x\", \"tags\": [], \"pt\": [2]}",
            "{\"id\": 10, \"name\": \"x\", \"pt\": []}",
            NULL};
        static const char *const invalid[] = {
            "{\"id\": 0, \"name\": \"ab\"}", "{\"id\": 1000, \"name\": \"ab\"}", "{\"id\": 5}",
            "{\"id\": 5, \"name\": \"\"}", "{\"id\": 5, \"name\": \"123456789\"}",
            "{\"id\": 5, \"name\": \"a\", \"kind\": \"c\"}", "{\"id\": 5, \"name\": \"a\", \"extra\": 1}",
            "{\"id\": 5, \"name\": \"a\", \"tags\": [\"a\", \"b\", \"c\"]}", "{\"id\": 05, \"name\": \"a\"}",
            "{\"id\": 5, \"name\": \"a\", \"v\": \"y\"}", "{\"id\": 5.5, \"name\": \"a\"}",
            "{\"id\": 5, \"name\": \"a\", \"pt\": [true]}", "{\"id\": 5, \"name\": \"a\", \"opt\": \"1\"}", NULL};
        schema_examples(s, valid, invalid);
    }
    {   /* optional before required, additionalProperties as a schema, $defs/$ref recursion */
        static const char *s =
            "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\",\"minimum\":-3,\"maximum\":3},"
            "\"next\":{\"anyOf\":[{\"$ref\":\"#/$defs/node\"},{\"type\":\"null\"}]}},\"required\":[\"next\"]}},"
            "\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"boolean\"},\"list\":{\"$ref\":\"#/$defs/node\"}},"
            "\"required\":[\"list\"],\"additionalProperties\":{\"type\":\"string\",\"maxLength\":2}}";
        static const char *const valid[] = {
            "{\"list\": {\"next\": null}}",
            "{\"a\": true, \"list\": {\"v\": -3, \"next\": {\"next\": {\"v\": 3, \"next\": null}}}, \"lis\": \"ab\", \"z\": \"\"}",
            "{\"list\":{\"next\":null},\"listx\":\"q\",\"\":\"\"}",
            NULL};
        static const char *const invalid[] = {
            "{\"a\": true}", "{\"list\": {\"v\": 4, \"next\": null}}",
            "{\"list\": {\"next\": null}, \"x\": \"abc\"}", "{\"list\": {\"next\": null}, \"list\": \"a\"}",
            "{\"list\": {}}", NULL};
        schema_examples(s, valid, invalid);
    }
    {   /* top-level array with prefixItems and items, strings with min length, a type list */
        static const char *s =
            "{\"type\":\"array\",\"prefixItems\":[{\"type\":\"integer\",\"exclusiveMinimum\":-10,\"exclusiveMaximum\":100},"
            "{\"type\":\"string\",\"minLength\":2}],\"items\":{\"type\":[\"boolean\",\"null\"]},\"minItems\":1,\"maxItems\":4}";
        static const char *const valid[] = {"[-9]", "[99, \"ab\"]", "[0, \"\\t\\\"\", true, null]", NULL};
        static const char *const invalid[] = {"[]", "[-10]", "[100]", "[1, \"a\"]", "[1, \"ab\", 1]",
                                              "[1, \"ab\", true, true, true]", "[1, 2]", NULL};
        schema_examples(s, valid, invalid);
    }
    {   /* enum/const of any JSON value, boolean schemas, any object */
        static const char *s =
            "{\"type\":\"object\",\"properties\":{\"e\":{\"enum\":[{\"k\":[1,\"\\\"\"]},[true],\"\xc3\xa9\",-1.5]},"
            "\"c\":{\"const\":null},\"any\":true,\"obj\":{\"type\":\"object\"}},\"required\":[\"e\"],\"additionalProperties\":false}";
        static const char *const valid[] = {"{\"e\": {\"k\":[1,\"\\\"\"]}}", "{\"e\": -1.5, \"c\": null, \"any\": [1, {\"x\": \"y\"}]}",
                                            "{\"e\": \"\xc3\xa9\", \"obj\": {\"q\": 1, \"r\": []}}", NULL};
        static const char *const invalid[] = {"{\"e\": 1}", "{\"e\": [true], \"c\": 0}", "{\"e\": [true], \"z\": 0}", NULL};
        schema_examples(s, valid, invalid);
    }
    /* integer ranges, exhaustively near the bounds and by samples */
    {
        static const long long r[][2] = {{-12, 345}, {0, 0}, {-1000, -7}, {7, 7}, {99, 1001}, {-5, 9999999999999999LL},
                                         {123456, 987654321}, {-9999999999999999LL, 20}, {10, 99}, {-99, -10}, {1, 1000000}};
        test_rng rng = {0x1234567ULL};
        for (size_t i = 0; i < sizeof r / sizeof r[0]; i++) {
            char schema[256], num[64];
            grammar *g;
            int bad = 0;
            int unbounded_hi = r[i][1] == 9999999999999999LL, unbounded_lo = r[i][0] == -9999999999999999LL;
            snprintf(schema, sizeof schema, "{\"type\":\"integer\"%s%lld%s%lld}",
                     unbounded_lo ? ",\"maximum\":" : ",\"minimum\":", unbounded_lo ? r[i][1] : r[i][0],
                     unbounded_lo || unbounded_hi ? ",\"description\":" : ",\"maximum\":",
                     unbounded_lo || unbounded_hi ? 0LL : r[i][1]);
            if (unbounded_lo || unbounded_hi) { /* description must be a string: rewrite */
                snprintf(schema, sizeof schema, "{\"type\":\"integer\",\"%s\":%lld}", unbounded_lo ? "maximum" : "minimum",
                         unbounded_lo ? r[i][1] : r[i][0]);
            }
            if (!(g = schema_grammar(schema))) continue;
            for (int k = 0; k < 4000 && bad < 3; k++) {
                long long v;
                grammar_state *st;
                int ok;
                if (k < 1000) v = (k % 2 ? r[i][0] : r[i][1]) + (k / 2 % 2 ? 1 : -1) * (k / 4);
                else if (k < 3000) v = r[i][0] + (long long)(test_rng_u64(&rng) % (unsigned long long)(r[i][1] - r[i][0] + 1));
                else v = (long long)(test_rng_u64(&rng) % 20000000000ULL) - 10000000000LL;
                if (v > 9999999999999999LL || v < -9999999999999999LL) continue;
                snprintf(num, sizeof num, "%lld", v);
                moe8_grammar_state_new(g, &st, NULL);
                ok = moe8_grammar_accept_bytes(st, num, strlen(num), NULL) == MOE8_OK && moe8_grammar_can_end(st);
                moe8_grammar_state_free(st);
                if (ok != (v >= r[i][0] && v <= r[i][1])) {
                    CHECKF(0, "range [%lld, %lld]: %lld %s", r[i][0], r[i][1], v, ok ? "accepted" : "refused");
                    bad++;
                }
            }
            /* no leading zeros, no -0, no sign on positives */
            static const char *forms[] = {"007", "-0", "+5", "00", "1.0", "1e2", " 5"};
            for (size_t f = 0; f < sizeof forms / sizeof forms[0]; f++) {
                grammar_state *st;
                int ok;
                moe8_grammar_state_new(g, &st, NULL);
                ok = moe8_grammar_accept_bytes(st, forms[f], strlen(forms[f]), NULL) == MOE8_OK && moe8_grammar_can_end(st);
                moe8_grammar_state_free(st);
                CHECKF(!ok, "range [%lld, %lld] accepts '%s'", r[i][0], r[i][1], forms[f]);
            }
            CHECK(bad == 0);
            moe8_grammar_destroy(g);
        }
    }
}

static void test_schema_errors(void) {
    static const struct { const char *schema, *msg; } t[] = {
        {"{\"type\":\"string\",\"pattern\":\"x\"}", "json_schema: 'pattern' at the root is not supported"},
        {"{\"properties\":{\"zip\":{\"type\":\"string\",\"format\":\"date\"}}}", "json_schema: 'format' at /properties/zip is not supported"},
        {"{\"properties\":{\"a/b~\":{\"type\":\"string\",\"pattern\":\"x\"}}}", "'pattern' at /properties/a~1b~0 is not supported"},
        {"{\"type\":\"number\",\"minimum\":0}", "'minimum' at the root is only supported with \"type\": \"integer\""},
        {"{\"type\":[\"integer\",\"number\"],\"maximum\":3}", "'maximum' at the root is only supported with \"type\": \"integer\""},
        {"{\"minimum\":0}", "'minimum' at the root needs \"type\": \"integer\""},
        {"{\"type\":\"integer\",\"multipleOf\":2}", "'multipleOf' at the root is not supported"},
        {"{\"allOf\":[{\"type\":\"string\"}]}", "'allOf' at the root is not supported"},
        {"{\"not\":{}}", "'not' at the root is not supported"},
        {"{\"if\":{},\"then\":{}}", "'if' at the root is not supported"},
        {"{\"type\":\"object\",\"patternProperties\":{}}", "'patternProperties' at the root is not supported"},
        {"{\"type\":\"array\",\"items\":{\"type\":\"integer\",\"exclusiveMinimum\":true}}", "'exclusiveMinimum' at /items is a boolean"},
        {"{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"array\",\"uniqueItems\":true}]}", "'uniqueItems' at /anyOf/1 is not supported"},
        {"{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"contains\":{}}]}", "'contains' at /prefixItems/1 is not supported"},
        {"{\"type\":\"object\",\"additionalProperties\":{\"minProperties\":1}}", "'minProperties' at /additionalProperties is not supported"},
        {"{\"$ref\":\"http://example.com/s.json\"}", "$ref 'http://example.com/s.json' at the root is not supported"},
        {"{\"$ref\":\"#/$defs/missing\"}", "$ref '#/$defs/missing' at the root does not resolve"},
        {"{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/a\"}},\"$ref\":\"#/$defs/a\"}", "refers back to itself with nothing in between"},
        {"{\"$defs\":{\"a\":{\"type\":\"string\",\"pattern\":\"q\"}},\"$ref\":\"#/$defs/a\"}", "'pattern' at /$defs/a is not supported"},
        {"{\"$ref\":\"#/$defs/a\",\"type\":\"string\",\"$defs\":{\"a\":{}}}", "'type' beside '$ref' at the root is not supported"},
        {"{\"type\":\"objekt\"}", "type 'objekt' at the root is not supported"},
        {"{\"type\":\"object\",\"properties\":{},\"required\":[\"x\"]}", "required property 'x' at the root is not in 'properties'"},
        {"false", "the schema at the root is false"},
        {"{\"properties\":{\"a\":false}}", "the schema at /properties/a is false"},
        {"{\"type\":\"string\",\"minLength\":-1}", "'minLength' at the root must be a non-negative integer"},
        {"{\"type\":\"string\",\"maxLength\":100000}", "'maxLength' 100000 at the root is above the limit of 10000"},
        {"{\"type\":\"string\",\"minLength\":3,\"maxLength\":2}", "maxLength 2 < minLength 3 at the root"},
        {"{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", "the integer bounds at the root leave no value"},
        {"{\"enum\":[]}", "'enum' at the root must be a non-empty array"},
        {"{\"type\":\"string\",\"enum\":[1,2]}", "no value of 'enum' at the root has the schema's type"},
        {"{\"enum\":[1],\"minimum\":0}", "'minimum' beside 'enum' at the root is not supported"},
        {"{\"anyOf\":[{}],\"type\":\"string\"}", "'type' beside 'anyOf' at the root is not supported"},
        {"{\"type\":\"array\",\"items\":false,\"minItems\":1}", "minItems 1 at the root needs more items than 'prefixItems' allows"},
        {"{\"type\":\"object\"", "json_schema"},
        {"{\"a\":1,\"a\":2}", "json_schema"},
        /* found by fuzz_grammar: a const key that is not UTF-8 went into a literal */
        {"{\"anyOf\":[{\"const\":{\"kr\xff\xff\":[1]}}]}", "json_schema: not valid UTF-8 at byte 23"},
        {"{\"enum\":[\"\xc3\"]}", "json_schema: not valid UTF-8 at byte 10"},
        {NULL, NULL}};
    for (int i = 0; t[i].schema; i++) {
        char *out = NULL;
        moe8_error e;
        moe8_status st = moe8_json_schema_to_gbnf(t[i].schema, strlen(t[i].schema), &out, &e);
        CHECKF(st == MOE8_ERR_INVALID_ARG && !out, "%s: status %d", t[i].schema, st);
        if (st != MOE8_OK)
            CHECKF(strstr(e.message, t[i].msg) != NULL, "%s:\n  got  '%s'\n  want '%s'", t[i].schema, e.message, t[i].msg);
        free(out);
    }
}

/* ======================================================================== */
/* Random schemas x random walks                                              */
/* ======================================================================== */

static int rnd(test_rng *r, int n) { return (int)(test_rng_u64(r) % (unsigned long long)n); }

static cJSON *gen_schema(test_rng *r, int depth);

static cJSON *gen_scalar(test_rng *r) {
    cJSON *s = cJSON_CreateObject();
    switch (rnd(r, 9)) {
    case 0: cJSON_AddStringToObject(s, "type", "string"); break;
    case 1:
        cJSON_AddStringToObject(s, "type", "string");
        if (rnd(r, 2)) cJSON_AddNumberToObject(s, "minLength", rnd(r, 4));
        cJSON_AddNumberToObject(s, "maxLength", 4 + rnd(r, 8));
        break;
    case 2: {
        long long lo = rnd(r, 2) ? -rnd(r, 2000) : rnd(r, 50), hi = lo + rnd(r, 3) * rnd(r, 100000);
        cJSON_AddStringToObject(s, "type", "integer");
        if (rnd(r, 3)) cJSON_AddNumberToObject(s, rnd(r, 2) ? "minimum" : "exclusiveMinimum", (double)lo);
        if (rnd(r, 3)) cJSON_AddNumberToObject(s, rnd(r, 2) ? "maximum" : "exclusiveMaximum", (double)hi + 2);
        break;
    }
    case 3: cJSON_AddStringToObject(s, "type", rnd(r, 2) ? "number" : "integer"); break;
    case 4: cJSON_AddStringToObject(s, "type", rnd(r, 2) ? "boolean" : "null"); break;
    case 5: {
        cJSON *e = cJSON_AddArrayToObject(s, "enum");
        static const char *words[] = {"red", "green", "blue", "\xc3\xa9t\xc3\xa9", "a\"b", ""};
        int n = 1 + rnd(r, 4);
        for (int i = 0; i < n; i++) {
            int k = rnd(r, 8);
            if (k < 6) cJSON_AddItemToArray(e, cJSON_CreateString(words[k]));
            else if (k == 6) cJSON_AddItemToArray(e, cJSON_CreateNumber(rnd(r, 100) - 50));
            else cJSON_AddItemToArray(e, cJSON_CreateNull());
        }
        break;
    }
    case 6: cJSON_AddItemToObject(s, "const", rnd(r, 2) ? cJSON_CreateString("fixed") : cJSON_CreateNumber(42)); break;
    case 7: {
        cJSON *t = cJSON_AddArrayToObject(s, "type");
        cJSON_AddItemToArray(t, cJSON_CreateString("string"));
        cJSON_AddItemToArray(t, cJSON_CreateString("null"));
        cJSON_AddNumberToObject(s, "maxLength", 6);
        break;
    }
    default: cJSON_AddStringToObject(s, "description", "anything"); break; /* any value */
    }
    return s;
}

static cJSON *gen_schema(test_rng *r, int depth) {
    int k = depth >= 3 ? 0 : rnd(r, 10);
    if (k < 5) return gen_scalar(r);
    if (k < 8) { /* object */
        cJSON *s = cJSON_CreateObject(), *props, *req;
        static const char *names[] = {"id", "name", "value", "items", "x", "xy", "\xc3\xa9", "count"};
        int n = 1 + rnd(r, 5), used = 0;
        cJSON_AddStringToObject(s, "type", "object");
        props = cJSON_AddObjectToObject(s, "properties");
        req = cJSON_CreateArray();
        for (int i = 0; i < n; i++) {
            int w = rnd(r, 8);
            if (used & (1 << w)) continue;
            used |= 1 << w;
            cJSON_AddItemToObject(props, names[w], gen_schema(r, depth + 1));
            if (rnd(r, 2)) cJSON_AddItemToArray(req, cJSON_CreateString(names[w]));
        }
        cJSON_AddItemToObject(s, "required", req);
        switch (rnd(r, 4)) {
        case 0: break;
        case 1: cJSON_AddFalseToObject(s, "additionalProperties"); break;
        case 2: if (depth == 0) cJSON_AddTrueToObject(s, "additionalProperties"); break;
        default: cJSON_AddItemToObject(s, "additionalProperties", gen_scalar(r)); break;
        }
        return s;
    }
    if (k < 9) { /* array */
        cJSON *s = cJSON_CreateObject();
        int lo = rnd(r, 3);
        cJSON_AddStringToObject(s, "type", "array");
        if (rnd(r, 3) == 0) {
            cJSON *p = cJSON_AddArrayToObject(s, "prefixItems");
            cJSON_AddItemToArray(p, gen_scalar(r));
            cJSON_AddItemToArray(p, gen_scalar(r));
            if (rnd(r, 2)) cJSON_AddItemToObject(s, "items", gen_scalar(r));
            else if (lo > 2) lo = 2;
        } else {
            cJSON_AddItemToObject(s, "items", gen_schema(r, depth + 1));
        }
        cJSON_AddNumberToObject(s, "minItems", lo);
        if (rnd(r, 2)) cJSON_AddNumberToObject(s, "maxItems", lo + rnd(r, 4));
        return s;
    }
    { /* anyOf / oneOf with alternatives of distinct types */
        cJSON *s = cJSON_CreateObject(), *a;
        static const char *types[] = {"string", "integer", "boolean", "null", "array"};
        int first = rnd(r, 5), second = (first + 1 + rnd(r, 4)) % 5;
        a = cJSON_AddArrayToObject(s, rnd(r, 2) ? "anyOf" : "oneOf");
        for (int i = 0; i < 2; i++) {
            cJSON *alt = cJSON_CreateObject();
            const char *t = types[i ? second : first];
            cJSON_AddStringToObject(alt, "type", t);
            if (!strcmp(t, "array")) cJSON_AddItemToObject(alt, "items", gen_scalar(r));
            cJSON_AddItemToArray(a, alt);
        }
        return s;
    }
}

/* Append token t's bytes to text. */
static void append_tok(const grammar_vocab *v, int32_t t, char *text, size_t *n, size_t cap) {
    size_t len;
    const char *b = moe8_grammar_vocab_token(v, t, &len);
    if (b && *n + len < cap) memcpy(text + *n, b, len), *n += len;
}

/* One walk: uniformly random allowed tokens for `budget` steps, then the
 * single-byte token that most shortens the shortest completion. Returns the
 * text's length (text NUL-terminated), or -1 when stuck. */
static long random_walk(grammar *g, const grammar_vocab *v, const int32_t *byte_tok, int32_t eos, test_rng *r,
                        int budget, int ref_every, char *text, size_t cap) {
    int32_t nv = moe8_grammar_vocab_n_vocab(v);
    uint32_t *m = malloc(((size_t)nv + 31) / 32 * 4), *ref = malloc(((size_t)nv + 31) / 32 * 4);
    int32_t *cand = malloc((size_t)nv * sizeof *cand);
    grammar_state *st;
    size_t n = 0;
    long res = -1;
    moe8_grammar_state_new(g, &st, NULL);
    for (int step = 0; step < 4000; step++) {
        int nc = 0, ce = moe8_grammar_can_end(st);
        int32_t pick = -1;
        moe8_grammar_mask(st, v, m);
        if (ref_every && step % ref_every == 0) {
            moe8_grammar_mask_reference(st, v, ref);
            CHECKF(!memcmp(m, ref, ((size_t)nv + 31) / 32 * 4), "walk: mask differs from the reference at step %d "
                   "after '%.*s'", step, (int)n, text);
        }
        for (int32_t w = 0; w < (nv + 31) / 32; w++)
            for (uint32_t b = m[w]; b; b &= b - 1) cand[nc++] = w * 32 + __builtin_ctz(b);
        if (nc == 0) {
            CHECKF(0, "walk stuck (empty mask, can_end %d) after '%.*s'", ce, (int)n, text);
            goto out;
        }
        CHECKF(bit(m, eos) == (ce != 0), "eos bit %d vs can_end %d", bit(m, eos), ce);
        if (ce == 2) break;
        if (step < budget) {
            pick = cand[rnd(r, nc)];
        } else if (ce) {
            pick = eos;
        } else { /* the allowed byte token with the fewest bytes left after it */
            size_t best = (size_t)-1;
            for (int b = 0; b < 256; b++) {
                grammar_state *c;
                size_t left;
                if (byte_tok[b] < 0 || !bit(m, byte_tok[b])) continue;
                c = moe8_grammar_state_clone(st);
                if (moe8_grammar_accept(c, v, byte_tok[b], NULL) == MOE8_OK && (left = moe8_grammar_min_remaining(c)) < best)
                    best = left, pick = byte_tok[b];
                moe8_grammar_state_free(c);
            }
            if (pick < 0) pick = cand[0];
        }
        if (pick == eos) break;
        if (moe8_grammar_accept(st, v, pick, NULL) != MOE8_OK) {
            CHECKF(0, "walk: allowed token %d refused", (int)pick);
            goto out;
        }
        append_tok(v, pick, text, &n, cap);
    }
    CHECKF(moe8_grammar_can_end(st), "walk ended where the grammar may not end");
    res = (long)n;
out:
    text[n] = 0;
    moe8_grammar_state_free(st);
    free(m), free(ref), free(cand);
    return res;
}

static void test_random_walks(void) {
    test_rng r = {0x9E3779B97F4A7C15ULL};
    int32_t bytes_tok[256];
    size_t cap = 1 << 16;
    char *text = malloc(cap);
    int n_valid = 0, n_walks = 0;
    double t0 = now_s();
    for (int b = 0; b < 256; b++) bytes_tok[b] = b;
    for (int i = 0; i < (SAN ? 20 : 50); i++) {
        cJSON *s = gen_schema(&r, 0);
        char *js = cJSON_PrintUnformatted(s);
        grammar *g = schema_grammar(js);
        for (int pass = 0; g && pass < (qv ? 2 : 1); pass++) {
            const grammar_vocab *v = pass ? qv : bv;
            long n = random_walk(g, v, pass ? qbyte : bytes_tok, pass ? QWEN_EOS : BYTE_EOS, &r,
                                 pass ? 80 : 150, pass && i % 5 == 0 ? 16 : (pass ? 0 : 7), text, cap);
            n_walks++;
            if (n >= 0) {
                jv *val = json_strict(text, (size_t)n);
                int ok = val && validate(val, s, s);
                CHECKF(val != NULL, "schema %d: not strict JSON: %s\n  schema %s", i, text, js);
                CHECKF(!val || ok, "schema %d: invalid (%s): %s\n  schema %s", i, g_why, text, js);
                n_valid += ok;
                jv_free(val);
            }
        }
        moe8_grammar_destroy(g);
        free(js);
        cJSON_Delete(s);
    }
    /* json_object and arithmetic walks */
    {
        grammar *g = compile_or_die(moe8_grammar_json_object());
        for (int i = 0; g && i < (qv ? 6 : 3); i++) {
            const grammar_vocab *v = qv && i % 2 ? qv : bv;
            long n = random_walk(g, v, v == qv ? qbyte : bytes_tok, v == qv ? QWEN_EOS : BYTE_EOS, &r, 60, 10, text, cap);
            n_walks++;
            if (n >= 0) {
                jv *val = json_strict(text, (size_t)n);
                CHECKF(val && val->t == J_OBJ, "json_object walk: %s", text);
                n_valid += val && val->t == J_OBJ;
                jv_free(val);
            }
        }
        moe8_grammar_destroy(g);
    }
    printf("random walks: %d of %d outputs strict JSON and valid for their schema (%.1f s)\n", n_valid, n_walks,
           now_s() - t0);
    free(text);
}

/* The 12-field schema of `moe8 bench grammar`. */
static const char *SCHEMA12 =
    "{\"type\":\"object\",\"properties\":{"
    "\"id\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":1000000},"
    "\"name\":{\"type\":\"string\"},"
    "\"email\":{\"type\":\"string\",\"maxLength\":64},"
    "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150},"
    "\"active\":{\"type\":\"boolean\"},"
    "\"score\":{\"type\":\"number\"},"
    "\"role\":{\"enum\":[\"admin\",\"user\",\"guest\"]},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":8},"
    "\"address\":{\"type\":\"object\",\"properties\":{\"street\":{\"type\":\"string\"},"
    "\"city\":{\"type\":\"string\"},\"zip\":{\"type\":\"string\",\"minLength\":5,\"maxLength\":10}},"
    "\"required\":[\"street\",\"city\"]},"
    "\"phone\":{\"type\":[\"string\",\"null\"]},"
    "\"created\":{\"type\":\"string\"},"
    "\"notes\":{\"type\":\"string\"}},"
    "\"required\":[\"id\",\"name\",\"email\",\"age\",\"active\",\"role\"]}";

/* Every id of Qwen3's vocabulary, by accepting its bytes on a clone, at the
 * typical states: in a string, inside a UTF-8 character, between fields, in
 * a number, in a bounded string, in an array. */
static void test_brute(void) {
    static const char *prefixes[] = {
        "{\"id\": 12, \"name\": \"Jo", "{\"id\": 12, \"name\": \"J\xe4\xb8", "{\"id\": 12, \"name\": \"John\", ",
        "{\"id\": 12", "{\"id\": 1, \"name\": \"\", \"email\": \"0123456789012345678901234567890123456789012345678901234567",
        "{\"id\": 1, \"name\": \"\", \"email\": \"\", \"age\": 1, \"active\": true, \"role\": \"user\", \"tags\": [\"a\"", NULL};
    grammar *g;
    uint32_t *m;
    double t0 = now_s();
    if (!qv || !(g = schema_grammar(SCHEMA12))) return;
    m = malloc((QWEN_N_VOCAB / 32 + 1) * 4);
    for (int i = 0; prefixes[i]; i++) {
        grammar_state *st;
        moe8_grammar_state_new(g, &st, NULL);
        CHECKF(moe8_grammar_accept_bytes(st, prefixes[i], strlen(prefixes[i]), NULL) == MOE8_OK, "%s", prefixes[i]);
        moe8_grammar_mask(st, qv, m);
        brute_check(st, qv, m, prefixes[i]);
        n_brute++;
        moe8_grammar_state_free(st);
    }
    free(m);
    moe8_grammar_destroy(g);
    printf("brute force: %d states x %d ids (%.1f s)\n", n_brute, QWEN_N_VOCAB, now_s() - t0);
}

/* ======================================================================== */
/* State semantics, threads, vocabularies                                     */
/* ======================================================================== */

static void test_states(void) {
    grammar *g = compile_or_die("root ::= \"ab\" [0-9]* | \"a\" \"c\"\n");
    grammar_state *a, *b;
    uint32_t m[9];
    moe8_error e;
    if (!g) return;
    CHECK(moe8_grammar_state_new(g, &a, NULL) == MOE8_OK);
    CHECK(moe8_grammar_can_end(a) == 0);
    CHECK(moe8_grammar_min_remaining(a) == 2);
    CHECK(moe8_grammar_accept(a, bv, 'a', NULL) == MOE8_OK);
    b = moe8_grammar_state_clone(a);
    CHECK(moe8_grammar_accept(b, bv, 'c', NULL) == MOE8_OK);
    CHECK(moe8_grammar_can_end(b) == 2);
    CHECK(moe8_grammar_min_remaining(b) == 0);
    moe8_grammar_mask(b, bv, m);
    CHECK(popcount_mask(m, 257) == 1 && bit(m, BYTE_EOS));
    /* a refused token leaves the state as it was, with a message */
    CHECK(moe8_grammar_accept(a, bv, 'x', &e) == MOE8_ERR_INVALID_ARG);
    CHECKF(strstr(e.message, "token 120 is not allowed here") != NULL, "%s", e.message);
    CHECK(moe8_grammar_accept(a, bv, BYTE_EOS, &e) == MOE8_ERR_INVALID_ARG);
    CHECKF(strstr(e.message, "end of sequence (token 256) is not allowed here") != NULL, "%s", e.message);
    CHECK(moe8_grammar_accept(a, bv, 999, &e) == MOE8_ERR_INVALID_ARG);
    CHECK(moe8_grammar_accept(a, bv, 'b', NULL) == MOE8_OK); /* the clone did not move a */
    CHECK(moe8_grammar_can_end(a) == 1);
    moe8_grammar_mask(a, bv, m);
    CHECK(popcount_mask(m, 257) == 11 && bit(m, '7') && bit(m, BYTE_EOS));
    CHECK(moe8_grammar_accept(a, bv, BYTE_EOS, NULL) == MOE8_OK);
    CHECK(moe8_grammar_can_end(a) == 2);
    moe8_grammar_state_free(a), moe8_grammar_state_free(b);
    moe8_grammar_destroy(g);
}

typedef struct {
    grammar *g;
    const grammar_vocab *v;
    uint32_t *mask;
} thr_arg;

static void *thr_main(void *p) {
    thr_arg *a = p;
    grammar_state *st;
    moe8_grammar_state_new(a->g, &st, NULL);
    moe8_grammar_accept_bytes(st, "{\"k\": \"v", 8, NULL);
    moe8_grammar_mask(st, a->v, a->mask); /* the first mask of a vocabulary prepares the tables */
    moe8_grammar_state_free(st);
    return NULL;
}

static void test_threads(void) {
    enum { NT = 4 };
    const grammar_vocab *v = qv ? qv : bv;
    size_t words = ((size_t)moe8_grammar_vocab_n_vocab(v) + 31) / 32;
    pthread_t th[NT];
    thr_arg a[NT];
    grammar *g = compile_or_die(moe8_grammar_json_object());
    if (!g) return;
    for (int i = 0; i < NT; i++) {
        a[i].g = g, a[i].v = v, a[i].mask = calloc(words, 4);
        pthread_create(&th[i], NULL, thr_main, &a[i]);
    }
    for (int i = 0; i < NT; i++) pthread_join(th[i], NULL);
    for (int i = 1; i < NT; i++) CHECK(!memcmp(a[0].mask, a[i].mask, words * 4));
    CHECK(popcount_mask(a[0].mask, moe8_grammar_vocab_n_vocab(v)) > 100);
    for (int i = 0; i < NT; i++) free(a[i].mask);
    moe8_grammar_destroy(g);
}

/* Llama-2's SentencePiece vocabulary: "▁" is a space in the token bytes. */
static void test_llama_vocab(void) {
    moe8_tokenizer *lt;
    grammar_vocab *lv;
    grammar *g;
    int32_t eos = 2, byte_tok[256];
    char text[8192];
    test_rng r = {77};
    if (moe8_tokenizer_load(MOE8_SOURCE_DIR "/.deps/llama2-tokenizer", &lt, NULL) != MOE8_OK) {
        printf("llama-2 vocabulary: skipped (no .deps/llama2-tokenizer)\n");
        return;
    }
    CHECK(moe8_grammar_vocab_new(lt, moe8_tokenizer_n_vocab(lt), &eos, 1, &lv, NULL) == MOE8_OK);
    for (int b = 0; b < 256; b++) {
        char spell[8];
        snprintf(spell, sizeof spell, "<0x%02X>", b);
        byte_tok[b] = moe8_tokenizer_token_id(lt, spell);
    }
    {   /* the token spelled "▁{" holds " {" */
        int32_t t = moe8_tokenizer_token_id(lt, "\xe2\x96\x81{");
        size_t n;
        const char *b = t >= 0 ? moe8_grammar_vocab_token(lv, t, &n) : NULL;
        CHECK(b && n == 2 && !memcmp(b, " {", 2));
    }
    g = compile_or_die(moe8_grammar_json_object());
    for (int i = 0; g && i < 3; i++) {
        long n = random_walk(g, lv, byte_tok, eos, &r, 60, 5, text, sizeof text);
        jv *val = n >= 0 ? json_strict(text, (size_t)n) : NULL;
        CHECKF(val && val->t == J_OBJ, "llama walk: %s", text);
        jv_free(val);
    }
    moe8_grammar_destroy(g);
    moe8_grammar_vocab_free(lv);
    moe8_tokenizer_free(lt);
}

static void test_vocab(void) {
    const char *bytes[5] = {"a", "ab", "ab", NULL, "b"};
    size_t lens[5] = {1, 2, 2, 0, 1};
    int32_t eos = 3, bad = 7;
    grammar_vocab *v;
    grammar *g = compile_or_die("root ::= \"ab\"\n");
    grammar_state *st;
    uint32_t m[1];
    moe8_error e;
    CHECK(moe8_grammar_vocab_new_raw(5, bytes, lens, &bad, 1, &v, &e) == MOE8_ERR_INVALID_ARG);
    CHECKF(strstr(e.message, "eos id 7 is outside the vocabulary") != NULL, "%s", e.message);
    CHECK(moe8_grammar_vocab_new_raw(5, bytes, lens, &eos, 1, &v, NULL) == MOE8_OK);
    moe8_grammar_state_new(g, &st, NULL);
    moe8_grammar_mask(st, v, m);
    CHECK(m[0] == (1u << 0 | 1u << 1 | 1u << 2)); /* duplicate bytes: both ids */
    CHECK(moe8_grammar_accept(st, v, 2, NULL) == MOE8_OK);
    moe8_grammar_mask(st, v, m);
    CHECK(m[0] == 1u << 3);
    moe8_grammar_state_free(st);
    moe8_grammar_vocab_free(v);
    moe8_grammar_destroy(g);
    if (qv) {
        size_t n;
        char ref[GRAMMAR_TOKEN_REF_LEN];
        const char *b;
        /* a special token has its reference's bytes (0xFF, then the id in 7-bit groups);
         * ids past the tokenizer's vocabulary have none */
        moe8_grammar_token_ref(151644, ref);
        b = moe8_grammar_vocab_token(qv, 151644, &n);
        CHECK(b && n == 5 && !memcmp(b, "\xff\x80\x89\xa0\xdc", 5) && !memcmp(b, ref, 5));
        CHECK(moe8_grammar_vocab_token(qv, 151900, &n) == NULL);
        /* `<[N]>` takes that token alone, never its text spelled by others; a grammar
         * that names no special token never allows one (151643..151656 are Qwen3's
         * special: true tokens; <tool_call>, <think> and the rest after are text) */
        {
            grammar *gr = compile_or_die("root ::= \"a\" <[151644]> \"b\"\n");
            grammar *any = compile_or_die("root ::= [^\\x00]*\n");
            grammar_state *s1, *s2;
            uint32_t *mk = calloc((size_t)(moe8_grammar_vocab_n_vocab(qv) + 31) / 32, 4);
            int n_allowed = 0, specials = 0;
            moe8_grammar_state_new(gr, &s1, NULL);
            moe8_grammar_state_new(any, &s2, NULL);
            CHECK(moe8_grammar_accept_bytes(s1, "a", 1, NULL) == MOE8_OK);
            moe8_grammar_mask(s1, qv, mk);
            for (int32_t t = 0; t < moe8_grammar_vocab_n_vocab(qv); t++) n_allowed += (mk[t / 32] >> (t % 32)) & 1;
            CHECKF(n_allowed == 1 && (mk[151644 / 32] >> (151644 % 32) & 1), "%d tokens allowed", n_allowed);
            CHECK(moe8_grammar_accept_bytes(s1, "<|im_start|>", 12, NULL) != MOE8_OK);
            CHECK(moe8_grammar_accept(s1, qv, 151644, NULL) == MOE8_OK);
            CHECK(moe8_grammar_accept_bytes(s1, "b", 1, NULL) == MOE8_OK && moe8_grammar_can_end(s1) == 2);
            moe8_grammar_mask(s2, qv, mk);
            for (int32_t t = 151643; t < 151657; t++) specials += t != QWEN_EOS && ((mk[t / 32] >> (t % 32)) & 1);
            CHECKF(specials == 0 && (mk[0] & 1), "%d specials allowed, mask word 0 %x", specials, mk[0]);
            moe8_grammar_state_free(s1), moe8_grammar_state_free(s2);
            moe8_grammar_destroy(gr), moe8_grammar_destroy(any);
            free(mk);
        }
        CHECK(moe8_grammar_vocab_token(qv, QWEN_EOS, &n) == NULL);
        printf("qwen3 trie: %.2f MB\n", (double)moe8_grammar_vocab_bytes(qv) / 1e6);
        CHECK(moe8_grammar_vocab_bytes(qv) < 10u << 20);
    }
}

/* ======================================================================== */
/* grammar_after in the scheduler (moe8_request), on the tiny Qwen3 model    */
/* ======================================================================== */

#define GA_MAXT 320

typedef struct {
    moe8_request rq;
    int32_t tok[GA_MAXT];
    int n;
    moe8_finish finish;
    char msg[160];
} ga_run;

static moe8_model *ga_model;
static int32_t ga_prompt[64];
static size_t ga_n_prompt;

/* r[0..n) in one scheduler (max_batch_tokens `batch`, 0: the context's), to the end. */
static void ga_sched(ga_run *r, int n, int32_t batch) {
    moe8_context_params cp = moe8_context_params_default();
    moe8_sched_params sp = moe8_sched_params_default();
    moe8_context *ctx;
    moe8_sched *s;
    cp.n_ctx = 512;
    cp.n_seq_max = n;
    cp.n_threads = 2;
    sp.tok = qtok;
    sp.max_batch_tokens = batch;
    CHECK(moe8_context_create(ga_model, &cp, &ctx, NULL) == MOE8_OK);
    CHECK(moe8_sched_create(ctx, &sp, &s, NULL) == MOE8_OK);
    for (int i = 0; i < n; i++) {
        int64_t id;
        moe8_error e;
        r[i].n = 0;
        r[i].msg[0] = 0;
        r[i].rq.prompt = ga_prompt;
        r[i].rq.n_prompt = (int32_t)ga_n_prompt;
        r[i].rq.user = &r[i];
        CHECKF(moe8_sched_add(s, &r[i].rq, &id, &e) == MOE8_OK, "add: %s", e.message);
    }
    while (moe8_sched_pending(s) > 0) {
        const moe8_event *ev;
        int32_t ne;
        if (moe8_sched_step(s, &ev, &ne, NULL) != MOE8_OK) break;
        for (int32_t k = 0; k < ne; k++) {
            ga_run *o = ev[k].user;
            if (ev[k].type == MOE8_EVENT_TOKEN && o->n < GA_MAXT) o->tok[o->n++] = ev[k].token;
            if (ev[k].type != MOE8_EVENT_FINISH) continue;
            o->finish = ev[k].finish;
            snprintf(o->msg, sizeof o->msg, "%s", ev[k].message ? ev[k].message : "");
        }
    }
    moe8_sched_free(s);
    moe8_context_free(ctx);
}

static void ga_alone(ga_run *r) { ga_sched(r, 1, 0); }

static moe8_request ga_request(uint64_t seed, int max_tokens, const moe8_grammar *g, const char *after) {
    moe8_request q = moe8_request_default();
    q.sampling.temperature = 1.0f;
    q.sampling.seed = seed;
    q.max_tokens = max_tokens;
    q.grammar = g;
    q.grammar_after = after;
    return q;
}

/* The bytes of tok[from..to) (as the tokenizer gives them), NUL-ended. */
static size_t ga_bytes(const int32_t *tok, int from, int to, char *out, size_t cap) {
    size_t n = 0;
    for (int i = from; i < to; i++) {
        size_t k = 0;
        const char *b = moe8_tokenizer_token_bytes(qtok, tok[i], &k, NULL);
        if (b && n + k < cap) memcpy(out + n, b, k), n += k;
    }
    out[n] = 0;
    return n;
}

static int ga_same(const ga_run *a, const ga_run *b) {
    return a->n == b->n && a->finish == b->finish && !memcmp(a->tok, b->tok, (size_t)a->n * sizeof *a->tok);
}

/* Where in u's output a string split over tokens k-1 and k can wait for the
 * grammar: *tag = the last 1-2 bytes of token k-1 and token k (cut = 0), or
 * token k without its last byte (cut = 1: that byte, an ASCII letter or
 * digit, comes after the tag in the same token), whose first occurrence in
 * the output ends there; no NUL in it. 0 when token k does not fit. */
static int ga_split(const ga_run *u, int k, int cut, char *tag, size_t cap, char *rest) {
    char all[4096], *hit;
    size_t n_prev = ga_bytes(u->tok, 0, k, all, sizeof all), n_all = ga_bytes(u->tok, 0, k + 1, all, sizeof all);
    size_t n_k = n_all - n_prev, lead = n_prev >= 2 ? 2 : n_prev, end = n_all - (size_t)cut, m;
    const unsigned char last = (unsigned char)all[n_all - 1];
    if (n_prev == 0 || n_k < 1u + (size_t)cut || n_all >= sizeof all - 1) return 0;
    if (cut && !((last >= 'a' && last <= 'z') || (last >= 'A' && last <= 'Z') || (last >= '0' && last <= '9'))) return 0;
    m = end - (n_prev - lead);
    if (m >= cap || memchr(all + n_prev - lead, 0, m)) return 0;
    memcpy(tag, all + n_prev - lead, m);
    tag[m] = 0;
    if (!(hit = memmem(all, n_all, tag, m)) || (size_t)(hit - all) + m != end) return 0; /* earlier: no */
    if (rest) rest[0] = (char)last, rest[1] = 0;
    return 1;
}

static void test_grammar_after(void) {
    static const char schema[] =
        "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":8},"
        "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150},\"ok\":{\"type\":\"boolean\"},"
        "\"role\":{\"enum\":[\"admin\",\"user\"]}},\"required\":[\"name\",\"age\",\"ok\",\"role\"],"
        "\"additionalProperties\":false}";
    fx_opts o = fx_default_opts();
    moe8_grammar *gj = NULL, *gr = NULL, *gbad = NULL;
    cJSON *sc = cJSON_Parse(schema);
    ga_run *u = calloc(1, sizeof *u), *c = calloc(8, sizeof *c);
    char tag1[300], tag2[300], rest[2], gbnf[64], text[8192], long_after[MOE8_MAX_GRAMMAR_AFTER + 2];
    int k1 = -1, k2 = -1, n_same = 0;
    uint64_t seed = 0;
    if (!qtok) {
        printf("grammar_after: skipped (no Qwen3 tokenizer)\n");
        goto out;
    }
    o.quant = 1, o.vocab = QWEN_N_VOCAB, o.hidden = 32, o.dense_layer = 0;
    ga_model = test_load_model(fx_test_model("grammar_after", &o, 0));
    CHECK(moe8_tokenize(qtok, "Tell me about a person:", 23, ga_prompt, 64, &ga_n_prompt, NULL) == MOE8_OK);
    CHECK(moe8_grammar_from_json_schema(schema, strlen(schema), &gj, NULL) == MOE8_OK);
    /* the unconstrained reference, and two places in it for the string (whole at a token's
     * end, and ending inside a token) */
    for (seed = 1; seed < 40 && (k1 < 0 || k2 < 0); seed++) {
        u->rq = ga_request(seed, 40, NULL, NULL);
        ga_alone(u);
        k1 = k2 = -1;
        for (int k = 3; k < u->n - 4 && (k1 < 0 || k2 < 0); k++) {
            if (k1 < 0 && ga_split(u, k, 0, tag1, sizeof tag1, NULL)) k1 = k;
            if (k2 < 0 && ga_split(u, k, 1, tag2, sizeof tag2, rest)) k2 = k;
        }
    }
    seed--;
    CHECKF(k1 >= 0 && k2 >= 0, "no seed gives an output with a string split over tokens");
    if (k1 < 0 || k2 < 0) goto out;
    /* A: JSON Schema after tag1 (split over tokens k1-1 and k1): the tokens up to k1 are the
     * unconstrained ones (no mask before), the rest parses and validates from the initial state */
    c[0].rq = ga_request(seed, 300, gj, tag1);
    ga_alone(&c[0]);
    {
        const size_t n = ga_bytes(c[0].tok, k1 + 1, c[0].n, text, sizeof text);
        jv *v = json_strict(text, n);
        const int prefix = c[0].n > k1 && !memcmp(c[0].tok, u->tok, (size_t)(k1 + 1) * sizeof *u->tok);
        char uc[8192];
        const size_t nu = ga_bytes(u->tok, k1 + 1, u->n, uc, sizeof uc);
        jv *vu = json_strict(uc, nu);
        g_why[0] = 0;
        CHECKF(prefix && v && validate(v, sc, sc) && c[0].finish == MOE8_FINISH_STOP,
               "grammar_after '%s' (tokens %d-%d): prefix %d, finish %d, after it: '%s' (%s)", tag1, k1 - 1, k1,
               prefix, (int)c[0].finish, text, g_why);
        CHECKF(!vu, "the unconstrained continuation is JSON too ('%s'): the test shows nothing", uc);
        printf("grammar_after: seed %llu, '%s' over tokens %d-%d: %d free tokens as unconstrained, then %zu "
               "bytes of valid JSON\n", (unsigned long long)seed, tag1, k1 - 1, k1, k1 + 1, n);
        jv_free(v);
        jv_free(vu);
    }
    /* B: tag2 ends inside token k2: its last byte goes to the grammar, which then wants "!" */
    snprintf(gbnf, sizeof gbnf, "root ::= \"%s\" \"!\"", rest);
    CHECK(moe8_grammar_compile(gbnf, strlen(gbnf), &gr, NULL) == MOE8_OK);
    c[1].rq = ga_request(seed, 60, gr, tag2);
    ga_alone(&c[1]);
    ga_bytes(c[1].tok, k2 + 1, c[1].n, text, sizeof text);
    CHECKF(c[1].n == k2 + 2 && !memcmp(c[1].tok, u->tok, (size_t)(k2 + 1) * sizeof *u->tok) && !strcmp(text, "!") &&
           c[1].finish == MOE8_FINISH_STOP, "grammar_after '%s' inside token %d, then %s: %d tokens, finish %d, "
           "'%s'", tag2, k2, gbnf, c[1].n, (int)c[1].finish, text);
    /* C: the same token's last byte refused by the grammar: an error, token k2 not emitted */
    snprintf(gbnf, sizeof gbnf, "root ::= \"%s\"", rest[0] == '{' ? "[" : "{");
    CHECK(moe8_grammar_compile(gbnf, strlen(gbnf), &gbad, NULL) == MOE8_OK);
    c[2].rq = ga_request(seed, 60, gbad, tag2);
    ga_alone(&c[2]);
    CHECKF(c[2].finish == MOE8_FINISH_ERROR && strstr(c[2].msg, "grammar_after") && c[2].n == k2 &&
           !memcmp(c[2].tok, u->tok, (size_t)k2 * sizeof *u->tok), "refused rest: finish %d '%s', %d tokens",
           (int)c[2].finish, c[2].msg, c[2].n);
    /* D: a string the output never holds: the request is the unconstrained one, to max_tokens */
    c[3].rq = ga_request(seed, 40, gj, "\x01never\x02");
    ga_alone(&c[3]);
    CHECKF(ga_same(&c[3], u) && u->finish == MOE8_FINISH_LENGTH, "never closed: %d tokens, finish %d; "
           "unconstrained %d, %d", c[3].n, (int)c[3].finish, u->n, (int)u->finish);
    /* E: "" is none: the constrained request from the first token */
    c[4].rq = ga_request(seed, 300, gj, "");
    c[5].rq = ga_request(seed, 300, gj, NULL);
    ga_alone(&c[4]);
    ga_alone(&c[5]);
    ga_bytes(c[5].tok, 0, c[5].n, text, sizeof text);
    {
        jv *v = json_strict(text, strlen(text));
        CHECKF(ga_same(&c[4], &c[5]) && v && validate(v, sc, sc), "grammar_after \"\" vs NULL: %d / %d tokens, '%s'",
               c[4].n, c[5].n, text);
        jv_free(v);
    }
    /* F: all of them together, with two plain ones, in chunks of 5 tokens: each as alone */
    c[6].rq = ga_request(seed + 7, 30, NULL, NULL);
    c[7].rq = ga_request(seed + 8, 50, gj, tag1);
    {
        ga_run *each = calloc(8, sizeof *each);
        for (int i = 0; i < 8; i++) {
            each[i].rq = c[i].rq;
            ga_alone(&each[i]);
        }
        ga_sched(c, 8, 5);
        for (int i = 0; i < 8; i++) {
            n_same += ga_same(&c[i], &each[i]);
            if (!ga_same(&c[i], &each[i])) fprintf(stderr, "  request %d: together %d tokens, alone %d\n", i, c[i].n, each[i].n);
        }
        CHECKF(n_same == 8, "batch invariance: %d of 8 requests with grammar_after equal themselves alone", n_same);
        free(each);
    }
    /* G: bad values, naming the field */
    {
        moe8_request q = ga_request(1, 4, NULL, "</think>");
        moe8_context_params cp = moe8_context_params_default();
        moe8_sched_params sp = moe8_sched_params_default();
        moe8_context *ctx;
        moe8_sched *s;
        moe8_error e;
        int64_t id;
        sp.tok = qtok;
        CHECK(moe8_context_create(ga_model, &cp, &ctx, NULL) == MOE8_OK);
        CHECK(moe8_sched_create(ctx, &sp, &s, NULL) == MOE8_OK);
        q.prompt = ga_prompt, q.n_prompt = (int32_t)ga_n_prompt;
        CHECKF(moe8_sched_add(s, &q, &id, &e) == MOE8_ERR_INVALID_ARG && strstr(e.message, "grammar_after") &&
               strstr(e.message, "without a grammar"), "grammar_after without a grammar: %s", e.message);
        memset(long_after, 'x', sizeof long_after - 1);
        long_after[sizeof long_after - 1] = 0;
        q.grammar = gj, q.grammar_after = long_after;
        CHECKF(moe8_sched_add(s, &q, &id, &e) == MOE8_ERR_INVALID_ARG && strstr(e.message, "grammar_after") &&
               strstr(e.message, "256"), "a grammar_after of %zu bytes: %s", strlen(long_after), e.message);
        CHECK(moe8_sched_pending(s) == 0);
        moe8_sched_free(s);
        moe8_context_free(ctx);
    }
    printf("grammar_after: split at a token's end, inside a token, refused rest, never closed, \"\", "
           "%d requests together as alone\n", n_same);
out:
    moe8_grammar_free(gj);
    moe8_grammar_free(gr);
    moe8_grammar_free(gbad);
    if (ga_model) moe8_model_free(ga_model);
    cJSON_Delete(sc);
    free(u);
    free(c);
}

int main(void) {
    const char *raw[257];
    size_t lens[257];
    char one[256];
    int32_t eos = BYTE_EOS, qeos = QWEN_EOS;
    double t0 = now_s();
    for (int b = 0; b < 256; b++) one[b] = (char)b, raw[b] = &one[b], lens[b] = 1;
    raw[256] = NULL, lens[256] = 0;
    if (moe8_grammar_vocab_new_raw(257, raw, lens, &eos, 1, &bv, NULL) != MOE8_OK) return 2;
    if (access(MOE8_TOKENIZER_DIR "/tokenizer.json", F_OK) == 0 &&
        moe8_tokenizer_load(MOE8_TOKENIZER_DIR, &qtok, NULL) == MOE8_OK &&
        moe8_grammar_vocab_new(qtok, QWEN_N_VOCAB, &qeos, 1, &qv, NULL) == MOE8_OK) {
        for (int b = 0; b < 256; b++) qbyte[b] = -1;
        for (int32_t t = 0; t < QWEN_N_VOCAB; t++) {
            size_t n;
            const char *s = moe8_grammar_vocab_token(qv, t, &n);
            if (s && n == 1 && qbyte[(unsigned char)s[0]] < 0) qbyte[(unsigned char)s[0]] = t;
        }
    } else {
        printf("qwen3 vocabulary: skipped (no %s; make deps)\n", MOE8_TOKENIZER_DIR);
    }
    test_parse_errors();
    test_syntax();
    test_states();
    test_vocab();
    test_tables();
    test_schemas();
    test_schema_errors();
    test_threads();
    test_brute();
    test_random_walks();
    test_llama_vocab();
    test_grammar_after();
    printf("total %.1f s\n", now_s() - t0);
    moe8_grammar_vocab_free(bv);
    moe8_grammar_vocab_free(qv);
    moe8_tokenizer_free(qtok);
    return test_summary();
}
