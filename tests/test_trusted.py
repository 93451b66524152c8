"""The verifier's trusted runtime without Docker: the static boot tool (miner/assets/boot.c, compiled
here as an export compiles it), its runtime list, and the system manifest (verifier_system.py).

The boot tool's `score` runs here with --no-kill (on a host it must never kill anything): a
runtime list of temporary files stands in for the interpreter and its libraries, and a small
script stands in for verifier.py, handing its verdict over the pipe the tool gives it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from miner.export.trusted import BootBuildError, boot_binary, runtime_text

ASSETS = Path(__file__).resolve().parent.parent / "miner" / "assets"


def load_system():
    spec = importlib.util.spec_from_file_location("miner_asset_verifier_system", ASSETS / "verifier_system.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def boot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("boot")
    try:
        data = boot_binary(folder / "cache")
    except BootBuildError as exc:
        pytest.fail(f"the boot tool must build on this machine: {exc}")
    path = folder / "boot"
    path.write_bytes(data)
    path.chmod(0o755)
    return path


def test_the_boot_tool_is_small_static_and_cached(boot: Path, tmp_path: Path) -> None:
    data = boot.read_bytes()
    assert data[:4] == b"\x7fELF" and len(data) < 64_000
    assert b"ld-linux" not in data and b"libc.so" not in data  # no interpreter, no library: nothing to preload
    cache = boot.parent / "cache"
    assert boot_binary(cache) == data and len(list(cache.iterdir())) == 1  # compiled once


def test_digests_agree_with_the_verifier(boot: Path, tmp_path: Path) -> None:
    system = load_system()
    (tmp_path / "pkg" / "__pycache__").mkdir(parents=True)
    (tmp_path / "pkg" / "b.py").write_text("b = 1\n")
    (tmp_path / "pkg" / "a.py").write_bytes(bytes(range(256)) * 300)
    (tmp_path / "pkg" / "Z.txt").write_text("")
    out = subprocess.run([boot, "sha256", tmp_path / "pkg" / "a.py", tmp_path / "missing"], capture_output=True,
                         text=True)
    assert out.stdout.split()[0] == hashlib.sha256((tmp_path / "pkg" / "a.py").read_bytes()).hexdigest()
    assert out.stdout.splitlines()[1].startswith("-") and out.returncode == 1
    listing = subprocess.run([boot, "listing", tmp_path / "pkg"], capture_output=True, text=True).stdout.split()[0]
    assert listing == system.listing_digest(str(tmp_path / "pkg"))
    assert listing == hashlib.sha256(b"Z.txt\na.py\nb.py\n").hexdigest()  # sorted by bytes, no __pycache__


def test_drop_leaves_no_capability_and_no_new_privileges(boot: Path) -> None:
    out = subprocess.run([boot, "drop", "--", "sh", "-c", "grep -E '^(CapBnd|CapEff|NoNewPrivs)' /proc/self/status"],
                         capture_output=True, text=True)
    fields = dict(line.split(":\t") for line in out.stdout.splitlines())
    assert fields == {"CapEff": "0000000000000000", "CapBnd": "0000000000000000", "NoNewPrivs": "1"}, out.stdout


def test_env0_writes_the_environment(boot: Path, tmp_path: Path) -> None:
    subprocess.run([boot, "env0", tmp_path / "env"], env={"A": "1", "B": "x=y"}, check=True)
    assert (tmp_path / "env").read_bytes() == b"A=1\0B=x=y\0"


# -- score ------------------------------------------------------------------------------------------------

VERIFIER = textwrap.dedent("""
    import os, sys, time
    args = sys.argv[1:]
    fd = int(args[args.index("--verdict-fd") + 1])
    open(os.path.join(os.path.dirname(__file__), "ran"), "w").write(" ".join(sys.orig_argv))
    verdict = open(os.path.join(os.path.dirname(__file__), "verdict")).read()
    if verdict == "slow":
        time.sleep(30)
    os.write(fd, verdict.encode())
    sys.exit(3 if verdict == "crash" else 0)
