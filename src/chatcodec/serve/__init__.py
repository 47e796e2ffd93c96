"""``chatcodec serve``: an OpenAI-compatible chat server over a raw completion engine.

Needs the ``server`` extra (starlette, uvicorn, httpx, pydantic); the in-process engine needs
the ``llama`` extra (llama-cpp-python). Nothing here is imported by ``import chatcodec``.
"""

from __future__ import annotations

from ..errors import MissingExtraError

try:
    import httpx  # noqa: F401
    import pydantic  # noqa: F401
    import starlette  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise MissingExtraError(exc.name or "starlette", "server", "chatcodec serve") from exc

from .app import ServeConfig, create_app
from .engine import (
    Engine,
    EngineError,
    EngineReplyError,
    EngineRequestError,
    EngineTimeout,
    Generation,
    Piece,
    Usage,
)
from .remote import BACKEND_KINDS, RemoteEngine

__all__ = [
    "BACKEND_KINDS",
    "Engine",
    "EngineError",
    "EngineReplyError",
    "EngineRequestError",
    "EngineTimeout",
    "Generation",
    "Piece",
    "RemoteEngine",
    "ServeConfig",
    "Usage",
    "create_app",
]
