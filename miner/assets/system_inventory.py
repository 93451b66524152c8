"""Print, as one JSON line, what lies beneath a Python project in a container (run inside it).

    python system_inventory.py                 # the inventory (see below)
    python system_inventory.py --owners PATH.. # who installed each file: a Debian package or a
                                               # Python distribution, at which version

The inventory: the shared libraries the environment's extension modules load and the Debian
packages (with versions) that own them, which import loads which extension, interpreter
symlinks, the CA bundle, the C.UTF-8 locale and the time zones the project names (each with its
owning package and version), and which recovery tools the image has. Facts only: never a file's
contents. Printed after the marker "MINER-INVENTORY ".

Standalone on purpose: it is copied into containers and must not import miner.
"""

import ast
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig

SUFFIX = re.compile(r"(\.cpython-[^.]*|\.abi3|\.pypy[^.]*)?\.so$")
LDD_LINE = re.compile(r"^\s*(\S+)\s+=>\s+(\S+|not found)")
ZONE = re.compile(r"\b(?:Africa|America|Antarctica|Asia|Atlantic|Australia|Europe|Indian|Pacific)"
                  r"/[A-Z][A-Za-z_]+(?:/[A-Z][A-Za-z_]+)?\b")
PROJECT = os.environ.get("MINER_PROJECT", "/sandbox/project")
VENV = os.environ.get("MINER_VENV", "/sandbox/venv")
SYSTEM_FILES = {
    "python_symlink": "/usr/bin/python3",
    "venv_python": os.path.join(VENV, "bin", "python"),
    "ca_bundle": "/etc/ssl/certs/ca-certificates.crt",
    "locale": "/usr/lib/locale/C.utf8/LC_CTYPE",
    "zoneinfo": "/usr/share/zoneinfo",
    "ld_so_conf": "/etc/ld.so.conf",
}
TOOLS = ("apt-get", "dpkg-query", "update-ca-certificates", "ldconfig")
# What reinstalling a Debian package runs: a library these load cannot be repaired with them.
RECOVERY_TOOLS = ("/usr/bin/apt-get", "/usr/lib/apt/methods/http", "/usr/lib/apt/methods/gpgv",
                  "/usr/lib/apt/methods/store", "/usr/bin/gpgv", "/usr/bin/dpkg", "/usr/bin/dpkg-deb",
                  "/usr/bin/tar", "/usr/bin/gzip", "/usr/bin/xz", "/usr/bin/bash", "/usr/bin/sh")
# Each import in its own interpreter, so that what an import loads is known per name (the graph
# links `import sqlite3` to libsqlite3 through _sqlite3's extension file).
LOADER = """
import importlib, sys
try:
    importlib.import_module(sys.argv[1])
except BaseException:
    pass
files = sorted({m.__file__ for m in list(sys.modules.values()) if (getattr(m, "__file__", None) or "").endswith(".so")})
import json  # after the measure: json's own extension is not the import's
print("LOADED " + json.dumps(files))
"""


# What the test runner and miner's own helpers (this script, the verifier, the probes) import:
# breaking those stdlib modules would stop every check, not the project's. pytest starts as in the
# project (its configuration file, the plugins installed in the venv: coverage's imports pickle,
# reading pyproject.toml tomllib) but collects an empty folder, so the project's own imports stay out.
RUNNER_PROBE = ("import json, sys\n"
                "import argparse, configparser, ctypes, hashlib, importlib, inspect, pkgutil, shutil, signal\n"
                "import socket, subprocess, tempfile, time, xml.etree.ElementTree\n"
                "try:\n    import pytest, _pytest.junitxml\n"
                "    with tempfile.TemporaryDirectory() as empty:\n"
                "        pytest.main(json.loads(sys.argv[1]) + [empty])\n"
                "except BaseException:\n    pass\n"
                "print('MODULES ' + json.dumps(sorted(sys.modules)))")
# pytest's configuration files in its order of precedence, with the section that makes them one
PYTEST_CONFIGS = (("pytest.ini", ""), (".pytest.ini", ""), ("pyproject.toml", "[tool.pytest.ini_options]"),
                  ("tox.ini", "[pytest]"), ("setup.cfg", "[tool:pytest]"))


def run(argv, timeout=60, cwd=None):
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                              cwd=cwd)
    except (OSError, subprocess.SubprocessError):
        return None


