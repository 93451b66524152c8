"""A store's tasks as a publishable dataset, checked by Harbor's own tools: the figures for BENCHMARKS.md (issue 25).

    python bench/dataset.py --store mined --out /tmp/ds [--sample 6] [--harbor ~/.cache/miner/harbor-venv/bin/harbor]

Side by side, in one run, on every task of the store:
  1. `miner export --format harbor --dataset bench/env-repair` (dataset.toml + card): time per task;
  2. Harbor's checks of that folder: `harbor lint` on every task (findings), `harbor sync` (digests
     Harbor would change: must be 0), Harbor's DatasetManifest model reading dataset.toml;
  3. `harbor run` with oracle and nop on a sample (one task per family, up to --sample): rewards;
  4. `miner export --format hf` of the same tasks, `datasets.load_dataset` on it and `miner import`
     back: rows, and whether names and digests are the same;
  5. `miner revalidate` on a dataset of the sample: verdicts and time per task (no-cache rebuilds);
  6. `miner check --ladder` on the sample: the label on the exported task against the one measured
     where it was mined.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from conftest import harbor_rewards  # noqa: E402 - the tests' reader of Harbor's job results

HARBOR = Path.home() / ".cache" / "miner" / "harbor-venv" / "bin" / "harbor"


def miner(store: Path, *args: str | Path) -> tuple[subprocess.CompletedProcess[str], float]:
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", "from miner.cli import main; main()", "--store", str(store), *map(str, args)],
                          capture_output=True, text=True, env={**__import__("os").environ, "COLUMNS": "200"})
    return done, time.monotonic() - start


def harbor(exe: Path, *args: str | Path, timeout: float = 3600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env={**__import__("os").environ, "NO_COLOR": "1", "COLUMNS": "200"})


def sample(folders: list[Path], size: int) -> list[Path]:
    """One folder per family (the first by name), up to `size`."""
    chosen: dict[str, Path] = {}
    for folder in folders:
        family = tomllib.loads((folder / "task.toml").read_text())["metadata"]["inversion_family"]
        chosen.setdefault(family, folder)
    return sorted(chosen.values())[:size]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--sample", type=int, default=6)
    parser.add_argument("--harbor", type=Path, default=HARBOR)
    args = parser.parse_args()
    from miner.export.dataset import dataset_tasks, task_digest

    shutil.rmtree(args.out, ignore_errors=True)
    ds, hf, back, small = (args.out / name for name in ("harbor", "hf", "back", "sample"))
    done, seconds = miner(args.store, "export", "--format", "harbor", "--out", ds, "--dataset", "bench/env-repair")
    tasks = dataset_tasks(ds)
    print(f"1. export --dataset: {len(tasks)} tasks in {seconds:.0f}s ({seconds / max(len(tasks), 1):.1f}s a task), "
          f"exit {done.returncode}{'' if done.returncode == 0 else ': ' + done.stderr[-500:]}")
    lint = harbor(args.harbor, "lint", *[t.folder for t in tasks], "--json")
    findings = json.loads(lint.stdout or "[]")
    synced = harbor(args.harbor, "sync", ds)
    changed = [line for line in synced.stdout.splitlines() if line.startswith("Updated")]
    python = args.harbor.parent / "python"
    model = subprocess.run([str(python), "-c", "import sys; from harbor.models.dataset.manifest import "
                            "DatasetManifest as M; m = M.from_toml_file(sys.argv[1]); print(len(m.tasks))",
                            str(ds / "dataset.toml")], capture_output=True, text=True)
    version = harbor(args.harbor, "--version").stdout.strip()
    print(f"2. harbor {version}: lint findings {len(findings)}; sync: {changed[0] if changed else synced.stdout[-300:]};"
          f" DatasetManifest reads {model.stdout.strip() or model.stderr[-300:]} tasks")
    picked = sample([t.folder for t in tasks], args.sample)
    run_dir = args.out / "run"
    run_dir.mkdir(parents=True)
    for folder in picked:
        shutil.copytree(folder, run_dir / folder.name)
    for agent in ("oracle", "nop"):
        start = time.monotonic()
        ran = harbor(args.harbor, "run", "-p", run_dir, "-a", agent, "-o", args.out / f"jobs-{agent}", "-n", "2")
        got = harbor_rewards(args.out / f"jobs-{agent}")
        print(f"3. harbor run -a {agent} on {len(picked)} tasks (one per family): rewards "
              f"{sorted(got.values(), key=str)} in {time.monotonic() - start:.0f}s (exit {ran.returncode})")
    done, seconds = miner(args.store, "export", "--format", "hf", "--out", hf, "--dataset", "bench/env-repair")
    from datasets import load_dataset

    rows = list(load_dataset(str(hf), split="train", cache_dir=str(args.out / "hf-cache")))
    imported, import_seconds = miner(args.store, "import", hf, "-o", back)
    same = {r["name"]: r["digest"] for r in rows} == {t.name: task_digest(t.folder) for t in dataset_tasks(back)}
    same_as_harbor = {r["name"]: r["digest"] for r in rows} == {t.name: task_digest(t.folder) for t in tasks}
    print(f"4. export --format hf: {len(rows)} rows in {seconds:.0f}s; import back in {import_seconds:.0f}s "
          f"(exit {imported.returncode}): same names and digests as the rows {same}, as the Harbor export {same_as_harbor}")
    names = [f.name for f in picked]
    small.mkdir()
    for name in names:
        shutil.copytree(ds / name, small / name)
    from miner.export.dataset import author_table, write_dataset

    write_dataset(small, "bench/sample", "1.0.0", [author_table("miner")])
    start = time.monotonic()
    revalidated = subprocess.run([sys.executable, "-c", "from miner.cli import main; main()", "revalidate", str(small), "--json"],
                                 capture_output=True, text=True)
    verdicts = json.loads(revalidated.stdout or "[]")
    seconds = time.monotonic() - start
    print(f"5. revalidate {len(names)} tasks: {sum(v['ok'] for v in verdicts)} as exported, "
          f"{[v['reason'] for v in verdicts if not v['ok']]} decayed, {seconds:.0f}s "
          f"({seconds / max(len(names), 1):.0f}s a task), exit {revalidated.returncode}")
    start = time.monotonic()
    laddered = subprocess.run([sys.executable, "-c", "from miner.cli import main; main()", "check", "--ladder",
                               "--json", "--jobs", "2", str(small)], capture_output=True, text=True)
    results = json.loads(laddered.stdout or "[]")
    seconds = time.monotonic() - start
    print(f"6. check --ladder on the {len(names)} exported tasks ({seconds:.0f}s): "
          f"{sum(r['label'] == r['mined'] for r in results)} labelled as where they were mined; "
          + "; ".join(f"{r['name'].split('/')[-1]}: {r['mined'] or '-'} -> {r['label'] or r['error']}"
                      for r in results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
