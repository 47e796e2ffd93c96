"""Tool-call arguments stream as the model writes them (issue 10; DESIGN.md invariant 7).

A call is announced (index, id, name, its arguments so far) once its name is complete and it
is kept (a tool the request offers, within the parallel limit, not in a thought); then its
arguments arrive in fragments whose concatenation is the final arguments string, never
retracted. The reference is llama.cpp's server, which diffs consecutive partial parses
(../shared/docs/llamacpp-reply-parsing.md §7): for every corpus reply, fed cut at llama.cpp's
partial parses and byte by byte, what the deltas add up to after each piece equals what a
client of llama.cpp's server has then. The hand-written tests below need no ../shared.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from chatcodec import Codec, StreamedCallError
from chatcodec.errors import ChatCodecError
from chatcodec.reply import Delta, Turn, fold
from chatcodec.reply.cursor import PREVIEW_WINDOW
from chatcodec.reply.mapper import TOOL_ID
from chatcodec.reply.peg import tags_in

from ._reply_invariants import check_reply
from ._reply_oracle import PARSE_CASES, corpus_cases, per_case, prepare_request
from ._stream_reference import extends, reference_steps

ROOT = Path(__file__).resolve().parent.parent
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "write_file",
            "description": "Write a file",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "content": {"type": "string"},
                    "mode": {"type": "integer"},
                },
                "required": ["path", "content"],
            },
        },
    }
]
MESSAGES = [{"role": "user", "content": "Save it"}]

# the example checkpoint's ChatML template: JSON calls in <tool_call>\n...\n</tool_call>
# (Hermes / Qwen style, read by the auto parser)
CHATML = (ROOT / "examples" / "chatml-tiny" / "chat_template.jinja").read_text("utf-8")
# the least a template needs to get llama.cpp's Qwen3-Coder handler (XML parameters)
QWEN3_CODER = (
    "{%- for m in messages -%}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' -}}"
    "{%- endfor -%}{%- if tools -%}{{- '<|im_start|>system\\nCall as <tool_call>\\n"
    "<function=NAME>\\n<parameter=KEY>\\nVALUE\\n</parameter>\\n</function>\\n</tool_call>"
    "<|im_end|>\\n' -}}{%- endif -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)
# ... and gpt-oss's handler (harmony channels)
GPT_OSS = (
    "{%- for m in messages -%}{{- '<|start|>' + m.role + '<|message|>' + m.content + '<|end|>' -}}"
    "{%- endfor -%}{%- if add_generation_prompt -%}{{- '<|start|>assistant' -}}{%- endif -%}"
    "{#- <|channel|> -#}"
)

JSON_CALL = (
    '<tool_call>\n{"name": "write_file", "arguments": {"path": "a.txt", '
    '"content": "line one\\nline two", "mode": 420}}\n</tool_call>'
)
XML_CALL = (
    "<tool_call>\n<function=write_file>\n<parameter=path>\na.txt\n</parameter>\n"
    "<parameter=content>\nline one\nline two\n</parameter>\n<parameter=mode>\n420\n"
    "</parameter>\n</function>\n</tool_call>"
)
OSS_CALL = (
    "<|channel|>analysis<|message|>Save the file.<|end|><|start|>assistant<|channel|>commentary"
    ' to=functions.write_file <|constrain|>json<|message|>{"path": "a.txt", '
    '"content": "line one\\nline two", "mode": 420}'
)
FAMILIES = [
    pytest.param(CHATML, JSON_CALL, "Hermes-style JSON", id="json"),
    pytest.param(QWEN3_CODER, XML_CALL, "Qwen3-Coder", id="xml"),
    pytest.param(GPT_OSS, OSS_CALL, "GPT-OSS", id="gpt-oss"),
]


def _turn(source: str, **options: Any) -> Turn:
    return Codec(source).prepare(MESSAGES, tools=TOOLS, **options)


def _byte_by_byte(turn: Turn, text: str) -> tuple[list[tuple[int, Delta]], Any]:
    """Every delta of ``text`` fed one character at a time, with the length fed when it came
    (``len(text) + 1`` for finish's), and the finished message."""
    stream = turn.stream()
    out = [(n + 1, d) for n, ch in enumerate(text) for d in stream.feed(ch)]
    end = stream.finish()
    return out + [(len(text) + 1, d) for d in end.deltas], end.message


@pytest.mark.parametrize(("source", "text", "handler"), FAMILIES)
def test_a_call_is_announced_at_its_name_and_its_arguments_stream(
    source: str, text: str, handler: str
) -> None:
    turn = _turn(source)
    assert turn.format.handler.startswith(handler) or handler == "Hermes-style JSON"
    deltas, message = _byte_by_byte(turn, text)
    assert message == turn.parse(text)
    (call,) = message.tool_calls
    assert call.name == "write_file"
    pieces = [(at, d.tool_call) for at, d in deltas if d.tool_call is not None]
    (at, first), rest = pieces[0], pieces[1:]
    # announced once, when the name is complete, before the arguments begin (JSON: after
    # the name's closing quote; Qwen3-Coder: after '<function=NAME>\n'; gpt-oss: when the
    # header ends at <|message|>)
    assert (first.index, first.id, first.name) == (0, call.id, "write_file")
    named = text.index("write_file") + len("write_file")
    assert named < at <= min(text.find(m) for m in ('{"path"', "<parameter=path>") if m in text)
    assert first.arguments == "{"
    # then only arguments, in many pieces, all but the last before the reply ends
    assert all((p.index, p.id, p.name) == (0, "", "") and p.arguments for _, p in rest)
    assert len(rest) > 20
    assert all(at <= len(text) for at, _ in pieces)
    assert "".join(p.arguments for _, p in pieces) == call.arguments
    assert fold([d for _, d in deltas]).tool_calls == message.tool_calls


def test_xml_parameters_stream_as_llama_cpp_maps_them() -> None:
    """Qwen3-Coder: the key when its tag completes, the value as it comes (a newline held
    back while it may begin the closing tag), the quote at the closing tag, the brace at the
    function's (../shared/docs/llamacpp-reply-parsing.md §7.4)."""
    turn = _turn(QWEN3_CODER)
    text = "<tool_call>\n<function=write_file>\n<parameter=path>\na\nb\n</parameter>\n"
    text += "<parameter=content>\n4\n</parameter>\n</function>\n</tool_call>"
    deltas, _ = _byte_by_byte(turn, text)
    got = [(text[:at], d.tool_call.arguments) for at, d in deltas if d.tool_call]
    assert [(fed[-12:], arguments) for fed, arguments in got] == [
        ("write_file>\n", "{"),
        ("meter=path>\n", '"path":"'),
        ("eter=path>\na", "a"),
        ("er=path>\na\nb", "\\nb"),  # the newline waited for the next character
        ("/parameter>\n", '"'),  # the tag and the newline after it
        ("er=content>\n", ',"content":"'),
        ("r=content>\n4", "4"),
        ("/parameter>\n", '"'),
        ("</function>\n", "}"),
    ]
    assert "".join(a for _, a in got) == '{"path":"a\\nb","content":"4"}'


@pytest.mark.parametrize(("source", "text", "handler"), FAMILIES)
def test_every_chunking_folds_to_the_parse(source: str, text: str, handler: str) -> None:
    """Byte by byte, every two-way split and a few three-way ones: each call announced once
    and only extended, the fold is the parse, what was sent is never contradicted."""
    turn = _turn(source)
    chunkings = [list(text), [text]]
    chunkings += [[text[:cut], text[cut:]] for cut in range(1, len(text))]
    chunkings += [[text[:a], text[a : a + 7], text[a + 7 :]] for a in range(0, len(text), 9)]
    check_reply(turn, text, chunkings)


def _sent_against_partial_parses(
    turn: Turn, text: str, sizes: list[int]
) -> list[tuple[int, str, str]]:
    """Stream ``text`` in chunks of ``sizes`` (cycled); after each chunk, the fed length, the
    arguments of the last call the deltas add up to, and those of the partial parse of the
    text so far (what llama.cpp's server has sent then). The deltas fold to the parse."""
    stream, deltas, at, k = turn.stream(), [], 0, 0
    seen: list[tuple[int, str, str]] = []
    while at < len(text):
        size = sizes[k % len(sizes)]
        deltas += stream.feed(text[at : at + size])
        at, k = at + size, k + 1
        sent = fold(deltas).tool_calls
        shown = turn.parse(text[:at], partial=True).tool_calls
        seen.append((at, sent[-1].arguments if sent else "", shown[-1].arguments if shown else ""))
    deltas += stream.finish().deltas
    assert fold(deltas).tool_calls == turn.parse(text).tool_calls
    return seen


def _xml_call(*values: tuple[str, str]) -> str:
    params = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in values)
    return f"<tool_call>\n<function=write_file>\n{params}</function>\n</tool_call>"


