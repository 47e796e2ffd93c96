"""llama.cpp's differential auto parser: a reply format derived from any template.

The template is rendered on probe conversations with chatcodec's own renderer and the renders
are diffed (:mod:`.analysis`); the markers found become a reply format (:mod:`.build`). Where
llama.cpp's analysis throws, the request fails the same way (:class:`~chatcodec.ReplyError`).
Under the ``guaranteed`` policy, calls llama.cpp finds no syntax for are read in the syntax the
template writes them in (:mod:`.written`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from functools import lru_cache

from ...errors import ReplyError
from ...template.compat import LlamaCompatTemplate
from ...template.environment import Limits, call_budget
from ...template.render import ChatTemplate
from ..description import ReplyFormat
from ..prefill import Continuation
from ..request import Policy, ReplyRequest
from .analysis import Analysis, AnalysisFailed, analyze
from .build import HANDLER, build_format, constraint_for
from .grammar import grammar_for
from .written import written_calls

__all__ = ["NAME", "HANDLER", "Analysis", "analysis_for", "matches", "describe", "grammar"]

# llama.cpp's name for the handler; the formats it builds are named HANDLER ("auto")
NAME = "autoparser"


# two entries a template (and Limits) at most: the reference analysis and the guaranteed one
@lru_cache(maxsize=256)
def _analysis(
    source: str, bos_token: str, eos_token: str, policy: Policy, limits: Limits
) -> Analysis | AnalysisFailed:
    # probes are rendered as llama.cpp renders them (its conventions, its Jinja semantics),
    # under the caller's limits (a probe past the output limit fails as a direct render would)
    tokens = {"bos_token": bos_token, "eos_token": eos_token}
    template = LlamaCompatTemplate(source, special_tokens=tokens, limits=limits)
    if policy == "guaranteed":
        reference = _analysis(source, bos_token, eos_token, "reference", limits)
        if isinstance(reference, AnalysisFailed):
            return reference
        # the calls a template writes are looked for in transformers' renders too
        return written_calls(
            template, reference, ChatTemplate(source, special_tokens=tokens, limits=limits)
        )
    try:
        return analyze(template)
    except AnalysisFailed as exc:
        return exc


def analysis_for(
    source: str,
    special_tokens: Mapping[str, str] | None = None,
    policy: Policy = "reference",
    limits: Limits | None = None,
) -> Analysis:
    """The analysis of a template (cached per template, special tokens, policy and limits).
    Under the ``guaranteed`` policy a template whose calls llama.cpp finds no syntax for gets
    the call syntax it writes in a past assistant turn (:mod:`.written`). Its renders share
    one budget, ``limits`` (or the one of the call in progress, when that ends sooner): past
    it, the analysis raises the ``TemplateLimitError`` a render raises past its time limit."""
    tokens = special_tokens or {}
    limits = limits or Limits()
    with call_budget(limits, "analysing the template for the auto parser"):
        found = _analysis(
            source, tokens.get("bos_token") or "", tokens.get("eos_token") or "", policy, limits
        )
    if isinstance(found, AnalysisFailed):
        raise ReplyError(
            "Unable to generate parser for this template. Automatic parser generation failed: "
            f"{found}"
        )
    return found


def matches(source: str) -> bool:
    """Every template: llama.cpp falls back to the auto parser (the last in its dispatch)."""
    return True


def describe(request: ReplyRequest) -> ReplyFormat:
    analysis = analysis_for(request.source, request.special_tokens, request.policy, request.limits)
    fmt = build_format(
        analysis,
        request.generation_prompt,
        request.tools,
        request.tool_choice,
        request.parallel_tool_calls,
        request.reasoning_format,
        request.json_schema,
        semicolons=request.policy == "guaranteed",
    )
    return replace(
        fmt,
        continuation=continuation(analysis),
        constraint=constraint_for(
            analysis, request.tools, request.tool_choice, request.json_schema
        ),
    )


def grammar(request: ReplyRequest) -> str:
    """llama.cpp's grammar for this request (GBNF), written from the template's analysis."""
    analysis = analysis_for(request.source, request.special_tokens, request.policy, request.limits)
    return grammar_for(analysis, request)


def continuation(analysis: Analysis) -> Continuation:
    """llama.cpp's prefill for an analysed template: the generation prompt up to the reasoning
    start, the reasoning start and the reasoning (and, continuing the content, the reasoning
    end and the content); without a reasoning start, the generation prompt and the content."""
    rs = analysis.reasoning
    if not rs.start:
        return Continuation()
    return Continuation(None, lead_cut=rs.start, think_start=rs.start, think_end=rs.end)
