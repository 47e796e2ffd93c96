"""OpenAI's Responses API (``POST /v1/responses``) as a view of the chat turn.

A request becomes an OpenAI-style `ChatRequest` (`to_chat`): the same template, grammar,
policy and 400s as ``/v1/chat/completions``. The reply is written as a ``response`` object
(`Writer.whole`) or as its typed stream events (`Writer.events`). Past responses are kept in
a bounded in-memory `Store`, so that ``previous_response_id`` continues a conversation.
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

import orjson
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
)

from ..errors import ReplyError
from ..reply.message import AssistantMessage, Delta
from .chat import Reply, text_content
from .engine import EngineError, Piece
from .errors import APIError, failure
from .schema import ChatRequest, validated

__all__ = ["ResponsesRequest", "Store", "Writer", "conversation", "to_chat"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TextPart(_Strict):
    type: Literal["input_text", "output_text"]
    text: str
    annotations: list[Any] | None = None
    logprobs: list[Any] | None = None


def _parts(value: Any) -> Any:
    """A string is one text part (so a wrong part is named by its type)."""
    return [{"type": "input_text", "text": value}] if isinstance(value, str) else value


Parts = Annotated[list[Annotated[TextPart, Field(discriminator="type")]], BeforeValidator(_parts)]


class MessageItem(_Strict):
    type: Literal["message"] = "message"
    role: Literal["user", "system", "developer", "assistant"]
    content: Parts
    id: str | None = None
    status: str | None = None


class FunctionCallItem(_Strict):
    type: Literal["function_call"]
    call_id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    arguments: str
    id: str | None = None
    status: str | None = None


class FunctionCallOutputItem(_Strict):
    type: Literal["function_call_output"]
    call_id: str = Field(min_length=1)
    output: Parts
    id: str | None = None
    status: str | None = None


class ReasoningText(_Strict):
    type: Literal["reasoning_text", "summary_text"]
    text: str


class ReasoningItem(_Strict):
    type: Literal["reasoning"]
    summary: list[ReasoningText] = []
    content: list[ReasoningText] | None = None
    id: str | None = None
    encrypted_content: str | None = None  # never written here: nothing to read back
    status: str | None = None


def _item_type(value: Any) -> Any:
    """An input item without a ``type`` is a message (OpenAI's easy input message)."""
    if isinstance(value, dict) and "type" not in value:
        return {**value, "type": "message"}
    return value


Item = Annotated[
    MessageItem | FunctionCallItem | FunctionCallOutputItem | ReasoningItem,
    Field(discriminator="type"),
    BeforeValidator(_item_type),
]


class FunctionTool(_Strict):
    type: Literal["function"]
    name: str = Field(min_length=1)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class OtherTool(BaseModel):
    """A tool of another type (``custom``, ``web_search``, ``local_shell``, ...): a 400
    naming its type (`to_chat`), never a silent drop."""

    model_config = ConfigDict(extra="allow")
    type: str

    @field_validator("type")
    @classmethod
    def _not_function(cls, value: str) -> str:
        if value == "function":
            raise ValueError("a function tool is checked as one")
        return value


class NamedFunction(_Strict):
    type: Literal["function"]
    name: str


class TextFormat(_Strict):
    type: Literal["text", "json_object", "json_schema"]
    name: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    description: str | None = None
    strict: bool | None = None


class TextConfig(_Strict):
    format: TextFormat | None = None
    verbosity: str | None = None  # nothing to do for a local model


class Reasoning(_Strict):
    """``effort`` ``none`` or ``minimal`` turns the template's thinking off, any other on."""

    effort: str | None = None
    summary: str | None = None  # the reasoning is given whole, never summarised
    generate_summary: str | None = None


def _input(value: Any) -> Any:
    """A string input is one user message."""
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    return value


class ResponsesRequest(_Strict):
    model: str
    input: Annotated[list[Item], BeforeValidator(_input)]
    instructions: str | None = None
    tools: list[FunctionTool | OtherTool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedFunction | None = None
    parallel_tool_calls: bool | None = None
    text: TextConfig | None = None
    reasoning: Reasoning | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    stream: bool = False
    store: bool | None = None
    previous_response_id: str | None = None
    # accepted because they change nothing a server of one local model could honour
    metadata: dict[str, str] | None = None
    user: str | None = None
    service_tier: str | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None
    truncation: Literal["disabled"] | None = None
    include: list[Literal["reasoning.encrypted_content"]] | None = None


class Store:
    """The last ``size`` stored responses' conversations (chat messages, the reply's
    assistant message last), by response id; the oldest goes first."""

    def __init__(self, size: int = 1024) -> None:
        self.size = size
        self.kept: OrderedDict[str, list[dict[str, Any]]] = OrderedDict()

    def get(self, ident: str) -> list[dict[str, Any]]:
        try:
            return self.kept[ident]
        except KeyError:
            raise APIError(
                404,
                f"Previous response with id '{ident}' not found.",
                "previous_response_id",
                "previous_response_not_found",
            ) from None

    def put(self, ident: str, messages: list[dict[str, Any]]) -> None:
        self.kept[ident] = messages
        while len(self.kept) > self.size:
            self.kept.popitem(last=False)


def conversation(request: ResponsesRequest, store: Store) -> list[dict[str, Any]]:
    """The chat messages of the conversation so far, instructions left out (they are not
    carried from a previous response, as OpenAI does not carry them)."""
    ident = request.previous_response_id
    history = list(store.get(ident)) if ident else []
    return history + _messages(request.input)


def _messages(items: list[Any]) -> list[dict[str, Any]]:
    """Input items as chat messages: a reasoning item and the function calls after it join
    the assistant message they belong to."""
    out: list[dict[str, Any]] = []
    open_turn: dict[str, Any] | None = None  # the assistant message being gathered

    def turn() -> dict[str, Any]:
        nonlocal open_turn
        if open_turn is None:
            open_turn = {"role": "assistant", "content": None}
            out.append(open_turn)
        return open_turn

    for item in items:
        if isinstance(item, MessageItem) and item.role == "assistant":
            message = turn()
            if message["content"] is not None or "tool_calls" in message:
                open_turn = None
                message = turn()
            message["content"] = text_content([t.text for t in item.content])
        elif isinstance(item, ReasoningItem):
            open_turn = None
            parts = item.content if item.content is not None else item.summary
            turn()["reasoning_content"] = "\n".join(part.text for part in parts)
        elif isinstance(item, FunctionCallItem):
            function = {"name": item.name, "arguments": _arguments(item.arguments)}
            call = {"id": item.call_id, "type": "function", "function": function}
            turn().setdefault("tool_calls", []).append(call)
        elif isinstance(item, FunctionCallOutputItem):
            open_turn = None
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": item.call_id,
                    "content": text_content([t.text for t in item.output]),
                }
            )
        else:
            open_turn = None
            out.append({"role": item.role, "content": text_content([t.text for t in item.content])})
    for message in out:
        if (
            message["role"] == "assistant"
            and message["content"] is None
            and "tool_calls" not in message
        ):
            message["content"] = ""
    return out


