"""Bounds on the work a request's JSON schemas can cause (docs/security.md, "Request schemas").

A tool's ``parameters`` and a ``response_format`` schema are the caller's data, and a small one
can describe a large graph: ``$defs`` that refer to each other, chains of ``$ref``s, cycles.
Three bounds keep the setup of a request short whatever its schemas say:

- ``check_schema`` walks a schema before anything else reads it. Each ``$ref`` target is walked
  once. A schema nesting deeper than ``MAX_SCHEMA_DEPTH`` levels is a ``RequestError`` naming
  the path where it does (each object, array and ``$ref`` is one level).
- The walkers that follow ``$ref``s (what a parameter's type is, whether it may be a string)
  keep each answer once it is known, and stop ``MAX_SCHEMA_DEPTH`` levels down.
- ``schema_work()`` opens a count of the steps one call takes over schemas (``spend_on`` a
  schema object read: one, plus its members and list items; ``spend`` a grammar rule
  written). Past its limit the call is a ``RequestError``. ``Codec.prepare`` and
  ``Turn.grammar`` each open one, of ``work_limit(nodes)`` steps: ``MAX_SCHEMA_WORK`` plus
  ``SCHEMA_WORK_PER_NODE`` per JSON value of the request's schemas. Work in proportion to a
  schema's size always fits; work that grows faster (a graph walked once per path) does
  not. Outside an open count, ``spend`` counts nothing.
"""

from __future__ import annotations

import re
import sys
from collections import ChainMap
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Generic, TypeVar, cast

from .errors import RequestError

__all__ = [
    "MAX_SCHEMA_DEPTH",
    "MAX_SCHEMA_WORK",
    "SCHEMA_WORK_PER_NODE",
    "work_limit",
    "SchemaWork",
    "schema_work",
    "call_answers",
    "RefAnswers",
    "pointer",
    "pointer_keys",
    "spend",
    "spend_on",
    "with_type",
    "check_schema",
    "schema_path",
    "too_deep",
]

# far above real schemas (a tool's parameters rarely nest ten levels), far below the ~1,000
# Python frames a walk may use
MAX_SCHEMA_DEPTH = 100
# the steps any call may take over its schemas, and the steps each JSON value of the
# request's schemas adds: work in proportion to the schemas fits (a request of real shape
# takes ~4 steps per value), and the worst small schema is refused within half a second
# of CPU (benchmarks/schemas.py)
MAX_SCHEMA_WORK = 100_000
SCHEMA_WORK_PER_NODE = 8

T = TypeVar("T")
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_$-]+")


def work_limit(nodes: int) -> int:
    """The steps a call may take over schemas of ``nodes`` nodes in all."""
    return MAX_SCHEMA_WORK + SCHEMA_WORK_PER_NODE * nodes


class SchemaWork:
    """The count of steps taken over schemas so far in one call, and its limit."""

    def __init__(self, limit: int = MAX_SCHEMA_WORK) -> None:
        self.limit = limit
        self.spent = 0
        # answers kept for the call, by the id of the schema they are about (the schema is
        # kept beside them, so that no id is reused while the call runs)
        self.answers: dict[tuple[str, int], tuple[Any, Any]] = {}


_current: ContextVar[SchemaWork | None] = ContextVar("chatcodec_schema_work", default=None)


@contextmanager
def schema_work(work: SchemaWork | None = None) -> Iterator[SchemaWork]:
    """Count the schema nodes visited inside the block: in ``work`` (a count that an earlier
    block of the same call began), else in a new count of ``MAX_SCHEMA_WORK``. Inside an
    open count, the outer one goes on (one call, one count)."""
    current = _current.get()
    if current is not None:
        yield current
        return
    work = work if work is not None else SchemaWork()
    token = _current.set(work)
    try:
        yield work
    finally:
        _current.reset(token)


def call_answers(kind: str, subject: Any, make: Callable[[], T]) -> T:
    """The object ``make`` builds for ``subject``, built once per open count (a walker that
    keeps its answers, shared by every question the call asks of one schema); a new one
    outside any."""
    work = _current.get()
    if work is None:
        return make()
    key = (kind, id(subject))
    kept = work.answers.get(key)
    if kept is None or kept[0] is not subject:
        kept = (subject, make())
        work.answers[key] = kept
    return kept[1]  # type: ignore[no-any-return]  # made by ``make`` for this kind


def spend(steps: int = 1) -> None:
    """Count ``steps``; a ``RequestError`` once the open count passes its limit."""
    work = _current.get()
    if work is None:
        return
    work.spent += steps
    if work.spent > work.limit:
        raise RequestError(
            f"the request's tool and response schemas take more than {work.limit:,} steps to "
            "set up (the limit grows with the schemas' size): $defs that refer to each "
            "other on many paths, or type lists over large schemas, cost more than their "
            "size; simplify them"
        )


def spend_on(schema: Mapping[str, Any]) -> None:
    """Count a visit of ``schema``: one step, and one per member and per item of a list or
    object it holds (what reading its keywords may cost: a long ``enum`` or ``required``)."""
    steps = 1 + len(schema)
    for value in schema.values():
        if isinstance(value, (list, Mapping)):
            steps += len(value)
    spend(steps)


def with_type(schema: Mapping[str, Any], kind: Any) -> Mapping[str, Any]:
    """``{**schema, "type": kind}`` as a view, made in constant time: one entry of a ``type``
    list read as the schema's type (a copy per entry costs the schema's size each time)."""
    # a ChainMap writes only to its first mapping; the schema is only read
    return ChainMap({"type": kind}, cast("MutableMapping[str, Any]", schema))


