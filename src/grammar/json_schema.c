/*
 * json_schema.c — JSON Schema -> GBNF, after llama.cpp's
 * json-schema-to-grammar (its primitive rules and whitespace), for
 * response_format json_schema and tool-call arguments.
 *
 * Supported: type (string, number, integer, boolean, null, object, array,
 * or a list of them); properties, required, additionalProperties; enum,
 * const; anyOf, oneOf (as anyOf: alternatives are not made exclusive, as in
 * llama.cpp); items, prefixItems, minItems, maxItems; minLength, maxLength
 * (code points); minimum, maximum, exclusiveMinimum, exclusiveMaximum with
 * type integer (compiled exactly into digit grammars); $defs / definitions
 * with local $ref ("#", "#/$defs/x", any local JSON pointer), recursion
 * included; boolean schemas (true: any value). Annotations are ignored:
 * description, title, $schema, $id, $comment, default, examples,
 * deprecated, readOnly, writeOnly. Anything else is refused with
 * MOE8_ERR_INVALID_ARG naming the keyword and the schema's JSON pointer
 * ("json_schema: 'pattern' at /properties/zip is not supported").
 *
 * Choices, each a subset of what the schema allows, so every output
 * validates:
 * - Whitespace: llama.cpp's SPACE rule after every token, `| " " | "\n"{1,2}
 *   [ \t]{0,20}`, none before the value.
 * - Objects keep the schema's property order; required properties always
 *   appear, optional ones may. additionalProperties as llama.cpp's converter:
 *   absent or false with properties present, no other keys are generated;
 *   true or a schema, further keys (none equal to a declared one) after the
 *   declared ones. An object schema with neither properties nor
 *   additionalProperties (or with additionalProperties true alone) is any
 *   object.
 * - Numbers: at most 16 integer digits and 16 decimals (llama.cpp's
 *   bounds); an unbounded side of an integer range stops at 16 digits.
 * - Strings: no lone surrogate escapes (\uD800-\uDFFF), so one `char` is one
 *   code point and lengths count exactly; no DEL, as llama.cpp.
 * - prefixItems without items: the tuple items only (as llama.cpp), more
 *   (any values) only if minItems asks for them.
 * - enum/const: the values as compact JSON text.
 *
 * This file: rule names, the primitives, keywords, $ref, enum/const, anyOf
 * and the walk over a schema; the type keywords' rules are
 * json_schema_types.c's.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/buf.h"
#include "core/core.h"
#include "io/json_util.h"
#include "grammar/grammar.h"
#include "grammar/json_schema_impl.h"

#define MAX_DEPTH 64

moe8_status moe8_js_fail(conv *c, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    if (c->st != MOE8_OK) return c->st;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    c->st = moe8_fail(c->err, MOE8_ERR_INVALID_ARG, -1, "json_schema: %s", msg);
    return c->st;
}

moe8_status moe8_js_oom(conv *c) {
    if (c->st == MOE8_OK) c->st = moe8_fail(c->err, MOE8_ERR_NOMEM, -1, "json_schema: out of memory");
    return c->st;
}

size_t moe8_js_path_push(conv *c, const char *seg) {
    size_t old = c->path.n;
    moe8_buf_add(&c->path, "/", 1);
    for (const char *p = seg; *p; p++) {
        if (*p == '~') moe8_buf_add(&c->path, "~0", 2);
        else if (*p == '/') moe8_buf_add(&c->path, "~1", 2);
        else moe8_buf_add(&c->path, p, 1);
    }
    return old;
}

size_t moe8_js_path_push_idx(conv *c, const char *seg, int i) {
    char num[32];
    size_t old = moe8_js_path_push(c, seg);
    snprintf(num, sizeof num, "%d", i);
    moe8_js_path_push(c, num);
    return old;
}

/* ---- rule names and text -------------------------------------------------------- */

static int name_taken(const conv *c, const char *n) {
    for (size_t i = 0; i < c->n_names; i++)
        if (!strcmp(c->names[i], n)) return 1;
    return 0;
}

