"""A pool of worker processes that keeps the input's order (``--jobs`` of the commands).

Each worker runs ``setup(*setup_args)`` once when it starts (to load templates or a
checkpoint once per process), then ``work(item)`` on chunks of items. Results come back in
input order, and at most a few chunks per worker are in flight: a dataset of millions of
lines is read as it is processed, never held whole in memory.

With ``key`` (e.g. the template a request names), a chunk holds items of one key and goes to
a worker that already had that key, unless that worker is further behind than the others:
compiling a template costs far more than rendering with it, so a batch over many templates
compiles each in as few workers as the balance allows.

Workers are started with ``spawn`` (not ``fork``): a process that forks while a progress
thread or a Ray/Arrow thread pool is running can deadlock, and a spawned worker imports
only what it needs.
"""

from __future__ import annotations

import multiprocessing
import os
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import Any, TypeVar

__all__ = ["KeyRouter", "key_runs", "ordered_map", "resolve_jobs"]

T = TypeVar("T")
R = TypeVar("R")

# chunks in flight per worker: enough to keep each busy while the parent writes results
_AHEAD = 4
# how many more unfinished chunks a worker holding a key may have than the least busy one
# before a chunk of that key goes to another worker
_SLACK = 2


def resolve_jobs(jobs: int) -> int:
    """The number of worker processes for ``--jobs``: ``0`` is one per core."""
    if jobs < 0:
        raise ValueError(f"jobs must be 0 (one per core) or more, not {jobs}")
    return jobs or (os.cpu_count() or 1)


def _run_chunk(work: Callable[[Any], Any], chunk: list[Any]) -> list[Any]:
    return [work(item) for item in chunk]


def key_runs(
    items: Iterable[T], size: int, key: Callable[[T], Hashable] | None
) -> Iterator[tuple[Hashable, list[T]]]:
    """Runs of at most ``size`` consecutive items of one key."""
    block: list[T] = []
    current: Hashable = None
    for item in items:
        mark = key(item) if key is not None else None
        if block and (len(block) >= size or mark != current):
            yield current, block
            block = []
        current = mark
        block.append(item)
    if block:
        yield current, block


class KeyRouter:
    """Which worker a chunk of a key goes to (see the module docstring)."""

    def __init__(self, jobs: int) -> None:
        self.owners: dict[Hashable, set[int]] = {}
        self.inflight: list[deque[Any]] = [deque() for _ in range(jobs)]

    def busy(self, worker: int) -> int:
        queue = self.inflight[worker]
        while queue and queue[0].ready():
            queue.popleft()
        return len(queue)

    def choose(self, mark: Hashable) -> int:
        loads = [self.busy(w) for w in range(len(self.inflight))]
        least = min(range(len(loads)), key=loads.__getitem__)
        owners = self.owners.setdefault(mark, set())
        if owners:
            best = min(owners, key=loads.__getitem__)
            if loads[best] <= loads[least] + _SLACK:
                return best
        owners.add(least)
        return least


def ordered_map(
    work: Callable[[T], R],
    items: Iterable[T],
    jobs: int = 1,
    *,
    setup: Callable[..., None] | None = None,
    setup_args: tuple[Any, ...] = (),
    chunk: int = 16,
    key: Callable[[T], Hashable] | None = None,
) -> Iterator[R]:
    """``work(item)`` for each item, in order, over ``jobs`` processes (``1``: this one).

    ``work``, ``setup`` and ``key`` must be module-level functions (the first two are
    pickled by name); with one job ``setup`` runs in this process before the first item.
    """
    jobs = resolve_jobs(jobs)
    if jobs == 1:
        if setup is not None:
            setup(*setup_args)
        for item in items:
            yield work(item)
        return
    context = multiprocessing.get_context("spawn")
    pools = [context.Pool(1, initializer=setup, initargs=setup_args) for _ in range(jobs)]
    try:
        router = KeyRouter(jobs)
        pending: deque[Any] = deque()
        for mark, block in key_runs(items, chunk, key):
            worker = router.choose(mark)
            result = pools[worker].apply_async(_run_chunk, (work, block))
            router.inflight[worker].append(result)
            pending.append(result)
            while len(pending) > jobs * _AHEAD:
                yield from pending.popleft().get()
        while pending:
            yield from pending.popleft().get()
    finally:
        for pool in pools:
            pool.terminate()
        for pool in pools:
            pool.join()
