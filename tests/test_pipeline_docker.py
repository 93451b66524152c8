"""A real `miner crawl --backend docker` of the two Dockerized fixtures (a one-shot CLI and an HTTP
service, each with its own Dockerfile FROM the base image): the pipeline derives probes from the
containers, asks the backend for system and service targets, puts shared libraries and Debian
packages in the graph, and stores validated tasks of the system and service families.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import networkx as nx
import pytest
from conftest import DOCKER_SKIP, FIXTURES, run_miner, write_repos

from miner import graph as graphs
from miner.models import Task
from miner.sources import fetch, parse_source
from miner.store import Store

pytestmark = [pytest.mark.docker, pytest.mark.skipif(DOCKER_SKIP is not None, reason=f"no Docker: {DOCKER_SKIP}")]

DOCKERIZED = ("docker-cli", "docker-service")
BUDGET = "14"  # per project: enough for every family to get a turn (families are interleaved)


@pytest.fixture(scope="module")
def docker_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("docker-crawl")
    folders = []
    for name in DOCKERIZED:
        shutil.copytree(FIXTURES / name, root / name, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
        folders.append(root / name)
    repos = write_repos(root / "repos.txt", folders)
    done = run_miner(root / "store", "crawl", "--repos", repos, "--backend", "docker", "--budget", BUDGET)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return root / "store"


def tasks_of(store_root: Path, fixture: str) -> list[Task]:
    with Store(store_root, create=False) as store:
        return [t for t in store.list_tasks() if t.repo.endswith(fixture)]


def test_both_dockerized_projects_are_mined(docker_store: Path) -> None:
    with Store(docker_store, create=False) as store:
        projects = {Path(p["repo"]).name: p for p in store.projects()}
    assert {name: projects[name]["status"] for name in DOCKERIZED} == {name: "mined" for name in DOCKERIZED}


def test_system_tasks_from_the_cli_image(docker_store: Path) -> None:
    tasks = tasks_of(docker_store, "docker-cli")
    system = [t for t in tasks if t.family == "system"]
    assert {t.target.kind for t in system} >= {"syslib", "debpkg"}, [t.target.key for t in system]
    for task in system:
        assert task.backend == "docker" and task.f2p, task.id
    # the shared-library tasks were chosen by the graph: predicted radius covers what failed
    for task in (t for t in system if t.target.kind in ("syslib", "debpkg")):
        assert task.predicted_f2p is not None and set(task.f2p) <= set(task.predicted_f2p), task.id
        assert task.graph_depth is not None and task.graph_depth >= 2, (task.target.key, task.graph_depth)
    # the image's own command is a derived test that breaks with the library
    sqlite = [t for t in system if "sqlite3" in t.target.name]
    assert sqlite and all("probe::cmd" in t.f2p for t in sqlite), [(t.target.key, t.f2p) for t in sqlite]


def test_service_tasks_are_verified_by_derived_http_probes(docker_store: Path) -> None:
    tasks = tasks_of(docker_store, "docker-service")
    service = [t for t in tasks if t.family == "service"]
    roles = {t.target.attrs["role"] for t in service}
    assert roles >= {"port", "value", "dependency"}, roles
    for task in service:
        derived = [t for t in task.f2p if t.startswith("probe::http::") or t == "probe::healthcheck"]
        assert derived, (task.type_id, task.f2p)
        assert {p.id for p in task.probes} >= set(derived)


def test_healthy_state_holds_the_system_and_only_what_the_image_has(docker_store: Path) -> None:
    with Store(docker_store, create=False) as store:
        by_name = {Path(p["repo"]).name: store.healthy(p["key"]) for p in store.projects()}
    service, cli = by_name["docker-service"], by_name["docker-cli"]
    # the Dockerfile moves vendor/greetfmt.py into site-packages: not a protected project file
    assert "vendor/greetfmt.py" not in service.protected and "server.py" in service.protected
    assert {p.id for p in service.probes} >= {"probe::http::8000/", "probe::healthcheck"}
    assert cli.system is not None and "libsqlite3.so.0" in cli.system["libraries"]
    assert any(path.endswith(".so") for path in cli.system["import_loads"]["sqlite3"])


def test_graph_reaches_the_library_and_its_package(docker_store: Path, tmp_path: Path) -> None:
    with Store(docker_store, create=False) as store:
        project_row = next(p for p in store.projects() if p["repo"].endswith("docker-cli"))
        healthy = store.healthy(project_row["key"])
    project = fetch(parse_source(project_row["source_raw"], Path("/")), tmp_path / "sources")
    graph = graphs.build_graph(project, healthy)
    path = nx.shortest_path(graph, "test:tests/test_report.py::test_totals_per_region", "debpkg:libsqlite3-0")
    assert path[-3:] == ["module:sqlite3", "syslib:libsqlite3.so.0", "debpkg:libsqlite3-0"], path
    # a test that never reaches the aggregation does not depend on the library
    assert not nx.has_path(graph, "test:tests/test_report.py::test_config_is_read", "syslib:libsqlite3.so.0")
    # and `miner graph` draws it from the stored task
    task = next(t for t in tasks_of(docker_store, "docker-cli") if t.target.kind == "syslib")
    out = tmp_path / "task.json"
    done = run_miner(docker_store, "graph", task.id, "--format", "json", "-o", out, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    drawn = json.loads(out.read_text())
    kinds = {node["kind"] for node in drawn["nodes"]}
    assert {"syslib", "debpkg"} <= kinds


def test_a_system_task_replays(docker_store: Path) -> None:
    task = next(t for t in tasks_of(docker_store, "docker-cli") if t.target.kind == "debpkg")
    done = run_miner(docker_store, "replay", task.id, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "F2P matches the stored task" in done.stdout and "restored" in done.stdout
