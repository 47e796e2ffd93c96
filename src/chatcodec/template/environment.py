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

import contextlib
import functools
import json
import re
import reprlib
import threading
import time
import types
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
from jinja2.runtime import LoopContext, Macro
from jinja2.sandbox import (
    ImmutableSandboxedEnvironment,
    SandboxedEscapeFormatter,
    SandboxedFormatter,
)
from markupsafe import Markup

from .printed import CONTAINERS, measure

__all__ = [
    "Budget",
    "FilterMemo",
    "Limits",
    "Undefined",
    "bounded_undefined_message",
    "budget_spent",
    "call_budget",
    "render_deadline",
    "RenderState",
    "UnseenNamespace",
    "ChatSandbox",
    "GuardedCodeGenerator",
    "INNER_LOOP_GUARD",
    "LimitExceeded",
    "SELECTION",
    "MARK_PREFIX",
    "loop_source",
    "marker_statement",
    "new_environment",
    "render_state",
]


@dataclass(frozen=True)
class Limits:
    """Bounds on one render of an untrusted template.

    The defaults are far above what any real chat template needs (the longest render of the
    shared corpus takes milliseconds and a few hundred kilobytes) and low enough that a
    hostile template fails fast instead of hanging a server or eating its memory.
    """

    max_seconds: float = 10.0
    """Wall-clock budget for one render, and for all the renders of one public call together
    (probes, analysis, prefixes: see :func:`call_budget`)."""
    max_output_chars: int = 16_000_000
    """Largest rendered prompt, and largest single string or list a template may build."""


@dataclass(frozen=True)
class Budget:
    """The time budget of one public call, shared by every render the call makes."""

    deadline: float
    """When the call's time runs out (``time.monotonic()`` seconds)."""
    seconds: float
    """The call's time limit, as its ``Limits`` give it."""
    step: str
    """What the call is doing: errors name the step that ran out of time."""


class RenderState(threading.local):
    """Per-thread state of the render in progress (a compiled template is shared)."""

    deadline: float = float("inf")
    budget: Budget | None = None  # the public call's, set by call_budget
    max_chars: int = Limits.max_output_chars
    position: int = 0
    spans: list[tuple[int, int]] | None = None
    now: datetime | None = None
    made: list[Any] | None = None  # the caller's containers, as the render copied them
    inputs: set[int] | None = None  # their ids, once asked for (see _is_input)
    memo: FilterMemo | None = None  # set around renders of shared inputs (not by begin)
    # the namespaces whose fields were set (to another object than they held), while a
    # watched render (template/resume.py) runs: it copies only those at its next mark
    written: set[int] | None = None
    # meanwhile, how many of those settings changed a field's value (another value, or
    # another type); and what walks the loops marked with INNER_LOOP_GUARD (given the
    # iterable and the guard that walks one)
    changes: int = 0
    inner_loops: Callable[[Any, Callable[[Any], Iterator[Any]]], Iterable[Any]] | None = None
    # and what makes the lists of the filters rewritten to SELECTION (given the value and
    # what chooses from a list)
    selections: Callable[..., Any] | None = None

    def begin(
        self,
        deadline: float,
        max_chars: int,
        spans: list[tuple[int, int]] | None,
        now: datetime | None,
        made: list[Any] | None,
    ) -> tuple[Any, ...]:
        """Start a render's state; what it replaced, for ``end`` (renders may nest)."""
        saved: tuple[Any, ...] = (self.deadline, self.max_chars, self.position, self.spans)
        saved += (self.now, self.made, self.inputs)
        self.deadline, self.max_chars, self.position = deadline, max_chars, 0
        self.spans, self.now, self.made, self.inputs = spans, now, made, None
        return saved

    def end(self, saved: tuple[Any, ...]) -> None:
        (self.deadline, self.max_chars, self.position, self.spans, self.now) = saved[:5]
        self.made, self.inputs = saved[5:]


class FilterMemo:
    """``|tojson`` results on the inputs of renders that share them (the prefix renders of
    ``render_with_spans``). An input is a container ``_prepare`` built: the sandbox is
    immutable and ``made`` keeps them alive, so one keeps its id and its content for as
    long as the memo is set, and ``|tojson`` of it with the same arguments gives the same
    text every time. Only calls whose arguments are plain scalars (compared with their
    types: ``1``, ``1.0`` and ``True`` are different keys) are remembered; a call that
    raises is not."""

    def __init__(self, made: Iterable[Any]) -> None:
        self._made = made
        self._ids: frozenset[int] | None = None  # (found when first asked: most ask none)
        self.results: dict[tuple[Any, ...], str] = {}

    def holds(self, value: Any) -> bool:
        """Whether ``value`` is one of the inputs."""
        if self._ids is None:
            self._ids = frozenset(map(id, self._made))
        return id(value) in self._ids


_MEMO_SCALARS = frozenset({str, int, bool, type(None)})


def _memo_key(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...] | None:
    key: list[Any] = [id(args[0])]
    for value in (*args[1:], *kwargs.values()):
        kind = type(value)
        if kind is tuple and all(type(item) is str for item in value):
            key.append((kind, value))
        elif kind in _MEMO_SCALARS:
            key.append((kind, value))
        else:
            return None
    return (*key, *kwargs)


def _memoized(guarded: Callable[..., str]) -> Callable[..., str]:
    def memoized(*args: Any, **kwargs: Any) -> str:
        memo = render_state.memo
        if memo is None or not args or not memo.holds(args[0]):
            return guarded(*args, **kwargs)
        key = _memo_key(args, kwargs)
        if key is None:
            return guarded(*args, **kwargs)
        found = memo.results.get(key)
        if found is None:
            found = memo.results[key] = guarded(*args, **kwargs)
        return found

    return _keep_marks(memoized, guarded)


render_state = RenderState()


@contextlib.contextmanager
def call_budget(limits: Limits, step: str) -> Iterator[Budget]:
    """One deadline for every render a public call makes, ``limits.max_seconds`` from now.

    A render in the call takes the earlier of its own deadline and the call's
    (:func:`render_deadline`). A call made inside another keeps the outer deadline when it
    is earlier, so nested calls share one budget; ``step`` names what runs meanwhile."""
    state = render_state
    outer = state.budget
    deadline = time.monotonic() + limits.max_seconds
    if outer is not None and outer.deadline <= deadline:
        budget = Budget(outer.deadline, outer.seconds, step)
    else:
        budget = Budget(deadline, limits.max_seconds, step)
    state.budget = budget
    try:
        yield budget
    finally:
        state.budget = outer


