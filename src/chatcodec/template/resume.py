"""Prefix renders resumed from one render of the whole conversation (``render_with_spans``).

Derived spans need, for every assistant turn, the render of the conversation before the turn
(with a generation prompt) and of the conversation up to it. Rendering each prefix from the
start runs the conversation's start (system prompt, tools) and every earlier turn again, so
a conversation costs a number of renders that grows with its length.

Most templates are a start, one loop over the messages, and an end. The render of
``messages[:k]`` runs exactly as the render of all the messages did until the loop begins
message ``k - 1``, *as long as nothing before that point read message ``k`` or later, or
a value that differs between the two*. So one render of the whole conversation, watched,
gives each such prefix for the price of its last pass (or none) and the end:

- the template gets the messages as a ``WatchedMessages`` list, which notes the furthest
  message any read reached (a negative index, a reversed walk or a comparison reach them
  all; a loop's look at its next item counts); slices that keep the start are watched
  views;
- a mark before each top-level statement of the start and at the start of every pass of
  the loop (and of every loop of the start over the messages) records how much text is
  out, the top-level variables, the fields of every ``namespace()`` (copied only after a
  field was set) and how far the reads reached;
- ``messages[:k]`` resumes at the mark of message ``k`` when the passes before it read
  nothing of message ``k``: the text out so far, then the template's end on the prefix's
  own inputs; else at the mark of message ``k - 1``: the text so far, the loop's body
  alone on message ``k - 1`` (with the loop variables of a loop over ``k`` messages), then
  the end; the namespaces put back as they were at the mark. A prefix whose loop walks
  none of its messages (Llama 3.1's takes the system message and the first user message
  out) resumes at the mark of the loop's first message, with the end alone.

Values that differ between the prefix and the whole conversation are *traced* (``_Traced``):
the messages' length (``messages | length``), ``add_generation_prompt`` when the template
reads it before its loop ends, and every int the start leaves in a namespace field (the
index of the last user query, of the last assistant message). A traced value behaves as its
value and notes each use with the pass it came in; a comparison or a truth test notes its
result, which the prefix's value can replay. A prefix resumes at the first pass whose uses
would come out otherwise with its values (a use in the start that would: rendered from the
start). A traced int plus or minus a constant in a pass (Solar's ``messages | length - 1``)
is traced too (``_Shifted``): its comparisons are uses its traced value replays, shifted.

A selection of the messages (``messages | selectattr(...) | list``, ``rejectattr``,
``select``, ``reject``) tests each message alone: a prefix's own is the whole one's messages
before it. The watched render makes it a ``WatchedMessages`` that notes a read of each
message at its place in the conversation (``Watch.select``); choosing them reads none, its
length is traced as the messages' is, and a prefix resumes with its own selection.

Statements of the start that read message ``k`` or later (a scan for system prompts or the
last user query) are run again on the prefix's inputs, from their marks, and must leave the
same text and state (variables and namespace fields, compared by type and value) as in the
whole render, but for traced ints left another int. A loop of the start over the messages
needs no run: the prefix's loop ends where the whole one's pass on message ``k`` began.
A start may cut the messages short of the end (``messages[:-1]``: Nemotron Nano v2 takes a
last assistant message out of its loop, into namespace fields its end shows). The cut is a
watched view whose making reads every message, so it runs again on each prefix; where the
prefix's own ends is the length of the list that run leaves, if it is the view's first
messages (``Watch.sizes``), and the prefix resumes after its own last pass. The fields that
only the end reads (``_end_fields``: named nowhere before the end, set only by statements
that run again) may differ too: the prefix's own values go in before its end runs
(``Watch.overrides``).
A loop of the start that walks the messages *backwards* for the last one of a kind
(Qwen3's scan for the last user query) would run again on each prefix, a pass per message:
quadratic in the conversation's length. When its shape makes each pass a function of its
message alone while a namespace flag holds (``_Scan``), each pass is run once per message,
alone (a probe), and a prefix's scan is the effects of its passes from its last message
down, until one clears the flag; a probe that would stand for other passes than its own (it
uses a traced value, writes another namespace, or the statements run before it set what it
reads) refuses, and the scan runs as written.
A pass that looks ahead (gpt-oss's call looks for a later final reply, Muse's tool result
for its call's name in every message) would keep every later prefix from resuming at its
own mark. Two things keep it from costing a render per prefix. A loop over the messages in
a pass (or in a macro) is *followed* (``Watch.inner_loop``): when it ends, the reads of its
passes after the last one that did anything (printed to the render's text, or changed a
namespace field's value) are forgotten, since those passes do nothing in the render of any
prefix that holds the messages read until then, whether they run there or the loop ends
before them. Such a loop may use of ``loop`` only what the passes before gave (not
``length`` or ``last``, which see the passes after) and no ``else`` (which sees none); in a
macro or a captured block, whose output is not yet the render's text, its printing
statements carry a mark that counts them. A namespace a macro makes for one such loop
alone (Cohere's count of every call) is unseen (``UnseenNamespace``): only the loop's own
passes read it, so setting it is not doing anything. A range up to the messages' traced
length (Gemma 4 walks a call's results by index) is followed as well (``_TracedRange``).
And a prefix whose pass before it read its
message ``k`` or later resumes at the last pass whose mark came before any such read (the
main loop's marks only read further), running the passes from there again.
Everything else a render can see is the same in both: the inputs are shared and immutable,
and a template's only mutable state is its namespaces (a loop's body cannot assign
variables outside it). A prefix that cannot be resumed (no mark, a pass that read too far,
a rerun that differs, a use in the start that differs, a resumed part that reads past its
own messages or uses a value the prefix changes from inside a container, or raises) is
rendered from the start. So a resumed prefix is the prefix's render, not an estimate; the
tests hold every result to ``derive_spans_by_prefixes``.

Templates whose shape this cannot follow get no plan (``ResumePlan.build`` returns None):
no top-level ``{% for %}`` over a variable or a slice of one from a start, or over the
indexes of one (``range(first, messages | length)``: walked as the messages, ``_Counted``),
``loop.changed``, a loop filter or ``else``, recursive loops, ``cycler``/``joiner`` (state
outside namespaces), or a name the end assigns that the start assigns too. A ``break``
needs nothing: the passes after it have no marks. A template testing ``is sameas`` (which
tells a traced value from its value) is watched without traced values; so is one whose
watched render refuses a traced value (``|tojson`` of it).
"""

from __future__ import annotations

import bisect
import copy
import functools
import itertools
import math
import operator
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

import jinja2
from jinja2 import nodes
from jinja2.idtracking import VAR_LOAD_UNDEFINED, symbols_for_node
from jinja2.runtime import LoopContext
from jinja2.utils import missing

from .environment import (
    INNER_LOOP_GUARD,
    MARK_PREFIX,
    SELECTION,
    UnseenNamespace,
    loop_source,
    marker_statement,
    render_state,
)

__all__ = ["ResumePlan", "TooManyPasses", "Watch", "WatchedMessages"]

_WHOLE = 1 << 62  # "read as far as the end": a length, a negative index, a full walk
_PASS = MARK_PREFIX + "_pass"  # the render variables the marks call
_STEP = MARK_PREFIX + "_step"
_WALK = MARK_PREFIX + "_walk"
_SCAN = MARK_PREFIX + "_scan"
_SCAN_WALK = MARK_PREFIX + "_scan_walk"
_COUNT = MARK_PREFIX + "_count"  # the main loop's walk of a count of the messages (_Counted)
_PRINTED = MARK_PREFIX + "_printed"  # a statement of a followed loop's prints (not yet out)
_UNSEEN = MARK_PREFIX + "_namespace"  # namespace(), for one only a followed loop reads
_ITEMS = "__chatcodec_items"
_SCAN_EFFECT = MARK_PREFIX + "_scan_effect"  # a rerun's backward scan, worked out (_Scan)
_PROBED = MARK_PREFIX + "_probed"  # the end of a probed pass (_Scan.probe)
_ONE = "__chatcodec_one"  # a probed pass's message, as a list of it alone (_Scan)
_J = "__chatcodec_j"  # a probed pass's message index (_Scan)
_GIVEN = ("messages", "add_generation_prompt")  # the inputs each prefix has its own of
# the field a probed pass of a scan that breaks sets when it does not (_Scan; no template
# can name a field so, and a namespace takes no name that starts with `_`)
_WENT_ON = "chatcodec went on"
_BROKE = object()  # in a probed pass's effects: it broke the scan
_STATEFUL = frozenset({"cycler", "joiner"})
_SCALARS = (str, int, float, bool, type(None))
_PLAIN = frozenset(_SCALARS)
# Namespaces copied over all the marks of one watched render, at most: a template that
# makes a namespace per message and has many messages, or makes thousands, is not watched
# further (its marks would cost more than rendering its prefixes)
_SNAPSHOTS = 1 << 16
_NOTHING: frozenset[int] = frozenset()  # a mark's namespaces copied anew: none
_FEW = 16  # namespaces put back all at once (_restore): cheaper than finding which changed


class GivenUp(Exception):
    """A resumed prefix read past its own messages."""


class TooManyPasses(Exception):
    """A prefix would resume so far back that a watched render of a longer prefix pays."""


class _Unknown(Exception):
    """A backward scan that its probes cannot work out on a prefix (_Scan): it runs."""


@dataclass(slots=True)
class Mark:
    """The render's state at a mark."""

    item: Any  # the pass's message, or the statement's index
    position: int  # characters out
    names: dict[str, Any]  # the template's top-level variables
    spaces: list[tuple[Any, dict[str, Any]]]  # each namespace made so far and its fields
    furthest: int  # the furthest message read so far
    reach: int  # the furthest read since the last mark of a statement
    # a pass's: the furthest read before its loop fetched its message (by the passes before
    # it, a look at this message included, and the start's last statement)
    behind: int = -1
    order: int = -1  # where it stands among the render's marks (Watch.log)


