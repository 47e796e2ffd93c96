"""Prefix renders resumed from a watched render (template/resume.py) are the prefixes' renders.

Every prefix ``PrefixRenders`` gives (resumed or rendered from the start) must equal
``ChatTemplate.render`` of the first ``n`` messages, with and without a generation prompt,
refusals included. The cases below are the ways a template's start, loop and end can depend
on the conversation's length; the property test builds templates out of them at random.
"""

from __future__ import annotations

import contextlib
import operator
import os
import random
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from chatcodec import ChatTemplate, TemplateError, UnusedVariableWarning
from chatcodec.template import resume
from chatcodec.template.render import PrefixRenders, derive_spans_by_prefixes

EXAMPLES = max(60, int(os.environ.get("CHATCODEC_FUZZ", "0")) // 4)

CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}
CONVERSATION = [
    {"role": "system", "content": "S"},
    {"role": "user", "content": "Q1"},
    {"role": "assistant", "content": "A1"},
    {"role": "user", "content": "Q2"},
    {"role": "assistant", "content": "", "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "c1", "content": "R"},
    {"role": "assistant", "content": "A2"},
]
CHATML_BODY = "<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
GENERATION_PROMPT = "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"


def _loop(body: str, start: str = "", end: str = GENERATION_PROMPT, over: str = "messages") -> str:
    return f"{start}{{% for m in {over} %}}{body}{{% endfor %}}{end}"


def _render(template: ChatTemplate, messages: list[Any], prompt: bool, **options: Any) -> Any:
    try:
        return template.render(messages, add_generation_prompt=prompt, **options)
    except TemplateError:
        return None


def check(source: str, messages: list[dict[str, Any]] = CONVERSATION, **options: Any) -> int:
    """Every prefix as rendered; the number of prefixes that were resumed."""
    template = ChatTemplate(source)
    resumed = 0
    for prompt in (False, True):
        try:
            prefixes = PrefixRenders.of(template, messages, add_generation_prompt=prompt, **options)
        except TemplateError:
            assert _render(template, messages, prompt, **options) is None
            continue
        assert prefixes.text == _render(template, messages, prompt, **options)
        with prefixes.resuming():
            for n in range(1, len(messages) + 1):
                for flag in (False, True):
                    expected = _render(template, messages[:n], flag, **options)
                    assert prefixes.render(n, flag) == expected, (n, flag)
        resumed += prefixes.resumed
    return resumed


ALL = 2 * 2 * len(CONVERSATION)  # prefixes asked for: two flags, both ways of the whole


@contextlib.contextmanager
def _runs_of(template: ChatTemplate) -> Iterator[list[int]]:
    """How many times ``template`` runs inside (``[0]``)."""
    runs = [0]
    real = template._run

    def counted(*args: Any, **kwargs: Any) -> str:
        runs[0] += 1
        return real(*args, **kwargs)

    template._run = counted  # type: ignore[method-assign]
    try:
        yield runs
    finally:
        del template._run


def test_a_plain_loop_resumes_every_prefix() -> None:
    assert check(_loop(CHATML_BODY)) == ALL


def test_loop_values_that_peek_at_the_next_message() -> None:
    body = (
        "{{ loop.index }}{% if loop.first %}^{% endif %}{% if loop.last %}${% endif %}"
        "{{ loop.previtem.role if loop.previtem }}>{{ loop.nextitem.role if loop.nextitem }}"
        "{{ loop.cycle('a', 'b') }}{{ loop.depth }}" + CHATML_BODY
    )
    assert check(_loop(body)) == ALL


@pytest.mark.parametrize("value", ["loop.length", "loop.revindex", "loop.revindex0"])
def test_loop_values_that_count_the_messages(value: str) -> None:
    # every pass reads how many messages there are: a prefix resumes at the first pass
    # (its mark comes before any count), and runs every pass again
    assert check(_loop("{{ " + value + " }}" + CHATML_BODY)) == ALL


def test_namespaces_the_loop_changes() -> None:
    start = "{% set ns = namespace(n=0, roles='') %}"
    body = "{% set ns.n = ns.n + 1 %}{% set ns.roles = ns.roles ~ m.role[0] %}{{ ns.n }}"
    end = "[{{ ns.n }} {{ ns.roles }}]" + GENERATION_PROMPT
    assert check(_loop(body + CHATML_BODY, start, end)) == ALL


def test_a_view_without_the_system_message() -> None:
    start = (
        "{% if messages[0].role == 'system' %}{% set system = messages[0].content %}"
        "{% set loop_messages = messages[1:] %}{% else %}{% set loop_messages = messages %}"
        "{% endif %}[{{ system }}]"
    )
    # the prefix of the system message alone resumes before the loop's first pass
    assert check(_loop(CHATML_BODY, start, over="loop_messages")) == ALL


def test_a_prefix_the_loop_walks_none_of() -> None:
    # Llama 3.1 with tools takes the first user message out for its own block: the prefix
    # up to it renders no pass, and resumes from before the first one, where the start
    # read no further; a start that reads the next message (or its count) runs again
    taken = (
        "{% set system = messages[0].content %}{% set first = messages[1].content %}"
        "{% set loop_messages = messages[2:] %}[{{ system }}|{{ first }}]"
    )
    # (the prefix of the system message alone shows no first message: rendered)
    assert check(_loop(CHATML_BODY, taken, over="loop_messages")) == ALL - 2 * 2
    # a start that reads the message after the prefix runs again: a field only the end
    # reads is the prefix's own; what it prints is not the whole's (and a count it prints
    # is no prefix's)
    peeks = taken + (
        "{% set ns = namespace(next=messages[2].role if messages | length > 2 else 'none') %}"
    )
    end = "({{ ns.next }})" + GENERATION_PROMPT
    assert check(_loop(CHATML_BODY, peeks, end, over="loop_messages")) == ALL - 2 * 2
    printed = taken + "{% if messages | length > 2 %}{{ messages[2].role }}{% endif %}"
    assert check(_loop(CHATML_BODY, printed, over="loop_messages")) == ALL - 2 * 2 * 2
    counted = taken + "({{ messages | length }})"
    assert check(_loop(CHATML_BODY, counted, over="loop_messages")) == 2 * 2
    # a loop that looks at its first message before the pass (`loop.length`, a filter on
    # the walk) gives the prefix without passes nothing to resume at
    length = "{{ loop.length }}" + CHATML_BODY
    assert check(_loop(length, taken, over="loop_messages")) == ALL - 2 * 2
    # the end shows the messages it did not walk: a prefix's own
    end = "{% if loop_messages | length == 0 %}(none){% endif %}" + GENERATION_PROMPT
    assert check(_loop(CHATML_BODY, taken, end, over="loop_messages")) == ALL - 2 * 2


def test_a_variable_the_end_assigns_is_unset_in_the_loop() -> None:
    # jinja's own rule: a name the template assigns at its top level hides the one given
    body = "{{ later is defined }}{{ later }}" + CHATML_BODY
    end = "{% set later = 'L' %}{{ later }}" + GENERATION_PROMPT
    with pytest.warns(UnusedVariableWarning, match="never reads 'later'"):
        assert check(_loop(body, end=end), later="given") == ALL
    assert check(_loop(body, end=end)) == ALL


def test_a_variable_assigned_only_when_not_given() -> None:
    start = "{% if budget is not defined %}{% set budget = -1 %}{% endif %}"
    body = "{{ budget }}" + CHATML_BODY
    assert check(_loop(body, start), budget=0) == ALL
    assert check(_loop(body, start)) == ALL


def test_the_template_s_own_generation_prompt_flag_and_messages() -> None:
    # tencent's Hy3 sets add_generation_prompt when it is not defined: a name the template
    # assigns at its top level hides the one given, so it is never defined there
    start = "{% if add_generation_prompt is not defined %}{% set add_generation_prompt = false %}{% endif %}"
    assert check(_loop(CHATML_BODY, start)) == ALL
    # Llama 3.1 takes the system message out of the messages it loops over
    # (the prefix of the system message alone resumes before the loop's first pass)
    start = "{% if messages[0].role == 'system' %}{% set messages = messages[1:] %}{% endif %}"
    assert check(_loop(CHATML_BODY, start)) == ALL


def test_a_variable_read_before_the_start_assigns_it() -> None:
    start = "[{{ mode }}]{% set mode = 'm' %}"
    assert check(_loop("{{ mode }}" + CHATML_BODY, start), mode="given") == ALL


def test_a_macro_that_counts_the_messages_on_the_last_pass() -> None:
    # the watched render never calls it where a prefix does: the resumed pass reads past its
    # own messages, is given up and the prefix rendered from the start
    start = "{% macro total() %}{{ messages | length }}{% endmacro %}"
    body = CHATML_BODY + "{% if loop.last %}({{ total() }}){% endif %}"
    assert check(_loop(body, start)) == 2 * 2  # the whole conversation's, which reads it all


def test_a_macro_that_reads_the_first_message() -> None:
    start = "{% macro first() %}{{ messages[0].role }}{% endmacro %}"
    assert check(_loop("{{ first() }}" + CHATML_BODY, start)) == ALL


def test_a_scan_for_the_last_user_message() -> None:
    # Qwen3's scan: it reads every message, and leaves the same state in every prefix that
    # contains the user's message, so those resume after running the scan again
    start = (
        "{% set ns = namespace(last=messages|length - 1, open=true) %}"
        "{% for m in messages[::-1] %}{% set i = messages|length - 1 - loop.index0 %}"
        "{% if ns.open and m.role == 'user' %}{% set ns.open = false %}{% set ns.last = i %}"
        "{% endif %}{% endfor %}"
    )
    body = "{% if loop.index0 > ns.last %}*{% endif %}" + CHATML_BODY
    messages = [CONVERSATION[1]] + [m for m in CONVERSATION if m["role"] not in ("user", "system")]
    assert check(_loop(body, start), messages) == 2 * 2 * len(messages)
    # two user messages: the prefixes before the second leave another index, which the
    # passes only compare with their own (a traced value): they resume at the first pass
    # the comparison changes. The system message's own prefix leaves the flag `open` as
    # well (a bool in a namespace is not traced): rendered from the start
    assert check(_loop(body, start)) == ALL - 2 * 2


def test_a_count_of_the_messages_in_the_start() -> None:
    start = "{% set count = messages | length %}"
    # a different count in each prefix: the length is a traced value, and the passes print
    # it (a use no other value replays): each prefix resumes at the loop's first pass, with
    # its own count
    assert check(_loop("{{ count }}" + CHATML_BODY, start)) == ALL
    # passes that only compare it resume where the comparison changes
    assert check(_loop("{% if count > 2 %}+{% endif %}" + CHATML_BODY, start)) == ALL
    # a statement that computes with it runs again on each prefix
    start = "{% set last = messages | length - 1 %}"
    assert check(_loop("{% if loop.index0 == last %}${% endif %}" + CHATML_BODY, start)) == 2 * 2
    # the same answer from 3 messages on
    start = "{% set many = messages | length > 2 %}"
    assert check(_loop("{{ many }}" + CHATML_BODY, start)) == 2 * 2 * (len(CONVERSATION) - 2)


@pytest.mark.parametrize(
    "expression",
    [
        "messages | tojson",
        "messages | string",
        "messages | map(attribute='role') | join(',')",
        "messages | selectattr('role', 'equalto', 'tool') | list | length",
        "messages | last",
        "messages | reverse | first",
        "messages | batch(3) | list | length",
        "messages | slice(2) | list | length",
        "messages | sort(attribute='role') | first",
        "messages | unique(attribute='role') | list | length",
        "messages | count",
        "'%s' | format(messages)",
        "messages ~ ''",
        "[1] + messages",
        "messages + [1]",
        "messages * 2",
        "messages[-1]",
        "messages[1:3]",
        "messages[::2]",
        "messages == []",
        "[] == messages",
        "messages[0] in messages",
        "messages.index(messages[0])",
        "messages.count(messages[0])",
        "messages[100] is defined",
        "messages is sequence",
        "(messages | list)[-1]",
    ],
)
def test_reads_of_the_whole_conversation_in_the_start(expression: str) -> None:
    start = "{% set seen = " + expression + " %}"
    source = _loop(CHATML_BODY, start, "[{{ seen }}]" + GENERATION_PROMPT)
    check(source)


def test_a_loop_over_a_slice_from_a_variable() -> None:
    start = "{% set first = 1 if messages[0].role == 'system' else 0 %}"
    source = _loop(CHATML_BODY, start, over="messages[first:]")
    assert check(source) == ALL
    assert check(_loop(CHATML_BODY, over="messages[2:]")) == ALL - 2 * 2


def test_continue_and_break() -> None:
    skip = _loop("{% if m.role == 'tool' %}{% continue %}{% endif %}" + CHATML_BODY)
    assert check(skip) == ALL
    # a break stops the whole render's loop: the prefixes past it have no pass to resume at
    stop = _loop("{% if m.role == 'tool' %}{% break %}{% endif %}" + CHATML_BODY)
    assert check(stop) == 2 * 2 * 6


GEMMA_RESULTS = (  # Gemma 4: a call shows the results that follow it
    "{% set scan = namespace(stopped=false) %}"
    "{% for k in range(loop.index0 + 1, messages | length) %}{% if scan.stopped %}"
    "{% elif messages[k].role != 'tool' %}{% set scan.stopped = true %}"
    "{% else %}<{{ messages[k].content }}>{% endif %}{% endfor %}"
)
LOOK_AHEAD = (  # gpt-oss: a call's reasoning is shown unless a final reply comes later
    "{% set later = namespace(final=false) %}{% for x in messages[loop.index:] %}"
    "{% if x.role == 'assistant' and 'tool_calls' not in x %}{% set later.final = true %}"
    "{% endif %}{% endfor %}{{ 1 if later.final else 0 }}"
)


def test_a_loop_that_looks_ahead_is_followed_until_its_last_change() -> None:
    assert check(_loop(LOOK_AHEAD + CHATML_BODY)) == ALL
    # its reads after the final reply it found change nothing: a prefix resumes from the
    # pass of the last final reply before it (at most four back here), not from the first
    # pass that looked ahead
    _assert_resumed_within(_loop(LOOK_AHEAD + CHATML_BODY), 4)


def _assert_resumed_within(source: str, back: int) -> None:
    """Every prefix of a long conversation is its render, resumed at most ``back`` passes
    before its end."""
    template = ChatTemplate(source)
    long = CONVERSATION * 6
    prefixes = PrefixRenders.of(template, long)
    with prefixes.resuming():
        for n in range(back + 1, len(long) + 1):
            parts = prefixes.render_parts(n, False)
            assert parts is not None
            kept, rest = parts
            assert prefixes.text[:kept] + rest == template.render(long[:n])
            assert kept >= len(template.render(long[: n - back]))
    assert prefixes.rendered == 0


@pytest.mark.parametrize(
    "body",
    [
        # followed: what they print, a count that changes with every user message, a
        # loop filter (its tests are reads of the pass they let through), a break (the
        # reads until it all count)
        "{% for x in messages[loop.index:] %}{% if x.role == 'tool' %}<{{ x.content }}>"
        "{% endif %}{% endfor %}",
        "{% set c = namespace(n=0) %}{% for x in messages[loop.index:] %}"
        "{% if x.role == 'user' %}{% set c.n = c.n + 1 %}{% endif %}{% endfor %}{{ c.n }}",
        "{% for x in messages[loop.index:] if x.role == 'user' %}U{% endfor %}",
        "{% for x in messages[loop.index:] %}{% if x.role == 'user' %}{% break %}{% endif %}"
        "{{ x.role[0] }}{% endfor %}",
        # followed, what the passes before gave of `loop`
        "{% set here = loop.index0 %}{% set a = namespace(at=-1) %}{% for x in messages %}"
        "{% if x.role == 'assistant' and loop.index0 < here %}{% set a.at = loop.index0 %}"
        "{% endif %}{{ loop.cycle('', '') }}{% endfor %}{{ a.at }}",
        # followed, their printing statements marked where what they print is buffered (a
        # macro's output is its own until it returns, a captured or filtered block's too)
        "{{ roles_from(loop.index) }}",
        "{{ call_named(m) }}",
        "{% set roles %}{% for x in messages[loop.index:] %}{{ x.role[0] }}{% endfor %}"
        "{% endset %}{{ roles }}",
        "{% filter upper %}{% for x in messages[loop.index:] %}{{ x.role[0] }}{% endfor %}"
        "{% endfilter %}",
        # followed, a count only its own passes read not counted as a change (Cohere's
        # number of a result's call), but where the count is kept beyond them
        "{{ call_number(m) }}",
        "{{ counted_twice(loop.index) }}",
        "{% if loop.first %}{{ kept_count(1) }}{% endif %}",
        # followed, a range up to the messages' length (Gemma 4 walks a call's results by
        # index): a prefix must reach past the last index whose pass did anything
        GEMMA_RESULTS,
        "{% for k in range(messages | length) %}{% if k == 3 %}3{% endif %}{% endfor %}",
        "{% for k in range(loop.index0, messages | length) %}"
        "{% if messages[k].role == 'user' %}{% break %}{% endif %}.{% endfor %}",
        "{% set here = loop.index0 %}{% for k in range(here, messages | length) %}"
        "{% if k > here + 2 %}{% break %}{% endif %}.{% endfor %}",
        # a range up to the length put to other uses, or kept
        "{{ range(loop.index0, messages | length) | list | length }}",
        "{{ 2 in range(messages | length) }}{{ range(messages | length) }}",
        "{{ range(loop.index0, messages | length).stop }}"
        "{{ range(2, messages | length).plain is defined }}"
        "{{ range(messages | length) == range(messages | length - 1) }}",
        "{% for k in kept_range if k > 4 %}{{ k }}{% endfor %}",
        # not followed: what a pass after the last change sees of the passes after it
        # (where it decides what it prints), or of their absence
        "{% for x in messages[loop.index:] %}{% if loop.last %}{{ x.role }}{% endif %}{% endfor %}",
        "{% for x in messages[loop.index:] %}{{ loop.length if loop.first }}{% endfor %}",
        "{% for x in messages[loop.index:] %}{{ loop.revindex0 if loop.first }}{% endfor %}",
        "{% for x in messages[loop.index:] %}{% else %}none later{% endfor %}",
    ],
)
def test_loops_that_look_ahead(body: str) -> None:
    start = (
        "{% macro roles_from(i) %}{% for x in messages[i:] %}{{ x.role[0] }}{% endfor %}"
        "{% endmacro %}"
        # Solar's: the name of a tool result's call, printed where it is found
        "{% macro call_named(m) %}{% for x in messages %}{% if x.tool_calls %}"
        "{% for c in x.tool_calls %}{% if c.id == m.tool_call_id %}{{ c.function.name }}"
        "{% endif %}{% endfor %}{% endif %}{% endfor %}{% endmacro %}"
        "{% macro call_number(m) %}{% set count = namespace(n=0) %}"
        "{% set seen = namespace(done=false) %}{% for x in messages %}{% if x.tool_calls %}"
        "{% for c in x.tool_calls %}{% if c.id == m.tool_call_id and not seen.done %}"
        "{{ count.n }}{% set seen.done = true %}{% endif %}{% set count.n = count.n + 1 %}"
        "{% endfor %}{% endif %}{% endfor %}{% endmacro %}"
        # a loop around it runs it again on the count it left
        "{% macro counted_twice(i) %}{% set count = namespace(n=0) %}{% for r in [1, 2] %}"
        "{% for x in messages[i:] %}{% if r == 2 and count.n == 5 %}5{% endif %}"
        "{% set count.n = count.n + 1 %}{% endfor %}{% endfor %}{% endmacro %}"
        # the count kept in another namespace, read after the loop
        "{% set keep = namespace(box=none) %}"
        "{% macro kept_count(i) %}{% set count = namespace(n=0) %}{% for x in messages[i:] %}"
        "{% set keep.box = count %}{% set count.n = count.n + 1 %}{% endfor %}{% endmacro %}"
    )
    start += "{% set kept_range = range(1, messages | length) %}"
    end = "{{ keep.box.n if keep.box }}" + GENERATION_PROMPT
    check(_loop(body + CHATML_BODY, start, end), CONVERSATION * 2)


SHIFTED_LENGTH = (  # Solar: a tool result closes the results unless another follows
    "{% if m.role == 'tool' and loop.index0 < (messages | length - 1) "
    "and messages[loop.index0 + 1].role == 'tool' %}+{% endif %}"
)


def test_the_length_shifted_by_a_constant_is_compared_as_the_length() -> None:
    # `messages | length - 1` compared in every pass: a use a prefix's length replays
    assert check(_loop(SHIFTED_LENGTH + CHATML_BODY)) == ALL
    _assert_resumed_within(_loop(SHIFTED_LENGTH + CHATML_BODY), 1)
    # kept in a namespace, compared in a later pass, printed by the end
    body = (
        "{% if loop.first %}{% set ns.n = messages | length - 2 %}{% endif %}"
        "{% if loop.index0 == ns.n %}={% endif %}" + CHATML_BODY
    )
    start = "{% set ns = namespace(n=0) %}"
    source = _loop(body, start, "{{ ns.n + 1 }}" + GENERATION_PROMPT)
    assert check(source, CONVERSATION * 2) == 2 * 2 * len(CONVERSATION * 2)
    # read by the end alone, whose text is kept for the prefixes that show it the same
    body = "{% if loop.first %}{% set ns.n = messages | length - 2 %}{% endif %}" + CHATML_BODY
    source = _loop(body, start, "{{ ns.n }}" + GENERATION_PROMPT)
    assert check(source, CONVERSATION * 2) == 2 * 2 * len(CONVERSATION * 2)


def test_a_range_up_to_the_length_is_walked_as_far_as_it_mattered() -> None:
    # Gemma 4's call shows the results after it, walking the messages by index up to their
    # length: its passes after the first message that is no result do nothing
    _assert_resumed_within(_loop(GEMMA_RESULTS + CHATML_BODY), 2)


def test_a_count_only_its_loop_reads_is_not_a_change() -> None:
    # Cohere numbers a tool result's call by counting the calls before it, walking on to
    # the end: its passes after the call it found set only the count, which nothing else
    # reads; a prefix resumes at its last pass (or none)
    macro = (
        "{% macro call_number(m) %}{% set count = namespace(n=0) %}"
        "{% set seen = namespace(done=false) %}{% for x in messages %}{% if x.tool_calls %}"
        "{% for c in x.tool_calls %}{% if c.id == m.tool_call_id and not seen.done %}"
        "{{ count.n }}{% set seen.done = true %}{% endif %}{% set count.n = count.n + 1 %}"
        "{% endfor %}{% endif %}{% endfor %}{% endmacro %}"
    )
    body = "{% if m.role == 'tool' %}{{ call_number(m) }}{% endif %}" + CHATML_BODY
    _assert_resumed_within(_loop(body, macro), 1)


# Nemotron Nano v2's start: the last message, when the assistant's, is shown by the end
DROP = (
    "{% set ns = namespace() %}"
    "{% set messages = messages[1:] if messages[0].role == 'system' else messages %}"
    "{% if messages[-1].role == 'assistant' %}{% set ns.final = messages[-1].content %}"
    "{% set ns.calls = messages[-1].tool_calls or [] %}{% set messages = messages[:-1] %}"
    "{% endif %}"
)
SHOW_FINAL = (
    "{% if ns.final is defined %}<|im_start|>assistant\n{{ ns.final }}{{ ns.calls | tojson }}"
    "<|im_end|>\n{% endif %}"
)
ASKED = [*CONVERSATION[:-1], {"role": "user", "content": "Q3"}]  # (ends on a question)


@pytest.mark.parametrize(
    ("start", "body", "end", "answered", "asked"),
    [
        # every prefix but the system message alone (which the template refuses); on a
        # conversation that ends on a question, those up to an answer resume from the
        # render up to the last answer (the whole's cuts none: PrefixRenders)
        (DROP, "", SHOW_FINAL, ALL - 4, ALL - 4),
        (
            DROP,
            "{% if not loop.last and messages[loop.index0 + 1].role == 'tool' %}>{% endif %}",
            SHOW_FINAL,
            ALL - 4,
            ALL - 4,
        ),
        (DROP, "", SHOW_FINAL + "{{ ns }}", ALL - 4, ALL - 4),  # the end may read it whole
        (DROP, "{{ messages | length }}", SHOW_FINAL, ALL - 4, ALL - 4),
        # cut in every prefix
        ("{% set messages = messages[:-1] %}", "", "{{ messages | length }}", ALL, ALL),
        ("{% set messages = messages[1:-1] %}", "{{ loop.index0 }}", "", ALL, ALL),
        (
            "{% set hist = messages %}{% set messages = messages[:-1] %}",
            "{{ hist | length }}",
            "",
            ALL,
            ALL,
        ),
        # a field the loop reads, or a cut view it takes otherwise: from the start (the
        # prefixes that cut the same way excepted, where the view read is the same)
        (DROP, "{% if ns.final is defined %}L{% endif %}", SHOW_FINAL, 4, 16),
        (DROP + "{% set ns.h = messages %}", "{{ ns.h | length }}", SHOW_FINAL, 4, 4),
        (DROP + "{% set rest = messages[1:] %}", "{{ rest | length if rest }}", SHOW_FINAL, 4, 16),
        (
            DROP + "{% set u = messages | selectattr('role', 'equalto', 'user') | list %}",
            "{{ u | length }}",
            SHOW_FINAL,
            16,
            16,
        ),
        # a field the loop sets too
        (DROP, "{% set ns.final = m.role %}", "{{ ns.final }}", 4, 16),
        # a list that is not the cut view's first messages
        (
            "{% if messages[-1].role == 'assistant' %}{% set messages = messages[:-1] %}"
            "{% else %}{% set messages = messages[1:] + messages[:1] %}{% endif %}",
            "",
            "",
            16,
            12,
        ),
        # a variable by the name of a field only the end reads, set or not
        (
            "{% set ns = namespace() %}{% set messages = messages[0:] %}"
            "{% if messages[-1].role == 'assistant' %}"
            "{% set ns.final = 1 %}{% set final = 2 %}{% set messages = messages[:-1] %}"
            "{% endif %}",
            "",
            "{{ final | default('-') }}{{ ns.final | default('-') }}",
            12,
            ALL,
        ),
    ],
)
def test_messages_cut_short_of_the_end(
    start: str, body: str, end: str, answered: int, asked: int
) -> None:
    # a prefix's own start, run again, cuts its messages where it does (the last one an
    # assistant's: shorter than as the whole render cut them, or not at all): its loop
    # walks as many of them, and its end sees the fields it set that only the end reads
    source = _loop(body + CHATML_BODY, start, end + GENERATION_PROMPT)
    assert check(source) == answered
    assert check(source, ASKED) == asked


@pytest.mark.parametrize(
    ("read", "messages", "resumed"),
    [
        # the prefix of the first answer, cut to none, refuses `messages[0]`
        ("messages[0].role", [CONVERSATION[2], CONVERSATION[6]], 2 * 2),
        # the prefix up to the first answer cuts it: its view has no third message (nor
        # have the two before it); the four from the next question on resume
        ("messages[2].role", CONVERSATION, 2 * 2 * 4),
    ],
)
def test_a_start_that_reads_its_cut_view_past_the_prefix_s_own(
    read: str, messages: list[dict[str, Any]], resumed: int
) -> None:
    # a prefix's own cut is shorter than the whole's: a statement after the cut that reads
    # the view where the prefix's ends (before message k, so not run again) reads what the
    # prefix does not have
    start = (
        "{% if messages[-1].role == 'assistant' %}{% set messages = messages[:-1] %}"
        "{% endif %}{% set first = " + read + " %}[{{ first }}]"
    )
    assert check(_loop(CHATML_BODY, start), messages) == resumed


@pytest.mark.parametrize(("cut", "watched"), [("", 1), ("{% set rest = messages[:-1] %}", 2)])
def test_the_render_up_to_the_last_answer_is_watched_for_a_start_that_cuts(
    cut: str, watched: int
) -> None:
    # a start whose prefixes differ (their last message): they render from the start; the
    # render up to the last answer is watched (once) only where the start cuts
    template = ChatTemplate(
        _loop("{{ last }}" + CHATML_BODY, "{% set last = messages[-1].content %}" + cut)
    )
    expected = [_render(template, ASKED[:n], False) for n in range(1, len(ASKED))]
    with _runs_of(template) as runs:
        prefixes = PrefixRenders.of(template, ASKED, add_generation_prompt=True)
        with prefixes.resuming():
            assert [prefixes.render(n, False) for n in range(1, len(ASKED))] == expected
    assert runs[0] == watched + prefixes.rendered


CUT_LAST = (
    "{% if messages[-1].role == 'assistant' %}{% set ns.final = messages[-1].content %}"
    "{% set messages = messages[:-1] %}{% endif %}"
)


@pytest.mark.parametrize(
    ("start", "body", "end"),
    [
        # read before the end: by key, by `attr`, with the whole namespace
        ("", "{{ ns['final'] | default('') }}", ""),
        ("", "{{ ns | attr('final') }}", ""),
        ("", "{{ ns }}", ""),
        # set after the statements that run again, or by a macro the loop calls
        ("{% set ns.final = 'late' %}", "", ""),
        ("{% macro mark() %}{% set ns.final = 'm' %}{% endmacro %}", "{{ mark() }}", ""),
    ],
)
def test_fields_that_not_only_the_end_reads(start: str, body: str, end: str) -> None:
    # the prefixes whose start sets them otherwise render from the start
    source = _loop(
        body + CHATML_BODY,
        "{% set ns = namespace() %}" + CUT_LAST + start,
        end + "{{ ns.final | default('-') }}" + GENERATION_PROMPT,
    )
    assert check(source) == 4


def test_fields_only_the_end_reads_among_many_namespaces() -> None:
    # past 16 namespaces a resumed prefix puts back only those set since the last one
    # resumed: the fields a prefix had of its own are put back too
    many = "".join(f"{{% set s{i} = namespace(v={i}) %}}" for i in range(17))
    start = many + "{% set ns = namespace() %}" + CUT_LAST
    end = "{{ ns.final | default('-') }}{{ s16.v }}" + GENERATION_PROMPT
    assert check(_loop(CHATML_BODY, start, end)) == ALL


def test_a_field_of_a_namespace_made_in_a_list_is_read_by_any_name() -> None:
    # the loop reads the field through another name than the one the start sets it on
    start = (
        "{% set box = [namespace()] %}{% if messages[-1].role == 'assistant' %}"
        "{% for b in box %}{% set b.final = messages[-1].content %}{% endfor %}"
        "{% set messages = messages[:-1] %}{% endif %}"
    )
    for body in (
        "{% for c in box %}{{ c.final | default('') }}{% endfor %}",
        "{% for c in box %}{{ c['final'] | default('') }}{% endfor %}",
    ):
        assert check(_loop(body + CHATML_BODY, start)) == 4


def _ends_worked_out(source: str) -> int:
    """How many texts of the template's end the prefixes of CONVERSATION, both flags,
    worked out from its watched render (the others took one of them)."""
    prefixes = PrefixRenders.of(ChatTemplate(source), CONVERSATION)
    with prefixes.resuming():
        for n in range(1, len(CONVERSATION)):
            for flag in (False, True):
                prefixes.render(n, flag)
    watch = prefixes._watched[False][0]  # type: ignore[index]
    return len(watch.ends)


_HOLDERS = (
    "{% set ns = namespace(last='-') %}{% set box = [ns] %}{% set named = {'n': ns} %}"
    "{% set pair = ('p', [ns]) %}{% macro last() %}{{ ns.last }}{% endmacro %}"
    "{% set plain = ['a', ('b', {'c': 1.5, 'd': none})] %}"
)


@pytest.mark.parametrize(
    "end",
    [
        "{{ ns.last }}",
        "{{ box[0].last }}",
        "{{ named.n.last }}",
        "{{ pair[1][0].last }}",
        "{{ last() }}",
        "{{ box | map(attribute='last') | join }}",
    ],
)
def test_an_end_that_reaches_a_field_the_passes_set(end: str) -> None:
    # every pass sets the field: a prefix's end sees its own last message through any
    # name, container or macro that holds the namespace
    source = _loop(
        "{% set ns.last = m.content %}" + CHATML_BODY,
        _HOLDERS,
        end + GENERATION_PROMPT,
    )
    assert check(source) == ALL


def test_an_end_that_reaches_no_namespace_is_run_once_per_flag() -> None:
    # the passes set a field the end cannot reach: every prefix ends with the same text
    source = _loop(
        "{% set ns.last = m.content %}" + CHATML_BODY,
        _HOLDERS,
        "{{ plain | string }}{{ plain[1][1].c }}" + GENERATION_PROMPT,
    )
    assert check(source) == ALL
    assert _ends_worked_out(source) == 2


_COUNTED = (  # an int the start leaves in a field, other in each prefix (traced)
    "{% set ns = namespace(count=0) %}{% for m in messages %}{% if m.role == 'user' %}"
    "{% set ns.count = ns.count + 1 %}{% endif %}{% endfor %}"
    "{% macro counted() %}{{ ns.count }}{% endmacro %}"
)


@pytest.mark.parametrize(
    ("start", "end"),
    [
        ("", "{{ ns.count }}"),
        ("", "{{ counted() }}"),
        ("{% set box = [ns] %}", "{{ box[0].count }}"),
        ("{% set outer = namespace(inner=ns) %}", "{{ outer.inner.count }}"),
        ("{% set outer = namespace(inner=[ns]) %}", "{{ outer.inner[0].count }}"),
        ("{% set count = ns.count %}", "{{ count }}"),
        ("{% set before = ns.count - 1 %}", "{{ before }}"),
        ("{% set ns.flag = add_generation_prompt %}", "{{ ns.flag }}"),
    ],
)
def test_an_end_that_sees_a_count_of_the_start(start: str, end: str) -> None:
    # each prefix's end shows its own count, however it reaches it
    assert check(_loop(CHATML_BODY, _COUNTED + start, end + GENERATION_PROMPT)) > 0


_LABELLED = "{% set ns = namespace(label='x') %}"


@pytest.mark.parametrize(
    ("body", "start", "end"),
    [
        # the end reaches no namespace, or one the count is not in
        ("", _COUNTED + "{% set label = 'x' %}", "{{ label }}"),
        ("", _COUNTED + "{% set other = namespace(label='x') %}", "{{ other.label }}"),
        (
            "",
            _COUNTED + "{% set other = namespace(label='x') %}{% set box = [other] %}",
            "{{ box[0].label }}",
        ),
        # the passes set another field of the namespace the end reads one field of (its
        # text is kept by the fields it reads, not by the namespace's)
        ("{% set ns.last = m.content %}", _LABELLED, "{{ ns.label }}"),
        ("{% set ns.last = m.content %}", _LABELLED, "{{ ns.label }}{{ ns.label | length }}"),
        # or a field holding a list, a namespace or nothing yet, which the end does not read
        ("{% set ns.seen = [m.content] %}", _LABELLED, "{{ ns.label }}"),
        ("{% set ns.inner = namespace(x=m.content) %}", _LABELLED, "{{ ns.label }}"),
        ("{% set ns.last = m.content %}", _LABELLED, "{{ ns.unset is defined }}"),
    ],
)
def test_an_end_that_sees_the_same_is_run_once_per_flag(body: str, start: str, end: str) -> None:
    # its text is the same for every prefix with the same flag
    source = _loop(body + CHATML_BODY, start, end + GENERATION_PROMPT)
    assert check(source) == ALL
    assert _ends_worked_out(source) == 2


@pytest.mark.parametrize(
    ("body", "end"),
    [
        # what the end reads changes from pass to pass: a plain value, in a list, in a
        # namespace the field holds (the same namespace, its field set again), the
        # namespace taken whole or by key
        ("{% set ns.last = m.content %}", "{{ ns.last }}"),
        ("{% set ns.seen = [m.content] %}", "{{ ns.seen[0] }}"),
        ("{% set inner.x = m.content %}", "{{ ns.inner.x }}"),
        ("{% set ns.last = m.content %}", "{{ ns.label }}{{ ns['last'] }}"),
        ("{% set ns.last = m.content %}", "{{ ns.label }}{{ ns | attr('last') }}"),
        ("{% set ns.last = m.content %}", "{{ named.n.last }}"),
        ("{% set ns.last = m.content %}", "{{ ns.label }}{% set alias = ns %}{{ alias.last }}"),
    ],
)
def test_an_end_that_reads_a_field_the_passes_set(body: str, end: str) -> None:
    start = (
        "{% set inner = namespace(x='-') %}{% set ns = namespace(label='x', inner=inner) %}"
        "{% set named = {'n': ns} %}"
    )
    source = _loop(body + CHATML_BODY, start, end + GENERATION_PROMPT)
    assert check(source) == ALL
    assert _ends_worked_out(source) > 2


def test_an_end_that_reads_a_field_and_a_traced_variable() -> None:
    # the flag, taken into a variable of the start (traced), keys the end's text with the
    # field it reads: once per flag
    start = "{% set flag = add_generation_prompt %}{% set ns = namespace(label='x') %}"
    end = "{{ ns.label }}{% if flag %}<|im_start|>assistant\n{% endif %}"
    source = _loop("{% set ns.last = m.content %}" + CHATML_BODY, start, end)
    assert check(source) == ALL
    assert _ends_worked_out(source) == 2


def test_the_fields_an_end_reads() -> None:
    import jinja2

    end = (
        "{{ ns.a }}{% if ns.b %}{{ other.c }}{% endif %}{{ whole.d }}{{ whole }}"
        "{{ keyed['e'] }}{% set ns.f = 1 %}{{ f(ns2.g) }}{% for x in xs %}{{ x.h }}{% endfor %}"
    )
    tree = jinja2.Environment().parse(end)
    assert resume._attributes_read(tree.body) == {
        "ns": frozenset({"a", "b"}),
        "other": frozenset({"c"}),
        "ns2": frozenset({"g"}),
        "x": frozenset({"h"}),
    }


def test_the_namespaces_values_hold() -> None:
    import jinja2.utils
    from markupsafe import Markup

    space, other = jinja2.utils.Namespace(), jinja2.utils.Namespace()
    made = {id(space): 3}
    shared: list[Any] = [1]
    for _ in range(64):  # 2**64 paths, 65 lists: each looked at once
        shared = [shared, (shared, {"k": shared})]
    assert resume._reached(iter([shared, "s", Markup("m"), 1, 1.5, True, None]), made) == set()
    for held in (space, [space], ("t", [space]), {"k": space}, {(1, space): 1}):
        assert resume._reached(iter([["plain", held]]), made) == {3}
    traced = resume.Watch([]).traced_value(1)
    for unknown in (other, [other], len, traced, [0] * 5000):  # (more items than it looks at)
        assert resume._reached(iter([["plain", unknown]]), made) is None


def test_a_field_only_the_end_reads_set_by_a_loop_of_the_start() -> None:
    # each prefix's own last question, from the scan's mark at its end
    start = (
        "{% set ns = namespace() %}{% for m in messages %}{% if m.role == 'user' %}"
        "{% set ns.q = m.content %}{% endif %}{% endfor %}"
    )
    end = "{{ ns.q | default('-') }}" + GENERATION_PROMPT
    assert check(_loop(CHATML_BODY, start, end)) == ALL


@pytest.mark.parametrize("traced", [True, False])
def test_the_render_up_to_the_last_answer_of_a_template_that_reads_the_flag_early(
    traced: bool,
) -> None:
    # as from the whole render: the flag traced in it, or a render with the prefix's own
    # (`is sameas` keeps values untraced)
    start = "{% set ns = namespace() %}" + CUT_LAST + "{% if add_generation_prompt %}G{% endif %}"
    body = "" if traced else "{% if ns is sameas ns %}{% endif %}"
    source = _loop(body + CHATML_BODY, start)
    assert check(source, ASKED) == ALL - (0 if traced else 4)


def test_two_names_for_a_cut_view_that_a_prefix_has_as_two_lists() -> None:
    # the whole render's `b` is its `a`; a prefix that ends on a question has `b` longer
    start = "{% set a = messages[:-1] %}"
    start += "{% set b = a if messages[-1].role == 'assistant' else messages %}"
    source = _loop(CHATML_BODY, start, "{{ b[-1].role }}" + GENERATION_PROMPT, over="a")
    assert check(source) == 12  # (the prefixes that end on a question render from the start)
    assert check(source, ASKED) == ALL


COUNTED_BODY = "{% set m = messages[i] %}" + CHATML_BODY


@pytest.mark.parametrize(
    ("start", "body", "end", "count", "resumed"),
    [
        ("", COUNTED_BODY, "", "range(messages | length)", ALL),
        ("", COUNTED_BODY, "", "range(1, messages | length)", ALL),
        (
            "{% set first = 1 if messages[0].role == 'system' else 0 %}",
            COUNTED_BODY,
            "",
            "range(first, messages | length)",
            ALL,
        ),
        ("", "{% if loop.last %}!{% endif %}" + COUNTED_BODY, "", "range(messages | length)", ALL),
        (
            "",
            "{% if i + 1 < messages | length and messages[i + 1].role == 'tool' %}>{% endif %}"
            + COUNTED_BODY,
            "",
            "range(messages | length)",
            ALL,
        ),
        (
            "",
            "{% if i == messages | length - 1 %}L{% endif %}" + COUNTED_BODY,
            "",
            "range(messages | length)",
            ALL,
        ),
        (
            "",
            "{{ loop.length }}{{ loop.revindex }}" + COUNTED_BODY,
            "",
            "range(messages | length)",
            ALL,
        ),
        # Reka Edge's: the prompt built in a namespace field, printed by the end
        (
            "{% set ns = namespace(out='') %}",
            "{% set ns.out = ns.out ~ messages[i].role ~ ';' %}",
            "{{ ns.out }}",
            "range(messages | length)",
            ALL,
        ),
        (
            "{% set rest = messages[1:] %}",
            "{% set m = rest[i] %}" + CHATML_BODY,
            "",
            "range(rest | length)",
            ALL,
        ),
        # counts the loop cannot walk as the messages: not the length, of a selection
        ("", COUNTED_BODY, "", "range(messages | length - 1)", 0),
        (
            "{% set u = messages | selectattr('role', 'equalto', 'user') | list %}",
            "[{{ i }}]",
            "",
            "range(u | length)",
            0,
        ),
        # passes that are not one per index, or a start evaluated twice would run twice
        ("", COUNTED_BODY, "", "range(messages | length) if i != 2", 0),
        ("", COUNTED_BODY, "", "range(messages | length) %}{% else %}-", 0),
        (
            "{% set ns = namespace(n=0) %}{% macro bump() %}{% set ns.n = ns.n + 1 %}0"
            "{% endmacro %}",
            COUNTED_BODY + "{{ ns.n }}",
            "",
            "range(bump() | int, messages | length)",
            0,
        ),
        (
            "{% set ns = namespace(n=0) %}{% macro bump() %}{% set ns.n = ns.n + 1 %}0"
            "{% endmacro %}",
            "{% set m = messages[i] if i < messages | length else {} %}{{ ns.n }}",
            "",
            "range((messages + [bump()]) | length)",
            0,
        ),
    ],
)
def test_a_main_loop_over_the_indexes_of_the_messages(
    start: str, body: str, end: str, count: str, resumed: int
) -> None:
    # `for i in range(messages | length)`: each index's pass is its message's
    source = f"{start}{{% for i in {count} %}}{body}{{% endfor %}}{end}{GENERATION_PROMPT}"
    assert check(source) == resumed


USERS = "{% set users = messages | selectattr('role', 'equalto', 'user') | list %}"


def test_a_selection_of_the_messages_kept_and_unread_is_each_prefix_s_own() -> None:
    # Mistral's templates keep the user messages for a tools block they show only with
    # tools: choosing them reads no message, and each prefix has its own choice
    assert check(_loop(CHATML_BODY, USERS)) == ALL
    # a selection's count compared in the start (Apriel 1.5: is there a system message?)
    start = "{% if messages | selectattr('role', 'equalto', 'system') | list | length == 0 %}"
    assert check(_loop(CHATML_BODY, start + "[default]{% endif %}")) == ALL
    # as a plain loop: at its own last pass, or none
    _assert_resumed_within(_loop(CHATML_BODY, USERS), 1)


@pytest.mark.parametrize(
    ("start", "body", "end"),
    [
        # read in the passes: by place, from the end, its count, walked
        (USERS, "{% if m == users[-1] %}!{% endif %}", ""),
        (USERS, "{% if users and m == users[0] %}first{% endif %}", ""),
        (USERS, "{% if loop.index0 < users | length %}<{% endif %}", ""),
        (USERS, "{% if users | length - 1 > loop.index0 %}>{% endif %}", ""),
        (USERS, "{% for u in users %}{{ u.content }}{% endfor %}", ""),
        (USERS, "{{ users | first | tojson }}", ""),
        # read in the start and the end
        (USERS + "{% set n = users | length - 1 %}[{{ n }}]", "", ""),
        (USERS + "{{ users[1].content if users | length > 1 }}", "", ""),
        (USERS, "", "{{ users | last }}{{ users | length }}"),
        (USERS, "", "{{ users }}"),
        # kept in a namespace, or chosen again from a selection or a view
        (
            "{% set ns = namespace(u=messages | selectattr('role', 'equalto', 'user') | list) %}",
            "{{ ns.u | length }}{% if m in ns.u %}u{% endif %}",
            "{{ ns.u | tojson }}",
        ),
        (
            USERS + "{% set again = users | rejectattr('content', 'equalto', 'Q1') | list %}",
            "{{ again | length }}{% if again and m == again[0] %}*{% endif %}",
            "",
        ),
        (
            "{% set rest = messages[1:] | reject('none') | list %}",
            "{% if rest and m == rest[0] %}^{% endif %}{{ rest | length }}",
            "",
        ),
        # a test whose argument differs per prefix: its comparisons are the length's uses
        (
            "{% set n = messages | length %}"
            "{% set x = messages | selectattr('role', 'ne', n) | list %}",
            "{{ x | length }}",
            "",
        ),
        (
            "{% set n = messages | length %}"
            "{% set x = messages | map(attribute='content') | select('ne', 'Q' ~ n) | list %}",
            "{{ x | length }}",
            "",
        ),
        # walked by a range up to its count, by a loop of the start, sliced
        (USERS, "{% for i in range(users | length) %}{{ users[i].content }}{% endfor %}", ""),
        (
            USERS + "{% set ns = namespace(last='') %}"
            "{% for u in users %}{% set ns.last = u.content %}{% endfor %}",
            "{{ ns.last }}",
            "",
        ),
        (USERS, "{% for u in users[1:] %}{% if u == m %}+{% endif %}{% endfor %}", ""),
        # read at their places: one after the first user message, from the first pass on
        (USERS, "{{ users[1].content if users[1] is defined }}", ""),
        (USERS + "{% set later = users[1:] %}", "{{ later[0].content if later }}", ""),
        # its count, and the messages' own
        (USERS, "{{ messages | length }}/{{ users | length }}", ""),
        (USERS + "{% set later = users[1:] %}", "{% if later and m == later[0] %}2{% endif %}", ""),
        # walked by the main loop: no prefix resumes (a pass per chosen message)
        ("{% set said = messages | rejectattr('role', 'equalto', 'tool') | list %}", "", ""),
    ],
)
def test_selections_of_the_messages(start: str, body: str, end: str) -> None:
    over = "said" if "said =" in start else "messages"
    check(_loop(body + CHATML_BODY, start, end + GENERATION_PROMPT, over=over))


def test_a_template_cannot_write_the_followed_loop_s_guard() -> None:
    source = _loop("{% for x in messages | __chatcodec_inner_loop_guard %}{% endfor %}")
    assert ChatTemplate(source)._resume_plan() is None
    check(source)
    source = _loop(CHATML_BODY, "{% set u = messages | __chatcodec_selection('select') %}")
    assert ChatTemplate(source)._resume_plan() is None


def test_the_watched_list_shows_a_template_nothing_a_list_does_not() -> None:
    start = (
        "{% set probe = [messages.watch is defined, messages.base is defined, "
        "messages.prefix is defined, (messages | attr('see')) is defined, "
        "messages.__cc_watch__ is defined, messages.__cc_base__ is defined, "
        "messages.__cc_at__ is defined, (messages | selectattr('role') | list).__cc_at__ "
        "is defined] %}"
    )
    assert check(_loop(CHATML_BODY, start, "{{ probe }}" + GENERATION_PROMPT)) == ALL


def test_a_raise_in_the_end_refuses_the_prefix() -> None:
    end = (
        "{% if messages[-1].role == 'tool' %}{{ raise_exception('no tool last') }}{% endif %}"
        + GENERATION_PROMPT
    )
    assert check(_loop(CHATML_BODY, end=end)) == ALL - 2 * 2  # the prefix ending on the tool


@pytest.mark.parametrize(
    "source",
    [
        _loop("{% if loop.changed(m.role) %}+{% endif %}" + CHATML_BODY),
        _loop("{{ c.next() }}" + CHATML_BODY, "{% set c = cycler('a', 'b') %}"),
        _loop(CHATML_BODY, end="{% set x = 1 %}", start="{% set x = 0 %}{{ x }}"),
        "{% for m in messages if m.role != 'tool' %}" + CHATML_BODY + "{% endfor %}",
        "{% for m in messages %}" + CHATML_BODY + "{% else %}empty{% endfor %}",
        "{% for role, text in pairs %}{{ role }}{% endfor %}",
        # a template naming the watched render's hooks could call them
        _loop(CHATML_BODY + "{{ __chatcodec_mark_pass is defined }}"),
    ],
)
def test_templates_without_a_plan_render_every_prefix(source: str) -> None:
    assert ChatTemplate(source)._resume_plan() is None
    assert check(source) == 0


def test_import_chatcodec_does_not_load_the_watch() -> None:
    probe = "import sys, chatcodec; print('chatcodec.template.resume' in sys.modules)"
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "False"


def _spans_and_runs(template: ChatTemplate, *args: Any, **kwargs: Any) -> tuple[Any, int]:
    """``template.render_with_spans(...)``, and how many times it ran the template."""
    with _runs_of(template) as runs:
        return template.render_with_spans(*args, **kwargs), runs[0]


def test_render_with_spans_renders_a_conversation_once() -> None:
    template = ChatTemplate(_loop(CHATML_BODY))
    rendered, runs = _spans_and_runs(template, CONVERSATION)
    assert runs == 1
    assert [rendered.text[s.start : s.end] for s in rendered.spans] == [
        "A1<|im_end|>",
        "<|im_end|>",
        "A2<|im_end|>",
    ]


# --- templates built at random from the pieces above ------------------------------------

STARTS = [
    "{% set count = messages | length %}",
    "{% set first = messages[0].role %}",
    "{% for m in messages %}{% if m.role == 'user' %}{% set ns.user = loop.index0 %}"
    "{% endif %}{% endfor %}",
    "{% for m in messages[::-1] %}{% if m.role == 'user' and ns.user < 0 %}"
    "{% set ns.user = messages | length - 1 - loop.index0 %}{% endif %}{% endfor %}",
    # backward scans worked out from probes (resume._Scan): Qwen3's, and one that goes on
    "{% for m in messages[::-1] %}{% set i = messages | length - 1 - loop.index0 %}"
    "{% if ns.open and m.role == 'user' %}{% set ns.open = false %}{% set ns.user = i %}"
    "{% endif %}{% endfor %}",
    "{% for m in messages | reverse %}{% if ns.open and m.role == 'tool' %}"
    "{% set ns.top = loop.revindex0 %}{% endif %}{% endfor %}",
    # and one that breaks (Reka Edge's), and one over the indexes that runs every pass
    # (Kimi K2 Thinking's)
    "{% for m in messages[::-1] %}{% set i = messages | length - 1 - loop.index0 %}"
    "{% if m.role == 'user' %}{% set ns.user = i %}{% break %}{% endif %}{% endfor %}",
    "{% for i in range(messages | length - 1, -1, -1) %}{% if messages[i].role == 'user' %}"
    "{% set ns.user = i %}{% endif %}{% endfor %}",
    # Qwen3's whole: a namespace of the messages' length, which its scan sets anew once it
    # finds a question (run again with stand-ins, and kept for the prefixes alike)
    "{% set q = namespace(open=true, last=messages | length - 1) %}"
    "{% for m in messages[::-1] %}{% set i = messages | length - 1 - loop.index0 %}"
    "{% if q.open and m.role == 'user' %}{% set q.open = false %}{% set q.last = i %}"
    "{% endif %}{% endfor %}",
    "{% set roles = messages | map(attribute='role') | join(',') %}",
    "{% if tools %}T{{ tools | length }}{% endif %}",
    "{% set many = messages | length > 3 %}",
    "{% if messages[0].role == 'system' %}{% set sys = messages[0].content %}{% endif %}",
    "{% set ns.kept = messages %}",
    "[{{ messages | length }}]",
    "{% set view = messages[1:] %}",
    "{% if messages | length > 2 %}{% set ns.n = 10 %}{% endif %}",
    "{% set later = 'early' %}",
    "{% if add_generation_prompt is not defined %}{% set add_generation_prompt = false %}"
    "{% endif %}",
    "{% set add_generation_prompt = add_generation_prompt and messages[-1].role == 'user' %}",
    "{% set messages = messages[1:] if messages[0].role == 'system' else messages %}",
    "{% set users = messages | selectattr('role', 'equalto', 'user') %}",
    # selections of the messages (Watch.select): kept, counted, held in a namespace
    "{% set chosen = messages | selectattr('role', 'equalto', 'user') | list %}",
    "{% if messages | rejectattr('role', 'ne', 'system') | list | length == 0 %}D{% endif %}",
    "{% set ns.chosen = messages[1:] | rejectattr('role', 'equalto', 'tool') | list %}",
    # what the start does with the index of the last user message (traced values)
    "{% set ns.seen = ns.user > 1 %}",
    "{% set ns.top = ns.user + 1 %}",
    "{% set ns.box = [ns.user] %}",
    "{% if add_generation_prompt %}G{% endif %}",
    "{% if add_generation_prompt is true %}T{% endif %}",
    "{% set flag = add_generation_prompt %}",
    "{% for m in messages %}{% if loop.last %}{% set ns.n = loop.index %}{% endif %}{% endfor %}",
]
# the messages cut short of the end (Nemotron Nano v2 shows a last assistant message in its
# end, not in the loop), and fields only the end reads
CUTS = [
    "{% if messages[-1].role == 'assistant' %}{% set ns.final = messages[-1].content %}"
    "{% set messages = messages[:-1] %}{% endif %}",
    "{% set messages = messages[:-1] if messages | length > 2 else messages %}",
    "{% set ns.tail = messages[-1].role %}{% set messages = messages[1:-1] %}",
    "{% if messages[-1].role != 'user' %}{% set ns.final = messages[-1].role %}"
    "{% set messages = messages[:-2] %}{% else %}{% set ns.tail = 'u' %}{% endif %}",
    "{% set ns.tail = messages[-1].role %}",
]
STARTS += CUTS
BODIES = [
    "{% if loop.last %}!{% endif %}",
    "{{ loop.index0 }}",
    "{{ loop.previtem.role if loop.previtem }}",
    "{% if loop.nextitem %}>{{ loop.nextitem.role }}{% endif %}",
    "{% set ns.n = ns.n + 1 %}{{ ns.n }}",
    "{% if loop.index0 > ns.user %}*{% endif %}",
    "{{ show(m) }}",
    "{% if loop.last %}{{ total() }}{% endif %}",
    "{% if messages[loop.index0 + 1] is defined %}+{% endif %}",
    "{{ count | default('c') }}{{ first | default('f') }}{{ many | default('m') }}",
    "{% if m.role == 'assistant' and loop.last and not add_generation_prompt %}<eos>{% endif %}",
    "{{ later | default('u') }}",
    "{{ sys | default('') }}",
    "{% if m.tool_calls %}{{ m.tool_calls | tojson }}{% endif %}",
    "{% if ns.kept %}{{ ns.kept | length }}{% endif %}",
    "{% if view is defined %}{{ view[loop.index0] is defined }}{% endif %}",
    "{% set x = m.content ~ '.' %}{{ x }}",
    "{% for c in m.tool_calls or [] %}{{ loop.index }}{{ loop.last }}{% endfor %}",
    "{% if messages[loop.index0 + 2] is defined %}++{% endif %}",
    "{% if loop.last %}{{ messages[-1].role }}{% endif %}",
    "{% if m.role == 'tool' %}{% continue %}{% endif %}",
    "{% if users is defined and m.role == 'assistant' %}{{ users | first is defined }}{% endif %}",
    "{% if loop.index0 > 4 and m.role == 'user' %}{% break %}{% endif %}",
    "{% if loop.index0 == ns.user %}U{% endif %}",
    "{% if ns.user %}u{% endif %}",
    "{{ ns.user }}",
    "{{ loop.index0 - ns.user }}",
    "{% if ns.box %}{{ ns.box[0] }}{% endif %}",
    "{% if ns.user is odd %}o{% endif %}",
    "{{ [ns.user, loop.index0] | max }}",
    "{% if ns.user is sameas 1 %}={% endif %}",
    "{% if q is defined and loop.index0 > q.last %}>{{ q.last }}{% endif %}",
    "{% if add_generation_prompt and loop.last %}P{% endif %}",
    "{% if flag is defined and flag is false %}F{% endif %}",
    "{{ ns.user is integer }}{{ ns.user is number }}"
    "{% if flag is defined %}{{ flag is boolean }}{{ flag is integer }}{% endif %}",
    "{{ (messages | length) is integer }}{% if messages | length > loop.index0 + 2 %}>{% endif %}",
    "{% if loop.index0 == 3 %}{{ ns.user | tojson }}{% endif %}",
    # loops that look ahead (Watch.inner_loop): a flag set once, output, a break, a count
    # that changes on every pass, a capture, a macro's count
    "{% set f = namespace(found=false) %}{% for x in messages[loop.index:] %}"
    "{% if x.role == 'assistant' and 'tool_calls' not in x %}{% set f.found = true %}"
    "{% endif %}{% endfor %}{{ f.found }}",
    "{% for x in messages[loop.index:] %}{% if x.role == 'tool' %}<{{ x.content }}>"
    "{% endif %}{% endfor %}",
    "{% for x in messages[loop.index0 + 1:] %}{% if x.role != 'tool' %}{% break %}{% endif %}"
    "T{% endfor %}",
    "{% for x in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}",
    "{% for x in messages[loop.index:] %}{% set s %}{{ x.role }}{% endset %}"
    "{% if s == 'user' %}{% set ns.seen = true %}{% endif %}{% endfor %}",
    "{{ users_after(loop.index) }}",
    "{% for x in messages[loop.index:] %}{% if loop.last %}{{ x.role }}{% endif %}{% endfor %}",
    "{% for x in messages[loop.index:] %}{% endfor %}{% for x in view or [] %}{% endfor %}",
    "{% for k in range(loop.index0, messages | length) %}{% if messages[k].role == 'tool' %}"
    "T{% endif %}{% endfor %}",
    "{% if chosen is defined and chosen and m == chosen[-1] %}L{% endif %}",
    "{% if chosen is defined %}{{ chosen | length }}{% for c in chosen %}{% if c == m %}="
    "{% endif %}{% endfor %}{% endif %}",
    "{% if ns.chosen %}{{ ns.chosen | length }}{% if m in ns.chosen %}c{% endif %}{% endif %}",
]
ENDS = [
    "{{ ns.n }}",
    "{{ ns.user }}{{ ns.seen }}{{ ns.top }}",
    "{{ messages[-1].role }}",
    "{% set later = 'L' %}{{ later }}",
    "{{ roles | default('') }}",
    "{% for m in messages %}{{ loop.index }}{% endfor %}",
    "{% if ns.kept %}{{ ns.kept[-1].role }}{% endif %}",
    "{% if chosen is defined %}{{ chosen | map(attribute='content') | join }}{% endif %}",
    "{% if messages[-1].role == 'tool' and add_generation_prompt %}"
    "{{ raise_exception('no') }}{% endif %}",
    "{{ ns.final | default('-') }}{{ ns.tail | default('-') }}",
    "{% if q is defined %}{{ q.last }}{{ q.open }}{% endif %}",
]
FIXED = (
    "{% set ns = namespace(n=0, user=-1, kept=none, seen=none, top=0, box=none, open=true, "
    "chosen=none) %}"
    "{% macro show(m) %}[{{ m.role }}]{% endmacro %}"
    "{% macro total() %}{{ messages | length }}{% endmacro %}"
    "{% macro users_after(i) %}{% set c = namespace(n=0) %}{% for x in messages[i:] %}"
    "{% if x.role == 'user' %}{% set c.n = c.n + 1 %}{% endif %}{% endfor %}{{ c.n }}"
    "{% for x in messages[i:] %}{{ x.role[0] }}{% endfor %}{% endmacro %}"
)


COUNTS = [
    "range(messages | length)",
    "range(1, messages | length)",
    "range(first, messages | length)",
    "range(view | length)",
]


@st.composite
def _templates(draw: st.DrawFn, cut: bool = False, counted: bool = False) -> str:
    starts = draw(st.lists(st.sampled_from(STARTS), max_size=3))
    if cut:
        starts.insert(draw(st.integers(0, len(starts))), draw(st.sampled_from(CUTS)))
    start = "".join(starts)
    body = "".join(draw(st.lists(st.sampled_from(BODIES), max_size=4)))
    end = "".join(draw(st.lists(st.sampled_from(ENDS), max_size=2)))
    if not counted:
        return _loop(body + CHATML_BODY, FIXED + start, end + GENERATION_PROMPT)
    # the main loop walks the indexes of the messages (Reka Edge's)
    count = draw(st.sampled_from(COUNTS))
    over = "view" if "view" in count else "messages"
    start += "{% set first = 1 if messages[0].role == 'system' else 0 %}"
    start += "{% set view = messages[1:] %}" if over == "view" else ""
    body = f"{{% set m = {over}[i] %}}" + body
    return f"{FIXED}{start}{{% for i in {count} %}}{body}{CHATML_BODY}{{% endfor %}}{end}" + (
        GENERATION_PROMPT
    )


_MESSAGES = st.lists(
    st.sampled_from(CONVERSATION[1:] + [{"role": "system", "content": "S2"}]),
    min_size=1,
    max_size=7,
)


@seed(5)
@settings(
    max_examples=2 * EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
@given(
    # the main loop over the messages, or over their indexes
    st.booleans().flatmap(lambda counted: _templates(counted=counted)),
    _MESSAGES,
    st.booleans(),
)
def test_random_templates(source: str, messages: list[dict[str, Any]], with_tools: bool) -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    check(source, messages, tools=tools if with_tools else None)


@seed(6)
@settings(
    max_examples=EXAMPLES, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
)
@given(_templates(cut=True), _MESSAGES, st.booleans())
def test_random_templates_that_cut_the_messages(
    source: str, messages: list[dict[str, Any]], answered: bool
) -> None:
    # most often on a conversation that ends on the assistant's message, as training data do
    check(source, messages + [CONVERSATION[-1]] if answered else messages)


def test_a_generator_kept_in_a_variable() -> None:
    # a filter's lazy result kept in a variable is consumed pass by pass: its state is not a
    # namespace's, so a watched render holding one resumes nothing
    start = "{% set users = messages | selectattr('role', 'equalto', 'user') %}"
    body = "{% if m.role == 'assistant' %}[{{ users | first is defined }}]{% endif %}"
    assert check(_loop(body + CHATML_BODY, start)) == 0
    start = "{% set ns = namespace(users=messages | selectattr('role', 'equalto', 'user')) %}"
    body = "{% if m.role == 'assistant' %}[{{ ns.users | first is defined }}]{% endif %}"
    assert check(_loop(body + CHATML_BODY, start)) == 0


def test_a_statement_that_reads_only_in_a_prefix_s_state() -> None:
    # after the scan, a statement counts the messages only when the last user message is an
    # early one: the whole render never reads there, prefixes before the third user
    # message do, each its own count
    start = (
        "{% set ns = namespace(last=-1) %}"
        "{% for m in messages %}{% if m.role == 'user' %}{% set ns.last = loop.index0 %}"
        "{% endif %}{% endfor %}"
        "{% if ns.last < 3 %}[{{ messages | length }}]{% endif %}"
    )
    messages = CONVERSATION + [{"role": "user", "content": "Q3"}, CONVERSATION[2]]
    check(_loop(CHATML_BODY, start), messages)


def test_too_many_namespaces_to_copy_at_every_mark(monkeypatch: pytest.MonkeyPatch) -> None:
    # a mark copies the namespaces made or set since the last one: past a bound of copies
    # in one render (65,536; 500 here) the watch gives up, and nothing resumes
    monkeypatch.setattr(resume, "_SNAPSHOTS", 500)
    many = "{% for i in range(100) %}{% set x = namespace(i=i) %}{% endfor %}"
    assert check(_loop(many + CHATML_BODY)) == 0
    few = "{% for i in range(10) %}{% set x = namespace(i=i) %}{% endfor %}"
    assert check(_loop(few + CHATML_BODY)) == ALL
    # namespaces left alone are copied once, however many marks follow
    count = "{% set ns = namespace(n=0) %}"
    body = "{% set ns.n = ns.n + 1 %}" + CHATML_BODY
    assert check(_loop(body, many + count)) == ALL


# --- values that differ between a prefix and the whole conversation (traced values) ------

LAST_USER = (
    "{% set ns = namespace(last=-1) %}"
    "{% for m in messages %}{% if m.role == 'user' %}{% set ns.last = loop.index0 %}"
    "{% endif %}{% endfor %}"
)


def test_a_start_loop_for_the_last_user_message_resumes_every_prefix() -> None:
    # GLM's scan: a loop of the start over the messages (its state on a prefix is its state
    # at the pass on the prefix's next message), then passes that compare the index
    body = "{% if loop.index0 > ns.last %}*{% endif %}" + CHATML_BODY
    assert check(_loop(body, LAST_USER)) == ALL
    # the same compared the other way round, with equality, or as a truth value
    for test in ("ns.last < loop.index0", "loop.index0 == ns.last", "ns.last"):
        body = "{% if " + test + " %}*{% endif %}" + CHATML_BODY
        assert check(_loop(body, LAST_USER)) == ALL, test


def test_a_traced_value_used_otherwise_than_compared() -> None:
    # printed, computed with, used as an index, hashed: the prefix resumes at the first pass
    # that used it so (a pass of its own: all of them here, from the loop's first pass)
    for use in ("{{ ns.last }}", "{{ loop.index0 - ns.last }}", "{{ [1, 2, 3][ns.last] }}"):
        body = use + CHATML_BODY
        assert check(_loop(body, LAST_USER)) == ALL, use
    # a use in the start that a prefix's value changes renders that prefix from the start
    start = LAST_USER + "{% if ns.last > 1 %}[late question]{% endif %}"
    assert check(_loop(CHATML_BODY, start)) == 2 * 2 * (len(CONVERSATION) - 3)


def test_a_traced_value_kept_in_a_container() -> None:
    # a copy the marks cannot put back: a resumed pass that uses it with another value gives
    # up and the prefix is rendered from the start (the renders stay the prefixes' own)
    start = LAST_USER + "{% set ns.box = [ns.last] %}"
    check(_loop("{{ ns.box[0] }}" + CHATML_BODY, start))
    check(_loop("{% if loop.last %}{{ ns.box[0] }}{% endif %}" + CHATML_BODY, start))


def test_traced_values_compared_with_each_other() -> None:
    start = LAST_USER + (
        "{% set ns.first = -1 %}{% for m in messages %}"
        "{% if m.role == 'assistant' and ns.first < 0 %}{% set ns.first = loop.index0 %}"
        "{% endif %}{% endfor %}"
    )
    body = "{% if ns.first < ns.last and loop.index0 > ns.last %}+{% endif %}" + CHATML_BODY
    assert check(_loop(body, start)) == ALL


@pytest.mark.parametrize("test", ["true", "false", "boolean", "number", "integer", "defined"])
def test_jinja_tests_of_a_traced_value(test: str) -> None:
    # `is true` and the like ask for the value itself (environment.py asks the stand-in)
    start = "{% set agp = add_generation_prompt %}"
    body = "{% if agp is " + test + " %}" + test + "{% endif %}" + CHATML_BODY
    assert check(_loop(body, start)) == ALL
    body = "{% if ns.last is " + test + " %}" + test + "{% endif %}" + CHATML_BODY
    assert check(_loop(body, LAST_USER)) == ALL


def test_a_template_testing_sameas_is_watched_without_traced_values() -> None:
    body = "{% if ns.last is sameas 3 %}=3{% endif %}" + CHATML_BODY
    template = ChatTemplate(_loop(body, LAST_USER))
    plan = template._resume_plan()
    assert plan is not None and not plan.traces
    check(_loop(body, LAST_USER))


def test_a_traced_value_a_filter_refuses() -> None:
    # json cannot dump a traced value: the watched render is run again without them, and
    # the template's later renders are not traced
    source = _loop("{% if loop.last %}{{ ns.last | tojson }}{% endif %}" + CHATML_BODY, LAST_USER)
    template = ChatTemplate(source)
    prefixes = PrefixRenders.of(template, CONVERSATION)
    assert prefixes.text == template.render(CONVERSATION)
    assert not template._resume_plan().traces  # type: ignore[union-attr]
    check(source)


def test_the_generation_prompt_read_before_the_loop_ends() -> None:
    # one watched render serves both flags: the flag is traced
    start = "{% if add_generation_prompt is not defined %}{% set add_generation_prompt = false %}{% endif %}"
    body = "{% if loop.last and not add_generation_prompt %}<eos>{% endif %}" + CHATML_BODY
    source = _loop(body, "[{{ add_generation_prompt is defined }}]")
    assert check(source) == ALL
    template = ChatTemplate(source)
    messages = CONVERSATION * 3  # long enough to watch
    rendered, runs = _spans_and_runs(template, messages, add_generation_prompt=True)
    assert runs == 1
    assert rendered.spans == derive_spans_by_prefixes(
        template, rendered.text, messages, None, None, None, {}
    )
    assert check(_loop(body, start)) == ALL


def test_a_start_loop_that_looks_ahead_runs_again() -> None:
    start = (
        "{% set ns = namespace(last=-1) %}{% for m in messages %}"
        "{% if m.role == 'user' and not loop.last %}{% set ns.last = loop.index0 %}{% endif %}"
        "{% endfor %}"
    )
    check(_loop("{% if loop.index0 > ns.last %}*{% endif %}" + CHATML_BODY, start))


def test_an_end_that_reads_the_messages_or_only_the_flag() -> None:
    # the end's text is kept for prefixes that show it the same state, unless it read the
    # messages: both give each prefix its own render
    for end in ("{{ messages[-1].role }}", "{{ messages | length }}", "{% if ns.n %}N{% endif %}"):
        source = _loop(
            "{% set ns.n = ns.n + 1 %}" + CHATML_BODY,
            "{% set ns = namespace(n=0) %}",
            end + GENERATION_PROMPT,
        )
        assert check(source) == ALL, end


@pytest.mark.parametrize(
    "expression",
    [
        "x ~ ''", "x | string", "x | int", "x | float", "x | abs", "x | round",
        "x | round(1, 'floor')", "x | default(7)", "x | default(7, true)", "x | pprint",
        "[x, 2] | max", "[x, 2] | min", "[x, 2] | sort", "[x, 2] | sum", "[x, x] | unique | list",
        "x | e", "'%d' % x", "'%s' % x", "'%05.1f' % x", "'{:>4}'.format(x)", "range(x) | list",
        "[1, 2, 3][x] is defined", "'abcdef'[x]", "'abcdef'[:x]", "{x: 1}", "x in [1, 2]",
        "{1: 'a'}.get(x)", "x is odd", "x is divisibleby(2)", "x is number", "x is integer",
        "x is float", "x is none", "x is string", "x is iterable", "x is sequence",
        "x is callable", "x is escaped", "x is lower", "x is eq(1)", "x is in([1, 2])",
        "x * 'ab'", "'ab' * x", "x ** 2", "x // 2", "x % 2", "x / 2", "-x", "not x",
        "x and 'y'", "x or 'y'", "x.real", "x.bit_length()", "'abc' | center(x)",
        "'a b c' | wordwrap(x + 5)", "'abc' | truncate(x + 4)", "[1, 2, 3] | batch(x + 1) | list",
        "'aaa' | replace('a', 'b', x)", "[x] | join(',')", "x if x else 'zero'",
        # a traced int shifted by a constant (resume._Shifted), compared or put to any use
        "x - 1 < 3", "(x - 1) == loop.index0", "x + 1 > loop.index0", "1 + x >= 2",
        "x - 1 - 1 == 0", "x + 2 - 3 != loop.index0", "(x - 1) < (x + 1)", "x - 1 == x",
        "[x - 1, 2] | max", "'abcdef'[x - 1:]", "(x + 1) * 2", "x + 1 is odd",
        "(x - 1) ~ ''", "x - 1 if x - 1 else 'zero'", "range(x + 1) | list", "(x + 1) | abs",
        "(x - 1) | tojson", "{x - 1: 1}", "x - 1 in [0, 1]", "1 - x", "-(x - 1)",
        "x == (messages | length - 1)", "x + 1 < messages | length - 2",
    ],
)  # fmt: skip
def test_expressions_of_a_traced_value(expression: str) -> None:
    # whatever a template does with a traced value, the watched render prints what the
    # plain one does, and each prefix its own render
    for value in ("ns.last", "add_generation_prompt"):
        body = "{% set x = " + value + " %}[{{ " + expression + " }}]" + CHATML_BODY
        check(_loop(body, LAST_USER + "{% if add_generation_prompt %}{% endif %}"))


# --- backward scans of the start, worked out from one probe per message (resume._Scan) ---

QWEN3_SCAN = (
    "{% set ns = namespace(multi=true, last=messages|length - 1) %}"
    "{% for message in messages[::-1] %}"
    "{% set index = (messages|length - 1) - loop.index0 %}"
    "{% if ns.multi and message.role == 'user' and not (message.content.startswith('<r>')"
    " and message.content.endswith('</r>')) %}"
    "{% set ns.multi = false %}{% set ns.last = index %}"
    "{% endif %}{% endfor %}"
)
QWEN3_BODY = "{% if loop.index0 > ns.last %}*{% endif %}" + CHATML_BODY
AGENT = [
    {"role": "system", "content": "S"},
    {"role": "user", "content": "Q"},
    *[
        {"role": "assistant", "content": "", "tool_calls": [CALL]}
        if i % 2 == 0
        else {"role": "tool", "tool_call_id": "c1", "content": "R"}
        for i in range(20)
    ],
    {"role": "user", "content": "<r>a tool's answer, as a user message</r>"},
    {"role": "assistant", "content": "A"},
    {"role": "user", "content": "Q2"},
    {"role": "assistant", "content": "A2"},
]


@pytest.fixture
def scans(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How many times the scans were probed (at most once per watched render, and
    statement run again before it), their probes refused to stand for their passes, and
    they were worked out; and how many prefixes took the run of the statements before and
    with a scan that another prefix's scan, stopping at the same message, left ("kept")."""
    counts = {"probed": 0, "refused": 0, "worked out": 0, "kept": 0}
    probe, effect = resume.ResumePlan._probe, resume.ResumePlan._scan_effect
    rerun = resume.ResumePlan._rerun
    watches: dict[int, Any] = {}  # (the watches kept: an id is not another's later)

    def run_again(plan: Any, watch: Any, base: Any, k: int, prompt: bool, read: Any) -> Any:
        key = plan._rerun_key(watch, watch.steps[read[0]], read, k)
        counts["kept"] += key is not None and watch.reruns.get(key) is not None
        return rerun(plan, watch, base, k, prompt, read)

    def probed(plan: Any, watch: Any, *args: Any) -> Any:
        assert id(watch) not in watches  # (one scan statement in these templates)
        watches[id(watch)] = watch
        found = probe(plan, watch, *args)
        counts["probed" if found is not None else "refused"] += 1
        return found

    def worked_out(*args: Any) -> Any:
        counts["worked out"] += 1
        return effect(*args)

    monkeypatch.setattr(resume.ResumePlan, "_probe", probed)
    monkeypatch.setattr(resume.ResumePlan, "_scan_effect", worked_out)
    monkeypatch.setattr(resume.ResumePlan, "_rerun", run_again)
    return counts


def test_a_backward_scan_is_worked_out_not_run_again(scans: dict[str, int]) -> None:
    # Qwen3's scan on an agent's conversation: every prefix's scan is the effects of its
    # passes, probed once per message of each watched render (both flags, and the first
    # question's turn for the prefixes whose own last question resumes them far back)
    resumed = check(_loop(QWEN3_BODY, QWEN3_SCAN), AGENT)
    assert scans["probed"] >= 2
    # (a prefix whose scan stops at the same question as another's takes that run whole)
    assert scans["worked out"] + scans["kept"] > len(AGENT)
    assert scans["kept"] > len(AGENT)
    assert resumed == 2 * 2 * len(AGENT) - 2 * 2  # the system message's own: rendered
    template = ChatTemplate(_loop(QWEN3_BODY, QWEN3_SCAN))
    rendered = template.render_with_spans(AGENT)
    assert rendered.spans == derive_spans_by_prefixes(
        template, rendered.text, AGENT, None, None, None, {}
    )


def test_a_scan_that_ends_its_run_is_kept_for_every_turn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a chat: each prefix's scan stops at its own question. The run of Qwen3's start with
    # stand-ins is made once, and each prefix puts its own scan's effects on what it left
    chat = [{"role": "system", "content": "S"}]
    for turn in range(8):
        chat += [
            {"role": "user", "content": f"Q{turn}"},
            {"role": "assistant", "content": f"A{turn}"},
        ]
    runs = []
    unread = resume.ResumePlan._rerun_unread

    def counted(*args: Any) -> Any:
        runs.append(args)
        return unread(*args)

    monkeypatch.setattr(resume.ResumePlan, "_rerun_unread", counted)
    resumed = check(_loop(QWEN3_BODY, QWEN3_SCAN), chat)
    assert resumed == 2 * 2 * len(chat) - 2 * 2  # (the system message's own: rendered)
    assert 0 < len(runs) <= 4  # (once per watched render: both flags, both ways)


def test_a_scan_followed_in_its_run_by_a_statement_that_reads_its_namespace() -> None:
    # the statement after the scan reads the messages (the length it drops), so it runs
    # again with it, and reads the field the scan sets: a prefix's own scan comes first
    scan = QWEN3_SCAN.replace("last=messages|length - 1", "last=-1")
    start = scan + "{% set ns2 = namespace(x=[messages|length - 1, ns.last][1]) %}"
    source = _loop("{{ ns2.x }}" + CHATML_BODY, start)
    assert check(source, AGENT) == 2 * 2 * len(AGENT) - 2 * 2
    assert check(source) == ALL - 2 * 2


def test_a_scan_whose_last_pass_writes_another_namespace_runs_as_written() -> None:
    # the pass that breaks the scan calls a macro that counts in another namespace: no
    # probe stands for it, and each prefix's end shows its own count
    start = (
        "{% set other = namespace(x=0) %}"
        "{% macro f() %}{% set other.x = other.x + 1 %}{% endmacro %}"
        "{% set ns = namespace(last=-1) %}{% for m in messages[::-1] %}"
        "{% set i = messages|length - 1 - loop.index0 %}{% if m.role == 'user' %}"
        "{% set ns.last = i %}{% set y = f() %}{% break %}{% endif %}{% endfor %}"
    )
    source = _loop("{{ ns.last }}" + CHATML_BODY, start, "{{ other.x }}")
    assert check(source, AGENT) == 2 * 2 * len(AGENT)
    assert check(source) == ALL


_QWEN3_FIELDS = st.sampled_from(
    [
        "",
        ", x=1",
        ", x=messages | length",
        ", x=messages | length > 2",
        ", x=(messages | length) + 1 - 1",
        ", x=[messages | length]",
        ", x=add_generation_prompt",
        ", x=messages | length is sameas 2",
    ]
)
_AGENT_MESSAGES = st.lists(
    st.sampled_from([*AGENT[:3], AGENT[3], AGENT[-4], AGENT[-3], AGENT[-1]]),
    min_size=1,
    max_size=12,
)


@seed(7)
@settings(
    max_examples=EXAMPLES, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
)
@given(
    _QWEN3_FIELDS,
    st.sampled_from(["", "{{ q.x | default('') }}", "{{ q.last }}"]),
    st.sampled_from(["", "{{ q.x | default('') }}{{ q.last }}", "{{ q.open }}{{ q.at }}"]),
    _AGENT_MESSAGES,
)
def test_random_qwen3_starts_run_again_with_stand_ins(
    field: str, body: str, end: str, messages: list[dict[str, Any]]
) -> None:
    # Qwen3's start, run again on each prefix with stand-ins for its own length and flag
    # and kept for the prefixes whose scan stops at the same question, with another field
    # of them or none; read in the passes, the end or neither (`q.at`, which only the end
    # reads, is the prefix's from the run as it is)
    start = (
        "{% set q = namespace(open=true, last=messages | length - 1, at=-1" + field + ") %}"
        "{% for m in messages[::-1] %}{% set i = messages | length - 1 - loop.index0 %}"
        "{% if q.open and m.role == 'user' and not m.content.startswith('<r>') %}"
        "{% set q.open = false %}{% set q.last = i %}{% set q.at = i %}{% endif %}"
        "{% endfor %}"
    )
    body = "{% if loop.index0 > q.last %}*{% endif %}" + body + CHATML_BODY
    source = _loop(body, start, end + GENERATION_PROMPT)
    check(source, messages)
    template = ChatTemplate(source)  # (its spans resume from the renders of turns too)
    rendered = template.render_with_spans(messages)
    assert rendered.spans == derive_spans_by_prefixes(
        template, rendered.text, messages, None, None, None, {}
    )


@pytest.mark.parametrize(
    "field",
    [
        # each a value of the prefix's own length a stand-in cannot give: the start runs
        # again as written (or is not kept), on every prefix
        "(messages|length) is sameas 3",  # an identity: small ints are one object
        "messages|length is even",
        "messages is sequence",  # (jinja's test turns any exception into false)
        "messages|length + 1 > 2",
        "(messages|length) in [1, 2, 3]",
        "(messages|length)|string",
        "range(messages|length)|list|length",
        "messages|tojson|length",
        "messages[-1].role",
        "messages|first",
        "[messages|length]",  # left in a list
        "messages|length - 1",  # left as it is
        "{'n': messages|length}|length",  # (the same in every prefix: may be kept)
    ],
)
def test_a_start_run_again_with_stand_ins_keeps_only_what_its_length_does_not_change(
    field: str, scans: dict[str, int]
) -> None:
    start = QWEN3_SCAN.replace("last=messages|length - 1", f"last=messages|length - 1, x={field}")
    assert start != QWEN3_SCAN
    # (a field only the end reads is the prefix's from the run: its value is printed as is)
    check(_loop(QWEN3_BODY, start, "{{ ns.x }}" + GENERATION_PROMPT), AGENT)


def test_stand_ins_answer_no_test_and_are_no_int_to_c_code() -> None:
    unread = resume._Unread(3)
    assert isinstance(unread, int) and not isinstance(resume._UnreadMessages(3), list)
    assert (unread + 1).__cc_value__ == 4 and (unread - 1).__cc_value__ == 2
    assert (1 + unread).__cc_value__ == 4
    for use in (
        lambda: unread == 3,
        lambda: bool(unread),
        lambda: hash(unread),
        lambda: str(unread),
        lambda: [0, 1, 2, 3][unread],
        lambda: range(unread),
        lambda: unread * 2,
        lambda: 5 - unread,
        lambda: unread + 1.0,
        lambda: unread.real,
        lambda: len(resume._UnreadMessages(3)),
        lambda: list(resume._UnreadMessages(3)),
        lambda: resume._UnreadMessages(3)[0],
    ):
        with pytest.raises(resume._Used):
            use()
    assert resume._UnreadMessages(3).__cc_length__().__cc_value__ == 3
    # in the sandbox: the tests that read a value's identity ask the stand-in, which
    # answers none; `is number` holds, as for its value
    from chatcodec.template.render import _shared_environment

    environment = _shared_environment()
    unread_list = resume._UnreadMessages(3)
    for source in ("x is sameas 3", "x is integer", "x is true", "y is sequence", "y|length > 1"):
        with pytest.raises(resume._Used):
            environment.from_string("{{ " + source + " }}").render(x=unread, y=unread_list)
    assert environment.from_string("{{ x is number }}").render(x=unread) == "True"


@pytest.mark.parametrize(
    "scan",
    [
        # walked with `reverse`, positions from revindex; a macro in the test
        "{% macro text(c) %}{{ c }}{% endmacro %}"
        "{% set ns = namespace(multi=true, last=-1) %}"
        "{% for message in messages | reverse %}{% set index = loop.revindex0 %}"
        "{% if ns.multi and message.role == 'user' and text(message.content) != '' %}"
        "{% set ns.multi = false %}{% set ns.last = index %}{% endif %}{% endfor %}",
        # a flag the scan never clears: every pass that matches sets the field again
        "{% set ns = namespace(multi=true, last=-1) %}"
        "{% for message in messages[::-1] %}{% set index = loop.length - loop.index %}"
        "{% if ns.multi and message.role == 'tool' %}{% set ns.last = index %}{% endif %}"
        "{% endfor %}",
        # a flag false from the start on short prefixes (from the messages' length)
        "{% set ns = namespace(multi=messages|length > 3, last=-1) %}"
        "{% for message in messages[::-1] %}{% set index = (messages|length - 1) - "
        "loop.index0 %}{% if ns.multi and message.role == 'user' %}{% set ns.multi = false %}"
        "{% set ns.last = index %}{% endif %}{% endfor %}",
        # a flag that is not a plain value: every prefix runs its scan again
        "{% set ns = namespace(multi=[1], last=-1) %}"
        "{% for message in messages[::-1] %}{% set index = (messages|length - 1) - "
        "loop.index0 %}{% if ns.multi and message.role == 'user' %}{% set ns.multi = [] %}"
        "{% set ns.last = index %}{% endif %}{% endfor %}",
        # no flag: the scan breaks at the last user query (Reka Edge's), or at a tool
        # result after it sets a field on every pass before
        "{% set ns = namespace(last=-1) %}"
        "{% for message in messages[::-1] %}{% set index = messages|length - 1 - loop.index0 %}"
        "{% if message.role == 'user' %}{% set content = message.content %}"
        "{% if not content.startswith('<tool_response>') %}{% set ns.last = index %}"
        "{% break %}{% endif %}{% endif %}{% endfor %}",
        "{% set ns = namespace(last=-1, seen=0) %}"
        "{% for message in messages | reverse %}{% set index = loop.revindex0 %}"
        "{% if message.role != 'system' %}{% set ns.seen = index %}"
        "{% if message.role == 'tool' %}{% set ns.last = index %}{% break %}{% endif %}"
        "{% endif %}{% endfor %}",
        # no flag and no break: every pass runs, the lowest that sets a field has the last
        # word (Kimi K2 Thinking's, over the indexes: its first answer without calls)
        "{% set ns = namespace(last=-1) %}"
        "{% for idx in range(messages|length - 1, -1, -1) %}"
        "{% if messages[idx].role == 'assistant' and not messages[idx].get('tool_calls') %}"
        "{% set ns.last = idx %}{% endif %}{% endfor %}",
        "{% set ns = namespace(last=-1, seen=0) %}"
        "{% for message in messages[::-1] %}{% set index = messages|length - 1 - loop.index0 %}"
        "{% if message.role != 'system' %}{% set ns.seen = index %}"
        "{% if message.role == 'tool' %}{% set ns.last = index %}{% endif %}{% endif %}"
        "{% endfor %}",
        # over the indexes, with a flag or a break
        "{% set ns = namespace(multi=true, last=-1) %}"
        "{% for i in range((messages | length) - 1, -1, -1) %}"
        "{% if ns.multi and messages[i].role == 'user' %}{% set ns.multi = false %}"
        "{% set ns.last = i %}{% endif %}{% endfor %}",
        "{% set ns = namespace(last=-1) %}"
        "{% for i in range(messages|length - 1, -1, -1) %}"
        "{% if messages[i].role == 'user' %}{% set ns.last = i %}{% break %}{% endif %}"
        "{% endfor %}",
        # a break, where the test starts with a field of the message (not a flag)
        "{% set ns = namespace(last=-1) %}"
        "{% for message in messages[::-1] %}{% set index = messages|length - 1 - loop.index0 %}"
        "{% if message.content and message.role == 'user' %}{% set ns.last = index %}"
        "{% break %}{% endif %}{% endfor %}",
    ],
)
def test_backward_scans_worked_out(
    scan: str, scans: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    # the prefixes resumed are those that resume when the scan runs again on each
    resumed = [check(_loop(QWEN3_BODY, scan), messages) for messages in (AGENT, CONVERSATION)]
    assert scans["probed"] > 0
    monkeypatch.setattr(resume, "_scan_of", lambda *args: None)
    assert resumed == [check(_loop(QWEN3_BODY, scan), m) for m in (AGENT, CONVERSATION)]


def test_a_backward_scan_whose_pass_raises_on_a_message(scans: dict[str, int]) -> None:
    # `startswith` of a missing content raises: a prefix whose scan reaches that message
    # while the flag holds is refused, as its render is (all but the two that hold the
    # second question, whose scans stop there); those two resume
    messages = [dict(m) for m in AGENT]
    messages[1] = {"role": "user"}
    assert messages[-2] == {"role": "user", "content": "Q2"}
    assert check(_loop(QWEN3_BODY, QWEN3_SCAN), messages) == 2 * 2 * 2
    assert scans["worked out"] > 0
    assert _render(ChatTemplate(_loop(QWEN3_BODY, QWEN3_SCAN)), messages[:3], False) is None


@pytest.mark.parametrize(
    "scan",
    [
        # the pass's int depends on the prefix's length
        "{% set i = loop.index0 %}{% if ns.multi and m.role == 'user' %}"
        "{% set ns.multi = false %}{% set ns.last = i %}{% endif %}",
        # the pass prints
        "{% if ns.multi and m.role == 'user' %}{{ m.role }}{% set ns.multi = false %}{% endif %}",
        # the pass reads another field of the namespace
        "{% if ns.multi and m.role == 'user' %}{% set ns.last = ns.last + 1 %}{% endif %}",
        # the pass reads the messages, or the loop, otherwise
        "{% if ns.multi and m.role == 'user' %}{% set ns.last = messages | length %}{% endif %}",
        "{% if ns.multi and loop.first %}{% set ns.last = 0 %}{% endif %}",
        # a variable the start sets (it may differ between prefixes)
        "{% if ns.multi and m.role == 'user' %}{% set ns.last = top %}{% endif %}",
        # a loop control besides the flag, or a break and another namespace's field
        "{% if ns.multi and m.role == 'user' %}{% set ns.last = 1 %}{% break %}{% endif %}",
        "{% if m.role == 'user' %}{% set other.x = 1 %}{% set ns.last = 1 %}{% break %}{% endif %}",
        "{% if m.role == 'user' %}{% set ns.last = 1 %}{% continue %}{% endif %}",
        # a macro that sets a namespace's field
        "{% if ns.multi and m.role == 'user' %}{{ bump() }}{% endif %}",
        # the flag not tested first, or set in another namespace
        "{% if m.role == 'user' and ns.multi %}{% set ns.multi = false %}{% endif %}",
        "{% if ns.multi and m.role == 'user' %}{% set other.x = 1 %}{% endif %}",
    ],
)
def test_loops_that_are_not_backward_scans_run_again(scan: str, scans: dict[str, int]) -> None:
    start = (
        "{% set top = messages | length %}{% set other = namespace(x=0) %}"
        "{% macro bump() %}{% set other.x = 2 %}{% endmacro %}"
        "{% set ns = namespace(multi=true, last=-1) %}"
        "{% for m in messages[::-1] %}" + scan + "{% endfor %}"
    )
    body = "{% if loop.index0 > ns.last %}*{% endif %}{{ other.x }}" + CHATML_BODY
    check(_loop(body, start), AGENT)
    check(_loop(body, start))
    assert scans["probed"] == 0  # not a scan, or one whose probes refuse (`top`)


@pytest.mark.parametrize(
    ("walk", "scan"),
    [
        # another message than the pass's, or the messages otherwise
        *(
            ("range(messages|length - 1, -1, -1)", scan)
            for scan in (
                "{% if messages[i - 1].role == 'user' %}{% set ns.last = i %}{% endif %}",
                "{% if messages[first].role == 'user' %}{% set ns.last = i %}{% endif %}",
                "{% if messages[i].role == 'user' %}{% set ns.last = messages | length %}"
                "{% endif %}",
                "{% if messages[i].role == 'user' and loop.first %}{% set ns.last = i %}"
                "{% endif %}",
                # ints of the index before the test
                "{% set j = i %}{% if messages[i].role == 'user' %}{% set ns.last = j %}"
                "{% endif %}",
            )
        ),
        # not every index backwards: a range the other way, or short of the first, or of
        # another list's length
        *(
            (walk, "{% if messages[i].role == 'system' %}{% set ns.last = i %}{% endif %}")
            for walk in (
                "range(messages|length)",
                "range(messages|length - 1, 0, -1)",
                "range(messages|length - 1, -1, -2)",
                "range(rest|length - 1, -1, -1)",
            )
        ),
    ],
)
def test_loops_over_indexes_that_are_not_backward_scans_run_again(
    walk: str, scan: str, scans: dict[str, int]
) -> None:
    start = (
        "{% set rest = messages[1:] %}{% set first = 0 %}{% set ns = namespace(last=-1) %}"
        "{% for i in " + walk + " %}" + scan + "{% endfor %}"
    )
    body = "{% if loop.index0 > ns.last %}*{% endif %}" + CHATML_BODY
    check(_loop(body, start), AGENT)
    check(_loop(body, start))
    assert scans["probed"] == 0


@pytest.mark.parametrize(
    "scan",
    [
        # a variable set before the statements run again, and a macro that writes a
        # namespace only when asked to (Qwen3.5's render_content): probed
        "{% if ns.multi and m.role == tag and text(m.content, false) != '' %}"
        "{% set ns.multi = false %}{% set ns.last = index %}{% endif %}",
    ],
)
def test_backward_scans_that_read_the_start_s_names(
    scan: str, scans: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    start = (
        "{% set tag = 'user' %}{% set count = namespace(n=0) %}"
        "{% macro text(c, counted) %}{% if counted %}{% set count.n = count.n + 1 %}"
        "{% endif %}{{ c }}{% endmacro %}"
        "{% set ns = namespace(multi=true, last=messages|length - 1) %}"
        "{% for m in messages[::-1] %}{% set index = messages|length - 1 - loop.index0 %}"
        + scan
        + "{% endfor %}"
    )
    body = "{% if loop.index0 > ns.last %}*{% endif %}{{ count.n }}" + CHATML_BODY
    resumed = [check(_loop(body, start), messages) for messages in (AGENT, CONVERSATION)]
    assert scans["probed"] > 0
    assert scans["refused"] == 0
    monkeypatch.setattr(resume, "_scan_of", lambda *args: None)
    assert resumed == [check(_loop(body, start), m) for m in (AGENT, CONVERSATION)]


def test_a_probe_that_writes_another_namespace_or_reads_a_traced_value(
    scans: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    # a macro that counts what it is given, and a variable holding the messages' length:
    # the probes refuse, and the scan runs on every prefix as written
    start = (
        "{% set top = messages | length %}{% set count = namespace(n=0) %}"
        "{% macro text(c) %}{% set count.n = count.n + 1 %}{{ c }}{% endmacro %}"
        "{% set ns = namespace(multi=true, last=-1) %}"
        "{% for m in messages[::-1] %}"
        "{% if ns.multi and m.role == 'user' and text(m.content) != '' %}"
        "{% set ns.multi = false %}{% set ns.last = 1 %}{% endif %}{% endfor %}"
    )
    sources = [
        start,
        start.replace("text(m.content) != ''", "top > 1"),
    ]
    body = "{% if loop.index0 > ns.last %}*{% endif %}{{ count.n }}" + CHATML_BODY
    for source in sources:
        resumed = [check(_loop(body, source), messages) for messages in (AGENT, CONVERSATION)]
        assert scans["refused"] > 0
        assert scans["probed"] == 0
        with monkeypatch.context() as patched:
            patched.setattr(resume, "_scan_of", lambda *args: None)
            assert resumed == [check(_loop(body, source), m) for m in (AGENT, CONVERSATION)]


def test_prefixes_in_any_order_with_a_namespace_per_pass() -> None:
    # Granite 4's shape: a namespace made in every pass, a namespace the passes set, and
    # the index of the last user query: more namespaces than _restore puts back all at once
    # (resume._FEW), so a prefix puts back only those that changed since the last one it
    # resumed, whichever way it goes
    start = (
        "{% set ns = namespace(last=-1, seen=0, tag='') %}"
        "{% for m in messages %}{% if m.role == 'user' %}{% set ns.last = loop.index0 %}"
        "{% endif %}{% endfor %}"
    )
    body = (
        "{% set local = namespace(text=m.content or '') %}"
        "{% if m.role == 'tool' %}{% set ns.seen = ns.seen + 1 %}{% set local.text = 'T' %}"
        "{% endif %}{% if loop.index0 > ns.last %}*{% endif %}{% set ns.tag = m.role %}"
        "[{{ local.text }}{{ ns.seen }}]" + CHATML_BODY
    )
    source = _loop(body, start, "{{ ns.tag }}{{ ns.seen }}" + GENERATION_PROMPT)
    messages = AGENT + AGENT[1:]
    assert len(messages) > 2 * resume._FEW
    template = ChatTemplate(source)
    order = [(n, flag) for n in range(1, len(messages) + 1) for flag in (False, True)]
    for shuffled in (order, order[::-1], random.Random(7).sample(order, len(order))):
        prefixes = PrefixRenders.of(template, messages)
        with prefixes.resuming():
            for n, flag in shuffled:
                expected = _render(template, messages[:n], flag)
                assert prefixes.render(n, flag) == expected, (n, flag)
        assert prefixes.resumed > len(order) // 2


_COMPARISONS = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
_NONE = 10**9  # (what first_changed answers past every pass)


@seed(7)
@settings(max_examples=EXAMPLES * 4, deadline=None, derandomize=True)
@given(
    st.integers(-3, 12),
    st.lists(
        st.tuples(
            st.integers(0, 9),  # the pass
            st.sampled_from([*_COMPARISONS, "truth", "other", "plus"]),
            st.integers(-3, 12),  # the int compared with
            st.integers(-2, 2),  # a shift (`value - 1`)
            st.booleans(),  # reflected (`x < value`)
        ),
        max_size=30,
    ),
    st.lists(st.integers(-4, 13), min_size=1, max_size=6),
)
def test_the_first_pass_a_traced_value_changes_is_the_first_use_it_changes(
    value: int, done: list[tuple[int, str, int, int, bool]], others: list[int]
) -> None:
    # first_changed looks comparisons with an int up by their int: it must find the pass of
    # the first use that replaying every use in turn finds
    watch = resume.Watch([])
    traced = watch.traced_value(value)
    watch.tracing = True
    for at, kind, x, shift, reflected in sorted(done, key=lambda use: use[0]):
        watch.at = at
        operand: Any = traced + shift if shift else traced
        if kind == "truth":
            bool(operand)
        elif kind == "other":
            str(operand)
        elif kind == "plus":
            operand = traced + x  # a shift by the int: its comparisons replay too
            _ = operand > 3
        else:
            compare = _COMPARISONS[kind]
            compare(x, operand) if reflected else compare(operand, x)
    uses = traced.__cc_uses__
    for other in others:
        values = {id(traced): other}
        expected = next((use.at for use in uses if not use.holds(values)), _NONE)
        assert watch.first_changed(values, _NONE) == expected, other
