"""A request's grammar for engines other than llama.cpp: llguidance's Lark, xgrammar's structural
tag, and the request fields of llama.cpp's server, vLLM and SGLang (docs/grammar.md).

llama.cpp runs a grammar in one of two ways: a whole grammar is fed the generation prompt first
(its root starts with it), a lazy one waits until a trigger appears in the output and is fed the
output from that trigger on. Engines that constrain the whole output from its first character
get the same language here: a whole grammar without the generation prompt (``after``), and a
lazy grammar as "any text without a trigger, then, optionally, a trigger and the rest of the
grammar after it" (word triggers; a regex trigger cannot be carried and raises GrammarError).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Any, Protocol

from ..errors import GrammarError
from .gbnf import (
    EMPTY,
    Alt,
    AnyChar,
    Chars,
    Lit,
    Node,
    Ref,
    Repeat,
    Rules,
    Seq,
    after,
    parse_gbnf,
    reachable,
    rename_all,
    write_gbnf,
)
from .gbnf import clear_cache as clear_gbnf_cache


class _TriggerLike(Protocol):
    @property
    def type(self) -> str: ...
    @property
    def value(self) -> str: ...


class Grammar(Protocol):
    """What the exports read of a ``chatcodec.grammar.constraint.Grammar``."""

    @property
    def gbnf(self) -> str: ...
    @property
    def lazy(self) -> bool: ...
    @property
    def triggers(self) -> Sequence[_TriggerLike]: ...
    @property
    def preserved_tokens(self) -> Sequence[str]: ...
    @property
    def additional_stops(self) -> Sequence[str]: ...
    @property
    def generation_prompt(self) -> str: ...
    def __hash__(self) -> int: ...  # the exports are made once per grammar


__all__ = [
    "clear_cache",
    "output_gbnf",
    "to_lark",
    "to_structural_tag",
    "llama_server_fields",
    "vllm_fields",
    "sglang_fields",
]

# llama.cpp's common_grammar_trigger_type, as its server reads "grammar_triggers"
_TRIGGER_TYPES = {"token": 0, "word": 1, "pattern": 2, "pattern_full": 3}


def _words(grammar: Grammar) -> list[str]:
    """The texts that wake a lazy grammar (a ``token`` trigger is its token's text)."""
    regexes = [t.value for t in grammar.triggers if t.type in ("pattern", "pattern_full")]
    if regexes:
        raise GrammarError(
            f"a lazy grammar woken by a regex ({regexes[0]!r}) cannot be exported: "
            "only word and token triggers can"
        )
    return list(dict.fromkeys(t.value for t in grammar.triggers))


def _whole(grammar: Grammar) -> Rules:
    """A whole grammar's rules from the first character the model writes on."""
    rules = parse_gbnf(grammar.gbnf)
    rest = after(rules, grammar.generation_prompt)
    if rest is None:
        raise GrammarError(
            f"the grammar does not start with the generation prompt {grammar.generation_prompt!r}"
        )
    return rest


def _triggered(grammar: Grammar) -> list[tuple[str, Rules]]:
    """Per trigger word, the rules of what may follow it (words no grammar text starts with
    left out: llama.cpp's sampler would reject the output there)."""
    rules = parse_gbnf(grammar.gbnf)
    out = []
    for word in _words(grammar):
        rest = after(rules, word)
        if rest is not None:
            out.append((word, rest))
    return out


@lru_cache(maxsize=128)
def output_gbnf(grammar: Grammar) -> str:
    """The GBNF of a whole grammar as an engine without llama.cpp's generation-prompt feeding
    runs it: from the model's first character on (``GrammarError`` for a lazy grammar, whose
    text starts at a trigger: see ``to_structural_tag``)."""
    if grammar.lazy:
        raise GrammarError("a lazy grammar has no whole-output GBNF: use its structural tag")
    return write_gbnf(_whole(grammar))


# --------------------------------------------------------------------------------------- Lark


def _lark_name(name: str) -> str:
    """A GBNF rule name as a Lark rule name: lowercase (an uppercase name is a terminal), each
    capital written ``_`` + its lowercase (GBNF names hold no ``_``, so no two names meet)."""
    out = "".join(f"_{c.lower()}" if c.isupper() else c for c in name)
    if not out[:1].isalpha() or not out[:1].islower() or out == "start":
        out = "g_" + out
    return out


def _lark_char(c: int) -> str:
    return f"\\x{{{c:X}}}"


_SPECIAL = re.compile(r"<[^<>\s]+>")  # a token llguidance's Lark can name: <name>


def _lark_literal(text: str, special: tuple[str, ...]) -> str:
    """A literal, one lexeme per character, but for the special tokens in it: ``<token>``."""
    if not text:
        return '""'
    parts = []
    i = 0
    while i < len(text):
        token = max((t for t in special if text.startswith(t, i)), key=len, default="")
        if token:
            parts.append(token)
            i += len(token)
            continue
        ch = text[i]
        parts.append(json.dumps(ch) if 0x20 <= ord(ch) < 0x7F else f"/{_lark_char(ord(ch))}/")
        i += 1
    return " ".join(parts)


def _lark_node(node: Node, names: dict[str, str], special: tuple[str, ...] = ()) -> str:
    """One expression in Lark; every character its own lexeme, so that llguidance's lexer,
    which takes the longest lexeme it can, never splits the text otherwise than GBNF may."""
    if isinstance(node, Lit):
        return _lark_literal(node.text, special)
    if isinstance(node, Chars):
        body = "".join(
            _lark_char(lo) if lo == hi else f"{_lark_char(lo)}-{_lark_char(hi)}"
            for lo, hi in node.ranges
        )
        return f"/[{'^' if node.negated else ''}{body}]/"
    if isinstance(node, AnyChar):
        return "/(?s:.)/"
    if isinstance(node, Ref):
        return names[node.name]
    if isinstance(node, Seq):
        if not node.items:
            return '""'
        return " ".join(_lark_group(i, names, Alt, special) for i in node.items)
    if isinstance(node, Alt):
        if not node.items:
            raise GrammarError("GBNF: an expression matches nothing")
        return " | ".join(_lark_node(i, names, special) for i in node.items)
    assert isinstance(node, Repeat)
    inner = _lark_group(node.item, names, (Seq, Alt), special)
    lo, hi = node.min, node.max
    if (lo, hi) == (0, 1):
        return inner + "?"
    if (lo, hi) == (0, -1):
        return inner + "*"
    if (lo, hi) == (1, -1):
        return inner + "+"
    if hi == -1:
        return f"{inner}{{{lo},}}"
    return f"{inner}{{{lo}}}" if lo == hi else f"{inner}{{{lo},{hi}}}"


def _lark_group(
    node: Node, names: dict[str, str], kinds: type | tuple[type, ...], special: tuple[str, ...]
) -> str:
    text = _lark_node(node, names, special)
    multi = isinstance(node, Lit) and len(node.text) > 1
    return f"({text})" if isinstance(node, kinds) and node != EMPTY or multi else text


def _lark_rules(
    rules: Rules, root: str, names: dict[str, str], special: tuple[str, ...]
) -> list[str]:
    return [
        f"{names[name]}: {_lark_node(rules[name], names, special)}"
        for name in reachable(rules, root)
    ]


def _prefixed(rules: Rules, prefix: str) -> tuple[Rules, str]:
    """The rules renamed ``prefix + name`` (so that several grammars share one Lark file)."""
    return rename_all(rules, prefix), prefix + "root"


def to_lark(grammar: Grammar, special_tokens: Sequence[str] = ()) -> str:
    """The grammar in llguidance's Lark: a whole grammar from the model's first character on;
    a lazy one as any text without a trigger word, then optionally a trigger word and what the
    grammar accepts after it. ``special_tokens``: the tokens the engine's tokenizer keeps as
    special (llguidance matches those by name, ``<token>``, never as text); each must read
    ``<name>`` (``GrammarError`` otherwise)."""
    for token in special_tokens:
        if not _SPECIAL.fullmatch(token):
            raise GrammarError(f"llguidance's Lark cannot name the special token {token!r}")
    return _to_lark(grammar, tuple(sorted(set(special_tokens))))


@lru_cache(maxsize=128)
def _to_lark(grammar: Grammar, special: tuple[str, ...]) -> str:
    lines = ["%llguidance {}", ""]
    if not grammar.lazy:
        rules = _whole(grammar)
        names = {name: _lark_name(name) for name in rules}
        lines.append(f"start: {names['root']}")
        lines += _lark_rules(rules, "root", names, special)
        return "\n".join(lines) + "\n"
    from .rules import Rules as Builder
    from .rules import until

    triggered = _triggered(grammar)
    free = parse_gbnf(Builder().gbnf(until(*_words(grammar)), lazy=False))
    merged, free_root = _prefixed(free, "free-")
    branches = []
    for k, (word, rest) in enumerate(triggered):
        renamed, root = _prefixed(rest, f"t{k}-")
        merged.update(renamed)
        branches.append((word, root))
    names = {name: _lark_name(name) for name in merged}
    calls = " | ".join(f"{_lark_literal(w, special)} {names[r]}" for w, r in branches)
    lines.append(f"start: {names[free_root]}" + (f" ({calls})?" if branches else ""))
    written = set()
    for root in [free_root, *(r for _, r in branches)]:
        for line in _lark_rules(merged, root, names, special):
            if line not in written:
                written.add(line)
                lines.append(line)
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------ xgrammar structural tag


def clear_cache() -> None:
    """Forget the exports made so far (each is made once per grammar), and the GBNF read."""
    clear_gbnf_cache()
    output_gbnf.cache_clear()
    _to_lark.cache_clear()
    _structural_tag_json.cache_clear()


def to_structural_tag(grammar: Grammar) -> dict[str, Any]:
    """xgrammar's structural tag: a whole grammar as one ``grammar`` format (EBNF, from the
    model's first character on); a lazy one as ``triggered_tags`` woken by its trigger words,
    each tag the trigger and what the grammar accepts after it, ending with the output
    (``stop_after_first``: once triggered, llama.cpp constrains the rest of the output). A
    new dict each call (made once per grammar)."""
    tag: dict[str, Any] = json.loads(_structural_tag_json(grammar))
    return tag


@lru_cache(maxsize=128)
def _structural_tag_json(grammar: Grammar) -> str:
    return json.dumps(_structural_tag(grammar))


def _structural_tag(grammar: Grammar) -> dict[str, Any]:
    if not grammar.lazy:
        return {
            "type": "structural_tag",
            "format": {"type": "grammar", "grammar": write_gbnf(_whole(grammar))},
        }
    tags = [
        {
            "type": "tag",
            "begin": word,
            "content": {"type": "grammar", "grammar": write_gbnf(rest)},
            "end": "",
        }
        for word, rest in _triggered(grammar)
    ]
    return {
        "type": "structural_tag",
        "format": {
            "type": "triggered_tags",
            "triggers": [tag["begin"] for tag in tags],
            "tags": tags,
            "at_least_one": False,
            "stop_after_first": True,
        },
    }


# ---------------------------------------------------------------------------- request fields


def llama_server_fields(grammar: Grammar) -> dict[str, Any]:
    """The fields of a llama.cpp server ``/completion`` request (the prompt being the turn's):
    a whole grammar without the generation prompt (the server feeds a user grammar nothing
    first), a lazy one as llama.cpp wrote it with its triggers (``type`` as the server's
    numbers: 0 token, 1 word, 2 pattern, 3 pattern_full; a token trigger is sent as its word,
    which the server turns back into the token), the tokens to keep whole, and the extra stops
    (to add to the turn's own ``stop``)."""
    fields: dict[str, Any] = {
        "grammar": grammar.gbnf if grammar.lazy else output_gbnf(grammar),
        "grammar_lazy": grammar.lazy,
        "grammar_triggers": [
            {"type": _TRIGGER_TYPES["word" if t.type == "token" else t.type], "value": t.value}
            for t in grammar.triggers
        ]
        if grammar.lazy
        else [],
        "preserved_tokens": list(grammar.preserved_tokens),
    }
    if grammar.additional_stops:
        fields["stop"] = list(grammar.additional_stops)
    return fields


def llama_cpp_python_fields(grammar: Grammar) -> dict[str, Any]:
    """The fields of a llama-cpp-python server ``/v1/completions`` request: the ``grammar``
    of the whole output (it runs a grammar from the first token and has no lazy grammars:
    ``GrammarError`` for one), and the extra stops."""
    fields: dict[str, Any] = {"grammar": output_gbnf(grammar)}
    if grammar.additional_stops:
        fields["stop"] = list(grammar.additional_stops)
    return fields


def _xgrammar_fields(grammar: Grammar) -> dict[str, Any]:
    if grammar.lazy:
        return {"structural_tag": json.dumps(to_structural_tag(grammar), ensure_ascii=False)}
    return {"grammar": output_gbnf(grammar)}


def vllm_fields(grammar: Grammar) -> dict[str, Any]:
    """vLLM's request fields: ``structured_outputs`` with the ``grammar`` (EBNF) of a whole
    grammar or the ``structural_tag`` (a JSON string) of a lazy one, and the extra stops."""
    fields: dict[str, Any] = {"structured_outputs": _xgrammar_fields(grammar)}
    if grammar.additional_stops:
        fields["stop"] = list(grammar.additional_stops)
    return fields


def sglang_fields(grammar: Grammar) -> dict[str, Any]:
    """SGLang's ``sampling_params``: ``ebnf`` for a whole grammar, ``structural_tag`` (a JSON
    string) for a lazy one, and the extra stops."""
    fields = _xgrammar_fields(grammar)
    if "grammar" in fields:
        fields = {"ebnf": fields["grammar"]}
    if grammar.additional_stops:
        fields["stop"] = list(grammar.additional_stops)
    return fields
