"""The decode half: a model's reply (whole or streamed) -> an OpenAI assistant message."""

from .description import CallSection, ReasoningBlock, ReplyFormat
from .message import AssistantMessage, Delta, Dropped, ToolCall, ToolCallDelta, fold
from .request import ReplyRequest
from .select import describe, handler_for
from .stream import ReplyStream, StreamEnd, parse_reply
from .turn import Turn

__all__ = [
    "AssistantMessage",
    "CallSection",
    "Delta",
    "Dropped",
    "ReasoningBlock",
    "ReplyFormat",
    "ReplyRequest",
    "ReplyStream",
    "StreamEnd",
    "ToolCall",
    "ToolCallDelta",
    "Turn",
    "describe",
    "fold",
    "handler_for",
    "parse_reply",
]
