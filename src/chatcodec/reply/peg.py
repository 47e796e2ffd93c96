"""A small lenient PEG engine with llama.cpp's result semantics (SUCCESS / FAIL / NEED_MORE).

The incremental engine uses it for bounded structures (one tool call at a time); the
behaviour of every combinator follows llama.cpp's `common/peg-parser.cpp` so that a parse
of a cut-short text gives exactly what llama.cpp gives.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from weakref import WeakKeyDictionary

__all__ = [
    "tags_in",
    "notes_edges",
    "SUCCESS",
    "FAIL",
    "NEED_MORE",
    "Node",
    "Result",
    "Parser",
    "Literal",
    "Seq",
    "Choice",
    "Repeat",
    "Peek",
    "Not",
    "Space",
    "Chars",
    "StringBody",
    "Until",
    "Tag",
    "Atomic",
    "Eps",
    "Ref",
    "NestedValue",
    "optional",
    "atomic_tag",
    "json_value",
    "json_object",
    "json_array",
    "json_number",
    "json_bool",
    "json_null",
    "python_string",
    "python_or_json_value",
    "is_c_space",
    "Probe",
    "probed",
]

SUCCESS = 0
FAIL = 1
NEED_MORE = 2

_C_SPACE = frozenset(" \t\n\v\f\r")


def is_c_space(ch: str) -> bool:
    """C `isspace` in the C locale, which llama.cpp's `space()` uses."""
    return ch in _C_SPACE


class Probe(str):
    """The text of a streamed parse, which notes each time a parser's result depended on
    where the text ends (``edges``): ``(position, literal)`` for a literal cut short there,
    ``(position, None)`` for a run of whitespace that reached the end, ``(position, "")`` for
    anything else (a search, a repetition that reached the end, ...). A parse whose last edge
    is a literal, and whose others are whitespace at the same position, gives the same result
    on any longer text in which that literal is still cut short (if it does not begin with
    whitespace): nothing else read as far as the end."""

    edges: list[tuple[int, str | None]]


def probed(text: str) -> Probe:
    """``text`` as a Probe with no edges yet."""
    probe = Probe(text)
    probe.edges = []
    return probe


def _edge(text: str, pos: int, literal: str | None = "") -> None:
    """A result at ``pos`` depended on the end of ``text`` (noted when it is a Probe)."""
    if type(text) is Probe:
        text.edges.append((pos, literal))


@dataclass(frozen=True)
class Node:
    """An AST node: a tag, the text span it covers, whether it was cut by the end of input;
    ``until``: what ends its text, when it is the text of an ``Until`` (a raw string value
    the stream may extend as it comes)."""

    tag: str
    start: int
    end: int
    partial: bool
    children: tuple[Node, ...] = ()
    until: Until | None = field(default=None, compare=False)


@dataclass
class Result:
    status: int
    end: int
    nodes: list[Node] = field(default_factory=list)


class Parser:
    def parse(self, text: str, pos: int) -> Result:
        raise NotImplementedError


class Eps(Parser):
    def parse(self, text: str, pos: int) -> Result:
        return Result(SUCCESS, pos)


class Literal(Parser):
    """Byte-wise literal; input ending while every byte so far matched is NEED_MORE."""

    def __init__(self, s: str) -> None:
        self.s = s

    def parse(self, text: str, pos: int) -> Result:
        s = self.s
        if text.startswith(s, pos):
            return Result(SUCCESS, pos + len(s))
        # (the rest is sliced only when it is shorter than the literal: a failed literal must
        # not copy the text after it)
        if len(text) - pos < len(s) and s.startswith(text[pos:]):
            _edge(text, pos, s)
            return Result(NEED_MORE, len(text))
        return Result(FAIL, pos)


class Seq(Parser):
    def __init__(self, *children: Parser) -> None:
        self.children = children

    def parse(self, text: str, pos: int) -> Result:
        nodes: list[Node] = []
        for child in self.children:
            r = child.parse(text, pos)
            if r.status == FAIL:
                return Result(FAIL, r.end)
            nodes.extend(r.nodes)
            if r.status == NEED_MORE:
                return Result(NEED_MORE, r.end, nodes)
            pos = r.end
        return Result(SUCCESS, pos, nodes)