def render_deadline(seconds: float) -> float:
    """The deadline of a render allowed ``seconds``: the earlier of its own and its call's."""
    deadline = time.monotonic() + seconds
    budget = render_state.budget
    return deadline if budget is None or budget.deadline > deadline else budget.deadline


def budget_spent() -> Budget | None:
    """The budget of the call in progress once its time has run out, else None. Code that
    takes a failed render as an answer (a probe the template refuses) raises instead then:
    every later render of the call would fail too."""
    budget = render_state.budget
    if budget is not None and time.monotonic() > budget.deadline:
        return budget
    return None


def _is_input(value: Any) -> bool:
    # One of the render's inputs, as the caller passed them (a template cannot change them
    # in an immutable sandbox): printing it alone is the caller's size, not the template's.
    # Repeated or nested in a value the template built, it is measured like any other.
    state = render_state
    inputs = state.inputs
    if inputs is None:
        if not state.made:
            return False
        inputs = state.inputs = set(map(id, state.made))  # once per render, when first asked
    return id(value) in inputs


def _check_deadline() -> None:
    if time.monotonic() > render_state.deadline:
        raise LimitExceeded("the render ran past its time limit")


class LimitExceeded(Exception):
    """Internal signal that a render limit was hit; surfaced as TemplateLimitError."""


def _check_size(value: Any) -> Any:
    try:
        size = len(value) if isinstance(value, _SIZED) else 0
    except TypeError:  # pragma: no cover - the types above all have a length
        size = 0
    if size > render_state.max_chars:
        raise LimitExceeded(f"the template built a value of {size} items, over the output limit")
    if size > _BIG:  # a big value costs real time: meet the deadline between such steps
        _check_deadline()
    return value


# --- refusing growth before it is allocated --------------------------------------------

_SIZED = (str, list, tuple, dict, bytes, bytearray)
_TEXT = (str, bytes, bytearray)  # `'x'.encode()` makes bytes: they grow like strings
_SEQUENCES = (str, bytes, bytearray, list, tuple)
_BIG = 1 << 16
_MAX_INT_BITS = 1 << 20  # ~315,000 decimal digits: far past anything a prompt prints
_PRINTF_WIDE = re.compile(  # `%%`, or a spec whose width or precision is a star or 6+ digits
    r"%(?:%|(?:\([^)]*\))?[-#0 +]*(\*|\d{6,})?(?:\.(\*|\d{6,}))?(?<=[*\d]))"
)
_DIGITS = re.compile(r"\d+")
_WIDE_BYTES = bytes.maketrans(b"123456789", b"000000000")


def _refuse_growth(size: int, what: str) -> None:
    # `size` is what the operation is about to allocate; refuse it before the allocation
    if size > render_state.max_chars:
        raise LimitExceeded(f"the template {what} past the output limit")


def _check_printed(value: Any, what: str = "printed a value") -> int:
    """Refuse a container whose text (`str(value)`, counting a value referenced n times n
    times) would pass the output limit, before the C call that prints it; its node count."""
    measured = measure(value, render_state.max_chars, _check_deadline)
    if measured.over():
        raise LimitExceeded(f"the template {what} whose text passes the output limit")
    return measured.nodes


def _text_size(value: Any) -> int:
    # at least how long `str(value)` is: strings by length, containers measured
    if isinstance(value, _TEXT):
        return len(value)
    if isinstance(value, CONTAINERS):
        return measure(value, render_state.max_chars, _check_deadline).size
    return 0


def _check_widths(numbers: Iterable[str | None], what: str) -> None:
    limit = render_state.max_chars
    for digits in numbers:
        if digits and digits != "*" and (len(digits) > 18 or int(digits) > limit):
            raise LimitExceeded(f"the template {what} past the output limit")


def _check_printf(fmt: str | bytes | bytearray, args: Any) -> None:
    # `'%0999999999d' % 1` pads in C before anything could look at the result, and
    # `'%(a)s' * n % {'a': text}` repeats text n times: both are measured first
    if not isinstance(fmt, str):  # bytes: the same specs, read as latin-1 text
        if b"%" not in fmt:
            return
        fmt = bytes(fmt).decode("latin-1")
    if "%" not in fmt:
        return
    if len(fmt) > _BIG:  # parsing megabytes of specs in Python would outlast the deadline
        wide = fmt.encode("utf-8", "surrogatepass").translate(_WIDE_BYTES).find(b"000000")
        if wide >= 0 or "*" in fmt:
            raise LimitExceeded(
                "the template used a printf-style format over 65536 chars with a star or a "
                "6-digit number in it, which could pad past the output limit"
            )
    star = False
    for match in () if len(fmt) > _BIG else _PRINTF_WIDE.finditer(fmt):  # star or 6+ digits
        _check_widths(match.groups(), "formatted a field")
        star = star or "*" in match.groups()
    values = args if isinstance(args, tuple) else (args,)
    if star:  # `'%*d' % (width, value)`: the width comes from the arguments
        _check_widths((str(v) for v in values if type(v) is int and v > 0), "formatted a field")
    if isinstance(args, dict) and "%(" in fmt:  # `'%(a)s' * n`: a field may print the longest
        if len(fmt) > _BIG or any(isinstance(v, CONTAINERS) for v in args.values()):
            longest = max(map(_text_size, args.values()), default=0)
            _refuse_growth(len(fmt) + fmt.count("%(") * longest, "formatted a string")
    elif len(fmt) > _BIG or len(values) > 64 or any(isinstance(v, CONTAINERS) for v in values):
        _refuse_growth(len(fmt) + sum(map(_text_size, values)), "formatted a string")


def _int_bits(value: Any) -> int:
    return value.bit_length() if isinstance(value, int) else 0


# --- the functions transformers puts in the environment -------------------------------


def _raise_exception(message: Any) -> None:
    if isinstance(message, CONTAINERS):  # its text is built when the error is shown
        _check_printed(message, "raised an error message")
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


def _tojson_of(json_data: Callable[[Any], Any]) -> Callable[..., str]:
    def tojson(x: Any, *args: Any, **kwargs: Any) -> str:
        return _tojson(json_data(x), *args, **kwargs)

    return tojson


_STRFTIME_FIELD = 64  # no directive prints more (`%c` is ~24 chars in the C locale)


