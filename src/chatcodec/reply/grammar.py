"""What the families share to write their grammar (``grammar(request) -> str``).

A family writes its reply format with ``chatcodec.grammar.rules`` as llama.cpp writes its PEG;
these helpers read a tool's parameters the way llama.cpp's grammar side reads them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..grammar import rules as g
from ..grammar.document import ObjectNode, SchemaNode, read_schema
from .arguments import tool_functions
from .request import ReplyRequest
from .schema import function_parameters, parameters, value_types

__all__ = [
    "calls_only",
    "before_calls",
    "reads_thought",
    "required_arguments",
    "members_in_order",
    "tagged_arguments",
    "Parameter",
    "tool_parameters",
    "tool_schema",
    "parameters_node",
    "python_style_calls",
    "prefix",
    "optspace",
    "spaced_arguments",
    "JsonLayout",
    "standard_json_tools",
]

# ------------------------------------------------------- the guaranteed policy's required calls


def calls_only(request: ReplyRequest) -> bool:
    """Whether the reply may be nothing but the thought and the calls: the request requires a
    call (``tool_choice`` required, or a named tool) under the guaranteed policy, with tools
    to call. llama.cpp's grammar lets free text come first there (docs/differences.md, G1)."""
    return (
        request.policy == "guaranteed"
        and request.tool_choice == "required"
        and bool(tool_functions(request.tools))
    )


def before_calls(request: ReplyRequest, content: g.Expr) -> g.Expr:
    """What a grammar admits between the thought and the first call: llama.cpp's ``content``,
    or nothing when the reply is calls alone (``calls_only``)."""
    return g.nothing() if calls_only(request) else content


def reads_thought(request: ReplyRequest) -> bool:
    """Whether a grammar writes the thought as a thought (its markers and its body): when it is
    extracted, and when the reply is calls alone (a thought kept as content is still the
    thought the template opens, and no other text may come before the calls)."""
    return request.reasoning_format != "none" or calls_only(request)


def members_in_order(
    required: Sequence[g.Expr], optional: Sequence[g.Expr], comma: g.Expr | str
) -> g.Expr:
    """Every required member in order, then any number of the optional ones, parted by
    ``comma`` (the typed arguments of a required call: Gemma 4, LFM2's Python-style calls)."""
    members = g.nothing()
    for i, member in enumerate(required):
        members = members + comma + member if i else member
    if optional:
        more = g.zero_or_more(comma + g.choice(*optional))
        members = members + more if required else g.optional(g.choice(*optional) + more)
    return members


def tagged_arguments(
    r: g.Rules, prefix: str, arguments: Sequence[tuple[g.Expr, bool]], strict: bool
) -> g.Expr:
    """A call's tagged ``arguments`` (each with whether it is required), each followed by a
    space: llama.cpp's any of them any number of times, or ``required_arguments`` when
    ``strict`` (MiniCPM5, Muse Glimmer)."""
    if strict:
        spaced = [(arg + g.space(), required) for arg, required in arguments]
        return required_arguments(r, prefix, spaced)
    if arguments:
        return g.zero_or_more(g.choice(*(arg for arg, _ in arguments)) + g.space())
    return g.nothing()


def required_arguments(r: g.Rules, prefix: str, arguments: Sequence[tuple[g.Expr, bool]]) -> g.Expr:
    """A call's ``arguments`` (each with whether it is required) where the reply is calls
    alone: every required one once, in any order, then any number of the optional ones.
    llama.cpp's grammar takes any of them any number of times in some families (MiniCPM5,
    Muse Glimmer, Kimi K3), so a call could leave a required argument out."""
    args = r.permute(prefix, [arg for arg, required in arguments if required])
    optional = [arg for arg, required in arguments if not required]
    return args + g.zero_or_more(g.choice(*optional)) if optional else args


# llama.cpp's schema for a function without parameters
NO_PARAMETERS: Mapping[str, Any] = {"type": "object", "properties": {}}


@dataclass(frozen=True)
class Parameter:
    """One parameter of a tool: its name, read schema, whether required, the JSON types its
    value may take."""

    name: str
    schema: SchemaNode
    required: bool
    types: frozenset[str]


def parameters_node(function: Mapping[str, Any]) -> SchemaNode:
    """The read ``parameters`` schema of a tool function (its root node); a function without
    parameters (absent, null or ``{}``) takes an object without properties, as llama.cpp's
    ``common_chat_tool_parameters`` gives it."""
    return read_schema(tool_schema(function)).root


