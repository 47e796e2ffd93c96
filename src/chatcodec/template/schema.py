"""JSON schemas for Python functions used as tools, as transformers 5.23.0 builds them.

``get_json_schema(func)`` reads a function's type hints and its Google-style docstring and
returns ``{"type": "function", "function": {"name", "description", "parameters", "return"?}}``
with the keys in the order transformers writes them: templates dump tools with ``tojson``, so
the order is part of the rendered prompt.

Differences from transformers, all about *which error* escapes (never about a schema):

- the two errors are ``RequestError`` subclasses (so ``ValueError`` and ``ChatCodecError``),
  defined in ``chatcodec.errors``; ``render`` turns them into ``TemplateArgumentError`` whose
  ``kind`` is their class name, transformers' own;
- a hint ``typing.get_type_hints`` cannot resolve (unknown forward reference, ...) and a
  ``(choices: ...)`` block that is not a JSON sequence raise those errors instead of a bare
  ``NameError`` / ``JSONDecodeError`` / ``TypeError``.
"""

from __future__ import annotations

import inspect
import json
import re
import types
import typing
from collections.abc import Callable
from enum import Enum
from typing import Any, Literal, Union, get_args, get_origin

from ..errors import DocstringParsingException, TypeHintParsingException

__all__ = [
    "DocstringParsingException",
    "TypeHintParsingException",
    "get_json_schema",
    "parse_google_format_docstring",
]


# Python scalar type -> JSON type name, for the values of Literal[...] and Enum members
_JSON_SCALARS: dict[type, str] = {
    int: "integer",
    float: "number",
    str: "string",
    bool: "boolean",
    type(None): "null",
}

# The summary runs until the first section keyword (anywhere, even mid-line) or the end
_SUMMARY = re.compile(r"^(.*?)\s*(?:Args:|Returns:|Raises:|\Z)", re.DOTALL)
# "Args:" must sit on its own line; the block stops at the first "Returns:"/"Raises:" or the end
_ARGS_BLOCK = re.compile(r"\n\s*Args:\n(.*?)\s*(?:Returns:|Raises:|\Z)", re.DOTALL)
_RETURNS_BLOCK = re.compile(r"\n\s*Returns:\n\s*(.*?)\s*(?:Raises:|\Z)", re.DOTALL)
# One "name: text" entry; continuation lines are those indented deeper than the name
_ARG_ENTRY = re.compile(
    r"(?:^|\n)(?P<indent>[ \t]*)(?P<name>\w+):\s*(?P<text>.*?)\s*"
    r"(?=\n(?!(?P=indent)[ \t])[ \t]*\w+:|\Z)",
    re.DOTALL,
)
_CHOICES = re.compile(r"\(choices:\s*(.*?)\)\s*$", re.IGNORECASE)
_LINE_BREAKS = re.compile(r"\s*\n+\s*")


def get_json_schema(func: Callable[..., Any]) -> dict[str, Any]:
    """The tool schema transformers' ``get_json_schema`` gives for ``func``.

    Every parameter (bar an unannotated leading ``self``/``cls``) needs a type hint and a
    description under ``Args:``; a description ending in ``(choices: [...])`` becomes an
    ``enum``. A ``Returns:`` section describes the return hint, when it has a schema.
    """
    name = getattr(func, "__name__", "operation")
    doc = inspect.getdoc(func)
    if not doc:
        raise DocstringParsingException(
            f"cannot build a JSON schema for {name}: it has no docstring"
        )
    summary, arg_texts, returns_text = parse_google_format_docstring(doc.strip())
    parameters = _parameters_schema(func, name)
    returns = parameters["properties"].pop("return", None)
    if returns is not None and returns_text is not None:
        returns["description"] = returns_text
    for arg, schema in parameters["properties"].items():
        if arg not in arg_texts:
            raise DocstringParsingException(
                f"cannot build a JSON schema for {name}: the docstring does not describe "
                f"the argument '{arg}'"
            )
        text = arg_texts[arg]
        choices = _CHOICES.search(text)
        if choices:
            schema["enum"] = _choices(choices.group(1), name, arg)
            text = text[: choices.start()].strip()
        schema["description"] = text
    function: dict[str, Any] = {"name": name, "description": summary, "parameters": parameters}
    if returns is not None:
        function["return"] = returns
    return {"type": "function", "function": function}


