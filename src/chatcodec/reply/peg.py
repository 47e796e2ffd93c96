"""A small lenient PEG engine with llama.cpp's result semantics (SUCCESS / FAIL / NEED_MORE).

The incremental engine uses it for bounded structures (one tool call at a time); the
behaviour of every combinator follows llama.cpp's `common/peg-parser.cpp` so that a parse
of a cut-short text gives exactly what llama.cpp gives.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = [
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
]

SUCCESS = 0
FAIL = 1
NEED_MORE = 2

_C_SPACE = frozenset(" \t\n\v\f\r")


def is_c_space(ch: str) -> bool:
    """C `isspace` in the C locale, which llama.cpp's `space()` uses."""
    return ch in _C_SPACE


@dataclass(frozen=True)
class Node:
    """An AST node: a tag, the text span it covers, whether it was cut by the end of input."""

    tag: str
    start: int
    end: int
    partial: bool
    children: tuple[Node, ...] = ()


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
                return Result(NEED_MORE, pos)
            if text[pos] == q:
                return Result(SUCCESS, pos)
            # a backslash escape
            if pos + 1 >= n:
                return Result(NEED_MORE, pos)
            c = text[pos + 1]
            if c in (q, "\\", "/", "b", "f", "n", "r", "t"):
                pos += 2
                continue
            if c == "u":
                k = pos + 2
                while k < pos + 6:
                    if k >= n:
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
        if stop < len(text):
            return Result(SUCCESS, stop)
        return Result(NEED_MORE, stop)


class Tag(Parser):
    """Adds an AST node for what the child matched (also when it was cut short)."""

    def __init__(self, tag: str, child: Parser) -> None:
        self.tag, self.child = tag, child

    def parse(self, text: str, pos: int) -> Result:
        r = self.child.parse(text, pos)
        if r.status == FAIL:
            return r
        node = Node(self.tag, pos, r.end, r.status == NEED_MORE, tuple(r.nodes))
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


class Ref(Parser):
    """A late-bound parser, for the recursive JSON value."""

    def __init__(self) -> None:
        self.target: Parser = Eps()

    def parse(self, text: str, pos: int) -> Result:
        return self.target.parse(text, pos)


def _build_json() -> dict[str, Parser]:
    ws = Space()
    value = Ref()
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
    member = Seq(string, ws, Literal(":"), ws, value)
    members = Seq(member, Repeat(Seq(ws, Literal(","), ws, member)))
    obj = Seq(Literal("{"), ws, Choice(Literal("}"), Seq(members, ws, Literal("}"))))
    elements = Seq(value, Repeat(Seq(ws, Literal(","), ws, value)))
    arr = Seq(Literal("["), ws, Choice(Literal("]"), Seq(elements, ws, Literal("]"))))
    value.target = Choice(obj, arr, string, number, boolean, null)
    return {
        "value": value,
        "object": obj,
        "array": arr,
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
    ws = Space()
    value = Ref()
    member = Seq(python_string, ws, Literal(":"), ws, value)
    members = Seq(member, Repeat(Seq(ws, Literal(","), ws, member)))
    mapping = Seq(Literal("{"), ws, Choice(Literal("}"), Seq(members, ws, Literal("}"))), ws)
    elements = Seq(value, Repeat(Seq(Literal(","), ws, value)))
    sequence = Seq(Literal("["), ws, Choice(Literal("]"), Seq(elements, ws, Literal("]"))), ws)
    value.target = Choice(
        mapping,
        sequence,
        python_string,
        json_number,
        Choice(Literal("True"), Literal("False")),
        Literal("None"),
        json_bool,
        json_null,
    )
    return value


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
        if count < self.lo:
            return Result(NEED_MORE if pos >= n else FAIL, pos)
        return Result(SUCCESS, pos)
