"""Stop strings applied to the engine's text: an engine that echoes a stop string (or ignores
one) never lets it reach the reply."""

from __future__ import annotations

__all__ = ["StopScanner"]


class StopScanner:
    """Feed the engine's text; get back what is certainly before every stop string. Text that
    may still be the start of a stop string is held back until the next piece settles it."""

    def __init__(self, stops: tuple[str, ...]) -> None:
        self.stops = tuple(s for s in stops if s)
        self.longest = max((len(s) for s in self.stops), default=0)
        self.firsts = frozenset(s[0] for s in self.stops)
        self.held = ""
        self.stopped = False
        self.found: str | None = None  # the stop string met (the earliest, then the first given)

    def feed(self, text: str) -> str:
        """The text now known to come before any stop; sets ``stopped`` at a stop string."""
        if self.stopped:
            return ""
        if not self.stops:
            return text
        buffer = self.held + text
        cut = min((i for i in (buffer.find(s) for s in self.stops) if i >= 0), default=-1)
        if cut >= 0:
            self.stopped = True
            self.found = next(s for s in self.stops if buffer.find(s) == cut)
            self.held = ""
            return buffer[:cut]
        keep = self._tail(buffer)
        self.held = buffer[len(buffer) - keep :] if keep else ""
        return buffer[: len(buffer) - keep]

    def finish(self) -> str:
        """The text held back when the engine ended (it was no stop string after all)."""
        held, self.held = self.held, ""
        return "" if self.stopped else held

    def _tail(self, buffer: str) -> int:
        """The length of the longest end of ``buffer`` that begins a stop string."""
        window = buffer[len(buffer) - self.longest + 1 :] if self.longest > 1 else ""
        if not any(first in window for first in self.firsts):
            return 0  # no stop string can start there: the common case, decided in C
        for size in range(min(self.longest - 1, len(buffer)), 0, -1):
            tail = buffer[len(buffer) - size :]
            if any(s.startswith(tail) for s in self.stops):
                return size
        return 0
