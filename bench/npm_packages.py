"""Real npm packages crawled (issue 24): per package, the yield, the distinct failing-test sets and
the environment coverage (the packages of node_modules and the settings its tests reach, and how
many have a task).

    python bench/npm_packages.py --store /tmp/npm-bench [--repos bench/npm_packages.txt] [--reuse]

Crawls the repos file into the store (with --reuse, reads a store crawled before) and prints a
markdown table for BENCHMARKS.md: package, status (or the reason it was skipped), candidates tried,
tasks, yield, families, distinct F2P sets, nodes reached / with a task, the crawl's seconds.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from miner.coverage import project_coverage
from miner.store import Store


def crawl(store: Path, repos: Path) -> float:
    start = time.monotonic()
    subprocess.run([sys.executable, "-c", "from miner.cli import main; main()", "--store", str(store), "crawl",
                    "--repos", str(repos)],
                   check=False)
    return time.monotonic() - start


def table(store_path: Path) -> list[str]:
    rows = ["| package | status | tried | tasks | yield | families | distinct F2P sets | nodes reached / with a task | seconds |",
            "|---|---|---:|---:|---:|---|---:|---:|---:|"]
    with Store(store_path, create=False) as store:
        stats = store.stats()["by_project"]
        coverage = {c.repo: c for c in project_coverage(store)}
        for project in store.projects():
            repo = project["repo"]
            if project["status"] != "mined":
                rows.append(f"| {repo} | skipped: {project['reason'][:160]} | 0 | 0 | - | - | - | - | "
                            f"{project['seconds']:.0f} |")
                continue
            tasks = store.list_tasks(repo=repo)
            counts = stats.get(repo, {})
            tried = counts.get("tried", 0)
            families = ", ".join(sorted({t.family for t in tasks}))
            distinct = len({frozenset(t.f2p) for t in tasks})
            cov = coverage.get(repo)
            nodes = f"{cov.reached} / {cov.with_task}" if cov else "-"
            rows.append(f"| {repo} | mined | {tried} | {len(tasks)} | {len(tasks) / tried:.0%} | {families} | "
                        f"{distinct} | {nodes} | {project['seconds']:.0f} |" if tried else f"| {repo} | mined | 0 |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--repos", type=Path, default=Path(__file__).with_name("npm_packages.txt"))
    parser.add_argument("--reuse", action="store_true", help="read the store as it is, crawl nothing")
    args = parser.parse_args()
    seconds = 0.0 if args.reuse else crawl(args.store, args.repos)
    print("\n".join(table(args.store)))
    if seconds:
        print(f"\ncrawl: {seconds:.0f} s")


if __name__ == "__main__":
    main()
