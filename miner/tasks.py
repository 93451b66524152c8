"""A validated candidate -> Task: the instruction from its symptom, the difficulty from the graph,
the evidence its repair recovers from (rule 8, from the inversion).

Where tasks are made (the crawl calls it for every validated candidate): `make_task` builds the
Task record, `task_files` the files of its folder besides task.json, and `difficulty` scores how
hard the repair is from the broken node's depth below the failing tests, how many tests fail and
the family.

    task = make_task(project, state, candidate, itype, backend.name, graph)
    store.add_task(task, task_files(task, state, candidate))
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone

import networkx as nx

from miner import __version__
from miner.graph import depth
from miner.instruction import observed_symptom, write_instructions
from miner.models import Candidate, HealthyState, InversionType, Part, Project, Task

FAMILY_WEIGHT = {"deps": 0.3, "config": 0.5, "fs": 0.5, "data": 0.6, "env": 0.6, "system": 0.8, "service": 0.8}


def difficulty(depth: int | None, n_f2p: int, family: str) -> tuple[str, float]:
    """An estimate of how hard a task is to repair: (easy|medium|hard, score in [0, 1]).

        score = 0.45 * D + 0.25 * F + 0.30 * W
        D = min(depth - 1, 3) / 3      0 when a failing test uses the broken node directly, 1 at
                                       four or more hops (unknown depth counts as 0.5)
        F = 1 / sqrt(n_f2p)            one failing test gives a single, faint trail; many
                                       failing tests point at their common dependency
        W = FAMILY_WEIGHT[family]      deps 0.3 (tracebacks name the missing module), config/fs
                                       0.5, data/env 0.6 (the symptom is far from the cause),
                                       system/service 0.8; other families 0.5
    easy below 0.35, hard from 0.6, medium between.
    """
    d = 0.5 if depth is None else min(max(depth, 1) - 1, 3) / 3
    f = 1 / math.sqrt(max(n_f2p, 1))
    w = FAMILY_WEIGHT.get(family, 0.5)
    score = round(0.45 * d + 0.25 * f + 0.30 * w, 3)
    label = "easy" if score < 0.35 else "hard" if score >= 0.6 else "medium"
    return label, score


def compound_difficulty(parts: list[Part]) -> tuple[str, float]:
    """How hard a compound task is: harder than its hardest part, more so with every further part
    and with deep parts (a fault far below the failing tests hides behind the others).

        score = min(1, max(s_i) + 0.15 * (k - 1) + 0.05 * mean(D_i))
        s_i    the parts' own difficulty scores (difficulty())
        D_i    min(depth_i - 1, 3) (unknown depth counts as 1.5)
    easy below 0.35, hard from 0.6, medium between (as difficulty()).
    """
    if not parts:
        return difficulty(None, 1, "compound")
    depths = [1.5 if p.graph_depth is None else min(max(p.graph_depth, 1) - 1, 3) for p in parts]
    score = round(min(1.0, max(p.difficulty_score for p in parts) + 0.15 * (len(parts) - 1)
                      + 0.05 * sum(depths) / len(depths)), 3)
    label = "easy" if score < 0.35 else "hard" if score >= 0.6 else "medium"
    return label, score


def make_compound_task(project: Project, state: HealthyState, cand: Candidate, parts: list[Part], backend: str,
                       graph: nx.DiGraph | None = None) -> Task:
    """A validated compound candidate (miner.compound) becomes a task: its parts kept, difficulty
    from them, the hinted instruction naming each part's area."""
    inv = cand.inversion
    level, score = compound_difficulty(parts)
    depths = [p.graph_depth for p in parts if p.graph_depth is not None]
    task = Task(
        id=cand.id, repo=project.repo, commit=project.commit, source=project.source, type_id=inv.type_id,
        family=inv.family, target=inv.target, summary=inv.summary, break_script=inv.break_script,
        fix_script=inv.fix_script, f2p=cand.f2p, p2p=cand.p2p, difficulty=level, difficulty_score=score,
        graph_depth=max(depths) if depths else None, test_command=state.test_command,
        probes=[p for p in state.probes if p.id in set(cand.f2p + cand.p2p)],
        protected={p: state.file_hashes[p] for p in state.protected}, suite_seconds=state.suite_seconds,
        backend=backend, created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        evidence=list(inv.evidence), category="compound", parts=parts,
    )
    task.instructions = write_instructions(task, cand, state, categories=[p.category for p in parts])
    task.instruction = task.instructions["symptom"]
    task.solver_view = observed_symptom(task, cand, state).view()  # validated like any candidate's
    return task


def make_task(project: Project, state: HealthyState, cand: Candidate, itype: InversionType, backend: str,
              graph: nx.DiGraph | None = None) -> Task:
    """A validated candidate becomes a task: instruction from the symptom, difficulty from the graph.

    The stored depth is measured from the observed F2P tests down to the broken node (the
    selection's depth was over the predicted radius), whichever way the target was chosen.
    """
    inv = cand.inversion
    if graph is not None:
        inv.graph_depth = depth(graph, inv.target, cand.f2p)
    level, score = difficulty(inv.graph_depth, len(cand.f2p), inv.family)
    task = Task(
        id=cand.id, repo=project.repo, commit=project.commit, source=project.source, type_id=inv.type_id,
        family=inv.family, target=inv.target, summary=inv.summary, break_script=inv.break_script,
        fix_script=inv.fix_script, f2p=cand.f2p, p2p=cand.p2p, predicted_f2p=inv.predicted_f2p,
        difficulty=level, difficulty_score=score, graph_depth=inv.graph_depth, whole_suite=itype.whole_suite,
        test_command=state.test_command, probes=[p for p in state.probes if p.id in set(cand.f2p + cand.p2p)],
        protected={p: state.file_hashes[p] for p in state.protected}, suite_seconds=state.suite_seconds,
        backend=backend, created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        evidence=list(inv.evidence), category=itype.category,
    )
    task.instructions = write_instructions(task, cand, state)
    task.instruction = task.instructions["symptom"]
    task.solver_view = observed_symptom(task, cand, state).view()  # what `miner check` runs in a solver's shells
    return task


def task_files(task: Task, state: HealthyState, cand: Candidate) -> dict[str, str]:
    """The files of a task folder besides task.json."""
    files = {
        "break.sh": task.break_script,
        "fix.sh": task.fix_script,
        "instruction.md": task.instruction,
        **{f"instruction-{variant}.md": text for variant, text in task.instructions.items() if variant != "symptom"},
        "healthy.json": json.dumps({"outcomes": state.outcomes, "durations": state.durations}, indent=1),
        "broken.json": json.dumps({"outcomes": cand.broken, "messages": cand.broken_messages}, indent=1),
        "fixed.json": json.dumps({"outcomes": cand.fixed}, indent=1),
        "miner-version": __version__,
    }
    files.update({f"logs/{name}.log": text for name, text in cand.logs.items()})
    return files
