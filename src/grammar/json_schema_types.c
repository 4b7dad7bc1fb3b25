/*
 * json_schema_types.c — the JSON Schema converter's rules for typed schemas
 * (json_schema.c walks the schema and calls moe8_js_typed_rule): integers
 * with bounds compiled exactly into digit grammars, strings with
 * minLength/maxLength, objects (properties, required, additionalProperties,
 * with a key trie for "any other key") and arrays (items, prefixItems,
 * minItems, maxItems). The choices each one makes are listed in
 * json_schema.c's opening comment.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/buf.h"
#include "core/core.h"
#include "grammar/json_schema_impl.h"

#define INT_CAP 9999999999999999LL /* 16 digits */

/* ---- integers in a range ------------------------------------------------------------ */

/* Alternatives for the L-digit numbers in [x, y] (decimal strings of equal length). */
static void digits_range(moe8_buf *b, const char *x, const char *y, size_t n, int *first) {
    size_t p = 0;
    if (n == 0) return;
    while (p < n && x[p] == y[p]) p++;
    if (p == n) {
        if (!*first) moe8_buf_str(b, " | ");
        *first = 0;
        moe8_buf_add(b, "\"", 1), moe8_buf_add(b, x, n), moe8_buf_add(b, "\"", 1);
        return;
    }
    {
        size_t rest = n - p - 1;
        int lo_zero = 1, hi_nine = 1;
        char d0 = x[p], d1 = y[p];
        for (size_t i = p + 1; i < n; i++) lo_zero &= x[i] == '0', hi_nine &= y[i] == '9';
#define PREFIX() do { if (!*first) moe8_buf_str(b, " | "); *first = 0; \
        if (p) moe8_buf_add(b, "\"", 1), moe8_buf_add(b, x, p), moe8_buf_add(b, "\" ", 2); } while (0)
        if (!lo_zero) { /* d0 followed by [x[p+1..], 99..9] */
            char nines[24];
            int f2 = 1;
            moe8_buf sub = {0};
            memset(nines, '9', rest);
            digits_range(&sub, x + p + 1, nines, rest, &f2);
            PREFIX();
            moe8_buf_printf(b, "\"%c\" ( %s )", d0, sub.p ? sub.p : "");
            free(sub.p);
            d0++;
        }
        if (!hi_nine) d1--;
        if (d0 <= d1) {
            PREFIX();
            if (d0 == d1) moe8_buf_printf(b, "\"%c\"", d0);
            else moe8_buf_printf(b, "[%c-%c]", d0, d1);
            if (rest == 1) moe8_buf_str(b, " [0-9]");
            else if (rest > 1) moe8_buf_printf(b, " [0-9]{%zu}", rest);
        }
        if (!hi_nine) { /* y[p] followed by [00..0, y[p+1..]] */
            char zeros[24];
            int f2 = 1;
            moe8_buf sub = {0};
            memset(zeros, '0', rest);
            digits_range(&sub, zeros, y + p + 1, rest, &f2);
            PREFIX();
            moe8_buf_printf(b, "\"%c\" ( %s )", y[p], sub.p ? sub.p : "");
            free(sub.p);
        }
#undef PREFIX
    }
}

/* Alternatives for the non-negative integers in [a, b], without leading zeros. */
static void nonneg_range(moe8_buf *b, long long a, long long hi, int *first) {
    char x[24], y[24];
    long long p10 = 1; /* 10^(len-1) */
    for (int len = 1; len <= 16; len++, p10 *= 10) {
        long long lo_l = len == 1 ? 0 : p10, hi_l = p10 * 10 - 1;
        if (lo_l < a) lo_l = a;
        if (hi_l > hi) hi_l = hi;
        if (lo_l > hi_l) continue;
        snprintf(x, sizeof x, "%lld", lo_l);
        snprintf(y, sizeof y, "%lld", hi_l);
        digits_range(b, x, y, strlen(x), first);
    }
}

