"""Issue 38, G1: under the ``guaranteed`` policy a required call is a call.

llama.cpp's grammar for ``tool_choice: "required"`` (and for a named tool, which arrives as
required with the tools cut to the one named) lets free text come before the calls, so a model
may write prose until ``max_tokens`` and never call. Under ``guaranteed`` the grammar admits only
the thought (where the template has one) and then the calls: one when ``parallel_tool_calls`` is
false, one or more when it is true (docs/differences.md, G1).

The checks here: every shared template whose parse corpus carries calls, sampled by the tests'
tiny random-weight model (tests/_llama.py) under its guaranteed grammar, gives a reply whose
parse holds calls of the declared tools with valid arguments; llama.cpp's own grammar engine
accepts prose before the calls under ``reference`` and refuses it under ``guaranteed``; under
``reference`` the grammar is llama.cpp's (the byte-equality tests, tests/test_grammar_text.py).
"""

from __future__ import annotations

import json
from functools import cache, lru_cache
from typing import Any

import pytest

from chatcodec import Codec
from chatcodec.errors import ReplyError
from chatcodec.reply import AssistantMessage, Turn

from ._reply_oracle import PARSE_CASES, corpus_cases, per_case
from ._requests import QWEN3_CODER
from .conftest import template_source

jsonschema = pytest.importorskip("jsonschema")

SAMPLES = 5  # replies per template and request (seeds 0..4)
# 256 tokens of a real tokenizer, where each call marker is one token; the tiny model spells
# every byte as a token, markers included, and DeepSeek's DSML, Kimi K3's and Hunyuan's calls
# take over 256 bytes of markup alone: the budget is counted in bytes, twice as many
MAX_TOKENS = 512
INLINE = "inline Qwen3-Coder"
MESSAGES = [{"role": "user", "content": "Wake me at seven, and tell me the weather in Oslo."}]
# Every parameter is one the grammar bounds (an integer range or enum, a boolean) in every
# family that types its arguments, so a random model ends its call within a few tokens and the
# arguments validate. A string is left out: several families write a string argument as raw
# text up to its closer whatever its schema says (tests/test_grammar_engine.py,
# test_string_arguments_are_raw_text_in_qwen3_coder), so a string's enum would not hold there.
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city, some days ahead",
            "parameters": {
                "type": "object",
                "properties": {
                    "days": {"type": "integer", "enum": [1, 2, 3]},
                    "metric": {"type": "boolean"},
                },
                "required": ["days", "metric"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "set_alarm",
            "description": "Set an alarm",
            "parameters": {
                "type": "object",
                "properties": {
                    "hour": {"type": "integer", "minimum": 0, "maximum": 23},
                    "repeat": {"type": "boolean"},
                },
                "required": ["hour", "repeat"],
            },
        },
    },
]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
NAMED = {"type": "function", "function": {"name": "set_alarm"}}
REQUESTS: dict[str, dict[str, Any]] = {
    "required": {"tool_choice": "required", "parallel_tool_calls": True},
    "named": {"tool_choice": NAMED, "parallel_tool_calls": True},
    "single": {"tool_choice": "required", "parallel_tool_calls": False},
}


@lru_cache(maxsize=1)
def call_templates() -> tuple[tuple[str, str, str, str], ...]:
    """(template, bos, eos, chat_template_kwargs as JSON) of every shared template whose parse
    corpus cases carry calls (llama.cpp reads calls from its replies)."""
    found: dict[str, tuple[str, str, str, str]] = {}
    for case in corpus_cases():
        if case["llama_cpp"] is None or not case["outputs"][0].get("expected", {}).get(
            "tool_calls"
        ):
            continue
        kwargs = json.dumps(case["chat_template_kwargs"] or {}, sort_keys=True)
        found.setdefault(
            case["template"],
            (case["template"], case["bos_token"] or "", case["eos_token"] or "", kwargs),
        )
    return tuple(found[name] for name in sorted(found))


INLINE_LINE = (INLINE, "", "<|im_end|>", "{}")


