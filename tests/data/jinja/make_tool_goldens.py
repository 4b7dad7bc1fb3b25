#!/usr/bin/env python3
"""make_tool_goldens.py -- reference renderings of whole OpenAI conversations
(tools, assistant tool_calls, tool results, reasoning_content, text-part
arrays) for tests/test_chat_messages.c, made by hand with Python's jinja2 set
up as in make_goldens.py (transformers' apply_chat_template).

Run by hand (never by the build or the tests), from anywhere:

    python3 tests/data/jinja/make_tool_goldens.py   # writes tool_goldens.json beside it

Each case is an OpenAI chat request's `messages` and `tools` (and
`documents`). normalize() below turns them into what vLLM hands
apply_chat_template, written here from vLLM's
vllm/entrypoints/chat_utils.py (_parse_chat_message_content,
_postprocess_messages) and protocol.py, independently of moe8's C code:

  * content: a string as it is; null or missing -> "" (vLLM's "string"
    content format joins the parts of [] into ""); an array of text parts ->
    their texts joined with "\\n";
  * assistant: tool_calls (when not null; [] is dropped) with each call as
    pydantic rebuilds the openai TypedDict -- {id, function: {arguments,
    name}, type}, other keys dropped -- and function.arguments json.loads'ed
    ("" -> {}); reasoning (or reasoning_content) as both `reasoning` and
    `reasoning_content`;
  * tool: tool_call_id; any role: name when it is a string;
  * developer -> system (the older vLLM; the newest passes "developer");
  * tools: ChatCompletionToolsParam.model_dump(): {type, function: {name,
    description (None), parameters (None), extra keys}, extra keys}.

tool_goldens.json holds:
  templates  name -> {file | source, bos_token, eos_token}
  cases      name -> {request | null, messages, tools, documents}
  chats      [{template, case, add_generation_prompt, kwargs, output | error}]
`request` null: `messages` is given to moe8_chat_template_render_json as it
is (content None, arguments as a string: what a library caller may pass).
An error is "<Python exception type>: <message>", as in goldens.json.
"""
import copy
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import jinja2  # noqa: E402
from make_goldens import render  # noqa: E402  (transformers' environment)

BOS_DS = "<\uff5cbegin\u2581of\u2581sentence\uff5c>"
EOS_DS = "<\uff5cend\u2581of\u2581sentence\uff5c>"

TEMPLATES = {
    "qwen3": {"file": "qwen3.jinja", "bos_token": None, "eos_token": "<|im_end|>"},
    "deepseek_v3": {"file": "deepseek_v3.jinja", "bos_token": BOS_DS, "eos_token": EOS_DS},
    "mistral_v3_tools": {"file": "../tool_templates/mistral_v3_tools.jinja", "bos_token": "<s>",
                         "eos_token": "</s>"},
    # what the template sees, printed whole
    "probe": {"source": "{{ messages|tojson }}\n{{ tools|tojson }}\n{{ documents|tojson }}\n"
                        "{% for m in messages %}{{ m.role }}:{% for k in m %}{{ k }},{% endfor %}"
                        "{{ m.content is none }};{% endfor %}",
              "bos_token": None, "eos_token": None},
    "empty": {"source": "{# renders nothing #}", "bos_token": None, "eos_token": None},
}


# ---- vLLM's normalization ------------------------------------------------------------

def norm_call(c):
    out = {}
    if "id" in c:
        out["id"] = c["id"]
    f = c["function"]
    args = f.get("arguments")
    if isinstance(args, str):
        args = json.loads(args) if args.strip() else {}
    elif args is None:
        args = {}
    out["function"] = {"arguments": args, "name": f["name"]}
    out["type"] = c.get("type", "function")
    return out


def norm_content(content):
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(p["text"] for p in content)


def norm_message(m):
    role = m["role"]
    out = {"role": "system" if role == "developer" else role, "content": norm_content(m.get("content"))}
    if role == "assistant":
        calls = m.get("tool_calls")
        if calls:
            out["tool_calls"] = [norm_call(c) for c in calls]
        reasoning = m.get("reasoning", m.get("reasoning_content"))
        if reasoning is not None:
            out["reasoning"] = reasoning
            out["reasoning_content"] = reasoning
    elif role == "tool" and "tool_call_id" in m:
        out["tool_call_id"] = m["tool_call_id"]
    if isinstance(m.get("name"), str):
        out["name"] = m["name"]
    return out


def norm_tool(t):
    f = t["function"]
    fn = {"name": f["name"], "description": f.get("description"), "parameters": f.get("parameters")}
    fn.update({k: v for k, v in f.items() if k not in fn})
    out = {"type": t.get("type", "function"), "function": fn}
    out.update({k: v for k, v in t.items() if k not in out})
    return out


def normalize(request):
    msgs = [norm_message(m) for m in request["messages"]]
    tools = request.get("tools")
    return msgs, (None if tools is None else [norm_tool(t) for t in tools]), request.get("documents")


# ---- the conversations -----------------------------------------------------------------

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city, in \u00b0C",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                   "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}},
        "strict": True}
SEARCH = {"function": {"name": "search", "description": "Search the web", "strict": True,
                       "parameters": {"type": "object", "properties": {"q": {"type": "string"}, "n": {"type": "integer"}}}}}

SYS = {"role": "system", "content": "You are a helpful assistant."}
U_W = {"role": "user", "content": "What's the weather in Paris?"}
CALL_W = {"id": "call00001", "type": "function",
          "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"celsius\"}"}}
