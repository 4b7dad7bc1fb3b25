/*
 * test_toolcall.c — the tool-call parsers (src/server/toolcall.c) and their
 * grammars. Each fixed model output (complete calls, several, after
 * content, the v11 and V3.1 forms, and broken ones: bad JSON, wrong tags,
 * cut short; the text-argument formats' values typed by schemas, as vLLM's
 * parsers type them, Qwen3-Coder's included) is parsed whole and checked against its expected events,
 * written out by hand; then fed split at every byte boundary, at every pair
 * of boundaries (short outputs), byte by byte and in random pieces, which
 * must all give the same events joined. Also: text is not held back longer
 * than a marker could need, calls are reported as soon as their name is
 * known, the template markers are detected, and the GBNF text.
 */
#include <stdint.h>

#include <cjson/cJSON.h>

#include "core/buf.h"
#include "grammar/grammar.h"
#include "server/toolcall.h"
#include "test.h"

#define DATA MOE8_SOURCE_DIR "/tests/data"

/* DeepSeek's markers, as the parser's file spells them */
#define BAR "\xef\xbd\x9c"
#define SP "\xe2\x96\x81"
#define DS_CALLS_BEGIN "<" BAR "tool" SP "calls" SP "begin" BAR ">"
#define DS_CALLS_END "<" BAR "tool" SP "calls" SP "end" BAR ">"
#define DS_CALL_BEGIN "<" BAR "tool" SP "call" SP "begin" BAR ">"
#define DS_CALL_END "<" BAR "tool" SP "call" SP "end" BAR ">"
#define DS_SEP "<" BAR "tool" SP "sep" BAR ">"
#define DS_CALL(name, args) DS_CALL_BEGIN "function" DS_SEP name "\n```json\n" args "\n```" DS_CALL_END

/* ---- a sink that writes the events down ---------------------------------------------- */

/* Events joined: "C:text" for content, "B0:name", "A0:args", "E0:1"; kinds
 * separated by '|'; adjacent content, or arguments of one call, merged. */
typedef struct {
    char s[1 << 16];
    size_t n;
    char last;          /* kind of the last event */
    int open;           /* index of the call begun and not ended, or -1 */
    int next;           /* index the next call_begin must have */
    int bad;            /* an event out of order, or a complete call whose arguments are no object */
    int n_content, n_args;
    char args[1 << 14]; /* the open call's arguments so far */
    size_t n_a;
} rec;

static void rec_init(rec *r) {
    r->s[0] = '\0';
    r->n = r->n_a = 0;
    r->last = 0;
    r->open = -1;
    r->next = r->bad = r->n_content = r->n_args = 0;
}

static void put(rec *r, const char *s, size_t n) {
    if (r->n + n >= sizeof r->s) {
        r->bad = 1;
        return;
    }
    memcpy(r->s + r->n, s, n);
    r->n += n;
    r->s[r->n] = '\0';
}

static void head(rec *r, char kind, int index) {
    char h[24];
    int k = index < 0 ? snprintf(h, sizeof h, "%s%c:", r->n ? "|" : "", kind)
                      : snprintf(h, sizeof h, "%s%c%d:", r->n ? "|" : "", kind, index);
    put(r, h, (size_t)k);
    r->last = kind;
}

static void on_content(void *u, const char *s, size_t n) {
    rec *r = u;
    if (r->open >= 0 || !n) r->bad = 1;
    if (r->last != 'C') head(r, 'C', -1);
    put(r, s, n);
    r->n_content++;
}

static void on_begin(void *u, int index, const char *name, size_t n) {
    rec *r = u;
    if (r->open >= 0 || index != r->next || !n) r->bad = 1;
    r->open = index;
    r->next = index + 1;
    r->n_a = 0;
    head(r, 'B', index);
    put(r, name, n);
}

static void on_args(void *u, int index, const char *s, size_t n) {
    rec *r = u;
    if (index != r->open || !n) r->bad = 1;
    if (r->last != 'A') head(r, 'A', index);
    put(r, s, n);
    r->n_args++;
    if (r->n_a + n < sizeof r->args) memcpy(r->args + r->n_a, s, n);
    r->n_a += n;
}

static void on_end(void *u, int index, int ok) {
    rec *r = u;
    if (index != r->open || (ok != 0 && ok != 1)) r->bad = 1;
    if (ok) { /* the arguments of a complete call are the JSON text of an object */
        cJSON *j = r->n_a < sizeof r->args ? cJSON_ParseWithLength(r->args, r->n_a) : NULL;
        if (!cJSON_IsObject(j)) r->bad = 1;
        cJSON_Delete(j);
    }
    r->open = -1;
    head(r, 'E', index);
    put(r, ok ? "1" : "0", 1);
}

/* The request's tools every parser gets (the text-argument formats type
 * their values by them): a parameter of each JSON Schema type, a type list,
 * anyOf, an enum, no schema; a tool without parameters; one of the type
 * names and nullable schemas qwen3_coder reads. */
