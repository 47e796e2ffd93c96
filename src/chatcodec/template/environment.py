"""The sandboxed Jinja environment that chat templates run in.

It mirrors the environment transformers 5.23.0 builds for ``apply_chat_template`` (an
immutable sandbox with ``trim_blocks``, ``lstrip_blocks``, loop controls, the
``{% generation %}`` tag, its own ``tojson``, ``raise_exception``, ``strftime_now``, a
restricted ``dict`` and an underscore-refusing ``namespace``), so templates render the same
bytes. On top of it, a template is treated as untrusted input: every render runs under a time
budget and an output budget (:class:`Limits`), and value growth through operators and
filters is bounded, so a hostile template cannot hang or exhaust the caller.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.utils
from jinja2.compiler import CodeGenerator, Frame
from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment

__all__ = ["Limits", "RenderState", "ChatSandbox", "new_environment", "render_state"]


@dataclass(frozen=True)
class Limits:
    """Bounds on one render of an untrusted template.

    The defaults are far above what any real chat template needs (the longest render of the
    shared corpus takes milliseconds and a few hundred kilobytes) and low enough that a
    hostile template fails fast instead of hanging a server or eating its memory.
    """

    max_seconds: float = 10.0
    """Wall-clock budget for one render."""
    max_output_chars: int = 64_000_000
    """Largest rendered prompt, and largest single string or list a template may build."""


class RenderState(threading.local):
    """Per-thread state of the render in progress (a compiled template is shared)."""

    deadline: float = float("inf")
    max_chars: int = Limits.max_output_chars
    position: int = 0
    spans: list[tuple[int, int]] | None = None
    now: datetime | None = None


render_state = RenderState()


def _check_deadline() -> None:
    if time.monotonic() > render_state.deadline:
        raise _LimitExceeded("the render ran past its time limit")


class _LimitExceeded(Exception):
    """Internal signal that a render limit was hit; surfaced as TemplateLimitError."""


def _check_size(value: Any) -> Any:
    try:
        size = len(value) if isinstance(value, (str, list, tuple, dict, bytes)) else 0
    except TypeError:  # pragma: no cover - the types above all have a length
        size = 0
    if size > render_state.max_chars:
        raise _LimitExceeded(f"the template built a value of {size} items, over the output limit")
    return value


# --- the functions transformers puts in the environment -------------------------------


def _raise_exception(message: Any) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(
    x: Any,
    ensure_ascii: bool = False,
    indent: int | str | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # transformers replaces jinja's tojson: plain json.dumps, no HTML escaping, key order kept
    return json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(format: str) -> str:
    now = render_state.now
    if now is None:  # transformers reads the local wall clock
        return datetime.now().strftime(format)
    return now.strftime(format)


class _TemplateDict:
    # A callable stand-in for `dict` that exposes no type to climb from (as transformers does)
    def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict.fromkeys(*args, **kwargs)


class _TemplateNamespace(jinja2.utils.Namespace):
    # Namespaces refuse underscore-prefixed names, so no dunder can be planted or read
    def __init__(*args: Any, **kwargs: Any) -> None:  # noqa: N805 - jinja's signature trick
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            _TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _TemplateNamespace._check_name(name)
        _check_size(value)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check_name(name: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise SecurityError(
                "Chat templates cannot store underscore-prefixed attributes on a namespace, "
                f"but got {name!r}. Please rename the attribute."
            )


# --- the {% generation %} tag ----------------------------------------------------------


class GenerationExtension(jinja2.ext.Extension):
    """``{% generation %}...{% endgeneration %}`` marks the assistant's generated text.

    Like transformers, the span starts at the length of what the render has emitted so far
    and is as long as the block's own output.
    """

    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        call = self.call_method("_generation_support")
        return jinja2.nodes.CallBlock(call, [], [], body).set_lineno(lineno)

    def _generation_support(self, caller: Callable[[], str]) -> str:
        rv = caller()
        spans = render_state.spans
        if spans is not None:
            start = render_state.position
            spans.append((start, start + len(rv)))
        return rv


# --- the guarded sandbox ---------------------------------------------------------------

_DICT_ATTRIBUTES = frozenset(dir(dict))
_WIDTH_METHODS = frozenset({"center", "ljust", "rjust", "zfill", "expandtabs"})
_LOOP_GUARD = "__chatcodec_loop_guard"
_CHECK_EVERY = 1024


def _loop_guard(iterable: Iterable[Any]) -> Iterator[Any]:
    # Wraps every {% for %} iterable: loops that call nothing still meet the time limit
    count = 0
    for item in iterable:
        count += 1
        if count == _CHECK_EVERY:
            count = 0
            _check_deadline()
        yield item


class _GuardedCodeGenerator(CodeGenerator):
    # String concatenation (`~`) goes through the size check instead of a bare join
    def visit_Concat(self, node: jinja2.nodes.Concat, frame: Frame) -> None:
        self.write("environment.guarded_concat((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


def _binop(op: str, left: Any, right: Any) -> Any:
    if op == "*":
        if isinstance(left, int) and not isinstance(left, bool):
            left, right = right, left
        if isinstance(left, (str, list, tuple)) and isinstance(right, int):
            if len(left) * max(right, 0) > render_state.max_chars:
                raise _LimitExceeded("the template multiplied a sequence past the output limit")
        return left * right
    if op == "**":
        if isinstance(left, int) and isinstance(right, int) and abs(right) > 4096:
            raise _LimitExceeded("the template raised a number to an unbounded power")
        return left**right
    if op == "%":
        return _check_size(left % right)
    return _check_size(left + right)


class ChatSandbox(ImmutableSandboxedEnvironment):
    """transformers' sandbox, with fast paths for the common lookups and resource bounds."""

    code_generator_class = _GuardedCodeGenerator
    intercepted_binops = frozenset({"*", "**", "%", "+"})

    def getattr(self, obj: Any, attribute: str) -> Any:
        # `message.content` on a plain dict: same result as the sandbox's own lookup, which
        # tries the attribute first and the key second, without raising AttributeError
        if type(obj) is dict and attribute not in _DICT_ATTRIBUTES:
            try:
                return obj[attribute]
            except KeyError:
                return self.undefined(obj=obj, name=attribute)
            except TypeError:
                pass
        return super().getattr(obj, attribute)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        _check_deadline()
        name = getattr(__obj, "__name__", None)
        if name in _WIDTH_METHODS and isinstance(getattr(__obj, "__self__", None), str):
            width = args[0] if args else kwargs.get("tabsize", kwargs.get("width", 0))
            if isinstance(width, int) and width > render_state.max_chars:
                raise _LimitExceeded("the template padded a string past the output limit")
        return _check_size(super().call(__context, __obj, *args, **kwargs))

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        return _binop(operator, left, right)

    def guarded_concat(self, parts: Iterable[Any]) -> str:
        return _check_size("".join(map(str, parts)))

    def _parse(self, source: str, name: str | None, filename: str | None) -> jinja2.nodes.Template:
        tree = super()._parse(source, name, filename)
        for loop in tree.find_all(jinja2.nodes.For):
            loop.iter = jinja2.nodes.Filter(
                loop.iter, _LOOP_GUARD, [], [], None, None, lineno=loop.lineno
            )
        return tree


