"""What the reply runtime works on: the text read so far, what it became, and named outcomes.

``Cursor`` holds the reply text (``buf[pos:]`` is unread; ``base`` is the offset of ``buf[0]`` in
``generation_prompt + reply``; chunks that arrived but were not yet needed wait in ``pending``).
``Output`` collects what the text became (content and reasoning pieces, calls, dropped text, the
failure). The engine's steps and the flow of a multi-message reply both read one and fill the
other, so neither reaches into the other's state.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from .description import Balance
from .mapper import (
    TOOL,
    TOOL_ARG,
    TOOL_ARG_NAME,
    TOOL_ARGS,
    TOOL_ID,
    TOOL_NAME,
    CallMapper,
    MappedCall,
    json_escape_inner,
)
from .message import Dropped
from .peg import FAIL, NEED_MORE, SUCCESS, Node, Probe, Until, is_c_space, probed

__all__ = [
    "Outcome",
    "WAIT",
    "NEXT",
    "STOP",
    "FAILED",
    "JUMP",
    "Cursor",
    "Failure",
    "Output",
    "CommitWatch",
    "BalanceWatch",
    "CallMarkers",
    "Waiting",
    "Stall",
]


class Outcome(Enum):
    """What a step of the runtime did with the text it was given."""

    WAIT = "wait"  # it needs more text (nothing past the cursor is decided yet)
    NEXT = "next"  # it is done: the next step reads on from the cursor
    STOP = "stop"  # the reply ended inside it: what is left was cut short
    FAILED = "failed"  # the reply does not match (llama.cpp's parse would throw)
    JUMP = "jump"  # it chose the step that reads on (a thought that turns into calls and back)


WAIT, NEXT, STOP, FAILED, JUMP = Outcome


@dataclass(frozen=True)
class Failure:
    """Where llama.cpp's parse would fail (it throws on a finished reply)."""

    position: int
    reason: str


class Cursor:
    """The text of ``generation_prompt + reply`` read so far, and the reading position."""

    __slots__ = ("buf", "pos", "base", "pending", "pending_len", "eof")

    def __init__(self) -> None:
        self.buf = ""
        self.pos = 0
        self.base = 0  # offset of buf[0] in the whole text
        self.pending: list[str] = []  # chunks not joined into buf yet
        self.pending_len = 0
        self.eof = False

    @property
    def offset(self) -> int:
        """The absolute offset of the reading position."""
        return self.base + self.pos

    def unread(self) -> int:
        """How many characters arrived past the reading position (pending ones included)."""
        return len(self.buf) - self.pos + self.pending_len

    def add(self, chunk: str) -> None:
        self.pending.append(chunk)
        self.pending_len += len(chunk)

    def materialize(self) -> None:
        """Join the pending chunks into the buffer (dropping what was read)."""
        if self.pending:
            if self.pos > 0:
                self.base += self.pos
                self.buf = self.buf[self.pos :]
                self.pos = 0
            self.buf += "".join(self.pending)
            self.pending.clear()
            self.pending_len = 0

    def compact(self) -> None:
        """Drop what was read from the buffer, once it is at least what is left (a copy per
        step would make a reply of many calls quadratic; this way copying is linear)."""
        if self.pos > 0 and 2 * self.pos >= len(self.buf):
            self.base += self.pos
            self.buf = self.buf[self.pos :]
            self.pos = 0

    def at_end(self) -> bool:
        return self.pos >= len(self.buf)

    def rest(self) -> str:
        return self.buf[self.pos :]

    def startswith(self, marker: str) -> bool:
        return self.buf.startswith(marker, self.pos)

    def literal(self, literal: str) -> int:
        """SUCCESS if ``literal`` is next, NEED_MORE if the text so far is a prefix of it."""
        buf, pos = self.buf, self.pos
        if buf.startswith(literal, pos):
            return SUCCESS
        if len(buf) - pos < len(literal) and literal.startswith(buf[pos:]):
            return NEED_MORE
        return FAIL

    def optional_marker(self, marker: str) -> Outcome:
        """``marker`` taken if it is next (decided once enough text has arrived)."""
        status = self.literal(marker)
        if status == NEED_MORE:
            return STOP if self.eof else WAIT
        if status == SUCCESS:
            self.pos += len(marker)
        return NEXT

    def pending_or_stop(self) -> Outcome:
        """A structure is cut by the end of the text so far: wait, or stop at the reply's end."""
        return STOP if self.eof else WAIT

    def skip_space(self) -> Outcome:
        """Any run of whitespace (llama.cpp's ``space()``): decided once non-space arrives."""
        buf, n = self.buf, len(self.buf)
        pos = self.pos
        while pos < n and is_c_space(buf[pos]):
            pos += 1
        self.pos = pos
        return WAIT if pos >= n and not self.eof else NEXT

    def optional_chars(self, chars: str) -> Outcome:
        """Each of ``chars`` in turn, if it is there (decided once enough text has arrived)."""
        buf, n = self.buf, len(self.buf)
        pos = self.pos
        for ch in chars:
            if pos >= n:
                if not self.eof:
                    return WAIT
                break
            if buf[pos] == ch:
                pos += 1
        self.pos = pos
        return NEXT


