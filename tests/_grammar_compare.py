"""Grammar texts compared as llama.cpp's and chatcodec's can be equal: up to the automaton rules'
numbers.

llama.cpp names an ``until``/``ac`` automaton's rules after its parser's id in the arena
(``until-161``, ``until-161-01`` ...); chatcodec numbers them in the order it writes them. Both
sides are renamed by order of first reference (from ``root``, then from each rule ``root`` does
not reach, in name order) and sorted before comparing.
"""

from __future__ import annotations

import re

from .conftest import ROOT

__all__ = ["RECORDED", "normalize", "recorded"]

RECORDED = ROOT / "tests" / "data" / "grammar"

_AUTOMATON = re.compile(r"\b(until|ac)-(\d+)((?:-\d+)?)\b")
_NAME = re.compile(r"[a-zA-Z0-9-]+")


def normalize(text: str) -> str:
    """The grammar with its automaton rules renamed by order of first reference, sorted."""
    rules = {}
    for line in text.splitlines():
        name, _, body = line.partition(" ::= ")
        rules[name] = body
    order: dict[str, str] = {}
    seen: set[str] = set()
    # from root, then from each rule root does not reach (a rule only an automaton's parser
    # refers to, e.g. the auto parser's until-suffix), in name order
    starts = ["root"] + sorted(n for n in rules if not _AUTOMATON.fullmatch(n))
    queue: list[str] = []
    while starts or queue:
        if not queue:
            queue.append(starts.pop(0))
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
        name = order.get(f"{m[1]}-{m[2]}")
        return name + m[3] if name else m[0]

    return "\n".join(sorted(_AUTOMATON.sub(rename, line) for line in text.splitlines()))


def recorded(name: str) -> str:
    """llama.cpp's grammar text recorded as ``tests/data/grammar/<name>.gbnf``, normalized."""
    return normalize((RECORDED / f"{name}.gbnf").read_text(encoding="utf-8"))
