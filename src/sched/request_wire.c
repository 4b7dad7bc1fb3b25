/*
 * request_wire.c — moe8_request as bytes (request_wire.h): what rank 0 of a
 * TP/EP group sends the other ranks so their schedulers take the same
 * requests (SEMANTICS §8).
 *
 * Every field of moe8_request is named once in FIELDS: a value sent as its
 * bytes, an array or strings sent after all values (their counts are values),
 * or a field kept by rank 0 with the reason. test_sched checks that FIELDS
 * covers every byte of the struct but its padding, and the size below stops
 * the build when the struct changes, so a new field cannot be forgotten.
 *
 * Wire: the values in FIELDS order, then each array (count × element bytes),
 * each string list (count NUL-terminated strings) and each string (a byte
 * 0/1 for NULL or not, then the NUL-terminated string). Written and read by
 * the same build on every rank (native byte order).
 */
#include <stdalign.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "sched/request_wire.h"

typedef enum { W_VALUE, W_ARRAY, W_STRINGS, W_STRING, W_LOCAL } wire_kind;

typedef struct {
    const char *name;
    size_t off, size, align; /* of the field in moe8_request (align: of the
                              * struct it opens, for a nested struct's first) */
    wire_kind kind;
    size_t elem;      /* W_ARRAY: bytes of one element */
    size_t count_off; /* W_ARRAY, W_STRINGS: offset of its int32_t count */
    const char *why;  /* W_LOCAL: why the other ranks do not need it */
} wire_field;

#define F_(f) offsetof(moe8_request, f), sizeof(((moe8_request *)0)->f), \
              alignof(__typeof__(((moe8_request *)0)->f))
#define VALUE(f) {#f, F_(f), W_VALUE, 0, 0, NULL}
#define ARRAY(f, n) {#f, F_(f), W_ARRAY, sizeof *((moe8_request *)0)->f, offsetof(moe8_request, n), NULL}
#define STRINGS(f, n) {#f, F_(f), W_STRINGS, 0, offsetof(moe8_request, n), NULL}
#define STRING(f) {#f, F_(f), W_STRING, 0, 0, NULL}
#define FIRST_VALUE(f, outer) {#f, offsetof(moe8_request, f), sizeof(((moe8_request *)0)->f), \
                              alignof(outer), W_VALUE, 0, 0, NULL}
#define LOCAL(f, why) {#f, F_(f), W_LOCAL, 0, 0, why}

static const wire_field FIELDS[] = {
    ARRAY(prompt, n_prompt),
    VALUE(n_prompt),
    FIRST_VALUE(sampling.temperature, moe8_sampler_params),
    VALUE(sampling.top_k),
    VALUE(sampling.top_p),
    VALUE(sampling.min_p),
    VALUE(sampling.seed),
    VALUE(max_tokens),
    ARRAY(stop_ids, n_stop_ids),
    VALUE(n_stop_ids),
    STRINGS(stop, n_stop),
    VALUE(n_stop),
    VALUE(logprobs),
    VALUE(ignore_eos),
    LOCAL(user, "each rank's own (its events are its own)"),
    VALUE(n_prompt_logits),
    ARRAY(bias_ids, n_bias),
    ARRAY(bias, n_bias),
    VALUE(n_bias),
    VALUE(min_tokens),
    VALUE(repetition_penalty),
    VALUE(frequency_penalty),
    VALUE(presence_penalty),
    LOCAL(grammar, "rank 0 draws every token and decides every finish; the others follow"),
    LOCAL(grammar_after, "belongs to the grammar, which rank 0 keeps"),
};
enum { N_FIELDS = sizeof FIELDS / sizeof FIELDS[0] };

/* The struct this table describes (LP64): a new field of moe8_request stops
 * the build here until FIELDS names it. */
#if UINTPTR_MAX == UINT64_MAX
_Static_assert(sizeof(moe8_request) == 160, "moe8_request changed: describe the new field in FIELDS");
#endif

static int32_t count_of(const moe8_request *r, const wire_field *f) {
    int32_t n;
    memcpy(&n, (const char *)r + f->count_off, sizeof n);
    return n;
}

static const void *ptr_of(const moe8_request *r, const wire_field *f) {
    const void *p;
    memcpy(&p, (const char *)r + f->off, sizeof p);
    return p;
}

