"""Rendering with llama.cpp's conventions, for setting up a request as llama.cpp does.

chatcodec renders prompts exactly as transformers does (``ChatTemplate``). llama.cpp renders
the same templates with its own Jinja engine and its own context, and the reply half must
see what llama.cpp sees: the generation prompt it parses against, and whether it can set
up the request at all. :func:`llama_compatible` gives a template compiled in a second
environment that behaves as llama.cpp does where the two engines differ on real templates:

Context (``common_chat_template_direct_apply``):

- ``tools`` is left undefined when there are none (never ``None``), ``documents`` too;
- ``add_generation_prompt`` is left undefined when false (a template's
  ``{% if add_generation_prompt is not defined %}`` default then applies);
- ``datetime`` (``"%b %d %Y"``) and ``date_string`` (``"%d %b %Y"``) are set, under
  whatever the caller passes.

Engine (``common/jinja``):

- an attribute or item of an undefined value is undefined (no error), and undefined or
  ``none`` next to a string in ``+`` / ``~`` counts as the empty string;
- any other value next to a string in ``+`` is written out as llama.cpp writes it (a dict
  as ``{'key': 'value'}``, a number, ``True``) where Python's Jinja raises — templates that
  concatenate ``function.arguments`` as if it were text render their calls;
- a list or a dict used as a key raises (``Type: Array is not allowed as object key``)
  where Python's Jinja gives undefined;
- ``tojson`` serialises what ``map``/``select`` give (llama.cpp's are lists) and undefined
  as ``null``;
- lists have ``append`` and ``pop``;
- a ``{% for %}`` loop over a string raises (``Expected iterable or object type in for
  loop``): llama.cpp then finds that the template takes content only as typed blocks
  (:func:`takes_typed_content_only`) and that its tool-call probes fail.

Everything else — the sandbox, its limits, the filters — is the transformers environment:
the template is as confined as in ``ChatTemplate``. The values it may mutate are the
render's own copies, and a list grows only within the output limit.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

import jinja2
from jinja2.compiler import Frame
from jinja2.sandbox import SandboxedEnvironment

from ..errors import TemplateError
from .environment import (
    ChatSandbox,
    GuardedCodeGenerator,
    LimitExceeded,
    bounded_undefined_message,
    new_environment,
    render_state,
)
from .render import ChatTemplate, raise_if_budget_spent

__all__ = [
    "LlamaCompatTemplate",
    "as_typed_content",
    "llama_compatible",
    "llama_extra_context",
    "takes_string_content_only",
    "takes_typed_content_only",
]


class LlamaUndefined(jinja2.ChainableUndefined):
    """llama.cpp's undefined: reading from it gives undefined, next to a string it is ''."""

    __slots__ = ()

    @property
    def _undefined_message(self) -> str:
        return bounded_undefined_message(self) or super()._undefined_message

    def __add__(self, other: Any) -> Any:
        if isinstance(other, str):
            return other
        return self._fail_with_undefined_error()

    def __radd__(self, other: Any) -> Any:
        if isinstance(other, str):
            return other
        return self._fail_with_undefined_error()


_MUTATORS = frozenset({"append", "pop"})


def _is_none_or_undefined(value: Any) -> bool:
    return value is None or isinstance(value, jinja2.Undefined)


class _LlamaCodeGenerator(GuardedCodeGenerator):
    # `a in b` / `a not in b` go through the environment, which applies llama.cpp's rules
    def visit_Compare(self, node: jinja2.nodes.Compare, frame: Frame) -> None:
        if len(node.ops) != 1 or node.ops[0].op not in ("in", "notin"):
            super().visit_Compare(node, frame)
            return
        self.write("(not " if node.ops[0].op == "notin" else "(")
        self.write("environment.contains(")
        self.visit(node.expr, frame)
        self.write(", ")
        self.visit(node.ops[0].expr, frame)
        self.write("))")


