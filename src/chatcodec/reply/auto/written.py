"""Calls the template writes itself, read back (the ``guaranteed`` policy; issue 38, G3).

llama.cpp runs the call phases of its analysis only when its capability probe says the
template takes calls. That probe renders a whole exchange (a call, the tool's answer, a
reply), so a template that refuses any part of it (a tool message without ``name``, say) is
taken as having no calls, even when it writes a past assistant turn's calls plainly. The
reply format then reads content only: the model's calls, written as it was trained, stay text.

Here the question is asked of the calls alone: the assistant turn is rendered without a call,
with one call and with two (the analysis's own probes). When the template writes the call's
name and its arguments, the call phases of the analysis run on those renders, as llama.cpp
runs them for the templates its probe accepts. The reply format, the stream and the grammar
then come from the auto parser's usual call descriptions (:mod:`.build`, :mod:`.grammar`).
"""

from __future__ import annotations

from dataclasses import replace

from ...template.capabilities import ToolCallSupport
from ...template.render import ChatTemplate
from .analysis import (
    ASSISTANT_MSG,
    FIRST_CALL,
    FUN_FIRST,
    FUN_SECOND,
    SECOND_CALL,
    T_NONE,
    USER,
    Analysis,
    AnalysisFailed,
    Probe,
    Renderer,
    analyze,
    assistant_turn,
    tool_probe,
)

__all__ = ["written_support", "written_calls"]

# the probe call's argument value (analysis.FIRST_CALL's first argument)
_VALUE = "XXXX"


def written_support(template: ChatTemplate) -> ToolCallSupport:
    """Whether the template writes an assistant turn's calls, name and arguments, and whether
    it writes a second call too: the turn without calls, with one and with two, compared."""
    r = Renderer(template)
    base = Probe((USER, assistant_turn(ASSISTANT_MSG)), tools=True)
    one = r.compare(base, tool_probe(FIRST_CALL))
    if one is None or FUN_FIRST not in one.diff.right or _VALUE not in one.diff.right:
        return ToolCallSupport(calls=False, parallel=False)
    two = r.render(tool_probe(FIRST_CALL, SECOND_CALL))
    parallel = two is not None and two != one.b and FUN_SECOND in two
    return ToolCallSupport(calls=True, parallel=parallel)


def written_calls(template: ChatTemplate, reference: Analysis) -> Analysis:
    """``reference`` (llama.cpp's analysis of ``template``) with the call syntax the template
    writes, where llama.cpp's has none; ``reference`` itself everywhere else.

    Only the calls change: the reasoning, the content and the role markers stay llama.cpp's,
    so a reply without calls reads exactly as under the reference policy."""
    if reference.tools.mode != T_NONE:
        return reference
    support = written_support(template)
    if not support.calls:
        return reference
    try:
        derived = analyze(template, support)
    except AnalysisFailed:  # the written call is not one the analysis can describe
        return reference
    if derived.tools.mode == T_NONE:
        return reference
    preserved = list(reference.preserved_tokens)
    preserved += [t for t in derived.preserved_tokens if t not in preserved]
    return replace(
        reference,
        supports_tool_calls=True,
        supports_parallel_tool_calls=support.parallel,
        tools=derived.tools,
        preserved_tokens=preserved,
    )
