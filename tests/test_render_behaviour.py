"""apply_chat_template semantics beyond jinja2, each pinned where transformers surprises."""

from __future__ import annotations

import copy
import json
from datetime import datetime, timedelta, timezone

import pytest

from chatcodec import (
    ChatTemplate,
    Codec,
    TemplateError,
    TemplateNotFoundError,
    TemplateSecurityError,
)

from .conftest import template_source

DUMP = "{{ messages | tojson }}"


def test_none_valued_message_keys_are_dropped() -> None:
    rendered = ChatTemplate(DUMP).render([{"role": "user", "content": "hi", "name": None}])
    assert json.loads(rendered) == [{"role": "user", "content": "hi"}]


def test_empty_conversation_is_an_error() -> None:
    with pytest.raises(TemplateError) as caught:
        ChatTemplate(DUMP).render([])
    assert caught.value.stage == "render"
    assert caught.value.kind == "ValueError"
    assert "empty conversation" in str(caught.value)


def test_continue_final_message_with_generation_prompt_is_an_error() -> None:
    with pytest.raises(TemplateError, match="not compatible"):
        ChatTemplate("{{ messages[0].content }}").render(
            [{"role": "user", "content": "x"}],
            add_generation_prompt=True,
            continue_final_message=True,
        )


def test_continue_final_message_cuts_after_the_final_text() -> None:
    template = ChatTemplate(
        "{% for m in messages %}<{{ m.role }}>{{ m.content }}</s>\n{% endfor %}"
    )
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Well, "}]
    # transformers keeps the message's own trailing space when the template keeps it
    assert (
        template.render(messages, continue_final_message=True) == "<user>Hi</s>\n<assistant>Well, "
    )


def test_continue_final_message_names_a_reasoning_field() -> None:
    template = ChatTemplate(
        "{% for m in messages %}{% if m.reasoning_content %}<think>{{ m.reasoning_content }}</think>"
        "{% endif %}{{ m.content }}|{% endfor %}"
    )
    messages = [
        {"role": "user", "content": "Q"},
        {"role": "assistant", "content": "A", "thinking": "Let me see"},
    ]
    # `thinking` is aliased to `reasoning_content`, and the cut lands inside the thought
    assert (
        template.render(messages, continue_final_message="reasoning_content")
        == "Q|<think>Let me see"
    )


def test_continue_final_message_on_a_field_the_template_never_reads() -> None:
    with pytest.raises(TemplateError, match="not an accepted field"):
        ChatTemplate("{{ messages[-1].content }}").render(
            [{"role": "assistant", "content": "A", "reasoning_content": "R"}],
            continue_final_message="reasoning_content",
        )


@pytest.mark.parametrize("alias", ["reasoning_content", "thinking", "reasoning"])
def test_reasoning_aliases_fill_reasoning_content_and_thinking(alias: str) -> None:
    rendered = ChatTemplate(
        "{{ messages[0].reasoning_content }}/{{ messages[0].thinking }}"
    ).render([{"role": "assistant", "content": "A", alias: "R"}])
    assert rendered == "R/R"


def test_empty_tool_list_differs_from_no_tools() -> None:
    template = ChatTemplate(
        "{% if tools is not none %}tools:{{ tools | length }}{% else %}none{% endif %}"
    )
    message = [{"role": "user", "content": "x"}]
    assert template.render(message, tools=None) == "none"
    assert template.render(message, tools=[]) == "tools:0"


def test_tojson_is_json_dumps_without_html_escaping() -> None:
    value = {"b": "<a href='x'>&</a>", "a": "é", "n": [1, 2.5, None, True]}
    template = ChatTemplate(
        "{{ v | tojson }}\n{{ v | tojson(indent=2) }}\n{{ v | tojson(ensure_ascii=True) }}\n"
        "{{ v | tojson(separators=(',', ':'), sort_keys=True) }}"
    )
    lines = template.render([{"role": "user", "content": ""}], v=value)
    assert lines == "\n".join(
        [
            json.dumps(value, ensure_ascii=False),
            json.dumps(value, ensure_ascii=False, indent=2),
            json.dumps(value, ensure_ascii=True),
            json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True),
        ]
    )


def test_python_repr_of_data_matches_transformers() -> None:
    # Templates that print a dict get Python's repr, as transformers gives them
    rendered = ChatTemplate("{{ messages[0] }}").render([{"role": "user", "content": "x"}])
    assert rendered == "{'role': 'user', 'content': 'x'}"


def test_strftime_now_uses_the_pinned_instant_in_utc() -> None:
    template = ChatTemplate("{{ strftime_now('%Y-%m-%d %H:%M:%S %B') }}")
    message = [{"role": "user", "content": "x"}]
    assert template.render(message, now=1741165623) == "2025-03-05 09:07:03 March"
    aware = datetime(2025, 3, 5, 10, 7, 3, tzinfo=timezone(timedelta(hours=1)))
    assert template.render(message, now=aware) == "2025-03-05 09:07:03 March"
    with pytest.raises(TemplateError, match="aware datetime"):
        template.render(message, now=datetime(2025, 3, 5))


def test_strftime_now_without_now_reads_the_wall_clock() -> None:
    rendered = ChatTemplate("{{ strftime_now('%Y') }}").render([{"role": "user", "content": "x"}])
    assert rendered == datetime.now().strftime("%Y")


def test_raise_exception_keeps_the_authors_words() -> None:
    template = ChatTemplate(
        "{{ raise_exception('Conversation roles must alternate user/assistant') }}"
    )
    with pytest.raises(TemplateError) as caught:
        template.render([{"role": "user", "content": "x"}])
    assert caught.value.kind == "TemplateError"
    assert caught.value.stage == "render"
    assert "Conversation roles must alternate user/assistant" in str(caught.value)
    assert caught.value.lineno == 1


