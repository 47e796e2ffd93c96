"""The round trip of training data (``chatcodec check-data``, issue 11).

A model fine-tuned on rendered conversations learns to write each assistant turn as the
template renders it. This module checks that the checkpoint's own reply reader gives that
turn back: for assistant message ``i``, the decoder prepared on ``messages[:i]`` (what a
server sets up when the model is asked to write that turn) reads the turn's span of the
rendered conversation (``render_with_spans``), cut at the first stop string as a server cuts
it, and the message it reads is compared with message ``i`` as OpenAI messages: content and
reasoning with the whitespace at their edges ignored (templates trim it), tool calls by name
and arguments as JSON values (ids are not compared: templates drop them or the model writes
its own).

A turn that does not come back carries the reasons, one code each (``REASONS``); a
conversation the template cannot render is reported as such, with no turns.
"""

from __future__ import annotations

import json
import warnings
import weakref
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .errors import ChatCodecError, RequestError
from .strings import common_prefix_length
from .template.render import ChatTemplate

if TYPE_CHECKING:
    from .codec import Codec
    from .recipe import CodecRecipe
    from .reply.message import AssistantMessage
    from .template.render import RenderedChat, Span

__all__ = [
    "REASONS",
    "ConversationCheck",
    "DataReport",
    "TurnCheck",
    "check_data",
    "check_item",
    "check_record",
    "check_turns",
    "expected_message",
    "read_message",
    "setup_checker",
]

# code -> what it says about the template and the data
REASONS = {
    "no_span": "no span of the rendered conversation was found for the turn",
    "not_prepared": "the decoder cannot be prepared on the conversation before the turn",
    "unreadable": "the decoder refuses the turn's text (a ReplyError)",
    "stop_inside": "the turn's text holds a stop string before its end: the model would stop there",
    "prompt_opens_thought": "the generation prompt opens a thought that the turn as rendered "
    "does not have: the turn's text reads as reasoning",
    "dropped_text": "the decoder drops part of the turn's text (see the dropped reasons)",
    "content_differs": "the content read back differs from the message's",
    "content_missing": "the template does not write the message's content into the turn",
    "reasoning_dropped": "the template drops the reasoning from the turn in history",
    "reasoning_not_read": "the reasoning is in the turn's text but the decoder does not read it as reasoning",
    "reasoning_differs": "the reasoning read back differs from the message's",
    "reasoning_extra": "the decoder reads reasoning the message does not have as such "
    "(e.g. a <think> block inline in the content)",
    "tool_calls_dropped": "the template does not write the message's tool calls into the turn",
    "tool_calls_not_read": "the tool calls are in the turn's text but the decoder reads none "
    "(the template writes them differently from how the model is read)",
    "tool_calls_differ": "the tool calls read back differ (names or arguments as JSON values)",
    "tool_calls_extra": "the decoder reads tool calls the message does not have",
    "tool_calls_without_tools": "the turn calls tools but the conversation offers none: a "
    "server reads no calls from a reply to a request without tools",
}


@dataclass(frozen=True)
class TurnCheck:
    """One assistant turn: ``index`` in the messages, ``reasons`` (codes of ``REASONS``,
    empty when the turn comes back), the message expected and read (OpenAI shape, None when
    nothing was read), the turn's text and a short ``detail`` of the first difference."""

    index: int
    reasons: tuple[str, ...] = ()
    expected: dict[str, Any] | None = None
    read: dict[str, Any] | None = None
    text: str = ""
    detail: str = ""

    @property
    def ok(self) -> bool:
        return not self.reasons

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"index": self.index, "ok": self.ok}
        if not self.ok:
            out |= {"reasons": list(self.reasons), "detail": self.detail, "text": self.text}
            out |= {"expected": self.expected, "read": self.read}
        return out


