"""chatcodec: speak an LLM checkpoint's own chat format exactly, in both directions."""

from .checkpoint import Checkpoint, find_checkpoint, load
from .codec import Codec
from .errors import (
    ChatCodecError,
    CheckpointError,
    MissingExtraError,
    ReplyError,
    TemplateError,
    TemplateLimitError,
    TemplateSecurityError,
)
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
from .template import (
    Capabilities,
    ChatTemplate,
    Limits,
    RenderedChat,
    Span,
    TemplateInput,
    get_json_schema,
    probe_capabilities,
    to_template_messages,
)

__version__ = "0.1.0"

__all__ = [
    "AssistantMessage",
    "Delta",
    "Dropped",
    "ReplyStream",
    "ToolCall",
    "ToolCallDelta",
    "Turn",
    "fold",
    "Capabilities",
    "TemplateInput",
    "get_json_schema",
    "probe_capabilities",
    "to_template_messages",
    "ChatCodecError",
    "ChatTemplate",
    "Checkpoint",
    "Codec",
    "CheckpointError",
    "Limits",
    "MissingExtraError",
    "RenderedChat",
    "ReplyError",
    "Span",
    "TemplateError",
    "TemplateLimitError",
    "TemplateSecurityError",
    "__version__",
    "find_checkpoint",
    "load",
]
