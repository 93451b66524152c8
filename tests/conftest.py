"""Shared test helpers and state: the fixture projects, real git repositories made from them, real
crawls and exports shared by the session, and what the suite needs from the machine.

Requirements. A test marked `docker` needs a Docker engine and the base image, one marked `harbor`
the Harbor harness (its venv, the engine and the compose plugin), one marked `ray` Ray (the
`miner[ray]` extra: the test starts its own two-node cluster); a test that needs overlay
mounts calls `need("overlay", why)`. When one is missing the test is skipped with the reason, or
FAILS with it when MINER_REQUIRE names it (`.ci/run` sets MINER_REQUIRE=docker,harbor,overlay).

Speed. A test is `slow` when it is marked so (its own crawl, image builds, real package builds)
or when it needs the session crawl or the Harbor harness (marked here, at collection), so
`python -m pytest -m "not slow"` never starts a crawl.
"""

from __future__ import annotations

import functools
import json
import os
from collections import Counter
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import git
import pytest

from miner.models import InversionType, Target, Task

if TYPE_CHECKING:
    from miner.export import ExportSummary

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
LOCAL_FAMILIES = ("deps", "config", "data", "fs", "env")
# The five local families' original types, which every test of the session crawl's tasks relies on
# (the newer types have their own tests, tests/test_catalogue_types.py on fixtures/stocksync): a
# budget of 6 over 67 types would spread too thin to cover each family.
MINED_TYPES = ("deps/uninstall", "deps/wrong-version", "deps/corrupt-module", "config/missing-key", "config/syntax-error",
               "config/wrong-type", "data/bom", "data/corrupt-bytes", "data/crlf", "data/truncate", "data/wrong-encoding",
               "env/poison-pythonpath", "env/unset-var", "env/wrong-var", "fs")
MINED_OPTIONS = ("--budget", "6", "--seed", "0", "--types", ",".join(MINED_TYPES))
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


def export_fixture(base: Path, name: str, *crawl_args: str) -> list[Path]:
    """fixtures/NAME crawled (crawl_fixture, with `crawl_args`) and every task exported as Harbor
    folders under base/harbor; their paths."""
    from miner.export import ExportOptions, export_tasks
    from miner.store import Store

    root = crawl_fixture(base, name, *crawl_args)
    with Store(root / "store", create=False) as store:
        summary = export_tasks(store, store.list_tasks(), "harbor", root / "harbor", ExportOptions(cache_dir=root / "cache"))
    assert not summary.failed, [(o.task_id, o.reason) for o in summary.failed]
    return [root / "harbor" / o.name for o in summary.outcomes]


