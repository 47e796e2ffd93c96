"""The stream's per-chunk deltas, made without the frozen dataclasses' __init__, are the
dataclass-made ones in every way a consumer can tell: equal, hashable alike, immutable,
their unset fields at the defaults, their repr the same."""

from __future__ import annotations

import dataclasses

import pytest

from chatcodec.reply import Delta, ToolCallDelta
from chatcodec.reply.message import arguments_delta, content_delta, reasoning_delta

CASES = [
    (content_delta("héllo"), Delta(content="héllo")),
    (reasoning_delta("think"), Delta(reasoning_content="think")),
    (arguments_delta(2, '"a\\nb'), Delta(tool_call=ToolCallDelta(index=2, arguments='"a\\nb'))),
]


@pytest.mark.parametrize(("fast", "made"), CASES, ids=["content", "reasoning", "arguments"])
def test_a_fast_delta_is_the_dataclass_one(fast: Delta, made: Delta) -> None:
    assert fast == made and made == fast
    assert hash(fast) == hash(made)
    assert repr(fast) == repr(made)
    assert dataclasses.asdict(fast) == dataclasses.asdict(made)
    assert fast.to_openai() == made.to_openai()
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.content = "x"  # type: ignore[misc]
    if fast.tool_call is not None:
        assert (fast.tool_call.id, fast.tool_call.name) == ("", "")
        with pytest.raises(dataclasses.FrozenInstanceError):
            fast.tool_call.arguments = "x"  # type: ignore[misc]
