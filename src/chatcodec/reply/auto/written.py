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

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from ...errors import ChatCodecError
from ...strings import common_prefix_length
from ...template.capabilities import ToolCallSupport
from ...template.render import ChatTemplate
from ..stream import ReplyStream
from .analysis import (
    ASSISTANT_MSG,
    CALL_ID_001,
    CALL_ID_002,
    FIRST_CALL,
    FUN_FIRST,
    FUN_SECOND,
    ID_BETWEEN,
    ID_NONE,
    ID_PRE,
    SECOND_CALL,
    T_JSON,
    T_NONE,
    TOOLS,
    USER,
    USER_MSG,
    Analysis,
    AnalysisFailed,
    Probe,
    Renderer,
    analyze,
    assistant_turn,
    tool_probe,
)
from .build import build_format
from .diff import MARKER, segmentize

__all__ = ["Written", "written_forms", "written_calls", "reads_back"]

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


def written_calls(
    template: ChatTemplate, reference: Analysis, rendered: ChatTemplate | None = None
) -> Analysis:
    """The analysis whose calls read back what ``template`` writes in a past assistant turn
    (:func:`reads_back`): ``reference`` (llama.cpp's analysis) where it does; else the first
    of llama.cpp's and the written forms' call syntaxes that does, as found or with the text
    the template writes between two calls. Where none does, ``reference``, or where llama.cpp
    finds no call syntax, the first written form the analysis can describe.

    Only the calls change: the reasoning, the content and the role markers stay llama.cpp's,
    so a reply without calls reads exactly as under the reference policy. A dict joined to a
    string is written as Python, not JSON: the arguments are then probed as JSON text too.

    ``rendered`` is the template as transformers renders it (the render a model is trained
    on): where llama.cpp's renderer writes no call (it refuses the probes, say), the calls
    are looked for in its renders instead."""
    forms = list(written_forms(template))
    if not forms and rendered is not None:
        template = rendered
        forms = list(written_forms(template))
    if not forms:
        return reference
    own = [(w, reference) for w in forms] if reference.tools.mode != T_NONE else []
    derived = list(_derived(template, reference, forms))
    for written, analysis in own + derived:
        key = _history_id(template, written)
        for tried in _variants(template, analysis, written):
            tried = _with_id(tried, key)
            if reads_back(template, tried, written):
                return tried
    if reference.tools.mode == T_NONE and derived:
        return derived[0][1]
    return reference


def _derived(
    template: ChatTemplate, reference: Analysis, forms: list[Written]
) -> Iterator[tuple[Written, Analysis]]:
    """``reference`` with the calls the analysis finds in each written form."""
    for written in forms:
        support = ToolCallSupport(calls=True, parallel=written.parallel)
        try:
            derived = analyze(template, support, written.text_arguments)
        except AnalysisFailed:  # this form of the call is not one the analysis can describe
            continue
        if derived.tools.mode == T_NONE:
            continue
        preserved = list(reference.preserved_tokens)
        preserved += [t for t in derived.preserved_tokens if t not in preserved]
        yield (
            written,
            replace(
                reference,
                supports_tool_calls=True,
                supports_parallel_tool_calls=written.parallel,
                tools=derived.tools,
                preserved_tokens=preserved,
            ),
        )


def _history_id(template: ChatTemplate, written: Written) -> str:
    """The key of the call id the template writes inside a call's JSON in a turn before the
    last, or "". The analysis's probes end on the call's turn, so a template that writes the
    id only once the call is answered (Apriel) shows it to none of them."""
    text = Renderer(template, written.text_arguments).render(_answered(FIRST_CALL))
    if text is None or USER_MSG not in text:
        return ""
    found = re.search(rf'"(\w+)"\s*:\s*"{CALL_ID_001}"', text[text.rindex(USER_MSG) :])
    return found.group(1) if found else ""


def _answered(*calls: Any) -> Probe:
    """The calls' turn in history: each call answered, then the assistant's reply."""
    answers = [
        {"role": "tool", "tool_call_id": c["id"], "name": c["function"]["name"], "content": "18"}
        for c in calls
    ]
    return Probe((USER, assistant_turn("", calls), *answers, assistant_turn(ASSISTANT_MSG)), True)


def _with_id(analysis: Analysis, key: str) -> Analysis:
    """``analysis`` whose JSON calls are read with the id member ``key`` the template writes
    in history, after any other member. The grammar does not write it: the template writes
    no id in the turn the model writes."""
    tl = analysis.tools
    flat = "." not in tl.name_field + tl.args_field and not tl.fun_name_is_key
    if not key or tl.mode != T_JSON or not flat or key in (tl.id_field, tl.gen_id_field):
        return analysis
    return replace(analysis, tools=replace(tl, history_id_field=key))


