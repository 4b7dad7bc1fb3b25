/* test_core.c — version, status strings, error filling, rounding, the hash
 * table (core/index.h) against a linear search (and removal against a set), the UTF-8 validator,
 * decoder and encoder against the encodings of every code point, the byte buffer and its JSON
 * string writer (core/buf.h) against cJSON's parse of what it wrote and a few spelled-out
 * literals. */
#include <fenv.h>

#include "test.h"
#include <cjson/cJSON.h>

#include "core/buf.h"
#include "core/core.h"
#include "core/index.h"

/* ---- the hash table: keys in an array, checked against a linear search ---- */

typedef struct {
    uint64_t *keys;
    size_t n;
} keyset;

static uint64_t key_hash(const void *ctx, uint32_t id) {
    return moe8_hash64(&((const keyset *)ctx)->keys[id], 8, 0);
}

static int key_eq(const void *ctx, uint32_t id, const void *key) {
    return ((const keyset *)ctx)->keys[id] == *(const uint64_t *)key;
}

static int64_t linear_find(const keyset *k, uint64_t key) {
    for (size_t i = 0; i < k->n; i++)
        if (k->keys[i] == key) return (int64_t)i;
    return -1;
}

static void test_index(void) {
    enum { N = 3000 };
    keyset k = {malloc(N * sizeof(uint64_t)), 0};
    moe8_index x;
    uint64_t r = 12345;
    int bad = 0;
    CHECK(k.keys && moe8_index_init(&x, 4, key_hash) == 0 && x.mask + 1 == 16);
    for (int round = 0; round < 3; round++) {
        /* keys from a small range, so about a third repeat; the table grows from 16 slots */
        for (int i = 0; i < N; i++) {
            uint64_t key, h;
            int64_t got, want;
            r = r * 6364136223846793005ULL + 1442695040888963407ULL;
            key = (r >> 33) % (2 * N);
            h = moe8_hash64(&key, 8, 0);
            want = linear_find(&k, key);
            k.keys[k.n] = key;
            got = moe8_index_add(&x, h, (uint32_t)k.n, key_eq, &k, &key);
            if (got != want) bad++;
            if (got == -1) k.n++;
            if (x.n != k.n || 2 * x.n > x.mask + 1) bad++;
        }
        for (uint64_t key = 0; key < 2 * N + 100; key++)
            if (moe8_index_find(&x, moe8_hash64(&key, 8, 0), key_eq, &k, &key) != linear_find(&k, key))
                bad++;
        CHECKF(bad == 0, "round %d: %d results differ from a linear search (%zu keys, %zu slots)",
               round, bad, k.n, x.mask + 1);
        /* clear forgets everything at once; the third round starts at the epoch's wrap */
        moe8_index_clear(&x);
        k.n = 0;
        CHECK(x.n == 0 && moe8_index_find(&x, 0, key_eq, &k, &k.n) == -1);
        if (round == 1) {
            x.epoch = UINT32_MAX;
            moe8_index_clear(&x);
            CHECK(x.epoch == 1);
        }
    }
    /* removal: random adds and removes against a present-flag reference; keys cluster in a
     * few hash runs (a 64-slot table), so the backward shift meets wrapped runs */
    {
        uint8_t present[40] = {0};
        int bad_rm = 0;
        moe8_index_free(&x);
        CHECK(moe8_index_init(&x, 20, key_hash) == 0 && x.mask + 1 == 64);
        k.n = 40;
        for (uint32_t i = 0; i < 40; i++) k.keys[i] = i; /* entry i holds key i */
        for (int step = 0; step < 20000; step++) {
            uint32_t key;
            r = r * 6364136223846793005ULL + 1442695040888963407ULL;
            key = (uint32_t)((r >> 33) % 40); /* 40 keys: at most 40 of 64 slots... */
            if (present[key]) {
                uint64_t kk = key;
                moe8_index_remove(&x, moe8_hash64(&kk, 8, 0), key, &k);
                present[key] = 0;
            } else if (x.n < 31) { /* ...kept at most half full */
                uint64_t kk = key;
                if (moe8_index_add(&x, moe8_hash64(&kk, 8, 0), key, key_eq, &k, &kk) != -1) bad_rm++;
                present[key] = 1;
            }
            for (uint64_t q = 0; q < 40; q++)
                if ((moe8_index_find(&x, moe8_hash64(&q, 8, 0), key_eq, &k, &q) >= 0) != present[q])
                    bad_rm++;
        }
        CHECKF(bad_rm == 0 && x.mask + 1 == 64, "%d answers wrong after removals", bad_rm);
    }
    moe8_index_free(&x);
    free(k.keys);
}

