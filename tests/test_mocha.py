"""mocha (miner.ecosystems.node.mocha and mocha-reporter.cjs): the test command a package's scripts
and mocha's data config files give, the reporter's JSON lines, the one-test command and whether its
run passed; slow: a real mocha run's per-test results (the npm registry), a local crawl of
fixtures/node-mocha, and its export on the Docker backend, checked (untouched 0, the reference fix 1)
and attacked through mocha (each shortcut applies and scores 0)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import copy_fixture, crawl_fixture, export_fixture, write_package

from miner.ecosystems.node import mocha, npm, runner
from miner.projectfiles import is_runner_config
from miner.store import Store

NODE = shutil.which("node")
DOCKER_TYPES = "deps/node-entry-corrupt,fs/node-package-unreadable,env/node-options-preload-missing"
MOCHA_SHORTCUTS = ["mocha-runner-forced", "mocha-link-repointed", "mocharc-require-stub", "mocha-package-key-require",
                   "mocha-test-helper-patch"]


@pytest.mark.parametrize("script, command", [
    ("mocha", "mocha test"),
    ("mocha --reporter dot --exit 'test/**/*.spec.js'", "mocha 'test/**/*.spec.js'"),
    ("_mocha -R spec --recursive -t 10000 test/", "mocha --timeout 10000 --recursive test/"),
    ("npx mocha --require ./test/setup.js -u tdd --check-leaks test", "mocha --require ./test/setup.js --ui tdd test"),
    ("nyc --reporter=html mocha --timeout=3000 --no-timeouts test/a.js", "mocha --timeout 0 test/a.js"),
    ("c8 mocha --grep slow --spec test/b.js", "mocha test/b.js"),
    ("istanbul cover _mocha -- -R spec", "mocha test"),
    ("istanbul cover node_modules/mocha/bin/_mocha -- --reporter dot test/", "mocha test/"),
])
def test_mocha_scripts_are_normalised(tmp_path: Path, script: str, command: str) -> None:
    root = write_package(tmp_path, {"scripts": {"test": script}})
    assert runner.project_command(root) == command
    assert runner.MOCHA.claims(command) and not runner.TAPE.claims(command)


def test_npm_run_hops_reach_mocha(tmp_path: Path) -> None:
    root = write_package(tmp_path, {"scripts": {"pretest": "npm run lint", "test": "npm run test:unit",
                                                "test:unit": "mocha --ui bdd test/unit"}})
    assert runner.project_command(root) == "mocha --ui bdd test/unit"


def test_mochas_data_config_files_are_read(tmp_path: Path) -> None:
    yml = write_package(tmp_path / "yml", {"scripts": {"test": "mocha"}, "mocha": {"require": "a.js", "ui": "tdd"}},
                        {".mocharc.yml": "spec: ['test/**/*.test.js']\nrequire: [b.js]\ntimeout: 4000\nrecursive: true\n"})
    assert runner.project_command(yml) == "mocha --require a.js --require b.js --ui tdd --timeout 4000 --recursive " \
                                          "'test/**/*.test.js'"
    # the script's own arguments win over the config; a named --config file is the one read
    json_rc = write_package(tmp_path / "json", {"scripts": {"test": "mocha --config conf/m.json -t 100 test/x.js"}},
                            {"conf/m.json": json.dumps({"spec": "spec/", "timeout": 9})})
    assert runner.project_command(json_rc) == "mocha --timeout 100 test/x.js"
    opts = write_package(tmp_path / "opts", {"scripts": {"test": "mocha"}},
                         {"test/mocha.opts": "--require should\n--reporter dot # the dots\ntest/unit\n"})
    assert runner.project_command(opts) == "mocha --require should test/unit"
    # code is not read: a .mocharc.js leaves mocha's defaults
    code = write_package(tmp_path / "js", {"scripts": {"test": "mocha"}}, {".mocharc.js": "module.exports = {ui: 'tdd'}"})
    assert runner.project_command(code) == "mocha test"


def test_the_fixture_runs_under_mocha_with_its_config() -> None:
    root = Path(__file__).resolve().parent.parent / "fixtures" / "node-mocha"
    command = runner.project_command(root)
    assert command == "mocha --require test/setup.js --timeout 5000 'test/**/*.spec.js'"
    assert runner.suite_problem(root) is None
    assert npm.test_files(root, command) == ["test/dates.spec.js", "test/duration.spec.js", "test/schedule.spec.js",
                                             "test/setup.js", "test/versions.spec.js"]
    assert npm.test_dependencies(root) == []  # mocha is miner's: dropped with the linters
    lines = "\n".join(npm.install_lines(root))
    assert "'mocha@^10.7.0'" in lines and "mocha@11" in lines
    assert "ln -sfn /sandbox/.miner-node/node_modules/mocha /sandbox/node_modules/mocha" in lines
    assert "ln -sfn /sandbox/.miner-node/node_modules/.bin/mocha /sandbox/venv/bin/mocha" in lines


def test_what_mocha_loads_before_the_tests_is_kept_by_the_build(tmp_path: Path) -> None:
    command = "mocha --require should --require ./test/helper.js --ui mocha-qunit-ui test/"
    assert mocha.preloaded_packages(command) == {"should", "mocha-qunit-ui"}
    assert "test/helper.js" in mocha.command_files(command)
    root = write_package(tmp_path, {"scripts": {"test": command},
                                    "devDependencies": {"should": "^13", "mocha-qunit-ui": "^0.1", "chai": "^4",
                                                        "eslint": "^8", "mocha": "^10"}},
                         {"test/a.js": "test('x', () => {});", "test/helper.js": "global.expect = require('chai').expect;"})
    assert npm.test_dependencies(root) == ["chai", "mocha-qunit-ui", "should"]


def test_mocha_runs_each_file_with_its_reporter() -> None:
    command = "mocha --require ./t/setup.js --timeout 5000 --recursive 'test/**/*.spec.js'"
    assert mocha.split_command(command) == (["--require", "./t/setup.js", "--timeout", "5000"], ["test/**/*.spec.js"], True)
    script = mocha.suite_command(command, "/tmp/r.jsonl")
    assert "/tmp/r.jsonl.mocha-reporter.cjs /tmp/r.jsonl \"$miner_f\" --require ./t/setup.js --timeout 5000" in script
    assert "test/**/*.spec.js" in script and '"$miner_a"/**/*.{js,cjs,mjs}' in script
    chosen = mocha.suite_command(command, "/tmp/r.jsonl", tests=["test/b.spec.js::x::y", "test/a.spec.js::z"])
    assert "for miner_a in test/a.spec.js test/b.spec.js;" in chosen
    assert mocha.verifier_spec(command) == {"runner": "mocha", "mocha_args": ["--require", "./t/setup.js",
                                                                             "--timeout", "5000"], "pytest_args": []}
    assert runner.MOCHA.collect_reads == mocha.CONFIG_FILES and ".mocharc.yml" in mocha.CONFIG_FILES
    assert all(is_runner_config(f"sub/{name}") for name in mocha.CONFIG_FILES)  # rule 7: a break leaves them
    assert [name for name, _ in runner.MOCHA.verifier_files] == ["mocha_reporter.cjs"]
    assert b"EVENT_TEST_PASS" in runner.MOCHA.verifier_files[0][1]()


def test_the_reporters_lines_parse() -> None:
    lines = [
        {"file": "test/a.spec.js", "names": ["test/a.spec.js", "parse", "reads (x)"], "passed": True, "duration_ms": 3},
        {"file": "test/a.spec.js", "names": ["test/a.spec.js", "parse", "fails"], "passed": False,
         "message": "AssertionError [ERR_ASSERTION]: Expected values to be strictly equal:"},
        {"file": "test/a.spec.js", "names": ["test/a.spec.js", "later"], "passed": False, "skip": True},
        {"file": "test/b.spec.js", "names": ["test/b.spec.js"], "passed": False,
         "message": "Error: Cannot find module 'semver'"},
    ]
    results = runner.MOCHA.parse_report("\n".join(map(json.dumps, lines)) + "\nnot json\n")
    assert {k: r.outcome for k, r in results.items()} == {
        "test/a.spec.js::parse::reads (x)": "passed", "test/a.spec.js::parse::fails": "failed",
        "test/a.spec.js::later": "skipped", "test/b.spec.js": "error"}
    assert results["test/b.spec.js"].message == "Error: Cannot find module 'semver'"
    assert runner.MOCHA.file_errors_stand_for_tests


def test_one_test_is_checked_by_its_full_title() -> None:
    command = "mocha --require test/setup.js --timeout 5000 'test/**/*.spec.js'"
    assert mocha.check_command(command, "test/a.spec.js::parse()::reads $1.50 [ok]") == \
        "mocha --require test/setup.js --timeout 5000 --grep '^parse\\(\\) reads \\$1\\.50 \\[ok\\]$' test/a.spec.js"
    assert mocha.check_command(command, "test/a.spec.js") == \
        "mocha --require test/setup.js --timeout 5000 test/a.spec.js"
    run_passed = runner.MOCHA.run_passed
    assert run_passed(0, "\n  parse\n    ✔ reads\n\n  1 passing (4ms)\n", "passed")
    assert not run_passed(0, "\n  0 passing (1ms)\n", "passed")  # the grep matched nothing
    assert not run_passed(0, "\n  0 passing (1ms)\n  1 pending\n", "passed")  # skipped is not passed
    assert not run_passed(1, "\n  0 passing\n  1 failing\n", "passed")
    assert not run_passed(1, " Exception during run: Error: Cannot find module 'semver'", "passed")
    assert run_passed(0, "ok 1 parse reads\n# tests 1\n# pass 1\n# fail 0\n", "passed")  # a config's tap reporter


@pytest.mark.slow
@pytest.mark.skipif(NODE is None, reason="node is not installed")
def test_a_real_mocha_run_reports_each_test(tmp_path: Path) -> None:
    """The fixture with its packages and mocha from the registry: every test passes; a dependency
    removed turns its file into one error entry with node's first error line; the project's config
    files are not read by the suite's run, and the one-test command passes as a person runs it."""
    root = copy_fixture("node-mocha", tmp_path / "relcal")
    install = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error", "--ignore-scripts",
                              "--no-save", "dayjs@1", "js-yaml@4", "ms@2", "semver@7", "mocha@10"],
                             cwd=root, capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stderr[-2000:]
    command = runner.project_command(root)
    report = tmp_path / "report.jsonl"

    def run() -> dict[str, str]:
        done = subprocess.run(["bash", "-c", mocha.suite_command(command, str(report))], cwd=root,
                              capture_output=True, text=True, timeout=300)
        return {k: r.outcome for k, r in runner.parse_report(report.read_bytes()).items()} | {"rc": done.returncode}

    def check(test_id: str) -> bool:
        # as a person runs it: mocha on PATH (here the project's), its config files read
        done = subprocess.run(["bash", "-c", mocha.check_command(command, test_id).replace("mocha ", "npx mocha ", 1)],
                              cwd=root, capture_output=True, text=True, timeout=120)
        return runner.MOCHA.run_passed(done.returncode, done.stdout + done.stderr, "passed")

    healthy = run()
    assert healthy.pop("rc") == 0 and len(healthy) == 14 and set(healthy.values()) == {"passed"}
    assert "test/schedule.spec.js::loadSchedule::refuses an unknown channel" in healthy
    assert check("test/versions.spec.js::nextVersion::bumps the minor version")
    # a project config read would fail every file: the suite's runs never read it
    (root / ".mocharc.json").write_text(json.dumps({"require": "./no-such-module.js"}))
    shutil.rmtree(root / "node_modules" / "semver")
    broken = run()
    assert broken.pop("rc") == 1
    assert broken == {**{k: v for k, v in healthy.items() if not k.startswith("test/versions")},
                      "test/versions.spec.js": "error"}
    message = runner.parse_report(report.read_bytes())["test/versions.spec.js"].message
    assert message == "Error: Cannot find module 'semver'"
    (root / ".mocharc.json").unlink()
    assert not check("test/versions.spec.js::nextVersion::bumps the minor version")


