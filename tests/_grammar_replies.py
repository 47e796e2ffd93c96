"""Replies to judge a reply grammar on, and the text of each that llama.cpp's grammar judges.

``replies(case, openers)``: a corpus case's outputs (the reply, its cuts, its partials) and
mutations of its reply written in the family's own syntax, found generically from where the
first call starts (``openers``: the triggers that open a call, ``call_openers``): the call
renamed to an undeclared tool (and to a declared name extended), the call block written twice,
an argument given a value of the wrong type or outside its ``enum``, content before the call,
and trailing text after the reply.

``judged_text(grammar, generation_prompt, reply, thinking)``: what llama.cpp's grammar sampler
is given of a reply, so that ``{"op": "accept"}`` (which feeds a whole text to a fresh grammar)
judges what the sampler would:

- a whole grammar (not lazy): ``generation_prompt + reply`` (llama.cpp feeds the generation
  prompt's tokens to a chat grammar before sampling: common/sampling.cpp, the prefill of
  ``COMMON_GRAMMAR_TYPE_TOOL_CALLS`` grammars);
- a lazy grammar: the text from the first trigger on, ``None`` when no trigger ever fires. The
  sampler appends each token to a buffer and, after every token, tries the token triggers,
  then the patterns in the order of the triggers (src/llama-grammar.cpp,
  ``llama_grammar_accept_impl``): a ``word`` is its escaped text, a ``pattern`` is searched
  anywhere, a ``pattern_full`` is anchored (``^...$``); a pattern written ``^...$`` is first
  matched against the whole buffer, then searched. The constrained text starts at the first
  capture group that matched something, else at the match. Tokens here are bytes (the test
  GGUF's vocabulary): the buffer is tried after every byte, so a pattern whose match depends on
  where the buffer ends (``$``, a lookahead) fires at the first byte that completes it. A
  ``token`` trigger is taken as the text of its token. Regexes are ECMAScript ``std::regex``
  over bytes: ``.`` excludes ``\\n`` and ``\\r``, ``$`` is the end of the buffer only.
- with ``thinking`` (the thought's start tag and end tags, as llama.cpp's setup records them),
  the reasoning-budget sampler that llama-server adds beside a lazy grammar: inside a thought
  (from the start tag, or from the generation prompt when it opens one, to the longest end tag)
  nothing reaches the grammar; the end tag that closes a thought is replayed into it
  (common/sampling.cpp, ``common_sampler_accept``; common/reasoning-budget.cpp).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from chatcodec.grammar.constraint import Grammar, Trigger

from ._reply_oracle import prepare_request

__all__ = [
    "GrammarLike",
    "Reply",
    "Thinking",
    "ReasoningBudget",
    "call_openers",
    "grammar_input",
    "judged_text",
    "recorded_grammar",
    "replies",
    "thinking_tags",
    "trigger_start",
]

# the thought's start tag and its end tags
Thinking = tuple[str, Sequence[str]]


class TriggerLike(Protocol):
    @property
    def type(self) -> str: ...

    @property
    def value(self) -> str: ...


class GrammarLike(Protocol):
    @property
    def lazy(self) -> bool: ...

    @property
    def triggers(self) -> Sequence[TriggerLike]: ...


@dataclass(frozen=True)
class Reply:
    """A text to judge: ``kind`` is the corpus output's (``final``, ``partial``, ...) or the
    mutation's name (``m_...``)."""

    kind: str
    text: str


# ------------------------------------------------------------------ llama.cpp's recorded setup


def recorded_grammar(setup: Mapping[str, Any] | None) -> Grammar | None:
    """llama.cpp's setup of a corpus case as a Grammar (None where it sets none)."""
    if not setup or not setup.get("grammar"):
        return None
    return Grammar(
        setup["grammar"],
        bool(setup["grammar_lazy"]),
        tuple(Trigger(t["type"], t["value"]) for t in setup["grammar_triggers"]),
        tuple(setup["preserved_tokens"]),
        tuple(setup["additional_stops"]),
    )


