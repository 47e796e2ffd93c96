"""Codec: one checkpoint's chat format, both directions (render prompts, parse replies)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .errors import (
    ChatCodecError,
    CheckpointError,
    RequestError,
    TemplateArgumentError,
    TemplateError,
    TemplateNotFoundError,
    TokenizerError,
)
from .strings import common_prefix_length
from .template import ChatTemplate, Limits, RenderedChat
from .template.environment import call_budget
from .template.render import raise_if_budget_spent, request_lists

if TYPE_CHECKING:
    from .encoding import Encoding, ThoughtMarkers
    from .reply.description import ReplyFormat
    from .reply.turn import Turn
    from .tokenizer import Tokenizer

__all__ = ["Codec", "REASONING_FORMATS", "TOOL_CHOICES"]

# the values llama.cpp accepts (common_chat_tool_choice_parse_oaicompat,
# common_reasoning_format_from_name in common/chat.cpp)
TOOL_CHOICES = ("auto", "required", "none")
REASONING_FORMATS = ("none", "auto", "deepseek", "deepseek-legacy")


class Codec:
    """A checkpoint's chat templates and special tokens.

    ``templates`` is one template source, or named sources as a checkpoint may ship them
    (``{"default": ..., "tool_use": ...}``); transformers' selection rule picks one per
    request: an explicit ``template_name``, else ``tool_use`` when tools are given, else
    ``default``. ``tokenizer`` (a checkpoint folder, a ``tokenizer.json`` or ``.gguf`` file, or
    a loaded tokenizer) is what ``encode`` tokenizes with; it is loaded on first use.
    """

    def __init__(
        self,
        templates: str | Mapping[str, str],
        *,
        bos_token: str | None = None,
        eos_token: str | None = None,
        special_tokens: Mapping[str, str] | None = None,
        template_name: str | None = None,
        limits: Limits | None = None,
        origin: str | None = None,
        tokenizer: str | os.PathLike[str] | Tokenizer | None = None,
    ) -> None:
        tokens = dict(special_tokens or {})
        if bos_token is not None:
            tokens["bos_token"] = bos_token
        if eos_token is not None:
            tokens["eos_token"] = eos_token
        self.special_tokens: dict[str, str] = tokens
        self.sources: dict[str, str] | None = (
            None if isinstance(templates, str) else dict(templates)
        )
        self._single = templates if isinstance(templates, str) else None
        self.template_name = template_name
        self.limits = limits
        self.origin = origin
        self._compiled: dict[str | None, ChatTemplate] = {}
        # what the tokenizer is loaded from (or the loaded tokenizer): kept for copies
        self.tokenizer_source = tokenizer
        self._tokenizer: Tokenizer | None = None
        self._thoughts: dict[str | None, ThoughtMarkers | None] = {}
        if self.sources is not None and not self.sources:
            raise CheckpointError("no chat template was given")
        if (
            self.sources is not None
            and template_name is not None
            and template_name not in self.sources
        ):
            raise TemplateNotFoundError(
                f"no chat template named {template_name!r}; available: {sorted(self.sources)}"
            )

    def __getstate__(self) -> dict[str, Any]:
        # compiled templates hold the sandbox's closures: a copy compiles its own on first use
        return {**self.__dict__, "_compiled": {}, "_thoughts": {}}

    def __repr__(self) -> str:
        names = "" if self.sources is None else f" templates={sorted(self.sources)}"
        where = f" from {self.origin}" if self.origin else ""
        return f"<Codec{names}{where}>"

    def template_for(
        self, tools: Sequence[Any] | None = None, name: str | None = None
    ) -> ChatTemplate:
        """The compiled template transformers would choose for a request."""
        key = self.select(tools, name)
        compiled = self._compiled.get(key)
        if compiled is None:
            if key is None or self.sources is None:
                source = self._single or ""
            else:
                source = self.sources[key]
            compiled = ChatTemplate(
                source, special_tokens=self.special_tokens, limits=self.limits, name=key
            )
            self._compiled[key] = compiled
        return compiled

    @property
    def template(self) -> ChatTemplate:
        """The template used when no tools are given."""
        return self.template_for(None)

    def select(self, tools: Sequence[Any] | None = None, name: str | None = None) -> str | None:
        """The name of the template a request uses (None for a single unnamed template)."""
        if self.sources is None:
            return None
        name = name or self.template_name
        if name is not None:
            if name not in self.sources:
                raise TemplateNotFoundError(
                    f"no chat template named {name!r}; available: {sorted(self.sources)}"
                )
            return name
        if tools is not None and "tool_use" in self.sources:
            return "tool_use"
        if "default" in self.sources:
            return "default"
        raise TemplateNotFoundError(
            "This model has multiple chat templates with no default specified! Please either pass a "
            "chat template or the name of the template you wish to use to the `chat_template` argument. "
            f"Available template names are {sorted(self.sources)}."
        )

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any] | Callable[..., Any]] | None = None,
        documents: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = False,
        continue_final_message: bool | str = False,
        now: float | int | datetime | None = None,
        template_name: str | None = None,
        **context: Any,
    ) -> str:
        """The prompt, with this checkpoint's special tokens filled in (see ChatTemplate.render)."""
        return self.template_for(tools, template_name).render(
            messages,
            tools,
            documents,
            add_generation_prompt,
            continue_final_message,
            now,
            **context,
        )

    def render_with_spans(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any] | Callable[..., Any]] | None = None,
        documents: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = False,
        now: float | int | datetime | None = None,
        template_name: str | None = None,
        **context: Any,
    ) -> RenderedChat:
        """The prompt and the assistant spans (see ChatTemplate.render_with_spans)."""
        return self.template_for(tools, template_name).render_with_spans(
            messages, tools, documents, add_generation_prompt, now, **context
        )

    @property
    def tokenizer(self) -> Tokenizer:
        """The tokenizer ``encode`` uses (loaded on first use), or TokenizerError when this
        Codec was given none."""
        if self._tokenizer is None:
            self._tokenizer = _as_tokenizer(self.tokenizer_source, self.origin)
        return self._tokenizer

    def encode(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any] | Callable[..., Any]] | None = None,
        documents: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = False,
        *,
        mask_end_marker: bool = True,
        mask_reasoning: bool = True,
        tokenizer: str | os.PathLike[str] | Tokenizer | None = None,
        now: float | int | datetime | None = None,
        template_name: str | None = None,
        **context: Any,
    ) -> Encoding:
        """The token ids of the rendered conversation and a mask of the assistant's tokens.

        ``input_ids`` are those of ``apply_chat_template(..., tokenize=True)`` with this
        checkpoint's tokenizer; ``assistant_masks`` are transformers' where the template has
        ``{% generation %}`` tags, else made the same way from the spans chatcodec derives
        (``render_with_spans``). ``mask_end_marker=False`` leaves the end-of-turn marker out
        of the mask, ``mask_reasoning=False`` the thought (docs/training.md has the rule).
        ``tokenizer`` overrides the Codec's for this call.
        """
        from .encoding import encode_rendered

        limits = self.template_for(tools, template_name).limits
        with call_budget(limits, "encoding the conversation"):  # (its renders share it)
            rendered = self.render_with_spans(
                messages, tools, documents, add_generation_prompt, now, template_name, **context
            )
            bad = None if rendered.text.isascii() else _SURROGATE.search(rendered.text)
            if bad is not None:
                # no tokenizer reads a lone surrogate ("\ud800"): its own error would be foreign
                inputs = {"messages": messages, "tools": tools, "documents": documents, **context}
                raise RequestError(f"{_not_unicode(inputs, bad)}, which no tokenizer reads")
            thought = None
            if not mask_reasoning:
                thought = self.thought_markers(tools, template_name)
        return encode_rendered(
            rendered,
            self.tokenizer if tokenizer is None else _as_tokenizer(tokenizer, self.origin),
            mask_end_marker=mask_end_marker,
            mask_reasoning=mask_reasoning,
            thought=thought,
        )

    def thought_markers(
        self, tools: Sequence[Any] | None = None, template_name: str | None = None
    ) -> ThoughtMarkers | None:
        """How the chosen template's replies open and close a thought, as llama.cpp reads
        them (thinking enabled); None when llama.cpp reads no thought in them."""
        from .encoding import ThoughtMarkers

        key = self.select(tools, template_name)
        if key not in self._thoughts:
            single = Codec(
                self.template_for(tools, template_name).source,
                special_tokens=self.special_tokens,
                limits=self.limits,
            )
            with call_budget(single.template.limits, "finding the thought markers"):
                try:
                    block = single.prepare([{"role": "user", "content": "x"}]).format.reasoning
                except ChatCodecError as exc:  # llama.cpp cannot set it up: no markers known
                    raise_if_budget_spent(exc)  # (out of time: no answer to remember)
                    block = None
            self._thoughts[key] = (
                None
                if block is None
                else ThoughtMarkers(block.start, tuple(m for m, eaten in block.closers if eaten))
            )
        return self._thoughts[key]

    def prepare(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        tool_choice: str | Mapping[str, Any] = "auto",
        parallel_tool_calls: bool | None = None,
        enable_thinking: bool = True,
        reasoning_format: str = "deepseek",
        continue_final_message: bool | str | None = None,
        response_format: Mapping[str, Any] | None = None,
        now: float | int | datetime | None = None,
        tool_call_id: int | Callable[[int], str] | None = None,
        policy: str = "reference",
        **template_kwargs: Any,
    ) -> Turn:
        """Render the prompt for a request and set up the reading of its reply.

        The reply format follows llama.cpp's choice for this template and these options (each
        described in docs/decoding.md): ``tool_choice`` is llama.cpp's three or OpenAI's named
        form; ``parallel_tool_calls=None`` takes the template's capability; a final assistant
        message is continued as llama-server does unless ``continue_final_message`` says
        otherwise; ``tool_call_id`` is None (random per turn), an ``int`` seed or
        ``(index) -> str``; ``now`` pins ``strftime_now``; ``policy`` is ``"reference"``
        (llama.cpp exactly) or ``"guaranteed"`` (llama.cpp's result plus what a user relies on
        where llama.cpp falls short: docs/decoding.md, "Policies"). An option out of range
        raises RequestError before anything is rendered.
        """
        from .reply.request import POLICIES, ReplyRequest
        from .reply.select import describe, template_context
        from .reply.turn import Turn
        from .schema_bounds import SchemaWork, schema_work, work_limit
        from .template.capabilities import tool_call_support

        messages, tools = _request_lists(messages, tools)
        _check_reasoning_format(reasoning_format)
        if policy not in POLICIES:
            raise RequestError(f"policy must be one of {', '.join(POLICIES)}, not {policy!r}")
        if parallel_tool_calls is not None and not isinstance(parallel_tool_calls, bool):
            raise RequestError(
                "parallel_tool_calls must be true, false or None (the template's capability), "
                f"not {parallel_tool_calls!r}"
            )
        choice, reply_tools = _tool_choice(tool_choice, tools, policy)
        call_id = _call_ids(tool_call_id)
        json_schema = _json_schema(response_format, policy)
        # one count of schema work for the call, its limit in proportion to the schemas
        work = SchemaWork(work_limit(_check_schemas(tools, response_format, json_schema)))
        mode = _continuation(messages, continue_final_message)
        # the continued message is left out of the render
        final = messages[-1] if mode != "none" and messages else None
        if final is not None:
            messages = messages[:-1]
        # llama.cpp writes the prefill only for a message with something in it
        continuing = final is not None and _has_fields(final)
        template = self.template_for(tools)
        context = dict(template_kwargs)
        context.setdefault("enable_thinking", enable_thinking)
        context.update(template_context(template.source, json_schema))
        # every render below (the prompts, the probes, the analysis) shares one budget, and
        # the reading of the schemas one count of their work
        with call_budget(template.limits, "preparing the request"), schema_work(work):
            prompt, generation_prompt, llama_without = _prompts(
                template, messages, tools, context, now, add_generation_prompt=mode == "none"
            )
            if parallel_tool_calls is None:  # llama.cpp's server: the template's capability
                parallel_tool_calls = tool_call_support(template).parallel  # cached per template
            fmt = describe(
                ReplyRequest(
                    template.source,
                    generation_prompt,
                    tools=reply_tools,
                    tool_choice=choice,
                    parallel_tool_calls=parallel_tool_calls,
                    reasoning_format=reasoning_format,
                    enable_thinking=bool(context.get("enable_thinking", enable_thinking)),
                    special_tokens=template.special_tokens,
                    json_schema=json_schema,
                    continue_final_message=mode if continuing else "none",
                    policy=policy,  # type: ignore[arg-type]  # checked above
                    limits=template.limits,
                )
            )
        if final is not None and continuing:
            generation_prompt = _prefill(fmt, final, mode, generation_prompt, llama_without)
            prompt += generation_prompt
        eos = self.special_tokens.get("eos_token")
        return Turn(
            prompt=prompt,
            generation_prompt=generation_prompt,
            stop=fmt.stop + ((eos,) if eos and eos not in fmt.stop else ()),
            handler=fmt.handler,
            format=fmt,
            call_id=call_id,
            schema_work_limit=work.limit,
        )


