/*
 * toolcall_value.c — the argument values of the text-argument tool-call
 * formats (GLM's <arg_value>, MiniMax-M2's and Qwen3-Coder's <parameter>)
 * turned into JSON by the tool's parameters schema, as vLLM's parsers do:
 *
 *   glm45 (vllm/tool_parsers/glm4_moe_tool_parser.py): a parameter whose
 *     schema says "type": "string" keeps its text as written (a JSON
 *     string); any other (another type, a type list, no schema, a tool the
 *     request did not offer) is the stripped text read as JSON, else as a
 *     Python literal (ast.literal_eval), else a string.
 *   minimax_m2 (minimax_m2_tool_parser.py): the stripped text; "null",
 *     "none", "nil" (any case) are null; else by the schema's types (its
 *     "type", a list of them, the kinds of its "enum" values, and those of
 *     anyOf / oneOf / allOf; none, an unknown tool or parameter: string),
 *     the first that reads it in the order integer (Python int()), number
 *     (float(); integral values as integers), boolean (true/1/yes/on,
 *     false/0/no/off), object or array (JSON), string; else JSON, else a
 *     string.
 *   qwen3_coder (qwen3coder_tool_parser.py, _convert_param_value): the text
 *     as the parser cut it; a parameter the tool's "properties" lack (or a
 *     tool the request did not offer) is a string. Its type is the
 *     schema's "type" (lowercased and stripped; a type list is no known
 *     type), else the first non-null one of its "anyOf", else string; a
 *     "null" there (or the type "null") lets "null" / "none" (any case) be
 *     null. Then: string, str, text, varchar, char, enum: the text; else
 *     "null" / "none" is null; int*, uint*, long*, short*, unsigned*: int(),
 *     else the text; num*, float*: float(), integral values as integers,
 *     else the text; boolean, bool, binary: true when the text is "true"
 *     (any case), else false; object, array, arr, dict*, list*: JSON (a JSON
 *     string read once more as a Python literal), else a Python literal
 *     (a string read once more), else the text; any other: a Python
 *     literal, else the text.
 *
 * JSON values keep their numbers and strings as written, in json.dumps's
 * layout (", " and ": "), as moe8's other parsers pass arguments
 * (toolcall.c); values the parser itself makes (a MiniMax number, a Python
 * literal's) are written as Python's json.dumps writes them (repr of a
 * float). Strings are written with ensure_ascii off, as vLLM does.
 *
 * Does not: Python literals beyond strings, numbers, True / False / None,
 * lists, tuples and dicts with string keys (a set, bytes or a non-string key
 * make the text a string, where vLLM would fail the whole output); a MiniMax
 * number that is inf or nan is not a number here (vLLM fails on inf), and
 * a Qwen3-Coder one is the text (vLLM fails the whole output on inf).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cjson/cJSON.h>

#include "core/buf.h"
#include "server/toolcall_xml.h"

/* ---- Python's str.strip() ---------------------------------------------------------------- */

static int py_isspace(uint32_t c) {
    return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f ||
           c == 0x3000;
}

void moe8_tcx_strip(const char **s, size_t *n) {
    const uint8_t *p = (const uint8_t *)*s;
    size_t i = 0, first = *n, end = 0;
    while (i < *n) {
        uint32_t cp = p[i];
        int k = p[i] < 0x80 ? 1 : moe8_utf8_decode(p + i, *n - i, &cp);
        if (k <= 0) k = 1, cp = 0xfffd;
        if (!py_isspace(cp)) {
            if (first == *n) first = i;
            end = i + (size_t)k;
        }
        i += (size_t)k;
    }
    if (first == *n) first = end = 0;
    *s += first;
    *n = end - first;
}

/* ---- numbers as Python writes them ------------------------------------------------------ */

