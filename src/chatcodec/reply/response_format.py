"""The response format's JSON value as the families read it (llama.cpp's
``p.content(p.schema(p.json(), ...))``): the text of the ``content`` node is the content."""

from __future__ import annotations

from . import peg

__all__ = ["json_content", "fenced_json"]


def json_content() -> peg.Parser:
    """One JSON value, its text the content (the schema only shapes the grammar)."""
    return peg.Tag("content", peg.json_value)


def fenced_json() -> peg.Parser:
    """A fenced value: the ``json`` fence opener, space, one JSON value (the content), space,
    the closing fence."""
    return peg.Seq(
        peg.Literal("```json"), peg.Space(), json_content(), peg.Space(), peg.Literal("```")
    )
