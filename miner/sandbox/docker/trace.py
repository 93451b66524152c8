"""What a Dockerized project's running program touches, whatever its language: its healthy run traced.

The host's strace runs inside the container from a private folder, with its own loader and
libraries (so the image needs neither strace nor a matching libc), around the image's command,
its service and its HEALTHCHECK. What each traced run opened, executed and connected to, kept
when it succeeded, becomes the observation's "trace" part (observe.py):

    {"tool": "strace 6.1" | None, "why": "" | why nothing was traced,
     "files": [{path, real, rel, library, write, probes}],  rel: project-relative, or None outside it
     "programs": [{path, real, probes}],             every executable run (execve)
     "sockets": [{call: connect|bind, family, address, probes}]}

`probes` names the derived probes whose measurement the run served: the service's start serves
every probe of the service, the HEALTHCHECK's own run only probe::healthcheck. Owners (Debian
package and version) are added by observe.py, which knows how to ask the image.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
from collections import defaultdict
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from miner.models import PROJECT_DIR, SANDBOX_ROOT
from miner.sandbox.docker.gateway import tar_files

TRACER_DIR = f"{SANDBOX_ROOT}/.miner/trace"
LOADER_NAME = "ld.so"
SYSCALLS = "open,openat,execve,connect,bind"
IGNORED_PREFIXES = ("/proc/", "/sys/", "/dev/", f"{SANDBOX_ROOT}/.miner/", "/tmp/.service")
LINE = re.compile(r"^(?P<pid>\d+)\s+(?P<call>\w+)\((?P<args>.*)\)\s+=\s+(?P<ret>-?\d+|\?)(?:\s+(?P<err>E[A-Z]+))?")
UNFINISHED = re.compile(r"^(?P<pid>\d+)\s+(?P<head>\w+\(.*?)\s*<unfinished \.\.\.>$")
RESUMED = re.compile(r"^(?P<pid>\d+)\s+<\.\.\. (?P<call>\w+) resumed>(?P<tail>.*)$")
STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')
WRITE_FLAGS = ("O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC", "O_APPEND")
INET = re.compile(r'sa_family=AF_INET6?, sin6?_port=htons\((\d+)\).*?(?:inet_addr\("([^"]+)"\)|inet_pton\(AF_INET6, "([^"]+)"\))')
UNIX = re.compile(r'sa_family=AF_UNIX, sun_path=@?"((?:[^"\\]|\\.)*)"')


@cache
def tracer_files() -> dict[str, bytes] | None:
    """{name: content} of the host's strace, its libraries and loader; None without strace."""
    strace = shutil.which("strace")
    if not strace:
        return None
    listing = subprocess.run(["ldd", strace], capture_output=True, text=True, timeout=30).stdout
    files = {"strace": Path(strace).read_bytes()}
    for line in listing.splitlines():
        path = next((word for word in line.split() if word.startswith("/")), None)
        if path is None:
            continue
        name = LOADER_NAME if "ld-linux" in path else Path(path).name
        files[name] = Path(path).resolve().read_bytes()
    return files if LOADER_NAME in files else None


@cache
def tracer_version() -> str:
    strace = shutil.which("strace")
    out = subprocess.run([strace, "-V"], capture_output=True, text=True, timeout=30).stdout if strace else ""
    return out.splitlines()[0].replace("version ", "").strip() if out else ""


def tracer_tar() -> bytes | None:
    """The tracer's folder as a tar archive for put_archive at /."""
    files = tracer_files()
    if files is None:
        return None
    return tar_files({f"{TRACER_DIR.strip('/')}/{name}": data for name, data in files.items()}, mode=0o755)


def wrap(log_file: str) -> list[str]:
    """The argv prefix that runs a command under the tracer, its trace written to `log_file`."""
    return [f"{TRACER_DIR}/{LOADER_NAME}", "--library-path", TRACER_DIR, f"{TRACER_DIR}/strace",
            "-f", "-qq", "-s", "4096", "-e", f"trace={SYSCALLS}", "-e", "signal=none", "-o", log_file, "--"]


def _unquote(text: str) -> str:
    try:
        return ast.literal_eval(f'"{text}"')
    except (ValueError, SyntaxError):
        return text