_SURROGATE = re.compile("[\ud800-\udfff]")


def _not_unicode(inputs: Mapping[str, Any], rendered: re.Match[str]) -> str:
    """Where the first lone surrogate of a request is: the input that holds it (as
    ``messages[0]['content']``), else the rendered text (the template wrote it)."""
    stack: list[tuple[str, Any]] = list(inputs.items())[::-1]
    seen: set[int] = set()
    while stack:
        path, value = stack.pop()
        if isinstance(value, str):
            found = _SURROGATE.search(value)
            if found:
                return f"{path} is not Unicode text: it holds {found.group()!r}"
        elif id(value) in seen:
            continue
        elif isinstance(value, Mapping):
            seen.add(id(value))
            items = [(f"{path}[{key!r}]", item) for key, item in value.items()]
            items += [(f"a key of {path}", key) for key in value if isinstance(key, str)]
            stack.extend(reversed(items))
        elif isinstance(value, (list, tuple)):
            seen.add(id(value))
            stack.extend(reversed([(f"{path}[{i}]", item) for i, item in enumerate(value)]))
    where = f"{rendered.group()!r} at {rendered.start()}"
    return f"the rendered text is not Unicode text: it holds {where}"


def _prefill(
    fmt: ReplyFormat,
    final: Mapping[str, Any],
    mode: str,
    generation_prompt: str,
    llama_without: str,
) -> str:
    """The generation prompt that continues ``final`` (the family's prefill)."""
    from .reply.prefill import message_content

    reasoning = final.get("reasoning_content")
    return fmt.continuation.generation_prompt(
        generation_prompt,
        llama_without,
        reasoning if isinstance(reasoning, str) else "",
        message_content(final),
        mode,
    )


