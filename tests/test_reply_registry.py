"""The family registry: llama.cpp's dispatch order, and one uniform entry per family."""

from __future__ import annotations

import inspect
import pkgutil

import pytest

from chatcodec.reply import families
from chatcodec.reply.select import FAMILIES, family_for, handler_for

from ._reply_oracle import corpus_cases
from .conftest import template_source


def _corpus_handlers() -> dict[str, str]:
    """Each corpus template -> the handler llama.cpp gave it (requests it refused aside)."""
    handlers: dict[str, str] = {}
    for case in corpus_cases():
        if case["llama_cpp"] is not None:
            assert (
                handlers.setdefault(case["template"], case["llama_cpp"]["handler"])
                == (case["llama_cpp"]["handler"])
            ), case["id"]
    return handlers


def test_every_corpus_template_gets_llama_cpps_handler() -> None:
    """The registry's order is llama.cpp's dispatch: the 70 corpus templates, every handler."""
    handlers = _corpus_handlers()
    wrong = {
        name: (handler_for(template_source(name)), expected)
        for name, expected in handlers.items()
        if handler_for(template_source(name)) != expected
    }
    assert not wrong, wrong
    assert set(handlers.values()) == {family.NAME for family in FAMILIES}


def test_every_family_has_a_unique_name_and_the_uniform_interface() -> None:
    names = [family.NAME for family in FAMILIES]
    assert len(set(names)) == len(names), names
    for family in FAMILIES:
        assert isinstance(family.NAME, str) and family.NAME, family
        assert list(inspect.signature(family.matches).parameters) == ["source"], family.NAME
        assert list(inspect.signature(family.describe).parameters) == ["request"], family.NAME


def test_every_family_module_is_registered() -> None:
    registered = {family.__name__ for family in FAMILIES}  # type: ignore[attr-defined]
    modules = {
        f"{families.__name__}.{m.name}"
        for m in pkgutil.iter_modules(families.__path__)
        if not m.name.startswith("_")
    }
    assert modules <= registered, modules - registered


@pytest.mark.parametrize("source", ["", "{{ messages }}", "<|im_start|>{{ content }}"])
def test_a_template_no_family_claims_goes_to_the_auto_parser(source: str) -> None:
    assert family_for(source) is FAMILIES[-1]
    assert handler_for(source) == "autoparser"
