"""The blind-repair ladder: a task's difficulty measured by the weakest task-blind repair that
works on it.

The rungs are data (inversions/_ladder/N-name.yaml: a description, a bash script, whether it
needs the network), tried in order on the task's broken environment, each on its own fresh copy:
clear caches, drop the usual suspect variables from the startup files, reset permissions,
reinstall everything. A task is labelled by the first rung after which every check the task
judges passes again, or `needs-diagnosis` when none does. A task the first rungs repair teaches
a solver a reflex, not a diagnosis.

    rungs = load_ladder()
    label = measure_task(backend, env, task, rungs)      # "drop-variables", "needs-diagnosis", ...
    labels = measure_store(store, tasks, say)           # prepares each project once, stores labels
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import yaml

from miner.catalogue import CatalogueError, _builtin_root
from miner.healthy import RAW_KINDS, ExtraProbes, run_checks
from miner.models import Task
from miner.replay import script_network
from miner.sandbox.base import Backend, Healthy

NEEDS_DIAGNOSIS = "needs-diagnosis"
LADDER_FOLDER = "_ladder"
SCRIPT_TIMEOUT = 900.0
Say = Callable[[str], None]


@dataclass(frozen=True)
class Rung:
    """One task-blind repair."""

    id: str
    order: int
    description: str
    script: str
    network: bool = False


def load_ladder() -> list[Rung]:
    """The rungs of the packaged ladder, weakest first (the number before the name orders them)."""
    folder = _builtin_root().joinpath(LADDER_FOLDER)
    rungs = []
    for item in folder.iterdir():
        if not item.name.endswith((".yaml", ".yml")):
            continue
        stem = item.name.rsplit(".", 1)[0]
        number, _, name = stem.partition("-")
        raw = yaml.safe_load(item.read_text(encoding="utf-8")) or {}
        if not number.isdigit() or not name or not isinstance(raw.get("script"), str):
            raise CatalogueError(f"{item}: a rung is N-name.yaml with a script")
        rungs.append(Rung(id=name, order=int(number), description=str(raw.get("description", "")).strip(),
                          script=raw["script"], network=bool(raw.get("network", False))))
    return sorted(rungs, key=lambda r: r.order)


def ladder_upto(rung: str | None) -> list[Rung]:
    """The rungs up to and including `rung` (none for None): what --refuse-trivial tries."""
    if rung is None:
        return []
    rungs = load_ladder()
    ids = [r.id for r in rungs]
    if rung not in ids:
        raise ValueError(f"{rung!r} is no rung of the ladder ({', '.join(ids)})")
    return rungs[: ids.index(rung) + 1]


def labels() -> list[str]:
    """Every label a task may get, weakest first."""
    return [r.id for r in load_ladder()] + [NEEDS_DIAGNOSIS]


def repaired_by(backend: Backend, env: Healthy, task: Task, rung: Rung, extra: ExtraProbes | None = None) -> bool:
    """Whether every check the task judges passes after the rung, run on a fresh broken copy."""
    judged = set(task.f2p) | set(task.p2p)
    with backend.fork(env) as sandbox:
        broken = sandbox.run(task.break_script, network=script_network(task, "break"), timeout=SCRIPT_TIMEOUT)
        if broken.exit_code != 0:
            raise RuntimeError(f"the task's break failed: {broken.output.strip()[-300:]}")
        sandbox.settle()
        sandbox.run(rung.script, network=rung.network, timeout=SCRIPT_TIMEOUT)
        sandbox.settle()
        outcomes = run_checks(sandbox, task.test_command, task.probes, extra=extra).outcomes()
    return all(outcomes.get(test) == "passed" for test in judged)


def measure_task(backend: Backend, env: Healthy, task: Task, rungs: Iterable[Rung],
                 extra: ExtraProbes | None = None) -> str:
    """The id of the first rung that repairs the task, or NEEDS_DIAGNOSIS."""
    for rung in rungs:
        if repaired_by(backend, env, task, rung, extra):
            return rung.id
    return NEEDS_DIAGNOSIS


def measure_store(store, tasks: list[Task], say: Say, backend_name: str | None = None) -> dict[str, str]:  # noqa: ANN001
    """Label each task (stored with it): each project is prepared once, on the task's backend."""
    from miner.prepare import prepare
    from miner.sandbox import get_backend

    rungs = load_ladder()
    found: dict[str, str] = {}
    groups: dict[tuple[str, str, str], list[Task]] = {}
    for task in tasks:
        groups.setdefault((task.source.raw, task.commit, backend_name or task.backend), []).append(task)
    for (_, commit, name), members in groups.items():
        backend = get_backend(name)
        prepared = prepare(members[0].source, backend, store, commit=commit, measure=False,
                           say=lambda text: say(f"  {text}"))
        extra = backend.run_derived_probes if any(p.kind not in RAW_KINDS for t in members for p in t.probes) else None
        for task in members:
            label = measure_task(backend, prepared.env, task, rungs, extra)
            store.set_blind_repair(task.id, label)
            found[task.id] = label
            say(f"{task.id[:12]} {task.type_id:<34} {label}")
    return found
