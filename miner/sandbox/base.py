"""The sandbox interface: everything above it is blind to whether it is a workspace or a container.

A Backend builds a project's healthy environment once (`build`) and then hands out fresh,
disposable copies of it (`fork`). A Sandbox runs shell commands inside that copy, confined.

Every backend exposes the same fixed layout inside the sandbox (see miner.models):
  /sandbox/project         the project's files          ($MINER_PROJECT)
  /sandbox/venv            its virtual environment       ($MINER_VENV, $MINER_PYTHON)
  /sandbox/home/.bashrc    the environment the project runs in ($MINER_ENV_FILE), read by every
                           bash the way a shell reads it (miner.sandbox.layout: ~/.profile, BASH_ENV)
plus $MINER_SITE_PACKAGES. Break and fix scripts are written against these variables only
(`miner_env` gives them; miner.sandbox.layout writes the shell's files, for every backend).
"""

from __future__ import annotations

import abc
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from miner.models import ENV_FILE, PROJECT_DIR, VENV_DIR, Probe, Project, RunResult, TestResult


def miner_env(site_packages: str = "") -> dict[str, str]:
    """The MINER_* variables every command of every backend sees (MINER_SITE_PACKAGES when known)."""
    env = {"MINER_PROJECT": PROJECT_DIR, "MINER_VENV": VENV_DIR, "MINER_PYTHON": f"{VENV_DIR}/bin/python",
           "MINER_ENV_FILE": ENV_FILE}
    if site_packages:
        env["MINER_SITE_PACKAGES"] = site_packages
    return env


# Bytes of names (test ids, paths) one command may carry: a sandbox runs its command as one
# argument of a shell, and Linux refuses a single argument over 128 kB.
COMMAND_BUDGET = 64_000


def word_chunks(words: list[str], budget: int = COMMAND_BUDGET,
                size: Callable[[str], int] = len) -> Iterator[list[str]]:
    """The words in order, cut into runs whose space-joined size (each word's `size`, as it will be
    written in the command) stays within budget; a longer word alone in its run."""
    chunk: list[str] = []
    total = 0
    for word in words:
        if chunk and total + size(word) + 1 > budget:
            yield chunk
            chunk, total = [], 0
        chunk.append(word)
        total += size(word) + 1
    if chunk:
        yield chunk


class SandboxError(Exception):
    """Base class of sandbox failures."""


ANSI_COLOUR = re.compile(r"\x1b\[[0-9;]*m")


class BuildError(SandboxError):
    """The project could not be built; `log` holds the tail of the build output. Shown (on every
    verb and as a skipped project's reason), it names its reason too: pip's own ERROR lines, npm's
    `npm error` lines (but its log's path), or else the last lines of the step's output."""

    def __init__(self, message: str, log: str = "") -> None:
        super().__init__(message)
        self.message, self.log = message, log

    def __str__(self) -> str:
        plain = ANSI_COLOUR.sub("", self.log)  # the Docker engine colours a build's stderr
        lines = [line.strip() for line in plain.strip().splitlines() if line.strip()]
        npm = [line for line in lines if line.startswith(("npm error", "npm ERR!")) and "complete log" not in line
               and "/_logs/" not in line]
        shown = [line for line in lines if line.startswith("ERROR:")][-2:] or npm[:3] or lines[-3:]
        return f"{self.message} | {' / '.join(line[:300] for line in shown)}" if shown else self.message


class BackendUnavailable(SandboxError):
    """The backend cannot run on this machine (no engine, no bwrap, ...)."""