def _request_lists(
    messages: Any, tools: Any
) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]] | None]:
    """The request's messages and tools as lists of mappings, or the TemplateArgumentError
    ``render`` would raise for them (prepare reads them itself before rendering)."""
    listed, tool_list, problem = request_lists(messages, tools)
    if problem:
        raise TemplateArgumentError(problem, stage="render", kind="TypeError")
    return listed, tool_list


def _check_reasoning_format(reasoning_format: str) -> None:
    if not isinstance(reasoning_format, str) or reasoning_format not in REASONING_FORMATS:
        raise RequestError(
            f"reasoning_format must be one of {', '.join(map(repr, REASONING_FORMATS))} "
            f"(llama.cpp's names), not {reasoning_format!r}"
        )


def _prompts(
    template: ChatTemplate,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None,
    context: dict[str, Any],
    now: float | int | datetime | None,
    add_generation_prompt: bool,
) -> tuple[str, str, str]:
    """(the prompt transformers renders, llama.cpp's generation prompt, llama.cpp's render
    without it)."""
    generation_prompt, llama_prompt, llama_without = _llama_generation_prompt(
        template, messages, tools, context, now
    )
    try:
        prompt = template.render(
            messages, tools=tools, add_generation_prompt=add_generation_prompt, now=now, **context
        )
    except TemplateError as exc:
        raise_if_budget_spent(exc)
        # transformers cannot render this request, llama.cpp's renderer can: its prompt
        prompt = llama_prompt if add_generation_prompt else llama_without
    return prompt, generation_prompt, llama_without


