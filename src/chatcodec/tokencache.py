"""Tokens of repeated text, kept: the pieces between a ``tokenizers`` tokenizer's added tokens.

A dataset repeats text: a system prompt, a tool list, a conversation's earlier turns in
each of its prefixes. The ``tokenizers`` encode of a text first cuts it at its added tokens
(``<|im_start|>``, ``<|eot_id|>``, ...), and every later step (normalizer, pre-tokenizer,
model, offsets) works on each piece between them alone. So a piece's tokens are the same
wherever it stands, and ``PieceCache`` keeps them by the piece's text: a text whose pieces
were all seen before is tokenized without calling the tokenizer.

Exact, and where it could not be it is not used (``PieceCache.for_backend`` gives None):

- The cuts are the tokenizer's: the same leftmost-longest match over the added tokens it
  matches on the raw text (those with ``normalized=False``), skipping special tokens under
  ``split_special_tokens`` as it does. A tokenizer whose raw-text added tokens strip
  whitespace or match single words only (``lstrip``/``rstrip``/``single_word``, whose match
  depends on the text around it) is not cached; neither is a model with BPE dropout.
- The one thing about a piece that depends on its place is whether it starts the text
  (``Metaspace``'s ``prepend_scheme="first"``, the ``ByteLevel`` offsets of token 0): that
  is part of the key.
- A text mostly of pieces seen before has its new pieces tokenized in one call, joined by
  a separator (one of the added tokens cut at), so each stands between added tokens as it
  did in the text. The answer is checked: every separator must come back as its own token
  at its own place, else the text is tokenized whole.
- A text mostly new is tokenized whole, and its new pieces are kept from that answer while
  its added tokens come back as themselves in their places.

A piece's offsets stay in the tokenizer's answer it came from (a ``tokenizers.Encoding``):
read from it when asked for, and ``char_to_token`` asks that answer at the character's place
in it. A mask reads a few tokens' places; copying out a Python pair per token cost a
quarter of the tokenizer's own encode (and a kept piece held an object per token).
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from typing import Any, overload

__all__ = ["PieceCache", "PieceOffsets", "tokens_of"]

# a piece's tokens: their ids; the tokenizer's answer they came from (an Encoding) and the
# index of the first of them in it; and what to add to that answer's character positions
# to place them in the piece's own text (the piece starts at 0)
_Entry = tuple[list[int], Any, int, int]
# what the tokenizer answers for a text: ids, offsets, char_to_token
Tokens = tuple[list[int], Sequence[tuple[int, int]], Callable[[int], "int | None"]]


class PieceOffsets(Sequence[tuple[int, int]]):
    """The ``[start, end)`` characters of each token of a text assembled from pieces, read
    from the tokenizer's answers they came from on first use; and ``char_to_token`` asking
    those answers without reading them all."""

    __slots__ = ("_bases", "_built", "_entries", "_length", "_starts")

    def __init__(self, starts: list[int], bases: list[int], entries: list[_Entry]) -> None:
        self._starts = starts  # each piece's first character in the text
        self._bases = bases  # the index of each piece's first token
        self._entries = entries  # each piece's tokens, placed at the piece's start
        self._length = bases[-1] + len(entries[-1][0]) if entries else 0
        self._built: list[tuple[int, int]] | None = None

    def _count(self, piece: int) -> int:
        bases = self._bases
        return (bases[piece + 1] if piece + 1 < len(bases) else self._length) - bases[piece]

    def _list(self) -> list[tuple[int, int]]:
        if self._built is None:
            read: dict[int, list[tuple[int, int]]] = {}  # each answer's offsets, read once
            built: list[tuple[int, int]] = []
            for piece, (_, source, first, shift) in enumerate(self._entries):
                offsets = read.get(id(source))
                if offsets is None:
                    offsets = read[id(source)] = source.offsets
                stop = first + self._count(piece)
                built += [(a + shift, b + shift) for a, b in offsets[first:stop]]
            self._built = built
        return self._built

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> tuple[int, int]: ...
    @overload
    def __getitem__(self, index: slice) -> list[tuple[int, int]]: ...
    def __getitem__(self, index: int | slice) -> tuple[int, int] | list[tuple[int, int]]:
        return self._list()[index]

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return iter(self._list())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PieceOffsets):
            other = other._list()
        return isinstance(other, Sequence) and self._list() == list(other)

    __hash__ = None  # type: ignore[assignment]  # equal to a list, mutable-like

    def __repr__(self) -> str:
        return repr(self._list())

    def __reduce__(self) -> tuple[Any, ...]:
        return (list, (self._list(),))  # a pickled copy is the plain list

    def char_to_token(self, char: int) -> int | None:
        """The first token whose range holds the character (None: none does), as
        ``tokenizers.Encoding.char_to_token`` answers it: the answer the character's piece
        came from, asked at the character's place in it (a token's range lies inside its
        piece's)."""
        piece = bisect_right(self._starts, char) - 1
        if piece < 0:
            return None
        _, source, first, shift = self._entries[piece]
        index = source.char_to_token(char - shift)
        if index is None or not first <= index < first + self._count(piece):
            return None
        return self._bases[piece] + index - first