class Watch:
    """What one watched render read, and its marks."""

    def __init__(self, chat: list[Any]) -> None:
        self.chat = chat
        self.messages = WatchedMessages(chat, self)
        self.furthest = -1
        self.reach = -1
        self.limit = _WHOLE + 1  # while a prefix of k messages resumes: k
        self.passes: dict[int, Mark] = {}  # by the id of the pass's message
        self.steps: list[Mark] = []  # before each statement of the start, then the loop's
        self.spaces: list[Any] = []  # every namespace the render made, in order
        self.fields: list[dict[str, Any]] = []  # and the dict of each one's fields
        self.made: dict[int, int] = {}  # where each is in them, by id
        # the namespaces' fields as the last mark copied them (a mark copies those whose
        # fields were set since: render_state.written)
        self.copied: list[tuple[Any, dict[str, Any]]] = []
        # per mark's variables (by id: the marks keep them alive), what _entered works out
        self.entered: dict[int, tuple[dict[str, Any], list[Any], list[str], list[Any]]] = {}
        self.walked: Any = None  # what the main loop walks
        # False once a mark cannot hold the render's state: a variable or namespace field
        # holds an iterator (a filter's lazy result, whose state moves on with every read),
        # or the namespaces are too many to copy at every mark (_SNAPSHOTS). Nothing resumes.
        self.usable = True
        self.copies = _SNAPSHOTS
        # values that differ between prefixes (see _Traced): the messages' length, the flag,
        # the ints the start leaves in namespace fields (from the first statement that read
        # past the first message on); their uses are noted while the watched render runs
        self.trace = False  # whether to trace
        self.tracing = False
        self.live = True  # until the watched render ends
        self.traced: dict[int, _Traced] = {}  # by id
        # the message of the pass running; in the start, -2 - the statement's index
        self.at = -1
        # the lengths of the messages the template took (`messages | length`), traced, with
        # the pass (or statement) that first took each
        self.lengths: list[tuple[_Traced, int]] = []
        # the same, by where their messages start (a selection's: where its messages are)
        self.measures: dict[int | tuple[int, ...], _Traced] = {}
        self.replaced: dict[int, Any] = {}  # while a prefix resumes: traced values it changes
        # and, as the start run again on it leaves them, where its cut views of the messages
        # end (by id), and the fields only the end reads that it has otherwise (by the
        # namespace's index and the field's name; `missing`: unset)
        self.sizes: dict[int, int] = {}
        self.overrides: dict[tuple[int, str], Any] = {}
        self.flag: _Traced | None = None  # add_generation_prompt, when traced
        # first_changed's answers, and where each traced value's uses by a statement end
        self.ends_of: dict[int, list[int]] = {}
        self.compared: dict[int, _Compared] = {}  # Watch._compared's
        self.changed: dict[tuple[frozenset[tuple[int, Any]], frozenset[int]], int] = {}
        # the top-level loops of the start over the messages: what each walks and its marks
        # (as the main loop's), by the index of its statement
        self.scans: dict[int, tuple[Any, dict[int, Mark]]] = {}
        self.ends: dict[tuple[Any, ...], str] = {}  # the end's text, by what it can see
        self.ending: dict[Any, Any] = {}  # what ResumePlan._ending works out per mark's parts
        self.scanned: dict[tuple[int, int, int], dict[int, Any] | None] = {}  # _scanned's
        self.past: dict[int, tuple[list[tuple[int, int]], frozenset[int]]] = {}  # _reads_past's
        self.reaches: list[int] | None = None  # the statements' reaches, sorted (_reads_past)
        self.traced_in: dict[int, frozenset[int]] = {}  # _scanned's, by a mark's copies
        # per backward scan of the start (by its statement's index, and that of the first
        # statement run again with it), what each pass would do while its flag holds, by
        # message, the messages where it does anything, and for a scan that runs every pass
        # what those passes leave up to each (ResumePlan._probe); None where probes cannot
        # tell
        self.effects: dict[tuple[int, int], tuple[list[Any], list[int], list[Any]] | None] = {}
        # ResumePlan._rerun's runs tried with stand-ins, by statements and scan positions;
        # the statements whose run raised (not tried again on this render's prefixes)
        self.reruns: dict[tuple[int, ...], _Rerun | None] = {}
        self.unread_raised: set[tuple[int, int]] = set()
        # the furthest read before a walk of the messages fetched its last item (or after
        # a loop looked at its next item): at a pass's mark, what the passes before read
        self.fetched = -1
        self.given: list[Any] | None = None  # the messages _entered gave a prefix, last
        # per mark, in order, the namespaces (by index) it copied anew: between two marks,
        # only those changed; and the mark whose state the namespaces hold since the last
        # _restore, with the namespaces (by id) set since (render_state.written, untrace)
        self.log: list[set[int] | frozenset[int]] = []
        self.contents: dict[int, tuple[tuple[str, int], ...]] = {}  # Watch.content's
        self.holding: set[int] = set()  # the namespaces (by index) a mark copied a traced value of
        self.held: Mark | None = None
        self.dirty: set[int] = set()
        self.printed = 0  # the printing statements of followed loops run (_follow_inner_loops)

    def see(self, index: int) -> None:
        if index >= self.limit:
            raise GivenUp
        if index > self.furthest:
            self.furthest = index
        if index > self.reach:
            self.reach = index

    def hooks(self, globals_: dict[str, Any]) -> dict[str, Any]:
        """The render variables the watched template's marks, namespaces and ranges call
        (``globals_``: the template's own, ``namespace`` and ``range`` among them)."""
        make_namespace, make_range = globals_["namespace"], globals_["range"]

        def on_step(context: Any, index: int) -> None:
            _watching.watch = self
            if not self.steps:
                render_state.written = set()
                render_state.inner_loops = self.inner_loop
                render_state.selections = self.select
            if self.trace and (self.tracing or self.reach > 0):
                self._trace()
            self.at = -2 - index
            names = context.vars
            known = self.steps[-1].names if self.steps else {}
            # (the variables are only ever added: as many, each the same, is none assigned)
            if len(names) == len(known) and all(map(operator.is_, names.values(), known.values())):
                names = known  # no variable assigned: the last mark's
            else:
                names = dict(names)
                if self.usable:
                    self.usable = not any(
                        _iterator(value)
                        for name, value in names.items()
                        if known.get(name) is not value
                    )
            self.steps.append(self._mark(index, names))
            self.reach = -1

        def on_walk(context: Any, walked: Any) -> None:
            if isinstance(walked, WatchedMessages) and walked.__cc_at__ is not None:
                walked = None  # a selection's passes are not one per message: no prefix resumes
            if type(walked) is _TracedRange and not _counts(walked):
                walked = None
            self.walked = walked
            if isinstance(walked, (WatchedMessages, _TracedRange)):
                self.at = base_of(walked) - 1

        def on_pass(context: Any, item: Any) -> None:
            self.at += 1
            if type(self.walked) is _TracedRange:  # (a count: the pass of its message)
                item = self.chat[self.at] if 0 <= self.at < len(self.chat) else None
            # a loop's body cannot assign top-level variables: the loop's start saw them all
            self.passes[id(item)] = self._mark(item, self.steps[-1].names, self.fetched)

        def count(walked: Any) -> Any:
            # the main loop's count of the messages: walked as the messages are (_Counted)
            return _Counted(walked) if type(walked) is _TracedRange else walked

        def on_scan_walk(context: Any, walked: Any) -> None:
            self.scans[len(self.steps) - 1] = (walked, {})

        def on_print(context: Any, _: Any) -> None:
            self.printed += 1

        def on_scan(context: Any, item: Any) -> None:
            mark = self._mark(item, self.steps[-1].names, self.fetched)
            self.scans[len(self.steps) - 1][1][id(item)] = mark

        def namespace(*args: Any, **kwargs: Any) -> Any:
            return kept(make_namespace(*args, **kwargs))

        def unseen(*args: Any, **kwargs: Any) -> Any:
            return kept(UnseenNamespace(*args, **kwargs))

        def kept(space: Any) -> Any:
            self.made[id(space)] = len(self.spaces)
            self.spaces.append(space)
            self.fields.append(_fields(space))
            return space

        def counted(*args: Any) -> Any:
            # `range(i + 1, messages | length)`: a range up to a traced length (_TracedRange)
            stop = args[-1]
            if (
                len(args) <= 2
                and type(stop) is _Traced
                and stop.__cc_base__ is not None
                and all(type(arg) is int for arg in args[:-1])
            ):
                return _TracedRange(make_range(*args[:-1], stop.__cc_value__), stop, self)
            return make_range(*args)

        return {
            _STEP: on_step,
            _WALK: on_walk,
            _PASS: on_pass,
            _COUNT: count,
            _SCAN_WALK: on_scan_walk,
            _SCAN: on_scan,
            _PRINTED: on_print,
            _UNSEEN: unseen,
            "namespace": namespace,
            "range": counted,
        }

    def finish(self) -> None:
        """The watched render has ended (or raised): no more uses or reads to note."""
        self.tracing = self.live = False
        if getattr(_watching, "watch", None) is self:
            _watching.watch = None
            render_state.written = None
            render_state.inner_loops = None
            render_state.selections = None

    def inner_loop(self, iterable: Any, guard: Callable[[Any], Iterator[Any]]) -> Iterator[Any]:
        """The walk of a loop ``_follow_inner_loops`` marked (``guard`` walks an iterable
        under the render's time limit): followed (``_followed``) when it walks this render's
        messages or a range up to their traced length, else as guarded."""
        kind = type(iterable)
        if kind is WatchedMessages and iterable.__cc_watch__ is self and self.live:
            return self._followed(guard(iterable))
        if kind is _TracedRange and iterable.__cc_watch__ is self and self.live:
            return self._followed(guard(iterable.__cc_plain__), iterable)
        return guard(iterable)

    def _followed(
        self, guarded: Iterator[Any], counted: _TracedRange | None = None
    ) -> Iterator[Any]:
        """A loop's walk of the messages, whose reads after its last pass that did anything
        are forgotten once it ends. A pass does something when it prints (to the render's
        text, or a statement marked as printing where the loop's output is buffered) or
        changes a namespace's field; the passes after the last one that did are the same
        passes on the same state in the render of any prefix that holds the messages read
        until then, and do nothing there either, whether they run or the walk ends before
        them: the loop leaves the same state. (Marks only sit between a loop's walks, at
        top-level statements and passes of the main loop.) A range up to the messages'
        traced length (``counted``) notes, likewise, that a prefix must reach past the last
        index whose pass did anything."""
        state = render_state
        kept = (self.reach, self.furthest)  # the reads to keep: those until the last change
        seen = (state.position, state.changes, self.printed)
        walk = iter(guarded)
        item = done = None  # the item walked last, and the last whose pass did anything
        while True:
            now = (state.position, state.changes, self.printed)
            if now != seen:  # the pass before this fetch did something
                kept, seen, done = (self.reach, self.furthest), now, item
            try:
                item = next(walk)
            except StopIteration:
                break
            if counted is not None:
                counted.walked(item)
            yield item
        # (a loop that breaks never gets here: its reads all count, and its walk so far)
        self.reach, self.furthest = kept
        if counted is not None:
            counted.walked(done)

    def _trace(self) -> None:
        """Trace every int the start left in a namespace's field (not in a top-level
        variable: the compiled template reads its own local copy of those)."""
        for space in self.spaces:
            fields = _fields(space)
            for name, value in fields.items():
                if type(value) is int:
                    fields[name] = self.traced_value(value)
                    if render_state.written is not None:
                        render_state.written.add(id(space))
        self.tracing = True

    def trace_flag(self, flag: bool) -> _Traced:
        """``add_generation_prompt`` for the watched render, traced from the start: a prefix
        with the other flag resumes at the first pass that uses it otherwise."""
        self.flag = self.traced_value(flag)
        self.tracing = True
        return self.flag

    def traced_value(self, value: Any) -> _Traced:
        traced = _Traced(value, self)
        self.traced[id(traced)] = traced
        return traced

    def first_changed(
        self, values: dict[int, Any], last: int, rerun: frozenset[int] = frozenset()
    ) -> int:
        """The first pass, up to the pass of message ``last``, that traced values with
        other values (``values``: by the id of the _Traced) would have run otherwise: the
        pass of the first use that is not a comparison giving the same result with them;
        -1 for such a use in a statement of the start, but those in ``rerun`` (statements
        run again on the prefix)."""
        # the first such use of all the passes does not depend on the prefix: worked out
        # once per set of values (a scan's index is the same for the prefixes of a turn)
        key = (frozenset(values.items()), rerun)
        first = self.changed.get(key)
        if first is None:
            first = _WHOLE
            for traced in values:
                uses = self.traced[traced].__cc_uses__
                after = self._statement_ends(traced, uses)
                at, size = 0, len(uses)
                while at < size:
                    use = uses[at]
                    if use.at >= -1:
                        break  # (the passes' uses follow the start's)
                    if -2 - use.at in rerun:  # (a scan's uses, one per pass: skipped)
                        at = after[at]
                        continue
                    if not use.holds(values):
                        first = -1
                        break
                    at += 1
                if first < 0:
                    break
                # the passes' comparisons with an int: looked up; the other uses in turn
                compared = self._compared(traced, at)
                found = compared.first_changed(values[traced], uses, values)
                if found is None:
                    positions: Any = range(at, size)
                else:
                    positions, first = compared.others, min(first, found)
                for at in positions:
                    use = uses[at]
                    if use.at >= first:
                        break
                    if not use.holds(values):
                        first = use.at
                        break
            self.changed[key] = first
        return min(first, last)

    def _compared(self, traced: int, start: int) -> _Compared:
        """The uses of a traced value from ``start`` on (its passes'), indexed (_Compared)."""
        found = self.compared.get(traced)
        if found is None:
            root = self.traced[traced]
            found = self.compared[traced] = _Compared(root, root.__cc_uses__, start)
        return found

    def _statement_ends(self, traced: int, uses: list[_Use]) -> list[int]:
        """For each use of a traced value in the start, where the uses of the next
        statement begin (the uses come in the order the render made them)."""
        found = self.ends_of.get(traced)
        if found is None:
            found = list(range(1, len(uses) + 1))
            for at in range(len(uses) - 2, -1, -1):
                if uses[at].at < -1 and uses[at + 1].at == uses[at].at:
                    found[at] = found[at + 1]
            self.ends_of[traced] = found
        return found

    def measured(self, view: WatchedMessages) -> _Traced:
        """``view | length``, traced: a prefix has its own. One traced value per view's
        start (or selection's messages): its uses are all the uses of that length."""
        base, at = base_of(view), view.__cc_at__
        key = base if at is None else at
        length = self.measures.get(key)
        if length is None:
            length = self.measures[key] = self.traced_value(list.__len__(view))
            length.__cc_base__ = base
            length.__cc_at__ = at
            self.lengths.append((length, self.at))
            self.tracing = True
        return length

    def select(
        self, value: Any, choose: Callable[[list[Any]], list[Any]]
    ) -> WatchedMessages | None:
        """``value | selectattr(...) | list`` (or ``rejectattr``, ``select``, ``reject``;
        ``choose`` runs them on a list) where ``value`` is this render's messages or a view
        of them: the messages chosen, as a view that notes a read of each at its place in
        the conversation (``__cc_at__``). The filter tests each message alone, so a prefix's
        own choice is the view's messages before it (``prefix_of``): choosing reads none of
        them. (What the test reads besides is noted as any read: a traced value it compares,
        a watched list it looks in.) None otherwise: the filters then run as written."""
        if (
            type(value) is not WatchedMessages
            or value.__cc_watch__ is not self
            or not self.live
            or value.__cc_cut__
        ):
            return None
        items = list(list.__iter__(value))
        chosen = choose(items)  # (some of the items, in their order)
        at: list[int] = []
        for place, item in zip(_places(value), items, strict=False):  # (places may count on)
            if len(at) < len(chosen) and chosen[len(at)] is item:
                at.append(place)
        return WatchedMessages(chosen, self, 0, tuple(at))

    def lengths_of(self, k: int, values: dict[int, Any]) -> dict[int, Any]:
        """``values`` and the traced lengths taken before the pass of message ``k`` as
        the render of the first ``k`` messages has them."""
        if not self.lengths or k >= len(self.chat):
            return values
        values = dict(values)
        for length, at in self.lengths:
            if at >= k:
                break
            chosen = length.__cc_at__
            values[id(length)] = (
                max(0, k - (length.__cc_base__ or 0))
                if chosen is None
                else bisect.bisect_left(chosen, k)
            )
        return values

    def untrace(self, spaces: list[tuple[Any, dict[str, Any]]], values: dict[int, Any]) -> None:
        """Put plain values in the namespaces' traced fields: ``values``' where given."""
        for at in self.holding:
            if at < len(spaces):
                space, fields = spaces[at]
                for name, value in fields.items():
                    if type(value) in _TRACING:
                        _fields(space)[name] = _value(value, values)
                        self.dirty.add(id(space))

    def content(self, copy: dict[str, Any]) -> tuple[tuple[str, int], ...]:
        """A mark's copy of a namespace's fields as their names and the ids of their values
        (a copy is kept as long as the marks, and shared by the marks that follow it until
        the namespace is set again: worked out once)."""
        found = self.contents.get(id(copy))
        if found is None:
            found = self.contents[id(copy)] = tuple(zip(copy, map(id, copy.values()), strict=False))
        return found

    def traced_fields(
        self, spaces: list[tuple[Any, dict[str, Any]]], among: tuple[int, ...] | None = None
    ) -> list[tuple[str, Any]]:
        """The traced values in the namespaces' fields at a mark (``spaces``; ``among``:
        those of these alone), by name (a field holding one shifted: the traced value it is
        shifted from)."""
        return [
            (name, value.__cc_root__ if type(value) is _Shifted else value)
            for at in (self.holding if among is None else self.holding.intersection(among))
            if at < len(spaces)
            for name, value in spaces[at][1].items()
            if type(value) in _TRACING
        ]

    def _mark(self, item: Any, names: dict[str, Any], behind: int = -1) -> Mark:
        state = render_state
        # (written: set by the render's first mark, on_step)
        fresh: set[int] | frozenset[int]
        if state.written or len(self.copied) != len(self.spaces):
            fresh = self._copy_fields(state.written)  # type: ignore[arg-type]
        else:
            fresh = _NOTHING  # the last mark's copies
        log = self.log
        log.append(fresh)
        spaces = self.copied if self.usable else []  # (not usable: nothing will resume)
        return Mark(
            item, state.position, names, spaces, self.furthest, self.reach, behind, len(log) - 1
        )

    def _copy_fields(self, written: set[int]) -> set[int]:
        """Copy the fields of the namespaces set or made since the last mark (their
        indexes, returned); the others keep the last mark's copies."""
        spaces = self.copied
        old = len(spaces)
        fresh = {self.made[key] for key in written if key in self.made}
        fresh.update(range(old, len(self.spaces)))
        copied = spaces + [(space, {}) for space in self.spaces[old:]]
        for at in fresh:
            fields = self.fields[at]
            self.copies -= 1
            copied[at] = (self.spaces[at], dict(fields))
            values = fields.values()  # (plain values, the most, tested by type in C first)
            if self.traced and not _TRACING.isdisjoint(map(type, values)):
                self.holding.add(at)
            if self.usable and not _NOT_ITERATORS.issuperset(map(type, values)):
                self.usable = not any(map(_iterator, values))
        written.clear()
        self.copied = copied
        if self.copies < 0:
            self.usable = False
        return fresh


def _iterator(value: Any) -> bool:
    """Whether ``value``, or an item of a list or tuple it is, is an iterator (the messages'
    watched lists hold messages, and reading them would count as a read)."""
    kind = type(value)
    if kind in _NOT_ITERATORS:
        return False
    if kind is list or kind is tuple:
        return any(
            type(item) not in _NOT_ITERATORS and isinstance(item, Iterator) for item in value
        )
    return isinstance(value, Iterator)


def _fields(space: Any) -> dict[str, Any]:
    # jinja's Namespace keeps its fields in one private dict (jinja2 is pinned in pyproject)
    fields: dict[str, Any] = space._Namespace__attrs
    return fields


def _restore(watch: Watch, mark: Mark) -> None:
    """Put every namespace's fields back as they were at ``mark`` (the namespaces made
    after it are left as they are: a resumed part makes its own). Only those that differ
    are: the namespaces set since the last restore, and those the render copied anew at a
    mark between the one restored then and this one (the others' copies are the same)."""
    held, spaces, known = watch.held, mark.spaces, watch.fields
    if held is None or len(spaces) <= _FEW:
        changed: Any = range(len(spaces))
    else:
        low, high = sorted((held.order, mark.order))
        changed = set().union(*watch.log[low + 1 : high + 1])
        made = watch.made
        changed.update(made[key] for key in watch.dirty if key in made)
    for at in changed:
        if at < len(spaces) and at < len(known):
            kept = known[at]
            kept.clear()
            kept.update(spaces[at][1])
    watch.held = mark
    watch.dirty.clear()


@dataclass(slots=True)
class _Use:
    """A use of a traced value in a pass: ``op(left, right)`` gave ``result``; ``op`` is
    None for a use whose result is not a truth value (arithmetic, text, an index)."""

    at: int  # the message of the pass
    op: Callable[[Any, Any], Any] | None
    left: Any
    right: Any
    result: Any

    def holds(self, values: dict[int, Any]) -> bool:
        """Whether the use gives the same result with the traced values ``values``."""
        if self.op is None:
            return False
        try:
            return bool(
                self.op(_value(self.left, values), _value(self.right, values)) == self.result
            )
        except Exception:  # noqa: BLE001 - another outcome
            return False


_ORDERS = frozenset({operator.lt, operator.le, operator.gt, operator.ge})
_EQUALITIES = frozenset({operator.eq, operator.ne})


class _Compared:
    """The uses of one traced int in the passes, from ``start`` on, with those that compare
    it with an int (``op(value + shift, x)``: a pass's index against the messages' length
    less one, the index of the last user query against a pass's) indexed by that int, less
    the shift. Another value changes such a use only where the int lies between the two
    values, or is either: every ``<``, ``<=``, ``>``, ``>=`` strictly between them, some
    of those and every ``==``, ``!=`` at either. The first pass another value changes is
    then looked up, not found by replaying every use before it (as many as the passes, for
    each prefix); the other uses are replayed in turn."""

    def __init__(self, root: _Traced, uses: list[_Use], start: int) -> None:
        self.value = root.__cc_value__
        self.others: list[int] = []  # the positions of the other uses, in order
        self.at: dict[int, list[int]] = {}  # those of the comparisons, by their int
        ordered: list[tuple[int, int]] = []  # (int, position) of the order comparisons
        for position in range(start, len(uses)):
            use = uses[position]
            op, other, shift = use.op, use.right, 0
            if isinstance(op, functools.partial) and op.func is _shifted:
                op, shift = op.args
            if (
                use.left is not root
                or type(other) is not int
                or type(shift) is not int
                or not (op in _ORDERS or op in _EQUALITIES)
            ):
                self.others.append(position)
                continue
            self.at.setdefault(other - shift, []).append(position)
            if op in _ORDERS:
                ordered.append((other - shift, position))
        ordered.sort()
        self.ints = [x for x, _ in ordered]
        # the least position over each run of 2**j order comparisons (by their int)
        self.least = [[position for _, position in ordered]]
        width = 1
        while 2 * width <= len(ordered):
            row = self.least[-1]
            self.least.append([min(row[i], row[i + width]) for i in range(len(row) - width)])
            width *= 2

    def first_changed(self, value: Any, uses: list[_Use], values: dict[int, Any]) -> int | None:
        """The pass of the first comparison with an int that ``value`` changes (_WHOLE for
        none); None when it is not an int (every use is then replayed in turn)."""
        if type(value) is not int or type(self.value) is not int:
            return None
        if value == self.value:
            return _WHOLE
        low, high = min(value, self.value), max(value, self.value)
        best = _WHOLE  # a position
        start = bisect.bisect_right(self.ints, low)
        stop = bisect.bisect_left(self.ints, high)
        if start < stop:  # (strictly between: changed)
            row = (stop - start).bit_length() - 1
            least = self.least[row]
            best = min(least[start], least[stop - (1 << row)])
        for position in sorted(self.at.get(low, []) + self.at.get(high, [])):
            if position >= best:
                break
            if not uses[position].holds(values):
                best = position
                break
        return uses[best].at if best < _WHOLE else _WHOLE


