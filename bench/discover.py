"""Benchmark: `miner discover --pypi` over a list of popular PyPI names: how many are kept, and why
the others are left out.

Usage: python bench/discover.py [--names bench/pypi_top_names.txt] [--work bench/out/discover] [--fresh] [--compare]

Runs the installed `miner discover --pypi NAMES --json` (its sdists go to WORK/store/cache, its
repos file to WORK/repos.txt) and prints the count kept, the reasons of the others grouped by
kind, and the wall time. A rerun resumes from WORK/repos.txt.state.jsonl unless --fresh.
--compare judges every fetched sdist both ways, side by side: pytest's own choice of test modules
(what discovery does) against the estimate from pytest's rules over the file list (what it did
before), with the verdicts that differ and the time each way takes.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
KINDS = [  # (kind, pattern on the reason), first match wins
    ("no test files in the sdist", r"no test files pytest would collect"),
    ("test-named files without tests", r"hold no test functions"),
    ("tests written for nose", r"written for nose"),
    ("compiled build step", r"compiled build step"),
    ("no sdist (wheels only)", r"no sdist"),
    ("no release supports this Python", r"supports Python"),
    ("not on the index", r"no project named"),
    ("sdist too large", r"the sdist is"),
    ("fetch failed", r"cannot unpack|pip download|fetch"),
    ("not checked (network)", r"^not checked"),
]


def kind_of(reason: str) -> str:
    return next((kind for kind, pattern in KINDS if re.search(pattern, reason)), "other: " + reason[:60])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--names", type=Path, default=HERE / "pypi_top_names.txt")
    parser.add_argument("--work", type=Path, default=HERE / "out" / "discover")
    parser.add_argument("--fresh", action="store_true", help="Forget the state of an earlier run.")
    parser.add_argument("--compare", action="store_true", help="Judge the fetched sdists with and without pytest.")
    args = parser.parse_args()
    if args.fresh and args.work.exists():
        shutil.rmtree(args.work)
    args.work.mkdir(parents=True, exist_ok=True)
    out = args.work / "repos.txt"
    miner = Path(sys.executable).parent / "miner"
    argv = [str(miner) if miner.is_file() else "miner", "--store", str(args.work / "store"), "discover",
            "--pypi", str(args.names), "--out", str(out), "--json"]
    start = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True)
    seconds = time.monotonic() - start
    if done.returncode != 0:
        print(done.stderr[-3000:], file=sys.stderr)
        return done.returncode
    records = json.loads(done.stdout)
    kept = [r for r in records if r["kept"]]
    left = Counter(kind_of(r["reason"]) for r in records if not r["kept"])
    resumed = sum(r["resumed"] for r in records)
    print(f"names checked: {len(records)} in {seconds:.0f}s ({resumed} from an earlier run)")
    print(f"kept: {len(kept)} ({100 * len(kept) / max(len(records), 1):.0f}%)")
    print("left out:")
    for kind, n in left.most_common():
        names = [r["name"] for r in records if not r["kept"] and kind_of(r["reason"]) == kind]
        print(f"  {n:4d}  {kind}: {', '.join(names)}")
    print(f"repos file: {out}")
    if args.compare:
        compare(sorted((args.work / "store" / "cache" / "sources" / "pypi").glob("*/src-*")))
    return 0


def compare(unpacked: list[Path]) -> None:
    """Each sdist judged by pytest's own answer and by the estimate from its rules, side by side."""
    from miner.discover import Options
    from miner.ecosystems.python.discover import assess, folder_listing

    seconds = {True: 0.0, False: 0.0}
    verdicts: dict[bool, dict[str, tuple[bool, str]]] = {True: {}, False: {}}
    for folder in unpacked:
        root = next((p for p in folder.iterdir() if p.is_dir()), folder) if len(list(folder.iterdir())) == 1 else folder
        for ask in (True, False):
            start = time.monotonic()
            verdicts[ask][folder.parent.name] = assess(folder_listing(root, ask_pytest=ask), Options())
            seconds[ask] += time.monotonic() - start
    kept = {ask: sum(v[0] for v in verdicts[ask].values()) for ask in (True, False)}
    print(f"sdists judged both ways: {len(unpacked)}")
    print(f"  pytest's own choice: {kept[True]} kept, {seconds[True]:.1f}s "
          f"({seconds[True] / max(len(unpacked), 1):.2f}s an sdist)")
    print(f"  estimate from rules: {kept[False]} kept, {seconds[False]:.1f}s")
    for name in sorted(verdicts[True]):
        (a, why_a), (b, why_b) = verdicts[True][name], verdicts[False][name]
        if a != b or why_a.split(" (")[0] != why_b.split(" (")[0]:
            print(f"  differs: {name}: pytest: {'kept' if a else 'left out'} ({why_a[:80]}); "
                  f"estimate: {'kept' if b else 'left out'} ({why_b[:80]})")


if __name__ == "__main__":
    sys.exit(main())