class LlamaSandbox(ChatSandbox):
    """The transformers sandbox with llama.cpp's Jinja semantics where templates meet them."""

    code_generator_class = _LlamaCodeGenerator
    immutable_inputs = False  # lists have append and pop here: the caller's copies can change

    def contains(self, needle: Any, haystack: Any) -> bool:
        """``needle in haystack`` as llama.cpp's engine evaluates it (it raises more often)."""
        if isinstance(haystack, jinja2.Undefined):
            return False
        if isinstance(needle, jinja2.Undefined):
            raise TypeError("Cannot perform operation in on undefined values")
        if haystack is None:
            raise TypeError("Cannot perform operation on null values")
        if isinstance(haystack, (list, tuple)):
            if isinstance(needle, (list, tuple)):
                raise TypeError('Unknown operator "in" between Array and Array')
            return needle in haystack
        if isinstance(haystack, str) and not isinstance(needle, str):
            raise TypeError("'in' test expects a string when the haystack is a string")
        if isinstance(haystack, dict) and isinstance(needle, (list, dict)):
            raise TypeError(f"Object key of unhashable type: {type(needle).__name__}")
        return needle in haystack

    def loop_iterable(self, node: jinja2.nodes.Node) -> jinja2.nodes.Node:
        return jinja2.nodes.Filter(node, _ITERABLE, [], [], None, None, lineno=node.lineno)

    def getitem(self, obj: Any, argument: Any) -> Any:
        if isinstance(argument, (list, dict)) and not isinstance(obj, jinja2.Undefined):
            kind = "Array" if isinstance(argument, list) else "Object"
            raise TypeError(f"Type: {kind} is not allowed as object key")
        return super().getitem(obj, argument)

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        if type(obj) is list and attr in _MUTATORS:
            return SandboxedEnvironment.is_safe_attribute(self, obj, attr, value)
        return super().is_safe_attribute(obj, attr, value)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        if (
            getattr(__obj, "__name__", None) == "append"
            and type(getattr(__obj, "__self__", None)) is list
        ):
            if len(__obj.__self__) >= render_state.max_chars:
                raise LimitExceeded("the template grew a list past the output limit")
        return ChatSandbox.call(__self, __context, __obj, *args, **kwargs)

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "+" and isinstance(left, str) is not isinstance(right, str):
            if left is None or right is None:
                return right if left is None else left
            if not isinstance(left, jinja2.Undefined) and not isinstance(right, jinja2.Undefined):
                left, right = llama_text(left), llama_text(right)
        return super().call_binop(context, operator, left, right)

    def guarded_concat(self, parts: Any) -> str:
        parts = list(parts)
        if any(type(p) is str for p in parts):
            parts = ["" if _is_none_or_undefined(p) else p for p in parts]
        return super().guarded_concat(parts)


