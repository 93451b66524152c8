"""Benchmark: what a store's tasks are worth to a solver (the figures issue 10 asks for).

Usage: python bench/task_quality.py --store mined [--json]

Per store: tasks, candidates, yield, rejections by rule, evidence kinds, the share of tasks whose
fix embeds more than a short literal (a base64 payload, or more than MAX_FIX_LITERAL bytes of
heredocs and long strings), the share of file targets inside the project's test tree, and
distinct F2P sets per project next to its tasks.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter, defaultdict
from pathlib import Path

from miner.evidence import MAX_FIX_LITERAL, literal_bytes
from miner.models import Task
from miner.projectfiles import in_test_tree, test_file_of
from miner.store import Store

BASE64_PAYLOAD = re.compile(r"base64 -d|[A-Za-z0-9+/=]{76}")


def embeds_copy(task: Task) -> bool:
    """The fix carries more than a short literal: a base64 payload or too many literal bytes."""
    return bool(BASE64_PAYLOAD.search(task.fix_script)) or literal_bytes(task.fix_script) > MAX_FIX_LITERAL


def in_tests(task: Task) -> bool:
    """The break's target is a file of the project's test tree (rule 7)."""
    if task.target.kind not in ("config", "data", "service"):
        return False
    tests = [f for f in (test_file_of(t) for t in task.f2p + task.p2p) if f]
    return in_test_tree(task.target.path or task.target.name, tests)


def figures(store: Store) -> dict:
    tasks = store.list_tasks()
    stats = store.stats()
    f2p_sets: dict[str, set[frozenset[str]]] = defaultdict(set)
    per_repo: Counter[str] = Counter()
    for task in tasks:
        f2p_sets[task.repo].add(frozenset(task.f2p))
        per_repo[task.repo] += 1
    evidence = Counter(e.kind if hasattr(e, "kind") else str(e) for t in tasks for e in getattr(t, "evidence", []))
    files = [t for t in tasks if t.target.kind in ("config", "data", "service")]
    return {
        "tasks": len(tasks), "tried": stats["tried"], "validated": stats["validated"],
        "yield": round(stats["validated"] / stats["tried"], 3) if stats["tried"] else 0.0,
        "by_rule": dict(sorted(stats["by_rule"].items())),
        "evidence": dict(sorted(evidence.items())),
        "embeds_copy": sum(embeds_copy(t) for t in tasks),
        "file_targets": len(files), "file_targets_in_tests": sum(in_tests(t) for t in files),
        "per_project": {repo: {"tasks": per_repo[repo], "distinct_f2p": len(f2p_sets[repo])}
                        for repo in sorted(per_repo)},
        "by_family": dict(sorted(Counter(t.family for t in tasks).items())),
    }


def print_markdown(fig: dict) -> None:
    n = max(fig["tasks"], 1)
    print(f"tasks {fig['tasks']}, candidates {fig['tried']}, yield {fig['yield']:.0%}")
    print(f"rejections by rule: {json.dumps(fig['by_rule'])}")
    print(f"evidence kinds: {json.dumps(fig['evidence'])}")
    print(f"fix embeds more than a short literal: {fig['embeds_copy']} of {fig['tasks']} "
          f"({fig['embeds_copy'] / n:.0%})")
    print(f"file targets in the test tree: {fig['file_targets_in_tests']} of {fig['file_targets']} file targets "
          f"({fig['file_targets_in_tests'] / max(fig['file_targets'], 1):.0%})")
    print(f"tasks by family: {json.dumps(fig['by_family'])}\n")
    print("| project | tasks | distinct F2P sets |\n|---|---|---|")
    for repo, row in fig["per_project"].items():
        print(f"| {repo} | {row['tasks']} | {row['distinct_f2p']} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, default=Path("mined"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with Store(args.store, create=False) as store:
        fig = figures(store)
    print(json.dumps(fig, indent=1)) if args.json else print_markdown(fig)


if __name__ == "__main__":
    main()
