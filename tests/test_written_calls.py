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
import os
import subprocess
import sys
import warnings
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from chatcodec import Codec, ReplyError
from chatcodec.checkdata import check_turns
from chatcodec.reply.auto import analysis_for
from chatcodec.reply.auto.analysis import T_JSON, T_NONE
from chatcodec.reply.auto.written import reads_back, written_forms
from chatcodec.reply.select import handler_for
from chatcodec.template.compat import LlamaCompatTemplate

from .conftest import ORACLE, ROOT, TEMPLATES, read_jsonl

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


# The same with the arguments joined to the text as they are given: it writes JSON only for
# arguments given as JSON text (a dict joined to a string is written as Python).
HERMES_TEXT = HERMES.replace("call.arguments | tojson", "call.arguments")


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
    rejected = tiny_llama.verdict(
        grammar.gbnf, wrong, "" if grammar.lazy else turn.generation_prompt
    )
    assert rejected == "reject"
    if grammar.lazy:
        assert [t.value.strip() for t in grammar.triggers] == ["<tool_call>"]


# ---------------------------------------------------------------------- the round trip


def _as_text(call: dict[str, Any]) -> dict[str, Any]:
    """The call with its arguments as JSON text (some templates concatenate them as such)."""
    function = {**call["function"], "arguments": json.dumps(call["function"]["arguments"])}
    return {**call, "function": function}


def _forms(calls: list[dict[str, Any]]) -> list[list[Any]]:
    """The conversation's forms, tried in order until the template renders one: the calls
    answered or last, the content empty or null, the arguments an object or JSON text."""
    return [
        _conversation(chosen, content, answered)
        for chosen in (calls, [_as_text(c) for c in calls])
        for answered in (True, False)
        for content in ("", None)
    ]


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
def _corpus_tokens() -> dict[str, tuple[str, str]]:
    """Each shared template's special tokens, as the render corpus gives them."""
    path = ORACLE / "render" / "expectations.jsonl"
    if not path.exists():
        return {}
    found: dict[str, tuple[str, str]] = {}
    for case in read_jsonl(path):
        kwargs = case["kwargs"] or {}
        if kwargs.get("bos_token") is not None and kwargs.get("eos_token") is not None:
            found.setdefault(case["template"], (kwargs["bos_token"], kwargs["eos_token"]))
    return found


@cache
def _codec(path: Path) -> Codec:
    """The template with its own special tokens where the corpus knows them (a server stops
    at the end-of-sequence token), else ``<s>`` and ``</s>``."""
    bos, eos = _corpus_tokens().get(path.name, ("<s>", "</s>"))
    return Codec(path.read_text(encoding="utf-8"), bos_token=bos, eos_token=eos)


def _render(codec: Codec, messages: list[Any]) -> str | None:
    try:
        return codec.render(messages, TOOLS, now=0)
    except Exception:  # noqa: BLE001 - a template may refuse the conversation
        return None


def _written(codec: Codec, chosen: list[dict[str, Any]]) -> str:
    """What the template writes of the calls, from its render of the conversation:
    ``calls`` (every call's name and arguments), ``name_only`` or ``no_calls``."""
    text = next(filter(None, (_render(codec, messages) for messages in _forms(chosen))), None)
    if text is None:
        return "unrendered"
    values = [str(v) for c in chosen for v in c["function"]["arguments"].values()]
    if all(value in text for value in values):
        return "calls"
    after_tools = text[text.rfind(USER["content"]) :]
    if all(c["function"]["name"] in after_tools for c in chosen):
        return "name_only"
    return "no_calls"


def round_trip(codec: Codec, calls: tuple[str, ...], policy: str = "guaranteed") -> str:
    """How the template's assistant turn with these calls reads back under guaranteed:
    ``ok``; ``unrendered`` (the template refuses every form of the conversation);
    ``no_calls`` (it writes no call, or not every call); ``name_only`` (it writes the names
    but not the arguments); ``thought`` (the generation prompt opens a thought the turn in
    history has not, and the calls read back once that thought is closed); or ``fails``."""
    chosen = [{"weather": WEATHER, "search": SEARCH}[c] for c in calls]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        written = _written(codec, chosen)
        if written != "calls":
            return written
        for messages in _forms(chosen):
            check = check_turns(codec, messages, TOOLS, now=0, policy=policy)
            if not check.error:
                break
        else:
            return "unrendered"
    turn = check.turns[0]
    assert turn.expected is not None
    expected = turn.expected["tool_calls"]
    if turn.read is not None and turn.read["tool_calls"] == expected:
        return "ok"
    if turn.reasons == ("prompt_opens_thought",):
        return "thought" if _read_after_thought(codec, turn.text, expected) else "fails"
    return "fails"