/* ---- UTF-8: every string of 1-3 bytes, and 4-byte ones from the F0-F7 leads,
 * against the set of encodings of every scalar value ---------------------- */

static int encode_cp(uint32_t cp, uint8_t *o) {
    if (cp < 0x80) return o[0] = (uint8_t)cp, 1;
    if (cp < 0x800) return o[0] = (uint8_t)(0xC0 | cp >> 6), o[1] = (uint8_t)(0x80 | (cp & 63)), 2;
    if (cp < 0x10000) {
        o[0] = (uint8_t)(0xE0 | cp >> 12), o[1] = (uint8_t)(0x80 | (cp >> 6 & 63));
        o[2] = (uint8_t)(0x80 | (cp & 63));
        return 3;
    }
    o[0] = (uint8_t)(0xF0 | cp >> 18), o[1] = (uint8_t)(0x80 | (cp >> 12 & 63));
    o[2] = (uint8_t)(0x80 | (cp >> 6 & 63)), o[3] = (uint8_t)(0x80 | (cp & 63));
    return 4;
}

/* enc[len - 1]: bitmaps of the byte strings (big-endian value) of 1-3 bytes that encode one
 * scalar value, enc4 the 4-byte ones in order; pre[len - 1]: proper prefixes of encodings */
static uint8_t *enc[3], *pre[3];
static uint32_t *enc4;
static size_t n_enc4;
static const size_t map_bits[3] = {1u << 8, 1u << 16, 1u << 24};

static int is_enc4(uint32_t v) {
    size_t lo = 0, hi = n_enc4;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (enc4[mid] < v) lo = mid + 1;
        else hi = mid;
    }
    return lo < n_enc4 && enc4[lo] == v;
}

static int bit(const uint8_t *m, uint64_t v) { return m[v >> 3] >> (v & 7) & 1; }
static void set_bit(uint8_t *m, uint64_t v) { m[v >> 3] |= (uint8_t)(1u << (v & 7)); }

static uint64_t be(const uint8_t *s, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v = v << 8 | s[i];
    return v;
}

/* s[0..n) splits into whole encodings (the reference of moe8_utf8_valid) */
static int ref_valid(const uint8_t *s, int n) {
    if (n == 0) return 1;
    for (int l = 1; l <= n && l <= 4; l++)
        if ((l < 4 ? bit(enc[l - 1], be(s, l)) : is_enc4((uint32_t)be(s, 4))) && ref_valid(s + l, n - l))
            return 1;
    return 0;
}

/* moe8_utf8_char's class: > 0 valid, 0 a proper prefix, < 0 invalid */
static int ref_char(const uint8_t *s, int n) {
    for (int l = 1; l <= n && l <= 4; l++)
        if (l < 4 ? bit(enc[l - 1], be(s, l)) : is_enc4((uint32_t)be(s, 4))) return l;
    return n < 4 && bit(pre[n - 1], be(s, n)) ? 0 : -1;
}

static int sign(int v) { return (v > 0) - (v < 0); }

