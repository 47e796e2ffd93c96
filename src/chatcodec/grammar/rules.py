"""A reply format as grammar: llama.cpp's parser combinators, compiled to GBNF as it compiles them.

llama.cpp describes each family's reply with one PEG and turns the same PEG into the sampler's
GBNF grammar (``common_peg_arena::build_grammar``). This module holds the grammar side of those
combinators: a family writes its reply format with them (``Rules`` + the expression
constructors), and ``Rules.gbnf`` gives the text llama.cpp gives, rule for rule:

* literals, sequences, choices and repetitions as written (nested sequences and choices are
  flattened where they are built, as llama.cpp's builder does; ``tag`` keeps a group whole);
* look-aheads, ``start``/``end`` and epsilon give nothing; ``space()`` is the rule ``space``;
* ``until(delimiters)`` is any text without a delimiter (an Aho-Corasick exclusion automaton),
  ``up_to(delimiters)`` any text up to and including the first delimiter (inclusion);
* ``schema(child, name, schema)`` is ``json_schema_to_grammar``'s rules for ``schema`` (the
  child alone when there is no schema, or when ``raw`` and the schema allows a string);
* ``raw(child, text)`` is the GBNF text ``text`` in place of ``child``;
* ``Rules.rule`` names a rule; a lazy grammar's root is its trigger rules, a whole one's root
  the reply format itself. Only rules reachable from there are written.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..schema_bounds import (
    MAX_SCHEMA_DEPTH,
    RefAnswers,
    pointer_keys,
    schema_path,
    spend,
    too_deep,
)
from .document import (
    AllOfNode,
    AnyNode,
    AnyOfNode,
    ConstNode,
    EnumNode,
    RefNode,
    SchemaNode,
    StringNode,
    read_schema,
)
from .gbnf import class_char, repetition
from .schema import GrammarBuilder, format_literal

__all__ = [
    "Expr",
    "Rules",
    "lit",
    "seq",
    "choice",
    "repeat",
    "optional",
    "zero_or_more",
    "one_or_more",
    "nothing",
    "space",
    "chars",
    "any_char",
    "string_body",
    "until",
    "up_to",
    "schema",
    "raw",
    "tag",
    "may_be_string",
    "up_to_over",
]


class Expr:
    """One grammar expression (immutable; identity names its automaton rules)."""

    def __add__(self, other: Expr | str) -> Expr:
        return seq(self, other)

    def __radd__(self, other: str) -> Expr:
        return seq(other, self)

    def __or__(self, other: Expr | str) -> Expr:
        return choice(self, other)

    def __ror__(self, other: str) -> Expr:
        return choice(other, self)

    def __lshift__(self, other: Expr | str) -> Expr:
        """``a << b``: ``a space b``."""
        return seq(self, space(), other)

    def __rlshift__(self, other: str) -> Expr:
        return seq(other, space(), self)


@dataclass(frozen=True, eq=False)
class _Nothing(Expr):
    pass


@dataclass(frozen=True, eq=False)
class _Lit(Expr):
    text: str


@dataclass(frozen=True, eq=False)
class _Seq(Expr):
    items: tuple[Expr, ...]


@dataclass(frozen=True, eq=False)
class _Choice(Expr):
    items: tuple[Expr, ...]


@dataclass(frozen=True, eq=False)
class _Repeat(Expr):
    item: Expr
    min: int
    max: int  # -1: unbounded


@dataclass(frozen=True, eq=False)
class _Space(Expr):
    pass


@dataclass(frozen=True, eq=False)
class _Chars(Expr):
    pattern: str
    min: int
    max: int


@dataclass(frozen=True, eq=False)
class _Any(Expr):
    pass


@dataclass(frozen=True, eq=False)
class _StringBody(Expr):
    delimiter: str


@dataclass(frozen=True, eq=False)
class _Until(Expr):
    delimiters: tuple[str, ...]
    inclusive: bool


@dataclass(frozen=True, eq=False)
class _Schema(Expr):
    child: Expr
    name: str
    node: SchemaNode | None
    raw: bool


@dataclass(frozen=True, eq=False)
class _Raw(Expr):
    child: Expr
    text: str


@dataclass(frozen=True, eq=False)
class _Tag(Expr):
    child: Expr


@dataclass(frozen=True, eq=False)
class _Ref(Expr):
    name: str


def _expr(item: Expr | str) -> Expr:
    return _Lit(item) if isinstance(item, str) else item


def lit(text: str) -> Expr:
    """The text itself."""
    return _Lit(text)


def seq(*items: Expr | str) -> Expr:
    """The items in order (sequences among them flattened in)."""
    flat: list[Expr] = []
    for item in map(_expr, items):
        flat.extend(item.items if isinstance(item, _Seq) else (item,))
    return _Seq(tuple(flat))


def choice(*items: Expr | str) -> Expr:
    """One of the items (choices among them flattened in); no item: an empty choice to extend
    with ``|``."""
    flat: list[Expr] = []
    for item in map(_expr, items):
        flat.extend(item.items if isinstance(item, _Choice) else (item,))
    return _Choice(tuple(flat))


def repeat(item: Expr | str, lo: int, hi: int) -> Expr:
    """``item`` ``lo`` to ``hi`` times (``hi`` -1: unbounded)."""
    return _Repeat(_expr(item), lo, hi)


def optional(item: Expr | str) -> Expr:
    return repeat(item, 0, 1)


def zero_or_more(item: Expr | str) -> Expr:
    return repeat(item, 0, -1)


def one_or_more(item: Expr | str) -> Expr:
    return repeat(item, 1, -1)


def nothing() -> Expr:
    """Epsilon, a look-ahead, the start or the end of input: no grammar text."""
    return _Nothing()


def space() -> Expr:
    """Whitespace as the grammar allows it (the rule ``space``)."""
    return _Space()


def chars(pattern: str, lo: int = 1, hi: int = -1) -> Expr:
    """A character class (GBNF text, e.g. ``[0-9]``) ``lo`` to ``hi`` times."""
    return _Chars(pattern, lo, hi)


def any_char() -> Expr:
    return _Any()


def string_body(delimiter: str) -> Expr:
    """The inside of a string quoted with ``delimiter``, JSON escapes allowed."""
    return _StringBody(delimiter)


def until(*delimiters: str) -> Expr:
    """Any text that contains none of ``delimiters`` (no delimiter: any text)."""
    return _Until(tuple(delimiters), False)


def up_to(*delimiters: str) -> Expr:
    """Any text up to and including the first of ``delimiters``."""
    if not delimiters:
        raise ValueError("up_to needs at least one delimiter")
    return _Until(tuple(delimiters), True)


def schema(
    child: Expr, name: str, value: Mapping[str, Any] | SchemaNode | None, *, raw: bool = False
) -> Expr:
    """A JSON value matching ``value`` (a schema or a read schema's node); ``child`` stands
    for it when there is no schema, or when ``raw`` and the schema allows a string."""
    node = read_schema(value).root if isinstance(value, Mapping) else value
    return _Schema(child, name, node, raw)


def raw(child: Expr, text: str) -> Expr:
    """The GBNF text ``text`` in place of ``child`` (whose rules are still written)."""
    return _Raw(child, text)


def tag(child: Expr) -> Expr:
    """``child`` as one group: not flattened into an enclosing sequence or choice."""
    return _Tag(child)


def may_be_string(node: SchemaNode) -> bool:
    """Whether a value of this schema may be a JSON string, as llama.cpp's schema says it: a
    string, string const or enum, or a branch that is (``{}`` and a ``$ref`` cycle say no).
    Each ``$ref`` is walked once (``RefAnswers``); a walk deeper than ``MAX_SCHEMA_DEPTH`` is a
    ``RequestError``."""
    return _may_be_string(node, RefAnswers(False), 0)


def _may_be_string(node: SchemaNode, refs: RefAnswers[bool], depth: int) -> bool:
    spend()
    if depth >= MAX_SCHEMA_DEPTH:
        raise too_deep(schema_path("a schema", pointer_keys(refs.within())))
    depth += 1
    if isinstance(node, StringNode):
        return True
    if isinstance(node, ConstNode):
        return isinstance(node.value, str)
    if isinstance(node, EnumNode):
        return any(isinstance(v, str) for v in node.values)
    if isinstance(node, RefNode):
        return refs.follow(
            id(node.target), node.target, node.ref, lambda t: _may_be_string(t, refs, depth)
        )
    if isinstance(node, AnyOfNode):
        return any(_may_be_string(c, refs, depth) for c in node.children)
    if isinstance(node, AllOfNode):
        kept = [c for c in node.children if not isinstance(c, AnyNode)]
        return bool(kept) and all(_may_be_string(c, refs, depth) for c in kept)
    return False


# ------------------------------------------------------------------------------ the rule table

_INVALID_RULE_CHARS = re.compile(r"[^a-zA-Z0-9-]+")


@dataclass
class _Rule:
    body: Expr
    trigger: bool


@dataclass
class Rules:
    """The named rules of one reply grammar (llama.cpp's arena)."""

    rules: dict[str, _Rule] = field(default_factory=dict)

    def rule(self, name: str, body: Expr | str | Callable[[], Expr], trigger: bool = False) -> Expr:
        """A reference to the rule ``name``. Given a function, a rule already named so is
        reused and the function is called only once (so a rule may refer to itself); given an
        expression, the rule is (re)defined."""
        name = _rule_name(name)
        if callable(body) and not isinstance(body, Expr):
            if name in self.rules:
                return _Ref(name)
            self.rules[name] = _Rule(_Nothing(), trigger)
            self.rules[name] = _Rule(body(), trigger)
        else:
            self.rules[name] = _Rule(_expr(body), trigger)
        return _Ref(name)

    def trigger_rule(self, name: str, body: Expr | str | Callable[[], Expr]) -> Expr:
        """A rule a lazy grammar starts with (its root is the trigger rules)."""
        return self.rule(name, body, trigger=True)

    # -- the shared JSON rules (llama.cpp's json() family) -------------------------------------

    def json(self) -> Expr:
        return self.rule(
            "json-value",
            lambda: choice(
                self.json_object(),
                self.json_array(),
                self.json_string(),
                self.json_number(),
                self.json_bool(),
                self.json_null(),
            ),
        )

    def json_object(self) -> Expr:
        def body() -> Expr:
            member = seq(self.json_string(), space(), ":", space(), self.json())
            return _bracketed("{", member, seq(space(), ",", space()), "}")

        return self.rule("json-object", body)

    def json_array(self) -> Expr:
        return self.rule(
            "json-array", lambda: _bracketed("[", self.json(), seq(space(), ",", space()), "]")
        )

    def json_string(self) -> Expr:
        return self.rule("json-string", lambda: seq('"', string_body('"'), '"'))

    def json_number(self) -> Expr:
        def body() -> Expr:
            int_part = choice("0", seq(chars("[1-9]", 1, 1), chars("[0-9]", 0, -1)))
            frac = seq(".", chars("[0-9]"))
            exp = seq(choice("e", "E"), optional(chars("[+-]", 1, 1)), chars("[0-9]"))
            return seq(optional("-"), int_part, optional(frac), optional(exp), nothing())

        return self.rule("json-number", body)

    def json_bool(self) -> Expr:
        return self.rule("json-bool", lambda: choice("true", "false"))

    def json_null(self) -> Expr:
        return self.rule("json-null", lambda: lit("null"))

    def json_member(self, key: str, value: Expr) -> Expr:
        """``"key": value``."""
        return seq(f'"{key}"', space(), ":", space(), value)

    def json_alternatives(self, types: Iterable[str]) -> Expr:
        """The JSON rules for values of the given non-string types, in llama.cpp's order."""
        types = set(types)
        alternatives = choice()
        for kinds, rule in (
            ({"object"}, self.json_object),
            ({"array"}, self.json_array),
            ({"number", "integer"}, self.json_number),
            ({"boolean"}, self.json_bool),
            ({"null"}, self.json_null),
        ):
            if types & kinds:
                alternatives = alternatives | rule()
        return alternatives

    def permute(self, prefix: str, items: Sequence[Expr]) -> Expr:
        """Every item exactly once, in any order (up to 6 items: a rule per subset left;
        more: in the order given)."""
        if not items:
            return nothing()
        if len(items) == 1 or len(items) > 6:
            return seq(*items)
        made: dict[int, Expr] = {}

        def remaining(mask: int) -> Expr:
            if mask == 0:
                return nothing()
            if mask not in made:
                alternatives = choice()
                for i, item in enumerate(items):
                    if mask & (1 << i):
                        alternatives = alternatives | seq(item, remaining(mask & ~(1 << i)))
                made[mask] = self.rule(f"{prefix}-{mask}", alternatives)
            return made[mask]

        return remaining((1 << len(items)) - 1)

    # -- compilation ---------------------------------------------------------------------------

    def gbnf(self, root: Expr, *, lazy: bool) -> str:
        """The GBNF text: from the trigger rules when ``lazy``, else from ``root``.
        ``GrammarError`` when a schema cannot be converted."""
        return _Compiler(self).compile(root, lazy)

    # -- Python values (llama.cpp's python_value family; LFM2's calls) ------------------------

    def double_quoted_string(self) -> Expr:
        return self.rule("double-quoted-string", lambda: seq('"', string_body('"'), '"'))

    def single_quoted_string(self) -> Expr:
        return self.rule("single-quoted-string", lambda: seq("'", string_body("'"), "'"))

    def python_string(self) -> Expr:
        return self.rule(
            "python-string",
            lambda: choice(self.double_quoted_string(), self.single_quoted_string()),
        )

    def python_number(self) -> Expr:
        return self.json_number()

    def python_bool(self) -> Expr:
        return self.rule("python-bool", lambda: choice("True", "False"))

    def python_null(self) -> Expr:
        return self.rule("python-none", lambda: lit("None"))

    def python_dict(self) -> Expr:
        return self.rule("python-dict", lambda: self._python_dict_body(self.python_value()))

    def python_array(self) -> Expr:
        return self.rule("python-array", lambda: self._python_array_body(self.python_value()))

    def python_value(self) -> Expr:
        return self.rule(
            "python-value",
            lambda: choice(
                self.python_dict(),
                self.python_array(),
                self.python_string(),
                self.python_number(),
                self.python_bool(),
                self.python_null(),
            ),
        )

    def python_or_json_value(self) -> Expr:
        """A Python value whose leaves may also be JSON's ``true``/``false``/``null``."""

        def body() -> Expr:
            value = self.python_or_json_value()
            return choice(
                self.rule("python-or-json-dict", lambda: self._python_dict_body(value)),
                self.rule("python-or-json-array", lambda: self._python_array_body(value)),
                self.python_string(),
                self.python_number(),
                self.python_bool(),
                self.python_null(),
                self.json_bool(),
                self.json_null(),
            )

        return self.rule("python-or-json-value", body)

    def _python_dict_body(self, value: Expr) -> Expr:
        member = seq(self.python_string(), space(), ":", space(), value)
        return seq(_bracketed("{", member, seq(space(), ",", space()), "}"), space())

    def _python_array_body(self, value: Expr) -> Expr:
        return seq(_bracketed("[", value, seq(",", space()), "]"), space())


def _bracketed(opening: str, item: Expr, separator: Expr, closing: str) -> Expr:
    """``opening``, then nothing or ``item``s split by ``separator``, then ``closing``; space
    allowed inside the brackets."""
    items = seq(item, zero_or_more(seq(separator, item)))
    return seq(opening, space(), choice(closing, seq(items, space(), closing)))


def _rule_name(name: str) -> str:
    return _INVALID_RULE_CHARS.sub("-", name)


class _Compiler:
    def __init__(self, rules: Rules) -> None:
        self.rules = rules
        self.builder = GrammarBuilder()
        self.names: dict[int, str] = {}

    # llama.cpp names an automaton after its parser's id; any unique number does
    def _automaton_name(self, expr: _Until) -> str:
        name = self.names.get(id(expr))
        if name is None:
            name = f"{'ac' if expr.inclusive else 'until'}-{len(self.names) + 1}"
            self.names[id(expr)] = name
        return name

    def compile(self, root: Expr, lazy: bool) -> str:
        table = self.rules.rules
        if lazy:
            triggers = sorted(name for name, r in table.items() if r.trigger)
            reachable: set[str] = set()
            for name in triggers:
                reachable.add(name)
                self._reach(table[name].body, reachable)
        else:
            reachable = set()
            self._reach(root, reachable)
        for name in sorted(table):
            if name in reachable:
                self.builder.add_rule(name, self.text(table[name].body))
        if lazy:
            self.builder.add_rule("root", " | ".join(triggers))
        else:
            self.builder.add_rule("root", self.text(root))
        return self.builder.grammar()

    def _reach(self, expr: Expr, seen: set[str]) -> None:
        stack = [expr]
        while stack:
            e = stack.pop()
            if isinstance(e, (_Seq, _Choice)):
                stack.extend(e.items)
            elif isinstance(e, _Repeat):
                stack.append(e.item)
            elif isinstance(e, (_Schema, _Raw, _Tag, _UpToOver)):
                stack.append(e.child)
            elif isinstance(e, _Ref) and e.name not in seen:
                seen.add(e.name)
                stack.append(self.rules.rules[e.name].body)

    def _effective(self, expr: Expr) -> Expr:
        while True:
            if isinstance(expr, _Tag):
                expr = expr.child
            elif isinstance(expr, _Schema) and _delegates(expr):
                expr = expr.child
            else:
                return expr

    def _grouped(self, expr: Expr, kinds: tuple[type, ...]) -> str:
        text = self.text(expr)
        return f"({text})" if isinstance(self._effective(expr), kinds) else text

    def text(self, expr: Expr) -> str:
        if isinstance(expr, _Lit):
            return format_literal(expr.text)
        if isinstance(expr, _Seq):
            parts = (self._grouped(item, (_Seq, _Choice)) for item in expr.items)
            return " ".join(p for p in parts if p not in ("", "()"))
        if isinstance(expr, _Choice):
            return " | ".join(self._grouped(item, (_Choice,)) for item in expr.items)
        if isinstance(expr, _Repeat):
            return self._grouped(expr.item, (_Seq, _Choice)) + _count(expr.min, expr.max)
        if isinstance(expr, _Chars):
            return expr.pattern + _count(expr.min, expr.max)
        if isinstance(expr, _Space):
            return "space"
        if isinstance(expr, _Any):
            return "."
        if isinstance(expr, _StringBody):
            d = expr.delimiter
            return f'( [^{d}\\\\] | "\\\\" ( [{d}\\\\/ bfnrt] | "u" [0-9a-fA-F]{{4}} ) )*'
        if isinstance(expr, _Until):
            if not expr.delimiters:
                return ".*"
            return _automaton(self.builder, self._automaton_name(expr), expr)
        if isinstance(expr, _Schema):
            if _delegates(expr):
                return self.text(expr.child)
            assert expr.node is not None
            return self.builder.add_schema(expr.name, expr.node)
        if isinstance(expr, _Raw):
            return expr.text
        if isinstance(expr, _Tag):
            return self.text(expr.child)
        if isinstance(expr, _Ref):
            return expr.name
        return ""  # nothing


def _delegates(expr: _Schema) -> bool:
    return expr.node is None or (expr.raw and may_be_string(expr.node))


def _count(lo: int, hi: int) -> str:
    return "" if (lo, hi) == (1, 1) else repetition(lo, hi)


# ----------------------------------------------------------------- Aho-Corasick automata as rules


class _Automaton:
    """llama.cpp's Aho-Corasick automaton over code points (trie states in insertion order)."""

    def __init__(self, words: Iterable[str]) -> None:
        self.children: list[dict[int, int]] = [{}]
        pattern: list[bool] = [False]
        for word in words:
            node = 0
            for ch in map(ord, word):
                nxt = self.children[node].get(ch)
                if nxt is None:
                    nxt = len(self.children)
                    self.children[node][ch] = nxt
                    self.children.append({})
                    pattern.append(False)
                node = nxt
            pattern[node] = True
        n = len(self.children)
        self.fail = [0] * n
        order = [0]  # breadth first: each state is appended when it is reached
        for u in order:
            for ch, v in sorted(self.children[u].items()):
                if u != 0:
                    f = self.fail[u]
                    while f and ch not in self.children[f]:
                        f = self.fail[f]
                    target = self.children[f].get(ch)
                    self.fail[v] = target if target is not None and target != v else 0
                order.append(v)
        self.terminal = [False] * n
        for u in order:
            self.terminal[u] = pattern[u] or (u != 0 and self.terminal[self.fail[u]])
        self.alphabet = sorted({ch for c in self.children for ch in c})

    def next(self, state: int, ch: int) -> int:
        while state and ch not in self.children[state]:
            state = self.fail[state]
        return self.children[state].get(ch, 0)


def _char_class(chars: Sequence[int], negate: bool) -> str:
    return ("[^" if negate else "[") + "".join(class_char(c, "-][\\") for c in chars) + "]"


def _automaton(builder: GrammarBuilder, prefix: str, expr: _Until) -> str:
    ac = _Automaton(expr.delimiters)

    def state(s: int) -> str:
        return prefix if s == 0 else f"{prefix}-{s:02d}"

    for q in range(len(ac.children)):
        if ac.terminal[q]:
            continue
        buckets: dict[int, list[int]] = {}
        completing: list[int] = []
        specific: list[int] = []
        for c in ac.alphabet:
            d = ac.next(q, c)
            if ac.terminal[d]:
                completing.append(c)
                specific.append(c)
            elif d != 0:
                buckets.setdefault(d, []).append(c)
                specific.append(c)
        moves = [f"{_char_class(cs, False)} {state(d)}" for d, cs in sorted(buckets.items())]
        rest = f"{_char_class(specific, True)} {state(0)}"
        if expr.inclusive:
            alts = ([_char_class(completing, False)] if completing else []) + moves + [rest]
            body = " | ".join(alts)
        else:
            body = "|" + "".join(f" {m} |" for m in moves) + f" {rest}"
        builder.add_rule(state(q), body)
    if ac.terminal[0]:
        builder.add_rule(prefix, "|")
    return state(0)


# ----------------------------------------------------------- an automaton standing for a parser


@dataclass(frozen=True, eq=False)
class _UpToOver(_Until):
    child: Expr


def up_to_over(child: Expr, *delimiters: str) -> Expr:
    """``up_to(delimiters)`` standing for ``child`` (llama.cpp's ``ac(child, delimiters)``):
    the text is the automaton's, but the rules ``child`` refers to are still written."""
    if not delimiters:
        raise ValueError("up_to_over needs at least one delimiter")
    return _UpToOver(tuple(delimiters), True, child)
