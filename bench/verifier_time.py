"""The verifier's time per task, before and after a change, side by side (issue 22: at most 1.5x).

    python bench/verifier_time.py --store STORE --before 6cd2a17 [--limit 6] [--rounds 2]

Checks out BEFORE into a temporary git worktree, exports the same tasks of STORE with each tree
(each with its own `miner` package: PYTHONPATH), then, round after round, runs the oracle of every
task with each tree in turn (fresh container, solution/solve.sh, then the verifier as that tree's
`miner check` runs it) and times the verifier alone: from the end of solve.sh to the reward read
(with the separate mode's collect, snapshot, fresh container and restore included). Prints the
median per tree and the ratio after/before, and each tree's rewards (every one must be 1).
`--mode` picks the current tree's verifier mode (separate, the default export, or shared).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Run inside one tree (PYTHONPATH=TREE): export, or time the oracle's verifier on task folders.
EXPORT = """
import sys
from pathlib import Path
from miner.export import ExportOptions, export_tasks, select_tasks
from miner.store import Store
store_path, out, ids, mode = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3].split(","), sys.argv[4]
options = ExportOptions(cache_dir=Path(sys.argv[5]))  # a cache of each tree's own: manifests differ
if mode and hasattr(options, "verifier_mode"):
    options.verifier_mode = mode
with Store(store_path, create=False) as store:
    tasks = [t for t in select_tasks(store) if t.id in ids]
    summary = export_tasks(store, tasks, "harbor", out, options)
for o in summary.outcomes:
    print(o.task_id, o.name, o.status)
"""

TIME = """
import inspect, json, sys, time
from pathlib import Path
from miner.check import Checker, read_config
mode = sys.argv[1]
checker = Checker(verifier_mode=mode) if "verifier_mode" in inspect.signature(Checker).parameters else Checker()
new_api = "image" in inspect.signature(checker.verify).parameters
for folder in map(Path, sys.argv[2:]):
    config = read_config(folder)
    image = checker.build(folder, 1200)
    container = checker.start(image, folder, network=True)
    checker.solve(container, folder, config)
    start = time.monotonic()
    result = checker.verify(container, folder, config, image) if new_api else checker.verify(container, folder, config)
    seconds = time.monotonic() - start
    try:
        container.remove(force=True)
    except Exception:
        pass
    print(json.dumps({"task": folder.name, "seconds": round(seconds, 2), "reward": result.reward}), flush=True)
"""


def in_tree(tree: Path, code: str, *args: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env={"PYTHONPATH": str(tree), "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/root"})
    if done.returncode != 0:
        raise SystemExit(f"{tree}: {done.stderr[-3000:]}")
    return done.stdout.splitlines()


def choose(store: Path, limit: int) -> list[str]:
    """One task of each family (the first by type and id), up to `limit`."""
    from miner.export import select_tasks
    from miner.store import Store

    with Store(store, create=False) as opened:
        first: dict[str, str] = {}
        for task in sorted(select_tasks(opened), key=lambda t: (t.family, t.type_id, t.id)):
            first.setdefault(task.family, task.id)
    return list(first.values())[:limit]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--before", required=True, help="the git revision to compare with")
    parser.add_argument("--limit", type=int, default=6, help="tasks (one a family, up to this many)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--mode", default="separate", choices=("separate", "shared"))
    args = parser.parse_args()
    ids = choose(args.store, args.limit)
    work = Path(tempfile.mkdtemp(prefix="miner-vtime-"))
    before = work / "before"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(before), args.before],
                   check=True, capture_output=True)
    try:
        trees = {"before": before, "after": ROOT}
        folders: dict[str, list[str]] = {}
        for label, tree in trees.items():
            out = work / f"tasks-{label}"
            lines = in_tree(tree, EXPORT, str(args.store), str(out), ",".join(ids),
                            args.mode if label == "after" else "", str(work / f"cache-{label}"))
            folders[label] = [str(out / line.split()[1]) for line in lines if not line.endswith("failed")]
        print(f"{len(ids)} task(s): {', '.join(Path(f).name for f in folders['after'])}")
        runs: dict[str, list[dict]] = {label: [] for label in trees}
        for round_no in range(args.rounds):
            for label, tree in trees.items():  # side by side: each round times both trees
                mode = args.mode if label == "after" else "shared"
                runs[label] += [json.loads(line) for line in in_tree(tree, TIME, mode, *folders[label])]
            print(f"round {round_no + 1}: " + ", ".join(
                f"{label} median {statistics.median(r['seconds'] for r in runs[label]):.2f} s" for label in trees))
        medians = {label: statistics.median(r["seconds"] for r in runs[label]) for label in trees}
        for label in trees:
            rewards = sorted({r["reward"] for r in runs[label]}, key=str)
            seconds = [r["seconds"] for r in runs[label]]
            print(f"{label} ({args.before if label == 'before' else 'HEAD'}, {args.mode if label == 'after' else 'in the agent container'}): "
                  f"median {medians[label]:.2f} s, range {min(seconds):.2f}-{max(seconds):.2f} s over "
                  f"{len(seconds)} runs; rewards {rewards}")
        print(f"ratio after/before: {medians['after'] / medians['before']:.2f}x")
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(before)], capture_output=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