def _tool_choice(
    tool_choice: str | Mapping[str, Any],
    tools: Sequence[Mapping[str, Any]] | None,
    policy: str = "reference",
) -> tuple[str, Sequence[Mapping[str, Any]] | None]:
    """(llama.cpp's tool choice, the tools a reply may call) of a request's ``tool_choice``:
    the named form requires a call to that one tool. Under ``guaranteed`` a required call
    needs a tool to call (llama.cpp reads such a reply as text)."""
    from .reply.arguments import tool_functions

    if isinstance(tool_choice, str):
        if tool_choice not in TOOL_CHOICES:
            raise RequestError(
                f"tool_choice must be 'auto', 'required', 'none' or "
                f'{{"type": "function", "function": {{"name": ...}}}}, not {tool_choice!r}'
            )
        if tool_choice == "required" and not tools and policy == "guaranteed":
            raise RequestError(
                "tool_choice 'required' needs tools, and the request gives none "
                "(under the guaranteed policy a required call is a call)"
            )
        return tool_choice, tools
    named = isinstance(tool_choice, Mapping) and tool_choice.get("type") == "function"
    function = tool_choice.get("function") if named else None
    name = function.get("name") if isinstance(function, Mapping) else None
    if not isinstance(name, str):
        raise RequestError(
            'a named tool_choice is {"type": "function", "function": {"name": "<tool name>"}}, '
            f"not {tool_choice!r}"
        )
    functions = tool_functions(tools)
    offered = [fn["name"] for fn in functions]
    if name not in offered:
        raise RequestError(
            f"tool_choice names the tool {name!r}, which is not among the request's tools "
            f"({', '.join(map(repr, offered)) or 'none given'})"
        )
    chosen = [fn for fn in functions if fn["name"] == name]
    return "required", [t for t in tools or () if t.get("function") in chosen]