static const char TOOLS[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\", "
    "\"properties\": {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\"}, \"ratio\": "
    "{\"type\": \"number\"}, \"metric\": {\"type\": \"boolean\"}, \"opts\": {\"type\": \"object\"}, \"tags\": "
    "{\"type\": \"array\"}, \"maybe\": {\"type\": [\"integer\", \"null\"]}, \"any\": {}, \"either\": {\"anyOf\": "
    "[{\"type\": \"integer\"}, {\"type\": \"string\"}]}, \"color\": {\"enum\": [\"red\", 1]}}}}}, "
    "{\"type\": \"function\", \"function\": {\"name\": \"noparams\"}}, "
    "{\"type\": \"function\", \"function\": {\"name\": \"q3\", \"parameters\": {\"properties\": {"
    "\"ns\": {\"anyOf\": [{\"type\": \"string\"}, {\"type\": \"null\"}]}, \"n\": {\"type\": \"null\"}, "
    "\"i\": {\"type\": \" INT32 \"}, \"f\": {\"type\": \"float\"}, \"b\": {\"type\": \"binary\"}, "
    "\"d\": {\"type\": \"dict\"}, \"v\": {\"type\": \"varchar\"}, \"nb\": {\"anyOf\": [{\"type\": \"null\"}, "
    "{\"type\": \"boolean\"}]}, \"t\": true}}}}]";
static cJSON *g_tools;

/* The events of text fed in the pieces that end at cuts[0..n_cuts) (then the rest). */
static void run(toolcall_format f, const char *text, size_t len, const size_t *cuts, int n_cuts, rec *r) {
    toolcall_sink k = {on_content, on_begin, on_args, on_end, r, NULL};
    toolcall_parser *p = moe8_toolcall_new(f, g_tools);
    size_t at = 0;
    rec_init(r);
    for (int i = 0; i <= n_cuts; i++) {
        size_t to = i < n_cuts ? cuts[i] : len;
        if (moe8_toolcall_feed(p, text + at, to - at, &k)) r->bad = 1;
        at = to;
    }
    if (moe8_toolcall_finish(p, &k) || r->open >= 0) r->bad = 1;
    moe8_toolcall_free(p);
}

/* ---- fixed outputs --------------------------------------------------------------------- */

typedef struct {
    toolcall_format f;
    const char *name, *text, *want;
} tcase;

#define H TOOLCALL_HERMES
#define D TOOLCALL_DEEPSEEK_V3
#define M TOOLCALL_MISTRAL
#define HC(body) "<tool_call>\n" body "\n</tool_call>"
#define G TOOLCALL_GLM45
#define G7 TOOLCALL_GLM47
#define MM TOOLCALL_MINIMAX_M2
#define GKV(k, v) "<arg_key>" k "</arg_key>\n<arg_value>" v "</arg_value>\n"
#define GC(name, pairs) "<tool_call>" name "\n" pairs "</tool_call>"
#define MP(k, v) "<parameter name=\"" k "\">" v "</parameter>\n"
#define MI(name, params) "<invoke name=\"" name "\">\n" params "</invoke>\n"
#define MB(invokes) "<minimax:tool_call>\n" invokes "</minimax:tool_call>"
#define Q TOOLCALL_QWEN3_CODER
#define QP(k, v) "<parameter=" k ">\n" v "\n</parameter>\n"
#define QF(name, params) "<tool_call>\n<function=" name ">\n" params "</function>\n</tool_call>"

static const tcase CASES[] = {
    /* hermes */
    {H, "plain", "Hello, world.", "C:Hello, world."},
    {H, "angle_brackets", "a < b, <tool> x <tool_cal", "C:a < b, <tool> x <tool_cal"},
    {H, "one", HC("{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}"),
     "B0:get_weather|A0:{\"city\": \"Paris\"}|E0:1"},
    {H, "after_content", "Let me check.\n\n" HC("{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}"),
     "C:Let me check.\n\n|B0:get_weather|A0:{\"city\": \"Paris\"}|E0:1"},
    {H, "two", HC("{\"name\": \"a\", \"arguments\": {\"x\": 1}}") "\n" HC("{\"name\": \"b\", \"arguments\": {}}") "\n",
     "B0:a|A0:{\"x\": 1}|E0:1|B1:b|A1:{}|E1:1"},
    {H, "compact_normalized",
     "<tool_call>{\"name\":\"f\",\"arguments\":{\"a\":1,\"b\":[true,null,{\"c\":\"x, y: z\"}],\"d\":-0.5e+3}}</tool_call>",
     "B0:f|A0:{\"a\": 1, \"b\": [true, null, {\"c\": \"x, y: z\"}], \"d\": -0.5e+3}|E0:1"},
    {H, "spaced_normalized", HC("{ \"name\" : \"f\" ,\n \"arguments\" : {\n  \"a\" : [ 1 , 2 ] ,\n  \"e\" : { }\n }\n}"),
     "B0:f|A0:{\"a\": [1, 2], \"e\": {}}|E0:1"},
    {H, "arguments_first", HC("{\"arguments\": {\"x\": 2}, \"name\": \"g\"}"), "B0:g|A0:{\"x\": 2}|E0:1"},
    {H, "no_arguments", HC("{\"name\": \"h\"}"), "B0:h|A0:{}|E0:1"},
    {H, "other_keys", HC("{\"name\": \"h\", \"id\": 12, \"x\": [1, {\"y\": null}], \"z\": false, \"arguments\": {\"k\": 0}}"),
     "B0:h|A0:{\"k\": 0}|E0:1"},
    {H, "strings_verbatim", HC("{\"name\": \"s\", \"arguments\": {\"q\": \"caf\\u00e9 \xe2\x98\x95 \\\"x\\\" \\\\n \\/\"}}"),
     "B0:s|A0:{\"q\": \"caf\\u00e9 \xe2\x98\x95 \\\"x\\\" \\\\n \\/\"}|E0:1"},
    {H, "escaped_name", HC("{\"name\": \"get\\u005fweather\", \"arguments\": {}}"), "B0:get_weather|A0:{}|E0:1"},
    {H, "then_text", HC("{\"name\": \"f\", \"arguments\": {}}") "\nDone.", "B0:f|A0:{}|E0:1|C:\nDone."},
    {H, "no_end_tag", "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": true}}\n",
     "B0:f|A0:{\"a\": true}|E0:1"},
    {H, "cut_end_tag", "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_c", "B0:f|A0:{}|E0:1"},
    {H, "bad_json_before_name", HC("{name: \"f\"}") " after", "C:" HC("{name: \"f\"}") " after"},
    {H, "bad_json_after_name", HC("{\"name\": \"f\", \"arguments\": {\"a\": 1]}"),
     "B0:f|A0:{\"a\": 1|E0:0|C:" HC("{\"name\": \"f\", \"arguments\": {\"a\": 1]}")},
    {H, "wrong_end_tag", "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_cal> x",
     "B0:f|A0:{}|E0:0|C:<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_cal> x"},
    {H, "cut_in_arguments", "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"city\": \"Par",
     "B0:f|A0:{\"city\": \"Par|E0:0|C:<tool_call>\n{\"name\": \"f\", \"arguments\": {\"city\": \"Par"},
    {H, "cut_in_name", "Hmm <tool_call>\n{\"name\": \"get_w", "C:Hmm <tool_call>\n{\"name\": \"get_w"},
    {H, "cut_after_marker", "x<tool_call>", "C:x<tool_call>"},
    {H, "broken_then_good", "<tool_call>oops</tool_call>" HC("{\"name\": \"f\", \"arguments\": {}}"),
     "C:<tool_call>oops</tool_call>|B0:f|A0:{}|E0:1"},
    {H, "marker_after_false_start", "<tool_" HC("{\"name\": \"f\", \"arguments\": {}}"), "C:<tool_|B0:f|A0:{}|E0:1"},
    {H, "marker_right_after_break", "<tool_call><tool_call>{\"name\": \"f\"}</tool_call>",
     "C:<tool_call>|B0:f|A0:{}|E0:1"},
    {H, "empty_name", HC("{\"name\": \"\", \"arguments\": {}}"), "C:" HC("{\"name\": \"\", \"arguments\": {}}")},
    {H, "name_not_string", HC("{\"name\": 3, \"arguments\": {}}"), "C:" HC("{\"name\": 3, \"arguments\": {}}")},
    {H, "no_name", HC("{\"arguments\": {\"a\": 1}}"), "C:" HC("{\"arguments\": {\"a\": 1}}")},
    {H, "duplicate_name", HC("{\"name\": \"a\", \"name\": \"b\"}"),
     "B0:a|E0:0|C:" HC("{\"name\": \"a\", \"name\": \"b\"}")},
    {H, "string_arguments", HC("{\"name\": \"f\", \"arguments\": \"{}\"}"),
     "B0:f|E0:0|C:" HC("{\"name\": \"f\", \"arguments\": \"{}\"}")},
    {H, "bad_escape", HC("{\"name\": \"f\", \"arguments\": {\"a\": \"\\x\"}}"),
     "B0:f|A0:{\"a\": \"\\|E0:0|C:" HC("{\"name\": \"f\", \"arguments\": {\"a\": \"\\x\"}}")},
    {H, "bad_number", HC("{\"name\": \"f\", \"arguments\": {\"a\": 01}}"),
     "B0:f|A0:{\"a\": 0|E0:0|C:" HC("{\"name\": \"f\", \"arguments\": {\"a\": 01}}")},
    {H, "raw_newline_in_string", HC("{\"name\": \"f\", \"arguments\": {\"a\": \"x\ny\"}}"),
     "B0:f|A0:{\"a\": \"x|E0:0|C:" HC("{\"name\": \"f\", \"arguments\": {\"a\": \"x\ny\"}}")},
    {H, "text_between_calls", HC("{\"name\": \"a\"}") " and " HC("{\"name\": \"b\"}"),
     "B0:a|A0:{}|E0:1|C: and |B1:b|A1:{}|E1:1"},
    {TOOLCALL_NONE, "none", HC("{\"name\": \"a\"}"), "C:" HC("{\"name\": \"a\"}")},
    /* deepseek_v3 */
    {D, "ds_one", "Sure." DS_CALLS_BEGIN DS_CALL("get_weather", "{\"city\": \"Paris\"}") DS_CALLS_END,
     "C:Sure.|B0:get_weather|A0:{\"city\": \"Paris\"}|E0:1"},
    {D, "ds_two", DS_CALLS_BEGIN DS_CALL("a", "{\"x\": 1}") "\n" DS_CALL("b", "{}") DS_CALLS_END,
     "B0:a|A0:{\"x\": 1}|E0:1|B1:b|A1:{}|E1:1"},
    {D, "ds_raw_arguments", DS_CALLS_BEGIN DS_CALL("f", "{\"a\":1,  \"b\": [1,2],\n \"c\": {}}") DS_CALLS_END,
     "B0:f|A0:{\"a\":1,  \"b\": [1,2],\n \"c\": {}}|E0:1"},
    {D, "ds_v31", DS_CALLS_BEGIN DS_CALL_BEGIN "get_time" DS_SEP "{\"tz\": \"UTC\"}" DS_CALL_END DS_CALL_BEGIN
     "f" DS_SEP "{}" DS_CALL_END DS_CALLS_END, "B0:get_time|A0:{\"tz\": \"UTC\"}|E0:1|B1:f|A1:{}|E1:1"},
    {D, "ds_no_calls_end", DS_CALLS_BEGIN DS_CALL("f", "{}"), "B0:f|A0:{}|E0:1"},
    {D, "ds_then_text", DS_CALLS_BEGIN DS_CALL("f", "{}") DS_CALLS_END " ok", "B0:f|A0:{}|E0:1|C: ok"},
    {D, "ds_empty_block", "a" DS_CALLS_BEGIN DS_CALLS_END "b", "C:ab"},
    {D, "ds_wrong_type", DS_CALLS_BEGIN DS_CALL_BEGIN "func" DS_SEP "f\n```json\n{}\n```" DS_CALL_END DS_CALLS_END,
     "C:" DS_CALLS_BEGIN DS_CALL_BEGIN "func" DS_SEP "f\n```json\n{}\n```" DS_CALL_END DS_CALLS_END},
    {D, "ds_cut_in_arguments", DS_CALLS_BEGIN DS_CALL_BEGIN "function" DS_SEP "f\n```json\n{\"a\": [1, ",
     "B0:f|A0:{\"a\": [1, |E0:0|C:" DS_CALLS_BEGIN DS_CALL_BEGIN "function" DS_SEP "f\n```json\n{\"a\": [1, "},
    {D, "ds_bad_json", DS_CALLS_BEGIN DS_CALL("f", "{\"a\" 1}") DS_CALLS_END,
     "B0:f|A0:{\"a\" |E0:0|C:" DS_CALLS_BEGIN DS_CALL("f", "{\"a\" 1}") DS_CALLS_END},
    {D, "ds_missing_fence", DS_CALLS_BEGIN DS_CALL_BEGIN "function" DS_SEP "f\n```json\n{}" DS_CALL_END,
     "B0:f|A0:{}|E0:0|C:" DS_CALLS_BEGIN DS_CALL_BEGIN "function" DS_SEP "f\n```json\n{}" DS_CALL_END},
    {D, "ds_second_broken", DS_CALLS_BEGIN DS_CALL("a", "{}") "\nnope" DS_CALLS_END,
     "B0:a|A0:{}|E0:1|C:\nnope" DS_CALLS_END},
    {D, "ds_call_without_block", DS_CALL("f", "{}"), "C:" DS_CALL("f", "{}")},
    {D, "ds_cut_marker", "x" DS_CALLS_BEGIN DS_CALL_BEGIN "func", "C:x" DS_CALLS_BEGIN DS_CALL_BEGIN "func"},
    /* mistral */
    {M, "m_array", "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, {\"name\": "
     "\"get_time\", \"arguments\": {}}]", "B0:get_weather|A0:{\"city\": \"Paris\"}|E0:1|B1:get_time|A1:{}|E1:1"},
    {M, "m_array_ids", "[TOOL_CALLS][{\"name\":\"f\",\"arguments\":{\"a\":\"b\"},\"id\":\"abc123def\"}]",
     "B0:f|A0:{\"a\": \"b\"}|E0:1"},
    {M, "m_after_content", "Checking. [TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {}}]",
     "C:Checking. |B0:f|A0:{}|E0:1"},
    {M, "m_v11", "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]get_time[ARGS]{}",
     "B0:get_weather|A0:{\"city\": \"Paris\"}|E0:1|B1:get_time|A1:{}|E1:1"},
    {M, "m_v11_no_args_token", "[TOOL_CALLS]get_time{\"tz\":\"UTC\"}", "B0:get_time|A0:{\"tz\": \"UTC\"}|E0:1"},
    {M, "m_lone_object", "[TOOL_CALLS] {\"name\": \"f\", \"arguments\": {\"x\": [1]}}", "B0:f|A0:{\"x\": [1]}|E0:1"},
    {M, "m_not_marker", "see [TOOLS] and [TOOL_CALLS", "C:see [TOOLS] and [TOOL_CALLS"},
    {M, "m_unclosed_array", "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {}}\n", "B0:f|A0:{}|E0:1"},
    {M, "m_second_broken", "[TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {}}, {\"nam\": 1}]",
     "B0:a|A0:{}|E0:1|C:, {\"nam\": 1}]"},
    {M, "m_text", "[TOOL_CALLS] hello world", "C:[TOOL_CALLS] hello world"},
    {M, "m_empty_array", "[TOOL_CALLS] []", ""},
    {M, "m_cut", "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {\"a\": ",
     "B0:f|A0:{\"a\": |E0:0|C:[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {\"a\": "},
    {M, "m_v11_bad_args", "[TOOL_CALLS]f[ARGS]{\"a\"}", "B0:f|A0:{\"a\"|E0:0|C:[TOOL_CALLS]f[ARGS]{\"a\"}"},
    /* glm45 / glm47: values typed by the schema (a string as written; the rest JSON, a Python literal, text) */
    {G, "g_one", GC("get_weather", GKV("city", "Paris")), "B0:get_weather|A0:{\"city\": \"Paris\"}|E0:1"},
    {G, "g_typed", GC("get_weather", GKV("city", " Paris ") GKV("days", " 3 ") GKV("ratio", "0.50") GKV("metric", "true")
                      GKV("opts", "{\"a\":1,\"b\":[true, null]}") GKV("tags", "['x', 2, (3, 4.50), None]")
                      GKV("maybe", "null") GKV("any", "hello world") GKV(" zzz ", "7") GKV("either", "abc")),
     "B0:get_weather|A0:{\"city\": \" Paris \", \"days\": 3, \"ratio\": 0.50, \"metric\": true, \"opts\": "
     "{\"a\": 1, \"b\": [true, null]}, \"tags\": [\"x\", 2, [3, 4.5], null], \"maybe\": null, \"any\": \"hello "
     "world\", \"zzz\": 7, \"either\": \"abc\"}|E0:1"},
    {G, "g_literals", GC("f", GKV("a", "{'k': 'it\\'s', \"q\": (1,), 'e': ()}") GKV("b", "{1, 2}") GKV("c", "True")
                       GKV("d", "[1e16, 1.5e-7, -0.0, 007]") GKV("e", "'caf\\xe9\\n'")),
     "B0:f|A0:{\"a\": {\"k\": \"it's\", \"q\": [1], \"e\": []}, \"b\": \"{1, 2}\", \"c\": true, \"d\": "
     "\"[1e16, 1.5e-7, -0.0, 007]\", \"e\": \"caf\xc3\xa9\\n\"}|E0:1"},
    {G, "g_string_escaped", GC("get_weather", GKV("city", "caf\xc3\xa9 \"q\"\n\tend < </arg_valu x")),
     "B0:get_weather|A0:{\"city\": \"caf\xc3\xa9 \\\"q\\\"\\n\\tend < </arg_valu x\"}|E0:1"},
    {G7, "g47_layout", "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value><arg_key>days"
     "</arg_key><arg_value>2</arg_value></tool_call>", "B0:get_weather|A0:{\"city\": \"Paris\", \"days\": 2}|E0:1"},
    {G, "g_reads_47_layout", "<tool_call> get_weather <arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>",
     "B0:get_weather|A0:{\"city\": \"Paris\"}|E0:1"},
    {G, "g_no_args", "<tool_call>noparams\n</tool_call>", "B0:noparams|A0:{}|E0:1"},
    {G7, "g_no_args_no_newline", "<tool_call>noparams</tool_call>", "B0:noparams|A0:{}|E0:1"},
    {G, "g_two_and_text", "Sure.\n" GC("a", "") "\n" GC("b", GKV("x", "1")) "\nDone.",
     "C:Sure.\n|B0:a|A0:{}|E0:1|B1:b|A1:{\"x\": 1}|E1:1|C:\nDone."},
    {G, "g_no_end_tag", "<tool_call>f\n" GKV("a", "1"), "B0:f|A0:{\"a\": 1|E0:0|C:<tool_call>f\n" GKV("a", "1")},
    {G, "g_cut_end_tag", "<tool_call>f\n</tool_ca", "B0:f|E0:0|C:<tool_call>f\n</tool_ca"},
    {G, "g_wrong_tag", "<tool_call>f\n<arg_val>1</arg_val></tool_call>",
     "B0:f|E0:0|C:<tool_call>f\n<arg_val>1</arg_val></tool_call>"},
    {G, "g_text_between_tags", "<tool_call>f\n" GKV("a", "1") "oops</tool_call> x",
     "B0:f|A0:{\"a\": 1|E0:0|C:<tool_call>f\n" GKV("a", "1") "oops</tool_call> x"},
    {G, "g_empty_name", "<tool_call>\n" GKV("a", "1") "</tool_call>", "C:<tool_call>\n" GKV("a", "1") "</tool_call>"},
    {G, "g_cut_in_value", "<tool_call>f\n<arg_key>a</arg_key><arg_value>Par",
     "B0:f|A0:{\"a\": |E0:0|C:<tool_call>f\n<arg_key>a</arg_key><arg_value>Par"},
    {G, "g_marker_after_break", "<tool_call><tool_call>noparams\n</tool_call>", "C:<tool_call>|B0:noparams|A0:{}|E0:1"},
    {G, "g_cut_marker", "x <tool_ca", "C:x <tool_ca"},
    {G, "g_name_then_garbage_tag", "<tool_call>f<b>", "C:<tool_call>f<b>"},
    /* minimax_m2: values typed by the schema's types, in vLLM's order */
    {MM, "mm_one", MB(MI("get_weather", MP("city", "Paris"))), "B0:get_weather|A0:{\"city\": \"Paris\"}|E0:1"},
    {MM, "mm_typed", MB(MI("get_weather", MP("city", "\n  Par is \n") MP("days", " +0_3 ") MP("ratio", "2.0")
                                           MP("metric", "Yes") MP("opts", "{\"a\": [1,2]}") MP("tags", "[1, \"x\"]")
                                           MP("maybe", "None") MP("any", "12") MP("either", "12") MP("color", "1")
                                           MP("zzz", "5"))
                        MI("get_weather", MP("days", "3.5") MP("ratio", "0.10") MP("either", "abc") MP("color", "red")
                                           MP("metric", "maybe") MP("city", "null") MP("ratio", "1e-7"))),
     "B0:get_weather|A0:{\"city\": \"Par is\", \"days\": 3, \"ratio\": 2, \"metric\": true, \"opts\": {\"a\": "
     "[1, 2]}, \"tags\": [1, \"x\"], \"maybe\": null, \"any\": \"12\", \"either\": 12, \"color\": 1, \"zzz\": "
     "\"5\"}|E0:1|B1:get_weather|A1:{\"days\": 3.5, \"ratio\": 0.1, \"either\": \"abc\", \"color\": \"red\", "
     "\"metric\": \"maybe\", \"city\": null, \"ratio\": 1e-07}|E1:1"},
    {MM, "mm_numbers", MB(MI("get_weather", MP("ratio", "1e16") MP("ratio", "1e23") MP("ratio", "-0.0")
                                            MP("ratio", "123.456") MP("ratio", "0.0001") MP("ratio", "0.00001")
                                            MP("ratio", "1_0.5") MP("ratio", ".5") MP("ratio", "5.") MP("ratio", "inf")
                                            MP("ratio", "1__0") MP("days", "007") MP("days", "-0") MP("days", "1_000")
                                            MP("days", "12345678901234567890123"))),
     "B0:get_weather|A0:{\"ratio\": 10000000000000000, \"ratio\": 99999999999999991611392, \"ratio\": 0, "
     "\"ratio\": 123.456, \"ratio\": 0.0001, \"ratio\": 1e-05, \"ratio\": 10.5, \"ratio\": 0.5, \"ratio\": 5, "
     "\"ratio\": \"inf\", \"ratio\": \"1__0\", \"days\": 7, \"days\": 0, \"days\": 1000, \"days\": "
     "12345678901234567890123}|E0:1"},
    {MM, "mm_unknown_tool", MB(MI("other", MP("x", "5") MP("y", "[1]"))), "B0:other|A0:{\"x\": \"5\", \"y\": \"[1]\"}|E0:1"},
    {MM, "mm_name_quotes", MB("<invoke name='get_weather'>" MP(" days ", "1") "</invoke>" "<invoke name=noparams></invoke>"),
     "B0:get_weather|A0:{\" days \": \"1\"}|E0:1|B1:noparams|A1:{}|E1:1"}, /* " days " is no parameter */
    {MM, "mm_content_around", "Let me see.\n" MB(MI("noparams", "")) "\nok", "C:Let me see.\n|B0:noparams|A0:{}|E0:1|C:\nok"},
    {MM, "mm_no_block_end", "<minimax:tool_call>\n" MI("noparams", "") "</minimax:tool_c", "B0:noparams|A0:{}|E0:1"},
    {MM, "mm_no_invoke_end", "<minimax:tool_call>\n<invoke name=\"f\">\n" MP("a", "1"),
     "B0:f|A0:{\"a\": \"1\"|E0:0|C:<minimax:tool_call>\n<invoke name=\"f\">\n" MP("a", "1")},
    {MM, "mm_second_broken", "<minimax:tool_call>\n" MI("noparams", "") "nope</minimax:tool_call>",
     "B0:noparams|A0:{}|E0:1|C:\nnope</minimax:tool_call>"},
    {MM, "mm_empty_block", "a<minimax:tool_call></minimax:tool_call>b", "C:ab"},
    {MM, "mm_bad_name", MB("<invoke name=\"a<b\">" "</invoke>"), "C:" MB("<invoke name=\"a<b\">" "</invoke>")},
    {MM, "mm_empty_name", MB("<invoke name=\"\">" "</invoke>"), "C:" MB("<invoke name=\"\">" "</invoke>")},
    {MM, "mm_not_marker", "<minimax:tool>x", "C:<minimax:tool>x"},
    /* qwen3_coder: one newline off each end of a value, then typed as vLLM's _convert_param_value */
    {Q, "q_one", QF("get_weather", QP("city", "Paris") QP("days", "3")),
     "B0:get_weather|A0:{\"city\": \"Paris\", \"days\": 3}|E0:1"},
    {Q, "q_around_and_two", "I will check.\n\n" QF("get_weather", QP("city", "Rome")) "\n" QF("noparams", "") "\nDone.",
     "C:I will check.\n\n|B0:get_weather|A0:{\"city\": \"Rome\"}|E0:1|B1:noparams|A1:{}|E1:1|C:\nDone."},
    {Q, "q_multiline", QF("get_weather", QP("city", "\nline 1\n\n  line 3\n") "<parameter=any></parameter>"),
     "B0:get_weather|A0:{\"city\": \"\\nline 1\\n\\n  line 3\\n\", \"any\": \"\"}|E0:1"},
    {Q, "q_typed", QF("get_weather", QP("days", " 0_7 ") QP("ratio", "2.50") QP("ratio", "3.0") QP("metric", "True")
                                     QP("metric", "yes") QP("opts", "{\"a\": [1,2]}") QP("opts", "{'k': 'v'}")
                                     QP("opts", "\"{'k': 1}\"") QP("tags", "[1, 'x']") QP("maybe", "None")
                                     QP("maybe", "5") QP("maybe", "abc") QP("any", "12") QP("either", "12")
                                     QP("either", "abc") QP("color", "1") QP("zzz", "5") QP("city", "null")),
     "B0:get_weather|A0:{\"days\": 7, \"ratio\": 2.5, \"ratio\": 3, \"metric\": true, \"metric\": false, "
     "\"opts\": {\"a\": [1, 2]}, \"opts\": {\"k\": \"v\"}, \"opts\": {\"k\": 1}, \"tags\": [1, \"x\"], "
     "\"maybe\": null, \"maybe\": 5, \"maybe\": \"abc\", \"any\": \"12\", \"either\": 12, \"either\": \"abc\", "
     "\"color\": \"1\", \"zzz\": \"5\", \"city\": \"null\"}|E0:1"},
    {Q, "q_numbers", QF("get_weather", QP("days", "null") QP("days", "NONE") QP("days", "1.5") QP("ratio", "inf")
                                       QP("ratio", "nan") QP("ratio", "1e3") QP("ratio", "-0.0") QP("ratio", " 0.10 ")),
     "B0:get_weather|A0:{\"days\": null, \"days\": null, \"days\": \"1.5\", \"ratio\": \"inf\", "
     "\"ratio\": \"nan\", \"ratio\": 1000, \"ratio\": 0, \"ratio\": 0.1}|E0:1"},
    {Q, "q_names", QF("q3", QP("ns", "None") QP("ns", "x") QP("ns", "NULL") QP("n", "null") QP("n", "5")
                            QP("i", " 42 ") QP("i", "4.2") QP("f", "7") QP("f", "0.5") QP("b", "TRUE") QP("b", "1")
                            QP("d", "[1,2]") QP("v", "  x ") QP("nb", "none") QP("nb", "false") QP("t", "1")),
     "B0:q3|A0:{\"ns\": null, \"ns\": \"x\", \"ns\": null, \"n\": null, \"n\": 5, \"i\": 42, \"i\": \"4.2\", "
     "\"f\": 7, \"f\": 0.5, \"b\": true, \"b\": false, \"d\": [1, 2], \"v\": \"  x \", \"nb\": null, "
     "\"nb\": false, \"t\": \"1\"}|E0:1"},
    {Q, "q_unknown_tool", QF("other", QP("x", "5") QP(" days ", "[1]")),
     "B0:other|A0:{\"x\": \"5\", \" days \": \"[1]\"}|E0:1"},
    {Q, "q_no_block_end", "<tool_call>\n<function=noparams>\n</function>\n</tool_ca", "B0:noparams|A0:{}|E0:1"},
    {Q, "q_cut_in_value", "<tool_call>\n<function=get_weather>\n<parameter=city>\nPar",
     "B0:get_weather|A0:{\"city\": \"Par\"}|E0:1"},
    {Q, "q_cut_in_end_tag", "<tool_call>\n<function=get_weather>\n<parameter=days>\n5\n</param",
     "B0:get_weather|A0:{\"days\": \"5\\n</param\"}|E0:1"},
    {Q, "q_cut_after_value", "<tool_call>\n<function=get_weather>\n" QP("city", "Paris") "<parameter=da",
     "B0:get_weather|A0:{\"city\": \"Paris\"}|E0:1"},
    {Q, "q_cut_in_name", "<tool_call>\n<function=get_w", "C:<tool_call>\n<function=get_w"},
    {Q, "q_bad_name", "<tool_call>\n<function=get weather>\n</function>\n</tool_call>",
     "C:<tool_call>\n<function=get weather>\n</function>\n</tool_call>"},
    {Q, "q_empty_name", "<tool_call>\n<function=>\n</function>\n</tool_call>",
     "C:<tool_call>\n<function=>\n</function>\n</tool_call>"},
    {Q, "q_wrong_tag", "<tool_call>\n<function=f>\n<param=x>1</param>\n</function>\n</tool_call>",
     "B0:f|E0:0|C:<tool_call>\n<function=f>\n<param=x>1</param>\n</function>\n</tool_call>"},
    {Q, "q_empty_block", "a<tool_call>\n</tool_call>b", "C:a<tool_call>\n</tool_call>b"},
    {Q, "q_text_after_function", "<tool_call>\n<function=noparams>\n</function>\nnope</tool_call>",
     "B0:noparams|A0:{}|E0:1|C:\nnope</tool_call>"},
    {Q, "q_marker_after_break", "<tool_call><tool_call>\n<function=noparams>\n</function>\n</tool_call>",
     "C:<tool_call>|B0:noparams|A0:{}|E0:1"},
};

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}

