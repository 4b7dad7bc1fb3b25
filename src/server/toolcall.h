/*
 * toolcall.h — model output -> OpenAI tool calls, per model family, as the
 * text streams (vLLM's tool parsers "hermes", "deepseek_v3", "mistral"),
 * and the GBNF grammar of "a call in this format" for constrained decoding
 * (tool_choice "required" or a named function: toolcall_gbnf.c). Pure
 * functions: no server state, no allocation but the parser's own buffers.
 * The formats whose arguments are text (glm45, glm47, minimax_m2,
 * qwen3_coder: toolcall_xml.c) type each value by the request's tool
 * schemas (toolcall_value.c).
 *
 * Formats (toolcall.c's header has them in full, with their sources):
 *   hermes       <tool_call>\n{"name": N, "arguments": {...}}\n</tool_call>  (Qwen2.5, Qwen3)
 *   deepseek_v3  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>N\n```json\n{...}\n```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
 *   mistral      [TOOL_CALLS] [{"name": N, "arguments": {...}}, ...]           (v3 tokenizers)
 *                [TOOL_CALLS]N[ARGS]{...}                                      (v11+ tokenizers)
 *   glm45        <tool_call>N\n<arg_key>K</arg_key>\n<arg_value>V</arg_value>\n</tool_call>   (GLM-4.5, 4.6)
 *   glm47        <tool_call>N<arg_key>K</arg_key><arg_value>V</arg_value></tool_call>           (GLM-4.7)
 *   minimax_m2   <minimax:tool_call>\n<invoke name="N">\n<parameter name="K">V</parameter>\n</invoke>\n...</minimax:tool_call>
 *   qwen3_coder  <tool_call>\n<function=N>\n<parameter=K>\nV\n</parameter>\n</function>\n</tool_call>   (Qwen3-Coder, Qwen3.5/3.6)
 *   harmony      <|channel|>commentary to=functions.N <|constrain|>json<|message|>{...}<|call|>   (gpt-oss;
 *                its analysis channel is reasoning, its final channel content: toolcall_harmony.c)
 */
#ifndef MOE8_SERVER_TOOLCALL_H
#define MOE8_SERVER_TOOLCALL_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    TOOLCALL_INVALID = -1, /* moe8_toolcall_format_from_name: no such parser */
    TOOLCALL_NONE = 0,     /* no tool calls: everything is content */
    TOOLCALL_HERMES,
    TOOLCALL_DEEPSEEK_V3,
    TOOLCALL_MISTRAL,
    TOOLCALL_GLM45,        /* both GLM layouts are read by either; they differ in the grammar */
    TOOLCALL_GLM47,
    TOOLCALL_MINIMAX_M2,
    TOOLCALL_QWEN3_CODER,
    TOOLCALL_HARMONY       /* reads the whole output: reasoning, calls and content */
} toolcall_format;

/* The formats whose arguments are text between tags (toolcall_xml.c). */
#define TOOLCALL_IS_XML(f) \
    ((f) == TOOLCALL_GLM45 || (f) == TOOLCALL_GLM47 || (f) == TOOLCALL_MINIMAX_M2 || (f) == TOOLCALL_QWEN3_CODER)

/* "hermes", "deepseek_v3" (or vLLM's spelling "deepseekv3"), "mistral",
 * "glm45" (or "glm4_moe"), "glm47", "minimax_m2", "qwen3_coder", "openai"
 * (vLLM's name for harmony), "none";
 * anything else TOOLCALL_INVALID. */
toolcall_format moe8_toolcall_format_from_name(const char *name);
/* The name of f ("hermes", ...), "none" for TOOLCALL_NONE, NULL otherwise. */
const char *moe8_toolcall_format_name(toolcall_format f);
/* The format a chat template writes its assistant tool calls in, from the
 * markers in its text; TOOLCALL_NONE when it writes none (or source NULL).
 * A template that writes "<function=" (Qwen3.5/3.6, Qwen3-Coder) is
 * qwen3_coder, vLLM's parser for them; Qwen3's and Qwen3-Next's (JSON in
 * <tool_call>) is hermes. */
