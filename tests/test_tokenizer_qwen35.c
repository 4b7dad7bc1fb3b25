/*
 * test_tokenizer_qwen35.c — Qwen3.5's pre-tokenizer against llama.cpp's test
 * strings for it (tests/data/qwen35/: models/ggml-vocab-qwen35.gguf.inp and
 * .out of ggml-org/llama.cpp at 42532afff439, the Qwen2/3 vocabulary under
 * the qwen35 pre-tokenizer; tests/data/qwen35/README.md).
 *
 * Qwen3.5's tokenizer.json differs from Qwen3's in its Split regex only:
 * combining marks (\p{M}) go with the letters and stay out of punctuation
 * runs. moe8 takes that regex from the file (PCRE2, Unicode properties) as
 * it takes any Split's, so the tokenizer is built here from Qwen3's
 * tokenizer.json (.deps/qwen3-tokenizer) with its normalizer, pre_tokenizer
 * and decoder sections replaced by tests/data/qwen35/tokenizer_pipeline.json
 * (Qwen3.5's). Checked:
 *   - without the normalizer (llama.cpp applies none): every string gives
 *     llama.cpp's ids, and they decode back to the string;
 *   - as published (NFC): the same ids for every string NFC leaves alone; a
 *     string with a decomposed accent gives the ids of its composed form
 *     (written here by hand);
 *   - llama.cpp's strings give the same ids under Qwen3's regex on this
 *     vocabulary, so text full of combining marks (Thai, Arabic harakat,
 *     Hebrew points, Devanagari, emoji with variation selectors) is checked
 *     too: tests/data/qwen35/mark_vectors.txt, ids made by an implementation
 *     of its own (make_mark_vectors.py: Python's regex module, merges by
 *     rank; it reproduces llama.cpp's ids first), under Qwen3.5's pipeline
 *     and, from the unchanged Qwen3 tokenizer, under Qwen3's; at least four
 *     of them differ between the two.
 */
#include <cjson/cJSON.h>
#include <stdint.h>

#include "moe8.h"
#include "test.h"

#define DATA MOE8_SOURCE_DIR "/tests/data/qwen35"
#define SEP "\n__ggml_vocab_test__\n"
#define MAX_CASES 128
#define MAX_IDS 4096

static char *slurp(const char *path, size_t *len) {
    char *text = NULL;
    moe8_error e;
    if (moe8_read_file(path, (size_t)1 << 26, &text, len, &e) != MOE8_OK) {
        fprintf(stderr, "cannot read %s: %s\n", path, e.message);
        exit(2);
    }
    return text;
}

/* Qwen3's tokenizer.json with the sections of `pipe` put in (normalizer
 * null when `no_norm`), loaded from a scratch folder `name`. */
static moe8_tokenizer *build(const cJSON *qwen3, const cJSON *pipe, int no_norm, const char *name) {
    static const char *const sections[] = {"normalizer", "pre_tokenizer", "decoder"};
    cJSON *j = cJSON_Duplicate(qwen3, 1);
    char path[4200], *text;
    const char *dir = test_tmpdir(name);
    moe8_tokenizer *t = NULL;
    moe8_error e;
    FILE *f;
    for (int i = 0; i < 3; i++)
        cJSON_ReplaceItemInObjectCaseSensitive(
            j, sections[i], cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(pipe, sections[i]), 1));
    if (no_norm) cJSON_ReplaceItemInObjectCaseSensitive(j, "normalizer", cJSON_CreateNull());
    text = cJSON_PrintUnformatted(j);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    f = fopen(path, "wb");
    CHECKF(f && text && fwrite(text, 1, strlen(text), f) == strlen(text), "cannot write %s", path);
    if (f) fclose(f);
    CHECKF(moe8_tokenizer_load(dir, &t, &e) == MOE8_OK, "%s: %s", name, e.message);
    cJSON_free(text);
    cJSON_Delete(j);
    return t;
}

static size_t parse_ids(const char *s, size_t n, int32_t *ids, size_t cap) {
    size_t k = 0, i = 0;
    while (i < n && k < cap) {
        long v = 0;
        int any = 0;
        while (i < n && s[i] == ' ') i++;
        while (i < n && s[i] >= '0' && s[i] <= '9') v = v * 10 + (s[i++] - '0'), any = 1;
        if (!any) break;
        ids[k++] = (int32_t)v;
    }
    return k;
}

