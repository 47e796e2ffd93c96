"""What a chat template can express, found by rendering small probe conversations.

A template's source says little reliably (a name in a comment, a branch that is never taken),
so every behavioural field is measured: render a probe conversation carrying a unique marker
and look for the marker in the output. A probe the template refuses counts as "no". One
:class:`ProbeRenderer` renders every probe: :func:`probe_capabilities`' marker probes, llama.cpp's
tool-call probe (:func:`tool_call_support`) and the auto parser's differential probes
(``reply/auto/analysis.py``). See docs/capabilities.md for each field and probe.
"""

from __future__ import annotations

import copy
import json
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from .compat import llama_compatible
from .environment import Limits, call_budget
from .render import ChatTemplate, raise_if_budget_spent

__all__ = [
    "Capabilities",
    "ProbeRenderer",
    "ToolCallSupport",
    "probe_capabilities",
    "tool_call_support",
]


@dataclass(frozen=True)
class Capabilities:
    """What a chat template renders; every field but ``variables`` is measured by rendering.

    - ``tools``: tool definitions passed as ``tools=`` change the prompt and their name appears.
    - ``tool_calls``: an assistant message's ``tool_calls`` render (name and argument value).
    - ``string_arguments``: calls render only when ``function.arguments`` is a JSON string
      (transformers' convention is an object; some templates concatenate it as text).
    - ``parallel_calls``: two calls in one assistant message both render.
    - ``tool_call_id``: the ``id`` of a call (or ``tool_call_id`` of its result) renders.
    - ``tool_role``: the content of a ``role: "tool"`` message renders.
    - ``system_role``: a ``system`` message's text renders.
    - ``developer_role``: the source names the ``developer`` role and its text renders.
    - ``typed_content``: the template renders content only when it is given as
      ``[{"type": "text", "text": ...}]`` blocks; a plain string does not appear.
    - ``single_turn_append``: the render of ``messages[:n + 1]`` starts with the render of
      ``messages[:n]`` over a four-turn user/assistant conversation (prefix-stable).
    - ``thinking_toggle``: the template reads ``enable_thinking`` and it changes the output.
    - ``reasoning_replay``: an assistant message's ``reasoning_content`` renders.
    - ``documents``: ``documents=`` render (a document's text appears).
    - ``generation_tag``: the template marks assistant text with ``{% generation %}``.
    - ``variables``: the names the template reads from its context.
    - ``content_blocks``: the non-text content block types (``image``, ``image_url``,
      ``audio``, ``input_audio``, ``video``, ``file``) the template shows: beside a text block
      one changes the render, and not by dumping the block's data as text.
    """

    tools: bool
    tool_calls: bool
    string_arguments: bool
    parallel_calls: bool
    tool_call_id: bool
    tool_role: bool
    system_role: bool
    developer_role: bool
    typed_content: bool
    single_turn_append: bool
    thinking_toggle: bool
    reasoning_replay: bool
    documents: bool
    generation_tag: bool
    variables: frozenset[str]
    content_blocks: frozenset[str] = frozenset()


# Markers: distinctive words no template prints on its own, free of characters JSON escapes
USER_TEXT = "Quizzical user marker"
ASSISTANT_TEXT = "Verdant assistant marker"
SYSTEM_TEXT = "Obsidian system marker"
DEVELOPER_TEXT = "Cobalt developer marker"
REASONING_TEXT = "Labyrinthine reasoning marker"
TOOL_RESULT_TEXT = "Saffron tool result marker"
DOCUMENT_TEXT = "Tangerine document marker"
TOOL_NAME = "probe_lookup_weather"
SECOND_TOOL_NAME = "probe_lookup_time"
ARGUMENT_VALUE = "Quokkaville"
SECOND_ARGUMENT_VALUE = "Wombatburg"
# Mistral templates accept only 9-character alphanumeric call ids
CALL_ID = "Zq7Rk2Wp9"
SECOND_CALL_ID = "Hx4Tn8Vb3"


def _tool(name: str, description: str) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {"place": {"type": "string", "description": "Where"}},
                "required": ["place"],
            },
        },
    }


PROBE_TOOLS = [_tool(TOOL_NAME, "Look up the weather"), _tool(SECOND_TOOL_NAME, "Look up the time")]


