"""Issue 9 (constraints) end to end: a real engine samples under ``turn.grammar`` and every reply
parses into what the request declared.

llama.cpp (llama-cpp-python) runs a tiny random-weight model (tests/_llama.py) and samples
replies under the request's grammar as llama-server does: for ``tool_choice="required"``, a
named function and a ``response_format`` JSON schema, every sample must parse (``turn.parse``)
into calls to the declared tools whose arguments validate against the tool's schema
(``jsonschema``), or into content that validates against the response format; under
``tool_choice="auto"`` (a lazy grammar, woken by a trigger word) into text and such calls. The
model is random; only the grammar makes its replies valid.

Where llama.cpp's own grammar lets a model write a reply that misses the request, the case is a
strict ``xfail`` in ``KNOWN_GAPS`` and the kind of gap is pinned below by a hand-written reply
judged by the grammar and parsed (docs/grammar.md, "What llama.cpp's grammars do not enforce").

``TEMPLATES`` lists one or more templates of each family, one line each. The inline Qwen3-Coder template keeps the test running without ../shared.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from chatcodec import Codec
from chatcodec.errors import ReplyError
from chatcodec.reply import AssistantMessage

from .conftest import template_source
from .test_grammar_request import QWEN3_CODER, QWEN35

jsonschema = pytest.importorskip("jsonschema")

SAMPLES = 5  # replies per template and request (seeds 0..4)
INLINE = "inline Qwen3-Coder"
# (template file in ../shared/chat_templates, bos token, eos token): one line per family
TEMPLATES: list[tuple[str, str, str]] = [
    (INLINE, "", "<|im_end|>"),
    ("Qwen3-Coder.jinja", "", "<|im_end|>"),
    ("Qwen3.5-4B.jinja", "", "<|im_end|>"),
    ("NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja", "<s>", "<|im_end|>"),
    ("StepFun3.5-Flash.jinja", "<｜begin▁of▁sentence｜>", "<|im_end|>"),
    ("deepseek-ai-DeepSeek-V3.2.jinja", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    ("openai-gpt-oss-120b.jinja", "<|startoftext|>", "<|return|>"),
    ("google-gemma-4-31B-it.jinja", "<bos>", "<eos>"),
    ("mistralai-Ministral-3-14B-Reasoning-2512.jinja", "<s>", "</s>"),
    ("LFM2-8B-A1B.jinja", "<|startoftext|>", "<|im_end|>"),
    ("LFM2.5-Instruct.jinja", "<|startoftext|>", "<|im_end|>"),
    ("MiniMax-M3.jinja", "]~!b[", "[e~["),
    ("Cohere2MoE.jinja", "<BOS_TOKEN>", "<|END_OF_TURN_TOKEN|>"),
    ("inclusionai-ling-3.0-flash.jinja", "<|startoftext|>", "<|endoftext|>"),
    ("Kimi-K2-Thinking.jinja", "[BOS]", "[EOS]"),
    ("Kimi-K3.jinja", "[BOS]", "[EOS]"),
    ("openbmb-MiniCPM5-1B.jinja", "<s>", "<|im_end|>"),
    ("muse-glimmer.jinja", "<|bos|>", "<|eot|>"),
    ("meetkai-functionary-medium-v3.2.jinja", "<|begin_of_text|>", "<|eot_id|>"),
    ("GigaChat3-10B-A1.8B.jinja", "<s>", "</s>"),
    # the auto parser
    ("NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", "<|begin_of_text|>", "<|im_end|>"),
    ("meta-llama-Llama-3.3-70B-Instruct.jinja", "<|begin_of_text|>", "<|eot_id|>"),
    ("GLM-4.6.jinja", "", "<|endoftext|>"),
]
# the thought's start and end tags llama.cpp records for the template (its setup, as in the
# parse corpus): beside a lazy grammar llama-server adds a reasoning budget, so a thought never
# reaches the grammar (tests/_llama.py)
THINK = ("<think>", ("</think>",))
QWEN_THINK = ("<think>", ("\n</think>", "</think>", "<tool_call>"))
THINKING: dict[str, tuple[str, tuple[str, ...]]] = {
    "Qwen3.5-4B.jinja": QWEN_THINK,
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja": QWEN_THINK,
    "StepFun3.5-Flash.jinja": QWEN_THINK,
    "deepseek-ai-DeepSeek-V3.2.jinja": ("<think>", ("</think>", "<｜DSML｜function_calls>")),
    "openai-gpt-oss-120b.jinja": ("<|channel|>analysis<|message|>", ("<|end|>",)),
    "google-gemma-4-31B-it.jinja": ("<|channel>thought", ("<channel|>",)),
    "mistralai-Ministral-3-14B-Reasoning-2512.jinja": ("[THINK]", ("[/THINK]",)),
    "LFM2-8B-A1B.jinja": THINK,
    "LFM2.5-Instruct.jinja": THINK,
    "MiniMax-M3.jinja": ("<mm:think>", ("</mm:think>",)),
    "Cohere2MoE.jinja": ("<|START_THINKING|>", ("<|END_THINKING|>",)),
    "inclusionai-ling-3.0-flash.jinja": ("<think>", ("</think>", "<tool_call>")),
    "Kimi-K2-Thinking.jinja": THINK,
    "Kimi-K3.jinja": ("<|open|>think<|sep|>", ("<|close|>think<|sep|>",)),
    "openbmb-MiniCPM5-1B.jinja": THINK,
    "GLM-4.6.jinja": THINK,
}
MESSAGES = [{"role": "user", "content": "Wake me at seven, and tell me the weather in Oslo."}]
# string parameters are left unconstrained: some families' grammars write a string argument
# as raw text, whatever its schema says (test_string_arguments_are_raw_text_in_qwen3_coder)
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "days": {"type": "integer", "minimum": 1, "maximum": 7},
                },
                "required": ["city"],
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
                    "days": {
                        "type": "array",
                        "items": {"type": "string", "enum": ["mon", "tue", "wed"]},
                        "maxItems": 3,
                    },
                    "label": {"type": "string"},
                },
                "required": ["hour", "repeat"],
            },
        },
    },
]
ANSWER = {
    "type": "object",
    "properties": {
        "answer": {"type": "string", "maxLength": 12},
        "confidence": {"type": "integer", "minimum": 0, "maximum": 100},
        "sources": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
        "kind": {"enum": ["fact", "guess"]},
    },
    "required": ["answer", "kind"],
}
REQUESTS: dict[str, dict[str, Any]] = {
    # a lazy grammar in most families: free text, then calls once a trigger is written
    "auto": {"tools": TOOLS},
    "required": {"tools": TOOLS, "tool_choice": "required"},
    "named": {
        "tools": TOOLS,
        "tool_choice": {"type": "function", "function": {"name": "set_alarm"}},
    },
    # without a thought: the grammar lets a thought stay open, and an answer written inside it
    # is reasoning (test_an_answer_inside_an_open_thought_is_reasoning_in_qwen3_5)
    "response_format": {
        "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": ANSWER}},
        "enable_thinking": False,
    },
}


def _codec(template: str, bos: str, eos: str) -> Codec:
    source = QWEN3_CODER if template == INLINE else template_source(template)
    return Codec(source, bos_token=bos, eos_token=eos)


def _check_calls(message: AssistantMessage, request: dict[str, Any]) -> None:
    """Calls to the declared tools only, arguments valid; at least one unless ``auto``."""
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    choice = request.get("tool_choice", "auto")
    allowed = {choice["function"]["name"]} if isinstance(choice, dict) else set(schemas)
    assert message.tool_calls or choice == "auto", "no call where the request requires one"
    for call in message.tool_calls:
        assert call.name in allowed
        jsonschema.validate(json.loads(call.arguments), schemas[call.name])


def _check_answer(message: AssistantMessage) -> None:
    assert not message.tool_calls
    jsonschema.validate(json.loads(message.content or ""), ANSWER)


# where llama.cpp's own grammar lets a sampled reply miss what the request declared: each kind
# pinned by a hand-written reply below and described in docs/grammar.md
UNTYPED = "the grammar checks neither the arguments' types nor the required ones"
UNREQUIRED = "the grammar lets a call leave out required arguments"
OPEN_THOUGHT = "a thought may stay open: what is written inside it is reasoning"
DROPPED = "the grammar lets the model write words llama.cpp's parse drops"
# the templates whose grammar lets a word through that the parse drops, and how chatcodec
# reports it: a gpt-oss content type other than json, a `<` after Ling 3's calls
WORDS_DROPPED: dict[str, set[str]] = {
    "openai-gpt-oss-120b.jinja": {"skipped_text"},
    "inclusionai-ling-3.0-flash.jinja": {"marker_prefix"},
}
NO_MARKER = "after text the grammar's calls lack `>>>`: a call written there is content"
SPLIT_MARKER = "the content may end in part of the call marker: the parse then fails"
LAZY = "a lazy grammar leaves the text before its trigger free: the format may not allow it"
KNOWN_GAPS = {
    ("StepFun3.5-Flash.jinja", "response_format"): OPEN_THOUGHT,
    ("google-gemma-4-31B-it.jinja", "auto"): UNTYPED,
    ("google-gemma-4-31B-it.jinja", "required"): UNTYPED,
    ("google-gemma-4-31B-it.jinja", "named"): UNTYPED,
    ("LFM2-8B-A1B.jinja", "auto"): UNTYPED,
    ("LFM2-8B-A1B.jinja", "required"): UNTYPED,
    ("LFM2-8B-A1B.jinja", "named"): UNTYPED,
    ("LFM2.5-Instruct.jinja", "auto"): UNTYPED,
    ("LFM2.5-Instruct.jinja", "required"): UNTYPED,
    ("LFM2.5-Instruct.jinja", "named"): UNTYPED,
    ("Cohere2MoE.jinja", "auto"): LAZY,  # text between the thought and the action
    ("Kimi-K3.jinja", "auto"): UNTYPED,
    ("Kimi-K3.jinja", "required"): OPEN_THOUGHT,  # and UNTYPED
    ("Kimi-K3.jinja", "named"): OPEN_THOUGHT,
    ("openbmb-MiniCPM5-1B.jinja", "auto"): UNREQUIRED,
    ("openbmb-MiniCPM5-1B.jinja", "required"): UNREQUIRED,
    ("openbmb-MiniCPM5-1B.jinja", "named"): UNREQUIRED,
    ("muse-glimmer.jinja", "required"): UNREQUIRED,  # and DROPPED (the recipient)
    ("muse-glimmer.jinja", "named"): UNREQUIRED,
    ("meetkai-functionary-medium-v3.2.jinja", "required"): NO_MARKER,
    ("meetkai-functionary-medium-v3.2.jinja", "named"): NO_MARKER,
    ("GigaChat3-10B-A1.8B.jinja", "required"): SPLIT_MARKER,
    ("GigaChat3-10B-A1.8B.jinja", "named"): SPLIT_MARKER,
}


def _cases() -> list[Any]:
    cases = []
    for template in TEMPLATES:
        for name in REQUESTS:
            gap = KNOWN_GAPS.get((template[0], name))
            marks = [pytest.mark.xfail(reason=gap, strict=True)] if gap else []
            cases.append(pytest.param(template, name, marks=marks, id=f"{template[0]}-{name}"))
    return cases


@pytest.mark.parametrize(("template", "request_name"), _cases())
def test_every_reply_sampled_under_the_grammar_is_valid(
    tiny_llama: Any, template: tuple[str, str, str], request_name: str
) -> None:
    request = REQUESTS[request_name]
    turn = _codec(*template).prepare(MESSAGES, tool_call_id=0, **request)
    grammar = turn.grammar
    if grammar is None:  # e.g. Kimi K2's or Ling 3's response_format: nothing constrains it
        pytest.skip("llama.cpp sets no grammar for this request")
    kinds = {t.type for t in grammar.triggers}
    if grammar.lazy and ("word" not in kinds or "token" in kinds):
        # token triggers need the checkpoint's vocabulary; the steering aims at trigger words
        pytest.skip(f"a lazy grammar with {sorted(kinds)} triggers is not sampled")
    stops = (*turn.stop, *grammar.additional_stops)
    thinking = THINKING.get(template[0])
    calls = 0
    for seed in range(SAMPLES):
        reply = tiny_llama.sample(
            grammar, turn.prompt, turn.generation_prompt, stops, seed, thinking=thinking
        )
        message = turn.parse(reply)
        # where the grammar lets the model write a word the parse discards (a gap of
        # llama.cpp's grammar, pinned below), the word is reported, and the reply still valid
        allowed = WORDS_DROPPED.get(template[0], set())
        assert all(d.reason in allowed for d in message.dropped), (reply, message.dropped)
        if "tools" in request:
            _check_calls(message, request)
            calls += len(message.tool_calls)
        else:
            _check_answer(message)
    assert calls or "tools" not in request  # the grammar's calls were sampled


def test_string_arguments_are_raw_text_in_qwen3_coder(tiny_llama: Any) -> None:
    """llama.cpp's Qwen3-Coder grammar writes a string parameter as raw text up to
    ``</parameter>``: an ``enum`` or a length is not enforced there (typed parameters are)."""
    tool = {
        "type": "function",
        "function": {
            "name": "convert",
            "parameters": {
                "type": "object",
                "properties": {
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                    "times": {"type": "integer", "minimum": 1, "maximum": 3},
                },
                "required": ["unit"],
            },
        },
    }
    turn = _codec(INLINE, "", "<|im_end|>").prepare(
        MESSAGES, tools=[tool], tool_choice="required", tool_call_id=0
    )
    assert turn.grammar is not None

    def reply(unit: str, times: str) -> str:
        times_part = f"<parameter=times>\n{times}\n</parameter>\n" if times else ""
        return (
            f"<tool_call>\n<function=convert>\n<parameter=unit>\n{unit}\n</parameter>\n"
            f"{times_part}</function>\n</tool_call>"
        )

    def verdict(text: str) -> str:
        return tiny_llama.verdict(turn.grammar.gbnf, text, turn.generation_prompt)

    assert verdict(reply("celsius", "2")) == "accept"
    assert verdict(reply("celsius", "2")[:-3]) == "incomplete"
    assert verdict(reply("kelvin", "")) == "accept"  # outside the enum, yet accepted
    arguments = json.loads(turn.parse(reply("kelvin", "")).tool_calls[0].arguments)
    assert arguments == {"unit": "kelvin"}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(arguments, tool["function"]["parameters"])
    assert verdict(reply("celsius", "4")) == "reject"  # an integer's range is enforced


def test_an_answer_inside_an_open_thought_is_reasoning_in_qwen3_5(tiny_llama: Any) -> None:
    """llama.cpp's Qwen3.5 grammar lets ``</think>`` go unwritten: a ``response_format``
    answer then sits inside the thought, and the reply (llama.cpp's parse as chatcodec's) has
    no content. The random model finds this whenever it thinks, so the end-to-end test asks
    for no thought."""
    turn = Codec(QWEN35, eos_token="<|im_end|>").prepare(MESSAGES, **REQUESTS["response_format"])
    assert turn.grammar is not None
    answer = '{"answer": "x", "kind": "fact"}'
    for reply in (f"<think>\nhm</think>{answer}", f"<think>\nhm{answer}"):
        assert tiny_llama.verdict(turn.grammar.gbnf, reply, turn.generation_prompt) == "accept"
    assert turn.parse(f"<think>\nhm</think>{answer}").content == answer
    open_thought = turn.parse(f"<think>\nhm{answer}")
    assert (open_thought.content, open_thought.reasoning_content) == ("", f"hm{answer}")


# ---------------------------------------------------------------------- the gaps, pinned
# Each reply below is judged by the request's grammar (llama.cpp's engine) and parsed;
# llama.cpp's own grammar and parse give the same (checked with the oracle of ../shared/tools).

ALARM = TOOLS[1]["function"]["parameters"]
CALL = '{"hour": 7, "repeat": true}'
KIMI_CALL = (
    '<|open|>tools<|sep|><|open|>call tool="set_alarm"<|sep|>'
    '<|open|>argument key="hour"<|sep|>{hour}<|close|>argument<|sep|>'
    "<|close|>call<|sep|><|close|>tools<|sep|>"
)


def _named(template: str) -> Any:
    """The turn of the named request (a whole grammar: the reply alone decides)."""
    line = next(t for t in TEMPLATES if t[0] == template)
    turn = _codec(*line).prepare(MESSAGES, tool_call_id=0, **REQUESTS["named"])
    assert turn.grammar is not None and not turn.grammar.lazy
    return turn


def _verdict(tiny_llama: Any, turn: Any, reply: str) -> str:
    return str(tiny_llama.verdict(turn.grammar.gbnf, reply, turn.generation_prompt))


def _calls(message: AssistantMessage) -> list[tuple[str, str]]:
    return [(call.name, call.arguments) for call in message.tool_calls]


@pytest.mark.parametrize(
    ("template", "reply", "arguments"),
    [
        (
            "LFM2-8B-A1B.jinja",
            '<|tool_call_start|>[set_alarm(hour="noon")]<|tool_call_end|>',
            '{"hour":"noon"}',
        ),
        (
            "google-gemma-4-31B-it.jinja",
            '<|tool_call>call:set_alarm{when:<|"|>noon<|"|>}<tool_call|>',
            '{"when":"noon"}',
        ),
        (
            "Kimi-K3.jinja",
            "<|close|>think<|sep|>" + KIMI_CALL.format(hour="noon"),
            '{"hour":noon}',  # a raw value: not even JSON
        ),
    ],
)
def test_arguments_are_untyped_in_lfm2_gemma4_and_kimi_k3(
    tiny_llama: Any, template: str, reply: str, arguments: str
) -> None:
    """LFM2's and LFM2.5's calls take any Python or JSON value for any declared name, Gemma 4's
    any dict, Kimi K3's raw text: neither types nor required arguments are enforced."""
    turn = _named(template)
    assert _verdict(tiny_llama, turn, reply) == "accept"
    message = turn.parse(reply)
    assert _calls(message) == [("set_alarm", arguments)]
    with pytest.raises((ValueError, jsonschema.ValidationError)):
        jsonschema.validate(json.loads(arguments), ALARM)


