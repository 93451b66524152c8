"""A crawl killed with SIGKILL resumes: same tasks as an uninterrupted crawl, no duplicates.

The uninterrupted reference is the session crawl (same fixture folder, seed and budget; the
ids of its candidates depend only on the project and the inversion, not on the store).
"""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

from conftest import (FIXTURES, MINED_OPTIONS, copy_fixture, make_git_repo, miner_command, miner_env, run_miner,
                      summary_rows, write_repos)

from miner.store import Store

FIXTURE = FIXTURES / "textkit"


def candidate_ids(db: Path) -> dict[str, str]:
    with sqlite3.connect(db, timeout=60) as conn:
        return dict(conn.execute("SELECT id, status FROM candidates WHERE repo = ?", (str(FIXTURE),)))


def wait_for_a_candidate(proc: subprocess.Popen, db: Path, limit: float = 1200) -> int:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the crawl ended before it recorded a candidate"
        if db.is_file():
            try:
                with sqlite3.connect(db, timeout=5) as conn:
                    found = conn.execute("SELECT COUNT(*) FROM candidates").fetchone()[0]
            except sqlite3.OperationalError:  # the schema is not written yet
                found = 0
            if found:
                return found
        time.sleep(0.3)
    raise AssertionError("no candidate recorded in time")


TIMES = {"seconds", "suite_seconds", "candidate_seconds", "timings", "project_timings"}


def stats(store: Path) -> dict:
    """The store's figures but its clocks (a resumed crawl times its own fetch and build again)."""
    def counts(value: object) -> object:
        if isinstance(value, dict):
            return {k: counts(v) for k, v in value.items() if k not in TIMES}
        return value

    with Store(store, create=False) as opened:
        return counts(opened.stats())


def test_a_killed_crawl_resumes_to_the_uninterrupted_result(mined_store: Path, tmp_path: Path) -> None:
    repos = write_repos(tmp_path / "repos.txt", [FIXTURE])
    store = tmp_path / "store"
    args = ["crawl", "--repos", str(repos), *MINED_OPTIONS]
    with (tmp_path / "crawl.log").open("w") as log:  # as a batch job would: its output to a file
        proc = subprocess.Popen([*miner_command(), "--store", str(store), *args], env=miner_env(),
                                stdout=log, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            wait_for_a_candidate(proc, store / "miner.db")
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    # what the killed crawl had printed was in the file already: flushed line by line, not at the end
    printed = (tmp_path / "crawl.log").read_text()
    for phase in ("fetching", "building", "recording the healthy state", "candidate 1/"):
        assert re.search(rf"^\S+ textkit {phase}", printed, re.MULTILINE), printed
    before = candidate_ids(store / "miner.db")
    assert 0 < len(before) < int(MINED_OPTIONS[MINED_OPTIONS.index("--budget") + 1])

    second = run_miner(store, *args)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    row = summary_rows(second.stdout)[str(FIXTURE)]
    assert int(row["resumed"]) >= len(before)

    reference = Store(mined_store, create=False)
    with Store(store, create=False) as resumed:
        assert resumed.integrity_check() == "ok"
        ids = [t.id for t in resumed.list_tasks()]
        assert len(ids) == len(set(ids))
        assert sorted(p.name for p in resumed.tasks_root.iterdir()) == sorted(ids)
        assert set(ids) == {t.id for t in reference.list_tasks(repo=str(FIXTURE))}
    assert candidate_ids(store / "miner.db") == candidate_ids(mined_store / "miner.db")

    counts = stats(store)
    third = run_miner(store, *args)
    assert third.returncode == 0, third.stdout[-3000:] + third.stderr[-3000:]
    row = summary_rows(third.stdout)[str(FIXTURE)]
    assert (row["tried"], row["validated"]) == ("0", "0")
    assert int(row["resumed"]) == counts["tried"]
    assert stats(store) == counts


def test_a_source_that_fetches_later_replaces_its_skip(tmp_path: Path) -> None:
    """A git repository missing at the first crawl is skipped with its reason; once it is there,
    the next crawl mines it, and the store holds one row for the source, not the old skip beside it."""
    folder = tmp_path / "later"
    repos = write_repos(tmp_path / "repos.txt", [f"file://{folder}"])
    store = tmp_path / "store"
    first = run_miner(store, "crawl", "--repos", repos, "--budget", "1", "--types", "env/pythonhome")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    with Store(store) as opened:
        [row] = opened.projects()
    assert row["status"] == "skipped" and "fetch failed" in row["reason"]
    make_git_repo(copy_fixture("textkit", folder))
    again = run_miner(store, "crawl", "--repos", repos, "--budget", "1", "--types", "env/pythonhome")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    with Store(store) as opened:
        [row] = opened.projects()
        assert row["status"] == "mined" and row["commit"]
        assert opened.stats()["projects"] == 1