def _call(call_id: str, name: str, place: str, as_text: bool = False) -> dict[str, Any]:
    arguments: Any = {"place": place}
    if as_text:
        arguments = json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _result(call_id: str, name: str, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "name": name, "content": text}


_USER = {"role": "user", "content": USER_TEXT}
_STAND_IN_TOKENS = {
    "bos_token": "<s>",
    "eos_token": "</s>",
    "unk_token": "<unk>",
    "pad_token": "<pad>",
}


class ProbeRenderer:
    """Renders probe conversations; a render the template refuses is ``None``.

    ``context`` is added to every render (a render's own options win over it); renders are
    remembered, so a probe repeated by another question costs nothing. With ``typed_content``
    set, string contents are given as ``[{"type": "text", "text": ...}]`` blocks. Inside a
    call's budget (``call_budget``), a render that finds it spent raises its
    ``TemplateLimitError``: no later probe could render.
    """

    def __init__(self, template: ChatTemplate, context: Mapping[str, Any] | None = None) -> None:
        self.template = template
        self.context: dict[str, Any] = dict(context or {})
        self.typed_content = False
        self._renders: dict[str, str | None] = {}

    def render(self, messages: Sequence[Mapping[str, Any]], **options: Any) -> str | None:
        key = json.dumps([messages, options, self.typed_content], sort_keys=True)
        if key not in self._renders:
            self._renders[key] = self._render(messages, options)
        return self._renders[key]

    def _render(self, messages: Sequence[Mapping[str, Any]], options: dict[str, Any]) -> str | None:
        # templates get fresh copies: a render must not see another probe's data
        fresh = copy.deepcopy([dict(message) for message in messages])
        if self.typed_content:
            for message in fresh:
                if isinstance(message.get("content"), str):
                    message["content"] = [{"type": "text", "text": message["content"]}]
        try:
            return self.template.render(fresh, **{**self.context, **options})
        except Exception as exc:  # noqa: BLE001 - an untrusted template's failure: a failed probe
            raise_if_budget_spent(exc)
            return None


_Variant = tuple[list[dict[str, Any]], dict[str, Any]]


def _any_render(p: ProbeRenderer, variants: list[_Variant], accept: Callable[[str], bool]) -> bool:
    # templates written for tool use may refuse to render without tools: try both
    for tools in (None, PROBE_TOOLS):
        for messages, options in variants:
            text = p.render(messages, **{"tools": tools, **options})
            if text is not None and accept(text):
                return True
    return False


def _with_system(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"role": "system", "content": "You are a helpful assistant."}, *messages]


def _tools(p: ProbeRenderer) -> bool:
    tools = PROBE_TOOLS[:1]
    for messages in ([_USER], _with_system([_USER])):
        bare = p.render(messages, add_generation_prompt=True)
        with_tools = p.render(messages, tools=tools, add_generation_prompt=True)
        if with_tools is not None and with_tools != bare and TOOL_NAME in with_tools:
            return True
    return False


