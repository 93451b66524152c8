"""Benchmark: the same crawl on the local and the Docker backend, side by side in one run (issue 4).

Usage: python bench/backends.py [--repos bench/backends_repos.txt] [--budget 10] [--forks 5] [--json]

For each backend: projects mined, candidates tried, validated tasks, wall time per validated task,
sandbox start overhead per candidate (fork a fresh copy of the healthy environment, run `true`,
remove it; the mean of --forks rounds on the first project, next to the mean candidate wall time),
and unique bytes stored per task (the task folder in the store; on Docker also the broken snapshot
image built as healthy image + break layer, measured over the layers it adds).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from crawl import figures, run  # bench/crawl.py, beside this file

from miner.pipeline import CrawlOptions
from miner.prepare import prepare
from miner.sandbox import get_backend
from miner.sources import parse_repos
from miner.store import Store

DEFAULT_REPOS = Path(__file__).with_name("backends_repos.txt")


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def fork_overhead(backend_name: str, repos: Path, store_dir: Path, rounds: int) -> float:
    """Mean seconds to start a fresh sandbox from the first project's healthy environment and remove it."""
    backend = get_backend(backend_name)
    store = Store(store_dir)
    env = prepare(parse_repos(repos)[0][0], backend, store, measure=False).env
    times = []
    for _ in range(rounds):
        start = time.monotonic()
        with backend.fork(env) as sandbox:
            sandbox.run("true", timeout=60)
        times.append(time.monotonic() - start)
    store.close()
    return statistics.mean(times)


def storage(backend_name: str, store_dir: Path, limit: int) -> dict:
    """Task folder bytes for every task; broken-image bytes for up to `limit` tasks (Docker)."""
    store = Store(store_dir)
    tasks = store.list_tasks()
    folders = [folder_bytes(store.task_dir(t.id)) for t in tasks]
    images = []
    if backend_name == "docker" and tasks:
        backend = get_backend("docker")
        by_repo: dict[str, object] = {}
        for task in tasks[:limit]:
            if task.repo not in by_repo:
                by_repo[task.repo] = prepare(task.source, backend, store, commit=task.commit, measure=False).env
            broken = backend.build_broken(by_repo[task.repo], task.break_script)
            images.append(broken.unique_bytes)
            backend.client.images.remove(broken.tag)
    store.close()
    return {"task_folder_bytes": round(statistics.mean(folders)) if folders else None,
            "broken_image_bytes": round(statistics.mean(images)) if images else None,
            "broken_image_bytes_max": max(images) if images else None, "images_measured": len(images)}


def measure(backend: str, repos: Path, budget: int, rounds: int, root: Path) -> dict:
    store_dir = root / backend
    report, stats = run(repos, CrawlOptions(budget=budget, backend=backend), store_dir)
    fig = figures(report, stats)
    fig["wall_per_task_s"] = round(fig["wall_s"] / fig["validated"], 1) if fig["validated"] else None
    per_candidate = [p.seconds / p.tried for p in report.projects if p.tried]
    fig["wall_per_candidate_s"] = round(statistics.mean(per_candidate), 1) if per_candidate else None
    fig["fork_s"] = round(fork_overhead(backend, repos, store_dir, rounds), 2)
    fig.update(storage(backend, store_dir, limit=12))
    return fig


def print_table(results: dict[str, dict]) -> None:
    rows = [("projects mined", "mined"), ("candidates tried", "tried"), ("validated tasks", "validated"),
            ("yield", "yield"), ("wall (s)", "wall_s"), ("wall per validated task (s)", "wall_per_task_s"),
            ("wall per candidate (s)", "wall_per_candidate_s"), ("sandbox start + removal per candidate (s)", "fork_s"),
            ("task folder bytes per task", "task_folder_bytes"), ("broken image unique bytes per task", "broken_image_bytes")]
    print("| figure | local | docker | docker / local |\n|---|---|---|---|")
    for label, key in rows:
        a, b = results["local"].get(key), results["docker"].get(key)
        ratio = f"{b / a:.2f}" if isinstance(a, (int, float)) and isinstance(b, (int, float)) and a else "-"
        show = (lambda v: f"{v:.0%}") if key == "yield" else (lambda v: "-" if v is None else str(v))
        print(f"| {label} | {show(a)} | {show(b)} | {ratio} |")
    for backend in ("local", "docker"):
        by_family: dict[str, list[int]] = {}
        for type_id, v in results[backend]["by_type"].items():
            family = by_family.setdefault(type_id.split("/")[0], [0, 0])
            family[0] += v["tried"]
            family[1] += v["validated"]
        print(f"\n{backend}: tried/validated by family " + json.dumps({k: f"{t}/{v}" for k, (t, v) in sorted(by_family.items())}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repos", type=Path, default=DEFAULT_REPOS)
    parser.add_argument("--budget", type=int, default=10)
    parser.add_argument("--forks", type=int, default=5)
    parser.add_argument("--keep", type=Path, default=None, help="keep both stores under this folder")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="miner-backends-") as tmp:
        root = args.keep or Path(tmp)
        results = {b: measure(b, args.repos, args.budget, args.forks, root) for b in ("local", "docker")}
    print(json.dumps(results, indent=1)) if args.json else print_table(results)


if __name__ == "__main__":
    main()
