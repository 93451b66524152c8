"""Python's part of `miner discover`: whether a project ships a test suite miner can run under
pytest, and the PyPI names file's check (`miner discover --pypi`).

A project is kept when it ships test modules pytest would collect (pytest's file patterns and
testpaths; with the files at hand, modules holding test functions, Test classes or unittest
TestCases), not written for nose, and no compiled build step (C/C++/Cython/Rust sources, setup.py
ext_modules, a compiling build backend) unless allowed. PyPI projects are pinned to the newest
release (matching a version spec, if given) that has an sdist and supports this Python; the sdist
is fetched into the source cache (so a later crawl reuses it) and inspected. GitHub repositories
(miner.discover) are judged on their tree alone (`judge_tree`).
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path, PurePosixPath
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from miner.archives import FetchError
from miner.ecosystems.base import Criteria, NameEntry, RegistryDiscovery, Unchecked
from miner.ecosystems.python.install import PytestConfig, read_pytest_config
from miner.ecosystems.python.registry import PYPI_URL, IndexUnreachable, index_json
from miner.ecosystems.python.registry import fetch as fetch_sdist
from miner.models import Source
from miner.projectfiles import in_test_tree, is_doc, project_files

MAX_SDIST_BYTES = 100_000_000

MAX_READ = 400_000  # characters of one file read for the content checks
DEFAULT_PYTHON_FILES = ("test_*.py", "*_test.py")
# Folders pytest does not recurse into by default (norecursedirs), besides dot-folders and *.egg.
NORECURSE = frozenset({"build", "dist", "node_modules", "venv", "_darcs", "CVS", "{arch}"})
TEST_CODE = re.compile(r"^[ \t]*(?:async[ \t]+)?def[ \t]+test|^[ \t]*class[ \t]+Test|\bTestCase\b", re.M)
USES_PYTEST = re.compile(r"^[ \t]*(?:import|from)[ \t]+pytest\b|^[ \t]*(?:async[ \t]+)?def[ \t]+test", re.M)
USES_NOSE = re.compile(r"^[ \t]*(?:import|from)[ \t]+nose(?:\.|\b)(?!2)", re.M)
COMPILED_SUFFIXES = {".c": "C", ".cc": "C++", ".cpp": "C++", ".cxx": "C++", ".pyx": "Cython", ".rs": "Rust"}
COMPILING_REQUIRES = ("maturin", "setuptools-rust", "scikit-build", "scikit-build-core", "meson-python", "cmake",
                      "cython", "pybind11", "cffi", "nanobind")
EXT_MODULES = re.compile(r"\bext_modules\b|\bExtension\(|\bcythonize\(|\brust_extensions\b|\bcffi_modules\b")
PYTEST_CONFIGS = ("pytest.ini", ".pytest.ini", "conftest.py", "tox.ini")
COLLECT_TIMEOUT = 120  # seconds pytest may take to choose a project's test modules
PLUGIN_DIR = Path(__file__).resolve().parents[2] / "assets" / "collect"  # miner/assets/collect

# -- judging a project by its files -----------------------------------------------------------


@dataclass
class Listing:
    """A project's files: relative POSIX paths, and (when the files are at hand) a reader."""

    paths: list[str]
    read: Callable[[str], str] | None = None
    config: PytestConfig = field(default_factory=PytestConfig)
    collected: list[str] | None = None  # the test modules pytest itself chose, when it was asked


def folder_listing(root: Path, ask_pytest: bool = True) -> Listing:
    """The listing of an unpacked project folder, with its files readable, and pytest's own choice
    of its test modules (unless `ask_pytest` is false)."""
    root = Path(root)

    def read(rel: str) -> str:
        try:
            with open(root / rel, encoding="utf-8", errors="replace") as handle:
                return handle.read(MAX_READ)
        except OSError:
            return ""

    return Listing(project_files(root), read, read_pytest_config(root), pytest_collected(root) if ask_pytest else None)


def _pytest_skips(rel: str) -> bool:
    folders = PurePosixPath(rel).parts[:-1]
    return any(p in NORECURSE or p.startswith(".") or p.endswith(".egg") for p in folders)