def reads_back(template: ChatTemplate, analysis: Analysis, written: Written) -> bool:
    """Whether the reply format built from ``analysis`` reads the calls back that the template
    writes in a past assistant turn (one call, and two where it writes two), as check-data
    reads a turn: from where the turn parts from the prompt a server sends, up to the first
    marker the template ends an assistant turn with."""
    r = Renderer(template, written.text_arguments)
    prompt = r.render(Probe((USER,), tools=True, add_generation_prompt=True))
    bare = r.render(Probe((USER,), tools=True))
    plain = r.render(Probe((USER, assistant_turn(ASSISTANT_MSG)), tools=True))
    if prompt is None or bare is None or plain is None or ASSISTANT_MSG not in plain:
        return False
    opening = prompt[len(bare) :] if prompt.startswith(bare) else ""
    # what ends a turn: each marker the template writes after an assistant turn's text, as
    # a word and each marker of it (Solar Open's ``<|end|><|begin|>assistant``: a call turn
    # ends on ``<|calls|>`` instead, and the next header follows)
    words = plain[plain.rindex(ASSISTANT_MSG) + len(ASSISTANT_MSG) :].split()
    ends = words + [m.value for w in words for m in segmentize(w) if m.type == MARKER]
    probes = [(FIRST_CALL,), (FIRST_CALL, SECOND_CALL)][: 1 + written.parallel]
    for calls in probes:
        text = r.render(tool_probe(*calls))
        if text is None:
            return False
        reply = text[_parting(text, prompt) :]
        if not text.startswith(prompt) and analysis.reasoning.end:
            # the prompt opens a thought the turn in history has not: the model closes it
            reply = analysis.reasoning.end + reply
        reply = reply[: min((reply.find(e) % (len(reply) + 1) for e in ends), default=None)]
        fmt = build_format(
            analysis, opening, TOOLS, "auto", written.parallel, "deepseek", semicolons=True
        )
        try:
            stream = ReplyStream(fmt, opening)
            stream.feed(reply)
            message = stream.finish().message
        except ChatCodecError:
            return False
        try:
            read = [(c.name, json.loads(c.arguments or "null")) for c in message.tool_calls]
        except ValueError:
            return False
        if read != [(c["function"]["name"], c["function"]["arguments"]) for c in calls]:
            return False
    return True


def _parting(text: str, prompt: str) -> int:
    """Where ``text`` parts from ``prompt``, not inside a marker (``<think>`` and
    ``<tool_call>`` share ``<``)."""
    common = common_prefix_length(text, prompt)
    opened = max(text.rfind(mark, 0, common) for mark in "<[")
    return opened if opened > max(text.rfind(mark, 0, common) for mark in ">]") else common


def _variants(template: ChatTemplate, analysis: Analysis, written: Written) -> Iterator[Analysis]:
    """``analysis`` as found, then mended where llama.cpp's reading of the renders slips:
    with the text the template writes between two calls; with the name ending where a call
    id between the name and the arguments opens (llama.cpp takes the id's closing marker as
    the name's too, so neither a call with an id nor one without reads); with a bare JSON
    array's brackets as the section's markers (llama.cpp starts the calls at ``{``); with
    the probe's call id, which llama.cpp takes into the name's opening marker when the
    template writes the id before the name, read as an id (any id, then the marker)."""
    yield analysis
    separated = _separated(template, analysis, written)
    if separated is not None:
        yield separated
    tl = analysis.tools
    # a call of a section without per-call markers starts at its name: the separator is all
    # the template writes before the second call's name (functionary v2.2 writes a message
    # header, ``<|from|>assistant\n<|recipient|>``, the prompt's own, before each call)
    if separated is not None and tl.section_start and not tl.per_call_start:
        named = _separated(template, analysis, written, tl.name_prefix + FUN_FIRST)
        if named is not None and named != separated:
            yield named
    if tl.id_pos == ID_BETWEEN and tl.id_suffix and tl.name_suffix == tl.id_suffix:
        yield replace(analysis, tools=replace(tl, name_suffix=""))
    if tl.mode == T_JSON and tl.tools_array_wrapped and not tl.section_start:
        bare = replace(tl, section_start="[", section_end="]", tools_array_wrapped=False)
        yield replace(analysis, tools=bare)
    before, id_, after = tl.name_prefix.partition(CALL_ID_001)
    if id_ and after.strip() and tl.id_pos == ID_NONE:
        lead = replace(
            tl,
            id_pos=ID_PRE,
            id_prefix=before,
            id_suffix=after,
            name_prefix="",
            id_before_name=True,
        )
        preserved = [*analysis.preserved_tokens]
        preserved += [m for m in (before.strip(), after.strip()) if m and m not in preserved]
        yield replace(analysis, tools=lead, preserved_tokens=preserved)


def _separated(
    template: ChatTemplate, analysis: Analysis, written: Written, opener: str = ""
) -> Analysis | None:
    """``analysis`` with the text the template writes between two calls (None where it writes
    one call a turn, or where the two-call render is not the one-call render with a second
    call added: the calls are then not one after the other). The second call starts with
    ``opener``, where one is given: the shortest separator otherwise."""
    if not written.parallel:
        return None
    r = Renderer(template, written.text_arguments)
    one = r.render(tool_probe(FIRST_CALL))
    two = r.render(tool_probe(FIRST_CALL, SECOND_CALL))
    if one is None or two is None:
        return None
    added = len(two) - len(one)
    # the second call as the first is written: its name and id are the first's
    first = {FUN_SECOND: FUN_FIRST, CALL_ID_002: CALL_ID_001}
    for end in range(common_prefix_length(one, two), -1, -1):  # where the first call ends
        if two[end + added :] != one[end:]:
            break
        for cut in range(added + 1):  # separator two[end:cut+end], then the second call
            second = two[end + cut : end + added]
            for name, was in first.items():
                second = second.replace(name, was)
            if FUN_FIRST in second and second.startswith(opener) and one[:end].endswith(second):
                tools = replace(analysis.tools, call_separator=two[end : end + cut])
                return replace(analysis, tools=tools)
    return None
