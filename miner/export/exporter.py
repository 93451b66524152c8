"""The bulk export: stored tasks -> one registered format (miner.export.registry) in a folder.

    summary = export_tasks(store, select_tasks(store, ["deps"]), "harbor", Path("out"), ExportOptions())

Each task's project is fetched once at its mined commit; a task that cannot be exported is
reported with its reason, not fatal; rerunning leaves existing folders (or records) alone unless
options.overwrite.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from miner.evidence import evidence_filter
from miner.export.common import (
    ExportError,
    ExportOptions,
    ManifestCache,
    PipForwarding,
    SourceLoader,
    place_tree,
    task_slug,
)
from miner.export.registry import RecordsFormat
from miner.export.registry import get as get_format
from miner.models import Task


def select_tasks(store, types: Iterable[str] = (), repo: str | None = None,
                 difficulty: str | None = None, limit: int | None = None, evidence: Iterable[str] = (),
                 offline: bool = False, type_ids: set[str] | None = None) -> list[Task]:
    """Stored tasks matching any of the types (exact id or family), the repo and difficulty, naming one
    of the evidence kinds (when given) and, with `offline`, repairable without network; oldest first.

    `type_ids` (what a category filter maps to: miner.catalogue.types_in_categories) keeps the
    tasks of one of those types, or compound tasks with a part of one of them.
    """
    chosen: dict[str, Task] = {}
    keep = evidence_filter(evidence, offline)
    for type_spec in list(types) or [None]:
        for task in store.list_tasks(type_spec, repo=repo, difficulty=difficulty):
            if keep(task):
                chosen.setdefault(task.id, task)
    if type_ids is not None:
        chosen = {k: t for k, t in chosen.items() if set(t.type_ids) & type_ids}
    ordered = sorted(chosen.values(), key=lambda t: (t.created, t.id))
    return ordered[:limit] if limit is not None else ordered


# -- the bulk export ------------------------------------------------------------------------------


@dataclass
class TaskOutcome:
    task_id: str
    name: str
    status: str  # written | updated | unchanged | kept | failed
    reason: str = ""
    seconds: float = 0.0
    bytes: int = 0


@dataclass
class ExportSummary:
    format: str
    out: Path
    outcomes: list[TaskOutcome] = field(default_factory=list)
    seconds: float = 0.0
    images_built: int = 0
    dataset: Path | None = None  # what the format wrote about the whole folder (a dataset's manifest or rows)

    def count(self, status: str) -> int:
        return sum(1 for o in self.outcomes if o.status == status)

    @property
    def failed(self) -> list[TaskOutcome]:
        return [o for o in self.outcomes if o.status == "failed"]


Progress = Callable[[TaskOutcome], None]


def tree_bytes(files: dict[str, bytes | str]) -> int:
    return sum(len(v) for v in files.values())


def export_tasks(store, tasks: list[Task], fmt: str, out: Path, options: ExportOptions,
                 on_task: Progress | None = None, client=None) -> ExportSummary:
    """Export tasks to `out` in one format; a task that cannot be exported is reported, not fatal."""
    form = get_format(fmt)
    start = time.monotonic()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    summary = ExportSummary(format=fmt, out=out)
    cache = Path(options.cache_dir) if options.cache_dir else store.cache_root
    loader = SourceLoader(store, cache)
    pip = PipForwarding.from_host()
    manifests = ManifestCache(cache / "export-manifests", client)
    records: list[dict] = []
    for task in tasks:
        began = time.monotonic()
        outcome = TaskOutcome(task_id=task.id, name=task_slug(task, options.variant), status="failed")
        try:
            if isinstance(form, RecordsFormat):
                record = form.task_record(loader.load(task, options.variant), options)
                records.append(record)
                outcome.status, outcome.bytes = "written", len(json.dumps(record))
            elif (dest := form.task_root(out) / outcome.name).exists() and not options.overwrite:
                outcome.status = "kept"
            else:
                files = form.task_files(loader.load(task, options.variant), options, pip, manifests)
                outcome.status = place_tree(dest, files, options.overwrite)
                outcome.bytes = tree_bytes(files)
        except ExportError as exc:
            outcome.reason = str(exc)
        outcome.seconds = round(time.monotonic() - began, 3)
        summary.outcomes.append(outcome)
        if on_task is not None:
            on_task(outcome)
    if isinstance(form, RecordsFormat):
        written = form.write_records(out / form.file_name, records, options.overwrite)
        for outcome in summary.outcomes:
            outcome.status = written.get(f"{options.org}__{outcome.name}", outcome.status)
    else:
        summary.dataset = form.finish(out, options)
    summary.images_built = manifests.built
    summary.seconds = round(time.monotonic() - start, 3)
    return summary
