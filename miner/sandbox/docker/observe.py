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
      }
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


def observe(sandbox: Sandbox) -> dict[str, Any]:
    """The whole observation of a healthy fork: the system inventory plus the service's part."""
    found = system_inventory(sandbox)
    found["service"] = observe_service(sandbox)
    return found


