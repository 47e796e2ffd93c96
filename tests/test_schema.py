"""get_json_schema gives the schemas transformers 5.23.0 gives, key order included.

The expected dicts were produced once by transformers' own ``get_json_schema`` over the
functions below and written here literally; the suite does not need transformers.
"""
# ruff: noqa: UP006, UP007, UP035, UP037, UP045

import json
from collections.abc import Callable
from enum import Enum, IntEnum
from typing import Annotated, Any, Dict, List, Literal, Optional, Tuple, Union

import pytest

from chatcodec import ChatTemplate, TemplateError
from chatcodec.errors import ChatCodecError
from chatcodec.template.schema import (
    DocstringParsingException,
    TypeHintParsingException,
    get_json_schema,
    parse_google_format_docstring,
)

from .conftest import template_source

# --- functions whose schemas transformers documents ---


class Color(Enum):
    RED = "red"
    GREEN = "green"


class Level(IntEnum):
    LOW = 1
    HIGH = 3


class Point:
    pass


def multiply(x: float, y: float):
    """
    A function that multiplies two numbers

    Args:
        x: The first number to multiply
        y: The second number to multiply
    """
    return x * y


def drink_beverage(beverage: str):
    """
    A function that drinks a beverage

    Args:
        beverage: The beverage to drink (choices: ["tea", "coffee"])
    """


def search(query: str, limit: Optional[int] = None, exact: bool = False) -> list[str]:
    """Search the index.

    Longer explanation that spans
    two lines.

    Args:
        query: What to look for,
            continued on a deeper line.
        limit: At most this many hits
        exact: Match the whole phrase

    Returns:
        The matching document ids.

    Raises:
        KeyError: never really
    """
    return []


def unions(
    a: int | str,
    b: Union[int, float, None],
    c: list[int] | str,
    d: list | tuple,
    e: Optional[list[str]] = None,
    f: Any = None,
):
    """Mixed unions.

    Args:
        a: int or str
        b: a number or nothing
        c: ints or a string
        d: some sequence
        e: optional list
        f: anything at all
    """


def literals(
    mode: Literal["fast", "slow"],
    mixed: Literal[1, "x", None, True],
    maybe: Optional[Literal["a", "b"]] = None,
    level: Level = Level.LOW,
    color: Color = Color.RED,
):
    """Literal and enum values.

    Args:
        mode: The speed
        mixed: Anything listed
        maybe: Perhaps a letter
        level: How much
        color: Which colour
    """


def containers(
    items: List[Dict[str, int]],
    plain: list,
    mapping: dict,
    typed: dict[str, list[float]],
    pair: Tuple[int, str],
    anytuple: tuple,
    triple: tuple[int, float, bool],
) -> dict:
    """Containers of all kinds.

    Args:
        items: list of maps
        plain: a bare list
        mapping: a bare dict
        typed: lists of floats by name
        pair: an int and a string
        anytuple: any tuple
        triple: three things
    """
    return {}


def choices_override(unit: Literal["c", "f"], n: int):
    """Choices in the docstring win.

    Args:
        unit: The unit (choices: ["celsius", "fahrenheit"])
        n: A number (Choices: [1, 2,   3])
    """


def no_params() -> None:
    """Takes nothing and returns nothing."""


def unconvertible_return(x: int) -> Point:
    """Returns a custom class.

    Args:
        x: a number

    Returns:
        A point that the schema cannot describe.
    """
    return Point()


def return_without_doc(x: int) -> int:
    """Return hint but no Returns section.

    Args:
        x: a number
    """
    return x


def annotated_and_string(x: Annotated[int, "meta"], y: "str", *args: int, **kwargs: str):
    """Annotated and string hints, and varargs.

    Args:
        x: annotated int
        y: string-annotated str
        args: extra positionals
        kwargs: extra keywords
    """


def only_args(x: int):
    """Args:
    x: the summary is empty
    """


def nested_colons(x: int, y: str):
    """Continuation lines that look like entries.

    Args:
        x: the x value.
            Note: deeper lines stay in the description.
        y: the y value, see Returns: below
    """


def blank_lines_in_args(x: int, y: int):
    """Blank lines inside the Args block are dropped.

    Args:

        x: first

        y: second
           spread over lines
    """


def extra_doc_args(x: int):
    """Documents more than it takes.

    Args:
        x: real one
        ghost: not a parameter
    """


