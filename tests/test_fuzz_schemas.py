"""Issue 37: fuzzing a request's schemas (a bounded, seeded run by default).

Each case is a tool schema (and now and then a ``response_format`` schema) assembled at random:
``$defs`` that refer to each other (chains, cycles, levels that refer twice to the next),
nesting, ``anyOf`` / ``oneOf`` / ``allOf``, type lists, enums, consts, patterns, bounds (some
fractional, negative or huge), and now and then a ``$ref`` that names nothing. Prepared on
templates of several reply families (and one inline template), every case must keep the
schema bounds' promises (docs/security.md, "Request schemas"):

- ``Codec.prepare`` and ``turn.grammar`` return, or raise a ``RequestError`` (a bound, or a
  schema they refuse) or a ``GrammarError`` (a schema llama.cpp cannot convert); nothing else;
- the schema work each counts stays within its limit (``LIMIT`` here, below the default
  limit so that a case refused for its work stays short), and a schema whose ``$ref``s make
  no cycle costs ``prepare`` work in proportion to its size (each ``$ref`` walked once);
- as a safety net only, a case uses less than a generous CPU time.

A long run:

    CHATCODEC_FUZZ_SCHEMAS=3000 python -m pytest tests/test_fuzz_schemas.py -q

(``CHATCODEC_FUZZ_SEED`` picks another seed).
"""

from __future__ import annotations

import functools
import os
import random
import time
from typing import Any

import pytest

from chatcodec import Codec, GrammarError, RequestError
from chatcodec.schema_bounds import SchemaWork, schema_work

from .conftest import template_source

CASES = int(os.environ.get("CHATCODEC_FUZZ_SCHEMAS", "300"))
SEED = int(os.environ.get("CHATCODEC_FUZZ_SEED", "37"))
TEMPLATES = (
    "Qwen3-Coder.jinja",  # XML parameters, typed by value_types
    "GLM-4.6.jinja",
    "MiniMax-M2.jinja",
    "MiniMax-M3.jinja",  # its own walk of objects and alternatives
    "deepseek-ai-DeepSeek-V3.2.jinja",  # may_be_string per parameter
    "Qwen-Qwen2.5-7B-Instruct.jinja",  # JSON arguments: the schema's grammar
    None,  # the inline template (runs without ../shared)
)
INLINE = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}{{ tools | tojson }}"
USER = [{"role": "user", "content": "hi"}]
# the steps each call may take here (the default is 100,000 and more)
LIMIT = 30_000
# work per JSON node of the request's schemas, for a schema without a cycle of $refs
WORK_PER_NODE = 16
# the safety net: CPU seconds per case, far above what a case needs (the machine is shared)
CPU_SECONDS = 30.0


@functools.cache
def codec_of(name: str | None) -> Codec:
    return Codec(INLINE if name is None else template_source(name))


