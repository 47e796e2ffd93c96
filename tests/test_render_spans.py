"""Derived assistant spans: render_with_spans gives what rendering every prefix gives.

``derive_spans_by_prefixes`` (two real renders per assistant turn, each from its own copy
of the inputs) is the reference. ``render_with_spans`` is held to it on every conversation
of the render corpus, on a 40-message agent conversation and an agent's conversation of two
questions per corpus template, on edge cases and on hypothesis-built conversations.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from chatcodec import ChatTemplate, TemplateError
from chatcodec.template.render import PrefixRenders, derive_spans_by_prefixes

from ._reply_oracle import RENDER_CASES
from .conftest import read_jsonl, shared_path, template_source

EXAMPLES = max(12, int(os.environ.get("CHATCODEC_FUZZ", "0")) // 20)
SEED = int(os.environ.get("CHATCODEC_FUZZ_SEED", "11"))


@functools.cache
def _cases() -> tuple[dict[str, Any], ...]:
    return tuple(read_jsonl(shared_path("oracle", "render", "expectations.jsonl")))


@functools.cache
def _compiled(name: str) -> ChatTemplate:
    return ChatTemplate(template_source(name), name=name)


def _templates() -> list[str]:
    if not RENDER_CASES.exists():
        return []
    return sorted({case["template"] for case in _cases()})


def _special(name: str) -> dict[str, Any]:
    return next(case["kwargs"] for case in _cases() if case["template"] == name)


def _reference(template: ChatTemplate, messages: Any, **options: Any) -> tuple[str, Any]:
    """The prompt and its spans as the prefix method derives them."""
    tools, documents, now = options.pop("tools"), options.pop("documents"), options.pop("now")
    agp = options.pop("add_generation_prompt")
    text = template.render(messages, tools, documents, agp, now=now, **options)
    spans = derive_spans_by_prefixes(template, text, messages, tools, documents, now, options)
    return text, spans


def _assert_same_spans(template: ChatTemplate, messages: Any, **options: Any) -> int:
    """Both methods give the same text and spans (or the same failure); the span count."""
    try:
        rendered = template.render_with_spans(messages, **options)
    except TemplateError as exc:
        with pytest.raises(type(exc)):
            _reference(template, messages, **options)
        return 0
    text, spans = _reference(template, messages, **options)
    assert rendered.text == text
    if rendered.source == "derived":
        assert rendered.spans == spans
    return len(rendered.spans)


def _case_options(case: dict[str, Any], agp: bool) -> dict[str, Any]:
    return {
        "tools": case["tools"],
        "documents": case["documents"],
        "add_generation_prompt": agp,
        "now": case["now_unix"],
        **case["kwargs"],
    }


@pytest.mark.parametrize("name", _templates() or [pytest.param("", marks=pytest.mark.skip)])
def test_spans_match_the_prefix_method_on_the_corpus(name: str) -> None:
    template = _compiled(name)
    spans = 0
    for case in _cases():
        if case["template"] == name and not case["continue_final_message"]:
            for agp in (False, True):
                spans += _assert_same_spans(template, case["messages"], **_case_options(case, agp))
    assert spans > 0  # the corpus gives every template assistant turns to find


def long_conversation() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """40 messages: user questions, tool calls with reasoning, tool results, answers."""
    tool = {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Looks a topic up.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}},
                "required": ["query"],
            },
        },
    }
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Be careful."}]
    for turn in range(10):
        call = {
            "id": f"call{turn:05d}",
            "type": "function",
            "function": {"name": "lookup", "arguments": {"query": f"topic {turn}"}},
        }
        messages += [
            {"role": "user", "content": f"What about topic {turn}?"},
            {
                "role": "assistant",
                "content": "",
                "reasoning_content": f"Look {turn} up.",
                "tool_calls": [call],
            },
            {"role": "tool", "tool_call_id": call["id"], "content": f"Result {turn}."},
            {"role": "assistant", "content": f"Topic {turn} is fine."},
        ]
    return messages[:40], [tool]


@pytest.mark.parametrize("name", _templates() or [pytest.param("", marks=pytest.mark.skip)])
def test_spans_on_a_long_conversation(name: str) -> None:
    template = _compiled(name)
    messages, tools = long_conversation()
    for tool_list in (tools, None):
        for agp in (False, True):
            options = {"tools": tool_list, "documents": None, "add_generation_prompt": agp}
            _assert_same_spans(template, messages, now=0, **options, **_special(name))


def agent_conversation() -> list[dict[str, Any]]:
    """Two questions, each followed by an agent's calls and results, then an answer: the
    prefixes of the first turn have another last question than the whole conversation,
    which changes the reasoning its passes show from far back (their spans resume from a
    render of that turn: PrefixRenders.render)."""
    messages, _ = long_conversation()
    first, calls, result, answer = messages[1:5]
    return [
        messages[0],
        first,
        *[calls, result] * 12,
        answer,
        {"role": "user", "content": "And the last one?"},
        *[calls, result] * 5,
        answer,
    ]


@pytest.mark.parametrize("name", _templates() or [pytest.param("", marks=pytest.mark.skip)])
def test_spans_on_an_agent_conversation_of_two_questions(name: str) -> None:
    template = _compiled(name)
    messages, tools = agent_conversation(), long_conversation()[1]
    for tool_list, agp in ((tools, False), (None, True)):
        options = {"tools": tool_list, "documents": None, "add_generation_prompt": agp}
        _assert_same_spans(template, messages, now=0, **options, **_special(name))


@pytest.mark.parametrize(
    "name",
    [
        "openai-gpt-oss-120b.jinja",
        "muse-glimmer.jinja",
        "deepseek-ai-DeepSeek-V3.2.jinja",
        "Cohere2MoE.jinja",
        "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja",
        "google-gemma-4-31B-it.jinja",
        "upstage-Solar-Open-100B.jinja",
    ],
)
def test_templates_whose_passes_look_ahead_resume_every_prefix(name: str) -> None:
    # gpt-oss's call shows its reasoning unless a final reply comes later, Muse's tool
    # result looks up its call's name in every message, DeepSeek V3.2's the last call
    # before it, Cohere's counts the calls before its own, Gemma 4's call shows the results
    # after it, Solar's result compares its index with the messages' length less one:
    # passes that read ahead, as far as what they found (their loops' later passes change
    # nothing that is read later)
    if name not in _templates():
        pytest.skip("no render corpus")
    _assert_spans_resume_every_prefix(name, agent_conversation(), long_conversation()[1])


def _assert_spans_resume_every_prefix(name: str, messages: list[Any], tools: Any) -> None:
    """Every prefix the spans need (each turn's before it, with the generation prompt, and
    up to it, without) resumes, and is its render."""
    template = _compiled(name)
    prefixes = PrefixRenders.of(template, messages, tools, now=0, **_special(name))
    turns = [at for at, message in enumerate(messages) if message["role"] == "assistant"]
    with prefixes.resuming():
        for at in turns:
            assert prefixes.render(at, True) == template.render(
                messages[:at], tools, None, True, now=0, **_special(name)
            )
            assert prefixes.render(at + 1, False) == template.render(
                messages[: at + 1], tools, now=0, **_special(name)
            )
    assert (prefixes.resumed, prefixes.rendered) == (2 * len(turns), 0)


def _assert_same_chat_spans(name: str, messages: list[Any]) -> None:
    """render_with_spans of a conversation without tools gives the prefix method's spans."""
    _assert_same_spans(
        _compiled(name),
        messages,
        now=0,
        tools=None,
        documents=None,
        add_generation_prompt=False,
        **_special(name),
    )


