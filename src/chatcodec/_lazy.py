"""Public names resolved on first use, so ``import chatcodec`` stays the render core only."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_getattr(package: str, table: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` importing ``table[name]`` (relative to ``package``) on use."""
    namespace = importlib.import_module(package).__dict__

    def __getattr__(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        namespace[name] = value  # later lookups skip __getattr__
        return value

    return __getattr__