def _value(operand: Any, values: dict[int, Any]) -> Any:
    """What ``operand`` stands for in a prefix whose traced values are ``values``."""
    kind = type(operand)
    if kind is _Traced:
        return values.get(id(operand), operand.__cc_value__)
    if kind is _Shifted:
        return _value(operand.__cc_root__, values) + operand.__cc_shift__
    return operand


def _plain(operand: Any) -> Any:
    return operand.__cc_value__ if type(operand) in (_Traced, _Shifted) else operand


def _truth(value: Any, _: Any) -> bool:
    return bool(value)


def _compared(op: Callable[[Any, Any], Any]) -> Callable[[_Traced, Any], Any]:
    # a use whose result another value can replay
    def compare(self: _Traced, other: Any) -> Any:
        result = op(self.__cc_value__, _plain(other))
        self.__cc_use__(op, other, result)
        return result

    return compare


def _opaque(op: Callable[..., Any], reflected: bool = False) -> Callable[..., Any]:
    # a use whose result another value cannot replay: arithmetic, text, an index
    def use(self: _Traced, *others: Any) -> Any:
        self.__cc_use__(None, None, None)
        if reflected:
            return op(_plain(others[0]), self.__cc_value__)
        return op(self.__cc_value__, *map(_plain, others))

    return use


def _shifted(op: Callable[[Any, Any], Any], shift: int, value: Any, other: Any) -> Any:
    return op(value + shift, other)


def _shift(sign: int) -> Callable[[Any, Any], Any]:
    # `x + 1`, `1 + x`, `x - 1` of a traced int in a pass: a _Shifted; else opaque
    opaque = _opaque(operator.add if sign > 0 else operator.sub)

    def shift(self: Any, other: Any) -> Any:
        root, by = (self, 0) if type(self) is _Traced else (self.__cc_root__, self.__cc_shift__)
        watch = root.__cc_watch__
        if (
            type(other) is int
            and type(root.__cc_value__) is int
            and watch.tracing
            and watch.at >= 0
        ):
            return _Shifted(root, by + sign * other)
        return opaque(self, other)

    return shift


class _StandIn:
    """What a traced value (_Traced) and a traced int shifted by a constant (_Shifted) do
    alike: behave as their value (``__cc_value__``) and note each use (``__cc_use__``)."""

    __slots__ = ()
    __cc_value__: Any

    def __cc_use__(self, op: Any, other: Any, result: Any) -> None:
        raise NotImplementedError

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # isinstance(x, int) holds, as for its value
        return type(self.__cc_value__)

    def __cc_test__(self, test: Callable[..., bool], args: tuple[Any, ...]) -> bool:
        # `is true`, `is false`, `is boolean`, `is integer`, `is sameas` (environment.py asks)
        result = test(self.__cc_value__, *args)
        self.__cc_use__(lambda value, _: test(value, *args), None, result)
        return result

    def __bool__(self) -> bool:
        result = bool(self.__cc_value__)
        self.__cc_use__(_truth, None, result)
        return result

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        self.__cc_use__(None, None, None)
        return getattr(self.__cc_value__, name)

    def __round__(self, ndigits: Any = None) -> Any:
        self.__cc_use__(None, None, None)
        return round(self.__cc_value__, ndigits)

    def __pow__(self, other: Any, mod: Any = None) -> Any:
        self.__cc_use__(None, None, None)
        return pow(self.__cc_value__, _plain(other), _plain(mod))

    __eq__ = _compared(operator.eq)  # type: ignore[assignment]
    __ne__ = _compared(operator.ne)  # type: ignore[assignment]
    __lt__ = _compared(operator.lt)
    __le__ = _compared(operator.le)
    __gt__ = _compared(operator.gt)
    __ge__ = _compared(operator.ge)
    __hash__ = _opaque(hash)  # type: ignore[assignment]
    __str__ = _opaque(str)  # type: ignore[assignment]
    __repr__ = _opaque(repr)  # type: ignore[assignment]
    __format__ = _opaque(format)  # type: ignore[assignment]
    __int__ = _opaque(int)
    __float__ = _opaque(float)
    __complex__ = _opaque(complex)
    __index__ = _opaque(operator.index)
    __trunc__ = _opaque(math.trunc)
    __floor__ = _opaque(math.floor)
    __ceil__ = _opaque(math.ceil)
    __neg__ = _opaque(operator.neg)
    __pos__ = _opaque(operator.pos)
    __abs__ = _opaque(abs)
    __invert__ = _opaque(operator.invert)
    __add__ = __radd__ = _shift(1)
    __sub__, __rsub__ = _shift(-1), _opaque(operator.sub, True)
    __mul__, __rmul__ = _opaque(operator.mul), _opaque(operator.mul, True)
    __truediv__, __rtruediv__ = _opaque(operator.truediv), _opaque(operator.truediv, True)
    __floordiv__, __rfloordiv__ = _opaque(operator.floordiv), _opaque(operator.floordiv, True)
    __mod__, __rmod__ = _opaque(operator.mod), _opaque(operator.mod, True)
    __divmod__, __rdivmod__ = _opaque(divmod), _opaque(divmod, True)
    __rpow__ = _opaque(pow, True)
    __and__, __rand__ = _opaque(operator.and_), _opaque(operator.and_, True)
    __or__, __ror__ = _opaque(operator.or_), _opaque(operator.or_, True)
    __xor__, __rxor__ = _opaque(operator.xor), _opaque(operator.xor, True)
    __lshift__, __rlshift__ = _opaque(operator.lshift), _opaque(operator.lshift, True)
    __rshift__, __rrshift__ = _opaque(operator.rshift), _opaque(operator.rshift, True)


class _Shifted(_StandIn):
    """A traced int plus or minus a constant, in a pass of the watched render (Solar's
    ``messages | length - 1``): a prefix's is its own traced value shifted alike, so a
    comparison of it is a use that value replays, as the traced value's own are."""

    __slots__ = ("__cc_value__", "__cc_root__", "__cc_shift__")

    def __init__(self, root: _Traced, shift: int) -> None:
        self.__cc_root__, self.__cc_shift__ = root, shift
        self.__cc_value__ = root.__cc_value__ + shift

    def __cc_use__(self, op: Any, other: Any, result: Any) -> None:
        if op is not None:
            op = functools.partial(_shifted, op, self.__cc_shift__)
        self.__cc_root__.__cc_use__(op, other, result)


class _Traced(_StandIn):
    """An int or bool of a render (the messages' length, a namespace field the start left,
    the generation prompt's flag) that notes its every use in a watched render.

    The start's scan for the last user query leaves a prefix another index than the whole
    conversation; the passes before the prefix's last messages compare it with their own
    index and do the same with either value. A traced value behaves as its value (it
    reports its value's class, so ``is number`` and ``is integer`` hold, and answers ``is
    true`` and the like through environment.py) and notes, for each use, the pass and
    whether the use was a comparison (or a truth test) and its result. Anything else
    (arithmetic, its text, an index, ``|tojson``'s refusal) is a use no other value can
    replay. A prefix with other values resumes at the first pass whose uses would differ.
    While a prefix resumes, a traced value left inside a container (where ``untrace`` does
    not reach) refuses any use if the prefix's value differs.
    """

    __slots__ = ("__cc_value__", "__cc_watch__", "__cc_uses__", "__cc_base__", "__cc_at__")

    def __init__(self, value: int | bool, watch: Watch) -> None:
        self.__cc_value__ = value
        self.__cc_watch__ = watch
        self.__cc_uses__: list[_Use] = []
        self.__cc_base__: int | None = None  # a length of the messages: where they start
        # a length of a selection of them (Watch.select): where its messages are placed
        self.__cc_at__: tuple[int, ...] | None = None

    def __cc_use__(self, op: Any, other: Any, result: Any) -> None:
        watch = self.__cc_watch__
        if watch.tracing:
            use = _Use(watch.at, op, self, other, result)
            self.__cc_uses__.append(use)
            partner = other.__cc_root__ if type(other) is _Shifted else other
            if type(partner) is _Traced and partner is not self:
                partner.__cc_uses__.append(use)
            if op is None and watch.at < -1 and self.__cc_base__ is not None:
                # a statement of the start that computes with the messages' length reads
                # them all: it runs again on each prefix
                watch.see(_WHOLE)
        elif id(self) in watch.replaced:
            raise GivenUp  # a resumed prefix's value differs: rendered from the start


class _Used(BaseException):
    """A rerun of statements of the start, tried with stand-ins for the prefix's own inputs
    (_Unread), used one: what it leaves may depend on them. (No Exception: code that turns
    any exception into an answer, as jinja's ``is sequence`` does, must not answer it.)"""


def _used(*_: Any) -> Any:
    raise _Used


class _Unread:
    """A stand-in for an int or bool of a prefix's own (its messages' length, its flag) in a
    rerun of statements of the start tried for every prefix that shares what else the rerun
    reads (ResumePlan._rerun): any use raises _Used, but adding or subtracting an int, which
    stands in for the result. It reports its value's class (``is number`` holds, as for the
    value), answers no test (environment.py asks ``__cc_test__``) and is no int to C code (an
    index, ``range``, ``%d`` ask ``__index__``)."""

    __slots__ = ("__cc_value__",)

    def __init__(self, value: int | bool) -> None:
        self.__cc_value__ = value

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        return type(self.__cc_value__)

    def __add__(self, other: Any) -> _Unread:
        if type(other) is not int:
            raise _Used
        return _Unread(self.__cc_value__ + other)

    __radd__ = __add__

    def __sub__(self, other: Any) -> _Unread:
        if type(other) is not int:
            raise _Used
        return _Unread(self.__cc_value__ - other)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        raise _Used

    __cc_test__ = __bool__ = __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _used
    __hash__ = __str__ = __repr__ = __format__ = __int__ = __float__ = __complex__ = _used
    __index__ = __round__ = __trunc__ = __floor__ = __ceil__ = __neg__ = __pos__ = _used
    __abs__ = __invert__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _used
    __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = __divmod__ = __rdivmod__ = _used
    __pow__ = __rpow__ = __and__ = __rand__ = __or__ = __ror__ = __xor__ = __rxor__ = _used
    __lshift__ = __rlshift__ = __rshift__ = __rrshift__ = _used


class _UnreadMessages:
    """The first ``size`` messages in a rerun tried with stand-ins (_Unread): ``| length``
    stands in for their length, the start's probed scans take them as the prefix's
    (``_scan_effect``), and any other use raises _Used. No list: C code that reads a list's
    items without asking it cannot read these."""

    __slots__ = ("size",)

    def __init__(self, size: int) -> None:
        self.size = size

    def __cc_length__(self) -> _Unread:
        return _Unread(self.size)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        raise _Used

    __cc_test__ = __len__ = __iter__ = __reversed__ = __getitem__ = __contains__ = _used
    __bool__ = __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __hash__ = _used
    __str__ = __repr__ = __format__ = __add__ = __radd__ = __mul__ = __rmul__ = _used


class _TracedRange:
    """``range(start, stop)`` where ``stop`` is the messages' traced length (``stop`` is
    then a prefix's own). A loop a watched render follows walks it as its plain range and
    notes a use a prefix's length can replay: that the length passes the last index
    walked whose pass did anything (Watch._followed), the length of a prefix being at most
    the whole one's. Anything else done with it is a use no other length replays, then
    done with the plain range."""

    # (a template reads no attribute of its own: only the plain range's, as a use)
    __slots__ = ("__cc_plain__", "__cc_stop__", "__cc_watch__", "__cc_use__")

    def __init__(self, plain: range, stop: _Traced, watch: Watch) -> None:
        self.__cc_plain__, self.__cc_stop__, self.__cc_watch__ = plain, stop, watch
        self.__cc_use__: _Use | None = None

    def walked(self, index: int | None) -> None:
        """The walk reached ``index`` (None: none that counts)."""
        use = self.__cc_use__
        if use is None:
            if index is None:
                return
            stop = self.__cc_stop__
            stop.__cc_use__(operator.gt, index, True)
            uses = stop.__cc_uses__
            if not uses or uses[-1].right is not index:
                return  # (not tracing)
            self.__cc_use__ = use = uses[-1]
        use.right = -1 if index is None else index

    def _opaque(self) -> range:
        self.__cc_stop__.__cc_use__(None, None, None)
        return self.__cc_plain__

    def __iter__(self) -> Iterator[int]:
        return iter(self._opaque())

    def __reversed__(self) -> Iterator[int]:
        return reversed(self._opaque())

    def __len__(self) -> int:
        return len(self._opaque())

    def __getitem__(self, key: Any) -> Any:
        return self._opaque()[key]

    def __contains__(self, value: Any) -> bool:
        return value in self._opaque()

    def __bool__(self) -> bool:
        return bool(self._opaque())

    def __eq__(self, other: Any) -> bool:
        return self._opaque() == (other._opaque() if type(other) is _TracedRange else other)

    def __hash__(self) -> int:
        return hash(self._opaque())

    def __repr__(self) -> str:
        return repr(self._opaque())

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._opaque(), name)


def _counts(walked: _TracedRange) -> bool:
    """Whether a traced range (``range(a, b)``: step 1, up to a length of the messages or
    of a view of them) counts messages, not a selection of them."""
    return walked.__cc_stop__.__cc_at__ is None


class _Counted:
    """The main loop's walk of a count of the messages (``range(first, messages | length)``):
    fetching an index reads its message, as a walk of the messages does (WatchedMessages;
    ``loop.length`` fetches them all)."""

    __slots__ = ("__cc_range__",)

    def __init__(self, walked: _TracedRange) -> None:
        self.__cc_range__ = walked

    def __iter__(self) -> Iterator[int]:
        walked = self.__cc_range__
        watch, base = walked.__cc_watch__, walked.__cc_stop__.__cc_base__ or 0
        for index in walked.__cc_plain__:
            at = base + index
            reach = watch.fetched = watch.reach  # (as WatchedMessages.__iter__)
            if at > watch.furthest:
                watch.furthest = at
            if at > reach:
                watch.reach = at
            yield index


_TRACING = frozenset({_Traced, _Shifted})  # the values a mark's copies hold traced
# what else a field the end reads may hold for its text to be kept by the field's id:
# a traced value, or unset
_KEYED = _TRACING | {type(missing)}
# types _iterator answers at once (a traced value would ask its class, an ABC check)
_NOT_ITERATORS = frozenset({str, int, float, bool, type(None), dict, _Traced, _Shifted})


