"""Mining one unit of work, with no store in reach: what it learns goes out as events.

A unit is a project (fetch, build, healthy state, graph, choice of candidates, then the
candidates) or, when a project has more candidates to try than `CrawlOptions.batch_size`, one
batch of its candidates (the project unit then only prepares and chooses, and hands the batches
back), or, with `CrawlOptions.compound`, the compound tasks stacked from a project's stored tasks
once its candidates are all recorded (a batch with `compounds` set: miner.compound). Whatever runs
a unit (a thread of this process, a Ray worker on another machine) gives it what the store knows
that it needs (`Knowledge`: verdicts of candidates already tried, the stored tasks' symptoms,
recorded healthy states) and gets back events (`Event`: the project seen, a healthy state
measured, a candidate judged with its task and task folder, model calls) that the driver alone
records, in order (miner.pipeline).

    result = mine_unit(unit, emit=recorder.record, say=lambda text: print(text))
    result.report     the ProjectReport of the unit
    result.batches    the candidate batches still to mine (a project unit that split)
    result.events     the events, when `emit` is None (a remote worker returns them)
"""

from __future__ import annotations

import fcntl
import math
import os
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import networkx as nx
from pydantic import BaseModel, ConfigDict, Field
from pydantic.dataclasses import dataclass as pydantic_dataclass

from miner import ecosystems
from miner import graph as graphs
from miner.compound import CompoundOptions, build_compounds
from miner.disk import GB, LowDisk, check_free_space
from miner.gc import USE_LOCK, trim_cache, trim_due
from miner.healthy import RAW_KINDS, SkipProject
from miner.inverters.agent import AgentOptions, Agent, agent_type, make_goals
from miner.inverters.procedural import ProceduralInverter
from miner.inverters.system import targets_beneath
from miner.inverters.targets import enumerate_targets
from miner.ladder import NEEDS_DIAGNOSIS, Rung, ladder_upto, measure_task
from miner.model_instruction import instruction_writer
from miner.models import (Candidate, HealthyState, Inversion, InversionType, Project, Source, Target, Task,
                          content_id)
from miner.prepare import PinError, Prepared, prepare
from miner.projectfiles import project_files, test_file_of
from miner.sandbox import get_backend
from miner.sandbox.base import Backend, BuildError, SandboxError
from miner.sources import FetchError
from miner.tasks import make_task, task_files
from miner.timing import Clock
from miner.validate import Context, healthy_manifest, validate

Say = Callable[[str], None]
ADAPTIVE_POOL = 3  # graph selection renders budget x this many candidates to choose from
DEFAULT_BATCH = 30  # candidates of one project mined as one unit; more are split into batches


BackendName = Literal["local", "docker", "auto"]
Selection = Literal["graph", "random"]
InverterName = Literal["procedural", "agent", "both"]
ExecutorName = Literal["local", "ray"]


# Validated when made (and by dataclasses.replace): a value outside its Literal is refused there.
@pydantic_dataclass(config=ConfigDict(arbitrary_types_allowed=True))
class CrawlOptions:
    types: str | None = None  # comma list of exact ids or families
    max_tasks_per_repo: int | None = None
    budget: int | None = None  # candidates tried per project
    seed: int = 0
    jobs: int = 1
    backend: BackendName = "local"
    select: Selection = "graph"
    timeout: float = 600.0  # per test-suite run
    system: bool = True  # ask the backend what lies beneath the project: system and service targets (Docker)
    catalogue_dirs: tuple[Path, ...] = ()  # extra catalogue folders (their types override built-in ones)
    per_symptom: int = 1  # tasks kept per (family, F2P set) of a project (duplicate-symptom)
    min_free_gb: float = 5.0  # the crawl stops when the store's file system has less free (0: never)
    inverter: InverterName = "procedural"
    agent: AgentOptions | None = None  # the model client and the agent's limits (agent, both)
    executor: ExecutorName = "local"  # local: a thread pool of `jobs`
    address: str | None = None  # the Ray cluster (None: a local instance)
    batch_size: int = DEFAULT_BATCH  # a project with more candidates to try is mined in batches of this many
    cache_dir: Path | None = None  # where units fetch and build (None: the store's cache/ and work/)
    cache_limit_gb: float | None = None  # the cache is trimmed to this after the crawl (None: left as it is)
    compound: int = 0  # stack this many validated inversions into compound tasks (0: none)
    compound_budget: int = 5  # compound candidates tried per project
    refuse_trivial: str | None = None  # refuse a task a blind repair up to this rung repairs (miner.ladder)


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
    compound_note: str = ""  # why no compound was tried, when none was
    timings: dict[str, float] = field(default_factory=dict)  # phases before the candidates (miner.timing)
    key: str = ""  # the project's key once fetched
    commit: str = ""
    started: float = 0.0  # epoch seconds: the project's wall time spans its units
    ended: float = 0.0
    node: str = ""  # where the unit ran (a Ray node id; "" in this process)


