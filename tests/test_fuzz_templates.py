"""Issue 8: fuzzing the sandbox with hostile templates (a bounded, seeded run by default).

Each template is assembled at random from hostile building blocks: big multiplications of
strings, bytes and lists, shared references, nested loops, filters that loop or expand over
large ranges, recursive macros, printf and format widths, doubling loops, and attempts to
climb to Python internals (``__class__``, ``__globals__``). Rendered with small limits, every
template must keep the sandbox's promises:

- only chatcodec's ``TemplateError`` (and its subclasses) escapes, at compile or render;
- the render returns. How long past its time limit it returns is measured, not asserted:
  ``benchmarks/sandbox.py --fuzz N`` runs the same templates and reports the worst overrun.

The default run is small and seeded (it is part of the suite). A long run:

    CHATCODEC_FUZZ_TEMPLATES=2000 python -m pytest tests/test_fuzz_templates.py -q

(templates; ``CHATCODEC_FUZZ_SEED`` picks another seed).
"""

from __future__ import annotations

import functools
import os
import random

import pytest

from chatcodec import ChatTemplate, Limits, TemplateError

TEMPLATES = int(os.environ.get("CHATCODEC_FUZZ_TEMPLATES", "60"))
SEED = int(os.environ.get("CHATCODEC_FUZZ_SEED", "8"))
LIMITS = Limits(max_seconds=0.1, max_output_chars=1_000_000)

# What every template starts with: a long string, a namespace, and a list of shared refs
PRELUDE = (
    "{% set s = 'x' * 10000 %}{% set b = 'y'.encode() * 1000 %}"
    "{% set ns = namespace(v='ab', l=[1, 2], n=3) %}{% set shared = [s] * 50 %}"
)
NUMBERS = ("0", "1", "7", "-1", "1000", "100000", "1000000", "10**9", "2**31", "10**10")
LEAVES = (
    "s",
    "b",
    "shared",
    "ns.v",
    "ns.l",
    "ns",
    "messages",
    "tools",
    "messages[0]",
    "messages[0].content",
    "'%0{n}d'",
    "'{{:>{n}}}'",
    "[1]",
    "[s, s]",
    "range({n})",
    "dict(a=shared)",
    "loop",
    "cycler",
    "lipsum",
    "none",
    "nothing_here",
)
# `{x}` is a value, `{n}` a number
EXPRESSIONS = (
    "{x} * {n}",
    "[{x}] * {n}",
    "[{x}, {x}]",
    "({x}, {x})",
    "{x} ~ {x}",
    "{x} + {x}",
    "{x} % {x}",
    "{x} % ({x},) * 3",
    "{n} ** {n}",
    "{x}|list",
    "{x}|string",
    "{x}|tojson",
    "{x}|tojson(indent={n})",
    "{x}|pprint",
    "{x}|map('sum')|list",
    "{x}|map('abs')|list",
    "{x}|map('string')|join",
    "{x}|select('odd')|list",
    "{x}|unique|list",
    "{x}|sort",
    "{x}|sort(attribute='a')",
    "{x}|dictsort",
    "{x}|groupby('a')",
    "{x}|batch({n}, 'x')|list",
    "{x}|slice({n})|list",
    "{x}|sum(start=[])",
    "{x}|min",
    "{x}|wordwrap(1)",
    "{x}|title",
    "{x}|urlize",
    "{x}|replace('x', {x})",
    "{x}|center({n})",
    "{x}|indent({n})",
    "{x}|join({x})",
    "{x}|length",
    "{x}|first",
    "{x}.encode()",
    "{x}.upper()",
    "{x}.split()",
    "{x}.format({x}, {x})",
    "{x}.join({x})",
    "{x}.center({n})",
    "{x}.replace('x', {x})",
    "{x}[{n}]",
    "{x}[::-1]",
    "{x}.__class__",
    "{x}.__class__.__mro__[1].__subclasses__()",
    "{x}.__init__.__globals__",
    "{x}|attr('__class__')",
    "dict({x}=1)",
    "namespace(a={x})",
    "strftime_now({x})",
    "strftime_now('%c' * {n})",
    "lipsum({n}, max={n})",
    "raise_exception({x})",
    "{x} is defined",
    "{x} in {x}",
    "{x} == {x}",
)
STATEMENTS = (
    "{{{{ {e} }}}}",
    "{{% set x = {e} %}}{{{{ x }}}}",
    "{{% for i in {e} %}}{body}{{% endfor %}}",
    "{{% for i in range({n}) %}}{{% for j in range({n}) %}}{body}{{% endfor %}}{{% endfor %}}",
    "{{% if {e} %}}{body}{{% else %}}{body}{{% endif %}}",
    "{{% set ns.v = ns.v ~ {e} %}}",
    "{{% for i in range(60) %}}{{% set ns.v = ns.v ~ ns.v %}}{{% endfor %}}{{{{ ns.v|length }}}}",
    "{{% for i in range(60) %}}{{% set ns.l = ns.l + ns.l %}}{{% endfor %}}",
    "{{% for i in range(40) %}}{{% set ns.n = ns.n * ns.n %}}{{% endfor %}}",
    "{{% macro m(k) %}}{body}{{{{ m(k + 1) }}}}{{% endmacro %}}{{{{ m(0) }}}}",
    "{{% set block %}}{body}{body}{{% endset %}}{{{{ block|length }}}}",
    "{{% for i in [[1]] recursive %}}{body}{{{{ loop([[{e}]]) }}}}{{% endfor %}}",
)


def _expression(rng: random.Random, depth: int) -> str:
    if depth <= 0 or rng.random() < 0.3:
        return rng.choice(LEAVES).format(n=rng.choice(NUMBERS))
    form = rng.choice(EXPRESSIONS)
    return form.format(
        x="(" + _expression(rng, depth - 1) + ")",
        n=rng.choice(NUMBERS),
    )


def _statement(rng: random.Random, depth: int) -> str:
    form = rng.choice(STATEMENTS)
    body = _statement(rng, depth - 1) if depth > 0 and rng.random() < 0.6 else "{{ i }}"
    return form.format(e=_expression(rng, 3), n=rng.choice(NUMBERS), body=body)


@functools.lru_cache(maxsize=4)
def hostile_templates(count: int, seed: int) -> list[str]:
    """``count`` hostile templates, the same ones for the same seed."""
    rng = random.Random(seed)
    return [
        PRELUDE + "".join(_statement(rng, 2) for _ in range(rng.randint(1, 3)))
        for _ in range(count)
    ]  # a list shared by the cache: callers only read it


def render_hostile(source: str, limits: Limits = LIMITS) -> str | None:
    """Compile and render one hostile template; its text, or None when chatcodec refused it
    (any other exception propagates: that is the failure the fuzz looks for)."""
    messages = [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi"}]
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    try:
        return ChatTemplate(source, limits=limits).render(messages, tools=tools)
    except TemplateError:
        return None


def test_the_generator_is_seeded_and_varied() -> None:
    first = hostile_templates(20, SEED)
    assert first == hostile_templates.__wrapped__(20, SEED)  # built again, not cached
    assert len(set(first)) >= 15  # a short draw may repeat a one-statement template
    assert first != hostile_templates(20, SEED + 1)


@pytest.mark.parametrize("index", range(TEMPLATES))
def test_hostile_template_only_raises_template_errors(index: int) -> None:
    source = hostile_templates(TEMPLATES, SEED)[index]
    text = render_hostile(source)
    assert text is None or len(text) <= LIMITS.max_output_chars