def _end_of_turn(codec: Codec) -> str:
    """The marker the template writes after an assistant turn (``<|im_end|>``, ...)."""
    probe = [USER, {"role": "assistant", "content": "END_PROBE"}]
    text = _render(codec, probe) or ""
    words = text[text.rfind("END_PROBE") + len("END_PROBE") :].split()
    return words[0] if "END_PROBE" in text and words else ""


def _read_after_thought(codec: Codec, text: str, expected: list[Any]) -> bool:
    markers = codec.thought_markers(TOOLS)
    if markers is None or not markers.closers:
        return False
    turn = codec.prepare([USER], tools=TOOLS, tool_call_id=0, policy="guaranteed")
    for stop in (*turn.stop, _end_of_turn(codec)):
        text = text.split(stop)[0] if stop else text
    try:
        read = turn.parse(f"{markers.closers[0]}{text}")
    except Exception:  # noqa: BLE001 - any failure is "not read"
        return False
    got = [{"name": c.name, "arguments": json.loads(c.arguments)} for c in read.tool_calls]
    return got == expected


# Templates whose calls do not come back: (one call, two calls, why). A template of
# dev/templates that writes no call at all needs no entry (most of them predate tools): its
# render shows it (outcome ``no_calls``), as does a template that refuses every form of the
# conversation (``unrendered``). ``thought`` counts as read back: the calls are read once the
# thought the generation prompt opens is closed (check-data's ``prompt_opens_thought``).
DROPS = "the template writes no past call: a model trained on it learns no call"
ONE_CALL = "the template writes the first call of a turn only"
EXCUSED: dict[str, tuple[str, str, str]] = {
    # the template loses the calls
    "HuggingFaceTB-SmolLM3-3B.jinja": ("no_calls", "no_calls", DROPS),
    "LFM2-8B-A1B.jinja": ("no_calls", "no_calls", DROPS),
    "LFM2.5-Instruct.jinja": ("no_calls", "no_calls", DROPS),
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja": ("no_calls", "no_calls", DROPS),
    "ibm-granite-granite-3.3-2B-Instruct.jinja": ("no_calls", "no_calls", DROPS),
    "microsoft-Phi-3.5-mini-instruct.jinja": ("no_calls", "no_calls", DROPS),
    "google-gemma-2-2b-it.jinja": ("no_calls", "no_calls", "no tool support: " + DROPS),
    "llama-cpp-rwkv-world.jinja": ("no_calls", "no_calls", "no tool support: " + DROPS),
    "openai-gpt-oss-120b.jinja": ("ok", "no_calls", ONE_CALL),
    "GigaChat3.1-10B-A1.8B.jinja": ("ok", "no_calls", ONE_CALL),
    "ggml-org-llama.cpp-test-chat-template-yandex-YandexGPT-5-Lite-8B-instruct.jinja": (
        "name_only",
        "name_only",
        "the template writes the call's name but not its arguments",
    ),
    "GigaChat3-10B-A1.8B.jinja": (
        "fails",
        "no_calls",
        "the template writes the call after <|message_sep|>, a stop string: a model stops "
        "before its call (and the template writes the first call of a turn only)",
    ),
    # open: neither llama.cpp's call syntax (or its family's) nor one found in the
    # template's written calls (with their own separator) reads the template's history back
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja": (
        "fails",
        "fails",
        "render_with_spans finds no span for the call turn",
    ),
    # dev/templates
    "ggml-org-llama.cpp-llama-cpp-microsoft-Phi-4-mini-instruct.jinja": (
        "fails",
        "fails",
        "the turn's span (render_with_spans) ends after <|tool_call|>, before the call's JSON",
    ),
}