def test_syntax_errors_fail_at_compile_with_a_line() -> None:
    with pytest.raises(TemplateError) as caught:
        ChatTemplate("line one\n{% if %}")
    assert caught.value.stage == "compile"
    assert caught.value.lineno == 2


def test_template_errors_never_escape_as_python_exceptions() -> None:
    for source, kind in [
        ("{{ messages[0].content + 1 }}", "TypeError"),
        ("{{ nothing.at.all }}", "UndefinedError"),
        ("{{ messages[5]['x'] }}", "UndefinedError"),
    ]:
        with pytest.raises(TemplateError) as caught:
            ChatTemplate(source).render([{"role": "user", "content": "x"}])
        assert caught.value.kind == kind


def test_namespace_refuses_underscore_names_like_transformers() -> None:
    with pytest.raises(TemplateSecurityError):
        ChatTemplate("{% set ns = namespace(_x=1) %}").render([{"role": "user", "content": "x"}])


def test_loop_controls_and_generation_tag_are_available() -> None:
    template = ChatTemplate(
        "{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}"
        "{% generation %}{{ m.content }}{% endgeneration %}{% endfor %}"
    )
    assert (
        template.render([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]) == "a"
    )


def test_callers_data_is_never_mutated() -> None:
    messages = [
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": "y", "reasoning": "r", "tool_calls": None},
    ]
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    before = copy.deepcopy((messages, tools))
    ChatTemplate("{{ messages[-1].content }}").render(
        messages, tools=tools, continue_final_message=True
    )
    assert (messages, tools) == before


def test_special_tokens_fill_the_context_and_kwargs_override_them() -> None:
    codec = Codec("{{ bos_token }}|{{ eos_token }}", bos_token="<s>", eos_token="</s>")
    message = [{"role": "user", "content": "x"}]
    assert codec.render(message) == "<s>|</s>"
    assert codec.render(message, eos_token="<|end|>") == "<s>|<|end|>"


def test_named_templates_follow_transformers_selection_rule() -> None:
    codec = Codec({"default": "D", "tool_use": "T", "rag": "R"})
    message = [{"role": "user", "content": "x"}]
    assert codec.render(message) == "D"
    assert codec.render(message, tools=[]) == "T"
    assert codec.render(message, template_name="rag") == "R"
    with pytest.raises(TemplateNotFoundError, match="no default"):
        Codec({"a": "A", "b": "B"}).render(message)
    with pytest.raises(TemplateNotFoundError, match="no chat template named"):
        codec.render(message, template_name="nope")


def test_generation_tag_spans_match_transformers_tracking() -> None:
    template = ChatTemplate(
        "{% for m in messages %}{{ m.role }}: {% if m.role == 'assistant' %}{% generation %}"
        "{{ m.content }}<eos>{% endgeneration %}{% else %}{{ m.content }}{% endif %}\n{% endfor %}"
    )
    messages = [
        {"role": "user", "content": "Q1"},
        {"role": "assistant", "content": "A1"},
        {"role": "user", "content": "Q2"},
        {"role": "assistant", "content": "A2"},
    ]
    rendered = template.render_with_spans(messages)
    assert rendered.source == "generation_tag"
    assert rendered.text == template.render(messages)
    assert [rendered.text[s.start : s.end] for s in rendered.spans] == ["A1<eos>", "A2<eos>"]
    mask = rendered.mask()
    assert sum(mask) == len("A1<eos>") * 2


CONVERSATION = [
    {"role": "system", "content": "S"},
    {"role": "user", "content": "Q1"},
    {"role": "assistant", "content": "A1"},
    {"role": "user", "content": "Q2"},
    {"role": "assistant", "content": "A2", "reasoning_content": "R"},
]


@pytest.mark.parametrize(
    ("name", "turns"),
    [
        ("Qwen-Qwen3-0.6B.jinja", ["A1<|im_end|>", "<think>\nR\n</think>\n\nA2<|im_end|>"]),
        ("Qwen3.5-4B.jinja", ["A1<|im_end|>", "R\n</think>\n\nA2<|im_end|>"]),
        ("meta-llama-Llama-3.1-8B-Instruct.jinja", ["A1<|eot_id|>", "A2<|eot_id|>"]),
        ("mistralai-Mistral-Nemo-Instruct-2407.jinja", ["A1</s>", "A2</s>"]),
        (
            "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja",
            ["A1<｜end▁of▁sentence｜>", "A2<｜end▁of▁sentence｜>"],
        ),
        ("HuggingFaceTB-SmolLM3-3B.jinja", ["A1<|im_end|>", "A2<|im_end|>"]),
    ],
)
def test_derived_spans_without_a_generation_tag(name: str, turns: list[str]) -> None:
    template = ChatTemplate(
        template_source(name), special_tokens={"bos_token": "<s>", "eos_token": "</s>"}
    )
    rendered = template.render_with_spans(CONVERSATION, now=0)
    assert rendered.source == "derived"
    assert rendered.text == template.render(CONVERSATION, now=0)
    assert [rendered.text[s.start : s.end] for s in rendered.spans] == turns


def test_generation_tag_templates_in_the_corpus_use_the_tag() -> None:
    template = ChatTemplate(template_source("poolside-Laguna-S-2.1.jinja"))
    rendered = template.render_with_spans(CONVERSATION)
    assert rendered.source == "generation_tag"
    assert [rendered.text[s.start : s.end] for s in rendered.spans] == [
        "<assistant><think></think>A1</assistant>\n",
        "<assistant><think>R</think>A2</assistant>\n",
    ]
