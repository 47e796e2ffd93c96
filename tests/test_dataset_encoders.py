"""The dataset encoders (issue 11, at dataset scale): ``DatasetEncoder`` under
``datasets.Dataset.map(batched=True, num_proc=2)`` and ``RayEncoder`` under Ray Data's
``map_batches`` on a local Ray instance give, row for row, what one process gives with
``Codec.encode``. The checkpoint is a folder written by the tests (tests/_tokenizer.py)."""

from __future__ import annotations

import json
import pickle
import warnings
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from chatcodec import load
from chatcodec.data import DatasetEncoder, RayEncoder
from chatcodec.datafiles import without_nulls

from ._tokenizer import write_checkpoint
from .conftest import read_jsonl, shared_path, template_source

pytest.importorskip("tokenizers")

TEMPLATE = "Qwen-Qwen2.5-7B-Instruct.jinja"
NOW = 1741165623


@cache
def _rows() -> list[dict[str, Any]]:
    """The corpus's rendered conversations of the template, tools as JSON text (a JSON
    schema's fields differ per tool: a table holds them as text)."""
    rows = []
    for case in read_jsonl(shared_path("oracle", "render", "expectations.jsonl")):
        if case["template"] != TEMPLATE or "error" in case or case["continue_final_message"]:
            continue
        if case["kwargs"].get("enable_thinking") is not None:
            continue
        tools = json.dumps(case["tools"]) if case["tools"] else None
        rows.append({"id": case["id"], "messages": case["messages"], "tools": tools})
    return rows


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = tmp_path_factory.mktemp("qwen25")
    write_checkpoint(folder, template_source(TEMPLATE), {"eos_token": "<|im_end|>"})
    return str(folder)


def _single(checkpoint: str, rows: list[dict[str, Any]], text: bool = False) -> list[dict]:
    codec = load(checkpoint)
    out = []
    for row in rows:
        tools = json.loads(row["tools"]) if row.get("tools") else None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            encoding = codec.encode(without_nulls(row["messages"]), tools, now=NOW)
        out.append(encoding.to_dict(text=text))
    return out


def test_the_encoder_pickles_without_its_codec(checkpoint: str) -> None:
    encoder = DatasetEncoder(checkpoint, now=NOW, text=True)
    batch = {"messages": [r["messages"] for r in _rows()[:3]], "tools": [None] * 3}
    first = encoder(batch)
    copy = pickle.loads(pickle.dumps(encoder))
    assert len(pickle.dumps(encoder)) < 1000  # the recipe, not the tokenizer
    assert copy(batch) == first
    assert [
        dict(zip(first, values, strict=True)) for values in zip(*first.values(), strict=True)
    ] == [{**row} for row in _single(checkpoint, [{**r, "tools": None} for r in _rows()[:3]], True)]


def test_an_encoder_of_a_codec_pickles_and_encodes_the_same(checkpoint: str) -> None:
    batch = {
        "messages": [r["messages"] for r in _rows()[:3]],
        "tools": [r["tools"] for r in _rows()[:3]],
    }
    encoder = DatasetEncoder(load(checkpoint), now=NOW)
    copy = pickle.loads(pickle.dumps(encoder))
    assert copy(batch) == encoder(batch) == DatasetEncoder(checkpoint, now=NOW)(batch)


def test_a_missing_messages_column_is_named(checkpoint: str) -> None:
    with pytest.raises(KeyError, match="no 'messages' column"):
        DatasetEncoder(checkpoint)({"conversation": [[]]})


def _one_type(row: dict[str, Any]) -> bool:
    """Arrow holds a column of one type: text content and object arguments throughout (the
    corpus mixes typed blocks and JSON-text arguments in, which a table keeps as JSON text)."""
    for message in row["messages"]:
        if not isinstance(message.get("content"), (str, type(None))):
            return False
        for call in message.get("tool_calls") or []:
            if not isinstance(call["function"]["arguments"], dict):
                return False
    return True


def test_datasets_map_with_two_processes_equals_one_process(checkpoint: str) -> None:
    datasets = pytest.importorskip("datasets")
    rows = [row for row in _rows() if _one_type(row)]
    assert len(rows) >= 20
    dataset = datasets.Dataset.from_list(rows)
    held = dataset.to_list()  # what the table holds: Arrow's null padding in the messages
    assert any(None in m.values() for row in held for m in row["messages"])
    encoder = DatasetEncoder(checkpoint, now=NOW)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mapped = dataset.map(
            encoder, batched=True, batch_size=4, num_proc=2, load_from_cache_file=False
        )
    expected = _single(checkpoint, rows)
    columns = ("input_ids", "attention_mask", "assistant_masks")
    got = [{name: row[name] for name in columns} for row in mapped.to_list()]
    assert got == expected
    assert [row["id"] for row in mapped.to_list()] == [row["id"] for row in rows]
    assert any(1 in row["assistant_masks"] for row in got)


def test_ray_data_map_batches_equals_one_process(checkpoint: str) -> None:
    ray = pytest.importorskip("ray")
    pytest.importorskip("ray.data")
    rows = [row for row in _rows() if _one_type(row)]
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        context = ray.data.DataContext.get_current()
        context.execution_options.preserve_order = True
        dataset = ray.data.from_items(rows)
        encoded = dataset.map_batches(
            RayEncoder,
            fn_constructor_kwargs={"checkpoint": checkpoint, "now": NOW, "text": True},
            batch_size=4,
            batch_format="pyarrow",
            concurrency=2,
        )
        got = encoded.take_all()
    finally:
        ray.shutdown()
    expected = _single(checkpoint, rows, text=True)
    assert len(got) == len(expected)
    for row, want in zip(got, expected, strict=True):
        assert {name: _list(row[name]) for name in want} == want


def _list(value: Any) -> Any:
    return value if isinstance(value, str) else [int(v) for v in value]


def test_the_null_padding_of_a_table_is_dropped(checkpoint: str) -> None:
    rows = _rows()
    padded = [
        {**row, "messages": [{"tool_calls": None, "name": None, **m} for m in row["messages"]]}
        for row in rows[:6]
    ]
    encoder = DatasetEncoder(checkpoint, now=NOW)
    batch = {"messages": [r["messages"] for r in padded], "tools": [r["tools"] for r in padded]}
    got = encoder(batch)
    assert got["input_ids"] == [row["input_ids"] for row in _single(checkpoint, rows[:6])]


def test_rows_of_json_text_are_read(checkpoint: str, tmp_path: Path) -> None:
    rows = _rows()[:4]
    batch = {
        "messages": [json.dumps(r["messages"]) for r in rows],
        "tools": [r["tools"] for r in rows],
    }
    assert DatasetEncoder(checkpoint, now=NOW)(batch)["input_ids"] == [
        row["input_ids"] for row in _single(checkpoint, rows)
    ]
