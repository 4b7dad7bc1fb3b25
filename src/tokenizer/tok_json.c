/*
 * tok_json.c — parses tokenizer.json into a read-only cJSON tree whose nodes
 * and strings live in one arena (a few large blocks) instead of a malloc per
 * node: Qwen3's 11 MB file is ~10^6 nodes and strings, and their mallocs
 * and frees were most of a tokenizer load's CPU (~0.2 CPU-s a process,
 * ~1 s under ASan). The tree is a real cJSON tree (the cJSON_Get*, Is*,
 * ArrayForEach readers of tok_load.c and tok_norm.c walk it as before), but
 * only moe8_tok_json_free releases it: never cJSON_Delete, never add to it.
 *
 * Same language and the same strictness as moe8_json_parse (io/json_util.c),
 * whose messages it repeats: a syntax error names the byte near it, nothing
 * but whitespace may follow the value, and no object anywhere may hold a key
 * twice (checked after the parse, in the same order, with the same path in
 * the message). Strings are decoded as cJSON decodes them (\uXXXX with
 * surrogate pairs to UTF-8, other bytes copied; a \u0000 ends the C string),
 * numbers are strtod of a JSON number (valueint saturated as cJSON does), a
 * leading UTF-8 BOM is skipped, nesting stops at cJSON's 1000 levels.
 * Stricter than cJSON only where cJSON accepts what JSON does not: a \u with
 * a non-hex digit (cJSON reads a NUL) and a number ending in '.' are refused.
 * Under AddressSanitizer every node and string is its own addressable island
 * between poisoned gaps, so reads past one are still reported.
 */
#include <limits.h>
#include <stdio.h>
#include <sys/mman.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "io/json_util.h"
#include "tokenizer/tokenizer.h"

#if defined(__SANITIZE_ADDRESS__)
#define TJ_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TJ_ASAN 1
#endif
#endif
#ifdef TJ_ASAN
#include <sanitizer/asan_interface.h>
#define TJ_GAP 16   /* poisoned bytes after each piece */
#else
#define ASAN_POISON_MEMORY_REGION(p, n) ((void)(p), (void)(n))
#define ASAN_UNPOISON_MEMORY_REGION(p, n) ((void)(p), (void)(n))
#define TJ_GAP 0
#endif

#define TJ_DEPTH 1000             /* cJSON's CJSON_NESTING_LIMIT */
#define TJ_BLOCK ((size_t)1 << 20) /* first block; later ones double up to 16 MiB */
#define TJ_PATH 256               /* json_util.c's path buffer */

/* ---- arena --------------------------------------------------------------- */

typedef struct tj_block {
    struct tj_block *next;
    size_t used, cap;                 /* bytes of data[] */
    _Alignas(16) unsigned char data[];
} tj_block;

struct moe8_tok_json {
    tj_block *head;
    size_t next_cap;
};

void moe8_tok_json_free(moe8_tok_json *a) {
    if (!a) return;
    for (tj_block *b = a->head, *n; b; b = n) {
        n = b->next;
        ASAN_UNPOISON_MEMORY_REGION(b->data, b->cap);
        munmap(b, sizeof *b + b->cap);
    }
    free(a);
}

/* n bytes, 8-aligned; NULL when out of memory. */
static void *tj_alloc(moe8_tok_json *a, size_t n) {
    const size_t need = ((n + 7) & ~(size_t)7) + TJ_GAP;
    tj_block *b = a->head;
    if (!b || b->cap - b->used < need) {
        size_t cap = a->next_cap;
        if (cap < need) cap = need;
        /* its pages faulted in at once: one fault per page cost as much as the parse */
        b = mmap(NULL, sizeof *b + cap, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
        if (b == MAP_FAILED) return NULL;
        b->next = a->head, b->used = 0, b->cap = cap;
        a->head = b;
        if (a->next_cap < ((size_t)4 << 20)) a->next_cap *= 2;
        ASAN_POISON_MEMORY_REGION(b->data, cap);
    }
    void *p = b->data + b->used;
    b->used += need;
    ASAN_UNPOISON_MEMORY_REGION(p, n);
    return p;
}

/* ---- parser -------------------------------------------------------------- */

typedef struct {
    const char *s, *p, *end;          /* the text, the cursor, its end */
    moe8_tok_json *a;
    int depth, nomem;
} tj;

static void skip_ws(tj *J) {
    while (J->p < J->end && (*J->p == ' ' || *J->p == '\t' || *J->p == '\n' || *J->p == '\r'))
        J->p++;
}

static cJSON *new_node(tj *J, int type) {
    cJSON *c = tj_alloc(J->a, sizeof *c);
    if (!c) {
        J->nomem = 1;
        return NULL;
    }
    c->type = type;   /* the rest is zero: the arena's pages are fresh and never reused */
    return c;
}

static int hex4(const char *p, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        const char ch = p[i];
        v <<= 4;
        if (ch >= '0' && ch <= '9') v |= (unsigned)(ch - '0');
        else if (ch >= 'a' && ch <= 'f') v |= (unsigned)(ch - 'a' + 10);
        else if (ch >= 'A' && ch <= 'F') v |= (unsigned)(ch - 'A' + 10);
        else return -1;
    }
    *out = v;
    return 0;
}

