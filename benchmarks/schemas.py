"""Schema bounds benchmark: the CPU time and counted work of a request's setup for the
schemas found to stall or crash it (issue 37), and for a large schema of real shape.

    python benchmarks/schemas.py [--rounds N]

Each row is one ``Codec.prepare`` (template compiled beforehand) and then ``turn.grammar``,
in CPU time (the fastest of ``--rounds``), with what it ended in and the schema work each
counted (``chatcodec.schema_bounds``: at most ``MAX_SCHEMA_WORK`` plus
``SCHEMA_WORK_PER_NODE`` per JSON value of the request's schemas, each). Needs the shared
templates beside the checkout (``../shared/chat_templates``).

Rows:
  doubling N     ``$defs`` levels that each refer twice to the next, N levels (on main: 2.2 s
                 at 18, 18.7 s at 20, 40 did not finish in 50 minutes);
  cyclic N       the same with the last level referring back to the first (no answer can be
                 kept: the work bound stops it);
  chain N        a ``$ref`` chain of N (on main: a RecursionError from ~500);
  allOf-inline   objects whose members take in the next object's members twice through
                 ``allOf``: the grammar doubles per level (llama.cpp's too);
  wide           40 tools of 60 properties each, each with ``$defs`` of 30 models that refer
                 to each other in rings of five: a large request of real shape.
"""

from __future__ import annotations

import argparse
import gc
import time
from pathlib import Path
from typing import Any

from chatcodec import Codec, GrammarError, RequestError
from chatcodec.schema_bounds import (
    MAX_SCHEMA_DEPTH,
    MAX_SCHEMA_WORK,
    SCHEMA_WORK_PER_NODE,
    SchemaWork,
    check_schema,
    schema_work,
    work_limit,
)

TEMPLATES = Path(__file__).resolve().parents[2] / "shared" / "chat_templates"
USER = [{"role": "user", "content": "hi"}]


def doubling(levels: int, back: bool = False) -> dict[str, Any]:
    defs: dict[str, Any] = {}
    for i in range(levels):
        ref = {"$ref": f"#/$defs/l{i + 1}"}
        defs[f"l{i}"] = {"anyOf": [ref, ref]}
    last: dict[str, Any] = {"type": "string"}
    defs[f"l{levels}"] = {"anyOf": [{"$ref": "#/$defs/l0"}, last]} if back else last
    return {"type": "object", "properties": {"x": {"$ref": "#/$defs/l0"}}, "$defs": defs}


def chain(length: int) -> dict[str, Any]:
    defs: dict[str, Any] = {f"l{i}": {"$ref": f"#/$defs/l{i + 1}"} for i in range(length)}
    defs[f"l{length}"] = {"type": "string"}
    return {"type": "object", "properties": {"x": {"$ref": "#/$defs/l0"}}, "$defs": defs}


def all_of_inline(levels: int) -> dict[str, Any]:
    defs: dict[str, Any] = {}
    for i in range(levels):
        member = {"allOf": [{"$ref": f"#/$defs/o{i + 1}"}]}
        defs[f"o{i}"] = {"type": "object", "properties": {"p": member, "q": member}}
    defs[f"o{levels}"] = {"type": "object", "properties": {"v": {"type": "integer"}}}
    return {"$ref": "#/$defs/o0", "$defs": defs}


def wide_tools() -> list[dict[str, Any]]:
    models = {
        f"M{i}": {
            "type": "object",
            "properties": {
                "id": {"type": "integer", "minimum": 0},
                "name": {"type": "string", "maxLength": 80},
                "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 8},
                # models refer to each other in rings of five
                "next": {
                    "anyOf": [{"$ref": f"#/$defs/M{i // 5 * 5 + (i + 1) % 5}"}, {"type": "null"}]
                },
            },
            "required": ["id"],
        }
        for i in range(30)
    }
    tools = []
    for t in range(40):
        props: dict[str, Any] = {}
        for p in range(60):
            kind = p % 4
            if kind == 0:
                props[f"p{p}"] = {"type": "string", "description": "a value"}
            elif kind == 1:
                props[f"p{p}"] = {"enum": ["a", "b", "c"]}
            elif kind == 2:
                props[f"p{p}"] = {"$ref": f"#/$defs/M{p % 30}"}
            else:
                props[f"p{p}"] = {"type": ["integer", "null"]}
        parameters = {"type": "object", "properties": props, "$defs": models}
        tools.append({"type": "function", "function": {"name": f"t{t}", "parameters": parameters}})
    return tools


