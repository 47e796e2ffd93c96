"""Prefix renders resumed from one render of the whole conversation (``render_with_spans``).

Derived spans need, for every assistant turn, the render of the conversation before the turn
(with a generation prompt) and of the conversation up to it. Rendering each prefix from the
start runs the conversation's start (system prompt, tools) and every earlier turn again, so
a conversation costs a number of renders that grows with its length.

Most templates are a start, one loop over the messages, and an end. The render of
``messages[:k]`` runs exactly as the render of all the messages did until the loop begins
message ``k - 1``, *as long as nothing before that point read message ``k`` or later, or
how many messages there are*. From there on it is one pass of the loop (on message
``k - 1``, now the last) and the template's end. So one render of the whole conversation,
watched, gives each such prefix for the price of one pass and the end:

- the template gets the messages as a ``WatchedMessages`` list, which notes the furthest
  message any read reached (a length, a negative index, a reversed walk or a comparison
  reach them all); slices that keep the start are watched views;
- a mark before each top-level statement of the start and at the start of every pass of
  the loop records how much text is out, the top-level variables, the fields of every
  ``namespace()`` and how far the reads since the last mark reached;
- ``messages[:k]`` resumes at the mark of message ``k - 1``: the text out so far, then the
  loop's body alone on message ``k - 1`` (with the loop variables of a loop over ``k``
  messages), then the template's end, both on the prefix's own inputs, with the
  namespaces put back as they were at the mark.

That is exact when no read before the mark reached message ``k``. The passes of the loop
before it must not have; statements of the start that did (a scan for the last user
query, a count of the messages) are run again on the prefix's inputs, from their marks,
and must leave the same text and state (variables and namespaces, compared by type and
value) as they left in the whole render. Everything else a render can see is the same in
both: the inputs are shared and immutable, and a template's only mutable state is its
namespaces (a loop's body cannot assign variables outside it). A prefix that cannot be
resumed (no mark, a pass that read too far, a rerun that differs, a resumed part that
reads past its own messages or raises) is rendered from the start. So a resumed prefix is
the prefix's render, not an estimate; the tests hold every result to
``derive_spans_by_prefixes``.

Templates whose shape this cannot follow get no plan (``ResumePlan.build`` returns None):
no top-level ``{% for %}`` over a variable or a slice of one from a start,
``loop.changed``, a loop filter or ``else``, recursive loops, ``cycler``/``joiner`` (state
outside namespaces), or a name the end assigns that the start assigns too. A ``break``
needs nothing: the passes after it have no marks.
"""

from __future__ import annotations

import copy
import itertools
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.idtracking import VAR_LOAD_UNDEFINED, symbols_for_node
from jinja2.runtime import LoopContext
from jinja2.utils import missing

from .environment import MARK_PREFIX, loop_source, marker_statement, render_state

__all__ = ["ResumePlan", "Watch", "WatchedMessages"]

_WHOLE = 1 << 62  # "read as far as the end": a length, a negative index, a full walk
_PASS = MARK_PREFIX + "_pass"  # the render variables the marks call
_STEP = MARK_PREFIX + "_step"
_WALK = MARK_PREFIX + "_walk"
_ITEMS = "__chatcodec_items"
_STATEFUL = frozenset({"cycler", "joiner"})
_SCALARS = (str, int, float, bool, type(None))
# Namespaces copied over all the marks of one watched render, at most: a template that
# makes a namespace per message and has many messages, or makes thousands, is not watched
# further (its marks would cost more than rendering its prefixes)
_SNAPSHOTS = 1 << 16


class GivenUp(Exception):
    """A resumed prefix read past its own messages."""


