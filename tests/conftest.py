"""Shared fixtures: the read-only corpus in ../shared, skipped (not failed) when absent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
TEMPLATES = SHARED / "chat_templates"
ORACLE = SHARED / "oracle"


def shared_path(*parts: str) -> Path:
    """A path under ../shared; skips the calling test when it is not there."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} is not present (the shared corpus lives beside the checkout)")
    return path


def read_jsonl(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def template_source(name: str) -> str:
    return shared_path("chat_templates", name).read_text(encoding="utf-8")


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """llama.cpp over a tiny random-weight GGUF written for the session (tests/_llama.py);
    skips without llama-cpp-python (the ``dev`` extra)."""
    pytest.importorskip("llama_cpp")
    from ._llama import Engine, write_model

    engine = Engine(write_model(tmp_path_factory.mktemp("gguf") / "tiny.gguf"))
    yield engine
    engine.close()
