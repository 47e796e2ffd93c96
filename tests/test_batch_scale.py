"""``chatcodec batch`` at dataset scale (issue 11): worker processes that keep the input
order, input files (JSON Lines and Parquet) beside stdin, an output file, and a bad line that
costs only its own result."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from chatcodec import MissingExtraError
from chatcodec.datafiles import count_records, read_records

from .conftest import ROOT, SHARED, read_jsonl, shared_path


def _cases() -> list[dict[str, Any]]:
    cases = read_jsonl(shared_path("oracle", "render", "expectations.jsonl"))
    return cases[::25]  # every template and shape, errors included


def _templates() -> list[str]:
    """``--templates`` and the shared templates' folder, where it is (the tests that read the
    corpus are skipped without it)."""
    folder = SHARED / "chat_templates"
    return ["--templates", str(folder)] if folder.exists() else []


def _run(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "chatcodec", "batch", *_templates(), *args],
        input=stdin,
        capture_output=True,
        cwd=ROOT,
        timeout=600,
    )


def _lines(text: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.decode("utf-8").splitlines()]


def test_two_workers_answer_as_one_line_for_line_with_a_bad_line_in_place(
    tmp_path: Path,
) -> None:
    cases = _cases()
    lines = [json.dumps(case).encode() for case in cases]
    lines.insert(7, b"{broken")
    data = b"\n".join(lines) + b"\n"
    one = _run(stdin=data)
    two = _run("--jobs", "2", stdin=data)
    assert one.returncode == two.returncode == 2
    assert one.stdout == two.stdout and one.stderr == two.stderr
    results = _lines(two.stdout)
    assert len(results) == len(cases) + 1
    assert results[7]["error"] == {
        "type": "UsageError",
        "message": results[7]["error"]["message"],
    } and results[7]["error"]["message"].startswith("line 8 is not valid JSON")
    for case, result in zip(cases, results[:7] + results[8:], strict=True):
        assert result["id"] == case["id"]
        if "error" in case:
            assert result["error"]["type"] == case["error"]["type"], result
        else:
            assert result["rendered"] == case["expected"], result
    assert two.stderr.decode() == (
        f"chatcodec batch: 1 UsageError of {len(results)} requests could not be run "
        "(see their result lines)\n"
    )


def test_files_and_stdin_are_read_in_order_into_an_output_file(tmp_path: Path) -> None:
    cases = _cases()[:6]
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_text("".join(json.dumps(c) + "\n" for c in cases[:2]), encoding="utf-8")
    second.write_text(json.dumps(cases[4]) + "\n[1]\n", encoding="utf-8")
    stdin = "".join(json.dumps(c) + "\n" for c in cases[2:4]).encode()
    out = tmp_path / "out.jsonl"
    run = _run(str(first), "-", str(second), "--output", str(out), "-j", "2", stdin=stdin)
    assert run.returncode == 2 and run.stdout == b""
    results = _lines(out.read_bytes())
    assert [r["id"] for r in results] == [c["id"] for c in cases[:5]] + [None]
    assert results[-1]["error"]["message"] == f"{second}: line 2 is not a JSON object"
    assert count_records([str(first), str(second)]) == 4
    assert count_records(["-"]) is None


def test_a_missing_input_file_is_a_usage_error() -> None:
    run = _run("no-such-file.jsonl")
    assert run.returncode == 2
    assert (
        run.stderr.decode()
        == "chatcodec batch: cannot read no-such-file.jsonl: No such file or directory\n"
    )


def test_jobs_must_be_a_count() -> None:
    run = _run("--jobs", "-1")
    assert run.returncode == 2 and b"--jobs: takes a number of processes" in run.stderr


def test_parquet_rows_read_as_the_json_records_they_were_written_from(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    pa = pytest.importorskip("pyarrow")
    cases = [c for c in _cases() if c["template"].startswith(("qwen", "llama"))][:12]
    assert cases
    # messages of mixed fields (tool calls beside plain turns): Arrow pads them with nulls
    rows = [
        {
            "id": c["id"],
            "template": c["template"],
            "messages": c["messages"],
            # JSON text, or a null that reads as no tools at all
            "tools": json.dumps(c["tools"]) if c.get("tools") else None,
        }
        for c in cases
    ]
    plain = [c for c in cases if not c.get("tools")]
    table = pa.Table.from_pylist(rows)
    path = tmp_path / "data.parquet"
    pq.write_table(table, path, row_group_size=5)
    records = [record for record, _ in read_records([str(path)])]
    assert [r["id"] for r in records] == [c["id"] for c in cases]
    for record, case in zip(records, cases, strict=True):
        assert record["messages"] == _without_nulls(case["messages"])
        assert record.get("tools") == (case.get("tools") or None)
    assert count_records([str(path)]) == len(cases)
    run = _run(str(path))
    jsonl = "".join(json.dumps(r) + "\n" for r in records).encode()
    assert run.stdout == _run(stdin=jsonl).stdout
    assert plain  # the corpus' plain conversations are among them


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def test_parquet_without_pyarrow_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow raises ImportError
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(MissingExtraError) as caught:
        list(read_records(["data.parquet"]))
    assert str(caught.value) == (
        "reading the Parquet file data.parquet needs the 'pyarrow' package: "
        "pip install 'chatcodec[data]'"
    )