/* Bytes of r's wire form; written to out when out is not NULL. */
static size_t put(const moe8_request *r, unsigned char *out) {
    size_t at = 0;
#define EMIT(src, n)                                   \
    do {                                               \
        if (out && (n) != 0) memcpy(out + at, (src), (n)); \
        at += (n);                                     \
    } while (0)
    for (int i = 0; i < N_FIELDS; i++)
        if (FIELDS[i].kind == W_VALUE) EMIT((const char *)r + FIELDS[i].off, FIELDS[i].size);
    for (int i = 0; i < N_FIELDS; i++) {
        const wire_field *f = &FIELDS[i];
        const void *p = ptr_of(r, f);
        if (f->kind == W_ARRAY) {
            const int32_t n = count_of(r, f);
            if (n > 0) EMIT(p, (size_t)n * f->elem);
        } else if (f->kind == W_STRINGS) {
            const char *const *s = p;
            for (int32_t k = 0; k < count_of(r, f); k++) EMIT(s[k], strlen(s[k]) + 1);
        } else if (f->kind == W_STRING) {
            const unsigned char has = p != NULL;
            EMIT(&has, 1);
            if (has) EMIT(p, strlen(p) + 1);
        }
    }
#undef EMIT
    return at;
}

size_t moe8_request_wire_size(const moe8_request *r) { return put(r, NULL); }
void moe8_request_wire_put(const moe8_request *r, unsigned char *out) { put(r, out); }

moe8_status moe8_request_wire_get(const unsigned char *buf, size_t n, size_t *at, moe8_request *r,
                                  const char **strs, moe8_error *err) {
    *r = moe8_request_default();
    for (int i = 0; i < N_FIELDS; i++) {
        const wire_field *f = &FIELDS[i];
        if (f->kind != W_VALUE) continue;
        if (n - *at < f->size)
            return moe8_fail(err, MOE8_ERR_COMM, -1, "request message: short at field %s", f->name);
        memcpy((char *)r + f->off, buf + *at, f->size);
        *at += f->size;
    }
    for (int i = 0; i < N_FIELDS; i++) {
        const wire_field *f = &FIELDS[i];
        const void *p = buf + *at;
        if (f->kind == W_ARRAY) {
            const int32_t c = count_of(r, f);
            if (c < 0 || (size_t)c > (n - *at) / f->elem)
                return moe8_fail(err, MOE8_ERR_COMM, -1, "request message: %d elements of %s, "
                                 "%zu bytes left", c, f->name, n - *at);
            if (c == 0) p = NULL;
            *at += (size_t)c * f->elem;
        } else if (f->kind == W_STRINGS) {
            const int32_t c = count_of(r, f);
            if (c < 0 || c > MOE8_MAX_STOP_STRINGS)
                return moe8_fail(err, MOE8_ERR_COMM, -1, "request message: %d strings of %s "
                                 "(at most %d)", c, f->name, MOE8_MAX_STOP_STRINGS);
            for (int32_t k = 0; k < c; k++) {
                const unsigned char *z = memchr(buf + *at, 0, n - *at);
                if (!z)
                    return moe8_fail(err, MOE8_ERR_COMM, -1, "request message: %s[%d] unterminated",
                                     f->name, k);
                strs[k] = (const char *)(buf + *at);
                *at = (size_t)(z - buf) + 1;
            }
            p = strs;
        } else if (f->kind == W_STRING) {
            const unsigned char *z;
            if (n - *at < 1 || buf[*at] > 1)
                return moe8_fail(err, MOE8_ERR_COMM, -1, "request message: bad %s", f->name);
            if (!buf[(*at)++]) {
                p = NULL;
            } else if (!(z = memchr(buf + *at, 0, n - *at))) {
                return moe8_fail(err, MOE8_ERR_COMM, -1, "request message: %s unterminated", f->name);
            } else {
                p = buf + *at;
                *at = (size_t)(z - buf) + 1;
            }
        } else {
            continue; /* values read above; W_LOCAL keeps its default */
        }
        memcpy((char *)r + f->off, &p, sizeof p);
    }
    return MOE8_OK;
}

int moe8_request_wire_covers(char *why, size_t cap) {
    size_t order[N_FIELDS], pos = 0;
    for (int i = 0; i < N_FIELDS; i++) order[i] = (size_t)i;
    for (int i = 1; i < N_FIELDS; i++) /* by offset (insertion sort: a handful) */
        for (int j = i; j > 0 && FIELDS[order[j]].off < FIELDS[order[j - 1]].off; j--) {
            const size_t t = order[j];
            order[j] = order[j - 1], order[j - 1] = t;
        }
    for (int i = 0; i < N_FIELDS; i++) {
        const wire_field *f = &FIELDS[order[i]];
        if (f->off < pos) {
            snprintf(why, cap, "field %s (offset %zu) overlaps the one before", f->name, f->off);
            return 0;
        }
        if (f->off - pos >= f->align) { /* more than padding */
            snprintf(why, cap, "bytes [%zu, %zu) before %s are described by no field", pos, f->off,
                     f->name);
            return 0;
        }
        pos = f->off + f->size;
    }
    if (sizeof(moe8_request) - pos >= alignof(moe8_request)) {
        snprintf(why, cap, "bytes [%zu, %zu) at the end are described by no field", pos,
                 sizeof(moe8_request));
        return 0;
    }
    snprintf(why, cap, "%d fields cover %zu of %zu bytes (the rest padding)", N_FIELDS, pos,
             sizeof(moe8_request));
    return 1;
}