class Choice(Parser):
    """Ordered choice: the first alternative that does not FAIL wins, NEED_MORE included."""

    def __init__(self, *children: Parser) -> None:
        self.children = list(children)

    def parse(self, text: str, pos: int) -> Result:
        for child in self.children:
            r = child.parse(text, pos)
            if r.status != FAIL:
                return r
        return Result(FAIL, pos)


class Repeat(Parser):
    """llama.cpp's repetition: stops before trying the child at end of input."""

    def __init__(self, child: Parser, lo: int = 0, hi: int = -1) -> None:
        self.child, self.lo, self.hi = child, lo, hi

    def parse(self, text: str, pos: int) -> Result:
        nodes: list[Node] = []
        count = 0
        n = len(text)
        while self.hi == -1 or count < self.hi:
            if pos >= n:
                _edge(text, pos)
                break
            r = self.child.parse(text, pos)
            if r.status == SUCCESS:
                if r.end == pos:
                    break
                nodes.extend(r.nodes)
                pos = r.end
                count += 1
                continue
            if r.status == NEED_MORE:
                nodes.extend(r.nodes)
                return Result(NEED_MORE, r.end, nodes)
            break
        if count < self.lo:
            return Result(NEED_MORE if pos >= n else FAIL, pos, nodes if pos >= n else [])
        return Result(SUCCESS, pos, nodes)


class Peek(Parser):
    def __init__(self, child: Parser) -> None:
        self.child = child

    def parse(self, text: str, pos: int) -> Result:
        return Result(self.child.parse(text, pos).status, pos)


class Not(Parser):
    def __init__(self, child: Parser) -> None:
        self.child = child

    def parse(self, text: str, pos: int) -> Result:
        status = self.child.parse(text, pos).status
        if status == SUCCESS:
            return Result(FAIL, pos)
        return Result(NEED_MORE if status == NEED_MORE else SUCCESS, pos)


class Space(Parser):
    def parse(self, text: str, pos: int) -> Result:
        n = len(text)
        while pos < n and text[pos] in _C_SPACE:
            pos += 1
        if pos >= n:
            _edge(text, pos, None)
        return Result(SUCCESS, pos)


class Chars(Parser):
    """A character class repeated lo..hi times (hi = -1: unbounded)."""

    def __init__(self, chars: str, lo: int = 1, hi: int = -1) -> None:
        self.chars = frozenset(chars)
        self.lo, self.hi = lo, hi

    def parse(self, text: str, pos: int) -> Result:
        n = len(text)
        count = 0
        while (self.hi == -1 or count < self.hi) and pos < n and text[pos] in self.chars:
            pos += 1
            count += 1
        if pos >= n:
            _edge(text, pos)
        if count < self.lo:
            return Result(NEED_MORE if pos >= n else FAIL, pos)
        return Result(SUCCESS, pos)


_HEX = frozenset("0123456789abcdefABCDEF")


class StringBody(Parser):
    """JSON-ish string content up to an unescaped quote (not consumed)."""

    def __init__(self, quote: str) -> None:
        self.quote = quote
        self._plain = re.compile(r"[^\\" + re.escape(quote) + r"]*")

    def parse(self, text: str, pos: int) -> Result:
        start = pos
        n = len(text)
        q = self.quote
        while True:
            m = self._plain.match(text, pos)
            assert m is not None
            pos = m.end()
            if pos >= n:
                _edge(text, pos)
                return Result(NEED_MORE, pos)
            if text[pos] == q:
                return Result(SUCCESS, pos)
            # a backslash escape
            if pos + 1 >= n:
                _edge(text, pos)
                return Result(NEED_MORE, pos)
            c = text[pos + 1]
            if c in (q, "\\", "/", "b", "f", "n", "r", "t"):
                pos += 2
                continue
            if c == "u":
                k = pos + 2
                while k < pos + 6:
                    if k >= n:
                        _edge(text, pos)
                        return Result(NEED_MORE, pos)
                    if text[k] not in _HEX:
                        return Result(FAIL, start)
                    k += 1
                pos = k
                continue
            return Result(FAIL, start)


