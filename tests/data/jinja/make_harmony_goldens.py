#!/usr/bin/env python3
"""make_harmony_goldens.py -- reference renderings of OpenAI conversations
through gpt-oss's chat template (the harmony format: llama.cpp's copy,
gpt_oss.jinja; README.md), for tests/test_chat_harmony.c, made by hand with
Python's jinja2 set up as in make_goldens.py (transformers'
apply_chat_template).

Run by hand (never by the build or the tests), from anywhere:

    python3 tests/data/jinja/make_harmony_goldens.py   # writes harmony_goldens.json beside it

Each conversation is normalized as vLLM hands it to apply_chat_template
(make_tool_goldens.normalize: arguments parsed into objects, developer as
system, content None as ""), then given the template's `thinking` field as
llama.cpp's gpt-oss path does: an assistant message's reasoning becomes its
`thinking`, except on a message with tool calls whose content is not empty
(the template refuses both there; the content is then its analysis), and
an assistant turn of several calls split into one turn per call, each
followed by its result (one_call_each: harmony's layout; the template keeps
only a message's first call). moe8's
server does the same (src/server/toolcall_harmony.c,
moe8_harmony_messages); the C test checks that too. The template's
strftime_now is pinned to DATE; the C test puts its own date back in its
place. Rendered with and without the generation prompt and with
reasoning_effort low / medium / high (and model_identity once).

harmony_goldens.json holds, as family_goldens.json does:
  templates  name -> {file, bos_token, eos_token}
  date       what strftime_now("%Y-%m-%d") gave
  cases      name -> {request, messages, tools, documents}
  chats      [{template, case, add_generation_prompt, kwargs, output | error}]
"""
import copy
import datetime
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import jinja2  # noqa: E402
from make_goldens import ENV, render  # noqa: E402  (transformers' environment)
from make_tool_goldens import normalize, WEATHER, U_W, CALL_W, R_W, SYS  # noqa: E402

DATE = datetime.date(2025, 6, 28)  # the date of docs/format.md's examples
ENV.globals["strftime_now"] = lambda fmt: DATE.strftime(fmt)

TEMPLATES = {"gpt_oss": {"file": "gpt_oss.jinja", "bos_token": "<|startoftext|>", "eos_token": "<|return|>"}}

# Parameters of every kind the template's TypeScript rendering distinguishes.
TYPED = {"type": "function", "function": {
    "name": "set_options", "description": "Every kind of parameter",
    "parameters": {"type": "object", "properties": {
        "name": {"type": "string", "description": "Who"},
        "mode": {"type": "string", "enum": ["fast", "slow"], "default": "fast"},
        "count": {"type": "integer", "default": 3}, "ratio": {"type": "number"},
        "on": {"type": "boolean"}, "tags": {"type": "array", "items": {"type": "string"}},
        "points": {"type": "array", "items": {"type": "object", "properties": {"x": {"type": "number"}}}},
        "any_list": {"type": "array"}, "maybe": {"type": ["string", "null"]},
        "nick": {"type": "string", "nullable": True},
        "opts": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
                 "required": ["a"]},
        "either": {"oneOf": [{"type": "string"}, {"type": "integer", "description": "a count"}]}},
        "required": ["name", "count"]}}}
NOARGS = {"type": "function", "function": {"name": "get_time", "description": "The time now",
                                           "parameters": {"type": "object", "properties": {}}}}
CALL_T = {"id": "call00002", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}
CALL_TYPED = {"id": "call00009", "type": "function", "function": {
    "name": "set_options", "arguments": json.dumps({"name": "caf\u00e9 \"x\"\nline 2", "count": 3,
                                                    "tags": ["x"], "opts": {"a": 1, "b": None}})}}
