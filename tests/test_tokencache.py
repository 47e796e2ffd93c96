"""The piece cache (chatcodec.tokencache): the tokens of the text between added tokens, kept
for the texts to come, give exactly what the ``tokenizers`` encode of the whole text gives:
ids, offsets and ``char_to_token`` for every character, cold or warm, on tokenizers trained
here (byte-level and SentencePiece-style) with the settings that change how text is cut or
where a token's offsets lie; and nothing is kept where a setting could make it differ.
"""

from __future__ import annotations

import functools
import pickle
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chatcodec import load
from chatcodec.tokencache import PieceCache
from chatcodec.tokenizer import JsonTokenizer

from ._hypothesis import SEEDED
from ._tokenizer import base_tokenizer_json, write_checkpoint

tokenizers = pytest.importorskip("tokenizers")

SPECIAL = ["<|im_start|>", "<|im_end|>", "<|im_start|>assistant", " <sp>"]
TAGS = ["<think>", "</think>", "<tool_call>"]
FRAGMENTS = [
    *SPECIAL,
    *TAGS,
    "Hello",
    " world",
    "\n",
    "\n\n",
    "  ",
    " ",
    "\t",
    "▁",
    "Café",
    " l’été — “oui”",
    "，好。",
    "🙂",
    "你好",
    "x",
    "<|",
    "|>",
    "<",
    "think>",
    "assistant",
    "hello",
    "HELLO",
    '{"a": 1}',
    "<unused1",
    "<unused12>",
    "2>",
    "<u",
]
SETUPS = [
    "byte_level",
    "metaspace",
    "split_special",
    "trim_offsets",
    "normalized",
    "prefixes",
    "split",
    "deepseek",
    "inner",
]
# the split patterns of real tokenizer.json files: Llama 3's; DeepSeek V3's three, whose
# first two leave text between their matches
LLAMA3 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
DEEPSEEK = [
    r"\p{N}{1,3}",
    "[一-龥\u3040-ゟ゠-ヿ]+",
    r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"
    r"| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
]
# plain ASCII, the text cut into words: what makes the split patterns differ
PLAIN = st.lists(
    st.sampled_from(
        [*" \t\n\r!\"#'(),-./0123456789:;<>?@AZ[\\]_`az{|}~", "\r\n", "'s", "'LL", "  "]
    ),
    max_size=16,
).map("".join)


@functools.cache
def backend(setup: str) -> Any:
    """A tokenizer trained here, set up one way (see SETUPS)."""
    from tokenizers import AddedToken, Regex, Tokenizer, normalizers, pre_tokenizers, processors

    tokenizer = Tokenizer.from_str(
        base_tokenizer_json("metaspace" if setup == "metaspace" else "byte_level")
    )
    tokenizer.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in SPECIAL])
    tokenizer.add_tokens([AddedToken(t, normalized=False, special=False) for t in TAGS])
    if setup == "split_special":
        tokenizer.encode_special_tokens = True
    if setup == "trim_offsets":  # offsets trimmed of spaces, the first token's kept
        tokenizer.post_processor = processors.ByteLevel(trim_offsets=True, add_prefix_space=True)
    if setup == "prefixes":  # many added tokens, some the start of others
        unused = [f"<unused{index}>" for index in range(300)]
        tokenizer.add_special_tokens(
            [AddedToken(t, normalized=False, special=True) for t in unused]
        )
        tokenizer.add_tokens([AddedToken(t, normalized=False) for t in ("<unused1", "<u")])
    if setup == "normalized":  # a normalizer, and added tokens matched on its output
        tokenizer.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
        tokenizer.add_tokens([AddedToken("hello", normalized=True), AddedToken("lo w")])
    if setup in ("split", "deepseek"):  # splits, then a ByteLevel that does not split
        splits = [LLAMA3] if setup == "split" else DEEPSEEK
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [
                *(pre_tokenizers.Split(Regex(pattern), "isolated") for pattern in splits),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    if setup == "inner":  # a normalizer that keeps ASCII, an added token matched after it
        tokenizer.normalizer = normalizers.NFC()
        tokenizer.add_tokens([AddedToken("lo w", normalized=True)])
    return tokenizer


def assert_same(cache: PieceCache, tokenizer: Any, text: str) -> None:
    expected = tokenizer.encode(text, add_special_tokens=False)
    ids, offsets, char_to_token = cache.tokenize(text)
    assert ids == expected.ids
    assert offsets == expected.offsets
    assert len(offsets) == len(expected.offsets)
    for char in range(len(text) + 2):
        assert char_to_token(char) == expected.char_to_token(char), char


texts = st.lists(
    st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=6) | PLAIN, max_size=12).map("".join),
    min_size=1,
    max_size=4,
)


