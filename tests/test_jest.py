"""jest (miner.ecosystems.node.jest): the test command a package's scripts and jest's data config
give (a config that is code refused with its reason), jest's JSON report as per-test results (a file
that failed to load as one entry), the one-test command and whether its run passed, the verifier's
reading of the same report; slow: a real jest run's per-test results (the npm registry), a local
crawl of fixtures/node-jest, and its export on the Docker backend, checked (untouched 0, the
reference fix 1) and attacked through jest (each shortcut applies and scores 0)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import copy_fixture, export_fixture, write_package

from miner import projectfiles
from miner.ecosystems.node import jest, npm, runner

NODE = shutil.which("node")
ROOT = Path(__file__).resolve().parent.parent
FIXTURE_COMMAND = """jest --ci --config '{"testEnvironment":"node","testMatch":["**/test/**/*.test.js"]}'"""
DOCKER_TYPES = "deps/node-entry-corrupt,fs/node-package-unreadable,env/node-options-preload-missing"
JEST_SHORTCUTS = ["jest-circus-forced", "jest-config-js-stub", "jest-package-key-stub", "jest-mocks-folder",
                  "jest-cache-seeded"]


@pytest.mark.parametrize("script, command", [
    ("jest", "jest --ci"),
    ("jest --coverage --verbose -w 2 test/unit", "jest --ci test/unit"),
    ("npx jest --runInBand --testTimeout=8000", """jest --ci --config '{"testTimeout":8000}'"""),
    ("nyc --reporter=text jest --env node --reporters default src", """jest --ci --config '{"testEnvironment":"node"}' src"""),
    ("c8 jest --setupFilesAfterEnv ./t/setup.js -t slow", """jest --ci --config '{"setupFilesAfterEnv":["./t/setup.js"]}'"""),
])
def test_jest_scripts_are_normalised(tmp_path: Path, script: str, command: str) -> None:
    root = write_package(tmp_path, {"scripts": {"test": script}})
    assert runner.project_command(root) == command
    assert runner.JEST.claims(command) and not runner.MOCHA.claims(command) and not runner.TAPE.claims(command)


def test_npm_run_hops_reach_jest_and_its_data_config_is_read(tmp_path: Path) -> None:
    key = write_package(tmp_path / "key", {"scripts": {"test": "npm run lint && npm run unit", "unit": "jest --ci"},
                                           "jest": {"testMatch": ["**/spec/*.js"], "coverageThreshold": {"x": 1},
                                                    "reporters": ["default"], "clearMocks": True}})
    assert runner.project_command(key) == """jest --ci --config '{"clearMocks":true,"testMatch":["**/spec/*.js"]}'"""
    # jest.config.json wins over package.json; a script's --config names the file read; its options win
    file = write_package(tmp_path / "file", {"scripts": {"test": "jest --config conf/j.json --testTimeout 50"},
                                             "jest": {"roots": ["src"]}},
                         {"conf/j.json": json.dumps({"roots": ["lib"], "testTimeout": 9})})
    assert runner.project_command(file) == """jest --ci --config '{"roots":["lib"],"testTimeout":50}'"""


def test_a_config_that_is_code_or_transforms_is_not_read(tmp_path: Path) -> None:
    code = write_package(tmp_path / "js", {"scripts": {"test": "jest"}},
                         {"jest.config.js": "module.exports = {}", "test/a.test.js": "test('x', () => {});"})
    assert runner.project_command(code) is None
    assert runner.suite_problem(code) == "its jest config jest.config.js is code (miner does not run it to read it)"
    named = write_package(tmp_path / "ts", {"scripts": {"test": "jest -c jest.config.ts"}}, {"jest.config.ts": ""})
    assert "jest.config.ts is code" in runner.suite_problem(named)
    preset = write_package(tmp_path / "preset", {"scripts": {"test": "jest"}, "jest": {"preset": "ts-jest"}})
    assert "transforms the test files (preset)" in runner.suite_problem(preset)


def test_the_fixture_runs_under_jest_with_its_config() -> None:
    root = ROOT / "fixtures" / "node-jest"
    assert runner.project_command(root) == FIXTURE_COMMAND
    assert runner.suite_problem(root) is None
    assert npm.test_files(root, FIXTURE_COMMAND) == ["test/changelog.test.js", "test/dates.test.js",
                                                     "test/settings.test.js"]
    assert npm.test_dependencies(root) == []  # jest is miner's: dropped with the linters
    lines = "\n".join(npm.install_lines(root))
    assert "'jest@^29.7.0'" in lines and "ln -sfn /sandbox/.miner-node/node_modules/jest /sandbox/node_modules/jest" in lines
    assert "ln -sfn /sandbox/.miner-node/node_modules/.bin/jest /sandbox/venv/bin/jest" in lines


def test_the_suite_runs_with_its_config_explicit_and_jests_report() -> None:
    script = jest.suite_command(FIXTURE_COMMAND + " test/unit", "/tmp/r.json")
    assert script.startswith("jest --ci --no-cache --watchman=false --forceExit --maxWorkers=2 --config ")
    assert '"cacheDirectory":"/tmp/r.json.jest-cache"' in script and "--json --outputFile=/tmp/r.json test/unit;" in script
    chosen = jest.suite_command(FIXTURE_COMMAND, "/tmp/r.json", tests=["test/b.test.js::x::y", "test/a.test.js::z"])
    assert "--runTestsByPath test/a.test.js test/b.test.js;" in chosen
    assert jest.verifier_spec(FIXTURE_COMMAND) == {
        "runner": "jest", "jest_config": {"testEnvironment": "node", "testMatch": ["**/test/**/*.test.js"]},
        "pytest_args": []}
    assert runner.JEST.collect_reads == jest.CONFIG_FILES and "jest.config.js" in jest.CONFIG_FILES
    assert all(projectfiles.is_runner_config(name) for name in jest.CONFIG_FILES)  # a break may not touch them
    assert jest.command_files("jest --ci test/unit") == ["test/unit/**/__tests__/**/*.js", *(
        f"test/unit/**/{g.removeprefix('**/')}" for g in jest.DEFAULT_FILES[1:])]


REPORT = {"testResults": [
    {"name": "/sandbox/project/test/a.test.js", "status": "failed", "message": "", "assertionResults": [
        {"ancestorTitles": ["parse", "nested"], "title": "reads (x)", "status": "passed", "duration": 3,
         "failureMessages": []},
        {"ancestorTitles": ["parse"], "title": "fails", "status": "failed", "duration": 1, "failureMessages": [
            "Error: \x1b[2mexpect(\x1b[22mreceived).toBe(expected) // Object.is equality\n\nExpected: 3\n    at x"]},
        {"ancestorTitles": [], "title": "later", "status": "pending", "failureMessages": []},
        {"ancestorTitles": [], "title": "some day", "status": "todo", "failureMessages": []}]},
    {"name": "/sandbox/project/test/b.test.js", "status": "failed", "assertionResults": [],
     "message": "  \u25cf Test suite failed to run\n\n    Cannot find module 'yaml' from 'lib/changelog.js'\n\n    Require"},
]}


def test_jests_report_gives_each_test_and_a_file_that_failed_to_load() -> None:
    results = runner.JEST.parse_report(json.dumps(REPORT).encode())
    assert {k: r.outcome for k, r in results.items()} == {
        "test/a.test.js::parse::nested::reads (x)": "passed", "test/a.test.js::parse::fails": "failed",
        "test/a.test.js::later": "skipped", "test/a.test.js::some day": "skipped", "test/b.test.js": "error"}
    assert results["test/b.test.js"].message == "Cannot find module 'yaml' from 'lib/changelog.js'"
    assert results["test/a.test.js::parse::fails"].message == "Error: expect(received).toBe(expected) // Object.is equality"
    assert runner.JEST.printed_forms("Error: expect(received).toBe(3)")[0] == "expect(received).toBe(3)"
    assert runner.JEST.file_errors_stand_for_tests and runner.JEST.parse_report(b"not json") == {}


def test_the_verifier_reads_jests_report_by_the_same_rule() -> None:
    spec = importlib.util.spec_from_file_location("miner_verifier_under_test", ROOT / "miner" / "assets" / "verifier.py")
    verifier = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(verifier)
    outcomes = verifier.parse_node_report(verifier.jest_lines(json.dumps(REPORT).encode(), "/sandbox/project"),
                                          "/sandbox/project")
    mined = runner.JEST.parse_report(json.dumps(REPORT).encode())
    assert set(outcomes) == set(mined)
    assert {k: v[0] for k, v in outcomes.items()} == {k: "failed" if r.outcome == "error" else r.outcome
                                                      for k, r in mined.items()}
    assert verifier.JEST_PROGRAM.startswith("/sandbox/.miner-node/") and "--no-cache" in verifier.JEST_FLAGS


def test_one_test_is_checked_by_its_full_name() -> None:
    assert jest.check_command(FIXTURE_COMMAND, "test/a.test.js::parse()::reads $1.50 [ok]") == \
        "jest -t '^parse\\(\\) reads \\$1\\.50 \\[ok\\]$' test/a.test.js"
    assert jest.check_command(FIXTURE_COMMAND, "test/a.test.js") == "jest test/a.test.js"
    run_passed = runner.JEST.run_passed
    assert run_passed(0, "PASS test/a.test.js\nTests:       2 skipped, 1 passed, 3 total\n", "passed")
    assert not run_passed(0, "Tests:       3 skipped, 3 total\n", "passed")  # -t matched nothing
    assert not run_passed(1, "Tests:       1 failed, 2 skipped, 3 total\n", "passed")
    assert not run_passed(1, "  ● Test suite failed to run\n\n    Cannot find module 'yaml'", "passed")


@pytest.mark.slow
@pytest.mark.skipif(NODE is None, reason="node is not installed")
def test_a_real_jest_run_reports_each_test(tmp_path: Path) -> None:
    """The fixture with its packages and jest from the registry: every test passes; a dependency
    removed turns its file into one error entry with jest's first error line; a config file the
    project gains is not read by the suite's run; the one-test command passes as a person runs it."""
    root = copy_fixture("node-jest", tmp_path / "shipnote")
    install = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error", "--ignore-scripts",
                              "--no-save", "date-fns@3", "lodash.get@4", "yaml@2", "jest@29"],
                             cwd=root, capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stderr[-2000:]
    command = runner.project_command(root)
    report = tmp_path / "report.json"
    env = {"PATH": f"{root / 'node_modules' / '.bin'}:/usr/bin:/bin", "HOME": str(tmp_path)}

    def run() -> dict[str, str]:
        done = subprocess.run(["bash", "-c", jest.suite_command(command, str(report))], cwd=root, env=env,
                              capture_output=True, text=True, timeout=300)
        found = runner.parse_report(jest.report_lines(report.read_bytes(), str(root)))
        return {k: r.outcome for k, r in found.items()} | {"rc": done.returncode}

    def check(test_id: str) -> bool:
        done = subprocess.run(["bash", "-c", jest.check_command(command, test_id)], cwd=root, env=env,
                              capture_output=True, text=True, timeout=120)
        return runner.JEST.run_passed(done.returncode, done.stdout + done.stderr, "passed")

    healthy = run()
    assert healthy.pop("rc") == 0 and len(healthy) == 11 and set(healthy.values()) == {"passed"}
    assert "test/dates.test.js::dates::notice::goes out days before the release" in healthy
    assert check("test/changelog.test.js::render::round-trips through YAML")
    # a config file the project gains would fail every file: the suite's runs never read it
    (root / "jest.config.js").write_text("module.exports = {setupFiles: ['./no-such-module.js']};")
    shutil.rmtree(root / "node_modules" / "yaml")
    broken = run()
    assert broken.pop("rc") == 1
    assert broken == {**{k: v for k, v in healthy.items() if not k.startswith("test/changelog")},
                      "test/changelog.test.js": "error"}
    message = runner.parse_report(jest.report_lines(report.read_bytes(), str(root)))["test/changelog.test.js"].message
    assert message == "Cannot find module 'yaml' from 'lib/changelog.js'"
    (root / "jest.config.js").unlink()
    assert not check("test/changelog.test.js::render::round-trips through YAML")


