"""The executor interface: what runs the crawl's units of work (miner.mine.Unit) and hands their results back.

    executor.run(units, record, finish, say)

`run` returns when every unit, and every unit `finish` returned in turn (a project's batches),
has finished. `record(event)` is how a unit running in this process streams its events to the
driver (a remote unit returns them with its result instead); `finish(unit, result)` is called in
the driver's thread, one result at a time, and returns further units; `say(project, text)` is the
progress display.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from miner.mine import Emit, Unit, UnitResult

Finish = Callable[[Unit, UnitResult], list[Unit]]
Say = Callable[[str, str], None]


class Executor(Protocol):
    def run(self, units: list[Unit], record: Emit, finish: Finish, say: Say) -> None: ...


class ExecutorError(Exception):
    """The executor cannot run here (Ray not installed, no cluster at the address, no Docker node)."""
