"""What the Docker backend sees beneath a project (Backend.observe): facts, never file contents.

    {
      ...the system inventory (miner/assets/system_inventory.py): "libraries", "packages" (Debian
      packages with versions), "extensions", "system" (interpreter symlinks, CA bundle, locale,
      zoneinfo: path, link target, owning package and version), "zones", "zone_packages",
      "imports", "loaded", "import_loads", "dpkg", "tools",
      "service": None, or for a Dockerized service (an image that EXPOSEs ports) {
          "ports":   the EXPOSEd TCP ports,
          "config":  [{path, line, key, value, answered}] every `key = value` line of the project's
                     config files (project-relative path; answered: the value showed in an HTTP answer),
          "imports": [{path, module, debian: {package, version} | None,
                       python: {dist, version, installer, python, pip} | None}] the Python files the
                     running service imported from site-packages outside the project
      },
      "trace": None, or for a Dockerized project, what its command, service and HEALTHCHECK touched
               when run under a tracer, whatever the language (trace.py), each file and program
               with its owner: {"debian": {package, version} | None, ...}
    }

miner.inverters.system decides what of it to break; the graph reads the inventory part.
"""

from __future__ import annotations

import json
import re
import shlex
from importlib import resources
from typing import Any

from miner.models import SANDBOX_ROOT
from miner.sandbox.base import Sandbox, SandboxError, word_chunks
from miner.sandbox.docker import trace
from miner.sandbox.docker.container import DockerSandbox

SCRATCH = f"{SANDBOX_ROOT}/.miner"
INVENTORY = "system_inventory.py"
MARKER = "MINER-INVENTORY "
CONFIG_SUFFIXES = (".ini", ".cfg", ".conf", ".toml", ".yaml", ".yml", ".json", ".env")
CONFIG_MAX_BYTES = 256 * 1024
# `key = value`, `key: value`, `"key": "value",` (one value on one line; quotes and commas kept out)
ASSIGNMENT = re.compile(r"""^\s*["']?(?P<key>[A-Za-z_][\w.-]*)["']?\s*[:=]\s*["']?"""
                        r"""(?P<value>[^"'#\n]*?)["']?\s*,?\s*$""")
VERBOSE_IMPORT = re.compile(r"# code object from '?([^'\s]+\.py)'?$|matches (\S+\.py)$", re.M)


def _run_inventory(sandbox: Sandbox, args: list[str]) -> Any:
    sandbox.put(f"{SCRATCH}/{INVENTORY}", resources.files("miner").joinpath("assets", INVENTORY).read_bytes())
    command = (f'PY="$MINER_PYTHON"; [ -x "$PY" ] || PY=python3; "$PY" {SCRATCH}/{INVENTORY} '
               + " ".join(shlex.quote(a) for a in args))
    result = sandbox.run(command, timeout=300)
    for line in reversed(result.output.splitlines()):
        if line.startswith(MARKER):
            return json.loads(line[len(MARKER):])
    raise SandboxError(f"system inventory failed (exit {result.exit_code}): {result.output[-2000:]}")


def system_inventory(sandbox: Sandbox) -> dict[str, Any]:
    """The shared libraries extension modules load, their Debian packages, system files and tools.

    Returns {"libraries": {soname: {soname, path, linked, package, used_by, modules}},
             "packages": {name: {name, version, libraries}},
             "extensions": {so path or "interpreter": {module, libraries}},
             "system": {python_symlink|venv_python|ca_bundle|locale|zoneinfo|ld_so_conf:
                        {path, target, exists, package, version}},
             "zones": [time zones the project's files name that exist in /usr/share/zoneinfo],
             "zone_packages": {zone: {package, version}},
             "imports": [top-level modules the project's .py files import],
             "loaded": [extension module files (.so) loaded once those modules are imported],
             "import_loads": {top-level import name: [extension files importing it loads]},
             "dpkg": bool, "tools": {apt-get|dpkg-query|update-ca-certificates|ldconfig: bool}}
    Modules are dotted import names ("_sqlite3", "pkg._speedups"); "interpreter" is python itself.
    """
    return _run_inventory(sandbox, [])


