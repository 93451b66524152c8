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
from pathlib import Path
from typing import Callable, Iterator

import networkx as nx

from miner import graph as graphs
from miner.catalogue import load_catalogue, select_types
from miner.compound import CompoundOptions, build_compounds
from miner.disk import LowDisk, check_free_space
from miner.healthy import RAW_KINDS, SkipProject
from miner.inverters.agent import AgentOptions, Agent, agent_type, make_goals
from miner.inverters.procedural import ProceduralInverter
from miner.inverters.targets import enumerate_targets
from miner.model_instruction import instruction_writer
from miner.models import content_id, Candidate, HealthyState, Inversion, InversionType, Project, Source, Target, Task
from miner.inverters.system import targets_beneath
from miner.prepare import PinError, Prepared, prepare
from miner.projectfiles import test_file_of
from miner.sandbox import get_backend
from miner.sandbox.base import Backend, BuildError, SandboxError
from miner.sources import FetchError, parse_repos
from miner.store import Store
from miner.tasks import make_task, task_files
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
    catalogue_dirs: tuple[Path, ...] = ()  # extra catalogue folders (their types override built-in ones)
    per_symptom: int = 1  # tasks kept per (family, F2P set) of a project (duplicate-symptom)
    min_free_gb: float = 5.0  # the crawl stops when the store's file system has less free (0: never)
    inverter: str = "procedural"  # procedural | agent | both
    agent: AgentOptions | None = None  # the model client and the agent's limits (agent, both)
    compound: int = 0  # stack this many validated inversions into compound tasks (0: none)
    compound_budget: int = 5  # compound candidates tried per project


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
    stopped: bool = False  # skipped because the disk ran low: the crawl as a whole failed
    tokens: int = 0  # model tokens spent by the agent (cache hits cost none)
    compound_tried: int = 0  # compound candidates (miner.compound)
    compound_validated: int = 0


@dataclass
class CrawlReport:
    projects: list[ProjectReport]
    errors: list[str]
    seconds: float


def crawl(repos: Path, store: Store, options: CrawlOptions, on_phase: Phase | None = None) -> CrawlReport:
    """Mine every source of a repos file; malformed lines are reported and the rest still run."""
    start = time.monotonic()
    sources, errors = parse_repos(repos)
    catalogue = select_types(load_catalogue(options.catalogue_dirs), options.types)
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
    fetched: list[Project] = []

    def on_project(project: Project) -> None:
        fetched.append(project)
        report.repo = project.repo
        store.record_project(project.key, project.repo, project.commit, source.raw, source.origin, "running")

    try:
        check_free_space(store.root, options.min_free_gb)
        prepared = prepare(source, backend, store, timeout=options.timeout, on_project=on_project,
                           say=lambda text: phase(source.name, text))
        _mine_project(prepared, store, types, options, report, lambda text: phase(source.name, text))
    except (FetchError, BuildError, SkipProject, SandboxError) as exc:
        report.status, report.reason = "skipped", _reason(exc)
    except LowDisk as exc:
        report.status, report.reason, report.stopped = "skipped", str(exc), True
    except Exception as exc:  # a bug met on one project must not end the whole crawl
        report.status = "skipped"
        report.reason = f"internal error: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        traceback.print_exc()
    report.seconds = time.monotonic() - start
    key, commit = (fetched[0].key, fetched[0].commit) if fetched else (content_id("unfetched", source.raw), "")
    store.record_project(key, report.repo, commit, source.raw, source.origin, report.status, report.reason,
                         seconds=report.seconds)
    store.close()
    phase(source.name, f"mined: {report.validated} tasks" if report.status == "mined" else f"skipped: {report.reason[:70]}")
    return report


def _reason(exc: Exception) -> str:
    kind = {FetchError: "fetch failed", PinError: "fetch failed", BuildError: "build failed"}.get(type(exc), "")
    text = str(exc).strip()
    log = getattr(exc, "log", "")
    if log:
        text += " | " + " / ".join(log.strip().splitlines()[-3:])
    return f"{kind}: {text}" if kind else text