static void show(char *s) {
    for (; *s; s++)
        if (*s == '\n') *s = '~';
}

static int cmp_size(const void *a, const void *b) {
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}

static long g_runs;

static void test_case(const tcase *c) {
    static rec whole, part;
    size_t len = strlen(c->text), cuts[16];
    int bad = 0;
    run(c->f, c->text, len, NULL, 0, &whole);
    if (!(!whole.bad && !strcmp(whole.s, c->want))) {
        char got[4096], want[4096];
        snprintf(got, sizeof got, "%.4000s", whole.s);
        snprintf(want, sizeof want, "%.4000s", c->want);
        show(got);
        show(want);
        CHECKF(0, "%s: bad %d\n got: %s\nwant: %s", c->name, whole.bad, got, want);
        return;
    }
    CHECK(1);
    /* every split in two, every split in three (short outputs), byte by byte, random pieces */
    for (size_t i = 1; i < len && !bad; i++) {
        cuts[0] = i;
        run(c->f, c->text, len, cuts, 1, &part);
        g_runs++;
        if (part.bad || strcmp(part.s, whole.s)) {
            show(part.s);
            CHECKF(0, "%s: split at %zu: %s", c->name, i, part.s);
            bad = 1;
        }
        for (size_t j = i + 1; len <= 160 && j < len && !bad; j++) {
            cuts[1] = j;
            run(c->f, c->text, len, cuts, 2, &part);
            g_runs++;
            if (part.bad || strcmp(part.s, whole.s)) {
                show(part.s);
                CHECKF(0, "%s: split at %zu, %zu: %s", c->name, i, j, part.s);
                bad = 1;
            }
        }
    }
    {
        toolcall_sink k = {on_content, on_begin, on_args, on_end, &part, NULL};
        toolcall_parser *p = moe8_toolcall_new(c->f, g_tools);
        rec_init(&part);
        for (size_t i = 0; i < len; i++) moe8_toolcall_feed(p, c->text + i, 1, &k);
        moe8_toolcall_finish(p, &k);
        moe8_toolcall_free(p);
        g_runs++;
        CHECKF(!part.bad && !strcmp(part.s, whole.s), "%s: byte by byte: %s", c->name, part.s);
    }
    for (int t = 0; t < 200 && !bad && len > 1; t++) {
        int n = 1 + (int)(rnd() % 12);
        for (int i = 0; i < n; i++) cuts[i] = 1 + rnd() % (len - 1);
        qsort(cuts, (size_t)n, sizeof *cuts, cmp_size);
        run(c->f, c->text, len, cuts, n, &part);
        g_runs++;
        if (part.bad || strcmp(part.s, whole.s)) {
            CHECKF(0, "%s: random pieces (%d): %s", c->name, n, part.s);
            bad = 1;
        }
    }
    CHECK(!bad);
}

