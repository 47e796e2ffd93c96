"""Request setup as llama.cpp does it: generation prompts, requests it cannot set up, the
llama.cpp-compatible render, the parallel-calls default (llama.cpp's test vectors run through
``Codec.prepare`` in test_reply_vectors)."""

from __future__ import annotations

import pytest

from chatcodec import Codec
from chatcodec.batch import prepare_request
from chatcodec.errors import ChatCodecError, RequestError, TemplateError

from ._reply_oracle import corpus_cases
from .conftest import template_source

# Cases whose generation prompt llama.cpp computes from a conversation it rewrites first, with a
# rewrite chatcodec does not port yet: case id -> the rewrite.
_GEMMA4_FOLD = "gemma4.cpp convert_tool_responses_gemma4 (tool results folded into the model turn)"
NOT_PORTED: dict[str, str] = {
    "google-gemma-4-31B-it-interleaved__history-par1__history_call": _GEMMA4_FOLD,
    "google-gemma-4-31B-it-interleaved__history-par1__reasoning": _GEMMA4_FOLD,
    "google-gemma-4-31B-it-interleaved__history-par1__tool_parallel": _GEMMA4_FOLD,
}


def test_generation_prompts_equal_llama_cpp_for_every_request_it_set_up() -> None:
    agree = 0
    mismatches: list[str] = []
    unexplained: list[str] = []
    for case in corpus_cases():
        if case["llama_cpp"] is None:
            continue
        expected = case["llama_cpp"]["generation_prompt"]
        got = prepare_request(case).generation_prompt
        if got == expected:
            agree += 1
            continue
        mismatches.append(case["id"])
        if case["id"] not in NOT_PORTED:
            unexplained.append(f"{case['id']}: got {got!r}, llama.cpp {expected!r}")
    print(f"\ngeneration prompts equal to llama.cpp's: {agree}/{agree + len(mismatches)}")
    assert not unexplained, "\n".join(unexplained[:20])
    assert agree >= 6300


def test_requests_llama_cpp_cannot_set_up_fail_in_prepare() -> None:
    failed = [c for c in corpus_cases() if c["llama_cpp"] is None]
    assert len(failed) == 26
    for case in failed:
        with pytest.raises(ChatCodecError):
            prepare_request(case)


def test_llama_cpp_render_only_where_transformers_cannot() -> None:
    # Hermes 2 Pro iterates `tools`: transformers passes None (the loop fails), llama.cpp
    # leaves it undefined (an empty loop)
    source = template_source("NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja")
    codec = Codec(source, bos_token="<|begin_of_text|>", eos_token="<|im_end|>")
    messages = [{"role": "user", "content": "Hi"}]
    with pytest.raises(TemplateError):
        codec.render(messages, add_generation_prompt=True)
    turn = codec.prepare(messages)
    assert turn.prompt.endswith("<|im_start|>assistant\n")
    assert turn.generation_prompt == "<|im_start|>assistant\n"
    # a template transformers renders keeps transformers' prompt, byte for byte
    qwen = Codec(template_source("Qwen-Qwen3-0.6B.jinja"), eos_token="<|im_end|>")
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    assert qwen.prepare(messages, tools=tools).prompt == qwen.render(
        messages, tools=tools, add_generation_prompt=True, enable_thinking=True
    )


def test_a_false_add_generation_prompt_is_left_undefined() -> None:
    # rwkv-world defaults an undefined add_generation_prompt to true: llama.cpp's render
    # "without" it still ends with the assistant header, so the generation prompt is empty
    codec = Codec(template_source("llama-cpp-rwkv-world.jinja"))
    turn = codec.prepare([{"role": "user", "content": "Hi"}])
    assert turn.prompt.endswith("Assistant: <think>")
    assert turn.generation_prompt == ""
    assert turn.parse("a</think>b").content == "a</think>b"


def test_parallel_tool_calls_default_to_the_template_capability() -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "f",
                "parameters": {"type": "object", "properties": {"a": {"type": "string"}}},
            },
        }
    ]
    messages = [{"role": "user", "content": "x"}]
    call = "<tool_call>\n<function=f>\n<parameter=a>\n{}\n</parameter>\n</function>\n</tool_call>"
    reply = call.format(1) + "\n" + call.format(2)
    # Qwen3-Coder renders two calls in one message: parallel by default, as llama-server does
    coder = Codec(template_source("Qwen3-Coder.jinja"))
    counts = [
        len(coder.prepare(messages, tools=tools, parallel_tool_calls=p).parse(reply).tool_calls)
        for p in (None, False, True)
    ]
    assert counts == [2, 1, 2]
    # Llama 3.1 refuses two calls in one message: not parallel by default
    from chatcodec.template import tool_call_support

    llama = Codec(template_source("meta-llama-Llama-3.1-8B-Instruct.jinja"))
    assert not tool_call_support(llama.template).parallel


