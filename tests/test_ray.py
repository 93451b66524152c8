"""The Ray executor on a real two-node Ray cluster started on this machine (tests/ray_cluster.py).

The same sources, seed and options crawled by the local executor and by Ray give the same tasks
and candidates, with a per-project cap that cuts and compounds kept apart from it; a crawl whose second node is killed while it mines a project still gives them,
each once (the dead node's unit is retried on the head; nothing of it had been recorded). The
crawls use --batch-size 2 with --budget 6, so each project is a unit that prepares and chooses,
then two batches of candidates, units of their own, and with --compound 2 a unit of compounds.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import FIXTURES, CRAWL_TIMEOUT, miner_command, miner_env, run_miner, summary_rows, write_repos
from miner.store import Store

pytestmark = [pytest.mark.slow, pytest.mark.ray]

PROJECTS = ("textkit", "weather-report")
# A cap the fixtures pass (each gives 3 tasks or more in 6 candidates), so the stores show that
# Ray's results go through the driver's cut like the local ones, compounds counted apart.
OPTIONS = ("--budget", "6", "--seed", "0", "--batch-size", "2", "--compound", "2", "--compound-budget", "1",
           "--max-tasks-per-repo", "2")


@pytest.fixture(scope="module")
def cluster() -> Iterator:
    from ray_cluster import local_cluster

    with local_cluster(cpus=(1, 1)) as started:
        yield started


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the repos file, the cache folder every crawl of this module builds in)."""
    root = tmp_path_factory.mktemp("ray")
    return write_repos(root / "repos.txt", [FIXTURES / name for name in PROJECTS]), root / "cache"


@pytest.fixture(scope="module")
def local_store(shared: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same crawl with the local executor (the reference)."""
    repos, cache = shared
    store = tmp_path_factory.mktemp("local") / "store"
    done = run_miner(store, "crawl", "--repos", repos, *OPTIONS, "--cache-dir", cache)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (store.parent / "crawl.out").write_text(done.stdout + done.stderr)
    return store


def test_the_local_executor_ends_a_project_before_it_begins_the_next(local_store: Path) -> None:
    """One worker (--jobs 1): the first project's batches and compound unit run before the second
    project is prepared, so each project's wall time is its own."""
    lines = (local_store.parent / "crawl.out").read_text().splitlines()
    first, second = PROJECTS
    units_of_first = [i for i, line in enumerate(lines) if f" {first} [" in line]
    assert any("stacking 2 validated inversions" in lines[i] for i in units_of_first)  # its compound unit
    [preparing_second] = [i for i, line in enumerate(lines) if f" {second} choosing inversion points" in line]
    assert units_of_first and max(units_of_first) < preparing_second


def outcome(store: Path) -> tuple[set[str], dict[str, tuple[str, str | None]], list[str]]:
    """(task ids, candidate id -> (status, rule), task folder names) of a store, which must be sound."""
    with Store(store, create=False) as opened:
        assert opened.integrity_check() == "ok"
        assert not opened.last_recovery, "a task row without its folder, or a folder without its row"
        tasks = {task.id for task in opened.list_tasks()}
        rows = opened._query("SELECT id, status, rule FROM candidates")
        candidates = {row["id"]: (row["status"], row["rule"]) for row in rows}
        folders = sorted(p.name for p in opened.tasks_root.iterdir())
    return tasks, candidates, folders


def test_ray_mines_the_same_tasks_as_the_local_executor(cluster, shared: tuple[Path, Path], local_store: Path,
                                                        tmp_path: Path) -> None:
    repos, cache = shared
    done = run_miner(tmp_path / "store", "crawl", "--repos", repos, *OPTIONS, "--cache-dir", cache,
                     "--executor", "ray", "--address", cluster.address)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert {row["status"] for row in summary_rows(done.stdout).values()} == {"mined"}
    assert "3 batches of up to 2" in output  # every project was split, and its batches were units
    assert "stacking 2 validated inversions into compound tasks" in output  # a project's compound unit
    assert f"[{cluster.node_id}]" in output, "no unit ran on the second node"
    local_tasks, local_candidates, _ = outcome(local_store)
    tasks, candidates, folders = outcome(tmp_path / "store")
    assert local_tasks, "the local crawl made no task to compare with"
    with Store(local_store, create=False) as opened:
        singles = [t.repo for t in opened.list_tasks() if t.family != "compound"]
        assert len(set(singles)) == 2 and all(singles.count(repo) == 2 for repo in singles), singles  # the cap
        assert any(t.family == "compound" for t in opened.list_tasks())  # beside the cap
    assert tasks == local_tasks
    assert candidates == local_candidates
    assert folders == sorted(tasks)


def test_a_node_killed_mid_crawl_loses_and_duplicates_nothing(cluster, shared: tuple[Path, Path],
                                                              local_store: Path, tmp_path: Path) -> None:
    repos, cache = shared
    argv = [*miner_command(), "--store", str(tmp_path / "store"), "crawl", "--repos", str(repos), *OPTIONS,
            "--cache-dir", str(cache), "--executor", "ray", "--address", cluster.address]
    crawl = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=miner_env())
    lines, killed_at = [], None
    deadline = time.monotonic() + CRAWL_TIMEOUT
    assert crawl.stdout is not None
    for line in crawl.stdout:
        lines.append(line)
        # the second node is judging a candidate: whatever it found so far is in its memory only
        if killed_at is None and f"[{cluster.node_id}] candidate" in line:
            cluster.kill_node()
            killed_at = len(lines)
        assert time.monotonic() < deadline, "".join(lines[-50:])
    assert crawl.wait(timeout=60) == 0, "".join(lines[-60:])
    output = "".join(lines)
    assert killed_at is not None, f"no candidate was judged on the second node:\n{output[-3000:]}"
    assert {row["status"] for row in summary_rows(output).values()} == {"mined"}, output[-3000:]
    local_tasks, local_candidates, _ = outcome(local_store)
    tasks, candidates, folders = outcome(tmp_path / "store")
    assert tasks == local_tasks  # nothing lost
    assert candidates == local_candidates
    assert folders == sorted(tasks)  # nothing twice: one folder a task, one row a folder
    with Store(tmp_path / "store", create=False) as opened:
        targets = [(t.type_id, t.target.key, t.repo) for t in opened.list_tasks()]
    assert len(targets) == len(set(targets))
    assert os.path.isdir(cache)