class Until(Parser):
    """Text up to the first delimiter; a delimiter prefix cut by the end of input is held back.

    Reaching the end of input without a delimiter is NEED_MORE (llama.cpp's lenient `until`).
    """

    def __init__(self, *delimiters: str) -> None:
        self.delimiters = tuple(d for d in delimiters if d)
        self._re = (
            re.compile("|".join(re.escape(d) for d in self.delimiters)) if self.delimiters else None
        )
        self._prefixes = frozenset(d[:i] for d in self.delimiters for i in range(1, len(d)))
        self._longest = max((len(d) for d in self.delimiters), default=0)
        # the characters a delimiter begins with: text without any of them is all text
        self.firsts = frozenset(d[0] for d in self.delimiters)

    def find(self, text: str, pos: int) -> tuple[int, bool]:
        """(where the text stops, whether a complete delimiter starts there)."""
        n = len(text)
        complete = n
        if self._re is not None:
            m = self._re.search(text, pos)
            if m is not None:
                complete = m.start()
        lo = n - self._longest + 1
        if lo < pos:
            lo = pos
        firsts = self.firsts
        for p in range(lo, complete):
            if text[p] in firsts and text[p:] in self._prefixes:
                return p, False
        return complete, complete < n

    def parse(self, text: str, pos: int) -> Result:
        stop, complete = self.find(text, pos)
        if not complete:
            _edge(text, stop)
        if stop < len(text):
            return Result(SUCCESS, stop)
        return Result(NEED_MORE, stop)


class Tag(Parser):
    """Adds an AST node for what the child matched (also when it was cut short)."""

    def __init__(self, tag: str, child: Parser) -> None:
        self.tag, self.child = tag, child
        self.until = child if isinstance(child, Until) else None

    def parse(self, text: str, pos: int) -> Result:
        r = self.child.parse(text, pos)
        if r.status == FAIL:
            return r
        node = Node(self.tag, pos, r.end, r.status == NEED_MORE, tuple(r.nodes), self.until)
        return Result(r.status, r.end, [node])


class Atomic(Parser):
    """A cut-short match contributes no nodes (a partial marker never reaches the mapper)."""

    def __init__(self, child: Parser) -> None:
        self.child = child

    def parse(self, text: str, pos: int) -> Result:
        r = self.child.parse(text, pos)
        if r.status == NEED_MORE:
            return Result(NEED_MORE, r.end)
        return r


def optional(parser: Parser) -> Parser:
    """Zero or one ``parser`` (llama.cpp's ``optional``)."""
    return Repeat(parser, 0, 1)


def atomic_tag(tag: str, parser: Parser) -> Parser:
    """A node for what ``parser`` matched, only once complete (llama.cpp's atomic tags:
    ``tool_open``, ``tool_name``, ``tool_arg_close``, ...)."""
    return Atomic(Tag(tag, parser))


def _tree(parser: Parser) -> Iterator[Parser]:
    """Every parser in ``parser``'s tree, once (recursion through a ``Ref`` followed once)."""
    seen: set[int] = set()
    stack = [parser]
    while stack:
        p = stack.pop()
        if id(p) in seen:
            continue
        seen.add(id(p))
        yield p
        for name in ("child", "target", "scalar", "key"):
            inner = getattr(p, name, None)
            if isinstance(inner, Parser):
                stack.append(inner)
        stack.extend(c for c in getattr(p, "children", ()) if isinstance(c, Parser))


def tags_in(parser: Parser) -> frozenset[str]:
    """Every tag a parser's nodes may carry."""
    return frozenset(p.tag for p in _tree(parser) if isinstance(p, Tag))


def notes_edges(parser: Parser) -> bool:
    """Whether every parser in ``parser``'s tree is one of this module's, which note on a
    ``Probe`` each result that depended on the end of the text (a parser of a family's own
    may read to the end unnoted). Walked once per parser: streams ask it at their start."""
    known = _NOTES_EDGES.get(parser)
    if known is None:
        known = _NOTES_EDGES[parser] = all(type(p) in _NOTING for p in _tree(parser))
    return known


_NOTES_EDGES: WeakKeyDictionary[Parser, bool] = WeakKeyDictionary()


