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
- A text mostly of pieces (or words) seen before has its new ones tokenized in one call,
  joined by a separator (one of the added tokens cut at), so each stands between added
  tokens as it did in the text. The answer is checked: every separator must come back as
  its own token at its own place, else the text is tokenized whole.
- A text mostly new is tokenized whole, and its new pieces are kept from that answer while
  its added tokens come back as themselves in their places.

A new piece of plain text (ASCII, and common Latin-1, punctuation and CJK characters) is
cut into the pre-tokenizer's words where ``chatcodec.wordsplit`` can find them as the
tokenizer does; the model tokenizes each word alone, so the piece's tokens are its words'
one after another, and words are kept like pieces (a word and a piece of the same text,
not at the start, have the same tokens). Only the words not kept are tokenized, in the one
call with the other new pieces. A word is kept from a text encoded whole only once met in
an earlier text: most of a dataset's distinct words are met once. While few of the words
cut are found kept, one new text in eight is cut (``_cutting``).

A piece's offsets stay in the tokenizer's answer it came from (a ``tokenizers.Encoding``):
read from it when asked for, and ``char_to_token`` asks that answer at the character's place
in it. A mask reads a few tokens' places; copying out a Python pair per token cost a
quarter of the tokenizer's own encode (and a kept piece held an object per token).
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator, Sequence
from itertools import accumulate, chain, compress
from operator import itemgetter, not_
from typing import Any, overload

from .strings import longest_match
from .wordsplit import WordSplit

__all__ = ["PieceCache", "PieceOffsets", "tokens_of"]

# a piece's tokens: their ids; the tokenizer's answer they came from (an Encoding) and the
# index of the first of them in it; and what to add to that answer's character positions
# to place them in the piece's own text (the piece starts at 0)
_Entry = tuple[list[int], Any, int, int]
# a piece cut into words: the words, and each one's entry (None: not kept)
_Words = tuple[list[str], list["_Entry | None"]]
_MET = 1 << 16  # words noted as met once, at most
_TRIED = 1 << 12  # characters cut into words before how often they are found counts
_SAMPLED = 8  # while few words are found kept, one new text in this many is cut into words
_LATELY = 1 << 20  # characters cut into words counted before the counts are halved
_ids: Callable[[Any], list[int]] = itemgetter(0)  # an entry's ids
# what a kept entry is found by: the text of a piece (or word) between added tokens; the
# piece that starts the text in a 1-tuple (there its tokens may differ)
_Key = str | tuple[str]
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
        self._entries = entries  # each piece's tokens
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
                shift += self._starts[piece]
                built += [(a + shift, b + shift) for a, b in offsets[first:stop]]
            self._built = built
        return self._built

    def __len__(self) -> int:
        return self._length

    @property
    def offsets(self) -> PieceOffsets:
        """Itself: a piece made of words answers as the Encoding of the piece would."""
        return self

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
        index = source.char_to_token(char - self._starts[piece] - shift)
        if index is None or not first <= index < first + self._count(piece):
            return None
        return self._bases[piece] + index - first


