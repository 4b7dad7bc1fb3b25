/*
 * test_tokenizer_models.c — the tokenizer pipelines beyond Qwen's, against
 * independent references:
 *   - the real Llama-2/Mistral (SentencePiece-style BPE: Prepend + Replace
 *     normalizer, byte fallback, Replace/ByteFallback/Fuse/Strip decoder),
 *     DeepSeek-V3 (three Split regexes + ByteLevel) and gpt-oss (o200k_harmony:
 *     one Split regex with case classes + ByteLevel, ignore_merges, the harmony
 *     markers as special tokens) tokenizers, on the vectors
 *     tests/data/tokenizer_vectors_{llama2,deepseek_v3,gptoss}.txt: ids, decoded text
 *     (whole, streamed, skipping special tokens) and ids with special tokens as
 *     text, all produced at development time by the tokenizers' own JavaScript
 *     packages (tests/data/gen_tokenizer_vectors.mjs; node is not run here);
 *   - hand-computed results on small hand-made tokenizer.json files for each
 *     pipeline stage, and one hand-made bad file per refused field.
 * Exits 77 (ctest: skipped) when the real tokenizer files are missing from
 * .deps (make deps fetches them).
 */
#include <stdint.h>

#include "moe8.h"
#include "test.h"

/* ---- helpers --------------------------------------------------------- */

