"""JSON schema -> GBNF, compared with llama.cpp's own converter.

- the schema rules inside every grammar llama.cpp made for the parse corpus (../shared) are
  the rules chatcodec's builder makes for the same tool schemas under the same names;
- tests/data/schema_gbnf.jsonl is llama.cpp's answer (grammar text, error or warning) for
  each schema of dev/schema_gbnf/schemas.jsonl, recorded by dev/schema_gbnf/compare.py
  --write; every answer is reproduced exactly;
- the errors, the warnings and what a grammar cannot enforce, stated one by one.
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chatcodec import ChatCodecError, GrammarError, GrammarWarning
from chatcodec.grammar import (
    GrammarBuilder,
    SchemaDocument,
    dump_json,
    format_literal,
    json_schema_to_gbnf,
    read_schema,
)
from chatcodec.grammar.document import AnyOfNode, ArrayNode, ObjectNode, SchemaNode

from ._reply_oracle import corpus_cases

RECORDED = Path(__file__).parent / "data" / "schema_gbnf.jsonl"
# what an untranslatable pattern becomes: any string, the root naming the string rule
PATTERN_FALLBACK = "".join(
    line + "\n"
    for line in [
        'char ::= [^"\\\\\\x7F\\x00-\\x1F] | [\\\\] (["\\\\bfnrt] | "u" [0-9a-fA-F]{4})',
        "root ::= string",
        'space ::= | " " | "\\n"{1,2} [ \\t]{0,20}',
        'string ::= "\\"" char* "\\""',
    ]
)


def gbnf(schema: Any) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", GrammarWarning)
        return json_schema_to_gbnf(schema)


# ------------------------------------------------------------------ (a) the parse corpus


def _named_nodes(prefix: str, node: SchemaNode) -> Iterator[tuple[str, SchemaNode]]:
    """(rule name, node) for ``node`` and what a reply format may add as its own schema:
    members of objects, alternatives of an anyOf, items of an array."""
    yield prefix, node
    if isinstance(node, ObjectNode):
        for prop in node.properties:
            yield from _named_nodes(f"{prefix}-{prop.name}", prop.schema)
    elif isinstance(node, AnyOfNode):
        for i, alt in enumerate(node.children):
            yield from _named_nodes(f"{prefix}-{i}", alt)
    elif isinstance(node, ArrayNode):
        yield from _named_nodes(f"{prefix}-item", node.items)


def _schema_candidates(tools: list[dict[str, Any]]) -> dict[str, tuple[str, SchemaNode]]:
    """Sanitised rule name -> (name given to add_schema, node), for the names llama.cpp's
    families give tool schemas: ``tool-NAME-schema`` (the whole parameters),
    ``tool-NAME-arg-PATH-schema`` and ``ling3-arg-NAME-PATH-schema`` (one argument)."""
    out: dict[str, tuple[str, SchemaNode]] = {}
    for tool in tools:
        name = tool["function"]["name"]
        document = read_schema(tool["function"]["parameters"])
        out[f"tool-{name}-schema"] = (f"tool-{name}-schema", document.root)
        if isinstance(document.root, ObjectNode):
            for prop in document.root.properties:
                for prefix in (f"tool-{name}-arg-{prop.name}", f"ling3-arg-{name}-{prop.name}"):
                    for path, node in _named_nodes(prefix, prop.schema):
                        out[f"{path}-schema"] = (f"{path}-schema", node)
    return {re.sub(r"[^a-zA-Z0-9-]+", "-", k): v for k, v in out.items()}


def _grammar_cases() -> list[dict[str, Any]]:
    seen: set[str] = set()
    cases = []
    for case in corpus_cases():
        grammar = (case["llama_cpp"] or {}).get("grammar")
        if not grammar or not case["tools"]:
            continue
        key = grammar + json.dumps(case["tools"])
        if key not in seen:
            seen.add(key)
            cases.append(case)
    return cases


def test_tool_schema_rules_are_llama_cpps() -> None:
    checked: dict[str, int] = {}
    for case in _grammar_cases():
        lines = set(case["llama_cpp"]["grammar"].splitlines())
        candidates = _schema_candidates(case["tools"])
        schema_rules = re.findall(r"^(\S+-schema) ::=", case["llama_cpp"]["grammar"], re.M)
        for rule in schema_rules:
            assert rule in candidates, (case["id"], rule)  # every schema rule is accounted for
            name, node = candidates[rule]
            builder = GrammarBuilder()
            assert builder.add_schema(name, node) == rule
            missing = [line for line in builder.grammar().splitlines() if line not in lines]
            assert not missing, (case["id"], rule, missing)
        if schema_rules:  # Kimi K3, LFM2, ... spell arguments out without a schema rule
            handler = case["llama_cpp"]["handler"]
            checked[handler] = checked.get(handler, 0) + len(schema_rules)
    # every family that embeds tool schemas was seen (13 of llama.cpp's reply formats)
    assert {"autoparser", "Qwen3-Coder", "GPT-OSS", "Ling 3.0 (Bailing V3)", "MiniMax-M3"} <= set(
        checked
    )
    assert len(checked) == 13


# ------------------------------------------------------------------ (b) recorded answers


def _recorded() -> list[dict[str, Any]]:
    with RECORDED.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _run(record: dict[str, Any]) -> dict[str, Any]:
    """chatcodec's answer in the shape compare.py records llama.cpp's."""
    out: dict[str, Any] = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            if "steps" in record:
                builder = GrammarBuilder(dotall=record.get("dotall", False))
                names = [
                    builder.add_rule(*step["rule"])
                    if "rule" in step
                    else builder.add_schema(*step["schema"])
                    for step in record["steps"]
                ]
                out = {"grammar": builder.grammar(), "names": names}
                if builder.warnings:
                    text = "; ".join(builder.warnings)
                    out["warnings"] = "JSON schema conversion was incomplete: " + text
            else:
                out = {"grammar": json_schema_to_gbnf(record["schema"])}
        except GrammarError as exc:
            out = {"error": str(exc)}
    if caught:
        out["warnings"] = "; ".join(str(w.message) for w in caught)
    return out


@pytest.mark.parametrize("record", _recorded(), ids=lambda r: r["name"])
def test_recorded_llama_cpp_answer(record: dict[str, Any]) -> None:
    expected = {k: record[k] for k in ("grammar", "names", "error", "warnings") if k in record}
    assert _run(record) == expected


def test_recorded_corpus_covers_every_outcome() -> None:
    records = _recorded()
    assert len(records) >= 150
    assert sum("error" in r for r in records) >= 40
    assert sum("warnings" in r for r in records) >= 15
    assert sum("steps" in r for r in records) >= 10


# ------------------------------------------------------------------ the builder


def test_add_rule_renames_a_clash_and_reuses_an_equal_rule() -> None:
    builder = GrammarBuilder()
    assert builder.add_rule("tool-get_weather", '"a"') == "tool-get-weather"
    assert builder.add_rule("tool get weather", '"b"') == "tool-get-weather0"
    assert builder.add_rule("tool-get-weather", '"a"') == "tool-get-weather"
    assert builder.add_rule("tool-get-weather", '"c"') == "tool-get-weather1"
    assert builder.add_rule("tool-get-weather", '"b"') == "tool-get-weather0"
    assert builder.grammar().splitlines() == [
        'space ::= | " " | "\\n"{1,2} [ \\t]{0,20}',
        'tool-get-weather ::= "a"',
        'tool-get-weather0 ::= "b"',
        'tool-get-weather1 ::= "c"',
    ]


def test_add_schema_under_root_and_under_a_name() -> None:
    builder = GrammarBuilder()
    assert builder.add_schema("tool-f-schema", {"type": "string"}) == "string"  # a primitive
    assert builder.add_schema("tool-f-schema", {"enum": [1, 2]}) == "tool-f-schema"
    assert builder.add_schema("root", {"type": "boolean"}) == "root"
    assert 'root ::= ("true" | "false")' in builder.grammar().splitlines()


def test_add_schema_takes_a_node_of_a_read_document() -> None:
    params = {
        "type": "object",
        "properties": {"when": {"$ref": "#/$defs/day"}},
        "$defs": {"day": {"type": "string", "format": "date"}},
    }
    document = read_schema(params)
    assert isinstance(document, SchemaDocument) and isinstance(document.root, ObjectNode)
    builder = GrammarBuilder()
    name = builder.add_schema("tool-f-arg-when-schema", document.root.properties[0].schema)
    assert name == "tool-f-arg-when-schema"
    rules = builder.grammar()
    assert "tool-f-arg-when-schema ::= ref-defs-day\n" in rules
    assert "ref-defs-day ::= date-string\n" in rules


def test_json_schema_to_gbnf_of_a_tool_schema() -> None:
    grammar = json_schema_to_gbnf(
        {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
            "required": ["city"],
        }
    )
    assert grammar.splitlines() == [
        'char ::= [^"\\\\\\x7F\\x00-\\x1F] | [\\\\] (["\\\\bfnrt] | "u" [0-9a-fA-F]{4})',
        'city-kv ::= "\\"city\\"" space ":" space string',
        'root ::= "{" space city-kv ( "," space ( unit-kv ) )? space "}"',
        'space ::= | " " | "\\n"{1,2} [ \\t]{0,20}',
        'string ::= "\\"" char* "\\""',
        'unit ::= ("\\"c\\"" | "\\"f\\"")',
        'unit-kv ::= "\\"unit\\"" space ":" space unit',
    ]


def test_format_literal_escapes_only_what_gbnf_needs() -> None:
    assert format_literal('a"b\\c\nd\re-f]g\té') == '"a\\"b\\\\c\\nd\\re-f]g\té"'


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1.0, "1.0"),
        (1e15, "1e+15"),
        (1e-5, "1e-05"),
        (0.0001, "0.0001"),
        (-0.0, "-0.0"),
        (2**64, "1.8446744073709552e+19"),
        # Grisu2's digits, not always the shortest ones Python's repr gives
        (6.470052947663474e16, "6.4700529476634736e+16"),
        (3.6779474083417975e-21, "3.6779474083417974e-21"),
        ({"b": [None, True], "a": "\x01é"}, '{"b":[null,true],"a":"\\u0001é"}'),
    ],
)
def test_dump_json_is_nlohmanns(value: Any, text: str) -> None:
    assert dump_json(value) == text


# ------------------------------------------------------------------ (c) errors and warnings


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"type": "foo"}, "JSON schema error at #: unrecognized type foo"),
        ({"enum": []}, "JSON schema error at #: enum must be a non-empty array"),
        ({"type": []}, "JSON schema error at #: type must not be empty"),
        ({"anyOf": []}, "JSON schema error at #/anyOf: must not be empty"),
        (
            {"properties": {"a": "x"}},
            "JSON schema error at #/properties/a: schema must be an object",
        ),
        (
            {"$ref": "https://example.com/s.json"},
            "JSON schema error at #: unsupported $ref https://example.com/s.json, only "
            "references into the same document are supported",
        ),
        (
            {"$ref": "#/$defs/x"},
            "JSON schema error at #: cannot resolve $ref #/$defs/x, $defs not found",
        ),
        (
            {"type": "string", "maxLength": -1},
            "JSON schema error at #: maxLength must be a non-negative integer",
        ),
        ({"type": "integer", "minimum": "1"}, "JSON schema error at #: minimum must be a number"),
        ({"type": "string", "pattern": "^(a$"}, "Invalid pattern ^(a$: unbalanced parentheses"),
        ({"type": "string", "pattern": "^*$"}, "Invalid pattern ^*$: nothing to repeat"),
        (
            {"type": "integer", "maximum": -(2**63)},
            "At least one of min_value or max_value must be set",
        ),
    ],
)
def test_llama_cpp_errors(schema: Any, message: str) -> None:
    with pytest.raises(GrammarError) as caught:
        json_schema_to_gbnf(schema)
    assert str(caught.value) == "JSON schema conversion failed:\n" + message
    assert isinstance(caught.value, ChatCodecError) and isinstance(caught.value, ValueError)


def test_builder_reports_errors_when_the_grammar_is_made() -> None:
    builder = GrammarBuilder()
    with pytest.raises(GrammarError, match="unrecognized type foo"):
        builder.add_schema("tool-x-schema", {"type": "foo"})  # the schema cannot be read
    assert builder.add_schema("tool-y-schema", {"type": "string", "pattern": "^[a$"}) == ""
    with pytest.raises(
        GrammarError, match="Invalid pattern \\^\\[a\\$: unterminated character class"
    ):
        builder.grammar()


def test_self_referring_ref_in_all_of_is_an_error_not_a_crash() -> None:
    # llama.cpp follows the $ref forever and its stack overflows (a segfault)
    schema = {"allOf": [{"$ref": "#/$defs/a"}], "$defs": {"a": {"$ref": "#/$defs/a"}}}
    with pytest.raises(GrammarError, match="refers only to itself"):
        json_schema_to_gbnf(schema)


def test_unbounded_nesting_is_an_error_not_a_crash() -> None:
    # an allOf that takes in the object it is part of nests without end (llama.cpp: a segfault)
    schema = {
        "$defs": {"d": {"type": "object", "properties": {"p": {"allOf": [{"$ref": "#/$defs/d"}]}}}},
        "$ref": "#/$defs/d",
    }
    with pytest.raises(GrammarError, match="nests too deeply"):
        json_schema_to_gbnf(schema)


def test_untranslatable_pattern_warns_and_accepts_any_string() -> None:
    with pytest.warns(GrammarWarning) as caught:
        grammar = json_schema_to_gbnf({"type": "string", "pattern": "^\\d+$"})
    assert grammar == PATTERN_FALLBACK
    assert str(caught[0].message) == (
        "JSON schema conversion was incomplete: pattern ^\\d+$ is not supported "
        "(unsupported escape: \\d), accepting any string"
    )


# ------------------------------------------------------------------ what a grammar cannot say


@pytest.mark.parametrize(
    ("schema", "same_as"),
    [
        # number bounds and multipleOf are not read: any number
        ({"type": "number", "minimum": 0, "maximum": 1, "multipleOf": 0.5}, {"type": "number"}),
        # uniqueItems, contains: not read
        (
            {"type": "array", "items": {"type": "integer"}, "uniqueItems": True},
            {"type": "array", "items": {"type": "integer"}},
        ),
        # patternProperties and propertyNames are not read: with properties, no other key
        (
            {"type": "object", "patternProperties": {"^x-": {"type": "string"}}},
            {"type": "object"},
        ),
        # not, if/then/else: not read
        ({"type": "string", "not": {"const": "a"}}, {"type": "string"}),
        # a format other than date, time, date-time and uuid: any string
        ({"type": "string", "format": "email"}, {"type": "string"}),
        # a pattern GBNF cannot say (\\d, \\w, lookarounds, unanchored): any string
        ({"type": "string", "pattern": "^\\w+$"}, {"type": "string", "pattern": "^\\d$"}),
        ({"type": "string", "pattern": "^(?=a)b$"}, {"type": "string", "pattern": "abc"}),
        # oneOf is anyOf: a value matching two branches is not refused
        (
            {"oneOf": [{"type": "integer"}, {"type": "number"}]},
            {"anyOf": [{"type": "integer"}, {"type": "number"}]},
        ),
        # a keyword beside $ref is ignored
        (
            {"$ref": "#/$defs/s", "maxLength": 2, "$defs": {"s": {"type": "string"}}},
            {"$ref": "#/$defs/s", "$defs": {"s": {"type": "string"}}},
        ),
    ],
)
def test_what_llama_cpp_grammars_do_not_enforce(schema: Any, same_as: Any) -> None:
    assert gbnf(schema) == gbnf(same_as)


def test_remote_ref_is_refused() -> None:
    with pytest.raises(GrammarError, match="only references into the same document"):
        json_schema_to_gbnf({"$ref": "other.json#/defs/x"})