@pytest.mark.parametrize("capacity", [10_000, 24])  # (a small cache lets go as it keeps)
@pytest.mark.parametrize("setup", SETUPS)
@settings(SEEDED, max_examples=150)
@given(texts=texts)
def test_cached_tokens_are_the_tokenizers(setup: str, capacity: int, texts: list[str]) -> None:
    """Several texts through one cache, each twice (cold, then from kept pieces), and the
    texts joined (pieces seen in other places, at the start or not)."""
    tokenizer = backend(setup)
    cache = PieceCache.for_backend(tokenizer, capacity)
    assert cache is not None
    for text in [*texts, *texts, "".join(texts), "".join(reversed(texts))]:
        assert_same(cache, tokenizer, text)


@pytest.mark.parametrize("setup", SETUPS)
def test_pieces_are_kept_and_found(setup: str) -> None:
    tokenizer = backend(setup)
    cache = PieceCache.for_backend(tokenizer, 10_000)
    assert cache is not None
    system = "<|im_start|>system\nYou are terse.<think>\n"
    assert_same(cache, tokenizer, system + "<|im_start|>user\nHello<tool_call>")
    misses, hits = cache.misses, cache.hits
    assert_same(cache, tokenizer, system + "<|im_start|>user\nCafé 🙂<tool_call>")
    assert cache.misses == misses + 1  # only the new user text
    assert cache.hits > hits


def test_the_capacity_bounds_the_text_kept() -> None:
    tokenizer = backend("metaspace")  # pieces alone: no words kept besides them
    cache = PieceCache.for_backend(tokenizer, 20)
    assert cache is not None
    for word in ("first piece", "second one", "third"):
        assert_same(cache, tokenizer, f"<|im_start|>{word}<|im_end|>")
    assert cache.size <= 20
    assert cache.pieces == 2  # "first piece" (11 characters) made way
    assert_same(cache, tokenizer, "<|im_start|>a piece longer than the whole cache<|im_end|>")
    assert cache.size <= 20
    cache.clear()
    assert_same(cache, tokenizer, "<|im_start|>twice<|im_end|><|im_start|>twice<|im_end|>")
    assert (cache.size, cache.pieces) == (5, 1)  # counted once
    cache.clear()
    assert (cache.size, cache.pieces) == (0, 0)


def test_the_capacity_bounds_words_and_pieces_alike() -> None:
    tokenizer = backend("byte_level")
    cache = PieceCache.for_backend(tokenizer, 20)
    assert cache is not None and cache.cuts_words
    for text in ("first piece", "second one", "third", "a piece longer than the whole cache"):
        assert_same(cache, tokenizer, f"<|im_start|>{text}<|im_end|>")
        assert cache.size <= 20
    assert_same(cache, tokenizer, "<|im_start|>third<|im_end|>")


