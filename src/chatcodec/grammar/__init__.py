"""Grammars that force a valid reply (GBNF), as llama.cpp builds them.

``Grammar`` is a request's grammar as the sampler takes it (``turn.grammar``: GBNF, lazy,
triggers, preserved tokens, extra stops, and its exports for other engines); ``rules`` holds
llama.cpp's parser combinators on the grammar side, which every reply family writes its grammar
with. The JSON-schema part: ``json_schema_to_gbnf(schema)`` is llama.cpp's
``json_schema_to_grammar``, ``GrammarBuilder`` the builder every llama.cpp reply grammar is made
with, ``format_literal`` its ``gbnf_format_literal``, ``read_schema`` its schema reader
(docs/grammar.md).
"""

from __future__ import annotations

from ..errors import GrammarError, GrammarWarning
from .constraint import Grammar, Trigger
from .document import SchemaDocument, dump_json, read_schema
from .schema import GrammarBuilder, format_literal, json_schema_to_gbnf

__all__ = [
    "Grammar",
    "Trigger",
    "GrammarBuilder",
    "GrammarError",
    "GrammarWarning",
    "SchemaDocument",
    "dump_json",
    "format_literal",
    "json_schema_to_gbnf",
    "read_schema",
]