class Calculator:
    def add(self, a: int, b: int = 2) -> int:
        """Add two numbers.

        Args:
            a: first
            b: second
        """
        return a + b

    @classmethod
    def make(cls, name: str):
        """Make a calculator.

        Args:
            name: its name
        """
        return cls()


# ---- errors ----
def no_docstring(x: int):
    return x


def missing_description(x: int, y: int):
    """Only x is described.

    Args:
        x: the x
    """


def missing_hint(x: int, y):
    """Untyped y.

    Args:
        x: the x
        y: the y
    """


def custom_class(p: Point):
    """Custom class.

    Args:
        p: a point
    """


def single_tuple(p: tuple[int]):
    """One-tuple.

    Args:
        p: a one-tuple
    """


def ellipsis_tuple(p: tuple[int, ...]):
    """Variadic tuple.

    Args:
        p: ints
    """


def bad_literal(p: Literal[b"x"]):
    """Bytes literal.

    Args:
        p: bytes
    """


class Empty(Enum):
    pass


def empty_enum(p: Empty):
    """Empty enum.

    Args:
        p: nothing
    """


def typed_doc_args(x: int):
    """Google style with types in the docstring.

    Args:
        x (int): the x
    """


EXPECTED: list[tuple[Callable[..., Any], dict[str, Any]]] = [
    (
        multiply,
        {
            "type": "function",
            "function": {
                "name": "multiply",
                "description": "A function that multiplies two numbers",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "x": {"type": "number", "description": "The first number to multiply"},
                        "y": {"type": "number", "description": "The second number to multiply"},
                    },
                    "required": ["x", "y"],
                },
            },
        },
    ),
    (
        drink_beverage,
        {
            "type": "function",
            "function": {
                "name": "drink_beverage",
                "description": "A function that drinks a beverage",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "beverage": {
                            "type": "string",
                            "enum": ["tea", "coffee"],
                            "description": "The beverage to drink",
                        }
                    },
                    "required": ["beverage"],
                },
            },
        },
    ),
    (
        search,
        {
            "type": "function",
            "function": {
                "name": "search",
                "description": "Search the index.\n\nLonger explanation that spans\ntwo lines.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "query": {
                            "type": "string",
                            "description": "What to look for, continued on a deeper line.",
                        },
                        "limit": {
                            "type": "integer",
                            "nullable": True,
                            "description": "At most this many hits",
                        },
                        "exact": {"type": "boolean", "description": "Match the whole phrase"},
                    },
                    "required": ["query"],
                },
                "return": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "The matching document ids.",
                },
            },
        },
    ),
    (
        unions,
        {
            "type": "function",
            "function": {
                "name": "unions",
                "description": "Mixed unions.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "a": {"type": ["integer", "string"], "description": "int or str"},
                        "b": {
                            "type": ["integer", "number"],
                            "nullable": True,
                            "description": "a number or nothing",
                        },
                        "c": {
                            "anyOf": [
                                {"type": "array", "items": {"type": "integer"}},
                                {"type": "string"},
                            ],
                            "description": "ints or a string",
                        },
                        "d": {"type": "array", "description": "some sequence"},
                        "e": {
                            "type": "array",
                            "items": {"type": "string"},
                            "nullable": True,
                            "description": "optional list",
                        },
                        "f": {"description": "anything at all"},
                    },
                    "required": ["a", "b", "c", "d"],
                },
            },
        },
    ),
    (
        literals,
        {
            "type": "function",
            "function": {
                "name": "literals",
                "description": "Literal and enum values.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "mode": {
                            "type": "string",
                            "enum": ["fast", "slow"],
                            "description": "The speed",
                        },
                        "mixed": {
                            "type": ["integer", "string", "null", "boolean"],
                            "enum": [1, "x", None, True],
                            "description": "Anything listed",
                        },
                        "maybe": {
                            "type": "string",
                            "enum": ["a", "b"],
                            "nullable": True,
                            "description": "Perhaps a letter",
                        },
                        "level": {"type": "integer", "enum": [1, 3], "description": "How much"},
                        "color": {
                            "type": "string",
                            "enum": ["red", "green"],
                            "description": "Which colour",
                        },
                    },
                    "required": ["mode", "mixed"],
                },
            },
        },
    ),
    (
        containers,
        {
            "type": "function",
            "function": {
                "name": "containers",
                "description": "Containers of all kinds.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "items": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "additionalProperties": {"type": "integer"},
                            },
                            "description": "list of maps",
                        },
                        "plain": {"type": "array", "description": "a bare list"},
                        "mapping": {"type": "object", "description": "a bare dict"},
                        "typed": {
                            "type": "object",
                            "additionalProperties": {"type": "array", "items": {"type": "number"}},
                            "description": "lists of floats by name",
                        },
                        "pair": {
                            "type": "array",
                            "prefixItems": [{"type": "integer"}, {"type": "string"}],
                            "description": "an int and a string",
                        },
                        "anytuple": {"type": "array", "description": "any tuple"},
                        "triple": {
                            "type": "array",
                            "prefixItems": [
                                {"type": "integer"},
                                {"type": "number"},
                                {"type": "boolean"},
                            ],
                            "description": "three things",
                        },
                    },
                    "required": [
                        "items",
                        "plain",
                        "mapping",
                        "typed",
                        "pair",
                        "anytuple",
                        "triple",
                    ],
                },
                "return": {"type": "object"},
            },
        },
    ),
    (
        choices_override,
        {
            "type": "function",
            "function": {
                "name": "choices_override",
                "description": "Choices in the docstring win.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "unit": {
                            "type": "string",
                            "enum": ["celsius", "fahrenheit"],
                            "description": "The unit",
                        },
                        "n": {"type": "integer", "enum": [1, 2, 3], "description": "A number"},
                    },
                    "required": ["unit", "n"],
                },
            },
        },
    ),
    (
        no_params,
        {
            "type": "function",
            "function": {
                "name": "no_params",
                "description": "Takes nothing and returns nothing.",
                "parameters": {"type": "object", "properties": {}},
                "return": {"type": "null"},
            },
        },
    ),
    (
        unconvertible_return,
        {
            "type": "function",
            "function": {
                "name": "unconvertible_return",
                "description": "Returns a custom class.",
                "parameters": {
                    "type": "object",
                    "properties": {"x": {"type": "integer", "description": "a number"}},
                    "required": ["x"],
                },
            },
        },
    ),
    (
        return_without_doc,
        {
            "type": "function",
            "function": {
                "name": "return_without_doc",
                "description": "Return hint but no Returns section.",
                "parameters": {
                    "type": "object",
                    "properties": {"x": {"type": "integer", "description": "a number"}},
                    "required": ["x"],
                },
                "return": {"type": "integer"},
            },
        },
    ),
    (
        annotated_and_string,
        {
            "type": "function",
            "function": {
                "name": "annotated_and_string",
                "description": "Annotated and string hints, and varargs.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "x": {"type": "integer", "description": "annotated int"},
                        "y": {"type": "string", "description": "string-annotated str"},
                        "args": {"type": "integer", "description": "extra positionals"},
                        "kwargs": {"type": "string", "description": "extra keywords"},
                    },
                    "required": ["x", "y", "args", "kwargs"],
                },
            },
        },
    ),
    (
        nested_colons,
        {
            "type": "function",
            "function": {
                "name": "nested_colons",
                "description": "Continuation lines that look like entries.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "x": {
                            "type": "integer",
                            "description": "the x value. Note: deeper lines stay in the description.",
                        },
                        "y": {"type": "string", "description": "the y value, see"},
                    },
                    "required": ["x", "y"],
                },
            },
        },
    ),
    (
        blank_lines_in_args,
        {
            "type": "function",
            "function": {
                "name": "blank_lines_in_args",
                "description": "Blank lines inside the Args block are dropped.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "x": {"type": "integer", "description": "first"},
                        "y": {"type": "integer", "description": "second spread over lines"},
                    },
                    "required": ["x", "y"],
                },
            },
        },
    ),
    (
        extra_doc_args,
        {
            "type": "function",
            "function": {
                "name": "extra_doc_args",
                "description": "Documents more than it takes.",
                "parameters": {
                    "type": "object",
                    "properties": {"x": {"type": "integer", "description": "real one"}},
                    "required": ["x"],
                },
            },
        },
    ),
    (
        Calculator.add,
        {
            "type": "function",
            "function": {
                "name": "add",
                "description": "Add two numbers.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "a": {"type": "integer", "description": "first"},
                        "b": {"type": "integer", "description": "second"},
                    },
                    "required": ["a"],
                },
                "return": {"type": "integer"},
            },
        },
    ),
    (
        Calculator().add,
        {
            "type": "function",
            "function": {
                "name": "add",
                "description": "Add two numbers.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "a": {"type": "integer", "description": "first"},
                        "b": {"type": "integer", "description": "second"},
                    },
                    "required": ["a"],
                },
                "return": {"type": "integer"},
            },
        },
    ),
    (
        Calculator.make,
        {
            "type": "function",
            "function": {
                "name": "make",
                "description": "Make a calculator.",
                "parameters": {
                    "type": "object",
                    "properties": {"name": {"type": "string", "description": "its name"}},
                    "required": ["name"],
                },
            },
        },
    ),
]