SHARED_NAMES = sorted(p.name for p in TEMPLATES.glob("*.jinja")) if TEMPLATES.is_dir() else []
DEV_NAMES = sorted(p.name for p in (ROOT / "dev" / "templates").glob("*.jinja"))


def _check_template(path: Path) -> None:
    codec = _codec(path)
    outcomes = (round_trip(codec, ("weather",)), round_trip(codec, ("weather", "search")))
    excused = EXCUSED.get(path.name)
    if excused is not None:
        assert outcomes == excused[:2], f"{path.name}: {outcomes}, excused as {excused}"
        return
    allowed = {"ok", "thought", "unrendered"}
    if path.parent.name == "templates" and path.parent.parent.name == "dev":
        allowed.add("no_calls")
    assert set(outcomes) <= allowed, f"{path.name}: {outcomes}"


@pytest.mark.parametrize("template", [HERMES, HERMES_TEXT], ids=["object", "text"])
def test_hermes_style_round_trip(template: str) -> None:
    """check-data's rule on the Hermes-style templates: their calls come back under
    guaranteed only (check-data reads under guaranteed by default)."""
    codec = Codec(template)
    for calls in (("weather",), ("weather", "search")):
        assert round_trip(codec, calls) == "ok"
        assert round_trip(codec, calls, "reference") == "fails"


# A template llama.cpp finds a call syntax for (one JSON section), which writes two calls one
# JSON object a line where llama.cpp's format reads them comma-separated (as MiniMax M1 does).
LINES = """{{- bos_token }}
{%- if tools %}
{{- '<|im_start|>system\\nTools:' }}
{%- for tool in tools %}{{- ' ' + tool.function.name }}{%- endfor %}
{{- '<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == 'assistant' and message.tool_calls %}
{{- '<|im_start|>assistant\\n<tool_calls>' }}
{%- for call in message.tool_calls %}
{{- '\\n' + {"name": call.function.name, "arguments": call.function.arguments} | tojson }}
{%- endfor %}
{{- '\\n</tool_calls><|im_end|>\\n' }}
{%- else %}
{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"""


def test_calls_the_template_parts_its_own_way_are_read_under_guaranteed() -> None:
    """llama.cpp's format reads this template's calls comma-separated only, so its two-call
    turns do not read back; under guaranteed the calls are read as the template parts them,
    and still as llama.cpp's grammar parts them."""
    reference = analysis_for(LINES)
    assert reference.tools.mode == T_JSON and reference.tools.call_separator is None
    assert analysis_for(LINES, policy="guaranteed").tools.call_separator is not None
    codec = Codec(LINES)
    assert round_trip(codec, ("weather", "search"), "reference") == "fails"
    assert round_trip(codec, ("weather", "search")) == "ok"
    turn = codec.prepare([USER], tools=TOOLS, tool_call_id=0, policy="guaranteed")
    first = '{"name": "get_weather", "arguments": {"location": "Paris"}}'
    second = '{"name": "search_web", "arguments": {"query": "cafe"}}'
    want = [("get_weather", {"location": "Paris"}), ("search_web", {"query": "cafe"})]
    for between in ("\n", ", "):
        reply = f"<tool_calls>\n{first}{between}{second}\n</tool_calls>"
        message = turn.parse(reply)
        assert [(c.name, json.loads(c.arguments)) for c in message.tool_calls] == want
        stream = turn.stream()  # the stream, fed a character at a time, reads the same
        names = [d.tool_call.name for c in reply for d in stream.feed(c) if d.tool_call]
        assert [n for n in names if n] == ["get_weather", "search_web"]
        assert stream.finish().message == message


# Mistral Small 3.2's way with a call: [TOOL_CALLS]name[CALL_ID]id[ARGS]{...}. llama.cpp's
# analysis ends the name at [ARGS] and reads the id after it, so no call reads.
MISTRAL = """{{- bos_token }}
{%- for message in messages %}
{%- if message.role == 'user' %}
{%- if tools and loop.last %}{{- '[AVAILABLE_TOOLS]' + tools | tojson + '[/AVAILABLE_TOOLS]' }}
{%- endif %}
{{- '[INST]' + message.content + '[/INST]' }}
{%- elif message.role == 'assistant' %}
{%- if message.content %}{{- message.content }}{%- endif %}
{%- for call in message.tool_calls or [] %}
{{- '[TOOL_CALLS]' + call.function.name + '[CALL_ID]' + call.id + '[ARGS]' }}
{{- call.function.arguments | tojson }}
{%- endfor %}
{{- eos_token }}
{%- elif message.role == 'tool' %}
{{- '[TOOL_RESULTS]' + message.tool_call_id + '[TOOL_CONTENT]' + message.content }}
{{- '[/TOOL_RESULTS]' }}
{%- endif %}
{%- endfor %}"""


