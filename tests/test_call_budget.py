"""One budget per call (issue 37): every render a public call makes runs under the caller's
``Limits``, and the renders of one call share one deadline.

Each template here renders the caller's own conversation at once; it is slow only in the
renders the call makes for itself (probes, the auto parser's analysis, span prefixes). It
either loops for good in those renders, or spends about a third of the time limit in every
render, so that each render fits the limit and the call's dozens of renders together do not.
The calls must raise the time limit's ``TemplateLimitError``, which names the call's budget
and the step it ran out in (which step depends on the machine's load: any of the call's; the
step of each call is checked on a budget spent from the start). As a safety net (not a
timing claim), the CPU they spend is checked against a generous cap. (Derived
spans resume most prefixes from one watched render: they are tested with prefixes that loop.)
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from chatcodec import ChatTemplate, Codec, Limits, TemplateLimitError
from chatcodec.reply.auto import analysis_for
from chatcodec.template.capabilities import probe_capabilities, tool_call_support
from chatcodec.template.environment import call_budget, render_state
from chatcodec.template.render import derive_spans_by_prefixes

LIMITS = Limits(max_seconds=0.2)
CPU_CAP = 5.0  # seconds: far above the 0.2 s budget, far below what each call took before
# 10**10 passes: loops for good as far as any limit is concerned
FOREVER = "{%- for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
# 200,000 passes: some 50 ms of CPU here, a fraction of LIMITS (~54 probes cannot fit it)
A_WHILE = "{%- for i in range(200) %}{% for j in range(1000) %}{% endfor %}{% endfor %}"
CHAT = (
    "{%- for m in messages %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>\n{% endfor %}"
    "{%- if add_generation_prompt %}<assistant>{% endif %}"
)
USER = [{"role": "user", "content": "Hello"}]
CONVERSATION = [
    {"role": "user", "content": "Hello"},
    {"role": "assistant", "content": "Hi there"},
    {"role": "user", "content": "How are you?"},
    {"role": "assistant", "content": "Fine, thanks"},
]
# slow when the render is given tools (llama.cpp's tool-call probes; the request has none)
SLOW_WITH_TOOLS = CHAT + "{%- if tools %}" + FOREVER + "{% endif %}"
# slow when an assistant turn carries reasoning (the auto parser's analysis probes it)
SLOW_WITH_REASONING = (
    "{%- for m in messages %}{% if m.reasoning_content %}" + FOREVER + "{% endif %}{% endfor %}"
) + CHAT
# slow for a tool result (capability probes render them)
SLOW_WITH_TOOL_RESULTS = (
    "{%- for m in messages %}{% if m.role == 'tool' %}" + FOREVER + "{% endif %}{% endfor %}"
) + CHAT
# slow for a generation prompt (the span prefixes end with one; the render asks for none)
SLOW_WITH_PROMPT = CHAT + "{%- if add_generation_prompt %}" + FOREVER + "{% endif %}"
# every render a fraction of the limit
EVERY_RENDER_A_WHILE = A_WHILE + CHAT


@contextmanager
def cpu_capped() -> Iterator[None]:
    start = time.process_time()
    yield
    spent = time.process_time() - start
    assert spent < CPU_CAP, f"the call spent {spent:.1f} s of CPU on a 0.2 s budget"


# the steps of each call, as its error names them
PREPARING = (
    "(preparing the request|probing the template's tool-call support|analysing the template)"
)
PROBING = "probing the template's capabilities"
SPANS = "deriving the assistant spans"
ENCODING = f"(encoding the conversation|{SPANS}|finding the thought markers|{PREPARING[1:-1]})"


def _out_of_time(steps: str, seconds: str = "0.2") -> pytest.RaisesContext[TemplateLimitError]:
    # the time limit's error of a direct render, with the call's budget and its step named
    return pytest.raises(
        TemplateLimitError,
        match=rf"^the render ran past its time limit: the {seconds} s its call has for all of "
        rf"its renders ran out while {steps}",
    )


# ------------------------------------------------------------------------- Codec.prepare


def test_prepare_probes_tool_calls_within_the_callers_limits() -> None:
    codec = Codec(SLOW_WITH_TOOLS, limits=LIMITS)
    assert codec.render(USER, add_generation_prompt=True) == "<user>Hello</user>\n<assistant>"
    with cpu_capped(), _out_of_time(PREPARING) as caught:
        codec.prepare(USER)
    assert caught.value.kind == "LimitExceeded" and caught.value.stage == "render"


def test_prepare_runs_the_auto_parser_analysis_within_the_callers_limits() -> None:
    """The analysis built its own template with the default limits (10 s a render): a
    0.2 s Codec spent minutes in it."""
    codec = Codec(SLOW_WITH_REASONING, limits=LIMITS)
    codec.render(USER, add_generation_prompt=True)
    with cpu_capped(), _out_of_time(PREPARING):
        codec.prepare(USER, parallel_tool_calls=False)
    with cpu_capped(), _out_of_time(PREPARING):
        codec.prepare(USER, parallel_tool_calls=False)  # (nothing of it was remembered)


def test_prepare_shares_one_budget_across_its_renders() -> None:
    codec = Codec(EVERY_RENDER_A_WHILE, limits=LIMITS)
    with cpu_capped(), _out_of_time(PREPARING):
        codec.prepare(USER)


# ---------------------------------------------------------------- capability probing


def test_capability_probes_stop_at_the_templates_limits() -> None:
    """A probe that ran out of time counted as a refused probe, each with a fresh budget:
    the capabilities came back wrong, after 0.2 s per such probe."""
    template = ChatTemplate(SLOW_WITH_TOOL_RESULTS, limits=LIMITS)
    template.render(CONVERSATION)
    with cpu_capped(), _out_of_time(PROBING):
        probe_capabilities(template)
    with cpu_capped(), _out_of_time(PROBING):
        probe_capabilities(template)  # (not cached as an answer)


def test_capability_probes_share_one_budget() -> None:
    template = ChatTemplate(EVERY_RENDER_A_WHILE, limits=LIMITS)
    with cpu_capped(), _out_of_time(PROBING):
        probe_capabilities(template)


def test_tool_call_probes_of_a_source_take_the_given_limits() -> None:
    with cpu_capped(), _out_of_time("probing the template's tool-call support"):
        tool_call_support(SLOW_WITH_TOOLS, limits=LIMITS)


# ------------------------------------------------------------------------ derived spans


@pytest.mark.parametrize("turns", [2, 12])
def test_span_prefixes_share_the_renders_budget(turns: int) -> None:
    """A prefix that ran out of time was skipped (its span missing), each prefix with a
    fresh budget. 12 turns: the prefixes resume from a watched render."""
    messages = CONVERSATION * (turns // 2)
    template = ChatTemplate(SLOW_WITH_PROMPT, limits=LIMITS)
    assert template.render(messages).count("<assistant>") == turns
    with cpu_capped(), _out_of_time(SPANS):
        template.render_with_spans(messages)


# ------------------------------------------------------------------------- Codec.encode


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("tokenizers")
    from ._tokenizer import write_checkpoint

    return write_checkpoint(tmp_path_factory.mktemp("budget") / "slow", SLOW_WITH_REASONING)


def test_encode_finds_the_thought_markers_within_its_budget(checkpoint: Path) -> None:
    """Finding the thought markers prepares a request (the analysis with the default
    limits), and a failed preparation was remembered as "no markers"."""
    codec = Codec(SLOW_WITH_REASONING, limits=LIMITS, tokenizer=checkpoint)
    assert sum(codec.encode(CONVERSATION).assistant_masks) > 0
    for _ in range(2):  # (the failure is not remembered as an answer)
        with cpu_capped(), _out_of_time(ENCODING):
            codec.encode(CONVERSATION, mask_reasoning=False)


def test_encode_shares_one_budget(checkpoint: Path) -> None:
    codec = Codec(EVERY_RENDER_A_WHILE, limits=LIMITS, tokenizer=checkpoint)
    with cpu_capped(), _out_of_time(ENCODING):
        codec.encode(CONVERSATION * 2, mask_reasoning=False)


# ----------------------------------------------------------------- the budget itself


def test_a_call_inside_another_keeps_the_earlier_deadline() -> None:
    assert render_state.budget is None
    with call_budget(LIMITS, "outer") as outer:
        with call_budget(Limits(max_seconds=60), "inner") as inner:
            assert (inner.deadline, inner.seconds, inner.step) == (outer.deadline, 0.2, "inner")
            with call_budget(Limits(max_seconds=0.01), "innermost") as innermost:
                assert innermost.deadline < outer.deadline and innermost.seconds == 0.01
            assert render_state.budget is inner
        assert render_state.budget is outer
    assert render_state.budget is None


def _spent(call: str) -> None:
    template = ChatTemplate(CHAT)
    if call == "prepare":
        Codec(CHAT).prepare(USER)
    elif call == "probe_capabilities":
        probe_capabilities(template)
    elif call == "render_with_spans":
        template.render_with_spans(CONVERSATION)
    else:
        Codec(CHAT).render_with_spans(CONVERSATION * 6)


@pytest.mark.parametrize(
    ("call", "step"),
    [
        ("prepare", "preparing the request"),
        ("probe_capabilities", PROBING),
        ("render_with_spans", SPANS),
        ("Codec.render_with_spans", SPANS),
    ],
)
def test_a_spent_budget_names_the_step_and_is_not_remembered(call: str, step: str) -> None:
    """Inside a call whose budget is already spent, each call raises at its first render,
    naming its own step; nothing of it is remembered: the same call then succeeds."""
    with call_budget(Limits(max_seconds=0), "an outer call"), _out_of_time(step, "0"):
        _spent(call)
    _spent(call)


def test_the_analysis_renders_under_the_callers_output_limit() -> None:
    """Its probes render within the caller's output limit (they ran with the default's)
    and an analysis made under one limit is not another limit's."""
    calls = "{% if m.tool_calls %}{{ m.tool_calls | tojson }}{% endif %}"
    source = CHAT.replace("{{ m.content }}", "{{ m.content }}" + calls)
    small = Limits(max_output_chars=300)  # (some probes with calls are longer)
    assert ChatTemplate(source, limits=small).render(USER)
    roomy = analysis_for(source)
    assert analysis_for(source, limits=small) != roomy
    assert analysis_for(source) == roomy


def test_the_reference_spans_share_one_budget() -> None:
    """derive_spans_by_prefixes (the reference render_with_spans is held to) renders every
    prefix from its own copy of the inputs: they share one budget too."""
    template = ChatTemplate(SLOW_WITH_PROMPT, limits=LIMITS)
    text = template.render(CONVERSATION)
    with cpu_capped(), _out_of_time(SPANS):
        derive_spans_by_prefixes(template, text, CONVERSATION, None, None, None, {})
