"""llama.cpp through the ``llama-cpp-python`` package (the ``llama`` extra), set up once per
process for chatcodec's two uses of it: the in-process engine (``serve/llama.py``) and a
GGUF file's vocabulary as a tokenizer (``tokenizer.GGUFTokenizer``).

llama.cpp logs to stderr as it loads a model (every tensor and setting, and warnings such as
a vocabulary-only model's context being longer than its training one): a command's output
would carry them. Its log goes to one callback that drops it, for the whole process, since
llama.cpp keeps the last callback set (one of an engine's own would dangle once the engine
is gone).
"""

from __future__ import annotations

import ctypes
from typing import Any

from .errors import MissingExtraError

__all__ = ["library"]

_READY: list[Any] = []  # the module, and the log callback it holds on to


def library(feature: str) -> Any:
    """The ``llama_cpp`` module, its log silenced and its backend set up (once); a
    ``MissingExtraError`` naming ``feature`` when the package is not installed."""
    if _READY:
        return _READY[0]
    try:
        import llama_cpp
    except ImportError:
        raise MissingExtraError("llama-cpp-python", "llama", feature) from None
    quiet = llama_cpp.llama_log_callback(lambda level, text, data: None)
    llama_cpp.llama_log_set(quiet, ctypes.c_void_p())
    llama_cpp.llama_backend_init()
    _READY[:] = [llama_cpp, quiet]
    return llama_cpp