/* A fresh rule name from hint (characters outside [A-Za-z0-9-] become '-'). */
static char *new_name(conv *c, const char *hint) {
    char base[72], cand[96];
    size_t k = 0;
    for (const char *p = hint && *hint ? hint : "r"; *p && k < 48; p++) {
        char ch = *p;
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-';
        base[k++] = ok ? ch : '-';
    }
    base[k] = 0;
    snprintf(cand, sizeof cand, "%s", base);
    for (int i = 2; name_taken(c, cand); i++) snprintf(cand, sizeof cand, "%s-%d", base, i);
    if (c->n_names == c->cap_names) {
        size_t nc = c->cap_names ? c->cap_names * 2 : 64;
        char **q = realloc(c->names, nc * sizeof *q);
        if (!q) return moe8_js_oom(c), NULL;
        c->names = q, c->cap_names = nc;
    }
    if (!(c->names[c->n_names] = strdup(cand))) return moe8_js_oom(c), NULL;
    return c->names[c->n_names++];
}

const char *moe8_js_add_rule(conv *c, const char *hint, const char *body) {
    char *n = new_name(c, hint);
    if (!n) return NULL;
    moe8_buf_printf(&c->out, "%s ::= %s\n", n, body);
    if (c->out.oom) return moe8_js_oom(c), NULL;
    return n;
}

const char *moe8_js_add_rule_buf(conv *c, const char *hint, moe8_buf *b) {
    const char *name = b->oom ? (moe8_js_oom(c), NULL) : moe8_js_add_rule(c, hint, b->p);
    moe8_buf_free(b);
    return name;
}

const char *moe8_js_prim(conv *c, unsigned which) {
    static const struct { unsigned bit, deps; const char *name, *def; } tab[] = {
        {P_SPACE, 0, "space", "space ::= | \" \" | \"\\n\"{1,2} [ \\t]{0,20}\n"},
        {P_CHAR, 0, "char", "char ::= [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" hex4 )\n"
                            "hex4 ::= [0-9a-cA-CeEfF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2}\n"},
        {P_STRING, P_CHAR | P_SPACE, "string", "string ::= \"\\\"\" char* \"\\\"\" space\n"},
        {P_NUMBER, P_SPACE, "number", "number ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} ) ( \".\" [0-9]{1,16} )? "
                                      "( [eE] [-+]? ( \"0\" | [1-9] [0-9]{0,15} ) )? space\n"},
        {P_INTEGER, P_SPACE, "integer", "integer ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} ) space\n"},
        {P_BOOLEAN, P_SPACE, "boolean", "boolean ::= ( \"true\" | \"false\" ) space\n"},
        {P_NULL, P_SPACE, "null", "null ::= \"null\" space\n"},
        {P_VALUE, P_OBJECT | P_ARRAY | P_STRING | P_NUMBER | P_BOOLEAN | P_NULL, "value",
         "value ::= object | array | string | number | boolean | null\n"},
        {P_OBJECT, P_VALUE | P_STRING | P_SPACE, "object",
         "object ::= \"{\" space ( string \":\" space value ( \",\" space string \":\" space value )* )? \"}\" space\n"},
        {P_ARRAY, P_VALUE | P_SPACE, "array", "array ::= \"[\" space ( value ( \",\" space value )* )? \"]\" space\n"},
    };
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++) {
        if (tab[i].bit != which) continue;
        if (!(c->prims & which)) {
            c->prims |= which;
            moe8_buf_str(&c->out, tab[i].def);
            for (unsigned d = 1; d <= P_ARRAY; d <<= 1)
                if (tab[i].deps & d) moe8_js_prim(c, d);
        }
        return tab[i].name;
    }
    return NULL;
}

/* Reserve the primitive names so generated rules never take them. */
static int reserve_prims(conv *c) {
    static const char *n[] = {"root", "space", "char", "hex4", "string", "number", "integer",
                              "boolean", "null", "value", "object", "array"};
    for (size_t i = 0; i < sizeof n / sizeof n[0]; i++)
        if (!new_name(c, n[i])) return -1;
    return 0;
}