def _ignored(addopts: list[str]) -> list[str]:
    """The paths `--ignore`/`--ignore-glob` options in addopts leave out (as glob patterns)."""
    found = []
    for index, token in enumerate(addopts):
        option, sep, value = token.partition("=")
        if option in ("--ignore", "--ignore-glob"):
            value = value if sep else (addopts[index + 1] if index + 1 < len(addopts) else "")
            value = value.strip("/").removeprefix("./")
            found += [value, value + "/*"] if option == "--ignore" else [value]
    return [pattern for pattern in found if pattern and pattern != "/*"]


def collected_files(listing: Listing) -> list[str]:
    """Modules pytest collects: its own answer when it was asked (Listing.collected), else an
    estimate from a tree alone: its file patterns, under testpaths when those exist, less --ignore'd paths."""
    if listing.collected is not None:
        return listing.collected
    patterns = listing.config.python_files or list(DEFAULT_PYTHON_FILES)
    ignored = _ignored(listing.config.addopts)
    found = [rel for rel in listing.paths if rel.endswith(".py") and not _pytest_skips(rel)
             and any(_matches(rel, pattern) for pattern in patterns)
             and not any(fnmatch(rel, pattern) for pattern in ignored)]
    roots = [t.strip("/") for t in listing.config.testpaths if t.strip("/") not in ("", ".")]
    under = [rel for rel in found if any(rel.startswith(r + "/") or fnmatch(rel, r + "/*") for r in roots)]
    return under if roots and under else found  # pytest falls back to the rootdir when testpaths match nothing


def _matches(rel: str, pattern: str) -> bool:
    """pytest's rule for python_files: a pattern with a path separator is matched against the
    whole path (any folder may lead to it), one without against the file name."""
    if "/" in pattern:
        return fnmatch("/" + rel, "*/" + pattern.lstrip("/"))
    return fnmatch(PurePosixPath(rel).name, pattern)


def pytest_collected(root: Path, timeout: float = COLLECT_TIMEOUT) -> list[str] | None:
    """The test modules pytest itself selects in an unpacked project (relative paths), asked
    offline, read-only and bounded in time, with no module, conftest or plugin of the project
    loaded (assets/collect/miner_collect.py); None when pytest could not answer (not installed,
    bwrap missing, a configuration it refuses, out of time): the estimate from files stands then."""
    if importlib.util.find_spec("pytest") is None:  # it answers in a process of its own, with this interpreter
        return None
    from miner.sandbox.local import BWRAP, confined_tool

    if not os.path.exists(BWRAP):
        return None
    root = Path(root).resolve()
    base = [sys.executable, "-m", "pytest", "-p", "miner_collect", "-p", "no:cacheprovider", "-p", "no:doctest",
            "--noconftest", "--collect-only", "-q", "-s", "--rootdir", str(root)]
    visible = tuple(dict.fromkeys([sys.prefix, str(PLUGIN_DIR), str(root), *filter(os.path.isdir, sys.path)]))
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", "PYTHONPATH": str(PLUGIN_DIR),
           "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONDONTWRITEBYTECODE": "1", "HOME": "/tmp"}
    for extra in ([], ["-o", "addopts=", *_ignore_options(read_pytest_config(root).addopts)]):
        try:
            done = subprocess.run(confined_tool([*base, *extra], visible, str(root)), capture_output=True, text=True,
                                  timeout=timeout, env=env)
        except (OSError, subprocess.TimeoutExpired):
            return None
        if done.returncode in (0, 5):  # 5: no tests, as every module is left empty
            found = [line.split("\t", 1)[1] for line in done.stdout.splitlines() if line.startswith("miner-collect\t")]
            return sorted(Path(path).relative_to(root).as_posix() for path in found
                          if Path(path).is_relative_to(root))
        if done.returncode != 4:  # 4: usage error, such as an addopts option of a plugin not installed here
            return None
    return None


def _ignore_options(addopts: list[str]) -> list[str]:
    """The --ignore/--ignore-glob options of addopts, kept when the rest of addopts is dropped."""
    found = []
    for index, token in enumerate(addopts):
        option, sep, _ = token.partition("=")
        if option in ("--ignore", "--ignore-glob"):
            found += [token] if sep else addopts[index:index + 2]
    return found


