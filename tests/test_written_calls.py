"""Calls a template writes in its own rendering are read back (issue 38, G3).

Under the ``guaranteed`` policy a template whose past calls llama.cpp's analysis finds no
syntax for gets the syntax it writes them in (``reply/auto/written.py``). The round trip is
check-data's rule on a conversation of our own: the template renders an assistant turn with
calls, and the decoder prepared on the conversation before it reads the same calls back.
Every template of ``../shared/chat_templates`` and ``dev/templates`` is checked; a template
whose calls do not come back is excused below with its reason.
"""

from __future__ import annotations

import json
import warnings
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from chatcodec import Codec
from chatcodec.checkdata import check_turns
from chatcodec.reply.auto import analysis_for
from chatcodec.reply.auto.analysis import T_JSON, T_NONE

from .conftest import ROOT, TEMPLATES

# A Hermes-style template in the manner of vLLM's example: past calls are written as
# <tool_call>{"name", "arguments"}</tool_call>, and a tool message without "name" raises, so
# llama.cpp's capability probe (whose tool message has no name) finds no calls.
HERMES = """{{- bos_token }}
{%- if tools %}
{{- '<|im_start|>system\\nYou may call functions: <tools>' }}
{%- for tool in tools %}{{- ' ' + tool.function.name }}{%- endfor %}
{{- ' </tools>\\nWrite each call as <tool_call>{"name": ..., "arguments": ...}</tool_call>.' }}
{{- '<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == 'assistant' and message.tool_calls is defined %}
{{- '<|im_start|>assistant' }}
{%- for call in message.tool_calls %}
{%- set call = call.function %}
{{- '\\n<tool_call>\\n{"name": "' + call.name + '", "arguments": ' + call.arguments | tojson }}
{{- '}\\n</tool_call>' }}
{%- endfor %}
{{- '<|im_end|>\\n' }}
{%- elif message.role == 'tool' %}
{%- if message.name is not defined %}
{{- raise_exception("Tool response dicts require a 'name' key") }}
{%- endif %}
{{- '<|im_start|>tool\\n<tool_response>' + message.content + '</tool_response><|im_end|>\\n' }}
{%- else %}
{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"""


def _tool(name: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    parameters = {"type": "object", "properties": properties, "required": required}
    return {
        "type": "function",
        "function": {"name": name, "description": f"{name} tool", "parameters": parameters},
    }


TOOLS = [
    _tool(
        "get_weather",
        {
            "location": {"type": "string", "description": "City"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Unit"},
        },
        ["location"],
    ),
    _tool(
        "search_web",
        {
            "query": {"type": "string", "description": "Query"},
            "limit": {"type": "integer", "description": "Results"},
        },
        ["query"],
    ),
]
USER = {"role": "user", "content": "What is the weather in Paris?"}


def _call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


# ids of nine letters and digits: Mistral's templates refuse any other
WEATHER = _call("Wx1234567", "get_weather", {"location": "Paris, France", "unit": "celsius"})
SEARCH = _call("Sx7654321", "search_web", {"query": "cafe near the Louvre", "limit": 3})


# ---------------------------------------------------------------------- the Hermes-style unit


def test_hermes_style_calls_are_content_under_reference() -> None:
    """llama.cpp's probe raises on this template: no call syntax, the call stays text."""
    codec = Codec(HERMES)
    assert analysis_for(HERMES).tools.mode == T_NONE
    turn = codec.prepare([USER], tools=TOOLS, tool_call_id=0)
    reply = '<tool_call>\n{"name": "get_weather", "arguments": {"location": "Paris"}}\n</tool_call>'
    message = turn.parse(reply)
    assert message.tool_calls == ()
    assert message.content == reply
    assert turn.grammar is None


def test_hermes_style_calls_are_read_under_guaranteed() -> None:
    codec = Codec(HERMES)
    derived = analysis_for(HERMES, policy="guaranteed")
    assert derived.tools.mode == T_JSON
    assert (derived.tools.per_call_start.strip(), derived.tools.per_call_end) == (
        "<tool_call>",
        "</tool_call>",
    )
    assert derived.supports_parallel_tool_calls
    turn = codec.prepare([USER], tools=TOOLS, tool_call_id=0, policy="guaranteed")
    reply = (
        "Let me look.\n"
        '<tool_call>\n{"name": "get_weather", "arguments": {"location": "Paris"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "search_web", "arguments": {"query": "cafe", "limit": 2}}\n'
        "</tool_call>"
    )
    message = turn.parse(reply)
    assert message.content == "Let me look.\n"  # the content runs up to the call marker
    calls = [(c.name, json.loads(c.arguments)) for c in message.tool_calls]
    assert calls == [
        ("get_weather", {"location": "Paris"}),
        ("search_web", {"query": "cafe", "limit": 2}),
    ]
    # a reply without calls reads as under reference
    plain = "It is sunny {today}."
    assert turn.parse(plain).content == codec.prepare([USER], tools=TOOLS).parse(plain).content


def test_hermes_style_stream_announces_the_call() -> None:
    turn = Codec(HERMES).prepare([USER], tools=TOOLS, tool_call_id=0, policy="guaranteed")
    reply = '<tool_call>\n{"name": "get_weather", "arguments": {"location": "Paris"}}\n</tool_call>'
    stream = turn.stream()
    announced_at = None
    arguments = ""
    for end in range(1, len(reply) + 1):
        for delta in stream.feed(reply[end - 1 : end]):
            call = delta.tool_call
            if call is None:
                assert not delta.content.strip()
                continue
            if call.name:
                assert announced_at is None
                announced_at = end
                assert call.name == "get_weather"
            arguments += call.arguments
    deltas, message = stream.finish()
    for delta in deltas:
        if delta.tool_call is not None:
            arguments += delta.tool_call.arguments
    # announced once the name is complete, before the arguments are
    assert announced_at is not None and announced_at < reply.index("Paris")
    assert json.loads(arguments) == {"location": "Paris"}
    assert message == turn.parse(reply)


@pytest.mark.parametrize("tool_choice", ["auto", "required"])
def test_hermes_style_grammar_accepts_the_call(tiny_llama: Any, tool_choice: str) -> None:
    codec = Codec(HERMES)
    turn = codec.prepare(
        [USER], tools=TOOLS, tool_choice=tool_choice, tool_call_id=0, policy="guaranteed"
    )
    grammar = turn.grammar
    assert grammar is not None
    assert grammar.lazy == (tool_choice == "auto")
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"location": "Paris"}}\n</tool_call>'
    verdict = tiny_llama.verdict(grammar.gbnf, call, "" if grammar.lazy else turn.generation_prompt)
    assert verdict == "accept"
    wrong = call.replace("get_weather", "get_time")  # not an offered tool
    rejected = tiny_llama.verdict(grammar.gbnf, wrong, "" if grammar.lazy else turn.generation_prompt)
    assert rejected == "reject"
    if grammar.lazy:
        assert [t.value.strip() for t in grammar.triggers] == ["<tool_call>"]


