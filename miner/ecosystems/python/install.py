"""Decide how to install a project and its test tooling: the BuildSpec a sandbox backend runs.

Reads the project's own metadata (pyproject.toml, setup.cfg, setup.py, an sdist's PKG-INFO) and
its pytest configuration, and writes one shell script, run in /sandbox/project with the venv
active and network on, that installs:
  1. the project itself (`pip install -e .[extras]`, falling back to a plain install),
  2. test requirements files and PEP 735 dependency groups / poetry groups for tests,
  3. the deps of the project's tox test environments for this interpreter (as `tox config`
     resolves them: `py311`, `py311-extra`, `test`; never lint/docs or alternative variants),
  4. pytest plus the plugins the pytest configuration relies on (addopts, -p, required_plugins).
Nothing already installed is upgraded. Source overrides adjust it: `python=3.12`,
`extras=a,b`, `install=<pip args>`, `tox_env=NAME[,NAME]` (empty: none), `env.NAME=value`.

    spec = build_spec(project)
"""

from __future__ import annotations

import ast
import configparser
import email.parser
import functools
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.markers import InvalidMarker, Marker, default_environment
from packaging.requirements import InvalidRequirement, Requirement

from miner.models import VENV_DIR, Project
from miner.sandbox.base import BuildError, BuildSpec, Limits

LOCK_CONSTRAINTS = f"{VENV_DIR}/miner-lock-constraints.txt"  # the lock's pins, written by the install script
TEST_EXTRAS = ("test", "tests", "testing", "dev")
TEST_GROUPS = ("test", "tests", "dev")
# Factors of a tox environment name that still mean "the test suite" (others name a variant, a
# linter or a tool: `py311-django42`, `lint`, `docs`); a python factor must name this interpreter.
TOX_TEST_FACTORS = frozenset({"py", "extra", "extras", "all", "full", "test", "tests", "testing", "unit"})
TOX_PYTHON_FACTOR = re.compile(r"^(?:py|python)(\d)\.?(\d+)?$")
TOX_CONFIG_FILES = ("tox.ini", "tox.toml", "pyproject.toml", "setup.cfg")  # where tox reads its configuration
TOX_CONFIG_LINE = re.compile(r"^(\[.*\]|\s+\S.*|[\w.-]+ =.*|)$")  # a section, a continuation, a key or blank
REQUIREMENT_GLOBS = (
    "requirements-test*.txt",
    "requirements_test*.txt",
    "test-requirements.txt",
    "test_requirements.txt",
    "requirements/test*.txt",
    "requirements-dev.txt",
    "dev-requirements.txt",
    "tests/requirements.txt",
)
# addopts option (exact, or prefix when it ends with "*") -> the distribution that provides it
OPTION_PLUGINS = {
    "--cov*": "pytest-cov",
    "--no-cov*": "pytest-cov",
    "-n": "pytest-xdist",
    "--numprocesses": "pytest-xdist",
    "--dist": "pytest-xdist",
    "--maxprocesses": "pytest-xdist",
    "--timeout*": "pytest-timeout",
    "--benchmark-*": "pytest-benchmark",
    "--reruns*": "pytest-rerunfailures",
    "--randomly-*": "pytest-randomly",
    "--asyncio-mode": "pytest-asyncio",
    "--hypothesis-*": "hypothesis",
    "--mpl*": "pytest-mpl",
    "--doctest-glob": "",
}
# ini keys that only a plugin understands
INI_PLUGINS = {
    "timeout": "pytest-timeout",
    "timeout_method": "pytest-timeout",
    "asyncio_mode": "pytest-asyncio",
    "asyncio_default_fixture_loop_scope": "pytest-asyncio",
    "env": "pytest-env",
    "DJANGO_SETTINGS_MODULE": "pytest-django",
    "django_find_project": "pytest-django",
    "mock_use_standalone_module": "pytest-mock",
    "rerun_except": "pytest-rerunfailures",
}
# `-p MODULE` -> distribution, where the name does not follow the pytest_x -> pytest-x rule
PLUGIN_MODULES = {
    "xdist": "pytest-xdist",
    "pytest_cov": "pytest-cov",
    "timeout": "pytest-timeout",
    "pytest_timeout": "pytest-timeout",
    "randomly": "pytest-randomly",
    "anyio": "anyio",
    "trio": "pytest-trio",
    "hypothesis": "hypothesis",
    "pytest_asyncio": "pytest-asyncio",
    "asyncio": "pytest-asyncio",
    "pytest_mock": "pytest-mock",
    "rerunfailures": "pytest-rerunfailures",
}


