"""Checkpoint folders with a real tokenizer, made by the tests: a small byte-level BPE trained
once per session with the ``tokenizers`` package, and per template the special tokens its
text writes added as added tokens, saved as ``tokenizer.json`` + ``tokenizer_config.json``
(the template in it) — what transformers' ``AutoTokenizer.from_pretrained`` loads.

Which of a template's marker strings become added tokens: ``<|...|>``, ``<｜...｜>``, ``[...]``
words in capitals and ``<word|>``/``<|word>`` halves are special tokens (``special=True``, as
checkpoints ship them); ``<tag>``/``</tag>`` words are added tokens that are not special (as
Qwen ships ``<think>``). The ``bos``/``eos`` strings the render corpus passes are special too.
Needs the ``tokenizers`` package (imported on use: benchmarks/encode.py writes its checkpoints
with this module too).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

VOCAB_SIZE = 1200
# a sample of what conversations hold: words, numbers, JSON, code, accents, CJK, emoji
TRAINING_TEXT = """\
The quick brown fox jumps over the lazy dog. What is the weather like in Paris today?
It is sunny, 22 degrees. {"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}
def add(a: int, b: int) -> int:\n    return a + b\n\nCafé crème, naïve façade — déjà vu.
你好，世界。こんにちは。Привет, мир! 🙂 🚀 Let me think step by step. First, 2 + 2 = 4.
You are a helpful assistant. Here is the answer: 42. Tool result: {"temperature": 21.5}
"""

_SPECIAL = re.compile(
    r"<\|[^\s|<>]{1,48}\|>|<｜[^｜\s]{1,48}｜>|\[/?[A-Z][A-Z_]{1,30}\]|<[a-z_]{2,24}\|>|<\|[a-z_]{2,24}>"
)
_TAG = re.compile(r"</?[A-Za-z][\w:-]{1,30}>")


@functools.lru_cache(maxsize=2)
def base_tokenizer_json(kind: str = "byte_level") -> str:
    """The trained BPE (no added tokens) as tokenizer.json text, trained once per kind:
    ``byte_level`` (GPT-2, Llama 3, Qwen) or ``metaspace`` (SentencePiece-style, ``▁`` for
    spaces and one put before the text, as Llama 2 and Mistral's tokenizers)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>" if kind == "metaspace" else None))
    if kind == "metaspace":
        tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first")
        tokenizer.decoder = decoders.Metaspace(prepend_scheme="first")
        alphabet = sorted(set(TRAINING_TEXT.replace(" ", "▁")) | set("▁<>|[]/_{}"))
        special = ["<unk>"]
    else:
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
        alphabet = pre_tokenizers.ByteLevel.alphabet()
        special = []
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        initial_alphabet=alphabet,
        special_tokens=special,
        show_progress=False,
    )
    tokenizer.train_from_iterator([TRAINING_TEXT] * 3, trainer=trainer)
    return tokenizer.to_str()


def marker_tokens(source: str, special: Iterable[str] = ()) -> tuple[list[str], list[str]]:
    """(special tokens, other added tokens) a template's text writes."""
    found = list(dict.fromkeys([*special, *_SPECIAL.findall(source)]))
    tags = [t for t in dict.fromkeys(_TAG.findall(source)) if t not in found]
    return [t for t in found if t], tags


def write_checkpoint(
    folder: Path,
    template: str,
    special_tokens: Mapping[str, str] | None = None,
    config: Mapping[str, Any] | None = None,
    kind: str = "byte_level",
    base: str | None = None,
) -> Path:
    """A checkpoint folder: the trained BPE (or ``base``, a tokenizer.json text) plus the
    template's markers as added tokens."""
    from tokenizers import AddedToken, Tokenizer

    named = {k: v for k, v in (special_tokens or {}).items() if isinstance(v, str) and v}
    special, tags = marker_tokens(template, named.values())
    tokenizer = Tokenizer.from_str(base or base_tokenizer_json(kind))
    tokenizer.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in special])
    tokenizer.add_tokens([AddedToken(t, normalized=False, special=False) for t in tags])
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    decoder = {
        str(index): _fields(token)
        for index, token in sorted(tokenizer.get_added_tokens_decoder().items())
    }
    settings: dict[str, Any] = {
        "tokenizer_class": "TokenizersBackend",
        "added_tokens_decoder": decoder,
        "chat_template": template,
        **named,
        **(config or {}),
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(settings), encoding="utf-8")
    return folder


def _fields(token: Any) -> dict[str, Any]:
    names = ("content", "lstrip", "normalized", "rstrip", "single_word", "special")
    return {name: getattr(token, name) for name in names}
