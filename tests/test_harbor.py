"""Exported tasks under the reference harness, Harbor 0.25: lint, oracle and nop runs.

Marked `harbor` (and so `slow`). The harness lives in its own venv (Python >= 3.12): $MINER_HARBOR_VENV,
default ~/.cache/miner/harbor-venv (.ci/harbor-setup.sh creates it). Skipped with the reason when the
harness, the Docker engine or its compose plugin is unavailable, failed when MINER_REQUIRE names harbor.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import LOCAL_FAMILIES

pytestmark = [pytest.mark.harbor, pytest.mark.docker]


@pytest.fixture(scope="module")
def dataset(harbor_export) -> tuple[Path, dict[str, str]]:
    """A folder of Harbor tasks, one exported task per inversion family mined from fixtures/
    (the session's shared export), and the family of each task folder."""
    folders = harbor_export.folders
    assert set(LOCAL_FAMILIES) <= set(folders), f"families mined: {sorted(folders)}"
    parents = {folder.parent for folder in folders.values()}
    assert len(parents) == 1 and len(list(parents.pop().iterdir())) == len(folders)
    out = next(iter(folders.values())).parent
    return out, {folder.name: family for family, folder in folders.items()}


def test_lint_reports_only_the_shared_verifier(harbor, dataset) -> None:
    out, names = dataset
    done = harbor("lint", *sorted(out / name for name in names), "--json", timeout=300)
    findings = json.loads(done.stdout)
    assert {f["rule"] for f in findings} <= {"shared-verifier"}, findings
    assert len(findings) == len(names)  # one shared-verifier note a task, nothing else


@pytest.mark.parametrize("agent, expected", [("oracle", 1.0), ("nop", 0.0)])
def test_run_scores_every_family(harbor, dataset, tmp_path: Path, agent: str, expected: float) -> None:
    out, names = dataset
    harbor.assert_run_scores(out, names, agent, expected, tmp_path / "jobs")