# raw text with what a string value may hold: newlines, quotes, backslashes, markup-like
# text, a delimiter's beginnings, non-ASCII (each JSON-escaped as it comes)
_BODY_CHARS = [
    "a",
    "b ",
    "\n",
    '"',
    "\\",
    "<",
    "</",
    "\n</param",
    "</parameter",
    "é",
    "€",
    "\t",
    "{}",
]


def _body(length: int, seed: int) -> str:
    import random

    rng = random.Random(seed)
    out: list[str] = []
    while sum(map(len, out)) < length:
        out.append(rng.choice(_BODY_CHARS))
    return "".join(out)


@pytest.mark.parametrize("sizes", [[1], [4], [3, 1, 5], [64, 7]])
def test_a_long_string_value_streams_as_written_past_the_window(sizes: list[int]) -> None:
    """Qwen3-Coder's raw string values: past PREVIEW_WINDOW characters of call text the call
    is parsed again only now and then, but the value in progress grows with every chunk as
    the partial parse shows it (less a delimiter's beginning it ends with)."""
    turn = _turn(QWEN3_CODER)
    body = _body(3 * PREVIEW_WINDOW, seed=len(sizes))
    text = _xml_call(("path", "a.txt"), ("content", body))
    assert json.loads(turn.parse(text).tool_calls[0].arguments)["content"] == body
    start = text.index(body)
    for at, sent, shown in _sent_against_partial_parses(turn, text, sizes):
        assert shown.startswith(sent), at  # never ahead of the partial parse, never other
        if start + PREVIEW_WINDOW < at < start + len(body):
            assert sent == shown, (at, text[at - 20 : at])


