"""Where a candidate's (or a project's) wall time goes: named phases, timed exclusively.

    clock = Clock()
    with clock.phase("broken"):
        with clock.phase("probes"):   # a nested phase's time is not counted in its parent's
            ...
    clock.seconds   # {"broken": 1.2, "probes": 0.3}

Phases are exclusive, so their sum is the wall time spent inside them. A clock may be shared by
threads (a candidate's replay runs beside its fix): each thread keeps its own nesting.
This module imports nothing of miner, so any stage may use it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

# The phases of one candidate, in the order they happen (bench/overhead.py prints them so).
CANDIDATE_PHASES = ("fork", "break", "protected", "predicted", "broken", "probes", "scan", "fix", "fixed",
                    "replay-fork", "replay-break", "replay", "close", "task", "store")
# The phases of one project before its candidates.
PROJECT_PHASES = ("fetch", "build", "healthy", "graph", "choose", "manifest")


class Clock:
    """Accumulates seconds per phase name; nested phases are subtracted from their parent."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._lock = threading.Lock()
        self._local = threading.local()

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        stack: list[float] = self._local.__dict__.setdefault("children", [])
        stack.append(0.0)  # time spent in this phase's nested phases
        start = time.monotonic()
        try:
            yield
        finally:
            elapsed = time.monotonic() - start
            nested = stack.pop()
            if stack:
                stack[-1] += elapsed
            self.add(name, elapsed - nested)

    def share(self, name: str, seconds: float) -> None:
        """Count `seconds`, measured inside the current phase by other means, as phase `name`."""
        stack: list[float] = self._local.__dict__.setdefault("children", [])
        if stack:
            stack[-1] += seconds
        self.add(name, seconds)

    def add(self, name: str, seconds: float) -> None:
        with self._lock:
            self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def rounded(self, digits: int = 3) -> dict[str, float]:
        with self._lock:
            return {name: round(value, digits) for name, value in self.seconds.items()}


def merge(into: dict[str, float], more: dict[str, float]) -> dict[str, float]:
    """Add one phase table to another (in place; returned for chaining)."""
    for name, value in more.items():
        into[name] = into.get(name, 0.0) + value
    return into


def timed(clock: Clock | None, name: str) -> contextlib.AbstractContextManager[None]:
    """`clock.phase(name)`, or nothing when there is no clock."""
    return clock.phase(name) if clock is not None else contextlib.nullcontext()