# -- what a unit is told, and what it tells ------------------------------------------------------


class Verdict(BaseModel):
    """A stored candidate's verdict (for a resumed crawl and the adaptive order)."""

    status: Literal["validated", "rejected"]
    rule: str | None = None
    detail: str = ""
    f2p: list[str] = Field(default_factory=list)


class Knowledge(BaseModel):
    """What the store knows about one repository that a unit needs, read before it starts."""

    verdicts: dict[str, Verdict] = Field(default_factory=dict)  # candidate id -> verdict
    symptoms: list[tuple[str, str, list[str]]] = Field(default_factory=list)  # (commit, family, F2P) of stored tasks
    states: dict[str, HealthyState] = Field(default_factory=dict)  # recorded healthy states by preparation key
    tasks: list[Task] = Field(default_factory=list)  # stored tasks (only for the agent's goals)

    def symptoms_of(self, commit: str) -> dict[tuple[str, frozenset[str]], int]:
        found: dict[tuple[str, frozenset[str]], int] = {}
        for at, family, f2p in self.symptoms:
            if at == commit:
                key = (family, frozenset(f2p))
                found[key] = found.get(key, 0) + 1
        return found


class _EventBase(BaseModel):
    project_key: str = ""
    repo: str = ""
    commit: str = ""


class ProjectEvent(_EventBase):
    """A project fetched (and, once measured, the healthy state it is mined with)."""

    kind: Literal["project"] = "project"
    source: Source
    healthy: HealthyState | None = None


class StateEvent(_EventBase):
    """A healthy state recorded under its preparation key."""

    kind: Literal["state"] = "state"
    state_key: str
    state: HealthyState


class CandidateEvent(_EventBase):
    """A judged candidate, with its task and task folder's files when validated."""

    kind: Literal["candidate"] = "candidate"
    candidate: Candidate
    task: Task | None = None
    files: dict[str, str] = Field(default_factory=dict)


class LlmEvent(_EventBase):
    """Model calls the agent made."""

    kind: Literal["llm"] = "llm"
    calls: list[dict[str, Any]] = Field(default_factory=list)


# One thing a unit learned, for the driver to record: each kind carries exactly its own fields.
Event = Annotated[ProjectEvent | StateEvent | CandidateEvent | LlmEvent, Field(discriminator="kind")]


Emit = Callable[[Event], None]


class Batch(BaseModel):
    """Candidates of one project (at one commit) mined as their own unit."""

    number: int  # 1.. in the project's candidate order
    of: int
    commit: str
    inversions: list[Inversion]
    budget: int  # candidates to try out of `inversions` (the rest are the adaptive pool)
    compounds: int = 0  # K > 0: no candidates, but up to `budget` compounds of K stored tasks


@dataclass
class Unit:
    """One piece of work: a project, or one batch of its candidates."""

    index: int  # the source's position in the repos file (reports keep that order)
    source: Source
    options: CrawlOptions
    types: list[InversionType]
    knowledge: Knowledge
    root: str  # where to fetch and build: the store root or the cache folder ("~" is the worker's home)
    batch: Batch | None = None

    @property
    def label(self) -> str:
        if self.batch is None:
            return self.source.name
        return f"{self.source.name} [{'compounds' if self.batch.compounds else f'{self.batch.number}/{self.batch.of}'}]"

    @property
    def backend(self) -> str:
        return self.options.backend


@dataclass
class UnitResult:
    report: ProjectReport
    batches: list[Batch] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)  # only when the unit buffered them (emit None)


# -- backends, one per process ---------------------------------------------------------------------