# transformers raises these classes for these functions (checked against 5.23.0)
ERRORS: list[tuple[Callable[..., Any], type[Exception], str]] = [
    (no_docstring, DocstringParsingException, "no docstring"),
    (missing_description, DocstringParsingException, "'y'"),
    (missing_hint, TypeHintParsingException, "y"),
    (custom_class, TypeHintParsingException, "Point"),
    (single_tuple, TypeHintParsingException, "tuple[int]"),
    (ellipsis_tuple, TypeHintParsingException, "..."),
    (bad_literal, TypeHintParsingException, "Literal"),
    (empty_enum, TypeHintParsingException, "Empty"),
    (typed_doc_args, DocstringParsingException, "'x'"),
    (only_args, DocstringParsingException, "'x'"),
]


@pytest.mark.parametrize(("func", "expected"), EXPECTED, ids=[f.__qualname__ for f, _ in EXPECTED])
def test_schema_matches_transformers(func: Callable[..., Any], expected: dict[str, Any]) -> None:
    schema = get_json_schema(func)
    assert schema == expected
    # templates dump tools with tojson: the key order is part of the prompt
    assert json.dumps(schema) == json.dumps(expected)


@pytest.mark.parametrize(
    ("func", "error", "fragment"), ERRORS, ids=[f.__name__ for f, _, _ in ERRORS]
)
def test_schema_errors(func: Callable[..., Any], error: type[Exception], fragment: str) -> None:
    with pytest.raises(error) as caught:
        get_json_schema(func)
    assert fragment in str(caught.value)
    assert isinstance(caught.value, ValueError)
    assert isinstance(caught.value, ChatCodecError)


