"""`miner check` on real exported tasks: nop scores 0, the oracle 1, and a broken task is named."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import copy_fixture, run_miner, write_repos

from miner.check import CheckError, check_tasks, read_config, task_dirs
from miner.cli import main


@pytest.fixture(scope="module")
def exported(harbor_export) -> dict[str, Path]:
    """Harbor folders of one mined task per family, by family (the session's shared export)."""
    return harbor_export.folders


@pytest.mark.docker
def test_every_family_checks_out(exported: dict[str, Path]) -> None:
    """The nop run scores 0 and the oracle run 1 for one task of each family, in fresh containers,
    two tasks at a time (the results in the order the folders were given)."""
    results = check_tasks(list(exported.values()), jobs=2)
    assert [r.path for r in results] == list(exported.values())
    for result in results:
        assert result.ok, f"{result.name}: {result.reason}\n{result.oracle.output[-2000:] if result.oracle else ''}"
        assert result.nop.reward == 0 and result.oracle.reward == 1
        # the solver's view: the instruction's command fails untouched and passes after solve.sh,
        # in a login shell and in `bash -c`
        assert result.nop.view == [] and result.oracle.view == []
        # the untouched environment fails an expected check, or holds what the verifier refuses
        # outright (a deps/bad-pth break adds a .pth file: the healthy manifest has none such)
        assert result.nop.failing or result.nop.problems


def copy_task(folder: Path, dest: Path) -> Path:
    shutil.copytree(folder, dest)
    return dest


def reseal(task: Path) -> None:
    """Record tests/ as it now is (SHA256SUMS and task.toml's digest of it), as an exporter would:
    for tests that change a verifier input on purpose."""
    import hashlib
    import tomllib

    import tomli_w

    from miner.export.common import TESTS_DIGEST_KEY, tests_sums

    tests = task / "tests"
    sums = tests_sums({p.relative_to(tests).as_posix(): p.read_bytes() for p in tests.rglob("*")
                       if p.is_file() and p.name != "SHA256SUMS"})
    (tests / "SHA256SUMS").write_bytes(sums)
    config = tomllib.loads((task / "task.toml").read_text())
    config["metadata"][TESTS_DIGEST_KEY] = hashlib.sha256(sums).hexdigest()
    (task / "task.toml").write_text(tomli_w.dumps(config))


@pytest.mark.docker
@pytest.mark.parametrize("edit, named", [
    ("append:spec.json", "tests/spec.json was altered since the export"),
    ("add:conftest.py", "tests/conftest.py was added since the export"),
    ("remove:verifier_pytest.py", "tests/verifier_pytest.py was removed since the export"),
    ("append:SHA256SUMS", "tests/SHA256SUMS was altered since the export"),
    ("reseal-append:verifier.py", "tests/verifier.py is not this miner's verifier file"),
])
def test_a_task_whose_tests_were_altered_is_refused_unscored(exported: dict[str, Path], tmp_path: Path,
                                                             edit: str, named: str) -> None:
    """Bad input: tests/ (or a verifier file in it) changed after the export is refused with the
    file named, before anything is built or scored."""
    task = copy_task(next(iter(exported.values())), tmp_path / "tampered")
    how, name = edit.split(":")
    path = task / "tests" / name
    if how == "remove":
        path.unlink()
    elif how == "add":
        path.write_text("import pytest\n")
    else:
        path.write_bytes(path.read_bytes() + b"\n# x\n")
    if how.startswith("reseal"):
        reseal(task)  # the sums agree: only the comparison with the miner's own file sees it
    (result,) = check_tasks([task])
    assert not result.ok and named in result.reason and "nothing is scored" in result.reason
    assert result.nop is None and result.oracle is None and result.build_seconds == 0


@pytest.mark.docker
def test_a_break_that_breaks_nothing_is_named(exported: dict[str, Path], tmp_path: Path) -> None:
    task = copy_task(next(iter(exported.values())), tmp_path / "noop-break")
    (task / "environment" / "break.sh").write_text("#!/bin/bash\ntrue\n")
    (result,) = check_tasks([task])
    assert not result.ok and result.nop.reward == 1
    assert "without the fix the verifier scored 1" in result.reason


@pytest.mark.docker
def test_a_solution_that_fixes_nothing_is_named(exported: dict[str, Path], tmp_path: Path) -> None:
    task = copy_task(next(iter(exported.values())), tmp_path / "noop-fix")
    (task / "solution" / "solve.sh").write_text("#!/bin/bash\ntrue\n")
    (result,) = check_tasks([task])
    assert not result.ok and result.oracle.reward == 0
    assert "after solution/solve.sh the verifier scored 0" in result.reason
    assert result.oracle.failing, "the reason names the checks that still fail"


@pytest.mark.docker
def test_a_solver_view_the_shells_do_not_show_is_named(exported: dict[str, Path], tmp_path: Path) -> None:
    """An instruction whose command does not fail in the solver's shells (here: a command that
    always passes) fails the check, though nop and oracle score as they should."""
    task = copy_task(exported["env"], tmp_path / "hidden-symptom")
    path = task / "tests" / "solver_view.json"
    data = json.loads(path.read_text())
    data["view"] |= {"command": "python -c 'print(\"1 passed\")'", "line": ""}
    path.write_text(json.dumps(data))
    reseal(task)
    (result,) = check_tasks([task])
    assert result.nop.reward == 0 and result.oracle.reward == 1
    assert not result.ok and result.reason.startswith("solver's view, untouched: it passes in `login`")
    assert len(result.nop.view) == 2 and result.oracle.view == []  # both shells, as root


@pytest.mark.docker
def test_a_task_exported_without_a_solver_view_is_named(exported_like: Path) -> None:
    (result,) = check_tasks([exported_like])
    assert not result.ok and "exported without the solver's view" in result.reason


@pytest.fixture
def exported_like(tmp_path: Path) -> Path:
    """A task folder with every file Harbor needs but tests/solver_view.json."""
    for rel in ("task.toml", "instruction.md", "environment/Dockerfile", "tests/test.sh", "solution/solve.sh"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text('[task]\nname = "miner/x"\n' if rel == "task.toml" else "")
    return tmp_path


@pytest.mark.docker
def test_an_environment_that_does_not_build_is_named(exported: dict[str, Path], tmp_path: Path) -> None:
    task = copy_task(next(iter(exported.values())), tmp_path / "no-build")
    (task / "environment" / "build" / "install.sh").write_text("echo no such package >&2; exit 3\n")
    (result,) = check_tasks([task])
    assert not result.ok and "does not build" in result.reason


def test_a_folder_that_is_not_a_task_is_named(tmp_path: Path) -> None:
    (tmp_path / "task.toml").write_text('[task]\nname = "a/b"\n')
    with pytest.raises(CheckError, match="missing instruction.md"):
        read_config(tmp_path)
    assert task_dirs([tmp_path]) == [tmp_path]


def test_task_dirs_expands_a_folder_of_tasks(tmp_path: Path) -> None:
    for name in ("b", "a"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "task.toml").write_text("")
    (tmp_path / "notes").mkdir()
    assert task_dirs([tmp_path]) == [tmp_path / "a", tmp_path / "b"]


@pytest.mark.docker
def test_cli_check_prints_a_table_and_fails_naming_why(exported: dict[str, Path], tmp_path: Path) -> None:
    good = next(iter(exported.values()))
    bad = copy_task(good, tmp_path / "bad")
    (bad / "environment" / "break.sh").write_text("#!/bin/bash\ntrue\n")
    failed = CliRunner().invoke(main, ["check", str(good), str(bad)], env={"COLUMNS": "250"})
    assert failed.exit_code != 0
    assert "1/2 task(s) pass" in failed.output and "the break does not fail any check" in failed.output
    assert f"ok {read_config(good)['task']['name']}" in failed.output  # the good one, as it finished
    assert "solver's view" in failed.output


@pytest.mark.docker
def test_the_oracle_gets_the_network_only_when_the_task_declares_it(exported: dict[str, Path],
                                                                     tmp_path: Path) -> None:
    """An offline task's oracle runs without network: a solve.sh that first fetches from the index
    fails there and repairs nothing; declared as needing the index, the same task's oracle has the
    network and passes; the untouched run has none either way."""
    import tomli_w

    offline = next(folder for folder in exported.values()
                   if read_config(folder)["metadata"]["repair_network"] == "none")
    task = copy_task(offline, tmp_path / "fetches-first")
    solve = task / "solution" / "solve.sh"
    solve.write_text(solve.read_text().replace(
        "# --- fix script ---\n",
        '# --- fix script ---\npip download -q --no-deps six==1.17.0 -d "$(mktemp -d)" || exit 3\n'))
    (result,) = check_tasks([task])
    assert result.oracle.reward == 0 and "solve.sh exited 3" in result.oracle.output
    config = read_config(task)
    config["metadata"] |= {"repair_network": "allowlist", "allowed_hosts": ["pypi.org", "files.pythonhosted.org"],
                           "evidence_kinds": ["package-index"]}
    (task / "task.toml").write_text(tomli_w.dumps(config))
    (result,) = check_tasks([task])
    assert result.ok, result.reason


VENV_TYPES = ("virtualenv/bytecode-corrupt", "virtualenv/script-shebang")


@pytest.mark.slow
@pytest.mark.docker
def test_bytecode_and_shebang_tasks_check_out(tmp_path: Path) -> None:
    """The types `miner check` over a whole default crawl found wrong, mined, exported and checked:
    a truncated .pyc (the verifier's tests never read cached bytecode, so its bytecode check must
    see it: nop 0) and a console script's shebang (in the image the venv module and pip spell the
    venv's python differently, python3 and python: the oracle 1 after the reference fix)."""
    project = copy_fixture("textkit", tmp_path / "textkit")
    repos = write_repos(tmp_path / "repos.txt", [project])
    store = tmp_path / "store"
    done = run_miner(store, "crawl", "--repos", repos, "--types", ",".join(VENV_TYPES), "--budget", "8")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = tmp_path / "harbor"
    done = run_miner(store, "export", "--format", "harbor", "-o", out)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    kinds = {t: [f for f in out.iterdir() if f"__{t.replace('/', '-')}__" in f.name] for t in VENV_TYPES}
    assert all(kinds.values()), f"not every type was mined: {kinds}"
    folders = [kinds[t][0] for t in VENV_TYPES]
    spec = json.loads((folders[0] / "tests" / "spec.json").read_text())
    assert spec["bytecode_sources"] and spec["bytecode_sources"][0].startswith("/sandbox/")
    results = check_tasks(folders, jobs=2)
    for result in results:
        assert result.ok, f"{result.name}: {result.reason}"
        assert result.nop.reward == 0 and result.oracle.reward == 1
    assert any("bytecode python loads" in p for p in results[0].nop.problems), results[0].nop.problems


def _check_containers(client, pid: int) -> list:  # noqa: ANN001 - a docker client
    return client.containers.list(all=True, filters={"label": ["miner.purpose=check", f"miner.pid={pid}"]})


def _started_check(client, task: Path) -> tuple:  # noqa: ANN001
    """A `miner check` of the task in its own process, once its first container runs."""
    import subprocess
    import sys
    import time

    process = subprocess.Popen([sys.executable, "-c", "from miner.cli import main; main()", "check", str(task)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 600
    while not _check_containers(client, process.pid):
        assert process.poll() is None and time.monotonic() < deadline, "the check never started a container"
        time.sleep(0.5)
    return process


@pytest.mark.docker
def test_a_check_stopped_or_killed_leaves_no_container(exported: dict[str, Path]) -> None:
    """SIGTERM (a CI job cancelled, `timeout`): the check removes its container before exiting.
    SIGKILL: nothing can run, so the next check removes the container of the dead process."""
    import signal

    from miner.check import Checker
    from miner.sandbox.docker.images import docker_client

    client, task = docker_client(), next(iter(exported.values()))
    stopped = _started_check(client, task)
    stopped.send_signal(signal.SIGTERM)
    stopped.wait(timeout=120)
    assert _check_containers(client, stopped.pid) == []
    killed = _started_check(client, task)
    killed.kill()
    killed.wait(timeout=60)
    assert _check_containers(client, killed.pid) != []  # what the leak was
    Checker(client)
    assert _check_containers(client, killed.pid) == []