def _templates() -> list[Any]:
    shared = per_case(PARSE_CASES.exists(), call_templates, lambda line: line[0][:-6])
    return [pytest.param(INLINE_LINE, id="inline-Qwen3-Coder"), *shared]


@cache
def _codec(template: str, bos: str, eos: str) -> Codec:
    source = QWEN3_CODER if template == INLINE else template_source(template)
    return Codec(source, bos_token=bos, eos_token=eos)


def prepare(line: tuple[str, str, str, str], request: str, policy: str, **options: Any) -> Turn:
    template, bos, eos, kwargs = line
    return _codec(template, bos, eos).prepare(
        MESSAGES,
        tools=TOOLS,
        tool_call_id=0,
        policy=policy,
        **{**REQUESTS[request], **json.loads(kwargs), **options},
    )


def check_calls(message: AssistantMessage, request: str) -> None:
    """At least one call (exactly one when parallel calls are off), each of a declared tool
    (the named one for the named form), its arguments valid against the tool's schema."""
    allowed = {"set_alarm"} if request == "named" else set(SCHEMAS)
    assert message.tool_calls, "no call where the request requires one"
    if not REQUESTS[request]["parallel_tool_calls"]:
        assert len(message.tool_calls) == 1
    for call in message.tool_calls:
        assert call.name in allowed
        jsonschema.validate(json.loads(call.arguments), SCHEMAS[call.name])


def _rules(gbnf: str) -> dict[str, str]:
    return dict(line.split(" ::= ", 1) for line in gbnf.splitlines() if line)


def test_the_guaranteed_grammar_drops_only_the_content_before_the_calls() -> None:
    """Qwen3-Coder's required call, without ../shared or an engine: the guaranteed grammar is
    llama.cpp's without the content automaton before the calls, rule for rule; auto is
    llama.cpp's under both policies."""
    strict_grammar = prepare(INLINE_LINE, "single", "guaranteed").grammar
    reference_grammar = prepare(INLINE_LINE, "single", "reference").grammar
    assert strict_grammar is not None and reference_grammar is not None
    strict, reference = _rules(strict_grammar.gbnf), _rules(reference_grammar.gbnf)
    assert reference.pop("root") == '"<|im_start|>assistant\\n" space until-1 space tool-call-root'
    assert strict.pop("root") == '"<|im_start|>assistant\\n" space tool-call-root'
    assert {k: v for k, v in reference.items() if not k.startswith("until-")} == strict
    auto = {"tool_choice": "auto"}
    assert (
        prepare(INLINE_LINE, "required", "guaranteed", **auto).grammar
        == prepare(INLINE_LINE, "required", "reference", **auto).grammar
    )


# ------------------------------------------------------------------ sampled replies


@pytest.mark.parametrize("request_name", list(REQUESTS))
@pytest.mark.parametrize("line", _templates())
def test_a_required_call_is_sampled_as_a_call(
    tiny_llama: Any, line: tuple[str, str, str, str], request_name: str
) -> None:
    """The tiny random model, sampled under the guaranteed grammar, gives calls of the declared
    tools with valid arguments, for every seed."""
    turn = prepare(line, request_name, "guaranteed")
    grammar = turn.grammar
    assert grammar is not None and not grammar.lazy  # a required call's grammar is whole
    stops = (*turn.stop, *grammar.additional_stops)
    for seed in range(SAMPLES):
        reply = tiny_llama.sample(
            grammar, turn.prompt, turn.generation_prompt, stops, seed, max_tokens=MAX_TOKENS
        )
        message = turn.parse(reply)
        check_calls(message, request_name)
        assert not message.content.strip(), reply


# ------------------------------------------------------------------ the grammar's difference

