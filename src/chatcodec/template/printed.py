"""How much text a value prints as, measured before Python prints it.

``str(value)`` of a list, a dict or a namespace is one C call that cannot be interrupted, and
a list holding n references to one long string prints that string n times: ``[s] * 1000``
is a thousand items but a thousand times ``len(s)`` characters. :func:`measure` walks the
value first and adds up a lower bound of its printed length, counting a shared value each
time it is referenced, and stops as soon as the total passes a limit. Each distinct container
is walked once (its size is remembered by identity), so the walk is linear in the number of
container items, whatever the sharing; lists of plain scalars and strings are summed in C.

The bound is a lower one (a string prints at least its own length, a number at least one
digit), so refusing a value whose bound passes the limit never refuses a value that would
have fitted; a value that passes prints at most a small constant factor more (escapes in
strings, long floats: at most 10 characters per counted one).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import jinja2.utils

__all__ = ["CONTAINERS", "Measure", "measure"]

_NAMESPACE_ATTRS = "_Namespace__attrs"
_DICT_VIEWS: tuple[type, ...] = (type({}.keys()), type({}.values()), type({}.items()))
# What a template can build or be given that prints its items
CONTAINERS: tuple[type, ...] = (
    list,
    tuple,
    dict,
    set,
    frozenset,
    jinja2.utils.Namespace,
    *_DICT_VIEWS,
)
_NUMBERS = frozenset({int, float, bool, type(None)})
_TEXT = frozenset({str, bytes})
_SCALARS = _NUMBERS | _TEXT
_CHUNK = 1 << 16  # items walked between two calls of `step`
_SMALL = 32  # containers up to this size are walked item by item


class Measure:
    """One measurement: ``size`` (printed characters, at least) and ``nodes`` (items
    visited, counting shared ones each time), stopped soon after ``size`` passes ``limit``."""

    __slots__ = ("limit", "size", "nodes", "_known", "_step")

    def __init__(self, limit: int, step: Callable[[], None]) -> None:
        self.limit = limit
        self.size = 0
        self.nodes = 0
        self._known: dict[int, tuple[int, int]] = {}  # id -> (size, nodes) of a container
        self._step = step  # called between chunks of a long walk: the caller's deadline check

    def over(self) -> bool:
        return self.size > self.limit

    def add(self, value: Any) -> None:
        """Add what ``value`` prints as inside a container (its repr)."""
        size, nodes = self._item(value)
        self.size += size
        self.nodes += nodes

    def _item(self, value: Any) -> tuple[int, int]:
        kind = type(value)
        if kind is str:
            return len(value) + 2, 1
        if kind is int:
            return _int_size(value), 1
        if kind in _NUMBERS:
            return 1, 1
        if isinstance(value, (str, bytes)):
            return len(value) + 2, 1
        if not isinstance(value, CONTAINERS):
            return 1, 1
        key = id(value)
        known = self._known.get(key)
        if known is not None:
            return known
        self._known[key] = (0, 1)  # a container met again inside itself prints as `[...]`
        known = self._container(value)
        self._known[key] = known
        return known

    def _container(self, value: Any) -> tuple[int, int]:
        if isinstance(value, jinja2.utils.Namespace):  # `<Namespace {...}>`
            size, nodes = self._container(object.__getattribute__(value, _NAMESPACE_ATTRS))
            return size + 12, nodes + 1
        mapping: Any = value if isinstance(value, dict) else None
        if type(value) is _DICT_VIEWS[2]:
            mapping = getattr(value, "mapping")  # noqa: B009 - the view's dict, for mypy
        if mapping is None:  # a sequence, a set or a keys/values view: `[a, b]`
            if len(value) > _SMALL:
                size, nodes = self._items(value)
            else:
                size, nodes = self._few(value)
            return size + 2, nodes + 1
        if len(mapping) > _SMALL:  # `{k: v, ...}`: k, v and 2 per item
            keys, key_nodes = self._items(mapping.keys())
            values, value_nodes = self._items(mapping.values())
            return keys + values + 2, key_nodes + value_nodes + 1
        size, nodes = self._few(mapping.values())
        keys, key_nodes = self._few(mapping.keys())  # its ", "s stand for the ": "s
        return size + keys + 2, nodes + key_nodes + 1

    def _few(self, values: Any) -> tuple[int, int]:
        # a small container's items, one by one (cheaper than the C passes of _chunk)
        count = len(values)
        size = count * 3 - 2 if count else 0  # one char each at least, and ", " between
        nodes = count
        for value in values:
            kind = type(value)
            if kind is str:
                size += len(value) + 1
            elif kind is int:
                if not -10 < value < 10:  # digits - 1 of a b-bit number >= 0.3 (b - 1)
                    size += (value.bit_length() - 1) * 3 // 10
            elif kind not in _NUMBERS:
                item_size, item_nodes = self._item(value)
                size += item_size - 1
                nodes += item_nodes - 1
        return size, nodes

    def _items(self, values: Any) -> tuple[int, int]:
        # the items and a ", " between two of them
        count = len(values)
        size = max(count - 1, 0) * 2
        if count <= _CHUNK:
            return self._chunk(values, size)
        nodes = 0
        rest = iter(values)
        while size <= self.limit:
            self._step()
            chunk = list(itertools.islice(rest, _CHUNK))
            if not chunk:
                break
            size, chunk_nodes = self._chunk(chunk, size)
            nodes += chunk_nodes
        return size, nodes

    def _chunk(self, values: Any, size: int) -> tuple[int, int]:
        kinds = set(map(type, values))
        if kinds <= _SCALARS:  # plain scalars and strings: summed in C
            size += len(values)  # one character each at least, strings' quotes count there
            if str in kinds:
                size += sum(map(len, filter(str.__instancecheck__, values)))
            if bytes in kinds:
                size += sum(map(len, filter(bytes.__instancecheck__, values)))
            if int in kinds:
                ints = list(filter(int.__instancecheck__, values))
                bits = sum(map(int.bit_length, ints)) - 4 * len(ints)
                size += max(0, bits) * 3 // 10
            return size, len(values)
        nodes = 0
        for value in values:
            item_size, item_nodes = self._item(value)
            size += item_size
            nodes += item_nodes
            if size > self.limit:
                break
        return size, nodes


def _int_size(value: int) -> int:
    # digits of a b-bit number >= 1 + 0.3 (b - 4)
    if -10 < value < 10:
        return 1
    return 1 + max(0, value.bit_length() - 4) * 3 // 10


def measure(value: Any, limit: int, step: Callable[[], None]) -> Measure:
    """A lower bound of ``len(str(value))`` and the nodes it holds, stopped past ``limit``.

    ``step`` is called between chunks of a long walk (a deadline check may raise from it).
    """
    result = Measure(limit, step)
    if isinstance(value, (str, bytes)):
        result.size, result.nodes = len(value), 1
    elif isinstance(value, CONTAINERS):
        result.add(value)
    else:
        result.size, result.nodes = 1, 1
    return result
