"""Build specs: what gets installed for setuptools/flit/hatch/poetry projects, sdists and folders."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from miner.ecosystems.python.install import (
    build_spec,
    chosen_extras,
    declared_extras,
    group_requirements,
    install_script,
    is_test_environment,
    locked_versions,
    needed_plugins,
    requirement_files,
    resolve_python,
    tox_environments,
)
from miner.models import Project, Source
from miner.sandbox.base import BuildError, Limits
from miner.sandbox.local import LocalBackend
from miner.testing import command_of, run_suite


# miner's default interpreter: the real file behind the base (non-venv) python.
BASE_PYTHON = os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())
    return root


def project(root: Path, files: dict[str, str], overrides: dict[str, str] | None = None) -> Project:
    write(root, files)
    source = Source(raw=str(root), kind="local", location=str(root), overrides=overrides or {})
    return Project(source=source, repo=str(root), commit="1", path=root)


# -- metadata detection ---------------------------------------------------------------------


def test_extras_from_every_metadata_format(tmp_path: Path) -> None:
    pep621 = project(tmp_path / "a", {"pyproject.toml": '[project]\nname="a"\n[project.optional-dependencies]\ntest=["x"]\ndocs=["y"]\n'})
    assert declared_extras(pep621.path) == {"test", "docs"}
    assert chosen_extras(pep621) == ["test"]
    cfg = project(tmp_path / "b", {"setup.cfg": "[options.extras_require]\nTesting = pytest\ndev = x\n", "setup.py": "x"})
    assert chosen_extras(cfg) == ["Testing", "dev"]
    setup_py = project(
        tmp_path / "c",
        {"setup.py": "from setuptools import setup\nEXTRAS = {'tests': ['six'], 'speed': []}\nsetup(name='c', extras_require=EXTRAS)\n"},
    )
    assert declared_extras(setup_py.path) == {"tests", "speed"}
    sdist = project(tmp_path / "d", {"PKG-INFO": "Metadata-Version: 2.1\nName: d\nProvides-Extra: test\nProvides-Extra: cli\n\nbody"})
    assert chosen_extras(sdist) == ["test"]
    poetry = project(tmp_path / "e", {"pyproject.toml": '[tool.poetry.extras]\ntests=["x"]\n'})
    assert chosen_extras(poetry) == ["tests"]
    overridden = project(tmp_path / "f", {"PKG-INFO": "Name: f\nProvides-Extra: test\n\n"}, {"extras": "cli, full"})
    assert chosen_extras(overridden) == ["cli", "full"]
    assert chosen_extras(project(tmp_path / "g", {"PKG-INFO": "Name: g\n\n"}, {"extras": ""})) == []


def test_dependency_groups_and_poetry_groups(tmp_path: Path) -> None:
    root = write(
        tmp_path,
        {
            "pyproject.toml": """
            [dependency-groups]
            lint = ["ruff"]
            test = ["pytest>=7", {include-group = "lint"}]
            docs = ["sphinx"]

            [tool.poetry.group.dev.dependencies]
            python = "^3.9"
            pytest-mock = "^3.0"
            """
        },
    )
    assert group_requirements(root) == ["pytest>=7", "ruff", "pytest-mock"]


def test_requirement_files(tmp_path: Path) -> None:
    root = write(
        tmp_path,
        {"requirements.txt": "", "requirements-test.txt": "", "requirements/tests.txt": "", "dev-requirements.txt": "", "docs.txt": ""},
    )
    assert requirement_files(root) == ["requirements-test.txt", "requirements/tests.txt", "dev-requirements.txt"]


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({"pytest.ini": "[pytest]\naddopts = --cov=pkg -n 2 -p pytest_mock --timeout=30\n"}, ["pytest-cov", "pytest-xdist", "pytest-mock", "pytest-timeout"]),
        ({"tox.ini": "[pytest]\naddopts = -nauto --benchmark-skip -p no:randomly\n"}, ["pytest-xdist", "pytest-benchmark"]),
        ({"setup.cfg": "[tool:pytest]\nrequired_plugins = pytest-env>=1\nasyncio_mode = auto\n"}, ["pytest-env>=1", "pytest-asyncio"]),
        ({"pyproject.toml": '[tool.pytest.ini_options]\naddopts = ["--dist=loadfile", "-p", "myplugin"]\ntimeout = 10\n', "myplugin.py": ""}, ["pytest-xdist", "pytest-timeout"]),
        # pytest.ini wins over the others, as in pytest itself
        ({"pytest.ini": "[pytest]\n", "setup.cfg": "[tool:pytest]\naddopts = --cov\n"}, []),
        ({"setup.cfg": "[metadata]\nname = x\n"}, []),
    ],
)
def test_pytest_plugins_from_config(tmp_path: Path, files: dict[str, str], expected: list[str]) -> None:
    assert needed_plugins(write(tmp_path, files)) == expected


@pytest.mark.parametrize(
    ("name", "expected"),
    [("py311", True), ("py3.11", True), ("py3", True), ("py", True), ("py311-extra", True), ("test", True),
     ("py311-tests", True), ("py310", False), ("py3.12-extra", False), ("py311-django42", False),
     ("lint", False), ("docs", False), (".pkg", False), ("py311-unidecode", False)],
)
def test_tox_environment_names(name: str, expected: bool) -> None:
    assert is_test_environment(name, "3.11") is expected


TOX_INI = """
[tox]
envlist = lint, py{310,311}, py{310,311}-extra, py311-{alpha,beta}