@dataclass(slots=True)
class Mark:
    """The render's state at a mark."""

    item: Any  # the pass's message, or the statement's index
    position: int  # characters out
    names: dict[str, Any]  # the template's top-level variables
    spaces: list[tuple[Any, dict[str, Any]]]  # each namespace made so far and its fields
    furthest: int  # the furthest message read so far
    reach: int  # the furthest read since the last mark of a statement


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
        # per mark's variables (by id: the marks keep them alive), what _entered works out
        self.entered: dict[int, tuple[dict[str, Any], list[Any], list[str]]] = {}
        self.walked: Any = None  # what the main loop walks
        # False once a mark cannot hold the render's state: a variable or namespace field
        # holds an iterator (a filter's lazy result, whose state moves on with every read),
        # or the namespaces are too many to copy at every mark (_SNAPSHOTS). Nothing resumes.
        self.usable = True
        self.copies = _SNAPSHOTS

    def see(self, index: int) -> None:
        if index >= self.limit:
            raise GivenUp
        if index > self.furthest:
            self.furthest = index
        if index > self.reach:
            self.reach = index

    def hooks(self, make_namespace: Callable[..., Any]) -> dict[str, Any]:
        """The render variables the watched template's marks and namespaces call."""

        def on_step(context: Any, index: int) -> None:
            names = dict(context.vars)
            if self.usable:  # the variables the last statement assigned
                known = self.steps[-1].names if self.steps else {}
                self.usable = not any(
                    _iterator(value)
                    for name, value in names.items()
                    if known.get(name) is not value
                )
            self.steps.append(self._mark(index, names))
            self.reach = -1

        def on_walk(context: Any, walked: Any) -> None:
            self.walked = walked

        def on_pass(context: Any, item: Any) -> None:
            # a loop's body cannot assign top-level variables: the loop's start saw them all
            self.passes[id(item)] = self._mark(item, self.steps[-1].names)

        def namespace(*args: Any, **kwargs: Any) -> Any:
            space = make_namespace(*args, **kwargs)
            self.spaces.append(space)
            return space

        return {_STEP: on_step, _WALK: on_walk, _PASS: on_pass, "namespace": namespace}

    def _mark(self, item: Any, names: dict[str, Any]) -> Mark:
        self.copies -= len(self.spaces)
        if self.copies < 0:
            self.usable = False
        if not self.usable:  # nothing will resume: no copies
            return Mark(item, render_state.position, names, [], self.furthest, self.reach)
        spaces = [(space, dict(_fields(space))) for space in self.spaces]
        self.usable = not any(any(map(_iterator, fields.values())) for _, fields in spaces)
        return Mark(item, render_state.position, names, spaces, self.furthest, self.reach)


def _iterator(value: Any) -> bool:
    """Whether ``value``, or an item of a list or tuple it is, is an iterator (the messages'
    watched lists hold messages, and reading them would count as a read)."""
    if type(value) is list or type(value) is tuple:
        return any(isinstance(item, Iterator) for item in value)
    return isinstance(value, Iterator)


def _fields(space: Any) -> dict[str, Any]:
    # jinja's Namespace keeps its fields in one private dict (jinja2 is pinned in pyproject)
    fields: dict[str, Any] = space._Namespace__attrs
    return fields


def _restore(spaces: list[tuple[Any, dict[str, Any]]]) -> None:
    for space, fields in spaces:
        kept = _fields(space)
        kept.clear()
        kept.update(fields)


class WatchedMessages(list):  # type: ignore[type-arg]
    """The conversation's messages, noting the furthest message a template read.

    Every read of a plain list goes through these methods (the sandbox refuses the ones
    that change a list). A template sees nothing a plain list does not have: the watch and
    where a view made by ``messages[i:]`` starts are in dunder slots (attributes a template
    cannot read, as it cannot read any ``__name__`` of a list), the helpers are functions.
    """

    __slots__ = ("__cc_watch__", "__cc_base__")

    def __init__(self, items: list[Any], watch: Watch, base: int = 0) -> None:
        list.__init__(self, items)
        self.__cc_watch__ = watch
        self.__cc_base__ = base

    def __len__(self) -> int:
        _see(self, _WHOLE)
        return list.__len__(self)

    def __bool__(self) -> bool:
        size = list.__len__(self)
        _see(self, 0 if size else _WHOLE)
        return size > 0

    def __iter__(self) -> Iterator[Any]:
        get = list.__getitem__
        for index in range(list.__len__(self)):
            _see(self, index)
            yield get(self, index)
        _see(self, _WHOLE)

    def __reversed__(self) -> Iterator[Any]:
        _see(self, _WHOLE)
        return list.__reversed__(self)

    def __getitem__(self, key: Any) -> Any:
        if type(key) is int and 0 <= key < list.__len__(self):
            _see(self, key)
            return list.__getitem__(self, key)
        if type(key) is slice and key.stop is None and key.step in (None, 1):
            start = key.start or 0
            if type(start) is int and 0 <= start:
                kept = list.__getitem__(self, key)
                return WatchedMessages(kept, self.__cc_watch__, self.__cc_base__ + start)
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
    view.__cc_watch__.see(view.__cc_base__ + index if index < _WHOLE else _WHOLE)


def base_of(view: WatchedMessages) -> int:
    """Where a watched view made by ``messages[i:]`` starts in the conversation."""
    return view.__cc_base__


