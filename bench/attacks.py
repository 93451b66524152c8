"""Every known shortcut against every task of a store: the table for BENCHMARKS.md (issue 11).

    python bench/attacks.py --store /tmp/att [--out /tmp/att-harbor] [--jobs 2] [--only ID]... [--per-type N]
                            [--results DIR]

Exports the store's tasks to Harbor folders (kept when already there), runs `miner check --attacks`'s
engine (miner.attacks) over all of them, and prints: per task the baseline and the shortcuts that
scored above 0; per shortcut how many tasks it scored on; the totals; and what the trusted runtime
costs per task: the verifier's time after solve.sh, the part of it spent on the runtime list (the
boot tool) and on the two system checks, and the bytes the trusted runtime adds to tests/.

With --results, each task's report is written there as it finishes (one JSON file a task, with the
commit of miner that attacked it) and a task already reported there is not attacked again: a sweep
of hours can stop and resume across runs, and the tables cover every report in the folder. Tasks
are attacked one inversion type at a time in turn, so a sweep cut short still covers every type.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from miner.attacks import attack_tasks, load_catalogue, report_json
from miner.export import ExportOptions, export_tasks, select_tasks
from miner.store import Store

ADDED_FILES = ("boot", "runtime.txt", "verifier_system.py")


def added_bytes(folder: Path) -> int:
    """Bytes of tests/ that the trusted runtime adds: its files and the manifest's system part."""
    tests = folder / "tests"
    manifest = json.loads((tests / "manifest.json").read_text())
    system = len(json.dumps({"system": manifest.get("system")}, indent=1, sort_keys=True))
    return system + sum((tests / name).stat().st_size for name in ADDED_FILES if (tests / name).is_file())


def phases(output: str) -> dict[str, float]:
    """Seconds of the trusted runtime's steps, read from the verifier's own lines."""
    runtime = re.search(r"runtime list checked in (\d+) ms", output)
    system = [float(s) for s in re.findall(r"system checked .* in ([0-9.]+)s", output)]
    return {"runtime": int(runtime.group(1)) / 1000 if runtime else 0.0, "system": sum(system)}


def commit() -> str:
    """The commit of miner running the sweep, `+dirty` when its tree has changes."""
    def git(*argv: str) -> str:
        return subprocess.run(["git", *argv], cwd=Path(__file__).parent, capture_output=True, text=True).stdout
    return git("rev-parse", "--short", "HEAD").strip() + ("+dirty" if git("status", "--porcelain", "miner") else "")


def round_robin(names: list[str], types: dict[str, str]) -> list[str]:
    """Task folders ordered one inversion type at a time in turn."""
    queues: dict[str, list[str]] = {}
    for name in names:
        queues.setdefault(types.get(name, ""), []).append(name)
    order: list[str] = []
    while any(queues.values()):
        order += [q.pop(0) for q in queues.values() if q]
    return order


def task_entry(report, version: str = "") -> dict:
    """One task's report as JSON, with what the timing table needs from the oracle's run."""
    entry = report_json([report])["tasks"][0] | {"commit": version}
    if report.oracle is not None and report.oracle.reward is not None:
        entry["oracle_phases"] = phases(report.oracle.output)
        entry["added_bytes"] = added_bytes(Path(report.path))
    return entry


