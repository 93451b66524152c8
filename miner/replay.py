"""Replay: re-run one stored task through build > break (step by step) > tests > fix > tests.

For debugging an inversion: each top-level statement of the break script (split with tree-sitter's
bash grammar) runs on its own and its effect on the sandbox's files is shown; then the outcome
diff against the healthy state, the fix, and the restoration. A replay whose F2P set differs from
the stored one says so, and the caller exits non-zero. The project is always the one the task was
mined from (miner.prepare.fetch_pinned): when its source now resolves to another commit, the
mined commit is fetched, or the replay stops with PinError saying why it cannot be.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Callable

import tree_sitter_bash
from tree_sitter import Language, Parser

from miner.healthy import MINER_DIR, hash_tree, run_checks
from miner.models import SANDBOX_ROOT, Task
from miner.prepare import prepare
from miner.sandbox import get_backend
from miner.sandbox.base import Sandbox
from miner.store import Store

Say = Callable[[str], None]
# Statements whose only effect is on the shell's own state: repeated before every later step.
STATE_NODES = {"variable_assignment", "declaration_command"}


@dataclass
class ReplayResult:
    task_id: str
    f2p: list[str] = field(default_factory=list)
    restored: bool = False
    reproduced: bool = False
    kept: str = ""

    @property
    def ok(self) -> bool:
        return self.reproduced and self.restored


def split_steps(script: str) -> list[tuple[str, str]]:
    """(node type, text) of each top-level statement of a bash script, comments dropped."""
    parser = Parser(Language(tree_sitter_bash.language()))
    source = script.encode()
    tree = parser.parse(source)
    return [(n.type, source[n.start_byte:n.end_byte].decode()) for n in tree.root_node.children if n.type != "comment"]


def snapshot(sandbox: Sandbox) -> dict[str, str]:
    """Content hash plus mode and type of every file under /sandbox (to show a step's effect)."""
    hashes = hash_tree(sandbox, [SANDBOX_ROOT])
    listing = sandbox.run(f"find {SANDBOX_ROOT} -xdev \\( -type f -o -type l \\) -printf '%m %y %l\\t%p\\n' 2>/dev/null; true",
                          timeout=120)
    state = {}
    for line in listing.output.splitlines():
        meta, _, path = line.partition("\t")
        if path and not path.startswith(MINER_DIR):
            state[path] = f"{meta} {hashes.get(path, '')}"
    return state


def effect(before: dict[str, str], after: dict[str, str]) -> list[str]:
    lines = [f"  - removed  {p}" for p in sorted(before.keys() - after.keys())]
    lines += [f"  + added    {p}" for p in sorted(after.keys() - before.keys())]
    for path in sorted(before.keys() & after.keys()):
        if before[path] != after[path]:
            old_mode, new_mode = before[path].split()[0], after[path].split()[0]
            what = f"mode {old_mode} -> {new_mode}" if old_mode != new_mode else "content changed"
            lines.append(f"  ~ {what:<16} {path}")
    return lines or ["  (no file changed)"]


def run_steps(sandbox: Sandbox, script: str, network: bool, say: Say) -> None:
    """Apply a script statement by statement, printing each one and what it changed.

    Each statement is its own sandbox command, whose /tmp may be a fresh one (bubblewrap's tmpfs):
    temporary files (mktemp) go to a folder under MINER_DIR instead, which lasts across statements
    and is left out of the effects shown."""
    prelude: list[str] = [f'export TMPDIR={MINER_DIR}/replay-tmp; mkdir -p "$TMPDIR"']
    before = snapshot(sandbox)
    for number, (kind, step) in enumerate(split_steps(script), 1):
        first, *more = step.splitlines()
        say(f"[step {number}] $ {first}{' ...' if more else ''}")
        result = sandbox.run("\n".join(prelude + [step]), network=network, timeout=300)
        if result.output.strip():
            say("  " + result.output.strip().replace("\n", "\n  ")[:1500])
        after = snapshot(sandbox)
        for line in effect(before, after):
            say(line)
        say(f"  exit {result.exit_code}")
        before = after
        if kind in STATE_NODES or step.startswith("set "):
            prelude.append(step)


def _judged_ids(task: Task, healthy: dict[str, str]) -> dict[str, str]:
    probe_ids = {p.id for p in task.probes}
    return {t: o for t, o in healthy.items() if not t.startswith("probe::") or t in probe_ids}


def replay(store: Store, task_id: str, say: Say, keep: bool = False, shell: bool = False,
           backend_name: str | None = None) -> ReplayResult:
    task = store.get_task(task_id)
    folder = store.task_dir(task.id)
    healthy = _judged_ids(task, json.loads((folder / "healthy.json").read_text())["outcomes"])
    result = ReplayResult(task.id)
    backend = get_backend(backend_name or task.backend)
    say(f"task {task.id}: {task.type_id} on {task.target.name} ({task.repo}@{task.commit[:12]})")
    say("rebuilding the healthy sandbox at the mined commit ...")
    prepared = prepare(task.source, backend, store, commit=task.commit, measure=False,
                       say=lambda text: say(f"  {text}"))
    env, extra = prepared.env, backend.run_derived_probes
    sandbox = backend.fork(env)
    try:
        say("applying the break step by step:")
        run_steps(sandbox, task.break_script, network=script_network(task, "break"), say=say)
        broken = run_checks(sandbox, task.test_command, task.probes, extra=extra).outcomes()
        result.f2p = sorted(t for t, o in healthy.items() if o == "passed" and broken.get(t) != "passed")
        _diff(say, "outcomes after the break (healthy -> broken):", healthy, broken)
        result.reproduced = result.f2p == sorted(task.f2p)
        say("F2P matches the stored task" if result.reproduced else
            f"F2P DIFFERS from the stored task: stored {len(task.f2p)}, replayed {len(result.f2p)}: "
            f"{', '.join(sorted(set(task.f2p) ^ set(result.f2p))[:8])}")
        if keep or shell:
            result.kept = sandbox.location
            say(f"broken sandbox kept at {sandbox.location}")
            if shell:
                sandbox.shell()
            fresh = backend.fork(env)
            run_steps(fresh, task.break_script, network=script_network(task, "break"), say=lambda _: None)
            sandbox = fresh  # the broken one stays for the user (not closed)
        say("applying the fix:")
        fix = sandbox.run(task.fix_script, network=script_network(task, "fix"), timeout=300)
        say(f"  exit {fix.exit_code}" + (f": {fix.output.strip()[-500:]}" if fix.exit_code else ""))
        fixed = run_checks(sandbox, task.test_command, task.probes, extra=extra).outcomes()
        still = sorted(t for t, o in healthy.items() if o == "passed" and fixed.get(t) != "passed")
        result.restored = not still
        say(f"restored: all {sum(o == 'passed' for o in healthy.values())} healthy-passing tests pass again"
            if not still else f"NOT restored: {len(still)} tests still fail: {', '.join(still[:8])}")
    finally:
        sandbox.close()
    return result


def script_network(task: Task, which: str) -> bool:
    """The break's network as its type declares; the fix's as its evidence needs (rule 8)."""
    from miner.catalogue import load_catalogue
    from miner.evidence import needs_network

    if which == "fix" and task.evidence:
        return needs_network([e.kind for e in task.evidence])
    itype = load_catalogue().get(task.type_id)
    return bool(itype and itype.network.get(which))


def _diff(say: Say, title: str, before: dict[str, str], after: dict[str, str]) -> None:
    say(title)
    changed = [(t, before[t], after.get(t, "missing")) for t in sorted(before) if before[t] != after.get(t, "missing")]
    for test, old, new in changed[:50]:
        say(f"  {old:>7} -> {new:<7} {test}")
    if len(changed) > 50:
        say(f"  ... and {len(changed) - 50} more")
    say(f"  {len(changed)} changed, {len(before) - len(changed)} unchanged")

