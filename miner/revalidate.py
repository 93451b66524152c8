"""Re-validation: is an exported dataset still what it was when it was exported?

Images and oracles decay: a base image is rebuilt, a pinned wheel disappears or changes on the
index, a Debian package moves. `revalidate(DIR)` rebuilds every task of a Harbor dataset (no
cached layer) and reruns the untouched environment (must score 0), the reference fix (must score
1) and the solver's view (miner.check), and compares each task folder with the digest its
dataset.toml names (a folder edited since the export is reported, not run). The verdicts go to
DIR/checks.json and into the dataset card (miner.export.dataset), decayed tasks named with why.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from miner.check import CheckResult, check_tasks
from miner.export.dataset import CHECKS, MANIFEST, dataset_tasks, read_manifest, task_digest, write_card


@dataclass
class Verdict:
    """One task's re-check."""

    name: str
    folder: str
    ok: bool
    reason: str  # why it decayed ("" when it did not)
    checked: str  # UTC, ISO 8601
    build_seconds: float = 0.0
    nop_reward: float | None = None
    oracle_reward: float | None = None


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def verdict(result: CheckResult, when: str) -> Verdict:
    return Verdict(name=result.name or result.path.name, folder=result.path.name, ok=result.ok,
                   reason=result.reason, checked=when, build_seconds=result.build_seconds,
                   nop_reward=result.nop.reward if result.nop else None,
                   oracle_reward=result.oracle.reward if result.oracle else None)


def changed_folders(out: Path) -> dict[str, str]:
    """Task folders whose content is not the digest dataset.toml lists, or that it does not list,
    by task name, with why."""
    listed = {t["name"]: t["digest"] for t in read_manifest(out).get("tasks", [])}
    changed = {}
    for task in dataset_tasks(out):
        if task.name not in listed:
            changed[task.name] = f"{task.folder.name} is not listed in {MANIFEST}"
        elif task_digest(task.folder) != listed[task.name]:
            changed[task.name] = (f"{task.folder.name} was changed since the export (its digest is not the one "
                                  f"{MANIFEST} lists): not run")
    return changed


def revalidate(out: Path, jobs: int = 1, client=None,  # noqa: ANN001 - a docker client
               on_verdict: Callable[[Verdict], None] | None = None) -> list[Verdict]:
    """Re-check every task of the dataset in `out`; write checks.json and the card; the verdicts."""
    if not (out / MANIFEST).is_file():
        raise ValueError(f"{out} holds no {MANIFEST}: export it with `miner export --format harbor --dataset ORG/NAME`")
    when = now()
    changed = changed_folders(out)
    verdicts = [Verdict(name=name, folder=name.split("/")[-1], ok=False, reason=why, checked=when)
                for name, why in changed.items()]
    for found in verdicts:
        if on_verdict is not None:
            on_verdict(found)
    to_run = [t.folder for t in dataset_tasks(out) if t.name not in changed]

    def report(result: CheckResult) -> None:
        if on_verdict is not None:
            on_verdict(verdict(result, when))

    verdicts += [verdict(r, when) for r in check_tasks(to_run, on_result=report, client=client, jobs=jobs,
                                                       rebuild=True)]
    verdicts.sort(key=lambda v: v.name)
    (out / CHECKS).write_text(json.dumps({v.name: asdict(v) for v in verdicts}, indent=1, sort_keys=True) + "\n")
    write_card(out)
    return verdicts