def write_package(root: Path, manifest: dict | str, files: dict[str, str] | None = None) -> Path:
    """An npm project folder: its package.json (a dict, or raw text that need not parse) and files."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "package.json").write_text(manifest if isinstance(manifest, str) else json.dumps(manifest))
    for rel, body in (files or {}).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(body)
    return root


def crawl_fixture(base: Path, name: str, *args: str) -> Path:
    """A copy of fixtures/NAME crawled into base/store (`miner crawl --repos` with `args`); base."""
    shutil.copytree(FIXTURES / name, base / name)
    repos = write_repos(base / "repos.txt", [base / name])
    done = run_miner(base / "store", "crawl", "--repos", repos, *args)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return base


def summary_rows(output: str) -> dict[str, dict[str, str]]:
    """The rows of the closing crawl table, keyed by project, from a crawl's piped output (where
    tables print as tab-separated lines: a "# title" line, the header, one line a row)."""
    lines = output.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("project\tstatus\t")), None)
    assert start is not None, f"no summary table in the crawl's output:\n{output[-3000:]}"
    header = lines[start].split("\t")
    rows = []
    for line in lines[start + 1:]:
        if "\t" not in line:
            break
        rows.append(dict(zip(header, line.split("\t"))))
    return {row["project"]: row for row in rows}


# -- what the suite needs from the machine ------------------------------------------------------

REQUIRE_VAR = "MINER_REQUIRE"
RESOURCES = ("docker", "harbor", "overlay", "ray", "pypi", "registry")
HARBOR_VENV = Path(os.environ.get("MINER_HARBOR_VENV", Path.home() / ".cache" / "miner" / "harbor-venv"))
HARBOR = HARBOR_VENV / "bin" / "harbor"


def required() -> set[str]:
    """The resources MINER_REQUIRE names (comma list of docker, harbor, overlay, ray, pypi, registry)."""
    return {word.strip() for word in os.environ.get(REQUIRE_VAR, "").split(",") if word.strip()}


def need(resource: str, why_not: str | None) -> None:
    """The one way a test gives up for lack of a resource: nothing when `why_not` is None; else a
    skip naming the reason, or a failure naming it when MINER_REQUIRE says the resource is required."""
    if why_not is None:
        return
    if resource in required():
        pytest.fail(f"{resource} is required ({REQUIRE_VAR}={os.environ[REQUIRE_VAR]}) but unavailable: {why_not}",
                    pytrace=False)
    pytest.skip(f"no {resource}: {why_not}")


@functools.cache
def docker_reason() -> str | None:
    """Why Docker tests cannot run here (no engine, no base image), or None. Asked once, when a
    test first needs it (so a run without Docker tests never waits for an engine)."""
    from miner.sandbox.docker import images
    from miner.sandbox.base import BackendUnavailable

    try:
        client = images.docker_client(timeout=10)
        images.resolve_base_image(client)
    except BackendUnavailable as exc:
        return str(exc)
    return None


@functools.cache
def harbor_reason() -> str | None:
    """Why the Harbor harness cannot run here (not installed, no Docker, no compose plugin), or None."""
    if not HARBOR.is_file():
        return f"the Harbor harness is not installed at {HARBOR} (run .ci/harbor-setup.sh)"
    if docker_reason():
        return f"no Docker: {docker_reason()}"
    compose = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True)
    if compose.returncode != 0:
        return "the docker compose plugin is missing (see .ci/docker-setup.sh)"
    return None


@functools.cache
def pypi_reason() -> str | None:
    """Why the package index cannot be reached from here (offline), or None."""
    import urllib.request

    from miner.ecosystems.python.registry import PYPI_URL

    try:
        with urllib.request.urlopen(f"{PYPI_URL}/pip/json", timeout=15) as answer:
            answer.read(1)
    except OSError as exc:
        return f"the package index ({PYPI_URL}) does not answer: {exc}"
    return None


def ray_reason() -> str | None:
    """Why a Ray cluster cannot be started here (Ray not installed), or None."""
    from ray_cluster import ray_missing

    return ray_missing()


REASONS: dict[str, Callable[[], str | None]] = {"docker": docker_reason, "harbor": harbor_reason, "ray": ray_reason,
                                                "pypi": pypi_reason}
SLOW_FIXTURES = {"mined_crawl"}  # a test that needs one of these (directly or not) is slow


def pytest_configure(config: pytest.Config) -> None:
    unknown = required() - set(RESOURCES)
    if unknown:
        raise pytest.UsageError(f"{REQUIRE_VAR} names unknown resources {sorted(unknown)} "
                                f"(known: {', '.join(RESOURCES)})")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that need the session crawl or the Harbor harness are slow, wherever they live."""
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())) or item.get_closest_marker("harbor"):
            item.add_marker(pytest.mark.slow)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before any fixture of a `docker` or `harbor` test runs: is the resource there?"""
    for resource, reason in REASONS.items():
        if item.get_closest_marker(resource):
            need(resource, reason())


# -- shared state: the session crawl and one export of it -----------------------------------------


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


def one_per_family(tasks: list[Task]) -> dict[str, Task]:
    """One task (with at least one pytest F2P test) of each family: within a family, the first of
    those whose evidence is the rarest kind mined, so the chosen tasks cover every evidence kind
    that some family alone offers (config: project-files; deps: package-index; the rest reversible)."""
    eligible = [t for t in tasks if any(not f.startswith("probe::") for f in t.f2p)]
    counts = Counter(e.kind for t in eligible for e in t.evidence)
    chosen: dict[str, Task] = {}
    for task in sorted(eligible, key=lambda t: min((counts[e.kind] for e in t.evidence), default=len(eligible) + 1)):
        chosen.setdefault(task.family, task)
    return dict(sorted(chosen.items()))


@dataclass(frozen=True)
class HarborExport:
    """One Harbor export of one mined task per family: the tasks by family, the output folder,
    the export's summary and its cache (fetched sources, healthy manifests)."""

    chosen: dict[str, Task]
    out: Path
    summary: ExportSummary
    cache: Path

    @property
    def folders(self) -> dict[str, Path]:
        """The exported task folders, by family."""
        names = {o.task_id: o.name for o in self.summary.outcomes}
        return {family: self.out / names[task.id] for family, task in self.chosen.items()}


