"""Encoders for dataset libraries: Hugging Face ``datasets`` and Ray Data (issue 11).

``DatasetEncoder`` is a picklable callable for ``Dataset.map(encoder, batched=True,
num_proc=N)``: it carries the recipe of its Codec (a path and options), never the compiled
templates or the tokenizer, and each process loads the checkpoint once, on its first batch.
``RayEncoder`` is the same encoder as a class for Ray Data's ``map_batches``
(``ds.map_batches(RayEncoder, fn_constructor_kwargs={...}, concurrency=N)``): Ray builds it
once per worker, and it loads the checkpoint in its constructor.

Both read a batch's ``messages`` column (and ``tools``, ``documents`` and a row's own
template variables ``chat_template_kwargs`` when the dataset has them) and give
``input_ids``, ``attention_mask`` and ``assistant_masks`` per row (and ``text`` with
``text=True``, each token's ``[start, end)`` in it with ``offsets=True``), as
``Codec.encode`` computes them. A column's type pads the fields one message lacks with
nulls (``"tool_calls": None`` on a user message, in Arrow and so in both libraries); the
encoders drop null fields before rendering, so a row renders as the JSON record it was
written from. A column of JSON text is decoded. ``chatcodec batch --checkpoint`` encodes
with the same encoder, a result line per row (a JSON line's nulls kept: they are its own).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .datafiles import decode_json_columns, without_nulls
from .errors import RequestError
from .recipe import CodecRecipe

if TYPE_CHECKING:
    from .codec import Codec
    from .encoding import Encoding

__all__ = ["DatasetEncoder", "RayEncoder"]

_COLUMNS = ("messages", "tools", "documents", "chat_template_kwargs")
# what a row's chat_template_kwargs cannot set: Codec.encode's own keywords
_ENCODE_KEYWORDS = frozenset(
    {"self", "messages", "tools", "documents", "add_generation_prompt", "mask_end_marker"}
    | {"mask_reasoning", "tokenizer", "now", "template_name"}
)


class DatasetEncoder:
    """``encoder(batch) -> {"input_ids": [...], "attention_mask": [...],
    "assistant_masks": [...]}`` for a batch of rows (a mapping of column -> list of values).

    ``checkpoint`` is what ``chatcodec.load`` takes (a folder with ``tokenizer.json``, a
    GGUF file, a cached repo id), or a Codec (it pickles without its compiled templates and
    its tokenizer reloads from its path); ``tokenizer`` overrides a checkpoint's tokenizer;
    ``text`` and ``offsets`` add those columns; the other keywords are ``Codec.encode``'s
    (``add_generation_prompt``, ``mask_end_marker``, ``mask_reasoning``, ``now`` and
    template variables), the same for every row. A row's ``chat_template_kwargs`` (an
    object, or JSON text) adds its own template variables over them.
    """

    def __init__(
        self,
        checkpoint: str | os.PathLike[str] | Codec,
        *,
        template_name: str | None = None,
        tokenizer: str | None = None,
        bos_token: str | None = None,
        eos_token: str | None = None,
        text: bool = False,
        offsets: bool = False,
        **options: Any,
    ) -> None:
        self.text = text
        self.offsets = offsets
        self.options = options
        self.given: Codec | None = None
        self.recipe: CodecRecipe | None = None
        if isinstance(checkpoint, (str, os.PathLike)):
            self.recipe = CodecRecipe(
                os.fspath(checkpoint), template_name, bos_token, eos_token, tokenizer
            )
        else:
            self.given = checkpoint
        self._codec: Codec | None = self.given

    def __repr__(self) -> str:
        where = self.recipe.checkpoint if self.recipe is not None else self.given
        return f"{type(self).__name__}({where!r})"

    def __getstate__(self) -> dict[str, Any]:
        # the recipe (or the Codec, which pickles lean) and options: no loaded state
        return {
            "recipe": self.recipe,
            "given": self.given,
            "text": self.text,
            "offsets": self.offsets,
            "options": self.options,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._codec = self.given

    @property
    def codec(self) -> Codec:
        """The Codec of this process (loaded on first use)."""
        if self._codec is None:
            if self.recipe is None:  # unreachable: a Codec given is kept
                raise RuntimeError("a DatasetEncoder without a Codec or a checkpoint")
            self._codec = self.recipe.build()
        return self._codec

    def encoding(self, row: Mapping[str, Any], padded: bool = True) -> Encoding:
        """The Encoding of one row (``messages``, and ``tools``, ``documents``,
        ``chat_template_kwargs`` when it has them). ``padded``: the row is a table's, whose
        struct columns pad the fields a value lacks with nulls (dropped, at every depth);
        a JSON record's nulls are its own (``"until": null`` in a call's arguments) and are
        kept. A row the encoder cannot read (no messages list, a column of text that is not
        JSON, tools or documents that are not lists, variables that are not an object or
        that set an option of ``Codec.encode``) raises RequestError."""
        record = {
            name: without_nulls(row[name]) if padded else row[name]
            for name in _COLUMNS
            if name in row
        }
        problem = decode_json_columns(record)
        if problem:
            raise RequestError(problem)
        messages = record.get("messages")
        if not isinstance(messages, (list, tuple)):
            raise RequestError("the row has no 'messages' list")
        variables = record.get("chat_template_kwargs") or {}
        if not isinstance(variables, Mapping):
            raise RequestError(
                f"chat_template_kwargs must be an object, not {type(variables).__name__}"
            )
        taken = sorted(variables.keys() & _ENCODE_KEYWORDS)
        if taken:
            raise RequestError(f"chat_template_kwargs cannot set {taken[0]!r}: an encode option")
        return self.codec.encode(
            list(messages),
            _as_list(record, "tools"),
            _as_list(record, "documents"),
            **{**self.options, **variables},
        )

    def encode_row(self, row: Mapping[str, Any], padded: bool = True) -> dict[str, Any]:
        """One row -> its encoding's dict (``encoding``; ``text``, ``offsets`` as asked)."""
        encoding = self.encoding(row, padded)
        found = encoding.to_dict(text=self.text)
        if self.offsets:
            found["offsets"] = [list(pair) for pair in encoding.offsets]
        return found

    def __call__(self, batch: Mapping[str, Sequence[Any]]) -> dict[str, list[Any]]:
        columns = [name for name in _COLUMNS if name in batch]
        if "messages" not in columns:
            raise KeyError("the batch has no 'messages' column")
        size = len(batch["messages"])
        names = ["input_ids", "attention_mask", "assistant_masks"]
        names += ["text"] * self.text + ["offsets"] * self.offsets
        out: dict[str, list[Any]] = {name: [] for name in names}
        for index in range(size):
            row = self.encode_row({name: batch[name][index] for name in columns})
            for name in names:
                out[name].append(row[name])
        return out


