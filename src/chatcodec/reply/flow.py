"""Runs a reply made of several messages (ReplyFormat.flow): the engine's MESSAGES step.

A flow is a small automaton over the reply: in each state the options are tried in order where
a message may begin, and the first one that does not fail is taken (llama.cpp's ordered choice;
a cut-short header waits for more text). A text message streams its body into its field as it
arrives; a call is parsed when it may have completed (its commit marker arrived, its text
doubled, or the reply ended), so a call option that fails has emitted nothing and the next
option is tried at the same place. Each piece of text is read once, except the call in progress.
"""

from __future__ import annotations

from enum import Enum

from .cursor import (
    NEXT,
    STOP,
    WAIT,
    CallMarkers,
    CommitWatch,
    Cursor,
    Outcome,
    Output,
    Stall,
    Waiting,
    retry_due,
)
from .description import CallMessage, Flow, FlowState, TextMessage
from .mapper import carries_call_ids
from .peg import FAIL, NEED_MORE, Parser, Until, notes_edges

__all__ = ["FlowRunner"]


class Phase(Enum):
    BOUNDARY = "boundary"  # where a message may begin: the state's options are tried
    BODY = "body"  # a text message's body
    CLOSER = "closer"  # a text message's closing marker
    ANCHOR = "anchor"  # the reply must end here


class Option(Enum):
    NO_MATCH = "no match"  # the option fails where the message would begin: try the next one


NO_MATCH = Option.NO_MATCH


