"""Records of a dataset: JSON Lines (files or stdin) and Parquet (with ``pyarrow``).

``read_records(paths)`` yields ``(record, "")`` per JSON object or Parquet row, in file
order, or ``(None, why)`` for a line that cannot be read as a JSON object, so that a caller
answers it at its position and goes on. ``-`` is stdin (JSON Lines). A file whose name ends
in ``.parquet`` (or ``.pq``) is read as Parquet, row group by row group.

A Parquet row has every field of its column's type: a struct column padded the fields one
message lacks with nulls (``"tool_calls": null`` on a user message), where the JSON record
had no such key. Templates tell the two apart (``message.tool_calls is defined``), so a
null field of a Parquet row is dropped, at every depth: it reads as the JSON record it was
written from. A ``messages``, ``tools``, ``documents`` or ``chat_template_kwargs`` column of
JSON text (a common way to store ragged data in a table) is decoded.

``EncodedParquet`` writes the result lines of a dataset's encoding (``chatcodec batch
--checkpoint -o FILE.parquet``) as Parquet, a row group at a time.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import IO, Any

from .errors import MissingExtraError

__all__ = [
    "EncodedParquet",
    "count_records",
    "is_parquet",
    "json_records",
    "decode_json_columns",
    "read_records",
    "without_nulls",
]

_PARQUET_SUFFIXES = (".parquet", ".pq")
_JSON_TEXT_COLUMNS = ("messages", "tools", "documents", "chat_template_kwargs")


def is_parquet(path: str) -> bool:
    return path != "-" and path.lower().endswith(_PARQUET_SUFFIXES)


def read_records(
    paths: Sequence[str], stdin: IO[bytes] | None = None, decode: bool = True
) -> Iterator[tuple[dict[str, Any] | None, str]]:
    """Every record of ``paths`` in order (``[]`` or ``["-"]``: stdin). A problem names the
    line (and the file, for a named one); a file that cannot be opened raises OSError.
    ``decode``: a Parquet row's columns of JSON text are decoded (``decode_json_columns``),
    else left for the reader to decode once, as a JSON line's are."""
    for path in paths or ["-"]:
        if is_parquet(path):
            yield from _parquet_records(path, decode)
        elif path == "-":
            yield from json_records(stdin if stdin is not None else sys.stdin.buffer)
        else:
            with open(path, "rb") as stream:
                yield from json_records(stream, f"{path}: ")


def count_records(paths: Sequence[str]) -> int | None:
    """How many records ``paths`` hold (a progress bar's total), or None when one of them is
    stdin. Counts lines, blank ones included: an upper bound for JSON Lines."""
    total = 0
    for path in paths or ["-"]:
        if path == "-":
            return None
        if is_parquet(path):
            with _unreadable(path):
                total += _parquet_module(path).ParquetFile(path).metadata.num_rows
            continue
        with open(path, "rb") as stream:
            ends = 0
            last = b"\n"
            for block in iter(lambda: stream.read(1 << 20), b""):
                ends += block.count(b"\n")
                last = block[-1:]
            total += ends + (last != b"\n")
    return total


def _not_json(constant: str) -> float:
    """NaN and Infinity: Python reads them, JSON has no such values (nor can a result line
    carry them back)."""
    raise ValueError(f"{constant} is not a JSON value")


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"the number {text[:40]} is beyond the range of a double")
    return value


