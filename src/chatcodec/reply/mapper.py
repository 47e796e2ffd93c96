"""AST nodes of a tool call -> tool calls, as llama.cpp's generic mapper (PEG_NATIVE) builds them."""

from __future__ import annotations

import copy
import json
import re
import weakref
from collections.abc import Iterable
from dataclasses import dataclass, replace

from .peg import Node, Parser, is_c_space, tags_in

__all__ = [
    "TOOL",
    "TOOL_OPEN",
    "TOOL_CLOSE",
    "TOOL_ID",
    "TOOL_NAME",
    "TOOL_ARGS",
    "TOOL_ARG",
    "TOOL_ARG_OPEN",
    "TOOL_ARG_CLOSE",
    "TOOL_ARG_NAME",
    "TOOL_ARG_VALUE",
    "TOOL_ARG_STRING_VALUE",
    "MARKUP",
    "markup_tag",
    "carries_call_ids",
    "CallMapper",
    "MappedCall",
    "json_escape_inner",
    "normalize_quotes_to_json",
    "find_node",
]

TOOL = "tool"
TOOL_OPEN = "tool-open"
TOOL_CLOSE = "tool-close"
TOOL_ID = "tool-id"
TOOL_NAME = "tool-name"
TOOL_ARGS = "tool-args"
TOOL_ARG = "tool-arg"
TOOL_ARG_OPEN = "tool-arg-open"
TOOL_ARG_CLOSE = "tool-arg-close"
TOOL_ARG_NAME = "tool-arg-name"
TOOL_ARG_VALUE = "tool-arg-value"
TOOL_ARG_STRING_VALUE = "tool-arg-string-value"
# text a call's markup reads and keeps nowhere (Muse Glimmer's recipient, Kimi K3's
# attributes): the tag names what the format itself writes there (see markup_tag)
MARKUP = "markup:"


def markup_tag(pattern: str) -> str:
    """The tag of text a call's markup reads and keeps nowhere: markup when it matches
    ``pattern`` (a regular expression: what the format writes there), else reported in
    ``dropped`` as skipped text (the model's own words, lost by llama.cpp)."""
    return MARKUP + pattern


_CARRIES_IDS: weakref.WeakKeyDictionary[Parser, bool] = weakref.WeakKeyDictionary()


def carries_call_ids(parser: Parser) -> bool:
    """Whether the calls ``parser`` reads may carry the model's own id (a ``TOOL_ID`` node);
    remembered per parser while it lives (a request's format is built for it, so a stream
    asks at its first preview of a call)."""
    known = _CARRIES_IDS.get(parser)
    if known is None:
        known = _CARRIES_IDS[parser] = TOOL_ID in tags_in(parser)
    return known


_ESCAPED = re.compile(r'[\x00-\x1f"\\]')  # what JSON escapes when non-ASCII stays raw


def json_escape_inner(s: str) -> str:
    """JSON string escaping without the quotes (nlohmann rules: non-ASCII raw, `/` kept)."""
    if _ESCAPED.search(s) is None:
        return s
    return json.dumps(s, ensure_ascii=False)[1:-1]


def _trim_trailing(s: str) -> str:
    end = len(s)
    while end and is_c_space(s[end - 1]):
        end -= 1
    return s[:end]


def _trim(s: str) -> str:
    if s and is_c_space(s[0]):
        s = s[1:]
    return _trim_trailing(s)


def _brace_depth(s: str) -> int:
    depth = 0
    in_string = escaped = False
    for c in s:
        if escaped:
            escaped = False
        elif c == "\\" and in_string:
            escaped = True
        elif c == '"':
            in_string = not in_string
        elif not in_string:
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
    return depth


def _is_word(c: str) -> bool:
    return (c.isascii() and c.isalnum()) or c == "_"


def normalize_quotes_to_json(text: str) -> str:
    """Python-style quotes and literals -> JSON; prefixes of True/False/None too (stream-stable)."""
    out: list[str] = []
    in_single = in_double = False
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\\" and i + 1 < n:
            nxt = text[i + 1]
            if in_single:
                if nxt == "'":
                    out.append("'")
                elif nxt == '"':
                    out.append('\\"')
                else:
                    out.append(c + nxt)
                i += 2
                continue
            if in_double:
                out.append(c + nxt)
                i += 2
                continue
            out.append(c)
            i += 1
            continue
        if c == '"':
            if in_single:
                out.append('\\"')
            else:
                in_double = not in_double
                out.append(c)
        elif c == "'":
            if in_double:
                out.append(c)
            else:
                in_single = not in_single
                out.append('"')
        elif (
            not in_single and not in_double and c in "TFN" and (i == 0 or not _is_word(text[i - 1]))
        ):
            k = 0
            while i + k < n and _is_word(text[i + k]):
                k += 1
            token = text[i : i + k]
            for py, js in (("True", "true"), ("False", "false"), ("None", "null")):
                if py[:k] == token:
                    out.append(js[:k])
                    i += k
                    break
            else:
                out.append(c)
                i += 1
            continue
        else:
            out.append(c)
        i += 1
    return "".join(out)


