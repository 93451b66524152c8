"""Discovery: find projects miner can mine, on PyPI or GitHub, and write a repos file `miner crawl` takes as is.

    miner discover --pypi names.txt [--from 100 --to 200] [--version SPEC] [--out FILE]
    miner discover --github QUERY [--language python --min-stars 50 --pushed-since 2025-01-01] [--dockerized]
    miner discover --npm names.txt     # NAME or NAME@RANGE a line: npm packages whose tarball ships its tests

A project is kept when it ships a test suite miner can run: test modules pytest would collect
(pytest's file patterns and testpaths; with the files at hand, modules holding test functions,
Test classes or unittest TestCases), not written for nose, and no compiled build step
(C/C++/Cython/Rust sources, setup.py ext_modules, a compiling build backend) unless allowed.
PyPI projects are pinned to the newest release (matching a version spec, if given) that has an
sdist and supports this Python; the sdist is fetched into the store's source cache (so a later
crawl reuses it) and inspected. GitHub repositories come from the search API (PyGithub) and are
judged on their tree, pinned to their default branch's commit (`URL@SHA`); rate limits are
waited out and the run resumes. npm packages are pinned to the newest version (matching a range,
if given), their registry tarball fetched (npm pack) and kept when it ships a test suite a Node
runner miner reads runs (miner.ecosystems.node) and has runtime dependencies to break.

Every checked project becomes a `Record` (name, kept, reason, line). Records are appended to a
state file next to the output (OUT.state.jsonl), so a discovery interrupted and run again skips
what it checked (with the same criteria); the output is rewritten after each project. A
project that could not be checked for a passing reason (network) is not recorded as checked.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from fnmatch import fnmatch
from pathlib import Path, PurePosixPath
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from miner.ecosystems.node.npm import dependencies as npm_dependencies
from miner.ecosystems.node.npm import host_command
from miner.ecosystems.node.runner import project_command
from miner.ecosystems.python.install import PytestConfig, read_pytest_config
from miner.models import Source
from miner.projectfiles import in_test_tree, is_doc, project_files
from miner.ecosystems.node.registry import NPM_NAME
from miner.ecosystems.python.registry import PYPI_URL, IndexUnreachable, index_json
from miner.sources import FetchError, fetch

GITHUB_URL = "https://api.github.com"
MAX_SDIST_BYTES = 100_000_000
HTTP_TIMEOUT = 60  # GitHub API calls
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
PLUGIN_DIR = Path(__file__).parent / "assets" / "collect"


class DiscoverError(Exception):
    """Bad input to a discovery (a missing names file, a bad range, a rejected search query)."""


class Unchecked(Exception):
    """A project could not be checked for a passing reason (network): not recorded, retried next run."""


@dataclass
class Record:
    """The verdict on one project: kept (with its repos line) or left out, and why."""

    key: str  # identity across runs: pypi:NAME[SPEC] or github:HOST/OWNER/NAME
    name: str
    kept: bool
    reason: str
    line: str = ""  # the repos.txt line of a kept project
    criteria: str = ""  # the options the verdict depends on; another value means check again
    resumed: bool = False  # read from the state file instead of checked in this run

    def public(self) -> dict[str, Any]:
        return {"name": self.name, "kept": self.kept, "reason": self.reason, "line": self.line,
                "resumed": self.resumed}


@dataclass
class Options:
    allow_compiled: bool = False
    dockerized: bool = False  # keep only projects with a Dockerfile at their top
    limit: int | None = None  # stop after this many kept projects

    def criteria(self, *extra: str) -> str:
        return ";".join([f"compiled={int(self.allow_compiled)}", f"docker={int(self.dockerized)}", *extra])


@dataclass
class Candidate:
    """One project to check: its key and name, and how to check it."""

    key: str
    name: str
    check: Callable[[], tuple[bool, str, str]]  # -> (kept, reason, line); may raise Unchecked
    criteria: str = ""


@dataclass
class Discovery:
    """What a run found, in the order the projects were met."""

    records: list[Record] = field(default_factory=list)
    out: Path | None = None

    @property
    def kept(self) -> list[Record]:
        return [r for r in self.records if r.kept]


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


def assess(listing: Listing, options: Options) -> tuple[bool, str]:
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


# -- the state file and the repos file --------------------------------------------------------


def state_path(out: Path) -> Path:
    return out.with_name(out.name + ".state.jsonl")


class Ledger:
    """The records checked so far (OUT.state.jsonl, one JSON object a line, appended)."""

    def __init__(self, out: Path) -> None:
        self.path = state_path(out)
        self.records: dict[str, Record] = {}
        if self.path.is_file():
            for line in self.path.read_text(encoding="utf-8").splitlines():
                try:
                    data = json.loads(line)
                    record = Record(**{k: v for k, v in data.items() if k in Record.__dataclass_fields__})
                except (ValueError, TypeError):
                    continue  # a line cut by an interruption
                self.records[record.key] = record

    def get(self, key: str, criteria: str) -> Record | None:
        record = self.records.get(key)
        return record if record is not None and record.criteria == criteria else None

    def add(self, record: Record) -> None:
        self.records[record.key] = record
        data = {k: v for k, v in asdict(record).items() if k != "resumed"}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(data) + "\n")
            handle.flush()
            os.fsync(handle.fileno())


def write_repos(out: Path, header: str, records: list[Record]) -> None:
    """Rewrite the repos file atomically: kept lines (with their evidence), then the left out as comments."""
    kept = [r for r in records if r.kept]
    left = [r for r in records if not r.kept]
    lines = [f"# {header}: {len(kept)} kept of {len(records)} checked "
             f"({datetime.now(timezone.utc).strftime('%Y-%m-%d')}).",
             "# `miner crawl --repos` takes this file as it is; the state of the discovery is in "
             f"{state_path(out).name}.", ""]
    lines += [f"{r.line}  # {_one_line(r.reason)}" for r in kept]
    if left:
        lines += ["", "# Left out:"] + [f"#   {r.name}: {_one_line(r.reason)}" for r in left]
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    tmp.replace(out)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def run(candidates: Iterable[Candidate], out: Path, header: str, options: Options,
        say: Callable[[str], None], total: int | None = None) -> Discovery:
    """Check each candidate (or take its verdict from the state file), rewriting `out` as it goes."""
    ledger, found = Ledger(out), Discovery(out=out)
    for number, candidate in enumerate(candidates, 1):
        if options.limit is not None and len(found.kept) >= options.limit:
            break
        counter = f"[{number}/{total}]" if total else f"[{number}]"
        record = ledger.get(candidate.key, candidate.criteria)
        if record is not None:
            record.resumed = True
        else:
            try:
                kept, reason, line = candidate.check()
            except Unchecked as exc:
                found.records.append(Record(candidate.key, candidate.name, False, f"not checked: {exc}"))
                say(f"{counter} {candidate.name}: not checked, retried on the next run ({exc})")
                continue
            record = Record(candidate.key, candidate.name, kept, reason, line, candidate.criteria)
            ledger.add(record)
        found.records.append(record)
        verdict = f"kept {record.line}" if record.kept else "left out"
        say(f"{counter} {candidate.name}: {verdict}: {record.reason}" + (" (checked before)" if record.resumed else ""))
        write_repos(out, header, found.records)
    write_repos(out, header, found.records)
    return found


# -- PyPI -------------------------------------------------------------------------------------


@dataclass
class NameEntry:
    """One entry of a names file: a requirement (NAME, NAME==1.2, NAME>=2), or why it is not one."""

    text: str
    name: str = ""
    spec: str = ""
    problem: str = ""


def read_names(path: Path, start: int | None = None, end: int | None = None,
               parse: Callable[[str], NameEntry] | None = None) -> list[NameEntry]:
    """The entries of a names file (one a line, `#` comments), positions start..end (1-based,
    inclusive), each read by `parse` (a PyPI requirement by default)."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise DiscoverError(f"cannot read the names file {path}: {exc}") from None
    entries = []
    for line in lines:
        text = line.split("#", 1)[0].strip()
        if text:
            entries.append((parse or _name_entry)(text))
    if start is not None and end is not None and end < start:
        raise DiscoverError(f"--to {end} is before --from {start}")
    if start is not None and start > len(entries):
        raise DiscoverError(f"--from {start} is past the end of {path} ({len(entries)} names)")
    return entries[(start or 1) - 1:end]