def _arguments(text: str) -> Any:
    """A call's arguments as the template is given them: the object the JSON text holds (as
    an Anthropic ``tool_use`` gives it; templates that write arguments with ``tojson`` show
    a string quoted, and some cannot show one at all), else the text as sent."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return text
    return value if isinstance(value, dict) else text


def to_chat(request: ResponsesRequest, messages: list[dict[str, Any]]) -> ChatRequest:
    """The chat request ``request`` means, over ``messages`` (its `conversation`)."""
    if request.instructions:
        messages = [{"role": "system", "content": request.instructions}, *messages]
    body: dict[str, Any] = {
        "model": request.model,
        "messages": messages,
        "stream": request.stream,
        "parallel_tool_calls": request.parallel_tool_calls,
        "max_tokens": request.max_output_tokens,
        "temperature": request.temperature,
        "top_p": request.top_p,
    }
    for i, tool in enumerate(request.tools or ()):
        if not isinstance(tool, FunctionTool):
            raise APIError(
                400,
                f"tools[{i}] is a {tool.type!r} tool: this server offers the model function "
                "tools only",
                f"tools[{i}].type",
            )
    if request.tools:
        body["tools"] = [
            {"type": "function", "function": t.model_dump(exclude_none=True, exclude={"type"})}
            for t in request.tools
            if isinstance(t, FunctionTool)
        ]
    choice = request.tool_choice
    if isinstance(choice, NamedFunction):
        body["tool_choice"] = {"type": "function", "function": {"name": choice.name}}
    elif choice is not None:
        body["tool_choice"] = choice
    text_format = request.text.format if request.text is not None else None
    if text_format is not None and text_format.type == "json_schema":
        json_schema = {"name": text_format.name or "output", "schema": text_format.schema_}
        body["response_format"] = {"type": "json_schema", "json_schema": json_schema}
    elif text_format is not None:
        body["response_format"] = {"type": text_format.type}
    effort = request.reasoning.effort if request.reasoning is not None else None
    if effort is not None:
        body["chat_template_kwargs"] = {"enable_thinking": effort not in ("none", "minimal")}
    return validated(ChatRequest, body)


# ------------------------------------------------------------------ the reply


class Writer:
    """One reply written as a ``response`` object, whole or as its stream's events; kept in
    the store when the request lets it."""

    def __init__(
        self,
        request: ResponsesRequest,
        model: str,
        reply: Reply,
        messages: list[dict[str, Any]],
        store: Store,
    ) -> None:
        self.request = request
        self.model = model
        self.reply = reply
        self.messages = messages
        self.store = store
        self.ident = f"resp_{secrets.token_hex(12)}"
        self.created = int(time.time())
        self.ids: dict[Any, str] = {}
        self.sequence = 0

    def item_id(self, key: Any, prefix: str) -> str:
        if key not in self.ids:
            self.ids[key] = f"{prefix}_{secrets.token_hex(12)}"
        return self.ids[key]

    def response(self, status: str, output: list[dict[str, Any]]) -> dict[str, Any]:
        request = self.request
        out: dict[str, Any] = {
            "id": self.ident,
            "object": "response",
            "created_at": self.created,
            "model": self.model,
            "status": status,
            "output": output,
            "error": None,
            "incomplete_details": None,
            "instructions": request.instructions,
            "metadata": request.metadata or {},
            "parallel_tool_calls": request.parallel_tool_calls is not False,
            "tool_choice": _dumped(request.tool_choice) or "auto",
            "tools": [t.model_dump(exclude_none=True) for t in request.tools or ()],
            "temperature": request.temperature,
            "top_p": request.top_p,
            "max_output_tokens": request.max_output_tokens,
            "previous_response_id": request.previous_response_id,
            "store": request.store is not False,
            "truncation": "disabled",
        }
        return out

    def finished(self) -> dict[str, Any]:
        """The whole response, once the reply was read; stored unless ``store`` is false."""
        reply = self.reply
        message = reply.message
        assert message is not None
        output = self.output(message)
        status = "incomplete" if reply.finish_reason == "length" else "completed"
        out = self.response(status, output)
        if status == "incomplete":
            out["incomplete_details"] = {"reason": "max_output_tokens"}
        usage = reply.usage
        if usage is not None:
            out["usage"] = {
                "input_tokens": usage.prompt_tokens,
                "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                "output_tokens": usage.completion_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": usage.prompt_tokens + usage.completion_tokens,
            }
        if self.request.store is not False:
            kept = message.to_openai()
            for call in kept.get("tool_calls", ()):  # as they would come back as input
                call["function"]["arguments"] = _arguments(call["function"]["arguments"])
            self.store.put(self.ident, [*self.messages, kept])
        return out

    def output(self, message: AssistantMessage) -> list[dict[str, Any]]:
        out = []
        if message.reasoning_content:
            out.append(self.reasoning_item(message.reasoning_content))
        if message.content:
            out.append(self.message_item(message.content))
        for index, call in enumerate(message.tool_calls):
            out.append(self.call_item(index, call.id, call.name, call.arguments))
        return out

    def reasoning_item(self, text: str | None) -> dict[str, Any]:
        content = [] if text is None else [{"type": "reasoning_text", "text": text}]
        item = {"id": self.item_id("reasoning", "rs"), "type": "reasoning", "summary": []}
        return {**item, "content": content}

    def message_item(self, text: str | None, status: str = "completed") -> dict[str, Any]:
        content = [] if text is None else [_output_text(text)]
        ident = self.item_id("message", "msg")
        return {
            "id": ident,
            "type": "message",
            "role": "assistant",
            "status": status,
            "content": content,
        }

    def call_item(
        self, index: int, call_id: str, name: str, arguments: str, status: str = "completed"
    ) -> dict[str, Any]:
        return {
            "id": self.item_id(("call", index), "fc"),
            "type": "function_call",
            "call_id": call_id,
            "name": name,
            "arguments": arguments,
            "status": status,
        }

    async def whole(self, pieces: AsyncIterator[Piece]) -> dict[str, Any]:
        try:
            async for _ in self.reply.deltas(pieces):
                pass
        except (ReplyError, EngineError) as exc:
            raise failure(exc) from None
        return self.finished()

    def event(self, kind: str, **fields: Any) -> bytes:
        payload = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"

    async def events(self, pieces: AsyncIterator[Piece]) -> AsyncIterator[bytes]:
        yield self.event("response.created", response=self.response("in_progress", []))
        yield self.event("response.in_progress", response=self.response("in_progress", []))
        items = _Items(self)
        try:
            async for deltas in self.reply.deltas(pieces):
                events = b"".join(items.write(delta) for delta in deltas)
                if events:
                    yield events
        except (ReplyError, EngineError) as exc:
            error = failure(exc)
            failed = self.response("failed", [])
            failed["error"] = {"code": error.code or "server_error", "message": error.message}
            yield self.event("response.failed", response=failed)
            return
        yield items.close()
        done = self.finished()
        kind = "response.completed" if done["status"] == "completed" else "response.incomplete"
        yield self.event(kind, response=done)


class _Items:
    """The output items of a stream: an item opens when the kind of text changes or a call
    begins, and is done when the next one opens."""

    def __init__(self, writer: Writer) -> None:
        self.writer = writer
        self.index = -1
        self.kind = ""
        self.text = ""
        self.call: tuple[int, str, str] | None = None

    def write(self, delta: Delta) -> bytes:
        w = self.writer
        out = []
        if delta.reasoning_content:
            if self.kind != "reasoning":
                out.append(self._open("reasoning", w.reasoning_item(None)))
            self.text += delta.reasoning_content
            out.append(
                w.event(
                    "response.reasoning_text.delta",
                    item_id=w.item_id("reasoning", "rs"),
                    output_index=self.index,
                    content_index=0,
                    delta=delta.reasoning_content,
                )
            )
        if delta.content:
            if self.kind != "message":
                out.append(self._open("message", w.message_item(None, "in_progress")))
                out.append(
                    w.event(
                        "response.content_part.added",
                        item_id=w.item_id("message", "msg"),
                        output_index=self.index,
                        content_index=0,
                        part=_output_text(""),
                    )
                )
            self.text += delta.content
            out.append(
                w.event(
                    "response.output_text.delta",
                    item_id=w.item_id("message", "msg"),
                    output_index=self.index,
                    content_index=0,
                    delta=delta.content,
                    logprobs=[],
                )
            )
        call = delta.tool_call
        if call is not None:
            if call.id:
                item = w.call_item(call.index, call.id, call.name, "", "in_progress")
                out.append(self._open("call", item))
                self.call = (call.index, call.id, call.name)
            if call.arguments and self.call is not None:
                self.text += call.arguments
                out.append(
                    w.event(
                        "response.function_call_arguments.delta",
                        item_id=w.item_id(("call", self.call[0]), "fc"),
                        output_index=self.index,
                        delta=call.arguments,
                    )
                )
        return b"".join(out)

    def _open(self, kind: str, item: dict[str, Any]) -> bytes:
        out = self.close()
        self.index += 1
        self.kind = kind
        self.text = ""
        w = self.writer
        return out + w.event("response.output_item.added", output_index=self.index, item=item)

    def close(self) -> bytes:
        w, text, index = self.writer, self.text, self.index
        if self.kind == "reasoning":
            ident = w.item_id("reasoning", "rs")
            out = w.event(
                "response.reasoning_text.done",
                item_id=ident,
                output_index=index,
                content_index=0,
                text=text,
            )
            item = w.reasoning_item(text)
        elif self.kind == "message":
            ident = w.item_id("message", "msg")
            fields = {"item_id": ident, "output_index": index, "content_index": 0}
            out = w.event("response.output_text.done", text=text, logprobs=[], **fields)
            out += w.event("response.content_part.done", part=_output_text(text), **fields)
            item = w.message_item(text)
        elif self.kind == "call" and self.call is not None:
            number, call_id, name = self.call
            ident = w.item_id(("call", number), "fc")
            out = w.event(
                "response.function_call_arguments.done",
                item_id=ident,
                output_index=index,
                arguments=text,
                name=name,
            )
            item = w.call_item(number, call_id, name, text)
        else:
            return b""
        self.kind = ""
        return out + w.event("response.output_item.done", output_index=index, item=item)


def _output_text(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _dumped(value: Any) -> Any:
    return value.model_dump() if isinstance(value, BaseModel) else value