def test_a_final_assistant_message_is_continued_as_llama_server_does() -> None:
    codec = Codec(template_source("Qwen3.5-4B.jinja"))
    user = {"role": "user", "content": "Hey there!"}
    final = {"role": "assistant", "content": "Hello, ", "reasoning_content": "I'm thinking"}
    # detected (llama-server's prefill_assistant), the message left out of the render
    turn = codec.prepare([user, final])
    assert turn.generation_prompt == (
        "<|im_start|>assistant\n<think>\nI'm thinking\n</think>\n\nHello, "
    )
    assert turn.prompt == codec.render([user]) + turn.generation_prompt
    assert turn.parse("world!").content == "Hello, world!"
    # auto: the reasoning is continued when the message has no content
    thinking = {"role": "assistant", "content": "", "reasoning_content": "I'm"}
    assert codec.prepare([user, thinking]).generation_prompt.endswith("<think>\nI'm")
    # not continued when asked not to: the message is rendered, a new turn follows
    plain = codec.prepare([user, final], continue_final_message=False)
    assert plain.generation_prompt == "<|im_start|>assistant\n<think>\n"
    with pytest.raises(RequestError, match="2 or more assistant"):
        codec.prepare([user, final, final])
    call = {"type": "function", "function": {"name": "f", "arguments": {}}}
    with pytest.raises(RequestError, match="contains tool calls"):
        codec.prepare([user, {"role": "assistant", "content": "", "tool_calls": [call]}])
    with pytest.raises(RequestError):
        codec.prepare([user, final], continue_final_message="everything")


def test_response_formats_are_read_as_llama_server_reads_them() -> None:
    from chatcodec.codec import _json_schema

    schema = {"type": "object", "properties": {"a": {"type": "number"}}}
    assert _json_schema({"type": "json_schema", "json_schema": {"schema": schema}}) == schema
    assert _json_schema({"type": "json_object"}) == {"type": "object"}
    assert _json_schema({"type": "json_schema", "json_schema": {}}) == {"type": "object"}
    assert _json_schema({"type": "text"}) is None
    assert _json_schema(None) is None
    with pytest.raises(RequestError, match="response_format type"):
        _json_schema({"type": "xml"})
    # the auto parser reads one JSON value, fenced or bare; text after it fails the parse
    codec = Codec(template_source("meta-llama-Llama-3.1-8B-Instruct.jinja"))
    messages = [{"role": "user", "content": "x"}]
    turn = codec.prepare(messages, response_format={"type": "json_object"})
    assert turn.parse('```json\n{"a": 1}\n```').content == '{"a": 1}'
    assert turn.parse(' {"a": 1}\n').content == '{"a": 1}'
    with pytest.raises(ChatCodecError):
        turn.parse('{"a": 1} and more')


@pytest.mark.parametrize(
    ("expression", "llama_cpp"),
    [  # what llama.cpp 0c1e570's engine renders (measured with its chat code)
        ("'x' + {'a': 'b'}", "x{'a': 'b'}"),
        ("'x' + [1, 'b']", "x[1, 'b']"),
        (
            "'x' + {'a': \"it's\", 'n': [1, 2.5, none, true]}",
            "x{'a': \"it's\", 'n': [1, 2.5, None, True]}",
        ),
        ("'x' + 7 + 2.5 + true + none", "x72.5True"),
    ],
)
def test_the_llama_cpp_render_writes_values_next_to_a_string_as_llama_cpp(
    expression: str, llama_cpp: str
) -> None:
    """Python's Jinja raises on ``'x' + {...}``; llama.cpp's engine writes the value out. Its
    render decides whether a request can be set up (DeepSeek R1/V3 templates concatenate
    ``function.arguments``)."""
    from chatcodec import ChatTemplate
    from chatcodec.template.compat import llama_compatible

    template = ChatTemplate("{{ " + expression + " }}")
    hi = [{"role": "user", "content": "hi"}]
    assert llama_compatible(template).render(hi) == llama_cpp
    with pytest.raises(TemplateError):
        template.render(hi)


def test_a_template_that_concatenates_arguments_sets_up_a_history_with_calls() -> None:
    source = (
        "{%- for m in messages %}{% if m.tool_calls %}{% for t in m.tool_calls %}"
        "{{ '<call>' + t.function.name + ' ' + t.function.arguments + '</call>' }}"
        "{% endfor %}{% else %}{{ m.role + ': ' + m.content + '\\n' }}{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}assistant: {% endif %}"
    )
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ]
    assert Codec(source).prepare(messages).generation_prompt == "assistant: "


