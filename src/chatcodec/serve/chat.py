"""One chat completion: the request prepared by the codec, the engine's text read back."""

from __future__ import annotations

import inspect
import json
import logging
import warnings
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
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
from ..reply.request import Policy
from ..template import ChatTemplate
from ..template.capabilities import tool_call_support
from ..template.compat import llama_compatible, takes_string_content_only
from .engine import Engine, Generation, Piece, Usage
from .errors import APIError
from .schema import OPENAI_ROLES, ChatRequest
from .stops import StopScanner

if TYPE_CHECKING:
    from ..grammar.constraint import Grammar
    from ..reply.turn import Turn

__all__ = ["prepare", "Reply", "text_content"]

log = logging.getLogger("chatcodec.serve")

# what Codec.prepare takes by name itself: a chat_template_kwargs key of that name is refused
_OWN = frozenset(inspect.signature(Codec.prepare).parameters)
_KWARGS_OK = frozenset({"enable_thinking"})


def prepare(
    codec: Codec,
    request: ChatRequest,
    engine: Engine,
    policy: Policy = "guaranteed",
    call_ids: Callable[[int], str] | None = None,
) -> tuple[Turn, Generation]:
    """The codec's turn for ``request`` read under ``policy``, and what to ask the engine;
    APIError (400) for anything the template, the codec or the engine cannot do.
    ``call_ids`` names the calls the model gives no id (None: ``call_<random>_<index>``)."""
    field_name = request.unsupported()
    if field_name is not None:
        raise APIError(400, f"{field_name} is not supported by this server", field_name)
    problem = request.meaningless()
    if problem is not None:
        raise APIError(400, problem[1], problem[0])
    request = request.narrowed()
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
    turn = _turn(codec, request, tools, kwargs, policy, call_ids)
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
        top_k=request.top_k,
        min_p=request.min_p,
        seed=request.seed,
        presence_penalty=request.presence_penalty,
        frequency_penalty=request.frequency_penalty,
        grammar=grammar,
    )
    return turn, generation


def _turn(
    codec: Codec,
    request: ChatRequest,
    tools: list[dict[str, Any]] | None,
    kwargs: dict[str, Any],
    policy: Policy,
    call_ids: Callable[[int], str] | None,
) -> Turn:
    template = codec.template_for(tools)
    _check_roles(template.source, request)
    if "reasoning_effort" in kwargs and "reasoning_effort" not in template.variables:
        raise APIError(
            400, "this model's chat template does not read reasoning_effort", "reasoning_effort"
        )
    messages = _joined_text(template, [m.model_dump(exclude_none=True) for m in request.messages])
    messages = _object_arguments(template, messages)
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
                tool_call_id=call_ids,
                policy=policy,
                **kwargs,
            )
    except TemplateError as exc:
        raise APIError(400, str(exc), "messages") from None
    except GrammarError as exc:
        raise APIError(400, str(exc), _constrained_field(request) or "tools") from None
    except RequestError as exc:
        raise APIError(400, str(exc), _param_of(str(exc))) from None


def text_content(texts: list[str]) -> str | list[dict[str, Any]]:
    """Texts as one message's content: the text itself when there is one, else text blocks
    (which reach a template that reads strings only joined by newlines, as llama.cpp joins
    them)."""
    if len(texts) == 1:
        return texts[0]
    return [{"type": "text", "text": text} for text in texts] if texts else ""