def _name_entry(text: str) -> NameEntry:
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


def check_pypi(entry: NameEntry, cache: Path, options: Options, index: str = PYPI_URL) -> tuple[bool, str, str]:
    """Pin one name to a release, fetch its sdist into the cache and judge its files."""
    if entry.problem:
        return False, entry.problem, ""
    data = pypi_json(entry.name, index)
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
        project = fetch(source, cache, sdist_url=sdist.get("url"), sdist_sha256=sdist.get("digests", {}).get("sha256"))
    except FetchError as exc:
        if "cannot download" in exc.reason:
            raise Unchecked(exc.reason) from None
        return False, f"{pin}: {exc.reason}", ""
    kept, reason = assess(folder_listing(project.path), options)
    return kept, reason if kept else f"{pin}: {reason}", f"pypi:{pin}"


def pypi_candidates(entries: list[NameEntry], cache: Path, options: Options, version: str | None = None,
                    index: str = PYPI_URL) -> Iterator[Candidate]:
    """Candidates for the names of a names file; `version` is the spec of entries that have none."""
    for entry in entries:
        if version and entry.name and not entry.spec:
            entry = NameEntry(entry.text, entry.name, version)
        key = f"pypi:{canonicalize_name(entry.name) if entry.name else entry.text}{entry.spec}"
        yield Candidate(key, entry.name or entry.text, lambda e=entry: check_pypi(e, cache, options, index),
                        options.criteria(f"python={sys.version_info[0]}.{sys.version_info[1]}"))