class WatchedMessages(list):  # type: ignore[type-arg]
    """The conversation's messages, noting the furthest message a template read.

    Every read of a plain list goes through these methods (the sandbox refuses the ones
    that change a list). A template sees nothing a plain list does not have: the watch,
    where a view made by ``messages[i:]`` starts, and where the messages of a selection
    (``Watch.select``) are placed are in dunder slots (attributes a template cannot read,
    as it cannot read any ``__name__`` of a list), the helpers are functions.
    """

    __slots__ = ("__cc_watch__", "__cc_base__", "__cc_at__", "__cc_cut__")

    def __init__(
        self,
        items: list[Any],
        watch: Watch,
        base: int = 0,
        at: tuple[int, ...] | None = None,
        cut: bool = False,
    ) -> None:
        list.__init__(self, items)
        self.__cc_watch__ = watch
        self.__cc_base__ = base
        self.__cc_at__ = at  # a selection's: each message's place in the conversation
        # a view cut short of the end (`messages[:-1]`): a prefix's own is as long as the
        # start run again on it leaves it (Watch.sizes)
        self.__cc_cut__ = cut

    def __len__(self) -> int:
        _see(self, _WHOLE)
        return list.__len__(self)

    def __bool__(self) -> bool:
        size = list.__len__(self)
        _see(self, 0 if size else _WHOLE)
        return size > 0

    def __cc_length__(self) -> Any:
        # `messages | length` (environment.py asks): while the watched render runs, a traced
        # value (a macro of it may run in a resumed prefix, where it is a read of them all)
        watch = self.__cc_watch__
        if watch.trace and watch.live and not self.__cc_cut__:
            return watch.measured(self)
        return len(self)

    def __iter__(self) -> Iterator[Any]:
        watch = self.__cc_watch__
        for at, item in zip(_places(self), list.__iter__(self), strict=False):
            # Watch.see, inlined (a walk reads every message in turn), after noting what
            # the reads before this item's reached
            reach = watch.fetched = watch.reach
            if at >= watch.limit:
                raise GivenUp
            if at > watch.furthest:
                watch.furthest = at
            if at > reach:
                watch.reach = at
            yield item
        _see(self, _WHOLE)

    def __reversed__(self) -> Iterator[Any]:
        _see(self, _WHOLE)
        return list.__reversed__(self)

    def __getitem__(self, key: Any) -> Any:
        if type(key) is int and 0 <= key < list.__len__(self):
            _see(self, key)
            return list.__getitem__(self, key)
        if type(key) is slice and key.step in (None, 1):
            start, stop = key.start or 0, key.stop
            if type(start) is int and 0 <= start:
                kept = list.__getitem__(self, key)
                at, base, cut = self.__cc_at__, self.__cc_base__ + start, self.__cc_cut__
                if stop is None:
                    if at is not None:
                        return WatchedMessages(kept, self.__cc_watch__, 0, at[start:])
                    return WatchedMessages(kept, self.__cc_watch__, base, None, cut)
                if type(stop) is int and stop < 0 and at is None:
                    # (where it ends depends on how many there are: a read of them all)
                    _see(self, _WHOLE)
                    return WatchedMessages(kept, self.__cc_watch__, base, None, True)
        _see(self, _WHOLE)
        return list.__getitem__(self, key)

    def _whole(name: str) -> Callable[..., Any]:  # type: ignore[misc]  # noqa: N805
        method = getattr(list, name)

        def read_all(self: WatchedMessages, *args: Any, **kwargs: Any) -> Any:
            _see(self, _WHOLE)
            return method(self, *args, **kwargs)

        read_all.__name__ = name
        return read_all

    # each reads every message (C code reading a list's items directly, bypassing __iter__)
    __contains__ = _whole("__contains__")
    __eq__ = _whole("__eq__")
    __ne__ = _whole("__ne__")
    __lt__ = _whole("__lt__")
    __le__ = _whole("__le__")
    __gt__ = _whole("__gt__")
    __ge__ = _whole("__ge__")
    __add__ = _whole("__add__")
    __mul__ = _whole("__mul__")
    __rmul__ = _whole("__rmul__")
    __repr__ = _whole("__repr__")
    __str__ = _whole("__str__")
    __format__ = _whole("__format__")
    __reduce_ex__ = _whole("__reduce_ex__")
    __sizeof__ = _whole("__sizeof__")
    index = _whole("index")
    count = _whole("count")
    copy = _whole("copy")
    __hash__ = None  # type: ignore[assignment]

    def __radd__(self, other: Any) -> Any:  # `[x] + messages` would read the items in C
        _see(self, _WHOLE)
        return NotImplemented if not isinstance(other, list) else list(other) + list(self)

    del _whole


def _see(view: WatchedMessages, index: int) -> None:
    at = view.__cc_at__
    if index >= _WHOLE:
        view.__cc_watch__.see(_WHOLE)
    else:
        view.__cc_watch__.see(view.__cc_base__ + index if at is None else at[index])


def _places(view: WatchedMessages) -> Any:
    """Where each of a watched list's messages is in the conversation."""
    at = view.__cc_at__
    return itertools.count(view.__cc_base__) if at is None else at


def base_of(view: WatchedMessages | _TracedRange) -> int:
    """Where a watched view made by ``messages[i:]`` starts in the conversation (a count
    of the messages: the message of its first index)."""
    if isinstance(view, _TracedRange):
        return (view.__cc_stop__.__cc_base__ or 0) + view.__cc_plain__.start
    return view.__cc_base__  # type: ignore[no-any-return]


def prefix_of(view: WatchedMessages | _TracedRange, k: int) -> list[Any]:
    """A watched list as the render of the first ``k`` messages has it (a cut view of
    fewer than all: as the start run again on them left it, else GivenUp; a count of the
    messages: its indexes)."""
    if isinstance(view, _TracedRange):
        first = view.__cc_plain__.start
        return list(range(first, max(first, k - (view.__cc_stop__.__cc_base__ or 0))))
    at = view.__cc_at__
    if at is not None:
        size = bisect.bisect_left(at, k)
    elif view.__cc_cut__:
        watch = view.__cc_watch__
        end = watch.sizes.get(id(view))
        if end is None:
            if k < len(watch.chat):
                raise GivenUp
            return list(list.__iter__(view))
        size = end - view.__cc_base__
    else:
        size = max(0, k - view.__cc_base__)
    return list.__getitem__(view, slice(0, size))


_watching = threading.local()  # the watch of the watched render running


def _watched_loop(*args: Any) -> LoopContext:
    # Stands for LoopContext in the watched template: jinja's own loop object (the sandbox
    # knows its type), whose look at the next item (`loop.last`, `loop.nextitem`) counts as
    # a read before the next pass's (see Watch.fetched)
    loop = LoopContext(*args)
    peek = loop._peek_next

    def peek_next() -> Any:
        fresh = loop._after is missing
        after = peek()
        watch = getattr(_watching, "watch", None)
        if fresh and watch is not None:
            watch.fetched = watch.reach
        return after

    loop._peek_next = peek_next  # type: ignore[method-assign]
    return loop


_pending = threading.local()  # the loop context the next resumed pass starts with


def _resumed_loop(iterable: Any, *args: Any) -> Any:
    # Stands for LoopContext in the compiled body template: its own loop (over the one-item
    # list made for the pass) gets the context prepared for it, loops nested in the body a
    # new one as usual
    start = getattr(_pending, "start", None)
    if start is not None and iterable is start[0]:
        return start[1]
    return LoopContext(iterable, *args)


@dataclass
class _Rerun:
    """What statements of the start left when run again on a prefix's messages."""

    text: str
    assigned: dict[str, Any]  # the variables they assigned
    made: list[Any]  # the namespaces they made
    fields: list[dict[str, Any]]  # the fields of every namespace: made before, then by them
    # the prefix's own inputs they saw (`messages`, the flag), where no statement before
    # assigned those names
    given: dict[str, Any] = field(default_factory=dict)
    # a run with stand-ins whose last statement is a scan (_rerun_unread): the namespace
    # it sets (its place in ``fields``), the scan and its probes, put on each prefix's own
    scanned: tuple[int, _Scan, Any, dict[str, Any], frozenset[int]] | None = None
    # the fields with the scan put on, by the scan's stop among the probes (_scanned_onto)
    placed: dict[int, list[dict[str, Any]] | None] = field(default_factory=dict)

    def changes(
        self,
        before: Mark,
        after: Mark,
        text: str,
        k: int,
        values: dict[int, Any],
        free: frozenset[str] = frozenset(),
        overrides: dict[tuple[int, str], Any] | None = None,
    ) -> dict[int, Any] | None:
        """The traced values (by id) that the rerun left another int, where the whole
        render left them between ``before`` and ``after``; None unless everything else is
        the same: the text, variables and namespace fields (by type and value), but the
        fields named in ``free`` (which only the end reads: their values are put in
        ``overrides``), and a cut view of the messages left shorter (Watch.sizes). A
        traced value the rerun kept from before it stands for its value in the prefix
        (``values``' when given)."""
        if self.text != text[before.position : after.position]:
            return None
        created = after.spaces[len(before.spaces) :]
        if len(self.made) != len(created):
            return None
        pairs = {id(new): old for new, (old, _) in zip(self.made, created, strict=True)}
        found: dict[int, Any] = {}
        pairings = [
            (at, fields, whole)
            for at, (fields, (_, whole)) in enumerate(zip(self.fields, after.spaces, strict=True))
        ]
        if self.assigned or before.names is not after.names:  # else the same variables
            names = dict(before.names, **self.assigned)
            for name in self.given.keys() - names.keys():  # (still the prefix's own)
                if name in after.names:
                    names[name] = self.given[name]
            pairings.append((-1, names, after.names))
        for at, mine, whole in pairings:
            if mine is whole:  # a mark's copies, shared by the next mark
                continue
            if mine.keys() != whole.keys():
                if at < 0 or overrides is None or not free.issuperset(mine.keys() ^ whole.keys()):
                    return None
                for name in whole.keys() - mine.keys():
                    overrides[at, name] = missing
            for name, value in mine.items():
                was = whole.get(name, missing)
                if value is not was:
                    value = _value(value, values)
                if was is missing or not _same(value, was, pairs, k):
                    if type(was) is _Traced and type(value) is type(was.__cc_value__):
                        found[id(was)] = value
                    elif at >= 0 and name in free and overrides is not None:
                        overrides[at, name] = value
                    else:
                        return None
        return found


def _last_within(watch: Watch, first: int, last: int, bound: int) -> int | None:
    """The last pass from ``first`` to ``last`` whose mark came before any read of message
    ``bound`` or later (the reaches of the main loop's marks only grow); None when even the
    first one's did not, or a pass has no mark."""

    def reach(index: int) -> int | None:
        item = watch.chat[index]
        mark = watch.passes.get(id(item))
        return None if mark is None or mark.item is not item else mark.reach

    reached = reach(first)
    if reached is None or reached >= bound:
        return None
    low, high = first, last
    while low < high:
        middle = (low + high + 1) // 2
        reached = reach(middle)
        if reached is None:
            return None
        if reached < bound:
            low = middle
        else:
            high = middle - 1
    return low


def _marks_before(watch: Watch, n: int, bound: int) -> tuple[int, Mark, Mark | None] | None:
    """Where the render of a prefix whose main loop walks its messages up to message ``n``
    (reading none from ``bound`` on) can take the watched render's state: the last pass
    whose mark came before any read of message ``bound`` or later, and its mark (before
    the loop, when the loop walks none of them: the loop statement's), and the mark of
    message ``n``'s pass when the passes before it read nothing past the prefix (the
    prefix's render then ends there: its end alone). None when there is none."""
    chat, walked = watch.chat, watch.walked
    base = base_of(walked)
    last = n - 1
    if n > base:
        item = chat[last]
        mark = watch.passes.get(id(item))
        if mark is None or mark.item is not item:
            return None
        if mark.reach >= bound:  # a pass before read message n (a look ahead): before it
            found = _last_within(watch, base, last, bound)
            if found is None:
                return None
            last = found
            mark = watch.passes[id(chat[last])]
    elif n == base and n < len(chat):  # the loop walks none of the prefix's messages
        mark = watch.steps[-1]  # (before the loop: what the start read)
    else:
        return None
    ended = None
    if last == n - 1 and n < len(chat):
        after = watch.passes.get(id(chat[n]))
        if after is not None and after.item is chat[n] and after.behind < bound:
            ended = after
    return last, mark, ended


def _reads_past(watch: Watch, k: int) -> tuple[list[tuple[int, int]], frozenset[int]]:
    """The runs of consecutive statements of the start (first, stop) that read message
    ``k`` or later in the watched render, and those statements. The same for every ``k``
    between two of the statements' reaches: worked out once for each such range."""
    ordered = watch.reaches
    if ordered is None:
        ordered = watch.reaches = sorted(step.reach for step in watch.steps[1:])
    key = len(ordered) - bisect.bisect_left(ordered, k)
    found = watch.past.get(key)
    if found is None:
        reaches = [step.reach for step in watch.steps[1:]]
        runs: list[tuple[int, int]] = []
        for i, reach in enumerate(reaches):
            if reach >= k:
                if runs and runs[-1][1] == i:
                    runs[-1] = (runs[-1][0], i + 1)
                else:
                    runs.append((i, i + 1))
        statements = frozenset(i for first, stop in runs for i in range(first, stop))
        found = watch.past[key] = (runs, statements)
    return found


@dataclass
class _Part:
    """Top-level statements compiled alone: what they assign that starts unset in them."""

    template: jinja2.Template
    fresh: frozenset[str]
    plain: jinja2.Template | None = None  # as written, where ``template`` works out a scan


