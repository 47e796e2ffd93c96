"""The one exception hierarchy of chatcodec: every failure of the public API is a ChatCodecError.

Each failure has its own type, so the type is what a caller catches (docs/errors.md)::

    ChatCodecError
    ├── TemplateError                  a chat template failed (.stage, .kind, .lineno)
    │   ├── TemplateSyntaxError        it does not compile
    │   ├── TemplateArgumentError      render's own argument checks refused the request
    │   │                              (also a RequestError)
    │   ├── TemplateRuntimeError       the template's code failed while rendering
    │   │   ├── TemplateRaisedError    ... by calling raise_exception (the author's words)
    │   │   ├── TemplateUndefinedError ... by using an undefined value
    │   │   └── TemplateTypeError      ... by an operation on a value of the wrong type
    │   ├── TemplateSecurityError      it reached outside the sandbox
    │   └── TemplateLimitError         it ran too long, produced too much, or nests too deeply
    ├── RequestError (ValueError)      a request's options or messages are not valid
    │   ├── TypeHintParsingException   a tool function's type hints have no JSON schema
    │   └── DocstringParsingException  a tool function's docstring does not describe it
    ├── CheckpointError                a checkpoint has no usable chat template
    │   └── TemplateNotFoundError (LookupError)  no template of the requested name
    ├── ReplyError                     a model reply cannot become an assistant message
    │   └── StreamedCallError          a streamed call proved malformed after it was announced
    ├── GrammarError (ValueError)      a JSON schema has no grammar (llama.cpp refuses it)
    └── MissingExtraError (ImportError) an optional feature needs a package from an extra

and two warnings: ``UnusedVariableWarning``, a keyword given to ``render`` that the template
never reads (a typo such as ``add_generation_promt=True`` would otherwise pass unnoticed), and
``GrammarWarning``, a part of a JSON schema its grammar cannot enforce (llama.cpp's warning).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

__all__ = [
    "ChatCodecError",
    "TemplateError",
    "TemplateSyntaxError",
    "TemplateArgumentError",
    "TemplateRuntimeError",
    "TemplateRaisedError",
    "TemplateUndefinedError",
    "TemplateTypeError",
    "TemplateSecurityError",
    "TemplateLimitError",
    "RequestError",
    "TypeHintParsingException",
    "DocstringParsingException",
    "CheckpointError",
    "TemplateNotFoundError",
    "ReplyError",
    "StreamedCallError",
    "GrammarError",
    "MissingExtraError",
    "TokenizerError",
    "UnusedVariableWarning",
    "GrammarWarning",
]

Stage = Literal["compile", "render"]


class ChatCodecError(Exception):
    """Base class of every error chatcodec raises."""


class TemplateError(ChatCodecError):
    """A chat template failed to compile or to render.

    ``stage`` is ``"compile"`` or ``"render"``. ``kind`` names the exception the reference
    (transformers on jinja2) raises for the same failure: ``"TemplateError"`` for a template's
    own ``raise_exception``, ``"ValueError"`` for ``apply_chat_template``'s checks,
    ``"TypeError"``, ``"UndefinedError"``, ``"SecurityError"``, ``"TemplateSyntaxError"``, ...
    It is what the render oracle records; catch the subclasses, compare ``kind`` with the
    reference. ``lineno`` is the template line the failure happened on, when known.
    """

    default_kind: ClassVar[str] = "TemplateError"

    def __init__(
        self,
        message: str,
        *,
        stage: Stage,
        kind: str | None = None,
        lineno: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.stage: Stage = stage
        self.kind = kind or self.default_kind
        self.lineno = lineno

    def __str__(self) -> str:
        where = f" (line {self.lineno})" if self.lineno else ""
        return f"{self.message}{where}"

    def __reduce__(self) -> tuple[Any, ...]:  # keep keyword-only arguments through pickling
        return (
            _rebuild_template_error,
            (type(self), self.message, self.stage, self.kind, self.lineno),
        )


def _rebuild_template_error(
    cls: type[TemplateError], message: str, stage: Stage, kind: str, lineno: int | None
) -> TemplateError:
    return cls(message, stage=stage, kind=kind, lineno=lineno)


class TemplateSyntaxError(TemplateError):
    """The template source does not compile (``stage="compile"``): a Jinja syntax error, an
    unknown tag, or a source that is not text."""

    default_kind = "TemplateSyntaxError"


class TemplateRuntimeError(TemplateError):
    """The template's own code failed while rendering (``stage="render"``); ``kind`` is the
    class of what it raised (``ZeroDivisionError``, ``TemplateRuntimeError``, ...)."""

    default_kind = "TemplateRuntimeError"


class TemplateRaisedError(TemplateRuntimeError):
    """The template called ``raise_exception(message)``: it refuses this conversation (roles
    that do not alternate, a system message where none is allowed, ...). The message is the
    template author's, unchanged."""

    default_kind = "TemplateError"


