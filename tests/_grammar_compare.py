"""Grammar texts compared as llama.cpp's and ours can be equal: up to the automaton rules' numbers.

llama.cpp names an ``until``/``ac`` automaton's rules after its parser's id in the arena
(``until-161``, ``until-161-01`` ...); chatcodec numbers them in the order it writes them. Both
sides are renamed by order of first reference from ``root`` (then sorted) before comparing.
"""

from __future__ import annotations

import re

__all__ = ["normalize"]

_AUTOMATON = re.compile(r"\b(until|ac)-(\d+)((?:-\d+)?)\b")
_NAME = re.compile(r"[a-zA-Z0-9-]+")


def normalize(text: str) -> str:
    """The grammar with its automaton rules renamed by order of first reference from root."""
    rules = {}
    for line in text.splitlines():
        name, _, body = line.partition(" ::= ")
        rules[name] = body
    order: dict[str, str] = {}
    seen: set[str] = set()
    queue = ["root"]
    while queue:
        name = queue.pop(0)
        if name in seen or name not in rules:
            continue
        seen.add(name)
        for token in _NAME.findall(
            re.sub(r'"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\]', " ", rules[name])
        ):
            m = _AUTOMATON.fullmatch(token)
            if m and f"{m[1]}-{m[2]}" not in order:
                order[f"{m[1]}-{m[2]}"] = f"{m[1]}-#{len(order)}"
            queue.append(token)

    def rename(m: re.Match[str]) -> str:
        return order.get(f"{m[1]}-{m[2]}", m[0]) + m[3]

    return "\n".join(sorted(_AUTOMATON.sub(rename, line) for line in text.splitlines()))