@dataclass(frozen=True)
class Capabilities:
    """What a backend is, declared instead of probed for with getattr.

    scan_roots    the roots a break may touch: the answer-leak rule (6) looks for copies of what
                  a break changed under all of them
    scan_exclude  paths (shell patterns) under those roots that are never scanned: pseudo-filesystems,
                  miner's own scratch files, journals that are no copy of an answer
    network_cut   commands run with no network unless a step asks for it
    cow_forks     forks are copy-on-write (cheap) rather than full copies
    system        the backend sees and may break what lies beneath the project (shared libraries,
                  Debian packages, the interpreter, services): the system and service families
    """

    scan_roots: tuple[str, ...] = ("/sandbox",)
    scan_exclude: tuple[str, ...] = ("/sandbox/.miner",)
    network_cut: bool = True
    cow_forks: bool = False
    system: bool = False


@dataclass
class Limits:
    """Resource limits applied to every command."""

    timeout: float = 600.0  # seconds of wall time per command
    memory_mb: int = 4096
    processes: int = 1024
    cpus: float = 2.0


@dataclass
class BuildSpec:
    """What to install: produced by miner.ecosystems.build_spec from the project and its overrides."""

    python: str = "python3"  # interpreter used to create the venv
    install_script: str = ""  # shell script run in /sandbox/project with network on
    env: dict[str, str] = field(default_factory=dict)  # healthy environment variables
    limits: Limits = field(default_factory=Limits)


@dataclass
class Healthy:
    """A built healthy environment that can be forked (a workspace folder or an image)."""

    backend: str
    ref: str  # workspace path or image id
    project: Project
    site_packages: str = ""
    info: dict = field(default_factory=dict)


class Sandbox(abc.ABC):
    """A disposable copy of a healthy environment."""

    healthy: Healthy

    @abc.abstractmethod
    def run(self, command: str, *, network: bool = False, timeout: float | None = None) -> RunResult:
        """Run a command with `bash -c` inside, in $MINER_PROJECT: bash reads the environment from
        $BASH_ENV (~/.bashrc), as a harness's `bash -c` does."""

    @abc.abstractmethod
    def read(self, path: str) -> bytes | None:
        """Bytes of a file at a sandbox path, or None when it does not exist."""

    @abc.abstractmethod
    def put(self, path: str, data: bytes, mode: int = 0o644) -> None:
        """Write a file at a sandbox path (used for reports and helper scripts, not for breaks)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Remove everything this copy created."""

    def settle(self) -> None:
        """End every process the last command left running, keeping the files: the tests then run
        in a clean process space, as an exported task's verifier does. A backend whose commands
        each run in a process namespace of their own (the local one) has nothing to end."""

    @property
    def location(self) -> str:
        """A human-readable handle (folder or container id) for --keep."""
        return ""

    def shell(self) -> None:
        """Open an interactive shell inside (replay --shell)."""
        raise NotImplementedError

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Backend(abc.ABC):
    """A way to build and fork sandboxes."""

    name: str

    @property
    def capabilities(self) -> Capabilities:
        """What this backend is (see Capabilities)."""
        return Capabilities()

    @abc.abstractmethod
    def build(self, project: Project, spec: BuildSpec, workdir: Path) -> Healthy:
        """Build (or reuse) the healthy environment; raise BuildError on failure."""

    @abc.abstractmethod
    def fork(self, healthy: Healthy) -> Sandbox:
        """A fresh copy of the healthy environment."""

    def discard(self, healthy: Healthy) -> None:
        """Forget a healthy environment (its workspace or image)."""

    # What a backend sees beyond the project (a container's command, its ports, the system
    # beneath): derived checks, and an observation the inverters turn into targets. None here.
    def derived_probes(self, healthy: Healthy) -> list[Probe]:
        """Checks derived from the healthy environment itself (a container's CMD, HEALTHCHECK, ports)."""
        return []

    def run_derived_probes(self, sandbox: Sandbox, probes: list[Probe]) -> dict[str, TestResult]:
        """Results of the derived probes among `probes` on a sandbox."""
        return {}

    def observe(self, healthy: Healthy) -> dict | None:
        """What the backend sees beneath the project of a healthy environment, or None.

        Facts only (paths, names, versions, config keys and values, never file contents):
        miner.inverters.system decides what of it to break. Kept as HealthyState.system.
        """
        return None
