"""Recording the healthy state of a real, built project: flaky tests, probes, file hashes, skips.

A tiny project is written and built once for the module. Its suite mixes steady tests with
24 coin-flip tests (each passes with probability 1/2 on every run, so a coin test keeps its
outcome over the two healthy runs half the time, and all 24 keep theirs once in 2**24); tests
outside the configured test folder give the projects that cannot be mined, chosen through
the test command.
"""

from __future__ import annotations

import hashlib
import textwrap
import time

import pytest

from miner.healthy import SkipProject, record_healthy
from miner.ecosystems import build_spec
from miner.models import HealthyState, Project
from miner.sandbox.base import Healthy
from miner.sandbox.local import LocalBackend
from miner.sources import fetch, parse_source

pytestmark = pytest.mark.slow  # builds a project, then runs its suite several times per test
COINS = 24
FILES = {
    "pyproject.toml": """
        [build-system]
        requires = ["setuptools>=61"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "coinflip"
        version = "0.1.0"

        [project.scripts]
        coinflip = "coinflip:main"

        [tool.setuptools]
        packages = ["coinflip"]

        [tool.pytest.ini_options]
        testpaths = ["tests"]
        """,
    "coinflip/__init__.py": """
        import argparse
        import random


        def flip() -> bool:
            return random.SystemRandom().random() < 0.5


        def main() -> int:
            argparse.ArgumentParser(prog="coinflip", description="Flip a coin.").parse_args()
            print("heads" if flip() else "tails")
            return 0
        """,
    "tests/test_steady.py": """
        import pytest

        import coinflip


        def test_flip_returns_a_bool():
            assert coinflip.flip() in (True, False)


        def test_arithmetic():
            assert 2 + 2 == 4


        @pytest.mark.skip(reason="never runs")
        def test_skipped():
            raise AssertionError
        """,
    "tests/test_coins.py": f"""
        import pytest

        import coinflip


        @pytest.mark.parametrize("throw", range({COINS}))
        def test_coin(throw):
            assert coinflip.flip()
        """,
    "extra/test_fail.py": """
        def test_wrong():
            assert 1 == 2


        def test_also_wrong():
            raise ValueError("broken")
        """,
    "extra/test_hang.py": """
        import time


        def test_quick():
            assert True


        def test_for_ever():
            time.sleep(10**6)
        """,
}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[LocalBackend, Healthy, Project]:
    root = tmp_path_factory.mktemp("healthy")
    folder = root / "coinflip"
    for name, text in FILES.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(textwrap.dedent(text).lstrip())
    project = fetch(parse_source(str(folder), root), root / "cache")
    backend = LocalBackend()
    return backend, backend.build(project, build_spec(project), root / "work"), project


def record(built: tuple[LocalBackend, Healthy, Project], command: str = "python -m pytest",
           timeout: float = 120) -> HealthyState:
    backend, env, project = built
    return record_healthy(backend, env, project, build_spec(project), command, timeout=timeout)


@pytest.fixture(scope="module")
def state(built) -> HealthyState:
    return record(built)


def test_flaky_tests_are_excluded_and_steady_ones_kept(state: HealthyState) -> None:
    coins = {f"tests/test_coins.py::test_coin[{n}]" for n in range(COINS)}
    assert state.flaky, "24 coin flips kept their outcome over both runs (odds 1 in 2**24)"
    assert set(state.flaky) <= coins
    assert not set(state.flaky) & set(state.outcomes)
    assert set(state.outcomes) >= coins - set(state.flaky)
    assert all(state.outcomes[c] in ("passed", "failed") for c in coins - set(state.flaky))
    assert state.outcomes["tests/test_steady.py::test_flip_returns_a_bool"] == "passed"
    assert state.outcomes["tests/test_steady.py::test_arithmetic"] == "passed"
    assert state.outcomes["tests/test_steady.py::test_skipped"] == "skipped"
    assert not any(t.startswith("extra/") for t in state.outcomes)


def test_probes_inventory_and_hashes_are_recorded(built, state: HealthyState) -> None:
    _, _, project = built
    probes = {p.id: p for p in state.probes}
    assert set(probes) == {"probe::import::coinflip", "probe::script::coinflip"}
    assert probes["probe::import::coinflip"].module == "coinflip"
    assert probes["probe::script::coinflip"].argv == ["coinflip", "--help"]
    for probe in probes.values():
        assert probe.expected_exit == 0 and probe.expected_digest
        assert state.outcomes[probe.id] == "passed"
    assert state.project_dists == ["coinflip"]
    assert {"coinflip", "pytest"} <= set(state.distributions)
    assert state.test_command == "python -m pytest" and state.suite_seconds > 0
    assert set(state.protected) == {"pyproject.toml", "coinflip/__init__.py", "tests/test_steady.py",
                                    "tests/test_coins.py", "extra/test_fail.py", "extra/test_hang.py"}
    for rel, digest in state.file_hashes.items():
        assert digest == hashlib.sha256((project.path / rel).read_bytes()).hexdigest()


def test_a_suite_without_passing_tests_is_skipped(built) -> None:
    with pytest.raises(SkipProject, match=r"no passing tests \(2 collected, none passed; ") as skipped:
        record(built, "python -m pytest extra/test_fail.py")
    assert "extra/test_fail.py::test_also_wrong failed" in str(skipped.value)  # the first one, and why
    assert "ValueError: broken" in str(skipped.value)


def test_a_suite_without_tests_is_skipped(built) -> None:
    with pytest.raises(SkipProject, match="no tests found"):
        record(built, "python -m pytest -k no_test_has_this_name")


def test_a_hanging_suite_is_skipped_after_one_time_limit(built) -> None:
    start = time.monotonic()
    with pytest.raises(SkipProject, match="exceeded its time limit of 10s"):
        record(built, "python -m pytest extra/test_hang.py", timeout=10)
    assert time.monotonic() - start < 20, "the suite was run to its time limit more than once"