[testenv]
deps =
    pytest
    extra: six
    alpha: attrs
    -r{toxinidir}/requirements/tests.txt
    -e .
extras = cli

[testenv:lint]
deps = ruff

[testenv:docs]
deps = sphinx

[testenv:style]
runner = uv-venv-runner
"""


def test_tox_deps_of_the_test_environments(tmp_path: Path) -> None:
    root = write(tmp_path, {"tox.ini": TOX_INI, "requirements/tests.txt": "iniconfig\n",
                            "pyproject.toml": '[project]\nname="t"\n[project.optional-dependencies]\ncli=["click"]\n'})
    found = tox_environments(root, "3.11")
    # tox itself resolves factors and generative names; variants (alpha/beta), other pythons,
    # lint and docs are left out, and the project itself (-e .) is not a dependency; tox's note on
    # the runner it lacks ("style: environment style marked as unavailable") is not config
    assert found.names == ["py311", "py311-extra"] and not found.error
    assert found.deps == ["pytest", "-rrequirements/tests.txt", "six"]
    assert found.extras == ["cli"]
    assert tox_environments(root, "3.11", ["py311-alpha"]).deps == ["pytest", "attrs", "-rrequirements/tests.txt"]
    script = build_spec(project(root, {})).install_script
    assert "-e '.[cli]'" in script and "pip install --progress-bar off pytest -rrequirements/tests.txt six ||" in script
    assert "tox deps" not in build_spec(project(root, {}, {"tox_env": ""})).install_script
    # tox runs once per state of the config files: an edited tox.ini is read again, then reused
    from miner.ecosystems.python.install import _run_tox_config

    runs = _run_tox_config.cache_info().misses
    (root / "tox.ini").write_text(TOX_INI.replace("six", "attrs"))
    assert "attrs" in tox_environments(root, "3.11").deps
    assert _run_tox_config.cache_info().misses == runs + 1
    tox_environments(root, "3.11", ["py311-alpha"])
    assert _run_tox_config.cache_info().misses == runs + 1


def test_tox_config_that_tox_cannot_read(tmp_path: Path) -> None:
    root = write(tmp_path, {"tox.ini": "[tox]\nrequires = tox>=99\nenvlist = py\n[testenv]\ndeps = six\n"})
    found = tox_environments(root, "3.11")
    assert found.error and not found.deps
    assert "# tox environments not read: tox config failed" in build_spec(project(root, {})).install_script


def test_a_tox_plugin_of_the_project_never_runs_on_the_host(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    root = write(tmp_path / "p", {"tox.ini": "[tox]\nenvlist = py\n[testenv]\ndeps = six\n",
                                  "toxfile.py": f"open({str(marker)!r}, 'w').close()\n"})
    found = tox_environments(root, "3.11")
    assert "toxfile.py" in found.error and not found.deps and not marker.exists()


def test_script_shape_and_overrides(tmp_path: Path) -> None:
    proj = project(
        tmp_path,
        {
            "pyproject.toml": '[build-system]\nrequires=["flit_core"]\nbuild-backend="flit_core.buildapi"\n[project]\nname="p"\n'
            '[project.optional-dependencies]\ntest=["six"]\n[tool.pytest.ini_options]\naddopts="--timeout=5"\n',
            "requirements-test.txt": "six\n",
        },
        {"install": "--pre python-dateutil", "env.API_KEY": "a b", "env.MODE": "x"},
    )
    spec = build_spec(proj, Limits(timeout=12))
    script = spec.install_script
    assert spec.python == BASE_PYTHON and spec.limits.timeout == 12
    assert spec.env == {"API_KEY": "a b", "MODE": "x"}
    assert "-e '.[test]'" in script and "-r requirements-test.txt" in script
    assert "--pre python-dateutil" in script and "pip install --progress-bar off pytest-timeout" in script
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    order = [script.index(s) for s in ("-e '.[test]'", "requirements-test.txt", "--pre", "off pytest ||", "pytest-timeout")]
    assert order == sorted(order)


def test_folder_that_is_not_a_distribution(tmp_path: Path) -> None:
    with_reqs = project(tmp_path / "a", {"requirements.txt": "six\n", "pyproject.toml": "[tool.black]\nline-length = 100\n"})
    script = install_script(with_reqs, [], [])
    assert "-r requirements.txt" in script and "-e ." not in script
    bare = project(tmp_path / "b", {"app.py": ""})
    assert "pip install --progress-bar off -e" not in install_script(bare, [], [])


def test_python_override(tmp_path: Path) -> None:
    assert resolve_python(None) == BASE_PYTHON
    assert resolve_python("3.12", backend="docker") == "python3.12"
    with pytest.raises(BuildError):
        resolve_python("2.1")
    current = f"{sys.version_info.major}.{sys.version_info.minor}"
    found = resolve_python(current)
    out = subprocess.run([found, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True).stdout
    assert out.strip() == str(tuple(sys.version_info[:2]))
    assert "shims" not in found  # a pyenv shim would not work inside the sandbox


# -- real builds ----------------------------------------------------------------------------


def build_and_test(proj: Project, workdir: Path) -> dict[str, str]:
    backend = LocalBackend()
    healthy = backend.build(proj, build_spec(proj, Limits(timeout=400)), workdir)
    with backend.fork(healthy) as box:
        suite = run_suite(box, command_of(proj), timeout=300)
    assert suite.results, suite.output_tail
    return suite.outcomes()


@pytest.mark.slow  # a real build from the package index
def test_build_setup_py_only_with_unittest_tests(tmp_path: Path) -> None:
    proj = project(
        tmp_path / "src",
        {
            "setup.py": """
            from setuptools import setup
            setup(name="legacy", version="1.0", py_modules=["legacy"], extras_require={"test": ["six"]})
            """,
            "legacy.py": "def shout(s):\n    return s.upper()\n",
            "tests/test_legacy.py": """
            import unittest
            import six
            import legacy

            class LegacyTest(unittest.TestCase):
                def test_shout(self):
                    self.assertEqual(legacy.shout("a"), "A")
                    self.assertTrue(six.PY3)
            """,
        },
    )
    assert build_and_test(proj, tmp_path / "work") == {"tests/test_legacy.py::LegacyTest::test_shout": "passed"}


@pytest.mark.slow  # a real build from the package index
def test_build_flit_with_test_extra_and_config_plugin(tmp_path: Path) -> None:
    proj = project(
        tmp_path / "src",
        {
            "pyproject.toml": """
            [build-system]
            requires = ["flit_core>=3.4"]
            build-backend = "flit_core.buildapi"

            [project]
            name = "flitty"
            version = "0.1"
            description = "x"

            [project.optional-dependencies]
            test = ["python-dateutil"]

            [tool.pytest.ini_options]
            addopts = "--timeout=60"
            """,
            "flitty/__init__.py": '"""x"""\n',
            "tests/test_f.py": "from dateutil import parser\n\ndef test_parse():\n    assert parser.parse('2020-01-02').day == 2\n",
        },
        {"env.FLITTY_MODE": "fast"},
    )
    assert build_and_test(proj, tmp_path / "work") == {"tests/test_f.py::test_parse": "passed"}


@pytest.mark.slow  # a real build from the package index
def test_build_with_the_deps_of_its_tox_environment(tmp_path: Path) -> None:
    version = f"py{sys.version_info.major}{sys.version_info.minor}"
    proj = project(
        tmp_path / "src",
        {
            "setup.py": "from setuptools import setup\nsetup(name='toxy', version='1.0', py_modules=['toxy'])\n",
            "toxy.py": "def parse(text):\n    from dateutil import parser\n    return parser.parse(text).day\n",
            "tox.ini": f"[tox]\nenvlist = {version}-extra, lint\n[testenv]\ndeps = pytest\n    extra: python-dateutil\n"
                       "[testenv:lint]\ndeps = ruff\n",
            "tests/test_toxy.py": "import toxy\n\ndef test_parse():\n    assert toxy.parse('2020-01-02') == 2\n",
        },
    )
    assert build_and_test(proj, tmp_path / "work") == {"tests/test_toxy.py::test_parse": "passed"}


def flit_pyproject(name: str, tail: str = "") -> str:
    """A flit_core pyproject.toml of a small project, `tail` (more TOML) after its [project] table."""
    return ('[build-system]\nrequires = ["flit_core>=3.4"]\nbuild-backend = "flit_core.buildapi"\n\n'
            f'[project]\nname = "{name}"\nversion = "0.1"\ndescription = "x"\n\n{tail}')


UV_LOCK = """
version = 1
revision = 3
requires-python = ">=3.9"
resolution-markers = [
    "python_full_version >= '3.10'",
    "python_full_version < '3.10'",
]

