"""Compound tasks: K validated inversions of one project stacked into one task, validated as a whole.

    found = build_compounds(ctx, project, stored, graph, catalogue, CompoundOptions(k=2, budget=5), known, record)

A crawl with --compound K builds them in one unit of each project (miner.mine), once its
candidates are recorded; `miner compound` runs that unit for each project of the store
(miner.pipeline.compound_stored).

The parts come from the project's stored single tasks (same repo, commit and backend; neither a
compound, nor a model's, nor a whole-suite task, nor one of a type the catalogue lacks). A
combination is tried only when its parts stand apart: different targets, on different branches
of the dependency graph (neither target's nodes reach the other's), and different F2P sets.

The compound inversion (type `compound/<k>`, family "compound") runs the parts' break scripts in
order and their fix scripts in reverse order (undoing the last break first), each in its own
subshell, and is judged by the same validator as any candidate (miner.validate.validate). Then
every part must be necessary (leave-one-out): with every fix applied but that part's, some
healthy-passing test still fails. A compound where one part's fix also repairs another part's
symptom is refused with the rule `overlapping-parts`. The task's F2P set is the union the
validator measured; each part keeps its type, target, F2P set and evidence (Task.parts), and its
difficulty rises with the number of parts and their depth (miner.tasks.compound_difficulty).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass, field

import networkx as nx

from miner.evidence import needs_network
from miner.graph import target_nodes
from miner.models import Candidate, Evidence, Inversion, InversionType, Part, Project, Target, Task
from miner.tasks import make_compound_task, task_files
from miner.validate import Context, Rejected, Run, validate

MAX_POOL = 24  # single tasks a project's combinations are drawn from (after the seeded shuffle)


@dataclass
class CompoundOptions:
    k: int = 2  # parts per compound
    budget: int = 5  # compound candidates validated per project
    seed: int = 0


@dataclass
class CompoundReport:
    repo: str
    tried: int = 0
    validated: int = 0
    resumed: int = 0
    refused: dict[str, int] = field(default_factory=dict)  # rule -> candidates
    reason: str = ""  # why the project was skipped (it could not be prepared again)
    note: str = ""  # why no compound was tried, when none was


def compound_inversion(parts: list[Task], catalogue: dict[str, InversionType]) -> Inversion:
    """The inversion that breaks like every part in order and fixes them in reverse order."""
    k = len(parts)
    evidence = list({(e.kind, e.detail): e for p in parts for e in p.evidence}.values())

    def body(label: str, scripts: list[tuple[int, Task, str]]) -> str:
        lines = ["set -euo pipefail", f"# compound of {k} faults: each part's {label} script in its own subshell"]
        for number, part, script in scripts:
            lines += [f"# part {number}/{k}: {part.type_id} on {part.target.key}", "(", script.rstrip("\n"), ")"]
        return "\n".join(lines) + "\n"

    numbered = list(enumerate(parts, 1))
    network = [catalogue[p.type_id].network for p in parts]
    return Inversion(
        type_id=f"compound/{k}", family="compound",
        target=Target(kind="compound", name="+".join(p.target.key for p in parts),
                      attrs={"parts": [p.id for p in parts], "types": [p.type_id for p in parts]}),
        break_script=body("break", [(n, p, p.break_script) for n, p in numbered]),
        fix_script=body("fix", [(n, p, p.fix_script) for n, p in reversed(numbered)]),
        summary="; ".join(p.summary for p in parts),
        network_break=any(n.get("break", False) for n in network),
        network_fix=any(n.get("fix", False) for n in network),
        evidence=[Evidence(kind=e.kind, detail=e.detail) for e in evidence],
    )


def _reaches(graph: nx.DiGraph | None, a: Target, b: Target) -> bool:
    """Whether one target's graph nodes depend on the other's (one branch of the graph)."""
    if graph is None:
        return False
    nodes_a, nodes_b = set(target_nodes(graph, a)), set(target_nodes(graph, b))
    if nodes_a & nodes_b:
        return True
    return any(nx.has_path(graph, x, y) or nx.has_path(graph, y, x) for x in nodes_a for y in nodes_b)


def stand_apart(a: Task, b: Task, graph: nx.DiGraph | None) -> bool:
    """Two tasks that may share a compound: other targets, other branches, other F2P sets."""
    return (a.target.key != b.target.key and set(a.f2p) != set(b.f2p)
            and (a.target.path is None or a.target.path != b.target.path) and not _reaches(graph, a.target, b.target))


def eligible(tasks: list[Task], catalogue: dict[str, InversionType], backend: str) -> list[Task]:
    """Single, procedural, partial tasks of a type the catalogue holds, mined with this backend."""
    return [t for t in tasks if not t.parts and t.family != "compound" and t.model is None and not t.whole_suite
            and t.type_id in catalogue and t.backend == backend]


def combinations(tasks: list[Task], k: int, graph: nx.DiGraph | None, seed: int) -> list[list[Task]]:
    """Combinations of k tasks that pairwise stand apart: seeded order, most families first, parts
    spread (the least used parts first)."""
    pool = sorted(tasks, key=lambda t: t.id)
    rng = random.Random(seed)
    rng.shuffle(pool)
    pool = pool[:MAX_POOL]
    apart = {(a.id, b.id): stand_apart(a, b, graph) for a, b in itertools.combinations(pool, 2)}
    found = [list(c) for c in itertools.combinations(pool, k)
             if all(apart[(a.id, b.id)] for a, b in itertools.combinations(c, 2))]
    ties = {tuple(t.id for t in c): rng.random() for c in found}
    ranked = sorted(found, key=lambda c: (-len({t.family for t in c}), -len({t.category for t in c}),
                                          ties[tuple(t.id for t in c)]))
    return _spread(ranked)


def _spread(ranked: list[list[Task]]) -> list[list[Task]]:
    """The combinations reordered so that each next one uses the parts used least so far (then in
    their rank): otherwise one task that stands apart from all the others (a setting) is a part of
    every compound of a small budget, and the compounds are all alike."""
    used: dict[str, int] = {}
    rest, out = list(ranked), []
    while rest:
        best = min(range(len(rest)), key=lambda i: (max(used.get(t.id, 0) for t in rest[i]),
                                                    sum(used.get(t.id, 0) for t in rest[i]), i))
        chosen = rest.pop(best)
        out.append(chosen)
        for t in chosen:
            used[t.id] = used.get(t.id, 0) + 1
    return out


def unneeded_part(ctx: Context, inversion: Inversion, parts: list[Task],
                  catalogue: dict[str, InversionType]) -> tuple[Task, float] | None:
    """Leave-one-out: the first part whose fault no test notices once every other part is fixed
    (None when each is necessary), and the suite runs it took."""
    run = Run(ctx, inversion)
    for left in parts:
        others = [p for p in reversed(parts) if p.id != left.id]
        with run.fork() as sandbox:
            run.apply(sandbox, "break", inversion.break_script, inversion.network_break)
            for number, part in enumerate(others, 1):  # each fix with the network its evidence needs (rule 8)
                run.apply(sandbox, f"fix-{number}", part.fix_script, needs_network([e.kind for e in part.evidence]))
            f2p, _ = run.f2p_p2p(run.check(sandbox, "leave-one-out"))
        if not f2p:
            return left, run.suite_runs
    return None


def judge(ctx: Context, inversion: Inversion, parts: list[Task], catalogue: dict[str, InversionType]) -> Candidate:
    """The compound candidate as the validator judges it, then every part's necessity."""
    candidate = validate(ctx, inversion)
    if candidate.status != "validated":
        return candidate
    try:
        found = unneeded_part(ctx, inversion, parts, catalogue)
    except Rejected as exc:  # a part's fix fails while another part is still broken: they are entangled
        return candidate.model_copy(update={"status": "rejected", "rule": "overlapping-parts",
                                            "detail": f"leave-one-out: {exc.detail}"})
    if found is not None:
        left, runs = found
        return candidate.model_copy(update={
            "status": "rejected", "rule": "overlapping-parts", "suite_runs": candidate.suite_runs + runs,
            "detail": f"with every other part fixed, no test notices {left.type_id} on {left.target.key}: "
                      "another part's fix repairs its symptom"})
    return candidate


