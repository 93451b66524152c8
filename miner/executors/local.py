"""The local executor: units in a pool of `jobs` threads of this process (the default).

A project unit streams its events to the driver as it goes (so a crawl killed mid-project keeps
what it recorded); a batch unit buffers them, for the driver records batches in their order.
"""

from __future__ import annotations

from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

from miner.executors.base import Finish, Say, Waiting
from miner.mine import Emit, Unit, UnitResult, mine_unit


class LocalExecutor:
    def __init__(self, jobs: int = 1) -> None:
        self.jobs = max(1, jobs)

    def run(self, units: list[Unit], record: Emit, finish: Finish, say: Say) -> None:
        with ThreadPoolExecutor(max_workers=self.jobs, thread_name_prefix="miner-unit") as pool:
            pending: dict[Future[UnitResult], Unit] = {}
            waiting = Waiting(units)

            def start() -> None:
                while waiting and len(pending) < self.jobs:
                    unit = waiting.pop()
                    emit = record if unit.batch is None else None
                    pending[pool.submit(mine_unit, unit, emit, lambda text, u=unit: say(u.label, text))] = unit

            start()
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in sorted(done, key=lambda f: _order(pending[f])):
                    unit = pending.pop(future)
                    for more in finish(unit, future.result()):
                        waiting.push(more)
                start()


def _order(unit: Unit) -> tuple[int, int]:
    return unit.index, unit.batch.number if unit.batch is not None else 0
