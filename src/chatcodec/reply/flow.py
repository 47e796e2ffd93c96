"""Runs a reply made of several messages (ReplyFormat.flow) inside the one engine.

A flow is a small automaton over the reply: in each state the options are tried in order where
a message may begin, and the first one that does not fail is taken (llama.cpp's ordered choice;
a cut-short header waits for more text). A text message streams its body into its field as it
arrives; a call is parsed when it may have completed (its commit marker arrived, its text
doubled, or the reply ended), so a call option that fails has emitted nothing and the next
option is tried at the same place. Each piece of text is read once, except the call in progress.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .description import CallMessage, CallSection, Flow, FlowState, TextMessage
from .message import Dropped
from .peg import FAIL, NEED_MORE, Eps, Node, Until

if TYPE_CHECKING:
    from .engine import ReplyEngine

__all__ = ["FlowRunner", "WAIT", "NEXT", "STOP", "FAILED"]

# outcomes, the engine's own values
WAIT, NEXT, STOP, FAILED = range(4)
_BOUNDARY, _BODY, _CLOSER, _ANCHOR = range(4)


class FlowRunner:
    """The flow step of a ReplyEngine: reads the engine's buffer and fills its fields."""

    def __init__(self, engine: ReplyEngine, flow: Flow) -> None:
        self.engine = engine
        self.flow = flow
        self.name = flow.start
        self.state: FlowState = flow.states[flow.start]
        self.option = 0
        self.phase = _BOUNDARY
        self.message: TextMessage | None = None
        self.until: Until | None = None
        self._untils: dict[tuple[str, ...], Until] = {}
        self.option_start = 0  # absolute offset where the option being read began
        # the call option in progress
        self.tried_len = -1
        self.checked = 0
        self.window = ""
        self.commit_hit = False
        # what the end of the flow says about the text it leaves
        self.after_call = False
        self.call_failed = False
        # how far the options that failed got (llama.cpp's failed result end: a partial parse
        # that failed past the start of the text gives an empty message, not an error)
        self.reach = 0
        self.section = CallSection(
            first=Eps(),
            next=None,
            required=False,
            commit="",
            openers=flow.openers,
            name_marker=flow.name_marker,
            name_marker_end=flow.name_marker_end,
            tool_names=flow.tool_names,
        )

    # ------------------------------------------------------------------ text out

    def _emit(self, field: str, text: str, at: int) -> None:
        if not text:
            return
        e = self.engine
        if field == "content":
            e.content_pieces.append(text)
        elif field == "reasoning":
            e.reasoning_pieces.append(text)
        else:
            offset = at - e.prompt_length
            last = e.dropped[-1] if e.dropped else None
            if (
                last is not None
                and last.reason == "skipped_text"
                and last.offset + len(last.text) == offset
            ):
                e.dropped[-1] = Dropped(last.text + text, last.reason, last.offset)
            else:
                e.dropped.append(Dropped(text, "skipped_text", offset))

    # ------------------------------------------------------------------ the step

    def step(self) -> int:
        while True:
            if self.phase == _BOUNDARY:
                outcome = self._boundary()
            elif self.phase == _BODY:
                outcome = self._body()
            elif self.phase == _CLOSER:
                outcome = self._closer()
            else:
                outcome = self._anchor()
            if outcome is not None:
                return outcome

    def _goto(self, target: str) -> int | None:
        self.option = 0
        self.tried_len = -1
        self.message = None
        self.phase = _BOUNDARY
        if target in self.flow.states:
            self.name = target
            self.state = self.flow.states[target]
            return None
        if target == "":
            return NEXT
        if target == "$":
            self.phase = _ANCHOR
            return None
        e = self.engine
        e._pos = max(e._pos, self.reach - e._base)
        e._fail("the reply does not match the expected format here")
        return FAILED

    def _done(self, then: str) -> int | None:
        """An option was read to its end: a repetition that read nothing stops."""
        e = self.engine
        if self.state.loop and e._base + e._pos == self.option_start:
            return self._goto(self.state.otherwise)
        return self._goto(then)

    def _call_ready(self) -> bool:
        """Whether the call in progress may have changed its outcome since it was last tried."""
        e = self.engine
        if e._eof or self.tried_len < 0:
            return True
        option = self.state.options[self.option]
        assert isinstance(option, CallMessage)
        if option.commit and not self.commit_hit:
            keep = len(option.commit) - 1
            for chunk in e._pending[self.checked :]:
                window = self.window + chunk
                if option.commit in window:
                    self.commit_hit = True
                    break
                self.window = window[-keep:] if keep > 0 else ""
            self.checked = len(e._pending)
        if self.commit_hit:
            return True
        length = len(e._buf) - e._pos + e._pending_len
        return length >= 2 * self.tried_len

    def _boundary(self) -> int | None:
        e = self.engine
        options = self.state.options
        if self.option < len(options) and isinstance(options[self.option], CallMessage):
            if not self._call_ready():
                e._ready = self._call_ready  # the engine's feed asks before it runs the flow
                return WAIT
        e._materialize()
        self.checked = 0
        buf, at = e._buf, e._pos
        if at >= len(buf):
            # llama.cpp's repetition stops at the end of input; any option would need more
            return STOP if e._eof else WAIT
        if self.option == 0:
            self.reach = e._base + at
        while self.option < len(options):
            option = options[self.option]
            if isinstance(option, CallMessage):
                result = option.call.parse(buf, at)
                if result.status == FAIL:
                    self.reach = max(self.reach, e._base + result.end)
                    self.call_failed = True
                    self.option += 1
                    self.tried_len = -1
                    continue
                if result.status == NEED_MORE:
                    if e._eof:
                        _take_content(e.content_pieces, result.nodes, buf)
                        e.mapper.visit(result.nodes, buf)
                        e.mapper.flush()
                        if len(e.mapper.calls) != len(e.committed_calls):
                            e._pos = len(buf)
                        return STOP
                    self.tried_len = len(buf) - at
                    self.commit_hit = False
                    keep = len(option.commit) - 1
                    self.window = buf[len(buf) - keep :] if keep > 0 else ""
                    return WAIT
                _take_content(e.content_pieces, result.nodes, buf)
                e.mapper.visit(result.nodes, buf)
                e.committed_calls = list(e.mapper.calls)
                self.option_start = e._base + at
                e._pos = result.end
                self.after_call = True
                self.call_failed = False
                return self._done(option.then)
            start = at
            if option.lead is not None:
                lead = option.lead.parse(buf, at)
                if lead.status == FAIL:
                    self.reach = max(self.reach, e._base + lead.end)
                    self.option += 1
                    continue
                if lead.status == NEED_MORE:
                    return STOP if e._eof else WAIT
                if lead.end >= len(buf) and not e._eof:
                    return WAIT  # a match that reaches the end may grow (whitespace)
                start = lead.end
            header = option.header.parse(buf, start)
            if header.status == FAIL:
                self.reach = max(self.reach, e._base + max(start, header.end))
                self.option += 1
                continue
            if header.status == NEED_MORE:
                if e._eof:
                    if option.wrap:
                        self._emit(option.wrap, buf[start:], e._base + start)
                        e._pos = len(buf)
                    return STOP
                return WAIT
            if header.end >= len(buf) and not e._eof:
                return WAIT  # a match that reaches the end may grow (whitespace)
            if option.wrap:
                self._emit(option.wrap, buf[start : header.end], e._base + start)
            self.option_start = e._base + at
            e._pos = header.end
            self.message = option
            self.after_call = False
            if option.stops is None:
                self.phase = _CLOSER
            else:
                self.phase = _BODY
                if option.stops not in self._untils:
                    self._untils[option.stops] = Until(*option.stops)
                self.until = self._untils[option.stops]
            return None
        return self._goto(self.state.otherwise)

    def _body(self) -> int | None:
        e = self.engine
        e._materialize()
        message, until = self.message, self.until
        assert message is not None and until is not None and message.stops is not None
        field = message.wrap or message.field
        buf, pos = e._buf, e._pos
        if not message.stops:
            self._emit(field, buf[pos:], e._base + pos)
            e._pos = len(buf)
            if e._eof:
                return STOP
            self._plain(field, None)
            return WAIT
        stop, complete = until.find(buf, pos)
        if stop > pos:
            self._emit(field, buf[pos:stop], e._base + pos)
            e._pos = stop
        if complete:
            self.phase = _CLOSER
            return None
        if not e._eof:
            self._plain(field, until)
        if stop >= len(buf) or not e._eof:
            return STOP if e._eof else WAIT
        # a stop marker cut by the end: llama.cpp's `until` ends before it and parsing goes on
        self.phase = _CLOSER
        return None

    def _plain(self, field: str, until: Until | None) -> None:
        """The body waits for more text: the engine's feed may take plain text directly."""
        e = self.engine
        if field == "content":
            e._plain_out, e._plain_until = e.content_pieces, until
        elif field == "reasoning":
            e._plain_out, e._plain_until = e.reasoning_pieces, until

    def _closer(self) -> int | None:
        e = self.engine
        e._materialize()
        message = self.message
        assert message is not None
        if message.closer is not None:
            buf, pos = e._buf, e._pos
            result = message.closer.parse(buf, pos)
            if result.status == NEED_MORE:
                if not e._eof:
                    return WAIT
                if message.wrap:
                    self._emit(message.wrap, buf[pos:], e._base + pos)
                    e._pos = len(buf)
                return STOP
            if result.status == FAIL:
                e._fail("a message does not end with its closing marker")
                return FAILED
            if result.end >= len(buf) and not e._eof:
                return WAIT  # a match that reaches the end may grow (whitespace)
            if message.wrap:
                self._emit(message.wrap, buf[pos : result.end], e._base + pos)
            e._pos = result.end
        return self._done(message.then)

    def _anchor(self) -> int | None:
        e = self.engine
        e._materialize()
        if e._pos < len(e._buf):
            e._fail("text after the end of the reply format")
            return FAILED
        return NEXT if e._eof else WAIT

    # ------------------------------------------------------------------ dropped text

    def tail_reason(self, rest: str) -> str:
        from .engine import _classify

        return _classify(self.section, rest, self.after_call, self.call_failed)


def _take_content(out: list[str], nodes: list[Node], text: str) -> None:
    """The text of the ``content`` nodes of a parsed option, in order (a response format's
    value read as one structured message)."""
    stack = list(reversed(nodes))
    while stack:
        node = stack.pop()
        if node.tag == "content":
            out.append(text[node.start : node.end])
        else:
            stack.extend(reversed(node.children))