def test_each_call_returns_fresh_dicts() -> None:
    first = get_json_schema(unions)
    first["function"]["parameters"]["properties"]["a"]["type"].append("null")
    assert get_json_schema(unions)["function"]["parameters"]["properties"]["a"]["type"] == [
        "integer",
        "string",
    ]


def test_unresolvable_forward_reference_is_a_type_hint_error() -> None:
    def later(x: "NotDefinedAnywhere") -> None:  # type: ignore[name-defined]  # noqa: F821
        """Refers to a name that does not exist.

        Args:
            x: something
        """

    with pytest.raises(TypeHintParsingException, match="NotDefinedAnywhere"):
        get_json_schema(later)


def test_choices_that_are_not_json_are_a_docstring_error() -> None:
    def pick(x: str) -> None:
        """Pick one.

        Args:
            x: a letter (choices: [a, b])
        """

    with pytest.raises(DocstringParsingException, match="choices"):
        get_json_schema(pick)


def test_docstring_sections() -> None:
    summary, args, returns = parse_google_format_docstring(
        "Do a thing.\n\nArgs:\n    a: first\n        more of a\n    b: second\n\n"
        "Returns:\n    The thing.\n\nRaises:\n    ValueError: sometimes"
    )
    assert summary == "Do a thing."
    assert args == {"a": "first more of a", "b": "second"}
    assert returns == "The thing."
    assert parse_google_format_docstring("Just a summary.") == ("Just a summary.", {}, None)


def test_callable_tools_render_like_their_schemas() -> None:
    template = ChatTemplate(template_source("Qwen-Qwen3-0.6B.jinja"))
    messages = [{"role": "user", "content": "What is 6 x 7?"}]
    by_callable = template.render(messages, tools=[multiply, search], add_generation_prompt=True)
    by_schema = template.render(
        messages,
        tools=[dict(EXPECTED[0][1]), dict(EXPECTED[2][1])],
        add_generation_prompt=True,
    )
    assert by_callable == by_schema
    assert '"name": "multiply"' in by_callable


@pytest.mark.parametrize(
    ("func", "kind"),
    [(missing_hint, "TypeHintParsingException"), (no_docstring, "DocstringParsingException")],
)
def test_schema_errors_surface_as_template_errors(func: Callable[..., Any], kind: str) -> None:
    template = ChatTemplate(template_source("Qwen-Qwen3-0.6B.jinja"))
    with pytest.raises(TemplateError) as caught:
        template.render([{"role": "user", "content": "hi"}], tools=[func])
    assert caught.value.stage == "render"
    assert caught.value.kind == kind