""")


@pytest.fixture
def scoring(boot: Path, tmp_path: Path):
    """(run, paths): run(verdict, *options) scores with a runtime list of temporary files."""
    system = load_system()
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "libfake.so.1").write_bytes(b"\x7fELF fake library")
    (tmp_path / "verifier.py").write_text(VERIFIER)
    entries = [["F", system.sha256_file(str(lib / "libfake.so.1")), str(lib / "libfake.so.1")],
               ["F", system.sha256_file(sys.executable), os.path.realpath(sys.executable)],
               ["L", system.listing_digest(str(lib)), str(lib)],
               ["A", "-", str(tmp_path / "ld.so.preload")]]
    (tmp_path / "runtime.txt").write_text(runtime_text({"runtime": entries}))
    reward = tmp_path / "logs" / "reward.txt"

    def run(verdict: str, *options: str) -> subprocess.CompletedProcess:
        (tmp_path / "verdict").write_text(verdict)
        (tmp_path / "ran").unlink(missing_ok=True)
        return subprocess.run([boot, "score", "--list", tmp_path / "runtime.txt", "--reward", reward,
                               "--python", sys.executable, "--no-kill", *options, "--", tmp_path / "verifier.py"],
                              capture_output=True, text=True, timeout=60)

    return run, tmp_path, reward


def test_score_writes_the_verdict_once_when_the_runtime_is_healthy(scoring) -> None:
    run, root, reward = scoring
    reward.parent.mkdir()
    (reward.parent / "reward.json").write_text('{"reward": 1}')  # planted: Harbor reads it first
    done = run("1\n", "--summary-line")
    assert reward.read_text() == "1\n" and not (reward.parent / "reward.json").exists(), done.stdout
    assert "PASSED tests/verifier.py::test_environment_repaired" in done.stdout
    ran = (root / "ran").read_text()
    assert " -I -S -B " in f" {ran} " and "pycache_prefix=/tmp/miner-pyc-" in ran and "--verdict-fd 3" in ran
    assert run("0\n").returncode == 0 and reward.read_text() == "0\n"
    run("1\nextra")
    assert reward.read_text() == "0\n"  # anything but exactly "1\n" is 0
    run("crash")
    assert reward.read_text() == "0\n"


@pytest.mark.parametrize("tamper, why", [
    (lambda root: (root / "lib" / "libfake.so.1").write_bytes(b"\x7fELF evil"), "differs from the healthy image"),
    (lambda root: (root / "lib" / "libfake.so.1").unlink(), "is missing"),
    (lambda root: (root / "lib" / "libevil.so").write_bytes(b""), "files were added or removed"),
    (lambda root: (root / "ld.so.preload").write_text("/tmp/evil.so\n"), "exists (the healthy image has none)"),
])
def test_score_refuses_a_tampered_runtime_without_running_it(scoring, tamper, why: str) -> None:
    run, root, reward = scoring
    tamper(root)
    done = run("1\n")
    assert why in done.stdout and reward.read_text() == "0\n"
    assert not (root / "ran").exists(), "the verifier must not run on a tampered runtime"


def test_score_gives_up_at_the_deadline_and_replaces_a_redirected_reward_folder(scoring, tmp_path: Path) -> None:
    run, root, reward = scoring
    (tmp_path / "elsewhere").mkdir()
    reward.parent.symlink_to(tmp_path / "elsewhere")
    done = run("slow", "--deadline", "2")
    assert "did not finish within 2 s" in done.stdout
    assert reward.parent.is_dir() and not reward.parent.is_symlink() and reward.read_text() == "0\n"
    assert not (tmp_path / "elsewhere" / "reward.txt").exists()


# -- the system manifest --------------------------------------------------------------------------------------


def test_system_digests_see_every_change_but_the_allowed_ones(tmp_path: Path) -> None:
    system = load_system()
    root = tmp_path / "root"
    (root / "pkg-1.0.dist-info").mkdir(parents=True)
    (root / "pkg").mkdir()
    (root / "pkg" / "mod.py").write_text("x = 1\n")
    (root / "bin").mkdir()
    (root / "bin" / "tool").write_text("#!/bin/sh\n")
    (root / "bin" / "tool").chmod(0o755)
    (root / "bin" / "link").symlink_to("tool")
    (root / "pkg-1.0.dist-info" / "METADATA").write_text("Name: pkg\n")
    (root / "pkg-1.0.dist-info" / "RECORD").write_text("pkg/mod.py,,\n")
    healthy = {str(root): system.tree_digests(str(root)), str(tmp_path / "absent"): {".": "absent"}}
    same = lambda: system.system_changes(healthy, ())  # noqa: E731
    assert same() == []
    # what a correct repair may leave different: bytecode, pip's metadata, empty folders
    (root / "pkg" / "__pycache__").mkdir()
    (root / "pkg" / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"forged")
    (root / "pkg-1.0.dist-info" / "RECORD").write_text("rewritten\n")
    (root / "pkg-1.0.dist-info" / "REQUESTED").write_text("")
    (root / "old" / "sub").mkdir(parents=True)
    assert same() == []
    # what it may not
    changes = {
        "modified": lambda: (root / "pkg" / "mod.py").write_text("x = 2\n"),
        "added": lambda: (root / "pkg" / "evil.pth").write_text("import os\n"),
        "exec bit": lambda: (root / "bin" / "tool").chmod(0o644),
        "relinked": lambda: ((root / "bin" / "link").unlink(), (root / "bin" / "link").symlink_to("/bin/sh")),
        "metadata": lambda: (root / "pkg-1.0.dist-info" / "METADATA").write_text("Name: evil\n"),
        "created": lambda: (tmp_path / "absent").write_text(""),
    }
    for what, change in changes.items():
        before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file() and not p.is_symlink()}
        change()
        found = same()
        assert found, f"{what}: not seen"
        if what == "modified":
            assert found == [str(root / "pkg")]
        if what == "created":
            assert found == [str(tmp_path / "absent")]
            (tmp_path / "absent").unlink()
        for path, data in before.items():  # undo, keeping what the next change needs
            path.write_bytes(data)
        (root / "bin" / "tool").chmod(0o755)
        (root / "pkg" / "evil.pth").unlink(missing_ok=True)
        if (root / "bin" / "link").readlink() != Path("tool"):
            (root / "bin" / "link").unlink()
            (root / "bin" / "link").symlink_to("tool")
        assert same() == [], f"{what}: not undone"


def test_how_a_script_names_the_same_interpreter_is_no_change(tmp_path: Path) -> None:
    """pip writes `#!venv/bin/python`, the venv module `#!venv/bin/python3`: a repair that writes one
    for the other, or links venv/bin/python3 to the interpreter's other name, changes nothing; a
    script naming another interpreter, or a link reaching another file, does."""
    system = load_system()
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python3").symlink_to(sys.executable)
    (venv / "bin" / "python").symlink_to("python3")
    script = venv / "bin" / "tool"
    script.write_text(f"#!{venv}/bin/python\nimport tool\n")
    script.chmod(0o755)
    healthy = {str(venv): system.tree_digests(str(venv))}
    script.write_text(f"#!{venv}/bin/python3\nimport tool\n")
    (venv / "bin" / "python3").unlink()
    (venv / "bin" / "python3").symlink_to(os.path.realpath(sys.executable))
    assert system.system_changes(healthy, ()) == []
    script.write_text("#!/usr/bin/python3\nimport tool\n")
    assert system.system_changes(healthy, ()) == [str(venv / "bin")]
    script.write_text(f"#!{venv}/bin/python\nimport tool\n")
    (venv / "bin" / "python3").unlink()
    (venv / "bin" / "python3").symlink_to("/bin/sh")
    assert system.system_changes(healthy, ()) == [str(venv / "bin")]


BYTECODE_CHECK = """
import importlib.util, os, py_compile, sys
sys.path.insert(0, sys.argv[1])
import verifier
source = sys.argv[2]
pyc = os.path.join(os.path.dirname(source), "__pycache__", "mod." + sys.implementation.cache_tag + ".pyc")
said = {"no bytecode": verifier.bytecode_fault(source)}
py_compile.compile(source, cfile=pyc, doraise=True)
said["compiled"] = verifier.bytecode_fault(source)
with open(pyc, "rb") as handle:
    data = handle.read()
