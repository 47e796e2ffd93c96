"""The decode API as a user meets it: a stream ends only through ``finish()``, which hands
back the last deltas with the message; OpenAI's shapes (the role on the first delta, null
content beside calls); ``Codec.prepare``'s options (a named ``tool_choice``, reproducible
call ids, options out of range refused); the template's capability probed once.

Each behaviour runs on a small template written here (no ../shared needed), and on the real
templates of the corpus when ../shared is present.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from chatcodec import Codec, ReplyError, RequestError, TemplateError
from chatcodec.reply import AssistantMessage, Delta, ToolCall, Turn, fold, parse_reply
from chatcodec.reply.request import ReplyRequest
from chatcodec.reply.select import describe

from .conftest import ROOT, template_source

# A ChatML template whose calls are bare JSON objects with no closing marker (as Llama 3.x
# writes them): the reply format knows a call is whole only when the reply ends.
JSON_CALLS = """{%- for m in messages -%}
[{{ m.role }}]
{%- if m.tool_calls %}{% for c in m.tool_calls -%}
{"name": "{{ c.function.name }}", "parameters": {{ c.function.arguments | tojson }}}
{%- endfor %}{% else %}{{ m.content }}{% endif %}[end]
{% endfor -%}
{%- if tools %}[tools]{% for t in tools %}{{ t.function.name }} {% endfor %}[end]
{% endif -%}
{%- if add_generation_prompt %}[assistant]{% endif -%}"""

# A ChatML template whose calls are tagged (as Hermes and Qwen write them).
TAGGED_CALLS = """{%- for m in messages -%}
<|im_start|>{{ m.role }}
{% if m.content %}{{ m.content }}{% endif %}
{%- if m.tool_calls %}{% for c in m.tool_calls %}
<tool_call>
{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}
</tool_call>{% endfor %}{% endif %}<|im_end|>
{% endfor -%}
{%- if tools %}<|im_start|>system
Tools: {% for t in tools %}{{ t.function.name }} {% endfor %}<|im_end|>
{% endif -%}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif -%}"""


def _tool(name: str) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }


TOOLS = [_tool("get_weather"), _tool("get_time")]
HI = [{"role": "user", "content": "Weather in Paris?"}]
JSON_CALL = '{"name": "get_weather", "parameters": {"city": "Paris"}}'
TAGGED_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def _json_turn(**options: Any) -> Turn:
    return Codec(JSON_CALLS, eos_token="[end]").prepare(HI, tools=TOOLS, **options)


def _tagged_turn(**options: Any) -> Turn:
    return Codec(TAGGED_CALLS, eos_token="<|im_end|>").prepare(HI, tools=TOOLS, **options)


def _readme_loop(turn: Turn, chunks: list[str]) -> tuple[list[Delta], AssistantMessage]:
    """The decode loop of the README, as a user copies it."""
    stream = turn.stream()
    sent: list[Delta] = []
    for chunk in chunks:
        for delta in stream.feed(chunk):
            sent.append(delta)
    last, message = stream.finish()
    sent.extend(last)
    return sent, message


# ------------------------------------------------------------------ 1. nothing can be lost


def test_a_bare_json_call_streams_and_finish_ends_the_stream() -> None:
    turn = _json_turn()
    stream = turn.stream()
    fed = [d for ch in JSON_CALL for d in stream.feed(ch)]
    # announced at its name, its arguments then stream as they come (issue 10)
    assert [d.tool_call.name for d in fed if d.tool_call] == ["get_weather"] + [""] * 15
    end = stream.finish()
    assert end.message.tool_calls[0].arguments == '{"city": "Paris"}'
    assert fold(fed + end.deltas).tool_calls == end.message.tool_calls
    # the only way to end a stream returns both: there is no separate flush to forget
    assert not hasattr(stream, "flush")
    deltas, message = end  # a (deltas, message) pair
    assert (deltas, message) == (end.deltas, end.message)


def test_the_readme_loop_keeps_every_delta_in_any_chunking() -> None:
    turn = _tagged_turn()
    reply = "Let me check." + TAGGED_CALL
    expected = turn.parse(reply)
    for size in (1, 2, 5, len(reply)):
        chunks = [reply[i : i + size] for i in range(0, len(reply), size)]
        sent, message = _readme_loop(turn, chunks)
        assert message == expected
        assert fold(sent) == AssistantMessage(
            content=expected.content,
            reasoning_content=expected.reasoning_content,
            tool_calls=expected.tool_calls,
        )
        assert list(turn.stream_deltas(chunks)) == sent


def test_a_stream_ends_once() -> None:
    stream = _json_turn().stream()
    stream.feed("Hi")
    stream.finish()
    with pytest.raises(ReplyError, match="already been finished"):
        stream.finish()
    with pytest.raises(ReplyError, match="already been finished"):
        stream.feed("more")


def test_parse_is_feed_and_finish() -> None:
    turn = _json_turn()
    stream = turn.stream()
    stream.feed(JSON_CALL)
    message = stream.finish().message
    assert turn.parse(JSON_CALL) == message
    call_ids = turn.call_id
    assert parse_reply(turn.format, turn.generation_prompt, JSON_CALL, call_id=call_ids) == message


def test_a_failed_partial_stream_still_ends_with_the_role() -> None:
    turn = _tagged_turn(tool_choice="required")
    bad = "<tool_call>\n<nope"
    with pytest.raises(ReplyError):
        _end(turn, bad, partial=False)
    last, message = _end(turn, bad, partial=True)
    assert message.content == "" and message.tool_calls == ()
    assert [d.role for d in last] == ["assistant"]


def _end(turn: Turn, text: str, partial: bool) -> tuple[list[Delta], AssistantMessage]:
    stream = turn.stream()
    sent = stream.feed(text)
    last, message = stream.finish(partial=partial)
    return sent + last, message


@pytest.mark.parametrize(
    ("template", "reply"),
    [
        (
            "meta-llama-Llama-3.1-8B-Instruct.jinja",
            '{"name": "get_weather", "parameters": {"city": "Paris"}}',
        ),
        (
            "openai-gpt-oss-120b.jinja",
            "<|channel|>analysis<|message|>Check.<|end|><|start|>assistant to=functions.get_weather"
            '<|channel|>commentary json<|message|>{"city": "Paris"}',
        ),
    ],
)
def test_json_call_families_lose_no_call_through_the_readme_loop(template: str, reply: str) -> None:
    turn = Codec(template_source(template)).prepare(HI, tools=TOOLS)
    fed_only: list[Delta] = []
    stream = turn.stream()
    for ch in reply:
        fed_only.extend(stream.feed(ch))
    # a call these families may only be sure of when the reply ends is announced at its
    # name all the same (its arguments stream); the loop, finish's deltas included, keeps it
    assert [d.tool_call.name for d in fed_only if d.tool_call and d.tool_call.name] == [
        "get_weather"
    ]
    sent, message = _readme_loop(turn, list(reply))
    assert [c.name for c in message.tool_calls] == ["get_weather"]
    assert json.loads(message.tool_calls[0].arguments) == {"city": "Paris"}
    assert fold(sent).tool_calls == message.tool_calls


# ------------------------------------------------------------------ 2. OpenAI's shapes


def test_the_role_comes_once_with_the_first_delta() -> None:
    sent, _ = _readme_loop(_tagged_turn(), ["Let me", " check.", TAGGED_CALL])
    chunks = [d.to_openai() for d in sent]
    assert chunks[0] == {"role": "assistant", "content": "Let me"}
    assert [c.get("role") for c in chunks] == ["assistant"] + [None] * (len(chunks) - 1)
    # first thing a call: the role rides on the call's delta
    sent, _ = _readme_loop(_json_turn(), [JSON_CALL])
    assert len(sent) == 1
    chunk = sent[0].to_openai()
    assert chunk["role"] == "assistant" and chunk["tool_calls"][0]["function"]["name"]
    # nothing to show: one delta with the role only
    sent, message = _readme_loop(_tagged_turn(), [])
    assert [d.to_openai() for d in sent] == [{"role": "assistant"}]
    assert message == AssistantMessage()
    # fold reads text and calls; the role adds nothing to the message
    assert fold([Delta(role="assistant")]) == AssistantMessage()


def test_content_is_null_beside_tool_calls_in_openai_shape_only() -> None:
    call = ToolCall(name="get_weather", arguments='{"city": "Paris"}', id="call_0")
    only_calls = AssistantMessage(tool_calls=(call,))
    assert only_calls.to_openai() == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                "id": "call_0",
            }
        ],
    }
    assert AssistantMessage().to_openai() == {"role": "assistant", "content": ""}
    assert AssistantMessage(content="Hi", tool_calls=(call,)).to_openai()["content"] == "Hi"
    # the corpus comparison shape keeps "" (the parse oracle's)
    assert only_calls.to_dict()["content"] == ""
    assert _json_turn().parse(JSON_CALL).to_openai()["content"] is None


def test_real_template_first_delta_carries_the_role() -> None:
    turn = Codec(template_source("Qwen3-Coder.jinja")).prepare(HI, tools=TOOLS)
    call = (
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
        "</function>\n</tool_call>"
    )
    sent, message = _readme_loop(turn, [call[i : i + 4] for i in range(0, len(call), 4)])
    assert sent[0].role == "assistant" and sent[0].tool_call is not None
    assert [d.role for d in sent[1:]] == [""] * (len(sent) - 1)
    assert message.to_openai()["content"] is None


# ------------------------------------------------------------------ 3. a named tool_choice

NAMED = {"type": "function", "function": {"name": "get_weather"}}


def test_a_named_tool_choice_requires_that_one_tool() -> None:
    codec = Codec(TAGGED_CALLS, eos_token="<|im_end|>")
    named = codec.prepare(HI, tools=TOOLS, tool_choice=NAMED)
    # the prompt shows every tool of the request
    assert named.prompt == codec.prepare(HI, tools=TOOLS).prompt
    assert "get_weather get_time" in named.prompt
    # the reply is read as "required" with the tools cut down to the named one
    assert named.format.calls is not None
    assert named.format.calls.required
    assert named.format.calls.tool_names == {"get_weather"}
    same = describe(
        ReplyRequest(TAGGED_CALLS, named.generation_prompt, [TOOLS[0]], tool_choice="required")
    )
    assert same.calls is not None and same.calls.tool_names == {"get_weather"}
    assert [c.name for c in named.parse(TAGGED_CALL).tool_calls] == ["get_weather"]
    # a call to another offered tool: fine under "required", no valid call under the name
    other = TAGGED_CALL.replace("get_weather", "get_time")
    required = codec.prepare(HI, tools=TOOLS, tool_choice="required")
    assert [c.name for c in required.parse(other).tool_calls] == ["get_time"]
    with pytest.raises(ReplyError, match="no valid tool call although tool_choice is required"):
        named.parse(other)


@pytest.mark.parametrize(
    ("choice", "message"),
    [
        ({"type": "function", "function": {"name": "get_news"}}, "'get_news', which is not"),
        ({"type": "function", "function": {}}, "a named tool_choice is"),
        ({"type": "tool", "function": {"name": "get_weather"}}, "a named tool_choice is"),
        ({"function": {"name": "get_weather"}}, "a named tool_choice is"),
        ("sometimes", "tool_choice must be 'auto', 'required', 'none'"),
    ],
)
def test_a_tool_choice_that_cannot_be_read_is_a_request_error(choice: Any, message: str) -> None:
    codec = Codec(TAGGED_CALLS)
    with pytest.raises(RequestError, match=re.escape(message)):
        codec.prepare(HI, tools=TOOLS, tool_choice=choice)
    with pytest.raises(RequestError, match="not among the request's tools"):
        codec.prepare(HI, tools=None, tool_choice=NAMED)


def test_a_named_tool_choice_on_a_real_template() -> None:
    codec = Codec(template_source("Qwen3-Coder.jinja"))
    named = codec.prepare(HI, tools=TOOLS, tool_choice=NAMED)
    assert named.prompt == codec.prepare(HI, tools=TOOLS).prompt
    call = (
        "<tool_call>\n<function={}>\n<parameter=city>\nParis\n</parameter>\n"
        "</function>\n</tool_call>"
    )
    assert [c.name for c in named.parse(call.format("get_weather")).tool_calls] == ["get_weather"]
    with pytest.raises(ReplyError, match="no valid tool call although tool_choice is required"):
        named.parse(call.format("get_time"))


# ------------------------------------------------------------------ 4. reproducible call ids

RANDOM_ID = re.compile(r"call_[0-9a-f]{12}_0")


def _first_id(turn: Turn) -> str:
    return turn.parse(JSON_CALL).tool_calls[0].id


def test_call_ids_are_random_per_turn_unless_seeded_or_named() -> None:
    random_ids = {_first_id(_json_turn()) for _ in range(3)}
    assert len(random_ids) == 3 and all(RANDOM_ID.fullmatch(i) for i in random_ids)
    seeded = _first_id(_json_turn(tool_call_id=7))
    assert seeded == _first_id(_json_turn(tool_call_id=7))  # the same on every run
    assert RANDOM_ID.fullmatch(seeded) and seeded != _first_id(_json_turn(tool_call_id=8))
    named = _json_turn(tool_call_id=lambda i: f"fc-{i}")
    assert _first_id(named) == "fc-0"
    # the delta announces the id the message holds
    sent, message = _readme_loop(named, [JSON_CALL])
    assert [d.tool_call.id for d in sent if d.tool_call] == [message.tool_calls[0].id] == ["fc-0"]


@pytest.mark.parametrize("bad", ["call_", True, 1.5, ["a"]])
def test_a_tool_call_id_of_another_type_is_a_request_error(bad: Any) -> None:
    with pytest.raises(RequestError, match="tool_call_id must be"):
        _json_turn(tool_call_id=bad)


def test_a_factory_that_gives_no_id_is_a_request_error() -> None:
    turn = _json_turn(tool_call_id=lambda i: i)
    with pytest.raises(RequestError, match="tool_call_id gave 0"):
        turn.parse(JSON_CALL)


def test_ids_the_model_wrote_are_kept() -> None:
    # a template whose calls carry their id: the auto parser reads it from the reply
    with_ids = TAGGED_CALLS.replace('{"name": ', '{"id": "{{ c.id }}", "name": ')
    turn = Codec(with_ids, eos_token="<|im_end|>").prepare(
        HI, tools=TOOLS, tool_call_id=lambda i: f"mine-{i}"
    )
    reply = TAGGED_CALL.replace('{"name": ', '{"id": "abc123", "name": ')
    assert [c.id for c in turn.parse(reply).tool_calls] == ["abc123"]
    sent, _ = _readme_loop(turn, list(reply))
    # the id comes with the call's first delta only (later ones carry argument text)
    ids = [d.tool_call.id for d in sent if d.tool_call]
    assert ids[0] == "abc123" and set(ids[1:]) == {""}


def test_ids_a_real_model_wrote_are_kept() -> None:
    # Kimi K2 writes its own ids (functions.<name>:<n>)
    turn = Codec(template_source("Kimi-K2-Instruct.jinja")).prepare(
        HI, tools=TOOLS, tool_call_id=lambda i: f"mine-{i}"
    )
    reply = (
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
        '<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|>'
        "<|tool_calls_section_end|>"
    )
    assert [c.id for c in turn.parse(reply).tool_calls] == ["functions.get_weather:0"]


# ------------------------------------------------------------------ 5. options out of range


@pytest.mark.parametrize("fmt", ["none", "auto", "deepseek", "deepseek-legacy"])
def test_llama_cpp_reasoning_formats_are_accepted(fmt: str) -> None:
    assert _tagged_turn(reasoning_format=fmt).parse("Hi").content == "Hi"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"reasoning_format": "xyz"}, "reasoning_format must be one of 'none', 'auto'"),
        ({"reasoning_format": "DeepSeek"}, "not 'DeepSeek'"),
        ({"tool_choice": "any"}, "tool_choice must be"),
        ({"response_format": {"type": "xml"}}, 'response_format type must be "text"'),
    ],
)
def test_request_options_out_of_range_are_request_errors(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(RequestError, match=re.escape(message)) as caught:
        _tagged_turn(**options)
    assert not isinstance(caught.value, TemplateError)
    assert isinstance(caught.value, ValueError)  # RequestError is also a ValueError


# ------------------------------------------------------------------ 6. the probe runs once


def test_the_parallel_calls_probe_runs_once_per_template(monkeypatch: pytest.MonkeyPatch) -> None:
    from chatcodec.template import capabilities, tool_call_support

    probed: list[str] = []
    measure = capabilities._measure_tool_call_support

    def counting(p: Any) -> Any:
        probed.append(p.template.name)
        return measure(p)

    monkeypatch.setattr(capabilities, "_measure_tool_call_support", counting)
    sources = {"default": TAGGED_CALLS, "tool_use": TAGGED_CALLS.replace("Tools:", "Use:")}
    codec = Codec(sources, eos_token="<|im_end|>")
    turns = [codec.prepare(HI, tools=TOOLS, tool_call_id=1)]
    turns += [codec.prepare(HI, tool_call_id=1)]
    # each template probed once (the auto parser's analysis of a source probes its own copy)
    first = list(probed)
    assert first.count("tool_use") == 1 and first.count("default") == 1
    turns += [codec.prepare(HI, tools=TOOLS, tool_call_id=1) for _ in range(2)]
    turns += [codec.prepare(HI, tool_call_id=1) for _ in range(2)]
    codec.prepare(HI, tools=TOOLS, parallel_tool_calls=False)  # given: not probed
    assert probed == first  # nothing probed again
    # the cached capability reads a reply as a fresh probe does (two calls kept or not)
    two = TAGGED_CALL + "\n" + TAGGED_CALL.replace("get_weather", "get_time")
    fresh = Codec(sources, eos_token="<|im_end|>").prepare(HI, tools=TOOLS, tool_call_id=1)
    tool_turns = [turns[0], turns[2], turns[3]]
    assert [turn.parse(two) for turn in tool_turns] == [fresh.parse(two)] * 3
    parallel = tool_call_support(codec.template_for(TOOLS)).parallel
    assert len(fresh.parse(two).tool_calls) == (2 if parallel else 1)


# ------------------------------------------------------------------ the CLI's --stream


def test_cli_parse_stream_prints_the_deltas_finish_returns(tmp_path: Path) -> None:
    template = tmp_path / "json_calls.jinja"
    template.write_text(JSON_CALLS, encoding="utf-8")
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(TOOLS), encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "chatcodec", "parse", str(template), "--tools", str(tools)]
        + ["--stream", "--chunk", "4"],
        input=JSON_CALL,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    *deltas, final = [json.loads(line) for line in result.stdout.splitlines()]
    assert deltas[0]["role"] == "assistant"
    assert deltas[0]["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": "{"}
    # then the arguments, in the 4-character chunks they came in (as text, held back while
    # it is trailing whitespace)
    pieces = [d["tool_calls"][0]["function"]["arguments"] for d in deltas]
    assert "".join(pieces) == '{"city": "Paris"}' and len(pieces) > 3
    assert final["content"] is None
    assert final["tool_calls"][0]["function"] == {
        "name": "get_weather",
        "arguments": '{"city": "Paris"}',
    }