@pytest.mark.parametrize("tool_choice", ["auto", "required"])
def test_a_call_id_between_name_and_arguments_is_read_under_guaranteed(
    tiny_llama: Any, tool_choice: str
) -> None:
    """Under guaranteed the name ends where the call id opens: the calls the template writes,
    and those its grammar writes (no id), are read; under reference neither is."""
    tokens = {"bos_token": "<s>", "eos_token": "</s>"}
    assert analysis_for(MISTRAL, tokens).tools.name_suffix == "[ARGS]"
    assert analysis_for(MISTRAL, tokens, "guaranteed").tools.name_suffix == ""
    codec = Codec(MISTRAL, bos_token="<s>", eos_token="</s>")
    turn = [USER, {"role": "assistant", "content": "", "tool_calls": [WEATHER]}]
    written = codec.render(turn, TOOLS).split("[/INST]")[-1].removesuffix("</s>")
    arguments = json.dumps(WEATHER["function"]["arguments"])
    assert written == f"[TOOL_CALLS]get_weather[CALL_ID]Wx1234567[ARGS]{arguments}"
    plain = '[TOOL_CALLS]get_weather[ARGS]{"location": "Paris"}'
    for policy in ("reference", "guaranteed"):
        turn = codec.prepare([USER], tools=TOOLS, tool_choice=tool_choice, policy=policy)
        for reply in (written, plain):
            if policy == "reference":
                with pytest.raises(ReplyError):
                    turn.parse(reply)
                continue
            [call] = turn.parse(reply).tool_calls
            assert call.name == "get_weather"
            assert json.loads(call.arguments)["location"].startswith("Paris")
        grammar = turn.grammar
        assert grammar is not None
        prompt = "" if grammar.lazy else turn.generation_prompt
        if policy == "guaranteed":
            assert tiny_llama.verdict(grammar.gbnf, plain, prompt) == "accept"


def test_arguments_written_as_given_are_probed_as_json_text() -> None:
    """A template that joins the arguments to its text writes Python for an object: the
    written call is found with the arguments given as JSON text."""
    assert HERMES_TEXT != HERMES
    assert analysis_for(HERMES_TEXT).tools.mode == T_NONE
    derived = analysis_for(HERMES_TEXT, policy="guaranteed")
    assert derived.tools == analysis_for(HERMES, policy="guaranteed").tools
    turn = Codec(HERMES_TEXT).prepare([USER], tools=TOOLS, tool_call_id=0, policy="guaranteed")
    reply = '<tool_call>\n{"name": "get_weather", "arguments": {"location": "Paris"}}\n</tool_call>'
    [call] = turn.parse(reply).tool_calls
    assert (call.name, json.loads(call.arguments)) == ("get_weather", {"location": "Paris"})


def _unchanged(path: Path) -> None:
    """Where llama.cpp's format reads back the calls the template writes, guaranteed keeps its
    analysis as is; elsewhere only the calls may change."""
    tokens = {"bos_token": "<s>", "eos_token": "</s>"}
    source = path.read_text(encoding="utf-8")
    try:
        reference = analysis_for(source, tokens)
    except ReplyError:  # llama.cpp cannot analyse it: neither policy reads a reply
        with pytest.raises(ReplyError):
            analysis_for(source, tokens, "guaranteed")
        return
    guaranteed = analysis_for(source, tokens, "guaranteed")
    history_id = guaranteed.tools.history_id_field
    if guaranteed is not reference:  # only the calls may change, and only where needed
        template = LlamaCompatTemplate(source, special_tokens=tokens)
        forms = list(written_forms(template))
        # an id the template writes in history only is read too, even where the last turn
        # reads back with llama.cpp's syntax
        id_only = guaranteed.tools == replace(reference.tools, history_id_field=history_id)
        assert (history_id and id_only) or not any(
            reads_back(template, reference, w) for w in forms
        )
        assert replace(guaranteed, tools=reference.tools) == replace(
            reference,
            supports_tool_calls=guaranteed.supports_tool_calls,
            supports_parallel_tool_calls=guaranteed.supports_parallel_tool_calls,
            preserved_tokens=guaranteed.preserved_tokens,
        )