@dataclass(repr=False, eq=False)
class ResumePlan:
    """How to resume prefix renders of one template (see the module's text)."""

    watched: jinja2.Template  # the template with its marks
    tail: jinja2.Template  # the loop (for one pass) and what follows it
    end: jinja2.Template  # what follows the loop
    end_names: frozenset[str]  # the names it reads
    unset_names: frozenset[str]  # top-level names that read as unset until assigned
    reads_flag_early: bool  # add_generation_prompt is read before the loop ends
    start: list[nodes.Node]  # the statements before the loop
    compile_tree: Callable[[nodes.Template], jinja2.Template]
    root: Any  # jinja's symbols of the whole template
    traces: bool  # whether watched renders trace int fields (see _Traced)
    watched_globals: dict[str, Any] = field(default_factory=dict)  # as renders take them
    # the namespace fields only the end reads, with the statements that set them
    end_fields: dict[str, frozenset[int]] = field(default_factory=dict)
    # the names the end reads only an attribute of (`ns.is_tool`), with those attributes
    end_attrs: dict[str, frozenset[str]] = field(default_factory=dict)
    cuts: bool = False  # whether the start slices a list short of its end (`x[:-1]`)
    # what resume raises past its ``passes`` (for callers that do not import this module)
    TooManyPasses: ClassVar[type[TooManyPasses]] = TooManyPasses
    _globals: dict[str, Any] = field(default_factory=dict)
    _parts: dict[tuple[int, int], _Part | None] = field(default_factory=dict)
    _scans: dict[int, _Scan | None] = field(default_factory=dict)
    _ready_scans: dict[tuple[int, int], bool] = field(default_factory=dict)
    _macros: dict[str, nodes.Macro] = field(default_factory=dict)  # the start's, by name
    _free_fields: dict[tuple[int, int], frozenset[str]] = field(default_factory=dict)
    _unread_refused: set[tuple[int, int]] = field(default_factory=set)  # (_rerun_unread)

    @classmethod
    def build(
        cls, tree: nodes.Template, compile_tree: Callable[[nodes.Template], jinja2.Template]
    ) -> ResumePlan | None:
        """The plan for a template's parsed ``tree``; None when its shape does not allow one."""
        if any(
            n.name in _STATEFUL or n.name.startswith("__chatcodec")  # its hooks' names
            for n in tree.find_all(nodes.Name)
        ):
            return None
        if any(tree.find_all((nodes.Extends, nodes.Include, nodes.Import, nodes.FromImport))):
            return None
        if any(node.name in (INNER_LOOP_GUARD, SELECTION) for node in tree.find_all(nodes.Filter)):
            return None  # the template wrote a hook's filter: it would be followed unchecked
        found = _main_loop(tree)
        if found is None:
            return None
        index, loop, walked = found
        start, rest = tree.body[:index], tree.body[index + 1 :]
        root, end = symbols_for_node(tree), symbols_for_node(nodes.Template(rest))
        start_names = symbols_for_node(nodes.Template(start)).stores
        for name in end.stores:
            if name in start_names or _initial(end, name) != _initial(root, name):
                return None  # the end alone would not see the value the whole one sees
        reads_flag = any(
            n.name == "add_generation_prompt"
            for part in (*start, *loop.body)
            for n in part.find_all(nodes.Name)
        )
        body = nodes.For(
            copy.deepcopy(loop.target),
            nodes.Name(_ITEMS, "load"),
            copy.deepcopy(loop.body),
            [],
            None,
            False,
        )
        watched = copy.deepcopy(tree)
        main = watched.body[index]
        assert isinstance(main, nodes.For)  # (the copy of the loop _main_loop found)
        marked: list[nodes.Node] = []
        for at, node in enumerate(watched.body[: index + 1]):
            marked.append(marker_statement(_STEP, nodes.Const(at)))
            walk, mark = (_WALK, _PASS) if at == index else (_SCAN_WALK, _SCAN)
            if isinstance(node, nodes.For) and (node is main or _walks_messages(node)):
                walks = copy.deepcopy(loop_source(node))
                marked.append(marker_statement(walk, walks))  # type: ignore[arg-type]
                if node is main and not _walks_messages(node):  # (a count: _Counted)
                    _count_messages(node)
                item = nodes.Name(node.target.name, "load")  # type: ignore[attr-defined]
                node.body.insert(0, marker_statement(mark, item))
            marked.append(node)
        watched.body[: index + 1] = marked
        _follow_inner_loops(watched, main)
        _select_views(watched)
        plan = cls(
            compile_tree(watched),
            compile_tree(nodes.Template([body, *copy.deepcopy(rest)])),
            compile_tree(nodes.Template(copy.deepcopy(rest))),
            frozenset(
                name.name
                for part in rest
                for name in part.find_all(nodes.Name)
                if name.ctx == "load"
            ),
            frozenset(n for n in root.stores if _initial(root, n) == VAR_LOAD_UNDEFINED),
            reads_flag,
            copy.deepcopy(start),
            compile_tree,
            root,
            # `is sameas` tells a value from its traced stand-in
            not any(test.name == "sameas" for test in tree.find_all(nodes.Test)),
        )
        plan.tail.root_render_func.__globals__["LoopContext"] = _resumed_loop
        plan.watched.root_render_func.__globals__["LoopContext"] = _watched_loop
        plan._globals = dict(plan.tail.globals)
        plan._macros = {node.name: node for node in plan.start if isinstance(node, nodes.Macro)}
        plan.watched_globals = dict(plan.watched.globals)
        plan.end_fields = _end_fields(start, loop)
        plan.end_attrs = _attributes_read(rest)
        plan.cuts = any(_negative(cut.stop) for part in start for cut in part.find_all(nodes.Slice))
        return plan

    def context_names(self, variables: dict[str, Any]) -> dict[str, Any]:
        """What every resumed prefix of a render with ``variables`` starts its context from."""
        return dict(self._globals, **variables)

    def resume(
        self,
        watch: Watch,
        text: str,
        names: dict[str, Any],
        k: int,
        prompt: bool,
        passes: int | None = None,
    ) -> tuple[int, str] | None:
        """The render of the first ``k`` messages with ``add_generation_prompt=prompt``,
        resumed from the watched render (``text``: its text; ``names``: ``context_names``
        of the render's variables): its text up to a mark, then the template's end alone
        (at the pass on message ``k``), or the passes from the last one (or from the last
        whose mark came before a read past the prefix, or the first whose uses the prefix's
        traced values change) and the end. As the length of the part taken from ``text``
        and the text that follows it (the render is ``text[:length] + rest``). None when
        it cannot be resumed; TooManyPasses when it would run more than ``passes`` passes
        again. Runs inside a render's state (``render_state.begin``)."""
        chat, walked = watch.chat, watch.walked
        if not watch.usable or not 0 < k <= len(chat):
            return None
        if type(walked) is not WatchedMessages and type(walked) is not _TracedRange:
            return None
        # the whole conversation's render can read all of it: its prefix is itself
        bound = k if k < len(chat) else _WHOLE + 1
        flag = watch.flag
        values: dict[int, Any] = {}
        if flag is not None and prompt != flag.__cc_value__:
            values = {id(flag): prompt}
        values = watch.lengths_of(k, values)
        n = k  # the main loop walks the prefix's messages up to message n
        cut = False  # (a cut view: run again, for where the prefix's own cut ends)
        if type(walked) is WatchedMessages and walked.__cc_cut__:
            if k < len(chat):
                cut = True
            else:
                n = base_of(walked) + list.__len__(walked)  # (the whole's own)
        found = None if cut else _marks_before(watch, n, bound)
        if not cut and found is None:
            return None
        at: int | None = None
        key = None
        if found is not None and found[1].furthest < bound:  # nothing of the start runs again
            at, key, kept = self._resume_at(watch, values, n, found, prompt)
            if kept is not None:
                return kept
        # (the namespaces set while it resumes, where _restore puts back only those)
        written = render_state.written
        render_state.written = watch.dirty if len(watch.spaces) > _FEW else None
        try:
            rerun: frozenset[int] = frozenset()
            if cut:
                runs, rerun = _reads_past(watch, k)  # (the cut read them all)
                changed = self._rerun_start(watch, text, names, k, prompt, values, runs)
                size = watch.sizes.get(id(walked))
                if changed is None or size is None:
                    return None
                values, n = changed, size
                bound = n  # (what its passes read of the view is there up to n)
                if not _reads_past(watch, n)[1] <= rerun:
                    return None  # a statement not run again read past the prefix's own cut
                found = _marks_before(watch, n, bound)
                if found is None:
                    return None
            assert found is not None
            last, mark, ended = found
            watch.limit = bound
            if at is None:
                if mark.furthest >= bound and not cut:
                    runs, rerun = _reads_past(watch, k)
                    changed = self._rerun_start(watch, text, names, k, prompt, values, runs)
                    if changed is None:
                        return None
                    values = changed
                at, key, kept = self._resume_at(watch, values, n, found, prompt, rerun)
                if kept is not None:
                    return kept
            if passes is not None and n - at > passes:
                raise TooManyPasses
            if at == n and ended is not None:
                mark, tail = ended, self.end  # every pass ran as in the whole render
            else:
                tail = self.tail
                base = base_of(walked)
                if at < base:
                    return None  # (a pass before the loop's first: none to resume at)
                if at != last:
                    item = chat[at]
                    found_at = watch.passes.get(id(item))
                    if found_at is None or found_at.item is not item:
                        return None
                    mark = found_at
            _restore(watch, mark)
            if watch.traced:
                watch.untrace(mark.spaces, values)
            for (space, name), value in watch.overrides.items():
                fields = watch.fields[space]
                if value is missing:
                    fields.pop(name, None)
                else:
                    fields[name] = value
                watch.dirty.add(id(watch.spaces[space]))
            names = self._entered(watch, names, mark.names, k, prompt, values)
            if tail is self.tail:
                messages = prefix_of(walked, k)
                start = at - base
                items = names[_ITEMS] = messages[start:]  # a loop that does not use `loop`
                _pending.start = (items, _loop_at(messages, start, tail.environment))
            watch.replaced = values
            out: list[str] = []
            watch.reach = -1  # (no more marks: what the end reads of the watched list)
            _run(tail, self._context(names), out, mark.position)
            rest = "".join(out)
            if key is not None and watch.reach < 0:
                watch.ends[key] = rest
        except TooManyPasses:
            raise
        except Exception:  # noqa: BLE001 - read too far, or raised: rendered from the start
            return None
        finally:
            # (between resumes they are empty: a prefix's own)
            watch.limit = _WHOLE + 1
            if watch.replaced:
                watch.replaced = {}
            if watch.sizes:
                watch.sizes = {}
            if watch.overrides:
                watch.overrides = {}
            _pending.start = None
            render_state.written = written
        return mark.position, rest

    def _resume_at(
        self,
        watch: Watch,
        values: dict[int, Any],
        n: int,
        found: tuple[int, Mark, Mark | None],
        prompt: bool,
        rerun: frozenset[int] = frozenset(),
    ) -> tuple[int, tuple[Any, ...] | None, tuple[int, str] | None]:
        """Where the first ``n`` messages resume (``found``: _marks_before's; ``values``: the
        traced values the prefix has otherwise): the pass they resume at (``n``: the end
        alone); when it is the end alone, the key of its text (_ending; None when the
        end's text is the prefix's own); and the prefix as ``resume`` gives it where another
        prefix's end left that text."""
        last, _, ended = found
        at = n if ended is not None else last
        if values:  # resumed at the first pass the prefix's values change
            at = watch.first_changed(values, at, rerun)
        if at != n or ended is None:
            return at, None, None
        key = self._ending(watch, ended, prompt, values)
        kept = watch.ends.get(key) if key is not None else None
        return at, key, None if kept is None else (ended.position, kept)

    def _ending(
        self, watch: Watch, mark: Mark, prompt: bool, values: dict[int, Any]
    ) -> tuple[Any, ...] | None:
        """What the template's end, run at ``mark``, can see that differs between prefixes
        (None when that includes the messages): the generation-prompt flag, the variables,
        the namespace fields and the traced values. Ends run with the same see the same."""
        if watch.overrides:
            return None  # (fields of the prefix's own, which no other prefix shares)
        names = mark.names
        seen = watch.ending.get(id(names))
        if seen is None:
            seen = watch.ending[id(names)] = self._end_sees(watch, names)
        pure, traced, reach, attributes = seen
        if not pure:
            return None
        spaces = mark.spaces
        shown: tuple[tuple[Any, ...], frozenset[int]] | None
        if attributes == ():  # (it reads no namespace: nothing of the mark's counts)
            shown = attributes, traced
        else:  # (worked out once for the marks that share their copies)
            shown = watch.ending.get((id(names), id(spaces)))
            if shown is None:
                shown = watch.ending[id(names), id(spaces)] = self._end_shown(
                    watch, spaces, traced, reach, attributes
                )
        fields, traced = shown
        changed = (
            frozenset(
                (key, value)
                for key, value in values.items()
                # the traced values the end sees: its variables' and those of the namespaces
                # it can reach (the flag's is `prompt`; one seen only through `messages`, or
                # from inside a container, where it refuses any use, is never kept)
                if key in traced
            )
            if values and traced
            else _NOTHING
        )
        return prompt, id(names), fields, changed

    @staticmethod
    def _end_shown(
        watch: Watch,
        spaces: list[tuple[Any, dict[str, Any]]],
        traced: frozenset[int],
        reach: tuple[int, ...] | None,
        attributes: tuple[tuple[int, str], ...] | None,
    ) -> tuple[tuple[Any, ...], frozenset[int]]:
        """What of a mark's namespaces (``spaces``) the end sees, given what ``_end_sees``
        found (``traced``, ``reach``, ``attributes``): the fields it reads by attribute
        (their values' ids), where each holds a plain or traced value; else the fields of
        the namespaces it can reach (all of them, where one holds anything but plain and
        traced values). With the traced values among the variables and those fields."""
        if attributes and attributes[-1][0] < len(spaces):  # (sorted by the namespaces')
            read = [spaces[at][1].get(name, missing) for at, name in attributes]
            if all(type(value) in _PLAIN or type(value) in _KEYED for value in read):
                if not _TRACING.isdisjoint(map(type, read)):
                    traced = traced.union(_root_ids(read))
                return tuple(map(id, read)), traced
        kept = spaces
        if reach is not None and len(reach) < len(spaces):
            kept = [spaces[at] for at in reach if at < len(spaces)]
            if not all(map(_plain_fields, map(_COPY, kept))):
                kept, reach = spaces, None
        else:
            reach = None
        held = watch.traced_fields(spaces, reach) if watch.holding else ()
        if held:
            traced = traced.union(id(value) for _, value in held)
        return tuple(map(watch.content, map(_COPY, kept))), traced

    def _end_sees(
        self, watch: Watch, names: dict[str, Any]
    ) -> tuple[bool, frozenset[int], tuple[int, ...] | None, tuple[tuple[int, str], ...] | None]:
        """What the end can see at the marks with these variables: whether it sees no
        messages; the traced values among the variables; the namespaces its variables hold
        (None: they may reach any); and, where it reads those namespaces only by an
        attribute of a variable holding one (``ns.is_tool``) and its other variables reach
        none, the fields it reads (each namespace's place and the field's name), else None.
        """
        # the messages and views of them are a prefix's own (its reads are not watched)
        pure = "messages" not in self.end_names and not any(
            isinstance(names.get(name), WatchedMessages) for name in self.end_names
        )
        traced = frozenset(id(value) for value in names.values() if type(value) is _Traced)
        if not pure:
            return False, traced, None, None
        held = [names[name] for name in self.end_names if name in names]
        reached = _reached(iter(held), watch.made)
        reach = None if reached is None else tuple(sorted(reached))
        attributes: list[tuple[int, str]] = []
        whole = []  # the values the end may read otherwise than by an attribute
        for name in self.end_names:
            value = names.get(name, missing)
            read = self.end_attrs.get(name)
            if read is not None and isinstance(value, jinja2.utils.Namespace):
                at = watch.made.get(id(value))
                if at is None:
                    return True, traced, reach, None
                attributes += ((at, field) for field in read)
            elif value is not missing and type(value) is not _Traced:  # (those are in traced)
                whole.append(value)
        if _reached(iter(whole), watch.made) != frozenset():
            return True, traced, reach, None  # (they may reach a namespace otherwise)
        return True, traced, reach, tuple(sorted(attributes))

    def _context(self, names: dict[str, Any]) -> Any:
        environment = self.tail.environment
        # (the globals' names only matter to `{% import %}`, which has no plan)
        return environment.context_class(environment, names, None, {})

    def _entered(
        self,
        watch: Watch,
        names: dict[str, Any],
        marked: dict[str, Any],
        k: int,
        prompt: bool,
        values: dict[int, Any] | None = None,
    ) -> dict[str, Any]:
        """``names`` with the top-level variables ``marked`` at a mark, as the render of the
        first ``k`` messages has them (the part of that which is the same for every prefix
        is worked out once per mark's variables); with ``values``, the traced values among
        them plain (``values``' where given)."""
        entry = watch.entered.get(id(marked))
        if entry is None:
            base = names.copy()
            for name in self.unset_names.difference(marked):
                base[name] = missing  # assigned later at the top level: unset until then
            views = [(n, v) for n, v in marked.items() if isinstance(v, WatchedMessages)]
            base.update((n, v) for n, v in marked.items() if not isinstance(v, WatchedMessages))
            # the prefix's own inputs, unless the template has its own variables by the names
            given = [n for n in _GIVEN if n not in marked and n not in self.unset_names]
            traced = [(n, v) for n, v in marked.items() if type(v) is _Traced]
            entry = watch.entered[id(marked)] = (base, views, given, traced)
        base, views, given, traced = entry
        entered = base.copy()
        for name in given:
            if name == "messages":
                entered[name] = watch.given = watch.chat[:k]
            else:
                entered[name] = prompt
        for name, view in views:
            entered[name] = prefix_of(view, k)
        if values is not None:
            for name, value in traced:
                entered[name] = _value(value, values)
        return entered

    def _rerun_start(
        self,
        watch: Watch,
        text: str,
        base: dict[str, Any],
        k: int,
        prompt: bool,
        values: dict[int, Any],
        runs: list[tuple[int, int]],
    ) -> dict[int, Any] | None:
        """The statements of the start that read message ``k`` or later (``runs``), run
        again on the first ``k`` messages: ``values`` (traced values the prefix has
        otherwise, by id) and the traced values they leave otherwise, or None when they
        leave other text or state. Each run of consecutive such statements runs from its
        mark (a loop over the messages takes its state from its own marks instead) and is
        compared at the next: the statements between runs read nothing that differs (a
        traced value they use is checked with the passes'), and a later run that uses a
        value an earlier one changed gives up."""
        steps = watch.steps
        for read in runs:
            watch.replaced = values
            free = self._free(*read)
            found = self._scanned(watch, text, k, read, values, free)
            if found is None:
                rerun = self._rerun(watch, base, k, prompt, read)
                if rerun is not None:
                    before, after = steps[read[0]], steps[read[1]]
                    found = rerun.changes(before, after, text, k, values, free, watch.overrides)
            if found is None:
                return None
            values = {**values, **found}
        return values

    def _free(self, first: int, stop: int) -> frozenset[str]:
        """The fields only the end reads that only statements ``first`` to ``stop - 1`` of
        the start set: a run of them again leaves the prefix's own values there."""
        found = self._free_fields.get((first, stop))
        if found is None:
            found = self._free_fields[first, stop] = frozenset(
                name
                for name, setters in self.end_fields.items()
                if first <= min(setters) and max(setters) < stop
            )
        return found

    @staticmethod
    def _scanned(
        watch: Watch,
        text: str,
        k: int,
        read: tuple[int, int],
        values: dict[int, Any],
        free: frozenset[str] = frozenset(),
    ) -> dict[int, Any] | None:
        """``_Rerun.changes`` of a loop of the start over the messages (``read`` being that
        one statement) on the first ``k`` messages, from its marks in the whole render: it
        leaves what it had left when its pass on message ``k`` began, if the passes before
        read no further. None when it cannot tell (the statement then runs again)."""
        first, stop = read
        scan = watch.scans.get(first)
        if stop != first + 1 or scan is None or not isinstance(scan[0], WatchedMessages):
            return None
        walked, marks = scan
        start, after = watch.steps[first], watch.steps[stop]
        end = start
        if k > base_of(walked):
            item = watch.chat[k]
            mark = marks.get(id(item))
            if mark is None or mark.item is not item or mark.behind >= k:
                return None
            end = mark  # the loop on the prefix's messages ends where this pass began
        # the answer does not depend on k unless the state holds messages (compared as the
        # prefix's): the same copies at the same place give the same answer
        key = (first, id(end.spaces), end.position)
        traced = watch.traced_in.get(id(end.spaces))
        if traced is None:
            traced = watch.traced_in[id(end.spaces)] = frozenset(
                id(value) for _, value in watch.traced_fields(end.spaces)
            )
        kept = traced.isdisjoint(values)  # else the answer depends on the prefix's values
        if kept and key in watch.scanned:
            return watch.scanned[key]
        known = len(start.spaces)
        rerun = _Rerun(
            text[start.position : end.position],
            {},
            [space for space, _ in end.spaces[known:]],
            [fields for _, fields in end.spaces],
        )
        overrides: dict[tuple[int, str], Any] = {}
        found = rerun.changes(start, after, text, k, values, free, overrides)
        if overrides:  # (the prefix's own: not kept for the others)
            watch.overrides.update(overrides)
        elif kept and not any(
            isinstance(value, WatchedMessages)
            for _, fields in after.spaces
            for value in fields.values()
        ):
            watch.scanned[key] = found
        return found

    def _rerun(
        self, watch: Watch, base: dict[str, Any], k: int, prompt: bool, read: tuple[int, int]
    ) -> _Rerun | None:
        """Statements ``read[0]`` to ``read[1] - 1`` of the start run again on the first
        ``k`` messages, from the whole render's state before them."""
        part = self._part(*read)
        before = watch.steps[read[0]]
        if part is None or part.fresh & before.names.keys():
            return None  # it would start unset a variable the whole render had set
        key = self._rerun_key(watch, before, read, k)
        if key is not None:
            kept = watch.reruns.get(key, missing)
            if kept is missing:
                kept = self._rerun_unread(watch, base, part, before, k, prompt, read)
                watch.reruns[key] = kept
            fields = None if kept is None else _scanned_onto(kept, k)
            if kept is not None and fields is not None:  # (its own inputs: the prefix's)
                names = self._entered(watch, base, before.names, k, prompt)
                given = _given_in(names)
                return _Rerun(kept.text, kept.assigned, kept.made, fields, given)
        for template in (part.template, part.plain):
            if template is None:
                break
            _restore(watch, before)
            names = self._entered(watch, base, before.names, k, prompt)
            context, made = self._rerun_context(watch, names, read[0])
            out: list[str] = []
            limit = watch.limit
            watch.limit = k if k < len(watch.chat) else _WHOLE + 1
            try:
                _run(template, context, out, before.position)
            except _Unknown:  # a scan its probes cannot work out: run as written
                continue
            except Exception:  # noqa: BLE001 - read past its messages, or raised: no rerun
                return None
            finally:
                watch.limit = limit
            given = _given_in(names)
            fields = _fields_left(before, made)
            return _Rerun("".join(out), dict(context.vars), made, fields, given)
        return None

    def _rerun_context(
        self, watch: Watch, names: dict[str, Any], first: int, deferred: list[Any] | None = None
    ) -> tuple[Any, list[Any]]:
        """The context of a run of the start's statements from ``first`` with the variables
        ``names``: its ``namespace`` notes the namespaces it makes (the list given with it),
        and its scans are worked out from their probes (_scan_effect; the one of statement
        ``deferred[0]``, when given, only noted in ``deferred``)."""
        made: list[Any] = []
        make = names["namespace"]
        names["namespace"] = functools.partial(_made, make, made)
        names[_SCAN_EFFECT] = functools.partial(
            self._scan_effect, watch, names, make, first, deferred
        )
        return self._context(names), made

    def _rerun_key(
        self, watch: Watch, before: Mark, read: tuple[int, int], k: int
    ) -> tuple[int, ...] | None:
        """What a run of statements ``read[0]`` to ``read[1] - 1`` on the first ``k``
        messages reads of them, when a run with stand-ins for them could tell it alone (see
        _rerun_unread): the position of ``k`` among the messages whose pass does something
        in each probed scan among those statements but the last (whose effects each prefix
        puts on its own: _scanned_onto). None where no such run is tried: none
        was tried yet (the scans' probes and the statements' variables are made by the
        first run), one used a stand-in or raised (_rerun_unread), or the variables hold
        views of the messages or traced values, which are the prefix's own otherwise."""
        if read in self._unread_refused or read in watch.unread_raised:
            return None
        entry = watch.entered.get(id(before.names))
        if entry is None or entry[1] or entry[3]:
            return None
        key = [*read]
        for at in range(*read):
            if self._scan(at) is not None:
                probed = watch.effects.get((at, read[0]))
                if probed is None:
                    return None
                if at < read[1] - 1:  # (the last one's is put on each prefix: _scanned_onto)
                    key.append(bisect.bisect_left(probed[1], k))
        return tuple(key)

    def _rerun_unread(
        self,
        watch: Watch,
        base: dict[str, Any],
        part: _Part,
        before: Mark,
        k: int,
        prompt: bool,
        read: tuple[int, int],
    ) -> _Rerun | None:
        """``_rerun``'s run of statements ``read[0]`` to ``read[1] - 1`` on the first ``k``
        messages, with stand-ins for the prefix's own inputs (_UnreadMessages, _Unread), no
        read of a watched list and no traced value: where none is used and none is left in
        what the run leaves but plain values, the namespaces it made and what was there
        before, every prefix whose messages put the same positions in the scans' probes
        (_rerun_key) leaves the same, and this run stands for theirs. A scan that is the
        last statement does not run: each prefix puts its own scan's effects on what the run
        left, and the namespace it sets is checked then (_scanned_onto). None otherwise. Not
        tried again for these statements once a stand-in was used, nor on this render's
        prefixes once the run raised otherwise."""
        _restore(watch, before)
        names = self._entered(watch, base, before.names, k, prompt)
        given = _given_in(names)
        for name in watch.entered[id(before.names)][2]:
            names[name] = _UnreadMessages(k) if name == "messages" else _Unread(prompt)
        deferred: list[Any] = [read[1] - 1]  # (its last statement's scan, if a scan)
        context, made = self._rerun_context(watch, names, read[0], deferred)
        out: list[str] = []
        limit, replaced = watch.limit, watch.replaced
        watch.limit, watch.replaced = 0, _EVERY_VALUE  # (any read of one gives up)
        try:
            _run(part.template, context, out, before.position)
        except _Used:  # (the statements read the prefix's own inputs: they run as written)
            self._unread_refused.add(read)
            return None
        except Exception:  # noqa: BLE001 - (a pass of its scan raised, say: here, they do)
            watch.unread_raised.add(read)
            return None
        finally:
            watch.limit, watch.replaced = limit, replaced
        fields = _fields_left(before, made)
        assigned = dict(context.vars)
        ids = frozenset(map(id, made))
        scanned = None
        if len(deferred) > 1:  # the scan's namespace, among those whose fields are left
            _, target, scan, probed = deferred
            spaces = [*(space for space, _ in before.spaces), *made]
            places = [at for at, space in enumerate(spaces) if space is target]
            if not places:
                return None
            old = before.spaces[places[0]][1] if places[0] < len(before.spaces) else {}
            scanned = (places[0], scan, probed, old, ids)
        if not all(_alike(value, before.names.get(name), ids) for name, value in assigned.items()):
            return None
        for at, copied in enumerate(fields):
            if scanned is not None and at == scanned[0]:
                continue  # (as each prefix's scan leaves it: _scanned_onto)
            old = before.spaces[at][1] if at < len(before.spaces) else {}
            if not all(
                _alike(value, old.get(name, missing), ids) for name, value in copied.items()
            ):
                return None
        return _Rerun("".join(out), assigned, made, fields, given, scanned)

    def _scan(self, at: int) -> _Scan | None:
        """The backward scan that statement ``at`` of the start is, if it is one (_Scan)."""
        if at not in self._scans:
            node = self.start[at]
            found = _scan_of(node, self._macros) if isinstance(node, nodes.For) else None
            if found is not None:
                found.probe = self.compile_tree(found.tree)
            self._scans[at] = found
        return self._scans[at]

    def _scan_effect(
        self,
        watch: Watch,
        names: dict[str, Any],
        make: Callable[..., Any],
        first: int,
        deferred: list[Any] | None,
        context: Any,
        item: tuple[int, Any, Any],
    ) -> None:
        """A backward scan of the start (_Scan) in a rerun from statement ``first``
        (``item``, as the rerun's marker gives it: the scan's statement ``at``, the namespace
        ``space`` it sets and the messages ``walked`` it walks): the effects of its passes,
        probed once per message, put on ``space`` (_scan_onto). Raises _Unknown when it
        cannot tell (a message whose pass raised, messages that are not a prefix of the
        conversation, a flag that is not a plain value): the scan then runs as written.
        The scan of statement ``deferred[0]`` is not put on: its namespace, scan and probes
        are appended to ``deferred``."""
        at, space, walked = item
        scan = self._scans[at]
        assert scan is not None
        chat = watch.chat
        # the first k messages: the list _entered gave (the sandbox changes no list), or
        # one with the same items, or the stand-in for them of _rerun_unread
        if type(walked) is _UnreadMessages:
            k = walked.size
        elif type(walked) is not list:
            raise _Unknown
        else:
            k = len(walked)
            if walked is not watch.given and not (
                k <= len(chat) and all(map(operator.is_, walked, chat))
            ):
                raise _Unknown
        if not isinstance(space, jinja2.utils.Namespace):
            raise _Unknown
        key = (at, first)
        if key not in watch.effects:
            ready = self._ready(at, first, scan)
            watch.effects[key] = self._probe(watch, names, make, scan) if ready else None
        probed = watch.effects[key]
        if probed is None:
            raise _Unknown
        if deferred is not None and deferred[0] == at:
            deferred.extend((space, scan, probed))
            return
        _scan_onto(scan, probed, k, _fields(space), functools.partial(operator.setitem, space))

    def _ready(self, at: int, first: int, scan: _Scan) -> bool:
        """Whether the statements run again before scan ``at`` (from ``first``) leave what
        its passes read as the whole render left it: they set none of the names and no
        namespace's field (which a macro it calls could read). What came before them is
        the same in every prefix (traced values aside, which a probe refuses)."""
        key = (at, first)
        if key not in self._ready_scans:
            before = self.start[first:at]
            stores = symbols_for_node(nodes.Template(copy.deepcopy(before))).stores
            self._ready_scans[key] = not (stores & scan.reads) and not _sets_fields(
                before, self._macros
            )
        return self._ready_scans[key]

    def _probe(
        self, watch: Watch, names: dict[str, Any], make: Callable[..., Any], scan: _Scan
    ) -> tuple[list[Any], list[int], list[Any]] | None:
        """What a pass of ``scan`` does on each message of the conversation while its flag
        holds: the namespace fields it sets, in order, then _BROKE if it broke the loop
        (None: nothing), or _RAISED; the messages whose pass does anything; and for a scan
        that runs every pass, what the passes of those messages up to each one leave, run
        from the last down (the fields and their values), so that a prefix's scan costs
        no more than one pass. None when a pass does what a probe cannot
        stand for (it writes another namespace, or reads a value that differs between
        prefixes). The passes run in one loop, each on a namespace and index of its own,
        checked as it ends; a pass that raises or breaks ends the loop, and the next one
        starts after it."""
        for name in scan.reads:
            value = names.get(name)
            if isinstance(value, (WatchedMessages, _Traced)):
                return None
        chat = watch.chat
        spaces = [make() for _ in chat]
        if scan.flag is not None:
            for space in spaces:
                _fields(space)[scan.flag] = _HOLDS
        out: list[str] = []
        ended: list[int] = []  # the passes of a run that reached their end

        def alone(index: int) -> bool:  # a pass that printed nothing, wrote its own alone
            written = render_state.written
            return not out and written is not None and written <= {id(spaces[index])}

        def passed(context: Any, index: int) -> None:
            if not alone(index):
                raise _Refused
            ended.append(index)
            render_state.written = set()

        probe = dict(names, namespace=make)
        probe[_PROBED] = passed
        messages = [[message] for message in chat] if scan.indexes else chat
        # (each run takes up where the last ended: a pass that raises or breaks took its own)
        items = zip(range(len(chat)), spaces, messages, strict=True)
        effects: list[Any] = []
        saved, replaced = render_state.written, watch.replaced
        watch.replaced = _EVERY_VALUE  # a probe stands for every prefix: none may differ
        try:
            while len(effects) < len(chat):  # (a run ends at a pass that raises or breaks)
                probe[_ITEMS] = items
                render_state.written = set()
                ended.clear()
                try:
                    _run(scan.probe, self._context(probe), out, 0)
                except (_Refused, GivenUp):  # (GivenUp: it used a traced value, or read a
                    return None  # watched list)
                except Exception:  # noqa: BLE001 - the pass after the last ended raises
                    stopped: Any = _RAISED
                else:
                    stopped = None  # (the pass after the last ended broke the loop)
                effects.extend(_effect(scan, spaces[index]) for index in ended)
                if len(effects) < len(chat):
                    if stopped is None:
                        if not alone(len(effects)):
                            return None
                        stopped = _effect(scan, spaces[len(effects)])
                    effects.append(stopped)
        finally:
            if saved is not None:
                saved.update(render_state.written or ())  # (a write that refused the probe)
            render_state.written, watch.replaced = saved, replaced
        doing = [index for index, effect in enumerate(effects) if effect is not None]
        composed: list[Any] = []  # a scan that runs every pass: passes 0 to p, in turn
        if scan.every:  # (none raised: the watched render ran them all)
            left: dict[str, Any] = {}  # what the passes so far leave
            for index in doing:  # (a lower pass runs later: its fields win)
                left = {**dict(effects[index]), **left}
                composed.append(tuple(left.items()))
        return effects, doing, composed

    def _part(self, first: int, stop: int) -> _Part | None:
        """Statements ``first`` to ``stop - 1`` of the start compiled alone; None when a
        variable they assign would start unset alone but not in the whole template."""
        key = (first, stop)
        if key not in self._parts:
            tree = nodes.Template(copy.deepcopy(self.start[first:stop]))
            symbols = symbols_for_node(tree)
            fresh = frozenset(
                name for name in symbols.stores if _initial(symbols, name) == VAR_LOAD_UNDEFINED
            )
            if any(_initial(self.root, name) != VAR_LOAD_UNDEFINED for name in fresh):
                self._parts[key] = None
                return None
            plain = self.compile_tree(tree)
            scans = [at for at in range(first, stop) if self._scan(at) is not None]
            if not scans:
                self._parts[key] = _Part(plain, fresh)
                return self._parts[key]
            worked_out = nodes.Template(copy.deepcopy(self.start[first:stop]))
            for at in scans:  # worked out from its probes (_scan_effect), else run
                scan = self._scans[at]
                assert scan is not None
                names = [nodes.Name(scan.space, "load"), nodes.Name(scan.walked, "load")]
                item = nodes.Tuple([nodes.Const(at), *names], "load")
                worked_out.body[at - first] = marker_statement(_SCAN_EFFECT, item)
            self._parts[key] = _Part(self.compile_tree(worked_out), fresh, plain)
        return self._parts[key]


