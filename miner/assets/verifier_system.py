"""What miner's verifier trusts below the project: its runtime, the system, the container's processes.

Standalone on purpose (copied into every exported task's tests/ next to verifier.py, which loads
it by path; it imports nothing of miner). Three parts:

runtime list    what the static boot tool (boot.c) checks before any dynamic code runs: the
                interpreter, every file it maps (the dynamic loader, libraries, extension
                modules), every standard-library module the verifier imports before the system
                check, the folders Python searches for them (a file added there would shadow
                one), files that must not exist (/etc/ld.so.preload, a ._pth or pyvenv.cfg or
                pybuilddir.txt next to the interpreter, the stdlib zip), the loader's cache and
                configuration, bash and what it maps, the keep-alive sleep. Measured in the
                healthy image (`runtime_list`), rendered to tests/runtime.txt by the exporter.
system manifest one digest per folder (a Merkle tree: a folder's digest covers its files' bytes,
                executable bits, symlink targets and its sub-folders' digests) of every system
                root: the interpreters' import paths, PATH, the venv, the loader's files and
                library folders, locale and time-zone data, the CA bundle. After a repair they
                must match, except the names in VARIANCE (bytecode caches, which the verifier
                deletes and never reads, and the pip metadata a reinstall rewrites); empty
                folders do not count.
processes       the container's processes: everything but PID 1, the verifier's ancestors and the
                keep-alive sleep is killed (`kill_strays`).
"""

from __future__ import annotations

import hashlib
import os
import signal
import stat
import subprocess
import sys
import time