@pytest.mark.parametrize("name", SHARED_NAMES)
def test_shared_template_calls_read_back(name: str) -> None:
    _unchanged(TEMPLATES / name)
    _check_template(TEMPLATES / name)


@pytest.mark.parametrize("name", DEV_NAMES)
def test_dev_template_calls_read_back(name: str) -> None:
    _unchanged(ROOT / "dev" / "templates" / name)
    _check_template(ROOT / "dev" / "templates" / name)


def test_check_data_reads_under_guaranteed_unless_told(tmp_path: Path) -> None:
    """``chatcodec check-data`` reads turns as the server does (guaranteed); ``--policy
    reference`` reads them as llama.cpp does, and the Hermes-style calls are text there."""
    template = tmp_path / "hermes.jinja"
    template.write_text(HERMES, encoding="utf-8")
    data = tmp_path / "data.jsonl"
    record = {"messages": _conversation([WEATHER], "", True), "tools": TOOLS}
    data.write_text(json.dumps(record) + "\n", encoding="utf-8")
    command = [sys.executable, "-m", "chatcodec", "check-data", str(template), str(data)]
    runs = {
        policy: subprocess.run(
            [*command, "--json", *options],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=600,
            env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        )
        for policy, options in (("guaranteed", []), ("reference", ["--policy", "reference"]))
    }
    guaranteed = [json.loads(line) for line in runs["guaranteed"].stdout.splitlines()]
    reference = [json.loads(line) for line in runs["reference"].stdout.splitlines()]
    assert runs["guaranteed"].returncode == 0, runs["guaranteed"].stdout
    assert guaranteed[0]["ok"] and all(turn["ok"] for turn in guaranteed[0]["turns"])
    assert runs["reference"].returncode == 1
    [call_turn] = [turn for turn in reference[0]["turns"] if not turn["ok"]]
    assert "tool_calls_not_read" in call_turn["reasons"]


# A template of the tests' own that writes each call's id in its JSON only once the call is
# answered (as Apriel 1.5 and 1.6 do): never in the turn a model writes.
HISTORY_ID = """{{- bos_token }}
{%- if tools %}{{- '<|system|>\\nTools:' }}{%- for tool in tools %}{{- ' ' + tool.function.name }}
{%- endfor %}{{- '\\n<|end|>\\n' }}{%- endif %}
{%- for message in messages %}
{%- if message.role == 'assistant' %}
{{- '<|assistant|>\\n' + (message.content or '') }}
{%- if message.tool_calls %}
{{- '\\n<tool_calls>[' }}
{%- for call in message.tool_calls %}
{{- '{"name": "' + call.function.name + '", "arguments": ' + call.function.arguments | tojson }}
{%- if not messages[-1] is sameas message %}{{- ', "id": "' + call.id + '"' }}{%- endif %}
{{- '}' }}{%- if not loop.last %}{{- ', ' }}{%- endif %}
{%- endfor %}
{{- ']</tool_calls>' }}
{%- endif %}
{{- '\\n<|end|>\\n' }}
{%- else %}
{{- '<|' + message.role + '|>\\n' + message.content + '\\n<|end|>\\n' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|assistant|>\\n' }}{%- endif %}"""


