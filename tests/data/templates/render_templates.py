#!/usr/bin/env python3
# Renders the chat templates in this folder with Python's jinja2, configured as Hugging Face
# transformers configures it for apply_chat_template, over a fixed set of conversations, and
# writes the renderings to expected.json; tests/unit/chat_template_models_test.cpp renders the
# same conversations with rewind and compares byte for byte.
#
# Run by hand, not by CI (CI has no jinja2): `python3 tests/data/templates/render_templates.py`
# (Debian: apt-get install python3-jinja2). Re-run it after changing a conversation below.
#
# The environment is transformers' (chat_template_utils.py): ImmutableSandboxedEnvironment with
# trim_blocks and lstrip_blocks, the loopcontrols extension, a `tojson` filter that is
# json.dumps(ensure_ascii=False, indent, separators, sort_keys=False), and the globals
# raise_exception (raises TemplateError) and strftime_now (here at a fixed time, FIXED_NOW, so
# that the expectations are stable; the C++ test injects the same time).
#
# Conversations with "api": "chat" are in the form rewind's ChatTemplate::render builds from
# ChatMessage (chat_template.cpp, message_json): content always a string, reasoning_content,
# tool_call_id and name only when non-empty, tool calls as {id, type, function: {name,
# arguments}} with arguments a JSON object (or the text when it is not JSON), `tools` and
# `enable_thinking` only when given, bos_token and eos_token always. The test renders those
# through ChatTemplate too. "api": "jinja" conversations use variables only a raw render can
# give (list content, documents, None, continue_final_message, ...).
import datetime
import json
import os
import sys

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATES = [
    "ibm-granite-granite-4.0.jinja",
    "NVIDIA-Nemotron-Nano-v2.jinja",
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja",
]
FIXED_NOW = datetime.datetime(2025, 3, 14, 9, 26, 53)

# A template of our own that calls strftime_now (as Llama 3.1 and Granite 3 templates do), so
# that the fixed clock is checked too; it is rendered over every conversation.
INLINE_TEMPLATES = {
    "strftime_now": "{{- 'Today: ' + strftime_now('%d %B %Y') + ' (' + strftime_now('%Y-%m-%d %H:%M:%S %a %j') + ')\\n' }}"
                    "{%- for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}",
}