[[package]]
name = "locked"
version = "0.1"
source = { editable = "." }

[[package]]
name = "six"
version = "1.16.0"
source = { registry = "https://pypi.org/simple" }

[[package]]
name = "iniconfig"
version = "1.1.1"
source = { registry = "https://pypi.org/simple" }
resolution-markers = ["python_full_version < '3.10'"]

[[package]]
name = "iniconfig"
version = "2.0.0"
source = { registry = "https://pypi.org/simple" }
resolution-markers = ["python_full_version >= '3.10'"]

[[package]]
name = "Typing_Extensions"
version = "4.12.2"
source = { registry = "https://pypi.org/simple" }

[[package]]
name = "from-git"
version = "1.0"
source = { git = "https://example.org/from-git.git" }
"""


def test_locked_versions_of_a_uv_lock(tmp_path: Path) -> None:
    """Index packages only; a name locked twice pinned where its resolution markers hold."""
    (tmp_path / "uv.lock").write_text(UV_LOCK)
    assert locked_versions(tmp_path, "3.11") == {"iniconfig": "2.0.0", "six": "1.16.0", "typing-extensions": "4.12.2"}
    assert locked_versions(tmp_path, "3.9")["iniconfig"] == "1.1.1"
    assert locked_versions(tmp_path / "nowhere", "3.11") == {}


@pytest.mark.slow  # a real build from the package index
def test_build_against_the_versions_its_uv_lock_pins(tmp_path: Path) -> None:
    """The newest six is 1.17.0; the test group asks for any six, the lock pins 1.16.0, and the
    test needs it."""
    proj = project(
        tmp_path / "src",
        {
            "pyproject.toml": flit_pyproject("locked", '[dependency-groups]\ntests = ["six", "pytest"]\n'),
            "locked/__init__.py": '"""x"""\n',
            "uv.lock": UV_LOCK,
            "tests/test_l.py": "import six\n\ndef test_locked_six():\n    assert six.__version__ == '1.16.0'\n",
        },
    )
    assert build_and_test(proj, tmp_path / "work") == {"tests/test_l.py::test_locked_six": "passed"}


@pytest.mark.slow  # a real build from the package index
def test_a_group_requirement_that_cannot_install_leaves_the_others(tmp_path: Path) -> None:
    """python-json-logger's dev group names docs tools beside its test tools; in its image one of
    them could not be resolved, and the group's single install left freezegun out too."""
    proj = project(
        tmp_path / "src",
        {
            "pyproject.toml": flit_pyproject("grouped",
                                             '[dependency-groups]\ndev = ["no-such-package-for-miner-tests", "six"]\n'),
            "grouped/__init__.py": '"""x"""\n',
            "tests/test_g.py": "import six\n\ndef test_six():\n    assert six.PY3\n",
        },
    )
    assert build_and_test(proj, tmp_path / "work") == {"tests/test_g.py::test_six": "passed"}


