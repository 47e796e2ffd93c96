"""chatcodec as vLLM's tool-call and reasoning parser (``--tool-call-parser chatcodec
--reasoning-parser chatcodec``): the reply read as llama.cpp reads it, with the model's own
chat template and the request's options.

vLLM composes the two parsers into one ``DelegatingParser`` per request. The reply formats
chatcodec reads are not "a thought, then content": one reader takes the whole reply (llama.cpp
parses ``generation_prompt + reply`` in one pass). So the tool parser does the reading; the
reasoning parser hands the text through and tells vLLM that reasoning needs no phase of its
own. Both parsers are ``engine_based_streaming``: vLLM feeds the tool parser each
``delta_text`` once, and ends the stream through :meth:`ChatcodecToolParser.finish_streaming`.

Without ``--reasoning-parser chatcodec`` the tool parser keeps a thought in the content
(llama.cpp's ``reasoning_format="none"``), as vLLM does without a reasoning parser.

Replies are read and constrained under the ``guaranteed`` policy unless the request's
``policy`` field or ``$CHATCODEC_VLLM_POLICY`` says ``reference``
(:func:`chatcodec.integrations.vllm.policy_of`).

Loaded by vLLM through :func:`chatcodec.integrations.vllm.register`, or as a file
(``--tool-parser-plugin``/``--reasoning-parser-plugin`` naming this module's path), which
registers both parsers as it loads.
"""

from __future__ import annotations

import json
import threading
import warnings
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

import vllm

from chatcodec.integrations.vllm import (
    PARSER_NAME,
    check_vllm_version,
    policy_of,
    special_markers,
    special_tokens_of,
)

check_vllm_version(vllm.__version__)

from vllm.entrypoints.generate.base.protocol import (  # noqa: E402
    DeltaFunctionCall,
    DeltaMessage,
    DeltaToolCall,
    ExtractedToolCallInformation,
    FunctionCall,
    ToolCall,
)
from vllm.exceptions import VLLMValidationError  # noqa: E402
from vllm.parser.engine.adapters import ParserEngineToolAdapter  # noqa: E402
from vllm.reasoning import ReasoningParser, ReasoningParserManager  # noqa: E402
from vllm.sampling_params import StructuredOutputsParams  # noqa: E402
from vllm.tool_parsers import ToolParserManager  # noqa: E402
from vllm.tool_parsers.abstract_tool_parser import ToolParser  # noqa: E402

from chatcodec import Codec  # noqa: E402
from chatcodec.errors import ChatCodecError, UnusedVariableWarning  # noqa: E402
from chatcodec.grammar.constraint import constrained_field  # noqa: E402
from chatcodec.reply import AssistantMessage, Delta, ReplyStream, Turn  # noqa: E402
from chatcodec.reply.request import Policy  # noqa: E402

__all__ = ["ChatcodecToolParser", "ChatcodecReasoningParser", "codec_of", "prepare_turn"]

# chat-template keywords vLLM adds to the request's own that are Codec.prepare's options, not
# the template's (continue_final_message is taken from the request itself)
_VLLM_OWN = frozenset({"add_generation_prompt", "continue_final_message", "tools"})


@lru_cache(maxsize=8)
def _compiled(templates: str | tuple[tuple[str, str], ...], bos: str, eos: str) -> Codec:
    source: str | dict[str, str] = templates if isinstance(templates, str) else dict(templates)
    return Codec(source, bos_token=bos, eos_token=eos)


def codec_of(tokenizer: Any, chat_template: str | None = None) -> Codec:
    """The codec of the template vLLM renders with: the request's ``chat_template`` if it
    has one, else the tokenizer's (a string or named templates), with its BOS and EOS."""
    template = chat_template if chat_template is not None else tokenizer.chat_template
    if template is None:
        raise ChatCodecError(
            "the tokenizer has no chat template: give the model one (tokenizer_config.json or "
            "chat_template.jinja) for the chatcodec parsers to read its replies"
        )
    key: str | tuple[tuple[str, str], ...]
    if isinstance(template, str):
        key = template
    elif isinstance(template, Mapping):
        key = tuple(sorted(template.items()))
    else:  # a list of {"name", "template"}, as tokenizer_config.json may hold them
        key = tuple(sorted((t["name"], t["template"]) for t in template))
    bos = getattr(tokenizer, "bos_token", None) or ""
    eos = getattr(tokenizer, "eos_token", None) or ""
    return _compiled(key, str(bos), str(eos))


