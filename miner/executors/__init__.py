"""Executors: what runs the crawl's units of work (miner.mine.Unit), and hands their results back.

    executor = get_executor(options)          # options.executor: "local" (default) or "ray"
    executor.run(units, record, finish, say)  # see miner.executors.base

local.py   a pool of --jobs threads of this process (the default)
ray.py     Ray tasks on a cluster (pip install 'miner[ray]')
"""

from __future__ import annotations

from miner.executors.base import Executor, ExecutorError, Finish, Say
from miner.mine import CrawlOptions

EXECUTORS = ("local", "ray")
__all__ = ["EXECUTORS", "Executor", "ExecutorError", "Finish", "Say", "get_executor"]


def get_executor(options: CrawlOptions) -> Executor:
    """The executor the options name."""
    if options.executor == "local":
        from miner.executors.local import LocalExecutor

        return LocalExecutor(options.jobs)
    if options.executor == "ray":
        from miner.executors.ray import RayExecutor

        return RayExecutor(options.address, options.jobs)
    raise ExecutorError(f"unknown executor {options.executor!r}; choose one of {', '.join(EXECUTORS)}")