def file_owners(sandbox: Sandbox, paths: list[str]) -> dict[str, dict[str, Any]]:
    """{path: {debian: {package, version} | None, python: {dist, version, installer, python, pip} | None}}."""
    found: dict[str, dict[str, Any]] = {}
    for chunk in word_chunks(paths, size=lambda p: len(shlex.quote(p))):  # a large service imports thousands
        found.update(_run_inventory(sandbox, ["--owners", *chunk]))
    return found


def _sh(sandbox: Sandbox, command: str, timeout: float = 60) -> str:
    result = sandbox.run(command, timeout=timeout)
    return result.output.strip() if result.exit_code == 0 else ""


def _service_answers(sandbox: DockerSandbox) -> tuple[list[bytes], str]:
    """Bodies of the service's HTTP answers and its log, the imports it made listed (PYTHONVERBOSE)."""
    bodies: list[bytes] = []
    try:
        if not sandbox.start_service(env={"PYTHONVERBOSE": "1"}):
            return bodies, ""
        for port in sandbox.ports():
            answer = sandbox.http_get(port)
            if answer:
                bodies.append(answer[1])
        return bodies, sandbox.service_log()
    finally:
        sandbox.stop_service()


def config_lines(sandbox: Sandbox, bodies: list[bytes]) -> list[dict[str, Any]]:
    """Every one-line `key = value` of the project's config files (hidden folders left out)."""
    listing = _sh(sandbox, f"find . -mindepth 1 -name '.*' -prune -o -type f -size -{CONFIG_MAX_BYTES // 1024}k -print")
    found = []
    for rel in sorted(line[2:] for line in listing.splitlines() if line.endswith(CONFIG_SUFFIXES)):
        try:
            text = (sandbox.read(f"{SANDBOX_ROOT}/project/{rel}") or b"").decode("utf-8")
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), start=1):
            match = ASSIGNMENT.match(line)
            value = match.group("value").strip() if match else ""
            if value:
                answered = any(value.encode() in body for body in bodies)
                found.append({"path": rel, "line": number, "key": match.group("key"), "value": value,
                              "answered": answered})
    return found


def _module(path: str) -> str:
    """The dotted module of a file under a site folder (a package's __init__ is the package)."""
    rel = re.split(r"/(?:site|dist)-packages/", path, maxsplit=1)[-1].removesuffix(".py")
    return rel.removesuffix("/__init__").replace("/", ".")


def service_imports(sandbox: DockerSandbox, log_text: str) -> list[dict[str, Any]]:
    """The Python files a service imported from site-packages outside the project and the stdlib."""
    stdlib = _sh(sandbox, "python3 -c 'import sysconfig; print(sysconfig.get_path(\"stdlib\"))'")
    own = (SANDBOX_ROOT + "/", sandbox.image_workdir().rstrip("/") + "/")
    paths: list[str] = []
    for groups in VERBOSE_IMPORT.findall(log_text):
        path = groups[0] or groups[1]
        in_stdlib = stdlib and path.startswith(stdlib + "/") and "-packages/" not in path
        if path not in paths and not path.startswith(own) and not in_stdlib and "-packages/" in path:
            paths.append(path)
    owners = file_owners(sandbox, paths)
    return [{"path": p, "module": _module(p), **owners.get(p, {"debian": None, "python": None})} for p in paths]


def observe_service(sandbox: Sandbox) -> dict[str, Any] | None:
    """What a Dockerized service shows when it runs (see the module docstring); None otherwise."""
    if not isinstance(sandbox, DockerSandbox) or not sandbox.healthy.info.get("dockerized") or not sandbox.ports():
        return None
    bodies, log_text = _service_answers(sandbox)
    return {"ports": sandbox.ports(), "config": config_lines(sandbox, bodies),
            "imports": service_imports(sandbox, log_text)}


TRACE_LOGS = f"{SCRATCH}/trace-logs"
GENERIC_VARIABLES = {"PATH", "HOME", "HOSTNAME", "LANG", "TERM"}  # every image's, not the project's