toolcall_format moe8_toolcall_detect(const char *template_source);

/* What the parser finds, in the order of the text. Every callback may be
 * NULL. index counts the calls reported, from 0 (OpenAI's tool_calls index);
 * the call's id is the caller's to make. */
typedef struct {
    void (*content)(void *u, const char *s, size_t n);                 /* text to show */
    void (*call_begin)(void *u, int index, const char *name, size_t n); /* the name, whole */
    void (*call_args)(void *u, int index, const char *s, size_t n);    /* a piece of the arguments */
    /* ok 1: the call is complete, its arguments (the pieces joined) are the
     * JSON text of an object. ok 0: the call broke off after it was reported
     * (bad JSON or a wrong tag later on, or the output ended inside it): its
     * arguments are not valid JSON, and its whole text comes next as content
     * (a non-stream answer drops such a call; a stream has sent it already). */
    void (*call_end)(void *u, int index, int ok);
    void *u;
    void (*reasoning)(void *u, const char *s, size_t n);               /* harmony: analysis text */
} toolcall_sink;

typedef struct toolcall_parser toolcall_parser;
struct cJSON;

/* NULL when out of memory or f is not a format. tools: the request's
 * `tools` array (OpenAI's [{"type": "function", "function": {"name",
 * "parameters"}}]), or NULL; glm45, glm47, minimax_m2 and qwen3_coder type
 * their argument values by it (toolcall_value.c), the others do not read it.
 * Copied: the caller may free it. */
toolcall_parser *moe8_toolcall_new(toolcall_format f, const struct cJSON *tools);
/* A new parser of p's format and tools (another choice of one request). */
toolcall_parser *moe8_toolcall_new_like(const toolcall_parser *p);
/* Feed the next s[0..n) of the output (UTF-8 text, split anywhere, even
 * inside a character). Text goes out as content unless it could still be
 * the start of a call marker; a call is reported (call_begin, then its
 * arguments in pieces as they are checked) once its name is known and the
 * text so far is a well-formed call; text that looks like a call but is not
 * one (bad JSON, no name, a wrong tag) comes out as content, in order. The
 * events are the same, joined, however the output is split. Whitespace
 * between calls and after the last one is part of the format (dropped).
 * 0, or -1 when out of memory (the parser is then spent). */
int moe8_toolcall_feed(toolcall_parser *p, const char *s, size_t n, const toolcall_sink *k);
/* The output ended: what was held back goes out. A call whose JSON is
 * complete but whose closing tag is missing (hermes </tool_call>, mistral's
 * "]", deepseek's <｜tool▁calls▁end｜>) is complete, as vLLM takes it, and so
 * is a qwen3_coder call cut anywhere after its name (with what was read, as
 * vLLM's qwen3_coder takes it); any other unfinished call is not (call_end
 * ok 0, or content if unreported).
 * 0, or -1 when out of memory. */
int moe8_toolcall_finish(toolcall_parser *p, const toolcall_sink *k);
/* Calls reported so far (complete or not). */
int moe8_toolcall_count(const toolcall_parser *p);
void moe8_toolcall_free(toolcall_parser *p);

/* GBNF (llama.cpp's syntax) whose root is one call in format f, or with
 * `parallel` one or more, to any of the n_tools tools: tool i by its name
 * names[i], with arguments matching the rule named arg_rules[i] (the caller
 * appends those rules, e.g. from each tool's parameters schema). The markers
 * are literal strings; the layout is the one the model's template teaches
 * (hermes: one <tool_call> block per call, "\n" between; deepseek_v3: one
 * <｜tool▁calls▁begin｜> block, "\n" between calls; mistral: the v3 array
 * [TOOL_CALLS] [{...}, {...}]). Rules it adds are named "toolcall-...".
 * Not for glm45, glm47, minimax_m2, qwen3_coder, whose arguments are not
 * one JSON object: moe8_toolcall_grammar_xml.
 * malloc'd text (free()), or NULL: out of memory, n_tools < 1, f not a
 * format, or an arg rule name that is not a GBNF name ([a-zA-Z0-9-]+). */
