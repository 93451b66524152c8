"""Benchmark: graph-guided against blind (random) selection, side by side in one run (issue 3).

Usage: python bench/selection.py [--repos repos.txt] [--budget 15] [--backend local] [--json]

Crawls the same repos file twice into fresh stores with the same candidate budget per project,
once with `--select graph` and once with `--select random` (the blind behaviour kept for this),
and prints for each: candidates tried, validated, yield, test-suite runs per validated task, mean
graph depth of the broken node below the observed F2P tests, and distinct F2P sets (per project,
summed). Depth is measured on the same graph for both modes after validation.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from crawl import figures, run  # bench/crawl.py, beside this file

from miner.pipeline import CrawlOptions
from miner.store import Store


def task_figures(store_dir: Path) -> dict:
    """Mean depth and distinct F2P sets of the tasks a crawl stored."""
    store = Store(store_dir, create=False)
    tasks = store.list_tasks()
    store.close()
    depths = [t.graph_depth for t in tasks if t.graph_depth is not None]
    distinct = {(t.repo, frozenset(t.f2p)) for t in tasks}
    by_family: dict[str, int] = {}
    for task in tasks:
        by_family[task.family] = by_family.get(task.family, 0) + 1
    return {
        "tasks": len(tasks),
        "mean_depth": round(statistics.mean(depths), 2) if depths else None,
        "depth_known": len(depths),
        "distinct_f2p_sets": len(distinct),
        "by_family": dict(sorted(by_family.items())),
    }


def measure(repos: Path, mode: str, budget: int, backend: str, root: Path) -> dict:
    store_dir = root / mode
    report, stats = run(repos, CrawlOptions(budget=budget, select=mode, backend=backend), store_dir)
    return {**figures(report, stats), **task_figures(store_dir)}


def print_table(results: dict[str, dict]) -> None:
    rows = [
        ("candidates tried", "tried"), ("validated", "validated"), ("yield", "yield"),
        ("suite runs per validated task", "suite_runs_per_task"), ("mean graph depth (observed F2P)", "mean_depth"),
        ("distinct F2P sets", "distinct_f2p_sets"), ("wall (s)", "wall_s"),
    ]
    print("| figure | graph | random | graph / random |\n|---|---|---|---|")
    for label, key in rows:
        g, r = results["graph"][key], results["random"][key]
        ratio = f"{g / r:.2f}" if isinstance(g, (int, float)) and isinstance(r, (int, float)) and r else "-"
        show = (lambda v: f"{v:.0%}") if key == "yield" else str
        print(f"| {label} | {show(g)} | {show(r)} | {ratio} |")
    print("\n| project | graph tried / validated | random tried / validated |\n|---|---|---|")
    for g, r in zip(results["graph"]["per_project"], results["random"]["per_project"]):
        print(f"| {g['project']} | {g['tried']} / {g['validated']} | {r['tried']} / {r['validated']} |")
    print("\nrejections by rule: graph " + json.dumps(results["graph"]["by_rule"])
          + ", random " + json.dumps(results["random"]["by_rule"]))
    print("tasks by family: graph " + json.dumps(results["graph"]["by_family"])
          + ", random " + json.dumps(results["random"]["by_family"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repos", type=Path, default=Path("repos.txt"))
    parser.add_argument("--budget", type=int, default=15)
    parser.add_argument("--backend", default="local")
    parser.add_argument("--keep", type=Path, default=None, help="keep both stores under this folder")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="miner-select-") as tmp:
        root = args.keep or Path(tmp)
        results = {mode: measure(args.repos, mode, args.budget, args.backend, root) for mode in ("graph", "random")}
    print(json.dumps(results, indent=1)) if args.json else print_table(results)


if __name__ == "__main__":
    main()
