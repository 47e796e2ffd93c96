"""The one exception hierarchy of chatcodec: every failure of the public API is a ChatCodecError."""

from __future__ import annotations

from typing import Literal

__all__ = [
    "ChatCodecError",
    "TemplateError",
    "TemplateSecurityError",
    "TemplateLimitError",
    "CheckpointError",
    "RequestError",
    "ReplyError",
    "MissingExtraError",
]

Stage = Literal["compile", "render"]


class ChatCodecError(Exception):
    """Base class of every error chatcodec raises."""


class TemplateError(ChatCodecError):
    """A chat template failed to compile or to render.

    ``stage`` is ``"compile"`` or ``"render"``. ``kind`` names what went wrong the way the
    reference (transformers on jinja2) would have raised it: ``"TemplateError"`` for a
    template's own ``raise_exception``, ``"ValueError"`` for ``apply_chat_template``'s checks,
    ``"TypeError"``, ``"UndefinedError"``, ``"SecurityError"``, ``"TemplateSyntaxError"``, ...
    """

    def __init__(
        self,
        message: str,
        *,
        stage: Stage,
        kind: str = "TemplateError",
        lineno: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.stage: Stage = stage
        self.kind = kind
        self.lineno = lineno

    def __str__(self) -> str:
        where = f" (line {self.lineno})" if self.lineno else ""
        return f"{self.message}{where}"

    def __reduce__(self):  # keep keyword-only arguments through pickling
        return (
            _rebuild_template_error,
            (type(self), self.message, self.stage, self.kind, self.lineno),
        )


def _rebuild_template_error(cls, message, stage, kind, lineno):  # type: ignore[no-untyped-def]
    return cls(message, stage=stage, kind=kind, lineno=lineno)


class TemplateSecurityError(TemplateError):
    """The template tried to reach outside the sandbox (Python internals, mutation of inputs)."""


class TemplateLimitError(TemplateError):
    """The render ran longer, or produced more output, than the configured limits allow."""


class CheckpointError(ChatCodecError):
    """A checkpoint (folder, GGUF file, hub cache entry) has no usable chat template."""


class RequestError(ChatCodecError, ValueError):
    """A request's options or messages are not valid (``tool_choice``, ``response_format``,
    ``reasoning_format``, a message the template cannot show): nothing was rendered or parsed."""


class ReplyError(ChatCodecError):
    """A model reply cannot be turned into an assistant message."""


class MissingExtraError(ChatCodecError, ImportError):
    """An optional feature needs a package from one of chatcodec's extras."""

    def __init__(self, package: str, extra: str, feature: str) -> None:
        super().__init__(
            f"{feature} needs the '{package}' package: pip install 'chatcodec[{extra}]'"
        )
        self.package = package
        self.extra = extra