static void test_cases(void) {
    int n = (int)(sizeof CASES / sizeof CASES[0]);
    for (int i = 0; i < n; i++) test_case(&CASES[i]);
    printf("toolcall: %d outputs, %ld split runs\n", n, g_runs);
}

/* ---- random outputs made of the formats' pieces ----------------------------------------- */

/* A block without calls (dropped whole: the format's way of saying none). */
static int has_empty_block(const char *s) {
    const char *q;
    for (q = strstr(s, DS_CALLS_BEGIN); q; q = strstr(q + 1, DS_CALLS_BEGIN)) {
        const char *r = q + strlen(DS_CALLS_BEGIN);
        while (*r == ' ' || *r == '\n') r++;
        if (!strncmp(r, DS_CALLS_END, strlen(DS_CALLS_END))) return 1;
    }
    for (q = strstr(s, "<minimax:tool_call>"); q; q = strstr(q + 1, "<minimax:tool_call>")) {
        const char *r = q + strlen("<minimax:tool_call>");
        while (*r == ' ' || *r == '\n') r++;
        if (!strncmp(r, "</minimax:tool_call>", 20)) return 1;
    }
    for (q = strstr(s, "[TOOL_CALLS]"); q; q = strstr(q + 1, "[TOOL_CALLS]")) {
        const char *r = q + 12;
        while (*r == ' ' || *r == '\n') r++;
        if (*r++ != '[') continue;
        while (*r == ' ' || *r == '\n') r++;
        if (*r == ']') return 1;
    }
    return 0;
}

