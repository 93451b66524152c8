"""miner's task verifier: scores one exported repair task and resists reward hacking.

Standalone on purpose: it is copied into every exported task's tests/ folder with its system half
(verifier_system.py, loaded by path), the guard (verifier_pytest.py), the probe runner and the
static boot tool (boot.c, compiled). It imports nothing of miner.

    boot score ... -- verifier.py ARGS   score the task (tests/test.sh runs this; see boot.c)
    verifier.py --collect                print the healthy manifest (at export time)

Who runs it. tests/test.sh execs the boot tool, which needs no file of the container: it kills
every stray process, checks the runtime list (the interpreter, the dynamic loader, its cache,
configuration and preload file, the libraries and standard-library modules this file imports,
the folders Python searches) against the healthy image, then runs this file with that
interpreter in isolated mode (-I -S -B, bytecode from a fresh folder), reads the verdict from a
pipe, kills every process again and writes the reward file itself, once. This file never
writes the reward when run that way (--verdict-fd).

Scoring. The verdict is 1 only when, in order:
  1. every module this file loaded is one the boot tool verified, and warm_up() imported all
     that scoring needs (no module is imported later, after untrusted code ran);
  2. the environment the tests run with is read, never sourced, from the sandbox's shell rc file
     (/sandbox/home/.bashrc, spec "env_file": what every shell of the solver reads, through
     ~/.profile and $BASH_ENV): `export NAME=value` and `unset NAME` lines, every other line only
     as the healthy file has it, and the other startup files may hold only healthy lines; every
     interpreter and runner variable (PYTHON*, PYTEST_*, PATH, LD_*) is held at its healthy value,
     and one the task's break set must be back at its healthy value (removed, not satisfied);
     BASH_ENV and ENV are dropped, so no shell the tests start reads a startup file;
  3. the bytecode Python would load for each source the task breaks the bytecode of (spec
     "bytecode_sources") is that source's: the tests below never read a cached .pyc, so a
     truncated or stale one must be found here, before the caches are deleted;
     then the system is back to its healthy state: every system root of the healthy manifest
     (interpreters' import paths, PATH, the venv, the loader's files and library folders,
     locale, time zones, CA bundle) matches, but for the names allowed to vary (bytecode caches,
     which are then deleted, and pip's reinstall metadata);
  4. the original test files are put back from tests/originals (sha256-checked),
  5. static checks pass: protected source files unchanged; no conftest.py, pytest config file
     or module shadowing the test runner or the standard library that the healthy project did
     not have; every .pth and
     sitecustomize/usercustomize file identical to the healthy manifest; pytest, pluggy and
     every pytest plugin byte-identical to the healthy ones; no new pytest11 entry point; the
     interpreter binary and pyvenv.cfg unchanged,
  6. pytest runs the F2P and P2P node ids under a guard plugin (verifier_pytest.py) that
     rejects unknown plugins and pytest internals patched at run time, with bytecode caches
     redirected to a fresh folder and sensitive variables (PYTEST_ADDOPTS, LD_PRELOAD, ...) held
     at their healthy values, without capabilities (`boot drop`),
  7. every expected test id is "passed" both in the junit XML and in the guard's own record
     (skipped, xfailed, deselected or missing all count as failures), and every derived probe
     behaves exactly as it did healthy;
  8. after the tests and probes every process they left is killed (`boot sweep`) and the system
     is still the healthy one (step 3 again), and no module was imported since step 1.

Processes are the boot tool's alone: it stops or kills everything of the agent's before this file
runs (see boot.c), and this file starts nothing that reads a file the agent could write as code:
no shell sources a startup file, the probe runner runs without site hooks (-I -S).
"""

from __future__ import annotations

import argparse
import configparser
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable

import _frozen_importlib_external as bootstrap  # frozen, like the builtin _imp: no file to verify
import _imp

HERE = os.path.dirname(os.path.abspath(__file__))
STARTED = time.monotonic()


def _load_system():
    """verifier_system.py, next to this file, loaded by its path (this folder is never on sys.path)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("miner_verifier_system", os.path.join(HERE, "verifier_system.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


system = _load_system()
RUNNER_DISTS = {"pytest", "pluggy", "iniconfig", "packaging", "py", "exceptiongroup", "tomli", "colorama"}
# Top-level names that, dropped in the project or on sys.path, would replace the test runner.
RUNNER_MODULES = ("pytest", "_pytest", "pluggy", "py", "iniconfig")
SHADOW_NAMES = (*RUNNER_MODULES, "sitecustomize", "usercustomize")
# A module of these names added to the project or a folder on PYTHONPATH would be imported instead
# of the standard library's by pytest or the tests (lazily, after the guard's snapshot).
STDLIB_NAMES = frozenset(sys.stdlib_module_names) - {"__future__"}
CUSTOMIZE = ("sitecustomize", "usercustomize")
PYTEST_CONFIGS = ("pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg")
SKIP_DIRS = {"__pycache__", ".pytest_cache", ".git", ".mypy_cache", ".tox", ".nox", ".hg", ".svn"}
# Held at their healthy values while the tests run (unless the task breaks that very variable).
SENSITIVE_ENV = (
    "PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTEST_DISABLE_PLUGIN_AUTOLOAD", "PYTHONSTARTUP",
    "PYTHONINSPECT", "PYTHONHOME", "PYTHONUSERBASE", "PYTHONEXECUTABLE", "PYTHONSAFEPATH",
    "PYTHONPLATLIBDIR", "PYTHONOPTIMIZE", "PYTHONDEBUG", "PYTHONWARNINGS", "PYTHONBREAKPOINT",
    "LD_PRELOAD", "LD_AUDIT", "LD_LIBRARY_PATH", "PYTHONDONTWRITEBYTECODE", "PYTHONPATH", "PATH",
)
HELD_PREFIXES = ("PYTHON", "PYTEST_", "LD_", "NODE_")  # every variable of these families is held too
NODE_REPORTER = "node_reporter.mjs"  # miner's reporter for node's test runner (spec "runner": "node")
TAPE_REPORTER = "tape_reporter.cjs"  # miner's reporter for tape, one node process a file (spec "runner": "tape")
MOCHA_REPORTER = "mocha_reporter.cjs"  # miner's reporter for mocha, one node process a file (spec "runner": "mocha")
# miner's jest (spec "runner": "jest"), in its own install (a NODE_TREE); its config always explicit
JEST_PROGRAM = "/sandbox/.miner-node/node_modules/jest/bin/jest.js"
JEST_FLAGS = ["--ci", "--no-cache", "--watchman=false", "--forceExit", "--maxWorkers=2", "--json"]
# The trees node loads a project's packages and miner's runner from: the project's node_modules, the
# folders above it (miner links tape into /sandbox/node_modules), node's global folders under $HOME,
# miner's own install of tape. As healthy, byte for byte (absent where the healthy image has none).
NODE_TREES = ("node_modules", "/sandbox/node_modules", "/node_modules", "/sandbox/home/.node_modules",
              "/sandbox/home/.node_libraries", "/sandbox/.miner-node")
NEVER_PASSED = ("BASH_ENV", "ENV")  # a shell the tests start reads no startup file
# The startup files besides the environment file (spec "env_file"): they may hold only healthy lines.
STARTUP_FILES = ("/sandbox/home/.profile", "/sandbox/home/.bash_profile", "/sandbox/home/.bash_login",
                 "/root/.bashrc", "/root/.profile", "/root/.bash_profile", "/root/.bash_login",
                 "/etc/profile", "/etc/bash.bashrc", "/etc/environment")
PROFILE_D = "/etc/profile.d"
REPORT_FLAGS = ["-o", "junit_family=xunit1", "-p", "no:cacheprovider", "-q", "--continue-on-collection-errors"]


# -- small helpers ------------------------------------------------------------------------------


def sha256_file(path: str) -> str | None:
    """sha256 of a regular file (not following a final symlink), or None."""
    try:
        if os.path.islink(path) or not os.path.isfile(path):
            return None
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        return digest.hexdigest()
    except OSError:
        return None


def entry_digest(path: str) -> str | None:
    """A file's sha256; for a symlink its target and the target's sha256; None when absent."""
    if os.path.islink(path):
        try:
            return f"link:{os.readlink(path)}:{sha256_file(os.path.realpath(path)) or '-'}"
        except OSError:
            return None
    return sha256_file(path)


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def load_json(path: str) -> dict:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def walk_files(root: str):
    """(relative path, absolute path) of every file or symlink under root, skipping cache dirs."""
    for folder, dirs, files in os.walk(root):
        links = [d for d in dirs if os.path.islink(os.path.join(folder, d))]
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and d not in links)
        for name in sorted(files + links):
            full = os.path.join(folder, name)
            yield os.path.relpath(full, root), full


# -- what the healthy environment looks like (shared by --collect and the checks) ---------------


def site_dirs(venv: str) -> list[str]:
    """The venv's site-packages folders (where .pth files are processed)."""
    lib = os.path.join(venv, "lib")
    found = []
    for parent in (lib, os.path.join(venv, "lib64")):
        if os.path.isdir(parent):
            for name in sorted(os.listdir(parent)):
                candidate = os.path.join(parent, name, "site-packages")
                if name.startswith("python") and os.path.isdir(candidate):
                    real = os.path.realpath(candidate)
                    if real not in found:
                        found.append(real)
    return found


