/*
 * toolcall_xml.h — inside the tool-call parsers (toolcall.h): the formats
 * whose arguments are text between tags, GLM's, MiniMax-M2's and
 * Qwen3-Coder's (toolcall_xml.c), the typing of their values by the request's tool
 * schemas (toolcall_value.c), and the JSON scanner they share with the
 * other formats (toolcall.c).
 */
#ifndef MOE8_SERVER_TOOLCALL_XML_H
#define MOE8_SERVER_TOOLCALL_XML_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "core/buf.h"
#include "server/toolcall.h"

/* The events a parser has read but not yet handed to its sink: content or
 * a call's arguments, never both (one of each parser's, toolcall.c's and
 * toolcall_xml.c's). oom: an append failed (the parser is then spent). */
typedef struct {
    moe8_buf cbuf, abuf;
    const toolcall_sink *k;
    int oom;
} moe8_tc_out;
void moe8_tc_need(moe8_tc_out *o, int rc);
/* Hand what is held to the sink (arguments as call `cur`'s). */
void moe8_tc_flush(moe8_tc_out *o, int cur);
void moe8_tc_content(moe8_tc_out *o, int cur, const char *s, size_t n);
void moe8_tc_args(moe8_tc_out *o, int cur, const char *s, size_t n);

/* Text outside calls, watched for the format's start marker (one in each
 * parser, toolcall.c's and toolcall_xml.c's): the marker's bytes matched at
 * the end of the text are held back until decided, and whitespace after a
 * call is held in ws, dropped if a call or the end comes. marker: its first
 * byte occurs nowhere else in it; NULL: no marker (every byte is content). */
typedef struct {
    const char *marker;
    size_t marker_n;
    size_t held;           /* bytes of the marker matched at the end of the text */
    int after_call;        /* whitespace now follows a call */
    moe8_buf ws;
} moe8_tc_text;
/* Byte c of the text, its content handed to o as call cur's: 1 when c
 * completes the marker (the caller then starts a block), else 0. */
int moe8_tc_text_byte(moe8_tc_text *t, moe8_tc_out *o, int cur, unsigned char c);
/* The output ended in text: what is held is content. */
void moe8_tc_text_end(moe8_tc_text *t, moe8_tc_out *o, int cur);

/* The parser of glm45, glm47, minimax_m2 or qwen3_coder output; toolcall.c's API
 * functions hand these formats to it. tools: the request's `tools` array
 * or NULL; copied. */
typedef struct tcx tcx;
tcx *moe8_tcx_new(toolcall_format f, const cJSON *tools);
int moe8_tcx_feed(tcx *x, const char *s, size_t n, const toolcall_sink *k);
int moe8_tcx_finish(tcx *x, const toolcall_sink *k);
int moe8_tcx_count(const tcx *x);
const cJSON *moe8_tcx_tools(const tcx *x);
void moe8_tcx_free(tcx *x);

/* What a parameter's schema says its value is (bits). TCX_NULL: it admits
 * null (qwen3_coder: "type": "null", or a null in its anyOf). */
enum { TCX_STRING = 1, TCX_INTEGER = 2, TCX_NUMBER = 4, TCX_BOOLEAN = 8, TCX_OBJECT = 16, TCX_ARRAY = 32,
       TCX_OTHER = 64, TCX_NULL = 128 };
/* The types of parameter `key` of tool `fn` as format f's parser reads the
 * schema (toolcall_value.c's header). */
unsigned moe8_tcx_param_types(const cJSON *tools, toolcall_format f, const char *fn, const char *key);
/* The text s[0..n) of a value of those types, as JSON appended to out.
 * 0, or -1 out of memory. */
int moe8_tcx_value(moe8_buf *out, toolcall_format f, unsigned types, const char *s, size_t n);
/* Python's str.strip() of s[0..n) (Unicode whitespace), in place. */
void moe8_tcx_strip(const char **s, size_t *n);

/* s[0..n) is one JSON value (RFC 8259), whitespace around it allowed:
 * appended to out in json.dumps's layout (no other whitespace, ", " and
 * ": " between items; strings and numbers as written), 0; else -1 (out
 * may hold part of it: the caller cuts it back). toolcall.c. */
int moe8_toolcall_json_norm(const char *s, size_t n, moe8_buf *out);

#endif
