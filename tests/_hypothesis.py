"""Hypothesis for the tests: the seeded settings every property test here runs under, and
strategies for chat requests (mostly the valid shape of each field, now and then any JSON
value, so that the checks behind the first one are reached too)."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

# the same examples on every run, so a failure is reproducible; no example database
SEEDED = settings(
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
        HealthCheck.function_scoped_fixture,
    ],
)

NAMED = {"type": "function", "function": {"name": "get_weather"}}

_KEYS = st.sampled_from(
    ["role", "content", "type", "text", "function", "name", "arguments", "tool_calls"]
    + ["parameters", "properties", "required", "json_schema", "schema", "reasoning_content"]
)
_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(max_size=6)
    | st.sampled_from(["user", "assistant", "system", "tool", "function", "text", "object"])
)
JSON = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS | st.text(max_size=3), inner),
    max_leaves=10,
)


def maybe(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly the valid shape (so the checks behind the first are reached), one time in
    eight any JSON value."""
    return st.sampled_from([True] * 7 + [False]).flatmap(lambda ok: valid if ok else JSON)


_ROLE = maybe(st.sampled_from(["user", "assistant", "system", "tool"]))
_CALL = st.fixed_dictionaries(
    {
        "type": maybe(st.just("function")),
        "function": maybe(
            st.fixed_dictionaries({"name": maybe(st.just("get_weather")), "arguments": JSON})
        ),
    }
)
_MESSAGE = maybe(
    st.fixed_dictionaries(
        {"role": _ROLE},
        optional={
            "content": maybe(st.text(max_size=8)),
            "tool_calls": maybe(st.lists(maybe(_CALL), max_size=2)),
            "reasoning_content": maybe(st.text(max_size=8)),
        },
    )
)
MESSAGES = maybe(st.lists(_MESSAGE, min_size=1, max_size=3))
_PARAMETERS = st.fixed_dictionaries(
    {"type": maybe(st.just("object"))},
    optional={
        "properties": maybe(
            st.dictionaries(
                st.sampled_from(["city", "n"]),
                maybe(st.fixed_dictionaries({"type": maybe(st.just("string"))})),
                max_size=2,
            )
        ),
        "required": maybe(st.lists(st.sampled_from(["city", "n"]), max_size=2)),
    },
)
_TOOL = maybe(
    st.fixed_dictionaries(
        {
            "type": maybe(st.just("function")),
            "function": maybe(
                st.fixed_dictionaries(
                    {"name": maybe(st.just("get_weather"))},
                    optional={"parameters": maybe(_PARAMETERS)},
                )
            ),
        }
    )
)
TOOLS = st.none() | maybe(st.lists(_TOOL, max_size=2))
TOOL_CHOICE = maybe(
    st.sampled_from(
        ["auto", "auto", "auto", "required", "none", NAMED, NAMED]
        + [{"type": "function", "function": {"name": 5}}, {"type": "function"}]
    )
)
RESPONSE_FORMAT = st.none() | maybe(
    st.fixed_dictionaries(
        {"type": maybe(st.sampled_from(["text", "json_object", "json_schema"]))},
        optional={"schema": maybe(_PARAMETERS), "json_schema": maybe(st.just({"schema": {}}))},
    )
)
CONTINUE = maybe(st.sampled_from([None, False, True, "content", "reasoning_content"]))
REPLIES = (
    "Hello",
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
    '{"city": "Paris"}',
    "<think>hm</think>{",
)