def prefix_of(view: WatchedMessages, k: int) -> list[Any]:
    """A watched list as the render of the first ``k`` messages has it."""
    return list.__getitem__(view, slice(0, max(0, k - view.__cc_base__)))


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
    fields: list[dict[str, Any]]  # the fields of the namespaces made before them
    known: int  # how many namespaces were made before them

    def created(self, after: Mark) -> list[tuple[Any, dict[str, Any]]]:
        """The namespaces the whole render made in the same statements."""
        return after.spaces[self.known :]

    def left(self, before: Mark, after: Mark, text: str, k: int) -> bool:
        """Whether the rerun left what the whole render left between ``before`` and
        ``after``: the same text, variables and namespace fields."""
        if self.text != text[before.position : after.position]:
            return False
        names = dict(before.names, **self.assigned)
        created = self.created(after)
        if names.keys() != after.names.keys() or len(self.made) != len(created):
            return False
        pairs = {id(new): old for new, (old, _) in zip(self.made, created, strict=True)}
        return (
            all(_same(value, after.names[name], pairs, k) for name, value in names.items())
            and _same(self.fields, [f for _, f in after.spaces[: self.known]], pairs, k)
            and _same(
                [dict(_fields(space)) for space in self.made],
                [fields for _, fields in created],
                pairs,
                k,
            )
        )


def _reads_past(watch: Watch, k: int) -> list[tuple[int, int]]:
    """The runs of consecutive statements of the start (first, stop) that read message
    ``k`` or later in the watched render."""
    steps = watch.steps
    runs: list[tuple[int, int]] = []
    for i in range(len(steps) - 1):
        if steps[i + 1].reach >= k:
            if runs and runs[-1][1] == i:
                runs[-1] = (runs[-1][0], i + 1)
            else:
                runs.append((i, i + 1))
    return runs


@dataclass
class _Part:
    """Top-level statements compiled alone: what they assign that starts unset in them."""

    template: jinja2.Template
    fresh: frozenset[str]


