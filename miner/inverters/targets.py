"""The one target enumeration: everything of a project a break may touch, with its facts.

The crawl (miner.pipeline.choose_candidates) and `miner graph` both call `enumerate_targets`;
the graph only ranks and predicts what it returns (miner.graph.select_targets), and the
procedural inverter (miner.inverters.procedural) decides how to break each target.

    targets = enumerate_targets(project, healthy, extra=backend_targets)

Read from the project's files on the host (project.path: the files miner.projectfiles calls
project files), its code (parsed once with tree-sitter by miner.ecosystems.python.code: `code_facts`) and
the healthy state:

  distribution  what the project requires, transitively (its own at depth 0), minus pip,
                setuptools, wheel, pytest, its plugins and everything only they need
  module        the importable top-level module of each such distribution (one file to break)
  script        the console scripts of those distributions and the project's own
  config        ini/cfg/toml/yaml/json files its format's parser accepts
  data          other files whose name a string in the code mentions
  envvar        variables the code reads that the healthy environment sets
  submodule     module files below a dependency's top level (pkg/sub.py), a few per distribution
  bytecode      the cached bytecode of the project's own modules and of its dependencies' modules
  setting       process-wide settings the code relies on without naming them: the interpreter
                (python), warnings, locale, timezone, optimize (always); tls (a CA-bundle variable
                the healthy environment sets, for code that speaks TLS), proxy (HTTP clients talking
                to a local server), resolver (code that names localhost), user-config (a config the
                program also reads from ~/.config), pip (tests or code that run pip)
  state         run-time state the code names: lock and PID files, the user's cache folder
  extra         what the caller adds: the backend's system and service targets
  node-package  (npm's projects) the installed packages the project's runtime dependencies reach

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

from miner import ecosystems
from miner.ecosystems.node import npm
from miner.graph import canonical, module_names, parse_files
from miner.models import PROJECT_DIR, HealthyState, Project, Target
from miner.projectfiles import in_test_tree, is_runner_config, may_be_target, project_files, test_file_of

MAX_FILE_BYTES = 1024 * 1024  # config/data files are embedded (base64) in the fix script
CONFIG_FORMATS = {".ini": "ini", ".cfg": "ini", ".toml": "toml", ".yaml": "yaml", ".yml": "yaml", ".json": "json"}
TOOLING_ROOTS = {"pip", "setuptools", "wheel", "pytest", "distribute", "pkg-resources", "virtualenv"}
FLAG_WORDS = {"true", "false", "1", "0", "yes", "no", "on", "off"}
EVIDENCE_FILE_BYTES = 256 * 1024  # project files larger than this are not read for stated values
SQLITE_MAGIC = b"SQLite format 3\x00"
SUBMODULES_PER_DIST = 8  # submodule and bytecode targets per dependency (the graph ranks them)
CA_VARIABLES = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")
TLS_MODULES = {"ssl", "urllib", "http", "requests", "httpx", "urllib3", "aiohttp", "httplib2"}
HTTP_MODULES = {"urllib", "requests", "httpx", "urllib3", "aiohttp", "httplib2"}
LOCAL_HOSTS = ("localhost", "127.0.0.1")
ALWAYS_SETTINGS = ("python", "warnings", "locale", "timezone", "optimize")
# Files a traced program reads that are its code or its package manifest, not its environment.
CODE_SUFFIXES = {".py", ".pyc", ".js", ".mjs", ".cjs", ".ts", ".node", ".rb", ".pl", ".pm", ".php", ".lua", ".sh",
                 ".go", ".java", ".class", ".jar", ".so"}
MANIFEST_NAMES = {"package.json", "package-lock.json", "npm-shrinkwrap.json", "yarn.lock", "pnpm-lock.yaml",
                  "Gemfile", "Gemfile.lock", "go.mod", "go.sum", "Cargo.toml", "Cargo.lock", "composer.json"}


# ---------------------------------------------------------------- what the code names


@dataclass(frozen=True)
class CodeFacts:
    """What the project's Python code names, from its tree-sitter parse."""

    strings: frozenset[str] = frozenset()  # string literals, path expressions, variable and program names
    env_reads: frozenset[str] = frozenset()  # environment variables read
    names: frozenset[str] = frozenset()  # last path component of each string
    env_defaults: frozenset[tuple[str, str, str]] = frozenset()  # (variable, default, file) of a read with one
    imports: frozenset[str] = frozenset()  # top-level modules imported (code and tests; `python -m x` too)

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
    imports: set[str] = set()
    for rel, source in parse_files(root, py_files).items():
        scope = source.everything()
        strings |= scope.paths | scope.envvars | scope.sets_env | scope.commands
        env_reads |= scope.envvars
        defaults |= {(name, value, rel) for name, value in scope.env_defaults}
        imports |= {module.split(".", 1)[0] for level, module, _ in scope.imports if not level and module}
    names = {re.split(r"[/\\]", s.strip())[-1] for s in strings}
    return CodeFacts(strings=frozenset(strings), env_reads=frozenset(env_reads), names=frozenset(names),
                     env_defaults=frozenset(defaults), imports=frozenset(imports))


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
        "has_bom": data.startswith(b"\xef\xbb\xbf"),
        "lines": data.count(b"\n"),
        "sqlite": data.startswith(SQLITE_MAGIC),
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
            "has_console_scripts": bool(dist.console_scripts), "has_extensions": bool(dist.extensions)}))
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


