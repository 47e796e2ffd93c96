"""What one public call costs on a template that is slow only in the renders the call makes
for itself (probes, the auto parser's analysis, span prefixes): one budget per call.

Run from the repository root::

    python benchmarks/budget.py               # Limits(max_seconds=0.5)
    python benchmarks/budget.py --seconds 0.2

Each template renders the caller's own conversation at once. "loops" templates loop for good
in the renders the call makes (when given tools, a reasoning turn, a tool result or a
generation prompt); "a while" templates spend some 50 ms in every render, so each render
fits the limit and the call's dozens of renders do not. Every call shares one budget of
``--seconds`` among its renders, so each should raise ``TemplateLimitError`` after about that
long; the table gives the wall and CPU seconds it took, and the step its error names.
(Before the budget, the first ``prepare`` below ran for minutes: the analysis rendered with
the default 10 s limit per render.)
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from chatcodec import ChatTemplate, Codec, Limits, TemplateLimitError
from chatcodec.template.capabilities import probe_capabilities

FOREVER = "{%- for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
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


def _when(condition: str) -> str:
    return (
        "{%- for m in messages %}{% if " + condition + " %}" + FOREVER + "{% endif %}{% endfor %}"
    )


TEMPLATES = {
    "loops given tools": CHAT + "{%- if tools %}" + FOREVER + "{% endif %}",
    "loops on reasoning": _when("m.reasoning_content") + CHAT,
    "loops on a tool result": _when("m.role == 'tool'") + CHAT,
    "loops on a generation prompt": CHAT
    + "{%- if add_generation_prompt %}"
    + FOREVER
    + "{% endif %}",
    "a while every render": A_WHILE + CHAT,
}


def _calls(limits: Limits) -> list[tuple[str, str, Callable[[str], Any]]]:
    return [
        ("Codec.prepare", "loops given tools", lambda s: Codec(s, limits=limits).prepare(USER)),
        (
            "Codec.prepare (analysis)",
            "loops on reasoning",
            lambda s: Codec(s, limits=limits).prepare(USER, parallel_tool_calls=False),
        ),
        ("Codec.prepare", "a while every render", lambda s: Codec(s, limits=limits).prepare(USER)),
        (
            "probe_capabilities",
            "loops on a tool result",
            lambda s: probe_capabilities(ChatTemplate(s, limits=limits)),
        ),
        (
            "probe_capabilities",
            "a while every render",
            lambda s: probe_capabilities(ChatTemplate(s, limits=limits)),
        ),
        (
            "render_with_spans (4 msgs)",
            "loops on a generation prompt",
            lambda s: ChatTemplate(s, limits=limits).render_with_spans(CONVERSATION),
        ),
        (
            "render_with_spans (24 msgs)",
            "loops on a generation prompt",
            lambda s: ChatTemplate(s, limits=limits).render_with_spans(CONVERSATION * 6),
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=0.5, help="Limits.max_seconds")
    args = parser.parse_args()
    limits = Limits(max_seconds=args.seconds)
    # the modules a first call imports (the reply families, the analysis) are not timed
    Codec(CHAT).prepare(USER)
    probe_capabilities(ChatTemplate(CHAT))
    print(f"Limits(max_seconds={args.seconds:g}): one budget per call\n")
    print(f"| {'call':<28} | {'template':<28} | wall s | CPU s | outcome |")
    print(f"| {'-' * 28} | {'-' * 28} | --- | --- | --- |")
    for call, name, run in _calls(limits):
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            run(TEMPLATES[name])
            outcome = "returned"
        except TemplateLimitError as exc:
            outcome = "TemplateLimitError: ..." + str(exc).rpartition(" while ")[2].rstrip(")")
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        print(f"| {call:<28} | {name:<28} | {wall:.2f} | {cpu:.2f} | {outcome} |")


if __name__ == "__main__":
    main()
