"""The crawl: repos.txt -> fetch -> build -> healthy state -> graph -> inverter -> validator -> store.

`crawl` is the one function behind `miner crawl`. Each project is mined independently (in
parallel with --jobs); every candidate has a content-hash id, so a crawl that was interrupted
(even by kill -9) resumes by skipping what the store already holds, and crawling twice adds
nothing. A project that fails to fetch, build or test is skipped with its reason recorded.
"""

from __future__ import annotations

import time
import traceback
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterator

import networkx as nx

from miner import __version__
from miner import graph as graphs
from miner.catalogue import load_catalogue, select_types
from miner.healthy import RAW_KINDS, SkipProject, measure_project
from miner.install import build_spec
from miner.inverters.procedural import ProceduralInverter, enumerate_targets
from miner.inverters.system import targets_beneath
from miner.models import content_id, Candidate, HealthyState, Inversion, InversionType, Project, Source, Target, Task
from miner.projectfiles import test_file_of
from miner.sandbox import get_backend
from miner.sandbox.base import Backend, BuildError, SandboxError
from miner.sources import FetchError, fetch, parse_repos
from miner.store import Store
from miner.validate import Context, healthy_manifest, validate

Phase = Callable[[str, str], None]  # (project name, phase description)
ADAPTIVE_POOL = 3  # graph selection renders budget x this many candidates to choose from


@dataclass
class CrawlOptions:
    types: str | None = None  # comma list of exact ids or families
    max_tasks_per_repo: int | None = None
    budget: int | None = None  # candidates tried per project
    seed: int = 0
    jobs: int = 1
    backend: str = "local"
    select: str = "graph"  # graph | random
    timeout: float = 600.0  # per test-suite run
    system: bool = True  # ask the backend what lies beneath the project: system and service targets (Docker)


@dataclass
class ProjectReport:
    source: str
    repo: str = ""
    status: str = "mined"  # mined | skipped
    reason: str = ""
    tried: int = 0
    validated: int = 0
    resumed: int = 0  # candidates already in the store
    suite_runs: float = 0.0
    suite_seconds: float = 0.0
    seconds: float = 0.0
    by_type: dict[str, list[int]] = field(default_factory=dict)  # type -> [tried, validated]


@dataclass
class CrawlReport:
    projects: list[ProjectReport]
    errors: list[str]
    seconds: float


def crawl(repos: Path, store: Store, options: CrawlOptions, on_phase: Phase | None = None) -> CrawlReport:
    """Mine every source of a repos file; malformed lines are reported and the rest still run."""
    start = time.monotonic()
    sources, errors = parse_repos(repos)
    catalogue = select_types(load_catalogue(), options.types)
    backend = get_backend(options.backend)
    types = [t for t in catalogue if backend.name in t.backends]
    phase = on_phase or (lambda name, text: None)
    with ThreadPoolExecutor(max_workers=max(1, options.jobs)) as pool:
        reports = list(pool.map(lambda s: mine_source(s, store.root, backend, types, options, phase), sources))
    return CrawlReport(reports, [str(e) for e in errors], time.monotonic() - start)


def mine_source(source: Source, root: Path, backend: Backend, types: list[InversionType],
                options: CrawlOptions, phase: Phase) -> ProjectReport:
    """Mine one source, recording a skip with its reason instead of raising."""
    store = Store(root)  # one connection per worker thread
    report, start = ProjectReport(source=source.raw, repo=source.location), time.monotonic()
    key, commit = content_id("unfetched", source.raw), ""
    try:
        phase(source.name, "fetching")
        project = fetch(source, store.root / "cache" / "sources")
        key, report.repo, commit = project.key, project.repo, project.commit
        store.record_project(key, project.repo, commit, source.raw, source.origin, "running")
        _mine_project(project, store, backend, types, options, report, lambda text: phase(source.name, text))
    except (FetchError, BuildError, SkipProject, SandboxError) as exc:
        report.status, report.reason = "skipped", _reason(exc)
    except Exception as exc:  # a bug met on one project must not end the whole crawl
        report.status = "skipped"
        report.reason = f"internal error: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        traceback.print_exc()
    report.seconds = time.monotonic() - start
    store.record_project(key, report.repo, commit, source.raw, source.origin, report.status, report.reason,
                         seconds=report.seconds)
    store.close()
    phase(source.name, f"mined: {report.validated} tasks" if report.status == "mined" else f"skipped: {report.reason[:70]}")
    return report