def find_node(node: Node, tag: str, depth: int = -1) -> Node | None:
    """The first node tagged ``tag`` below ``node`` (depth first, at most ``depth`` levels
    down; -1: any)."""
    for child in node.children:
        if child.tag == tag:
            return child
        if depth != 1:
            found = find_node(child, tag, depth - 1)
            if found is not None:
                return found
    return None


@dataclass
class MappedCall:
    name: str = ""
    arguments: str = ""
    id: str = ""


class CallMapper:
    """Visits tool nodes in document order and builds calls (state carried across calls)."""

    def __init__(self) -> None:
        self.calls: list[MappedCall] = []
        self.pending: MappedCall | None = None
        self.current: MappedCall | None = None
        self.arg_count = 0
        self.args_buffer = ""
        self.quote_pending = False
        # text read and kept in no call, in order: (start, end, Dropped reason)
        self.skipped: list[tuple[int, int, str]] = []
        # where the last call's arguments were read as one raw JSON object (start, end)
        self.raw_arguments: tuple[int, int] | None = None

    def fork(self) -> CallMapper:
        """A copy that maps on from this state without touching it, its ``calls`` only the
        ones it maps (a preview of the call in progress costs nothing per call before it)."""
        forked = copy.copy(self)
        forked.calls = []
        forked.skipped = []
        pending, current = self.pending, self.current
        forked.pending = replace(pending) if pending is not None else None
        if current is pending:
            forked.current = forked.pending
        else:
            forked.current = replace(current) if current is not None else None
        return forked

    def _target_get(self) -> str:
        cur = self.current
        return cur.arguments if cur is not None and cur.name else self.args_buffer

    def _target_set(self, value: str) -> None:
        cur = self.current
        if cur is not None and cur.name:
            cur.arguments = value
        else:
            self.args_buffer = value

    def visit(self, nodes: Iterable[Node], text: str) -> None:
        for node in nodes:
            self._map(node, text)
            if node.children:
                self.visit(node.children, text)

    def flush(self) -> None:
        """End of mapping: a started call that has a name is still returned."""
        if self.pending is not None and self.pending.name:
            if self.args_buffer:
                self.pending.arguments = self.args_buffer
            if self.quote_pending and self.pending.arguments:
                self.pending.arguments += '"'
            self.calls.append(self.pending)
            self.pending = None

    def _map(self, node: Node, text: str) -> None:
        tag = node.tag
        if not tag.startswith("tool"):
            if tag.startswith(MARKUP):  # call markup: what the format does not write is lost
                said = text[node.start : node.end]
                if said and not re.fullmatch(tag[len(MARKUP) :], said):
                    self.skipped.append((node.start, node.end, "skipped_text"))
            return
        if tag == TOOL_OPEN:
            self.pending = MappedCall()
            self.current = self.pending
            self.arg_count = 0
            self.args_buffer = ""
            self.quote_pending = False
            self.raw_arguments = None
            return
        cur = self.current
        if cur is None:
            return
        value = text[node.start : node.end]
        if tag == TOOL_ID:
            v = _trim_trailing(value)
            if len(v) >= 2 and v[0] == '"' and v[-1] == '"':
                v = v[1:-1]
            cur.id = v
        elif tag == TOOL_NAME:
            cur.name = _trim_trailing(value)
            if self.args_buffer:
                cur.arguments = self.args_buffer
                self.args_buffer = ""
            elif not cur.arguments:
                cur.arguments = "{"
            # llama.cpp appends the call as soon as its name is known
            if self.pending is not None:
                self.calls.append(self.pending)
                self.pending = None
                self.current = self.calls[-1]
        elif tag == TOOL_ARGS:
            v = _trim_trailing(value)
            if v.startswith("{"):
                self._target_set(v)
                self.raw_arguments = (node.start, node.end)
            elif v and not node.children:  # JSON that is no object: llama.cpp leaves "{}"
                self.skipped.append((node.start, node.start + len(v), "unread_arguments"))
        elif tag == TOOL_ARG_OPEN:
            self.quote_pending = False
        elif tag == TOOL_ARG_NAME:
            entry = "," if self.arg_count > 0 else ""
            entry += json.dumps(_trim(value), ensure_ascii=False) + ":"
            self.arg_count += 1
            self._target_set((self._target_get() or "{") + entry)
        elif tag in (TOOL_ARG_VALUE, TOOL_ARG_STRING_VALUE):
            add = ""
            if tag == TOOL_ARG_STRING_VALUE:
                if not value:
                    add = '"'
                    self.quote_pending = True
                else:
                    if not self.quote_pending:
                        add = '"'
                        self.quote_pending = True
                    add += json_escape_inner(value)
            elif value:
                add = normalize_quotes_to_json(value)
            self._target_set(self._target_get() + add)
        elif tag == TOOL_ARG_CLOSE:
            if self.quote_pending:
                self._target_set(self._target_get() + '"')
                self.quote_pending = False
        elif tag == TOOL_CLOSE:
            if not cur.name and self.args_buffer:
                cur.arguments = self.args_buffer
                self.args_buffer = ""
            if self.quote_pending:
                cur.arguments += '"'
                self.quote_pending = False
            cur.arguments += "}" * max(0, _brace_depth(cur.arguments))
            if self.pending is not None:
                if cur.name:
                    self.calls.append(self.pending)
                self.pending = None