/* repr(float(d)) as json.dumps writes it; -1 for inf and nan (not JSON). */
static int py_float(moe8_buf *out, double d) {
    char e[40], digits[24];
    int prec, exp, nd = 0;
    if (!isfinite(d)) return -1;
    for (prec = 1; prec <= 17; prec++) { /* the shortest that reads back */
        snprintf(e, sizeof e, "%.*e", prec - 1, d);
        if (strtod(e, NULL) == d) break;
    }
    for (const char *q = e; *q && *q != 'e'; q++)
        if (*q >= '0' && *q <= '9') digits[nd++] = *q;
    digits[nd] = '\0';
    exp = atoi(strchr(e, 'e') + 1);
    if (signbit(d)) moe8_buf_str(out, "-");
    if (exp < -4 || exp >= 16) { /* 1.5e-07, 1e+16 */
        moe8_buf_add(out, digits, 1);
        if (nd > 1) moe8_buf_str(out, "."), moe8_buf_str(out, digits + 1);
        return moe8_buf_printf(out, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
    if (exp < 0) { /* 0.00015 */
        moe8_buf_str(out, "0.");
        for (int i = -1; i > exp; i--) moe8_buf_str(out, "0");
        return moe8_buf_str(out, digits);
    }
    for (int i = 0; i <= exp; i++) moe8_buf_add(out, i < nd ? digits + i : "0", 1);
    moe8_buf_str(out, ".");
    return moe8_buf_str(out, nd > exp + 1 ? digits + exp + 1 : "0");
}

/* Digits with single underscores between them (Python's numeric literals
 * and int() / float() text) from s[*i]; the digits copied to d. */
static size_t py_digits(const char *s, size_t n, size_t *i, moe8_buf *d) {
    size_t k = 0;
    while (*i < n && s[*i] >= '0' && s[*i] <= '9') {
        moe8_buf_add(d, s + (*i)++, 1), k++;
        if (*i + 1 < n && s[*i] == '_' && s[*i + 1] >= '0' && s[*i + 1] <= '9') (*i)++;
    }
    return k;
}

/* Python int(s) (s stripped): its decimal value, or -1. */
static int py_int(moe8_buf *out, const char *s, size_t n) {
    moe8_buf d = {0};
    size_t i = 0, z = 0;
    int neg = 0, rc = -1;
    if (i < n && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
    if (py_digits(s, n, &i, &d) && i == n) {
        while (z + 1 < d.n && d.p[z] == '0') z++;
        if (neg && !(d.n - z == 1 && d.p[z] == '0')) moe8_buf_str(out, "-");
        rc = moe8_buf_add(out, d.p + z, d.n - z);
    }
    moe8_buf_free(&d);
    return rc;
}

/* Python float(s) (s stripped) as text strtod reads, or -1: [+-] digits
 * [. digits] [e [+-] digits], underscores between digits; not inf or nan. */
static int py_float_text(const char *s, size_t n, moe8_buf *t) {
    size_t i = 0, k;
    if (i < n && (s[i] == '+' || s[i] == '-')) moe8_buf_add(t, s + i++, 1);
    k = py_digits(s, n, &i, t);
    if (i < n && s[i] == '.') {
        moe8_buf_add(t, s + i++, 1);
        k += py_digits(s, n, &i, t);
    }
    if (!k) return -1;
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        moe8_buf_add(t, "e", 1), i++;
        if (i < n && (s[i] == '+' || s[i] == '-')) moe8_buf_add(t, s + i++, 1);
        if (!py_digits(s, n, &i, t)) return -1;
    }
    return i == n && t->p ? 0 : -1;
}

/* MiniMax's number: float(s), an integer when integral. */
static int mm_number(moe8_buf *out, const char *s, size_t n) {
    moe8_buf t = {0};
    int rc = -1;
    if (!py_float_text(s, n, &t)) {
        const double d = strtod(t.p, NULL);
        if (isfinite(d) && d == floor(d)) rc = moe8_buf_printf(out, "%.0f", d == 0 ? 0.0 : d);
        else rc = py_float(out, d);
    }
    moe8_buf_free(&t);
    return rc;
}

/* ---- Python literals (ast.literal_eval) --------------------------------------------------- */

typedef struct {
    const char *s;
    size_t n, i;
    int depth;
    moe8_buf *out;
} lit;

static void lit_ws(lit *l) {
    while (l->i < l->n && strchr(" \t\n\r\f\v", l->s[l->i]) && l->s[l->i]) l->i++;
}

static int lit_value(lit *l);
static int lit_value_in(lit *l);

static int lit_hex(lit *l, int k, uint32_t *cp) {
    *cp = 0;
    for (int j = 0; j < k; j++, l->i++) {
        const char c = l->i < l->n ? l->s[l->i] : 0;
        const int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                      : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (v < 0) return -1;
        *cp = *cp * 16 + (uint32_t)v;
    }
    return 0;
}

/* Python's one-letter escapes: the letter, then what it means. */
static const char ESCAPES[] = "n\nt\tr\rb\bf\fv\va\a\\\\''\"\"";

/* A quoted string ('...' or "...", Python's escapes) as a JSON string. */
static int lit_string(lit *l) {
    const char q = l->s[l->i++];
    moe8_buf t = {0};
    int rc = -1;
    while (l->i < l->n && l->s[l->i] != q && l->s[l->i] != '\n') {
        char c = l->s[l->i++], u[4];
        uint32_t cp;
        const char *m;
        if (c != '\\') {
            moe8_buf_add(&t, &c, 1);
            continue;
        }
        if (l->i == l->n) goto done;
        c = l->s[l->i++];
        if (c == '\n') continue; /* a continued line */
        if ((m = strchr(ESCAPES, c)) && c && (m - ESCAPES) % 2 == 0) {
            moe8_buf_add(&t, m + 1, 1);
            continue;
        }
        if (c == 'x' || c == 'u' || c == 'U') {
            if (lit_hex(l, c == 'x' ? 2 : c == 'u' ? 4 : 8, &cp) || !moe8_utf8_encode(cp, u)) goto done;
            moe8_buf_add(&t, u, (size_t)moe8_utf8_encode(cp, u));
            continue;
        }
        if (c >= '0' && c <= '7') { /* up to three octal digits */
            cp = (uint32_t)(c - '0');
            for (int j = 0; j < 2 && l->i < l->n && l->s[l->i] >= '0' && l->s[l->i] <= '7'; j++)
                cp = cp * 8 + (uint32_t)(l->s[l->i++] - '0');
            moe8_buf_add(&t, u, (size_t)moe8_utf8_encode(cp, u));
            continue;
        }
        if (c == 'N') goto done;
        moe8_buf_add(&t, "\\", 1); /* an unknown escape stays as written */
        moe8_buf_add(&t, &c, 1);
    }
    if (l->i < l->n && l->s[l->i] == q) {
        l->i++;
        rc = moe8_buf_json_str(l->out, t.p ? t.p : "", t.n, 0);
    }
done:
    moe8_buf_free(&t);
    return rc;
}

/* A number: an int as its digits, a float as repr writes it. */
static int lit_number(lit *l) {
    moe8_buf t = {0};
    size_t i = l->i, k;
    int rc = -1, is_float = 0;
    if (i < l->n && (l->s[i] == '-' || l->s[i] == '+')) moe8_buf_add(&t, l->s + i++, 1);
    k = py_digits(l->s, l->n, &i, &t);
    if (i < l->n && l->s[i] == '.') {
        moe8_buf_add(&t, ".", 1), i++, is_float = 1;
        k += py_digits(l->s, l->n, &i, &t);
    }
    if (k && i < l->n && (l->s[i] == 'e' || l->s[i] == 'E')) {
        moe8_buf_add(&t, "e", 1), i++, is_float = 1;
        if (i < l->n && (l->s[i] == '+' || l->s[i] == '-')) moe8_buf_add(&t, l->s + i++, 1);
        if (!py_digits(l->s, l->n, &i, &t)) k = 0;
    }
    if (k) {
        const char *d = t.p + (t.p[0] == '-' || t.p[0] == '+');
        if (is_float) rc = py_float(l->out, strtod(t.p, NULL));
        else if (!(d[0] == '0' && strspn(d, "0") != strlen(d))) rc = py_int(l->out, t.p, t.n); /* no 007 */
    }
    moe8_buf_free(&t);
    l->i = i;
    return rc;
}

/* [...], (...) or {...}: items split by commas, a trailing one allowed. */
static int lit_items(lit *l, char close, int dict) {
    int n = 0, comma = 0;
    const char open = dict ? '{' : '[';
    l->i++;
    for (;;) {
        lit_ws(l);
        if (l->i < l->n && l->s[l->i] == close) break;
        if (n && !comma) return -1;
        if (n) moe8_buf_str(l->out, ", ");
        else moe8_buf_add(l->out, &open, 1);
        if (dict) {
            if (l->i >= l->n || (l->s[l->i] != '\'' && l->s[l->i] != '"') || lit_string(l)) return -1;
            lit_ws(l);
            if (l->i >= l->n || l->s[l->i++] != ':') return -1;
            moe8_buf_str(l->out, ": ");
        }
        if (lit_value(l)) return -1;
        n++;
        lit_ws(l);
        comma = l->i < l->n && l->s[l->i] == ',';
        l->i += comma;
    }
    l->i++;
    if (!n) moe8_buf_add(l->out, &open, 1);
    return moe8_buf_str(l->out, dict ? "}" : "]");
}

static int lit_value_in(lit *l) {
    static const char *const words[3][2] = {{"True", "true"}, {"False", "false"}, {"None", "null"}};
    char c;
    lit_ws(l);
    if (l->i >= l->n) return -1;
    c = l->s[l->i];
    if (c == '[') return lit_items(l, ']', 0);
    if (c == '{') return lit_items(l, '}', 1);
    if (c == '(') { /* a tuple, or a value in parentheses */
        size_t at = l->i, mark = l->out->n;
        l->i++;
        lit_ws(l);
        if (l->i < l->n && l->s[l->i] == ')') return l->i++, moe8_buf_str(l->out, "[]");
        if (!lit_value(l)) {
            lit_ws(l);
            if (l->i < l->n && l->s[l->i] == ')') return l->i++, 0;
        }
        l->out->n = mark;
        l->i = at;
        return lit_items(l, ')', 0);
    }
    if (c == '\'' || c == '"') return lit_string(l);
    for (int k = 0; k < 3; k++) {
        const size_t w = strlen(words[k][0]);
        if (l->n - l->i >= w && !memcmp(l->s + l->i, words[k][0], w)) {
            l->i += w;
            return moe8_buf_str(l->out, words[k][1]);
        }
    }
    return lit_number(l);
}

/* One value, nested at most 64 deep. */
static int lit_value(lit *l) {
    int rc = -1;
    if (l->depth < 64) {
        l->depth++;
        rc = lit_value_in(l);
        l->depth--;
    }
    return rc;
}

/* ast.literal_eval(s) as json.dumps writes it into out, or -1 (out as it was). */
static int py_literal(moe8_buf *out, const char *s, size_t n) {
    const size_t mark = out->n;
    lit l = {s, n, 0, 0, out};
    if (!lit_value(&l)) {
        lit_ws(&l);
        if (l.i == l.n) return 0;
    }
    out->n = mark;
    return -1;
}

/* ---- the schemas ---------------------------------------------------------------------- */

static const cJSON *tool_params(const cJSON *tools, const char *fn) {
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(t, "function"),
                    *nm = cJSON_GetObjectItemCaseSensitive(f, "name");
        if (cJSON_IsString(nm) && !strcmp(nm->valuestring, fn)) return cJSON_GetObjectItemCaseSensitive(f, "parameters");
    }
    return NULL;
}

/* MiniMax's types of a parameter schema (vLLM's _extract_types_from_schema). */
static unsigned mm_types(const cJSON *schema) {
    static const char *const names[][2] = {{"string", "str"}, {"text", NULL}, {"integer", "int"}, {"number", "float"},
                                           {"boolean", "bool"}, {"object", NULL}, {"array", NULL}};
    static const unsigned bits[] = {TCX_STRING, TCX_STRING, TCX_INTEGER, TCX_NUMBER, TCX_BOOLEAN, TCX_OBJECT, TCX_ARRAY};
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(schema, "type"), *en, *x;
    static const char *const choice[] = {"anyOf", "oneOf", "allOf"};
    unsigned m = 0;
    if (!cJSON_IsObject(schema)) return TCX_STRING;
    for (x = cJSON_IsArray(ty) ? ty->child : ty; x; x = cJSON_IsArray(ty) ? x->next : NULL) {
        unsigned b = TCX_OTHER;
        if (!cJSON_IsString(x)) continue;
        for (size_t k = 0; k < sizeof bits / sizeof bits[0]; k++)
            for (int a = 0; a < 2; a++)
                if (names[k][a] && !strcasecmp(x->valuestring, names[k][a])) b = bits[k];
        m |= b;
    }
    en = cJSON_GetObjectItemCaseSensitive(schema, "enum");
    if (!cJSON_IsArray(en)) en = NULL;
    cJSON_ArrayForEach(x, en) {
        m |= cJSON_IsNull(x) ? TCX_OTHER : cJSON_IsBool(x) ? TCX_BOOLEAN : cJSON_IsString(x) ? TCX_STRING
             : cJSON_IsArray(x) ? TCX_ARRAY : cJSON_IsObject(x) ? TCX_OBJECT
             : x->valuedouble == (double)(int64_t)x->valuedouble ? TCX_INTEGER : TCX_NUMBER;
    }
    for (int c = 0; c < 3; c++) {
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(schema, choice[c]);
        if (!cJSON_IsArray(arr)) continue;
        cJSON_ArrayForEach(x, arr) m |= mm_types(x);
    }
    return m ? m : TCX_STRING;
}

/* Qwen3-Coder's type of a type name (vLLM's param_type), as TCX_* bits. */
static unsigned q3_type(const char *name) {
    static const char *const strings[] = {"string", "str", "text", "varchar", "char", "enum", NULL},
                             *const ints[] = {"int", "uint", "long", "short", "unsigned", NULL},
                             *const bools[] = {"boolean", "bool", "binary", NULL},
                             *const containers[] = {"object", "array", "arr", NULL};
    const char *s = name;
    size_t n = strlen(name);
    char low[64];
    moe8_tcx_strip(&s, &n);
    if (n >= sizeof low) return TCX_OTHER;
    for (size_t i = 0; i < n; i++) low[i] = (char)(s[i] >= 'A' && s[i] <= 'Z' ? s[i] + 32 : s[i]);
    low[n] = '\0';
    for (int i = 0; strings[i]; i++)
        if (!strcmp(low, strings[i])) return TCX_STRING;
    for (int i = 0; ints[i]; i++)
        if (!strncmp(low, ints[i], strlen(ints[i]))) return TCX_INTEGER;
    if (!strncmp(low, "num", 3) || !strncmp(low, "float", 5)) return TCX_NUMBER;
    for (int i = 0; bools[i]; i++)
        if (!strcmp(low, bools[i])) return TCX_BOOLEAN;
    for (int i = 0; containers[i]; i++)
        if (!strcmp(low, containers[i])) return TCX_OBJECT;
    if (!strncmp(low, "dict", 4) || !strncmp(low, "list", 4)) return TCX_OBJECT;
    return !strcmp(low, "null") ? TCX_OTHER | TCX_NULL : TCX_OTHER;
}

/* Qwen3-Coder's reading of a parameter schema: its "type", else its anyOf. */
static unsigned q3_types(const cJSON *schema) {
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(schema, "type"),
                *any = cJSON_GetObjectItemCaseSensitive(schema, "anyOf"), *x;
    unsigned m = 0, null = 0;
    if (!cJSON_IsObject(schema)) return TCX_STRING;
    if (ty) return cJSON_IsString(ty) ? q3_type(ty->valuestring) : TCX_OTHER; /* str() of a list: no type */
    if (!cJSON_IsArray(any)) any = NULL;
    cJSON_ArrayForEach(x, any) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(x, "type");
        const unsigned b = !cJSON_IsObject(x) || !t ? 0 : cJSON_IsString(t) ? q3_type(t->valuestring) : TCX_OTHER;
        if (b & TCX_NULL) null = TCX_NULL;
        else if (b && !m) m = b;
    }
    return (m ? m : TCX_STRING) | null;
}