def _traced_runs(sandbox: DockerSandbox) -> list[tuple[trace.Touched, list[str]]]:
    """Run the image's service (probed over HTTP) or command, then its HEALTHCHECK, each traced."""
    logs = {name: f"{TRACE_LOGS}/{name}.log" for name in ("main", "health")}
    sandbox.run(f"mkdir -p {TRACE_LOGS} && chmod 1777 {TRACE_LOGS}", timeout=60)
    health = ["probe::healthcheck"] if sandbox.image["healthcheck"] else []
    if sandbox.ports():
        served = [f"probe::http::{port}/" for port in sandbox.ports()] + health
        try:
            if sandbox.start_service(wrap=trace.wrap(logs["main"])):
                for port in sandbox.ports():
                    sandbox.http_get(port)
                sandbox.healthcheck(wrap=trace.wrap(logs["health"]))
        finally:
            sandbox.stop_service()
    else:
        served = ["probe::cmd"]
        sandbox.run_image_command(wrap=trace.wrap(logs["main"]))
        sandbox.healthcheck(wrap=trace.wrap(logs["health"]))
    cwd = sandbox.image_workdir()
    text = {name: (sandbox.read(path) or b"").decode(errors="replace") for name, path in logs.items()}
    return [(trace.parse(text["main"], cwd), served), (trace.parse(text["health"], cwd), health)]


def _real_paths(sandbox: Sandbox, paths: list[str]) -> dict[str, str]:
    """Each path with its symlinks resolved inside the container (`readlink -f`)."""
    real: dict[str, str] = {}
    for chunk in word_chunks(paths, size=lambda p: len(shlex.quote(p))):
        out = _sh(sandbox, "readlink -f -- " + " ".join(shlex.quote(p) for p in chunk))
        resolved = out.splitlines()
        if len(resolved) == len(chunk):
            real.update(zip(chunk, resolved))
    return real


def observe_trace(sandbox: Sandbox) -> dict[str, Any] | None:
    """What a Dockerized project's running program touched (see trace.py); None for other projects."""
    if not isinstance(sandbox, DockerSandbox) or not sandbox.healthy.info.get("dockerized") \
            or not sandbox.image_command():
        return None
    archive = trace.tracer_tar()
    if archive is None:
        return {"tool": None, "why": "strace is not installed on the host", "files": [], "programs": [], "sockets": []}
    sandbox.container.put_archive("/", archive)
    runs = _traced_runs(sandbox)
    paths = sorted({p for touched, _ in runs for p in [*touched.files, *touched.programs]})
    found = trace.merge(runs, _real_paths(sandbox, paths))
    outside = sorted({e["real"] for e in found["files"] + found["programs"] if e.get("rel") is None})
    owners = file_owners(sandbox, outside) if outside else {}
    for entry in found["files"] + found["programs"]:
        entry["debian"] = (owners.get(entry["real"]) or {}).get("debian")
    sandbox.run(f"rm -rf {trace.TRACER_DIR} {TRACE_LOGS}", timeout=60)
    why = "" if found["files"] or found["programs"] else "the tracer saw nothing (ptrace refused?)"
    return {"tool": trace.tracer_version(), "why": why, **found, "runtime": runtime_of(sandbox),
            "variables": {k: v for k, v in sandbox.image["env"].items() if k not in GENERIC_VARIABLES}}


def runtime_of(sandbox: DockerSandbox) -> dict[str, list[str]]:
    """The programs the image's command and HEALTHCHECK start (an interpreter: node, perl, ...) and
    the shared libraries they link: every check runs them, so a break of one fails every check."""
    test = sandbox.image["healthcheck"] or []
    words = [sandbox.image_command()[:1], test[1:2] if test[:1] == ["CMD"] else []]
    names = sorted({w[0] for w in words if w})
    found = _sh(sandbox, "for p in " + " ".join(shlex.quote(n) for n in names)
                + '; do w=$(command -v "$p") && readlink -f "$w"; done') if names else ""
    programs = sorted(set(found.splitlines()))
    libraries: set[str] = set()
    for program in programs:
        for line in _sh(sandbox, f"ldd {shlex.quote(program)}").splitlines():
            soname = line.strip().split(" ", 1)[0]
            if ".so" in soname:
                libraries.add(soname.rsplit("/", 1)[-1])
    return {"programs": programs, "libraries": sorted(libraries)}


def observe(sandbox: Sandbox) -> dict[str, Any]:
    """The whole observation of a healthy fork: the system inventory, the service's part, the trace."""
    found = system_inventory(sandbox)
    found["service"] = observe_service(sandbox)
    found["trace"] = observe_trace(sandbox)
    return found