_BACKENDS: dict[str, Backend] = {}
_BACKENDS_LOCK = threading.Lock()


def backend_for(name: str) -> Backend:
    """The process's backend of that name (a unit's threads and the units of a worker share it)."""
    with _BACKENDS_LOCK:
        if name not in _BACKENDS:
            _BACKENDS[name] = get_backend(name)
        return _BACKENDS[name]


def spare_core(options: CrawlOptions) -> bool:
    """Whether a unit may use a second core (the healthy runs side by side, the replay beside the
    fix): threads of this process that leave half the machine's cores free. A Ray unit holds one
    CPU of its node, and keeps to it."""
    return options.executor == "local" and options.jobs * 2 <= (os.cpu_count() or 1)


# -- a unit ----------------------------------------------------------------------------------------


class _Recorded:
    """prepare()'s view of the store: recorded states from the knowledge, new ones as events."""

    def __init__(self, root: Path, knowledge: Knowledge, emit: Emit) -> None:
        self.root, self.knowledge, self.emit = root, knowledge, emit

    def recorded_state(self, key: str) -> HealthyState | None:
        return self.knowledge.states.get(key)

    def record_state(self, key: str, state: HealthyState) -> None:
        self.knowledge.states[key] = state
        self.emit(StateEvent(state_key=key, state=state))


def mine_unit(unit: Unit, emit: Emit | None = None, say: Say | None = None) -> UnitResult:
    """Mine one unit; a skip is reported with its reason, never raised. Events go to `emit` as
    they happen, or, when it is None, into the result."""
    buffered: list[Event] = []
    sink = emit or buffered.append
    say = say or (lambda text: None)
    report = ProjectReport(source=unit.source.raw, repo=unit.source.location, started=time.time())
    root = Path(os.path.expanduser(unit.root))
    fetched: list[Project] = []
    in_use: list[Any] = []

    def on_project(project: Project) -> None:
        in_use.append(_hold(root / "work" / project.key))
        fetched.append(project)
        report.repo, report.key, report.commit = project.repo, project.key, project.commit
        sink(ProjectEvent(project_key=project.key, repo=project.repo, commit=project.commit,
                   source=unit.source))

    batches: list[Batch] = []
    start, clock = time.monotonic(), Clock()
    try:
        root.mkdir(parents=True, exist_ok=True)
        check_free_space(root, unit.options.min_free_gb)
        backend = backend_for(unit.backend)
        commit = unit.batch.commit if unit.batch is not None else None
        prepared = prepare(unit.source, backend, _Recorded(root, unit.knowledge, sink), commit=commit,
                           timeout=unit.options.timeout, on_project=on_project, say=say, clock=clock,
                           parallel=spare_core(unit.options))
        batches = _mine_project(unit, prepared, root, sink, report, say, clock)
    except (FetchError, BuildError, SkipProject, SandboxError) as exc:
        report.status, report.reason = "skipped", _reason(exc)
    except LowDisk as exc:
        report.status, report.reason, report.stopped = "skipped", str(exc), True
    except Exception as exc:  # a bug met on one project must not end the whole crawl
        report.status = "skipped"
        report.reason = f"internal error: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        traceback.print_exc()
    finally:
        for handle in in_use:
            handle.close()
    report.seconds, report.ended = time.monotonic() - start, time.time()
    report.timings = clock.rounded()
    trim(unit.options, root)
    if not fetched:
        report.key = content_id("unfetched", unit.source.raw)
    return UnitResult(report, batches, buffered if emit is None else [])


def _hold(workspace: Path) -> Any:
    """A shared lock on a workspace for as long as the unit mines from it (a cache trim leaves it
    alone); its time is the workspace's last use."""
    workspace.mkdir(parents=True, exist_ok=True)
    handle = open(workspace / USE_LOCK, "a")
    fcntl.flock(handle, fcntl.LOCK_SH)
    os.utime(workspace / USE_LOCK)
    return handle


def trim(options: CrawlOptions, root: Path) -> None:
    """Trim a shared cache folder to --cache-limit-gb (at most every few minutes: see miner.gc)."""
    if options.cache_dir is None or options.cache_limit_gb is None or not trim_due(root):
        return
    try:
        trim_cache(root, int(options.cache_limit_gb * GB))
    except OSError as exc:  # a trim that fails leaves the cache larger, and the unit's work intact
        print(f"miner: could not trim the cache {root}: {exc}", file=sys.stderr)