def chat_conversation(exchanges: int = 20) -> list[dict[str, Any]]:
    """A system prompt and plain questions and answers: a chat dataset's conversation."""
    messages = [{"role": "system", "content": "Answer briefly."}]
    for turn in range(exchanges):
        messages.append({"role": "user", "content": f"Question {turn}?"})
        messages.append({"role": "assistant", "content": f"Answer {turn}."})
    return messages


@pytest.mark.parametrize(
    "name",
    [
        "mistralai-Mistral-Nemo-Instruct-2407.jinja",
        "Mistral-Small-3.2-24B-Instruct-2506.jinja",
        "unsloth-Apriel-1.5.jinja",
    ],
)
def test_templates_that_select_messages_in_their_start_resume_every_prefix(name: str) -> None:
    # Mistral's templates keep the user messages (`selectattr(...) | list`) for a tools
    # block; Apriel 1.5 asks whether a system message is among them: a selection each
    # prefix has its own of, which reads no message
    if name not in _templates():
        pytest.skip("no render corpus")
    messages = chat_conversation()
    _assert_spans_resume_every_prefix(name, messages, None)
    _assert_same_chat_spans(name, messages)


def test_a_template_whose_loop_counts_the_messages_resumes_every_prefix() -> None:
    # Reka Edge walks `range(start_idx, messages | length)` and builds its prompt in a
    # namespace field that its end prints: each index's pass is its message's
    name = "Reka-Edge.jinja"
    if name not in _templates():
        pytest.skip("no render corpus")
    _assert_spans_resume_every_prefix(name, chat_conversation(), None)
    _assert_spans_resume_every_prefix(name, agent_conversation(), long_conversation()[1])