def test_a_second_long_string_value_streams_once_the_call_is_read_again() -> None:
    """After a long value closes, the call is parsed again once its text has grown by half
    since the last parse (a bounded cost per character): the next value is then shown and
    grows as written too."""
    turn = _turn(QWEN3_CODER)
    first, second = _body(3 * PREVIEW_WINDOW, seed=1), _body(3 * PREVIEW_WINDOW, seed=2)
    text = _xml_call(("path", first), ("content", second))
    start = text.index(second)
    late = start + 2 * len(second) // 3
    for at, sent, shown in _sent_against_partial_parses(turn, text, [3, 1, 5]):
        assert shown.startswith(sent), at
        if late < at < start + len(second):
            assert sent == shown, (at, text[at - 20 : at])


def test_many_short_values_after_a_long_one_cost_linear_parsing() -> None:
    """A long value earns the call a few early parses once it closes; thousands of short
    values after it do not (each would otherwise cost parses of the whole call): the call's
    text is parsed a bounded number of times its length in all."""
    tools = [
        {
            "type": "function",
            "function": {
                "name": "note",
                "parameters": {
                    "type": "object",
                    "properties": {"body": {"type": "string"}, "tag": {"type": "string"}},
                    "required": ["body"],
                },
            },
        }
    ]
    turn = Codec(QWEN3_CODER).prepare(MESSAGES, tools=tools)
    long = _body(4 * PREVIEW_WINDOW, seed=3)
    params = f"<parameter=body>\n{long}\n</parameter>\n"
    params += "<parameter=tag>\nx\n</parameter>\n" * 2000
    text = f"<tool_call>\n<function=note>\n{params}</function>\n</tool_call>"
    grammar = turn.format.calls.first
    parsed = [0]
    parse = grammar.parse

    def counted(buf: str, pos: int) -> Any:
        parsed[0] += len(buf) - pos
        return parse(buf, pos)

    grammar.parse = counted  # type: ignore[method-assign]
    stream = turn.stream()
    deltas = [d for i in range(0, len(text), 4) for d in stream.feed(text[i : i + 4])]
    deltas += stream.finish().deltas
    assert fold(deltas).tool_calls == turn.parse(text).tool_calls
    # the window's per-chunk parses (~PREVIEW_WINDOW**2 / 8) plus a few times the text
    assert parsed[0] <= PREVIEW_WINDOW**2 // 8 + 8 * len(text), (parsed[0], len(text))