def _sample(paths: list[str], n: int = 2) -> str:
    return ", ".join(paths[:n]) + (", ..." if len(paths) > n else "")


def _in_package(rel: str, packages: set[str]) -> bool:
    return any(str(parent) in packages for parent in PurePosixPath(rel).parents)


def _compiled_reason(listing: Listing) -> str | None:
    """Why the project needs a compiled build step, or None.

    Native sources count inside the Python packages (folders with __init__.py) or as a Rust crate
    at the top; C files of examples, tools or a bundled Windows launcher are not built.
    """
    packages = {str(PurePosixPath(rel).parent) for rel in listing.paths if rel.endswith("/__init__.py")}
    sources = [rel for rel in listing.paths if rel == "Cargo.toml" or (
        PurePosixPath(rel).suffix.lower() in COMPILED_SUFFIXES and _in_package(rel, packages)
        and not in_test_tree(rel) and not is_doc(rel))]
    if sources:
        kinds = sorted({COMPILED_SUFFIXES.get(PurePosixPath(r).suffix.lower(), "Rust") for r in sources})
        return f"compiled build step: {'/'.join(kinds)} sources ({_sample(sources)})"
    if listing.read is None:
        return None
    if "setup.py" in listing.paths and EXT_MODULES.search(listing.read("setup.py")):
        return "compiled build step: setup.py declares extension modules"
    if "pyproject.toml" in listing.paths:
        requires = _build_requires(listing.read("pyproject.toml"))
        compiling = [r for r in requires if r in COMPILING_REQUIRES]
        if compiling:
            return f"compiled build step: the build requires {', '.join(compiling)}"
    return None


def _build_requires(pyproject_text: str) -> list[str]:
    import tomllib

    try:
        data = tomllib.loads(pyproject_text)
    except tomllib.TOMLDecodeError:
        return []
    names = []
    for text in data.get("build-system", {}).get("requires", []) or []:
        try:
            names.append(canonicalize_name(Requirement(str(text)).name))
        except InvalidRequirement:
            continue
    return names


def assess(listing: Listing, options: Criteria) -> tuple[bool, str]:
    """(kept, reason): whether miner can run the project's tests, and why (not)."""
    files = collected_files(listing)
    if not files:
        tests_dir = [p for p in listing.paths if in_test_tree(p) and p.endswith(".py")]
        hint = (f" (the test folder holds {_sample(tests_dir)}, which pytest's patterns do not match)"
                if tests_dir else "")
        return False, f"no test files pytest would collect{hint}"
    runner = "pytest" if listing.config.source or any(p.split("/")[-1] in PYTEST_CONFIGS for p in listing.paths) else ""
    if listing.read is not None:
        texts = {rel: listing.read(rel) for rel in files}
        files = [rel for rel in files if TEST_CODE.search(texts[rel])]
        if not files:
            return False, "test-named files hold no test functions, Test classes or TestCases"
        nose = [rel for rel in files if USES_NOSE.search(texts[rel])]
        if nose:
            return False, f"tests are written for nose, which does not run on Python 3.10+ ({_sample(nose)})"
        if not runner:
            runner = "pytest" if any(USES_PYTEST.search(texts[rel]) for rel in files) else "unittest under pytest"
    compiled = _compiled_reason(listing)
    if compiled and not options.allow_compiled:
        return False, compiled
    if options.dockerized and "Dockerfile" not in listing.paths:
        return False, "no Dockerfile at the top of the project (--dockerized)"
    config = f", config in {listing.config.source}" if listing.config.source else ""
    how = f" ({runner}{config})" if runner else ""
    return True, f"{len(files)} test file{'s' * (len(files) != 1)}{how}" + (f"; {compiled}" if compiled else "")



def name_entry(text: str) -> NameEntry:
    try:
        req = Requirement(text.removeprefix("pypi:"))
    except InvalidRequirement:
        return NameEntry(text, problem="not a package name or requirement")
    return NameEntry(text, req.name, str(req.specifier))


def pypi_json(name: str, index: str = PYPI_URL) -> dict[str, Any] | None:
    """The index's JSON description of a project (None when the project does not exist)."""
    try:
        return index_json(name, index)
    except IndexUnreachable as exc:
        raise Unchecked(exc.reason) from None


