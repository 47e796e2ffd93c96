"""GBNF as data: read llama.cpp's grammar text into rules, cut a literal prefix off a grammar, and
write it back.

The exports (``export.py``) start here: a grammar llama.cpp runs from the generation prompt on,
or from a trigger on, becomes the grammar of what the model writes after that text, by taking
the grammar's derivative with respect to it (``after``): the language of every ``s`` such that
``prefix + s`` is in the grammar.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache

from ..errors import GrammarError

__all__ = [
    "Node",
    "Lit",
    "Chars",
    "AnyChar",
    "Ref",
    "Seq",
    "Alt",
    "Repeat",
    "EMPTY",
    "NONE",
    "Rules",
    "parse_gbnf",
    "write_gbnf",
    "after",
    "reachable",
    "rename_all",
    "clear_cache",
    "class_char",
    "repetition",
]


class Node:
    """One GBNF expression (immutable)."""


@dataclass(frozen=True)
class Lit(Node):
    text: str


@dataclass(frozen=True)
class Chars(Node):
    """A character class: ``ranges`` of code points (inclusive), ``negated`` for ``[^...]``."""

    negated: bool
    ranges: tuple[tuple[int, int], ...]

    def matches(self, ch: str) -> bool:
        c = ord(ch)
        return any(lo <= c <= hi for lo, hi in self.ranges) != self.negated


@dataclass(frozen=True)
class AnyChar(Node):
    pass


@dataclass(frozen=True)
class Ref(Node):
    name: str


@dataclass(frozen=True)
class Seq(Node):
    items: tuple[Node, ...]  # empty: the empty string


@dataclass(frozen=True)
class Alt(Node):
    items: tuple[Node, ...]  # empty: no string at all


@dataclass(frozen=True)
class Repeat(Node):
    item: Node
    min: int
    max: int  # -1: unbounded


EMPTY = Seq(())
NONE = Alt(())
Rules = dict[str, Node]


# ----------------------------------------------------------------------------------- reading

_NAME = re.compile(r"[A-Za-z0-9_-]+")
_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\", '"': '"', "[": "[", "]": "]", "-": "-"}
_HEX = {"x": 2, "u": 4, "U": 8}


class _Reader:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def fail(self, what: str) -> GrammarError:
        line = self.text.count("\n", 0, self.pos) + 1
        return GrammarError(f"GBNF: {what} at line {line}: {self.text[self.pos : self.pos + 30]!r}")

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def space(self, newlines: bool) -> None:
        while self.pos < len(self.text):
            c = self.text[self.pos]
            if c == "#":
                while self.pos < len(self.text) and self.text[self.pos] not in "\r\n":
                    self.pos += 1
            elif c in " \t" or (newlines and c in "\r\n"):
                self.pos += 1
            else:
                return

    def name(self) -> str:
        match = _NAME.match(self.text, self.pos)
        if match is None:
            raise self.fail("expected a name")
        self.pos = match.end()
        return match.group()

    def char(self) -> str:
        c = self.peek()
        if not c:
            raise self.fail("unexpected end")
        self.pos += 1
        if c != "\\":
            return c
        e = self.peek()
        self.pos += 1
        if e in _ESCAPES:
            return _ESCAPES[e]
        if e in _HEX:
            digits = self.text[self.pos : self.pos + _HEX[e]]
            try:
                value = int(digits, 16)
            except ValueError:
                raise self.fail("bad escape") from None
            self.pos += _HEX[e]
            return chr(value)
        raise self.fail(f"unknown escape \\{e}")

    def number(self) -> int:
        start = self.pos
        while self.peek().isdigit():
            self.pos += 1
        return int(self.text[start : self.pos])

    def alternatives(self, nested: bool) -> Node:
        items = [self.sequence(nested)]
        while self.peek() == "|":
            self.pos += 1
            self.space(True)
            items.append(self.sequence(nested))
        return items[0] if len(items) == 1 else Alt(tuple(items))

    def sequence(self, nested: bool) -> Node:
        items: list[Node] = []
        while True:
            item = self.primary(nested)
            if item is None:
                break
            items.append(self.postfix(item, nested))
        return items[0] if len(items) == 1 else Seq(tuple(items))

    def primary(self, nested: bool) -> Node | None:
        c = self.peek()
        if c == '"':
            self.pos += 1
            out = []
            while self.peek() != '"':
                out.append(self.char())
            self.pos += 1
            node: Node = Lit("".join(out))
        elif c == "[":
            node = self.chars()
        elif c == ".":
            self.pos += 1
            node = AnyChar()
        elif c == "(":
            self.pos += 1
            self.space(True)
            node = self.alternatives(True)
            if self.peek() != ")":
                raise self.fail("expected ')'")
            self.pos += 1
        elif c.isascii() and (c.isalnum() or c in "-_"):
            start = self.pos
            name = self.name()
            self.space(False)
            if self.text.startswith("::=", self.pos):  # the next rule: this sequence is over
                self.pos = start
                return None
            self.space(nested)
            return Ref(name)
        else:
            return None
        self.space(nested)
        return node

    def chars(self) -> Chars:
        self.pos += 1
        negated = self.peek() == "^"
        if negated:
            self.pos += 1
        ranges = []
        while self.peek() != "]":
            lo = self.char()
            hi = lo
            if self.peek() == "-" and self.text[self.pos + 1 : self.pos + 2] != "]":
                self.pos += 1
                hi = self.char()
            ranges.append((ord(lo), ord(hi)))
        self.pos += 1
        return Chars(negated, tuple(ranges))

    def postfix(self, item: Node, nested: bool) -> Node:
        while True:
            c = self.peek()
            if c in ("*", "+", "?"):
                self.pos += 1
                item = Repeat(item, 0 if c != "+" else 1, 1 if c == "?" else -1)
            elif c == "{":
                self.pos += 1
                self.space(True)
                lo = self.number() if self.peek().isdigit() else 0
                hi = lo
                self.space(True)
                if self.peek() == ",":
                    self.pos += 1
                    self.space(True)
                    hi = self.number() if self.peek().isdigit() else -1
                    self.space(True)
                if self.peek() != "}":
                    raise self.fail("expected '}'")
                self.pos += 1
                item = Repeat(item, lo, hi)
            else:
                return item
            self.space(nested)


def parse_gbnf(text: str) -> Rules:
    """The rules of a GBNF grammar, in the order written (``GrammarError`` on text llama.cpp's
    parser would refuse, or on what no export can carry: token references)."""
    return dict(_parsed(text))


def clear_cache() -> None:
    """Forget the grammars read so far (each text is read once)."""
    _parsed.cache_clear()


@lru_cache(maxsize=64)
def _parsed(text: str) -> Rules:
    """parse_gbnf's rules, read once per text (shared: never to be changed)."""
    reader = _Reader(text)
    rules: Rules = {}
    reader.space(True)
    while reader.pos < len(text):
        name = reader.name()
        reader.space(False)
        if not text.startswith("::=", reader.pos):
            raise reader.fail("expected '::='")
        reader.pos += 3
        reader.space(True)
        rules[name] = reader.alternatives(False)
        reader.space(False)
        if reader.peek() not in ("\r", "\n", ""):
            raise reader.fail("unexpected text")
        reader.space(True)
    if "root" not in rules:
        raise GrammarError("GBNF: no root rule")
    for ref in (n for body in rules.values() for n in walk(body) if isinstance(n, Ref)):
        if ref.name not in rules:
            raise GrammarError(f"GBNF: undefined rule {ref.name!r}")
    return rules