static const char *int_range_rule(conv *c, long long lo, long long hi, const char *hint) {
    moe8_buf b = {0};
    int first = 1;
    moe8_buf_str(&b, "( ");
    if (lo < 0) {
        int f2 = 1;
        moe8_buf neg = {0};
        nonneg_range(&neg, hi < 0 ? -hi : 1, -lo, &f2);
        moe8_buf_printf(&b, "\"-\" ( %s )", neg.p ? neg.p : "");
        free(neg.p);
        first = 0;
    }
    if (hi >= 0) nonneg_range(&b, lo > 0 ? lo : 0, hi, &first);
    moe8_buf_str(&b, " ) ");
    moe8_buf_str(&b, moe8_js_prim(c, P_SPACE));
    return moe8_js_add_rule_buf(c, hint, &b);
}

/* A bound keyword of an integer schema as an inclusive integer. */
static int int_bound(conv *c, const cJSON *s, const char *key, int is_min, int exclusive, long long *out) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(s, key);
    double v, r;
    if (!it) return 0;
    if (!cJSON_IsNumber(it)) {
        if (cJSON_IsBool(it))
            moe8_js_fail(c, "'%s' at %s is a boolean (draft 4 style), which is not supported: give the bound "
                         "as a number", key, where(c));
        else moe8_js_fail(c, "'%s' at %s must be a number", key, where(c));
        return -1;
    }
    v = it->valuedouble;
    if (is_min) r = exclusive ? floor(v) + 1 : ceil(v);
    else r = exclusive ? ceil(v) - 1 : floor(v);
    if (is_min) {
        if (r > (double)*out) *out = r >= (double)INT_CAP ? INT_CAP + 1 : (long long)r;
    } else {
        if (r < (double)*out) *out = r <= -(double)INT_CAP ? -INT_CAP - 1 : (long long)r;
    }
    return 0;
}

/* ---- strings, objects, arrays --------------------------------------------------------- */

static const char *string_rule(conv *c, const cJSON *s, const char *hint) {
    int64_t lo, hi;
    char body[320];
    if (moe8_js_get_count(c, s, "minLength", 0, &lo) || moe8_js_get_count(c, s, "maxLength", -1, &hi)) return NULL;
    if (!cJSON_GetObjectItemCaseSensitive(s, "minLength") && !cJSON_GetObjectItemCaseSensitive(s, "maxLength"))
        return moe8_js_prim(c, P_STRING);
    if (hi >= 0 && hi < lo)
        return moe8_js_fail(c, "maxLength %lld < minLength %lld at %s: no string fits", (long long)hi,
                            (long long)lo, where(c)), NULL;
    moe8_js_prim(c, P_CHAR), moe8_js_prim(c, P_SPACE);
    /* the group is cloned per copy by the compiler: each copy keeps one caller */
    if (hi < 0)
        snprintf(body, sizeof body, "\"\\\"\" ( [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" hex4 ) ){%lld,} \"\\\"\" space",
                 (long long)lo);
    else
        snprintf(body, sizeof body, "\"\\\"\" ( [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" hex4 ) ){%lld,%lld} \"\\\"\" space",
                 (long long)lo, (long long)hi);
    return moe8_js_add_rule(c, hint, body);
}

/* Key trie for "a string that is none of these keys". */
typedef struct ktrie {
    uint32_t cp;
    int end;
    struct ktrie *kids, *next;
} ktrie;

static void ktrie_free(ktrie *t) {
    while (t) {
        ktrie *n = t->next;
        ktrie_free(t->kids);
        free(t);
        t = n;
    }
}

