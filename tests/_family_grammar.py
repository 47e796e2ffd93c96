"""What the family grammar tests share: the requests, llama.cpp's answers, and comparing a
reply grammar with llama.cpp's up to the numbers of its automaton rules.

The expected texts, ``tests/data/grammar_<family>.json``, are what llama.cpp's oracle (the
corpus' build, commit 0c1e570, ../shared/tools/llamacpp-oracle) gave for each family's test
template and the requests below (``{"id": <name>, "template": <file>, "messages": HI,
"tools"/"tool_choice"/"parallel_tool_calls"/"json_schema": as below, "reasoning_format":
"deepseek", "enable_thinking": true, "add_generation_prompt": true}``).

llama.cpp names an ``until``/``ac`` automaton after its parser's id in the arena; chatcodec
numbers them as it meets them. ``renumbered`` renames them in the order they are first referred
to from ``root`` (breadth first), so two grammars that differ only there compare equal.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .conftest import ROOT

__all__ = ["HI", "TOOLS", "SCHEMA", "REQUESTS", "expected", "renumbered"]

HI = [{"role": "user", "content": "Hi"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                "required": ["city"],
            },
        },
    },
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}},
]
SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}}
REQUESTS: dict[str, dict[str, Any]] = {
    # lazy: the calls' rules only, from the trigger on
    "auto": {"tools": TOOLS, "parallel_tool_calls": False},
    # eager: the whole reply, ending in calls
    "required-parallel": {"tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": True},
    # eager: the whole reply, ending in the schema's JSON
    "response-format": {
        "response_format": {"type": "json_schema", "json_schema": {"schema": SCHEMA}}
    },
}

_AUTOMATON = re.compile(r"\b(until|ac)-(\d+)((?:-\d+)?)\b")
_NAME = re.compile(r"[a-zA-Z0-9-]+")
# literals and character classes hold no rule names
_QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\]')


def expected(family: str) -> dict[str, str]:
    """llama.cpp's grammar for each of ``REQUESTS`` with the family's test template."""
    path = ROOT / "tests" / "data" / f"grammar_{family}.json"
    return json.loads(path.read_text(encoding="utf-8"))


def renumbered(text: str) -> list[str]:
    """The grammar's lines, automaton rules renumbered from ``root``, sorted."""
    bodies = dict(line.split(" ::= ", 1) for line in text.splitlines())
    order: dict[str, str] = {}
    seen: set[str] = set()
    queue = ["root"]
    while queue:
        name = queue.pop(0)
        if name in seen or name not in bodies:
            continue
        seen.add(name)
        for token in _NAME.findall(_QUOTED.sub(" ", bodies[name])):
            m = _AUTOMATON.fullmatch(token)
            if m and f"{m[1]}-{m[2]}" not in order:
                order[f"{m[1]}-{m[2]}"] = f"{m[1]}-{len(order)}"
            queue.append(token)

    def rename(m: re.Match[str]) -> str:
        return order.get(f"{m[1]}-{m[2]}", m[0]) + m[3]

    return sorted(_AUTOMATON.sub(rename, line) for line in text.splitlines())