def schema_path(where: str, keys: Sequence[str | int]) -> str:
    """``where`` then ``keys`` as one path: ``tools[0].function.parameters.$defs.a``."""
    out = [where]
    for key in keys:
        if isinstance(key, int):
            out.append(f"[{key}]")
        elif _PLAIN_KEY.fullmatch(key):
            out.append(f".{key}")
        else:
            out.append(f"[{key!r}]")
    return "".join(out)


def too_deep(path: str) -> RequestError:
    """The error for a schema that nests (or chains ``$ref``s) past ``MAX_SCHEMA_DEPTH``."""
    return RequestError(
        f"{path}: the schema nests deeper than {MAX_SCHEMA_DEPTH} levels (each object, array "
        "and $ref is one level; a chain or cycle of $refs counts every step)"
    )


class RefAnswers(Generic[T]):
    """One question's answers per ``$ref`` of a walk that cuts cycles short (llama.cpp's
    walks), kept once they do not depend on the path that reached them: a walk that asks
    again gets the kept answer, and the walk's work is the document's size.

    An answer below a ``$ref`` depends on the path only where a cycle went back to a
    ``$ref`` above it; ``follow`` notes the highest such place and keeps the answers that
    none reached.
    """

    def __init__(self, cut: T) -> None:
        self.cut = cut  # the answer for a $ref already being walked (a cycle)
        self.known: dict[Any, T] = {}
        self.walking: dict[Any, int] = {}  # key -> its position on the current path
        self.refs: list[str] = []  # the $refs being walked, outermost first
        # the lowest path position a cycle went back to, under the $ref being walked
        self.reached = _NOWHERE

    def within(self) -> str:
        """The innermost ``$ref`` being walked ("" when none)."""
        return self.refs[-1] if self.refs else ""

    def follow(self, key: Any, target: Any, ref: str, visit: Callable[[Any], T]) -> T:
        """The answer for the ``$ref`` ``ref`` (known as ``key``, pointing at ``target``):
        the kept one, ``cut`` for a cycle or a missing target, else ``visit(target)``."""
        if key in self.known:
            return self.known[key]
        position = self.walking.get(key)
        if position is not None:
            self.reached = min(self.reached, position)
            return self.cut
        if target is None:
            return self.cut
        position = len(self.walking)
        self.walking[key] = position
        self.refs.append(ref)
        outer, self.reached = self.reached, _NOWHERE
        try:
            answer = visit(target)
        finally:
            del self.walking[key]
            self.refs.pop()
        if self.reached >= position:  # no cycle went back above this $ref
            self.known[key] = answer
        self.reached = min(outer, self.reached)
        return answer


_NOWHERE = sys.maxsize


def pointer_keys(ref: str) -> list[str]:
    """The keys a local ``$ref`` (``#/$defs/a``) names, unescaped."""
    return [p.replace("~1", "/").replace("~0", "~") for p in ref[1:].split("/") if p]


def pointer(root: Any, ref: str) -> tuple[Any, list[str | int]] | None:
    """The node a local ``$ref`` names and its path from ``root``; None when it names none
    (its readers then say why)."""
    if not ref.startswith("#"):
        return None
    node = root
    keys: list[str | int] = []
    for part in ref[1:].split("/"):
        if not part:
            continue
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping) and part in node:
            node = node[part]
            keys.append(part)
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
            keys.append(int(part))
        else:
            return None
    return node, keys


def check_schema(schema: Any, where: str) -> int:
    """Walk ``schema`` (a tool's ``parameters``, a ``response_format`` schema) once, each
    ``$ref`` target once; the number of JSON values in it (each object, array, member value
    and item). A ``RequestError`` naming the path (from ``where``) where it nests deeper
    than ``MAX_SCHEMA_DEPTH`` levels.

    A ``$ref`` continues the path at its target: the levels under a target count from the
    ``$ref``, and a target walked before counts as deep as it was then (a cycle ends where
    it started)."""
    check = _Check(schema, where)
    if isinstance(schema, (Mapping, list)):
        check.walk(schema, 0, [])
    return check.nodes


class _Check:
    def __init__(self, root: Any, where: str) -> None:
        self.root = root
        self.where = where
        # levels under each $ref target, by id once walked; None while it is being walked
        self.heights: dict[int, int | None] = {}
        self.nodes = 0

    def fail(self, keys: Sequence[str | int]) -> RequestError:
        return too_deep(schema_path(self.where, keys))

    def walk(self, node: Any, depth: int, keys: list[str | int]) -> int:
        """The levels at and under ``node`` (an object or an array)."""
        self.nodes += 1
        if depth >= MAX_SCHEMA_DEPTH:
            raise self.fail(keys)
        children: Any = node.items() if isinstance(node, Mapping) else enumerate(node)
        height = 0
        for key, child in children:
            if isinstance(child, (Mapping, list)):
                height = max(height, self.walk(child, depth + 1, [*keys, key]))
                continue
            self.nodes += 1
            if key == "$ref" and isinstance(child, str) and isinstance(node, Mapping):
                height = max(height, self.ref(child, depth, keys))
        return height + 1

    def ref(self, ref: str, depth: int, keys: list[str | int]) -> int:
        found = pointer(self.root, ref)
        if found is None or not isinstance(found[0], (Mapping, list)):
            return 0
        target, target_keys = found
        ident = id(target)
        if ident in self.heights:
            height = self.heights[ident]
            if height is None:  # a cycle: it ends here
                return 0
            if depth + height >= MAX_SCHEMA_DEPTH:  # its deepest level, reached from here
                raise self.fail([*keys, "$ref"])
            return height
        self.heights[ident] = None
        height = self.walk(target, depth + 1, target_keys)
        self.heights[ident] = height
        return height