# ---------------------------------------------------------------------- the round trip


def _conversation(calls: list[dict[str, Any]], content: str | None, answered: bool) -> list[Any]:
    messages: list[Any] = [USER, {"role": "assistant", "content": content, "tool_calls": calls}]
    if answered:
        for call in calls:
            name = call["function"]["name"]
            messages.append(
                {"role": "tool", "tool_call_id": call["id"], "name": name, "content": "18"}
            )
        messages.append({"role": "assistant", "content": "It is 18 degrees."})
    return messages


@cache
def _codec(path: Path) -> Codec:
    source = path.read_text(encoding="utf-8")
    return Codec(source, bos_token="<s>", eos_token="</s>")


def round_trip(path: Path, calls: tuple[str, ...]) -> str:
    """How the template's assistant turn with these calls reads back under guaranteed:
    ``ok``; ``unrendered`` (the template refuses every form of the conversation);
    ``no_calls`` (it writes no call: no name in the turn); ``name_only`` (it writes the name
    but not the arguments); ``thought`` (the generation prompt opens a thought the turn in
    history has not, and the calls read back once that thought is closed); or ``fails``."""
    codec = _codec(path)
    chosen = [{"weather": WEATHER, "search": SEARCH}[c] for c in calls]
    check = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for answered in (True, False):
            for content in ("", None):
                check = check_turns(
                    codec, _conversation(chosen, content, answered), TOOLS, now=0
                )
                if not check.error:
                    break
            if check is not None and not check.error:
                break
    assert check is not None
    if check.error:
        return "unrendered"
    turn = check.turns[0]
    assert turn.expected is not None
    expected = turn.expected["tool_calls"]
    if turn.read is not None and turn.read["tool_calls"] == expected:
        return "ok"
    if not all(c["function"]["name"] in turn.text for c in chosen):
        return "no_calls"
    if "Paris, France" not in turn.text:
        return "name_only"
    if turn.reasons == ("prompt_opens_thought",):
        return "thought" if _read_after_thought(codec, turn.text, expected) else "fails"
    return "fails"


def _read_after_thought(codec: Codec, text: str, expected: list[Any]) -> bool:
    markers = codec.thought_markers(TOOLS)
    if markers is None or not markers.closers:
        return False
    turn = codec.prepare([USER], tools=TOOLS, tool_call_id=0, policy="guaranteed")
    for stop in turn.stop:
        text = text.split(stop)[0] if stop else text
    try:
        read = turn.parse(f"{markers.closers[0]}{text}")
    except Exception:  # noqa: BLE001 - any failure is "not read"
        return False
    got = [{"name": c.name, "arguments": json.loads(c.arguments)} for c in read.tool_calls]
    return got == expected


# Templates whose calls do not come back, with the reason. Templates that write no call at
# all (outcome ``no_calls``: most of dev/templates predate tools) need no entry: the render
# itself shows it. Entries are (single call, two calls) outcomes and why.
EXCUSED: dict[str, tuple[str, str, str]] = {}

SHARED_NAMES = sorted(p.name for p in TEMPLATES.glob("*.jinja")) if TEMPLATES.is_dir() else []
DEV_NAMES = sorted(p.name for p in (ROOT / "dev" / "templates").glob("*.jinja"))


def _check_template(path: Path) -> None:
    outcomes = (round_trip(path, ("weather",)), round_trip(path, ("weather", "search")))
    excused = EXCUSED.get(path.name)
    if excused is not None:
        assert outcomes == excused[:2], f"{path.name}: {outcomes}, excused as {excused}"
        return
    allowed = {"ok", "unrendered", "no_calls"}
    assert set(outcomes) <= allowed, f"{path.name}: {outcomes}"


@pytest.mark.parametrize("name", SHARED_NAMES)
def test_shared_template_calls_read_back(name: str) -> None:
    _check_template(TEMPLATES / name)


@pytest.mark.parametrize("name", DEV_NAMES)
def test_dev_template_calls_read_back(name: str) -> None:
    _check_template(ROOT / "dev" / "templates" / name)