def tool_parameters(function: Mapping[str, Any]) -> list[Parameter]:
    """The parameters of a tool function in schema order (none unless its parameters are an
    object schema)."""
    params = function_parameters(function)
    root = read_schema(params).root
    if not isinstance(root, ObjectNode):
        return []
    raw = params.get("properties")
    raw = raw if isinstance(raw, Mapping) else {}
    return [
        Parameter(p.name, p.schema, p.required, value_types(raw.get(p.name), params))
        for p in root.properties
    ]


# ------------------------------------------------------------------ Python-style calls (LFM2)


def _python_style_call(
    r: g.Rules, fn: Mapping[str, Any], json_literals: bool, strict: bool
) -> g.Expr:
    """``name(arg=value, ...)``: a ``string`` parameter takes a quoted string, any other a
    Python value (with JSON's literals too when ``json_literals``). ``strict``: the required
    arguments in order, then any optional ones, each value a JSON value of its schema."""
    args = g.nothing()
    params = list(parameters(fn))
    if params and strict:
        return _typed_python_style_call(r, fn)
    if params:
        arguments = g.choice()
        for name, schema, _required, _root in params:
            if isinstance(schema, Mapping) and schema.get("type") == "string":
                quoted = g.choice('"' + g.string_body('"') + '"', "'" + g.string_body("'") + "'")
                value = g.tag(quoted)
            else:
                value = g.tag(r.python_or_json_value() if json_literals else r.python_value())
            opener = g.tag(g.tag(g.lit(name)) + "=")
            arguments = arguments | g.tag(opener + value + g.tag(g.nothing()))
        args = arguments + g.zero_or_more("," + g.space() + arguments)
    opener = g.tag(g.tag(g.lit(str(fn["name"]))) + "(")
    return g.tag(opener + g.space() + g.tag(args) + g.space() + g.tag(g.lit(")")))


def _typed_python_style_call(r: g.Rules, fn: Mapping[str, Any]) -> g.Expr:
    """``name(arg=value, ...)`` whose arguments hold to the tool's schema: every required one,
    in the schema's order, then any optional ones, each value a JSON value of its schema (a
    JSON string is a Python string, and the parse reads JSON's literals)."""
    name = str(fn["name"])
    required: list[g.Expr] = []
    optional: list[g.Expr] = []
    for param in tool_parameters(fn):
        value = g.tag(g.schema(r.json(), f"tool-{name}-arg-{param.name}-schema", param.schema))
        arg = g.tag(g.tag(g.tag(g.lit(param.name)) + "=") + value + g.tag(g.nothing()))
        (required if param.required else optional).append(arg)
    args = members_in_order(required, optional, "," + g.space())
    opener = g.tag(g.tag(g.lit(name)) + "(")
    return g.tag(opener + g.space() + g.tag(args) + g.space() + g.tag(g.lit(")")))


def python_style_calls(
    r: g.Rules,
    tools: Sequence[Mapping[str, Any]] | None,
    parallel: bool,
    json_literals: bool,
    strict: bool = False,
) -> g.Expr:
    """llama.cpp's Python-style call list: ``[`` one call (or, when ``parallel``, several
    separated by ``,``) ``]``, each call a rule ``tool-NAME``. ``strict`` (the guaranteed
    policy's required calls): each call's arguments hold to its tool's schema."""
    if not tools:
        return g.nothing()
    calls = g.choice()
    for fn in tool_functions(tools):
        call = _python_style_call(r, fn, json_literals, strict)
        calls = calls | r.rule(f"tool-{fn['name']}", call)
    if parallel:
        return "[" + g.space() + calls + g.zero_or_more("," + g.space() + calls) + g.space() + "]"
    return "[" + g.space() + calls + g.space() + "]"


# ------------------------------------------------- llama.cpp's chat builder helpers (grammar side)


def tool_schema(function: Mapping[str, Any]) -> Mapping[str, Any]:
    """A tool function's parameters schema as llama.cpp's builders see it: an object with no
    properties when it has none (absent, null or ``{}``)."""
    params = function.get("parameters")
    if params is None or (isinstance(params, Mapping) and not params):
        return NO_PARAMETERS
    return params if isinstance(params, Mapping) else {}


