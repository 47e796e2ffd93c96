"""What the family grammar tests share: the requests and llama.cpp's answers.

The expected texts, ``tests/data/grammar_<family>.json``, are what llama.cpp's oracle (the
corpus' build, commit 0c1e570, ../shared/tools/llamacpp-oracle) gave for each family's test
template and the requests below (``{"id": <name>, "template": <file>, "messages": HI,
"tools"/"tool_choice"/"parallel_tool_calls"/"json_schema": as below, "reasoning_format":
"deepseek", "enable_thinking": true, "add_generation_prompt": true}``); compare them with
``tests/_grammar_compare.normalize``.
"""

from __future__ import annotations

import json
from typing import Any

from ._requests import ANSWER, HI, WEATHER_TIME, json_schema
from .conftest import ROOT

__all__ = ["HI", "TOOLS", "REQUESTS", "expected"]

TOOLS = WEATHER_TIME
REQUESTS: dict[str, dict[str, Any]] = {
    # lazy: the calls' rules only, from the trigger on
    "auto": {"tools": TOOLS, "parallel_tool_calls": False},
    # eager: the whole reply, ending in calls
    "required-parallel": {"tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": True},
    # eager: the whole reply, ending in the schema's JSON
    "response-format": {"response_format": json_schema(ANSWER)},
}


def expected(family: str) -> dict[str, str]:
    """llama.cpp's grammar for each of ``REQUESTS`` with the family's test template."""
    path = ROOT / "tests" / "data" / f"grammar_{family}.json"
    return json.loads(path.read_text(encoding="utf-8"))