def _reason(exc: Exception) -> str:
    kind = {FetchError: "fetch failed", BuildError: "build failed"}.get(type(exc), "")
    text = str(exc).strip()
    log = getattr(exc, "log", "")
    if log:
        text += " | " + " / ".join(log.strip().splitlines()[-3:])
    return f"{kind}: {text}" if kind else text


def _mine_project(project: Project, store: Store, backend: Backend, types: list[InversionType],
                  options: CrawlOptions, report: ProjectReport, phase: Callable[[str], None]) -> None:
    phase("building")
    spec = build_spec(project, backend=backend.name)
    env = backend.build(project, spec, store.root / "work" / project.key)
    phase("recording healthy state")
    timeout = float(project.source.overrides.get("timeout", options.timeout))
    state, observation = measure_project(backend, env, project, spec, timeout, system=options.system)
    test_files = {f for f in map(test_file_of, state.outcomes) if f}
    extra_targets = targets_beneath(observation, project.path, test_files)
    extra = backend.run_derived_probes if any(p.kind not in RAW_KINDS for p in state.probes) else None
    report.suite_seconds = state.suite_seconds
    store.record_project(project.key, project.repo, project.commit, project.source.raw, project.source.origin,
                         "running", healthy=state)
    phase("choosing inversion points")
    graph = graphs.build_graph(project, state)
    candidates = choose_candidates(project, state, types, options, graph, extra_targets)
    ctx = Context(backend, env, state, healthy_manifest(backend, env), timeout=timeout, extra=extra)
    by_id = {t.id: t for t in types}
    total = len(candidates) if options.budget is None else min(options.budget, len(candidates))
    for number, inversion in enumerate(_adaptive(candidates, options, lambda inv: store.candidate_rule(
            inv.id_for(project))), 1):
        if options.max_tasks_per_repo is not None and report.validated >= options.max_tasks_per_repo:
            break
        if number > total:
            break
        phase(f"candidate {number}/{total}: {inversion.type_id} on {inversion.target.name}")
        _try(ctx, project, store, inversion, by_id[inversion.type_id], report, graph)


def _adaptive(candidates: list[Inversion], options: CrawlOptions,
              rule_of: Callable[[Inversion], str | None]) -> Iterator[Inversion]:
    """The candidates in order; with graph selection, a target whose break reached no test
    (`no-f2p`: the prediction was wrong for it) has its remaining candidates moved to the end.

    The rule of each candidate is read from the store after it was tried (or when a resumed
    crawl finds it there), so a resumed crawl takes the same course.
    """
    queue, deferred, missed = deque(candidates), deque(), set()
    while queue or deferred:
        from_queue = bool(queue)
        inversion = queue.popleft() if from_queue else deferred.popleft()
        if from_queue and options.select == "graph" and inversion.target.key in missed:
            deferred.append(inversion)
            continue
        yield inversion
        if rule_of(inversion) == "no-f2p":
            missed.add(inversion.target.key)