def test_a_template_that_shows_the_last_answer_in_its_end_resumes_every_prefix() -> None:
    # Nemotron Nano v2's start takes a last assistant message out of the messages its loop
    # walks, into namespace fields only its end reads: on a conversation that ends on an
    # answer, as training data do, each prefix's start cuts its own messages (or not) and
    # sets its own fields
    name = "NVIDIA-Nemotron-Nano-v2.jinja"
    if name not in _templates():
        pytest.skip("no render corpus")
    messages = chat_conversation()
    _assert_spans_resume_every_prefix(name, messages, None)
    # the whole's start cuts nothing when it ends on a question or a tool's result: the
    # prefixes up to an answer resume from the render up to the last answer
    _assert_spans_resume_every_prefix(name, messages[:-1], None)
    _assert_spans_resume_every_prefix(name, agent_conversation(), long_conversation()[1])
    _assert_same_chat_spans(name, messages)


# --- hypothesis-built conversations ------------------------------------------------------

_TEXT = st.text(alphabet="ab <>/\n{}\"'think", max_size=12)
_CALL = st.builds(
    lambda name, value, string: {
        "id": "call00001",
        "type": "function",
        "function": {
            "name": name,
            "arguments": f'{{"x": "{value}"}}' if string else {"x": value},
        },
    },
    st.sampled_from(["lookup", "f"]),
    st.text(alphabet="xy z", max_size=4),
    st.booleans(),
)


@st.composite
def _message(draw: st.DrawFn) -> dict[str, Any]:
    role = draw(st.sampled_from(["user", "user", "assistant", "assistant", "system", "tool"]))
    message: dict[str, Any] = {"role": role, "content": draw(_TEXT)}
    if role == "assistant":
        if draw(st.booleans()):
            message["reasoning_content"] = draw(_TEXT)
        if draw(st.integers(0, 3)) == 0:
            message["tool_calls"] = draw(st.lists(_CALL, min_size=1, max_size=2))
            if draw(st.booleans()):
                message["content"] = None
    if role == "tool":
        message["tool_call_id"] = "call00001"
    return message


_CONVERSATIONS = st.lists(_message(), min_size=1, max_size=9)


def _property_templates() -> list[str]:
    return [name for name in _templates() if not _compiled(name).has_generation_tag]


@pytest.mark.parametrize(
    "name", _property_templates() or [pytest.param("", marks=pytest.mark.skip)]
)
def test_spans_match_the_prefix_method_on_built_conversations(name: str) -> None:
    template = _compiled(name)
    messages, tools = long_conversation()

    @seed(SEED)
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(_CONVERSATIONS, st.booleans(), st.booleans())
    def check(conversation: list[dict[str, Any]], with_tools: bool, agp: bool) -> None:
        options = {"tools": tools if with_tools else None, "documents": None}
        _assert_same_spans(
            template, conversation, now=0, add_generation_prompt=agp, **options, **_special(name)
        )

    check()


# --- edge cases, without the corpus ----------------------------------------------------

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
NO_OPTIONS: dict[str, Any] = {
    "tools": None,
    "documents": None,
    "add_generation_prompt": False,
    "now": None,
}
CONVERSATION = [
    {"role": "system", "content": "S"},
    {"role": "user", "content": "Q1"},
    {"role": "assistant", "content": "A1"},
    {"role": "user", "content": "Q2"},
    {"role": "assistant", "content": "A2"},
]