@pytest.mark.parametrize(
    ("template", "reply"),
    [
        (
            "openbmb-MiniCPM5-1B.jinja",
            '</think>\n<function name="set_alarm"><param name="hour">{hour}</param></function>',
        ),
        (
            "muse-glimmer.jinja",
            ' to=set_alarm<|message|><atem:function_calls><atem:invoke name="set_alarm">'
            '<atem:parameter name="hour">{hour}</atem:parameter>'
            "</atem:invoke></atem:function_calls>",
        ),
    ],
)
def test_required_arguments_may_be_left_out_in_minicpm5_and_muse_glimmer(
    tiny_llama: Any, template: str, reply: str
) -> None:
    """MiniCPM5's and Muse Glimmer's grammars type each argument but take any of them, any
    number of times: ``repeat`` (required) may go unwritten."""
    turn = _named(template)
    assert _verdict(tiny_llama, turn, reply.replace("{hour}", "24")) == "reject"  # typed
    assert _verdict(tiny_llama, turn, reply.replace("{hour}", "7")) == "accept"
    message = turn.parse(reply.replace("{hour}", "7"))
    assert _calls(message) == [("set_alarm", '{"hour":7}')]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"hour": 7}, ALARM)


def test_a_call_inside_an_open_thought_is_reasoning_in_kimi_k3(tiny_llama: Any) -> None:
    """Kimi K3's grammar lets the thought the generation prompt opened stay open: a call
    written inside it is reasoning, and a required call is missing."""
    turn = _named("Kimi-K3.jinja")
    inside = "hm" + KIMI_CALL.format(hour="7")
    assert _verdict(tiny_llama, turn, inside) == "accept"
    message = turn.parse(inside)
    assert (message.reasoning_content, message.tool_calls) == (inside, ())
    closed = turn.parse("hm<|close|>think<|sep|>" + KIMI_CALL.format(hour="7"))
    assert _calls(closed) == [("set_alarm", '{"hour":7}')]