/* Rule for the content after the opening quote at trie node t. */
static const char *notkey_rule(conv *c, const ktrie *t, const char *hint) {
    moe8_buf b = {0}, cls = {0};
    const char *name;
    int first = 1;
    if (!t->end) moe8_buf_str(&b, "\"\\\"\" space"), first = 0;
    moe8_buf_str(&cls, "[^\"\\\\\\x7F\\x00-\\x1F");
    for (const ktrie *k = t->kids; k; k = k->next) {
        int raw = k->cp >= 0x20 && k->cp != '"' && k->cp != '\\' && k->cp != 0x7F;
        if (raw) {
            const char *sub = notkey_rule(c, k, hint);
            if (!sub) goto fail;
            moe8_buf_printf(&cls, "\\U%08X", k->cp);
            if (!first) moe8_buf_str(&b, " | ");
            first = 0;
            moe8_buf_printf(&b, "[\\U%08X] %s", k->cp, sub);
        }
    }
    moe8_buf_str(&cls, "]");
    if (!first) moe8_buf_str(&b, " | ");
    moe8_buf_printf(&b, "%s char* \"\\\"\" space", cls.p);
    if (b.oom || cls.oom) {
        moe8_js_oom(c);
        goto fail;
    }
    name = moe8_js_add_rule(c, hint, b.p);
    free(b.p), free(cls.p);
    return name;
fail:
    free(b.p), free(cls.p);
    return NULL;
}

static const char *other_key_rule(conv *c, const cJSON *props, const char *hint) {
    ktrie root = {0};
    const cJSON *p;
    const char *content;
    char body[160];
    for (p = props ? props->child : NULL; p; p = p->next) {
        const uint8_t *s = (const uint8_t *)p->string, *end = s + strlen(p->string);
        ktrie *t = &root;
        while (s < end) {
            uint32_t cp;
            ktrie *k;
            const int len = moe8_utf8_decode(s, (size_t)(end - s), &cp);
            if (len <= 0) {
                ktrie_free(root.kids);
                return moe8_js_fail(c, "a property name at %s is not valid UTF-8", where(c)), NULL;
            }
            for (k = t->kids; k && k->cp != cp; k = k->next)
                ;
            if (!k) {
                if (!(k = calloc(1, sizeof *k))) {
                    ktrie_free(root.kids);
                    return moe8_js_oom(c), NULL;
                }
                k->cp = cp, k->next = t->kids, t->kids = k;
            }
            s += len;
            t = k;
        }
        t->end = 1;
    }
    moe8_js_prim(c, P_CHAR), moe8_js_prim(c, P_SPACE);
    content = notkey_rule(c, &root, hint);
    ktrie_free(root.kids);
    if (!content) return NULL;
    snprintf(body, sizeof body, "\"\\\"\" %s", content);
    return moe8_js_add_rule(c, hint, body);
}

/* is_req[i] set for each property i that 'required' names: 0, or -1 (the error). */
static int mark_required(conv *c, const cJSON *props, const cJSON *req, int *is_req) {
    for (const cJSON *r = req ? req->child : NULL; r; r = r->next) {
        int found = 0, i = 0;
        if (!cJSON_IsString(r)) {
            moe8_js_fail(c, "'required' at %s must be an array of strings", where(c));
            return -1;
        }
        for (const cJSON *p = props ? props->child : NULL; p; p = p->next, i++)
            if (!strcmp(p->string, r->valuestring)) is_req[i] = 1, found = 1;
        if (!found) {
            moe8_js_fail(c, "required property '%s' at %s is not in 'properties'", r->valuestring, where(c));
            return -1;
        }
    }
    return 0;
}

/* The rule `"key" space ":" space value` of property p; NULL on error. */
static const char *property_rule(conv *c, const cJSON *p, const char *hint) {
    const char *val, *kv;
    moe8_buf kb = {0}, key = {0};
    char hbuf[160];
    size_t old = moe8_js_path_push(c, "properties");
    int bad;
    moe8_js_path_push(c, p->string);
    snprintf(hbuf, sizeof hbuf, "%s%s%s", hint, *hint ? "-" : "", p->string);
    val = moe8_js_visit(c, p, hbuf);
    path_pop(c, old);
    if (!val) return NULL;
    /* the key as JSON text spells it (DEL escaped, as llama.cpp), as a GBNF literal */
    bad = moe8_buf_json_str(&key, p->string, strlen(p->string), MOE8_JSON_DEL);
    moe8_js_gbnf_literal(&kb, key.p ? key.p : "", key.n);
    moe8_buf_free(&key);
    moe8_buf_printf(&kb, " space \":\" space %s", val);
    snprintf(hbuf, sizeof hbuf, "%s%s%s-kv", hint, *hint ? "-" : "", p->string);
    if (bad || kb.oom) {
        free(kb.p);
        return moe8_js_oom(c), NULL;
    }
    kv = moe8_js_add_rule(c, hbuf, kb.p);
    free(kb.p);
    return kv;
}