PROSE = "Sure, one moment. "
# where the format wraps its content in markers (or writes it as a message of its own), the
# prose as the template writes it
WRAPPED = {
    "CohereForAI-c4ai-command-r-plus-tool_use.jinja": f"<|CHATBOT_TOKEN|>{PROSE}<|END_OF_TURN_TOKEN|>",
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja": (
        f"<|START_RESPONSE|>{PROSE}<|END_RESPONSE|>"
    ),
    "meetkai-functionary-medium-v3.2.jinja": f"all\n{PROSE}",  # the content's recipient
    "StepFun3.5-Flash.jinja": f"</think>{PROSE}",  # its prompt opens a thought: closed first
    "openai-gpt-oss-120b.jinja": (
        f"<|channel|>commentary<|message|>{PROSE}<|end|><|start|>assistant"
    ),
}


@pytest.mark.parametrize("line", _templates())
def test_prose_before_the_calls_is_refused_only_under_guaranteed(
    tiny_llama: Any, line: tuple[str, str, str, str]
) -> None:
    """A reply the guaranteed grammar accepts is accepted by llama.cpp's grammar too. Written
    with prose at any place, wherever llama.cpp's grammar (reference) accepts it and its parse
    reads the prose as content, the guaranteed grammar refuses it. Only where
    llama.cpp's grammar for a required call admits no content (ALREADY_STRICT) is there no
    such place."""
    # no thought: the prose goes where the content goes, not inside a thought left open
    strict = prepare(line, "single", "guaranteed", enable_thinking=False)
    reference = prepare(line, "single", "reference", enable_thinking=False)
    assert strict.grammar is not None and reference.grammar is not None
    assert not reference.grammar.lazy
    stops = (*strict.stop, *strict.grammar.additional_stops)
    prompt = strict.generation_prompt
    reply = tiny_llama.sample(
        strict.grammar, strict.prompt, prompt, stops, 0, max_tokens=MAX_TOKENS
    )
    assert tiny_llama.verdict(strict.grammar.gbnf, reply, prompt) == "accept"
    assert tiny_llama.verdict(reference.grammar.gbnf, reply, prompt) == "accept"
    as_content = 0
    prose = WRAPPED.get(line[0], PROSE)
    for i in range(len(reply) + 1):
        text = reply[:i] + prose + reply[i:]
        if tiny_llama.verdict(reference.grammar.gbnf, text, prompt) != "accept":
            continue
        try:
            read = reference.parse(text)
        except ReplyError:  # llama.cpp's grammar takes it, its parse does not
            continue
        if PROSE.strip() in read.content:  # with the calls or not
            as_content += 1
            assert tiny_llama.verdict(strict.grammar.gbnf, text, prompt) == "reject", text
    assert bool(as_content) == (line[0] not in ALREADY_STRICT), reply


# llama.cpp's grammars for a required call that already admit only the thought and the calls
ALREADY_STRICT = {
    "Cohere2MoE.jinja",
    "google-gemma-4-31B-it.jinja",
    "google-gemma-4-31B-it-interleaved.jinja",
    "muse-glimmer.jinja",
}


def test_the_exports_of_a_strict_grammar_are_strict() -> None:
    """The exports for other engines (llguidance's Lark, the fields of llama.cpp's server,
    vLLM and SGLang) are made from the GBNF text: a strict grammar exports strict. Judged by
    llguidance: prose before the call passes llama.cpp's grammar and not the guaranteed one."""
    pytest.importorskip("llguidance")
    from .llguidance_judge import lark_verdicts

    strict = prepare(INLINE_LINE, "single", "guaranteed").grammar
    reference = prepare(INLINE_LINE, "single", "reference").grammar
    assert strict is not None and reference is not None
    call = (
        "<tool_call>\n<function=set_alarm>\n<parameter=hour>\n7\n</parameter>\n"
        "<parameter=repeat>\ntrue\n</parameter>\n</function>\n</tool_call>"
    )
    texts = [call, PROSE + call, call + "\n" + call]
    assert lark_verdicts(reference.to_lark(), texts) == ["accept", "accept", "reject"]
    assert lark_verdicts(strict.to_lark(), texts) == ["accept", "reject", "reject"]
    for fields in ("llama_server_fields", "vllm_fields", "sglang_fields"):
        assert getattr(strict, fields)() != getattr(reference, fields)()
        assert "until" not in json.dumps(getattr(strict, fields)())  # no free text rule left