@pytest.mark.parametrize(
    ("template", "reply", "word"),
    [
        (  # a content type other than json
            "openai-gpt-oss-120b.jinja",
            f" to=functions.set_alarm<|channel|>commentary <|constrain|>yaml<|message|>{CALL}",
            "yaml",
        ),
        (  # a recipient other than the tool
            "muse-glimmer.jinja",
            ' to=me<|message|><atem:function_calls><atem:invoke name="set_alarm">'
            '<atem:parameter name="hour">7</atem:parameter>'
            '<atem:parameter name="repeat">true</atem:parameter>'
            "</atem:invoke></atem:function_calls>",
            "me",
        ),
        (  # the start of a marker after the calls
            "inclusionai-ling-3.0-flash.jinja",
            "</think><tool_call>set_alarm<arg_key>hour</arg_key><arg_value>7</arg_value>"
            "<arg_key>repeat</arg_key><arg_value>true</arg_value></tool_call><",
            "<",
        ),
    ],
)
def test_words_the_parse_drops_in_gpt_oss_muse_glimmer_and_ling3(
    tiny_llama: Any, template: str, reply: str, word: str
) -> None:
    """The grammar lets the model write a word llama.cpp's parse reads and discards; the call
    itself is valid, and chatcodec reports the word in ``dropped``."""
    turn = _named(template)
    assert _verdict(tiny_llama, turn, reply) == "accept"
    message = turn.parse(reply)
    assert [(call.name, json.loads(call.arguments)) for call in message.tool_calls] == [
        ("set_alarm", {"hour": 7, "repeat": True})
    ]
    assert [dropped.text for dropped in message.dropped] == [word]