@dataclass(frozen=True)
class ConversationCheck:
    """The turns of one conversation; ``error`` when it cannot be rendered at all."""

    id: Any = None
    template: str | None = None
    turns: tuple[TurnCheck, ...] = ()
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error and all(turn.ok for turn in self.turns)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "template": self.template, "ok": self.ok}
        if self.error:
            out["error"] = self.error
        out["turns"] = [turn.to_dict() for turn in self.turns]
        return out


@dataclass
class DataReport:
    """Counts over a dataset, per template (the name ``Codec.select`` picks, or the
    record's template file): conversations, turns, turns that come back, the reasons."""

    conversations: Counter[str] = field(default_factory=Counter)
    failed_conversations: Counter[str] = field(default_factory=Counter)
    unrendered: Counter[str] = field(default_factory=Counter)
    turns: Counter[str] = field(default_factory=Counter)
    good_turns: Counter[str] = field(default_factory=Counter)
    reasons: dict[str, Counter[str]] = field(default_factory=dict)

    def add(self, check: ConversationCheck) -> None:
        name = check.template or "default"
        self.conversations[name] += 1
        self.failed_conversations[name] += not check.ok
        self.unrendered[name] += bool(check.error)
        reasons = self.reasons.setdefault(name, Counter())
        for turn in check.turns:
            self.turns[name] += 1
            self.good_turns[name] += turn.ok
            reasons.update(turn.reasons)

    @property
    def ok(self) -> bool:
        return not any(self.failed_conversations.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            name: {
                "conversations": self.conversations[name],
                "failed_conversations": self.failed_conversations[name],
                "unrendered": self.unrendered[name],
                "turns": self.turns[name],
                "good_turns": self.good_turns[name],
                "reasons": dict(self.reasons.get(name, Counter()).most_common()),
            }
            for name in sorted(self.conversations)
        }


def check_turns(
    codec: Codec,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None = None,
    documents: Sequence[Mapping[str, Any]] | None = None,
    *,
    now: float | int | None = None,
    reasoning_format: str = "deepseek",
    policy: str = "guaranteed",
    id: Any = None,
    **context: Any,
) -> ConversationCheck:
    """Check that each assistant turn of ``messages`` reads back into the same message (see
    the module docstring). ``context`` holds template variables (``enable_thinking``, ...),
    passed to the render and to the decoder alike. ``policy`` is the decoder's (``Codec.prepare``):
    ``guaranteed`` by default, as ``chatcodec serve`` reads replies."""
    template = codec.select(tools)
    try:
        rendered = codec.render_with_spans(
            messages, tools, documents, add_generation_prompt=False, now=now, **context
        )
    except ChatCodecError as exc:
        return ConversationCheck(id, template, error=f"{type(exc).__name__}: {exc}")
    extra = dict(context)
    if documents is not None:
        extra["documents"] = documents
    turns = [
        _check_turn(
            codec, messages, index, rendered, span, tools, now, reasoning_format, policy, extra
        )
        for index, span in _pair_spans(messages, rendered)
    ]
    return ConversationCheck(id, template, tuple(turns))


def _pair_spans(
    messages: Sequence[Mapping[str, Any]], rendered: RenderedChat
) -> Iterator[tuple[int, Span | None]]:
    """Each assistant message's index and its span. The spans come in message order, one per
    turn found: with as many spans as turns they pair in order; else a turn takes the next
    span holding its content, and has none when no span does."""
    indices = [
        i for i, m in enumerate(messages) if isinstance(m, Mapping) and m.get("role") == "assistant"
    ]
    spans = list(rendered.spans)
    cursor = 0
    for position, index in enumerate(indices):
        if len(spans) - cursor == len(indices) - position:
            yield index, spans[cursor]
            cursor += 1
            continue
        anchor = _text(messages[index].get("content")).strip()
        found = next(
            (
                k
                for k in range(cursor, len(spans))
                if anchor and anchor in rendered.text[spans[k].start : spans[k].end]
            ),
            None,
        )
        if found is None:
            yield index, None
        else:
            yield index, spans[found]
            cursor = found + 1


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # typed blocks: their text parts, in order
        return "".join(
            str(block.get("text", ""))
            for block in content
            if isinstance(block, Mapping) and block.get("type") == "text"
        )
    return ""


