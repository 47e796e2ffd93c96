"""What llama.cpp sets up to constrain a reply, besides the grammar's text.

For every request llama.cpp's handler decides whether the sampler gets a grammar, whether that
grammar is lazy (idle until a trigger shows up in the output), the triggers, the tokens the
tokenizer must keep whole (``preserved_tokens``) and extra stop strings (``additional_stops``).
A family's ``describe`` computes this for its request (``ReplyFormat.constraint``), so the
parser and the constraint come from one description; the family's ``grammar(request)`` writes
the GBNF text with ``chatcodec.grammar.rules``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..grammar.constraint import Trigger
from .arguments import tool_functions
from .request import ReplyRequest

__all__ = [
    "Trigger",
    "Constraint",
    "constraint",
    "words",
    "patterns",
    "has_response_format",
    "tools_offered",
    "calls_offered",
]


@dataclass(frozen=True)
class Constraint:
    """llama.cpp's setup of one request's sampler: ``grammar`` (it sets a grammar at all),
    ``lazy`` and ``triggers`` (false and empty without a grammar), ``preserved_tokens`` and
    ``additional_stops`` (set whether or not there is a grammar)."""

    grammar: bool = False
    lazy: bool = False
    triggers: tuple[Trigger, ...] = ()
    preserved_tokens: tuple[str, ...] = ()
    additional_stops: tuple[str, ...] = ()
    # builds the grammar's GBNF text (set where the reply format is chosen; not compared)
    build_gbnf: Callable[[], str] | None = field(default=None, compare=False, repr=False)


def constraint(
    preserved_tokens: Sequence[str],
    *,
    grammar: bool,
    lazy: bool = False,
    triggers: Sequence[Trigger] = (),
    additional_stops: Sequence[str] = (),
) -> Constraint:
    """A handler's setup: without a grammar, llama.cpp leaves it eager and trigger-less."""
    return Constraint(
        grammar=grammar,
        lazy=lazy if grammar else False,
        triggers=tuple(triggers) if grammar else (),
        preserved_tokens=tuple(preserved_tokens),
        additional_stops=tuple(additional_stops),
    )


def calls_or_json(
    request: ReplyRequest, preserved_tokens: Sequence[str], triggers: Sequence[Trigger]
) -> Constraint:
    """The setup most handlers share: a grammar when the reply may call a tool or must be
    JSON, lazy (from ``triggers`` on) unless it must be JSON or must call a tool."""
    json_reply = has_response_format(request)
    return constraint(
        preserved_tokens,
        grammar=json_reply or calls_offered(request),
        lazy=not (json_reply or (tools_offered(request) and request.tool_choice == "required")),
        triggers=triggers,
    )


def words(*values: str) -> tuple[Trigger, ...]:
    """Literal-text triggers."""
    return tuple(Trigger("word", v) for v in values)


def patterns(*values: str) -> tuple[Trigger, ...]:
    """Regex triggers searched anywhere in the output."""
    return tuple(Trigger("pattern", v) for v in values)


def has_response_format(request: ReplyRequest) -> bool:
    """The request asks for a JSON reply (a non-empty schema object)."""
    return bool(request.json_schema)


def tools_offered(request: ReplyRequest) -> bool:
    """The request offers at least one tool (whatever ``tool_choice`` says)."""
    return bool(tool_functions(request.tools))


def calls_offered(request: ReplyRequest) -> bool:
    """Tools are offered and ``tool_choice`` is not ``none``: the reply may call them."""
    return tools_offered(request) and request.tool_choice != "none"