def _call_ids(tool_call_id: int | Callable[[int], str] | None) -> Callable[[int], str]:
    """The namer of a turn's tool calls (see ``Codec.prepare``'s ``tool_call_id``)."""
    import random
    import secrets

    from .reply.stream import CallIdPrefix

    if tool_call_id is None:
        return CallIdPrefix(f"call_{secrets.token_hex(6)}_")
    if isinstance(tool_call_id, int) and not isinstance(tool_call_id, bool):
        # random.Random(int) draws the same numbers on every run and platform
        return CallIdPrefix(f"call_{random.Random(tool_call_id).getrandbits(48):012x}_")
    if callable(tool_call_id):
        return tool_call_id
    raise RequestError(
        "tool_call_id must be None (random ids), an int seed or a callable (index) -> str, "
        f"not {type(tool_call_id).__name__}"
    )


def _llama_generation_prompt(
    template: ChatTemplate,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None,
    context: dict[str, Any],
    now: float | int | datetime | None = None,
) -> tuple[str, str, str]:
    """(generation prompt, prompt, prompt without the generation prompt) of a request as
    llama.cpp computes them.

    llama.cpp renders with its own Jinja engine and conventions (tools and a false
    ``add_generation_prompt`` left undefined, ``datetime``/``date_string`` set): the
    generation prompt is the render with ``add_generation_prompt`` past its longest common
    prefix with the render without. A request it cannot render cannot be set up.
    """
    from .template.compat import (
        as_typed_content,
        llama_compatible,
        llama_extra_context,
        takes_typed_content_only,
    )

    compat = llama_compatible(template)
    if takes_typed_content_only(compat):
        messages = as_typed_content(messages)
    variables = {**llama_extra_context(), **context}
    try:
        with_prompt = compat.render(
            messages, tools=tools, add_generation_prompt=True, now=now, **variables
        )
        without = compat.render(
            messages, tools=tools, add_generation_prompt=False, now=now, **variables
        )
    except TemplateError as exc:
        raise_if_budget_spent(exc)  # (the call's time is up: not the template's failure)
        raise type(exc)(
            f"llama.cpp cannot set up this request: the template fails to render ({exc})",
            stage="render",
            kind=exc.kind,
            lineno=exc.lineno,
        ) from None
    common = common_prefix_length(with_prompt, without)
    return with_prompt[common:], with_prompt, without