def _joined_text(template: ChatTemplate, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` as llama.cpp hands them to a template that takes string content only:
    each list of text blocks joined with newlines (a template that reads the list itself gets
    it as sent). A block such a template cannot show (an image, say) is a 400 naming it,
    where llama.cpp drops it with a warning."""
    if not any(isinstance(m.get("content"), list) for m in messages):
        return messages
    if not takes_string_content_only(llama_compatible(template)):
        return messages
    joined = []
    for i, message in enumerate(messages):
        content = message.get("content")
        if isinstance(content, list):
            texts = []
            for j, block in enumerate(content):
                text = block.get("text") if block.get("type") == "text" else None
                if not isinstance(text, str):
                    raise APIError(
                        400,
                        f"messages[{i}].content[{j}] is a {block.get('type')!r} block, and this "
                        "model's chat template shows text only",
                        f"messages[{i}].content[{j}]",
                    )
                texts.append(text)
            message = {**message, "content": "\n".join(texts)}
        joined.append(message)
    return joined


def _object_arguments(
    template: ChatTemplate, messages: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """``messages`` as llama.cpp hands them to a template that reads a call's arguments as an
    object: OpenAI's JSON-text arguments parsed. Left as text, such a template writes them
    as one quoted string, a prompt the model never saw in training. Text that is not a JSON
    object stays as it is (llama.cpp refuses the request)."""
    if not any(_text_arguments(m) for m in messages):
        return messages
    if not tool_call_support(template).object_arguments:
        return messages
    out = []
    for message in messages:
        if _text_arguments(message):
            message = {**message, "tool_calls": [_parsed(c) for c in message["tool_calls"]]}
        out.append(message)
    return out


def _text_arguments(message: dict[str, Any]) -> bool:
    calls = message.get("tool_calls")
    return isinstance(calls, list) and any(
        isinstance(c, dict)
        and isinstance(c.get("function"), dict)
        and isinstance(c["function"].get("arguments"), str)
        for c in calls
    )


def _parsed(call: Any) -> Any:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("arguments"), str):
        return call
    try:
        arguments = json.loads(function["arguments"])
    except (ValueError, RecursionError):
        return call
    if not isinstance(arguments, dict):
        return call
    return {**call, "function": {**function, "arguments": arguments}}


def _check_roles(source: str, request: ChatRequest) -> None:
    """A 400 naming the first message whose role neither OpenAI defines nor the template
    names as a string of its own (Llama 3.1's ``'ipython'``, Gemma's ``'model'``). A
    template that does not name a role drops its message, fails, or renders it under a
    header the model was never trained on: never as the client meant."""
    for i, message in enumerate(request.messages):
        role = message.role
        if role in OPENAI_ROLES or (role and _names(source, role)):
            continue
        raise APIError(
            400,
            f"messages[{i}].role {role!r} is not a role OpenAI defines "
            f"({', '.join(sorted(OPENAI_ROLES))}) nor one this model's chat template names",
            f"messages[{i}].role",
        )


def _names(source: str, word: str) -> bool:
    """Whether the template's source holds ``word`` as a quoted string."""
    return f"'{word}'" in source or f'"{word}"' in source


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
    if needed is None and not engine.takes_grammar:
        return None  # nothing to enforce, nowhere to send it: not derived
    try:
        grammar = turn.grammar
    except (GrammarError, RequestError) as exc:
        raise APIError(400, str(exc), needed or "tools") from None
    if grammar is None:
        if needed in ("tool_choice", "response_format"):
            # llama.cpp sets no grammar: this chat format has nothing to enforce it with (no
            # tool-call syntax it knows), so the request cannot be honoured as asked
            raise APIError(
                400,
                f"{needed} cannot be enforced: llama.cpp knows no tool-call or JSON syntax "
                "for this model's chat format",
                needed,
            )
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
    """The engine's pieces read through the stop strings and the turn's stream.

    The turn's policy decides what a reply that does not match its format becomes: an error
    (``reference``), or content and dropped text (``guaranteed``; only a call already
    streamed that then proves unreadable is an error). A streamed reply is read piece by
    piece, a whole one at its end (so that nothing announced ever needs taking back).

    A reply the engine cut short (``finish_reason`` ``length``) keeps that reason, calls or
    not; a call it cut inside is left out of the whole message (its arguments are not
    complete) and logged. Streamed, what was sent of it stands. ``stop_string`` is the stop
    string that ended the reply, when one did and it is known (the engine said which, or it
    reached the reply and was cut here)."""

    turn: Turn
    stops: tuple[str, ...]
    streamed: bool = True
    finish_reason: str = "stop"
    usage: Usage | None = None
    message: AssistantMessage | None = None
    calls: int = 0
    stop_string: str | None = None
    _scanner: StopScanner = field(init=False)

    def __post_init__(self) -> None:
        self._scanner = StopScanner(self.stops)
        self._stream = self.turn.stream()

    async def deltas(self, pieces: AsyncIterator[Piece]) -> AsyncIterator[list[Delta]]:
        """The deltas of the reply, a list per engine piece (one list at the end when the
        reply is not streamed); ``ReplyError`` when the finished reply does not parse. Text
        past a stop string is not read; the engine is read to its end for its usage."""
        stream, scanner = self._stream, self._scanner
        whole: list[str] = []
        async for piece in pieces:
            text = scanner.feed(piece.text)
            if text:
                if self.streamed:
                    yield self._counted(stream.feed(text))
                else:
                    whole.append(text)
            if piece.finish_reason is not None:
                self.finish_reason = piece.finish_reason
                self.usage = piece.usage
                self.stop_string = piece.stop
        if scanner.stopped:
            self.finish_reason = "stop"
            self.stop_string = scanner.found
        whole.append(scanner.finish())
        text = "".join(whole)
        out = self._counted(stream.feed(text)) if text else []
        end = stream.finish()
        message = end.message
        out += self._counted(end.deltas)
        if self.finish_reason == "length":
            cut = message.tool_calls[stream.whole_calls :]
            if cut and not self.streamed:
                log.info("a tool call cut short by the length limit was left out: %s", cut)
                message = replace(message, tool_calls=message.tool_calls[: stream.whole_calls])
        elif message.tool_calls:
            self.finish_reason = "tool_calls"
        self.message = message
        yield out

    def _counted(self, deltas: list[Delta]) -> list[Delta]:
        """``deltas``, noting how many calls went out."""
        for delta in deltas:
            if delta.tool_call is not None:
                self.calls = max(self.calls, delta.tool_call.index + 1)
        return deltas