def prefix(text: str, delimiter: str) -> g.Expr:
    """The generation prompt up to ``delimiter`` (all of it when the delimiter is absent)."""
    if not text:
        return g.nothing()
    at = text.find(delimiter) if delimiter else -1
    return g.lit(text if at < 0 else text[:at])


def optspace(tag: str) -> g.Expr:
    """``tag`` with each of its leading and trailing whitespace characters optional."""
    core = tag.strip(_SPACE)
    lead = len(tag) - len(tag.lstrip(_SPACE)) if core else len(tag)
    trail = len(tag.rstrip(_SPACE)) if core else len(tag)
    parts: list[g.Expr | str] = [g.nothing()]
    parts += [g.optional(ch) for ch in tag[:lead]]
    parts.append(tag[lead:trail])
    parts += [g.optional(ch) for ch in tag[trail:]]
    return g.seq(*parts)


_SPACE = " \t\n\v\f\r"


def spaced_arguments(required: Sequence[g.Expr], optional: Sequence[g.Expr]) -> g.Expr:
    """The required arguments in order, spaced apart, then any number of the optional ones,
    each after a space (llama.cpp's builders of tagged arguments)."""
    args = g.nothing()
    for i, arg in enumerate(required):
        args = args + g.space() + arg if i else args + arg
    if optional:
        args = args + g.zero_or_more(g.space() + g.choice(*optional))
    return args


def _member(key: str, value: g.Expr | str) -> g.Expr:
    return g.seq(f'"{key}"', g.space(), ":", g.space(), value)


def _id_value(r: g.Rules) -> g.Expr:
    """A call id: a JSON string or number."""
    return g.choice('"' + g.tag(g.string_body('"')) + '"', g.tag(r.json_number()))


def _key_spec(key: str) -> tuple[str, str]:
    head, dot, rest = key.partition(".")
    return (head, rest) if dot else ("", key)


def _args(r: g.Rules, name: str, function: Mapping[str, Any]) -> g.Expr:
    return g.tag(g.schema(r.json(), f"tool-{name}-schema", tool_schema(function)))


def _function_is_key(
    r: g.Rules, functions: Sequence[Mapping[str, Any]], args_key: str, ids: tuple[str, str]
) -> g.Expr:
    """``{"NAME": {id?, gen_id?, "ARGS": {...}}}`` (or ``{"NAME": {...}}`` without args key)."""
    choices = g.choice()
    for fn in functions:
        name = fn["name"]
        fields: list[g.Expr] = []
        if ids[0]:
            member = g.tag(_member(ids[0], '"' + g.tag(g.string_body('"')) + '"'))
            fields.append(g.optional(member + g.space() + g.optional("," + g.space())))
        if ids[1]:
            member = g.tag(_member(ids[1], _id_value(r)))
            fields.append(g.optional(member + g.space() + g.optional("," + g.space())))
        args = _args(r, name, fn)
        fields.append(_member(args_key or "arguments", args) if args_key else args)
        if not args_key and len(fields) == 1:
            inner = fields[0]
        else:
            inner = g.seq("{", g.space())
            for i, f in enumerate(fields):
                inner = inner + f
                if i < len(fields) - 1:
                    inner = inner + g.space()
            inner = inner + g.space() + "}"
        body = g.seq(
            g.tag(g.lit("{")), g.space(), '"', g.tag(g.lit(name)), '"', g.space(), ":", g.space()
        )
        tool = g.tag(body + inner + g.space() + g.tag(g.lit("}")))
        choices = choices | r.rule(f"tool-{name}", tool)
    return choices