# Small templates for the semantics the chat templates lean on (JSON, reprs, floats, string
# methods, filters, loops, whitespace control) and corner cases where a subset could silently
# differ; each is rendered with SNIPPET_VARS. jinja2's errors are expected errors.
SNIPPET_VARS = {
    "d": {"e": {}, "l": [], "n": [[], {}], "s": "q\"\\\u2028\x01\x7f\U0001f600é", "f": 1e-05,
          "g": 123456789012.0, "h": 1.7976931348623157e308, "i": -9223372036854775808},
    "w": "it's \"q\" \\ \n\t\x01\u2028é\U0001f600\x7f\u00ad",
    "s": "Hello World  ", "l": [3, 1, 2],
    "dl": [{"k": "b", "v": 2}, {"k": "a", "v": 1}, {"k": "c", "v": None}],
    "messages": [{"role": "system", "content": " Sys "}, {"role": "user", "content": "Hi ü"}],
}
SNIPPETS = [
    "{{ d|tojson }}", "{{ d|tojson(indent=2) }}", "{{ d|tojson(indent=0) }}",
    "{{ d|tojson(indent='\\t') }}", "{{ d|tojson(ensure_ascii=true) }}",
    "{{ d|tojson(separators=(',', ':'), indent=1, sort_keys=true) }}",
    "{{ d }}|{{ w }}|{{ [w] }}|{{ (w,) }}|{{ {'it\\'s': 1, 'a\"b': [none]} }}",
    "{{ d.f }}|{{ d.g }}|{{ d.h }}|{{ d.i }}|{{ d.h * 10 }}|{{ -(d.h * 10) }}",
    "{{ 1 / 0 }}", "{{ 5 // 0 }}", "{{ 5 % 0 }}", "{{ d.i - 1 }}",
    "{{ 2.5 // 1 }}|{{ -2.5 % 1 }}|{{ 7.0 // 2 }}|{{ 10 / 4 }}|{{ -7 // 2 }}|{{ -7 % 3 }}|{{ 2 ** -1 }}",
    "{{ 0.1|round(1) }}|{{ 2.675|round(2) }}|{{ 0.125|round(2) }}|{{ 1234.5|round(-2) }}|"
    "{{ 0.5|round }}|{{ 1.5|round }}|{{ 2.5|round(0, 'floor') }}|{{ 2.1|round(0, 'ceil') }}|"
    "{{ 7|round(1) }}",
    "{{ 12345678901234567.0 }}|{{ 1e15 }}|{{ 1e16 }}|{{ 0.0001 }}|{{ 0.00001 }}|{{ 1/3 }}|{{ -0.0 }}",
    "{{ 5.0|int }}|{{ -5.9|int }}|{{ '  12 '|int }}|{{ '1e3'|float }}|{{ true|int }}|{{ 'x'|int(5) }}",
    "{{ \"\\x41\\u00e9\\101\" }}", "{{ \"\\N{BULLET}\" }}", "{{ 'a' 'b' }}",
    "{{ s.upper() }}|{{ s.lower() }}|{{ s.title() }}|{{ s.capitalize() }}|{{ s|title }}",
    "{{ s.split() }}|{{ s.split(' ', 1) }}|{{ 'a,b,,c'.split(',') }}|{{ s.rsplit(None, 1) }}|"
    "{{ 'x\\ny\\r\\nz'.splitlines() }}",
    "{{ s.strip('Hd ') }}|{{ s.lstrip('eH') }}|{{ s.count('l') }}|{{ s.startswith(('He', 'x')) }}|"
    "{{ s[::-1] }}|{{ s[1:4] }}|{{ s[-2:] }}",
    "{{ s.swapcase() }}", "{{ '%s' % s }}", "{{ '{}'.format(s) }}",
    "{{ l|sort }}|{{ l|sort(reverse=true) }}|{{ l|max }}|{{ l|sum }}|{{ l|unique|list }}|"
    "{{ l|map('string')|join('-') }}",
    "{{ dl|map(attribute='k')|join(',') }}|{{ dl|selectattr('v')|list }}|"
    "{{ dl|rejectattr('v', 'none')|map(attribute='k')|list }}|"
    "{{ dl|sort(attribute='k')|map(attribute='v')|list }}",
    "{{ dl|groupby('k') }}", "{{ s|truncate(5) }}",
    "{{ {'b': 1, 'a': 2}|dictsort(reverse=true) }}|{{ ['b', 'A', 'a']|sort }}|"
    "{{ ['b', 'A', 'a']|sort(case_sensitive=true) }}|{{ ['b', 'A', 'a']|unique|list }}",
    "{{ messages|selectattr('role', 'equalto', 'user')|list|length }}|"
    "{{ messages|map(attribute='content')|map('trim')|join('/') }}",
    "{% for k, v in d.items() %}{{ loop.index }}{{ k }};{% endfor %}"
    "{% for x in l if x > 1 %}{{ loop.index0 }}{{ loop.revindex }}{{ loop.length }}"
    "{{ loop.cycle('a', 'b') }}{% else %}none{% endfor %}",
    "{% for x in [1,2,3] %}{% if x == 2 %}{% continue %}{% endif %}{{ x }}"
    "{% if x == 3 %}{% break %}{% endif %}{% endfor %}",
    "{% set ns = namespace(x=[]) %}{% for m in messages %}{% set ns.x = ns.x + [m.role] %}"
    "{% endfor %}{{ ns.x }}",
    "{% macro m(a, b='d') %}[{{ a }}{{ b }}]{% endmacro %}{{ m(1) }}{{ m(1, b=2) }}{{ m }}",
    "{% filter upper %}x{% endfilter %}", "{% with q = 5 %}{{ q }}{% endwith %}",
    "{{ x.y }}", "{{ none.y }}", "{{ 'abc'[5] is defined }}|{{ [1][3] is undefined }}",
    "  {#- c -#}  {{- ' x ' -}}  {%+ if true %} y {% endif -%}\n  {% raw %}{{ k }}{% endraw %}\n",
    "{% if true %}\n  a\n  {% if true %}\n    b\n  {% endif %}\n{% endif %}\n",
]

# What rewind's subset refuses (src/rewind/chat/jinja.h): the test expects an error for these
# where jinja2 renders, never a different text.
REWIND_REFUSES = {
    "{{ d.i - 1 }}",  # ints are 64-bit
    "{{ \"\\N{BULLET}\" }}", "{{ s.swapcase() }}", "{{ '%s' % s }}", "{{ '{}'.format(s) }}",
    "{{ dl|groupby('k') }}", "{{ s|truncate(5) }}", "{% filter upper %}x{% endfilter %}",
    "{% with q = 5 %}{{ q }}{% endwith %}",
}


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def strftime_now(fmt):
    return FIXED_NOW.strftime(fmt)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


