"""chatcodec as vLLM's tool-call and reasoning parser, driven through vLLM itself.

Needs vLLM (``pip install -e '.[vllm,dev]'``; skipped without it). vLLM's ``ParserManager``
composes the parsers as its server does for ``--enable-auto-tool-choice --tool-call-parser
chatcodec --reasoning-parser chatcodec``; every finished output of the parse corpus goes
through vLLM's non-streaming path and, cut at random places (seeded per case), through its
streaming path: both give exactly chatcodec's own parse of the reply.
"""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm")

from vllm.tool_parsers import ToolParserManager  # noqa: E402

from chatcodec import ChatCodecError, Codec  # noqa: E402
from chatcodec.integrations import vllm_parsers  # noqa: E402
from chatcodec.integrations.vllm import (  # noqa: E402
    POLICY_ENV,
    SUPPORTED_VLLM,
    UnsupportedVLLMError,
    check_vllm_version,
    register,
)

from ._reply_oracle import (  # noqa: E402
    PARSE_CASES,
    cases_by_template,
    end_stream,
    per_case,
    prepare_request,
)
from ._requests import ANSWER, CHATML, QWEN3_CODER, QWEN35, WEATHER_TIME  # noqa: E402
from ._tokenizer import write_checkpoint  # noqa: E402
from ._vllm import (  # noqa: E402
    Tokenizer,
    every_final_output,
    finished,
    parser_class,
    random_cuts,
    streamed,
    vllm_request,
)
from .conftest import TEMPLATES, template_source  # noqa: E402

NAME = "chatcodec"


def _tokenizer(case: dict[str, Any]) -> Tokenizer:
    return Tokenizer(template_source(case["template"]), case["bos_token"], case["eos_token"])


Read = tuple[str, str, list[tuple[str, str]]]


def _own(case: dict[str, Any], text: str, pieces: list[str] | None) -> Read | None:
    """chatcodec's own reading of the reply ``text`` (finished, or arriving in ``pieces``),
    None when it refuses the reply; then what vLLM's chat endpoint does on top of any parser
    (docs/vllm.md, "What vLLM adds"): an empty output is an empty message (a stream never
    reaches the parser); a finished reply's blank content beside calls is dropped, and a blank
    reply under a required tool choice is an empty message; with
    ``parallel_tool_calls`` false only the first call is kept."""
    try:
        _, message = _end_of(prepare_request(case), pieces or [text])
    except ChatCodecError:
        return None
    content, reasoning = message.content, message.reasoning_content
    calls = [(c.name, c.arguments) for c in message.tool_calls]
    forced = bool(case.get("tools")) and case["tool_choice"] == "required"
    if pieces is not None and not text:
        return "", "", []
    if pieces is None and calls and not content.strip():
        content = ""
    if pieces is None and forced and not calls and not text.strip():
        content = ""
    if case.get("tools") and case["parallel_tool_calls"] is False:
        calls = calls[:1]
    return content, reasoning, calls


def _end_of(turn: Any, pieces: list[str]) -> Any:
    stream = turn.stream()
    for piece in pieces:
        stream.feed(piece)
    return end_stream(stream)


def _templates() -> list[str]:
    return sorted(cases_by_template())


def _through_vllm(case: dict[str, Any], text: str, pieces: list[str] | None) -> Read:
    """The reply as vLLM's chat endpoint gives it with the chatcodec parsers (the reasoning
    parser too unless the case keeps a thought in the content): finished, or streamed."""
    tokenizer = _tokenizer(case)
    thinks = case["reasoning_format"] != "none"
    cls = parser_class(NAME, NAME if thinks else None, tokenizer)
    request = vllm_request(case)
    if pieces is None:
        got = finished(cls, tokenizer, request, text)
    else:
        got, _ = streamed(cls, tokenizer, request, pieces)
    return got.content, got.reasoning, got.calls


@pytest.mark.parametrize("template", per_case(PARSE_CASES.exists(), _templates, str))
def test_corpus_replies_read_through_vllm_as_chatcodec_reads_them(
    template: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under the reference policy (llama.cpp's reading, which the corpus records)."""
    monkeypatch.setenv(POLICY_ENV, "reference")
    failures = []
    checked = 0
    for case, i, output in every_final_output(cases_by_template()[template]):
        text = output["text"]
        cuts = random_cuts(text, random.Random(f"{case['id']}/{i}"))
        for pieces in (None, cuts):
            expected = _own(case, text, pieces)
            if expected is None:
                with pytest.raises(ChatCodecError):
                    _through_vllm(case, text, pieces)
                continue
            got = _through_vllm(case, text, pieces)
            if got != expected:
                how = "finished" if pieces is None else "streamed"
                failures.append(f"{case['id']}[{i}] {how}: {got} != {expected}")
        checked += 1
    assert checked
    assert not failures, f"{len(failures)} of {checked} outputs differ:\n" + "\n".join(
        failures[:10]
    )


# ------------------------------------------------------------------ the request's constraint


def _request(**body: Any) -> Any:
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    return ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "Hi"}], **body}
    )


