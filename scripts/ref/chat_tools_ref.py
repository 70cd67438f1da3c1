#!/usr/bin/env python3
"""Reference renderings of tool use (tools, tool calls, tool responses) by transformers.

Run by hand (transformers 4.46.3, jinja2 3.1.6; no network: the tokenizers are read from the
cached directories that the Go tests use):

    ~/.cache/lanpo/venvs/hfref/bin/python scripts/ref/chat_tools_ref.py [TOKENIZERS_DIR]

With --check it writes nothing: it renders the same cases with the transformers it runs under and
reports every rendering that differs from the committed fixture (to try another version).

TOKENIZERS_DIR defaults to $LANPO_TOKENIZERS or ~/.cache/lanpo/tokenizers and must hold qwen2_5/
and qwen3/ (tokenizer.json, tokenizer_config.json with the official chat_template). Writes
model/tokenizer/testdata/chat_tools.json:

  cases       one {"name", "messages", "tools"?, "renderings"} per conversation; each rendering is
              {"template", "add_generation_prompt", "enable_thinking"?, "text"}, text being
              tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, ...) with the
              template's tokenizer (qwen2_5: add_generation_prompt false, true; qwen3: also
              enable_thinking false)
  tojson      one {"in", "out"} per JSON text: out is transformers' tojson filter applied to
              json.loads(in) (json.dumps with ensure_ascii=False, default separators ", " and
              ": ", no indent, keys in the order given)

The Go renderer (model/tokenizer/chat_tools.go) is compared with both, byte for byte.
"""
import json
import os
import sys

import jinja2
import transformers
from transformers import AutoTokenizer
from transformers.utils.chat_template_utils import _compile_jinja_template

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "../../model/tokenizer/testdata/chat_tools.json")

TEMPLATES = ["qwen2_5", "qwen3"]

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city. Température en °C.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. \"Zürich\""},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
                "days": {"type": "integer", "minimum": 1, "maximum": 7.5},
            },
            "required": ["city"],
        },
    },
}
PYTHON = {
    "type": "function",
    "function": {
        "name": "run_python",
        "description": "Run Python code and return its stdout.\nUse print().",
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string"}, "timeout_s": {"type": "number", "default": 2.0}},
            "required": ["code"],
            "additionalProperties": False,
        },
    },
}
TOOLS = [WEATHER, PYTHON]


def call(name, arguments):
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


# Key order differs from sorted order on purpose: tojson must keep it.
W_ZURICH = call("get_weather", {"unit": "celsius", "city": "Zürich"})
W_PARIS = call("get_weather", {"city": "Paris", "days": 3})
PY_CALL = call("run_python", {"code": "print(\"a\\tb\")\nx = {'k': [1, 2.5]}\n", "timeout_s": 1.5})
# Arguments as a JSON string (the OpenAI wire form): Qwen3 writes it as is, Qwen2.5 quotes it.
W_STRING = call("get_weather", "{\"city\": \"Oslo\",\"unit\":\"celsius\"}")
# Values that exercise json.dumps: escapes, control characters, non-ASCII, floats, big ints.
W_ODD = call("get_weather", {
    "z": None, "a": True, "b": False, "n": [1, -0.0, 0.1, 1e-07, 1e16, 123456789012345678901234567890, 2.0],
    "s": "quote \" backslash \\ slash / tab \t nl \n cr \r bell \x07 del \x7f é 日本 😀 \u2028 </tool_call>",
    "nested": {"empty": {}, "list": [], "deep": [{"k": "v"}, [[]]]},
})

R_ZURICH = '{"temperature": 21.5, "condition": "sunny"}'
R_PARIS = '{"temperature": 17, "condition": "rain"}'

