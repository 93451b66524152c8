"""Tests of miner.graph: tree-sitter analysis of real projects, a real venv's installed metadata,
and predictions checked against real breaks (files corrupted, modules shadowed, variables set).

One virtual environment is built per module (python -m venv + pip through the configured index)
with the fixtures' dependencies; every project is installed into it in editable mode from a
temporary copy, read with the same inventory script healthy.py runs inside sandboxes, and its
suite run with pytest's junit report parsed by miner.testing.
"""

from __future__ import annotations

import html
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import textwrap
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import networkx as nx
import pytest

from miner.ecosystems.python.code import parse_source
from miner.ecosystems.python.graph import module_names, split_test_id
from miner.ecosystems.python.inventory import discover_probes
from miner.graph import (
    GraphvizMissing,
    build_graph,
    depth,
    predict,
    select_targets,
    to_dot,
    to_json,
    write_graph,
)
from miner.models import Distribution, HealthyState, Outcome, Probe, Project, Source, Target, Task
from miner.store import Store
from miner.tasks import difficulty
from miner.ecosystems.python.pytest import REPORT_FLAGS, parse_junit

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures"
INVENTORY_SCRIPT = REPO / "miner" / "assets" / "inventory.py"
# python-dateutil 2.x requires six (4.0 swapped it for tzdata): the chain the tests follow
DEPENDENCIES = ["python-dateutil==2.9.0.post0", "PyYAML", "pytest", "charset-normalizer", "idna", "attrs", "packaging",
                "tomli-w", "wheel"]


# ---------------------------------------------------------------------------------------------
# A real environment
# ---------------------------------------------------------------------------------------------

@dataclass
class Built:
    """A project installed in the test venv, with its measured healthy state."""

    project: Project
    healthy: HealthyState
    python: Path
    env: dict[str, str] = field(default_factory=dict)

    @property
    def root(self) -> Path:
        return self.project.path


def run(args: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=600, **kwargs)


def env_for(python: Path, extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHON"))}
    env["PATH"] = f"{python.parent}:{env.get('PATH', '')}"
    env.update(extra)
    return env


def read_inventory(python: Path, project_dir: Path) -> tuple[list[Distribution], list[str]]:
    """Installed distributions read by the inventory script run with the venv's interpreter."""
    result = run([str(python), str(INVENTORY_SCRIPT)])
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout.strip().splitlines()[-1])
    dists = [Distribution(**{k: v for k, v in d.items() if k != "url"}) for d in data["dists"]]
    own = [d["name"] for d in data["dists"] if d.get("url", "").rstrip("/") == f"file://{project_dir}"]
    return dists, own


def measure(built: Built, extra_env: dict[str, str] | None = None) -> dict[str, Outcome]:
    """Outcomes of the project's tests (junit report) and probes (same exit code as healthy)."""
    env = env_for(built.python, {**built.env, **(extra_env or {})})
    report = built.root.parent / f"{built.root.name}-junit.xml"
    # the flags the pipeline runs suites with (a collection error does not stop the session)
    run([str(built.python), "-m", "pytest", f"--junitxml={report}", *shlex.split(REPORT_FLAGS)],
        cwd=built.root, env=env)
    outcomes = {k: v.outcome for k, v in parse_junit(report.read_bytes()).items()}
    for probe in built.healthy.probes:
        argv = [str(built.python), "-c", f"import {probe.module}"] if probe.kind == "import" else probe.argv
        code = run(argv, cwd=built.root, env=env).returncode
        outcomes[probe.id] = "passed" if code == probe.expected_exit else "failed"
    return outcomes


def install(python: Path, source: Path, workdir: Path, env: dict[str, str] | None = None) -> Built:
    """Copy a project, install it editable into the venv and record its healthy state."""
    root = workdir / source.name
    shutil.copytree(source, root, ignore=shutil.ignore_patterns("*.egg-info", "build", "__pycache__"))
    result = run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "-e", str(root)])
    assert result.returncode == 0, result.stderr
    inventory, own = read_inventory(python, root)
    probes = discover_probes(inventory, own)
    for probe in probes:
        argv = [str(python), "-c", f"import {probe.module}"] if probe.kind == "import" else probe.argv
        probe.expected_exit = run(argv, cwd=root, env=env_for(python, env or {})).returncode
    project = Project(source=Source(raw=str(root), kind="local", location=str(root)), repo=str(root),
                      commit="test", path=root)
    healthy = HealthyState(repo=str(root), commit="test", backend="local", test_command="python -m pytest",
                           outcomes={}, probes=probes, inventory=inventory, project_dists=own,
                           distributions={d.name: d.version for d in inventory}, env=dict(env or {}))
    built = Built(project, healthy, python, dict(env or {}))
    built.healthy.outcomes = measure(built)
    return built


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("graph-venv")
    result = run([sys.executable, "-m", "venv", str(root / "venv")])
    assert result.returncode == 0, result.stderr
    python = root / "venv" / "bin" / "python"
    result = run([str(python), "-m", "pip", "install", "-q", *DEPENDENCIES])
    assert result.returncode == 0, result.stderr
    return python