def _continuation(messages: Sequence[Mapping[str, Any]], requested: bool | str | None) -> str:
    """What of the final message is continued (``"none"``, ``"content"``,
    ``"reasoning_content"``), with llama-server's checks; ``None`` continues a final assistant
    message (llama-server's ``prefill_assistant``, on by default)."""
    from .reply.prefill import continuation_mode

    last: Mapping[str, Any] = messages[-1] if messages else {}
    if requested is None:
        if last.get("role") != "assistant":
            return "none"
        if len(messages) >= 2 and messages[-2].get("role") == "assistant":
            raise RequestError("Cannot have 2 or more assistant messages at the end of the list.")
        requested = "auto"
    try:
        mode = continuation_mode(last, requested)
    except ValueError as exc:
        raise RequestError(str(exc)) from None
    if mode != "none" and last.get("role") == "assistant" and last.get("tool_calls"):
        raise RequestError("Cannot continue an assistant message that contains tool calls.")
    return mode


def _has_fields(message: Mapping[str, Any]) -> bool:
    """llama.cpp's non-empty message: content, calls, reasoning, a name or a call id."""
    keys = ("content", "tool_calls", "reasoning_content", "name", "tool_call_id")
    return any(message.get(k) for k in keys)


def _json_schema(
    response_format: Mapping[str, Any] | None, policy: str = "reference"
) -> dict[str, Any] | None:
    """The JSON schema of an OpenAI ``response_format``, as llama-server reads it (an absent
    or empty schema is any object). A schema that is not an object, or null, constrains
    nothing; under ``guaranteed`` a null schema is any object, as llama-server reads it, and
    another is a RequestError rather than a reply with no JSON promised."""
    if response_format is None:
        return None
    if not isinstance(response_format, Mapping):
        raise RequestError(
            'response_format must be a mapping such as {"type": "json_schema", "json_schema": '
            f"{{...}}}}, not {type(response_format).__name__}"
        )
    kind = response_format.get("type") or ""
    if kind == "json_object":
        schema = response_format.get("schema", {})
    elif kind == "json_schema":
        wrapper = response_format.get("json_schema") or {}
        schema = wrapper.get("schema", {}) if isinstance(wrapper, Mapping) else {}
    elif kind == "text" or not kind:
        return None
    else:
        raise RequestError(
            'response_format type must be "text", "json_object" or "json_schema", not ' + repr(kind)
        )
    if schema is None and policy == "guaranteed":
        schema = {}  # llama-server's reading of a null schema: any object
    if not isinstance(schema, Mapping):
        if policy == "guaranteed":
            raise RequestError(
                f"response_format's schema must be a JSON Schema object, not "
                f"{type(schema).__name__}"
            )
        return None
    return dict(schema) if schema else {"type": "object"}


def _check_schemas(
    tools: Sequence[Mapping[str, Any]] | None,
    response_format: Mapping[str, Any] | None,
    json_schema: Mapping[str, Any] | None,
) -> int:
    """Each tool's parameters and the response schema within the schema bounds (a
    RequestError naming the path where one nests too deeply), before anything reads them;
    the number of their nodes."""
    from .schema_bounds import check_schema

    nodes = 0
    for i, tool in enumerate(tools or ()):
        function = tool.get("function") if isinstance(tool, Mapping) else None
        if isinstance(function, Mapping) and isinstance(function.get("parameters"), Mapping):
            nodes += check_schema(function["parameters"], f"tools[{i}].function.parameters")
    if json_schema is not None and response_format is not None:
        wrapper = "json_schema." if response_format.get("type") == "json_schema" else ""
        nodes += check_schema(json_schema, f"response_format.{wrapper}schema")
    return nodes


def _as_tokenizer(source: Any, origin: str | None) -> Tokenizer:
    """A loaded tokenizer, from a path or as given; TokenizerError when there is none."""
    from .tokenizer import load_tokenizer

    if source is None:
        where = f"the checkpoint {origin} has" if origin else "a Codec built from a template has"
        raise TokenizerError(
            f"encode needs a tokenizer and {where} none: pass tokenizer= (a checkpoint folder, "
            "a tokenizer.json or a .gguf file), or load the checkpoint's folder"
        )
    if isinstance(source, (str, os.PathLike)):
        return load_tokenizer(source)
    if callable(getattr(source, "tokenize", None)) and callable(
        getattr(source, "is_special", None)
    ):
        return source  # type: ignore[no-any-return]
    raise TokenizerError(
        f"tokenizer must be a path or a loaded tokenizer, not {type(source).__name__}"
    )