class RayEncoder(DatasetEncoder):
    """``DatasetEncoder`` for Ray Data's ``map_batches``: constructed once per worker, it
    loads the checkpoint at once. Pass ``batch_format="pyarrow"``: the rows reach it as
    stored. Ray's default numpy format (and pandas) turn an integer of a column with gaps into
    a float (``3`` renders as ``3.0``); such batches are read as well as they can be. The
    result is a pyarrow Table (the token lists are ragged: Arrow list columns hold them)."""

    def __init__(self, checkpoint: str | os.PathLike[str] | Codec, **options: Any) -> None:
        super().__init__(checkpoint, **options)
        _ = self.codec  # built once per worker, before the first batch

    def __call__(self, batch: Any) -> Any:  # type: ignore[override]
        import pyarrow

        if isinstance(batch, pyarrow.Table):  # batch_format="pyarrow": the values as stored
            return pyarrow.Table.from_pydict(super().__call__(batch.to_pydict()))
        if hasattr(batch, "to_dict") and hasattr(batch, "columns"):  # a pandas DataFrame
            batch = {name: list(batch[name]) for name in batch.columns}
        rows = {name: [_plain(v) for v in values] for name, values in batch.items()}
        return pyarrow.Table.from_pydict(super().__call__(rows))


def _plain(value: Any) -> Any:
    """Python lists and dicts from what a batch format holds (numpy arrays of objects)."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)) or type(value).__name__ == "ndarray":
        return [_plain(v) for v in value]
    if hasattr(value, "item") and type(value).__module__ == "numpy":
        value = value.item()  # a numpy scalar
    if isinstance(value, float) and value != value:
        return None  # a missing value of a numpy or pandas column is NaN
    return value


def _as_list(record: Mapping[str, Any], name: str) -> list[Any] | None:
    """The row's ``name`` column as a list (None when absent); RequestError when it is not
    a list (a number, an object, a string that was no JSON list)."""
    value = record.get(name)
    if value is None:
        return None
    if not isinstance(value, (list, tuple)):
        raise RequestError(f"the row's {name} must be a list, not {type(value).__name__}")
    return list(value)
