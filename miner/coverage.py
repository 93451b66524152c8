"""Coverage of a store's projects: which parts of each environment its tests reach, which of them
have a validated task, and why the others have none (`miner stats --coverage`).

A project's environment nodes are the targets the crawl enumerates (miner.inverters.targets, and
a container's system beneath the project) that the dependency graph links to at least one
healthy-passing test or probe (a process-wide setting, state, system file or service: every test): installed distributions and packages, data and config files,
variables, settings, system libraries and services. Per node, the verdict of the candidates tried
on it decides:

    task          a validated task breaks it
    no-f2p        every break tried on it left the tests passing (no test notices)
    no-evidence   the breaks of it have no evidence a repair could recover from (rule 8)
    duplicate     its breaks failed exactly the tests a stored task of the same family fails
    rejected      its breaks were refused by another rule (named)
    not tried     the crawl's budget ended before it

    rows = project_coverage(store)      # one ProjectCoverage a mined project, in the store's order
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from miner import ecosystems
from miner.graph import UNMODELLED_KINDS, build_graph, predict
from miner.inverters.system import targets_beneath
from miner.inverters.targets import enumerate_targets
from miner.models import HealthyState, Project
from miner.projectfiles import project_files, test_file_of
from miner.sources import FetchError, fetch, parse_source
from miner.store import Store

# The kinds of environment node a reader counts, by target kind.
NODE_KINDS = {"distribution": "packages", "module": "packages", "submodule": "packages", "bytecode": "packages",
              "script": "packages", "node-package": "packages", "config": "config", "data": "data",
              "envvar": "variables", "setting": "settings", "state": "state", "syslib": "system",
              "debpkg": "system", "system": "system", "service": "services"}
RULE_REASONS = {"no-f2p": "no-f2p", "unrecoverable": "no-evidence", "duplicate-symptom": "duplicate"}


@dataclass
class ProjectCoverage:
    """One project's environment nodes its tests reach, and what became of each."""

    repo: str
    reached: int = 0
    with_task: int = 0
    by_kind: dict[str, dict[str, int]] = field(default_factory=dict)  # kind -> {"reached", "with_task"}
    reasons: dict[str, int] = field(default_factory=dict)  # why nodes have no task -> count
    nodes: list[dict[str, Any]] = field(default_factory=list)  # {"target", "kind", "verdict"}
    error: str = ""  # why the project could not be read (its source gone from the cache)

    @property
    def share(self) -> float:
        return self.with_task / self.reached if self.reached else 0.0

    def public(self) -> dict[str, Any]:
        return {**asdict(self), "share": round(self.share, 3)}


def _verdict(rules: Counter[str], has_task: bool) -> str:
    if has_task:
        return "task"
    if not rules:
        return "not tried"
    for rule, reason in RULE_REASONS.items():
        if rules[rule] == sum(rules.values()):
            return reason
    top = rules.most_common(1)[0][0]
    return RULE_REASONS.get(top, f"rejected: {top}")


def reached_targets(project: Project, state: HealthyState) -> list[tuple[str, str]]:
    """(target key, node kind) of the targets some healthy-passing test or probe depends on."""
    tests = {f for f in map(test_file_of, state.outcomes) if f}
    observed = ecosystems.observed(project_files(project.path), state)
    targets = enumerate_targets(project, state, targets_beneath(state.system, project.path, tests, observed))
    graph, passing = build_graph(project, state), set(state.passing)
    seen: dict[str, str] = {}
    for target in targets:
        # a process-wide setting, run-time state, a system file or a service has no node in the
        # graph: every test runs under it
        if target.key not in seen and (target.kind in UNMODELLED_KINDS or predict(graph, target) & passing):
            seen[target.key] = NODE_KINDS.get(target.kind, target.kind)
    return sorted(seen.items())


def one_project(store: Store, row: dict[str, Any]) -> ProjectCoverage:
    """The coverage of one mined project of the store."""
    found = ProjectCoverage(repo=row["repo"])
    state = store.healthy(row["key"])
    try:
        source = parse_source(row["source_raw"], Path.cwd())
        if state is None or source is None:
            raise FetchError("no healthy state or source recorded")
        project = fetch(source, store.cache_root / "sources")
    except (FetchError, ValueError) as exc:
        found.error = str(exc)
        return found
    rules: dict[str, Counter[str]] = defaultdict(Counter)
    for target, status, rule in store.target_rules(row["repo"], row["commit"]):
        if status == "rejected" and rule:
            rules[target][rule] += 1
    tasked = {task.target.key for task in store.list_tasks(repo=row["repo"]) if task.commit == row["commit"]}
    for key, kind in reached_targets(project, state):
        verdict = _verdict(rules[key], key in tasked)
        found.nodes.append({"target": key, "kind": kind, "verdict": verdict})
        counts = found.by_kind.setdefault(kind, {"reached": 0, "with_task": 0})
        counts["reached"] += 1
        counts["with_task"] += verdict == "task"
        if verdict != "task":
            found.reasons[verdict] = found.reasons.get(verdict, 0) + 1
    found.reached = len(found.nodes)
    found.with_task = sum(n["verdict"] == "task" for n in found.nodes)
    return found


def project_coverage(store: Store) -> list[ProjectCoverage]:
    """The coverage of every mined project of the store (its newest run of each repository)."""
    newest: dict[str, dict[str, Any]] = {}
    for row in store.projects():
        if row["status"] == "mined" and row["has_healthy"]:
            newest[row["repo"]] = row
    return [one_project(store, row) for row in newest.values()]
