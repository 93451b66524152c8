"""Tests of miner.store against a real SQLite file and real task folders (and real kill -9)."""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from miner.models import (
    Candidate,
    HealthyState,
    Inversion,
    Source,
    Target,
    Task,
    content_id,
)
from miner.store import AmbiguousTask, Store, StoreMissing, UnknownTask

REPO_ROOT = Path(__file__).resolve().parents[1]

_TYPES = {
    "deps/uninstall": Target(kind="distribution", name="requests"),
    "deps/corrupt-module": Target(kind="module", name="yaml", path="yaml/__init__.py"),
    "config/syntax-error": Target(kind="config", name="setup.cfg", path="setup.cfg"),
    "data/truncate": Target(kind="data", name="words.txt", path="data/words.txt"),
}


def make_inversion(type_id: str, n: int = 0) -> Inversion:
    target = _TYPES[type_id]
    return Inversion(
        type_id=type_id,
        family=type_id.split("/")[0],
        target=target,
        break_script=f"#!/bin/bash\nset -e\necho break {target.name} {n}\n",
        fix_script=f"#!/bin/bash\nset -e\necho fix {target.name} {n}\n",
        summary=f"{type_id} on {target.name}",
        predicted_f2p=["tests/test_a.py::test_one"],
        graph_depth=2,
    )


def make_task(
    n: int,
    type_id: str = "deps/uninstall",
    repo: str = "https://example.org/acme/greeter.git",
    difficulty: str = "medium",
) -> Task:
    inv = make_inversion(type_id, n)
    source = Source(raw=repo, kind="git", location=repo, origin="repos.txt:1")
    return Task(
        id=content_id(repo, "c0ffee", type_id, n),
        repo=repo,
        commit="c0ffee",
        source=source,
        type_id=type_id,
        family=inv.family,
        target=inv.target,
        summary=inv.summary,
        break_script=inv.break_script,
        fix_script=inv.fix_script,
        f2p=["tests/test_a.py::test_one", "probe::import::greeter"],
        p2p=["tests/test_b.py::test_two"],
        predicted_f2p=inv.predicted_f2p,
        difficulty=difficulty,
        graph_depth=2,
        instruction="The greeter's tests fail. Make them pass without editing the project.",
        test_command="python -m pytest",
    )


def task_files(task: Task, log_size: int = 64) -> dict[str, str | bytes]:
    return {
        "break.sh": task.break_script,
        "fix.sh": task.fix_script,
        "instruction.md": task.instruction,
        "healthy.json": json.dumps({"tests/test_a.py::test_one": "passed"}),
        "broken.json": json.dumps({"tests/test_a.py::test_one": "failed"}),
        "logs/break.log": b"x" * log_size,
        "logs/fix.log": "fixed\n" * (log_size // 6 + 1),
    }


def make_candidate(
    n: int,
    type_id: str,
    status: str,
    rule: str | None = None,
    repo: str = "https://example.org/acme/greeter.git",
) -> Candidate:
    inv = make_inversion(type_id, n)
    return Candidate(
        id=content_id(repo, type_id, n),
        repo=repo,
        commit="c0ffee",
        inversion=inv,
        status=status,
        rule=rule,
        detail="" if status == "validated" else f"rejected by {rule}",
        f2p=["tests/test_a.py::test_one"] if status == "validated" else [],
        suite_runs=3,
        seconds=1.5,
    )


def assert_consistent(root: Path) -> set[str]:
    """The invariants a store must hold after any crash; returns the stored ids."""
    store = Store(root)
    try:
        assert store.integrity_check() == "ok"
        names = {p.name for p in (root / "tasks").iterdir()}
        assert not [n for n in names if n.startswith(".tmp-")]
        ids = {t.id for t in store.list_tasks()}
        assert names == ids
        for task_id in ids:
            on_disk = Task.model_validate_json((root / "tasks" / task_id / "task.json").read_text())
            assert on_disk == store.get_task(task_id)
            assert (root / "tasks" / task_id / "logs" / "break.log").is_file()
        return ids
    finally:
        store.close()


# -- round trip -------------------------------------------------------------------------------


def test_layout_and_wal(tmp_path: Path) -> None:
    with Store(tmp_path / "mined") as store:
        for sub in ("tasks", "work", "cache"):
            assert (tmp_path / "mined" / sub).is_dir()
        assert store.db_path == (tmp_path / "mined" / "miner.db").resolve()
    conn = sqlite3.connect(tmp_path / "mined" / "miner.db")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"projects", "candidates", "tasks"} <= tables


def test_missing_store_is_an_error_when_not_creating(tmp_path: Path) -> None:
    with pytest.raises(StoreMissing, match="no store at"):
        Store(tmp_path / "nowhere", create=False)
    assert not (tmp_path / "nowhere").exists()


