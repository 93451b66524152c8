"""The crawl: repos.txt -> fetch -> build -> healthy state -> graph -> inverter -> validator -> store.

`crawl` is the one function behind `miner crawl`: the driver. It gives each source to an executor
as a unit of work (miner.mine: a project, or a batch of a project's candidates), each unit with
what the store knows about its repository, and records what units report (events) in the store:
the driver alone writes it, whether units run in threads of this process (`--executor local`,
`--jobs N`) or as Ray tasks on a cluster (`--executor ray`). Every candidate has a content-hash
id, so a crawl that was interrupted (even by kill -9) resumes by skipping what the store already
holds, a unit retried after its worker died adds nothing twice, and crawling twice adds nothing.
A project that fails to fetch, build or test is skipped with its reason recorded.

Batches of one project are recorded in their order, whatever order they finish in: a task whose
symptom (family and F2P set) an earlier batch already stored is refused as `duplicate-symptom`
there, and single tasks beyond --max-tasks-per-repo are dropped unstored (compound tasks are
counted apart: --compound-budget limits them), so the result does not depend on the executor or
on timing. With --compound K, a project whose candidates are all
recorded gets one more unit, run by the executor like the others: the compound tasks stacked from
its stored tasks (miner.compound), recorded as its last batch.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from miner.catalogue import load_catalogue, select_types
from miner.compound import CompoundReport, eligible
from miner.disk import GB
from miner.gc import trim_cache
from miner.executors import get_executor
from miner.mine import (Batch, CandidateEvent, CrawlOptions, Event, Knowledge, ProjectEvent, ProjectReport, StateEvent,
                        Unit, UnitResult, Verdict, backend_for, choose_candidates, mine_unit)
from miner.models import Source, Task, content_id
from miner.sandbox import docker_available
from miner.sources import parse_repos, repo_name
from miner.store import Store
from miner.timing import merge

Phase = Callable[[str, str], None]  # (project name, phase description)

__all__ = ["CrawlOptions", "CrawlReport", "ProjectReport", "choose_candidates", "compound_stored", "crawl",
           "mine_source"]


@dataclass
class CrawlReport:
    projects: list[ProjectReport]
    errors: list[str]
    seconds: float


class Recorder:
    """The one writer of the store during a crawl: records units' events (safe across threads)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.lock = threading.Lock()

    def record(self, event: Event) -> None:
        with self.lock:
            self._record(event)

    def _record(self, event: Event) -> None:
        store = self.store
        if isinstance(event, ProjectEvent):
            store.record_project(event.project_key, event.repo, event.commit, event.source.raw, event.source.origin,
                                 "running", healthy=event.healthy)
        elif isinstance(event, StateEvent):
            store.record_state(event.state_key, event.state)
        elif isinstance(event, CandidateEvent):
            candidate = event.candidate
            start = time.monotonic()
            if event.task is not None:
                store.add_task(event.task, dict(event.files), project_key=event.project_key)
            candidate.timings["store"] = round(time.monotonic() - start, 3)  # its own row is not counted
            store.record_candidate(event.project_key, candidate)
        else:
            store.record_llm_calls(event.project_key, event.repo, event.calls)

    def finish(self, report: ProjectReport, source: Source) -> None:
        with self.lock:
            self.store.record_project(report.key, report.repo, report.commit, source.raw, source.origin,
                                      report.status, report.reason, seconds=report.seconds, timings=report.timings)


def knowledge(store: Store, source: Source, options: CrawlOptions, with_tasks: bool = False) -> Knowledge:
    """What a unit of this source needs from the store (its repository's verdicts, symptoms, states,
    and its tasks for the agent's goals or `with_tasks`)."""
    repo = repo_name(source)
    tasks = []
    if options.inverter != "procedural" or with_tasks:
        tasks = [task for task in store.list_tasks(repo=repo) if task.repo == repo]
    return Knowledge(verdicts={cid: Verdict(**v) for cid, v in store.verdicts(repo).items()},
                     symptoms=store.task_symptoms(repo), states=store.recorded_states(repo), tasks=tasks)


@dataclass
class _Project:
    """A project's units while they run: its report and the batches not recorded yet."""

    unit: Unit
    report: ProjectReport | None = None
    waiting: dict[int, UnitResult] = field(default_factory=dict)  # batch number -> result
    next_batch: int = 1
    batches: int = 0
    compounding: bool = False  # its compound unit was handed out (the last batch)


