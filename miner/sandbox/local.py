"""The local sandbox backend: a workspace folder confined with bubblewrap.

The healthy environment is a folder on the host (WORKDIR/healthy) holding project/, venv/ and
home/ (the shell's startup files: ~/.bashrc holds the environment, see miner.sandbox.layout).
Every command runs as `bash -c` (which reads ~/.bashrc through $BASH_ENV) under bwrap with
that folder (or a fork of it) bound at /sandbox, the rest of the host read-only, no network
unless asked, all capabilities dropped (so root cannot read a chmod-000 file), no host daemon
sockets (/run is emptied), a memory ulimit and a pids cgroup.

Forks are copy-on-write overlays when we are root and the kernel allows it: each command mounts
overlay(lower=healthy, upper=fork/upper) in its own private mount namespace, so nothing is
mounted on the host and changes persist across the commands of one fork. Otherwise a fork is a
plain copy of the healthy folder. MINER_COW=copy|overlay forces one or the other.

Usage:
    backend = LocalBackend()
    healthy = backend.build(project, spec, Path("work/myproj"))
    with backend.fork(healthy) as box:
        print(box.run("python -m pytest -q").output)
"""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict
from pathlib import Path

from miner.models import HOME_DIR, PROJECT_DIR, SANDBOX_ROOT, VENV_DIR, Project, RunResult, content_id
from miner.sandbox.base import (
    Backend,
    BackendUnavailable,
    BuildError,
    BuildSpec,
    Capabilities,
    Healthy,
    Limits,
    Sandbox,
    miner_env,
)
from miner.sandbox.layout import SANDBOX_PATH, home_files, shell_env

BWRAP = "/usr/bin/bwrap"
MARKER = "build.json"  # in WORKDIR, next to healthy/: present only once a build completed
SKIPPED_ROOT_ENTRIES = {"proc", "dev", "tmp", "sys", "sandbox"}
# Host daemons' sockets (/run) and running containers' file systems (/var/lib/docker).
MASKED_DIRS = ("/run", "/var/run", "/var/lib/docker")
HIDDEN_HOMES = ("/root", "/home")  # replaced by empty folders, but for the paths a sandbox needs
HIDDEN_FILES = ("/etc/shadow", "/etc/gshadow")
MAX_OUTPUT = 2_000_000  # characters of command output kept (the tail)
HOST_NETWORK_ENV = (  # host variables passed through only to commands that have network
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
)
# Where per-command cgroups can be made: cgroup v1's hierarchy of the controller, or the v2 root.
CGROUP_HIERARCHIES = {
    "pids": (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup")),
    "cpu": (Path("/sys/fs/cgroup/cpu"), Path("/sys/fs/cgroup/cpu,cpuacct"), Path("/sys/fs/cgroup")),
}
CONTROL_FILES = {"pids": ("pids.max",), "cpu": ("cpu.cfs_quota_us", "cpu.max")}
CPU_PERIOD_US = 100_000
CGROUP_PREFIX = "miner-"
CGROUP_STALE_AFTER = 300.0  # seconds after which an empty cgroup is taken as left behind
# How bwrap reports a host mount that vanished while it set up the sandbox (see _mount_race).
MOUNT_RACE_PREFIX = "bwrap: Can't bind mount"
MOUNT_RACE_RETRIES = 3


def _tail(text: str, limit: int = MAX_OUTPUT) -> str:
    return text if len(text) <= limit else text[-limit:]


def rmtree(path: Path) -> None:
    """Remove a tree even when a break left unreadable or unwritable folders in it."""

    def fix_and_retry(func, p, _exc):  # type: ignore[no-untyped-def]
        try:
            os.chmod(os.path.dirname(p), 0o700)
            if os.path.isdir(p) and not os.path.islink(p):
                os.chmod(p, 0o700)
            func(p)
        except OSError:
            pass

    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path, onerror=fix_and_retry)