@pytest.mark.slow
@pytest.mark.extended  # the Docker export's crawl below mines mocha tasks too
def test_a_local_crawl_mines_mocha_tasks(tmp_path: Path) -> None:
    base = crawl_fixture(tmp_path, "node-mocha", "--types", DOCKER_TYPES, "--max-tasks-per-repo", "4")
    with Store(base / "store", create=False) as store:
        tasks = store.list_tasks()
    assert len(tasks) >= 3, [t.type_id for t in tasks]
    assert all(t.test_command == "mocha --require test/setup.js --timeout 5000 'test/**/*.spec.js'" for t in tasks)
    # a package broken fails the one test file that loads it, every test of it
    loaders = {"node-package:semver": "test/versions.spec.js", "node-package:js-yaml": "test/schedule.spec.js",
               "node-package:dayjs": "test/dates.spec.js", "node-package:ms": "test/duration.spec.js"}
    broken = [t for t in tasks if t.target.key in loaders]
    assert broken and all({f.split("::")[0] for f in t.f2p} == {loaders[t.target.key]} for t in broken)
    instruction = (base / "store" / "tasks" / tasks[0].id / "instruction.md").read_text()
    assert "mocha --require test/setup.js --timeout 5000" in instruction


@pytest.fixture(scope="module")
def mocha_export(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    # one type a family, three tasks: the Docker crawl is the slow part
    return export_fixture(tmp_path_factory.mktemp("mocha-crawl"), "node-mocha", "--backend", "docker",
                          "--types", DOCKER_TYPES, "--max-tasks-per-repo", "3")


@pytest.mark.slow
@pytest.mark.docker
def test_exported_mocha_tasks_check_out_and_refuse_the_mocha_shortcuts(mocha_export: list[Path]) -> None:
    from miner.attacks import attack_tasks, load_catalogue
    from miner.check import check_tasks

    assert len(mocha_export) >= 3
    spec = json.loads((mocha_export[0] / "tests" / "spec.json").read_text())
    assert spec["runner"] == "mocha" and spec["mocha_args"] == ["--require", "test/setup.js", "--timeout", "5000"]
    assert (mocha_export[0] / "tests" / "mocha_reporter.cjs").is_file()
    for result in check_tasks(mocha_export, jobs=2):
        assert result.ok, f"{result.name}: {result.reason}\n{result.oracle.output[-2000:] if result.oracle else ''}"
    catalogue = load_catalogue([]).select(MOCHA_SHORTCUTS)
    assert len(catalogue.attacks) == len(MOCHA_SHORTCUTS)
    # one task (each shortcut applies to any mocha task): five fresh containers, not fifteen
    chosen = next((f for f in mocha_export if "__deps-" in f.name), mocha_export[0])
    reports = attack_tasks([chosen], catalogue, jobs=2)
    for report in reports:
        assert report.baseline_ok and len(report.outcomes) == len(MOCHA_SHORTCUTS)
        assert not report.holes, [(o.attack.id, o.reward, o.why) for o in report.holes]
    applied = {o.attack.id for r in reports for o in r.outcomes if o.applied == 0}
    assert applied == set(MOCHA_SHORTCUTS), set(MOCHA_SHORTCUTS) - applied