def _arguments(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def expected_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """A dataset's assistant message in the comparison shape: content and reasoning text
    (``reasoning_content``, or its aliases ``reasoning`` and ``thinking``), and the calls as
    ``{"name", "arguments"}`` with the arguments as a JSON value."""
    reasoning = next(
        (
            message[key]
            for key in ("reasoning_content", "reasoning", "thinking")
            if isinstance(message.get(key), str)
        ),
        "",
    )
    calls = []
    listed = message.get("tool_calls")
    for call in listed if isinstance(listed, (list, tuple)) else ():
        function = call.get("function", call) if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping):  # (what the template rendered of it is read)
            function = {}
        calls.append(
            {"name": function.get("name"), "arguments": _arguments(function.get("arguments"))}
        )
    return {"content": _text(message.get("content")), "reasoning": reasoning, "tool_calls": calls}


def read_message(parsed: AssistantMessage) -> dict[str, Any]:
    """A parsed reply in the comparison shape of ``expected_message``."""
    return {
        "content": parsed.content,
        "reasoning": parsed.reasoning_content,
        "tool_calls": [
            {"name": c.name, "arguments": _arguments(c.arguments)} for c in parsed.tool_calls
        ],
    }


def _check_turn(
    codec: Codec,
    messages: Sequence[Mapping[str, Any]],
    index: int,
    rendered: RenderedChat,
    span: Span | None,
    tools: Sequence[Mapping[str, Any]] | None,
    now: float | int | None,
    reasoning_format: str,
    policy: str,
    context: dict[str, Any],
) -> TurnCheck:
    expected = expected_message(messages[index])
    if span is None:
        return TurnCheck(index, ("no_span",), expected, detail=REASONS["no_span"])
    text = rendered.text[span.start : span.end]
    try:
        turn = codec.prepare(
            messages[:index],
            tools=tools,
            reasoning_format=reasoning_format,
            policy=policy,
            continue_final_message=False,
            now=now,
            tool_call_id=0,
            **context,
        )
    except ChatCodecError as exc:
        detail = f"{type(exc).__name__}: {exc}"
        return TurnCheck(index, ("not_prepared",), expected, text=text, detail=detail)
    start = _reply_start(rendered.text, turn.prompt, turn.generation_prompt, span)
    text = rendered.text[start : span.end]
    reply, stopped = _cut_at_stop(text, (*turn.stop, *_end_marker(codec, tools, now, context)))
    try:
        parsed = turn.parse(reply)
    except ChatCodecError as exc:
        detail = f"{type(exc).__name__}: {exc}"
        return TurnCheck(index, ("unreadable",), expected, text=text, detail=detail)
    read = read_message(parsed)
    reasons, detail = _differences(expected, read, text, tools)
    rest = text[len(reply) :]
    if stopped and any(piece in rest and piece not in reply for piece in _pieces(expected)):
        reasons.insert(0, "stop_inside")  # the model would stop before writing them
        detail = f"stops at {stopped!r} before {rest[:60]!r}; {detail}"
    if parsed.dropped and not reasons:
        reasons.append("dropped_text")
        detail = "; ".join(f"{d.reason}: {d.text[:60]!r}" for d in parsed.dropped)
    return TurnCheck(index, tuple(reasons), expected, read, text, detail)


_SENTINEL = "chatcodec-end-of-turn-probe"
_markers: weakref.WeakKeyDictionary[ChatTemplate, tuple[str, ...]] = weakref.WeakKeyDictionary()


def _end_marker(
    codec: Codec,
    tools: Sequence[Mapping[str, Any]] | None,
    now: float | int | None,
    context: Mapping[str, Any],
) -> tuple[str, ...]:
    """The marker the template writes after an assistant turn's text (``<|im_end|>``,
    ``<end_of_turn>``, ``</s>``), found by rendering a probe conversation: a server stops on
    it as an end-of-generation token, which the template's stop strings need not name."""
    template = codec.template_for(tools)
    found = _markers.get(template)
    if found is None:
        probe = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": _SENTINEL}]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                text = template.render(probe, tools, now=now, **context)
        except ChatCodecError:
            text = ""
        tail = text[text.rfind(_SENTINEL) + len(_SENTINEL) :] if _SENTINEL in text else ""
        words = tail.split()
        found = (words[0],) if words else ()
        _markers[template] = found
    return found


