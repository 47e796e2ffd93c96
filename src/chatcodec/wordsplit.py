"""The words a ``tokenizers`` pre-tokenizer cuts plain text into, found without calling it.

A ``tokenizers`` encode cuts the text between added tokens into words (pre-tokens) by its
pre-tokenizer's regular expressions, and its model tokenizes each word alone. So the tokens of
a piece are its words' tokens one after another, and a word's tokens can be kept by the word:
a dataset says "the" and "assistant" a million times. The ``regex`` package reads the
patterns tokenizer.json holds (``\\p{L}``, ``(?i:...)``, possessive quantifiers) as
Oniguruma, the engine of ``tokenizers``, does; on plain text a category is just the plain
characters in it, so each pattern is written out for the standard library's ``re`` (about
2.5 times as fast) where it finds the same words on a sample of every plain character.

Exact, and where it could not be it is not used (``WordSplit.for_backend`` gives None, or
``words`` None for one text):

- Only plain text is cut: ASCII's printable characters, tab, line feed and carriage return;
  and, where the patterns run on ``re`` without ``\\w``/``\\d`` under no normalizer or NFC,
  the wide characters of ``_WIDE_RANGES`` (Latin-1's letters and signs, the dashes, quotes
  and ellipsis of general punctuation, the first CJK ideographs, kana, the full-width
  forms): characters whose category no Unicode version either engine may have changed,
  none of them whitespace or folding to an ASCII letter, all kept by NFC. Beyond those the
  engines' Unicode tables differ by version, and in control characters ``\\s`` differs.
- Only pre-tokenizers made of regular-expression splits that keep every match as a word
  (``Split`` with ``behavior="Isolated"``; the text between two matches is a word too) and
  a last ``ByteLevel`` without a prefix space, whose own split (``use_regex``) is GPT-2's
  pattern. A normalizer must leave plain ASCII as it is: none, or Unicode normalization
  forms.
- A word, tokenized alone, must be cut into itself. A pattern whose matches depend on what
  stands around them (an anchor, lookbehind, positive lookahead, word boundary,
  backreference) is refused; a negative lookahead looks past a match's end only, where a
  word alone ends too, but text between matches is not cut where it would match alone.
  After several splits a word may hold an earlier split's match (``alone`` checks).
- A text holding an added token matched on the normalized text (``normalized=True``) is not
  cut.
"""

from __future__ import annotations

import functools
import json
import re
import unicodedata
from collections.abc import Iterable
from typing import Any

from .strings import longest_match

__all__ = ["GPT2_PATTERN", "WordSplit"]


@functools.cache
def _categories() -> dict[str, str]:
    """The plain characters (ASCII and wide) of each general category, as the inside of a
    class: runs of consecutive ones as ranges (both engines agree on these characters'
    categories)."""
    members: dict[str, list[str]] = {}
    for char in [*_PLAIN, *(chr(c) for a, b in _WIDE_RANGES for c in range(a, b + 1))]:
        category = unicodedata.category(char)
        members.setdefault(category, []).append(char)
        members.setdefault(category[0], []).append(char)
    return {name: _ranges(members.get(name, [])) for name in _CATEGORY_NAMES}  # in order


def _ranges(chars: list[str]) -> str:
    out: list[str] = []
    start = 0
    for at in range(1, len(chars) + 1):
        if at < len(chars) and ord(chars[at]) == ord(chars[at - 1]) + 1:
            continue
        low, high = re.escape(chars[start]), re.escape(chars[at - 1])
        out.append(
            low if at - start == 1 else f"{low}{high}" if at - start == 2 else f"{low}-{high}"
        )
        start = at
    return "".join(out)