@pytest.mark.slow  # a real build from the package index
def test_build_poetry_core_and_hatch(tmp_path: Path) -> None:
    poetry = project(
        tmp_path / "poetry",
        {
            "pyproject.toml": """
            [build-system]
            requires = ["poetry-core>=1.0"]
            build-backend = "poetry.core.masonry.api"

            [tool.poetry]
            name = "poet"
            version = "0.1.0"
            description = ""
            authors = ["A <a@example.org>"]

            [tool.poetry.dependencies]
            python = ">=3.8"
            six = "*"

            [tool.poetry.group.test.dependencies]
            python-dateutil = "^2.8"
            """,
            "poet/__init__.py": "import six\n",
            "tests/test_p.py": "import dateutil, poet\n\ndef test_ok():\n    assert poet.six\n",
        },
    )
    assert build_and_test(poetry, tmp_path / "work-poetry") == {"tests/test_p.py::test_ok": "passed"}
    hatch = project(
        tmp_path / "hatch",
        {
            "pyproject.toml": """
            [build-system]
            requires = ["hatchling"]
            build-backend = "hatchling.build"

            [project]
            name = "hatched"
            version = "0.1"

            [dependency-groups]
            test = ["six"]
            """,
            "src/hatched/__init__.py": "VALUE = 3\n",
            "tests/test_h.py": "import six\nfrom hatched import VALUE\n\ndef test_value():\n    assert VALUE == 3\n",
        },
    )
    assert build_and_test(hatch, tmp_path / "work-hatch") == {"tests/test_h.py::test_value": "passed"}