def complete_lines(text: str) -> list[str]:
    """The trace's lines with each call interrupted by another process's put back together."""
    pending: dict[str, str] = {}
    lines = []
    for line in text.splitlines():
        if match := UNFINISHED.match(line):
            pending[match["pid"]] = match["head"]
        elif (match := RESUMED.match(line)) and match["pid"] in pending:
            lines.append(f"{match['pid']} {pending.pop(match['pid'])}{match['tail']}")
        else:
            lines.append(line)
    return lines


@dataclass
class Touched:
    """What one traced run touched (absolute paths as the program wrote them, cwd-resolved)."""

    files: dict[str, bool] = field(default_factory=dict)  # path -> opened for writing
    programs: list[str] = field(default_factory=list)
    sockets: list[dict[str, Any]] = field(default_factory=list)


def parse(text: str, cwd: str) -> Touched:
    """The successful opens, executions, connections and binds of a trace."""
    found = Touched()
    for line in complete_lines(text):
        match = LINE.match(line)
        if not match:
            continue
        call, args, failed = match["call"], match["args"], match["ret"].startswith("-")
        if call in ("open", "openat") and not failed:
            strings = STRING.findall(args)
            if strings:
                path = _resolve(_unquote(strings[0]), cwd)
                found.files[path] = found.files.get(path, False) or any(f in args for f in WRITE_FLAGS)
        elif call == "execve" and not failed:
            strings = STRING.findall(args)
            if strings and (path := _resolve(_unquote(strings[0]), cwd)) not in found.programs:
                found.programs.append(path)
        elif call in ("connect", "bind") and (not failed or match["err"] == "EINPROGRESS"):
            socket = _socket(call, args)
            if socket and socket not in found.sockets:
                found.sockets.append(socket)
    return found


def _resolve(path: str, cwd: str) -> str:
    return path if path.startswith("/") else f"{cwd.rstrip('/')}/{path}"


def _socket(call: str, args: str) -> dict[str, Any] | None:
    if match := INET.search(args):
        return {"call": call, "family": "inet", "address": f"{match[2] or match[3]}:{match[1]}"}
    if match := UNIX.search(args):
        return {"call": call, "family": "unix", "address": _unquote(match[1])}
    return None


def merge(runs: list[tuple[Touched, list[str]]], real: dict[str, str]) -> dict[str, Any]:
    """The traced runs as the observation's "trace" part: each path once, with the probes it served.

    `real` maps each path to its resolved form (symlinks followed inside the container); paths of
    the kernel's pseudo-filesystems and of miner's own files are left out.
    """
    files: dict[str, dict[str, Any]] = {}
    programs: dict[str, dict[str, Any]] = {}
    sockets: dict[tuple[str, str], dict[str, Any]] = {}
    probes_of: dict[str, set[str]] = defaultdict(set)
    for touched, probes in runs:
        for path, write in touched.files.items():
            resolved = real.get(path, path)
            if resolved.startswith(IGNORED_PREFIXES) or path.startswith(IGNORED_PREFIXES):
                continue
            entry = files.setdefault(resolved, {"path": path, "real": resolved, "rel": _project_rel(resolved),
                                                "library": is_library(resolved), "write": False})
            entry["write"] = entry["write"] or write
            probes_of[f"file:{resolved}"] |= set(probes)
        for path in touched.programs:
            resolved = real.get(path, path)
            if resolved.startswith(IGNORED_PREFIXES):
                continue
            programs.setdefault(resolved, {"path": path, "real": resolved})
            probes_of[f"program:{resolved}"] |= set(probes)
        for socket in touched.sockets:
            key = (socket["call"], socket["address"])
            sockets.setdefault(key, dict(socket))
            probes_of[f"socket:{key}"] |= set(probes)
    for entry in files.values():
        entry["probes"] = sorted(probes_of[f"file:{entry['real']}"])
    for entry in programs.values():
        entry["probes"] = sorted(probes_of[f"program:{entry['real']}"])
    for key, entry in sockets.items():
        entry["probes"] = sorted(probes_of[f"socket:{key}"])
    return {"files": sorted(files.values(), key=lambda e: e["real"]),
            "programs": sorted(programs.values(), key=lambda e: e["real"]),
            "sockets": sorted(sockets.values(), key=lambda e: (e["call"], e["address"]))}


def _project_rel(path: str) -> str | None:
    prefix = PROJECT_DIR.rstrip("/") + "/"
    return path[len(prefix):] if path.startswith(prefix) else None



def is_library(path: str) -> bool:
    """A shared library's file (libfoo.so, libfoo.so.1.2)."""
    return bool(re.search(r"\.so(\.\d+)*$", path))
