"""Exported tasks under the reference harness, Harbor 0.26 (the newest release): lint, oracle and nop runs, on one task
of each family and of each evidence kind (rule 8: a task mined from a real PyPI sdist covers the
published source; the Docker crawl's tests, test_pipeline_docker.py, cover the Debian archive).
Each task runs on its own network route: none for an offline repair (its compose file), the
network for one that needs the index.

Marked `harbor` (and so `slow`). The harness lives in its own venv (Python >= 3.12): $MINER_HARBOR_VENV,
default ~/.cache/miner/harbor-venv (.ci/harbor-setup.sh creates it). Skipped with the reason when the
harness, the Docker engine or its compose plugin is unavailable, failed when MINER_REQUIRE names harbor.
"""

from __future__ import annotations

import json
import subprocess
import tomllib
from pathlib import Path

import pytest
from conftest import HARBOR_AGENTS, HARBOR_VENV, LOCAL_FAMILIES, need, pypi_reason, run_miner, write_repos

from miner.check import check_tasks

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


def test_lint_finds_nothing(harbor, dataset) -> None:
    """The tasks declare a separate verifier environment, so even Harbor's shared-verifier note
    (given to every task whose verifier runs in the agent's container) is absent."""
    out, names = dataset
    done = harbor("lint", *sorted(out / name for name in names), "--json", timeout=300)
    assert json.loads(done.stdout) == []


@pytest.mark.parametrize("agent, expected", HARBOR_AGENTS)
def test_run_scores_every_family(harbor, dataset, tmp_path: Path, agent: str, expected: float) -> None:
    out, names = dataset
    harbor.assert_run_scores(out, names, agent, expected, tmp_path / "jobs")


def evidence_kinds(folder: Path) -> set[str]:
    return set(tomllib.loads((folder / "task.toml").read_text())["metadata"]["evidence_kinds"])


def test_the_family_runs_cover_the_evidence_kinds_a_folder_offers(dataset) -> None:
    out, names = dataset
    assert set().union(*(evidence_kinds(out / name) for name in names)) >= {
        "reversible", "package-index", "project-files"}


def test_task_configs_load_as_harbors_own_model(harbor, harbor_export, mined_store: Path, tmp_path: Path) -> None:
    """task.toml, as exported and with the network declared as Harbor's policy (no-network, or an
    allowlist of the index's hosts), is a valid TaskConfig for Harbor itself."""
    from miner.export import ExportOptions, export_tasks
    from miner.store import Store

    folders = list(harbor_export.folders.values())
    declared = tmp_path / "declared"
    with Store(mined_store, create=False) as store:
        summary = export_tasks(store, list(harbor_export.chosen.values()), "harbor", declared,
                               ExportOptions(cache_dir=harbor_export.cache, network_policy="harbor"))
    assert not summary.failed, [(o.task_id, o.reason) for o in summary.failed]
    configs = [f / "task.toml" for f in folders] + sorted(declared.glob("*/task.toml"))
    code = ("import sys, tomllib\nfrom harbor.models.task.config import TaskConfig\n"
            "for path in sys.argv[1:]:\n"
            "    config = TaskConfig.model_validate(tomllib.load(open(path, 'rb')))\n"
            "    env, package = config.environment, config.task\n"
            "    print(env.network_mode.value, ','.join(env.allowed_hosts or []), config.schema_version,\n"
            "          package.org, package.version, package.authors[0].name, len(package.keywords))\n")
    done = subprocess.run([str(HARBOR_VENV / "bin" / "python"), "-c", code, *map(str, configs)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert {line.split(" ")[0] for line in lines[:len(folders)]} == {"public"}  # the default export
    declared_modes = lines[len(folders):]
    assert {line.split(" ")[0] for line in declared_modes} == {"no-network", "allowlist"}
    assert all("pypi.org" in line for line in declared_modes if line.startswith("allowlist"))
    # the current schema's [task] package: ORG/NAME, version, authors, keywords
    assert {tuple(line.split(" ")[2:6]) for line in lines} == {("1.4", "miner", "1.0.0", "miner")}
    assert all(int(line.split(" ")[6]) >= 2 for line in lines)


# -- the published source: a real PyPI sdist -----------------------------------------------------------

SDIST = "pypi:wonderwords==3.0.1"  # its code reads word lists (wonderwords/assets/*.txt) shipped in the sdist
SDIST_TYPES = "data/truncate,data/corrupt-bytes"


@pytest.fixture(scope="module")
def sdist_tasks(harbor, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A crawl of a real sdist for the types only its published source can repair, exported to Harbor."""
    need("pypi", pypi_reason())
    root = tmp_path_factory.mktemp("sdist")
    repos = write_repos(root / "repos.txt", [SDIST])
    done = run_miner(root / "store", "crawl", "--repos", repos, "--types", SDIST_TYPES, "--budget", "2")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = root / "harbor"
    done = run_miner(root / "store", "export", "--format", "harbor", "-o", out, "--evidence", "published-source")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert list(out.iterdir()), "no task repaired from the published source was mined"
    return out


def test_a_published_source_task_checks_out_on_its_route(sdist_tasks: Path) -> None:
    """miner check: nop 0 offline, the oracle 1 with the network the task declares (pip downloads the sdist)."""
    for folder in sdist_tasks.iterdir():
        meta = tomllib.loads((folder / "task.toml").read_text())["metadata"]
        assert meta["evidence_kinds"] == ["published-source"] and meta["repair_network"] == "allowlist"
        assert "pip download" in (folder / "solution" / "solve.sh").read_text()
    results = check_tasks([sdist_tasks])
    assert results and all(r.ok for r in results), [(r.name, r.reason) for r in results]


@pytest.mark.parametrize("agent, expected", HARBOR_AGENTS)
def test_harbor_scores_a_published_source_task(harbor, sdist_tasks: Path, tmp_path: Path, agent: str,
                                                expected: float) -> None:
    names = {folder.name: "published-source" for folder in sdist_tasks.iterdir()}
    harbor.assert_run_scores(sdist_tasks, names, agent, expected, tmp_path / "jobs")