# ---- conversations -----------------------------------------------------------------------

def msg(role, content, **extra):
    m = {"role": role, "content": content}
    for key in ("reasoning_content", "tool_calls", "tool_call_id", "name"):
        if extra.get(key):
            m[key] = extra[key]
    return m


def call(i, name, arguments):
    return {"id": "call_%d" % i, "type": "function",
            "function": {"name": name, "arguments": arguments}}


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.\n",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city, e.g. Zürich"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"],
                         "default": "celsius"},
                "days": {"type": "array", "items": {"type": "integer"}, "minItems": 1},
            },
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
SEARCH = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "  Search the web — returns the top results.  ",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "limit": {"type": ["integer", "null"], "description": "How many results",
                          "maximum": 10.5},
                "filters": {"type": "object", "properties": {"site": {"type": "string"}}},
            },
        },
        "strict": True,
    },
}
NO_PARAMS = {"type": "function", "function": {"name": "now", "description": "The time.",
                                              "parameters": {"type": "object",
                                                             "properties": {}}}}


def conversations():
    c = {}

    def chat(name, messages, add_generation_prompt=True, tools=None, enable_thinking=None):
        v = {"messages": messages}
        if tools is not None:
            v["tools"] = tools
        v["add_generation_prompt"] = add_generation_prompt
        if enable_thinking is not None:
            v["enable_thinking"] = enable_thinking
        v["bos_token"] = ""
        v["eos_token"] = ""
        c[name] = {"api": "chat", "vars": v}

    def raw(name, v):
        c[name] = {"api": "jinja", "vars": v}

    sys_user = [msg("system", "You are a terse assistant."), msg("user", "What is 2 + 2?")]
    chat("system_user", sys_user)
    chat("system_user_no_generation_prompt", sys_user, add_generation_prompt=False)
    chat("user_only", [msg("user", "Hello!")])
    chat("user_only_no_generation_prompt", [msg("user", "Hello!")], add_generation_prompt=False)
    chat("system_only", [msg("system", "Only a system prompt.")])
    multi = [msg("system", "Be brief."), msg("user", "Hi."), msg("assistant", "Hello. How can I help?"),
             msg("user", "Tell me a joke."), msg("assistant", "  Why did the chicken cross the road?  \n"),
             msg("user", "Why?")]
    chat("multi_turn", multi)
    chat("multi_turn_no_generation_prompt", multi, add_generation_prompt=False)
    chat("multi_turn_ends_with_assistant", multi[:5], add_generation_prompt=False)
    chat("two_system_messages", [msg("system", "First."), msg("user", "Q1"),
                                 msg("system", "Second system."), msg("user", "Q2")])
    tools_conv = [
        msg("system", "You help with the weather."),
        msg("user", "Weather in Paris and Zürich for the next two days?"),
        msg("assistant", "Let me check both.", tool_calls=[
            call(0, "get_weather", {"city": "Paris", "days": [1, 2], "unit": "celsius"}),
            call(1, "get_weather", {"city": "Zürich", "days": [1, 2]})]),
        msg("tool", "{\"temp\": 21.5, \"sky\": \"sunny\"}", tool_call_id="call_0", name="get_weather"),
        msg("tool", "{\"temp\": 17, \"sky\": \"cloudy\"}", tool_call_id="call_1", name="get_weather"),
        msg("assistant", "Paris: 21.5 °C and sunny; Zürich: 17 °C and cloudy."),
        msg("user", "Thanks! And search for umbrellas."),
    ]
    chat("tools_calls_and_results", tools_conv, tools=[WEATHER, SEARCH])
    chat("tools_calls_and_results_no_generation_prompt", tools_conv, tools=[WEATHER, SEARCH],
         add_generation_prompt=False)
    chat("tools_defined_no_calls", sys_user, tools=[WEATHER, SEARCH, NO_PARAMS])
    chat("tools_no_system", [
        msg("user", "What time is it?"),
        msg("assistant", "", tool_calls=[call(0, "now", {})]),
        msg("tool", "09:26", tool_call_id="call_0"),
    ], tools=[NO_PARAMS])
    chat("tool_call_arguments_kinds", [
        msg("user", "Search."),
        msg("assistant", "", tool_calls=[call(0, "search", {
            "query": "umbrella \"large\" <b>", "limit": 3, "ratio": 2.0, "big": 1e20,
            "exact": True, "cursor": None, "filters": {"site": "example.com", "tags": ["a", "b"]},
            "text": "42"})]),
        msg("tool", "no results"),
    ], tools=[SEARCH], add_generation_prompt=False)
    chat("tool_call_arguments_not_json", [
        msg("user", "Try again."),
        msg("assistant", "Trying.", tool_calls=[call(1, "search", "not json {")]),
    ], tools=[SEARCH], add_generation_prompt=False)
    chat("thinking_on", [msg("system", "Think hard. /think"), msg("user", "Prove it.")],
         enable_thinking=True)
    chat("thinking_off", [msg("system", "Answer fast. /no_think"), msg("user", "Prove it.")],
         enable_thinking=False)
    chat("no_think_in_user", [msg("user", "Quick answer please /no_think")], enable_thinking=False)
    chat("think_in_user_after_no_think", [msg("system", "/no_think"), msg("user", "Q /think")])
    chat("reasoning_history", [
        msg("user", "Q1"),
        msg("assistant", "A1", reasoning_content="First I think.\nThen I answer."),
        msg("user", "Q2"),
        msg("assistant", "<think>\nInline thought.\n</think>\n\nA2"),
        msg("user", "Q3"),
    ], enable_thinking=True)
    chat("reasoning_last_turn", [
        msg("user", "Q1"),
        msg("assistant", "A1", reasoning_content="Because."),
    ], add_generation_prompt=False, enable_thinking=True)
    chat("reasoning_with_tool_call", [
        msg("user", "Weather?"),
        msg("assistant", "Checking.", reasoning_content="Need the tool.",
            tool_calls=[call(0, "get_weather", {"city": "Oslo"})]),
        msg("tool", "cold"),
        msg("assistant", "<think>It said cold.</think>It is cold."),
        msg("user", "And tomorrow?"),
    ], tools=[WEATHER], enable_thinking=False)
    chat("empty_contents", [msg("system", ""), msg("user", ""), msg("assistant", ""),
                            msg("user", "")])
    chat("unicode", [
        msg("system", "Réponds en français. ✓"),
        msg("user", "日本語で説明して 😀 — «quotes» \"double\" 'single' \\ back\tslash"),
        msg("assistant", "Ελληνικά και 中文 🎉\n\nZweite Zeile.",
            tool_calls=[call(0, "search", {"query": "東京 天気 ☔", "filters": {"site": "ü.example"}})]),
        msg("tool", "晴れ ☀"),
        msg("user", "Merci 🙏"),
    ], tools=[SEARCH, WEATHER])
    chat("whitespace_and_markup", [
        msg("user", "  leading and trailing  \n\n"),
        msg("assistant", "\n<tool_call>not a call</tool_call>\n"),
        msg("user", "{{ not jinja }} {% neither %} <|im_end|> <SPECIAL_11>"),
    ])

    chat("think_markers_inside_words", [
        msg("system", "  /thinking about /no_thinking  "),
        msg("user", "/think/no_think"),
        msg("assistant", "a</think>b</think>c"),
        msg("user", "again"),
        msg("assistant", "<think>unclosed reasoning", tool_calls=[call(0, "now", {})]),
        msg("user", "last"),
    ], tools=[NO_PARAMS])
    chat("unicode_whitespace_and_escapes", [
        msg("system", "\u00a0\u3000 wide spaces \u2028\u0085\x1c"),
        msg("user", "\u2003 em space \u00a0"),
        msg("assistant", "\u3000reply\u3000", tool_calls=[call(0, "search", {
            "query": "ctl \x01\x1f\x7f \u2028 \ud7ff \U0001f600 \\ \"", "ß": "Straße",
            "n": [0.1, 1e-07, 1e16, -0.0, 123456789.0, 9007199254740993, -5]})]),
        msg("tool", "\u00a0done\u00a0"),
    ], tools=[{"type": "function", "function": {
        "name": "search", "description": "\u00a0 Suche \u3000",
        "parameters": {"type": "object", "properties": {
            "query": {"type": ["string", "ü\u2028\x01"], "description": "\u2003q\u2003",
                      "examples": ["a", {"b": "ü"}], "nullable": True, "x-weight": 0.5,
                      "x-none": None}}}}}])
    chat("tools_without_wrapper_or_parameters", [msg("user", "Hi")], tools=[
        {"name": "bare", "description": "A tool without the function wrapper.",
         "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}},
        {"type": "function", "function": {"name": "noparams", "extra": {"k": [1, 2]}}},
    ])
    chat("other_roles", [msg("system", "S"), msg("user", "U"), msg("developer", "D"),
                         msg("system", "S2"), msg("assistant", "A"), msg("user", "U2")])
    long_conv = [msg("system", "Long chat.")]
    for i in range(40):
        long_conv.append(msg("user", "Question %d?" % i))
        long_conv.append(msg("assistant", "Answer %d." % i,
                             reasoning_content=("thought %d" % i) if i % 3 == 0 else ""))
    long_conv.append(msg("user", "Done?"))
    chat("long_conversation", long_conv, enable_thinking=True)

    # Variables that ChatTemplate never passes (jinja-level renders only).
    raw("content_parts", {"messages": [
        {"role": "system", "content": [{"type": "text", "text": "Part one."},
                                       {"type": "text", "text": "Part two."}]},
        {"role": "user", "content": [{"type": "text", "text": "Look:"},
                                     {"type": "image"}, {"type": "text", "text": "Well?"}]},
    ], "add_generation_prompt": True})
    raw("documents", {"messages": [msg("user", "Summarise the documents.")],
                      "documents": [{"doc_id": 1, "title": "A", "text": "Alpha — first."},
                                    {"doc_id": 2, "title": "B", "text": "Beta"}],
                      "tools": [WEATHER], "add_generation_prompt": True})
    raw("documents_with_system", {"messages": [msg("system", "Use the docs."), msg("user", "Go.")],
                                  "documents": [{"text": "Gamma"}], "add_generation_prompt": True})
    raw("available_tools", {"messages": [msg("user", "Hi")], "available_tools": [NO_PARAMS],
                            "add_generation_prompt": True})
    raw("hf_none_tools_and_documents", {"messages": sys_user, "tools": None, "documents": None,
                                        "add_generation_prompt": True})
    raw("assistant_content_none", {"messages": [
        msg("user", "Call it."),
        {"role": "assistant", "content": None,
         "tool_calls": [{"type": "function",
                         "function": {"name": "now", "arguments": "{\"tz\": \"UTC\"}"}}]},
        msg("tool", "09:26"),
    ], "tools": [NO_PARAMS], "add_generation_prompt": True})
    raw("continue_final_message", {"messages": multi[:5], "add_generation_prompt": False,
                                   "continue_final_message": True})
    raw("continue_final_message_false", {"messages": multi[:5], "add_generation_prompt": False,
                                         "continue_final_message": False})
    raw("keep_history_thinking", {"messages": [
        msg("user", "Q1"), msg("assistant", "A1", reasoning_content="R1"),
        msg("user", "Q2"), msg("assistant", "A2", reasoning_content="R2"), msg("user", "Q3"),
    ], "truncate_history_thinking": False, "add_generation_prompt": True})
    raw("no_generation_prompt_variable", {"messages": sys_user})
    raw("tool_call_without_function_wrapper", {"messages": [
        msg("user", "Now?"),
        {"role": "assistant", "content": "Sure.",
         "tool_calls": [{"name": "now", "arguments": {"tz": "UTC"}}]},
    ], "add_generation_prompt": False})
    return c


def main():
    env = environment()
    sources = {}
    for name in TEMPLATES:
        with open(os.path.join(HERE, name), encoding="utf-8") as f:
            sources[name] = f.read()
    sources.update(INLINE_TEMPLATES)
    assert REWIND_REFUSES <= set(SNIPPETS)
    convs = conversations()
    renderings = []
    for tname, src in sources.items():
        tmpl = env.from_string(src)
        for cname, conv in convs.items():
            r = {"template": tname, "conversation": cname}
            try:
                r["expected"] = tmpl.render(**conv["vars"])
            except Exception as e:  # the C++ test expects rewind to fail too
                r["error"] = type(e).__name__ + ": " + str(e)
            renderings.append(r)
    snippets = []
    for src in SNIPPETS:
        r = {"template": src}
        if src in REWIND_REFUSES:
            r["rewind_refuses"] = True
        try:
            r["expected"] = env.from_string(src).render(**SNIPPET_VARS)
        except Exception as e:
            r["error"] = type(e).__name__ + ": " + str(e)
        snippets.append(r)
    out = {
        "about": "Generated by render_templates.py (jinja2 %s); do not edit by hand." % jinja2.__version__,
        "strftime_now": FIXED_NOW.strftime("%Y-%m-%d %H:%M:%S"),
        "inline_templates": INLINE_TEMPLATES,
        "conversations": convs,
        "renderings": renderings,
        "snippet_vars": SNIPPET_VARS,
        "snippets": snippets,
    }
    path = os.path.join(HERE, "expected.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    errors = sum(1 for r in renderings if "error" in r)
    print("%s: %d renderings (%d errors)" % (path, len(renderings), errors), file=sys.stderr)


if __name__ == "__main__":
    main()