def _mine_project(prepared: Prepared, store: Store, types: list[InversionType], options: CrawlOptions,
                  report: ProjectReport, phase: Callable[[str], None]) -> None:
    project, state, backend, env = prepared.project, prepared.state, prepared.backend, prepared.env
    timeout = float(project.source.overrides.get("timeout", options.timeout))
    extra = backend.run_derived_probes if any(p.kind not in RAW_KINDS for p in state.probes) else None
    report.suite_seconds = state.suite_seconds
    store.record_project(project.key, project.repo, project.commit, project.source.raw, project.source.origin,
                         "running", healthy=state)
    phase("choosing inversion points")
    test_files = {f for f in map(test_file_of, state.outcomes) if f}
    extra_targets = targets_beneath(state.system, project.path, test_files) if options.system else []
    graph = graphs.build_graph(project, state)
    procedural = options.inverter != "agent"
    candidates = choose_candidates(project, state, types, options, graph, extra_targets) if procedural else []
    ctx = Context(backend, env, state, healthy_manifest(backend, env), timeout=timeout, extra=extra,
                  symptoms=store.symptoms(project.repo, project.commit), per_symptom=options.per_symptom)
    by_id = {t.id: t for t in types}
    total = len(candidates) if options.budget is None else min(options.budget, len(candidates))
    for number, inversion in enumerate(_adaptive(candidates, options, lambda inv: store.candidate_rule(
            inv.id_for(project))), 1):
        if options.max_tasks_per_repo is not None and report.validated >= options.max_tasks_per_repo:
            break
        if number > total:
            break
        check_free_space(store.root, options.min_free_gb)
        name = f"candidate {number}/{total} {inversion.type_id} on {inversion.target.name}"
        phase(name)
        phase(f"{name}: {_result(_try(ctx, project, store, inversion, by_id[inversion.type_id], report, graph))}")
    if options.inverter in ("agent", "both") and options.agent is not None:
        _mine_with_agent(ctx, project, store, types, options, report, graph, extra_targets, phase)
    if options.compound > 1:
        phase(f"stacking {options.compound} validated inversions into compound tasks")
        found = build_compounds(ctx, project, store, graph, by_id, CompoundOptions(
            k=options.compound, budget=options.compound_budget, seed=options.seed), say=phase)
        report.compound_tried, report.compound_validated = found.tried, found.validated


def _mine_with_agent(ctx: Context, project: Project, store: Store, types: list[InversionType], options: CrawlOptions,
                     report: ProjectReport, graph: nx.DiGraph, extra_targets: list[Target],
                     phase: Callable[[str], None]) -> None:
    """The agent's candidates: one conversation per goal, each submission judged and stored like
    a procedural candidate, every model call recorded against the candidate it led to."""
    agent_options = options.agent
    assert agent_options is not None
    client, model = agent_options.client, agent_options.client.settings.model
    instruct = None
    if agent_options.instructions:
        instruct = instruction_writer(client, lambda call: store.record_llm_calls(
            project.key, project.repo, [{**call.row(), "purpose": "instruction"}]))
    # Goals see the tasks no model made: a rerun (or a resumed crawl) with the same seed then asks
    # the same questions, which the cache answers for free; the seed spreads the goals instead.
    mined = [task for task in store.list_tasks(repo=project.repo) if task.model is None]
    targets = enumerate_targets(project, ctx.state, extra_targets)
    goals = make_goals(project, ctx.state, graph, targets, types, mined, agent_options.settings.goals, options.seed)

    def judge(inversion: Inversion) -> Candidate:
        verdict = store.candidate_verdict(inversion.id_for(project))
        if verdict is not None:  # asked before (a resumed crawl): the stored verdict, not a new run
            report.resumed += 1
            return Candidate(id=inversion.id_for(project), repo=project.repo, commit=project.commit,
                             inversion=inversion, **verdict)
        return _try(ctx, project, store, inversion, agent_type(inversion), report, graph, model=model,
                    instruct=instruct)

    agent = Agent(client, ctx, project, graph, types, mined, agent_options.settings, judge=judge)
    for number, goal in enumerate(goals, 1):
        if options.max_tasks_per_repo is not None and report.validated >= options.max_tasks_per_repo:
            break
        if client.budget.exhausted:
            phase("agent: crawl token budget spent")
            break
        check_free_space(store.root, options.min_free_gb)
        phase(f"agent goal {number}/{len(goals)}: {goal.category} on {goal.target.name}")
        result = agent.run(goal)
        store.record_llm_calls(project.key, project.repo, [
            {**turn.call.row(), "goal": goal.id, "round": turn.round,
             "candidate_id": turn.candidate_id} for turn in result.turns])
        report.tokens += result.tokens


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
    targets = enumerate_targets(project, state, extra_targets or [])
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
         report: ProjectReport, graph: nx.DiGraph | None = None, model: str | None = None,
         instruct: Callable[[Task, Candidate, HealthyState], str] | None = None) -> Candidate | None:
    """Validate and store one candidate (None when the store already holds it)."""
    cid = inversion.id_for(project)
    counts = report.by_type.setdefault(inversion.type_id, [0, 0])
    if store.has_candidate(cid):
        report.resumed += 1
        return None
    candidate = validate(ctx, inversion, whole_suite_ok=itype.whole_suite)
    report.tried += 1
    counts[0] += 1
    report.suite_runs += candidate.suite_runs
    if candidate.status == "validated":
        task = make_task(project, ctx.state, candidate, itype, ctx.backend.name, graph)
        task.model, task.evidence = model, list(inversion.evidence)
        if instruct is not None:
            task.instruction = task.instructions["symptom"] = instruct(task, candidate, ctx.state)
        store.add_task(task, task_files(task, ctx.state, candidate))
        symptom = (task.family, frozenset(task.f2p))
        ctx.symptoms[symptom] = ctx.symptoms.get(symptom, 0) + 1
        report.validated += 1
        counts[1] += 1
    store.record_candidate(project.key, candidate)
    return candidate


def _result(candidate: Candidate | None) -> str:
    """A candidate's result in a few words, for the progress line."""
    if candidate is None:
        return "already in the store"
    return "validated" if candidate.status == "validated" else f"rejected ({candidate.rule})"

