"""A string schema's ``pattern`` (a regular expression) as GBNF, as far as llama.cpp goes.

llama.cpp translates an anchored regex (``^...$``) piece by piece: literals, ``.``, groups
(plain and ``(?:``), ``|``, character classes (copied as they are, with GBNF's escapes only),
``*`` ``+`` ``?`` and ``{m,n}`` (a repeated group becomes its own rule ``NAME-N``). Anything
else is either *unsupported* (a valid regex GBNF cannot say: ``\\d``, lookarounds, an
unanchored pattern, ...; the caller then accepts any string and warns) or *invalid* (not a
regex at all: unbalanced parentheses, nothing to repeat; the caller reports an error).

llama.cpp walks the pattern byte by byte; so does this port (on the UTF-8 bytes, one char per
byte), so that a quantifier after a multi-byte character splits it exactly as llama.cpp does.
"""

from __future__ import annotations

from collections.abc import Callable

from .numbers import INT_MAX, repetition

__all__ = ["UnsupportedPattern", "InvalidPattern", "pattern_to_rule"]

MAX_DEPTH = 100
_NON_LITERAL = frozenset("|.()[]{}*+?^$")
_ESCAPED_IN_REGEX_ONLY = frozenset("^$.[]()|{}*+?")
_HEX = frozenset("0123456789abcdefABCDEF")
_HEX_LENGTH = {"x": 2, "u": 4, "U": 8}
_GBNF_ESCAPES = frozenset('trn\\"[]-')


class UnsupportedPattern(Exception):
    """A valid regex with no GBNF equivalent here."""


class InvalidPattern(Exception):
    """Not a valid regex."""


def escape_length(pattern: str, pos: int) -> int:
    """Length of the GBNF escape (``\\n``, ``\\x41``, ...) at ``pos``; 0 when there is none."""
    if pos + 1 >= len(pattern) or pattern[pos] != "\\":
        return 0
    kind = pattern[pos + 1]
    if kind in _GBNF_ESCAPES:
        return 2
    n_hex = _HEX_LENGTH.get(kind)
    if n_hex is None or pos + 2 + n_hex > len(pattern):
        return 0
    if not all(h in _HEX for h in pattern[pos + 2 : pos + 2 + n_hex]):
        return 0
    return 2 + n_hex


def _to_int(text: str) -> int:
    """``std::stoi``: leading blanks, a sign, digits; ``UnsupportedPattern`` without digits."""
    stripped = text.lstrip(" \t\n\v\f\r")
    sign = ""
    if stripped[:1] in ("+", "-"):
        sign, stripped = stripped[0], stripped[1:]
    digits = ""
    for ch in stripped:
        if not "0" <= ch <= "9":
            break
        digits += ch
    if not digits:
        raise UnsupportedPattern("invalid number in curly brackets")
    value = int(sign + digits)
    if not -(2**31) <= value <= INT_MAX:
        raise UnsupportedPattern("invalid number in curly brackets")
    return value


def _rule(item: tuple[str, bool]) -> str:
    text, is_literal = item
    return f'"{text}"' if is_literal else text


