"""The render half: chat templates compiled in a sandbox that mirrors transformers'."""

from .environment import Limits
from .render import ChatTemplate, RenderedChat, Span

__all__ = ["ChatTemplate", "Limits", "RenderedChat", "Span"]