class Ref(Parser):
    """A late-bound parser, for a recursive grammar (Gemma 4's argument values)."""

    def __init__(self) -> None:
        self.target: Parser = Eps()

    def parse(self, text: str, pos: int) -> Result:
        return self.target.parse(text, pos)


class NestedValue(Parser):
    """A JSON (or Python-literal) value, object or array, read with an explicit stack.

    The result is exactly the combinator grammar's (kept in tests/test_reply_nesting.py as the
    reference): a container is ``open ws (close | items ws close)``, a FAIL anywhere inside
    fails every enclosing container, a NEED_MORE anywhere ends the parse with the inner end.
    No Python recursion per nesting level: any depth that fits in memory parses.
    ``python``: llama.cpp's python-or-json value (containers swallow the space after them, no
    space before an element's comma). ``top``: what the value may be ("value", "{" or "[").
    """

    def __init__(self, scalar: Parser, key: Parser, python: bool, top: str = "value") -> None:
        self.scalar, self.key, self.python, self.top = scalar, key, python, top

    def parse(self, text: str, pos: int) -> Result:
        r = self._value(text, pos)
        if r.status == NEED_MORE or r.end >= len(text):
            _edge(text, r.end)
        return r

    def _value(self, text: str, pos: int) -> Result:
        n = len(text)
        start = pos
        python = self.python
        top = self.top
        if top != "value":
            if pos >= n:
                return Result(NEED_MORE, n)
            if text[pos] != top:
                return Result(FAIL, pos)
        # per open container: True for an object; where its first item begins (its FAIL end)
        objects: list[bool] = []
        first_item = -1
        scalar = self.scalar
        while True:
            # a value at pos
            if pos >= n:
                return Result(NEED_MORE, n)
            c = text[pos]
            if c == "{" or c == "[":
                pos += 1
                while pos < n and text[pos] in _C_SPACE:
                    pos += 1
                if pos >= n:
                    return Result(NEED_MORE, n)
                if text[pos] == ("}" if c == "{" else "]"):
                    pos += 1
                    if python:
                        while pos < n and text[pos] in _C_SPACE:
                            pos += 1
                else:
                    if not objects:
                        first_item = pos
                    objects.append(c == "{")
                    if c == "{":
                        r = self._key(text, pos)
                        if r.status != SUCCESS:
                            return self._failed(r, start, first_item)
                        pos = r.end
                    continue
            else:
                r = scalar.parse(text, pos)
                if r.status != SUCCESS:
                    return self._failed(r, start, first_item)
                pos = r.end
            # after a value: the next item, or the close of its container(s)
            while objects:
                if pos >= n:
                    return Result(NEED_MORE, n)
                is_object = objects[-1]
                q = pos
                if is_object or not python:
                    while q < n and text[q] in _C_SPACE:
                        q += 1
                    if q >= n:
                        return Result(NEED_MORE, n)
                if text[q] == ",":
                    q += 1
                    while q < n and text[q] in _C_SPACE:
                        q += 1
                    pos = q
                    if is_object:
                        r = self._key(text, pos)
                        if r.status != SUCCESS:
                            return self._failed(r, start, first_item)
                        pos = r.end
                    break
                while q < n and text[q] in _C_SPACE:
                    q += 1
                if q >= n:
                    return Result(NEED_MORE, n)
                if text[q] != ("}" if is_object else "]"):
                    return Result(FAIL, start if top == "value" else first_item)
                pos = q + 1
                if python:
                    while pos < n and text[pos] in _C_SPACE:
                        pos += 1
                objects.pop()
            else:
                return Result(SUCCESS, pos)

    def _key(self, text: str, pos: int) -> Result:
        """A member's key, the space and colon after it and the space before its value."""
        r = self.key.parse(text, pos)
        if r.status != SUCCESS:
            return r
        n = len(text)
        pos = r.end
        while pos < n and text[pos] in _C_SPACE:
            pos += 1
        if pos >= n:
            return Result(NEED_MORE, n)
        if text[pos] != ":":
            return Result(FAIL, pos)
        pos += 1
        while pos < n and text[pos] in _C_SPACE:
            pos += 1
        return Result(SUCCESS, pos)

    def _failed(self, r: Result, start: int, first_item: int) -> Result:
        """An inner NEED_MORE as it is; an inner FAIL as the outermost construct's FAIL."""
        if r.status == NEED_MORE:
            return Result(NEED_MORE, r.end)
        if self.top == "value" or first_item < 0:
            return Result(FAIL, start)
        return Result(FAIL, first_item)