void moe8_js_gbnf_literal(moe8_buf *b, const char *text, size_t n) {
    moe8_buf_add(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)text[i];
        if (ch == '"' || ch == '\\') {
            char e[2] = {'\\', (char)ch};
            moe8_buf_add(b, e, 2);
        } else if (ch < 0x20 || ch == 0x7F) {
            moe8_buf_printf(b, "\\x%02X", ch);
        } else {
            moe8_buf_add(b, (const char *)&ch, 1);
        }
    }
    moe8_buf_add(b, "\"", 1);
}

/* ---- keywords --------------------------------------------------------------------- */

static int is_annotation(const char *k) {
    static const char *a[] = {"description", "title", "$schema", "$id", "$comment", "default",
                              "examples", "deprecated", "readOnly", "writeOnly", "$defs",
                              "definitions"};
    for (size_t i = 0; i < sizeof a / sizeof a[0]; i++)
        if (!strcmp(k, a[i])) return 1;
    return 0;
}

static int is_known(const char *k) {
    static const char *a[] = {"type", "properties", "required", "additionalProperties", "enum",
                              "const", "anyOf", "oneOf", "items", "prefixItems", "minItems",
                              "maxItems", "minLength", "maxLength", "minimum", "maximum",
                              "exclusiveMinimum", "exclusiveMaximum", "$ref"};
    for (size_t i = 0; i < sizeof a / sizeof a[0]; i++)
        if (!strcmp(k, a[i])) return 1;
    return is_annotation(k);
}

int moe8_js_get_count(conv *c, const cJSON *s, const char *key, int64_t def, int64_t *out) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(s, key);
    int64_t v;
    *out = def;
    if (!it) return 0;
    if (moe8_json_exact_int(it, &v) || v < 0) {
        moe8_js_fail(c, "'%s' at %s must be a non-negative integer", key, where(c));
        return -1;
    }
    if (v > GRAMMAR_MAX_REPEAT) {
        moe8_js_fail(c, "'%s' %lld at %s is above the limit of %d", key, (long long)v, where(c), GRAMMAR_MAX_REPEAT);
        return -1;
    }
    *out = v;
    return 0;
}

/* ---- a schema ---------------------------------------------------------------------------- */

static const cJSON *resolve_ref(conv *c, const char *ref) {
    const cJSON *n = c->root;
    const char *p;
    if (ref[0] != '#') return NULL;
    p = ref + 1;
    while (*p) {
        char seg[256];
        size_t k = 0;
        if (*p != '/') return NULL;
        p++;
        while (*p && *p != '/' && k < sizeof seg - 1) {
            if (p[0] == '~' && p[1] == '0') seg[k++] = '~', p += 2;
            else if (p[0] == '~' && p[1] == '1') seg[k++] = '/', p += 2;
            else seg[k++] = *p++;
        }
        seg[k] = 0;
        if (cJSON_IsObject(n)) n = cJSON_GetObjectItemCaseSensitive(n, seg);
        else if (cJSON_IsArray(n)) {
            char *end;
            long i = strtol(seg, &end, 10);
            if (!*seg || *end || i < 0) return NULL;
            n = cJSON_GetArrayItem(n, (int)i);
        } else return NULL;
        if (!n) return NULL;
    }
    return n;
}

