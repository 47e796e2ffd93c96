"""Helpers of the reply tests: load compare.py from the shared corpus (never copied)."""

from __future__ import annotations

import importlib.util
from types import ModuleType

from .conftest import shared_path


def load_compare() -> ModuleType:
    path = shared_path("oracle", "parse", "compare.py")
    spec = importlib.util.spec_from_file_location("_oracle_compare", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
