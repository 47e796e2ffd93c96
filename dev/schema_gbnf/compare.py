"""Run a schema corpus through llama.cpp's converter and chatcodec's port; print differences.

    python dev/schema_gbnf/compare.py                 # corpus: ../shared oracle schemas + schemas.jsonl
    python dev/schema_gbnf/compare.py --write tests/data/schema_gbnf.jsonl
    python dev/schema_gbnf/compare.py --time          # also time the port per schema
    python dev/schema_gbnf/compare.py --fuzz 5000     # and 5,000 random schemas (fuzz.py)

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

sys.path.insert(0, str(HERE))
from fuzz import random_schema  # noqa: E402

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
    """llama.cpp's answer to each entry; a request that crashes the process (a segfault) is
    answered ``{"ok": false, "crashed": true}`` and the rest are sent to a fresh process."""
    requests = []
    for i, entry in enumerate(entries):
        fields = {k: v for k, v in entry.items() if k in ("schema", "steps", "dotall")}
        requests.append(json.dumps({"id": i, **fields}, ensure_ascii=False) + "\n")
    answers: list[dict[str, Any]] = []
    while len(answers) < len(entries):
        with tempfile.NamedTemporaryFile(suffix=".stderr") as err:
            proc = subprocess.run(
                [str(ORACLE), err.name],
                input="".join(requests[len(answers) :]),
                capture_output=True,
                text=True,
                timeout=600,
            )
        answers += [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
        if len(answers) < len(entries):
            if proc.returncode == 0:
                sys.exit(f"schema_oracle answered {len(answers)} of {len(entries)} requests")
            answers.append({"id": len(answers), "ok": False, "crashed": True})
    return answers


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
    if response.get("crashed"):
        return {"crashed": True}
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
    parser.add_argument("--fuzz", type=int, default=0, help="also compare N random schemas")
    args = parser.parse_args()

    entries = shared_corpus() + own_corpus()
    entries += [
        {"name": f"fuzz-{seed}", "schema": random_schema(seed)} for seed in range(args.fuzz)
    ]
    answers = [llama_answer(r) for r in run_llama(entries)]
    same = 0
    crashed = []
    for entry, expected in zip(entries, answers, strict=True):
        got = comparable(run_port(entry), "steps" in entry)
        if got == comparable(expected, "steps" in entry):
            same += 1
            continue
        if expected.get("crashed"):
            crashed.append(f"{entry['name']}: chatcodec {got.get('error', 'gives a grammar')!r}")
            continue
        print(f"--- {entry['name']}: {json.dumps(entry.get('schema', entry.get('steps')))[:300]}")
        for key in sorted(set(got) | set(expected)):
            if got.get(key) != expected.get(key):
                print(f"  {key} llama.cpp: {expected.get(key)!r}")
                print(f"  {key} chatcodec: {got.get(key)!r}")
    for line in crashed:
        print(f"llama.cpp crashed on {line}")
    print(f"identical: {same} / {len(entries)}; llama.cpp crashed on {len(crashed)}")

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
        # only the hand-written corpus: the shared oracle's schemas stay in ../shared
        with args.write.open("w", encoding="utf-8") as out:
            for entry, expected in zip(entries, answers, strict=True):
                if not entry["name"].startswith(("fuzz-", "shared-")):
                    record = {
                        k: v for k, v in entry.items() if k in ("name", "schema", "steps", "dotall")
                    }
                    record.update(expected)
                    out.write(json.dumps(record, ensure_ascii=False) + "\n")
        print(f"wrote the hand-written corpus to {args.write}")


if __name__ == "__main__":
    main()
