"""A request's tool and response schemas are bounded work (issue 37, "Schemas"; docs/security.md, "Request schemas").

``$defs`` that each refer twice to the next level made the XML-parameter families' type walk
double its work per level (18.7 s at depth 20 on main), and a ``$ref`` chain of ~500 raised a
foreign ``RecursionError``. Each ``$ref`` is now walked once, a schema deeper than
``MAX_SCHEMA_DEPTH`` is a ``RequestError`` naming its path, and a call's schema work is
counted against ``MAX_SCHEMA_WORK``.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest

from chatcodec import Codec, RequestError
from chatcodec.grammar import json_schema_to_gbnf, read_schema
from chatcodec.grammar.document import ObjectNode
from chatcodec.grammar.rules import may_be_string as node_may_be_string
from chatcodec.reply.schema import may_be_string, value_types
from chatcodec.schema_bounds import (
    MAX_SCHEMA_DEPTH,
    MAX_SCHEMA_WORK,
    SCHEMA_WORK_PER_NODE,
    SchemaWork,
    check_schema,
    schema_work,
    spend,
    work_limit,
)

from .conftest import template_source

XML_FAMILIES = ["Qwen3-Coder.jinja", "GLM-4.6.jinja", "MiniMax-M2.jinja"]
USER = [{"role": "user", "content": "hi"}]
INLINE = (
    "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
    "{% if tools %}{{ tools | tojson }}{% endif %}"
)


@cache
def codec_of(name: str) -> Codec:
    """One codec per template for the module (its template compiled once)."""
    return Codec(template_source(name))


def doubling(depth: int, via: str = "anyOf", back: bool = False) -> dict[str, Any]:
    """``$defs`` whose every level refers twice to the next; ``back``: the last level refers
    to the first again (a cycle through every level)."""
    defs: dict[str, Any] = {}
    for i in range(depth):
        ref = {"$ref": f"#/$defs/l{i + 1}"}
        defs[f"l{i}"] = {via: [ref, ref]}
    last: dict[str, Any] = {"type": "string"}
    if back:
        last = {"anyOf": [{"$ref": "#/$defs/l0"}, {"type": "string"}]}
    defs[f"l{depth}"] = last
    return {
        "type": "object",
        "properties": {"x": {"$ref": "#/$defs/l0"}},
        "required": ["x"],
        "$defs": defs,
    }


def chain(length: int) -> dict[str, Any]:
    defs: dict[str, Any] = {f"l{i}": {"$ref": f"#/$defs/l{i + 1}"} for i in range(length)}
    defs[f"l{length}"] = {"type": "integer"}
    return {"type": "object", "properties": {"x": {"$ref": "#/$defs/l0"}}, "$defs": defs}


def tool(parameters: dict[str, Any], name: str = "f") -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


# ------------------------------------------------------------------------ $refs walked once


@pytest.mark.parametrize("via", ["anyOf", "allOf"])
@pytest.mark.parametrize("name", XML_FAMILIES)
def test_doubling_defs_prepare_in_work_linear_in_the_schema(name: str, via: str) -> None:
    # on main: 2**30 walks of the last level (hours); now each level is walked once
    codec = codec_of(name)
    with schema_work() as work:
        turn = codec.prepare(USER, tools=[tool(doubling(30, via))])
    assert turn.prompt
    assert work.spent < 2_000


@pytest.mark.parametrize("name", XML_FAMILIES)
def test_doubling_defs_forty_deep_finish_as_a_request_error(name: str) -> None:
    codec = codec_of(name)
    with pytest.raises(RequestError) as caught:
        codec.prepare(USER, tools=[tool(doubling(40))])
    message = str(caught.value)
    assert message.startswith("tools[0].function.parameters.$defs.l")
    assert f"deeper than {MAX_SCHEMA_DEPTH} levels" in message


def test_the_walkers_answer_as_llama_cpp_on_cycles() -> None:
    # a cycle contributes no type and is no string (llama.cpp's cut), on every path
    root = {
        "$defs": {
            "a": {"anyOf": [{"$ref": "#/$defs/b"}, {"type": "string"}]},
            "b": {"anyOf": [{"$ref": "#/$defs/a"}, {"type": "integer"}]},
            "c": {"allOf": [{"$ref": "#/$defs/c"}, {"type": "string"}]},
            "d": {"anyOf": [{"$ref": "#/$defs/d"}]},
        }
    }
    assert value_types({"$ref": "#/$defs/a"}, root) == {"string", "integer"}
    assert value_types({"$ref": "#/$defs/b"}, root) == {"string", "integer"}
    assert value_types({"$ref": "#/$defs/c"}, root) == frozenset()
    assert value_types({"$ref": "#/$defs/d"}, root) == frozenset()
    assert may_be_string({"$ref": "#/$defs/b"}, root)
    assert not may_be_string({"$ref": "#/$defs/c"}, root)
    assert not may_be_string({"$ref": "#/$defs/d"}, root)


def test_a_walk_deeper_than_the_bound_is_a_request_error_naming_its_ref() -> None:
    schema = chain(MAX_SCHEMA_DEPTH + 50)
    for walk in (value_types, may_be_string):
        with pytest.raises(RequestError, match=r"^a tool's parameters\.\$defs\.l\d+: .*100 levels"):
            walk(schema["properties"]["x"], schema)
    node = read_schema(schema).root
    assert isinstance(node, ObjectNode)
    with pytest.raises(RequestError, match=r"^a schema\.\$defs\.l\d+: "):
        node_may_be_string(node.properties[0].schema)


# --------------------------------------------------------------------------- chains and depth


def test_a_500_long_ref_chain_is_a_request_error_naming_the_path() -> None:
    # on main: a foreign RecursionError (the server answered 500)
    codec = Codec(INLINE)
    with pytest.raises(RequestError) as caught:
        codec.prepare(USER, tools=[tool({"type": "object"}), tool(chain(500), "g")])
    assert str(caught.value).startswith("tools[1].function.parameters.$defs.l97: ")


@pytest.mark.parametrize("name", ["Qwen3-Coder.jinja", "Qwen-Qwen2.5-7B-Instruct.jinja"])
def test_a_500_long_ref_chain_is_a_request_error_on_the_families(name: str) -> None:
    codec = codec_of(name)
    with pytest.raises(RequestError, match=r"^tools\[0\]\.function\.parameters\.\$defs\.l97: "):
        codec.prepare(USER, tools=[tool(chain(500))])


def test_a_response_format_chain_names_its_own_path() -> None:
    codec = Codec(INLINE)
    for response_format, where in (
        ({"type": "json_schema", "json_schema": {"schema": chain(500)}}, "json_schema.schema"),
        ({"type": "json_object", "schema": chain(500)}, "schema"),
    ):
        with pytest.raises(RequestError) as caught:
            codec.prepare(USER, response_format=response_format)
        assert str(caught.value).startswith(f"response_format.{where}.$defs.l97: ")


def test_plain_nesting_counts_as_deep_as_a_chain() -> None:
    def nested(levels: int) -> dict[str, Any]:
        deep: dict[str, Any] = {"type": "string"}
        for _ in range(levels):  # two levels each: the properties object, the property
            deep = {"type": "object", "properties": {"a": deep}}
        return deep

    with pytest.raises(RequestError, match=r"^p(\.properties\.a){50}: the schema nests deeper"):
        check_schema(nested(60), "p")
    check_schema(nested(49), "p")  # 99 levels: fine


def test_a_ref_reached_deeper_the_second_time_is_measured_there() -> None:
    # the target is first walked near the top, then reached again 90 levels down
    deep: dict[str, Any] = {"$ref": "#/$defs/t"}
    for _ in range(45):
        deep = {"properties": {"a": deep}}
    target = chain(20)["$defs"]
    schema = {"$defs": {"t": {"$ref": "#/$defs/l0"}, **target}, "properties": {"b": deep}}
    with pytest.raises(RequestError, match=r"\$ref: the schema nests deeper"):
        check_schema(schema, "s")


def test_recursive_schemas_of_real_use_are_fine() -> None:
    tree = {
        "type": "object",
        "properties": {"root": {"$ref": "#/$defs/node"}},
        "$defs": {
            "node": {
                "type": "object",
                "properties": {
                    "value": {"type": ["string", "null"]},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/node"}},
                },
            }
        },
    }
    check_schema(tree, "tools[0].function.parameters")
    codec = codec_of("Qwen3-Coder.jinja")
    turn = codec.prepare(USER, tools=[tool(tree)])
    assert turn.grammar is not None


def test_read_schema_never_raises_a_foreign_recursion_error() -> None:
    from chatcodec import GrammarError

    with pytest.raises(GrammarError, match="nests too deeply"):
        read_schema(chain(5000))
    with pytest.raises(GrammarError, match="nests too deeply"):
        json_schema_to_gbnf(chain(5000))


# ------------------------------------------------------------------------------- the budget


def test_spend_counts_only_inside_an_open_count() -> None:
    spend(MAX_SCHEMA_WORK * 10)  # no open count: nothing to bound
    with schema_work() as work:
        spend(MAX_SCHEMA_WORK)
        with schema_work() as inner:  # one call, one count
            assert inner is work
            with pytest.raises(RequestError, match=f"more than {MAX_SCHEMA_WORK:,} steps"):
                spend()


@pytest.mark.parametrize("name", XML_FAMILIES)
def test_a_cycle_through_doubling_defs_runs_out_of_budget(name: str) -> None:
    # every level reaches back to the first, so no answer can be kept: llama.cpp's walk is
    # 2**24 steps here; the count stops it (a small count given here, which prepare goes on)
    codec = codec_of(name)
    work = SchemaWork(20_000)
    with schema_work(work), pytest.raises(RequestError, match="more than 20,000 steps"):
        codec.prepare(USER, tools=[tool(doubling(24, back=True))])
    assert 20_000 < work.spent < 20_100  # stopped at the step past the limit


def test_an_all_of_that_inlines_doubling_objects_runs_out_of_budget_in_the_grammar() -> None:
    # each object's members take in the next object's members twice (allOf inlines them):
    # the grammar doubles per level, llama.cpp's too; the grammar's count stops it
    defs: dict[str, Any] = {}
    for i in range(18):
        member = {"allOf": [{"$ref": f"#/$defs/o{i + 1}"}]}
        defs[f"o{i}"] = {"type": "object", "properties": {"p": member, "q": member}}
    defs["o18"] = {"type": "object", "properties": {"v": {"type": "integer"}}}
    schema = {"$ref": "#/$defs/o0", "$defs": defs}
    codec = codec_of("Qwen-Qwen2.5-7B-Instruct.jinja")
    turn = codec.prepare(USER, tools=[tool(schema)], tool_choice="required")
    work = SchemaWork(5_000)  # the grammar's own count is MAX_SCHEMA_WORK; a small one here
    with schema_work(work), pytest.raises(RequestError, match="more than 5,000 steps"):
        turn.grammar  # noqa: B018
    assert 5_000 < work.spent < 5_100  # stopped at the step past the limit


def test_the_work_limit_grows_with_the_request_schemas() -> None:
    # every JSON value: the parameters and its type, properties, a and its type, b and its
    # $ref, the $defs; n, its enum and the enum's two values twice (in the $defs and
    # through the $ref)
    parameters = {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"$ref": "#/$defs/n"}},
        "$defs": {"n": {"enum": [1, 2]}},
    }
    assert check_schema(parameters, "p") == 16
    turn = codec_of("Qwen-Qwen2.5-7B-Instruct.jinja").prepare(USER, tools=[tool(parameters)])
    assert turn.schema_work_limit == work_limit(16) == MAX_SCHEMA_WORK + SCHEMA_WORK_PER_NODE * 16


def test_a_long_list_read_once_per_type_is_counted_each_time() -> None:
    # each entry of a type list reads the schema again: a long enum read 3,000 times took
    # 30 s of CPU before it was counted per entry; the count now stops it at once
    schema = {"type": ["string"] * 3_000, "enum": list(range(50_000))}
    for name in ("Qwen3-Coder.jinja", "MiniMax-M3.jinja"):
        with pytest.raises(RequestError, match="steps to set up"):
            codec_of(name).prepare(USER, tools=[tool({"properties": {"x": schema}})])


def test_a_large_request_of_real_shape_fits_its_limit() -> None:
    # twelve tools of forty parameters sharing models in rings: work in proportion to size
    models = {
        f"M{i}": {
            "type": "object",
            "properties": {
                "id": {"type": "integer", "minimum": 0},
                "tags": {"type": "array", "items": {"type": "string"}},
                "next": {"anyOf": [{"$ref": f"#/$defs/M{i // 4 * 4 + (i + 1) % 4}"}, {}]},
            },
        }
        for i in range(12)
    }
    kinds = [{"type": "string"}, {"enum": ["a", "b"]}, {"type": ["integer", "null"]}]
    tools = []
    for t in range(12):
        props = {
            f"p{p}": kinds[p % 3] if p % 4 else {"$ref": f"#/$defs/M{p % 12}"} for p in range(40)
        }
        tools.append(tool({"type": "object", "properties": props, "$defs": models}, f"t{t}"))
    for name in ("Qwen3-Coder.jinja", "Qwen-Qwen2.5-7B-Instruct.jinja"):
        turn = codec_of(name).prepare(USER, tools=tools, tool_choice="required")
        assert turn.grammar is not None