static const char *ref_rule(conv *c, const cJSON *s, const char *ref) {
    const cJSON *target;
    const char *last, *val;
    refrule *r;
    size_t idx;
    char *saved;
    moe8_buf b = {0};
    for (const cJSON *k = s->child; k; k = k->next)
        if (strcmp(k->string, "$ref") && !is_annotation(k->string))
            return moe8_js_fail(c, "'%s' beside '$ref' at %s is not supported", k->string, where(c)), NULL;
    if (ref[0] != '#')
        return moe8_js_fail(c, "$ref '%s' at %s is not supported (only local references '#/...')", ref, where(c)), NULL;
    if (!(target = resolve_ref(c, ref)))
        return moe8_js_fail(c, "$ref '%s' at %s does not resolve in this schema", ref, where(c)), NULL;
    for (size_t i = 0; i < c->n_refs; i++)
        if (c->refs[i].node == target) {
            if (!c->refs[i].done && c->refs[i].content == c->content)
                return moe8_js_fail(c, "$ref '%s' at %s refers back to itself with nothing in between "
                                    "(left recursion)", ref, where(c)), NULL;
            return c->refs[i].name;
        }
    if (c->n_refs == c->cap_refs) {
        size_t nc = c->cap_refs ? c->cap_refs * 2 : 16;
        refrule *q = realloc(c->refs, nc * sizeof *q);
        if (!q) return moe8_js_oom(c), NULL;
        c->refs = q, c->cap_refs = nc;
    }
    last = strrchr(ref, '/');
    idx = c->n_refs++;
    r = &c->refs[idx];
    r->node = target, r->done = 0, r->content = c->content;
    if (!(r->name = new_name(c, last && last[1] ? last + 1 : "ref"))) return NULL;
    if (!(saved = strdup(c->path.p ? c->path.p : ""))) return moe8_js_oom(c), NULL;
    path_pop(c, 0);
    moe8_buf_str(&c->path, ref + 1); /* errors inside name the target's pointer */
    val = moe8_js_visit(c, target, c->refs[idx].name);
    path_pop(c, 0);
    moe8_buf_str(&c->path, saved);
    free(saved);
    if (!val) return NULL;
    moe8_buf_printf(&b, "%s ::= %s\n", c->refs[idx].name, val);
    moe8_buf_add(&c->out, b.p ? b.p : "", b.n);
    free(b.p);
    c->refs[idx].done = 1;
    return c->refs[idx].name;
}

static const char *literal_rule(conv *c, const cJSON *vals, int n_vals, const char *hint) {
    moe8_buf b = {0};
    moe8_buf_str(&b, "( ");
    for (int i = 0; i < n_vals; i++) {
        const cJSON *v = cJSON_GetArrayItem(vals, i);
        char *text = cJSON_PrintUnformatted(v);
        if (!text) {
            free(b.p);
            return moe8_js_oom(c), NULL;
        }
        if (i) moe8_buf_str(&b, " | ");
        moe8_js_gbnf_literal(&b, text, strlen(text));
        free(text);
    }
    moe8_buf_printf(&b, " ) %s", moe8_js_prim(c, P_SPACE));
    return moe8_js_add_rule_buf(c, hint, &b);
}

static int type_bit(const char *t) {
    static const char *n[] = {"string", "number", "integer", "boolean", "null", "object", "array"};
    for (int i = 0; i < 7; i++)
        if (!strcmp(t, n[i])) return 1 << i;
    return 0;
}

static int json_type_ok(const cJSON *v, unsigned types) {
    if (cJSON_IsString(v)) return types & T_STRING;
    if (cJSON_IsNumber(v)) {
        int64_t i;
        return (types & T_NUMBER) || ((types & T_INTEGER) && moe8_json_exact_int(v, &i) == 0);
    }
    if (cJSON_IsBool(v)) return types & T_BOOLEAN;
    if (cJSON_IsNull(v)) return types & T_NULL;
    if (cJSON_IsObject(v)) return types & T_OBJECT;
    return types & T_ARRAY;
}