def _spans(source: str, messages: list[dict[str, Any]], **options: Any) -> list[str]:
    template = ChatTemplate(source)
    options.setdefault("tools", None)
    options.setdefault("documents", None)
    options.setdefault("now", None)
    options.setdefault("add_generation_prompt", False)
    _assert_same_spans(template, messages, **options)
    rendered = template.render_with_spans(messages, **options)
    return [rendered.text[span.start : span.end] for span in rendered.spans]


def test_a_plain_loop() -> None:
    assert _spans(CHATML, CONVERSATION) == ["A1<|im_end|>", "A2<|im_end|>"]


def test_short_conversations_do_not_stop_a_long_one_resuming() -> None:
    """A one-turn conversation's prefix is cheaper rendered than watched; those prefixes say
    nothing of how well this template's prefixes resume, so they do not count towards
    giving watching up: a long conversation after many short ones still resumes."""
    template = ChatTemplate(CHATML)
    for _ in range(100):
        assert _assert_same_spans(template, CONVERSATION[:3], **NO_OPTIONS) == 1
    assert template._resume_tally == [0, 0]
    long = CONVERSATION[:1] + [
        {"role": "user" if index % 2 == 0 else "assistant", "content": f"M{index}"}
        for index in range(40)
    ]
    assert _assert_same_spans(template, long, **NO_OPTIONS) == 20
    resumed, rendered = template._resume_tally
    assert resumed >= 38 and rendered == 0


def test_each_cost_is_watched_as_its_trials_found_faster() -> None:
    """Between 2 and 8 renders' worth of prefixes, a template tries each cost (in whole
    renders) watched and rendered prefix by prefix in turn, 5 times each, then keeps the
    way whose median time a render unit was less (one slow trial does not decide)."""
    template = ChatTemplate(CHATML)
    assert not template._worth_watching(1.9) and template._worth_watching(8.0)
    for _ in range(5):
        for cost, watched, plain in ((3.5, 1.0, 2.0), (5.2, 2.0, 1.0)):
            assert template._worth_watching(cost)
            template._tried(True, cost, watched)
            assert not template._worth_watching(cost)
            template._tried(False, cost, plain)
    template._tried(True, 3.0, 9.0)  # decided: not counted
    assert template._watches == {3: True, 5: False} and not template._trials
    for _ in range(4):
        template._tried(True, 6.1, 1.0)
        template._tried(False, 6.1, 2.0)
    template._tried(True, 6.1, 50.0)  # a trial the machine slowed down
    template._tried(False, 6.1, 2.0)
    assert template._watches[6] is True
    for _ in range(3):  # the spans stay the prefix method's, whichever way they are derived
        assert _assert_same_spans(template, CONVERSATION * 2, **NO_OPTIONS) == 4
        assert _assert_same_spans(template, CONVERSATION * 3, **NO_OPTIONS) == 6


def test_a_template_that_looks_at_the_last_message() -> None:
    source = (
        "{% for m in messages %}[{{ m.role }}]{{ m.content }}"
        "{% if loop.last and m.role == 'assistant' %}<eos>{% endif %}\n{% endfor %}"
        "{% if add_generation_prompt %}[assistant]{% endif %}"
    )
    # the prefix ending on A1 closes it with <eos>; the full prompt does not
    assert _spans(source, CONVERSATION) == ["A1", "A2<eos>"]


def test_a_template_that_refuses_prefixes() -> None:
    source = (
        "{% if messages[0].role != 'user' %}{{ raise_exception('start with a user') }}"
        "{% endif %}" + CHATML
    )
    messages = CONVERSATION[1:]
    assert _spans(source, messages) == ["A1<|im_end|>", "A2<|im_end|>"]
    ending = (
        CHATML + "{% if messages[-1].role == 'assistant' %}{{ raise_exception('no') }}{% endif %}"
    )
    assert _spans(ending, messages[:3]) == []  # the turn's own prefix is refused: no span


def test_tojson_of_the_inputs_is_the_same_in_every_prefix() -> None:
    # the arguments' text is remembered across the prefix renders: keyed by value types too
    source = (
        "{% for m in messages %}<{{ m.role }}>{{ m.content }}"
        "{% for c in m.tool_calls or [] %}{{ c.function.arguments | tojson(indent=1) }}"
        "{{ c.function.arguments | tojson(indent=True) }}{% endfor %}</s>{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}"
    )
    call = {"type": "function", "function": {"name": "f", "arguments": {"x": [1, 2]}}}
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "user", "content": "again"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
    ]
    shown = '{\n "x": [\n  1,\n  2\n ]\n}'
    assert _spans(source, messages) == [shown * 2 + "</s>", shown * 2 + "</s>"]
    with pytest.raises(TemplateError):  # indent=1.0 is refused by json, remembered or not
        ChatTemplate(source.replace("indent=True", "indent=1.0")).render_with_spans(messages)


