"""Benchmark: where a candidate's time goes, and wall time per validated task as a multiple of suite time.

Usage:
    python bench/overhead.py [--repos repos.txt] [--budget N] [--compound K --compound-budget N] [--jobs N]
                             [--store DIR] [--cache-dir DIR] [--json]
    python bench/overhead.py --executor ray --two-nodes   # on a two-node Ray cluster started here
    python bench/overhead.py --store DIR --report-only      # the figures of a store crawled before

Crawls the repos file (the default `repos.txt`) into a fresh store (or --store), then prints from
`miner stats --json`'s numbers:
  - the per-candidate breakdown: seconds per phase (fork, break, protected-file check, predicted
    tests, the broken run, probes, hash scan, fix, fixed run, replay, sandbox removal, store
    writes), summed over every candidate and per candidate, with the share of each;
  - the phases before the candidates (fetch, build, healthy state, graph, choice, manifest);
  - per project: one healthy suite run, wall, validated tasks, suite runs per task and wall per
    validated task as a multiple of the suite time (the whole project wall time, build and
    healthy state included, over its validated tasks);
  - validated tasks per wall hour, per CPU hour (CPU seconds of this process and everything it
    starts: every local sandbox's commands, and with --two-nodes the Ray cluster it starts; see
    CpuMeter) and per core-hour (wall x --cores).
The sum of the phases exceeds the candidates' wall time when the replay runs beside the fix.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # ray_cluster

from miner.pipeline import CrawlOptions, crawl  # noqa: E402
from miner.store import Store  # noqa: E402
from miner.timing import CANDIDATE_PHASES, PROJECT_PHASES  # noqa: E402


CPUACCT = Path("/sys/fs/cgroup/cpuacct")


class CpuMeter:
    """CPU seconds of this process and everything it starts.

    Sandboxed commands run under bwrap, whose processes are not all waited for by their parents,
    so getrusage misses most of them: where the cgroup v1 cpuacct hierarchy is writable, this
    process moves into a cgroup of its own, which every descendant inherits (the per-command
    pids/cpu cgroups are other hierarchies), and its usage counter is read. Else getrusage.
    """

    def __init__(self) -> None:
        self.group: Path | None = None
        try:
            group = CPUACCT / f"miner-bench-{os.getpid()}"
            group.mkdir(exist_ok=True)
            (group / "cgroup.procs").write_text(str(os.getpid()))
            self.group = group
        except OSError:
            self.group = None
        self.start = self.read()

    def read(self) -> float:
        if self.group is not None:
            return int((self.group / "cpuacct.usage").read_text()) / 1e9
        own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime

    def seconds(self) -> float:
        return self.read() - self.start

    def close(self) -> None:
        """Leave the cgroup (back to the hierarchy's root) and remove it once empty."""
        if self.group is None:
            return
        try:
            (CPUACCT / "cgroup.procs").write_text(str(os.getpid()))
            self.group.rmdir()
        except OSError:
            pass  # a descendant still runs: an empty group is harmless and named after this pid


def figures(stats: dict, wall: float | None, cpu: float | None, cores: int) -> dict:
    """The benchmark's numbers from a store's stats."""
    phases: dict[str, float] = {}
    before: dict[str, float] = {}
    projects = []
    for repo, p in sorted(stats["by_project"].items()):
        for name, value in p.get("timings", {}).items():
            phases[name] = phases.get(name, 0.0) + value
        for name, value in p.get("project_timings", {}).items():
            before[name] = before.get(name, 0.0) + value
        suite, seconds, tasks = p.get("suite_seconds", 0.0), p.get("seconds", 0.0), p.get("validated", 0)
        projects.append({
            "project": repo, "status": p.get("status", ""), "tried": p["tried"], "validated": tasks,
            "suite_s": round(suite, 2), "wall_s": round(seconds, 1),
            "runs_per_task": round(p.get("suite_runs", 0.0) / tasks, 2) if tasks else None,
            "wall_per_task_x_suite": round(seconds / tasks / suite, 2) if tasks and suite else None,
        })
    tried, validated = stats["tried"], stats["validated"]
    total = sum(phases.values())
    candidate_wall = sum(p.get("candidate_seconds", 0.0) for p in stats["by_project"].values())
    return {
        "projects": len(projects), "tried": tried, "validated": validated,
        "wall_s": round(wall, 1) if wall is not None else None,
        "cpu_s": round(cpu, 1) if cpu is not None else None,
        "tasks_per_wall_hour": round(validated / wall * 3600, 1) if wall else None,
        "tasks_per_cpu_hour": round(validated / cpu * 3600, 1) if cpu else None,
        "tasks_per_core_hour": round(validated / (wall * cores) * 3600, 1) if wall else None,
        "cores": cores,
        "candidate_phases": {name: round(phases[name], 2) for name in _ordered(phases, CANDIDATE_PHASES)},
        "candidate_seconds": round(total, 2),
        "candidate_wall_s": round(candidate_wall, 2),
        "per_candidate": {name: round(phases[name] / tried, 3) for name in _ordered(phases, CANDIDATE_PHASES)}
        if tried else {},
        "project_phases": {name: round(before[name], 2) for name in _ordered(before, PROJECT_PHASES)},
        "per_project": projects,
    }


def _ordered(found: dict[str, float], known: tuple[str, ...]) -> list[str]:
    return [n for n in known if n in found] + sorted(n for n in found if n not in known)


def print_markdown(fig: dict) -> None:
    print(f"projects {fig['projects']}, candidates {fig['tried']}, validated {fig['validated']}, "
          f"wall {fig['wall_s']} s, CPU {fig['cpu_s']} s; validated tasks per wall hour {fig['tasks_per_wall_hour']}, "
          f"per CPU hour {fig['tasks_per_cpu_hour']}, per core-hour ({fig['cores']} cores) "
          f"{fig['tasks_per_core_hour']}\n")
    total, tried = fig["candidate_seconds"] or 1.0, max(fig["tried"], 1)
    print("| phase | seconds (all candidates) | per candidate | share |\n|---|---|---|---|")
    for name, value in fig["candidate_phases"].items():
        print(f"| {name} | {value} | {fig['per_candidate'].get(name, 0)} | {value / total:.0%} |")
    print(f"| total | {fig['candidate_seconds']} | {round(fig['candidate_seconds'] / tried, 2)} | |")
    print(f"| candidates' wall | {fig['candidate_wall_s']} | {round(fig['candidate_wall_s'] / tried, 2)} | |\n")
    print("| before the candidates | seconds (all projects) |\n|---|---|")
    for name, value in fig["project_phases"].items():
        print(f"| {name} | {value} |")
    print("\n| project | tried | validated | healthy suite (s) | wall (s) | suite runs / task "
          "| wall per task (x suite) |")
    print("|---|---|---|---|---|---|---|")
    for p in fig["per_project"]:
        print(f"| {p['project']} | {p['tried']} | {p['validated']} | {p['suite_s']} | {p['wall_s']} | "
              f"{p['runs_per_task']} | {p['wall_per_task_x_suite']} |")


@contextlib.contextmanager
def cluster(args: argparse.Namespace) -> Iterator[str | None]:
    """With --two-nodes: a head and a second node of --jobs CPUs each, started here (so their
    processes count in CpuMeter), stopped afterwards; else nothing."""
    if not args.two_nodes:
        yield None
        return
    from ray_cluster import local_cluster

    with local_cluster(cpus=(args.jobs, args.jobs)) as started:
        yield started.address


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repos", type=Path, default=Path("repos.txt"))
    parser.add_argument("--budget", type=int, default=None)
    parser.add_argument("--compound", type=int, default=0, help="crawl --compound K")
    parser.add_argument("--compound-budget", type=int, default=5, help="crawl --compound-budget N")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--backend", default="local")
    parser.add_argument("--executor", default="local", choices=("local", "ray"))
    parser.add_argument("--address", default=None, help="--executor ray: a cluster to join")
    parser.add_argument("--two-nodes", action="store_true",
                        help="--executor ray: start a head and a second node here, --jobs CPUs each")
    parser.add_argument("--cache-dir", type=Path, default=None, help="build in this shared cache (crawl --cache-dir)")
    parser.add_argument("--store", type=Path, default=None, help="default: a fresh temporary store")
    parser.add_argument("--report-only", action="store_true", help="print the figures of --store, crawl nothing")
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 1, help="cores the crawl may use")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="miner-bench-") as tmp:
        store = Store(args.store or Path(tmp) / "store")
        wall = cpu = None
        if not args.report_only:
            options = CrawlOptions(budget=args.budget, seed=args.seed, jobs=args.jobs, backend=args.backend,
                                   executor=args.executor, address=args.address, compound=args.compound,
                                   compound_budget=args.compound_budget,
                                   cache_dir=args.cache_dir.resolve() if args.cache_dir else None)
            start, meter = time.monotonic(), CpuMeter()
            with cluster(args) as address:
                options.address = address or options.address
                crawl(args.repos, store, options)
            wall, cpu = time.monotonic() - start, meter.seconds()
            meter.close()
        fig = figures(store.stats(), wall, cpu, args.cores)
        store.close()
    print(json.dumps(fig, indent=1)) if args.json else print_markdown(fig)


if __name__ == "__main__":
    main()