# a call in progress whose arguments do not grow as written (its name, a tag, the markup
# between two values) is re-tried on every chunk while its text is at most this long (so the
# stream shows it as llama.cpp's per-token re-parse does); past it, only when its text has
# doubled since the last try or its closing marker may have come: a bounded cost per chunk,
# and linear in all. While its arguments grow as written (OpenArguments, OpenString), it is
# not re-tried at all until they close or its closing marker may have come.
PREVIEW_WINDOW = 1024


def retry_due(unread: int, tried: int, out: Output) -> bool:
    """Whether a call in progress last tried on ``tried`` characters is worth parsing again
    now that it has ``unread``, short of its closing marker: never while its arguments grow
    as written (the last chunk did not close them); else always within PREVIEW_WINDOW; past
    it once its text has doubled, or, after a string value that grew as written closed, when
    what came after it may have opened the next argument (OpenString.due)."""
    opened = out.open_arguments
    if opened is not None:
        if not opened.closed:
            return False
        if opened.in_json:
            return True  # (once per call: its arguments closed, the call may end next)
    # (asked first: the first ask after the value closed weighs the value against ``tried``)
    if isinstance(opened, OpenString) and opened.due(tried):
        return True
    return unread <= PREVIEW_WINDOW or unread >= 2 * tried


class Stall:
    """Where the last parse of the call in progress stopped for more text: inside one literal
    that begins at absolute offset ``at``, with nothing else in the parse read as far as the
    end of the text, and no part of what it shows ending there. While the text from ``at`` is
    still a proper prefix of that literal, a parse would give the same result and the same
    preview: the call waits without one. (A call's markup is mostly such literals: most of
    its chunks then cost a comparison instead of a parse.)"""

    __slots__ = ("at", "literal")

    def __init__(self, at: int, literal: str) -> None:
        self.at = at
        self.literal = literal

    @staticmethod
    def probe(buf: str, pos: int) -> str:
        """The text to parse the call in ``buf[pos:]`` on: a Probe while the call is within
        PREVIEW_WINDOW characters (the copy a Probe costs is then bounded), else ``buf``."""
        return probed(buf) if len(buf) - pos <= PREVIEW_WINDOW else buf

    @staticmethod
    def of(text: str, nodes: list[Node], base: int, mapper: CallMapper) -> Stall | None:
        """The stall of a parse that needed more of ``text`` (``text[0]`` at absolute offset
        ``base``), or None. The generic mapper only (a family's own may read any node's
        text): a node cut short may only be the call or an argument around the literal, or
        arguments that are no raw JSON object (the mapper then reads none of their text)."""
        if type(text) is not Probe or not text.edges or type(mapper) is not CallMapper:
            return None
        pos, literal = text.edges[-1]
        if not literal:
            return None
        # (whitespace that ran to the literal stops there again: the literal's text is next)
        if any(edge != (pos, None) for edge in text.edges[:-1]) or (
            len(text.edges) > 1 and is_c_space(literal[0])
        ):
            return None
        stack = list(nodes)
        while stack:
            node = stack.pop()
            if node.partial and node.tag not in _WRAPPERS:
                # (arguments cut short at the literal begin with it)
                first = text[node.start] if node.start < pos else literal[0]
                if node.tag != TOOL_ARGS or first == "{":
                    return None
            stack.extend(node.children)
        return Stall(base + pos, literal)

    def holds(self, cur: Cursor) -> bool:
        """Whether the text from ``at`` is still a proper prefix of the literal."""
        if cur.base + len(cur.buf) + cur.pending_len - self.at >= len(self.literal):
            return False
        tail = cur.buf[self.at - cur.base :]
        if cur.pending:
            tail += "".join(cur.pending)
        return self.literal.startswith(tail)