STOCKAPP = {
    "pyproject.toml": """
        [build-system]
        requires = ["setuptools>=61"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "stockapp"
        version = "0.1.0"
        dependencies = ["python-dateutil"]

        [project.scripts]
        stock = "stockapp.cli:main"

        [tool.setuptools.packages.find]
        where = ["src"]
        """,
    "stockapp.ini": "[stock]\nwarehouse = north\n",
    "src/stockapp/__init__.py": '"""Stock helpers."""\n',
    "src/stockapp/dates.py": """
        from datetime import date

        from dateutil.relativedelta import relativedelta


        def add_months(day: date, months: int) -> date:
            return day + relativedelta(months=months)
        """,
    "src/stockapp/settings.py": """
        import configparser
        import os


        def load() -> configparser.ConfigParser:
            parser = configparser.ConfigParser()
            if not parser.read("stockapp.ini"):
                raise FileNotFoundError("stockapp.ini")
            return parser


        def region() -> str:
            return os.environ["STOCK_REGION"]
        """,
    "src/stockapp/cli.py": """
        from .settings import load


        def main() -> int:
            print(load()["stock"]["warehouse"])
            return 0
        """,
    "tests/test_dates.py": """
        from datetime import date

        from stockapp.dates import add_months


        def test_add_months():
            assert add_months(date(2024, 1, 31), 1) == date(2024, 2, 29)
        """,
    "tests/test_settings.py": """
        from stockapp import settings


        def test_load():
            assert settings.load()["stock"]["warehouse"] == "north"


        def test_region():
            assert settings.region() == "eu"
        """,
    "tests/test_rows.py": """
        import csv
        from pathlib import Path

        HERE = Path(__file__).parent


        def test_rows():
            with open(HERE / "data" / "rows.csv", newline="") as handle:
                assert len(list(csv.reader(handle))) == 2


        def test_plain():
            assert sum([1, 2]) == 3
        """,
    "tests/data/rows.csv": "sku,qty\nA-1,3\n",
}


@pytest.fixture(scope="module")
def stockapp(venv: Path, tmp_path_factory: pytest.TempPathFactory) -> Built:
    source = tmp_path_factory.mktemp("sources") / "stockapp"
    for rel, text in STOCKAPP.items():
        (source / rel).parent.mkdir(parents=True, exist_ok=True)
        (source / rel).write_text(textwrap.dedent(text).lstrip("\n"))
    built = install(venv, source, tmp_path_factory.mktemp("projects"), env={"STOCK_REGION": "eu"})
    assert set(built.healthy.passing) >= {"tests/test_rows.py::test_rows", "probe::import::stockapp"}
    return built


@pytest.fixture(scope="module")
def stock_graph(stockapp: Built) -> nx.DiGraph:
    return build_graph(stockapp.project, stockapp.healthy)


@pytest.fixture(scope="module")
def inventory_app(venv: Path, tmp_path_factory: pytest.TempPathFactory) -> Built:
    return install(venv, FIXTURES / "inventory-app", tmp_path_factory.mktemp("projects"))


@pytest.fixture(scope="module")
def textkit(venv: Path, tmp_path_factory: pytest.TempPathFactory) -> Built:
    return install(venv, FIXTURES / "textkit", tmp_path_factory.mktemp("projects"))


@pytest.fixture(scope="module")
def weather(venv: Path, tmp_path_factory: pytest.TempPathFactory) -> Built:
    return install(venv, FIXTURES / "weather-report", tmp_path_factory.mktemp("projects"))


# ---------------------------------------------------------------------------------------------
# Parsing one file
# ---------------------------------------------------------------------------------------------

def test_imports_absolute_relative_and_from() -> None:
    source = parse_source(b"""
import os, a.b as c
from . import sibling
from ..pkg.mod import y, z as w
from .sub import *
def f():
    import yaml
""", "pkg/inner/mod.py", "pkg.inner.mod")
    assert source.scopes[""].imports == {(0, "os", ()), (0, "a.b", ()), (1, "", ("sibling",)),
                                         (2, "pkg.mod", ("y", "z")), (1, "sub", ("*",))}
    assert source.scopes["f"].imports == {(0, "yaml", ())}


def test_environment_reads_writes_and_constants() -> None:
    source = parse_source(b"""
import os
NAME = "APP_HOME"
def reads():
    os.environ["A"]; os.getenv("B", "x"); os.environ.get("C"); "D" in os.environ; os.getenv(NAME)
def writes(monkeypatch):
    os.environ["E"] = "1"
    monkeypatch.setenv("F", "2")
    monkeypatch.delenv("G")
""", "m.py", "m")
    assert source.scopes["reads"].envvars == {"A", "B", "C", "D", "APP_HOME"}
    assert source.scopes["writes"].envvars == set()
    assert source.scopes["writes"].sets_env == {"E", "F", "G"}