const char *moe8_js_visit(conv *c, const cJSON *s, const char *hint) {
    const cJSON *k, *t;
    unsigned types = 0;
    const char *res = NULL;
    if (c->st != MOE8_OK) return NULL;
    if (cJSON_IsTrue(s)) return moe8_js_prim(c, P_VALUE);
    if (cJSON_IsFalse(s)) return moe8_js_fail(c, "the schema at %s is false: no value is allowed", where(c)), NULL;
    if (!cJSON_IsObject(s)) return moe8_js_fail(c, "the schema at %s must be an object or a boolean", where(c)), NULL;
    if (c->depth >= MAX_DEPTH) return moe8_js_fail(c, "schemas nest deeper than %d at %s", MAX_DEPTH, where(c)), NULL;
    for (k = s->child; k; k = k->next)
        if (!is_known(k->string)) return moe8_js_fail(c, "'%s' at %s is not supported", k->string, where(c)), NULL;
    c->depth++;
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "$ref"))) {
        if (!cJSON_IsString(k)) moe8_js_fail(c, "'$ref' at %s must be a string", where(c));
        else res = ref_rule(c, s, k->valuestring);
        goto out;
    }
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "anyOf")) || (k = cJSON_GetObjectItemCaseSensitive(s, "oneOf"))) {
        const char *kw = k->string;
        moe8_buf b = {0};
        int n;
        for (const cJSON *o = s->child; o; o = o->next)
            if (strcmp(o->string, kw) && !is_annotation(o->string)) {
                moe8_js_fail(c, "'%s' beside '%s' at %s is not supported", o->string, kw, where(c));
                goto out;
            }
        if (!cJSON_IsArray(k) || (n = cJSON_GetArraySize(k)) == 0) {
            moe8_js_fail(c, "'%s' at %s must be a non-empty array of schemas", kw, where(c));
            goto out;
        }
        for (int i = 0; i < n; i++) {
            char hb[160];
            size_t old = moe8_js_path_push_idx(c, kw, i);
            const char *alt;
            snprintf(hb, sizeof hb, "%s%s%d", hint, *hint ? "-" : "", i);
            alt = moe8_js_visit(c, cJSON_GetArrayItem(k, i), hb);
            path_pop(c, old);
            if (!alt) {
                free(b.p);
                goto out;
            }
            moe8_buf_printf(&b, "%s%s", i ? " | " : "", alt);
        }
        res = moe8_js_add_rule_buf(c, hint, &b);
        goto out;
    }
    if ((t = cJSON_GetObjectItemCaseSensitive(s, "type"))) {
        if (cJSON_IsString(t)) {
            if (!(types = (unsigned)type_bit(t->valuestring))) {
                moe8_js_fail(c, "type '%s' at %s is not supported", t->valuestring, where(c));
                goto out;
            }
        } else if (cJSON_IsArray(t) && cJSON_GetArraySize(t) > 0) {
            for (const cJSON *e = t->child; e; e = e->next) {
                int bit = cJSON_IsString(e) ? type_bit(e->valuestring) : 0;
                if (!bit) {
                    moe8_js_fail(c, "'type' at %s holds %s, not a JSON Schema type", where(c),
                                 cJSON_IsString(e) ? e->valuestring : "a non-string");
                    goto out;
                }
                types |= (unsigned)bit;
            }
        } else {
            moe8_js_fail(c, "'type' at %s must be a type name or a non-empty array of them", where(c));
            goto out;
        }
    }
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "enum")) || (k = cJSON_GetObjectItemCaseSensitive(s, "const"))) {
        int is_enum = !strcmp(k->string, "enum"), n = 0;
        cJSON *vals;
        for (const cJSON *o = s->child; o; o = o->next)
            if (strcmp(o->string, k->string) && strcmp(o->string, "type") && !is_annotation(o->string)) {
                moe8_js_fail(c, "'%s' beside '%s' at %s is not supported", o->string, k->string, where(c));
                goto out;
            }
        if (is_enum && (!cJSON_IsArray(k) || cJSON_GetArraySize(k) == 0)) {
            moe8_js_fail(c, "'enum' at %s must be a non-empty array", where(c));
            goto out;
        }
        if (!(vals = cJSON_CreateArray())) {
            moe8_js_oom(c);
            goto out;
        }
        for (const cJSON *v = is_enum ? k->child : k; v; v = is_enum ? v->next : NULL)
            if (!types || json_type_ok(v, types)) {
                cJSON *d = cJSON_Duplicate(v, 1);
                if (!d) break;
                cJSON_AddItemToArray(vals, d), n++;
            }
        if (n == 0) moe8_js_fail(c, "no value of '%s' at %s has the schema's type", k->string, where(c));
        else res = literal_rule(c, vals, n, hint);
        cJSON_Delete(vals);
        goto out;
    }
    if (!types) { /* infer from the keywords, as llama.cpp */
        static const struct { const char *kw; unsigned t; } infer[] = {
            {"properties", T_OBJECT}, {"additionalProperties", T_OBJECT}, {"required", T_OBJECT},
            {"items", T_ARRAY}, {"prefixItems", T_ARRAY}, {"minItems", T_ARRAY}, {"maxItems", T_ARRAY},
            {"minLength", T_STRING}, {"maxLength", T_STRING}};
        for (size_t i = 0; i < sizeof infer / sizeof infer[0]; i++)
            if (cJSON_GetObjectItemCaseSensitive(s, infer[i].kw)) types |= infer[i].t;
        for (const char *const *b = (const char *const[]){"minimum", "maximum", "exclusiveMinimum",
                                                          "exclusiveMaximum", NULL}; *b; b++)
            if (cJSON_GetObjectItemCaseSensitive(s, *b)) {
                moe8_js_fail(c, "'%s' at %s needs \"type\": \"integer\"", *b, where(c));
                goto out;
            }
        if (!types) {
            res = moe8_js_prim(c, P_VALUE);
            goto out;
        }
    }
    res = moe8_js_typed_rule(c, s, types, hint);