def test_task_round_trip(tmp_path: Path) -> None:
    task = make_task(1)
    with Store(tmp_path) as store:
        folder = store.add_task(task, task_files(task))
        assert folder == store.tasks_root / task.id
        loaded = store.get_task(task.id)
    assert loaded.created  # filled in by the store
    assert loaded.model_copy(update={"created": ""}) == task
    assert Task.model_validate_json((folder / "task.json").read_text()) == loaded
    assert (folder / "break.sh").read_text() == task.break_script
    assert os.access(folder / "fix.sh", os.X_OK)
    assert (folder / "logs" / "break.log").read_bytes() == b"x" * 64
    # a second Store on the same root sees it (a new connection, a new process would too)
    with Store(tmp_path) as again:
        assert again.get_task(task.id) == loaded
        assert again.task_dir(task.id) == folder


def test_get_task_by_prefix_and_errors(tmp_path: Path) -> None:
    with Store(tmp_path) as store:
        tasks = [make_task(n) for n in range(40)]
        for task in tasks:
            store.add_task(task, task_files(task))
        first = tasks[0]
        unique = next(
            first.id[:k] for k in range(1, 17)
            if sum(t.id.startswith(first.id[:k]) for t in tasks) == 1
        )
        assert store.get_task(unique).id == first.id
        assert store.task_dir(unique).name == first.id
        with pytest.raises(UnknownTask, match="no task with id"):
            store.get_task("zz-not-an-id")
        # 40 hex ids over 16 first characters: some first character is shared
        shared = next(c for c in "0123456789abcdef" if sum(t.id.startswith(c) for t in tasks) > 1)
        with pytest.raises(AmbiguousTask, match="ambiguous"):
            store.get_task(shared)
        with pytest.raises(UnknownTask):
            store.get_task("%")  # LIKE wildcards are taken literally


def test_add_task_is_idempotent(tmp_path: Path) -> None:
    task = make_task(7)
    with Store(tmp_path) as store:
        first = store.add_task(task, task_files(task))
        stamp = (first / "task.json").read_text()
        again = store.add_task(task, {**task_files(task), "break.sh": "changed\n"})
        assert again == first
        assert (first / "break.sh").read_text() == task.break_script
        assert (first / "task.json").read_text() == stamp
        assert [t.id for t in store.list_tasks()] == [task.id]
    assert sorted(p.name for p in (tmp_path / "tasks").iterdir()) == [task.id]


def test_add_task_refuses_paths_outside_the_folder(tmp_path: Path) -> None:
    task = make_task(3)
    with Store(tmp_path) as store:
        for bad in ("../escape.sh", "/etc/passwd", "logs/../../x"):
            with pytest.raises(ValueError, match="relative path"):
                store.add_task(task, {bad: "x"})
        assert store.list_tasks() == []
    assert not (tmp_path / "escape.sh").exists()


# -- candidates, projects, stats --------------------------------------------------------------


def test_candidates_and_projects(tmp_path: Path) -> None:
    cand = make_candidate(1, "deps/uninstall", "rejected", "no-f2p")
    healthy = HealthyState(
        repo=cand.repo, commit="c0ffee", backend="local", test_command="python -m pytest",
        outcomes={"tests/test_a.py::test_one": "passed"},
    )
    with Store(tmp_path) as store:
        assert not store.has_candidate(cand.id)
        store.record_candidate("pk1", cand)
        assert store.has_candidate(cand.id)
        # recording the same id again updates, never duplicates
        store.record_candidate("pk1", cand.model_copy(update={"status": "validated", "rule": None}))
        assert store.stats()["tried"] == 1 and store.stats()["validated"] == 1

        assert store.project_status("pk1") is None
        store.record_project("pk1", cand.repo, "c0ffee", cand.repo, "repos.txt:1", "running")
        assert store.project_status("pk1") == "running"
        store.record_project("pk1", cand.repo, "c0ffee", cand.repo, "repos.txt:1", "mined",
                             healthy=healthy, seconds=12.5)
        assert store.project_status("pk1") == "mined"
        [row] = store.projects()
        assert row["status"] == "mined" and row["seconds"] == 12.5 and row["has_healthy"]
        assert row["started"] and row["finished"]
        assert store.healthy("pk1") == healthy
        with pytest.raises(ValueError):
            store.record_project("pk2", "r", "c", "r", "o", "exploded")