@dataclass(repr=False, eq=False)
class ResumePlan:
    """How to resume prefix renders of one template (see the module's text)."""

    watched: jinja2.Template  # the template with its marks
    tail: jinja2.Template  # the loop (for one pass) and what follows it
    unset_names: frozenset[str]  # top-level names that read as unset until assigned
    reads_flag_early: bool  # add_generation_prompt is read before the loop ends
    start: list[nodes.Node]  # the statements before the loop
    compile_tree: Callable[[nodes.Template], jinja2.Template]
    root: Any  # jinja's symbols of the whole template
    watched_globals: dict[str, Any] = field(default_factory=dict)  # as renders take them
    _globals: dict[str, Any] = field(default_factory=dict)
    _parts: dict[tuple[int, int], _Part | None] = field(default_factory=dict)

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
        item = nodes.Name(loop.target.name, "load")  # type: ignore[attr-defined]
        watched.body[index].body.insert(0, marker_statement(_PASS, item))  # type: ignore[attr-defined]
        watched.body.insert(index, marker_statement(_WALK, copy.deepcopy(walked)))
        for at in range(index, -1, -1):
            watched.body.insert(at, marker_statement(_STEP, nodes.Const(at)))
        plan = cls(
            compile_tree(watched),
            compile_tree(nodes.Template([body, *copy.deepcopy(rest)])),
            frozenset(n for n in root.stores if _initial(root, n) == VAR_LOAD_UNDEFINED),
            reads_flag,
            copy.deepcopy(start),
            compile_tree,
            root,
        )
        plan.tail.root_render_func.__globals__["LoopContext"] = _resumed_loop
        plan._globals = dict(plan.tail.globals)
        plan.watched_globals = dict(plan.watched.globals)
        return plan

    def context_names(self, variables: dict[str, Any]) -> dict[str, Any]:
        """What every resumed prefix of a render with ``variables`` starts its context from."""
        return dict(self._globals, **variables)

    def resume(
        self, watch: Watch, text: str, names: dict[str, Any], k: int, prompt: bool
    ) -> str | None:
        """The render of the first ``k`` messages with ``add_generation_prompt=prompt``,
        resumed at the watched render's mark of message ``k - 1`` (``text``: that render's
        text; ``names``: ``context_names`` of the render's variables); None when it cannot
        be resumed there. Runs inside a render's state (``render_state.begin``)."""
        chat = watch.chat
        item = chat[k - 1] if 0 < k <= len(chat) and watch.usable else None
        mark = watch.passes.get(id(item))
        # the whole conversation's render can read all of it: its prefix is itself
        bound = k if k < len(chat) else _WHOLE + 1
        if mark is None or mark.item is not item or mark.reach >= bound:
            return None
        walked = watch.walked
        if not isinstance(walked, WatchedMessages) or k - 1 < base_of(walked):
            return None
        watch.limit = bound
        try:
            if mark.furthest >= bound and not self._rerun_start(watch, text, names, k, prompt):
                return None
            _restore(mark.spaces)
            names = self._entered(watch, names, mark.names, k, prompt)
            items = [item]
            names[_ITEMS] = items
            loop = _loop_at(prefix_of(walked, k), k - 1 - base_of(walked), self.tail.environment)
            _pending.start = (items, loop)
            out = [text[: mark.position]]
            _run(self.tail, self._context(names), out, mark.position)
        except Exception:  # noqa: BLE001 - read too far, or raised: rendered from the start
            return None
        finally:
            watch.limit = _WHOLE + 1
            _pending.start = None
        return "".join(out)

    def _context(self, names: dict[str, Any]) -> Any:
        environment = self.tail.environment
        return environment.context_class(environment, names, None, {}, globals=self._globals)

    def _entered(
        self, watch: Watch, names: dict[str, Any], marked: dict[str, Any], k: int, prompt: bool
    ) -> dict[str, Any]:
        """``names`` with the top-level variables ``marked`` at a mark, as the render of the
        first ``k`` messages has them (the part of that which is the same for every prefix
        is worked out once per mark's variables)."""
        entry = watch.entered.get(id(marked))
        if entry is None:
            base = names.copy()
            for name in self.unset_names.difference(marked):
                base[name] = missing  # assigned later at the top level: unset until then
            views = [(n, v) for n, v in marked.items() if isinstance(v, WatchedMessages)]
            base.update((n, v) for n, v in marked.items() if not isinstance(v, WatchedMessages))
            # the prefix's own inputs, unless the template has its own variables by the names
            given = [
                n
                for n in ("messages", "add_generation_prompt")
                if n not in marked and n not in self.unset_names
            ]
            entry = watch.entered[id(marked)] = (base, views, given)
        base, views, given = entry
        entered = base.copy()
        for name in given:
            entered[name] = watch.chat[:k] if name == "messages" else prompt
        for name, view in views:
            entered[name] = prefix_of(view, k)
        return entered

    def _rerun_start(
        self, watch: Watch, text: str, base: dict[str, Any], k: int, prompt: bool
    ) -> bool:
        """Whether the statements of the start that read message ``k`` or later, run again
        on the first ``k`` messages, leave the same text and state. Each run of consecutive
        such statements runs from its mark and is compared at the next: the statements
        between runs read nothing that differs, so they do the same in both renders."""
        for read in _reads_past(watch, k):
            rerun = self._rerun(watch, base, k, prompt, read)
            if rerun is None or not rerun.left(watch.steps[read[0]], watch.steps[read[1]], text, k):
                return False
        return True

    def _rerun(
        self, watch: Watch, base: dict[str, Any], k: int, prompt: bool, read: tuple[int, int]
    ) -> _Rerun | None:
        """Statements ``read[0]`` to ``read[1] - 1`` of the start run again on the first
        ``k`` messages, from the whole render's state before them."""
        part = self._part(*read)
        before = watch.steps[read[0]]
        if part is None or part.fresh & before.names.keys():
            return None  # it would start unset a variable the whole render had set
        _restore(before.spaces)
        names = self._entered(watch, base, before.names, k, prompt)
        made: list[Any] = []
        make = names["namespace"]

        def namespace(*args: Any, **kwargs: Any) -> Any:
            space = make(*args, **kwargs)
            made.append(space)
            return space

        names["namespace"] = namespace
        context = self._context(names)
        out: list[str] = []
        limit = watch.limit
        watch.limit = k if k < len(watch.chat) else _WHOLE + 1
        try:
            _run(part.template, context, out, before.position)
        except Exception:  # noqa: BLE001 - read past its messages, or raised: no rerun
            return None
        finally:
            watch.limit = limit
        fields = [dict(_fields(space)) for space, _ in before.spaces]
        return _Rerun("".join(out), dict(context.vars), made, fields, len(before.spaces))

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
            else:
                self._parts[key] = _Part(self.compile_tree(tree), fresh)
        return self._parts[key]


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
    if value is whole:
        return True
    if isinstance(whole, WatchedMessages):
        mine = prefix_of(whole, k)
        return type(value) is list and len(value) == len(mine) and all(map(_is, value, mine))
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
    return pairs.get(id(value)) is whole  # a namespace the rerun made; else only identity


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
        walked = loop_source(node)
        if not (
            _plain_walk(walked)
            and isinstance(node.target, nodes.Name)
            and node.test is None
            and not node.else_
            and not node.recursive
        ):
            return None
        for part in node.body:
            for got in part.find_all(nodes.Getattr):
                if got.attr == "changed" and isinstance(got.node, nodes.Name):
                    return None  # loop.changed keeps state from pass to pass
        return index, node, walked  # type: ignore[return-value]
    return None


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
