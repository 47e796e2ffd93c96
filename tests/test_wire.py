"""OpenAI request messages rendered end to end through real templates."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from chatcodec import ChatTemplate, RequestError, load
from chatcodec.template.capabilities import Capabilities, probe_capabilities
from chatcodec.template.wire import TemplateInput, to_template_messages, tool_preamble

from .conftest import ROOT, template_source

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "City name"}},
            "required": ["city"],
        },
    },
}

# A tool loop as an OpenAI client sends it: arguments as JSON text, nulls for absent fields
TOOL_LOOP: list[dict[str, Any]] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?", "name": None},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "18C and sunny"},
]


def _template(name: str, **special_tokens: str) -> tuple[ChatTemplate, Capabilities]:
    template = ChatTemplate(template_source(name), special_tokens=special_tokens)
    return template, probe_capabilities(template)


def test_qwen3_gets_argument_objects_and_renders_tools_itself() -> None:
    template, caps = _template("Qwen-Qwen3-0.6B.jinja")
    converted = to_template_messages(TOOL_LOOP, caps, tools=[WEATHER])
    assert converted.tools == [WEATHER] and not converted.preamble
    call = converted.messages[2]["tool_calls"][0]
    assert call["function"]["arguments"] == {"city": "Paris"}
    assert converted.messages[2]["content"] == ""
    assert "name" not in converted.messages[1]
    messages, tools = converted
    text = template.render(messages, tools=tools, add_generation_prompt=True)
    assert "# Tools" in text and json.dumps(WEATHER) in text
    assert (
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in text
    )
    assert "<tool_response>\n18C and sunny\n</tool_response>" in text
    assert "Be brief." in text


def test_unparseable_arguments_pass_through_as_text() -> None:
    template, caps = _template("Qwen-Qwen3-0.6B.jinja")
    loop = copy.deepcopy(TOOL_LOOP)
    loop[2]["tool_calls"][0]["function"]["arguments"] = '{"city": "Par'
    loop[2]["tool_calls"].append(
        {"id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": "7"}}
    )
    messages, tools = to_template_messages(loop, caps, tools=[WEATHER])
    calls = messages[2]["tool_calls"]
    assert [c["function"]["arguments"] for c in calls] == ['{"city": "Par', "7"]
    text = template.render(messages, tools=tools)
    assert '"arguments": {"city": "Par}' in text
    assert '"arguments": 7}' in text


def test_gemma2_gets_the_preamble_in_the_first_user_turn() -> None:
    template, caps = _template("google-gemma-2-2b-it.jinja")
    assert not caps.tools and not caps.system_role and not caps.tool_role
    converted = to_template_messages(TOOL_LOOP, caps, tools=[WEATHER])
    assert converted.preamble and converted.tools is None
    assert [m["role"] for m in converted.messages] == ["user", "assistant", "user"]
    first = converted.messages[0]["content"]
    assert first == f"Be brief.\n\n{tool_preamble([WEATHER])}\n\nWeather in Paris?"
    text = template.render(converted.messages, tools=converted.tools, add_generation_prompt=True)
    assert text.startswith("<start_of_turn>user\nBe brief.\n\nYou can call the following tools.")
    assert json.dumps(WEATHER) in text
    # the call and its result survive as the preamble's own syntax, alternating turns
    assert (
        '<start_of_turn>model\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}'
        "\n</tool_call><end_of_turn>\n"
        "<start_of_turn>user\n<tool_response>\n18C and sunny\n</tool_response><end_of_turn>\n"
        "<start_of_turn>model\n"
    ) in text


def test_preamble_joins_an_existing_system_turn_or_leads_a_new_one() -> None:
    template, caps = _template("microsoft-Phi-3.5-mini-instruct.jinja")
    assert caps.system_role and not caps.tools
    with_system = to_template_messages(TOOL_LOOP[:2], caps, tools=[WEATHER])
    assert with_system.messages[0] == {
        "role": "system",
        "content": f"Be brief.\n\n{tool_preamble([WEATHER])}",
    }
    without = to_template_messages(TOOL_LOOP[1:2], caps, tools=[WEATHER])
    assert without.messages[0] == {"role": "system", "content": tool_preamble([WEATHER])}
    text = template.render(without.messages, add_generation_prompt=True)
    assert text.startswith("<|system|>\nYou can call the following tools.")
    assert text.endswith("<|user|>\nWeather in Paris?<|end|>\n<|assistant|>\n")


def test_preamble_text_is_fixed() -> None:
    assert tool_preamble([WEATHER]) == (
        "You can call the following tools. Each one is described by a JSON schema:\n<tools>\n"
        + json.dumps(WEATHER)
        + "\n</tools>\n\nTo call a tool, reply with one JSON object per call, each inside "
        "<tool_call></tool_call> tags:\n<tool_call>\n"
        '{"name": "<tool name>", "arguments": {"<argument name>": <value>}}\n</tool_call>\n'
        "Each result comes back inside <tool_response></tool_response> tags."
    )


def test_developer_becomes_system_only_where_the_template_lacks_it() -> None:
    request = [{"role": "developer", "content": "Answer in French."}, TOOL_LOOP[1]]
    qwen, qwen_caps = _template("Qwen-Qwen3-0.6B.jinja")
    messages, _ = to_template_messages(request, qwen_caps)
    assert messages[0] == {"role": "system", "content": "Answer in French."}
    assert qwen.render(messages).startswith("<|im_start|>system\nAnswer in French.<|im_end|>")
    oss, oss_caps = _template("openai-gpt-oss-120b.jinja")
    assert oss_caps.developer_role
    messages, _ = to_template_messages(request, oss_caps)
    assert messages[0]["role"] == "developer"
    assert "<|start|>developer<|message|># Instructions\n\nAnswer in French." in oss.render(
        messages
    )


def test_text_blocks_are_joined_for_string_templates() -> None:
    template, caps = _template("Qwen-Qwen3-0.6B.jinja")
    request = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Weather in "},
                {"type": "text", "text": "Paris?", "cache_control": None},
            ],
        }
    ]
    messages, _ = to_template_messages(request, caps)
    assert messages == [{"role": "user", "content": "Weather in Paris?"}]
    assert "<|im_start|>user\nWeather in Paris?<|im_end|>" in template.render(messages)


IMAGE = {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}
LOOK = [{"role": "user", "content": [{"type": "text", "text": "What is this?"}, IMAGE]}]


def test_blocks_the_template_shows_are_kept_as_blocks() -> None:
    template, caps = _template("mistralai-Ministral-3-14B-Reasoning-2512.jinja")
    assert "image_url" in caps.content_blocks
    messages, _ = to_template_messages(LOOK, caps)
    assert messages[0]["content"] == LOOK[0]["content"]
    assert "[IMG]" in template.render(messages, add_generation_prompt=True)


def test_gemma4_sees_an_image_url_as_its_image_block() -> None:
    template, caps = _template("google-gemma-4-31B-it.jinja", bos_token="<bos>")
    assert {"image", "audio", "video"} <= caps.content_blocks
    assert "image_url" not in caps.content_blocks
    messages, _ = to_template_messages(LOOK, caps)
    assert messages[0]["content"][1] == {"type": "image", "url": "https://example.com/a.png"}
    text = template.render(messages, add_generation_prompt=True)
    assert "What is this?<|image|>" in text.replace("\n", "")


@pytest.mark.parametrize(
    "name", ["Qwen-Qwen3-0.6B.jinja", "meta-llama-Llama-3.1-8B-Instruct.jinja"]
)
def test_a_block_the_template_cannot_show_is_a_request_error(name: str) -> None:
    # Qwen3 refuses a list; Llama 3.1 would print the list's Python text: neither shows it
    _, caps = _template(name)
    assert caps.content_blocks == frozenset()
    with pytest.raises(RequestError, match="message 0 has a 'image_url' content block"):
        to_template_messages(LOOK, caps)


def test_strings_are_wrapped_for_typed_templates() -> None:
    source = (
        "{% for m in messages %}<{{ m.role }}>"
        "{% for block in m.content if block is mapping and block.type == 'text' %}{{ block.text }}"
        "{% endfor %}</{{ m.role }}>{% endfor %}"
    )
    template = ChatTemplate(source)
    caps = probe_capabilities(template)
    assert caps.typed_content
    messages, tools = to_template_messages(TOOL_LOOP[:2], caps, tools=[WEATHER])
    assert messages[1] == {
        "role": "user",
        "content": [{"type": "text", "text": "Weather in Paris?"}],
    }
    text = template.render(messages, tools=tools)
    assert text.startswith("<system>Be brief.\n\nYou can call the following tools.")
    assert text.endswith(
        "</tools>\n\nTo call a tool, reply with one JSON object per call, each "
        "inside <tool_call></tool_call> tags:\n<tool_call>\n"
        '{"name": "<tool name>", "arguments": {"<argument name>": <value>}}\n'
        "</tool_call>\nEach result comes back inside <tool_response></tool_response>"
        " tags.</system><user>Weather in Paris?</user>"
    )


def test_string_argument_templates_get_json_text() -> None:
    template, caps = _template(
        "meetkai-functionary-medium-v3.2.jinja", bos_token="<|begin_of_text|>"
    )
    assert caps.string_arguments
    loop = copy.deepcopy(TOOL_LOOP)
    loop[2]["tool_calls"][0]["function"]["arguments"] = {"city": "Paris"}
    messages, tools = to_template_messages(loop, caps, tools=[WEATHER])
    assert messages[2]["tool_calls"][0]["function"]["arguments"] == '{"city": "Paris"}'
    assert '>>>get_weather\n{"city": "Paris"}' in template.render(messages, tools=tools)


def test_input_is_never_mutated() -> None:
    _, caps = _template("google-gemma-2-2b-it.jinja")
    request = copy.deepcopy(TOOL_LOOP)
    tools = [copy.deepcopy(WEATHER)]
    for capabilities in (caps, _template("Qwen-Qwen3-0.6B.jinja")[1]):
        converted = to_template_messages(request, capabilities, tools=tools)
        assert request == TOOL_LOOP and tools == [WEATHER]
        assert isinstance(converted, TemplateInput)
        assert all(a is not b for a, b in zip(converted.messages, request, strict=False))


def test_a_message_must_be_a_mapping() -> None:
    _, caps = _template("Qwen-Qwen3-0.6B.jinja")
    with pytest.raises(RequestError, match="message 0 is a str"):
        to_template_messages(["hello"], caps)  # type: ignore[list-item]


def test_the_example_checkpoint_refuses_an_image_or_an_empty_turn_it_cannot_show() -> None:
    # runs on a fresh clone: the example template reads text blocks only
    codec = load(ROOT / "examples" / "chatml-tiny")
    caps = probe_capabilities(codec.template, codec.special_tokens)
    assert caps.content_blocks == frozenset() and not caps.typed_content
    with pytest.raises(RequestError, match="'image_url' content block.*text only"):
        to_template_messages(LOOK, caps)
    only_image = [{"role": "user", "content": [IMAGE]}]
    with pytest.raises(RequestError):  # it would render an empty user turn
        to_template_messages(only_image, caps)
    with pytest.raises(RequestError, match="empty list of content blocks"):
        to_template_messages([{"role": "user", "content": []}], caps)
    text_blocks = [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]
    messages, _ = to_template_messages(text_blocks, caps)
    assert codec.render(messages).endswith("<|im_start|>user\nHi<|im_end|>\n")