static void test_utf8(void) {
    long bad = 0, checked = 0;
    uint8_t s[4];
    uint64_t r = 99;
    for (int l = 0; l < 3; l++) {
        enc[l] = calloc(map_bits[l] / 8, 1);
        pre[l] = calloc(map_bits[l] / 8, 1);
    }
    enc4 = malloc(0x100000 * sizeof *enc4);
    if (!enc[0] || !enc[1] || !enc[2] || !pre[0] || !pre[1] || !pre[2] || !enc4) {
        CHECKF(0, "no memory for the UTF-8 reference");
        return;
    }
    for (uint32_t cp = 0; cp <= 0x10FFFF; cp++) {
        int n;
        if (cp >= 0xD800 && cp <= 0xDFFF) continue; /* surrogates are not scalar values */
        n = encode_cp(cp, s);
        if (n < 4) set_bit(enc[n - 1], be(s, n));
        else enc4[n_enc4++] = (uint32_t)be(s, 4); /* increasing with cp */
        for (int p = 1; p < n; p++) set_bit(pre[p - 1], be(s, p));
    }
    for (int n = 1; n <= 3; n++)
        for (uint64_t v = 0; v < map_bits[n - 1]; v++) {
            for (int i = 0; i < n; i++) s[i] = (uint8_t)(v >> (8 * (n - 1 - i)));
            int want_ok = ref_valid(s, n);
            size_t got = moe8_utf8_valid((const char *)s, (size_t)n);
            bad += (got == (size_t)-1) != want_ok;
            bad += sign(moe8_utf8_char(s, (size_t)n)) != sign(ref_char(s, n));
            checked++;
        }
    for (int i = 0; i < 4000000; i++) {
        r = r * 6364136223846793005ULL + 1442695040888963407ULL;
        s[0] = (uint8_t)(0xF0 | (r >> 61)), s[1] = (uint8_t)(r >> 24), s[2] = (uint8_t)(r >> 32);
        s[3] = (uint8_t)(r >> 40);
        for (int j = 1; j < 4; j++)
            if (r >> (50 + j) & 1) s[j] = (uint8_t)(0x80 | (s[j] & 0x3F)); /* mostly continuations */
        bad += (moe8_utf8_valid((const char *)s, 4) == (size_t)-1) != ref_valid(s, 4);
        bad += sign(moe8_utf8_char(s, 4)) != sign(ref_char(s, 4));
        checked++;
    }
    /* the offset is the first bad sequence's first byte */
    CHECK(moe8_utf8_valid("ab\xC3\xA9\xED\xA0\x80z", 8) == 4);
    CHECK(moe8_utf8_valid("ab\xE2\x82", 4) == 2 && moe8_utf8_valid("", 0) == (size_t)-1);
    CHECKF(bad == 0, "%ld of %ld UTF-8 strings judged differently from the reference", bad, checked);
    for (int l = 0; l < 3; l++) free(enc[l]), free(pre[l]);
    free(enc4);
}

/* ---- UTF-8 decode/encode: every code point, by the ranges of Table 3-7 ---- */

static void test_utf8_codec(void) {
    long bad = 0;
    for (uint32_t cp = 0; cp <= 0x10ffff; cp++) {
        char e[4];
        uint32_t back = 0xffffffffu;
        const int want = cp < 0x80 ? 1 : cp < 0x800 ? 2 : (cp >= 0xd800 && cp < 0xe000) ? 0 : cp < 0x10000 ? 3 : 4;
        const int k = moe8_utf8_encode(cp, e);
        bad += k != want;
        if (k > 0) bad += moe8_utf8_decode((const uint8_t *)e, (size_t)k, &back) != k || back != cp;
    }
    CHECKF(bad == 0, "%ld code points encode or decode wrong", bad);
    {
        char e[4];
        uint32_t cp = 7;
        CHECK(moe8_utf8_encode(0x110000, e) == 0);
        CHECK(moe8_utf8_decode((const uint8_t *)"\xC0\x80", 2, &cp) < 0 && cp == 7); /* overlong */
        CHECK(moe8_utf8_decode((const uint8_t *)"\xE2\x82", 2, &cp) == 0 && cp == 7); /* a prefix */
        CHECK(moe8_utf8_decode((const uint8_t *)"\xF0\x9F\x9A\x80", 4, &cp) == 4 && cp == 0x1F680);
    }
}

/* ---- the byte buffer --------------------------------------------------------------- */

