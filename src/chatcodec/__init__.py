"""chatcodec: speak an LLM checkpoint's own chat format exactly, in both directions.

``import chatcodec`` loads only the render core (jinja2 and the sandbox); the loaders, the
capability probes and the decode half are imported on first use of their names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_getattr
from .errors import (
    ChatCodecError,
    CheckpointError,
    DocstringParsingException,
    GrammarError,
    GrammarWarning,
    MissingExtraError,
    ReplyError,
    RequestError,
    StreamedCallError,
    TemplateArgumentError,
    TemplateError,
    TemplateLimitError,
    TemplateNotFoundError,
    TemplateRaisedError,
    TemplateRuntimeError,
    TemplateSecurityError,
    TemplateSyntaxError,
    TemplateTypeError,
    TemplateUndefinedError,
    TokenizerError,
    TypeHintParsingException,
    UnusedVariableWarning,
)
from .template.environment import Limits
from .template.render import ChatTemplate, RenderedChat, Span

if TYPE_CHECKING:
    from .checkdata import check_data, check_turns
    from .checkpoint import Checkpoint, find_checkpoint, load
    from .codec import Codec
    from .data import DatasetEncoder, RayEncoder
    from .encoding import Encoding
    from .grammar.constraint import Grammar, Trigger
    from .reply import (
        AssistantMessage,
        Delta,
        Dropped,
        ReplyStream,
        ToolCall,
        ToolCallDelta,
        Turn,
        fold,
    )
    from .template.capabilities import Capabilities, probe_capabilities
    from .template.schema import get_json_schema
    from .template.wire import TemplateInput, to_template_messages

__version__ = "0.1.0"

# public name -> module that defines it, imported when the name is first used
_LAZY = {
    "Checkpoint": ".checkpoint",
    "find_checkpoint": ".checkpoint",
    "load": ".checkpoint",
    "Codec": ".codec",
    "DatasetEncoder": ".data",
    "RayEncoder": ".data",
    "check_data": ".checkdata",
    "check_turns": ".checkdata",
    "Encoding": ".encoding",
    "Grammar": ".grammar.constraint",
    "Trigger": ".grammar.constraint",
    "AssistantMessage": ".reply",
    "Delta": ".reply",
    "Dropped": ".reply",
    "ReplyStream": ".reply",
    "ToolCall": ".reply",
    "ToolCallDelta": ".reply",
    "Turn": ".reply",
    "fold": ".reply",
    "Capabilities": ".template.capabilities",
    "probe_capabilities": ".template.capabilities",
    "get_json_schema": ".template.schema",
    "TemplateInput": ".template.wire",
    "to_template_messages": ".template.wire",
}


__getattr__ = lazy_getattr(__name__, _LAZY)


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "AssistantMessage",
    "Capabilities",
    "ChatCodecError",
    "ChatTemplate",
    "Checkpoint",
    "CheckpointError",
    "Codec",
    "DatasetEncoder",
    "Delta",
    "DocstringParsingException",
    "Dropped",
    "Encoding",
    "Grammar",
    "GrammarError",
    "GrammarWarning",
    "Limits",
    "MissingExtraError",
    "RayEncoder",
    "RenderedChat",
    "ReplyError",
    "ReplyStream",
    "RequestError",
    "Span",
    "StreamedCallError",
    "TemplateArgumentError",
    "TemplateError",
    "TemplateInput",
    "TemplateLimitError",
    "TemplateNotFoundError",
    "TemplateRaisedError",
    "TemplateRuntimeError",
    "TemplateSecurityError",
    "TemplateSyntaxError",
    "TemplateTypeError",
    "TemplateUndefinedError",
    "TokenizerError",
    "Trigger",
    "ToolCall",
    "ToolCallDelta",
    "Turn",
    "TypeHintParsingException",
    "UnusedVariableWarning",
    "check_data",
    "check_turns",
    "find_checkpoint",
    "fold",
    "get_json_schema",
    "load",
    "probe_capabilities",
    "to_template_messages",
    "__version__",
]
