"""``chatcodec batch --checkpoint``: a dataset (JSON Lines or Parquet) encoded line by line
into token ids and assistant masks (issue 11, at dataset scale), on the real command.

The checkpoint is a folder written by the tests (tests/_tokenizer.py) around the example
template (examples/chatml-tiny), so these run without ``../shared``. Every good line must be
what ``Codec.encode`` gives its conversation, every bad one an error line at its place."""

from __future__ import annotations

import json
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from chatcodec import MissingExtraError, load
from chatcodec.data import DatasetEncoder
from chatcodec.datafiles import EncodedParquet

from ._tokenizer import write_checkpoint
from .conftest import ROOT

pytest.importorskip("tokenizers")

EXAMPLE = json.loads((ROOT / "examples" / "conversation.json").read_text(encoding="utf-8"))
NOW = 1741165623
SPECIAL = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    template = (ROOT / "examples" / "chatml-tiny" / "chat_template.jinja").read_text("utf-8")
    return write_checkpoint(tmp_path_factory.mktemp("ckpt") / "chatml", template, SPECIAL)


@cache
def _rows() -> list[dict[str, Any]]:
    """Dataset rows of the shapes datasets hold: tools as objects and as JSON text, template
    variables per row, with and without an id, a one-turn and a multi-turn conversation."""
    messages, tools = EXAMPLE["messages"], EXAMPLE["tools"]
    return [
        {"id": "full", "messages": messages[:-1], "tools": tools},
        {"id": 7, "messages": messages[1:3] + messages[3:5], "tools": json.dumps(tools)},
        {"messages": messages[:2] + [{"role": "assistant", "content": "Sunny."}]},
        {
            "id": "quiet",
            "messages": messages[1:2] + [{"role": "assistant", "content": "Sunny."}],
            "chat_template_kwargs": {"enable_thinking": False},
        },
    ]


def _run(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "chatcodec", "batch", *args],
        input=stdin,
        capture_output=True,
        cwd=ROOT,
        timeout=300,
    )


def _jsonl(rows: list[Any]) -> bytes:
    return b"".join(
        (row if isinstance(row, bytes) else json.dumps(row).encode()) + b"\n" for row in rows
    )


def _lines(text: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.decode("utf-8").splitlines()]


def _expected(checkpoint: Path, row: dict[str, Any], **options: Any) -> dict[str, Any]:
    """What ``Codec.encode`` gives the row's conversation, as a result line has it."""
    tools = row.get("tools")
    variables = row.get("chat_template_kwargs") or {}
    text = options.pop("text", False)
    encoding = load(checkpoint).encode(
        row["messages"],
        json.loads(tools) if isinstance(tools, str) else tools,
        now=NOW,
        **{**options, **variables},  # (a row's variables over the command's)
    )
    return {"id": row.get("id"), **encoding.to_dict(text=text)}


def test_each_line_is_its_conversations_encoding_and_a_bad_line_an_error_in_place(
    checkpoint: Path,
) -> None:
    rows = _rows()
    system = {"role": "system", "content": "late"}
    lines: list[Any] = [
        rows[0],
        b"{broken",
        rows[1],
        {"id": "no-messages", "tools": []},
        rows[2],
        {"id": "option", "messages": rows[2]["messages"], "chat_template_kwargs": {"now": 1}},
        {"id": "refused", "messages": [*rows[2]["messages"], system]},
        rows[3],
    ]
    data = _jsonl(lines)
    one = _run("--checkpoint", str(checkpoint), "--now", str(NOW), stdin=data)
    two = _run("--checkpoint", str(checkpoint), "--now", str(NOW), "-j", "2", stdin=data)
    assert one.returncode == two.returncode == 2
    assert one.stdout == two.stdout and one.stderr == two.stderr
    results = _lines(one.stdout)
    assert len(results) == len(lines)
    for at, row in ((0, rows[0]), (2, rows[1]), (4, rows[2]), (7, rows[3])):
        assert results[at] == _expected(checkpoint, row)
    assert results[0]["assistant_masks"].count(1) > 0
    assert results[1]["id"] is None and results[1]["error"]["type"] == "UsageError"
    assert results[1]["error"]["message"].startswith("line 2 is not valid JSON: ")
    assert results[3] == {
        "id": "no-messages",
        "error": {"type": "UsageError", "message": "the row has no 'messages' list"},
    }
    assert results[5]["error"] == {
        "type": "UsageError",
        "message": "chat_template_kwargs cannot set 'now': an encode option",
    }
    refused = results[6]["error"]
    assert refused["type"] == "TemplateError" and refused["stage"] == "render"
    assert "Only the first message may be a system message." in refused["message"]
    assert one.stderr.decode().splitlines()[-1] == (
        "chatcodec batch: 1 TemplateError, 3 UsageError of 8 conversations could not be "
        "encoded (see their result lines)"
    )


