"""Issue 8: hypothesis-built replies, per reply family, checked against the decoder's promises.

A reply is built from the family's own reply-format pieces — the markers of the turn's
format (thought, content stops, call openers and name markers, commit markers, stops), the
corpus replies cut at those markers — interleaved with generated text: sentinel words
(``zq<n>x``), JSON values and calls to the request's tools, random unicode, deep brackets,
many repeats of a piece (many calls). Either free (any sequence of pieces) or a corpus reply
edited piece by piece (a piece kept, dropped, doubled, or preceded by a new one). Each reply
is streamed whole, in random pieces and byte by byte, and checked by
``_reply_invariants.check_reply``: only ``ReplyError`` escapes, stream = parse, deltas are
final, and no sentinel is lost that ``dropped`` does not name.

The run is seeded and database-less (the same examples every run). The long run takes the
fuzz suite's variable (examples per family):

    CHATCODEC_FUZZ=20000 python -m pytest tests/test_fuzz_generated.py -q
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from chatcodec import ChatCodecError
from chatcodec.reply import Turn

from ._reply_invariants import SENTINEL, check_reply, fuzz_cases, reply_markers, sentinel
from ._reply_oracle import PARSE_CASES, cases_by_template, chunks, cut, per_case, prepare_request
from .test_fuzz_replies import TEMPLATES

EXAMPLES = int(os.environ.get("CHATCODEC_FUZZ", "25"))
SEED = int(os.environ.get("CHATCODEC_FUZZ_SEED", "8"))
HOLE = "\x00S\x00"  # where a fresh sentinel goes when the reply is put together
UNICODE = ["é", "中文", "🚀", "\u200b", "e\u0301", "\ufeff", "\r\n", "\t", "  ", "\\", '"', "'"]
PUNCTUATION = [" ", "\n", "<", ">", "[", "]", "{", "}", ":", ",", "|", "=", "/", "."]


@dataclass(frozen=True)
class Family:
    """What a template's replies are built from."""

    turns: tuple[Turn, ...]
    replies: tuple[tuple[int, tuple[str, ...]], ...]  # (turn index, corpus reply cut at markers)
    markers: tuple[str, ...]
    tools: tuple[str, ...]
    arguments: tuple[str, ...]


def _pieces(text: str, markers: list[str]) -> tuple[str, ...]:
    """``text`` cut before and after every marker (markers kept as pieces of their own)."""
    if not markers:
        return (text,)
    pattern = "(" + "|".join(re.escape(m) for m in sorted(markers, key=len, reverse=True)) + ")"
    return tuple(p for p in re.split(pattern, text) if p)


@cache
def _family(template: str) -> Family:
    turns: list[Turn] = []
    replies: list[tuple[int, tuple[str, ...]]] = []
    markers: set[str] = set()
    tools: set[str] = set()
    arguments: set[str] = set()
    for case in fuzz_cases(cases_by_template().get(template, ()), 10):
        try:
            turn = prepare_request(case)
        except ChatCodecError:
            continue
        found = reply_markers(turn)
        markers.update(found)
        for tool in case.get("tools") or ():
            function = tool.get("function", tool)
            tools.add(function["name"])
            arguments.update((function.get("parameters") or {}).get("properties") or {})
        texts = sorted({o["text"] for o in case["outputs"] if not o["is_partial"]})[:3]
        replies += [(len(turns), _pieces(text, found)) for text in texts]
        turns.append(turn)
    return Family(
        tuple(turns),
        tuple(replies),
        tuple(sorted(markers)),
        tuple(sorted(tools)),
        tuple(sorted(arguments)),
    )


# ------------------------------------------------------------------ the generated pieces


def _words() -> st.SearchStrategy[str]:
    """Text: sentinels between spaces, punctuation and unicode."""
    part = st.sampled_from([HOLE] * 4 + PUNCTUATION + UNICODE) | st.text(max_size=3)
    return st.lists(part, min_size=1, max_size=8).map("".join)


