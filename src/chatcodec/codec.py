"""Codec: one checkpoint's chat format, both directions (render prompts, parse replies)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .errors import TemplateError
from .template import ChatTemplate, Limits, RenderedChat

if TYPE_CHECKING:
    from .reply.turn import Turn

__all__ = ["Codec"]


class Codec:
    """A checkpoint's chat templates and special tokens.

    ``templates`` is one template source, or named sources as a checkpoint may ship them
    (``{"default": ..., "tool_use": ...}``); transformers' selection rule picks one per
    request: an explicit ``template_name``, else ``tool_use`` when tools are given, else
    ``default``.
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
        if self.sources is not None and not self.sources:
            raise TemplateError("no chat template was given", stage="compile", kind="ValueError")
        if (
            self.sources is not None
            and template_name is not None
            and template_name not in self.sources
        ):
            raise TemplateError(
                f"no chat template named {template_name!r}; available: {sorted(self.sources)}",
                stage="compile",
                kind="ValueError",
            )

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
                raise TemplateError(
                    f"no chat template named {name!r}; available: {sorted(self.sources)}",
                    stage="render",
                    kind="ValueError",
                )
            return name
        if tools is not None and "tool_use" in self.sources:
            return "tool_use"
        if "default" in self.sources:
            return "default"
        raise TemplateError(
            "This model has multiple chat templates with no default specified! Please either pass a "
            "chat template or the name of the template you wish to use to the `chat_template` argument. "
            f"Available template names are {sorted(self.sources)}.",
            stage="render",
            kind="ValueError",
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

    def prepare(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        tool_choice: str = "auto",
        parallel_tool_calls: bool | None = None,
        enable_thinking: bool = True,
        reasoning_format: str = "deepseek",
        **template_kwargs: Any,
    ) -> Turn:
        """Render the prompt for a request and set up the reading of its reply.

        The reply format follows llama.cpp's choice for this template and these options;
        ``generation_prompt`` is what the template appends for the assistant turn (computed as
        llama.cpp does: the render with it minus the common prefix with the render without).
        """
        import secrets

        from .reply.select import describe
        from .reply.turn import Turn

        if tool_choice not in ("auto", "required", "none"):
            raise TemplateError(
                f"tool_choice must be 'auto', 'required' or 'none', not {tool_choice!r}",
                stage="render",
                kind="ValueError",
            )
        template = self.template_for(tools)
        context = dict(template_kwargs)
        context.setdefault("enable_thinking", enable_thinking)
        generation_prompt, llama_prompt = _llama_generation_prompt(
            template, messages, tools, context
        )
        try:
            prompt = template.render(messages, tools=tools, add_generation_prompt=True, **context)
        except TemplateError:
            # transformers cannot render this request, llama.cpp's renderer can: its prompt
            prompt = llama_prompt
        if parallel_tool_calls is None:  # llama.cpp's server: the template's capability
            parallel_tool_calls = _supports_parallel_tool_calls(template)
        fmt = describe(
            template.source,
            generation_prompt,
            tools=tools,
            tool_choice=tool_choice,
            parallel_tool_calls=parallel_tool_calls,
            reasoning_format=reasoning_format,
            enable_thinking=bool(context.get("enable_thinking", enable_thinking)),
            special_tokens=template.special_tokens,
        )
        stop = list(fmt.stop)
        eos = self.special_tokens.get("eos_token")
        if eos and eos not in stop:
            stop.append(eos)
        return Turn(
            prompt=prompt,
            generation_prompt=generation_prompt,
            stop=tuple(stop),
            handler=fmt.handler,
            format=fmt,
            id_prefix=f"call_{secrets.token_hex(6)}_",
        )


def _llama_generation_prompt(
    template: ChatTemplate,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None,
    context: dict[str, Any],
) -> tuple[str, str]:
    """(generation prompt, prompt) of a request as llama.cpp computes them.

    llama.cpp renders with its own Jinja engine and conventions (tools and a false
    ``add_generation_prompt`` left undefined, ``datetime``/``date_string`` set): the
    generation prompt is the render with ``add_generation_prompt`` past its longest common
    prefix with the render without. A request it cannot render cannot be set up.
    """
    from .template.compat import llama_compatible, llama_extra_context

    compat = llama_compatible(template)
    variables = {**llama_extra_context(), **context}
    try:
        with_prompt = compat.render(messages, tools=tools, add_generation_prompt=True, **variables)
        without = compat.render(messages, tools=tools, add_generation_prompt=False, **variables)
    except TemplateError as exc:
        raise TemplateError(
            f"llama.cpp cannot set up this request: the template fails to render ({exc})",
            stage="render",
            kind=exc.kind,
            lineno=exc.lineno,
        ) from None
    common = 0
    limit = min(len(with_prompt), len(without))
    while common < limit and with_prompt[common] == without[common]:
        common += 1
    return with_prompt[common:], with_prompt


def _supports_parallel_tool_calls(template: ChatTemplate) -> bool:
    """llama.cpp's ``supports_parallel_tool_calls`` capability: its probe conversation, with
    two calls, rendered by llama.cpp's conventions, reads the second call."""
    from .reply.auto.analysis import Renderer, _capabilities
    from .template.compat import llama_compatible

    return _capabilities(Renderer(llama_compatible(template)))[1]
