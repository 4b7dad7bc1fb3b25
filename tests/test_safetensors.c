/*
 * test_safetensors.c — safetensors reader (one hand-made bad file per defect,
 * sharded and globbed folders), writer round trips (every dtype, alignment,
 * metadata, temp-file hygiene), and dtype conversions against independent
 * ldexp/double references.
 */
#include <dirent.h>
#include <float.h>
#include <signal.h>
#include <stdint.h>

#include "test.h"
#include "moe8.h"

static char g_dir[1024];

/* ======================================================================== */
/* Helpers                                                                   */
/* ======================================================================== */

static const char *path_in(const char *dir, const char *name) {
    static char buf[4][2048];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

static void put_le64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* A file of: u64 `hlen_field`, the header text, then `data_len` pattern bytes. */
static void write_raw(const char *path, uint64_t hlen_field, const char *header, size_t data_len) {
    size_t hl = strlen(header), n = 8 + hl + data_len;
    unsigned char *b = malloc(n);
    put_le64(b, hlen_field);
    memcpy(b + 8, header, hl);
    for (size_t i = 0; i < data_len; i++) b[8 + hl + i] = (unsigned char)(i * 7 + 1);
    test_write_file(path, b, n);
    free(b);
}

static void write_st(const char *path, const char *header, size_t data_len) {
    write_raw(path, strlen(header), header, data_len);
}

/* Open must fail with `code` and a message containing `msg`. */
static void expect_fail(const char *what, const char *path, moe8_status code, const char *msg) {
    moe8_st *st = (moe8_st *)1;
    moe8_error err = {0};
    moe8_status s = moe8_st_open(path, &st, &err);
    CHECKF(s == code, "%s: status %d (expected %d): %s", what, s, code, err.message);
    CHECKF(err.code == s, "%s: err.code %d", what, err.code);
    CHECKF(strstr(err.message, msg) != NULL, "%s: message '%s' lacks '%s'", what, err.message, msg);
    CHECKF(st == NULL, "%s: handle not cleared", what);
    if (s == MOE8_OK) moe8_st_free(st);
}

static int exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* Number of entries of `dir` whose name contains `part`. */
static int count_entries(const char *dir, const char *part) {
    DIR *d = opendir(dir);
    struct dirent *de;
    int n = 0;
    if (!d) return -1;
    while ((de = readdir(d)))
        if (strstr(de->d_name, part)) n++;
    closedir(d);
    return n;
}

/* ======================================================================== */
/* Bad files                                                                 */
/* ======================================================================== */

#define T1(dt, shape, b, e) "\"t\":{\"dtype\":\"" dt "\",\"shape\":" shape ",\"data_offsets\":[" b "," e "]}"

static const struct {
    const char *what, *header;
    size_t data_len;
    moe8_status code;
    const char *msg;
} bad_files[] = {
    {"invalid json", "{\"t\":{\"dtype\":", 0, MOE8_ERR_FORMAT, "header is not valid JSON"},
    {"json array", "[1,2,3]", 0, MOE8_ERR_FORMAT, "header is not a JSON object"},
    {"garbage after json", "{} xx", 0, MOE8_ERR_FORMAT, "unexpected bytes after the header"},
    {"entry not object", "{\"t\":5}", 0, MOE8_ERR_FORMAT, "tensor 't': entry is not an object"},
    {"unknown dtype", "{" T1("F7", "[1]", "0", "4") "}", 4, MOE8_ERR_FORMAT,
     "tensor 't': unknown dtype 'F7'"},
    {"valid control", "{" T1("F32", "[1]", "0", "4") "}", 4, MOE8_OK, ""},
    {"negative dim", "{" T1("U8", "[-1]", "0", "0") "}", 0, MOE8_ERR_FORMAT,
     "tensor 't': shape[0] is not an exact non-negative integer"},
    {"fractional dim", "{" T1("U8", "[2,1.5]", "0", "3") "}", 3, MOE8_ERR_FORMAT,
     "shape[1] is not an exact non-negative integer"},
    {"huge dim", "{" T1("U8", "[1e300]", "0", "0") "}", 0, MOE8_ERR_FORMAT,
     "shape[0] is not an exact non-negative integer"},
    {"nine dims", "{" T1("U8", "[1,1,1,1,1,1,1,1,1]", "0", "1") "}", 1, MOE8_ERR_FORMAT,
     "shape has 9 dims, more than 8"},
    {"shape not array", "{" T1("U8", "4", "0", "4") "}", 4, MOE8_ERR_FORMAT, "shape is not an array"},
    {"span mismatch", "{" T1("F32", "[2]", "0", "4") "}", 4, MOE8_ERR_FORMAT,
     "data_offsets span 4 bytes but shape needs 8 bytes of F32"},
    {"begin > end", "{" T1("U8", "[0]", "8", "4") "}", 8, MOE8_ERR_FORMAT,
     "data_offsets begin 8 > end 4"},
    {"end past data", "{" T1("F32", "[2]", "0", "8") "}", 4, MOE8_ERR_FORMAT,
     "tensor 't': data_offsets end 8 past data section of 4 bytes"},
    {"fractional offset", "{" T1("U8", "[1]", "0", "1.5") "}", 2, MOE8_ERR_FORMAT,
     "data_offsets[1] is not an exact non-negative integer"},
    {"offset 1e20", "{" T1("U8", "[1]", "0", "1e20") "}", 2, MOE8_ERR_FORMAT,
     "data_offsets[1] is not an exact non-negative integer"},
    {"negative offset", "{" T1("U8", "[1]", "-1", "0") "}", 1, MOE8_ERR_FORMAT,
     "data_offsets[0] is not an exact non-negative integer"},
    {"offsets not pair", "{" T1("U8", "[1]", "0", "1,2") "}", 2, MOE8_ERR_FORMAT,
     "data_offsets is not [begin, end]"},
    {"shape overflow", "{" T1("F32", "[4294967296,4294967296,4294967296]", "0", "4") "}", 4,
     MOE8_ERR_FORMAT, "tensor 't': shape product overflows"},
    {"shape*size overflow", "{" T1("F64", "[4294967296,4294967296]", "0", "4") "}", 4,
     MOE8_ERR_FORMAT, "shape product overflows"},
    {"overlap",
     "{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
     "\"b\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[4,12]}}",
     12, MOE8_ERR_FORMAT, "tensor 'b' (data bytes 4..12) overlaps tensor 'a'"},
    {"gap",
     "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
     "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[8,12]}}",
     12, MOE8_ERR_FORMAT, "gap of 4 bytes before tensor 'b' at data offset 8"},
    {"gap at start", "{" T1("U8", "[4]", "4", "8") "}", 8, MOE8_ERR_FORMAT,
     "gap of 4 bytes before tensor 't' at data offset 4"},
    {"trailing bytes", "{" T1("U8", "[4]", "0", "4") "}", 9, MOE8_ERR_FORMAT,
     "5 trailing bytes after the last tensor"},
    {"data without tensors", "{}", 3, MOE8_ERR_FORMAT, "3 trailing bytes after the last tensor"},
    {"duplicate tensor", "{" T1("U8", "[4]", "0", "4") "," T1("U8", "[4]", "4", "8") "}", 8,
     MOE8_ERR_FORMAT, "duplicate tensor name 't'"},
    {"unknown field", "{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"x\":1}}", 1,
     MOE8_ERR_FORMAT, "tensor 't': unknown field 'x'"},
    {"duplicate field", "{\"t\":{\"dtype\":\"U8\",\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
     1, MOE8_ERR_FORMAT, "tensor 't': duplicate field 'dtype'"},
    {"missing field", "{\"t\":{\"dtype\":\"U8\",\"shape\":[1]}}", 1, MOE8_ERR_FORMAT,
     "tensor 't': missing field 'data_offsets'"},
    {"dtype number", "{\"t\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
     MOE8_ERR_FORMAT, "tensor 't': dtype is not a string"},
    {"metadata not object", "{\"__metadata__\":[1]}", 0, MOE8_ERR_FORMAT,
     "__metadata__ is not an object"},
    {"metadata value", "{\"__metadata__\":{\"format\":\"pt\",\"k\":1}}", 0, MOE8_ERR_FORMAT,
     "__metadata__ value of 'k' is not a string"},
    {"metadata dup key", "{\"__metadata__\":{\"k\":\"a\",\"k\":\"b\"}}", 0, MOE8_ERR_FORMAT,
     "__metadata__ has duplicate key 'k'"},
    {"two metadata", "{\"__metadata__\":{},\"__metadata__\":{}}", 0, MOE8_ERR_FORMAT,
     "duplicate __metadata__"},
};

static void test_bad_files(void) {
    char dir[1100], label[64];
    unsigned char b[8];
    moe8_error err;
    moe8_st *st;
    snprintf(dir, sizeof dir, "%s/bad", g_dir);
    mkdir(dir, 0755);
    for (size_t i = 0; i < sizeof bad_files / sizeof bad_files[0]; i++) {
        snprintf(label, sizeof label, "bad%02zu.safetensors", i);
        write_st(path_in(dir, label), bad_files[i].header, bad_files[i].data_len);
        if (bad_files[i].code == MOE8_OK) {
            CHECKF(moe8_st_open(path_in(dir, label), &st, &err) == MOE8_OK, "%s", err.message);
            moe8_st_free(st);
            continue;
        }
        expect_fail(bad_files[i].what, path_in(dir, label), bad_files[i].code, bad_files[i].msg);
    }
    /* The message names the file. */
    write_st(path_in(dir, "named.safetensors"), "{" T1("F7", "[1]", "0", "4") "}", 4);
    expect_fail("file named", path_in(dir, "named.safetensors"), MOE8_ERR_FORMAT, "named.safetensors': tensor 't'");

    /* Defects of the length prefix. */
    test_write_file(path_in(dir, "short.safetensors"), "\x01\x00\x00", 3);
    expect_fail("short file", path_in(dir, "short.safetensors"), MOE8_ERR_FORMAT,
                "file of 3 bytes is shorter than the 8-byte header length");
    write_raw(path_in(dir, "trunc.safetensors"), 40, "{\"t\":{\"dtype\":\"U8\"", 0);
    expect_fail("truncated header", path_in(dir, "trunc.safetensors"), MOE8_ERR_FORMAT,
                "header length 40 past end of file (26 bytes)");
    put_le64(b, 1000);
    test_write_file(path_in(dir, "eof.safetensors"), b, 8);
    expect_fail("header past eof", path_in(dir, "eof.safetensors"), MOE8_ERR_FORMAT,
                "header length 1000 past end of file (8 bytes)");
    write_raw(path_in(dir, "huge.safetensors"), 100000001ULL, "{}", 0);
    expect_fail("huge header", path_in(dir, "huge.safetensors"), MOE8_ERR_FORMAT,
                "header length 100000001 exceeds the limit of 100000000 bytes");
    write_raw(path_in(dir, "huge2.safetensors"), UINT64_MAX, "{}", 0);
    expect_fail("u64 max header", path_in(dir, "huge2.safetensors"), MOE8_ERR_FORMAT, "exceeds the limit");
    /* A truncated header within the file is a JSON error with its byte offset. */
    write_raw(path_in(dir, "cut.safetensors"), 10, "{\"t\":{\"dty", 4);
    st = NULL;
    CHECK(moe8_st_open(path_in(dir, "cut.safetensors"), &st, &err) == MOE8_ERR_FORMAT);
    CHECKF(strstr(err.message, "header is not valid JSON") && err.offset >= 8 && err.offset <= 18,
           "%s offset %lld", err.message, (long long)err.offset);
    /* Error offsets point into the file. */
    write_st(path_in(dir, "gapoff.safetensors"), "{" T1("U8", "[4]", "4", "8") "}", 8);
    CHECK(moe8_st_open(path_in(dir, "gapoff.safetensors"), &st, &err) == MOE8_ERR_FORMAT);
    CHECKF(err.offset == 8 + (int64_t)strlen("{" T1("U8", "[4]", "4", "8") "}"), "offset %lld",
           (long long)err.offset);
    expect_fail("missing file", path_in(dir, "nope.safetensors"), MOE8_ERR_NOT_FOUND, "nope.safetensors");
    /* Buffers get the same checks, labelled. */
    CHECK(moe8_st_open_buffer("\x02\0\0\0\0\0\0\0{}", 10, "mem", &st, &err) == MOE8_OK);
    CHECK(moe8_st_count(st) == 0);
    moe8_st_free(st);
    CHECK(moe8_st_open_buffer("\x02\0\0\0\0\0\0\0[]", 10, "mem", &st, &err) == MOE8_ERR_FORMAT);
    CHECK(strstr(err.message, "'mem': header is not a JSON object") != NULL);
}

/* ======================================================================== */
/* Folders and the index                                                     */
/* ======================================================================== */

static void write_index(const char *dir, const char *json) {
    test_write_file(path_in(dir, "model.safetensors.index.json"), json, strlen(json));
}

static void fresh_dir(char *out, const char *name) {
    char cmd[8400];
    snprintf(out, 1100, "%s/%.64s", g_dir, name);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", out, out);
    if (system(cmd) != 0) exit(2);
}

static void test_bad_folders(void) {
    char d[1100];
    const char *a = "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}";
    const char *b = "{\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}";

    fresh_dir(d, "f_empty");
    expect_fail("empty folder", d, MOE8_ERR_NOT_FOUND, "no *.safetensors file");

    fresh_dir(d, "f_missing");
    write_st(path_in(d, "s1.safetensors"), a, 2);
    write_index(d, "{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s2.safetensors\"}}");
    expect_fail("missing shard", d, MOE8_ERR_NOT_FOUND,
                "shard 's2.safetensors' listed in the index is missing");

    fresh_dir(d, "f_dotdot");
    write_st(path_in(d, "s1.safetensors"), a, 2);
    write_index(d, "{\"weight_map\":{\"a\":\"sub/../../s1.safetensors\"}}");
    expect_fail("dotdot", d, MOE8_ERR_FORMAT, "shard path 'sub/../../s1.safetensors' has a '..' component");

    fresh_dir(d, "f_abs");
    write_st(path_in(d, "s1.safetensors"), a, 2);
    write_index(d, "{\"weight_map\":{\"a\":\"/etc/passwd\"}}");
    expect_fail("absolute", d, MOE8_ERR_FORMAT, "shard path '/etc/passwd' is absolute");

    fresh_dir(d, "f_link");
    write_st(path_in(g_dir, "outside.safetensors"), a, 2);
    CHECK(symlink(path_in(g_dir, "outside.safetensors"), path_in(d, "s1.safetensors")) == 0);
    write_index(d, "{\"weight_map\":{\"a\":\"s1.safetensors\"}}");
    expect_fail("symlink out", d, MOE8_ERR_FORMAT, "shard 's1.safetensors' resolves outside the folder");

    fresh_dir(d, "f_notin");
    write_st(path_in(d, "s1.safetensors"), a, 2);
    write_st(path_in(d, "s2.safetensors"), b, 2);
    write_index(d, "{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s1.safetensors\"}}");
    expect_fail("tensor not in shard", d, MOE8_ERR_FORMAT,
                "tensor 'b' listed for shard 's1.safetensors' is missing from it");
    write_index(d, "{\"weight_map\":{\"a\":\"s1.safetensors\",\"zz\":\"s2.safetensors\"}}");
    expect_fail("tensor absent", d, MOE8_ERR_FORMAT,
                "tensor 'zz' listed for shard 's2.safetensors' is missing from it");

    fresh_dir(d, "f_twice");
    write_st(path_in(d, "s1.safetensors"), a, 2);
    write_st(path_in(d, "s2.safetensors"), a, 2);
    write_index(d, "{\"weight_map\":{\"a\":\"s1.safetensors\",\"x\":\"s2.safetensors\"}}");
    expect_fail("same tensor in two shards", d, MOE8_ERR_FORMAT, "tensor 'a' is in both");
    unlink(path_in(d, "model.safetensors.index.json"));
    expect_fail("same tensor in two files (glob)", d, MOE8_ERR_FORMAT, "tensor 'a' is in both");

    fresh_dir(d, "f_index");
    write_st(path_in(d, "s1.safetensors"), a, 2);
    write_index(d, "{\"weight_map\":");
    expect_fail("index not json", d, MOE8_ERR_FORMAT, "invalid JSON");
    write_index(d, "[\"s1.safetensors\"]");
    expect_fail("index not object", d, MOE8_ERR_FORMAT, "index is not a JSON object");
    write_index(d, "{\"weight_map\":[\"s1.safetensors\"]}");
    expect_fail("weight_map not object", d, MOE8_ERR_FORMAT, "weight_map is missing or not an object");
    write_index(d, "{\"metadata\":{}}");
    expect_fail("no weight_map", d, MOE8_ERR_FORMAT, "weight_map is missing or not an object");
    write_index(d, "{\"weight_map\":{\"a\":3}}");
    expect_fail("weight_map value", d, MOE8_ERR_FORMAT, "weight_map value of 'a' is not a string");
    write_index(d, "{\"weight_map\":{}}");
    expect_fail("weight_map empty", d, MOE8_ERR_FORMAT, "weight_map is empty");
    /* A bad shard's error names the shard. */
    write_st(path_in(d, "s2.safetensors"), "[]", 0);
    write_index(d, "{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s2.safetensors\"}}");
    expect_fail("bad shard", d, MOE8_ERR_FORMAT, "s2.safetensors': header is not a JSON object");
}

/* The index JSON: no duplicate keys (Python keeps the last copy, cJSON the
 * first), nothing after the value. */
static void test_strict_index(void) {
    char d[1100];
    fresh_dir(d, "f_strict");
    write_st(path_in(d, "s1.safetensors"), "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2);
    write_st(path_in(d, "s2.safetensors"), "{\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2);
    write_index(d, "{\"weight_map\":{\"a\":\"s1.safetensors\"},"
                   "\"weight_map\":{\"b\":\"s2.safetensors\"}}");
    expect_fail("index dup key", d, MOE8_ERR_FORMAT,
                "model.safetensors.index.json': duplicate key 'weight_map' at the top level");
    write_index(d, "{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s2.safetensors\","
                   "\"a\":\"s2.safetensors\"}}");
    expect_fail("weight_map dup key", d, MOE8_ERR_FORMAT,
                "model.safetensors.index.json': duplicate key 'a' in weight_map");
    write_index(d, "{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s2.safetensors\"}} \n}");
    expect_fail("index trailing bytes", d, MOE8_ERR_FORMAT,
                "model.safetensors.index.json': unexpected bytes after the JSON value at byte 60");
    write_index(d, "{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s2.safetensors\"}} \r\n\t");
    moe8_st *st = NULL;
    moe8_error err;
    CHECKF(moe8_st_open(d, &st, &err) == MOE8_OK && moe8_st_count(st) == 2, "%s", err.message);
    moe8_st_free(st);
}

static void fifo_blocked(int sig) {
    (void)sig;
    static const char msg[] = "FAIL test_safetensors: open blocked on a fifo\n";
    if (write(2, msg, sizeof msg - 1) < 0) _exit(1);
    _exit(1);
}

/* A FIFO where a file is expected is refused at once instead of blocking. */
static void test_fifo(void) {
    char d[1100];
    fresh_dir(d, "f_fifo");
    signal(SIGALRM, fifo_blocked);
    alarm(20);
    write_st(path_in(d, "s1.safetensors"), "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2);
    CHECK(mkfifo(path_in(d, "s2.safetensors"), 0600) == 0);
    write_index(d, "{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s2.safetensors\"}}");
    expect_fail("fifo shard", d, MOE8_ERR_IO, "s2.safetensors' is not a regular file (a fifo)");
    expect_fail("fifo file", path_in(d, "s2.safetensors"), MOE8_ERR_IO,
                "s2.safetensors' is not a regular file (a fifo)");
    unlink(path_in(d, "model.safetensors.index.json"));
    CHECK(mkfifo(path_in(d, "model.safetensors.index.json"), 0600) == 0);
    expect_fail("fifo index", d, MOE8_ERR_IO,
                "model.safetensors.index.json' is not a regular file (a fifo)");
    alarm(0);
    signal(SIGALRM, SIG_DFL);
}

/* ======================================================================== */
/* Writer round trips                                                        */
/* ======================================================================== */

typedef struct {
    const char *name;
    moe8_dtype dt;
    int n_dims;
    int64_t shape[MOE8_MAX_DIMS];
} decl;

static size_t decl_bytes(const decl *d) {
    size_t n = moe8_dtype_size(d->dt);
    for (int i = 0; i < d->n_dims; i++) n *= (size_t)d->shape[i];
    return n;
}

static unsigned char *decl_data(const decl *d, unsigned seed) {
    size_t n = decl_bytes(d);
    unsigned char *p = malloc(n ? n : 1);
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(i * 31 + seed * 17 + (i >> 8));
    return p;
}

/* Write `n` declared tensors (data in reverse order) + metadata to `path`. */
static void write_decls(const char *path, const decl *d, size_t n, int with_meta) {
    moe8_st_writer *w;
    moe8_error err;
    CHECKF(moe8_st_writer_open(path, &w, &err) == MOE8_OK, "%s", err.message);
    if (with_meta) {
        CHECK(moe8_st_writer_metadata(w, "format", "pt", &err) == MOE8_OK);
        CHECK(moe8_st_writer_metadata(w, "note", "q\"uote\\back\nline \xc3\xa9", &err) == MOE8_OK);
    }
    for (size_t i = 0; i < n; i++)
        CHECKF(moe8_st_writer_declare(w, d[i].name, d[i].dt, d[i].n_dims, d[i].shape, &err) == MOE8_OK,
               "%s", err.message);
    for (size_t i = n; i-- > 0;) {
        unsigned char *data = decl_data(&d[i], (unsigned)i);
        CHECKF(moe8_st_writer_write(w, d[i].name, data, decl_bytes(&d[i]), &err) == MOE8_OK, "%s",
               err.message);
        free(data);
    }
    CHECKF(moe8_st_writer_finish(w, &err) == MOE8_OK, "%s", err.message);
    moe8_st_writer_free(w);
}

/* Every declared tensor is found with its dtype, shape and bytes. */
static void check_decls(const moe8_st *st, const decl *d, size_t n, int file_index) {
    for (size_t i = 0; i < n; i++) {
        const moe8_tensor *t = moe8_st_find(st, d[i].name);
        unsigned char *data;
        int64_t n_el = 1;
        CHECKF(t != NULL, "tensor '%s' missing", d[i].name);
        if (!t) continue;
        data = decl_data(&d[i], (unsigned)i);
        CHECK(strcmp(t->name, d[i].name) == 0);
        CHECK(t->dtype == d[i].dt && t->n_dims == d[i].n_dims);
        for (int k = 0; k < d[i].n_dims; k++) {
            CHECK(t->shape[k] == d[i].shape[k]);
            n_el *= d[i].shape[k];
        }
        CHECK(t->n_elements == n_el);
        CHECK(t->n_bytes == decl_bytes(&d[i]));
        CHECKF(t->n_bytes == 0 || memcmp(t->data, data, t->n_bytes) == 0, "data of '%s'", d[i].name);
        CHECKF(t->file_offset % (int64_t)moe8_dtype_size(t->dtype) == 0, "'%s' at %lld", t->name,
               (long long)t->file_offset);
        CHECK((uintptr_t)t->data % moe8_dtype_size(t->dtype) == 0);
        CHECK(t->file_index == file_index);
        free(data);
    }
}

static uint64_t file_hlen(const char *path) {
    unsigned char b[8] = {0};
    uint64_t v = 0;
    FILE *f = fopen(path, "rb");
    if (f) {
        if (fread(b, 1, 8, f) != 8) b[0] = 0;
        fclose(f);
    }
    for (int i = 7; i >= 0; i--) v = (v << 8) | b[i];
    return v;
}

static const decl all_dtypes[] = {
    {"u8", MOE8_DT_U8, 1, {3}},            /* odd sizes first: the layout must reorder */
    {"bool", MOE8_DT_BOOL, 2, {1, 5}},
    {"bf16", MOE8_DT_BF16, 2, {3, 3}},
    {"f64", MOE8_DT_F64, 1, {3}},
    {"f32", MOE8_DT_F32, 3, {2, 3, 1}},
    {"f16", MOE8_DT_F16, 1, {7}},
    {"i64", MOE8_DT_I64, 1, {2}},
    {"i32", MOE8_DT_I32, 1, {5}},
    {"i16", MOE8_DT_I16, 1, {3}},
    {"i8", MOE8_DT_I8, 8, {1, 2, 1, 2, 1, 1, 1, 3}},
    {"u64", MOE8_DT_U64, 1, {1}},
    {"u32", MOE8_DT_U32, 1, {3}},
    {"u16", MOE8_DT_U16, 1, {1}},
    {"f8e4m3", MOE8_DT_F8_E4M3, 1, {5}},
    {"f8e5m2", MOE8_DT_F8_E5M2, 1, {9}},
    {"scalar", MOE8_DT_F32, 0, {0}},
    {"empty", MOE8_DT_F32, 2, {3, 0}},
    {"model.layers.0.q\"x\\y\n\xe4\xb8\xad", MOE8_DT_BF16, 1, {1}}, /* needs JSON escapes */
};
#define N_ALL (sizeof all_dtypes / sizeof all_dtypes[0])

static void test_round_trip(void) {
    const char *p = path_in(g_dir, "all.safetensors");
    moe8_st *st;
    moe8_error err;
    int64_t last_off[9] = {0};
    write_decls(p, all_dtypes, N_ALL, 1);
    CHECK((8 + file_hlen(p)) % 8 == 0);
    CHECKF(moe8_st_open(p, &st, &err) == MOE8_OK, "%s", err.message);
    if (!st) return;
    CHECK(moe8_st_count(st) == N_ALL);
    CHECK(moe8_st_n_files(st) == 1 && strcmp(moe8_st_file_path(st, 0), p) == 0);
    check_decls(st, all_dtypes, N_ALL, 0);
    CHECK(moe8_st_metadata(st, 0, "format") && !strcmp(moe8_st_metadata(st, 0, "format"), "pt"));
    CHECK(moe8_st_metadata(st, 0, "note") &&
          !strcmp(moe8_st_metadata(st, 0, "note"), "q\"uote\\back\nline \xc3\xa9"));
    CHECK(moe8_st_metadata(st, 0, "absent") == NULL && moe8_st_metadata(st, 1, "format") == NULL);
    CHECK(moe8_st_find(st, "absent") == NULL && moe8_st_get(st, N_ALL) == NULL);
    const moe8_tensor *s = moe8_st_find(st, "scalar");
    CHECK(s && s->n_dims == 0 && s->n_elements == 1 && s->n_bytes == 4);
    s = moe8_st_find(st, "empty");
    CHECK(s && s->n_elements == 0 && s->n_bytes == 0);
    /* Layout: by decreasing dtype size, declaration order within one size;
     * the listing is in data order and tiles the data section. */
    int64_t pos = 8 + (int64_t)file_hlen(p);
    for (size_t i = 0; i < moe8_st_count(st); i++) {
        const moe8_tensor *t = moe8_st_get(st, i);
        CHECK(t->file_offset == pos);
        pos += (int64_t)t->n_bytes;
        if (i) CHECK(moe8_dtype_size(t->dtype) <= moe8_dtype_size(moe8_st_get(st, i - 1)->dtype));
    }
    CHECK(pos == moe8_st_file_size(st, 0));
    for (size_t i = 0; i < N_ALL; i++) {
        const moe8_tensor *t = moe8_st_find(st, all_dtypes[i].name);
        size_t sz = moe8_dtype_size(t->dtype);
        if (t->n_bytes) {
            CHECKF(t->file_offset >= last_off[sz], "'%s' out of declaration order", t->name);
            last_off[sz] = t->file_offset;
        }
    }
    moe8_st_free(st);

    /* The same image through open_buffer. */
    FILE *f = fopen(p, "rb");
    size_t n = 0;
    unsigned char *buf = malloc(4096);
    if (f) {
        n = fread(buf, 1, 4096, f);
        fclose(f);
    }
    CHECKF(moe8_st_open_buffer(buf, n, "img", &st, &err) == MOE8_OK, "%s", err.message);
    check_decls(st, all_dtypes, N_ALL, 0);
    moe8_st_release(st, moe8_st_find(st, "f32")); /* no-op on buffers */
    CHECK(moe8_st_find(st, "f32")->n_elements == 6);
    moe8_st_free(st);
    free(buf);

    /* A file with no tensors at all. */
    write_decls(path_in(g_dir, "none.safetensors"), NULL, 0, 1);
    CHECK(moe8_st_open(path_in(g_dir, "none.safetensors"), &st, &err) == MOE8_OK);
    CHECK(moe8_st_count(st) == 0 && !strcmp(moe8_st_metadata(st, 0, "format"), "pt"));
    moe8_st_free(st);
}

static const decl shard1[] = {
    {"model.embed_tokens.weight", MOE8_DT_BF16, 2, {8, 4}},
    {"model.layers.0.mlp.gate.weight", MOE8_DT_F32, 2, {4, 4}},
};
static const decl shard2[] = {
    {"lm_head.weight", MOE8_DT_F16, 2, {8, 4}},
    {"model.norm.weight", MOE8_DT_F32, 1, {4}},
    {"model.layers.0.mlp.experts.0.down_proj.weight", MOE8_DT_I8, 2, {4, 6}},
};

static void test_sharded(void) {
    char d[1100];
    moe8_st *st;
    moe8_error err;
    fresh_dir(d, "sharded");
    write_decls(path_in(d, "model-00001-of-00002.safetensors"), shard1, 2, 1);
    write_decls(path_in(d, "model-00002-of-00002.safetensors"), shard2, 3, 0);
    write_index(d, "{\"metadata\":{\"total_size\":500},\"weight_map\":{"
                   "\"model.embed_tokens.weight\":\"model-00001-of-00002.safetensors\","
                   "\"lm_head.weight\":\"model-00002-of-00002.safetensors\","
                   "\"model.norm.weight\":\"./model-00002-of-00002.safetensors\","
                   "\"model.layers.0.mlp.gate.weight\":\"model-00001-of-00002.safetensors\"}}");
    /* "./x" and "x" are two spellings of one file: opened twice = duplicates. */
    expect_fail("two spellings", d, MOE8_ERR_FORMAT, "is in both");
    write_index(d, "{\"metadata\":{\"total_size\":500},\"weight_map\":{"
                   "\"model.embed_tokens.weight\":\"model-00001-of-00002.safetensors\","
                   "\"lm_head.weight\":\"model-00002-of-00002.safetensors\","
                   "\"model.norm.weight\":\"model-00002-of-00002.safetensors\","
                   "\"model.layers.0.mlp.gate.weight\":\"model-00001-of-00002.safetensors\"}}");
    /* A stray file beside the index is ignored. */
    write_st(path_in(d, "stray.safetensors"), "[]", 0);
    CHECKF(moe8_st_open(d, &st, &err) == MOE8_OK, "%s", err.message);
    if (!st) return;
    CHECK(moe8_st_n_files(st) == 2 && moe8_st_count(st) == 5);
    CHECK(strstr(moe8_st_file_path(st, 0), "model-00001-of-00002.safetensors") != NULL);
    check_decls(st, shard1, 2, 0);
    check_decls(st, shard2, 3, 1); /* listed in no index entry, still loaded */
    CHECK(!strcmp(moe8_st_metadata(st, 0, "format"), "pt") && !moe8_st_metadata(st, 1, "format"));
    moe8_st_free(st);

    /* Without an index: every *.safetensors, in name order. */
    unlink(path_in(d, "model.safetensors.index.json"));
    unlink(path_in(d, "stray.safetensors"));
    CHECKF(moe8_st_open(d, &st, &err) == MOE8_OK, "%s", err.message);
    if (!st) return;
    CHECK(moe8_st_n_files(st) == 2 && moe8_st_count(st) == 5);
    check_decls(st, shard1, 2, 0);
    check_decls(st, shard2, 3, 1);
    moe8_st_free(st);
}

/* ~18,000 tensors, as Qwen3-30B: every one found by name. */
static void test_many(void) {
    enum { N_LAYER = 48, N_EXP = 128 };
    const char *p = path_in(g_dir, "many.safetensors");
    moe8_st_writer *w;
    moe8_st *st;
    moe8_error err;
    char name[128];
    int64_t shape[1] = {2};
    int ok = 1;
    CHECK(moe8_st_writer_open(p, &w, &err) == MOE8_OK);
    for (int l = 0; l < N_LAYER; l++)
        for (int e = 0; e < N_EXP * 3; e++) {
            snprintf(name, sizeof name, "model.layers.%d.mlp.experts.%d.proj%d.weight", l, e / 3, e % 3);
            ok &= moe8_st_writer_declare(w, name, MOE8_DT_I8, 1, shape, &err) == MOE8_OK;
        }
    for (int l = 0; l < N_LAYER && ok; l++)
        for (int e = 0; e < N_EXP * 3; e++) {
            unsigned char v[2] = {(unsigned char)l, (unsigned char)e};
            snprintf(name, sizeof name, "model.layers.%d.mlp.experts.%d.proj%d.weight", l, e / 3, e % 3);
            ok &= moe8_st_writer_write(w, name, v, 2, &err) == MOE8_OK;
        }
    CHECKF(ok, "%s", err.message);
    CHECK(moe8_st_writer_finish(w, &err) == MOE8_OK);
    moe8_st_writer_free(w);
    CHECKF(moe8_st_open(p, &st, &err) == MOE8_OK, "%s", err.message);
    if (!st) return;
    CHECK(moe8_st_count(st) == N_LAYER * N_EXP * 3);
    for (int l = 0; l < N_LAYER; l++)
        for (int e = 0; e < N_EXP * 3; e++) {
            const moe8_tensor *t;
            snprintf(name, sizeof name, "model.layers.%d.mlp.experts.%d.proj%d.weight", l, e / 3, e % 3);
            t = moe8_st_find(st, name);
            ok &= t && ((const unsigned char *)t->data)[0] == (unsigned char)l &&
                  ((const unsigned char *)t->data)[1] == (unsigned char)e;
        }
    CHECK(ok);
    CHECK(moe8_st_find(st, "model.layers.48.mlp.experts.0.proj0.weight") == NULL);
    moe8_st_free(st);
}

static void test_writer_errors(void) {
    char d[1100];
    const char *p;
    moe8_st_writer *w;
    moe8_error err;
    int64_t shape[9] = {2, 3, 1, 1, 1, 1, 1, 1, 1}, neg[2] = {2, -1};
    int64_t big[3] = {(int64_t)1 << 40, (int64_t)1 << 40, 4};
    unsigned char data[64] = {0};
    fresh_dir(d, "werr");
    p = path_in(d, "out.safetensors");
    CHECK(moe8_st_writer_open(p, &w, &err) == MOE8_OK);
    CHECK(count_entries(d, ".tmp.") == 1 && !exists(p));
    CHECK(moe8_st_writer_declare(w, "a", MOE8_DT_F32, 2, shape, &err) == MOE8_OK);
    CHECK(moe8_st_writer_declare(w, "a", MOE8_DT_F32, 1, shape, &err) == MOE8_ERR_INVALID_ARG &&
          strstr(err.message, "duplicate tensor name 'a'"));
    CHECK(moe8_st_writer_declare(w, "b", MOE8_DT_COUNT, 1, shape, &err) == MOE8_ERR_INVALID_ARG &&
          strstr(err.message, "invalid dtype"));
    CHECK(moe8_st_writer_declare(w, "b", MOE8_DT_U8, 9, shape, &err) == MOE8_ERR_INVALID_ARG &&
          strstr(err.message, "9 dims"));
    CHECK(moe8_st_writer_declare(w, "b", MOE8_DT_U8, 2, neg, &err) == MOE8_ERR_INVALID_ARG &&
          strstr(err.message, "negative dim shape[1] = -1"));
    CHECK(moe8_st_writer_declare(w, "b", MOE8_DT_U8, 3, big, &err) == MOE8_ERR_INVALID_ARG &&
          strstr(err.message, "size overflows"));
    CHECK(moe8_st_writer_declare(w, "__metadata__", MOE8_DT_U8, 1, shape, &err) == MOE8_ERR_INVALID_ARG);
    CHECK(moe8_st_writer_declare(w, "b", MOE8_DT_U8, 1, shape, &err) == MOE8_OK);
    CHECK(moe8_st_writer_metadata(w, "k", "v", &err) == MOE8_OK);
    CHECK(moe8_st_writer_metadata(w, "k", "w", &err) == MOE8_ERR_INVALID_ARG &&
          strstr(err.message, "duplicate metadata key 'k'"));
    CHECK(moe8_st_writer_write(w, "a", data, 20, &err) == MOE8_ERR_INVALID_ARG &&
          strstr(err.message, "tensor 'a': 20 bytes given, declared shape needs 24"));
    CHECK(moe8_st_writer_write(w, "zz", data, 2, &err) == MOE8_ERR_INVALID_ARG &&
          strstr(err.message, "tensor 'zz' was not declared"));
    CHECK(moe8_st_writer_write(w, "b", data, 2, &err) == MOE8_OK);
    CHECK(moe8_st_writer_write(w, "b", data, 2, &err) == MOE8_ERR_INVALID_ARG &&
          strstr(err.message, "tensor 'b' written twice"));
    CHECK(moe8_st_writer_declare(w, "c", MOE8_DT_U8, 1, shape, &err) == MOE8_ERR_INVALID_ARG &&
          strstr(err.message, "declared after data was written"));
    CHECK(moe8_st_writer_metadata(w, "k2", "v", &err) == MOE8_ERR_INVALID_ARG);
    CHECK(moe8_st_writer_finish(w, &err) == MOE8_ERR_INVALID_ARG &&
          strstr(err.message, "tensor 'a' was declared but never written"));
    CHECK(!exists(p)); /* never a partial file at the final path */
    moe8_st_writer_free(w);
    CHECK(count_entries(d, ".tmp.") == 0 && !exists(p));

    /* An existing file stays intact until finish replaces it whole. */
    write_decls(p, shard1, 2, 0);
    CHECK(moe8_st_writer_open(p, &w, &err) == MOE8_OK);
    CHECK(moe8_st_writer_declare(w, "only", MOE8_DT_U8, 1, shape, &err) == MOE8_OK);
    CHECK(moe8_st_writer_write(w, "only", data, 2, &err) == MOE8_OK);
    moe8_st *st;
    CHECK(moe8_st_open(p, &st, &err) == MOE8_OK && moe8_st_count(st) == 2);
    moe8_st_free(st);
    CHECK(moe8_st_writer_finish(w, &err) == MOE8_OK);
    CHECK(moe8_st_writer_finish(w, &err) == MOE8_ERR_INVALID_ARG);
    moe8_st_writer_free(w);
    CHECK(count_entries(d, ".tmp.") == 0);
    CHECK(moe8_st_open(p, &st, &err) == MOE8_OK && moe8_st_count(st) == 1 &&
          moe8_st_find(st, "only") != NULL);
    moe8_st_free(st);
    CHECK(moe8_st_writer_open(path_in(d, "no/such/dir.safetensors"), &w, &err) == MOE8_ERR_IO &&
          strstr(err.message, "cannot create") && w == NULL);
    moe8_st_writer_free(NULL);
    moe8_st_free(NULL);
}

/* Released pages come back from the file with the same bytes. */
static void test_release(void) {
    decl big = {"big", MOE8_DT_F32, 2, {64, 1024}};
    const char *p = path_in(g_dir, "release.safetensors");
    moe8_st *st;
    moe8_error err;
    unsigned char *data = decl_data(&big, 0);
    write_decls(p, &big, 1, 0);
    CHECK(moe8_st_open(p, &st, &err) == MOE8_OK);
    const moe8_tensor *t = moe8_st_find(st, "big");
    CHECK(t && memcmp(t->data, data, t->n_bytes) == 0);
    moe8_st_release(st, t);
    CHECK(memcmp(t->data, data, t->n_bytes) == 0);
    moe8_st_free(st);
    free(data);
}

/* ======================================================================== */
/* Conversions                                                               */
/* ======================================================================== */

/* Independent decoders: sign * significand * 2^exponent with ldexp. */
static double ref_f16(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 0x3ff;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m + 1024, e - 25);
    return (h & 0x8000) ? -v : v;
}

static double ref_bf16(uint16_t h) {
    int e = (h >> 7) & 255, m = h & 0x7f;
    double v = e == 0 ? ldexp(m, -133) : e == 255 ? (m ? NAN : INFINITY) : ldexp(m + 128, e - 134);
    return (h & 0x8000) ? -v : v;
}

/* Round v to `bits` significant bits (min normal exponent emin), ties to
 * even, overflow past max_finite to inf: all in double arithmetic. */
static double ref_round(double v, int bits, int emin, double max_finite) {
    int e;
    double ulp, r;
    if (v == 0 || isnan(v) || isinf(v)) return v;
    frexp(v, &e);
    e -= 1; /* exponent of the leading bit */
    if (e < emin) e = emin;
    ulp = ldexp(1.0, e - (bits - 1));
    r = nearbyint(v / ulp) * ulp;
    if (fabs(r) > max_finite) r = copysign(INFINITY, v);
    if (r == 0) r = copysign(0.0, v);
    return r;
}

static float f32_of(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static int same(double a, double b) {
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    return a == b && signbit(a) == signbit(b);
}

static void check_narrow(float x) {
    double r16 = ref_round(x, 11, -14, 65504.0);
    double rb = ref_round(x, 8, -126, ldexp(255, 120));
    uint16_t h = moe8_f32_to_f16(x), b = moe8_f32_to_bf16(x);
    CHECKF(same(ref_f16(h), r16), "f16(%a) = 0x%04x, expected %a", x, h, r16);
    CHECKF(same(ref_bf16(b), rb), "bf16(%a) = 0x%04x, expected %a", x, b, rb);
}

static void test_conversions(void) {
    int bad16 = 0, badb = 0, badrt = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        double r = ref_f16((uint16_t)h);
        float f = moe8_f16_to_f32((uint16_t)h);
        bad16 += !same(f, r);
        badb += !same(moe8_bf16_to_f32((uint16_t)h), ref_bf16((uint16_t)h));
        if (!isnan(r)) badrt += moe8_f32_to_f16(f) != h || moe8_f32_to_bf16(moe8_bf16_to_f32((uint16_t)h)) != h;
    }
    CHECKF(bad16 == 0, "%d f16 codes decode wrong", bad16);
    CHECKF(badb == 0, "%d bf16 codes decode wrong", badb);
    CHECKF(badrt == 0, "%d codes do not round-trip", badrt);

    static const struct { float x; uint16_t f16, bf16; } table[] = {
        {1.0f, 0x3c00, 0x3f80},
        {-2.0f, 0xc000, 0xc000},
        {0.0f, 0x0000, 0x0000},
        {-0.0f, 0x8000, 0x8000},
        {65504.0f, 0x7bff, 0x4780},
        {65519.996f, 0x7bff, 0x4780},
        {65520.0f, 0x7c00, 0x4780},       /* f16 tie at the top rounds to inf */
        {1e9f, 0x7c00, 0x4e6e},
        {-INFINITY, 0xfc00, 0xff80},
        {0x1p-24f, 0x0001, 0x3380},        /* smallest f16 subnormal */
        {0x1p-25f, 0x0000, 0x3300},        /* tie between 0 and 2^-24: even is 0 */
        {0x1.8p-25f, 0x0001, 0x3340},
        {0x1.8p-24f, 0x0002, 0x33c0},      /* tie 1 vs 2 (x 2^-24): even is 2 */
        {0x1.4p-23f, 0x0002, 0x3420},      /* 2.5 x 2^-24: tie, even is 2 */
        {0x1p-14f, 0x0400, 0x3880},        /* smallest f16 normal */
        {0x1.ffcp-15f, 0x0400, 0x3880},    /* largest subnormal rounds up into normal */
        {0x1.002p0f, 0x3c00, 0x3f80},      /* 1 + 2^-11: tie, stays even */
        {0x1.006p0f, 0x3c02, 0x3f80},      /* 1 + 3 x 2^-11: tie, up to even */
        {0x1.01p0f, 0x3c04, 0x3f80},       /* 1 + 2^-8: bf16 tie, stays even */
        {0x1.03p0f, 0x3c0c, 0x3f82},       /* 1 + 3 x 2^-8: bf16 tie, up to even */
        {FLT_MAX, 0x7c00, 0x7f80},
        {0x1.fep127f, 0x7c00, 0x7f7f},     /* largest finite bf16 */
        {0x1p-149f, 0x0000, 0x0000},       /* f32 subnormals */
        {0x1.8p-133f, 0x0000, 0x0002},     /* bf16 subnormal tie 1 vs 2: even 2 */
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        CHECKF(moe8_f32_to_f16(table[i].x) == table[i].f16, "f16(%a) = 0x%04x, expected 0x%04x",
               table[i].x, moe8_f32_to_f16(table[i].x), table[i].f16);
        CHECKF(moe8_f32_to_bf16(table[i].x) == table[i].bf16, "bf16(%a) = 0x%04x, expected 0x%04x",
               table[i].x, moe8_f32_to_bf16(table[i].x), table[i].bf16);
        check_narrow(table[i].x);
    }
    /* NaN stays NaN, even one whose payload sits in the dropped bits. */
    float nans[3] = {NAN, f32_of(0x7f800001u), f32_of(0xff800100u)};
    for (int i = 0; i < 3; i++) {
        CHECK(isnan(moe8_f16_to_f32(moe8_f32_to_f16(nans[i]))));
        CHECK(isnan(moe8_bf16_to_f32(moe8_f32_to_bf16(nans[i]))));
    }
    /* Random values: raw bit patterns, and values spread over the f16 range. */
    test_rng rng = {0x9e3779b97f4a7c15ULL};
    for (int i = 0; i < 200000; i++) {
        uint32_t u = (uint32_t)test_rng_u64(&rng);
        check_narrow(f32_of(u));
        check_narrow((float)ldexp(test_rng_normal(&rng), (int)(test_rng_u64(&rng) % 50) - 32));
    }

    /* Bulk conversion, unaligned sources. */
    unsigned char raw[1 + 8 * 4];
    float out[4];
    moe8_error err;
    const uint16_t h16[4] = {0x3c00, 0xc000, 0x0001, 0x7c00}, hb[4] = {0x3f80, 0xc040, 0x0001, 0xff80};
    const double d64[4] = {1.5, -1e300, 1e-50, 3.0};
    const float f32v[4] = {1.25f, -3.0f, 0.0f, 7.0f};
    memcpy(raw + 1, h16, sizeof h16);
    CHECK(moe8_convert_to_f32(out, raw + 1, MOE8_DT_F16, 4, &err) == MOE8_OK);
    CHECK(out[0] == 1.0f && out[1] == -2.0f && out[2] == 0x1p-24f && isinf(out[3]));
    memcpy(raw + 1, hb, sizeof hb);
    CHECK(moe8_convert_to_f32(out, raw + 1, MOE8_DT_BF16, 4, &err) == MOE8_OK);
    CHECK(out[0] == 1.0f && out[1] == -3.0f && out[2] == 0x1p-133f && out[3] == -INFINITY);
    memcpy(raw + 1, d64, sizeof d64);
    CHECK(moe8_convert_to_f32(out, raw + 1, MOE8_DT_F64, 4, &err) == MOE8_OK);
    CHECK(out[0] == 1.5f && out[1] == -INFINITY && out[2] == 0.0f && out[3] == 3.0f);
    memcpy(raw + 1, f32v, sizeof f32v);
    CHECK(moe8_convert_to_f32(out, raw + 1, MOE8_DT_F32, 4, &err) == MOE8_OK);
    CHECK(memcmp(out, f32v, sizeof out) == 0);
    CHECK(moe8_convert_to_f32(out, raw, MOE8_DT_I32, 4, &err) == MOE8_ERR_UNSUPPORTED &&
          strstr(err.message, "I32"));

    /* dtype names. */
    for (int i = 0; i < MOE8_DT_COUNT; i++) {
        moe8_dtype dt;
        CHECK(moe8_dtype_parse(moe8_dtype_name((moe8_dtype)i), &dt) == 0 && dt == (moe8_dtype)i);
    }
    CHECK(moe8_dtype_size(MOE8_DT_BF16) == 2 && moe8_dtype_size(MOE8_DT_F64) == 8 &&
          moe8_dtype_size(MOE8_DT_BOOL) == 1 && moe8_dtype_size(MOE8_DT_COUNT) == 0);
    CHECK(moe8_dtype_parse("bf16", NULL) == -1 && moe8_dtype_parse("F8_E4M3", NULL) == 0);
}

int main(void) {
    const char *tmp = test_tmpdir("safetensors");
    if (strlen(tmp) >= sizeof g_dir) return 2;
    memcpy(g_dir, tmp, strlen(tmp) + 1);
    test_conversions();
    test_bad_files();
    test_bad_folders();
    test_strict_index();
    test_fifo();
    test_round_trip();
    test_sharded();
    test_many();
    test_writer_errors();
    test_release();
    return test_summary();
}