def ldd(path):
    done = run(["ldd", path], timeout=30)
    return [m.groups() for m in map(LDD_LINE.match, done.stdout.splitlines()) if m] if done else []


def extension_roots():
    roots = []
    site = os.environ.get("MINER_SITE_PACKAGES") or sysconfig.get_path("purelib")
    if site and os.path.isdir(site):
        roots.append(site)
    return roots + [p for p in sys.path if p.endswith("lib-dynload") and os.path.isdir(p)]


def linked_libraries():
    """({soname: entry}, {user: {module, libraries}}) for every extension module and the interpreter."""
    libraries, extensions = {}, {}

    def note(user, module, path):
        for soname, where in ldd(path):
            entry = libraries.setdefault(soname, {"soname": soname, "linked": where, "path": None,
                                                  "used_by": [], "modules": []})
            if where != "not found":
                entry["path"] = os.path.realpath(where)
            entry["used_by"].append(user)
            if module and module not in entry["modules"]:
                entry["modules"].append(module)
            extensions.setdefault(user, {"module": module, "libraries": []})["libraries"].append(soname)

    for root in extension_roots():
        for folder, _dirs, files in os.walk(root):
            for name in files:
                if re.search(r"\.so(\.\d+)*$", name):
                    path = os.path.join(folder, name)
                    rel = os.path.relpath(path, root)
                    module = SUFFIX.sub("", rel).replace(os.sep, ".") if SUFFIX.search(rel) else None
                    note(path, module, path)
    note("interpreter", None, os.path.realpath(sys.executable))
    return libraries, extensions


def has_dpkg():
    return shutil.which("dpkg-query") is not None


def debian_owner(path):
    """(package, version) of the Debian package that installed a file (merged /usr aware), or None."""
    if not has_dpkg():
        return None
    alt = path[4:] if path.startswith("/usr/") else "/usr" + path
    for candidate in (path, alt):
        done = run(["dpkg-query", "-S", candidate])
        if done and done.returncode == 0 and ": " in done.stdout:
            package = done.stdout.split(": ", 1)[0].split(",")[0].strip()
            version = run(["dpkg-query", "-W", "-f", "${Version}", package])
            return package, version.stdout.strip() if version and version.returncode == 0 else ""
    return None


def link(path):
    entry = {"path": path, "target": os.readlink(path) if os.path.islink(path) else None,
             "exists": os.path.exists(path), "package": None, "version": None}
    owner = debian_owner(path) if entry["exists"] else None
    if owner:
        entry["package"], entry["version"] = owner
    return entry


def project_texts():
    """(path, text) of the project's small UTF-8 files, hidden folders and caches left out."""
    for folder, dirs, files in os.walk(PROJECT):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d != "__pycache__"]
        for name in files:
            path = os.path.join(folder, name)
            if name.endswith((".pyc", ".so")) or os.path.islink(path) or os.path.getsize(path) > 262144:
                continue
            try:
                with open(path, encoding="utf-8") as handle:
                    yield path, handle.read()
            except (OSError, UnicodeDecodeError):
                continue


def project_imports_and_zones():
    names, zones = set(), set()
    for path, text in project_texts():
        zones.update(z for z in ZONE.findall(text) if os.path.isfile("/usr/share/zoneinfo/" + z))
        if not path.endswith(".py"):
            continue
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module.split(".")[0])
    return names, zones


def import_loads(names):
    loads = {}
    for name in sorted(names):
        done = run([sys.executable, "-c", LOADER, name], timeout=60,
                   cwd=PROJECT if os.path.isdir(PROJECT) else None)
        for line in (done.stdout.splitlines() if done else []):
            if line.startswith("LOADED ") and json.loads(line[7:]):
                loads[name] = [os.path.realpath(p) for p in json.loads(line[7:])]
    return loads


def pytest_config():
    """The configuration file pytest reads in the project (pyproject.toml is read even without its section)."""
    for name, section in PYTEST_CONFIGS:
        path = os.path.join(PROJECT, name)
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                if not section or section in handle.read():
                    return path
        except OSError:
            continue
    fallback = os.path.join(PROJECT, "pyproject.toml")
    return fallback if os.path.isfile(fallback) else None


