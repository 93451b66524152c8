"""Benchmark: how many distinct problems a store holds per project, and how each category yields
(the figures issue 12 asks for).

Usage: python bench/problems.py --store mined [--before OTHER_STORE] [--json]

Per project: tasks and distinct F2P sets (single tasks; compounds counted apart), with the same
figures of a `--before` store next to them, and the distinct F2P sets of all its tasks, compounds
included (the distinct problems); per category of the catalogue: candidates tried,
validated, yield; compound tasks: candidates tried, validated, refused by rule, parts per task.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict
from pathlib import Path

from miner.catalogue import load_catalogue
from miner.store import Store


def category_of(type_id: str, catalogue: dict) -> str:
    if type_id.startswith("compound/"):
        return "compound"
    return catalogue[type_id].category if type_id in catalogue else "other"


def per_project(store: Store) -> dict[str, dict[str, int]]:
    """Per project: single tasks, their distinct F2P sets, compound tasks, and the distinct F2P sets
    of all its tasks (a compound whose union equals a stored single's set adds no problem there)."""
    sets: dict[str, set[frozenset[str]]] = defaultdict(set)
    every: dict[str, set[frozenset[str]]] = defaultdict(set)
    counts: Counter[str] = Counter()
    compounds: Counter[str] = Counter()
    for task in store.list_tasks():
        name = task.source.name
        every[name].add(frozenset(task.f2p))
        if task.parts:
            compounds[name] += 1
            continue
        counts[name] += 1
        sets[name].add(frozenset(task.f2p))
    return {name: {"tasks": counts[name], "distinct_f2p": len(sets[name]), "compounds": compounds[name],
                   "distinct_problems": len(every[name])}
            for name in sorted(set(counts) | set(compounds))}


def figures(store: Store, before: Store | None = None) -> dict:
    catalogue = load_catalogue()
    stats = store.stats()
    by_category: dict[str, Counter] = defaultdict(Counter)
    for type_id, bucket in stats["by_type"].items():
        row = by_category[category_of(type_id, catalogue)]
        row["tried"] += bucket["tried"]
        row["validated"] += bucket["validated"]
    compound_rules: Counter[str] = Counter()
    for type_id, bucket in stats["by_type"].items():
        if type_id.startswith("compound/"):
            compound_rules.update(bucket["by_rule"])
    tasks = store.list_tasks()
    compounds = [t for t in tasks if t.parts]
    return {
        "tasks": len(tasks), "single": len(tasks) - len(compounds), "compounds": len(compounds),
        "per_project": per_project(store), "before": per_project(before) if before else None,
        "by_category": {c: {**row, "yield": round(row["validated"] / row["tried"], 3) if row["tried"] else 0.0}
                        for c, row in sorted(by_category.items())},
        "compound_refused": dict(compound_rules),
        "compound_parts": dict(Counter(len(t.parts) for t in compounds)),
        "compound_difficulty": dict(Counter(t.difficulty for t in compounds)),
    }


def print_markdown(fig: dict) -> None:
    print(f"tasks {fig['tasks']} ({fig['single']} single, {fig['compounds']} compound)\n")
    before = fig["before"] or {}
    print("| project | tasks before | distinct F2P sets before | tasks after | distinct F2P sets after | compounds "
          "| distinct F2P sets of all tasks |")
    print("|---|---|---|---|---|---|---|")
    for name in sorted(set(fig["per_project"]) | set(before)):
        was, now = before.get(name, {}), fig["per_project"].get(name, {})
        print(f"| {name} | {was.get('tasks', '-')} | {was.get('distinct_f2p', '-')} | {now.get('tasks', 0)} | "
              f"{now.get('distinct_f2p', 0)} | {now.get('compounds', 0)} | {now.get('distinct_problems', 0)} |")
    print("\n| category | tried | validated | yield |\n|---|---|---|---|")
    for category, row in fig["by_category"].items():
        print(f"| {category} | {row['tried']} | {row['validated']} | {row['yield']:.0%} |")
    print(f"\ncompound tasks: {fig['compounds']} (parts: {json.dumps(fig['compound_parts'])}, difficulty: "
          f"{json.dumps(fig['compound_difficulty'])}); refused: {json.dumps(fig['compound_refused'])}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, default=Path("mined"))
    parser.add_argument("--before", type=Path, default=None, help="a store mined before, for comparison")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with Store(args.store, create=False) as store:
        before = Store(args.before, create=False) if args.before else None
        try:
            fig = figures(store, before)
        finally:
            if before is not None:
                before.close()
    if args.json:
        print(json.dumps(fig, indent=2))
    else:
        print_markdown(fig)


if __name__ == "__main__":
    main()
