"""The executor interface: what runs the crawl's units of work (miner.mine.Unit) and hands their results back.

    executor.run(units, record, finish, say)

`run` returns when every unit, and every unit `finish` returned in turn (a project's batches),
has finished; it hands units to its workers in the order of `Waiting`. `record(event)` is how a
unit running in this process streams its events to the driver (a remote unit returns them with
its result instead); `finish(unit, result)` is called in the driver's thread, one result at a
time, and returns further units; `say(project, text)` is the progress display.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Protocol

from miner.mine import Emit, Unit, UnitResult

Finish = Callable[[Unit, UnitResult], list[Unit]]
Say = Callable[[str, str], None]


class Executor(Protocol):
    def run(self, units: list[Unit], record: Emit, finish: Finish, say: Say) -> None: ...


class ExecutorError(Exception):
    """The executor cannot run here (Ray not installed, no cluster at the address, no Docker node)."""


class Waiting:
    """Units waiting for a worker, the work of projects already begun first.

    A begun project's batches and its compound unit go before the next project's first unit
    (then by project, then by batch), so projects end in turn instead of all at the end: a
    project's wall time is its own rather than spread over the whole crawl, and a crawl stopped
    midway leaves whole projects behind, not many half-mined ones. Executors keep only as many
    units running as they have workers and take the next one from here.
    """

    def __init__(self, units: list[Unit]) -> None:
        self._heap: list[tuple[tuple[int, int, int], int, Unit]] = []
        self._pushed = 0
        for unit in units:
            self.push(unit)

    def push(self, unit: Unit) -> None:
        heapq.heappush(self._heap, (_rank(unit), self._pushed, unit))
        self._pushed += 1

    def pop(self) -> Unit:
        return heapq.heappop(self._heap)[2]

    def __len__(self) -> int:
        return len(self._heap)


def _rank(unit: Unit) -> tuple[int, int, int]:
    if unit.batch is None:
        return 1, unit.index, 0
    return 0, unit.index, unit.batch.number