def walk(node: Node) -> Iterator[Node]:
    """Every node of an expression (rule references not followed)."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        if isinstance(n, (Seq, Alt)):
            stack.extend(n.items)
        elif isinstance(n, Repeat):
            stack.append(n.item)


def reachable(rules: Rules, root: str = "root") -> list[str]:
    """The rules ``root`` uses, itself first, then in the order first met."""
    seen = [root]
    known = {root}
    i = 0
    while i < len(seen):
        for n in walk(rules[seen[i]]):
            if isinstance(n, Ref) and n.name not in known:
                known.add(n.name)
                seen.append(n.name)
        i += 1
    return seen


# ----------------------------------------------------------------------------------- writing


def class_char(c: int, escaped: str = "\\]-[^") -> str:
    """Code point ``c`` as written inside a GBNF character class: a backslash before each of
    ``escaped``, the usual escapes for line breaks and tabs, hex beyond printable ASCII. (The
    writer escapes ``^`` too; llama.cpp's automata leave it bare.)"""
    ch = chr(c)
    if ch in escaped:
        return "\\" + ch
    if ch == "\n":
        return "\\n"
    if ch == "\r":
        return "\\r"
    if ch == "\t":
        return "\\t"
    if 0x20 <= c < 0x7F:
        return ch
    return f"\\x{c:02X}" if c <= 0xFF else f"\\u{c:04X}" if c <= 0xFFFF else f"\\U{c:08X}"


def _literal(text: str) -> str:
    out = []
    for ch in text:
        c = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif c < 0x20 or c == 0x7F:
            out.append(f"\\x{c:02X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def repetition(lo: int, hi: int) -> str:
    """The GBNF suffix repeating an item ``lo`` to ``hi`` (-1: no bound) times."""
    if (lo, hi) == (0, 1):
        return "?"
    if (lo, hi) == (0, -1):
        return "*"
    if (lo, hi) == (1, -1):
        return "+"
    if hi == -1:
        return f"{{{lo},}}"
    return f"{{{lo}}}" if lo == hi else f"{{{lo},{hi}}}"


def write_node(node: Node) -> str:
    """An expression as GBNF text."""
    if isinstance(node, Lit):
        return _literal(node.text)
    if isinstance(node, Chars):
        body = "".join(
            class_char(lo) if lo == hi else f"{class_char(lo)}-{class_char(hi)}"
            for lo, hi in node.ranges
        )
        return ("[^" if node.negated else "[") + body + "]"
    if isinstance(node, AnyChar):
        return "."
    if isinstance(node, Ref):
        return node.name
    if isinstance(node, Seq):
        if not node.items:
            return '""'
        return " ".join(
            f"({write_node(i)})" if isinstance(i, Alt) else write_node(i) for i in node.items
        )
    if isinstance(node, Alt):
        if not node.items:
            raise GrammarError("GBNF: a rule matches nothing")
        # an empty alternative as "": xgrammar's EBNF refuses a bare one (`a ::= | "x"`)
        return " | ".join(write_node(i) for i in node.items)
    assert isinstance(node, Repeat)
    inner = write_node(node.item)
    if isinstance(node.item, (Seq, Alt)) and not (
        isinstance(node.item, Seq) and not node.item.items
    ):
        inner = f"({inner})"
    return inner + repetition(node.min, node.max)


def write_gbnf(rules: Rules, root: str = "root") -> str:
    """The rules ``root`` reaches as GBNF text, ``root`` first."""
    return "".join(f"{name} ::= {write_node(rules[name])}\n" for name in reachable(rules, root))


# -------------------------------------------------------------------------------- derivatives


def _nullable_rules(rules: Rules) -> set[str]:
    nullable: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, body in rules.items():
            if name not in nullable and _nullable(body, nullable):
                nullable.add(name)
                changed = True
    return nullable


def _nullable(node: Node, rules: set[str]) -> bool:
    if isinstance(node, Lit):
        return node.text == ""
    if isinstance(node, (Chars, AnyChar)):
        return False
    if isinstance(node, Ref):
        return node.name in rules
    if isinstance(node, Seq):
        return all(_nullable(i, rules) for i in node.items)
    if isinstance(node, Alt):
        return any(_nullable(i, rules) for i in node.items)
    assert isinstance(node, Repeat)
    return node.min == 0 or _nullable(node.item, rules)


def _seq(items: list[Node]) -> Node:
    flat: list[Node] = []
    for i in items:
        if i == NONE:
            return NONE
        if isinstance(i, Seq):
            flat.extend(i.items)
        elif not (isinstance(i, Lit) and not i.text):
            flat.append(i)
    return flat[0] if len(flat) == 1 else Seq(tuple(flat))


def _alt(items: list[Node]) -> Node:
    flat: list[Node] = []
    for i in items:
        for j in i.items if isinstance(i, Alt) else (i,):
            if j not in flat:
                flat.append(j)
    return flat[0] if len(flat) == 1 else Alt(tuple(flat))


class _Deriver:
    """Derivatives of a grammar's rules, each (rule, character) made once. A derived rule that
    is only another rule, the empty string, or a body already made is not kept (so the
    alternatives of a derivative stay few)."""

    def __init__(self, rules: Rules) -> None:
        self.rules = dict(rules)
        self.made: dict[tuple[str, str], Node] = {}
        self.origin: dict[str, str] = {}
        self.bodies: dict[Node, str] = {}
        self.making: dict[str, bool] = {}  # rule being made -> referred to meanwhile
        self.nullable = _nullable_rules(self.rules)

    def rule(self, name: str, ch: str) -> Node:
        key = (name, ch)
        if key in self.made:
            made = self.made[key]
            if isinstance(made, Ref) and made.name in self.making:
                self.making[made.name] = True
            return made
        base = self.origin.get(name, name)
        new = _fresh(self.rules, f"{base}-after1")
        self.origin[new] = base
        self.made[key] = Ref(new)
        self.rules[new] = NONE  # while it is being made (a left recursion)
        self.making[new] = False
        body = self.derive(self.rules[name], ch)
        recursive = self.making.pop(new)
        if not recursive and (isinstance(body, Ref) or body in (EMPTY, NONE)):
            del self.rules[new]
            self.made[key] = body
        elif not recursive and body in self.bodies:
            del self.rules[new]
            self.made[key] = Ref(self.bodies[body])
        else:
            self.rules[new] = body
            self.bodies.setdefault(body, new)
            # a derived rule refers to the grammar's own rules (their nullability known), or
            # to itself through a left recursion, whose empty string this first pass misses
            if _nullable(body, self.nullable):
                self.nullable.add(new)
        return self.made[key]

    def derive(self, node: Node, ch: str) -> Node:
        if isinstance(node, Lit):
            return Lit(node.text[1:]) if node.text[:1] == ch else NONE
        if isinstance(node, Chars):
            return EMPTY if node.matches(ch) else NONE
        if isinstance(node, AnyChar):
            return EMPTY
        if isinstance(node, Ref):
            return self.rule(node.name, ch)
        if isinstance(node, Alt):
            return _alt([self.derive(i, ch) for i in node.items])
        if isinstance(node, Seq):
            out: list[Node] = []
            for k, item in enumerate(node.items):
                out.append(_seq([self.derive(item, ch), *node.items[k + 1 :]]))
                if not _nullable(item, self.nullable):
                    break
            return _alt(out) if out else NONE
        assert isinstance(node, Repeat)
        if node.max == 0:
            return NONE
        lo = 0 if _nullable(node.item, self.nullable) else max(node.min - 1, 0)
        hi = -1 if node.max == -1 else node.max - 1
        rest: Node = EMPTY if hi == 0 else Repeat(node.item, lo, hi)
        return _seq([self.derive(node.item, ch), rest])


def after(rules: Rules, prefix: str, root: str = "root") -> Rules | None:
    """The rules of the strings ``s`` for which ``prefix + s`` matches ``root`` (the new
    ``root``), or None when no string of the grammar starts with ``prefix``."""
    deriver = _Deriver(rules)
    node: Node = Ref(root)
    for ch in prefix:
        node = deriver.derive(node, ch)
        if node == NONE:
            return None
    out = dict(deriver.rules)
    if any(isinstance(n, Ref) and n.name == "root" for n in _all(out, node)):
        old = _fresh(out, "root-0")
        out = {k: _rename(v, "root", old) for k, v in out.items()}
        out[old] = out.pop("root")
        node = _rename(node, "root", old)
    out["root"] = node
    return _without_aliases({name: out[name] for name in reachable(out)})


def _without_aliases(rules: Rules) -> Rules:
    """Rules whose body is another rule's name replaced by that name (``root`` kept)."""
    alias = {k: v.name for k, v in rules.items() if isinstance(v, Ref) and k != "root"}

    def target(name: str) -> str:
        seen = set()
        while name in alias and name not in seen:
            seen.add(name)
            name = alias[name]
        return name

    renamed = {k: v for k, v in rules.items() if k not in alias or target(k) == k}
    for old in alias:
        if target(old) != old:
            renamed = {k: _rename(v, old, target(old)) for k, v in renamed.items()}
    root = renamed["root"]
    if isinstance(root, Ref) and root.name != "root":
        # root ::= other, with nothing else using other: other's body is the root's
        used = sum(
            isinstance(n, Ref) and n.name == root.name for b in renamed.values() for n in walk(b)
        )
        if used == 1:
            renamed["root"] = renamed.pop(root.name)
    return {name: renamed[name] for name in reachable(renamed)}


def _all(rules: Rules, node: Node) -> Iterator[Node]:
    yield from walk(node)
    for body in rules.values():
        yield from walk(body)


def _fresh(rules: Rules, name: str) -> str:
    """``name``, or ``name`` with the first number after it that no rule has."""
    base, n = name.rstrip("0123456789"), int(name[len(name.rstrip("0123456789")) :] or 0)
    while name in rules:
        n += 1
        name = f"{base}{n}"
    return name


def _rename(node: Node, old: str, new: str) -> Node:
    if isinstance(node, Ref):
        return Ref(new) if node.name == old else node
    if isinstance(node, Seq):
        return Seq(tuple(_rename(i, old, new) for i in node.items))
    if isinstance(node, Alt):
        return Alt(tuple(_rename(i, old, new) for i in node.items))
    if isinstance(node, Repeat):
        return Repeat(_rename(node.item, old, new), node.min, node.max)
    return node


def rename_all(rules: Rules, prefix: str) -> Rules:
    """Every rule renamed ``prefix + name`` (so that several grammars share one file)."""
    return {prefix + name: _prefix_refs(body, prefix) for name, body in rules.items()}


def _prefix_refs(node: Node, prefix: str) -> Node:
    if isinstance(node, Ref):
        return Ref(prefix + node.name)
    if isinstance(node, Seq):
        return Seq(tuple(_prefix_refs(i, prefix) for i in node.items))
    if isinstance(node, Alt):
        return Alt(tuple(_prefix_refs(i, prefix) for i in node.items))
    if isinstance(node, Repeat):
        return Repeat(_prefix_refs(node.item, prefix), node.min, node.max)
    return node
