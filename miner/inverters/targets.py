"""The one target enumeration: everything of a project a break may touch, with its facts.

The crawl (miner.pipeline.choose_candidates) and `miner graph` both call `enumerate_targets`;
the graph only ranks and predicts what it returns (miner.graph.select_targets), and the
procedural inverter (miner.inverters.procedural) decides how to break each target.

    targets = enumerate_targets(project, healthy, extra=backend_targets)

Read from the project's files on the host (project.path: the files miner.projectfiles calls
project files), its code (parsed once with tree-sitter by miner.graph.parse: `code_facts`) and
the healthy state:

  distribution  what the project requires, transitively (its own at depth 0), minus pip,
                setuptools, wheel, pytest, its plugins and everything only they need
  module        the importable top-level module of each such distribution (one file to break)
  script        the console scripts of those distributions and the project's own
  config        ini/cfg/toml/yaml/json files its format's parser accepts
  data          other files whose name a string in the code mentions
  envvar        variables the code reads that the healthy environment sets
  extra         what the caller adds: the backend's system and service targets

Also here, for rule 8 (project-files evidence): `stated_in`, the project files (outside the test
tree) that state a key's value on one line: a README's configuration section, an example config,
a default in the code.

Rule 7 of the acceptance rules holds here: nothing under the project's test tree (including the
files the healthy run collected tests from) nor the runner's configuration is a target, and
neither is the project's code, packaging, docs, dotfiles or dot folders (`projectfiles.may_be_target`).
"""

from __future__ import annotations

import configparser
import json
import re
import stat
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from miner.graph import canonical, parse_files
from miner.models import HealthyState, Project, Target
from miner.projectfiles import in_test_tree, may_be_target, project_files, test_file_of

MAX_FILE_BYTES = 1024 * 1024  # config/data files are embedded (base64) in the fix script
CONFIG_FORMATS = {".ini": "ini", ".cfg": "ini", ".toml": "toml", ".yaml": "yaml", ".yml": "yaml", ".json": "json"}
TOOLING_ROOTS = {"pip", "setuptools", "wheel", "pytest", "distribute", "pkg-resources", "virtualenv"}
FLAG_WORDS = {"true", "false", "1", "0", "yes", "no", "on", "off"}
EVIDENCE_FILE_BYTES = 256 * 1024  # project files larger than this are not read for stated values


# ---------------------------------------------------------------- what the code names


@dataclass(frozen=True)
class CodeFacts:
    """What the project's Python code names, from its tree-sitter parse."""

    strings: frozenset[str] = frozenset()  # string literals, path expressions, variable and program names
    env_reads: frozenset[str] = frozenset()  # environment variables read
    names: frozenset[str] = frozenset()  # last path component of each string
    env_defaults: frozenset[tuple[str, str, str]] = frozenset()  # (variable, default, file) of a read with one

    def mentions(self, filename: str) -> bool:
        """Whether some string names the file (as itself or as a path ending in it)."""
        return filename in self.names


def code_facts(root: Path, py_files: Iterable[str] | None = None) -> CodeFacts:
    """Parse the project's Python files (all of them when not given) and gather what they name."""
    if py_files is None:
        py_files = [f for f in project_files(root) if f.endswith(".py")]
    strings: set[str] = set()
    env_reads: set[str] = set()
    defaults: set[tuple[str, str, str]] = set()
    for rel, source in parse_files(root, py_files).items():
        scope = source.everything()
        strings |= scope.paths | scope.envvars | scope.sets_env | scope.commands
        env_reads |= scope.envvars
        defaults |= {(name, value, rel) for name, value in scope.env_defaults}
    names = {re.split(r"[/\\]", s.strip())[-1] for s in strings}
    return CodeFacts(frozenset(strings), frozenset(env_reads), frozenset(names), frozenset(defaults))


# ---------------------------------------------------------------- stated values (evidence)