with open(pyc, "wb") as handle:
    handle.write(data[:19])
said["truncated"] = verifier.bytecode_fault(source)
with open(source + ".old", "w") as handle:
    handle.write("X = 0\\n")
py_compile.compile(source + ".old", cfile=pyc, dfile=source, doraise=True,
                   invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
said["stale, unchecked hash"] = verifier.bytecode_fault(source)
py_compile.compile(source + ".old", cfile=pyc, dfile=source, doraise=True,
                   invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
said["stale, checked hash"] = verifier.bytecode_fault(source)
print(repr(said))
"""


def test_the_bytecode_python_would_load_is_checked_against_its_source(tmp_path: Path) -> None:
    """The verifier runs the tests with bytecode from a fresh folder, so a task that breaks a
    module's cached bytecode is judged by this check: a .pyc python would load (its header matches
    the source) must hold the source's code. Run as the boot tool runs the verifier, with its own
    pycache_prefix (which must not hide the cache python looks in)."""
    (tmp_path / "pkg").mkdir()
    source = tmp_path / "pkg" / "mod.py"
    source.write_text("X = 1\ndef f(a):\n    return [a * 2.0, -0.0, {1: 2}]\n")
    done = subprocess.run([sys.executable, "-I", "-S", "-B", "-X", f"pycache_prefix={tmp_path / 'fresh'}",
                           "-c", BYTECODE_CHECK, str(ASSETS), str(source)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    said = eval(done.stdout)  # noqa: S307 - our own repr of a dict of strings
    assert said["no bytecode"] is None and said["compiled"] is None
    assert said["stale, checked hash"] is None  # python compares it with the source and compiles afresh
    assert "cannot be read: marshal data too short" in said["truncated"]
    assert "is not compiled from it" in said["stale, unchecked hash"]


def test_bytecode_is_cleared_under_the_roots_only(tmp_path: Path) -> None:
    system = load_system()
    for folder in ("root/a/__pycache__", "root/a/b/__pycache__", "project/__pycache__", "root/skipped/__pycache__"):
        (tmp_path / folder).mkdir(parents=True)
    assert system.clear_bytecode([str(tmp_path / "root")], (str(tmp_path / "root" / "skipped"),)) == 2
    assert not list((tmp_path / "root" / "a").rglob("__pycache__"))
    assert (tmp_path / "project" / "__pycache__").is_dir() and (tmp_path / "root" / "skipped" / "__pycache__").is_dir()


def test_the_runtime_list_holds_the_interpreter_and_what_must_not_exist(tmp_path: Path) -> None:
    system = load_system()
    entries = {path: (kind, digest) for kind, digest, path in system.runtime_list(("/bin/bash",), None, (str(tmp_path),))}
    executable = os.path.realpath(sys.executable)
    assert entries[executable] == ("F", system.sha256_file(executable))
    assert entries[os.path.join(os.path.dirname(executable), "pybuilddir.txt")] == ("A", "-")
    assert any(kind == "L" and path.endswith(("python3.11", "python3.12")) for path, (kind, _) in entries.items())
    assert entries.get("/etc/ld.so.preload", ("A", "-"))[0] in ("A", "F")
    assert any(path.endswith("libc.so.6") for path in entries), "the C library the interpreter maps"
    assert os.path.realpath("/bin/bash") in entries


def test_a_second_check_rehashes_only_changed_inodes(tmp_path: Path) -> None:
    import time

    system = load_system()
    path = tmp_path / "lib.so"
    path.write_bytes(b"a" * 100)
    memo = system.Memo()
    first = memo.digest(str(path), os.lstat(path))
    assert memo.digest(str(path), os.lstat(path)) == first
    before = os.lstat(path)
    time.sleep(0.05)  # a later change gets a later ctime, which user space cannot set back
    path.write_bytes(b"b" * 100)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # same size, same mtime
    assert memo.digest(str(path), os.lstat(path)) == hashlib.sha256(b"b" * 100).hexdigest() != first