def _template_message(message: dict[str, Any]) -> dict[str, Any]:
    """A history message as vLLM renders it: an assistant call's JSON argument text read
    into the object templates iterate over (text that is not JSON stays text)."""
    calls = message.get("tool_calls")
    if message.get("role") != "assistant" or not isinstance(calls, list):
        return message
    read = []
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        arguments = function.get("arguments") if isinstance(function, dict) else None
        if isinstance(function, dict) and isinstance(arguments, str):
            try:
                call = {**call, "function": {**function, "arguments": json.loads(arguments)}}
            except ValueError:
                pass
        read.append(call)
    return {**message, "tool_calls": read}


def prepare_turn(
    codec: Codec,
    request: Any,
    chat_template_kwargs: Mapping[str, Any] | None,
    reasoning: bool,
    policy: Policy = "guaranteed",
) -> Turn:
    """``codec.prepare`` for a vLLM ``ChatCompletionRequest``: its messages, tools,
    ``tool_choice``, ``parallel_tool_calls`` (the template's capability when the request
    leaves it out, as llama.cpp's server reads it), ``response_format``, continuation, and
    the chat-template keywords vLLM rendered the prompt with. ``reasoning``: a thought goes
    to ``reasoning_content`` (llama.cpp's ``deepseek`` format) rather than the content.
    ``policy``: how the reply is read and constrained (docs/decoding.md, "Policies")."""
    data = request.model_dump(mode="json", exclude_none=True)
    tools = data.get("tools") or None
    choice = data.get("tool_choice")
    if choice is None or not tools:
        choice = "auto" if tools else "none"
    fields_set = request.model_fields_set
    parallel = request.parallel_tool_calls if "parallel_tool_calls" in fields_set else None
    # by alias: vLLM names the JSON schema "json_schema" in Python and "schema" on the wire
    response_format = (
        request.response_format.model_dump(mode="json", exclude_none=True, by_alias=True)
        if getattr(request, "response_format", None) is not None
        else None
    )
    if response_format is not None and response_format.get("type") == "text":
        response_format = None
    kwargs = {
        key: value
        for key, value in (chat_template_kwargs or request.chat_template_kwargs or {}).items()
        if key not in _VLLM_OWN and value is not None
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedVariableWarning)
        return codec.prepare(
            [_template_message(m) for m in data.get("messages") or []],
            tools,
            tool_choice=choice,
            parallel_tool_calls=parallel,
            reasoning_format="deepseek" if reasoning else "none",
            continue_final_message=bool(data.get("continue_final_message")),
            response_format=response_format,
            policy=policy,
            **kwargs,
        )


def _delta_message(deltas: Sequence[Delta]) -> DeltaMessage | None:
    """The deltas of one step as one vLLM ``DeltaMessage`` (None when they add nothing):
    the text fields joined, the pieces of each tool call joined into one entry."""
    reasoning: list[str] = []
    content: list[str] = []
    calls: dict[int, DeltaToolCall] = {}
    for delta in deltas:
        reasoning.append(delta.reasoning_content)
        content.append(delta.content)
        piece = delta.tool_call
        if piece is None:
            continue
        call = calls.get(piece.index)
        if call is None:
            calls[piece.index] = DeltaToolCall(
                index=piece.index,
                id=piece.id or None,
                type="function" if piece.id else None,
                function=DeltaFunctionCall(
                    name=piece.name or None, arguments=piece.arguments or None
                ),
            )
            continue
        function = call.function or DeltaFunctionCall()
        if piece.name:
            function.name = (function.name or "") + piece.name
        if piece.arguments:
            function.arguments = (function.arguments or "") + piece.arguments
        call.function = function
    fields: dict[str, Any] = {}
    if text := "".join(reasoning):
        fields["reasoning"] = text
    if text := "".join(content):
        fields["content"] = text
    if calls:
        fields["tool_calls"] = list(calls.values())
    return DeltaMessage(**fields) if fields else None


# a tokenizer's special tokens, by its id (the tokenizer is kept, so the id stays its own)
_SPECIAL: dict[int, tuple[Any, frozenset[str]]] = {}


def _special_tokens(tokenizer: Any) -> frozenset[str]:
    """``special_tokens_of(tokenizer)``, worked out once per tokenizer."""
    known = _SPECIAL.get(id(tokenizer))
    if known is None or known[0] is not tokenizer:
        if len(_SPECIAL) >= 8:
            _SPECIAL.clear()
        known = _SPECIAL[id(tokenizer)] = (tokenizer, special_tokens_of(tokenizer))
    return known[1]


# whether a request's reply format reads a special token of its tokenizer, by the tokenizer's
# id and the request's shape (ChatcodecToolParser._shape); the tokenizer is kept beside it
_KEEPS: dict[tuple[int, tuple[Any, ...]], tuple[Any, bool]] = {}