def _adjusted(template: str, request: Any) -> Any:
    """The request after vLLM's renderer lets the request's parser adjust it."""
    return _adjusted_with(Tokenizer(template), request)


def _adjusted_with(tokenizer: Any, request: Any) -> Any:
    """The request after vLLM's renderer lets the parser made for it adjust it."""
    cls = parser_class(NAME, NAME, tokenizer)
    kwargs = request.build_chat_params(None, "auto").chat_template_kwargs
    parser = cls(tokenizer, request.tools, model_config=None, chat_template_kwargs=kwargs)
    return parser.adjust_request(request)


@pytest.mark.parametrize(
    "options",
    [
        {"tool_choice": "required"},
        {"tool_choice": {"type": "function", "function": {"name": "get_time"}}},
        {"tool_choice": "auto", "parallel_tool_calls": False},
    ],
    ids=["required", "named", "parallel-off"],
)
def test_a_request_only_a_grammar_enforces_gets_chatcodecs_grammar(options: dict) -> None:
    request = _adjusted(QWEN3_CODER, _request(tools=WEATHER_TIME, **options))
    turn = Codec(QWEN3_CODER).prepare(
        [{"role": "user", "content": "Hi"}],
        WEATHER_TIME,
        tool_choice=options["tool_choice"],
        parallel_tool_calls=options.get("parallel_tool_calls"),
        policy="guaranteed",  # the plugin's default
    )
    assert turn.grammar is not None
    fields = turn.grammar.vllm_fields()["structured_outputs"]
    so = request.structured_outputs
    assert (so.grammar, so.structural_tag) == (fields.get("grammar"), fields.get("structural_tag"))
    # constrained from the first token: chatcodec's grammar covers a thought too
    assert request.resolve_reasoning_ended(None, []) is True


def test_a_response_format_gets_chatcodecs_grammar_thought_included() -> None:
    response_format = {"type": "json_schema", "json_schema": {"name": "a", "schema": ANSWER}}
    request = _adjusted(QWEN35, _request(response_format=response_format))
    turn = Codec(QWEN35).prepare(
        [{"role": "user", "content": "Hi"}], response_format=response_format, policy="guaranteed"
    )
    assert turn.grammar is not None
    fields = turn.grammar.vllm_fields()["structured_outputs"]
    so = request.structured_outputs
    assert (so.grammar, so.structural_tag) == (fields.get("grammar"), fields.get("structural_tag"))
    assert request.response_format is None


