"""npm's part of the build and of the healthy inventory: what is installed where, and how.

The build (install_lines, appended by miner.ecosystems.build_spec to Python's script) installs, in
the project folder:

  - with a lockfile (package-lock.json, npm-shrinkwrap.json): `npm ci`, as locked;
  - without one (a registry tarball): package.json's dependencies and the dev dependencies the
    test files load (test_dependencies); its other dev dependencies (linters, coverage, types, release
    tools) are dropped from package.json's devDependencies before `npm install`, which writes the
    lockfile. A tarball's dev dependencies often cannot all install (a dist-tag the registry does
    not serve, a native build) and are never needed by its tests.

Lifecycle scripts are not run (`--ignore-scripts`). npm's cache is the sandbox's ~/.npm: the
packages the project was built from stay there, so a repair can reinstall them offline.

tape, the runner, is miner's (like pytest in the venv): installed apart in RUNNER_DIR, its program
linked into the venv's bin and its module into /sandbox/node_modules (the one package there), so
the project's tests find it and a package the project is missing is never found in tape's tree.

The inventory (INVENTORY_SCRIPT, run in the sandbox) lists each installed package of the project
from npm's hidden lockfile (node_modules/.package-lock.json): path, name, version, whether only
dev dependencies need it, what it depends on (and the ranges it declares, its peerDependencies),
its programs (`bin`), its integrity, and the file `require` loads.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path

from miner.ecosystems.node import code, jest, mocha, tape
from miner.ecosystems.node.runner import ManifestError, command_files, project_command, read_manifest
from miner.models import PROJECT_DIR, SANDBOX_ROOT, VENV_DIR, NodePackage, Target
from miner.projectfiles import project_files

LOCKFILES = ("npm-shrinkwrap.json", "package-lock.json")
RUNNER_DIR = f"{SANDBOX_ROOT}/.miner-node"
NPM_FLAGS = "--no-audit --no-fund --no-update-notifier --ignore-scripts --loglevel=error"
BUILTIN_PREFIX = "node:"
# A system without npm (a container of the base image, an exported task's image) gets Debian's.
SYSTEM_NODE = ["# node: Debian's nodejs and npm, where the system has no npm",
               "command -v npm >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install"
               " -y -qq --no-install-recommends nodejs npm >/dev/null && rm -rf /var/lib/apt/lists/*; } || exit 1"]

# package.json narrowed to the dev dependencies kept (argv), in node: the file is JSON, written as npm does
_NARROW = ("const fs = require('fs'); const keep = new Set(process.argv.slice(1));"
           " const p = JSON.parse(fs.readFileSync('package.json', 'utf8'));"
           " p.devDependencies = Object.fromEntries(Object.entries(p.devDependencies || {})"
           ".filter(([n]) => keep.has(n)));"
           " fs.writeFileSync('package.json', JSON.stringify(p, null, 2) + '\\n');")

INVENTORY_SCRIPT = r"""
const fs = require('fs'); const path = require('path');
let lock = {};
try { lock = JSON.parse(fs.readFileSync('node_modules/.package-lock.json', 'utf8')); } catch (e) {}
const out = [];
for (const [where, meta] of Object.entries(lock.packages || {})) {
  if (!where.startsWith('node_modules/') || meta.link) continue;
  let entry = null;
  try { entry = path.relative(process.cwd(), require.resolve(path.resolve(where))); } catch (e) {}
  const name = meta.name || where.slice(where.lastIndexOf('node_modules/') + 13);
  const ranges = { ...(meta.dependencies || {}), ...(meta.optionalDependencies || {}) };
  const bins = typeof meta.bin === 'object' && meta.bin ? meta.bin : {};
  out.push({ path: where, name, version: meta.version || '', dev: !!meta.dev,
             requires: Object.keys(ranges), entry, ranges, peers: meta.peerDependencies || {}, bins,
             integrity: meta.integrity || '' });
}
console.log(JSON.stringify(out));
"""


def package_of(specifier: str) -> str | None:
    """The package a bare module specifier loads (`@scope/name/sub` -> `@scope/name`); None for a
    relative path or a built-in."""
    if specifier.startswith((".", "/", BUILTIN_PREFIX)) or not specifier:
        return None
    parts = specifier.split("/")
    return "/".join(parts[:2]) if specifier.startswith("@") else parts[0]


def test_files(root: Path, command: str) -> list[str]:
    """The project files the test command runs (its file and glob arguments)."""
    files = command_files(command)
    found = {str(path.relative_to(root)) for pattern in files or ["test"] for path in Path(root).glob(pattern)}
    found |= {str(p.relative_to(root)) for rel in list(found) if (Path(root) / rel).is_dir()
              for p in (Path(root) / rel).rglob("*.*js")}
    return sorted(f for f in found if f.endswith(code.JS_SUFFIXES) and "node_modules" not in f.split("/"))


def required_packages(root: Path, command: str) -> set[str]:
    """The packages the test files require or import, with the project files they load in turn
    (a linter's config or a build script is not followed: it is not what the tests load)."""
    files = {f for f in project_files(root) if not f.startswith("node_modules/")}
    main, seen, queue, packages = main_file(root), set(), test_files(root, command), set()
    if mocha.is_mocha_command(command):
        packages |= mocha.preloaded_packages(command)
    while queue:
        rel = queue.pop()
        if rel in seen:
            continue
        seen.add(rel)
        for spec in code.parse_js_files(root, [rel]).get(rel, code.JsFile()).requires:
            if (package := package_of(spec)) is not None:
                packages.add(package)
            elif (loaded := code.resolve(rel, spec, files, main)) is not None:
                queue.append(loaded)
    return packages


def lockfile(root: Path) -> str | None:
    return next((name for name in LOCKFILES if (Path(root) / name).is_file()), None)


def uses_npm(root: Path) -> bool:
    """A project whose tests a Node runner miner reads runs, which has no Python file and no
    Dockerfile (a Dockerized project's image installs what it needs: its build is its own)."""
    files = project_files(root)
    if any(f.endswith(".py") for f in files) or "package.json" not in files or "Dockerfile" in files:
        return False
    try:
        return bool(project_command(root))
    except ManifestError:
        return False  # the test command's choice says why the project is skipped


# The runners miner installs itself (package name -> what to install when the project's range does
# not install): the registry's newest, but mocha 12 needs node 20.19 and Debian's node is 18.
RUNNER_PACKAGES = {"tape": "tape", "mocha": "mocha@11", "jest": "jest"}


def _runner_package(command: str) -> str | None:
    if jest.is_jest_command(command):
        return "jest"
    return "tape" if tape.is_tape_command(command) else "mocha" if mocha.is_mocha_command(command) else None


def _runner_lines(command: str, dev: dict) -> list[str]:
    """The runner (tape, mocha, jest), miner's, beside the project (see the module's docstring)."""
    name = _runner_package(command)
    if name is None:
        return []
    wanted = f"{name}@{dev[name]}" if isinstance(dev.get(name), str) else RUNNER_PACKAGES[name]
    # the runner is miner's: when the registry has no version in the project's range, its newest
    fallback = f"miner: warning: {wanted} did not install: installing {RUNNER_PACKAGES[name]}"
    return [f"# the test runner, miner's: {wanted} in {RUNNER_DIR}, linked into the venv's bin and /sandbox/node_modules",
            f"(mkdir -p {RUNNER_DIR} && cd {RUNNER_DIR} && echo '{{\"private\": true}}' > package.json"
            f" && {{ npm install {NPM_FLAGS} {shlex.quote(wanted)} || {{ echo {shlex.quote(fallback)} >&2;"
            f" npm install {NPM_FLAGS} {shlex.quote(RUNNER_PACKAGES[name])}; }}; }}) || exit 1",
            f"mkdir -p {SANDBOX_ROOT}/node_modules && ln -sfn {RUNNER_DIR}/node_modules/{name} {SANDBOX_ROOT}/node_modules/{name}",
            f"ln -sfn {RUNNER_DIR}/node_modules/.bin/{name} {VENV_DIR}/bin/{name}"]


def install_lines(root: Path) -> list[str]:
    """The build's npm lines for a project that uses_npm (else none)."""
    if not uses_npm(root):
        return []
    manifest = read_manifest(root) or {}
    dev = manifest.get("devDependencies") if isinstance(manifest.get("devDependencies"), dict) else {}
    command = project_command(root) or ""
    lines = [*SYSTEM_NODE, *_runner_lines(command, dev)]
    if lock := lockfile(root):
        return [*lines, f"# node: the project's packages as {lock} locks them",
                f"npm ci {NPM_FLAGS} || exit 1"]
    keep = test_dependencies(root)
    dropped = sorted(set(dev) - set(keep))
    return [*lines,
            "# node: package.json's dependencies and the dev dependencies the test files load"
            f" ({', '.join(keep) or 'none'}); the others ({len(dropped)}: linters, coverage, types, the runner)"
            " are dropped from package.json",
            f"node -e {shlex.quote(_NARROW)} {' '.join(shlex.quote(k) for k in keep)} || exit 1",
            f"npm install {NPM_FLAGS} || exit 1"]


# npm's cache and logs for what miner asks the registry on the host (view, pack): miner's own folder,
# so a crawl leaves the user's ~/.npm as it was.
HOST_CACHE = Path.home() / ".cache" / "miner" / "npm"


def host_command(*args: str) -> list[str]:
    """An npm command miner runs on the host, its cache and logs in HOST_CACHE."""
    return ["npm", *args, f"--cache={HOST_CACHE}", f"--logs-dir={HOST_CACHE / '_logs'}"]


def registry_versions(name: str, timeout: float = 30.0) -> list[str]:
    """The versions the npm registry has of a package (`npm view NAME versions`, with npm's own
    registry and TLS settings); [] when npm or the registry does not answer."""
    try:
        done = subprocess.run(host_command("view", name, "versions", "--json"), capture_output=True, text=True,
                              timeout=timeout, check=False)
        found = json.loads(done.stdout) if done.returncode == 0 else []
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return []
    return [found] if isinstance(found, str) else [v for v in found if isinstance(v, str)]


def parse_inventory(output: str) -> list[NodePackage]:
    """The inventory script's JSON line as NodePackages (none when it printed nothing readable)."""
    for line in reversed(output.strip().splitlines()):
        try:
            rows = json.loads(line)
        except ValueError:
            continue
        if isinstance(rows, list):
            return [NodePackage(**row) for row in rows if isinstance(row, dict)]
    return []


def runtime_closure(packages: list[NodePackage], roots: list[str]) -> dict[str, int]:
    """path -> depth of the installed packages the project's `dependencies` (`roots`) reach, each
    dependency resolved as node does (the nearest node_modules above the requirer)."""
    by_path = {p.path: p for p in packages}
    depths: dict[str, int] = {}
    queue = [(f"node_modules/{name}", 0) for name in roots]
    while queue:
        where, depth = queue.pop(0)
        if where not in by_path or where in depths:
            continue
        depths[where] = depth
        for name in by_path[where].requires:
            queue.append((_resolve_from(where, name, by_path), depth + 1))
    return depths


def _resolve_from(where: str, name: str, by_path: dict[str, NodePackage]) -> str:
    """The install path node loads `name` from when the package at `where` requires it: its own
    node_modules, then each one above it."""
    parts = where.split("/")
    for end in range(len(parts), 0, -1):
        if parts[end - 1] == "node_modules":
            continue
        if (candidate := "/".join([*parts[:end], "node_modules", name])) in by_path:
            return candidate
    return f"node_modules/{name}"


def main_file(root: Path) -> str | None:
    """package.json's `main` (None without one, or when package.json does not parse)."""
    try:
        manifest = read_manifest(root) or {}
    except ManifestError:
        return None
    main = manifest.get("main")
    return main if isinstance(main, str) else None


def test_dependencies(root: Path) -> list[str]:
    """The dev dependencies the test files load (tape, miner's runner, aside): what the build keeps."""
    try:
        manifest, command = read_manifest(root) or {}, project_command(root)
    except ManifestError:
        return []
    dev = manifest.get("devDependencies") if isinstance(manifest.get("devDependencies"), dict) else {}
    return sorted((required_packages(root, command) & set(dev)) - set(RUNNER_PACKAGES)) if command and dev else []


def dependencies(root: Path) -> list[str]:
    """package.json's runtime dependencies (names)."""
    manifest = read_manifest(root) or {}
    deps = manifest.get("dependencies")
    return sorted(deps) if isinstance(deps, dict) else []


def inventory_command() -> str:
    return f"cd {shlex.quote(PROJECT_DIR)} && node -e {shlex.quote(INVENTORY_SCRIPT)}"



def package_targets(root: Path, packages: list[NodePackage]) -> list[Target]:
    """The installed packages the project's code and its tests load, nearest first: its runtime
    dependencies and the dev dependencies the test files require (a test helper is part of the
    environment the suite runs in, as a test extra is for Python), each with what they depend on
    and the programs of it the tests run (`bins_run`). tape, miner's runner, is not among them."""
    if not packages:
        return []
    runtime = runtime_closure(packages, dependencies(root))
    depths = {**runtime_closure(packages, test_dependencies(root)), **runtime}
    by_path = {p.path: p for p in packages}
    run = programs_run(root)
    return [Target(kind="node-package", name=by_path[where].name, path=where,
                   attrs={"version": by_path[where].version, "entry": by_path[where].entry, "depth": depth,
                          "entry_is_index": by_path[where].entry == f"{where}/index.js",
                          "test_only": where not in runtime,
                          "bins_run": sorted(set(by_path[where].bins) & run) if where.count("node_modules/") == 1
                          else []})
            for where, depth in sorted(depths.items(), key=lambda item: (item[1], item[0]))]


def setting_targets(packages: list[NodePackage], root: Path | None = None) -> list[Target]:
    """The process-wide settings node relies on: `node` (its options from the environment), for
    a project npm built; `npm` (its user config), when the tests run npm or npx."""
    if not packages:
        return []
    npm_setting = [Target(kind="setting", name="npm", attrs={"aspect": "npm"})] if root and runs_npm(root) else []
    return [Target(kind="setting", name="node", attrs={"aspect": "node"}), *npm_setting]


# a test that runs npm or npx names it as a program: execFileSync('npm', ...), spawn("npx ...")
_RUNS_NPM = re.compile(r"""['"`](?:npm|npx)['"` ]""")


def _test_texts(root: Path) -> list[str]:
    """The text of the files the test command runs (none when the command cannot be read)."""
    try:
        command = project_command(root) or ""
    except ManifestError:
        return []
    return [(Path(root) / rel).read_text(errors="replace") for rel in test_files(root, command)]


def runs_npm(root: Path) -> bool:
    """Whether the project's test files run npm or npx."""
    return any(_RUNS_NPM.search(text) for text in _test_texts(root))


def script_words(root: Path) -> set[str]:
    """The words of package.json's scripts (the programs `npm run NAME` may start)."""
    try:
        scripts = (read_manifest(root) or {}).get("scripts")
    except ManifestError:
        return set()
    if not isinstance(scripts, dict):
        return set()
    return {word for line in scripts.values() if isinstance(line, str) for word in re.split(r"[\s;&|()]+", line) if word}


def programs_named(text: str, scripts: set[str]) -> set[str]:
    """The programs of node_modules/.bin a file runs: named after `.bin/` or `npx`, or, when it
    runs npm (`npm run NAME`), a word of package.json's scripts (`scripts`)."""
    names = set(re.findall(r"\.bin/([\w.@-]+)", text))
    names |= set(re.findall(r"npx(?:\s+--?[\w-]+)*\s+([\w.@-]+)", text))
    return names | scripts if _RUNS_NPM.search(text) else names


def programs_run(root: Path) -> set[str]:
    """The programs of node_modules/.bin the test files run (programs_named)."""
    scripts = script_words(root)
    return {name for text in _test_texts(root) for name in programs_named(text, scripts)}