def _root_binds(keep: tuple[str, ...] = (), writable: tuple[str, ...] = ()) -> list[str]:
    """Rebuild the host's root read-only, entry by entry, so /sandbox can be created in it.

    /run is replaced by an empty tmpfs: it holds the host's daemon sockets (Docker, containerd,
    databases), which a read-only bind would still let a command connect to. /var/lib/docker
    is hidden too: it holds the file systems of running containers. The users' home folders
    (/root, /home: keys, tokens, other work) and the password hashes are hidden as well, so
    nothing run inside, an agent's command least of all, can read them; `keep` are the paths
    under them the sandbox needs (the interpreter the venv was made from, pip's config), and
    `writable` those it writes (pip's cache, when the work folder is under a home: no store).
    Both are bound before the homes are made read-only, which bwrap could not create them under.
    """
    args: list[str] = []
    for entry in sorted(os.listdir("/")):
        if entry in SKIPPED_ROOT_ENTRIES:
            continue
        path = f"/{entry}"
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif path in MASKED_DIRS or path in HIDDEN_HOMES:
            args += ["--tmpfs", path]  # not bound at all: nothing of it to copy, nothing to race
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for masked in MASKED_DIRS:
        if masked.count("/") > 1 and os.path.isdir(masked) and not os.path.islink(masked):
            args += ["--tmpfs", masked]
    resolv = os.path.realpath("/etc/resolv.conf")
    if any(resolv.startswith(m + "/") for m in MASKED_DIRS) and os.path.isfile(resolv):
        args += ["--ro-bind", resolv, resolv]  # name resolution for commands with network
    for secret in HIDDEN_FILES:
        if os.path.isfile(secret):
            args += ["--ro-bind", "/dev/null", secret]
    for path in keep:
        if os.path.exists(path) and any(path.startswith(home + "/") for home in HIDDEN_HOMES):
            args += ["--ro-bind", path, path]
    for path in writable:
        if os.path.isdir(path) and any(path.startswith(home + "/") for home in HIDDEN_HOMES):
            args += ["--bind", path, path]
    for home in HIDDEN_HOMES:  # empty, and read-only like the rest of the host
        if os.path.isdir(home) and not os.path.islink(home):
            args += ["--remount-ro", home]
    return args


def confined_tool(argv: list[str], visible: tuple[str, ...], workdir: str) -> list[str]:
    """argv run read-only and offline: the host's root as a sandbox sees it, an empty /tmp, and
    `visible` (host paths under /tmp or the hidden homes the tool needs: its interpreter, its
    packages, the files it reads) bound read-only where they are. For the tools miner runs on what
    it fetched before any sandbox exists (discovery's pytest); bwrap must be installed."""
    hidden = [p for p in visible if os.path.exists(p)]
    args = [BWRAP, *_root_binds(tuple(p for p in hidden if not p.startswith("/tmp/"))), "--dev", "/dev",
            "--proc", "/proc", "--tmpfs", "/tmp"]
    for path in hidden:
        if path.startswith("/tmp/"):
            args += ["--ro-bind", path, path]
    return [*args, "--unshare-all", "--cap-drop", "ALL", "--die-with-parent", "--new-session", "--chdir", workdir,
            *argv]


def host_paths_needed(python: str) -> tuple[str, ...]:
    """Host paths under the hidden home folders that sandboxed commands need: the installation
    of the interpreter the venv is made from, and the user's pip configuration."""
    prefix = Path(os.path.realpath(python)).parent.parent
    return tuple(str(p) for p in (prefix, Path.home() / ".config" / "pip") if p.exists())


