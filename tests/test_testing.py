"""Suite runs inside a real sandbox: node ids and outcomes from junit XML, subsets, crashes."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

from miner.healthy import hash_tree
from miner.models import Project, Source
from miner.sandbox.base import BuildSpec, Healthy, Limits
from miner.sandbox.local import LocalBackend
from miner.ecosystems.python.pytest import node_id, parse_junit, suite_command
from miner.testing import command_of, outcome_diff, run_suite

TEST_A = '''
import os, time, unittest
import pytest

def test_pass(): pass
def test_fail(): assert 1 == 2, "nope"

@pytest.fixture
def bad(): raise RuntimeError("fixture boom")
def test_error(bad): pass

def test_skip(): pytest.skip("not today")

@pytest.mark.xfail(reason="known")
def test_xfail(): assert 0

@pytest.mark.parametrize("x", [1, 2, "a/b c"])
def test_param(x): assert x != 2

def test_sleepy():
    if os.environ.get("SLEEPY"):
        time.sleep(100)

class TestK:
    class TestInner:
        def test_deep(self): pass
    def test_m(self): pass

class TestU(unittest.TestCase):
    def test_u(self): self.assertEqual(1, 1)
    def test_u_fails(self): self.assertEqual(1, 2)
    @unittest.skip("why")
    def test_us(self): pass
'''

EXPECTED = {
    "tests/test_a.py::test_pass": "passed",
    "tests/test_a.py::test_fail": "failed",
    "tests/test_a.py::test_error": "error",
    "tests/test_a.py::test_skip": "skipped",
    "tests/test_a.py::test_xfail": "skipped",
    "tests/test_a.py::test_param[1]": "passed",
    "tests/test_a.py::test_param[2]": "failed",
    "tests/test_a.py::test_param[a/b c]": "passed",
    "tests/test_a.py::test_sleepy": "passed",
    "tests/test_a.py::TestK::TestInner::test_deep": "passed",
    "tests/test_a.py::TestK::test_m": "passed",
    "tests/test_a.py::TestU::test_u": "passed",
    "tests/test_a.py::TestU::test_u_fails": "failed",
    "tests/test_a.py::TestU::test_us": "skipped",
    "tests/sub/test_b.py::TestChild::test_inherited": "passed",
    "tests/test_c.py": "error",  # a module that fails to import: its collection error
}


def make_project(root: Path, overrides: dict[str, str] | None = None) -> Project:
    (root / "tests" / "sub").mkdir(parents=True)
    (root / "tests" / "__init__.py").write_text("")
    (root / "tests" / "sub" / "__init__.py").write_text("")
    (root / "tests" / "test_a.py").write_text(TEST_A)
    (root / "tests" / "base.py").write_text("class Base:\n    def test_inherited(self):\n        pass\n")
    (root / "tests" / "sub" / "test_b.py").write_text("from tests.base import Base\n\nclass TestChild(Base):\n    pass\n")
    (root / "tests" / "test_c.py").write_text("import module_that_does_not_exist\n\ndef test_never(): pass\n")
    source = Source(raw=str(root), kind="local", location=str(root), overrides=overrides or {})
    return Project(source=source, repo=str(root), commit="1", path=root)


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> tuple[LocalBackend, Healthy]:
    root = tmp_path_factory.mktemp("testing")
    project = make_project(root / "proj")
    backend = LocalBackend()
    spec = BuildSpec(python=sys.executable, install_script="python -m pip install -q pytest", limits=Limits(timeout=300))
    return backend, backend.build(project, spec, root / "work")


def test_outcomes_and_ids_from_a_real_run(healthy: tuple[LocalBackend, Healthy]) -> None:
    backend, env = healthy
    with backend.fork(env) as box:
        suite = run_suite(box, "python -m pytest")
        assert suite.outcomes() == EXPECTED, suite.output_tail
        assert suite.exit_code == 1 and not suite.timed_out
        assert suite.results["tests/test_a.py::test_fail"].message.startswith("AssertionError: nope")
        assert "fixture boom" in suite.results["tests/test_a.py::test_error"].message
        assert suite.results["tests/test_a.py::test_skip"].message == "not today"
        assert "module_that_does_not_exist" in suite.results["tests/test_c.py"].message or suite.results[
            "tests/test_c.py"
        ].message == "collection failure"
        assert all(r.duration >= 0 for r in suite.results.values())
        # the report is cleaned up so it does not show in file hashes
        assert box.run("ls /sandbox/.miner | grep -c report || true").output.strip() == "0"


def test_subset_and_missing_ids(healthy: tuple[LocalBackend, Healthy]) -> None:
    backend, env = healthy
    wanted = [
        "tests/test_a.py::test_pass",
        "tests/test_a.py::test_param[a/b c]",
        "tests/sub/test_b.py::TestChild::test_inherited",
        "tests/test_a.py::TestU::test_u_fails",
        "tests/test_a.py::test_gone",  # no such test: pytest would refuse the whole run
    ]
    with backend.fork(env) as box:
        suite = run_suite(box, "python -m pytest", tests=wanted)
    assert suite.outcomes() == {
        "tests/test_a.py::test_pass": "passed",
        "tests/test_a.py::test_param[a/b c]": "passed",
        "tests/sub/test_b.py::TestChild::test_inherited": "passed",
        "tests/test_a.py::TestU::test_u_fails": "failed",
        "tests/test_a.py::test_gone": "missing",
    }


def test_ids_of_a_broken_module_become_missing(healthy: tuple[LocalBackend, Healthy]) -> None:
    backend, env = healthy
    with backend.fork(env) as box:
        box.run("echo 'import not_there' > tests/sub/test_b.py")
        suite = run_suite(box, "python -m pytest", tests=["tests/sub/test_b.py::TestChild::test_inherited", "tests/test_a.py::test_pass"])
    assert suite.results["tests/test_a.py::test_pass"].outcome == "passed"
    assert suite.results["tests/sub/test_b.py::TestChild::test_inherited"].outcome == "missing"


def test_more_ids_than_one_command_can_name(healthy: tuple[LocalBackend, Healthy]) -> None:
    """A parametrized suite whose ids pass Linux's 128 kB limit on one argument: asked-for ids are
    run through their files, deselected ones are run anyway; only what was asked for comes back."""
    backend, env = healthy
    many = [f"tests/test_many.py::test_p[{'x' * 60}{i}]" for i in range(3000)]  # ~250 kB of ids
    with backend.fork(env) as box:
        box.run("printf 'import pytest\\n@pytest.mark.parametrize(\"v\", [\"%s\" + str(i) for i in range(3000)])\\n"
                "def test_p(v): assert not v.endswith(\"7\")\\n' " + "x" * 60 + " > tests/test_many.py")
        asked = run_suite(box, "python -m pytest", tests=many[:2000] + ["tests/test_a.py::test_pass"])
        rest = run_suite(box, "python -m pytest", deselect=many[:2500])
    assert set(asked.outcomes()) == set(many[:2000]) | {"tests/test_a.py::test_pass"}
    assert asked.outcomes()[many[7]] == "failed" and asked.outcomes()[many[8]] == "passed"
    assert not set(rest.outcomes()) & set(many[:2500])
    assert set(many[2500:]) <= set(rest.outcomes()) and rest.outcomes()["tests/test_a.py::test_pass"] == "passed"


def test_hashes_of_more_files_than_one_command_can_name(healthy: tuple[LocalBackend, Healthy]) -> None:
    """Named files whose paths pass Linux's 128 kB limit on one argument (pygments' test tree:
    "Argument list too long") are hashed in several commands, every one of them."""
    backend, env = healthy
    names = [f"tests/data/{'d' * 80}-{i}.txt" for i in range(2000)]  # ~200 kB of paths
    with backend.fork(env) as box:
        box.run("mkdir -p tests/data && cd tests/data && for i in $(seq 0 1999); do echo $i > " + "d" * 80 + "-$i.txt; done")
        hashes = hash_tree(box, [], paths=[f"/sandbox/project/{n}" for n in names] + ["/sandbox/project/gone"])
    assert len(hashes) == 2000 and "/sandbox/project/gone" not in hashes
    assert hashes[f"/sandbox/project/{names[7]}"] == hashlib.sha256(b"7\n").hexdigest()


def test_timeout_gives_no_results(healthy: tuple[LocalBackend, Healthy]) -> None:
    backend, env = healthy
    with backend.fork(env) as box:
        suite = run_suite(box, "SLEEPY=1 python -m pytest", tests=["tests/test_a.py::test_sleepy"], timeout=5)
    assert suite.timed_out
    assert suite.outcomes() == {"tests/test_a.py::test_sleepy": "missing"}


def test_crash_gives_no_results_and_a_tail(healthy: tuple[LocalBackend, Healthy]) -> None:
    backend, env = healthy
    with backend.fork(env) as box:
        box.run("echo 'raise RuntimeError(\"conftest exploded\")' > conftest.py")
        suite = run_suite(box, "python -m pytest")
    assert suite.results == {}
    assert suite.exit_code != 0 and "conftest exploded" in suite.output_tail


def test_empty_subset_runs_nothing(healthy: tuple[LocalBackend, Healthy]) -> None:
    backend, env = healthy
    with backend.fork(env) as box:
        suite = run_suite(box, "python -m pytest", tests=[])
    assert suite.results == {} and suite.duration == 0.0


def test_parse_junit_edge_cases() -> None:
    assert parse_junit(b"") == {}
    assert parse_junit(b"<testsuites><testsuite") == {}  # truncated by a kill
    both = b"""<testsuites><testsuite>
      <testcase classname="pkg.test_x.TestA" name="test_y" file="pkg/test_x.py" time="0.5">
        <failure message="boom">trace</failure><error message="teardown">t</error>
      </testcase>
      <testcase classname="pkg.test_x" name="test_z" time="x"/>
    </testsuite></testsuites>"""
    results = parse_junit(both)
    assert results["pkg/test_x.py::TestA::test_y"].outcome == "failed"
    assert results["pkg/test_x.py::TestA::test_y"].duration == 0.5
    assert results["pkg/test_x.py::test_z"].outcome == "passed"  # no file attribute: module seen elsewhere


def test_node_id_without_file_guesses_module_from_case() -> None:
    assert node_id("tests.unit.test_m.TestA", "test_b[1]", None) == "tests/unit/test_m.py::TestA::test_b[1]"
    assert node_id("", "tests.test_m", None) == "tests/test_m.py"
    assert node_id("pkg.mod", "pkg.mod.func", "pkg/mod.py") == "pkg/mod.py::pkg.mod.func"  # a doctest


def test_pytest_command_and_suite_command(tmp_path: Path) -> None:
    plain = make_project(tmp_path / "a")
    assert command_of(plain) == "python -m pytest"
    custom = make_project(tmp_path / "b", {"test": "python -m pytest tests/sub -x"})
    assert command_of(custom) == "python -m pytest tests/sub -x"
    line = suite_command("python -m pytest", "/sandbox/.miner/r.xml", ["t.py::test_a[x y]"])
    assert line.startswith("python -m pytest --junitxml=/sandbox/.miner/r.xml -o junit_family=xunit1")
    assert line.endswith("'t.py::test_a[x y]'")


def test_outcome_diff() -> None:
    before = {"a": "passed", "b": "passed", "c": "failed"}
    after = {"a": "passed", "b": "failed", "d": "passed"}
    assert outcome_diff(before, after) == [("b", "passed", "failed"), ("c", "failed", "missing"), ("d", "missing", "passed")]