def test_tojson_is_remembered_for_the_inputs_alone() -> None:
    # the memo render_with_spans sets around its prefixes: an input's text is computed once
    # per set of arguments; a value the template built, equal or not, is never remembered
    import time

    from chatcodec.template.environment import FilterMemo, render_state
    from chatcodec.template.render import _shared_environment

    tojson = _shared_environment().filters["tojson"]
    made: list[Any] = [{"x": [1, 2]}]
    saved = render_state.begin(time.monotonic() + 5, 10**6, None, None, made)
    render_state.memo = memo = FilterMemo(made)
    try:
        texts = [tojson(made[0]), tojson({"x": [1, 2]}), tojson(made[0], indent=1)]
        assert tojson(made[0]) == texts[0]
    finally:
        render_state.memo = None
        render_state.end(saved)
    assert texts == ['{"x": [1, 2]}', '{"x": [1, 2]}', '{\n "x": [\n  1,\n  2\n ]\n}']
    assert sorted(memo.results.values()) == sorted({texts[0], texts[2]})
    assert memo.holds(made[0]) and not memo.holds({"x": [1, 2]})


def test_templates_whose_inputs_can_change_render_each_prefix_from_its_own_copy() -> None:
    # the llama.cpp-compatible environment lets a template append to a list it reads: shared
    # by the prefix renders, the list would grow from one render to the next
    from chatcodec.template.compat import LlamaCompatTemplate

    source = (
        "{% for m in messages %}{% set _ = m.tags.append('x') %}"
        "<{{ m.role }}>{{ m.content }}{{ m.tags | length }}</s>{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}"
    )
    template = LlamaCompatTemplate(source)
    messages = [{**message, "tags": []} for message in CONVERSATION]
    rendered = template.render_with_spans(messages)
    text = template.render(messages)
    assert rendered.text == text
    spans = derive_spans_by_prefixes(template, text, messages, None, None, None, {})
    assert rendered.spans == spans
    assert [text[s.start : s.end] for s in spans] == ["A11</s>", "A21</s>"]


def _turn_start_by_every_tail(head: str, turn: str) -> int:
    """Where a turn begins, tail by tail: after the longest tail of ``head`` (4 characters or
    more) that ``turn`` repeats, or after what both share, whichever is later."""
    shared = len(os.path.commonprefix([head, turn]))
    if turn.startswith(head):
        return len(head)
    longest = max((n for n in range(4, len(head) + 1) if head[-n:] in turn), default=0)
    return max(shared, turn.rfind(head[-longest:]) + longest) if longest else shared


_PIECES = st.text("ab<>\n", max_size=40)
_FEW = st.text("ab\n", max_size=24)  # (few letters: tails that repeat, across the parts too)


@seed(SEED)
@settings(max_examples=EXAMPLES * 20, deadline=None)
@given(_PIECES, _PIECES, _PIECES)
def test_where_a_turn_starts_is_the_longest_repeated_tail(
    shared: str, head_tail: str, turn_tail: str
) -> None:
    """The search that doubles, then halves, finds the tail a scan of every tail finds."""
    from chatcodec.template.render import _turn_start

    head, turn = shared + head_tail, shared + turn_tail
    assert _turn_start("", (0, head), (0, turn)) == _turn_start_by_every_tail(head, turn)


@seed(SEED)
@settings(max_examples=EXAMPLES * 20, deadline=None)
@given(_FEW, _FEW, _FEW, _FEW, st.data())
def test_a_turn_starts_alike_from_any_parts(
    shared: str, head_tail: str, turn_tail: str, after: str, data: st.DataObject
) -> None:
    """The two renders given as a part of the full render's text (their shared text, then
    any) and the rest, wherever each part ends: the start found in the whole strings."""
    from chatcodec.template.render import _turn_start

    head, turn = shared + head_tail, shared + turn_tail
    text = shared + after
    head_kept = data.draw(st.integers(0, len(shared)))
    turn_kept = data.draw(st.integers(0, len(shared)))
    parts = (head_kept, head[head_kept:]), (turn_kept, turn[turn_kept:])
    assert _turn_start(text, *parts) == _turn_start_by_every_tail(head, turn)


