#!/usr/bin/env python3
"""make_family_goldens.py -- reference renderings of whole OpenAI
conversations through the GLM-4.5, GLM-4.6, GLM-4.7-Flash, MiniMax-M2 and
Qwen3.5 (Qwen3.5/3.6-MoE) chat templates, for tests/test_chat_families.c, made by hand with Python's jinja2
set up as in make_goldens.py (transformers' apply_chat_template).

Run by hand (never by the build or the tests), from anywhere:

    python3 tests/data/jinja/make_family_goldens.py   # writes family_goldens.json beside it

The conversations are make_tool_goldens.py's (normalized as vLLM hands them
to apply_chat_template, by its normalize()) and a few more that these
templates treat specially: arguments of every JSON type (written with
tojson unless a string), reasoning before and after the last user turn, a
think block inside content, several tool results in a row. Each is rendered
with and without the generation prompt, and with enable_thinking false (and
GLM-4.7's clear_thinking false).

family_goldens.json holds, as tool_goldens.json does:
  templates  name -> {file, bos_token, eos_token}
  cases      name -> {request | null, messages, tools, documents}
  chats      [{template, case, add_generation_prompt, kwargs, output | error}]
"""
import copy
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import jinja2  # noqa: E402
from make_goldens import render  # noqa: E402  (transformers' environment)
from make_tool_goldens import CASES, RAW, normalize, WEATHER, U_W, CALL_W, R_W  # noqa: E402

TEMPLATES = {
    "glm_4_5": {"file": "glm_4_5.jinja", "bos_token": None, "eos_token": "<|endoftext|>"},
    "glm_4_6": {"file": "glm_4_6.jinja", "bos_token": None, "eos_token": "<|endoftext|>"},
    "glm_4_7_flash": {"file": "glm_4_7_flash.jinja", "bos_token": None, "eos_token": "<|endoftext|>"},
    "minimax_m2": {"file": "minimax_m2.jinja", "bos_token": None, "eos_token": "[e~["},
    "qwen3_5": {"file": "qwen3_5.jinja", "bos_token": None, "eos_token": "<|im_end|>"},
}

TYPED = {"type": "function", "function": {
    "name": "set_options", "description": "Every kind of parameter",
    "parameters": {"type": "object", "properties": {
        "name": {"type": "string"}, "count": {"type": "integer"}, "ratio": {"type": "number"},
        "on": {"type": "boolean"}, "opts": {"type": "object"}, "tags": {"type": "array"},
        "maybe": {"type": ["string", "null"]}}}}}
CALL_TYPED = {"id": "call00009", "type": "function", "function": {
    "name": "set_options",
    "arguments": json.dumps({"name": "caf\u00e9 \"x\"\nline 2", "count": 3, "ratio": 0.25, "on": True,
                             "opts": {"a": [1, None], "b": "\u4f60\u597d"}, "tags": ["x", 2], "maybe": None})}}
CALL_T2 = {"id": "call00010", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Rome\"}"}}

EXTRA = [
    ("typed_arguments", {"messages": [{"role": "user", "content": "Set them."},
                                      {"role": "assistant", "content": "", "tool_calls": [CALL_TYPED]},
                                      {"role": "tool", "tool_call_id": "call00009", "content": "ok"}],
                         "tools": [TYPED]}),
    ("reasoning_turns", {"messages": [
        {"role": "system", "content": "Think first."},
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "assistant", "content": "Checking both.", "reasoning_content": "Two cities, two calls.",
         "tool_calls": [CALL_W, CALL_T2]},
        R_W, {"role": "tool", "tool_call_id": "call00010", "content": "{\"temp\": 25}"},
        {"role": "assistant", "content": "Paris 21, Rome 25.", "reasoning_content": "Both answered."}],
        "tools": [WEATHER]}),
    ("reasoning_before_user", {"messages": [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!", "reasoning_content": "Greet back."},
        {"role": "user", "content": "Weather?"}]}),
    ("think_in_content", {"messages": [
        U_W, {"role": "assistant", "content": "<think>\nLook it up.\n</think>\n\nIt is sunny."},
        {"role": "user", "content": "/nothink"}]}),
]


def main():
    cases = {c: dict(zip(("request", "messages", "tools", "documents"), (r,) + normalize(r))) for c, r in CASES + EXTRA}
    cases.update({c: {"request": None, "messages": m, "tools": None, "documents": None} for c, m in RAW})
    chats = []
    for tname, t in TEMPLATES.items():
        source = open(os.path.join(HERE, t["file"]), encoding="utf-8", newline="").read()
        special = {k: t[k] for k in ("bos_token", "eos_token") if t[k] is not None}
        kwarg_sets = [None, {"enable_thinking": False}]
        if tname == "glm_4_7_flash":
            kwarg_sets.append({"clear_thinking": False})
        for case, c in cases.items():
            for gen in (True, False):
                for kw in kwarg_sets:
                    if kw and not gen and case not in ("reasoning_turns", "reasoning_before_user"):
                        continue
                    variables = {"messages": copy.deepcopy(c["messages"]), "tools": copy.deepcopy(c["tools"]),
                                 "documents": copy.deepcopy(c["documents"]), "add_generation_prompt": gen}
                    variables.update(special)
                    variables.update(kw or {})
                    g = {"template": tname, "case": case, "add_generation_prompt": gen, "kwargs": kw}
                    g.update(render(source, variables))
                    chats.append(g)
    data = {"generator": "tests/data/jinja/make_family_goldens.py, jinja2 %s, Python %s" % (
                jinja2.__version__, sys.version.split()[0]),
            "templates": TEMPLATES, "cases": cases, "chats": chats}
    with open(os.path.join(HERE, "family_goldens.json"), "w", encoding="utf-8", newline="\n") as f:
        json.dump(data, f, ensure_ascii=False, indent=1)
        f.write("\n")
    n_err = sum("error" in g for g in chats)
    print("family_goldens.json: %d cases, %d chats (%d errors)" % (len(cases), len(chats), n_err))


if __name__ == "__main__":
    main()
