"""Invariant 1: every case of the transformers oracle renders byte for byte, or fails alike."""

from __future__ import annotations

import functools

import pytest

from chatcodec import ChatTemplate, TemplateError

from .conftest import ORACLE, read_jsonl, template_source

_CASES_PATH = ORACLE / "render" / "expectations.jsonl"
_CASES = read_jsonl(_CASES_PATH) if _CASES_PATH.exists() else []


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


@pytest.mark.skipif(not _CASES, reason="../shared/oracle/render is not present")
@pytest.mark.parametrize("case", _CASES, ids=[case["id"] for case in _CASES])
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
