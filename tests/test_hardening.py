"""The verifier's hardening against a forged reward (issue 22), one test per measure, each failing
without it.

Fast part: how the verifier reads the environment (a strict parser, never a shell), which startup
lines it allows, that a break's own variable must be put back, the held interpreter variables, and
the modules that may not shadow the standard library. Docker part (the verifier in the agent's
own container, the shared mode, where the process-level measures matter): a zombie-led writer is
killed, PID 1 is held still, a traced boot tool scores 0, the reward folder locked by its owner
is unlocked, and a separate verifier carries the agent's files over and none of its processes.
"""

from __future__ import annotations

import base64
import importlib.util
import os
import sys
import time
from pathlib import Path

import pytest

ASSETS = Path(__file__).resolve().parent.parent / "miner" / "assets"


def load_asset(name: str):
    if str(ASSETS) not in sys.path:  # verifier.py imports its neighbours by their plain names
        sys.path.insert(0, str(ASSETS))
    spec = importlib.util.spec_from_file_location(f"miner_asset_{name}", ASSETS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


system = load_asset("verifier_system")
verifier = load_asset("verifier")

HEALTHY_RC = "export PATH=/sandbox/venv/bin:$PATH\nexport APP_MODE=prod\n[ -f ~/.extra ] && . ~/.extra\n"
FULL = {"PATH": "/sandbox/venv/bin:/usr/bin:/bin", "APP_MODE": "prod", "HOME": "/sandbox/home"}
BASE = {"PATH": "/usr/bin:/bin", "HOME": "/sandbox/home"}


# -- the environment file is read, never run ----------------------------------------------------------


def test_export_and_unset_lines_are_computed_like_bash() -> None:
    text = HEALTHY_RC + 'export A=1 E="$A"\nexport B="$A:x" C=${MISSING:-dflt} D=${A:+set}\nunset APP_MODE\n# note\n'
    env = system.read_environment(text, HEALTHY_RC, FULL, BASE)
    assert env["PATH"] == "/sandbox/venv/bin:/usr/bin:/bin"
    assert (env["A"], env["B"], env["C"], env["D"]) == ("1", "1:x", "dflt", "set") and "APP_MODE" not in env
    assert env["E"] == ""  # as in bash: a builtin's arguments are expanded before it runs


@pytest.mark.parametrize("line, why", [
    ("export X=$(touch {marker})", "a $ that is not a plain variable"),
    ("export X=`touch {marker}`", "the character '`' outside quotes"),
    ('export X="`touch {marker}`"', "a command substitution"),
    ("touch {marker}", "a command the healthy file does not have"),
    ("source {marker}", "a command the healthy file does not have"),
    ("f() {{ touch {marker}; }}", "a command the healthy file does not have"),
    ("export X=*", "the character '*' outside quotes"),
    ("export X=~/bin", "the character '~' outside quotes"),
    ("export X=$((1+1))", "a $ that is not a plain variable"),
    ("export 1X=a", "not a variable name"),
])
def test_anything_but_an_assignment_is_refused_with_its_line_and_never_run(tmp_path: Path, line: str,
                                                                           why: str) -> None:
    marker = tmp_path / "ran"
    text = HEALTHY_RC + "export OK=1\n" + line.format(marker=marker) + "\n"
    with pytest.raises(system.EnvFileError, match="line 5") as caught:
        system.read_environment(text, HEALTHY_RC, FULL, BASE)
    assert why in str(caught.value) and not marker.exists()


def test_a_line_of_the_healthy_file_stays_allowed() -> None:
    assert system.read_environment(HEALTHY_RC + "export B=2\n", HEALTHY_RC, FULL, BASE)["B"] == "2"


def test_a_startup_file_may_hold_only_the_healthy_lines(tmp_path: Path) -> None:
    profile, added, same = tmp_path / "profile", tmp_path / "zz.sh", tmp_path / "same"
    profile.write_text("umask 022\nexport PS1=x\nexport BASH_ENV=/tmp/evil\n")
    added.write_text("true\n")
    same.write_text("umask 022\n\n")
    problems = system.startup_changes({str(profile): "umask 022\nexport PS1=x\n", str(added): None,
                                       str(same): "umask 022\n", str(tmp_path / "gone"): "x\n"})
    assert problems == [f"startup file {profile} has a line the healthy image's lacks: 'export BASH_ENV=/tmp/evil'",
                        f"startup file {added} was added (the healthy image has none)"]


# -- the variables the tests see ------------------------------------------------------------------------


def capture(tmp_path: Path, rc: str, spec: dict | None = None, startup: dict | None = None):
    """A verifier's step 2 alone, on the environment file `rc` (healthy: HEALTHY_RC)."""
    env_file = tmp_path / ".bashrc"
    env_file.write_text(rc)
    check = object.__new__(verifier.Verifier)
    check.spec = {"env_file": str(env_file), **(spec or {})}
    check.manifest = {"startup": {str(env_file): HEALTHY_RC, **(startup or {})}, "env_full": FULL, "base_env": BASE}
    check.problems, check.env, check.project, check.pycache = [], {}, str(tmp_path), str(tmp_path / "pyc")
    check.problem = check.problems.append
    check.capture_env()
    return check


def test_interpreter_variables_are_held_at_their_healthy_values(tmp_path: Path) -> None:
    rc = HEALTHY_RC + ("export PYTHONPATH=/tmp/evil PYTHONSTARTUP=/tmp/s.py PYTEST_ADDOPTS='-p evil' "
                       "LD_PRELOAD=/tmp/e.so BASH_ENV=/tmp/e ENV=/tmp/e PYTHONINSPECT=1 APP_MODE=dev\n")
    check = capture(tmp_path, rc)
    assert not check.problems
    assert not {"PYTHONPATH", "PYTHONSTARTUP", "PYTEST_ADDOPTS", "LD_PRELOAD", "BASH_ENV", "ENV",
                "PYTHONINSPECT"} & set(check.env)
    assert check.env["APP_MODE"] == "dev"  # the project's own variables are the tests' business


def test_the_breaks_variable_must_be_put_back_not_satisfied(tmp_path: Path) -> None:
    spec = {"target_envvar": None, "broken_envvars": ["PYTHONHOME"]}
    check = capture(tmp_path, HEALTHY_RC + "export PYTHONHOME=/opt/python3.9\n", spec)
    assert check.problems == [f"PYTHONHOME is '/opt/python3.9' in {tmp_path / '.bashrc'}, healthy it is unset: "
                              "the break's variable must be put back, not worked around"]
    assert not capture(tmp_path, HEALTHY_RC, spec).problems


def test_a_startup_line_the_healthy_image_lacks_is_a_problem(tmp_path: Path) -> None:
    bashrc = tmp_path / "bash.bashrc"
    bashrc.write_text("shopt -s checkwinsize\n. /tmp/hook.sh\n")
    check = capture(tmp_path, HEALTHY_RC, startup={str(bashrc): "shopt -s checkwinsize\n"})
    assert check.problems == [f"startup file {bashrc} has a line the healthy image's lacks: '. /tmp/hook.sh'"]
    check = capture(tmp_path, HEALTHY_RC + "eval \"$(cat /tmp/x)\"\n")
    assert len(check.problems) == 1 and "line 4" in check.problems[0] and "nothing in it is run" in check.problems[0]


def test_a_standard_library_name_added_to_the_project_is_refused(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    for rel in ("shlex.py", "pkg/helper.py", "doctest/__init__.py", "notes.txt"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    check = object.__new__(verifier.Verifier)
    check.project, check.problems = str(tmp_path), []
    check.manifest = {"project": {}, "outside": []}
    check.problem = check.problems.append
    check.check_new_files()
    added = sorted(p.split(" ", 1)[0] for p in check.problems)
    assert added == [os.path.join("doctest", "__init__.py"), "shlex.py"]


# -- processes: the verifier in the agent's own container (Docker) -------------------------------------------


@pytest.fixture(scope="module")
def shared_task(harbor_export, mined_store: Path, tmp_path_factory: pytest.TempPathFactory):
    """(checker, image, folder, config, variables, payloads) of the session's config task, exported
    for a verifier that shares the agent's container."""
    from miner.attacks import build_payloads, load_catalogue, task_variables
    from miner.check import Checker, read_config
    from miner.export import ExportOptions, export_tasks
    from miner.store import Store

    out = tmp_path_factory.mktemp("shared")
    with Store(mined_store, create=False) as store:
        summary = export_tasks(store, [harbor_export.chosen["config"]], "harbor", out,
                               ExportOptions(cache_dir=harbor_export.cache, verifier_mode="shared"))
    assert not summary.failed, summary.failed
    folder = out / summary.outcomes[0].name
    checker = Checker(verifier_mode="shared")
    image = checker.build(folder, read_config(folder))
    payloads = build_payloads(load_catalogue([]).payloads, tmp_path_factory.mktemp("payloads"))
    yield checker, image, folder, read_config(folder), task_variables(folder), payloads
    checker.client.images.remove(image, force=True)


def as_agent(shared_task, container, script: str) -> str:  # noqa: ANN001
    """Run `script` in the container as the agent would (see miner.attacks.agent_command)."""
    from miner.attacks import ATTACK_DIR, agent_command, tar_payloads
    from miner.sandbox.docker.gateway import read_file

    checker, _, _, _, variables, payloads = shared_task
    container.put_archive("/", tar_payloads(payloads | {"attack.sh": script.encode()}))
    code = checker.run(container, agent_command(variables), 120)
    log = (read_file(container, f"{ATTACK_DIR}/attack.log") or b"").decode(errors="replace")
    assert code == 0, log
    return log


def catalogue_script(attack_id: str) -> str:
    from miner.attacks import load_catalogue

    return next(a.script for a in load_catalogue([]).attacks if a.id == attack_id)


def reward_after(container, seconds: float) -> bytes | None:  # noqa: ANN001
    from miner.check import REWARD
    from miner.sandbox.docker.gateway import read_file

    time.sleep(seconds)
    return read_file(container, REWARD)


@pytest.mark.docker
@pytest.mark.parametrize("attack, control", [
    # a writer thread whose group leader exited (state Z): a sweep that skips zombies misses it
    ("survival-zombie-leader-writer", "writer pid"),
    # writer code written into PID 1, which no process of the container can stop or kill
    ("survival-init-injected", "code written into pid 1"),
])
def test_a_writer_that_would_outlive_the_sweep_writes_nothing_after_it(shared_task, attack: str,
                                                                       control: str) -> None:
    checker, image, folder, config, _, _ = shared_task
    container = checker.start(image, folder)
    try:
        log = as_agent(shared_task, container, catalogue_script(attack))
        seen = [reward_after(container, 0.25) for _ in range(20)]  # control: it writes (under load: late)
        assert control in log and b"1\n" in seen, (log, seen)
        result = checker.verify(container, folder, config, image)
        assert result.reward == 0, result.output[-2000:]
        after = reward_after(container, 1.5)
        assert after == b"0\n", f"the writer ran again after the boot tool: {after!r}\n{result.output[-1500:]}"
    finally:
        container.remove(force=True)


TRACED_BOOT = """
import ctypes, os, sys
libc = ctypes.CDLL(None)
pid = os.fork()
if pid == 0:
    libc.ptrace(0, 0, 0, 0)  # PTRACE_TRACEME: the parent traces the boot tool from its first instruction
    os.execv("/tests/boot", ["/tests/boot", "script", "/tests/test.sh"])
while True:
    _, status = os.waitpid(pid, 0)
    if os.WIFEXITED(status) or os.WIFSIGNALED(status):
        break
    libc.ptrace(7, pid, 0, 0)  # PTRACE_CONT, signals swallowed: a tracer could rewrite anything here
"""


@pytest.mark.docker
def test_a_boot_tool_traced_from_its_start_scores_zero(shared_task) -> None:
    """A tracer attached before the boot tool made itself undumpable could make it say anything: such
    a run scores 0 (here the healthy, solved state: it would score 1 untraced)."""
    from miner.check import REWARD, STDOUT
    from miner.sandbox.docker.gateway import read_file, tar_folder

    checker, image, folder, config, variables, _ = shared_task
    container = checker.start(image, folder)
    try:
        checker.solve(container, folder, config)
        container.put_archive("/", tar_folder(folder / "tests", "tests"))
        script = f"import base64; exec(base64.b64decode({base64.b64encode(TRACED_BOOT.encode())!r}))"
        code = checker.run(container, ["bash", "-c", f"{variables['ATTACK_PYTHON']} -I -c \"{script}\" > {STDOUT} 2>&1"],
                           600)
        out = (read_file(container, STDOUT) or b"").decode(errors="replace")
        assert code is not None and "the boot tool is traced by another process" in out, out[-2000:]
        assert read_file(container, REWARD) == b"0\n"
        assert checker.verify(container, folder, config, image).reward == 1  # control: untraced, it is 1
    finally:
        container.remove(force=True)


@pytest.mark.docker
def test_a_reward_folder_locked_by_its_owner_is_unlocked_and_written(shared_task) -> None:
    """/logs and /logs/verifier made read-only (root without CAP_DAC_OVERRIDE cannot write there):
    the boot tool, as their owner, makes them writable and writes its reward."""
    from miner.check import REWARD, STDOUT
    from miner.sandbox.docker.gateway import read_file, tar_folder

    checker, image, folder, config, _, _ = shared_task
    container = checker.start(image, folder)
    try:
        as_agent(shared_task, container, f"mkdir -p /logs/verifier && : > {STDOUT} && chmod 666 {STDOUT} && "
                                          "chmod 555 /logs/verifier /logs")
        container.put_archive("/", tar_folder(folder / "tests", "tests"))
        code = checker.run(container, ["bash", "-c", f"(/tests/test.sh) > {STDOUT} 2>&1"], 600)
        out = (read_file(container, STDOUT) or b"").decode(errors="replace")
        assert code is not None and read_file(container, REWARD) == b"0\n", out[-2000:]  # 137: --kill-ancestors
        assert "reward written once, by the boot tool: 0" in out
    finally:
        container.remove(force=True)
