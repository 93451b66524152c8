"""Benchmark: crawl a repos file into a fresh store and print the figures BENCHMARKS.md records.

Usage: python bench/crawl.py [--repos repos.txt] [--budget N] [--select graph|random] [--backend local]

Figures: projects (mined / skipped), candidates, validated tasks, yield per inversion type,
test-suite runs per validated task, and wall time per validated task as a multiple of that
project's healthy suite time.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from miner.pipeline import CrawlOptions, CrawlReport, crawl
from miner.store import Store


def run(repos: Path, options: CrawlOptions, store_dir: Path) -> tuple[CrawlReport, dict]:
    store = Store(store_dir)
    report = crawl(repos, store, options)
    return report, store.stats()


def figures(report: CrawlReport, stats: dict) -> dict:
    projects = []
    for p in report.projects:
        per_task = p.seconds / p.validated if p.validated else None
        projects.append({
            "project": p.repo or p.source, "status": p.status, "reason": p.reason[:80], "tried": p.tried,
            "validated": p.validated, "suite_s": round(p.suite_seconds, 2), "wall_s": round(p.seconds, 1),
            "runs_per_task": round(p.suite_runs / p.validated, 2) if p.validated else None,
            "wall_per_task_x_suite": round(per_task / p.suite_seconds, 1) if per_task and p.suite_seconds else None,
        })
    validated = sum(p.validated for p in report.projects)
    return {
        "projects": len(report.projects),
        "mined": sum(p.status == "mined" for p in report.projects),
        "tried": stats["tried"], "validated": stats["validated"],
        "yield": round(stats["validated"] / stats["tried"], 3) if stats["tried"] else 0.0,
        "suite_runs_per_task": round(sum(p.suite_runs for p in report.projects) / validated, 2) if validated else None,
        "wall_s": round(report.seconds, 1),
        "by_type": {t: {"tried": v["tried"], "validated": v["validated"]} for t, v in sorted(stats["by_type"].items())},
        "by_rule": stats["by_rule"],
        "per_project": projects,
    }


def print_markdown(fig: dict) -> None:
    print(f"projects {fig['projects']} (mined {fig['mined']}), candidates {fig['tried']}, validated {fig['validated']}, "
          f"yield {fig['yield']:.0%}, suite runs per validated task {fig['suite_runs_per_task']}, wall {fig['wall_s']}s\n")
    print("| project | status | tried | validated | healthy suite (s) | suite runs / task | wall per task (x suite) |")
    print("|---|---|---|---|---|---|---|")
    for p in fig["per_project"]:
        status = p["status"] if p["status"] == "mined" else f"skipped: {p['reason']}"
        print(f"| {p['project']} | {status} | {p['tried']} | {p['validated']} | {p['suite_s']} | "
              f"{p['runs_per_task']} | {p['wall_per_task_x_suite']} |")
    print("\n| inversion type | tried | validated | yield |\n|---|---|---|---|")
    for t, v in fig["by_type"].items():
        print(f"| {t} | {v['tried']} | {v['validated']} | {v['validated'] / v['tried']:.0%} |" if v["tried"] else f"| {t} | 0 | 0 | - |")
    print(f"\nrejections by rule: {json.dumps(fig['by_rule'])}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repos", type=Path, default=Path("repos.txt"))
    parser.add_argument("--budget", type=int, default=None)
    parser.add_argument("--select", default="graph")
    parser.add_argument("--backend", default="local")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--store", type=Path, default=None, help="default: a fresh temporary store")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    options = CrawlOptions(budget=args.budget, select=args.select, backend=args.backend, jobs=args.jobs)
    with tempfile.TemporaryDirectory(prefix="miner-bench-") as tmp:
        report, stats = run(args.repos, options, args.store or Path(tmp) / "store")
    fig = figures(report, stats)
    print(json.dumps(fig, indent=1)) if args.json else print_markdown(fig)


if __name__ == "__main__":
    main()
