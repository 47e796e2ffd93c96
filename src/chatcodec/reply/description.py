"""Reply formats as data: what a family's reply looks like, for the one engine to run.

A reply is read as ``prefix [reasoning] ws content ws [calls] [end]`` over
``generation_prompt + reply`` (llama.cpp parses the generation prompt too). A family module
fills these fields in; it never parses anything itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from .constraint import Constraint
from .mapper import CallMapper
from .peg import Parser
from .prefill import Continuation
from .request import Policy

__all__ = [
    "ReasoningBlock",
    "CallSection",
    "Balance",
    "ReplyFormat",
    "Expect",
    "Marker",
    "NotMarker",
    "Whitespace",
    "Text",
    "Thought",
    "Content",
    "ContentValue",
    "Calls",
    "Messages",
    "End",
    "Step",
    "steps",
    "TextMessage",
    "CallMessage",
    "FlowState",
    "Flow",
]


S = TypeVar("S")

# ------------------------------------------------------------------ what steps hold


@dataclass(frozen=True)
class ReasoningBlock:
    """An optional leading thought: ``start`` ws body, ended by one of ``stops``.

    ``closers`` are tried in order where the body stopped: ``(marker, consumed)``; a closer that
    is not consumed only peeks (llama.cpp's Qwen3.5 ends a thought at ``<tool_call>`` too).
    """

    start: str
    stops: tuple[str, ...]
    closers: tuple[tuple[str, bool], ...]
    space_after_start: bool = True
    # characters that may each follow the start / the consumed closer (llama.cpp's optspace)
    start_optional: str = ""
    end_optional: str = ""
    # where the thought goes: "reasoning"; "content" (markers consumed, body kept inline: Ling 3
    # and Kimi K3 with reasoning_format none); "inline" (the whole block, markers included, is
    # content: Cohere2 with reasoning_format none); "" (read and dropped: thinking disabled)
    body: Literal["reasoning", "content", "inline", ""] = "reasoning"
    # the reply must open with ``start`` (MiniCPM5): otherwise the parse fails
    required: bool = False
    # the body is read even without ``start`` (the generation prompt opened it)
    start_may_be_absent: bool = False
    # a lone marker that stands for an empty thought (MiniMax-M3's bare ``</mm:think>``)
    bare: str = ""
    # a closer that only peeks, cut short by the end of the reply, ends the thought there and
    # what follows reads the cut text (Ling 3: llama.cpp's thought needs no closer at all)
    peek_cut_ends: bool = False
    # stops where the tool calls may begin inside the thought (DeepSeek DSML): the calls are
    # tried there and, if they do not parse, the stop is thought text and the body reads on
    call_stops: tuple[str, ...] = ()


@dataclass(frozen=True)
class Balance:
    """A call may only complete where ``close`` brings the count of ``open``/``close``
    characters outside strings quoted with one of ``quotes`` back to zero."""

    open: str
    close: str
    quotes: str


@dataclass(frozen=True)
class CallSection:
    """The tool calls after the content.

    ``first``/``next`` parse one call each (without the whitespace after it); ``next`` is None
    when only one call is allowed. ``commit`` tells the engine when a call may have completed:
    its closing marker, or a ``Balance`` (JSON arguments whose last ``}`` ends the call).
    ``openers`` and ``name_marker`` only serve to explain dropped text.
    """

    first: Parser
    next: Parser | None
    required: bool
    commit: str | Balance
    openers: tuple[str, ...] = ()
    name_marker: str = ""
    name_marker_end: str = ""
    tool_names: frozenset[str] = field(default_factory=frozenset)
    space_after: bool = True
    # a call parse that succeeds at the very end of the text so far is not final yet
    settle: bool = False
    # a required first call that fails fails where its parser stopped (llama.cpp's calls are a
    # plain sequence), not where it began (a repetition with a minimum count of one)
    fail_at_parse_end: bool = False
    # builds the mapper of AST nodes to calls (MiniMax-M3 rebuilds nested XML values)
    make_mapper: Callable[[], CallMapper] = CallMapper


# ------------------------------------------------------------------ the steps of a reply


@dataclass(frozen=True)
class Expect:
    """This text must come here (a family's prefix): the parse fails without it."""

    text: str


@dataclass(frozen=True)
class Marker:
    """A marker consumed where it stands, if it is there (llama.cpp's ``optional(literal)``)."""

    text: str


@dataclass(frozen=True)
class NotMarker:
    """The reply must not go on with this marker here (llama.cpp's ``negate``): it fails."""

    text: str


@dataclass(frozen=True)
class Whitespace:
    """Any run of whitespace (llama.cpp's ``space()``)."""


@dataclass(frozen=True)
class Text:
    """Content up to the first of ``stops`` (the stop is left for what follows)."""

    stops: tuple[str, ...]


@dataclass(frozen=True)
class Thought:
    """An optional leading thought (see ReasoningBlock)."""

    block: ReasoningBlock


@dataclass(frozen=True)
class Content:
    """The content: text up to the first of ``stops`` (None: the rest of the reply).

    Framed content must open with ``open`` and may close with ``close``; ``optional`` framed
    content may be absent altogether: without ``open`` there is no content and what follows is
    read where it would have begun (llama.cpp's optional ``CS content(until(CE)) CE``).
    """

    stops: tuple[str, ...] | None
    open: str = ""
    close: str = ""
    optional: bool = False


@dataclass(frozen=True)
class ContentValue:
    """The content is one structured value (a response format's JSON) read whole by ``parser``:
    the text of its ``content`` nodes is the content."""

    parser: Parser


@dataclass(frozen=True)
class Calls:
    """The tool calls (see CallSection); ``then`` is read only when a call was read,
    ``otherwise`` only when none was (Cohere2: an action list or a text block)."""

    section: CallSection
    then: tuple[Step, ...] = ()
    otherwise: tuple[Step, ...] = ()


@dataclass(frozen=True)
class Messages:
    """The reply is a sequence of messages (harmony channels, Gemma 4 thoughts, Muse Glimmer's
    recipients): see Flow."""

    flow: Flow


@dataclass(frozen=True)
class End:
    """Nothing may follow: text here fails the parse (without it, trailing text is dropped)."""


Step = (
    Expect
    | Marker
    | NotMarker
    | Whitespace
    | Text
    | Thought
    | Content
    | ContentValue
    | Calls
    | Messages
    | End
)


def steps(*items: Step | None) -> tuple[Step, ...]:
    """The steps given, in order, without the ones left out (None)."""
    return tuple(s for s in items if s is not None)


@dataclass(frozen=True)
class ReplyFormat:
    """One request's reply format: the handler's name and the steps read in order over
    ``generation_prompt + reply``; ``stop`` ends generation, ``continuation`` writes the
    generation prompt that continues a final assistant message (read by Codec.prepare),
    ``constraint`` is llama.cpp's sampler setup for the request (grammar or not, lazy,
    triggers, preserved tokens, additional stops; the grammar's text is not built yet).
    ``policy`` is the request's (``reply.request.Policy``): how a reply is read."""

    handler: str
    steps: tuple[Step, ...]
    stop: tuple[str, ...] = ()
    continuation: Continuation = Continuation()
    constraint: Constraint = Constraint()
    policy: Policy = "reference"

    def find(self, kind: type[S]) -> S | None:
        """The first step of this kind, also among the steps of the calls."""
        for step in _walk(self.steps):
            if isinstance(step, kind):
                return step
        return None

    @property
    def reasoning(self) -> ReasoningBlock | None:
        thought = self.find(Thought)
        return thought.block if thought is not None else None

    @property
    def calls(self) -> CallSection | None:
        calls = self.find(Calls)
        return calls.section if calls is not None else None

    @property
    def flow(self) -> Flow | None:
        messages = self.find(Messages)
        return messages.flow if messages is not None else None

    @property
    def anchored(self) -> bool:
        """Whether text after the format fails the parse (rather than being dropped)."""
        return self.find(End) is not None


def _walk(steps: tuple[Step, ...]) -> Iterator[Step]:
    for step in steps:
        yield step
        if isinstance(step, Calls):
            yield from _walk(step.then)
            yield from _walk(step.otherwise)


@dataclass(frozen=True)
class TextMessage:
    """One message of a flow: ``lead`` and ``header`` (bounded markers), then a body read up to the
    first of ``stops`` into ``field``, then ``closer``.

    ``stops`` None: no body; ``()``: the body is the rest of the reply. ``field`` is
    ``"reasoning"``, ``"content"`` or ``""`` (read and reported as skipped). ``wrap`` names a field
    that takes the header, body and closer verbatim, markers included, and whatever a cut-short
    message reached (llama.cpp's ``content(header body closer)``, reasoning_format none). ``then``
    names the state that follows (see FlowState.otherwise for the special names).
    """

    header: Parser
    field: str = ""
    stops: tuple[str, ...] | None = None
    closer: Parser | None = None
    lead: Parser | None = None
    wrap: str = ""
    then: str = ""


@dataclass(frozen=True)
class CallMessage:
    """One tool call of a flow, parsed whole (when ``commit`` arrives, its text doubles, or the
    reply ends); an option that fails has shown nothing, so the next option is tried in its place.
    The text of its ``content`` nodes is content (a response format's value read whole)."""

    call: Parser
    commit: str = ""
    then: str = ""


@dataclass(frozen=True)
class FlowState:
    """Options tried in order where a message may begin; the first that does not fail is read.

    ``otherwise`` is where the flow goes when none matches, and, for a ``loop`` state (llama.cpp's
    repetition), when one matched without reading anything: a state name, ``""`` (the flow ends;
    the rest is dropped), ``"$"`` (the reply must end here) or ``"!"`` (the parse fails).
    """

    options: tuple[TextMessage | CallMessage, ...]
    otherwise: str = "!"
    loop: bool = False


@dataclass(frozen=True)
class Flow:
    """A reply as a sequence of messages: named states from ``start``; calls are mapped by the
    mapper ``make_mapper`` builds. ``openers`` and ``name_marker`` only explain dropped text."""

    states: dict[str, FlowState]
    start: str
    make_mapper: Callable[[], CallMapper] = CallMapper
    openers: tuple[str, ...] = ()
    name_marker: str = ""
    name_marker_end: str = ""
    tool_names: frozenset[str] = field(default_factory=frozenset)