static void test_buf(void) {
    moe8_buf b = {0};
    char *t;
    CHECK(moe8_buf_add(&b, "ab", 2) == 0 && b.n == 2 && !strcmp(b.p, "ab"));
    CHECK(moe8_buf_str(&b, "cd") == 0 && moe8_buf_printf(&b, "-%d-%s", 42, "x") == 0);
    CHECK(b.n == 9 && !strcmp(b.p, "abcd-42-x"));
    for (int i = 0; i < 1000; i++) moe8_buf_printf(&b, "%04d", i);
    CHECK(b.n == 4009 && !memcmp(b.p + 9, "000000010002", 12) && !strcmp(b.p + 4005, "0999"));
    CHECK(moe8_buf_ok(&b) && moe8_buf_reserve(&b, 100000) == 0 && b.cap >= 100001 && b.n == 4009);
    t = moe8_buf_take(&b);
    CHECK(t && strlen(t) == 4009 && b.p == NULL && b.n == 0 && b.cap == 0);
    free(t);
    t = moe8_buf_take(&b); /* an empty buffer gives "" */
    CHECK(t && t[0] == '\0');
    free(t);
    b.oom = 1; /* out of memory is sticky */
    CHECK(moe8_buf_add(&b, "x", 1) == -1 && moe8_buf_printf(&b, "%d", 1) == -1 && b.n == 0);
    CHECK(moe8_buf_take(&b) == NULL && b.oom == 0);
    moe8_buf_free(&b);
}

/* ---- the JSON string writer: cJSON reads back what it wrote ---------------------- */

/* s[0..n) written with flags, parsed back by cJSON: its bytes and length, and
 * the literal must hold only ASCII with MOE8_JSON_ASCII. */
static int json_round_trip(const char *s, size_t n, unsigned flags, const char *want, size_t n_want) {
    moe8_buf b = {0};
    cJSON *j;
    int ok;
    if (moe8_buf_json_str(&b, s, n, flags)) return 0;
    j = cJSON_ParseWithLength(b.p, b.n);
    ok = j && cJSON_IsString(j) && strlen(j->valuestring) == n_want && !memcmp(j->valuestring, want, n_want);
    if (flags & MOE8_JSON_ASCII)
        for (size_t i = 0; i < b.n; i++) ok &= (unsigned char)b.p[i] < 0x80;
    cJSON_Delete(j);
    moe8_buf_free(&b);
    return ok;
}

static int json_is(const char *s, size_t n, unsigned flags, const char *want) {
    moe8_buf b = {0};
    int ok = !moe8_buf_json_str(&b, s, n, flags) && !strcmp(b.p, want);
    if (!ok) fprintf(stderr, "  json of '%.*s' (flags %u): %s, wanted %s\n", (int)n, s, flags, b.p, want);
    moe8_buf_free(&b);
    return ok;
}

static void test_json_str(void) {
    static const char txt[] = "a\"b\\c\n\r\t\b\f\x01\x1f\x7f \xC3\xA9 \xE2\x82\xAC \xF0\x9F\x9A\x80 end";
    const size_t n = sizeof txt - 1;
    for (unsigned f = 0; f < 8; f++) CHECKF(json_round_trip(txt, n, f, txt, n), "round trip, flags %u", f);
    CHECK(json_is("a\"\\\n\x01\x7f", 6, 0, "\"a\\\"\\\\\\n\\u0001\x7f\""));
    CHECK(json_is("\x7f", 1, MOE8_JSON_DEL, "\"\\u007f\""));
    CHECK(json_is("\xC3\xA9\xF0\x9F\x9A\x80", 6, MOE8_JSON_ASCII, "\"\\u00e9\\ud83d\\ude80\""));
    CHECK(json_is("\xC3\xA9", 2, 0, "\"\xC3\xA9\""));
    CHECK(json_is("x\0y", 3, 0, "\"x\\u0000y\""));
    /* invalid UTF-8: copied, or one U+FFFD per byte */
    CHECK(json_is("a\xff\xC3", 3, 0, "\"a\xff\xC3\""));
    CHECK(json_is("a\xff\xC3", 3, MOE8_JSON_LOSSY, "\"a\xEF\xBF\xBD\xEF\xBF\xBD\""));
    CHECK(json_is("\xff", 1, MOE8_JSON_ASCII, "\"\\ufffd\""));
    CHECK(json_is("", 0, 0, "\"\""));
    /* \u0000 escapes in JSON text */
    CHECK(moe8_json_nul_escape("ab\\u0000", 8) == 2);
    CHECK(moe8_json_nul_escape("ab\\\\u0000", 9) == -1);
    CHECK(moe8_json_nul_escape("\\u000", 5) == -1 && moe8_json_nul_escape("", 0) == -1);
    CHECK(moe8_json_nul_escape("\\\\\\u0000x", 10) == 2);
}

