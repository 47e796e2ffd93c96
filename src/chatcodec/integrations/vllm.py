"""vLLM's entry to chatcodec's parsers: the version check and the registration.

vLLM calls :func:`register` at start-up in each of its processes (the ``vllm.general_plugins``
entry point); it names the tool parser and the reasoning parser ``chatcodec`` without importing
them, so a server that selects neither pays nothing. The parsers themselves are in
:mod:`chatcodec.integrations.vllm_parsers`, which refuses to load under a vLLM outside
:data:`SUPPORTED_VLLM` with :class:`UnsupportedVLLMError`: vLLM then stops at start-up
instead of reading replies through an interface that has changed.
"""

from __future__ import annotations

import logging
import re

from ..errors import ChatCodecError

__all__ = [
    "PARSER_NAME",
    "SUPPORTED_VLLM",
    "UnsupportedVLLMError",
    "check_vllm_version",
    "register",
]

PARSER_NAME = "chatcodec"
# (lowest, first unsupported) as (major, minor): the parser interfaces the plugin is written
# against and tested with (vLLM's ToolParser, ReasoningParser and its DelegatingParser)
SUPPORTED_VLLM = ((0, 33), (0, 34))
PARSERS_MODULE = "chatcodec.integrations.vllm_parsers"

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