/* The rule of one further key and its value (additionalProperties `add`,
 * true or a schema), the key none of the n declared ones; NULL on error. */
static const char *additional_rule(conv *c, const cJSON *props, int n, const cJSON *add, const char *hint) {
    const char *key, *val, *xkv;
    moe8_buf xb = {0};
    char hbuf[160];
    size_t old;
    snprintf(hbuf, sizeof hbuf, "%s%sadditional-key", hint, *hint ? "-" : "");
    key = n ? other_key_rule(c, props, hbuf) : moe8_js_prim(c, P_STRING);
    if (!key) return NULL;
    old = moe8_js_path_push(c, "additionalProperties");
    snprintf(hbuf, sizeof hbuf, "%s%sadditional", hint, *hint ? "-" : "");
    val = cJSON_IsTrue(add) ? moe8_js_prim(c, P_VALUE) : moe8_js_visit(c, add, hbuf);
    path_pop(c, old);
    if (!val) return NULL;
    moe8_buf_printf(&xb, "%s \":\" space %s", key, val);
    snprintf(hbuf, sizeof hbuf, "%s%sadditional-kv", hint, *hint ? "-" : "");
    xkv = xb.oom ? NULL : moe8_js_add_rule(c, hbuf, xb.p);
    free(xb.p);
    return xkv;
}

/* "{" F(0) "}" into b: F(i) = kv_i A(i+1) when required, ( kv_i A(i+1) | F(i+1) )
 * when optional; A(i) the rest after something was written (commas first),
 * built in tail. xkv: the additional key-value rule or NULL. */
static void object_body(moe8_buf *b, moe8_buf *tail, const char **kv, const int *is_req, int n,
                        const char *xkv) {
    int open = 0, i;
    moe8_buf_str(b, "\"{\" space ");
    for (i = 0; i <= n; i++) {
        /* A(i+1) into tail */
        tail->n = 0;
        if (tail->p) tail->p[0] = 0;
        for (int j = i + 1; j < n; j++) {
            if (is_req[j]) moe8_buf_printf(tail, " \",\" space %s", kv[j]);
            else moe8_buf_printf(tail, " ( \",\" space %s )?", kv[j]);
        }
        if (xkv) moe8_buf_printf(tail, " ( \",\" space %s )*", xkv);
        if (i == n) {
            if (xkv) moe8_buf_printf(b, "( %s ( \",\" space %s )* )?", xkv, xkv);
            break;
        }
        if (is_req[i]) {
            moe8_buf_printf(b, "%s%s", kv[i], tail->p ? tail->p : "");
            break;
        }
        moe8_buf_printf(b, "( %s%s | ", kv[i], tail->p ? tail->p : "");
        open++;
    }
    if (i == n && !xkv && open) moe8_buf_str(b, "\"\""); /* the empty alternative: no property */
    for (; open > 0; open--) moe8_buf_str(b, " )");
    moe8_buf_str(b, " \"}\" space");
}