int main(void) {
    moe8_error err;
    char v[32];
    snprintf(v, sizeof v, "%d.%d.%d", MOE8_VERSION_MAJOR, MOE8_VERSION_MINOR, MOE8_VERSION_PATCH);
    CHECK(strcmp(moe8_version(), v) == 0);
    CHECK(moe8_version_number() == MOE8_VERSION_NUMBER);
    CHECK(strcmp(moe8_status_str(MOE8_OK), "ok") == 0);
    CHECK(strcmp(moe8_status_str(MOE8_ERR_FORMAT), "format error") == 0);
    CHECK(strcmp(moe8_status_str((moe8_status)-1000), "unknown status") == 0);
    CHECK(moe8_fail(&err, MOE8_ERR_IO, 42, "cannot open '%s'", "x.bin") == MOE8_ERR_IO);
    CHECK(err.code == MOE8_ERR_IO && err.offset == 42);
    CHECK(strcmp(err.message, "cannot open 'x.bin'") == 0);
    moe8_error_prefix(&err, "layer %d", 3);
    CHECK(strcmp(err.message, "layer 3: cannot open 'x.bin'") == 0);
    CHECK(moe8_fail(NULL, MOE8_ERR_NOMEM, -1, "ignored") == MOE8_ERR_NOMEM);
    size_t s;
    CHECK(moe8_mul_size((size_t)1 << 40, (size_t)1 << 30, &s) == -1);
    CHECK(moe8_mul_size(3, 5, &s) == 0 && s == 15);
    CHECK(moe8_add_size(SIZE_MAX, 1, &s) == -1);
    void *p = moe8_alloc_aligned(100);
    CHECK(p && ((uintptr_t)p & 63) == 0);
    moe8_free_aligned(p);
    CHECK(moe8_alloc_aligned(SIZE_MAX) == NULL);
    /* Round half to even in every rounding mode. */
    {
        static const float in[] = {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 2.4999998f, 126.5f, -127.5f, 3.0f, 8388609.0f, 0.0f};
        static const float want[] = {0.0f, 2.0f, 2.0f, -0.0f, -2.0f, -2.0f, 2.0f, 126.0f, -128.0f, 3.0f, 8388609.0f, 0.0f};
        static const int modes[] = {FE_TONEAREST, FE_UPWARD, FE_DOWNWARD, FE_TOWARDZERO};
        int bad = 0;
        for (size_t m = 0; m < 4; m++) {
            fesetround(modes[m]);
            for (size_t i = 0; i < sizeof in / sizeof in[0]; i++) bad += moe8_round_even(in[i]) != want[i];
            fesetround(FE_TONEAREST);
        }
        CHECKF(bad == 0, "%d moe8_round_even results differ", bad);
        CHECK(isnan(moe8_round_even(NAN)));
    }
    /* the table in use is the first of this build's that the CPU supports (no MOE8_ISA here,
     * or the one it names), and the probe's features nest */
    const char *isa = moe8_kernel_isa(), *tables = moe8_kernel_tables();
    char first[32] = "";
    for (const char *t = tables; *t; t += strcspn(t, " ") + (t[strcspn(t, " ")] ? 1 : 0))
        if (strncmp(t + strcspn(t, " ("), "(unsupported)", 13) != 0) {
            snprintf(first, sizeof first, "%.*s", (int)strcspn(t, " ("), t);
            break;
        }
    const char *forced = getenv("MOE8_ISA");
    CHECKF(!strcmp(isa, forced && forced[0] ? forced : first), "in use %s, tables '%s'", isa, tables);
    CHECK(!strcmp(isa, "amx") || !strcmp(isa, "avx512") || !strcmp(isa, "avx2") || !strcmp(isa, "ref"));
    CHECK(strcmp(isa, "amx") || moe8_cpu()->amx_int8); /* amx only where the tiles were granted */
    CHECK(strstr(tables, "ref") != NULL);
    CHECK(!moe8_cpu()->avx512 || moe8_cpu()->avx2);
    CHECK(!moe8_cpu()->amx_int8 || moe8_cpu()->avx512);
    CHECK(!moe8_cpu()->avx512_bf16 || moe8_cpu()->avx512);
    test_index();
    test_utf8();
    test_utf8_codec();
    test_buf();
    test_json_str();
    return test_summary();
}
