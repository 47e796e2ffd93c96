"""Comparing a reply grammar with llama.cpp's up to the numbers of its automaton rules.

llama.cpp names an ``until``/``ac`` automaton after its parser's id in the arena; chatcodec
numbers them as it meets them. ``renumbered`` renames them in the order they are first referred
to from ``root`` (breadth first), so two grammars that differ only there compare equal.
"""

from __future__ import annotations

import re

__all__ = ["renumbered"]

_AUTOMATON = re.compile(r"\b(until|ac)-(\d+)((?:-\d+)?)\b")
_NAME = re.compile(r"[a-zA-Z0-9-]+")
# literals and character classes hold no rule names
_QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\]')


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