def _cut_at_stop(text: str, stops: Sequence[str]) -> tuple[str, str]:
    """(the reply a server returns, the stop string found before text that follows it: ""
    when the reply ends at the turn's end or at a stop followed by whitespace only)."""
    first, stop = len(text), ""
    for candidate in stops:
        at = text.find(candidate) if candidate else -1
        if 0 <= at < first:
            first, stop = at, candidate
    if not stop:
        return text, ""
    rest = text[first + len(stop) :]
    return text[:first], ("" if not rest.strip() else stop)


# how far before its span a turn's text may start: the part of an assistant header where the
# prompt a server sends parts from the turn as rendered in history
_HEADER = 64


def _reply_start(text: str, prompt: str, opening: str, span: Span) -> int:
    """Where the model's text starts in the rendered conversation: after the prompt a server
    sends for the turn when the conversation goes on from it; else where the two part, when
    that is inside the generation prompt ``opening`` and the turn's header (the prompt opens
    a thought, or another block, that the turn in history does not have); else after the
    generation prompt where it opens the turn's span (a derived span may start a little off:
    inside a marker, or before the header); else at the span's start."""
    if text.startswith(prompt) and len(prompt) <= span.end:
        return len(prompt)
    common = common_prefix_length(text, prompt)
    # not inside a marker: `<think>` and `</think>` share `<`, `[INST]` and `[TOOL_CALLS]` `[`
    opened = max(text.rfind(mark, 0, common) for mark in "<[")
    if opened > max(text.rfind(mark, 0, common) for mark in ">]"):
        common = opened
    inside_opening = common >= len(prompt) - len(opening)  # not in the turns before
    if inside_opening and span.start - _HEADER <= common < span.end:
        return common
    if opening:
        at = text.rfind(opening, max(0, span.start - _HEADER), span.start + len(opening))
        if at >= 0 and at + len(opening) < span.end:
            return at + len(opening)
    return span.start


def _pieces(expected: dict[str, Any]) -> list[str]:
    calls = [c["name"] for c in expected["tool_calls"] if isinstance(c["name"], str)]
    pieces = [expected["content"].strip(), expected["reasoning"].strip(), *calls]
    return [piece for piece in pieces if piece]


def _differences(
    expected: dict[str, Any], read: dict[str, Any], text: str, tools: Any
) -> tuple[list[str], str]:
    reasons: list[str] = []
    details: list[str] = []
    want, got = expected["content"].strip(), read["content"].strip()
    thought = read["reasoning"]
    if (
        not got
        and not read["tool_calls"]
        and thought.strip() != expected["reasoning"].strip()
        and any(p != expected["reasoning"].strip() for p in _pieces(expected))
        and all(p in thought for p in _pieces(expected) if p != expected["reasoning"].strip())
    ):
        # the content and calls are there, read as reasoning: say it once
        return ["prompt_opens_thought"], f"read as reasoning: {thought[:80]!r}"
    if want != got:
        reasons.append("content_differs" if not want or want in text else "content_missing")
        details.append(f"content {got[:60]!r}, expected {want[:60]!r}")
    want, got = expected["reasoning"].strip(), read["reasoning"].strip()
    if want != got:
        if want and not got:
            reasons.append("reasoning_not_read" if want in text else "reasoning_dropped")
        elif got and not want:
            reasons.append("reasoning_extra")
        else:
            reasons.append("reasoning_differs")
        details.append(f"reasoning {got[:60]!r}, expected {want[:60]!r}")
    want_calls, got_calls = expected["tool_calls"], read["tool_calls"]
    if want_calls != got_calls:
        if want_calls and not got_calls and not tools:
            reasons.append("tool_calls_without_tools")
        elif want_calls and not got_calls:
            names = [c["name"] for c in want_calls]
            written = all(isinstance(n, str) and n in text for n in names)
            reasons.append("tool_calls_not_read" if written else "tool_calls_dropped")
        elif got_calls and not want_calls:
            reasons.append("tool_calls_extra")
        else:
            reasons.append("tool_calls_differ")
        details.append(f"calls {_short(got_calls)}, expected {_short(want_calls)}")
    return reasons, "; ".join(details)


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 80 else text[:77] + "..."