@pytest.fixture(scope="session")
def harbor_export(mined_store: Path, tmp_path_factory: pytest.TempPathFactory) -> HarborExport:
    """The session's Harbor export of the session crawl (builds healthy images: needs Docker),
    shared read-only by the export, check and Harbor tests."""
    from miner.export import ExportOptions, export_tasks
    from miner.store import Store

    need("docker", docker_reason())
    cache, out = tmp_path_factory.mktemp("export-cache"), tmp_path_factory.mktemp("harbor")
    with Store(mined_store, create=False) as opened:
        chosen = one_per_family(opened.list_tasks())
        summary = export_tasks(opened, list(chosen.values()), "harbor", out, ExportOptions(cache_dir=cache))
    assert not summary.failed, [(o.task_id, o.reason) for o in summary.failed]
    return HarborExport(chosen, out, summary, cache)


# -- the Harbor harness --------------------------------------------------------------------------

HARBOR_RUN_TIMEOUT = 1800
# The agents a Harbor run test takes and the reward each should get: the oracle in the suite, the nop
# in the extended lane (`miner check` runs the untouched task of every export it checks)
HARBOR_AGENTS = [("oracle", 1.0), pytest.param("nop", 0.0, marks=pytest.mark.extended)]


@dataclass(frozen=True)
class Harbor:
    """The reference harness, Harbor 0.26, in its own venv (see .ci/harbor-setup.sh)."""

    exe: Path

    def __call__(self, *args: str | Path, timeout: float = HARBOR_RUN_TIMEOUT) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200"}
        return subprocess.run([str(self.exe), *map(str, args)], capture_output=True, text=True, timeout=timeout,
                              env=env)

    def assert_run_scores(self, out: Path, names: dict[str, str], agent: str, expected: float, jobs: Path) -> None:
        """`harbor run` of every task folder in `out` with `agent`: each task (by folder name,
        labelled by `names`) has one trial and scores `expected`."""
        done = self("run", "-p", out, "-a", agent, "-o", jobs, "-n", "2")
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        got = harbor_rewards(jobs)
        assert set(got) == set(names), (got, done.stdout[-2000:])
        wrong = {f"{names[task]} ({task})": reward for task, reward in got.items() if reward != expected}
        assert not wrong, f"{agent} should score {expected}: {wrong}"


def harbor_rewards(jobs: Path) -> dict[str, float]:
    """Reward of each trial of the (single) job in `jobs`, by task folder name."""
    import json

    found = {}
    for result in jobs.glob("*/*/result.json"):
        data = json.loads(result.read_text())
        task = Path(data["task_id"]["path"]).name if isinstance(data.get("task_id"), dict) else data.get("task_name")
        found[task] = ((data.get("verifier_result") or {}).get("rewards") or {}).get("reward")
    return found


@pytest.fixture(scope="session")
def harbor() -> Harbor:
    """The Harbor harness (the test fails or skips, see `need`, when it cannot run here)."""
    need("harbor", harbor_reason())
    return Harbor(HARBOR)


# -- sample targets for catalogue types ----------------------------------------------------------

SAMPLE_TARGETS = {
    "distribution": Target(kind="distribution", name="six", attrs={"version": "1.17.0", "project_own": False}),
    "module": Target(kind="module", name="six", path="six.py", attrs={"dist": "six", "version": "1.17.0"}),
    "config": Target(kind="config", name="conf/app.yaml", path="conf/app.yaml",
                     attrs={"format": "yaml", "size": 40, "mode": "644"}),
    "data": Target(kind="data", name="data/rows.csv", path="data/rows.csv", attrs={"size": 40, "mode": "644"}),
    "script": Target(kind="script", name="greet", path="bin/greet", attrs={"dist": "greeter"}),
    "envvar": Target(kind="envvar", name="APP_MODE", attrs={"value": "production"}),
}


def sample_target(itype: InversionType) -> Target:
    """A target of the type's kind whose attrs satisfy its preconditions and fill its templates.

    Kinds without a hand-written sample (container-only ones) get every `target.attrs.NAME`
    their templates use, so any catalogue type, present or future, can be rendered.
    """
    text = itype.summary + itype.break_script + itype.fix_script + "".join(e.kind + e.detail for e in itype.evidence)
    special = {"mode": "644", "evidence": "package-index"}  # a target's own evidence names a real kind
    attrs = {name: special.get(name, f"sample-{name}") for name in re.findall(r"target\.attrs\.(\w+)", text)}
    attrs |= {k: v[0] if isinstance(v, list) else v for k, v in itype.preconditions.items()
              if k != "context" and not k.startswith(("min_", "max_"))}
    base = SAMPLE_TARGETS.get(itype.target)
    if base is None:
        return Target(kind=itype.target, name="sample-target-name", path="/usr/lib/sample-target-path", attrs=attrs)
    return base.model_copy(update={"attrs": {**attrs, **base.attrs}})