# the tags of nodes whose end the generic mapper does not read
_WRAPPERS = frozenset({TOOL, TOOL_ARG})


class CommitWatch:
    """Whether a call's closing marker arrived since the call was last tried."""

    __slots__ = ("marker", "keep", "window", "hit")
    balance = False  # (a BalanceWatch needs every chunk since its restart)

    def __init__(self, marker: str) -> None:
        self.marker = marker
        self.keep = len(marker) - 1
        self.window = ""
        self.hit = False

    def see(self, chunk: str) -> None:
        if not self.marker:
            return
        window = self.window + chunk
        if self.marker in window:
            self.hit = True
        self.window = window[-self.keep :] if self.keep > 0 else ""

    def restart(self, buf: str, start: int) -> None:
        """The call begun at ``buf[start]`` was tried on all of ``buf`` and needs more."""
        self.hit = False
        self.window = buf[len(buf) - self.keep :] if self.keep > 0 else ""


class BalanceWatch:
    """Open/close characters outside quoted strings: a return to zero may end a call (JSON
    arguments whose last ``}`` ends the call)."""

    __slots__ = ("opener", "closer", "quotes", "depth", "quote", "escaped", "hit")
    balance = True

    def __init__(self, balance: Balance) -> None:
        self.opener, self.closer, self.quotes = balance.open, balance.close, balance.quotes
        self.depth = 0
        self.quote = ""
        self.escaped = False
        self.hit = False

    def see(self, text: str) -> None:
        opener, closer, quotes = self.opener, self.closer, self.quotes
        depth, quote, escaped = self.depth, self.quote, self.escaped
        for ch in text:
            if quote:
                if escaped:
                    escaped = False
                elif ch == "\\":
                    escaped = True
                elif ch == quote:
                    quote = ""
            elif ch in quotes:
                quote = ch
            elif ch == opener:
                depth += 1
            elif ch == closer:
                depth -= 1
                if depth <= 0:
                    depth = 0
                    self.hit = True
        self.depth, self.quote, self.escaped = depth, quote, escaped

    def restart(self, buf: str, start: int) -> None:
        """The call begun at ``buf[start]`` was tried on all of ``buf`` and needs more."""
        self.depth, self.quote, self.escaped = 0, "", False
        self.see(buf[start:])
        self.hit = False


@dataclass(frozen=True)
class CallMarkers:
    """What tells why text after the calls was dropped (diagnostics only, never the parse)."""

    openers: tuple[str, ...] = ()
    name_marker: str = ""
    name_marker_end: str = ""
    tool_names: frozenset[str] = frozenset()

    def reason(self, rest: str, limit_reached: bool, call_failed: bool) -> str:
        """Why ``rest`` (stripped of leading whitespace) was left unread."""
        opens_call = any(rest.startswith(o) for o in self.openers)
        if limit_reached and opens_call:
            return "parallel_limit"
        if call_failed and self.name_marker:
            at = rest.find(self.name_marker)
            if at >= 0 and (opens_call or at == 0):
                start = at + len(self.name_marker)
                end = rest.find(self.name_marker_end, start)
                if end >= 0 and rest[start:end] not in self.tool_names:
                    return "unknown_tool"
        if call_failed and opens_call:
            return "invalid_call"
        return "trailing_text"


