"""The one incremental engine: runs a ReplyFormat over ``generation_prompt + reply`` as it arrives.

The format is turned into a program: a list of steps (the prefix, the thought, the content, the
calls, the frame's markers, the end), each run over the ``Cursor`` until it returns an
``Outcome``. Text is consumed left to right and never re-read, except the text of the one tool
call in progress, which is parsed (by the small PEG engine; its partial parse is the stream's
preview of the call) when its outcome or its preview may have changed (cursor.retry_due):
while raw JSON arguments or a raw string value the last preview left open grow with each chunk
as written (``OpenArguments.take``, FED_ARGUMENTS), only when they close or the call's
closing marker arrives; otherwise (its name, a tag, the markup between values) on every chunk
while it is within PREVIEW_WINDOW characters, then when its text has doubled since the last
try; and at the end.
Every result equals llama.cpp's parse of the same whole text (lenient: a cut-short structure is
NEED_MORE, never a failure).
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from typing import Any

from .cursor import (
    FAILED,
    JUMP,
    NEXT,
    STOP,
    WAIT,
    BalanceWatch,
    CallMarkers,
    CommitWatch,
    Cursor,
    Failure,
    OpenArguments,
    Outcome,
    Output,
    Stall,
    Waiting,
    retry_due,
)
from .description import (
    Balance,
    Calls,
    CallSection,
    Content,
    ContentValue,
    End,
    Expect,
    Marker,
    Messages,
    NotMarker,
    ReasoningBlock,
    ReplyFormat,
    Step,
    Text,
    Thought,
    Whitespace,
)
from .flow import FlowRunner
from .mapper import CallMapper, MappedCall, carries_call_ids
from .peg import FAIL, NEED_MORE, SUCCESS, Node, Parser, Result, Until, notes_edges

__all__ = [
    "ReplyEngine",
    "Fed",
    "FED_SOME",
    "FED_CONTENT",
    "FED_REASONING",
    "FED_NOTHING",
    "FED_ARGUMENTS",
]


class Fed(Enum):
    """What ``ReplyEngine.feed`` did with a chunk (SOME: anything; look at the results)."""

    SOME = "some"
    CONTENT = "content"  # all of it (with held text) became one new content piece, nothing else
    REASONING = "reasoning"  # the same, one new reasoning piece
    NOTHING = "nothing"  # nothing visible changed
    ARGUMENTS = "arguments"  # only the call in progress's arguments grew (out.arguments_fragment)


# the members by plain names: an Enum attribute costs a lookup per use on the per-chunk path
FED_SOME, FED_CONTENT, FED_REASONING, FED_NOTHING, FED_ARGUMENTS = Fed


class Guard(Enum):
    """When a step of the program is read (the steps of Calls.then / Calls.otherwise)."""

    ALWAYS = "always"
    AFTER_CALLS = "after calls"  # only when a call was read
    NO_CALLS = "no calls"  # only when none was


_ALWAYS, _AFTER_CALLS, _NO_CALLS = Guard


class State(Enum):
    RUNNING = "running"
    TAIL = "tail"  # the format is done: the rest is dropped text
    STOPPED = "stopped"
    FAILED = "failed"


_RUNNING, _TAIL, _STOPPED, _BROKEN = State


class ThoughtPhase(Enum):
    OPEN = "open"
    START_CHARS = "start chars"  # the optional characters after the start marker
    START_SPACE = "start space"
    BODY = "body"
    CLOSE = "close"


class ContentPhase(Enum):
    OPEN = "open"
    BODY = "body"
    CLOSE = "close"


class CallPhase(Enum):
    BEGIN = "begin"  # a call may begin here
    CALL = "call"  # a call is in progress
    SPACE = "space"  # the whitespace after a call


Instruction = tuple[Step, Guard]


class ReplyEngine:
    def __init__(self, fmt: ReplyFormat, generation_prompt: str = "") -> None:
        self.fmt = fmt
        self.prompt_length = len(generation_prompt)
        self.cursor = Cursor()
        self.waiting = Waiting()
        self._program = _program(fmt.steps)
        self._index = 0
        self._phase: Enum | None = None  # the running step's own phase (None: its start)
        self._state = _RUNNING
        # where the steps that jump (a thought that turns into calls and back) stand
        self._label = {type(s): i for i, (s, _) in enumerate(self._program)}
        self._untils = {
            stops: Until(*stops)
            for s, _ in self._program
            if isinstance(s, (Text, Content)) and (stops := s.stops) is not None
        }
        calls = fmt.calls
        flow = fmt.flow
        mapper = calls.make_mapper() if calls is not None else CallMapper()
        self.out = Output(self.prompt_length, flow.make_mapper() if flow is not None else mapper)
        # the output's lists (never replaced), read by the stream on every chunk
        self.content_pieces = self.out.content
        self.reasoning_pieces = self.out.reasoning
        self.dropped = self.out.dropped
        # the thought: where its body goes, and where it stops (call stops dropped once the
        # calls failed to parse at one)
        block = self._block = fmt.reasoning
        # a thought read and dropped (thinking disabled) is reported as skipped text
        self._skipped: list[str] = []
        self._skipped_at = 0
        self._thought_out = _thought_out(block, self.out, self._skipped)
        self._thought_until = Until(*block.stops) if block is not None else None
        self._thought_call = False
        # the calls: how many were read, and the one in progress
        self._calls_done = 0
        self._tried_len = -1
        self._watch: CommitWatch | BalanceWatch | None = None
        self._markers = CallMarkers()
        # where the last parse of the call in progress stopped inside a literal (see Stall),
        # when the calls' parsers note where they read to the end of the text
        self._stall: Stall | None = None
        self._probing = calls is not None and all(
            notes_edges(p) for p in (calls.first, calls.next) if p is not None
        )
        if calls is not None:
            commit = calls.commit
            self._watch = (
                BalanceWatch(commit) if isinstance(commit, Balance) else CommitWatch(commit)
            )
            self._markers = CallMarkers(
                calls.openers, calls.name_marker, calls.name_marker_end, calls.tool_names
            )
        # whether the calls may carry the model's own id (a call is then shown with it):
        # known at the first preview of a call
        self._ids: bool | None = None
        self._limit_reached = False
        self._call_failed = False
        # where the last call that failed to parse began, and the parser that failed there
        self._failed_call: tuple[int, Parser] | None = None
        # a response format's value (ContentValue): the object or array it shows open at the
        # end of the text (None: none), where its content began (-1: not yet), how much of
        # it is content already, and where the value failed to parse (-1: it did not)
        self._value: OpenArguments | None = None
        self._value_at = -1
        self._value_taken = 0
        self._value_failed = -1
        self._flow = FlowRunner(flow, self.cursor, self.out, self.waiting) if flow else None
        # dropped text after the format (TAIL)
        self._tail: list[str] = []
        self._tail_start = 0
        self._run_step: dict[type, Callable[[Any], Outcome]] = {
            Expect: self._expect,
            Marker: self._marker,
            NotMarker: self._not_marker,
            Whitespace: self._whitespace,
            Text: self._text,
            Thought: self._thought,
            Content: self._content,
            ContentValue: self._content_value,
            Calls: self._calls,
            Messages: self._messages,
            End: self._end,
        }
        self.feed(generation_prompt)

    # ------------------------------------------------------------------ results

    @property
    def committed_calls(self) -> list[MappedCall]:
        return self.out.committed

    @property
    def failure(self) -> Failure | None:
        return self.out.failure

    @property
    def failed(self) -> bool:
        return self._state is _BROKEN

    def calls(self) -> list[MappedCall]:
        """Calls known so far (after finish: with the one a cut-short reply left open)."""
        return self.out.mapper.calls

    @property
    def reply_offset(self) -> int:
        return self.cursor.offset - self.prompt_length

    # ------------------------------------------------------------------ input

    def feed(self, chunk: str) -> Fed:
        """Add text; says whether all of it became one new content / reasoning piece."""
        cur = self.cursor
        if cur.eof:
            raise ValueError("the reply has already been finished")
        state = self._state
        if not chunk:
            if state is _RUNNING:
                self._run()
            return FED_SOME
        if state is not _RUNNING:
            if state is _TAIL or state is _BROKEN:  # (a failed reply's rest: see salvage)
                self._tail.append(chunk)
            return FED_SOME
        waiting = self.waiting
        out = waiting.out
        if out is not None and not cur.pending:
            return self._feed_plain(chunk, out, waiting.until)
        cur.pending.append(chunk)
        cur.pending_len += len(chunk)
        watch = waiting.watch
        ready = waiting.ready
        if ready is None:
            self._run()
            return FED_SOME
        # a call in progress: the step would wait again at once, having read nothing, unless
        # the call may have ended or its preview changed (if it runs, its parse shows the chunk)
        opened = self.out.open_arguments
        grew = False
        if opened is not None and not opened.closed:
            # its arguments grow with the chunk as written: nothing else can change until they
            # close (the call cannot end inside them, so its watch need not see the chunk; a
            # balance watch needs every chunk, unless they are JSON arguments, whose closing
            # always brings the parse that restarts it)
            if watch is not None and watch.balance and not opened.in_json:
                watch.see(chunk)
            fragment = self.out.arguments_fragment = opened.take(chunk)
            if not opened.closed:
                return FED_ARGUMENTS if fragment else FED_NOTHING
            if watch is not None and not watch.balance:
                watch.see(chunk)  # (its closing marker may follow in the chunk)
            grew = bool(fragment)
        else:
            if opened is not None:
                opened.take(chunk)  # (a value that closed counts what comes after it)
            if watch is not None:
                watch.see(chunk)
        if not ready():
            # a response format's value may grow with the chunk as written, too
            value = self._value
            if value is not None:
                piece = value.take(chunk)
                if not piece:
                    return FED_NOTHING
                self._value_taken += len(piece)
                self.out.content.append(piece)
                return FED_CONTENT
            return FED_ARGUMENTS if grew else FED_NOTHING
        self._run()
        return FED_SOME

    def _feed_plain(self, chunk: str, out: list[str], until: Until | None) -> Fed:
        """The fast path: the step waits for plain text. It would commit the held text (a
        possible marker start) and the chunk up to the first stop, or up to a stop's beginning
        cut by the end, and, without a whole stop, wait again holding the rest: do that here,
        and run the step only when a whole stop was found."""
        cur = self.cursor
        buf = cur.buf
        text = buf[cur.pos :] + chunk if cur.pos < len(buf) else chunk
        n = len(text)
        if until is None or until.firsts.isdisjoint(text):
            stop, complete = n, False
        else:
            stop, complete = until.find(text, 0)
        if stop:
            out.append(text if stop == n else text[:stop])
        cur.base += len(buf) + len(chunk) - n + stop
        cur.buf = text[stop:] if stop < n else ""
        cur.pos = 0
        if complete:
            self._run()
            return FED_SOME
        if not stop:
            return FED_NOTHING
        if out is self.out.content:
            return FED_CONTENT
        return FED_REASONING if out is self.out.reasoning else FED_NOTHING

    def finish(self) -> None:
        cur = self.cursor
        if cur.eof:
            return
        cur.eof = True
        if self._state is _RUNNING:
            self._run()
        if self._state is _TAIL:
            text = "".join(self._tail)
            if text:
                # the tail may have begun at a chunk's end: its reason needs the whole of it
                reason = self._tail_reason_for(text.lstrip(" \t\n\v\f\r"))
                self.out.drop(text, reason, self._tail_start)
            self._state = _STOPPED

    def salvage(self) -> None:
        """Read a finished reply that failed as the ``guaranteed`` policy does (docs/decoding.md,
        "Policies"): what was read stays, and the text from where reading stopped becomes
        dropped ``invalid_call`` if a call had started there, dropped ``trailing_text`` after
        calls, and content otherwise."""
        if self._state is not _BROKEN:
            return
        cur = self.cursor
        start = cur.offset
        rest = cur.buf[cur.pos :] + "".join(cur.pending) + "".join(self._tail)
        self._tail.clear()
        self._state = _STOPPED
        if start == self._value_failed:
            self._salvage_value(start, rest)
        elif self._call_started(start, rest):
            self.out.drop(rest, "invalid_call", start)
        elif self.out.committed:
            self.out.drop(rest, "trailing_text", start)
        else:  # (the generation prompt is not the model's)
            self.out.content.append(rest[max(0, self.prompt_length - start) :])

    def _call_started(self, start: int, text: str) -> bool:
        """Whether a call that failed to parse began at ``start`` and got as far as a stream
        announces a call: its name complete and one of the offered tools."""
        if self._flow is not None:
            names = self._flow.flow.tool_names
            parsers = [p for p in self._flow.call_parsers() if start == self._flow.boundary]
        elif self._failed_call is not None and self._failed_call[0] == start:
            section = self.fmt.calls
            assert section is not None
            names = section.tool_names
            parsers = [self._failed_call[1]]
        else:
            return False
        return any(self._shows_call(p, text, names) for p in parsers)

    def _salvage_value(self, start: int, rest: str) -> None:
        """A response format's value that failed at ``start``: its content from where the
        value began (as far as it read, and all that follows) is content; the space or fence
        before it is skipped text."""
        at = self._value_at
        if self._value_taken == 0:
            step = self._program[self._index][0]
            assert isinstance(step, ContentValue)
            _, result = _longest_read(step.parser, rest)
            node = _content_node(result.nodes) if result.status != FAIL else None
            at = start + node.start if node is not None else -1
        if at < 0:
            self.out.content.append(rest)
            return
        self.out.drop(rest[: at - start], "skipped_text", start)
        tail = rest[at - start + self._value_taken :]
        if tail:
            self.out.content.append(tail)

    def _shows_call(self, parser: Parser, text: str, names: frozenset[str]) -> bool:
        """Whether the longest start of ``text`` that ``parser`` reads without failing shows a
        call of one of ``names`` (what the stream's preview of the call would show)."""
        read, result = _longest_read(parser, text)
        if result.status == FAIL:
            return False
        mapper = self.out.mapper.fork()
        mapper.visit(result.nodes, read)
        mapper.flush()
        shown = mapper.calls
        return bool(shown) and (not names or shown[0].name in names)

    # ------------------------------------------------------------------ the program

    def _run(self) -> None:
        cur, program = self.cursor, self._program
        while self._state is _RUNNING:
            self.waiting.clear()
            if self._index >= len(program):
                self._enter_tail()
                return
            step, guard = program[self._index]
            if guard is not _ALWAYS and (self._calls_done > 0) is (guard is _NO_CALLS):
                outcome = NEXT
            else:
                outcome = self._run_step[type(step)](step)
                if self._skipped and outcome is not WAIT:
                    self._report_skipped()  # the dropped thought ended (or the reply did)
            if outcome is NEXT:
                self._index += 1
                self._phase = None
            elif outcome is WAIT:
                cur.compact()
                return
            elif outcome is STOP:
                self._stop()
                return
            elif outcome is FAILED:
                self._state = _BROKEN
                return
            # JUMP: the step set the index itself

    def _jump(self, kind: type, phase: Enum | None) -> Outcome:
        self._index = self._label[kind]
        self._phase = phase
        return JUMP

    def _stop(self) -> None:
        """The parse ended at the end of input (NEED_MORE): what is left was cut short."""
        cur = self.cursor
        cur.materialize()
        rest = cur.rest()
        self.out.drop(rest, "marker_prefix", cur.offset)
        self._state = _STOPPED

    def _fail(self, reason: str) -> Outcome:
        return self.out.fail(self.cursor.offset, reason)

    # ------------------------------------------------------------------ markers and text

    def _expect(self, step: Expect) -> Outcome:
        cur = self.cursor
        cur.materialize()
        status = cur.literal(step.text)
        if status == SUCCESS:
            cur.pos += len(step.text)
            return NEXT
        if status == NEED_MORE:
            return cur.pending_or_stop()
        return self._fail("the reply does not start with the expected prefix")

    def _marker(self, step: Marker) -> Outcome:
        self.cursor.materialize()
        return self.cursor.optional_marker(step.text)

    def _not_marker(self, step: NotMarker) -> Outcome:
        cur = self.cursor
        cur.materialize()
        status = cur.literal(step.text)
        if status == NEED_MORE:
            return cur.pending_or_stop()
        if status == SUCCESS:
            return self._fail(f"{step.text!r} is not allowed here")
        return NEXT

    def _whitespace(self, step: Whitespace) -> Outcome:
        self.cursor.materialize()
        return self.cursor.skip_space()

    def _text(self, step: Text) -> Outcome:
        self.cursor.materialize()
        complete, at_end = self._scan(self._untils[step.stops], self.out.content)
        if complete:
            return NEXT
        if at_end:
            return self.cursor.pending_or_stop()
        return NEXT if self.cursor.eof else WAIT  # a cut marker: `until` ends before it

    def _scan(self, until: Until, out: list[str]) -> tuple[bool, bool]:
        """Commit text up to a stop into ``out``: (a whole stop was found, the text ran out)."""
        cur = self.cursor
        stop, complete = until.find(cur.buf, cur.pos)
        if stop > cur.pos:
            out.append(cur.buf[cur.pos : stop])
            cur.pos = stop
        if not complete and not cur.eof:
            self.waiting.plain(out, until)  # every caller waits here: feed may take the text
        return complete, stop >= len(cur.buf)

    def _end(self, step: End) -> Outcome:
        cur = self.cursor
        cur.materialize()
        if not cur.at_end():
            return self._fail("text after the end of the reply format")
        return NEXT if cur.eof else WAIT

    def _messages(self, step: Messages) -> Outcome:
        assert self._flow is not None
        return self._flow.step()

    # ------------------------------------------------------------------ the thought

    def _thought(self, step: Thought) -> Outcome:
        block = step.block
        assert self._thought_until is not None
        cur = self.cursor
        cur.materialize()
        phase = self._phase or ThoughtPhase.OPEN
        if phase is ThoughtPhase.OPEN:
            self._skipped_at = cur.offset
            status = cur.literal(block.start)
            if status == FAIL:
                outcome = self._no_thought_start(block)
                if outcome is not None:
                    return outcome
                phase = ThoughtPhase.BODY  # the generation prompt opened it
            elif status == NEED_MORE:
                return cur.pending_or_stop()
            else:
                cur.pos += len(block.start)
                if not block.stops:
                    return NEXT  # a lone marker (DeepSeek V4's pre-closed thought)
                self._markup(cur.pos - len(block.start))
                space = block.space_after_start
                phase = ThoughtPhase.START_SPACE if space else ThoughtPhase.START_CHARS
        if phase is ThoughtPhase.START_CHARS or phase is ThoughtPhase.START_SPACE:
            at = cur.pos
            if phase is ThoughtPhase.START_CHARS:
                outcome = cur.optional_chars(block.start_optional)
            else:
                outcome = cur.skip_space()
            self._markup(at)
            if outcome is WAIT:
                self._phase = phase
                return WAIT
            phase = ThoughtPhase.BODY
        if phase is ThoughtPhase.BODY:
            self._phase = phase
            complete, at_end = self._scan(self._thought_until, self._thought_out)
            # (a closer cut by the end still counts for an inline block: see _close_thought)
            if at_end or not (complete or (cur.eof and block.body == "inline")):
                if cur.eof and block.peek_cut_ends and self._peek_cut(block):
                    return NEXT
                return cur.pending_or_stop()
            self._phase = ThoughtPhase.CLOSE
            if block.call_stops and any(cur.startswith(m) for m in block.call_stops):
                # the calls may begin here; if they do not parse the thought reads on
                self._thought_call = True
                return self._jump(Calls, None)
        return self._close_thought(block)

    def _close_thought(self, block: ReasoningBlock) -> Outcome:
        cur = self.cursor
        for marker, consumed in block.closers:
            status = cur.literal(marker)
            if status == SUCCESS:
                if consumed:
                    closer_at = cur.pos
                    cur.pos += len(marker)
                    if block.end_optional and cur.optional_chars(block.end_optional) is WAIT:
                        cur.pos = closer_at
                        return WAIT
                    self._markup(closer_at)
                return NEXT
            if status == NEED_MORE:
                if cur.eof and consumed and block.body == "inline":
                    # llama.cpp's inline block spans the cut-short closer up to the end
                    cur.pos, at = len(cur.buf), cur.pos
                    self._markup(at)
                return cur.pending_or_stop()
        return self._fail("the thought does not end with a closing marker")

    def _peek_cut(self, block: ReasoningBlock) -> bool:
        """The reply ends in the start of a closer that only peeks (see ``peek_cut_ends``)."""
        cur = self.cursor
        rest = cur.buf[cur.pos :]
        return bool(rest) and any(
            not consumed and marker.startswith(rest) for marker, consumed in block.closers
        )

    def _no_thought_start(self, block: ReasoningBlock) -> Outcome | None:
        """The text does not open the thought: a bare marker, a failure, no thought, or (None)
        a body read without its start."""
        cur = self.cursor
        if block.bare:
            status = cur.literal(block.bare)
            if status == SUCCESS:
                cur.pos += len(block.bare)
                return NEXT
            if status == NEED_MORE:
                return cur.pending_or_stop()
        if block.required:
            return self._fail(f"the reply does not open its thought with {block.start}")
        return None if block.start_may_be_absent else NEXT

    def _markup(self, start: int) -> None:
        """A thought's markup read from ``start``: content too when the block is kept inline
        (``body="inline"``), skipped text with the body when the thought is dropped."""
        block = self._block
        cur = self.cursor
        if block is not None and cur.pos > start:
            if block.body == "inline":
                self.out.content.append(cur.buf[start : cur.pos])
            elif block.body == "":
                self._skipped.append(cur.buf[start : cur.pos])

    def _report_skipped(self) -> None:
        """A dropped thought read so far goes to ``dropped`` (llama.cpp keeps it nowhere)."""
        if self._skipped:
            self.out.emit("", "".join(self._skipped), self._skipped_at)
            self._skipped.clear()

    # ------------------------------------------------------------------ the content

    def _content(self, step: Content) -> Outcome:
        cur = self.cursor
        cur.materialize()
        phase = self._phase or ContentPhase.OPEN
        if phase is ContentPhase.OPEN and step.open:
            status = cur.literal(step.open)
            if status == NEED_MORE:
                return cur.pending_or_stop()
            if status == FAIL:
                if step.optional:
                    return NEXT  # no content: what follows is read here
                return self._fail(f"the reply does not go on with {step.open}")
            cur.pos += len(step.open)
        if phase is ContentPhase.CLOSE:
            return self._content_close(step)
        self._phase = ContentPhase.BODY
        if step.stops is None:
            if not cur.at_end():
                self.out.content.append(cur.rest())
                cur.pos = len(cur.buf)
            if cur.eof:
                return STOP
            self.waiting.plain(self.out.content, None)
            return WAIT
        complete, at_end = self._scan(self._untils[step.stops], self.out.content)
        if complete:
            return self._content_close(step) if step.close else NEXT
        if at_end:
            return cur.pending_or_stop()
        # a marker prefix cut by the end: llama.cpp's `until` ends before it and parsing goes on
        if cur.eof and step.close:
            return self._content_close(step)
        return NEXT if cur.eof else WAIT

    def _content_close(self, step: Content) -> Outcome:
        """The optional marker that closes framed content."""
        self._phase = ContentPhase.CLOSE
        return self.cursor.optional_marker(step.close)

    def _content_value(self, step: ContentValue) -> Outcome:
        """Content read as one value, parsed whole like a call: when its text has doubled since
        the last try, when a JSON object or array it shows open has closed, or the reply ends.
        Between parses, the open object or array grows with the text as written (its text is
        the content)."""
        parser = step.parser
        cur = self.cursor
        if self._phase is None:
            self._phase = ContentPhase.BODY
            self._tried_len = -1
        if not (cur.eof or self._tried_len < 0 or self._value_ready()):
            self.waiting.call(self._value_ready, None)
            return WAIT
        cur.materialize()
        result = parser.parse(cur.buf, cur.pos)
        if result.status == FAIL:
            self._value = None
            self._value_failed = cur.offset
            return self._fail("the content is not the value the response format asks for")
        # a value that parses to the end of the text so far may still grow (its trailing space)
        if not cur.eof and (result.status == NEED_MORE or result.end >= len(cur.buf)):
            self._tried_len = len(cur.buf) - cur.pos
            self._show_value(result.nodes, cur.buf, cur.base)
            self.waiting.call(self._value_ready, None)
            return WAIT
        self._value = None
        texts: list[str] = []
        _content_texts(result.nodes, cur.buf, texts)
        rest = "".join(texts)[self._value_taken :]
        if rest:
            self.out.content.append(rest)
        cur.pos = result.end
        return NEXT if result.status == SUCCESS else STOP

    def _value_ready(self) -> bool:
        """Whether the value in progress is worth parsing again (see ``_content_value``)."""
        value = self._value
        if value is not None and value.closed:
            return True
        return self.cursor.unread() >= 2 * self._tried_len

    def _show_value(self, nodes: list[Node], text: str, base: int) -> None:
        """The content a partial parse of the value shows, past what was shown before; an
        object or array it leaves open at the end of the text streams on as written."""
        self._value = None
        node = _content_node(nodes)
        if node is None:
            return
        if self._value_at < 0:
            self._value_at = base + node.start
        elif self._value_at != base + node.start:
            return  # (another reading of the value: nothing more is shown before its end)
        raw = text[node.start : node.end]
        shown = raw
        if node.partial and node.end == len(text) and raw[:1] in ("{", "["):
            opened = OpenArguments(raw)
            shown = opened.shown
            if not opened.closed and len(shown) >= self._value_taken:
                self._value = opened
        if len(shown) > self._value_taken:
            self.out.content.append(shown[self._value_taken :])
            self._value_taken = len(shown)
        elif len(shown) < self._value_taken:
            self._value = None  # (what was shown is ahead of this parse: the chunks wait)

    # ------------------------------------------------------------------ the calls

    def _calls(self, step: Calls) -> Outcome:
        section = step.section
        cur = self.cursor
        phase = self._phase or CallPhase.BEGIN
        while True:
            if phase is CallPhase.SPACE:
                cur.materialize()
                if cur.skip_space() is WAIT:
                    self._phase = phase
                    return WAIT
                phase = CallPhase.BEGIN
            if phase is CallPhase.BEGIN:
                if section.next is None and self._calls_done >= 1:
                    self._limit_reached = True
                    return NEXT
                cur.materialize()
                if cur.at_end():
                    self._phase = phase
                    return cur.pending_or_stop()
                phase = self._phase = CallPhase.CALL
                self._tried_len = -1
            outcome = self._call(section)
            if outcome is not None:
                return outcome
            phase = CallPhase.SPACE if section.space_after else CallPhase.BEGIN

    def _call(self, section: CallSection) -> Outcome | None:
        """Try the call in progress; None when it was read (more calls may follow)."""
        cur = self.cursor
        if not (cur.eof or self._tried_len < 0 or self._call_ready()):
            self.waiting.call(self._call_ready, self._watch)
            return WAIT  # it cannot have changed its outcome yet
        cur.materialize()
        grammar = section.first if self._calls_done == 0 else section.next
        assert grammar is not None
        text = Stall.probe(cur.buf, cur.pos) if self._probing and not cur.eof else cur.buf
        result = grammar.parse(text, cur.pos)
        self._stall = None
        if result.status == SUCCESS and section.settle and result.end >= len(cur.buf):
            if not cur.eof:  # a call that ends with the text may go on
                if not self._thought_call:
                    self._preview(result.nodes, section)
                return self._wait_for_call()
        if result.status == SUCCESS:
            self._thought_call = False
            self.out.commit_calls(result.nodes, cur.buf, cur.base)
            self._calls_done += 1
            cur.pos = result.end
            cur.compact()
            return None
        if result.status == NEED_MORE:
            if not cur.eof:
                if not self._thought_call:  # (a call in a thought may prove to be thought)
                    self._preview(result.nodes, section)
                self._stall = Stall.of(text, result.nodes, cur.base, self.out.mapper)
                return self._wait_for_call()
            if self.out.close_calls(result.nodes, cur.buf, cur.base):
                cur.pos = len(cur.buf)
            return STOP
        self.out.clear_preview()
        if self._thought_call:
            # not calls after all: the stop is thought text, the thought ends at its closer
            self._thought_call = False
            block = self._block
            assert block is not None
            self._thought_until = Until(*(m for m in block.stops if m not in block.call_stops))
            self._skipped_at = cur.offset
            return self._jump(Thought, ThoughtPhase.BODY)
        self._failed_call = (cur.offset, grammar)
        if self._calls_done == 0 and section.required:
            at = result.end if section.fail_at_parse_end else cur.pos
            return self.out.fail(
                cur.base + at, "no valid tool call although tool_choice is required"
            )
        self._call_failed = True
        return NEXT

    def _preview(self, nodes: list[Node], section: CallSection) -> None:
        ids = self._ids
        if ids is None:
            ids = self._ids = any(
                carries_call_ids(p) for p in (section.first, section.next) if p is not None
            )
        self.out.preview_calls(nodes, self.cursor.buf, section.tool_names, ids)

    def _wait_for_call(self) -> Outcome:
        cur = self.cursor
        self._tried_len = len(cur.buf) - cur.pos
        assert self._watch is not None
        self._watch.restart(cur.buf, cur.pos)
        self.waiting.call(self._call_ready, self._watch)
        return WAIT

    def _call_ready(self) -> bool:
        """Whether the call in progress may have changed its outcome since it was last tried."""
        assert self._watch is not None
        if self._stall is not None and self._stall.holds(self.cursor):
            return False
        return self._watch.hit or retry_due(self.cursor.unread(), self._tried_len, self.out)

    # ------------------------------------------------------------------ dropped text

    def _tail_reason_for(self, rest: str) -> str:
        if self._flow is not None:
            return self._flow.tail_reason(rest)
        if self._watch is None:  # no calls
            return "trailing_text"
        return self._markers.reason(rest, self._limit_reached, self._call_failed)

    def _enter_tail(self) -> None:
        """The format is done: the rest of the reply is dropped (its reason is told at the end,
        when all of it is known)."""
        cur = self.cursor
        cur.materialize()
        self._tail = [cur.rest()] if not cur.at_end() else []
        self._tail_start = cur.offset
        cur.buf, cur.base, cur.pos = "", self._tail_start, 0
        self._state = _TAIL


def _program(steps: tuple[Step, ...]) -> list[Instruction]:
    """The steps in the order the reply reads them, those of the calls after the calls."""
    program: list[Instruction] = []
    for step in steps:
        program.append((step, _ALWAYS))
        if isinstance(step, Calls):
            program.extend((s, _AFTER_CALLS) for s in step.then)
            program.extend((s, _NO_CALLS) for s in step.otherwise)
    kinds = [type(s) for s, _ in program]
    for kind in (Thought, Calls, Messages, ContentValue):
        if kinds.count(kind) > 1:
            raise ValueError(f"a reply format reads at most one {kind.__name__} step")
    return program


def _thought_out(block: ReasoningBlock | None, out: Output, skipped: list[str]) -> list[str]:
    """Where a thought's body goes: reasoning, content (a block kept inline, or its body only),
    or nowhere (read and dropped: thinking disabled)."""
    if block is None or block.body == "reasoning":
        return out.reasoning
    return out.content if block.body in ("content", "inline") else skipped


def _content_node(nodes: list[Node]) -> Node | None:
    """The first ``content`` node of a parse (a response format's value)."""
    stack = list(reversed(nodes))
    while stack:
        node = stack.pop()
        if node.tag == "content":
            return node
        stack.extend(reversed(node.children))
    return None


def _content_texts(nodes: list[Node], text: str, out: list[str]) -> None:
    """The text of the ``content`` nodes of a parse, in order."""
    stack = list(reversed(nodes))
    while stack:
        node = stack.pop()
        if node.tag == "content":
            out.append(text[node.start : node.end])
        else:
            stack.extend(reversed(node.children))


def _longest_read(parser: Parser, text: str) -> tuple[str, Result]:
    """The longest start of ``text`` that ``parser`` reads without failing, and its parse
    (the starts that fail are taken to be the longer ones)."""
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if parser.parse(text[:mid], 0).status == FAIL:
            hi = mid - 1
        else:
            lo = mid
    return text[:lo], parser.parse(text[:lo], 0)
