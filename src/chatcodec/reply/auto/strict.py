"""Strict (non-lenient) tagged patterns for reading markers off template renders.

llama.cpp's analyzer reads renders with small PEG patterns run without leniency: reaching the
end of the text fails a literal, and a pattern's tags are read back as strings (the last node
of a tag wins). These are those semantics, for whole finished strings only.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = [
    "P",
    "lit",
    "seq",
    "choice",
    "optional",
    "zero_or_more",
    "until",
    "rest",
    "space",
    "marker",
    "negate",
    "any_char",
    "end",
    "tag",
    "parse",
    "parse_anywhere",
]

Tags = list[tuple[str, str]]
# a pattern: (text, pos) -> (end position or -1 on failure, tags in document order)
P = Callable[[str, int], tuple[int, Tags]]

_SPACE = frozenset(" \t\n\v\f\r")


def lit(s: str) -> P:
    def run(text: str, pos: int) -> tuple[int, Tags]:
        return (pos + len(s), []) if text.startswith(s, pos) else (-1, [])

    return run


def seq(*parts: P) -> P:
    def run(text: str, pos: int) -> tuple[int, Tags]:
        tags: Tags = []
        for part in parts:
            pos, got = part(text, pos)
            if pos < 0:
                return -1, []
            tags.extend(got)
        return pos, tags

    return run


def choice(*alts: P) -> P:
    def run(text: str, pos: int) -> tuple[int, Tags]:
        for alt in alts:
            end, got = alt(text, pos)
            if end >= 0:
                return end, got
        return -1, []

    return run


def _repeat(child: P, hi: int) -> P:
    def run(text: str, pos: int) -> tuple[int, Tags]:
        tags: Tags = []
        count = 0
        while hi < 0 or count < hi:
            if pos >= len(text):
                break
            end, got = child(text, pos)
            if end < 0 or end == pos:
                break
            tags.extend(got)
            pos = end
            count += 1
        return pos, tags

    return run


def optional(child: P) -> P:
    return _repeat(child, 1)


def zero_or_more(child: P) -> P:
    return _repeat(child, -1)


def until(*delimiters: str) -> P:
    """Text up to the first delimiter, or up to a delimiter prefix that the text ends in."""
    delims = tuple(d for d in delimiters if d)

    def run(text: str, pos: int) -> tuple[int, Tags]:
        n = len(text)
        while pos < n:
            for d in delims:
                if text.startswith(d, pos) or d.startswith(text[pos:]):
                    return pos, []
            pos += 1
        return pos, []

    return run


def rest() -> P:
    return until()


def space() -> P:
    def run(text: str, pos: int) -> tuple[int, Tags]:
        n = len(text)
        while pos < n and text[pos] in _SPACE:
            pos += 1
        return pos, []

    return run


def marker() -> P:
    return choice(seq(lit("<"), until(">"), lit(">")), seq(lit("["), until("]"), lit("]")))


def negate(child: P) -> P:
    def run(text: str, pos: int) -> tuple[int, Tags]:
        end, _ = child(text, pos)
        return (-1, []) if end >= 0 else (pos, [])

    return run


def any_char() -> P:
    def run(text: str, pos: int) -> tuple[int, Tags]:
        return (pos + 1, []) if pos < len(text) else (-1, [])

    return run


def end() -> P:
    def run(text: str, pos: int) -> tuple[int, Tags]:
        return (pos, []) if pos >= len(text) else (-1, [])

    return run


def tag(name: str, child: P) -> P:
    def run(text: str, pos: int) -> tuple[int, Tags]:
        e, got = child(text, pos)
        if e < 0:
            return -1, []
        return e, [(name, text[pos:e]), *got]

    return run


def _tags(found: Tags) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in found:
        out[name] = value
    return out


def parse(p: P, text: str) -> tuple[bool, dict[str, str]]:
    e, found = p(text, 0)
    return (True, _tags(found)) if e >= 0 else (False, {})


def parse_anywhere(p: P, text: str) -> tuple[bool, dict[str, str]]:
    """The first start position where the pattern matches (llama.cpp tries each in turn)."""
    if not text:
        return parse(p, text)
    for i in range(len(text)):
        e, found = p(text, i)
        if e >= 0:
            return True, _tags(found)
    return False, {}
