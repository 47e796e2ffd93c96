"""Assistant spans of a 40-message conversation: their cost against the render's.

Run from the repository root (the corpus lives in ``../shared`` beside the checkout)::

    python benchmarks/spans.py             # every corpus template without {% generation %}
    python benchmarks/spans.py --rounds 3  # fewer timing rounds
    python benchmarks/spans.py --agent 400 # an agent's conversation of 400 messages instead

For each template: the render of the benchmark conversation of ``render.py`` (Qwen3 agent
conversation, 40 messages, 19 assistant turns, tool calls, results and reasoning, 5 tools;
without the tools when the template refuses them, with ``add_generation_prompt``), then
``render_with_spans`` (its prefix renders share the full render's inputs and tojson
results), and the render plus ``derive_spans_by_prefixes`` (the reference: every prefix
rendered from its own copy of the inputs). Both are checked to give the same spans before
anything is timed. Times are the best of ``--rounds`` rounds (each times every measure in
turn) with the collector off; the ratios are to the render of the same rounds. The summary
counts the templates whose spans cost at most 3x the render. "2 msgs" is the render of the conversation's
first two messages against the whole: the share of a render that does not depend on the
conversation's length (system prompt, tools), which every prefix render pays again.
``--agent N`` times an agent's trajectory of N messages instead (the same system prompt and
tools, one question, then calls with reasoning and their results): one long turn, where
spans that cost a constant number of renders stay at the same ratio whatever N.
``--questions Q`` splits it into Q such turns, each opened by its own question.
``--chat N`` times a chat dataset's conversation of N messages instead (the same system
prompt, then questions and answers in turn, no tools): the shape most fine-tuning sets
have, and the one some templates take only (Mistral's refuse the tool messages of the
others). ``--training`` renders without the generation prompt, and ends the conversation
on an answer (one more message where it ends otherwise): as training data are rendered.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from render import DEFAULT_SHARED, big_qwen3_case, load_cases  # noqa: E402

from chatcodec import ChatTemplate, TemplateError  # noqa: E402
from chatcodec.template.render import PrefixRenders, derive_spans_by_prefixes  # noqa: E402


def best_times(calls: Sequence[tuple[Callable[[], Any], int]], rounds: int) -> list[float]:
    """Per call, the fastest batch of ``inner`` calls of each ``(fn, inner)`` over ``rounds``
    rounds (GC off). The rounds interleave the functions, so that a slow spell of a shared
    machine slows them alike rather than one of them."""
    best = [float("inf")] * len(calls)
    gc.disable()
    try:
        for _ in range(rounds):
            for at, (fn, inner) in enumerate(calls):
                start = time.perf_counter()
                for _ in range(inner):
                    fn()
                best[at] = min(best[at], (time.perf_counter() - start) / inner)
    finally:
        gc.enable()
    return best


def agent_case(size: int, questions: int = 1) -> dict[str, Any]:
    """An agent's conversation of ``size`` messages (at least 4): the big case's system
    prompt and tools, one question, then calls (with reasoning) and their results in turn,
    ending with a result: one long turn, as agent trajectories are; or ``questions`` such
    turns of about the same length, each opened by its own question."""
    big = big_qwen3_case()
    messages = big["messages"][:2]
    turn = 0
    every, asked = max(4, size // questions), 1
    while len(messages) < size:
        if asked < questions and len(messages) >= every * asked:
            messages.append({"role": "user", "content": f"Question {turn}: and now?"})
            asked += 1
        call = {
            "id": f"call_{turn}",
            "type": "function",
            "function": {"name": f"tool_{turn % 5}", "arguments": {"query": f"step {turn}"}},
        }
        messages.append(
            {
                "role": "assistant",
                "content": "",
                "reasoning_content": f"Step {turn}: I should look this up.",
                "tool_calls": [call],
            }
        )
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": f"Result {turn}."})
        turn += 1
    return dict(big, messages=messages[:size])


def chat_case(size: int) -> dict[str, Any]:
    """A chat dataset's conversation of ``size`` messages (at least 2): the big case's system
    prompt, then questions and answers in turn, without tools."""
    big = big_qwen3_case()
    messages = big["messages"][:1]
    turn = 0
    while len(messages) < size:
        messages.append({"role": "user", "content": f"Question {turn}: what of {turn}?"})
        messages.append({"role": "assistant", "content": f"Answer {turn}: it is {turn}."})
        turn += 1
    return dict(big, messages=messages[:size], tools=None)


def bench_template(
    name: str,
    source: str,
    special: dict[str, Any],
    rounds: int,
    big: dict[str, Any],
    prompt: bool = True,
) -> tuple[float, float, float, float, float] | None:
    template = ChatTemplate(source, name=name)
    if template.has_generation_tag:
        return None
    messages = big["messages"]
    for tools in (big["tools"], None):
        options = {"tools": tools, "documents": None, "now": 0, **special}
        try:
            template.render(messages, add_generation_prompt=prompt, **options)
            break
        except TemplateError:
            continue
    else:
        return None
    tools, now = options["tools"], options["now"]
    context = {k: v for k, v in options.items() if k not in ("tools", "documents", "now")}

    def render() -> str:
        return template.render(messages, tools, None, prompt, now=now, **context)

    def spans() -> Any:
        return template.render_with_spans(messages, tools, None, prompt, now, **context).spans

    def short() -> str:
        return template.render(messages[:2], tools, None, prompt, now=now, **context)

    def prefixes() -> Any:
        text = render()
        return derive_spans_by_prefixes(template, text, messages, tools, None, now, context)

    if spans() != prefixes():
        raise SystemExit(f"FAILED: {name}: the two methods give different spans")
    base, fixed, new, old = best_times([(render, 5), (short, 5), (spans, 1), (prefixes, 1)], rounds)
    return base, fixed, new, old, resumed_share(template, messages, tools, now, context, prompt)


def resumed_share(
    template: ChatTemplate,
    messages: Sequence[Any],
    tools: Any,
    now: Any,
    context: Any,
    prompt: bool = True,
) -> float:
    """The share of the prefix renders the spans need that resume from the watched render
    (each turn's prefix before it, with the generation prompt, and up to it, without; the
    last one's is the whole render without it)."""
    renders = PrefixRenders.of(template, messages, tools, None, prompt, now, **context)
    with renders.resuming():
        for index, message in enumerate(messages):
            if message.get("role") == "assistant":
                if index:
                    renders.render(index, True)
                if index + 1 < len(messages) or prompt:
                    renders.render(index + 1, False)
    return renders.resumed / max(1, renders.resumed + renders.rendered)


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=DEFAULT_SHARED)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", default="", help="templates whose name contains this")
    parser.add_argument(
        "--agent",
        type=int,
        metavar="N",
        help="an agent's conversation of N messages (one question, then calls and "
        "results) instead of the 40-message one",
    )
    parser.add_argument(
        "--chat",
        type=int,
        metavar="N",
        help="a chat dataset's conversation of N messages (system prompt, then questions and "
        "answers, no tools) instead of the 40-message one",
    )
    parser.add_argument(
        "--questions",
        type=int,
        default=1,
        metavar="Q",
        help="with --agent: Q questions, each followed by its calls and results",
    )
    parser.add_argument(
        "--training",
        action="store_true",
        help="render without the generation prompt, the conversation ending on an answer",
    )
    args = parser.parse_args(argv)
    if args.agent is not None and args.agent < 4:
        parser.error("--agent takes 4 messages or more")
    if args.chat is not None and (args.chat < 2 or args.agent is not None):
        parser.error("--chat takes 2 messages or more, and no --agent")
    if args.questions < 1 or (args.questions > 1 and args.agent is None):
        parser.error("--questions takes 1 or more, with --agent")
    if args.chat is not None:
        big = chat_case(args.chat)
    elif args.agent is not None:
        big = agent_case(args.agent, args.questions)
    else:
        big = big_qwen3_case()
    if args.training and big["messages"][-1]["role"] != "assistant":
        answer = {"role": "assistant", "content": "That is all."}
        big = dict(big, messages=[*big["messages"], answer])
    warnings.simplefilter("ignore")  # special tokens the template never reads
    special: dict[str, dict[str, Any]] = {}
    for case in load_cases(args.shared):
        special.setdefault(case["template"], case["kwargs"])
    rows = []
    print(
        f"{'template':46} {'render':>8} {'2 msgs':>7} {'spans':>7} {'prefix':>7} {'gain':>5} "
        f"{'resumed':>7}"
    )
    for name in sorted(special):
        if args.only not in name:
            continue
        source = (args.shared / "chat_templates" / name).read_text(encoding="utf-8")
        result = bench_template(name, source, special[name], args.rounds, big, not args.training)
        if result is None:
            continue
        base, fixed, new, old, share = result
        rows.append((base, fixed, new, old))
        print(
            f"{name[:46]:46} {base * 1e3:7.2f}m {fixed / base:6.0%} {new / base:6.1f}x "
            f"{old / base:6.1f}x {old / new:5.1f} {share:7.0%}"
        )
    turns = sum(message["role"] == "assistant" for message in big["messages"])
    print(
        f"\n{len(rows)} templates ({len(big['messages'])} messages, {turns} assistant turns); "
        "ratios to the render"
    )
    for label, column in (("spans", 2), ("prefix method", 3)):
        ratios = [row[column] / row[0] for row in rows]
        print(
            f"{label}: median {statistics.median(ratios):.1f}x "
            f"(p10 {percentile(ratios, 0.1):.1f}x, p90 {percentile(ratios, 0.9):.1f}x); "
            f"{sum(ratio <= 3.0 for ratio in ratios)} at 3x or less"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