@pytest.fixture(scope="module")
def jest_export(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    # one type a family, three tasks: the Docker crawl is the slow part
    return export_fixture(tmp_path_factory.mktemp("jest-crawl"), "node-jest", "--backend", "docker",
                          "--types", DOCKER_TYPES, "--max-tasks-per-repo", "3")


@pytest.mark.slow
@pytest.mark.docker
@pytest.mark.timeout(1500)  # the Docker crawl and export (the fixture) count too: 10 min on two busy cores
def test_exported_jest_tasks_check_out_and_refuse_the_jest_shortcuts(jest_export: list[Path]) -> None:
    from miner.attacks import attack_tasks, load_catalogue
    from miner.check import check_tasks

    assert len(jest_export) >= 3
    # each test file loads its own dependency: a package broken fails one file's tests, and the
    # solver is shown jest's one-test command
    package_tasks = [f for f in jest_export if "__deps-" in f.name or "__fs-" in f.name]
    assert package_tasks, [f.name for f in jest_export]
    for folder in package_tasks:
        f2p = json.loads((folder / "tests" / "spec.json").read_text())["f2p"]
        assert len({t.split("::")[0] for t in f2p}) == 1, f2p
        assert "jest -t " in (folder / "instruction.md").read_text()
    spec = json.loads((jest_export[0] / "tests" / "spec.json").read_text())
    assert spec["runner"] == "jest" and spec["jest_config"] == {"testEnvironment": "node",
                                                                "testMatch": ["**/test/**/*.test.js"]}
    for result in check_tasks(jest_export, jobs=2):
        assert result.ok, f"{result.name}: {result.reason}\n{result.oracle.output[-2000:] if result.oracle else ''}"
    catalogue = load_catalogue([]).select(JEST_SHORTCUTS)
    assert len(catalogue.attacks) == len(JEST_SHORTCUTS)
    # on the task whose break leaves a package node cannot load, where every stub has something to stand in for
    deps = [task for task in jest_export if "deps-" in task.name or "fs-" in task.name][:1]
    assert deps, [task.name for task in jest_export]
    reports = attack_tasks(deps, catalogue, jobs=2)
    for report in reports:
        assert report.baseline_ok and len(report.outcomes) == len(JEST_SHORTCUTS)
        assert not report.holes, [(o.attack.id, o.reward, o.why) for o in report.holes]
    applied = {o.attack.id for r in reports for o in r.outcomes if o.applied == 0}
    assert applied == set(JEST_SHORTCUTS), set(JEST_SHORTCUTS) - applied