def llama_text(value: Any) -> str:
    """``value`` as llama.cpp's Jinja engine turns it into text (``as_string``)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "True" if value else "False"
    if value is None:
        return "None"
    if isinstance(value, float):
        text = f"{value:f}".rstrip("0")
        return text + "0" if text.endswith(".") else text
    if isinstance(value, dict):
        items = (f"{_llama_repr(k)}: {_llama_repr(v)}" for k, v in value.items())
        return "{" + ", ".join(items) + "}"
    if isinstance(value, tuple):
        inner = ", ".join(_llama_repr(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, list):
        return "[" + ", ".join(_llama_repr(v) for v in value) + "]"
    return str(value)


def _llama_repr(value: Any) -> str:
    if not isinstance(value, str):
        return llama_text(value)
    if "'" not in value:
        return f"'{value}'"
    return json.dumps(value, ensure_ascii=False)  # llama.cpp escapes as JSON does


_ITERABLE = "__chatcodec_llama_iterable"


def _llama_iterable(value: Any) -> Any:
    if isinstance(value, str):
        raise TypeError("Expected iterable or object type in for loop: got String")
    return value


def _plain_json(value: Any) -> Any:
    if isinstance(value, jinja2.Undefined):
        return None
    if isinstance(value, dict):
        return {k: _plain_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, Iterator)):
        return [_plain_json(v) for v in value]
    return value


_environment: LlamaSandbox | None = None


def _llama_environment() -> ChatSandbox:
    global _environment
    if _environment is None:
        env = new_environment(LlamaSandbox, json_data=_plain_json, undefined=LlamaUndefined)
        assert isinstance(env, LlamaSandbox)
        env.filters[_ITERABLE] = _llama_iterable
        _environment = env
    return _environment


def llama_extra_context(now: datetime | None = None) -> dict[str, str]:
    """The variables llama.cpp adds to every render (``common_chat_extra_context``)."""
    when = now or datetime.now()
    return {"datetime": when.strftime("%b %d %Y"), "date_string": when.strftime("%d %b %Y")}


class LlamaCompatTemplate(ChatTemplate):
    """A template rendered with llama.cpp's context conventions and Jinja semantics.

    ``render`` takes the same arguments as ``ChatTemplate.render``; what it gives is what
    llama.cpp's renderer gives where the differences above matter, and otherwise the
    transformers render. It is not part of the render-parity contract.
    """

    @staticmethod
    def _environment() -> ChatSandbox:
        return _llama_environment()

    def _prepare(
        self,
        messages: Any,
        tools: Any,
        documents: Any,
        add_generation_prompt: bool,
        continue_final_message: bool | str,
        context: dict[str, Any],
        made: list[Any] | None = None,
    ) -> tuple[list[dict[str, Any]], dict[str, Any], str | None, str]:
        chat, variables, continue_field, final_text = super()._prepare(
            messages, tools, documents, add_generation_prompt, continue_final_message, context, made
        )
        if not variables.get("tools"):
            del variables["tools"]
        if variables.get("documents") is None:
            del variables["documents"]
        if not add_generation_prompt:
            del variables["add_generation_prompt"]
        return chat, variables, continue_field, final_text


_compiled: weakref.WeakKeyDictionary[ChatTemplate, LlamaCompatTemplate]
_compiled = weakref.WeakKeyDictionary()


def llama_compatible(template: ChatTemplate) -> LlamaCompatTemplate:
    """``template`` compiled for llama.cpp-compatible rendering (cached per template)."""
    if isinstance(template, LlamaCompatTemplate):
        return template
    found = _compiled.get(template)
    if found is None:
        found = LlamaCompatTemplate(
            template.source,
            special_tokens=template.special_tokens,
            limits=template.limits,
            name=template.name,
        )
        _compiled[template] = found
    return found


_typed_only: weakref.WeakKeyDictionary[LlamaCompatTemplate, bool] = weakref.WeakKeyDictionary()
_MARKER = "STRING_MARKER"


def takes_typed_content_only(template: LlamaCompatTemplate) -> bool:
    """Whether llama.cpp hands this template message content only as typed blocks
    (``[{"type": "text", "text": ...}]``): it fails on string content and shows typed content
    (a template that loops over ``message.content``). Cached per template."""
    found = _typed_only.get(template)
    if found is None:
        found = not _shows_marker(template, _MARKER) and _shows_marker(
            template, [{"type": "text", "text": _MARKER}]
        )
        _typed_only[template] = found
    return found


_typed_shown: weakref.WeakKeyDictionary[LlamaCompatTemplate, bool] = weakref.WeakKeyDictionary()


def takes_string_content_only(template: LlamaCompatTemplate) -> bool:
    """Whether llama.cpp hands this template message content only as a string, joining a
    message's text blocks with newlines: it shows string content, and typed content either
    fails or comes out as data (a Python or JSON dump of the blocks) rather than as its text.
    Cached per template."""
    found = _typed_shown.get(template)
    if found is None:
        found = _shows_marker(template, _MARKER) and not _shows_marker(
            template, [{"type": "text", "text": _MARKER}], as_text=True
        )
        _typed_shown[template] = found
    return found


def as_typed_content(messages: Any) -> list[Any]:
    """``messages`` with string content turned into one text block, as llama.cpp does for a
    template that takes typed content only."""
    out = []
    for message in messages:
        if isinstance(message, Mapping) and isinstance(message.get("content"), str):
            message = {**message, "content": [{"type": "text", "text": message["content"]}]}
        out.append(message)
    return out


def _shows_marker(template: LlamaCompatTemplate, content: Any, as_text: bool = False) -> bool:
    """Whether a user message of ``content`` renders with the marker in it (``as_text``: and
    not inside a dump of its block, ``'text': 'MARKER'`` or ``"text": "MARKER"``)."""
    try:
        rendered = template.render([{"role": "user", "content": content}])
    except TemplateError as exc:
        raise_if_budget_spent(exc)
        return False
    if as_text and (f"'text': '{_MARKER}" in rendered or f'"text": "{_MARKER}' in rendered):
        return False
    return _MARKER in rendered