def test_stats_numbers(tmp_path: Path) -> None:
    greeter, other = "https://example.org/acme/greeter.git", "/src/other"
    plan = [
        (greeter, "deps/uninstall", "validated", None),
        (greeter, "deps/uninstall", "validated", None),
        (greeter, "deps/uninstall", "rejected", "no-p2p"),
        (greeter, "config/syntax-error", "rejected", "no-f2p"),
        (greeter, "config/syntax-error", "rejected", "no-f2p"),
        (other, "deps/uninstall", "rejected", "fix-failed"),
        (other, "data/truncate", "validated", None),
    ]
    with Store(tmp_path) as store:
        for n, (repo, type_id, status, rule) in enumerate(plan):
            store.record_candidate(content_id(repo), make_candidate(n, type_id, status, rule, repo))
        store.record_project(content_id(greeter), greeter, "c0ffee", greeter, "r:1", "mined")
        store.record_project("k3", "pypi:broken", "0", "pypi:broken==1", "r:3", "skipped",
                             reason="build failed")
        stats = store.stats()

    assert (stats["tried"], stats["validated"], stats["rejected"]) == (7, 3, 4)
    assert stats["yield"] == pytest.approx(3 / 7)
    assert stats["by_rule"] == {"no-p2p": 1, "no-f2p": 2, "fix-failed": 1}
    uninstall = stats["by_type"]["deps/uninstall"]
    assert (uninstall["tried"], uninstall["validated"], uninstall["rejected"]) == (4, 2, 2)
    assert uninstall["yield"] == pytest.approx(0.5)
    assert uninstall["by_rule"] == {"no-p2p": 1, "fix-failed": 1}
    assert stats["by_type"]["config/syntax-error"]["yield"] == 0.0
    assert stats["by_type"]["data/truncate"]["validated"] == 1
    g = stats["by_project"][greeter]
    assert (g["tried"], g["validated"], g["status"]) == (5, 2, "mined")
    assert stats["by_project"][other]["tried"] == 2
    assert stats["by_project"][other]["status"] == ""  # candidates without a project row
    skipped = stats["by_project"]["pypi:broken"]
    assert (skipped["tried"], skipped["status"], skipped["reason"]) == (0, "skipped", "build failed")
    assert stats["projects"] == 2 and stats["tasks"] == 0
    json.dumps(stats)  # serialisable as is, for `miner stats --json`


def test_list_filters(tmp_path: Path) -> None:
    greeter = "https://example.org/acme/greeter.git"
    greeter2 = "https://example.org/acme/greeter.git-mirror"
    tasks = [
        make_task(1, "deps/uninstall", greeter, "easy"),
        make_task(2, "deps/corrupt-module", greeter, "hard"),
        make_task(3, "config/syntax-error", greeter2, "medium"),
        make_task(4, "data/truncate", "pypi:tabulate", "hard"),
    ]
    with Store(tmp_path) as store:
        for task in tasks:
            store.add_task(task, task_files(task))

        def ids(**kw: str) -> list[str]:
            return sorted(t.id for t in store.list_tasks(**kw))

        assert ids() == sorted(t.id for t in tasks)
        assert ids(type_spec="deps/uninstall") == [tasks[0].id]
        assert ids(type_spec="deps") == sorted([tasks[0].id, tasks[1].id])
        assert ids(type_spec="deps/") == []  # neither a type id nor a family
        assert ids(type_spec="uninstall") == []
        assert ids(repo=greeter) == sorted([tasks[0].id, tasks[1].id])  # exact wins
        assert ids(repo="acme") == sorted(t.id for t in tasks[:3])  # else substring
        assert ids(repo="tabulate") == [tasks[3].id]
        assert ids(repo="nothing-like-it") == []
        assert ids(difficulty="hard") == sorted([tasks[1].id, tasks[3].id])
        assert ids(type_spec="deps", difficulty="hard", repo="acme") == [tasks[1].id]


# -- crash recovery ---------------------------------------------------------------------------


def test_recover_removes_leftovers(tmp_path: Path) -> None:
    done, lost = make_task(1), make_task(2)
    with Store(tmp_path) as store:
        store.add_task(done, task_files(done))
    tasks_root = tmp_path / "tasks"
    (tasks_root / f".tmp-{lost.id}-deadbeef" / "logs").mkdir(parents=True)  # killed mid-write
    (tasks_root / lost.id).mkdir()  # killed between the rename and the commit
    (tasks_root / lost.id / "task.json").write_text(lost.model_dump_json())
    with Store(tmp_path) as store:
        report = store.last_recovery
        assert report.temp_folders == [f".tmp-{lost.id}-deadbeef"]
        assert report.orphan_folders == [lost.id]
        assert not report.rows_without_folder
        assert sorted(p.name for p in tasks_root.iterdir()) == [done.id]
        # crawling again re-creates the lost task
        store.add_task(lost, task_files(lost))
    assert assert_consistent(tmp_path) == {done.id, lost.id}