def test_path_expressions_are_joined() -> None:
    source = parse_source(b"""
import os
from importlib.resources import files
from pathlib import Path
HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
def joined():
    return open(Path(__file__).parent / "fixtures" / "a.csv")
def via_constant():
    return (DATA / "b.json").read_text()
def via_os():
    return os.path.join(os.path.dirname(__file__), "conf", "c.ini")
def via_resources():
    return files("pkg.res") / "d.txt"
def in_tmp(tmp_path):
    return tmp_path / "e.ini"
""", "tests/test_x.py", "test_x")
    assert source.scopes["joined"].paths == {"fixtures/a.csv"}
    assert "data/b.json" in source.scopes["via_constant"].paths
    assert source.scopes["via_os"].paths == {"conf/c.ini"}
    assert "pkg/res/d.txt" in source.scopes["via_resources"].paths
    assert source.scopes["in_tmp"].paths == set()
    assert "data/b.json" not in source.scopes[""].paths  # belongs to where it is used


def test_decorators_belong_to_the_function() -> None:
    source = parse_source(b"""
import pytest
@pytest.fixture(autouse=True)
def chdir(): pass
class TestK(Base):
    @pytest.mark.parametrize("name", ["a.txt"])
    def test_one(self, name): pass
""", "tests/test_k.py", "test_k")
    assert "a.txt" in source.scopes["TestK.test_one"].paths
    assert source.functions["chdir"].fixture and source.functions["chdir"].autouse
    assert source.classes["TestK"].bases == ["Base"]


def test_module_names_follow_pytest_import_roots() -> None:
    names = module_names(["src/pkg/__init__.py", "src/pkg/mod.py", "tests/test_a.py", "tests/conftest.py",
                          "conftest.py", "flat/__init__.py", "flat/sub/__init__.py", "flat/sub/x.py"])
    assert names["src/pkg/mod.py"] == "pkg.mod"
    assert names["src/pkg/__init__.py"] == "pkg"
    assert names["tests/test_a.py"] == "test_a"
    assert names["flat/sub/x.py"] == "flat.sub.x"
    assert {names["tests/conftest.py"], names["conftest.py"]} == {"tests.conftest", "conftest"}


def test_split_test_id() -> None:
    assert split_test_id("tests/test_x.py::TestC::test_y[a::b]") == ("tests/test_x.py", "TestC.test_y")
    assert split_test_id("tests/test_x.py::test_z") == ("tests/test_x.py", "test_z")


def test_difficulty_grows_with_depth_and_fewer_failures() -> None:
    shallow, deep = difficulty(1, 5, "deps"), difficulty(4, 5, "deps")
    assert deep[1] > shallow[1]
    assert difficulty(2, 1, "data")[1] > difficulty(2, 20, "data")[1]
    assert difficulty(1, 40, "deps")[0] == "easy"
    assert difficulty(5, 1, "system")[0] == "hard"
    assert difficulty(None, 3, "unknown-family")[0] in ("easy", "medium", "hard")


def write_project(root: Path, files: dict[str, str]) -> Project:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text).lstrip("\n"))
    return Project(source=Source(raw=str(root), kind="local", location=str(root)), repo=str(root), commit="c",
                   path=root)


def test_fixtures_hooks_and_folder_listings(tmp_path: Path) -> None:
    """What pytest runs around a test counts: requested fixtures, hooks; a globbed folder counts whole."""
    project = write_project(tmp_path, {
        "tests/data/a.json": "{}",
        "tests/data/b.json": "{}",
        "tests/cases.txt": "1\n",
        "tests/token.txt": "t\n",
        "tests/conftest.py": """
            import pytest

            def pytest_generate_tests(metafunc):
                open("tests/cases.txt")

            @pytest.fixture
            def token():
                return open("tests/token.txt").read()
            """,
        "tests/test_a.py": """
            from pathlib import Path

            DATA = Path(__file__).parent / "data"

            def test_all():
                for path in DATA.glob("*.json"):
                    path.read_text()

            def test_one():
                (DATA / "a.json").read_text()

            def test_token(token):
                assert token

            def test_dynamic(request):
                request.getfixturevalue("token")
            """,
    })
    ids = [f"tests/test_a.py::{name}" for name in ("test_all", "test_one", "test_token", "test_dynamic")]
    healthy = HealthyState(repo="r", commit="c", backend="local", test_command="pytest",
                           outcomes={i: "passed" for i in ids})
    graph = build_graph(project, healthy)

    def files(test: str) -> set[str]:
        return {n for n in graph.successors(f"test:tests/test_a.py::{test}") if n.startswith(("config:", "data:"))}

    assert files("test_all") == {"config:tests/data/a.json", "config:tests/data/b.json", "data:tests/cases.txt"}
    assert files("test_one") == {"config:tests/data/a.json", "data:tests/cases.txt"}
    assert files("test_token") == files("test_dynamic") == {"data:tests/token.txt", "data:tests/cases.txt"}