def runner_modules():
    """Top-level modules the test runner and miner's helpers import (RUNNER_PROBE)."""
    args = ["--collect-only", "-q", "-p", "no:cacheprovider"]
    if os.path.isdir(PROJECT):
        args += ["--rootdir", PROJECT, *(["-c", config] if (config := pytest_config()) else [])]
    done = run([sys.executable, "-c", RUNNER_PROBE, json.dumps(args)], timeout=120,
               cwd=PROJECT if os.path.isdir(PROJECT) else None)
    for line in (done.stdout.splitlines() if done else []):
        if line.startswith("MODULES "):
            return {name.split(".")[0] for name in json.loads(line[8:])}
    return set()


def preloaded_modules():
    """Top-level modules the test runner and miner's helpers import, and this script itself."""
    return {name.split(".")[0] for name in sys.modules} | runner_modules()


def stdlib_modules(names, loads):
    """{module: {path, package, version, extensions: [{path, package, version}]}} for the standard
    library modules the project imports that neither the test runner nor miner's helpers need,
    whose file (and lib-dynload extensions it loads) a Debian package installed."""
    stdlib = getattr(sys, "stdlib_module_names", ())
    preloaded = preloaded_modules()
    found = {}
    for name in sorted(names):
        if name not in stdlib or name in preloaded or name.startswith("_"):
            continue
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        origin = getattr(spec, "origin", None) if spec else None
        if not origin or not os.path.isfile(origin):
            continue
        owner = debian_owner(os.path.realpath(origin))
        if not owner:
            continue
        extensions = []
        for path in loads.get(name, []):
            ext_owner = debian_owner(path) if "lib-dynload" in path else None
            if ext_owner:
                extensions.append({"path": path, "package": ext_owner[0], "version": ext_owner[1]})
        found[name] = {"path": origin, "package": owner[0], "version": owner[1], "extensions": extensions}
    return found


def inventory():
    libraries, extensions = linked_libraries()
    packages = {}
    for entry in libraries.values():
        owner = debian_owner(entry["path"]) if entry["path"] else None
        entry["package"] = owner[0] if owner else None
        if owner:
            package = packages.setdefault(owner[0], {"name": owner[0], "version": owner[1], "libraries": []})
            package["libraries"].append(entry["soname"])
    names, zones = project_imports_and_zones()
    loads = import_loads(names)
    zone_packages = {}
    for zone in sorted(zones):
        owner = debian_owner("/usr/share/zoneinfo/" + zone)
        if owner:
            zone_packages[zone] = {"package": owner[0], "version": owner[1]}
    return {
        "libraries": libraries, "packages": packages, "extensions": extensions,
        "system": {key: link(path) for key, path in SYSTEM_FILES.items()},
        "dpkg": has_dpkg(), "tools": {tool: shutil.which(tool) is not None for tool in TOOLS},
        "recovery_libraries": sorted({soname for tool in RECOVERY_TOOLS if os.path.exists(tool)
                                      for soname, _where in ldd(tool)}),
        "zones": sorted(zones), "zone_packages": zone_packages, "imports": sorted(names),
        "loaded": sorted({p for paths in loads.values() for p in paths}), "import_loads": loads,
        "stdlib": stdlib_modules(names, loads),
    }


def python_owner(path):
    """The installed distribution a file belongs to (by its RECORD), and the interpreter whose
    pip manages that site folder: {dist, version, installer, python, pip} or None."""
    from importlib import metadata

    real = os.path.realpath(path)
    for dist in metadata.distributions():
        for item in dist.files or []:
            if os.path.realpath(str(dist.locate_file(item))) != real:
                continue
            in_venv = real.startswith(os.path.realpath(sys.prefix) + os.sep)
            python = sys.executable if in_venv else os.path.realpath(getattr(sys, "_base_executable", sys.executable))
            pip = run([python, "-c", "import pip"])
            return {"dist": dist.metadata["Name"], "version": dist.version,
                    "installer": (dist.read_text("INSTALLER") or "").strip(), "python": python,
                    "pip": bool(pip and pip.returncode == 0)}
    return None


def owners(paths):
    found = {}
    for path in paths:
        deb = debian_owner(os.path.realpath(path))
        found[path] = {"debian": {"package": deb[0], "version": deb[1]} if deb else None,
                       "python": python_owner(path)}
    return found


if __name__ == "__main__":
    if sys.argv[1:2] == ["--owners"]:
        print("MINER-INVENTORY " + json.dumps(owners(sys.argv[2:])))
    else:
        print("MINER-INVENTORY " + json.dumps(inventory()))
