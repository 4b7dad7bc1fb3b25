#!/usr/bin/env python3
"""make_goldens.py -- the reference outputs tests/test_jinja.c compares moe8's
Jinja interpreter with, rendered by Python's jinja2 the way Hugging Face
transformers' apply_chat_template renders chat templates.

Run by hand (never by the build or the tests), from anywhere:

    python3 tests/data/jinja/make_goldens.py      # writes goldens.json beside it

Needs jinja2 (Debian: apt-get install python3-jinja2; 3.1.x was used).

The environment is transformers' _compile_jinja_template: jinja2's
ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, the loop
controls extension, the {% generation %} tag (rendered as its body),
raise_exception raising TemplateError, and tojson replaced by a json.dumps
that does not escape HTML (ensure_ascii=False unless asked). A chat renders
as render(messages=..., tools=None, documents=None, add_generation_prompt=...,
**special_tokens, **kwargs), the special tokens being bos_token/eos_token of
the model (unset ones absent, hence undefined).

goldens.json holds:
  templates  name -> {file, bos_token, eos_token}
  chats      [{template, case, messages, add_generation_prompt, kwargs, output | error}]
  units      [{name, template, vars, output | error}]   (the interpreter itself)
An error is "<Python exception type>: <message>"; the C test only asks that
moe8 fails too, and for TemplateError (raise_exception) that it carries the
message.
"""
import json
import os
import sys

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))