/* Any split gives the events of the whole; no call reported (and no empty
 * block) means the content is the whole output, byte for byte. */
static void test_random(void) {
    static const char *const PIECES[6][24] = {
        {"<tool_call>", "</tool_call>", "<tool_call>\n{\"name\": \"f\", \"arguments\": ", "{\"name\": \"g\"}",
         "\n", " ", "{", "}", "\"name\"", "\"arguments\"", ":", ",", "\"f\"", "[", "]", "1", "true", "\"x\\\"\"",
         "<", "tool", "abc", "\\", "\"", NULL},
        {DS_CALLS_BEGIN, DS_CALLS_END, DS_CALL_BEGIN, DS_CALL_END, DS_SEP, "function", "\n```json\n", "\n```",
         "{\"a\": [1, 2]}", "{", "}", "f", "\n", " ", "<", "```", "x", "\"", ":", "1", NULL},
        {"[TOOL_CALLS]", " [", "[ARGS]", "{\"name\": \"f\", \"arguments\": {}}", "{\"name\": \"f\"", ", ", "]",
         "{", "}", "get_time", "\"arguments\"", ":", "[", "\n", " ", "x", "\"", "1", "null", NULL},
        {"<tool_call>", "</tool_call>", "<tool_call>get_weather\n", "<arg_key>", "</arg_key>", "<arg_value>",
         "</arg_value>", "city", "days", "\n", " ", "<", "1", "[1, 'a']", "{\"a\": 1}", "x", "</", "arg", "\"", NULL},
        {"<minimax:tool_call>", "</minimax:tool_call>", "<invoke name=", "\"get_weather\">", "</invoke>",
         "<parameter name=", "\"days\">", "</parameter>", ">", "\n", " ", "<", "3", "yes", "null", "'f'", "x", "\"",
         NULL},
        {"<tool_call>", "</tool_call>", "<function=", "get_weather>", "</function>", "<parameter=", "city>",
         "days>", "</parameter>", "\n</parameter>", ">", "\n", " ", "<", "3", "None", "[1, 'a']", "x", "</", "=",
         NULL},
    };
    static const toolcall_format F[6] = {TOOLCALL_HERMES, TOOLCALL_DEEPSEEK_V3, TOOLCALL_MISTRAL, TOOLCALL_GLM45,
                                         TOOLCALL_MINIMAX_M2, TOOLCALL_QWEN3_CODER};
    static rec whole, part;
    int bad = 0, n_calls = 0, n_texts = 0;
    for (int f = 0; f < 6 && !bad; f++) {
        int n_pieces = 0;
        while (PIECES[f][n_pieces]) n_pieces++;
        for (int t = 0; t < 3000 && !bad; t++) {
            char text[2048];
            size_t len = 0, cuts[8];
            int n = 1 + (int)(rnd() % 24);
            for (int i = 0; i < n; i++) {
                const char *s = PIECES[f][rnd() % (uint64_t)n_pieces];
                size_t k = strlen(s);
                memcpy(text + len, s, k);
                len += k;
            }
            text[len] = '\0';
            run(F[f], text, len, NULL, 0, &whole);
            n_texts++;
            n_calls += strstr(whole.s, "B0:") != NULL;
            if (whole.bad || (!strstr(whole.s, "B0:") && !has_empty_block(text) &&
                              !(len == 0 ? whole.n == 0 : !strncmp(whole.s, "C:", 2) && !strcmp(whole.s + 2, text)))) {
                CHECKF(0, "random %d: '%s' -> '%s' (bad %d)", f, text, whole.s, whole.bad);
                bad = 1;
            }
            for (int r = 0; r < 4 && !bad && len > 1; r++) {
                int m = r == 0 ? 0 : 1 + (int)(rnd() % 6);
                if (r == 0) { /* byte by byte */
                    toolcall_sink k = {on_content, on_begin, on_args, on_end, &part, NULL};
                    toolcall_parser *p = moe8_toolcall_new(F[f], g_tools);
                    rec_init(&part);
                    for (size_t i = 0; i < len; i++) moe8_toolcall_feed(p, text + i, 1, &k);
                    moe8_toolcall_finish(p, &k);
                    moe8_toolcall_free(p);
                } else {
                    for (int i = 0; i < m; i++) cuts[i] = 1 + rnd() % (len - 1);
                    qsort(cuts, (size_t)m, sizeof *cuts, cmp_size);
                    run(F[f], text, len, cuts, m, &part);
                }
                if (part.bad || strcmp(part.s, whole.s)) {
                    CHECKF(0, "random %d: '%s' split %d: '%s' vs whole '%s'", f, text, m, part.s, whole.s);
                    bad = 1;
                }
            }
        }
    }
    printf("toolcall: %d random outputs (%d with a call)\n", n_texts, n_calls);
    CHECK(!bad && n_calls > 500);
}

