"""The solver's view: the instruction's command run as a solver's shells run it (miner.solver_view).

Fast: the script run for real by bash on the host (a login shell and `bash -c` from the script's
own starting environment) and the verdicts. Slow: every local family's task of the session crawl
passed the crawl's solver-view step (both shells, broken and fixed), and records what `miner
check` runs; the exported images are checked by tests/test_check.py (local families) and
tests/test_pipeline_docker.py (system and service).
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

from conftest import LOCAL_FAMILIES

from miner.models import Probe, SolverView
from miner.solver_view import ShellRun, judge, read_view, shows_line, view_script
from miner.store import Store

TEST_ID = "tests/test_units.py::test_metric_by_default"


def run_view(command: str, cwd: Path, env: dict[str, str]) -> list[ShellRun]:
    script = view_script(command, 60, cwd=str(cwd))
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    return read_view(done.stdout)


def test_both_shells_start_from_the_process_environment_and_read_their_startup_files(tmp_path: Path) -> None:
    """The login shell reads ~/.profile (not $BASH_ENV), `bash -c` reads $BASH_ENV (not ~/.profile):
    a variable exported by the script's own shell before it ran reaches neither."""
    home = tmp_path / "home"
    home.mkdir()
    (home / ".profile").write_text("export SEEN=profile\n")
    (tmp_path / "bash_env").write_text("export SEEN=bash_env\n")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "BASH_ENV": str(tmp_path / "bash_env")}
    runs = run_view("export LATE=1; echo $SEEN $PWD; exit 3", tmp_path, env)
    assert [(r.shell, r.exit_code, r.stdout, r.reused) for r in runs] == [
        ("login", 3, f"profile {tmp_path}\n", False), ("bash -c", 3, f"bash_env {tmp_path}\n", False)]
    runs = run_view("echo ${LATE:-unset}", tmp_path, env)
    assert {r.stdout for r in runs} == {"unset\n"}
    assert all("job control" not in r.output for r in runs)  # the interactive shell's complaints are dropped


def login_path(home: Path) -> str:
    """The PATH a login shell of this machine ends with (Debian's /etc/profile sets one)."""
    done = subprocess.run(["bash", "--login", "-i", "-c", "echo $PATH"], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(home)}, timeout=60)
    return done.stdout.strip()


def test_the_command_runs_once_when_both_shells_would_run_it_alike(tmp_path: Path) -> None:
    """With nothing in the startup files that changes what the command sees, the login shell's run
    stands for `bash -c`'s: the command ran once, both reports carry its result."""
    home = tmp_path / "home"
    home.mkdir()
    env = {"PATH": login_path(home), "HOME": str(home)}  # /etc/profile sets PATH: the shells agree on it
    runs = run_view("echo ran >> runs.log; echo out; exit 4", tmp_path, env)
    assert [(r.shell, r.exit_code, r.stdout, r.reused) for r in runs] == [
        ("login", 4, "out\n", False), ("bash -c", 4, "out\n", True)]
    assert (tmp_path / "runs.log").read_text() == "ran\n"


def test_a_startup_file_that_changes_what_the_command_meets_makes_both_shells_run_it(tmp_path: Path) -> None:
    """A variable, a function named like a word of the command, a shell option set by ~/.profile:
    each makes the two shells differ, so each runs the command."""
    home = tmp_path / "home"
    home.mkdir()
    env = {"PATH": login_path(home), "HOME": str(home)}
    for profile, command in (("export SEEN=1\n", "echo ${SEEN:-none}"),
                             ("greet() { echo function; }\n", "greet"),
                             ("set -u\n", "echo ${NOT_SET:-} ${UNSET_TOO}")):
        (home / ".profile").write_text(profile)
        (tmp_path / "runs.log").unlink(missing_ok=True)
        runs = run_view(f"echo ran >> runs.log; {command}", tmp_path, env)
        assert [r.reused for r in runs] == [False, False], profile
        assert (tmp_path / "runs.log").read_text() == "ran\nran\n", profile
        assert runs[0].output != runs[1].output, profile


def test_a_service_started_in_the_background_is_stopped_after_each_shell(tmp_path: Path) -> None:
    marker = tmp_path / "alive"
    runs = run_view(f"(sleep 30; touch {marker}) &\nsleep 0.2\necho started", tmp_path, {"PATH": "/usr/bin:/bin"})
    assert [r.stdout for r in runs] == ["started\n", "started\n"]
    out = subprocess.run(["pgrep", "-f", f"touch {marker}"], capture_output=True, text=True)
    assert out.stdout.strip() == ""


def shell_run(exit_code: int, stdout: str, stderr: str = "", shell: str = "login") -> ShellRun:
    return ShellRun(user="root", shell=shell, exit_code=exit_code, stdout=stdout, stderr=stderr)


FAILED = ("E       ValueError: WEATHER_UNITS must be one of ('metric', 'imperial'), got 'mertic'\n"
          "FAILED tests/test_units.py::test_metric_by_default - ValueError: WEATHER_UNITS must be one ...\n"
          "1 failed in 0.12s\n")
