"""probe_capabilities over real templates; every expectation was checked by reading the template."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from chatcodec import ChatTemplate
from chatcodec.template.capabilities import Capabilities, probe_capabilities

from .conftest import template_source

# every field but the variables, all False (no content blocks): the templates checked on every
# field start here
NOTHING: dict[str, Any] = {
    f.name: frozenset() if f.name == "content_blocks" else False
    for f in dataclasses.fields(Capabilities)
    if f.name != "variables"
}
# Per template, the fields checked and the reason, read off the template source
EXPECTED: dict[str, dict[str, Any]] = {
    # tools in a system block, <tool_call> with tojson arguments, no ids, tool results as
    # <tool_response>; reasoning only after the last user query, so the last assistant turn
    # changes once a user follows (not prefix-stable); enable_thinking=false adds an empty think
    "Qwen-Qwen3-0.6B.jinja": dict(
        NOTHING,
        tools=True,
        tool_calls=True,
        parallel_calls=True,
        tool_role=True,
        system_role=True,
        thinking_toggle=True,
        reasoning_replay=True,
    ),
    # raises on a system message and on anything breaking user/model alternation (so tool
    # results fail); ignores tools and tool_calls; each turn is appended as is
    "google-gemma-2-2b-it.jinja": dict(NOTHING, single_turn_append=True),
    # tools in the first user message; "only supports single tool-calls at once"; tool
    # results as ipython turns; no ids; never reads reasoning or enable_thinking
    "meta-llama-Llama-3.1-8B-Instruct.jinja": dict(
        NOTHING,
        tools=True,
        tool_calls=True,
        tool_role=True,
        system_role=True,
        single_turn_append=True,
    ),
    # [TOOL_CALLS] with a 9-character "id" and [TOOL_RESULTS] with "call_id"; ends turns with
    # eos_token (probed with a stand-in)
    "mistralai-Mistral-Nemo-Instruct-2407.jinja": dict(
        tools=True,
        tool_calls=True,
        parallel_calls=True,
        tool_call_id=True,
        tool_role=True,
        thinking_toggle=False,
        documents=False,
    ),
    # the first system or developer message becomes the developer turn; only tool_calls[0]
    # renders; `thinking` is the analysis channel; history analysis is dropped
    "openai-gpt-oss-120b.jinja": dict(
        tools=True,
        tool_calls=True,
        parallel_calls=False,
        tool_call_id=False,
        system_role=True,
        developer_role=True,
        reasoning_replay=True,
        single_turn_append=False,
    ),
    # a document_turn macro renders every document's text
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja": dict(
        documents=True,
        tools=True,
        tool_calls=True,
        system_role=True,
    ),
    # documents go into a system block; assistant tool_calls are not rendered at all
    "ibm-granite-granite-3.3-2B-Instruct.jinja": dict(
        documents=True,
        tools=True,
        tool_calls=False,
        parallel_calls=False,
        tool_role=True,
    ),
    # assistant text is wrapped in {% generation %} ... {% endgeneration %}
    "poolside-Laguna-XS.2.jinja": dict(generation_tag=True, tools=True, thinking_toggle=True),
    # ">>>name\n" + arguments: concatenation needs the arguments as a JSON string
    "meetkai-functionary-medium-v3.2.jinja": dict(
        tools=True,
        tool_calls=True,
        string_arguments=True,
        parallel_calls=True,
    ),
    # eos_token closes every render without a generation prompt: not prefix-stable
    "microsoft-Phi-3.5-mini-instruct.jinja": dict(
        tools=False,
        tool_calls=False,
        system_role=True,
        single_turn_append=False,
        thinking_toggle=False,
    ),
    # tools come through its own xml_tools/python_tools variables, not `tools`; /think and
    # /no_think are driven by enable_thinking
    # content blocks {"type": "image" | "audio" | "video"} render as <|image|> ...; image_url
    # and the other OpenAI block types are skipped
    "google-gemma-4-31B-it.jinja": dict(content_blocks=frozenset({"image", "audio", "video"})),
    "HuggingFaceTB-SmolLM3-3B.jinja": dict(tools=False, thinking_toggle=True, system_role=True),
    # default system prompt, tool calls with tojson arguments, no reasoning handling
    "Qwen-Qwen2.5-7B-Instruct.jinja": dict(
        tools=True,
        tool_calls=True,
        parallel_calls=True,
        thinking_toggle=False,
        reasoning_replay=False,
        single_turn_append=True,
        typed_content=False,
    ),
}

# No template in the corpus *requires* typed content blocks (the ones that read blocks also
# take strings), so this one stands in: it renders only the text of content blocks
TYPED_ONLY = (
    "{% for m in messages %}<{{ m.role }}>"
    "{% for block in m.content if block is mapping and block.type == 'text' %}{{ block.text }}"
    "{% endfor %}</{{ m.role }}>{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)

_FIELDS = list(NOTHING)


@pytest.fixture(scope="module")
def probed() -> dict[str, Capabilities]:
    return {name: probe_capabilities(ChatTemplate(template_source(name))) for name in EXPECTED}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_capabilities_of_real_templates(name: str, probed: dict[str, Capabilities]) -> None:
    found = probed[name]
    wrong = {
        field: getattr(found, field)
        for field, expected in EXPECTED[name].items()
        if getattr(found, field) != expected
    }
    assert not wrong, f"{name}: probed {wrong}"


def test_every_field_is_checked_both_ways() -> None:
    seen: dict[str, set[bool]] = {field: set() for field in _FIELDS}
    for expected in EXPECTED.values():
        for field, value in expected.items():
            seen[field].add(bool(value))  # content_blocks: some shown, or none
    seen["typed_content"].add(True)  # test_typed_content_is_behavioural
    assert all(values == {True, False} for values in seen.values()), seen


def test_typed_content_is_behavioural() -> None:
    caps = probe_capabilities(ChatTemplate(TYPED_ONLY))
    assert caps.typed_content
    # once typed content is known, the other probes speak it: a system block renders
    assert caps.system_role
    assert not caps.tools


def test_variables_come_from_the_source(probed: dict[str, Capabilities]) -> None:
    qwen3 = probed["Qwen-Qwen3-0.6B.jinja"]
    assert {"messages", "tools", "add_generation_prompt", "enable_thinking"} <= qwen3.variables
    gemma = probed["google-gemma-2-2b-it.jinja"]
    assert "enable_thinking" not in gemma.variables
    assert "bos_token" in gemma.variables


def test_probing_is_cached_per_template_object() -> None:
    source = template_source("Qwen-Qwen3-0.6B.jinja")
    template = ChatTemplate(source)
    assert probe_capabilities(template) is probe_capabilities(template)
    other = ChatTemplate(source)
    assert probe_capabilities(other) == probe_capabilities(template)
    assert probe_capabilities(other) is not probe_capabilities(template)


def test_special_tokens_reach_the_probes() -> None:
    # unset *_token variables get stand-ins, so a template adding eos_token still renders
    appends_eos = ChatTemplate("{% for m in messages %}{{ m.content + eos_token }}{% endfor %}")
    assert probe_capabilities(appends_eos).system_role
    # given special tokens are what the template sees
    picky = ChatTemplate(
        "{% if eos_token == '<|end|>' %}{% for m in messages %}{{ m.content }}{% endfor %}"
        "{% endif %}"
    )
    assert not probe_capabilities(picky).system_role
    assert probe_capabilities(picky, {"eos_token": "<|end|>"}).system_role


def test_a_template_that_refuses_everything_has_no_capabilities() -> None:
    caps = probe_capabilities(ChatTemplate("{{ raise_exception('no') }}"))
    assert not any(getattr(caps, field) for field in _FIELDS)
    assert caps.variables == frozenset()
