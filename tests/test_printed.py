"""template/printed.py: the measured text of a value is a lower bound of what Python prints,
close to it, and counts a shared value each time it is referenced."""

from __future__ import annotations

from typing import Any

import jinja2.utils
from hypothesis import given, settings
from hypothesis import strategies as st

from chatcodec.template.printed import measure

SCALARS = (
    st.text(max_size=30)
    | st.binary(max_size=10)
    | st.integers()
    | st.floats(allow_nan=True)
    | st.booleans()
    | st.none()
)
TREES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=40)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=5) | st.integers(), inner, max_size=8)
        | inner.map(lambda v: jinja2.utils.Namespace(a=v))
    ),
    max_leaves=60,
)
# shared references at the top only: repeated inside the recursion, a value could grow
# exponentially with its depth (a rare draw that took minutes and gigabytes to print)
VALUES = (
    TREES
    | TREES.map(lambda v: [v] * 70)  # a reference repeated past the walk's small path
    | TREES.map(lambda v: {"a": v, "b": [v, v]}.items())
)


def _unlimited(value: Any) -> int:
    return measure(value, 10**15, lambda: None).size


@settings(max_examples=300, deadline=None)
@given(VALUES)
def test_the_measure_never_passes_the_printed_length(value: Any) -> None:
    printed = len(str(value))
    assert _unlimited(value) <= printed
    # never far below either: at most 10 printed characters per counted one (floats,
    # escapes), plus the brackets of a container
    assert printed <= 10 * _unlimited(value) + 30


def test_shared_references_count_each_time() -> None:
    text = "x" * 1000
    assert _unlimited([text] * 1000) >= 1000 * 1000
    inner = [text, text]
    assert _unlimited([inner] * 500) >= 1000 * 1000
    assert _unlimited({"a": [text] * 1000}) >= 1000 * 1000


def test_the_walk_stops_past_the_limit_and_steps() -> None:
    steps = []
    doubled: Any = "x" * 100
    for _ in range(40):  # 2**40 references to one string: a walk that never stopped would hang
        doubled = [doubled, doubled]
    measured = measure(doubled, 1_000_000, lambda: steps.append(1))
    assert measured.over()
    big = list(range(300_000))
    measure(big, 10**12, lambda: steps.append(1))
    assert steps, "a long walk calls its step (the deadline check) between chunks"


def test_a_container_inside_itself_is_measured_once() -> None:
    holder = jinja2.utils.Namespace()
    loop = [holder]
    holder["self"] = loop
    assert _unlimited(loop) <= len(str(loop))