/* ---- streaming: held back no longer than needed ---------------------------------------- */

#define FEED(s) moe8_toolcall_feed(p, s, strlen(s), &k)

static void test_streaming(void) {
    static rec r;
    toolcall_sink k = {on_content, on_begin, on_args, on_end, &r, NULL};
    toolcall_parser *p = moe8_toolcall_new(TOOLCALL_HERMES, NULL);
    rec_init(&r);
    FEED("Hello <");
    CHECK(!strcmp(r.s, "C:Hello ")); /* only the '<' waits */
    FEED("b> ");
    CHECK(!strcmp(r.s, "C:Hello <b> "));
    FEED("<tool_call>\n{\"name\": \"get_wea");
    CHECK(!strcmp(r.s, "C:Hello <b> ")); /* a call, but no name yet */
    FEED("ther\", ");
    CHECK(!strcmp(r.s, "C:Hello <b> |B0:get_weather")); /* the name is known: reported */
    FEED("\"arguments\": {\"city\": \"Pa");
    CHECK(!strcmp(r.s, "C:Hello <b> |B0:get_weather|A0:{\"city\": \"Pa")); /* arguments as they come */
    FEED("ris\"}}\n</tool_call>");
    CHECK(!strcmp(r.s, "C:Hello <b> |B0:get_weather|A0:{\"city\": \"Paris\"}|E0:1"));
    CHECK(r.n_args == 2 && moe8_toolcall_count(p) == 1);
    FEED("\n"); /* whitespace after a call waits for what follows */
    CHECK(!strcmp(r.s, "C:Hello <b> |B0:get_weather|A0:{\"city\": \"Paris\"}|E0:1"));
    moe8_toolcall_finish(p, &k);
    CHECK(!strcmp(r.s, "C:Hello <b> |B0:get_weather|A0:{\"city\": \"Paris\"}|E0:1") && !r.bad);
    moe8_toolcall_free(p);
    /* GLM: a key goes out when complete, a string value as it comes (but a tail that may end it) */
    p = moe8_toolcall_new(TOOLCALL_GLM45, g_tools);
    rec_init(&r);
    FEED("<tool_call>get_weather\n<arg_key>days</arg_key>\n<arg_value>");
    CHECK(!strcmp(r.s, "B0:get_weather|A0:{\"days\": "));
    FEED("3</arg_value>\n<arg_key>city</arg_key>\n<arg_value>Pa");
    CHECK(!strcmp(r.s, "B0:get_weather|A0:{\"days\": 3, \"city\": \"Pa"));
    FEED("ris\n</arg_val");
    CHECK(!strcmp(r.s, "B0:get_weather|A0:{\"days\": 3, \"city\": \"Paris\\n"));
    FEED("ue>\n</tool_call>");
    CHECK(!strcmp(r.s, "B0:get_weather|A0:{\"days\": 3, \"city\": \"Paris\\n\"}|E0:1") && !r.bad);
    moe8_toolcall_finish(p, &k);
    moe8_toolcall_free(p);
    /* Qwen3-Coder: a string value as it comes but its last newline, which may be the format's */
    p = moe8_toolcall_new(TOOLCALL_QWEN3_CODER, g_tools);
    rec_init(&r);
    FEED("<tool_call>\n<function=get_weather>\n<parameter=city>\nPa");
    CHECK(!strcmp(r.s, "B0:get_weather|A0:{\"city\": \"Pa"));
    FEED("ris\n");
    CHECK(!strcmp(r.s, "B0:get_weather|A0:{\"city\": \"Paris"));
    FEED("\n</param");
    CHECK(!strcmp(r.s, "B0:get_weather|A0:{\"city\": \"Paris\\n"));
    FEED("eter>\n<parameter=days>\n3");
    CHECK(!strcmp(r.s, "B0:get_weather|A0:{\"city\": \"Paris\\n\", \"days\": "));
    FEED("\n</parameter>\n</function>");
    CHECK(!strcmp(r.s, "B0:get_weather|A0:{\"city\": \"Paris\\n\", \"days\": 3}|E0:1") && !r.bad);
    moe8_toolcall_finish(p, &k);
    moe8_toolcall_free(p);
    /* a nullable string waits for its end ("None" is null) */
    p = moe8_toolcall_new(TOOLCALL_QWEN3_CODER, g_tools);
    rec_init(&r);
    FEED("<tool_call>\n<function=q3>\n<parameter=ns>\nNon");
    CHECK(!strcmp(r.s, "B0:q3|A0:{\"ns\": "));
    FEED("e\n</parameter>\n</function>\n</tool_call>");
    CHECK(!strcmp(r.s, "B0:q3|A0:{\"ns\": null}|E0:1") && !r.bad);
    moe8_toolcall_finish(p, &k);
    moe8_toolcall_free(p);
    /* NULL callbacks are fine; a parser of no format is refused */
    {
        toolcall_sink none = {0};
        toolcall_parser *q = moe8_toolcall_new(TOOLCALL_MISTRAL, NULL);
        CHECK(moe8_toolcall_feed(q, "[TOOL_CALLS] [{\"name\": \"f\"}] x", 31, &none) == 0 &&
              moe8_toolcall_finish(q, &none) == 0 && moe8_toolcall_count(q) == 1);
        moe8_toolcall_free(q);
        CHECK(moe8_toolcall_new((toolcall_format)70, NULL) == NULL && moe8_toolcall_new(TOOLCALL_INVALID, NULL) == NULL);
        moe8_toolcall_free(NULL);
    }
    /* nesting past the limit breaks the call, it does not overflow */
    {
        static char deep[2000];
        size_t n = (size_t)snprintf(deep, sizeof deep, "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": ");
        for (int i = 0; i < 600; i++) deep[n++] = '[';
        deep[n] = '\0';
        run(TOOLCALL_HERMES, deep, n, NULL, 0, &r);
        CHECK(!r.bad && strstr(r.s, "|E0:0|C:<tool_call>") && strlen(strstr(r.s, "|C:") + 3) == n);
    }
}

/* ---- names, detection, grammar ---------------------------------------------------------- */

static char *slurp(const char *path) {
    char *text = NULL;
    size_t len;
    moe8_error e;
    if (moe8_read_file(path, (size_t)1 << 24, &text, &len, &e) != MOE8_OK) {
        fprintf(stderr, "cannot read %s: %s\n", path, e.message);
        exit(2);
    }
    return text;
}

static void test_names(void) {
    static const struct { const char *file; toolcall_format f; } T[] = {
        {"/jinja/qwen3.jinja", TOOLCALL_HERMES},
        {"/jinja/deepseek_v3.jinja", TOOLCALL_DEEPSEEK_V3},
        {"/tool_templates/mistral_v3_tools.jinja", TOOLCALL_MISTRAL},
        {"/jinja/llama2_chat.jinja", TOOLCALL_NONE},
        {"/jinja/mixtral_instruct.jinja", TOOLCALL_NONE},
        {"/jinja/glm_4_5.jinja", TOOLCALL_GLM45},
        {"/jinja/glm_4_6.jinja", TOOLCALL_GLM45},
        {"/jinja/glm_4_7_flash.jinja", TOOLCALL_GLM47},
        {"/jinja/minimax_m2.jinja", TOOLCALL_MINIMAX_M2},
        {"/jinja/qwen3_5.jinja", TOOLCALL_QWEN3_CODER},
    };
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++) {
        char path[4096], *src;
        snprintf(path, sizeof path, "%s%s", DATA, T[i].file);
        src = slurp(path);
        CHECKF(moe8_toolcall_detect(src) == T[i].f, "%s: detected %d", T[i].file, moe8_toolcall_detect(src));
        free(src);
    }
    CHECK(moe8_toolcall_detect(NULL) == TOOLCALL_NONE);
    CHECK(moe8_toolcall_format_from_name("hermes") == TOOLCALL_HERMES &&
          moe8_toolcall_format_from_name("deepseek_v3") == TOOLCALL_DEEPSEEK_V3 &&
          moe8_toolcall_format_from_name("deepseekv3") == TOOLCALL_DEEPSEEK_V3 &&
          moe8_toolcall_format_from_name("mistral") == TOOLCALL_MISTRAL &&
          moe8_toolcall_format_from_name("none") == TOOLCALL_NONE &&
          moe8_toolcall_format_from_name("glm45") == TOOLCALL_GLM45 &&
          moe8_toolcall_format_from_name("glm4_moe") == TOOLCALL_GLM45 &&
          moe8_toolcall_format_from_name("glm47") == TOOLCALL_GLM47 &&
          moe8_toolcall_format_from_name("minimax_m2") == TOOLCALL_MINIMAX_M2 &&
          moe8_toolcall_format_from_name("qwen3_coder") == TOOLCALL_QWEN3_CODER &&
          moe8_toolcall_format_from_name("llama3_json") == TOOLCALL_INVALID &&
          moe8_toolcall_format_from_name(NULL) == TOOLCALL_INVALID);
    CHECK(!strcmp(moe8_toolcall_format_name(TOOLCALL_DEEPSEEK_V3), "deepseek_v3") &&
          !strcmp(moe8_toolcall_format_name(TOOLCALL_NONE), "none") && !moe8_toolcall_format_name(TOOLCALL_INVALID));
    for (int f = TOOLCALL_GLM45; f <= TOOLCALL_QWEN3_CODER; f++)
        CHECK(moe8_toolcall_format_from_name(moe8_toolcall_format_name((toolcall_format)f)) == f);
}