# The functions of openai/harmony docs/format.md's "complete input example".
FMT = {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"}
DOC_LOCATION = {"type": "function", "function": {"name": "get_location",
                                                 "description": "Gets the location of the user."}}
DOC_WEATHER = {"type": "function", "function": {
    "name": "get_current_weather", "description": "Gets the current weather in the provided location.",
    "parameters": {"type": "object", "properties": {
        "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
        "format": FMT}, "required": ["location"]}}}
DOC_WEATHERS = {"type": "function", "function": {
    "name": "get_multiple_weathers", "description": "Gets the current weather in the provided list of locations.",
    "parameters": {"type": "object", "properties": {
        "locations": {"type": "array", "items": {"type": "string"},
                      "description": "List of city and state, e.g. [\"San Francisco, CA\", \"New York, NY\"]"},
        "format": FMT}, "required": ["locations"]}}}
# docs/format.md's text of the two examples (its "complete input example" with functions, byte for
# byte; its multi-turn example's last three messages, shown there one per line).
DOC_FUNCTIONS = (
    "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
    "Knowledge cutoff: 2024-06\nCurrent date: 2025-06-28\n\nReasoning: high\n\n"
    "# Valid channels: analysis, commentary, final. Channel must be included for every message.\n"
    "Calls to these tools must go to the commentary channel: 'functions'.<|end|><|start|>developer<|message|>"
    "# Instructions\n\nUse a friendly tone.\n\n# Tools\n\n## functions\n\nnamespace functions {\n\n"
    "// Gets the location of the user.\ntype get_location = () => any;\n\n"
    "// Gets the current weather in the provided location.\ntype get_current_weather = (_: {\n"
    "// The city and state, e.g. San Francisco, CA\nlocation: string,\n"
    "format?: \"celsius\" | \"fahrenheit\", // default: celsius\n}) => any;\n\n"
    "// Gets the current weather in the provided list of locations.\ntype get_multiple_weathers = (_: {\n"
    "// List of city and state, e.g. [\"San Francisco, CA\", \"New York, NY\"]\nlocations: string[],\n"
    "format?: \"celsius\" | \"fahrenheit\", // default: celsius\n}) => any;\n\n"
    "} // namespace functions<|end|><|start|>user<|message|>What is the weather like in SF?<|end|>"
    "<|start|>assistant")
DOC_MULTI_TURN = ("<|start|>user<|message|>What is 2 + 2?<|end|>"
                  "<|start|>assistant<|channel|>final<|message|>2 + 2 = 4.<|end|>"
                  "<|start|>user<|message|>What about 9 / 2?<|end|><|start|>assistant")


def check_format_md(chats):
    """The hand check against the format's document: equal but for the template's one known
    difference (a comma after an enum parameter's "// default: ..." comment)."""
    got = {g["case"]: g.get("output") for g in chats
           if g["kwargs"] == {"reasoning_effort": "high"} and g["add_generation_prompt"]}
    assert got["format_md_functions"].replace("// default: celsius,\n", "// default: celsius\n") == DOC_FUNCTIONS
    assert got["format_md_multi_turn"].endswith(DOC_MULTI_TURN)


U1 = {"role": "user", "content": "Hello!"}
A1 = {"role": "assistant", "content": "Hi! How can I help?", "reasoning_content": "A greeting."}
U2 = {"role": "user", "content": "What is 2 + 2?"}

CASES = [
    ("user", {"messages": [U1]}),
    ("system_user", {"messages": [SYS, U1]}),
    ("developer_user", {"messages": [{"role": "developer", "content": "Answer in French."}, U1]}),
    ("multi_turn_reasoning_dropped", {"messages": [U1, A1, U2]}),
    ("assistant_last", {"messages": [U1, A1]}),
    ("tools_no_calls", {"messages": [SYS, U_W], "tools": [WEATHER, NOARGS, TYPED]}),
    ("tools_no_system", {"messages": [U_W], "tools": [WEATHER]}),
    ("tool_call_pending", {"messages": [SYS, U_W, {"role": "assistant", "content": None,
                                                   "reasoning_content": "Need the weather tool.",
                                                   "tool_calls": [CALL_W]}, R_W], "tools": [WEATHER]}),
    ("tool_call_answered", {"messages": [
        SYS, U_W, {"role": "assistant", "content": None, "reasoning_content": "Need the weather tool.",
                   "tool_calls": [CALL_W]}, R_W,
        {"role": "assistant", "content": "It is 21 \u00b0C and clear.", "reasoning_content": "Answer it."},
        {"role": "user", "content": "Thanks! And the time?"}], "tools": [WEATHER, NOARGS]}),
    ("content_and_call", {"messages": [U_W, {"role": "assistant", "content": "Let me look that up.",
                                             "reasoning_content": "dropped: content is the analysis",
                                             "tool_calls": [CALL_W]}, R_W], "tools": [WEATHER]}),
    ("typed_call", {"messages": [{"role": "user", "content": "Set them."},
                                 {"role": "assistant", "content": None, "tool_calls": [CALL_TYPED]},
                                 {"role": "tool", "tool_call_id": "call00009", "content": "ok"}],
                    "tools": [TYPED]}),
    ("two_calls_one_each", {"messages": [U_W, {"role": "assistant", "content": None,
                                                 "tool_calls": [CALL_W, CALL_T]}, R_W,
                                           {"role": "tool", "tool_call_id": "call00002", "content": "14:05"}],
                              "tools": [WEATHER, NOARGS]}),
    ("two_calls_results_swapped", {"messages": [
        U_W, {"role": "assistant", "content": "Both.", "reasoning_content": "Two tools.",
              "tool_calls": [CALL_W, CALL_T]},
        {"role": "tool", "tool_call_id": "call00002", "content": "14:05"}, R_W,
        {"role": "tool", "tool_call_id": "nope", "content": "extra"}], "tools": [WEATHER, NOARGS]}),
    ("unicode_and_specials", {"messages": [{"role": "user", "content": "caf\u00e9 \u4f60\u597d \U0001f680 "
                                                                       "{{ x }} \"q\" \\ \n\ttab"}]}),
    ("format_md_functions", {"messages": [{"role": "developer", "content": "Use a friendly tone."},
                                          {"role": "user", "content": "What is the weather like in SF?"}],
                             "tools": [DOC_LOCATION, DOC_WEATHER, DOC_WEATHERS]}),
    ("format_md_multi_turn", {"messages": [{"role": "user", "content": "What is 2 + 2?"},
                                           {"role": "assistant", "content": "2 + 2 = 4.",
                                            "reasoning_content": "User asks: \"What is 2 + 2?\" Simple arithmetic."},
                                           {"role": "user", "content": "What about 9 / 2?"}]}),
    ("channel_in_content", {"messages": [U1, {"role": "assistant",
                                              "content": "<|channel|>final<|message|>Hi"}, U2]}),
    ("tool_without_call", {"messages": [U1, {"role": "tool", "tool_call_id": "x", "content": "21"}]}),
]


def thinking(msgs):
    """llama.cpp's gpt-oss path: reasoning -> the template's `thinking`."""
    for m in msgs:
        r = m.get("reasoning_content")
        if m["role"] == "assistant" and r is not None and not (m.get("tool_calls") and m.get("content")):
            m["thinking"] = r
    return msgs


def one_call_each(msgs):
    """Harmony writes one call per message, its result right after it, and the template keeps only
    an assistant message's first call: a turn of k calls becomes k turns (the first keeps the
    content and thinking), each followed by its result (by tool_call_id, else the next one in
    order); results left over follow."""
    out, i = [], 0
    while i < len(msgs):
        m = msgs[i]
        calls = m.get("tool_calls") or []
        if m["role"] != "assistant" or len(calls) < 2:
            out.append(m)
            i += 1
            continue
        j = i + 1
        while j < len(msgs) and msgs[j]["role"] == "tool":
            j += 1
        results = msgs[i + 1:j]
        for k, c in enumerate(calls):
            a = dict(m) if k == 0 else {"role": "assistant", "content": ""}
            a["tool_calls"] = [c]
            out.append(a)
            match = [r for r in results if "id" in c and r.get("tool_call_id") == c["id"]]
            if match or results:
                r = (match or results)[0]
                results.remove(r)
                out.append(r)
        out.extend(results)
        i = j
    return out


def main():
    cases = {}
    for c, r in CASES:
        msgs, tools, docs = normalize(r)
        cases[c] = {"request": r, "messages": one_call_each(thinking(msgs)), "tools": tools, "documents": docs}
    chats = []
    for tname, t in TEMPLATES.items():
        source = open(os.path.join(HERE, t["file"]), encoding="utf-8", newline="").read()
        special = {k: t[k] for k in ("bos_token", "eos_token") if t[k] is not None}
        for case, c in cases.items():
            kwarg_sets = [None, {"reasoning_effort": "low"}, {"reasoning_effort": "high"}]
            if case == "user":
                kwarg_sets += [{"reasoning_effort": "medium"}, {"model_identity": "You are moe8's test model."}]
            for gen in (True, False):
                for kw in kwarg_sets:
                    if kw and not gen:
                        continue
                    variables = {"messages": copy.deepcopy(c["messages"]), "tools": copy.deepcopy(c["tools"]),
                                 "documents": copy.deepcopy(c["documents"]), "add_generation_prompt": gen}
                    variables.update(special)
                    variables.update(kw or {})
                    g = {"template": tname, "case": case, "add_generation_prompt": gen, "kwargs": kw}
                    g.update(render(source, variables))
                    chats.append(g)
    check_format_md(chats)
    data = {"generator": "tests/data/jinja/make_harmony_goldens.py, jinja2 %s, Python %s" % (
                jinja2.__version__, sys.version.split()[0]),
            "templates": TEMPLATES, "date": DATE.isoformat(), "cases": cases, "chats": chats}
    with open(os.path.join(HERE, "harmony_goldens.json"), "w", encoding="utf-8", newline="\n") as f:
        json.dump(data, f, ensure_ascii=False, indent=1)
        f.write("\n")
    n_err = sum("error" in g for g in chats)
    print("harmony_goldens.json: %d cases, %d chats (%d errors)" % (len(cases), len(chats), n_err))


if __name__ == "__main__":
    main()
