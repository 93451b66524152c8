"""Shared test helpers: the fixture projects, real git repositories made from them, and real crawls."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import git
import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
FIXTURES = REPO_ROOT / "fixtures"
GOOD_FIXTURES = ("inventory-app", "weather-report", "textkit")
TEST_ACTOR = git.Actor("miner tests", "tests@example.invalid")


def copy_fixture(name: str, dest: Path) -> Path:
    """Copy fixtures/NAME to dest, leaving out build leftovers of local runs."""
    shutil.copytree(FIXTURES / name, dest,
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build", ".pytest_cache"))
    return dest


def commit_all(repo: git.Repo, message: str) -> git.Commit:
    """Stage every file of the work tree and commit it with a fixed test identity."""
    repo.git.add(A=True)
    return repo.index.commit(message, author=TEST_ACTOR, committer=TEST_ACTOR)


def make_git_repo(folder: Path, branch: str = "main") -> git.Repo:
    """Turn a folder into a git repository whose first commit holds all its files."""
    repo = git.Repo.init(folder, initial_branch=branch)
    commit_all(repo, "initial import")
    return repo


@pytest.fixture
def fixture_repo(tmp_path: Path) -> Callable[[str], git.Repo]:
    """A factory: fixture_repo("textkit") -> a git repo in tmp_path holding that fixture."""

    def make(name: str) -> git.Repo:
        return make_git_repo(copy_fixture(name, tmp_path / name))

    return make


# -- real crawls through the installed `miner` command ----------------------------------------

# Options of the session crawl (`mined_store`): with the families interleaved, 6 candidates a
# project reach every local family (deps, config, data, fs, env) on the three good fixtures.
MINED_OPTIONS = ("--budget", "6", "--seed", "0")
LOCAL_FAMILIES = ("deps", "config", "data", "fs", "env")
CRAWL_TIMEOUT = 1800  # seconds a test waits for one `miner crawl`


def miner_command() -> list[str]:
    """argv of the installed `miner` console script (the one next to this interpreter first)."""
    beside = Path(sys.executable).parent / "miner"
    exe = str(beside) if beside.is_file() else shutil.which("miner")
    assert exe, "the miner command is not installed (pip install -e .)"
    return [exe]


def miner_env() -> dict[str, str]:
    """The environment for `miner` subprocesses: wide, uncoloured tables that parse line by line."""
    return {**os.environ, "COLUMNS": "250", "NO_COLOR": "1", "TERM": "dumb"}


def run_miner(store: Path, *args: str | Path, timeout: float = CRAWL_TIMEOUT,
              cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run `miner --store STORE ARGS...` to completion; stdout and stderr come back as text."""
    argv = [*miner_command(), "--store", str(store), *map(str, args)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=miner_env(), cwd=cwd)


def write_repos(path: Path, lines: list[str | Path]) -> Path:
    """A repos file holding the given lines."""
    path.write_text("".join(f"{line}\n" for line in lines))
    return path


@dataclass(frozen=True)
class Crawl:
    """A finished `miner crawl`: its store, repos file and what it printed."""

    store: Path
    repos: Path
    output: str
    seconds: float


@pytest.fixture(scope="session")
def mined_crawl(tmp_path_factory: pytest.TempPathFactory) -> Crawl:
    """One real crawl of the good fixtures (inventory-app, weather-report, textkit), run once per
    session with MINED_OPTIONS through the installed command. Read-only for the tests that use it."""
    root = tmp_path_factory.mktemp("mined")
    repos = write_repos(root / "repos.txt", [FIXTURES / name for name in GOOD_FIXTURES])
    start = time.monotonic()
    done = run_miner(root / "store", "crawl", "--repos", repos, *MINED_OPTIONS, "--jobs", "2")
    assert done.returncode == 0, f"crawl failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return Crawl(root / "store", repos, done.stdout + done.stderr, time.monotonic() - start)


@pytest.fixture(scope="session")
def mined_store(mined_crawl: Crawl) -> Path:
    """The store root of the session crawl of the good fixtures (see mined_crawl); do not modify it."""
    return mined_crawl.store


def _cells(line: str, bar: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip(bar).split(bar)]


def summary_rows(output: str) -> dict[str, dict[str, str]]:
    """The rows of the closing crawl table (rich box drawing), keyed by project.

    A row starts where its status cell is filled; cells folded over several lines are joined
    (with a space, so compare text with whitespace removed; the project name without one).
    """
    header: list[str] = []
    rows: list[dict[str, str]] = []
    for line in output.splitlines():
        if line.startswith("┃"):  # header cells, possibly folded over several lines
            cells = _cells(line, "┃")
            header = [f"{old} {new}".strip() for old, new in zip(header, cells)] if header else cells
            continue
        if not line.startswith("│") or "project" not in header:
            continue
        row = dict(zip(header, _cells(line, "│")))
        if row["status"] or not rows:
            rows.append(row)
            continue
        for name, cell in row.items():  # a folded cell continues on this line
            if cell:
                glue = "" if name == "project" else " "
                rows[-1][name] = f"{rows[-1][name]}{glue}{cell}".strip()
    return {row["project"]: row for row in rows}


def docker_reason() -> str | None:
    """Why Docker tests cannot run here (no engine, no base image), or None."""
    from miner.sandbox.docker import images
    from miner.sandbox.base import BackendUnavailable

    try:
        client = images.docker_client(timeout=10)
        images.resolve_base_image(client)
    except BackendUnavailable as exc:
        return str(exc)
    return None


DOCKER_SKIP = docker_reason()