def thinking_tags(setup: Mapping[str, Any] | None) -> Thinking | None:
    """The reasoning-budget tags llama-server takes from a setup (None: it adds no budget)."""
    if not setup or not setup.get("thinking_start_tag"):
        return None
    ends = tuple(t for t in setup.get("thinking_end_tags") or () if t)
    return (setup["thinking_start_tag"], ends) if ends else None


# ------------------------------------------------------------------ what the grammar judges


def judged_text(
    grammar: GrammarLike, generation_prompt: str, reply: str, thinking: Thinking | None = None
) -> str | None:
    """The text llama.cpp's grammar is given of ``reply`` (module docstring); None when a lazy
    grammar never wakes up (the reply is not constrained at all)."""
    if not grammar.lazy:
        return generation_prompt + reply
    fed = grammar_input(generation_prompt, reply, thinking)
    start = trigger_start(grammar.triggers, fed)
    if start is None:
        return None
    return fed[start:].decode("utf-8")


class _TagMatcher:
    """llama.cpp's token matcher of the reasoning budget, over bytes: after each byte, the
    longest tag that ends here (the matcher restarts after a match)."""

    def __init__(self, tags: Sequence[bytes]) -> None:
        self.tags = sorted({t for t in tags if t}, key=len, reverse=True)
        self.keep = max((len(t) for t in self.tags), default=1)
        self.seen = b""

    def advance(self, byte: bytes) -> bytes | None:
        self.seen = (self.seen + byte)[-self.keep :]
        for tag in self.tags:
            if self.seen.endswith(tag):
                self.seen = b""
                return tag
        return None

    def reset(self) -> None:
        self.seen = b""


class ReasoningBudget:
    """llama-server's reasoning-budget sampler beside a lazy grammar, byte by byte: ``feed``
    takes a byte of the output and gives what of it reaches the grammar (the byte outside a
    thought, nothing inside one, the end tag when it closes one)."""

    def __init__(self, thinking: Thinking, generation_prompt: str = "") -> None:
        self.starts = _TagMatcher([thinking[0].encode("utf-8")])
        self.ends = _TagMatcher([t.encode("utf-8") for t in thinking[1]])
        self.counting = False  # inside a thought
        for byte in generation_prompt.encode("utf-8"):
            self._accept(bytes((byte,)))

    def _accept(self, byte: bytes) -> bytes | None:
        """The budget sampler takes a byte; the end tag when it closes a thought."""
        if self.counting:
            tag = self.ends.advance(byte)
            if tag is not None:
                self.counting = False
            return tag
        if self.starts.advance(byte) is not None:
            self.counting = True
            self.ends.reset()
        return None

    def feed(self, byte: int) -> bytes:
        piece = bytes((byte,))
        applies = not self.counting
        closed = self._accept(piece)
        if applies:
            return piece
        return closed or b""


def grammar_input(generation_prompt: str, reply: str, thinking: Thinking | None = None) -> bytes:
    """The bytes of ``reply`` a lazy grammar is given, in order: all of them, or, beside a
    reasoning budget, all but the thoughts' (each closing end tag replayed instead)."""
    data = reply.encode("utf-8")
    if thinking is None:
        return data
    budget = ReasoningBudget(thinking, generation_prompt)
    return b"".join(budget.feed(byte) for byte in data)


def _python_regex(pattern: str) -> re.Pattern[bytes]:
    """An ECMAScript ``std::regex`` over bytes as a Python bytes regex: outside classes ``.``
    excludes ``\\r`` as well and ``$`` is the end of the input only."""
    out: list[str] = []
    in_class = False
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            if pattern[i + 1] == "u":
                raise ValueError(f"\\u escapes are not translated: {pattern!r}")
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            in_class = c != "]"
            out.append(c)
        elif c == "[":
            in_class = True
            out.append(c)
        elif c == ".":
            out.append("[^\\n\\r]")
        elif c == "$":
            out.append("\\Z")
        else:
            out.append(c)
        i += 1
    return re.compile("".join(out).encode("utf-8"))