def _json(family: Family) -> st.SearchStrategy[Any]:
    keys = st.sampled_from([HOLE, "name", "arguments", *family.arguments])
    scalars = (
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=False, allow_infinity=False)
        | _words()
    )

    def containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        return st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3)

    return st.recursive(scalars, containers, max_leaves=6)


def _dumps(value: Any, ascii_only: bool) -> str:
    return json.dumps(value, ensure_ascii=ascii_only)


def _call(family: Family) -> st.SearchStrategy[str]:
    """A JSON call to one of the request's tools (or an unknown one)."""
    name = st.sampled_from([*family.tools, HOLE]) if family.tools else st.just(HOLE)
    body = st.fixed_dictionaries({"name": name, "arguments": _json(family)})
    return st.builds(_dumps, body, st.booleans())


def _piece(family: Family, segments: list[str]) -> st.SearchStrategy[str]:
    """One piece of a reply: a marker, a corpus piece (maybe with a sentinel inside, maybe
    repeated), words, JSON, a call, or deep brackets."""
    options: list[st.SearchStrategy[str]] = [
        _words(),
        st.builds(_dumps, _json(family), st.booleans()),
        _call(family),
        st.builds(
            lambda opener, depth: opener * depth,
            st.sampled_from(["[", '{"a": ', "{", "<"]),
            st.sampled_from([2, 30, 1200]),
        ),
    ]
    if family.markers:
        options.append(st.sampled_from(family.markers))
    if segments:
        segment = st.sampled_from(segments)
        options += [
            segment,
            st.builds(_with_hole, segment, st.floats(0, 1)),
            st.builds(lambda s, n: s * n, segment, st.integers(2, 30)),
        ]
    return st.one_of(options)


def _with_hole(text: str, where: float) -> str:
    at = int(where * len(text))
    return text[:at] + HOLE + text[at:]


def _fill(text: str) -> str:
    """Each hole becomes a sentinel of its own (zq0x, zq1x, ...)."""
    counter = iter(range(1_000_000))
    return re.sub(re.escape(HOLE), lambda _: sentinel(next(counter)), text)


@st.composite
def _reply(draw: Callable[..., Any], family: Family) -> tuple[Turn, str]:
    index, corpus = draw(st.sampled_from(family.replies), label="corpus reply")
    segments = sorted({s for _, pieces in family.replies for s in pieces})
    piece = _piece(family, segments)
    if draw(st.sampled_from([True, False, False]), label="free"):
        parts = draw(st.lists(piece, min_size=1, max_size=10), label="pieces")
    else:  # the corpus reply edited piece by piece
        parts = []
        for original in corpus:
            edit = draw(st.sampled_from(["keep"] * 12 + ["drop", "double", "insert"] + ["insert"]))
            if edit == "insert":
                parts.append(draw(piece))
            if edit != "drop":
                parts.append(original)
            if edit == "double":
                parts.append(original)
        if draw(st.booleans(), label="append"):
            parts.append(draw(piece))
    return family.turns[index], _fill("".join(parts))


@pytest.mark.parametrize("template", per_case(PARSE_CASES.exists(), lambda: TEMPLATES, str))
def test_generated_replies_keep_the_decoders_promises(template: str) -> None:
    family = _family(template)
    assert family.replies, f"no corpus reply for {template}"

    @seed(SEED)
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.large_base_example,
        ],
    )
    @given(reply=_reply(family), data=st.data())
    def check(reply: tuple[Turn, str], data: st.DataObject) -> None:
        turn, text = reply
        cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=10), label="cuts")
        every = list(text) if len(text) <= 4000 else chunks(text, 3)
        check_reply(turn, text, [[text], cut(text, cuts), every])

    check()


def test_the_sentinels_are_words_no_marker_holds() -> None:
    # a sentinel in the reply is the generated text's, never a piece of a family's markup
    for template in TEMPLATES if PARSE_CASES.exists() else ():
        family = _family(template)
        assert not any(SENTINEL.search(m) for m in family.markers), template
        assert not any(SENTINEL.search(p) for _, ps in family.replies for p in ps), template
    assert _fill(f"a{HOLE}b{HOLE}") == "azq0xbzq1x"