unsigned moe8_tcx_param_types(const cJSON *tools, toolcall_format f, const char *fn, const char *key) {
    const cJSON *params = tool_params(tools, fn),
                *props = cJSON_GetObjectItemCaseSensitive(params, "properties"),
                *schema = cJSON_GetObjectItemCaseSensitive(props, key);
    if (f == TOOLCALL_QWEN3_CODER) return cJSON_IsObject(props) && schema ? q3_types(schema) : TCX_STRING;
    if (f != TOOLCALL_MINIMAX_M2) { /* glm45: "type": "string", or read as a value */
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(schema, "type");
        return cJSON_IsString(ty) && !strcmp(ty->valuestring, "string") ? TCX_STRING : TCX_OTHER;
    }
    if (!cJSON_IsObject(props) || !schema) return TCX_STRING;
    return mm_types(schema);
}

/* ---- the values --------------------------------------------------------------------------- */

static int json_or_string(moe8_buf *out, const char *s, size_t n) {
    const size_t mark = out->n;
    if (!moe8_toolcall_json_norm(s, n, out)) return 0;
    out->n = mark;
    return moe8_buf_json_str(out, s, n, 0);
}

static int word_in(const char *s, size_t n, const char *const *words) {
    for (; *words; words++)
        if (strlen(*words) == n && !strncasecmp(s, *words, n)) return 1;
    return 0;
}

