"""A checkpoint's tokenizer, as ``apply_chat_template(..., tokenize=True)`` applies it.

Two sources: a ``tokenizer.json`` read with the ``tokenizers`` package (extra ``tokenize``),
set up as transformers 5.23.0's ``TokenizersBackend`` sets it up from the folder's
``tokenizer_config.json``; and a GGUF file's own vocabulary, read by llama.cpp (extra
``llama``). Both give token ids, the character range of each token in the text and whether a
token is special, and are picklable (a worker process loads its own copy).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from .errors import MissingExtraError, TokenizerError
from .llamacpp import library
from .tokencache import PieceCache, tokens_of

__all__ = [
    "GGUFTokenizer",
    "JsonTokenizer",
    "Tokenized",
    "Tokenizer",
    "load_tokenizer",
]

TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
SPECIAL_TOKENS_MAP_FILE = "special_tokens_map.json"
# transformers' SPECIAL_TOKENS_ATTRIBUTES, in its order
NAMED_SPECIAL_TOKENS = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)


@dataclass(frozen=True)
class Tokenized:
    """One text's tokens: ids, the ``[start, end)`` characters of each, and the lookup of
    the token holding a character (``None`` for a character no token holds)."""

    ids: list[int]
    offsets: Sequence[tuple[int, int]]
    char_to_token: Callable[[int], int | None]


class Tokenizer(Protocol):
    """What ``Codec.encode`` needs of a tokenizer."""

    def tokenize(self, text: str) -> Tokenized:
        """The tokens of ``text``, no special tokens added around it."""
        ...

    def is_special(self, token_id: int) -> bool:
        """Whether the token is a special (control) token."""
        ...


def load_tokenizer(path: str | os.PathLike[str]) -> Tokenizer:
    """The tokenizer at ``path``: a checkpoint folder (its ``tokenizer.json``, else its one
    GGUF file), a ``tokenizer.json`` file or a ``.gguf`` file."""
    location = Path(path)
    if location.is_dir():
        if (location / TOKENIZER_FILE).is_file():
            return JsonTokenizer(location / TOKENIZER_FILE)
        ggufs = sorted(location.glob("*.gguf"))
        if len(ggufs) == 1:
            return GGUFTokenizer(ggufs[0])
        raise TokenizerError(
            f"no tokenizer in {location}: it has no {TOKENIZER_FILE}"
            + (f" and several GGUF files ({', '.join(p.name for p in ggufs)})" if ggufs else "")
        )
    if location.is_file():
        if location.suffix == ".gguf":
            return GGUFTokenizer(location)
        if location.suffix == ".json":
            return JsonTokenizer(location)
        raise TokenizerError(f"{location} is neither a {TOKENIZER_FILE} nor a .gguf file")
    raise TokenizerError(f"no tokenizer at {location}: no such file or folder")


# --- tokenizer.json -----------------------------------------------------------------------


class JsonTokenizer:
    """``tokenizer.json`` through the ``tokenizers`` package, with the settings of the
    ``tokenizer_config.json`` beside it applied as transformers 5.23.0 applies them at load:
    the config's ``added_tokens_decoder`` added again in id order (flags included), then its
    special tokens the vocabulary lacks, ``split_special_tokens``, no truncation, no padding.

    The tokens of the text between added tokens are kept for texts to come, up to
    ``cache_chars`` characters of such text (the least recently used dropped; 0: none kept).
    The ids and offsets are the same either way (``chatcodec.tokencache`` says why, and when
    nothing is kept because they might not be).
    """

    def __init__(self, path: str | os.PathLike[str], cache_chars: int = 1_000_000) -> None:
        self.path = Path(path)
        self.config = _effective_config(self.path.parent)
        self._backend = _backend(self.path, self.config)
        self._special = frozenset(
            index
            for index, token in self._backend.get_added_tokens_decoder().items()
            if token.special
        )
        self.cache_chars = cache_chars
        self.cache = PieceCache.for_backend(self._backend, cache_chars)

    def __repr__(self) -> str:
        return f"<JsonTokenizer {self.path}>"

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "cache_chars": self.cache_chars}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"], state["cache_chars"])  # type: ignore[misc]

    @property
    def backend(self) -> Any:
        """The ``tokenizers.Tokenizer`` (read only: changing it changes every encode)."""
        return self._backend

    def tokenize(self, text: str) -> Tokenized:
        if self.cache is not None:
            return Tokenized(*self.cache.tokenize(text))
        return Tokenized(*tokens_of(self._backend.encode(text, add_special_tokens=False)))

    def is_special(self, token_id: int) -> bool:
        return token_id in self._special


def _json_object(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise TokenizerError(f"cannot read {path}: {error}") from None
    if not isinstance(data, dict):
        raise TokenizerError(f"{path} holds a JSON {type(data).__name__}, not an object")
    return data


def _effective_config(folder: Path) -> dict[str, Any]:
    """``tokenizer_config.json`` with, when it has no ``added_tokens_decoder``, the legacy
    ``special_tokens_map.json`` over its special tokens (transformers' rule)."""
    config_path = folder / TOKENIZER_CONFIG_FILE
    config = _json_object(config_path) if config_path.is_file() else {}
    legacy = folder / SPECIAL_TOKENS_MAP_FILE
    if "added_tokens_decoder" not in config and legacy.is_file():
        for key, value in _json_object(legacy).items():
            if isinstance(value, dict) and key != "extra_special_tokens":
                fields = {k: v for k, v in value.items() if k not in ("special", "__type")}
                value = {"__type": "AddedToken", **fields, "special": True}
            config[key] = value
    return config


def _backend(path: Path, config: Mapping[str, Any]) -> Any:
    try:
        import tokenizers
    except ImportError:
        raise MissingExtraError(
            "tokenizers", "tokenize", "tokenizing with tokenizer.json"
        ) from None
    try:
        backend = tokenizers.Tokenizer.from_file(str(path))
    except Exception as error:  # the Rust parser reports a bad file in its own words
        raise TokenizerError(f"{path} is not a readable tokenizer.json: {error}") from None
    backend.no_truncation()  # apply_chat_template calls it with truncation and padding off
    backend.no_padding()
    backend.encode_special_tokens = bool(config.get("split_special_tokens", False))
    try:
        tokens = _tokens_to_add(backend, config, tokenizers.AddedToken)
    except (TypeError, ValueError) as error:
        raise TokenizerError(
            f"the added tokens of {path.parent / TOKENIZER_CONFIG_FILE}: {error}"
        ) from None
    if tokens:
        backend.add_tokens(tokens)
    return backend


def _added_token(value: Any, make: Callable[..., Any]) -> Any:
    """A config entry as transformers reads it: a serialized AddedToken becomes one."""
    if isinstance(value, dict) and value.get("__type") == "AddedToken":
        return make(**{k: v for k, v in value.items() if k != "__type"})
    return value


def _tokens_to_add(backend: Any, config: Mapping[str, Any], make: Callable[..., Any]) -> list[Any]:
    """The tokens ``TokenizersBackend.__init__`` adds to the backend: every entry of the
    config's ``added_tokens_decoder`` (its check for those already there never matches, so
    all are added again, their flags replacing the file's), then the special tokens, named,
    model-specific and extra, that are neither in the vocabulary's added tokens nor added."""
    decoder = config.get("added_tokens_decoder")
    entries = decoder.items() if isinstance(decoder, dict) else ()
    to_add = [
        make(**{k: v for k, v in entry.items() if k != "__type"})
        for _, entry in sorted(entries, key=lambda item: int(item[0]))
    ]
    by_text = {str(token): token for token in to_add}
    known = [token.content for token in backend.get_added_tokens_decoder().values()]
    known += [str(token) for token in to_add]
    named = _special_token_values(config, make)
    for key, value in named:
        if key in NAMED_SPECIAL_TOKENS and by_text:
            value = by_text.get(str(value), value)  # the config's own AddedToken of that text
        if str(value) not in known and value not in to_add:
            to_add.append(value)
    named_texts = {str(value) for key, value in named if value and key != "extra_special_tokens"}
    tokens = []
    for token in to_add:
        if isinstance(token, str):
            token = make(token, special=True)
        elif not token.special and str(token) in named_texts:
            token.special = True
        tokens.append(token)
    return tokens


def _special_token_values(
    config: Mapping[str, Any], make: Callable[..., Any]
) -> list[tuple[str, Any]]:
    """(name, token) of the special tokens transformers keeps: the named ones, the
    model-specific ``*_token`` entries, then the ``extra_special_tokens`` list."""
    found: list[tuple[str, Any]] = []
    for key in NAMED_SPECIAL_TOKENS:
        value = _added_token(config.get(key), make)
        if isinstance(value, str) or _is_added(value, make):
            found.append((key, value))
    extra = config.get("extra_special_tokens", config.get("additional_special_tokens"))
    specific = {
        key: _added_token(value, make)
        for key, value in config.items()
        if key.endswith("_token") and key not in NAMED_SPECIAL_TOKENS
    }
    if isinstance(extra, dict):
        specific.update({k: _added_token(v, make) for k, v in extra.items()})
    for key, value in specific.items():
        if isinstance(value, str) or _is_added(value, make):
            found.append((key, value))
    if isinstance(extra, (list, tuple)):
        for value in extra:
            token = _added_token(value, make)
            if isinstance(token, str) or _is_added(token, make):
                found.append(("extra_special_tokens", token))
    return found


def _is_added(value: Any, make: Callable[..., Any]) -> bool:
    return isinstance(value, make)  # type: ignore[arg-type]


# --- GGUF -------------------------------------------------------------------------------


class GGUFTokenizer:
    """A GGUF file's vocabulary, tokenized by llama.cpp as its server tokenizes a prompt:
    special tokens parsed, no BOS added."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        llama_cpp = library(f"tokenizing with the vocabulary of {self.path}")
        self._llama_cpp = llama_cpp
        # the vocabulary alone: no weights, no context (whose setup only warns)
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = True
        self._model = llama_cpp.llama_model_load_from_file(str(self.path).encode(), params)
        if not self._model:
            raise TokenizerError(f"llama.cpp cannot read the vocabulary of {self.path}")
        self._free = llama_cpp.llama_model_free
        self._vocab = llama_cpp.llama_model_get_vocab(self._model)
        self._pieces: dict[int, bytes] = {}

    def __del__(self) -> None:
        model = getattr(self, "_model", None)
        if model:
            self._free(model)
            self._model = None

    def __repr__(self) -> str:
        return f"<GGUFTokenizer {self.path}>"

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"])  # type: ignore[misc]

    def piece(self, token_id: int) -> bytes:
        """The bytes llama.cpp writes for a token, special tokens as their text."""
        piece = self._pieces.get(token_id)
        if piece is None:
            size = 64
            while True:
                buffer = (self._llama_cpp.ctypes.c_char * size)()
                n = self._llama_cpp.llama_token_to_piece(
                    self._vocab, token_id, buffer, size, 0, True
                )
                if n >= 0:
                    piece = buffer.raw[:n]
                    break
                size = -n
            self._pieces[token_id] = piece
        return piece

    def tokenize(self, text: str) -> Tokenized:
        data = text.encode("utf-8")
        ids = self._ids(data) if data else []
        offsets = _piece_offsets(text, data, [self.piece(i) for i in ids])
        return Tokenized(ids, offsets, _first_holder(offsets))

    def is_special(self, token_id: int) -> bool:
        return bool(self._llama_cpp.llama_vocab_is_control(self._vocab, token_id))

    def _ids(self, data: bytes) -> list[int]:
        """llama.cpp's tokens of ``data``: special tokens parsed, none added."""
        llama_cpp = self._llama_cpp
        size = len(data) + 8
        while True:
            buffer = (llama_cpp.llama_token * size)()
            count = llama_cpp.llama_tokenize(
                self._vocab, data, len(data), buffer, size, False, True
            )
            if count >= 0:
                return list(buffer[:count])
            size = -count  # (the buffer was too small: the count it needs)


def _piece_offsets(text: str, data: bytes, pieces: Sequence[bytes]) -> list[tuple[int, int]]:
    """The character range of each token, from the bytes its piece spells in ``data`` (the
    text's UTF-8). A token holding part of a character's bytes is given that whole character,
    as ``tokenizers`` does; bytes no character holds (the space a SentencePiece vocabulary puts
    first, a space spelled as ``▁`` by byte tokens) give a token an empty range."""
    char_at = [0] * (len(data) + 1)  # the character of each byte, and len(text) at the end
    position = 0
    for index, char in enumerate(text):
        width = len(char.encode("utf-8"))
        char_at[position : position + width] = [index] * width
        position += width
    char_at[len(data)] = len(text)
    where = _spelled_positions(b"".join(pieces), data)
    offsets = []
    at = reached = 0
    for piece in pieces:
        held = [p for p in where[at : at + len(piece)] if p is not None]
        at += len(piece)
        if held:
            offsets.append((char_at[min(held)], char_at[max(held)] + 1))
            reached = max(held) + 1
        else:
            offsets.append((char_at[reached], char_at[reached]))
    return offsets


def _spelled_positions(spelled: bytes, data: bytes) -> list[int | None]:
    """For each byte the tokens spell, the byte of ``data`` it stands for (None: none)."""
    if spelled == data:
        return list(range(len(data)))
    extra = len(spelled) - len(data)
    if extra > 0 and spelled.endswith(data) and spelled[:extra].isspace():
        return [None] * extra + list(range(len(data)))
    import difflib  # only for vocabularies whose pieces do not spell the text back

    where: list[int | None] = [None] * len(spelled)
    matcher = difflib.SequenceMatcher(None, spelled, data, autojunk=False)
    for a, b, size in matcher.get_matching_blocks():
        where[a : a + size] = range(b, b + size)
    return where


def _first_holder(offsets: Sequence[tuple[int, int]]) -> Callable[[int], int | None]:
    """``char_to_token`` over offsets, as ``tokenizers`` answers it: the first token whose
    range holds the character."""

    def char_to_token(char: int) -> int | None:
        for index, (start, end) in enumerate(offsets):
            if start <= char < end:
                return index
        return None

    return char_to_token
