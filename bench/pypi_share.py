"""Benchmark: the share of PyPI projects (sdists with a test suite) that mine with no override.

Usage: python bench/pypi_share.py [--list bench/pypi_candidates.txt] [--work DIR] [--compare-tox]

For each `pypi:NAME==VERSION` line: fetch, build with miner's automatic test-dependency detection
(extras, requirements files, tox test environments, pytest plugins named in the configuration),
record the healthy state, and report whether it is minable (passing tests) or why it is skipped.
`--compare-tox` also builds every project whose tox environments add deps without them
(`tox_env=`, miner before it read tox), side by side in the same run.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from miner.healthy import SkipProject
from miner.ecosystems.python.install import tox_environments
from miner.models import Source
from miner.prepare import Prepared, prepare
from miner.sandbox import get_backend
from miner.sandbox.base import BuildError
from miner.sources import FetchError, parse_repos


def measure(line_file: Path, work: Path, compare_tox: bool = False) -> list[dict]:
    sources, errors = parse_repos(line_file)
    for error in errors:
        print(f"# {error}")
    backend = get_backend("local")
    rows = []
    for source in sources:
        row, prepared = measure_one(source, backend, work)
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        if compare_tox and prepared and (tox := tox_environments(prepared.project.path, version)).deps:
            without = source.model_copy(update={"overrides": {**source.overrides, "tox_env": ""}})
            row["without_tox"] = measure_one(without, backend, work)[0]
            row["tox_deps"] = " ".join(tox.deps)
        rows.append(row)
        print(f"| {row['source']} | {row['status']} | {row['detail']} | {row['seconds']} |"
              + (f" without tox deps: {row['without_tox']['detail']} (tox deps: {row['tox_deps']})"
                 if "without_tox" in row else ""), flush=True)
    return rows


def measure_one(source: Source, backend, work: Path) -> tuple[dict, Prepared | None]:
    start, row = time.monotonic(), {"source": source.raw, "status": "minable", "detail": ""}
    prepared = None
    try:
        prepared = prepare(source, backend, None, timeout=300, work=work)
        state = prepared.state
        tests = [k for k in state.outcomes if not k.startswith("probe::")]
        row["detail"] = f"{sum(state.outcomes[t] == 'passed' for t in tests)}/{len(tests)} tests pass, {len(state.flaky)} flaky"
        row["suite_s"] = round(state.suite_seconds, 1)
    except (FetchError, BuildError, SkipProject) as exc:
        row["status"], row["detail"] = "skipped", f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
    row["seconds"] = round(time.monotonic() - start, 1)
    return row, prepared


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", type=Path, default=Path(__file__).with_name("pypi_candidates.txt"))
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--compare-tox", action="store_true", help="also build without the tox deps")
    args = parser.parse_args()
    print("| source | status | detail | seconds |\n|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="miner-pypi-") as tmp:
        rows = measure(args.list, args.work or Path(tmp), args.compare_tox)
    minable = sum(r["status"] == "minable" for r in rows)
    print(f"\n{minable} of {len(rows)} PyPI projects mine with no override ({minable / max(len(rows), 1):.0%})")


if __name__ == "__main__":
    main()