class CommandCgroups:
    """Per-command cgroups: the process limit that holds even for root, and the CPU quota.

    `ulimit -u` is not enforced for processes whose real uid is 0, so as root the process limit
    is a cgroup (one flat, short-lived child of the pids hierarchy per command); `Limits.cpus`
    becomes a CFS quota in the cpu hierarchy (cgroup v1 `cpu.cfs_quota_us`, v2 `cpu.max`).
    A controller whose hierarchy is not writable here is left out (for processes, `ulimit -u`
    then is all there is, effective for other users).
    """

    _bases: dict[str, Path | None] = {}  # controller -> usable hierarchy, probed once

    def __init__(self, processes: int = 0, cpus: float = 0.0) -> None:
        self.paths: list[Path] = []
        wanted: dict[str, dict[str, str]] = {}
        if processes > 0:
            wanted["pids"] = {"pids.max": str(processes)}
        if cpus > 0:
            quota = str(max(1000, int(cpus * CPU_PERIOD_US)))
            wanted["cpu"] = {"cpu.cfs_period_us": str(CPU_PERIOD_US), "cpu.cfs_quota_us": quota,
                             "cpu.max": f"{quota} {CPU_PERIOD_US}"}
        for controller, settings in wanted.items():
            base = self.base(controller)
            if base is not None:
                self._make(base, settings)

    def _make(self, base: Path, settings: dict[str, str]) -> None:
        path = base / f"{CGROUP_PREFIX}{uuid.uuid4().hex[:12]}"
        try:
            path.mkdir()
            for name, value in settings.items():
                if (path / name).exists():
                    (path / name).write_text(value)
            self.paths.append(path)
        except OSError:
            self.release_path(path)

    @classmethod
    def base(cls, controller: str) -> Path | None:
        if controller not in cls._bases:
            cls._bases[controller] = None
            for hierarchy in CGROUP_HIERARCHIES[controller]:
                probe = hierarchy / f"{CGROUP_PREFIX}probe-{uuid.uuid4().hex[:8]}"
                try:
                    probe.mkdir()
                except OSError:
                    continue
                usable = any((probe / f).exists() for f in CONTROL_FILES[controller])
                cls.release_path(probe)
                if usable:
                    cls._bases[controller] = hierarchy
                    cls.sweep(hierarchy)
                    break
        return cls._bases[controller]

    @staticmethod
    def sweep(hierarchy: Path) -> None:
        """Remove empty cgroups that earlier, interrupted runs left behind.

        Only old ones: a cgroup another thread or process has just made is empty too until
        its command enters it, and removing it would make that command fail.
        """
        for stale in hierarchy.glob(f"{CGROUP_PREFIX}*"):
            try:
                if time.time() - stale.stat().st_mtime < CGROUP_STALE_AFTER:
                    continue
                if not (stale / "cgroup.procs").read_text().strip():
                    stale.rmdir()
            except OSError:
                pass

    @staticmethod
    def release_path(path: Path, wait: float = 0.0) -> None:
        deadline = time.monotonic() + wait
        while True:
            try:
                path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() >= deadline:
                    return  # still busy: swept on a later start
                time.sleep(0.05)

    def wrap(self, argv: list[str]) -> list[str]:
        """argv started inside the cgroups."""
        if not self.paths:
            return argv
        joins = " && ".join(f"echo $$ > {shlex.quote(str(p / 'cgroup.procs'))}" for p in self.paths)
        return ["sh", "-c", f'{joins} && exec "$@"', "sh", *argv]

    def release(self) -> None:
        for path in self.paths:
            self.release_path(path, wait=2.0)
        self.paths = []


def _overlay_options(lower: Path, upper: Path, work: Path, redirect: bool) -> str:
    opts = f"lowerdir={lower},upperdir={upper},workdir={work}"
    # redirect_dir lets a renamed lower directory keep working instead of failing with EXDEV.
    return opts + (",redirect_dir=on" if redirect else "")


def _in_private_overlay(opts: str, merged: Path, argv: list[str]) -> list[str]:
    """argv run in a private mount namespace where `merged` shows the overlay."""
    script = f"mount -t overlay overlay -o {shlex.quote(opts)} {shlex.quote(str(merged))} && exec \"$@\""
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", *argv]


