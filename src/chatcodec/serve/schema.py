"""The ``/v1/chat/completions`` request as the server validates it (pydantic).

Every field OpenAI defines that the server cannot honour is refused by name: ``n`` other than
1, ``logprobs``, ``logit_bias``, ``modalities`` other than text, and any field neither OpenAI
nor llama-server defines (``extra="forbid"``). Fields that change nothing for one local model
(``store``, ``metadata``, ``service_tier``, ...) are accepted.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import APIError

__all__ = ["ChatRequest", "ToolChoiceNamed", "OPENAI_ROLES", "validated"]

# the message roles OpenAI's chat API defines ("function" is its deprecated form of "tool")
OPENAI_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class Message(_Open):
    """A message: its ``role`` and whatever the template may read (content parts, tool calls,
    reasoning, names, ...)."""

    role: str
    content: str | list[dict[str, Any]] | None = None
    tool_calls: list[dict[str, Any]] | None = None


class Function(_Open):
    name: str = Field(min_length=1)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(_Strict):
    type: Literal["function"]
    function: Function


class CustomTool(_Open):
    """OpenAI's free-form tool (``{"type": "custom", "custom": {...}}``): named in a 400."""

    type: Literal["custom"]
    custom: dict[str, Any]


class _ChosenFunction(_Strict):
    name: str


class ToolChoiceNamed(_Strict):
    type: Literal["function"]
    function: _ChosenFunction


class _AllowedTools(_Strict):
    mode: Literal["auto", "required"]
    tools: list[ToolChoiceNamed] = Field(min_length=1)


class ToolChoiceAllowed(_Strict):
    """``{"type": "allowed_tools", "allowed_tools": {"mode", "tools"}}``: only these tools may
    be called, under ``mode`` (see `ChatRequest.narrowed`)."""

    type: Literal["allowed_tools"]
    allowed_tools: _AllowedTools


class StreamOptions(_Strict):
    include_usage: bool = False
    include_obfuscation: bool | None = None  # what OpenAI's client may send; nothing to do


class ResponseFormat(_Open):
    type: Literal["text", "json_object", "json_schema"]
    # OpenAI's {"name", "schema"?, "description"?, "strict"?}: checked by `meaningless`
    json_schema: dict[str, Any] | None = None


class ChatRequest(_Strict):
    """The fields of a chat completion request the server honours (or names when it cannot)."""

    model: str
    messages: list[Message] = Field(min_length=1)
    tools: list[Annotated[Tool | CustomTool, Field(discriminator="type")]] | None = None
    tool_choice: (
        Literal["none", "auto", "required"] | ToolChoiceNamed | ToolChoiceAllowed | None
    ) = None
    parallel_tool_calls: bool | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    # llama-server's and vLLM's sampler fields (0 and 0.0 turn them off)
    top_k: int | None = Field(default=None, ge=0)
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)
    stop: str | list[str] | None = None
    seed: int | None = None
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    response_format: ResponseFormat | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    reasoning_effort: str | None = None
    continue_final_message: bool | None = None
    # chatcodec's own: how the reply is read and constrained (docs/decoding.md, "Policies")
    policy: Literal["reference", "guaranteed"] | None = None
    # accepted because they change nothing a server of one local model could honour
    user: str | None = None
    metadata: dict[str, str] | None = None
    store: bool | None = None
    service_tier: str | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None
    verbosity: str | None = None
    modalities: list[str] | None = None  # text only (checked by `unsupported`)
    # refused unless they ask for nothing (checked by `unsupported`)
    n: int | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    logit_bias: dict[str, float] | None = None

    def unsupported(self) -> str | None:
        """The first field asking for something the server cannot do, else None."""
        if self.n not in (None, 1):
            return "n"
        if self.logprobs:
            return "logprobs"
        if self.top_logprobs:
            return "top_logprobs"
        if self.logit_bias:
            return "logit_bias"
        if self.modalities is not None and set(self.modalities) - {"text"}:
            return "modalities"
        return None

    def meaningless(self) -> tuple[str, str] | None:
        """The first field whose value cannot mean anything or cannot be honoured, as
        OpenAI's API names it (its ``param``), and why; else None. Roles are checked against
        the template (serve.chat)."""
        for i, tool in enumerate(self.tools or ()):
            if isinstance(tool, CustomTool):
                return (
                    f"tools[{i}].type",
                    f"tools[{i}] is a custom tool (free-form input): this server offers the "
                    "model function tools only",
                )
        choice = self.tool_choice
        if not self.tools and (choice == "required" or isinstance(choice, ToolChoiceNamed)):
            asked = repr(choice) if isinstance(choice, str) else "a named function"
            return "tool_choice", f"tool_choice {asked} needs tools, and the request gives none"
        if isinstance(choice, ToolChoiceAllowed):
            offered = {t.function.name for t in self.tools or () if isinstance(t, Tool)}
            for i, named in enumerate(choice.allowed_tools.tools):
                if named.function.name not in offered:
                    return (
                        f"tool_choice.allowed_tools.tools[{i}]",
                        f"tool_choice allows {named.function.name!r}, which is not in tools",
                    )
        response_format = self.response_format
        if response_format is None or response_format.type != "json_schema":
            return None
        wrapper = response_format.json_schema
        if wrapper is None:
            return (
                "response_format.json_schema",
                "Missing required parameter: 'response_format.json_schema' "
                '({"name": ..., "schema": {...}}).',
            )
        if not isinstance(wrapper.get("name"), str) or not wrapper["name"]:
            return (
                "response_format.json_schema.name",
                "Missing required parameter: 'response_format.json_schema.name'.",
            )
        if wrapper.get("schema") is not None and not isinstance(wrapper["schema"], dict):
            return (
                "response_format.json_schema.schema",
                "response_format.json_schema.schema must be a JSON Schema object, not "
                f"{type(wrapper['schema']).__name__}",
            )
        return None

    def narrowed(self) -> ChatRequest:
        """The request with an ``allowed_tools`` choice spelled out: only the allowed tools
        are offered (the template shows only them), under the choice's mode."""
        choice = self.tool_choice
        if not isinstance(choice, ToolChoiceAllowed):
            return self
        allowed = {named.function.name for named in choice.allowed_tools.tools}
        tools = [t for t in self.tools or () if isinstance(t, Tool) and t.function.name in allowed]
        return self.model_copy(update={"tools": tools, "tool_choice": choice.allowed_tools.mode})

    def stops(self) -> tuple[str, ...]:
        """The request's own stop strings (OpenAI allows up to 4; empty ones mean nothing)."""
        if self.stop is None:
            return ()
        stops = [self.stop] if isinstance(self.stop, str) else self.stop
        return tuple(s for s in stops if s)


M = TypeVar("M", bound=BaseModel)


def validated(schema: type[M], payload: Any) -> M:
    """``payload`` as ``schema`` reads it; a 400 naming the first field it refuses."""
    try:
        return schema.model_validate(payload)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or None
        message = f"{where}: {first['msg']}" if where else first["msg"]
        raise APIError(400, message, where.split(".")[0] if where else None) from None
    except RecursionError:
        raise APIError(400, "the request body nests too deeply") from None