def test_recover_drops_rows_whose_folder_is_gone(tmp_path: Path) -> None:
    task = make_task(1)
    with Store(tmp_path) as store:
        folder = store.add_task(task, task_files(task))
    for path in sorted(folder.rglob("*"), reverse=True):
        path.rmdir() if path.is_dir() else path.unlink()
    folder.rmdir()
    with Store(tmp_path) as store:
        assert store.last_recovery.rows_without_folder == [task.id]
        assert store.list_tasks() == []
        store.add_task(task, task_files(task))
        assert store.task_dir(task.id).is_dir()


WRITER = textwrap.dedent(
    """
    import json, os, signal, sys
    from miner.models import Task
    from miner.store import Store

    if len(sys.argv) > 3:  # kill -9 itself right after the N-th fsync: inside a task folder's write
        calls, real_fsync = [0], os.fsync

        def fsync(fd):
            real_fsync(fd)
            calls[0] += 1
            if calls[0] == int(sys.argv[3]):
                os.kill(os.getpid(), signal.SIGKILL)

        os.fsync = fsync
    store = Store(sys.argv[1])
    for line in open(sys.argv[2]):
        item = json.loads(line)
        store.add_task(Task.model_validate(item["task"]), item["files"])
        print(item["n"], flush=True)
    """
)


def start_writer(tmp_path: Path, root: Path, start: int, count: int, size: int,
                 die_after_fsync: int = 0) -> subprocess.Popen:
    """A process storing tasks start..start+count-1 (made here, handed over as JSON lines).

    With `die_after_fsync` it kills itself (SIGKILL) right after that many fsyncs."""
    script, batch = tmp_path / "writer.py", tmp_path / f"tasks-{start}-{count}-{size}.jsonl"
    script.write_text(WRITER)
    with batch.open("w") as out:
        for n in range(start, start + count):
            task = make_task(n)
            files = {name: data.decode() if isinstance(data, bytes) else data
                     for name, data in task_files(task, log_size=size).items()}
            out.write(json.dumps({"n": n, "task": task.model_dump(mode="json"), "files": files}) + "\n")
    extra = [str(die_after_fsync)] if die_after_fsync else []
    return subprocess.Popen([sys.executable, str(script), str(root), str(batch), *extra],
                            stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT)


def recover_after_kill(proc: subprocess.Popen, root: Path) -> list[str]:
    """Wait for a killed writer; opening the store removes exactly the temporary folders it left
    (returned) and leaves folders and rows in step."""
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    leftovers = [p.name for p in (root / "tasks").iterdir() if p.name.startswith(".tmp-")]
    with Store(root) as store:
        assert sorted(store.last_recovery.temp_folders) == sorted(leftovers)
    assert_consistent(root)
    return leftovers


def test_recover_after_kill_9(tmp_path: Path) -> None:
    root = tmp_path / "mined"
    count, size = 30, 1 << 20  # 1 MiB logs: most of a write's time is spent fsyncing files
    hit_mid_write = 0
    rng = random.Random(1234)
    for attempt in range(5):
        proc = start_writer(tmp_path, root, 0, count, size)
        assert proc.stdout is not None
        # let it store a couple of (new or already stored) tasks, then kill it at a random moment
        for _ in range(2):
            assert proc.stdout.readline(), "writer died on its own"
        time.sleep(rng.uniform(0.0, 0.05))
        proc.send_signal(signal.SIGKILL)
        hit_mid_write += bool(recover_after_kill(proc, root))
        if hit_mid_write and attempt >= 1:
            break
    # a random moment may always fall between two writes on a fast disk: one kill surely inside one
    proc = start_writer(tmp_path, root, 0, count, size, die_after_fsync=2)
    assert recover_after_kill(proc, root), "the writer was killed inside a task folder's write"

    # crawling again completes the set: every task once, folders and rows in step
    proc = start_writer(tmp_path, root, 0, count, 16)
    proc.communicate(timeout=300)
    assert proc.returncode == 0
    ids = assert_consistent(root)
    assert ids == {make_task(n).id for n in range(count)}
    conn = sqlite3.connect(root / "miner.db")
    assert conn.execute("SELECT COUNT(*) FROM tasks").fetchone()[0] == count


def test_concurrent_writers(tmp_path: Path) -> None:
    root = tmp_path / "mined"
    Store(root).close()
    # two crawlers over overlapping ids, plus a third process opening the store (recover) meanwhile
    writers = [start_writer(tmp_path, root, 0, 20, 4096), start_writer(tmp_path, root, 10, 20, 4096)]
    opener = subprocess.Popen(
        [sys.executable, "-c",
         "import sys\nfrom miner.store import Store\n"
         "for _ in range(15): Store(sys.argv[1]).close()", str(root)],
        cwd=REPO_ROOT,
    )
    for proc in [*writers, opener]:
        proc.communicate(timeout=300)
        assert proc.returncode == 0
    assert assert_consistent(root) == {make_task(n).id for n in range(30)}