@pytest.mark.parametrize("seed", range(4))
def test_random_long_values_stream_to_the_parse(seed: int) -> None:
    """Seeded random Qwen3-Coder calls whose two values (50 to 2,500 characters) are full of
    the closing tag's beginnings and look-alikes, some cut short, fed in random 1-9
    character chunks: the deltas fold to the parse, and a stream fails only where the
    parse loses a call it announced."""
    import random

    rng = random.Random(seed)
    turn = _turn(QWEN3_CODER)
    pieces = [*_BODY_CHARS, "</parameter>", "\n</parameter", "</function>", "<parameter=x>"]
    for _ in range(15):
        values = []
        for _ in range(2):
            size, parts = rng.choice([50, 1100, 2500]), []
            while sum(map(len, parts)) < size:
                parts.append(rng.choice(pieces))
            values.append("".join(parts))
        text = _xml_call(("path", values[0]), ("content", values[1]))
        if rng.random() < 0.3:
            text = text[: rng.randrange(len(text))]
        whole = turn.parse(text)
        stream, deltas, at = turn.stream(), [], 0
        try:
            while at < len(text):
                size = rng.randint(1, 9)
                deltas += stream.feed(text[at : at + size])
                at += size
            deltas += stream.finish().deltas
        except StreamedCallError:
            assert len(whole.tool_calls) < len(fold(deltas).tool_calls), text
            continue
        folded = fold(deltas)
        assert (folded.content, folded.tool_calls) == (whole.content, whole.tool_calls), text


def _lag_past_window(turn: Turn, text: str, arguments: str, sizes: list[int]) -> int:
    """Stream ``text`` in chunks of ``sizes`` (cycled) and return the most the arguments sent
    lagged behind the raw ``arguments`` written so far, past PREVIEW_WINDOW characters of
    them; the deltas must fold to the parse (checked here too)."""
    start = text.index(arguments)
    stream, sent, lag, at, k = turn.stream(), 0, 0, 0, 0
    deltas: list[Delta] = []
    while at < len(text):
        chunk = text[at : at + sizes[k % len(sizes)]]
        at, k = at + len(chunk), k + 1
        for delta in stream.feed(chunk):
            deltas.append(delta)
            if delta.tool_call is not None:
                sent += len(delta.tool_call.arguments)
        written = min(max(at - start, 0), len(arguments))
        if PREVIEW_WINDOW < written < len(arguments):
            lag = max(lag, written - sent)
    end = stream.finish()
    folded, whole = fold([*deltas, *end.deltas]), turn.parse(text)
    assert (folded.content, folded.reasoning_content) == (whole.content, whole.reasoning_content)
    assert [(c.name, c.arguments) for c in folded.tool_calls] == [
        (c.name, c.arguments) for c in whole.tool_calls
    ]
    assert end.message.tool_calls[0].arguments == arguments
    return lag


