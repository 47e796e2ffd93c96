"""Marker-aware diffs of two renders (llama.cpp's calculate_diff_split and its helpers)."""

from __future__ import annotations

from dataclasses import dataclass

from ...strings import common_prefix_length

__all__ = [
    "TEXT",
    "MARKER",
    "Segment",
    "Split",
    "segmentize",
    "prune_whitespace",
    "diff_split",
    "common_prefix_length",
    "until_common_prefix",
    "trim",
    "trim_leading",
]

TEXT, MARKER = "TEXT", "MARKER"
_SPACE = " \t\n\v\f\r"


def trim(s: str) -> str:
    return s.strip(_SPACE)


def trim_leading(s: str) -> str:
    return s.lstrip(_SPACE)


@dataclass(frozen=True)
class Segment:
    type: str
    value: str


@dataclass(frozen=True)
class Split:
    """``a == prefix + left + suffix`` and ``b == prefix + right + suffix``."""

    prefix: str = ""
    suffix: str = ""
    left: str = ""
    right: str = ""


def segmentize(text: str) -> list[Segment]:
    """``<...>`` and ``[...]`` runs are markers, the rest text (an unclosed run is text)."""
    out: list[Segment] = []
    in_marker = False
    opener = ""
    border = 0
    for i, c in enumerate(text):
        if not in_marker and c in "<[":
            if border < i:
                out.append(Segment(TEXT, text[border:i]))
            border = i
            in_marker = True
            opener = c
        elif in_marker and ((opener == "<" and c == ">") or (opener == "[" and c == "]")):
            out.append(Segment(MARKER, text[border : i + 1]))
            border = i + 1
            in_marker = False
    if border < len(text):
        out.append(Segment(TEXT, text[border:]))
    return out


def prune_whitespace(segments: list[Segment]) -> list[Segment]:
    return [seg for seg in segments if trim(seg.value)]


def _common_suffix(a: str, b: str) -> int:
    n = 0
    limit = min(len(a), len(b))
    while n < limit and a[len(a) - 1 - n] == b[len(b) - 1 - n]:
        n += 1
    return n


def diff_split(left: str, right: str) -> Split:
    """Whole segments are matched from both ends; characters only between text segments."""
    ls, rs = segmentize(left), segmentize(right)
    if not ls:
        return Split(right=right)
    if not rs:
        return Split(left=left)
    a, b = 0, len(ls) - 1
    c, d = 0, len(rs) - 1
    prefix = ""
    suffix = ""
    left_done = right_done = False
    while a != b and c != d:
        advanced = False
        if ls[a] == rs[c]:
            prefix += ls[a].value
            a += 1
            c += 1
            advanced = True
        if ls[b] == rs[d]:
            suffix = ls[b].value + suffix
            if a != b:
                b -= 1
            else:
                left_done = True
            if c != d:
                d -= 1
            else:
                right_done = True
            advanced = True
        if not advanced:
            break
    if a == b and c != d:
        if ls[a] == rs[d]:
            suffix = rs[d].value + suffix
            d -= 1
            left_done = True
        elif ls[a] == rs[c]:
            prefix += rs[c].value
            c += 1
            left_done = True
    elif c == d and a != b:
        if ls[b] == rs[c]:
            suffix = ls[b].value + suffix
            b -= 1
            right_done = True
        elif ls[a] == rs[c]:
            prefix += ls[a].value
            a += 1
            right_done = True
    elif a == b and c == d and ls[a] == rs[c] and ls[a].type == MARKER:
        prefix += rs[c].value
        left_done = right_done = True
    text_suffix = ls[b].type == TEXT and rs[d].type == TEXT
    text_prefix = rs[c].type == TEXT and ls[a].type == TEXT
    rem_left = "".join(seg.value for seg in ls[a : b if left_done else b + 1])
    rem_right = "".join(seg.value for seg in rs[c : d if right_done else d + 1])
    suffix_len = _common_suffix(rem_left, rem_right) if text_suffix else 0
    prefix_len = (
        common_prefix_length(
            rem_left[: len(rem_left) - suffix_len], rem_right[: len(rem_right) - suffix_len]
        )
        if text_prefix
        else 0
    )
    prefix += rem_left[:prefix_len]
    suffix = rem_left[len(rem_left) - suffix_len :] + suffix
    out_left = rem_left[prefix_len : len(rem_left) - suffix_len]
    out_right = rem_right[prefix_len : len(rem_right) - suffix_len]
    if not out_left and not out_right:
        prefix, suffix = left, ""
    if not out_left and out_right and len(left) <= len(right) and right.startswith(left):
        prefix, suffix, out_right = left, "", right[len(left) :]
    return Split(prefix, suffix, out_left, out_right)


def until_common_prefix(full: str, left: str, right: str) -> str:
    """``full`` up to where the common prefix of ``left`` and ``right`` first occurs."""
    n = common_prefix_length(left, right)
    if n == 0:
        return ""
    at = full.find(left[:n])
    return full[:at] if at >= 0 else ""
