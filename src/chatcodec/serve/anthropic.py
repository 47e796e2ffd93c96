"""Anthropic's Messages API (``POST /v1/messages``, ``/v1/messages/count_tokens``) as a view
of the chat turn.

A request becomes an OpenAI-style `ChatRequest` (`to_chat`): the same template, grammar,
policy and 400s as ``/v1/chat/completions``. The reply's deltas (`chat.Reply`) are written
as Anthropic's content blocks, whole (`Writer.whole`) or as its stream events
(`Writer.events`). Errors go out in Anthropic's shape (`error_body`).

Fields Anthropic defines that change nothing for one local model (``metadata``,
``service_tier``, ``cache_control`` on blocks) are accepted; any other field, block type or
tool type is a 400 naming it (``extra="forbid"``, tagged unions).
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

import orjson
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from ..errors import ReplyError
from ..reply.message import Delta, ToolCall
from ..reply.stream import CallIdPrefix
from .chat import Reply, text_content
from .engine import EngineError, Piece
from .errors import APIError, failure
from .schema import ChatRequest, validated

__all__ = [
    "CountRequest",
    "MessagesRequest",
    "Writer",
    "call_ids",
    "error_body",
    "speaks",
    "to_chat",
]

PATH = "/v1/messages"
_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}
_STOP_REASONS = {"tool_calls": "tool_use", "length": "max_tokens", "stop": "end_turn"}


def speaks(path: str) -> bool:
    """Whether a request to ``path`` is answered in Anthropic's shapes."""
    return path == PATH or path.startswith(PATH + "/")


def error_body(status: int, message: str) -> dict[str, Any]:
    """Anthropic's error object for an answer of ``status``."""
    kind = _TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def call_ids() -> CallIdPrefix:
    """The namer of a turn's ``tool_use`` ids (``toolu_<random>_<index>``), where the model
    writes none of its own."""
    return CallIdPrefix(f"toolu_{secrets.token_hex(8)}_")


# ------------------------------------------------------------------ the request


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Cached(_Strict):
    cache_control: dict[str, Any] | None = None  # prompt caching: nothing to do locally


class TextBlock(_Cached):
    type: Literal["text"]
    text: str
    citations: list[dict[str, Any]] | None = None


class ToolUseBlock(_Cached):
    type: Literal["tool_use"]
    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    input: dict[str, Any]


def _blocks(value: Any) -> Any:
    """A string is one text block (so a wrong block is named by its type, not as "not a
    string")."""
    return [{"type": "text", "text": value}] if isinstance(value, str) else value


Texts = Annotated[list[TextBlock], BeforeValidator(_blocks)]


class ToolResultBlock(_Cached):
    type: Literal["tool_result"]
    tool_use_id: str = Field(min_length=1)
    content: Texts = []
    is_error: bool | None = None  # the template has no place for it: the text says it


class ThinkingBlock(_Cached):
    type: Literal["thinking"]
    thinking: str
    signature: str | None = None


Block = Annotated[
    TextBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock, Field(discriminator="type")
]


class Message(_Strict):
    role: Literal["user", "assistant"]
    content: Annotated[list[Block], BeforeValidator(_blocks)]


class Tool(_Cached):
    type: Literal["custom"] | None = None
    name: str = Field(min_length=1)
    description: str | None = None
    input_schema: dict[str, Any]


class ToolChoice(_Strict):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class Thinking(_Strict):
    """``enabled`` and ``adaptive`` turn the template's thinking on, ``disabled`` off."""

    type: Literal["enabled", "adaptive", "disabled"]
    budget_tokens: int | None = Field(default=None, ge=1)  # not enforced: max_tokens is
    display: Literal["summarized", "omitted"] | None = None  # the thought is shown whole


class OutputFormat(_Strict):
    type: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema")


class OutputConfig(_Strict):
    """``format``: the reply is JSON of this schema; ``effort``: the template's
    ``reasoning_effort`` (a 400 where it reads none)."""

    format: OutputFormat | None = None
    effort: str | None = None


class CountRequest(_Strict):
    """The body of ``/v1/messages/count_tokens``: what the prompt is made of."""

    model: str
    messages: list[Message] = Field(min_length=1)
    system: Texts = []
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None
    output_config: OutputConfig | None = None
    # accepted because they change nothing a server of one local model could honour
    cache_control: dict[str, Any] | None = None


