"""Python's targets: what of a Python project's environment a break may touch.

miner.inverters.targets.enumerate_targets calls `targets` for a Python project (through
miner.ecosystems); the files, variables and state the code names are enumerated by the core's
functions (its TargetKit), fed with what the Python code names (`code_facts`, from the
tree-sitter parse):

  distribution  what the project requires, transitively (its own at depth 0), minus pip,
                setuptools, wheel, pytest, its plugins and everything only they need
  module        the importable top-level module of each such distribution (one file to break)
  script        the console scripts of those distributions and the project's own
  submodule     module files below a dependency's top level (pkg/sub.py), a few per distribution
  bytecode      the cached bytecode of the project's own modules and of its dependencies' modules
  setting       process-wide settings the code relies on without naming them: the interpreter
                (python), warnings, locale, timezone, optimize (always); tls (a CA-bundle variable
                the healthy environment sets, for code that speaks TLS), proxy (HTTP clients talking
                to a local server), resolver (code that names localhost), user-config (a config the
                program also reads from ~/.config), pip (tests or code that run pip)
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from typing import Any

from miner.ecosystems.base import CodeFacts, TargetKit
from miner.ecosystems.python.code import parse_files
from miner.ecosystems.python.graph import canonical, module_names
from miner.models import PROJECT_DIR, HealthyState, Project, Target
from miner.projectfiles import in_test_tree, is_runner_config, project_files, test_file_of

MAX_FILE_BYTES = 1024 * 1024  # project files larger than this are not read for a stated variable
TOOLING_ROOTS = {"pip", "setuptools", "wheel", "pytest", "distribute", "pkg-resources", "virtualenv"}
SUBMODULES_PER_DIST = 8  # submodule and bytecode targets per dependency (the graph ranks them)
CA_VARIABLES = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")
TLS_MODULES = {"ssl", "urllib", "http", "requests", "httpx", "urllib3", "aiohttp", "httplib2"}
HTTP_MODULES = {"urllib", "requests", "httpx", "urllib3", "aiohttp", "httplib2"}
LOCAL_HOSTS = ("localhost", "127.0.0.1")
ALWAYS_SETTINGS = ("python", "warnings", "locale", "timezone", "optimize")


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
    tests = {path for path in map(test_file_of, healthy.outcomes) if path}
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


def targets(project: Project, healthy: HealthyState, files: list[str], kit: TargetKit) -> list[Target]:
    """Every target of a Python project, grouped by kind (each group sorted), the core's kinds
    (`kit`: files, variables, state, fed with what the code names) among them."""
    facts = code_facts(project.path, [f for f in files if f.endswith(".py")])
    packages = package_targets(healthy)
    submodules = submodule_targets(healthy)
    file_like = kit.file_targets(project.path, files, healthy, facts)
    configs = [t for t in file_like if t.kind == "config"]
    modules = [t for t in packages if t.kind == "module"] + submodules
    return [*packages, *submodules, *file_like, *kit.envvar_targets(healthy, facts),
            *bytecode_targets(project, healthy, modules), *setting_targets(project, healthy, facts, configs),
            *kit.state_targets(project, facts)]