static size_t encode(const moe8_tokenizer *t, const char *s, size_t n, int32_t *ids) {
    size_t n_ids = 0;
    moe8_error e;
    const moe8_status st = moe8_tokenize(t, s, n, ids, MAX_IDS, &n_ids, &e);
    CHECKF(st == MOE8_OK, "tokenize '%.*s': %s", (int)n, s, e.message);
    return st == MOE8_OK ? n_ids : 0;
}

static int same(const int32_t *a, size_t na, const int32_t *b, size_t nb) {
    return na == nb && (!na || !memcmp(a, b, na * sizeof *a));
}

/* ids[0..n) decoded, compared with s[0..len). */
static int decodes_to(const moe8_tokenizer *t, const int32_t *ids, size_t n, const char *s, size_t len) {
    size_t pos = 0, k;
    for (size_t i = 0; i < n; i++) {
        const char *p = moe8_tokenizer_token_bytes(t, ids[i], &k, NULL);
        if (!p || pos + k > len || memcmp(s + pos, p, k)) return 0;
        pos += k;
    }
    return pos == len;
}

/* mark_vectors.txt: every line "text\tids (Qwen3.5)\tids (Qwen3)" under
 * both tokenizers; *n_differ counts the lines whose two id lists differ. */
static size_t check_marks(const moe8_tokenizer *q35, const moe8_tokenizer *q3, size_t *n_differ) {
    size_t len, n = 0;
    char *text = slurp(DATA "/mark_vectors.txt", &len), *save = NULL, s[1024];
    static int32_t a[MAX_IDS], b[MAX_IDS], got[MAX_IDS];
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *t1 = strchr(line, '\t'), *t2 = t1 ? strchr(t1 + 1, '\t') : NULL;
        size_t na, nb, sn, ng;
        if (line[0] == '#') continue;
        CHECKF(t1 && t2 && (size_t)(t1 - line) < sizeof s, "mark_vectors.txt: bad line '%.60s'", line);
        if (!t1 || !t2 || (size_t)(t1 - line) >= sizeof s) continue;
        sn = test_unescape(line, (size_t)(t1 - line), s);
        na = parse_ids(t1 + 1, (size_t)(t2 - t1 - 1), a, MAX_IDS);
        nb = parse_ids(t2 + 1, strlen(t2 + 1), b, MAX_IDS);
        ng = encode(q35, s, sn, got);
        CHECKF(same(got, ng, a, na), "'%.*s' (Qwen3.5): %zu ids, the reference %zu", (int)sn, s, ng, na);
        ng = encode(q3, s, sn, got);
        CHECKF(same(got, ng, b, nb), "'%.*s' (Qwen3): %zu ids, the reference %zu", (int)sn, s, ng, nb);
        *n_differ += !same(a, na, b, nb);
        n++;
    }
    free(text);
    return n;
}

/* The strings of the .inp that NFC changes (a letter and a combining
 * accent), and what NFC makes of them. */
static const struct { const char *raw, *nfc; } DECOMPOSED[] = {
    {"e\xcc\x81", "\xc3\xa9"},                                      /* e U+0301 -> U+00E9 */
    {"re\xcc\x81sume\xcc\x81", "r\xc3\xa9sum\xc3\xa9"},
    {"a\xcc\x80", "\xc3\xa0"},                                      /* (repeated) a U+0300 -> U+00E0 */
};

/* The NFC form of s[0..n) when it is one of DECOMPOSED (into out), else NULL. */
static const char *nfc_of(const char *s, size_t n, char *out, size_t cap, size_t *out_n) {
    for (size_t d = 0; d < sizeof DECOMPOSED / sizeof DECOMPOSED[0]; d++) {
        const size_t rn = strlen(DECOMPOSED[d].raw), cn = strlen(DECOMPOSED[d].nfc);
        if (d == 2) { /* "à" (decomposed) repeated */
            size_t reps = n / rn;
            if (!n || n % rn || reps * cn > cap) continue;
            for (size_t r = 0; r < reps; r++)
                if (memcmp(s + r * rn, DECOMPOSED[d].raw, rn)) reps = 0;
            if (!reps) continue;
            for (size_t r = 0; r < reps; r++) memcpy(out + r * cn, DECOMPOSED[d].nfc, cn);
            *out_n = reps * cn;
            return out;
        }
        if (n == rn && !memcmp(s, DECOMPOSED[d].raw, n) && cn <= cap) {
            memcpy(out, DECOMPOSED[d].nfc, cn);
            *out_n = cn;
            return out;
        }
    }
    return NULL;
}

