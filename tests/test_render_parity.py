"""Invariant 1: every case of the transformers oracle renders byte for byte, or fails alike.

One test per oracle case, named by its id: ``pytest -k '<case id>]'`` reruns that case alone
(ids with ``=`` in them are not -k words: give the node id,
``'tests/test_render_parity.py::test_render_matches_transformers[<case id>]'``).
"""

from __future__ import annotations

import functools
from typing import Any

import pytest

from chatcodec import ChatTemplate, TemplateError

from ._reply_oracle import RENDER_CASES, per_case
from .conftest import read_jsonl, shared_path, template_source

CASES = 4020  # the render oracle's cases (70 templates)


@functools.cache
def _cases() -> tuple[dict[str, Any], ...]:
    return tuple(read_jsonl(shared_path("oracle", "render", "expectations.jsonl")))


@functools.cache
def _compiled(name: str) -> ChatTemplate:
    return ChatTemplate(template_source(name), name=name)


def _render(case: dict) -> str:
    return _compiled(case["template"]).render(
        case["messages"],
        tools=case["tools"],
        documents=case["documents"],
        add_generation_prompt=case["add_generation_prompt"],
        continue_final_message=case["continue_final_message"],
        now=case["now_unix"],
        **case["kwargs"],
    )


def test_the_render_oracle_is_the_one_expected() -> None:
    cases = _cases()
    assert len(cases) == CASES
    assert len({case["id"] for case in cases}) == CASES, "case ids must name one case each"


@pytest.mark.parametrize("case", per_case(RENDER_CASES.exists(), _cases, lambda case: case["id"]))
def test_render_matches_transformers(case: dict) -> None:
    if "error" in case:
        with pytest.raises(TemplateError) as caught:
            _render(case)
        assert caught.value.stage == "render"
        assert caught.value.kind == case["error"]["type"]
        if case["error"]["type"] == "TemplateError":  # the template author's own words survive
            assert case["error"]["message"] in str(caught.value)
    else:
        assert _render(case) == case["expected"]
