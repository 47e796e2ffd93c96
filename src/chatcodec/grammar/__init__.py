"""Grammars that force a valid reply (GBNF), as llama.cpp builds them.

So far the JSON-schema part: ``json_schema_to_gbnf(schema)`` is llama.cpp's
``json_schema_to_grammar``, ``GrammarBuilder`` the builder every llama.cpp reply grammar is made
with, ``format_literal`` its ``gbnf_format_literal``, ``read_schema`` its schema reader
(docs/grammar.md).
"""

from __future__ import annotations

from ..errors import GrammarError, GrammarWarning
from .document import SchemaDocument, dump_json, read_schema
from .schema import GrammarBuilder, format_literal, json_schema_to_gbnf

__all__ = [
    "GrammarBuilder",
    "GrammarError",
    "GrammarWarning",
    "SchemaDocument",
    "dump_json",
    "format_literal",
    "json_schema_to_gbnf",
    "read_schema",
]
