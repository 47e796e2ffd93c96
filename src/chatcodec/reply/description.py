"""Reply formats as data: what a family's reply looks like, for the one engine to run.

A reply is read as ``prefix [reasoning] ws content ws [calls] [end]`` over
``generation_prompt + reply`` (llama.cpp parses the generation prompt too). A family module
fills these fields in; it never parses anything itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .peg import Parser

__all__ = ["ReasoningBlock", "CallSection", "ReplyFormat"]


@dataclass(frozen=True)
class ReasoningBlock:
    """An optional leading thought: ``start`` ws body, ended by one of ``stops``.

    ``closers`` are tried in order where the body stopped: ``(marker, consumed)``; a closer that
    is not consumed only peeks (llama.cpp's Qwen3.5 ends a thought at ``<tool_call>`` too).
    """

    start: str
    stops: tuple[str, ...]
    closers: tuple[tuple[str, bool], ...]
    space_after_start: bool = True
    # characters that may each follow the start / the consumed closer (llama.cpp's optspace)
    start_optional: str = ""
    end_optional: str = ""


@dataclass(frozen=True)
class CallSection:
    """The tool calls after the content.

    ``first``/``next`` parse one call each (without the whitespace after it); ``next`` is None
    when only one call is allowed. A call can only complete with ``commit`` (its closing
    marker), which tells the engine when a call may have completed. ``openers`` and
    ``name_marker`` only serve to explain dropped text.
    """

    first: Parser
    next: Parser | None
    required: bool
    commit: str
    openers: tuple[str, ...] = ()
    name_marker: str = ""
    name_marker_end: str = ""
    tool_names: frozenset[str] = field(default_factory=frozenset)
    space_after: bool = True
    # a call parse that succeeds at the very end of the text so far is not final yet
    settle: bool = False


@dataclass(frozen=True)
class ReplyFormat:
    """One request's reply format: the family name and the pieces the engine runs in order."""

    handler: str
    prefix: str
    reasoning: ReasoningBlock | None
    content_stops: tuple[str, ...] | None
    calls: CallSection | None = None
    space_before_content: bool = True
    space_before_calls: bool = True
    end_anchor: bool = False
    stop: tuple[str, ...] = ()
    space_after_prefix: bool = False
    # False: nothing is read as content (llama.cpp's auto parser without a call start marker)
    content_enabled: bool = True
