"""JSON schema -> GBNF, rule for rule as llama.cpp writes it.

Every grammar llama.cpp makes for a request is built with one converter object
(common/json-schema-to-grammar.cpp): the reply format adds its own rules and each tool's
parameters (or each argument, or the ``response_format`` schema) are added as schemas, all into
one table of rules, printed sorted by name. ``GrammarBuilder`` is that object:

- ``add_rule(name, body)`` stores a rule under ``name`` with every run of characters other than
  ``[a-zA-Z0-9-]`` replaced by ``-``; a name already holding a different body gets the first
  free ``name0``, ``name1``, ... The name actually used is returned.
- ``add_schema(name, schema)`` adds the rules of a schema and returns the name (or the
  primitive, such as ``string``) that matches it; ``"root"`` names the grammar's root.
- ``grammar()`` is the text: ``name ::= body`` lines sorted by name (``space`` is always there).

``json_schema_to_gbnf(schema)`` is llama.cpp's ``json_schema_to_grammar(schema)`` (the
``response_format`` grammar and the ``--json-schema`` one); ``format_literal`` is
``gbnf_format_literal``.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import GrammarError, GrammarWarning
from ..schema_bounds import spend
from .document import (
    INT64_MAX,
    INT64_MIN,
    AllOfNode,
    AnyNode,
    AnyOfNode,
    ArrayNode,
    BooleanNode,
    ConstNode,
    EnumNode,
    IntegerNode,
    NullNode,
    NumberNode,
    ObjectNode,
    RefNode,
    SchemaNode,
    StringNode,
    TupleNode,
    dump_json,
    read_schema,
)
from .numbers import INT_MAX, integer_range, repetition
from .pattern import InvalidPattern, UnsupportedPattern, pattern_to_rule

__all__ = ["GrammarBuilder", "json_schema_to_gbnf", "format_literal", "SPACE_RULE"]

SPACE_RULE = '| " " | "\\n"{1,2} [ \\t]{0,20}'

# name -> (body, rules it refers to); llama.cpp adds a dependency only when it is missing
_PRIMITIVES: dict[str, tuple[str, tuple[str, ...]]] = {
    "boolean": ('("true" | "false")', ()),
    "decimal-part": ("[0-9]{1,16}", ()),
    "integral-part": ("[0] | [1-9] [0-9]{0,15}", ()),
    "number": (
        '("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)?',
        ("integral-part", "decimal-part"),
    ),
    "integer": ('("-"? integral-part)', ("integral-part",)),
    "value": (
        "object | array | string | number | boolean | null",
        ("object", "array", "string", "number", "boolean", "null"),
    ),
    "object": (
        '"{" space ( string ":" space value ("," space string ":" space value)* )? space "}"',
        ("string", "value"),
    ),
    "array": ('"[" space ( value ("," space value)* )? space "]"', ("value",)),
    "uuid": (
        '"\\"" [0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} '
        '"-" [0-9a-fA-F]{12} "\\""',
        (),
    ),
    "char": ('[^"\\\\\\x7F\\x00-\\x1F] | [\\\\] (["\\\\bfnrt] | "u" [0-9a-fA-F]{4})', ()),
    "string": ('"\\"" char* "\\""', ("char",)),
    "null": ('"null"', ()),
    # string formats
    "date": (
        '[0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | [1-2] [0-9] | "3" [0-1] )',
        (),
    ),
    "time": (
        '([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{3} )? '
        '( "Z" | ( "+" | "-" ) ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] )',
        (),
    ),
    "date-time": ('date "T" time', ("date", "time")),
    "date-string": ('"\\"" date "\\""', ("date",)),
    "time-string": ('"\\"" time "\\""', ("time",)),
    "date-time-string": ('"\\"" date-time "\\""', ("date-time",)),
}

_RESERVED = frozenset(_PRIMITIVES) | {"root"}
# llama.cpp recurses until its stack overflows (a crash) where Python stops with RecursionError
_TOO_DEEP = "JSON schema conversion failed:\nthe schema nests too deeply"
_INVALID_RULE_CHARS = re.compile(r"[^a-zA-Z0-9-]+")
_LITERAL_ESCAPES = {"\r": "\\r", "\n": "\\n", '"': '\\"', "\\": "\\\\"}
_LITERAL_ESCAPE = re.compile(r'[\r\n"\\]')


def format_literal(literal: str) -> str:
    """``literal`` as a GBNF string literal (llama.cpp's ``gbnf_format_literal``): quoted, with
    only ``\\r``, ``\\n``, ``"`` and ``\\`` escaped."""
    return '"' + _LITERAL_ESCAPE.sub(lambda m: _LITERAL_ESCAPES[m.group()], literal) + '"'


def _from_bytes(text: str) -> str:
    """Text the pattern translator built from UTF-8 bytes (one char per byte) back as text."""
    return text.encode("latin-1").decode("utf-8", errors="replace")


def _joined(name: str, suffix: str) -> str:
    return f"{name}-{suffix}" if name else suffix


class _Trie:
    """Code-point trie, children in code-point order (llama.cpp's common_trie)."""

    def __init__(self, words: Iterable[str]) -> None:
        self.children: list[dict[str, int]] = [{}]
        self.ends: list[bool] = [False]
        for word in words:
            node = 0
            for ch in word:
                child = self.children[node].get(ch)
                if child is None:
                    child = len(self.children)
                    self.children[node][ch] = child
                    self.children.append({})
                    self.ends.append(False)
                node = child
            self.ends[node] = True


class GrammarBuilder:
    """llama.cpp's grammar builder: a table of GBNF rules that schemas and rules are added to.

    ``dotall=True`` lets ``.`` in a ``pattern`` match line breaks too (llama.cpp's
    ``common_grammar_options.dotall``). Not thread-safe; one builder per grammar.
    """

    def __init__(self, *, dotall: bool = False) -> None:
        self.dotall = dotall
        self.rules: dict[str, str] = {"space": SPACE_RULE}
        self.errors: list[str] = []
        self.warnings: list[str] = []
        self._refs_in_progress: set[str] = set()

    # -- the builder interface -----------------------------------------------------------------

    def add_rule(self, name: str, body: str) -> str:
        """Store ``body`` under ``name`` (sanitised, renamed on a clash); the name used."""
        spend()  # a rule costs about what a visit does: both count (schema_bounds)
        name = _INVALID_RULE_CHARS.sub("-", name)
        if self.rules.get(name, body) == body:
            self.rules[name] = body
            return name
        i = 0
        while f"{name}{i}" in self.rules and self.rules[f"{name}{i}"] != body:
            i += 1
        key = f"{name}{i}"
        self.rules[key] = body
        return key

    def add_schema(self, name: str, schema: Mapping[str, Any] | SchemaNode) -> str:
        """Add the rules matching ``schema`` (a JSON schema, or a node of a read document);
        the rule (or primitive) name that matches it. ``GrammarError`` for a schema llama.cpp
        cannot read (the builder is then not to be used further)."""
        node = read_schema(schema).root if isinstance(schema, Mapping) else schema
        try:
            return self.visit(node, "" if name == "root" else name)
        except RecursionError:
            raise GrammarError(_TOO_DEEP) from None

    def grammar(self) -> str:
        """The grammar text; ``GrammarError`` if a schema could not be converted."""
        if self.errors:
            raise GrammarError("JSON schema conversion failed:\n" + "\n".join(self.errors))
        return "".join(f"{name} ::= {self.rules[name]}\n" for name in sorted(self.rules))

    # -- schemas -------------------------------------------------------------------------------

    def visit(self, node: SchemaNode, name: str) -> str:
        """Add the rules of ``node`` under ``name`` ("" for the root); the name matching it."""
        spend()
        if name in _RESERVED:
            rule_name = name + "-"
        else:
            rule_name = name or "root"
        if isinstance(node, RefNode):
            return self.add_rule(rule_name, self._ref(node))
        if isinstance(node, AnyOfNode):
            alternatives = (
                self.visit(alt, f"{name}-{i}" if name else f"alternative-{i}")
                for i, alt in enumerate(node.children)
            )
            return self.add_rule(rule_name, " | ".join(alternatives))
        if isinstance(node, AllOfNode):
            return self._all_of(node, name, rule_name)
        if isinstance(node, ConstNode):
            return self.add_rule(rule_name, format_literal(dump_json(node.value)))
        if isinstance(node, EnumNode):
            spend(len(node.values))
            values = " | ".join(format_literal(dump_json(v)) for v in node.values)
            return self.add_rule(rule_name, f"({values})")
        if isinstance(node, ObjectNode):
            if not node.properties and isinstance(node.additional, AnyNode):
                return self.add_rule(rule_name, self._primitive("object"))
            properties = [(p.name, p.schema) for p in node.properties]
            required = {p.name for p in node.properties if p.required}
            body = self._object(properties, required, name, node.additional)
            return self.add_rule(rule_name, body)
        if isinstance(node, TupleNode):
            items = ' "," space '.join(
                self.visit(item, f"{_joined(name, 'tuple')}-{i}")
                for i, item in enumerate(node.items)
            )
            return self.add_rule(rule_name, f'"[" space {items} space "]"')
        if isinstance(node, ArrayNode):
            return self._array(node, name, rule_name)
        if isinstance(node, StringNode):
            return self._string(node, rule_name)
        if isinstance(node, IntegerNode):
            if node.minimum == INT64_MIN and node.maximum == INT64_MAX:
                return self._primitive("root" if rule_name == "root" else "integer", "integer")
            try:
                body = integer_range(node.minimum, node.maximum)
            except ValueError as exc:
                raise GrammarError(f"JSON schema conversion failed:\n{exc}") from None
            return self.add_rule(rule_name, f"({body})")
        if isinstance(node, (NumberNode, BooleanNode, NullNode)):
            kind = {NumberNode: "number", BooleanNode: "boolean", NullNode: "null"}[type(node)]
            return self._primitive("root" if rule_name == "root" else kind, kind)
        return self.add_rule(rule_name, self._primitive("value"))  # AnyNode

    def _primitive(self, name: str, kind: str | None = None) -> str:
        """Add the built-in rule ``kind`` (default ``name``) under ``name``, and the built-ins
        it refers to that are not there yet."""
        body, deps = _PRIMITIVES[kind or name]
        added = self.add_rule(name, body)
        for dep in deps:
            if dep not in self.rules:
                self._primitive(dep)
        return added

    def _ref(self, node: RefNode) -> str:
        fragment = node.ref.partition("#")[2] if "#" in node.ref else node.ref
        ref_name = "ref" + _INVALID_RULE_CHARS.sub("-", fragment)
        # a rule of that name already there is reused, even one another document made
        if ref_name not in self.rules and node.ref not in self._refs_in_progress:
            if node.target is None:
                self.errors.append(f"Unresolved $ref {node.ref}")
                return ""
            self._refs_in_progress.add(node.ref)
            ref_name = self.visit(node.target, ref_name)
            self._refs_in_progress.discard(node.ref)
        return ref_name

    def _all_of(self, node: AllOfNode, name: str, rule_name: str) -> str:
        properties: list[tuple[str, SchemaNode]] = []
        required: set[str] = set()
        enum_counts: dict[str, int] = {}

        def add_component(component: SchemaNode, is_required: bool) -> None:
            chain: set[str] = set()
            while isinstance(component, RefNode) and component.target is not None:
                if component.ref in chain:
                    # llama.cpp follows such a cycle until its stack overflows (a crash)
                    raise GrammarError(
                        f"JSON schema conversion failed:\n$ref {component.ref} in allOf "
                        "refers only to itself"
                    )
                chain.add(component.ref)
                component = component.target
            if isinstance(component, RefNode):
                return
            if isinstance(component, ObjectNode):
                spend(len(component.properties))
                for prop in component.properties:
                    properties.append((prop.name, prop.schema))
                    if is_required:
                        required.add(prop.name)
            elif isinstance(component, EnumNode):
                spend(len(component.values))
                for value in component.values:
                    literal = format_literal(dump_json(value))
                    enum_counts[literal] = enum_counts.get(literal, 0) + 1

        for child in node.children:
            if isinstance(child, AnyOfNode):
                for alt in child.children:
                    add_component(alt, False)
            else:
                add_component(child, True)
        # the values every branch lists (the count is per listing, as in llama.cpp)
        common = [v for v in sorted(enum_counts) if enum_counts[v] == len(node.children)]
        if common:
            return self.add_rule(rule_name, "(" + " | ".join(common) + ")")
        return self.add_rule(rule_name, self._object(properties, required, name, None))

    def _array(self, node: ArrayNode, name: str, rule_name: str) -> str:
        if isinstance(node.items, AnyNode) and node.min_items == 0 and node.max_items < 0:
            return self._primitive("root" if rule_name == "root" else "array", "array")
        item = self.visit(node.items, _joined(name, "item"))
        max_items = INT_MAX if node.max_items < 0 else node.max_items
        items = repetition(item, node.min_items, max_items, '"," space')
        return self.add_rule(rule_name, f'"[" space {items} space "]"')

    def _string(self, node: StringNode, rule_name: str) -> str:
        if node.pattern:
            return self._pattern(node.pattern, rule_name)
        if node.format == "uuid":
            return self._primitive("root" if rule_name == "root" else "uuid", "uuid")
        if node.format:
            return self.add_rule(rule_name, self._primitive(node.format + "-string"))
        if node.min_length > 0 or node.max_length >= 0:
            char = self._primitive("char")
            max_length = INT_MAX if node.max_length < 0 else node.max_length
            chars = repetition(char, node.min_length, max_length)
            return self.add_rule(rule_name, f'"\\"" {chars} "\\""')
        return self._primitive("root" if rule_name == "root" else "string", "string")

    def _pattern(self, pattern: str, rule_name: str) -> str:
        snapshot = dict(self.rules)
        raw = pattern.encode("utf-8", errors="surrogatepass").decode("latin-1")
        try:
            return pattern_to_rule(
                raw, rule_name, lambda n, b: self.add_rule(n, _from_bytes(b)), self.dotall
            )
        except UnsupportedPattern as exc:
            self.rules = snapshot
            reason = _from_bytes(str(exc))
            self.warnings.append(
                f"pattern {pattern} is not supported ({reason}), accepting any string"
            )
            return self.add_rule(rule_name, self._primitive("string"))
        except InvalidPattern as exc:
            self.rules = snapshot
            self.errors.append(f"Invalid pattern {pattern}: {_from_bytes(str(exc))}")
            return ""

    def _object(
        self,
        properties: list[tuple[str, SchemaNode]],
        required: set[str],
        name: str,
        additional: SchemaNode | None,
    ) -> str:
        """The body of an object rule: required members in order, then the optional ones,
        each optional one able to start the rest (llama.cpp's ``-kv`` / ``-rest`` chains)."""
        required_names: list[str] = []
        optional_names: list[str] = []
        kv_rules: dict[str, str] = {}
        names: list[str] = []
        for prop_name, prop_schema in properties:
            value_rule = self.visit(prop_schema, _joined(name, prop_name))
            kv_rules[prop_name] = self.add_rule(
                _joined(name, prop_name + "-kv"),
                f'{format_literal(dump_json(prop_name))} space ":" space {value_rule}',
            )
            (required_names if prop_name in required else optional_names).append(prop_name)
            names.append(prop_name)
        if additional is not None:
            sub_name = _joined(name, "additional")
            if isinstance(additional, AnyNode):
                value_rule = self._primitive("value")
            else:
                value_rule = self.visit(additional, sub_name + "-value")
            if names:
                key_rule = self.add_rule(sub_name + "-k", self._not_strings(names))
            else:
                key_rule = self._primitive("string")
            kv_rules["*"] = self.add_rule(sub_name + "-kv", f'{key_rule} ":" space {value_rule}')
            optional_names.append("*")
        if not required_names and not optional_names:
            return '"{" space "}"'
        rule = '"{" space ' + ' "," space '.join(kv_rules[k] for k in required_names)
        if optional_names:
            rule += " ("
            if required_names:
                rule += ' "," space ( '
            rule += " | ".join(
                self._rest_chain(optional_names[i:], False, name, kv_rules)
                for i in range(len(optional_names))
            )
            if required_names:
                rule += " )"
            rule += " )?"
        return rule + ' space "}"'

    def _rest_chain(
        self, keys: list[str], first_is_optional: bool, name: str, kv_rules: dict[str, str]
    ) -> str:
        if not keys:
            return ""
        key = keys[0]
        kv = kv_rules[key]
        comma_kv = f'( "," space {kv} )'
        if first_is_optional:
            out = comma_kv + ("*" if key == "*" else "?")
        else:
            out = kv + (f" {comma_kv}*" if key == "*" else "")
        if len(keys) > 1:
            rest = self._rest_chain(keys[1:], True, name, kv_rules)
            out += " " + self.add_rule(_joined(name, key + "-rest"), rest)
        return out

    def _not_strings(self, strings: list[str]) -> str:
        """A JSON string that is none of ``strings`` (the keys an ``additionalProperties``
        member may not take), through a trie of them."""
        trie = _Trie(strings)
        char = self._primitive("char")
        out = ['["] ( ']

        def visit(node: int) -> None:
            children = trie.children[node]
            for i, ch in enumerate(sorted(children)):
                child = children[ch]
                if i:
                    out.append(" | ")
                out.append(f"[{ch}]")
                if trie.children[child]:
                    out.append(" (")
                    visit(child)
                    out.append(")")
                else:
                    out.append(f" {char}+")
            if children:
                out.append(f' | [^"{"".join(sorted(children))}] {char}*')

        visit(0)
        out.append(" )")
        if not trie.ends[0]:
            out.append("?")
        out.append(' ["]')
        return "".join(out)


def json_schema_to_gbnf(schema: Mapping[str, Any]) -> str:
    """The GBNF grammar llama.cpp's ``json_schema_to_grammar(schema)`` makes (the
    ``response_format`` / ``--json-schema`` grammar), byte for byte.

    ``GrammarError`` where llama.cpp throws (its message, e.g. ``JSON schema conversion
    failed:\\nJSON schema error at #: unrecognized type foo``); a ``GrammarWarning`` where it
    warns (a ``pattern`` it cannot translate, which then accepts any string).
    """
    try:
        document = read_schema(schema)
        builder = GrammarBuilder()
        builder.visit(document.root, "")
        text = builder.grammar()
    except GrammarError as exc:
        message = str(exc)
        if not message.startswith("JSON schema conversion failed:\n"):
            message = "JSON schema conversion failed:\n" + message
        raise GrammarError(message) from None
    except RecursionError:
        raise GrammarError(_TOO_DEEP) from None
    if builder.warnings:
        warnings.warn(
            "JSON schema conversion was incomplete: " + "; ".join(builder.warnings),
            GrammarWarning,
            stacklevel=2,
        )
    return text
