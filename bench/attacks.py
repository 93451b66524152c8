"""Every known shortcut against every task of a store: the table for BENCHMARKS.md (issue 11).

    python bench/attacks.py --store /tmp/att [--out /tmp/att-harbor] [--jobs 2] [--only ID]... [--per-type N]

Exports the store's tasks to Harbor folders (kept when already there), runs `miner check --attacks`'s
engine (miner.attacks) over all of them, and prints: per task the baseline and the shortcuts that
scored above 0; per shortcut how many tasks it scored on; the totals; and what the trusted runtime
costs per task: the verifier's time after solve.sh, the part of it spent on the runtime list (the
boot tool) and on the two system checks, and the bytes the trusted runtime adds to tests/.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=None, help="Harbor folders (default: STORE/../harbor-attacks)")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--only", action="append", default=[], help="shortcut ids or classes")
    parser.add_argument("--json", type=Path, default=None, help="also write the full report here")
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
    folders = [out / o.name for o in summary.outcomes if o.status != "failed"]
    start = time.monotonic()
    reports = attack_tasks(folders, load_catalogue([]).select(args.only), jobs=args.jobs,
                           on_task=lambda r: print(f"  {r.name}: baseline {'ok' if r.baseline_ok else 'WRONG'}, "
                                                   f"{len(r.holes)} hole(s)", flush=True))
    data = report_json(reports)
    if args.json:
        args.json.write_text(json.dumps(data, indent=1))
    print(f"\n{time.monotonic() - start:.0f} s\n")
    print("| task | untouched | solved | shortcuts | scored > 0 |\n|---|---|---|---|---|")
    for r in reports:
        scored = ", ".join(o.attack.id + (" (harness)" if o.attack.reach != "verifier" else "")
                           for o in r.outcomes if o.scored) or "none"
        print(f"| {r.name.split('/')[-1]} | {r.nop.reward if r.nop else '-'} | {r.oracle.reward if r.oracle else '-'}"
              f" | {len(r.outcomes)} | {scored} |")
    print("\n| shortcut | class | tasks | scored > 0 |\n|---|---|---|---|")
    by_id: dict[str, list] = {}
    for r in reports:
        for o in r.outcomes:
            by_id.setdefault(o.attack.id, []).append(o)
    for attack_id, outcomes in by_id.items():
        reach = " (harness)" if outcomes[0].attack.reach != "verifier" else ""
        scored = sum(o.scored for o in outcomes)
        print(f"| {attack_id} | {outcomes[0].attack.klass}{reach} | {len(outcomes)} | {scored} |")
    totals = data["totals"]
    print(f"\ntotals: {totals}")
    solved = [(r.oracle, Path(r.path)) for r in reports if r.oracle and r.oracle.reward is not None]
    if solved:
        verify = [s.seconds for s, _ in solved]
        steps = [phases(s.output) for s, _ in solved]
        size = [added_bytes(folder) for _, folder in solved]
        print("verifier after solve.sh (container start, solve.sh, verifier): "
              f"median {statistics.median(verify):.1f} s; "
              f"runtime list median {statistics.median(p['runtime'] for p in steps):.2f} s; two system checks "
              f"median {statistics.median(p['system'] for p in steps):.1f} s; added to tests/: median "
              f"{statistics.median(size) / 1000:.0f} kB (max {max(size) / 1000:.0f} kB)")
    return 1 if totals["holes"] or totals["baseline_ok"] < totals["tasks"] else 0


if __name__ == "__main__":
    sys.exit(main())