def test_history_call_id_is_read() -> None:
    """The id a template writes in a past call's JSON is found by rendering the call answered:
    under guaranteed the call reads with it or without it (and with the newline the template
    writes after the section); under reference the call with an id is not read."""
    assert analysis_for(HISTORY_ID).tools.history_id_field == ""
    assert analysis_for(HISTORY_ID, policy="guaranteed").tools.history_id_field == "id"
    codec = Codec(HISTORY_ID)
    call = '{"name": "get_weather", "arguments": {"location": "Paris"}'
    with_id = f'<tool_calls>[{call}, "id": "Wx1"}}]</tool_calls>\n'
    without = f"<tool_calls>[{call}}}]</tool_calls>\n"
    turn = codec.prepare([USER], tools=TOOLS, tool_call_id=0, policy="guaranteed")
    for reply, written in ((with_id, True), (without, False)):
        [read] = turn.parse(reply).tool_calls
        assert (read.name, json.loads(read.arguments)) == ("get_weather", {"location": "Paris"})
        assert (read.id == "Wx1") == written  # the id written is the call's id
    reference = codec.prepare([USER], tools=TOOLS, tool_call_id=0)
    with pytest.raises(ReplyError):
        reference.parse(with_id)
    for calls in (("weather",), ("weather", "search")):
        assert round_trip(codec, calls) == "ok"


# Functionary v3.2's way (its family's markers): each message after >>>, a call's too.
FUNCTIONARY = """{{- bos_token + '<|start_header_id|>system<|end_header_id|>\\n\\nRespond as:\\n' }}
{{- '>>>${recipient}\\n${content}\\nAvailable: ' }}
{%- for tool in tools or [] %}{{- tool.function.name + ' ' }}{%- endfor %}{{- '<|eot_id|>' }}
{%- for message in messages %}
{{- '<|start_header_id|>' + message.role + '<|end_header_id|>\\n\\n' }}
{%- if message.role == 'assistant' %}
{%- if message.content %}{{- '>>>all\\n' + message.content }}{%- endif %}
{%- for call in message.tool_calls or [] %}
{{- '>>>' + call.function.name + '\\n' + call.function.arguments }}
{%- endfor %}
{%- else %}{{- message.content }}{%- endif %}
{{- '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n>>>' }}
{%- endif %}"""


