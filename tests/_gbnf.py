"""How far a GBNF grammar is from its end: the steering of the tiny-model sampler (tests/_llama).

``Steering(gbnf)`` reads llama.cpp's GBNF (rules, literals, character classes, ``.``, groups,
``* + ?`` and ``{m,n}``) and follows text through it the way llama.cpp's engine does, as a set
of stacks of rule positions. ``distances()`` gives, for every token of the byte vocabulary, the
fewest characters the grammar still needs after that token (end-of-generation: 0 where the
grammar may end). It only steers: llama.cpp's own grammar sampler decides what may be written.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

__all__ = ["Steering", "LazySteering", "FAR", "code_points"]

FAR = 10_000.0  # the distance of what the grammar cannot take
MAX_CODE_POINT = 0x10FFFF
ROOT = "root"
_NAME = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_"
_ESCAPES = {"n": "\n", "r": "\r", "t": "\t"}


@dataclass(frozen=True)
class Chars:
    """A character class: code point ranges, or everything but them."""

    ranges: tuple[tuple[int, int], ...]
    negated: bool = False

    def meets(self, low: int, high: int) -> bool:
        """Whether some code point in [low, high] is in the class."""
        if not self.negated:
            return any(a <= high and low <= b for a, b in self.ranges)
        point = low  # the negated class misses [low, high] only when the ranges cover it
        for a, b in sorted(self.ranges):
            if a <= point <= b:
                point = b + 1
                if point > high:
                    return False
        return True


Rules = dict[str, list[tuple[object, ...]]]


class _Reader:
    """llama.cpp's GBNF syntax into rules whose alternatives are classes and rule names."""

    def __init__(self, text: str) -> None:
        self.text, self.pos, self.rules, self.count = text, 0, {}, 0
        while self._space(True) < len(text):
            name = self._name()
            self._space(False)
            if not text.startswith("::=", self.pos):
                raise ValueError(f"expected ::= at {self.pos}")
            self.pos += 3
            self.rules[name] = self._alternatives(False)

    def _space(self, nested: bool) -> int:
        text = self.text
        while self.pos < len(text):
            c = text[self.pos]
            if c == "#":
                while self.pos < len(text) and text[self.pos] != "\n":
                    self.pos += 1
            elif c in " \t" or (nested and c in "\r\n"):
                self.pos += 1
            else:
                break
        return self.pos

    def _name(self) -> str:
        start = self.pos
        while self.pos < len(self.text) and self.text[self.pos] in _NAME:
            self.pos += 1
        if start == self.pos:
            raise ValueError(f"expected a name at {start}: {self.text[start : start + 20]!r}")
        return self.text[start : self.pos]

    def _fresh(self, alternatives: list[tuple[object, ...]]) -> str:
        self.count += 1
        name = f"~{self.count}"
        self.rules[name] = alternatives
        return name

    def _alternatives(self, nested: bool) -> list[tuple[object, ...]]:
        alternatives = [self._sequence(nested)]
        while self.pos < len(self.text) and self.text[self.pos] == "|":
            self.pos += 1
            self._space(True)
            alternatives.append(self._sequence(nested))
        return alternatives

    def _sequence(self, nested: bool) -> tuple[object, ...]:
        out: list[object] = []
        text = self.text
        while self._space(nested) < len(text) and text[self.pos] not in "|)\n\r":
            last: list[object]
            c = text[self.pos]
            if c == '"':
                self.pos += 1
                last = []
                while text[self.pos] != '"':
                    point = self._char()
                    last.append(Chars(((point, point),)))
                self.pos += 1
            elif c == "[":
                last = [self._class()]
            elif c == ".":
                self.pos += 1
                last = [Chars(((0, MAX_CODE_POINT),))]
            elif c == "(":
                self.pos += 1
                self._space(True)
                group = self._alternatives(True)
                if text[self.pos] != ")":
                    raise ValueError(f"expected ) at {self.pos}")
                self.pos += 1
                last = [self._fresh(group)]
            elif c in _NAME:
                last = [self._name()]
            else:
                raise ValueError(f"unexpected {c!r} at {self.pos}")
            out.extend(self._repeat(last))
        return tuple(out)

    def _repeat(self, item: list[object]) -> list[object]:
        """``item`` with the repetition that follows it, as rules of its own."""
        text = self.text
        if self.pos >= len(text) or text[self.pos] not in "*+?{":
            return item
        c = text[self.pos]
        self.pos += 1
        if c == "{":
            end = text.index("}", self.pos)
            low_text, _, high_text = text[self.pos : end].partition(",")
            low = int(low_text.strip())
            high = (
                low
                if "," not in text[self.pos : end]
                else (int(high_text) if high_text.strip() else None)
            )
            self.pos = end + 1
        else:
            low, high = {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
        element = item[0] if len(item) == 1 else self._fresh([tuple(item)])
        out = [element] * low
        if high is None:
            star = self._fresh([])
            self.rules[star] += [(element, star), ()]
            return [*out, star]
        tail: tuple[object, ...] = ()
        for _ in range(high - low):
            tail = (self._fresh([(element, *tail), ()]),)
        return [*out, *tail]

    def _char(self) -> int:
        text = self.text
        c = text[self.pos]
        if c != "\\":
            self.pos += 1
            return ord(c)
        e = text[self.pos + 1]
        size = {"x": 2, "u": 4, "U": 8}.get(e)
        if size is not None:
            self.pos += 2 + size
            return int(text[self.pos - size : self.pos], 16)
        self.pos += 2
        return ord(_ESCAPES.get(e, e))

    def _class(self) -> Chars:
        self.pos += 1
        negated = self.text[self.pos] == "^"
        self.pos += negated
        ranges = []
        while self.text[self.pos] != "]":
            low = self._char()
            high = low
            if self.text[self.pos] == "-" and self.text[self.pos + 1] != "]":
                self.pos += 1
                high = self._char()
            ranges.append((low, high))
        self.pos += 1
        return Chars(tuple(ranges), negated)


Frame = tuple[str, int, int]  # rule, alternative, position in it
Stack = tuple[Frame, ...]  # the innermost frame last


class Steering:
    """Where a text stands in a grammar (llama.cpp's stacks) and how far the grammar's end is."""

    def __init__(self, gbnf: str) -> None:
        self.rules, self.least = _read(gbnf)
        self.rests: dict[Frame, float] = {}
        self.stacks = self._expand(((ROOT, a, 0),) for a in range(len(self.rules[ROOT])))
        self.pending = b""  # the bytes of a code point not yet whole

    def _rest(self, frame: Frame) -> float:
        rest = self.rests.get(frame)
        if rest is None:
            rest = self.rests[frame] = _rest_of(self.rules, self.least, frame)
        return rest

    def _expand(self, stacks: Iterable[Stack]) -> frozenset[Stack]:
        """Stacks whose innermost element is a class (or empty: the grammar may end)."""
        out: set[Stack] = set()
        todo = list(stacks)
        seen: set[Stack] = set()
        while todo:
            stack = todo.pop()
            if stack in seen:
                continue
            seen.add(stack)
            if not stack:
                out.add(stack)
                continue
            name, alt, pos = stack[-1]
            sequence = self.rules[name][alt]
            if pos == len(sequence):
                todo.append(stack[:-1])
                continue
            element = sequence[pos]
            if isinstance(element, Chars):
                out.add(stack)
                continue
            # a rule at the end of its alternative replaces it (llama.cpp's tail call)
            after = stack[:-1] if pos + 1 == len(sequence) else (*stack[:-1], (name, alt, pos + 1))
            child = str(element)
            todo.extend((*after, (child, a, 0)) for a in range(len(self.rules[child])))
        return frozenset(out)

    def feed(self, data: bytes) -> None:
        """Follow ``data`` (UTF-8 bytes, a code point possibly split across calls)."""
        for byte in data:
            self.pending, point = _take(self.pending, byte)
            if point is None:
                continue
            self.stacks = self._expand(
                (*s[:-1], (s[-1][0], s[-1][1], s[-1][2] + 1))
                for s in self.stacks
                if s and _top(self, s).meets(point, point)
            )

    def well_formed(self) -> np.ndarray:
        """For each token, whether the text stays well-formed UTF-8 after it (no end of
        generation inside a code point)."""
        return _well_formed(self.pending)

    def distances(self) -> np.ndarray:
        """For each token (``<unk>``, ``<s>``, ``</s>``, then the 256 bytes), the fewest
        characters the reply still has with it, the token's own character counted (``FAR``
        where the grammar cannot take the token): where the grammar may end or go on with
        free text, ending is the nearer."""
        out = np.full(3 + 256, FAR)
        if not self.stacks:
            return out  # lost: no steering
        best: dict[Chars, float] = {}
        for stack in self.stacks:
            if not stack:
                out[2] = 0.0
                continue
            chars, cost = _top(self, stack), sum(map(self._rest, stack)) - 1
            best[chars] = min(cost, best.get(chars, FAR))
        for chars, cost in best.items():
            out[3:] = np.minimum(out[3:], np.where(_byte_mask(chars, self.pending), cost + 1, FAR))
        return out


class LazySteering:
    """A lazy grammar's steering: before a trigger, towards the nearest trigger word (what the
    grammar needs after the word included); once a trigger pattern matches, the grammar's own
    steering fed the text from the trigger's start, as llama.cpp's sampler feeds its grammar.

    ``words``: the trigger words; ``patterns``: llama.cpp's trigger regular expressions."""

    def __init__(self, gbnf: str, words: Sequence[str], patterns: Sequence[str]) -> None:
        if not words:
            raise ValueError("a lazy grammar is steered towards its trigger words: none given")
        self.gbnf, self.text, self.pending = gbnf, b"", b""
        self.patterns = [re.compile(p.encode("utf-8")) for p in patterns]
        self.words = [w.encode("utf-8") for w in words]
        self.tables = [_matcher(w) for w in self.words]
        self.matched = [0] * len(self.words)  # how much of each word the text ends with
        self.after = [_after(gbnf, w) for w in self.words]
        self.inner: Steering | None = None

    def feed(self, data: bytes) -> None:
        for i, byte in enumerate(data):
            if self.inner is not None:
                self.inner.feed(data[i:])
                return
            self.text += bytes([byte])
            self.pending = _take(self.pending, byte)[0]
            self.matched = [int(t[m, byte]) for t, m in zip(self.tables, self.matched, strict=True)]
            start = _trigger_start(self.patterns, self.text)
            if start is not None:
                self.inner = Steering(self.gbnf)
                self.inner.feed(self.text[start:])

    def well_formed(self) -> np.ndarray:
        return self.inner.well_formed() if self.inner else _well_formed(self.pending)

    def nearest(self) -> float:
        """The fewest characters to the grammar's end before any trigger word is written."""
        return min(len(w) + a for w, a in zip(self.words, self.after, strict=True))

    def distances(self) -> np.ndarray:
        if self.inner is not None:
            return self.inner.distances()
        out = np.full(3 + 256, FAR)
        for word, table, matched, after in zip(
            self.words, self.tables, self.matched, self.after, strict=True
        ):
            out[3:] = np.minimum(out[3:], len(word) - table[matched] + after)
        return out


class ThoughtSteering:
    """Inside a thought a lazy grammar never sees (llama-server's reasoning budget): towards the
    nearest of the thought's end ``tags``, ``after`` characters then still to go."""

    def __init__(self, tags: Sequence[str], after: float) -> None:
        self.tags = [t.encode("utf-8") for t in tags]
        self.tables = [_matcher(t) for t in self.tags]
        self.matched = [0] * len(self.tags)
        self.after, self.pending = after, b""

    def reset(self) -> None:
        """A new thought: nothing of an end tag matched yet."""
        self.matched = [0] * len(self.tags)
        self.pending = b""

    def feed(self, data: bytes) -> None:
        for byte in data:
            self.pending = _take(self.pending, byte)[0]
            self.matched = [int(t[m, byte]) for t, m in zip(self.tables, self.matched, strict=True)]

    def well_formed(self) -> np.ndarray:
        return _well_formed(self.pending)

    def distances(self) -> np.ndarray:
        out = np.full(3 + 256, FAR)
        for tag, table, matched in zip(self.tags, self.tables, self.matched, strict=True):
            out[3:] = np.minimum(out[3:], len(tag) - table[matched] + self.after)
        return out


def _trigger_start(patterns: Sequence[re.Pattern[bytes]], text: bytes) -> int | None:
    """Where llama.cpp's lazy grammar starts reading: at the first trigger pattern that matches,
    its first non-empty group, else the match."""
    for pattern in patterns:
        match = pattern.search(text)
        if match:
            groups = [i for i in range(1, (match.re.groups or 0) + 1) if match.group(i)]
            return match.start(groups[0]) if groups else match.start()
    return None


@lru_cache(maxsize=256)
def _matcher(word: bytes) -> np.ndarray:
    """The word's matching automaton: ``table[m, byte]`` is how much of ``word`` the text ends
    with after ``byte``, when it ended with ``m`` bytes of it."""
    table = np.zeros((len(word) + 1, 256), dtype=np.int64)
    for m in range(len(word) + 1):
        for byte in range(256):
            seen = word[:m] + bytes([byte])
            k = min(len(word), len(seen))
            while k and not seen.endswith(word[:k]):
                k -= 1
            table[m, byte] = k
    return table


@lru_cache(maxsize=256)
def _after(gbnf: str, word: bytes) -> float:
    """The fewest characters the grammar needs after ``word``."""
    steering = Steering(gbnf)
    steering.feed(word)
    if not steering.stacks:
        return FAR
    return min(sum(map(steering._rest, stack)) for stack in steering.stacks)


def _take(pending: bytes, byte: int) -> tuple[bytes, int | None]:
    """The bytes of a code point still pending after ``byte``, and the code point it completes
    (-1 for bytes that never make one)."""
    pending += bytes([byte])
    try:
        return b"", ord(pending.decode("utf-8"))
    except UnicodeDecodeError:
        return (pending, None) if len(pending) < 4 else (b"", -1)


def _top(steering: Steering, stack: Stack) -> Chars:
    name, alt, pos = stack[-1]
    element = steering.rules[name][alt][pos]
    assert isinstance(element, Chars)
    return element


def _rest_of(rules: Rules, least: dict[str, float], frame: Frame) -> float:
    name, alt, pos = frame
    return sum(_size(e, least) for e in rules[name][alt][pos:])


def _size(element: object, least: dict[str, float]) -> float:
    return 1.0 if isinstance(element, Chars) else least[str(element)]


@lru_cache(maxsize=64)
def _read(gbnf: str) -> tuple[Rules, dict[str, float]]:
    """A grammar's rules and each rule's fewest characters."""
    rules = _Reader(gbnf).rules
    least = dict.fromkeys(rules, float("inf"))
    changed = True
    while changed:
        changed = False
        for name, alternatives in rules.items():
            best = min(sum(_size(e, least) for e in alt) for alt in alternatives)
            if best < least[name]:
                least[name], changed = best, True
    return rules, least


@lru_cache(maxsize=1024)
def _well_formed(pending: bytes) -> np.ndarray:
    out = np.zeros(3 + 256, dtype=bool)
    out[2] = not pending
    out[3:] = [code_points(pending + bytes([b])) is not None for b in range(256)]
    return out


@lru_cache(maxsize=65536)
def _byte_mask(chars: Chars, pending: bytes) -> np.ndarray:
    """Which next bytes (after the ``pending`` bytes of a code point) may begin a code point of
    ``chars``."""
    mask = np.zeros(256, dtype=bool)
    for byte in range(256):
        span = code_points(pending + bytes([byte]))
        mask[byte] = span is not None and chars.meets(*span)
    return mask


_SIZES = ((0x80, 1, 0x00, 0x7F), (0xE0, 2, 0x80, 0x7FF), (0xF0, 3, 0x800, 0xFFFF))


@lru_cache(maxsize=4096)
def code_points(prefix: bytes) -> tuple[int, int] | None:
    """The code points whose UTF-8 starts with ``prefix``, as a range (None: no such)."""
    lead = prefix[0]
    if 0x80 <= lead < 0xC0 or lead >= 0xF8:
        return None
    size, low_end, high_end = 4, 0x10000, 0x10FFFF
    for below, n, low_bound, high_bound in _SIZES:
        if lead < below:
            size, low_end, high_end = n, low_bound, high_bound
            break
    if len(prefix) > size or any(not 0x80 <= b < 0xC0 for b in prefix[1:]):
        return None
    value = lead & (0x7F >> size if size > 1 else 0x7F)
    for b in prefix[1:]:
        value = value << 6 | b & 0x3F
    missing = size - len(prefix)
    low = max(value << 6 * missing, low_end)
    high = min((value << 6 * missing) | ((1 << 6 * missing) - 1), high_end)
    if low > high or 0xD800 <= low and high <= 0xDFFF:
        return None  # an overlong form, past U+10FFFF, or a surrogate
    return low, high