class _Translator:
    def __init__(self, pattern: str, name: str, add_rule: Callable[[str, str], str], dotall: bool):
        self.text = pattern
        self.name = name
        self.add_rule = add_rule
        self.dotall = dotall
        self.i = 0
        self.depth = 0
        self.sub_rules: dict[str, str] = {}

    def dot(self) -> str:
        body = "[\\U00000000-\\U0010FFFF]" if self.dotall else "[^\\x0A\\x0D]"
        return self.add_rule("dot", body)

    def sequence(self) -> tuple[str, bool]:
        """Translate up to the closing parenthesis of the current group (or the end)."""
        seq: list[tuple[str, bool]] = []
        text = self.text
        while self.i < len(text):
            c = text[self.i]
            if c == ".":
                seq.append((self.dot(), False))
                self.i += 1
            elif c == "(":
                seq.append(self.group())
            elif c == ")":
                self.i += 1
                if self.depth == 0:
                    raise InvalidPattern("unbalanced parentheses")
                self.depth -= 1
                return _join(seq)
            elif c in "^$":
                raise UnsupportedPattern("anchor inside the pattern")
            elif c == "[":
                seq.append((self.char_class(), False))
            elif c == "|":
                seq.append(("|", False))
                self.i += 1
            elif c in "*+?":
                if not seq:
                    raise InvalidPattern("nothing to repeat")
                seq[-1] = (_rule(seq[-1]) + c, False)
                self.i += 1
            elif c == "{":
                self.braces(seq)
            else:
                seq.append((self.literal(c), True))
        return _join(seq)

    def group(self) -> tuple[str, bool]:
        text = self.text
        self.i += 1
        if self.i < len(text) and text[self.i] == "?":
            if self.i + 1 < len(text) and text[self.i + 1] == ":":
                self.i += 2  # (?:...) is a plain group here
            else:
                raise UnsupportedPattern("unsupported group syntax")
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise UnsupportedPattern("pattern nesting too deep")
        return ("(" + _rule(self.sequence()) + ")", False)

    def char_class(self) -> str:
        text = self.text
        out = "["
        self.i += 1
        while self.i < len(text) and text[self.i] != "]":
            if text[self.i] == "\\":
                length = escape_length(text, self.i)
                if length == 0:
                    raise UnsupportedPattern(
                        "unsupported escape in character class: " + text[self.i : self.i + 2]
                    )
                out += text[self.i : self.i + length]
                self.i += length
            else:
                out += text[self.i]
                self.i += 1
        if self.i >= len(text):
            raise InvalidPattern("unterminated character class")
        self.i += 1
        return out + "]"

    def braces(self, seq: list[tuple[str, bool]]) -> None:
        text = self.text
        end = text.find("}", self.i + 1)
        if end < 0:
            raise UnsupportedPattern("unterminated curly brackets")
        nums = text[self.i + 1 : end].split(",")
        self.i = end + 1
        if len(nums) not in (1, 2):
            raise UnsupportedPattern("wrong number of values in curly brackets")
        if len(nums) == 1:
            low = high = _to_int(nums[0])
        else:
            low = _to_int(nums[0]) if nums[0] else 0
            high = _to_int(nums[1]) if nums[1] else INT_MAX
        if not seq:
            raise InvalidPattern("nothing to repeat")
        sub, is_literal = seq[-1]
        if not is_literal:
            if not self.sub_rules.get(sub):
                self.sub_rules[sub] = ""
                self.sub_rules[sub] = self.add_rule(f"{self.name}-{len(self.sub_rules)}", sub)
            sub = self.sub_rules[sub]
        seq[-1] = (repetition(f'"{sub}"' if is_literal else sub, low, high), False)

    def literal(self, first: str) -> str:
        text, n = self.text, len(self.text)
        out = ""
        while self.i < n:
            ch = text[self.i]
            if ch == "\\":
                if self.i == n - 1:
                    raise InvalidPattern("trailing backslash")
                following = text[self.i + 1]
                if following in _ESCAPED_IN_REGEX_ONLY:
                    out += following
                    self.i += 2
                    continue
                length = escape_length(text, self.i)
                if length == 0:
                    raise UnsupportedPattern("unsupported escape: " + text[self.i : self.i + 2])
                out += text[self.i : self.i + length]
                self.i += length
            elif ch == '"':
                out += '\\"'
                self.i += 1
            elif ch not in _NON_LITERAL and (
                self.i == n - 1
                or not out
                or text[self.i + 1] == "."
                or text[self.i + 1] not in _NON_LITERAL
            ):
                # a character right before a quantifier stays alone, so the quantifier binds to it
                out += ch
                self.i += 1
            else:
                break
        if not out:  # a stray ']' or '}'
            raise UnsupportedPattern("unsupported character: " + first)
        return out


def _join(seq: list[tuple[str, bool]]) -> tuple[str, bool]:
    """The sequence as one rule body, consecutive literals merged into one."""
    parts: list[str] = []
    literal = ""
    for text, is_literal in seq:
        if is_literal:
            literal += text
            continue
        if literal:
            parts.append(f'"{literal}"')
            literal = ""
        parts.append(text)
    if literal:
        parts.append(f'"{literal}"')
    return (" ".join(parts), False)


def pattern_to_rule(
    pattern: str, name: str, add_rule: Callable[[str, str], str], dotall: bool = False
) -> str:
    """Add the rule for strings matching ``pattern`` under ``name``; its name.

    ``pattern`` and the rule bodies passed to ``add_rule`` are byte strings decoded as
    Latin-1 (one char per UTF-8 byte), as llama.cpp sees them.
    """
    if len(pattern) < 2 or pattern[0] != "^" or pattern[-1] != "$":
        raise UnsupportedPattern("not anchored with '^' and '$'")
    translator = _Translator(pattern[1:-1], name, add_rule, dotall)
    body = _rule(translator.sequence())
    if translator.depth != 0:
        raise InvalidPattern("unbalanced parentheses")
    return add_rule(name, f'"\\"" ({body}) "\\""')