static const char *object_rule(conv *c, const cJSON *s, const char *hint) {
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
    const cJSON *add = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
    const char **kv = NULL, *xkv = NULL, *name = NULL;
    int *is_req = NULL, n = 0, i = 0;
    moe8_buf b = {0}, tail = {0};
    if (props && !cJSON_IsObject(props))
        return moe8_js_fail(c, "'properties' at %s must be an object", where(c)), NULL;
    if (req && !cJSON_IsArray(req))
        return moe8_js_fail(c, "'required' at %s must be an array of strings", where(c)), NULL;
    if (add && !cJSON_IsBool(add) && !cJSON_IsObject(add))
        return moe8_js_fail(c, "'additionalProperties' at %s must be a boolean or a schema", where(c)), NULL;
    if (!props && (!add || cJSON_IsTrue(add))) { /* any object, as llama.cpp */
        if (req && cJSON_GetArraySize(req) > 0)
            return moe8_js_fail(c, "'required' at %s without 'properties' is not supported", where(c)), NULL;
        return moe8_js_prim(c, P_OBJECT);
    }
    n = cJSON_GetArraySize(props);
    kv = calloc((size_t)n + 1, sizeof *kv);
    is_req = calloc((size_t)n + 1, sizeof *is_req);
    if (!kv || !is_req) {
        moe8_js_oom(c);
        goto out;
    }
    if (mark_required(c, props, req, is_req)) goto out;
    moe8_js_prim(c, P_SPACE);
    c->content++;
    for (const cJSON *p = props ? props->child : NULL; p; p = p->next, i++)
        if (!(kv[i] = property_rule(c, p, hint))) goto out;
    if (add && !cJSON_IsFalse(add) && !(xkv = additional_rule(c, props, n, add, hint))) goto out;
    object_body(&b, &tail, kv, is_req, n, xkv);
    if (b.oom || tail.oom) {
        moe8_js_oom(c);
        goto out;
    }
    name = moe8_js_add_rule(c, *hint ? hint : "obj", b.p);
out:
    free(b.p), free(tail.p), free(kv), free(is_req);
    return name;
}

static const char *array_rule(conv *c, const cJSON *s, const char *hint) {
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
    const cJSON *prefix = cJSON_GetObjectItemCaseSensitive(s, "prefixItems");
    const char **pre = NULL, *rest = NULL, *name = NULL;
    int64_t lo, hi;
    int k = 0, n_explicit;
    moe8_buf b = {0};
    char hbuf[160];
    if (moe8_js_get_count(c, s, "minItems", 0, &lo) || moe8_js_get_count(c, s, "maxItems", -1, &hi)) return NULL;
    if (hi >= 0 && hi < lo)
        return moe8_js_fail(c, "maxItems %lld < minItems %lld at %s: no array fits", (long long)hi, (long long)lo,
                            where(c)), NULL;
    if (prefix && !cJSON_IsArray(prefix)) return moe8_js_fail(c, "'prefixItems' at %s must be an array of schemas", where(c)), NULL;
    if (items && !cJSON_IsObject(items) && !cJSON_IsBool(items))
        return moe8_js_fail(c, "'items' at %s must be a schema (an array of schemas is 'prefixItems')", where(c)), NULL;
    moe8_js_prim(c, P_SPACE);
    c->content++;
    k = prefix ? cJSON_GetArraySize(prefix) : 0;
    if (!(pre = calloc((size_t)k + 1, sizeof *pre))) return moe8_js_oom(c), NULL;
    for (int i = 0; i < k; i++) {
        size_t old = moe8_js_path_push_idx(c, "prefixItems", i);
        snprintf(hbuf, sizeof hbuf, "%s%s%d", hint, *hint ? "-" : "", i);
        pre[i] = moe8_js_visit(c, cJSON_GetArrayItem(prefix, i), hbuf);
        path_pop(c, old);
        if (!pre[i]) goto out;
    }
    if (items && cJSON_IsObject(items)) {
        size_t old = moe8_js_path_push(c, "items");
        snprintf(hbuf, sizeof hbuf, "%s%sitem", hint, *hint ? "-" : "");
        rest = moe8_js_visit(c, items, hbuf);
        path_pop(c, old);
        if (!rest) goto out;
    } else if (cJSON_IsTrue(items) || (!items && !prefix) || (!items && lo > k)) {
        rest = moe8_js_prim(c, P_VALUE);
    } else if (lo > k) {
        moe8_js_fail(c, "minItems %lld at %s needs more items than 'prefixItems' allows", (long long)lo, where(c));
        goto out;
    }
    /* explicit items 0..n_explicit-1 (the tuple, then up to minItems), then a repetition */
    n_explicit = k > lo ? k : (int)lo;
    if (hi >= 0 && n_explicit > hi) n_explicit = (int)hi;
    moe8_buf_str(&b, "\"[\" space ");
    {
        int opened = 0;
        for (int i = 0; i < n_explicit; i++) {
            const char *it = i < k ? pre[i] : rest;
            if (i >= lo) moe8_buf_str(&b, "( "), opened++;
            if (i > 0) moe8_buf_str(&b, "\",\" space ");
            moe8_buf_printf(&b, "%s ", it);
        }
        if (rest && (hi < 0 || n_explicit < hi)) {
            long long more = hi < 0 ? -1 : hi - n_explicit;
            if (n_explicit == 0) {
                if (more == 1) moe8_buf_printf(&b, "%s? ", rest);
                else if (more < 0) moe8_buf_printf(&b, "( %s ( \",\" space %s )* )? ", rest, rest);
                else moe8_buf_printf(&b, "( %s ( \",\" space %s ){0,%lld} )? ", rest, rest, more - 1);
            } else if (more < 0) {
                moe8_buf_printf(&b, "( \",\" space %s )* ", rest);
            } else {
                moe8_buf_printf(&b, "( \",\" space %s ){0,%lld} ", rest, more);
            }
        }
        for (; opened > 0; opened--) moe8_buf_str(&b, ")? ");
    }
    moe8_buf_str(&b, "\"]\" space");
    if (b.oom) {
        moe8_js_oom(c);
        goto out;
    }
    name = moe8_js_add_rule(c, *hint ? hint : "arr", b.p);
out:
    free(b.p), free(pre);
    return name;
}