CALL_T = {"id": "call00002", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}
A_W = {"role": "assistant", "content": None, "tool_calls": [CALL_W]}
R_W = {"role": "tool", "tool_call_id": "call00001", "content": "{\"temp\": 21, \"sky\": \"clear\"}"}
R_T = {"role": "tool", "tool_call_id": "call00002", "content": "14:05"}
A_DONE = {"role": "assistant", "content": "It is 21 \u00b0C and clear in Paris."}
U2 = {"role": "user", "content": "Thanks! And the time?"}

CASES = [
    ("tool_call", {"messages": [SYS, U_W, A_W, R_W], "tools": [WEATHER]}),
    ("tool_call_answered", {"messages": [SYS, U_W, A_W, R_W, A_DONE, U2], "tools": [WEATHER, TIME]}),
    ("parallel_calls", {"messages": [U_W, {"role": "assistant", "content": None, "tool_calls": [CALL_W, CALL_T]},
                                     R_W, R_T], "tools": [WEATHER, TIME]}),
    ("content_and_call", {"messages": [U_W, {"role": "assistant", "content": "Let me look that up.",
                                             "tool_calls": [CALL_W]}, R_W], "tools": [WEATHER]}),
    ("text_parts", {"messages": [
        {"role": "system", "content": [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Be kind."}]},
        {"role": "user", "content": [{"type": "text", "text": "Part one."}, {"type": "text", "text": "Part two."}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Got both."}]},
        {"role": "user", "content": []}]}),
    ("tool_result_parts", {"messages": [U_W, A_W, {"role": "tool", "tool_call_id": "call00001",
                                                   "content": [{"type": "text", "text": "{\"temp\": 21}"},
                                                               {"type": "text", "text": "(cached)"}]}],
                           "tools": [WEATHER]}),
    ("reasoning_content", {"messages": [{"role": "user", "content": "Hi"},
                                        {"role": "assistant", "content": "Hello!", "reasoning_content": "A greeting."},
                                        {"role": "user", "content": "Weather?"},
                                        {"role": "assistant", "content": None, "reasoning_content": "Call the tool.",
                                         "tool_calls": [CALL_W]},
                                        R_W]}),
    ("reasoning_field", {"messages": [{"role": "user", "content": "Hi"},
                                      {"role": "assistant", "content": "Hello!", "reasoning": "Be polite."}]}),
    ("developer_and_names", {"messages": [{"role": "developer", "content": "Answer in French."},
                                          {"role": "user", "content": "Hello", "name": "alice"},
                                          {"role": "assistant", "content": "Bonjour", "name": "bot"},
                                          {"role": "user", "content": "Bye", "extra_field": 1}]}),
    ("empty_and_odd_arguments", {"messages": [U_W, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call00003", "type": "function", "function": {"name": "get_time", "arguments": ""}},
        {"id": "call00004", "type": "function", "function": {
            "name": "search", "arguments": "{\"q\": \"caf\\u00e9 \u4f60\u597d \\\"quoted\\\"\", \"n\": 3, "
                                           "\"opts\": {\"safe\": true, \"lang\": null, \"tags\": [\"a\", 2.5, -7]}}"}}]},
        {"role": "tool", "tool_call_id": "call00003", "content": "09:00"},
        {"role": "tool", "tool_call_id": "call00004", "content": "[]"}], "tools": [TIME, SEARCH]}),
    ("tools_no_calls", {"messages": [SYS, U_W], "tools": [WEATHER, TIME, SEARCH]}),
    ("empty_tool_calls", {"messages": [U_W, {"role": "assistant", "content": "No tool needed.", "tool_calls": []},
                                       U2], "tools": []}),
    ("bad_mistral_id", {"messages": [U_W, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_0123456789", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]}],
                        "tools": [WEATHER]}),
    ("documents", {"messages": [{"role": "user", "content": "Summarize."}],
                   "documents": [{"title": "A", "text": "First."}, {"title": "B", "text": "Second."}]}),
]

# Given to the library as they are (no request): content None, arguments a string.
RAW = [
    ("raw_none_content_string_args", [
        {"role": "user", "content": "What's the weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
            {"type": "function", "function": {"name": "get_time", "arguments": "{}"}}]},
        {"role": "tool", "content": "{\"temp\": 21}"}, {"role": "tool", "content": "14:05"}]),
    ("raw_none_content_object_args", [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "abcdefghi", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]}]),
]


def main():
    cases = {c: dict(zip(("request", "messages", "tools", "documents"), (r,) + normalize(r))) for c, r in CASES}
    cases.update({c: {"request": None, "messages": m, "tools": None, "documents": None} for c, m in RAW})
    chats = []
    for tname, t in TEMPLATES.items():
        if "file" in t:
            source = open(os.path.join(HERE, t["file"]), encoding="utf-8", newline="").read()
        else:
            source = t["source"]
        special = {k: t[k] for k in ("bos_token", "eos_token") if t[k] is not None}
        kwarg_sets = [None, {"enable_thinking": False}] if tname == "qwen3" else [None]
        for case, c in cases.items():
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
    data = {"generator": "tests/data/jinja/make_tool_goldens.py, jinja2 %s, Python %s" % (
                jinja2.__version__, sys.version.split()[0]),
            "templates": TEMPLATES, "cases": cases, "chats": chats}
    with open(os.path.join(HERE, "tool_goldens.json"), "w", encoding="utf-8", newline="\n") as f:
        json.dump(data, f, ensure_ascii=False, indent=1)
        f.write("\n")
    n_err = sum("error" in g for g in chats)
    print("tool_goldens.json: %d cases, %d chats (%d errors)" % (len(cases), len(chats), n_err))


if __name__ == "__main__":
    main()