class Counted:
    """A tokenizer whose encode calls are counted."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer
        self.calls = 0

    def encode(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return self._tokenizer.encode(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tokenizer, name)


@pytest.mark.parametrize("setup", SETUPS)
def test_plain_pieces_are_tokenized_from_their_words(setup: str) -> None:
    """Where the pre-tokenizer's words can be found without it (chatcodec.wordsplit), the
    words of a text encoded whole are kept once met in a second text; then a new plain-ASCII
    piece made of them is tokenized without calling the tokenizer, and one with a new word
    costs one call for it. Elsewhere a new piece costs a call."""
    tokenizer = backend(setup)
    counted = Counted(tokenizer)
    cache = PieceCache.for_backend(counted, 10_000)
    assert cache is not None
    assert cache.cuts_words == (setup not in ("metaspace", "normalized"))
    assert_same(cache, tokenizer, "<think>user\nHi world, how are you? 1234</think>")
    size = cache.size
    assert_same(cache, tokenizer, "<think>user\nHi world? 1234, how are you</think>")
    words_kept = cache.size - size > len("user\nHi world? 1234, how are you")
    assert words_kept == cache.cuts_words
    counted.calls = 0
    again = "<think>user\nHi, how are you world? 1234</think>"
    assert_same(cache, tokenizer, again)
    assert counted.calls == (0 if cache.cuts_words else 1)
    assert_same(cache, tokenizer, again.replace("world", "there"))
    assert counted.calls == (1 if cache.cuts_words else 2)
    assert_same(cache, tokenizer, "<think>user\nHi how are you there? 1234</think>")
    assert counted.calls == (1 if cache.cuts_words else 3)
    assert_same(cache, tokenizer, "<think>Hi, world!\t😀</think>")  # not plain
    assert counted.calls == (2 if cache.cuts_words else 4)


def test_while_few_words_are_found_one_text_in_eight_is_cut() -> None:
    """Text of words never met again (past the first 4096 characters cut) makes cutting a
    bad bet: a new piece of words kept then costs a call, but every eighth one is cut."""
    tokenizer = backend("byte_level")
    counted = Counted(tokenizer)
    cache = PieceCache.for_backend(counted, 1_000_000)
    assert cache is not None and cache.cuts_words
    known = "<think>user\nHi world, how are you? 1234</think>"
    assert_same(cache, tokenizer, known)
    assert_same(cache, tokenizer, known.replace("user", "User"))  # its words kept now
    letters = "abcdefghijklmnopqrstuvwxyz"
    for number in range(200):  # words met once each: none found
        word = "".join(letters[number // 26**k % 26] for k in range(3))
        assert_same(cache, tokenizer, f"<think>{(' z' + word) * 30}</think>")
    calls = []
    for number in range(16):
        counted.calls = 0
        assert_same(cache, tokenizer, f"<think>Hi{' world,' * (number + 1)} how</think>")
        calls.append(counted.calls)
    assert calls.count(0) == 2 and calls.count(1) == 14  # cut, found: no call


def test_a_piece_holding_a_normalized_added_token_is_not_cut() -> None:
    tokenizer = backend("inner")
    cache = PieceCache.for_backend(tokenizer, 10_000)
    assert cache is not None and cache.cuts_words
    text = "<|im_start|>hello world<|im_end|>"  # "lo w" matched inside the piece
    assert "lo w" in tokenizer.encode(text).tokens
    for _ in range(2):
        assert_same(cache, tokenizer, text)


def test_a_word_cut_otherwise_alone_leaves_its_piece_to_the_tokenizer() -> None:
    """After splits "aba|b" then "ab|a", "aba" is "ab" + "a"; "ab" alone is "a" + "b", so a
    piece holding that word is tokenized as a piece, and the word is not kept."""
    from tokenizers import Regex, Tokenizer, pre_tokenizers

    tokenizer = Tokenizer.from_str(backend("byte_level").to_str())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex("aba|b"), "isolated"),
            pre_tokenizers.Split(Regex("ab|a"), "isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    cache = PieceCache.for_backend(tokenizer, 1000)
    assert cache is not None and cache.cuts_words
    for text in ("<think>aba</think>", "<think>aba ab</think>", "<think>ab</think>aba"):
        assert_same(cache, tokenizer, text)
        assert_same(cache, tokenizer, text)
    assert_same(cache, tokenizer, "<think>ab ab</think>" * 3)


def test_a_failed_check_tokenizes_the_text_whole() -> None:
    """An added token that starts with the separator ("<a>" and "<a>x"): a piece after the
    separator joins it, the call's answer fails the check, and the text is encoded whole;
    its piece is kept from that answer (there it stood between its own neighbours)."""
    from tokenizers import AddedToken, Tokenizer

    tokenizer = Tokenizer.from_str(base_tokenizer_json("byte_level"))
    tokenizer.add_tokens(
        [AddedToken("<a>", normalized=False), AddedToken("<a>x", normalized=False)]
    )
    tokenizer.add_special_tokens([AddedToken("<|b|>", normalized=False, special=True)])
    cache = PieceCache.for_backend(tokenizer, 1000)
    assert cache is not None
    assert_same(cache, tokenizer, "<|b|>xyz")
    assert (cache.pieces, cache.misses, cache.hits) == (1, 1, 0)
    assert_same(cache, tokenizer, "<|b|>xyz")
    assert (cache.pieces, cache.misses, cache.hits) == (1, 1, 1)


def test_a_cut_token_the_model_also_writes_keeps_nothing() -> None:
    """A SentencePiece-style model writes ``<unk>`` (an added token, cut at) for a character
    it does not know: in a text encoded whole, the first ``<unk>`` is not the cut token, and
    nothing is kept from that answer."""
    tokenizer = backend("metaspace")
    cache = PieceCache.for_backend(tokenizer, 1000)
    assert cache is not None
    text = "жxxxxx<unk>"
    assert tokenizer.encode(text).tokens.count("<unk>") == 2
    assert_same(cache, tokenizer, text)
    assert cache.pieces == 0


@pytest.mark.parametrize("flag", ["lstrip", "rstrip", "single_word"])
def test_tokens_that_match_by_their_surroundings_turn_the_cache_off(flag: str) -> None:
    from tokenizers import AddedToken, Tokenizer

    tokenizer = Tokenizer.from_str(base_tokenizer_json("byte_level"))
    tokenizer.add_special_tokens([AddedToken("<|a|>", normalized=False, special=True)])
    assert PieceCache.for_backend(tokenizer, 1000) is not None
    tokenizer.add_special_tokens([AddedToken("<mask>", normalized=False, **{flag: True})])
    assert PieceCache.for_backend(tokenizer, 1000) is None


def test_no_cache_without_added_tokens_or_room() -> None:
    from tokenizers import Tokenizer

    plain = Tokenizer.from_str(base_tokenizer_json("byte_level"))
    assert PieceCache.for_backend(plain, 1000) is None
    assert PieceCache.for_backend(backend("byte_level"), 0) is None


def test_the_json_tokenizer_keeps_pieces_and_its_setting_pickles(tmp_path: Path) -> None:
    template = "{% for m in messages %}<|im_start|>{{ m.content }}<|im_end|>{% endfor %}"
    folder = write_checkpoint(tmp_path / "chatml", template)
    codec = load(folder)
    tokenizer = codec.tokenizer
    assert isinstance(tokenizer, JsonTokenizer) and tokenizer.cache is not None
    assert tokenizer.cache.capacity == 1_000_000
    messages = [{"role": "user", "content": "Hello"}, {"role": "user", "content": "x"}]
    first = codec.encode(messages)
    again = codec.encode(messages)
    assert tokenizer.cache.hits >= 2
    assert again == first
    assert list(again.offsets) == tokenizer.backend.encode(first.text).offsets
    assert pickle.loads(pickle.dumps(again.offsets)) == list(again.offsets)
    off = JsonTokenizer(folder / "tokenizer.json", cache_chars=0)
    assert off.cache is None
    plain, expected = off.tokenize(first.text), off.backend.encode(first.text)
    assert len(plain.offsets) == len(expected.offsets)  # known before the offsets are read
    assert plain.offsets[-1] == expected.offsets[-1] and plain.offsets == expected.offsets
    assert [plain.char_to_token(c) for c in range(len(first.text) + 1)] == [
        expected.char_to_token(c) for c in range(len(first.text) + 1)
    ]
    assert pickle.loads(pickle.dumps(off)).cache is None
    kept = pickle.loads(pickle.dumps(JsonTokenizer(folder / "tokenizer.json", cache_chars=50)))
    assert kept.cache is not None and kept.cache.capacity == 50
