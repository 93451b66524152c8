"""Exported tasks under the reference harness, Harbor 0.25: lint, oracle and nop runs.

Marked `harbor`. The harness lives in its own venv (Python >= 3.12): $MINER_HARBOR_VENV, default
~/.cache/miner/harbor-venv (.ci/harbor-setup.sh creates it). Skipped, with the reason printed,
only when the harness, the Docker engine or its compose plugin is unavailable.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from test_export import DOCKER_SKIP, FAMILIES, exported_folders

HARBOR_VENV = Path(os.environ.get("MINER_HARBOR_VENV", Path.home() / ".cache" / "miner" / "harbor-venv"))
HARBOR = HARBOR_VENV / "bin" / "harbor"
RUN_TIMEOUT = 1800


def harbor_reason() -> str | None:
    if not HARBOR.is_file():
        return f"the Harbor harness is not installed at {HARBOR} (run .ci/harbor-setup.sh)"
    if DOCKER_SKIP:
        return f"no Docker: {DOCKER_SKIP}"
    compose = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True)
    if compose.returncode != 0:
        return "the docker compose plugin is missing (see docker-engine.md, section 2)"
    return None


SKIP = harbor_reason()
if SKIP:
    print(f"\ntest_harbor: skipped: {SKIP}")
pytestmark = [pytest.mark.harbor, pytest.mark.docker, pytest.mark.skipif(SKIP is not None, reason=str(SKIP))]


def harbor(*args: str | Path, timeout: float = RUN_TIMEOUT) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200"}
    return subprocess.run([str(HARBOR), *map(str, args)], capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture(scope="module")
def dataset(mined_store: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A folder of Harbor tasks, one exported task per inversion family mined from fixtures/
    (the session's shared export), and the family of each task folder."""
    folders = exported_folders(mined_store, tmp_path_factory)
    assert set(FAMILIES) <= set(folders), f"families mined: {sorted(folders)}"
    parents = {folder.parent for folder in folders.values()}
    assert len(parents) == 1 and len(list(parents.pop().iterdir())) == len(folders)
    out = next(iter(folders.values())).parent
    return out, {folder.name: family for family, folder in folders.items()}


def rewards(jobs: Path) -> dict[str, float]:
    """Reward of each trial of the (single) job in `jobs`, by task folder name."""
    found = {}
    for result in jobs.glob("*/*/result.json"):
        data = json.loads(result.read_text())
        task = Path(data["task_id"]["path"]).name if isinstance(data.get("task_id"), dict) else data.get("task_name")
        reward = ((data.get("verifier_result") or {}).get("rewards") or {}).get("reward")
        found[task] = reward
    return found


def test_lint_reports_only_the_shared_verifier(dataset) -> None:
    out, names = dataset
    done = harbor("lint", *sorted(out / name for name in names), "--json", timeout=300)
    findings = json.loads(done.stdout)
    assert {f["rule"] for f in findings} <= {"shared-verifier"}, findings
    assert len(findings) == len(names)  # one shared-verifier note a task, nothing else


def assert_run_scores(out: Path, names: dict[str, str], agent: str, expected: float, jobs: Path) -> None:
    """`harbor run` of every task folder in `out` with `agent`: each task (by folder name, labelled
    by `names`) has one trial and scores `expected`."""
    done = harbor("run", "-p", out, "-a", agent, "-o", jobs, "-n", "2")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    got = rewards(jobs)
    assert set(got) == set(names), (got, done.stdout[-2000:])
    wrong = {f"{names[task]} ({task})": reward for task, reward in got.items() if reward != expected}
    assert not wrong, f"{agent} should score {expected}: {wrong}"


@pytest.mark.parametrize("agent, expected", [("oracle", 1.0), ("nop", 0.0)])
def test_run_scores_every_family(dataset, tmp_path: Path, agent: str, expected: float) -> None:
    out, names = dataset
    assert_run_scores(out, names, agent, expected, tmp_path / "jobs")