def print_tables(entries: list[dict]) -> dict:
    """The per-task and per-shortcut tables and the totals, from the tasks' JSON reports."""
    print("| task | untouched | solved | shortcuts | scored > 0 |\n|---|---|---|---|---|")
    for e in entries:
        scored = ", ".join(a["id"] + (" (harness)" if a["reach"] != "verifier" else "")
                           for a in e["attacks"] if (a["reward"] or 0) > 0) or "none"
        reward = lambda s: s["reward"] if s else "-"  # noqa: E731
        print(f"| {e['name'].split('/')[-1]} | {reward(e['nop'])} | {reward(e['oracle'])} | {len(e['attacks'])} | {scored} |")
    print("\n| shortcut | class | tasks | scored > 0 |\n|---|---|---|---|")
    by_id: dict[str, list] = {}
    for e in entries:
        for a in e["attacks"]:
            by_id.setdefault(a["id"], []).append(a)
    for attack_id, runs in by_id.items():
        reach = " (harness)" if runs[0]["reach"] != "verifier" else ""
        print(f"| {attack_id} | {runs[0]['class']}{reach} | {len(runs)} | {sum((a['reward'] or 0) > 0 for a in runs)} |")
    runs = [a for e in entries for a in e["attacks"]]
    baseline = [e for e in entries if not e["error"] and e["nop"] and e["oracle"]
                and e["nop"]["reward"] == 0 and e["oracle"]["reward"] == 1]
    totals = {"tasks": len(entries), "baseline_ok": len(baseline), "runs": len(runs),
              "scored": sum((a["reward"] or 0) > 0 for a in runs),
              "holes": sum((a["reward"] or 0) > 0 and a["reach"] == "verifier" for a in runs),
              "out_of_reach_scored": sum((a["reward"] or 0) > 0 and a["reach"] != "verifier" for a in runs),
              "median_run_s": statistics.median(a["seconds"] for a in runs) if runs else None}
    print(f"\ntotals: {totals}")
    solved = [e for e in entries if "oracle_phases" in e]
    if solved:
        print("verifier after solve.sh (container start, solve.sh, verifier): "
              f"median {statistics.median(e['oracle']['seconds'] for e in solved):.1f} s; runtime list median "
              f"{statistics.median(e['oracle_phases']['runtime'] for e in solved):.2f} s; two system checks median "
              f"{statistics.median(e['oracle_phases']['system'] for e in solved):.1f} s; added to tests/: median "
              f"{statistics.median(e['added_bytes'] for e in solved) / 1000:.0f} kB "
              f"(max {max(e['added_bytes'] for e in solved) / 1000:.0f} kB)")
    return totals


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=None, help="Harbor folders (default: STORE/../harbor-attacks)")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--only", action="append", default=[], help="shortcut ids or classes")
    parser.add_argument("--json", type=Path, default=None, help="also write the full report here")
    parser.add_argument("--results", type=Path, default=None,
                        help="one JSON report a task, written as each finishes; tasks reported there are skipped")
    parser.add_argument("--per-type", type=int, default=None,
                        help="at most this many tasks of each inversion type (default: every task)")
    args = parser.parse_args()
    out = args.out or args.store.parent / "harbor-attacks"
    with Store(args.store, create=False) as store:
        chosen = select_tasks(store)
        if args.per_type is not None:
            kept: list = []
            for task in chosen:
                if sum(t.type_id == task.type_id for t in kept) < args.per_type:
                    kept.append(task)
            chosen = kept
        summary = export_tasks(store, chosen, "harbor", out, ExportOptions())
    failed = [(o.name, o.reason) for o in summary.failed]
    print(f"exported {len(summary.outcomes)} task(s) to {out} ({len(failed)} failed){failed[:3] if failed else ''}")
    type_of = {t.id: t.type_id for t in chosen}
    types = {o.name: type_of[o.task_id] for o in summary.outcomes}
    folders = [out / name for name in round_robin([o.name for o in summary.outcomes if o.status != "failed"], types)]
    results = args.results
    if results is not None:
        results.mkdir(parents=True, exist_ok=True)
    done = {f.name: json.loads((results / f"{f.name}.json").read_text())
            for f in folders if results is not None and (results / f"{f.name}.json").is_file()}
    todo = [f for f in folders if f.name not in done]
    print(f"{len(done)} task(s) already reported in {results}, {len(todo)} to attack" if results else "", flush=True)
    start, version = time.monotonic(), commit()

    def finished(report) -> None:
        entry = task_entry(report, version)
        if results is not None:
            (results / f"{Path(report.path).name}.json").write_text(json.dumps(entry, indent=1))
        done[Path(report.path).name] = entry
        print(f"  {report.name}: baseline {'ok' if report.baseline_ok else 'WRONG'}, {len(report.holes)} hole(s)",
              flush=True)

    attack_tasks(todo, load_catalogue([]).select(args.only), jobs=args.jobs, on_task=finished)
    entries = [done[f.name] for f in folders if f.name in done]
    if args.json:
        args.json.write_text(json.dumps(entries, indent=1))
    print(f"\n{time.monotonic() - start:.0f} s\n")
    totals = print_tables(entries)
    return 1 if totals["holes"] or totals["baseline_ok"] < totals["tasks"] else 0


if __name__ == "__main__":
    sys.exit(main())