class GenerationTag(Extension):
    """transformers' AssistantTracker without the tracking: the body as it is."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller):
        return caller()


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


ENV = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                    extensions=[GenerationTag, jinja2.ext.loopcontrols])
ENV.filters["tojson"] = tojson
ENV.globals["raise_exception"] = raise_exception


def render(source, variables):
    try:
        return {"output": ENV.from_string(source).render(**variables)}
    except Exception as e:  # the C test checks that moe8 fails as well
        return {"error": "%s: %s" % (type(e).__name__, e)}


# ---- the four chat templates -------------------------------------------------------

TEMPLATES = {
    "qwen3": {"file": "qwen3.jinja", "bos_token": None, "eos_token": "<|im_end|>"},
    "llama2_chat": {"file": "llama2_chat.jinja", "bos_token": "<s>", "eos_token": "</s>"},
    "mixtral_instruct": {"file": "mixtral_instruct.jinja", "bos_token": "<s>", "eos_token": "</s>"},
    "deepseek_v3": {"file": "deepseek_v3.jinja", "bos_token": "<\uff5cbegin\u2581of\u2581sentence\uff5c>",
                    "eos_token": "<\uff5cend\u2581of\u2581sentence\uff5c>"},
}

SYS = {"role": "system", "content": "You are a helpful assistant."}
U1 = {"role": "user", "content": "Hello!"}
A1 = {"role": "assistant", "content": "Hi! How can I help?"}
U2 = {"role": "user", "content": "What is 2 + 2?"}
A2 = {"role": "assistant", "content": "4."}
THINK = {"role": "assistant", "content": "<think>\nThe user greets me.\n</think>\n\nHello there."}
SPECIAL = {"role": "user", "content": "Quotes ' \" and \\ backslash, {{ not a tag }} {% raw %} {# x #}\n"
                                      "tabs\there, unicode: \u4f60\u597d \U0001f680 \u00e9\u00e8 \u2028 end"}
NEWLINES = {"role": "user", "content": "\n\n  line one\nline two  \n\n"}
PADDED = {"role": "assistant", "content": "   padded answer   "}

CASES = [
    ("user", [U1]),
    ("system_user", [SYS, U1]),
    ("multi_turn", [U1, A1, U2]),
    ("system_multi_turn", [SYS, U1, A1, U2]),
    ("assistant_last", [SYS, U1, A1, U2, A2]),
    ("think_in_history", [U1, THINK, U2]),
    ("think_last", [U1, THINK]),
    ("special_chars", [SPECIAL]),
    ("newlines", [SYS, NEWLINES, PADDED, NEWLINES]),
    ("empty_content", [{"role": "user", "content": ""}]),
    ("system_only", [SYS]),
    ("two_users", [U1, U2]),
    ("assistant_first", [A1, U1]),
    ("system_twice", [SYS, SYS, U1]),
    ("tool_turn", [U1, {"role": "assistant", "content": "Calling."},
                   {"role": "tool", "content": "{\"temp\": 21}"}, U2]),
    ("null_content", [U1, {"role": "assistant", "content": None}]),
]


def chat_goldens():
    out = []
    for name, t in TEMPLATES.items():
        source = open(os.path.join(HERE, t["file"]), encoding="utf-8", newline="").read()
        special = {k: t[k] for k in ("bos_token", "eos_token") if t[k] is not None}
        kwarg_sets = [None]
        if name == "qwen3":
            kwarg_sets += [{"enable_thinking": False}, {"enable_thinking": True}]
        for case, messages in CASES:
            for gen in (True, False):
                for kw in kwarg_sets:
                    variables = {"messages": messages, "tools": None, "documents": None,
                                 "add_generation_prompt": gen}
                    variables.update(special)
                    variables.update(kw or {})
                    g = {"template": name, "case": case, "messages": messages,
                         "add_generation_prompt": gen, "kwargs": kw}
                    g.update(render(source, variables))
                    out.append(g)
    return out


# ---- the interpreter itself -----------------------------------------------------------

MSGS = [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "yo"}]

UNITS = [
    # literals and printing
    ("literals", "{{ 1 }} {{ -3 }} {{ 1.5 }} {{ 'a' }} {{ \"b\" }} {{ true }} {{ false }} {{ none }} {{ True }} {{ None }}", {}),
    ("floats", "{{ 1.0 }} {{ 1e20 }} {{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ 0.00001 }} {{ 1/3 }} {{ 10/2 }} {{ -0.0 }} {{ 1e-7 }} {{ 0.1 + 0.2 }} {{ 123456.789e3 }}", {}),
    ("float_repr_more", "{{ 2.5e-5 }} {{ 1.7976931348623157e308 }} {{ 5e-324 }} {{ 100.0 }} {{ 1234567890123456.0 }} {{ 12345678901234567.0 }}", {}),
    ("big_ints", "{{ 9223372036854775807 }} {{ -9223372036854775807 - 1 }} {{ 2 ** 62 }}", {}),
    ("lists_dicts", "{{ [1, 'a', none, true, 1.5, {'k': 'v'}] }} {{ {'a': 1, 'b': [2]} }} {{ (1, 2) }} {{ (1,) }} {{ () }} {{ [] }} {{ {} }}", {}),
    ("str_repr_quotes", "{{ [\"it's\", 'a\"b', 'a\"b\\'c', 'back\\\\slash', 'tab\\tnl\\n'] }}", {}),
    ("str_repr_unicode", "{{ ['\u00e9', '\u4f60', '\U0001f680', '\\x01', '\\x7f', '\\u200b', '\\u2028', '\\xa0'] }}", {}),
    ("string_escapes", "{{ 'a\\nb' }}|{{ '\\x41\\u00e9\\101' }}|{{ '\\q' }}|{{ 'tab\\there' }}|{{ \"dq \\\"x\\\"\" }}|{{ 'a' 'b' \"c\" }}", {}),
    ("multiline_string", "{{ 'line1\nline2' }}", {}),
    ("namespace_repr", "{% set ns = namespace(a=1, b='x') %}{{ ns }}", {}),
    # arithmetic
    ("arith_int", "{{ 7 + 3 }} {{ 7 - 10 }} {{ 6 * 7 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 2 ** -1 }}", {}),
    ("arith_float", "{{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 7.5 % -2 }} {{ 1.5 * 2 }} {{ 2 ** 0.5 }} {{ 10 / 4 }} {{ -2 ** 2 }} {{ 2 ** 3 ** 2 }}", {}),
    ("arith_bool", "{{ true + true }} {{ true * 3 }} {{ false - 1 }}", {}),
    ("arith_str_list", "{{ 'ab' + 'cd' }} {{ 'ab' * 3 }} {{ 3 * 'ab' }} {{ 'x' * -1 }}| {{ [1] + [2, 3] }} {{ [1, 2] * 2 }} {{ [] * 3 }}", {}),
    ("concat", "{{ 'a' ~ 1 ~ none ~ true ~ 1.5 ~ [1] }}|{{ undefined_x ~ 'y' }}", {}),
    ("unary", "{{ -(3) }} {{ +3 }} {{ - 2.5 }} {{ not 1 }} {{ not '' }} {{ not none is none }}", {}),
    ("precedence", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 * 3 ~ 4 }} {{ (1 + 2) ~ 3 }} {{ 10 - 2 - 3 }} {{ 100 / 10 / 5 }} {{ 'ab'|length + 1 }} {{ 2 ** 2 * 3 }}", {}),
    ("precedence_concat", "{{ 1 + 2 ~ 3 }}", {}),
    ("precedence_unary_filter", "{{ -'ab'|length }}", {}),
    ("div_zero", "{{ 1 / 0 }}", {}),
    ("mod_zero", "{{ 1 % 0 }}", {}),
    ("add_str_int", "{{ 'a' + 1 }}", {}),
    ("add_str_none", "{{ 'a' + none }}", {}),
    ("neg_str", "{{ -'a' }}", {}),
    # comparisons and logic
    ("compare", "{{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ [1, 2] < [1, 2, 3] }} {{ 2 >= 2 }} {{ 'b' > 'a' }} {{ 1 != 2 }} {{ none == none }} {{ [1] == [1] }} {{ {'a': 1} == {'a': 1} }}", {}),
    ("compare_chain", "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 < 3 > 2 }} {{ 1 == 1 == 1 }}", {}),
    ("compare_unicode", "{{ '\u00e9' > 'z' }} {{ '\U0001f680' > '\u4f60' }} {{ 'a' < 'aa' }}", {}),
    ("compare_mixed", "{{ 1 < 'a' }}", {}),
    ("compare_tuple_list", "{{ (1, 2) == [1, 2] }} {{ (1, 2) == (1, 2) }}", {}),
    ("in_operator", "{{ 'a' in 'abc' }} {{ '' in 'abc' }} {{ 1 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'a' not in 'b' }} {{ 'x' in undefined_v }} {{ 3 not in [1] }}", {}),
    ("in_str_int", "{{ 5 in 'abc' }}", {}),
    ("in_none", "{{ 'b' in none }}", {}),
    ("and_or", "{{ 1 and 'x' }} {{ 0 and 'x' }} {{ 0 or 'y' }} {{ 'z' or 'y' }} {{ none or none }} {{ [] or {} }} {{ undefined_v or 'd' }}", {}),
    ("condexpr", "{{ 'a' if true else 'b' }}{{ 'c' if false else 'd' if true }}|{{ 'x' if false }}|{{ ('x' if false) is defined }}|{{ 1 if 2 }}", {}),
    # variables, attributes, items, slices
    ("attr_item", "{{ messages[0].role }} {{ messages[1]['content'] }} {{ messages[-1].content }} {{ messages|length }} {{ messages[5] }}|{{ messages[0].missing }}|", {"messages": MSGS}),
    ("attr_of_none", "{{ x.y }}|{{ x.y is defined }}", {"x": None}),
    ("attr_of_undefined", "{{ nothing.attr }}", {}),
    ("item_of_undefined", "{{ nothing[0] }}", {}),
    ("undefined_print", "[{{ nothing }}]{{ nothing is defined }}{{ nothing is undefined }}{{ nothing|length }}{% for x in nothing %}x{% endfor %}", {}),
    ("undefined_arith", "{{ nothing + 1 }}", {}),
    ("undefined_call", "{{ nothing() }}", {}),
    ("dict_method_vs_key", "{{ d['items'] }} {{ d.get('items') }} {{ d.get('zz', 'dflt') }} {{ d.get('zz') }} {{ d.keys()|list }} {{ d.values()|list }} {{ d.items()|list }}", {"d": {"items": 3, "b": "x"}}),
    ("tuple_index", "{{ d[1, 'a'] }}|{{ {(1, 2): 'pair'}[1, 2] }}", {"d": {}}),
    ("unhashable_in", "{{ [1] in {'a': 1} }}", {}),
    ("unhashable_key", "{{ {[1]: 2} }}", {}),
    ("nested", "{{ d.a.b[1].c }}", {"d": {"a": {"b": [0, {"c": "deep"}]}}}),
    ("slices", "{{ [1, 2, 3][::2] }} {{ [1, 2, 3][-1:] }} {{ 'hello'[1:-1] }} {{ [1, 2, 3][10:] }} {{ 'abc'[::-1] }} {{ 'h\u00e9llo'[1:3] }} {{ [1, 2, 3, 4, 5][4:0:-2] }} {{ 'abcdef'[-2::-2] }} {{ [1, 2, 3][:] }} {{ 'abc'[5:1] }}", {}),
    ("index_str", "{{ 'abc'[1] }} {{ 'abc'[-1] }} {{ '\u00e9\u4f60'[1] }} {{ [1, 2][-3] }}|{{ l.1 }}", {"l": [5, 6]}),
    ("messages_reversed", "{% for m in messages[::-1] %}{{ m.role }},{% endfor %}", {"messages": MSGS}),
    # whitespace control, trim_blocks and lstrip_blocks
    ("ws_blocks", "  {% if true %}\n  yes\n  {% endif %}\n  done\n", {}),
    ("ws_minus", "a  {%- if true -%}  b  {%- endif -%}  c", {}),
    ("ws_comment", "a\n  {#- c -#}\n  b", {}),
    ("ws_comment_line", "a\n  {# c #}\n  b\n", {}),
    ("ws_var", "{{ 'x' }}\n{{ 'y' }}\n", {}),
    ("ws_var_minus", "a \n {{- 'x' -}} \n b", {}),
    ("ws_plus", "  {%+ if true %}\n  yes\n  {% endif +%}\n  done", {}),
    ("ws_inline", "x {% if true %}y{% endif %} z\n{% if true %}  w  {% endif %}\n", {}),
    ("ws_text_before_tag", "text {% if true %}\nin\n{% endif %}\nafter", {}),
    ("ws_crlf", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc\r\n", {}),
    ("ws_trailing_newlines", "x\n\n", {}),
    ("ws_tabs", "\t{% if true %}\n\tyes\n\t{% endif %}\n", {}),
    ("ws_for_lines", "{% for i in range(3) %}\n  {{ i }}\n{% endfor %}\n", {}),
    ("raw", "{% raw %}{{ x }} {% if %}{% endraw %}|{%- raw -%}  a  {%- endraw -%}|", {}),
    ("dict_in_output", "{{ {'a': {'b': 1}} }}", {}),
    # loops
    ("loop_vars", "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }};{% endfor %}", {}),
    ("loop_prev_next", "{% for i in range(3) %}{{ loop.previtem }}|{{ loop.nextitem }};{% endfor %}", {}),
    ("loop_cycle", "{% for i in range(5) %}{{ loop.cycle('x', 'y', 'z') }}{% endfor %}", {}),
    ("loop_else", "{% for x in [] %}a{% else %}empty{% endfor %}{% for x in [1] %}b{% else %}no{% endfor %}", {}),
    ("loop_filter", "{% for x in [1, 2, 3, 4] if x is even %}{{ x }}:{{ loop.index }}/{{ loop.length }} {% endfor %}", {}),
    ("loop_unpack", "{% for a, b in [[1, 2], [3, 4]] %}{{ a }}{{ b }}{% endfor %}{% for k, v in {'x': 1, 'y': 2}.items() %}{{ k }}={{ v }};{% endfor %}{% for a, b in ['ab', 'cd'] %}{{ b }}{% endfor %}", {}),
    ("loop_unpack_short", "{% for a, b in [[1]] %}{{ b }}{% endfor %}", {}),
    ("loop_dict", "{% for k in {'x': 1, 'y': 2} %}{{ k }}{% endfor %}", {}),
    ("loop_nested", "{% for i in [1, 2] %}{% for j in [3, 4] %}{{ loop.index }}{{ i }}{{ j }} {% endfor %}{{ loop.index }}|{% endfor %}", {}),
    ("loop_break_continue", "{% for i in range(10) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 4 %}{% break %}{% endif %}{{ i }}{% endfor %}", {}),
    ("loop_over_int", "{% for x in 5 %}{{ x }}{% endfor %}", {}),
    ("loop_over_none", "{% for x in none %}{{ x }}{% endfor %}", {}),
    ("loop_name_reuse", "{% set x = [1, 2] %}{% for x in x %}{{ x }}{% endfor %}{{ x }}", {}),
    ("loop_outside", "{{ loop.index }}", {}),
    # scoping
    ("scope_loop", "{% set x = 0 %}{% for i in range(3) %}{{ x }}{% set x = x + 1 %}{{ x }}{% endfor %}{{ x }}", {}),
    ("scope_loop_if", "{% set x = 5 %}{% for i in range(3) %}{% if i == 1 %}{% set x = 9 %}{% endif %}{{ x }}{% endfor %}{{ x }}", {}),
    ("scope_iteration", "{% for i in range(3) %}{% if i == 0 %}{% set y = 1 %}{% endif %}{{ y }}{% endfor %}", {}),
    ("scope_if", "{% if true %}{% set z = 3 %}{% endif %}{{ z }}", {}),
    ("scope_else", "{% set y = 0 %}{% for x in [] %}{% else %}{{ y }}{% set y = 1 %}{{ y }}{% endfor %}{{ y }}", {}),
    ("scope_shadow_var", "{% set messages = 'mine' %}{{ messages }}", {"messages": MSGS}),
    ("set_forms", "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c = 1, 2 %}{{ c }}{% set d %}inner {{ a }}{% endset %}[{{ d }}]", {}),
    ("set_unpack_self", "{% set a = 1 %}{% set a, b = [a, 2] %}{{ a }}{{ b }}", {}),
    ("namespace", "{% set ns = namespace(x=0, found=false) %}{% for i in [1, 2, 3] %}{% set ns.x = ns.x + i %}{% if i == 2 %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.x }} {{ ns.found }} {{ ns.missing is defined }}", {}),
    ("namespace_empty", "{% set ns = namespace() %}{% set ns.index = 0 %}{% set ns.index = ns.index + 1 %}{{ ns.index }}", {}),
    ("namespace_dict", "{% set ns = namespace({'a': 1}) %}{{ ns.a }}", {}),
    ("set_attr_not_ns", "{% set d = {} %}{% set d.x = 1 %}", {}),
    # macros
    ("macro", "{% macro m(a, b=2) %}[{{ a }}{{ b }}{{ t }}]{% endmacro %}{% set t = 5 %}{{ m(1) }}{{ m(1, b=3) }}{{ m() }}{{ m(b=7, a=6) }}", {}),
    ("macro_late_binding", "{% set t = 1 %}{% macro m() %}{{ t }}{% endmacro %}{% set t = 2 %}{{ m() }}", {}),
    ("macro_in_loop", "{% for i in [1, 2] %}{% macro m() %}{{ i }}{% endmacro %}{{ m() }}{% endfor %}", {}),
    ("macro_before_def", "{{ m() }}{% macro m() %}x{% endmacro %}", {}),
    ("macro_recursive", "{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(5) }}", {}),
    ("macro_too_many", "{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", {}),
    ("macro_bad_kw", "{% macro m(a) %}{% endmacro %}{{ m(zz=1) }}", {}),
    ("macro_default_uses_arg", "{% macro m(a, b=a * 2) %}{{ a }},{{ b }}{% endmacro %}{{ m(3) }}", {}),
    # tests
    ("tests_numbers", "{{ 2.5 is even }} {{ 3.0 is odd }} {{ -3 is odd }} {{ 7.5 is divisibleby 2.5 }} {{ -4 is divisibleby 3 }} {{ true is odd }}", {}),
    ("tests", "{{ 5 is divisibleby 5 }} {{ none is none }} {{ 3 is number }} {{ 'a' is string }} {{ false is false }} {{ 0 is false }} {{ true is true }} {{ 1 is true }} {{ 3 is odd }} {{ 4 is even }} {{ 1.5 is float }} {{ 1 is integer }} {{ true is boolean }} {{ 1 is boolean }}", {}),
    ("tests_more", "{{ 'abc' is lower }} {{ 'ABC' is upper }} {{ 'Abc' is lower }} {{ [1] is sequence }} {{ {} is mapping }} {{ 'a' is iterable }} {{ 1 is iterable }} {{ range is callable }} {{ 1 is callable }} {{ x is mapping }} {{ x is sequence }}", {"x": {"a": 1}}),
    ("tests_compare", "{{ 1 is eq 1.0 }} {{ 1 is equalto 1 }} {{ 3 is gt 2 }} {{ 3 is greaterthan 3 }} {{ 2 is ge 2 }} {{ 2 is lt 3 }} {{ 2 is lessthan 1 }} {{ 2 is le 2 }} {{ 2 is ne 3 }} {{ 2 is in [1, 2] }} {{ 'b' is in 'abc' }} {{ true is sameas true }} {{ 1 is sameas true }} {{ none is sameas none }}", {}),
    ("tests_defined", "{{ [] is defined }} {{ x is defined }} {{ x is undefined }} {{ none is defined }} {{ x is not defined }} {{ 1 is not none }}", {}),
    ("tests_string_method_result", "{{ enable_thinking is defined and enable_thinking is false }}", {"enable_thinking": False}),
    # filters
    ("f_length", "{{ 'a\u00e9\U0001f680'|length }} {{ [1, 2]|length }} {{ {'a': 1}|length }} {{ nothing|length }} {{ 'ab'|count }}", {}),
    ("f_length_int", "{{ 5|length }}", {}),
    ("f_string", "{{ 3|string }}{{ [1, 'a']|string }}{{ none|string }}{{ nothing|string }}{{ 1.0|string }}", {}),
    ("f_default", "{{ none|default('d') }} {{ ''|default('d') }} {{ ''|default('d', true) }} {{ u|default('d') }} {{ u|d('e') }} {{ 0|default(5, boolean=true) }} {{ u|default }}|", {}),
    ("f_trim", "[{{ '  a b  '|trim }}] [{{ 'xxaxx'|trim('x') }}] [{{ '\u3000a\xa0'|trim }}] [{{ nothing|trim }}]", {}),
    ("f_case", "{{ 'Hello World'|upper }} {{ 'Hello'|lower }} {{ 'hello world'|title }} {{ 'hELLO wORLD'|capitalize }} {{ 'a-b c(d[e{f<g'|title }} {{ \"they're\"|title }}", {}),
    ("f_replace", "{{ 'aaa'|replace('a', 'b') }} {{ 'aaa'|replace('a', 'b', 2) }} {{ 'abc'|replace('', '-') }} {{ 'x'|replace('x', '') }}", {}),
    ("f_join", "{{ [1, 2, 3]|join(', ') }} {{ ['a', 'b']|join }} {{ 'abc'|join('-') }} {{ [{'n': 'x'}, {'n': 'y'}]|join(',', attribute='n') }}", {}),
    ("f_first_last", "{{ [1, 2]|first }} {{ [1, 2]|last }} {{ 'a\u00e9'|first }} {{ 'a\u00e9'|last }} {{ []|first }}| {{ {'a': 1}|first }}", {}),
    ("f_list_reverse", "{{ 'ab'|list }} {{ {'a': 1, 'b': 2}|list }} {{ 'ab\u00e9'|reverse }} {{ [1, 2]|reverse|list }} {{ (1, 2)|list }}", {}),
    ("f_sort", "{{ ['b', 'A', 'a']|sort }} {{ ['b', 'A', 'a']|sort(case_sensitive=true) }} {{ [3, 1, 2]|sort(reverse=true) }} {{ [{'n': 2}, {'n': 1}]|sort(attribute='n') }} {{ [[2, 'a'], [1, 'b']]|sort }}", {}),
    ("f_unique_minmax", "{{ ['b', 'A', 'a', 'b']|unique|list }} {{ ['b', 'A', 'a']|unique(case_sensitive=true)|list }} {{ [3, 1]|max }} {{ ['B', 'a']|min }} {{ []|max }}| {{ [{'n': 2}, {'n': 5}]|max(attribute='n') }}", {}),
    ("f_map", "{{ ['a', 'b']|map('upper')|list }} {{ [{'n': 2}, {'n': 1}]|map(attribute='n')|list }} {{ [{'n': 2}, {}]|map(attribute='n', default=0)|list }} {{ [1, 2]|map('string')|join('+') }}", {}),
    ("f_select", "{{ [0, 1, '', 2]|select|list }} {{ [1, 2, 3]|reject('odd')|list }} {{ [1, 2, 3, 4]|select('divisibleby', 2)|list }} {{ [1, 5, 3]|select('gt', 2)|list }}", {}),
    ("f_seq_of_false", "{{ false|map(attribute='x')|list }} {{ none|select|list }} {{ 0|rejectattr('a')|list }} {{ ''|map('upper')|list }}", {}),
    ("f_selectattr", "{{ messages|selectattr('role', 'equalto', 'user')|list }} {{ messages|rejectattr('role', 'eq', 'user')|map(attribute='role')|list }} {{ [{'a': 1}, {'b': 2}]|selectattr('a')|list }} {{ messages|selectattr('role', 'in', ['system', 'assistant'])|list|length }}", {"messages": MSGS}),
    ("f_items_dictsort", "{{ {'b': 1, 'a': 2}|dictsort }} {{ {'b': 1, 'a': 2}|dictsort(by='value') }} {{ {'b': 1, 'a': 2}|items|list }} {{ {'B': 1, 'a': 2}|dictsort(reverse=true) }}", {}),
    ("f_indent", "{{ 'x\ny'|indent(2) }}|{{ 'x\ny'|indent(2, true) }}|{{ 'x\n\ny'|indent(2, blank=true) }}|{{ 'x\n\ny'|indent }}|{{ 'a\nb'|indent('>> ') }}", {}),
    ("f_safe", "{{ '<a>'|safe }}", {}),
    ("f_numbers", "{{ 3.7|int }} {{ '42'|int }} {{ ' 12 '|int }} {{ '3.9'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ '0x1A'|int(base=16) }} {{ '1e3'|float }} {{ 'abc'|float }} {{ 3|float }} {{ true|int }} {{ -3|abs }} {{ -2.5|abs }} {{ [1, 2, 3]|sum }} {{ [{'n': 1}, {'n': 2}]|sum(attribute='n') }} {{ [1.5, 2]|sum(start=10) }}", {}),
    ("f_round", "{{ 2.675|round(2) }} {{ 2.5|round }} {{ 3.5|round }} {{ -2.5|round }} {{ 1234.5|round(-2) }} {{ 3|round }} {{ 2.5|round(method='ceil') }} {{ 2.5|round(method='floor') }} {{ 3.14159|round(3, 'floor') }}", {}),
    ("f_wordcount", "{{ 'a b  c'|wordcount }} {{ 'hello, world!'|wordcount }} {{ ''|wordcount }}", {}),
    ("f_attr", "{{ d|attr('a') }} {{ d|attr('zz') }}|", {"d": {"a": 1}}),
    ("f_chain", "{{ messages|map(attribute='content')|map('upper')|join(' ')|replace('HI', 'ho')|trim }}", {"messages": MSGS}),
    # tojson as HF defines it
    ("tojson_basic", "{{ x|tojson }}", {"x": {"a": [1, None, True, "\u00e9\n\"\u2028\x01\t\\"], "b": {}, "c": [], "d": "</script>"}}),
    ("tojson_indent", "{{ x|tojson(indent=2) }}", {"x": {"a": [1, {"b": []}, {}], "c": "x"}}),
    ("tojson_options", "{{ none|tojson }} {{ 'a'|tojson }} {{ [1, '\u00e9\U0001f680']|tojson(ensure_ascii=true) }} {{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }} {{ [1, 2]|tojson(separators=(',', ':')) }} {{ 1.5|tojson }} {{ 'x'|tojson(indent=4) }}", {}),
    ("tojson_tools", "{% for tool in tools %}{{ tool|tojson }}\n{% endfor %}", {"tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather, in \u00b0C", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]}),
    ("tojson_undefined", "{{ nothing|tojson }}", {}),
    # string methods
    ("m_strip", "[{{ '  a  '.strip() }}] [{{ '  a  '.lstrip() }}] [{{ '  a  '.rstrip() }}] [{{ 'xxaxx'.strip('x') }}] [{{ '\\n\\na\\n'.lstrip('\\n') }}] [{{ 'a\u3000'.strip() }}] [{{ 'abc'.strip('ca') }}]", {}),
    ("m_split", "{{ 'a b  c'.split() }} {{ 'a b c'.split(None, 1) }} {{ 'a,b,c'.split(',') }} {{ 'a,b,c'.rsplit(',', 1) }} {{ ' a b '.split(' ') }} {{ ''.split() }} {{ ''.split(',') }} {{ 'a<sep>b<sep>'.split('<sep>') }} {{ '  x  y '.rsplit(None, 1) }} {{ 'a b c'.rsplit() }}", {}),
    ("m_split_think", "{{ c.split('</think>')[-1].lstrip('\\n') }}|{{ c.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}", {"c": "<think>\nreason\n</think>\n\nanswer"}),
    ("m_affix", "{{ 'abc'.startswith('ab') }} {{ 'abc'.endswith('bc') }} {{ 'abc'.startswith(('x', 'a')) }} {{ 'abc'.endswith('x') }} {{ ''.startswith('') }}", {}),
    ("m_find_count", "{{ 'abcabc'.find('c') }} {{ 'abcabc'.rfind('c') }} {{ 'abc'.find('z') }} {{ 'h\u00e9llo'.find('l') }} {{ 'aaaa'.count('aa') }} {{ 'abc'.count('') }} {{ 'abc'.index('b') }}", {}),
    ("m_join", "{{ '-'.join(['a', 'b']) }} {{ 'a'.join('xyz') }} {{ ''.join([]) }}", {}),
    ("m_join_int", "{{ '-'.join([1, 2]) }}", {}),
    ("m_case", "{{ 'Hello'.upper() }} {{ 'Hello'.lower() }} {{ \"they're bill's\".title() }} {{ 'hELLO wORLD'.capitalize() }} {{ 'ab1'.isalnum() }} {{ '12'.isdigit() }} {{ 'ab'.isalpha() }} {{ ' \\t'.isspace() }} {{ 'ab'.islower() }} {{ 'AB'.isupper() }} {{ ''.isdigit() }}", {}),
    ("m_replace", "{{ 'a.b.c'.replace('.', '/') }} {{ 'a.b.c'.replace('.', '', 1) }} {{ 'ab'.replace('', '|') }}", {}),
    ("m_prefix", "{{ 'prefix_x'.removeprefix('prefix_') }} {{ 'x.json'.removesuffix('.json') }} {{ 'abc'.removeprefix('z') }}", {}),
    ("m_splitlines", "{{ 'a\\nb\\r\\nc\\rd\\n'.splitlines() }} {{ ''.splitlines() }}", {}),
    ("m_list", "{{ [1, 2, 1].count(1) }} {{ [1, 2, 3].index(2) }}", {}),
    ("m_unsafe", "{{ [1].append(2) }}", {}),
    ("m_unsafe_dict", "{{ {}.update({'a': 1}) }}", {}),
    ("m_unknown", "{{ 'abc'.nosuch() }}", {}),
    # functions
    ("range", "{{ range(3)|list }} {{ range(1, 10, 3)|list }} {{ range(5, 0, -2)|list }} {{ range(0)|list }} {{ range(2, 1)|list }}", {}),
    ("range_too_big", "{{ range(100001)|length }}", {}),
    ("dict_func", "{{ dict(a=1, b='x') }} {{ dict() }}", {}),
    ("raise", "before{{ raise_exception('Conversation roles must alternate ' ~ 1) }}", {}),
    ("raise_in_loop", "{% for m in messages %}{% if m.role == 'assistant' %}{{ raise_exception('no assistant: ' ~ m.content) }}{% endif %}{{ m.role }}{% endfor %}", {"messages": MSGS}),
    ("generation_tag", "a{% generation %}b{{ 1 }}{% endgeneration %}c", {}),
    ("do_tag", "{% do [1, 2] %}ok", {}),
    ("comments", "a{# one #}b{#\nmulti\nline\n#}c", {}),
    ("kwargs_vars", "{{ enable_thinking }} {{ extra.k }} {{ nums|sum }} {{ flag is true }}", {"enable_thinking": False, "extra": {"k": "v"}, "nums": [1, 2, 3], "flag": True}),
    ("json_types", "{{ x }} {{ y }} {{ z }} {{ w }} {{ v }}", {"x": 5, "y": 2.5, "z": None, "w": [1, "a"], "v": {"k": [True]}}),
]


def unit_goldens():
    out = []
    for name, template, variables in UNITS:
        g = {"name": name, "template": template, "vars": variables}
        g.update(render(template, variables))
        out.append(g)
    return out


def main():
    data = {
        "generator": "tests/data/jinja/make_goldens.py, jinja2 %s, Python %s" % (
            jinja2.__version__, sys.version.split()[0]),
        "templates": TEMPLATES,
        "chats": chat_goldens(),
        "units": unit_goldens(),
    }
    with open(os.path.join(HERE, "goldens.json"), "w", encoding="utf-8", newline="\n") as f:
        json.dump(data, f, ensure_ascii=False, indent=1)
        f.write("\n")
    n_err = sum("error" in g for g in data["chats"] + data["units"])
    print("goldens.json: %d chats, %d units (%d errors)" % (len(data["chats"]), len(data["units"]), n_err))


if __name__ == "__main__":
    main()