class FlowRunner:
    """Reads a flow over the cursor into the output; ``step`` is the engine's step."""

    def __init__(self, flow: Flow, cursor: Cursor, out: Output, waiting: Waiting) -> None:
        self.flow = flow
        self.cursor = cursor
        self.out = out
        self.waiting = waiting
        self.state: FlowState = flow.states[flow.start]
        self.option = 0
        self.phase = Phase.BOUNDARY
        self.message: TextMessage | None = None
        self.until: Until | None = None
        self._untils: dict[tuple[str, ...], Until] = {}
        self.option_start = 0  # absolute offset where the option being read began
        # the call option in progress
        self.tried_len = -1
        self.watch = CommitWatch("")
        self.stall: Stall | None = None  # where its last parse stopped inside a literal
        # what the end of the flow says about the text it leaves
        self.after_call = False
        self.call_failed = False
        # how far the options that failed got (llama.cpp's failed result end: a partial parse
        # that failed past the start of the text gives an empty message, not an error)
        self.reach = 0
        self.markers = CallMarkers(
            flow.openers, flow.name_marker, flow.name_marker_end, flow.tool_names
        )

    @property
    def boundary(self) -> int:
        """The absolute offset where the options of the current state are tried."""
        return self.cursor.offset if self.phase is Phase.BOUNDARY else -1

    def call_parsers(self) -> list[Parser]:
        """The calls the current state's options parse where a message may begin."""
        return [o.call for o in self.state.options if isinstance(o, CallMessage)]

    def tail_reason(self, rest: str) -> str:
        """Why the text the flow leaves unread was dropped."""
        return self.markers.reason(rest, self.after_call, self.call_failed)

    # ------------------------------------------------------------------ the step

    def step(self) -> Outcome:
        while True:
            if self.phase is Phase.BOUNDARY:
                outcome = self._boundary()
            elif self.phase is Phase.BODY:
                outcome = self._body()
            elif self.phase is Phase.CLOSER:
                outcome = self._closer()
            else:
                outcome = self._anchor()
            if outcome is not None:
                return outcome

    def _goto(self, target: str) -> Outcome | None:
        self.option = 0
        self.tried_len = -1
        self.stall = None
        self.message = None
        self.phase = Phase.BOUNDARY
        if target in self.flow.states:
            self.state = self.flow.states[target]
            return None
        if target == "":
            return NEXT
        if target == "$":
            self.phase = Phase.ANCHOR
            return None
        # (llama.cpp fails as far as the options got; the cursor stays where they began)
        cur = self.cursor
        at = max(cur.offset, self.reach)
        return self.out.fail(at, "the reply does not match the expected format here")

    def _done(self, then: str) -> Outcome | None:
        """An option was read to its end: a repetition that read nothing stops."""
        if self.state.loop and self.cursor.offset == self.option_start:
            return self._goto(self.state.otherwise)
        return self._goto(then)

    def _call_ready(self) -> bool:
        """Whether the call in progress may have changed its outcome since it was last tried."""
        if self.stall is not None and self.stall.holds(self.cursor):
            return False
        return self.watch.hit or retry_due(self.cursor.unread(), self.tried_len, self.out)

    def _boundary(self) -> Outcome | None:
        cur = self.cursor
        options = self.state.options
        if self.option < len(options) and isinstance(options[self.option], CallMessage):
            if not (cur.eof or self.tried_len < 0 or self._call_ready()):
                self.waiting.call(self._call_ready, self.watch)
                return WAIT
        cur.materialize()
        buf, at = cur.buf, cur.pos
        if at >= len(buf):
            # llama.cpp's repetition stops at the end of input; any option would need more
            return cur.pending_or_stop()
        if self.option == 0:
            self.reach = cur.base + at
        while self.option < len(options):
            option = options[self.option]
            if isinstance(option, CallMessage):
                outcome = self._call_option(option)
            else:
                outcome = self._text_option(option)
            if outcome is not NO_MATCH:
                return outcome
            self.option += 1
        return self._goto(self.state.otherwise)

    def _call_option(self, option: CallMessage) -> Outcome | Option | None:
        """A call parsed whole where a message may begin; FAIL: the next option is tried."""
        cur = self.cursor
        buf, at = cur.buf, cur.pos
        noting = not cur.eof and notes_edges(option.call)
        text = Stall.probe(buf, at) if noting else buf
        result = option.call.parse(text, at)
        self.stall = None
        if result.status == FAIL:
            self.out.clear_preview()
            self.reach = max(self.reach, cur.base + result.end)
            self.call_failed = True
            self.tried_len = -1
            return NO_MATCH
        if result.status == NEED_MORE:
            if cur.eof:
                self.out.take_content(result.nodes, buf)
                if self.out.close_calls(result.nodes, buf, cur.base):
                    cur.pos = len(buf)
                return STOP
            ids = carries_call_ids(option.call)
            self.out.preview_calls(result.nodes, buf, self.flow.tool_names, ids)
            self.stall = Stall.of(text, result.nodes, cur.base, self.out.mapper)
            self.tried_len = len(buf) - at
            self.watch = CommitWatch(option.commit)
            self.watch.restart(buf, at)
            self.waiting.call(self._call_ready, self.watch)
            return WAIT
        self.out.take_content(result.nodes, buf)
        self.out.commit_calls(result.nodes, buf, cur.base)
        self.option_start = cur.base + at
        cur.pos = result.end
        self.after_call = True
        self.call_failed = False
        return self._done(option.then)

    def _text_option(self, option: TextMessage) -> Outcome | Option | None:
        """A message's lead and header; FAIL: the next option is tried."""
        cur = self.cursor
        buf, at = cur.buf, cur.pos
        start = at
        if option.lead is not None:
            lead = option.lead.parse(buf, at)
            if lead.status == FAIL:
                self.reach = max(self.reach, cur.base + lead.end)
                return NO_MATCH
            if lead.status == NEED_MORE:
                return cur.pending_or_stop()
            if lead.end >= len(buf) and not cur.eof:
                return WAIT  # a match that reaches the end may grow (whitespace)
            start = lead.end
        header = option.header.parse(buf, start)
        if header.status == FAIL:
            self.reach = max(self.reach, cur.base + max(start, header.end))
            return NO_MATCH
        if header.status == NEED_MORE:
            if cur.eof:
                if option.wrap:
                    self.out.emit(option.wrap, buf[start:], cur.base + start)
                    cur.pos = len(buf)
                return STOP
            return WAIT
        if header.end >= len(buf) and not cur.eof:
            return WAIT  # a match that reaches the end may grow (whitespace)
        if option.wrap:
            self.out.emit(option.wrap, buf[start : header.end], cur.base + start)
        self.option_start = cur.base + at
        cur.pos = header.end
        self.message = option
        self.after_call = False
        if option.stops is None:
            self.phase = Phase.CLOSER
        else:
            self.phase = Phase.BODY
            if option.stops not in self._untils:
                self._untils[option.stops] = Until(*option.stops)
            self.until = self._untils[option.stops]
        return None

    def _body(self) -> Outcome | None:
        cur = self.cursor
        cur.materialize()
        message, until = self.message, self.until
        assert message is not None and until is not None and message.stops is not None
        field = message.wrap or message.field
        buf, pos = cur.buf, cur.pos
        if not message.stops:
            self.out.emit(field, buf[pos:], cur.base + pos)
            cur.pos = len(buf)
            if cur.eof:
                return STOP
            self._plain(field, None)
            return WAIT
        stop, complete = until.find(buf, pos)
        if stop > pos:
            self.out.emit(field, buf[pos:stop], cur.base + pos)
            cur.pos = stop
        if complete:
            self.phase = Phase.CLOSER
            return None
        if not cur.eof:
            self._plain(field, until)
        if stop >= len(buf) or not cur.eof:
            return cur.pending_or_stop()
        # a stop marker cut by the end: llama.cpp's `until` ends before it and parsing goes on
        self.phase = Phase.CLOSER
        return None

    def _plain(self, field: str, until: Until | None) -> None:
        """The body waits for more text: the engine's feed may take plain text directly."""
        if field == "content":
            self.waiting.plain(self.out.content, until)
        elif field == "reasoning":
            self.waiting.plain(self.out.reasoning, until)

    def _closer(self) -> Outcome | None:
        cur = self.cursor
        cur.materialize()
        message = self.message
        assert message is not None
        if message.closer is not None:
            buf, pos = cur.buf, cur.pos
            result = message.closer.parse(buf, pos)
            if result.status == NEED_MORE:
                if not cur.eof:
                    return WAIT
                if message.wrap:
                    self.out.emit(message.wrap, buf[pos:], cur.base + pos)
                    cur.pos = len(buf)
                return STOP
            if result.status == FAIL:
                return self.out.fail(cur.offset, "a message does not end with its closing marker")
            if result.end >= len(buf) and not cur.eof:
                return WAIT  # a match that reaches the end may grow (whitespace)
            if message.wrap:
                self.out.emit(message.wrap, buf[pos : result.end], cur.base + pos)
            cur.pos = result.end
        return self._done(message.then)

    def _anchor(self) -> Outcome | None:
        cur = self.cursor
        cur.materialize()
        if not cur.at_end():
            return self.out.fail(cur.offset, "text after the end of the reply format")
        return NEXT if cur.eof else WAIT