VIEW = SolverView(command=f"python -m pytest {TEST_ID}", check=TEST_ID, outcome="failed",
                  line="ValueError: WEATHER_UNITS must be one of ('metric', 'imperial'), got 'mertic'")


def test_a_test_check_fails_with_its_line_before_and_passes_after() -> None:
    broken = [shell_run(1, FAILED), shell_run(1, FAILED, shell="bash -c")]
    assert judge(VIEW, broken, fixed=False) == []
    fixed = [shell_run(0, "1 passed in 0.05s\n"), shell_run(0, "1 passed, 1 warning in 0.05s\n", shell="bash -c")]
    assert judge(VIEW, fixed, fixed=True) == []
    assert judge(VIEW, broken, fixed=True) and judge(VIEW, fixed, fixed=False)


def test_the_solver_shell_that_does_not_show_the_symptom_is_named() -> None:
    missing = [shell_run(127, "", "bash: line 1: python: command not found\n"), shell_run(1, FAILED, shell="bash -c")]
    (problem,) = judge(VIEW, missing, fixed=False)
    assert problem.startswith("`login` does not print") and "python: command not found" in problem
    passing = [shell_run(0, "1 passed in 0.05s\n"), shell_run(1, FAILED, shell="bash -c")]
    assert judge(VIEW, passing, fixed=False) == ["it passes in `login` (exit 0): 1 passed in 0.05s"]
    assert judge(VIEW, [], fixed=False) == ["the solver's shells did not run (no report from the view script)"]


def test_lines_are_matched_as_pytest_prints_them() -> None:
    run = shell_run(1, "E       assert 'x' == 'y'\nE   KeyError: <object at 0x7f0a>\n"
                       "in /tmp/pytest-of-root/pytest-7/x\n")

    def shows(line: str, command: str = "python -m pytest t.py::a") -> bool:
        return shows_line(run, SolverView(command=command, check="t.py::a", outcome="failed", line=line))

    assert shows("AssertionError: assert 'x' == 'y'")  # pytest drops the prefix of a rewritten assert
    assert shows("KeyError: <object at 0x55aa>")  # addresses differ between runs
    assert shows("in /tmp/pytest-of-root/pytest-0/x")  # so do pytest's numbered temporary folders
    assert shows("in /tmp/pytest-of-root/pytest-3/x ...")  # a line the instruction shortened
    assert shows('failed on setup with "KeyError: <object at 0x1>"')  # a fixture's error, as junit words it
    assert not shows("ModuleNotFoundError: No module named 'yaml'")
    assert shows("")  # nothing to show: only fail/pass count
    # the forms are the runner's: node's runner neither unwraps junit's words nor knows pytest's folders
    assert not shows('failed on setup with "KeyError: <object at 0x1>"', "node --test test/")
    assert not shows("in /tmp/pytest-of-root/pytest-0/x", "node --test test/")
    tap = shell_run(1, "  error: 'Cannot find module \\\\'x\\\\''\n")
    line = "Cannot find module \\'x\\'"
    view = SolverView(command="node --test test/", check="t.js::a", outcome="failed", line=line)
    assert shows_line(tap, view)  # as node's TAP reporter quotes it, backslashes doubled


def test_a_skipped_check_fails_while_skipped_and_a_probe_by_exit_code_and_output() -> None:
    skipped = SolverView(command="python -m pytest t.py::a", check="t.py::a", outcome="skipped")
    assert judge(skipped, [shell_run(0, "1 skipped in 0.01s\n")], fixed=False) == []
    assert judge(skipped, [shell_run(0, "1 passed in 0.01s\n")], fixed=True) == []
    digest = hashlib.sha256(b"usage: tool\n").hexdigest()
    probe = Probe(id="probe::script::tool --help", kind="script", argv=["tool", "--help"], expected_exit=0,
                  expected_digest=digest)
    view = SolverView(command="tool --help", check=probe.id, outcome="failed", probe=probe)
    assert judge(view, [shell_run(126, "", "bash: line 1: /sandbox/venv/bin/tool: Permission denied\n")],
                 fixed=False) == []
    assert judge(view, [shell_run(0, "usage: tool\n", "a warning on stderr\n")], fixed=True) == []
    assert judge(view, [shell_run(0, "usage: other\n")], fixed=False) == []  # same exit code, other output


def test_every_local_family_passed_the_crawls_solver_view(mined_store: Path) -> None:
    """One task of each local family of the session crawl: validated with the instruction's command
    failing in a login shell and `bash -c`, then passing after the fix; the task records that view."""
    with Store(mined_store, create=False) as store:
        tasks = store.list_tasks()
        seen = set()
        for task in tasks:
            if task.family in seen or task.solver_view is None:
                continue
            seen.add(task.family)
            view = task.solver_view
            assert f"```bash\n{view.command}\n```" in task.instruction
            assert not view.line or view.line in task.instruction
            logs = store.task_dir(task.id) / "logs"
            for state in ("broken", "fixed"):
                text = (logs / f"solver-view-{state}.log").read_text()
                assert "$ login (as root" in text and "$ bash -c (as root" in text, text[:500]
    assert set(LOCAL_FAMILIES) <= seen, seen