def _call_conversations(calls: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    assistant = {"role": "assistant", "content": "", "tool_calls": calls}
    results = [
        _result(call["id"], call["function"]["name"], f"{TOOL_RESULT_TEXT} {i}")
        for i, call in enumerate(calls)
    ]
    closing = {"role": "assistant", "content": ASSISTANT_TEXT}
    return [
        [_USER, assistant, *results, closing],
        [_USER, assistant, *results],
        [_USER, assistant],
        _with_system([_USER, assistant, *results, closing]),
    ]


def _renders_calls(
    p: ProbeRenderer, calls: list[dict[str, Any]], accept: Callable[[str], bool]
) -> bool:
    names = {call["function"]["name"] for call in calls}
    # with the definitions passed too, the names must show up more often than the definitions do
    baseline = p.render([_USER], tools=PROBE_TOOLS, add_generation_prompt=True) or ""
    for messages in _call_conversations(calls):
        for tools in (None, PROBE_TOOLS):
            text = p.render(messages, tools=tools)
            if text is None or not accept(text):
                continue
            floor = baseline if tools else ""
            if all(text.count(name) > floor.count(name) for name in names):
                return True
    return False


def _tool_calls(p: ProbeRenderer, as_text: bool) -> bool:
    calls = [_call(CALL_ID, TOOL_NAME, ARGUMENT_VALUE, as_text)]
    return _renders_calls(p, calls, lambda text: ARGUMENT_VALUE in text)


def _parallel_calls(p: ProbeRenderer, as_text: bool) -> bool:
    calls = [
        _call(CALL_ID, TOOL_NAME, ARGUMENT_VALUE, as_text),
        _call(SECOND_CALL_ID, SECOND_TOOL_NAME, SECOND_ARGUMENT_VALUE, as_text),
    ]
    return _renders_calls(
        p, calls, lambda text: ARGUMENT_VALUE in text and SECOND_ARGUMENT_VALUE in text
    )


def _tool_call_id(p: ProbeRenderer) -> bool:
    calls = [_call(CALL_ID, TOOL_NAME, ARGUMENT_VALUE)]
    variants: list[_Variant] = [(messages, {}) for messages in _call_conversations(calls)]
    return _any_render(p, variants, lambda text: CALL_ID in text)


def _tool_role(p: ProbeRenderer) -> bool:
    calls = [_call(CALL_ID, TOOL_NAME, ARGUMENT_VALUE)]
    variants: list[_Variant] = [(messages, {}) for messages in _call_conversations(calls)]
    return _any_render(p, variants, lambda text: TOOL_RESULT_TEXT in text)


def _role_renders(p: ProbeRenderer, role: str, marker: str) -> bool:
    message = {"role": role, "content": marker}
    variants: list[_Variant] = [
        ([message, _USER], {"add_generation_prompt": True}),
        ([message, _USER, {"role": "assistant", "content": ASSISTANT_TEXT}], {}),
    ]
    return _any_render(p, variants, lambda text: marker in text)


def _typed_content(p: ProbeRenderer) -> bool:
    typed = {"role": "user", "content": [{"type": "text", "text": USER_TEXT}]}
    for tools in (None, PROBE_TOOLS):
        plain = p.render([_USER], tools=tools, add_generation_prompt=True)
        blocks = p.render([typed], tools=tools, add_generation_prompt=True)
        if plain is None and blocks is None:
            continue  # this template needs something else (tools, say) to render at all
        plain_shows = plain is not None and USER_TEXT in plain
        return not plain_shows and blocks is not None and USER_TEXT in blocks
    return False


def _single_turn_append(p: ProbeRenderer) -> bool:
    conversation = [
        {"role": "user", "content": f"{USER_TEXT} one"},
        {"role": "assistant", "content": f"{ASSISTANT_TEXT} one"},
        {"role": "user", "content": f"{USER_TEXT} two"},
        {"role": "assistant", "content": f"{ASSISTANT_TEXT} two"},
    ]
    for tools in (None, PROBE_TOOLS):
        renders = [p.render(conversation[:n], tools=tools) for n in range(1, len(conversation) + 1)]
        pairs = [(a, b) for a, b in pairwise(renders) if a is not None and b is not None]
        if pairs:
            return all(longer.startswith(shorter) for shorter, longer in pairs)
    return False


def _thinking_toggle(p: ProbeRenderer, variables: frozenset[str]) -> bool:
    if "enable_thinking" not in variables:
        return False
    answered = {"role": "assistant", "content": ASSISTANT_TEXT, "reasoning_content": REASONING_TEXT}
    for messages, options in (
        ([_USER], {"add_generation_prompt": True}),
        ([_USER, answered], {}),
        (_with_system([_USER]), {"add_generation_prompt": True}),
    ):
        for tools in (None, PROBE_TOOLS):
            on = p.render(messages, tools=tools, enable_thinking=True, **options)
            off = p.render(messages, tools=tools, enable_thinking=False, **options)
            if on is not None and off is not None and on != off:
                return True
    return False


def _reasoning_replay(p: ProbeRenderer) -> bool:
    answered = {"role": "assistant", "content": ASSISTANT_TEXT, "reasoning_content": REASONING_TEXT}
    follow_up = {"role": "user", "content": f"{USER_TEXT} again"}
    variants: list[_Variant] = [
        ([_USER, answered], {}),
        ([_USER, answered, follow_up], {"add_generation_prompt": True}),
    ]
    return _any_render(p, variants, lambda text: REASONING_TEXT in text)


def _documents(p: ProbeRenderer) -> bool:
    documents = [{"title": "Probe title", "text": DOCUMENT_TEXT}]
    variants: list[_Variant] = [
        ([_USER], {"documents": documents, "add_generation_prompt": True}),
        (_with_system([_USER]), {"documents": documents, "add_generation_prompt": True}),
    ]
    return _any_render(p, variants, lambda text: DOCUMENT_TEXT in text)


_cache: weakref.WeakKeyDictionary[ChatTemplate, dict[tuple[tuple[str, str], ...], Capabilities]]
_cache = weakref.WeakKeyDictionary()


def probe_capabilities(
    template: ChatTemplate, special_tokens: Mapping[str, str] | None = None
) -> Capabilities:
    """Measure what ``template`` renders; cached per template object (and special tokens).

    ``special_tokens`` are added to every probe render's context, over the template's own.
    """
    key = tuple(sorted((special_tokens or {}).items()))
    per_template = _cache.setdefault(template, {})
    found = per_template.get(key)
    if found is None:
        with call_budget(template.limits, "probing the template's capabilities"):
            found = _probe(template, special_tokens)
        per_template[key] = found
    return found


def _probe(template: ChatTemplate, special_tokens: Mapping[str, str] | None) -> Capabilities:
    # a template that concatenates eos_token fails when it is unset: probe with stand-ins
    stand_ins = {
        name: _STAND_IN_TOKENS.get(name, f"<{name}>")
        for name in template.variables
        if name.endswith("_token") and name not in template.special_tokens
    }
    p = ProbeRenderer(template, {**stand_ins, **(special_tokens or {})})
    variables = template.variables
    typed_content = _typed_content(p)
    p.typed_content = typed_content  # once known, probes give content as text blocks
    tool_calls = _tool_calls(p, as_text=False)
    string_arguments = not tool_calls and _tool_calls(p, as_text=True)
    return Capabilities(
        tools=_tools(p),
        tool_calls=tool_calls or string_arguments,
        string_arguments=string_arguments,
        parallel_calls=_parallel_calls(p, as_text=string_arguments),
        tool_call_id=_tool_call_id(p),
        tool_role=_tool_role(p),
        system_role=_role_renders(p, "system", SYSTEM_TEXT),
        # a generic "<role>: text" loop echoes any role: only a template that names it counts
        developer_role="developer" in template.source
        and _role_renders(p, "developer", DEVELOPER_TEXT),
        typed_content=typed_content,
        single_turn_append=_single_turn_append(p),
        thinking_toggle=_thinking_toggle(p, variables),
        reasoning_replay=_reasoning_replay(p),
        documents=_documents(p),
        generation_tag=template.has_generation_tag,
        variables=variables,
        content_blocks=_content_blocks(p),
    )


@dataclass(frozen=True)
class ToolCallSupport:
    """llama.cpp's ``supports_tool_calls`` and ``supports_parallel_tool_calls`` of a template.

    Not :class:`Capabilities`' ``tool_calls`` / ``parallel_calls``: llama.cpp renders its own
    probe conversation with its conventions and counts a template as reading the calls when
    the render changes with them (Llama 3.1 raises on two calls: neither has parallel calls).
    """

    calls: bool
    parallel: bool
    object_arguments: bool = False
    """The template reads a call's arguments as an object (llama.cpp then hands it every
    call's JSON-text arguments parsed)."""


# llama.cpp's capability probe (common/chat.cpp): one tool, a user turn, an assistant turn with
# the calls, the tool's result, an answer and a user turn
_LLAMA_PROBE_TOOLS = [
    {
        "name": "tool",
        "type": "function",
        "function": {
            "name": "tool1",
            "description": "Tool description",
            "parameters": {
                "type": "object",
                "properties": {"arg": {"type": "string", "description": "Arg description"}},
                "required": ["arg"],
            },
        },
    }
]
_OBJECT_ARGUMENTS = {"arg": "value"}
_TEXT_ARGUMENTS = '{"arg": "value"}'


def _llama_probe(p: ProbeRenderer, arguments: Any, calls: int) -> str | None:
    assistant: dict[str, Any] = {"role": "assistant", "content": ""}
    if calls:
        assistant["tool_calls"] = [
            {
                "id": f"call0000{i + 1}",
                "type": "function",
                "function": {"name": "tool1", "arguments": arguments},
            }
            for i in range(calls)
        ]
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "User message"},
        assistant,
        {"role": "tool", "content": "Tool response", "tool_call_id": "call00001"},
        {"role": "assistant", "content": "The tool response was 'tool response'"},
        {"role": "user", "content": "User message"},
    ]
    return p.render(
        messages,
        tools=_LLAMA_PROBE_TOOLS,
        add_generation_prompt=True,
        bos_token="",
        eos_token="",
    )