def _module_of(path: str) -> str | None:
    """The dotted module of a site-packages-relative .py file (a package's __init__ is the package)."""
    parts = list(PurePosixPath(path).with_suffix("").parts)
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts) if parts and all(p.isidentifier() for p in parts) else None


def submodule_targets(healthy: HealthyState) -> list[Target]:
    """A few module files below each dependency's top level (shallowest first), outside its tests."""
    dists = {canonical(d.name): d for d in healthy.inventory}
    own = {canonical(n) for n in healthy.project_dists}
    targets = []
    for name, depth in dependency_depths(healthy).items():
        dist = dists[name]
        if name in own:
            continue
        tops = {t for t in dist.top_level if not t.startswith("_")}
        found = []
        for path in dist.files:
            module = _module_of(path)
            if (not module or "." not in module or module.split(".", 1)[0] not in tops
                    or in_test_tree(path) or module.rsplit(".", 1)[-1].startswith("__")):
                continue
            found.append((module.count("."), path, module))
        for _, path, module in sorted(found)[:SUBMODULES_PER_DIST]:
            targets.append(Target(kind="submodule", name=module, path=path, attrs={
                "dist": name, "version": dist.version, "depth": depth, "top": module.split(".", 1)[0],
                "package": path.endswith("/__init__.py")}))
    return targets


def bytecode_targets(project: Project, healthy: HealthyState, modules: list[Target]) -> list[Target]:
    """The cached bytecode of the project's own importable modules (outside its tests), and of the
    dependencies' module and submodule targets. `path` is the source file's sandbox path."""
    files = [f for f in project_files(project.path) if f.endswith(".py")]
    tests = test_files_of(healthy)
    own = sorted(canonical(n) for n in healthy.project_dists)
    versions = {canonical(d.name): d.version for d in healthy.inventory}
    dist = own[0] if own else ""
    on_index = project.source.kind == "pypi"
    targets = []
    for rel, module in sorted(module_names(files).items()):
        if (in_test_tree(rel, tests) or is_runner_config(rel) or not may_be_target_code(rel)
                or not all(part.isidentifier() for part in module.split("."))):
            continue
        wheel_path = module.replace(".", "/") + ("/__init__.py" if rel.endswith("/__init__.py") else ".py")
        targets.append(Target(kind="bytecode", name=module, path=f"{PROJECT_DIR}/{rel}", attrs={
            "owner": "project", "module": module, "file": wheel_path, "dist": dist,
            "version": versions.get(dist, ""), "on_index": on_index and bool(dist)}))
    for target in modules:
        targets.append(Target(kind="bytecode", name=target.name, path=f"{healthy.site_packages}/{target.path}", attrs={
            "owner": "dependency", "module": target.name, "file": target.path, "dist": target.attrs["dist"],
            "version": target.attrs["version"], "on_index": True, "depth": target.attrs.get("depth", 1)}))
    return targets


