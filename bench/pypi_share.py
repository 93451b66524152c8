"""Benchmark: the share of PyPI projects (sdists with a test suite) that mine with no override.

Usage: python bench/pypi_share.py [--list bench/pypi_candidates.txt] [--work DIR]

For each `pypi:NAME==VERSION` line: fetch, build with miner's automatic test-dependency detection
(extras, requirements files, pytest plugins named in the configuration), record the healthy
state, and report whether it is minable (passing tests) or why it is skipped.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from miner.healthy import SkipProject
from miner.prepare import prepare
from miner.sandbox import get_backend
from miner.sandbox.base import BuildError
from miner.sources import FetchError, parse_repos


def measure(line_file: Path, work: Path) -> list[dict]:
    sources, errors = parse_repos(line_file)
    for error in errors:
        print(f"# {error}")
    backend = get_backend("local")
    rows = []
    for source in sources:
        start, row = time.monotonic(), {"source": source.raw, "status": "minable", "detail": ""}
        try:
            state = prepare(source, backend, None, timeout=300, work=work).state
            tests = [k for k in state.outcomes if not k.startswith("probe::")]
            row["detail"] = f"{sum(state.outcomes[t] == 'passed' for t in tests)}/{len(tests)} tests pass, {len(state.flaky)} flaky"
            row["suite_s"] = round(state.suite_seconds, 1)
        except (FetchError, BuildError, SkipProject) as exc:
            row["status"], row["detail"] = "skipped", f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
        row["seconds"] = round(time.monotonic() - start, 1)
        rows.append(row)
        print(f"| {row['source']} | {row['status']} | {row['detail']} | {row['seconds']} |", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", type=Path, default=Path(__file__).with_name("pypi_candidates.txt"))
    parser.add_argument("--work", type=Path, default=None)
    args = parser.parse_args()
    print("| source | status | detail | seconds |\n|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="miner-pypi-") as tmp:
        rows = measure(args.list, args.work or Path(tmp))
    minable = sum(r["status"] == "minable" for r in rows)
    print(f"\n{minable} of {len(rows)} PyPI projects mine with no override ({minable / max(len(rows), 1):.0%})")


if __name__ == "__main__":
    main()
