"""The words of plain ASCII text (chatcodec.wordsplit) are the ``tokenizers`` pre-tokenizer's
own, for the split patterns real tokenizer.json files carry: the ``regex`` package reads them
as Oniguruma does there. And the settings it cannot follow turn it off."""

from __future__ import annotations

import string
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chatcodec.wordsplit import WordSplit

from ._hypothesis import SEEDED

tokenizers = pytest.importorskip("tokenizers")
pytest.importorskip("regex")

LLAMA3 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
O200K = (  # gpt-oss
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+"
    r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
DEEPSEEK = [
    r"\p{N}{1,3}",
    "[一-龥\u3040-ゟ゠-ヿ]+",
    r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"
    r"| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
]
# a script's letters: a property re cannot be given, left to the regex package
SCRIPT = r" ?\p{Latin}+| ?\p{N}+| ?[^\s\p{Latin}\p{N}]+|\s+(?!\S)|\s+"
SPLITS = {
    "gpt2": None,
    "llama3": [LLAMA3],
    "qwen2": [QWEN2],
    "o200k": [O200K],
    "deepseek": DEEPSEEK,
    "script": [SCRIPT],
}

# plain ASCII, with the runs and contractions the patterns treat apart
ASCII = [*(string.printable.replace("\x0b", "").replace("\x0c", ""))]
# the wide characters cut beyond ASCII (chatcodec.wordsplit): the ends of each range, and
# what text writes with them
WIDE = [
    *"¡¬®ªµº¼½²ÀÖ×ØöøÿÉéçßñü",
    *"‐–—―‘’‚“”„†‡•…‧",
    *"、。ぁゔァヶ一龥你好世界",
    *"！～Ａｚ０９，：（）",
]
PLAIN = st.lists(
    st.sampled_from(
        ASCII + ["\r\n", "'s", "'LL", "'Re", "  ", "   ", "\n\n", " \n", "123456", "aB", "Ab"]
    ),
    max_size=40,
).map("".join)
MIXED = st.lists(st.sampled_from(ASCII + WIDE + ["'s", "  ", "\r\n", "é'S"]), max_size=40).map(
    "".join
)


def tokenizer(split: str, normalizer: Any = None) -> Any:
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers

    made = Tokenizer(models.BPE())
    patterns = SPLITS[split]
    if patterns is None:
        made.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    else:
        made.pre_tokenizer = pre_tokenizers.Sequence(
            [
                *(pre_tokenizers.Split(Regex(pattern), "isolated") for pattern in patterns),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    made.normalizer = normalizer
    return made


def their_words(backend: Any, text: str) -> list[str]:
    return [text[a:b] for _, (a, b) in backend.pre_tokenizer.pre_tokenize_str(text)]


@pytest.mark.parametrize("split", SPLITS)
@settings(SEEDED, max_examples=400)
@given(text=PLAIN | MIXED)
def test_the_words_are_the_pre_tokenizers(split: str, text: str) -> None:
    backend = tokenizer(split)
    words = WordSplit.for_backend(backend)
    assert words is not None
    assert set(words.engines) == {"regex" if split == "script" else "re"}
    found = words.words(text)
    if found is None:  # beyond ASCII with the regex package: not cut
        assert split == "script" and not text.isascii()
        return
    assert found == their_words(backend, text)
    for word in found:  # alone: cut into itself, or not, as the pre-tokenizer cuts it
        assert words.alone([word]) == (their_words(backend, word) == [word])


def splits(*patterns: str) -> Any:
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers

    made = Tokenizer(models.BPE())
    made.pre_tokenizer = pre_tokenizers.Sequence(
        [
            *(pre_tokenizers.Split(Regex(pattern), "isolated") for pattern in patterns),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    return made


def test_a_word_of_a_later_split_may_be_cut_alone() -> None:
    """ "aba" is one match of the first split, "ab" + "a" after the second; "ab" alone holds
    the first split's "b"."""
    backend = splits("aba|b", "ab|a")
    words = WordSplit.for_backend(backend)
    assert words is not None
    assert words.words("aba") == their_words(backend, "aba") == ["ab", "a"]
    assert their_words(backend, "ab") == ["a", "b"]
    assert words.alone(["ab"]) is False and words.alone(["a"]) is True


def test_text_between_matches_that_a_lookahead_would_cut_alone_is_not_cut() -> None:
    """With b|a(?!b), "xab" leaves "xa" between matches: its "a" stands before "b" there;
    alone it would match. Text between matches that stays whole alone is cut as usual."""
    backend = splits(r"b|a(?!b)")
    words = WordSplit.for_backend(backend)
    assert words is not None
    assert their_words(backend, "xab") == ["xa", "b"] and their_words(backend, "xa") == ["x", "a"]
    assert words.words("xab") is None
    assert words.words("xyb") == their_words(backend, "xyb") == ["xy", "b"]


def test_only_plain_text_is_cut() -> None:
    backend = tokenizer("llama3")
    words = WordSplit.for_backend(backend)
    assert words is not None and words.wide
    assert words.words("Hello, world") == ["Hello", ",", " world"]
    assert words.words("Café — “oui”") == their_words(backend, "Café — “oui”")
    for text in ("a\x0bb", "a\x1cb", "tab\x7f", "😀", "a\u00a0b", "ｶ", "a\u0301", "\u3000"):
        assert words.words(text) is None


def test_wide_text_is_cut_only_where_re_reads_it_as_the_tokenizer() -> None:
    """NFKC changes some wide characters ("…" -> "..."); \\w and \\d read only ASCII
    under re.ASCII; a pattern left to the regex package is read with its own tables."""
    from tokenizers import Regex, normalizers, pre_tokenizers

    assert WordSplit.for_backend(tokenizer("gpt2", normalizers.NFC())).wide  # type: ignore[union-attr]
    for normalizer in (
        normalizers.NFKC(),
        normalizers.Sequence([normalizers.NFC(), normalizers.NFD()]),
    ):
        narrow = WordSplit.for_backend(tokenizer("gpt2", normalizer))
        assert narrow is not None and not narrow.wide
        assert narrow.words("a…") is None and narrow.words("a...") == ["a", "..."]
    backend = tokenizer("gpt2")
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r"\w+|\s+|[^\w\s]+"), "isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    words = WordSplit.for_backend(backend)
    assert words is not None and not words.wide
    assert words.words("ab cd!") == their_words(backend, "ab cd!")
    assert words.words("é") is None
    script = WordSplit.for_backend(tokenizer("script"))
    assert script is not None and not script.wide
    inner = WordSplit.for_backend(tokenizer("llama3"), ["lo w"])
    assert inner is not None and inner.words("hello world") is None
    assert inner.words("hello there") == ["hello", " there"]


def test_settings_it_cannot_follow_turn_it_off() -> None:
    from tokenizers import Regex, normalizers, pre_tokenizers

    assert WordSplit.for_backend(tokenizer("gpt2", normalizers.NFKC())) is not None
    assert WordSplit.for_backend(tokenizer("gpt2", normalizers.Sequence([normalizers.NFC()])))
    assert WordSplit.for_backend(tokenizer("gpt2", normalizers.Lowercase())) is None
    backend = tokenizer("gpt2")
    for pre in (
        pre_tokenizers.ByteLevel(add_prefix_space=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),  # nothing to cut
        pre_tokenizers.Metaspace(),
        pre_tokenizers.Whitespace(),
        pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(), pre_tokenizers.ByteLevel(add_prefix_space=False)]
        ),
        pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(r"\s+"), "removed"),
                pre_tokenizers.ByteLevel(add_prefix_space=False),
            ]
        ),
        pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(r"(a)|b"), "isolated"),  # a group: findall's answer
                pre_tokenizers.ByteLevel(add_prefix_space=False),
            ]
        ),
        pre_tokenizers.Sequence(  # an anchor: a match depends on what stands before it
            [
                pre_tokenizers.Split(Regex(r"^\s+|\S+|\s+"), "isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False),
            ]
        ),
        pre_tokenizers.Sequence(  # a positive lookahead fails at the end of a word alone
            [
                pre_tokenizers.Split(Regex(r"\s+(?=\S)|\S+|\s+"), "isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False),
            ]
        ),
        pre_tokenizers.Sequence(  # ByteLevel not last: the splits after it read its output
            [
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
                pre_tokenizers.Split(Regex(r"\s+"), "isolated"),
            ]
        ),
    ):
        backend.pre_tokenizer = pre
        assert WordSplit.for_backend(backend) is None, pre
