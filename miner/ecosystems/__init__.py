"""Which language ecosystems a project lives in, decided from its files and its healthy run.

    detect(files, healthy)  # frozenset({"python"}), frozenset({"node"}), frozenset() ...

"python": the project has Python files, or its healthy run has pytest's tests (ids of .py
files). "node": it has a package.json. A Dockerized project in neither (a program in any other
language) is known only through what its running program touches (its
healthy run traced: miner.sandbox.docker.trace); so is one outside Python: the Python
environment miner lays out beneath every project (its venv, pytest) is miner's, not the
project's, and the Python families (deps, virtualenv, the interpreter's settings) do not apply.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from miner.models import HealthyState
from miner.projectfiles import project_files

PYTHON = "python"
NODE = "node"


def detect(files: Iterable[str], healthy: HealthyState) -> frozenset[str]:
    """The ecosystems of a project, from its files (project-relative) and its healthy run."""
    names = {PurePosixPath(f).name for f in files}
    suffixes = {PurePosixPath(f).suffix for f in files}
    found = set()
    if ".py" in suffixes or any(t.split("::", 1)[0].endswith(".py") for t in healthy.outcomes):
        found.add(PYTHON)
    if "package.json" in names:
        found.add(NODE)
    return frozenset(found)


def of_project(root: Path, healthy: HealthyState) -> frozenset[str]:
    """detect() over the project folder's files."""
    return detect(project_files(root), healthy)
