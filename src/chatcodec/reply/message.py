"""What a parsed reply becomes: an OpenAI assistant message, its stream deltas, and what was dropped."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["ToolCall", "Dropped", "AssistantMessage", "Delta", "ToolCallDelta", "fold"]


@dataclass(frozen=True)
class ToolCall:
    """One function call: ``arguments`` is the JSON text llama.cpp hands out (maybe cut short)."""

    name: str
    arguments: str
    id: str = ""

    def to_openai(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }
        if self.id:
            out["id"] = self.id
        return out


@dataclass(frozen=True)
class Dropped:
    """Text of the reply that is in no field of the message, and why.

    ``reason`` is one of: ``"trailing_text"`` (after the last call), ``"invalid_call"`` (a call
    scope that does not parse, and everything after it), ``"unknown_tool"`` (a call to a tool
    that was not offered, and everything after it), ``"parallel_limit"`` (calls beyond the one
    allowed when ``parallel_tool_calls`` is false, and everything after them),
    ``"marker_prefix"`` (the start of a marker cut off by the end of the reply),
    ``"skipped_text"`` (text the format reads and keeps nowhere: a gpt-oss message to a builtin
    tool, what Gemma 4 skips before its first call, a Muse Glimmer recipient that is not the
    called tool, Kimi K3 call and argument attributes other than the ``index`` and ``type``
    its template writes, a gpt-oss content type other than ``json``), ``"unread_arguments"``
    (a call's arguments written as a JSON string, number or list where the format reads an
    object: the call keeps ``{}``, as llama.cpp's does).
    ``offset`` counts characters of the reply (the generation prompt excluded; negative when
    the dropped text began inside the generation prompt).
    """

    text: str
    reason: str
    offset: int


@dataclass(frozen=True)
class AssistantMessage:
    content: str = ""
    reasoning_content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    dropped: tuple[Dropped, ...] = ()

    def to_openai(self) -> dict[str, Any]:
        """The message in OpenAI's shape: ``content`` is null when it is empty beside tool
        calls (as OpenAI and llama.cpp's server write it), ``""`` when there is nothing at all."""
        content = None if not self.content and self.tool_calls else self.content
        out: dict[str, Any] = {"role": "assistant", "content": content}
        if self.reasoning_content:
            out["reasoning_content"] = self.reasoning_content
        if self.tool_calls:
            out["tool_calls"] = [c.to_openai() for c in self.tool_calls]
        return out

    def to_dict(self) -> dict[str, Any]:
        """The comparison shape of the parse corpus (plus the dropped text)."""
        return {
            "content": self.content,
            "reasoning_content": self.reasoning_content,
            "tool_calls": [
                {"name": c.name, "arguments": c.arguments, **({"id": c.id} if c.id else {})}
                for c in self.tool_calls
            ],
            "dropped": [
                {"text": d.text, "reason": d.reason, "offset": d.offset} for d in self.dropped
            ],
        }


@dataclass(frozen=True)
class ToolCallDelta:
    """A growing tool call: ``name`` and ``id`` come with its first delta, then argument text."""

    index: int
    id: str = ""
    name: str = ""
    arguments: str = ""


@dataclass(frozen=True)
class Delta:
    """One step of a stream: text appended to a field, or a piece of a tool call.

    ``role`` is ``"assistant"`` on the first delta of a stream only (OpenAI's first chunk
    names the role); a stream with nothing to show still ends with one such delta.
    """

    reasoning_content: str = ""
    content: str = ""
    tool_call: ToolCallDelta | None = None
    role: str = ""

    def to_openai(self) -> dict[str, Any]:
        """The ``delta`` object of an OpenAI ``chat.completion.chunk``."""
        out: dict[str, Any] = {"role": self.role} if self.role else {}
        if self.reasoning_content:
            out["reasoning_content"] = self.reasoning_content
        if self.content:
            out["content"] = self.content
        if self.tool_call is not None:
            tc = self.tool_call
            item: dict[str, Any] = {"index": tc.index}
            if tc.id:
                item["id"] = tc.id
                item["type"] = "function"
            function: dict[str, str] = {}
            if tc.name:
                function["name"] = tc.name
            if tc.arguments:
                function["arguments"] = tc.arguments
            if function:
                item["function"] = function
            out["tool_calls"] = [item]
        return out


_new_delta = object.__new__


def content_delta(text: str) -> Delta:
    """``Delta(content=text)``, made cheaply for the stream's per-chunk fast path.

    Equal in every way to the dataclass-made one: the other fields are not set on the instance
    and read their defaults from the class (a dataclass field's default is a class attribute),
    and the frozen dataclass's ``__setattr__`` is bypassed only while the instance is made.
    """
    delta = _new_delta(Delta)
    delta.__dict__["content"] = text
    return delta


def reasoning_delta(text: str) -> Delta:
    """``Delta(reasoning_content=text)``, made as cheaply as `content_delta`."""
    delta = _new_delta(Delta)
    delta.__dict__["reasoning_content"] = text
    return delta


def arguments_delta(index: int, text: str) -> Delta:
    """``Delta(tool_call=ToolCallDelta(index=index, arguments=text))``, made as cheaply as
    `content_delta` (a call's arguments that grow as written: a delta per chunk)."""
    piece = _new_delta(ToolCallDelta)
    piece.__dict__.update(index=index, arguments=text)
    delta = _new_delta(Delta)
    delta.__dict__["tool_call"] = piece
    return delta


def fold(deltas: list[Delta]) -> AssistantMessage:
    """The message a client builds by appending every delta (what a stream adds up to)."""
    reasoning: list[str] = []
    content: list[str] = []
    calls: dict[int, list[str]] = {}
    for d in deltas:
        reasoning.append(d.reasoning_content)
        content.append(d.content)
        if d.tool_call is not None:
            tc = d.tool_call
            slot = calls.setdefault(tc.index, ["", "", ""])
            slot[0] = slot[0] or tc.id
            slot[1] += tc.name
            slot[2] += tc.arguments
    return AssistantMessage(
        content="".join(content),
        reasoning_content="".join(reasoning),
        tool_calls=tuple(
            ToolCall(name=n, arguments=a, id=i) for _, (i, n, a) in sorted(calls.items())
        ),
    )