_tool_call_support: weakref.WeakKeyDictionary[ChatTemplate, ToolCallSupport]
_tool_call_support = weakref.WeakKeyDictionary()


def tool_call_support(
    template: ChatTemplate | str, limits: Limits | None = None
) -> ToolCallSupport:
    """llama.cpp's tool-call capabilities of ``template`` (a compiled template or its source),
    measured on llama.cpp's probe rendered as llama.cpp renders it; cached per template.

    llama.cpp tracks whether the template reads the calls; a render that changes with them is
    taken as such a read. Arguments are tried as an object, then as JSON text. The probes
    share one budget: the template's ``Limits`` (``limits`` for a source).
    """
    compiled = llama_compatible(
        template if isinstance(template, ChatTemplate) else ChatTemplate(template, limits=limits)
    )
    found = _tool_call_support.get(compiled)
    if found is None:
        with call_budget(compiled.limits, "probing the template's tool-call support"):
            found = _measure_tool_call_support(ProbeRenderer(compiled))
        _tool_call_support[compiled] = found
    return found


def _measure_tool_call_support(p: ProbeRenderer) -> ToolCallSupport:
    without = _llama_probe(p, None, 0)
    arguments: Any = _OBJECT_ARGUMENTS
    one = _llama_probe(p, arguments, 1)
    # the argument's value shows: the template read into the object
    read = one is not None and one.count("value") > (without or "").count("value")
    if one is None or one == without:
        arguments = _TEXT_ARGUMENTS
        one = _llama_probe(p, arguments, 1)
        if one is None or one == without:
            return ToolCallSupport(calls=False, parallel=False)
    two = _llama_probe(p, arguments, 2)
    return ToolCallSupport(
        calls=True, parallel=two is not None and two != one, object_arguments=read
    )