def test_gettext_catalogues_and_imported_names(tmp_path: Path) -> None:
    """gettext.translation("app", ...) reads every app.mo under the project; a package's __init__
    importing a function does not make all its importers depend on that function."""
    mo = "\x00binary catalogue"
    project = write_project(tmp_path, {
        "app/__init__.py": "from app.i18n import translator\nfrom app.core import total\n",
        "app/i18n.py": """
            import gettext as gettext_module
            from pathlib import Path

            def translator(language):
                return gettext_module.translation("app", Path(__file__).parent / "locale", [language])
            """,
        "app/core.py": "def total(values):\n    return sum(values)\n",
        "app/locale/fr/LC_MESSAGES/app.mo": mo,
        "app/locale/de/LC_MESSAGES/app.mo": mo,
        "app/locale/fr/LC_MESSAGES/app.po": "msgid \"\"\n",
        "tests/test_app.py": """
            import app

            def test_total():
                assert app.total([1, 2]) == 3

            def test_french():
                app.translator("fr")
            """,
    })
    ids = ["tests/test_app.py::test_total", "tests/test_app.py::test_french"]
    healthy = HealthyState(repo="r", commit="c", backend="local", test_command="pytest",
                           outcomes={i: "passed" for i in ids})
    graph = build_graph(project, healthy)
    for lang in ("fr", "de"):
        target = Target(kind="data", name=f"app/locale/{lang}/LC_MESSAGES/app.mo",
                        path=f"app/locale/{lang}/LC_MESSAGES/app.mo")
        assert predict(graph, target) == {"tests/test_app.py::test_french"}
    assert "data:app/locale/fr/LC_MESSAGES/app.po" not in graph  # gettext never reads the source
    keyword = parse_source(b"import gettext\ndef f():\n    gettext.translation(domain='app', localedir='x')\n",
                           "m.py", "m")
    assert "app.mo" in keyword.scopes["f"].paths
    assert "app.mo" not in parse_source(b"def f(s):\n    return s.find('app')\n", "m.py", "m").scopes["f"].paths


def test_a_test_file_run_as_a_script_draws_no_node_of_its_own(tmp_path: Path) -> None:
    """defusedxml 0.7.1: its single test file ends in `unittest.main()` and setup.py's test command
    runs it by name; a test file's code is folded into its tests, so nothing may point at a
    `__main__` node of it that is never drawn (it had no kind, and choosing targets failed)."""
    project = write_project(tmp_path, {
        "lib.py": "def parse(text):\n    return text.strip()\n",
        "setup.py": """
            import subprocess, sys

            def run_tests():
                subprocess.call([sys.executable, "tests.py"])
            """,
        "tests.py": """
            import unittest
            import lib

            class T(unittest.TestCase):
                def test_parse(self):
                    self.assertEqual(lib.parse(" a "), "a")

            if __name__ == "__main__":
                unittest.main()
            """,
    })
    healthy = HealthyState(repo="r", commit="c", backend="local", test_command="pytest",
                           outcomes={"tests.py::T::test_parse": "passed"})
    graph = build_graph(project, healthy)
    assert all("kind" in attrs for _, attrs in graph.nodes(data=True))
    assert predict(graph, Target(kind="module", name="lib", path="lib.py")) == {"tests.py::T::test_parse"}


def test_main_block_runs_only_as_a_script_and_system_nodes(tmp_path: Path) -> None:
    """`if __name__ == "__main__":` is not import-time code; a test running `python tool.py` (or a
    probe running it) depends on it. With a system inventory, `import sqlite3` reaches the shared
    library its extension loads and the Debian package owning it."""
    project = write_project(tmp_path, {
        "tool.py": """
            import sys

            def report():
                import sqlite3
                return sqlite3.connect(":memory:")

            def settings():
                return open("tool.ini").read()

            if __name__ == "__main__":
                report()
            """,
        "tool.ini": "[tool]\nx = 1\n",
        "tests/test_tool.py": """
            import subprocess, sys
            import tool

            def test_settings():
                assert tool.settings()

            def test_cli():
                subprocess.run([sys.executable, "tool.py"], check=True)
            """,
    })
    ext = "/usr/lib/python3.11/lib-dynload/_sqlite3.cpython-311-x86_64-linux-gnu.so"
    system = {"libraries": {"libsqlite3.so.0": {"soname": "libsqlite3.so.0", "path": "/usr/lib/libsqlite3.so.0.8.6",
                                                "used_by": [ext], "package": "libsqlite3-0:amd64"}},
              "packages": {"libsqlite3-0:amd64": {"version": "3.40.1-2"}}, "import_loads": {"sqlite3": [ext]}}
    ids = ["tests/test_tool.py::test_settings", "tests/test_tool.py::test_cli"]
    healthy = HealthyState(repo="r", commit="c", backend="docker", test_command="pytest",
                           outcomes={i: "passed" for i in ids + ["probe::cmd"]}, system=system,
                           probes=[Probe(id="probe::cmd", kind="command", argv=["python3", "tool.py"])])
    graph = build_graph(project, healthy)
    library = Target(kind="syslib", name="libsqlite3.so.0")
    assert predict(graph, library) == {"tests/test_tool.py::test_cli", "probe::cmd"}
    assert predict(graph, Target(kind="debpkg", name="libsqlite3-0")) == predict(graph, library)
    assert depth(graph, library, ["tests/test_tool.py::test_cli"]) == 4  # main -> report -> sqlite3 -> lib
    assert graph.nodes["debpkg:libsqlite3-0"]["label"] == "libsqlite3-0 3.40.1-2"
    # without the inventory the stdlib import is not drawn at all
    plain = build_graph(project, healthy.model_copy(update={"system": None}))
    assert "module:sqlite3" not in plain and "syslib:libsqlite3.so.0" not in plain