def choose_candidates(project: Project, state: HealthyState, types: list[InversionType],
                      options: CrawlOptions, graph: nx.DiGraph | None = None,
                      extra_targets: list[Target] | None = None) -> list[Inversion]:
    """Graph-guided or blind (random) choice of (target, type) candidates, in a deterministic order.

    `extra_targets` are the backend's (system libraries, services): kinds the graph models
    (syslib, debpkg) are selected like the others, the rest are tried after them, unpredicted.
    """
    inverter = ProceduralInverter(types, seed=options.seed)
    targets = enumerate_targets(project, state) + list(extra_targets or [])
    if options.select == "random":
        return inverter.candidates(project, state, targets=targets, budget=options.budget, shuffle=True)
    graph = graph if graph is not None else graphs.build_graph(project, state)
    modelled = [t for t in targets if t.kind not in graphs.UNMODELLED_KINDS]
    chosen = graphs.select_targets(graph, state, modelled, budget=None, seed=options.seed)
    radius = {target.key: (predicted, depth) for target, predicted, depth in chosen}
    ordered = [target for target, _, _ in chosen] + [t for t in targets if t.kind in graphs.UNMODELLED_KINDS]
    # A larger pool than the budget: targets that miss give their turn to the next ones (_adaptive).
    pool = None if options.budget is None else options.budget * ADAPTIVE_POOL
    candidates = inverter.candidates(project, state, targets=ordered, budget=pool)
    for inversion in candidates:
        predicted, depth = radius.get(inversion.target.key, (None, None))
        inversion.predicted_f2p = sorted(predicted) if predicted is not None else None
        inversion.graph_depth = depth
    return candidates


def _try(ctx: Context, project: Project, store: Store, inversion: Inversion, itype: InversionType,
         report: ProjectReport, graph: nx.DiGraph | None = None) -> None:
    cid = inversion.id_for(project)
    counts = report.by_type.setdefault(inversion.type_id, [0, 0])
    if store.has_candidate(cid):
        report.resumed += 1
        return
    candidate = validate(ctx, inversion, whole_suite_ok=itype.whole_suite)
    report.tried += 1
    counts[0] += 1
    report.suite_runs += candidate.suite_runs
    if candidate.status == "validated":
        task = make_task(project, ctx.state, candidate, itype, ctx.backend.name, graph)
        store.add_task(task, task_files(task, ctx.state, candidate))
        report.validated += 1
        counts[1] += 1
    store.record_candidate(project.key, candidate)


def make_task(project: Project, state: HealthyState, cand: Candidate, itype: InversionType, backend: str,
              graph: nx.DiGraph | None = None) -> Task:
    """A validated candidate becomes a task: instruction from the symptom, difficulty from the graph.

    The stored depth is measured from the observed F2P tests down to the broken node (the
    selection's depth was over the predicted radius), whichever way the target was chosen.
    """
    from miner.instruction import write_instruction

    inv = cand.inversion
    if graph is not None:
        inv.graph_depth = graphs.depth(graph, inv.target, cand.f2p)
    level, score = graphs.difficulty(inv.graph_depth, len(cand.f2p), inv.family)
    task = Task(
        id=cand.id, repo=project.repo, commit=project.commit, source=project.source, type_id=inv.type_id,
        family=inv.family, target=inv.target, summary=inv.summary, break_script=inv.break_script,
        fix_script=inv.fix_script, f2p=cand.f2p, p2p=cand.p2p, predicted_f2p=inv.predicted_f2p,
        difficulty=level, difficulty_score=score, graph_depth=inv.graph_depth, whole_suite=itype.whole_suite,
        test_command=state.test_command, probes=[p for p in state.probes if p.id in set(cand.f2p + cand.p2p)],
        protected={p: state.file_hashes[p] for p in state.protected}, suite_seconds=state.suite_seconds,
        backend=backend, created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )
    task.instruction = write_instruction(task, cand, state)
    return task


def task_files(task: Task, state: HealthyState, cand: Candidate) -> dict[str, str]:
    """The files of a task folder besides task.json."""
    import json

    files = {
        "break.sh": task.break_script,
        "fix.sh": task.fix_script,
        "instruction.md": task.instruction,
        "healthy.json": json.dumps({"outcomes": state.outcomes, "durations": state.durations}, indent=1),
        "broken.json": json.dumps({"outcomes": cand.broken, "messages": cand.broken_messages}, indent=1),
        "fixed.json": json.dumps({"outcomes": cand.fixed}, indent=1),
        "miner-version": __version__,
    }
    files.update({f"logs/{name}.log": text for name, text in cand.logs.items()})
    return files