# the reasoning parser just made on this thread, for the tool parser vLLM makes right after it
# in the same Parser (vLLM builds a request's pair together, reasoning parser first)
_pending = threading.local()


class ChatcodecToolParser(ParserEngineToolAdapter):
    """Reads the whole reply (thought, content, tool calls) with chatcodec's decoder: one
    ``ReplyStream`` per request, fed vLLM's ``delta_text``.

    A ``ParserEngineToolAdapter`` only so that vLLM hands it the chat-template keywords it
    rendered the prompt with (it builds no vLLM parser engine)."""

    # chatcodec reads required and named tool choices in the model's own format
    supports_required_and_named = False
    structural_tag_model = None
    engine_based_streaming = True

    def __init__(
        self,
        tokenizer: Any,
        tools: list[Any] | None = None,
        *,
        model_config: Any = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        ToolParser.__init__(self, tokenizer, tools)
        self.chat_template_kwargs = dict(chat_template_kwargs or {}) or None
        self._skip_reasoning = False
        self._turn: Turn | None = None
        self._stream: ReplyStream | None = None
        self._read: tuple[str, AssistantMessage] | None = None
        partner = getattr(_pending, "reasoning", None)
        _pending.reasoning = None
        if partner is not None and partner.model_tokenizer is tokenizer:
            partner.tool_parser = self

    @property
    def skip_reasoning_parsing(self) -> bool:
        """Set by vLLM when no reasoning parser is configured: a thought stays in the content."""
        return self._skip_reasoning

    @skip_reasoning_parsing.setter
    def skip_reasoning_parsing(self, value: bool) -> None:
        self._skip_reasoning = value

    def turn(self, request: Any) -> Turn:
        """The request prepared by chatcodec (once per parser, that is once per request)."""
        if self._turn is None:
            codec = codec_of(self.model_tokenizer, getattr(request, "chat_template", None))
            self._turn = prepare_turn(
                codec,
                request,
                self.chat_template_kwargs,
                reasoning=not self._skip_reasoning,
                policy=policy_of(request),
            )
        return self._turn

    def read(self, model_output: str, request: Any) -> AssistantMessage:
        """The finished reply's message (kept for the same text: vLLM's reasoning parser and
        tool parser both ask for it)."""
        if self._read is None or self._read[0] != model_output:
            self._read = (model_output, self.turn(request).parse(model_output))
        return self._read[1]

    def adjust_request(self, request: Any) -> Any:
        """Keep the special tokens the reply format reads in vLLM's text (see
        :meth:`keep_special_tokens`), and hand vLLM chatcodec's grammar (llama.cpp's, from the
        first character the model writes) where only a grammar enforces the request:
        ``tool_choice`` required or named, ``parallel_tool_calls`` false, a
        ``response_format``. A request's own ``structured_outputs`` is left as it is. A
        grammar that cannot be given (a lazy one woken by a regex, a schema llama.cpp refuses)
        is vLLM's validation error (400)."""
        self.keep_special_tokens(request)
        if getattr(request, "structured_outputs", None) is not None:
            return request
        response_format = getattr(request, "response_format", None)
        needed = constrained_field(
            request.tools,
            request.tool_choice,
            request.parallel_tool_calls,
            getattr(response_format, "type", None),
        )
        if needed is None:
            return request
        try:
            grammar = self.turn(request).grammar
            if grammar is None:
                return request
            fields = grammar.vllm_fields()
        except ChatCodecError as exc:  # a grammar llama.cpp refuses or vLLM cannot take
            raise VLLMValidationError(
                f"{needed} needs a grammar to be enforced, and this request's cannot be "
                f"given to vLLM: {exc}",
                parameter=needed,
            ) from None
        request.structured_outputs = StructuredOutputsParams(**fields["structured_outputs"])
        request.response_format = None
        if fields.get("stop"):
            stop = request.stop or []
            stop = [stop] if isinstance(stop, str) else list(stop)
            request.stop = stop + [s for s in fields["stop"] if s not in stop]
        # the grammar covers the whole reply, a thought included: constrain from the start
        request._grammar_from_parser = True
        return request

    def keep_special_tokens(self, request: Any) -> None:
        """Set ``skip_special_tokens`` false when the request's reply format reads a special
        token of the model's tokenizer (a call opener such as Mistral's ``[TOOL_CALLS]``, a
        thought marker): vLLM would otherwise leave it out of the text before the parser
        sees it, as vLLM's own parsers turn it off for their markers. A request chatcodec
        cannot set up is left as it is: reading its reply says why.

        The answer is kept per tokenizer and per request options that shape the format (not
        per conversation), so that vLLM's adjusting parser, which reads no reply, prepares
        one request of each kind rather than every request."""
        tokenizer = self.model_tokenizer
        special = _special_tokens(tokenizer)
        if not special:
            return
        key = (id(tokenizer), self._shape(request))
        known = _KEEPS.get(key)
        if known is None or known[0] is not tokenizer:
            try:
                turn = self.turn(request)
            except ChatCodecError:
                return
            if len(_KEEPS) >= 4096:
                _KEEPS.clear()
            keeps = bool(special_markers(turn.format, special, turn.stop))
            known = _KEEPS[key] = (tokenizer, keeps)
        if known[1]:
            request.skip_special_tokens = False

    def _shape(self, request: Any) -> tuple[Any, ...]:
        """What decides the markers a request's reply format reads: the template, whether
        tools are offered and how they may be called, the response format, the template's
        keywords, the reasoning and the policy. The messages and the tools' names and
        schemas only fill the format in."""
        choice = request.tool_choice
        parallel = (
            request.parallel_tool_calls
            if "parallel_tool_calls" in request.model_fields_set
            else None
        )
        kwargs = self.chat_template_kwargs or request.chat_template_kwargs or {}
        return (
            getattr(request, "chat_template", None),
            bool(request.tools),
            choice if isinstance(choice, str) or choice is None else "named",
            parallel,
            getattr(getattr(request, "response_format", None), "type", None),
            json.dumps(kwargs, sort_keys=True, default=str),
            self._skip_reasoning,
            policy_of(request),
        )

    def extract_tool_calls(self, model_output: str, request: Any) -> ExtractedToolCallInformation:
        message = self.read(model_output, request)
        calls = [
            ToolCall(
                **({"id": call.id} if call.id else {}),
                function=FunctionCall(name=call.name, arguments=call.arguments),
            )
            for call in message.tool_calls
        ]
        return ExtractedToolCallInformation(
            tools_called=bool(calls), tool_calls=calls, content=message.content or None
        )

    def extract_tool_calls_streaming(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_token_ids: Sequence[int],
        current_token_ids: Sequence[int],
        delta_token_ids: Sequence[int],
        request: Any,
    ) -> DeltaMessage | None:
        if self._stream is None:
            self._stream = self.turn(request).stream()
        return _delta_message(self._stream.feed(delta_text)) if delta_text else None

    def finish_streaming(self) -> DeltaMessage | None:
        """The end of the reply (vLLM calls it once, with the last chunk): what only the end
        makes certain, e.g. a bare-JSON call's last argument text."""
        if self._stream is None:
            return None
        end = self._stream.finish()
        return _delta_message(end.deltas)


class ChatcodecReasoningParser(ReasoningParser):
    """The companion of :class:`ChatcodecToolParser`, which reads the thought with the rest
    of the reply: it hands the text through, and has reasoning end before the reply starts
    (so vLLM starts the tool parser at once and a grammar constrains from the first token,
    which chatcodec's grammars, thought included, are built for)."""

    engine_based_streaming = True

    def __init__(self, tokenizer: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(tokenizer, *args, **kwargs)
        self.tool_parser: ChatcodecToolParser | None = None
        _pending.reasoning = self

    def _partner(self) -> ChatcodecToolParser:
        if self.tool_parser is None:
            raise ChatCodecError(
                f"--reasoning-parser {PARSER_NAME} reads replies together with the "
                f"{PARSER_NAME} tool parser: start vLLM with --enable-auto-tool-choice "
                f"--tool-call-parser {PARSER_NAME}"
            )
        return self.tool_parser

    def is_reasoning_end(self, input_ids: Sequence[int]) -> bool:
        return True

    def has_engine_confirmed_reasoning_end(self) -> bool:
        return True

    def extract_content_ids(self, input_ids: list[int]) -> list[int]:
        return input_ids

    def extract_reasoning(self, model_output: str, request: Any) -> tuple[str | None, str | None]:
        message = self._partner().read(model_output, request)
        # the whole text goes on: the tool parser reads it with the thought, as llama.cpp does
        return message.reasoning_content or None, model_output

    def extract_reasoning_streaming(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_token_ids: Sequence[int],
        current_token_ids: Sequence[int],
        delta_token_ids: Sequence[int],
    ) -> DeltaMessage | None:
        self._partner()
        return DeltaMessage(content=delta_text)

    def finish_streaming(self) -> DeltaMessage | None:
        return None


ToolParserManager.register_module(PARSER_NAME, module=ChatcodecToolParser)
ReasoningParserManager.register_module(PARSER_NAME, module=ChatcodecReasoningParser)
