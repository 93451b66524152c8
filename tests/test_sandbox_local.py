"""The bubblewrap backend: builds, confinement, copy-on-write forks, limits, build reuse."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import need

from miner.models import Project, Source
from miner.sandbox import get_backend
from miner.sandbox.base import BuildError, BuildSpec, Healthy, Limits
from miner.sandbox.local import LocalBackend, LocalSandbox, _probe_overlay, build_digest
from miner.solver_view import read_view, view_script

COW_MODES = ["copy", "overlay"]


def make_project(root: Path) -> Project:
    """A tiny package that imports six, with one test."""
    (root / "tinypkg").mkdir(parents=True)
    (root / "tinypkg" / "__init__.py").write_text("import six\n\ndef double(x):\n    return 2 * x\n")
    (root / "tests").mkdir()
    (root / "tests" / "test_tiny.py").write_text("from tinypkg import double\n\ndef test_double():\n    assert double(2) == 4\n")
    (root / "pyproject.toml").write_text(
        textwrap.dedent(
            """
            [build-system]
            requires = ["setuptools>=61"]
            build-backend = "setuptools.build_meta"

            [project]
            name = "tinypkg"
            version = "0.1"
            dependencies = ["six"]
            """
        )
    )
    (root / ".git").mkdir()  # must not be copied into the sandbox
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    source = Source(raw=str(root), kind="local", location=str(root))
    return Project(source=source, repo=str(root), commit="c0ffee", path=root)


def spec(**kw: object) -> BuildSpec:
    base = dict(
        python=sys.executable,
        install_script="pip install -q -e . pytest",
        env={"TINY_GREETING": "hello 'world' $HOME"},
        limits=Limits(timeout=300),
    )
    base.update(kw)
    return BuildSpec(**base)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[LocalBackend, Healthy, Path]:
    root = tmp_path_factory.mktemp("sbx")
    project = make_project(root / "tiny")
    backend = LocalBackend()
    healthy = backend.build(project, spec(), root / "work")
    return backend, healthy, root / "work"


@pytest.fixture(params=COW_MODES)
def backend_mode(request: pytest.FixtureRequest, built: tuple[LocalBackend, Healthy, Path]) -> tuple[LocalBackend, Healthy]:
    _, healthy, workdir = built
    if request.param == "overlay":
        need("overlay", None if _probe_overlay(workdir) else "overlay mounts fail here (they need root and unshare)")
    return LocalBackend(cow=request.param), healthy


def test_build_layout_and_env(built: tuple[LocalBackend, Healthy, Path]) -> None:
    backend, healthy, workdir = built
    healthy_dir = Path(healthy.ref)
    assert sorted(p.name for p in healthy_dir.iterdir()) == ["home", "project", "venv"]
    assert sorted(p.name for p in (healthy_dir / "home").iterdir()) == [".bashrc", ".profile"]
    assert not (healthy_dir / "project" / ".git").exists()
    assert healthy.site_packages.startswith("/sandbox/venv/lib/python3")
    with backend.fork(healthy) as box:
        out = box.run(
            'echo "$TINY_GREETING|$MINER_PROJECT|$MINER_VENV|$MINER_PYTHON|$MINER_SITE_PACKAGES|$MINER_ENV_FILE|$HOME|$PWD"'
        )
        assert out.exit_code == 0, out.output
        assert out.output.strip().split("|") == [
            "hello 'world' $HOME",
            "/sandbox/project",
            "/sandbox/venv",
            "/sandbox/venv/bin/python",
            healthy.site_packages,
            "/sandbox/home/.bashrc",
            "/sandbox/home",
            "/sandbox/project",
        ]
        tests = box.run("python -m pytest -q tests")
        assert tests.exit_code == 0 and "1 passed" in tests.output
        assert box.run("python -c 'import six, tinypkg'").exit_code == 0
        # no stray CA bundle variables without network
        assert box.run('test -z "$REQUESTS_CA_BUNDLE$CURL_CA_BUNDLE"').exit_code == 0


def test_confined(built: tuple[LocalBackend, Healthy, Path]) -> None:
    backend, healthy, workdir = built
    with backend.fork(healthy) as box:
        for target in ("/work/miner-escape", "/root/miner-escape", f"{workdir}/escape", "/usr/miner-escape"):
            result = box.run(f"touch {target}")
            assert result.exit_code != 0, target
            assert not Path(target).exists()
        # host daemon sockets (Docker's included) are out of reach even without network
        sockets = box.run("find / -xdev -type s 2>/dev/null; ls /run /var/run")
        assert "docker.sock" not in sockets.output
        assert box.run("ls -A /var/lib/docker 2>/dev/null").output.strip() == ""
        if Path("/var/run/docker.sock").exists():
            reach = box.run("python -c \"import socket; s = socket.socket(socket.AF_UNIX); s.connect('/var/run/docker.sock')\"")
            assert reach.exit_code != 0
        offline = box.run("python -c 'import socket; socket.getaddrinfo(\"pypi.org\", 443)'")
        assert offline.exit_code != 0
        assert box.run("touch /tmp/scratch && touch /sandbox/project/ok").exit_code == 0


def test_home_folders_and_password_hashes_are_hidden(built: tuple[LocalBackend, Healthy, Path]) -> None:
    """What an agent's command could read and send away: the users' homes and /etc/shadow show
    nothing inside, while the interpreter the venv was made from (under /root on pyenv
    machines) still runs."""
    backend, healthy, _ = built
    secret = Path.home() / f".miner-secret-{time.time_ns()}"
    secret.write_text("token-that-must-not-leak")
    try:
        with backend.fork(healthy) as box:
            assert "token-that-must-not-leak" not in box.run(f"cat {secret} 2>&1; ls -A {Path.home()}").output
            assert "root:" not in box.run("cat /etc/shadow 2>&1").output
            works = box.run("python -c 'import json, sqlite3; print(json.dumps(1))'")
            assert works.exit_code == 0 and works.output.strip() == "1", works.output
    finally:
        secret.unlink()


def test_cpu_quota_applied(built: tuple[LocalBackend, Healthy, Path]) -> None:
    """Limits.cpus is a CFS quota on the command's own cpu cgroup (where the host lets miner make
    one): seen from the host while the command runs."""
    import threading

    from miner.sandbox.local import CommandCgroups

    base = CommandCgroups.base("cpu")
    if base is None:
        need("cgroups", "no writable cpu cgroup hierarchy here")
    _, healthy, _ = built
    half = Healthy(backend="local", ref=healthy.ref, project=healthy.project, site_packages=healthy.site_packages,
                   info={**healthy.info, "limits": {"timeout": 60, "memory_mb": 1024, "processes": 64, "cpus": 0.37}})
    with LocalBackend().fork(half) as box:
        running = threading.Thread(target=box.run, args=("sleep 4",))
        running.start()
        quotas = set()
        for _ in range(30):
            time.sleep(0.1)
            for group in base.glob("miner-*"):
                procs = (group / "cgroup.procs").read_text().split() if (group / "cgroup.procs").exists() else []
                quota = group / ("cpu.cfs_quota_us" if (group / "cpu.cfs_quota_us").exists() else "cpu.max")
                if procs and quota.exists():
                    quotas.add(quota.read_text().split()[0])
        running.join()
    assert "37000" in quotas, quotas


def test_network_when_asked(built: tuple[LocalBackend, Healthy, Path]) -> None:
    backend, healthy, _ = built
    with backend.fork(healthy) as box:
        online = box.run("python -c 'import socket; socket.getaddrinfo(\"pypi.org\", 443)'", network=True)
        assert online.exit_code == 0, online.output
        assert box.run('test -n "$PIP_CACHE_DIR"', network=True).exit_code == 0


def test_forks_are_isolated(backend_mode: tuple[LocalBackend, Healthy]) -> None:
    backend, healthy = backend_mode
    healthy_init = Path(healthy.ref) / "project" / "tinypkg" / "__init__.py"
    before = healthy_init.read_bytes()
    with backend.fork(healthy) as one, backend.fork(healthy) as two:
        assert one.run("echo broken > tinypkg/__init__.py && rm tests/test_tiny.py && touch new.txt").exit_code == 0
        # changes persist across commands of one fork
        assert one.run("cat tinypkg/__init__.py").output.strip() == "broken"
        assert one.run("test -e tests/test_tiny.py").exit_code != 0
        assert one.read("/sandbox/project/tinypkg/__init__.py") == b"broken\n"
        assert one.read("/sandbox/project/tests/test_tiny.py") is None  # deleted (a whiteout)
        assert one.read("/sandbox/project/new.txt") == b""
        # the other fork and the healthy folder are untouched
        assert two.run("cat tinypkg/__init__.py").output.startswith("import six")
        assert two.read("/sandbox/project/tests/test_tiny.py") is not None
        assert two.read("/sandbox/project/new.txt") is None
        assert healthy_init.read_bytes() == before
        assert not (Path(healthy.ref) / "project" / "new.txt").exists()
        one_location = Path(one.location)
    assert not one_location.exists()  # close removed the fork


def test_put_and_read(backend_mode: tuple[LocalBackend, Healthy]) -> None:
    backend, healthy = backend_mode
    with backend.fork(healthy) as box:
        box.put("/sandbox/.miner/helper.sh", b"#!/bin/sh\necho helped\n", mode=0o755)
        assert box.run("/sandbox/.miner/helper.sh").output.strip() == "helped"
        assert box.read("/sandbox/.miner/helper.sh") == b"#!/bin/sh\necho helped\n"
        assert box.read("/sandbox/nothing/here") is None
        with pytest.raises(ValueError):
            box.read("/etc/passwd")
        # paths resolve as inside: a symlink to a /sandbox path is followed within the sandbox
        assert box.run("ln -s /sandbox/.miner/helper.sh /sandbox/project/link.sh").exit_code == 0
        assert box.read("/sandbox/project/link.sh") == b"#!/bin/sh\necho helped\n"
        assert box.run("ln -s /sandbox/nowhere /sandbox/project/dangling").exit_code == 0
        assert box.read("/sandbox/project/dangling") is None


def test_chmod_000_is_unreadable_inside(backend_mode: tuple[LocalBackend, Healthy]) -> None:
    backend, healthy = backend_mode
    with backend.fork(healthy) as box:
        assert box.run("chmod 000 tinypkg/__init__.py").exit_code == 0
        denied = box.run("cat tinypkg/__init__.py")
        assert denied.exit_code != 0 and "Permission denied" in denied.output
        # note: importing the module still works from its compiled .pyc, which is why
        # fs breaks aim at files that are read, not imported
        assert "PermissionError" in box.run("python -c 'open(\"tinypkg/__init__.py\").read()'").output
        # the host side can still read it (reports, hashes)
        assert box.read("/sandbox/project/tinypkg/__init__.py").startswith(b"import six")


def test_timeout_kills_the_process_group(built: tuple[LocalBackend, Healthy, Path]) -> None:
    backend, healthy, _ = built
    with backend.fork(healthy) as box:
        start = time.monotonic()
        result = box.run("sleep 100.5 & sleep 100.5; echo never", timeout=2)
        assert time.monotonic() - start < 20
        assert result.timed_out and "never" not in result.output
    time.sleep(0.5)
    left = subprocess.run(["pgrep", "-f", "sleep 100.5"], capture_output=True, text=True)
    assert left.stdout.strip() == ""


def test_limits_applied(built: tuple[LocalBackend, Healthy, Path], tmp_path: Path) -> None:
    _, healthy, _ = built
    backend = LocalBackend()
    tight = Healthy(
        backend="local",
        ref=healthy.ref,
        project=healthy.project,
        site_packages=healthy.site_packages,
        info={**healthy.info, "limits": {"timeout": 60, "memory_mb": 512, "processes": 30, "cpus": 1}},
    )
    with backend.fork(tight) as box:
        assert box.run("ulimit -v").output.strip() == str(512 * 1024)
        hog = box.run("python -c 'x = bytearray(1024 * 1024 * 1024)'")
        assert hog.exit_code != 0 and "MemoryError" in hog.output
        forker = textwrap.dedent(
            """
            import os, time
            started = 0
            try:
                for _ in range(100):
                    if os.fork() == 0:
                        time.sleep(2)
                        os._exit(0)
                    started += 1
            except BlockingIOError:
                print("limited at", started)
            """
        )
        box.put("/sandbox/home/forker.py", forker.encode())
        limited = box.run("python /sandbox/home/forker.py")
        assert limited.output.startswith("limited at"), limited.output
        assert int(limited.output.split()[-1]) < 30


def test_cow_mode_override(built: tuple[LocalBackend, Healthy, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    _, healthy, workdir = built
    monkeypatch.setenv("MINER_COW", "copy")
    assert LocalBackend().cow_mode(workdir / "forks") == ("copy", False)
    with LocalBackend().fork(healthy) as box:
        assert (Path(box.location) / "ws" / "project").is_dir()
    monkeypatch.setenv("MINER_COW", "bogus")
    with pytest.raises(ValueError):
        LocalBackend()


def test_shell_runs_inside(built: tuple[LocalBackend, Healthy, Path]) -> None:
    backend, healthy, _ = built
    with backend.fork(healthy) as box:
        argv = box.confinement.shell_argv()
        done = subprocess.run(
            argv, input="echo \"at $PWD with $TINY_GREETING\"; touch /work/escape-shell\nexit\n",
            capture_output=True, text=True, env=box.confinement.env(False), timeout=60,
        )
    assert "at /sandbox/project with hello 'world' $HOME" in done.stdout
    assert "Read-only file system" in done.stderr


def test_every_solver_shell_reads_the_environment(built: tuple[LocalBackend, Healthy, Path]) -> None:
    """A login shell (as terminus-2 opens it) and `bash -c` (Harbor's exec), started from the bare
    process environment, both find the venv's python first on PATH and the project's variables;
    a line a break appends to $MINER_ENV_FILE reaches both."""
    backend, healthy, _ = built
    command = "python -c 'import os, sys; print(sys.prefix, os.environ[\"TINY_GREETING\"], os.environ.get(\"EXTRA\"))'"
    with backend.fork(healthy) as box:
        runs = read_view(box.run(view_script(command, 60)).output)
        assert [r.shell for r in runs] == ["login", "bash -c"]
        for run in runs:
            assert run.exit_code == 0 and run.stdout == "/sandbox/venv hello 'world' $HOME None\n", run
        assert box.run("echo \"export EXTRA='from rc'\" >> \"$MINER_ENV_FILE\"").exit_code == 0
        for run in read_view(box.run(view_script(command, 60)).output):
            assert run.stdout == "/sandbox/venv hello 'world' $HOME from rc\n", run


def test_build_is_reused_when_complete(built: tuple[LocalBackend, Healthy, Path]) -> None:
    backend, healthy, workdir = built
    sentinel = Path(healthy.ref) / "home" / "sentinel"
    sentinel.write_text("kept")
    start = time.monotonic()
    again = backend.build(healthy.project, spec(), workdir)
    assert time.monotonic() - start < 2
    assert again.ref == healthy.ref and again.site_packages == healthy.site_packages
    assert sentinel.read_text() == "kept"
    sentinel.unlink()


@pytest.mark.slow  # builds of its own
def test_concurrent_builds_of_one_workdir_build_once(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    project = make_project(tmp_path / "tiny")
    counting = spec(install_script="echo built >> /sandbox/home/count")
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda _: LocalBackend().build(project, counting, tmp_path / "work"), range(2)))
    assert results[0].ref == results[1].ref
    assert (Path(results[0].ref) / "home" / "count").read_text() == "built\n"


@pytest.mark.slow  # builds of its own
def test_incomplete_build_is_redone(tmp_path: Path) -> None:
    project = make_project(tmp_path / "tiny")
    backend = LocalBackend()
    fast = spec(install_script="true")
    healthy = backend.build(project, fast, tmp_path / "work")
    sentinel = Path(healthy.ref) / "home" / "sentinel"
    sentinel.write_text("stale")
    (tmp_path / "work" / "build.json").unlink()  # as if the build had been interrupted
    backend.build(project, fast, tmp_path / "work")
    assert not sentinel.exists()
    # a changed spec or commit is a different build
    digest = build_digest(project, fast)
    assert build_digest(project, spec(install_script="true", env={"X": "1"})) != digest
    assert build_digest(project.model_copy(update={"commit": "other"}), fast) != digest
    assert build_digest(project, spec(install_script="true")) == digest


@pytest.mark.slow  # builds of its own
def test_build_error_on_failing_install(tmp_path: Path) -> None:
    project = make_project(tmp_path / "broken")
    with pytest.raises(BuildError) as caught:
        LocalBackend().build(project, spec(install_script="echo setup-went-wrong; exit 7"), tmp_path / "work")
    assert "install" in str(caught.value) and "exited 7" in str(caught.value)
    assert "setup-went-wrong" in caught.value.log
    assert not (tmp_path / "work" / "build.json").exists()


def test_build_timeout_is_a_build_error(tmp_path: Path) -> None:
    project = make_project(tmp_path / "slow")
    with pytest.raises(BuildError, match="timed out"):
        LocalBackend().build(project, spec(install_script="sleep 30", limits=Limits(timeout=2)), tmp_path / "work")


def test_get_backend() -> None:
    assert isinstance(get_backend("local"), LocalBackend)
    assert isinstance(get_backend("local", cow="copy"), LocalBackend)
    with pytest.raises(ValueError):
        get_backend("nope")


def test_fork_type(built: tuple[LocalBackend, Healthy, Path]) -> None:
    backend, healthy, _ = built
    box = backend.fork(healthy)
    assert isinstance(box, LocalSandbox)
    box.close()
    with pytest.raises(RuntimeError):
        box.run("true")