def parse_google_format_docstring(docstring: str) -> tuple[str | None, dict[str, str], str | None]:
    """Split a Google-style docstring into (summary, {argument: description}, returns)."""
    summary_match = _SUMMARY.search(docstring)
    args_match = _ARGS_BLOCK.search(docstring)
    returns_match = _RETURNS_BLOCK.search(docstring)
    summary = summary_match.group(1).strip() if summary_match else None
    returns = returns_match.group(1).strip() if returns_match else None
    arg_texts: dict[str, str] = {}
    if args_match is not None:
        block = "\n".join(line for line in args_match.group(1).split("\n") if line.strip())
        for entry in _ARG_ENTRY.finditer(block):
            arg_texts[entry["name"]] = _LINE_BREAKS.sub(" ", entry["text"].strip())
    return summary, arg_texts, returns


def _choices(text: str, func_name: str, arg: str) -> list[Any]:
    try:
        values = json.loads(text)
        # transformers iterates whatever the JSON is: a string gives its characters
        return [value.strip() if isinstance(value, str) else value for value in values]
    except (ValueError, TypeError) as exc:
        raise DocstringParsingException(
            f"cannot build a JSON schema for {func_name}: the choices of '{arg}' are not a "
            f"JSON list ({exc})"
        ) from None


def _parameters_schema(func: Callable[..., Any], name: str) -> dict[str, Any]:
    try:
        hints = typing.get_type_hints(func)
    except Exception as exc:  # unresolvable forward references and malformed annotations
        raise TypeHintParsingException(
            f"cannot read the type hints of {name}: {type(exc).__name__}: {exc}"
        ) from None
    signature = inspect.signature(func)
    params = signature.parameters
    first = next(iter(params), None)
    # an unannotated leading self/cls is the receiver, not something the model passes
    receiver = (
        first
        if first in ("self", "cls") and params[first].annotation is inspect.Parameter.empty
        else None
    )
    required: list[str] = []
    for param_name, param in params.items():
        if param_name == receiver:
            continue
        if param.annotation is inspect.Parameter.empty:
            raise TypeHintParsingException(f"the argument {param_name} of {name} has no type hint")
        if param.default is inspect.Parameter.empty:
            required.append(param_name)
    properties: dict[str, Any] = {}
    for hint_name, hint in hints.items():
        if hint_name == receiver:
            continue
        if hint_name == "return":
            # the model never writes the return value: an odd return hint is left out, not fatal
            try:
                properties["return"] = _hint_schema(hint)
            except TypeHintParsingException:
                pass
            continue
        properties[hint_name] = _hint_schema(hint)
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


def _hint_schema(hint: Any) -> dict[str, Any]:
    """The JSON schema of one (resolved) type hint."""
    origin = get_origin(hint)
    args = get_args(hint)
    if origin is None:
        if isinstance(hint, type) and issubclass(hint, Enum):
            return _enum_schema_of(hint)
        return _plain_type_schema(hint)
    if origin is Union or origin is types.UnionType:
        return _union_schema(args)
    if origin is Literal and args:
        if any(type(arg) not in _JSON_SCALARS for arg in args):
            raise TypeHintParsingException(
                "only int, float, str, bool and None values can be listed in typing.Literal"
            )
        return _enum_schema(list(args))
    if origin is list:
        return {"type": "array", "items": _hint_schema(args[0])} if args else {"type": "array"}
    if origin is tuple:
        return _tuple_schema(hint, args)
    if origin is dict:
        schema: dict[str, Any] = {"type": "object"}
        if len(args) == 2:
            # JSON object keys are strings: only the value type can be described
            schema["additionalProperties"] = _hint_schema(args[1])
        return schema
    raise TypeHintParsingException(
        f"cannot convert the type hint {hint!r} to a JSON schema (a custom class or generic?)"
    )


