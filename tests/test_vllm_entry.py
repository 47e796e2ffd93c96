"""What the vLLM plugin decides without vLLM (``chatcodec.integrations.vllm``): the policy a
request is read under, the special tokens of a tokenizer, and which of them a reply format
reads (then the plugin keeps them in vLLM's text: ``skip_special_tokens`` false).

The tokenizers are real: checkpoints written by tests/_tokenizer.py and loaded by
transformers, as vLLM loads a model's tokenizer. tests/test_vllm_plugin.py runs the same
through vLLM itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from chatcodec import ChatCodecError, Codec
from chatcodec.integrations.vllm import (
    POLICY_ENV,
    policy_of,
    reply_markers,
    special_markers,
    special_tokens_of,
)

from ._tokenizer import write_checkpoint
from .conftest import TEMPLATES, template_source

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
ASK = [{"role": "user", "content": "What's the weather in Paris?"}]

# (template, the checkpoint's named special tokens, the special tokens its tool-call format
# reads): Mistral's [TOOL_CALLS] (a control token, as every [WORD] of its vocabulary); Hermes 2
# Pro's <tool_call> and </tool_call>, special tokens of its tokenizer; Qwen 2.5's <tool_call>,
# an added token that is not special (nothing to keep)
SPECIAL_CALLS = {
    "mistral": (
        "mistralai-Mistral-Nemo-Instruct-2407.jinja",
        {"bos_token": "<s>", "eos_token": "</s>"},
        ("[TOOL_CALLS]",),
    ),
    "hermes": (
        "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja",
        {
            "bos_token": "<|begin_of_text|>",
            "eos_token": "<|im_end|>",
            "tool_call_token": "<tool_call>",
            "tool_call_end_token": "</tool_call>",
        },
        ("</tool_call>", "<tool_call>"),
    ),
    "qwen": (
        "Qwen-Qwen2.5-7B-Instruct.jinja",
        {"eos_token": "<|im_end|>"},
        (),
    ),
}


class Request:
    """What the plugin reads of vLLM's request for the policy: pydantic's extra fields."""

    def __init__(self, **extra: Any) -> None:
        self.model_extra = extra


def test_the_policy_is_guaranteed_unless_the_request_or_the_environment_says() -> None:
    assert policy_of(None, {}) == "guaranteed"
    assert policy_of(Request(), {POLICY_ENV: "reference"}) == "reference"
    assert policy_of(Request(policy="reference"), {}) == "reference"
    assert policy_of(Request(policy="guaranteed"), {POLICY_ENV: "reference"}) == "guaranteed"
    with pytest.raises(ChatCodecError, match=POLICY_ENV):
        policy_of(Request(), {POLICY_ENV: "strict"})
    with pytest.raises(ChatCodecError, match="request's policy"):
        policy_of(Request(policy="lenient"), {})


def test_special_tokens_are_those_a_detokenizer_skips() -> None:
    class Added:
        def __init__(self, content: str, special: bool) -> None:
            self.content, self.special = content, special

    class Stand:
        all_special_tokens = ["<s>", "</s>"]
        added_tokens_decoder = {7: Added("[TOOL_CALLS]", True), 8: Added("<think>", False)}

    assert special_tokens_of(Stand()) == {"<s>", "</s>", "[TOOL_CALLS]"}
    assert special_tokens_of(object()) == frozenset()


def _checkpoint(tmp_path: Path, name: str) -> tuple[Any, Codec]:
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("tokenizers")
    if not TEMPLATES.is_dir():
        pytest.skip("needs ../shared/chat_templates")
    template, special, _ = SPECIAL_CALLS[name]
    folder = write_checkpoint(tmp_path / name, template_source(template), special)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder))
    codec = Codec(template_source(template), special_tokens=special)
    return tokenizer, codec


@pytest.mark.parametrize("name", sorted(SPECIAL_CALLS))
def test_the_special_tokens_a_tool_call_format_reads(name: str, tmp_path: Path) -> None:
    """The markers of a format with tools offered that the tokenizer holds as special tokens:
    kept out of vLLM's skipping exactly where the tokenizer would drop them."""
    tokenizer, codec = _checkpoint(tmp_path, name)
    turn = codec.prepare(ASK, [WEATHER])
    special = special_tokens_of(tokenizer)
    found = special_markers(turn.format, special, turn.stop)
    assert found == SPECIAL_CALLS[name][2]
    for token in found:
        ids = tokenizer.encode(token, add_special_tokens=False)
        assert tokenizer.decode(ids, skip_special_tokens=True) == ""
    # the end of the turn is a special token too, but it ends the reply before any text
    assert turn.stop and set(turn.stop) <= special


def test_the_generation_prompt_is_not_a_marker_the_model_writes() -> None:
    if not TEMPLATES.is_dir():
        pytest.skip("needs ../shared/chat_templates")
    codec = Codec(template_source("Qwen3-Coder.jinja"), eos_token="<|im_end|>")
    turn = codec.prepare(ASK, [WEATHER])
    assert turn.generation_prompt == "<|im_start|>assistant\n"
    markers = reply_markers(turn.format)
    assert "<tool_call>" in markers and "<function=" in markers
    assert not any("<|im_start|>" in m for m in markers)
    assert special_markers(turn.format, {"<|im_start|>", "<|im_end|>"}, turn.stop) == ()


def test_thought_markers_count() -> None:
    if not TEMPLATES.is_dir():
        pytest.skip("needs ../shared/chat_templates")
    codec = Codec(template_source("mistralai-Ministral-3-14B-Reasoning-2512.jinja"))
    turn = codec.prepare(ASK)
    assert special_markers(turn.format, {"[THINK]", "[/THINK]", "[INST]"}) == (
        "[/THINK]",
        "[THINK]",
    )