class MessagesRequest(CountRequest):
    """The body of ``/v1/messages``."""

    max_tokens: int = Field(ge=1)
    stop_sequences: list[str] | None = None
    stream: bool = False
    temperature: float | None = Field(default=None, ge=0.0, le=1.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=0)
    seed: int | None = None  # llama-server's and vLLM's (not Anthropic's): a draw repeated
    metadata: dict[str, Any] | None = None
    service_tier: str | None = None
    speed: str | None = None
    inference_geo: str | None = None
    user_profile_id: str | None = None
    workspace_id: str | None = None


def to_chat(request: CountRequest) -> ChatRequest:
    """``request`` as the chat request it means (messages, tools and options)."""
    messages: list[dict[str, Any]] = []
    if request.system:
        messages.append(
            {"role": "system", "content": text_content([t.text for t in request.system])}
        )
    for message in request.messages:
        if message.role == "user":
            messages += _user(message.content)
        else:
            messages.append(_assistant(message.content))
    body: dict[str, Any] = {"model": request.model, "messages": messages}
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "parameters": t.input_schema,
                    **({"description": t.description} if t.description is not None else {}),
                },
            }
            for t in request.tools
        ]
    choice = request.tool_choice
    if choice is not None:
        if choice.type == "tool":
            if not choice.name:
                raise APIError(400, "tool_choice.name: a 'tool' choice names the tool")
            body["tool_choice"] = {"type": "function", "function": {"name": choice.name}}
        else:
            body["tool_choice"] = {"auto": "auto", "any": "required", "none": "none"}[choice.type]
        if choice.disable_parallel_tool_use:
            body["parallel_tool_calls"] = False
    if request.thinking is not None:
        body["chat_template_kwargs"] = {"enable_thinking": request.thinking.type != "disabled"}
    output = request.output_config
    if output is not None and output.format is not None:
        json_schema = {"name": "output", "schema": output.format.schema_}
        body["response_format"] = {"type": "json_schema", "json_schema": json_schema}
    if output is not None and output.effort is not None:
        body["reasoning_effort"] = output.effort
    if isinstance(request, MessagesRequest):
        body["max_tokens"] = request.max_tokens
        body["stream"] = request.stream
        for name in ("temperature", "top_p", "top_k", "seed"):
            body[name] = getattr(request, name)
        if request.stop_sequences:
            body["stop"] = request.stop_sequences
    return validated(ChatRequest, body)


def _user(content: list[Any]) -> list[dict[str, Any]]:
    """A user message's turns: each ``tool_result`` a tool message, text a user message."""
    out: list[dict[str, Any]] = []
    texts: list[TextBlock] = []
    for block in content:
        if isinstance(block, TextBlock):
            texts.append(block)
        elif isinstance(block, ToolResultBlock):
            if texts:
                out.append({"role": "user", "content": text_content([t.text for t in texts])})
                texts = []
            text = text_content([t.text for t in block.content])
            out.append({"role": "tool", "tool_call_id": block.tool_use_id, "content": text})
        else:
            raise APIError(400, f"a user message cannot hold a {block.type!r} block", "messages")
    if texts or not out:
        out.append({"role": "user", "content": text_content([t.text for t in texts])})
    return out


def _assistant(content: list[Any]) -> dict[str, Any]:
    """An assistant message: thinking as ``reasoning_content``, ``tool_use`` as calls."""
    texts: list[TextBlock] = []
    thoughts: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in content:
        if isinstance(block, TextBlock):
            texts.append(block)
        elif isinstance(block, ThinkingBlock):
            thoughts.append(block.thinking)
        elif isinstance(block, ToolUseBlock):
            # an object, as the template writes it (a JSON string would be shown quoted by
            # the templates that write arguments with tojson, as llama.cpp shows it)
            function = {"name": block.name, "arguments": block.input}
            calls.append({"id": block.id, "type": "function", "function": function})
        else:
            raise APIError(
                400, "an assistant message cannot hold a 'tool_result' block", "messages"
            )
    message: dict[str, Any] = {
        "role": "assistant",
        "content": text_content([t.text for t in texts]) if texts else None,
    }
    if thoughts:
        message["reasoning_content"] = "\n".join(thoughts)
    if calls:
        message["tool_calls"] = calls
    elif message["content"] is None:
        message["content"] = ""
    return message


# ------------------------------------------------------------------ the reply