def _python() -> Version:
    return Version(".".join(map(str, sys.version_info[:3])))


def _supports(requires_python: str | None, python: Version) -> bool:
    try:
        return SpecifierSet(requires_python or "").contains(python, prereleases=True)
    except InvalidSpecifier:
        return True  # an unreadable Requires-Python does not stop pip either


def choose_release(data: dict[str, Any], spec: str, python: Version | None = None) -> tuple[str, dict[str, Any]] | str:
    """(version, sdist file) of the newest release matching `spec` with an sdist that supports
    this Python, or the reason there is none."""
    python = python or _python()
    wanted = SpecifierSet(spec)
    releases = []
    for text, files in (data.get("releases") or {}).items():
        try:
            version = Version(text)
        except InvalidVersion:
            continue
        if wanted.contains(version, prereleases=bool(wanted.prereleases)):
            sdists = [f for f in files if f.get("packagetype") == "sdist" and not f.get("yanked")]
            sdists.sort(key=lambda f: not str(f.get("filename", "")).endswith(".tar.gz"))
            releases.append((version, sdists))
    if not releases:
        return f"no release matches {spec}" if spec else "no release on the index"
    with_sdist = sorted(((v, s[0]) for v, s in releases if s), key=lambda vs: vs[0], reverse=True)
    if not with_sdist:
        return f"no sdist on the index for {'any release' if len(releases) > 1 else 'its release'} (wheels only)"
    for version, sdist in with_sdist:
        if _supports(sdist.get("requires_python"), python):
            return str(version), sdist
    newest, sdist = with_sdist[0]
    return f"no release with an sdist supports Python {python} (newest, {newest}, needs {sdist.get('requires_python')})"


def check_pypi(entry: NameEntry, cache: Path, options: Criteria, index: str | None = None) -> tuple[bool, str, str]:
    """Pin one name to a release, fetch its sdist into the cache and judge its files."""
    if entry.problem:
        return False, entry.problem, ""
    data = pypi_json(entry.name, index or PYPI_URL)
    if data is None:
        return False, f"no project named {entry.name} on the index", ""
    chosen = choose_release(data, entry.spec)
    if isinstance(chosen, str):
        return False, chosen, ""
    version, sdist = chosen
    name = str(data.get("info", {}).get("name") or entry.name)
    pin = f"{name}=={version}"
    if int(sdist.get("size") or 0) > MAX_SDIST_BYTES:
        return False, f"{pin}: the sdist is {int(sdist['size']) / 1e6:.0f} MB (over {MAX_SDIST_BYTES / 1e6:.0f} MB)", ""
    source = Source(raw=f"pypi:{pin}", kind="pypi", location=pin)
    try:
        cache = Path(cache).resolve()
        cache.mkdir(parents=True, exist_ok=True)
        project = fetch_sdist(source, cache, sdist.get("url"), sdist.get("digests", {}).get("sha256"))
    except FetchError as exc:
        if "cannot download" in exc.reason:
            raise Unchecked(exc.reason) from None
        return False, f"{pin}: {exc.reason}", ""
    kept, reason = assess(folder_listing(project.path), options)
    return kept, reason if kept else f"{pin}: {reason}", f"pypi:{pin}"



def judge_tree(paths: list[str], criteria: Criteria) -> tuple[bool, str]:
    """(kept, reason) of a repository judged on its file tree alone (no file read)."""
    listing = Listing(paths, config=PytestConfig(source="pytest.ini") if "pytest.ini" in paths else PytestConfig())
    return assess(listing, criteria)


def entry_key(entry: NameEntry) -> str:
    return f"pypi:{canonicalize_name(entry.name) if entry.name else entry.text}{entry.spec}"


def spec_problem(spec: str) -> str | None:
    """Why `spec` is not a version specifier (None when it is)."""
    try:
        SpecifierSet(spec)
    except InvalidSpecifier:
        return f"--version {spec!r} is not a version specifier (e.g. '==2.0', '<3')"
    return None


DISCOVERY = RegistryDiscovery(
    prefix="pypi", entry=name_entry, key=entry_key, check=check_pypi, spec_problem=spec_problem,
    criteria=lambda: f"python={sys.version_info[0]}.{sys.version_info[1]}",
)