def test_calls_after_text_lack_their_marker_in_functionary_v3_2(tiny_llama: Any) -> None:
    """Functionary v3.2's grammar writes ``all\\n``, text, then the calls without the ``>>>``
    that opens them: the call is read as content, and the marker is refused."""
    turn = _named("meetkai-functionary-medium-v3.2.jinja")
    reply = f"all\nSure: set_alarm\n{CALL}"
    assert _verdict(tiny_llama, turn, reply) == "accept"
    message = turn.parse(reply)
    assert (message.content, message.tool_calls) == (f"Sure: set_alarm\n{CALL}", ())
    assert _verdict(tiny_llama, turn, f"all\nSure>>>set_alarm\n{CALL}") == "reject"


def test_content_may_end_in_part_of_the_call_marker_in_gigachat_v3(tiny_llama: Any) -> None:
    """GigaChat V3's grammar ends the content before ``<|message_sep|>\\n\\n``, then allows
    whitespace before the call marker: content ending in ``<|message_sep|>\\n`` is accepted,
    while the parse (llama.cpp's too) stops the content at the first whole marker and fails."""
    turn = _named("GigaChat3-10B-A1.8B.jinja")
    call = f'function call<|role_sep|>\n{{"name": "set_alarm", "arguments": {CALL}}}'
    reply = f"Sure<|message_sep|>\n\n<|message_sep|>\n\n{call}"
    assert _verdict(tiny_llama, turn, reply) == "accept"
    with pytest.raises(ReplyError):
        turn.parse(reply)
    assert _calls(turn.parse(f"Sure<|message_sep|>\n\n{call}")) == [("set_alarm", CALL)]


def test_text_before_a_lazy_grammar_s_trigger_is_free_in_cohere2_moe(tiny_llama: Any) -> None:
    """Under ``tool_choice="auto"`` the grammar wakes at ``<|START_ACTION|>``: the text before it
    is free, and Cohere2 MoE's format wants ``<|START_TEXT|>`` or the action right after the
    thought, so text there fails the parse (llama.cpp's too)."""
    line = next(t for t in TEMPLATES if t[0] == "Cohere2MoE.jinja")
    turn = _codec(*line).prepare(MESSAGES, tool_call_id=0, **REQUESTS["auto"])
    assert turn.grammar is not None and turn.grammar.lazy
    action = '<|START_ACTION|>[{,"tool_name":"get_weather","parameters":{"city":""}}]<|END_ACTION|>'
    assert tiny_llama.verdict(turn.grammar.gbnf, action) == "accept"  # from the trigger on
    assert _calls(turn.parse(f"hm<|END_THINKING|>{action}")) == [("get_weather", '{"city":""}')]
    with pytest.raises(ReplyError):
        turn.parse(f"hm<|END_THINKING|>Sure.{action}")