# the split of a ByteLevel pre-tokenizer with use_regex, as tokenizers writes it
GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
_FORMS = frozenset({"NFC", "NFD", "NFKC", "NFKD"})  # the identity on ASCII
_PLAIN = "\t\n\r" + "".join(map(chr, range(0x20, 0x7F)))
_NOT_PLAIN = re.compile(r"[^\t\n\r\x20-\x7e]")
# Beyond ASCII, characters whose category has not changed in any Unicode version either
# engine may have, that are not whitespace, fold to no ASCII letter and that NFC keeps:
# Latin-1's letters and signs, general punctuation's dashes, quotes and ellipsis, CJK's
# first ideographs, kana, its comma and stop, the full-width forms
_WIDE_RANGES = (
    (0xA1, 0xAC),
    (0xAE, 0xFF),
    (0x2010, 0x2027),
    (0x3001, 0x3002),
    (0x3041, 0x3094),
    (0x30A1, 0x30F6),
    (0x4E00, 0x9FA5),
    (0xFF01, 0xFF5E),
)
_NOT_WIDE = re.compile(
    "[^\t\n\r\x20-\x7e" + "".join(f"{chr(a)}-{chr(b)}" for a, b in _WIDE_RANGES) + "]"
)
# the plain characters of each general category, escaped for a class (both engines agree
# on ASCII's categories)
_CATEGORY_NAMES = (
    "L Lu Ll Lt Lm Lo M Mn Mc Me N Nd Nl No P Pc Pd Ps Pe Pi Pf Po S Sm Sc Sk So Z Zs Zl Zp"
    " C Cc Cf Cs Co Cn"
).split()
_PROPERTY = re.compile(r"\\([pP])(?:\{([A-Za-z]{1,2})\}|([A-Z]))")
# what the two engines must cut alike before re is used: runs and mixes of every kind of
# plain character
_WIDE_SAMPLE = "".join(chr(c) for a, b in _WIDE_RANGES for c in sorted({a, a + 1, b - 1, b}))
_SAMPLE = " ".join(
    [_PLAIN, _PLAIN[::-1], "Hello, World! It's 12345 o'clock; x+=1\r\n\n  \t end.  ", "'S'LL'd"]
    + [a + b for a in "a Z0_-'\n\t\r " for b in _PLAIN + _WIDE_SAMPLE]
    + [_WIDE_SAMPLE, "Café — “oui”，l’été… 你好。ＡＢ１２３"]
)
# what _context_free refuses after a backslash (the empty string: one at the end), and the
# groups it allows
# classes re reads as ASCII only (re.ASCII) where Oniguruma reads Unicode and some wide
# characters are in them: no wide text then (no wide character is whitespace: \s agrees)
_ASCII_ESCAPES = re.compile(r"\\[wWdD]")
_CONTEXT_ESCAPES = frozenset(["", *"bBAZzGKk123456789"])
_GROUPS = ("(?:", "(?i:", "(?!")


class WordSplit:
    """Cuts plain ASCII text into the pre-tokenizer's words. Build one with ``for_backend``."""

    def __init__(
        self, patterns: list[tuple[Any, Any, bool]], inner: re.Pattern[str] | None, wide: bool
    ) -> None:
        # each split's pattern, it in a group, whether it looks ahead
        self._patterns = patterns
        self._inner = inner  # finds the added tokens matched inside a piece
        self.wide = wide  # whether text with the wide characters beyond ASCII is cut too
        # which engine finds each split's words: "re" (the pattern written out for plain
        # ASCII text) or "regex"
        self.engines = tuple("re" if isinstance(p, re.Pattern) else "regex" for p, _, _ in patterns)

    @classmethod
    def for_backend(cls, backend: Any, inner: Iterable[str] = ()) -> WordSplit | None:
        """The words of a ``tokenizers.Tokenizer``'s pre-tokenizer, or None when its
        setting is not one of those above (or the regex package is missing). ``inner``:
        the added tokens it matches after normalizing (``normalized=True``)."""
        try:
            import regex
        except ImportError:
            return None
        forms = _forms(_state(backend.normalizer))
        if forms is None:
            return None
        sources = _split_patterns(_state(backend.pre_tokenizer))
        if not sources:
            return None
        patterns = []
        for source in sources:
            try:
                pattern, grouped = regex.compile(source), regex.compile(f"({source})")
            except regex.error:
                return None
            if pattern.groups or pattern.match("") or not _context_free(source):
                return None
            pattern, grouped = _on_ascii(source, pattern) or (pattern, grouped)
            patterns.append((pattern, grouped, "(?!" in source))
        texts = sorted({text for text in inner if text})
        found = re.compile(longest_match(texts)) if texts else None
        wide = (
            forms <= {"NFC"}  # the others change some wide characters
            and all(isinstance(pattern, re.Pattern) for pattern, _, _ in patterns)
            and not any(_ASCII_ESCAPES.search(source) for source in sources)
        )
        return cls(patterns, found, wide)

    def alone(self, words: list[str]) -> bool:
        """Whether words the splits found, each tokenized alone, are cut into themselves.
        One split's words are (its pattern is context-free); after several, a later split's
        word may hold a match of an earlier one that its neighbours took part in."""
        return len(self._patterns) == 1 or all(self.words(word) == [word] for word in words)

    def words(self, text: str) -> list[str] | None:
        """The words of ``text`` as the pre-tokenizer cuts it, or None when it is not plain
        ASCII or holds an added token matched inside it."""
        if text.isascii():
            if _NOT_PLAIN.search(text):
                return None
        elif not self.wide or _NOT_WIDE.search(text):
            return None
        if self._inner is not None and self._inner.search(text):
            return None
        words = [text]
        for pattern, grouped, looks_ahead in self._patterns:
            cut = []
            for word in words:
                parts = _split(pattern, grouped, looks_ahead, word)
                if parts is None:
                    return None
                cut += parts
            words = cut
        return words


def _split(pattern: Any, grouped: Any, looks_ahead: bool, text: str) -> list[str] | None:
    """The text cut at the pattern's matches, each match a word and the text between two
    of them too (``behavior="Isolated"``); None when such a text, alone, would be cut."""
    words: list[str] = pattern.findall(text)
    if "".join(words) == text:
        return words if "" not in words else [word for word in words if word]
    parts = grouped.split(text)  # between, match, between, ..., between
    if looks_ahead and any(pattern.search(part) for part in parts[::2]):
        return None  # a match a lookahead stopped there would start in it alone
    return [part for part in parts if part]


