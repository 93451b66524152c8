"""miner's task verifier: scores one exported repair task and resists reward hacking.

Standalone on purpose: it is copied into every exported task's tests/ folder and runs inside the
task's container with the system interpreter in isolated mode (`/usr/bin/python3 -I -S`), so
nothing the agent put in the project's venv (a .pth file, sitecustomize, a patched pytest) runs
inside the verifier itself. It imports nothing of miner.

    verifier.py --reward /logs/verifier/reward.txt     score the task (tests/test.sh does this)
    verifier.py --collect                              print the healthy manifest (at export time)

Scoring. The reward file holds 0 from the first moment; it becomes 1 only when, in order:
  1. stray processes the agent left running are killed (a loop rewriting reward.txt is one),
  2. the environment the tests run with is taken by sourcing the sandbox's shell rc file
     (/sandbox/home/.bashrc, spec "env_file": what every shell of the solver reads, through
     ~/.profile and $BASH_ENV) in a throwaway shell (so anything that file does to the disk
     happens *before* the checks below),
  3. the original test files are put back from tests/originals (sha256-checked),
  4. static checks pass: protected source files unchanged; no conftest.py, pytest config file
     or module shadowing the test runner that the healthy project did not have; every .pth and
     sitecustomize/usercustomize file identical to the healthy manifest; pytest, pluggy and
     every pytest plugin byte-identical to the healthy ones; no new pytest11 entry point; the
     interpreter binary and pyvenv.cfg unchanged,
  5. pytest runs the F2P and P2P node ids under a guard plugin (verifier_pytest.py) that
     rejects unknown plugins and pytest internals patched at run time, with bytecode caches
     redirected to a fresh folder (a forged .pyc cannot be loaded) and sensitive variables
     (PYTEST_ADDOPTS, LD_PRELOAD, ...) held at their healthy values,
  6. every expected test id is "passed" both in the junit XML and in the guard's own record
     (skipped, xfailed, deselected or missing all count as failures), and every derived probe
     behaves exactly as it did healthy.
"""

from __future__ import annotations

import argparse
import configparser
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
RUNNER_DISTS = {"pytest", "pluggy", "iniconfig", "packaging", "py", "exceptiongroup", "tomli", "colorama"}
# Top-level names that, dropped in the project or on sys.path, would replace the test runner.
RUNNER_MODULES = ("pytest", "_pytest", "pluggy", "py", "iniconfig")
SHADOW_NAMES = (*RUNNER_MODULES, "sitecustomize", "usercustomize")
CUSTOMIZE = ("sitecustomize", "usercustomize")
PYTEST_CONFIGS = ("pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg")
SKIP_DIRS = {"__pycache__", ".pytest_cache", ".git", ".mypy_cache", ".tox", ".nox", ".hg", ".svn"}
# Held at their healthy values while the tests run (unless the task breaks that very variable).
SENSITIVE_ENV = (
    "PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTEST_DISABLE_PLUGIN_AUTOLOAD", "PYTHONSTARTUP",
    "PYTHONINSPECT", "PYTHONHOME", "PYTHONUSERBASE", "PYTHONEXECUTABLE", "PYTHONSAFEPATH",
    "PYTHONPLATLIBDIR", "PYTHONOPTIMIZE", "PYTHONDEBUG", "PYTHONWARNINGS", "PYTHONBREAKPOINT",
    "LD_PRELOAD", "LD_AUDIT", "BASH_ENV", "ENV", "PYTHONDONTWRITEBYTECODE",
)
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
        "env": {name: os.environ.get(name) for name in SENSITIVE_ENV},
        "outside": outside_configs(project),
        "sleep_sha256": binary_sha("sleep"),
    }
    json.dump(manifest, sys.stdout, sort_keys=True)
    return 0


# -- processes ------------------------------------------------------------------------------------


def drop_privileges() -> None:
    """preexec_fn: no capabilities and no new privileges, as in the sandboxes that validated the task.

    Both sandbox backends run every command with all capabilities dropped, so a root process there
    cannot read a mode-000 file; the tests must run the same way here.
    """
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
    for cap in range(64):
        libc.prctl(24, cap, 0, 0, 0)  # PR_CAPBSET_DROP: uid 0 gets only the bounding set at exec
    libc.prctl(47, 4, 0, 0, 0)  # PR_CAP_AMBIENT_CLEAR_ALL


def in_container() -> bool:
    return os.path.exists("/.dockerenv") or os.path.exists("/run/.containerenv")