char *moe8_toolcall_grammar(toolcall_format f, const char *const *names, const char *const *arg_rules,
                       int n_tools, int parallel);

/* A parameter of a tool, for moe8_toolcall_grammar_xml: its name, the rule
 * of its value (JSON by its schema, a GBNF name [a-zA-Z0-9-]+ the caller
 * appends) or NULL for a string parameter (its text as written), and
 * whether it must be there. */
typedef struct {
    const char *name, *rule;
    int required;
} toolcall_xml_param;
typedef struct {
    const char *name;
    const toolcall_xml_param *params; /* [n_params], in the schema's order */
    int n_params;
} toolcall_xml_tool;

/* moe8_toolcall_grammar for glm45, glm47, minimax_m2 and qwen3_coder: one call (or with
 * `parallel` one or more) to any of the n_tools tools, each parameter as a
 * key / value pair in the order given, the optional ones may be left out,
 * others never there. The layout is the template's: glm45
 * "<tool_call>N\n<arg_key>K</arg_key>\n<arg_value>V</arg_value>\n</tool_call>",
 * "\n" between calls; glm47 the same without newlines; minimax_m2 one
 * "<minimax:tool_call>\n" block of "<invoke name=\"N\">\n<parameter
 * name=\"K\">V</parameter>\n</invoke>\n"; qwen3_coder
 * "<tool_call>\n<function=N>\n<parameter=K>\nV\n</parameter>\n</function>\n</tool_call>",
 * "\n" between calls. A string value is any text without "</". malloc'd text, or NULL: out of memory, n_tools < 1, f not
 * one of these, or a rule that is not a GBNF name. */
char *moe8_toolcall_grammar_xml(toolcall_format f, const toolcall_xml_tool *tools, int n_tools, int parallel);

/* gpt-oss's special tokens (ids in the model's tokenizer) that a harmony call
 * is made of; call -1 when <|call|> ends the output by itself (an EOS id). */
typedef struct {
    int32_t channel, message, constrain, end, start, call;
} toolcall_harmony_ids;

/* moe8_toolcall_grammar for harmony (gpt-oss): an optional analysis message
 * "<|channel|>analysis<|message|>TEXT<|end|><|start|>assistant" (TEXT
 * without "<|", which the output parser would read as a marker; reasoning,
 * as vLLM's gpt-oss structural tag allows), then one call to any of the
 * n_tools tools, "<|channel|>commentary to=functions.NAME <|constrain|>json
 * <|message|>" ARGS, then <|call|> (ids->call; -1: left to the EOS ids).
 * The special tokens are token references (grammar.h's `<[N]>`), so only
 * those tokens match them, never their text spelled otherwise. One call
 * whatever `parallel` says: harmony ends the turn at <|call|>. malloc'd text,
 * or NULL: out of memory, n_tools < 1, a name with ' ' or '<' (it would end
 * the header), an id missing, or a rule that is not a GBNF name. */
char *moe8_toolcall_grammar_harmony(const char *const *names, const char *const *arg_rules, int n_tools,
                                    const toolcall_harmony_ids *ids);

/* DeepSeek's markers: "<｜tool▁calls▁begin｜>" and so on (U+FF5C, U+2581 in UTF-8) */
#define TOOLCALL_DS_MARK(a, b) "<\xef\xbd\x9ctool\xe2\x96\x81" a "\xe2\x96\x81" b "\xef\xbd\x9c>"
#define TOOLCALL_DS_CALLS_BEGIN TOOLCALL_DS_MARK("calls", "begin")
#define TOOLCALL_DS_CALLS_END TOOLCALL_DS_MARK("calls", "end")
#define TOOLCALL_DS_CALL_BEGIN TOOLCALL_DS_MARK("call", "begin")
#define TOOLCALL_DS_CALL_END TOOLCALL_DS_MARK("call", "end")
#define TOOLCALL_DS_SEP "<\xef\xbd\x9ctool\xe2\x96\x81sep\xef\xbd\x9c>"

#endif