@dataclass(eq=False)
class _Scan:
    """A loop of the start that walks the messages backwards for the last one of a kind
    (Qwen3's last user query)::

        {%- for message in messages[::-1] %}
            {%- set index = (messages|length - 1) - loop.index0 %}
            {%- if ns.multi_step_tool and message.role == "user" and ... %}
                {%- set ns.multi_step_tool = false %}
                {%- set ns.last_query_index = index %}
            {%- endif %}
        {%- endfor %}

    Run again on each prefix it costs a pass per message, and a conversation as many
    passes as the square of its length. Its shape makes each pass a function of its
    message alone (``_scan_of`` checks it): a pass sets loop-local ints of its message's
    index (the loop's position and the messages' length, in sums whose length cancels),
    then tests ``ns.flag`` first and does nothing else when it is false; what the test's
    rest and its body read is the pass's message, those ints and names no prefix sets
    otherwise, and they print nothing and set only ``ns``'s fields. So a pass run once
    per message, alone, on a namespace whose flag holds (a probe), gives what it does in
    any prefix's scan while the flag holds; a prefix's scan is the effects of its
    passes, from its last message down, until one leaves the flag false.

    A scan may instead have no flag and ``break`` (Reka Edge's scan for the last user
    query): then its test does not read the namespace, and a probe notes whether its pass
    broke; a prefix's scan ends at the first pass from its last message down that does.
    Or neither (Kimi K2 Thinking's, over ``range(messages | length - 1, -1, -1)``, each
    pass reading ``messages[i]``): every pass runs, and a prefix's scan leaves what the
    passes of its messages leave, run from the last down."""

    # the passes, over ``_ITEMS`` (each message, its index ``_J`` and a namespace of its
    # own), each ended by a call of ``_PROBED`` with its index
    tree: nodes.Template
    space: str  # the namespace's name
    flag: str | None  # the field its test starts with (None: the scan breaks instead)
    walked: str  # the name of the messages it walks backwards
    reads: frozenset[str]  # the names a pass reads (its own, macros' included)
    every: bool = False  # no flag and no break: every pass runs
    indexes: bool = False  # it walks the indexes: a pass reads its message as `messages[i]`
    probe: Any = None  # ``tree`` compiled