# ---------------------------------------------------------------------------------------------
# The graph of a small real project
# ---------------------------------------------------------------------------------------------

def test_test_module_distribution_requirement_chain(stock_graph: nx.DiGraph) -> None:
    test = "test:tests/test_dates.py::test_add_months"
    assert stock_graph.has_edge(test, "module:test_dates")
    assert stock_graph.has_edge("module:test_dates", "module:stockapp.dates")
    assert stock_graph.has_edge("module:stockapp.dates", "module:dateutil")
    assert stock_graph.has_edge("module:dateutil", "distribution:python-dateutil")
    assert stock_graph.has_edge("distribution:python-dateutil", "distribution:six")
    assert stock_graph.has_edge(test, "function:stockapp.dates.add_months")
    assert stock_graph.nodes["distribution:six"]["kind"] == "distribution"


def test_module_opens_config_and_reads_variable(stock_graph: nx.DiGraph) -> None:
    assert stock_graph.has_edge("function:stockapp.settings.load", "config:stockapp.ini")
    assert stock_graph.has_edge("function:stockapp.settings.region", "envvar:STOCK_REGION")
    assert stock_graph.has_edge("function:stockapp.settings.load", "module:stockapp.settings")
    assert stock_graph.nodes["envvar:STOCK_REGION"]["set"] is True


def test_reads_inside_one_test_stay_with_that_test(stock_graph: nx.DiGraph) -> None:
    rows = "data:tests/data/rows.csv"
    assert set(stock_graph.predecessors(rows)) == {"test:tests/test_rows.py::test_rows"}
    assert predict(stock_graph, Target(kind="data", name="tests/data/rows.csv", path="tests/data/rows.csv")) \
        == {"tests/test_rows.py::test_rows"}


def test_calls_narrow_the_radius_to_the_functions_used(stockapp: Built, stock_graph: nx.DiGraph) -> None:
    config = predict(stock_graph, Target(kind="config", name="stockapp.ini", path="stockapp.ini"))
    assert config == {"tests/test_settings.py::test_load", "probe::script::stock"}
    variable = predict(stock_graph, Target(kind="envvar", name="STOCK_REGION"))
    assert variable == {"tests/test_settings.py::test_region"}


def test_probes_scripts_and_src_layout(stock_graph: nx.DiGraph) -> None:
    assert stock_graph.has_edge("probe:probe::import::stockapp", "module:stockapp")
    assert stock_graph.has_edge("probe:probe::script::stock", "script:stock")
    assert stock_graph.has_edge("script:stock", "function:stockapp.cli.main")
    assert stock_graph.has_edge("script:stock", "distribution:stockapp")
    # src layout: the package is importable only because the distribution is installed
    assert stock_graph.has_edge("module:stockapp", "distribution:stockapp")


def test_depth_counts_hops_below_the_tests(stock_graph: nx.DiGraph) -> None:
    tests = ["tests/test_dates.py::test_add_months"]
    assert depth(stock_graph, Target(kind="module", name="dateutil"), tests) == 2
    assert depth(stock_graph, Target(kind="distribution", name="python-dateutil"), tests) == 3
    assert depth(stock_graph, Target(kind="distribution", name="six"), tests) == 4
    assert depth(stock_graph, Target(kind="data", name="tests/data/rows.csv"), ["tests/test_rows.py::test_rows"]) == 1
    assert depth(stock_graph, Target(kind="distribution", name="six"), ["tests/test_rows.py::test_plain"]) is None