out:
    c->depth--;
    return c->st == MOE8_OK ? res : NULL;
}

moe8_status moe8_json_schema_to_gbnf(const char *schema_json, size_t len, char **out, moe8_error *err) {
    conv c;
    cJSON *root = NULL;
    moe8_status st;
    const char *top;
    if (!out || (!schema_json && len))
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "json_schema: no schema or output");
    *out = NULL;
    /* cJSON keeps a string's bytes as they are: a schema that is not UTF-8
     * would put them into the grammar's literals, which the compiler refuses */
    const size_t bad = schema_json ? moe8_utf8_valid(schema_json, len) : (size_t)-1;
    if (bad != (size_t)-1)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, (int64_t)bad,
                         "json_schema: not valid UTF-8 at byte %zu", bad);
    if ((st = moe8_json_parse(schema_json ? schema_json : "", len, "json_schema", &root, err)) != MOE8_OK) {
        if (st != MOE8_ERR_FORMAT) return st;
        if (err) err->code = MOE8_ERR_INVALID_ARG; /* the caller's argument, not a file */
        return MOE8_ERR_INVALID_ARG;
    }
    memset(&c, 0, sizeof c);
    c.root = root, c.err = err;
    if (reserve_prims(&c) == 0) {
        top = moe8_js_visit(&c, root, "");
        if (top && c.st == MOE8_OK) {
            moe8_buf final = {0};
            moe8_buf_printf(&final, "root ::= %s\n", top);
            moe8_buf_add(&final, c.out.p ? c.out.p : "", c.out.n);
            if (final.oom) moe8_js_oom(&c), free(final.p);
            else *out = final.p;
        }
    }
    st = c.st;
    if (st == MOE8_OK && !*out) st = moe8_js_oom(&c);
    for (size_t i = 0; i < c.n_names; i++) free(c.names[i]);
    free(c.names), free(c.refs), free(c.out.p), free(c.path.p);
    cJSON_Delete(root);
    return st;
}

/* ---- the JSON object grammar -------------------------------------------------------- */

const char *moe8_grammar_json_object(void) {
    return "# any JSON object (response_format json_object); whitespace bounded as\n"
           "# llama.cpp's json-schema-to-grammar SPACE rule\n"
           "root ::= object\n"
           "value ::= object | array | string | number | (\"true\" | \"false\" | \"null\") space\n"
           "object ::= \"{\" space ( string \":\" space value ( \",\" space string \":\" space value )* )? \"}\" space\n"
           "array ::= \"[\" space ( value ( \",\" space value )* )? \"]\" space\n"
           "string ::= \"\\\"\" char* \"\\\"\" space\n"
           "char ::= [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" hex4 )\n"
           "hex4 ::= [0-9a-cA-CeEfF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2}\n"
           "number ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} ) ( \".\" [0-9]{1,16} )? ( [eE] [-+]? ( \"0\" | [1-9] [0-9]{0,15} ) )? space\n"
           "space ::= | \" \" | \"\\n\"{1,2} [ \\t]{0,20}\n";
}

