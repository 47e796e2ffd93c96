"""A pool of worker processes that keeps the input's order (``chatcodec batch --jobs``).

Each worker runs ``setup(*setup_args)`` once when it starts (to load templates or a
checkpoint once per process), then ``work(item)`` on chunks of items. Results come back in
input order, and at most a few chunks per worker are in flight: a dataset of millions of
lines is read as it is processed, never held whole in memory.

Workers are started with ``spawn`` (not ``fork``): a process that forks while a progress
thread or a Ray/Arrow thread pool is running can deadlock, and a spawned worker imports
only what it needs.
"""

from __future__ import annotations

import multiprocessing
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from typing import Any, TypeVar

__all__ = ["ordered_map", "resolve_jobs"]

T = TypeVar("T")
R = TypeVar("R")

# chunks in flight per worker: enough to keep each busy while the parent writes results
_AHEAD = 4


def resolve_jobs(jobs: int) -> int:
    """The number of worker processes for ``--jobs``: ``0`` is one per core."""
    if jobs < 0:
        raise ValueError(f"jobs must be 0 (one per core) or more, not {jobs}")
    return jobs or (os.cpu_count() or 1)


def _run_chunk(work: Callable[[Any], Any], chunk: list[Any]) -> list[Any]:
    return [work(item) for item in chunk]


def ordered_map(
    work: Callable[[T], R],
    items: Iterable[T],
    jobs: int = 1,
    *,
    setup: Callable[..., None] | None = None,
    setup_args: tuple[Any, ...] = (),
    chunk: int = 16,
) -> Iterator[R]:
    """``work(item)`` for each item, in order, over ``jobs`` processes (``1``: this one).

    ``work`` and ``setup`` must be module-level functions (they are pickled by name); with
    one job ``setup`` runs in this process before the first item.
    """
    jobs = resolve_jobs(jobs)
    if jobs == 1:
        if setup is not None:
            setup(*setup_args)
        for item in items:
            yield work(item)
        return
    context = multiprocessing.get_context("spawn")
    with context.Pool(jobs, initializer=setup, initargs=setup_args) as pool:
        pending: deque[Any] = deque()
        source = iter(items)
        while True:
            block = list(islice(source, chunk))
            if not block:
                break
            pending.append(pool.apply_async(_run_chunk, (work, block)))
            while len(pending) > jobs * _AHEAD:
                yield from pending.popleft().get()
        while pending:
            yield from pending.popleft().get()