CASES = [
    ("tools_only", TOOLS, [{"role": "user", "content": "Weather in Zürich?"}]),
    ("tools_system", TOOLS, [{"role": "system", "content": "You are a weather bot."},
                             {"role": "user", "content": "Weather in Zürich?"}]),
    ("tools_empty_system", [WEATHER], [{"role": "system", "content": ""},
                                        {"role": "user", "content": "Hi"}]),
    ("tools_empty_list", [], [{"role": "user", "content": "Hi"}]),
    ("one_call", TOOLS, [{"role": "user", "content": "Weather in Zürich?"},
                         {"role": "assistant", "content": "", "tool_calls": [W_ZURICH]}]),
    ("two_calls", TOOLS, [{"role": "user", "content": "Zürich and Paris?"},
                          {"role": "assistant", "content": "", "tool_calls": [W_ZURICH, W_PARIS]}]),
    ("content_and_call", TOOLS, [{"role": "user", "content": "Zürich?"},
                                 {"role": "assistant", "content": "Let me check.",
                                  "tool_calls": [W_ZURICH]}]),
    ("content_and_two_calls", TOOLS, [{"role": "user", "content": "Run it and check Paris."},
                                      {"role": "assistant", "content": "Sure.\n",
                                       "tool_calls": [PY_CALL, W_PARIS]}]),
    ("newline_content_and_call", TOOLS, [{"role": "user", "content": "Zürich?"},
                                         {"role": "assistant", "content": "\n",
                                          "tool_calls": [W_ZURICH]}]),
    ("string_arguments", TOOLS, [{"role": "user", "content": "Oslo?"},
                                 {"role": "assistant", "content": "", "tool_calls": [W_STRING]}]),
    ("json_values", TOOLS, [{"role": "user", "content": "odd"},
                            {"role": "assistant", "content": "", "tool_calls": [W_ODD]}]),
    ("empty_tool_calls", TOOLS, [{"role": "user", "content": "Hi"},
                                 {"role": "assistant", "content": "Hello", "tool_calls": []}]),
    ("tool_response", TOOLS, [{"role": "user", "content": "Zürich?"},
                              {"role": "assistant", "content": "", "tool_calls": [W_ZURICH]},
                              {"role": "tool", "content": R_ZURICH}]),
    ("two_tool_responses", TOOLS, [{"role": "user", "content": "Zürich and Paris?"},
                                   {"role": "assistant", "content": "", "tool_calls": [W_ZURICH, W_PARIS]},
                                   {"role": "tool", "content": R_ZURICH},
                                   {"role": "tool", "content": R_PARIS}]),
    ("empty_tool_response", TOOLS, [{"role": "user", "content": "Run."},
                                    {"role": "assistant", "content": "", "tool_calls": [PY_CALL]},
                                    {"role": "tool", "content": ""}]),
    ("trajectory", TOOLS, [
        {"role": "user", "content": "Weather in Zürich?"},
        {"role": "assistant", "content": "", "tool_calls": [W_ZURICH]},
        {"role": "tool", "content": R_ZURICH},
        {"role": "assistant", "content": "It is sunny, 21.5 °C."},
        {"role": "user", "content": "And Paris, in 3 days?"},
        {"role": "assistant", "content": "", "tool_calls": [W_PARIS]},
        {"role": "tool", "content": R_PARIS},
    ]),
    ("trajectory_system", TOOLS, [
        {"role": "system", "content": "Answer in one sentence."},
        {"role": "user", "content": "Weather in Zürich?"},
        {"role": "assistant", "content": "Checking.", "tool_calls": [W_ZURICH]},
        {"role": "tool", "content": R_ZURICH},
        {"role": "tool", "content": "second response"},
        {"role": "assistant", "content": "Sunny."},
    ]),
    ("trajectory_no_tools", None, [
        {"role": "user", "content": "Weather in Zürich?"},
        {"role": "assistant", "content": "", "tool_calls": [W_ZURICH]},
        {"role": "tool", "content": R_ZURICH},
        {"role": "assistant", "content": "Sunny."},
    ]),
    ("tool_first", TOOLS, [{"role": "tool", "content": "orphan response"},
                           {"role": "user", "content": "Hi"}]),
    # Qwen3's reasoning: <think> in assistant content or reasoning_content, before and after the
    # last real user query; tool responses do not count as queries.
    ("think_multi_step", TOOLS, [
        {"role": "user", "content": "Weather in Zürich and Paris?"},
        {"role": "assistant", "content": "<think>\nFirst Zürich.\n</think>\n\n", "tool_calls": [W_ZURICH]},
        {"role": "tool", "content": R_ZURICH},
        {"role": "assistant", "content": "<think>\nNow Paris.\n</think>\n\nOne more.", "tool_calls": [W_PARIS]},
        {"role": "tool", "content": R_PARIS},
        {"role": "assistant", "content": "<think>\nBoth known.\n</think>\n\nSunny and rainy."},
    ]),
    ("think_earlier_turns", TOOLS, [
        {"role": "user", "content": "Zürich?"},
        {"role": "assistant", "content": "<think>\nold\n</think>\n\n", "tool_calls": [W_ZURICH]},
        {"role": "tool", "content": R_ZURICH},
        {"role": "assistant", "content": "<think>\nold answer\n</think>\n\nSunny."},
        {"role": "user", "content": "Paris?"},
        {"role": "assistant", "content": "<think>\nnew\n</think>\n\n", "tool_calls": [W_PARIS]},
        {"role": "tool", "content": R_PARIS},
    ]),
    ("reasoning_content_calls", TOOLS, [
        {"role": "user", "content": "Zürich?"},
        {"role": "assistant", "content": "", "reasoning_content": "Need the tool.", "tool_calls": [W_ZURICH]},
        {"role": "tool", "content": R_ZURICH},
        {"role": "assistant", "content": "Sunny.", "reasoning_content": ""},
    ]),
    ("no_reasoning_mid_call", TOOLS, [
        {"role": "user", "content": "Zürich?"},
        {"role": "assistant", "content": "", "tool_calls": [W_ZURICH]},
        {"role": "tool", "content": R_ZURICH},
        {"role": "assistant", "content": "Sunny."},
    ]),
    ("last_turn_call_no_think", TOOLS, [
        {"role": "user", "content": "Zürich?"},
        {"role": "assistant", "content": "", "tool_calls": [W_ZURICH]},
    ]),
    ("user_tool_response_text", TOOLS, [
        {"role": "user", "content": "Zürich?"},
        {"role": "assistant", "content": "<think>\nr1\n</think>\n\n", "tool_calls": [W_ZURICH]},
        {"role": "user", "content": "<tool_response>\n" + R_ZURICH + "\n</tool_response>"},
        {"role": "assistant", "content": "<think>\nr2\n</think>\n\nSunny."},
    ]),
]

