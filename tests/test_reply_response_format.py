"""A response format's reply is read as llama.cpp reads it, family by family.

With a ``response_format`` llama.cpp's Qwen3-Coder, MiniCPM5, Muse Glimmer, Gemma 4, MiniMax-M3
and DeepSeek V3.2/V4 parsers read one JSON value as the content (bare, fenced as
```` ```json ... ``` ````, or either, after the family's thought), the same value their
grammar forces; text that is no JSON value fails the parse. These run without ../shared:
``tests/data/reply_response_format.json`` holds what llama.cpp's oracle (the corpus' build,
commit 0c1e570, ../shared/tools/llamacpp-oracle) gave for the templates, requests and replies
below (``python dev/response_format_answers.py`` asks it again): the generation prompt, the
prompt (DeepSeek V4's template is given the schema) and the parse of each reply, whole and
partial. Every whole reply also streams to its parse in several chunkings.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from chatcodec import Codec, ReplyError
from chatcodec.reply import Turn

from ._reply_invariants import check_reply
from ._requests import CHATML_TURNS, CITY, HI
from .conftest import ROOT

DATA = ROOT / "tests" / "data" / "reply_response_format.json"
TOOLS = CITY
SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string"}, "n": {"type": "number"}},
    "required": ["answer"],
}
RESPONSE_FORMAT = {"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA}}

# each template's leading comment holds the markers that pick llama.cpp's handler; the
# generation prompts are the family's own (as its checkpoints write them)
TEMPLATES: dict[str, str] = {
    "qwen3-coder": "{#- <tool_call> <function= <parameter= -#}"
    + CHATML_TURNS
    + "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
    "qwen3.5": "{#- <tool_call> <function= <parameter= <think> -#}"
    + CHATML_TURNS
    + "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n"
    "{% if enable_thinking is false %}\n</think>\n\n{% endif %}{% endif %}",
    "minicpm5": '{#- Tool usage guidelines: <function name=" <param name=" -#}'
    + CHATML_TURNS
    + "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n"
    "{% if enable_thinking is false %}\n</think>\n\n{% endif %}{% endif %}",
    "muse-glimmer": "{#- <atem:function_calls> <|eom|> -#}"
    "{%- for m in messages %}<|start|>{{ m.role }}<|message|>{{ m.content }}<|eot|>{% endfor %}"
    "{% if add_generation_prompt %}<|start|>assistant{% endif %}",
    "gemma4": "{#- '<|tool_call>call:' -#}"
    "{%- for m in messages %}<|turn>{{ m.role }}\n{{ m.content }}<turn|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|turn>model\n"
    "{% if enable_thinking is false %}<|channel>thought\n<channel|>{% endif %}{% endif %}",
    "minimax-m3": "{#- ]<]minimax[>[ <tool_call> <invoke name= -#}"
    "{%- for m in messages %}]~b]{{ m.role }}\n{{ m.content }}[e~[\n{% endfor %}"
    "{% if add_generation_prompt %}]~b]ai\n{% endif %}",
    "deepseek-v3.2": "{#- dsml_token DSML function_calls -#}{{ bos_token }}"
    "{%- for m in messages %}<｜User｜>{{ m.content }}{% endfor %}"
    "{% if add_generation_prompt %}<｜Assistant｜>"
    "{% if enable_thinking %}<think>{% else %}<think></think>{% endif %}{% endif %}",
    # V4's template writes the response format into its system prompt
    "deepseek-v4": "{#- dsml_token DSML tool_calls -#}{{ bos_token }}"
    "{% if response_format is defined %}## Response Format:\n{{ response_format | tojson }}"
    "{% endif %}{%- for m in messages %}<｜User｜>{{ m.content }}{% endfor %}"
    "{% if add_generation_prompt %}<｜Assistant｜>"
    "{% if enable_thinking %}<think>{% else %}</think>{% endif %}{% endif %}",
}
# llama.cpp's handler for each (its oracle names Gemma 4's in no log line the test build keeps)
HANDLERS = {
    "qwen3-coder": "Qwen3-Coder",
    "qwen3.5": "Qwen3-Coder",
    "minicpm5": "MiniCPM5",
    "muse-glimmer": "Muse Glimmer",
    "gemma4": "Gemma4 (inferred from format)",
    "minimax-m3": "MiniMax-M3",
    "deepseek-v3.2": "DeepSeek V3.2/V4",
    "deepseek-v4": "DeepSeek V3.2/V4",
}
OPTIONS: dict[str, dict[str, Any]] = {
    "plain": {},
    "tools": {"tools": TOOLS, "parallel_tool_calls": True},
    "required": {"tools": TOOLS, "tool_choice": "required"},
    "think0": {"enable_thinking": False},
    "rfnone": {"reasoning_format": "none"},
}
A = '{"answer": "x", "n": 1.5}'
BODIES = (
    A,
    f" \n{A}\n ",
    f"{A} trailing",
    f"```json\n{A}\n```",
    f"```json {A} ``` after",
    "Hello",
    "42",
    '{"answer": "x',
    '```json\n{"answer": ["a", {"b": tr',
)
# what a reply may begin with: the family's thought, its answer's header
LEADS: dict[str, tuple[str, ...]] = {
    "qwen3-coder": ("", "<think>T.</think>\n"),
    "qwen3.5": ("", "T.\n</think>\n\n", "<think>T.</think>"),
    "minicpm5": ("", "T.\n</think>\n\n", "<think>T.</think>"),
    "muse-glimmer": (
        "",
        " to=user<|message|>",
        "<|message|>",
        " to=self<|message|>T.<|eom|><|start|>assistant to=user<|message|>",
    ),
    "gemma4": ("", "<|channel>thought\nT.<channel|>", "<|channel><|channel>thought T.<channel|>"),
    "minimax-m3": ("", "<mm:think>T.</mm:think>", "</mm:think>\n"),
    "deepseek-v3.2": ("", "T.</think>", "<think>T.</think>"),
    "deepseek-v4": ("", "T.</think>", "</think>"),
}


def replies(family: str) -> list[str]:
    """The replies asked of ``family``: every lead before every body."""
    return [lead + body for lead in LEADS[family] for body in BODIES]


def requests() -> list[tuple[str, str, str]]:
    """(id, family, option set) of every request."""
    return [(f"{f}__{o}", f, o) for f in TEMPLATES for o in OPTIONS]


def prepare(family: str, options: str) -> Turn:
    codec = Codec(TEMPLATES[family], bos_token="<s>", eos_token="</s>")
    return codec.prepare(HI, response_format=RESPONSE_FORMAT, **OPTIONS[options])


def _answers() -> dict[str, Any]:
    return json.loads(DATA.read_text(encoding="utf-8"))


def _parsed(turn: Turn, text: str, partial: bool) -> dict[str, Any]:
    """Our parse in the data's shape: the message's text fields and calls, or an error."""
    try:
        message = turn.parse(text, partial=partial)
    except ReplyError:
        return {"error": True}
    return {
        "content": message.content or "",
        "reasoning_content": message.reasoning_content or "",
        "tool_calls": [c.name for c in message.tool_calls],
    }


@pytest.mark.parametrize(("case", "family", "options"), requests())
def test_setup_is_llama_cpps(case: str, family: str, options: str) -> None:
    answer = _answers()[case]
    turn = prepare(family, options)
    assert turn.handler == HANDLERS[family]
    assert answer["handler"] in (HANDLERS[family], "")
    assert turn.generation_prompt == answer["generation_prompt"]
    assert turn.prompt == answer["prompt"]
    # the sampler setup (MiniMax-M3's grammar text is not written yet)
    assert turn.format.constraint.grammar
    assert turn.format.constraint.lazy == answer["grammar_lazy"]


@pytest.mark.parametrize(("case", "family", "options"), requests())
def test_parse_is_llama_cpps(case: str, family: str, options: str) -> None:
    answer = _answers()[case]
    turn = prepare(family, options)
    texts = replies(family)
    assert len(answer["outputs"]) == 2 * len(texts)
    for i, text in enumerate(texts):
        for j, partial in enumerate((False, True)):
            assert _parsed(turn, text, partial) == answer["outputs"][2 * i + j], (text, partial)


@pytest.mark.parametrize(("case", "family", "options"), requests())
def test_stream_equals_parse(case: str, family: str, options: str) -> None:
    turn = prepare(family, options)
    for text in replies(family):
        n = len(text)
        chunkings = [
            list(text),
            [text[i : i + 3] for i in range(0, n, 3)],
            [text[: n // 2], text[n // 2 :]],
            [text[:1], text[1:-1], text[-1:]],
        ]
        check_reply(turn, text, chunkings)


def test_llama_cpps_example_on_qwen3_coder() -> None:
    # measured with llama.cpp's oracle: no JSON fails, what follows the value is dropped, a
    # value cut short is the content so far
    turn = prepare("qwen3-coder", "plain")
    with pytest.raises(ReplyError):
        turn.parse("Hello")
    message = turn.parse('{"answer": "x"} trailing')
    assert message.content == '{"answer": "x"}'
    assert [d.reason for d in message.dropped] == ["trailing_text"]
    assert turn.parse('{"a', partial=True).content == '{"a'


def test_only_deepseek_v4_gives_its_template_the_schema() -> None:
    v4 = prepare("deepseek-v4", "plain")
    assert '## Response Format:\n{"type": "object", "properties": ' in v4.prompt
    plain = Codec(TEMPLATES["deepseek-v4"], bos_token="<s>").prepare(HI)
    assert "Response Format" not in plain.prompt
    assert v4.generation_prompt == plain.generation_prompt == "<｜Assistant｜><think>"