class _Driver:
    """Turns finished units into store rows and new units (a project's batches)."""

    def __init__(self, store: Store, options: CrawlOptions, recorder: Recorder, phase: Phase) -> None:
        self.store, self.options, self.recorder, self.phase = store, options, recorder, phase
        self.projects: dict[int, _Project] = {}
        self.stopped = False

    def units(self, sources: list[Source], types: list, root: str) -> list[Unit]:
        units = []
        for index, source in enumerate(sources):
            unit = Unit(index, source, self.options, types, knowledge(self.store, source, self.options), root)
            self.projects[index] = _Project(unit)
            units.append(unit)
        return units

    def finish(self, unit: Unit, result: UnitResult) -> list[Unit]:
        """Record a finished unit (its buffered events first); the units it leads to."""
        project = self.projects[unit.index]
        if unit.batch is not None:
            project.waiting[unit.batch.number] = result
            return self._record_batches(project)
        for event in result.events:
            self.recorder.record(event)
        project.report = result.report
        if result.report.status != "mined":
            self._close(project)
            return []
        if not result.batches:
            return self._after_candidates(project)
        project.batches = len(result.batches)
        fresh = knowledge(self.store, unit.source, self.options)  # what the project unit recorded included
        return [replace(unit, knowledge=fresh.model_copy(deep=True), batch=batch) for batch in result.batches]

    def _after_candidates(self, project: _Project) -> list[Unit]:
        """Once a project's candidates are recorded: its compound unit (--compound K, K of its stored
        tasks at this commit, fewer compounds stored than the budget) as one more batch, or its close."""
        report, k = project.report, self.options.compound
        assert report is not None
        if k > 1 and not project.compounding and report.status == "mined" and not self.stopped and \
                self.store.tried_of_type(report.repo, report.commit, f"compound/{k}") < self.options.compound_budget:
            fresh = knowledge(self.store, project.unit.source, self.options, with_tasks=True)
            parts = eligible([t for t in fresh.tasks if t.commit == report.commit],
                             {t.id: t for t in project.unit.types}, self.options.backend)
            if len(parts) >= k:
                project.compounding = True
                project.batches += 1
                batch = Batch(number=project.batches, of=project.batches, commit=report.commit, inversions=[],
                              budget=self.options.compound_budget, compounds=k)
                return [replace(project.unit, knowledge=fresh, batch=batch)]
            report.compound_note = f"{len(parts)} stored task(s) can be parts, {k} are needed"
            self.phase(project.unit.source.name, f"no compound: {report.compound_note}")
        self._close(project)
        return []

    def _record_batches(self, project: _Project) -> list[Unit]:
        """Record the batches that are next in order; after the last, what comes next."""
        report = project.report
        assert report is not None
        while project.next_batch in project.waiting:
            result = project.waiting.pop(project.next_batch)
            project.next_batch += 1
            kept = 0
            for event in result.events:
                kept += self._record_batch_event(report.validated + kept, result.report, event)
            _add_up(report, result.report)
        if project.next_batch > project.batches:
            return self._after_candidates(project)
        return []

    def _record_batch_event(self, stored: int, batch: ProjectReport, event: Event) -> int:
        """Record one event of a batch, `stored` single tasks of the project being stored already; 1
        when it stored a single task. A single task beyond --max-tasks-per-repo is not stored (nor
        its candidate: a later crawl with a higher limit tries it again); compound tasks are counted
        apart, limited by --compound-budget when they are made; a task whose symptom an earlier
        batch stored is refused."""
        if not isinstance(event, CandidateEvent) or event.task is None:
            self.recorder.record(event)
            return 0
        candidate, task = event.candidate, event.task
        limit = self.options.max_tasks_per_repo
        compound = candidate.inversion.family == "compound"
        refused = limit is not None and not compound and stored >= limit
        if not refused and self.store.symptoms(event.repo, event.commit).get(
                (task.family, frozenset(task.f2p)), 0) >= self.options.per_symptom:
            candidate.status, candidate.rule = "rejected", "duplicate-symptom"
            candidate.detail = (f"an earlier batch stored a {task.family} task of this project that fails exactly "
                                f"these {len(task.f2p)} tests")
            self.recorder.record(event.model_copy(update={"task": None, "files": {}}))
            refused = True
        if refused and compound:
            batch.compound_validated -= 1
        elif refused:
            batch.validated -= 1
            batch.by_type[candidate.inversion.type_id][1] -= 1
        if refused:
            return 0
        self.recorder.record(event)
        return int(not compound)

    def _close(self, project: _Project) -> None:
        report = project.report
        assert report is not None
        report.key = report.key or content_id("unfetched", project.unit.source.raw)
        report.seconds = max(report.seconds, report.ended - report.started)
        self.recorder.finish(report, project.unit.source)
        self.stopped = self.stopped or report.stopped
        name = project.unit.source.name
        compounds = f" and {report.compound_validated} compound" if report.compound_validated else ""
        self.phase(name, f"mined: {report.validated} tasks{compounds}" if report.status == "mined"
                   else f"skipped: {report.reason[:70]}")

    def reports(self) -> list[ProjectReport]:
        return [p.report or ProjectReport(source=p.unit.source.raw, status="skipped", reason="not run")
                for _, p in sorted(self.projects.items())]