static void expect_grammar(toolcall_format f, int parallel, const char *want) {
    static const char *const names[] = {"get_weather", "say \"hi\"\\"}, *const rules[] = {"weather-args", "say-args"};
    char *g = moe8_toolcall_grammar(f, names, rules, 2, parallel);
    CHECKF(g && !strcmp(g, want), "grammar %d/%d:\n%s\nwant:\n%s", f, parallel, g ? g : "(null)", want);
    free(g);
}

static void test_grammar(void) {
    const char *const one[] = {"f"}, *const bad_rule[] = {"f_args"};
    expect_grammar(TOOLCALL_HERMES, 0,
                   "root ::= toolcall-call\n"
                   "toolcall-call ::= toolcall-0 | toolcall-1\n"
                   "toolcall-0 ::= \"<tool_call>\\n{\\\"name\\\": \\\"get_weather\\\", \\\"arguments\\\": \" "
                   "weather-args \"}\\n</tool_call>\"\n"
                   "toolcall-1 ::= \"<tool_call>\\n{\\\"name\\\": \\\"say \\\\\\\"hi\\\\\\\"\\\\\\\\\\\", "
                   "\\\"arguments\\\": \" say-args \"}\\n</tool_call>\"\n");
    expect_grammar(TOOLCALL_HERMES, 1,
                   "root ::= toolcall-call (\"\\n\" toolcall-call)*\n"
                   "toolcall-call ::= toolcall-0 | toolcall-1\n"
                   "toolcall-0 ::= \"<tool_call>\\n{\\\"name\\\": \\\"get_weather\\\", \\\"arguments\\\": \" "
                   "weather-args \"}\\n</tool_call>\"\n"
                   "toolcall-1 ::= \"<tool_call>\\n{\\\"name\\\": \\\"say \\\\\\\"hi\\\\\\\"\\\\\\\\\\\", "
                   "\\\"arguments\\\": \" say-args \"}\\n</tool_call>\"\n");
    expect_grammar(TOOLCALL_MISTRAL, 1,
                   "root ::= \"[TOOL_CALLS] [\" toolcall-call (\", \" toolcall-call)* \"]\"\n"
                   "toolcall-call ::= toolcall-0 | toolcall-1\n"
                   "toolcall-0 ::= \"{\\\"name\\\": \\\"get_weather\\\", \\\"arguments\\\": \" weather-args \"}\"\n"
                   "toolcall-1 ::= \"{\\\"name\\\": \\\"say \\\\\\\"hi\\\\\\\"\\\\\\\\\\\", \\\"arguments\\\": \" "
                   "say-args \"}\"\n");
    expect_grammar(TOOLCALL_DEEPSEEK_V3, 0,
                   "root ::= \"" DS_CALLS_BEGIN "\" toolcall-call \"" DS_CALLS_END "\"\n"
                   "toolcall-call ::= toolcall-0 | toolcall-1\n"
                   "toolcall-0 ::= \"" DS_CALL_BEGIN "function" DS_SEP "get_weather\\n```json\\n\" weather-args "
                   "\"\\n```" DS_CALL_END "\"\n"
                   "toolcall-1 ::= \"" DS_CALL_BEGIN "function" DS_SEP "say \\\"hi\\\"\\\\\\n```json\\n\" say-args "
                   "\"\\n```" DS_CALL_END "\"\n");
    CHECK(moe8_toolcall_grammar(TOOLCALL_HERMES, one, bad_rule, 1, 0) == NULL);
    CHECK(moe8_toolcall_grammar(TOOLCALL_HERMES, one, one, 0, 0) == NULL);
    CHECK(moe8_toolcall_grammar(TOOLCALL_NONE, one, one, 1, 0) == NULL);
}

/* The text-argument formats' grammars: the GBNF text of one, then each
 * grammar through the grammar engine, which must take exactly the template's
 * layout (required parameters there, in order, optional ones optional, no
 * others, string values without "</"); what it takes, the parser reads
 * back as the same call. */
static int takes(const char *gbnf, const char *text) {
    grammar *g = NULL;
    grammar_state *st = NULL;
    moe8_error e;
    int ok = moe8_grammar_build(gbnf, strlen(gbnf), &g, &e) == MOE8_OK && moe8_grammar_state_new(g, &st, &e) == MOE8_OK &&
             moe8_grammar_accept_bytes(st, text, strlen(text), &e) == MOE8_OK && moe8_grammar_can_end(st);
    moe8_grammar_state_free(st);
    moe8_grammar_destroy(g);
    return ok;
}

/* Harmony's grammar names its special tokens: text with each <|x|> as its
 * token reference's bytes (grammar.h) in place of the marker. */
static void harmony_text(const char *s, char *out) {
    static const struct { const char *mark; int32_t id; } M[] = {
        {"<|channel|>", 200005}, {"<|message|>", 200008}, {"<|constrain|>", 200003}, {"<|end|>", 200007},
        {"<|start|>", 200006},   {"<|call|>", 200012}};
    size_t n = 0;
    while (*s) {
        size_t k = 0;
        while (k < sizeof M / sizeof *M && strncmp(s, M[k].mark, strlen(M[k].mark))) k++;
        if (k < sizeof M / sizeof *M) {
            moe8_grammar_token_ref(M[k].id, out + n);
            n += GRAMMAR_TOKEN_REF_LEN, s += strlen(M[k].mark);
        } else {
            out[n++] = *s++;
        }
    }
    out[n] = '\0';
}

static void test_grammar_harmony(void) {
    static const char *const names[] = {"get_weather", "get_time"}, *const rules[] = {"w-args", "t-args"};
    static const struct {
        int call_eos; /* <|call|> an EOS id: not in the grammar */
        const char *text;
        int ok;
    } C[] = {
        {0, "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}<|call|>", 1},
        {0, "<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>{}<|call|>", 1},
        {0, "<|channel|>analysis<|message|>Let me think.<|end|><|start|>assistant<|channel|>commentary "
            "to=functions.get_time <|constrain|>json<|message|>{}<|call|>", 1},
        {1, "<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>{}", 1},
        {0, "<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>{}", 0},  /* no <|call|> */
        {0, "<|channel|>commentary to=functions.get_other <|constrain|>json<|message|>{}<|call|>", 0},
        {0, "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{}<|call|>", 0}, /* args */
        {0, "<|channel|>final<|message|>Hi<|call|>", 0},
        {0, "<|channel|>analysis<|message|>x<|end|>", 0}, /* reasoning alone */
        {0, "<|channel|>analysis<|message|>a << b <|end|><|start|>assistant<|channel|>commentary "
            "to=functions.get_time <|constrain|>json<|message|>{}<|call|>", 1},
        {0, "<|channel|>analysis<|message|>x <<<|end|><|start|>assistant<|channel|>commentary "
            "to=functions.get_time <|constrain|>json<|message|>{}<|call|>", 1},
        {0, "<|channel|>analysis<|message|>x <|foo|><|end|><|start|>assistant<|channel|>commentary "
            "to=functions.get_time <|constrain|>json<|message|>{}<|call|>", 0}, /* a marker's text in it */
        {0, "<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>{}<|call|><|start|>assistant"
            "<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>{}<|call|>", 0}, /* one call */
    };
    toolcall_harmony_ids ids = {200005, 200008, 200003, 200007, 200006, 200012};
    for (size_t i = 0; i < sizeof C / sizeof *C; i++) {
        char text[1024], *g;
        moe8_buf b = {0};
        ids.call = C[i].call_eos ? -1 : 200012;
        g = moe8_toolcall_grammar_harmony(names, rules, 2, &ids);
        moe8_buf_str(&b, g ? g : "");
        moe8_buf_str(&b, "w-args ::= \"{\\\"city\\\": \" (\"\\\"Paris\\\"\" | \"\\\"Rome\\\"\") \"}\"\n"
                         "t-args ::= \"{}\"\n");
        harmony_text(C[i].text, text);
        CHECKF(g && takes(b.p, text) == C[i].ok, "harmony grammar case %zu: want %s\n%s", i,
               C[i].ok ? "taken" : "refused", b.p);
        if (C[i].ok) { /* the same text spelled by ordinary tokens' bytes is never taken */
            CHECKF(!takes(b.p, C[i].text), "harmony case %zu: its markers as text taken", i);
        }
        moe8_buf_free(&b);
        free(g);
    }
    CHECK(moe8_toolcall_grammar_harmony(names, rules, 0, &ids) == NULL);
    ids.start = -1;
    CHECK(moe8_toolcall_grammar_harmony(names, rules, 2, &ids) == NULL);
    ids.start = 200006;
    {
        const char *const bad[] = {"get time"};
        CHECK(moe8_toolcall_grammar_harmony(bad, rules, 1, &ids) == NULL);
    }
}