# One block of each type a request may carry, OpenAI's and transformers' processor forms; the
# marker in each payload shows when a template dumps a block as text instead of showing it
_BLOCK_MARKER = "Quetzal"
PROBE_BLOCKS: dict[str, dict[str, Any]] = {
    "image_url": {"type": "image_url", "image_url": {"url": f"https://x.invalid/{_BLOCK_MARKER}"}},
    "image": {"type": "image", "url": f"https://x.invalid/{_BLOCK_MARKER}.png"},
    "input_audio": {"type": "input_audio", "input_audio": {"data": _BLOCK_MARKER, "format": "wav"}},
    "audio": {"type": "audio", "url": f"https://x.invalid/{_BLOCK_MARKER}.wav"},
    "video": {"type": "video", "url": f"https://x.invalid/{_BLOCK_MARKER}.mp4"},
    "file": {"type": "file", "file": {"file_id": _BLOCK_MARKER}},
}


def _content_blocks(p: ProbeRenderer) -> frozenset[str]:
    text = {"type": "text", "text": USER_TEXT}
    shown = set()
    for tools in (None, PROBE_TOOLS):
        base = p.render([{"role": "user", "content": [text]}], tools=tools)
        if base is None or USER_TEXT not in base:
            continue  # this template needs something else (tools, say) to render blocks
        for kind, block in PROBE_BLOCKS.items():
            got = p.render([{"role": "user", "content": [text, block]}], tools=tools)
            if got is not None and got != base and USER_TEXT in got and _BLOCK_MARKER not in got:
                shown.add(kind)
        break
    return frozenset(shown)
