"""Breaks run inside the sandbox only: a crawl applying every local inversion type leaves the
host as it was, and a deliberately hostile script inside a LocalSandbox does no harm.

The crawl runs from a private copy of miner's code and of the crawled fixture, made in
/var/tmp so that the sandbox sees it (read-only) like the real repository, and so that other
people editing the working tree meanwhile cannot be mistaken for the crawl. Compared before
and after: that copy and the test's folder around the store (the store itself excluded) by
content, and $HOME by metadata (type, mode, size, mtime, link target: 200k+ files; ~/.cache,
written by pip on the host, and the session machinery's ~/.claude excluded). Python's
__pycache__ folders are left out: the host interpreter running miner writes them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import pytest
from conftest import CRAWL_TIMEOUT, FIXTURES, REPO_ROOT, copy_fixture, miner_env, write_repos

from miner.models import Project, Source
from miner.sandbox.base import Healthy, Limits
from miner.sandbox.layout import home_files
from miner.sandbox.local import LocalBackend

HOME = Path.home()
HOME_SKIPPED = {HOME / ".cache", HOME / ".claude"}
SKIPPED_NAMES = {"__pycache__"}
# inventory-app reads INVENTORY_CONFIG; setting it gives the env/*-var types a target.
OVERRIDES = "env.INVENTORY_CONFIG=config.yaml"
STOCKSYNC_OVERRIDES = "env.SSL_CERT_FILE=/sandbox/project/certs/dev-ca.pem"  # as repos.txt has it
MAX_ROUNDS = 4


def content_snapshot(root: Path, skipped: set[Path] = frozenset()) -> dict[str, str]:
    """Every entry under root: sha256 of files, target of links, mode of folders."""
    found: dict[str, str] = {}
    for folder, dirs, files in os.walk(root):
        here = Path(folder)
        dirs[:] = [d for d in dirs if d not in SKIPPED_NAMES and here / d not in skipped]
        found[str(here)] = f"dir {stat.S_IMODE(here.lstat().st_mode):o}"
        for name in files:
            path = here / name
            if path.is_symlink():
                found[str(path)] = f"link {os.readlink(path)}"
            elif path.is_file():
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                found[str(path)] = f"{stat.S_IMODE(path.lstat().st_mode):o} {digest}"
            else:
                found[str(path)] = "special"
    return found


def metadata_snapshot(root: Path, skipped: set[Path]) -> dict[str, tuple]:
    """Every entry under root: (type and mode, size, mtime, link target); unreadable folders skipped."""
    found: dict[str, tuple] = {}
    for folder, dirs, files in os.walk(root):
        here = Path(folder)
        dirs[:] = [d for d in dirs if here / d not in skipped]
        for name in dirs + files:
            path = here / name
            try:
                info = path.lstat()
            except FileNotFoundError:
                continue
            link = os.readlink(path) if stat.S_ISLNK(info.st_mode) else ""
            size = 0 if stat.S_ISDIR(info.st_mode) else info.st_size
            mtime = 0 if stat.S_ISDIR(info.st_mode) else info.st_mtime_ns
            found[str(path)] = (info.st_mode, size, mtime, link)
    return found


def host_snapshot(frozen: Path, store_parent: Path, store: Path) -> dict[str, dict]:
    return {
        "miner code and fixture": content_snapshot(frozen),
        "store parent": content_snapshot(store_parent, {store}),
        "home": metadata_snapshot(HOME, HOME_SKIPPED),
    }


def differences(before: dict[str, dict], after: dict[str, dict]) -> dict[str, list[str]]:
    changed = {}
    for tree in before:
        old, new = before[tree], after[tree]
        paths = sorted(p for p in old.keys() | new.keys() if old.get(p) != new.get(p))
        if paths:
            changed[tree] = paths[:20]
    return changed


@pytest.fixture
def frozen() -> Iterator[Path]:
    """A private copy of miner's code, inventory-app, stocksync (whose lock, cache, user config,
    TLS and plugin give the home, net and state families targets), node-lib (npm packages, for
    the Node types) and node-cli (a lockfile, a peer range, tests running a package's program and an
    npm script: the npm types), visible read-only in sandboxes."""
    root = Path(tempfile.mkdtemp(prefix="miner-host-safety-", dir="/var/tmp"))
    try:
        shutil.copytree(REPO_ROOT / "miner", root / "miner", ignore=shutil.ignore_patterns("__pycache__"))
        copy_fixture("inventory-app", root / "fixtures" / "inventory-app")
        copy_fixture("stocksync", root / "fixtures" / "stocksync")
        copy_fixture("node-lib", root / "fixtures" / "node-lib")
        copy_fixture("node-cli", root / "fixtures" / "node-cli")
        yield root
    finally:
        shutil.rmtree(root)


def frozen_miner(frozen: Path, store: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    """`miner --store STORE ARGS` run from the frozen copy of the code."""
    argv = [sys.executable, "-c", "from miner.cli import main; main()", "--store", str(store), *map(str, args)]
    env = {**miner_env(), "PYTHONPATH": str(frozen)}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=CRAWL_TIMEOUT, env=env, cwd=store.parent)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


@pytest.mark.slow  # crawls until every local type was tried
@pytest.mark.extended  # 8 minutes; each type's break also runs in tests/test_catalogue_types.py, in the sandbox
def test_a_crawl_applying_every_local_type_leaves_the_host_unchanged(frozen: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    imported = subprocess.run([sys.executable, "-c", "import miner; print(miner.__file__)"], capture_output=True,
                              text=True, env={**miner_env(), "PYTHONPATH": str(frozen)}, cwd=tmp_path, check=True)
    assert imported.stdout.strip() == str(frozen / "miner" / "__init__.py")
    inversions = json.loads(frozen_miner(frozen, store, "inversions", "--json").stdout)
    wanted = {t["id"] for t in inversions if "local" in t["backends"]}
    assert len(wanted) >= 15
    repos = write_repos(tmp_path / "repos.txt", [f"{frozen / 'fixtures' / 'inventory-app'} {OVERRIDES}",
                                                 f"{frozen / 'fixtures' / 'stocksync'} {STOCKSYNC_OVERRIDES}",
                                                 str(frozen / "fixtures" / "node-lib"),
                                                 str(frozen / "fixtures" / "node-cli")])
    before = host_snapshot(frozen, tmp_path, store)
    assert str(frozen / "miner" / "sandbox" / "local.py") in before["miner code and fixture"]
    assert str(tmp_path / "repos.txt") in before["store parent"] and len(before["home"]) > 100
    missing = set(wanted)
    for _ in range(MAX_ROUNDS):  # later rounds ask only for the types not tried yet
        frozen_miner(frozen, store, "crawl", "--repos", repos, "--types", ",".join(sorted(missing)),
                     "--budget", str(len(missing) + 4), "--timeout", "300", "--jobs", "2")  # a project a core
        by_type = json.loads(frozen_miner(frozen, store, "stats", "--json").stdout)["by_type"]
        missing = wanted - {type_id for type_id, bucket in by_type.items() if bucket["tried"]}
        if not missing:
            break
    after = host_snapshot(frozen, tmp_path, store)
    assert not missing, f"local types never tried: {sorted(missing)}"
    assert not differences(before, after), json.dumps(differences(before, after), indent=1)


# -- a hostile script, directly -----------------------------------------------------------------


@pytest.fixture
def sandbox_env(tmp_path: Path) -> Healthy:
    """A hand-made healthy workspace (no venv needed for shell commands) with a low process limit."""
    healthy = tmp_path / "work" / "healthy"
    (healthy / "project").mkdir(parents=True)
    (healthy / "home").mkdir()
    for name, text in home_files({}).items():
        (healthy / "home" / name).write_text(text)
    project = Project(source=Source(raw=str(tmp_path), kind="local", location=str(tmp_path)),
                      repo=str(tmp_path), commit="0" * 64, path=healthy / "project")
    limits = Limits(timeout=60, memory_mb=1024, processes=64)
    return Healthy(backend="local", ref=str(healthy), project=project,
                   info={"workdir": str(tmp_path / "work"), "limits": asdict(limits)})


@contextlib.contextmanager
def wipe_target(box) -> Iterator[tuple[Path, Path]]:
    """The host folder the hostile script tries to delete, and a file in it that must survive:
    this repository, or, when the sandbox cannot see it (a clone under /tmp, which the sandbox
    replaces with its own), a folder made for the purpose in /var/tmp, which it sees read-only
    (not in $HOME: as root, HOME is /root, which the sandbox also replaces)."""
    if box.run(f"test -d {REPO_ROOT / 'fixtures'}", timeout=60).exit_code == 0:
        yield REPO_ROOT, REPO_ROOT / "fixtures" / "inventory-app"
        return
    target = Path(tempfile.mkdtemp(prefix="miner-victim-", dir="/var/tmp"))
    (target / "keep").mkdir()
    try:
        assert box.run(f"test -d {target / 'keep'}", timeout=60).exit_code == 0, "the sandbox does not see /var/tmp"
        yield target, target / "keep"
    finally:
        shutil.rmtree(target, ignore_errors=True)


def test_a_hostile_break_script_fails_harmlessly(sandbox_env: Healthy) -> None:
    backend = LocalBackend()
    canary = HOME / f".miner-canary-{uuid.uuid4().hex[:8]}"
    passwd = Path("/etc/passwd").read_bytes()
    fixture_before = content_snapshot(FIXTURES / "inventory-app")
    with backend.fork(sandbox_env) as box, wipe_target(box) as (target, witness):
        # Only go on to `rm -rf` the target once a harmless write there has been refused.
        probe = target / f".miner-probe-{uuid.uuid4().hex[:8]}"
        tried = box.run(f"touch {probe}", timeout=60)
        assert tried.exit_code != 0 and not probe.exists(), "the sandbox can write to the host: stopping here"

        wipe = box.run(f"rm -rf {target}; echo rm-exit=$?", timeout=300)
        assert "rm-exit=0" not in wipe.output and "Read-only file system" in wipe.output
        assert witness.exists()
        assert (REPO_ROOT / "fixtures" / "inventory-app").is_dir()

        write = box.run(f"echo x > /etc/passwd; echo passwd-exit=$?; echo x > {canary}; echo canary-exit=$?",
                        timeout=60)
        assert "passwd-exit=0" not in write.output and "canary-exit=0" not in write.output

        curl = box.run("curl -sS -m 5 -o /dev/null -w '%{http_code}' http://1.1.1.1/", timeout=60)
        assert curl.exit_code != 0 and "200" not in curl.output and "301" not in curl.output
        socket = box.run("python3 -c \"import socket; socket.create_connection(('1.1.1.1', 80), timeout=5); "
                         "print('connected')\"", timeout=60)
        assert socket.exit_code != 0 and "connected" not in socket.output

        marker = f"bomb-{uuid.uuid4().hex[:8]}"
        bomb = box.run(f"# {marker}\nbomb() {{ bomb | bomb & }}; bomb; sleep 3; echo bomb-returned", timeout=30)
        assert "fork" in bomb.output.lower() or bomb.timed_out, bomb.output[-1000:]
    assert not leftover_processes(marker), "fork bomb processes outlived the sandbox"
    assert Path("/etc/passwd").read_bytes() == passwd
    assert not canary.exists()
    assert content_snapshot(FIXTURES / "inventory-app") == fixture_before


def leftover_processes(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if marker.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found