Record = Callable[[Candidate, "Task | None", dict[str, str]], None]  # a judged compound, its task and files


def build_compounds(ctx: Context, project: Project, stored: list[Task], graph: nx.DiGraph | None,
                    catalogue: dict[str, InversionType], options: CompoundOptions, known: Callable[[str], bool],
                    record: Record, say: Callable[[str], None] | None = None) -> CompoundReport:
    """Try up to options.budget compounds of options.k of the project's stored tasks, in the seeded
    order of `combinations`, those the store holds already (`known`) counted but not judged again;
    each judged compound goes to `record`, with its task when valid."""
    say = say or (lambda text: None)
    report = CompoundReport(repo=project.repo)
    mine = [t for t in stored if t.repo == project.repo and t.commit == project.commit]
    tasks = eligible(mine, catalogue, ctx.backend.name)
    if len(tasks) < options.k:
        report.note = f"{len(tasks)} stored task(s) can be parts, {options.k} are needed"
        say(f"compound: {report.note}")
        return report
    found = combinations(tasks, options.k, graph, options.seed)
    if not found:
        report.note = (f"no {options.k} of its {len(tasks)} stored tasks stand apart (other targets, other "
                       "branches of the dependency graph, other F2P sets)")
        say(f"compound: {report.note}")
        return report
    for parts in found:
        if report.tried + report.resumed >= options.budget:  # as for single candidates: a rerun adds nothing
            break
        inversion = compound_inversion(parts, catalogue)
        if known(inversion.id_for(project)):
            report.resumed += 1
            continue
        say(f"compound {report.tried + 1}/{options.budget}: " + " + ".join(f"{p.type_id} on {p.target.name}"
                                                                      for p in parts))
        candidate = judge(ctx, inversion, parts, catalogue)
        report.tried += 1
        task, files = None, {}
        if candidate.status == "validated":
            task = make_compound_task(project, ctx.state, candidate, [part_of(p, catalogue) for p in parts],
                                      ctx.backend.name, graph)
            files = task_files(task, ctx.state, candidate)
            symptom = (task.family, frozenset(task.f2p))
            ctx.symptoms[symptom] = ctx.symptoms.get(symptom, 0) + 1
            report.validated += 1
        else:
            report.refused[candidate.rule or "?"] = report.refused.get(candidate.rule or "?", 0) + 1
        record(candidate, task, files)
        say(f"compound: {candidate.status}" + (f" ({candidate.rule})" if candidate.rule else ""))
    return report


def part_of(task: Task, catalogue: dict[str, InversionType]) -> Part:
    """A stored single task as a compound's part."""
    return Part(task_id=task.id, type_id=task.type_id, family=task.family,
                category=task.category or catalogue[task.type_id].category, target=task.target,
                summary=task.summary, f2p=task.f2p, graph_depth=task.graph_depth,
                difficulty_score=task.difficulty_score, evidence=task.evidence)
