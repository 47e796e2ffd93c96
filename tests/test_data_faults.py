"""Faults of a dataset (issue 37, "Data"): a Parquet file pyarrow cannot read is a usage
error naming the file (exit status 2), in ``chatcodec check-data`` as in ``chatcodec batch``;
a bad row is one error line and the run goes on. Run through the command line's ``main``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from chatcodec import cli
from chatcodec.checkdata import check_data

from ._tokenizer import write_checkpoint
from .conftest import ROOT

CHATML = ROOT / "examples" / "chatml-tiny"
# a template of the tests' own that renders no calls: what a row's calls hold is not read by
# the render, only by the check's comparison
PLAIN = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
GREETING = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def write_rows(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def parquet_bytes(tmp_path: Path) -> bytes:
    """A real Parquet file of a few dataset rows (several row groups), as bytes."""
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow

    rows = [{"id": str(i), "messages": json.dumps(GREETING)} for i in range(50)]
    path = tmp_path / "whole.parquet"
    pq.write_table(pyarrow.Table.from_pylist(rows), path, row_group_size=10)
    return path.read_bytes()


@pytest.fixture(params=["garbage", "truncated"])
def corrupt(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    pytest.importorskip("pyarrow")
    path = tmp_path / f"{request.param}.parquet"
    if request.param == "garbage":
        path.write_bytes(b"these bytes were never Parquet\n" * 10)
    else:  # a download cut in the middle
        data = parquet_bytes(tmp_path)
        path.write_bytes(data[: len(data) // 2])
    return path


@pytest.mark.parametrize(
    "command",
    [
        ["check-data", str(CHATML)],
        ["batch"],
        ["batch", "--checkpoint", str(CHATML)],
        ["batch", "--checkpoint", str(CHATML), "--jobs", "2"],
    ],
    ids=["check-data", "batch", "batch-encode", "batch-encode-jobs"],
)
def test_a_corrupt_parquet_file_is_a_usage_error_naming_it(
    command: list[str], corrupt: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # it used to be "internal error (a bug in chatcodec: please report it): ArrowInvalid"
    code, out, err = run(capsys, *command, str(corrupt))
    assert code == 2, err
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1
    assert f"cannot read {corrupt}: not valid Parquet (" in lines[0]
    assert "internal error" not in err


def test_a_missing_parquet_file_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("pyarrow")
    path = tmp_path / "absent.parquet"
    code, _, err = run(capsys, "batch", str(path))
    assert code == 2
    assert err.splitlines() == [f"chatcodec batch: cannot read {path}: No such file or directory"]


# ------------------------------------------------------------------ a bad row is one line

BAD_ROWS = [
    {"id": "word", "messages": ["hi"]},  # a message that is not an object
    {
        "id": "call",
        "messages": [GREETING[0], {"role": "assistant", "tool_calls": [{"function": 1}]}],
    },
    {"id": "calls", "messages": [GREETING[0], {"role": "assistant", "tool_calls": 5}]},
]


def test_check_data_reads_rows_whose_calls_are_not_objects() -> None:
    """A call whose function is not an object, and calls that are not a list: the check
    compares what it can (no calls expected) instead of failing on the row."""
    from chatcodec import Codec

    codec = Codec(PLAIN, eos_token="<|im_end|>")
    word, call, calls, good = check_data(codec, [*BAD_ROWS, {"id": "good", "messages": GREETING}])
    assert word.error == "TemplateArgumentError: message 0 is a str, not a mapping of fields"
    for check in (call, calls):
        assert not check.error and len(check.turns) == 1
    assert (call.turns[0].expected["tool_calls"], calls.turns[0].expected["tool_calls"]) == (
        [{"name": None, "arguments": None}],
        [],
    )
    assert good.ok


def test_check_data_goes_on_past_bad_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    template = tmp_path / "plain.jinja"
    template.write_text(PLAIN, encoding="utf-8")
    rows = [*BAD_ROWS, {"id": "good", "messages": GREETING}]
    data = write_rows(tmp_path / "rows.jsonl", rows)
    code, out, err = run(
        capsys, "check-data", str(template), str(data), "--eos-token", "<|im_end|>", "--json"
    )
    assert code == 1, err  # some rows fail; none ends the run
    assert "internal error" not in err and "Traceback" not in err
    *checks, summary = (json.loads(line) for line in out.splitlines())
    assert [c["id"] for c in checks] == ["word", "call", "calls", "good"]
    assert checks[0]["error"].startswith("TemplateArgumentError: message 0 is a str")
    assert checks[-1]["ok"] is True
    assert summary["summary"]["default"]["conversations"] == 4


def test_a_bug_on_one_row_is_one_line_and_check_data_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A row that trips a bug of chatcodec's (here one planted in the check) is an
    internal-error line of its own, as in ``chatcodec batch``; the next row is checked."""
    import chatcodec.checkdata as checkdata

    real = checkdata.check_turns

    def planted(codec: Any, messages: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("id") == "trips":
            raise KeyError("planted")
        return real(codec, messages, *args, **kwargs)

    monkeypatch.setattr(checkdata, "check_turns", planted)
    template = tmp_path / "plain.jinja"
    template.write_text(PLAIN, encoding="utf-8")
    rows = [{"id": "trips", "messages": GREETING}, {"id": "good", "messages": GREETING}]
    data = write_rows(tmp_path / "rows.jsonl", rows)
    code, out, err = run(
        capsys, "check-data", str(template), str(data), "--eos-token", "<|im_end|>", "--json"
    )
    assert code == 1 and err == ""
    trips, good, _ = (json.loads(line) for line in out.splitlines())
    assert trips["error"] == (
        "internal error (a bug in chatcodec: please report it): KeyError: 'planted'"
    )
    assert good["ok"] is True


def test_batch_encode_goes_on_past_bad_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Columns of the wrong type are the row's fault (a usage error line), not a bug: tools
    or documents that are not lists used to be InternalError lines."""
    pytest.importorskip("tokenizers")
    template = (CHATML / "chat_template.jinja").read_text("utf-8")
    special = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
    checkpoint = write_checkpoint(tmp_path / "chatml", template, special)
    rows = [
        {"id": "word", "messages": ["hi"]},
        {"id": "tools", "messages": GREETING, "tools": 5},
        {"id": "documents", "messages": GREETING, "documents": {"title": "t", "text": "x"}},
        {"id": "good", "messages": GREETING},
    ]
    data = write_rows(tmp_path / "rows.jsonl", rows)
    code, out, err = run(capsys, "batch", "--checkpoint", str(checkpoint), str(data))
    assert code == 2  # rows that could not be encoded, each said on its line
    results = [json.loads(line) for line in out.splitlines()]
    assert [r["id"] for r in results] == ["word", "tools", "documents", "good"]
    assert [r["error"] for r in results[1:3]] == [
        {"type": "UsageError", "message": "the row's tools must be a list, not int"},
        {"type": "UsageError", "message": "the row's documents must be a list, not dict"},
    ]
    assert results[0]["error"] == {
        "type": "UsageError",
        "message": "message 0 is a str, not a mapping of fields",
    }
    assert "error" not in results[3] and results[3]["input_ids"]
    assert "InternalError" not in err