@pytest.mark.parametrize("ascii_only", [False, True])
def test_json_arguments_past_the_window_stream_as_written(ascii_only: bool) -> None:
    """Raw JSON arguments grow with every chunk past PREVIEW_WINDOW too (no re-parse: what
    comes before the object closes is theirs), held back only inside an escape and over
    trailing whitespace, as a partial parse shows them."""
    import json
    import random

    rng = random.Random(7)
    body = "".join(rng.choice('ab"\\{}[]\né/') for _ in range(6 * PREVIEW_WINDOW))
    arguments = json.dumps({"path": "a.txt", "content": body}, ensure_ascii=ascii_only)
    text = '<tool_call>\n{"name": "write_file", "arguments": ' + arguments + "}\n</tool_call>"
    turn = _turn(CHATML)
    for sizes in ([1], [4], [1, 7, 3, 5, 2]):
        assert _lag_past_window(turn, text, arguments, sizes) <= 6  # at most an escape (\uXXXX)


def _raw_json_cases() -> list[dict[str, Any]]:
    """One corpus case per template whose call's arguments are the JSON the model wrote
    (they appear as such in the reply)."""
    chosen: dict[str, dict[str, Any]] = {}
    for case in corpus_cases():
        output = case["outputs"][0]
        calls = output.get("expected", {}).get("tool_calls") or []
        if case["llama_cpp"] is None or len(calls) != 1 or case["template"] in chosen:
            continue
        arguments = calls[0]["arguments"]
        if (
            arguments.startswith("{")
            and len(arguments) > 2
            and output["text"].count(arguments) == 1
        ):
            chosen[case["template"]] = case
    return [chosen[name] for name in sorted(chosen)]