def tokens_of(encoding: Any) -> Tokens:
    """The ids, offsets (read on first use) and ``char_to_token`` of a ``tokenizers``
    Encoding."""
    ids = encoding.ids
    return ids, PieceOffsets([0], [0], [(ids, encoding, 0, 0)]), encoding.char_to_token


class _Placed:
    """An added token's offsets where the tokenizer places it, answering as the Encoding of
    that one token would: the cut tokens' entries read it instead of keeping an Encoding per
    added token (a tokenizer may have thousands)."""

    __slots__ = ("offsets",)

    def __init__(self, offsets: tuple[int, int]) -> None:
        self.offsets = [offsets]

    def char_to_token(self, char: int) -> int | None:
        start, end = self.offsets[0]
        return 0 if start <= char < end else None


class PieceCache:
    """Pieces of text and their tokens, the least recently used dropped past ``capacity``
    characters of text kept. Build one with ``for_backend``."""

    def __init__(
        self,
        backend: Any,
        pattern: re.Pattern[str],
        cut: dict[str, tuple[int, tuple[int, int], tuple[int, int]]],
        skipped: bool,
        separator: str,
        capacity: int,
    ) -> None:
        self._backend = backend
        self._pattern = pattern  # finds the added tokens matched on the raw text, longest first
        self._skipped = skipped  # some are special tokens left as text
        self._cut = cut  # text -> (id, offsets at the text's start, offsets elsewhere)
        self._placed = {  # text -> its entry at the text's start, elsewhere
            text: (([index], _Placed(first), 0, 0), ([index], _Placed(rest), 0, 0))
            for text, (index, first, rest) in cut.items()
        }
        self._separator = separator
        self._separator_id = cut[separator][0]
        self.capacity = capacity
        self._kept: OrderedDict[tuple[str, bool], _Entry] = OrderedDict()
        self._size = 0
        self.hits = 0
        self.misses = 0

    @classmethod
    def for_backend(cls, backend: Any, capacity: int) -> PieceCache | None:
        """A cache for a ``tokenizers.Tokenizer`` set up as it will encode (added tokens,
        ``encode_special_tokens``); None where caching could change its answer."""
        if capacity <= 0 or getattr(backend.model, "dropout", None):
            return None
        matched: set[str] = set()  # every added token matched on the raw text
        cut: dict[str, tuple[int, tuple[int, int], tuple[int, int]]] = {}
        skip_special = bool(backend.encode_special_tokens)
        for index, token in backend.get_added_tokens_decoder().items():
            if token.normalized or not token.content:
                continue
            matched.add(token.content)
            if token.special and skip_special:
                continue
            if token.lstrip or token.rstrip or token.single_word:
                return None
            cut[token.content] = (index, (0, 0), (0, 0))
        if not cut:
            return None
        unknown = getattr(backend.model, "unk_token", None)
        unknown_id = backend.token_to_id(unknown) if isinstance(unknown, str) else None
        candidates = sorted((t for t in cut if cut[t][0] != unknown_id), key=lambda t: (len(t), t))
        if not candidates:
            return None
        separator = candidates[0]
        for text, (index, _, _) in cut.items():
            alone = backend.encode(text, add_special_tokens=False)
            after = backend.encode(separator + text, add_special_tokens=False)
            if alone.ids != [index] or after.ids != [cut[separator][0], index]:
                return None  # the tokenizer does not give this added token as itself
            a, b = after.offsets[1]
            cut[text] = (index, alone.offsets[0], (a - len(separator), b - len(separator)))
        pattern = re.compile(f"({_longest_match(sorted(matched))})")
        return cls(backend, pattern, cut, len(matched) > len(cut), separator, capacity)

    @property
    def size(self) -> int:
        """Characters of text kept."""
        return self._size

    @property
    def pieces(self) -> int:
        """Pieces of text kept."""
        return len(self._kept)

    def clear(self) -> None:
        """Forget every piece kept."""
        self._kept.clear()
        self._size = 0

    def tokenize(self, text: str) -> Tokens:
        """The ids, offsets and ``char_to_token`` of ``backend.encode(text,
        add_special_tokens=False)``: from the pieces kept and one call for the others; or,
        when most of the text between added tokens is new (or that call fails its check),
        from the text encoded whole, its new pieces kept from that answer."""
        starts: list[int] = []  # each piece's (and cut token's) first character
        entries: list[_Entry | None] = []  # their tokens (None: not seen before)
        cuts: list[tuple[int, str]] = []  # where in entries the cut tokens are, and which
        unseen: dict[tuple[str, bool], list[int]] = {}  # new piece -> where in entries
        kept, placed = self._kept, self._placed
        parts = self._pattern.split(text)  # piece, added token, piece, ..., piece
        if self._skipped:
            parts = self._unsplit(parts)
        new = seen = position = slot = 0
        last = len(parts) - 1
        for at in range(0, last + 1, 2):
            piece = parts[at]
            if piece:
                key = (piece, not position)
                entry = kept.get(key)
                if entry is None:
                    if key in unseen:
                        unseen[key].append(slot)
                    else:
                        unseen[key] = [slot]
                    new += len(piece)
                else:
                    kept.move_to_end(key)
                    seen += len(piece)
                    entry = (entry[0], entry[1], entry[2], entry[3] + position)
                entries.append(entry)
                starts.append(position)
                position += len(piece)
                slot += 1
            if at < last:
                token = parts[at + 1]
                token_ids, source, first, shift = placed[token][1 if position else 0]
                cuts.append((slot, token))
                entries.append((token_ids, source, first, shift + position))
                starts.append(position)
                position += len(token)
                slot += 1
        misses = sum(map(len, unseen.values()))
        self.misses += misses
        self.hits += len(entries) - len(cuts) - misses
        if unseen and (new > seen or not self._fill(unseen, starts, entries)):
            return self._whole(text, starts, entries, cuts, unseen)
        ids: list[int] = []
        bases: list[int] = []
        for entry in entries:
            bases.append(len(ids))
            ids += entry[0]  # type: ignore[index]
        offsets = PieceOffsets(starts, bases, entries)  # type: ignore[arg-type]
        return ids, offsets, offsets.char_to_token

    def _unsplit(self, parts: list[str]) -> list[str]:
        """The parts with each special token left as text joined to its neighbours."""
        joined = [parts[0]]
        for at in range(1, len(parts), 2):
            if parts[at] in self._cut:
                joined += (parts[at], parts[at + 1])
            else:
                joined[-1] += parts[at] + parts[at + 1]
        return joined

    def _fill(
        self,
        unseen: dict[tuple[str, bool], list[int]],
        starts: list[int],
        entries: list[_Entry | None],
    ) -> bool:
        """Tokenize the unseen pieces in one call, each between separators, check the
        separators came back in place, then place and keep the pieces."""
        separator, separator_id = self._separator, self._separator_id
        _, first, rest = self._cut[separator]
        lead = not any(at_start for _, at_start in unseen)  # else that piece starts the call
        pieces = sorted(unseen, key=lambda key: not key[1])  # the one at the start first
        chunks = [separator] if lead else []
        marks = []
        length = len(separator) if lead else 0
        for piece, _ in pieces:
            marks.append(length)
            chunks += (piece, separator)
            length += len(piece) + len(separator)
        encoding = self._backend.encode("".join(chunks), add_special_tokens=False)
        ids, place = encoding.ids, encoding.token_to_chars
        if lead and (not ids or ids[0] != separator_id or place(0) != first):
            return False
        at = 1 if lead else 0
        found: list[_Entry] = []
        for (piece, _), mark in zip(pieces, marks, strict=True):
            try:
                stop = ids.index(separator_id, at)
            except ValueError:
                return False
            end = mark + len(piece)
            if place(stop) != (end + rest[0], end + rest[1]):
                return False
            found.append((ids[at:stop], encoding, at, -mark))
            at = stop + 1
        if at != len(ids):
            return False
        for key, entry in zip(pieces, found, strict=True):
            for slot in unseen[key]:
                entries[slot] = (entry[0], entry[1], entry[2], entry[3] + starts[slot])
            self._keep(key, entry)
        return True

    def _whole(
        self,
        text: str,
        starts: list[int],
        entries: list[_Entry | None],
        cuts: list[tuple[int, str]],
        unseen: dict[tuple[str, bool], list[int]],
    ) -> Tokens:
        """The text encoded whole; its new pieces kept from that answer while its cut
        tokens come back in place (the tokens between two of them are the piece's)."""
        encoding = self._backend.encode(text, add_special_tokens=False)
        whole = tokens_of(encoding)
        ids, place = whole[0], encoding.token_to_chars
        new = {slot: key for key, slots in unseen.items() for slot in slots}
        at = 0
        for slot, token in cuts:
            index, first, rest = self._cut[token]
            start = starts[slot]
            try:
                stop = ids.index(index, at)
            except ValueError:
                return whole
            if place(stop) != ((rest[0] + start, rest[1] + start) if start else first):
                return whole
            if slot - 1 in new:  # the piece before this cut token
                self._keep(new[slot - 1], (ids[at:stop], encoding, at, -starts[slot - 1]))
            at = stop + 1
        if len(entries) - 1 in new:  # the piece after the last
            self._keep(new[len(entries) - 1], (ids[at:], encoding, at, -starts[-1]))
        return whole

    def _keep(self, key: tuple[str, bool], entry: _Entry) -> None:
        size = len(key[0])
        if size > self.capacity or key in self._kept:  # a piece twice in one text: once
            return
        self._kept[key] = entry
        self._size += size
        while self._size > self.capacity:
            (piece, _), _ = self._kept.popitem(last=False)
            self._size -= len(piece)


def _longest_match(texts: list[str]) -> str:
    """A regular expression matching the longest of ``texts`` that starts where it is
    tried, as a trie: a tokenizer with thousands of added tokens (``<unused123>``) would
    have each tried in turn at every ``<`` of the text."""
    trie: dict[str, Any] = {}
    for text in texts:
        node = trie
        for char in text:
            node = node.setdefault(char, {})
        node[""] = {}  # a text ends here

    def pattern(node: dict[str, Any]) -> str:
        branches = [re.escape(char) + pattern(child) for char, child in node.items() if char]
        if not branches:
            return ""
        inner = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        if "" in node:  # a shorter text ends here: the longer ones are tried first
            return f"(?:{inner})?"
        return inner

    return pattern(trie)