@pytest.mark.parametrize(
    ("shared", "head_tail", "turn_tail", "after", "head_kept", "turn_kept"),
    [
        # the longest tail the turn repeats is in their shared part only, or crosses into
        # the turn's own rest, or is the turn's last in the shared part
        ("aabab", "abab", "aabab", "ab", 5, 5),
        ("aaaaaaaa\n", "aaaa\n", "aaa\n", "", 9, 9),
        ("aaaaaaa", "a", "", "a", 7, 7),
        ("\naaaa", "\naaaa", "a", "", 1, 1),
        ("baa", "abaab", "b", "", 1, 1),
    ],
)
def test_a_turn_starts_alike_from_these_parts(
    shared: str, head_tail: str, turn_tail: str, after: str, head_kept: int, turn_kept: int
) -> None:
    """Cases of the property above that few random draws meet (each once failed a change)."""
    from chatcodec.template.render import _turn_start

    head, turn = shared + head_tail, shared + turn_tail
    text = shared + after
    parts = (head_kept, head[head_kept:]), (turn_kept, turn[turn_kept:])
    assert _turn_start(text, *parts) == _turn_start_by_every_tail(head, turn)


@pytest.mark.parametrize(
    ("text", "head", "turn"),
    [("aaaaaaa\naaa\na", (12, ""), (5, "\na")), ("abb\nbba", (6, "\nbb"), (6, "ab\nbb"))],
)
def test_a_turn_is_located_alike_from_these_parts(
    text: str, head: tuple[int, str], turn: tuple[int, str]
) -> None:
    from chatcodec.template.render import _locate_turn

    joined = (0, text[: head[0]] + head[1]), (0, text[: turn[0]] + turn[1])
    assert _locate_turn(text, head, turn, 0, "") == _locate_turn(text, *joined, 0, "")


@seed(SEED)
@settings(max_examples=EXAMPLES * 20, deadline=None)
@given(_FEW, _FEW, _FEW, st.data())
def test_a_turn_is_located_alike_from_any_parts(
    text: str, head_tail: str, turn_tail: str, data: st.DataObject
) -> None:
    """A prefix resumed from the full render is located as the same text joined."""
    from chatcodec.template.render import _locate_turn

    head_kept = data.draw(st.integers(0, len(text)))
    turn_kept = data.draw(st.integers(0, len(text)))
    cursor = data.draw(st.integers(0, len(text)))
    head, turn = (head_kept, head_tail), (turn_kept, turn_tail)
    joined = (0, text[:head_kept] + head_tail), (0, text[:turn_kept] + turn_tail)
    for anchor in ("", "ab", turn_tail.strip()):
        expected = _locate_turn(text, *joined, cursor, anchor)
        assert _locate_turn(text, head, turn, cursor, anchor) == expected


@seed(SEED)
@settings(max_examples=EXAMPLES * 20, deadline=None)
@given(_FEW, _FEW, st.sampled_from(["", "a", "ab", "b\n", "aba", "c"]), st.data())
def test_the_tail_found_is_the_longest_of_every_tail(
    text: str, generated: str, anchor: str, data: st.DataObject
) -> None:
    """The tail search (a look for the message's own text, then halving) finds the tail a
    scan of every tail finds, where that tail holds the message's text."""
    from chatcodec.template.render import _found_tail

    start = data.draw(st.integers(0, len(text)))
    limit = data.draw(st.integers(start, len(text) + 4))
    window = text[start:limit]
    longest = max((n for n in range(1, len(generated) + 1) if generated[-n:] in window), default=0)
    expected = longest if longest and anchor in generated[-longest:] else 0
    assert _found_tail(text, generated, start, limit, anchor) == expected


@seed(SEED)
@settings(max_examples=EXAMPLES * 20, deadline=None)
@given(st.text("ab", max_size=30), st.text("ab", max_size=30), st.text("ab", max_size=30))
def test_the_common_prefix_by_slices_is_the_characters_one(
    shared: str, left: str, right: str
) -> None:
    from chatcodec.strings import common_prefix_length

    a, b = shared + left, shared + right
    assert common_prefix_length(a, b) == len(os.path.commonprefix([a, b]))