class TemplateUndefinedError(TemplateRuntimeError):
    """The template used a value that is not defined (a missing message field or variable) in a
    way Jinja refuses (``kind="UndefinedError"``)."""

    default_kind = "UndefinedError"


class TemplateTypeError(TemplateRuntimeError):
    """The template applied an operation to a value of the wrong type (adding a list to a
    string, iterating a number, ...)."""

    default_kind = "TypeError"


class TemplateSecurityError(TemplateError):
    """The template tried to reach outside the sandbox (Python internals, mutation of inputs)."""

    default_kind = "SecurityError"


class TemplateLimitError(TemplateError):
    """The render ran longer, or produced more output, than the configured limits allow, or
    the template nests too deeply to compile or to render."""

    default_kind = "LimitExceeded"


class RequestError(ChatCodecError, ValueError):
    """A request's options or messages are not valid (``tool_choice``, ``response_format``,
    ``reasoning_format``, a content block the template cannot show, a tool function without a
    schema): nothing was rendered or parsed."""


class TemplateArgumentError(TemplateError, RequestError):
    """``render``'s own checks refused its arguments before or after the template ran, as
    ``apply_chat_template`` does: an empty conversation, ``continue_final_message`` together
    with ``add_generation_prompt`` (or with a final message the template cannot continue),
    messages or documents that are not mappings, tools that are neither schemas nor
    functions, a ``now`` that is no instant, input that refers to itself.

    Both a ``TemplateError`` (``stage="render"``, ``kind`` the reference's ``ValueError`` /
    ``TypeError``) and a ``RequestError``: the request is what must change.
    """

    default_kind = "ValueError"


class TypeHintParsingException(RequestError):
    """A tool function's parameter has no type hint, or one with no JSON schema equivalent
    (transformers' class name, kept: it is the ``kind`` a render reports)."""


class DocstringParsingException(RequestError):
    """A tool function has no docstring, or the docstring does not describe every parameter
    (transformers' class name, kept: it is the ``kind`` a render reports)."""


class CheckpointError(ChatCodecError):
    """A checkpoint (folder, GGUF file, hub cache entry) has no usable chat template."""


class TemplateNotFoundError(CheckpointError, LookupError):
    """No chat template of the requested name (or no default among several named ones); the
    message lists the names there are."""


class ReplyError(ChatCodecError):
    """A model reply cannot be turned into an assistant message."""


class StreamedCallError(ReplyError):
    """A stream announced a tool call while the model wrote it (or sent part of its
    arguments), and the call did not parse in the end, or parsed into other arguments: the
    deltas cannot be taken back, so the stream fails (llama.cpp's server ends such a stream
    with an error event). The whole reply parsed at once reads without this error."""


class GrammarError(ChatCodecError, ValueError):
    """A JSON schema cannot become a grammar: llama.cpp's converter refuses it (a type it does
    not know, a remote ``$ref``, an ``enum`` that is not a non-empty list, a ``pattern`` that
    is no regular expression, ...). The message is llama.cpp's, e.g. ``JSON schema conversion
    failed:\nJSON schema error at #/properties/a: unrecognized type foo``."""


class MissingExtraError(ChatCodecError, ImportError):
    """An optional feature needs a package from one of chatcodec's extras."""

    def __init__(self, package: str, extra: str, feature: str) -> None:
        super().__init__(
            f"{feature} needs the '{package}' package: pip install 'chatcodec[{extra}]'"
        )
        self.package = package
        self.extra = extra


class UnusedVariableWarning(UserWarning):
    """A keyword argument given to ``render`` names a variable the template never reads.

    transformers passes such keywords on silently; chatcodec knows which names a template
    reads (``ChatTemplate.variables``) and warns, naming the closest option or variable.
    """


class GrammarWarning(UserWarning):
    """Part of a JSON schema is not enforced by its grammar: a ``pattern`` llama.cpp cannot
    translate (``\\d``, a lookaround, no ``^...$`` anchors) is replaced by "any string", as
    llama.cpp does; the message is the warning llama.cpp prints."""


class TokenizerError(ChatCodecError, ValueError):
    """No tokenizer to encode with, or one that cannot be read: a Codec built from a template
    alone has none (pass ``tokenizer=``), a checkpoint without ``tokenizer.json`` or GGUF file
    has none, a file that is not a tokenizer."""