class Writer:
    """One reply written as Anthropic's ``message``: whole, or as its stream's events."""

    def __init__(self, model: str, reply: Reply, stops: list[str] | None) -> None:
        self.model = model
        self.reply = reply
        self.stops = frozenset(stops or ())
        self.ident = f"msg_{secrets.token_hex(12)}"

    def stop_reason(self) -> tuple[str, str | None]:
        """``stop_reason`` and ``stop_sequence``: a request's stop string is told apart from
        the end of the turn when the engine says which ended it."""
        reply = self.reply
        if reply.finish_reason == "stop" and reply.stop_string in self.stops:
            return "stop_sequence", reply.stop_string
        return _STOP_REASONS.get(reply.finish_reason, "end_turn"), None

    def usage(self) -> dict[str, int]:
        usage = self.reply.usage
        if usage is None:
            return {"input_tokens": 0, "output_tokens": 0}
        return {"input_tokens": usage.prompt_tokens, "output_tokens": usage.completion_tokens}

    def head(self, content: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": self.ident,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        }

    async def whole(self, pieces: AsyncIterator[Piece]) -> dict[str, Any]:
        try:
            async for _ in self.reply.deltas(pieces):
                pass
        except (ReplyError, EngineError) as exc:
            raise failure(exc) from None
        message = self.reply.message
        assert message is not None
        content: list[dict[str, Any]] = []
        if message.reasoning_content:
            thinking = message.reasoning_content
            content.append({"type": "thinking", "thinking": thinking, "signature": ""})
        if message.content:
            content.append({"type": "text", "text": message.content})
        content += [_tool_use(call) for call in message.tool_calls]
        out = self.head(content)
        out["stop_reason"], out["stop_sequence"] = self.stop_reason()
        out["usage"] = self.usage()
        return out

    async def events(self, pieces: AsyncIterator[Piece]) -> AsyncIterator[bytes]:
        yield _event("message_start", {"type": "message_start", "message": self.head([])})
        yield _event("ping", {"type": "ping"})
        blocks = _Blocks()
        try:
            async for deltas in self.reply.deltas(pieces):
                events = b"".join(blocks.write(delta) for delta in deltas)
                if events:
                    yield events
        except (ReplyError, EngineError) as exc:
            error = failure(exc)
            yield _event("error", error_body(error.status, error.message))
            return
        yield blocks.close()
        stop_reason, stop_sequence = self.stop_reason()
        delta = {"stop_reason": stop_reason, "stop_sequence": stop_sequence}
        yield _event(
            "message_delta", {"type": "message_delta", "delta": delta, "usage": self.usage()}
        )
        yield _event("message_stop", {"type": "message_stop"})


class _Blocks:
    """The content blocks of a stream: a block opens when the kind of text changes (thinking,
    text) or a call starts, and closes when the next one opens."""

    def __init__(self) -> None:
        self.index = -1
        self.kind = ""

    def write(self, delta: Delta) -> bytes:
        out = []
        if delta.reasoning_content:
            out.append(
                self._open("thinking", {"type": "thinking", "thinking": "", "signature": ""})
            )
            out.append(self._delta({"type": "thinking_delta", "thinking": delta.reasoning_content}))
        if delta.content:
            out.append(self._open("text", {"type": "text", "text": ""}))
            out.append(self._delta({"type": "text_delta", "text": delta.content}))
        call = delta.tool_call
        if call is not None:
            if call.id:
                block = {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}
                out.append(self._open("tool_use", block, new=True))
            if call.arguments:
                out.append(
                    self._delta({"type": "input_json_delta", "partial_json": call.arguments})
                )
        return b"".join(out)

    def _open(self, kind: str, block: dict[str, Any], new: bool = False) -> bytes:
        if kind == self.kind and not new:
            return b""
        out = self.close()
        self.index += 1
        self.kind = kind
        start = {"type": "content_block_start", "index": self.index, "content_block": block}
        return out + _event("content_block_start", start)

    def _delta(self, delta: dict[str, Any]) -> bytes:
        body = {"type": "content_block_delta", "index": self.index, "delta": delta}
        return _event("content_block_delta", body)

    def close(self) -> bytes:
        if not self.kind:
            return b""
        self.kind = ""
        return _event("content_block_stop", {"type": "content_block_stop", "index": self.index})


def _tool_use(call: ToolCall) -> dict[str, Any]:
    try:
        arguments = orjson.loads(call.arguments)
    except orjson.JSONDecodeError:
        arguments = None
    if not isinstance(arguments, dict):
        raise APIError(
            502, f"the model's call of {call.name!r} has arguments that are not a JSON object"
        )
    return {"type": "tool_use", "id": call.id, "name": call.name, "input": arguments}


def _event(name: str, payload: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"