def _add_up(report: ProjectReport, batch: ProjectReport) -> None:
    """A batch's counts and times added to its project's report."""
    report.tried += batch.tried
    report.validated += batch.validated
    report.resumed += batch.resumed
    report.compound_tried += batch.compound_tried
    report.compound_validated += batch.compound_validated
    report.compound_note = report.compound_note or batch.compound_note
    report.suite_runs += batch.suite_runs
    report.tokens += batch.tokens
    for type_id, (tried, validated) in batch.by_type.items():
        counts = report.by_type.setdefault(type_id, [0, 0])
        counts[0] += tried
        counts[1] += validated
    merge(report.timings, batch.timings)
    report.started = min(report.started, batch.started)
    report.ended = max(report.ended, batch.ended)
    if batch.status != "mined" and report.status == "mined":
        report.reason = f"a batch was skipped: {batch.reason}"


def crawl(repos: Path, store: Store, options: CrawlOptions, on_phase: Phase | None = None) -> CrawlReport:
    """Mine every source of a repos file; malformed lines are reported and the rest still run."""
    start = time.monotonic()
    sources, errors = parse_repos(repos)
    catalogue = select_types(load_catalogue(options.catalogue_dirs), options.types)
    if options.backend == "auto":
        options = replace(options, backend="docker" if docker_available() else "local")
    types = [t for t in catalogue if options.backend in t.backends]
    if options.executor == "local":
        backend_for(options.backend)  # no engine, no bwrap: one error now, not a skip per project
    phase = on_phase or (lambda name, text: None)
    recorder = Recorder(store)
    driver = _Driver(store, options, recorder, phase)
    root = str(options.cache_dir) if options.cache_dir is not None else str(store.root)
    units = driver.units(sources, types, root)
    get_executor(options).run(units, recorder.record, driver.finish, phase)
    if options.cache_dir is not None and options.cache_limit_gb is not None:  # this node's cache, whenever trimmed last
        trim_cache(options.cache_dir, int(options.cache_limit_gb * GB))
    return CrawlReport(driver.reports(), [str(e) for e in errors], time.monotonic() - start)


def mine_source(source: Source, root: Path, backend: object, types: list, options: CrawlOptions,
                phase: Phase) -> ProjectReport:
    """Mine one source into the store at `root` (in this process), recording like a crawl."""
    store = Store(root)
    try:
        options = replace(options, executor="local", jobs=1, backend=getattr(backend, "name", options.backend))
        recorder = Recorder(store)
        driver = _Driver(store, options, recorder, phase)
        units = driver.units([source], types, str(options.cache_dir or store.root))
        get_executor(options).run(units, recorder.record, driver.finish, phase)
        return driver.reports()[0]
    finally:
        store.close()


def compound_stored(store: Store, k: int, budget: int, seed: int = 0, repo: str | None = None,
                    timeout: float = 600.0, phase: Phase | None = None) -> list[CompoundReport]:
    """`miner compound`: compounds of the tasks already stored, built by the compound unit a crawl
    with --compound runs, here for each project, commit and backend of the store in turn. A
    project that cannot be prepared again is reported with its reason; the others still run."""
    phase = phase or (lambda name, text: None)
    firsts: dict[tuple[str, str, str], Task] = {}
    for task in store.list_tasks(repo=repo):
        firsts.setdefault((task.repo, task.commit, task.backend), task)
    recorder, catalogue, reports = Recorder(store), load_catalogue(), []
    for index, ((name, commit, backend), first) in enumerate(sorted(firsts.items())):
        options = CrawlOptions(backend=backend, timeout=timeout, seed=seed, compound=k, compound_budget=budget)
        batch = Batch(number=1, of=1, commit=commit, inversions=[], budget=budget, compounds=k)
        unit = Unit(index, first.source, options, [t for t in catalogue.values() if backend in t.backends],
                    knowledge(store, first.source, options, with_tasks=True), str(store.root), batch)
        reports.append(_compound_unit(unit, name, recorder, phase))
    return reports


def _compound_unit(unit: Unit, repo: str, recorder: Recorder, phase: Phase) -> CompoundReport:
    """Run one compound unit here, recording what it judged; its figures by rule."""
    refused: dict[str, int] = {}

    def emit(event: Event) -> None:
        if isinstance(event, ProjectEvent):  # the project's row and healthy state are the crawl's
            return
        if isinstance(event, CandidateEvent) and event.candidate.status != "validated":
            rule = event.candidate.rule or "?"
            refused[rule] = refused.get(rule, 0) + 1
        recorder.record(event)

    found = mine_unit(unit, emit, lambda text: phase(unit.source.name, text)).report
    return CompoundReport(repo=repo, tried=found.compound_tried, validated=found.compound_validated,
                          resumed=found.resumed, refused=refused, note=found.compound_note,
                          reason=found.reason if found.status != "mined" else "")
