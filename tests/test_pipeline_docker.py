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
from conftest import FIXTURES, HARBOR_AGENTS, run_miner, write_repos

from miner import graph as graphs
from miner.check import check_tasks
from miner.export import ExportOptions, export_tasks
from miner.models import Task
from miner.sources import fetch, parse_source
from miner.store import Store

pytestmark = [pytest.mark.docker, pytest.mark.slow]

DOCKERIZED = ("docker-cli", "docker-service")
BUDGET = "18"  # per project: enough for every family to get a turn (families are interleaved)
# The families these tests look at (the newer ones have their own tests in tests/test_catalogue_types.py).
TYPES = "deps,config,data,fs,env,system,service"


@pytest.fixture(scope="module")
def docker_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("docker-crawl")
    folders = []
    for name in DOCKERIZED:
        shutil.copytree(FIXTURES / name, root / name, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
        folders.append(root / name)
    repos = write_repos(root / "repos.txt", folders)
    done = run_miner(root / "store", "crawl", "--repos", repos, "--backend", "docker", "--budget", BUDGET,
                      "--types", TYPES)
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
        # the agent is told that the service's answer is checked, and how to ask it
        assert "`python3 server.py --config service.ini`, started there, must answer `GET http://127.0.0.1:8000/`" \
            in task.instruction, task.instruction


def test_healthy_state_holds_the_system_and_only_what_the_image_has(docker_store: Path) -> None:
    with Store(docker_store, create=False) as store:
        by_name = {Path(p["repo"]).name: store.healthy(p["key"]) for p in store.projects()}
    service, cli = by_name["docker-service"], by_name["docker-cli"]
    # the Dockerfile installs vendor/'s wheel into site-packages and removes vendor/: nothing of it is protected
    assert not any(p.startswith("vendor/") for p in service.protected) and "server.py" in service.protected
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


# --- export of Dockerized projects' tasks ------------------------------------------------------

IMAGE_PROBES = ("probe::cmd", "probe::healthcheck", "probe::http::")


def checked_by_image_probes(task: Task) -> bool:
    return any(t.startswith(IMAGE_PROBES) for t in task.f2p)


@pytest.fixture(scope="module")
def dockerized_export(docker_store: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Harbor folders of the Dockerized fixtures' tasks whose F2P holds a derived image probe: one
    system task of each project and one service task, by "<fixture>:<family>", and a task repaired
    from the Debian archive (rule 8's debian-archive evidence, its network declared) if none is."""
    chosen: dict[str, Task] = {}
    archive: dict[str, Task] = {}
    for fixture in DOCKERIZED:
        for task in tasks_of(docker_store, fixture):
            if task.family in ("system", "service") and checked_by_image_probes(task):
                chosen.setdefault(f"{fixture}:{task.family}", task)
            if task.family == "system" and "debian-archive" in {e.kind for e in task.evidence}:
                archive.setdefault(f"{fixture}:debian-archive", task)  # whichever checks fail
    assert set(chosen) >= {"docker-cli:system", "docker-service:system", "docker-service:service"}, sorted(chosen)
    assert archive, "no system task repaired from the Debian archive"
    if not any("debian-archive" in {e.kind for e in t.evidence} for t in chosen.values()):
        key, task = next(iter(archive.items()))
        chosen[key] = task
    out = tmp_path_factory.mktemp("dockerized-harbor")
    with Store(docker_store, create=False) as store:
        summary = export_tasks(store, list(chosen.values()), "harbor", out,
                               ExportOptions(cache_dir=tmp_path_factory.mktemp("dockerized-cache")))
    assert not summary.failed, [(o.task_id, o.reason) for o in summary.failed]
    names = {o.task_id: o.name for o in summary.outcomes}
    return {key: out / names[task.id] for key, task in chosen.items()}


def test_exported_dockerfile_rebuilds_the_projects_own_image(dockerized_export: dict[str, Path]) -> None:
    folder = dockerized_export["docker-service:service"]
    text = (folder / "environment" / "Dockerfile").read_text()
    assert "FROM scratch AS miner-context" in text and "FROM miner-project AS healthy" in text
    assert 'CMD ["python3", "server.py", "--config", "service.ini"]' in text
    assert text.endswith("HEALTHCHECK NONE\n")  # harnesses wait for health; the verifier runs the check
    image = json.loads((folder / "tests" / "manifest.json").read_text())["image"]
    assert image["ports"] == [8000] and image["workdir"] == "/app" and image["healthcheck"]
    spec = json.loads((folder / "tests" / "spec.json").read_text())
    assert any(t.startswith("probe::http::") for t in spec["f2p"]), spec["f2p"]


def test_exported_dockerized_tasks_check_out(dockerized_export: dict[str, Path]) -> None:
    """Built from their own files: nop scores 0 (a derived image probe fails), the fix scores 1."""
    results = check_tasks(list(dockerized_export.values()))
    assert len(results) == len(dockerized_export)
    for result in results:
        assert result.ok, f"{result.name}: {result.reason}\n{result.oracle.output[-2000:] if result.oracle else ''}"
        # Without the fix a derived image probe fails, or the verifier refuses outright: a system
        # break changes a file of the healthy manifest's system part (the interpreter symlink, a
        # library), which must be back as it was.
        assert result.nop.problems or any(t.startswith(IMAGE_PROBES) for t in result.nop.failing), (
            result.name, result.nop.failing, result.nop.output[-1000:])


def test_dockerized_tasks_export_to_every_format(docker_store: Path, dockerized_export: dict[str, Path],
                                                 tmp_path: Path) -> None:
    task_ids = [json.loads((f / "tests" / "spec.json").read_text())["task_id"] for f in dockerized_export.values()]
    with Store(docker_store, create=False) as store:
        tasks = [store.get_task(i) for i in task_ids]
        cache = tmp_path / "cache"
        tb1 = export_tasks(store, tasks, "terminal-bench", tmp_path / "tb1", ExportOptions(cache_dir=cache))
        jsonl = export_tasks(store, tasks, "jsonl", tmp_path / "jsonl", ExportOptions(cache_dir=cache))
    assert not tb1.failed and not jsonl.failed, [(o.task_id, o.reason) for o in tb1.failed + jsonl.failed]
    for outcome in tb1.outcomes:
        text = (tmp_path / "tb1" / outcome.name / "Dockerfile").read_text()
        assert "FROM miner-project AS tools" in text and "ADD environment/project.tar.gz /" in text
    records = [json.loads(line) for line in next((tmp_path / "jsonl").glob("*.jsonl")).read_text().splitlines()]
    assert len(records) == len(tasks)
    for record in records:  # built from a checkout of the project: its own COPY lines stay
        assert "miner-context" not in record["dockerfile"] and "FROM miner-project AS healthy" in record["dockerfile"]


def test_a_shortcut_of_every_class_scores_zero_on_a_docker_backend_task(dockerized_export: dict[str, Path]) -> None:
    """A shortcut of each class (miner check --attacks; tests/test_attacks.py runs the whole catalogue
    through the same boot tool and wrapper) against the service task of the Dockerized service: its
    verifier runs the image's own command and HTTP checks, on the project's own image."""
    from test_attacks import assert_refused_everywhere, one_per_class

    from miner.attacks import attack_tasks, load_catalogue, task_runner

    task = dockerized_export["docker-service:service"]
    sample = one_per_class(load_catalogue([]), task_runner(task))
    assert len(sample.attacks) >= 12
    reports = attack_tasks([task], sample, jobs=2)
    assert_refused_everywhere(reports, sample)


@pytest.mark.harbor
@pytest.mark.parametrize("agent, expected", HARBOR_AGENTS)
def test_harbor_scores_dockerized_tasks(harbor, dockerized_export: dict[str, Path], tmp_path: Path, agent: str,
                                        expected: float) -> None:
    """The reference harness on the system and service tasks: lint clean but for the shared verifier."""
    out = next(iter(dockerized_export.values())).parent
    names = {folder.name: key for key, folder in dockerized_export.items()}
    if agent == "oracle":
        findings = json.loads(harbor("lint", *sorted(out / n for n in names), "--json", timeout=300).stdout)
        assert {f["rule"] for f in findings} <= {"shared-verifier"}, findings
    harbor.assert_run_scores(out, names, agent, expected, tmp_path / "jobs")
