"""The blind-repair ladder (miner.ladder, `miner ladder`): tasks of the session crawl labelled by
the first task-blind repair that repairs them, stored, filtered and counted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import crawl_fixture, run_miner

from miner.ladder import NEEDS_DIAGNOSIS, labels, load_ladder
from miner.store import Store

# What a blind repair can and cannot do, by inversion type: stale or corrupt bytecode goes with the
# caches; a variable exported in a startup file goes with the suspects; an unreadable file gets its
# owner's read back; a key gone from the project's own config is no reflex's to restore.
EXPECTED = {
    "env/pythonhome": "drop-variables",
    "env/poison-pythonpath": "drop-variables",
    "env/pythonwarnings-error": "drop-variables",
    "fs/unreadable": "reset-permissions",
    "config/missing-key": NEEDS_DIAGNOSIS,
    "config/wrong-type": NEEDS_DIAGNOSIS,
    "config/syntax-error": NEEDS_DIAGNOSIS,
    "virtualenv/stale-bytecode": "clear-caches",
    "virtualenv/bytecode-corrupt": "clear-caches",
}


def test_the_ladder_is_data_weakest_first() -> None:
    rungs = load_ladder()
    assert [r.id for r in rungs] == ["clear-caches", "drop-variables", "reset-permissions", "reinstall"]
    assert [r.network for r in rungs] == [False, False, False, True]
    assert labels()[-1] == NEEDS_DIAGNOSIS


def copy_tasks(source: Path, dest: Path, type_ids: set[str]) -> list[str]:
    """The store's tasks of the given types (one each) copied into a new store."""
    chosen = {}
    with Store(source, create=False) as old:
        for task in old.list_tasks():
            if task.type_id in type_ids and task.type_id not in chosen:
                chosen[task.type_id] = task
        folders = {t.id: old.task_dir(t.id) for t in chosen.values()}
    with Store(dest) as new:
        for task in chosen.values():
            folder = folders[task.id]
            files = {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*")
                     if p.is_file() and p.name != "task.json"}
            new.add_task(task, files)
    return sorted(chosen)


def test_tasks_are_labelled_stored_filtered_and_counted(mined_store: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    types = copy_tasks(mined_store, store, set(EXPECTED))
    assert {t.split("/")[0] for t in types} >= {"env", "config"}, types
    done = run_miner(store, "ladder")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    with Store(store, create=False) as opened:
        found = {t.type_id: t for t in opened.list_tasks()}
        on_disk = {t.type_id: json.loads((opened.task_dir(t.id) / "task.json").read_text())["blind_repair"]
                   for t in found.values()}
    assert {k: t.blind_repair for k, t in found.items()} == {k: EXPECTED[k] for k in found}
    assert on_disk == {k: EXPECTED[k] for k in found}
    listed = run_miner(store, "tasks", "list", "--min-rung", NEEDS_DIAGNOSIS, "--json")
    assert {r["type"] for r in json.loads(listed.stdout)} == {k for k in found if EXPECTED[k] == NEEDS_DIAGNOSIS}
    listed = run_miner(store, "tasks", "list", "--repaired-by", "drop-variables", "--json")
    assert {r["type"] for r in json.loads(listed.stdout)} == {k for k in found if EXPECTED[k] == "drop-variables"}
    stats = json.loads(run_miner(store, "stats", "--json").stdout)["by_blind_repair"]
    assert sum(row["tasks"] for row in stats.values()) == len(found)
    assert run_miner(store, "tasks", "list", "--min-rung", "no-such-rung").returncode != 0


@pytest.mark.slow
def test_a_crawl_refusing_trivial_tasks_keeps_none_the_first_rungs_repair(tmp_path: Path) -> None:
    """--refuse-trivial: a validated task a blind repair up to reset-permissions repairs is
    rejected as `trivial` (counted, not stored); the others are stored."""
    types = "env/pythonhome,fs/unreadable,config/syntax-error"
    base = crawl_fixture(tmp_path, "inventory-app", "--types", types, "--refuse-trivial")
    with Store(base / "store", create=False) as opened:
        stored = opened.list_tasks()
        rules = opened.stats()["by_rule"]
    assert rules.get("trivial", 0) >= 1, rules
    assert stored and all(t.family == "config" for t in stored), [t.type_id for t in stored]
    labelled = run_miner(base / "store", "ladder")
    assert labelled.returncode == 0, labelled.stdout[-2000:] + labelled.stderr[-2000:]
    with Store(base / "store", create=False) as opened:
        assert {t.blind_repair for t in opened.list_tasks()} <= {"reinstall", NEEDS_DIAGNOSIS}


@pytest.mark.slow
@pytest.mark.docker
def test_the_ladder_on_exported_tasks_gives_the_labels_measured_at_mining(mined_store: Path, harbor_export,
                                                                         tmp_path: Path) -> None:
    """`miner check --ladder`: each rung run as the agent in a fresh container of the exported task's
    image, scored by the task's own verifier. An exported task is never easier than where it was
    mined, and can be harder: its verifier also wants the environment as healthy as its image (a
    break's leftover, inert once its variable is gone, still fails it), so env/poison-pythonpath,
    which drop-variables repairs in the mining sandbox, needs a diagnosis once exported."""
    from click.testing import CliRunner
    from test_export import copy_store

    from miner.cli import main
    from miner.export import ExportOptions, export_tasks

    root = copy_store(mined_store, tmp_path / "store")
    wanted = ("env/poison-pythonpath", "fs/unreadable", "config/missing-key")
    with Store(root, create=False) as opened:
        chosen = {t.type_id: t for t in reversed(opened.list_tasks()) if t.type_id in wanted}
    assert {"env/poison-pythonpath", "config/missing-key"} <= set(chosen), sorted(chosen)
    done = run_miner(root, "ladder", *(t.id for t in chosen.values()))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    with Store(root, create=False) as opened:
        labelled = [opened.get_task(t.id) for t in chosen.values()]
        summary = export_tasks(opened, labelled, "harbor", tmp_path / "out", ExportOptions(cache_dir=harbor_export.cache))
    assert not summary.failed, [(o.task_id, o.reason) for o in summary.failed]
    checked = CliRunner().invoke(main, ["check", "--ladder", "--json", "--jobs", "2", str(tmp_path / "out")])
    assert checked.exit_code == 0, checked.output
    results = {r["name"].split("__")[1].replace("-", "/", 1): r for r in json.loads(checked.stdout)}
    assert {k: r["mined"] for k, r in results.items()} == {k: EXPECTED[k] for k in results}
    order = labels()
    for kind, result in results.items():
        assert order.index(result["label"]) >= order.index(result["mined"]), (kind, result)
        tried = order[: order.index(result["label"]) + (result["label"] != NEEDS_DIAGNOSIS)]
        assert list(result["rewards"]) == [rung for rung in tried if rung != NEEDS_DIAGNOSIS], result
        assert [r == 1 for r in result["rewards"].values()].count(True) == (result["label"] != NEEDS_DIAGNOSIS)
    assert results["config/missing-key"]["label"] == NEEDS_DIAGNOSIS
    assert results["env/poison-pythonpath"]["label"] == NEEDS_DIAGNOSIS  # the planted module is left