int main(void) {
    size_t qlen, plen, ilen, olen;
    char *qtext = slurp(MOE8_TOKENIZER_DIR "/tokenizer.json", &qlen), *ptext = slurp(DATA "/tokenizer_pipeline.json", &plen),
         *inp = slurp(DATA "/ggml-vocab-qwen35.gguf.inp", &ilen), *out = slurp(DATA "/ggml-vocab-qwen35.gguf.out", &olen);
    cJSON *qwen3 = cJSON_ParseWithLength(qtext, qlen), *pipe = cJSON_ParseWithLength(ptext, plen);
    moe8_tokenizer *raw, *nfc, *qwen3t = NULL;
    moe8_error e;
    const char *cs[MAX_CASES], *ls[MAX_CASES];
    size_t cn[MAX_CASES], ln[MAX_CASES], n_cases = 0, n_lines = 0, n_decomposed = 0, n_marks = 0, n_differ = 0;
    static int32_t want[MAX_IDS], got[MAX_IDS], ref[MAX_IDS];
    free(qtext);
    free(ptext);
    CHECK(qwen3 && pipe);
    if (!qwen3 || !pipe) return test_summary();

    /* the strings: each followed by SEP; the ids: one line each */
    for (const char *p = inp, *end = inp + ilen, *q; p < end && n_cases < MAX_CASES; p = q + strlen(SEP)) {
        if (!(q = strstr(p, SEP))) break;
        cs[n_cases] = p, cn[n_cases++] = (size_t)(q - p);
    }
    for (char *p = out, *end = out + olen, *q; p < end && n_lines < MAX_CASES; p = q + 1) {
        if (!(q = memchr(p, '\n', (size_t)(end - p)))) q = end;
        ls[n_lines] = p, ln[n_lines++] = (size_t)(q - p);
    }
    CHECKF(n_cases == 50 && n_lines == n_cases, "%zu strings, %zu id lines", n_cases, n_lines);

    raw = build(qwen3, pipe, 1, "qwen35_tok_raw");
    nfc = build(qwen3, pipe, 0, "qwen35_tok_nfc");
    CHECKF(moe8_tokenizer_load(MOE8_TOKENIZER_DIR, &qwen3t, &e) == MOE8_OK, "qwen3: %s", e.message);
    for (size_t i = 0; raw && nfc && i < n_cases && i < n_lines; i++) {
        const size_t nw = parse_ids(ls[i], ln[i], want, MAX_IDS);
        size_t ng = encode(raw, cs[i], cn[i], got), nr, nn;
        char composed[512];
        const char *c;
        CHECKF(same(got, ng, want, nw), "case %zu '%.*s' (no normalizer): %zu ids, llama.cpp %zu (first %d vs %d)", i,
               (int)cn[i], cs[i], ng, nw, ng ? got[0] : -1, nw ? want[0] : -1);
        CHECKF(decodes_to(raw, got, ng, cs[i], cn[i]), "case %zu: the ids do not decode to the string", i);
        ng = encode(nfc, cs[i], cn[i], got);
        if ((c = nfc_of(cs[i], cn[i], composed, sizeof composed, &nn))) {
            nr = encode(raw, c, nn, ref);
            CHECKF(same(got, ng, ref, nr) && !same(got, ng, want, nw),
                   "case %zu (decomposed): NFC's ids are not those of the composed text", i);
            n_decomposed++;
        } else {
            CHECKF(same(got, ng, want, nw), "case %zu '%.*s' (NFC): not llama.cpp's ids", i, (int)cn[i], cs[i]);
        }
    }
    if (nfc && qwen3t) n_marks = check_marks(nfc, qwen3t, &n_differ);
    printf("llama.cpp: %zu strings (%zu decomposed); marks: %zu texts, %zu where Qwen3's regex differs\n", n_cases,
           n_decomposed, n_marks, n_differ);
    CHECK(n_decomposed == 3);
    CHECK(n_marks >= 10 && n_differ >= 4);
    moe8_tokenizer_free(raw);
    moe8_tokenizer_free(nfc);
    moe8_tokenizer_free(qwen3t);
    cJSON_Delete(qwen3);
    cJSON_Delete(pipe);
    free(inp);
    free(out);
    return test_summary();
}