def _ppid(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def _harmless(pid: int, sleep_sha: str | None) -> bool:
    """A plain `sleep` (the container's keep-alive command under `sh -c`): its binary is the healthy one."""
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return False
    if os.path.basename(exe) != "sleep" or sleep_sha is None:
        return False
    try:  # /proc/PID/exe opens the binary the process really runs, even if the file was replaced
        with open(f"/proc/{pid}/exe", "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest() == sleep_sha
    except OSError:
        return False


def kill_strays(sleep_sha: str | None = None) -> int:
    """Kill every process of the container but PID 1, this process's ancestors and plain sleeps.

    Only inside a container: on a host this would kill unrelated work. Harbor keeps its
    container alive with `sh -c "sleep infinity"`: killing that sleep would stop the container.
    """
    if not in_container():
        return 0
    keep, pid = {1}, os.getpid()
    while pid > 0 and pid not in keep:
        keep.add(pid)
        pid = _ppid(pid)
    killed = 0
    for _ in range(5):  # processes may fork while we kill: repeat until none is left
        found = []
        for pid in (int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) not in keep):
            if _harmless(pid, sleep_sha):
                keep.add(pid)
            else:
                found.append(pid)
        if not found:
            break
        for victim in found:
            try:
                os.kill(victim, signal.SIGKILL)
                killed += 1
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.2)
    return killed


def binary_sha(name: str) -> str | None:
    """sha256 of a program found in the usual system folders."""
    for folder in ("/usr/bin", "/bin", "/usr/local/bin"):
        digest = sha256_file(os.path.realpath(os.path.join(folder, name)))
        if digest:
            return digest
    return None


# -- the checks -------------------------------------------------------------------------------------


class Verifier:
    """One scoring run: holds the task spec, the healthy manifest and what went wrong."""

    def __init__(self, spec: dict, manifest: dict, reward: str, kill: bool = True, summary_line: bool = False) -> None:
        self.spec, self.manifest, self.reward_path, self.kill = spec, manifest, reward, kill
        self.summary_line = summary_line
        self.project, self.venv = spec["project_dir"], spec["venv_dir"]
        self.problems: list[str] = []
        self.env: dict[str, str] = {}
        self.work = tempfile.mkdtemp(prefix="miner-verify-")

    def problem(self, text: str) -> None:
        self.problems.append(text)
        print(f"verifier: REJECT: {text}", flush=True)

    # reward files
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

    def kill_strays(self) -> int:
        return kill_strays(self.manifest.get("sleep_sha256")) if self.kill else 0

    # step 2
    def capture_env(self) -> None:
        """The variables the tests see: this exec's environment plus what the rc file (spec "env_file",
        the ~/.bashrc every shell of the solver reads) sets."""
        dump = os.path.join(self.work, "env.json")
        script = (
            f'source {shlex_quote(self.spec["env_file"])} >/dev/null 2>&1 </dev/null; '
            f'cd {shlex_quote(self.project)} 2>/dev/null; '
            f'exec {shlex_quote(sys.executable)} -I -S -c '
            f'"import json, os, sys; json.dump(dict(os.environ), open(sys.argv[1], \'w\'))" {shlex_quote(dump)}'
        )
        try:
            subprocess.run(["/bin/bash", "--noprofile", "--norc", "-c", script], env=dict(os.environ),
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           timeout=120, cwd="/", preexec_fn=drop_privileges)
            self.env = load_json(dump)
        except (OSError, ValueError, subprocess.TimeoutExpired) as exc:
            self.problem(f"could not read the environment from {self.spec['env_file']}: {exc}")
            return
        healthy = self.manifest.get("env", {})
        target = self.spec.get("target_envvar")
        for name in SENSITIVE_ENV:
            if name == target:
                continue
            if healthy.get(name) is None:
                self.env.pop(name, None)
            else:
                self.env[name] = healthy[name]
        self.env["PYTHONNOUSERSITE"] = "1"
        # Bytecode only from a fresh folder: a forged __pycache__/*.pyc can never be loaded.
        self.env["PYTHONPYCACHEPREFIX"] = os.path.join(self.work, "pycache")

    # step 3
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

    # step 4
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
        """conftest.py, pytest config files and runner-shadowing modules the healthy tree lacked."""
        healthy = self.manifest["project"]
        watched = {"conftest.py", *PYTEST_CONFIGS}
        for rel, full in walk_files(self.project):
            name = os.path.basename(rel)
            stem = name.split(".", 1)[0]
            suspicious = name in watched or name.startswith("conftest.") or (
                stem in SHADOW_NAMES and (name.endswith((".py", ".pyc", ".so", ".pth")) or os.path.isdir(full)))
            parts = rel.split(os.sep)
            suspicious = suspicious or any(p in SHADOW_NAMES for p in parts[:-1])
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
            for name in RUNNER_MODULES:
                for candidate in (os.path.join(folder, name), os.path.join(folder, name + ".py")):
                    if os.path.lexists(candidate) and candidate not in self.manifest["runner"]:
                        self.problem(f"{candidate} shadows the test runner (a folder on PYTHONPATH)")

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

    # step 5
    def run_tests(self, tests: list[str]) -> tuple[dict[str, list[str]], dict]:
        """(junit outcomes per node id, the guard's report) of one pytest run over `tests`."""
        if not tests:
            return {}, {"outcomes": {}, "violations": []}
        junit = os.path.join(self.work, "junit.xml")
        guard = os.path.join(self.work, "guard.json")
        allowed = os.path.join(self.work, "allowed.json")
        plugin_files = set(self.manifest["runner"]) | {os.path.join(HERE, "verifier_pytest.py")}
        plugin_files |= {os.path.join(self.project, rel) for rel in self.spec["protected"]}
        plugin_files |= {os.path.join(self.project, rel) for rel in self.spec["originals"]}
        with open(allowed, "w", encoding="utf-8") as handle:
            json.dump({"plugin_files": sorted(os.path.realpath(p) for p in plugin_files),
                       "runner": sorted(os.path.realpath(p) for p in self.manifest["runner"])}, handle)
        argv = [self.manifest["python"]["path"], os.path.join(HERE, "verifier_pytest.py"), guard, allowed, "--",
                *self.spec["pytest_args"], f"--junitxml={junit}", *REPORT_FLAGS, *tests]
        print(f"verifier: running {len(tests)} tests", flush=True)
        try:
            done = subprocess.run(argv, cwd=self.project, env=self.env, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  timeout=self.spec["timeout"], preexec_fn=drop_privileges)
            print(done.stdout.decode("utf-8", "replace")[-6000:], flush=True)
        except subprocess.TimeoutExpired:
            self.problem(f"the tests did not finish within {self.spec['timeout']}s")
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

    def run_probes(self, probes: list[dict]) -> dict[str, dict]:
        if not probes:
            return {}
        listing = os.path.join(self.work, "probes.json")
        with open(listing, "w", encoding="utf-8") as handle:
            json.dump(probes, handle)
        argv = [sys.executable, "-I", os.path.join(HERE, "probe.py"), listing]
        if self.manifest.get("image"):  # a Dockerized project: its CMD, ports and HEALTHCHECK
            argv.append(os.path.join(self.work, "image.json"))
            with open(argv[-1], "w", encoding="utf-8") as handle:
                json.dump(self.manifest["image"], handle)
        try:
            done = subprocess.run(argv, cwd=self.project,
                                  env=self.env, stdin=subprocess.DEVNULL, capture_output=True, timeout=600,
                                  preexec_fn=drop_privileges)
            return json.loads(done.stdout.decode("utf-8", "replace").strip().splitlines()[-1])
        except (OSError, ValueError, IndexError, subprocess.TimeoutExpired) as exc:
            self.problem(f"the derived probes did not run ({exc})")
            return {}

    # the whole run
    def score(self) -> int:
        spec = self.spec
        killed = self.kill_strays()
        if killed:
            print(f"verifier: killed {killed} process(es) left running in the container", flush=True)
        self.write_reward(0)
        self.capture_env()
        self.kill_strays()  # whatever the rc file started
        self.restore_originals()
        self.static_checks()
        if self.problems:
            return self.finish({})
        expected = spec["f2p"] + spec["p2p"]
        tests = [t for t in expected if not t.startswith("probe::")]
        junit, guard = self.run_tests(tests)
        probes = [p for p in spec["probes"] if p["id"] in set(expected)]
        raw = self.run_probes(probes)
        self.kill_strays()
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
        for test_id in expected:
            verdicts.setdefault(test_id, "missing")
        return self.finish(verdicts)

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
        self.write_reward(1 if ok else 0)
        summary = "PASS" if ok else f"FAIL ({len(self.problems)} problem(s), {len(failing)} failing check(s))"
        print(f"verifier: reward {int(ok)}: {summary}", flush=True)
        if self.summary_line:
            print("=" * 27 + " short test summary info " + "=" * 28)
            print(f"{'PASSED' if ok else 'FAILED'} tests/verifier.py::test_environment_repaired", flush=True)
        shutil.rmtree(self.work, ignore_errors=True)
        return 0


