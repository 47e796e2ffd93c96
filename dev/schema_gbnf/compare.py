"""Run a schema corpus through llama.cpp's converter and chatcodec's port; print differences.

    python dev/schema_gbnf/compare.py                 # corpus: ../shared oracle schemas + schemas.jsonl
    python dev/schema_gbnf/compare.py --write tests/data/schema_gbnf.jsonl
    python dev/schema_gbnf/compare.py --time          # also time the port per schema

The llama.cpp side is schema_oracle (build it with dev/schema_gbnf/build.sh; or set
SCHEMA_ORACLE to its path). A developer tool: not part of the package, not run in CI.

Each corpus entry is {"name", "schema"} (json_schema_to_grammar) or {"name", "steps": [{"rule":
[name, body]} | {"schema": [name, schema]}]} (one builder, as llama.cpp's build_grammar: the
names each step returned and the grammar). Compared: the grammar text, the error message, the
warnings. ``--write`` records llama.cpp's answers (the test expectations).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT / "src"))

from chatcodec.errors import GrammarError  # noqa: E402
from chatcodec.grammar import GrammarBuilder, json_schema_to_gbnf  # noqa: E402

SHARED = ROOT.parent / "shared" / "oracle"
ORACLE = Path(
    os.environ.get("SCHEMA_ORACLE", Path.home() / ".cache" / "chatcodec-oracle" / "schema_oracle")
)


def shared_corpus() -> list[dict[str, Any]]:
    """Every tool ``parameters`` schema and ``response_format`` schema of the shared oracles."""
    found: dict[str, Any] = {}

    def add(schema: Any) -> None:
        if isinstance(schema, dict):
            found.setdefault(json.dumps(schema, ensure_ascii=False), schema)

    def add_tools(tools: Any) -> None:
        for tool in tools or []:
            if isinstance(tool, dict):
                function = tool.get("function", tool)
                if isinstance(function, dict):
                    add(function.get("parameters"))

    cases = SHARED / "parse" / "cases.jsonl"
    if cases.exists():
        for line in cases.open(encoding="utf-8"):
            row = json.loads(line)
            add_tools(row.get("tools"))
            add(row.get("json_schema"))
    render = SHARED / "render" / "expectations.jsonl"
    if render.exists():
        for line in render.open(encoding="utf-8"):
            row = json.loads(line)
            add_tools(row.get("tools"))
            response_format = (row.get("kwargs") or {}).get("response_format")
            if isinstance(response_format, dict):
                add((response_format.get("json_schema") or {}).get("schema"))
    return [{"name": f"shared-{i}", "schema": s} for i, s in enumerate(found.values())]


def own_corpus() -> list[dict[str, Any]]:
    lines = (HERE / "schemas.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def run_llama(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    requests = []
    for i, entry in enumerate(entries):
        request = {
            "id": i,
            **{k: v for k, v in entry.items() if k in ("schema", "steps", "dotall")},
        }
        requests.append(json.dumps(request, ensure_ascii=False) + "\n")
    with tempfile.NamedTemporaryFile(suffix=".stderr") as err:
        proc = subprocess.run(
            [str(ORACLE), err.name],
            input="".join(requests),
            capture_output=True,
            text=True,
            timeout=600,
        )
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    if len(lines) != len(entries):
        sys.exit(f"schema_oracle answered {len(lines)} of {len(entries)} requests")
    return [json.loads(line) for line in lines]


def run_port(entry: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            if "steps" in entry:
                builder = GrammarBuilder(dotall=entry.get("dotall", False))
                names = []
                for step in entry["steps"]:
                    if "rule" in step:
                        names.append(builder.add_rule(*step["rule"]))
                    else:
                        names.append(builder.add_schema(*step["schema"]))
                out["names"] = names
                out["grammar"] = builder.grammar()
                if builder.warnings:
                    out["warnings"] = "; ".join(builder.warnings)
            else:
                out["grammar"] = json_schema_to_gbnf(entry["schema"])
        except GrammarError as exc:
            out = {"error": str(exc)}
    if caught:
        out["warnings"] = "; ".join(str(w.message) for w in caught)
    return out


def llama_answer(response: dict[str, Any]) -> dict[str, Any]:
    if not response.get("ok"):
        return {"error": response.get("error", "")}
    out: dict[str, Any] = {"grammar": response["grammar"]}
    if "names" in response:
        out["names"] = response["names"]
    warning = response.get("warnings", "").strip()
    prefix = "WARNING: "
    if warning:
        out["warnings"] = warning[len(prefix) :] if warning.startswith(prefix) else warning
    return out


def comparable(answer: dict[str, Any], steps: bool) -> dict[str, Any]:
    # build_grammar's converter prints its warnings with the prefix json_schema_to_grammar uses
    answer = dict(answer)
    if steps and "warnings" in answer and not answer["warnings"].startswith("JSON schema"):
        answer["warnings"] = "JSON schema conversion was incomplete: " + answer["warnings"]
    return answer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", type=Path, help="record llama.cpp's answers to this JSONL file")
    parser.add_argument("--time", action="store_true", help="time the port on each schema")
    args = parser.parse_args()

    entries = shared_corpus() + own_corpus()
    answers = [llama_answer(r) for r in run_llama(entries)]
    same = 0
    for entry, expected in zip(entries, answers, strict=True):
        got = comparable(run_port(entry), "steps" in entry)
        if got == comparable(expected, "steps" in entry):
            same += 1
            continue
        print(f"--- {entry['name']}: {json.dumps(entry.get('schema', entry.get('steps')))[:300]}")
        for key in sorted(set(got) | set(expected)):
            if got.get(key) != expected.get(key):
                print(f"  {key} llama.cpp: {expected.get(key)!r}")
                print(f"  {key} chatcodec: {got.get(key)!r}")
    print(f"identical: {same} / {len(entries)}")

    if args.time:
        for entry in entries:
            if "schema" not in entry:
                continue
            runs = 200
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                start = time.perf_counter()
                for _ in range(runs):
                    try:
                        json_schema_to_gbnf(entry["schema"])
                    except GrammarError:
                        pass
                took = (time.perf_counter() - start) / runs
            print(f"{took * 1e6:9.1f} us  {entry['name']}")

    if args.write:
        with args.write.open("w", encoding="utf-8") as out:
            for entry, expected in zip(entries, answers, strict=True):
                record = {
                    k: v for k, v in entry.items() if k in ("name", "schema", "steps", "dotall")
                }
                record.update(expected)
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
        print(f"wrote {len(entries)} records to {args.write}")


if __name__ == "__main__":
    main()
