"""A real `miner crawl --backend docker` of fixtures/node-service, a Node.js HTTP service built from
the base image with Debian's nodejs: its suite runs under node's own test runner with per-test
results, its healthy run is traced, and its tasks come from what it reads (config, data, their
permissions) and what its image sets (variables), never from the Python environment miner lays
out beneath it.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from conftest import crawl_fixture, run_miner

from miner.models import HealthyState
from miner.store import Store

pytestmark = [pytest.mark.docker, pytest.mark.slow]

PYTHON_FAMILIES = {"deps", "virtualenv"}


@pytest.fixture(scope="module")
def node_crawl(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return crawl_fixture(tmp_path_factory.mktemp("node-crawl"), "node-service", "--backend", "docker")


def test_the_suite_runs_under_node_with_per_test_results(node_crawl: Path) -> None:
    with sqlite3.connect(node_crawl / "store" / "miner.db") as db:
        rows = db.execute("SELECT state_json FROM healthy_states").fetchall()
    assert len(rows) == 1
    healthy = HealthyState.model_validate_json(rows[0][0])
    assert healthy.test_command == "node --test test/"
    tests = {k: v for k, v in healthy.outcomes.items() if not k.startswith("probe::")}
    assert len(tests) == 8 and set(tests.values()) == {"passed"}
    assert "test/server.test.js::GET /quotes counts the quotes" in tests
    trace = healthy.system["trace"]
    assert {"config/quotd.json", "data/quotes.tsv"} <= {e["rel"] for e in trace["files"]}
    assert trace["runtime"]["programs"] == ["/usr/bin/node"] and "libnode.so.108" in trace["runtime"]["libraries"]
    assert trace["variables"]["QUOTD_CONFIG"] == "/srv/quotd/config/quotd.json"


def test_five_tasks_in_three_families_none_of_python(node_crawl: Path) -> None:
    with Store(node_crawl / "store", create=False) as store:
        tasks = store.list_tasks()
    families = {t.type_id.split("/")[0] for t in tasks}
    assert len(tasks) >= 5 and len(families) >= 3, [t.type_id for t in tasks]
    assert not families & PYTHON_FAMILIES
    assert "env/image-var-unset" in {t.type_id for t in tasks}
    instruction = (node_crawl / "store" / "tasks" / tasks[0].id / "instruction.md").read_text()
    assert "The Node.js project" in instruction and "node --test" in instruction and "venv" not in instruction


def test_an_image_variable_overridden_is_a_task(node_crawl: Path) -> None:
    """The type a full crawl refuses as a duplicate symptom of the unset one, validated on its own."""
    root = node_crawl
    done = run_miner(root / "wrong", "crawl", "--repos", root / "repos.txt", "--backend", "docker",
                     "--types", "env/image-var-wrong")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    with Store(root / "wrong", create=False) as store:
        tasks = store.list_tasks()
    assert {t.type_id for t in tasks} == {"env/image-var-wrong"}
    targets = {json.loads((root / "wrong" / "tasks" / t.id / "task.json").read_text())["target"]["name"]
               for t in tasks}
    assert targets & {"QUOTD_CONFIG", "TZ"}


def test_exported_node_tasks_check_out_and_resist_node_shortcuts(node_crawl: Path, tmp_path: Path) -> None:
    """Harbor folders whose verifier runs node's test runner: untouched 0, solved 1, and the
    shortcuts through node (a preload in NODE_OPTIONS, a wrapped node binary, NODE_PATH, Debian's
    node modules edited) score 0. The image has apt's unreadable `partial` folder, which the
    separate verifier's collect step must step over."""
    from miner.attacks import attack_tasks, load_catalogue
    from miner.check import check_tasks
    from miner.export import ExportOptions, export_tasks

    with Store(node_crawl / "store", create=False) as store:
        tasks = store.list_tasks()
        by_family = {t.type_id.split("/")[0]: t for t in tasks}
        summary = export_tasks(store, list(by_family.values()), "harbor", tmp_path / "harbor",
                               ExportOptions(cache_dir=tmp_path / "cache"))
    assert not summary.failed, [(o.task_id, o.reason) for o in summary.failed]
    folders = [tmp_path / "harbor" / o.name for o in summary.outcomes]
    spec = json.loads((folders[0] / "tests" / "spec.json").read_text())
    assert spec["runner"] == "node" and spec["node_args"] == ["--test"]
    for result in check_tasks(folders, jobs=2):
        assert result.ok, f"{result.name}: {result.reason}\n{result.oracle.output[-2000:] if result.oracle else ''}"
    catalogue = load_catalogue([]).select(["node-options-preload", "node-binary-wrapped", "node-path-shadow",
                                           "node-builtin-js-edited"])
    report = attack_tasks(folders[:1], catalogue, jobs=2)[0]
    assert report.baseline_ok and len(report.outcomes) == 4
    assert not report.holes and all(o.applied == 0 for o in report.outcomes), \
        [(o.attack.id, o.applied, o.reward, o.why) for o in report.outcomes]