def remove(path: str) -> None:
    """Remove a file, symlink or folder if present."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        os.unlink(path)


def shlex_quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def _ancestors(path: str) -> list[str]:
    out, current = [], os.path.abspath(path)
    while True:
        out.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            return out
        current = parent


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
    parser.add_argument("--no-kill", action="store_true", help="leave other processes alone (TB1's tmux)")
    parser.add_argument("--summary-line", action="store_true",
                        help="end with a pytest-style PASSED/FAILED summary line (TB1's pytest parser)")
    args = parser.parse_args(argv)
    if args.collect:
        return collect(args)
    verifier = None
    try:
        verifier = Verifier(load_json(os.path.join(HERE, "spec.json")),
                            load_json(os.path.join(HERE, "manifest.json")), args.reward, kill=not args.no_kill,
                            summary_line=args.summary_line)
        return verifier.score()
    except Exception as exc:  # any error scores 0: the reward file already says so
        print(f"verifier: error: {type(exc).__name__}: {exc}", flush=True)
        if args.summary_line:
            print("=" * 27 + " short test summary info " + "=" * 28)
            print("FAILED tests/verifier.py::test_environment_repaired - verifier error", flush=True)
        if verifier is not None:
            try:
                verifier.write_reward(0)
            except OSError:
                pass
        return 0


if __name__ == "__main__":
    sys.exit(main())