def _guard_filter(func: Callable[..., Any]) -> Callable[..., Any]:
    def guarded(*args: Any, **kwargs: Any) -> Any:
        return _check_size(func(*args, **kwargs))

    guarded.__dict__.update(getattr(func, "__dict__", {}))  # keeps jinja's pass_context/pass_eval_context marks
    guarded.__name__ = getattr(func, "__name__", "filter")
    guarded.__doc__ = func.__doc__
    return guarded


def _bounded_lipsum(n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> str:
    if n > 1000 or max > 10_000:
        raise _LimitExceeded("lipsum asked for more text than the output limit allows")
    return jinja2.utils.generate_lorem_ipsum(n=n, html=html, min=min, max=max)


def new_environment() -> ChatSandbox:
    """A fresh environment configured as transformers configures its own."""
    env = ChatSandbox(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[GenerationExtension, jinja2.ext.loopcontrols],
    )
    for name, func in list(env.filters.items()):
        env.filters[name] = _guard_filter(func)
    env.filters["tojson"] = _guard_filter(_tojson)
    env.filters[_LOOP_GUARD] = _loop_guard
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["dict"] = _TemplateDict()
    env.globals["namespace"] = _TemplateNamespace
    env.globals["lipsum"] = _bounded_lipsum
    return env


def utc_instant(now: float | int | datetime) -> datetime:
    """The wall-clock time strftime_now shows for a pinned instant: UTC, naive like now()."""
    if isinstance(now, datetime):
        if now.tzinfo is None:
            raise ValueError("now must be unix seconds or an aware datetime")
        return now.astimezone(timezone.utc).replace(tzinfo=None)
    return datetime.fromtimestamp(now, tz=timezone.utc).replace(tzinfo=None)
