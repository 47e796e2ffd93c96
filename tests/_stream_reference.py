"""llama.cpp's server stream of a corpus reply, rebuilt from its partial parses
(../shared/docs/llamacpp-reply-parsing.md §7): the diff of consecutive partial parses, and what a
client has accumulated after each one."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class InvalidDiff(Exception):
    """llama.cpp's compute_diffs throws: a later partial parse does not extend an earlier one."""


def string_diff(before: str, after: str) -> str:
    """llama.cpp's string_diff: what ``after`` adds to ``before`` ("" when it shrank)."""
    if not before:
        return after
    if after.startswith(before):
        return after[len(before) :]
    if before.startswith(after):
        return ""
    raise InvalidDiff(f"{before!r} -> {after!r}")


@dataclass
class Accumulated:
    """What a client has appended from the stream's deltas: text fields and calls."""

    content: str = ""
    reasoning_content: str = ""
    tool_calls: list[list[str]] = field(default_factory=list)  # [name, arguments]

    def as_tuple(self) -> tuple[str, str, tuple[tuple[str, str], ...]]:
        calls = tuple((n, a) for n, a in self.tool_calls)
        return self.content, self.reasoning_content, calls


def _calls(message: dict[str, Any]) -> list[tuple[str, str]]:
    return [(c["name"], c["arguments"]) for c in message.get("tool_calls") or []]


def apply_diffs(acc: Accumulated, before: dict[str, Any], after: dict[str, Any]) -> None:
    """llama.cpp's compute_diffs(before, after), appended to ``acc`` (may throw InvalidDiff)."""
    acc.reasoning_content += string_diff(before["reasoning_content"], after["reasoning_content"])
    acc.content += string_diff(before["content"], after["content"])
    old, new = _calls(before), _calls(after)
    if len(new) < len(old):
        raise InvalidDiff("now finding less tool calls")
    if old:
        k = len(old) - 1
        (old_name, old_args), (new_name, new_args) = old[k], new[k]
        if not (old_name.startswith(new_name) or new_name.startswith(old_name)):
            raise InvalidDiff(f"tool name {old_name!r} -> {new_name!r}")
        acc.tool_calls[k][1] += string_diff(old_args, new_args)
        if new_name != old_name:
            acc.tool_calls[k][0] += string_diff(old_name, new_name)
    for name, args in new[len(old) :]:
        acc.tool_calls.append([name, args])


def _empty(message: dict[str, Any]) -> bool:
    return not (message["content"] or message["reasoning_content"] or message.get("tool_calls"))


Step = tuple[int, tuple[Any, ...], bool]


def reference_steps(case: dict[str, Any]) -> tuple[str, list[Step], bool]:
    """The finished reply of ``case`` and, for each of its partial parses by llama.cpp (in
    order of length, each a prefix of the reply), the prefix length, what a client of
    llama.cpp's server has accumulated then, and whether that partial parse was used (False:
    it was empty — a partial parse that failed — and the server skipped it, so what the client
    has is older than the text); the steps stop where llama.cpp's diff throws (the third
    value says whether it did)."""
    final = next(o for o in case["outputs"] if o["kind"] == "final")
    text = final["text"]
    partials = sorted(
        (o for o in case["outputs"] if o["kind"] == "partial" and o.get("expected") is not None),
        key=lambda o: len(o["text"]),
    )
    acc = Accumulated()
    before = {"content": "", "reasoning_content": "", "tool_calls": []}
    steps: list[Step] = []
    for output in partials:
        if not text.startswith(output["text"]):
            continue
        after = output["expected"]
        used = not _empty(after)
        if used:
            try:
                apply_diffs(acc, before, after)
            except InvalidDiff:
                return text, steps, True
            before = after
        steps.append((len(output["text"]), acc.as_tuple(), used))
    return text, steps, False


def extends(ours: tuple[Any, ...], reference: tuple[Any, ...]) -> bool:
    """Whether the accumulated ``ours`` holds ``reference`` and only adds to it."""
    (content, reasoning, calls), (ref_content, ref_reasoning, ref_calls) = ours, reference
    if not (content.startswith(ref_content) and reasoning.startswith(ref_reasoning)):
        return False
    if len(calls) < len(ref_calls):
        return False
    pairs = zip(calls, ref_calls, strict=False)
    return all(n == rn and a.startswith(ra) for (n, a), (rn, ra) in pairs)
