"""Calls the template writes itself, read back (the ``guaranteed`` policy; issue 38, G3).

llama.cpp runs the call phases of its analysis only when its capability probe says the
template takes calls. That probe renders a whole exchange (a call, the tool's answer, a
reply), so a template that refuses any part of it (a tool message without ``name``, say) is
taken as having no calls, even when it writes a past assistant turn's calls plainly. The
reply format then reads content only: the model's calls, written as it was trained, stay text.

Here the question is asked of the calls alone: the assistant turn is rendered without a call,
with one call and with two (the analysis's own probes). When the template writes the call's
name and its arguments, the call phases of the analysis run on those renders, as llama.cpp
runs them for the templates its probe accepts. The probes give the arguments as an object;
a template that writes JSON only for arguments given as JSON text (it joins them to its
text) is probed with JSON text, which llama.cpp's capability probe tries too but its
analysis never does. The reply format, the stream and the grammar then come from the auto parser's usual
call descriptions (:mod:`.build`, :mod:`.grammar`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

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

__all__ = ["Written", "written_forms", "written_calls"]

# the probe call's argument value (analysis.FIRST_CALL's first argument)
_VALUE = "XXXX"


@dataclass(frozen=True)
class Written:
    """A form in which a template writes an assistant turn's call, name and arguments:
    ``text_arguments`` when the probe's arguments were given as JSON text, not as an object;
    ``parallel`` when it writes a second call too."""

    text_arguments: bool
    parallel: bool


def written_forms(template: ChatTemplate) -> Iterator[Written]:
    """The argument forms (an object, then JSON text) in which the template writes an
    assistant turn's call, name and arguments: the turn without calls, with one and with two,
    compared."""
    for text_arguments in (False, True):
        r = Renderer(template, text_arguments)
        base = Probe((USER, assistant_turn(ASSISTANT_MSG)), tools=True)
        one = r.compare(base, tool_probe(FIRST_CALL))
        if one is None or FUN_FIRST not in one.diff.right or _VALUE not in one.diff.right:
            continue
        two = r.render(tool_probe(FIRST_CALL, SECOND_CALL))
        parallel = two is not None and two != one.b and FUN_SECOND in two
        yield Written(text_arguments, parallel)


def written_calls(template: ChatTemplate, reference: Analysis) -> Analysis:
    """``reference`` (llama.cpp's analysis of ``template``) with the call syntax the template
    writes, where llama.cpp's has none; ``reference`` itself everywhere else.

    Only the calls change: the reasoning, the content and the role markers stay llama.cpp's,
    so a reply without calls reads exactly as under the reference policy. The first argument
    form whose call the analysis can describe is taken (a dict joined to a string is written
    as Python, not JSON: that form fails and JSON text is tried)."""
    if reference.tools.mode != T_NONE:
        return reference
    for written in written_forms(template):
        support = ToolCallSupport(calls=True, parallel=written.parallel)
        try:
            derived = analyze(template, support, written.text_arguments)
        except AnalysisFailed:  # this form of the call is not one the analysis can describe
            continue
        if derived.tools.mode == T_NONE:
            continue
        preserved = list(reference.preserved_tokens)
        preserved += [t for t in derived.preserved_tokens if t not in preserved]
        return replace(
            reference,
            supports_tool_calls=True,
            supports_parallel_tool_calls=written.parallel,
            tools=derived.tools,
            preserved_tokens=preserved,
        )
    return reference