def _nested_keys(
    r: g.Rules,
    functions: Sequence[Mapping[str, Any]],
    name_key: str,
    args_key: str,
    ids: tuple[str, str],
) -> g.Expr:
    """``{id?, gen_id?, "PREFIX": {"NAME_KEY": "NAME", "ARGS_KEY": {...}}}``."""
    name_spec, args_spec = _key_spec(name_key), _key_spec(args_key)
    outer = name_spec[0] or args_spec[0]
    inner_name = name_spec[1] if name_spec[0] else name_key
    inner_args = args_spec[1] if args_spec[0] else args_key
    choices = g.choice()
    for fn in functions:
        name = fn["name"]
        nested = g.seq(
            "{",
            g.space(),
            _member(inner_name, g.tag('"' + g.tag(g.lit(name)) + '"')),
            g.space(),
            ",",
            g.space(),
            _member(inner_args, _args(r, name, fn)),
            g.space(),
            "}",
        )
        body = g.tag(g.lit("{")) + g.space()
        if ids[0] and not _key_spec(ids[0])[0]:
            member = g.tag(_member(ids[0], '"' + g.tag(g.string_body('"')) + '"'))
            body = body + g.optional(member + g.space() + "," + g.space())
        if ids[1] and not _key_spec(ids[1])[0]:
            member = g.tag(_member(ids[1], _id_value(r)))
            body = body + g.optional(member + g.space() + "," + g.space())
        body = body + _member(outer, nested) + g.space() + g.tag(g.lit("}"))
        choices = choices | r.rule(f"tool-{name}", g.tag(body))
    return choices


def _flat_keys(
    r: g.Rules,
    functions: Sequence[Mapping[str, Any]],
    keys: tuple[str, str],
    ids: tuple[str, str],
    order: Sequence[str],
    openai_wrapper: bool,
) -> g.Expr:
    """``{"NAME_KEY": "NAME", "ARGS_KEY": {...}, id?...}``, the members in ``order``."""

    def rank(key: str) -> int:
        return list(order).index(key) if key in order else len(order)

    choices = g.choice()
    for fn in functions:
        name = fn["name"]
        pairs: list[tuple[g.Expr, str]] = [
            (_member(keys[0], g.tag('"' + g.tag(g.lit(name)) + '"')), keys[0]),
            (_member(keys[1], _args(r, name, fn)), keys[1]),
        ]
        pairs += [(g.optional(g.tag(_member(k, _id_value(r)))), k) for k in ids if k]
        pairs.sort(key=lambda pair: rank(pair[1]))
        body = g.tag(g.lit("{")) + g.space()
        if openai_wrapper:
            body = body + g.optional(_member("type", '"function"') + g.space() + "," + g.space())
        for i, (member, _) in enumerate(pairs):
            body = body + member
            if i < len(pairs) - 1:
                body = body + g.space() + "," + g.space()
        body = body + g.space() + g.tag(g.lit("}"))
        choices = choices | r.rule(f"tool-{name}", g.tag(body))
    return choices


@dataclass(frozen=True)
class JsonLayout:
    """How a family writes one JSON call (llama.cpp's standard_json_tools options): the name
    and arguments keys (``a.b``: nested in ``a``), the name as the object's only key, the call
    id keys (given / generated), the members' order, the OpenAI ``"type": "function"`` lead."""

    name_key: str = ""
    args_key: str = ""
    array_wrapped: bool = False
    function_is_key: bool = False
    call_id_key: str = ""
    gen_call_id_key: str = ""
    parameters_order: tuple[str, ...] = ()
    openai_wrapper: bool = False


def standard_json_tools(
    r: g.Rules,
    section: tuple[str, str],
    tools: Sequence[Mapping[str, Any]] | None,
    parallel: bool,
    force: bool,
    layout: JsonLayout,
) -> g.Expr:
    """JSON calls between ``section``'s start and end markers (the trigger rule ``tool-call``),
    optional unless ``force``; nothing without tools."""
    if not tools:
        return g.nothing()
    functions = [
        tool["function"] for tool in tools if isinstance(tool, Mapping) and "function" in tool
    ]
    name_key = layout.name_key or "name"
    args_key = layout.args_key or "arguments"
    ids = (layout.call_id_key, layout.gen_call_id_key)
    if layout.function_is_key:
        choices = _function_is_key(r, functions, layout.args_key, ids)
    elif _key_spec(name_key)[0] or _key_spec(args_key)[0]:
        choices = _nested_keys(r, functions, name_key, args_key, ids)
    else:
        keys = (name_key, args_key)
        order = layout.parameters_order
        choices = _flat_keys(r, functions, keys, ids, order, layout.openai_wrapper)
    calls = choices
    if parallel:
        calls = calls + g.zero_or_more(g.space() + "," + g.space() + choices)
    if layout.array_wrapped:
        calls = "[" + g.space() + calls + g.space() + "]"
    body = g.lit(section[0]) + g.space() + calls + g.space() + g.lit(section[1])
    rule = r.trigger_rule("tool-call", body)
    return rule if force else g.optional(rule)