@pytest.mark.parametrize(
    "case", per_case(PARSE_CASES.exists(), _raw_json_cases, lambda c: c["template"][:-6])
)
def test_every_raw_json_family_streams_long_arguments_as_written(case: dict[str, Any]) -> None:
    """The corpus reply with its call's arguments made 6 windows long: every chunking folds
    to the parse, and past the window the arguments lag the text by at most an escape."""
    import json

    output = case["outputs"][0]
    old = output["expected"]["tool_calls"][0]["arguments"]
    value = json.loads(old)
    value["zz_long"] = 'x"y\\z/é ' * (6 * PREVIEW_WINDOW // 8) + "end"
    arguments = json.dumps(value, ensure_ascii=False)
    text = output["text"].replace(old, arguments)
    turn = prepare_request(case)
    calls = turn.parse(text).tool_calls
    assert [c.arguments for c in calls] == [arguments]  # the family reads them as written
    lag = _lag_past_window(turn, text, arguments, [3, 1, 5])
    own_id = output["expected"]["tool_calls"][0].get("id") or ""
    if _carries_ids(turn) and own_id and text.index(own_id) > text.index(arguments):
        # a call is shown once the model's own id has come: Mistral Nemo writes it after the
        # arguments, so they come whole (docs/differences.md)
        assert lag > len(arguments) - PREVIEW_WINDOW
    else:
        assert lag <= 6


def _raw_string_cases() -> list[tuple[dict[str, Any], str, str]]:
    """One corpus case per template whose call has a string argument the model writes raw
    (XML-style parameters: the value's text, unquoted, is in the reply once), with that
    argument's name and value."""
    chosen: dict[str, tuple[dict[str, Any], str, str]] = {}
    for case in corpus_cases():
        output = case["outputs"][0]
        calls = (output.get("expected") or {}).get("tool_calls") or []
        if case["llama_cpp"] is None or len(calls) != 1 or case["template"] in chosen:
            continue
        try:
            arguments = json.loads(calls[0]["arguments"])
        except ValueError:
            continue
        text = output["text"]
        for key, value in arguments.items() if isinstance(arguments, dict) else ():
            quoted = (json.dumps(value), json.dumps(value, ensure_ascii=False))
            if (
                isinstance(value, str)
                and len(value) >= 2
                and text.count(value) == 1
                and not any(q in text for q in quoted)
                and text[text.index(value) - 1] not in "'\""  # (a Python-style literal)
            ):
                chosen[case["template"]] = (case, key, value)
                break
    return [chosen[name] for name in sorted(chosen)]


@pytest.mark.parametrize(
    "chosen", per_case(PARSE_CASES.exists(), _raw_string_cases, lambda c: c[0]["template"][:-6])
)
def test_every_raw_string_family_streams_long_values_as_written(
    chosen: tuple[dict[str, Any], str, str],
) -> None:
    """The corpus reply with one raw string argument made 3 windows long: every chunk's
    deltas add up to no more than the partial parse shows, and past the window the value
    grows with every chunk exactly as the partial parse shows it (whatever the family's
    mapper: the generic one, MiniMax-M3's nested elements, Gemma 4's quoted strings;
    MiniCPM5's raw and CDATA values alike)."""
    case, key, old = chosen
    # (ending in spaces: what the value ends with is its own, never trimmed at its close)
    body = ('ab "c\\d\n\u00e9 ' * (3 * PREVIEW_WINDOW))[: 3 * PREVIEW_WINDOW] + " \t "
    text = case["outputs"][0]["text"].replace(old, body)
    turn = prepare_request(case)
    (call,) = turn.parse(text).tool_calls
    assert json.loads(call.arguments)[key] == body  # the family reads the value as written
    start = text.index(body)
    for at, sent, shown in _sent_against_partial_parses(turn, text, [3, 1, 5]):
        assert shown.startswith(sent), at
        if start + PREVIEW_WINDOW < at < start + len(body):
            assert sent == shown, (at, text[at - 20 : at])


@pytest.mark.skipif(not PARSE_CASES.exists(), reason="../shared is not present")
def test_a_cdata_value_streams_as_written_too() -> None:
    """MiniCPM5 writes a string value raw or in ``<![CDATA[...]]>`` (two endings): the
    stream extends the one the partial parse is in, up to its own ending."""
    found = [c for c in _raw_string_cases() if c[0]["template"].startswith("openbmb-MiniCPM5")]
    assert found, "the corpus has a MiniCPM5 call with a raw string value"
    case, key, old = found[0]
    body = ("a </param> ]] > ]]x " * (3 * PREVIEW_WINDOW))[: 3 * PREVIEW_WINDOW]
    text = case["outputs"][0]["text"].replace(old, f"<![CDATA[{body}]]>")
    turn = prepare_request(case)
    (call,) = turn.parse(text).tool_calls
    assert json.loads(call.arguments)[key] == body
    start = text.index(body)
    for at, sent, shown in _sent_against_partial_parses(turn, text, [3, 1, 5]):
        assert shown.startswith(sent), at
        if start + PREVIEW_WINDOW < at < start + len(body):
            assert sent == shown, (at, text[at - 20 : at])


def test_an_announced_call_that_does_not_parse_fails_the_stream() -> None:
    """A call is announced once its name is complete; if it then proves malformed, the
    deltas stand and the stream fails with StreamedCallError (llama.cpp's server: its diff
    throws and the stream ends with an error event). The whole reply parsed at once reads
    the call as invalid and drops it, as llama.cpp's parse does."""
    turn = _turn(QWEN3_CODER)
    text = "<tool_call>\n<function=write_file>\n<tool_call>\n"
    parsed = turn.parse(text)
    assert parsed.tool_calls == () and parsed.dropped[0].reason == "invalid_call"
    stream = turn.stream()
    sent = [d for ch in text for d in stream.feed(ch)]
    assert [d.tool_call.name for d in sent if d.tool_call] == ["write_file"]
    with pytest.raises(StreamedCallError):
        stream.finish()
    # fed whole, the call is never announced: the stream reads what the parse reads
    stream = turn.stream()
    assert [d for d in stream.feed(text) if d.tool_call] == []
    assert stream.finish().message == parsed


def test_a_call_to_a_tool_not_offered_is_never_announced() -> None:
    turn = _turn(QWEN3_CODER)
    text = "<tool_call>\n<function=delete_all>\n<parameter=path>\n/\n</parameter>\n"
    text += "<parameter=content>\nx\n</parameter>\n"
    deltas, message = _byte_by_byte(turn, text + "</function>\n</tool_call>")
    assert [d for _, d in deltas if d.tool_call] == []
    assert message.tool_calls == ()


def test_a_second_call_beyond_the_parallel_limit_is_never_announced() -> None:
    turn = _turn(QWEN3_CODER, parallel_tool_calls=False)
    one = "<tool_call>\n<function=write_file>\n<parameter=path>\na\n</parameter>\n"
    one += "<parameter=content>\nx\n</parameter>\n</function>\n</tool_call>"
    deltas, message = _byte_by_byte(turn, one + "\n" + one)
    assert {d.tool_call.index for _, d in deltas if d.tool_call} == {0}
    assert len(message.tool_calls) == 1


# ------------------------------------------------------------------ the corpus


def _accumulated(deltas: list[Delta]) -> tuple[Any, ...]:
    m = fold(deltas)
    return m.content, m.reasoning_content, tuple((c.name, c.arguments) for c in m.tool_calls)


def _streamed_cases() -> list[dict[str, Any]]:
    return [
        c
        for c in corpus_cases()
        if c["llama_cpp"] is not None and any(o["kind"] == "partial" for o in c["outputs"])
    ]


def _agrees(ours: tuple[Any, ...], reference: tuple[Any, ...], used: bool, ids: bool) -> bool:
    """What the stream has sent agrees with what llama.cpp's server has sent: the same; or,
    where llama.cpp's partial parse there failed and was skipped (its client's view is
    older than the text), more that extends it; or the same calls with text that llama.cpp
    shows and the stream holds back (markup llama.cpp takes back later, as Gemma 4's
    ``<|channel>thought`` before its thought opens); or, where the calls carry the model's
    own id (``ids``), the same less the call that waits for it: Mistral Nemo writes it after
    the arguments, llama.cpp announces the call with an id of its own and keeps it, the
    stream waits and keeps the model's (docs/differences.md)."""
    if ours == reference:
        return True
    if not used and extends(ours, reference):
        return True
    if ours[2] == reference[2]:
        return extends(reference, ours)
    return ids and ours[:2] == reference[:2] and reference[2][: len(ours[2])] == ours[2]


def _final_calls(case: dict[str, Any]) -> list[tuple[str, str]]:
    final = next(o for o in case["outputs"] if o["kind"] == "final")
    return [(c["name"], c["arguments"]) for c in (final["expected"] or {}).get("tool_calls", [])]


def _carries_ids(turn: Turn) -> bool:
    """Whether the turn's calls may carry the model's own id (the stream then shows a call
    once its id has come)."""
    calls = turn.format.calls
    return calls is not None and TOOL_ID in tags_in(calls.first)


@pytest.mark.parametrize(
    "case", per_case(PARSE_CASES.exists(), _streamed_cases, lambda c: str(c["id"]))
)
def test_streamed_calls_match_llama_cpp_server_after_every_partial_parse(
    case: dict[str, Any],
) -> None:
    try:
        turn = prepare_request(case)
    except ChatCodecError:
        pytest.skip("a request the template cannot render")
    text, steps, _ = reference_steps(case)
    ids = _carries_ids(turn)
    for mode in ("at llama.cpp's partial parses", "byte by byte"):
        stream = turn.stream()
        deltas: list[Delta] = []
        fed = 0
        for cut, reference, used in steps:
            pieces = [text[fed:cut]] if mode.startswith("at") else list(text[fed:cut])
            for piece in pieces:
                deltas += stream.feed(piece)
            fed = cut
            ours = _accumulated(deltas)
            agrees = _agrees(ours, reference, used, ids)
            assert agrees, (mode, cut, text[:cut], reference, ours)
        deltas += stream.feed(text[fed:])
        try:
            deltas += stream.finish().deltas
        except StreamedCallError:
            # llama.cpp's final parse loses a call its partial parses showed: its server's
            # last diff throws too ("now finding less tool calls")
            announced = _accumulated(deltas)[2]
            assert len(_final_calls(case)) < len(announced), (mode, text)
        except ChatCodecError:
            continue  # the reply fails as a whole (the parse corpus checks that error)