def _probe_overlay(scratch: Path) -> str | None:
    """Overlay mount options that work here ("redirect" or "plain"), or None when overlay fails."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return None
    base = scratch / f".overlay-probe-{uuid.uuid4().hex[:8]}"
    try:
        dirs = {name: base / name for name in ("lower", "upper", "work", "merged")}
        for d in dirs.values():
            d.mkdir(parents=True)
        (dirs["lower"] / "probe").write_text("ok")
        for redirect in (True, False):
            opts = _overlay_options(dirs["lower"], dirs["upper"], dirs["work"], redirect)
            argv = _in_private_overlay(opts, dirs["merged"], ["cat", str(dirs["merged"] / "probe")])
            done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
            if done.returncode == 0 and done.stdout == "ok":
                return "redirect" if redirect else "plain"
        return None
    except (OSError, subprocess.SubprocessError):
        return None
    finally:
        rmtree(base)


class Workspace:
    """Where a command's /sandbox comes from: a folder, or an overlay over the healthy folder."""

    def __init__(self, root: Path, overlay: tuple[Path, Path, Path, Path, bool] | None = None) -> None:
        self.root = root  # the folder bound at /sandbox (the merged mount point for overlays)
        self.overlay = overlay  # (lower, upper, work, merged, redirect_dir)

    def wrap(self, argv: list[str]) -> list[str]:
        """argv run where self.root shows the sandbox's files."""
        if self.overlay is None:
            return argv
        lower, upper, work, merged, redirect = self.overlay
        return _in_private_overlay(_overlay_options(lower, upper, work, redirect), merged, argv)