@pytest.mark.slow  # a real build from the package index
def test_build_fails_when_the_project_cannot_install(tmp_path: Path) -> None:
    proj = project(tmp_path / "src", {"setup.py": "raise SystemExit('cannot build here')\n"})
    with pytest.raises(BuildError) as caught:
        LocalBackend().build(proj, build_spec(proj, Limits(timeout=300)), tmp_path / "work")
    assert "cannot build here" in caught.value.log


@pytest.mark.slow  # a real build from the package index
def test_a_build_failure_is_reported_by_pips_error_lines(tmp_path: Path) -> None:
    """The skip reason quotes what pip said went wrong, not its closing notes (filelock 4.3.2's
    build backend needs a package this machine's indexes lack)."""
    from miner.mine import _reason

    proj = project(tmp_path / "src", {"pyproject.toml": """
        [build-system]
        requires = ["no-such-backend-for-miner-tests>=1"]
        build-backend = "no_such_backend"
        """})
    with pytest.raises(BuildError) as caught:
        LocalBackend().build(proj, build_spec(proj, Limits(timeout=300)), tmp_path / "work")
    reason = _reason(caught.value)
    assert reason.startswith("build failed: build step 'install' exited 1")
    assert "ERROR:" in reason and "no-such-backend-for-miner-tests" in reason


@pytest.mark.slow  # a real wheel build of miner itself
@pytest.mark.pypi  # its build backend comes from the index
def test_a_plain_install_ships_every_file_the_program_reads(tmp_path: Path) -> None:
    """`pip install .` (not only an editable one): the wheel holds every asset (the verifier, the
    boot tool's source, discovery's pytest plugin, the attack catalogue) and the inversions/
    catalogue, each at its place in the package."""
    import zipfile

    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
                           "-w", str(tmp_path), str(root)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    [wheel] = tmp_path.glob("miner-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    wanted = [p.relative_to(root).as_posix() for p in (root / "miner").rglob("*")
              if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"]
    missing = [name for name in wanted if name not in names]
    assert not missing, missing
    assert any(name.startswith("miner/catalogue_data/") and name.endswith(".yaml") for name in names)