def discover_pypi(names: Path, out: Path, cache: Path, options: Options, say: Callable[[str], None],
                  start: int | None = None, end: int | None = None, version: str | None = None,
                  index: str = PYPI_URL) -> Discovery:
    """Check the names of a names file (positions start..end) and write the repos file `out`."""
    if version:
        try:
            SpecifierSet(version)
        except InvalidSpecifier:
            raise DiscoverError(f"--version {version!r} is not a version specifier (e.g. '==2.0', '<3')") from None
    entries = read_names(names, start, end)
    header = f"miner discover --pypi {names}" + (f" (names {start or 1}..{end or 'end'})" if start or end else "")
    return run(pypi_candidates(entries, cache, options, version, index), out, header, options, say, len(entries))


# -- npm ----------------------------------------------------------------------------------------


def npm_version(name: str, spec: str = "") -> str | None:
    """The newest version of an npm package matching `spec` (npm view: the registry npm is set to);
    None when no version matches; Unchecked when the registry cannot be asked."""
    try:
        argv = host_command("view", f"{name}@{spec or 'latest'}", "version", "--json", "--loglevel=error")
        run = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    except (FileNotFoundError, subprocess.TimeoutExpired) as exc:
        raise Unchecked(f"npm view {name}: {exc}") from None
    if run.returncode != 0:
        if "E404" in run.stderr or "ETARGET" in run.stderr or "notarget" in run.stderr:
            return None
        raise Unchecked(f"npm view {name}: {' '.join(run.stderr.split())[:200]}")
    try:
        found = json.loads(run.stdout or "null")
    except ValueError:
        return None
    versions = found if isinstance(found, list) else [found]
    return str(versions[-1]) if versions and versions[-1] else None


def _npm_entry(text: str) -> NameEntry:
    name, _, spec = text.removeprefix("npm:").rpartition("@") if text.rfind("@") > 0 else (text, "", "")
    if not NPM_NAME.match(name or text):
        return NameEntry(text, problem="not an npm package name")
    return NameEntry(text, name or text, spec)


def check_npm(entry: NameEntry, cache: Path) -> tuple[bool, str, str]:
    """Pin one npm name to a version, fetch its tarball and keep it when it ships a suite miner runs
    and has runtime dependencies (what npm's break types act on)."""
    if entry.problem:
        return False, entry.problem, ""
    version = npm_version(entry.name, entry.spec)
    if version is None:
        return False, f"no version of {entry.name} matches {entry.spec or 'latest'} on the registry", ""
    pin = f"{entry.name}@{version}"
    try:
        project = fetch(Source(raw=f"npm:{pin}", kind="npm", location=pin), cache)
    except FetchError as exc:
        return False, exc.reason, ""
    deps = npm_dependencies(project.path)
    if not deps:
        return False, f"{pin}: no runtime dependencies (nothing in node_modules its code loads)", ""
    return True, f"{pin}: runs {project_command(project.path)} ({len(deps)} runtime dependencies)", f"npm:{pin}"


def discover_npm(names: Path, out: Path, cache: Path, options: Options, say: Callable[[str], None]) -> Discovery:
    """Check the npm names of a names file (NAME or NAME@RANGE a line) and write the repos file `out`."""
    entries = read_names(names, parse=_npm_entry)
    candidates = (Candidate(f"npm:{e.name or e.text}@{e.spec}", e.name or e.text,
                            lambda e=e: check_npm(e, cache), options.criteria("npm")) for e in entries)
    return run(candidates, out, f"miner discover --npm {names}", options, say, len(entries))


# -- GitHub -----------------------------------------------------------------------------------


def github_query(query: str, language: str | None = None, min_stars: int | None = None,
                 pushed_since: str | None = None) -> str:
    """The search query with the conveniences added as qualifiers (the query's own ones win)."""
    parts = [query.strip()] if query.strip() else []
    if language and "language:" not in query:
        parts.append(f"language:{language}")
    if min_stars is not None and "stars:" not in query:
        parts.append(f"stars:>={min_stars}")
    if pushed_since and "pushed:" not in query:
        parts.append(f"pushed:>={pushed_since}")
    if not parts:
        raise DiscoverError("the GitHub search query is empty (give a query or --language/--min-stars/--pushed-since)")
    return " ".join(parts)