/* A \u escape at p (the backslash) into UTF-8 at *o; the bytes consumed, 0 if invalid. */
static size_t utf16_escape(const char *p, const char *end, char **o) {
    unsigned cp, lo;
    size_t used = 6;
    unsigned char *u = (unsigned char *)*o;
    if (end - p < 6 || hex4(p + 2, &cp)) return 0;
    if (cp >= 0xDC00 && cp <= 0xDFFF) return 0;
    if (cp >= 0xD800 && cp <= 0xDBFF) {
        if (end - p < 12 || p[6] != '\\' || p[7] != 'u' || hex4(p + 8, &lo) || lo < 0xDC00 ||
            lo > 0xDFFF)
            return 0;
        cp = 0x10000 + (((cp & 0x3FF) << 10) | (lo & 0x3FF));
        used = 12;
    }
    if (cp < 0x80) *u++ = (unsigned char)cp;
    else if (cp < 0x800) *u++ = (unsigned char)(0xC0 | cp >> 6), *u++ = (unsigned char)(0x80 | (cp & 0x3F));
    else if (cp < 0x10000)
        *u++ = (unsigned char)(0xE0 | cp >> 12), *u++ = (unsigned char)(0x80 | (cp >> 6 & 0x3F)),
        *u++ = (unsigned char)(0x80 | (cp & 0x3F));
    else
        *u++ = (unsigned char)(0xF0 | cp >> 18), *u++ = (unsigned char)(0x80 | (cp >> 12 & 0x3F)),
        *u++ = (unsigned char)(0x80 | (cp >> 6 & 0x3F)), *u++ = (unsigned char)(0x80 | (cp & 0x3F));
    *o = (char *)u;
    return used;
}

/* The string at the cursor (on its opening quote), decoded into the arena. */
static char *parse_string(tj *J) {
    const char *q = J->p + 1, *p;
    char *out, *o;
    while (q < J->end && *q != '"') q += *q == '\\' ? 2 : 1;
    if (q >= J->end) return NULL;     /* unterminated */
    if (!(out = tj_alloc(J->a, (size_t)(q - J->p)))) {   /* decoded is never longer */
        J->nomem = 1;
        return NULL;
    }
    for (o = out, p = J->p + 1; p < q;) {
        if (*p != '\\') {
            *o++ = *p++;
            continue;
        }
        size_t k = 2;
        switch (p[1]) {
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case '"': case '\\': case '/': *o++ = p[1]; break;
        case 'u': k = utf16_escape(p, q, &o); break;
        default: k = 0;
        }
        if (!k) {
            J->p = p;
            return NULL;
        }
        p += k;
    }
    *o = '\0';
    J->p = q + 1;
    return out;
}

static int digits(tj *J) {
    const char *s = J->p;
    while (J->p < J->end && *J->p >= '0' && *J->p <= '9') J->p++;
    return J->p > s;
}

static cJSON *parse_number(tj *J) {
    const char *s = J->p;
    char buf[64], *stop;
    cJSON *c;
    if (J->p < J->end && *J->p == '-') J->p++;
    if (!digits(J)) return NULL;
    if (J->p < J->end && *J->p == '.' && (J->p++, !digits(J))) return NULL;
    if (J->p < J->end && (*J->p == 'e' || *J->p == 'E')) {
        J->p++;
        if (J->p < J->end && (*J->p == '+' || *J->p == '-')) J->p++;
        if (!digits(J)) return NULL;
    }
    if ((size_t)(J->p - s) >= sizeof buf) return NULL;
    memcpy(buf, s, (size_t)(J->p - s));
    buf[J->p - s] = '\0';
    if (!(c = new_node(J, cJSON_Number))) return NULL;
    c->valuedouble = strtod(buf, &stop);
    c->valueint = c->valuedouble >= INT_MAX ? INT_MAX : c->valuedouble <= (double)INT_MIN ? INT_MIN
                  : (int)c->valuedouble;
    return c;
}

static cJSON *parse_value(tj *J);

