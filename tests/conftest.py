"""Shared test helpers: the fixture projects, and real git repositories made from them."""

from __future__ import annotations

import shutil
from collections.abc import Callable
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
