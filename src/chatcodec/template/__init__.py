"""The render half: chat templates compiled in a sandbox that mirrors transformers'."""

from .capabilities import Capabilities, probe_capabilities
from .environment import Limits
from .render import ChatTemplate, RenderedChat, Span
from .schema import DocstringParsingException, TypeHintParsingException, get_json_schema
from .wire import TemplateInput, to_template_messages, tool_preamble

__all__ = [
    "Capabilities",
    "ChatTemplate",
    "DocstringParsingException",
    "Limits",
    "RenderedChat",
    "Span",
    "TemplateInput",
    "TypeHintParsingException",
    "get_json_schema",
    "probe_capabilities",
    "to_template_messages",
    "tool_preamble",
]
