"""Python's part of the dependency graph: its distributions, modules, functions, console scripts,
and what each test of pytest's runs (miner.graph.build calls it for a Python project, through miner.ecosystems).

Each Python file is parsed by miner.ecosystems.python.code; installed distributions come from the
healthy inventory (top-level modules, files, requirements, console scripts); in containers, the
system inventory adds the shared libraries extension modules load and their Debian packages.
Calls between the project's functions are matched by name among the modules a scope can reach
through imports, so a test depends on the functions it calls rather than on everything its
imports contain.

Nodes it adds (see miner.graph.build for the rest):

  function:<module>.<name>  a function or method of the project's code (not of test files)
  module:<dotted name>      a project module (what runs at import), or an imported top-level
                            package of an installed distribution (attribute external=True)
  distribution:<name>       an installed distribution -> the distributions it requires
  script:<name>             a console script -> its entry function and its distribution
  syslib:<soname> debpkg:<name>  (containers) a shared library and the Debian package holding it

A test depends on its file's module level, its conftest files, its own body, class and setup
code, the fixtures it requests (by name), the project functions those call, pytest itself, its
plugins and its config file.

    PythonGraph(builder).add_code(); ...link_test(node, test_id); ...link_probe(node, probe_id, kind, probe)
"""

from __future__ import annotations

import os
import re
import sys
from collections import defaultdict
from pathlib import Path, PurePosixPath

import networkx as nx

from miner.ecosystems.base import GraphCalls
from miner.ecosystems.python.code import MAIN_SCOPE, Scope, SourceFile, last_name, parse_files
from miner.models import Probe, Target
from miner.projectfiles import is_test_file, nearest, suffix_matches, test_file_of

LISTING_NAMES = {"glob", "rglob", "iglob", "iterdir", "listdir", "scandir", "walk", "copytree"}
CLASS_SETUP = {"setUp", "tearDown", "setUpClass", "tearDownClass", "asyncSetUp", "asyncTearDown",
               "setup_method", "teardown_method", "setup_class", "teardown_class", "setup", "teardown"}
MODULE_SETUP = {"setup_module", "teardown_module", "setUpModule", "tearDownModule", "setup_function",
                "teardown_function"}


def canonical(name: str) -> str:
    """PEP 503 normalised distribution name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def module_names(py_files: list[str]) -> dict[str, str]:
    """relative path -> importable dotted name, the way pytest's default import mode sees it.

    A file's import root is the first ancestor folder without __init__.py (so src/pkg/mod.py is
    pkg.mod and tests/test_x.py without tests/__init__.py is test_x). Files whose names clash
    (several conftest.py) are named after their path instead.
    """
    present = set(py_files)
    names: dict[str, str] = {}
    for rel in py_files:
        parts = list(PurePosixPath(rel).with_suffix("").parts)
        start = len(parts) - 1
        while start > 0 and "/".join(parts[:start] + ["__init__.py"]) in present:
            start -= 1
        dotted = parts[start:]
        if dotted[-1] == "__init__":
            dotted = dotted[:-1]
        names[rel] = ".".join(dotted) if dotted else parts[0]
    counts = defaultdict(int)
    for name in names.values():
        counts[name] += 1
    for rel, name in names.items():
        if counts[name] > 1:
            parts = list(PurePosixPath(rel).with_suffix("").parts)
            names[rel] = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    return names



def pytest_config(root: Path, files: list[str]) -> str | None:
    """The file pytest reads its configuration from, in pytest's own order of precedence."""
    markers = [("pytest.ini", ""), (".pytest.ini", ""), ("pyproject.toml", "[tool.pytest.ini_options]"),
               ("tox.ini", "[pytest]"), ("setup.cfg", "[tool:pytest]")]
    for name, marker in markers:
        if name in files:
            text = (root / name).read_text("utf-8", "replace")
            if not marker or marker in text:
                return name
    return None




def split_test_id(test_id: str) -> tuple[str, str]:
    """('tests/test_x.py', 'TestC.test_y') from 'tests/test_x.py::TestC::test_y[1]'."""
    bare = test_id.split("[", 1)[0]
    path, _, rest = bare.partition("::")
    return path, ".".join(p for p in rest.split("::") if p)