def pth_files(dirs: list[str]) -> dict[str, str]:
    out = {}
    for folder in dirs:
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            if name.endswith(".pth"):
                full = os.path.join(folder, name)
                out[full] = entry_digest(full) or "unreadable"
    return out


def customize_files(dirs: list[str]) -> dict[str, str]:
    """sitecustomize/usercustomize modules, packages, bytecode or extensions in the given folders."""
    out = {}
    for folder in dirs:
        for sub in ("", "__pycache__"):
            base = os.path.join(folder, sub) if sub else folder
            try:
                names = os.listdir(base)
            except OSError:
                continue
            for name in names:
                stem = name.split(".", 1)[0]
                if stem in CUSTOMIZE:
                    full = os.path.join(base, name)
                    if os.path.isdir(full) and not os.path.islink(full):
                        for rel, inner in walk_files(full):
                            out[inner] = entry_digest(inner) or "unreadable"
                    else:
                        out[full] = entry_digest(full) or "unreadable"
    return out


def dist_infos(dirs: list[str]):
    """(canonical name, metadata folder) of each distribution in the given site folders."""
    for folder in dirs:
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        for name in names:
            if name.endswith((".dist-info", ".egg-info")):
                full = os.path.join(folder, name)
                if os.path.isdir(full):
                    yield canonical(name.rsplit(".", 1)[0].split("-")[0]), full


def pytest_entry_points(dirs: list[str]) -> dict[str, list[str]]:
    """{"name = module:attr": [metadata folders]} of every pytest11 entry point installed."""
    out: dict[str, list[str]] = {}
    for _, meta in dist_infos(dirs):
        path = os.path.join(meta, "entry_points.txt")
        if not os.path.isfile(path):
            continue
        parser = configparser.ConfigParser(interpolation=None, delimiters=("=",))
        parser.optionxform = str  # type: ignore[assignment,method-assign]
        try:
            parser.read(path, encoding="utf-8")
        except (configparser.Error, UnicodeDecodeError):
            out.setdefault(f"<unreadable {path}>", []).append(meta)
            continue
        if parser.has_section("pytest11"):
            for key, value in parser.items("pytest11"):
                out.setdefault(f"{key.strip()} = {value.strip()}", []).append(meta)
    return out