def may_be_target_code(rel: str) -> bool:
    """A project Python file whose bytecode may be broken: not a script of the build or the docs."""
    parts = PurePosixPath(rel).parts
    return not (parts[0] in ("docs", "doc", "examples", "benchmarks", "scripts") or PurePosixPath(rel).name in (
        "setup.py", "noxfile.py", "conftest.py", "__main__.py"))


def _names_local_host(facts: CodeFacts) -> bool:
    return any(host in text for text in facts.strings for host in LOCAL_HOSTS)


def _user_config(project: Project, healthy: HealthyState, facts: CodeFacts,
                 configs: list[Target]) -> dict[str, Any] | None:
    """Where the program reads a config of its user (XDG_CONFIG_HOME or ~/.config, then "<app>/<name>"
    with <name> one of the project's own config files), or None."""
    if "XDG_CONFIG_HOME" not in facts.env_reads and not any(".config" in s for s in facts.strings):
        return None
    for config in configs:
        rel = config.path or config.name
        name = PurePosixPath(rel).name
        for text in sorted(facts.strings):
            parts = PurePosixPath(text.strip()).parts
            if len(parts) >= 2 and parts[-1] == name and parts[-2].isidentifier() and not rel.endswith(text.strip()):
                return {"user_path": f"{parts[-2]}/{name}", "project_config": rel,
                        "format": config.attrs.get("format")}
    return None


def setting_targets(project: Project, healthy: HealthyState, facts: CodeFacts,
                    configs: list[Target]) -> list[Target]:
    """The process-wide settings the code relies on (see the module docstring)."""
    targets = [Target(kind="setting", name=aspect, attrs={"aspect": aspect}) for aspect in ALWAYS_SETTINGS]
    imports = facts.imports
    ca = next((name for name in CA_VARIABLES if name in healthy.env), None)
    if ca and imports & TLS_MODULES:
        value = healthy.env[ca]
        stated = _stated(project.path, ca, value.removeprefix(PROJECT_DIR + "/"))
        targets.append(Target(kind="setting", name="tls", attrs={
            "aspect": "tls", "variable": ca, "value": value, "stated_in": stated, "stated": bool(stated)}))
    local = _names_local_host(facts)
    if local and imports & HTTP_MODULES:
        targets.append(Target(kind="setting", name="proxy", attrs={"aspect": "proxy"}))
    if any("localhost" in text for text in facts.strings):
        targets.append(Target(kind="setting", name="resolver", attrs={"aspect": "resolver", "host": "localhost"}))
    user = _user_config(project, healthy, facts, configs)
    if user:
        targets.append(Target(kind="setting", name="user-config", attrs={"aspect": "user-config", **user}))
    if "pip" in imports or any(re.search(r"\bpip3?\b", c) for c in facts.strings if " " in c or c.startswith("pip")):
        targets.append(Target(kind="setting", name="pip", attrs={"aspect": "pip"}))
    return targets


def _stated(root: Path, key: str, value: str) -> list[str]:
    """Project files (outside the test tree) with a line naming both the variable and its value."""
    pattern = re.compile(rf"\b{re.escape(key)}\b.*{re.escape(value)}")
    found = []
    for rel in project_files(root):
        path = root / rel
        if in_test_tree(rel) or path.stat().st_size > MAX_FILE_BYTES:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if any(pattern.search(line) for line in text.splitlines()):
            found.append(rel)
    return found