def test_select_targets_prefers_partial_distinct_and_deep(stockapp: Built, stock_graph: nx.DiGraph) -> None:
    targets = [
        Target(kind="distribution", name="python-dateutil"),
        Target(kind="distribution", name="six"),
        Target(kind="distribution", name="pytest"),  # every test: whole suite
        Target(kind="distribution", name="pyyaml"),  # nothing uses it
        Target(kind="config", name="stockapp.ini", path="stockapp.ini"),
        Target(kind="data", name="tests/data/rows.csv", path="tests/data/rows.csv"),
        Target(kind="envvar", name="STOCK_REGION"),
    ]
    chosen = select_targets(stock_graph, stockapp.healthy, targets, budget=None, seed=3)
    keys = [t.key for t, _, _ in chosen]
    assert "distribution:pytest" not in keys and "distribution:pyyaml" not in keys
    assert len(keys) == 5
    # six and python-dateutil share one radius: the deeper one first, the other after all distinct radii
    assert keys.index("distribution:six") < keys.index("distribution:python-dateutil")
    assert keys[-1] == "distribution:python-dateutil"
    radius = dict((t.key, r) for t, r, _ in chosen)
    assert radius["data:tests/data/rows.csv"] == {"tests/test_rows.py::test_rows"}
    assert select_targets(stock_graph, stockapp.healthy, targets, budget=None, seed=3) == chosen
    assert len(select_targets(stock_graph, stockapp.healthy, targets, budget=2, seed=3)) == 2
    # the test runner is never an inversion point, even when nothing else qualifies
    assert select_targets(stock_graph, stockapp.healthy, [targets[2]], budget=None, seed=0) == []


def test_the_graph_ranks_the_crawls_targets_and_never_the_tests_data(stockapp: Built,
                                                                     stock_graph: nx.DiGraph) -> None:
    """The graph draws and predicts the tests' own data, but only enumerate_targets says what may break
    (rule 7: the tests are the judge), so `miner graph` and the crawl rank the same targets."""
    from miner.inverters.targets import enumerate_targets

    targets = enumerate_targets(stockapp.project, stockapp.healthy)
    keys = {t.key for t in targets}
    assert "data:tests/data/rows.csv" in stock_graph and "data:tests/data/rows.csv" not in keys
    assert {"config:stockapp.ini", "envvar:STOCK_REGION", "distribution:six"} <= keys
    chosen = select_targets(stock_graph, stockapp.healthy, targets, budget=None, seed=0)
    assert chosen and {t.key for t, _, _ in chosen} <= keys
    assert not any(t.path and t.path.startswith("tests/") for t in targets)


def test_whole_suite_targets_come_after_partial_ones(tmp_path: Path) -> None:
    project = write_project(tmp_path, {
        "app.py": 'import os\nMODE = os.environ.get("APP_MODE")\ndef rows():\n    return open("rows.csv").read()\n',
        "rows.csv": "a,b\n",
        "app.ini": "[app]\n",
        "tests/test_app.py": "import app\n\ndef test_rows():\n    assert app.rows()\n\ndef test_mode():\n    assert app\n",
    })
    ids = ["tests/test_app.py::test_rows", "tests/test_app.py::test_mode"]
    healthy = HealthyState(repo="r", commit="c", backend="local", test_command="pytest",
                           outcomes={i: "passed" for i in ids})
    graph = build_graph(project, healthy)
    targets = [Target(kind="envvar", name="APP_MODE"), Target(kind="data", name="rows.csv", path="rows.csv"),
               Target(kind="config", name="app.ini", path="app.ini")]
    chosen = select_targets(graph, healthy, targets, budget=None, seed=0)
    assert [(t.key, sorted(r)) for t, r, _ in chosen] == [
        ("data:rows.csv", ["tests/test_app.py::test_rows"]),  # partial first
        ("envvar:APP_MODE", ids[::-1]),  # read at import time: every test (still tried, last)
    ]  # app.ini: nothing reads it


def test_renderings(stock_graph: nx.DiGraph, tmp_path: Path) -> None:
    highlight = ["distribution:six", "config:stockapp.ini"]
    data = json.loads(to_json(stock_graph, highlight))
    marked = {n["id"] for n in data["nodes"] if n["highlighted"]}
    assert marked == {"distribution:six", "config:stockapp.ini"}
    assert {"source": "distribution:python-dateutil", "target": "distribution:six", "rel": "requires"} in data["edges"]
    dot = to_dot(stock_graph, highlight)
    assert "rankdir=LR" in dot and 'cluster' in dot
    assert '"distribution:six" [label="six\\n' in dot and "#cb181d" in dot and "#fb6a4a" in dot
    svg = write_graph(stock_graph, "svg", tmp_path / "g.svg", highlight)
    text = svg.read_text()
    assert text.lstrip().startswith("<?xml") and "<svg" in text and "six" in text