class _EveryValue(dict):  # type: ignore[type-arg]
    """Watch.replaced while a scan is probed: every traced value, so that any use of one
    gives up (a probe's result must not depend on the prefix it was made for)."""

    def __contains__(self, key: object) -> bool:
        return True


_EVERY_VALUE = _EveryValue()
_HOLDS = object()  # a probe's flag: true, and no value a template can set
_COPY = operator.itemgetter(1)  # a mark's copy of a namespace's fields
_RAISED = object()  # a pass's effect: it raised
# The loop's position on message j of a backward walk of k messages, as (k, j, 1)
# coefficients: index0 = k - 1 - j, index = k - j, revindex0 = j, revindex = j + 1, length = k
_POSITIONS = {
    "index0": (1, -1, -1),
    "index": (1, -1, 0),
    "revindex0": (0, 1, 0),
    "revindex": (0, 1, 1),
    "length": (1, 0, 0),
}
# What a scan's pass may hold: anything but loops, macros, blocks and loop controls
_NOT_IN_SCANS = (
    nodes.For,
    nodes.Macro,
    nodes.CallBlock,
    nodes.FilterBlock,
    nodes.Output,
    nodes.Continue,
    nodes.Scope,
    nodes.With,
    nodes.AssignBlock,
    nodes.Break,  # (last: a scan may break, ending there; _scan_of)
)


def _scan_of(loop: nodes.For, macros: dict[str, nodes.Macro]) -> _Scan | None:
    """The loop as a _Scan, when it has a scan's shape (see there; ``macros``: the
    template's, which a pass may call); else None."""
    walk = loop_source(loop)
    walked: nodes.Node | None = None
    indexes = False  # `for i in range(messages | length - 1, -1, -1)`: the indexes, backwards
    if isinstance(walk, nodes.Getitem) and isinstance(walk.arg, nodes.Slice):
        cut = walk.arg
        backwards = (
            cut.start is None
            and cut.stop is None
            and cut.step is not None
            and _linear(cut.step, "") == (0, 0, -1)  # `[::-1]` parses as a negated 1
        )
        walked = walk.node
    elif isinstance(walk, nodes.Filter):
        backwards = walk.name == "reverse" and not walk.args and not walk.kwargs
        walked = walk.node
    elif (
        isinstance(walk, nodes.Call)
        and isinstance(walk.node, nodes.Name)
        and walk.node.name == "range"
        and len(walk.args) == 3
        and not walk.kwargs
        and walk.dyn_args is None
        and walk.dyn_kwargs is None
    ):
        counted = {  # (`_linear` holds it to `messages | length - 1`)
            length.node.name
            for length in walk.args[0].find_all(nodes.Filter)
            if isinstance(length.node, nodes.Name)
        }
        walked = nodes.Name(counted.pop(), "load") if len(counted) == 1 else None
        indexes = backwards = walked is not None and [
            _linear(arg, walked.name)
            for arg in walk.args  # type: ignore[attr-defined]
        ] == [(1, 0, -1), (0, 0, -1), (0, 0, -1)]
    else:
        return None
    if not (
        backwards
        and isinstance(walked, nodes.Name)
        and isinstance(loop.target, nodes.Name)
        and loop.test is None
        and not loop.else_
        and not loop.recursive
        and loop.body
    ):
        return None
    *locals_, test = loop.body
    if not (isinstance(test, nodes.If) and not test.elif_ and not test.else_):
        return None
    target = loop.target.name
    if indexes:  # a pass reads its message as `messages[i]` only: a probe's message
        if locals_:
            return None
        test = copy.deepcopy(test)
        for read in list(test.find_all(nodes.Getitem)):
            if (
                isinstance(read.node, nodes.Name)
                and read.node.name == walked.name
                and isinstance(read.arg, nodes.Name)
                and read.arg.name == target
            ):
                read.node, read.arg = nodes.Name(_ONE, "load"), nodes.Const(0)
        locals_ = [nodes.Assign(nodes.Name(target, "store"), nodes.Name(_J, "load"))]
    flag: str | None = None
    guard = test.test
    while isinstance(guard, nodes.And):
        guard = guard.left
    breaks = any(test.find_all(nodes.Break))
    if not breaks and isinstance(guard, nodes.Getattr) and isinstance(guard.node, nodes.Name):
        space, flag = guard.node.name, guard.attr  # the scan goes on while its flag holds
    else:  # the scan ends at the first pass that breaks, or runs every pass
        spaces = sorted({ref.name for ref in test.find_all(nodes.NSRef)})
        if not spaces:
            return None
        space = spaces[0]  # (a probe that writes another refuses)
    body: list[nodes.Node] = []
    for node in locals_:  # the pass's ints, from the message's index
        if not (isinstance(node, nodes.Assign) and isinstance(node.target, nodes.Name)):
            return None
        if indexes:
            body.append(node)
            continue
        terms = _linear(node.node, walked.name)
        if terms is None or terms[0]:
            return None  # not an int of the message's index alone
        _, per, plus = terms
        at = nodes.Add(nodes.Mul(nodes.Const(per), nodes.Name(_J, "load")), nodes.Const(plus))
        body.append(nodes.Assign(nodes.Name(node.target.name, "store"), at))
    body.append(copy.deepcopy(test))
    if flag is None:  # (a pass that goes on past its test sets this field: _probe)
        body.append(nodes.Assign(nodes.NSRef(space, _WENT_ON), nodes.Const(True)))
    if any(test.find_all(_NOT_IN_SCANS if flag is not None else _NOT_IN_SCANS[:-1])):
        return None
    # the namespace: read by the test's first term only (by none, a scan that breaks),
    # set by `{% set ns.field %}` only
    if any(ref.name != space for ref in test.find_all(nodes.NSRef)):
        return None
    if sum(1 for name in test.find_all(nodes.Name) if name.name == space) != (flag is not None):
        return None
    direct = {
        name.name for node in body for name in node.find_all(nodes.Name) if name.ctx == "load"
    }
    called = _reads(direct & macros.keys(), macros, set())
    if called is None or space in called:
        return None  # a macro that reads the namespace would see the scan's, not a probe's
    reads = (direct | called) - {space, target, _J}
    if {"loop", walked.name, "messages", "add_generation_prompt"} & reads:
        return None  # the loop's position, the messages or the flag, read otherwise
    each = _ONE if indexes else target  # (the message: as a list of it alone, for `[i]`)
    names = [nodes.Name(_J, "store"), nodes.Name(space, "store"), nodes.Name(each, "store")]
    body.append(marker_statement(_PROBED, nodes.Name(_J, "load")))
    target_of = nodes.Tuple(names, "store")  # type: ignore[arg-type]
    passes = nodes.For(target_of, nodes.Name(_ITEMS, "load"), body, [], None, False)
    tree = nodes.Template([passes])
    every = flag is None and not breaks
    return _Scan(tree, space, flag, walked.name, frozenset(reads), every, indexes)


def _linear(node: nodes.Node, walked: str) -> tuple[int, int, int] | None:
    """An int expression of a backward walk's position (``loop.index0``, ...), the walked
    messages' length and constants, as its (k, j, 1) coefficients (see _POSITIONS); None
    for anything else."""
    if isinstance(node, nodes.Const):
        return (0, 0, node.value) if type(node.value) is int else None
    if isinstance(node, (nodes.Add, nodes.Sub)):
        left, right = _linear(node.left, walked), _linear(node.right, walked)
        if left is None or right is None:
            return None
        sign = 1 if isinstance(node, nodes.Add) else -1
        return (
            left[0] + sign * right[0],
            left[1] + sign * right[1],
            left[2] + sign * right[2],
        )
    if isinstance(node, nodes.Neg):
        inner = _linear(node.node, walked)
        return None if inner is None else (-inner[0], -inner[1], -inner[2])
    if isinstance(node, nodes.Getattr):
        if isinstance(node.node, nodes.Name) and node.node.name == "loop":
            return _POSITIONS.get(node.attr)
        return None
    if (
        isinstance(node, nodes.Filter)
        and node.name == "length"
        and isinstance(node.node, nodes.Name)
        and node.node.name == walked
        and not node.args
        and not node.kwargs
        and node.dyn_args is None
        and node.dyn_kwargs is None
    ):
        return (1, 0, 0)
    return None


def _reads(names: set[str], macros: dict[str, nodes.Macro], seen: set[str]) -> set[str] | None:
    """The names the template's macros ``names`` read, with those of the macros they call
    (in turn); None when one defines a macro or calls back its caller."""
    found: set[str] = set()
    for name in sorted(names - seen):
        seen.add(name)
        macro = macros[name]
        if any(macro.find_all((nodes.Macro, nodes.CallBlock))):
            return None
        loads = {n.name for n in macro.find_all(nodes.Name) if n.ctx == "load"}
        inner = _reads(loads & macros.keys(), macros, seen)
        if inner is None:
            return None
        own = {arg.name for arg in macro.args} | {"caller", "varargs", "kwargs", "loop"}
        stored = {n.name for n in macro.find_all(nodes.Name) if n.ctx in ("store", "param")}
        found |= (loads | inner) - own - stored
    return found


def _sets_fields(nodes_: list[nodes.Node], macros: dict[str, nodes.Macro]) -> bool:
    """Whether statements (macro definitions aside) may set a namespace's field: a
    ``{% set ns.field %}`` of theirs, or a call of a macro that has one (or calls one)."""
    writers = {name for name, macro in macros.items() if any(macro.find_all(nodes.NSRef))}
    grew = True
    while grew:  # the macros that call a writer write too
        calling = {
            name
            for name, macro in macros.items()
            if name not in writers
            and any(n.name in writers for n in macro.find_all(nodes.Name) if n.ctx == "load")
        }
        writers |= calling
        grew = bool(calling)
    for node in nodes_:
        if isinstance(node, nodes.Macro):
            continue
        if any(node.find_all(nodes.NSRef)):
            return True
        if any(n.name in writers for n in node.find_all(nodes.Name) if n.ctx == "load"):
            return True
    return False


def _end_fields(start: list[nodes.Node], loop: nodes.For) -> dict[str, frozenset[int]]:
    """The namespace fields that only the end reads: by name, the statements of the start
    that set them. Nothing before the end reads them (no attribute, key or text by their
    name; no namespace taken whole, which a filter or macro could read), and only the
    start's own statements set them (not the main loop, nor a macro): a prefix whose
    start, run again, leaves them otherwise resumes with its own values (Watch.overrides).
    """
    before = [*start, loop]
    # the names that hold namespaces: those made by a `namespace()` assigned to a name, and
    # those a field is set on (any other name holds none: a namespace is given to no
    # other name below); with a namespace made elsewhere, any attribute may be a field
    spaces = {ref.name for part in before for ref in part.find_all(nodes.NSRef)}
    named: set[int] = set()
    for part in before:
        for assign in nodes.Template([part]).find_all(nodes.Assign):  # (the statement too)
            if isinstance(assign.target, nodes.Name) and _makes_namespace(assign.node):
                spaces.add(assign.target.name)
                named.add(id(assign.node))
    anywhere = any(
        _makes_namespace(call) and id(call) not in named
        for part in before
        for call in part.find_all(nodes.Call)
    )
    read: set[str] = set()
    held: set[int] = set()  # the names read as the object of an attribute
    for part in before:
        for node in part.find_all(nodes.Getattr):
            held.add(id(node.node))
            if anywhere or not isinstance(node.node, nodes.Name) or node.node.name in spaces:
                read.add(node.attr)
        read.update(c.value for c in part.find_all(nodes.Const) if isinstance(c.value, str))
    for part in before:
        for name in part.find_all(nodes.Name):
            if name.ctx == "load" and name.name in spaces and id(name) not in held:
                return {}  # a namespace taken whole
    stores: dict[str, set[int]] = {}
    for at, part in enumerate(start):
        if isinstance(part, nodes.Macro):
            read.update(ref.attr for ref in part.find_all(nodes.NSRef))
            read.update(kw.key for kw in part.find_all(nodes.Keyword))
            continue
        for ref in part.find_all(nodes.NSRef):
            stores.setdefault(ref.attr, set()).add(at)
        for call in part.find_all(nodes.Call):
            if _makes_namespace(call):
                for keyword in call.kwargs:
                    stores.setdefault(keyword.key, set()).add(at)
    read.update(ref.attr for ref in loop.find_all(nodes.NSRef))
    read.update(kw.key for kw in loop.find_all(nodes.Keyword))
    return {name: frozenset(at) for name, at in stores.items() if name not in read}


def _negative(node: nodes.Node | None) -> bool:
    """Whether ``node`` is a negative int written out (``-1``, ``-2 + 1``)."""
    terms = None if node is None else _linear(node, "")
    return terms is not None and terms[:2] == (0, 0) and terms[2] < 0


def _makes_namespace(node: nodes.Node) -> bool:
    return (
        isinstance(node, nodes.Call)
        and isinstance(node.node, nodes.Name)
        and node.node.name == "namespace"
    )


def _reached(
    values: Iterator[Any], made: dict[int, int], budget: int = 1 << 12
) -> frozenset[int] | None:
    """The namespaces ``values`` hold, as their places in ``made`` (by id), in lists, tuples
    and dicts at any depth (each container looked at once, at most ``budget`` items in
    all); None past that, or where they hold anything else that could reach a namespace's
    fields, such as a macro, a namespace ``made`` has not, or a traced value."""
    stack = list(values)
    seen: set[int] = set()
    found: set[int] = set()
    while stack:
        value = stack.pop()
        kind = type(value)  # (a traced value's own type: it claims an int's class)
        if kind in _PLAIN or isinstance(value, str):
            continue
        if kind is not list and kind is not tuple and kind is not dict:
            if not isinstance(value, jinja2.utils.Namespace) or id(value) not in made:
                return None
            found.add(made[id(value)])
            continue
        if id(value) in seen:
            continue
        seen.add(id(value))
        budget -= len(value)
        if budget < 0:
            return None
        stack.extend(value)
        if kind is dict:
            stack.extend(value.values())
    return frozenset(found)


def _attributes_read(end: list[nodes.Node]) -> dict[str, frozenset[str]]:
    """The names the statements ``end`` load only to read an attribute of (``ns.flag``),
    with those attributes: such a name's value is seen only through them."""
    held: dict[int, str] = {}  # the names read as the object of an attribute, by id
    for part in end:
        for node in part.find_all(nodes.Getattr):
            if isinstance(node.node, nodes.Name):
                held[id(node.node)] = node.attr
    read: dict[str, set[str]] = {}
    whole: set[str] = set()
    for part in end:
        for name in part.find_all(nodes.Name):
            if name.ctx != "load":
                continue
            attribute = held.get(id(name))
            if attribute is None:
                whole.add(name.name)
            else:
                read.setdefault(name.name, set()).add(attribute)
    return {name: frozenset(found) for name, found in read.items() if name not in whole}


def _root_ids(values: list[Any]) -> Iterator[int]:
    """The ids of the traced values among ``values`` (a shifted one's: its root's)."""
    for value in values:
        if type(value) is _Shifted:
            yield id(value.__cc_root__)
        elif type(value) is _Traced:
            yield id(value)


def _plain_fields(fields: dict[str, Any]) -> bool:
    """Whether a namespace's fields hold only plain scalars and traced values (nothing
    through which another namespace could be reached)."""
    return all(type(value) in _PLAIN or type(value) in _TRACING for value in fields.values())


class _Refused(Exception):
    """A probed pass printed, or wrote another namespace than its own."""


def _effect(scan: _Scan, space: Any) -> Any:
    """What a probed pass did on its namespace: the fields it set, in order, then _BROKE if
    it broke the loop; None for nothing."""
    fields = _fields(space)
    broke = scan.flag is None and fields.pop(_WENT_ON, None) is not True
    effect = tuple(
        (name, value)
        for name, value in fields.items()
        if not (name == scan.flag and value is _HOLDS)
    )
    return effect + ((_BROKE, None),) * broke or None