class _Schemas:
    """One case's random schemas: a document of ``$defs`` and the schemas pointing into it."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.names = [f"d{i}" for i in range(rng.randint(0, 8))]
        self.cyclic = False

    def ref(self, at: int | None) -> dict[str, Any]:
        rng = self.rng
        roll = rng.random()
        if roll < 0.03:
            return {"$ref": "#/$defs/missing"}
        if roll < 0.05:
            return {"$ref": "https://example.com/s.json"}
        index = rng.randrange(len(self.names))
        if at is not None and index <= at:
            self.cyclic = True
        return {"$ref": f"#/$defs/{self.names[index]}"}

    def scalar(self) -> dict[str, Any]:
        rng = self.rng
        kind = rng.choice(["string", "integer", "number", "boolean", "null", "enum", "const"])
        if kind == "string":
            out: dict[str, Any] = {"type": "string"}
            roll = rng.random()
            if roll < 0.2:
                out["pattern"] = rng.choice(["^[a-z]+$", "^\\d{3}$", "^(ab|cd){2,5}$", "x", "^[$"])
            elif roll < 0.4:
                out["minLength"] = rng.choice([0, 1, 5, 10**6])
                out["maxLength"] = rng.choice([1, 10, 2**31, -1])
            elif roll < 0.5:
                out["format"] = rng.choice(["date", "time", "date-time", "uuid", "email"])
            return out
        if kind in ("integer", "number"):
            out = {"type": kind}
            if rng.random() < 0.5:
                out["minimum"] = rng.choice([0, -5, 1.5, -(2**63), 10**30, "x"])
            if rng.random() < 0.5:
                out["exclusiveMaximum"] = rng.choice([10, 99.5, 2**63, 0])
            return out
        if kind == "enum":
            values = [1, "a", None, 2.5, True, [1, 2], {"k": "v"}, "é\n"]
            return {"enum": rng.sample(values, rng.randint(0, 4))}
        if kind == "const":
            return {"const": rng.choice([1, "x", None, {"a": [1]}, 1e300])}
        return {"type": kind}

    def schema(self, depth: int, at: int | None) -> dict[str, Any]:
        rng = self.rng
        if depth <= 0 or rng.random() < 0.2:
            if self.names and rng.random() < 0.35:
                return self.ref(at)
            return self.scalar()
        kind = rng.choice(["object", "array", "anyOf", "oneOf", "allOf", "types", "tuple"])
        if kind == "object":
            names = rng.sample(["a", "b", "c", "d-e", "f g", "$h"], rng.randint(0, 4))
            out: dict[str, Any] = {
                "type": "object",
                "properties": {n: self.schema(depth - 1, at) for n in names},
            }
            if names and rng.random() < 0.5:
                out["required"] = rng.sample(names, rng.randint(1, len(names)))
            if rng.random() < 0.3:
                out["additionalProperties"] = rng.choice([False, True, self.scalar()])
            return out
        if kind == "array":
            out = {"type": "array", "items": self.schema(depth - 1, at)}
            if rng.random() < 0.4:
                out["minItems"] = rng.choice([0, 1, 3, 10**9])
                out["maxItems"] = rng.choice([2, 5, 100])
            return out
        if kind == "tuple":
            return {"prefixItems": [self.schema(depth - 1, at) for _ in range(rng.randint(1, 3))]}
        if kind == "types":
            out = {"type": rng.sample(["string", "integer", "object", "null", "array"], 2)}
            if rng.random() < 0.5:
                out["properties"] = {"x": self.schema(depth - 1, at)}
            return out
        children = [self.schema(depth - 1, at) for _ in range(rng.randint(1, 3))]
        if kind == "allOf" and rng.random() < 0.5:
            return {"type": rng.choice(["object", "string"]), "allOf": children}
        return {kind: children}

    def shaped_defs(self) -> dict[str, Any]:
        """Now and then one of the shapes found to stall or crash: a long chain, or levels
        that each refer twice to the next (with a cycle back to the first, or not)."""
        rng = self.rng
        roll = rng.random()
        if roll < 0.1:
            length = rng.choice([20, 60, 200, 600])
            self.names = [f"c{i}" for i in range(length + 1)]
            defs: dict[str, Any] = {f"c{i}": {"$ref": f"#/$defs/c{i + 1}"} for i in range(length)}
            defs[f"c{length}"] = self.scalar()
            return defs
        if roll < 0.2:
            levels = rng.choice([8, 16, 30, 40])
            via = rng.choice(["anyOf", "allOf", "oneOf"])
            back = rng.random() < 0.5
            self.cyclic = back
            self.names = [f"l{i}" for i in range(levels + 1)]
            defs = {}
            for i in range(levels):
                ref = {"$ref": f"#/$defs/l{i + 1}"}
                defs[f"l{i}"] = {via: [ref, dict(ref)]}
            last = self.scalar()
            defs[f"l{levels}"] = {"anyOf": [{"$ref": "#/$defs/l0"}, last]} if back else last
            return defs
        return {name: self.schema(rng.randint(0, 4), i) for i, name in enumerate(self.names)}

    def document(self) -> dict[str, Any]:
        defs = self.shaped_defs()
        names = self.names
        root = self.schema(self.rng.randint(1, 5), None)
        if names:
            head = {"$ref": f"#/$defs/{names[0]}"}
            root = {"type": "object", "properties": {"x": head, "y": root}, "required": ["x"]}
            root["$defs"] = defs
        return root


def _nodes(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + sum(_nodes(v) for v in value.values())
    if isinstance(value, list):
        return 1 + sum(_nodes(v) for v in value)
    return 1


@pytest.mark.parametrize("case", range(CASES))
def test_every_schema_prepares_or_is_refused_in_bounded_work(case: int) -> None:
    rng = random.Random(SEED * 100_003 + case)
    name = TEMPLATES[case % len(TEMPLATES)]
    codec = codec_of(name)
    schemas = _Schemas(rng)
    parameters = schemas.document()
    tools = [{"type": "function", "function": {"name": "f", "parameters": parameters}}]
    options: dict[str, Any] = {"tool_choice": rng.choice(["auto", "required", "none"])}
    response: dict[str, Any] | None = None
    if rng.random() < 0.25:
        response = _Schemas(rng).document()
        options = {"response_format": {"type": "json_schema", "json_schema": {"schema": response}}}
    policy = rng.choice(["reference", "guaranteed"])
    started = time.process_time()
    with schema_work(SchemaWork(LIMIT)) as setup:
        try:
            turn = codec.prepare(USER, tools=tools, policy=policy, **options)
        except (RequestError, GrammarError):
            turn = None
    # the count stops at the step past its limit; one step may count a node's members
    overshoot = _nodes(parameters) + _nodes(response)
    assert setup.spent <= LIMIT + overshoot
    if not schemas.cyclic and response is None:
        # each $ref walked once: the work is in proportion to the schema's size
        assert setup.spent <= WORK_PER_NODE * _nodes(parameters), (setup.spent, case)
    if turn is not None:
        with schema_work(SchemaWork(LIMIT)) as grammar:
            try:
                turn.grammar  # noqa: B018
            except (RequestError, GrammarError):
                pass
        assert grammar.spent <= LIMIT + overshoot
    assert time.process_time() - started < CPU_SECONDS
