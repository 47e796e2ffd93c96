"""Counted repetition and integer ranges as GBNF, as llama.cpp's converter writes them.

``repetition`` is how an array's ``minItems``/``maxItems`` and a string's lengths become
``x{m,n}`` (or ``x?``, ``x*``, ``x+``, or a separated chain); ``integer_range`` is how an
``integer`` schema's bounds become an alternation of digit classes, digit by digit
(llama.cpp's build_min_max_int), with its int64 arithmetic.
"""

from __future__ import annotations

from .document import INT64_MAX, INT64_MIN

__all__ = ["INT_MAX", "repetition", "integer_range"]

INT_MAX = 2**31 - 1


def repetition(item: str, min_items: int, max_items: int, separator: str = "") -> str:
    """``item`` repeated ``min_items`` to ``max_items`` times (INT_MAX: unbounded)."""
    has_max = max_items != INT_MAX
    if max_items == 0:
        return ""
    if min_items == 0 and max_items == 1:
        return item + "?"
    if not separator:
        if min_items == 1 and not has_max:
            return item + "+"
        if min_items == 0 and not has_max:
            return item + "*"
        return f"{item}{{{min_items},{max_items if has_max else ''}}}"
    rest = repetition(
        f"({separator} {item})",
        0 if min_items == 0 else min_items - 1,
        max_items - 1 if has_max else max_items,
    )
    result = f"{item} {rest}"
    return f"({result})?" if min_items == 0 else result


def _neg(value: int) -> int:
    """int64 negation (wraps at INT64_MIN, as the C++ does)."""
    return INT64_MIN if value == INT64_MIN else -value


class _Digits:
    """Writes the alternation for one range; ``out`` collects the text."""

    def __init__(self) -> None:
        self.out: list[str] = []

    def digit_range(self, low: str, high: str) -> None:
        self.out.append(f"[{low}]" if low == high else f"[{low}-{high}]")

    def more_digits(self, min_digits: int, max_digits: int) -> None:
        self.out.append("[0-9]")
        if min_digits == max_digits == 1:
            return
        self.out.append("{" + str(min_digits))
        if max_digits != min_digits:
            self.out.append("," + (str(max_digits) if max_digits != INT_MAX else ""))
        self.out.append("}")

    def uniform(self, low: str, high: str) -> None:
        """Every number of ``len(low)`` digits from ``low`` to ``high``."""
        i = 0
        while i < len(low) and i < len(high) and low[i] == high[i]:
            i += 1
        if i > 0:
            self.out.append(f'"{low[:i]}"')
        if not (i < len(low) and i < len(high)):
            return
        if i > 0:
            self.out.append(" ")
        sub_len = len(low) - i - 1
        if sub_len <= 0:
            self.out.append(f"[{low[i]}-{high[i]}]")
            return
        low_sub, high_sub = low[i + 1 :], high[i + 1 :]
        zeros, nines = "0" * sub_len, "9" * sub_len
        reached = False
        self.out.append("(")
        if low_sub == zeros:
            self.digit_range(low[i], chr(ord(high[i]) - 1))
            self.out.append(" ")
            self.more_digits(sub_len, sub_len)
        else:
            self.out.append(f"[{low[i]}] (")
            self.uniform(low_sub, nines)
            self.out.append(")")
            if ord(low[i]) < ord(high[i]) - 1:
                self.out.append(" | ")
                if high_sub == nines:
                    self.digit_range(chr(ord(low[i]) + 1), high[i])
                    reached = True
                else:
                    self.digit_range(chr(ord(low[i]) + 1), chr(ord(high[i]) - 1))
                self.out.append(" ")
                self.more_digits(sub_len, sub_len)
        if not reached:
            self.out.append(" | ")
            self.digit_range(high[i], high[i])
            self.out.append(" ")
            self.uniform(zeros, high_sub)
        self.out.append(")")

    def bounded(self, low: int, high: int, decimals: int) -> None:
        if low < 0 and high < 0:
            self.out.append('"-" (')
            self.range(_neg(high), _neg(low), decimals, True)
            self.out.append(")")
            return
        if low < 0:
            self.out.append('"-" (')
            self.range(0, _neg(low), decimals, True)
            self.out.append(") | ")
            low = 0
        low_s, high_s = str(low), str(high)
        for digits in range(len(low_s), len(high_s)):
            self.uniform(low_s, "9" * digits)
            low_s = "1" + "0" * digits
            self.out.append(" | ")
        self.uniform(low_s, high_s)

    def at_least(self, low: int, decimals: int, top_level: bool) -> None:
        fewer = max(decimals - 1, 1)
        if low < 0:
            self.out.append('"-" (')
            self.range(INT64_MIN, _neg(low), decimals, False)
            self.out.append(") | [0] | [1-9] ")
            self.more_digits(0, decimals - 1)
        elif low == 0:
            if top_level:
                self.out.append("[0] | [1-9] ")
                self.more_digits(0, fewer)
            else:
                self.more_digits(1, decimals)
        elif low <= 9:
            c = chr(ord("0") + low)
            start = "1" if top_level else "0"
            if c > start:
                self.digit_range(start, chr(ord(c) - 1))
                self.out.append(" ")
                self.more_digits(1, fewer)
                self.out.append(" | ")
            self.digit_range(c, "9")
            self.out.append(" ")
            self.more_digits(0, fewer)
        else:
            low_s = str(low)
            c = low_s[0]
            if c > "1":
                self.digit_range("1" if top_level else "0", chr(ord(c) - 1))
                self.out.append(" ")
                self.more_digits(len(low_s), fewer)
                self.out.append(" | ")
            self.digit_range(c, c)
            self.out.append(" (")
            self.range(int(low_s[1:]), INT64_MAX, fewer, False)
            self.out.append(")")
            if c < "9":
                self.out.append(" | ")
                self.digit_range(chr(ord(c) + 1), "9")
                self.out.append(" ")
                self.more_digits(len(low_s) - 1, fewer)

    def range(self, low: int, high: int, decimals: int, top_level: bool) -> None:
        has_min, has_max = low != INT64_MIN, high != INT64_MAX
        if has_min and has_max:
            self.bounded(low, high, decimals)
        elif has_min:
            self.at_least(low, decimals, top_level)
        elif has_max:
            if high >= 0:
                if top_level:
                    self.out.append('"-" [1-9] ')
                    self.more_digits(0, max(decimals - 1, 1))
                    self.out.append(" | ")
                self.range(0, high, decimals, True)
            else:
                self.out.append('"-" (')
                self.range(_neg(high), INT64_MAX, decimals, False)
                self.out.append(")")
        else:
            raise ValueError("At least one of min_value or max_value must be set")


def integer_range(minimum: int, maximum: int) -> str:
    """The GBNF body (without the surrounding parentheses) of the integers in
    ``[minimum, maximum]``; INT64_MIN / INT64_MAX leave that side open.

    ``ValueError`` (llama.cpp's message) when both sides are open.
    """
    digits = _Digits()
    digits.range(minimum, maximum, 16, True)
    return "".join(digits.out)