def state_targets(project: Project, facts: CodeFacts) -> list[Target]:
    """Lock and PID files the code names (in a folder of the project, or under ~), and the user's
    cache folder when the code keeps one there."""
    targets: dict[str, Target] = {}
    for text in sorted(facts.strings):
        text = text.strip()
        name = PurePosixPath(text).name
        role = "lock" if name.endswith(".lock") else "pid" if name.endswith(".pid") else None
        if not role or "%" in text or "{" in text:
            continue
        if text.startswith("~/"):
            where, path = "home", text
        elif not text.startswith("/") and ".." not in text and (project.path / text).parent.is_dir() \
                and not in_test_tree(text) and not (project.path / text).exists():
            where, path = "project", text
        else:
            continue
        targets.setdefault(path, Target(kind="state", name=f"{role}:{path}", path=path,
                                        attrs={"role": role, "where": where}))
    if "XDG_CACHE_HOME" in facts.env_reads or any(".cache" in s for s in facts.strings):
        targets["~/.cache"] = Target(kind="state", name="cache:~/.cache", path="~/.cache",
                                     attrs={"role": "cache", "where": "home"})
    return list(targets.values())


def _value_kind(value: str) -> str:
    if value.lower() in FLAG_WORDS:
        return "bool"
    if re.fullmatch(r"-?\d+", value):
        return "int"
    if "://" in value:
        return "url"
    return "path" if "/" in value else "str"


def envvar_targets(healthy: HealthyState, facts: CodeFacts) -> list[Target]:
    """Variables the code reads that the healthy environment (the shell's startup file) sets."""
    return [Target(kind="envvar", name=name, attrs={"value": healthy.env[name], "value_kind": _value_kind(
        healthy.env[name]), "where": "env-file"}) for name in sorted(facts.env_reads) if name in healthy.env]


def image_variable_targets(healthy: HealthyState) -> list[Target]:
    """Variables a Dockerized project's image sets (its ENV), as its traced run recorded them."""
    variables = ((healthy.system or {}).get("trace") or {}).get("variables") or {}
    return [Target(kind="envvar", name=name, attrs={"value": value, "value_kind": _value_kind(value),
                                                     "where": "image"}) for name, value in sorted(variables.items())]


def _allowed_extra(target: Target, tests: set[str]) -> bool:
    """A backend's target that names a project file (a service's config) obeys rule 7 too."""
    path = target.path or ""
    return not path or path.startswith("/") or may_be_target(path, tests)


def traced_files(healthy: HealthyState) -> list[str]:
    """Project files the traced healthy run read (never wrote), code and package manifests left out."""
    entries = ((healthy.system or {}).get("trace") or {}).get("files") or []
    return sorted({e["rel"] for e in entries if e.get("rel") and not e.get("write")
                   and PurePosixPath(e["rel"]).suffix.lower() not in CODE_SUFFIXES
                   and PurePosixPath(e["rel"]).name not in MANIFEST_NAMES})


def enumerate_targets(project: Project, healthy: HealthyState, extra: Iterable[Target] = ()) -> list[Target]:
    """Every target of the project worth trying, grouped by kind (each group sorted), then `extra`.

    A project outside the Python ecosystem (miner.ecosystems) gets the project files its traced
    run read and `extra` (what lies beneath it, from the same trace): the venv, interpreter and
    distributions beneath it are miner's, not its own.
    """
    files = project_files(project.path)
    tests = test_files_of(healthy)
    if ecosystems.PYTHON not in ecosystems.detect(files, healthy):
        read = traced_files(healthy)
        facts = CodeFacts(names=frozenset(PurePosixPath(rel).name for rel in read))
        return [*npm.package_targets(project.path, healthy.node_packages), *npm.setting_targets(healthy.node_packages),
                *file_targets(project.path, [f for f in read if f in files], healthy, facts),
                *image_variable_targets(healthy), *(t for t in extra if _allowed_extra(t, tests))]
    facts = code_facts(project.path, [f for f in files if f.endswith(".py")])
    packages = package_targets(healthy)
    submodules = submodule_targets(healthy)
    file_like = file_targets(project.path, files, healthy, facts)
    configs = [t for t in file_like if t.kind == "config"]
    modules = [t for t in packages if t.kind == "module"] + submodules
    return [*packages, *submodules, *file_like, *envvar_targets(healthy, facts),
            *bytecode_targets(project, healthy, modules), *setting_targets(project, healthy, facts, configs),
            *state_targets(project, facts), *(t for t in extra if _allowed_extra(t, tests))]
