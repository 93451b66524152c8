"""What miner's verifier trusts below the project: its runtime, the system, the container's processes.

Standalone on purpose (copied into every exported task's tests/ next to verifier.py, which loads
it by path; it imports nothing of miner). Four parts:

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
environment     the environment file (~/.bashrc), read line by line and never sourced
                (`read_environment`): `export NAME=value` and `unset NAME` lines, the rest only
                as the healthy file had it; the other startup files may only hold healthy lines.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import subprocess
import sys

# Names that legitimately differ after a correct repair, wherever they are.
VARIANCE_NAMES = ("__pycache__",)  # bytecode: the verifier deletes these folders and never reads them
# Files inside *.dist-info that pip rewrites when it reinstalls a distribution from the index.
VARIANCE_DIST_INFO = ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json")
# npm's record of the tree it installed (node_modules/.package-lock.json, rewritten by every install;
# node never loads it).
VARIANCE_NODE_MODULES = (".package-lock.json",)
# Never system roots: the kernel's, the harness's and scratch folders.
NOT_SYSTEM = ("/proc", "/sys", "/dev", "/run", "/tmp", "/var/tmp", "/logs", "/tests", "/solution", "/oracle")
LOADER_FILES = ("/etc/ld.so.preload", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d")
# Files the system family breaks (kept when present): locale and time-zone data, the CA bundle;
# and the JavaScript Debian's node loads beside its binary (its test runner's tests run on it).
SYSTEM_EXTRAS = ("/usr/lib/locale", "/usr/share/zoneinfo", "/etc/ssl/certs/ca-certificates.crt",
                 "/usr/share/nodejs", "/usr/lib/nodejs", "/usr/local/lib/node_modules")
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
        bash = os.path.basename(os.path.realpath(shell)).startswith("bash")  # dash knows no long options
        done = subprocess.run([shell, *(("--noprofile", "--norc") if bash else ()), "-c", script],
                              capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
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


def runtime_list(shells: tuple[str, ...], keepalive: str | None, skip: tuple[str, ...]) -> list[list[str]]:
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
    for shell in shells:  # the harness's shells (the boot tool's ancestors) and PID 1's
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
    return name in VARIANCE_NAMES or (folder.endswith(".dist-info") and name in VARIANCE_DIST_INFO) \
        or (folder == "node_modules" and name in VARIANCE_NODE_MODULES)


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


# -- the environment, read and never run -------------------------------------------------------------


class EnvFileError(ValueError):
    """A startup file holds something the verifier cannot read without running it; says which line."""


ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
UNQUOTED = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./:,@%+=-")
PARAMETER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)(:?[-+])?")
# What bash sets by itself: never compared, never carried to the tests.
SHELL_OWN = ("PWD", "OLDPWD", "SHLVL", "_", "HOSTNAME")


def _word(text: str, i: int, env: dict[str, str], stop: str, quoted: bool) -> tuple[str, int]:
    """Expand one shell word from text[i] up to a character of `stop` (outside quotes): literals,
    '...', "...", backslash escapes and $NAME / ${NAME} / ${NAME:-w} / ${NAME:+w} (with or without
    the colon). Anything else (command substitution, globs, ~, arithmetic) is refused."""
    out = []
    while i < len(text) and text[i] not in stop:
        c = text[i]
        if c == "$":
            value, i = _parameter(text, i + 1, env, quoted)
            out.append(value)
        elif c == "\\":
            if i + 1 >= len(text):
                raise EnvFileError("a line ends with a backslash")
            nxt = text[i + 1]
            out.append(nxt if not quoted or nxt in '$`"\\' else c + nxt)
            i += 2
        elif quoted:
            if c == "`":
                raise EnvFileError("a command substitution (`...`)")
            out.append(c)
            i += 1
        elif c == "'":
            end = text.find("'", i + 1)
            if end < 0:
                raise EnvFileError("an unclosed single quote")
            out.append(text[i + 1:end])
            i = end + 1
        elif c == '"':
            value, i = _word(text, i + 1, env, '"', True)
            if i >= len(text):
                raise EnvFileError("an unclosed double quote")
            out.append(value)
            i += 1
        elif c in UNQUOTED:
            out.append(c)
            i += 1
        else:
            raise EnvFileError(f"the character {c!r} outside quotes")
    return "".join(out), i


def _parameter(text: str, i: int, env: dict[str, str], quoted: bool) -> tuple[str, int]:
    """A parameter expansion after its `$` at text[i]."""
    plain = ENV_NAME.match(text, i)
    if plain:
        return env.get(plain.group(), ""), plain.end()
    braced = PARAMETER.match(text, i)
    if not braced:
        raise EnvFileError("a $ that is not a plain variable ($NAME, ${NAME}, ${NAME:-word}, ${NAME:+word})")
    name, op = braced.group(1), braced.group(2)
    i = braced.end()
    if op is None:
        if text[i:i + 1] != "}":
            raise EnvFileError(f"an expansion of {name} this reader does not know")
        return env.get(name, ""), i + 1
    word, i = _word(text, i, env, "}", quoted)
    if text[i:i + 1] != "}":
        raise EnvFileError(f"an unclosed ${{{name}...}}")
    is_set = name in env and (not op.startswith(":") or env[name] != "")
    value = (word if is_set else "") if op.endswith("+") else (env[name] if is_set else word)
    return value, i + 1


def _assignments(rest: str, env: dict[str, str]) -> list[tuple[str, str | None]]:
    """NAME=WORD (or NAME alone) items of an export line, each expanded with the environment as it
    was before the line (as bash expands a builtin's arguments before it runs)."""
    items: list[tuple[str, str | None]] = []
    i = 0
    while i < len(rest):
        if rest[i] in " \t":
            i += 1
            continue
        if rest[i] == "#":
            break
        name = ENV_NAME.match(rest, i)
        if not name:
            raise EnvFileError("an export of something that is not a variable name")
        i = name.end()
        if rest[i:i + 1] != "=":
            items.append((name.group(), None))
            continue
        value, i = _word(rest, i + 1, env, " \t", False)
        items.append((name.group(), value))
    return items


def apply_env_file(text: str, env: dict[str, str], allowed: set[str]) -> list[str]:
    """Apply an environment file to `env` without running it: `export NAME=WORD ...` and `unset NAME
    ...` lines, comments and blank lines are read; any other line must be one of `allowed` (the
    healthy file's own lines, whose effect the healthy environment already holds). Returns the
    names it assigned or unset; EnvFileError names the first line it refuses."""
    touched: list[str] = []
    for number, raw in enumerate(text.split("\n"), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            head, _, rest = line.partition(" ")
            if head == "export" and rest.strip():
                for name, value in _assignments(rest, env):
                    if value is not None:
                        env[name] = value
                        touched.append(name)
            elif head == "unset" and rest.strip():
                names = [n for n in rest.split() if n != "-v"]
                if not all(ENV_NAME.fullmatch(n) for n in names):
                    raise EnvFileError("an unset of something that is not a variable name")
                for name in names:
                    env.pop(name, None)
                    touched.append(name)
            elif line not in allowed:
                raise EnvFileError("a command the healthy file does not have (only `export NAME=value` and "
                                   "`unset NAME` lines are read; nothing in it is run)")
        except EnvFileError as exc:
            raise EnvFileError(f"line {number} ({line[:80]!r}): {exc}") from None
    return touched


def healthy_start(healthy_text: str, env_full: dict[str, str], base_env: dict[str, str]) -> dict[str, str]:
    """The environment before the environment file: the healthy one, with every variable the healthy
    file exports or unsets put back to the image's own value."""
    start = {k: v for k, v in env_full.items() if k not in SHELL_OWN}
    for name in apply_env_file(healthy_text, dict(start), {ln.strip() for ln in healthy_text.split("\n")}):
        if name in base_env:
            start[name] = base_env[name]
        else:
            start.pop(name, None)
    return start


def read_environment(text: str, healthy_text: str, env_full: dict[str, str],
                     base_env: dict[str, str]) -> dict[str, str]:
    """The variables every shell of the solver gets from the environment file `text`, computed, not
    run. EnvFileError when the file holds anything but what it may."""
    env = healthy_start(healthy_text, env_full, base_env)
    apply_env_file(text, env, {ln.strip() for ln in healthy_text.split("\n")})
    return env


def startup_changes(healthy: dict[str, str | None]) -> list[str]:
    """Startup files (other than the environment file) holding a line the healthy one lacks, or
    present where the healthy image had none."""
    problems = []
    for path, text in sorted(healthy.items()):
        try:
            with open(path, encoding="utf-8", errors="surrogateescape") as handle:
                now = handle.read()
        except FileNotFoundError:
            continue  # a startup file removed adds nothing
        except OSError as exc:
            problems.append(f"startup file {path} cannot be read ({exc.strerror})")
            continue
        if text is None:
            problems.append(f"startup file {path} was added (the healthy image has none)")
            continue
        lines = {ln.strip() for ln in text.split("\n")}
        extra = [ln.strip() for ln in now.split("\n") if ln.strip() and ln.strip() not in lines]
        if extra:
            problems.append(f"startup file {path} has a line the healthy image's lacks: {extra[0][:80]!r}")
    return problems