class _WordOffsets(PieceOffsets):
    """The offsets of a piece made of words: where each word and its first token start is
    worked out on first use (a mask reads the offsets of a few pieces)."""

    __slots__ = ("_words",)

    def __init__(self, words: list[str], entries: list[_Entry], length: int) -> None:
        self._words = words
        self._entries = entries
        self._length = length
        self._starts: list[int] = []  # empty until worked out
        self._bases: list[int] = []
        self._built = None

    def _ready(self) -> None:
        if not self._starts:
            self._starts = list(accumulate(map(len, self._words), initial=0))
            self._bases = list(accumulate(map(len, map(_ids, self._entries)), initial=0))
            self._starts.pop()
            self._bases.pop()

    def _list(self) -> list[tuple[int, int]]:
        self._ready()
        return super()._list()

    def char_to_token(self, char: int) -> int | None:
        self._ready()
        return super().char_to_token(char)


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
        words: WordSplit | None = None,
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
        self._words = words  # cuts a new piece into words, if plain text can be cut here
        self.capacity = capacity
        self._kept: OrderedDict[_Key, _Entry] = OrderedDict()
        self._met: set[str] = set()  # new words met in a text encoded whole, not kept
        self._word_hits = 0  # characters of words found kept, lately
        self._word_chars = 0  # characters cut into words, lately
        self._wait = _SAMPLED  # texts until the next is cut, while few words are found
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
        inner: list[str] = []  # those matched on the normalized text
        cut: dict[str, tuple[int, tuple[int, int], tuple[int, int]]] = {}
        skip_special = bool(backend.encode_special_tokens)
        for index, token in backend.get_added_tokens_decoder().items():
            if not token.content:
                continue
            if token.normalized:
                if not (token.special and skip_special):
                    inner.append(token.content)
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
        pattern = re.compile(f"({longest_match(sorted(matched))})")
        words = WordSplit.for_backend(backend, inner)
        return cls(backend, pattern, cut, len(matched) > len(cut), separator, capacity, words)

    @property
    def size(self) -> int:
        """Characters of text kept."""
        return self._size

    @property
    def pieces(self) -> int:
        """Pieces (and words) of text kept."""
        return len(self._kept)

    @property
    def cuts_words(self) -> bool:
        """Whether new pieces of plain text are tokenized word by word (``chatcodec.wordsplit``)."""
        return self._words is not None

    def clear(self) -> None:
        """Forget every piece and word kept (and met). How often words were found kept
        lately is not forgotten: it is about the texts, and a cache emptied before every
        text finds none."""
        self._kept.clear()
        self._met.clear()
        self._size = 0

    def tokenize(self, text: str) -> Tokens:
        """The ids, offsets and ``char_to_token`` of ``backend.encode(text,
        add_special_tokens=False)``: from the pieces kept, the new pieces' words kept, and
        one call for the rest; or, when most of the text between added tokens is new (or
        that call fails its check), from the text encoded whole, its new pieces (and words
        met before) kept from that answer."""
        starts: list[int] = []  # each piece's (and cut token's) first character
        entries: list[_Entry | None] = []  # their tokens (None: not seen before)
        cuts: list[tuple[int, str]] = []  # where in entries the cut tokens are, and which
        unseen: dict[_Key, list[int]] = {}  # new piece -> where in entries
        kept, placed = self._kept, self._placed
        parts = self._pattern.split(text)  # piece, added token, piece, ..., piece
        if self._skipped:
            parts = self._unsplit(parts)
        new = seen = position = slot = 0
        last = len(parts) - 1
        for at in range(0, last + 1, 2):
            piece = parts[at]
            if piece:
                key: _Key = piece if position else (piece,)
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
                entries.append(entry)
                starts.append(position)
                position += len(piece)
                slot += 1
            if at < last:
                token = parts[at + 1]
                cuts.append((slot, token))
                entries.append(placed[token][1 if position else 0])
                starts.append(position)
                position += len(token)
                slot += 1
        misses = sum(map(len, unseen.values()))
        self.misses += misses
        self.hits += len(entries) - len(cuts) - misses
        if unseen:
            words, new_words, rest, still_new = self._cut_words(unseen, new)
            seen += new - still_new  # the known words of new pieces
            if still_new > seen or not self._place(unseen, entries, words, new_words, rest):
                return self._whole(text, starts, entries, cuts, unseen, words, new_words)
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

    def _cut_words(
        self, unseen: dict[_Key, list[int]], new: int
    ) -> tuple[dict[str, _Words], dict[str, None], list[_Key], int]:
        """The unseen pieces cut into words where they can be, with the words' entries
        kept; the words not kept; the pieces not cut (the text's first piece first); and the
        characters of the text that are new: those pieces' and the new words'."""
        words: dict[str, _Words] = {}
        new_words: dict[str, None] = {}
        rest: list[_Key] = []
        if self._words is None or not self._cutting():
            return words, new_words, list(unseen), new
        get = self._kept.get
        uncut = cut = unknown = 0  # characters of the pieces not cut, cut, of new words
        for key, slots in unseen.items():
            # the text's first piece (first in unseen) is not cut: its tokens may differ there
            if isinstance(key, tuple) or (found := self._words.words(key)) is None:
                rest.append(key)
                uncut += len(key[0] if isinstance(key, tuple) else key) * len(slots)
                continue
            known = list(map(get, found))
            if None in known:
                absent = list(compress(found, map(not_, known)))
                if not self._words.alone(absent):
                    rest.append(key)
                    uncut += len(key) * len(slots)
                    continue
                new_words.update(dict.fromkeys(absent))
                unknown += sum(map(len, absent)) * len(slots)
            words[key] = (found, known)
            cut += len(key) * len(slots)
        self._word_hits += cut - unknown
        self._word_chars += cut
        if self._word_chars > _LATELY:
            self._word_hits //= 2
            self._word_chars //= 2
        return words, new_words, rest, uncut + unknown

    def _cutting(self) -> bool:
        """Whether to cut this text's new pieces into words: for the first ``_TRIED``
        characters, then while a quarter of the words cut lately were found kept, else one
        text in ``_SAMPLED`` (so that the words a dataset repeats are still met)."""
        if self._word_chars < _TRIED or self._word_hits * 4 > self._word_chars:
            return True
        self._wait -= 1
        if self._wait > 0:
            return False
        self._wait = _SAMPLED
        return True

    def _place(
        self,
        unseen: dict[_Key, list[int]],
        entries: list[_Entry | None],
        words: dict[str, _Words],
        new_words: dict[str, None],
        rest: list[_Key],
    ) -> bool:
        """Place the unseen pieces' tokens in ``entries``: a piece cut into words from its
        words', the others from one call with the new words; False when that call fails its
        check."""
        fresh: dict[_Key, _Entry] = {}
        if new_words or rest:
            filled = self._fill([*rest[:1], *new_words, *rest[1:]])
            if filled is None:
                return False
            fresh = filled
        for key in rest:
            entry = fresh[key]
            for slot in unseen[key]:
                entries[slot] = entry
        for piece, (found, known) in words.items():
            if None in known:  # a new word's entry from the call (keeping them may have
                known = list(map(fresh.get, found, known))  # let known ones go since)
            ids = list(chain.from_iterable(map(_ids, known)))
            entry = (ids, _WordOffsets(found, known, len(ids)), 0, 0)  # type: ignore[arg-type]
            for slot in unseen[piece]:
                entries[slot] = entry
            self._keep(piece, entry)
        return True

    def _fill(self, keys: list[_Key]) -> dict[_Key, _Entry] | None:
        """Tokenize the keys' texts in one call, each between separators (the text's first
        piece, if among them, first and with none before it), check the separators came
        back in place, then keep the texts' tokens."""
        separator, separator_id = self._separator, self._separator_id
        _, first, rest = self._cut[separator]
        texts = [key if isinstance(key, str) else key[0] for key in keys]
        lead = isinstance(keys[0], str)  # else the text's first piece starts the call
        chunks = [separator] if lead else []
        marks = []
        length = len(separator) if lead else 0
        for piece in texts:
            marks.append(length)
            chunks += (piece, separator)
            length += len(piece) + len(separator)
        encoding = self._backend.encode("".join(chunks), add_special_tokens=False)
        ids, place = encoding.ids, encoding.token_to_chars
        if lead and (not ids or ids[0] != separator_id or place(0) != first):
            return None
        at = 1 if lead else 0
        found: dict[_Key, _Entry] = {}
        for key, piece, mark in zip(keys, texts, marks, strict=True):
            try:
                stop = ids.index(separator_id, at)
            except ValueError:
                return None
            end = mark + len(piece)
            if place(stop) != (end + rest[0], end + rest[1]):
                return None
            found[key] = (ids[at:stop], encoding, at, -mark)
            at = stop + 1
        if at != len(ids):
            return None
        for key, entry in found.items():
            self._keep(key, entry)
        return found

    def _whole(
        self,
        text: str,
        starts: list[int],
        entries: list[_Entry | None],
        cuts: list[tuple[int, str]],
        unseen: dict[_Key, list[int]],
        words: dict[str, _Words],
        new_words: dict[str, None],
    ) -> Tokens:
        """The text encoded whole; its new pieces (and those of their new words met in an
        earlier text) kept from that answer while its cut tokens come back in place (the
        tokens between two of them are the piece's)."""
        encoding = self._backend.encode(text, add_special_tokens=False)
        whole = tokens_of(encoding)
        ids, place = whole[0], encoding.token_to_chars
        new = {slot: key for key, slots in unseen.items() for slot in slots}
        admitted = self._admit(new_words)
        word_ids = encoding.word_ids if admitted else None

        def keep(slot: int, at: int, stop: int) -> None:
            key, start = new[slot], starts[slot]
            self._keep(key, (ids[at:stop], encoding, at, -start))
            if word_ids is not None and isinstance(key, str) and key in words:
                found = words[key][0]
                self._keep_words(found, admitted, ids, encoding, word_ids[at:stop], at, start)

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
                keep(slot - 1, at, stop)
            at = stop + 1
        if len(entries) - 1 in new:  # the piece after the last
            keep(len(entries) - 1, at, len(ids))
        return whole

    def _keep_words(
        self,
        found: list[str],
        admitted: set[str],
        ids: list[int],
        encoding: Any,
        word_ids: list[int | None],
        at: int,
        start: int,
    ) -> None:
        """Keep the admitted ones of a piece's words from the answer it was tokenized in
        (``ids``): the piece's tokens from ``at`` on, their pre-tokenizer words ``word_ids``,
        the piece from character ``start``. Nothing is kept if that answer cut the piece
        into other words."""
        counts = Counter(word_ids).values()  # tokens per word, in order
        if len(counts) != len(found):
            return
        bounds = list(accumulate(counts, initial=at))
        chars = list(accumulate(map(len, found), initial=start))
        for index, word in enumerate(found):
            if word in admitted:
                low = bounds[index]
                self._keep(word, (ids[low : bounds[index + 1]], encoding, low, -chars[index]))

    def _admit(self, words: dict[str, None]) -> set[str]:
        """The new words met in an earlier text, to be kept; the others noted as met. Most
        of a dataset's distinct words are met once: keeping those would cost more than it
        saves. The note is forgotten past ``_MET`` words."""
        met = self._met
        if len(met) > _MET:
            met.clear()
        admitted = met.intersection(words)
        met.update(words)
        return admitted

    def _keep(self, key: _Key, entry: _Entry) -> None:
        size = len(key) if isinstance(key, str) else len(key[0])
        if size > self.capacity or key in self._kept:  # a piece twice in one text: once
            return
        self._kept[key] = entry
        self._size += size
        while self._size > self.capacity:
            kept, _ = self._kept.popitem(last=False)
            self._size -= len(kept) if isinstance(kept, str) else len(kept[0])