_C_SPACES = " \t\n\v\f\r"  # C isspace, which llama.cpp trims arguments of
_IN_STRING = re.compile(r'["\\]')
_OUTSIDE_STRING = re.compile(r'["{}\[\]]')


class OpenArguments:
    """The arguments of the call in progress while they are the raw JSON object the model is
    writing, which a partial parse shows as that text less an escape it ends inside and its
    trailing whitespace: what arrives before the object closes extends them as it comes,
    with no parse (the call is parsed again once they close or its closing marker may have
    come).

    ``shown`` is what the partial parse of ``raw`` shows; ``take(chunk)`` the text the shown
    arguments grow by with ``chunk``; ``closed`` once the object's last brace went by.
    """

    __slots__ = ("depth", "in_string", "escape", "closed", "held", "shown")
    in_json = True  # (the call cannot end while they are open)

    def __init__(self, raw: str) -> None:
        self.depth = 0
        self.in_string = self.closed = False
        self.escape = ""  # an escape sequence begun and not complete
        self.held = ""  # what was read at the end and is not shown (yet)
        self.shown = self.take(raw)

    def take(self, chunk: str) -> str:
        if self.closed:
            return ""
        if self.in_string and not (self.held or self.escape) and not _IN_STRING.search(chunk):
            # (inside a string that goes on: all of it, less its trailing whitespace)
            shown = chunk.rstrip(_C_SPACES)
            if len(shown) < len(chunk):
                self.held = chunk[len(shown) :]
            return shown
        part = self.held + chunk[: self._scan(chunk)]
        shown = part[: len(part) - len(self.escape)].rstrip(_C_SPACES)
        self.held = part[len(shown) :]
        return shown

    def _scan(self, chunk: str) -> int:
        """How much of ``chunk`` belongs to the object (all of it while it is open)."""
        n, i = len(chunk), 0
        while i < n:
            if self.escape:
                escape = self.escape
                while i < n and len(escape) < (6 if escape[1:2] == "u" else 2):
                    escape += chunk[i]
                    i += 1
                self.escape = escape if len(escape) < (6 if escape[1] == "u" else 2) else ""
                continue
            if self.in_string:
                found = _IN_STRING.search(chunk, i)
                if found is None:
                    return n
                i = found.end()
                if found.group() == '"':
                    self.in_string = False
                else:
                    self.escape = "\\"
                continue
            found = _OUTSIDE_STRING.search(chunk, i)
            if found is None:
                return n
            i = found.end()
            mark = found.group()
            if mark == '"':
                self.in_string = True
            elif mark in "{[":
                self.depth += 1
            else:
                self.depth -= 1
                if self.depth <= 0:
                    self.closed = True
                    return i
        return n


class OpenString:
    """The last argument of the call in progress while it is a raw string value left open
    (XML-style parameters): a partial parse shows its text, JSON-escaped, up to its closing
    delimiter or up to a prefix of one the text ends with. What arrives before the
    delimiter extends the arguments as it comes, with no parse.

    ``take(chunk)`` is the text the shown arguments grow by with ``chunk``; ``closed`` once
    the delimiter went by (the quote it closes is the next parse's). After it, the call is
    parsed again on every chunk while it is within PREVIEW_WINDOW; past it, when ``after``
    (what came since) reaches ``wait``, 64 characters, doubled
    at each parse that shows no new value open, up to PREVIEW_WINDOW: the next argument
    opens shortly after, and a long one then grows as written too. Only if the value grew
    by at least half the call text tried before it (``due``): each value's few extra parses
    then cost a bounded amount per character of it, linear in all.
    """

    __slots__ = ("until", "held", "closed", "grown", "after", "wait", "worth")
    in_json = False

    def __init__(self, until: Until, held: str) -> None:
        self.until = until
        self.held = held  # a prefix of a delimiter the text ends with: not shown (yet)
        self.closed = False
        self.grown = 0  # value characters taken
        self.after = 0  # characters since the delimiter began
        self.wait = 64
        self.worth: bool | None = None  # whether parses after the close pay (due decides)

    def take(self, chunk: str) -> str:
        if self.closed:
            self.after += len(chunk)
            return ""
        held = self.held
        text = held + chunk if held else chunk
        if self.until.firsts.isdisjoint(text):  # (no delimiter can begin in it: all value)
            self.held = ""
            self.grown += len(text)
            return json_escape_inner(text)
        stop, self.closed = self.until.find(text, 0)
        self.held = text[stop:] if not self.closed else ""
        if self.closed:
            self.after = len(text) - stop
        self.grown += stop
        return json_escape_inner(text[:stop])

    def due(self, tried: int) -> bool:
        """Whether the call, last tried on ``tried`` characters, is worth parsing again."""
        if not self.closed:
            return False
        if self.worth is None:  # (first asked before any parse since the value opened)
            self.worth = 2 * self.grown >= tried
        return self.worth and self.after >= self.wait

    def waits_on(self) -> OpenString | None:
        """After a parse that showed no new value open: this one, waiting twice as long, or
        None once it waited PREVIEW_WINDOW characters."""
        if not (self.closed and self.worth) or self.wait >= PREVIEW_WINDOW:
            return None
        self.wait *= 2
        return self