/* An array or object at the cursor (its opening bracket). */
static cJSON *parse_container(tj *J, int object) {
    const char close = object ? '}' : ']';
    cJSON *c, *tail = NULL;
    if (J->depth >= TJ_DEPTH || !(c = new_node(J, object ? cJSON_Object : cJSON_Array)))
        return NULL;
    J->depth++;
    J->p++;
    skip_ws(J);
    if (J->p < J->end && *J->p == close) {
        J->p++, J->depth--;
        return c;
    }
    for (;;) {
        char *key = NULL;
        cJSON *v;
        skip_ws(J);
        if (object) {
            if (J->p >= J->end || *J->p != '"' || !(key = parse_string(J))) return NULL;
            skip_ws(J);
            if (J->p >= J->end || *J->p != ':') return NULL;
            J->p++;
            skip_ws(J);
        }
        if (!(v = parse_value(J))) return NULL;
        v->string = key;
        if (tail) tail->next = v, v->prev = tail;
        else c->child = v;
        tail = v;
        skip_ws(J);
        if (J->p < J->end && *J->p == ',') {
            J->p++;
            continue;
        }
        if (J->p >= J->end || *J->p != close) return NULL;
        J->p++;
        break;
    }
    c->child->prev = tail;   /* cJSON's convention: the first child's prev is the last */
    J->depth--;
    return c;
}

static cJSON *literal(tj *J, const char *word, int type) {
    const size_t n = strlen(word);
    if ((size_t)(J->end - J->p) < n || memcmp(J->p, word, n) != 0) return NULL;
    J->p += n;
    return new_node(J, type);
}

static cJSON *parse_value(tj *J) {
    cJSON *c;
    if (J->p >= J->end) return NULL;
    switch (*J->p) {
    case '{': return parse_container(J, 1);
    case '[': return parse_container(J, 0);
    case 't': return literal(J, "true", cJSON_True);
    case 'f': return literal(J, "false", cJSON_False);
    case 'n': return literal(J, "null", cJSON_NULL);
    case '"': {
        char *s = parse_string(J);
        if (!s || !(c = new_node(J, cJSON_String))) return NULL;
        c->valuestring = s;
        return c;
    }
    default: return parse_number(J);
    }
}

/* ---- duplicate keys: json_util.c's check_tree, on this tree ---------------- */

typedef struct tj_at {
    const struct tj_at *up;
    const char *key;
    int index;
} tj_at;

static size_t path_of(const tj_at *f, char *path) {
    if (!f->up) return 0;
    const size_t n = path_of(f->up, path);
    int k;
    if (f->key) k = snprintf(path + n, TJ_PATH - n, "%s%.64s", n ? "." : "", f->key);
    else k = snprintf(path + n, TJ_PATH - n, "[%d]", f->index);
    k = k < 0 ? 0 : n + (size_t)k < TJ_PATH ? k : (int)(TJ_PATH - 1 - n);
    return n + (size_t)k;
}

static moe8_status check_keys(const cJSON *item, const tj_at *f, const char *label,
                              moe8_error *err) {
    moe8_status s = MOE8_OK;
    int i = 0;
    if (cJSON_IsObject(item) && item->child && item->child->next) {
        char path[TJ_PATH] = "";
        path_of(f, path);
        if ((s = moe8_json_check_unique_keys(item, label, path, err)) != MOE8_OK) return s;
    }
    for (const cJSON *c = item->child; c && s == MOE8_OK; c = c->next, i++) {
        if (!cJSON_IsObject(c) && !cJSON_IsArray(c)) continue;
        const tj_at kid = {f, cJSON_IsObject(item) ? c->string : NULL, i};
        s = check_keys(c, &kid, label, err);
    }
    return s;
}

/* ---- entry --------------------------------------------------------------- */

moe8_status moe8_tok_json_parse(const char *text, size_t len, const char *label, cJSON **out,
                                moe8_tok_json **arena, moe8_error *err) {
    tj J = {text, text, text + len, NULL, 0, 0};
    const tj_at top = {NULL, NULL, 0};
    cJSON *root;
    moe8_status s;
    *out = NULL, *arena = NULL;
    if (!(J.a = calloc(1, sizeof *J.a)))
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "'%s': out of memory", label);
    J.a->next_cap = TJ_BLOCK;
    if (len >= 3 && !memcmp(text, "\xEF\xBB\xBF", 3)) J.p += 3;
    skip_ws(&J);
    root = parse_value(&J);
    if (!root) {
        const long long off = (long long)(J.p - text);
        moe8_tok_json_free(J.a);
        if (J.nomem) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "'%s': out of memory", label);
        return moe8_fail(err, MOE8_ERR_FORMAT, off, "'%s': invalid JSON near byte %lld", label, off);
    }
    skip_ws(&J);
    if (J.p < J.end) {
        const long long off = (long long)(J.p - text);
        moe8_tok_json_free(J.a);
        return moe8_fail(err, MOE8_ERR_FORMAT, off,
                         "'%s': unexpected bytes after the JSON value at byte %lld", label, off);
    }
    if ((s = check_keys(root, &top, label, err)) != MOE8_OK) {
        moe8_tok_json_free(J.a);
        return s;
    }
    *out = root, *arena = J.a;
    return MOE8_OK;
}