# Names that legitimately differ after a correct repair, wherever they are.
VARIANCE_NAMES = ("__pycache__",)  # bytecode: the verifier deletes these folders and never reads them
# Files inside *.dist-info that pip rewrites when it reinstalls a distribution from the index.
VARIANCE_DIST_INFO = ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json")
# Never system roots: the kernel's, the harness's and scratch folders.
NOT_SYSTEM = ("/proc", "/sys", "/dev", "/run", "/tmp", "/var/tmp", "/logs", "/tests", "/solution", "/oracle")
LOADER_FILES = ("/etc/ld.so.preload", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d")
# Files the system family breaks (kept when present): locale and time-zone data, the CA bundle.
SYSTEM_EXTRAS = ("/usr/lib/locale", "/usr/share/zoneinfo", "/etc/ssl/certs/ca-certificates.crt")
EMPTY = "empty"
ABSENT = "absent"


def _stream_digest(path: str, first=lambda block: block) -> str | None:
    """sha256 of a regular file (following symlinks) with its first block passed through `first`, or None."""
    try:
        with open(path, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                return None
            digest = hashlib.sha256(first(handle.read(1 << 20)))
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
            return digest.hexdigest()
    except OSError:
        return None


def sha256_file(path: str) -> str | None:
    """sha256 of a regular file (following symlinks), or None."""
    return _stream_digest(path)


def _python_beside(head: bytes, path: str) -> bytes:
    """`head` with a `#!` line naming a python in the script's own folder spelled as its real path."""
    line, newline, rest = head.partition(b"\n")
    words = line[2:].split() if head.startswith(b"#!") and newline else []
    program = os.fsdecode(words[0]) if words else ""
    if program and os.path.dirname(program) == os.path.dirname(path) and os.path.basename(program).startswith("python"):
        return b" ".join([b"#!" + os.fsencode(os.path.realpath(program)), *words[1:]]) + newline + rest
    return head


def file_digest(path: str) -> str | None:
    """sha256 of a regular file, a script's `#!` line naming a python beside the script counted as
    that interpreter's real path: pip writes `#!venv/bin/python` and the venv module
    `#!venv/bin/python3`, the same program, so a repair that writes one for the other changes nothing."""
    return _stream_digest(path, lambda head: _python_beside(head, path))


def listing_digest(folder: str) -> str | None:
    """What boot.c's L entries compare: the sorted entry names (bytes), __pycache__ left out."""
    try:
        names = sorted(n for n in os.listdir(os.fsencode(folder)) if n != b"__pycache__")
    except OSError:
        return None
    return hashlib.sha256(b"".join(n + b"\n" for n in names)).hexdigest()


def under(path: str, roots) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


# -- the runtime list (boot.c's input) -------------------------------------------------------------


def mapped_files(pid: int | str = "self") -> list[str]:
    """Files a process has mapped (its binary, the loader, libraries, extension modules, locale data)."""
    found = []
    try:
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="surrogateescape") as handle:
            for line in handle:
                parts = line.split(None, 5)
                if len(parts) == 6 and parts[5].startswith("/") and not parts[5].endswith(" (deleted)\n"):
                    found.append(parts[5].rstrip("\n"))
    except OSError:
        pass
    return sorted(set(found))


def shell_maps(shell: str) -> list[str]:
    """What a shell maps, read from its own /proc entry by its builtins (no other program runs)."""
    script = 'while IFS= read -r l; do echo "$l"; done < /proc/$$/maps'
    try:
        done = subprocess.run([shell, "--noprofile", "--norc", "-c", script], capture_output=True, text=True,
                              timeout=60, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return []
    files = {p[5] for p in (ln.split(None, 5) for ln in done.stdout.splitlines()) if len(p) == 6 and p[5][:1] == "/"}
    return sorted(files)


def interpreter_absents(executable: str) -> list[str]:
    """Files that, next to the interpreter, would change where it takes its standard library from."""
    folder = os.path.dirname(executable)
    name = os.path.basename(executable)
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    stems = {name, "python", f"python{sys.version_info[0]}", f"python{version}",
             f"python{sys.version_info[0]}{sys.version_info[1]}"}
    found = [os.path.join(folder, f"{stem}._pth") for stem in sorted(stems)]
    found += [os.path.join(folder, n) for n in ("pybuilddir.txt", "pyvenv.cfg", "lib", "Modules")]
    found.append(os.path.join(os.path.dirname(folder), "pyvenv.cfg"))
    return found


def loader_conf_files() -> list[str]:
    folder = "/etc/ld.so.conf.d"
    try:
        return sorted(os.path.join(folder, n) for n in os.listdir(folder))
    except OSError:
        return []


def module_files(skip: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """(files of every loaded module, folders of every loaded package), outside `skip`."""
    files, folders = set(), set()
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if path and not under(os.path.realpath(path), skip):
            files.add(os.path.realpath(path))
        for folder in getattr(module, "__path__", None) or []:
            if isinstance(folder, str) and os.path.isdir(folder) and not under(os.path.realpath(folder), skip):
                folders.add(os.path.realpath(folder))
    return sorted(files), sorted(folders)


def runtime_list(shell: str, keepalive: str | None, skip: tuple[str, ...]) -> list[list[str]]:
    """[kind, sha256 or "-", path] entries for boot.c, measured in this (healthy) process after the
    verifier imported everything it needs (see verifier.warm_up)."""
    entries: dict[str, tuple[str, str]] = {}

    def file(path: str, kind: str = "F") -> None:
        real = os.path.realpath(path)
        digest = sha256_file(real)
        if digest and not under(real, skip):
            entries[real] = (kind, digest)

    executable = os.path.realpath(sys.executable)
    file(executable)
    for path in mapped_files():
        file(path)
    modules, packages = module_files(skip)
    for path in modules:
        file(path)
    for folder in [p for p in sys.path if p] + packages:
        real = os.path.realpath(folder)
        if under(real, skip):
            continue
        if os.path.isdir(real):
            digest = listing_digest(real)
            if digest:
                entries[real] = ("L", digest)
        elif not os.path.lexists(real):
            entries[real] = ("A", "-")
    for path in interpreter_absents(executable):
        if not os.path.lexists(path):
            entries[path] = ("A", "-")
    for path in ("/etc/ld.so.preload", "/etc/ld.so.cache", "/etc/ld.so.conf", *loader_conf_files()):
        if os.path.lexists(path):
            file(path)
        else:
            entries[path] = ("A", "-")
    if os.path.isdir("/etc/ld.so.conf.d"):
        entries["/etc/ld.so.conf.d"] = ("L", listing_digest("/etc/ld.so.conf.d") or "-")
    if os.path.exists(shell):
        file(shell)
        for path in shell_maps(shell):
            file(path)
    if keepalive:
        file(keepalive, "K")
    return sorted([kind, digest, path] for path, (kind, digest) in entries.items())


def read_runtime_list(path: str) -> list[tuple[str, str, str]]:
    entries = []
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as handle:
            for line in handle:
                if line.strip() and not line.startswith("#"):
                    kind, digest, target = line.rstrip("\n").split(" ", 2)
                    entries.append((kind, digest, target))
    except (OSError, ValueError):
        return []
    return entries


# -- the system manifest ------------------------------------------------------------------------------


def varies(folder: str, name: str) -> bool:
    """Whether a folder entry is one of the names allowed to differ after a repair."""
    return name in VARIANCE_NAMES or (folder.endswith(".dist-info") and name in VARIANCE_DIST_INFO)


class Memo(dict):
    """File digests by path and inode fingerprint (device, inode, size, mtime, ctime): a second
    check of the same tree hashes only files whose inode changed. ctime cannot be set from user
    space, so an unchanged fingerprint means unchanged bytes."""

    def digest(self, path: str, info: os.stat_result) -> str | None:
        key = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
        known = self.get(path)
        if known is not None and known[0] == key:
            return known[1]
        digest = file_digest(path)
        self[path] = (key, digest)
        return digest


def _entry(path: str, root: str, memo: Memo | None = None) -> str:
    """One entry of a folder's digest: a file's bytes and executable bit, a symlink's target."""
    try:
        info = os.lstat(path)
    except OSError:
        return "gone"
    if stat.S_ISLNK(info.st_mode):
        try:
            target = os.readlink(path)
        except OSError:
            return "l ?"
        real = os.path.realpath(path)
        if not under(real, [root]) and os.path.isfile(real):
            # a link out of the root: the file it reaches and its bytes count, not how it is spelled
            # (venv/bin/python3 -> /usr/bin/python3 or -> /usr/bin/python3.11 run the same program)
            return f"l -> {real} {sha256_file(real) or 'unreadable'}"
        return f"l {target}"
    if stat.S_ISREG(info.st_mode):
        digest = memo.digest(path, info) if memo is not None else file_digest(path)
        return f"f {digest or 'unreadable'}{' x' if info.st_mode & 0o111 else ''}"
    return "o"


def tree_digests(root: str, skip: tuple[str, ...] = (), memo: Memo | None = None) -> dict[str, str]:
    """{folder relative to root ("." is the root): digest} of every non-empty folder under root;
    a file root gives {".": its entry}, a missing root {".": "absent"}."""
    if not os.path.lexists(root):
        return {".": ABSENT}
    if os.path.islink(root) or not os.path.isdir(root):
        return {".": _entry(root, os.path.dirname(root), memo)}
    out: dict[str, str] = {}

    def folder(path: str, rel: str) -> str:
        try:
            names = sorted(os.listdir(path), key=os.fsencode)
        except OSError:
            out[rel] = "unreadable"
            return out[rel]
        base = os.path.basename(path)
        lines = []
        for name in names:
            full = os.path.join(path, name)
            if varies(base, name) or under(full, skip):
                continue
            if os.path.isdir(full) and not os.path.islink(full):
                digest = folder(full, name if rel == "." else f"{rel}/{name}")
                if digest == EMPTY:
                    continue
                line = f"d {digest}"
            else:
                line = _entry(full, root, memo)
            lines.append(f"{name}\t{line}\n")
        digest = hashlib.sha256("".join(lines).encode("utf-8", "surrogateescape")).hexdigest() if lines else EMPTY
        if digest != EMPTY:
            out[rel] = digest
        return digest

    if folder(root, ".") == EMPTY:
        out["."] = EMPTY
    return out


def system_roots(candidates: list[str], skip: tuple[str, ...]) -> list[str]:
    """Real paths of the candidates (folders, files, or missing files) outside `skip` and NOT_SYSTEM,
    without the ones inside another."""
    real = set()
    for path in candidates:
        if not path:
            continue
        resolved = os.path.realpath(path)
        if under(resolved, skip) or under(resolved, NOT_SYSTEM) or resolved == "/":
            continue
        if os.path.isdir(resolved) or os.path.isfile(resolved) or path in LOADER_FILES:
            real.add(resolved)
    kept: list[str] = []
    for path in sorted(real):
        if not any(under(path, [k]) for k in kept):
            kept.append(path)
    return kept


def loader_dirs() -> list[str]:
    """The folders /etc/ld.so.conf (and what it includes) names."""
    import glob

    found, todo, seen = [], ["/etc/ld.so.conf"], set()
    while todo:
        conf = todo.pop()
        if conf in seen:
            continue
        seen.add(conf)
        try:
            with open(conf, encoding="utf-8", errors="replace") as handle:
                lines = [ln.split("#", 1)[0].strip() for ln in handle]
        except OSError:
            continue
        for line in filter(None, lines):
            if line.startswith("include "):
                todo += sorted(glob.glob(line.split(None, 1)[1]))
            elif line.startswith("/"):
                found.append(line)
    return found


def system_manifest(candidates: list[str], skip: tuple[str, ...]) -> dict[str, dict[str, str]]:
    """{root: tree_digests(root)} of every system root."""
    return {root: tree_digests(root, skip) for root in system_roots(candidates, skip)}


def _deepest(paths: list[str]) -> list[str]:
    return [p for p in paths if not any(o != p and (p == "." or o.startswith(p + "/")) for o in paths)]


def system_changes(healthy: dict[str, dict[str, str]], skip: tuple[str, ...], memo: Memo | None = None) -> list[str]:
    """The folders (or files) of the healthy system manifest that differ now, deepest first."""
    changes = []
    for root, before in sorted(healthy.items()):
        now = tree_digests(root, skip, memo)
        if now.get(".", EMPTY) == before.get(".", EMPTY):
            continue
        differing = sorted(rel for rel in set(now) | set(before) if now.get(rel, EMPTY) != before.get(rel, EMPTY))
        for rel in _deepest(differing)[:5]:
            changes.append(root if rel == "." else os.path.join(root, rel))
    return changes


def clear_bytecode(roots: list[str], skip: tuple[str, ...]) -> int:
    """Delete every __pycache__ folder under the roots (none may be read: forged bytecode would run)."""
    import shutil

    removed = 0
    for root in roots:
        if not os.path.isdir(root) or os.path.islink(root):
            continue
        for folder, dirs, _ in os.walk(root):
            if under(folder, skip):
                dirs[:] = []
                continue
            if "__pycache__" in dirs:
                shutil.rmtree(os.path.join(folder, "__pycache__"), ignore_errors=True)
                removed += 1
            dirs[:] = [d for d in dirs if d != "__pycache__" and not os.path.islink(os.path.join(folder, d))]
    return removed


# -- processes -------------------------------------------------------------------------------------------


def parent_of(pid: int) -> tuple[int, str]:
    """(parent pid, state letter) from /proc/PID/stat, or (0, "")."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        return int(fields[1]), fields[0]
    except (OSError, ValueError, IndexError):
        return 0, ""


def keep_alive(pid: int, programs: set[str], verified: set[str]) -> bool:
    """The container's keep-alive program (as boot.c decides): a child of PID 1, untraced, running a
    known healthy binary, with nothing executable mapped but verified files."""
    if parent_of(pid)[0] != 1:
        return False
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8", errors="replace") as handle:
            tracer = next((ln.split()[1] for ln in handle if ln.startswith("TracerPid:")), "1")
        # /proc/PID/exe opens the bytes the process runs, even when its file was replaced since
        if tracer != "0" or sha256_file(f"/proc/{pid}/exe") not in programs:
            return False
        allowed = verified | {"[vdso]", "[vsyscall]", os.readlink(f"/proc/{pid}/exe")}
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="surrogateescape") as handle:
            for line in handle:
                parts = line.split(None, 5)
                target = parts[5].rstrip("\n") if len(parts) == 6 else ""
                if len(parts) > 1 and parts[1][2:3] == "x" and target not in allowed:
                    return False
    except (OSError, IndexError):
        return False
    return True


def kill_strays(programs: set[str], verified: set[str]) -> int:
    """SIGKILL every process but PID 1, this process's ancestors and the keep-alive sleep."""
    keep, pid = {1}, os.getpid()
    while pid > 0 and pid not in keep:
        keep.add(pid)
        pid = parent_of(pid)[0]
    killed = 0
    for _ in range(20):  # processes may fork while we kill: repeat until none is left
        found = []
        for pid in (int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) not in keep):
            if parent_of(pid)[1] in ("Z", "X", ""):
                continue
            if keep_alive(pid, programs, verified):
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
        time.sleep(0.1)
    return killed