# tags of text read up to a marker that is no argument value
_NOT_VALUES = frozenset({TOOL_NAME, TOOL_ID, TOOL_ARGS, TOOL_ARG_NAME})


def _last_leaf(nodes: list[Node]) -> Node | None:
    """The node a parse read last: the last node's last child, down to one without."""
    node = nodes[-1] if nodes else None
    while node is not None and node.children:
        node = node.children[-1]
    return node


class Waiting:
    """Set by the step that returned WAIT, read by the engine's ``feed`` before it runs the
    step again: ``out``/``until`` when all the step waits for is plain text (it goes to ``out``
    up to the first of ``until``'s stops; None: no stop), ``ready``/``watch`` when it waits for
    a call in progress (``watch`` sees every new chunk; until ``ready()`` the text is queued)."""

    __slots__ = ("out", "until", "ready", "watch")

    def __init__(self) -> None:
        self.out: list[str] | None = None
        self.until: Until | None = None
        self.ready: Callable[[], bool] | None = None
        self.watch: CommitWatch | BalanceWatch | None = None

    def clear(self) -> None:
        self.out = self.until = self.ready = self.watch = None

    def plain(self, out: list[str] | None, until: Until | None) -> None:
        self.out, self.until = out, until

    def call(self, ready: Callable[[], bool], watch: CommitWatch | BalanceWatch | None) -> None:
        self.ready, self.watch = ready, watch


