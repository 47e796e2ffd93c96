"""Turn: one prepared request — the prompt to send and the reader of what comes back."""

from __future__ import annotations

from dataclasses import dataclass

from .description import ReplyFormat
from .message import AssistantMessage
from .stream import ReplyStream

__all__ = ["Turn"]


@dataclass(frozen=True)
class Turn:
    """``prompt`` goes to the backend, which must stop at ``stop``; ``parse``/``stream`` read
    the reply as llama.cpp would (``generation_prompt`` + reply)."""

    prompt: str
    generation_prompt: str
    stop: tuple[str, ...]
    handler: str
    format: ReplyFormat
    id_prefix: str = "call_"

    def stream(self) -> ReplyStream:
        return ReplyStream(self.format, self.generation_prompt, self.id_prefix)

    def parse(self, text: str, partial: bool = False) -> AssistantMessage:
        """The whole reply at once: exactly a stream fed ``text`` and finished."""
        stream = self.stream()
        stream.feed(text)
        return stream.finish(partial=partial)