def _build_json() -> dict[str, Parser]:
    string = Seq(Literal('"'), StringBody('"'), Literal('"'))
    digits = Chars("0123456789", 1, -1)
    int_part = Choice(Literal("0"), Seq(Chars("123456789", 1, 1), Chars("0123456789", 0, -1)))
    frac = Seq(Literal("."), digits)
    exp = Seq(Choice(Literal("e"), Literal("E")), Repeat(Chars("+-", 1, 1), 0, 1), digits)
    number = Seq(
        Repeat(Literal("-"), 0, 1),
        int_part,
        Repeat(frac, 0, 1),
        Repeat(exp, 0, 1),
        Not(Chars("0123456789.eE+-", 1, 1)),
    )
    boolean = Choice(Literal("true"), Literal("false"))
    null = Literal("null")
    scalar = Choice(string, number, boolean, null)
    return {
        "value": NestedValue(scalar, string, python=False),
        "object": NestedValue(scalar, string, python=False, top="{"),
        "array": NestedValue(scalar, string, python=False, top="["),
        "string": string,
        "number": number,
        "bool": boolean,
        "null": null,
    }


_JSON = _build_json()
json_value = _JSON["value"]
json_object = _JSON["object"]
json_array = _JSON["array"]
json_number = _JSON["number"]
json_bool = _JSON["bool"]
json_null = _JSON["null"]


def permute(parsers: Sequence[Parser]) -> Parser:
    """Every parser exactly once, in any order (llama.cpp's `permute`, up to six elements)."""
    if not parsers:
        return Eps()
    if len(parsers) == 1 or len(parsers) > 6:
        return Seq(*parsers)
    memo: dict[int, Parser] = {}

    def remaining(mask: int) -> Parser:
        if mask == 0:
            return Eps()
        if mask not in memo:
            alts = [
                Seq(p, remaining(mask & ~(1 << i))) for i, p in enumerate(parsers) if mask >> i & 1
            ]
            memo[mask] = Choice(*alts)
        return memo[mask]

    return remaining((1 << len(parsers)) - 1)


python_string = Choice(
    Seq(Literal('"'), StringBody('"'), Literal('"')),
    Seq(Literal("'"), StringBody("'"), Literal("'")),
)


def _build_python_or_json() -> Parser:
    """llama.cpp's python-or-json-value: dicts and lists (which swallow the space after them),
    single- or double-quoted strings, JSON numbers, True/False/None and true/false/null."""
    scalar = Choice(
        python_string,
        json_number,
        Choice(Literal("True"), Literal("False")),
        Literal("None"),
        json_bool,
        json_null,
    )
    return NestedValue(scalar, python_string, python=True)


python_or_json_value = _build_python_or_json()


class CharsExcept(Parser):
    """Any character but ``chars``, repeated lo..hi times (llama.cpp's ``[^...]`` class)."""

    def __init__(self, chars: str, lo: int = 1, hi: int = -1) -> None:
        self.chars = frozenset(chars)
        self.lo, self.hi = lo, hi

    def parse(self, text: str, pos: int) -> Result:
        n = len(text)
        count = 0
        while (self.hi == -1 or count < self.hi) and pos < n and text[pos] not in self.chars:
            pos += 1
            count += 1
        if pos >= n:
            _edge(text, pos)
        if count < self.lo:
            return Result(NEED_MORE if pos >= n else FAIL, pos)
        return Result(SUCCESS, pos)


# the parsers that note their edges on a Probe (see notes_edges)
_NOTING = frozenset(
    {
        Eps,
        Literal,
        Seq,
        Choice,
        Repeat,
        Peek,
        Not,
        Space,
        Chars,
        CharsExcept,
        StringBody,
        Until,
        Tag,
        Atomic,
        Ref,
        NestedValue,
    }
)
