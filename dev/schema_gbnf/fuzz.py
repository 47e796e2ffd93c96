"""Random schemas for compare.py --fuzz: every keyword the converter reads, nested, with odd
values (a seed makes a run repeatable). A developer tool."""

from __future__ import annotations

import random
import struct
from typing import Any

NAMES = ["a", "b", "ab", "a b", "a-b", "é", "x_y", "", "*", "string", "root", "dot", "n1", "日本"]
PATTERNS = [
    "^[a-z]+$",
    "^(a|bc)*d?$",
    "^\\d+$",
    "^x{2,3}$",
    "^(ab){1,}(cd){0,2}$",
    "^.{2}$",
    "abc",
    "^a\\.b\\-c$",
    '^[^"]{1,4}$',
    "^(?:x|y)+$",
    "^é{2}$",
    "^(a$",
    "^\\(\\)$",
    "^[0-9]{3}-[0-9]{4}$",
]
FORMATS = ["date", "time", "date-time", "uuid", "uuid3", "email", ""]
CONSTS: list[Any] = ["x", 1, 2.5, None, True, [1, "a"], {"k": [None, 0.1]}, 'q"\\\n', 1e20, -7]


PATTERN_CHARS = 'ab0().*+?|[]{}^$\\-,:2"édxu'


def number(rng: random.Random) -> Any:
    pick = rng.randrange(4)
    if pick == 0:
        return rng.choice([0, 1, 5, 9, 10, 99, 100, 123, -1, -10, -123, 1.5, -2.5, 10**12])
    if pick == 1:
        return rng.randrange(-(10 ** rng.randrange(1, 19)), 10 ** rng.randrange(1, 19))
    if pick == 2:
        return rng.uniform(-1e6, 1e6)
    if rng.random() < 0.5:  # any finite double, denormals included
        bits = rng.getrandbits(64) & ~(0x7FF << 52) | (rng.randrange(0x7FF) << 52)
        return struct.unpack("<d", struct.pack("<Q", bits))[0]
    return rng.choice([1, -1]) * rng.random() * 10 ** rng.randrange(-30, 30)


def random_pattern(rng: random.Random) -> str:
    body = "".join(rng.choice(PATTERN_CHARS) for _ in range(rng.randrange(12)))
    return rng.choice(["^" + body + "$", body, "^" + body + "$"])


def schema(rng: random.Random, depth: int, refs: list[str]) -> Any:
    if depth > 4 or rng.random() < 0.2:
        return leaf(rng, refs)
    pick = rng.randrange(9)
    if pick == 0:
        props = {rng.choice(NAMES): schema(rng, depth + 1, refs) for _ in range(rng.randrange(5))}
        out: dict[str, Any] = {"type": rng.choice(["object", None]), "properties": props}
        if rng.random() < 0.7:
            out["required"] = [n for n in props if rng.random() < 0.5]
        if rng.random() < 0.4:
            out["additionalProperties"] = rng.choice([True, False, schema(rng, depth + 1, refs)])
        return {k: v for k, v in out.items() if v is not None}
    if pick == 1:
        out = {"type": "array", "items": schema(rng, depth + 1, refs)}
        if rng.random() < 0.3:
            out["items"] = [schema(rng, depth + 1, refs) for _ in range(rng.randrange(3))]
        if rng.random() < 0.6:
            out["minItems"] = rng.randrange(4)
        if rng.random() < 0.6:
            out["maxItems"] = rng.randrange(5)
        return out
    if pick in (2, 3):
        key = rng.choice(["anyOf", "oneOf", "allOf"])
        return {key: [schema(rng, depth + 1, refs) for _ in range(1 + rng.randrange(3))]}
    if pick == 4:
        return {
            "type": [rng.choice(["string", "integer", "null", "object", "array"]) for _ in range(2)]
        }
    return leaf(rng, refs)


def leaf(rng: random.Random, refs: list[str]) -> Any:
    pick = rng.randrange(10)
    if pick == 0 and refs:
        return {"$ref": rng.choice(refs)}
    if pick == 1:
        return {"enum": rng.sample(CONSTS, 1 + rng.randrange(3))}
    if pick == 2:
        return {"const": rng.choice(CONSTS) if rng.random() < 0.5 else number(rng)}
    if pick == 3:
        out: dict[str, Any] = {"type": "integer"}
        for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            if rng.random() < 0.35:
                out[key] = number(rng)
        return out
    if pick == 4:
        out = {"type": "string"}
        if rng.random() < 0.4:
            out["pattern"] = rng.choice(PATTERNS) if rng.random() < 0.5 else random_pattern(rng)
        if rng.random() < 0.3:
            out["format"] = rng.choice(FORMATS)
        if rng.random() < 0.3:
            out["minLength"] = rng.randrange(4)
        if rng.random() < 0.3:
            out["maxLength"] = rng.randrange(6)
        return out
    return (
        {"type": rng.choice(["string", "number", "boolean", "null", "integer", "object", "array"])}
        if pick < 9
        else {}
    )


def random_schema(seed: int) -> Any:
    rng = random.Random(seed)
    refs = ["#/$defs/d0", "#/$defs/d1", "#", "#/properties/a"]
    root = schema(rng, 0, refs)
    if not isinstance(root, dict):
        return root
    defs = {"d0": schema(rng, 2, refs), "d1": schema(rng, 3, refs)}
    return {**root, "$defs": defs} if rng.random() < 0.7 else root