def _strftime_now(format: str) -> str:
    if isinstance(format, str) and len(format) > _STRFTIME_FIELD:  # `'%c' * n` expands in C
        _refuse_growth(len(format) + format.count("%") * _STRFTIME_FIELD, "formatted a date")
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
        written = render_state.written
        if written is not None:  # (a field set to the very value it holds changes nothing)
            old = object.__getattribute__(self, "_Namespace__attrs").get(name, _UNSET)
            if old is not value:
                written.add(id(self))
                if not (type(old) is type(value) and type(value) in _SCALARS and old == value):
                    render_state.changes += 1
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check_name(name: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise SecurityError(
                "Chat templates cannot store underscore-prefixed attributes on a namespace, "
                f"but got {name!r}. Please rename the attribute."
            )


class UnseenNamespace(_TemplateNamespace):
    """A namespace whose field changes a watched render does not count (RenderState
    changes): one that only a loop the render follows reads (template/resume.py)."""

    def __setitem__(self, name: str, value: Any) -> None:
        changes = render_state.changes
        _TemplateNamespace.__setitem__(self, name, value)
        render_state.changes = changes


# --- undefined values -------------------------------------------------------------------

_NAME_SHOWN = 4096  # a key printed in full in an undefined value's error, at most


def bounded_undefined_message(undefined: jinja2.Undefined) -> str | None:
    """The error text of a use of ``undefined`` when its key is a container too long to show
    (`messages[[s] * 1000].x` would put the key's repr, s a thousand times, in the message),
    with the key cut short; None when jinja's own text is short enough."""
    name = undefined._undefined_name
    if undefined._undefined_hint or not isinstance(name, CONTAINERS):
        return None
    if not measure(name, _NAME_SHOWN, _check_deadline).over():
        return None
    owner = jinja2.utils.object_type_repr(undefined._undefined_obj)
    return f"{owner} has no element {reprlib.repr(name)}"


class Undefined(jinja2.Undefined):
    """jinja's undefined value (the same name, so errors that name its type read the same),
    whose error for a huge container key shows the key cut short."""

    __slots__ = ()

    @property
    def _undefined_message(self) -> str:
        return bounded_undefined_message(self) or super()._undefined_message


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


# Checks on string methods (and int.to_bytes) that can grow a value in C, before they run. Each
# gets the string or number, the call's arguments, and returns the positional arguments to call
# with.
def _check_pad(
    owner: str | bytes, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Any, ...]:
    width = args[0] if args else kwargs.get("width", 0)
    if isinstance(width, int):
        _refuse_growth(width, "padded a string")
    return args


def _check_expandtabs(
    owner: str | bytes, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Any, ...]:
    size = args[0] if args else kwargs.get("tabsize", 8)
    if isinstance(size, int) and size > 1 and len(owner) * size > render_state.max_chars:
        tabs = owner.count("\t") if isinstance(owner, str) else owner.count(b"\t")
        _refuse_growth(len(owner) + tabs * size, "expanded tabs")
    return args


def _check_replace(
    owner: str | bytes, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Any, ...]:
    old = args[0] if args else kwargs.get("old")
    new = args[1] if len(args) > 1 else kwargs.get("new")
    count = args[2] if len(args) > 2 else kwargs.get("count", -1)
    if isinstance(old, (str, bytes)) and isinstance(new, (str, bytes)):
        _check_replacement(owner, old, new, count)
    return args


def _check_replacement(owner: Any, old: Any, new: Any, count: Any = -1) -> None:
    grow = len(new) - len(old)
    if grow <= 0:
        return
    most = len(owner) + (len(owner) // max(len(old), 1) + 1) * grow
    if most > render_state.max_chars:
        hits = len(owner) + 1 if not old else owner.count(old)
        if isinstance(count, int) and count >= 0:
            hits = min(hits, count)
        _refuse_growth(len(owner) + hits * grow, "replaced text")


def _check_join(
    owner: str | bytes, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Any, ...]:
    if len(args) != 1 or kwargs:
        return args
    items = list(args[0])  # str.join makes a list of its argument too; now it can be measured
    size = len(owner) * max(len(items) - 1, 0)
    for item in items:  # |join prints what is not a string: a list by its repr
        if isinstance(item, _TEXT):
            size += len(item)
        elif isinstance(item, CONTAINERS):
            size += _text_size(item)
    _refuse_growth(size, "joined strings")
    return (items,)


def _check_translate(
    owner: str | bytes, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Any, ...]:
    table = args[0] if args else None
    if isinstance(table, dict):
        longest = max((len(v) for v in table.values() if isinstance(v, str)), default=1)
        if longest > 1:
            _refuse_growth(len(owner) * longest, "translated a string")
    return args


def _check_to_bytes(owner: int, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    # `(1).to_bytes(3000000000, 'little')` fills every byte it asks for before returning
    length = args[0] if args else kwargs.get("length", 1)
    if isinstance(length, int):
        _refuse_growth(length, "made bytes")
    return args


_STRING_METHOD_CHECKS: dict[str, Callable[..., tuple[Any, ...]]] = {
    "center": _check_pad,
    "ljust": _check_pad,
    "rjust": _check_pad,
    "zfill": _check_pad,
    "expandtabs": _check_expandtabs,
    "replace": _check_replace,
    "join": _check_join,
    "translate": _check_translate,
    "to_bytes": _check_to_bytes,
}
_LOOP_GUARD = "__chatcodec_loop_guard"
# the guard of a loop whose walk a watched render may follow (template/resume.py marks them)
INNER_LOOP_GUARD = "__chatcodec_inner_loop_guard"
_SCALARS = (str, int, float, bool, type(None))
_UNSET = object()


def _loop_guard(iterable: Iterable[Any]) -> Iterator[Any]:
    # Wraps every {% for %} iterable: loops that call nothing still meet the time limit. The
    # clock is read on every pass, since one pass may compare or scan megabytes in C.
    deadline = render_state.deadline
    clock = time.monotonic
    for item in iterable:
        if clock() > deadline:
            raise LimitExceeded("the render ran past its time limit")
        yield item


def _inner_loop_guard(iterable: Iterable[Any]) -> Iterable[Any]:
    # A loop guard, whose walk a watched render follows (RenderState.inner_loops)
    walk = render_state.inner_loops
    return _loop_guard(iterable) if walk is None else walk(iterable, _loop_guard)


# `x | selectattr(...) | list` (or rejectattr, select, reject) in a watched render: a list
# of the messages chosen that the render sees as they are placed (template/resume.py)
SELECTION = "__chatcodec_selection"


@jinja2.pass_context
def _selection(context: Any, value: Any, name: str, *args: Any, **kwargs: Any) -> Any:
    # `value | <name>(*args, **kwargs) | list`, both filters the environment's own; or
    # what RenderState.selections makes of it
    filters = context.environment.filters

    def choose(items: Any) -> Any:
        return filters["list"](context.eval_ctx, filters[name](context, items, *args, **kwargs))

    select = render_state.selections
    found = None if select is None else select(value, choose)
    return choose(value) if found is None else found


def loop_source(loop: jinja2.nodes.For) -> jinja2.nodes.Node:
    """What a parsed ``{% for %}`` walks, without the time check ``_parse`` wraps it in."""
    walked = loop.iter
    if (
        isinstance(walked, jinja2.nodes.Filter)
        and walked.name in (_LOOP_GUARD, INNER_LOOP_GUARD)
        and walked.node
    ):
        return walked.node
    return walked


_OUT = "__chatcodec_out"  # the generated code's temporary for one printed value
MARK_PREFIX = "__chatcodec_mark"  # how the render variables a marker statement calls begin


def marker_statement(hook: str, item: jinja2.nodes.Expr) -> jinja2.nodes.Stmt:
    """A statement that calls the render variable ``hook`` (a ``MARK_PREFIX`` name) with the
    context and the value of ``item`` where it stands, without the sandbox's checks of a
    template's own calls (template/resume.py marks a render's steps with them). jinja allows
    no new node types: it is an expression statement no template can write (this
    environment has no ``do`` tag) of a pair the code generator knows."""
    assert hook.startswith(MARK_PREFIX)
    return jinja2.nodes.ExprStmt(jinja2.nodes.Tuple([jinja2.nodes.Const(hook), item], "load"))


class GuardedCodeGenerator(CodeGenerator):
    # String concatenation (`~`) goes through the size check instead of a bare join

    def visit_ExprStmt(self, node: jinja2.nodes.ExprStmt, frame: Frame) -> None:
        marked = node.node
        if not (
            isinstance(marked, jinja2.nodes.Tuple)
            and len(marked.items) == 2
            and isinstance(marked.items[0], jinja2.nodes.Const)
            and str(marked.items[0].value).startswith(MARK_PREFIX)
        ):
            super().visit_ExprStmt(node, frame)
            return
        self.writeline(f"context.parent[{marked.items[0].value!r}](context, ")  # marker_statement
        self.visit(marked.items[1], frame)
        self.write(")")

    def _output_child_pre(self, node: jinja2.nodes.Expr, frame: Frame, finalize: Any) -> None:
        # `{{ value }}`: a string is printed as is (the common case pays one type test);
        # anything else is handed to environment.printable first, which measures a
        # container's text before str() prints it in one C call
        super()._output_child_pre(node, frame, finalize)
        self.write(f"({_OUT} if ({_OUT} := ")

    def _output_child_post(self, node: jinja2.nodes.Expr, frame: Frame, finalize: Any) -> None:
        self.write(f").__class__ is str else environment.printable({_OUT}))")
        super()._output_child_post(node, frame, finalize)

    def visit_Concat(self, node: jinja2.nodes.Concat, frame: Frame) -> None:
        self.write("environment.guarded_concat((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")

    def visit_AssignBlock(self, node: jinja2.nodes.AssignBlock, frame: Frame) -> None:
        # `{% set x %}...{% endset %}` captures its output: bound it like any built string
        if node.filter is not None:  # the filter's result is checked like any filter's
            super().visit_AssignBlock(node, frame)
            return
        self.push_assign_tracking()
        block_frame = frame.inner()
        block_frame.require_output_check = False
        block_frame.symbols.analyze_node(node)
        self.enter_frame(block_frame)
        self.buffer(block_frame)
        self.blockvisit(node.body, block_frame)
        self.newline(node)
        self.visit(node.target, frame)
        self.write(" = (Markup if context.eval_ctx.autoescape else identity)(")
        self.write(f"environment.guarded_concat({block_frame.buffer}))")
        self.pop_assign_tracking(frame)
        self.leave_frame(block_frame)


def _binop(op: str, left: Any, right: Any) -> Any:
    if op == "*":
        if isinstance(left, int) and not isinstance(left, bool):
            left, right = right, left
        if isinstance(left, _SEQUENCES) and isinstance(right, int):
            if len(left) * max(right, 0) > render_state.max_chars:
                raise LimitExceeded("the template multiplied a sequence past the output limit")
            return _check_size(left * right)
        if isinstance(left, int) and _int_bits(left) + _int_bits(right) > _MAX_INT_BITS:
            raise LimitExceeded("the template multiplied a number past the size limit")
        return left * right
    if op == "**":
        if isinstance(left, int) and isinstance(right, int) and left not in (0, 1, -1):
            if right > 0 and _int_bits(left) * right > _MAX_INT_BITS:
                raise LimitExceeded("the template raised a number to an unbounded power")
        return left**right
    if op == "%":
        if isinstance(left, _TEXT):
            _check_printf(left, right)
        return _check_size(left % right)
    if isinstance(left, _SEQUENCES) and isinstance(right, _SEQUENCES):
        _refuse_growth(len(left) + len(right), "concatenated values")
    return _check_size(left + right)


class _GuardedFormatter(SandboxedFormatter):
    # `'{:>9999999999}'.format(1)` pads in C: the width is checked before formatting, and the
    # fields' running total and the clock are checked field by field
    size = 0

    def format_field(self, value: Any, format_spec: str) -> Any:
        if format_spec:
            _check_widths(_DIGITS.findall(format_spec), "formatted a field")
        _check_deadline()
        if isinstance(value, CONTAINERS):  # `'{0}{0}'.format([s] * 1000)` prints its repr
            _refuse_growth(self.size + _text_size(value), "formatted a string")
        field = super().format_field(value, format_spec)
        self.size += len(field)
        _refuse_growth(self.size, "formatted a string")
        return field


class _GuardedEscapeFormatter(_GuardedFormatter, SandboxedEscapeFormatter):
    pass


# --- fast paths ------------------------------------------------------------------------
# Each shortcut below returns what the full sandbox path returns, raises what it raises and
# refuses what it refuses; it only skips work whose outcome is already known.

# Values of these exact types have a fixed set of attributes: an attribute always exists or
# never does, always has the same kind of value (a method bound to the value, or a number),
# and can never carry `unsafe_callable` / `alters_data` marks (builtin objects take no new
# attributes). So the sandbox's verdicts on them depend on (type, name) alone.
_PLAIN_TYPES = frozenset({str, int, float, bool, list, tuple, dict, type(None)})
# the loop object's values a template reads in every pass (`loop.index0`, `loop.last`)
_LOOP_ITEMS = frozenset({"previtem", "nextitem"})
_LOOP_VALUES = _LOOP_ITEMS | {
    "index",
    "index0",
    "revindex",
    "revindex0",
    "first",
    "last",
    "length",
    "depth",
    "depth0",
}
_BUILTIN_METHOD = type("".strip)
_MACRO_TAKES_EVAL_CONTEXT = (
    jinja2.utils._PassArg.from_obj(Macro.__call__) is jinja2.utils._PassArg.eval_context
)


def _call_plain(context: Any, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    # The tail of jinja's Context.call once the argument to pass first (if any) is known
    kwargs.pop("_block_vars", None)
    kwargs.pop("_loop_vars", None)
    try:
        return func(*args, **kwargs)
    except StopIteration:
        return context.environment.undefined(
            "value was undefined because a callable raised a StopIteration exception"
        )


class ChatSandbox(ImmutableSandboxedEnvironment):
    """transformers' sandbox, with fast paths for the common lookups and resource bounds."""

    code_generator_class = GuardedCodeGenerator
    intercepted_binops = frozenset({"*", "**", "%", "+"})
    immutable_inputs = True  # no list or dict a template reads can be changed by it

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # (type, name) of existing attributes of plain values, looked up in full once: True
        # when not refused and not str.format (which is wrapped), so getattr(obj, name) is
        # the answer; False when the full path must run every time
        self._plain_attributes: dict[tuple[type, str], bool] = {}
        # (type, name) of builtin methods of plain values that is_safe_callable accepted
        self._plain_methods: set[tuple[type, str]] = set()
        # The namespace and macro shortcuts restate jinja's own checks for those types; they
        # switch themselves off if a subclass replaces a check or the namespace changes
        cls = type(self)
        self._stock_checks = (
            cls.is_safe_attribute is ImmutableSandboxedEnvironment.is_safe_attribute
            and cls.is_safe_callable is ImmutableSandboxedEnvironment.is_safe_callable
            and all(
                kind.__getattribute__ is jinja2.utils.Namespace.__getattribute__
                and not hasattr(kind, "__getitem__")
                for kind in (_TemplateNamespace, UnseenNamespace)
            )
        )

    def _remember_plain_attribute(self, obj: Any, attribute: str) -> None:
        # Called after the full lookup of `attribute` on a value of a _PLAIN_TYPES type
        try:
            value = getattr(obj, attribute)
        except AttributeError:
            return  # not cached: the names a template may try are unbounded
        self._plain_attributes[(type(obj), attribute)] = (
            not attribute.startswith("_")
            and self.wrap_str_format(value) is None
            and self.is_safe_attribute(obj, attribute, value)
        )

    def getattr(self, obj: Any, attribute: str) -> Any:
        # `message.content` on a plain dict: same result as the sandbox's own lookup, which
        # tries the attribute first and the key second, without raising AttributeError
        kind = type(obj)
        if type(attribute) is not str:  # `|attr(x)` may pass anything: the full path decides
            return super().getattr(obj, attribute)
        if kind is dict and attribute not in _DICT_ATTRIBUTES:
            try:
                return obj[attribute]
            except KeyError:
                return self.undefined(obj=obj, name=attribute)
            except TypeError:
                pass
        if kind is LoopContext and attribute in _LOOP_VALUES and self._stock_checks:
            # `loop.index0`: the full path reads the property, finds no str.format in an int or
            # a bool (an item may be one: wrapped as there), and passes jinja's checks, which
            # for a loop object reduce to the name (no underscore; a loop is no function,
            # method, type, code, frame or generator, nor a mutable ABC)
            value = getattr(obj, attribute)
            if attribute in _LOOP_ITEMS:
                wrapped = self.wrap_str_format(value)
                return value if wrapped is None else wrapped
            return value
        shortcut = self._plain_attributes.get((kind, attribute))
        if shortcut:
            # `content.strip`, `message.get`: the full path (see _remember_plain_attribute)
            # found this attribute, not str.format, and safe; all three hold for every value
            # of this exact builtin type (see _PLAIN_TYPES)
            return getattr(obj, attribute)
        if (
            (kind is _TemplateNamespace or kind is UnseenNamespace)  # (its reads are the same)
            and self._stock_checks
            and not attribute.startswith("_")
        ):
            # `ns.flag`: the full path reads the namespace's dict through getattr (a missing
            # name is an AttributeError, then `ns[name]` a TypeError: undefined). jinja's
            # is_safe_attribute on a namespace reduces to the underscore test above: it is no
            # function, method, type, code or generator, nor a mutable ABC. The str.format
            # wrapper is still applied to whatever value was stored.
            attrs = object.__getattribute__(obj, "_Namespace__attrs")
            if attribute not in attrs:
                return self.undefined(obj=obj, name=attribute)
            value = attrs[attribute]
            wrapped = self.wrap_str_format(value)
            return value if wrapped is None else wrapped
        value = super().getattr(obj, attribute)
        if shortcut is None and kind in _PLAIN_TYPES:
            self._remember_plain_attribute(obj, attribute)
        return value

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        _check_deadline()
        check = _STRING_METHOD_CHECKS.get(getattr(__obj, "__name__", None))  # type: ignore[arg-type]
        if check is not None:
            owner = getattr(__obj, "__self__", None)
            if isinstance(owner, (str, bytes, int)):
                args = check(owner, args, kwargs)
        kind = type(__obj)
        if kind is _BUILTIN_METHOD:
            key = (type(__obj.__self__), __obj.__name__)
            if key in __self._plain_methods:
                # `content.strip()`: is_safe_callable accepted this method once and a builtin
                # method can carry no mark to change that; jinja's Context.call finds no
                # pass_context-style mark on it either, so it drops its private keywords and
                # calls it as is (a StopIteration becoming undefined, as there)
                return _check_size(_call_plain(__context, __obj, args, kwargs))
            if key[0] in _PLAIN_TYPES and __self.is_safe_callable(__obj):
                __self._plain_methods.add(key)
        elif kind is Macro and __self._stock_checks and _MACRO_TAKES_EVAL_CONTEXT:
            # `{{ render_tool(tool) }}`: a macro object has no unsafe mark (jinja's
            # is_safe_callable passes it), and Context.call passes its eval context first, as
            # Macro.__call__ is marked pass_eval_context
            return _check_size(
                _call_plain(__context, __obj.__call__, (__context.eval_ctx, *args), kwargs)
            )
        return _check_size(super().call(__context, __obj, *args, **kwargs))

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "+" and type(left) is str and type(right) is str:
            # `'<|im_start|>' + role`: _binop's `+` refuses a result over max_chars and meets
            # the deadline for one over _BIG; below both it simply concatenates
            size = len(left) + len(right)
            if size <= _BIG and size <= render_state.max_chars:
                return left + right
        return _binop(operator, left, right)

    def printable(self, value: Any) -> Any:
        """``value``, once its text is known to fit: a container's is measured first."""
        if isinstance(value, CONTAINERS) and not _is_input(value):
            _check_printed(value)
        return value

    def guarded_concat(self, parts: Iterable[Any]) -> str:
        strings = [part if type(part) is str else str(self.printable(part)) for part in parts]
        size = sum(map(len, strings))
        if size > _BIG:  # measured before the join allocates
            _refuse_growth(size, "concatenated strings")
            _check_deadline()
        return "".join(strings)

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        # jinja's own wrapper, with a formatter that checks field widths before padding.
        # Whether to wrap is jinja 3.1.6's own test, restated so that its wrapper is not
        # built (with functools.update_wrapper) only to be thrown away on every access
        if (
            not isinstance(value, (types.MethodType, types.BuiltinMethodType))
            or value.__name__ not in ("format", "format_map")
            or not isinstance(value.__self__, str)
        ):
            return None
        f_self = value.__self__
        str_type = type(f_self)
        is_format_map = value.__name__ == "format_map"
        formatter: _GuardedFormatter
        if isinstance(f_self, Markup):
            formatter = _GuardedEscapeFormatter(self, escape=f_self.escape)
        else:
            formatter = _GuardedFormatter(self)

        def guarded(*args: Any, **kwargs: Any) -> str:
            formatter.size = len(f_self)
            if is_format_map:
                if kwargs:
                    raise TypeError("format_map() takes no keyword arguments")
                if len(args) != 1:
                    raise TypeError(f"format_map() takes exactly one argument ({len(args)} given)")
                kwargs, args = args[0], ()
            return str_type(formatter.vformat(f_self, args, kwargs))

        return functools.update_wrapper(guarded, value)

    def _parse(self, source: str, name: str | None, filename: str | None) -> jinja2.nodes.Template:
        tree = super()._parse(source, name, filename)
        for loop in tree.find_all(jinja2.nodes.For):
            loop.iter = jinja2.nodes.Filter(
                self.loop_iterable(loop.iter), _LOOP_GUARD, [], [], None, None, lineno=loop.lineno
            )
        return tree

    def loop_iterable(self, node: jinja2.nodes.Node) -> jinja2.nodes.Node:
        """The expression a ``{% for %}`` loop iterates (a subclass may wrap it in a check)."""
        return node


def _filter_center(value: Any, width: Any = 80) -> None:
    if isinstance(width, int):
        _refuse_growth(width, "padded a string")


def _filter_indent(s: Any, width: Any = 4, first: bool = False, blank: bool = False) -> None:
    step = width if isinstance(width, int) else len(width) if isinstance(width, str) else 0
    lines = s.count("\n") + 1 if isinstance(s, str) else 1
    _refuse_growth(step * lines + (len(s) if isinstance(s, str) else 0), "indented text")


def _filter_wordwrap(
    environment: Any,
    s: Any,
    width: Any = 79,
    break_long_words: Any = True,
    wrapstring: Any = None,
    *args: Any,
    **kwargs: Any,
) -> None:
    if isinstance(s, str) and isinstance(wrapstring, str) and len(wrapstring) > 1:
        _refuse_growth(len(s) * len(wrapstring), "wrapped text")  # at most a break per char
    if isinstance(s, str) and isinstance(width, int) and break_long_words and len(s) > width:
        # textwrap cuts a word longer than the width one line at a time, copying the rest of
        # the word each time: its cost is the word's length squared over the width
        longest = max(map(len, s.split()), default=0)
        if longest > width and longest * longest // max(width, 1) > _WRAP_WORK:
            raise LimitExceeded(
                f"|wordwrap would cut a {longest}-char word into {max(width, 1)}-char lines, "
                "a pure-Python loop too long to interrupt"
            )


def _filter_replace(eval_ctx: Any, s: Any, old: Any, new: Any, count: Any = None) -> None:
    if isinstance(s, str) and isinstance(old, str) and isinstance(new, str):
        _check_replacement(s, old, new, -1 if count is None else count)


def _filter_join(
    eval_ctx: Any, value: Any, d: Any = "", attribute: Any = None
) -> tuple[Any, ...] | None:
    if attribute is not None or not isinstance(d, str) or isinstance(value, (str, dict)):
        return None
    items = value if isinstance(value, (list, tuple)) else list(value)  # join lists them too
    _check_join(d, (items,), {})
    return (eval_ctx, items, d)


def _filter_format(value: Any, *args: Any, **kwargs: Any) -> None:
    if isinstance(value, str):
        _check_printf(value, kwargs or args)


def _filter_urlize(eval_ctx: Any, value: Any, *args: Any, **kwargs: Any) -> None:
    extra = sum(len(v) for v in (*args, *kwargs.values()) if isinstance(v, str))
    if isinstance(value, str):
        _refuse_growth(len(value) * (16 + extra), "linked text")


def _filter_tojson(
    x: Any,
    ensure_ascii: bool = False,
    indent: Any = None,
    separators: Any = None,
    sort_keys: bool = False,
) -> None:
    # `([s] * 1000)|tojson` dumps s a thousand times: the text is measured first. With an
    # indent, json.dumps runs its pure-Python encoder: the nodes it will visit are capped
    if isinstance(x, CONTAINERS) and not _is_input(x):
        nodes = _check_printed(x, "passed |tojson a value")
        if indent is not None and nodes > _JSON_INDENT_NODES:
            raise LimitExceeded(
                f"|tojson(indent=...) of {nodes} values: its pure-Python encoder would run "
                "too long to interrupt"
            )
    # json.dumps repeats `indent` once per nesting level on every line and a separator per
    # item: when those are long, count the lines before dumping
    step = indent if isinstance(indent, int) else len(indent) if isinstance(indent, str) else 0
    if isinstance(separators, (tuple, list)):
        step += sum(len(sep) for sep in separators if isinstance(sep, str))
    if step > 64:
        _refuse_growth(step, "indented JSON")
        _refuse_growth(
            _json_lines(x, 1, render_state.max_chars // step + 1) * step, "indented JSON"
        )


def _json_lines(value: Any, depth: int, budget: int) -> int:
    # lines x depth of json.dumps(value, indent=...), counted up to `budget`
    total = depth
    if isinstance(value, dict):
        value = value.values()
    elif not isinstance(value, (list, tuple)):
        return total
    for item in value:
        total += _json_lines(item, depth + 1, budget - total)
        if total > budget:
            break
    return total


def _filter_sum(environment: Any, iterable: Any, attribute: Any = None, start: Any = 0) -> None:
    if isinstance(start, (list, tuple)) and isinstance(iterable, (list, tuple)):
        size = len(start) + sum(len(x) for x in iterable if isinstance(x, (list, tuple)))
        _refuse_growth(size, "summed sequences")


def _filter_dictsort(
    value: Any, case_sensitive: Any = False, by: Any = "key", reverse: Any = False
) -> None:
    # sorting by value keeps a lower-cased copy of every value (keys are distinct strings)
    if by == "value" and not case_sensitive and isinstance(value, dict) and not _is_input(value):
        _check_printed(value, "passed |dictsort a value")


def _filter_slice(eval_ctx: Any, value: Any, slices: Any, fill_with: Any = None) -> None:
    if isinstance(slices, int):  # `[1]|slice(10**8)` yields that many (empty) lists
        _refuse_growth(slices, "sliced a list into more parts")


def _filter_batch(value: Any, linecount: Any, fill_with: Any = None) -> None:
    if fill_with is not None and isinstance(linecount, int):  # pads the last batch in C
        _refuse_growth(linecount, "padded a batch")


_FILTER_CHECKS: dict[str, Callable[..., tuple[Any, ...] | None]] = {
    "center": _filter_center,
    "indent": _filter_indent,
    "wordwrap": _filter_wordwrap,
    "replace": _filter_replace,
    "join": _filter_join,
    "format": _filter_format,
    "urlize": _filter_urlize,
    "tojson": _filter_tojson,
    "sum": _filter_sum,
    "slice": _filter_slice,
    "dictsort": _filter_dictsort,
    "batch": _filter_batch,
}

# Filters that loop over their value in Python, or in C calling Python per item: the value
# comes through a deadline-checking iterator (a list of up to 16 items is passed as is: each
# item's work is then one bounded call, and filters check the deadline themselves)
_ITERATING = frozenset(
    {"batch", "map", "max", "min", "reject", "rejectattr", "select", "selectattr", "sum"}
    | {"unique", "sort", "groupby"}
)
# Filters that print their value, or keep a key per item while sorting: a container's text
# (shared references counted each time) is measured first
_PRINTING = frozenset(
    {"capitalize", "center", "e", "escape", "forceescape", "format", "indent", "lower"}
    | {"replace", "safe", "string", "striptags", "title", "trim", "truncate", "upper"}
    | {"urlencode", "urlize", "wordcount", "wordwrap", "xmlattr", "filesizeformat", "join"}
    | {"pprint", "sort", "groupby"}
)
# Filters that are pure-Python loops no check can interrupt: the size of one call's input is
# capped (characters of text; items; for pprint, values) so that one call stays a fraction
# of a second (benchmarks/sandbox.py measures each at its cap)
_PURE_PYTHON: dict[str, int] = {
    "title": 1 << 20,
    "wordwrap": 1 << 20,
    "urlencode": 1 << 22,
    "urlize": 1 << 18,
    "sort": 1 << 17,
    "dictsort": 1 << 17,
    "groupby": 1 << 17,
    "xmlattr": 1 << 15,
    "pprint": 1 << 16,
}
_PURE_TEXT = frozenset({"title", "wordwrap", "urlencode", "urlize"})
_PURE_ITEMS = frozenset({"sort", "dictsort", "groupby", "xmlattr"})
_JSON_INDENT_NODES = 1 << 17  # json.dumps(indent=...) runs a pure-Python encoder
_WRAP_WORK = 1 << 32  # chars textwrap may copy while cutting long words (~0.3 s)
_SMALL = 16


def _checked_items(iterable: Iterable[Any], cap: int, what: str) -> Iterator[Any]:
    # A filter's loop, one item at a time: the clock is read on every item, and an iterable
    # yielding more than `cap` items stops (it would build a list past the limit)
    deadline = render_state.deadline
    clock = time.monotonic
    for count, item in enumerate(iterable, 1):
        if clock() > deadline:
            raise LimitExceeded("the render ran past its time limit")
        if count > cap:
            raise LimitExceeded(f"the template {what} more than {cap} items")
        yield item


def _refuse_pure_python(name: str, units: int, cap: int) -> None:
    if units > cap:
        raise LimitExceeded(
            f"|{name} of {units} chars or items: it is a pure-Python loop that cannot be "
            f"interrupted, limited to {cap}"
        )


def _prepare_value(name: str, args: tuple[Any, ...], at: int) -> tuple[Any, ...]:
    # The checks on a filter's value (args[at]) before the filter runs; the arguments to
    # call it with (the value may be replaced by a checked iterator over it). A list or dict
    # the caller passed is neither measured nor capped: its size is the caller's.
    value: Any = args[at]
    cap = _PURE_PYTHON.get(name)
    if (
        (cap is not None or name in _PRINTING)
        and isinstance(value, CONTAINERS)
        and not _is_input(value)
    ):
        if cap is not None and name in _PURE_ITEMS:
            _refuse_pure_python(name, len(args[at]), cap)
        if name in _PRINTING:
            measured = measure(value, render_state.max_chars, _check_deadline)
            if measured.over():
                raise LimitExceeded(
                    f"the template passed |{name} a value whose text passes the limit"
                )
            if name in _PURE_TEXT:
                _refuse_pure_python(name, measured.size, cap or 0)
            elif name == "pprint":
                _refuse_pure_python(name, measured.nodes, cap or 0)
    if name in _ITERATING:
        sized = isinstance(value, _SIZED)
        if (sized and len(value) > _SMALL) or (not sized and isinstance(value, Iterator)):
            limit = render_state.max_chars if cap is None or _is_input(value) else cap
            checked = _checked_items(value, limit, f"passed |{name}")
            return (*args[:at], checked, *args[at + 1 :])
    return args


# Text filters that are pure-Python loops over words or lines but give the same text when
# run on pieces of it cut after a separator and joined: a long text is run piece by piece,
# with the clock read between pieces (title: words start after `-`, spaces and brackets;
# urlize: words are split at spaces; urlencode: per character; wordwrap: per line)
_PIECE = 1 << 16
_PIECE_BREAKS: dict[str, re.Pattern[str] | None] = {
    "title": re.compile(r"[-\s({\[<]"),
    "urlize": re.compile(r"\s"),
    "urlencode": None,
    "wordwrap": re.compile(r"\n"),
}
_WRAP_LINE = 1 << 20  # the longest line |wordwrap takes (~0.3 s of textwrap)


def _pieces(text: str, breaks: re.Pattern[str] | None) -> Iterator[str]:
    start = 0
    while len(text) - start > _PIECE:
        cut = start + _PIECE
        if breaks is not None:
            found = breaks.search(text, cut)
            if found is None:
                break
            cut = found.end()
        if cut >= len(text):
            break
        _check_deadline()
        yield text[start:cut]
        start = cut
    yield text[start:]


def _piecewise(
    name: str, func: Callable[..., Any], args: tuple[Any, ...], at: int, kwargs: dict[str, Any]
) -> Any:
    text = args[at]
    parts = []
    for piece in _pieces(text, _PIECE_BREAKS[name]):
        if name == "wordwrap" and len(piece) > _WRAP_LINE and "\n" not in piece:
            _refuse_pure_python(name, len(piece), _WRAP_LINE)
        parts.append(func(*args[:at], piece, *args[at + 1 :], **kwargs))
    if name != "wordwrap":
        return parts[0][:0].join(parts)  # a Markup joins Markups as they are
    wrapstring = kwargs.get("wrapstring", args[at + 3] if len(args) > at + 3 else None)
    if wrapstring is None:
        wrapstring = args[0].newline_sequence  # the environment: wordwrap is pass_environment
    return wrapstring.join(parts)


def _guard_filter(func: Callable[..., Any], name: str = "") -> Callable[..., Any]:
    check = _FILTER_CHECKS.get(name)
    at = 1 if getattr(func, "jinja_pass_arg", None) is not None else 0
    prepare = name in _PRINTING or name in _ITERATING or name in _PURE_PYTHON
    outputs_items = name == "slice"  # its loop is over the parts, not over the value
    piecewise = name in _PIECE_BREAKS
    iterating = name in _ITERATING
    if check is None and not prepare:

        def guarded(*args: Any, **kwargs: Any) -> Any:
            if time.monotonic() > render_state.deadline:
                raise LimitExceeded("the render ran past its time limit")
            return _check_size(func(*args, **kwargs))

        return _keep_marks(guarded, func)

    def checked(*args: Any, **kwargs: Any) -> Any:
        if time.monotonic() > render_state.deadline:
            raise LimitExceeded("the render ran past its time limit")
        if check is not None:
            try:
                args = check(*args, **kwargs) or args
            except TypeError:
                pass  # arguments the filter itself will refuse, with its own message
        if prepare and len(args) > at:
            if type(args[at]) is not str:
                args = _prepare_value(name, args, at)
            elif piecewise and len(args[at]) > _PIECE:
                return _check_size(_piecewise(name, func, args, at, kwargs))
            elif iterating:  # a string's items are its characters: counted like any
                args = _prepare_value(name, args, at)
        result = func(*args, **kwargs)
        if outputs_items and isinstance(result, types.GeneratorType):
            result = _named_like(_checked_items(result, render_state.max_chars, "sliced"), result)
        return _check_size(result)

    return _keep_marks(checked, func)


def _named_like(generator: Any, original: Any) -> Any:
    # prints as the filter's own generator would (`<generator object sync_do_slice ...>`)
    generator.__name__ = original.__name__
    generator.__qualname__ = original.__qualname__
    return generator


def _keep_marks(guarded: Callable[..., Any], func: Callable[..., Any]) -> Callable[..., Any]:
    # keeps jinja's pass_context/pass_eval_context marks
    guarded.__dict__.update(getattr(func, "__dict__", {}))
    guarded.__name__ = getattr(func, "__name__", "filter")
    guarded.__doc__ = func.__doc__
    return guarded


def _bounded_lipsum(n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> str:
    # a pure-Python loop over n paragraphs of up to `max` words each
    if n > 1000 or max > 10_000 or n * max > _LIPSUM_WORDS:
        raise LimitExceeded("lipsum asked for more text than the output limit allows")
    return jinja2.utils.generate_lorem_ipsum(n=n, html=html, min=min, max=max)


_LIPSUM_WORDS = 1 << 18


def _measured_by_stand_in(length: Callable[..., Any]) -> Callable[..., Any]:
    # `x | length`: a list standing in for the messages (template/resume.py's watched list,
    # with __cc_length__) gives a value standing in for its length
    def measure(value: Any) -> Any:
        measured = getattr(type(value), "__cc_length__", None)
        if measured is not None:
            return measured(value)
        return length(value)

    return _keep_marks(measure, length)


def _answered_by_stand_in(test: Callable[..., Any]) -> Callable[..., bool]:
    # jinja's `is true`, `is false`, `is boolean`, `is integer` and `is sameas` test a
    # value's identity: a stand-in for a value (a class with __cc_test__, such as the traced
    # values of template/resume.py) answers them for the value it stands for
    def run(value: Any, *args: Any) -> bool:
        answer = getattr(type(value), "__cc_test__", None)
        if answer is not None:
            return bool(answer(value, test, args))
        return bool(test(value, *args))

    run.__name__ = test.__name__
    return run


def new_environment(
    cls: type[ChatSandbox] = ChatSandbox,
    json_data: Callable[[Any], Any] | None = None,
    **options: Any,
) -> ChatSandbox:
    """A fresh environment configured as transformers configures its own (``cls``,
    ``json_data`` and ``options`` let the llama.cpp-compatible environment of ``compat.py``
    share it: ``json_data`` turns a value into what ``tojson`` serialises)."""
    options.setdefault("undefined", Undefined)
    env = cls(
        **options,
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[GenerationExtension, jinja2.ext.loopcontrols],
    )
    for name, func in list(env.filters.items()):
        env.filters[name] = _guard_filter(func, name)
    tojson = _tojson if json_data is None else _tojson_of(json_data)
    env.filters["tojson"] = _memoized(_guard_filter(tojson, "tojson"))
    env.filters[_LOOP_GUARD] = _loop_guard
    env.filters[INNER_LOOP_GUARD] = _inner_loop_guard
    env.filters[SELECTION] = _selection
    for name in ("true", "false", "boolean", "integer", "sameas"):
        env.tests[name] = _answered_by_stand_in(env.tests[name])  # type: ignore[arg-type]
    for name in ("length", "count"):
        env.filters[name] = _measured_by_stand_in(env.filters[name])
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