def target_nodes(graph: nx.DiGraph, target: Target) -> list[str] | None:
    """The graph nodes of a target of Python's kinds (None for another kind).

    A module stands for itself and for the distributions installing it (code inside other
    distributions imports it too: six is used by dateutil, not by the project).
    """
    if target.kind == "distribution":
        node = f"distribution:{canonical(target.name)}"
        return [node] if node in graph else []
    if target.kind == "bytecode" and target.attrs.get("owner") == "project":
        return [f"module:{target.name}"] if f"module:{target.name}" in graph else []
    if target.kind in ("module", "submodule", "bytecode"):
        top = target.name.split(".", 1)[0]
        nodes = [f"module:{target.name}"] if f"module:{target.name}" in graph else []
        providers = graph.graph.get("providers", {}).get(top, [])
        if target.attrs.get("dist") in providers:
            providers = [target.attrs["dist"]]
        return nodes + [f"distribution:{p}" for p in providers if f"distribution:{p}" in graph]
    return None


class PythonGraph:
    """Adds a Python project's code and installed distributions to a GraphBuilder's graph."""

    def __init__(self, builder: GraphCalls) -> None:
        healthy = self.healthy = builder.healthy
        self.root, self.graph, self.files = builder.root, builder.graph, builder.files
        self._node, self._edge, self._file_targets = builder.node, builder.edge, builder.file_targets
        files = self.files
        py_files = [f for f in files if f.endswith(".py")]
        self.modules_by_file = module_names(py_files)
        self.files_by_module = {m: f for f, m in self.modules_by_file.items()}
        self.sources = parse_files(self.root, py_files, self.modules_by_file)
        self.providers = self._providers()
        self.scripts = {s: d.name for d in healthy.inventory for s in d.console_scripts}
        own = {canonical(n) for n in healthy.project_dists}
        # own scripts named like a package of the project are matched only where they are run
        packages = {m.split(".", 1)[0] for m in self.files_by_module}
        self.own_scripts = {s for s, d in self.scripts.items() if canonical(d) in own and s not in packages}
        self.test_files = self._test_files()
        # files with a __main__ block; a test file's is not drawn (its code is folded into its tests)
        self.scripts_by_basename: dict[str, list[str]] = defaultdict(list)
        for rel, source in self.sources.items():
            if MAIN_SCOPE in source.scopes and rel not in self.test_files:
                self.scripts_by_basename[PurePosixPath(rel).name].append(rel)
        self.pytest_config = pytest_config(self.root, files)
        self.functions_by_name: dict[str, list[tuple[SourceFile, str]]] = defaultdict(list)
        self.classes_by_name: dict[str, list[tuple[SourceFile, str]]] = defaultdict(list)
        for rel, source in self.sources.items():
            if rel in self.test_files:
                continue  # test files' helpers and fixtures are folded into their tests
            for qualname in source.functions:
                self.functions_by_name[last_name(qualname)].append((source, qualname))
            for qualname in source.classes:
                self.classes_by_name[last_name(qualname)].append((source, qualname))
        self.imports_of: dict[str, set[str]] = {}
        self.lazy: dict[str, dict[str, str]] = {}  # module -> {exported name: submodule node}
        self._visible: dict[str, set[str]] = {}
        self.graph.graph["providers"] = {k: sorted(v) for k, v in self.providers.items()}
        self.system = healthy.system or {}
        self.import_loads: dict[str, list[str]] = self.system.get("import_loads", {})

    def _providers(self) -> dict[str, set[str]]:
        """Top-level import name -> the distributions that install it."""
        providers: dict[str, set[str]] = defaultdict(set)
        for dist in self.healthy.inventory:
            tops = set(dist.top_level)
            for path in dist.files:
                head = path.split("/", 1)[0]
                if head.endswith(".py"):
                    tops.add(head[:-3])
                elif "/" in path and head.isidentifier():
                    tops.add(head)
            for top in tops:
                providers[top].add(canonical(dist.name))
        return providers

    def _test_files(self) -> set[str]:
        """Python files whose functions are tests, fixtures or their helpers (folded into the tests)."""
        collected = {test_file_of(t) for t in self.healthy.outcomes}
        return {rel for rel in self.sources if is_test_file(rel)} | {rel for rel in collected if rel}

    def add_code(self) -> None:
        """Distributions, modules, functions, what each scope uses, console scripts."""
        self._add_distributions()
        for source in self.sources.values():
            self._project_module(source.module)
            if source.rel not in self.test_files:
                for qualname in source.functions:
                    self._node(f"function:{source.module}.{qualname}", "function", f"{qualname}()",
                               module=source.module, path=source.rel)
        for source in self.sources.values():
            everything = source.everything()
            self.imports_of[source.module] = {
                t.removeprefix("module:") for item in everything.imports for t in self._import_targets(item, source)
                if self.graph.nodes[t].get("project")}
        for source in self.sources.values():
            for name, module in source.lazy.items():
                level = len(module) - len(module.lstrip("."))
                found = self._import_targets((level, module.lstrip("."), ()), source)
                if found:
                    self.lazy.setdefault(source.module, {})[name] = found[0]
        for rel, source in sorted(self.sources.items()):
            self._add_module(rel, source)
        self._add_scripts()
        self.runner = self._runner_targets()  # pytest runs every test

    def _distribution(self, name: str) -> str | None:
        node = f"distribution:{canonical(name)}"
        return node if node in self.graph else None

    def _add_distributions(self) -> None:
        own = {canonical(n) for n in self.healthy.project_dists}
        for dist in self.healthy.inventory:
            name = canonical(dist.name)
            self._node(f"distribution:{name}", "distribution", f"{name} {dist.version}",
                       version=dist.version, own=name in own)
        for dist in self.healthy.inventory:
            if canonical(dist.name) in own:
                continue  # the project's own code is analysed: what it imports is known precisely
            for requirement in dist.requires:
                target = self._distribution(requirement)
                if target:
                    self._edge(f"distribution:{canonical(dist.name)}", target, "requires")

    def _add_scripts(self) -> None:
        for dist in self.healthy.inventory:
            for script, entry in dist.console_scripts.items():
                node = self._node(f"script:{script}", "script", script, entry=entry)
                self._edge(node, f"distribution:{canonical(dist.name)}", "installed-by")
                module, _, attr = (part.strip() for part in entry.partition(":"))
                for target in self._import_targets((0, module, ()), None):
                    self._edge(node, target, "entry")
                function = f"function:{module}.{attr.split('[')[0].strip()}"
                if function in self.graph:
                    self._edge(node, function, "calls")

    def _project_module(self, dotted: str) -> str | None:
        rel = self.files_by_module.get(dotted)
        if rel is None:
            return None
        node = f"module:{dotted}"
        if node not in self.graph:
            self._node(node, "module", dotted, path=rel, project=True, test=rel in self.test_files)
            self._link_package(dotted, rel)
        return node

    def _link_package(self, dotted: str, rel: str) -> None:
        """A module imports its parent package first; a src-layout package comes from its install."""
        if "." in dotted:
            parent = self._project_module(dotted.rsplit(".", 1)[0])
            if parent:
                self._edge(f"module:{dotted}", parent, "package")
            return
        if rel.split("/", 1)[0] in (dotted, f"{dotted}.py"):
            return  # importable from the project root
        if rel in self.test_files:
            return
        for name in sorted(self.providers.get(dotted, set()) & {canonical(n) for n in self.healthy.project_dists}):
            dist = self._distribution(name)
            if dist:
                self._edge(f"module:{dotted}", dist, "installed-by")

    def _external_module(self, top: str) -> str | None:
        providers = self.providers.get(top)
        if not providers:
            return None
        node = self._node(f"module:{top}", "module", top, project=False, external=True)
        for name in sorted(providers):
            dist = self._distribution(name)
            if dist:
                self._edge(node, dist, "provided-by")
        self._link_libraries(node, top)
        return node

    # -- beneath the project (container backends): shared libraries and their Debian packages
    def _system_module(self, top: str) -> str | None:
        """A standard-library module drawn only when importing it loads a shared library."""
        if not self._libraries_loaded_by(top):
            return None
        node = self._node(f"module:{top}", "module", top, project=False, external=True, stdlib=True)
        self._link_libraries(node, top)
        return node

    def _libraries_loaded_by(self, top: str) -> list[str]:
        files = set(self.import_loads.get(top, ()))
        return sorted(soname for soname, lib in self.system.get("libraries", {}).items()
                      if files & {os.path.realpath(u) for u in lib.get("used_by", ()) if u != "interpreter"})

    def _link_libraries(self, node: str, top: str) -> None:
        """import top -> the shared libraries its extension modules load (ldd) -> their packages."""
        libraries = self.system.get("libraries", {})
        for soname in self._libraries_loaded_by(top):
            lib = libraries[soname]
            library = self._node(f"syslib:{soname}", "syslib", soname, path=lib.get("path"))
            self._edge(node, library, "loads")
            package = lib.get("package")
            if package:
                name = package.split(":")[0]
                version = self.system.get("packages", {}).get(package, {}).get("version", "")
                self._edge(library, self._node(f"debpkg:{name}", "debpkg", f"{name} {version}".strip()), "installed-by")

    def _import_targets(self, item: tuple[int, str, tuple[str, ...]], source: SourceFile | None) -> list[str]:
        """Module nodes one import statement depends on (stdlib and unknown names ignored)."""
        level, module, names = item
        if level and source is not None:
            base = source.module.split(".") if source.package else source.module.split(".")[:-1]
            base = base[: len(base) - (level - 1)] if level > 1 else base
            full = ".".join(base + ([module] if module else []))
        elif level:
            return []
        else:
            full = module
        targets = [n for n in (self._project_module(f"{full}.{name}") for name in names if name != "*") if n]
        parts = full.split(".") if full else []
        for end in range(len(parts), 0, -1):
            node = self._project_module(".".join(parts[:end]))
            if node:
                return targets + [node]
        if level or not parts or parts[0] == "__future__":
            return targets
        if parts[0] in sys.stdlib_module_names:
            system = self._system_module(parts[0])
            return targets + ([system] if system else [])
        external = self._external_module(parts[0])
        return targets + ([external] if external else [])


    # -- calls between the project's functions, matched by name among the modules in reach
    def visible(self, module: str) -> set[str]:
        """Project modules a module can reach through imports (itself included)."""
        if module not in self._visible:
            seen, queue = {module}, [module]
            while queue:
                for imported in self.imports_of.get(queue.pop(), ()):
                    if imported not in seen:
                        seen.add(imported)
                        queue.append(imported)
            self._visible[module] = seen
        return self._visible[module]

    def _callees(self, names: set[str], visible: set[str]) -> set[str]:
        """Function nodes a scope may call: same-named functions and methods of visible modules.

        A class named in the scope stands for its special methods (__init__, __eq__, ...) and
        those of its bases, which run without being named.
        """
        found: set[str] = set()
        for name in names:
            for source, qualname in self.functions_by_name.get(name, ()):
                if source.module in visible:
                    found.add(f"function:{source.module}.{qualname}")
            for source, qualname in self.classes_by_name.get(name, ()):
                if source.module in visible:
                    found |= self._class_entries(source, qualname, visible, set())
        return found

    def _class_entries(self, source: SourceFile, qualname: str, visible: set[str], seen: set[str]) -> set[str]:
        key = f"{source.module}.{qualname}"
        if key in seen:
            return set()
        seen.add(key)
        found = {f"function:{source.module}.{q}" for q in source.functions
                 if q.rsplit(".", 1)[0] == qualname and last_name(q).startswith("__")}
        for base in source.classes[qualname].bases:
            for other, other_name in self.classes_by_name.get(base, ()):
                if other.module in visible:
                    found |= self._class_entries(other, other_name, visible, seen)
        return found

    # -- what a scope uses
    def _scope_targets(self, scope: Scope, source: SourceFile, visible: set[str]) -> list[tuple[str, str]]:
        """(node, relation) pairs for everything a scope uses."""
        found: list[tuple[str, str]] = []
        for item in sorted(scope.imports):
            found += [(t, "imports") for t in self._import_targets(item, source)]
        listing = bool(scope.names & LISTING_NAMES)
        for literal in sorted(scope.paths):
            found += [(t, "reads") for t in self._file_targets(literal, source.rel, listing)]
        for name in sorted(scope.envvars):
            found.append((self._node(f"envvar:{name}", "envvar", f"${name}", set=name in self.healthy.env),
                          "reads-env"))
        # Programs a scope runs: any console script called by subprocess & co, and the project's
        # own scripts wherever their name appears as a path (Path(sys.executable).parent / "tool").
        named = {PurePosixPath(c).name for c in scope.commands} & self.scripts.keys()
        named |= {PurePosixPath(p).name for p in scope.paths} & self.own_scripts
        for name in sorted(named):
            found.append((self._node(f"script:{name}", "script", name), "runs"))
        for literal in sorted(p for p in scope.paths if p.endswith(".py")):  # [sys.executable, "tool.py"]
            for rel in nearest(suffix_matches(literal.removeprefix("./"), self.scripts_by_basename), source.rel):
                found.append((f"function:{self.modules_by_file[rel]}.{MAIN_SCOPE}", "runs"))
        lazy = {self.lazy[m][n] for m in visible & self.lazy.keys() for n in scope.names & self.lazy[m].keys()}
        found += [(m, "imports") for m in sorted(lazy)]
        for module in lazy:
            visible = visible | self.visible(module.removeprefix("module:"))
        found += [(f, "calls") for f in sorted(self._callees(scope.names, visible))]
        return found

    def _add_module(self, rel: str, source: SourceFile) -> None:
        node = f"module:{source.module}"
        visible = self.visible(source.module)
        if rel in self.test_files:  # its functions are folded into its tests (see _add_tests)
            scope = self._import_time_scope(source)
        else:
            scope = Scope()
            for key, part in source.scopes.items():
                if key not in source.functions and key != MAIN_SCOPE:  # module level, class bodies, if/try
                    scope.merge(part)
            for qualname in source.functions:
                self._add_function(source, qualname, visible)
            if MAIN_SCOPE in source.scopes:  # what `python file.py` runs besides the import
                main = self._node(f"function:{source.module}.{MAIN_SCOPE}", "function", f"{rel} as a script",
                                  module=source.module, path=rel)
                self._edge(main, node, "defined-in")
                for target, relation in self._scope_targets(source.scopes[MAIN_SCOPE], source, visible):
                    self._edge(main, target, relation)
        for target, relation in self._scope_targets(scope, source, visible):
            self._edge(node, target, relation)

    def _add_function(self, source: SourceFile, qualname: str, visible: set[str]) -> None:
        node = f"function:{source.module}.{qualname}"
        self._edge(node, f"module:{source.module}", "defined-in")
        for target, relation in self._scope_targets(source.scopes.get(qualname, Scope()), source, visible):
            self._edge(node, target, relation)

    @staticmethod
    def _import_time_scope(source: SourceFile) -> Scope:
        """What a test file runs when imported: module level, class bodies, the helpers they call."""
        total, seen = Scope(), set()
        queue = ["", *source.classes]
        while queue:
            key = queue.pop()
            scope = source.scopes.get(key, Scope())
            total.merge(scope)
            for name in scope.names:
                if name in source.functions and not source.functions[name].fixture and name not in seen:
                    seen.add(name)
                    queue.append(name)
        return total

    # -- tests
    def _conftests(self, rel: str) -> list[SourceFile]:
        """conftest.py files pytest loads for a test file, nearest first."""
        found = []
        for folder in PurePosixPath(rel).parents:
            candidate = "conftest.py" if str(folder) == "." else f"{folder}/conftest.py"
            if candidate in self.sources:
                found.append(self.sources[candidate])
        return found

    def _runner_targets(self) -> list[tuple[str, str]]:
        """pytest itself, installed pytest plugins and pytest's configuration file."""
        found = []
        for dist in self.healthy.inventory:
            name = canonical(dist.name)
            if name == "pytest":
                found.append((f"distribution:{name}", "runner"))
            elif name.startswith("pytest-"):
                found.append((f"distribution:{name}", "plugin"))
        if self.pytest_config:
            name = self.pytest_config
            found.append((self._node(f"config:{name}", "config", name, path=name), "config"))
        return found

    def link_test(self, node: str, test_id: str) -> None:
        """A test's edges: pytest and its config, its file, conftests, and the scopes it runs."""
        rel, qualname = split_test_id(test_id)
        for target, relation in self.runner:
            self._edge(node, target, relation)
        source = self.sources.get(rel)
        if source is None:
            return
        self._edge(node, f"module:{source.module}", "in-file")
        conftests = self._conftests(rel)
        visible = set(self.visible(source.module))
        for conftest in conftests:
            self._edge(node, f"module:{conftest.module}", "conftest")
            visible |= self.visible(conftest.module)
        scope = Scope()
        for owner, key in self._test_scopes(source, qualname, conftests):
            scope.merge(owner.scopes.get(key, Scope()))
        self.graph.nodes[node]["sets_env"] = sorted(scope.sets_env)
        scope.sets_env = set()
        for target, relation in self._scope_targets(scope, source, visible):
            self._edge(node, target, relation)

    def _test_scopes(self, source: SourceFile, qualname: str,
                     conftests: list[SourceFile]) -> list[tuple[SourceFile, str]]:
        """The function-level scopes a test runs: itself, its classes, setup, fixtures it requests.

        A test that cannot be found (generated, inherited) is given every scope of its file.
        """
        if qualname not in source.functions:
            return [(source, key) for key in source.scopes if key]
        classes = qualname.split(".")[:-1]
        class_keys = [".".join(classes[: i + 1]) for i in range(len(classes))]
        chosen: list[tuple[SourceFile, str]] = [(source, qualname)]
        chosen += [(source, f"{c}.{m}") for c in class_keys for m in CLASS_SETUP if f"{c}.{m}" in source.functions]
        chosen += [(source, m) for m in MODULE_SETUP if m in source.functions]
        for owner in [source] + conftests:  # autouse fixtures and pytest hooks run for every test
            chosen += [(owner, f.qualname) for f in owner.functions.values() if f.qualname.count(".") == 0
                       and (f.autouse or f.qualname.startswith("pytest_"))]
        chosen += [(source, f.qualname) for f in source.functions.values()
                   if f.autouse and f.qualname.rsplit(".", 1)[0] in class_keys]
        requested = set(source.functions[qualname].usefixtures)
        for key in class_keys:
            requested |= source.classes[key].usefixtures if key in source.classes else set()
        return self._close_over_names(source, class_keys, conftests, chosen, requested)

    def _close_over_names(self, source: SourceFile, class_keys: list[str], conftests: list[SourceFile],
                          chosen: list[tuple[SourceFile, str]], requested: set[str]) -> list[tuple[SourceFile, str]]:
        """Add the helpers and fixtures that chosen scopes name, transitively."""
        seen = {(owner.rel, key) for owner, key in chosen}
        queue = list(chosen)
        names = set(requested)
        while queue or names:
            if queue:
                owner, key = queue.pop()
                if key in owner.scopes:  # request.getfixturevalue("name") names a fixture too
                    names |= owner.scopes[key].names | owner.scopes[key].paths
                continue
            found = self._lookup(names.pop(), source, class_keys, conftests)
            if found and (found[0].rel, found[1]) not in seen:
                seen.add((found[0].rel, found[1]))
                chosen.append(found)
                queue.append(found)
        return chosen

    @staticmethod
    def _lookup(name: str, source: SourceFile, class_keys: list[str],
                conftests: list[SourceFile]) -> tuple[SourceFile, str] | None:
        for key in reversed(class_keys):
            if f"{key}.{name}" in source.functions:
                return source, f"{key}.{name}"
        if name in source.functions:
            return source, name
        for conftest in conftests:
            function = conftest.functions.get(name)
            if function is not None and function.fixture:
                return conftest, name
        return None


    def link_probe(self, node: str, kind: str, rest: str, probe: Probe | None) -> None:
        """`import pkg` -> what the import reaches; a command -> the console script or file it runs."""
        if kind == "import":
            module = (probe.module if probe and probe.module else rest)
            for target in self._import_targets((0, module, ()), None):
                self._edge(node, target, "imports")
        elif kind in ("script", "command"):
            argv = probe.argv if probe and probe.argv else rest.split()
            name = PurePosixPath(argv[0]).name if argv else ""
            if name in self.scripts:
                self._edge(node, f"script:{name}", "runs")
            for arg in argv[1:]:  # python3 tool.py ...: the file runs as a script
                module = self.modules_by_file.get(arg.removeprefix("./"))
                if module and f"function:{module}.{MAIN_SCOPE}" in self.graph:
                    self._edge(node, f"function:{module}.{MAIN_SCOPE}", "runs")

    def finish(self) -> None:
        """Nothing after the tests and probes."""