def _on_ascii(source: str, pattern: Any) -> tuple[re.Pattern[str], re.Pattern[str]] | None:
    """The pattern for the standard library's ``re`` on plain ASCII text (its Unicode
    classes written out as the plain characters in them), about twice as fast as the
    regex package; None when it cannot be written so or does not find the same words as
    ``pattern`` in ``_SAMPLE``."""
    ascii_source = _ascii_source(source)
    if ascii_source is None:
        return None
    try:
        ascii_pattern = re.compile(ascii_source, re.ASCII)
        grouped = re.compile(f"({ascii_source})", re.ASCII)
    except re.error:  # e.g. possessive quantifiers before Python 3.11
        return None
    if ascii_pattern.groups or ascii_pattern.findall(_SAMPLE) != pattern.findall(_SAMPLE):
        return None
    return ascii_pattern, grouped


def _ascii_source(source: str) -> str | None:
    """The pattern with each ``\\p{X}`` (a general category) written out as the plain
    characters of that category; None for a property it cannot write so (a script, a
    negation inside a class) or a class inside a class."""
    out: list[str] = []
    members: list[str] | None = None  # inside a class: what it holds so far
    negated = False
    at = 0
    while at < len(source):
        char = source[at]
        if char == "\\":
            found = _PROPERTY.match(source, at)
            if found is None:
                (out if members is None else members).append(source[at : at + 2])
                at += 2
                continue
            name = found.group(2) or found.group(3)
            plain = _categories().get(name)
            if plain is None or (members is not None and found.group(1) == "P"):
                return None
            if members is not None:
                members.append(plain)
            else:
                out.append(_class(plain, found.group(1) == "P"))
            at = found.end()
            continue
        if members is None:
            if char == "[":
                negated = source.startswith("[^", at)
                members = []
                at += 2 if negated else 1
                continue
            out.append(char)
        elif char == "]":
            out.append(_class("".join(members), negated))
            members = None
        elif char == "[":
            return None
        else:
            members.append(char)
        at += 1
    return None if members is not None else "".join(out)


def _class(plain: str, negated: bool) -> str:
    """A class of these characters (or of all others); one that matches nothing, or
    anything, written so (``re`` has no empty class)."""
    if plain:
        return f"[{'^' if negated else ''}{plain}]"
    return r"[\s\S]" if negated else "(?!)"


def _context_free(source: str) -> bool:
    """Whether a pattern's matches depend on nothing outside them but the characters after
    them, and on those only through negative lookaheads: no lookbehind, positive lookahead,
    anchor, word boundary, backreference, conditional or inline flag outside its classes,
    and classes read alike by both engines (no unescaped ``[`` inside one, no ``]`` first).
    Then a word its match found is its own match alone."""
    at, inside = 0, False
    while at < len(source):
        char = source[at]
        if char == "\\":
            if source[at + 1 : at + 2] in _CONTEXT_ESCAPES:
                return False
            at += 2
            continue
        if inside:
            if char == "[":
                return False
            inside = char != "]"
        elif char == "[":
            at += 2 if source.startswith("[^", at) else 1
            if source[at : at + 1] == "]":
                return False
            inside = True
            continue
        elif char in "^$":
            return False
        elif source.startswith("(?", at) and not source.startswith(_GROUPS, at):
            return False
        at += 1
    return not inside


def _state(component: Any) -> Any:
    """A normalizer's or pre-tokenizer's setting as tokenizer.json writes it (None: none)."""
    return None if component is None else json.loads(component.__getstate__())


def _forms(normalizer: Any) -> set[str] | None:
    """The Unicode normalization forms a normalizer applies (none: the empty set); None
    when it does anything else."""
    if normalizer is None:
        return set()
    if normalizer.get("type") == "Sequence":
        forms: set[str] = set()
        for step in normalizer.get("normalizers", []):
            found = _forms(step)
            if found is None:
                return None
            forms |= found
        return forms
    kind = normalizer.get("type")
    return {kind} if kind in _FORMS else None


def _split_patterns(pre_tokenizer: Any) -> list[str]:
    """The patterns the pre-tokenizer cuts with, in order; [] when it is not splits that
    keep their matches followed by a ByteLevel without a prefix space."""
    if pre_tokenizer is None:
        return []
    steps = (
        pre_tokenizer.get("pretokenizers", [])
        if pre_tokenizer.get("type") == "Sequence"
        else [pre_tokenizer]
    )
    if not steps:
        return []
    *splits, last = steps
    if last.get("type") != "ByteLevel" or last.get("add_prefix_space"):
        return []
    patterns = []
    for step in splits:
        pattern = step.get("pattern", {})
        if (
            step.get("type") != "Split"
            or step.get("behavior") != "Isolated"
            or step.get("invert")
            or "Regex" not in pattern
        ):
            return []
        patterns.append(pattern["Regex"])
    if last.get("use_regex", True):
        patterns.append(GPT2_PATTERN)
    return patterns