def test_a_template_with_escapes_llama_cpp_refuses_still_sets_up() -> None:
    """llama.cpp's lexer refuses ``\\`` before a line break in a string literal (the whole
    template fails); chatcodec reads it as Python's Jinja does (docs/differences.md, 11)."""
    source = (
        '{%- set greeting = "Hello \\\n'
        'there" %}{{ greeting }}{% for m in messages %}{{ m.role }}: {{ m.content }}\n'
        "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"
    )
    turn = Codec(source).prepare([{"role": "user", "content": "hi"}])
    assert turn.prompt == "Hello there" + "user: hi\nassistant:"
    assert turn.parse("Fine.").content == "Fine."


def test_a_template_that_loops_over_content_gets_typed_content_and_no_tool_calls() -> None:
    """llama.cpp's engine refuses ``{% for %}`` over a string: a template that loops over
    ``message['content']`` takes content only as typed blocks, and its tool-call probes (string
    content) fail, so llama.cpp reads no calls (measured with llama.cpp's chat code on this
    template: generation prompt ``<|assistant|>``, a JSON call read as content)."""
    from chatcodec.template.capabilities import tool_call_support

    source = (
        "{%- for message in messages %}{{ '<|' + message['role'] + '|>' }}"
        "{%- if 'tool_calls' in message %}{{ '{\"name\": \"' + "
        'message.tool_calls[0].function.name + \'", "parameters": \' + '
        "message.tool_calls[0].function.arguments | tojson + '}' }}"
        "{%- else %}{%- for content in message['content'] %}"
        "{%- if content['type'] == 'text' %}{{ content['text'] }}{%- endif %}{%- endfor %}"
        "{%- endif %}{{ '<|end|>\\n' }}{%- endfor %}"
        "{%- if add_generation_prompt %}{{ '<|assistant|>' }}{%- endif %}"
    )
    tool = {
        "type": "function",
        "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}},
    }
    codec = Codec(source)
    assert not tool_call_support(source).calls
    turn = codec.prepare([{"role": "user", "content": "Weather?"}], tools=[tool])
    assert turn.generation_prompt == "<|assistant|>"
    reply = '{"name": "get_weather", "parameters": {"city": "Paris"}}'
    message = turn.parse(reply)
    assert (message.content, message.tool_calls) == (reply, ())


def test_the_turn_stops_where_llama_cpp_adds_a_stop() -> None:
    """An engine stops on ``turn.stop``: it holds llama.cpp's extra stops for every request
    (Ling 3's ``<|role_end|>``, the auto parser's ``</assistant>``, ...) besides the EOS."""
    missing = []
    for case in corpus_cases():
        if case["llama_cpp"] is None:
            continue
        stops = set(prepare_request(case).stop)
        lost = set(case["llama_cpp"]["additional_stops"]) - stops
        if lost:
            missing.append(f"{case['id']}: {sorted(lost)}")
    assert not missing, "\n".join(missing[:10])


# Ling 3's markers (the leading comment picks llama.cpp's handler) and a prompt that opens the
# thought, as Ling 3.0's own template does with thinking on
LING3_OPEN_THOUGHT = (
    "{#- <role>ASSISTANT</role> <arg_key> -#}"
    "{%- for m in messages %}<role>{{ m.role | upper }}</role>{{ m.content }}{% endfor %}"
    "{% if add_generation_prompt %}<role>ASSISTANT</role>\n<think>{% endif %}"
)


def test_a_call_marker_cut_short_in_ling3_s_open_thought_is_what_follows_reads() -> None:
    """Ling 3's thought needs no closer in llama.cpp: a reply that ends inside ``<tool_call>``
    ends the thought there and the cut text is read by what follows — content under
    ``tool_choice="none"`` (it reads to ``<|role_end|>``), a held-back call marker (dropped)
    when calls may follow. llama.cpp's parses (oracle, commit 0c1e570), whole and partial."""
    from .test_grammar_request import HI, TOOLS

    codec = Codec(LING3_OPEN_THOUGHT)
    plain = codec.prepare(HI, tool_choice="none")
    assert plain.generation_prompt.endswith("<think>")  # the thought is open
    for partial in (False, True):
        message = plain.parse("hm<tool_c", partial=partial)
        assert (message.reasoning_content, message.content) == ("hm", "<tool_c")
        assert not message.dropped
        calls = codec.prepare(HI, tools=TOOLS).parse("hm<tool_c", partial=partial)
        assert (calls.reasoning_content, calls.content) == ("hm", "")
        assert [d.reason for d in calls.dropped] == ["marker_prefix"]
    # a closer that is consumed, cut short, stays held back as before
    assert plain.parse("hm</thi").content == ""