# JSON texts for the tojson table: number spellings json.loads turns into floats or ints,
# duplicate keys, escapes, whitespace.
JSON_TEXTS = [
    '{"b": 1, "a": 2}',
    '{"a":1,"a":2,"b":3}',
    '{"b":1,"a":{"x":1,"b":2},"b":3}',
    '[1.0, 1.50, 1E5, 1e-5, 0.0001, 0.00001, 1e16, 1e15, 1.5e300, 5e-324, -0.0, -0, 0, 1e400, -1e400]',
    '[123456789012345678901234567890, -12, 0.1, 0.30000000000000004, 100.0, 1e22, 1.7976931348623157e308]',
    '[9007199254740993, 9007199254740993.0, 2.5e-7, 123456789.123456789, 1234567890123456789.0]',
    '"\\u00e9\\u65e5\\ud83d\\ude00 \\u0000\\u001f\\u007f\\u2028 \\b\\f\\n\\r\\t \\/ \\"\\\\"',
    '"<tool_call> & </script>"',
    ' { "k" : [ true , false , null , { } , [ ] ] } ',
    '{}',
    '[]',
    'null',
    '"plain"',
    '{"": "", "é": "ü"}',
]


def tojson_table():
    tojson = _compile_jinja_template("{{ x | tojson }}")
    return [{"in": s, "out": tojson.render(x=json.loads(s))} for s in JSON_TEXTS]


def main():
    args = [a for a in sys.argv[1:] if a != "--check"]
    check = len(args) < len(sys.argv) - 1
    root = args[0] if args else os.environ.get(
        "LANPO_TOKENIZERS", os.path.expanduser("~/.cache/lanpo/tokenizers"))
    toks = {t: AutoTokenizer.from_pretrained(os.path.join(root, t), local_files_only=True) for t in TEMPLATES}
    cases = []
    for name, tools, msgs in CASES:
        case = {"name": name, "messages": msgs}
        if tools is not None:
            case["tools"] = tools
        case["renderings"] = []
        for tname, tok in toks.items():
            options = [(False, None), (True, None)]
            if tname == "qwen3":
                options.append((True, False))
            for agp, thinking in options:
                kw = {} if thinking is None else {"enable_thinking": thinking}
                r = {"template": tname, "add_generation_prompt": agp}
                if thinking is not None:
                    r["enable_thinking"] = thinking
                r["text"] = tok.apply_chat_template(msgs, tools=tools, tokenize=False,
                                                    add_generation_prompt=agp, **kw)
                case["renderings"].append(r)
        cases.append(case)
    out = {
        "transformers": transformers.__version__,
        "jinja2": jinja2.__version__,
        "cases": cases,
        "tojson": tojson_table(),
    }
    if check:
        return compare(out)
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {sum(len(c['renderings']) for c in cases)} renderings of {len(cases)} cases and {len(out['tojson'])} tojson rows to {os.path.normpath(OUT)}")


def compare(out):
    with open(OUT, encoding="utf-8") as f:
        ref = json.load(f)
    bad = n = 0
    for gc, wc in zip(out["cases"], ref["cases"]):
        assert gc["name"] == wc["name"], "the cases changed since the fixture was written"
        for got, want in zip(gc["renderings"], wc["renderings"]):
            n += 1
            if got["text"] != want["text"]:
                bad += 1
                print(f"differs: {got['template']} {gc['name']} add_generation_prompt={got['add_generation_prompt']}"
                      f" enable_thinking={got.get('enable_thinking')}\n  {ref['transformers']}: {want['text']!r}"
                      f"\n  {out['transformers']}: {got['text']!r}")
    for got, want in zip(out["tojson"], ref["tojson"]):
        if got != want:
            bad += 1
            print(f"tojson differs: {got} vs {want}")
    print(f"transformers {out['transformers']} vs the fixture's {ref['transformers']}: "
          f"{bad} of {n + len(out['tojson'])} differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