static size_t parse_ids(const char *s, int32_t *ids, size_t cap) {
    size_t n = 0;
    char *end;
    while (*s && n < cap) {
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

static int same_text(const char *a, size_t na, const char *b, size_t nb) {
    return na == nb && memcmp(a, b, na) == 0;
}

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

/* Feed ids one at a time; every chunk must be valid UTF-8. Returns the length. */
static size_t stream_decode(const moe8_tokenizer *t, unsigned flags, const int32_t *ids, size_t n,
                            char *out, size_t cap, int *ok) {
    moe8_detok *d;
    const char *s;
    size_t len, pos = 0;
    *ok = moe8_detok_create(t, flags, &d, NULL) == MOE8_OK;
    if (!*ok) return 0;
    for (size_t i = 0; i <= n; i++) {
        if (i < n) {
            if (moe8_detok_feed(d, ids[i], &s, &len, NULL) != MOE8_OK) *ok = 0;
        } else {
            moe8_detok_flush(d, &s, &len);
        }
        if (!valid_utf8((const unsigned char *)s, len)) *ok = 0;
        if (pos + len <= cap) memcpy(out + pos, s, len);
        pos += len;
    }
    moe8_detok_free(d);
    return pos;
}

/* ---- the real tokenizers against their vector files ----------------------- */

/* One vector line: TEXT IDS DECODED DECODED_SKIP NS_IDS NS_DECODED ('=': as before). */
typedef struct {
    char text[70000], dec[70000], skip[70000], ns_dec[70000];
    size_t n_text, n_dec, n_skip, n_ns_dec, n_ids, n_ns;
    int32_t ids[20000], ns[20000];
} vector;

static int parse_vector(char *line, vector *v) {
    char *col[6];
    int n = 0;
    for (char *p = line; n < 6; n++) {
        col[n] = p;
        if (!(p = strchr(p, '\t'))) {
            n++;
            break;
        }
        *p++ = '\0';
    }
    if (n != 6) return -1;
    v->n_text = test_unescape(col[0], strlen(col[0]), v->text);
    v->n_ids = parse_ids(col[1], v->ids, 20000);
    if (strcmp(col[2], "=")) v->n_dec = test_unescape(col[2], strlen(col[2]), v->dec);
    else memcpy(v->dec, v->text, v->n_dec = v->n_text);
    if (strcmp(col[3], "=")) v->n_skip = test_unescape(col[3], strlen(col[3]), v->skip);
    else memcpy(v->skip, v->dec, v->n_skip = v->n_dec);
    if (strcmp(col[4], "=")) v->n_ns = parse_ids(col[4], v->ns, 20000);
    else memcpy(v->ns, v->ids, (v->n_ns = v->n_ids) * sizeof *v->ids);
    if (strcmp(col[5], "=")) v->n_ns_dec = test_unescape(col[5], strlen(col[5]), v->ns_dec);
    else memcpy(v->ns_dec, v->dec, v->n_ns_dec = v->n_dec);
    return 0;
}

/* Every check of one vector; returns the number that failed (the first named). */
static int check_vector(const moe8_tokenizer *t, const vector *v) {
    static int32_t ids[20000];
    static char out[200000];
    size_t n = 0, no = 0;
    int ok, bad = 0;
    const char *what = NULL;
    moe8_status st = moe8_tokenize(t, v->text, v->n_text, ids, 20000, &n, NULL);
    if (st != MOE8_OK || !same_ids(ids, n, v->ids, v->n_ids)) bad++, what = "ids";
    no = stream_decode(t, 0, v->ids, v->n_ids, out, sizeof out, &ok);
    if (!ok || !same_text(out, no, v->dec, v->n_dec)) bad++, what = what ? what : "streamed text";
    if (moe8_detokenize(t, v->ids, v->n_ids, 0, out, sizeof out, &no, NULL) != MOE8_OK ||
        !same_text(out, no, v->dec, v->n_dec))
        bad++, what = what ? what : "decoded text";
    if (moe8_detokenize(t, v->ids, v->n_ids, MOE8_DETOK_SKIP_SPECIAL, out, sizeof out, &no, NULL) !=
            MOE8_OK || !same_text(out, no, v->skip, v->n_skip))
        bad++, what = what ? what : "text skipping special tokens";
    st = moe8_tokenize_ex(t, v->text, v->n_text, MOE8_TOKENIZE_NO_SPECIAL, ids, 20000, &n, NULL);
    if (st != MOE8_OK || !same_ids(ids, n, v->ns, v->n_ns)) bad++, what = what ? what : "no-special ids";
    if (moe8_detokenize(t, v->ns, v->n_ns, 0, out, sizeof out, &no, NULL) != MOE8_OK ||
        !same_text(out, no, v->ns_dec, v->n_ns_dec))
        bad++, what = what ? what : "no-special decoded text";
    if (bad) fprintf(stderr, "  %s: %.*s\n", what, (int)(v->n_text > 80 ? 80 : v->n_text), v->text);
    return bad;
}

static void test_vector_file(const moe8_tokenizer *t, const char *name) {
    static vector v;
    char path[4096], *line = NULL;
    size_t lcap = 0, n_vec = 0, n_bad = 0;
    snprintf(path, sizeof path, "%s/tests/data/tokenizer_vectors_%s.txt", MOE8_SOURCE_DIR, name);
    FILE *f = fopen(path, "r");
    CHECKF(f != NULL, "cannot open %s", path);
    if (!f) return;
    while (getline(&line, &lcap, f) > 0) {
        if (line[0] == '#') continue;
        line[strcspn(line, "\n")] = '\0';
        if (parse_vector(line, &v) != 0) {
            CHECKF(0, "malformed vector line: %.80s", line);
            continue;
        }
        if (check_vector(t, &v) && n_bad++ > 10) fprintf(stderr, "  ... (more)\n");
        n_vec++;
    }
    free(line);
    fclose(f);
    printf("%s: %zu vectors\n", name, n_vec);
    CHECKF(n_vec >= 400, "%s: only %zu vectors", name, n_vec);
    CHECKF(n_bad == 0, "%s: %zu of %zu vectors differ from the reference", name, n_bad, n_vec);
}

/* ---- queries and streaming on the real tokenizers -------------------------- */

static void check_token(const moe8_tokenizer *t, int32_t id, const char *text, unsigned flags) {
    size_t n;
    unsigned fl;
    const char *s = moe8_tokenizer_token_bytes(t, id, &n, &fl);
    CHECKF(s && same_text(s, n, text, strlen(text)) && fl == flags, "token %d: '%.*s' flags %u",
           id, s ? (int)n : 0, s ? s : "", fl);
}

static void feed(moe8_detok *d, int32_t id, const char *want) {
    const char *s;
    size_t n;
    CHECK(moe8_detok_feed(d, id, &s, &n, NULL) == MOE8_OK);
    CHECKF(same_text(s, n, want, strlen(want)), "id %d gave '%.*s', want '%s'", id, (int)n, s, want);
}

static void test_llama_queries(const moe8_tokenizer *t) {
    moe8_detok *d, *cont, *skip;
    CHECK(moe8_tokenizer_n_vocab(t) == 32000);
    CHECK(moe8_tokenizer_add_bos(t) == 1 && moe8_tokenizer_bos_id(t) == 1);
    CHECK(moe8_tokenizer_eos_id(t) == 2);
    CHECK(moe8_tokenizer_token_id(t, "<s>") == 1 && moe8_tokenizer_token_id(t, "<unk>") == 0);
    CHECK(moe8_tokenizer_token_id(t, "\xe2\x96\x81Hello") == 22557);   /* "▁Hello" */
    CHECK(moe8_tokenizer_token_id(t, "<0x0A>") == 13);
    CHECK(moe8_tokenizer_token_id(t, " Hello") == -1);   /* a text, not a spelling */
    check_token(t, 22557, " Hello", 0);
    check_token(t, 13, "\n", 0);
    size_t n;
    const char *b0 = moe8_tokenizer_token_bytes(t, 3, &n, NULL);   /* <0x00> */
    CHECK(b0 && n == 1 && b0[0] == '\0');
    check_token(t, 28705, " ", 0);
    check_token(t, 1, "<s>", MOE8_TOKEN_ADDED | MOE8_TOKEN_SPECIAL);
    /* Strip: one leading space of a stream goes, unless it continues a text */
    CHECK(moe8_detok_create(t, 0, &d, NULL) == MOE8_OK);
    CHECK(moe8_detok_create(t, MOE8_DETOK_CONTINUE, &cont, NULL) == MOE8_OK);
    CHECK(moe8_detok_create(t, MOE8_DETOK_SKIP_SPECIAL, &skip, NULL) == MOE8_OK);
    feed(d, 22557, "Hello");
    feed(d, 1526, " world");
    feed(cont, 22557, " Hello");
    moe8_detok_reset(d);
    feed(d, 28705, "");   /* "அ" = ▁ <0xE0> <0xAE> <0x85>: the space goes, the bytes wait */
    feed(d, 227, "");
    feed(d, 177, "");
    feed(d, 136, "\xe0\xae\x85");
    feed(d, 28705, " ");
    moe8_detok_reset(d);
    feed(d, 1, "<s>");    /* the text starts with '<': nothing to strip any more */
    feed(d, 22557, " Hello");
    feed(skip, 1, "");    /* skipped: the strip still waits for the first text */
    feed(skip, 22557, "Hello");
    moe8_detok_free(d);
    moe8_detok_free(cont);
    moe8_detok_free(skip);
}

static void test_deepseek_queries(const moe8_tokenizer *t) {
    CHECK(moe8_tokenizer_n_vocab(t) == 128815);
    CHECK(moe8_tokenizer_add_bos(t) == 1 && moe8_tokenizer_bos_id(t) == 0);
    CHECK(moe8_tokenizer_eos_id(t) == 1);
    CHECK(moe8_tokenizer_token_id(t, "<\xef\xbd\x9cUser\xef\xbd\x9c>") == 128803);
    CHECK(moe8_tokenizer_token_id(t, "Hello") == 19923);
    check_token(t, 0, "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
                MOE8_TOKEN_ADDED | MOE8_TOKEN_SPECIAL);
    check_token(t, 128803, "<\xef\xbd\x9cUser\xef\xbd\x9c>", MOE8_TOKEN_ADDED);
    check_token(t, 19923, "Hello", 0);
}

/* gpt-oss: BOS <|startoftext|> not added (no add_bos_token), EOS <|return|>
 * (tokenizer_config.json), the harmony markers special, a streamed decode
 * keeps their text (the server's output parser reads it). */
static void test_gptoss_queries(const moe8_tokenizer *t) {
    static const struct { int32_t id; const char *text; } MARKS[] = {
        {199998, "<|startoftext|>"}, {199999, "<|endoftext|>"}, {200002, "<|return|>"},
        {200003, "<|constrain|>"}, {200005, "<|channel|>"}, {200006, "<|start|>"}, {200007, "<|end|>"},
        {200008, "<|message|>"}, {200012, "<|call|>"}, {200018, "<|endofprompt|>"}};
    moe8_detok *d;
    CHECK(moe8_tokenizer_n_vocab(t) == 200019);
    CHECK(moe8_tokenizer_add_bos(t) == 0);
    CHECK(moe8_tokenizer_eos_id(t) == 200002);
    for (size_t i = 0; i < sizeof MARKS / sizeof *MARKS; i++) {
        check_token(t, MARKS[i].id, MARKS[i].text, MOE8_TOKEN_ADDED | MOE8_TOKEN_SPECIAL);
        CHECK(moe8_tokenizer_token_id(t, MARKS[i].text) == MARKS[i].id);
    }
    check_token(t, 13225, "Hello", 0);
    CHECK(moe8_detok_create(t, MOE8_DETOK_CONTINUE, &d, NULL) == MOE8_OK);
    feed(d, 200005, "<|channel|>");
    feed(d, 17196, "final");
    feed(d, 200008, "<|message|>");
    feed(d, 12194, "Hi");
    moe8_detok_free(d);
}

/* ---- hand-made tokenizer.json files ------------------------------------ */

static const char *DIR_;   /* scratch folder */

/* Write tokenizer.json (and tokenizer_config.json when cfg) and load them. */
static moe8_status load_text(const char *json, const char *cfg, moe8_tokenizer **t, moe8_error *e) {
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer.json", DIR_);
    test_write_file(path, json, strlen(json));
    snprintf(path, sizeof path, "%s/tokenizer_config.json", DIR_);
    if (cfg) test_write_file(path, cfg, strlen(cfg));
    else unlink(path);
    return moe8_tokenizer_load(DIR_, t, e);
}

/* SentencePiece style (as Llama-2/Mistral): <unk> 0, <s> 1, </s> 2, <0x00>..<0xFF>
 * 3..258, then "▁" 259, a 260, b 261, ab 262, "▁a" 263, "▁ab" 264, é 265. */
typedef struct {
    const char *normalizer, *pre_tokenizer, *decoder, *model_extra, *merges, *added, *skip_vocab;
} sp_spec;

#define SPACE "\xe2\x96\x81"   /* ▁ */
static sp_spec sp_default(void) {
    sp_spec s = {
        "{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":\"" SPACE "\"},"
        "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"" SPACE "\"}]}",
        "null",
        "{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":\""
        SPACE "\"},\"content\":\" \"},{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},"
        "{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}]}",
        "\"byte_fallback\":true,\"unk_token\":\"<unk>\",\"fuse_unk\":true",
        "[\"" SPACE " a\",\"a b\",\"" SPACE "a b\"]",
        "[{\"id\":0,\"content\":\"<unk>\",\"special\":true},{\"id\":1,\"content\":\"<s>\","
        "\"special\":true},{\"id\":2,\"content\":\"</s>\",\"special\":true}]",
        ""};
    return s;
}

static char *sp_json(const sp_spec *s) {
    static char json[32768];
    size_t o = (size_t)snprintf(json, sizeof json,
                                "{\"added_tokens\":%s,\"normalizer\":%s,\"pre_tokenizer\":%s,"
                                "\"decoder\":%s,\"model\":{\"type\":\"BPE\",%s,\"vocab\":{"
                                "\"<unk>\":0,\"<s>\":1,\"</s>\":2",
                                s->added, s->normalizer, s->pre_tokenizer, s->decoder,
                                s->model_extra);
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        if (!strcmp(name, s->skip_vocab)) continue;
        o += (size_t)snprintf(json + o, sizeof json - o, ",\"%s\":%d", name, 3 + b);
    }
    snprintf(json + o, sizeof json - o,
             ",\"" SPACE "\":259,\"a\":260,\"b\":261,\"ab\":262,\"" SPACE "a\":263,\"" SPACE
             "ab\":264,\"\xc3\xa9\":265},\"merges\":%s}}", s->merges);
    return json;
}

static void check_ids(const moe8_tokenizer *t, unsigned flags, const char *text,
                      const int32_t *want, size_t nw) {
    int32_t ids[64];
    size_t n = 0;
    moe8_error e = {0};
    moe8_status st = moe8_tokenize_ex(t, text, strlen(text), flags, ids, 64, &n, &e);
    CHECKF(st == MOE8_OK && same_ids(ids, n, want, nw), "'%s': status %d (%s), %zu ids [%d %d ..]",
           text, st, e.message, n, n ? ids[0] : -1, n > 1 ? ids[1] : -1);
}
#define IDS(...) (const int32_t[]){__VA_ARGS__}, sizeof((const int32_t[]){__VA_ARGS__}) / 4
#define NO_IDS NULL, 0

static void check_text(const moe8_tokenizer *t, unsigned flags, const int32_t *ids, size_t n,
                       const char *want) {
    char out[256];
    size_t no = 0;
    moe8_status st = moe8_detokenize(t, ids, n, flags, out, sizeof out, &no, NULL);
    CHECKF(st == MOE8_OK && same_text(out, no, want, strlen(want)), "decoded '%.*s', want '%s'",
           (int)no, out, want);
}

static void test_sentencepiece(void) {
    moe8_tokenizer *t = NULL;
    moe8_error e;
    sp_spec s = sp_default();
    CHECKF(load_text(sp_json(&s), NULL, &t, &e) == MOE8_OK, "%s", e.message);
    if (!t) return;
    /* "▁ab": ▁+a (rank 0) first, then ▁a+b (rank 2); a+b (rank 1) never applies */
    check_ids(t, 0, "ab", IDS(264));
    check_ids(t, 0, " ab", IDS(259, 264));          /* "▁▁ab" */
    check_ids(t, 0, "ba", IDS(259, 261, 260));
    check_ids(t, 0, "bab", IDS(259, 261, 262));     /* "▁bab": only a+b fits */
    check_ids(t, 0, "", NO_IDS);                    /* Prepend leaves an empty text empty */
    check_ids(t, 0, "\xc3\xa9", IDS(259, 265));
    check_ids(t, 0, "\xc3\xbc", IDS(259, 3 + 0xc3, 3 + 0xbc));   /* ü: byte fallback */
    check_ids(t, 0, "<s>ab</s>", IDS(1, 264, 2));   /* each stretch gets its own "▁" */
    check_ids(t, 0, "<s> ab", IDS(1, 259, 264));
    check_ids(t, MOE8_TOKENIZE_NO_SPECIAL, "<s>", IDS(259, 3 + '<', 3 + 's', 3 + '>'));
    check_ids(t, 0, "a" SPACE "b", IDS(263, 259, 261));   /* a literal ▁ is a ▁ */
    check_text(t, 0, IDS(264), "ab");
    check_text(t, 0, IDS(259, 264), " ab");
    check_text(t, 0, IDS(1, 264), "<s> ab");
    check_text(t, MOE8_DETOK_SKIP_SPECIAL, IDS(1, 264), "ab");
    check_text(t, MOE8_DETOK_CONTINUE, IDS(264), " ab");
    check_text(t, 0, IDS(3 + 0xc3, 3 + 0xbc), "\xc3\xbc");
    check_text(t, 0, IDS(3 + 0xc3, 260), "\xef\xbf\xbd" "a");   /* an invalid run: U+FFFD */
    check_text(t, 0, IDS(3 + ' ', 3 + ' ', 260), " a");          /* <0x20> is a space too */
    moe8_tokenizer_free(t);

    /* unknown characters: unk (fused or not), or dropped without unk_token */
    s.model_extra = "\"unk_token\":\"<unk>\",\"fuse_unk\":true";
    CHECKF(load_text(sp_json(&s), NULL, &t, &e) == MOE8_OK, "%s", e.message);
    check_ids(t, 0, "\xc3\xbc\xc3\xbc" "a\xc3\xbc", IDS(259, 0, 260, 0));
    check_text(t, 0, IDS(259, 0, 260), "<unk>a");
    moe8_tokenizer_free(t);
    s.model_extra = "\"unk_token\":\"<unk>\",\"fuse_unk\":false";
    CHECKF(load_text(sp_json(&s), NULL, &t, &e) == MOE8_OK, "%s", e.message);
    check_ids(t, 0, "\xc3\xbc\xc3\xbc" "a", IDS(259, 0, 0, 260));
    moe8_tokenizer_free(t);
    s.model_extra = "\"unk_token\":null";
    CHECKF(load_text(sp_json(&s), NULL, &t, &e) == MOE8_OK, "%s", e.message);
    check_ids(t, 0, "\xc3\xbc" "ab", IDS(264));   /* "▁üab" without its ü merges to "▁ab" */
    moe8_tokenizer_free(t);

    /* Strip(start 2); a Replace decoder without Fuse/Strip keeps every space */
    s = sp_default();
    s.decoder = "{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":"
                "\"" SPACE "\"},\"content\":\" \"},{\"type\":\"Fuse\"},{\"type\":\"Strip\","
                "\"content\":\" \",\"start\":2,\"stop\":0}]}";
    CHECKF(load_text(sp_json(&s), NULL, &t, &e) == MOE8_OK, "%s", e.message);
    check_text(t, 0, IDS(259, 259, 259, 260), " a");
    check_text(t, 0, IDS(3 + 0x0a), "<0x0A>");   /* no ByteFallback step: its spelling */
    moe8_tokenizer_free(t);
    s.decoder = "{\"type\":\"Replace\",\"pattern\":{\"String\":\"" SPACE "\"},\"content\":\"_\"}";
    CHECKF(load_text(sp_json(&s), NULL, &t, &e) == MOE8_OK, "%s", e.message);
    check_text(t, 0, IDS(264, 263), "_ab_a");
    moe8_tokenizer_free(t);
}

/* ByteLevel: byte b -> id b (printable ones spelled as themselves); added from 300. */
static char *bl_json(const char *normalizer, const char *pre, const char *merges,
                     const char *extra_vocab, const char *added) {
    static char json[32768];
    size_t o = (size_t)snprintf(json, sizeof json,
                                "{\"added_tokens\":%s,\"normalizer\":%s,\"pre_tokenizer\":%s,"
                                "\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\","
                                "\"vocab\":{", added, normalizer, pre);
    for (int b = 0, n = 0; b < 256; b++) {
        int cp = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174 ? b : 256 + n++;
        if (cp == '"' || cp == '\\') o += (size_t)snprintf(json + o, sizeof json - o, "\"\\%c\"", cp);
        else if (cp < 0x80) o += (size_t)snprintf(json + o, sizeof json - o, "\"%c\"", cp);
        else o += (size_t)snprintf(json + o, sizeof json - o, "\"%c%c\"", 0xc0 | (cp >> 6),
                                   0x80 | (cp & 0x3f));
        o += (size_t)snprintf(json + o, sizeof json - o, ":%d,", b);
    }
    snprintf(json + o, sizeof json - o, "\"zz\":256%s},\"merges\":%s}}", extra_vocab, merges);
    return json;
}

#define BL_PRE "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}"

static void test_byte_level(void) {
    static const char nfc[] = "{\"type\":\"NFC\"}";
    moe8_tokenizer *t = NULL;
    moe8_error e;
    /* an added token with normalized true is matched on the NFC text */
    static const char e_acute_norm[] = "[{\"id\":300,\"content\":\"\xc3\xa9\",\"normalized\":true}]";
    static const char e_acute_raw[] = "[{\"id\":300,\"content\":\"\xc3\xa9\",\"normalized\":false}]";
    CHECKF(load_text(bl_json(nfc, BL_PRE, "[]", "", e_acute_norm), NULL, &t, &e) == MOE8_OK, "%s",
           e.message);
    check_ids(t, 0, "xe\xcc\x81y", IDS('x', 300, 'y'));
    check_ids(t, 0, "x\xc3\xa9y", IDS('x', 300, 'y'));
    moe8_tokenizer_free(t);
    CHECKF(load_text(bl_json(nfc, BL_PRE, "[]", "", e_acute_raw), NULL, &t, &e) == MOE8_OK, "%s",
           e.message);
    check_ids(t, 0, "xe\xcc\x81y", IDS('x', 0xc3, 0xa9, 'y'));   /* NFC after the cut */
    check_ids(t, 0, "x\xc3\xa9y", IDS('x', 300, 'y'));
    moe8_tokenizer_free(t);

    /* two Splits: each cuts the pieces of the one before ("2 3" ranks before "1 2") */
    static const char two_splits[] =
        "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":"
        "\"[0-9]{1,2}\"},\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"Split\","
        "\"pattern\":{\"Regex\":\"[a-z]\"},\"behavior\":\"Isolated\",\"invert\":false},"
        BL_PRE "]}";
    static const char merges[] = "[\"2 3\",\"1 2\",\"z z\"]";
    static const char vocab[] = ",\"12\":257,\"23\":258";
    CHECKF(load_text(bl_json("null", two_splits, merges, vocab, "[]"), NULL, &t, &e) == MOE8_OK,
           "%s", e.message);
    check_ids(t, 0, "123", IDS(257, '3'));   /* "12" "3" */
    check_ids(t, 0, "zz1", IDS('z', 'z', '1'));   /* "z" "z" "1": no z+z across pieces */
    moe8_tokenizer_free(t);
    CHECKF(load_text(bl_json("null", BL_PRE, merges, vocab, "[]"), NULL, &t, &e) == MOE8_OK, "%s",
           e.message);
    check_ids(t, 0, "123", IDS('1', 258));   /* one piece: 2+3 first */
    check_ids(t, 0, "zz1", IDS(256, '1'));
    moe8_tokenizer_free(t);

    /* a vocab entry outside the ByteLevel alphabet is fine as an added token (DeepSeek-V3) */
    static const char odd[] = ",\"<\xef\xbd\x9cx\xef\xbd\x9c>\":257";
    CHECKF(load_text(bl_json("null", BL_PRE, "[]", odd, "[{\"id\":257,\"content\":\"<\xef\xbd\x9cx"
                             "\xef\xbd\x9c>\",\"special\":true}]"), NULL, &t, &e) == MOE8_OK,
           "%s", e.message);
    check_ids(t, 0, "a<\xef\xbd\x9cx\xef\xbd\x9c>", IDS('a', 257));
    check_text(t, 0, IDS('a', 257), "a<\xef\xbd\x9cx\xef\xbd\x9c>");
    moe8_tokenizer_free(t);

    /* NO_SPECIAL: a special token found first hides a non-special one inside it */
    static const char overlap[] = "[{\"id\":300,\"content\":\"abc\",\"special\":true},"
                                  "{\"id\":301,\"content\":\"ab\",\"special\":false}]";
    CHECKF(load_text(bl_json("null", BL_PRE, "[]", "", overlap), NULL, &t, &e) == MOE8_OK, "%s",
           e.message);
    check_ids(t, 0, "xabcab", IDS('x', 300, 301));
    check_ids(t, MOE8_TOKENIZE_NO_SPECIAL, "xabcab", IDS('x', 'a', 'b', 'c', 301));
    check_ids(t, MOE8_TOKENIZE_NO_SPECIAL, "abab", IDS(301, 301));
    moe8_tokenizer_free(t);
}

static void expect_error(const char *json, const char *cfg, moe8_status want, const char *needle) {
    moe8_tokenizer *t = NULL;
    moe8_error e = {0};
    moe8_status st = load_text(json, cfg, &t, &e);
    CHECKF(st == want && !t && strstr(e.message, needle), "status %d, message '%s' (want %d, '%s')",
           st, e.message, want, needle);
    moe8_tokenizer_free(t);
}

static void test_load_errors(void) {
    sp_spec s;
#define SP_BAD(field, value, status, needle) \
    do {                                     \
        s = sp_default();                    \
        s.field = value;                     \
        expect_error(sp_json(&s), NULL, status, needle); \
    } while (0)
    SP_BAD(normalizer, "{\"type\":\"Lowercase\"}", MOE8_ERR_UNSUPPORTED,
           "tokenizer.json': normalizer type 'Lowercase' is not supported");
    SP_BAD(normalizer, "{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFC\"},{\"type\":"
           "\"NFKC\"}]}", MOE8_ERR_UNSUPPORTED, "normalizer.normalizers[1] type 'NFKC'");
    SP_BAD(normalizer, "{\"type\":\"Replace\",\"pattern\":{\"Regex\":\" +\"},\"content\":\"x\"}",
           MOE8_ERR_UNSUPPORTED, "normalizer: a Replace with a Regex pattern is not supported");
    SP_BAD(normalizer, "{\"type\":\"Replace\",\"pattern\":{\"String\":\"\"},\"content\":\"x\"}",
           MOE8_ERR_FORMAT, "normalizer: expected pattern");
    SP_BAD(normalizer, "{\"type\":\"Prepend\",\"prepend\":5}", MOE8_ERR_FORMAT,
           "normalizer.prepend must be a string");
    SP_BAD(normalizer, "{\"type\":\"Prepend\",\"prepend\":\"\xff\"}", MOE8_ERR_FORMAT,
           "not UTF-8");
    SP_BAD(normalizer, "{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFC\"},{\"type\":\"NFC\"},"
           "{\"type\":\"NFC\"},{\"type\":\"NFC\"},{\"type\":\"NFC\"},{\"type\":\"NFC\"},{\"type\":"
           "\"NFC\"},{\"type\":\"NFC\"},{\"type\":\"NFC\"}]}", MOE8_ERR_UNSUPPORTED,
           "normalizer.normalizers[8]: more than 8 steps");
    SP_BAD(normalizer, "{\"type\":\"Sequence\",\"normalizers\":{}}", MOE8_ERR_FORMAT,
           "normalizer.normalizers must be an array");
    SP_BAD(pre_tokenizer, "{\"type\":\"Metaspace\",\"replacement\":\"" SPACE "\"}",
           MOE8_ERR_UNSUPPORTED, "pre_tokenizer type 'Metaspace' is not supported");
    SP_BAD(pre_tokenizer, "{\"type\":\"Sequence\",\"pretokenizers\":[" BL_PRE ",{\"type\":"
           "\"Split\",\"pattern\":{\"Regex\":\"a\"},\"behavior\":\"Isolated\",\"invert\":false}]}",
           MOE8_ERR_UNSUPPORTED, "pre_tokenizer.pretokenizers[1]: nothing may follow the ByteLevel");
    SP_BAD(pre_tokenizer, "{\"type\":\"Split\",\"pattern\":{\"String\":\" \"},\"behavior\":"
           "\"Isolated\",\"invert\":false}", MOE8_ERR_UNSUPPORTED,
           "pre_tokenizer: Split.pattern must be {\"Regex\": string}");
    SP_BAD(pre_tokenizer, "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"a\"},\"behavior\":"
           "\"Isolated\",\"invert\":true}", MOE8_ERR_UNSUPPORTED, "invert false");
    SP_BAD(pre_tokenizer, BL_PRE, MOE8_ERR_UNSUPPORTED,
           "a ByteLevel pre_tokenizer needs the ByteLevel decoder");
    SP_BAD(decoder, "{\"type\":\"Metaspace\"}", MOE8_ERR_UNSUPPORTED,
           "decoder type 'Metaspace' is not supported");
    SP_BAD(decoder, "{\"type\":\"ByteLevel\"}", MOE8_ERR_UNSUPPORTED,
           "decoder ByteLevel needs a ByteLevel pre_tokenizer");
    SP_BAD(decoder, "null", MOE8_ERR_UNSUPPORTED, "decoder null is not supported");
    SP_BAD(decoder, "{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Strip\",\"content\":\" \","
           "\"start\":1,\"stop\":0},{\"type\":\"Fuse\"}]}", MOE8_ERR_UNSUPPORTED,
           "decoder.decoders[0]: Strip out of order");
    SP_BAD(decoder, "{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"ByteFallback\"},{\"type\":"
           "\"Replace\",\"pattern\":{\"String\":\"a\"},\"content\":\"b\"}]}", MOE8_ERR_UNSUPPORTED,
           "decoder.decoders[1]: Replace out of order");
    SP_BAD(decoder, "{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Fuse\"},{\"type\":\"Fuse\"}]}",
           MOE8_ERR_UNSUPPORTED, "decoder.decoders[1]: Fuse out of order");
    SP_BAD(decoder, "{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Fuse\"},{\"type\":\"Strip\","
           "\"content\":\" \",\"start\":0,\"stop\":1}]}", MOE8_ERR_UNSUPPORTED,
           "decoder.decoders[1].stop 1 is not supported");
    SP_BAD(decoder, "{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Fuse\"},{\"type\":\"Strip\","
           "\"content\":\"ab\",\"start\":1,\"stop\":0}]}", MOE8_ERR_FORMAT,
           "Strip wants content (one character)");
    SP_BAD(skip_vocab, "<0x41>", MOE8_ERR_UNSUPPORTED,
           "model.byte_fallback is true but model.vocab has no token '<0x41>'");
    SP_BAD(model_extra, "\"unk_token\":\"<zzz>\"", MOE8_ERR_FORMAT,
           "model.unk_token '<zzz>' is not in model.vocab");
    SP_BAD(model_extra, "\"unk_token\":5", MOE8_ERR_FORMAT, "unk_token must be null or");
    SP_BAD(merges, "[\"a " SPACE "\"]", MOE8_ERR_FORMAT, "model.merges[0]");
    SP_BAD(added, "[{\"id\":1,\"content\":\"<t>\"}]", MOE8_ERR_FORMAT, "other bytes");
#undef SP_BAD
    /* a stretch that normalizes to nothing cannot be a pattern */
    static const char drop_x[] =
        "{\"type\":\"Replace\",\"pattern\":{\"String\":\"x\"},\"content\":\"\"}";
    expect_error(bl_json(drop_x, BL_PRE, "[]", "", "[{\"id\":300,\"content\":\"x\","
                         "\"normalized\":true}]"), NULL, MOE8_ERR_FORMAT,
                 "added token 'x' normalizes to nothing");
    s = sp_default();
    expect_error(sp_json(&s), "{\"clean_up_tokenization_spaces\":true}", MOE8_ERR_UNSUPPORTED,
                 "tokenizer_config.json': clean_up_tokenization_spaces true is not supported");
    /* ByteLevel: an entry outside the alphabet must be an added token */
    expect_error(bl_json("null", BL_PRE, "[]", ",\"<\xef\xbd\x9cx\xef\xbd\x9c>\":257", "[]"), NULL,
                 MOE8_ERR_FORMAT, "(id 257) is not in the ByteLevel alphabet (nor an added token)");
}

int main(void) {
    static const char *const names[3][2] = {{"llama2", "llama2-tokenizer"},
                                            {"deepseek_v3", "deepseek-v3-tokenizer"},
                                            {"gptoss", "gptoss-tokenizer"}};
    for (int i = 0; i < 3; i++) {
        char dir[4096], path[4200];
        moe8_tokenizer *t = NULL;
        moe8_error e;
        snprintf(dir, sizeof dir, "%s/.deps/%s", MOE8_SOURCE_DIR, names[i][1]);
        snprintf(path, sizeof path, "%s/tokenizer.json", dir);
        if (access(path, R_OK) != 0) {
            printf("SKIP: %s is missing (run make deps)\n", path);
            return 77;
        }
        if (moe8_tokenizer_load(dir, &t, &e) != MOE8_OK) {
            CHECKF(0, "cannot load %s: %s", dir, e.message);
            continue;
        }
        test_vector_file(t, names[i][0]);
        if (i == 0) test_llama_queries(t);
        else if (i == 1) test_deepseek_queries(t);
        else test_gptoss_queries(t);
        moe8_tokenizer_free(t);
    }
    DIR_ = test_tmpdir("tok_models");
    test_sentencepiece();
    test_byte_level();
    test_load_errors();
    return test_summary();
}