@dataclass
class Output:
    """What the reply became so far. ``committed`` are the calls known to be kept; ``mapper``
    also holds, after the end, the call a cut-short reply left open."""

    prompt_length: int
    mapper: CallMapper
    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    committed: list[MappedCall] = field(default_factory=list)
    # the calls a partial parse of the call in progress shows after the committed ones
    # (a preview for the stream: they may still grow, or fail and vanish)
    provisional: list[MappedCall] = field(default_factory=list)
    dropped: list[Dropped] = field(default_factory=list)
    failure: Failure | None = None
    # the last provisional call's arguments while they grow with the text (OpenArguments),
    # and what the last chunk added to them
    open_arguments: OpenArguments | OpenString | None = None
    arguments_fragment: str = ""

    def emit(self, target: str, text: str, at: int) -> None:
        """Text read at absolute offset ``at`` into ``target``: "content", "reasoning", or ""
        (read and reported as skipped, adjacent skips merged)."""
        if not text:
            return
        if target == "content":
            self.content.append(text)
        elif target == "reasoning":
            self.reasoning.append(text)
        else:
            self.drop(text, "skipped_text", at)

    def drop(self, text: str, reason: str, at: int) -> None:
        """Text read at absolute offset ``at`` and kept nowhere: reported in ``dropped`` (an
        adjacent skip of the same reason merged). The generation prompt's text is not the
        model's: only what lies in the reply is reported."""
        offset = at - self.prompt_length
        if offset < 0:
            text, offset = text[-offset:], 0
        if not text:
            return
        last = self.dropped[-1] if self.dropped else None
        if (
            last is not None
            and last.reason == reason == "skipped_text"
            and last.offset + len(last.text) == offset
        ):
            self.dropped[-1] = Dropped(last.text + text, reason, last.offset)
        else:
            self.dropped.append(Dropped(text, reason, offset))

    def take_content(self, nodes: list[Node], text: str) -> None:
        """The text of the ``content`` nodes of a parse, in order (a response format's value
        read as one structure)."""
        stack = list(reversed(nodes))
        while stack:
            node = stack.pop()
            if node.tag == "content":
                self.content.append(text[node.start : node.end])
            else:
                stack.extend(reversed(node.children))

    def preview_calls(
        self, nodes: list[Node], text: str, names: frozenset[str], ids: bool = False
    ) -> None:
        """A partial parse of the call in progress: what llama.cpp's partial parse of the text
        so far shows after the committed calls, mapped on a fork of the mapper (the mapper
        itself only ever maps whole calls). A call is shown once its name is complete: one of
        ``names`` when the format knows them; and, where the format's calls may carry the
        model's own id (``ids``), once that id has come (a call id is announced once and
        never changes: Mistral Nemo writes it after the arguments, and such a call is shown
        whole). Arguments the text leaves open where they may grow as written (raw JSON,
        or a raw string value last) are kept in ``open_arguments``."""
        mapper = self.mapper.fork()
        mapper.visit(nodes, text)
        mapper.flush()
        shown = mapper.calls
        kept = 0
        while kept < len(shown) and (not names or shown[kept].name in names):
            if ids and not shown[kept].id:
                break
            kept += 1
        self.provisional[:] = shown[:kept]
        previous, self.open_arguments = self.open_arguments, None
        if not kept or kept != len(shown):
            return
        span = mapper.raw_arguments
        if span is not None:
            # (the parse stops before an escape the text ends inside: the rest shows nothing)
            opened = OpenArguments(text[span[0] : span[1]])
            if opened.shown == shown[-1].arguments and not opened.take(text[span[1] :]):
                self.open_arguments = None if opened.closed else opened
        else:
            # a raw string value read last: open at the end if all after it may begin its
            # delimiter and the arguments end in its quotes (whatever the mapper: the generic
            # one, MiniMax-M3's nested elements, Gemma 4's strings)
            last = _last_leaf(nodes)
            until = last.until if last is not None and last.tag not in _NOT_VALUES else None
            if last is not None and until is not None:
                held = text[last.end :]
                value = '"' + json_escape_inner(text[last.start : last.end])
                if until.find(held, 0) == (0, False) and shown[-1].arguments.endswith(value):
                    self.open_arguments = OpenString(until, held)
        if self.open_arguments is None and isinstance(previous, OpenString):
            self.open_arguments = previous.waits_on()

    def clear_preview(self) -> None:
        """The call in progress is not one: nothing of it is shown."""
        self.provisional.clear()
        self.open_arguments = None

    def commit_calls(self, nodes: list[Node], text: str, base: int) -> None:
        """A call (or calls) parsed whole from ``text`` (``text[0]`` at absolute offset
        ``base``): map and keep them."""
        self.clear_preview()
        self.mapper.visit(nodes, text)
        self.committed.extend(self.mapper.calls[len(self.committed) :])  # only the new ones
        self._report_unread(text, base, True)

    def close_calls(self, nodes: list[Node], text: str, base: int) -> bool:
        """The reply ended inside a call: map what it reached; whether that made a new call."""
        self.clear_preview()
        self.mapper.visit(nodes, text)
        self.mapper.flush()
        made = len(self.mapper.calls) != len(self.committed)
        self._report_unread(text, base, made)
        return made

    def _report_unread(self, text: str, base: int, report: bool) -> None:
        """What the mapper read in a call and kept nowhere (markup the format does not write,
        arguments that are not an object), reported in ``dropped`` when a call was made."""
        if report:
            for start, end, reason in self.mapper.skipped:
                self.drop(text[start:end], reason, base + start)
        self.mapper.skipped.clear()

    def fail(self, position: int, reason: str) -> Outcome:
        self.failure = Failure(position, reason)
        return FAILED