def _reason(exc: Exception) -> str:
    kind = {FetchError: "fetch failed", PinError: "fetch failed", BuildError: "build failed"}.get(type(exc), "")
    text = str(exc).strip()  # a BuildError names its log's telling lines
    return f"{kind}: {text}" if kind else text


@dataclass
class _Mining:
    """One unit's candidates: the validator's context and what the unit knows and learns."""

    unit: Unit
    project: Project
    ctx: Context
    graph: nx.DiGraph
    root: Path
    emit: Emit
    report: ProjectReport
    say: Say
    trivial: list[Rung] = field(default_factory=list)  # the blind repairs a task must resist (--refuse-trivial)

    def settle(self, candidate: Candidate, task: Task | None, files: dict[str, str]) -> None:
        """A judged candidate: its verdict known to this unit, the candidate (with its task) emitted."""
        self.unit.knowledge.verdicts[candidate.id] = Verdict(status=candidate.status, rule=candidate.rule,
                                                             detail=candidate.detail, f2p=candidate.f2p)
        self.emit(CandidateEvent(project_key=self.project.key, repo=self.project.repo, commit=self.project.commit,
                                 candidate=candidate, task=task, files=files))

    def rule_of(self, inversion: Inversion) -> str | None:
        verdict = self.unit.knowledge.verdicts.get(inversion.id_for(self.project))
        return None if verdict is None else (verdict.rule or "")


def _mine_project(unit: Unit, prepared: Prepared, root: Path, emit: Emit, report: ProjectReport, say: Say,
                  clock: Clock) -> list[Batch]:
    """Choose and judge the candidates of a project unit (or judge a batch's); the batches still
    to mine when the project has more candidates than one unit tries."""
    project, state, backend, env = prepared.project, prepared.state, prepared.backend, prepared.env
    assert state is not None
    options = unit.options
    timeout = float(project.source.overrides.get("timeout", options.timeout))
    extra = backend.run_derived_probes if any(p.kind not in RAW_KINDS for p in state.probes) else None
    report.suite_seconds = state.suite_seconds
    emit(ProjectEvent(project_key=project.key, repo=project.repo, commit=project.commit,
               source=unit.source, healthy=state))
    batch = unit.batch
    say("choosing inversion points" if batch is None else
        f"stacking {batch.compounds} validated inversions into compound tasks" if batch.compounds else
        f"batch {batch.number}/{batch.of}")
    test_files = {f for f in map(test_file_of, state.outcomes) if f}
    observed = ecosystems.observed(project_files(project.path), state)
    extra_targets = targets_beneath(state.system, project.path, test_files, observed) if options.system else []
    with clock.phase("graph"):
        graph = graphs.build_graph(project, state)
    procedural = options.inverter != "agent"
    if batch is not None:
        candidates, total = list(batch.inversions), batch.budget
    else:
        with clock.phase("choose"):
            candidates = choose_candidates(project, state, unit.types, options, graph, extra_targets) \
                if procedural else []
        # Pairs without evidence (rule 8) are judged (rejected before anything runs) but take no budget.
        usable = [inv for inv in candidates if not inv.no_evidence]
        total = len(usable) if options.budget is None else min(options.budget, len(usable))
        batches = split_batches(project.commit, usable, total, options.batch_size)
        if batches:
            batches[0].inversions[:0] = [inv for inv in candidates if inv.no_evidence]
            say(f"{total} candidates: {len(batches)} batches of up to {options.batch_size}")
            return batches
    with clock.phase("manifest"):
        manifest = healthy_manifest(backend, env)
    ctx = Context(backend, env, state, manifest, timeout=timeout, extra=extra,
                  symptoms=unit.knowledge.symptoms_of(project.commit), per_symptom=options.per_symptom,
                  overlap=spare_core(options))
    mining = _Mining(unit, project, ctx, graph, root, emit, report, say, trivial=ladder_upto(options.refuse_trivial))
    if batch is not None and batch.compounds:
        _stack_compounds(mining, batch)
        return []
    _judge_all(mining, candidates, total)
    if unit.batch is None and options.inverter in ("agent", "both") and options.agent is not None:
        _mine_with_agent(mining, extra_targets)
    return []


