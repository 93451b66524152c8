"""The language ecosystems: which ones a project lives in, the runner serving a test command,
and the build every project gets.

Each ecosystem is a package here (python/, node/) holding everything language-specific: how a
project is built, how its tests run and report per test (its Runners, miner.ecosystems.base),
what is installed, the code parser feeding the graph. The stages (miner.testing, healthy, graph,
inverters, validate, store, export) call through this module.

    runner_for("node --test test/")   # the Runner serving a test command (pytest by default)
    build_spec(project)               # the BuildSpec a sandbox backend runs

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
from dataclasses import replace
from pathlib import Path, PurePosixPath

from miner.ecosystems.base import Runner
from miner.ecosystems.node import npm
from miner.ecosystems.node.runner import RUNNERS as NODE_RUNNERS
from miner.ecosystems.node.runner import project_command as node_project_command
from miner.ecosystems.python import install as python_install
from miner.ecosystems.python.pytest import DEFAULT_COMMAND
from miner.ecosystems.python.pytest import RUNNER as PYTEST
from miner.models import HealthyState, Project
from miner.projectfiles import project_files
from miner.sandbox.base import BuildSpec, Limits

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


# pytest comes last: it serves every command no other runner claims.
RUNNERS: tuple[Runner, ...] = (*NODE_RUNNERS, PYTEST)


def runner_for(command: str) -> Runner:
    """The runner serving a test command."""
    return next(runner for runner in RUNNERS if runner.claims(command))


def build_spec(project: Project, limits: Limits | None = None, *, backend: str = "local") -> BuildSpec:
    """How to build `project`: Python's part (the venv, the project's Python dependencies and
    pytest, laid out beneath every project), then npm's lines for a project with a package.json."""
    spec = python_install.build_spec(project, limits, backend=backend)
    more = npm.install_lines(Path(project.path))
    return replace(spec, install_script=spec.install_script + "".join(line + "\n" for line in more))


def project_command(root: Path) -> str:
    """A project's own test command: for a project without Python files whose package.json runs
    node's test runner or tape, that command; else pytest's."""
    if not any(f.endswith(".py") for f in project_files(root)) and (command := node_project_command(root)):
        return command
    return DEFAULT_COMMAND
