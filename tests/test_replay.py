"""`miner replay` on tasks of the session crawl: a stored task replays, a tampered one is caught.

The tampered copy is a second store holding the same task with a test id added to its F2P
list, written through the Store API (task.json in the folder and the SQLite row alike). It
shares the session store's healthy build (its work folder links to it) so no rebuild is needed.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import run_miner

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
