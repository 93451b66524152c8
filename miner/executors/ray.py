"""The Ray executor: every unit of work (a project, a batch of its candidates, its compounds) is a Ray task.

    miner crawl --executor ray                      # a local Ray instance of --jobs CPUs
    miner crawl --executor ray --address HOST:6379  # an existing cluster (or "auto")

Each task builds its own sandbox on the node it lands on (fetching and building under the unit's
root, the `--cache-dir` of that node, `~` being the worker's home) and returns its events (the
project seen, healthy states, candidates with their task records and task folders' files) to the
driver, which alone writes the store: it records them as it records the local executor's, a
project's batches in their order, with the per-project limits and the duplicate-symptom refusal,
so both executors give the same store. A task needs one CPU; a Docker-backend task also needs one
unit of the custom resource `docker`, which only nodes with an engine advertise (`ray start
--resources '{"docker": 4}'`; a local instance advertises it when an engine answers here). A task
whose worker or node dies is retried on another node by Ray (up to RETRIES times): nothing of it
was recorded, and its candidates' content ids make a retry add nothing twice. Progress lines
reach the driver through a queue actor pinned to the driver's node, prefixed with the node's id.

Needs `pip install 'miner[ray]'` on the driver and miner installed on every node; folder sources
must be readable at the same path on every node (git and PyPI sources are fetched by each node).
"""

from __future__ import annotations

import logging
import queue as queues
import time
from typing import Any

from miner.executors.base import ExecutorError, Finish, Say, Waiting
from miner.mine import Emit, ProjectReport, Unit, UnitResult, mine_unit

RETRIES = 3  # times Ray runs a unit again after its worker or node died
POLL_SECONDS = 0.5


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ExecutorError("the Ray executor needs Ray: pip install 'miner[ray]'") from None
    return ray


def run_unit(unit: Unit, progress: Any) -> UnitResult:
    """One unit on a Ray worker: events buffered into the result, progress lines to the queue."""
    import ray

    node = ray.get_runtime_context().get_node_id()[:8]

    def say(text: str) -> None:
        try:
            progress.put_nowait((unit.label, f"[{node}] {text}"))
        except Exception:  # progress is best effort: a full or gone queue must not fail the unit
            pass

    result = mine_unit(unit, None, say)
    result.report.node = node
    return result


class RayExecutor:
    def __init__(self, address: str | None = None, jobs: int = 1) -> None:
        self.address = address
        self.jobs = max(1, jobs)

    def _connect(self, ray: Any, docker: bool) -> bool:
        """Join the cluster at the address, or start a local instance; True when this call started Ray."""
        if ray.is_initialized():
            return False
        if self.address:
            try:
                ray.init(address=self.address, logging_level=logging.WARNING)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise ExecutorError(f"cannot join the Ray cluster at {self.address}: "
                                    f"{str(exc).strip().splitlines()[0] if str(exc).strip() else exc}") from None
            return True
        from miner.sandbox import docker_available

        resources = {"docker": float(self.jobs)} if docker and docker_available() else {}
        ray.init(num_cpus=self.jobs, resources=resources, include_dashboard=False, logging_level=logging.WARNING)
        return True

    def run(self, units: list[Unit], record: Emit, finish: Finish, say: Say) -> None:
        ray = _ray()
        docker = any(unit.backend == "docker" for unit in units)
        started = self._connect(ray, docker)
        try:
            self._check_docker(ray, docker)
            self._run(ray, units, finish, say)  # a remote unit streams nothing: its events come with its result
        finally:
            if started:
                ray.shutdown()

    @staticmethod
    def _check_docker(ray: Any, docker: bool) -> None:
        if docker and ray.cluster_resources().get("docker", 0) < 1:
            raise ExecutorError("no node of the Ray cluster advertises a `docker` resource: start the nodes that "
                                "have a Docker engine with `ray start ... --resources '{\"docker\": N}'`")

    def _run(self, ray: Any, units: list[Unit], finish: Finish, say: Say) -> None:
        from ray.util.queue import Queue
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
        progress = Queue(actor_options={"num_cpus": 0, "scheduling_strategy": here})
        remote = ray.remote(run_unit)
        pending: dict[Any, Unit] = {}
        waiting = Waiting(units)

        def start() -> None:
            # as many units as the cluster has CPUs now (nodes join and leave), so that the next
            # one is chosen here, in Waiting's order, not by Ray's queue
            if not waiting:
                return
            capacity = max(1, int(ray.cluster_resources().get("CPU", 1)))
            while waiting and len(pending) < capacity:
                unit = waiting.pop()
                resources = {"docker": 1.0} if unit.backend == "docker" else {}
                ref = remote.options(num_cpus=1, resources=resources, max_retries=RETRIES, retry_exceptions=False,
                                     name=f"miner:{unit.label}").remote(unit, progress)
                pending[ref] = unit
                say(unit.label, "queued on the Ray cluster")

        start()
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=POLL_SECONDS)
            _drain(progress, say)
            for ref in ready:
                unit = pending.pop(ref)
                # the driver records the result's events: in batch order, with its limits
                for more in finish(unit, self._result(ray, ref, unit)):
                    waiting.push(more)
            start()
        _drain(progress, say)

    @staticmethod
    def _result(ray: Any, ref: Any, unit: Unit) -> UnitResult:
        """The unit's result, or a skip naming why Ray gave up on it (its retries spent)."""
        try:
            return ray.get(ref)
        except ray.exceptions.RayError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            now = time.time()
            report = ProjectReport(source=unit.source.raw, repo=unit.source.location, status="skipped",
                                   reason=f"ray: {type(exc).__name__}: {first[:200]}", started=now, ended=now)
            return UnitResult(report)


def _drain(progress: Any, say: Say) -> None:
    while True:
        try:
            label, text = progress.get_nowait()
        except queues.Empty:
            return
        except Exception:  # the queue actor is gone (cluster shutting down): no more progress
            return
        say(label, text)