/* The Python literal of the JSON string at out[mark..] (json_norm's), in its
 * place when there is one. */
static void literal_again(moe8_buf *out, size_t mark) {
    cJSON *j;
    moe8_buf v = {0};
    if (out->n <= mark || out->p[mark] != '"' || !(j = cJSON_ParseWithLength(out->p + mark, out->n - mark))) return;
    if (cJSON_IsString(j) && !py_literal(&v, j->valuestring, strlen(j->valuestring))) {
        out->n = mark;
        moe8_buf_add(out, v.p, v.n);
    }
    moe8_buf_free(&v);
    cJSON_Delete(j);
}

/* qwen3_coder's value (the file's header). */
static int q3_value(moe8_buf *out, unsigned types, const char *s, size_t n) {
    static const char *const nulls[] = {"null", "none", NULL};
    const size_t mark = out->n;
    const char *t = s;
    size_t tn = n;
    const int is_null = word_in(s, n, nulls);
    moe8_tcx_strip(&t, &tn);
    if ((types & TCX_NULL) && is_null) return moe8_buf_str(out, "null");
    if (types & TCX_STRING) return moe8_buf_json_str(out, s, n, 0);
    if (is_null) return moe8_buf_str(out, "null");
    if (types & (TCX_INTEGER | TCX_NUMBER)) {
        if (!((types & TCX_INTEGER) ? py_int(out, t, tn) : mm_number(out, t, tn))) return 0;
        out->n = mark;
        return moe8_buf_json_str(out, s, n, 0);
    }
    if (types & TCX_BOOLEAN) return moe8_buf_str(out, n == 4 && !strncasecmp(s, "true", 4) ? "true" : "false");
    if ((types & TCX_OBJECT) && !moe8_toolcall_json_norm(s, n, out)) {
        literal_again(out, mark);
        return out->oom ? -1 : 0;
    }
    out->n = mark;
    if (!py_literal(out, s, n)) {
        if (types & TCX_OBJECT) literal_again(out, mark);
        return out->oom ? -1 : 0;
    }
    return moe8_buf_json_str(out, s, n, 0);
}