def normalize(name: str) -> str:
    """PEP 503/685 normalised name (extras, groups, distributions)."""
    return re.sub(r"[-_.]+", "-", name).lower()


# -- reading project metadata ----------------------------------------------------------------


def read_toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, OSError):
        return {}


def read_ini(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keep key case (DJANGO_SETTINGS_MODULE)
    if path.is_file():
        try:
            parser.read_string(path.read_text(encoding="utf-8", errors="replace"))
        except configparser.Error:
            return configparser.ConfigParser(interpolation=None)
    return parser


def pkg_info_extras(root: Path) -> set[str]:
    """Provides-Extra of an sdist's PKG-INFO (top level, or the .egg-info setuptools writes)."""
    extras: set[str] = set()
    for pkg_info in [root / "PKG-INFO", *root.glob("*.egg-info/PKG-INFO"), *root.glob("src/*.egg-info/PKG-INFO")]:
        if pkg_info.is_file():
            message = email.parser.Parser().parsestr(pkg_info.read_text(encoding="utf-8", errors="replace"), headersonly=True)
            extras.update(message.get_all("Provides-Extra") or [])
    return extras


def _literal_keys(node: ast.AST, assignments: dict[str, ast.AST]) -> set[str]:
    if isinstance(node, ast.Name) and node.id in assignments:
        node = assignments[node.id]
    if isinstance(node, ast.Dict):
        return {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict":
        return {kw.arg for kw in node.keywords if kw.arg}
    return set()


def setup_py_extras(path: Path) -> set[str]:
    """Keys of a literal `extras_require` passed to setup() (directly or through a module-level name)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    except (SyntaxError, ValueError, OSError):
        return set()
    assignments = {
        target.id: stmt.value
        for stmt in tree.body
        if isinstance(stmt, ast.Assign)
        for target in stmt.targets
        if isinstance(target, ast.Name)
    }
    extras: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg == "extras_require":
                    extras |= _literal_keys(kw.value, assignments)
    return extras


def declared_extras(root: Path) -> set[str]:
    """Every optional-dependency extra the project declares, whatever its build tool."""
    pyproject = read_toml(root / "pyproject.toml")
    tool = pyproject.get("tool", {})
    extras = set(pyproject.get("project", {}).get("optional-dependencies", {}))
    extras |= set(tool.get("poetry", {}).get("extras", {}))
    extras |= set(tool.get("flit", {}).get("metadata", {}).get("requires-extra", {}))
    setup_cfg = read_ini(root / "setup.cfg")
    if setup_cfg.has_section("options.extras_require"):
        extras |= set(setup_cfg.options("options.extras_require"))
    if (root / "setup.py").is_file():
        extras |= setup_py_extras(root / "setup.py")
    return extras | pkg_info_extras(root)


def is_installable(root: Path) -> bool:
    """Whether pip can install the folder as a distribution (not just a folder of scripts)."""
    pyproject = read_toml(root / "pyproject.toml")
    if "build-system" in pyproject or "project" in pyproject:
        return True
    return (root / "setup.py").is_file()


def dependency_group(groups: dict[str, Any], name: str, seen: frozenset[str] = frozenset()) -> list[str]:
    """The requirement strings of a PEP 735 group, with include-group entries expanded."""
    wanted = normalize(name)
    found = next((v for k, v in groups.items() if normalize(k) == wanted), None)
    if not isinstance(found, list) or wanted in seen:
        return []
    requirements: list[str] = []
    for item in found:
        if isinstance(item, str):
            requirements.append(item)
        elif isinstance(item, dict) and isinstance(item.get("include-group"), str):
            requirements += dependency_group(groups, item["include-group"], seen | {wanted})
    return requirements


def poetry_test_requirements(pyproject: dict[str, Any]) -> list[str]:
    """Names from poetry's test/dev groups (poetry's version syntax is not pip's: names only)."""
    poetry = pyproject.get("tool", {}).get("poetry", {})
    tables = [poetry.get("dev-dependencies", {})]
    tables += [g.get("dependencies", {}) for n, g in poetry.get("group", {}).items() if normalize(n) in TEST_GROUPS]
    names = {name for table in tables if isinstance(table, dict) for name in table if name.lower() != "python"}
    return sorted(names)


def group_requirements(root: Path) -> list[str]:
    """Requirements of the project's test dependency groups (PEP 735 and poetry)."""
    pyproject = read_toml(root / "pyproject.toml")
    groups = pyproject.get("dependency-groups", {})
    requirements: list[str] = []
    if isinstance(groups, dict):
        for name in TEST_GROUPS:
            requirements += dependency_group(groups, name)
    requirements += poetry_test_requirements(pyproject)
    return list(dict.fromkeys(requirements))


def _marker_holds(text: str, environment: dict[str, str]) -> bool:
    try:
        return Marker(text).evaluate(environment)
    except (InvalidMarker, ValueError):
        return False


def locked_versions(root: Path, version: str) -> dict[str, str]:
    """name -> version the project's uv.lock pins for Python `version` ("3.11"): packages from the
    index only (not the project itself, nor a path, git or URL source); a name locked at several
    versions is pinned where the lock's resolution markers choose one for this Python."""
    packages = read_toml(root / "uv.lock").get("package", [])
    environment: dict[str, str] = dict(default_environment())  # type: ignore[arg-type]
    if not environment["python_full_version"].startswith(f"{version}."):
        environment.update(python_version=version, python_full_version=f"{version}.0")
    found: dict[str, set[str]] = {}
    for package in packages if isinstance(packages, list) else []:
        if not isinstance(package, dict) or not isinstance(package.get("source"), dict):
            continue
        if "registry" not in package["source"] or not package.get("name") or not package.get("version"):
            continue
        markers = package.get("resolution-markers") or []
        if markers and not any(_marker_holds(str(m), environment) for m in markers):
            continue
        found.setdefault(normalize(str(package["name"])), set()).add(str(package["version"]))
    return {name: versions.pop() for name, versions in sorted(found.items()) if len(versions) == 1}


def requirement_files(root: Path) -> list[str]:
    """Project-relative test requirements files."""
    found: list[str] = []
    for pattern in REQUIREMENT_GLOBS:
        found += sorted(p.relative_to(root).as_posix() for p in root.glob(pattern) if p.is_file())
    return list(dict.fromkeys(found))


# -- tox test environments ----------------------------------------------------------------


@dataclass
class ToxEnvironments:
    """The deps and extras of the tox environments chosen for the build (`tox config` resolves them)."""

    names: list[str] = field(default_factory=list)
    deps: list[str] = field(default_factory=list)
    extras: list[str] = field(default_factory=list)
    error: str = ""


def _python_factor_matches(factor: str, version: str) -> bool | None:
    """True/False for a python factor (py311, py3.11, py3), None for any other factor."""
    found = TOX_PYTHON_FACTOR.match(factor)
    if not found:
        return None
    major, _, minor = version.partition(".")
    return found.group(1) == major and found.group(2) in (None, minor)


def is_test_environment(name: str, version: str) -> bool:
    """Whether a tox environment runs the plain test suite on interpreter `version` ("3.11")."""
    factors = name.split("-")
    for factor in factors:
        matches = _python_factor_matches(factor, version)
        if matches is False or (matches is None and factor not in TOX_TEST_FACTORS):
            return False
    return bool(factors)


def _tox_config(root: Path) -> configparser.ConfigParser | None:
    """Every tox environment's resolved deps and extras, or None when the project has no tox config."""
    has_config = (root / "tox.ini").is_file() or (root / "tox.toml").is_file() or \
        "tox" in read_toml(root / "pyproject.toml").get("tool", {}) or read_ini(root / "setup.cfg").has_section("tox:tox")
    if not has_config:
        return None
    if (root / "toxfile.py").exists():  # tox would import it: the project's code, on the host
        raise BuildError("toxfile.py (a tox plugin of the project) is not run outside the sandbox")
    stamp = tuple((n, (info := (root / n).stat()).st_mtime_ns, info.st_size)
                  for n in TOX_CONFIG_FILES if (root / n).is_file())
    returncode, output = _run_tox_config(str(root.resolve()), stamp)
    if returncode != 0:
        raise BuildError(f"tox config failed: {output.strip()[-300:]}")
    # tox prints notes among the sections ("py3.11: environment py3.11 marked as unavailable, ...")
    lines = [line for line in output.splitlines() if TOX_CONFIG_LINE.match(line)]
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.read_file(io.StringIO("\n".join(lines)))
    return parser


@functools.lru_cache(maxsize=64)
def _run_tox_config(root: str, stamp: tuple) -> tuple[int, str]:
    """`tox config` of a project (0.3-1 s), once per state of its config files (`stamp`): a
    project's batches each compute its build spec."""
    done = subprocess.run([sys.executable, "-m", "tox", "config", "-e", "ALL", "-k", "deps", "extras",
                           "--no-provision", "-c", root],
                          capture_output=True, text=True, timeout=120, cwd=root, stdin=subprocess.DEVNULL)
    return done.returncode, done.stdout if done.returncode == 0 else (done.stderr or done.stdout)


def _tox_dep(line: str, root: Path) -> str | None:
    """A deps line as a pip argument: a requirement, or `-r`/`-c` of a project file; else None."""
    for flag in ("-r", "-c"):
        if line.startswith(flag):
            path, base = (root / line[len(flag):].strip()).resolve(), root.resolve()
            inside = path.is_relative_to(base) and path.is_file()
            return f"{flag}{path.relative_to(base).as_posix()}" if inside else None
    try:
        Requirement(line)
    except InvalidRequirement:
        return None  # the project itself (`.`, `-e .`), URLs, options
    return line


def tox_environments(root: Path, version: str, chosen: list[str] | None = None) -> ToxEnvironments:
    """The deps and extras of the project's tox environments for interpreter `version`: those
    named in `chosen`, else every environment `is_test_environment` accepts."""
    try:
        config = _tox_config(root)
    except (OSError, subprocess.SubprocessError, BuildError, configparser.Error) as error:
        return ToxEnvironments(error=str(error))
    found = ToxEnvironments()
    for section in config.sections() if config else []:
        name = section.removeprefix("testenv:")
        if section == name or not (name in chosen if chosen is not None else is_test_environment(name, version)):
            continue
        found.names.append(name)
        for line in config.get(section, "deps", fallback="").splitlines():
            dep = _tox_dep(line.strip(), root) if line.strip() else None
            if dep and dep not in found.deps:
                found.deps.append(dep)
        extras = config.get(section, "extras", fallback="").split()
        found.extras += [e for e in extras if e not in found.extras]
    return found


# -- pytest configuration -----------------------------------------------------------------


@dataclass
class PytestConfig:
    """The parts of the project's pytest configuration that decide which plugins it needs."""

    addopts: list[str] = field(default_factory=list)
    required_plugins: list[str] = field(default_factory=list)
    keys: set[str] = field(default_factory=set)
    testpaths: list[str] = field(default_factory=list)  # where pytest collects (empty: everywhere)
    python_files: list[str] = field(default_factory=list)  # test module patterns (empty: pytest's default)
    source: str = ""  # the file the configuration came from


def _split(value: Any) -> list[str]:
    if isinstance(value, list):
        return [str(v) for v in value]
    try:
        return shlex.split(str(value or ""))
    except ValueError:
        return str(value or "").split()


def read_pytest_config(root: Path) -> PytestConfig:
    """The first pytest configuration pytest itself would use, in its own precedence order."""
    for name, section in (("pytest.ini", "pytest"), (".pytest.ini", "pytest")):
        ini = read_ini(root / name)
        if (root / name).is_file():
            return _ini_config(ini, section, name)
    pyproject = read_toml(root / "pyproject.toml").get("tool", {})
    table = pyproject.get("pytest", {})
    table = table.get("ini_options", table) if isinstance(table, dict) else {}
    if table:
        return PytestConfig(_split(table.get("addopts")), _split(table.get("required_plugins")), set(table),
                            _split(table.get("testpaths")), _split(table.get("python_files")), "pyproject.toml")
    for name, section in (("tox.ini", "pytest"), ("setup.cfg", "tool:pytest")):
        ini = read_ini(root / name)
        if ini.has_section(section):
            return _ini_config(ini, section, name)
    return PytestConfig()


def _ini_config(ini: configparser.ConfigParser, section: str, name: str) -> PytestConfig:
    if not ini.has_section(section):
        return PytestConfig()
    values = dict(ini.items(section))
    return PytestConfig(_split(values.get("addopts")), _split(values.get("required_plugins")), set(values),
                        _split(values.get("testpaths")), _split(values.get("python_files")), name)


def _option_plugin(token: str) -> str | None:
    option = token.split("=", 1)[0]
    for pattern, dist in OPTION_PLUGINS.items():
        if (pattern.endswith("*") and option.startswith(pattern[:-1])) or option == pattern:
            return dist or None
    if re.fullmatch(r"-n(\d+|auto|logical)", option):  # -n4 / -nauto
        return "pytest-xdist"
    return None


def _module_plugin(module: str, root: Path) -> str | None:
    module = module.split(".")[0]
    if module.startswith("no:") or (root / f"{module}.py").exists() or (root / module).is_dir():
        return None  # disabled, or the project's own plugin module
    if module in PLUGIN_MODULES:
        return PLUGIN_MODULES[module]
    return normalize(module) if module.startswith("pytest_") else None


def needed_plugins(root: Path) -> list[str]:
    """Distributions the project's pytest configuration needs beyond pytest itself."""
    config = read_pytest_config(root)
    needed = list(config.required_plugins)
    tokens = config.addopts
    for i, token in enumerate(tokens):
        if token == "-p" and i + 1 < len(tokens):
            dist = _module_plugin(tokens[i + 1], root)
        elif token.startswith("-p") and len(token) > 2 and not token.startswith("--"):
            dist = _module_plugin(token[2:], root)
        else:
            dist = _option_plugin(token)
        if dist:
            needed.append(dist)
    needed += [INI_PLUGINS[k] for k in sorted(config.keys) if k in INI_PLUGINS]
    return list(dict.fromkeys(needed))


# -- interpreter ----------------------------------------------------------------------------


def _real_executable(candidate: str) -> str | None:
    """The interpreter a command name really runs (resolves pyenv shims), or None."""
    try:
        done = subprocess.run(
            [candidate, "-c", "import sys; print(sys.executable)"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return None
    path = done.stdout.strip()
    return path if done.returncode == 0 and path else None


def resolve_python(version: str | None, backend: str = "local") -> str:
    """The interpreter that creates the venv: the current one by default, or python<version>.

    Local workspaces need a host path; container backends get a name resolved inside the image.
    """
    if backend != "local":
        return f"python{version}" if version else "python3"
    if not version:
        # The base interpreter, not a venv's python: miner itself may run from a venv in a
        # folder the sandbox hides (/tmp is private inside it).
        return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)
    name = f"python{version}"
    found = shutil.which(name)
    if found and (real := _real_executable(found)):
        return real
    pyenv = shutil.which("pyenv")
    if pyenv:
        root = subprocess.run([pyenv, "root"], capture_output=True, text=True).stdout.strip()
        for candidate in sorted(Path(root, "versions").glob(f"{version}*/bin/{name}"), reverse=True):
            if real := _real_executable(str(candidate)):
                return real
    raise BuildError(f"no interpreter for python={version} on this machine (tried {name} and pyenv)")


# -- the install script ---------------------------------------------------------------------


def pip_errors(output: str) -> list[str]:
    """pip's own ERROR lines in its output (those of a build subprocess included), in order: what
    went wrong, where its closing notes only say that something did."""
    return [line.strip() for line in output.splitlines() if line.strip().startswith("ERROR:")]


def _pip(args: list[str], locked: bool = False) -> str:
    """A pip install; `locked`: with the lock's constraints first, then without them."""
    plain = "python -m pip install --progress-bar off " + " ".join(shlex.quote(a) for a in args)
    return f"{plain} -c {LOCK_CONSTRAINTS} || {plain}" if locked else plain


def _project_lines(root: Path, extras: list[str], locked: bool = False) -> list[str]:
    if not is_installable(root):
        if (root / "requirements.txt").is_file():
            return ["# not a distribution: install its requirements",
                    f"{_group(_pip(['-r', 'requirements.txt'], locked))} || exit 1"]
        return ["# not a distribution and no requirements.txt: nothing to install for the project itself"]
    attempts = []
    if extras:
        suffix = "[" + ",".join(extras) + "]"
        attempts += [["-e", f".{suffix}"], [f".{suffix}"]]
    attempts += [["-e", "."], ["."]]
    chain = " || ".join(_pip(a, locked) for a in attempts)
    return ["# the project itself: editable with its test extras if possible", f"{chain} || exit 1"]


def _optional_lines(label: str, commands: list[str]) -> list[str]:
    """Lines that warn instead of failing: the healthy suite shows whether they mattered."""
    return [f"{_group(c)} || echo {shlex.quote(f'miner: warning: {label} failed: {c}')} >&2" for c in commands]


def _group(command: str) -> str:
    """A command with its own fallbacks as one, for a `||` after it."""
    return f"{{ {command}; }}" if " || " in command else command


def _optional_each(label: str, args: list[str], locked: bool = False) -> list[str]:
    """One install of every requirement, or, when it fails, one install each: a docs tool that
    cannot install here must not take the test tools of the same group with it."""
    whole = _pip(args, locked)
    if len(args) < 2:
        return _optional_lines(label, [whole])
    warn = shlex.quote(f"miner: warning: {label} failed as a whole: installing its requirements one at a time")
    each = "; ".join(_optional_lines(label, [_pip([a], locked) for a in args]))
    return [f"{_group(whole)} || {{ echo {warn} >&2; {each}; }}"]


def _lock_lines(pins: dict[str, str]) -> list[str]:
    body = "\n".join(f"{name}=={version}" for name, version in pins.items())
    return [f"# the versions uv.lock pins for this Python ({len(pins)}), constraints of every install",
            f"cat > {LOCK_CONSTRAINTS} <<'MINER_LOCK'\n{body}\nMINER_LOCK"]


def install_script(project: Project, extras: list[str], extra_args: list[str],
                   tox: ToxEnvironments | None = None, pins: dict[str, str] | None = None) -> str:
    root = project.path
    tox = tox or ToxEnvironments()
    locked = bool(pins)
    lines = ["set -u", *(_lock_lines(pins) if pins else []), *_project_lines(root, extras, locked)]
    files = requirement_files(root)
    if files:
        lines += ["# test requirements files", *_optional_lines("requirements", [_pip(["-r", f], locked) for f in files])]
    groups = group_requirements(root)
    if groups:
        lines += ["# test dependency groups", *_optional_each("dependency group", groups, locked)]
    if tox.deps:
        lines += [f"# deps of the tox environments {', '.join(tox.names)}",
                  *_optional_each("tox deps", tox.deps, locked)]
    elif tox.error:
        lines += [f"# tox environments not read: {' '.join(tox.error.split())[:200]}"]
    if extra_args:
        lines += ["# install= override", _pip(extra_args) + " || exit 1"]
    plugins = needed_plugins(root)
    lines += ["# pytest and the plugins its configuration names", f"{_group(_pip(['pytest'], locked))} || exit 1"]
    if plugins:
        lines += _optional_lines("pytest plugin", [_pip([p], locked) for p in plugins])
    return "\n".join(lines) + "\n"


def chosen_extras(project: Project, tox_extras: list[str] = ()) -> list[str]:
    """The `extras=` override, else the declared extras among test/tests/testing/dev; then those
    of `tox_extras` (the chosen tox environments') the project declares."""
    override = project.source.overrides.get("extras")
    declared = {normalize(e): e for e in declared_extras(project.path)}
    if override is not None:
        chosen = [e.strip() for e in override.split(",") if e.strip()]
    else:
        chosen = [declared[name] for name in TEST_EXTRAS if name in declared]
    return list(dict.fromkeys(chosen + [e for e in tox_extras if normalize(e) in declared]))


def override_env(project: Project) -> dict[str, str]:
    """`env.NAME=value` overrides: the healthy environment's variables."""
    return {k.removeprefix("env."): v for k, v in project.source.overrides.items() if k.startswith("env.")}


def chosen_tox(project: Project) -> ToxEnvironments:
    """The tox environments to take deps from: the `tox_env=` override, else the test ones for
    the build's interpreter (the `python=` override, else this one)."""
    override = project.source.overrides.get("tox_env")
    chosen = [e.strip() for e in override.split(",") if e.strip()] if override is not None else None
    if chosen == []:
        return ToxEnvironments()
    return tox_environments(project.path, build_python_version(project), chosen)


def build_python_version(project: Project) -> str:
    """The build interpreter's "major.minor": the `python=` override, else this one's."""
    return project.source.overrides.get("python") or f"{sys.version_info.major}.{sys.version_info.minor}"


def build_spec(project: Project, limits: Limits | None = None, *, backend: str = "local") -> BuildSpec:
    """How to build `project`'s Python part: interpreter, install script, environment, limits
    (miner.ecosystems.build_spec adds the other ecosystems' lines)."""
    overrides = project.source.overrides
    tox = chosen_tox(project)
    script = install_script(project, chosen_extras(project, tox.extras), shlex.split(overrides.get("install", "")), tox,
                            locked_versions(project.path, build_python_version(project)))
    return BuildSpec(
        python=resolve_python(overrides.get("python"), backend),
        install_script=script,
        env=override_env(project),
        limits=limits or Limits(),
    )
