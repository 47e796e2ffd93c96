"""The render half: chat templates compiled in a sandbox that mirrors transformers'."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .environment import Limits
from .render import ChatTemplate, RenderedChat, Span

if TYPE_CHECKING:
    from .capabilities import Capabilities, probe_capabilities
    from .schema import DocstringParsingException, TypeHintParsingException, get_json_schema
    from .wire import TemplateInput, to_template_messages, tool_preamble

_LAZY = {
    "Capabilities": ".capabilities",
    "probe_capabilities": ".capabilities",
    "DocstringParsingException": ".schema",
    "TypeHintParsingException": ".schema",
    "get_json_schema": ".schema",
    "TemplateInput": ".wire",
    "to_template_messages": ".wire",
    "tool_preamble": ".wire",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'chatcodec.template' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


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