def test_functionary_v32_calls_after_the_first_are_read_under_guaranteed() -> None:
    """The template writes every call after ``>>>``, the content's too; llama.cpp's format
    reads a call after another only bare, and a call after content not at all (the whole
    reads as content). Under guaranteed both read, whole and streamed."""
    codec = Codec(FUNCTIONARY, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>")
    assert handler_for(FUNCTIONARY) == "Functionary v3.2"
    first = 'get_weather\n{"location": "Paris"}'
    second = 'search_web\n{"query": "cafe"}'
    want = [("get_weather", {"location": "Paris"}), ("search_web", {"query": "cafe"})]
    replies = {f"{first}>>>{second}": "", f"all\nLet me look.>>>{first}>>>{second}": "Let me look."}
    for policy in ("reference", "guaranteed"):
        turn = codec.prepare([USER], tools=TOOLS, tool_call_id=0, policy=policy)
        assert turn.parse(f"{first}{second}").tool_calls  # llama.cpp's bare calls read
        for reply, content in replies.items():
            if policy == "reference":
                if content:
                    assert turn.parse(reply).content == reply.removeprefix("all\n")
                else:
                    with pytest.raises(ReplyError):
                        turn.parse(reply)
                continue
            message = turn.parse(reply)
            assert message.content == content and not message.dropped
            assert [(c.name, json.loads(c.arguments)) for c in message.tool_calls] == want
            stream = turn.stream()
            for piece in reply:
                stream.feed(piece)
            assert stream.finish().message == message
    for calls in (("weather",), ("weather", "search")):
        assert round_trip(codec, calls) == "ok"


# Solar Open's way with a call: <|tool_call:begin|>id<|tool_call:name|>name<|tool_call:args|>
# {...}<|tool_call:end|>. The tools are listed in the system turn, so llama.cpp's analysis finds
# no id position and takes the probe's id into the name's opening marker: no call reads.
LEAD_ID = """{{- bos_token }}
{%- if tools %}{{- '<|begin|>system<|content|>Tools: ' + tools | tojson + '<|end|>' }}{%- endif %}
{%- for message in messages %}
{%- if message.role == 'assistant' and message.tool_calls %}
{{- '<|begin|>assistant<|tool_calls|>' }}
{%- for call in message.tool_calls %}
{{- '<|tool_call:begin|>' + call.id + '<|tool_call:name|>' + call.function.name }}
{{- '<|tool_call:args|>' + call.function.arguments | tojson + '<|tool_call:end|>' }}
{%- endfor %}
{{- '<|calls|>' }}
{%- else %}
{{- '<|begin|>' + message.role + '<|content|>' + message.content + '<|end|>' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|begin|>assistant' }}{%- endif %}"""


@pytest.mark.parametrize("tool_choice", ["auto", "required"])
def test_a_call_id_before_the_name_is_read_under_guaranteed(
    tiny_llama: Any, tool_choice: str
) -> None:
    """Under guaranteed the id the template writes before the name is read as the call's id
    (any id, or none), the call streams, and the grammar writes one; under reference the
    probe's id stays in the name's marker and no call reads."""
    tokens = {"bos_token": "<s>", "eos_token": "</s>"}
    assert analysis_for(LEAD_ID, tokens).tools.name_prefix.startswith("call00001")
    derived = analysis_for(LEAD_ID, tokens, "guaranteed").tools
    assert (derived.id_before_name, derived.id_suffix) == (True, "<|tool_call:name|>")
    codec = Codec(LEAD_ID, bos_token="<s>", eos_token="</s>")
    call = '<|tool_call:name|>get_weather<|tool_call:args|>{"location": "Paris"}<|tool_call:end|>'
    replies = {
        f"<|tool_calls|><|tool_call:begin|>a1b2c3d4e5{call}<|calls|>": "a1b2c3d4e5",
        f"<|tool_calls|><|tool_call:begin|>{call}<|calls|>": None,
    }
    reference = codec.prepare([USER], tools=TOOLS, tool_choice=tool_choice)
    turn = codec.prepare([USER], tools=TOOLS, tool_choice=tool_choice, policy="guaranteed")
    for reply, call_id in replies.items():
        with pytest.raises(ReplyError):
            reference.parse(reply)
        message = turn.parse(reply)
        [read] = message.tool_calls
        assert (read.name, json.loads(read.arguments)) == ("get_weather", {"location": "Paris"})
        assert read.id == call_id or (call_id is None and read.id)
        stream = turn.stream()
        names = [d.tool_call.name for c in reply for d in stream.feed(c) if d.tool_call]
        # a call with the model's own id is announced once its name is complete; one
        # without waits for the end, as any format's whose calls may carry ids
        assert [n for n in names if n] == (["get_weather"] if call_id else [])
        assert stream.finish().message == message
    grammar = turn.grammar
    assert grammar is not None
    prompt = "" if grammar.lazy else turn.generation_prompt
    for reply in replies:
        assert tiny_llama.verdict(grammar.gbnf, reply, prompt) == "accept"
    for calls in (("weather",), ("weather", "search")):
        assert round_trip(codec, calls) == "ok"
        assert round_trip(codec, calls, "reference") == "fails"


def test_lfm2_json_calls_the_template_writes_are_read_under_guaranteed() -> None:
    """llama.cpp's LFM2 family reads Python-style calls only; this LFM2 template writes its
    calls as JSON in the family's markers. Under guaranteed both read, whole and streamed."""
    source = (ROOT / "dev" / "templates" / "ggml-org-llama.cpp-llama-cpp-lfm2.jinja").read_text()
    assert handler_for(source) == "LFM2"
    codec = Codec(source, bos_token="<|startoftext|>", eos_token="<|im_end|>")
    json_calls = (
        '<|tool_call_start|>[{"name": "get_weather", "arguments": {"location": "Paris"}, '
        '"id": "Wx1"}, {"name": "search_web", "arguments": {"query": "cafe"}}]<|tool_call_end|>'
    )
    python = '<|tool_call_start|>[get_weather(location="Paris"), search_web(query="cafe")]'
    python += "<|tool_call_end|>"
    want = [("get_weather", {"location": "Paris"}), ("search_web", {"query": "cafe"})]
    reference = codec.prepare([USER], tools=TOOLS, tool_call_id=0, parallel_tool_calls=True)
    turn = codec.prepare(
        [USER], tools=TOOLS, tool_call_id=0, parallel_tool_calls=True, policy="guaranteed"
    )
    with pytest.raises(ReplyError):
        reference.parse(json_calls)
    for reply in (json_calls, python):
        message = turn.parse(reply)
        assert [(c.name, json.loads(c.arguments)) for c in message.tool_calls] == want
        assert not message.dropped
        assert [c.name for c in reference.parse(python).tool_calls] == [n for n, _ in want]
        stream = turn.stream()
        for piece in reply:
            stream.feed(piece)
        assert stream.finish().message == message
    assert turn.parse(json_calls).tool_calls[0].id == "Wx1"
    for calls in (("weather",), ("weather", "search")):
        assert round_trip(codec, calls) == "ok"


def test_a_message_header_between_calls_is_read_under_guaranteed() -> None:
    """functionary v2.2 writes each call as a message of its own: the header the generation
    prompt ends with, ``<|from|>assistant\\n<|recipient|>``, comes again before each call's
    name (after the empty content message the template writes for ``content: ""``). Under
    guaranteed that header parts two calls; under reference no second call reads. A call
    right after the prompt's own header still reads as content under both policies: the
    section's opening marker is the prompt's last (docs/differences.md, G3)."""
    name = "huggingface-huggingface.js-e2e-meetkai-functionary-medium-v2.2.jinja"
    codec = Codec((ROOT / "dev" / "templates" / name).read_text(encoding="utf-8"))
    first = 'get_weather\n<|content|>{"location": "Paris"}'
    second = 'search_web\n<|content|>{"query": "cafe"}'
    header = "\n<|from|>assistant\n<|recipient|>"
    reply = f"all\n<|content|>{header}{first}{header}{second}"
    want = [("get_weather", {"location": "Paris"}), ("search_web", {"query": "cafe"})]
    turn = codec.prepare([USER], tools=TOOLS, tool_call_id=0, policy="guaranteed")
    message = turn.parse(reply)
    assert [(c.name, json.loads(c.arguments)) for c in message.tool_calls] == want
    assert turn.parse(first).tool_calls == ()
    stream = turn.stream()
    names = [d.tool_call.name for c in reply for d in stream.feed(c) if d.tool_call]
    assert [n for n in names if n] == ["get_weather", "search_web"]
    assert stream.finish().message == message
    for calls in (("weather",), ("weather", "search")):
        assert round_trip(codec, calls) == "ok"
    assert round_trip(codec, ("weather", "search"), "reference") == "fails"


# Llama 3.2 Vision's way: each message's content is looped over for images, a string's
# characters too. transformers renders that (a character has no "type"); llama.cpp's renderer
# refuses it, so its analysis sees no call.
PARTS = """{{- bos_token }}
{%- for message in messages %}{%- for part in message['content'] %}
{%- if part['type'] == 'image' %}{{- raise_exception('no images') }}{%- endif %}
{%- endfor %}{%- endfor %}
{%- if tools %}{{- '<|start_header_id|>system<|end_header_id|>\\n\\nTools: ' }}
{%- for tool in tools %}{{- tool.function.name + ' ' }}{%- endfor %}{{- '<|eot_id|>' }}{%- endif %}
{%- for message in messages %}
{{- '<|start_header_id|>' + message.role + '<|end_header_id|>\\n\\n' }}
{%- if message.tool_calls %}
{%- set call = message.tool_calls[0].function %}
{{- '{"name": "' + call.name + '", "parameters": ' + call.arguments | tojson + '}' }}
{%- else %}{{- message.content }}{%- endif %}
{{- '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}"""


def test_calls_only_transformers_renders_are_read_under_guaranteed() -> None:
    """Where llama.cpp's renderer refuses the probes, the calls are looked for in the
    template's renders as transformers gives them (the renders a model is trained on)."""
    tokens = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}
    assert analysis_for(PARTS, tokens).tools.mode == T_NONE
    derived = analysis_for(PARTS, tokens, "guaranteed").tools
    assert (derived.mode, derived.args_field) == (T_JSON, "parameters")
    codec = Codec(PARTS, **tokens)
    reply = '{"name": "get_weather", "parameters": {"location": "Paris"}}'
    turn = codec.prepare([USER], tools=TOOLS, tool_call_id=0, policy="guaranteed")
    [call] = turn.parse(reply).tool_calls
    assert (call.name, json.loads(call.arguments)) == ("get_weather", {"location": "Paris"})
    assert codec.prepare([USER], tools=TOOLS, tool_call_id=0).parse(reply).tool_calls == ()
    assert round_trip(codec, ("weather",)) == "ok"
    assert round_trip(codec, ("weather",), "reference") == "fails"