def test_svg_without_graphviz_says_so(stock_graph: nx.DiGraph, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # a PATH on which no `dot` exists
    with pytest.raises(GraphvizMissing, match="Graphviz"):
        write_graph(stock_graph, "svg", tmp_path / "g.svg")
    assert write_graph(stock_graph, "dot", tmp_path / "g.dot").read_text().startswith("digraph")


# ---------------------------------------------------------------------------------------------
# The fixtures: predictions against real breaks
# ---------------------------------------------------------------------------------------------

@contextmanager
def replaced(path: Path, text: str) -> Iterator[None]:
    original = path.read_bytes()
    path.write_text(text)
    try:
        yield
    finally:
        path.write_bytes(original)


def observed_f2p(built: Built, *, files: dict[str, str] | None = None, env: dict[str, str] | None = None,
                 shadow: dict[str, str] | None = None) -> set[str]:
    """Healthy-passing tests and probes that stop passing under a real break."""
    extra = dict(env or {})
    if shadow:  # modules shadowed by broken same-named files earlier on sys.path
        folder = built.root.parent / "shadow"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        for name, text in shadow.items():
            (folder / name).write_text(text)
        extra["PYTHONPATH"] = str(folder)
    with_files = [replaced(built.root / rel, text) for rel, text in (files or {}).items()]
    for manager in with_files:
        manager.__enter__()
    try:
        outcomes = measure(built, extra)
    finally:
        for manager in with_files:
            manager.__exit__(None, None, None)
    return {t for t in built.healthy.passing if outcomes.get(t) != "passed"}


BROKEN_MODULE = "raise ImportError('broken on purpose')\n"


def check(built: Built, graph: nx.DiGraph, target: Target, exact: bool, **breaks) -> None:
    predicted = predict(graph, target) & set(built.healthy.passing)
    observed = observed_f2p(built, **breaks)
    assert observed, f"{target.key}: the break broke nothing"
    assert observed <= predicted, f"{target.key}: missed {sorted(observed - predicted)}"
    if exact:
        assert predicted == observed, f"{target.key}: predicted too much: {sorted(predicted - observed)}"


@pytest.mark.slow  # builds a fixture project
def test_inventory_app_predictions_match_real_breaks(inventory_app: Built) -> None:
    graph = build_graph(inventory_app.project, inventory_app.healthy)
    check(inventory_app, graph, Target(kind="distribution", name="six"), exact=True, shadow={"six.py": BROKEN_MODULE})
    check(inventory_app, graph, Target(kind="module", name="yaml"), exact=True, shadow={"yaml.py": BROKEN_MODULE})
    check(inventory_app, graph, Target(kind="data", name="tests/data/expected_value_report.txt"), exact=True,
          files={"tests/data/expected_value_report.txt": "truncated\n"})
    # The CLI's main() reaches every command; a test runs one of them: predictions include the others.
    check(inventory_app, graph, Target(kind="config", name="config.yaml", path="config.yaml"), exact=False,
          files={"config.yaml": "warehouse: [unclosed\n"})
    check(inventory_app, graph, Target(kind="config", name="settings.ini", path="settings.ini"), exact=False,
          files={"settings.ini": "[export]\ndelimiter = ;\n"})
    check(inventory_app, graph, Target(kind="envvar", name="INVENTORY_CURRENCY"), exact=False,
          env={"INVENTORY_CURRENCY": "JPY"})
    check(inventory_app, graph, Target(kind="data", name="inventory/data/products.csv"), exact=False,
          files={"inventory/data/products.csv": "sku,name,category,quantity,unit_price,received\n"})


@pytest.mark.slow  # builds a fixture project
def test_textkit_predictions_match_real_breaks(textkit: Built) -> None:
    graph = build_graph(textkit.project, textkit.healthy)
    assert graph.has_edge("module:textkit", "distribution:textkit")  # src layout
    check(textkit, graph, Target(kind="distribution", name="idna"), exact=True, shadow={"idna.py": BROKEN_MODULE})
    check(textkit, graph, Target(kind="data", name="src/textkit/resources/stopwords.txt"), exact=False,
          files={"src/textkit/resources/stopwords.txt": "# empty\n"})
    check(textkit, graph, Target(kind="data", name="tests/data/article.txt"), exact=True,
          files={"tests/data/article.txt": "nothing here\n"})


@pytest.mark.slow  # builds a fixture project
def test_weather_report_predictions_match_real_breaks(weather: Built) -> None:
    graph = build_graph(weather.project, weather.healthy)
    check(weather, graph, Target(kind="config", name="weather.toml", path="weather.toml"), exact=False,
          files={"weather.toml": "schema_version = [\n"})
    check(weather, graph, Target(kind="distribution", name="tomli-w"), exact=False,
          shadow={"tomli_w.py": BROKEN_MODULE})


@pytest.mark.slow  # builds a fixture project
def test_fixture_graph_renders_readably(inventory_app: Built, tmp_path: Path) -> None:
    graph = build_graph(inventory_app.project, inventory_app.healthy)
    chosen = select_targets(graph, inventory_app.healthy, [
        Target(kind="distribution", name="six"), Target(kind="config", name="config.yaml", path="config.yaml"),
        Target(kind="envvar", name="INVENTORY_CURRENCY")], budget=None, seed=0)
    svg = write_graph(graph, "svg", tmp_path / "inventory.svg", [t for t, _, _ in chosen])
    text = html.unescape(svg.read_text())
    for label in ("test_value_report_matches_reference", "config.yaml", "python-dateutil", "INVENTORY_CURRENCY"):
        assert label in text
    # look-alike tests are merged into one node, so the picture stays small
    assert text.count("<g id=\"node") < graph.number_of_nodes()


# ---------------------------------------------------------------------------------------------
# `miner graph`
# ---------------------------------------------------------------------------------------------

def test_graph_command_draws_a_stored_task(stockapp: Built, tmp_path: Path) -> None:
    """A task id: the project comes from the source cache and the healthy state from the store."""
    from click.testing import CliRunner

    from miner.cli import main
    from miner.ecosystems import build_spec
    from miner.prepare import state_key
    from miner.sources import fetch

    store = Store(tmp_path / "store", create=True)
    project = fetch(stockapp.project.source, store.root / "cache" / "sources")
    store.record_project(project.key, project.repo, project.commit, project.source.raw, "", "mined",
                         healthy=stockapp.healthy)
    store.record_state(state_key(project, "local", build_spec(project, backend="local")), stockapp.healthy)
    target = Target(kind="distribution", name="six")
    task = Task(id="5ix0000000000000", repo=project.repo, commit=project.commit, source=project.source,
                type_id="deps/uninstall", family="deps", target=target, summary="six removed",
                break_script="pip uninstall -y six", fix_script="pip install six",
                f2p=["tests/test_dates.py::test_add_months"], p2p=["tests/test_rows.py::test_plain"])
    store.add_task(task, {}, project_key=project.key)
    store.close()
    out = tmp_path / "task.json"
    result = CliRunner().invoke(main, ["--store", str(store.root), "graph", "5ix0", "--format", "json",
                                       "-o", str(out)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert f"of task {task.id}" in result.output
    row = re.search(r"distribution:six\W+(\d+) of \d+\W+(\d+)", result.output)  # predicted F2P, depth
    assert row and row.groups() == ("1", "4"), result.output
    assert json.loads(out.read_text())["highlight"] == ["distribution:six"]


@pytest.mark.slow  # builds a fixture project
def test_miner_graph_on_a_fixture_source(tmp_path: Path) -> None:
    """`miner graph FOLDER`: fetched, built and measured in the local sandbox, then drawn."""
    from click.testing import CliRunner

    from miner.cli import main

    out = tmp_path / "weather.svg"
    result = CliRunner().invoke(main, ["--store", str(tmp_path / "store"), "graph", str(FIXTURES / "weather-report"),
                                       "--format", "svg", "-o", str(out), "--budget", "4"])
    assert result.exit_code == 0, result.output
    assert f"wrote {out}" in result.output.replace("\n", "")
    text = html.unescape(out.read_text())
    assert "<svg" in text and "weather.toml" in text and "#cb181d" in text
    assert "inversion points" in result.output


@pytest.mark.slow  # builds a fixture project
def test_miner_graph_with_no_store_works_from_an_empty_folder(tmp_path: Path) -> None:
    """No --store, no MINER_STORE, an empty working folder and a home with nothing in it (under
    /home, which the sandbox hides): the build's work and pip cache live under that home, and the
    sandbox still gets them (it once failed at "build step 'create venv' exited 1")."""
    from conftest import miner_command, miner_env

    home = Path(tempfile.mkdtemp(prefix="miner-fresh-", dir="/home"))
    try:
        (tmp_path / "empty").mkdir()
        env = {k: v for k, v in miner_env().items() if k != "MINER_STORE"} | {"HOME": str(home)}
        done = subprocess.run([*miner_command(), "graph", str(FIXTURES / "textkit"), "--format", "json",
                               "-o", str(tmp_path / "g.json"), "--budget", "3"], capture_output=True, text=True,
                              env=env, cwd=tmp_path / "empty", timeout=900)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert json.loads((tmp_path / "g.json").read_text())["nodes"]
        assert not list((tmp_path / "empty").iterdir())  # no store was created
        assert (home / ".cache" / "miner").is_dir()
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_a_build_error_names_its_reason() -> None:
    """Every verb shows a build error with the step's telling lines: pip's ERROR lines first."""
    from miner.sandbox.base import BuildError

    pip = BuildError("build step 'install' exited 1 for acme", "Collecting x\nERROR: No matching distribution for x\n"
                                                                "notice: a new pip\n")
    assert str(pip) == "build step 'install' exited 1 for acme | ERROR: No matching distribution for x"
    other = BuildError("build step 'create venv' exited 1 for acme", "a\nb\nbwrap: Can't mkdir parents: Read-only\n")
    assert str(other).endswith("| a / b / bwrap: Can't mkdir parents: Read-only")
    assert str(BuildError("plain")) == "plain"
