"""`miner replay` on tasks of the session crawl: a stored task replays, a tampered one is caught.

The tampered copy is a second store holding the same task with a test id added to its F2P
list, written through the Store API (task.json in the folder and the SQLite row alike). It
shares the session store's healthy build (its work folder links to it) so no rebuild is needed.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import commit_all, run_miner

from miner.models import Task
from miner.replay import split_steps
from miner.sandbox.local import rmtree
from miner.store import Store

INVENTED = "tests/test_invented.py::test_added_by_a_tamperer"


@pytest.fixture(scope="module")
def task(mined_store: Path) -> Task:
    """A stored task with a data or config break (quick to replay), else any."""
    tasks = Store(mined_store, create=False).list_tasks()
    assert tasks
    return min(tasks, key=lambda t: (t.family not in ("data", "config"), t.id))


def test_replay_reproduces_a_stored_task_and_keeps_its_sandbox(mined_store: Path, task: Task) -> None:
    done = run_miner(mined_store, "replay", task.id, "--keep", timeout=900)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    steps = split_steps(task.break_script)
    assert steps
    for number, (_, step) in enumerate(steps, 1):
        assert f"[step {number}] $ {step.splitlines()[0][:100]}" in output
    assert "F2P matches the stored task" in output
    assert "restored: all" in output and "replay reproduces the stored task" in output
    kept = re.search(r"broken sandbox kept at (\S+)", output)
    assert kept, output[-2000:]
    path = Path(kept.group(1))
    try:
        assert path.is_dir() and any(path.iterdir())
    finally:
        rmtree(path)


def test_replay_of_a_tampered_task_fails(mined_store: Path, task: Task, tmp_path: Path) -> None:
    source = Store(mined_store, create=False)
    folder = source.task_dir(task.id)
    files = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*")
             if p.is_file() and p.name != "task.json"}
    tampered = task.model_copy(update={"f2p": sorted(task.f2p + [INVENTED])})
    with Store(tmp_path / "store") as copy:
        copy.add_task(tampered, files)
        assert INVENTED in copy.get_task(task.id).f2p
        assert INVENTED in Task.model_validate_json((copy.task_dir(task.id) / "task.json").read_text()).f2p
    [key] = [p["key"] for p in source.projects() if p["repo"] == task.repo]
    (tmp_path / "store" / "work" / key).symlink_to(source.work_root / key)

    done = run_miner(tmp_path / "store", "replay", task.id, timeout=900)
    output = done.stdout + done.stderr
    assert done.returncode != 0, output[-3000:]
    assert "F2P DIFFERS from the stored task" in output and INVENTED in output
    assert "differs from the stored task" in done.stderr


@pytest.mark.slow
def test_replay_uses_the_mined_commit_after_the_branch_moved(fixture_repo, tmp_path: Path) -> None:
    """A task mined from a git branch replays the commit it was mined at, not the branch's new head;
    a task whose commit can no longer be fetched is refused with one line saying why."""
    repo = fixture_repo("textkit")
    repos = tmp_path / "repos.txt"
    repos.write_text(f"file://{repo.working_tree_dir}@main\n")
    store = tmp_path / "store"
    done = run_miner(store, "crawl", "--repos", repos, "--types", "fs/unreadable", "--budget", "1")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [task] = Store(store, create=False).list_tasks()
    assert task.commit == repo.head.commit.hexsha
    # The branch moves on: the file the task breaks is gone at the new head.
    target = Path(repo.working_tree_dir) / (task.target.path or task.target.name)
    target.unlink()
    commit_all(repo, "drop the file the task breaks")
    assert repo.head.commit.hexsha != task.commit

    replayed = run_miner(store, "replay", task.id, timeout=900)
    output = replayed.stdout + replayed.stderr
    assert replayed.returncode == 0, output[-3000:]
    assert "F2P matches the stored task" in output and "replay reproduces the stored task" in output

    with Store(store) as writable:  # the same task, claimed to come from a commit nobody has
        folder = writable.task_dir(task.id)
        files = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*")
                 if p.is_file() and p.name != "task.json"}
        ghost = task.model_copy(update={"id": "f" * 16, "commit": "0123456789abcdef" * 2 + "01234567"})
        writable.add_task(ghost, files)
    refused = run_miner(store, "replay", ghost.id, timeout=300)
    assert refused.returncode != 0
    assert "Traceback" not in refused.stderr
    assert "cannot be fetched" in refused.stderr and "0123456789ab" in refused.stderr, refused.stderr