def test_the_encode_options_are_encodes(checkpoint: Path, tmp_path: Path) -> None:
    # (the last row's own variables override --no-thinking's)
    rows = [*_rows()[:2], {**_rows()[0], "chat_template_kwargs": {"enable_thinking": True}}]
    (tmp_path / "rows.jsonl").write_bytes(_jsonl(rows))
    out = tmp_path / "out.jsonl"
    run = _run(
        "--checkpoint",
        str(checkpoint),
        str(tmp_path / "rows.jsonl"),
        "--now",
        str(NOW),
        "--no-end-marker",
        "--no-thinking",
        "-g",
        "--text",
        "--offsets",
        "-o",
        str(out),
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout == b""
    results = _lines(out.read_bytes())
    options = {"mask_end_marker": False, "add_generation_prompt": True, "enable_thinking": False}
    codec = load(checkpoint)
    for result, row in zip(results, rows, strict=True):
        offsets = result.pop("offsets")
        assert result == _expected(checkpoint, row, text=True, **options)
        tools = row["tools"]
        encoding = codec.encode(
            row["messages"],
            json.loads(tools) if isinstance(tools, str) else tools,
            now=NOW,
            **{**options, **row.get("chat_template_kwargs", {})},
        )
        assert offsets == [list(pair) for pair in encoding.offsets]
    empty = "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    assert [result["text"].endswith(empty) for result in results] == [True, True, False]


def test_parquet_rows_encode_as_the_json_lines_they_were_written_from(
    checkpoint: Path, tmp_path: Path
) -> None:
    pyarrow = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")

    rows = [dict(row) for row in _rows()]
    for row in rows:  # (a column holds one type: tools and variables as JSON text)
        tools = row.get("tools") or []
        row["tools"] = tools if isinstance(tools, str) else json.dumps(tools)
        row["id"] = str(row.get("id", ""))
        row["chat_template_kwargs"] = json.dumps(row.get("chat_template_kwargs") or {})
    pq.write_table(pyarrow.Table.from_pylist(rows), tmp_path / "rows.parquet")
    (tmp_path / "rows.jsonl").write_bytes(_jsonl(rows))
    args = ("--checkpoint", str(checkpoint), "--now", str(NOW))
    parquet = _run(*args, str(tmp_path / "rows.parquet"))
    lines = _run(*args, str(tmp_path / "rows.jsonl"))
    assert parquet.returncode == lines.returncode == 0, parquet.stderr
    assert parquet.stdout == lines.stdout
    for result, row in zip(_lines(parquet.stdout), rows, strict=True):
        variables = json.loads(row["chat_template_kwargs"])
        assert result == _expected(checkpoint, {**row, "chat_template_kwargs": variables})


def test_the_dataset_encoder_gives_what_a_batch_line_gives(checkpoint: Path) -> None:
    rows = _rows()
    run = _run("--checkpoint", str(checkpoint), "--now", str(NOW), "--offsets", stdin=_jsonl(rows))
    assert run.returncode == 0, run.stderr
    encoder = DatasetEncoder(str(checkpoint), now=NOW, offsets=True)
    batch = {
        "messages": [row["messages"] for row in rows],
        "tools": [row.get("tools") for row in rows],
        "chat_template_kwargs": [row.get("chat_template_kwargs") for row in rows],
    }
    columns = encoder(batch)
    for index, result in enumerate(_lines(run.stdout)):
        result.pop("id")
        assert result == {name: values[index] for name, values in columns.items()}


def test_encode_options_take_a_checkpoint_and_a_bad_checkpoint_fails_once(
    checkpoint: Path, tmp_path: Path
) -> None:
    alone = _run("--text", stdin=b"")
    assert alone.returncode == 2
    assert alone.stderr.decode().strip() == (
        "chatcodec batch: --text is an option of encoding: it takes --checkpoint"
    )
    both = _run("--checkpoint", str(checkpoint), "--templates", str(tmp_path), stdin=b"")
    assert both.returncode == 2
    assert "--templates names the templates of requests" in both.stderr.decode()
    clash = _run("--checkpoint", str(checkpoint), "--var", "mask_reasoning=false", stdin=b"")
    assert clash.returncode == 2
    assert "--var cannot set 'mask_reasoning'" in clash.stderr.decode()
    missing = _run("--checkpoint", str(tmp_path / "absent"), stdin=_jsonl(_rows()))
    assert missing.returncode == 1 and missing.stdout == b""
    assert len(missing.stderr.decode().splitlines()) == 1
    assert "CheckpointError" in missing.stderr.decode()


def test_a_column_of_json_text_is_decoded_once_from_parquet_as_from_json_lines(
    checkpoint: Path, tmp_path: Path
) -> None:
    pyarrow = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")

    # tools as the JSON text of a JSON text: decoded once, a string, which encode refuses
    row = {"id": "twice", "messages": _rows()[2]["messages"], "tools": json.dumps(json.dumps([]))}
    pq.write_table(pyarrow.Table.from_pylist([row]), tmp_path / "row.parquet")
    (tmp_path / "row.jsonl").write_bytes(_jsonl([row]))
    args = ("--checkpoint", str(checkpoint), "--now", str(NOW))
    parquet = _run(*args, str(tmp_path / "row.parquet"))
    lines = _run(*args, str(tmp_path / "row.jsonl"))
    assert parquet.stdout == lines.stdout
    assert parquet.returncode == lines.returncode == 2
    assert _lines(lines.stdout)[0]["error"] == {
        "type": "UsageError",
        "message": "the row's tools must be a list, not str",
    }


def test_a_parquet_output_holds_the_result_lines(checkpoint: Path, tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    rows: list[Any] = [*_rows(), {"id": "no-messages"}]
    args = ("--checkpoint", str(checkpoint), "--now", str(NOW), "--text", "--offsets")
    lines = _run(*args, stdin=_jsonl(rows))
    written = _run(*args, "-o", str(tmp_path / "out.parquet"), stdin=_jsonl(rows))
    assert lines.returncode == written.returncode == 2
    assert written.stdout == b"" and written.stderr == lines.stderr
    table = pq.read_table(tmp_path / "out.parquet")
    assert table.column_names == [
        *("id", "input_ids", "attention_mask", "assistant_masks", "text", "offsets", "error")
    ]
    for stored, result in zip(table.to_pylist(), _lines(lines.stdout), strict=True):
        ident = result.pop("id")
        assert stored.pop("id") == (
            ident if ident is None or isinstance(ident, str) else str(ident)
        )
        error = result.pop("error", None)
        assert stored.pop("error") == (None if error is None else json.dumps(error))
        assert stored == {name: result.get(name) for name in stored}


def test_a_parquet_output_takes_a_checkpoint(tmp_path: Path) -> None:
    run = _run("-o", str(tmp_path / "out.parquet"), stdin=b"{}\n")
    assert run.returncode == 2
    assert run.stderr.decode().strip() == (
        "chatcodec batch: a Parquet output holds encoded rows: it takes --checkpoint"
    )
    assert not (tmp_path / "out.parquet").exists()


def test_a_parquet_output_without_pyarrow_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(MissingExtraError) as raised:
        EncodedParquet(str(tmp_path / "out.parquet"))
    assert str(raised.value) == (
        f"writing the Parquet file {tmp_path / 'out.parquet'} needs the 'pyarrow' package: "
        "pip install 'chatcodec[data]'"
    )


def test_a_json_lines_null_is_the_rows_own_and_kept(checkpoint: Path) -> None:
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": None}},
    }
    row = {
        "messages": [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
        ]
    }
    run = _run("--checkpoint", str(checkpoint), "--now", str(NOW), "--text", stdin=_jsonl([row]))
    assert run.returncode == 0, run.stderr
    result = _lines(run.stdout)[0]
    assert '"unit": null' in result["text"]
    assert result == _expected(checkpoint, row, text=True)


def test_a_gguf_checkpoint_encodes_in_worker_processes(tmp_path: Path) -> None:
    """Each worker loads the GGUF's vocabulary through llama.cpp, silently."""
    pytest.importorskip("llama_cpp")
    from ._llama import write_chat_model

    template = (ROOT / "examples" / "chatml-tiny" / "chat_template.jinja").read_text("utf-8")
    path = write_chat_model(
        tmp_path / "chat.gguf", template, ["<|im_start|>", "<|im_end|>"], "<s>", "<|im_end|>"
    )
    rows = _rows()
    one = _run("--checkpoint", str(path), "--now", str(NOW), stdin=_jsonl(rows))
    two = _run("--checkpoint", str(path), "--now", str(NOW), "-j", "2", stdin=_jsonl(rows))
    assert one.returncode == two.returncode == 0
    assert one.stderr == two.stderr == b""
    assert one.stdout == two.stdout
    assert [line["input_ids"] for line in _lines(one.stdout)] == [
        _expected(path, row)["input_ids"] for row in rows
    ]