def _scan_onto(
    scan: _Scan, probed: Any, k: int, fields: dict[str, Any], put: Callable[[str, Any], Any]
) -> None:
    """A backward scan's passes on the first ``k`` messages, from their probes (``probed``:
    _probe's), put on a namespace (``fields``: its fields; ``put`` sets one) in the order
    the passes would set them, from the last message down, until the scan's flag is false
    or a pass breaks (_Unknown where that cannot be told: a pass that raised, a flag that
    is not a plain value)."""
    effects, doing, composed = probed
    position = bisect.bisect_left(doing, k)
    if scan.every:  # (no pass ends it: all of them, composed)
        for name, value in composed[position - 1] if position else ():
            put(name, value)
        return
    while True:
        if scan.flag is not None:
            flag = fields.get(scan.flag, missing)
            if type(flag) not in _SCALARS:
                raise _Unknown
            if not flag:
                return  # every pass left tests a false flag: nothing more
        if not position:
            return  # no pass left does anything
        position -= 1
        effect = effects[doing[position]]
        if effect is _RAISED:
            raise _Unknown
        for name, value in effect:
            if name is _BROKE:
                return  # the pass broke the loop
            put(name, value)


def _scanned_onto(kept: _Rerun, k: int) -> list[dict[str, Any]] | None:
    """The fields a run with stand-ins (``kept``) leaves on the first ``k`` messages: its
    own, with its last statement's scan put on, when it deferred one (None where the scan
    cannot be told, or leaves the namespace holding what _rerun_unread keeps no run with:
    the statements then run)."""
    if kept.scanned is None:
        return kept.fields
    place, scan, probed, old, made = kept.scanned
    stop = bisect.bisect_left(probed[1], k)  # (all the scan reads of k: alike, the same)
    if stop in kept.placed:
        return kept.placed[stop]
    fields = list(kept.fields)
    own = fields[place] = dict(fields[place])
    placed: list[dict[str, Any]] | None
    try:
        _scan_onto(scan, probed, k, own, own.__setitem__)
        alike = all(_alike(value, old.get(name, missing), made) for name, value in own.items())
        placed = fields if alike else None
    except _Unknown:
        placed = None
    kept.placed[stop] = placed
    return placed


def _given_in(names: dict[str, Any]) -> dict[str, Any]:
    """The prefix's own inputs among a run's variables (`messages`, the flag), as a rerun
    of the start saw them (_Rerun.given)."""
    return {name: names[name] for name in _GIVEN if name in names}


def _alike(value: Any, was: Any, made: frozenset[int]) -> bool:
    """Whether ``value``, left by a run of the start with stand-ins, is the same in every
    prefix's run: what was there before, a plain value, or a namespace it made (by id)."""
    return value is was or type(value) in _SCALARS or id(value) in made


def _fields_left(before: Mark, made: list[Any]) -> list[dict[str, Any]]:
    """A copy of the fields of every namespace a run of the start's statements from the mark
    ``before`` leaves: those made before it, then those it ``made``."""
    spaces = (*(space for space, _ in before.spaces), *made)
    return [dict(_fields(space)) for space in spaces]


def _made(make: Callable[..., Any], made: list[Any], *args: Any, **kwargs: Any) -> Any:
    """``namespace(...)`` in a rerun: ``make``'s namespace, noted in ``made``."""
    space = make(*args, **kwargs)
    made.append(space)
    return space


def _run(template: jinja2.Template, context: Any, out: list[str], size: int) -> int:
    """Run ``template`` in ``context`` onto ``out``; the characters it added."""
    limit = render_state.max_chars
    added = 0
    for chunk in template.root_render_func(context):
        added += len(chunk)
        if size + added > limit:
            raise GivenUp  # too long: the prefix's own render reports it
        out.append(chunk)
    return added


def _same(value: Any, whole: Any, pairs: dict[int, Any], k: int) -> bool:
    """Whether ``value`` (of a rerun on ``k`` messages) is ``whole`` (of the whole render):
    equal types and values, the rerun's namespaces standing for the whole render's."""
    if value is whole or pairs.get(id(value)) is whole:
        return True
    if isinstance(whole, WatchedMessages):
        if whole.__cc_cut__:
            return _sized(value, whole, k)
        mine = prefix_of(whole, k)
        return type(value) is list and len(value) == len(mine) and all(map(_is, value, mine))
    if type(whole) is _Traced:
        whole = whole.__cc_value__
    kind = type(value)
    if kind is not type(whole):
        return False
    if kind in _SCALARS:
        return bool(value == whole)
    if kind is list or kind is tuple:
        return len(value) == len(whole) and all(
            _same(a, b, pairs, k) for a, b in zip(value, whole, strict=True)
        )
    if kind is dict:
        return (
            len(value) == len(whole)
            and all(_same(a, b, pairs, k) for a, b in zip(value, whole, strict=True))
            and all(_same(value[a], whole[b], pairs, k) for a, b in zip(value, whole, strict=True))
        )
    return False  # a namespace or another object: only itself, or the rerun's own


def _sized(value: Any, whole: WatchedMessages, k: int) -> bool:
    """Whether ``value`` (of a rerun on ``k`` messages) is the first messages of the cut
    view ``whole``: then the prefix's own ends where it does (Watch.sizes; the same for
    every value that stands for the view). A watched list stands for the prefix's own."""
    if type(value) is WatchedMessages:
        value = prefix_of(value, k)
    # (its items are the prefix's own messages: it ends at message k at the furthest)
    if type(value) is not list or len(value) > list.__len__(whole):
        return False
    if not all(map(_is, value, list.__iter__(whole))):
        return False
    end = base_of(whole) + len(value)
    return whole.__cc_watch__.sizes.setdefault(id(whole), end) == end


def _is(a: Any, b: Any) -> bool:
    return a is b


def _loop_at(sequence: list[Any], index: int, environment: Any) -> LoopContext:
    # A loop over `sequence` whose next pass is the one on sequence[index] (its last item):
    # jinja's own loop object, advanced by setting the fields its passes set (jinja2 is
    # pinned in pyproject; tests/test_resume.py checks every loop value against a render)
    context = LoopContext(sequence, environment.undefined, None, 0)
    context._iterator = itertools.islice(iter(sequence), index, None)
    context.index0 = index - 1
    context._current = sequence[index - 1] if index else missing
    return context


def _initial(symbols: Any, name: str) -> str:
    """How jinja's compiled code starts a frame's variable: resolved from the context, or
    unset until the frame assigns it (jinja's own analysis of the template)."""
    load = symbols.loads.get(symbols.find_ref(name), (VAR_LOAD_UNDEFINED,))
    return str(load[0])


def _main_loop(tree: nodes.Template) -> tuple[int, nodes.For, nodes.Expr] | None:
    """The last top-level loop, when it walks a variable or a slice of one from a start
    (``messages``, ``messages[1:]``, ``messages[first:]``: nothing a second evaluation can
    change) and its body can run as one pass alone."""
    for index in range(len(tree.body) - 1, -1, -1):
        node = tree.body[index]
        if not isinstance(node, nodes.For):
            continue
        if not (_walks_messages(node) or _counts_messages(node)):
            return None
        return index, node, loop_source(node)  # type: ignore[return-value]
    return None


def _counts_messages(node: nodes.For) -> bool:
    """Whether a loop walks the indexes of a variable's messages (or of a slice of one from
    a start) from a start: ``range(messages | length)``, ``range(first, messages | length)``
    (``first`` an int or a variable), its passes running as a part of it would."""
    walk = loop_source(node)
    if not (
        isinstance(walk, nodes.Call)
        and isinstance(walk.node, nodes.Name)
        and walk.node.name == "range"
        and 1 <= len(walk.args) <= 2
        and not walk.kwargs
        and walk.dyn_args is None
        and walk.dyn_kwargs is None
    ):
        return False
    # (evaluated again for its mark: nothing whose second evaluation could differ)
    count = walk.args[-1]
    if not (
        isinstance(count, nodes.Filter)
        and count.name == "length"
        and count.node is not None
        and _plain_walk(count.node)
    ):
        return False
    first = walk.args[0] if len(walk.args) == 2 else None
    if first is not None and not isinstance(first, (nodes.Name, nodes.Const)):
        return False
    return _walks_messages(node, plain=False)


def _count_messages(loop: nodes.For) -> None:
    """Have the main loop walk its count of the messages as _Counted does."""
    count = nodes.Call(nodes.Name(_COUNT, "load"), [loop_source(loop)], [], None, None)
    walked = loop.iter
    if isinstance(walked, nodes.Filter) and walked.node is not None and walked.node is not count:
        walked.node = count  # (inside the time check)
    else:
        loop.iter = count


# Where a loop's output goes elsewhere than the render's text (a buffer, a function's)
_BUFFERED = (nodes.Macro, nodes.CallBlock, nodes.FilterBlock, nodes.AssignBlock, nodes.Block)
_PRINTING = (nodes.Output, nodes.CallBlock, nodes.FilterBlock)  # statements that print
# what a pass may see of its loop: nothing of the passes after it (`length`, `last`, ...)
_LOOP_BEHIND = frozenset({"index", "index0", "first", "previtem", "depth", "depth0", "cycle"})


def _follow_inner_loops(watched: nodes.Template, main: nodes.For) -> None:
    """Mark the loops of the main loop's body and of macros whose walks of the messages a
    watched render follows (Watch.inner_loop): each pass of theirs must run the same
    without the passes after it (of ``loop``, only what the passes before it gave; no
    ``else``, which sees none). Where a loop's output is not the render's text as it is
    made (in a macro, a captured block), its printing statements are marked to say so."""
    marked: set[int] = set()  # the printing statements marked

    def visit(node: nodes.Node, shown: bool, macro: nodes.Macro | None) -> None:
        # shown: the loop's output is the render's text as it is made; macro: the one it is in
        if (
            isinstance(node, nodes.For)
            and loop_source(node) is not node.iter
            and not node.else_
            and _sees_only_passes_before(node.body)
        ):
            node.iter.name = INNER_LOOP_GUARD  # type: ignore[attr-defined]
            if not shown:
                for statements in _statement_lists(node.body):
                    statements[:] = _with_print_marks(statements, marked)
            if macro is not None:
                _unseen_namespaces(macro, node)
        inside = shown and not isinstance(node, _BUFFERED)
        for child in node.iter_child_nodes():
            if not isinstance(child, nodes.Macro):  # (each macro is visited on its own)
                visit(child, inside, macro)

    for part in main.body:
        visit(part, True, None)
    for macro in watched.find_all(nodes.Macro):
        for part in macro.body:
            visit(part, False, macro)


def _unseen_namespaces(macro: nodes.Macro, loop: nodes.For) -> None:
    """Make the namespaces ``macro`` makes for ``loop`` alone unseen (UnseenNamespace): a
    namespace made once in the macro (``{% set n = namespace(...) %}``, within every loop
    around the loop) whose every other use, a read or a setting of a field, is in the loop,
    where no other walk of the messages is. Only the loop's own passes see what they set
    there, and what those do about it (print, set another namespace) counts (Cohere numbers
    a result's call by counting every call of the conversation)."""
    if not _walks_only_items(loop):
        return  # (a walk of the messages inside it would see its namespaces change)
    # (a loop around the loop, in the macro, would run it again on what it left there)
    around = [
        outer
        for outer in _within(macro.body, nodes.For)
        if outer is not loop and any(found is loop for found in outer.find_all(nodes.For))
    ]
    inside = {id(found) for found in _within(loop.body, (nodes.Name, nodes.NSRef))}
    reads = {
        id(got.node)
        for got in _within(loop.body, nodes.Getattr)
        if isinstance(got.node, nodes.Name)
    }
    names = _within(macro.body, (nodes.Name, nodes.NSRef))
    for assign in _within(macro.body, nodes.Assign):
        made, target = assign.node, assign.target
        if not (
            isinstance(target, nodes.Name)
            and isinstance(made, nodes.Call)
            and isinstance(made.node, nodes.Name)
            and made.node.name == "namespace"
            and id(target) not in inside
            and all(
                any(found is assign for found in outer.find_all(nodes.Assign)) for outer in around
            )
        ):
            continue
        uses = [
            found
            for found in names
            if found.name == target.name and found is not target and found is not made.node
        ]
        if uses and all(
            id(found) in inside and (isinstance(found, nodes.NSRef) or id(found) in reads)
            for found in uses
        ):
            made.node.name = _UNSEEN


def _select_views(watched: nodes.Template) -> None:
    """Rewrite each ``x | selectattr(...) | list`` (or ``rejectattr``, ``select``,
    ``reject``) of the watched template to the SELECTION filter, which makes a view of the
    messages chosen when ``x`` holds messages (``Watch.select``), else that list."""
    for outer in watched.find_all(nodes.Filter):
        inner = outer.node
        if (
            outer.name == "list"
            and not (outer.args or outer.kwargs or outer.dyn_args or outer.dyn_kwargs)
            and isinstance(inner, nodes.Filter)
            and inner.name in _SELECTING
            and inner.node is not None
            and inner.dyn_args is None
            and inner.dyn_kwargs is None
        ):
            outer.name, outer.node = SELECTION, inner.node
            outer.args = [nodes.Const(inner.name), *inner.args]
            outer.kwargs = list(inner.kwargs)


_SELECTING = frozenset({"selectattr", "rejectattr", "select", "reject"})


def _walks_only_items(loop: nodes.For) -> bool:
    """Whether every loop inside ``loop`` walks a part of an item it or a loop inside it
    walks (``message.tool_calls``): none walks the messages."""
    items: set[str] = set()
    for inner in (loop, *loop.find_all(nodes.For)):
        items.update(name.name for name in _within([inner.target], nodes.Name))
    for inner in loop.find_all(nodes.For):
        walked: Any = loop_source(inner)
        while isinstance(walked, (nodes.Getattr, nodes.Getitem, nodes.Filter)):
            walked = walked.node
        if not (isinstance(walked, nodes.Name) and walked.name in items):
            return False
    return True


def _sees_only_passes_before(body: list[nodes.Node]) -> bool:
    """Whether a loop's body uses of ``loop`` only what the passes before gave."""
    uses = [name for name in _within(body, nodes.Name) if name.name == "loop"]
    behind = [
        got
        for got in _within(body, nodes.Getattr)
        if isinstance(got.node, nodes.Name) and got.node.name == "loop" and got.attr in _LOOP_BEHIND
    ]
    return len(uses) == len(behind)


def _statement_lists(body: list[nodes.Node]) -> Iterator[list[nodes.Node]]:
    """``body`` and the lists of statements inside it (those of a macro it defines aside:
    they run where it is called)."""
    yield body
    for part in body:
        if isinstance(part, nodes.Macro):
            continue
        for name in ("body", "else_"):
            inner = getattr(part, name, None)
            if isinstance(inner, list):
                yield from _statement_lists(inner)
        if isinstance(part, nodes.If):
            for branch in part.elif_:
                yield from _statement_lists(branch.body)


def _with_print_marks(statements: list[nodes.Node], marked: set[int]) -> list[nodes.Node]:
    """The statements, each that prints (unless it prints nothing) after a mark that
    counts it (Watch.printed)."""
    out: list[nodes.Node] = []
    for part in statements:
        if isinstance(part, _PRINTING) and id(part) not in marked and not _prints_nothing(part):
            marked.add(id(part))
            out.append(marker_statement(_PRINTED, nodes.Const(0)))
        out.append(part)
    return out


def _prints_nothing(part: nodes.Node) -> bool:
    return isinstance(part, nodes.Output) and all(
        isinstance(item, nodes.TemplateData) and not item.data for item in part.nodes
    )


def _within(parts: list[nodes.Node], kinds: Any) -> list[Any]:
    """The nodes of these kinds among ``parts`` and inside them."""
    return [
        found
        for part in parts
        for found in itertools.chain((part,), part.find_all(kinds))
        if isinstance(found, kinds)
    ]


def _walks_messages(node: nodes.For, plain: bool = True) -> bool:
    """Whether a loop walks a variable or a slice of one from a start (``plain``; else
    whatever it walks), and its passes would run the same as a part of it (no loop filter,
    ``else``, recursion or ``loop.changed``, which keeps state from pass to pass)."""
    if not (
        (not plain or _plain_walk(loop_source(node)))
        and isinstance(node.target, nodes.Name)
        and node.test is None
        and not node.else_
        and not node.recursive
    ):
        return False
    return not any(
        got.attr == "changed" and isinstance(got.node, nodes.Name)
        for part in node.body
        for got in part.find_all(nodes.Getattr)
    )


def _plain_walk(node: nodes.Node) -> bool:
    if isinstance(node, nodes.Name):
        return True
    if not (isinstance(node, nodes.Getitem) and isinstance(node.node, nodes.Name)):
        return False
    cut = node.arg
    return (
        isinstance(cut, nodes.Slice)
        and cut.stop is None
        and cut.step is None
        and (cut.start is None or isinstance(cut.start, (nodes.Const, nodes.Name)))
    )