class Confinement:
    """Builds bwrap command lines for one workspace."""

    def __init__(self, workspace: Workspace, limits: Limits, site_packages: str, pip_cache: Path | None,
                 keep: tuple[str, ...] = ()) -> None:
        self.workspace = workspace
        self.limits = limits
        self.site_packages = site_packages
        self.pip_cache = pip_cache
        self.keep = keep  # host paths under the hidden home folders the sandbox needs

    def env(self, network: bool) -> dict[str, str]:
        env = {**shell_env(), "PATH": SANDBOX_PATH, "LANG": "C.UTF-8", "VIRTUAL_ENV": VENV_DIR,
               **miner_env(), "MINER_SITE_PACKAGES": self.site_packages}
        if network:
            env |= {k: v for k, v in os.environ.items() if k.startswith("PIP_") or k in HOST_NETWORK_ENV}
            user_pip_conf = Path.home() / ".config" / "pip" / "pip.conf"
            if user_pip_conf.is_file() and "PIP_CONFIG_FILE" not in env:
                env["PIP_CONFIG_FILE"] = str(user_pip_conf)  # HOME moves to /sandbox/home inside
            if self.pip_cache is not None:
                env["PIP_CACHE_DIR"] = str(self.pip_cache)
        return env

    def bwrap(self, network: bool, interactive: bool = False) -> list[str]:
        cache = (str(self.pip_cache),) if network and self.pip_cache is not None else ()
        args = [BWRAP, *_root_binds(self.keep, cache), "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
        args += ["--bind", str(self.workspace.root), SANDBOX_ROOT]
        if cache and not any(cache[0].startswith(home + "/") for home in HIDDEN_HOMES):
            args += ["--bind", cache[0], cache[0]]
        args += ["--unshare-all", "--cap-drop", "ALL", "--die-with-parent", "--chdir", "/"]
        if network:
            args.append("--share-net")
        if not interactive:
            args.append("--new-session")
        return args

    def ulimits(self) -> str:
        return f"ulimit -v {self.limits.memory_mb * 1024}; ulimit -u {self.limits.processes}; "

    def argv(self, command: str, network: bool) -> list[str]:
        script = f"{self.ulimits()}cd {PROJECT_DIR}; {command}"  # bash has read $BASH_ENV already
        return self.workspace.wrap([*self.bwrap(network), "bash", "-c", script])

    def shell_argv(self) -> list[str]:
        script = f"{self.ulimits()}cd {PROJECT_DIR}; exec bash --login -i"  # as a terminal agent's shell
        return self.workspace.wrap([*self.bwrap(network=False, interactive=True), "bash", "-c", script])


def execute(argv: list[str], env: dict[str, str], command: str, timeout: float, processes: int = 0,
            cpus: float = 0.0) -> RunResult:
    """Run argv in its own process group (and cgroups: processes and CPU quota, when > 0); on
    timeout kill it."""
    groups = CommandCgroups(processes, cpus)
    try:
        for attempt in range(MOUNT_RACE_RETRIES + 1):
            result = _execute(groups.wrap(argv), env, command, timeout)
            if not _mount_race(result.exit_code, result.output) or attempt == MOUNT_RACE_RETRIES:
                return result
            time.sleep(0.2 * (attempt + 1))
        raise AssertionError("unreachable")
    finally:
        groups.release()


def _mount_race(exit_code: int, output: str) -> bool:
    """bwrap failed before running anything because a host mount vanished while it copied the mount tree.

    bwrap binds the host's directories recursively; a container started or removed meanwhile
    (/var/lib/docker/overlay2/*/merged, /run/docker/netns/*) makes that fail at random, and a
    second try succeeds.
    """
    return exit_code == 1 and output.startswith(MOUNT_RACE_PREFIX)


def _execute(argv: list[str], env: dict[str, str], command: str, timeout: float) -> RunResult:
    start = time.monotonic()
    proc = subprocess.Popen(
        argv,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    timed_out = False
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc.pid)
        out, _ = proc.communicate()
    text = out.decode("utf-8", errors="replace")
    code = proc.returncode if not timed_out else -signal.SIGKILL
    return RunResult(
        command=command,
        exit_code=code,
        output=_tail(text),
        duration=round(time.monotonic() - start, 3),
        timed_out=timed_out,
    )


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


class LocalSandbox(Sandbox):
    """One fork of a healthy workspace: a copy, or an overlay upper dir over the healthy folder."""

    def __init__(self, healthy: Healthy, folder: Path, workspace: Workspace, confinement: Confinement) -> None:
        self.healthy = healthy
        self.folder = folder
        self.workspace = workspace
        self.confinement = confinement
        self.closed = False

    def run(self, command: str, *, network: bool = False, timeout: float | None = None) -> RunResult:
        if self.closed:
            raise RuntimeError(f"sandbox {self.folder} is closed")
        limit = timeout if timeout is not None else self.confinement.limits.timeout
        argv = self.confinement.argv(command, network)
        limits = self.confinement.limits
        return execute(argv, self.confinement.env(network), command, limit, limits.processes, limits.cpus)

    def _host_path(self, path: str) -> Path:
        rel = os.path.relpath(os.path.normpath(path), SANDBOX_ROOT)
        if rel.startswith(".."):
            raise ValueError(f"{path} is not under {SANDBOX_ROOT}")
        return self.workspace.root / rel

    def _privileged(self, script: str, args: list[str], data: bytes | None = None) -> subprocess.CompletedProcess:
        """A root shell script that sees the sandbox's files at their sandbox paths.

        Paths resolve as they do inside (symlinks to /sandbox/..., overlay whiteouts), while
        keeping root's right to read what a break made unreadable.
        """
        argv = [BWRAP, *_root_binds(), "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
        argv += ["--bind", str(self.workspace.root), SANDBOX_ROOT, "--unshare-pid", "--unshare-net",
                 "--die-with-parent"]
        argv += ["sh", "-c", script, "sh", *args]
        for attempt in range(MOUNT_RACE_RETRIES + 1):
            done = subprocess.run(self.workspace.wrap(argv), input=data, capture_output=True, timeout=120)
            if not _mount_race(done.returncode, done.stderr.decode(errors="replace")) or attempt == MOUNT_RACE_RETRIES:
                return done
            time.sleep(0.2 * (attempt + 1))
        raise AssertionError("unreachable")

    def read(self, path: str) -> bytes | None:
        target = self._host_path(path)
        if os.geteuid() != 0:  # copy forks only: read the copy directly
            return target.read_bytes() if target.is_file() else None
        done = self._privileged('if [ -f "$1" ]; then exec cat -- "$1"; else exit 3; fi', [path])
        if done.returncode == 3:
            return None
        if done.returncode != 0:
            raise OSError(f"cannot read {path}: {done.stderr.decode(errors='replace')}")
        return done.stdout

    def put(self, path: str, data: bytes, mode: int = 0o644) -> None:
        target = self._host_path(path)
        if os.geteuid() != 0:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            os.chmod(target, mode)
            return
        script = 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1" && chmod "$2" -- "$1"'
        done = self._privileged(script, [path, format(mode, "o")], data)
        if done.returncode != 0:
            raise OSError(f"cannot write {path}: {done.stderr.decode(errors='replace')}")

    def close(self) -> None:
        if not self.closed:
            rmtree(self.folder)
            self.closed = True

    @property
    def location(self) -> str:
        return str(self.folder)

    def shell(self) -> None:
        groups = CommandCgroups(self.confinement.limits.processes, self.confinement.limits.cpus)
        try:
            subprocess.run(groups.wrap(self.confinement.shell_argv()), env=self.confinement.env(False), check=False)
        finally:
            groups.release()


class LocalBackend(Backend):
    """Healthy workspaces on the host, forked by overlay or copy, confined with bubblewrap."""

    name = "local"

    def __init__(self, pip_cache: Path | None = None, cow: str | None = None) -> None:
        if not os.access(BWRAP, os.X_OK):
            raise BackendUnavailable(f"{BWRAP} not found (apt-get install bubblewrap)")
        self.pip_cache = pip_cache
        self.cow = cow or os.environ.get("MINER_COW") or None
        if self.cow not in (None, "copy", "overlay"):
            raise ValueError(f"MINER_COW must be copy or overlay, not {self.cow!r}")
        self._overlay_mode: dict[Path, str | None] = {}
        self._cow_probe: bool | None = None

    @property
    def capabilities(self) -> Capabilities:
        """The project folder only (no system beneath it); copy-on-write forks when overlay mounts
        work here (probed once in the temporary folder; forks probe their own folder too)."""
        if self._cow_probe is None:
            self._cow_probe = self.cow != "copy" and _probe_overlay(Path(tempfile.gettempdir())) is not None
        return Capabilities(scan_roots=(SANDBOX_ROOT,), scan_exclude=(f"{SANDBOX_ROOT}/.miner",), network_cut=True,
                            cow_forks=self._cow_probe, system=False)

    # -- build ---------------------------------------------------------------------------

    def build(self, project: Project, spec: BuildSpec, workdir: Path) -> Healthy:
        workdir = Path(workdir).resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        # One build per workdir at a time: a second crawler waits, then reuses the result.
        with open(workdir / "build.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            return self._build_locked(project, spec, workdir)

    def _build_locked(self, project: Project, spec: BuildSpec, workdir: Path) -> Healthy:
        healthy_dir = workdir / "healthy"
        digest = build_digest(project, spec)
        marker = workdir / MARKER
        if marker.is_file() and healthy_dir.is_dir():
            recorded = json.loads(marker.read_text())
            if recorded.get("digest") == digest:
                return self._healthy(project, workdir, recorded["site_packages"], spec)
        marker.unlink(missing_ok=True)
        rmtree(healthy_dir)
        rmtree(workdir / "forks")
        site_packages = self._build_fresh(project, spec, workdir)
        marker.write_text(json.dumps({"digest": digest, "site_packages": site_packages, "built": time.time()}))
        return self._healthy(project, workdir, site_packages, spec)

    def _build_fresh(self, project: Project, spec: BuildSpec, workdir: Path) -> str:
        healthy_dir = workdir / "healthy"
        shutil.copytree(project.path, healthy_dir / "project", symlinks=True, ignore=shutil.ignore_patterns(".git"))
        home = healthy_dir / os.path.relpath(HOME_DIR, SANDBOX_ROOT)
        home.mkdir()
        for name, text in home_files(spec.env).items():
            (home / name).write_text(text)
        pip_cache = self._pip_cache(workdir)
        confinement = Confinement(Workspace(healthy_dir), spec.limits, "", pip_cache, host_paths_needed(spec.python))
        log = workdir / "build.log"
        steps = [
            ("create venv", f"{shlex.quote(spec.python)} -m venv {VENV_DIR}"),
            ("install", spec.install_script or "true"),
            ("site-packages", "python -c 'import sysconfig; print(sysconfig.get_path(\"purelib\"))'"),
        ]
        outputs: list[str] = []
        for label, command in steps:
            argv, env = confinement.argv(command, network=True), confinement.env(True)
            result = execute(argv, env, command, spec.limits.timeout, spec.limits.processes, spec.limits.cpus)
            outputs.append(f"### {label}: {command}\n{result.output}")
            log.write_text("\n".join(outputs))
            if result.timed_out or result.exit_code != 0:
                why = "timed out" if result.timed_out else f"exited {result.exit_code}"
                raise BuildError(f"build step '{label}' {why} for {project.repo}", _tail(result.output, 4000))
        site_packages = outputs[-1].strip().splitlines()[-1].strip()
        # Compile once so forks never differ from the healthy state by freshly written .pyc files.
        compile_cmd = f"python -m compileall -q -j 0 {PROJECT_DIR} {site_packages} >/dev/null 2>&1; true"
        confinement.site_packages = site_packages
        execute(confinement.argv(compile_cmd, network=False), confinement.env(False), compile_cmd, spec.limits.timeout)
        return site_packages

    def _pip_cache(self, workdir: Path) -> Path:
        cache = self.pip_cache or workdir.parent / "cache" / "pip"
        cache = Path(cache).resolve()
        cache.mkdir(parents=True, exist_ok=True)
        return cache

    def _healthy(self, project: Project, workdir: Path, site_packages: str, spec: BuildSpec) -> Healthy:
        info = {"workdir": str(workdir), "pip_cache": str(self._pip_cache(workdir)), "limits": asdict(spec.limits),
                "keep": list(host_paths_needed(spec.python))}
        return Healthy(backend=self.name, ref=str(workdir / "healthy"), project=project, site_packages=site_packages,
                       info=info)

    # -- fork ----------------------------------------------------------------------------

    def cow_mode(self, forks_dir: Path) -> tuple[str, bool]:
        """("overlay", redirect_dir) or ("copy", False) for forks made under forks_dir."""
        if self.cow == "copy":
            return "copy", False
        if forks_dir not in self._overlay_mode:
            self._overlay_mode[forks_dir] = _probe_overlay(forks_dir)
        found = self._overlay_mode[forks_dir]
        if found is None:
            if self.cow == "overlay":
                raise BackendUnavailable("overlay forks requested (MINER_COW=overlay) but overlay mounts fail here")
            return "copy", False
        return "overlay", found == "redirect"

    def fork(self, healthy: Healthy) -> LocalSandbox:
        healthy_dir = Path(healthy.ref)
        workdir = Path(healthy.info.get("workdir", healthy_dir.parent))
        forks_dir = workdir / "forks"
        forks_dir.mkdir(parents=True, exist_ok=True)
        folder = forks_dir / uuid.uuid4().hex[:12]
        folder.mkdir()
        mode, redirect = self.cow_mode(forks_dir)
        if mode == "overlay":
            upper, work, merged = folder / "upper", folder / "work", folder / "merged"
            for d in (upper, work, merged):
                d.mkdir()
            workspace = Workspace(merged, (healthy_dir, upper, work, merged, redirect))
        else:
            subprocess.run(["cp", "-a", "--reflink=auto", str(healthy_dir), str(folder / "ws")], check=True)
            workspace = Workspace(folder / "ws")
        limits = Limits(**healthy.info["limits"]) if "limits" in healthy.info else Limits()
        pip_cache = Path(healthy.info["pip_cache"]) if healthy.info.get("pip_cache") else None
        confinement = Confinement(workspace, limits, healthy.site_packages, pip_cache, tuple(healthy.info.get("keep", ())))
        return LocalSandbox(healthy, folder, workspace, confinement)

    def discard(self, healthy: Healthy) -> None:
        workdir = Path(healthy.info.get("workdir", Path(healthy.ref).parent))
        (workdir / MARKER).unlink(missing_ok=True)
        rmtree(workdir / "forks")
        rmtree(Path(healthy.ref))


def build_digest(project: Project, spec: BuildSpec) -> str:
    """What a complete build depends on: reuse a build only when this is unchanged."""
    return content_id(project.repo, project.commit, spec.python, spec.install_script, spec.env, sys.version,
                      home_files(spec.env))