# what check_turns passes by name itself, to the render and to Codec.prepare: a template
# variable of a record (its chat_template_kwargs) cannot take one of these names
OWN_KEYWORDS = frozenset(
    {"self", "codec", "messages", "tools", "documents", "id", "now", "reasoning_format"}
    | {"policy", "add_generation_prompt", "continue_final_message", "template_name"}
    | {"tool_call_id", "tool_choice", "parallel_tool_calls", "response_format"}
)


def check_data(
    codec: Codec,
    records: Iterable[Mapping[str, Any]],
    **options: Any,
) -> Iterator[ConversationCheck]:
    """``check_turns`` of each record (``{"messages", "tools"?, "documents"?, "id"?,
    "chat_template_kwargs"?}``), in order; ``options`` are ``check_turns``' keywords."""
    for number, record in enumerate(records):
        yield check_record(codec, record, number, options)


def check_record(
    codec: Codec, record: Mapping[str, Any], number: int, options: Mapping[str, Any]
) -> ConversationCheck:
    """One record of a dataset (its ``id``, else its position)."""
    ident = record.get("id", number)
    messages = record.get("messages")
    if not isinstance(messages, list):
        return ConversationCheck(ident, None, error="the record has no 'messages' list")
    try:
        return check_turns(
            codec,
            messages,
            record.get("tools"),
            record.get("documents"),
            id=ident,
            **{**options, **_variables(record)},
        )
    except ChatCodecError as exc:  # tools or options the codec refuses before rendering
        return ConversationCheck(ident, None, error=f"{type(exc).__name__}: {exc}")


def _variables(record: Mapping[str, Any]) -> Mapping[str, Any]:
    """A record's template variables; a RequestError (as ``chatcodec batch`` says of a row)
    where they are not an object or name one of check_turns' own keywords."""
    variables = record.get("chat_template_kwargs") or {}
    if not isinstance(variables, Mapping):
        kind = type(variables).__name__
        raise RequestError(f"chat_template_kwargs must be an object, not {kind}")
    if not all(isinstance(name, str) for name in variables):
        raise RequestError("chat_template_kwargs must name its variables with strings")
    taken = sorted(variables.keys() & OWN_KEYWORDS)
    if taken:
        raise RequestError(f"chat_template_kwargs cannot set {taken[0]!r}: a check option")
    return variables


# --- worker processes (chatcodec check-data --jobs) -----------------------------------------

_checker: tuple[Codec, dict[str, Any]] | None = None


def setup_checker(recipe: CodecRecipe, options: dict[str, Any]) -> None:
    """Load the checkpoint once in this process (a worker's initializer)."""
    global _checker
    _checker = (recipe.build(), options)


def check_item(item: tuple[int, dict[str, Any] | None, str]) -> ConversationCheck:
    """The check of one numbered record, or of a line that could not be read (its error)."""
    number, record, problem = item
    if record is None:
        return ConversationCheck(None, None, error=problem)
    if _checker is None:
        raise RuntimeError("setup_checker was not called in this process")
    codec, options = _checker
    try:
        return check_record(codec, record, number, options)
    except Exception as exc:  # a bug of chatcodec's: one record that trips it is one line
        ident = record.get("id", number)
        message = f"internal error (a bug in chatcodec: please report it): {type(exc).__name__}"
        return ConversationCheck(ident, None, error=f"{message}: {exc}")