def _plain_type_schema(hint: Any) -> dict[str, Any]:
    if hint is Any:
        return {}
    if isinstance(hint, type):
        if hint in _BASIC_SCHEMAS:
            return dict(_BASIC_SCHEMAS[hint])
        # transformers maps these when PIL / torch are installed; holding the class implies they are
        qualified = (getattr(hint, "__module__", ""), getattr(hint, "__qualname__", ""))
        if qualified == ("PIL.Image", "Image"):
            return {"type": "image"}
        if qualified == ("torch", "Tensor"):
            return {"type": "audio"}
    raise TypeHintParsingException(
        f"cannot convert the type hint {hint!r} to a JSON schema, probably a custom class or "
        "object. Supported hints are int, float, str, bool, None, Any, Enum classes, "
        "typing.Literal, and list, tuple, dict and Union of those; for anything richer, write "
        "the tool's JSON schema by hand and pass that instead of the function."
    )


_BASIC_SCHEMAS: dict[type, dict[str, str]] = {
    int: {"type": "integer"},
    float: {"type": "number"},
    str: {"type": "string"},
    bool: {"type": "boolean"},
    type(None): {"type": "null"},
    list: {"type": "array"},
    tuple: {"type": "array"},
    dict: {"type": "object"},
}


def _enum_schema_of(enum: type[Enum]) -> dict[str, Any]:
    # the model has to write a member's value, so the values are the enum
    values = [member.value for member in enum]
    if not values:
        raise TypeHintParsingException(
            f"the Enum {enum.__name__} has no members, so no value could ever match it"
        )
    if any(type(value) not in _JSON_SCALARS for value in values):
        raise TypeHintParsingException(
            f"the Enum {enum.__name__} has member values that are not JSON scalars: {values}; "
            "member values must be int, float, str, bool or None"
        )
    return _enum_schema(values)


def _enum_schema(values: list[Any]) -> dict[str, Any]:
    # each JSON type present, once, in order of first appearance; a single one is not a list
    kinds = list(dict.fromkeys(_JSON_SCALARS[type(value)] for value in values))
    return {"type": kinds[0] if len(kinds) == 1 else kinds, "enum": values}


def _union_schema(args: tuple[Any, ...]) -> dict[str, Any]:
    members = [_hint_schema(arg) for arg in args if arg is not type(None)]
    schema: dict[str, Any]
    if len(members) == 1:
        schema = members[0]
    elif all(m.keys() == {"type"} and isinstance(m["type"], str) for m in members):
        # bare types collapse to a sorted, de-duplicated type list (list | tuple -> "array")
        names = sorted({m["type"] for m in members})
        schema = {"type": names[0] if len(names) == 1 else names}
    else:
        # members with items/enum/prefixItems would lose them in a type list
        schema = {"anyOf": members}
    if type(None) in args:
        schema["nullable"] = True
    return schema


def _tuple_schema(hint: Any, args: tuple[Any, ...]) -> dict[str, Any]:
    if not args:
        return {"type": "array"}
    if len(args) == 1:
        shown = str(hint).replace("typing.", "")
        raise TypeHintParsingException(
            f"the type hint {shown} is a one-element tuple, which has no JSON schema conversion: "
            "use list[...] if it can hold several items, or the element type itself if not"
        )
    if ... in args:
        raise TypeHintParsingException(
            "'...' in a tuple type hint has no JSON schema conversion: use list[...] for "
            "variable-length inputs"
        )
    return {"type": "array", "prefixItems": [_hint_schema(arg) for arg in args]}