def split_batches(commit: str, candidates: list[Inversion], total: int, size: int) -> list[Batch]:
    """The candidate pool cut into consecutive batches when more than `size` are to be tried
    (none otherwise): batch i tries its share of `total` from its slice of the pool."""
    if size <= 0 or total <= size:
        return []
    count = math.ceil(total / size)
    budgets = [size] * (count - 1) + [total - size * (count - 1)]
    per_slice = math.ceil(len(candidates) / count)
    return [Batch(number=i + 1, of=count, commit=commit, inversions=candidates[i * per_slice:(i + 1) * per_slice],
                  budget=budgets[i]) for i in range(count)]


def _judge_all(mining: _Mining, candidates: list[Inversion], total: int) -> None:
    options, report = mining.unit.options, mining.report
    by_id = {t.id: t for t in mining.unit.types}
    for inversion in (inv for inv in candidates if inv.no_evidence):
        _try(mining, inversion, by_id[inversion.type_id])
    candidates = [inv for inv in candidates if not inv.no_evidence]
    for number, inversion in enumerate(_adaptive(candidates, options, mining.rule_of), 1):
        if options.max_tasks_per_repo is not None and report.validated >= options.max_tasks_per_repo:
            break
        if number > total:
            break
        check_free_space(mining.root, options.min_free_gb)
        name = f"candidate {number}/{total} {inversion.type_id} on {inversion.target.name}"
        mining.say(name)
        mining.say(f"{name}: {_result(_try(mining, inversion, by_id[inversion.type_id]))}")


def _stack_compounds(mining: _Mining, batch: Batch) -> None:
    """A compound unit: up to batch.budget compounds of batch.compounds of the project's stored
    tasks (Knowledge.tasks), each judged compound emitted like a candidate."""
    project, report = mining.project, mining.report

    def record(candidate: Candidate, task: Task | None, files: dict[str, str]) -> None:
        report.suite_runs += candidate.suite_runs
        mining.settle(candidate, task, files)

    found = build_compounds(mining.ctx, project, mining.unit.knowledge.tasks, mining.graph,
                            {t.id: t for t in mining.unit.types},
                            CompoundOptions(k=batch.compounds, budget=batch.budget, seed=mining.unit.options.seed),
                            known=lambda cid: cid in mining.unit.knowledge.verdicts, record=record, say=mining.say)
    report.compound_tried, report.compound_validated, report.compound_note = found.tried, found.validated, found.note
    report.resumed += found.resumed


def _mine_with_agent(mining: _Mining, extra_targets: list[Target]) -> None:
    """The agent's candidates: one conversation per goal, each submission judged and stored like
    a procedural candidate, every model call recorded against the candidate it led to."""
    options, project, report, ctx = mining.unit.options, mining.project, mining.report, mining.ctx
    agent_options = options.agent
    assert agent_options is not None
    client, model = agent_options.client, agent_options.client.settings.model
    instruct = None
    if agent_options.instructions:
        instruct = instruction_writer(client, lambda call: mining.emit(LlmEvent(
            project_key=project.key, repo=project.repo, calls=[{**call.row(), "purpose": "instruction"}])))
    # Goals see the tasks no model made: a rerun (or a resumed crawl) with the same seed then asks
    # the same questions, which the cache answers for free; the seed spreads the goals instead.
    mined = [task for task in mining.unit.knowledge.tasks if task.model is None]
    targets = enumerate_targets(project, ctx.state, extra_targets)
    if options.types:  # families or types chosen (--types): the goals lie on the targets those break
        kinds = {t.target for t in mining.unit.types}
        targets = [t for t in targets if t.kind in kinds] or targets
    goals = make_goals(project, ctx.state, mining.graph, targets, mining.unit.types, mined,
                       agent_options.settings.goals, options.seed)

    def judge(inversion: Inversion) -> Candidate:
        verdict = mining.unit.knowledge.verdicts.get(inversion.id_for(project))
        if verdict is not None:  # asked before (a resumed crawl): the stored verdict, not a new run
            report.resumed += 1
            return Candidate(id=inversion.id_for(project), repo=project.repo, commit=project.commit,
                             inversion=inversion, status=verdict.status, rule=verdict.rule,  # type: ignore[arg-type]
                             detail=verdict.detail, f2p=verdict.f2p)
        judged = _try(mining, inversion, agent_type(inversion), model=model, instruct=instruct)
        assert judged is not None
        return judged

    agent = Agent(client, ctx, project, mining.graph, mining.unit.types, mined, agent_options.settings, judge=judge)
    for number, goal in enumerate(goals, 1):
        if options.max_tasks_per_repo is not None and report.validated >= options.max_tasks_per_repo:
            break
        if client.budget.exhausted:
            mining.say("agent: crawl token budget spent")
            break
        check_free_space(mining.root, options.min_free_gb)
        mining.say(f"agent goal {number}/{len(goals)}: {goal.category} on {goal.target.name}")
        result = agent.run(goal)
        mining.emit(LlmEvent(project_key=project.key, repo=project.repo, calls=[
            {**turn.call.row(), "goal": goal.id, "round": turn.round,
             "candidate_id": turn.candidate_id} for turn in result.turns]))
        report.tokens += result.tokens


