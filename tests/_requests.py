"""The requests the reply-grammar tests share: a greeting, tool sets, schemas, ChatML templates.

Each test's expectations (tests/data) were recorded by llama.cpp's oracle for exactly the tools
and schema that test sends, property order and all, so every set here keeps its own name and
shape: a test takes the one it was recorded with, never a near neighbour.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "HI",
    "GET_TIME",
    "GET_TIME_BARE",
    "PING",
    "WEATHER_TIME",
    "WEATHER_BARE_TIME",
    "WEATHER_UNIT_BARE_TIME",
    "CITY_TIME",
    "CITY",
    "ANSWER",
    "ANSWER_REQUIRED",
    "CHATML_TURNS",
    "CHATML",
    "QWEN3_CODER",
    "QWEN35",
    "tool",
    "get_weather",
    "json_schema",
]

HI = [{"role": "user", "content": "Hi"}]


def tool(name: str, parameters: dict[str, Any] | None = None) -> dict[str, Any]:
    """A function tool; without ``parameters`` the tool has no "parameters" key at all."""
    function: dict[str, Any] = {"name": name}
    if parameters is not None:
        function["parameters"] = parameters
    return {"type": "function", "function": function}


def get_weather(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """``get_weather`` taking an object of ``properties`` (in this order)."""
    return tool("get_weather", {"type": "object", "properties": properties, "required": required})


def json_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A ``response_format`` asking for a JSON value of ``schema``."""
    return {"type": "json_schema", "json_schema": {"schema": schema}}


GET_TIME = tool("get_time", {"type": "object"})
# no parameters: llama.cpp reads an object without properties
GET_TIME_BARE = tool("get_time")
PING = tool("ping")

# get_weather(city, days; city required), get_time(an object)
WEATHER_TIME = [
    get_weather({"city": {"type": "string"}, "days": {"type": "integer"}}, ["city"]),
    GET_TIME,
]
# the same get_weather, get_time without parameters
WEATHER_BARE_TIME = [
    get_weather({"city": {"type": "string"}, "days": {"type": "integer"}}, ["city"]),
    GET_TIME_BARE,
]
# get_weather(city, days, unit in c/f; city and days required), get_time without parameters
WEATHER_UNIT_BARE_TIME = [
    get_weather(
        {
            "city": {"type": "string"},
            "days": {"type": "integer"},
            "unit": {"type": "string", "enum": ["c", "f"]},
        },
        ["city", "days"],
    ),
    GET_TIME_BARE,
]
# get_weather(city; required) alone, and beside get_time(an object)
CITY = [get_weather({"city": {"type": "string"}}, ["city"])]
CITY_TIME = [get_weather({"city": {"type": "string"}}, ["city"]), GET_TIME]

ANSWER = {"type": "object", "properties": {"answer": {"type": "string"}}}
ANSWER_REQUIRED = {
    "type": "object",
    "properties": {"answer": {"type": "string"}},
    "required": ["answer"],
}

# a ChatML conversation, without and with the generation prompt; the markers in a leading
# comment pick llama.cpp's handler
CHATML_TURNS = (
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
)
CHATML = CHATML_TURNS + "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
QWEN3_CODER = "{#- <tool_call> <function= <parameter= -#}" + CHATML
QWEN35 = "{#- <tool_call> <function= <parameter= <think> -#}" + CHATML