const char *moe8_js_typed_rule(conv *c, const cJSON *s, unsigned types, const char *hint) {
    const char *alts[7];
    int n = 0;
    if (types & (T_NUMBER | T_INTEGER)) {
        static const char *bk[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
        int bounded = 0;
        for (int i = 0; i < 4; i++)
            if (cJSON_GetObjectItemCaseSensitive(s, bk[i])) {
                if (types & T_NUMBER)
                    return moe8_js_fail(c, "'%s' at %s is only supported with \"type\": \"integer\"", bk[i], where(c)), NULL;
                bounded = 1;
            }
        if (types & T_NUMBER) alts[n++] = moe8_js_prim(c, P_NUMBER);
        else if (!bounded) alts[n++] = moe8_js_prim(c, P_INTEGER);
        else {
            long long lo = -INT_CAP, hi = INT_CAP;
            if (int_bound(c, s, "minimum", 1, 0, &lo) || int_bound(c, s, "exclusiveMinimum", 1, 1, &lo) ||
                int_bound(c, s, "maximum", 0, 0, &hi) || int_bound(c, s, "exclusiveMaximum", 0, 1, &hi))
                return NULL;
            if (lo > hi)
                return moe8_js_fail(c, "the integer bounds at %s leave no value (%s%lld to %s%lld)", where(c),
                                    lo > INT_CAP ? "above " : "", lo > INT_CAP ? INT_CAP : lo,
                                    hi < -INT_CAP ? "below " : "", hi < -INT_CAP ? -INT_CAP : hi), NULL;
            if (!(alts[n++] = int_range_rule(c, lo, hi, hint))) return NULL;
        }
    }
    if (types & T_STRING && !(alts[n++] = string_rule(c, s, hint))) return NULL;
    if (types & T_BOOLEAN) alts[n++] = moe8_js_prim(c, P_BOOLEAN);
    if (types & T_NULL) alts[n++] = moe8_js_prim(c, P_NULL);
    if (types & T_OBJECT && !(alts[n++] = object_rule(c, s, hint))) return NULL;
    if (types & T_ARRAY && !(alts[n++] = array_rule(c, s, hint))) return NULL;
    if (n == 1) return alts[0];
    {
        moe8_buf b = {0};
        for (int i = 0; i < n; i++) moe8_buf_printf(&b, "%s%s", i ? " | " : "", alts[i]);
        return moe8_js_add_rule_buf(c, hint, &b);
    }
}