static void test_grammar_xml(void) {
    static const toolcall_xml_param WP[] = {{"city", NULL, 1}, {"days", "days-val", 0}};
    static const toolcall_xml_tool T[] = {{"get_weather", WP, 2}, {"noparams", NULL, 0}};
    static const struct {
        toolcall_format f;
        int parallel;
        const char *text, *events; /* events NULL: refused */
    } C[] = {
        {G, 0, "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>",
         "B0:get_weather|A0:{\"city\": \"Paris\"}|E0:1"},
        {G, 0, "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>a < b\n</arg_value>\n<arg_key>days"
         "</arg_key>\n<arg_value>12</arg_value>\n</tool_call>", "B0:get_weather|A0:{\"city\": \"a < b\\n\", \"days\": 12}|E0:1"},
        {G, 1, "<tool_call>noparams\n</tool_call>\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>x"
         "</arg_value>\n</tool_call>", "B0:noparams|A0:{}|E0:1|B1:get_weather|A1:{\"city\": \"x\"}|E1:1"},
        {G, 0, "<tool_call>noparams\n</tool_call>\n<tool_call>noparams\n</tool_call>", NULL}, /* one call only */
        {G, 0, "<tool_call>get_weather\n</tool_call>", NULL},                                  /* city required */
        {G, 0, "<tool_call>get_weather\n<arg_key>days</arg_key>\n<arg_value>1</arg_value>\n<arg_key>city"
         "</arg_key>\n<arg_value>x</arg_value>\n</tool_call>", NULL},                              /* order */
        {G, 0, "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>x</y</arg_value>\n</tool_call>", NULL},
        {G, 0, "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>x</arg_value>\n<arg_key>days</arg_key>"
         "\n<arg_value>1.5</arg_value>\n</tool_call>", NULL},                                      /* days' rule */
        {G, 0, "<tool_call>get_time\n</tool_call>", NULL},
        {G7, 1, "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value><arg_key>days</arg_key>"
         "<arg_value>3</arg_value></tool_call><tool_call>noparams</tool_call>",
         "B0:get_weather|A0:{\"city\": \"Paris\", \"days\": 3}|E0:1|B1:noparams|A1:{}|E1:1"},
        {G7, 0, "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>", NULL},
        {MM, 1, "<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">Paris</parameter>\n"
         "<parameter name=\"days\">2</parameter>\n</invoke>\n<invoke name=\"noparams\">\n</invoke>\n</minimax:tool_call>",
         "B0:get_weather|A0:{\"city\": \"Paris\", \"days\": 2}|E0:1|B1:noparams|A1:{}|E1:1"},
        {MM, 0, "<minimax:tool_call>\n<invoke name=\"noparams\">\n</invoke>\n</minimax:tool_call>", "B0:noparams|A0:{}|E0:1"},
        {MM, 0, "<minimax:tool_call>\n<invoke name=\"noparams\">\n</invoke>\n<invoke name=\"noparams\">\n</invoke>\n"
         "</minimax:tool_call>", NULL},
        {MM, 0, "<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"zip\">1</parameter>\n"
         "</invoke>\n</minimax:tool_call>", NULL},
        {Q, 1, QF("get_weather", QP("city", "Paris\nnorth") QP("days", "2")) "\n" QF("noparams", ""),
         "B0:get_weather|A0:{\"city\": \"Paris\\nnorth\", \"days\": 2}|E0:1|B1:noparams|A1:{}|E1:1"},
        {Q, 0, QF("noparams", ""), "B0:noparams|A0:{}|E0:1"},
        {Q, 0, QF("noparams", "") "\n" QF("noparams", ""), NULL},
        {Q, 0, QF("get_weather", QP("days", "2")), NULL},                        /* city required */
        {Q, 0, QF("get_weather", QP("city", "a</b")), NULL},
        {Q, 0, "<tool_call>\n<function=noparams></function>\n</tool_call>", NULL}, /* the template's newlines */
    };
    static rec r;
    for (size_t i = 0; i < sizeof C / sizeof C[0]; i++) {
        char *g = moe8_toolcall_grammar_xml(C[i].f, T, 2, C[i].parallel), *full = NULL;
        moe8_buf b = {0};
        if (!g) {
            CHECKF(0, "xml grammar %zu: none", i);
            continue;
        }
        moe8_buf_printf(&b, "%sdays-val ::= [0-9]+\n", g);
        full = b.p;
        CHECKF(takes(full, C[i].text) == (C[i].events != NULL), "xml grammar %zu (%s): %s '%s'\n%s", i,
               moe8_toolcall_format_name(C[i].f), C[i].events ? "refuses" : "takes", C[i].text, full);
        if (C[i].events) {
            run(C[i].f, C[i].text, strlen(C[i].text), NULL, 0, &r);
            CHECKF(!r.bad && !strcmp(r.s, C[i].events), "xml grammar %zu: parsed as %s", i, r.s);
        }
        free(g);
        moe8_buf_free(&b);
    }
    {
        char *g = moe8_toolcall_grammar_xml(G, T, 2, 1);
        const char *want = "root ::= toolcall-call (\"\\n\" toolcall-call)*\n"
                           "toolcall-call ::= toolcall-0 | toolcall-1\n"
                           "toolcall-text ::= ([^<] | \"<\" [^/])*\n"
                           "toolcall-0 ::= \"<tool_call>get_weather\\n\" (\"<arg_key>city</arg_key>\\n<arg_value>\" "
                           "toolcall-text \"</arg_value>\\n\") (\"<arg_key>days</arg_key>\\n<arg_value>\" days-val "
                           "\"</arg_value>\\n\")? \"</tool_call>\"\n"
                           "toolcall-1 ::= \"<tool_call>noparams\\n\" \"</tool_call>\"\n";
        CHECKF(g && !strcmp(g, want), "glm45 grammar:\n%s\nwant:\n%s", g ? g : "(null)", want);
        free(g);
    }
    {
        char *g = moe8_toolcall_grammar_xml(Q, T, 1, 0);
        const char *want = "root ::= toolcall-call\n"
                           "toolcall-call ::= toolcall-0\n"
                           "toolcall-text ::= ([^<] | \"<\" [^/])*\n"
                           "toolcall-0 ::= \"<tool_call>\\n<function=get_weather>\\n\" (\"<parameter=city>\\n\" "
                           "toolcall-text \"\\n</parameter>\\n\") (\"<parameter=days>\\n\" days-val "
                           "\"\\n</parameter>\\n\")? \"</function>\\n</tool_call>\"\n";
        CHECKF(g && !strcmp(g, want), "qwen3_coder grammar:\n%s\nwant:\n%s", g ? g : "(null)", want);
        free(g);
    }
    {
        static const toolcall_xml_param bad[] = {{"city", "bad_rule", 1}};
        static const toolcall_xml_tool tb[] = {{"f", bad, 1}};
        CHECK(!moe8_toolcall_grammar_xml(G, tb, 1, 0) && !moe8_toolcall_grammar_xml(G, T, 0, 0) &&
              !moe8_toolcall_grammar_xml(TOOLCALL_HERMES, T, 2, 0));
    }
}

int main(void) {
    g_tools = cJSON_Parse(TOOLS);
    CHECK(g_tools != NULL);
    test_cases();
    test_random();
    test_streaming();
    test_names();
    test_grammar();
    test_grammar_xml();
    test_grammar_harmony();
    cJSON_Delete(g_tools);
    return test_summary();
}