def github_client(base_url: str = GITHUB_URL, token: str | None = None, per_page: int = 100) -> Any:
    """A PyGithub client: rate limits are left to `rate_limited` (which waits and says so);
    server errors and dropped connections are retried with a backoff."""
    from github import Auth, Github
    from urllib3.util.retry import Retry

    retry = Retry(total=5, backoff_factor=2, status_forcelist=(500, 502, 503, 504), allowed_methods=None,
                  raise_on_status=False)
    auth = Auth.Token(token) if token else None
    return Github(auth=auth, base_url=base_url.rstrip("/"), per_page=per_page, retry=retry,
                  seconds_between_requests=None, timeout=HTTP_TIMEOUT)


def github_token() -> str | None:
    return os.environ.get("GITHUB_TOKEN") or os.environ.get("GH_TOKEN") or None


def reset_wait(headers: dict[str, str] | None, now: float | None = None) -> float:
    """Seconds to wait after a rate-limit answer: Retry-After, else until X-RateLimit-Reset (plus 1 s)."""
    lower = {k.lower(): v for k, v in (headers or {}).items()}
    now = time.time() if now is None else now
    if str(lower.get("retry-after", "")).isdigit():
        return max(1.0, float(lower["retry-after"]))
    if str(lower.get("x-ratelimit-reset", "")).isdigit():
        return min(3600.0, max(1.0, float(lower["x-ratelimit-reset"]) - now + 1))
    return 60.0  # a secondary limit without a hint: GitHub asks for "a few minutes" at most


def rate_limited(call: Callable[[], Any], say: Callable[[str], None]) -> Any:
    """call(), waiting out every rate-limit answer until the reset time the API gives, then again."""
    from github import RateLimitExceededException

    while True:
        try:
            return call()
        except RateLimitExceededException as exc:
            wait = reset_wait(exc.headers)
            say(f"GitHub rate limit reached: waiting {wait:.0f}s for the reset, then resuming")
            time.sleep(wait)


def search(client: Any, query: str, say: Callable[[str], None]) -> Iterator[Any]:
    """The repositories a search finds, page after page (following the Link headers); a rate-limit
    answer in the middle is waited out and the listing resumes where it stopped."""
    from github import GithubException, RateLimitExceededException

    results = client.search_repositories(query)
    done = 0
    while True:
        try:
            for index, repo in enumerate(results):  # a new pass replays the pages already read
                if index >= done:
                    done += 1
                    yield repo
            return
        except RateLimitExceededException as exc:
            wait = reset_wait(exc.headers)
            say(f"GitHub rate limit reached: waiting {wait:.0f}s for the reset, then resuming")
            time.sleep(wait)
        except GithubException as exc:
            if done:  # a later page failed: keep what was found
                say(f"GitHub search stopped after {done} results: {_github_message(exc)}")
                return
            raise DiscoverError(f"GitHub search for {query!r} failed: {_github_message(exc)}") from None


def _github_message(exc: Any) -> str:
    data = exc.data if isinstance(exc.data, dict) else {}
    return f"{exc.status} {data.get('message') or exc.data or ''}".strip()


def check_github(repo: Any, options: Options, say: Callable[[str], None]) -> tuple[bool, str, str]:
    """Judge one repository by its tree at the default branch's commit."""
    from github import GithubException, UnknownObjectException

    try:
        sha = rate_limited(lambda: repo.get_branch(repo.default_branch).commit.sha, say)
        tree = rate_limited(lambda: repo.get_git_tree(sha, recursive=True), say)
    except UnknownObjectException:
        return False, "empty repository (its default branch has no commit)", ""
    except GithubException as exc:
        if exc.status in (409, 451, 403):
            return False, f"GitHub refused the repository: {_github_message(exc)}", ""
        raise Unchecked(f"GitHub answered {_github_message(exc)}") from None
    paths = [element.path for element in tree.tree if element.type == "blob"]
    listing = Listing(paths, config=PytestConfig(source="pytest.ini") if "pytest.ini" in paths else PytestConfig())
    kept, reason = assess(listing, options)
    if tree.raw_data.get("truncated") and not kept:
        reason += " (the tree is too large for one listing: judged on its first part)"
    return kept, reason, f"{repo.clone_url}@{sha}"


def github_candidates(client: Any, query: str, options: Options, say: Callable[[str], None],
                      host: str) -> Iterator[Candidate]:
    for repo in search(client, query, say):
        yield Candidate(f"github:{host}/{repo.full_name}", repo.full_name,
                        lambda r=repo: check_github(r, options, say), options.criteria())


def discover_github(query: str, out: Path, options: Options, say: Callable[[str], None],
                    base_url: str = GITHUB_URL, token: str | None = None) -> Discovery:
    """Search GitHub (or a GitHub Enterprise API at base_url) and write the repos file `out`."""
    client = github_client(base_url, token)
    host = urllib.parse.urlsplit(base_url).netloc or base_url
    header = f"miner discover --github {query!r}"
    return run(github_candidates(client, query, options, say, host), out, header, options, say)
