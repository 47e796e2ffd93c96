"""The ordered worker pool behind ``--jobs``: input order kept, chunks of one key, and a key
sent back to the worker that had it unless that worker is behind."""

from __future__ import annotations

import os

import pytest

from chatcodec.workers import KeyRouter, key_runs, ordered_map, resolve_jobs


def _square(value: int) -> int:
    return value * value


def _where(item: tuple[str, int]) -> tuple[str, int, int]:
    return item[0], item[1], os.getpid()


def _first(item: tuple[str, int]) -> str:
    return item[0]


def test_two_workers_keep_the_input_order() -> None:
    assert list(ordered_map(_square, range(300), 2, chunk=7)) == [v * v for v in range(300)]


def test_a_keyed_map_keeps_the_order_and_uses_both_workers() -> None:
    items = [(f"t{n // 40}", n) for n in range(400)]
    results = list(ordered_map(_where, items, 2, chunk=16, key=_first))
    assert [(k, n) for k, n, _ in results] == items
    assert os.getpid() not in {pid for *_, pid in results}


def test_chunks_hold_one_key_and_at_most_the_size() -> None:
    items = ["a", "a", "a", "b", "a", "a"]
    assert list(key_runs(items, 2, str)) == [
        ("a", ["a", "a"]),
        ("a", ["a"]),
        ("b", ["b"]),
        ("a", ["a", "a"]),
    ]
    assert list(key_runs(range(5), 2, None)) == [(None, [0, 1]), (None, [2, 3]), (None, [4])]


class _Pending:
    def __init__(self, done: bool = False) -> None:
        self.done = done

    def ready(self) -> bool:
        return self.done


def test_a_key_goes_back_to_its_worker_unless_it_is_behind() -> None:
    router = KeyRouter(2)
    assert router.choose("a") == 0  # both idle: the first
    router.inflight[0].append(_Pending())
    assert router.choose("b") == 1  # a new key: the least busy
    router.inflight[1].append(_Pending())
    router.inflight[0].extend([_Pending(), _Pending()])  # worker 0: 3 unfinished, worker 1: 1
    assert router.choose("a") == 0  # within the slack: the worker that compiled it
    router.inflight[0].append(_Pending())  # 4 against 1: beyond the slack
    assert router.choose("a") == 1
    assert router.owners["a"] == {0, 1}
    for pending in router.inflight[0]:
        pending.done = True
    assert router.choose("b") == 1 and router.busy(0) == 0


def test_jobs_zero_is_one_per_core() -> None:
    assert resolve_jobs(0) == (os.cpu_count() or 1) and resolve_jobs(3) == 3
    with pytest.raises(ValueError):
        resolve_jobs(-1)
