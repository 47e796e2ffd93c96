"""vLLM's entry to chatcodec's parsers: the version check, the registration, and what the
parsers decide without vLLM (the policy, the special tokens a reply format reads).

vLLM calls :func:`register` at start-up in each of its processes (the ``vllm.general_plugins``
entry point); it names the tool parser and the reasoning parser ``chatcodec`` without importing
them, so a server that selects neither pays nothing. The parsers themselves are in
:mod:`chatcodec.integrations.vllm_parsers`, which refuses to load under a vLLM outside
:data:`SUPPORTED_VLLM` with :class:`UnsupportedVLLMError`: vLLM then stops at start-up
instead of reading replies through an interface that has changed.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import fields, is_dataclass
from typing import TYPE_CHECKING, Any

from ..errors import ChatCodecError

if TYPE_CHECKING:
    from ..reply.description import ReplyFormat
    from ..reply.request import Policy

__all__ = [
    "PARSER_NAME",
    "POLICY_ENV",
    "SUPPORTED_VLLM",
    "UnsupportedVLLMError",
    "check_vllm_version",
    "policy_of",
    "register",
    "reply_markers",
    "special_markers",
    "special_tokens_of",
]

PARSER_NAME = "chatcodec"
# (lowest, first unsupported) as (major, minor): the parser interfaces the plugin is written
# against and tested with (vLLM's ToolParser, ReasoningParser and its DelegatingParser)
SUPPORTED_VLLM = ((0, 33), (0, 34))
PARSERS_MODULE = "chatcodec.integrations.vllm_parsers"
# the environment variable that sets the parsers' policy (docs/decoding.md, "Policies")
POLICY_ENV = "CHATCODEC_VLLM_POLICY"

_log = logging.getLogger(__name__)


class UnsupportedVLLMError(ChatCodecError):
    """The installed vLLM is outside the versions chatcodec's parsers are written for."""


def _range() -> str:
    (lo_major, lo_minor), (hi_major, hi_minor) = SUPPORTED_VLLM
    return f">={lo_major}.{lo_minor},<{hi_major}.{hi_minor}"


def check_vllm_version(version: str) -> None:
    """Raise :class:`UnsupportedVLLMError` unless ``version`` (vLLM's ``__version__``, e.g.
    ``0.33.0+cu130``) is in :data:`SUPPORTED_VLLM`."""
    match = re.match(r"(\d+)\.(\d+)", version)
    found = (int(match.group(1)), int(match.group(2))) if match else None
    low, high = SUPPORTED_VLLM
    if found is None or not low <= found < high:
        raise UnsupportedVLLMError(
            f"chatcodec's vLLM parsers support vllm{_range()}; this is vllm {version}: "
            f"install a supported vLLM (pip install 'chatcodec[vllm]') or leave "
            f"--tool-call-parser/--reasoning-parser {PARSER_NAME} out"
        )


def register() -> None:
    """Name ``chatcodec`` in vLLM's tool-parser and reasoning-parser registries (lazily:
    the parsers load when a server selects them). Under an unsupported vLLM it logs why
    selecting them will fail, and vLLM stops when they are selected."""
    import vllm
    from vllm.reasoning import ReasoningParserManager
    from vllm.tool_parsers import ToolParserManager

    try:
        check_vllm_version(vllm.__version__)
    except UnsupportedVLLMError as exc:
        _log.warning("%s", exc)
    ToolParserManager.register_lazy_module(PARSER_NAME, PARSERS_MODULE, "ChatcodecToolParser")
    ReasoningParserManager.register_lazy_module(
        PARSER_NAME, PARSERS_MODULE, "ChatcodecReasoningParser"
    )


def policy_of(request: Any = None, environ: Mapping[str, str] = os.environ) -> Policy:
    """The policy a request's reply is read and constrained under: the request's own
    ``policy`` field (an extra field vLLM keeps, as ``chatcodec serve`` takes it), else
    ``$CHATCODEC_VLLM_POLICY``, else ``guaranteed``. A value that names no policy is a
    ChatCodecError naming where it came from."""
    from ..reply.request import POLICIES

    extra = getattr(request, "model_extra", None) or {}
    if extra.get("policy") is not None:
        value, where = extra["policy"], "the request's policy field"
    else:
        value, where = environ.get(POLICY_ENV) or "guaranteed", f"${POLICY_ENV}"
    if value not in POLICIES:
        raise ChatCodecError(
            f"{where} must be one of {', '.join(POLICIES)}, not {value!r} (docs/vllm.md)"
        )
    return value  # type: ignore[no-any-return]  # one of POLICIES


def special_tokens_of(tokenizer: Any) -> frozenset[str]:
    """The tokens vLLM leaves out of the text under ``skip_special_tokens``: the tokenizer's
    special tokens (``all_special_tokens``) and the added tokens marked special
    (``added_tokens_decoder``), as a Hugging Face tokenizer and vLLM's tokenizers expose them."""
    found: set[str] = set()
    special = getattr(tokenizer, "all_special_tokens", None)
    if isinstance(special, Iterable) and not isinstance(special, str):
        found.update(t for t in special if isinstance(t, str))
    added = getattr(tokenizer, "added_tokens_decoder", None)
    if isinstance(added, Mapping):
        for token in added.values():
            content = getattr(token, "content", None)
            if getattr(token, "special", False) and isinstance(content, str):
                found.add(content)
    found.discard("")
    return frozenset(found)


def reply_markers(fmt: ReplyFormat) -> frozenset[str]:
    """Every literal text a reply format reads or its grammar writes: the markers of its
    steps (a thought's, the calls', a flow's), its parsers' literals and delimiters, and
    llama.cpp's preserved tokens and trigger words for the request. The generation prompt the
    reply is read after (an ``Expect`` step) is the prompt's, not the model's: left out."""
    from ..reply.description import Expect
    from ..reply.peg import Literal, Parser, Until

    found = set(fmt.constraint.preserved_tokens)
    found.update(t.value for t in fmt.constraint.triggers if t.type in ("word", "token"))
    stack: list[Any] = list(fmt.steps)
    seen: set[int] = set()
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            found.add(item)
            continue
        if id(item) in seen or isinstance(item, Expect):
            continue
        seen.add(id(item))
        if isinstance(item, (tuple, list, set, frozenset)):
            stack.extend(item)
        elif isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, Literal):
            found.add(item.s)
        elif isinstance(item, Until):
            found.update(item.delimiters)
        elif isinstance(item, Parser):
            stack.extend(v for v in vars(item).values() if isinstance(v, (Parser, tuple, list)))
        elif is_dataclass(item) and not isinstance(item, type):
            stack.extend(getattr(item, f.name) for f in fields(item))
    found.discard("")
    return frozenset(found)


def special_markers(
    fmt: ReplyFormat, special_tokens: Iterable[str], stops: Iterable[str] = ()
) -> tuple[str, ...]:
    """The special tokens that a reply format reads (each found inside one of its markers),
    sorted; ``stops`` (the turn's stop strings) are left out: a token that ends the reply
    never reaches its text. vLLM must keep these in the text it detokenizes
    (``skip_special_tokens: false``), or the format cannot see them."""
    # one text to search: a token found across two markers' seam would need a NUL in it
    markers = "\0".join(reply_markers(fmt))
    ending = set(stops)
    return tuple(sorted(t for t in set(special_tokens) - ending if t in markers))