def project_texts(root: Path, test_files: Iterable[str] = ()) -> dict[str, list[str]]:
    """The lines of every readable text file of the project outside its test tree (the tests are
    the judge, not evidence), by project-relative path."""
    tests = set(test_files)
    texts = {}
    for rel in project_files(root):
        path = root / rel
        if in_test_tree(rel, tests) or path.stat().st_size > EVIDENCE_FILE_BYTES:
            continue
        try:
            texts[rel] = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError):
            continue
    return texts


def stated_in(root: Path, key: str, value: str, exclude: str, test_files: Iterable[str] = (),
              texts: dict[str, list[str]] | None = None) -> list[str]:
    """Project files (but `exclude`, and outside the test tree) with a line naming both `key` and,
    after it, `value`: where the project states the value (a README, an example config, a default
    in the code). `texts` (from project_texts) saves reading the files again."""
    pattern = re.compile(rf"(?<![\w.-]){re.escape(key)}(?![\w-]).*(?<![\w.-]){re.escape(value)}(?![\w-])")
    if texts is None:
        texts = project_texts(root, test_files)
    return [rel for rel, lines in texts.items() if rel != exclude and any(pattern.search(line) for line in lines)]


# ---------------------------------------------------------------- config files


def parse_config(fmt: str, text: str) -> Any:
    """The parsed content of a config text with the format's real parser (raises when invalid)."""
    if fmt == "json":
        return json.loads(text)
    if fmt == "yaml":
        return yaml.safe_load(text)
    if fmt == "toml":
        return tomllib.loads(text)
    if fmt == "ini":
        parser = configparser.ConfigParser(interpolation=None)
        parser.read_string(text)
        defaults = dict(parser.defaults())
        data = {"DEFAULT": defaults} if defaults else {}
        for section in parser.sections():
            data[section] = {k: v for k, v in parser.items(section, raw=True) if k not in defaults}
        return data
    raise ValueError(f"unknown config format {fmt}")


def config_format(rel: str, data: bytes) -> str | None:
    """ini/toml/yaml/json when the file's suffix says so and that parser accepts its content."""
    fmt = CONFIG_FORMATS.get(PurePosixPath(rel).suffix.lower())
    if not fmt:
        return None
    try:
        parsed = parse_config(fmt, data.decode("utf-8"))
    except Exception:  # noqa: BLE001 - a file its parser rejects is not a config file of that format
        return None
    return fmt if parsed is not None else None


# ---------------------------------------------------------------- targets


def _file_attrs(data: bytes, mode: int) -> dict[str, Any]:
    try:
        data.decode("utf-8")
        is_text = b"\x00" not in data
    except UnicodeDecodeError:
        is_text = False
    return {
        "size": len(data),
        "mode": format(stat.S_IMODE(mode), "o"),
        "is_text": is_text,
        "has_crlf": b"\r\n" in data,
        "lines": data.count(b"\n"),
    }


def test_files_of(healthy: HealthyState) -> set[str]:
    """The files the healthy run collected tests from."""
    return {path for path in map(test_file_of, healthy.outcomes) if path}


def file_targets(root: Path, files: list[str], healthy: HealthyState, facts: CodeFacts) -> list[Target]:
    """Config files (parseable) and data files a string in the code names, outside the test tree."""
    protected, tests = set(healthy.protected), test_files_of(healthy)
    targets = []
    for rel in files:
        if rel in protected or not may_be_target(rel, tests):
            continue
        path = root / rel
        info = path.stat()
        if info.st_size > MAX_FILE_BYTES:
            continue
        data = path.read_bytes()
        attrs = {"ext": path.suffix.lower().lstrip("."), **_file_attrs(data, info.st_mode)}
        fmt = config_format(rel, data)
        name = PurePosixPath(rel).name
        if fmt:
            targets.append(Target(kind="config", name=rel, path=rel, attrs={**attrs, "format": fmt}))
        elif data and "." in name and facts.mentions(name):
            targets.append(Target(kind="data", name=rel, path=rel, attrs=attrs))
    return targets