def tool(parameters: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": "f", "parameters": parameters}}]


def run(codec: Codec, tools: list[dict[str, Any]], rounds: int) -> tuple[float, str, int, int]:
    """(CPU seconds, outcome, setup steps, grammar steps); each count opened here with the
    limit ``prepare`` gives the request (so that its steps can be read)."""
    try:
        nodes = sum(check_schema(t["function"]["parameters"], "") for t in tools)
    except RequestError as exc:
        return 0.0, _outcome(exc), 0, 0
    best = float("inf")
    outcome, setup_steps, grammar_steps = "", 0, 0
    for _ in range(rounds):
        gc.disable()
        started = time.process_time()
        with schema_work(SchemaWork(work_limit(nodes))) as setup:
            try:
                turn = codec.prepare(USER, tools=tools, tool_choice="required")
            except (RequestError, GrammarError) as exc:
                turn, outcome = None, _outcome(exc)
        grammar_steps = 0
        if turn is not None:
            with schema_work(SchemaWork(turn.schema_work_limit)) as grammar:
                try:
                    turn.grammar  # noqa: B018
                    outcome = "prepared"
                except (RequestError, GrammarError) as exc:
                    outcome = "grammar: " + _outcome(exc)
            grammar_steps = grammar.spent
        best = min(best, time.process_time() - started)
        gc.enable()
        setup_steps = setup.spent
    return best, outcome, setup_steps, grammar_steps


def _outcome(exc: Exception) -> str:
    text = str(exc)
    if "nests deeper" in text:
        return "RequestError (depth)"
    if "steps to set up" in text:
        return "RequestError (work)"
    return type(exc).__name__


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if not TEMPLATES.is_dir():
        raise SystemExit(f"{TEMPLATES} is not there (the shared corpus beside the checkout)")
    names = ["Qwen3-Coder", "GLM-4.6", "MiniMax-M2", "Qwen-Qwen2.5-7B-Instruct"]
    codecs = {n: Codec((TEMPLATES / f"{n}.jinja").read_text(encoding="utf-8")) for n in names}
    for codec in codecs.values():  # compile and probe the templates before timing
        codec.prepare(USER)
    cases: list[tuple[str, list[dict[str, Any]]]] = [
        ("doubling 20", tool(doubling(20))),
        ("doubling 30", tool(doubling(30))),
        ("doubling 40", tool(doubling(40))),
        ("cyclic 24", tool(doubling(24, back=True))),
        ("chain 500", tool(chain(500))),
        ("allOf-inline 18", tool(all_of_inline(18))),
        ("wide", wide_tools()),
    ]
    print(
        f"MAX_SCHEMA_DEPTH = {MAX_SCHEMA_DEPTH}, work limit = {MAX_SCHEMA_WORK:,} + "
        f"{SCHEMA_WORK_PER_NODE} per JSON value of the schemas"
    )
    header = f"{'schema':<16} {'template':<26} {'CPU s':>7} {'setup':>8} {'grammar':>8}  outcome"
    print(header)
    print("-" * len(header))
    for label, tools in cases:
        for name, codec in codecs.items():
            seconds, outcome, setup, grammar = run(codec, tools, args.rounds)
            print(f"{label:<16} {name:<26} {seconds:>7.3f} {setup:>8,} {grammar:>8,}  {outcome}")


if __name__ == "__main__":
    main()
