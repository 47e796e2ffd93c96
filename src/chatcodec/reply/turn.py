"""Turn: one prepared request — the prompt to send and the reader of what comes back."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property

from ..grammar.constraint import Grammar
from ..schema_bounds import MAX_SCHEMA_WORK, SchemaWork, schema_work
from .description import ReplyFormat
from .message import AssistantMessage, Delta
from .stream import DEFAULT_CALL_IDS, ReplyStream

__all__ = ["Turn"]


@dataclass(frozen=True)
class Turn:
    """``prompt`` goes to the backend, which must stop at ``stop``; ``parse``/``stream`` read
    the reply as llama.cpp would (``generation_prompt`` + reply). ``call_id(index)`` names
    the tool calls the model gives no id of its own. ``schema_work_limit`` bounds the steps
    deriving ``grammar`` may take over the request's schemas (docs/security.md)."""

    prompt: str
    generation_prompt: str
    stop: tuple[str, ...]
    handler: str
    format: ReplyFormat
    call_id: Callable[[int], str] = DEFAULT_CALL_IDS
    # the steps deriving the grammar may take over the request's schemas (schema_bounds)
    schema_work_limit: int = MAX_SCHEMA_WORK

    @cached_property
    def grammar(self) -> Grammar | None:
        """The grammar llama.cpp would sample this reply under (None where it sets none): its
        GBNF text and sampler setup; ``GrammarError`` when a schema cannot be converted, a
        ``RequestError`` when its schemas take more than the schema work bound to convert."""
        c = self.format.constraint
        if not c.grammar:
            return None
        if c.build_gbnf is None:
            raise ValueError(f"this {self.handler!r} reply format carries no grammar builder")
        with schema_work(SchemaWork(self.schema_work_limit)):
            gbnf = c.build_gbnf()
        return Grammar(
            gbnf,
            c.lazy,
            c.triggers,
            c.preserved_tokens,
            c.additional_stops,
            generation_prompt=self.generation_prompt,
        )

    def stream(self) -> ReplyStream:
        """A reader of this turn's reply: ``feed`` each chunk, then ``finish()`` once."""
        return ReplyStream(self.format, self.generation_prompt, self.call_id)

    def parse(self, text: str, partial: bool = False) -> AssistantMessage:
        """The whole reply at once: exactly a stream fed ``text`` and finished."""
        stream = self.stream()
        stream.feed(text)
        return stream.finish(partial=partial).message

    def stream_deltas(self, chunks: Iterable[str]) -> Iterator[Delta]:
        """Every delta of a reply arriving in ``chunks``, the last ones (``finish``'s)
        included; a reply that does not parse raises ReplyError where it ends."""
        stream = self.stream()
        for chunk in chunks:
            yield from stream.feed(chunk)
        yield from stream.finish().deltas