def _requires_closure(dists: dict[str, Any], starts: dict[str, int]) -> dict[str, int]:
    """Shortest distance of every distribution reachable from `starts` along Requires-Dist."""
    depths = {name: depth for name, depth in starts.items() if name in dists}
    changed = True
    while changed:
        changed = False
        for name, depth in sorted(depths.items()):
            for req in dists[name].requires:
                req = canonical(req)
                if req in dists and depths.get(req, depth + 2) > depth + 1:
                    depths[req] = depth + 1
                    changed = True
    return depths


def dependency_depths(healthy: HealthyState) -> dict[str, int]:
    """Distributions the project needs, by distance, without test and packaging tooling.

    The project's own distributions are at 0; installed distributions nothing requires (test
    extras, mostly) count as direct requirements (1); pip, setuptools, wheel, pytest, its
    plugins and everything they require are left out.
    """
    dists = {canonical(d.name): d for d in healthy.inventory}
    own = {canonical(n) for n in healthy.project_dists} & set(dists)
    tooling_roots = {n: 0 for n in dists if n in TOOLING_ROOTS or n.startswith("pytest-")}
    tooling = set(_requires_closure(dists, tooling_roots)) - own
    required = {canonical(r) for d in dists.values() for r in d.requires}
    leaves = {n: 1 for n in dists if n not in required and n not in tooling and n not in own}
    depths = _requires_closure(dists, {**leaves, **{n: 0 for n in own}})
    return {n: d for n, d in sorted(depths.items()) if n not in tooling}


def package_targets(healthy: HealthyState) -> list[Target]:
    """Distribution, module and console-script targets from the healthy inventory."""
    dists = {canonical(d.name): d for d in healthy.inventory}
    own = {canonical(n) for n in healthy.project_dists}
    dist_targets, modules, scripts = [], {}, []
    for name, depth in dependency_depths(healthy).items():
        dist, is_own = dists[name], name in own
        dist_targets.append(Target(kind="distribution", name=name, attrs={
            "version": dist.version, "depth": depth, "project_own": is_own, "top_level": list(dist.top_level),
            "has_console_scripts": bool(dist.console_scripts)}))
        for script, entry in sorted(dist.console_scripts.items()):
            scripts.append(Target(kind="script", name=script, path=f"bin/{script}", attrs={
                "dist": name, "entry": entry, "project_own": is_own}))
        if is_own:
            continue
        files = set(dist.files)
        for module in dist.top_level:
            if not module.isidentifier() or module.startswith("_") or module in modules:
                continue
            package = f"{module}/__init__.py" in files
            if not package and f"{module}.py" not in files:
                continue  # compiled-only or namespace module: no single file to break
            modules[module] = Target(kind="module", name=module,
                                     path=f"{module}/__init__.py" if package else f"{module}.py",
                                     attrs={"dist": name, "version": dist.version, "package": package,
                                            "depth": depth})
    return dist_targets + sorted(modules.values(), key=lambda t: t.name) + scripts


def _value_kind(value: str) -> str:
    if value.lower() in FLAG_WORDS:
        return "bool"
    if re.fullmatch(r"-?\d+", value):
        return "int"
    if "://" in value:
        return "url"
    return "path" if "/" in value else "str"


def envvar_targets(healthy: HealthyState, facts: CodeFacts) -> list[Target]:
    """Variables the code reads that the healthy environment sets."""
    return [Target(kind="envvar", name=name, attrs={"value": healthy.env[name], "value_kind": _value_kind(
        healthy.env[name])}) for name in sorted(facts.env_reads) if name in healthy.env]


def _allowed_extra(target: Target, tests: set[str]) -> bool:
    """A backend's target that names a project file (a service's config) obeys rule 7 too."""
    path = target.path or ""
    return not path or path.startswith("/") or may_be_target(path, tests)


def enumerate_targets(project: Project, healthy: HealthyState, extra: Iterable[Target] = ()) -> list[Target]:
    """Every target of the project worth trying, grouped by kind (each group sorted), then `extra`."""
    files = project_files(project.path)
    facts = code_facts(project.path, [f for f in files if f.endswith(".py")])
    tests = test_files_of(healthy)
    return [*package_targets(healthy), *file_targets(project.path, files, healthy, facts),
            *envvar_targets(healthy, facts), *(t for t in extra if _allowed_extra(t, tests))]