def record_files(meta: str) -> list[str]:
    """Absolute paths of the files a distribution's RECORD lists (bytecode excluded)."""
    record = os.path.join(meta, "RECORD")
    site = os.path.dirname(meta)
    files = []
    if os.path.isfile(record):
        with open(record, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                rel = line.rsplit(",", 2)[0].strip().strip('"')
                if rel and not rel.endswith(".pyc") and "__pycache__" not in rel:
                    files.append(os.path.normpath(os.path.join(site, rel)))
    else:  # an egg-info: installed-files.txt lists paths relative to the metadata folder
        listing = os.path.join(meta, "installed-files.txt")
        if os.path.isfile(listing):
            with open(listing, encoding="utf-8", errors="replace") as handle:
                files = [os.path.normpath(os.path.join(meta, ln.strip())) for ln in handle if ln.strip()]
    skip = {"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"}
    return [f for f in files if os.path.basename(f) not in skip and not f.endswith(".pyc")]


def runner_files(dirs: list[str]) -> dict[str, str]:
    """sha256 of every file of pytest, its dependencies and every distribution with a pytest plugin."""
    plugin_metas = {m for metas in pytest_entry_points(dirs).values() for m in metas}
    out = {}
    for name, meta in dist_infos(dirs):
        if name in RUNNER_DISTS or meta in plugin_metas:
            for path in record_files(meta):
                if os.path.isfile(path):
                    out[path] = sha256_file(path) or "unreadable"
            entry = os.path.join(meta, "entry_points.txt")
            if os.path.isfile(entry):
                out[entry] = sha256_file(entry) or "unreadable"
    return out


def project_files(project: str) -> dict[str, str]:
    return {rel: entry_digest(full) or "unreadable" for rel, full in walk_files(project)}


def outside_configs(project: str) -> list[str]:
    """conftest.py and pytest config files in the folders above the project (pytest reads those)."""
    found = []
    for folder in _ancestors(os.path.dirname(os.path.abspath(project))):
        for name in ("conftest.py", *PYTEST_CONFIGS):
            if os.path.lexists(os.path.join(folder, name)):
                found.append(os.path.join(folder, name))
    return found


def python_identity(path: str) -> dict[str, str | None]:
    real = os.path.realpath(path)
    return {"path": path, "real": real, "sha256": sha256_file(real)}


def undumpable() -> bool:
    """PR_SET_DUMPABLE 0 for this process: the tests run as root too, and a process of the same uid
    (no capability is needed when none is held) could otherwise attach to the verifier or write its
    memory. The boot tool is undumpable, but exec made this process dumpable again; until this
    call nothing but the boot tool's chain runs. False where ctypes is missing."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0) == 0  # PR_SET_DUMPABLE = 4
    except (ImportError, OSError, AttributeError):
        return False


def warm_up() -> None:
    """Run every code path scoring takes before the system check, so that each module it needs is
    imported now, from files the boot tool verified (at export: so that the runtime list holds them)."""
    undumpable()
    parse_junit(b'<testsuite><testcase classname="a.b" name="c" file="a/b.py"><failure/></testcase></testsuite>')
    json.loads(json.dumps({"a": [1, "b", None]}))
    parse_node_report(b'{"file": "/p/t.js", "names": ["x"], "passed": true}', "/p")
    hashlib.sha256(b"").hexdigest()
    configparser.ConfigParser(interpolation=None, delimiters=("=",)).read_string("[pytest11]\na = b\n")
    folder = tempfile.mkdtemp(prefix="miner-warm-")
    shutil.rmtree(folder)
    subprocess.run([sys.executable, "-I", "-S", "-c", ""], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                   stderr=subprocess.STDOUT, timeout=60)
    system.tree_digests(HERE)


def system_candidates(sys_path: list[str], venv: str, runtime: list[list[str]]) -> list[str]:
    """What may be a system root: import paths, PATH, the venv, the loader's files and folders, the
    folders of the libraries the runtime maps, the system family's files."""
    libraries = [os.path.dirname(p) for kind, _, p in runtime
                 if kind == "F" and re.search(r"\.so(\.[0-9]+)*$", p) and not p.startswith("/etc/")]
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    return [*sys_path, *sys.path, *path, venv, *system.LOADER_FILES, *system.loader_dirs(), *libraries,
            *system.SYSTEM_EXTRAS]


def node_trees(project: str) -> list[str]:
    """The NODE_TREES of a project (absolute paths)."""
    return [os.path.join(project, tree) for tree in NODE_TREES]


def startup_texts(env_file: str) -> dict[str, str | None]:
    """The text of every startup file (None where the image has none): the environment file, the
    others STARTUP_FILES names, and each file of /etc/profile.d."""
    paths = [env_file, *STARTUP_FILES]
    if os.path.isdir(PROFILE_D):
        paths += [os.path.join(PROFILE_D, n) for n in sorted(os.listdir(PROFILE_D))]
    texts: dict[str, str | None] = {}
    for path in paths:
        try:
            with open(path, encoding="utf-8", errors="surrogateescape") as handle:
                texts[path] = handle.read()
        except OSError:
            texts[path] = None
    return texts


def collect(args: argparse.Namespace) -> int:
    """Print the healthy manifest as JSON (run once per project at export, in a healthy container)."""
    venv, project = args.venv, args.project
    python = os.path.join(venv, "bin", "python")
    probe = subprocess.run(
        [python, "-c", "import json, site, sys; print(json.dumps([sys.path, site.getsitepackages()]))"],
        capture_output=True, text=True, cwd=project, timeout=120,
    )
    if probe.returncode != 0:
        print(probe.stdout + probe.stderr, file=sys.stderr)
        return 1
    sys_path, sites = json.loads(probe.stdout.strip().splitlines()[-1])
    sys_path = [os.path.realpath(p) for p in sys_path if p]
    sites = sorted({os.path.realpath(p) for p in sites if os.path.isdir(p)} | set(site_dirs(venv)))
    warm_up()
    skip = (HERE, project)
    keepalive = next((os.path.realpath(os.path.join(d, "sleep")) for d in ("/usr/bin", "/bin")
                      if os.path.isfile(os.path.join(d, "sleep"))), None)
    runtime = system.runtime_list(("/bin/bash", "/bin/sh"), keepalive, skip)
    startup, base = startup_texts(args.env_file), load_json(os.path.join(HERE, "base_env.json"))
    env = {k: v for k, v in os.environ.items() if k not in system.SHELL_OWN}
    try:  # the verifier reads this file without running it: it must read to what bash made of it
        read = system.read_environment(startup[args.env_file] or "", startup[args.env_file] or "", env, base)
    except system.EnvFileError as exc:
        print(f"the environment file {args.env_file} cannot be read without running it: {exc}", file=sys.stderr)
        return 1
    if read != env:
        differ = sorted(k for k in set(read) | set(env) if read.get(k) != env.get(k))
        print(f"the environment file {args.env_file} reads to other values than bash gives: {', '.join(differ)}",
              file=sys.stderr)
        return 1
    manifest = {
        "python": python_identity(python),
        "system_python": python_identity(sys.executable),
        "pyvenv_cfg": sha256_file(os.path.join(venv, "pyvenv.cfg")),
        "sys_path": sys_path,
        "site_dirs": sites,
        "pth": pth_files(sites),
        "customize": customize_files(sorted(set(sys_path) | set(sites) | {project})),
        "runner": runner_files(sites),
        "plugins": sorted(pytest_entry_points(sites)),
        "project": project_files(project),
        "env_full": env,
        "startup": startup,
        "base_env": base,
        "outside": outside_configs(project),
        "runtime": runtime,
        "system": system.system_manifest(system_candidates(sys_path, venv, runtime), skip),
        # the roots Python imports from: their bytecode caches are deleted before the tests
        "python_roots": system.system_roots([*sys_path, *sys.path, venv], skip),
        "node_trees": {root: system.tree_digests(root) for root in node_trees(project)},
    }
    json.dump(manifest, sys.stdout, sort_keys=True)
    return 0


# -- the checks -------------------------------------------------------------------------------------


class Verifier:
    """One scoring run: holds the task spec, the healthy manifest and what went wrong.

    `boot` is the static boot tool (commands run through `boot drop`), `verdict_fd` the pipe the
    boot tool reads the verdict from (without one, development runs write the reward file
    themselves), `kill` says this runs in a task container where stray processes are killed.
    """

    def __init__(self, spec: dict, manifest: dict, reward: str, kill: bool = False, boot: str | None = None,
                 verdict_fd: int | None = None) -> None:
        self.spec, self.manifest, self.reward_path, self.kill = spec, manifest, reward, kill
        self.boot, self.verdict_fd = boot, verdict_fd
        self.project, self.venv = spec["project_dir"], spec["venv_dir"]
        self.problems: list[str] = []
        self.env: dict[str, str] = {}
        self.work = tempfile.mkdtemp(prefix="miner-verify-")
        self.pycache = os.path.join(self.work, "pycache")
        runtime = system.read_runtime_list(os.path.join(HERE, "runtime.txt"))
        self.verified = {path for kind, _, path in runtime if kind in ("F", "K")}
        self.modules: set[str] = set()
        self.memo = system.Memo()  # the second system check rehashes only files whose inode changed
        self.laps: dict[str, float] = {}
        self.last_lap = STARTED
        self.skip = (HERE, self.project, os.path.dirname(os.path.abspath(reward)), self.work)

    def problem(self, text: str) -> None:
        self.problems.append(text)
        print(f"verifier: REJECT: {text}", flush=True)

    def dropped(self, argv: list[str]) -> list[str]:
        """argv run without capabilities and without new privileges, as in the sandboxes that
        validated the task (there, a root process cannot read a mode-000 file either)."""
        return [self.boot, "drop", "--", *argv] if self.boot else argv

    # reward files (development runs only: under the boot tool, it writes the reward)
    def write_reward(self, value: int) -> None:
        """Write the reward atomically, after removing anything that could shadow or redirect it."""
        folder = os.path.dirname(self.reward_path)
        os.makedirs(folder, exist_ok=True)
        tmp = self.reward_path + ".tmp"
        for path in (os.path.join(folder, "reward.json"), tmp):
            remove(path)
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(f"{value}\n")
        remove(self.reward_path)
        os.replace(tmp, self.reward_path)

    def kill_strays(self) -> None:
        """The boot tool's sweep (it stops the keep-alive and kills everything else but its
        ancestors): what the tests and probes left running."""
        if self.kill and self.boot:
            done = subprocess.run([self.boot, "sweep", "--list", os.path.join(HERE, "runtime.txt")],
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  timeout=120)
            print(done.stdout.decode("utf-8", "replace").strip(), flush=True)

    # step 1
    def check_modules(self, final: bool = False) -> None:
        """Every module loaded so far came from a file the boot tool verified; at the end, none
        was imported after warm_up (a later import could read a file the tests rewrote)."""
        files, _ = system.module_files(self.skip)
        if final:
            for path in sorted(set(files) - self.modules):
                self.problem(f"the verifier imported {path} after the tests ran")
            return
        self.modules = set(files)
        if self.verdict_fd is not None:
            for path in sorted(set(files) - self.verified):
                self.problem(f"the verifier loaded {path}, which the boot tool did not verify")

    # step 2
    def capture_env(self) -> None:
        """The variables the tests see: the environment file (spec "env_file", the ~/.bashrc every
        shell of the solver reads) applied to the healthy environment, read and never run."""
        path, startup = self.spec["env_file"], self.manifest.get("startup")
        if not startup or "env_full" not in self.manifest:
            self.problem("the healthy manifest has no startup files (export the task again)")
            return
        healthy_text = startup.get(path) or ""
        full, base = self.manifest["env_full"], self.manifest.get("base_env", {})
        healthy = system.read_environment(healthy_text, healthy_text, full, base)
        try:
            with open(path, encoding="utf-8", errors="surrogateescape") as handle:
                text = handle.read()
        except FileNotFoundError:
            text = ""
        except OSError as exc:
            self.problem(f"the environment file {path} cannot be read ({exc.strerror})")
            return
        try:
            self.env = system.read_environment(text, healthy_text, full, base)
        except system.EnvFileError as exc:
            self.problem(f"the environment file {path}, {exc}")
            return
        others = {p: startup.get(p) for p in startup if p != path}
        if os.path.isdir(PROFILE_D):
            others |= {os.path.join(PROFILE_D, n): startup.get(os.path.join(PROFILE_D, n))
                       for n in sorted(os.listdir(PROFILE_D))}
        for text_problem in system.startup_changes(others):
            self.problem(text_problem)
        broken = {self.spec.get("target_envvar"), *self.spec.get("broken_envvars", [])} - {None}
        for name in sorted(broken):
            if self.env.get(name) != healthy.get(name):
                now = "unset" if name not in self.env else f"{self.env[name]!r}"
                was = "unset" if name not in healthy else f"{healthy[name]!r}"
                self.problem(f"{name} is {now} in {path}, healthy it is {was}: the break's variable must be "
                             "put back, not worked around")
        held = set(SENSITIVE_ENV) | {n for n in (*self.env, *healthy) if n.startswith(HELD_PREFIXES)}
        for name in sorted(held - broken):
            if healthy.get(name) is None:
                self.env.pop(name, None)
            else:
                self.env[name] = healthy[name]
        for name in NEVER_PASSED:
            self.env.pop(name, None)
        self.env["PWD"] = self.project
        self.env["PYTHONNOUSERSITE"] = "1"
        # Bytecode only from a fresh folder: a forged __pycache__/*.pyc can never be loaded.
        self.env["PYTHONPYCACHEPREFIX"] = self.pycache

    # step 3, first part
    def check_bytecode(self) -> None:
        for source in self.spec.get("bytecode_sources", []):
            fault = bytecode_fault(source, self.dropped)
            if fault:
                self.problem(f"the bytecode python loads for {source} {fault}")

    # steps 3 and 8
    def check_system(self, when: str) -> None:
        """The system roots of the healthy manifest match (but for the names allowed to vary)."""
        healthy = self.manifest.get("system")
        if not healthy:
            self.problem("the healthy manifest has no system part (export the task again)")
            return
        start = time.monotonic()
        changes = system.system_changes(healthy, self.skip, self.memo)
        print(f"verifier: system checked {when} ({len(healthy)} roots) in {time.monotonic() - start:.2f}s", flush=True)
        for path in changes:
            self.problem(f"{when}, {path} differs from the healthy image (a system file was added, removed "
                         "or modified)")
        trees = self.manifest.get("node_trees")
        if trees is None:
            self.problem("the healthy manifest has no node_modules part (export the task again)")
            return
        for path in system.system_changes(trees, (), self.memo):
            self.problem(f"{when}, {path} differs from the healthy image (an installed Node package or the "
                         "test runner's files were added, removed or modified)")
        if not changes and when == "before the tests":
            system.clear_bytecode(self.manifest.get("python_roots", sorted(healthy)), self.skip)

    # step 4
    def restore_originals(self) -> None:
        for rel, info in sorted(self.spec["originals"].items()):
            src = os.path.join(HERE, "originals", rel)
            if sha256_file(src) != info["sha256"]:
                self.problem(f"the verifier's copy of {rel} is damaged")
                continue
            dst = os.path.join(self.project, rel)
            self._make_real_parents(dst)
            if os.path.lexists(dst):
                remove(dst)  # unlink, not overwrite: the file itself may have been made read-only
            shutil.copyfile(src, dst)
            os.chmod(dst, info.get("mode", 0o644))

    def _make_real_parents(self, path: str) -> None:
        """Create path's parent folders inside the project, replacing symlinks that lead elsewhere."""
        rel = os.path.relpath(os.path.dirname(path), self.project)
        current = self.project
        for part in [] if rel == "." else rel.split(os.sep):
            current = os.path.join(current, part)
            if os.path.islink(current) or (os.path.exists(current) and not os.path.isdir(current)):
                os.unlink(current)
            os.makedirs(current, exist_ok=True)
            if not os.access(current, os.W_OK | os.X_OK):
                os.chmod(current, os.stat(current).st_mode | 0o700)

    # step 5
    def check_protected(self) -> None:
        originals = self.spec["originals"]
        for rel, digest in sorted(self.spec["protected"].items()):
            if rel in originals:
                continue
            got = sha256_file(os.path.join(self.project, rel))
            if got is None:
                self.problem(f"protected file {rel} is missing or no longer a regular file")
            elif got != digest:
                self.problem(f"protected file {rel} was modified")

    def check_new_files(self) -> None:
        """conftest.py, pytest config files, runner-shadowing modules and files in a node_modules
        folder that the healthy tree lacked."""
        healthy = self.manifest["project"]
        watched = {"conftest.py", *PYTEST_CONFIGS}
        for rel, full in walk_files(self.project):
            name = os.path.basename(rel)
            stem = name.split(".", 1)[0]
            parts = rel.split(os.sep)
            module = name.endswith((".py", ".pyc", ".so", ".pth")) or os.path.isdir(full)
            # a package in a node_modules folder inside the project is loaded before the project's own
            suspicious = name in watched or name.startswith("conftest.") or (stem in SHADOW_NAMES and module) \
                or "node_modules" in parts[:-1] or "__mocks__" in parts[:-1] \
                or any(p in SHADOW_NAMES for p in parts[:-1]) or (stem in STDLIB_NAMES and module) \
                or (name == "__init__.py" and len(parts) > 1 and parts[-2] in STDLIB_NAMES)
            if suspicious and rel not in healthy:
                self.problem(f"{rel} was added to the project (the healthy project has no such file)")
        for path in outside_configs(self.project):
            if path not in self.manifest.get("outside", []):
                self.problem(f"{path} was added above the project (pytest would read it)")

    def check_site(self) -> None:
        healthy_sites = self.manifest["site_dirs"]
        sites = sorted(set(healthy_sites) | set(site_dirs(self.venv)))
        for path, digest in sorted(pth_files(sites).items()):
            expected = self.manifest["pth"].get(path)
            if expected is None:
                self.problem(f"{path} was added (a .pth file runs code at interpreter start)")
            elif expected != digest:
                self.problem(f"{path} was modified (a .pth file runs code at interpreter start)")
        pythonpath = [p for p in self.env.get("PYTHONPATH", "").split(os.pathsep) if p]
        dirs = set(self.manifest["sys_path"]) | set(sites) | {self.project}
        dirs |= {os.path.realpath(os.path.join(self.project, p)) for p in pythonpath}
        for path, digest in sorted(customize_files(sorted(dirs)).items()):
            if self.manifest["customize"].get(path) != digest:
                self.problem(f"{path} was added or modified (sitecustomize/usercustomize run at start)")
        for folder in sorted(dirs - set(self.manifest["sys_path"]) - {self.project}):
            try:
                names = sorted(os.listdir(folder))
            except OSError:
                continue
            for name in names:
                candidate = os.path.join(folder, name)
                if name.split(".", 1)[0] in (*RUNNER_MODULES, *STDLIB_NAMES) and candidate not in self.manifest["runner"]:
                    self.problem(f"{candidate} shadows the test runner or the standard library (a folder on "
                                 "PYTHONPATH)")

    def check_runner(self) -> None:
        runner = self.manifest["runner"]
        for path, digest in sorted(runner.items()):
            got = sha256_file(path)
            if got != digest:
                self.problem(f"test runner file {path} was {'removed' if got is None else 'modified'}")
        for folder in sorted({os.path.dirname(p) for p in runner if p.endswith(".py")}):
            try:
                names = os.listdir(folder)
            except OSError:
                continue
            for name in names:
                full = os.path.join(folder, name)
                if name.endswith((".py", ".pth", ".so")) and full not in runner \
                        and os.path.basename(folder) != "site-packages":
                    self.problem(f"{full} was added inside the test runner's packages")
        healthy_plugins = set(self.manifest["plugins"])
        sites = sorted(set(self.manifest["site_dirs"]) | set(site_dirs(self.venv)))
        for entry, metas in sorted(pytest_entry_points(sites).items()):
            if entry not in healthy_plugins:
                self.problem(f"pytest plugin entry point '{entry}' was added ({metas[0]})")

    def check_interpreter(self) -> None:
        healthy = self.manifest["python"]
        now = python_identity(healthy["path"])
        if now["real"] != healthy["real"] or now["sha256"] != healthy["sha256"]:
            self.problem(f"the venv interpreter {healthy['path']} was replaced")
        if sha256_file(os.path.join(self.venv, "pyvenv.cfg")) != self.manifest["pyvenv_cfg"]:
            self.problem(f"{self.venv}/pyvenv.cfg was modified")

    def static_checks(self) -> None:
        self.check_protected()
        self.check_new_files()
        self.check_site()
        self.check_runner()
        self.check_interpreter()

    # steps 6 and 7
    def run_tests(self, tests: list[str]) -> tuple[dict[str, list[str]], dict]:
        """(junit outcomes per node id, the guard's report) of one pytest run over `tests`."""
        if not tests:
            return {}, {"outcomes": {}, "violations": []}
        if self.spec.get("runner") == "node":
            return self.run_node_tests(tests)
        if self.spec.get("runner") == "tape":
            return self.run_tape_tests(tests)
        if self.spec.get("runner") == "mocha":
            return self.run_mocha_tests(tests)
        if self.spec.get("runner") == "jest":
            return self.run_jest_tests(tests)
        junit = os.path.join(self.work, "junit.xml")
        guard = os.path.join(self.work, "guard.json")
        allowed = os.path.join(self.work, "allowed.json")
        # The guard runs as a script from the fresh work folder: its folder is first on sys.path, and
        # HERE may hold modules planted before the upload (a /tests/json.py would shadow json).
        guard_script = os.path.join(self.work, "verifier_pytest.py")
        shutil.copyfile(os.path.join(HERE, "verifier_pytest.py"), guard_script)
        plugin_files = set(self.manifest["runner"]) | {guard_script}
        plugin_files |= {os.path.join(self.project, rel) for rel in self.spec["protected"]}
        plugin_files |= {os.path.join(self.project, rel) for rel in self.spec["originals"]}
        with open(allowed, "w", encoding="utf-8") as handle:
            json.dump({"plugin_files": sorted(os.path.realpath(p) for p in plugin_files),
                       "runner": sorted(os.path.realpath(p) for p in self.manifest["runner"])}, handle)
        argv = [self.manifest["python"]["path"], guard_script, guard, allowed, "--",
                *self.spec["pytest_args"], f"--junitxml={junit}", *REPORT_FLAGS, *tests]
        print(f"verifier: running {len(tests)} tests", flush=True)
        self.run_suite(argv)
        try:
            with open(junit, "rb") as handle:
                outcomes = parse_junit(handle.read())
        except (OSError, ET.ParseError) as exc:
            self.problem(f"no readable junit report ({exc})")
            outcomes = {}
        try:
            report = load_json(guard)
        except (OSError, ValueError) as exc:
            self.problem(f"the pytest guard wrote no report ({exc})")
            report = {"outcomes": {}, "violations": []}
        for violation in report.get("violations", []):
            self.problem(f"pytest guard: {violation}")
        return outcomes, report

    def run_suite(self, argv: list[str]) -> None:
        """Run the test runner without capabilities, in the project, with the environment read
        (never sourced), its output's end printed; past the spec's timeout it is a problem."""
        try:
            done = subprocess.run(self.dropped(argv), cwd=self.project, env=self.env, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=self.spec["timeout"])
            print(done.stdout.decode("utf-8", "replace")[-6000:], flush=True)
        except subprocess.TimeoutExpired:
            self.problem(f"the tests did not finish within {self.spec['timeout']}s")

    def run_node_tests(self, tests: list[str]) -> tuple[dict[str, list[str]], dict]:
        """node's test runner over the files of `tests`, its results written by miner's reporter
        (copied from this folder into the fresh work folder) as JSON lines: (outcomes per test id,
        the same as the guard's report: node runs no plugin of the project's to guard)."""
        node = self.node_program()
        if node is None:
            return {}, {"outcomes": {}, "violations": []}
        reporter, report = os.path.join(self.work, NODE_REPORTER), os.path.join(self.work, "node.jsonl")
        shutil.copyfile(os.path.join(HERE, NODE_REPORTER), reporter)
        files = sorted({t.split("::", 1)[0] for t in tests})
        argv = [node, *self.spec.get("node_args", []), f"--test-reporter={reporter}",
                f"--test-reporter-destination={report}", *files]
        print(f"verifier: running {len(tests)} tests (node's test runner, {len(files)} files)", flush=True)
        self.run_suite(argv)
        return self.node_outcomes(report, "node's test runner")

    def run_tape_tests(self, tests: list[str]) -> tuple[dict[str, list[str]], dict]:
        """tape over the files of `tests`, one node process a file under miner's reporter, which
        loads the healthy tape (/sandbox/node_modules, checked with the system)."""
        return self.run_file_by_file(TAPE_REPORTER, "tape", tests, self.spec.get("tape_preload", []))

    def run_mocha_tests(self, tests: list[str]) -> tuple[dict[str, list[str]], dict]:
        """mocha over the files of `tests`, one node process a file under miner's reporter, which
        runs the healthy mocha (/sandbox/node_modules, checked with the system) with the project's
        mocha config files unread."""
        return self.run_file_by_file(MOCHA_REPORTER, "mocha", tests, self.spec.get("mocha_args", []))

    def run_jest_tests(self, tests: list[str]) -> tuple[dict[str, list[str]], dict]:
        """miner's jest over the files of `tests` with the healthy config (spec "jest_config"), so no
        config file, package.json key or cache of the project's is read; its own JSON report turned
        into the reporters' JSON lines (jest_lines)."""
        node = self.node_program()
        if node is None:
            return {}, {"outcomes": {}, "violations": []}
        report = os.path.join(self.work, "jest.json")
        config = {**self.spec.get("jest_config", {}), "cacheDirectory": os.path.join(self.work, "jest-cache")}
        files = sorted({t.split("::", 1)[0] for t in tests})
        print(f"verifier: running {len(tests)} tests (jest, {len(files)} files)", flush=True)
        self.run_suite([node, JEST_PROGRAM, *JEST_FLAGS, "--config", json.dumps(config), f"--outputFile={report}",
                        "--runTestsByPath", *files])
        return self.node_outcomes(report, "jest", lambda data: jest_lines(data, self.project))

    def run_file_by_file(self, reporter_name: str, label: str, tests: list[str],
                         args: list[str]) -> tuple[dict[str, list[str]], dict]:
        """`node REPORTER REPORT FILE ARGS...` for each file of `tests`, the reporter copied into the
        fresh work folder, appending JSON lines as node's reporter does."""
        node = self.node_program()
        if node is None:
            return {}, {"outcomes": {}, "violations": []}
        reporter, report = os.path.join(self.work, reporter_name), os.path.join(self.work, f"{label}.jsonl")
        shutil.copyfile(os.path.join(HERE, reporter_name), reporter)
        files = sorted({t.split("::", 1)[0] for t in tests})
        print(f"verifier: running {len(tests)} tests ({label}, {len(files)} files)", flush=True)
        for file in files:
            self.run_suite([node, reporter, report, file, *args])
        return self.node_outcomes(report, f"{label}'s reporter")

    def node_program(self) -> str | None:
        node = shutil.which("node", path=self.env.get("PATH", ""))
        if node is None:
            self.problem("node is not on the healthy PATH")
        return node

    def node_outcomes(self, report: str, writer: str,
                      lines: Callable[[bytes], bytes] = lambda data: data) -> tuple[dict[str, list[str]], dict]:
        """(outcomes per test id from a reporter's JSON lines, the same as the guard's report: node
        runs no plugin of the project's to guard); `lines` turns a runner's own report into them."""
        try:
            with open(report, "rb") as handle:
                outcomes = parse_node_report(lines(handle.read()), self.project)
        except OSError as exc:
            self.problem(f"{writer} wrote no report ({exc})")
            outcomes = {}
        return outcomes, {"outcomes": {k: v[0] for k, v in outcomes.items()}, "violations": []}

    def run_probes(self, probes: list[dict]) -> dict[str, dict]:
        if not probes:
            return {}
        listing = os.path.join(self.work, "probes.json")
        with open(listing, "w", encoding="utf-8") as handle:
            json.dump(probes, handle)
        # -S: no site folder's .pth or sitecustomize runs in the probe runner (it needs only the stdlib)
        argv = [sys.executable, "-I", "-S", "-X", f"pycache_prefix={self.pycache}", os.path.join(HERE, "probe.py"),
                listing]
        if self.manifest.get("image"):  # a Dockerized project: its CMD, ports and HEALTHCHECK
            argv.append(os.path.join(self.work, "image.json"))
            with open(argv[-1], "w", encoding="utf-8") as handle:
                json.dump(self.manifest["image"], handle)
        try:
            done = subprocess.run(self.dropped(argv), cwd=self.project, env=self.env, stdin=subprocess.DEVNULL,
                                  capture_output=True, timeout=600)
            return json.loads(done.stdout.decode("utf-8", "replace").strip().splitlines()[-1])
        except (OSError, ValueError, IndexError, subprocess.TimeoutExpired) as exc:
            self.problem(f"the derived probes did not run ({exc})")
            return {}

    # the whole run
    def score(self) -> int:
        self.check_modules()
        if self.verdict_fd is None:
            self.write_reward(0)
        self.lap("start")
        self.capture_env()
        self.lap("environment")
        self.check_bytecode()
        self.check_system("before the tests")
        self.lap("system")
        self.restore_originals()
        self.static_checks()  # even on a changed system: each problem named helps the reader
        self.lap("static checks")
        if self.problems:
            return self.finish({})
        expected = self.spec["f2p"] + self.spec["p2p"]
        tests = [t for t in expected if not t.startswith("probe::")]
        junit, guard = self.run_tests(tests)
        self.lap("tests")
        probes = [p for p in self.spec["probes"] if p["id"] in set(expected)]
        raw = self.run_probes(probes)
        self.lap("probes")
        self.kill_strays()
        self.check_system("after the tests")
        self.check_modules(final=True)
        self.lap("system again")
        return self.finish(self.verdicts(tests, probes, junit, guard, raw))

    def lap(self, phase: str) -> None:
        """Seconds since the last lap, by phase (printed at the end: what verifying costs)."""
        now = time.monotonic()
        self.laps[phase] = round(now - self.last_lap, 2)
        self.last_lap = now

    def verdicts(self, tests: list[str], probes: list[dict], junit: dict[str, list[str]], guard: dict,
                 raw: dict[str, dict]) -> dict[str, str]:
        """"passed" or what else happened, for every expected test id and probe."""
        verdicts: dict[str, str] = {}
        for test_id in tests:
            seen = junit.get(test_id, ["missing"])
            guarded = guard.get("outcomes", {}).get(test_id, "missing")
            bad = [o for o in seen if o != "passed"]
            verdicts[test_id] = bad[0] if bad else ("passed" if guarded == "passed" else f"{guarded} (guard)")
        for probe in probes:
            got = raw.get(probe["id"])
            same = got is not None and got["exit"] == probe["expected_exit"] and (
                probe.get("expected_digest") is None or got["digest"] == probe["expected_digest"])
            verdicts[probe["id"]] = "passed" if same else ("missing" if got is None else f"failed (exit {got['exit']})")
        for test_id in self.spec["f2p"] + self.spec["p2p"]:
            verdicts.setdefault(test_id, "missing")
        return verdicts

    def finish(self, verdicts: dict[str, str]) -> int:
        failing = {k: v for k, v in verdicts.items() if v != "passed"}
        ok = not self.problems and bool(verdicts) and not failing
        for test_id in self.spec["f2p"] + self.spec["p2p"]:
            kind = "F2P" if test_id in self.spec["f2p"] else "P2P"
            print(f"verifier: {kind} {verdicts.get(test_id, 'not run'):<12} {test_id}")
        report = {"reward": int(ok), "problems": self.problems, "outcomes": verdicts, "task": self.spec.get("task_id")}
        try:
            verdict = os.path.join(os.path.dirname(self.reward_path), "verdict.json")
            remove(verdict)
            with open(verdict, "w", encoding="utf-8") as handle:
                json.dump(report, handle, indent=1)
        except OSError:
            pass
        summary = "PASS" if ok else f"FAIL ({len(self.problems)} problem(s), {len(failing)} failing check(s))"
        print("verifier: seconds by phase: " + ", ".join(f"{k} {v}" for k, v in self.laps.items()))
        print(f"verifier: verdict {int(ok)}: {summary}", flush=True)
        shutil.rmtree(self.work, ignore_errors=True)
        self.conclude(ok)
        return 0

    def conclude(self, ok: bool) -> None:
        """Hand the verdict over: to the boot tool's pipe (it writes the reward) or, in a development
        run without it, to the reward file."""
        if self.verdict_fd is None:
            self.write_reward(1 if ok else 0)
            return
        os.write(self.verdict_fd, b"1\n" if ok else b"0\n")
        os.close(self.verdict_fd)
        self.verdict_fd = -1


def remove(path: str) -> None:
    """Remove a file, symlink or folder if present."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        os.unlink(path)


# Run in a child interpreter: unmarshalling untrusted bytes may crash the process that does it.
SAME_CODE = """
import marshal, sys
pyc, source = sys.argv[1:]
with open(pyc, "rb") as handle:
    data = handle.read()[16:]
try:
    code = marshal.loads(data)
except Exception as exc:
    print("cannot be read:", exc)
    raise SystemExit(0)
text = sys.stdin.buffer.read()  # the source, as the verifier read it
try:
    fresh = compile(text, source, "exec", dont_inherit=True)
except Exception:
    fresh = code
print("same" if code == fresh else "is not compiled from it: python runs other code than the source says")
"""


def bytecode_fault(source: str, wrap=lambda argv: argv) -> str | None:  # noqa: ANN001
    """What is wrong with the cached bytecode Python would load for `source` instead of compiling
    it (as importlib decides: magic number, flags, time stamp and size or source hash), or None
    when there is none, Python would ignore it, or it holds exactly the source's code. `wrap`
    makes the argv of the child that reads the bytecode (the verifier drops its privileges)."""
    try:
        with open(source, "rb") as handle:
            data = handle.read()
        info = os.stat(source)
        # where the tests' python looks (this one runs with a pycache_prefix: cache_from_source would say there)
        folder, name = os.path.split(source)
        pyc = os.path.join(folder, "__pycache__", f"{os.path.splitext(name)[0]}.{sys.implementation.cache_tag}.pyc")
        with open(pyc, "rb") as handle:
            cached = handle.read(16)
    except (OSError, ValueError):
        return None
    flags = int.from_bytes(cached[4:8], "little")
    if len(cached) < 16 or cached[:4] != bootstrap.MAGIC_NUMBER or flags & ~0b11:
        return None  # importlib compiles the source instead
    if flags & 1:
        checked = (flags & 2 and _imp.check_hash_based_pycs != "never") or _imp.check_hash_based_pycs == "always"
        if checked and cached[8:16] != _imp.source_hash(bootstrap._RAW_MAGIC_NUMBER, data):
            return None
    elif (int.from_bytes(cached[8:12], "little") != int(info.st_mtime) & 0xFFFFFFFF
          or int.from_bytes(cached[12:16], "little") != info.st_size & 0xFFFFFFFF):
        return None
    try:
        done = subprocess.run(wrap([sys.executable, "-I", "-S", "-B", "-c", SAME_CODE, pyc, source]),
                              input=data, capture_output=True, timeout=60, cwd="/")
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"({pyc}) could not be compared with it: {exc}"
    said = done.stdout.decode(errors="replace").strip()
    if said == "same":
        return None
    return f"({pyc}) {said or 'crashed the interpreter reading it (exit ' + str(done.returncode) + ')'}"


def _ancestors(path: str) -> list[str]:
    out, current = [], os.path.abspath(path)
    while True:
        out.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            return out
        current = parent


# -- node's test runner (the same id rules as miner.ecosystems.node.runner) ----------------------------


def jest_lines(data: bytes, project: str) -> bytes:
    """jest's JSON report as the reporters' JSON lines (the rule of miner.ecosystems.node.jest): one
    a test, one for a file that failed before its tests ran (its first error line)."""
    try:
        report = json.loads(data)
    except ValueError:
        return b""
    out = []
    for suite in report.get("testResults") or [] if isinstance(report, dict) else []:
        file = str(suite.get("name") or "<no file>")
        tests = suite.get("assertionResults") or []
        if not tests and suite.get("status") == "failed":
            out.append({"file": file, "names": [file], "passed": False})
        for test in tests:
            status = str(test.get("status"))
            out.append({"file": file, "names": [file, *map(str, test.get("ancestorTitles") or []), str(test.get("title"))],
                        "passed": status == "passed", "skip": status in ("pending", "skipped", "disabled"),
                        "todo": status == "todo"})
    return "".join(json.dumps(entry) + "\n" for entry in out).encode()


def parse_node_report(data: bytes, project: str) -> dict[str, list[str]]:
    """Outcomes per test id (file::suite::test) from node_reporter.mjs's JSON lines; suites left out."""
    outcomes: dict[str, list[str]] = {}
    for line in data.decode("utf-8", "replace").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if not isinstance(event, dict) or event.get("kind") == "suite" or not event.get("names"):
            continue
        file = event.get("file") or "<no file>"
        rel = os.path.relpath(file, project) if file.startswith(project.rstrip("/") + "/") else file.lstrip("/")
        names = [n for n in event["names"] if n != event.get("file")]
        outcome = ("skipped" if event.get("skip") or event.get("todo") else
                   "passed" if event.get("passed") else "failed")
        outcomes.setdefault("::".join([rel, *names]), []).append(outcome)
    return outcomes


# -- junit XML (the same node-id rules as miner.testing) ---------------------------------------------


def _module_of(path: str) -> str:
    return re.sub(r"\.py$", "", path).replace("/", ".")


def _split_classname(classname: str, file: str | None, modules: dict[str, str]) -> tuple[str, str]:
    if file and (classname == _module_of(file) or classname.startswith(_module_of(file) + ".")):
        return file, classname[len(_module_of(file)) + 1:]
    known = [m for m in modules if classname == m or classname.startswith(m + ".")]
    if known:
        module = max(known, key=len)
        return modules[module], classname[len(module) + 1:]
    parts = classname.split(".")
    cut = next((i for i, p in enumerate(parts) if p[:1].isupper()), len(parts))
    return "/".join(parts[:cut]) + ".py", ".".join(parts[cut:])


def node_id(classname: str, name: str, file: str | None, modules: dict[str, str]) -> str:
    if not classname:
        return file or name.replace(".", "/") + ".py"
    path, classes = _split_classname(classname, file, modules)
    return "::".join([path, *[c for c in classes.split(".") if c], name])


def parse_junit(data: bytes) -> dict[str, list[str]]:
    """Every outcome recorded for each node id (a teardown error adds a second entry)."""
    root = ET.fromstring(data)
    cases = list(root.iter("testcase"))
    modules = {}
    for case in cases:
        file, classname = case.get("file"), case.get("classname", "")
        if file and classname and (classname == _module_of(file) or classname.startswith(_module_of(file) + ".")):
            modules[_module_of(file)] = file
    out: dict[str, list[str]] = {}
    for case in cases:
        test_id = node_id(case.get("classname", ""), case.get("name", ""), case.get("file"), modules)
        outcome = "passed"
        for tag, name in (("failure", "failed"), ("error", "error"), ("skipped", "skipped")):
            if case.find(tag) is not None:
                outcome = name
                break
        out.setdefault(test_id, []).append(outcome)
    return out


# -- entry point --------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reward", default="/logs/verifier/reward.txt")
    parser.add_argument("--collect", action="store_true", help="print the healthy manifest and exit")
    parser.add_argument("--project", default="/sandbox/project")
    parser.add_argument("--venv", default="/sandbox/venv")
    parser.add_argument("--env-file", default="/sandbox/home/.bashrc")
    parser.add_argument("--verdict-fd", type=int, default=None, help="write the verdict (1 or 0) to this pipe")
    parser.add_argument("--boot", default=None, help="the static boot tool (commands run through `boot drop`)")
    parser.add_argument("--kill", action="store_true", help="kill stray processes (inside a task container)")
    args = parser.parse_args(argv)
    if args.collect:
        return collect(args)
    warm_up()
    verifier = None
    try:
        verifier = Verifier(load_json(os.path.join(HERE, "spec.json")), load_json(os.path.join(HERE, "manifest.json")),
                            args.reward, kill=args.kill, boot=args.boot, verdict_fd=args.verdict_fd)
        return verifier.score()
    except Exception as exc:  # any error scores 0
        print(f"verifier: error: {type(exc).__name__}: {exc}", flush=True)
        if verifier is not None and verifier.verdict_fd != -1:
            try:
                verifier.conclude(False)
            except OSError:
                pass
        return 0


if __name__ == "__main__":
    sys.exit(main())
