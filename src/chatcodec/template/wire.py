"""OpenAI chat-completion messages -> the messages and tools a chat template expects.

The OpenAI wire format and the transformers template convention differ in small ways that
each cost a model accuracy when ignored: arguments travel as JSON *strings* but templates
``tojson`` an *object*; ``null`` fields must be absent, not ``None``; a template may want
content as text blocks or as a string; ``developer`` is a role most templates never saw; and
a template that cannot show tools needs them described in words; an ``image_url`` block is
``{"type": "image"}`` to a template written for transformers' processors (Gemma 4). A content
block the template cannot show is a ``RequestError``, never dropped. ``to_template_messages``
does these conversions, guided by the template's probed ``Capabilities``, on a copy of its
input. docs/capabilities.md lists each rule and gives the tool preamble text.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import RequestError
from .capabilities import Capabilities
from .render import plain_data, request_lists

__all__ = ["TemplateInput", "tool_preamble", "to_template_messages"]


@dataclass(frozen=True)
class TemplateInput:
    """What to pass to ``ChatTemplate.render``: ``messages`` and ``tools``.

    ``tools`` is ``None`` when there were none, or when they were described in the tool
    preamble instead (``preamble`` is then ``True``). Unpacks as ``messages, tools``.
    """

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    preamble: bool = False

    def __iter__(self) -> Iterator[Any]:
        return iter((self.messages, self.tools))


_PREAMBLE_HEAD = (
    "You can call the following tools. Each one is described by a JSON schema:\n<tools>\n"
)
_PREAMBLE_TAIL = (
    "\n</tools>\n\n"
    "To call a tool, reply with one JSON object per call, each inside <tool_call></tool_call> "
    "tags:\n"
    "<tool_call>\n"
    '{"name": "<tool name>", "arguments": {"<argument name>": <value>}}\n'
    "</tool_call>\n"
    "Each result comes back inside <tool_response></tool_response> tags."
)


def tool_preamble(tools: Sequence[Mapping[str, Any]]) -> str:
    """The fixed text describing ``tools`` to a template that cannot render them itself."""
    listed = "\n".join(json.dumps(plain_data(tool), ensure_ascii=False) for tool in tools)
    return f"{_PREAMBLE_HEAD}{listed}{_PREAMBLE_TAIL}"


def to_template_messages(
    openai_messages: Sequence[Mapping[str, Any]],
    capabilities: Capabilities,
    tools: Sequence[Mapping[str, Any]] | None = None,
) -> TemplateInput:
    """Turn OpenAI request ``messages`` (and ``tools``) into a template's input.

    The caller's objects are never modified: everything returned is a fresh copy. A content
    block the template cannot show (an image to a text-only template), or a user message with
    no content blocks at all, raises ``RequestError``: the model would never see it.
    """
    caps = capabilities
    listed, given_tools, problem = request_lists(openai_messages, tools)
    if problem:
        raise RequestError(problem)
    messages = [_message(plain_data(message), caps, index) for index, message in enumerate(listed)]
    messages = _fold_tool_results(messages, caps)
    tool_list = [plain_data(tool) for tool in given_tools] if given_tools else None
    preamble = bool(tool_list) and not caps.tools
    if tool_list and preamble:
        messages = _with_system_text(messages, tool_preamble(tool_list), caps)
        tool_list = None
    if not caps.system_role:
        messages = _fold_system_into_user(messages, caps)
    return TemplateInput(messages, tool_list, preamble)


def _message(raw: Any, caps: Capabilities, index: int) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise RequestError(f"message {index} is a {type(raw).__name__}, not a mapping")
    message = {key: value for key, value in raw.items() if value is not None}
    role = message.get("role")
    if role == "developer" and not caps.developer_role:
        message["role"] = "system"
    if role == "assistant" and "content" not in message:
        # OpenAI sends content null beside tool calls; templates concatenate it as text
        message["content"] = ""
    if "content" in message:
        content = message["content"]
        if isinstance(content, list):
            if not content and role == "user":
                raise RequestError(f"message {index} (user) has an empty list of content blocks")
            content = [_shown_block(block, caps, index) for block in content]
        message["content"] = _content(content, caps.typed_content)
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        calls = [_tool_call(call, caps) for call in calls]
        if caps.tool_calls:
            message["tool_calls"] = calls
        else:
            # the template drops calls: keep them as the preamble's call syntax instead
            del message["tool_calls"]
            message["content"] = _append_text(message.get("content", ""), _calls_as_text(calls))
    return message


def _shown_block(block: Any, caps: Capabilities, index: int) -> Any:
    """A content block as the template shows it; RequestError for one it cannot show."""
    if not isinstance(block, dict):
        return block
    kind = block.get("type")
    if kind == "text" or kind in caps.content_blocks:
        return block
    if kind == "image_url" and "image" in caps.content_blocks:
        # transformers' processor form, which templates such as Gemma 4's read
        image = block.get("image_url")
        url = image.get("url") if isinstance(image, dict) else image
        return {"type": "image", "url": url}
    shown = ", ".join(sorted(caps.content_blocks)) or "text only"
    raise RequestError(
        f"message {index} has a {kind!r} content block, which this chat template does not "
        f"show (it shows: {shown}): the model would never see it"
    )


def _content(content: Any, typed: bool) -> Any:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if typed else content
    if isinstance(content, list):
        blocks = [_without_nones(block) for block in content]
        if not typed and all(_is_text_block(block) for block in blocks):
            # joined with nothing between, as templates that read blocks concatenate them
            return "".join(block["text"] for block in blocks)
        return blocks  # non-text blocks are never dropped: the template gets the blocks
    return content


def _is_text_block(block: Any) -> bool:
    return (
        isinstance(block, dict)
        and block.get("type") == "text"
        and isinstance(block.get("text"), str)
    )


def _without_nones(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: item for key, item in value.items() if item is not None}
    return value


def _tool_call(raw: Any, caps: Capabilities) -> Any:
    if not isinstance(raw, dict):
        return raw
    call = _without_nones(raw)
    function = call.get("function")
    if isinstance(function, dict):
        function = _without_nones(function)
        if "arguments" in function:
            function["arguments"] = _arguments(function["arguments"], caps.string_arguments)
        call["function"] = function
    return call


def _arguments(arguments: Any, as_string: bool) -> Any:
    if as_string:
        if isinstance(arguments, str):
            return arguments
        return json.dumps(arguments, ensure_ascii=False)
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments)
        except (ValueError, RecursionError):
            # not JSON (a truncated reply, say), or nested deeper than Python's json module
            # reads: passed on as the string
            return arguments
        # only an object is an argument map; "5" or "[1]" stay as the text the model wrote
        return parsed if isinstance(parsed, dict) else arguments
    return arguments


def _calls_as_text(calls: list[Any]) -> str:
    lines = []
    for call in calls:
        function = call.get("function", {}) if isinstance(call, dict) else {}
        payload = {"name": function.get("name"), "arguments": function.get("arguments", {})}
        lines.append(f"<tool_call>\n{json.dumps(payload, ensure_ascii=False)}\n</tool_call>")
    return "\n".join(lines)


def _fold_tool_results(messages: list[dict[str, Any]], caps: Capabilities) -> list[dict[str, Any]]:
    if caps.tool_role:
        return messages
    # the template drops or refuses tool turns: results become user turns, merged when adjacent
    folded: list[dict[str, Any]] = []
    for message in messages:
        if message.get("role") != "tool":
            folded.append(message)
            continue
        text = f"<tool_response>\n{_text_of(message.get('content', ''))}\n</tool_response>"
        previous = folded[-1] if folded else None
        if previous is not None and previous.get("role") == "user" and previous.get("_tool_result"):
            previous["content"] = _append_text(previous["content"], text)
        else:
            content = _content(text, caps.typed_content)
            folded.append({"role": "user", "content": content, "_tool_result": True})
    for message in folded:
        message.pop("_tool_result", None)
    return folded


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(_is_text_block(block) for block in content):
        return "".join(block["text"] for block in content)
    return json.dumps(content, ensure_ascii=False)


def _append_text(content: Any, text: str, separator: str = "\n") -> Any:
    if isinstance(content, list):
        return [*content, {"type": "text", "text": (separator if content else "") + text}]
    return f"{content}{separator}{text}" if content else text


def _prepend_text(content: Any, text: str) -> Any:
    if isinstance(content, list):
        return [{"type": "text", "text": f"{text}\n\n"}, *content]
    return f"{text}\n\n{content}" if content else text


def _with_system_text(
    messages: list[dict[str, Any]], text: str, caps: Capabilities
) -> list[dict[str, Any]]:
    if messages and messages[0].get("role") == "system":
        first = {**messages[0]}
        first["content"] = _append_text(first.get("content", ""), text, "\n\n")
        return [first, *messages[1:]]
    # without a system role, _fold_system_into_user moves this into the first user turn
    return [{"role": "system", "content": _content(text, caps.typed_content)}, *messages]


def _fold_system_into_user(
    messages: list[dict[str, Any]], caps: Capabilities
) -> list[dict[str, Any]]:
    # leading system/developer turns go in front of the first user turn's text
    leading: list[str] = []
    rest = list(messages)
    while rest and rest[0].get("role") in ("system", "developer"):
        leading.append(_text_of(rest.pop(0).get("content", "")))
    if not leading:
        return messages
    text = "\n\n".join(part for part in leading if part)
    for index, message in enumerate(rest):
        if message.get("role") == "user":
            rest[index] = {**message, "content": _prepend_text(message.get("content", ""), text)}
            return rest
    return [{"role": "user", "content": _content(text, caps.typed_content)}, *rest]