def _capture_start(match: re.Match[bytes]) -> int:
    """llama.cpp's start of the constrained text: the first capture group that matched
    something, else the match."""
    for group in range(1, (match.re.groups or 0) + 1):
        if match.end(group) - match.start(group) > 0:
            return match.start(group)
    return match.start()


@dataclass(frozen=True)
class _Check:
    """One trigger as llama.cpp tries it on the buffer."""

    word: bytes | None
    regex: re.Pattern[bytes] | None
    anchored: bool
    monotone: bool

    def find(self, buffer: bytes) -> int | None:
        if self.word is not None:
            at = buffer.find(self.word)
            return at if at >= 0 else None
        assert self.regex is not None
        if self.anchored:
            whole = self.regex.fullmatch(buffer)
            if whole:
                return _capture_start(whole)
        found = self.regex.search(buffer)
        return _capture_start(found) if found else None

    def first_end(self, data: bytes, limit: int) -> int | None:
        """The shortest buffer ``data[:end]`` (``end <= limit``) this trigger fires on."""
        if self.word is not None:
            at = data.find(self.word)
            end = at + len(self.word) if at >= 0 else None
            return end if end is not None and end <= limit else None
        if self.monotone:
            # a match stays a match as the buffer grows: bisect for the first buffer holding one
            if self.find(data[:limit]) is None:
                return None
            low, high = 1, limit
            while low < high:
                mid = (low + high) // 2
                low, high = (low, mid) if self.find(data[:mid]) is not None else (mid + 1, high)
            return low
        return next((end for end in range(1, limit + 1) if self.find(data[:end]) is not None), None)


def _checks(triggers: Sequence[TriggerLike]) -> list[_Check]:
    """The triggers in the order llama.cpp tries them: token triggers, then the others."""
    ordered = [t for t in triggers if t.type == "token"] + [
        t for t in triggers if t.type != "token"
    ]
    checks = []
    for t in ordered:
        if t.type in ("word", "token"):
            checks.append(_Check(t.value.encode("utf-8"), None, False, True))
            continue
        source = t.value
        if t.type == "pattern_full":
            source = (
                "^$"
                if not source
                else (
                    ("" if source.startswith("^") else "^")
                    + source
                    + ("" if source.endswith("$") else "$")
                )
            )
        anchored = bool(source) and source[0] == "^" and source[-1] == "$"
        monotone = not any(s in source for s in ("$", "(?=", "(?!", "\\b", "\\B"))
        checks.append(_Check(None, _python_regex(source), anchored, monotone))
    return checks


def trigger_start(triggers: Sequence[TriggerLike], data: bytes) -> int | None:
    """Where llama.cpp's lazy grammar starts in ``data`` (the bytes it is given), or None:
    the first buffer ``data[:end]`` some trigger fires on, and the first trigger (in
    llama.cpp's order) that fires on it."""
    checks = _checks(triggers)
    end: int | None = None
    for check in checks:
        found = check.first_end(data, len(data) if end is None else end)
        if found is not None:
            end = found
    if end is None:
        return None
    return next(s for s in (c.find(data[:end]) for c in checks) if s is not None)


# ------------------------------------------------------------------ replies and their mutations


def call_openers(case: Mapping[str, Any]) -> tuple[Trigger, ...]:
    """The triggers that open a call in the case's template: its lazy grammar's own, else
    those of the same request with ``tool_choice`` auto (chatcodec's setup of it, equal to
    llama.cpp's on the corpus)."""
    setup = case.get("llama_cpp") or {}
    if setup.get("grammar_lazy"):
        return tuple(Trigger(t["type"], t["value"]) for t in setup["grammar_triggers"])
    if not case.get("tools"):
        return ()
    turn = prepare_request({**case, "tool_choice": "auto"})
    return turn.format.constraint.triggers


def replies(case: Mapping[str, Any], openers: Sequence[TriggerLike]) -> list[Reply]:
    """The case's outputs and the mutations of its reply, each text once."""
    seen: set[str] = set()
    out: list[Reply] = []
    for reply in [Reply(o["kind"], o["text"]) for o in case["outputs"]] + _mutations(case, openers):
        if reply.text not in seen:
            seen.add(reply.text)
            out.append(reply)
    return out


