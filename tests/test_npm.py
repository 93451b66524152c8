"""npm projects (miner.ecosystems.node: npm, tape): the test command a package's scripts run, why a
tarball is left out, the build's npm lines, the installed tree's runtime closure, npm sources, and
(slow: the npm registry) tape's per-test results from a real run and a crawl of fixtures/node-lib."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import copy_fixture, write_package

from miner.ecosystems.node import npm, runner, tape
from miner.models import NodePackage
from miner.sources import parse_source

NODE = shutil.which("node")


def test_the_test_command_follows_npm_run_and_drops_coverage(tmp_path: Path) -> None:
    root = write_package(tmp_path / "a", {"scripts": {"pretest": "npm run lint", "test": "npm run tests-only",
                                                      "tests-only": "nyc --reporter=text tape 'test/**/*.js'"},
                                          "devDependencies": {"tape": "^5"}})
    assert runner.project_command(root) == "tape 'test/**/*.js'"
    assert runner.TAPE.claims("tape 'test/**/*.js'") and not runner.is_node_test_command("tape x")


def test_node_running_a_tape_file_is_tape_and_node_test_stays(tmp_path: Path) -> None:
    tape_user = write_package(tmp_path / "b", {"scripts": {"test": "npm run --silent tests-only",
                                                           "tests-only": "nyc node test"},
                                               "devDependencies": {"tape": "^5"}}, {"test/index.js": ""})
    assert runner.project_command(tape_user) == "tape test/index.js"
    node_test = write_package(tmp_path / "c", {"scripts": {"test": "c8 node --test test/"}})
    assert runner.project_command(node_test) == "node --test test/"
    mocha = write_package(tmp_path / "d", {"scripts": {"test": "mocha --reporter spec"}})
    assert runner.project_command(mocha) == "mocha test"
    jest = write_package(tmp_path / "e", {"scripts": {"test": "jest --ci"}})
    assert runner.project_command(jest) == "jest --ci"
    vitest = write_package(tmp_path / "f", {"scripts": {"test": "vitest run"}})
    assert runner.project_command(vitest) is None


def test_why_a_tarball_is_left_out(tmp_path: Path) -> None:
    assert runner.suite_problem(tmp_path) == "no package.json"
    broken = write_package(tmp_path / "broken", "{ not json")
    assert runner.suite_problem(broken).startswith("package.json does not parse")
    vitest = write_package(tmp_path / "vitest", {"scripts": {"test": "vitest run test/"}})
    assert "runs no test runner miner reads (node --test, tape, mocha, jest)" in runner.suite_problem(vitest)
    mocha = write_package(tmp_path / "mocha", {"scripts": {"test": "mocha test/"}})
    assert "ships no test files" in runner.suite_problem(mocha)
    bare = write_package(tmp_path / "bare", {"scripts": {"test": "tape 'test/**/*.js'"}}, {"index.js": ""})
    assert "ships no test files" in runner.suite_problem(bare)
    kept = write_package(tmp_path / "kept", {"scripts": {"test": "tape 'test/**/*.js'"}}, {"test/a/b.js": ""})
    assert runner.suite_problem(kept) is None


def test_tape_runs_each_file_with_its_reporter_and_names_one_file_to_check() -> None:
    command = "tape -r ./test/setup.js 'test/**/*.js'"
    assert tape.split_command(command) == (["./test/setup.js"], ["test/**/*.js"])
    script = tape.suite_command(command, "/tmp/r.jsonl")
    assert "shopt -s globstar nullglob" in script and "test/**/*.js" in script and "./test/setup.js" in script
    chosen = tape.suite_command(command, "/tmp/r.jsonl", tests=["test/b.js::x", "test/a.js::y::z", "test/a.js::w"])
    assert "test/a.js test/b.js" in chosen and "**" not in chosen
    assert runner.TAPE.check_command(command, "test/a.js::parse::nested") == "tape -r ./test/setup.js test/a.js"
    assert runner.run_passed(0, "# tests 3\n# pass  3\n\n# ok\n")
    assert not runner.run_passed(1, "# tests 3\n# pass  2\n# fail  1\n")


def test_the_build_installs_the_runner_apart_and_narrows_dev_dependencies() -> None:
    root = Path(__file__).parents[1] / "fixtures" / "node-lib"
    lines = "\n".join(npm.install_lines(root))
    assert "'tape@^5.7.0'" in lines and "/sandbox/node_modules/tape" in lines and "/sandbox/venv/bin/tape" in lines
    assert "the others (3: linters, coverage, types, the runner) are dropped" in lines
    assert lines.rstrip().endswith("npm install --no-audit --no-fund --no-update-notifier --ignore-scripts "
                                   "--loglevel=error || exit 1")
    assert npm.dependencies(root) == ["debug", "escape-html", "ms", "qs"]
    # a project without package.json (a Dockerized service in another language) has no npm part
    service = Path(__file__).parents[1] / "fixtures" / "perl-service"
    assert npm.install_lines(service) == [] and npm.test_dependencies(service) == []
    assert npm.package_targets(service, []) == []
    # a Dockerized Node project's image installs what it needs: miner adds no npm step to it
    assert npm.install_lines(Path(__file__).parents[1] / "fixtures" / "node-service") == []


def test_a_lockfile_is_installed_as_locked(tmp_path: Path) -> None:
    root = write_package(tmp_path / "locked", {"scripts": {"test": "node --test"}},
                         {"package-lock.json": "{}", "test/a.test.js": ""})
    lines = npm.install_lines(root)
    assert lines[-1].startswith("npm ci ") and not any("tape" in line for line in lines)
    assert npm.install_lines(write_package(tmp_path / "py", {"scripts": {"test": "node --test"}},
                                           {"setup.py": ""})) == []


def test_the_runtime_closure_resolves_nested_copies_as_node_does() -> None:
    packages = [NodePackage(path="node_modules/a", name="a", requires=["b", "c"]),
                NodePackage(path="node_modules/a/node_modules/b", name="b", version="2.0.0", requires=["c"]),
                NodePackage(path="node_modules/b", name="b", version="1.0.0"),
                NodePackage(path="node_modules/c", name="c"),
                NodePackage(path="node_modules/tape", name="tape", dev=True, requires=["b"])]
    assert npm.runtime_closure(packages, ["a"]) == {"node_modules/a": 0, "node_modules/a/node_modules/b": 1,
                                                    "node_modules/c": 1}
    assert npm.package_of("@scope/pkg/sub") == "@scope/pkg" and npm.package_of("node:fs") is None
    assert npm.package_of("es-errors/type") == "es-errors" and npm.package_of("../lib") is None


def test_npm_sources_need_an_exact_version(tmp_path: Path) -> None:
    source = parse_source("npm:qs@6.17.1", tmp_path)
    assert (source.kind, source.location, source.name) == ("npm", "qs@6.17.1", "qs")
    scoped = parse_source("npm:@ljharb/through@2.3.14", tmp_path)
    assert scoped.location == "@ljharb/through@2.3.14" and scoped.name == "ljharb-through"
    for bad, reason in [("npm:qs", "exact version"), ("npm:qs@^6", "exact version"), ("npm:Bad_Name@1.0.0", "name")]:
        with pytest.raises(ValueError, match=reason):
            parse_source(bad, tmp_path)


def test_tape_reports_of_the_reporter_read_as_node_reports() -> None:
    lines = [{"file": "test/a.js", "names": ["test/a.js", "parse", "nested"], "passed": True},
             {"file": "test/a.js", "names": ["test/a.js", "fails"], "passed": False, "message": "should be equal"},
             {"file": "test/b.js", "names": ["test/b.js"], "passed": False, "message": "Error: Cannot find module 'x'"}]
    results = runner.parse_report("\n".join(json.dumps(line) for line in lines))
    assert {k: v.outcome for k, v in results.items()} == {"test/a.js::parse::nested": "passed",
                                                         "test/a.js::fails": "failed", "test/b.js": "error"}


@pytest.mark.slow
@pytest.mark.skipif(NODE is None or shutil.which("npm") is None, reason="node and npm")
def test_the_tape_reporter_reads_a_real_run(tmp_path: Path) -> None:
    """fixtures/node-lib installed from the registry, its tape suite run file by file under the
    reporter: per-test results; with a package gone, the files loading it report its error."""
    root = copy_fixture("node-lib", tmp_path / "node-lib")
    subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--ignore-scripts", "--loglevel=error"], cwd=root,
                   check=True, capture_output=True, timeout=600)
    command = runner.project_command(root)

    def run() -> dict[str, str]:
        script = tape.suite_command(command, str(tmp_path / "report.jsonl"))
        subprocess.run(["bash", "-c", script], cwd=root, capture_output=True, timeout=120)
        return {k: v.outcome for k, v in runner.parse_report((tmp_path / "report.jsonl").read_text()).items()}

    healthy = run()
    assert len(healthy) == 8 and set(healthy.values()) == {"passed"}, healthy
    shutil.rmtree(root / "node_modules" / "escape-html")
    broken = run()
    assert broken["test/html.js"] == "error" and broken["test/duration.js::humanDuration"] == "passed"
    message = runner.parse_report((tmp_path / "report.jsonl").read_text())["test/html.js"].message
    assert message.startswith("Error: Cannot find module 'escape-html'")


@pytest.mark.slow
@pytest.mark.skipif(NODE is None or shutil.which("npm") is None, reason="node and npm")
def test_a_crawl_of_the_node_library_mines_node_tasks_and_its_coverage(tmp_path: Path) -> None:
    """`miner crawl` of fixtures/node-lib (npm from the registry, tape), then `miner stats --coverage`:
    tasks in three families, none of Python's, each failing only the tests of the package it broke
    (or all of them for node's own options); ms, escape-html and debug each have a task (qs's two
    tests may go to one of the twenty packages qs brings: the selection tries the deepest first),
    and every package reached without one is accounted for with a reason; a
    package.json that does not parse, a test script of another runner and a suite with no test are
    skipped with their reasons, and the other line still runs."""
    from conftest import run_miner, summary_rows, write_repos

    from miner.store import Store

    root = copy_fixture("node-lib", tmp_path / "node-lib")
    broken = write_package(tmp_path / "broken", "{ not json", {"test/a.js": ""})
    vitest = write_package(tmp_path / "vitest", {"scripts": {"test": "vitest run"}}, {"test/a.test.js": "it('x', () => {});"})
    empty = write_package(tmp_path / "empty", {"scripts": {"test": "tape test/*.js"}, "devDependencies": {"tape": "^5"}},
                          {"test/a.js": "// no test here"})
    repos = write_repos(tmp_path / "repos.txt", [broken, vitest, empty, root])
    done = run_miner(tmp_path / "store", "crawl", "--repos", repos)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = summary_rows(done.stdout)
    assert "package.json does not parse" in rows[str(broken)]["reason / by type"]
    assert "runs no test runner miner reads (node --test, tape, mocha, jest): 'vitest run'" in \
        rows[str(vitest)]["reason / by type"]
    assert rows[str(empty)]["status"] == "skipped" and "no tests" in rows[str(empty)]["reason / by type"]
    with Store(tmp_path / "store", create=False) as store:
        tasks = store.list_tasks()
        assert len(tasks) >= 5 and {t.family for t in tasks} >= {"deps", "fs", "env"}, [t.type_id for t in tasks]
        assert not {t.family for t in tasks} & {"virtualenv"}
        html = [t for t in tasks if t.target.key == "node-package:escape-html"]
        assert html and all(set(t.f2p) == {"test/html.js::htmlLine escapes the message",
                                           "test/html.js::htmlLine escapes the level"} for t in html)
        instruction = (tmp_path / "store" / "tasks" / html[0].id / "instruction.md").read_text()
        assert "tape test/html.js" in instruction and "Node.js project" in instruction
    coverage = run_miner(tmp_path / "store", "stats", "--coverage", "--json")
    rows = {row["repo"]: row for row in json.loads(coverage.stdout)}
    row = rows[str(root)]
    packages = row["by_kind"]["packages"]
    assert packages["reached"] > 4 and packages["with_task"] >= 4, row["by_kind"]
    assert sum(row["reasons"].values()) == row["reached"] - row["with_task"], row["reasons"]
    with Store(tmp_path / "store", create=False) as store:
        targets = {t.target.key for t in store.list_tasks() if t.target.kind == "node-package"}
    assert {"node-package:ms", "node-package:escape-html", "node-package:debug"} <= targets, targets


def test_a_test_cut_short_by_its_file_takes_the_files_error() -> None:
    """The instruction's error for a test that never ran because its file failed to load: the
    file's error under a Node runner; under pytest nothing is made up (the test stays missing)."""
    from miner.models import SuiteRun, TestResult
    from miner.testing import observed

    results = {"test/html.js": TestResult(id="test/html.js", outcome="error", message="Error: Cannot find module 'x'"),
               "test/a.js::ok": TestResult(id="test/a.js::ok", outcome="passed")}
    node = SuiteRun(command="tape 'test/**/*.js'", exit_code=1, duration=0.1, results=results)
    found = observed(node, "test/html.js::escapes")
    assert found is not None and found.outcome == "error" and found.message.startswith("Error: Cannot find module")
    assert observed(node, "test/a.js::ok").outcome == "passed" and observed(node, "test/b.js::gone") is None
    pytest_run = SuiteRun(command="python -m pytest", exit_code=1, duration=0.1, results=results)
    assert observed(pytest_run, "test/html.js::escapes") is None


@pytest.mark.skipif(NODE is None, reason="node")
def test_a_file_whose_node_never_started_carries_nodes_error(tmp_path: Path) -> None:
    """node refusing to start (a NODE_OPTIONS preload that is not there) writes no report line:
    the file becomes its own entry with node's first error line, the one a person sees."""
    import os

    root = write_package(tmp_path / "p", {"scripts": {"test": "tape test/*.js"}}, {"test/a.js": "", "test/b.js": ""})
    script = tape.suite_command("tape test/*.js", str(tmp_path / "report.jsonl"))
    env = {**os.environ, "NODE_OPTIONS": f"--require {tmp_path}/missing-preload.js"}
    done = subprocess.run(["bash", "-c", script], cwd=root, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    results = runner.parse_report((tmp_path / "report.jsonl").read_text())
    assert set(results) == {"test/a.js", "test/b.js"} and {r.outcome for r in results.values()} == {"error"}
    assert results["test/a.js"].message == f"Error: Cannot find module '{tmp_path}/missing-preload.js'"