int moe8_tcx_value(moe8_buf *out, toolcall_format f, unsigned types, const char *s, size_t n) {
    static const char *const nulls[] = {"null", "none", "nil", NULL}, *const yes[] = {"true", "1", "yes", "on", NULL},
                             *const no[] = {"false", "0", "no", "off", NULL};
    size_t mark = out->n;
    if (f == TOOLCALL_QWEN3_CODER) return q3_value(out, types, s, n);
    if (f != TOOLCALL_MINIMAX_M2) {
        if (types & TCX_STRING) return moe8_buf_json_str(out, s, n, 0); /* as written, not stripped */
        moe8_tcx_strip(&s, &n);
        if (!moe8_toolcall_json_norm(s, n, out)) return 0;
        out->n = mark;
        if (!py_literal(out, s, n)) return 0;
        return moe8_buf_json_str(out, s, n, 0);
    }
    moe8_tcx_strip(&s, &n);
    if (word_in(s, n, nulls)) return moe8_buf_str(out, "null");
    if ((types & TCX_INTEGER) && !py_int(out, s, n)) return 0;
    out->n = mark;
    if ((types & TCX_NUMBER) && !mm_number(out, s, n)) return 0;
    out->n = mark;
    if (types & TCX_BOOLEAN) {
        if (word_in(s, n, yes)) return moe8_buf_str(out, "true");
        if (word_in(s, n, no)) return moe8_buf_str(out, "false");
    }
    if ((types & (TCX_OBJECT | TCX_ARRAY)) && !moe8_toolcall_json_norm(s, n, out)) return 0;
    out->n = mark;
    if (types & TCX_STRING) return moe8_buf_json_str(out, s, n, 0);
    return json_or_string(out, s, n);
}
