"""Node's test runner as miner drives it: the reporter's events, test ids, one test's command."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from miner.ecosystems.node import runner
from miner.instruction import check_command
from miner.models import PROJECT_DIR
from miner.testing import command_of

FIXTURE = Path(__file__).parent.parent / "fixtures" / "node-service"

# What reporter.mjs wrote for a suite with nested describes, a failure, a skip, a todo and a file
# whose require threw (node 20.20 and Debian's 18.20 write the same lines).
RECORDED = "\n".join(json.dumps(e) for e in [
    {"file": f"{PROJECT_DIR}/test/a.test.js", "names": ["routes", "GET / answers"], "passed": True, "kind": "test",
     "skip": False, "todo": False, "duration_ms": 0.46, "message": ""},
    {"file": f"{PROJECT_DIR}/test/a.test.js", "names": ["routes", "inner", "deep"], "passed": False, "kind": "test",
     "skip": False, "todo": False, "duration_ms": 0.96, "message": "Expected values to be strictly equal:\n\n1 !== 2\n"},
    {"file": f"{PROJECT_DIR}/test/a.test.js", "names": ["routes", "inner"], "passed": False, "kind": "suite",
     "skip": False, "todo": False, "duration_ms": 1.1, "message": "1 subtest failed"},
    {"file": f"{PROJECT_DIR}/test/a.test.js", "names": ["skipped one"], "passed": True, "kind": "test",
     "skip": True, "todo": False, "duration_ms": 0.1, "message": ""},
    {"file": f"{PROJECT_DIR}/test/a.test.js", "names": ["todo one"], "passed": True, "kind": "test",
     "skip": False, "todo": True, "duration_ms": 0.1, "message": ""},
    {"file": f"{PROJECT_DIR}/test/b.test.js", "names": [f"{PROJECT_DIR}/test/b.test.js"], "passed": False,
     "kind": "test", "skip": False, "todo": False, "duration_ms": 70.5, "message": "test failed"},
]) + "\nnot json\n"


def test_report_lines_become_test_ids_and_outcomes() -> None:
    results = runner.parse_report(RECORDED)
    assert {k: v.outcome for k, v in results.items()} == {
        "test/a.test.js::routes::GET / answers": "passed",
        "test/a.test.js::routes::inner::deep": "failed",
        "test/a.test.js::skipped one": "skipped",
        "test/a.test.js::todo one": "skipped",
        "test/b.test.js": "error",
    }
    assert results["test/a.test.js::routes::inner::deep"].message.startswith("Expected values")
    assert results["test/a.test.js::routes::GET / answers"].message == ""


def test_a_chosen_run_names_the_files_of_its_tests() -> None:
    script = runner.suite_command("node --test test/", "/sandbox/.miner/r.jsonl",
                                  ["test/a.test.js::routes::deep", "test/c.test.js::x"])
    assert "--test-reporter=/sandbox/.miner/r.jsonl.reporter.mjs" in script
    assert "--test-reporter-destination=/sandbox/.miner/r.jsonl" in script
    assert script.split("&& ", 1)[1].split(";")[0].endswith("test/a.test.js test/c.test.js")
    assert " test/ " not in script


def test_one_test_command_and_its_verdict() -> None:
    assert check_command("node --test test/", "test/a.test.js::routes::GET / (all)") == \
        "node --test '--test-name-pattern=^GET / \\(all\\)$' test/a.test.js"
    assert check_command("python -m pytest --junitxml=x.xml", "tests/t.py::k") == "python -m pytest tests/t.py::k"
    assert runner.run_passed(0, "ok 1 - x\n# tests 2\n# pass 1\n# fail 0\n# skipped 1\n")
    assert runner.run_passed(0, "✔ x\nℹ tests 1\nℹ pass 1\nℹ fail 0\n")
    assert not runner.run_passed(0, "# tests 1\n# pass 0\n# skipped 1\n")  # the pattern matched nothing
    assert not runner.run_passed(1, "# pass 1\n# fail 1\n")


def test_the_project_command_comes_from_package_json(tmp_path: Path) -> None:
    from miner.models import Project, Source

    def project(files: dict[str, str]) -> Project:
        root = tmp_path / str(len(list(tmp_path.iterdir())))
        for name, text in files.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(text)
        return Project(source=Source(raw=str(root), kind="local", location=str(root)), path=root,
                       repo=str(root), commit="x")

    node = project({"package.json": json.dumps({"scripts": {"test": "node --test test/"}}), "server.js": ""})
    assert command_of(node) == "node --test test/"
    mixed = project({"package.json": json.dumps({"scripts": {"test": "node --test"}}), "tool.py": ""})
    assert command_of(mixed) == "python -m pytest"
    mocha = project({"package.json": json.dumps({"scripts": {"test": "mocha"}})})
    assert command_of(mocha) == "mocha test"
    vitest = project({"package.json": json.dumps({"scripts": {"test": "vitest run"}})})
    assert command_of(vitest) == "python -m pytest"
    broken = project({"package.json": "{\"scripts\": "})
    with pytest.raises(runner.ManifestError, match="package.json does not parse"):
        command_of(broken)


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_the_reporter_reads_a_real_node_run(tmp_path: Path) -> None:
    report = tmp_path / "report.jsonl"
    script = runner.suite_command("node --test test/", str(report))
    env = {**os.environ, "QUOTD_CONFIG": str(FIXTURE / "config" / "quotd.json"), "TZ": "Europe/Paris"}
    done = subprocess.run(["bash", "-c", script], cwd=FIXTURE, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    results = runner.parse_report(report.read_text().replace(str(FIXTURE.resolve()), PROJECT_DIR))
    assert len(results) == 8 and {r.outcome for r in results.values()} == {"passed"}
    assert "test/quotes.test.js::the day follows the time zone" in results
    assert not Path(f"{report}.reporter.mjs").exists()


def test_the_verifier_reads_the_reporter_as_miner_does() -> None:
    """The standalone verifier's parser (it imports nothing of miner) gives the ids miner recorded."""
    from test_export import load_verifier

    verifier = load_verifier()
    ours = {k: v.outcome for k, v in runner.parse_report(RECORDED).items()}
    theirs = verifier.parse_node_report(RECORDED.encode(), PROJECT_DIR)
    assert {k: v[0] for k, v in theirs.items()} == {k: ("failed" if v == "error" else v) for k, v in ours.items()}


def test_the_export_runs_node_tests_with_nodes_options() -> None:
    from miner.export.common import ExportError, runner_spec

    assert runner_spec("node --test --test-concurrency=1 test/") == {
        "runner": "node", "node_args": ["--test", "--test-concurrency=1"], "pytest_args": []}
    assert runner_spec("python -m pytest -x tests") == {"runner": "pytest", "pytest_args": ["-x", "tests"]}
    with pytest.raises(ExportError, match="not a plain pytest invocation"):
        runner_spec("npx vitest run")
