"""The render half: chat templates compiled in a sandbox that mirrors transformers'."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_getattr
from .environment import Limits
from .render import ChatTemplate, RenderedChat, Span

if TYPE_CHECKING:
    from .capabilities import Capabilities, ToolCallSupport, probe_capabilities, tool_call_support
    from .schema import DocstringParsingException, TypeHintParsingException, get_json_schema
    from .wire import TemplateInput, to_template_messages, tool_preamble

_LAZY = {
    "Capabilities": ".capabilities",
    "probe_capabilities": ".capabilities",
    "ToolCallSupport": ".capabilities",
    "tool_call_support": ".capabilities",
    "DocstringParsingException": ".schema",
    "TypeHintParsingException": ".schema",
    "get_json_schema": ".schema",
    "TemplateInput": ".wire",
    "to_template_messages": ".wire",
    "tool_preamble": ".wire",
}


__getattr__ = lazy_getattr(__name__, _LAZY)


__all__ = [
    "Capabilities",
    "ChatTemplate",
    "DocstringParsingException",
    "Limits",
    "RenderedChat",
    "Span",
    "TemplateInput",
    "ToolCallSupport",
    "TypeHintParsingException",
    "get_json_schema",
    "probe_capabilities",
    "to_template_messages",
    "tool_call_support",
    "tool_preamble",
]