def _final(case: Mapping[str, Any]) -> Mapping[str, Any] | None:
    return next((o for o in case["outputs"] if o["kind"] == "final"), None)


def _mutations(case: Mapping[str, Any], openers: Sequence[TriggerLike]) -> list[Reply]:
    final = _final(case)
    if final is None:
        return []
    text = final["text"]
    out = [Reply("m_trailing_text", text + "\nThat is all for now.")]
    calls = (final.get("expected") or {}).get("tool_calls") or []
    start = trigger_start(openers, text.encode("utf-8")) if calls and openers else None
    if start is None:
        return out
    # the call's start as a character offset (a trigger starts on a character boundary)
    at = len(text.encode("utf-8")[:start].decode("utf-8"))
    block = text[at:]
    out.append(Reply("m_second_call", text + block))
    out.append(Reply("m_content_before_call", text[:at] + "Let me check that.\n" + block))
    name = calls[0]["name"]
    for kind, new in (("m_undeclared_tool", "undeclared_tool"), ("m_longer_name", name + "_x")):
        renamed = _replace_word(block, name, new)
        if renamed is not None:
            out.append(Reply(kind, text[:at] + renamed))
    for kind, mutated in _argument_mutations(case, calls, block):
        out.append(Reply(kind, text[:at] + mutated))
    return out


def _replace_word(text: str, word: str, new: str) -> str | None:
    """``text`` with the first whole-word ``word`` replaced, or None when it has none."""
    m = re.search(rf"(?<![A-Za-z0-9_]){re.escape(word)}(?![A-Za-z0-9_])", text)
    return None if m is None else text[: m.start()] + new + text[m.end() :]


def _tool_schema(case: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    for tool in case.get("tools") or ():
        fn = tool.get("function", tool)
        if fn.get("name") == name:
            return fn.get("parameters") or {}
    return {}


def _value_span(block: str, key: str, value: Any) -> tuple[int, int, bool] | None:
    """Where the argument's value is written after its name: (start, end, written as JSON)."""
    after = block.find(key)
    if after < 0:
        return None
    forms = [(json.dumps(value, ensure_ascii=False), True)]
    forms.append((json.dumps(value, ensure_ascii=False, separators=(",", ":")), True))
    if isinstance(value, str):
        forms.append((value, False))
    for form, as_json in forms:
        at = block.find(form, after + len(key))
        if at >= 0:
            return at, at + len(form), as_json
    return None


def _argument_mutations(
    case: Mapping[str, Any], calls: Sequence[Mapping[str, Any]], block: str
) -> list[tuple[str, str]]:
    """The calls with one argument's value of the wrong type (a typed argument first), and
    with one outside its ``enum``."""
    arguments: list[tuple[str, Any, Mapping[str, Any]]] = []
    for call in calls:
        try:
            values = json.loads(call["arguments"])
        except (TypeError, ValueError):
            continue
        properties = _tool_schema(case, call["name"]).get("properties") or {}
        if isinstance(values, dict):
            arguments += [(k, v, properties.get(k) or {}) for k, v in values.items()]
    out: list[tuple[str, str]] = []
    for key, value, _ in sorted(arguments, key=lambda a: _is_string(a[2])):
        span = _value_span(block, key, value)
        if span is None or (isinstance(value, str) and not span[2]):
            continue  # a raw string slot takes any text: no wrong type to write there
        wrong = "12345" if isinstance(value, str) else '"not the right type"'
        out.append(("m_wrong_type", block[: span[0]] + wrong + block[span[1] :]))
        break
    for key, value, schema in arguments:
        span = (
            _value_span(block, key, value) if "enum" in schema and isinstance(value, str) else None
        )
        if span is not None:
            written = block[span[0] : span[1]].replace(value, value + "_not_in_enum", 1)
            out.append(("m_outside_enum", block[: span[0]] + written + block[span[1] :]))
            break
    return out


def _is_string(schema: Any) -> bool:
    if not isinstance(schema, Mapping):
        return True
    types = schema.get("type")
    return types == "string" or (isinstance(types, list) and "string" in types)