def test_a_grammar_vllm_cannot_take_is_a_validation_error_naming_the_field(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from vllm.exceptions import VLLMValidationError

    monkeypatch.setenv(POLICY_ENV, "reference")  # llama.cpp's lazy grammar

    # Functionary v3.2's lazy grammar wakes on a regex, which xgrammar has no form for
    template = template_source("meetkai-functionary-medium-v3.2.jinja")
    request = _request(tools=WEATHER_TIME, tool_choice="auto", parallel_tool_calls=False)
    with pytest.raises(VLLMValidationError, match="regex") as caught:
        _adjusted(template, request)
    assert caught.value.parameter == "parallel_tool_calls"


def test_auto_tool_choice_and_a_requests_own_structured_outputs_are_left_alone() -> None:
    auto = _adjusted(QWEN3_CODER, _request(tools=WEATHER_TIME, tool_choice="auto"))
    assert auto.structured_outputs is None
    own = _request(
        tools=WEATHER_TIME, tool_choice="required", structured_outputs={"regex": "[a-z]+"}
    )
    assert _adjusted(QWEN3_CODER, own).structured_outputs.regex == "[a-z]+"


def test_a_named_call_streams_in_the_models_own_format() -> None:
    tokenizer = Tokenizer(QWEN3_CODER)
    request = _request(
        tools=WEATHER_TIME, tool_choice={"type": "function", "function": {"name": "get_weather"}}
    )
    reply = (
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
        "</function>\n</tool_call>"
    )
    got, sent = streamed(parser_class(NAME, NAME, tokenizer), tokenizer, request, list(reply))
    assert got.calls == [("get_weather", '{"city":"Paris"}')]
    assert (got.content, got.reasoning) == ("", "")
    assert sent >= 2  # the name, then the arguments as they come


# ------------------------------------------------------------------ special tokens, the policy

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
PARIS = ("get_weather", '{"city": "Paris"}')
# (template, the checkpoint's named special tokens, a reply calling get_weather): Mistral's
# [TOOL_CALLS] is a control token of its tokenizer (tests/_tokenizer.py makes every [WORD] of
# a template one); Hermes 2 Pro's <tool_call> and </tool_call> are special tokens of its own
SPECIAL_CALLS = {
    "mistral": (
        "mistralai-Mistral-Nemo-Instruct-2407.jinja",
        {"bos_token": "<s>", "eos_token": "</s>"},
        '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "a1b2c3d4e"}]',
    ),
    "hermes": (
        "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja",
        {
            "bos_token": "<|begin_of_text|>",
            "eos_token": "<|im_end|>",
            "tool_call_token": "<tool_call>",
            "tool_call_end_token": "</tool_call>",
        },
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
    ),
    "qwen": (
        "Qwen-Qwen2.5-7B-Instruct.jinja",
        {"eos_token": "<|im_end|>"},
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
    ),
}


def _vllm_tokenizer(tmp_path: Path, name: str) -> Any:
    """The tokenizer vLLM's server loads for a checkpoint of the template (vLLM's own loader,
    a byte-level BPE with the template's markers as added tokens)."""
    from vllm.tokenizers.registry import get_tokenizer

    if not TEMPLATES.is_dir():
        pytest.skip("needs ../shared/chat_templates")
    template, special, _ = SPECIAL_CALLS[name]
    folder = write_checkpoint(tmp_path / name, template_source(template), special)
    (folder / "config.json").write_text('{"model_type": "llama"}', encoding="utf-8")
    return get_tokenizer(str(folder))


def _detokenized(tokenizer: Any, ids: list[int], request: Any) -> tuple[str, list[str]]:
    """The text vLLM hands the parsers for the model's tokens ``ids``, whole and token by
    token, under the request's ``skip_special_tokens`` (vLLM's default: skip them)."""
    skip = request.skip_special_tokens is not False
    pieces = [tokenizer.decode([i], skip_special_tokens=skip) for i in ids]
    return tokenizer.decode(ids, skip_special_tokens=skip), pieces


@pytest.mark.parametrize("name", ["mistral", "hermes"])
def test_calls_whose_markers_are_special_tokens_read_through_vllm(
    name: str, tmp_path: Path
) -> None:
    """The plugin's request adjustment keeps the special tokens the reply format reads in
    vLLM's text, so the call reads, finished and streamed; with vLLM's default the marker is
    gone before the parser sees the text and the call is content."""
    tokenizer = _vllm_tokenizer(tmp_path, name)
    reply = SPECIAL_CALLS[name][2]
    ids = tokenizer.encode(reply, add_special_tokens=False)
    cls = parser_class(NAME, NAME, tokenizer)
    default = _request(tools=[WEATHER])
    text, _ = _detokenized(tokenizer, ids, default)
    assert text != reply and finished(cls, tokenizer, default, text).calls == []
    request = _adjusted_with(tokenizer, _request(tools=[WEATHER]))
    assert request.skip_special_tokens is False
    text, pieces = _detokenized(tokenizer, ids, request)
    assert text == reply
    assert finished(cls, tokenizer, request, text).calls == [PARIS]
    got, _ = streamed(cls, tokenizer, request, pieces)
    assert got.calls == [PARIS] and got.content == ""


def test_markers_that_are_not_special_tokens_leave_vllms_default(tmp_path: Path) -> None:
    """Qwen 2.5's <tool_call> is an added token, not a special one: nothing to keep."""
    tokenizer = _vllm_tokenizer(tmp_path, "qwen")
    request = _adjusted_with(tokenizer, _request(tools=[WEATHER]))
    assert request.skip_special_tokens is None
    ids = tokenizer.encode(SPECIAL_CALLS["qwen"][2], add_special_tokens=False)
    text, _ = _detokenized(tokenizer, ids, request)
    assert finished(parser_class(NAME, NAME, tokenizer), tokenizer, request, text).calls == [PARIS]


def _policy(request: Any) -> str:
    """The policy the tool parser reads ``request``'s reply under."""
    parser = vllm_parsers.ChatcodecToolParser(Tokenizer(CHATML), request.tools)
    return parser.turn(request).format.policy


def test_the_plugin_reads_under_guaranteed_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(POLICY_ENV, raising=False)
    assert _policy(_request()) == "guaranteed"
    assert _policy(_request(policy="reference")) == "reference"
    monkeypatch.setenv(POLICY_ENV, "reference")
    assert _policy(_request()) == "reference"
    assert _policy(_request(policy="guaranteed")) == "guaranteed"
    monkeypatch.setenv(POLICY_ENV, "lenient")
    with pytest.raises(ChatCodecError, match=POLICY_ENV):
        _policy(_request())


# ------------------------------------------------------------------ registration and versions


def test_register_names_both_parsers_chatcodec() -> None:
    from vllm.reasoning import ReasoningParserManager

    register()
    assert ToolParserManager.get_tool_parser(NAME) is vllm_parsers.ChatcodecToolParser
    assert (
        ReasoningParserManager.get_reasoning_parser(NAME) is vllm_parsers.ChatcodecReasoningParser
    )


def test_the_installed_vllm_is_a_supported_one() -> None:
    import vllm

    check_vllm_version(vllm.__version__)


@pytest.mark.parametrize("version", ["0.33.0", "0.33.7", "0.33.1+cu130", "0.33.2.dev12+g0a1b"])
def test_versions_in_range_pass(version: str) -> None:
    check_vllm_version(version)


@pytest.mark.parametrize("version", ["0.32.9", "0.34.0", "1.0.0", "0.9.2", "dev", ""])
def test_versions_out_of_range_are_refused_by_name(version: str) -> None:
    (lo, hi) = SUPPORTED_VLLM
    with pytest.raises(UnsupportedVLLMError, match=rf">={lo[0]}\.{lo[1]},<{hi[0]}\.{hi[1]}"):
        check_vllm_version(version)


_STARTUP_UNDER_OLD_VLLM = """
import vllm
from chatcodec.integrations.vllm import register
register()
vllm.__version__ = "0.31.0"
from vllm.parser import ParserManager
try:
    ParserManager.get_parser(tool_parser_name="chatcodec", reasoning_parser_name="chatcodec",
                             enable_auto_tools=True)
except Exception as exc:
    while exc.__cause__ is not None:
        exc = exc.__cause__
    print(type(exc).__name__, exc)
"""


def test_an_unsupported_vllm_stops_at_start_up_saying_why() -> None:
    run = subprocess.run(
        [sys.executable, "-c", _STARTUP_UNDER_OLD_VLLM],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "UnsupportedVLLMError" in run.stdout
    assert "this is vllm 0.31.0" in run.stdout


def test_the_reasoning_parser_alone_says_it_needs_the_tool_parser() -> None:
    tokenizer = Tokenizer(CHATML)
    cls = parser_class(None, NAME, tokenizer)
    request = _request()
    with pytest.raises(ChatCodecError, match="--tool-call-parser chatcodec"):
        finished(cls, tokenizer, request, "Hello")


def test_import_chatcodec_loads_neither_vllm_nor_the_plugin() -> None:
    probe = (
        "import sys, chatcodec; "
        "print(sorted(m for m in sys.modules if m == 'vllm' or m.startswith('chatcodec.integ')))"
    )
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "[]"


_LOAD_AS_A_FILE = """
from vllm.reasoning import ReasoningParserManager
from vllm.tool_parsers import ToolParserManager
import chatcodec.integrations.vllm as entry
path = entry.__file__.replace("vllm.py", "vllm_parsers.py")
ToolParserManager.import_tool_parser(path)
ReasoningParserManager.import_reasoning_parser(path)
tool = ToolParserManager.get_tool_parser("chatcodec")
reasoning = ReasoningParserManager.get_reasoning_parser("chatcodec")
print(tool.__name__, reasoning.__name__, tool.__module__ == reasoning.__module__)
"""


def test_the_parsers_load_as_vllms_plugin_files() -> None:
    run = subprocess.run(
        [sys.executable, "-c", _LOAD_AS_A_FILE], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == ["ChatcodecToolParser", "ChatcodecReasoningParser", "True"]


def test_the_entry_point_vllm_loads_is_register() -> None:
    import importlib
    from pathlib import Path

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())
    target = project["project"]["entry-points"]["vllm.general_plugins"][NAME]
    module, _, attribute = target.partition(":")
    assert getattr(importlib.import_module(module), attribute) is register
    assert project["project"]["optional-dependencies"]["vllm"] == [
        f"vllm>={SUPPORTED_VLLM[0][0]}.{SUPPORTED_VLLM[0][1]},"
        f"<{SUPPORTED_VLLM[1][0]}.{SUPPORTED_VLLM[1][1]}"
    ]