def json_records(
    stream: Iterable[bytes], where: str = ""
) -> Iterator[tuple[dict[str, Any] | None, str]]:
    """(record, "") per JSON line, or (None, why) for a line that is not a JSON object;
    blank lines are skipped."""
    for number, raw in enumerate(stream, 1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            yield None, f"{where}line {number} is not UTF-8 text ({exc.reason} at byte {exc.start})"
            continue
        if not line.strip():
            continue
        try:
            record = json.loads(line, parse_constant=_not_json, parse_float=_finite)
        except json.JSONDecodeError as exc:
            yield None, f"{where}line {number} is not valid JSON: {exc}"
            continue
        except RecursionError:
            yield None, f"{where}line {number} nests too deeply to read"
            continue
        except ValueError as exc:  # NaN, infinity, an integer too long to convert
            yield None, f"{where}line {number} cannot be read: {exc}"
            continue
        if not isinstance(record, dict):
            yield None, f"{where}line {number} is not a JSON object"
            continue
        yield record, ""


def _parquet_module(path: str, doing: str = "reading") -> Any:
    try:
        import pyarrow.parquet
    except ImportError:
        raise MissingExtraError("pyarrow", "data", f"{doing} the Parquet file {path}") from None
    return pyarrow.parquet


@contextmanager
def _unreadable(path: str) -> Iterator[None]:
    """pyarrow's failures to read the Parquet file ``path`` (not Parquet, truncated, a page
    that does not decode) as an OSError naming the file, as an unreadable JSON Lines file
    is: the command line's usage error, exit status 2."""
    import pyarrow

    try:
        yield
    except (OSError, pyarrow.ArrowException) as exc:
        if isinstance(exc, OSError) and exc.filename is not None:
            raise
        if isinstance(exc, OSError) and exc.errno:  # the file's own (not there, no access)
            raise OSError(exc.errno, os.strerror(exc.errno), path) from None
        why = " ".join(str(exc).split()) or type(exc).__name__
        raise OSError(None, f"not valid Parquet ({why})", path) from None


def _parquet_records(path: str, decode: bool) -> Iterator[tuple[dict[str, Any] | None, str]]:
    parquet = _parquet_module(path)
    number = 0
    with _unreadable(path):  # (a yield here is resumed by next(): nothing is thrown into it)
        for batch in parquet.ParquetFile(path).iter_batches(batch_size=1024):
            for row in batch.to_pylist():
                number += 1
                record = without_nulls(row)
                problem = decode_json_columns(record) if decode else ""
                if problem:
                    yield None, f"{path}: row {number}: {problem}"
                else:
                    yield record, ""


def without_nulls(value: Any) -> Any:
    """``value`` with the null fields of its mappings dropped, at every depth (what a table
    column's type padded a record with)."""
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nulls(v) for v in value]
    return value


def decode_json_columns(record: dict[str, Any]) -> str:
    """Decode the messages, tools, documents and chat_template_kwargs held as JSON text in
    place; what was not JSON ("" when all was)."""
    for name in _JSON_TEXT_COLUMNS:
        text = record.get(name)
        if isinstance(text, str):
            try:
                record[name] = json.loads(text, parse_constant=_not_json, parse_float=_finite)
            except (ValueError, RecursionError) as exc:
                return f"the {name} column holds text that is not JSON ({exc})"
    return ""


class EncodedParquet:
    """Encoded rows (``{"id", "input_ids", "attention_mask", "assistant_masks"}``, with
    ``text`` and ``offsets`` when asked, or ``{"id", "error"}``) written to a Parquet file in
    row groups of ``group`` rows: ``id`` as text (an id that is not a string as its JSON
    text: a column holds one type), the token columns as lists of int32 (masks int8,
    ``offsets`` pairs of int32), and ``error`` the error object's JSON text, null for a row
    encoded (whose token columns are null in an error row)."""

    def __init__(
        self, path: str, text: bool = False, offsets: bool = False, group: int = 1024
    ) -> None:
        parquet = _parquet_module(path, "writing")
        import pyarrow

        fields = [
            ("id", pyarrow.string()),
            ("input_ids", pyarrow.list_(pyarrow.int32())),
            ("attention_mask", pyarrow.list_(pyarrow.int8())),
            ("assistant_masks", pyarrow.list_(pyarrow.int8())),
        ]
        if text:
            fields.append(("text", pyarrow.string()))
        if offsets:
            fields.append(("offsets", pyarrow.list_(pyarrow.list_(pyarrow.int32(), 2))))
        fields.append(("error", pyarrow.string()))
        self._schema = pyarrow.schema(fields)
        self._table = pyarrow.Table.from_pylist
        self._writer = parquet.ParquetWriter(path, self._schema)
        self._rows: list[dict[str, Any]] = []
        self._group = group

    def write(self, result: dict[str, Any]) -> None:
        row = dict(result)
        ident = row.get("id")
        row["id"] = ident if ident is None or isinstance(ident, str) else json.dumps(ident)
        if "error" in row:
            row["error"] = json.dumps(row["error"], ensure_ascii=False)
        self._rows.append(row)
        if len(self._rows) >= self._group:
            self.flush()

    def flush(self) -> None:
        if self._rows:
            self._writer.write_table(self._table(self._rows, schema=self._schema))
            self._rows = []

    def close(self) -> None:
        self.flush()
        self._writer.close()
