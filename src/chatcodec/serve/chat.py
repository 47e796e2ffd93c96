"""One chat completion: the request prepared by the codec, the engine's text read back."""

from __future__ import annotations

import inspect
import warnings
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..codec import Codec
from ..errors import (
    GrammarError,
    RequestError,
    TemplateError,
    UnusedVariableWarning,
)
from ..grammar.constraint import constrained_field
from ..reply.message import AssistantMessage, Delta
from .engine import Engine, Generation, Piece, Usage
from .errors import APIError
from .schema import ChatRequest
from .stops import StopScanner

if TYPE_CHECKING:
    from ..grammar.constraint import Grammar
    from ..reply.turn import Turn

__all__ = ["prepare", "Reply"]

# what Codec.prepare takes by name itself: a chat_template_kwargs key of that name is refused
_OWN = frozenset(inspect.signature(Codec.prepare).parameters)
_KWARGS_OK = frozenset({"enable_thinking"})


def prepare(codec: Codec, request: ChatRequest, engine: Engine) -> tuple[Turn, Generation]:
    """The codec's turn for ``request`` and what to ask the engine; APIError (400) for
    anything the template, the codec or the engine cannot do."""
    field_name = request.unsupported()
    if field_name is not None:
        raise APIError(400, f"{field_name} is not supported by this server", field_name)
    tools = [t.model_dump(exclude_none=True) for t in request.tools] if request.tools else None
    kwargs = dict(request.chat_template_kwargs or {})
    for key in kwargs:
        if key in _OWN and key not in _KWARGS_OK:
            raise APIError(
                400,
                f"chat_template_kwargs cannot set {key!r}: it is a request field",
                "chat_template_kwargs",
            )
    if request.reasoning_effort is not None:
        kwargs["reasoning_effort"] = request.reasoning_effort
    turn = _turn(codec, request, tools, kwargs)
    for text, where in ((turn.prompt, "messages"), ("".join(request.stops()), "stop")):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate ("\ud800"), which no engine can read
            raise APIError(400, f"{where} holds text that is not Unicode", where) from None
    grammar = _grammar(turn, request, engine)
    max_tokens = request.max_completion_tokens or request.max_tokens
    generation = Generation(
        prompt=turn.prompt,
        stop=tuple(dict.fromkeys(turn.stop + request.stops())),
        max_tokens=max_tokens,
        temperature=request.temperature,
        top_p=request.top_p,
        seed=request.seed,
        presence_penalty=request.presence_penalty,
        frequency_penalty=request.frequency_penalty,
        grammar=grammar,
    )
    return turn, generation


def _turn(
    codec: Codec, request: ChatRequest, tools: list[dict[str, Any]] | None, kwargs: dict[str, Any]
) -> Turn:
    template = codec.template_for(tools)
    if "reasoning_effort" in kwargs and "reasoning_effort" not in template.variables:
        raise APIError(
            400, "this model's chat template does not read reasoning_effort", "reasoning_effort"
        )
    messages = [m.model_dump(exclude_none=True) for m in request.messages]
    choice = request.tool_choice
    tool_choice: Any = "auto" if choice is None else choice
    if not isinstance(tool_choice, str):
        tool_choice = tool_choice.model_dump()
    response_format = (
        request.response_format.model_dump() if request.response_format is not None else None
    )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UnusedVariableWarning)
            return codec.prepare(
                messages,
                tools,
                tool_choice=tool_choice,
                parallel_tool_calls=request.parallel_tool_calls,
                continue_final_message=request.continue_final_message,
                response_format=response_format,
                tool_call_id=None,
                **kwargs,
            )
    except TemplateError as exc:
        raise APIError(400, str(exc), "messages") from None
    except GrammarError as exc:
        raise APIError(400, str(exc), _constrained_field(request) or "tools") from None
    except RequestError as exc:
        raise APIError(400, str(exc), _param_of(str(exc))) from None


def _param_of(message: str) -> str | None:
    for name in ("tool_choice", "parallel_tool_calls", "response_format", "tools", "messages"):
        if name in message:
            return name
    return None


def _constrained_field(request: ChatRequest) -> str | None:
    """The field whose meaning only a grammar enforces, if any."""
    response_format = request.response_format
    return constrained_field(
        request.tools,
        request.tool_choice,
        request.parallel_tool_calls,
        response_format.type if response_format is not None else None,
    )


def _grammar(turn: Turn, request: ChatRequest, engine: Engine) -> Grammar | None:
    """The grammar to send: the turn's, when the engine takes one; none when only a lazy
    grammar over free text would have been sent; a 400 naming the field that needs one."""
    needed = _constrained_field(request)
    try:
        grammar = turn.grammar
    except GrammarError as exc:
        raise APIError(400, str(exc), needed or "tools") from None
    if grammar is None:
        return None
    if not engine.takes_grammar:
        if needed is None:
            return None
        raise APIError(
            400,
            f"{needed} needs a grammar to be enforced and this server's engine takes none "
            "(start the server with a --backend-kind that sends one)",
            needed,
        )
    check = getattr(engine, "check_grammar", None)
    if check is not None:
        try:
            check(grammar)
        except GrammarError as exc:
            if needed is None:
                return None
            raise APIError(400, f"the engine cannot take this grammar: {exc}", needed) from None
    return grammar


@dataclass
class Reply:
    """The engine's pieces read through the stop strings and the turn's stream."""

    turn: Turn
    stops: tuple[str, ...]
    finish_reason: str = "stop"
    usage: Usage | None = None
    message: AssistantMessage | None = None
    calls: int = 0
    _scanner: StopScanner = field(init=False)

    def __post_init__(self) -> None:
        self._scanner = StopScanner(self.stops)
        self._stream = self.turn.stream()

    async def deltas(self, pieces: AsyncIterator[Piece]) -> AsyncIterator[list[Delta]]:
        """The deltas of the reply, a list per engine piece; ``ReplyError`` when the finished
        reply does not parse. Stops reading the engine at a stop string."""
        stream = self._stream
        async for piece in pieces:
            text = self._scanner.feed(piece.text)
            if text:
                yield self._count(stream.feed(text))
            if piece.finish_reason is not None:
                self.finish_reason = piece.finish_reason
                self.usage = piece.usage
            if self._scanner.stopped:
                self.finish_reason = "stop"
                break
        rest = self._scanner.finish()
        out = self._count(stream.feed(rest)) if rest else []
        end = stream.finish()
        self.message = end.message
        out += self._count(end.deltas)
        if end.message.tool_calls:
            self.finish_reason = "tool_calls"
        yield out

    def _count(self, deltas: list[Delta]) -> list[Delta]:
        for delta in deltas:
            if delta.tool_call is not None and delta.tool_call.index >= self.calls:
                self.calls = delta.tool_call.index + 1
        return deltas