def _adaptive(candidates: list[Inversion], options: CrawlOptions,
              rule_of: Callable[[Inversion], str | None]) -> Iterator[Inversion]:
    """The candidates in order; with graph selection, a target whose break reached no test
    (`no-f2p`: the prediction was wrong for it) has its remaining candidates moved to the end.

    The rule of each candidate is read after it was tried (or when a resumed crawl finds it in
    the store), so a resumed crawl takes the same course.
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


def _try(mining: _Mining, inversion: Inversion, itype: InversionType, model: str | None = None,
         instruct: Callable[[Task, Candidate, HealthyState], str] | None = None) -> Candidate | None:
    """Judge one candidate and emit it, with its task when validated (None when the store holds it)."""
    ctx, project, report = mining.ctx, mining.project, mining.report
    cid = inversion.id_for(project)
    counts = report.by_type.setdefault(inversion.type_id, [0, 0])
    if cid in mining.unit.knowledge.verdicts:
        report.resumed += 1
        return None
    candidate = validate(ctx, inversion, whole_suite_ok=itype.whole_suite)
    report.tried += 1
    counts[0] += 1
    report.suite_runs += candidate.suite_runs
    start = time.monotonic()
    task, files = None, {}
    if candidate.status == "validated" and (repaired := _trivial(mining, inversion, candidate)):
        candidate.status, candidate.rule = "rejected", "trivial"
        candidate.detail = f"the task-blind repair {repaired!r} (miner ladder) repairs it"
    if candidate.status == "validated":
        task = make_task(project, ctx.state, candidate, itype, ctx.backend.name, mining.graph)
        task.model = model
        if instruct is not None:
            task.instruction = task.instructions["symptom"] = instruct(task, candidate, ctx.state)
        files = task_files(task, ctx.state, candidate)
        symptom = (task.family, frozenset(task.f2p))
        ctx.symptoms[symptom] = ctx.symptoms.get(symptom, 0) + 1
        report.validated += 1
        counts[1] += 1
    candidate.timings["task"] = round(time.monotonic() - start, 3)  # making the task; the driver times its writing
    mining.settle(candidate, task, files)
    return candidate


def _trivial(mining: _Mining, inversion: Inversion, candidate: Candidate) -> str | None:
    """The first blind repair of mining.trivial that repairs a validated candidate, or None."""
    if not mining.trivial:
        return None
    probe = Task(id=candidate.id, repo=mining.project.repo, commit=mining.project.commit,
                 source=mining.project.source, type_id=inversion.type_id, family=inversion.family,
                 target=inversion.target, summary=inversion.summary, break_script=inversion.break_script,
                 fix_script=inversion.fix_script, f2p=candidate.f2p, p2p=candidate.p2p,
                 test_command=mining.ctx.state.test_command, probes=mining.ctx.state.probes)
    label = measure_task(mining.ctx.backend, mining.ctx.env, probe, mining.trivial, mining.ctx.extra)
    return None if label == NEEDS_DIAGNOSIS else label


def _result(candidate: Candidate | None) -> str:
    """A candidate's result in a few words, for the progress line."""
    if candidate is None:
        return "already in the store"
    return "validated" if candidate.status == "validated" else f"rejected ({candidate.rule})"
